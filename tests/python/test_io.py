"""File I/O against outside oracles: numpy writes and reads the .npy files,
and the safetensors planes that `tensorops quantize -o` writes are decoded
here with numpy following docs/formats.md, then compared with what
`tensorops quantize --dequantize` decodes from the same file."""
import json
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

CLI = os.environ["TOPS_CLI"]


def run(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def weights(shape, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) * 0.05
    w[rng.random(shape) < 0.01] *= 8  # a few outliers, as real weights have
    return w


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    dtypes = {"U8": np.uint8, "I8": np.int8, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F32": np.float32,
              "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}
    meta = header.pop("__metadata__")
    planes = {}
    for name, e in header.items():
        b, z = e["data_offsets"]
        planes[name] = np.frombuffer(data[b:z], dtype=dtypes[e["dtype"]]).reshape(e["shape"])
    return meta, planes


def nibbles(packed, k):
    """The 4-bit codes of each row: byte j = code[2j] | code[2j+1] << 4."""
    out = np.empty((packed.shape[0], packed.shape[1] * 2), np.uint8)
    out[:, 0::2] = packed & 0xF
    out[:, 1::2] = packed >> 4
    return out[:, :k]


def sixbits(packed, k):
    """6-bit codes: each 3 bytes are a little-endian 24-bit word of 4 codes."""
    b = packed.reshape(packed.shape[0], -1, 3).astype(np.uint32)
    w = b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16
    codes = np.stack([(w >> (6 * i)) & 0x3F for i in range(4)], axis=-1)
    return codes.reshape(packed.shape[0], -1)[:, :k].astype(np.uint8)


def per_block(scales, g, k):
    return np.repeat(scales.astype(np.float32), g, axis=1)[:, :k]


def e8m0(s):
    return np.ldexp(np.float32(1), s.astype(np.int32) - 127).astype(np.float32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def decode(meta, p, k):
    """Decodes the planes by docs/formats.md alone."""
    f = meta["format"]
    w = p["weight"]
    if f == "int4-g32":
        q = nibbles(w, k).astype(np.int8)
        q = np.where(q >= 8, q - 16, q).astype(np.float32)
        return q * per_block(p["weight.scales"], 32, k)
    if f == "int4-g32:e8m0":
        q = nibbles(w, k).astype(np.int8)
        q = np.where(q >= 8, q - 16, q).astype(np.float32)
        return q * per_block(e8m0(p["weight.scales"]), 32, k)
    if f == "int8-g64:bf16":
        return w.astype(np.float32) * per_block(p["weight.scales"], 64, k)
    if f == "int4-g32-affine":
        q = nibbles(w, k).astype(np.float32)
        return per_block(p["weight.scales"], 32, k) * q + per_block(p["weight.biases"], 32, k)
    if f == "mxfp4":
        return E2M1[nibbles(w, k)] * per_block(e8m0(p["weight.scales"]), 32, k)
    if f == "mxfp6":  # e2m3 codes
        c = sixbits(w, k)
        mant, exp, sign = c & 7, (c >> 3) & 3, np.where(c & 0x20, -1, 1)
        mag = np.where(exp == 0, mant / 8.0, (1 + mant / 8.0) * 2.0 ** (exp.astype(np.int32) - 1))
        return (sign * mag).astype(np.float32) * per_block(e8m0(p["weight.scales"]), 32, k)
    if f == "nvfp4":
        s_enc = np.float32(float(meta["tensor_scale"]))
        return E2M1[nibbles(w, k)] * per_block(p["weight.scales"], 16, k) / s_enc
    if f == "lut4":
        return p["weight.codebook"].astype(np.float32)[0][nibbles(w, k)]
    if f == "lut4-row":
        cb = p["weight.codebook"].astype(np.float32)
        return np.take_along_axis(cb, nibbles(w, k).astype(np.int64), axis=1)
    if f == "e4m3-ch":
        return w.astype(np.float32) * p["weight.scales"].astype(np.float32)
    if f == "q4_0":  # blocks: f16 d | qs[16]; element j low nibble of qs[j], j+16 high
        blocks = w.reshape(w.shape[0], -1, 18)
        d = blocks[..., :2].copy().view(np.float16).astype(np.float32)
        qs = blocks[..., 2:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.float32) - 8
        return (q * d).reshape(w.shape[0], -1)[:, :k]
    if f == "q8_0":
        blocks = w.reshape(w.shape[0], -1, 34)
        d = blocks[..., :2].copy().view(np.float16).astype(np.float32)
        q = blocks[..., 2:].view(np.int8).astype(np.float32)
        return (q * d).reshape(w.shape[0], -1)[:, :k]
    raise AssertionError(f)


# K = 200 leaves a short last block in every row.
@pytest.mark.parametrize("fmt", ["int4-g32", "int4-g32:e8m0", "int8-g64:bf16", "int4-g32-affine", "mxfp4", "mxfp6",
                                 "nvfp4", "lut4", "lut4-row", "e4m3-ch", "q4_0", "q8_0"])
def test_safetensors_layout_matches_docs(tmp_path, fmt):
    w = weights((6, 200), 1)
    np.save(tmp_path / "w.npy", w)
    run("quantize", tmp_path / "w.npy", "--format", fmt, "-o", tmp_path / "q.safetensors")
    run("quantize", "--dequantize", tmp_path / "q.safetensors", "-o", tmp_path / "d.npy")
    meta, planes = read_safetensors(tmp_path / "q.safetensors")
    assert meta["format"] == fmt and meta["shape"] == "[6, 200]"
    ours = np.load(tmp_path / "d.npy")
    theirs = decode(meta, planes, 200)
    np.testing.assert_allclose(ours, theirs, rtol=2e-7, atol=0)
    # and the quantization is a close one
    assert np.linalg.norm(ours - w) / np.linalg.norm(w) < 0.3


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("shape", [(5, 7), (33,)])
def test_numpy_npy_round_trips_exactly(tmp_path, version, shape):
    w = weights(shape, 2)
    w.flat[0] = np.inf
    w.flat[1] = -0.0
    with open(tmp_path / "w.npy", "wb") as f:
        np.lib.format.write_array(f, w, version=version)
    run("quantize", tmp_path / "w.npy", "--format", "f32", "-o", tmp_path / "q.safetensors")
    run("quantize", "--dequantize", tmp_path / "q.safetensors", "-o", tmp_path / "d.npy")
    back = np.load(tmp_path / "d.npy")
    assert back.dtype == np.float32 and back.shape == shape
    assert back.tobytes() == w.tobytes()


def test_f16_and_bf16_outputs(tmp_path):
    w = weights((4, 40), 3)
    h = w.astype(np.float16)
    np.save(tmp_path / "h.npy", h)
    run("quantize", tmp_path / "h.npy", "--format", "f16", "-o", tmp_path / "q.safetensors")
    run("quantize", "--dequantize", tmp_path / "q.safetensors", "-o", tmp_path / "d.npy", "--dtype", "f16")
    back = np.load(tmp_path / "d.npy")
    assert back.dtype == np.float16 and back.tobytes() == h.tobytes()
    np.save(tmp_path / "w.npy", w)
    run("quantize", tmp_path / "w.npy", "--format", "f32", "-o", tmp_path / "q.safetensors")
    run("quantize", "--dequantize", tmp_path / "q.safetensors", "-o", tmp_path / "b.npy", "--dtype", "bf16")
    bits = np.load(tmp_path / "b.npy")
    assert bits.dtype == np.uint16
    assert bits.tobytes() == w.astype(ml_dtypes.bfloat16).view(np.uint16).tobytes()


def test_report_matches_numpy(tmp_path):
    w = weights((16, 96), 4)
    np.save(tmp_path / "w.npy", w)
    out = json.loads(run("quantize", tmp_path / "w.npy", "--format", "int4-g32", "-o", tmp_path / "q.safetensors",
                         "--json"))
    run("quantize", "--dequantize", tmp_path / "q.safetensors", "-o", tmp_path / "d.npy")
    d = np.load(tmp_path / "d.npy").astype(np.float64)
    a = w.astype(np.float64)
    r = out["results"][0]
    assert r["format"] == "int4-g32" and r["bits_per_weight"] == 4.5
    assert r["rel_l2"] == pytest.approx(np.linalg.norm(a - d) / np.linalg.norm(a), rel=1e-9)
    assert r["max_abs"] == pytest.approx(np.abs(a - d).max(), rel=1e-9)
    assert r["cos_sim"] == pytest.approx(a.ravel() @ d.ravel() / np.linalg.norm(a) / np.linalg.norm(d), rel=1e-9)
    assert r["snr_db"] == pytest.approx(10 * np.log10((a * a).sum() / ((a - d) ** 2).sum()), rel=1e-9)


def test_numpy_rejections_are_clean(tmp_path):
    np.save(tmp_path / "d.npy", np.zeros((2, 3), np.float64))
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((2, 3), np.float32)))
    np.save(tmp_path / "b.npy", np.zeros((2, 3), ">f4"))
    for name, needle in [("d.npy", "'<f8'"), ("f.npy", "Fortran"), ("b.npy", "'>f4'")]:
        r = subprocess.run([CLI, "quantize", str(tmp_path / name), "--format", "mxfp4"], capture_output=True, text=True)
        assert r.returncode == 1 and needle in r.stderr, r.stderr


def test_reference_safetensors_implementation_agrees(tmp_path):
    """Runs where the `safetensors` package is installed (it is not in
    scripts/requirements-test.txt): its Rust reader accepts our files, and
    our reader accepts what its writer makes."""
    st = pytest.importorskip("safetensors")
    from safetensors.numpy import save_file
    w = weights((8, 96), 5)
    np.save(tmp_path / "w.npy", w)
    for fmt, names in [("int4-g32", {"weight": "U8", "weight.scales": "F16"}),
                       ("nvfp4", {"weight": "U8", "weight.scales": "F8_E4M3"}),
                       ("mxfp8", {"weight": "F8_E4M3", "weight.scales": "U8"}),
                       ("lut4-row", {"weight": "U8", "weight.codebook": "F16"})]:
        run("quantize", tmp_path / "w.npy", "--format", fmt, "-o", tmp_path / "q.safetensors")
        got = {k: v["dtype"] for k, v in st.deserialize(open(tmp_path / "q.safetensors", "rb").read())}
        assert got == names, fmt
    rng = np.random.default_rng(6)
    save_file({"weight": rng.integers(0, 256, (3, 20), dtype=np.uint8),
               "weight.scales": rng.random((3, 2)).astype(np.float16),
               "weight.biases": rng.random((3, 2)).astype(np.float16)},
              str(tmp_path / "ext.safetensors"), metadata={"format": "int4-g32-affine", "shape": "[3, 40]"})
    run("quantize", "--dequantize", tmp_path / "ext.safetensors", "-o", tmp_path / "ext.npy")
    assert np.load(tmp_path / "ext.npy").shape == (3, 40)
