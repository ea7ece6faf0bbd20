"""Facts: the library's version, its formats, the machine and the kernel level."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ._arrays import format_name, parse_format
from ._errors import check
from ._lib import (DTYPES, FEATURES, FMT_PACKED, FORMAT_IDS, ISAS, LIB, CpuInfo, CudaDeviceInfo, Format,
                   format_info_row)


def version() -> str:
    """The library's version ("0.1.0")."""
    return LIB.tops_version().decode()


def formats() -> List[str]:
    """Every format's name with its default parameters ("f32", ..., "int4-g32",
    "int4-g32-affine", "lut4", "q4_0", ...): one per row of the traits table.
    Parameterised formats take other groups and scale dtypes too
    ("int4-g128:bf16"); :func:`format_info` reads any name."""
    out = []
    for fid in range(len(FORMAT_IDS)):
        if fid == FMT_PACKED:
            continue
        r = Format()
        check(LIB.tops_format_resolve(Format(fid, 0, 0), ctypes.byref(r)))
        out.append(format_name(r))
    return out


@dataclass(frozen=True)
class FormatInfo:
    """One format (a traits row plus its parameters).

    group: elements that share a scale along the last dimension (1: no
    blocks; None: one scale per row); group_range: the group sizes a
    name may ask for ("int4-g16" .. "int4-g256"), None where fixed.  scale: dtype of the scale plane
    (None: no scales).  codebook: "tensor" or "row" (lut4, lut4-row) or
    None.  has_tensor_scale: a meaningful per-tensor f32 scale (nvfp4).
    gguf: self-contained GGUF blocks in the data plane."""

    name: str
    element: str
    element_bits: int
    group: Optional[int]
    group_range: Optional[Tuple[int, int]]
    scale: Optional[str]
    scales_allowed: Tuple[str, ...]
    has_bias: bool
    codebook: Optional[str]
    has_tensor_scale: bool
    gguf: bool
    _format: Format = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    def bits_per_weight(self, k: int = 4096) -> float:
        """Average storage bits per weight for rows of k elements (data and planes)."""
        return float(LIB.tops_format_bits_per_weight(self._format, int(k)))


def format_info(name: str) -> FormatInfo:
    """Facts about a format name ("int4-g128:bf16", "nvfp4"); NotFound (with the
    library's sentence) for a name it does not know."""
    fn = "tensorops.format_info"
    f = parse_format(name, fn)
    r = Format()
    check(LIB.tops_format_resolve(f, ctypes.byref(r)))
    row = format_info_row(r.id)
    allowed = tuple(DTYPES[i] for i in range(len(DTYPES)) if row.scale_allowed & (1 << i))
    return FormatInfo(
        name=format_name(r), element=DTYPES[row.element], element_bits=row.element_bits,
        group=None if row.block < 0 else (r.group or row.block),
        group_range=(row.block_min, row.block_max) if row.block_min > 0 and row.block_min != row.block_max else None,
        scale=DTYPES[r.scale] if row.scale_default else None, scales_allowed=allowed, has_bias=bool(row.has_bias),
        codebook={0: None, 1: "tensor", 2: "row"}.get(row.codebook), has_tensor_scale=bool(row.has_tensor_scale),
        gguf=bool(row.gguf), _format=r)


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    capability: Tuple[int, int]
    sm_count: int
    memory_bytes: int
    l2_bytes: int
    runtime_version: int
    driver_version: int


@dataclass(frozen=True)
class Info:
    """What ``tensorops info`` prints: the CPU, its features, the kernel level
    in use and why, the default thread count and why, the build, the GPUs."""

    version: str
    arch: str
    vendor: str
    model: str
    cores_online: int
    features: Tuple[str, ...]
    amx_permission: bool
    caches: Dict[str, int]
    isa: str
    isa_best: str
    isa_forced: bool
    isa_reason: str
    isa_available: Tuple[str, ...]
    isa_error: Optional[str]
    threads: int
    threads_why: str
    openmp: bool
    cuda_built: bool
    compiler: str
    build_type: str
    cuda_devices: Tuple[CudaDevice, ...]


def info() -> Info:
    """The machine and the library as this process sees them.  A bad TOPS_ISA
    does not raise here: ``isa_error`` holds the sentence (ops raise it)."""
    c = CpuInfo()
    st = LIB.tops_cpu_get_info(ctypes.byref(c))
    isa_error = None
    if st != 0:
        isa_error = LIB.tops_last_error().decode()
    why = ctypes.create_string_buffer(256)
    threads = LIB.tops_exec_default_threads(why, 256)
    b = LIB.tops_get_build_info()
    devices = []
    n = ctypes.c_int(0)
    if LIB.tops_cuda_device_count(ctypes.byref(n)) == 0:
        for i in range(n.value):
            d = CudaDeviceInfo()
            if LIB.tops_cuda_get_device_info(i, ctypes.byref(d)) == 0:
                devices.append(CudaDevice(i, d.name.decode(errors="replace"), (d.major, d.minor), d.sm_count,
                                          d.memory_bytes, d.l2_bytes, d.runtime_version, d.driver_version))
    caches = {k: int(v) for k, v in zip(("L1d", "L2", "L3"), c.cache_bytes[:3]) if v}
    return Info(
        version=version(), arch=c.arch.decode(), vendor=c.vendor.decode(), model=c.model.decode(errors="replace"),
        cores_online=c.cores_online, features=tuple(f for i, f in enumerate(FEATURES) if c.has[i]),
        amx_permission=bool(c.amx_permission), caches=caches, isa=ISAS[c.isa], isa_best=ISAS[c.isa_best],
        isa_forced=bool(c.isa_forced), isa_reason=c.isa_reason.decode(errors="replace"),
        isa_available=tuple(n for i, n in enumerate(ISAS) if c.isa_available[i]), isa_error=isa_error,
        threads=threads, threads_why=why.value.decode(errors="replace"), openmp=bool(b.openmp),
        cuda_built=bool(b.cuda), compiler=(b.compiler or b"").decode(), build_type=(b.build_type or b"").decode(),
        cuda_devices=tuple(devices))
