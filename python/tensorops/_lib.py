"""The shared library (installed next to this file) and its C types.

Every structure here mirrors include/tensorops.h field for field.  The
enumerations whose length the header may grow (statuses, dtypes, CPU
features, kernel levels, formats) are read from the library at import time,
so a library with more entries than this file knew still loads correctly.
Structures the library writes whole (tops_tensor, tops_cpu_info) carry
trailing padding so that a longer struct in a newer library cannot write
past them.

ctypes.CDLL releases the GIL for the duration of each foreign call.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, List

MAX_RANK = 4

_NAME = "libtensorops.dylib" if sys.platform == "darwin" else "libtensorops.so"
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), _NAME)

if not os.path.exists(PATH):  # pragma: no cover - a broken install
    raise ImportError(
        f"tensorops: the shared library {PATH} is missing; install the package with `pip install .` "
        "from a tensorops checkout (it builds the library with CMake)"
    )
LIB = ctypes.CDLL(PATH)

c_int, c_int32, c_int64, c_uint32, c_uint8 = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint8
c_size_t, c_float, c_double, c_void_p, c_char_p = ctypes.c_size_t, ctypes.c_float, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER


# ---- enumerations read from the library ---------------------------------------------


def _names(fn, sentinel: bytes, limit: int = 256) -> List[str]:
    out = []
    for i in range(limit):
        name = fn(i)
        if name is None or name == sentinel:
            break
        out.append(name.decode())
    return out


LIB.tops_status_str.restype = c_char_p
LIB.tops_status_str.argtypes = [c_int]
LIB.tops_last_error.restype = c_char_p
LIB.tops_last_error.argtypes = []
LIB.tops_clear_error.restype = None
LIB.tops_clear_error.argtypes = []
LIB.tops_version.restype = c_char_p
LIB.tops_version.argtypes = []
LIB.tops_dtype_name.restype = c_char_p
LIB.tops_dtype_name.argtypes = [c_int]
LIB.tops_dtype_bits.restype = c_int
LIB.tops_dtype_bits.argtypes = [c_int]
LIB.tops_cpu_feature_name.restype = c_char_p
LIB.tops_cpu_feature_name.argtypes = [c_int]
LIB.tops_isa_name.restype = c_char_p
LIB.tops_isa_name.argtypes = [c_int]

STATUSES: List[str] = _names(LIB.tops_status_str, b"unknown_status")  # index = tops_status
DTYPES: List[str] = _names(LIB.tops_dtype_name, b"?")                  # index = tops_dtype ("none" first)
DT: Dict[str, int] = {name: i for i, name in enumerate(DTYPES)}
FEATURES: List[str] = _names(LIB.tops_cpu_feature_name, b"?")
ISAS: List[str] = _names(LIB.tops_isa_name, b"?")

DEVICE_CPU, DEVICE_CUDA = 0, 1
MULTIPLY, MULTIPLY_ACCUMULATE = 0, 1


def dtype_bytes(dt: int) -> int:
    """Bytes of one element of a byte-or-wider dtype (scale, bias, codebook planes)."""
    return (LIB.tops_dtype_bits(dt) + 7) // 8


# ---- structures -------------------------------------------------------------------------


class Format(ctypes.Structure):
    _fields_ = [("id", c_int), ("group", c_int32), ("scale", c_int)]


class FormatInfoC(ctypes.Structure):
    # The library owns the row; only this prefix is read (a longer row is fine).
    _fields_ = [("name", c_char_p), ("element", c_int), ("element_bits", c_int), ("block", c_int32),
                ("block_min", c_int32), ("block_max", c_int32), ("pack_elems", c_int32), ("pack_bytes", c_int32),
                ("scale_default", c_int), ("scale_allowed", c_uint32), ("has_bias", c_int), ("codebook", c_int),
                ("has_tensor_scale", c_int), ("gguf", c_int)]


class Device(ctypes.Structure):
    _fields_ = [("kind", c_int), ("index", c_int)]


class Exec(ctypes.Structure):
    _fields_ = [("threads", c_int), ("device", Device), ("deterministic", c_int), ("stream", c_void_p),
                ("scratch", c_void_p), ("scratch_bytes", c_size_t)]


class Plane(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("block", c_int64 * MAX_RANK),
                ("extent", c_int64 * MAX_RANK), ("stride", c_int64 * MAX_RANK)]


class TensorDesc(ctypes.Structure):
    _fields_ = [("format", Format), ("rank", c_int), ("extent", c_int64 * MAX_RANK),
                ("stride", c_int64 * MAX_RANK), ("data", c_void_p), ("data_bytes", c_size_t),
                ("scales", Plane), ("bias", Plane), ("codebook", Plane), ("tensor_scale", c_float),
                ("memory", Device)]


class Tensor(ctypes.Structure):
    _fields_ = [("magic", c_uint32), ("format", Format), ("rank", c_int),
                ("extent", c_int64 * MAX_RANK), ("stride", c_int64 * MAX_RANK),
                ("data", c_void_p), ("scales", Plane), ("bias", Plane), ("codebook", Plane),
                ("tensor_scale", c_float), ("memory", Device), ("owner_", c_void_p),
                ("packed_", c_void_p), ("_pad", c_uint8 * 256)]


class QuantizeOpts(ctypes.Structure):
    _fields_ = [("lut_iterations", c_int), ("scale_from_data", c_int)]


class MatmulDesc(ctypes.Structure):
    _fields_ = [("m_tile", c_int32), ("n_tile", c_int32), ("k", c_int64), ("transpose_left", c_int),
                ("transpose_right", c_int), ("relaxed_precision", c_int), ("mode", c_int)]


class AttentionDesc(ctypes.Structure):
    _fields_ = [("causal", c_int), ("window", c_int64), ("scale", c_float), ("softcap", c_float),
                ("q_block", c_int32), ("kv_block", c_int32), ("kv_lens", ctypes.POINTER(c_int32)),
                ("cu_seqlens_q", ctypes.POINTER(c_int32)), ("cu_seqlens_k", ctypes.POINTER(c_int32)),
                ("batch", c_int32)]


class CpuInfo(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_char * 16), ("vendor", ctypes.c_char * 16), ("model", ctypes.c_char * 64),
                ("cores_online", c_int), ("cores_configured", c_int), ("has", c_uint8 * len(FEATURES)),
                ("amx_permission", c_int), ("cache_bytes", c_int64 * 4), ("isa_best", c_int), ("isa", c_int),
                ("isa_forced", c_int), ("isa_reason", ctypes.c_char * 160),
                ("isa_available", c_uint8 * len(ISAS)), ("_pad", c_uint8 * 512)]


class BuildInfo(ctypes.Structure):
    _fields_ = [("openmp", c_int), ("cuda", c_int), ("compiler", c_char_p), ("build_type", c_char_p)]


class CudaDeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("major", c_int), ("minor", c_int), ("sm_count", c_int),
                ("memory_bytes", c_int64), ("l2_bytes", c_int64), ("clock_khz", c_int),
                ("memory_clock_khz", c_int), ("memory_bus_bits", c_int), ("runtime_version", c_int),
                ("driver_version", c_int), ("_pad", c_uint8 * 256)]


MODEL_MAX_RANK = 8
c_uint64 = ctypes.c_uint64


class ModelTensorInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_char_p), ("rank", c_int), ("shape", c_int64 * MODEL_MAX_RANK),
                ("offset", c_uint64), ("bytes", c_uint64), ("data", c_void_p), ("loadable", c_int),
                ("format", Format), ("plane_of", c_char_p), ("tensorops", c_int), ("_pad", c_uint8 * 128)]


class MetaValue(ctypes.Structure):
    # string is read with string_len (GGUF strings may hold NUL bytes), so it is a void pointer here.
    _fields_ = [("type", c_int), ("u", c_uint64), ("i", c_int64), ("f", c_double), ("string", c_void_p),
                ("string_len", c_uint64), ("array_type", c_int), ("array_count", c_uint64), ("_pad", c_uint8 * 128)]


class NamedTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("tensor", ctypes.c_void_p), ("dtype", c_char_p), ("rank", c_int),
                ("shape", P(c_int64)), ("data", c_void_p)]


# ---- prototypes ------------------------------------------------------------------------------

def _proto(name, restype, *argtypes):
    f = getattr(LIB, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_proto("tops_format_name", c_char_p, Format, ctypes.c_char_p, c_size_t)
_proto("tops_format_from_name", c_int, c_char_p, P(Format))
_proto("tops_format_get_info", P(FormatInfoC), c_int)
_proto("tops_format_resolve", c_int, Format, P(Format))
_proto("tops_format_bits_per_weight", c_double, Format, c_int64)
_proto("tops_exec_default_threads", c_int, ctypes.c_char_p, c_size_t)
_proto("tops_exec_validate", c_int, P(Exec))
_proto("tops_tensor_view", c_int, P(TensorDesc), P(Tensor))
_proto("tops_tensor_create", c_int, Format, c_int, P(c_int64), Device, P(Tensor))
_proto("tops_tensor_destroy", None, P(Tensor))
_proto("tops_tensor_numel", c_int64, P(Tensor))
_proto("tops_tensor_data_span", c_int, P(Tensor), P(c_size_t))
_proto("tops_cpu_get_info", c_int, P(CpuInfo))
_proto("tops_get_build_info", BuildInfo)
_proto("tops_quantize", c_int, P(Tensor), P(Tensor), P(QuantizeOpts))
_proto("tops_dequantize", c_int, P(Tensor), P(Tensor))
_proto("tops_matmul2d", c_int, P(Exec), P(MatmulDesc), P(Tensor), P(Tensor), P(Tensor))
_proto("tops_matmul2d_path", c_int, P(Exec), P(MatmulDesc), P(Tensor), P(Tensor), P(Tensor), ctypes.c_char_p,
       c_size_t)
_proto("tops_pack_right", c_int, P(Exec), P(MatmulDesc), P(Tensor), P(Tensor))
_proto("tops_attention", c_int, P(Exec), P(AttentionDesc), P(Tensor), P(Tensor), P(Tensor), P(Tensor))
_proto("tops_safetensors_save", c_int, c_char_p, P(Tensor))
_proto("tops_safetensors_load", c_int, c_char_p, P(Tensor))
_proto("tops_model_open", c_int, c_char_p, P(c_void_p))
_proto("tops_model_open_buffer", c_int, c_void_p, c_size_t, P(c_void_p))
_proto("tops_model_close", None, c_void_p)
_proto("tops_model_get_kind", c_int, c_void_p)
_proto("tops_model_count", c_int64, c_void_p)
_proto("tops_model_info", c_int, c_void_p, c_int64, P(ModelTensorInfo))
_proto("tops_model_find", c_int, c_void_p, c_char_p, P(c_int64))
_proto("tops_model_tensor", c_int, c_void_p, c_char_p, P(Tensor))
_proto("tops_model_meta_count", c_int64, c_void_p)
_proto("tops_model_meta", c_int, c_void_p, c_int64, P(c_char_p), P(MetaValue))
_proto("tops_model_meta_item", c_int, c_void_p, c_int64, c_uint64, P(MetaValue))
_proto("tops_model_save", c_int, c_char_p, P(NamedTensor), c_size_t, P(c_char_p), c_size_t)
_proto("tops_cuda_device_count", c_int, P(c_int))
_proto("tops_cuda_get_device_info", c_int, c_int, P(CudaDeviceInfo))
_proto("tops_cuda_alloc", c_int, c_int, c_size_t, P(c_void_p))
_proto("tops_cuda_free", c_int, c_int, c_void_p)
_proto("tops_cuda_copy", c_int, c_void_p, Device, c_void_p, Device, c_size_t, c_void_p)
_proto("tops_cuda_synchronize", c_int, P(Exec))


def format_info_row(fid: int):
    """The traits row of format id fid, or None past the last one."""
    p = LIB.tops_format_get_info(fid)
    return p.contents if p else None


FORMAT_IDS: List[str] = []  # index = tops_format_id: the stem names ("int4-g", "packed")
while True:
    _row = format_info_row(len(FORMAT_IDS))
    if _row is None:
        break
    FORMAT_IDS.append(_row.name.decode())
FMT_PACKED = FORMAT_IDS.index("packed")


def default_exec(threads=None, device=(DEVICE_CPU, 0), stream=None) -> Exec:
    """tops_exec_default() with the caller's threads, device and stream."""
    e = Exec()
    e.threads = LIB.tops_exec_default_threads(None, 0) if threads is None else int(threads)
    e.device.kind, e.device.index = device
    e.deterministic = 0
    e.stream = stream
    return e
