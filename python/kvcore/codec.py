# SPDX-License-Identifier: BSD-3-Clause
"""One-line KV compression, as python-zstandard: kvcore.compress(kv) -> bytes, kvcore.decompress(data),
and kvcore.open(path, "wb"/"rb") for .kvcs streams written and read chunk by chunk.

Shapes and types round-trip: the container records the layout, the dtype and (for a 5-D input) the
head split, so [2, NL, T, NH, HS] comes back as [2, NL, T, NH, HS], [2, NL, T, C] as
[2, NL, T, C] and MLA [NL, T, HS] as [NL, T, HS], in the same dtype. decompress returns numpy
unless `out=` or `like=` says otherwise (like=tensor: a torch tensor on that tensor's device)."""
import builtins as _builtins
import ctypes as _C
import os as _os
import struct as _struct
import threading as _threading
import zlib as _zlib
from typing import IO, Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _abi
from ._lib import check as _check, lib as _lib
from .enums import DType, KeyScaling
from .errors import KvcoreError

__all__ = ["compress", "decompress", "open", "StreamWriter", "StreamReader", "default_context"]

Bins = Union[int, Sequence[int], None]
_MAGIC = b"\x89KVC\r\n\x1a\n"
_HEADER = 48
_default = None
_NAMES = {DType.F16: "float16", DType.BF16: "bfloat16", DType.F32: "float32"}
_default_lock = _threading.Lock()


def default_context() -> Any:
    """The shared CPU Context that compress, decompress and open use when none is given (created on
    first use; the codec works on host memory)."""
    global _default
    with _default_lock:
        if _default is None:
            from . import Context
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
        raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{name}: expected a numpy array or torch tensor, got "
                                              f"{type(kv).__name__}")
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


def shape_of(info: Any) -> Tuple[int, ...]:
    if info.layout == _abi.CODEC_MLA:
        return (info.num_layers, info.num_tokens, info.head_size)
    if info.heads_known:
        return (2, info.num_layers, info.num_tokens, info.num_heads, info.head_size)
    return (2, info.num_layers, info.num_tokens, info.num_heads * info.head_size)


def _wrap(a: "_np.ndarray[Any, Any]", dt: DType, like: Any) -> Any:
    """A decoded host array as the caller's type: numpy, or torch (on like's device)."""
    if like is not None and (like == "torch" if isinstance(like, str) else
                             type(like).__module__.startswith("torch")):
        import torch
        t = torch.from_numpy(a.view(_np.int16)).view(torch.bfloat16) if dt == DType.BF16 else torch.from_numpy(a)
        dev = getattr(like, "device", None)
        return t.to(dev) if dev is not None and dev.type != "cpu" else t
    if isinstance(like, str) and like != "numpy":
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"like={like!r}: expected \"numpy\", \"torch\" or an array")
    if dt == DType.BF16:
        try:
            import ml_dtypes  # type: ignore[import]
            return a.view(ml_dtypes.bfloat16)
        except ImportError:
            return a  # bfloat16 bits as uint16 (numpy has no bfloat16)
    return a


# ---------------------------------------------------------------- compress / decompress
def _bins(v: Bins, nl: int, what: str) -> Optional[List[int]]:
    if v is None:
        return None
    vals = [int(v)] * nl if isinstance(v, (int, _np.integer)) else [int(b) for b in v]
    if len(vals) != nl:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{what}: {len(vals)} bin counts for {nl} layers (give one for "
                                              "every layer, or one per layer)")
    return vals


