# SPDX-License-Identifier: BSD-3-Clause
"""The CacheGen codec: kvcore.compress / decompress / open (.kvc, .kvcs), the coder, KV-cache files.

One-line KV compression, as python-zstandard: kvcore.compress(kv) -> bytes, kvcore.decompress(data),
and kvcore.open(path, "wb"/"rb") for .kvcs streams written and read chunk by chunk. Shapes and
types round-trip: the container records the layout, the dtype and (for a 5-D input) the head
split, so [2, NL, T, NH, HS] comes back as [2, NL, T, NH, HS], [2, NL, T, C] as [2, NL, T, C] and
MLA [NL, T, HS] as [NL, T, HS], in the same dtype. decompress returns numpy unless `out=` or
`like=` says otherwise (like=tensor: a torch tensor on that tensor's device)."""
import builtins as _builtins
import ctypes as _C
import os as _os
import threading as _threading
from typing import Any, Dict, IO, Iterator, List, Literal, Optional, overload, Tuple, Union

import numpy as _np

from . import _abi
from ._array import buf as _buf, cstr as _cstr, DTYPE_NAMES as _DTYPE_NAMES, require as _require
from ._codec_ops import _bytes_addr, _inspect, Bins, decode_one, inspected, quality
from ._lib import check as _check, lib as _lib
from .context import Context
from .enums import DType, KeyScaling
from .errors import KvcoreError, type_error


__all__ = ["compress", "decompress", "open", "StreamWriter", "StreamReader", "default_context"]

_HEADER = _abi.CONTAINER_HEADER_BYTES
_default = None
_default_lock = _threading.Lock()


