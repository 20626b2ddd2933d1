# SPDX-License-Identifier: BSD-3-Clause
"""kvcore.lmcache_ops as LMCache calls it: names, enum integers, types, pointer-table transfers on
LMCache's own cross-backend test fixtures, and the ops kvcore does not have yet."""
import inspect

import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
import kvcore.lmcache_extras as lmc_ext
from conftest import raises_status, shape_desc
from test_transfer import engine_for, NL, NB, BS

rng = np.random.default_rng(3)

# kvcore.lmcache_extras' functions, with their parameters in order (defaults where they have them).
# LMCache's own functions in kvcore.lmcache_ops are compared with LMCache's fallback itself, names,
# defaults and annotations, by tests/lmcache/test_surface.py.
EXTRA_SIGNATURES = {
    "multi_layer_kv_transfer": "key_value, key_value_ptrs, slot_mapping, paged_memory_device, page_buffer_size, "
                               "direction, engine_kv_format, block_size=0, head_size=0, skip_prefix_n_tokens=0, "
                               "block_stride_elems=0, mem_obj_kv_layout=0, plane_slot_bytes=None",
    "execute_object_group_transfer": "direction, device, host_buffer_alignment, kernel_group_specs, batch_steps",
    "execute_cb_retrieve_plan_flat": "device, host_buffer_alignment, group_specs, staging, ropes, scatters, "
                                     "step_offsets",
    "alloc_pcie_bar_ptr": "bar_path, size, bar_offset", "free_pcie_bar_ptr": "ptr, size",
    "rotary_embedding_k_fused_strided": "old_positions, new_positions, key, head_size, head_stride, cos_sin_cache, "
                                        "is_neox",
    "context": "",
    **{name: "engine_kv_format" for name in ("is_hnd", "is_fused_packed", "is_two_major", "is_pbs_fused",
                                             "is_kv_second_tuple")},
}


@pytest.mark.parametrize("name", sorted(EXTRA_SIGNATURES))
def test_extra_signature(name):
    sig = inspect.signature(getattr(lmc_ext, name))
    params = []
    for p in sig.parameters.values():
        params.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={int(p.default)}"
                      if isinstance(p.default, bool) is False and isinstance(p.default, int) else f"{p.name}={p.default}")
    assert ", ".join(params) == EXTRA_SIGNATURES[name]


def test_lmcache_ops_has_lmcache_names_only():
    """Every public name of lmcache_ops is in __all__ and the extras are not there (LMCache's own
    test requires each of c_ops' callables to exist in its fallback)."""
    public = {n for n, o in vars(c_ops).items() if not n.startswith("_") and getattr(o, "__module__", None) ==
              c_ops.__name__}
    assert public == set(c_ops.__all__)
    assert not set(lmc_ext.__all__) - {"multi_layer_kv_transfer"} & set(c_ops.__all__)


def test_enums_and_types():
    assert (int(c_ops.TransferDirection.H2D), int(c_ops.TransferDirection.D2H)) == (0, 1)
    assert c_ops.TransferDirection.D2H == 1
    assert c_ops.GPUKVFormat is c_ops.EngineKVFormat
    assert [int(m) for m in c_ops.EngineKVFormat] == list(range(11))  # LMCache's 0-10; 11-17 are kvcore.Format's
    for m in c_ops.EngineKVFormat:
        assert m.name == kvcore.format_name(int(m))
    assert [int(m) for m in lmc_ext.MemObjKVLayout] == [0, 1, 2]
    d = c_ops.PageBufferShapeDesc()
    assert (d.kv_size, d.nl, d.nb, d.bs, d.nh, d.hs, d.element_size, d.block_stride_elems, d.dtype) == \
        (0, 0, 0, 0, 0, 0, 0, 0, None)
    d.kv_size, d.nl, d.nb, d.bs, d.nh, d.hs, d.element_size, d.block_stride_elems = 2, 1, 2, 3, 4, 5, 2, 0
    d.kv_interleaved = True  # py::dynamic_attr: attributes of later LMCache versions may be added
    assert "nb=2" in repr(d)
    lv = lmc_ext.LaunchVar(0, 8, 4, 2, 1)
    assert (lv.group_idx, lv.block_ids_offset, lv.total_blocks, lv.num_objects, lv.skip_prefix_n_blocks) == \
        (0, 8, 4, 2, 1)
    st = lmc_ext.BatchStep(staging=[lmc_ext.StagingCopy(1, 2, 3, 4)], launches=[lv])
    assert st.staging[0].host_offset == 4
    assert len(lmc_ext.CBGroupSpec.__init__.__code__.co_varnames) and lmc_ext.CBGroupSpec().is_neox == 0
    with pytest.raises(TypeError):
        lmc_ext.StagingCopy(1, 2, 3, 4, 5)


