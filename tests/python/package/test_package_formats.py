"""quantize / dequantize / Weight through the package.

The oracle tests of test_oracle_blocks.py (numpy implementations of every
format's rules: planes byte for byte, decodes bit for bit, round-trip
bounds, NaN blocks) run here again with the package as the implementation:
their `tops.quantize` / `tops.dequantize` calls go to tensorops.quantize /
tensorops.dequantize and read the Weight's planes."""
import inspect
import types

import ml_dtypes as md
import numpy as np
import pytest

import tensorops as tops
import test_oracle_blocks as ob

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


class Planes:
    """A Weight seen through the oracle helper's interface (tops.Quantized)."""

    def __init__(self, w):
        self.w = w
        self.shape = w.shape
        self.t = types.SimpleNamespace(tensor_scale=w.tensor_scale)

    def data(self):
        return self.w.data.reshape(-1).view(np.uint8)

    def _raw(self, a):
        return None if a is None else a.reshape(-1).view(np.uint8)

    def scales(self):
        return self._raw(self.w.scales)

    def bias(self):
        return self._raw(self.w.bias)

    def codebook(self):
        return None if self.w.codebook is None else self.w.codebook.reshape(-1).view(np.float16)


@pytest.fixture(autouse=True)
def _package_is_the_implementation(monkeypatch):
    monkeypatch.setattr(ob.tops, "quantize",
                        lambda x, fmt, lut_iterations=0: Planes(tops.quantize(x, fmt, lut_iterations=lut_iterations)))
    monkeypatch.setattr(ob.tops, "dequantize", lambda q: tops.dequantize(q.w))


def _through_quantize_only(fn):
    src = inspect.getsource(fn)
    return "tops.quantize" in src and not any(s in src for s in ("tops.LIB", "tops.Quantized", ".set_", "tops.check"))


ORACLE_TESTS = sorted(n for n, f in vars(ob).items() if n.startswith("test_") and callable(f)
                      and _through_quantize_only(f))
for _name in ORACLE_TESTS:
    globals()[f"{_name}__package"] = getattr(ob, _name)


def test_the_oracle_tests_are_all_here():
    for name in ("test_mx_matches_the_ocp_rule", "test_nvfp4_matches_the_transformer_engine_rule",
                 "test_int_groups_match_the_symmetric_rule", "test_affine_groups_match_the_rule",
                 "test_fp8_channels_match_the_rule", "test_plain_formats_use_the_saturating_cast",
                 "test_gguf_blocks_are_byte_exact_with_ggml", "test_round_trip_with_a_partial_last_block",
                 "test_lut_codebooks_follow_the_lloyd_rule", "test_nan_and_inf_poison_exactly_their_block",
                 "test_gguf_nan_blocks"):
        assert name in ORACLE_TESTS
    assert set(ob.ALL) <= set(ob.BOUND)


