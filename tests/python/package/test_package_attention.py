"""tensorops.attention against a numpy softmax in f64: causal, sliding
window, grouped-query heads, scale, softcap, quantized KV caches, rank-3
inputs, strided inputs, and the error sentences.  Bounds as the C tests
(test_attention.c): max abs error 1e-4 for f32 outputs, 2e-3 for f16."""
import ml_dtypes as md
import numpy as np
import pytest

import tensorops as tops


def reference(q, k, v, causal=False, window=0, scale=None, softcap=0.0):
    q, k, v = (np.asarray(t).astype(np.float64) for t in (q, k, v))
    _, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    s = (1 / np.sqrt(d) if scale is None else scale) * q @ k.transpose(0, 1, 3, 2)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    pos = np.arange(sq)[:, None] + sk - sq
    key = np.arange(sk)[None, :]
    mask = np.ones((sq, sk), bool)
    if causal:
        mask &= key <= pos
    if window:
        mask &= np.abs(key - pos) < window
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.where(mask, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    den = p.sum(axis=-1, keepdims=True)
    return np.where(den > 0, (p @ v) / np.where(den > 0, den, 1), 0)


def qkv(rng, b=2, hq=4, hkv=2, sq=7, sk=33, d=32, dv=32, dtype=np.float32):
    return (rng.standard_normal((b, hq, sq, d)).astype(dtype), rng.standard_normal((b, hkv, sk, d)).astype(dtype),
            rng.standard_normal((b, hkv, sk, dv)).astype(dtype))


@pytest.mark.parametrize("causal,window", [(False, 0), (True, 0), (False, 8), (True, 8)])
@pytest.mark.parametrize("hkv", [4, 2, 1])
@pytest.mark.parametrize("sq,sk", [(1, 33), (7, 40), (33, 33)])
def test_matches_the_softmax_reference(causal, window, hkv, sq, sk, rng):
    q, k, v = qkv(rng, hkv=hkv, sq=sq, sk=sk, dv=16 if hkv == 2 else 32)
    out = tops.attention(q, k, v, causal=causal, window=window)
    assert out.shape == q.shape[:3] + (v.shape[3],) and out.dtype == np.float32
    assert np.abs(out - reference(q, k, v, causal, window)).max() <= 1e-4


def test_scale_and_softcap(rng):
    q, k, v = qkv(rng)
    for scale, softcap in ((0.3, 0.0), (None, 5.0), (0.5, 2.0)):
        out = tops.attention(q, k, v, scale=scale, softcap=softcap, causal=True)
        assert np.abs(out - reference(q, k, v, True, 0, scale, softcap)).max() <= 1e-4


def test_tile_hints_change_nothing_but_time(rng):
    q, k, v = qkv(rng, sq=33, sk=70)
    want = reference(q, k, v, True)
    for qb, kb in ((0, 0), (16, 32), (8, 64)):
        assert np.abs(tops.attention(q, k, v, causal=True, q_block=qb, kv_block=kb) - want).max() <= 1e-4


def test_fully_masked_queries_get_zeros(rng):
    q, k, v = qkv(rng, sq=40, sk=33)  # query i sits at i - 7: the first 7 see no key under causal
    out = tops.attention(q, k, v, causal=True)
    assert (out[:, :, :7] == 0).all()
    assert np.abs(out - reference(q, k, v, True)).max() <= 1e-4


@pytest.mark.parametrize("fmt", ["int8-g32", "mxfp8", "e4m3-ch", "f16"])
def test_quantized_kv_cache(fmt, rng):
    q, k, v = qkv(rng, sq=5, sk=40, d=64, dv=32)
    wk, wv = tops.quantize(k, fmt), tops.quantize(v, fmt)
    out = tops.attention(q, k=wk, v=wv, causal=True)
    want = reference(q, tops.dequantize(wk), tops.dequantize(wv), True)
    assert np.abs(out - want).max() <= 2e-4


def test_rank_three_is_one_batch(rng):
    q, k, v = qkv(rng, b=1)
    want = tops.attention(q, k, v, causal=True)
    got = tops.attention(q[0], k[0], v[0], causal=True)
    assert got.shape == q.shape[1:3] + (v.shape[3],)
    np.testing.assert_array_equal(got, want[0])
    wk = tops.quantize(k[0], "int8-g32")
    assert np.abs(tops.attention(q[0], wk, v[0]) - tops.attention(q, tops.quantize(k, "int8-g32"), v)[0]).max() == 0


def test_half_inputs_and_outputs(rng):
    q, k, v = qkv(rng, dtype=np.float16)
    want = reference(q, k, v, True)
    assert np.abs(tops.attention(q, k, v, causal=True) - want).max() <= 1e-4 + 1e-4
    o16 = tops.attention(q, k, v, causal=True, dest_dtype="f16")
    assert o16.dtype == np.float16 and np.abs(o16.astype(np.float64) - want).max() <= 2e-3 + 1e-4
    qb, kb, vb = (t.astype(md.bfloat16) for t in (q, k, v))
    ob = tops.attention(qb, kb, vb, causal=True, dest_dtype="bf16")
    assert ob.dtype == md.bfloat16
    assert np.abs(ob.astype(np.float64) - reference(qb, kb, vb, True)).max() <= 1.6e-2 + 1e-4


def test_strided_views_and_out(rng):
    # [B, S, H, D] storage seen as [B, H, S, D]: positive strides, read in place
    q = rng.standard_normal((2, 7, 4, 32)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.standard_normal((2, 33, 2, 32)).astype(np.float32).transpose(0, 2, 1, 3)
    v = rng.standard_normal((2, 33, 2, 32)).astype(np.float32).transpose(0, 2, 1, 3)
    want = tops.attention(*(np.ascontiguousarray(t) for t in (q, k, v)), causal=True)
    np.testing.assert_array_equal(tops.attention(q, k, v, causal=True), want)
    out = np.full((2, 7, 4, 32), np.nan, np.float32).transpose(0, 2, 1, 3)
    assert tops.attention(q, k, v, causal=True, out=out) is out
    np.testing.assert_array_equal(out, want)


def test_errors(rng):
    q, k, v = qkv(rng, hq=3, hkv=2)
    with pytest.raises(tops.ShapeMismatch, match="q has 3 heads, which is not a multiple of the 2 kv heads") as e:
        tops.attention(q, k, v)
    assert str(e.value).startswith("tops_attention: ")
    q, k, v = qkv(rng)
    with pytest.raises(tops.ShapeMismatch, match="q has head dim 32 but k has 16"):
        tops.attention(q, k[..., :16], v)
    with pytest.raises(tops.ShapeMismatch, match="each must be 16..256"):
        tops.attention(q[..., :8], k[..., :8], v)
    with pytest.raises(tops.ShapeMismatch, match="k has rank 3 but q has rank 4"):
        tops.attention(q, k[0], v)
    with pytest.raises(tops.ShapeMismatch, match=r"q has shape \[7, 32\]"):
        tops.attention(q[0, 0], k, v)
    with pytest.raises(tops.InvalidArgument, match="window is -1; it must be an integer >= 0"):
        tops.attention(q, k, v, window=-1)
    with pytest.raises(tops.InvalidArgument, match=r"scale is 0; it must be finite and > 0 \(None = 1/sqrt\(D\)\)"):
        tops.attention(q, k, v, scale=0)
    with pytest.raises(tops.InvalidArgument, match="softcap is -1; it must be finite and >= 0"):
        tops.attention(q, k, v, softcap=-1.0)
    with pytest.raises(tops.InvalidArgument, match="q_block is 1000"):
        tops.attention(q, k, v, q_block=1000)
    with pytest.raises(tops.InvalidArgument, match="a KV cache is a Weight or an array"):
        tops.attention(q, tops.pack(k[0, 0]), v)
    with pytest.raises(tops.UnsupportedFormat, match="q has dtype float64"):
        tops.attention(q.astype(np.float64), k, v)
    with pytest.raises(tops.InvalidArgument, match="out overlaps q, k or v in memory"):
        tops.attention(q, k, v, out=q)


def test_kv_lens(rng):
    # a padded cache: sequence b sees its first kv_lens[b] keys, positions aligned to that length
    q, k, v = qkv(rng, b=4, sq=3, sk=40)
    lens = [0, 1, 17, 40]
    k[1, :, 1:] = np.nan  # never read
    v[2, :, 17:] = np.nan
    got = tops.attention(q, k, v, causal=True, kv_lens=np.array(lens, np.int64))
    for b, n in enumerate(lens):
        want = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=True) if n else 0
        assert np.abs(got[b:b + 1] - want).max() <= 1e-4, b


def test_varlen(rng):
    # FlashAttention's varlen layout: packed [T, H, D] with cumulative offsets
    hq, hkv, d = 4, 2, 32
    sq, sk = [0, 1, 7, 33, 100], [0, 1, 9, 33, 120]
    cq, ck = np.cumsum([0] + sq), np.cumsum([0] + sk)
    q = rng.standard_normal((cq[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((ck[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((ck[-1], hkv, d)).astype(np.float32)
    for causal, window in [(False, 0), (True, 0), (True, 16)]:
        got = tops.attention(q, k, v, causal=causal, window=window, cu_seqlens_q=cq, cu_seqlens_k=list(ck))
        assert got.shape == (cq[-1], hq, d)
        for b in range(len(sq)):
            if not sq[b]:
                continue
            qs = q[cq[b]:cq[b + 1]].transpose(1, 0, 2)[None]
            ks = k[ck[b]:ck[b + 1]].transpose(1, 0, 2)[None]
            vs = v[ck[b]:ck[b + 1]].transpose(1, 0, 2)[None]
            want = reference(qs, ks, vs, causal=causal, window=window)[0].transpose(1, 0, 2)
            assert np.abs(got[cq[b]:cq[b + 1]] - want).max() <= 1e-4, (b, causal, window)
    # with kv_lens, and a quantized packed KV cache
    kl = [0, 1, 5, 20, 120]
    wk, wv = tops.quantize(k, "int8-g32"), tops.quantize(v, "int8-g32")
    kd, vd = tops.dequantize(wk), tops.dequantize(wv)
    got = tops.attention(q, wk, wv, cu_seqlens_q=cq, cu_seqlens_k=ck, kv_lens=kl)
    for b in range(len(sq)):
        if sq[b]:
            qs = q[cq[b]:cq[b + 1]].transpose(1, 0, 2)[None]
            ks = kd[ck[b]:ck[b] + kl[b]].transpose(1, 0, 2)[None]
            vs = vd[ck[b]:ck[b] + kl[b]].transpose(1, 0, 2)[None]
            want = reference(qs, ks, vs)[0].transpose(1, 0, 2)
            assert np.abs(got[cq[b]:cq[b + 1]] - want).max() <= 1e-4, b
    # rows outside the sequences: zeros in a new out, untouched in a given one
    cq2 = np.array([2, 3, 10])
    out = np.full((12, hq, d), np.nan, np.float32)
    tops.attention(q[:12], k, v, cu_seqlens_q=cq2, cu_seqlens_k=[0, 1, 9], out=out)
    assert np.isnan(out[:2]).all() and np.isnan(out[10:]).all() and np.isfinite(out[2:10]).all()
    assert (tops.attention(q[:12], k, v, cu_seqlens_q=cq2, cu_seqlens_k=[0, 1, 9])[:2] == 0).all()


def test_varlen_errors(rng):
    q = rng.standard_normal((10, 2, 16)).astype(np.float32)
    k = rng.standard_normal((12, 1, 16)).astype(np.float32)
    with pytest.raises(tops.InvalidArgument, match="go together"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 10])
    with pytest.raises(tops.ShapeMismatch, match="cu_seqlens_k has 3 entries but must have 2"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 10], cu_seqlens_k=[0, 5, 12])
    with pytest.raises(tops.ShapeMismatch, match="cu_seqlens_q has 1 entries"):
        tops.attention(q, k, k, cu_seqlens_q=[0], cu_seqlens_k=[0])
    with pytest.raises(tops.InvalidArgument, match="1-D sequence of integers"):
        tops.attention(q, k, k, cu_seqlens_q=[0.5, 10], cu_seqlens_k=[0, 12])
    with pytest.raises(tops.InvalidArgument, match="outside int32"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 2**40], cu_seqlens_k=[0, 12])
    with pytest.raises(tops.InvalidArgument, match="must not decrease"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 6, 4], cu_seqlens_k=[0, 5, 12])
    with pytest.raises(tops.ShapeMismatch, match="past the 12 tokens of k"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 4, 10], cu_seqlens_k=[0, 5, 13])
    with pytest.raises(tops.ShapeMismatch, match="with cu_seqlens it is packed"):
        tops.attention(q[None], k[None], k[None], cu_seqlens_q=[0, 10], cu_seqlens_k=[0, 12])
    with pytest.raises(tops.ShapeMismatch, match="kv_lens has 1 entries but must have 2"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 4, 10], cu_seqlens_k=[0, 5, 12], kv_lens=[3])
    with pytest.raises(tops.InvalidArgument, match=r"kv_lens\[1\] is 8"):
        tops.attention(q, k, k, cu_seqlens_q=[0, 4, 10], cu_seqlens_k=[0, 5, 12], kv_lens=[3, 8])
    q4, k4 = q.reshape(1, 2, 5, 32)[..., :16], k.reshape(1, 1, 12, 16)
    with pytest.raises(tops.ShapeMismatch, match="kv_lens has 2 entries but must have 1"):
        tops.attention(q4, k4, k4, kv_lens=[1, 2])
