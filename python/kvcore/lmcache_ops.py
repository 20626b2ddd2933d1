# SPDX-License-Identifier: BSD-3-Clause
"""LMCache's native ops (`lmcache.c_ops`) on kvcore, with exactly the surface of LMCache at the
commit kvcore follows (kvcore.lmcache.LMCACHE_COMMIT): the same public names, enum members,
descriptor attributes, and every function's parameter names, order, defaults and annotations,
because LMCache reads them (it picks its tensor or pointer path from an annotation, and its own
test compares the surface with its fallback's). `python3 -m kvcore.lmcache install` makes an
unmodified LMCache use this module (docs/LMCACHE.md, "Using kvcore from LMCache").

The ops run on kvcore (CPU backend, or a GPU module when one is selected) through one module-level
Context, created on first use (KVCORE_BACKEND and the other environment knobs apply). Formats
11-17 are taken as integers (kvcore.Format names them). What kvcore adds beyond this LMCache
(the plan executors, PCIe BAR mapping, strided RoPE, the transfer's chunk-layout and plane
arguments) is in kvcore.lmcache_extras. Deliberate differences (errors instead of silent
corruption, int64-only slots, ...) are listed function by function in docs/PYTHON.md. Every error
is a kvcore.KvcoreError carrying kvcore's status name."""
from __future__ import annotations  # the annotations are LMCache's own text (torch is not imported)

import ctypes as _C
import enum as _enum
import os as _os
import threading as _threading
from typing import Any, List, NoReturn, Optional, Sequence, TYPE_CHECKING, Tuple, Union

import numpy as _np

from . import Context as _Context, KvcoreError, _abi
from ._lib import lib as _lib
from .transfer import _CROSS, _FUSED, _KV_LIST, _MLA
from ._array import Buf, buf as _buf, count as _count, require as _require
from ._base import Array, Index
from ._lib import check as _lib_check
from .enums import Format as _Format

if TYPE_CHECKING:  # LMCache's annotations name torch types; nothing here imports torch at run time
    import torch
# The engine side as LMCache's callers pass it: one data tensor, a pointer table, or a list of
# per-layer tensors (SGLang: a K list and a V list).
_Engine = Union[Array, Sequence[Any]]

__all__ = [  # LMCache's public names (python_ops_fallback), nothing more
    "TransferDirection", "EngineKVFormat", "GPUKVFormat", "PageBufferShapeDesc", "set_shape_desc_dtype",
    "is_cross_layer", "is_kv_list", "is_layer_list", "is_mla",
    "multi_layer_kv_transfer", "multi_layer_kv_transfer_unilateral", "single_layer_kv_transfer",
    "single_layer_kv_transfer_sgl", "load_and_reshape_flash", "reshape_and_cache_back_flash",
    "multi_layer_block_kv_transfer", "lmcache_memcpy_async", "batched_memcpy",
    "alloc_pinned_ptr", "free_pinned_ptr", "alloc_hugepage_pinned_ptr", "free_hugepage_pinned_ptr",
    "alloc_numa_ptr", "free_numa_ptr", "alloc_pinned_numa_ptr", "free_pinned_numa_ptr",
    "alloc_hugepage_pinned_numa_ptr", "free_hugepage_pinned_numa_ptr", "alloc_shm_pinned_ptr",
    "free_shm_pinned_ptr", "get_gpu_pci_bus_id",
    "calculate_cdf", "encode_fast_new", "decode_fast_new", "decode_fast_prefsum", "rotary_embedding_k_fused",
    "record_event_on_stream", "drain_recorded_events", "record_completion_on_stream",
    "drain_recorded_completions",
]

# ---------------------------------------------------------------- types


class TransferDirection(_enum.IntEnum):
    H2D = 0  # LMCache buffer -> engine paged cache (retrieve)
    D2H = 1  # engine paged cache -> LMCache buffer (store)


class EngineKVFormat(_enum.IntEnum):
    """LMCache's EngineKVFormat at the commit kvcore follows: kvcore.Format's members 0-10 under the
    same names, their values taken from it (11-17 are passed as integers; kvcore.Format names them)."""
    NB_NL_TWO_BS_NH_HS = _Format.NB_NL_TWO_BS_NH_HS.value
    NL_X_TWO_NB_BS_NH_HS = _Format.NL_X_TWO_NB_BS_NH_HS.value
    NL_X_NB_TWO_BS_NH_HS = _Format.NL_X_NB_TWO_BS_NH_HS.value
    NL_X_NB_BS_HS = _Format.NL_X_NB_BS_HS.value
    TWO_X_NL_X_NBBS_NH_HS = _Format.TWO_X_NL_X_NBBS_NH_HS.value
    NL_X_NBBS_ONE_HS = _Format.NL_X_NBBS_ONE_HS.value
    NL_X_TWO_NB_NH_BS_HS = _Format.NL_X_TWO_NB_NH_BS_HS.value
    NL_X_NB_TWO_NH_BS_HS = _Format.NL_X_NB_TWO_NH_BS_HS.value
    NB_NL_TWO_NH_BS_HS = _Format.NB_NL_TWO_NH_BS_HS.value
    TWO_X_NL_X_NB_BS_NH_HS = _Format.TWO_X_NL_X_NB_BS_NH_HS.value
    NL_X_NB_NH_BS_TWO_HS = _Format.NL_X_NB_NH_BS_TWO_HS.value


GPUKVFormat = EngineKVFormat  # LMCache's backward-compatible alias


# LMCache's MemObjKVLayout values (kvcore.lmcache_extras.MemObjKVLayout)
_LAYOUT_UNSPECIFIED, _LAYOUT_SPLIT_KV_2LTD = 0, 1


