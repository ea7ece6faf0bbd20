"""Operands: numpy arrays, DLPack tensors and device arrays seen as tops_tensor
views (no copy unless an array's layout cannot be described, see
`operand`), and the outputs ops allocate."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _dlpack
from ._errors import (InvalidArgument, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice, check, fail)
from ._lib import DEVICE_CPU, DEVICE_CUDA, LIB, MAX_RANK, Device, Exec, Format, Tensor, TensorDesc

Dev = Tuple[int, int]  # (tops device kind, index)
HOST: Dev = (DEVICE_CPU, 0)

_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
_FORMATS: Dict[str, Format] = {}


def parse_format(name: str, fn: str) -> Format:
    """The tops_format of a name ("int4-g32", "f16"); NotFound with the library's sentence otherwise."""
    if not isinstance(name, str):
        fail(InvalidArgument, fn, f"a format is named by a string such as \"int4-g32\", not {type(name).__name__}")
    f = _FORMATS.get(name)
    if f is None:
        f = Format()
        check(LIB.tops_format_from_name(name.encode(), ctypes.byref(f)))
        _FORMATS[name] = f
    return Format(f.id, f.group, f.scale)


def format_name(f: Format) -> str:
    buf = ctypes.create_string_buffer(64)
    return LIB.tops_format_name(f, buf, 64).decode()


# ---- dtypes -------------------------------------------------------------------------------


def bfloat16_dtype(fn: str):
    """numpy's dtype for bfloat16 (ml_dtypes), or UnsupportedFormat naming what to install."""
    try:
        import ml_dtypes  # noqa: PLC0415
    except ImportError:
        fail(UnsupportedFormat, fn, "a bfloat16 numpy array needs the ml_dtypes package (pip install ml_dtypes); "
                                    "or pass out= a bfloat16 DLPack tensor (torch)")
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(name: str, fn: str) -> np.dtype:
    if name == "bf16":
        return bfloat16_dtype(fn)
    return np.dtype({"f32": np.float32, "f16": np.float16}[name])


_DTYPE_NAMES = {"f32": "f32", "float32": "f32", "float": "f32", "f16": "f16", "float16": "f16", "half": "f16",
                "bf16": "bf16", "bfloat16": "bf16"}


def dtype_name(dtype: Any, fn: str, what: str = "dest_dtype") -> str:
    """"f32" | "f16" | "bf16" of a dtype given as a name, a numpy dtype or type, or a torch dtype."""
    if isinstance(dtype, str):
        key = dtype.lower()
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = str(dtype).rsplit(".", 1)[-1]  # torch.float16 -> "float16"
    name = _DTYPE_NAMES.get(key)
    if name is None:
        fail(UnsupportedFormat, fn, f"{what} is {dtype!r}; it must be float32, float16 or bfloat16")
    return name


def _np_name(dtype: np.dtype) -> Optional[str]:
    if dtype.kind == "f" and dtype.itemsize == 4:
        return "f32"
    if dtype.kind == "f" and dtype.itemsize == 2:
        return "f16"
    if dtype.name == "bfloat16" and dtype.itemsize == 2:  # ml_dtypes, without importing it
        return "bf16"
    return None


# ---- views --------------------------------------------------------------------------------


class Operand:
    """A validated tops_tensor view plus whatever keeps its memory alive."""

    __slots__ = ("t", "keep", "device", "dtype", "shape", "strides")

    def __init__(self, t: Tensor, keep: Any, device: Dev, dtype: str, shape: Tuple[int, ...],
                 strides: Tuple[int, ...]):
        self.t, self.keep, self.device, self.dtype = t, keep, device, dtype
        self.shape, self.strides = shape, strides

    @property
    def ref(self):
        return ctypes.byref(self.t)


_PLAIN: Dict[str, Format] = {}
_DEVICE_STRUCTS: Dict[Dev, Device] = {}


def view_plain(dtype: str, shape: Sequence[int], strides: Sequence[int], data: int, device: Dev, keep: Any,
               fn: str) -> Operand:
    """tops_tensor_view of an f32/f16/bf16 tensor (strides in elements)."""
    d = TensorDesc()
    f = _PLAIN.get(dtype)
    if f is None:
        f = _PLAIN[dtype] = parse_format(dtype, fn)
    d.format = f  # (a struct assignment copies)
    n = len(shape)
    d.rank = n
    d.extent[:n] = shape
    d.stride[:n] = strides
    span = 1
    for e, s in zip(shape, strides):
        if e > 1:
            span += (e - 1) * s
    d.data = data
    d.data_bytes = span * _ITEMSIZE[dtype] if min(shape, default=0) > 0 else 0
    dev = _DEVICE_STRUCTS.get(device)
    if dev is None:
        dev = _DEVICE_STRUCTS[device] = Device(*device)
    d.memory = dev
    t = Tensor()
    check(LIB.tops_tensor_view(ctypes.byref(d), ctypes.byref(t)))
    return Operand(t, keep, device, dtype, tuple(shape), tuple(strides))


