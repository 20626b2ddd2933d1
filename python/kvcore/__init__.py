# SPDX-License-Identifier: BSD-3-Clause
"""kvcore from Python: KV-cache transfers, the CacheGen coder and codec, RoPE re-rotation, host
memory and recorders, over libkvcore through ctypes (no torch or numpy C ABI is linked; every call
releases the GIL). `kvcore.lmcache_ops` is a drop-in for LMCache's `c_ops`. See docs/PYTHON.md."""
import builtins as _builtins
import ctypes as _C
import os as _os
import threading as _threading
import weakref as _weakref

import numpy as _np

from . import _abi
from ._array import count as _count, cstr as _cstr, require_distinct as _distinct, \
    require_reach as _reach
from ._array import buf as _buf, require as _require, DTYPE_NAMES as _DTYPE_NAMES, NP_DTYPES as _NP_KVC_DTYPES, \
    torch_dtypes as _torch_dtypes
from ._lib import KvcoreError, UnsupportedError, check as _check, lib as _lib, path as library_path
from .enums import ChunkLayout, DType, Direction, Format, KeyScaling, RopeStyle
from .errors import KvcoreFileExistsError, KvcoreFileNotFoundError, KvcoreMemoryError, KvcoreOSError, \
    KvcorePermissionError, KvcoreTypeError, KvcoreValueError
from . import errors
from . import codec as _codec
from .codec import compress, decompress, open, default_context, StreamReader, StreamWriter

__all__ = ["Context", "Engine", "HostBuffer", "DeviceBuffer", "DeviceArray", "KvcoreError", "UnsupportedError", "PageShape", "library_path",
           "H2D", "D2H", "NEOX", "GPTJ", "encode_bound", "default_bins", "inspect", "recorder_now",
           "format_name", "format_ptr_count", "shape_ptr_count", "status_name", "load_kvcache", "save_kvcache",
           "__version__", "compress", "decompress", "open", "default_context", "StreamReader", "StreamWriter",
           "ChunkLayout", "DType", "Direction", "Format", "KeyScaling", "RopeStyle", "errors", "KvcoreValueError",
           "KvcoreTypeError", "KvcoreMemoryError", "KvcoreOSError", "KvcoreFileNotFoundError",
           "KvcoreFileExistsError", "KvcorePermissionError"]

__version__ = _lib.kvc_version_string().decode()  # the loaded libkvcore's (VERSION), which this package binds
H2D, D2H = Direction.H2D, Direction.D2H
NEOX, GPTJ = RopeStyle.NEOX, RopeStyle.GPTJ
PageShape = _abi.PageShape

_U8, _U16, _I32, _I64, _F32 = _abi.DTYPE_U8, _abi.DTYPE_U16, _abi.DTYPE_I32, _abi.DTYPE_I64, _abi.DTYPE_F32
_FLOATS = (_abi.DTYPE_F16, _abi.DTYPE_BF16, _abi.DTYPE_F32)
_env_lock = _threading.Lock()
# Format facts, read once from the library (the transfer paths consult them on every call).
_VALID = {f for f in range(64) if _lib.kvc_format_is_valid(f)}
_KV_LIST = {f for f in _VALID if _lib.kvc_format_is_kv_list(f)}
_CROSS = {f for f in _VALID if _lib.kvc_format_is_cross_layer(f)}
_MLA = {f for f in _VALID if _lib.kvc_format_is_mla(f)}
_FUSED = {f for f in _VALID if _lib.kvc_format_is_fused_packed(f)}


def status_name(status):
    return _lib.kvc_status_name(status).decode()


def format_name(fmt):
    return _lib.kvc_format_name(int(fmt)).decode()


def format_ptr_count(fmt, nl):
    return int(_lib.kvc_format_ptr_count(int(fmt), int(nl)))


def shape_ptr_count(fmt, shape):
    """Pointer table entries for a format and PageShape (format 17: num_planes * nl); -1 if invalid."""
    return int(_lib.kvc_shape_ptr_count(int(fmt), _C.byref(shape)))


def encode_bound(tokens):
    """A per-stream capacity that always suffices for `tokens` symbols."""
    return int(_lib.kvc_cg_encode_bound(tokens))


def default_bins(num_layers):
    """LMCache's quantiser bins for a model of num_layers layers: uint32 [2 * num_layers]."""
    out = _np.empty(2 * num_layers, _np.uint32)
    _check(_lib.kvc_cg_default_bins(num_layers, out.ctypes.data))
    return out


def recorder_now():
    """The recorders' clock: monotonic Unix-epoch seconds."""
    return float(_lib.kvc_recorder_now())


def inspect(data):
    """Validate a .kvc container (bytes-like) and describe it as a dict."""
    mv = _bytes_view(data)
    info = _abi.CodecInfo()
    _check(_lib.kvc_codec_inspect(_addr(mv), len(mv), _C.byref(info)))
    return _info_dict(info)


def _info_dict(info):
    d = {name: getattr(info, name) for name, _ in _abi.CodecInfo._fields_}
    d["dtype"] = _DTYPE_NAMES.get(info.dtype, "invalid")
    d["layout"] = "mla" if info.layout == _abi.CODEC_MLA else "kv_2ltd"
    return d


_TYPESTR = {_abi.DTYPE_F16: "<f2", _abi.DTYPE_BF16: "<u2", _abi.DTYPE_F32: "<f4", _abi.DTYPE_F64: "<f8",
            _abi.DTYPE_U8: "|u1", _abi.DTYPE_I8: "|i1", _abi.DTYPE_I16: "<i2", _abi.DTYPE_I32: "<i4",
            _abi.DTYPE_I64: "<i8", _abi.DTYPE_U16: "<u2", _abi.DTYPE_U32: "<u4", _abi.DTYPE_U64: "<u8",
            _abi.DTYPE_BOOL: "|b1", _abi.DTYPE_F8_E4M3: "|u1", _abi.DTYPE_F8_E5M2: "|u1"}


class _OwnedTensor:
    """A kvc_tensor_t that owns its data, as the base of the numpy array over it: freed
    (kvc_tensor_free) when the last view is gone."""

    def __init__(self, t):
        self._t = t
        self.__array_interface__ = {"shape": tuple(t.shape[i] for i in range(t.ndim)), "typestr": _TYPESTR[t.dtype],
                                    "data": (t.data or 0, False), "version": 3}

    def __del__(self):
        _lib.kvc_tensor_free(_C.byref(self._t))