class PageBufferShapeDesc:
    """LMCache's PageBufferShapeDesc: built empty, its fields set one by one. Other attributes may be
    added (as the C++ class's py::dynamic_attr): kv_interleaved (L2TD objects) and plane_slot_bytes
    (format 17) are read where set."""

    def __init__(self) -> None:
        self.kv_size: int = 0
        self.nl: int = 0
        self.nb: int = 0
        self.bs: int = 0
        self.nh: int = 0
        self.hs: int = 0
        self.element_size: int = 0
        self.block_stride_elems: int = 0  # 0: tight blocks; else the block axis's step (tensor.stride(0))
        self.dtype: torch.dtype | None = None

    def __repr__(self) -> str:
        return ("PageBufferShapeDesc(kv_size={kv_size}, nl={nl}, nb={nb}, bs={bs}, nh={nh}, hs={hs}, "
                "element_size={element_size}, block_stride_elems={block_stride_elems})").format(**vars(self))


def set_shape_desc_dtype(shape_desc: Any, dtype: torch.dtype) -> None:
    """LMCache's helper: shape_desc.dtype = dtype where the descriptor takes attributes (it tells
    float16 from bfloat16, which share an element size); ignored where it does not."""
    try:
        shape_desc.dtype = dtype
    except AttributeError:
        pass


# ---------------------------------------------------------------- the context

_ctx = None
_ctx_lock = _threading.Lock()


def _context() -> _Context:
    """The Context every op of this module (and of kvcore.lmcache_extras) runs on, created on first use."""
    global _ctx
    if _ctx is None:
        with _ctx_lock:
            if _ctx is None:
                _ctx = _Context()
    return _ctx


# ---------------------------------------------------------------- predicates
# LMCache's format_facts; an unknown value raises (LMCache: std::invalid_argument).

def _fact(fmt: int, name: str) -> bool:
    f = int(fmt)
    if not _lib.kvc_format_is_valid(f):
        raise KvcoreError(_abi.KVC_ERR_FORMAT, f"unknown EngineKVFormat {f}")
    return bool(getattr(_lib, "kvc_format_is_" + name)(f))


def is_cross_layer(engine_kv_format: EngineKVFormat) -> bool:
    """Whether the format is one tensor holding every layer (kvc_format_is_cross_layer)."""
    return _fact(engine_kv_format, "cross_layer")


def is_kv_list(engine_kv_format: EngineKVFormat) -> bool:
    """Whether the format is separate K and V lists (kvc_format_is_kv_list)."""
    return _fact(engine_kv_format, "kv_list")


def is_layer_list(engine_kv_format: EngineKVFormat) -> bool:
    """Whether the format is one entry per layer (kvc_format_is_layer_list)."""
    return _fact(engine_kv_format, "layer_list")


def is_mla(engine_kv_format: EngineKVFormat) -> bool:
    """Whether the format is MLA, one latent plane (kvc_format_is_mla)."""
    return _fact(engine_kv_format, "mla")


# ---------------------------------------------------------------- helpers

def _format(fmt: int) -> int:
    return int(fmt)


def _planes(shape: _abi.PageShape, plane_slot_bytes: Optional[Sequence[int]]) -> None:
    """Format 17: the per-plane row bytes (LMCache-Ascend's plane_slot_bytes) into the PageShape."""
    if plane_slot_bytes is None:
        return
    widths = [int(w) for w in plane_slot_bytes]
    if not 1 <= len(widths) <= _abi.MAX_PLANES:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"plane_slot_bytes: {len(widths)} planes, format 17 takes 1.."
                                              f"{_abi.MAX_PLANES}")
    shape.num_planes = len(widths)
    for i, w in enumerate(widths):
        shape.plane_bytes[i] = w


def _nptr(fmt: int, shape: _abi.PageShape) -> int:
    n = int(_lib.kvc_shape_ptr_count(fmt, _C.byref(shape)))
    if n < 0 and fmt == int(_Format.NL_X_NP_X_NB_BS_ONE_HS):
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"format 17 needs its planes' row bytes (plane_slot_bytes, 1.."
                                              f"{_abi.MAX_PLANES} planes); got {shape.num_planes} planes")
    return n


def _direction(d: int) -> int:
    d = int(d)
    if d not in (0, 1):
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"direction {d} is neither H2D (0) nor D2H (1)")
    return d


def _ptr_table(obj: Array, name: str, count: int) -> Buf:
    """A 1-D int64/uint64 array of addresses (passed to kvcore as the pointer table itself)."""
    b: Buf = _context()._arr(obj, name, dtypes=(_abi.DTYPE_I64, _abi.DTYPE_U64), ndim=1)
    if b.shape[0] != count:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name}: {b.shape[0]} addresses, the format takes {count}")
    return b


def _is_ptr_table(obj: _Engine) -> bool:
    """LMCache's rule: a 1-D int64/uint64 tensor holds addresses; any other tensor holds KV data."""
    if isinstance(obj, (list, tuple)):
        return False
    b = _buf(obj, "pointer table")
    return len(b.shape) == 1 and b.dtype in (_abi.DTYPE_I64, _abi.DTYPE_U64)


def _split(t: Array, n: int) -> List[Array]:
    """n views t[0] .. t[n-1] along the first dimension (numpy and torch alike)."""
    return [t[i] for i in range(n)]


def _engine_tensors(obj: _Engine, fmt: int, nl: int) -> List[Any]:
    """Every container LMCache's callers pass for the engine side, as kvcore's tensor list:
    a list/tuple (SGLang's [[K_0..], [V_0..]] flattened K list then V list), or one data tensor
    (cross-layer: itself; K/V lists: [2, NL, ...]; per-layer formats: stacked [NL, ...])."""
    if isinstance(obj, (list, tuple)):
        if fmt in (16, 17):  # per-layer tuples: Context._engine takes them as they are
            return list(obj)
        out = []
        for x in obj:
            out += list(x) if isinstance(x, (list, tuple)) else [x]
        return out
    if fmt in _CROSS:
        return [obj]
    if fmt in _KV_LIST:
        return [x for half in _split(obj, 2) for x in _split(half, nl)]
    return _split(obj, nl)


