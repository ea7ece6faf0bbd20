"""The shared library's C ABI as a foreign caller sees it (ctypes)."""
import ctypes
import os

import pytest

LIB = ctypes.CDLL(os.environ["TOPS_LIB"])
LIB.tops_status_str.restype = ctypes.c_char_p
LIB.tops_last_error.restype = ctypes.c_char_p
LIB.tops_version.restype = ctypes.c_char_p
LIB.tops_format_name.restype = ctypes.c_char_p


class Format(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("group", ctypes.c_int32), ("scale", ctypes.c_int)]


def test_version_and_status_names():
    assert LIB.tops_version().decode().count(".") == 2
    assert LIB.tops_status_str(0) == b"ok"
    assert LIB.tops_status_str(10_000) == b"unknown_status"


@pytest.mark.parametrize("name", ["f16", "int4-g32", "int4-g32:e8m0", "int4-g128:bf16", "mxfp4",
                                  "nvfp4", "q4_0", "lut4", "e4m3-ch", "int4-g64-affine"])
def test_format_names_round_trip(name):
    f = Format()
    assert LIB.tops_format_from_name(name.encode(), ctypes.byref(f)) == 0
    buf = ctypes.create_string_buffer(64)
    assert LIB.tops_format_name(f, buf, 64) == name.encode()


def test_bad_name_sets_a_sentence():
    f = Format()
    assert LIB.tops_format_from_name(b"int4-g33", ctypes.byref(f)) != 0
    assert b"power of two" in LIB.tops_last_error()