def test_predicates():
    assert [f for f in range(18) if c_ops.is_cross_layer(f)] == [0, 8]
    assert [f for f in range(18) if c_ops.is_kv_list(f)] == [4, 9]
    assert [f for f in range(18) if c_ops.is_layer_list(f)] == [1, 2, 3, 5, 6, 7] + list(range(10, 18))
    assert [f for f in range(18) if c_ops.is_mla(f)] == [3, 5, 14, 17]
    # LMCache's format_facts for the rest (engine_kv_format.h)
    assert [f for f in range(18) if lmc_ext.is_hnd(f)] == [6, 7, 8, 10, 12, 15]
    assert [f for f in range(18) if lmc_ext.is_two_major(f)] == [1, 6, 15]
    assert [f for f in range(18) if lmc_ext.is_fused_packed(f)] == [10, 11, 12, 13]
    assert [f for f in range(18) if lmc_ext.is_pbs_fused(f)] == [5]
    assert [f for f in range(18) if lmc_ext.is_kv_second_tuple(f)] == [16, 17]
    for f in range(18):
        assert c_ops.is_cross_layer(f) + c_ops.is_kv_list(f) + c_ops.is_layer_list(f) == 1
    with raises_status("KVC_ERR_FORMAT"):
        c_ops.is_mla(18)


def ptrs(tensors, xp):
    ts = [xp.asarray(t) for t in tensors]
    addrs = [t.ctypes.data if xp.name == "numpy" else t.data_ptr() for t in ts]
    return ts, xp.asarray(np.array(addrs, np.uint64 if xp.name == "numpy" else np.int64))


@pytest.mark.parametrize("fmt,block_size", [(0, 1), (1, 1), (2, 5), (3, 0), (5, 0)])
def test_multi_layer_kv_transfer_fixture(xp, fmt, block_size):
    """LMCache's cross-backend fixture: NL 2, T 4, D 16, PBS 10, fp32, slots [0, 2, 5, 9]; buffers [2,10,16], [2,2,5,16] or [10,16]."""
    nl, t, d, pbs = 2, 4, 16, 10
    shape = {0: (2, pbs, d), 1: (2, pbs, d), 2: (2, 2, 5, d), 3: (pbs, d), 5: (pbs, 1, d)}[fmt]
    if fmt == 3:
        shape = (2, 5, d)  # [NB, BS, HS] with BS 5 for the MLA pool of 10 slots
    layers = [rng.standard_normal(shape).astype(np.float32) for _ in range(nl)]
    planes = 1 if fmt in (3, 5) else 2
    slots = np.array([0, 2, 5, 9], np.int64)
    kv = np.zeros((planes, nl, t, d), np.float32)
    ts, table = ptrs(layers, xp)
    kvx = xp.asarray(kv)
    c_ops.multi_layer_kv_transfer(kvx, table, xp.asarray(slots), "cpu", pbs, c_ops.TransferDirection.D2H, fmt,
                                  block_size)
    got = xp.tonumpy(kvx)
    for l in range(nl):
        flat = layers[l].reshape(2, 2, 5, d).transpose(1, 0, 2, 3).reshape(2, pbs, d) if fmt == 2 else \
            layers[l].reshape(planes, pbs, d)
        for ti, s in enumerate(slots):
            for p in range(planes):
                np.testing.assert_array_equal(got[p, l, ti], flat[p, s])
    # round trip into zeroed buffers
    for x in ts:
        x[...] = 0
    c_ops.multi_layer_kv_transfer(kvx, table, xp.asarray(slots), "cpu", pbs, c_ops.TransferDirection.H2D, fmt,
                                  block_size)
    for l in range(nl):
        back = xp.tonumpy(ts[l]).reshape(-1)
        orig = layers[l].reshape(-1)
        assert (back[back != 0] == orig[back != 0]).all() and np.count_nonzero(back) == np.count_nonzero(
            got[:, l])


