"""Quantized tensors: Weight (planes as numpy arrays), PackedWeight (laid out
for the matmul kernels), quantize / dequantize / pack, and the library's
single-tensor safetensors files."""
from __future__ import annotations

import ctypes
import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._arrays import (HOST, Operand, check_stream, check_threads, format_name, new_output, numpy_dtype,
                      operand, parse_device, parse_format, dtype_name)
from ._errors import InvalidArgument, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice, check, fail
from ._lib import (DEVICE_CPU, DT, DTYPES, LIB, MAX_RANK, Device, Format, MatmulDesc,
                   QuantizeOpts, Tensor, TensorDesc, default_exec, dtype_bytes, format_info_row)

ArrayLike = Any


def _plane_dtype(dt: int) -> np.dtype:
    """numpy's view of a plane's entries (uint8 for e8m0 and ue4m3 codes)."""
    name = DTYPES[dt]
    if name == "f16":
        return np.dtype(np.float16)
    if name == "f32":
        return np.dtype(np.float32)
    if name == "bf16":
        try:
            import ml_dtypes  # noqa: PLC0415
            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            return np.dtype(np.uint16)
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[dtype_bytes(dt)])


def _copy_out(ptr: int, nbytes: int) -> np.ndarray:
    if nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)).copy()


def _plane_count(t: Tensor, plane) -> int:
    n = 1
    for d in range(t.rank):
        n *= plane.extent[d]
    return n


def _plane_array(a: Any, fn: str, what: str) -> np.ndarray:
    """A plane as a C-contiguous numpy array (no copy when it is one already)."""
    arr = np.ascontiguousarray(a)
    if arr.dtype.hasobject:
        fail(InvalidArgument, fn, f"{what} holds Python objects; planes are numeric arrays")
    return arr


def _check_items(arr: np.ndarray, size: int, entries: str, fn: str, what: str) -> None:
    """A plane is raw bytes (1-byte items) or items of its entries' size: a
    float32 array where f16 scales belong would be read as pairs of halves."""
    if arr.itemsize not in (1, size):
        fail(UnsupportedFormat, fn, f"{what} has dtype {arr.dtype} ({arr.itemsize}-byte items) but holds {entries} "
                                    f"entries of {size} bytes; pass them as such, or as raw bytes (uint8)")


