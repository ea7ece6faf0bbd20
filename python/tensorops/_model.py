"""Checkpoints: safetensors and GGUF files opened by name (tops_model_*).

A :class:`Model` maps the file read-only; ``model[name]`` is a view into the
mapping, never a copy: a read-only numpy array for plain dtypes, a
:class:`Weight` for quantized tensors (GGUF q4_0 / q4_1 / q8_0 / mxfp4
blocks, tensors tensorops saved quantized), which matmul reads in place.

Lifetime: every view holds the mapping.  ``close()`` (or leaving the
``with`` block) ends the Model's own use of it at once (further calls on the
Model raise InvalidArgument), but the file is unmapped only when the last
array or Weight made from it is gone, so a view that outlives its Model
stays valid.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from ._arrays import HOST, format_name, operand
from ._errors import (InvalidArgument, NotFound, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice, check,
                      fail)
from ._lib import LIB, MODEL_MAX_RANK, MetaValue, ModelTensorInfo, NamedTensor, Tensor
from ._weight import Weight, _save_single, mapped_bytes

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = {1: "safetensors", 2: "gguf"}

# File dtypes numpy holds as they are (little-endian, both file kinds use these names).
_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
          "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
_ML_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}

# meta types (GGUF's numbers)
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STRING, _ARRAY, _U64, _I64, _F64 = range(13)


class _Handle:
    """Owns one tops_model; closes it (unmaps the file) when the last holder goes."""

    __slots__ = ("ptr", "buffer")

    def __init__(self, ptr: int, buffer: Optional[np.ndarray]):
        self.ptr = ptr
        self.buffer = buffer  # open_buffer: the caller's bytes, which views point into

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                LIB.tops_model_close(ptr)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


class TensorInfo(NamedTuple):
    """One tensor as the file stores it.  ``dtype`` is the file's type name
    ("BF16", "Q4_0", "I64"); ``format`` the tensorops format a view has (None
    where tensorops has none: numpy still reads I64, F64, ..., k-quants are
    refused); ``shape`` in numpy order (GGUF's ne reversed); ``nbytes`` the
    bytes it takes in the file, all its planes counted; ``offset`` its first
    byte from the start of the file."""
    name: str
    dtype: str
    format: Optional[str]
    shape: Tuple[int, ...]
    nbytes: int
    offset: int


def _numpy_dtype(dtype: str, fn: str) -> Optional[np.dtype]:
    if dtype in _NUMPY:
        return np.dtype(_NUMPY[dtype])
    if dtype in _ML_DTYPES:
        try:
            import ml_dtypes  # noqa: PLC0415
        except ImportError:
            fail(UnsupportedFormat, fn, f"a {dtype} tensor is a numpy array of ml_dtypes.{_ML_DTYPES[dtype]}; "
                                        "install ml_dtypes (pip install ml_dtypes), or read its bytes with "
                                        "Model.raw()")
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[dtype]))
    return None


class Model:
    """A safetensors or GGUF checkpoint, memory-mapped read-only (:func:`open`).

    ``kind`` is "safetensors" or "gguf"; ``names()`` / iteration / ``len`` /
    ``in`` cover its tensors (a quantized tensorops tensor's scale, bias and
    codebook planes belong to it and are not listed apart); ``info(name)``
    describes one; ``metadata`` holds the safetensors ``__metadata__`` (str
    to str) or the GGUF key/values as Python values (ints, floats, bools,
    strings, lists); ``model[name]`` is a view with no copy (see
    :meth:`__getitem__`).  A context manager: leaving it closes the Model;
    views made before stay valid (each holds the mapping)."""

    def __init__(self, handle: _Handle, source: str):
        self._handle: Optional[_Handle] = handle
        self.source = source
        self.kind: str = _KINDS.get(LIB.tops_model_get_kind(handle.ptr), "?")
        self._index: Dict[str, int] = {}
        self._planes: Dict[str, List[int]] = {}
        self._infos: List[ModelTensorInfo] = []
        for i in range(LIB.tops_model_count(handle.ptr)):
            info = ModelTensorInfo()
            check(LIB.tops_model_info(handle.ptr, i, ctypes.byref(info)))
            self._infos.append(info)
            if info.plane_of:
                self._planes.setdefault(info.plane_of.decode("utf-8", "surrogateescape"), []).append(i)
            else:  # (a GGUF name need not be UTF-8: surrogateescape keeps its bytes for the lookup)
                self._index[info.name.decode("utf-8", "surrogateescape")] = i
        self._metadata: Optional[Dict[str, Any]] = None

    # -- lifetime ------------------------------------------------------------------------------

    def _live(self, fn: str) -> _Handle:
        if self._handle is None:
            fail(InvalidArgument, fn, f"the model {self.source} is closed; open it again (arrays and Weights "
                                      "taken from it before stay valid)")
        return self._handle

    def close(self) -> None:
        """Ends this Model's use of the file.  The mapping is released when the
        last view taken from it (array or Weight) is gone as well."""
        self._handle = None

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._index)} tensors"
        return f"<tensorops.Model {self.kind} {self.source!r}, {state}>"

    # -- listing ---------------------------------------------------------------------------------

    def names(self) -> List[str]:
        """The tensors' names, in file order."""
        self._live("tensorops.Model.names")
        return list(self._index)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._live("tensorops.Model.__len__")
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        self._live("tensorops.Model.__contains__")
        return name in self._index

    def _entry(self, name: str, fn: str) -> Tuple[_Handle, ModelTensorInfo]:
        h = self._live(fn)
        if not isinstance(name, str):
            fail(InvalidArgument, fn, f"a tensor is named by a string, not {type(name).__name__}")
        i = self._index.get(name)
        if i is None:
            near = [n for n in self._index if name.lower() in n.lower()][:3]
            hint = f"; names like it: {', '.join(near)}" if near else f" ({len(self._index)} tensors; names())"
            fail(NotFound, fn, f"{self.source} has no tensor \"{name}\"{hint}")
        return h, self._infos[i]

    def info(self, name: str) -> TensorInfo:
        """The file's facts about a tensor (NotFound if there is none of that name)."""
        _, e = self._entry(name, "tensorops.Model.info")
        planes = [self._infos[j] for j in self._planes.get(name, [])]
        return TensorInfo(name, e.dtype.decode(), format_name(e.format) if e.loadable else None,
                          tuple(int(e.shape[d]) for d in range(e.rank)),
                          int(e.bytes) + sum(int(p.bytes) for p in planes), int(e.offset))

    # -- tensors ---------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Union[np.ndarray, Weight]:
        """The tensor in place, no copy.

        Plain dtypes (F32, F16, I8, U8, I16..U64, F64, BOOL; BF16 and F8_E4M3 /
        F8_E5M2 as ml_dtypes arrays) are read-only numpy arrays of the file's
        shape.  Quantized tensors (GGUF Q4_0, Q4_1, Q8_0, MXFP4; a tensor
        tensorops saved in one of its formats or with a scale) are Weights
        whose planes are read-only views; pass one straight to
        :func:`tensorops.matmul`.  Types tensorops does not decode (k-quants,
        iq types, ...) raise UnsupportedFormat naming the type;
        :meth:`raw` still gives their bytes."""
        fn = "tensorops.Model.__getitem__"
        h, e = self._entry(name, fn)
        dtype = e.dtype.decode()
        shape = tuple(int(e.shape[d]) for d in range(e.rank))
        if not e.tensorops:
            npd = _numpy_dtype(dtype, fn)
            if npd is not None:
                return mapped_bytes(e.data or 0, int(e.bytes), h).view(npd).reshape(shape)
        t = Tensor()
        check(LIB.tops_model_tensor(h.ptr, name.encode("utf-8", "surrogateescape"), ctypes.byref(t)))
        return Weight._from_tensor(t, keep=h)

    def raw(self, name: str) -> np.ndarray:
        """The bytes a tensor takes in the file (its data plane), read-only uint8, no copy."""
        h, e = self._entry(name, "tensorops.Model.raw")
        return mapped_bytes(e.data or 0, int(e.bytes), h)

    # -- metadata --------------------------------------------------------------------------------

    @property
    def metadata(self) -> Dict[str, Any]:
        """safetensors: ``__metadata__`` (str to str; a tensorops file's own
        format keys included).  GGUF: every key/value, as int, float, bool,
        str (bytes where a string is not UTF-8) or a list of them.  Read once,
        then cached; the dict is a copy, free to change."""
        if self._metadata is None:
            h = self._live("tensorops.Model.metadata")
            out: Dict[str, Any] = {}
            for i in range(LIB.tops_model_meta_count(h.ptr)):
                key = ctypes.c_char_p()
                v = MetaValue()
                check(LIB.tops_model_meta(h.ptr, i, ctypes.byref(key), ctypes.byref(v)))
                k = (key.value or b"").decode("utf-8", "replace")
                if v.type == _ARRAY:
                    items = []
                    item = MetaValue()
                    for j in range(v.array_count):
                        check(LIB.tops_model_meta_item(h.ptr, i, j, ctypes.byref(item)))
                        items.append(_value(item))
                    out[k] = items
                else:
                    out[k] = _value(v)
            self._metadata = out
        return dict(self._metadata)


def _value(v: MetaValue) -> Any:
    t = v.type
    if t in (_U8, _U16, _U32, _U64):
        return int(v.u)
    if t in (_I8, _I16, _I32, _I64):
        return int(v.i)
    if t in (_F32, _F64):
        return float(v.f)
    if t == _BOOL:
        return bool(v.u)
    if t == _STRING:
        raw = ctypes.string_at(v.string, v.string_len) if v.string_len else b""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    return None  # pragma: no cover - the reader refuses other types


def open(source: Union[PathLike, bytes, bytearray, memoryview, np.ndarray]) -> Model:  # noqa: A001
    """Opens a safetensors or GGUF checkpoint (the kind is told by its first
    bytes, never by the name).  ``source`` is a path (str or os.PathLike), or
    the file's contents in memory (bytes, bytearray, memoryview or a uint8
    array, C-contiguous; views point into it, so it is kept alive and must
    not change).  The file is untrusted: a malformed one raises ParseError
    with the reason, a missing one IoError."""
    fn = "tensorops.open"
    if isinstance(source, (str, os.PathLike)):
        ptr = ctypes.c_void_p()
        check(LIB.tops_model_open(os.fsencode(source), ctypes.byref(ptr)))
        return Model(_Handle(ptr.value or 0, None), os.fsdecode(source))
    try:
        buf = np.frombuffer(source, np.uint8)  # no copy; holds the buffer (a bytearray cannot resize)
    except (TypeError, ValueError) as e:
        fail(InvalidArgument, fn, f"source is a {type(source).__name__}; it must be a path, or the file's bytes "
                                  f"in a contiguous buffer ({e})")
    if buf.size == 0:
        fail(InvalidArgument, fn, "source holds no bytes; a checkpoint starts with a header")
    ptr = ctypes.c_void_p()
    check(LIB.tops_model_open_buffer(buf.ctypes.data, buf.nbytes, ctypes.byref(ptr)))
    return Model(_Handle(ptr.value or 0, buf), f"<{buf.nbytes} bytes>")


# ---- writing ------------------------------------------------------------------------------------

_SAFETENSORS_DTYPE = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
                      "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32",
                      "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
                      "uint8": "U8", "bool": "BOOL"}