def _engine_table(obj: _Engine, name: str, fmt: int, shape: _abi.PageShape, nptr: int) -> Tuple[int, int, object]:
    """(address of the pointer table, entry count, what keeps it alive): a pointer tensor is used
    as it is (raw addresses, LMCache's contract); tensors are checked against the geometry."""
    if _is_ptr_table(obj):
        b = _ptr_table(obj, name, nptr)
        return b.ptr, nptr, b
    ptrs, n, keep = _context()._engine(_engine_tensors(obj, fmt, shape.nl), fmt, shape)
    return _C.addressof(ptrs), n, (ptrs, keep)


def _slots(obj: Index, name: str = 'slot_mapping') -> Buf:
    b: Buf = _context()._index(obj, name)
    return b


def _max_slot(s: Buf) -> int:
    if s.shape[0] == 0 or s.device[0] != "cpu":
        return -1
    a = _np.ctypeslib.as_array((_C.c_int64 * s.shape[0]).from_address(s.ptr))
    return int(a.max())


def _past_end(skip: int, n: int) -> int:
    """A prefix skip as LMCache takes it: one past the end leaves nothing to do (it is the end);
    a negative one goes to kvcore, which names it."""
    return n if isinstance(skip, (int, _np.integer)) and skip > n else skip


def _stream(*tensors: Array) -> Optional[_C.c_void_p]:
    return _context()._stream(None, *tensors)


# ---------------------------------------------------------------- transfers

def multi_layer_kv_transfer(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        key_value: torch.Tensor, key_value_ptrs: torch.Tensor | list[torch.Tensor], slot_mapping: torch.Tensor,
        paged_memory_device: torch.device, page_buffer_size: int, direction: TransferDirection,
        engine_kv_format: EngineKVFormat, block_size: int = 0, head_size: int = 0, skip_prefix_n_tokens: int = 0):
    """LMCache's multi_layer_kv_transfer: a chunk key_value [2, NL, T, row] (MLA [NL, T, HS]) to or from
    the engine's paged cache for tokens at slot_mapping (direction TransferDirection), through
    kvc_transfer_tokens."""
    _token_transfer(key_value, key_value_ptrs, slot_mapping, page_buffer_size, direction, engine_kv_format,
                    block_size, head_size, skip_prefix_n_tokens)


def _token_transfer(key_value: Array, key_value_ptrs: _Engine, slot_mapping: Index, page_buffer_size: int,
                    direction: int, engine_kv_format: int, block_size: int = 0, head_size: int = 0, skip_prefix_n_tokens: int = 0,
                    block_stride_elems: int = 0, mem_obj_kv_layout: int = _LAYOUT_UNSPECIFIED,
                    plane_slot_bytes: Optional[Sequence[int]] = None) -> None:
    """multi_layer_kv_transfer with kvcore's further arguments (kvcore.lmcache_extras)."""
    ctx = _context()
    fmt, d = _format(engine_kv_format), _direction(direction)
    kv = ctx._arr(key_value, "key_value", d == 1)
    if len(kv.shape) == 3:  # MLA [NL, T, HS]
        kvs, nl, t, row = 1, kv.shape[0], kv.shape[1], kv.shape[2]
    else:
        _require(kv, ndim=4)
        kvs, nl, t, row = kv.shape
    s = _slots(slot_mapping)
    layout = int(mem_obj_kv_layout)
    mla = fmt in _MLA
    fused = fmt in _FUSED
    if (not mla or fmt == int(_Format.NL_X_NB_BSV_BSS)) and block_size <= 0:
        raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"block_size {block_size}: a positive block size is "
                                                    "required for non-MLA formats and NL_X_NB_BSV_BSS (as LMCache)")
    bs = block_size if block_size > 0 else 1
    if fused:
        kv_size = 1
        if layout == _LAYOUT_SPLIT_KV_2LTD:
            nh = row // head_size if head_size else 1
            hs = 2 * (head_size or row)
        else:
            nh = row // (2 * head_size) if head_size else 1
            hs = 2 * head_size if head_size else row
    elif mla:
        kv_size, nh, hs = 1, 1, row
    else:
        kv_size = 2
        nh = row // head_size if head_size else 1
        hs = head_size or row
    # LMCache addresses format 0 in this op like format 1 with one pointer per layer ([2, PBS, D]).
    ptr_fmt = fmt
    pbs = page_buffer_size
    if pbs <= 0:  # LMCache's MLA callers pass 0: the pool size is then the highest slot's block
        pbs = (_max_slot(s) // bs + 1) * bs
    nb = pbs // bs
    if nb * bs != pbs:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"page_buffer_size {pbs} is not a multiple of block_size {bs}")
    shape = _abi.PageShape(kv_size=kv_size, element_size=kv.itemsize, nl=nl, nb=nb, bs=bs, nh=nh, hs=hs,
                           block_stride_elems=block_stride_elems)
    _planes(shape, plane_slot_bytes)
    nptr = _nptr(fmt, shape)
    # per-layer [2, PBS, D] buffers for format 0, as LMCache's per-token op takes them
    if fmt == 0 and (isinstance(key_value_ptrs, (list, tuple)) or
                     nl > 1 and _buf(key_value_ptrs, "key_value_ptrs").shape == (nl,)):
        ptr_fmt, nptr = int(EngineKVFormat.NL_X_TWO_NB_BS_NH_HS), nl
    table, nptr, _keep = _engine_table(key_value_ptrs, "key_value_ptrs", ptr_fmt, shape, nptr)
    if s.shape[0] != t:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"slot_mapping: {s.shape[0]} slots for {t} tokens")
    if kvs * row != kv_size * nh * hs and not (fused and layout == _LAYOUT_SPLIT_KV_2LTD):
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"key_value: shape {list(kv.shape)} does not match "
                                              f"{kv_size} plane(s) of {nh} x {hs}")
    a = _abi.TokenTransfer(ptr_fmt, d, shape, table, nptr, kv.ptr, layout, t, s.ptr, _abi.INDEX_INT64, t,
                           _past_end(skip_prefix_n_tokens, t), _stream(key_value))
    _lib_check(_lib.kvc_transfer_tokens(ctx._handle(), _C.byref(a)))


