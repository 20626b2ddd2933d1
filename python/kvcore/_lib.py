# SPDX-License-Identifier: BSD-3-Clause
"""Finding and loading libkvcore, and turning its statuses into exceptions."""
import ctypes
import ctypes.util
import os

from . import _abi


class KvcoreError(RuntimeError):
    """A kvcore call failed. `status` is the numeric kvc_status_t, `name` its enum name
    ("KVC_ERR_DTYPE"), `message` kvcore's detailed message (kvc_last_error) or the binding's."""

    def __init__(self, status, message):
        self.status = int(status)
        self.name = _abi.STATUS.get(self.status, "KVC_UNKNOWN")
        self.message = message
        super().__init__(f"{self.name}: {message}")


class UnsupportedError(KvcoreError, NotImplementedError):
    """KVC_ERR_UNSUPPORTED: the backend or this build does not implement the operation."""


def error(status, message):
    cls = UnsupportedError if status == _abi.KVC_ERR_UNSUPPORTED else KvcoreError
    return cls(status, message)


def _candidates():
    env = os.environ.get("KVCORE_LIBRARY")
    if env:
        return [env]  # an explicit choice is never silently replaced by another library
    out = []
    try:
        from . import _config  # written by `make install` / `pip install` with the libdir found then
        out.append(os.path.join(_config.LIBDIR, "libkvcore.so"))
    except ImportError:
        pass
    found = ctypes.util.find_library("kvcore")
    if found:
        out.append(found)
    out.append("libkvcore.so")
    return out


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)  # CDLL (not PyDLL): every call releases the GIL
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        for name, (res, args) in _abi.PROTOTYPES.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        return lib, path
    raise ImportError("kvcore: cannot load libkvcore (set KVCORE_LIBRARY to its path); tried:\n  " +
                      "\n  ".join(tried))


lib, path = _load()


def check(status):
    """Raise for a failed call, with kvcore's message from this thread (kvc_last_error)."""
    if status != 0:
        raise error(status, (lib.kvc_last_error() or b"").decode(errors="replace") or
                    lib.kvc_status_string(status).decode())