def default_context() -> Context:
    """The shared CPU Context that compress, decompress and open use when none is given (created on
    first use; the codec works on host memory)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context(backend="cpu")
        return _default


# ---------------------------------------------------------------- arrays in and out
def _host(kv: Any, name: str) -> Tuple["_np.ndarray[Any, Any]", DType]:
    """A C-contiguous host numpy array of kv's bytes and its kvcore dtype (torch bfloat16 stays
    bfloat16; a GPU tensor is copied to the host)."""
    if type(kv).__module__.startswith("torch") and hasattr(kv, "element_size"):
        import torch
        t = kv.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        dt = DType.of(t.dtype)
        if dt == DType.BF16:
            return t.view(torch.int16).numpy().view(_np.uint16), dt
        return t.numpy(), dt
    if not hasattr(kv, "__array_interface__") and not hasattr(kv, "__array__"):
        raise type_error(f"{name}: expected a numpy array or torch tensor, got {type(kv).__name__}")
    a = _np.ascontiguousarray(kv)
    try:
        dt = DType.of(a.dtype)
    except KvcoreError:
        dt = DType.I8  # an unknown dtype: refused below with the allowed ones named
    if a.dtype.str == "<V2" or str(a.dtype) == "bfloat16":  # ml_dtypes.bfloat16 (numpy.save writes '<V2')
        return a.view(_np.uint16), DType.BF16
    if dt not in (DType.F16, DType.F32):
        raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{name}: dtype {a.dtype}; the codec takes float16, bfloat16 "
                                              "(torch or ml_dtypes) or float32")
    return a, dt






# ---------------------------------------------------------------- compress / decompress


def compress(kv: Any, level: int = 0, *, bins_k: Bins = None, bins_v: Bins = None,
             key_scaling: Union[KeyScaling, str, int] = "token", window_tokens: Optional[int] = None,
             bits: Optional[float] = None, context: Any = None, coder: str = "ac") -> bytes:
    """Compress one KV chunk to a .kvc container (bytes), as `kvcore encode` does.

    kv: [2, NL, T, NH, HS] or [2, NL, T, C] (K and V planes) or MLA [NL, T, HS]; float16, bfloat16
    or float32; numpy, torch (any device: GPU tensors are copied to the host) or any array. level:
    0 (LMCache's default profile) .. 3 (smaller; docs/CACHEGEN.md); bins_k / bins_v: quantiser bins
    (one even count in [4, 64] for every layer, or one per layer) overriding the level's; key_scaling:
    "token" (LMCache-readable) or "channel"; bits: a size target in bits per element (the whole
    container), the bins chosen per layer as `kvcore encode --bits` does (not with level, bins_k,
    bins_v or per-channel keys); coder: "ac" (LMCache's arithmetic coder, LMCache-readable) or "rans"
    (kvcore's interleaved rANS, container format 1.4: the same decoded values, faster, not
    LMCache-readable; docs/CACHEGEN.md)."""
    a, dt = _host(kv, "kv")
    return _encode(a, dt, level, bins_k, bins_v, key_scaling, window_tokens, context, bits, coder)


def _encode(a: "_np.ndarray[Any, Any]", dt: DType, level: int = 0, bins_k: Bins = None, bins_v: Bins = None,
            key_scaling: Union[KeyScaling, str, int] = "token", window_tokens: Optional[int] = None,
            context: Any = None, bits: Optional[float] = None, coder: str = "ac") -> bytes:
    if coder not in ("ac", "rans"):
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"coder {coder!r}: expected \"ac\" or \"rans\"")
    mla = a.ndim == 3
    if a.ndim not in (3, 4, 5) or (not mla and a.shape[0] != 2):
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"kv: shape {tuple(a.shape)}, expected (2, NL, T, NH, HS), "
                                              "(2, NL, T, C) or MLA (NL, T, HS)")
    p = _abi.CodecParams(dtype=int(dt), layout=_abi.CODEC_MLA if mla else _abi.CODEC_KV_2LTD)
    if mla:
        p.num_layers, p.num_tokens, p.head_size = a.shape
        p.num_heads = 1
    else:
        p.num_layers, p.num_tokens = a.shape[1], a.shape[2]
        p.num_heads, p.head_size = (a.shape[3], a.shape[4]) if a.ndim == 5 else (1, a.shape[3])
        if a.ndim == 4:
            p.field_mask |= _abi.CODEC_PARAM_HEADS_UNKNOWN
    if bits is None:
        bins = quality(p, level, bins_k, bins_v, key_scaling)  # p points into it until the call returns
    else:
        if level or bins_k is not None or bins_v is not None:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, "bits: a size target chooses the bins; give bits, or "
                                                        "level / bins_k / bins_v, not both")
        if isinstance(bits, bool) or not isinstance(bits, (int, float, _np.integer, _np.floating)):
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"bits: {type(bits).__name__}, expected bits per element")
        bins = _np.zeros(0, _np.uint32)
        p.field_mask |= _abi.CODEC_PARAM_BITS
        p.bits = float(bits)
        ks = KeyScaling.coerce(key_scaling, "key_scaling")
        if ks != KeyScaling.TOKEN:
            p.field_mask |= _abi.CODEC_PARAM_KEY_SCALING
            p.key_scaling = int(ks)
    if window_tokens is not None:
        p.field_mask |= _abi.CODEC_PARAM_WINDOW
        p.window_tokens = window_tokens
    if coder == "rans":
        p.field_mask |= _abi.CODEC_PARAM_CODER
        p.coder = _abi.CODER_RANS
    ctx = context if context is not None else default_context()
    out, n = _C.c_void_p(), _C.c_size_t()
    _check(_lib.kvc_codec_encode(ctx._handle(), _C.byref(p), _C.c_void_p(a.ctypes.data if a.size else 0),
                                 _C.byref(out), _C.byref(n)))
    try:
        return _C.string_at(out, n.value)
    finally:
        _lib.kvc_codec_free(out)
        del bins








def _probe(data: Any) -> Tuple[int, Any]:
    """(status, ContainerInfo) of kvc_container_probe on a bytes-like; the status is not raised."""
    mv = _bytes_view(data)
    info = _abi.ContainerInfo()
    return _lib.kvc_container_probe(_addr(mv), len(mv), _C.byref(info)), info


_KINDS = {_abi.CONTAINER_NONE: "none", _abi.CONTAINER_INVALID: "invalid", _abi.CONTAINER_PART: "part",
          _abi.CONTAINER_ONE: "one", _abi.CONTAINER_STREAM: "stream"}


def probe(data: Any) -> Dict[str, Any]:
    """What a bytes-like's first bytes are (kvc_container_probe: the header and, when it is all
    there, META; at most CONTAINER_PROBE_BYTES read) as a dict: "kind" ("one" container, a "stream"
    of them or one with trailing bytes, "part" of one, whose "container_bytes" say how long it is),
    the version, flags and sizes, and with "meta" the chunk's shape. Raises KvcoreError as the call
    fails: not a container, a header cut short or damaged, another version."""
    st, info = _probe(data)
    _check(st)
    d = {name: getattr(info, name) for name, _ in _abi.ContainerInfo._fields_}
    d["kind"] = _KINDS[info.kind]
    d["coder"] = "rans" if info.coder == _abi.CODER_RANS else "ac"
    d["key_scaling"] = "channel" if info.key_scaling == _abi.CODEC_SCALE_CHANNEL else "token"
    d["meta"] = bool(info.meta)
    d["dtype"] = _DTYPE_NAMES.get(info.dtype, "invalid") if info.meta else None
    d["layout"] = ("mla" if info.layout == _abi.CODEC_MLA else "kv_2ltd") if info.meta else None
    return d






def decompress(data: Any, out: Any = None, *, like: Any = None, context: Any = None) -> Any:
    """Decompress a .kvc container (bytes-like) to its chunk, in the shape and dtype it was
    compressed from. out: an array (numpy or torch, any device) to fill and return, of that shape
    (or with the head split flattened) and dtype. like: "numpy" (the default), "torch", or an
    array/tensor whose type and device the result takes. bfloat16 without torch comes back as
    ml_dtypes.bfloat16 when ml_dtypes is installed, else as its uint16 bits."""
    return decode_one(*inspected(data), out, like, context if context is not None else default_context())




# ---------------------------------------------------------------- streams (.kvcs)
def _read_exact(f: IO[bytes], n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


class StreamReader:
    """A .kvcs stream opened for reading (kvcore.open(path, "rb")): iterate for one decoded chunk at
    a time (in token order), or read() the whole cache. Only one chunk's container and decoded
    array are held at a time while iterating."""

    def __init__(self, f: IO[bytes], close: bool, like: Any, context: Any) -> None:
        self._f, self._close, self._like = f, close, like
        self._ctx = context if context is not None else default_context()
        self._first: Any = None
        self.offset = 0  # byte offset of the next container
        self.num_tokens = 0  # tokens read so far

    def __enter__(self) -> "StreamReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (when open() opened it)."""
        if self._close and not self._f.closed:
            self._f.close()

    def _next_container(self) -> Optional[bytes]:
        head = _read_exact(self._f, _HEADER)
        if not head:
            return None
        at = self.offset
        st, info = _probe(head)
        if st == _abi.KVC_ERR_VERSION:  # a newer format says so, not "bad magic or CRC"
            _check(st)
        if st != 0:
            raise KvcoreError(_abi.KVC_ERR_CORRUPT, f"stream: no valid container header at byte {at} "
                                                    f"({'truncated' if len(head) < _HEADER else 'bad magic or CRC'})")
        total = info.container_bytes
        rest = _read_exact(self._f, total - _HEADER)
        if len(rest) != total - _HEADER:
            raise KvcoreError(_abi.KVC_ERR_CORRUPT, f"stream: the container at byte {at} is truncated "
                                                    f"({_HEADER + len(rest)} of {total} bytes)")
        self.offset += total
        return head + rest

    def __iter__(self) -> Iterator[Any]:
        while True:
            data = self._next_container()
            if data is None:
                return
            mv, addr = _bytes_addr(data)
            info = _inspect(mv, addr)
            key = (info.dtype, info.layout, info.num_layers, info.num_heads, info.head_size, info.heads_known)
            if self._first is None:
                self._first = key
            elif key != self._first:
                raise KvcoreError(_abi.KVC_ERR_CORRUPT, f"stream: the chunk at byte {self.offset - len(data)} "
                                                        "differs from the first in dtype, layout, layers or heads")
            self.num_tokens += info.num_tokens
            yield decode_one(mv, addr, info, None, self._like, self._ctx)

    def read(self) -> Any:
        """Every remaining chunk, concatenated along the token axis (axis 2; MLA: axis 1)."""
        chunks = list(self)
        if not chunks:
            raise KvcoreError(_abi.KVC_ERR_CORRUPT, "stream: empty (no container)")
        axis = 1 if chunks[0].ndim == 3 else 2
        if type(chunks[0]).__module__.startswith("torch"):
            import torch
            return torch.cat(chunks, dim=axis)
        return _np.concatenate(chunks, axis=axis)


class StreamWriter:
    """A .kvcs stream opened for writing (kvcore.open(path, "wb", chunk_tokens=N)): write() takes
    tokens in order ([2, NL, t, ...] or MLA [NL, t, HS], any t) and writes one container per
    chunk_tokens tokens as soon as it is complete; close() writes the last, shorter chunk. Each
    container is what compress() makes of its tokens, so the file is byte-identical to
    `kvcore encode --chunk-tokens N` of the whole cache at the same options."""

    def __init__(self, f: IO[bytes], close: bool, chunk_tokens: int, kw: Any) -> None:
        if not isinstance(chunk_tokens, int) or chunk_tokens <= 0:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"chunk_tokens={chunk_tokens!r}: expected a positive int")
        self._f, self._close, self.chunk_tokens, self._kw = f, close, chunk_tokens, kw
        self._pending: List["_np.ndarray[Any, Any]"] = []
        self._pending_tokens = 0
        self._sig: Any = None
        self.num_tokens = 0  # tokens written to the file
        self.bytes_written = 0

    def __enter__(self) -> "StreamWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        elif self._close:
            self._f.close()

    def write(self, kv: Any) -> int:
        """Append tokens; returns how many were taken (all of them)."""
        if self._f.closed:
            raise KvcoreError(_abi.KVC_ERR_STATE, "write to a closed kvcore stream")
        a, dt = _host(kv, "kv")
        axis = 1 if a.ndim == 3 else 2
        sig = (a.shape[:axis] + a.shape[axis + 1:], dt)
        if self._sig is None:
            self._sig = sig
        elif sig != self._sig:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"kv: shape {tuple(a.shape)} {dt.name}; this stream's chunks are "
                                                  f"{self._describe()}")
        self._pending.append(a)
        self._pending_tokens += a.shape[axis]
        while self._pending_tokens >= self.chunk_tokens:
            self._emit(self.chunk_tokens)
        return int(a.shape[axis])

    def _describe(self) -> str:
        dims, dt = self._sig
        d = list(dims)
        d.insert(1 if len(d) == 2 else 2, "T")
        return f"({', '.join(map(str, d))}) {dt.name}"

    def _emit(self, n: int) -> None:
        axis = 1 if self._pending[0].ndim == 3 else 2
        whole = self._pending[0] if len(self._pending) == 1 else _np.concatenate(self._pending, axis=axis)
        chunk, rest = _np.split(whole, [n], axis=axis)
        self._pending = [rest] if rest.shape[axis] else []
        self._pending_tokens -= n
        data = _encode(_np.ascontiguousarray(chunk), self._sig[1], **self._kw)
        self._f.write(data)
        self.num_tokens += n
        self.bytes_written += len(data)

    def close(self) -> None:
        """Write the last chunk (fewer tokens) and close the file (when open() opened it)."""
        if self._f.closed:
            return
        try:
            if self._pending_tokens:
                self._emit(self._pending_tokens)
            self._f.flush()
        finally:
            if self._close:
                self._f.close()


