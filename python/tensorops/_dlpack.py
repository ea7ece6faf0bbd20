"""DLPack through ctypes: reading a producer's capsule, and exporting one.

Consumer: `consume(obj)` calls obj.__dlpack__() (versioned capsule first,
legacy second), reads the DLTensor in it and returns a `Borrowed` that holds
the capsule.  The capsule is never renamed "used_...": while it lives, its
own destructor has not run, so the producer's memory stays valid; when the
Borrowed is dropped, the producer's destructor calls the deleter.  Nothing
is copied.

Producer: `export(...)` builds a DLManagedTensor (or the versioned one) in
ctypes memory that keeps its owner alive until a consumer calls the deleter,
or until the capsule dies unconsumed.

Layouts (DLPack 1.x): DLDevice {int32 type, int32 id}; DLDataType {uint8
code, uint8 bits, uint16 lanes}; DLTensor {data, device, ndim, dtype, shape,
strides (elements; NULL = C order), byte_offset}; DLManagedTensor {DLTensor,
manager_ctx, deleter}; DLManagedTensorVersioned {version {major, minor},
manager_ctx, deleter, flags, DLTensor}.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, Optional, Tuple

from ._errors import InvalidArgument, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice, fail

# Device types and dtype codes of dlpack.h.
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
FLAG_READ_ONLY = 1
DLPACK_MAJOR, DLPACK_MINOR = 1, 0

# (code, bits) <-> the library's dtype names.
_FROM_DL = {(KDL_FLOAT, 32): "f32", (KDL_FLOAT, 16): "f16", (KDL_BFLOAT, 16): "bf16"}
_TO_DL = {v: k for k, v in _FROM_DL.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_GetName = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_GetPointer", _api))
_IsValidRaw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetPointer", _api))
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, _CapsuleDestructor)(("PyCapsule_New", _api))

# Capsule names must outlive their capsules: static buffers.
_NAME_LEGACY = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")


# ---- consumer ---------------------------------------------------------------------------


class Borrowed:
    """A producer's tensor, read from its DLPack capsule (which it keeps alive)."""

    __slots__ = ("data", "device", "dtype", "shape", "strides", "readonly", "_keep")

    def __init__(self, data: int, device: Tuple[int, int], dtype: str, shape: Tuple[int, ...],
                 strides: Tuple[int, ...], readonly: bool, keep: Any):
        self.data = data
        self.device = device      # (tops device kind, index)
        self.dtype = dtype        # "f32" | "f16" | "bf16"
        self.shape = shape
        self.strides = strides    # elements
        self.readonly = readonly
        self._keep = keep


def device_of(obj: Any) -> Tuple[int, int]:
    """(DLPack device type, id) of a producer."""
    dev = obj.__dlpack_device__()
    return int(dev[0]), int(dev[1])


def _call_dlpack(obj: Any, stream: Optional[int], fn: str, what: str):
    """obj.__dlpack__(), asking for a versioned capsule first; an older
    producer that lacks a keyword raises TypeError and is asked again.  Host
    memory takes no stream; device memory always gets ours."""
    versioned: Dict[str, Any] = {"max_version": (DLPACK_MAJOR, DLPACK_MINOR)}
    attempts: Tuple[Dict[str, Any], ...]
    if stream is None:
        attempts = (versioned, {})
    else:
        attempts = (dict(versioned, stream=stream), {"stream": stream})
    last: Optional[BaseException] = None
    for kw in attempts:
        try:
            return obj.__dlpack__(**kw)
        except TypeError as e:
            last = e
        except BufferError as e:  # the producer cannot export it (read-only, odd dtype, ...)
            raise InvalidArgument(f"{fn}: {what} ({type(obj).__name__}): __dlpack__() refused: {e}") from e
    raise InvalidArgument(f"{fn}: {what} ({type(obj).__name__}): __dlpack__() failed: {last}")


