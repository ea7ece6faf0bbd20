"""Model files made by the registries' own writers: GGUF files by the `gguf`
package (llama.cpp's Python writer and its quantizers), safetensors files by
the `safetensors` package.  tensorops opens them, names their tensors, and
decodes them bit for bit as gguf's own dequantize and numpy do; matmul on a
tensor named FILE:tensor matches numpy on the decoded weight; a checkpoint
rewritten by `tensorops quantize` is read back by the safetensors package."""
import json
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
safetensors = pytest.importorskip("safetensors")
from gguf import GGMLQuantizationType as T  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

CLI = os.environ["TOPS_CLI"]


def run(*args, ok=True):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def weights(shape, seed, scale=0.05):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32) * scale
    w[rng.random(shape) < 0.01] *= 8
    return w


def decoded(path, tensor, tmp_path):
    """What tensorops decodes for FILE:tensor, as f32 (through f32 planes,
    which copy exactly)."""
    out = tmp_path / "dec.safetensors"
    run("quantize", f"{path}:{tensor}", "--format", "f32", "-o", out)
    run("quantize", "--dequantize", out, "-o", tmp_path / "dec.npy")
    return np.load(tmp_path / "dec.npy")


# shapes: [N, K] in numpy order; GGUF stores ne = [K, N]
GGUF_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q8_0, T.MXFP4]


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    path = d / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_bool("flag", True)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "hello", "wörld"])
    w.add_array("ints", [-1, 2, 3])
    src = {}
    for i, t in enumerate(GGUF_TYPES):
        x = weights((6, 96), 10 + i)
        name = f"blk.0.{t.name.lower()}.weight"
        src[name] = (t, x)
        if t == T.F32:
            w.add_tensor(name, x)
        elif t == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)
    # a 3-D f32 tensor (ne reversed: numpy [2, 3, 32]) and a k-quant tensorops does not decode
    w.add_tensor("cube", weights((2, 3, 32), 30))
    rng = np.random.default_rng(31)
    w.add_tensor("k4", rng.integers(0, 256, (2, 144), dtype=np.uint8), raw_dtype=T.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, src


def test_gguf_inspect_lists_everything(gguf_file):
    path, src = gguf_file
    out = json.loads(run("inspect", path, "--json").stdout)
    assert out["kind"] == "gguf"
    meta = out["metadata"]
    assert meta["general.name"] == {"type": "STRING", "value": "tiny"}
    assert meta["llama.block_count"] == {"type": "UINT32", "value": 1}
    assert meta["flag"]["value"] is True
    assert meta["tokenizer.ggml.tokens"]["head"] == ["<s>", "hello", "wörld"]
    assert meta["ints"]["item_type"] == "INT32" and meta["ints"]["head"] == [-1, 2, 3]
    reader = gguf.GGUFReader(str(path))
    theirs = {t.name: t for t in reader.tensors}
    tensors = {t["name"]: t for t in out["tensors"]}
    assert set(tensors) == set(theirs)
    for name, t in theirs.items():
        ours = tensors[name]
        assert ours["shape"] == [int(v) for v in reversed(t.shape)], name  # numpy order
        assert ours["dtype"] == t.tensor_type.name
        assert ours["bytes"] == t.n_bytes
        assert ours["offset"] == t.data_offset  # gguf's reader gives it from the file's start
    assert tensors["blk.0.q4_0.weight"]["format"] == "q4_0"
    assert tensors["blk.0.mxfp4.weight"]["format"] == "gguf-mxfp4"
    assert tensors["k4"]["format"] is None and "Q4_K" in tensors["k4"]["note"]


@pytest.mark.parametrize("t", GGUF_TYPES, ids=lambda t: t.name)
def test_gguf_tensors_decode_as_gguf_does(gguf_file, tmp_path, t):
    path, src = gguf_file
    name = f"blk.0.{t.name.lower()}.weight"
    reader = gguf.GGUFReader(str(path))
    rt = next(x for x in reader.tensors if x.name == name)
    want = gguf.quants.dequantize(rt.data, rt.tensor_type).reshape(6, 96).astype(np.float32)
    ours = decoded(path, name, tmp_path)
    assert ours.shape == (6, 96)
    assert ours.tobytes() == want.tobytes()  # bit for bit
    # and a matmul on the tensor in place matches numpy on the decoded weight
    x = weights((5, 96), 40, 1.0)
    np.save(tmp_path / "x.npy", x)
    run("matmul", tmp_path / "x.npy", f"{path}:{name}", "-o", tmp_path / "y.npy", "--transpose-right")
    y = np.load(tmp_path / "y.npy").astype(np.float64)
    ref = x.astype(np.float64) @ want.astype(np.float64).T
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(x).sum(axis=1).max() * np.abs(want).max()


def test_gguf_dimension_order(gguf_file, tmp_path):
    path, _ = gguf_file
    reader = gguf.GGUFReader(str(path))
    rt = next(x for x in reader.tensors if x.name == "cube")
    r = run("quantize", f"{path}:cube", "--format", "f32", "-o", tmp_path / "c.safetensors", ok=False)
    assert r.returncode == 1 and "3-D" in r.stderr
    out = json.loads(run("inspect", path, "--json").stdout)
    cube = next(t for t in out["tensors"] if t["name"] == "cube")
    assert cube["shape"] == [2, 3, 32] and list(rt.data.shape) == [2, 3, 32]


def test_gguf_unsupported_type_is_named(gguf_file, tmp_path):
    path, _ = gguf_file
    np.save(tmp_path / "x.npy", weights((1, 256), 1))
    r = run("matmul", tmp_path / "x.npy", f"{path}:k4", "-o", tmp_path / "y.npy", "--transpose-right", ok=False)
    assert r.returncode == 1 and "GGUF type Q4_K" in r.stderr, r.stderr
    r = run("matmul", tmp_path / "x.npy", f"{path}:nope", "-o", tmp_path / "y.npy", ok=False)
    assert r.returncode == 1 and 'no tensor "nope"' in r.stderr


@pytest.fixture(scope="module")
def st_file(tmp_path_factory):
    """A Hugging Face style checkpoint written by the safetensors package:
    many tensors, long names, F32/F16/BF16/F8/I64, metadata {"format": "pt"}."""
    d = tmp_path_factory.mktemp("st")
    arrays = {
        "model.layers.0.mlp.down_proj.weight": weights((16, 64), 50),
        "model.layers.0.self_attn.q_proj.weight": weights((64, 64), 51).astype(np.float16),
        "model.norm.weight": np.ones(64, np.float32),
        "model.embed_tokens.weight": weights((10, 64), 52).astype(ml_dtypes.bfloat16),
        "lm_head.weight": weights((10, 64), 53, 100.0).astype(ml_dtypes.float8_e4m3fn),
        "position_ids": np.arange(7, dtype=np.int64)[None, :],
    }
    dtypes = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
              np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(ml_dtypes.float8_e4m3fn): "float8_e4m3fn",
              np.dtype(np.int64): "int64"}
    specs = {k: safetensors.TensorSpec(dtype=dtypes[v.dtype], shape=list(v.shape), data_ptr=v.ctypes.data,
                                       data_len=v.nbytes) for k, v in arrays.items()}
    raw = safetensors.serialize(specs, metadata={"format": "pt"})
    path = d / "model.safetensors"
    path.write_bytes(raw)
    return path, arrays


