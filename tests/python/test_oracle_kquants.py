"""ggml's super-block formats (q4_K, q5_K, q6_K, iq4_xs) and iq4_nl against
the gguf package (llama.cpp's Python reference): tensorops decodes any block
bit for bit as gguf.quants.dequantize does, its quantizer writes blocks that
gguf decodes to the same values, a block holding NaN/Inf decodes to NaN and
leaves the others alone, and a GGUF file the gguf package writes is viewed
in place.  gguf 0.19 has no quantizer for these types, so the quantizer is
checked by its round trip (error bounds) and by gguf's decode of its bytes,
not byte for byte against ggml's search-based reference quantizers."""
import json
import os
import subprocess

import numpy as np
import pytest

import tops
from tops import rng  # noqa: F401  (the seeded generator fixture)

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

# format: (ggml type, elements per block, bytes per block, byte offsets of the f16 fields)
KQ = {"q4_K": (T.Q4_K, 256, 144, (0, 2)), "q5_K": (T.Q5_K, 256, 176, (0, 2)), "q6_K": (T.Q6_K, 256, 210, (208,)),
      "iq4_nl": (T.IQ4_NL, 32, 18, (0,)), "iq4_xs": (T.IQ4_XS, 256, 136, (0,))}
# Largest relative L2 error of the round trip on the test's data (normal, 1% outliers x8).  Over
# 400 seeds the errors were (mean / max): q4_K 0.091 / 0.100, q5_K 0.046 / 0.053, q6_K 0.026 /
# 0.029, iq4_nl 0.106 / 0.118, iq4_xs 0.107 / 0.119; a bound sits well clear of that spread, as
# every CI run draws fresh seeds, and a broken quantizer lands far above it.
REL = {"q4_K": 0.13, "q5_K": 0.07, "q6_K": 0.04, "iq4_nl": 0.14, "iq4_xs": 0.14}


def gguf_decode(fmt, raw, rows):
    t = KQ[fmt][0]
    return gguf.quants.dequantize(raw.reshape(rows, -1), t).astype(np.float32)


def random_blocks(rng, fmt, nblocks):
    """Random bytes in every field, the f16 fields finite (any sign, normal and subnormal)."""
    _, _, nbytes, f16_at = KQ[fmt]
    raw = rng.integers(0, 256, (nblocks, nbytes), dtype=np.uint8)
    for at in f16_at:
        h = rng.integers(0, 0x7C00, nblocks, dtype=np.uint16) | (rng.integers(0, 2, nblocks, dtype=np.uint16) << 15)
        h[:4] = [0x0000, 0x8000, 0x0001, 0x7BFF]
        raw[:, at:at + 2] = h.view(np.uint8).reshape(nblocks, 2)
    return raw


