# SPDX-License-Identifier: BSD-3-Clause
"""LMCache's CacheBlend retrieve plan (execute_cb_retrieve_plan_flat) through kvcore.lmcache_ops,
written with LMCache's types (CBGroupSpec's 19 fields in LMCache's order, int64 numpy tables),
against a numpy oracle that runs each step in order: staging copy, K-only re-rotation in float64,
per-token scatter. Two steps reuse one temp slot, so a reordered executor fails."""
import numpy as np
import pytest

import kvcore.lmcache_ops as c_ops
import kvcore.lmcache_extras as lmc_ext
from conftest import raises_status, needs_torch
from test_transfer import engine_for, NL, NB, BS

ST, MAXP = 6, 48
rng = np.random.default_rng(11)
SCALAR_TYPE = {"f16": 5, "f32": 6, "bf16": 15}


def cos_sin(rot):
    inv = 10000.0 ** (-np.arange(0, rot, 2) / rot)
    ang = np.arange(MAXP)[:, None] * inv[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


def geometry(fmt):
    """(heads, head stride, rope offset in elements, rot_dim, CBGroupSpec.head_size) of a format."""
    if fmt == 3:   # MLA latent of 8: rotate its last 4 elements (rope_base_offset)
        return 1, 8, 4, 4, 8
    if fmt == 10:  # fused K|V heads of 2*8: rotate in the K half
        return 2, 16, 0, 8, 8
    return 2, 8, 0, 8, 8


def rotate(slot, cs, old, new, heads, stride, off, rot, neox):
    """kvcore's fused re-rotation in float64 on plane 0 of slot [planes, NL, ST, row] (docs/ROPE.md:
    the two table rows combined into one rotation, divided by their norms)."""
    k = slot[0].reshape(NL, ST, heads, stride)
    half = rot // 2
    xi = off + (np.arange(half) if neox else 2 * np.arange(half))
    yi = xi + (half if neox else 1)
    for t in range(ST):
        co, so = cs[old + t, :half], cs[old + t, half:]
        cn, sn = cs[new + t, :half], cs[new + t, half:]
        x, y = k[:, t][..., xi].copy(), k[:, t][..., yi].copy()
        xr, yr = x * co + y * so, y * co - x * so
        n = np.hypot(co, so) * np.hypot(cn, sn)
        k[:, t, :, xi] = np.moveaxis((xr * cn - yr * sn) / n, -1, 0)
        k[:, t, :, yi] = np.moveaxis((yr * cn + xr * sn) / n, -1, 0)


class Fixture:
    """One group of format fmt: engine (engine_for's layout), two temp slots, three host chunks;
    step 0 stages chunks 0, 1 into slots 0, 1, rotates both and scatters 6 + 4 tokens; step 1
    stages chunk 2 into slot 0 again, rotates it and scatters 5 tokens."""

    def __init__(self, fmt, dt, store, load, rope_on=True):
        self.fmt, self.dt, self.store, self.load, self.rope_on = fmt, dt, store, load, rope_on
        e, _, self.view, self.planes, self.row = engine_for(fmt, np.float32)
        self.e = [store(x) for x in e]
        self.heads, self.stride, self.off, self.rot, head_field = geometry(fmt)
        self.cs = store(cos_sin(self.rot))
        self.slots = [store(np.zeros((self.planes, NL, ST, self.row), np.float32)) for _ in range(2)]
        self.host = [store(rng.standard_normal((self.planes, NL, ST, self.row)).astype(np.float32))
                     for _ in range(3)]
        self.mapping = np.array([5, -1, 9, 0, 14, 3, 7, 12, 20, 1, 22, 16, 2, 23, 8], np.int64)
        self.ptrs = np.array([self.addr(x) for x in self.e], np.int64)
        s0 = self.slots[0]
        es = s0.itemsize if isinstance(s0, np.ndarray) else s0.element_size()
        nbytes = es * self.planes * NL * ST * self.row
        self.spec = lmc_ext.CBGroupSpec(self.ptrs.ctypes.data, [self.addr(s) for s in self.slots], NL, ST, self.row, es,
                                      fmt, NB * BS, BS, head_field, self.mapping.ctypes.data, len(self.mapping),
                                      self.cs if rope_on else 0, self.rot, self.heads, self.stride,
                                      SCALAR_TYPE[dt], dt != "bf16", self.off * es)
        a = self.addr
        self.staging = np.array([[a(self.slots[0]), a(self.host[0]), nbytes, 0],
                                 [a(self.slots[1]), a(self.host[1]), nbytes, 64],
                                 [a(self.slots[0]), a(self.host[2]), nbytes, 128]], np.int64)
        self.ropes = np.array([[0, 0, 3, 17], [0, 1, 30, 2], [0, 0, 11, 0]], np.int64)
        self.scatters = np.array([[0, 0, 0, 6], [0, 1, 6, 4], [0, 0, 10, 5]], np.int64)
        self.offsets = np.array([[2, 2, 2], [3, 3, 3]], np.int64)
        self.before = [self.load(x).copy() for x in self.e + self.slots]

    @staticmethod
    def addr(x):
        return x.ctypes.data if isinstance(x, np.ndarray) else x.data_ptr()

    def run(self):
        lmc_ext.execute_cb_retrieve_plan_flat("cpu", 64, [self.spec], self.staging, self.ropes, self.scatters,
                                            self.offsets)

    def oracle(self):
        eng = [b.astype(np.float64) for b in self.before[:len(self.e)]]
        views = engine_views(eng, self.fmt)
        cs = self.load(self.cs).astype(np.float64)
        slots = [np.zeros((self.planes, NL, ST, self.row)) for _ in range(2)]
        s0 = r0 = c0 = 0
        for s1, r1, c1 in self.offsets:
            for j in range(s0, s1):
                k = 0 if self.staging[j, 0] == self.addr(self.slots[0]) else 1
                slots[k][...] = self.load(self.host[j])
            for j in range(r0, r1):
                if self.rope_on:
                    rotate(slots[self.ropes[j, 1]], cs, self.ropes[j, 2], self.ropes[j, 3], self.heads, self.stride,
                           self.off, self.rot, self.dt != "bf16")
            for j in range(c0, c1):
                k, o, n = self.scatters[j, 1:]
                for i in range(n):
                    s = self.mapping[o + i]
                    for l in range(NL):
                        for p in range(self.planes):
                            if s >= 0:
                                v = views(l, p)
                                v[s // BS, s % BS] = slots[k][p, l, i].reshape(v.shape[-2:])
            s0, r0, c0 = s1, r1, c1
        return eng, slots

    def untouched(self):
        return all((self.load(x) == b).all() for x, b in zip(self.e + self.slots, self.before))


def engine_views(e, fmt):
    """engine_for's per-(layer, plane) [NB, BS, NH, W] views, over other tensors of the same shapes."""
    return {1: lambda l, p: e[l][p], 6: lambda l, p: e[l][p].transpose(0, 2, 1, 3),
            3: lambda l, p: e[l].reshape(NB, BS, 1, e[l].shape[-1]),
            10: lambda l, p: e[l].transpose(0, 2, 1, 3)}[fmt]


def close(got, want, dt):
    tol = {"f32": 1e-5, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[dt]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def numpy_io(dtype):
    return (lambda a: np.ascontiguousarray(a.astype(dtype))), (lambda a: a)


def check(f):
    f.run()
    eng, slots = f.oracle()
    for x, want in zip(f.e, eng):
        close(f.load(x).astype(np.float64), want, f.dt)
    for x, want in zip(f.slots, slots):
        close(f.load(x).astype(np.float64), want, f.dt)
    assert not f.untouched()


@pytest.mark.parametrize("fmt", [1, 6, 10, 3])
@pytest.mark.parametrize("dt", ["f16", "f32"])
@pytest.mark.parametrize("rope_on", [True, False])
def test_cb_plan_numpy(fmt, dt, rope_on):
    check(Fixture(fmt, dt, *numpy_io({"f16": np.float16, "f32": np.float32}[dt]), rope_on))


@pytest.mark.parametrize("fmt", [1, 10])
def test_cb_plan_torch_bf16(fmt):
    torch = needs_torch()
    store = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16)
    load = lambda t: t.to(torch.float32).numpy()
    check(Fixture(fmt, "bf16", store, load))


def test_cb_plan_bare_table_address_needs_max_position():
    f = Fixture(1, "f16", *numpy_io(np.float16))
    f.spec.cos_sin_cache = f.cs.ctypes.data  # LMCache passes an address
    with raises_status("KVC_ERR_INVALID_ARG"):
        f.run()
    assert f.untouched()
    f.spec.max_position = MAXP
    check(f)


@pytest.mark.parametrize("mutation,status", [
    (lambda f: f.ropes.__setitem__((2, 0), 1), "KVC_ERR_OUT_OF_RANGE"),            # group_idx
    (lambda f: f.scatters.__setitem__((2, 3), ST + 1), "KVC_ERR_OUT_OF_RANGE"),    # n_tok > slot_tokens
    (lambda f: f.scatters.__setitem__((2, 2), 12), "KVC_ERR_OUT_OF_RANGE"),        # past the slot mapping
    (lambda f: f.ropes.__setitem__((2, 3), MAXP - 2), "KVC_ERR_OUT_OF_RANGE"),     # past the table
    (lambda f: f.offsets.__setitem__((1, 0), 1), "KVC_ERR_OUT_OF_RANGE"),          # not monotone
    (lambda f: setattr(f, "ropes", np.zeros((2, 3), np.int64)), "KVC_ERR_SHAPE"),  # table width
    (lambda f: setattr(f.spec, "key_scalar_type", 4), "KVC_ERR_DTYPE"),           # int64 keys
    (lambda f: setattr(f.spec, "rope_base_offset", 1), "KVC_ERR_SHAPE"),          # not an element
    (lambda f: setattr(f.spec, "head_size", 5), "KVC_ERR_SHAPE"),                 # does not divide the row
])
def test_cb_plan_errors_write_nothing(mutation, status):
    f = Fixture(1, "f16", *numpy_io(np.float16))
    mutation(f)
    with raises_status(status):
        f.run()
    assert f.untouched()


def test_cb_plan_field_order_and_defaults():
    names = ("paged_kv_ptrs", "temp_buffer_ptrs", "num_layers", "slot_tokens", "hidden_elems", "element_size",
             "engine_kv_format", "page_buffer_size", "block_size", "head_size", "slot_mapping_base",
             "slot_mapping_capacity", "cos_sin_cache", "rot_dim", "rope_num_kv_heads", "rope_head_stride",
             "key_scalar_type", "is_neox", "rope_base_offset")
    spec = lmc_ext.CBGroupSpec(*range(18))
    assert [getattr(spec, n) for n in names] == list(range(18)) + [0]


def test_object_plan_is_one_c_call(monkeypatch):
    """execute_object_group_transfer is kvc_execute_object_plan, not a Python loop of calls."""
    calls = []
    real = c_ops._lib.kvc_execute_object_plan
    monkeypatch.setattr(c_ops._lib, "kvc_execute_object_plan", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(c_ops._lib, "kvc_transfer_blocks", None)
    monkeypatch.setattr(c_ops._lib, "kvc_memcpy_async", None)
    lmc_ext.execute_object_group_transfer(0, "cpu", 64, [], [lmc_ext.BatchStep([], [])])
    assert len(calls) == 1


@pytest.mark.parametrize("case,status", [("bad_block_id", "KVC_ERR_OUT_OF_RANGE"),
                                         ("alignment_0", "KVC_ERR_INVALID_ARG"),
                                         ("copy_overlap", "KVC_ERR_INVALID_ARG"),
                                         ("objects_mismatch", "KVC_ERR_SHAPE")])
def test_object_plan_errors_in_a_later_step_write_nothing(case, status):
    """Errors only the C calls could find (a block id outside the pool, a bad copy) in step 1: step 0
    must not have run either (the old Python composition ran it)."""
    from test_lmcache_ops import _group_plan
    e, view, pool, ids, spec, steps, temps, row = _group_plan()
    before = [x.copy() for x in e]
    align = 1 << 20
    if case == "bad_block_id":
        ids[5] = NB + 3
    elif case == "alignment_0":
        align = 0
    elif case == "copy_overlap":
        sc = steps[1].staging[0]
        steps[1].staging[0] = lmc_ext.StagingCopy(sc.dest, sc.dest + 4, sc.nbytes, sc.host_offset)
    else:
        steps[1].launches[0] = lmc_ext.LaunchVar(0, 4, 2, 2, 0)  # 2 blocks fill one object, not two
    for direction in (0, 1):
        with raises_status(status):
            lmc_ext.execute_object_group_transfer(direction, "cpu", align, [spec], steps)
        assert not pool.any() and not any(t.any() for t in temps)
        assert all((x == b).all() for x, b in zip(e, before))
