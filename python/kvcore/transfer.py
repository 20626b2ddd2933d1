# SPDX-License-Identifier: BSD-3-Clause
"""Transfers between paged engine KV caches and chunks: formats, PageShape, Engine, the ops."""
import ctypes as _C
from typing import Any, Sequence, Tuple, Union

import numpy as _np

from . import _abi
from ._abi import PageShape
from ._array import buf as _buf, dense as _dense, require as _require, DTYPE_NAMES as _DTYPE_NAMES, NP_DTYPES as _NP_KVC_DTYPES, torch_dtypes as _torch_dtypes
from ._base import _c_array, _U8, Array, ContextBase, DirectionLike, FormatLike, Index, Stream
from ._lib import check as _check, lib as _lib
from .enums import Direction, Format
from .errors import KvcoreError


# Format facts, read once from the library (the transfer paths consult them on every call).
_VALID = {f for f in range(64) if _lib.kvc_format_is_valid(f)}
_KV_LIST = {f for f in _VALID if _lib.kvc_format_is_kv_list(f)}
_CROSS = {f for f in _VALID if _lib.kvc_format_is_cross_layer(f)}
_MLA = {f for f in _VALID if _lib.kvc_format_is_mla(f)}
_FUSED = {f for f in _VALID if _lib.kvc_format_is_fused_packed(f)}
# Formats whose engine tensors may be pools of padded blocks (kvc_page_shape_t.block_stride_elems)
_PADDED = {int(Format.NL_X_NB_BS_HS), int(Format.NL_X_NB_BSV_BSS)} | _FUSED



def format_name(fmt: FormatLike) -> str:
    """LMCache's name of an EngineKVFormat (\"NL_X_TWO_NB_BS_NH_HS\")."""
    return str(_lib.kvc_format_name(int(_fmt(fmt))).decode())


def format_ptr_count(fmt: FormatLike, nl: int) -> int:
    """Pointer table entries a format takes for nl layers; -1 if invalid."""
    return int(_lib.kvc_format_ptr_count(int(_fmt(fmt)), int(nl)))


def shape_ptr_count(fmt: FormatLike, shape: PageShape) -> int:
    """Pointer table entries for a format and PageShape (format 17: num_planes * nl); -1 if invalid."""
    return int(_lib.kvc_shape_ptr_count(int(_fmt(fmt)), _C.byref(shape)))


class Engine:
    """Engine tensors checked once by Context.engine(). It holds the tensors, so their memory stays
    alive while it exists; they must keep their storage (no resize_/set_ on torch tensors, no
    in-place resize of numpy arrays) while it is used, as LMCache's pointer tables require."""
    __slots__ = ("_ctx", "fmt", "_shape", "_ptrs", "_count", "_keep")

    def __init__(self, ctx: ContextBase, fmt: Any, shape: PageShape, ptrs: Any, count: int, keep: Any) -> None:
        self._ctx, self.fmt, self._shape = ctx, fmt, bytes(shape)
        self._ptrs, self._count, self._keep = ptrs, count, keep

    def __repr__(self) -> str:
        shape = PageShape.from_buffer_copy(self._shape)
        fmt = self.fmt.name if isinstance(self.fmt, Format) else self.fmt
        return f"<kvcore.Engine {fmt}, {self._count} tensor(s), {shape!r}>"

    def _table(self, ctx: ContextBase, fmt: Any, shape: PageShape) -> Tuple[Any, int, Any]:
        if ctx is not self._ctx:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, "engine: made by another Context")
        if fmt != self.fmt or bytes(shape) != self._shape:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"engine: checked for format {self.fmt} and another shape; "
                                                  f"make one with Context.engine({fmt}, shape, tensors)")
        return self._ptrs, self._count, self._keep


# The engine argument of a transfer: an Engine, one tensor, or the format's list (of tuples for 16, 17).
EngineArg = Union[Engine, Array, Sequence[Any]]


