# SPDX-License-Identifier: BSD-3-Clause
"""The Context's core: creating and closing the library context, threads, and argument checks."""
import ctypes as _C
import os as _os
import threading as _threading
import weakref as _weakref
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar, Union

import numpy as _np

from . import _abi
from ._array import buf as _buf, cstr as _cstr, require as _require, require_distinct as _require_distinct
from ._lib import check as _check, lib as _lib
from .errors import KvcoreError


_U8, _U16, _I32, _I64, _F32 = _abi.DTYPE_U8, _abi.DTYPE_U16, _abi.DTYPE_I32, _abi.DTYPE_I64, _abi.DTYPE_F32
_FLOATS = (_abi.DTYPE_F16, _abi.DTYPE_BF16, _abi.DTYPE_F32)
_env_lock = _threading.Lock()
# An array argument: a numpy array, a torch tensor, or anything with __array_interface__,
# __cuda_array_interface__ or DLPack (kvcore._array reads them all).
Array = Any
# A stream (cudaStream_t / hipStream_t) as an int, None for the default.
Stream = Optional[int]
# An index table (slots, block ids, positions): an int64 array or a Python sequence of ints.
Index = Union[Array, Sequence[int], range]
# A format or a direction: the enum member, its int, or its name.
FormatLike = Union[int, str]
DirectionLike = Union[int, str]
_T = TypeVar("_T", bound="ContextBase")


def _c_array(ctype: Any, values: Sequence[Any]) -> Any:
    """A ctypes array of ctype holding values."""
    return (ctype * len(values))(*values)