@pytest.mark.parametrize("fmt", [1, 3, 5])
def test_unilateral(xp, fmt):
    nl, t, d, pbs = 2, 4, 16, 10
    slots = np.array([1, 3, 4, 7], np.int64)
    if fmt == 1:  # SGLang MHA: 2*NL buffers [PBS, D]
        bufs = [rng.standard_normal((pbs, d)).astype(np.float32) for _ in range(2 * nl)]
        planes = 2
    else:
        bufs = [rng.standard_normal((pbs, d) if fmt == 3 else (pbs, 1, d)).astype(np.float32) for _ in range(nl)]
        planes = 1
    ts, table = ptrs(bufs, xp)
    kv = xp.asarray(np.zeros((planes, nl, t, d), np.float32))
    c_ops.multi_layer_kv_transfer_unilateral(kv, table, xp.asarray(slots), "cpu", pbs, 1, fmt)
    got = xp.tonumpy(kv)
    for p in range(planes):
        for l in range(nl):
            src = bufs[p * nl + l].reshape(pbs, d)
            np.testing.assert_array_equal(got[p, l], src[slots])


@pytest.mark.parametrize("fmt", [f for f in range(17) if f != 14])
def test_block_transfer_pointer_mode(xp, fmt):
    e, shape, view, planes, row = engine_for(fmt, np.float32)
    desc = shape_desc(kv_size=shape.kv_size, nl=NL, nb=NB, bs=BS, nh=shape.nh, hs=shape.hs,
                                     element_size=4)
    ts, table = ptrs(e, xp)
    ctok = 2 * BS
    objs = [xp.asarray(np.zeros((planes, NL, ctok, row), np.float32)) for _ in range(2)]
    optrs = [o.ctypes.data if xp.name == "numpy" else o.data_ptr() for o in objs]
    ids = np.array([5, 0, 3, 2], np.int64)
    c_ops.multi_layer_block_kv_transfer(table, optrs, xp.asarray(ids), "cpu", c_ops.TransferDirection.D2H, desc,
                                        ctok, fmt, 1)
    for f, b in enumerate(ids):
        o, j = divmod(f, 2)
        got = xp.tonumpy(objs[o])
        for l in range(NL):
            for p in range(planes):
                want = view(l, p)[b].reshape(BS, -1) if f >= 1 else np.zeros((BS, row), np.float32)
                np.testing.assert_array_equal(got[p, l, j * BS:(j + 1) * BS], want)


@pytest.mark.parametrize("fmt", [0, 1, 2, 6, 7, 8, 9, 15, 16])
def test_block_transfer_kv_interleaved(xp, fmt):
    """kv_interleaved: L2TD objects [NL, 2, C, row], each layer's K rows then its V rows."""
    e, shape, view, planes, row = engine_for(fmt, np.float32)
    rng = np.random.default_rng(fmt)
    for x in e:
        x[...] = rng.standard_normal(x.shape)
    desc = shape_desc(kv_size=2, nl=NL, nb=NB, bs=BS, nh=shape.nh, hs=shape.hs, element_size=4,
                                     kv_interleaved=True)
    ts, table = ptrs(e, xp)
    ctok = 2 * BS
    objs = [xp.asarray(np.zeros((NL, 2, ctok, row), np.float32)) for _ in range(2)]
    optrs = [o.ctypes.data if xp.name == "numpy" else o.data_ptr() for o in objs]
    ids = np.array([5, 0, 3, 2], np.int64)
    c_ops.multi_layer_block_kv_transfer(table, optrs, xp.asarray(ids), "cpu", c_ops.TransferDirection.D2H, desc,
                                        ctok, fmt, 0)
    for f, b in enumerate(ids):
        o, j = divmod(f, 2)
        got = xp.tonumpy(objs[o])
        for l in range(NL):
            for p in range(2):
                np.testing.assert_array_equal(got[l, p, j * BS:(j + 1) * BS], view(l, p)[b].reshape(BS, -1))


def test_kv_interleaved_needs_two_planes():
    d = shape_desc(kv_size=1, nl=1, nb=1, bs=16, nh=1, hs=8, element_size=2, kv_interleaved=True)
    obj = np.zeros((1, 16, 8), np.float16)
    with raises_status("KVC_ERR_FORMAT"):  # MLA: one plane, nothing to interleave
        c_ops.multi_layer_block_kv_transfer(np.array([np.zeros((1, 16, 8), np.float16).ctypes.data], np.int64),
                                            [obj.ctypes.data], np.zeros(1, np.int64), "cpu", 1, d, 16, 3, 0)


