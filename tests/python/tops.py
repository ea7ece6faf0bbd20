"""A small ctypes loader for libtensorops (TOPS_LIB): element casts,
quantize / dequantize through owned tensors, and the format names."""
import ctypes
import os

import numpy as np
import pytest

LIB = ctypes.CDLL(os.environ.get("TOPS_LIB", os.path.join(os.path.dirname(__file__), "../../build/libtensorops.so")))
LIB.tops_last_error.restype = ctypes.c_char_p
LIB.tops_status_str.restype = ctypes.c_char_p

MAX_RANK = 4
DTYPES = ["none", "f32", "f16", "bf16", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "e8m0", "ue4m3", "mxint8",
          "i8", "u8", "i4", "u4", "i2", "u2", "i32"]
DT = {name: i for i, name in enumerate(DTYPES)}
BITS = {"f32": 32, "f16": 16, "bf16": 16, "e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4, "e8m0": 8,
        "ue4m3": 8, "mxint8": 8, "i8": 8, "u8": 8, "i4": 4, "u4": 4, "i2": 2, "u2": 2}


class Format(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("group", ctypes.c_int32), ("scale", ctypes.c_int)]


class Plane(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("block", ctypes.c_int64 * MAX_RANK),
                ("extent", ctypes.c_int64 * MAX_RANK), ("stride", ctypes.c_int64 * MAX_RANK)]


class Memory(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int)]


class TensorDesc(ctypes.Structure):
    _fields_ = [("format", Format), ("rank", ctypes.c_int), ("extent", ctypes.c_int64 * MAX_RANK),
                ("stride", ctypes.c_int64 * MAX_RANK), ("data", ctypes.c_void_p), ("data_bytes", ctypes.c_size_t),
                ("scales", Plane), ("bias", Plane), ("codebook", Plane), ("tensor_scale", ctypes.c_float),
                ("memory", Memory)]


class Tensor(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("format", Format), ("rank", ctypes.c_int),
                ("extent", ctypes.c_int64 * MAX_RANK), ("stride", ctypes.c_int64 * MAX_RANK),
                ("data", ctypes.c_void_p), ("scales", Plane), ("bias", Plane), ("codebook", Plane),
                ("tensor_scale", ctypes.c_float), ("memory", Memory), ("owner_", ctypes.c_void_p),
                ("packed_", ctypes.c_void_p)]


class QuantOpts(ctypes.Structure):
    _fields_ = [("lut_iterations", ctypes.c_int), ("scale_from_data", ctypes.c_int)]


class TopsError(RuntimeError):
    pass


def check(status):
    if status != 0:
        raise TopsError(f"{LIB.tops_status_str(status).decode()}: {LIB.tops_last_error().decode()}")


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def packed_bytes(dtype, n):
    return (n * BITS[dtype] + 7) // 8


def cast_from_f32(dtype, x, saturate=0):
    """f32 array -> packed code bytes (uint8 array; f16/bf16/f32 as their words)."""
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    out = np.zeros(max(packed_bytes(dtype, x.size), 1), dtype=np.uint8)
    check(LIB.tops_cast_from_f32(DT[dtype], _ptr(out), _ptr(x), ctypes.c_int64(x.size), saturate))
    return out[:packed_bytes(dtype, x.size)]


def cast_to_f32(dtype, codes, n):
    codes = np.ascontiguousarray(codes).view(np.uint8).ravel()
    out = np.empty(n, dtype=np.float32)
    check(LIB.tops_cast_to_f32(DT[dtype], _ptr(out), _ptr(codes), ctypes.c_int64(n)))
    return out


def unpack_codes(packed, bits, n):
    """Packed low-bits-first codes -> one uint8 per element (numpy)."""
    bitstream = np.unpackbits(np.asarray(packed, dtype=np.uint8), bitorder="little")
    bitstream = bitstream[: n * bits].reshape(n, bits)
    return (bitstream * (1 << np.arange(bits))).sum(axis=1).astype(np.uint8)


def pack_codes(codes, bits):
    codes = np.asarray(codes, dtype=np.uint8)
    b = ((codes[:, None] >> np.arange(bits)) & 1).astype(np.uint8).ravel()
    return np.packbits(b, bitorder="little")


def format_from_name(name):
    f = Format()
    check(LIB.tops_format_from_name(name.encode(), ctypes.byref(f)))
    return f


def f32_tensor(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    d = TensorDesc()
    d.format = format_from_name("f32")
    d.rank = x.ndim
    for i, e in enumerate(x.shape):
        d.extent[i] = e
    d.data = x.ctypes.data
    t = Tensor()
    check(LIB.tops_tensor_view(ctypes.byref(d), ctypes.byref(t)))
    return t


class Quantized:
    """An owned quantized tensor with numpy copies of its planes."""

    def __init__(self, fmt, shape):
        self.t = Tensor()
        ext = (ctypes.c_int64 * MAX_RANK)(*shape)
        check(LIB.tops_tensor_create(format_from_name(fmt), len(shape), ext, Memory(0, 0), ctypes.byref(self.t)))
        self.shape = tuple(shape)

    def __del__(self):
        try:
            LIB.tops_tensor_destroy(ctypes.byref(self.t))
        except Exception:
            pass

    def _plane(self, p):
        if not p.data:
            return None
        n = 1
        for i in range(self.t.rank):
            n *= p.extent[i]
        es = (BITS[DTYPES[p.dtype]] + 7) // 8
        return np.ctypeslib.as_array((ctypes.c_uint8 * (n * es)).from_address(p.data)).copy()

    def data(self):
        span = ctypes.c_size_t()
        check(LIB.tops_tensor_data_span(ctypes.byref(self.t), ctypes.byref(span)))
        return np.ctypeslib.as_array((ctypes.c_uint8 * span.value).from_address(self.t.data)).copy()

    def scales(self):
        return self._plane(self.t.scales)

    def bias(self):
        return self._plane(self.t.bias)

    def codebook(self):
        cb = self._plane(self.t.codebook)
        return None if cb is None else cb.view(np.float16)

    def set_data(self, raw):
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        ctypes.memmove(self.t.data, raw.ctypes.data, raw.size)

    def set_scales(self, raw):
        raw = np.ascontiguousarray(raw).view(np.uint8)
        ctypes.memmove(self.t.scales.data, raw.ctypes.data, raw.size)


def quantize(x, fmt, lut_iterations=0):
    x = np.ascontiguousarray(x, dtype=np.float32)
    q = Quantized(fmt, x.shape)
    src = f32_tensor(x)
    opts = QuantOpts(lut_iterations)
    check(LIB.tops_quantize(ctypes.byref(src), ctypes.byref(q.t), ctypes.byref(opts)))
    return q


def dequantize(q):
    out = np.full(q.shape, np.nan, dtype=np.float32)
    dst = f32_tensor(out)
    check(LIB.tops_dequantize(ctypes.byref(q.t), ctypes.byref(dst)))
    return out


class QuantError(ctypes.Structure):
    _fields_ = [("rel_l2", ctypes.c_double), ("cos_sim", ctypes.c_double), ("max_abs", ctypes.c_double),
                ("snr_db", ctypes.c_double)]


@pytest.fixture
def rng(request):
    """A numpy generator with a fresh seed, printed (TOPS_TEST_SEED replays it)."""
    env = os.environ.get("TOPS_TEST_SEED")
    seed = int(env, 0) if env else int.from_bytes(os.urandom(4), "little")
    print(f"{request.node.name}: seed {seed} (TOPS_TEST_SEED to replay)")
    return np.random.default_rng(seed)
