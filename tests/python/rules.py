"""FORMATS.md's rules for the casts where no outside library is the oracle
(see test_oracle_casts.py): e8m0 by exact f64 distances, float -> integer
by integer arithmetic on the f32 fields.  Shared by the oracle tests."""
import numpy as np

import tops


def e8m0_rule(x, saturate=0):
    """FORMATS.md's e8m0 of f32 x: nearest 2^e (-127 <= e <= 127) by exact
    f64 distances, ties to the even code; past the tie at 1.5 * 2^127 0xFF
    (0xFE saturating); NaN, +-Inf 0xFF; 0 and negatives 0xFF (0x00 saturating)."""
    x = np.asarray(x, np.float32).astype(np.float64)
    pos = np.isfinite(x) & (x > 0)
    xp = np.where(pos, x, 1.0)
    _, e = np.frexp(xp)              # xp = m * 2^e, m in [0.5, 1)
    lo = np.maximum(e - 1, -127)     # 2^lo <= xp < 2^(lo + 1) unless xp < 2^-127
    dlo = xp - np.ldexp(1.0, lo)     # exact: both in one binade
    dhi = np.ldexp(1.0, lo + 1) - xp
    code = lo + 127
    up = (dhi < dlo) | ((dhi == dlo) & (code % 2 == 1))
    code = np.where(dlo <= 0, code, code + up)
    code = np.where(code > 0xFE, 0xFE if saturate else 0xFF, code)
    bad = 0x00 if saturate else 0xFF
    code = np.where(pos, code, np.where(np.isfinite(x), bad, 0xFF))
    return code.astype(np.uint8)


def int_rule(dtype, x, saturate=0):
    """FORMATS.md's float -> integer casts in integer arithmetic on the f32
    fields (value = m * 2^sh): default truncates toward zero and wraps
    modulo 2^bits, NaN and +-Inf give 0; saturating rounds to nearest even
    and clamps, NaN -> 0, +-Inf -> the bound."""
    bits = tops.BITS[dtype]
    mask = (1 << bits) - 1
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype[0] == "i" else (0, mask)
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    neg, ax = b >> 31, b & 0x7FFFFFFF
    e = ax >> 23
    m = np.where(e > 0, (ax & 0x7FFFFF) | 0x800000, ax & 0x7FFFFF)
    sh = np.where(e > 0, e, 1) - 150
    left, right = np.clip(sh, 0, 32), np.clip(-sh, 0, 62)
    big = sh >= 32                   # |x| >= 2^55: low bits 0, and beyond every bound
    if not saturate:
        mag = np.where(sh >= 0, np.where(big, 0, m << left), m >> right)
        v = np.where(neg == 1, -mag, mag) & mask
        return np.where(ax >= 0x7F800000, 0, v).astype(np.uint8)
    q = m >> right
    rem = m & ((np.int64(1) << right) - 1)
    half = np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 1 << 62)
    rounded = q + ((rem > half) | ((rem == half) & (q % 2 == 1)))
    mag = np.where(sh >= 0, np.where(big, 1 << 40, m << left), rounded)
    mag = np.where(ax == 0x7F800000, 1 << 40, mag)
    v = np.clip(np.where(neg == 1, -mag, mag), lo, hi)
    return np.where(ax > 0x7F800000, 0, v & mask).astype(np.uint8)