FileArg = Union[str, bytes, "_os.PathLike[str]", IO[bytes]]


@overload
def open(file: FileArg, mode: Literal["rb", "r"] = "rb", *, chunk_tokens: int = 256, level: int = 0,
         bins_k: Bins = None, bins_v: Bins = None, key_scaling: Union[KeyScaling, str, int] = "token",
         bits: Optional[float] = None, like: Any = None, context: Any = None, coder: str = "ac") -> StreamReader: ...


@overload
def open(file: FileArg, mode: Literal["wb", "w"], *, chunk_tokens: int = 256, level: int = 0, bins_k: Bins = None,
         bins_v: Bins = None, key_scaling: Union[KeyScaling, str, int] = "token", bits: Optional[float] = None,
         like: Any = None, context: Any = None, coder: str = "ac") -> StreamWriter: ...


def open(file: FileArg, mode: str = "rb", *,
         chunk_tokens: int = 256, level: int = 0, bins_k: Bins = None, bins_v: Bins = None,
         key_scaling: Union[KeyScaling, str, int] = "token", bits: Optional[float] = None, like: Any = None,
         context: Any = None, coder: str = "ac") -> Union[StreamReader, StreamWriter]:
    """Open a .kvcs stream (containers back to back, one per chunk_tokens tokens: docs/FORMAT.md) for
    writing ("wb": a StreamWriter, with compress's options) or reading ("rb": a StreamReader that
    yields chunks; like as decompress). file: a path or a binary file object."""
    if mode not in ("rb", "wb", "r", "w"):
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"mode {mode!r}: expected \"rb\" or \"wb\"")
    own = not hasattr(file, "read") and not hasattr(file, "write")
    f: IO[bytes] = _builtins.open(file, mode[0] + "b") if own else file  # type: ignore[arg-type, assignment]
    if mode[0] == "r":
        return StreamReader(f, own, like, context)
    try:
        return StreamWriter(f, own, chunk_tokens, dict(level=level, bins_k=bins_k, bins_v=bins_v,
                                                       key_scaling=key_scaling, context=context, bits=bits,
                                                       coder=coder))
    except BaseException:
        if own:
            f.close()
        raise