class TransferOps(ContextBase):
    """kvcore.Context's transfers between engine KV caches and chunks (docs/TRANSFER.md)."""

    def _engine(self, engine: EngineArg, fmt: Any, shape: PageShape) -> Tuple[Any, int, Any]:
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
        bufs = [self._engine_buf(t, f"engine[{i}]", fmt, shape) for i, t in enumerate(tensors)]
        for i, b in enumerate(bufs):
            if not b.contiguous():  # a padded pool: _engine_buf checked its reach
                continue
            if b.itemsize != shape.element_size and b.dtype != _U8 and fmt != 17:
                raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{b.name}: element size {b.itemsize}, shape says "
                                                      f"{shape.element_size}")
            if fmt == 17 and 0 < shape.num_planes <= _abi.MAX_PLANES:  # planes of their own widths (and types)
                need = shape.nb * shape.bs * shape.plane_bytes[i % shape.num_planes]
            if b.nbytes < need:
                raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{b.name}: {b.nbytes} bytes, the geometry needs {need}")
        return _c_array(_C.c_void_p, [b.ptr for b in bufs]), len(bufs), bufs

    def _engine_buf(self, t: Array, name: str, fmt: int, shape: PageShape) -> Any:
        """One engine tensor: C-contiguous, or (formats 3 and 10-14, whose tensors start with the block
        axis) a pool whose blocks are padded: dense within a block, the block axis stepping further
        (vLLM pads a group's rows to its pool's widest; LMCache's PageBufferShapeDesc.block_stride_elems
        is that tensor.stride(0)). The step becomes shape.block_stride_elems, which must agree when set."""
        b = self._arr(t, name, writable=True, contiguous=False)
        if b.contiguous() or fmt not in _PADDED or len(b.shape) < 2 or b.shape[0] < 2:
            return _require(b)
        inner = _dense(b.shape[1:], b.strides[1:], b.itemsize)
        step, es = b.strides[0], shape.element_size
        tight = b.itemsize
        for d in b.shape[1:]:
            tight *= d
        if not inner or step < tight or es <= 0 or step % es:
            return _require(b)
        if shape.block_stride_elems not in (0, step // es):
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: blocks {step // es} elements apart (byte strides "
                                                  f"{list(b.strides)}), shape.block_stride_elems says "
                                                  f"{shape.block_stride_elems}")
        if b.shape[0] < shape.nb:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: {b.shape[0]} blocks, the geometry has nb = {shape.nb}")
        shape.block_stride_elems = step // es
        return b

    def engine(self, fmt: FormatLike, shape: PageShape, tensors: EngineArg) -> Engine:
        """The engine tensors of a format, checked once, for repeated transfers: pass the returned
        Engine wherever a transfer takes `engine` (the same format and shape) and the per-tensor
        checks and the pointer table are not redone on every call (about 11 us for 32 numpy
        layers, 3 % of a 32 MiB block transfer)."""
        fmt, _, shape = _args(fmt, Direction.H2D, shape, tensors)
        ptrs, n, keep = self._engine(tensors, fmt, shape)
        return Engine(self, fmt, shape, ptrs, n, keep)

    def _chunk(self, chunk: Array, name: str, shape: PageShape, tokens: int, writable: bool) -> Any:
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

    def transfer_tokens(self, fmt: FormatLike, direction: DirectionLike, shape: PageShape, engine: EngineArg,
                        chunk: Array, slots: Index, chunk_layout: int = 0, skip_prefix: int = 0,
                        stream: Stream = None) -> None:
        """Per-token multi-layer transfer (kvc_transfer_tokens). engine: the format's tensor(s);
        chunk: [planes, NL, T, row] (MLA [NL, T, HS]); slots: int64 [T] or a sequence, < 0 skipped.
        fmt: a Format (or its int or name); direction: a Direction, 0/1 or "H2D"/"D2H"."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        s = self._index(slots, "slots")
        t = s.shape[0]
        c = self._chunk(chunk, "chunk", shape, t, direction == Direction.D2H)
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        # positional: ctypes fills a Structure from keywords several times slower
        a = _abi.TokenTransfer(int(fmt), int(direction), shape, _C.addressof(ptrs), n, c.ptr, int(chunk_layout), t,
                               s.ptr, _abi.INDEX_INT64, t, skip_prefix, self._stream(stream, chunk))
        _check(_lib.kvc_transfer_tokens(self._handle(), _C.byref(a)))

    def transfer_blocks(self, fmt: FormatLike, direction: DirectionLike, shape: PageShape, engine: EngineArg,
                        objects: Sequence[Array], block_ids: Index, chunk_tokens: int, chunk_layout: int = 0,
                        skip_prefix_blocks: int = 0, stream: Stream = None) -> None:
        """Per-block transfer (kvc_transfer_blocks): objects are [planes, NL, chunk_tokens, row] each."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        ids = self._index(block_ids, "block_ids")
        objs = [self._chunk(o, f"objects[{i}]", shape, chunk_tokens, direction == Direction.D2H)
                for i, o in enumerate(objects)]
        optrs = _c_array(_C.c_void_p, [o.ptr for o in objs])
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        a = _abi.BlockTransfer(format=int(fmt), direction=int(direction), shape=shape, engine_ptrs=_C.addressof(ptrs),
                               num_engine_ptrs=n, objects=_C.addressof(optrs), num_objects=len(objs),
                               chunk_layout=int(chunk_layout), chunk_tokens=chunk_tokens, block_ids=ids.ptr,
                               block_id_type=_abi.INDEX_INT64, num_block_ids=ids.shape[0],
                               skip_prefix_blocks=skip_prefix_blocks, stream=self._stream(stream, *objects))
        _check(_lib.kvc_transfer_blocks(self._handle(), _C.byref(a)))

    def transfer_layer(self, fmt: FormatLike, direction: DirectionLike, shape: PageShape, engine: EngineArg,
                       chunk: Array, slots: Index, chunk_layout: int = 0, token_major: bool = False,
                       stream: Stream = None) -> None:
        """One layer (kvc_transfer_layer): chunk [planes, T, row] or [T, planes, row] (token_major)."""
        fmt, direction, shape = _args(fmt, direction, shape, engine)
        s = self._index(slots, "slots")
        t = s.shape[0]
        c = self._chunk(chunk, "chunk", shape, t, direction == Direction.D2H)
        ptrs, n, _keep = self._engine(engine, fmt, shape)
        a = _abi.LayerTransfer(format=int(fmt), direction=int(direction), shape=shape, engine_ptrs=_C.addressof(ptrs),
                               num_engine_ptrs=n, chunk=c.ptr, chunk_layout=int(chunk_layout),
                               token_major=int(bool(token_major)), num_tokens=t, slots=s.ptr,
                               slot_type=_abi.INDEX_INT64, num_slots=t, stream=self._stream(stream, chunk))
        _check(_lib.kvc_transfer_layer(self._handle(), _C.byref(a)))

    def _flash(self, fn: Any, key_value: Array, key_cache: Array, value_cache: Array, slots: Index, layer_idx: int,
               stream: Stream, d2h: bool) -> None:
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

    def load_and_reshape_flash(self, key_value: Array, key_cache: Array, value_cache: Array, slots: Index,
                               layer_idx: int, stream: Stream = None) -> None:
        """D2H: key_value[:, layer_idx, t] <- key/value cache at slots[t] (slots < 0 skipped)."""
        self._flash(_lib.kvc_load_and_reshape_flash, key_value, key_cache, value_cache, slots, layer_idx, stream,
                    True)

    def reshape_and_cache_back_flash(self, key_value: Array, key_cache: Array, value_cache: Array, slots: Index,
                                     layer_idx: int, stream: Stream = None) -> None:
        """H2D: the inverse of load_and_reshape_flash."""
        self._flash(_lib.kvc_reshape_and_cache_back_flash, key_value, key_cache, value_cache, slots, layer_idx,
                    stream, False)


def _fmt(fmt: FormatLike) -> Any:
    """A Format for a known format (int or name); other ints are passed on for the C call to name."""
    if isinstance(fmt, str) or (isinstance(fmt, int) and fmt in _FORMAT_VALUES):
        return Format.coerce(fmt, "fmt")
    return fmt


_FORMAT_VALUES = frozenset(int(f) for f in Format)


def _first_tensor(engine: Any) -> Any:
    while isinstance(engine, (list, tuple)) and engine:
        engine = engine[0]
    return engine


def _args(fmt: FormatLike, direction: DirectionLike, shape: PageShape,
          engine: EngineArg) -> Tuple[Any, Direction, PageShape]:
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


def _set_planes(shape: PageShape, planes: Sequence[Any], slots: int) -> None:
    """Format 17: num_planes and plane_bytes from one layer's plane tensors of `slots` token rows each."""
    if not 1 <= len(planes) <= _abi.MAX_PLANES:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{len(planes)} planes per layer: format 17 takes 1.."
                                              f"{_abi.MAX_PLANES}")
    shape.num_planes = len(planes)
    for i, b in enumerate(planes):
        shape.plane_bytes[i] = b.nbytes // slots if slots > 0 else 0


_U8_DTYPE = _np.dtype(_np.uint8)


def _fast_engine_ptrs(tensors: Sequence[Any], element_size: int, need: int, cpu_only: bool) -> Any:
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
            # the buffer protocol: no dict built (typeshed does not know ndarray has it)
            ptrs[i] = _C.addressof(_C.c_char.from_buffer(t))  # type: ignore[arg-type]
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


def _engine_bytes(fmt: int, shape: PageShape) -> int:
    """Bytes one engine tensor of this format and geometry needs (the C core only sees pointers)."""
    tight = shape.bs * shape.nh * shape.hs
    blk = shape.block_stride_elems or tight
    planes = 1 if fmt in _KV_LIST or fmt == 16 else shape.kv_size
    per_plane = ((shape.nb - 1) * blk + tight) if shape.nb > 0 else 0
    n = planes * per_plane
    if fmt in _CROSS:
        n = shape.nl * planes * shape.nb * tight
    return int(n * shape.element_size)
