"""matmul and attention: argument handling around tops_matmul2d and
tops_attention (the library checks every rule again and names it)."""
from __future__ import annotations

import ctypes
import math
from typing import Any, Optional

import numpy as np

from ._arrays import (DeviceArray, Operand, check_stream, check_threads, common_device, dtype_name,
                      new_output, operand, reshaped)
from ._errors import InternalError, InvalidArgument, ShapeMismatch, check, fail
from ._lib import (LIB, MULTIPLY, MULTIPLY_ACCUMULATE, AttentionDesc, MatmulDesc, default_exec)
from ._weight import PackedWeight, Weight

ArrayLike = Any


def _right(b: Any, fn: str, stream: Optional[int]) -> Operand:
    if isinstance(b, (Weight, PackedWeight)):
        return b._operand(None, fn)
    return operand(b, fn, "b", stream=stream)


def _matrix(x: Any, op: Operand, fn: str, what: str) -> Operand:
    """[..., M, K] -> [M', K] (leading dimensions merged)."""
    if len(op.shape) == 2:
        return op
    if len(op.shape) < 2:
        fail(ShapeMismatch, fn, f"{what} has shape {list(op.shape)}; matmul needs [M, K] (a row: x[None, :])")
    m = int(np.prod(op.shape[:-1]))
    flat = reshaped(op, (m, op.shape[-1]), fn)
    if flat is None:
        if isinstance(x, np.ndarray):  # numpy input: merge through a contiguous copy
            flat = operand(np.ascontiguousarray(x).reshape(m, op.shape[-1]), fn, what)
        else:
            fail(InvalidArgument, fn, f"{what} has shape {list(op.shape)} and strides {list(op.strides)}, whose "
                                      "leading dimensions do not merge into one; make it contiguous first")
    return flat


def _prepare(a, b, relaxed, transpose_left, transpose_right, out, accumulate, dest_dtype, threads, stream, fn):
    stream = check_stream(stream, fn)
    threads = check_threads(threads, fn)
    A = operand(a, fn, "a", stream=stream)
    R = _right(b, fn, stream)
    if transpose_right is None:
        transpose_right = b.transpose_right if isinstance(b, PackedWeight) else isinstance(b, Weight)
    if len(A.shape) > 2 and transpose_left:
        fail(ShapeMismatch, fn, f"a has shape {list(A.shape)}; with transpose_left it must be [K, M]")
    A2 = _matrix(a, A, fn, "a")
    if len(R.shape) != 2:
        fail(ShapeMismatch, fn, f"b has shape {list(R.shape)}; matmul needs a matrix ([K, N], or [N, K] with "
                                "transpose_right)")
    m = A2.shape[1] if transpose_left else A2.shape[0]
    n = R.shape[0] if transpose_right else R.shape[1]
    lead = A.shape[:-1] if len(A.shape) > 2 else (m,)  # the result's leading extents
    device = common_device([A2, R], fn, allow_host=[False, True])
    if out is None:
        if accumulate:
            fail(InvalidArgument, fn, "accumulate=True adds the product into out=, which is missing")
        out = new_output(lead + (n,), dtype_name("f32" if dest_dtype is None else dest_dtype, fn), device, fn)
        D = operand(out, fn, "out", writable=True)
    else:
        D = operand(out, fn, "out", writable=True, stream=stream)
        if dest_dtype is not None and dtype_name(dest_dtype, fn) != D.dtype:
            fail(InvalidArgument, fn, f"dest_dtype is {dest_dtype!r} but out holds {D.dtype}; give one of them")
    if len(D.shape) != 2:
        if D.shape != lead + (n,):
            fail(ShapeMismatch, fn, f"out has shape {list(D.shape)} but a @ b has shape {list(lead + (n,))}")
        D = reshaped(D, (m, n), fn)
        if D is None:
            fail(InvalidArgument, fn, "out's leading dimensions do not merge into one; pass a contiguous out")
    common_device([A2, D], fn)
    desc = MatmulDesc()
    desc.transpose_left = int(bool(transpose_left))
    desc.transpose_right = int(bool(transpose_right))
    desc.relaxed_precision = int(bool(relaxed))
    desc.mode = MULTIPLY_ACCUMULATE if accumulate else MULTIPLY
    exec_ = default_exec(threads, device, stream)
    return exec_, desc, A2, R, D, out