def _kvcache_params(num_heads, head_size, fmt=None, split=None):
    p = _abi.KvcacheIoParams()
    if num_heads is not None:
        p.field_mask |= _abi.KVCACHE_PARAM_NUM_HEADS
        p.num_heads = num_heads
    if head_size is not None:
        p.field_mask |= _abi.KVCACHE_PARAM_HEAD_SIZE
        p.head_size = head_size
    if fmt is not None:
        p.field_mask |= _abi.KVCACHE_PARAM_FORMAT
        p.format = {"npy": _abi.FILE_NPY, "safetensors": _abi.FILE_SAFETENSORS}[fmt]
    if split is not None:
        p.field_mask |= _abi.KVCACHE_PARAM_FORM
        p.form = _abi.KVCACHE_SPLIT if split else _abi.KVCACHE_FUSED
    return p


def load_kvcache(path, num_heads=None, head_size=None):
    """Read a KV cache file (.npy, or .safetensors: fused "kv", or "k"/"v") into a numpy array
    [2, NL, T, D] (bfloat16 as uint16 bits) and its dims {num_layers, num_tokens, num_heads,
    head_size, hidden}; NH/HS are 0 when the file does not say and no hint is given."""
    t, dims = _abi.Tensor(), _abi.KvcacheDims()
    _check(_lib.kvc_kvcache_load(_cstr(path, "path"), _C.byref(_kvcache_params(num_heads, head_size)), _C.byref(t),
                                 _C.byref(dims)))
    dtype = _DTYPE_NAMES.get(t.dtype, "?")
    return _np.asarray(_OwnedTensor(t)), dict({n: getattr(dims, n) for n, _ in _abi.KvcacheDims._fields_}, dtype=dtype)


def save_kvcache(path, kv, num_heads=None, head_size=None, split=False, format=None):
    """Write kv ([2, NL, T, D] or [2, NL, T, NH, HS], any kvcore dtype) as .npy or .safetensors
    (format None: from the extension). split: "k" and "v" tensors [NL, T, NH, HS] (safetensors)."""
    b = _require(_buf(kv, "kv"))
    if len(b.shape) > _abi.TENSOR_MAX_DIMS:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"kv: {len(b.shape)} dimensions")
    if b.device[0] != "cpu":
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"kv: the array is on {b.device[0]}; files are written from "
                                                    "host memory")
    t = _abi.Tensor(dtype=b.dtype, ndim=len(b.shape), data=b.ptr, nbytes=b.nbytes, owns_data=0)
    for i, d in enumerate(b.shape):
        t.shape[i] = d
    _check(_lib.kvc_kvcache_save(_cstr(path, "path"), _C.byref(t), _C.byref(_kvcache_params(num_heads, head_size, format,
                                                                                             split))))


def _bytes_view(data):
    mv = memoryview(data)
    if not mv.c_contiguous:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, "container bytes must be contiguous")
    return mv.cast("B")


def _addr(mv):
    """Address of a contiguous memoryview's first byte (read-only views included)."""
    if len(mv) == 0:
        return None
    return _np.frombuffer(mv, _np.uint8).ctypes.data


def _c_array(ctype, values):
    return (ctype * len(values))(*values)


class HostBuffer:
    """Host memory from kvc_mem_alloc. It is freed when the last reference to it is gone: every
    numpy array or torch tensor made from it (np.asarray(buf), buf.numpy(), buf.torch()) holds one,
    so no view can outlive the memory. The buffer also keeps its Context alive."""

    def __init__(self, ctx, ptr, size, report):
        self._ctx, self.ptr, self.size, self.report = ctx, ptr, size, report
        ctx._buffers.add(self)

    @property
    def __array_interface__(self):
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def numpy(self, dtype=_np.uint8, shape=None):
        a = _np.asarray(self).view(dtype)
        return a if shape is None else a.reshape(shape)

    def torch(self, dtype=None, shape=None):
        import torch
        if dtype == torch.bfloat16:
            t = torch.from_numpy(self.numpy(_np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(_np.asarray(self))
            if dtype is not None:
                t = t.view(dtype)
        return t if shape is None else t.view(shape)

    def query(self):
        """Fresh report of the allocation (page locations, hugepage use) as a dict."""
        r = _abi.MemReport()
        _check(_lib.kvc_mem_query(self._ctx._h, _C.c_void_p(self.ptr), _C.byref(r)))
        return _report_dict(r)

    def __del__(self):
        if self.ptr and self._ctx._h:
            _lib.kvc_mem_free(self._ctx._h, _C.c_void_p(self.ptr))
            self.ptr = 0


class Engine:
    """Engine tensors checked once by Context.engine(). It holds the tensors, so their memory stays
    alive while it exists; they must keep their storage (no resize_/set_ on torch tensors, no
    in-place resize of numpy arrays) while it is used, as LMCache's pointer tables require."""
    __slots__ = ("_ctx", "fmt", "_shape", "_ptrs", "_count", "_keep")

    def __init__(self, ctx, fmt, shape, ptrs, count, keep):
        self._ctx, self.fmt, self._shape = ctx, fmt, bytes(shape)
        self._ptrs, self._count, self._keep = ptrs, count, keep

    def _table(self, ctx, fmt, shape):
        if ctx is not self._ctx:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, "engine: made by another Context")
        if fmt != self.fmt or bytes(shape) != self._shape:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"engine: checked for format {self.fmt} and another shape; "
                                                  f"make one with Context.engine({fmt}, shape, tensors)")
        return self._ptrs, self._count, self._keep


class DeviceBuffer:
    """Memory from kvc_device_alloc: on a GPU context device memory, described by
    __cuda_array_interface__ (the protocol torch, CuPy and Numba read, on ROCm too); on the CPU
    context plain host memory (__array_interface__). Freed when the last reference to it is gone;
    every view (view()) holds one. The buffer keeps its Context alive."""

    def __init__(self, ctx, ptr, size):
        self._ctx, self.ptr, self.size = ctx, ptr, size
        self._host = ctx.backend == "cpu"
        ctx._buffers.add(self)

    def _interface(self, typestr, shape):
        return {"shape": shape, "typestr": typestr, "data": (self.ptr, False), "version": 3, "strides": None}

    def __getattr__(self, name):
        # exactly one of the two protocols, so nothing mistakes device memory for host memory
        if name == ("__array_interface__" if self._host else "__cuda_array_interface__"):
            return self._interface("|u1", (self.size,))
        raise AttributeError(name)

    def view(self, dtype, shape=None):
        """A typed array over the buffer (C order; shape defaults to 1-D over all of it)."""
        return DeviceArray(self, _np.dtype(dtype), shape)

    def __del__(self):
        if self.ptr and self._ctx._h:
            _lib.kvc_device_free(self._ctx._h, _C.c_void_p(self.ptr))
            self.ptr = 0