def test_dsa_indexer_format_14(xp):
    """LMCache's test_blocked_roundtrip: gather token rows [values | scale] from blocked pages, scatter
    them to slots of another intra-block alignment, compare value-exact; then the block op."""
    from test_transfer import dsa_indexer
    e, read = dsa_indexer()
    pbs = NB * BS
    src = np.arange(3, 3 + 9, dtype=np.int64)
    ts, table = ptrs(e, xp)
    chunk = xp.asarray(np.zeros((1, NL, len(src), 132), np.uint8))
    c_ops.multi_layer_kv_transfer(chunk, table, xp.asarray(src), "cpu", pbs, c_ops.TransferDirection.D2H,
                                  kvcore.Format.NL_X_NB_BSV_BSS, block_size=BS, head_size=0)
    got = xp.tonumpy(chunk)
    for l in range(NL):
        for i, s in enumerate(src):
            np.testing.assert_array_equal(got[0, l, i], read(l, s))
    e2, read2 = dsa_indexer()
    for x in e2:
        x[...] = 0
    ts2, table2 = ptrs(e2, xp)
    dst = np.arange(10, 10 + 9, dtype=np.int64)
    c_ops.multi_layer_kv_transfer(chunk, table2, xp.asarray(dst), "cpu", pbs, c_ops.TransferDirection.H2D, 14,
                                  block_size=BS)
    for l in range(NL):
        for i, s in enumerate(dst):
            np.testing.assert_array_equal(read2(l, s), got[0, l, i])
    desc = shape_desc(kv_size=1, nl=NL, nb=NB, bs=BS, nh=1, hs=132, element_size=1)
    obj = xp.asarray(np.zeros((NL, 2 * BS, 132), np.uint8))
    optr = obj.ctypes.data if xp.name == "numpy" else obj.data_ptr()
    c_ops.multi_layer_block_kv_transfer(table, [optr], xp.asarray(np.array([2, 0], np.int64)), "cpu",
                                        c_ops.TransferDirection.D2H, desc, 2 * BS, 14, 0)
    o = xp.tonumpy(obj)
    for j, b in enumerate((2, 0)):
        for l in range(NL):
            for k in range(BS):
                np.testing.assert_array_equal(o[l, j * BS + k], read(l, b * BS + k))
    with raises_status("KVC_ERR_INVALID_ARG"):  # LMCache requires the block size for 14
        c_ops.multi_layer_kv_transfer(chunk, table, xp.asarray(src), "cpu", pbs, 1, 14)