class Weight:
    """A tensor in one of the library's formats, with its planes kept as numpy
    arrays: ``data`` (the data plane: the float elements for f32/f16/bf16,
    otherwise the packed codes or GGUF blocks as bytes, one row of
    ``shape[-1]`` elements per last-axis row), ``scales``, ``bias``,
    ``codebook`` (None where the format has none) and ``tensor_scale``
    (nvfp4's encode scale; a multiplier for every other format).  Blocks run
    along the last dimension, so a matmul weight is stored [N, K] and used
    with ``transpose_right=True`` (the default for a Weight).

    Made by :func:`quantize`, :func:`load`, or from planes one has already
    (a checkpoint's) with ``Weight(format, shape, data, scales=...)``; the
    planes are checked against the format (sizes, dtypes) and never read
    out of bounds."""

    def __init__(self, format: str, shape: Sequence[int], data: ArrayLike, scales: Optional[ArrayLike] = None,
                 bias: Optional[ArrayLike] = None, codebook: Optional[ArrayLike] = None,
                 tensor_scale: float = 1.0):
        fn = "tensorops.Weight"
        f = parse_format(format, fn)
        shape = tuple(int(e) for e in shape)
        if not 1 <= len(shape) <= MAX_RANK:
            fail(ShapeMismatch, fn, f"shape {list(shape)} has rank {len(shape)}; tensors have rank 1..{MAX_RANK}")
        self._f = f
        self._format = format_name(f)
        self._shape = shape
        self._data = _plane_array(data, fn, "data")
        self._scales = None if scales is None else _plane_array(scales, fn, "scales")
        self._bias = None if bias is None else _plane_array(bias, fn, "bias")
        self._codebook = None if codebook is None else _plane_array(codebook, fn, "codebook")
        self._tensor_scale = float(tensor_scale)
        elem = _stem(f.id)
        _check_items(self._data, {"f32": 4, "f16": 2, "bf16": 2}.get(elem, 1), elem if elem in ("f32", "f16", "bf16")
                     else "code bytes", fn, "data")
        t = self._view(len(shape), fn)  # checks the data plane's size and the planes' presence
        for what, plane, arr in (("scales", t.scales, self.scales), ("bias", t.bias, self.bias),
                                 ("codebook", t.codebook, self.codebook)):
            if arr is None:
                continue
            _check_items(arr, dtype_bytes(plane.dtype), DTYPES[plane.dtype], fn, what)
            need = _plane_count(t, plane) * dtype_bytes(plane.dtype)
            if arr.nbytes < need:
                fail(ShapeMismatch, fn, f"{what} holds {arr.nbytes} bytes; format {self.format} of shape "
                                        f"{list(shape)} needs {need} ({DTYPES[plane.dtype]} entries of extents "
                                        f"{[plane.extent[d] for d in range(t.rank)]})")
        self._t = t

    # -- the tensor view -------------------------------------------------------------------

    def _view(self, rank: int, fn: str) -> Tensor:
        """A tops_tensor over the planes, with leading 1s up to `rank`."""
        d = TensorDesc()
        d.format = self._f
        lead = rank - len(self.shape)
        d.rank = rank
        for i, e in enumerate((1,) * lead + self.shape):
            d.extent[i] = e
        d.data = self._data.ctypes.data
        d.data_bytes = self._data.nbytes
        for plane, arr in ((d.scales, self._scales), (d.bias, self._bias), (d.codebook, self._codebook)):
            if arr is not None:
                plane.data = arr.ctypes.data
        d.tensor_scale = self._tensor_scale
        d.memory = Device(DEVICE_CPU, 0)
        t = Tensor()
        check(LIB.tops_tensor_view(ctypes.byref(d), ctypes.byref(t)))
        return t

    def _operand(self, rank: Optional[int] = None, fn: str = "") -> Operand:
        t = self._t if rank is None or rank == len(self._shape) else self._view(rank, fn)
        return Operand(t, self, HOST, self._format, tuple(t.extent[d] for d in range(t.rank)), ())

    @classmethod
    def _from_tensor(cls, t: Tensor) -> "Weight":
        """Copies the planes of a contiguous host tensor (tops_tensor_create, a loader)."""
        shape = tuple(t.extent[d] for d in range(t.rank))
        span = ctypes.c_size_t()
        check(LIB.tops_tensor_data_span(ctypes.byref(t), ctypes.byref(span)))
        w = cls.__new__(cls)
        w._f = Format(t.format.id, t.format.group, t.format.scale)
        w._format = format_name(w._f)
        w._shape = shape
        data = _copy_out(t.data, span.value)
        elem = _stem(t.format.id)
        if elem in ("f32", "f16", "bf16"):
            w._data = data.view(numpy_dtype_or_bits(elem)).reshape(shape)
        else:
            w._data = data.reshape(shape[:-1] + (-1,))
        planes: List[Optional[np.ndarray]] = []
        for plane in (t.scales, t.bias, t.codebook):
            if not plane.data:
                planes.append(None)
                continue
            ext = tuple(plane.extent[d] for d in range(t.rank))
            n = _plane_count(t, plane)
            planes.append(_copy_out(plane.data, n * dtype_bytes(plane.dtype)).view(_plane_dtype(plane.dtype))
                          .reshape(ext))
        w._scales, w._bias, w._codebook = planes
        w._tensor_scale = float(t.tensor_scale)
        w._t = w._view(len(shape), "tensorops.Weight")
        return w

    # -- planes and facts (read-only attributes: the tensor view points into the planes) -------

    @property
    def format(self) -> str:
        """The format's name ("int4-g32", "nvfp4", ...)."""
        return self._format

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def data(self) -> np.ndarray:
        """The data plane (float elements for f32/f16/bf16; else bytes, [..., row bytes])."""
        return self._data

    @property
    def scales(self) -> Optional[np.ndarray]:
        """Scale plane, one entry per block ([..., ceil(K / group)]), or None."""
        return self._scales

    @property
    def bias(self) -> Optional[np.ndarray]:
        """Bias plane (int4-gG-affine), same blocks as the scales, or None."""
        return self._bias

    @property
    def codebook(self) -> Optional[np.ndarray]:
        """16 float16 entries per tensor (lut4) or per row (lut4-row), or None."""
        return self._codebook

    @property
    def tensor_scale(self) -> float:
        """nvfp4's encode scale S_enc (value = q * s_b / S_enc); a multiplier otherwise."""
        return self._tensor_scale


    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of every plane together."""
        return sum(a.nbytes for a in (self.data, self.scales, self.bias, self.codebook) if a is not None)

    @property
    def bits_per_weight(self) -> float:
        """Storage bits per element, every plane counted."""
        return 8.0 * self.nbytes / float(np.prod(self.shape))

    def planes(self) -> dict:
        """The planes by name ("data", "scales", "bias", "codebook"), present ones only."""
        return {k: v for k, v in (("data", self.data), ("scales", self.scales), ("bias", self.bias),
                                  ("codebook", self.codebook)) if v is not None}

    def __repr__(self) -> str:
        extra = f", tensor_scale={self.tensor_scale:g}" if self.tensor_scale != 1.0 else ""
        return f"Weight(format={self.format!r}, shape={self.shape}, {self.bits_per_weight:.3g} bits/weight{extra})"


def _stem(fid: int) -> str:
    """The traits row's name of a format id ("int4-g", "f16", "packed")."""
    row = format_info_row(fid)
    return row.name.decode() if row else "?"