class DeviceArray:
    """A typed view of a DeviceBuffer, passed to kvcore (or torch.as_tensor, CuPy) like an array."""

    def __init__(self, buf, dtype, shape):
        n = buf.size // dtype.itemsize
        shape = (n,) if shape is None else tuple(int(d) for d in shape)
        need = dtype.itemsize
        for d in shape:
            need *= d
        if need > buf.size:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"view of {need} bytes over a {buf.size}-byte device buffer")
        self._buf, self.dtype, self.shape = buf, dtype, shape

    def __getattr__(self, name):
        if name == ("__array_interface__" if self._buf._host else "__cuda_array_interface__"):
            return self._buf._interface(self.dtype.str, self.shape)
        raise AttributeError(name)


def _report_dict(r):
    d = {}
    for name, _ in _abi.MemReport._fields_:
        v = getattr(r, name)
        if name == "location":
            v = {r.location[i].os_index: r.location[i].pages for i in range(min(r.location_count, 16))}
        elif isinstance(v, bytes):
            v = v.decode(errors="replace")
        d[name] = v
    return d


def _default_threads():
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


class Context:
    """A kvcore context: the backend ("auto", "cpu", "cuda", "hip"), its device, CPU threads and an
    ISA cap ("scalar", "avx2", "avx512", "neon", "best"). Every op is a method of a context."""

    def __init__(self, backend=None, device=None, num_threads=None, isa=None, module_path=None,
                 load_all_modules=False):
        self._h = None
        self._buffers = _weakref.WeakSet()
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
        self.backend = _lib.kvc_context_backend_name(self._h).decode()
        self.isa = _lib.kvc_context_isa(self._h).decode()
        self.num_threads = _lib.kvc_context_num_threads(self._h)
        self._recorder_lock = _threading.Lock()

    def close(self):
        """Destroy the context now. Refused (KVC_ERR_STATE) while a HostBuffer of it is alive."""
        if self._buffers:
            raise KvcoreError(_abi.KVC_ERR_STATE, f"{len(self._buffers)} host buffer(s) of this context are "
                                                  "still referenced (by themselves or by array views)")
        if self._h:
            _lib.kvc_context_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._buffers:
            self.close()

    def __del__(self):
        if self._h:
            _lib.kvc_context_destroy(self._h)
            self._h = None

    def __repr__(self):
        return f"<kvcore.Context backend={self.backend} isa={self.isa} threads={self.num_threads}>"

    # ------------------------------------------------------------ arguments
    def _handle(self):
        if not self._h:
            raise KvcoreError(_abi.KVC_ERR_STATE, "the context is closed")
        return self._h

    def _arr(self, obj, name, writable=False, **req):
        """An array argument on this context's device, checked (dtype, rank, shape, C order)."""
        b = _buf(obj, name, writable)
        kind = b.device[0]
        if self.backend == "cpu" and kind != "cpu":
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"{name}: the array is on {kind} but this context's "
                                                        "backend is cpu")
        return _require(b, **req)

    def _stream(self, stream, *arrays):
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

    def synchronize(self, stream=None):
        _check(_lib.kvc_stream_synchronize(self._handle(), _C.c_void_p(stream or 0)))

    # ------------------------------------------------------------ transfers
    def _engine(self, engine, fmt, shape):
        """Engine tensors -> (pointer table, count). Each must be C-contiguous with enough bytes.
        Formats 16 and 17 also take their per-layer tuples ([(K_0, V_0), ...], [(latent_0, rope_0), ...]),
        flattened layer by layer; for 17 an unset shape.num_planes is taken from the first tuple."""
        fmt = int(fmt)
        if type(engine) is Engine:
            return engine._table(self, fmt, shape)
        tensors = engine if isinstance(engine, (list, tuple)) else [engine]
        if fmt in (16, 17) and any(isinstance(t, (list, tuple)) for t in tensors):
            if fmt == 17 and shape.num_planes == 0:
                _set_planes(shape, [self._arr(t, f"engine[0][{i}]") for i, t in enumerate(tensors[0])],
                            shape.nb * shape.bs)
            tensors = [t for layer in tensors for t in (layer if isinstance(layer, (list, tuple)) else [layer])]
        want = shape_ptr_count(fmt, shape) if fmt in _VALID else -1
        if want < 0:  # an unknown format or bad plane count: the C call names it
            want = len(tensors)
        if len(tensors) != want:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"engine: format {fmt} with nl={shape.nl} takes {want} "
                                                  f"tensor(s), got {len(tensors)}")
        need = _engine_bytes(fmt, shape) if fmt in _VALID else 0
        ptrs = _fast_engine_ptrs(tensors, shape.element_size, need, self.backend == "cpu")
        if ptrs is not None:
            return ptrs, len(tensors), tensors
        bufs = [self._arr(t, f"engine[{i}]", writable=True) for i, t in enumerate(tensors)]
        for i, b in enumerate(bufs):
            if b.itemsize != shape.element_size and b.dtype != _U8 and fmt != 17:
                raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{b.name}: element size {b.itemsize}, shape says "
                                                      f"{shape.element_size}")
            if fmt == 17 and 0 < shape.num_planes <= _abi.MAX_PLANES:  # planes of their own widths (and types)
                need = shape.nb * shape.bs * shape.plane_bytes[i % shape.num_planes]
            if b.nbytes < need:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{b.name}: {b.nbytes} bytes, the geometry needs {need}")
        return _c_array(_C.c_void_p, [b.ptr for b in bufs]), len(bufs), bufs

    def engine(self, fmt, shape, tensors):
        """The engine tensors of a format, checked once, for repeated transfers: pass the returned
        Engine wherever a transfer takes `engine` (the same format and shape) and the per-tensor
        checks and the pointer table are not redone on every call (about 11 us for 32 numpy
        layers, 3 % of a 32 MiB block transfer)."""
        fmt, _, shape = _args(fmt, H2D, shape, tensors)
        ptrs, n, keep = self._engine(tensors, fmt, shape)
        return Engine(self, fmt, shape, ptrs, n, keep)

    def _chunk(self, chunk, name, shape, tokens, writable):
        b = self._arr(chunk, name, writable)
        if b.itemsize != shape.element_size and b.dtype != _U8:  # bytes (uint8) are always accepted
            raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{name}: element size {b.itemsize}, shape says "
                                                  f"{shape.element_size}")
        need = shape.nl * tokens * shape.kv_size * shape.nh * shape.hs * shape.element_size
        if b.nbytes != need:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: {b.nbytes} bytes, the geometry needs {need} "
                                                  f"({shape.kv_size} planes x nl {shape.nl} x {tokens} tokens x "
                                                  f"nh {shape.nh} x hs {shape.hs} x {shape.element_size} B)")
        return b

    def _index(self, idx, name, count=None):
        if isinstance(idx, (list, tuple, range)):  # a Python sequence of ints: as int64
            idx = _np.asarray(idx, dtype=_np.int64).reshape(-1)
        b = self._arr(idx, name, dtypes=_I64, ndim=1)
        if count is not None and b.shape[0] != count:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: {b.shape[0]} entries, expected {count}")
        return b

    def transfer_tokens(self, fmt, direction, shape, engine, chunk, slots, chunk_layout=0, skip_prefix=0,
                        stream=None):
        """Per-token multi-layer transfer (kvc_transfer_tokens). engine: the format's tensor(s);
        chunk: [planes, NL, T, row] (MLA [NL, T, HS]); slots: int64 [T] or a sequence, < 0 skipped.
        fmt: a Format (or its int or name); direction: a Direction, 0/1 or "H2D"/"D2H"."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        s = self._index(slots, "slots")
        t = s.shape[0]
        c = self._chunk(chunk, "chunk", shape, t, direction == D2H)
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        # positional: ctypes fills a Structure from keywords several times slower
        a = _abi.TokenTransfer(int(fmt), int(direction), shape, _C.addressof(ptrs), n, c.ptr, int(chunk_layout), t,
                               s.ptr, _abi.INDEX_INT64, t, skip_prefix, self._stream(stream, chunk))
        _check(_lib.kvc_transfer_tokens(self._handle(), _C.byref(a)))

    def transfer_blocks(self, fmt, direction, shape, engine, objects, block_ids, chunk_tokens, chunk_layout=0,
                        skip_prefix_blocks=0, stream=None):
        """Per-block transfer (kvc_transfer_blocks): objects are [planes, NL, chunk_tokens, row] each."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        ids = self._index(block_ids, "block_ids")
        objs = [self._chunk(o, f"objects[{i}]", shape, chunk_tokens, direction == D2H)
                for i, o in enumerate(objects)]
        optrs = _c_array(_C.c_void_p, [o.ptr for o in objs])
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        a = _abi.BlockTransfer(format=int(fmt), direction=int(direction), shape=shape, engine_ptrs=_C.addressof(ptrs),
                               num_engine_ptrs=n, objects=_C.addressof(optrs), num_objects=len(objs),
                               chunk_layout=int(chunk_layout), chunk_tokens=chunk_tokens, block_ids=ids.ptr,
                               block_id_type=_abi.INDEX_INT64, num_block_ids=ids.shape[0],
                               skip_prefix_blocks=skip_prefix_blocks, stream=self._stream(stream, *objects))
        _check(_lib.kvc_transfer_blocks(self._handle(), _C.byref(a)))

    def transfer_layer(self, fmt, direction, shape, engine, chunk, slots, chunk_layout=0, token_major=False,
                       stream=None):
        """One layer (kvc_transfer_layer): chunk [planes, T, row] or [T, planes, row] (token_major)."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        s = self._index(slots, "slots")
        t = s.shape[0]
        c = self._chunk(chunk, "chunk", shape, t, direction == D2H)
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        a = _abi.LayerTransfer(format=int(fmt), direction=int(direction), shape=shape, engine_ptrs=_C.addressof(ptrs),
                               num_engine_ptrs=n, chunk=c.ptr, chunk_layout=int(chunk_layout),
                               token_major=int(bool(token_major)), num_tokens=t, slots=s.ptr,
                               slot_type=_abi.INDEX_INT64, num_slots=t, stream=self._stream(stream, chunk))
        _check(_lib.kvc_transfer_layer(self._handle(), _C.byref(a)))

    def _flash(self, fn, key_value, key_cache, value_cache, slots, layer_idx, stream, d2h):
        kv = self._arr(key_value, "key_value", d2h, ndim=(3, 4))
        kc = self._arr(key_cache, "key_cache", not d2h, ndim=4)
        vc = self._arr(value_cache, "value_cache", not d2h, ndim=4, shape=kc.shape, dtypes=kc.dtype)
        if kv.dtype != kc.dtype:
            raise KvcoreError(_abi.KVC_ERR_DTYPE, f"key_value is {_DTYPE_NAMES[kv.dtype]}, key_cache "
                                                  f"{_DTYPE_NAMES[kc.dtype]}")
        nb, bs, nh, hs = kc.shape
        if kv.shape[0] != 2 or kv.size != 2 * kv.shape[1] * kv.shape[2] * nh * hs:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key_value: shape {list(kv.shape)}, expected "
                                                  f"[2, NL, T, {nh * hs}] (or [2, NL, T, {nh}, {hs}])")
        s = self._index(slots, "slot_mapping", kv.shape[2])
        shape = _abi.PageShape(kv_size=2, element_size=kc.itemsize, nl=kv.shape[1], nb=nb, bs=bs, nh=nh, hs=hs)
        a = _abi.FlashTransfer(shape=shape, key_value=kv.ptr, num_tokens=kv.shape[2], key_cache=kc.ptr,
                               value_cache=vc.ptr, slots=s.ptr, slot_type=_abi.INDEX_INT64, num_slots=kv.shape[2],
                               layer_idx=layer_idx, stream=self._stream(stream, key_value))
        _check(fn(self._handle(), _C.byref(a)))

    def load_and_reshape_flash(self, key_value, key_cache, value_cache, slots, layer_idx, stream=None):
        """D2H: key_value[:, layer_idx, t] <- key/value cache at slots[t] (slots < 0 skipped)."""
        self._flash(_lib.kvc_load_and_reshape_flash, key_value, key_cache, value_cache, slots, layer_idx, stream,
                    True)

    def reshape_and_cache_back_flash(self, key_value, key_cache, value_cache, slots, layer_idx, stream=None):
        """H2D: the inverse of load_and_reshape_flash."""
        self._flash(_lib.kvc_reshape_and_cache_back_flash, key_value, key_cache, value_cache, slots, layer_idx,
                    stream, False)

    # ------------------------------------------------------------ copies
    def memcpy(self, dst, src, nbytes=None):
        """Synchronous copy of nbytes (default: all of src) from array src into array dst."""
        d, s = self._arr(dst, "dst", True), self._arr(src, "src")
        n = s.nbytes if nbytes is None else _count(nbytes, "nbytes")
        if n > d.nbytes or n > s.nbytes:
            raise KvcoreError(_abi.KVC_ERR_NO_SPACE, f"copy of {n} bytes: dst has {d.nbytes}, src {s.nbytes}")
        _check(_lib.kvc_memcpy(self._handle(), _C.c_void_p(d.ptr), _C.c_void_p(s.ptr), n))

    def memcpy_async_ptr(self, dst, src, nbytes, direction, host_offset, host_alignment, stream=None):
        """LMCache's split copy on raw addresses (kvc_memcpy_async)."""
        _check(_lib.kvc_memcpy_async(self._handle(), _C.c_void_p(dst), _C.c_void_p(src), _count(nbytes, "nbytes"),
                                     int(direction), _count(host_offset, "host_buffer_offset"),
                                     _count(host_alignment, "host_buffer_alignment"), _C.c_void_p(stream or 0)))

    def batched_memcpy_ptr(self, dsts, srcs, sizes, stream=None):
        """count copies dsts[i] <- srcs[i] of sizes[i] bytes, on raw addresses."""
        if not len(dsts) == len(srcs) == len(sizes):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"batched_memcpy: {len(dsts)} destinations, {len(srcs)} "
                                                  f"sources, {len(sizes)} sizes")
        n = len(sizes)
        _check(_lib.kvc_batched_memcpy(self._handle(), _c_array(_C.c_void_p, [int(x) for x in dsts]),
                                       _c_array(_C.c_void_p, [int(x) for x in srcs]),
                                       _c_array(_C.c_size_t, [_count(x, f"sizes[{i}]") for i, x in enumerate(sizes)]), n, _C.c_void_p(stream or 0)))

    # ------------------------------------------------------------ CacheGen coder
    def cdf(self, symbols, num_bins, out=None):
        """Per-(layer, channel) CDF of uint8/int8 symbols [L, T, C]: uint16 [L, C, num_bins + 1]."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        o = _np.empty((l, c, num_bins + 1), _np.uint16) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U16, _abi.DTYPE_I16), shape=(l, c, num_bins + 1))
        a = _abi.CgCdfParams(symbols=s.ptr, cdf=ob.ptr, layers=l, tokens=t, channels=c, num_bins=num_bins)
        _check(_lib.kvc_cg_cdf(self._handle(), _C.byref(a)))
        return o

    def encode_streams(self, cdf, symbols, streams, lengths):
        """Arithmetic-code symbols [L, T, C] into streams [L, C, capacity] and lengths int32 [L, C].
        Returns the longest stream's length. KVC_ERR_NO_SPACE when one does not fit (lengths are set)."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        cb = self._arr(cdf, "cdf", dtypes=(_U16, _abi.DTYPE_I16), ndim=3, shape=(l, c, None))
        st = self._arr(streams, "streams", True, dtypes=(_U8, _abi.DTYPE_I8), ndim=3, shape=(l, c, None))
        ln = self._arr(lengths, "lengths", True, dtypes=_I32, shape=(l, c))
        needed = _C.c_size_t()
        a = _abi.CgEncodeParams(cdf=cb.ptr, symbols=s.ptr, streams=st.ptr, lengths=ln.ptr, layers=l, tokens=t, channels=c,
                            capacity=st.shape[2], num_bins=cb.shape[2] - 1, needed=_C.addressof(needed))
        _check(_lib.kvc_cg_encode(self._handle(), _C.byref(a)))
        return needed.value

    def encode(self, cdf, symbols, capacity=None):
        """Code symbols [L, T, C] under cdf [L, C, B+1]: returns (streams uint8 [L, C, capacity],
        lengths int32 [L, C]); capacity defaults to encode_bound(T)."""
        s = _buf(symbols, "symbols")
        if len(s.shape) != 3:
            _require(s, ndim=3)
        l, t, c = s.shape
        cap = encode_bound(t) if capacity is None else capacity
        streams, lengths = _np.zeros((l, c, cap), _np.uint8), _np.zeros((l, c), _np.int32)
        self.encode_streams(cdf, symbols, streams, lengths)
        return streams, lengths

    def decode(self, cdf, streams, lengths, tokens, out=None):
        """Decode per-stream buffers [L, C, capacity] into symbols uint8 [L, tokens, C]."""
        st = self._arr(streams, "streams", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, c, cap = st.shape
        cb = self._arr(cdf, "cdf", dtypes=(_U16, _abi.DTYPE_I16), ndim=3, shape=(l, c, None))
        ln = self._arr(lengths, "lengths", dtypes=_I32, shape=(l, c))
        o = _np.empty((l, tokens, c), _np.uint8) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U8, _abi.DTYPE_I8), shape=(l, tokens, c))
        a = _abi.CgDecodeParams(cdf=cb.ptr, streams=st.ptr, lengths=ln.ptr, symbols=ob.ptr, layers=l, tokens=tokens,
                            channels=c, capacity=cap, num_bins=cb.shape[2] - 1)
        _check(_lib.kvc_cg_decode(self._handle(), _C.byref(a)))
        return o

    def decode_packed(self, cdf, data, prefsum, tokens, out=None):
        """Decode one packed byte array (stream k at [prefsum[k-1], prefsum[k])) into uint8 [L, tokens, C]."""
        cb = self._arr(cdf, "cdf", dtypes=(_U16, _abi.DTYPE_I16), ndim=3)
        l, c, lp = cb.shape
        d = self._arr(data, "bytestreams", dtypes=(_U8, _abi.DTYPE_I8), ndim=1)
        p = self._arr(prefsum, "prefsum", dtypes=_I64, shape=(l, c))
        o = _np.empty((l, tokens, c), _np.uint8) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U8, _abi.DTYPE_I8), shape=(l, tokens, c))
        a = _abi.CgDecodePackedParams(cdf=cb.ptr, bytes=d.ptr, nbytes=d.shape[0], prefsum=p.ptr, symbols=ob.ptr,
                                  layers=l, tokens=tokens, channels=c, num_bins=lp - 1)
        _check(_lib.kvc_cg_decode_packed(self._handle(), _C.byref(a)))
        return o

    def _bins(self, bins, layers):
        b = _np.ascontiguousarray(bins, dtype=_np.uint32).reshape(-1)
        if b.shape[0] != layers:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"bins: {b.shape[0]} entries, expected {layers}")
        return b

    def quantise(self, values, bins):
        """values [L, T, C] (f16/bf16/f32) -> (symbols uint8 [L, T, C], scales float32 [L, T])."""
        v = self._arr(values, "values", dtypes=_FLOATS, ndim=3)
        l, t, c = v.shape
        b = self._bins(bins, l)
        sym, sc = _np.empty((l, t, c), _np.uint8), _np.empty((l, t), _np.float32)
        a = _abi.QuantParams(dtype=v.dtype, values=v.ptr, symbols=sym.ctypes.data, scales=sc.ctypes.data,
                           bins=b.ctypes.data, layers=l, tokens=t, channels=c)
        _check(_lib.kvc_quantise(self._handle(), _C.byref(a)))
        return sym, sc

    def dequantise(self, symbols, scales, bins, out):
        """symbols [L, T, C] and scales [L, T] -> out (f16/bf16/f32 [L, T, C]), returned."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        sc = self._arr(scales, "scales", dtypes=_F32, shape=(l, t))
        o = self._arr(out, "out", True, dtypes=_FLOATS, shape=(l, t, c))
        b = self._bins(bins, l)
        a = _abi.QuantParams(dtype=o.dtype, values=o.ptr, symbols=s.ptr, scales=sc.ptr,
                           bins=b.ctypes.data, layers=l, tokens=t, channels=c)
        _check(_lib.kvc_dequantise(self._handle(), _C.byref(a)))
        return out

    # ------------------------------------------------------------ CacheGen codec
    def codec_encode(self, kv, num_heads=None, head_size=None, mla=False, bins=None, window_tokens=None, *,
                     level=None, bins_k=None, bins_v=None, key_scaling=None):
        """Compress one chunk to a .kvc container (bytes). kv: [2, NL, T, NH*HS] or [2, NL, T, NH, HS]
        (mla: [NL, T, HS]); f16, bf16 or f32. num_heads/head_size default to a [.., NH, HS] input's.
        bins: every (plane, layer)'s bin count; or level, bins_k, bins_v, key_scaling as
        kvcore.compress (and `kvcore encode`) take them."""
        k = self._arr(kv, "kv", dtypes=_FLOATS, ndim=(3, 4, 5))
        p = _abi.CodecParams(dtype=k.dtype, layout=_abi.CODEC_MLA if mla else _abi.CODEC_KV_2LTD)
        if mla:
            _require(k, ndim=3)
            p.num_layers, p.num_tokens, p.head_size = k.shape
            p.num_heads = 1
        else:
            if k.shape[0] != 2 or len(k.shape) == 3:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"kv: shape {list(k.shape)}, expected [2, NL, T, D] or "
                                                      "[2, NL, T, NH, HS]")
            p.num_layers, p.num_tokens = k.shape[1], k.shape[2]
            d = k.shape[3] * (k.shape[4] if len(k.shape) == 5 else 1)
            if len(k.shape) == 5:
                num_heads, head_size = num_heads or k.shape[3], head_size or k.shape[4]
            elif num_heads is None and head_size is None:
                num_heads = 1  # [2, NL, T, C] without a hint: one nominal head, recorded as such
                p.field_mask |= _abi.CODEC_PARAM_HEADS_UNKNOWN
            p.num_heads = num_heads or d // head_size
            p.head_size = head_size or d // p.num_heads
            if p.num_heads * p.head_size != d:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"kv: row of {d} elements is not num_heads {p.num_heads} "
                                                      f"x head_size {p.head_size}")
        keep = None
        if level is not None or bins_k is not None or bins_v is not None or key_scaling is not None:
            if bins is not None:
                raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, "bins: give bins, or level / bins_k / bins_v, not both")
            keep = _codec.quality(p, level, bins_k, bins_v, key_scaling)
        elif bins is not None:
            keep = _np.ascontiguousarray(bins, dtype=_np.uint32)
            p.field_mask |= _abi.CODEC_PARAM_BINS
            p.bins = keep.ctypes.data
        if window_tokens is not None:
            p.field_mask |= _abi.CODEC_PARAM_WINDOW
            p.window_tokens = window_tokens
        out, n = _C.c_void_p(), _C.c_size_t()
        _check(_lib.kvc_codec_encode(self._handle(), _C.byref(p), _C.c_void_p(k.ptr), _C.byref(out), _C.byref(n)))
        try:
            return _C.string_at(out, n.value)
        finally:
            _lib.kvc_codec_free(out)
            del keep

    def codec_decode(self, data, out=None, torch=False, *, like=None):
        """Decompress a .kvc container into out, or into a new array of the shape it was encoded from
        ([2, NL, T, NH, HS] when the container records the head split, else [2, NL, T, C]; MLA
        [NL, T, HS]): numpy, or torch with torch=True or like=a tensor (kvcore.decompress). out may
        also be flat bytes (uint8) of the chunk's size."""
        mv, addr, info = _codec.inspected(data)
        if out is None or str(getattr(out, "dtype", "")) not in ("uint8", "torch.uint8"):
            return _codec.decode_one(mv, addr, info, out, "torch" if torch and like is None else like, self)
        o = self._arr(out, "out", True)
        if o.nbytes != info.original_bytes:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"out: {o.nbytes} bytes (uint8), the chunk {_codec.shape_of(info)} "
                                                  f"{_DTYPE_NAMES.get(info.dtype, '?')} is {info.original_bytes}")
        _check(_lib.kvc_codec_decode(self._handle(), addr, len(mv), _C.c_void_p(o.ptr), o.nbytes, None))
        return out

    def codec_encode_file(self, path, kv, **kw):
        """codec_encode, written to a .kvc file. Returns the container size."""
        data = self.codec_encode(kv, **kw)
        with _builtins.open(path, "wb") as f:
            f.write(data)
        return len(data)

    def codec_decode_file(self, path, out=None, torch=False, *, like=None):
        """codec_decode of a .kvc file's bytes."""
        with _builtins.open(path, "rb") as f:
            return self.codec_decode(f.read(), out=out, torch=torch, like=like)

    # ------------------------------------------------------------ RoPE
    def _keys(self, key, head_size, head_stride):
        k = _distinct(self._arr(key, "key", True, dtypes=_FLOATS, contiguous=False))
        if len(k.shape) < 2:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: shape {list(k.shape)}, expected [..., NKV, HS]")
        es = k.itemsize
        if any(d > 1 and st % es for d, st in zip(k.shape, k.strides)):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: byte strides {list(k.strides)} are not multiples of the "
                                                  f"element size {es}")
        nkv = k.shape[-2]
        hs = k.shape[-1] if head_size is None else _count(head_size, "head_size")
        if nkv == 1:  # a dimension of length 1 has no meaningful stride
            hstride = hs if head_stride is None else max(_count(head_stride, "head_stride"), hs)
        else:  # 0 would mean "head_size" to the C core, not the stride asked for
            hstride = k.strides[-2] // es if head_stride is None else _count(head_stride, "head_stride")
            if hstride == 0:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: head_stride 0 with {nkv} heads; heads that are "
                                                      "written need a positive stride")
        if k.strides[-1] != es and k.shape[-1] > 1:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, "key: the last dimension must be contiguous")
        n = 1
        for d in k.shape[:-2]:
            n *= d
        lead = [(d, st) for d, st in zip(k.shape[:-2], k.strides[:-2]) if d > 1]
        tstride = lead[-1][1] // es if lead else nkv * hstride
        for (d0, s0), (d1, s1) in zip(lead, lead[1:]):  # leading dimensions fold into tokens only when dense
            if s0 != s1 * d1:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key: dimensions before [NKV, HS] must fold into one "
                                                      f"(strides {list(k.strides)})")
        if n and nkv and hs:  # the kernel's last element: token n-1, head nkv-1, element hs-1
            _reach(k, 0, ((n - 1) * tstride + (nkv - 1) * hstride + hs) * es,
                   f"{n} token(s) x {nkv} head(s) of {hs} elements (head stride {hstride}, token stride {tstride})")
        return _abi.RopeKeys(data=k.ptr, dtype=k.dtype, num_tokens=n, num_heads=nkv, head_size=hs,
                             head_stride=hstride, token_stride=tstride), k

    def rope_k_fused(self, key, old_positions, new_positions, cos_sin_cache, is_neox=True, head_size=None,
                     head_stride=None, stream=None):
        """Re-rotate keys [..., NKV, HS] in place from old to new positions (int64 [N]) through a
        cos/sin table [max_position, rot_dim] (key dtype or float32)."""
        keys, k = self._keys(key, head_size, head_stride)
        old = self._index(old_positions, "old_positions", keys.num_tokens)
        new = self._index(new_positions, "new_positions", keys.num_tokens)
        tb = self._arr(cos_sin_cache, "cos_sin_cache", dtypes=_FLOATS, ndim=2)
        table = _abi.RopeTable(data=tb.ptr, dtype=tb.dtype, max_position=tb.shape[0], rot_dim=tb.shape[1])
        _check(_lib.kvc_rope_k_fused(self._handle(), self._stream(stream, key), _C.byref(keys), _C.c_void_p(old.ptr),
                                     _C.c_void_p(new.ptr), _C.byref(table), _rope_params(is_neox)))

    def rope_k_delta(self, key, old_positions, new_positions, rot_dim, base, is_neox=True, head_stride=None,
                     stream=None):
        """Table-free re-rotation by (new - old) positions."""
        keys, k = self._keys(key, None, head_stride)
        old = self._index(old_positions, "old_positions", keys.num_tokens)
        new = self._index(new_positions, "new_positions", keys.num_tokens)
        _check(_lib.kvc_rope_k_delta(self._handle(), self._stream(stream, key), _C.byref(keys), _C.c_void_p(old.ptr),
                                     _C.c_void_p(new.ptr), rot_dim, float(base), _rope_params(is_neox)))

    def rope_cache_build(self, max_position, rot_dim, base, dtype=_np.float32, out=None):
        """vLLM's cos/sin table [max_position, rot_dim] for `base`."""
        o = _np.empty((max_position, rot_dim), dtype) if out is None else out
        tb = self._arr(o, "out", True, dtypes=_FLOATS, ndim=2)
        table = _abi.RopeTable(data=tb.ptr, dtype=tb.dtype, max_position=tb.shape[0], rot_dim=tb.shape[1])
        _check(_lib.kvc_rope_cache_build(self._handle(), None, _C.byref(table), float(base)))
        return o

    # ------------------------------------------------------------ recorders
    def record_completion(self, kind, payload=b"", stream=None):
        p = bytes(payload)
        _check(_lib.kvc_record_completion(self._handle(), _C.c_void_p(stream or 0), _cstr(kind, "kind"), p or None,
                                          len(p)))

    def drain_completions(self):
        """Every completion recorded so far, in order: [(kind: str, payload: bytes)]."""
        recs, n = _C.POINTER(_abi.CompletionRecord)(), _C.c_size_t()
        _check(_lib.kvc_drain_completions(self._handle(), _C.byref(recs), _C.byref(n)))
        try:
            return [(recs[i].kind.decode(), _C.string_at(recs[i].payload, recs[i].payload_len)
                     if recs[i].payload_len else b"") for i in range(n.value)]
        finally:
            _lib.kvc_completion_records_free(recs, n.value)

    def record_event(self, name, session_id, str_meta=None, int_meta=None, stream=None):
        sm = list((str_meta or {}).items())
        im = list((int_meta or {}).items())
        sarr = (_abi.StrMeta * len(sm))(*[_abi.StrMeta(_cstr(str(k), "str_meta key"), _cstr(str(v), "str_meta value")) for k, v in sm])
        for k, v in im:
            if not isinstance(v, int):
                raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"int_meta[{k!r}]: {type(v).__name__}, expected int")
        iarr = (_abi.IntMeta * len(im))(*[_abi.IntMeta(_cstr(str(k), "int_meta key"), v) for k, v in im])
        _check(_lib.kvc_record_event(self._handle(), _C.c_void_p(stream or 0), _cstr(name, "name"), _cstr(session_id, "session_id"),
                                     sarr if sm else None, len(sm), iarr if im else None, len(im)))

    def drain_events(self):
        """[(name, session_id, timestamp, {str: str}, {str: int})] in record order."""
        recs, n = _C.POINTER(_abi.EventRecord)(), _C.c_size_t()
        _check(_lib.kvc_drain_events(self._handle(), _C.byref(recs), _C.byref(n)))
        try:
            out = []
            for i in range(n.value):
                r = recs[i]
                out.append((r.name.decode(), r.session_id.decode(), r.timestamp,
                            {r.str_meta[j].key.decode(): r.str_meta[j].value.decode() for j in range(r.num_str_meta)},
                            {r.int_meta[j].key.decode(): r.int_meta[j].value for j in range(r.num_int_meta)}))
            return out
        finally:
            _lib.kvc_event_records_free(recs, n.value)

    # ------------------------------------------------------------ host memory
    def alloc_host(self, size, pinned=False, numa_node=None, near_pci=None, shared_name=None, hugepage=False,
                   strict=False, touch=True):
        """Host memory (kvc_mem_alloc): plain, pinned, NUMA-bound (numa_node, or "local", or the node
        nearest PCI device near_pci), POSIX shared (shared_name "/name") and/or 2 MiB pages. Returns a
        HostBuffer; its memory lives as long as the buffer or any array view of it."""
        p = _abi.MemParams(field_mask=_abi.MEM_PARAM_KIND | _abi.MEM_PARAM_TOUCH | _abi.MEM_PARAM_POLICY,
                           touch=int(bool(touch)),
                           policy=_abi.MEM_POLICY_STRICT if strict else _abi.MEM_POLICY_PREFERRED)
        kind = _abi.MEM_PINNED if pinned else 0
        if hugepage:
            kind |= _abi.MEM_HUGEPAGE
        if numa_node is not None or near_pci is not None:
            kind |= _abi.MEM_NUMA
            p.field_mask |= _abi.MEM_PARAM_TARGET
            if near_pci is not None:
                p.target, p.pci_bus_id = _abi.MEM_TARGET_PCI, _cstr(near_pci, "near_pci")
            elif numa_node == "local":
                p.target = _abi.MEM_TARGET_LOCAL
            else:
                p.target, p.node = _abi.MEM_TARGET_NODE, int(numa_node)
        if shared_name is not None:
            kind |= _abi.MEM_SHARED
            p.field_mask |= _abi.MEM_PARAM_NAME
            p.name = _cstr(shared_name, "shared_name")
        p.kind = kind
        ptr, rep = _C.c_void_p(), _abi.MemReport()
        _check(_lib.kvc_mem_alloc(self._handle(), _count(size, "size"), _C.byref(p), _C.byref(ptr), _C.byref(rep)))
        return HostBuffer(self, ptr.value, size, _report_dict(rep))

    def alloc_device(self, size):
        """Device memory of this context's backend (kvc_device_alloc) as a DeviceBuffer."""
        ptr = _C.c_void_p()
        _check(_lib.kvc_device_alloc(self._handle(), size, _C.byref(ptr)))
        return DeviceBuffer(self, ptr.value, size)

    def attach_shared(self, name, pinned=False):
        """Map a shared segment created by alloc_host(shared_name=...) (any process)."""
        ptr, size, rep = _C.c_void_p(), _C.c_size_t(), _abi.MemReport()
        _check(_lib.kvc_mem_attach(self._handle(), _cstr(name, "name"), _abi.MEM_PINNED if pinned else 0,
                                   _C.byref(ptr), _C.byref(size), _C.byref(rep)))
        return HostBuffer(self, ptr.value, size.value, _report_dict(rep))

    def map_file(self, path, size, offset=0, pinned=False):
        """Map size bytes at offset of a device's memory file (a PCIe BAR's sysfs resource file,
        kvc_mem_map_file) as a HostBuffer; pinned registers it with the backend as I/O memory."""
        ptr, rep = _C.c_void_p(), _abi.MemReport()
        _check(_lib.kvc_mem_map_file(self._handle(), _cstr(path, "path"), _count(size, "size"), _count(offset, "offset"),
                                     _abi.MEM_PINNED if pinned else 0, _C.byref(ptr), _C.byref(rep)))
        return HostBuffer(self, ptr.value, size, _report_dict(rep))

    def live_allocations(self):
        return int(_lib.kvc_mem_live_count(self._handle()))

    def pci_bus_id(self, device=0):
        b = _C.create_string_buffer(32)
        _check(_lib.kvc_device_pci_bus_id(self._handle(), device, b, len(b)))
        return b.value.decode()


