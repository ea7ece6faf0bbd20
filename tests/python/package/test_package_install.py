"""The installed package: where it lives, what it carries, what it reports."""
import os
import re
import threading

import numpy as np
import pytest

import tensorops as tops
from conftest import SOURCE_ROOT


def test_imported_from_the_install_not_the_source_tree():
    pkg = os.path.realpath(os.path.dirname(tops.__file__))
    assert not pkg.startswith(os.path.realpath(os.path.join(SOURCE_ROOT, "python"))), pkg
    assert "site-packages" in pkg or "dist-packages" in pkg, pkg
    assert os.path.isfile(os.path.join(pkg, "libtensorops.so"))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert os.path.realpath(tops._lib.PATH) == os.path.join(pkg, "libtensorops.so")


def test_version_matches_the_header():
    with open(os.path.join(SOURCE_ROOT, "include", "tensorops.h")) as f:
        want = re.search(r'#define TOPS_VERSION_STRING "([^"]+)"', f.read()).group(1)
    assert tops.__version__ == tops.version() == want
    from importlib import metadata
    assert metadata.version("tensorops") == want


def test_info_names_the_machine_and_the_level():
    i = tops.info()
    assert i.version == tops.__version__
    assert i.isa in i.isa_available and i.isa_best in i.isa_available
    assert i.isa_reason and i.threads >= 1 and i.threads_why
    assert i.arch and i.cores_online >= 1
    assert all(isinstance(f, str) for f in i.features)
    assert i.build_type
    assert len(i.cuda_devices) == 0 or i.cuda_built


def test_formats_and_their_facts():
    names = tops.formats()
    for want in ("f32", "f16", "bf16", "int4-g32", "mxfp4", "nvfp4", "q4_0", "q8_0", "lut4", "e4m3-ch",
                 "int4-g32-affine", "gguf-mxfp4"):
        assert want in names
    assert "packed" not in names
    for name in names:
        fi = tops.format_info(name)
        assert fi.name == name
        assert fi.bits_per_weight(4096) > 0
    fi = tops.format_info("int4-g128:bf16")
    assert (fi.element, fi.element_bits, fi.group, fi.scale) == ("i4", 4, 128, "bf16")
    assert fi.group_range == (16, 256) and "e8m0" in fi.scales_allowed
    assert fi.bits_per_weight(4096) == pytest.approx(4 + 16 / 128)
    assert tops.format_info("int4-g32:f16").name == "int4-g32"  # the default suffix is dropped
    assert tops.format_info("nvfp4").has_tensor_scale and tops.format_info("nvfp4").group == 16
    assert tops.format_info("e4m3-ch").group is None
    assert tops.format_info("lut4-row").codebook == "row" and tops.format_info("lut4").codebook == "tensor"
    assert tops.format_info("q4_0").gguf and tops.format_info("int4-g64-affine").has_bias


def test_calls_release_the_gil():
    """The library is a ctypes.CDLL, whose foreign calls release the GIL (a
    PyDLL would hold it)."""
    import ctypes
    assert type(tops._lib.LIB) is ctypes.CDLL


def test_threads_share_the_library(rng):
    """Two Python threads run matmuls at once; each gets the same bits as a
    call made alone (errors and workspaces are per thread in the library)."""
    x = rng.standard_normal((64, 512)).astype(np.float32)
    w = tops.quantize(rng.standard_normal((256, 512)).astype(np.float32), "int4-g32")
    alone = tops.matmul(x, w)
    got = [None, None]

    def run(i):
        for _ in range(5):
            got[i] = tops.matmul(x, w)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g in got:
        np.testing.assert_array_equal(g, alone)


def test_every_status_has_its_exception_class():
    from tensorops import _errors, _lib
    assert _lib.STATUSES[0] == "ok"
    for code, name in enumerate(_lib.STATUSES[1:], start=1):
        cls = _errors.error_class(name)
        assert cls is not tops.Error and issubclass(cls, tops.Error), name
        assert cls.status == name
        with pytest.raises(cls) as e:
            _lib.LIB.tops_clear_error()
            _errors.check(code)
        assert e.value.status == name and e.value.sentence == name  # no sentence recorded: the status name
    assert issubclass(tops.InvalidArgument, ValueError) and issubclass(tops.OutOfMemory, MemoryError)
    assert issubclass(tops.IoError, OSError) and issubclass(tops.NotFound, LookupError)


def test_a_bad_tops_isa_is_reported_not_fatal():
    """TOPS_ISA naming no level: info() carries the sentence, ops raise it."""
    import subprocess
    import sys
    code = ("import numpy as np, tensorops as t\n"
            "print(t.info().isa_error)\n"
            "try:\n"
            "    t.matmul(np.ones((2, 32), np.float32), np.ones((32, 4), np.float32))\n"
            "except t.InvalidArgument as e:\n"
            "    print('raised', e)\n")
    env = dict(os.environ, TOPS_ISA="bogus")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert "bogus" in first and "ref" in first, out.stdout
    assert second.startswith("raised ") and "bogus" in second, out.stdout