def save(path: PathLike, tensors: Any, metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes a safetensors file.

    ``tensors``: a dict {name: numpy array | Weight | DLPack host tensor}.
    numpy arrays are stored as their dtype (float64..bool, ml_dtypes
    bfloat16 / float8_e4m3fn / float8_e5m2), any rank up to 8, as any
    writer would; a Weight of a quantized format (or with a tensor_scale)
    as its planes NAME, NAME.scales, ... with its format in
    ``__metadata__``, which :func:`open` reads back whole (docs/formats.md,
    section 7).  ``metadata``: extra ``__metadata__`` strings.  The file
    appears only when complete: a failure leaves an existing file as it was.

    ``save(path, weight)`` with one Weight or float array writes the
    library's single-tensor file ("weight"; :func:`tensorops.load`)."""
    fn = "tensorops.save"
    if not isinstance(tensors, Mapping):
        if metadata is not None:
            fail(InvalidArgument, fn, "metadata is for a dict of tensors; save(path, weight) writes the "
                                      "single-tensor file, which has none of its own")
        _save_single(path, tensors)
        return
    keep: List[Any] = []
    entries = (NamedTensor * max(len(tensors), 1))()
    for i, (name, x) in enumerate(tensors.items()):
        if not isinstance(name, str) or "\0" in name:
            fail(InvalidArgument, fn, f"tensor names are strings without NUL characters; got {name!r}")
        e = entries[i]
        try:
            bname = name.encode()
        except UnicodeEncodeError as err:
            fail(InvalidArgument, fn, f"tensor name {name!r} is not valid UTF-8 text ({err.reason})")
        keep.append(bname)
        e.name = bname
        what = f"tensors[{name!r}]"
        if isinstance(x, Weight):
            op = x._operand()
            keep.append(op)
            e.tensor = ctypes.addressof(op.t)
            continue
        if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
            op = operand(x, fn, what)
            if op.device != HOST:
                fail(UnsupportedOnDevice, fn, f"{what} lives in device memory; save writes host tensors")
            keep.append(op)
            e.tensor = ctypes.addressof(op.t)
            continue
        try:
            arr = np.asarray(x)
        except Exception as err:  # noqa: BLE001 - the caller's input
            fail(InvalidArgument, fn, f"{what} ({type(x).__name__}) is not an array: {err}")
        st = _SAFETENSORS_DTYPE.get(arr.dtype.name)
        if st is None:
            fail(UnsupportedFormat, fn, f"{what} has dtype {arr.dtype}, which safetensors does not store; "
                                        f"use one of {', '.join(_SAFETENSORS_DTYPE)} or a tensorops.Weight")
        if arr.ndim > MODEL_MAX_RANK:
            fail(ShapeMismatch, fn, f"{what} has rank {arr.ndim}; safetensors tensors here have rank "
                                    f"0..{MODEL_MAX_RANK}")
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not np.little_endian):
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (not ascontiguousarray, which makes a 0-d array 1-d)
        shape = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
        keep += [arr, shape]
        bdtype = st.encode()
        keep.append(bdtype)
        e.dtype = bdtype
        e.rank = arr.ndim
        e.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        e.data = arr.ctypes.data
    meta = None
    n_meta = 0
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            fail(InvalidArgument, fn, f"metadata is a {type(metadata).__name__}; it must be a dict of str to str")
        flat: List[bytes] = []
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str) or "\0" in k or "\0" in v:
                fail(InvalidArgument, fn, f"metadata holds {k!r}: {v!r}; safetensors metadata maps strings to "
                                          "strings (without NUL characters)")
            owner = k.rsplit(".", 1)
            if len(owner) == 2 and owner[1] in ("format", "shape", "tensor_scale") and owner[0] in tensors:
                fail(InvalidArgument, fn, f"metadata key {k!r} is one the reader takes as tensor {owner[0]!r}'s "
                                          "own (its tensorops format); choose another key")
            try:
                flat += [k.encode(), v.encode()]
            except UnicodeEncodeError as err:
                fail(InvalidArgument, fn, f"metadata {k!r}: {v!r} is not valid UTF-8 text ({err.reason})")
        meta = (ctypes.c_char_p * max(len(flat), 1))(*flat)
        keep.append(flat)
        n_meta = len(metadata)
    check(LIB.tops_model_save(os.fsencode(path), entries, len(tensors), meta, n_meta))
    del keep