def numpy_dtype_or_bits(name: str) -> np.dtype:
    """float32 / float16 / bfloat16 (uint16 bit patterns without ml_dtypes)."""
    if name == "bf16":
        return _plane_dtype(DT["bf16"])
    return numpy_dtype(name, "tensorops")


class PackedWeight:
    """A weight laid out once for the matmul kernels (:func:`pack`); matmul
    takes it in place of the weight, with the same ``transpose_right``.  It
    cannot be decoded or saved: keep the Weight for that."""

    def __init__(self, t: Tensor, source_format: str, shape: Tuple[int, ...], transpose_right: bool,
                 relaxed: bool, device: Tuple[int, int]):
        self._t = t
        self.format = source_format
        self.shape = shape
        self.transpose_right = transpose_right
        self.relaxed = relaxed
        self._device = device

    @property
    def device(self) -> str:
        return "cpu" if self._device[0] == DEVICE_CPU else f"cuda:{self._device[1]}"

    def _operand(self, rank: Optional[int] = None, fn: str = "") -> Operand:
        return Operand(self._t, self, self._device, "packed", self.shape, ())

    def __repr__(self) -> str:
        return (f"PackedWeight(format={self.format!r}, shape={self.shape}, transpose_right={self.transpose_right}, "
                f"relaxed={self.relaxed}, device={self.device!r})")

    def __del__(self):
        t = getattr(self, "_t", None)
        if t is not None:
            self._t = None
            try:
                LIB.tops_tensor_destroy(ctypes.byref(t))
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


# ---- quantize / dequantize / pack --------------------------------------------------------------


def _f32_host(array: ArrayLike, fn: str) -> Operand:
    """The f32 host view tops_quantize reads: f32 in place; float64 rounded to
    f32 and f16/bf16 decoded exactly, each into a new array."""
    if isinstance(array, np.ndarray) and array.dtype == np.float64:
        array = array.astype(np.float32)
    src = operand(array, fn, "array")
    if src.device != HOST:
        fail(UnsupportedOnDevice, fn, f"array lives in cuda:{src.device[1]} memory; quantize runs on the host "
                                      "(copy it to the CPU first)")
    if src.dtype == "f32":
        return src
    out = np.empty(src.shape, np.float32)
    dst = operand(out, fn, "out", writable=True)
    check(LIB.tops_dequantize(src.ref, dst.ref))
    return dst


def quantize(array: ArrayLike, format: str, *, lut_iterations: int = 0) -> Weight:
    """Quantizes an array (float32; float64, float16 and bfloat16 are
    converted to float32 first; numpy or any DLPack host tensor, rank 1..4)
    into ``format`` ("int4-g32", "mxfp4", "nvfp4", "q4_0", ... see
    :func:`formats`), blocks along the last dimension.  A block holding NaN
    or +-Inf decodes to NaN in every element.  ``lut_iterations``: k-means
    steps for lut4 (0 = the default, 8)."""
    fn = "tensorops.quantize"
    f = parse_format(format, fn)
    if isinstance(lut_iterations, bool) or not isinstance(lut_iterations, (int, np.integer)) or lut_iterations < 0:
        fail(InvalidArgument, fn, f"lut_iterations is {lut_iterations!r}; it must be an integer >= 0")
    src = _f32_host(array, fn)
    rank = src.t.rank
    ext = (ctypes.c_int64 * MAX_RANK)(*[src.t.extent[d] for d in range(rank)])
    dst = Tensor()
    check(LIB.tops_tensor_create(f, rank, ext, Device(DEVICE_CPU, 0), ctypes.byref(dst)))
    try:
        opts = QuantizeOpts(int(lut_iterations))
        check(LIB.tops_quantize(src.ref, ctypes.byref(dst), ctypes.byref(opts)))
        return Weight._from_tensor(dst)
    finally:
        LIB.tops_tensor_destroy(ctypes.byref(dst))