def _fmt(fmt):
    """A Format for a known format (int or name); other ints are passed on for the C call to name."""
    if isinstance(fmt, str) or (isinstance(fmt, int) and fmt in _FORMAT_VALUES):
        return Format.coerce(fmt, "fmt")
    return fmt


_FORMAT_VALUES = frozenset(int(f) for f in Format)


def _first_tensor(engine):
    while isinstance(engine, (list, tuple)) and engine:
        engine = engine[0]
    return engine


def _args(fmt, direction, shape, engine):
    """Transfer arguments as kvcore takes them: the format and direction as enums (names accepted),
    and a PageShape whose element_size 0 is taken from the engine tensors' dtype."""
    if not isinstance(shape, _abi.PageShape):
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"shape: {type(shape).__name__}, expected kvcore.PageShape")
    if shape.element_size == 0:
        es = _abi.PageShape.from_buffer_copy(engine._shape).element_size if type(engine) is Engine else \
            _buf(_first_tensor(engine), "engine[0]").itemsize
        shape = _abi.PageShape.from_buffer_copy(shape)
        shape.element_size = es
    return _fmt(fmt), Direction.coerce(direction, "direction"), shape


def _rope_params(is_neox):
    return _C.byref(_abi.RopeParams(_abi.ROPE_PARAM_STYLE, NEOX if is_neox else GPTJ))