def default_bins(num_layers: int) -> Any:
    """LMCache's quantiser bins for a model of num_layers layers: uint32 [2 * num_layers]."""
    out = _np.empty(2 * num_layers, _np.uint32)
    _check(_lib.kvc_cg_default_bins(num_layers, out.ctypes.data))
    return out


def inspect(data: Any) -> Dict[str, Any]:
    """Validate a .kvc container (bytes-like) and describe it as a dict."""
    mv = _bytes_view(data)
    info = _abi.CodecInfo()
    _check(_lib.kvc_codec_inspect(_addr(mv), len(mv), _C.byref(info)))
    return _info_dict(info)


def _info_dict(info: Any) -> Dict[str, Any]:
    d = {name: getattr(info, name) for name, _ in _abi.CodecInfo._fields_}
    d["dtype"] = _DTYPE_NAMES.get(info.dtype, "invalid")
    d["layout"] = "mla" if info.layout == _abi.CODEC_MLA else "kv_2ltd"
    d["coder"] = "rans" if info.coder == _abi.CODER_RANS else "ac"
    return d


_TYPESTR = {_abi.DTYPE_F16: "<f2", _abi.DTYPE_BF16: "<u2", _abi.DTYPE_F32: "<f4", _abi.DTYPE_F64: "<f8",
            _abi.DTYPE_U8: "|u1", _abi.DTYPE_I8: "|i1", _abi.DTYPE_I16: "<i2", _abi.DTYPE_I32: "<i4",
            _abi.DTYPE_I64: "<i8", _abi.DTYPE_U16: "<u2", _abi.DTYPE_U32: "<u4", _abi.DTYPE_U64: "<u8",
            _abi.DTYPE_BOOL: "|b1", _abi.DTYPE_F8_E4M3: "|u1", _abi.DTYPE_F8_E5M2: "|u1"}


