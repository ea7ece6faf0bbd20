"""tensorops.open / Model / tensorops.save: checkpoints written by the
registries' own writers (the `gguf` package, llama.cpp's Python writer and
quantizers; the `safetensors` package) read by name through the package.
Oracles: gguf's GGUFReader and gguf.quants.dequantize, the safetensors
package's reader, numpy in float64."""
import gc
import os

import ml_dtypes as md
import numpy as np
import pytest

import tensorops as tops

gguf = pytest.importorskip("gguf")
safetensors = pytest.importorskip("safetensors")
from gguf import GGMLQuantizationType as T  # noqa: E402

QUANT = [T.Q4_0, T.Q4_1, T.Q8_0, T.MXFP4]
PLAIN = [T.F32, T.F16, T.BF16]
FORMAT = {T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q8_0: "q8_0", T.MXFP4: "gguf-mxfp4"}


def weights(shape, rng, scale=0.05):
    w = rng.standard_normal(shape).astype(np.float32) * scale
    w[rng.random(shape) < 0.01] *= 8
    return w


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    rng = np.random.default_rng(1234)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.block_count", 3)
    w.add_uint64("big", 2**40 + 3)
    w.add_int32("neg", -7)
    w.add_int64("neg64", -2**40)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float64("f64", 0.1)
    w.add_bool("flag", True)
    w.add_bool("off", False)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "hello", "wörld", ""])
    w.add_array("tokenizer.ggml.scores", [0.5, -1.25, 3.0])
    w.add_array("ints", [-1, 2, 3])
    src = {}
    for t in PLAIN + QUANT:
        shape = (33, 256) if t in QUANT else (7, 96)
        x = weights(shape, rng)
        name = f"blk.0.{t.name.lower()}.weight"
        src[name] = x
        if t == T.F32:
            w.add_tensor(name, x)
        elif t == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)
    w.add_tensor("cube", weights((2, 3, 32), rng))
    w.add_tensor("ids", np.arange(-5, 5, dtype=np.int32))
    w.add_tensor("k2", rng.integers(0, 256, (8, 84), dtype=np.uint8), raw_dtype=T.Q2_K)  # 672 bytes: ends on the 32-byte alignment, so the last byte is data
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, src


def reader_tensor(path, name):
    return next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == name)


def test_gguf_names_shapes_info(gguf_file):
    path, _ = gguf_file
    theirs = gguf.GGUFReader(str(path)).tensors
    with tops.open(path) as m:
        assert m.kind == "gguf"
        assert m.names() == [t.name for t in theirs] == list(m)
        assert len(m) == len(theirs)
        assert "cube" in m and "nope" not in m and 3 not in m
        for t in theirs:
            info = m.info(t.name)
            assert info.name == t.name
            assert info.shape == tuple(int(v) for v in reversed(t.shape)), t.name  # numpy order: ne reversed
            assert info.dtype == t.tensor_type.name
            assert info.nbytes == t.n_bytes
            assert info.offset == t.data_offset
        assert m.info("blk.0.q4_0.weight").shape == (33, 256)
        assert m.info("blk.0.mxfp4.weight").format == "gguf-mxfp4"
        assert m.info("k2").format is None
        with pytest.raises(tops.NotFound, match='has no tensor "blk.0.q4_0"; names like it: blk.0.q4_0.weight'):
            m.info("blk.0.q4_0")
        with pytest.raises(tops.NotFound):
            m["nope"]