def consume(obj: Any, fn: str, what: str, stream: Optional[int] = None) -> Borrowed:
    """Reads obj.__dlpack__() without a copy.  `stream` is the CUDA stream the
    caller will use (DLPack's convention: 1 = the legacy default stream); it
    is passed to a CUDA producer so that its pending work is ordered before
    ours, and ignored for host memory."""
    dev_type, dev_id = device_of(obj)
    if dev_type in (KDL_CPU, KDL_CUDA_HOST):
        kind, stream_arg = (0, 0), None
    elif dev_type in (KDL_CUDA, KDL_CUDA_MANAGED):
        kind, stream_arg = (1, dev_id), (1 if stream is None else stream)
    else:
        fail(UnsupportedOnDevice, fn, f"{what} lives on DLPack device type {dev_type}; tensorops reads host "
                                      "and CUDA memory")
    capsule = _call_dlpack(obj, stream_arg, fn, what)
    name_ptr = _GetName(capsule)
    name = ctypes.string_at(name_ptr) if name_ptr else b""
    readonly = False
    if name == b"dltensor_versioned":
        mt = DLManagedTensorVersioned.from_address(_GetPointer(capsule, ctypes.addressof(_NAME_VERSIONED)))
        if mt.version.major != DLPACK_MAJOR:
            fail(UnsupportedFormat, fn, f"{what} is a DLPack {mt.version.major}.{mt.version.minor} tensor; "
                                        f"tensorops reads DLPack {DLPACK_MAJOR}.x")
        readonly = bool(mt.flags & FLAG_READ_ONLY)
        dl = mt.dl_tensor
    elif name == b"dltensor":
        dl = DLManagedTensor.from_address(_GetPointer(capsule, ctypes.addressof(_NAME_LEGACY))).dl_tensor
    else:
        fail(InvalidArgument, fn, f"{what}.__dlpack__() returned a capsule named {name!r}, not a DLPack tensor")
    code, bits, lanes = dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
    dtype = _FROM_DL.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        fail(UnsupportedFormat, fn, f"{what} has DLPack dtype (code {code}, bits {bits}, lanes {lanes}); "
                                    "tensorops takes float32, float16 and bfloat16 tensors")
    ndim = dl.ndim
    if not 1 <= ndim <= 4:
        fail(ShapeMismatch, fn, f"{what} has rank {ndim}; tensors have rank 1..4")
    shape = tuple(int(dl.shape[i]) for i in range(ndim))
    if dl.strides:
        strides = tuple(int(dl.strides[i]) for i in range(ndim))
    else:  # NULL: C order
        c_order, step = [0] * ndim, 1
        for i in reversed(range(ndim)):
            c_order[i] = step
            step *= shape[i]
        strides = tuple(c_order)
    data = (dl.data or 0) + int(dl.byte_offset)
    return Borrowed(data, kind, dtype, shape, strides, readonly, (capsule, obj))


# ---- producer ------------------------------------------------------------------------------

_live: Dict[int, Any] = {}   # address of the managed struct -> what it keeps alive
_live_lock = threading.Lock()


def _release(addr: int) -> None:
    with _live_lock:
        _live.pop(addr, None)


@_Deleter
def _deleter(addr):  # called by the consumer (or by _capsule_destructor) when done
    if addr:
        _release(addr)


@_CapsuleDestructor
def _capsule_destructor(capsule):  # the capsule died: if no consumer took it, free what it holds
    try:
        for name in (_NAME_LEGACY, _NAME_VERSIONED):
            if _IsValidRaw(capsule, ctypes.addressof(name)):
                _release(_GetPointerRaw(capsule, ctypes.addressof(name)) or 0)
                return
    except Exception:  # pragma: no cover - nothing can be raised from a destructor
        pass


def export(data: int, shape: Tuple[int, ...], strides: Tuple[int, ...], dtype: str, device: Tuple[int, int],
           owner: Any, versioned: bool, readonly: bool = False):
    """A DLPack capsule over memory that `owner` keeps alive; `device` is
    (tops device kind, index); strides in elements."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * ndim)(*shape)
    strides_arr = (ctypes.c_int64 * ndim)(*strides)
    mt = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = mt.dl_tensor
    t.data = data
    t.device.device_type = KDL_CUDA if device[0] == 1 else KDL_CPU
    t.device.device_id = device[1] if device[0] == 1 else 0
    t.ndim = ndim
    code, bits = _TO_DL[dtype]
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    mt.deleter = _deleter
    if versioned:
        mt.version.major, mt.version.minor = DLPACK_MAJOR, DLPACK_MINOR
        mt.flags = FLAG_READ_ONLY if readonly else 0
    addr = ctypes.addressof(mt)
    mt.manager_ctx = addr
    with _live_lock:
        _live[addr] = (mt, shape_arr, strides_arr, owner)
    name = _NAME_VERSIONED if versioned else _NAME_LEGACY
    return _New(addr, ctypes.addressof(name), _capsule_destructor)


def live_exports() -> int:
    """How many exported capsules still hold their owners (for tests)."""
    with _live_lock:
        return len(_live)