def test_safetensors_package_file_opens_by_name(st_file, tmp_path):
    path, arrays = st_file
    out = json.loads(run("inspect", path, "--json").stdout)
    assert out["kind"] == "safetensors" and out["metadata"]["format"]["value"] == "pt"
    tensors = {t["name"]: t for t in out["tensors"]}
    assert set(tensors) == set(arrays)
    for name, a in arrays.items():
        assert tensors[name]["shape"] == list(a.shape)
        assert tensors[name]["bytes"] == a.nbytes
    assert tensors["position_ids"]["format"] is None and "I64" in tensors["position_ids"]["note"]
    for name in ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                 "model.embed_tokens.weight", "lm_head.weight"]:
        a = arrays[name]
        assert decoded(path, name, tmp_path).tobytes() == a.astype(np.float32).tobytes(), name
    x = weights((3, 64), 54, 1.0)
    np.save(tmp_path / "x.npy", x)
    name = "model.embed_tokens.weight"
    run("matmul", tmp_path / "x.npy", f"{path}:{name}", "-o", tmp_path / "y.npy", "--transpose-right")
    ref = x.astype(np.float64) @ arrays[name].astype(np.float64).T
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-5, atol=1e-5)


def test_checkpoint_rewrite_reads_back(st_file, tmp_path):
    path, arrays = st_file
    out = tmp_path / "q.safetensors"
    res = json.loads(run("quantize", path, "--format", "int4-g32", "-o", out, "--json", "--quiet").stdout)
    done = {r["name"] for r in res["quantized"]}
    assert done == {"model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                    "model.embed_tokens.weight"}  # every 2-D float weight; fp8 and 1-D copied
    # the reference reader takes it; copies are byte for byte
    back = {k: (v["dtype"], v["shape"], bytes(v["data"])) for k, v in safetensors.deserialize(out.read_bytes())}
    for name in ["model.norm.weight", "position_ids", "lm_head.weight"]:
        assert back[name][2] == arrays[name].tobytes() and back[name][1] == list(arrays[name].shape)
    assert back["lm_head.weight"][0] == "F8_E4M3"
    back = {k: np.frombuffer(v[2], {"U8": np.uint8, "F16": np.float16, "F32": np.float32, "I64": np.int64,
                                           "F8_E4M3": ml_dtypes.float8_e4m3fn}[v[0]]).reshape(v[1])
            for k, v in back.items()}
    header = json.loads(out.read_bytes()[8:8 + int.from_bytes(out.read_bytes()[:8], "little")])
    meta = header["__metadata__"]
    assert meta["format"] == "pt"
    assert meta["model.layers.0.mlp.down_proj.weight.format"] == "int4-g32"
    assert meta["model.layers.0.mlp.down_proj.weight.shape"] == "[16, 64]"
    # the planes decode by docs/formats.md to what tensorops decodes
    name = "model.layers.0.mlp.down_proj.weight"
    packed, scales = back[name], back[name + ".scales"].astype(np.float32)
    codes = np.empty((16, 64), np.int8)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    codes = np.where(codes >= 8, codes - 16, codes).astype(np.float32)
    docs = codes * np.repeat(scales, 32, axis=1)
    ours = decoded(out, name, tmp_path)
    assert ours.tobytes() == docs.astype(np.float32).tobytes()
    assert np.linalg.norm(ours - arrays[name]) / np.linalg.norm(arrays[name]) < 0.2
    # never over an input
    r = run("quantize", path, "--format", "q8_0", "-o", path, ok=False)
    assert r.returncode == 2 and "same file" in r.stderr


def test_e4m3_gets_a_scale_from_the_data(tmp_path):
    w = weights((8, 64), 60, 1000.0)  # far past e4m3's 448
    save_file({"w": w}, str(tmp_path / "w.safetensors"))
    run("quantize", tmp_path / "w.safetensors", "--format", "e4m3", "-o", tmp_path / "q.safetensors", "--quiet")
    raw = (tmp_path / "q.safetensors").read_bytes()
    meta = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
    scale = np.float32(meta["w.tensor_scale"])
    assert scale == np.float32(np.abs(w).max()) / np.float32(448)
    assert safetensors.deserialize(raw)[0][1]["dtype"] == "F8_E4M3"
    want = np.clip(w / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale
    ours = decoded(tmp_path / "q.safetensors", "w", tmp_path)
    np.testing.assert_array_equal(ours, want)
    assert np.abs(ours).max() == pytest.approx(np.abs(w).max(), rel=1e-6)
