"""tensorops: quantized matmul and fused attention, with the fastest hardware
path picked at run time (scalar, AVX2, AVX-512/VNNI, AMX; CUDA on NVIDIA GPUs).

A thin layer over the C library (libtensorops, installed inside this
package) through ctypes.  ctypes releases the GIL for the whole of every
foreign call, so compute (matmul, attention, quantize, pack) runs without
the GIL and other Python threads go on meanwhile; the library's own worker
threads do the parallel work.

    import numpy as np, tensorops as tops
    w = tops.quantize(np.random.randn(4096, 4096).astype(np.float32), "int4-g32")  # [N, K]
    x = np.random.randn(8, 4096).astype(np.float32)
    y = tops.matmul(x, w)                      # x @ dequantize(w).T, fused; float32 [8, 4096]
    y = tops.matmul(x, tops.pack(w, relaxed=True), relaxed=True)   # prepacked, int8 activations

Arrays: numpy arrays (float32, float16, ml_dtypes.bfloat16) in and out for
CPU tensors; any DLPack tensor (``__dlpack__``: torch CPU and CUDA) is read
in place, and results on a GPU come back as :class:`DeviceArray`
(``torch.from_dlpack`` takes them without a copy).  Errors raise
:class:`Error` subclasses named after the library's status, carrying its
sentence.  docs/python.md has the whole picture.
"""
from ._errors import (DeviceError, Error, InternalError, InvalidArgument, IoError, NotFound, OutOfMemory, Overflow,
                      ParseError, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice)
from ._arrays import DeviceArray
from ._info import CudaDevice, FormatInfo, Info, format_info, formats, info, version
from ._ops import attention, matmul, matmul_path
from ._weight import PackedWeight, Weight, dequantize, load, pack, quantize, save

__version__ = version()

__all__ = [
    "__version__", "version", "info", "Info", "CudaDevice", "formats", "format_info", "FormatInfo",
    "Weight", "PackedWeight", "DeviceArray", "quantize", "dequantize", "pack", "save", "load",
    "matmul", "matmul_path", "attention",
    "Error", "InvalidArgument", "ShapeMismatch", "UnsupportedFormat", "UnsupportedOnDevice", "OutOfMemory",
    "Overflow", "IoError", "ParseError", "NotFound", "DeviceError", "InternalError",
]