def multi_layer_kv_transfer_unilateral(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        key_value: torch.Tensor, key_value_ptrs: torch.Tensor | list[torch.Tensor], slot_mapping: torch.Tensor,
        paged_memory_device: torch.device, page_buffer_size: int, direction: TransferDirection,
        engine_kv_format: EngineKVFormat):
    """LMCache's multi_layer_kv_transfer_unilateral: multi_layer_kv_transfer for a K/V-list engine (formats
    LMCache calls it with), same arguments."""
    fmt = _format(engine_kv_format)
    if fmt in _MLA:
        _token_transfer(key_value, key_value_ptrs, slot_mapping, page_buffer_size, direction, fmt)
        return
    # SGLang MHA: 2*NL buffers [PBS, D], K list then V list (format 4 with the pool as one axis).
    ctx = _context()
    d = _direction(direction)
    kv = ctx._arr(key_value, "key_value", d == 1, ndim=4)
    _, nl, t, row = kv.shape
    s = _slots(slot_mapping)
    pbs = page_buffer_size if page_buffer_size > 0 else _max_slot(s) + 1
    shape = _abi.PageShape(kv_size=2, element_size=kv.itemsize, nl=nl, nb=pbs, bs=1, nh=1, hs=row)
    fmt4 = int(EngineKVFormat.TWO_X_NL_X_NBBS_NH_HS)
    table, _n, _keep = _engine_table(key_value_ptrs, "key_value_ptrs", fmt4, shape, 2 * nl)
    if s.shape[0] != t:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"slot_mapping: {s.shape[0]} slots for {t} tokens")
    a = _abi.TokenTransfer(format=fmt4, direction=d, shape=shape,
                           engine_ptrs=table, num_engine_ptrs=2 * nl, chunk=kv.ptr, num_tokens=t, slots=s.ptr,
                           slot_type=_abi.INDEX_INT64, num_slots=t, stream=_stream(key_value))
    _lib_check(_lib.kvc_transfer_tokens(ctx._handle(), _C.byref(a)))


def _layer_geometry(fmt: int, eng: Buf) -> Tuple[int, int, int, int, int]:
    """(kv_size, nb, bs, nh, hs) of one layer's engine tensor of format fmt."""
    sh = eng.shape
    n = len(sh)

    def bad() -> NoReturn:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{eng.name}: shape {list(sh)} is not a layer of "
                                              f"{_Format(fmt).name}")
    if fmt in (1, 6) and n == 5 and sh[0] == 2:
        return (2, sh[1], sh[2], sh[3], sh[4]) if fmt == 1 else (2, sh[1], sh[3], sh[2], sh[4])
    if fmt in (2, 7) and n == 5 and sh[1] == 2:
        return (2, sh[0], sh[2], sh[3], sh[4]) if fmt == 2 else (2, sh[0], sh[3], sh[2], sh[4])
    if fmt == 3 and n == 3:
        return (1, sh[0], sh[1], 1, sh[2])
    if fmt == 5 and n in (2, 3) and (n == 2 or sh[1] == 1):
        return (1, sh[0], 1, 1, sh[-1])
    if fmt == 14 and n == 3:  # [NB, BS, R] bytes
        return (1, sh[0], sh[1], 1, sh[2])
    if fmt == 15 and n == 6 and sh[0] == 2 and sh[3] == 1:  # [2, NB, NH, 1, BS, HS]
        return (2, sh[1], sh[4], sh[2], sh[5])
    if fmt in (10, 11, 12, 13) and n in (4, 5):
        cs = sh[3] * (sh[4] if n == 5 else 1)
        return (1, sh[0], sh[2], sh[1], cs) if fmt in (10, 12) else (1, sh[0], sh[1], sh[2], cs)
    bad()