def _default_threads() -> int:
    """The CPU thread count of a Context given none (docs/PYTHON.md, "Threads"): OMP_NUM_THREADS's
    first value when set, else the CPUs this process may run on. Not omp_get_max_threads(): torch
    calls omp_set_num_threads() at import (its intra-op default, 1 on some machines) in the shared
    libgomp, so `import torch` before the first Context would change kvcore's count."""
    v = _os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    try:
        return len(_os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no sched_getaffinity (not Linux)
        return _os.cpu_count() or 1


class ContextBase:
    """The core every kvcore.Context has: the library handle, its options, and the checks that turn
    arguments into what the C calls take. The ops come from the topic classes Context combines."""

    def __init__(self, backend: Optional[str] = None, device: Optional[int] = None, num_threads: Optional[int] = None,
                 isa: Optional[str] = None, module_path: Optional[str] = None, load_all_modules: bool = False) -> None:
        self._h: Optional[int] = None
        self._buffers: "_weakref.WeakSet[Any]" = _weakref.WeakSet()
        p = _abi.ContextParams()
        if backend is not None:
            p.field_mask |= _abi.CONTEXT_PARAM_BACKEND
            p.backend = _cstr(backend, "backend")
        if device is not None:
            p.field_mask |= _abi.CONTEXT_PARAM_DEVICE
            p.device = device
        if num_threads is None and not _os.environ.get("KVCORE_NUM_THREADS"):
            num_threads = _default_threads()
        if num_threads is not None:
            p.field_mask |= _abi.CONTEXT_PARAM_NUM_THREADS
            p.num_threads = num_threads
        if module_path is not None:
            p.field_mask |= _abi.CONTEXT_PARAM_MODULE_PATH
            p.module_path = _cstr(module_path, "module_path")
        if load_all_modules:
            p.field_mask |= _abi.CONTEXT_PARAM_LOAD_ALL
            p.load_all_modules = 1
        h = _C.c_void_p()
        # The ISA cap is read from KVCORE_ISA when the context is created.
        with _env_lock:
            old = _os.environ.get("KVCORE_ISA")
            if isa is not None:
                _os.environ["KVCORE_ISA"] = isa
            try:
                _check(_lib.kvc_context_create(_C.byref(p), _C.byref(h)))
            finally:
                if isa is not None:
                    if old is None:
                        del _os.environ["KVCORE_ISA"]
                    else:
                        _os.environ["KVCORE_ISA"] = old
        self._h = h.value
        self.backend: str = _lib.kvc_context_backend_name(self._h).decode()
        self.isa: str = _lib.kvc_context_isa(self._h).decode()
        self.num_threads: int = _lib.kvc_context_num_threads(self._h)
        self._recorder_lock = _threading.Lock()

    def close(self) -> None:
        """Destroy the context now. Refused (KVC_ERR_STATE) while a HostBuffer of it is alive."""
        if self._buffers:
            raise KvcoreError(_abi.KVC_ERR_STATE, f"{len(self._buffers)} host buffer(s) of this context are "
                                                  "still referenced (by themselves or by array views)")
        if self._h:
            _lib.kvc_context_destroy(self._h)
            self._h = None

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._buffers:
            self.close()

    def __del__(self) -> None:
        if self._h:
            _lib.kvc_context_destroy(self._h)
            self._h = None

    def __repr__(self) -> str:
        return f"<kvcore.Context backend={self.backend} isa={self.isa} threads={self.num_threads}>"

    def _handle(self) -> int:
        if not self._h:
            raise KvcoreError(_abi.KVC_ERR_STATE, "the context is closed")
        return self._h

    def _arr(self, obj: Array, name: str, writable: bool = False, **req: Any) -> Any:
        """An array argument on this context's device, checked (dtype, rank, shape, C order)."""
        b = _buf(obj, name, writable)
        kind = b.device[0]
        if self.backend == "cpu" and kind != "cpu":
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"{name}: the array is on {kind} but this context's "
                                                        "backend is cpu")
        return _require(b, **req)

    def _out_view(self, obj: Array, name: str, **req: Any) -> Tuple[Any, Callable[[], None]]:
        """An output array that may be any view whose elements are distinct memory (a window
        out[:, a:b, :] of a larger tensor, a transposed view): (the Buf the C call writes, done).
        A C-contiguous array is written in place and done() does nothing; another view is written
        through a dense scratch array of its shape that done() copies into it, so nothing of the
        view is written unless the call succeeded, and only its elements are."""
        b = self._arr(obj, name, True, contiguous=False, **req)
        if b.contiguous():
            return b, lambda: None
        _require_distinct(b)
        dims = sorted((s, d) for d, s in zip(b.shape, b.strides) if d > 1)
        reach = b.itemsize
        for s, d in dims:  # each dimension steps past everything the finer ones reach
            if s < reach:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: elements overlap (shape {list(b.shape)}, byte "
                                                      f"strides {list(b.strides)}); an output needs distinct elements")
            reach += (d - 1) * s
        if type(obj) is _np.ndarray:
            tmp: Any = _np.empty(obj.shape, obj.dtype)

            def done() -> None:
                obj[...] = tmp
        elif type(obj).__module__.startswith("torch") and hasattr(obj, "copy_"):
            import torch
            tmp = torch.empty(tuple(obj.shape), dtype=obj.dtype, device=obj.device)

            def done() -> None:
                obj.copy_(tmp)
        else:
            return _require(b, contiguous=True), lambda: None  # no way to copy into it: the usual error
        return self._arr(tmp, name, True), done

    def _stream(self, stream: Stream, *arrays: Any) -> Optional[_C.c_void_p]:
        """The stream to use: the caller's, else torch's current stream for a GPU torch tensor."""
        if stream is None and self.backend == "cpu":
            return None
        if stream is not None:
            return _C.c_void_p(int(stream))
        if self.backend != "cpu":
            for a in arrays:
                if type(a).__module__.startswith("torch") and a.is_cuda:
                    import torch
                    return _C.c_void_p(torch.cuda.current_stream(a.device).cuda_stream)
        return None

    def synchronize(self, stream: Stream = None) -> None:
        """Wait until the work queued on stream (default: the backend's default stream) is done; a
        device-side error of an earlier asynchronous op is reported here."""
        _check(_lib.kvc_stream_synchronize(self._handle(), _C.c_void_p(stream or 0)))

    def _index(self, idx: Index, name: str, count: Optional[int] = None) -> Any:
        if isinstance(idx, (list, tuple, range)):  # a Python sequence of ints: as int64
            a = _np.asarray(idx)
            if a.size and a.dtype.kind not in "iu":
                raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{name}: a sequence of {a.dtype}, expected ints")
            idx = a.astype(_np.int64).reshape(-1)
        b = self._arr(idx, name, dtypes=_I64, ndim=1)
        if count is not None and b.shape[0] != count:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: {b.shape[0]} entries, expected {count}")
        return b