def matmul(a: ArrayLike, b: Any, *, relaxed: bool = False, transpose_left: bool = False,
           transpose_right: Optional[bool] = None, out: Optional[ArrayLike] = None, accumulate: bool = False,
           dest_dtype: Any = None, threads: Optional[int] = None, stream: Optional[int] = None) -> ArrayLike:
    """C = a @ b (tops_matmul2d), with b's dequantization fused into the kernel.

    a: activations [M, K] (or [..., M, K]: leading dimensions are merged
    into M and come back in the result), float32, float16 or bfloat16; a
    numpy array or a DLPack tensor (torch CPU or CUDA), read in place.
    b: the weight: a :class:`Weight` (any format), a :class:`PackedWeight`,
    or a float array.  transpose_left: a is stored [K, M]; transpose_right:
    b is stored [N, K] (default: True for a Weight, the packing's choice for
    a PackedWeight, False for an array).

    relaxed: may quantize the activations to int8 per block of 32 and use
    integer dot products where the weight has an integer form (rel-L2
    against f64 about 5e-3); strict (default) accumulates in f32 over the
    exactly decoded operands (rel-L2 about 1e-6).

    out: write into this array (numpy or DLPack, shape [M, N]); with
    accumulate=True the product is added to what it holds (C = a @ b + C).
    dest_dtype: "f32" (default), "f16" or "bf16" for a new result.
    Returns out, or a new numpy array (a :class:`DeviceArray` when a lives
    on a GPU; the call then returns before the GPU has finished, ordered on
    ``stream``, an integer cudaStream_t, default the legacy default stream).
    threads: worker threads (default: OMP_NUM_THREADS, else the CPUs this
    process may use); results are bit-identical for any count."""
    fn = "tensorops.matmul"
    exec_, desc, A, R, D, out = _prepare(a, b, relaxed, transpose_left, transpose_right, out, accumulate,
                                         dest_dtype, threads, stream, fn)
    check(LIB.tops_matmul2d(ctypes.byref(exec_), ctypes.byref(desc), A.ref, R.ref, D.ref))
    if isinstance(out, DeviceArray):
        out._stream = exec_.stream
    return out


def matmul_path(a: ArrayLike, b: Any, *, relaxed: bool = False, transpose_left: bool = False,
                transpose_right: Optional[bool] = None, out: Optional[ArrayLike] = None, accumulate: bool = False,
                dest_dtype: Any = None, threads: Optional[int] = None, stream: Optional[int] = None) -> str:
    """The path :func:`matmul` would take for these arguments, e.g. "f32
    panels (unpacked per K block): tops_gemm_f32_f32_f32_6x16__avx2 (avx2)";
    nothing is computed or written."""
    fn = "tensorops.matmul_path"
    exec_, desc, A, R, D, _ = _prepare(a, b, relaxed, transpose_left, transpose_right, out, accumulate,
                                       dest_dtype, threads, stream, fn)
    buf = ctypes.create_string_buffer(512)
    check(LIB.tops_matmul2d_path(ctypes.byref(exec_), ctypes.byref(desc), A.ref, R.ref, D.ref, buf, 512))
    return buf.value.decode()