def single_layer_kv_transfer(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        lmc_key_value_cache: torch.Tensor, vllm_key_value_cache: torch.Tensor, slot_mapping: torch.Tensor,
        direction: TransferDirection, engine_kv_format: EngineKVFormat, token_major: bool = False):
    """LMCache's single_layer_kv_transfer: one layer's chunk [2, T, row] (or [T, 2, row] with token_major)
    to or from one engine layer tensor at slot_mapping."""
    ctx = _context()
    fmt, d = _format(engine_kv_format), _direction(direction)
    if _lib.kvc_format_is_cross_layer(fmt) or _lib.kvc_format_is_kv_list(fmt):
        raise KvcoreError(_abi.KVC_ERR_FORMAT, f"single_layer_kv_transfer: {EngineKVFormat(fmt).name} has no "
                                               "single-layer tensor (use single_layer_kv_transfer_sgl for K/V lists)")
    if fmt in (16, 17):  # a tuple: (K, V) of [NB, BS, NH, HS], or planes [NB, BS, 1, width_p]
        planes = list(vllm_key_value_cache)
        bufs = [ctx._arr(p, f"vllm_key_value_cache[{i}]", d == 0, ndim=4) for i, p in enumerate(planes)]
        nb, bs = bufs[0].shape[0], bufs[0].shape[1]
        if fmt == 16:
            shape = _abi.PageShape(kv_size=2, element_size=bufs[0].itemsize, nl=1, nb=nb, bs=bs,
                                   nh=bufs[0].shape[2], hs=bufs[0].shape[3])
        else:
            lmc = ctx._arr(lmc_key_value_cache, "lmc_key_value_cache", d == 1)
            row = sum(b.nbytes // (nb * bs) for b in bufs)
            shape = _abi.PageShape(kv_size=1, element_size=lmc.itemsize, nl=1, nb=nb, bs=bs, nh=1,
                                   hs=row // lmc.itemsize)
            _planes(shape, [b.nbytes // (nb * bs) for b in bufs])
        ctx.transfer_layer(fmt, d, shape, planes, lmc_key_value_cache, slot_mapping, token_major=token_major)
        return
    eng = ctx._arr(vllm_key_value_cache, "vllm_key_value_cache", d == 0)
    kv_size, nb, bs, nh, hs = _layer_geometry(fmt, eng)
    shape = _abi.PageShape(kv_size=kv_size, element_size=eng.itemsize, nl=1, nb=nb, bs=bs, nh=nh, hs=hs)
    ctx.transfer_layer(fmt, d, shape, [vllm_key_value_cache], lmc_key_value_cache, slot_mapping,
                       token_major=token_major)


def single_layer_kv_transfer_sgl(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        lmc_key_value_cache: torch.Tensor, sgl_key_cache: torch.Tensor, sgl_value_cache: torch.Tensor,
        slot_mapping: torch.Tensor, direction: TransferDirection, token_major: bool = False):
    """LMCache's single_layer_kv_transfer_sgl: one layer's chunk to or from SGLang's separate key and value
    caches at slot_mapping."""
    ctx = _context()
    d = _direction(direction)
    k = ctx._arr(sgl_key_cache, "sgl_key_cache", d == 0, ndim=4)
    ctx._arr(sgl_value_cache, "sgl_value_cache", d == 0, shape=k.shape, dtypes=k.dtype)
    nb, bs, nh, hs = k.shape
    shape = _abi.PageShape(kv_size=2, element_size=k.itemsize, nl=1, nb=nb, bs=bs, nh=nh, hs=hs)
    ctx.transfer_layer(int(EngineKVFormat.TWO_X_NL_X_NB_BS_NH_HS), d, shape, [sgl_key_cache, sgl_value_cache],
                       lmc_key_value_cache, slot_mapping, token_major=token_major)


def load_and_reshape_flash(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        key_value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor,
        layer_idx: int):
    """LMCache's load_and_reshape_flash: key_value[:, layer_idx, t] <- the flash key/value caches at
    slot_mapping[t] (slots < 0 skipped)."""
    _context().load_and_reshape_flash(key_value, key_cache, value_cache, slot_mapping, layer_idx)


def reshape_and_cache_back_flash(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        key_value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slot_mapping: torch.Tensor,
        layer_idx: int):
    """LMCache's reshape_and_cache_back_flash: the flash key/value caches at slot_mapping[t] <- key_value[:,
    layer_idx, t]."""
    _context().reshape_and_cache_back_flash(key_value, key_cache, value_cache, slot_mapping, layer_idx)


def _chunk_layout(desc: PageBufferShapeDesc) -> int:
    """kv_interleaved: LMCache's L2TD objects [NL, 2, C, D] (kvc_chunk_layout_t 3)."""
    return _abi.CHUNK_INTERLEAVED_KV if getattr(desc, "kv_interleaved", False) else _abi.CHUNK_DEFAULT


def _page_shape(desc: PageBufferShapeDesc, fmt: Optional[int] = None, es: int = 0) -> _abi.PageShape:
    """kvcore's PageShape of an LMCache PageBufferShapeDesc. kv_size 0 (LMCache's default) is what
    LMCache's CPU path assumes (1 for MLA and the slab formats 12/13, else 2); formats 10 and 11
    described as LMCache does (kv_size 2, hs = HS, split K/V objects) become kvcore's fused rows
    (kv_size 1, hs = 2*HS) with split objects."""
    kv_size, hs = int(desc.kv_size), int(desc.hs)
    if fmt is not None:
        if kv_size == 0:
            kv_size = 1 if fmt in _MLA or (fmt in _FUSED and fmt not in _TWO_HS) else 2
        if fmt in _TWO_HS and kv_size == 2:
            kv_size, hs = 1, 2 * hs
    shape = _abi.PageShape(kv_size=kv_size, element_size=int(desc.element_size) or es, nl=desc.nl, nb=desc.nb,
                           bs=desc.bs, nh=desc.nh, hs=hs, block_stride_elems=desc.block_stride_elems)
    _planes(shape, getattr(desc, "plane_slot_bytes", None))  # format 17 (LMCache-Ascend's attribute)
    return shape


# Fused formats whose rows are each head's K half then V half (LMCache's kv_size 2 view of them).
_TWO_HS = (int(_Format.NL_X_NB_NH_BS_TWO_HS), int(_Format.NL_X_NB_BS_NH_TWO_HS))


def _element_size(desc: PageBufferShapeDesc, *containers: Any) -> int:
    """The element size when the descriptor leaves it 0: from desc.dtype (set_shape_desc_dtype),
    else from the first data tensor given."""
    if int(desc.element_size):
        return int(desc.element_size)
    dt = getattr(desc, "dtype", None)
    if dt is not None:
        if type(dt).__module__.startswith("torch"):
            import torch
            return int(torch.empty((), dtype=dt).element_size())
        return _np.dtype(dt).itemsize
    for c in containers:
        while isinstance(c, (list, tuple)) and c:
            c = c[0]
        if c is not None and not isinstance(c, (list, tuple, int, _np.integer)) and not _is_ptr_table(c):
            return _buf(c, "tensor").itemsize
    return 0


def multi_layer_block_kv_transfer(
        paged_buffer_ptrs_tensor: torch.Tensor | list,  # type: ignore[type-arg]  # LMCache's text
        lmcache_objects_ptrs: list[int] | list[torch.Tensor],
        block_ids: torch.Tensor | list[int], device: torch.device | str, direction: TransferDirection,
        shape_desc: PageBufferShapeDesc, lmcache_chunk_size: int, engine_kv_format: EngineKVFormat,
        skip_prefix_n_blocks: int) -> None:
    """LMCache's multi_layer_block_kv_transfer: whole blocks (block_ids) between the paged engine buffers
    and LMCache's chunk objects of lmcache_chunk_size tokens, through kvc_transfer_blocks."""
    ctx = _context()
    fmt, d = _format(engine_kv_format), _direction(direction)
    objs_in = list(lmcache_objects_ptrs)
    shape = _page_shape(shape_desc, fmt, _element_size(shape_desc, paged_buffer_ptrs_tensor, objs_in))
    layout = _chunk_layout(shape_desc)
    if fmt in _TWO_HS and int(shape_desc.kv_size) in (0, 2):  # LMCache's split K/V objects
        layout = _abi.CHUNK_SPLIT_KV
    table, nptr, _keep = _engine_table(paged_buffer_ptrs_tensor, "paged_buffer_ptrs_tensor", fmt, shape,
                                       _nptr(fmt, shape))
    row_elems = shape.kv_size * shape.nh * shape.hs  # one token of one layer, all planes
    objs = []
    for i, o in enumerate(objs_in):  # raw addresses (LMCache's contract) or the chunk tensors themselves
        if isinstance(o, (int, _np.integer)):
            objs.append(int(o))
            continue
        b = ctx._arr(o, f"lmcache_objects_ptrs[{i}]", d == 1)
        need = shape.nl * lmcache_chunk_size * row_elems * shape.element_size
        if b.nbytes != need:
            raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{b.name}: {b.nbytes} bytes, a chunk of {lmcache_chunk_size} "
                                                  f"tokens of this geometry is {need}")
        objs.append(b.ptr)
    otab = (_C.c_void_p * max(len(objs), 1))(*objs)
    if isinstance(block_ids, (list, tuple)):  # LMCache's CPU path takes a list of ints too
        block_ids = _np.asarray(block_ids, _np.int64)
    ids = _slots(block_ids, "block_ids")
    skip = _past_end(skip_prefix_n_blocks, ids.shape[0])
    a = _abi.BlockTransfer(format=fmt, direction=d, shape=shape, engine_ptrs=table, num_engine_ptrs=nptr,
                           objects=_C.addressof(otab), num_objects=len(objs), chunk_layout=layout,
                           chunk_tokens=lmcache_chunk_size,
                           block_ids=ids.ptr, block_id_type=_abi.INDEX_INT64, num_block_ids=ids.shape[0],
                           skip_prefix_blocks=skip, stream=_stream(block_ids))
    _lib_check(_lib.kvc_transfer_blocks(ctx._handle(), _C.byref(a)))


# ---------------------------------------------------------------- copies

def _addr_of(x: Union[int, Array], name: str) -> int:
    if isinstance(x, int):
        return x
    return int(_context()._arr(x, name).ptr)


def lmcache_memcpy_async(  # type: ignore[no-untyped-def]  # LMCache's has no return annotation
        dest: int | torch.Tensor, src: int | torch.Tensor, nbytes: int, direction: TransferDirection,
        host_buffer_offset: int, host_buffer_alignments: int):
    """LMCache's lmcache_memcpy_async: nbytes between dest and src split at host_buffer_offset by the host
    buffer alignments (kvc_memcpy_async)."""
    ctx = _context()
    ctx.memcpy_async_ptr(_addr_of(dest, "dest"), _addr_of(src, "src"), nbytes, _direction(direction),
                         host_buffer_offset, host_buffer_alignments,
                         stream=(ctx._stream(None, dest, src) or _C.c_void_p()).value)


def batched_memcpy(src_ptrs: list[int], dst_ptrs: list[int], sizes: list[int]) -> None:
    """The copies in list order, as LMCache does them: one batched call, or copy by copy (memmove)
    when an entry overlaps another's source or destination and the order decides the result."""
    dsts, srcs, sizes = list(dst_ptrs), list(src_ptrs), list(sizes)
    ctx = _context()
    try:
        ctx.batched_memcpy_ptr(dsts, srcs, sizes)
    except KvcoreError as e:
        if e.status != _abi.KVC_ERR_INVALID_ARG or "overlap" not in str(e):
            raise
        for i, (dst, src, n) in enumerate(zip(dsts, srcs, sizes)):
            if n:
                _lib_check(_lib.kvc_memcpy(ctx._handle(), _C.c_void_p(int(dst)), _C.c_void_p(int(src)),
                                           _count(n, f"sizes[{i}]")))


# ---------------------------------------------------------------- allocation
# Raw addresses, as LMCache hands them out: the HostBuffer behind each is kept here until its free_*.
_allocs = {}
_allocs_lock = _threading.Lock()


def _alloc(size: int, **kw: Any) -> int:
    b = _context().alloc_host(size, **kw)
    with _allocs_lock:
        _allocs[b.ptr] = b
    return int(b.ptr)


def _free(ptr: int, size: Optional[int] = None, name: Optional[str] = None) -> None:
    ptr = int(ptr)
    with _allocs_lock:
        b = _allocs.get(ptr)
        if b is None:
            raise KvcoreError(_abi.KVC_ERR_STATE, f"free of 0x{ptr:x}: not an address allocated by this module "
                                                  "(or already freed)")
        if size and _count(size, "size") != b.size:  # 0 / None: not given (LMCache's defaults)
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"free of 0x{ptr:x}: size {size}, allocated {b.size}")
        if name is not None and b.report.get("name") != name:
            raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"free of 0x{ptr:x}: shm name {name!r}, allocated as "
                                                        f"{b.report.get('name')!r}")
        del _allocs[ptr]


# LMCache's names and defaults (its CPU path's signatures; device_id and the sizes of the frees are
# accepted and ignored on the host side, a size that is given must match the allocation).
def alloc_pinned_ptr(size: int, device_id: int = 0) -> int:
    """LMCache's alloc_pinned_ptr: size bytes of pinned host memory as an address; free with
    free_pinned_ptr."""
    return _alloc(size, pinned=True)


def free_pinned_ptr(ptr: int) -> None:
    """Free an alloc_pinned_ptr allocation."""
    _free(ptr)


def alloc_hugepage_pinned_ptr(size: int, device_id: int = 0) -> int:
    """LMCache's alloc_hugepage_pinned_ptr: pinned host memory on 2 MiB pages as an address; free with
    free_hugepage_pinned_ptr."""
    return _alloc(size, pinned=True, hugepage=True)


def free_hugepage_pinned_ptr(ptr: int, size: int = 0) -> None:
    """Free an alloc_hugepage_pinned_ptr allocation (a size that is given must match)."""
    _free(ptr, size)


def alloc_numa_ptr(size: int, numa_id: int = 0) -> int:
    """LMCache's alloc_numa_ptr: host memory bound to NUMA node numa_id as an address; free with
    free_numa_ptr."""
    return _alloc(size, numa_node=numa_id, strict=True)


def free_numa_ptr(ptr: int, size: int | None = None) -> None:
    """Free an alloc_numa_ptr allocation (a size that is given must match)."""
    _free(ptr, size)


def alloc_pinned_numa_ptr(size: int, numa_id: int = 0) -> int:
    """LMCache's alloc_pinned_numa_ptr: pinned host memory on NUMA node numa_id as an address; free with
    free_pinned_numa_ptr."""
    return _alloc(size, pinned=True, numa_node=numa_id, strict=True)


def free_pinned_numa_ptr(ptr: int, size: int | None = None) -> None:
    """Free an alloc_pinned_numa_ptr allocation (a size that is given must match)."""
    _free(ptr, size)


def alloc_hugepage_pinned_numa_ptr(size: int, numa_id: int = 0) -> int:
    """LMCache's alloc_hugepage_pinned_numa_ptr: pinned 2 MiB-page host memory on NUMA node numa_id as an
    address; free with free_hugepage_pinned_numa_ptr."""
    # preferred policy: without free hugetlb pages this falls back to THP (as LMCache's fallback
    # returns a regular allocation), and then the NUMA binding is preferred too (one policy field)
    return _alloc(size, pinned=True, hugepage=True, numa_node=numa_id)


def free_hugepage_pinned_numa_ptr(ptr: int, size: int = 0) -> None:
    """Free an alloc_hugepage_pinned_numa_ptr allocation (a size that is given must match)."""
    _free(ptr, size)


_shm_seq = iter(range(1 << 62))


def alloc_shm_pinned_ptr(size: int, shm_name: str = "") -> int:
    """LMCache's alloc_shm_pinned_ptr: pinned POSIX shared memory (shm_name, or a fresh name for "") as an
    address; free with free_shm_pinned_ptr."""
    # "" asks for a segment of any name (LMCache's CPU path lets the system pick one)
    name = shm_name or f"/kvc-lmc-{_os.getpid()}-{next(_shm_seq)}"
    return _alloc(size, pinned=True, shared_name=name)


def free_shm_pinned_ptr(ptr: int, size: int = 0, shm_name: str = "") -> None:
    """Free an alloc_shm_pinned_ptr allocation and unlink its segment."""
    _free(ptr, size, shm_name or None)


def get_gpu_pci_bus_id(device_id: int = 0) -> str | None:
    """LMCache's get_gpu_pci_bus_id: the PCI bus id of GPU device_id (GPU backends only)."""
    bus: str | None = _context().pci_bus_id(device_id)
    return bus


# ---------------------------------------------------------------- CacheGen

def _like(src: Array, arr: _np.ndarray[Any, Any]) -> Array:
    """arr (numpy) in the container type of src: a torch tensor for torch input."""
    if type(src).__module__.startswith("torch"):
        import torch
        return torch.from_numpy(arr)
    return arr


def calculate_cdf(input_tensor: torch.Tensor, num_bins: int) -> torch.Tensor:
    """LMCache's calculate_cdf: per-(layer, channel) CDF of int8/uint8 symbols [L, T, C] as int16 [L, C,
    num_bins + 1]."""
    ctx = _context()
    s = ctx._arr(input_tensor, "input_tensor", dtypes=(_abi.DTYPE_I8, _abi.DTYPE_U8), ndim=3)
    out = _np.empty((s.shape[0], s.shape[2], _count(num_bins, "num_bins") + 1), _np.int16)
    ctx.cdf(input_tensor, num_bins, out=out)
    return _like(input_tensor, out)


def _dense(x: Array) -> Array:
    """x itself when C-contiguous, else a dense copy: LMCache's encoder passes the window
    encode_input[:, start:end, :], which is strided for chunks longer than one window."""
    if _buf(x, "input_sym").contiguous():
        return x
    return x.contiguous() if type(x).__module__.startswith("torch") else _np.ascontiguousarray(x)


def encode_fast_new(cdf, input_sym, output_buffer, output_lengths):  # type: ignore[no-untyped-def]  # as LMCache's
    """LMCache's encode_fast_new: arithmetic-code input_sym [L, T, C] under cdf into output_buffer [L, C,
    capacity] and output_lengths [L, C]."""
    _context().encode_streams(cdf, _dense(input_sym), output_buffer, output_lengths)


def decode_fast_new(cdf, bytestreams, lengths, output):  # type: ignore[no-untyped-def]  # as LMCache's
    """LMCache's decode_fast_new: decode per-stream buffers [L, C, capacity] with their lengths into output
    [L, T, C]."""
    o = _buf(output, "output")
    _context().decode(cdf, bytestreams, lengths, o.shape[1] if len(o.shape) == 3 else 0, out=output)


def decode_fast_prefsum(cdf, bytestreams, lengths_prefsum, output):  # type: ignore[no-untyped-def]  # as LMCache's
    """LMCache's decode_fast_prefsum: decode one packed byte array (stream k ends at lengths_prefsum[k])
    into output [L, T, C]."""
    o = _buf(output, "output")
    c, p = _buf(cdf, "cdf"), _buf(lengths_prefsum, "lengths_prefsum")
    if len(p.shape) == 1 and len(c.shape) == 3 and p.shape[0] == c.shape[0] * c.shape[1]:
        lengths_prefsum = lengths_prefsum.reshape(c.shape[0], c.shape[1])  # the flat [L*C] form
    _context().decode_packed(cdf, bytestreams, lengths_prefsum, o.shape[1] if len(o.shape) == 3 else 0, out=output)


# ---------------------------------------------------------------- RoPE

# A row of a cos/sin table is taken as a rotation by kvcore's kernel (it combines the two rows into
# one rotation and normalises it); LMCache multiplies by the rows as given. Rows within this of
# unit length (fp16/bf16 rounding of real cos/sin) take the kernel; any other table is applied as
# LMCache applies it, undo then redo with the rows as they are.
_UNIT_ROW_TOLERANCE = 1.0 / 64


def _rope_as_given(key: Array, keys: _abi.RopeKeys, old: Index, new: Index, table: Array, neox: bool) -> None:
    """LMCache's two steps, in float32, on the heads kvcore validated (keys: RopeKeys)."""
    n, nkv, hs, es = keys.num_tokens, keys.num_heads, keys.head_size, _buf(key, "key").itemsize
    rot, half = table.shape[1], table.shape[1] // 2
    if type(key).__module__.startswith("torch"):
        import torch
        k = torch.as_strided(key, (n, nkv, hs), (keys.token_stride, keys.head_stride, 1), key.storage_offset())
        t = torch.as_tensor(table).float()
        o, w = t[torch.as_tensor(old)], t[torch.as_tensor(new)]
        kf = k[..., :rot].float()
    else:
        k = _np.lib.stride_tricks.as_strided(key, (n, nkv, hs), (keys.token_stride * es, keys.head_stride * es, es))
        t = _np.asarray(table, _np.float32)
        o, w = t[_np.asarray(old)], t[_np.asarray(new)]
        kf = k[..., :rot].astype(_np.float32)
    oc, os_, nc, ns = o[:, None, :half], o[:, None, half:], w[:, None, :half], w[:, None, half:]
    xi, yi = (slice(0, half), slice(half, rot)) if neox else (slice(0, rot, 2), slice(1, rot, 2))
    x, y = kf[..., xi], kf[..., yi]
    xr, yr = x * oc + y * os_, y * oc - x * os_
    out = kf.clone() if hasattr(kf, "clone") else kf.copy()
    out[..., xi], out[..., yi] = xr * nc - yr * ns, yr * nc + xr * ns
    k[..., :rot] = out.to(k.dtype) if hasattr(out, "to") else out.astype(k.dtype)


def _rope(old_positions: Index, new_positions: Index, key: Array, cos_sin_cache: Array, is_neox: bool,
          head_size: Optional[int] = None, head_stride: Optional[int] = None) -> None:
    ctx = _context()
    keys, _k = ctx._keys(key, head_size, head_stride)
    tb = ctx._arr(cos_sin_cache, "cos_sin_cache", ndim=2)
    pos = [ctx._index(old_positions, "old_positions", keys.num_tokens),
           ctx._index(new_positions, "new_positions", keys.num_tokens)]
    if keys.num_tokens and tb.device[0] == "cpu" and pos[0].device[0] == "cpu" and pos[1].device[0] == "cpu":
        t = _np.asarray(cos_sin_cache if not type(cos_sin_cache).__module__.startswith("torch")
                        else cos_sin_cache.float().numpy(), _np.float64)
        idx = [_np.ctypeslib.as_array((_C.c_int64 * keys.num_tokens).from_address(p.ptr)) for p in pos]
        if min(int(i.min()) for i in idx) >= 0 and max(int(i.max()) for i in idx) < tb.shape[0] and \
                tb.shape[1] % 2 == 0 and tb.shape[1] <= keys.head_size:
            half = tb.shape[1] // 2
            rows = t[_np.concatenate(idx)]
            norm2 = rows[:, :half] ** 2 + rows[:, half:] ** 2
            if not (_np.abs(norm2 - 1) <= _UNIT_ROW_TOLERANCE).all():
                _rope_as_given(key, keys, idx[0].copy(), idx[1].copy(), cos_sin_cache, bool(is_neox))
                return
    # real cos/sin rows (and every error: positions, rot_dim, dtypes) go to kvcore's kernel
    ctx.rope_k_fused(key, old_positions, new_positions, cos_sin_cache, is_neox=bool(is_neox), head_size=head_size,
                     head_stride=head_stride)


def rotary_embedding_k_fused(old_positions: torch.Tensor, new_positions: torch.Tensor, key: torch.Tensor,
                             head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """LMCache's rotary_embedding_k_fused: re-rotate key [T, NKV*HS] in place from old_positions to
    new_positions through cos_sin_cache."""
    k = _buf(key, "key")
    if k.shape and head_size != k.shape[-1]:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"head_size {head_size} differs from key.size(-1) {k.shape[-1]} "
                                              "(use rotary_embedding_k_fused_strided for strided heads)")
    _rope(old_positions, new_positions, key, cos_sin_cache, is_neox)


# ---------------------------------------------------------------- recorders

def record_event_on_stream(cuda_stream_ptr: int, event_type_name: str, session_id: str, str_metadata: dict[str, str],
                           int_metadata: dict[str, int]) -> None:
    """LMCache's record_event_on_stream: record a named event of session_id with string and integer
    metadata, in stream order."""
    _context().record_event(event_type_name, session_id, str_metadata, int_metadata, stream=cuda_stream_ptr)


def drain_recorded_events() -> list[tuple[str, str, float, dict[str, str], dict[str, int]]]:
    """LMCache's drain_recorded_events: every event recorded so far, in order, as (name, session_id,
    timestamp, str_meta, int_meta)."""
    events: list[tuple[str, str, float, dict[str, str], dict[str, int]]] = _context().drain_events()
    return events


def record_completion_on_stream(cuda_stream_ptr: int, kind: str, payload: bytes) -> None:
    """LMCache's record_completion_on_stream: record a completion of `kind` with payload bytes, in stream
    order."""
    _context().record_completion(kind, payload, stream=cuda_stream_ptr)


def drain_recorded_completions() -> list[tuple[str, bytes]]:
    """LMCache's drain_recorded_completions: every completion recorded so far, in order, as (kind, payload)."""
    done: list[tuple[str, bytes]] = _context().drain_completions()
    return done
