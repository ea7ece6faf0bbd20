"""Element casts against ml_dtypes (numpy for f16, i8, u8): every code
decodes to the same bits; every rounding midpoint, one f32 ulp either side,
+-0, +-Inf, NaN, subnormals, max and the overflow boundaries encode to the
same code; a million random f32 per dtype over many binades.  The
saturating casts are checked against clip-then-cast."""
import warnings

import ml_dtypes as md
import numpy as np
import pytest

import tops
from tops import rng  # noqa: F401  (the seeded generator fixture)

# numpy warns about the overflowing and NaN casts these tests make on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Our dtype -> the oracle's numpy dtype (default casts).
ORACLE = {
    "f16": np.float16, "bf16": md.bfloat16, "e4m3": md.float8_e4m3fn, "e5m2": md.float8_e5m2,
    "e2m3": md.float6_e2m3fn, "e3m2": md.float6_e3m2fn, "e2m1": md.float4_e2m1fn, "e8m0": md.float8_e8m0fnu,
    "i8": np.int8, "u8": np.uint8, "i4": md.int4, "u4": md.uint4, "i2": md.int2, "u2": md.uint2,
}
FLOATS = ["f16", "bf16", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "e8m0"]
SMALL = [d for d in ORACLE if tops.BITS[d] <= 8]


