# SPDX-License-Identifier: BSD-3-Clause
"""kvcore from Python: KV-cache compression, transfers, RoPE, host memory, over libkvcore (ctypes).

The package's names, gathered from its topic modules: context (Context, recorders), codec
(compress, decompress, open, the coder and .kvc codec, KV-cache files), transfer (engine formats,
PageShape, Engine), memory (host and device buffers, copies), rope, enums, errors, and
`kvcore.lmcache_ops`, a drop-in for LMCache's `c_ops`. No torch or numpy C ABI is linked; every
call releases the GIL. See docs/PYTHON.md."""
from . import _abi, errors
from ._lib import KvcoreError, UnsupportedError, path as library_path
from ._codec_ops import encode_bound, rans_encode_bound
from .codec import StreamReader, StreamWriter, compress, decompress, default_bins, default_context, inspect, \
    load_kvcache, open, probe, save_kvcache
from .context import Context, recorder_now, status_name
from .enums import ChunkLayout, DType, Direction, Format, KeyScaling, RopeStyle
from .errors import KvcoreFileExistsError, KvcoreFileNotFoundError, KvcoreMemoryError, KvcoreOSError, \
    KvcorePermissionError, KvcoreTypeError, KvcoreValueError
from .memory import DeviceArray, DeviceBuffer, HostBuffer
from .transfer import Engine, _CROSS, _FUSED, _KV_LIST, _MLA  # noqa: F401 (_CROSS.._MLA: for lmcache_ops)
from .transfer import format_name, format_ptr_count, shape_ptr_count
from ._lib import lib as _lib  # kvcore._lib is the loaded library (lmcache_ops imports it so)

__all__ = ["Context", "Engine", "HostBuffer", "DeviceBuffer", "DeviceArray", "KvcoreError", "UnsupportedError",
           "PageShape", "library_path", "H2D", "D2H", "NEOX", "GPTJ", "encode_bound", "rans_encode_bound", "default_bins",
           "inspect", "probe",
           "recorder_now", "format_name", "format_ptr_count", "shape_ptr_count", "status_name", "load_kvcache",
           "save_kvcache", "__version__", "compress", "decompress", "open", "default_context", "StreamReader",
           "StreamWriter", "ChunkLayout", "DType", "Direction", "Format", "KeyScaling", "RopeStyle", "errors",
           "KvcoreValueError", "KvcoreTypeError", "KvcoreMemoryError", "KvcoreOSError", "KvcoreFileNotFoundError",
           "KvcoreFileExistsError", "KvcorePermissionError"]

__version__: str = _lib.kvc_version_string().decode()  # the loaded libkvcore's (VERSION), which this package binds
H2D, D2H = Direction.H2D, Direction.D2H
NEOX, GPTJ = RopeStyle.NEOX, RopeStyle.GPTJ
PageShape = _abi.PageShape
