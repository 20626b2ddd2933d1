# SPDX-License-Identifier: BSD-3-Clause
"""The codec's methods of a Context (CodecOps: the coder, the .kvc codec on a context) and what they
share with kvcore.codec's functions: shapes, bins, the container check, the decode into any array.
It needs no Context, so kvcore.context and kvcore.codec both import it and not each other."""
import builtins as _builtins
import ctypes as _C
import os as _os
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as _np

from . import _abi
from ._array import buf as _buf, DTYPE_NAMES as _DTYPE_NAMES, require as _require
from ._base import _F32, _FLOATS, _I32, _I64, _U16, _U8, Array, ContextBase
from ._lib import check as _check, lib as _lib
from .enums import DType, KeyScaling
from .errors import KvcoreError, type_error


Bins = Union[int, Sequence[int], None]


_NAMES = {DType.F16: "float16", DType.BF16: "bfloat16", DType.F32: "float32"}


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
            import ml_dtypes
            return a.view(ml_dtypes.bfloat16)
        except ImportError:
            return a  # bfloat16 bits as uint16 (numpy has no bfloat16)
    return a


def _bins(v: Bins, nl: int, what: str) -> Optional[List[int]]:
    if v is None:
        return None
    vals = [int(v)] * nl if isinstance(v, (int, _np.integer)) else [int(b) for b in v]
    if len(vals) != nl:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{what}: {len(vals)} bin counts for {nl} layers (give one for "
                                              "every layer, or one per layer)")
    return vals


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
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise type_error(f"out: {type(out).__name__}, expected an array of shape {shape}")
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


def decode_one(mv: memoryview, addr: Optional[int], info: Any, out: Any, like: Any, ctx: ContextBase) -> Any:
    """Decode an inspected container with ctx into out (checked against its shape and dtype), or into
    a new array of that shape as `like` says."""
    shape, dt = shape_of(info), DType(info.dtype)
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


def encode_bound(tokens: int) -> int:
    """A per-stream capacity that always suffices for `tokens` symbols."""
    return int(_lib.kvc_cg_encode_bound(tokens))


def rans_encode_bound(tokens: int) -> int:
    """A per-stream capacity that always suffices for the rANS coder: 32 + 16 * tokens (0 above the limit)."""
    return int(_lib.kvc_rans_encode_bound(tokens))


