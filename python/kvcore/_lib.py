# SPDX-License-Identifier: BSD-3-Clause
"""Finding and loading libkvcore, and turning its statuses into exceptions."""
import ctypes
import ctypes.util
import importlib
import os
import subprocess
from typing import Iterator, List, Optional, Tuple

from . import _abi
from .errors import KvcoreError as KvcoreError, UnsupportedError as UnsupportedError  # noqa: F401 (re-exported)


def error(status: int, message: str) -> KvcoreError:
    """The exception for a failed call: KvcoreError's subclass for the status (kvcore.errors)."""
    return KvcoreError(status, message)


def _pkg_config_libdir() -> Optional[str]:
    """libkvcore's directory as pkg-config says (PKG_CONFIG_PATH applies; in a build tree,
    kvcore-uninstalled.pc), or None."""
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "kvcore"], capture_output=True, text=True,
                           timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _candidates() -> Iterator[str]:
    """Where libkvcore is looked for, in order (docs/PYTHON.md, "Installing"): KVCORE_LIBRARY alone
    when set; else the libdir recorded at install (make install, pip's pkg-config), pkg-config now,
    then the system's search path."""
    env = os.environ.get("KVCORE_LIBRARY")
    if env:
        yield env  # an explicit choice is never silently replaced by another library
        return
    try:
        # written by `make install` / `pip install` with the libdir found then (absent in a source tree)
        libdir = importlib.import_module(__name__.rsplit(".", 1)[0] + "._config").LIBDIR
    except ImportError:
        libdir = None
    if libdir:
        yield os.path.join(libdir, "libkvcore.so")
    libdir = _pkg_config_libdir()  # run only when the recorded libdir did not load
    if libdir:
        yield os.path.join(libdir, "libkvcore.so")
    found = ctypes.util.find_library("kvcore")
    if found:
        yield found
    yield "libkvcore.so"


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
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


def check(status: int) -> None:
    """Raise for a failed call, with kvcore's message from this thread (kvc_last_error)."""
    if status != 0:
        raise error(status, (lib.kvc_last_error() or b"").decode(errors="replace") or
                    lib.kvc_status_string(status).decode())