def _int_arg(v: Any, fn: str, what: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        fail(InvalidArgument, fn, f"{what} is {v!r}; it must be an integer >= {lo}")
    return int(v)


def _batch_of_one(op: Operand, fn: str) -> Operand:
    """[H, S, D] -> [1, H, S, D] (the same memory); rank 4 as it is."""
    if len(op.shape) == 4:
        return op
    r = reshaped(op, (1,) + op.shape, fn)
    if r is None:  # pragma: no cover - a leading 1 always fits
        raise InternalError(f"{fn}: could not add a batch dimension to {list(op.shape)}")
    return r


def _lengths(x: Any, n: Optional[int], fn: str, what: str) -> np.ndarray:
    """A 1-D int32 copy of x (n entries when n is given); the library checks
    the values, this the count it will read."""
    try:
        a = np.asarray(x)
    except Exception:  # pragma: no cover - numpy takes nearly anything
        a = None
    if a is None or a.ndim != 1 or not (a.dtype.kind in "iu" or a.size == 0):
        fail(InvalidArgument, fn, f"{what} must be a 1-D sequence of integers")
    if n is not None and a.size != n:
        fail(ShapeMismatch, fn, f"{what} has {a.size} entries but must have {n}")
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        fail(InvalidArgument, fn, f"{what} holds values outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _int32_ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


def attention(q: ArrayLike, k: Any, v: Any, *, causal: bool = False, window: int = 0,
              scale: Optional[float] = None, softcap: float = 0.0, q_block: int = 0, kv_block: int = 0,
              kv_lens: Any = None, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
              out: Optional[ArrayLike] = None, dest_dtype: Any = None, threads: Optional[int] = None,
              stream: Optional[int] = None) -> ArrayLike:
    """Fused attention (tops_attention): out = softmax(scale * q k^T + mask) v
    in one pass with an online softmax, no Sq x Sk buffer.

    q [B, Hq, Sq, D] float32/float16/bfloat16; k [B, Hkv, Sk, D] and v [B,
    Hkv, Sk, Dv]: float arrays or :class:`Weight` (a quantized KV cache,
    blocks along D); rank-3 tensors [H, S, D] are taken as B = 1.  Hkv
    divides Hq (grouped-query / multi-query heads: query head h reads kv
    head h // (Hq // Hkv)); 16 <= D, Dv <= 256; any positive strides.
    Query i sits at position i + Sk - Sq (bottom-right aligned).

    causal: mask keys after the query's position.  window > 0: mask keys
    with |key - position| >= window (with causal: the last `window` keys up
    to the query's own).  scale: logit scale (None = 1/sqrt(D)).  softcap
    > 0: logits = softcap * tanh(logits / softcap).  q_block, kv_block: tile
    hints (0 = the library's choice).  A query whose every key is masked
    gets zeros.  out / dest_dtype / threads as for :func:`matmul`
    (default float32).  The library runs attention on the CPU.

    Sequences of different lengths in one call: kv_lens (B integers):
    sequence b sees only its first kv_lens[b] keys (a padding mask; query i
    sits at position i + kv_lens[b] - Sq).  cu_seqlens_q and cu_seqlens_k
    (B + 1 non-decreasing offsets each, FlashAttention's varlen layout): q
    and out are packed [Tq, Hq, D(v)], k and v [Tk, Hkv, D(v)]; sequence b
    owns query rows cu_seqlens_q[b]:cu_seqlens_q[b+1] and key rows
    cu_seqlens_k[b]:cu_seqlens_k[b+1] (with kv_lens too: its first
    kv_lens[b] of them).  Rows outside the sequences are not written (a new
    out holds zeros there)."""
    fn = "tensorops.attention"
    stream = check_stream(stream, fn)
    threads = check_threads(threads, fn)
    Q = operand(q, fn, "q", stream=stream)
    rank = len(Q.shape)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            fail(InvalidArgument, fn, "cu_seqlens_q and cu_seqlens_k go together (packed varlen batches)")
        cu_q = _lengths(cu_seqlens_q, None, fn, "cu_seqlens_q")
        if cu_q.size < 2:
            fail(ShapeMismatch, fn, f"cu_seqlens_q has {cu_q.size} entries; it needs B + 1 >= 2")
        cu_k = _lengths(cu_seqlens_k, cu_q.size, fn, "cu_seqlens_k")
        if rank != 3:
            fail(ShapeMismatch, fn, f"q has shape {list(Q.shape)}; with cu_seqlens it is packed [T, H, D]")
    elif rank not in (3, 4):
        fail(ShapeMismatch, fn, f"q has shape {list(Q.shape)}; attention takes [B, H, S, D] (or [H, S, D])")

    def kv(x, what):
        if isinstance(x, PackedWeight):
            fail(InvalidArgument, fn, f"{what} is a PackedWeight (a matmul layout); a KV cache is a Weight or "
                                      "an array")
        if isinstance(x, Weight):
            if x.ndim != rank:
                fail(ShapeMismatch, fn, f"{what} has rank {x.ndim} but q has rank {rank}; they must agree")
            return x._operand(3 if varlen else 4, fn)
        op = operand(x, fn, what, stream=stream)
        if len(op.shape) != rank:
            fail(ShapeMismatch, fn, f"{what} has rank {len(op.shape)} but q has rank {rank}; they must agree")
        return op

    K, V = kv(k, "k"), kv(v, "v")
    out_shape = Q.shape[:-1] + (V.shape[-1],)
    if rank == 3 and not varlen:
        Q, K, V = (_batch_of_one(t, fn) for t in (Q, K, V))
    device = common_device([Q, K, V], fn)
    if out is None:
        out = new_output(out_shape, dtype_name("f32" if dest_dtype is None else dest_dtype, fn), device, fn)
        if varlen and isinstance(out, np.ndarray):
            out.fill(0)  # rows outside the sequences are never written
        O = operand(out, fn, "out", writable=True)
    else:
        O = operand(out, fn, "out", writable=True, stream=stream)
        if dest_dtype is not None and dtype_name(dest_dtype, fn) != O.dtype:
            fail(InvalidArgument, fn, f"dest_dtype is {dest_dtype!r} but out holds {O.dtype}; give one of them")
    if not varlen:
        O = _batch_of_one(O, fn)
    desc = AttentionDesc()
    batch = cu_q.size - 1 if varlen else Q.shape[0]
    keep = []  # the length arrays live until the call returns
    if varlen:
        keep += [cu_q, cu_k]
        desc.cu_seqlens_q, desc.cu_seqlens_k = _int32_ptr(cu_q), _int32_ptr(cu_k)
        desc.batch = batch
    if kv_lens is not None:
        kl = _lengths(kv_lens, batch, fn, "kv_lens")
        keep.append(kl)
        desc.kv_lens = _int32_ptr(kl)
    desc.causal = int(bool(causal))
    desc.window = _int_arg(window, fn, "window")
    if scale is not None:
        s = float(scale)
        if not math.isfinite(s) or s <= 0:
            fail(InvalidArgument, fn, f"scale is {scale!r}; it must be finite and > 0 (None = 1/sqrt(D))")
        desc.scale = s
    desc.softcap = float(softcap)
    desc.q_block = _int_arg(q_block, fn, "q_block")
    desc.kv_block = _int_arg(kv_block, fn, "kv_block")
    exec_ = default_exec(threads, device, stream)
    check(LIB.tops_attention(ctypes.byref(exec_), ctypes.byref(desc), Q.ref, K.ref, V.ref, O.ref))
    del keep
    if isinstance(out, DeviceArray):
        out._stream = exec_.stream
    return out

