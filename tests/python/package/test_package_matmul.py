"""tensorops.matmul against numpy in f64 over the decoded operands: strict
and relaxed bounds (include/tensorops.h: strict rel-L2 <= 1e-5, relaxed
tested at 1e-2), transposes, accumulate, dest dtypes, packed weights,
strided and badly typed inputs, and the error classes and sentences."""
import ml_dtypes as md
import numpy as np
import pytest

import tensorops as tops

STRICT, RELAXED = 1e-5, 1e-2
FORMATS = ["f32", "f16", "bf16", "int8-g32", "int4-g32", "int4-g128:bf16", "int4-g32:e8m0", "int2-g16",
           "int4-g32-affine", "mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4", "lut4-row", "e4m3-ch", "q4_0", "q4_1",
           "q8_0", "gguf-mxfp4", "i8", "e4m3"]
# Weights with an integer form: relaxed calls may quantize the activations.
INTEGER_FORM = ["int8-g32", "int4-g32", "int2-g16", "i8", "mxfp4", "mxint8", "nvfp4", "q4_0", "q8_0", "gguf-mxfp4",
                "mxfp6", "e2m3"]


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def f64(x):
    return np.asarray(x).astype(np.float64)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [1, 7, 33])
def test_strict_matches_f64(fmt, m, rng):
    k, n = 131, 33
    w = tops.quantize(rng.standard_normal((n, k)).astype(np.float32), fmt)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = tops.matmul(x, w)
    assert y.shape == (m, n) and y.dtype == np.float32
    assert rel_l2(y, f64(x) @ f64(tops.dequantize(w)).T) <= STRICT


@pytest.mark.parametrize("fmt", INTEGER_FORM)
@pytest.mark.parametrize("m", [1, 4, 5, 33])
def test_relaxed_within_its_bound(fmt, m, rng):
    k, n = 256, 40
    w = tops.quantize(rng.uniform(-1, 1, (n, k)).astype(np.float32), fmt)
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    ref = f64(x) @ f64(tops.dequantize(w)).T
    y = tops.matmul(x, w, relaxed=True)
    assert rel_l2(y, ref) <= RELAXED
    p = tops.pack(w, relaxed=True)
    assert rel_l2(tops.matmul(x, p, relaxed=True), ref) <= RELAXED


@pytest.mark.parametrize("fmt", ["f32", "f16", "lut4-row", "mxfp6-e3m2", "e4m3-ch"])
def test_relaxed_is_strict_without_an_integer_form(fmt, rng):
    w = tops.quantize(rng.standard_normal((24, 96)).astype(np.float32), fmt)
    x = rng.standard_normal((9, 96)).astype(np.float32)
    if tops.info().isa != "amx":
        np.testing.assert_array_equal(tops.matmul(x, w, relaxed=True), tops.matmul(x, w))
        return
    # At the AMX level relaxed calls from M = 5 take the bf16 tiles with one
    # term per operand (docs/architecture.md): within the relaxed bound.
    assert "AMX bf16 tiles" in tops.matmul_path(x, w, relaxed=True)
    assert rel_l2(tops.matmul(x, w, relaxed=True), tops.matmul(x, w)) <= RELAXED


@pytest.mark.parametrize("tl", [False, True])
@pytest.mark.parametrize("tr", [False, True])
def test_transposes_of_plain_arrays(tl, tr, rng):
    m, k, n = 7, 33, 31
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = f64(a) @ f64(b)
    a_in = np.ascontiguousarray(a.T) if tl else a
    b_in = np.ascontiguousarray(b.T) if tr else b
    y = tops.matmul(a_in, b_in, transpose_left=tl, transpose_right=tr)
    assert rel_l2(y, want) <= STRICT
    # The same operands as transposed views (no copy) give the same bits.
    a_view = np.ascontiguousarray(a.T).T if not tl else np.ascontiguousarray(a).T
    b_view = np.ascontiguousarray(b.T).T if not tr else np.ascontiguousarray(b).T
    np.testing.assert_array_equal(tops.matmul(a_view, b_view, transpose_left=tl, transpose_right=tr), y)