def _set_planes(shape, planes, slots):
    """Format 17: num_planes and plane_bytes from one layer's plane tensors of `slots` token rows each."""
    if not 1 <= len(planes) <= _abi.MAX_PLANES:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{len(planes)} planes per layer: format 17 takes 1.."
                                              f"{_abi.MAX_PLANES}")
    shape.num_planes = len(planes)
    for i, b in enumerate(planes):
        shape.plane_bytes[i] = b.nbytes // slots if slots > 0 else 0


_U8_DTYPE = _np.dtype(_np.uint8)


def _fast_engine_ptrs(tensors, element_size, need, cpu_only):
    """The pointer table for the usual engine list (all numpy arrays, or all torch tensors: writable,
    C-contiguous, of a kvcore type, with enough bytes) at 0.3-0.4 us a tensor instead of the general
    path's 1.5 us (numpy) or 4 us (torch): a 32-layer list costs 10-13 us, not 48-127 (8-25 % of a
    32 MiB block transfer). None when any tensor needs the general path, which then also reports
    what is wrong."""
    if not tensors:
        return None
    ptrs = (_C.c_void_p * len(tensors))()
    need = max(need, 1)  # from_buffer refuses an empty array
    if type(tensors[0]) is _np.ndarray:
        for i, t in enumerate(tensors):
            if type(t) is not _np.ndarray:
                return None
            f, dt = t.flags, t.dtype
            if not (f.c_contiguous and f.writeable) or t.nbytes < need or \
                    (t.itemsize != element_size and dt is not _U8_DTYPE) or dt not in _NP_KVC_DTYPES:
                return None
            ptrs[i] = _C.addressof(_C.c_char.from_buffer(t))  # the buffer protocol: no dict built
        return ptrs
    tt = type(tensors[0])
    if not tt.__module__.startswith("torch") or not hasattr(tt, "data_ptr"):
        return None
    table = _torch_dtypes()
    for i, t in enumerate(tensors):
        if type(t) is not tt or (cpu_only and not t.is_cpu) or not t.is_contiguous():
            return None
        es, code = t.element_size(), table.get(t.dtype)
        if code is None or (es != element_size and code != _abi.DTYPE_U8) or t.numel() * es < need:
            return None
        ptrs[i] = t.data_ptr()
    return ptrs


def _engine_bytes(fmt, shape):
    """Bytes one engine tensor of this format and geometry needs (the C core only sees pointers)."""
    tight = shape.bs * shape.nh * shape.hs
    blk = shape.block_stride_elems or tight
    planes = 1 if fmt in _KV_LIST or fmt == 16 else shape.kv_size
    per_plane = ((shape.nb - 1) * blk + tight) if shape.nb > 0 else 0
    n = planes * per_plane
    if fmt in _CROSS:
        n = shape.nl * planes * shape.nb * tight
    return n * shape.element_size
