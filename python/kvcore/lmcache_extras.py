# SPDX-License-Identifier: BSD-3-Clause
"""LMCache-shaped ops that LMCache at the commit kvcore follows (kvcore.lmcache.LMCACHE_COMMIT) does
not have, kept in kvcore's own API so that kvcore.lmcache_ops shows exactly LMCache's surface
(docs/LMCACHE.md, "Which surface"): the object-group and CacheBlend plan executors with their
records, PCIe BAR mapping, RoPE over strided heads, the format predicates beyond LMCache's four,
MemObjKVLayout, and multi_layer_kv_transfer with the chunk-layout, padded-block and plane
arguments (formats 10-17). They run on the same module-level Context as kvcore.lmcache_ops."""
import ctypes as _C
import enum as _enum
from typing import Any, List, Optional, Sequence

import numpy as _np

from . import KvcoreError, _abi
from ._lib import check as _lib_check, lib as _lib
from .enums import Format as _Format
from .lmcache_ops import _allocs, _allocs_lock, _chunk_layout, _context, _direction, _fact, _format, _free, \
    _nptr, _page_shape, _rope, _stream, _token_transfer
from .transfer import _FUSED, _MLA

__all__ = [
    "context", "MemObjKVLayout", "multi_layer_kv_transfer", "is_hnd", "is_fused_packed", "is_two_major",
    "is_pbs_fused", "is_kv_second_tuple", "StagingCopy", "LaunchVar", "BatchStep", "KernelGroupSpec",
    "CBGroupSpec", "execute_object_group_transfer", "execute_cb_retrieve_plan_flat", "alloc_pcie_bar_ptr",
    "free_pcie_bar_ptr", "rotary_embedding_k_fused_strided",
]


def context() -> Any:
    """The Context every op of kvcore.lmcache_ops and of this module runs on (created on first use)."""
    return _context()


class MemObjKVLayout(_enum.IntEnum):
    """How multi_layer_kv_transfer's chunk holds a fused format's rows (LMCache's later MemObjKVLayout)."""
    UNSPECIFIED = 0
    SPLIT_KV_2LTD = 1
    FUSED_PACKED = 2


def multi_layer_kv_transfer(key_value: Any, key_value_ptrs: Any, slot_mapping: Any, paged_memory_device: Any,
                            page_buffer_size: int, direction: Any, engine_kv_format: Any, block_size: int = 0,
                            head_size: int = 0, skip_prefix_n_tokens: int = 0, block_stride_elems: int = 0,
                            mem_obj_kv_layout: int = MemObjKVLayout.UNSPECIFIED,
                            plane_slot_bytes: Optional[Sequence[int]] = None) -> None:
    """kvcore.lmcache_ops.multi_layer_kv_transfer with three further arguments: block_stride_elems
    (padded blocks, formats 3 and 10-14), mem_obj_kv_layout (a fused format's chunk as split K/V
    planes or packed rows) and plane_slot_bytes (format 17's per-plane row bytes)."""
    _token_transfer(key_value, key_value_ptrs, slot_mapping, page_buffer_size, direction, engine_kv_format,
                    block_size, head_size, skip_prefix_n_tokens, block_stride_elems, int(mem_obj_kv_layout),
                    plane_slot_bytes)


def is_hnd(engine_kv_format: int) -> bool:
    """Whether the format puts heads outside tokens in a block (HND; kvc_format_is_hnd)."""
    return _fact(engine_kv_format, "hnd")


def is_fused_packed(engine_kv_format: int) -> bool:
    """Whether the format fuses K|V in the trailing dimension (kvc_format_is_fused_packed)."""
    return _fact(engine_kv_format, "fused_packed")


def is_two_major(engine_kv_format: int) -> bool:
    """Whether the format has the K/V axis outside the block axis (kvc_format_is_two_major)."""
    return _fact(engine_kv_format, "two_major")


def is_pbs_fused(engine_kv_format: int) -> bool:
    """Whether the format folds blocks and tokens into one axis (kvc_format_is_pbs_fused)."""
    return _fact(engine_kv_format, "pbs_fused")