def test_gguf_metadata_values(gguf_file):
    path, _ = gguf_file
    meta = tops.open(path).metadata
    assert meta["general.architecture"] == "llama" and meta["general.name"] == "tiny"
    assert meta["llama.block_count"] == 3 and type(meta["llama.block_count"]) is int
    assert meta["big"] == 2**40 + 3 and meta["neg"] == -7 and meta["neg64"] == -2**40
    assert meta["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert meta["f64"] == 0.1
    assert meta["flag"] is True and meta["off"] is False
    assert meta["tokenizer.ggml.tokens"] == ["<s>", "hello", "wörld", ""]
    assert meta["tokenizer.ggml.scores"] == [0.5, -1.25, 3.0]
    assert meta["ints"] == [-1, 2, 3]
    theirs = gguf.GGUFReader(str(path)).fields
    assert set(meta) == {k for k in theirs if not k.startswith("GGUF.")}


@pytest.mark.parametrize("t", PLAIN, ids=lambda t: t.name)
def test_gguf_plain_tensors_are_numpy_views(gguf_file, t):
    path, src = gguf_file
    name = f"blk.0.{t.name.lower()}.weight"
    want = reader_tensor(path, name).data
    a = tops.open(path)[name]
    assert isinstance(a, np.ndarray) and not a.flags.writeable
    assert a.dtype == {T.F32: np.float32, T.F16: np.float16, T.BF16: md.bfloat16}[t]
    assert a.shape == (7, 96)
    assert a.tobytes() == np.asarray(want).tobytes()  # bit for bit, the file's bytes
    with pytest.raises(ValueError):
        a[0, 0] = 1


def test_gguf_other_tensors(gguf_file):
    path, _ = gguf_file
    m = tops.open(path)
    cube = m["cube"]
    assert cube.shape == (2, 3, 32) and np.array_equal(cube, reader_tensor(path, "cube").data)
    ids = m["ids"]
    assert ids.dtype == np.int32 and ids.tolist() == list(range(-5, 5))
    with pytest.raises(tops.UnsupportedFormat, match="GGUF type Q2_K"):
        m["k2"]
    assert m.raw("k2").tobytes() == reader_tensor(path, "k2").data.tobytes()


@pytest.mark.parametrize("t", QUANT, ids=lambda t: t.name)
def test_gguf_quantized_weight_decodes_as_gguf_does(gguf_file, t, rng):
    path, src = gguf_file
    name = f"blk.0.{t.name.lower()}.weight"
    rt = reader_tensor(path, name)
    want = gguf.quants.dequantize(rt.data, rt.tensor_type).reshape(33, 256).astype(np.float32)
    m = tops.open(path)
    w = m[name]
    assert isinstance(w, tops.Weight) and w.format == FORMAT[t] and w.shape == (33, 256)
    assert w.data.tobytes() == rt.data.tobytes()            # the blocks in place
    assert not w.data.flags.writeable
    assert tops.dequantize(w).tobytes() == want.tobytes()   # bit for bit
    # matmul on the weight from the file against numpy in f64 on the decoded weight
    for rows in (1, 7):
        x = rng.standard_normal((rows, 256)).astype(np.float32)
        y = tops.matmul(x, w)
        ref = x.astype(np.float64) @ want.astype(np.float64).T
        bound = 1e-5 * np.abs(x).sum(axis=1, keepdims=True) * np.abs(want).max()
        assert y.shape == (rows, 33) and np.all(np.abs(y - ref) <= bound)


@pytest.fixture(scope="module")
def st_file(tmp_path_factory):
    """A Hugging Face style checkpoint written by the safetensors package."""
    rng = np.random.default_rng(99)
    arrays = {
        "model.layers.0.mlp.down_proj.weight": weights((16, 64), rng),
        "model.layers.0.self_attn.q_proj.weight": weights((64, 64), rng).astype(np.float16),
        "model.norm.weight": np.ones(64, np.float32),
        "model.embed_tokens.weight": weights((10, 64), rng).astype(md.bfloat16),
        "lm_head.weight": weights((10, 64), rng, 100.0).astype(md.float8_e4m3fn),
        "e5": weights((4, 8), rng).astype(md.float8_e5m2),
        "position_ids": np.arange(7, dtype=np.int64)[None, :],
        "mask": rng.random((3, 5)) < 0.5,
        "f64": rng.standard_normal((2, 2, 2, 2, 3)),
        "i8": rng.integers(-128, 128, (5, 3), dtype=np.int8),
        "u16": rng.integers(0, 65536, 9, dtype=np.uint16),
        "scalar": np.array(2.5, np.float32),
    }
    names = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(md.bfloat16): "bfloat16",
             np.dtype(md.float8_e4m3fn): "float8_e4m3fn", np.dtype(md.float8_e5m2): "float8_e5m2",
             np.dtype(np.int64): "int64", np.dtype(bool): "bool", np.dtype(np.float64): "float64",
             np.dtype(np.int8): "int8", np.dtype(np.uint16): "uint16"}
    specs = {k: safetensors.TensorSpec(dtype=names[v.dtype], shape=list(v.shape), data_ptr=v.ctypes.data,
                                       data_len=v.nbytes) for k, v in arrays.items()}
    raw = safetensors.serialize(specs, metadata={"format": "pt", "note": "héllo"})
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    path.write_bytes(raw)
    return path, arrays