class CodecOps(ContextBase):
    """kvcore.Context's CacheGen coder and .kvc codec (docs/CACHEGEN.md, docs/FORMAT.md)."""

    def cdf(self, symbols: Array, num_bins: int, out: Optional[Array] = None) -> Any:
        """Per-(layer, channel) CDF of uint8/int8 symbols [L, T, C]: uint16 [L, C, num_bins + 1]."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        o = _np.empty((l, c, num_bins + 1), _np.uint16) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U16, _abi.DTYPE_I16), shape=(l, c, num_bins + 1))
        a = _abi.CgCdfParams(symbols=s.ptr, cdf=ob.ptr, layers=l, tokens=t, channels=c, num_bins=num_bins)
        _check(_lib.kvc_cg_cdf(self._handle(), _C.byref(a)))
        return o

    def encode_streams(self, cdf: Array, symbols: Array, streams: Array, lengths: Array) -> int:
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

    def encode(self, cdf: Array, symbols: Array, capacity: Optional[int] = None) -> Tuple[Any, Any]:
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

    def decode(self, cdf: Array, streams: Array, lengths: Array, tokens: int, out: Optional[Array] = None) -> Any:
        """Decode per-stream buffers [L, C, capacity] into symbols uint8 [L, tokens, C]; out may be any
        view of distinct elements (a window out[:, a:b, :] of a larger array)."""
        st = self._arr(streams, "streams", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, c, cap = st.shape
        cb = self._arr(cdf, "cdf", dtypes=(_U16, _abi.DTYPE_I16), ndim=3, shape=(l, c, None))
        ln = self._arr(lengths, "lengths", dtypes=_I32, shape=(l, c))
        o = _np.empty((l, tokens, c), _np.uint8) if out is None else out
        ob, done = self._out_view(o, "out", dtypes=(_U8, _abi.DTYPE_I8), shape=(l, tokens, c))
        a = _abi.CgDecodeParams(cdf=cb.ptr, streams=st.ptr, lengths=ln.ptr, symbols=ob.ptr, layers=l, tokens=tokens,
                            channels=c, capacity=cap, num_bins=cb.shape[2] - 1)
        _check(_lib.kvc_cg_decode(self._handle(), _C.byref(a)))
        done()
        return o

    def decode_packed(self, cdf: Array, data: Array, prefsum: Array, tokens: int,
                      out: Optional[Array] = None) -> Any:
        """Decode one packed byte array (stream k at [prefsum[k-1], prefsum[k])) into uint8 [L, tokens, C];
        out may be any view of distinct elements (a window out[:, a:b, :] of a larger array)."""
        cb = self._arr(cdf, "cdf", dtypes=(_U16, _abi.DTYPE_I16), ndim=3)
        l, c, lp = cb.shape
        d = self._arr(data, "bytestreams", dtypes=(_U8, _abi.DTYPE_I8), ndim=1)
        p = self._arr(prefsum, "prefsum", dtypes=_I64, shape=(l, c))
        o = _np.empty((l, tokens, c), _np.uint8) if out is None else out
        ob, done = self._out_view(o, "out", dtypes=(_U8, _abi.DTYPE_I8), shape=(l, tokens, c))
        a = _abi.CgDecodePackedParams(cdf=cb.ptr, bytes=d.ptr, nbytes=d.shape[0], prefsum=p.ptr, symbols=ob.ptr,
                                  layers=l, tokens=tokens, channels=c, num_bins=lp - 1)
        _check(_lib.kvc_cg_decode_packed(self._handle(), _C.byref(a)))
        done()
        return o

    def rans_tables(self, symbols: Array, num_bins: int, out: Optional[Array] = None) -> Any:
        """The rANS frequency tables of uint8/int8 symbols [L, T, C] (T >= 1): uint16 [L, C, num_bins + 1],
        cumulative frequencies adding up to 4096 (docs/FORMAT.md "rANS streams")."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        o = _np.empty((l, c, num_bins + 1), _np.uint16) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U16, _abi.DTYPE_I16), shape=(l, c, num_bins + 1))
        a = _abi.RansTablesParams(symbols=s.ptr, cum=ob.ptr, layers=l, tokens=t, channels=c, num_bins=num_bins)
        _check(_lib.kvc_rans_tables(self._handle(), _C.byref(a)))
        return o

    def rans_encode_streams(self, cum: Array, symbols: Array, streams: Array, lengths: Array) -> None:
        """rANS-code symbols [L, T, C] into streams uint8 [L, Q, capacity] and lengths int32 [L, Q],
        Q = ceil(C / 32) (stream (l, q): channels 32q .. 32q + 31, 8 states each coding 4 of them one
        after another); capacity >= rans_encode_bound(T)."""
        s = self._arr(symbols, "symbols", dtypes=(_U8, _abi.DTYPE_I8), ndim=3)
        l, t, c = s.shape
        g = (c + 31) // 32
        cb = self._arr(cum, "cum", dtypes=(_U16, _abi.DTYPE_I16), ndim=3, shape=(l, c, None))
        st = self._arr(streams, "streams", True, dtypes=(_U8, _abi.DTYPE_I8), ndim=3, shape=(l, g, None))
        ln = self._arr(lengths, "lengths", True, dtypes=_I32, shape=(l, g))
        a = _abi.RansEncodeParams(cum=cb.ptr, symbols=s.ptr, streams=st.ptr, lengths=ln.ptr, layers=l, tokens=t,
                                  channels=c, capacity=st.shape[2], num_bins=cb.shape[2] - 1)
        _check(_lib.kvc_rans_encode(self._handle(), _C.byref(a)))

    def rans_encode(self, cum: Array, symbols: Array) -> Tuple[Any, Any]:
        """rANS-code symbols [L, T, C] with the tables cum [L, C, B + 1]: returns (data uint8, the streams
        back to back, ends int64 [L, ceil(C / 32)], each stream's end offset): what rans_decode takes."""
        s = _buf(symbols, "symbols")
        if len(s.shape) != 3:
            _require(s, ndim=3)
        l, t, c = s.shape
        g, cap = (c + 31) // 32, rans_encode_bound(t)
        streams, lengths = _np.empty((l, g, cap), _np.uint8), _np.zeros((l, g), _np.int32)
        self.rans_encode_streams(cum, symbols, streams, lengths)
        ends = _np.cumsum(lengths.reshape(-1), dtype=_np.int64)
        data = streams.reshape(l * g, cap)[_np.arange(cap)[None, :] < lengths.reshape(-1, 1)]  # each stream's bytes, in order
        return data, ends.reshape(l, g)

    def rans_decode(self, cum: Array, data: Array, ends: Array, tokens: int, out: Optional[Array] = None) -> Any:
        """Decode rANS streams (data uint8, stream k at [ends[k-1], ends[k])) into uint8 [L, tokens, C]."""
        cb = self._arr(cum, "cum", dtypes=(_U16, _abi.DTYPE_I16), ndim=3)
        l, c, lp = cb.shape
        d = self._arr(data, "data", dtypes=(_U8, _abi.DTYPE_I8), ndim=1)
        e = self._arr(ends, "ends", dtypes=_I64, shape=(l, (c + 31) // 32))
        o = _np.empty((l, tokens, c), _np.uint8) if out is None else out
        ob = self._arr(o, "out", True, dtypes=(_U8, _abi.DTYPE_I8), shape=(l, tokens, c))
        a = _abi.RansDecodeParams(cum=cb.ptr, bytes=d.ptr, nbytes=d.shape[0], ends=e.ptr, symbols=ob.ptr, layers=l,
                                  tokens=tokens, channels=c, num_bins=lp - 1)
        _check(_lib.kvc_rans_decode(self._handle(), _C.byref(a)))
        return o

    def _bins(self, bins: Any, layers: int) -> Any:
        b = _np.ascontiguousarray(bins, dtype=_np.uint32).reshape(-1)
        if b.shape[0] != layers:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"bins: {b.shape[0]} entries, expected {layers}")
        return b

    def quantise(self, values: Array, bins: Any) -> Tuple[Any, Any]:
        """values [L, T, C] (f16/bf16/f32) -> (symbols uint8 [L, T, C], scales float32 [L, T])."""
        v = self._arr(values, "values", dtypes=_FLOATS, ndim=3)
        l, t, c = v.shape
        b = self._bins(bins, l)
        sym, sc = _np.empty((l, t, c), _np.uint8), _np.empty((l, t), _np.float32)
        a = _abi.QuantParams(dtype=v.dtype, values=v.ptr, symbols=sym.ctypes.data, scales=sc.ctypes.data,
                           bins=b.ctypes.data, layers=l, tokens=t, channels=c)
        _check(_lib.kvc_quantise(self._handle(), _C.byref(a)))
        return sym, sc

    def dequantise(self, symbols: Array, scales: Array, bins: Any, out: Array) -> Any:
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

    def codec_encode(self, kv: Array, num_heads: Optional[int] = None, head_size: Optional[int] = None,
                     mla: bool = False, bins: Any = None, window_tokens: Optional[int] = None, *,
                     level: Optional[int] = None, bins_k: Bins = None, bins_v: Bins = None,
                     key_scaling: Union[KeyScaling, str, int, None] = None) -> bytes:
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
            keep = quality(p, level, bins_k, bins_v, key_scaling)
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

    def codec_decode(self, data: Any, out: Optional[Array] = None, torch: bool = False, *, like: Any = None) -> Any:
        """Decompress a .kvc container into out, or into a new array of the shape it was encoded from
        ([2, NL, T, NH, HS] when the container records the head split, else [2, NL, T, C]; MLA
        [NL, T, HS]): numpy, or torch with torch=True or like=a tensor (kvcore.decompress). out may
        also be flat bytes (uint8) of the chunk's size."""
        mv, addr, info = inspected(data)
        if out is None or str(getattr(out, "dtype", "")) not in ("uint8", "torch.uint8"):
            return decode_one(mv, addr, info, out, "torch" if torch and like is None else like, self)
        o = self._arr(out, "out", True)
        if o.nbytes != info.original_bytes:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"out: {o.nbytes} bytes (uint8), the chunk {shape_of(info)} "
                                                  f"{_DTYPE_NAMES.get(info.dtype, '?')} is {info.original_bytes}")
        _check(_lib.kvc_codec_decode(self._handle(), addr, len(mv), _C.c_void_p(o.ptr), o.nbytes, None))
        return out

    def codec_encode_file(self, path: Union[str, "_os.PathLike[str]"], kv: Array, **kw: Any) -> int:
        """codec_encode, written to a .kvc file. Returns the container size."""
        data = self.codec_encode(kv, **kw)
        with _builtins.open(path, "wb") as f:
            f.write(data)
        return len(data)

    def codec_decode_file(self, path: Union[str, "_os.PathLike[str]"], out: Optional[Array] = None,
                          torch: bool = False, *, like: Any = None) -> Any:
        """codec_decode of a .kvc file's bytes."""
        with _builtins.open(path, "rb") as f:
            return self.codec_decode(f.read(), out=out, torch=torch, like=like)