def is_kv_second_tuple(engine_kv_format: int) -> bool:
    """Whether each layer of the format is a tuple of tensors (kvc_format_is_kv_second_tuple)."""
    return _fact(engine_kv_format, "kv_second_tuple")


# ---------------------------------------------------------------- plan executors (docs/PLANS.md)

def _record(name: Any, fields: Any) -> Any:
    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        if len(args) > len(fields):
            raise TypeError(f"{name} takes {len(fields)} fields, got {len(args)}")
        vals = dict(zip(fields, args))
        for k, v in kw.items():
            if k not in fields or k in vals:
                raise TypeError(f"{name}: unexpected or repeated field {k!r}")
            vals[k] = v
        for f in fields:
            setattr(self, f, vals.get(f, 0))

    def __repr__(self: Any) -> str:
        return f"{name}(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in fields) + ")"
    return type(name, (), {"__init__": __init__, "__repr__": __repr__, "__slots__": fields + ("__dict__",)})


StagingCopy = _record("StagingCopy", ("dest", "src", "nbytes", "host_offset"))
LaunchVar = _record("LaunchVar", ("group_idx", "block_ids_offset", "total_blocks", "num_objects",
                                  "skip_prefix_n_blocks"))
BatchStep = _record("BatchStep", ("staging", "launches"))
KernelGroupSpec = _record("KernelGroupSpec", ("paged_buffer_ptrs", "lmcache_objects_ptrs", "shape_desc",
                                              "lmcache_chunk_size", "engine_kv_format", "block_ids_base",
                                              "block_ids_capacity"))
CBGroupSpec = _record("CBGroupSpec", (
    "paged_kv_ptrs", "temp_buffer_ptrs", "num_layers", "slot_tokens", "hidden_elems", "element_size",
    "engine_kv_format", "page_buffer_size", "block_size", "head_size", "slot_mapping_base",
    "slot_mapping_capacity", "cos_sin_cache", "rot_dim", "rope_num_kv_heads", "rope_head_stride",
    "key_scalar_type", "is_neox", "rope_base_offset"))


def _address(x: Any, name: Any) -> Any:
    """An address given as an int or as an array (its first byte)."""
    return int(x) if isinstance(x, int) else _context()._arr(x, name).ptr


def _addresses(objs: Any, name: Any) -> Any:
    """A ctypes array of addresses from a list of ints or arrays."""
    return (_C.c_void_p * max(len(objs), 1))(*[_address(o, f"{name}[{i}]") for i, o in enumerate(objs)])


def execute_object_group_transfer(direction: Any, device: Any, host_buffer_alignment: Any, kernel_group_specs: Any,
                                  batch_steps: Any) -> None:
    """LMCache's plan executor: kvc_execute_object_plan (docs/PLANS.md). Per step, the staging
    copies (before the launches for H2D, after them for D2H) and the block-transfer launches, in
    order, in one call that validates the whole plan before the first copy."""
    ctx = _context()
    d = _direction(direction)
    keep = []  # ctypes arrays the plan points into
    groups = (_abi.KernelGroup * max(len(kernel_group_specs), 1))()
    for gi, g in enumerate(kernel_group_specs):
        where = f"kernel_group_specs[{gi}]"
        fmt = _format(g.engine_kv_format)
        shape = _page_shape(g.shape_desc, fmt)
        objs = _addresses(list(g.lmcache_objects_ptrs), f"{where}.lmcache_objects_ptrs")
        keep.append(objs)
        groups[gi] = _abi.KernelGroup(fmt, shape, _address(g.paged_buffer_ptrs, f"{where}.paged_buffer_ptrs"),
                                      _nptr(fmt, shape), _C.addressof(objs),
                                      len(g.lmcache_objects_ptrs), _chunk_layout(g.shape_desc), int(g.lmcache_chunk_size),
                                      _address(g.block_ids_base, f"{where}.block_ids_base"),
                                      int(g.block_ids_capacity))
    steps = (_abi.BatchStep * max(len(batch_steps), 1))()
    for si, step in enumerate(batch_steps):
        copies = (_abi.StagingCopy * max(len(step.staging), 1))(*[
            _abi.StagingCopy(_address(c.dest, "dest"), _address(c.src, "src"), int(c.nbytes), int(c.host_offset))
            for c in step.staging])
        launches = (_abi.LaunchVar * max(len(step.launches), 1))(*[
            _abi.LaunchVar(int(lv.group_idx), int(lv.block_ids_offset), int(lv.total_blocks), int(lv.num_objects),
                           int(lv.skip_prefix_n_blocks)) for lv in step.launches])
        keep += [copies, launches]
        steps[si] = _abi.BatchStep(_C.addressof(copies), len(step.staging), _C.addressof(launches),
                                   len(step.launches))
    plan = _abi.ObjectPlan(0, d, int(host_buffer_alignment), _C.addressof(groups), len(kernel_group_specs),
                           _C.addressof(steps), len(batch_steps), _stream())
    _lib_check(_lib.kvc_execute_object_plan(ctx._handle(), _C.byref(plan)))


