# SPDX-License-Identifier: BSD-3-Clause
"""The package's PEP 517 build backend, in the tree and in plain Python: `pip install ./python`
needs no setuptools, wheel or anything downloaded (pyproject.toml: requires = [], backend-path).
The package is pure Python, so a wheel is its files plus metadata. The version is the library's
(../VERSION in a source tree, else pkg-config's); when pkg-config finds kvcore at build time its
libdir is recorded in kvcore/_config.py, the first place the package looks after KVCORE_LIBRARY."""
import base64
import ctypes.util
import hashlib
import os
import subprocess
import zipfile
from typing import Any, Dict, List, Optional

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAME = "kvcore"


def _pkg_config(*args: str) -> Optional[str]:
    try:
        r = subprocess.run(["pkg-config", *args, "kvcore"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _version() -> str:
    path = os.path.join(_HERE, "..", "VERSION")
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                if line.startswith("version="):
                    return line.split("=", 1)[1].strip()
    v = _pkg_config("--modversion")
    if v is None:
        raise SystemExit("kvcore: no ../VERSION (not a kvcore source tree) and pkg-config cannot find kvcore.pc "
                         "to take the library's version from (set PKG_CONFIG_PATH)")
    return v


def _metadata(version: str) -> str:
    return (f"Metadata-Version: 2.1\nName: {_NAME}\nVersion: {version}\n"
            "Summary: KV-cache transfers, CacheGen codec, RoPE and host memory for LLM serving (libkvcore "
            "binding)\nLicense: BSD-3-Clause\nRequires-Python: >=3.8\nRequires-Dist: numpy\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _files() -> Dict[str, bytes]:
    out = {}
    pkg = os.path.join(_HERE, _NAME)
    for name in sorted(os.listdir(pkg)):
        if (name.endswith(".py") and name != "_config.py") or name == "py.typed":
            with open(os.path.join(pkg, name), "rb") as f:
                out[f"{_NAME}/{name}"] = f.read()
    libdir = _pkg_config("--variable=libdir")
    if libdir is None and os.path.isfile(os.path.join(_HERE, "..", ".libs", "libkvcore.so")):
        libdir = os.path.abspath(os.path.join(_HERE, "..", ".libs"))  # an in-tree build beside ./python
    if libdir is None and not os.environ.get("KVCORE_LIBRARY") and ctypes.util.find_library("kvcore") is None:
        raise SystemExit("kvcore: no libkvcore to record: pkg-config finds no kvcore and there is no in-tree build "
                         "beside ./python nor a libkvcore on the system's library path. Build the library first, "
                         "then point pkg-config at it (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig after make install, or "
                         "PKG_CONFIG_PATH=BUILD-DIRECTORY before it), or set KVCORE_LIBRARY=/path/to/libkvcore.so")
    if libdir is not None:
        out[f"{_NAME}/_config.py"] = (f"# Written by kvcore_build.py from pkg-config: where libkvcore was found.\n"
                                      f"LIBDIR = {libdir!r}\n").encode()
    return out


def _dist_info(version: str) -> Dict[str, bytes]:
    di = f"{_NAME}-{version}.dist-info"
    return {f"{di}/METADATA": _metadata(version).encode(),
            f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kvcore_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}


def get_requires_for_build_wheel(config_settings: Any = None) -> List[str]:
    """Nothing to install before building."""
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> List[str]:
    """Nothing to install before building."""
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    """Write the .dist-info directory pip reads before building."""
    version = _version()
    for path, data in _dist_info(version).items():
        full = os.path.join(metadata_directory, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return f"{_NAME}-{version}.dist-info"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    """Build kvcore-VERSION-py3-none-any.whl into wheel_directory."""
    version = _version()
    files = dict(_files(), **_dist_info(version))
    record = f"{_NAME}-{version}.dist-info/RECORD"
    lines = [_record_line(p, d) for p, d in files.items()] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    name = f"{_NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            z.writestr(info, data, zipfile.ZIP_DEFLATED)
    return name