def oracle_codes(dtype, x):
    """ml_dtypes' codes for f32 x, one unsigned int per element."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = np.asarray(x, dtype=np.float32).astype(ORACLE[dtype])
    bits = tops.BITS[dtype]
    if bits == 16:
        return y.view(np.uint16)
    raw = y.view(np.uint8) if y.dtype.itemsize == 1 else y.astype(np.int64).astype(np.uint8)
    return raw & np.uint8((1 << bits) - 1)


def lib_codes(dtype, x, saturate=0):
    x = np.asarray(x, dtype=np.float32)
    raw = tops.cast_from_f32(dtype, x, saturate)
    bits = tops.BITS[dtype]
    if bits == 16:
        return raw.view(np.uint16)
    if bits == 8:
        return raw
    return tops.unpack_codes(raw, bits, x.size)


def all_codes(dtype):
    bits = tops.BITS[dtype]
    return np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)


def oracle_decode(dtype, codes):
    if tops.BITS[dtype] == 16:
        return codes.view(ORACLE[dtype]).astype(np.float32)
    if ORACLE[dtype] in (np.int8, np.uint8):
        return codes.view(ORACLE[dtype]).astype(np.float32)
    if dtype in ("i4", "i2"):  # sign-extend the low bits
        b = tops.BITS[dtype]
        v = codes.astype(np.int32)
        return np.where(v >= 1 << (b - 1), v - (1 << b), v).astype(np.float32)
    if dtype in ("u4", "u2"):
        return codes.astype(np.float32)
    return codes.view(ORACLE[dtype]).astype(np.float32)


def lib_decode(dtype, codes):
    bits = tops.BITS[dtype]
    packed = codes if bits >= 8 else tops.pack_codes(codes, bits)
    return tops.cast_to_f32(dtype, packed, codes.size)


def assert_same_bits(got, want, x=None, what=""):
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype == np.float32:
        got, want = got.view(np.uint32), want.view(np.uint32)
    bad = np.nonzero(got != want)[0]
    if bad.size:
        i = bad[0]
        src = f" input {x[i]!r} ({np.float32(x[i]).view(np.uint32):#010x})" if x is not None else ""
        raise AssertionError(f"{what}: {bad.size} mismatches; first at {i}:{src} got {got[i]:#x} want {want[i]:#x}")


@pytest.mark.parametrize("dtype", list(ORACLE))
def test_every_code_decodes_like_the_oracle(dtype):
    codes = all_codes(dtype)
    assert_same_bits(lib_decode(dtype, codes), oracle_decode(dtype, codes), what=f"{dtype} decode")


def test_mxint8_and_ue4m3_decode():
    codes = all_codes("e4m3")
    assert_same_bits(lib_decode("mxint8", codes), codes.view(np.int8).astype(np.float32) / 64, what="mxint8")
    want = (codes & 0x7F).view(md.float8_e4m3fn).astype(np.float32)
    assert_same_bits(lib_decode("ue4m3", codes), want, what="ue4m3")


def representable(dtype):
    """Sorted unique finite non-negative values of a float dtype."""
    v = oracle_decode(dtype, all_codes(dtype)).astype(np.float64)
    v = v[np.isfinite(v) & (v >= 0)]
    return np.unique(v)


def boundary_inputs(dtype):
    """Values, midpoints between neighbours (and one f32 ulp either side),
    the overflow boundary above max, specials; both signs."""
    vals = representable(dtype)
    if dtype == "e8m0":
        top = vals[-1] * 2
    else:
        fi = md.finfo(ORACLE[dtype])
        top = vals[-1] + 2.0 ** (np.floor(np.log2(vals[-1])) - fi.nmant)  # next value past max
    ext = np.append(vals, top)
    mids = (ext[:-1] + ext[1:]) / 2  # exact in f32 for these small formats
    if dtype == "e8m0":  # ties of a zero-mantissa format sit at 1.5 * 2^e
        mids = np.concatenate([mids, vals * 1.5])
    pts = np.concatenate([vals, mids, [top, top * 1.0000001, 1e30, 3e38]]).astype(np.float32)
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))])
    specials = np.array([0.0, np.inf, np.nan, 1e-45, 1e-40, 1.1754942e-38, 1.1754944e-38], dtype=np.float32)
    pts = np.concatenate([pts, specials])
    return np.concatenate([pts, -pts]).astype(np.float32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_midpoints_and_boundaries_encode_like_the_oracle(dtype):
    x = boundary_inputs(dtype)
    assert_same_bits(lib_codes(dtype, x), oracle_codes(dtype, x), x, f"{dtype} encode")


def test_negative_nan_and_quirks():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 464, 465, -465, 0.0, -0.0], dtype=np.float32)
    for d in ["e4m3", "e5m2", "e2m3", "e3m2", "e2m1", "e8m0"]:
        assert_same_bits(lib_codes(d, x), oracle_codes(d, x), x, d)
    # The documented quirks, spelled out.
    assert list(lib_codes("e4m3", x[4:7])) == [0x7E, 0x7F, 0xFF]
    assert list(lib_codes("e2m1", x[:2])) == [0x8, 0x0]
    assert list(lib_codes("e8m0", np.array([0.0, -1.0, 0.75], np.float32))) == [0xFF, 0xFF, 0x7F]


@pytest.mark.parametrize("dtype", ["i8", "u8", "i4", "u4", "i2", "u2"])
def test_integer_casts_truncate_and_wrap_like_the_oracle(dtype):
    x = np.concatenate([np.arange(-300, 300, 0.25), [np.nan, np.inf, -np.inf, 2.0**31, -2.0**31, 2.0**31 - 128,
                                                     1e10, -1e10, 65539.0, -129.7]]).astype(np.float32)
    assert_same_bits(lib_codes(dtype, x), oracle_codes(dtype, x), x, dtype)


def random_f32(rng, n):
    """Values over many binades plus raw bit patterns (NaN payloads, subnormals)."""
    k = n // 4
    mant = rng.uniform(1.0, 2.0, n - k)
    expo = rng.integers(-140, 128, n - k)
    v = (np.ldexp(mant, expo) * rng.choice([-1.0, 1.0], n - k)).astype(np.float32)
    raw = rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([v, raw])
    rng.shuffle(x)
    return x


@pytest.mark.parametrize("dtype", list(ORACLE))
def test_a_million_random_values_encode_like_the_oracle(dtype, rng):
    x = random_f32(rng, 1_000_000)
    if dtype in ("i8", "u8", "i4", "u4", "i2", "u2"):
        # Truncation wraps modulo 2^bits: stay where the low bits mean something.
        x = (x.astype(np.float64) % 4096 - 2048).astype(np.float32)
    assert_same_bits(lib_codes(dtype, x), oracle_codes(dtype, x), x, f"{dtype} random")


def saturating_oracle(dtype, x):
    x = np.asarray(x, np.float32)
    if dtype in ("i8", "u8", "i4", "u4", "i2", "u2"):
        bits = tops.BITS[dtype]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype[0] == "i" else (0, (1 << bits) - 1)
        q = np.clip(np.rint(np.nan_to_num(x, nan=0.0, posinf=hi, neginf=lo).astype(np.float64)), lo, hi)
        return (q.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    if dtype == "e8m0":
        fmax = np.float32(2.0**127)
        codes = oracle_codes(dtype, np.where(np.isfinite(x), np.minimum(x, fmax), x))
        return np.where(np.isfinite(x) & (x <= 0), 0, codes).astype(np.uint8)
    fmax = np.float32(md.finfo(ORACLE[dtype]).max)
    keep_inf = dtype in ("e5m2", "f16", "bf16")
    clipped = np.where(np.isinf(x) & keep_inf, x, np.clip(x, -fmax, fmax))
    return oracle_codes(dtype, clipped)


@pytest.mark.parametrize("dtype", list(ORACLE))
def test_saturating_casts(dtype, rng):
    x = np.concatenate([random_f32(rng, 200_000), boundary_inputs(dtype) if dtype in FLOATS else []])
    x = x.astype(np.float32)
    assert_same_bits(lib_codes(dtype, x, 1), saturating_oracle(dtype, x), x, f"{dtype} saturating")


def test_mxint8_and_ue4m3_encode(rng):
    x = np.concatenate([random_f32(rng, 1_000_000), np.arange(-3, 3, 1 / 128), [np.nan, np.inf, -np.inf]])
    x = x.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.clip(np.rint(np.nan_to_num(x.astype(np.float64) * 64, nan=0.0)), -128, 127)
    for sat in (0, 1):
        assert_same_bits(lib_codes("mxint8", x, sat), want.astype(np.int64).astype(np.uint8), x, "mxint8")
    a = np.abs(x)
    want = oracle_codes("e4m3", a) & 0x7F
    assert_same_bits(lib_codes("ue4m3", x), want, x, "ue4m3")
    want_sat = oracle_codes("e4m3", np.where(np.isnan(a), a, np.minimum(a, 448))) & 0x7F
    assert_same_bits(lib_codes("ue4m3", x, 1), want_sat, x, "ue4m3 saturating")


def test_bad_arguments():
    x = np.zeros(4, np.float32)
    out = np.zeros(16, np.uint8)
    p = lambda a: a.ctypes.data_as(tops.ctypes.c_void_p)  # noqa: E731
    c64 = tops.ctypes.c_int64
    assert tops.LIB.tops_cast_from_f32(0, p(out), p(x), c64(4), 0) != 0
    assert b"dtype" in tops.LIB.tops_last_error()
    assert tops.LIB.tops_cast_from_f32(tops.DT["i32"], p(out), p(x), c64(4), 0) != 0
    assert tops.LIB.tops_cast_from_f32(tops.DT["f16"], p(out), p(x), c64(-1), 0) != 0
    assert b"n is -1" in tops.LIB.tops_last_error()
    assert tops.LIB.tops_cast_from_f32(tops.DT["f16"], p(out), p(x), c64(4), 2) != 0
    assert tops.LIB.tops_cast_from_f32(tops.DT["f16"], None, p(x), c64(4), 0) != 0
    assert tops.LIB.tops_cast_to_f32(99, p(x), p(out), c64(4)) != 0
    assert tops.LIB.tops_cast_to_f32(tops.DT["e4m3"], None, p(out), c64(4)) != 0
    assert tops.LIB.tops_cast_to_f32(tops.DT["e4m3"], None, None, c64(0)) == 0