@pytest.mark.parametrize("fmt", list(KQ))
def test_decode_is_bit_identical_with_gguf(fmt, rng):
    _, blk, nbytes, _ = KQ[fmt]
    rows, per_row = 16, 4
    raw = random_blocks(rng, fmt, rows * per_row)
    q = tops.Quantized(fmt, (rows, per_row * blk))
    q.set_data(raw.reshape(-1))
    ours = tops.dequantize(q)
    want = gguf_decode(fmt, raw, rows)
    assert ours.shape == want.shape
    np.testing.assert_array_equal(ours.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt", list(KQ))
def test_quantizer_blocks_decode_as_gguf_does(fmt, rng):
    x = rng.standard_normal((8, 512)).astype(np.float32) * np.float32(0.05)
    x[rng.random(x.shape) < 0.01] *= 8
    x[0, :256] = 0  # an all-zero super-block
    x[1, :256] = np.abs(x[1, :256])  # no negative values: q4_K's min is 0
    q = tops.quantize(x, fmt)
    raw = q.data()
    assert raw.size == 8 * 512 // KQ[fmt][1] * KQ[fmt][2]
    ours = tops.dequantize(q)
    want = gguf_decode(fmt, raw, 8)
    np.testing.assert_array_equal(ours.view(np.uint32), want.view(np.uint32))
    assert not ours[0, :256].any()
    rel = np.linalg.norm(ours - x) / np.linalg.norm(x)
    assert rel < REL[fmt], rel


@pytest.mark.parametrize("fmt", list(KQ))
def test_partial_last_block(fmt, rng):
    x = rng.standard_normal((3, 300)).astype(np.float32)
    q = tops.quantize(x, fmt)
    blk = KQ[fmt][1]
    nb = -(-300 // blk)
    assert q.data().size == 3 * nb * KQ[fmt][2]
    y = tops.dequantize(q)
    assert np.isfinite(y).all()
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < REL[fmt] * 1.5
    whole = 300 // blk * blk
    full = tops.quantize(np.ascontiguousarray(x[:, :whole]), fmt)
    raw = q.data().reshape(3, nb, -1)
    np.testing.assert_array_equal(raw[:, :whole // blk].reshape(-1), full.data())


@pytest.mark.parametrize("fmt", list(KQ))
def test_nan_and_inf_poison_their_block_only(fmt, rng):
    blk = KQ[fmt][1]
    k = 2 * blk + 40
    x = rng.standard_normal((3, k)).astype(np.float32)
    bad = x.copy()
    bad[0, blk + 3], bad[1, k - 1], bad[2, 0] = np.nan, np.inf, -np.inf
    for r, c in ((0, blk + 3), (1, k - 1), (2, 0)):
        x[r, c] = 0.5
    got, want = tops.dequantize(tops.quantize(bad, fmt)), tops.dequantize(tops.quantize(x, fmt))
    mask = np.zeros(x.shape, bool)
    mask[0, blk:2 * blk] = mask[1, (k - 1) // blk * blk:] = mask[2, :blk] = True
    assert np.isnan(got[mask]).all()
    np.testing.assert_array_equal(got[~mask].view(np.uint32), want[~mask].view(np.uint32))


def test_gguf_file_q4_k_is_viewed_in_place(tmp_path, rng):
    cli = os.environ["TOPS_CLI"]
    x = rng.standard_normal((4, 512)).astype(np.float32)
    raws = {f: tops.quantize(x, f).data().reshape(4, -1) for f in KQ}
    path = tmp_path / "k.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for f, raw in raws.items():
        w.add_tensor(f"w.{f}", raw, raw_dtype=KQ[f][0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = json.loads(subprocess.run([cli, "inspect", str(path), "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    fmts = {t["name"]: t["format"] for t in out["tensors"]}
    assert fmts == {f"w.{f}": f for f in KQ}
    reader = gguf.GGUFReader(str(path))
    for f in KQ:
        rt = next(t for t in reader.tensors if t.name == f"w.{f}")
        want = gguf.quants.dequantize(rt.data, rt.tensor_type).reshape(4, 512).astype(np.float32)
        subprocess.run([cli, "quantize", f"{path}:w.{f}", "--format", "f32", "-o", str(tmp_path / "d.safetensors")],
                       check=True, capture_output=True)
        subprocess.run([cli, "quantize", "--dequantize", str(tmp_path / "d.safetensors"), "-o",
                        str(tmp_path / "d.npy")], check=True, capture_output=True)
        assert np.load(tmp_path / "d.npy").tobytes() == want.tobytes(), f
        a = rng.standard_normal((3, 512)).astype(np.float32)
        np.save(tmp_path / "a.npy", a)
        subprocess.run([cli, "matmul", str(tmp_path / "a.npy"), f"{path}:w.{f}", "-o", str(tmp_path / "y.npy"),
                        "--transpose-right"], check=True, capture_output=True)
        y = np.load(tmp_path / "y.npy").astype(np.float64)
        ref = a.astype(np.float64) @ want.astype(np.float64).T
        assert np.abs(y - ref).max() <= 1e-5 * np.abs(a).sum(axis=1).max() * np.abs(want).max(), f