def compress(kv: Any, level: int = 0, *, bins_k: Bins = None, bins_v: Bins = None,
             key_scaling: Union[KeyScaling, str, int] = "token", window_tokens: Optional[int] = None,
             context: Any = None) -> bytes:
    """Compress one KV chunk to a .kvc container (bytes), as `kvcore encode` does.

    kv: [2, NL, T, NH, HS] or [2, NL, T, C] (K and V planes) or MLA [NL, T, HS]; float16, bfloat16
    or float32; numpy, torch (any device: GPU tensors are copied to the host) or any array. level:
    0 (LMCache's default profile) .. 3 (smaller; docs/CACHEGEN.md); bins_k / bins_v: quantiser bins
    (one even count in [4, 64] for every layer, or one per layer) overriding the level's; key_scaling:
    "token" (LMCache-readable) or "channel"."""
    a, dt = _host(kv, "kv")
    return _encode(a, dt, level, bins_k, bins_v, key_scaling, window_tokens, context)


def _encode(a: "_np.ndarray[Any, Any]", dt: DType, level: int = 0, bins_k: Bins = None, bins_v: Bins = None,
            key_scaling: Union[KeyScaling, str, int] = "token", window_tokens: Optional[int] = None,
            context: Any = None) -> bytes:
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
    bins = quality(p, level, bins_k, bins_v, key_scaling)  # p points into it until the call returns
    if window_tokens is not None:
        p.field_mask |= _abi.CODEC_PARAM_WINDOW
        p.window_tokens = window_tokens
    ctx = context if context is not None else default_context()
    out, n = _C.c_void_p(), _C.c_size_t()
    _check(_lib.kvc_codec_encode(ctx._handle(), _C.byref(p), _C.c_void_p(a.ctypes.data if a.size else 0),
                                 _C.byref(out), _C.byref(n)))
    try:
        return _C.string_at(out, n.value)
    finally:
        _lib.kvc_codec_free(out)
        del bins


def quality(p: Any, level: Optional[int], bins_k: Bins, bins_v: Bins,
            key_scaling: Union[KeyScaling, str, int, None]) -> "_np.ndarray[Any, Any]":
    """Set a CodecParams' bins and key scaling from compress's options (p.layout and p.num_layers
    set); returns the bins array p points into, which must outlive the encode call."""
    nl = int(p.num_layers)
    mla = p.layout == _abi.CODEC_MLA
    bins = _np.zeros(2 * max(nl, 1), _np.uint32)
    if (level is not None and not isinstance(level, (int, _np.integer))) or isinstance(level, bool):
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"level: {type(level).__name__}, expected an int 0 .. 3")
    if nl > 0 and _lib.kvc_codec_level_params(int(level or 0), _C.byref(p), bins.ctypes.data) != 0:
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"level {level}: expected 0 .. 3 (docs/CACHEGEN.md)")
    bk, bv = _bins(bins_k, nl, "bins_k"), _bins(bins_v, nl, "bins_v")
    if bv is not None and mla:
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, "bins_v: an MLA chunk has no value plane (use bins_k)")
    for plane, vals in ((0, bk), (1, bv)):
        if vals is not None:
            bins[plane * nl:(plane + 1) * nl] = vals
    p.bins = bins.ctypes.data
    p.field_mask |= _abi.CODEC_PARAM_BINS
    ks = KeyScaling.coerce("token" if key_scaling is None else key_scaling, "key_scaling")
    if ks != KeyScaling.TOKEN:
        p.field_mask |= _abi.CODEC_PARAM_KEY_SCALING
        p.key_scaling = int(ks)
    return bins


def _bytes_addr(data: Any) -> Tuple[memoryview, Optional[int]]:
    mv = memoryview(data)
    if not mv.c_contiguous:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, "data: container bytes must be contiguous")
    mv = mv.cast("B")
    return mv, (_np.frombuffer(mv, _np.uint8).ctypes.data if len(mv) else None)


def _inspect(mv: memoryview, addr: Optional[int]) -> Any:
    info = _abi.CodecInfo()
    _check(_lib.kvc_codec_inspect(addr, len(mv), _C.byref(info)))
    return info