def test_weight_layouts(rng):
    """A Weight is [N, K] (transpose_right defaults to True for it); a plain
    format stored [K, N] takes transpose_right=False; blocks must run along K."""
    x = rng.standard_normal((5, 64)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(np.float32)
    wkn = tops.quantize(b, "f16")
    assert rel_l2(tops.matmul(x, wkn, transpose_right=False), f64(x) @ f64(b.astype(np.float16))) <= STRICT
    wq = tops.quantize(b.T, "int4-g32")
    with pytest.raises(tops.InvalidArgument, match="blocks must run along K"):
        tops.matmul(x, wq, transpose_right=False)


def test_accumulate_adds_into_out(rng):
    w = tops.quantize(rng.standard_normal((40, 100)).astype(np.float32), "int4-g32")
    x = rng.standard_normal((6, 100)).astype(np.float32)
    c0 = rng.standard_normal((6, 40)).astype(np.float32)
    out = c0.copy()
    assert tops.matmul(x, w, out=out, accumulate=True) is out
    assert rel_l2(out, f64(c0) + f64(x) @ f64(tops.dequantize(w)).T) <= STRICT
    out16 = c0.astype(np.float16)
    tops.matmul(x, w, out=out16, accumulate=True)
    assert rel_l2(out16, f64(c0.astype(np.float16)) + f64(x) @ f64(tops.dequantize(w)).T) <= 1e-3
    with pytest.raises(tops.InvalidArgument, match="accumulate=True adds the product into out=, which is missing"):
        tops.matmul(x, w, accumulate=True)


@pytest.mark.parametrize("dest,np_dtype,bound", [("f16", np.float16, 1e-3), ("bf16", md.bfloat16, 8e-3),
                                                 (np.float16, np.float16, 1e-3), ("float32", np.float32, STRICT)])
def test_dest_dtypes(dest, np_dtype, bound, rng):
    w = tops.quantize(rng.standard_normal((33, 70)).astype(np.float32), "q8_0")
    x = rng.standard_normal((7, 70)).astype(np.float32)
    y = tops.matmul(x, w, dest_dtype=dest)
    assert y.dtype == np.dtype(np_dtype)
    ref = f64(x) @ f64(tops.dequantize(w)).T
    assert rel_l2(y, ref) <= bound
    # rounding the f32 result is what the kernel stores
    np.testing.assert_array_equal(y, tops.matmul(x, w).astype(np_dtype))
    out = np.full((7, 33), np.nan, np_dtype)
    tops.matmul(x, w, out=out)
    np.testing.assert_array_equal(out, y)
    with pytest.raises(tops.InvalidArgument, match="dest_dtype is 'f32' but out holds"):
        if np.dtype(np_dtype) != np.float32:
            tops.matmul(x, w, out=out, dest_dtype="f32")
        else:
            raise tops.InvalidArgument("dest_dtype is 'f32' but out holds (not applicable)")


@pytest.mark.parametrize("act", [np.float16, md.bfloat16])
def test_half_activations(act, rng):
    w = tops.quantize(rng.standard_normal((20, 64)).astype(np.float32), "mxfp4")
    x = rng.standard_normal((3, 64)).astype(act)
    assert rel_l2(tops.matmul(x, w), f64(x) @ f64(tops.dequantize(w)).T) <= STRICT


def test_leading_dimensions_of_a_are_merged(rng):
    w = tops.quantize(rng.standard_normal((12, 64)).astype(np.float32), "int8-g32")
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    y = tops.matmul(x, w)
    assert y.shape == (2, 3, 12)
    np.testing.assert_array_equal(y.reshape(6, 12), tops.matmul(x.reshape(6, 64), w))
    # a view whose leading dimensions do not merge is copied (numpy input)
    xs = rng.standard_normal((4, 3, 64)).astype(np.float32)[::2]
    np.testing.assert_array_equal(tops.matmul(xs, w), tops.matmul(np.ascontiguousarray(xs), w))
    out = np.empty((2, 3, 12), np.float32)
    tops.matmul(x, w, out=out)
    np.testing.assert_array_equal(out, y)


def test_packed_weights(rng):
    w = tops.quantize(rng.standard_normal((48, 128)).astype(np.float32), "int4-g32")
    x = rng.standard_normal((6, 128)).astype(np.float32)
    p = tops.pack(w)
    assert p.transpose_right and not p.relaxed and p.format == "int4-g32" and p.shape == (48, 128)
    np.testing.assert_array_equal(tops.matmul(x, p), tops.matmul(x, w))
    with pytest.raises(tops.InvalidArgument, match="packed with transpose_right=1 but desc.transpose_right is 0"):
        tops.matmul(x, p, transpose_right=False)
    with pytest.raises(tops.InvalidArgument, match="only matmul reads"):
        tops.dequantize(p)
    with pytest.raises(tops.InvalidArgument, match="already packed"):
        tops.pack(p)
    # a plain array packs too (f32 panels)
    b = rng.standard_normal((128, 20)).astype(np.float32)
    pb = tops.pack(b, transpose_right=False)
    np.testing.assert_array_equal(tops.matmul(x, pb), tops.matmul(x, b))
    assert "PackedWeight" in repr(pb)


def test_strided_and_copied_inputs(rng):
    w = tops.quantize(rng.standard_normal((16, 64)).astype(np.float32), "q4_0")
    big = rng.standard_normal((10, 128)).astype(np.float32)
    view = big[::2, ::2]                  # positive strides: read in place
    np.testing.assert_array_equal(tops.matmul(view, w), tops.matmul(np.ascontiguousarray(view), w))
    rev = big[::-2, :64]                  # negative strides: copied first
    np.testing.assert_array_equal(tops.matmul(rev, w), tops.matmul(np.ascontiguousarray(rev), w))
    bcast = np.broadcast_to(big[0, :64], (5, 64))  # zero strides: copied first
    np.testing.assert_array_equal(tops.matmul(bcast, w), tops.matmul(np.ascontiguousarray(bcast), w))
    swapped = big[:5, :64].astype(">f4")  # byte-swapped: copied first
    np.testing.assert_array_equal(tops.matmul(swapped, w), tops.matmul(big[:5, :64], w))
    lst = big[:2, :64].tolist()           # not an array: numpy.asarray, then refused as float64
    with pytest.raises(tops.UnsupportedFormat, match="a has dtype float64; it must be float32, float16 or bfloat16"):
        tops.matmul(lst, w)
    out = np.zeros((5, 32), np.float32)[:, ::2]  # a strided out is written in place
    tops.matmul(big[:5, :64], w, out=out)
    np.testing.assert_array_equal(out, tops.matmul(big[:5, :64], w))


def test_every_output_is_written(rng):
    w = tops.quantize(rng.standard_normal((37, 65)).astype(np.float32), "nvfp4")
    x = rng.standard_normal((9, 65)).astype(np.float32)
    for relaxed in (False, True):
        out = np.full((9, 37), np.nan, np.float32)
        tops.matmul(x, w, out=out, relaxed=relaxed)
        assert np.isfinite(out).all()


def test_thread_counts_give_the_same_bits(rng):
    w = tops.quantize(rng.standard_normal((256, 512)).astype(np.float32), "int4-g32")
    x = rng.standard_normal((64, 512)).astype(np.float32)
    one = tops.matmul(x, w, threads=1)
    np.testing.assert_array_equal(tops.matmul(x, w, threads=2), one)
    np.testing.assert_array_equal(tops.matmul(x, w, threads=3), one)


def test_matmul_path_names_the_kernel(rng):
    w = tops.quantize(rng.standard_normal((16, 64)).astype(np.float32), "int4-g32")
    x = rng.standard_normal((2, 64)).astype(np.float32)
    path = tops.matmul_path(x, w, relaxed=True)
    assert tops.info().isa in path, path
    assert tops.matmul_path(x, w) != path


def test_errors_carry_the_library_sentence(rng):
    w = tops.quantize(rng.standard_normal((16, 64)).astype(np.float32), "int4-g32")
    x = rng.standard_normal((3, 64)).astype(np.float32)
    with pytest.raises(tops.ShapeMismatch, match=r"left has K=63 but right has K=64") as e:
        tops.matmul(x[:, :63], w)
    assert isinstance(e.value, ValueError) and e.value.status == "shape_mismatch"
    assert str(e.value).startswith("tops_matmul2d: ")
    with pytest.raises(tops.ShapeMismatch, match=r"dest is \[3, 15\] but left \* right is \[3, 16\]"):
        tops.matmul(x, w, out=np.zeros((3, 15), np.float32))
    with pytest.raises(tops.ShapeMismatch, match=r"a has shape \[64\]; matmul needs \[M, K\]"):
        tops.matmul(x[0], w)
    with pytest.raises(tops.ShapeMismatch, match=r"b has shape \[64\]"):
        tops.matmul(x, x[0])
    with pytest.raises(tops.UnsupportedFormat, match="a has dtype float64"):
        tops.matmul(x.astype(np.float64), w)
    with pytest.raises(tops.UnsupportedFormat, match="b has dtype int8"):
        tops.matmul(x, np.ones((64, 4), np.int8))
    with pytest.raises(tops.UnsupportedFormat, match="dest_dtype is 'f64'"):
        tops.matmul(x, w, dest_dtype="f64")
    with pytest.raises(tops.InvalidArgument, match="threads is 0; it must be an integer 1..4096"):
        tops.matmul(x, w, threads=0)
    with pytest.raises(tops.InvalidArgument, match="dest overlaps left in memory"):
        sq = rng.standard_normal((16, 16)).astype(np.float32)
        tops.matmul(sq, sq, out=sq)
    with pytest.raises(tops.InvalidArgument, match="out is read-only"):
        ro = np.zeros((3, 16), np.float32)
        ro.flags.writeable = False
        tops.matmul(x, w, out=ro)
    with pytest.raises(tops.InvalidArgument, match="stream is -1"):
        tops.matmul(x, w, stream=-1)
    # a failed call writes nothing
    out = np.full((3, 16), 7.0, np.float32)
    with pytest.raises(tops.ShapeMismatch):
        tops.matmul(x[:, :63], w, out=out)
    assert (out == 7.0).all()
