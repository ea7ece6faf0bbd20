"""Exceptions: one class per tops_status, raised with the library's sentence.

Each class also derives from the built-in exception a Python caller would
expect (InvalidArgument is a ValueError, OutOfMemory a MemoryError, ...), so
code that catches ValueError keeps working.  Checks done in Python before a
call raise the same classes, with sentences in the library's style.
"""
from __future__ import annotations

from typing import Dict, NoReturn, Type

from ._lib import LIB, STATUSES


class Error(Exception):
    """A tensorops failure.  `status` is the short status name
    ("shape_mismatch"), `sentence` the library's sentence naming the
    function, the argument and the rule broken; str(error) is the sentence."""

    status = "internal"

    def __init__(self, sentence: str, status: "str | None" = None):
        super().__init__(sentence)
        self.sentence = sentence
        if status is not None:
            self.status = status


class InvalidArgument(Error, ValueError):
    """An argument breaks a rule (status invalid_argument)."""
    status = "invalid_argument"


class ShapeMismatch(Error, ValueError):
    """Tensor extents do not agree (status shape_mismatch)."""
    status = "shape_mismatch"


class UnsupportedFormat(Error, TypeError):
    """The format, dtype or combination of them is not supported (status unsupported_format)."""
    status = "unsupported_format"


class UnsupportedOnDevice(Error, RuntimeError):
    """The operation is not available on this device or ISA (status unsupported_on_device)."""
    status = "unsupported_on_device"


class OutOfMemory(Error, MemoryError):
    """An allocation failed (status out_of_memory)."""
    status = "out_of_memory"


class Overflow(Error, OverflowError):
    """A size does not fit in size_t or int64 (status overflow)."""
    status = "overflow"


class IoError(Error, OSError):
    """Reading or writing a file failed (status io_error)."""
    status = "io_error"


class ParseError(Error, ValueError):
    """A file or string is malformed (status parse_error)."""
    status = "parse_error"


class NotFound(Error, LookupError):
    """A named item (a format, a dtype) does not exist (status not_found)."""
    status = "not_found"


class DeviceError(Error, RuntimeError):
    """The accelerator runtime reported an error (status device_error)."""
    status = "device_error"


class InternalError(Error, RuntimeError):
    """An internal invariant failed (status internal)."""
    status = "internal"


_BY_STATUS: Dict[str, Type[Error]] = {c.status: c for c in (
    InvalidArgument, ShapeMismatch, UnsupportedFormat, UnsupportedOnDevice, OutOfMemory, Overflow, IoError,
    ParseError, NotFound, DeviceError, InternalError)}


def error_class(status: str) -> Type[Error]:
    """The exception class of a status name (Error for one this package does not know)."""
    return _BY_STATUS.get(status, Error)


def check(code: int) -> None:
    """Raises the exception of a failed tops_status, with tops_last_error()'s sentence."""
    if code == 0:
        return
    name = STATUSES[code] if 0 <= code < len(STATUSES) else f"status {code}"
    sentence = (LIB.tops_last_error() or b"").decode("utf-8", "replace") or name
    raise error_class(name)(sentence, name)


def fail(cls: Type[Error], fn: str, sentence: str) -> NoReturn:
    """Raises cls with "fn: sentence", the library's sentence form."""
    raise cls(f"{fn}: {sentence}")