def _check_out(out: Any, shape: Tuple[int, ...], dt: DType) -> None:
    """out must hold the chunk: its shape (or the same with the head split flattened) and dtype."""
    oshape = tuple(int(d) for d in out.shape)
    flat = shape[:3] + (shape[3] * shape[4],) if len(shape) == 5 else shape
    if oshape not in (shape, flat):
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"out: shape {oshape}, the container holds {shape}"
                                              + (f" (or pass {flat})" if flat != shape else ""))
    try:
        odt = DType.of(out.dtype)
    except KvcoreError:
        odt = None
    if odt != dt and not (dt == DType.BF16 and (odt == DType.U16 or str(out.dtype) == "bfloat16")):
        raise KvcoreError(_abi.KVC_ERR_DTYPE, f"out: dtype {out.dtype}, the container holds {_NAMES[dt]}")


def inspected(data: Any) -> Tuple[memoryview, Optional[int], Any]:
    """(bytes view, its address, CodecInfo) of a container, validated (kvc_codec_inspect)."""
    mv, addr = _bytes_addr(data)
    return mv, addr, _inspect(mv, addr)


def decompress(data: Any, out: Any = None, *, like: Any = None, context: Any = None) -> Any:
    """Decompress a .kvc container (bytes-like) to its chunk, in the shape and dtype it was
    compressed from. out: an array (numpy or torch, any device) to fill and return, of that shape
    (or with the head split flattened) and dtype. like: "numpy" (the default), "torch", or an
    array/tensor whose type and device the result takes. bfloat16 without torch comes back as
    ml_dtypes.bfloat16 when ml_dtypes is installed, else as its uint16 bits."""
    return decode_one(*inspected(data), out, like, context)


def decode_one(mv: memoryview, addr: Optional[int], info: Any, out: Any, like: Any, context: Any) -> Any:
    shape, dt = shape_of(info), DType(info.dtype)
    ctx = context if context is not None else default_context()
    if out is not None:
        _check_out(out, shape, dt)
        direct = (type(out) is _np.ndarray and out.flags.c_contiguous and out.flags.writeable)
        if direct:
            _check(_lib.kvc_codec_decode(ctx._handle(), addr, len(mv), _C.c_void_p(out.ctypes.data), out.nbytes, None))
            return out
    host = _np.empty(shape, _np.uint16 if dt == DType.BF16 else (_np.float16 if dt == DType.F16 else _np.float32))
    _check(_lib.kvc_codec_decode(ctx._handle(), addr, len(mv), _C.c_void_p(host.ctypes.data), host.nbytes, None))
    if out is None:
        return _wrap(host, dt, like)
    if type(out).__module__.startswith("torch"):
        src = _wrap(host, dt, "torch")
        out.copy_(src.reshape(out.shape))
        return out
    out[...] = host.reshape(out.shape).view(out.dtype)
    return out


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
        self._f, self._close, self._like, self._ctx = f, close, like, context
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
        if len(head) < _HEADER or head[:8] != _MAGIC or \
                _struct.unpack_from("<I", head, 44)[0] != _zlib.crc32(head[:44]):
            raise KvcoreError(_abi.KVC_ERR_CORRUPT, f"stream: no valid container header at byte {at} "
                                                    f"({'truncated' if len(head) < _HEADER else 'bad magic or CRC'})")
        total = _struct.unpack_from("<Q", head, 24)[0]
        if total < _HEADER:
            raise KvcoreError(_abi.KVC_ERR_CORRUPT, f"stream: container at byte {at} says {total} bytes")
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


def open(file: Union[str, bytes, "_os.PathLike[str]", IO[bytes]], mode: str = "rb", *,
         chunk_tokens: int = 256, level: int = 0, bins_k: Bins = None, bins_v: Bins = None,
         key_scaling: Union[KeyScaling, str, int] = "token", like: Any = None,
         context: Any = None) -> Union[StreamReader, StreamWriter]:
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
                                                       key_scaling=key_scaling, context=context))
    except BaseException:
        if own:
            f.close()
        raise
