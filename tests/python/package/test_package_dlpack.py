"""DLPack in and out: numpy as a producer seen only through __dlpack__
(versioned and legacy capsules), the capsule's lifetime, read-only and
strided tensors, the package's own export; torch CPU and CUDA where
installed (torch is not a test dependency), CUDA where a GPU is."""
import gc
import sys

import numpy as np
import pytest

import tensorops as tops
from tensorops import _dlpack


class Producer:
    """A numpy array that tensorops can only reach through DLPack."""

    def __init__(self, a, legacy=False):
        self.a = a
        self.legacy = legacy
        self.calls = []

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        if self.legacy and "max_version" in kw:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.a.__dlpack__(**kw)


@pytest.mark.parametrize("legacy", [False, True])
def test_numpy_producer_matches_the_array(legacy, rng):
    x = rng.standard_normal((5, 64)).astype(np.float32)
    b = rng.standard_normal((64, 24)).astype(np.float32)
    w = tops.quantize(b.T, "int4-g32")
    px, pb = Producer(x, legacy), Producer(b, legacy)
    np.testing.assert_array_equal(tops.matmul(px, pb), tops.matmul(x, b))
    np.testing.assert_array_equal(tops.matmul(px, w), tops.matmul(x, w))
    assert px.calls[0] == {"max_version": (1, 0)}
    assert (px.calls[-1] == {}) == legacy
    np.testing.assert_array_equal(tops.dequantize(tops.quantize(px, "mxfp4")), tops.dequantize(tops.quantize(x, "mxfp4")))


def test_outputs_are_written_in_place(rng):
    x = rng.standard_normal((5, 64)).astype(np.float32)
    w = tops.quantize(rng.standard_normal((24, 64)).astype(np.float32), "q8_0")
    dest = np.full((5, 24), np.nan, np.float16)
    p = Producer(dest)
    assert tops.matmul(x, w, out=p) is p
    np.testing.assert_array_equal(dest, tops.matmul(x, w, dest_dtype="f16"))
    q = rng.standard_normal((1, 2, 3, 32)).astype(np.float32)
    o = np.zeros((1, 2, 3, 32), np.float32)
    tops.attention(Producer(q), Producer(q), Producer(q), out=Producer(o))
    np.testing.assert_array_equal(o, tops.attention(q, q, q))