# ---- the Weight object -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ob.ALL)
def test_weight_planes_rebuild_the_same_tensor(fmt, rng):
    x = rng.standard_normal((5, 77)).astype(np.float32)
    w = tops.quantize(x, fmt)
    assert w.format == fmt and w.shape == (5, 77)
    again = tops.Weight(w.format, w.shape, tensor_scale=w.tensor_scale, **w.planes())
    np.testing.assert_array_equal(tops.dequantize(again).view(np.uint32), tops.dequantize(w).view(np.uint32))
    assert w.nbytes == sum(p.nbytes for p in w.planes().values())
    info = tops.format_info(fmt)
    assert (w.scales is None) == (info.scale is None)
    assert (w.bias is None) == (not info.has_bias)
    assert (w.codebook is None) == (info.codebook is None)
    if info.scale is not None and info.group is not None and not info.gguf:
        assert w.scales.shape == (5, -(-77 // info.group))
    if info.codebook == "row":
        assert w.codebook.shape == (5, 16) and w.codebook.dtype == np.float16
    if fmt in ("f32", "f16", "bf16"):
        assert w.data.shape == x.shape


def test_weight_plane_dtypes(rng):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    assert tops.quantize(x, "int4-g32").scales.dtype == np.float16
    assert tops.quantize(x, "int4-g32:bf16").scales.dtype == md.bfloat16
    assert tops.quantize(x, "int4-g32:f32").scales.dtype == np.float32
    assert tops.quantize(x, "mxfp4").scales.dtype == np.uint8
    assert tops.quantize(x, "int4-g32-affine").bias.dtype == np.float16
    w = tops.quantize(x, "f16")
    assert w.data.dtype == np.float16 and np.array_equal(w.data, x.astype(np.float16))
    assert tops.quantize(x, "bf16").data.dtype == md.bfloat16
    w = tops.quantize(x, "nvfp4")
    assert w.tensor_scale == np.float32(448 * 6 / np.abs(x).max())
    assert "nvfp4" in repr(w) and "tensor_scale" in repr(w)
    with pytest.raises(AttributeError):  # the tensor view points into the planes: they stay
        w.scales = np.zeros_like(w.scales)


def test_weight_from_planes_is_checked(rng):
    w = tops.quantize(rng.standard_normal((4, 64)).astype(np.float32), "int4-g32")
    with pytest.raises(tops.ShapeMismatch, match=r"scales holds 8 bytes; format int4-g32 of shape \[4, 64\] needs 16"):
        tops.Weight("int4-g32", (4, 64), w.data, scales=w.scales[:2])
    with pytest.raises(tops.InvalidArgument, match="scales plane data is NULL"):
        tops.Weight("int4-g32", (4, 64), w.data)
    with pytest.raises(tops.InvalidArgument, match="data spans 128 bytes but data_bytes is 64"):
        tops.Weight("int4-g32", (4, 64), w.data[:2], scales=w.scales)
    with pytest.raises(tops.InvalidArgument, match="has no codebook, but one was given"):
        tops.Weight("int4-g32", (4, 64), w.data, scales=w.scales, codebook=np.zeros(16, np.float16))
    with pytest.raises(tops.ShapeMismatch, match="rank 5"):
        tops.Weight("f32", (1, 1, 1, 1, 2), np.zeros(2, np.float32))
    with pytest.raises(tops.UnsupportedFormat, match=r"scales has dtype float32 \(4-byte items\) but holds f16"):
        tops.Weight("int4-g32", (4, 64), w.data, scales=w.scales.astype(np.float32))
    with pytest.raises(tops.UnsupportedFormat, match="data has dtype float64"):
        tops.Weight("f32", (2, 3), np.zeros((2, 3)))
    raw = tops.Weight("int4-g32", (4, 64), w.data, scales=w.scales.view(np.uint8))  # raw bytes are fine
    np.testing.assert_array_equal(tops.dequantize(raw), tops.dequantize(w))
    with pytest.raises(tops.NotFound, match='unknown format "packed"'):  # made by tensorops.pack only
        tops.Weight("packed", (4, 64), w.data)


# ---- quantize inputs ---------------------------------------------------------------------------


def test_quantize_reads_other_float_dtypes_and_layouts(rng):
    x = rng.standard_normal((6, 96)).astype(np.float32)
    want = tops.dequantize(tops.quantize(x, "int8-g32"))
    for variant in (x.astype(np.float64), np.asfortranarray(x), x.T.copy().T, x[:, ::-1][:, ::-1],
                    x.astype(">f4")):
        got = tops.dequantize(tops.quantize(variant, "int8-g32"))
        np.testing.assert_array_equal(got, want)
    h = x.astype(np.float16)
    np.testing.assert_array_equal(tops.dequantize(tops.quantize(h, "int4-g32")),
                                  tops.dequantize(tops.quantize(h.astype(np.float32), "int4-g32")))
    b = x.astype(md.bfloat16)
    np.testing.assert_array_equal(tops.dequantize(tops.quantize(b, "mxfp4")),
                                  tops.dequantize(tops.quantize(b.astype(np.float32), "mxfp4")))
    # a strided view (every other row and column) is read in place
    big = rng.standard_normal((12, 192)).astype(np.float32)
    v = big[::2, ::2]
    np.testing.assert_array_equal(tops.dequantize(tops.quantize(v, "q8_0")),
                                  tops.dequantize(tops.quantize(np.ascontiguousarray(v), "q8_0")))


@pytest.mark.parametrize("shape", [(40,), (2, 3, 40), (2, 2, 3, 40)])
def test_quantize_any_rank(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    w = tops.quantize(x, "int4-g16")
    y = tops.dequantize(w)
    assert y.shape == shape
    np.testing.assert_array_equal(y.reshape(-1, 40), tops.dequantize(tops.quantize(x.reshape(-1, 40), "int4-g16")))


def test_dequantize_dtypes_and_out(rng):
    w = tops.quantize(rng.standard_normal((4, 64)).astype(np.float32), "mxfp8")
    y = tops.dequantize(w)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(tops.dequantize(w, "f16"), y.astype(np.float16))
    np.testing.assert_array_equal(tops.dequantize(w, np.float16), y.astype(np.float16))
    np.testing.assert_array_equal(tops.dequantize(w, "bf16"), y.astype(md.bfloat16))
    out = np.full((4, 64), np.nan, np.float32)
    assert tops.dequantize(w, out=out) is out
    np.testing.assert_array_equal(out, y)
    with pytest.raises(tops.ShapeMismatch):
        tops.dequantize(w, out=np.zeros((4, 63), np.float32))
    with pytest.raises(tops.InvalidArgument, match="read-only"):
        ro = np.zeros((4, 64), np.float32)
        ro.flags.writeable = False
        tops.dequantize(w, out=ro)
    with pytest.raises(tops.InvalidArgument, match="must be native-endian, aligned, with positive strides"):
        tops.dequantize(w, out=np.zeros((4, 128), np.float32)[:, ::-2])


def test_quantize_and_dequantize_errors(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    with pytest.raises(tops.NotFound, match='unknown format "int9"') as e:
        tops.quantize(x, "int9")
    assert e.value.status == "not_found" and isinstance(e.value, LookupError)
    assert str(e.value).startswith("tops_format_from_name: ")
    with pytest.raises(tops.Error, match="power of two"):
        tops.quantize(x, "int4-g33")
    with pytest.raises(tops.UnsupportedFormat, match="dtype int32; it must be float32, float16 or bfloat16") as e:
        tops.quantize(np.ones((4, 64), np.int32), "int4-g32")
    assert isinstance(e.value, TypeError)
    with pytest.raises(tops.UnsupportedFormat):
        tops.quantize(x.astype(np.complex64), "int4-g32")
    with pytest.raises(tops.ShapeMismatch, match="every extent must be >= 1"):
        tops.quantize(np.zeros((0, 64), np.float32), "int4-g32")
    with pytest.raises(tops.ShapeMismatch, match="rank 1..4"):
        tops.quantize(np.zeros((1, 1, 1, 1, 64), np.float32), "int4-g32")
    with pytest.raises(tops.InvalidArgument, match="lut_iterations"):
        tops.quantize(x, "lut4", lut_iterations=-1)
    with pytest.raises(tops.InvalidArgument, match="a format is named by a string"):
        tops.quantize(x, 4)
    with pytest.raises(tops.InvalidArgument, match="must be a tensorops.Weight"):
        tops.dequantize(x)
    with pytest.raises(tops.UnsupportedFormat, match="array has dtype object"):
        tops.quantize(object(), "int4-g32")


# ---- files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["int4-g32", "nvfp4", "lut4-row", "q4_0", "int4-g32-affine", "f16"])
def test_save_and_load(fmt, tmp_path, rng):
    w = tops.quantize(rng.standard_normal((6, 80)).astype(np.float32), fmt)
    path = tmp_path / "w.safetensors"
    tops.save(path, w)
    back = tops.load(str(path))
    assert (back.format, back.shape, back.tensor_scale) == (w.format, w.shape, w.tensor_scale)
    for name, plane in w.planes().items():
        np.testing.assert_array_equal(back.planes()[name].view(np.uint8), plane.view(np.uint8))


def test_load_refuses_a_bad_file(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(tops.ParseError) as e:
        tops.load(bad)
    assert e.value.sentence and isinstance(e.value, ValueError)
    with pytest.raises(tops.IoError):
        tops.load(tmp_path / "missing.safetensors")