class _OwnedTensor:
    """A kvc_tensor_t that owns its data, as the base of the numpy array over it: freed
    (kvc_tensor_free) when the last view is gone."""

    def __init__(self, t: Any) -> None:
        self._t = t
        self.__array_interface__ = {"shape": tuple(t.shape[i] for i in range(t.ndim)), "typestr": _TYPESTR[t.dtype],
                                    "data": (t.data or 0, False), "version": 3}

    def __del__(self) -> None:
        _lib.kvc_tensor_free(_C.byref(self._t))


def _kvcache_params(num_heads: Optional[int], head_size: Optional[int], fmt: Optional[str] = None,
                    split: Optional[bool] = None) -> Any:
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


def load_kvcache(path: Union[str, "_os.PathLike[str]"], num_heads: Optional[int] = None,
                 head_size: Optional[int] = None) -> Tuple[Any, Dict[str, Any]]:
    """Read a KV cache file (.npy, or .safetensors: fused "kv", or "k"/"v") into a numpy array
    [2, NL, T, D] (bfloat16 as uint16 bits) and its dims {num_layers, num_tokens, num_heads,
    head_size, hidden}; NH/HS are 0 when the file does not say and no hint is given."""
    t, dims = _abi.Tensor(), _abi.KvcacheDims()
    _check(_lib.kvc_kvcache_load(_cstr(path, "path"), _C.byref(_kvcache_params(num_heads, head_size)), _C.byref(t),
                                 _C.byref(dims)))
    dtype = _DTYPE_NAMES.get(t.dtype, "?")
    return _np.asarray(_OwnedTensor(t)), dict({n: getattr(dims, n) for n, _ in _abi.KvcacheDims._fields_}, dtype=dtype)


def save_kvcache(path: Union[str, "_os.PathLike[str]"], kv: Any, num_heads: Optional[int] = None,
                 head_size: Optional[int] = None, split: bool = False, format: Optional[str] = None) -> None:
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
    params = _kvcache_params(num_heads, head_size, format, split)
    _check(_lib.kvc_kvcache_save(_cstr(path, "path"), _C.byref(t), _C.byref(params)))


def _bytes_view(data: Any) -> memoryview:
    mv = memoryview(data)
    if not mv.c_contiguous:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, "container bytes must be contiguous")
    return mv.cast("B")


def _addr(mv: memoryview) -> Optional[int]:
    """Address of a contiguous memoryview's first byte (read-only views included)."""
    if len(mv) == 0:
        return None
    return _np.frombuffer(mv, _np.uint8).ctypes.data