def _layout_ok(arr: np.ndarray) -> bool:
    """Strides the library can take without a copy: native byte order, aligned,
    positive multiples of the item size (anything where the extent is 1)."""
    flags = arr.flags
    if not arr.dtype.isnative or not flags.aligned:
        return False
    if flags.c_contiguous:
        return True
    for e, s in zip(arr.shape, arr.strides):
        if e > 1 and (s <= 0 or s % arr.itemsize):
            return False
    return True


def _check_rank_and_size(shape: Tuple[int, ...], fn: str, what: str) -> None:
    if not 1 <= len(shape) <= MAX_RANK:
        fail(ShapeMismatch, fn, f"{what} has rank {len(shape)}; tensors have rank 1..{MAX_RANK}")
    if any(e < 1 for e in shape):
        fail(ShapeMismatch, fn, f"{what} has shape {list(shape)}; every extent must be >= 1")


_NP_NAMES: Dict[np.dtype, str] = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


def numpy_operand(arr: np.ndarray, fn: str, what: str, writable: bool = False) -> Operand:
    name = _NP_NAMES.get(arr.dtype) or _np_name(arr.dtype)
    if name is None:
        fail(UnsupportedFormat, fn, f"{what} has dtype {arr.dtype}; it must be float32, float16 or bfloat16 "
                                    "(convert it first, e.g. with .astype(np.float32))")
    _check_rank_and_size(arr.shape, fn, what)
    if writable and not arr.flags.writeable:
        fail(InvalidArgument, fn, f"{what} is read-only; the result is written into it")
    if not _layout_ok(arr):
        if writable:
            fail(InvalidArgument, fn, f"{what} has strides {arr.strides} (bytes) with dtype {arr.dtype.str}; the "
                                      "result is written in place, so it must be native-endian, aligned, with "
                                      "positive strides")
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    size = arr.itemsize
    strides = tuple(s // size if e > 1 else 0 for e, s in zip(arr.shape, arr.strides))
    return view_plain(name, arr.shape, strides, arr.ctypes.data, HOST, arr, fn)


def dlpack_operand(obj: Any, fn: str, what: str, writable: bool = False, stream: Optional[int] = None) -> Operand:
    b = _dlpack.consume(obj, fn, what, stream)
    _check_rank_and_size(b.shape, fn, what)
    if writable and b.readonly:
        fail(InvalidArgument, fn, f"{what} is a read-only DLPack tensor; the result is written into it")
    for e, s in zip(b.shape, b.strides):
        if e > 1 and s <= 0:
            fail(InvalidArgument, fn, f"{what} has strides {list(b.strides)}; tensorops reads positive strides "
                                      "only (make it contiguous first)")
    strides = tuple(s if e > 1 else 0 for e, s in zip(b.shape, b.strides))
    return view_plain(b.dtype, b.shape, strides, b.data, b.device, b, fn)


def operand(x: Any, fn: str, what: str, writable: bool = False, stream: Optional[int] = None) -> Operand:
    """Any array input as a tops_tensor view.

    numpy arrays (float32, float16, ml_dtypes.bfloat16) are read in place
    when their strides are positive multiples of the item size; otherwise
    (negative or zero strides, unaligned or byte-swapped data) an input is
    copied to a C-contiguous array first and an output is refused.  DLPack
    tensors (torch, CPU or CUDA) are read in place; strides that are not
    positive are refused.  Anything else goes through numpy.asarray()."""
    if isinstance(x, DeviceArray):
        return view_plain(x.dtype, x.shape, _contiguous(x.shape), x.ptr, x._device, x, fn)
    if isinstance(x, np.ndarray):
        return numpy_operand(x, fn, what, writable)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return dlpack_operand(x, fn, what, writable, stream)
    if writable:
        fail(InvalidArgument, fn, f"{what} is a {type(x).__name__}; it must be a numpy array or a DLPack tensor")
    try:
        arr = np.asarray(x)
    except Exception as e:  # noqa: BLE001 - any failure to make an array is the caller's input
        fail(InvalidArgument, fn, f"{what} ({type(x).__name__}) is not an array: {e}")
    return numpy_operand(arr, fn, what)


def _contiguous(shape: Sequence[int]) -> Tuple[int, ...]:
    out, s = [], 1
    for e in reversed(shape):
        out.append(s)
        s *= e
    return tuple(reversed(out))


def reshaped(op: Operand, shape: Sequence[int], fn: str) -> Optional[Operand]:
    """The same memory under another shape: every leading dimension merged
    into one ([..., M, K] -> [M', K]), or leading 1s added; None if the
    strides do not allow it."""
    shape = tuple(shape)
    if shape == op.shape:
        return op
    if len(shape) > len(op.shape) and shape[len(shape) - len(op.shape):] == op.shape and \
            all(e == 1 for e in shape[:len(shape) - len(op.shape)]):
        strides = (0,) * (len(shape) - len(op.shape)) + op.strides
    elif len(shape) == 2 and shape[1] == op.shape[-1] and len(op.shape) > 2:
        lead = [(e, s) for e, s in zip(op.shape[:-1], op.strides[:-1]) if e > 1]
        for (_, s0), (e1, s1) in zip(lead, lead[1:]):  # each dimension must step over the next one whole
            if s0 != s1 * e1:
                return None
        strides = (lead[-1][1] if lead else 0, op.strides[-1])
    else:
        return None
    data = op.t.data
    return view_plain(op.dtype, shape, strides, data, op.device, op.keep, fn)


# ---- device arrays ------------------------------------------------------------------------


class DeviceArray:
    """A C-contiguous array in CUDA device memory allocated by tensorops: the
    result of an op whose inputs live on a GPU.  Hand it to torch without a
    copy with ``torch.from_dlpack(a)`` (DLPack), or copy it to the host with
    ``a.numpy()``.  The memory is freed when the last reference (this object
    or a consumer's DLPack tensor) goes."""

    def __init__(self, shape: Sequence[int], dtype: str, device: int, _fn: str = "tensorops.DeviceArray"):
        self.shape = tuple(int(e) for e in shape)
        self.dtype = dtype_name(dtype, _fn, "dtype")
        self._device: Dev = (DEVICE_CUDA, int(device))
        self.nbytes = int(np.prod(self.shape)) * _ITEMSIZE[self.dtype]
        self._stream: Optional[int] = None
        self.ptr = 0
        p = ctypes.c_void_p()
        check(LIB.tops_cuda_alloc(int(device), max(self.nbytes, 1), ctypes.byref(p)))
        self.ptr = p.value or 0

    @property
    def device(self) -> str:
        return f"cuda:{self._device[1]}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    def _sync(self) -> None:
        """Waits for the stream that last wrote this array (ops return before the GPU is done)."""
        e = Exec()
        e.threads = 1
        e.device.kind, e.device.index = self._device
        e.stream = self._stream
        check(LIB.tops_cuda_synchronize(ctypes.byref(e)))

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the GPU work that writes this array)."""
        self._sync()
        out = np.empty(self.shape, numpy_dtype(self.dtype, "tensorops.DeviceArray.numpy"))
        check(LIB.tops_cuda_copy(out.ctypes.data, Device(DEVICE_CPU, 0), self.ptr, Device(*self._device),
                                 self.nbytes, None))
        return out

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_dlpack.KDL_CUDA, self._device[1])

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None):
        """DLPack export, no copy.  The host waits for the stream that wrote the
        array, so any consumer stream sees the finished result."""
        if copy:
            raise BufferError("tensorops.DeviceArray.__dlpack__: copy=True is not supported (export is in place)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"tensorops.DeviceArray.__dlpack__: the array lives on {self.device}")
        self._sync()
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dlpack.export(self.ptr, self.shape, _contiguous(self.shape), self.dtype, self._device, self,
                              versioned)

    def __del__(self):
        ptr = getattr(self, "ptr", 0)
        if ptr:
            self.ptr = 0
            try:
                LIB.tops_cuda_free(self._device[1], ptr)  # cudaFree waits for pending work
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


def new_output(shape: Sequence[int], dtype: str, device: Dev, fn: str):
    """A fresh output: numpy on the host, DeviceArray on a GPU."""
    if device[0] == DEVICE_CUDA:
        return DeviceArray(shape, dtype, device[1], fn)
    return np.empty(tuple(shape), numpy_dtype(dtype, fn))


def parse_device(device: Any, fn: str) -> Optional[Dev]:
    """"cpu" | "cuda" | "cuda:N" | None (= from the operands)."""
    if device is None:
        return None
    s = str(device)
    if s == "cpu":
        return HOST
    if s == "cuda":
        return (DEVICE_CUDA, 0)
    if s.startswith("cuda:") and s[5:].isdigit():
        return (DEVICE_CUDA, int(s[5:]))
    fail(InvalidArgument, fn, f"device is {device!r}; it must be \"cpu\", \"cuda\" or \"cuda:N\"")


def check_threads(threads: Any, fn: str) -> Optional[int]:
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= 4096:
        fail(InvalidArgument, fn, f"threads is {threads!r}; it must be an integer 1..4096 (None = the default)")
    return int(threads)


def check_stream(stream: Any, fn: str) -> Optional[int]:
    """A cudaStream_t as an integer handle (torch: torch.cuda.current_stream().cuda_stream); None = the
    legacy default stream."""
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) or stream < 0:
        fail(InvalidArgument, fn, f"stream is {stream!r}; it must be a cudaStream_t handle (an integer) or None")
    return int(stream) or None


def common_device(ops: Sequence[Operand], fn: str, allow_host: Sequence[bool] = ()) -> Dev:
    """The device every operand lives on (ops whose allow_host entry is True may stay on the host)."""
    device: Optional[Dev] = None
    for i, op in enumerate(ops):
        if op is None:
            continue
        if op.device == HOST and i < len(allow_host) and allow_host[i]:
            continue
        if device is None:
            device = op.device
        elif op.device != device:
            def name(d):
                return "cpu" if d == HOST else f"cuda:{d[1]}"
            fail(UnsupportedOnDevice, fn, f"operands live on {name(device)} and {name(op.device)}; they must "
                                          "share one device")
    return device or HOST