def test_safetensors_package_file_by_name(st_file, rng):
    path, arrays = st_file
    with tops.open(str(path)) as m:
        assert m.kind == "safetensors"
        assert m.metadata == {"format": "pt", "note": "héllo"}
        assert sorted(m.names()) == sorted(arrays)
        for name, a in arrays.items():
            got = m[name]
            assert isinstance(got, np.ndarray) and not got.flags.writeable, name
            assert got.dtype == a.dtype and got.shape == a.shape, name
            assert got.tobytes() == a.tobytes(), name
            info = m.info(name)
            assert info.shape == a.shape and info.nbytes == a.nbytes
        assert m.info("lm_head.weight").dtype == "F8_E4M3" and m.info("lm_head.weight").format == "e4m3"
        assert m.info("position_ids").format is None
        # a matmul on a bf16 weight straight from the file, against numpy in f64
        x = rng.standard_normal((3, 64)).astype(np.float32)
        wt = m["model.embed_tokens.weight"]
        y = tops.matmul(x, wt, transpose_right=True)
        ref = x.astype(np.float64) @ arrays["model.embed_tokens.weight"].astype(np.float64).T
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_open_from_bytes_and_buffers(gguf_file, st_file):
    for path in (gguf_file[0], st_file[0]):
        data = path.read_bytes()
        byname = tops.open(path)
        for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
            m = tops.open(buf)
            assert m.kind == byname.kind and m.names() == byname.names()
            assert m.metadata == byname.metadata
            for name in m.names():
                if byname.info(name).format is None and byname.info(name).dtype.startswith("Q"):
                    continue
                a, b = m[name], byname[name]
                pa, pb = (a.data, b.data) if isinstance(a, tops.Weight) else (a, b)
                assert pa.tobytes() == pb.tobytes(), name
    # a buffer at an odd address: plain tensors are unaligned numpy views, which matmul copies
    data = st_file[0].read_bytes()
    odd = bytearray(len(data) + 1)
    odd[1:] = data
    m = tops.open(memoryview(odd)[1:])
    a = m["model.layers.0.mlp.down_proj.weight"]
    assert a.tobytes() == st_file[1]["model.layers.0.mlp.down_proj.weight"].tobytes()
    x = np.ones((2, 64), np.float32)
    ref = x.astype(np.float64) @ a.astype(np.float64).T
    np.testing.assert_allclose(tops.matmul(x, a, transpose_right=True), ref, rtol=1e-5, atol=1e-5)
    del m, a
    # the views keep the caller's bytes alive
    data = bytearray(st_file[0].read_bytes())
    a = tops.open(data)["model.norm.weight"]
    with pytest.raises(BufferError):
        data.extend(b"x")  # held by the model: it cannot move
    del data
    gc.collect()
    assert np.array_equal(a, np.ones(64, np.float32))
    with pytest.raises(tops.InvalidArgument, match="no bytes"):
        tops.open(b"")
    with pytest.raises(tops.InvalidArgument, match="must be a path"):
        tops.open(12)


def _mapped(path):
    with open("/proc/self/maps") as f:
        return str(path) in f.read()