def test_single_layer_formats_14_15(xp):
    """single_layer_kv_transfer reads 14's [NB, BS, R] and 15's [2, NB, NH, 1, BS, HS] from the tensor."""
    from test_transfer import dsa_indexer
    slots = np.array([9, -1, 0, 23], np.int64)
    e, read = dsa_indexer(nl=1)
    lmc = xp.asarray(np.zeros((4, 132), np.uint8))
    c_ops.single_layer_kv_transfer(lmc, xp.asarray(e[0]), xp.asarray(slots), 1, 14)
    got = xp.tonumpy(lmc)
    for i, s in enumerate(slots):
        np.testing.assert_array_equal(got[i], read(0, s) if s >= 0 else np.zeros(132, np.uint8))
    e, shape, view, planes, row = engine_for(15, np.float32)
    lmc = xp.asarray(np.zeros((4, 2, row), np.float32))  # token-major
    c_ops.single_layer_kv_transfer(lmc, xp.asarray(e[1]), xp.asarray(slots), 1, 15, token_major=True)
    got = xp.tonumpy(lmc)
    for i, s in enumerate(slots):
        for p in range(2):
            want = view(1, p)[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(row, np.float32)
            np.testing.assert_array_equal(got[i, p], want)
    ts, table = ptrs(e, xp)  # and all layers per token (HND: head_size is needed, as for 6)
    kv = xp.asarray(np.zeros((2, NL, 4, row), np.float32))
    c_ops.multi_layer_kv_transfer(kv, table, xp.asarray(slots), "cpu", NB * BS, 1, 15, block_size=BS,
                                  head_size=shape.hs)
    got = xp.tonumpy(kv)
    for i, s in enumerate(slots):
        for l in range(NL):
            for p in range(2):
                want = view(l, p)[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(row, np.float32)
                np.testing.assert_array_equal(got[p, l, i], want)


def test_single_layer_wrong_layer_shape_names_the_format(xp):
    """An engine layer of the wrong rank for formats 11-15 (which LMCache's EngineKVFormat lacks) is
    KVC_ERR_SHAPE naming kvcore's format, not a ValueError from the enum."""
    slots = xp.asarray(np.array([0, 1], np.int64))
    lmc = xp.asarray(np.zeros((2, 2, 8), np.float16))
    for fmt, name in ((12, "NL_X_NB_NH_BS_CS"), (14, "NL_X_NB_BSV_BSS"), (15, "NL_X_TWO_NB_NH_ONE_BS_HS")):
        with raises_status("KVC_ERR_SHAPE") as e:
            c_ops.single_layer_kv_transfer(lmc, xp.asarray(np.zeros((2, 3), np.float16)), slots, 1, fmt)
        assert f"is not a layer of {name}" in str(e.value)


def test_tuple_formats_16_17(xp):
    """16: per-layer (K, V) with pointers K_0, V_0, K_1, V_1; 17: per-layer planes, chunk rows their
    concatenation; both through the per-token, block and single-layer ops."""
    from test_transfer import mla_tuples
    nh, hs, pbs = 2, 8, NB * BS
    kvs = [tuple(rng.standard_normal((NB, BS, nh, hs)).astype(np.float32) for _ in range(2)) for _ in range(NL)]
    ts, table = ptrs([t for kv in kvs for t in kv], xp)
    slots = np.array([7, -1, 0, 20], np.int64)
    kv = xp.asarray(np.zeros((2, NL, 4, nh * hs), np.float32))
    c_ops.multi_layer_kv_transfer(kv, table, xp.asarray(slots), "cpu", pbs, 1, 16, block_size=BS, head_size=hs)
    got = xp.tonumpy(kv)
    for l in range(NL):
        for p in range(2):
            for i, s in enumerate(slots):
                want = kvs[l][p][s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(nh * hs, np.float32)
                np.testing.assert_array_equal(got[p, l, i], want)
    desc = shape_desc(kv_size=2, nl=NL, nb=NB, bs=BS, nh=nh, hs=hs, element_size=4)
    obj = xp.asarray(np.zeros((2, NL, BS, nh * hs), np.float32))
    c_ops.multi_layer_block_kv_transfer(table, [obj.ctypes.data if xp.name == "numpy" else obj.data_ptr()],
                                        xp.asarray(np.array([3], np.int64)), "cpu", 1, desc, BS, 16, 0)
    o = xp.tonumpy(obj)
    for l in range(NL):
        for p in range(2):
            np.testing.assert_array_equal(o[p, l], kvs[l][p][3].reshape(BS, -1))
    lmc = xp.asarray(np.zeros((2, 4, nh * hs), np.float32))
    c_ops.single_layer_kv_transfer(lmc, tuple(xp.asarray(t) for t in kvs[1]), xp.asarray(slots), 1, 16)
    np.testing.assert_array_equal(xp.tonumpy(lmc), got[:, 1])

    e, read = mla_tuples()
    ts, table = ptrs([p for layer in e for p in layer], xp)  # latent_0, rope_0, dsa_0, latent_1, ...
    chunk = xp.asarray(np.zeros((1, NL, 4, 14), np.float16))  # 28-byte rows in fp16 elements
    widths = [16, 8, 4]
    lmc_ext.multi_layer_kv_transfer(chunk, table, xp.asarray(slots), "cpu", pbs, 1, 17, plane_slot_bytes=widths)
    got = xp.tonumpy(chunk)
    for l in range(NL):
        for i, s in enumerate(slots):
            want = read(l, s) if s >= 0 else np.zeros(28, np.uint8)
            np.testing.assert_array_equal(got[0, l, i].view(np.uint8), want)
    with raises_status("KVC_ERR_SHAPE"):  # the widths are not optional with a pointer table
        c_ops.multi_layer_kv_transfer(chunk, table, xp.asarray(slots), "cpu", pbs, 1, 17)
    with raises_status("KVC_ERR_SHAPE"):  # nor may they disagree with the chunk row
        lmc_ext.multi_layer_kv_transfer(chunk, table, xp.asarray(slots), "cpu", pbs, 1, 17, plane_slot_bytes=[16, 8, 6])
    desc = shape_desc(kv_size=1, nl=NL, nb=NB, bs=BS, nh=1, hs=14, element_size=2)
    desc.plane_slot_bytes = widths  # LMCache-Ascend's attribute
    obj = xp.asarray(np.zeros((NL, BS, 14), np.float16))
    c_ops.multi_layer_block_kv_transfer(table, [obj.ctypes.data if xp.name == "numpy" else obj.data_ptr()],
                                        xp.asarray(np.array([5], np.int64)), "cpu", 1, desc, BS, 17, 0)
    o = xp.tonumpy(obj)
    for l in range(NL):
        for k in range(BS):
            np.testing.assert_array_equal(o[l, k].view(np.uint8), read(l, 5 * BS + k))
    lmc = xp.asarray(np.zeros((4, 14), np.float16))
    c_ops.single_layer_kv_transfer(lmc, tuple(xp.asarray(p) for p in e[0]), xp.asarray(slots), 1, 17)
    np.testing.assert_array_equal(xp.tonumpy(lmc), got[0, 0])


def test_lmcache_errors():
    layers = [np.zeros((2, 10, 16), np.float32) for _ in range(2)]
    table = np.array([x.ctypes.data for x in layers], np.uint64)
    kv = np.ones((2, 2, 4, 16), np.float32)
    with raises_status("KVC_ERR_DTYPE"):  # LMCache's CUDA op would misread int32 slots
        c_ops.multi_layer_kv_transfer(kv, table, np.array([0, 1, 2, 3], np.int32), "cpu", 10, 0, 1, 1)
    with raises_status("KVC_ERR_OUT_OF_RANGE"):
        c_ops.multi_layer_kv_transfer(kv, table, np.array([0, 1, 2, 10], np.int64), "cpu", 10, 0, 1, 1)
    with raises_status("KVC_ERR_INVALID_ARG"):
        c_ops.multi_layer_kv_transfer(kv, table, np.array([0, 1, 2, 3], np.int64), "cpu", 10, 2, 1, 1)
    with raises_status("KVC_ERR_INVALID_ARG"):  # block_size 0 on a non-MLA format, as LMCache
        c_ops.multi_layer_kv_transfer(kv, table, np.array([0, 1, 2, 3], np.int64), "cpu", 10, 0, 1)
    with raises_status("KVC_ERR_SHAPE"):
        c_ops.multi_layer_kv_transfer(kv, table[:1], np.array([0, 1, 2, 3], np.int64), "cpu", 10, 0, 1, 1)
    assert not any(x.any() for x in layers)  # nothing written by any of the failed calls


def _group_plan():
    """Format 1 engine, two temp objects of 2 blocks each, a host pool of 3 objects; two steps."""
    e, shape, view, planes, row = engine_for(1, np.float32)
    table = np.array([x.ctypes.data for x in e], np.int64)
    desc = shape_desc(kv_size=2, nl=NL, nb=NB, bs=BS, nh=shape.nh, hs=shape.hs, element_size=4)
    ctok = 2 * BS
    temps = [np.zeros((2, NL, ctok, row), np.float32) for _ in range(2)]
    obj_bytes = temps[0].nbytes
    pool = np.zeros((3, 2, NL, ctok, row), np.float32)
    ids = np.array([4, 1, 5, 0, 2, 3], np.int64)
    spec = lmc_ext.KernelGroupSpec(table.ctypes.data, [t.ctypes.data for t in temps], desc, ctok, 1, ids.ctypes.data,
                                 len(ids))
    # step 0: objects 0 and 1 (blocks 0..3) through both temps; step 1: object 2 (blocks 4, 5) through temp 0
    steps = [lmc_ext.BatchStep([lmc_ext.StagingCopy(pool[0].ctypes.data, temps[0].ctypes.data, obj_bytes, 0),
                              lmc_ext.StagingCopy(pool[1].ctypes.data, temps[1].ctypes.data, obj_bytes, obj_bytes)],
                             [lmc_ext.LaunchVar(0, 0, 4, 2, 0)]),
             lmc_ext.BatchStep([lmc_ext.StagingCopy(pool[2].ctypes.data, temps[0].ctypes.data, obj_bytes,
                                                2 * obj_bytes)],
                             [lmc_ext.LaunchVar(0, 4, 2, 1, 0)])]
    return e, view, pool, ids, spec, steps, temps, row


def test_execute_object_group_transfer_d2h_then_h2d():
    e, view, pool, ids, spec, steps, temps, row = _group_plan()
    # D2H: launches fill the temps, then staging copies them to the pool (the temps are reused)
    lmc_ext.execute_object_group_transfer(1, "cpu", 1 << 20, [spec], [steps[0]])
    for f, b in enumerate(ids[:4]):
        o, j = divmod(f, 2)
        for l in range(NL):
            for p in range(2):
                np.testing.assert_array_equal(pool[o, p, l, j * BS:(j + 1) * BS], view(l, p)[b].reshape(BS, -1))
    lmc_ext.execute_object_group_transfer(1, "cpu", 1 << 20, [spec], [steps[1]])
    for f, b in enumerate(ids[4:]):
        for l in range(NL):
            for p in range(2):
                np.testing.assert_array_equal(pool[2, p, l, f * BS:(f + 1) * BS], view(l, p)[b].reshape(BS, -1))
    # H2D: staging copies pool -> temps first, then the launches write the engine
    saved = [[view(l, p).copy() for p in range(2)] for l in range(NL)]
    for x in e:
        x[...] = 0
    back = [lmc_ext.BatchStep([lmc_ext.StagingCopy(sc.src, sc.dest, sc.nbytes, sc.host_offset) for sc in st.staging],
                            st.launches) for st in steps]
    lmc_ext.execute_object_group_transfer(0, "cpu", 1 << 20, [spec], back)
    for l in range(NL):
        for p in range(2):
            np.testing.assert_array_equal(view(l, p)[ids], saved[l][p][ids])
            untouched = [b for b in range(NB) if b not in ids]
            assert not view(l, p)[untouched].any()


@pytest.mark.parametrize("bad,status", [(lmc_ext.LaunchVar(1, 0, 2, 1, 0), "KVC_ERR_OUT_OF_RANGE"),
                                        (lmc_ext.LaunchVar(0, 0, 2, 3, 0), "KVC_ERR_OUT_OF_RANGE"),
                                        (lmc_ext.LaunchVar(0, 5, 2, 1, 0), "KVC_ERR_OUT_OF_RANGE")])
def test_execute_object_group_transfer_checks_the_whole_plan_first(bad, status):
    e, view, pool, ids, spec, steps, temps, row = _group_plan()
    plan = [steps[0], lmc_ext.BatchStep([], [bad])]
    with raises_status(status):
        lmc_ext.execute_object_group_transfer(1, "cpu", 1 << 20, [spec], plan)
    assert not pool.any() and not any(t.any() for t in temps)  # step 0 did not run either


# ---------------------------------------------------------------- LMCache's own code paths (issue: LMCache on kvcore)

def _coded_window(nl2, t, c, bins, seed):
    """Symbols [2NL, t, C] < bins, their CDF and per-stream code (LMCache's encode_fast_new layout)."""
    r = np.random.default_rng(seed)
    sym = r.integers(0, bins, (nl2, t, c)).astype(np.int8)
    cdf = c_ops.calculate_cdf(sym, bins)
    out = np.zeros((nl2, c, kvcore.encode_bound(t)), np.uint8)
    lengths = np.zeros((nl2, c), np.int32)
    c_ops.encode_fast_new(cdf, sym, out, lengths)
    return sym, cdf, out, lengths


def _packed(out, lengths):
    data = np.concatenate([out[l, c, :lengths[l, c]] for l in range(out.shape[0]) for c in range(out.shape[1])])
    return data, np.cumsum(lengths.reshape(-1).astype(np.int64)).reshape(lengths.shape)


@pytest.mark.parametrize("decoder", ["decode_fast_new", "decode_fast_prefsum"])
def test_decoders_write_a_window_of_a_larger_output(xp, decoder):
    """LMCache decodes a chunk window by window into output[:, start:end, :] (a strided view):
    three windows of 256, 256 and 88 tokens, each into its slice, every other byte untouched."""
    nl2, c, bins, total = 4, 24, 32, 600
    full = xp.asarray(np.full((nl2, total, c), 0xEE, np.uint8))
    want = np.full((nl2, total, c), 0xEE, np.uint8)
    for w, (start, end) in enumerate(((0, 256), (256, 512), (512, 600))):
        sym, cdf, out, lengths = _coded_window(nl2, end - start, c, bins, w)
        window = full[:, start:end, :]
        assert not (window.flags.c_contiguous if xp.name == "numpy" else window.is_contiguous())
        if decoder == "decode_fast_new":
            c_ops.decode_fast_new(xp.asarray(cdf), xp.asarray(out), xp.asarray(lengths), window)
        else:
            data, prefsum = _packed(out, lengths)
            c_ops.decode_fast_prefsum(xp.asarray(cdf), xp.asarray(data), xp.asarray(prefsum), window)
        want[:, start:end, :] = sym.view(np.uint8)
        np.testing.assert_array_equal(xp.tonumpy(full), want)


def test_decoders_refuse_overlapping_views_and_write_nothing_on_failure():
    nl2, t, c, bins = 2, 40, 8, 16
    sym, cdf, out, lengths = _coded_window(nl2, t, c, bins, 7)
    base = np.zeros(nl2 * t * c, np.uint8)
    overlapping = np.lib.stride_tricks.as_strided(base, (nl2, t, c), (t * c, 1, 1))  # tokens overlap channels
    with raises_status("KVC_ERR_SHAPE"):
        c_ops.decode_fast_new(cdf, out, lengths, overlapping)
    assert not base.any()
    full = np.full((nl2, 2 * t, c), 7, np.uint8)
    bad = lengths.copy()
    bad[0, 0] = out.shape[2] + 1  # a length past the stream's buffer
    with raises_status("KVC_ERR_CORRUPT"):
        c_ops.decode_fast_new(cdf, out, bad, full[:, :t, :])
    assert (full == 7).all()  # nothing of the view written


def test_block_transfer_skip_past_the_end_is_nothing_to_do(xp):
    """LMCache: a skip_prefix_n_blocks at or past the block count transfers nothing (no error)."""
    e, shape, view, planes, row = engine_for(1, np.float32)
    desc = shape_desc(kv_size=2, nl=NL, nb=NB, bs=BS, nh=shape.nh, hs=shape.hs, element_size=4)
    obj = xp.asarray(np.full((planes, NL, 4 * BS, row), 3, np.float32))
    for skip in (4, 10):
        c_ops.multi_layer_block_kv_transfer([xp.asarray(x) for x in e], [obj], xp.asarray(np.arange(4, dtype=np.int64)),
                                            "cpu", c_ops.TransferDirection.D2H, desc, 4 * BS, 1, skip)
        assert (xp.tonumpy(obj) == 3).all()
    with raises_status("KVC_ERR_OUT_OF_RANGE"):  # a negative skip is still an error
        c_ops.multi_layer_block_kv_transfer([xp.asarray(x) for x in e], [obj], xp.asarray(np.arange(4, dtype=np.int64)),
                                            "cpu", c_ops.TransferDirection.D2H, desc, 4 * BS, 1, -1)


def test_token_transfer_skip_past_the_end_is_nothing_to_do():
    layers = [np.ones((2, 10, 16), np.float32) for _ in range(2)]
    table = np.array([x.ctypes.data for x in layers], np.int64)
    kv = np.full((2, 2, 4, 16), 5, np.float32)
    c_ops.multi_layer_kv_transfer(kv, table, np.array([0, 1, 2, 3], np.int64), "cpu", 10,
                                  c_ops.TransferDirection.D2H, 1, 1, 16, 9)
    assert (kv == 5).all()


@pytest.mark.parametrize("pad", [0, 8])
def test_block_transfer_of_a_padded_mla_pool(xp, pad):
    """DeepSeek's MLA pool in vLLM: each layer's [NB, BS, HS] is a view of rows padded to the pool's
    widest (tensor.stride(0) = BS*HS + pad), shape_desc.block_stride_elems = stride(0) as LMCache sets it."""
    nl, nb, bs, hs = 2, 6, 4, 16
    pools = [np.random.default_rng(l).standard_normal((nb, bs * hs + pad)).astype(np.float32) for l in range(nl)]
    views = [xp.asarray(p)[:, :bs * hs].reshape(nb, bs, hs) if xp.name == "numpy" else
             xp.asarray(p)[:, :bs * hs].unflatten(1, (bs, hs)) for p in pools]
    desc = shape_desc(kv_size=1, nl=nl, nb=nb, bs=bs, nh=1, hs=hs, element_size=4,
                      block_stride_elems=bs * hs + pad)
    ids = np.array([4, 1, 5], np.int64)
    obj = xp.asarray(np.zeros((nl, 4 * bs, hs), np.float32))
    c_ops.multi_layer_block_kv_transfer(views, [obj], xp.asarray(ids), "cpu", c_ops.TransferDirection.D2H, desc,
                                        4 * bs, 3, 0)
    got = xp.tonumpy(obj)
    for l in range(nl):
        for f, b in enumerate(ids):
            np.testing.assert_array_equal(got[l, f * bs:(f + 1) * bs], pools[l][b, :bs * hs].reshape(bs, hs))
    for p in pools:  # and back: only the blocks' own elements, never the padding
        p[...] = 0
    c_ops.multi_layer_block_kv_transfer(views, [obj], xp.asarray(ids), "cpu", c_ops.TransferDirection.H2D, desc,
                                        4 * bs, 3, 0)
    for l in range(nl):
        assert not pools[l][:, bs * hs:].any()
        for f, b in enumerate(ids):
            np.testing.assert_array_equal(pools[l][b, :bs * hs].reshape(bs, hs), got[l, f * bs:(f + 1) * bs])
    desc.block_stride_elems = bs * hs + pad + 4  # disagreeing with the tensors
    if pad:
        with raises_status("KVC_ERR_SHAPE"):
            c_ops.multi_layer_block_kv_transfer(views, [obj], xp.asarray(ids), "cpu", c_ops.TransferDirection.D2H,
                                                desc, 4 * bs, 3, 0)