# at::ScalarType of CBGroupSpec.key_scalar_type -> kvcore dtype
_SCALAR_TYPES = {5: _abi.DTYPE_F16, 6: _abi.DTYPE_F32, 15: _abi.DTYPE_BF16}


def _plan_table(t: Any, name: Any, width: Any) -> Any:
    """An int64 [n, width] table (numpy array or list of rows), C-contiguous."""
    a = _np.ascontiguousarray(_np.asarray(t, dtype=_np.int64))
    if a.size == 0:
        a = a.reshape(0, width)
    if a.ndim != 2 or a.shape[1] != width:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{name} table must be [n, {width}], got shape {list(a.shape)}")
    return a


def _cb_group(g: Any, gi: Any, keep: Any) -> Any:
    where = f"group_specs[{gi}]"
    fmt = _format(g.engine_kv_format)
    nl, hidden, head, bs, es = (int(g.num_layers), int(g.hidden_elems), int(g.head_size), int(g.block_size),
                                int(g.element_size))
    # The scatter's geometry, as multi_layer_kv_transfer derives it (fused rows: each head K|V).
    if fmt in _FUSED:
        kv_size, hs = 1, 2 * head
    elif fmt in _MLA:
        kv_size, hs = 1, hidden
    else:
        kv_size, hs = 2, head
    if hs <= 0 or bs <= 0 or hidden % hs or int(g.page_buffer_size) % bs:
        raise KvcoreError(_abi.KVC_ERR_SHAPE, f"{where}: hidden_elems {hidden}, head_size {head}, block_size {bs} "
                                              f"and page_buffer_size {g.page_buffer_size} do not fit together")
    ptr_fmt = fmt
    if fmt == int(_Format.NB_NL_TWO_BS_NH_HS):  # NL layer pointers [2, PBS, D], as in the per-token op
        ptr_fmt = int(_Format.NL_X_TWO_NB_BS_NH_HS)
    shape = _abi.PageShape(kv_size=kv_size, element_size=es, nl=nl, nb=int(g.page_buffer_size) // bs, bs=bs,
                           nh=hidden // hs, hs=hs)
    slots = _addresses(list(g.temp_buffer_ptrs), f"{where}.temp_buffer_ptrs")
    keep.append(slots)
    key_dtype = _SCALAR_TYPES.get(int(g.key_scalar_type))
    table = _abi.RopeTable(None, key_dtype or 0, 0, int(g.rot_dim))
    css = g.cos_sin_cache
    if not (isinstance(css, (int, _np.integer)) and css == 0):
        if key_dtype is None:
            raise KvcoreError(_abi.KVC_ERR_DTYPE, f"{where}.key_scalar_type {g.key_scalar_type}: kvcore rotates "
                                                  "f16 (5), f32 (6) and bf16 (15) keys")
        if isinstance(css, (int, _np.integer)):
            rows = getattr(g, "max_position", None)
            if rows is None:
                raise KvcoreError(_abi.KVC_ERR_INVALID_ARG, f"{where}.cos_sin_cache is a bare address: set "
                                                            "max_position on the CBGroupSpec (the table's rows) "
                                                            "or pass the table itself")
            table.data, table.max_position = css, int(rows)
        else:
            t = _context()._arr(css, f"{where}.cos_sin_cache", ndim=2)
            table.data, table.dtype, table.max_position = t.ptr, t.dtype, t.shape[0]
    return _abi.CbGroup(ptr_fmt, shape, _address(g.paged_kv_ptrs, f"{where}.paged_kv_ptrs"),
                        _lib.kvc_format_ptr_count(ptr_fmt, nl), _C.addressof(slots), len(g.temp_buffer_ptrs),
                        int(g.slot_tokens), _address(g.slot_mapping_base, f"{where}.slot_mapping_base"),
                        int(g.slot_mapping_capacity), table, key_dtype or 0, int(g.rope_num_kv_heads),
                        int(g.rope_head_stride), int(g.rope_base_offset),
                        _abi.ROPE_NEOX if g.is_neox else _abi.ROPE_GPTJ)


def execute_cb_retrieve_plan_flat(device: Any, host_buffer_alignment: Any, group_specs: Any, staging: Any,
                                  ropes: Any, scatters: Any, step_offsets: Any) -> None:
    """LMCache's CacheBlend retrieve: kvc_execute_cb_plan (docs/PLANS.md). Tables are int64:
    staging [n, 4] (dest, src, nbytes, host_offset; or a list of StagingCopy), ropes [n, 4]
    (group_idx, slot_idx, old_st, cur_st), scatters [n, 4] (group_idx, slot_idx,
    slot_mapping_offset, n_tok), step_offsets [n_steps, 3] (cumulative exclusive ends)."""
    ctx = _context()
    keep: List[Any] = []
    if isinstance(staging, (list, tuple)) and staging and not isinstance(staging[0], (list, tuple)):
        staging = [[_address(c.dest, "dest"), _address(c.src, "src"), int(c.nbytes), int(c.host_offset)]
                   for c in staging]
    tabs = [_plan_table(t, n, w) for t, n, w in ((staging, "staging", 4), (ropes, "ropes", 4),
                                                  (scatters, "scatters", 4), (step_offsets, "step_offsets", 3))]
    groups = (_abi.CbGroup * max(len(group_specs), 1))(*[_cb_group(g, i, keep) for i, g in enumerate(group_specs)])
    plan = _abi.CbPlan(0, int(host_buffer_alignment), _C.addressof(groups), len(group_specs),
                       *[v for t in tabs for v in (t.ctypes.data, t.shape[0])], _stream())
    _lib_check(_lib.kvc_execute_cb_plan(ctx._handle(), _C.byref(plan)))


# ---------------------------------------------------------------- PCIe BAR memory and strided RoPE

def alloc_pcie_bar_ptr(bar_path: Any, size: Any, bar_offset: Any) -> Any:
    """LMCache's alloc_pcie_bar_ptr: size bytes at bar_offset of a PCIe BAR's sysfs resource file, mapped
    and registered as I/O memory, as an address; free with free_pcie_bar_ptr."""
    # LMCache: mmap of the sysfs resource file, registered Mapped | IoMemory
    b = _context().map_file(bar_path, size, bar_offset, pinned=True)
    with _allocs_lock:
        _allocs[b.ptr] = b
    return b.ptr


def free_pcie_bar_ptr(ptr: Any, size: Any) -> None:
    """Unmap an alloc_pcie_bar_ptr mapping."""
    _free(ptr, size)


def rotary_embedding_k_fused_strided(old_positions: Any, new_positions: Any, key: Any, head_size: Any,
                                     head_stride: Any, cos_sin_cache: Any, is_neox: Any) -> None:
    """LMCache's rotary_embedding_k_fused_strided: rotary_embedding_k_fused for heads head_stride elements
    apart (fused K/V rows)."""
    _rope(old_positions, new_positions, key, cos_sin_cache, is_neox, head_size=head_size, head_stride=head_stride)