def test_views_outlive_the_model(gguf_file, st_file, rng):
    path, src = gguf_file
    x = rng.standard_normal((2, 256)).astype(np.float32)
    with tops.open(path) as m:
        w = m["blk.0.q8_0.weight"]
        a = m["blk.0.f32.weight"]
        row = a[3]                       # a view of a view
        y0 = tops.matmul(x, w)
        metadata = m.metadata
    assert m.closed
    with pytest.raises(tops.InvalidArgument, match="is closed"):
        m["blk.0.f32.weight"]
    with pytest.raises(tops.InvalidArgument, match="is closed"):
        m.names()
    gc.collect()
    # the mapping stays until the last view goes; the views read the file's values
    assert np.array_equal(a, src["blk.0.f32.weight"]) and np.array_equal(row, src["blk.0.f32.weight"][3])
    assert np.array_equal(tops.matmul(x, w), y0)
    assert metadata["general.name"] == "tiny"
    if not os.path.exists("/proc/self/maps"):
        return
    assert _mapped(path)
    del w, a
    gc.collect()
    assert _mapped(path)                 # row still views it
    del row
    gc.collect()
    assert not _mapped(path)
    # a model dropped without close() unmaps too, once its views are gone
    m = tops.open(st_file[0])
    b = m["model.norm.weight"]
    del m
    gc.collect()
    assert _mapped(st_file[0]) and b.sum() == 64
    del b
    gc.collect()
    assert not _mapped(st_file[0])


def test_round_trip_through_save(gguf_file, tmp_path, rng):
    gpath, _ = gguf_file
    src = tops.open(gpath)
    q4 = src["blk.0.q4_0.weight"]                       # a GGUF weight, copied into safetensors
    i4 = tops.quantize(rng.standard_normal((8, 64)).astype(np.float32), "int4-g32")
    nv = tops.quantize(rng.standard_normal((4, 64)).astype(np.float32) * 50, "nvfp4")
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "bf16": rng.standard_normal((2, 3)).astype(md.bfloat16),
        "e4m3": rng.standard_normal((2, 8)).astype(md.float8_e4m3fn),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "bool": np.array([True, False, True]),
        "scalar": np.array(7, np.int32),
        "strided": np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2],   # copied contiguous
        "big_endian": np.arange(4, dtype=">f4"),
        "q4": q4, "i4": i4, "nv": nv,
    }
    path = tmp_path / "out.safetensors"
    tops.save(path, tensors, metadata={"format": "pt", "who": "test"})
    with tops.open(path) as m:
        assert sorted(m.names()) == sorted(tensors)
        assert m.metadata["format"] == "pt" and m.metadata["who"] == "test"
        for name, v in tensors.items():
            got = m[name]
            if isinstance(v, tops.Weight):
                assert isinstance(got, tops.Weight) and got.format == v.format and got.shape == v.shape
                assert got.tensor_scale == pytest.approx(v.tensor_scale, rel=1e-6)
                assert got.data.tobytes() == v.data.tobytes()
                for a, b in ((got.scales, v.scales), (got.bias, v.bias), (got.codebook, v.codebook)):
                    assert (a is None and b is None) or a.tobytes() == b.tobytes(), name
                assert tops.dequantize(got).tobytes() == tops.dequantize(v).tobytes()
            else:
                want = np.asarray(v)
                assert got.shape == want.shape, name
                assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), name
        assert m["scalar"].shape == () and m["big_endian"].dtype == np.float32
        assert m.info("i4").dtype == "U8" and m.info("i4").format == "int4-g32"
        assert m.metadata["i4.format"] == "int4-g32"
    # the safetensors package reads what tensorops wrote
    theirs = dict(safetensors.deserialize(path.read_bytes()))
    assert theirs["i64"]["dtype"] == "I64" and bytes(theirs["i64"]["data"]) == tensors["i64"].tobytes()
    assert theirs["bf16"]["dtype"] == "BF16" and theirs["scalar"]["shape"] == []
    assert bytes(theirs["q4"]["data"]) == q4.data.tobytes()


