# SPDX-License-Identifier: BSD-3-Clause
"""kvcore's exceptions: one KvcoreError per failed call, of the builtin class a Python user expects.

Every error is a `KvcoreError` (which stays a `RuntimeError`, as before) carrying `.status` (the
numeric kvc_status_t), `.name` ("KVC_ERR_SHAPE") and `.message`. Raising `KvcoreError(status, msg)`
gives the subclass for the status's category, which also derives from the builtin exception:

    ValueError          KVC_ERR_INVALID_ARG, OUT_OF_RANGE, NO_SPACE, CORRUPT, VERSION, ALIGNMENT,
                        SHAPE, FORMAT, PLACEMENT, OVERLAP (a bad argument, shape, range or data)
    TypeError           KVC_ERR_DTYPE (an element type, or an object that is not an array)
    MemoryError         KVC_ERR_NO_MEMORY, KVC_ERR_LIMIT
    OSError (.errno)    KVC_ERR_IO (EIO), NOT_FOUND (ENOENT: FileNotFoundError), EXISTS (EEXIST:
                        FileExistsError), PERMISSION (EACCES: PermissionError)
    NotImplementedError KVC_ERR_UNSUPPORTED
    RuntimeError only   KVC_ERR_NO_DEVICE, ABI, BACKEND, STATE

so `except ValueError` and `except KvcoreError` both catch a wrong shape."""
import errno as _errno
from typing import Any, Dict, Optional, Tuple, Type

from . import _abi


class KvcoreError(RuntimeError):
    """A kvcore call failed. `status` is the numeric kvc_status_t, `name` its enum name
    ("KVC_ERR_DTYPE"), `message` kvcore's detailed message (kvc_last_error) or the binding's.
    Constructing it gives the subclass of the status's category (see kvcore.errors)."""

    status: int
    name: str
    message: str

    def __new__(cls, status: int, message: str = "", *args: Any, **kw: Any) -> "KvcoreError":
        if cls is KvcoreError:
            cls = _CLASS.get(int(status), KvcoreError)
        base = OSError if issubclass(cls, OSError) else RuntimeError  # OSError has its own object layout
        return base.__new__(cls, status, message)  # type: ignore[call-arg]

    def __init__(self, status: int, message: str = "", *args: Any, **kw: Any) -> None:
        self.status = int(status)
        self.name = _abi.STATUS.get(self.status, "KVC_UNKNOWN")
        self.message = message
        super().__init__(f"{self.name}: {message}")

    def __reduce__(self) -> Tuple[Any, ...]:  # picklable across processes (multiprocessing)
        return (KvcoreError, (self.status, self.message))


class KvcoreValueError(KvcoreError, ValueError):
    """A bad argument, shape, range or container (KVC_ERR_INVALID_ARG, SHAPE, CORRUPT, ...)."""


class KvcoreTypeError(KvcoreError, TypeError):
    """An element type kvcore cannot take here (KVC_ERR_DTYPE), or an object that is not an array."""


class KvcoreMemoryError(KvcoreError, MemoryError):
    """Memory could not be had (KVC_ERR_NO_MEMORY) or a limit was reached (KVC_ERR_LIMIT)."""


class KvcoreOSError(KvcoreError, OSError):
    """The operating system refused (KVC_ERR_IO, NOT_FOUND, EXISTS, PERMISSION); `.errno` is set."""

    _ERRNO = _errno.EIO

    def __init__(self, status: int, message: str = "", *args: Any, **kw: Any) -> None:
        super().__init__(status, message)
        self.errno, self.strerror = self._ERRNO, message

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class KvcoreFileNotFoundError(KvcoreOSError, FileNotFoundError):
    """KVC_ERR_NOT_FOUND (errno ENOENT)."""
    _ERRNO = _errno.ENOENT


class KvcoreFileExistsError(KvcoreOSError, FileExistsError):
    """KVC_ERR_EXISTS (errno EEXIST)."""
    _ERRNO = _errno.EEXIST


class KvcorePermissionError(KvcoreOSError, PermissionError):
    """KVC_ERR_PERMISSION (errno EACCES)."""
    _ERRNO = _errno.EACCES


class UnsupportedError(KvcoreError, NotImplementedError):
    """KVC_ERR_UNSUPPORTED: the backend or this build does not implement the operation."""


_S = _abi.STATUS_CODES
_CLASS: Dict[int, Type[KvcoreError]] = {
    **{_S[n]: KvcoreValueError for n in ("KVC_ERR_INVALID_ARG", "KVC_ERR_OUT_OF_RANGE", "KVC_ERR_NO_SPACE",
                                         "KVC_ERR_CORRUPT", "KVC_ERR_VERSION", "KVC_ERR_ALIGNMENT", "KVC_ERR_SHAPE",
                                         "KVC_ERR_FORMAT", "KVC_ERR_PLACEMENT", "KVC_ERR_OVERLAP")},
    _S["KVC_ERR_DTYPE"]: KvcoreTypeError,
    _S["KVC_ERR_NO_MEMORY"]: KvcoreMemoryError, _S["KVC_ERR_LIMIT"]: KvcoreMemoryError,
    _S["KVC_ERR_IO"]: KvcoreOSError, _S["KVC_ERR_NOT_FOUND"]: KvcoreFileNotFoundError,
    _S["KVC_ERR_EXISTS"]: KvcoreFileExistsError, _S["KVC_ERR_PERMISSION"]: KvcorePermissionError,
    _S["KVC_ERR_UNSUPPORTED"]: UnsupportedError,
}


def type_error(message: str, status: Optional[int] = None) -> KvcoreError:
    """A KvcoreTypeError for an argument of the wrong Python type (status KVC_ERR_INVALID_ARG unless
    given): a string where an array goes, say."""
    return KvcoreTypeError(_S["KVC_ERR_INVALID_ARG"] if status is None else status, message)