def test_the_capsule_keeps_the_producer_alive_only_for_the_call(rng):
    x = rng.standard_normal((3, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    before = sys.getrefcount(x)
    for _ in range(3):
        tops.matmul(Producer(x), b)
    gc.collect()
    assert sys.getrefcount(x) == before


def test_read_only_strided_and_unsupported_tensors(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = tops.quantize(rng.standard_normal((8, 64)).astype(np.float32), "int8-g32")
    ro = np.zeros((4, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(tops.InvalidArgument, match="out is a read-only DLPack tensor"):
        tops.matmul(x, w, out=Producer(ro))
    with pytest.raises(tops.InvalidArgument, match=r"a has strides \[-64, 1\]; tensorops reads positive strides"):
        tops.matmul(Producer(x[::-1]), w)
    strided = rng.standard_normal((8, 128)).astype(np.float32)[::2, ::2]
    np.testing.assert_array_equal(tops.matmul(Producer(strided), w), tops.matmul(strided, w))
    with pytest.raises(tops.UnsupportedFormat, match=r"DLPack dtype \(code 0, bits 32, lanes 1\)"):
        tops.matmul(Producer(np.ones((4, 64), np.int32)), w)
    with pytest.raises(tops.ShapeMismatch, match="rank 5"):
        tops.matmul(Producer(np.ones((1, 1, 1, 4, 64), np.float32)), w)


class Exported:
    """The package's DLPack export over a host buffer (what DeviceArray does on a GPU)."""

    def __init__(self, a, versioned):
        self.a, self.versioned = a, versioned

    def __dlpack_device__(self):
        return (_dlpack.KDL_CPU, 0)

    def __dlpack__(self, **kw):
        return _dlpack.export(self.a.ctypes.data, self.a.shape, tuple(s // self.a.itemsize for s in self.a.strides),
                              {"float32": "f32", "float16": "f16"}[self.a.dtype.name], (0, 0), self.a,
                              self.versioned)


@pytest.mark.parametrize("versioned", [False, True])
def test_export_round_trip_through_numpy(versioned, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    base = _dlpack.live_exports()
    view = np.from_dlpack(Exported(a, versioned))
    assert _dlpack.live_exports() == base + 1
    np.testing.assert_array_equal(view, a)
    a[1, 2] = 42.0  # no copy
    assert view[1, 2] == 42.0
    del view
    gc.collect()
    assert _dlpack.live_exports() == base  # the consumer called the deleter
    # a capsule nobody consumed is released by its destructor
    cap = Exported(a, versioned).__dlpack__()
    assert _dlpack.live_exports() == base + 1
    del cap
    gc.collect()
    assert _dlpack.live_exports() == base
    # and the package reads its own export
    h = rng.standard_normal((4, 32)).astype(np.float16)
    w = tops.quantize(rng.standard_normal((8, 32)).astype(np.float32), "int4-g32")
    np.testing.assert_array_equal(tops.matmul(Exported(h, versioned), w), tops.matmul(h, w))


def test_device_arrays_need_a_gpu():
    if tops.info().cuda_devices:
        pytest.skip("a GPU is present: test_torch_cuda covers DeviceArray")
    with pytest.raises(tops.Error) as e:
        tops.DeviceArray((2, 3), "f32", 0)
    assert "cuda" in str(e.value).lower()


# ---- torch (not a test dependency: these run where it is installed) ---------------------------


def test_torch_cpu(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed (not a test dependency)")
    x = torch.from_numpy(rng.standard_normal((6, 64)).astype(np.float32))
    w = tops.quantize(rng.standard_normal((16, 64)).astype(np.float32), "int4-g32")
    np.testing.assert_array_equal(tops.matmul(x, w), tops.matmul(x.numpy(), w))
    xb = x.to(torch.bfloat16)
    ref = xb.float().numpy().astype(np.float64) @ tops.dequantize(w).astype(np.float64).T
    y = tops.matmul(xb, w)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) <= 1e-5
    out = torch.empty((6, 16), dtype=torch.bfloat16)
    tops.matmul(xb, w, out=out)
    np.testing.assert_array_equal(out.float().numpy(), torch.from_numpy(y).to(torch.bfloat16).float().numpy())
    xt = torch.from_numpy(rng.standard_normal((64, 6)).astype(np.float32)).t()  # a transposed view
    np.testing.assert_array_equal(tops.matmul(xt, w), tops.matmul(xt.contiguous().numpy(), w))


def _torch_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed (not a test dependency)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    if not tops.info().cuda_built:
        pytest.skip("this tensorops was built without the CUDA backend (no nvcc at build time)")
    return torch


@pytest.mark.parametrize("fmt", ["int4-g32", "q4_0", "mxfp4", "nvfp4", "int8-g32", "f16"])
def test_torch_cuda(fmt, rng):
    torch = _torch_cuda()
    k, n, m = 256, 64, 16
    w = tops.quantize(rng.standard_normal((n, k)).astype(np.float32), fmt)
    x = rng.standard_normal((m, k)).astype(np.float16)
    ref = x.astype(np.float64) @ tops.dequantize(w).astype(np.float64).T
    xc = torch.from_numpy(x).cuda()
    y = tops.matmul(xc, w)                       # the weight on the host: packed per call
    assert isinstance(y, tops.DeviceArray) and y.device == "cuda:0" and y.shape == (m, n)
    yt = torch.from_dlpack(y)                    # no copy
    assert yt.is_cuda and yt.dtype == torch.float32
    assert np.linalg.norm(yt.cpu().numpy() - ref) / np.linalg.norm(ref) <= 1e-5
    p = tops.pack(w, device="cuda:0")
    out = torch.empty((m, n), dtype=torch.float16, device="cuda")
    s = torch.cuda.current_stream().cuda_stream
    tops.matmul(xc, p, out=out, stream=s)
    torch.cuda.synchronize()
    assert np.linalg.norm(out.float().cpu().numpy() - ref) / np.linalg.norm(ref) <= 1e-3
    np.testing.assert_array_equal(y.numpy(), yt.cpu().numpy())