def dequantize(weight: Weight, dtype: Any = "f32", *, out: Optional[ArrayLike] = None) -> ArrayLike:
    """Decodes a Weight into a new array of its shape (float32 by default;
    "f16", or "bf16" with ml_dtypes), or into ``out`` (a numpy array or a
    DLPack host tensor of that shape, float32, float16 or bfloat16)."""
    fn = "tensorops.dequantize"
    if isinstance(weight, PackedWeight):
        fail(InvalidArgument, fn, "weight is a PackedWeight, which only matmul reads; dequantize the Weight it "
                                  "was packed from")
    if not isinstance(weight, Weight):
        fail(InvalidArgument, fn, f"weight is a {type(weight).__name__}; it must be a tensorops.Weight "
                                  "(tensorops.quantize makes one)")
    if out is None:
        out = new_output(weight.shape, dtype_name(dtype, fn, "dtype"), HOST, fn)
    dst = operand(out, fn, "out", writable=True)
    if dst.device != HOST:
        fail(UnsupportedOnDevice, fn, "out lives in device memory; dequantize writes host memory")
    check(LIB.tops_dequantize(weight._operand().ref, dst.ref))
    return out


def pack(weight: Union[Weight, ArrayLike], *, transpose_right: bool = True, relaxed: bool = False,
         threads: Optional[int] = None, device: Optional[str] = None, stream: Optional[int] = None) -> PackedWeight:
    """Lays a matmul weight out once for the kernels (tops_pack_right); pass
    the result to :func:`matmul` in its place.  ``transpose_right=True``:
    the weight is stored [N, K] (the usual layout, blocks along K);
    ``relaxed=True`` also stores the integer panels relaxed calls read;
    ``device="cuda:N"`` packs into that GPU's memory (CUDA builds).  The
    weight is a Weight or a float32/float16/bfloat16 array."""
    fn = "tensorops.pack"
    dev = parse_device(device, fn) or HOST
    stream = check_stream(stream, fn)
    if isinstance(weight, PackedWeight):
        fail(InvalidArgument, fn, "weight is already packed")
    src = weight._operand() if isinstance(weight, Weight) else operand(weight, fn, "weight", stream=stream)
    exec_ = default_exec(check_threads(threads, fn), dev, stream)
    desc = MatmulDesc()
    desc.transpose_right = int(bool(transpose_right))
    desc.relaxed_precision = int(bool(relaxed))
    packed = Tensor()
    check(LIB.tops_pack_right(ctypes.byref(exec_), ctypes.byref(desc), src.ref, ctypes.byref(packed)))
    fmt = weight.format if isinstance(weight, Weight) else src.dtype
    return PackedWeight(packed, fmt, src.shape, bool(transpose_right), bool(relaxed), dev)


# ---- files ------------------------------------------------------------------------------------


def save(path: Union[str, "os.PathLike[str]"], weight: Union[Weight, ArrayLike]) -> None:
    """Writes one tensor (a Weight, or a float32/float16/bfloat16 array) as the
    library's safetensors file: "weight" and its planes, with __metadata__
    naming the format (docs/formats.md).  The file appears only when complete."""
    fn = "tensorops.save"
    src = weight._operand() if isinstance(weight, Weight) else operand(weight, fn, "weight")
    if src.device != HOST:
        fail(UnsupportedOnDevice, fn, "weight lives in device memory; save writes host tensors")
    check(LIB.tops_safetensors_save(os.fsencode(path), src.ref))


def load(path: Union[str, "os.PathLike[str]"]) -> Weight:
    """Reads a safetensors file written by :func:`save` or ``tensorops
    quantize`` into a Weight (the file is untrusted: a malformed one raises
    ParseError or UnsupportedFormat with the reason)."""
    t = Tensor()
    check(LIB.tops_safetensors_load(os.fsencode(path), ctypes.byref(t)))
    try:
        return Weight._from_tensor(t)
    finally:
        LIB.tops_tensor_destroy(ctypes.byref(t))