def test_save_never_destroys_a_file(tmp_path):
    path = tmp_path / "keep.safetensors"
    tops.save(path, {"a": np.ones(3, np.float32)})
    before = path.read_bytes()
    bad = [
        ({"__metadata__": np.ones(2, np.float32)}, None, tops.InvalidArgument, "reserved name"),
        ({"": np.ones(2, np.float32)}, None, tops.InvalidArgument, "empty name"),
        ({"c": np.ones(2, np.complex64)}, None, tops.UnsupportedFormat, "complex64"),
        ({"o": np.array([object()])}, None, tops.UnsupportedFormat, "object"),
        ({"w": np.ones(2, np.float32)}, {"w.format": "int4-g32"}, tops.InvalidArgument, "tensor 'w'"),
        ({"w": np.ones(2, np.float32)}, {"k": 1}, tops.InvalidArgument, "strings to strings"),
        ({1: np.ones(2, np.float32)}, None, tops.InvalidArgument, "names are strings"),
        ({"a\0b": np.ones(2, np.float32)}, None, tops.InvalidArgument, "without NUL"),
        ({"a\udc80": np.ones(2, np.float32)}, None, tops.InvalidArgument, "not valid UTF-8"),
        ({"w": np.ones(2, np.float32)}, {"k\0": "v"}, tops.InvalidArgument, "without NUL"),
        ({"w": tops.quantize(np.ones((2, 32), np.float32), "int4-g32"), "w.scales": np.ones(1, np.float32)}, None,
         tops.InvalidArgument, "w.scales"),
    ]
    for tensors, meta, cls, words in bad:
        with pytest.raises(cls, match=words) as e:
            tops.save(path, tensors, metadata=meta)
        assert e.value.sentence.startswith(("tensorops.save:", "tops_model_save:")), e.value.sentence
        assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["keep.safetensors"]   # no temporary left behind
    with pytest.raises(tops.IoError, match="cannot create"):
        tops.save(tmp_path / "no" / "dir.safetensors", {"a": np.ones(2, np.float32)})
    # the single-tensor form still writes the library's one-tensor file
    w = tops.quantize(np.ones((2, 32), np.float32), "q8_0")
    tops.save(tmp_path / "one.safetensors", w)
    assert tops.load(tmp_path / "one.safetensors").data.tobytes() == w.data.tobytes()
    with pytest.raises(tops.InvalidArgument, match="metadata is for a dict"):
        tops.save(tmp_path / "one.safetensors", w, metadata={"a": "b"})


def test_bad_files_raise_with_a_sentence(gguf_file, st_file, tmp_path):
    for path in (gguf_file[0], st_file[0]):
        data = path.read_bytes()
        cuts = sorted(set(list(range(1, 40)) + list(range(40, len(data), max(1, len(data) // 97))) +
                          [len(data) - 1]))
        for n in cuts:
            cut = tmp_path / "cut"
            cut.write_bytes(data[:n])
            for source in (cut, data[:n]):
                with pytest.raises(tops.ParseError) as e:
                    tops.open(source)
                assert e.value.sentence.startswith(("tops_model_open", "tops_model_open_buffer")), e.value.sentence
                assert len(e.value.sentence) > 40
    garbage = np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with pytest.raises(tops.ParseError, match="neither GGUF nor safetensors|header"):
        tops.open(garbage)
    with pytest.raises(tops.ParseError, match="version"):
        tops.open(b"GGUF" + b"\xff" * 60)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(tops.ParseError, match="0 bytes"):
        tops.open(tmp_path / "empty")
    with pytest.raises(tops.IoError, match="cannot open"):
        tops.open(tmp_path / "missing.gguf")
    assert issubclass(tops.ParseError, ValueError) and issubclass(tops.IoError, OSError)


def test_bf16_without_ml_dtypes_says_what_to_install(st_file, monkeypatch):
    import sys
    path, arrays = st_file
    m = tops.open(path)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)   # import ml_dtypes now raises ImportError
    with pytest.raises(tops.UnsupportedFormat, match=r"install ml_dtypes.*Model.raw\(\)"):
        m["model.embed_tokens.weight"]
    assert m.raw("model.embed_tokens.weight").tobytes() == arrays["model.embed_tokens.weight"].tobytes()
    assert m["model.norm.weight"].dtype == np.float32     # plain dtypes need nothing more
