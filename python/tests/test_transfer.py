# SPDX-License-Identifier: BSD-3-Clause
"""Transfers through the binding against a numpy oracle: every format's engine tensors are viewed
as [NB, BS, NH, HS] per (layer, plane), and a token row or block is copied by plain indexing."""
import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
from conftest import raises_status

NL, NB, BS, NH, HS = 2, 6, 4, 2, 8
CS = 2 * HS
rng = np.random.default_rng(7)


def engine_for(fmt, dtype=np.float16, nb=NB):
    """(engine tensors, PageShape, views(l, p) -> [NB, BS, NH, W], planes, row width)."""
    kv2 = fmt not in (3, 5, 10, 11, 12, 13)
    nh = 1 if fmt in (3, 5) else NH
    w = CS if fmt >= 10 else HS
    es = np.dtype(dtype).itemsize
    shape = kvcore.PageShape(kv_size=2 if kv2 else 1, element_size=es, nl=NL, nb=nb, bs=BS, nh=nh, hs=w)
    z = lambda *s: np.zeros(s, dtype)
    if fmt == 0:
        e = [z(nb, NL, 2, BS, nh, w)]
        view = lambda l, p: e[0][:, l, p]
    elif fmt == 8:
        e = [z(nb, NL, 2, nh, BS, w)]
        view = lambda l, p: e[0][:, l, p].transpose(0, 2, 1, 3)
    elif fmt in (4, 9):
        e = [z(nb * BS, nh, w) if fmt == 4 else z(nb, BS, nh, w) for _ in range(2 * NL)]
        view = lambda l, p: e[p * NL + l].reshape(nb, BS, nh, w)
    elif fmt == 16:  # per-layer (K, V) tuples, flattened K_0, V_0, K_1, V_1
        e = [z(nb, BS, nh, w) for _ in range(2 * NL)]
        view = lambda l, p: e[2 * l + p]
    else:
        per = {1: (2, nb, BS, nh, w), 2: (nb, 2, BS, nh, w), 3: (nb, BS, w), 5: (nb * BS, 1, w),
               6: (2, nb, nh, BS, w), 7: (nb, 2, nh, BS, w), 10: (nb, nh, BS, w), 11: (nb, BS, nh, w),
               12: (nb, nh, BS, w), 13: (nb, BS, nh, w), 15: (2, nb, nh, 1, BS, w)}[fmt]
        e = [z(*per) for _ in range(NL)]
        view = {1: lambda l, p: e[l][p], 2: lambda l, p: e[l][:, p],
                3: lambda l, p: e[l].reshape(nb, BS, 1, w), 5: lambda l, p: e[l].reshape(nb, BS, 1, w),
                6: lambda l, p: e[l][p].transpose(0, 2, 1, 3), 7: lambda l, p: e[l][:, p].transpose(0, 2, 1, 3),
                10: lambda l, p: e[l].transpose(0, 2, 1, 3), 12: lambda l, p: e[l].transpose(0, 2, 1, 3),
                11: lambda l, p: e[l], 13: lambda l, p: e[l],
                15: lambda l, p: e[l][p][:, :, 0].transpose(0, 2, 1, 3)}[fmt]
    planes = 2 if kv2 else 1
    for t in e:
        t[...] = rng.standard_normal(t.shape).astype(dtype)
    return e, shape, view, planes, nh * w


def chunk_shape(planes, t, row):
    return (planes, NL, t, row)


# Formats whose engine rows are whole [NB, BS, NH, W] rows; 14 and 17 (rows in pieces) below.
WHOLE_ROW_FORMATS = [f for f in range(17) if f != 14]


@pytest.mark.parametrize("fmt", WHOLE_ROW_FORMATS)
@pytest.mark.parametrize("direction", [kvcore.D2H, kvcore.H2D])
def test_transfer_tokens_every_format(ctx, fmt, direction):
    e, shape, view, planes, row = engine_for(fmt)
    slots = np.array([5, -1, 0, 17, 22, 9, -3, 13], np.int64)
    t, skip = len(slots), 1
    chunk = rng.standard_normal(chunk_shape(planes, t, row)).astype(np.float16)
    if direction == kvcore.D2H:
        before = chunk.copy()
        ctx.transfer_tokens(fmt, direction, shape, e if len(e) > 1 else e[0], chunk, slots, skip_prefix=skip)
        for ti, s in enumerate(slots):
            for l in range(NL):
                for p in range(planes):
                    want = view(l, p)[s // BS, s % BS].reshape(-1) if s >= 0 and ti >= skip else before[p, l, ti]
                    np.testing.assert_array_equal(chunk[p, l, ti], want)
    else:
        want = [[view(l, p).copy() for p in range(planes)] for l in range(NL)]
        for ti, s in enumerate(slots):
            if s >= 0 and ti >= skip:
                for l in range(NL):
                    for p in range(planes):
                        want[l][p][s // BS, s % BS] = chunk[p, l, ti].reshape(want[l][p].shape[2:])
        ctx.transfer_tokens(fmt, direction, shape, e, chunk, slots, skip_prefix=skip)
        for l in range(NL):
            for p in range(planes):
                np.testing.assert_array_equal(view(l, p), want[l][p])


@pytest.mark.parametrize("fmt", WHOLE_ROW_FORMATS)
def test_transfer_blocks_every_format(ctx, fmt):
    e, shape, view, planes, row = engine_for(fmt)
    bpo, ctok = 2, 2 * BS
    ids = np.array([4, 1, 5, 0, 2], np.int64)
    skip = 1
    objs = [np.zeros(chunk_shape(planes, ctok, row), np.float16) for _ in range(3)]
    ctx.transfer_blocks(fmt, kvcore.D2H, shape, e, objs, ids, ctok, skip_prefix_blocks=skip)
    for f, b in enumerate(ids):
        o, j = divmod(f, bpo)
        for l in range(NL):
            for p in range(planes):
                got = objs[o][p, l, j * BS:(j + 1) * BS]
                want = 0 * got if f < skip else view(l, p)[b].reshape(BS, -1)
                np.testing.assert_array_equal(got, want)
    # and back into a zeroed engine: exactly the transferred blocks come back
    saved = [[view(l, p).copy() for p in range(planes)] for l in range(NL)]
    for t in e:
        t[...] = 0
    ctx.transfer_blocks(fmt, kvcore.H2D, shape, e, objs, ids, ctok, skip_prefix_blocks=skip)
    for l in range(NL):
        for p in range(planes):
            for b in range(NB):
                want = saved[l][p][b] if b in ids[skip:] else 0 * saved[l][p][b]
                np.testing.assert_array_equal(view(l, p)[b], want)


def dsa_indexer(nl=NL, nb=NB, bs=BS, row=132):
    """Format 14: NL x uint8 [NB, BS, row]; read(l, s) gives slot s's row (values, then 4 scale bytes)."""
    e = [rng.integers(0, 256, (nb, bs, row), dtype=np.uint8) for _ in range(nl)]
    v = row - 4

    def read(l, s):
        flat, base = e[l].reshape(-1), (s // bs) * bs * row
        o = s % bs
        return np.concatenate([flat[base + o * v:base + (o + 1) * v], flat[base + bs * v + 4 * o:base + bs * v + 4 * o + 4]])
    return e, read


def mla_tuples(nl=NL, nb=NB, bs=BS):
    """Format 17: per layer (latent fp16 x 8, rope fp16 x 4, dsa uint8 x 4): 28-byte rows."""
    e = [(rng.standard_normal((nb, bs, 1, 8)).astype(np.float16), rng.standard_normal((nb, bs, 1, 4)).astype(
        np.float16), rng.integers(0, 256, (nb, bs, 1, 4), dtype=np.uint8)) for _ in range(nl)]

    def read(l, s):
        return np.concatenate([p[s // bs, s % bs].reshape(-1).view(np.uint8) for p in e[l]])
    return e, read


@pytest.mark.parametrize("fmt", [14, 17])
@pytest.mark.parametrize("direction", [kvcore.D2H, kvcore.H2D])
def test_rows_in_pieces_tokens_and_blocks(ctx, fmt, direction):
    e, read = dsa_indexer() if fmt == 14 else mla_tuples()
    row = 132 if fmt == 14 else 28
    shape = kvcore.PageShape(kv_size=1, element_size=1, nl=NL, nb=NB, bs=BS, nh=1, hs=row)
    slots = np.array([5, -1, 0, 17, 22, 9, -3, 13], np.int64)
    t, skip = len(slots), 1
    chunk = rng.integers(0, 256, (1, NL, t, row), dtype=np.uint8)
    before = chunk.copy()
    if direction == kvcore.D2H:
        ctx.transfer_tokens(fmt, direction, shape, e, chunk, slots, skip_prefix=skip)
        for ti, s in enumerate(slots):
            for l in range(NL):
                want = read(l, s) if s >= 0 and ti >= skip else before[0, l, ti]
                np.testing.assert_array_equal(chunk[0, l, ti], want)
    else:
        ctx.transfer_tokens(fmt, direction, shape, e, chunk, slots, skip_prefix=skip)
        for ti, s in enumerate(slots):
            if s >= 0 and ti >= skip:
                for l in range(NL):
                    np.testing.assert_array_equal(read(l, s), chunk[0, l, ti])
    # blocks 4, 1 into one object of 2 blocks, then back into fresh engine tensors
    ids = np.array([4, 1], np.int64)
    obj = np.zeros((1, NL, 2 * BS, row), np.uint8)
    ctx.transfer_blocks(fmt, kvcore.D2H, shape, e, [obj], ids, 2 * BS)
    for j, b in enumerate(ids):
        for l in range(NL):
            for o in range(BS):
                np.testing.assert_array_equal(obj[0, l, j * BS + o], read(l, b * BS + o))
    e2, read2 = dsa_indexer() if fmt == 14 else mla_tuples()
    ctx.transfer_blocks(fmt, kvcore.H2D, shape, e2, [obj], ids, 2 * BS)
    for b in ids:
        for l in range(NL):
            for o in range(BS):
                np.testing.assert_array_equal(read2(l, b * BS + o), read(l, b * BS + o))


def test_rows_in_pieces_bad_geometry(ctx):
    e, _ = dsa_indexer(row=130)
    chunk = np.zeros((1, NL, 1, 130), np.uint8)
    with raises_status("KVC_ERR_SHAPE"):  # not a row of 4-byte units
        ctx.transfer_tokens(14, kvcore.D2H, kvcore.PageShape(kv_size=1, element_size=1, nl=NL, nb=NB, bs=BS, nh=1,
                                                             hs=130), e, chunk, np.zeros(1, np.int64))
    e, _ = mla_tuples()
    shape = kvcore.PageShape(kv_size=1, element_size=1, nl=NL, nb=NB, bs=BS, nh=1, hs=28, num_planes=3)
    shape.plane_bytes[0], shape.plane_bytes[1], shape.plane_bytes[2] = 16, 8, 3  # sums to 27, not 28
    chunk = np.ones((1, NL, 1, 28), np.uint8)
    snap = [p.copy() for layer in e for p in layer]
    with raises_status("KVC_ERR_SHAPE") as info:
        ctx.transfer_tokens(17, kvcore.H2D, shape, e, chunk, np.zeros(1, np.int64))
    assert "sum to 27" in info.value.message
    for a, b in zip([p for layer in e for p in layer], snap):  # nothing written
        np.testing.assert_array_equal(a, b)
    assert kvcore.shape_ptr_count(17, shape) == 3 * NL and kvcore.format_ptr_count(17, NL) == -1


def test_torch_inputs(ctx, xp):
    e, shape, view, planes, row = engine_for(1)
    slots = np.array([3, 7, -1, 11], np.int64)
    chunk = np.zeros(chunk_shape(planes, 4, row), np.float16)
    ec, cc, sc = [xp.asarray(x) for x in e], xp.asarray(chunk), xp.asarray(slots)
    ctx.transfer_tokens(1, kvcore.D2H, shape, ec, cc, sc)
    got = xp.tonumpy(cc)
    for ti, s in enumerate(slots):
        for l in range(NL):
            for p in range(2):
                want = view(l, p)[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(row, np.float16)
                np.testing.assert_array_equal(got[p, l, ti], want)


# ---------------------------------------------------------------- errors: nothing written
def _setup():
    e, shape, view, planes, row = engine_for(1)
    chunk = np.zeros(chunk_shape(planes, 3, row), np.float16)
    return e, shape, chunk


def test_int32_slots_refused(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_DTYPE"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, np.array([0, 1, 2], np.int32))
    assert not chunk.any()


def test_slot_out_of_range(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_OUT_OF_RANGE") as info:
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, np.array([0, 1, NB * BS], np.int64))
    assert "slot" in info.value.message
    assert not chunk.any()


def test_chunk_size_mismatch(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_SHAPE"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk[:, :, :2], np.array([0, 1, 2], np.int64))


def test_non_contiguous_refused(ctx):
    e, shape, _ = _setup()
    big = np.zeros((2, NL, 3, 2 * NH * HS), np.float16)
    view = big[..., ::2]
    with raises_status("KVC_ERR_SHAPE") as info:
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, view, np.array([0, 1, 2], np.int64))
    assert "contiguous" in info.value.message
    assert not big.any()


def test_chunk_element_size_mismatch(ctx):
    e, shape, chunk = _setup()
    wide = np.zeros(chunk.size // 2, np.float32).reshape(2, NL, 3, -1)  # same bytes, 4-byte elements
    with raises_status("KVC_ERR_DTYPE"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, wide, np.array([0, 1, 2], np.int64))
    assert not wide.any()
    raw = np.zeros(chunk.nbytes, np.uint8)  # raw bytes are accepted
    ctx.transfer_tokens(1, kvcore.D2H, shape, e, raw, np.array([0, 1, 2], np.int64))
    assert raw.any()


def test_engine_too_small(ctx):
    e, shape, chunk = _setup()
    e[1] = e[1][:, :NB - 1]
    with raises_status("KVC_ERR_SHAPE"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, np.array([0, 1, 2], np.int64))


@pytest.mark.parametrize("bad,status", [
    ("read_only", "KVC_ERR_INVALID_ARG"), ("strided", "KVC_ERR_SHAPE"), ("float32", "KVC_ERR_DTYPE"),
    ("short", "KVC_ERR_SHAPE"), ("complex", "KVC_ERR_DTYPE"), ("list", "KVC_ERR_INVALID_ARG")])
def test_every_engine_tensor_checked(ctx, bad, status):
    """The last of the layers is wrong in one way: the numpy fast path must not let it through."""
    e, shape, chunk = _setup()
    for x in e:
        x.fill(1)  # so a transfer that ran would show in the chunk
    last = e[-1]
    if bad == "read_only":
        last.setflags(write=False)
    elif bad == "strided":
        last = np.repeat(last, 2, axis=-1)[..., ::2]
    elif bad == "float32":
        last = np.zeros(last.size // 2, np.float32)
    elif bad == "short":
        last = last.reshape(-1)[:-1]
    elif bad == "complex":
        last = np.zeros(last.size // 4, np.complex64)
    else:
        last = last.tolist()
    e[-1] = last
    with raises_status(status):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, np.array([0, 1, 2], np.int64))
    assert not chunk.any()


@pytest.mark.parametrize("bad,status", [
    ("strided", "KVC_ERR_SHAPE"), ("float32", "KVC_ERR_DTYPE"), ("int8", "KVC_ERR_DTYPE"),
    ("short", "KVC_ERR_SHAPE"), ("complex", "KVC_ERR_DTYPE"), ("numpy", None)])
def test_every_torch_engine_tensor_checked(ctx, bad, status):
    """The same with torch tensors (a mixed list takes the general path and works)."""
    torch = pytest.importorskip("torch")
    e, shape, chunk = _setup()
    e = [torch.ones(x.shape, dtype=torch.float16) for x in e]
    last = e[-1]
    if bad == "strided":
        last = torch.repeat_interleave(last, 2, dim=-1)[..., ::2]
    elif bad == "float32":
        last = torch.ones(last.numel() // 2, dtype=torch.float32)
    elif bad == "int8":
        last = torch.ones(last.numel() * 2, dtype=torch.int8)
    elif bad == "short":
        last = last.reshape(-1)[:-1]
    elif bad == "complex":
        last = torch.ones(last.numel() // 4, dtype=torch.complex64)
    else:
        last = last.numpy()
    e[-1] = last
    slots = np.array([0, 1, 2], np.int64)
    if status is None:
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, slots)
        assert (chunk == 1).all()
        return
    with raises_status(status):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, slots)
    assert not chunk.any()


def test_wrong_pointer_count(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_SHAPE"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e[:1], chunk, np.array([0, 1, 2], np.int64))


def test_read_only_destination(ctx):
    e, shape, chunk = _setup()
    chunk.setflags(write=False)
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, np.array([0, 1, 2], np.int64))


class FakeCuda:
    """Something that says it lives on a GPU."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                         "version": 3, "strides": None}


def test_gpu_array_on_cpu_context(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_INVALID_ARG") as info:
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, FakeCuda(chunk), np.array([0, 1, 2], np.int64))
    assert "cuda" in info.value.message


def test_not_an_array(ctx):
    e, shape, chunk = _setup()
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, {0: 1})
    with raises_status("KVC_ERR_DTYPE"):  # a sequence is taken as int64, but not one of floats
        ctx.transfer_tokens(1, kvcore.D2H, shape, e, chunk, [0.5, 1, 2])


def test_array_interface_and_dlpack(ctx):
    class AI:
        def __init__(self, a):
            self.a = a
            self.__array_interface__ = a.__array_interface__
    e, shape, chunk = _setup()
    slots = np.array([1, 2, 3], np.int64)
    ctx.transfer_tokens(1, kvcore.D2H, shape, [AI(x) for x in e], AI(chunk), AI(slots))
    ref = np.zeros_like(chunk)
    ctx.transfer_tokens(1, kvcore.D2H, shape, e, ref, slots)
    np.testing.assert_array_equal(chunk, ref)
    assert chunk.any()

    class DL:  # only DLPack
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()
    chunk2 = np.zeros_like(chunk)
    ctx.transfer_tokens(1, kvcore.D2H, shape, [DL(x) for x in e], DL(chunk2), DL(slots))
    np.testing.assert_array_equal(chunk2, ref)


def test_bf16_dtype_via_dlpack_shape_error_names(ctx):
    # a numpy void type has no kvcore equivalent
    with raises_status("KVC_ERR_DTYPE"):
        ctx.cdf(np.zeros((1, 2, 3), "V1"), 4)


# ---------------------------------------------------------------- single layer and flash
@pytest.mark.parametrize("fmt,token_major", [(f, tm) for f in (1, 2, 3, 5, 6, 7, 10, 11, 12, 13)
                                              for tm in (False, True) if not (tm and f in (3, 5))])
def test_single_layer_kv_transfer(fmt, token_major):
    e, shape, view, planes, row = engine_for(fmt)
    layer = e[0]
    slots = np.array([2, 11, -1, 7, 20], np.int64)
    t = len(slots)
    lmc = np.zeros((t, planes, row) if token_major else (planes, t, row), np.float16)
    if planes == 1 and not token_major:
        lmc = lmc[0]
    c_ops.single_layer_kv_transfer(lmc, layer, slots, c_ops.TransferDirection.D2H, fmt, token_major)
    full = lmc.reshape((t, planes, row) if token_major else (planes, t, row))
    for ti, s in enumerate(slots):
        for p in range(planes):
            got = full[ti, p] if token_major else full[p, ti]
            want = view(0, p)[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(row, np.float16)
            np.testing.assert_array_equal(got, want)
    # H2D into a zeroed layer restores exactly the slots
    saved = [view(0, p).copy() for p in range(planes)]
    layer[...] = 0
    c_ops.single_layer_kv_transfer(lmc, layer, slots, c_ops.TransferDirection.H2D, fmt, token_major)
    for p in range(planes):
        v = view(0, p).reshape(NB * BS, -1)
        sv = saved[p].reshape(NB * BS, -1)
        for s in range(NB * BS):
            np.testing.assert_array_equal(v[s], sv[s] if s in slots else 0 * sv[s])


def test_single_layer_sgl(xp):
    k = rng.standard_normal((NB, BS, NH, HS)).astype(np.float16)
    v = rng.standard_normal((NB, BS, NH, HS)).astype(np.float16)
    slots = np.array([0, 5, 23, -1], np.int64)
    lmc = xp.asarray(np.zeros((2, 4, NH * HS), np.float16))
    c_ops.single_layer_kv_transfer_sgl(lmc, xp.asarray(k), xp.asarray(v), xp.asarray(slots), 1)
    got = xp.tonumpy(lmc)
    for ti, s in enumerate(slots):
        if s >= 0:
            np.testing.assert_array_equal(got[0, ti], k[s // BS, s % BS].reshape(-1))
            np.testing.assert_array_equal(got[1, ti], v[s // BS, s % BS].reshape(-1))
        else:
            assert not got[:, ti].any()


def test_flash_pair(xp):
    t = 5
    kc = rng.standard_normal((NB, BS, NH, HS)).astype(np.float32)
    vc = rng.standard_normal((NB, BS, NH, HS)).astype(np.float32)
    slots = np.array([3, -1, 0, 19, 8], np.int64)
    kv = np.zeros((2, NL, t, NH * HS), np.float32)
    kvx = xp.asarray(kv)
    c_ops.load_and_reshape_flash(kvx, xp.asarray(kc), xp.asarray(vc), xp.asarray(slots), 1)
    got = xp.tonumpy(kvx)
    for ti, s in enumerate(slots):
        wk = kc[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(NH * HS, np.float32)
        wv = vc[s // BS, s % BS].reshape(-1) if s >= 0 else np.zeros(NH * HS, np.float32)
        np.testing.assert_array_equal(got[0, 1, ti], wk)
        np.testing.assert_array_equal(got[1, 1, ti], wv)
    assert not got[:, 0].any()
    kc2, vc2 = np.zeros_like(kc), np.zeros_like(vc)
    c_ops.reshape_and_cache_back_flash(got, kc2, vc2, slots, 1)
    for s in range(NB * BS):
        want = s in slots
        assert (kc2.reshape(NB * BS, -1)[s] == (kc.reshape(NB * BS, -1)[s] if want else 0)).all()
        assert (vc2.reshape(NB * BS, -1)[s] == (vc.reshape(NB * BS, -1)[s] if want else 0)).all()


def test_flash_layer_out_of_range():
    kc = np.zeros((NB, BS, NH, HS), np.float32)
    kv = np.zeros((2, NL, 2, NH * HS), np.float32)
    with raises_status("KVC_ERR_OUT_OF_RANGE"):
        c_ops.load_and_reshape_flash(kv, kc, kc.copy(), np.array([0, 1], np.int64), NL)


def test_engine_checked_once(ctx):
    """Context.engine: the same results as the tensor list, kept alive by the Engine, and refused
    for another format, shape or context."""
    import gc
    e, shape, view, planes, row = engine_for(1)
    rng = np.random.default_rng(11)
    for x in e:
        x[...] = rng.standard_normal(x.shape)
    slots = np.array([3, 0, 7, 5], np.int64)
    want = np.zeros(chunk_shape(planes, 4, row), np.float16)
    ctx.transfer_tokens(1, kvcore.D2H, shape, e, want, slots)
    eng = ctx.engine(1, shape, e)
    del e
    gc.collect()
    got = np.zeros_like(want)
    ctx.transfer_tokens(1, kvcore.D2H, shape, eng, got, slots)
    assert (got == want).all() and want.any()
    obj = np.zeros(chunk_shape(planes, 2 * BS, row), np.float16)
    ctx.transfer_blocks(1, kvcore.D2H, shape, eng, [obj], np.array([2, 1], np.int64), 2 * BS)
    assert obj.any()
    with raises_status("KVC_ERR_SHAPE"):
        ctx.transfer_tokens(2, kvcore.D2H, shape, eng, got, slots)
    other = kvcore.PageShape(kv_size=2, element_size=2, nl=NL, nb=NB - 1, bs=BS, nh=NH, hs=HS)
    with raises_status("KVC_ERR_SHAPE"):
        ctx.transfer_tokens(1, kvcore.D2H, other, eng, got, slots)
    with raises_status("KVC_ERR_INVALID_ARG"):
        kvcore.Context(backend="cpu").transfer_tokens(1, kvcore.D2H, shape, eng, got, slots)
    with raises_status("KVC_ERR_SHAPE"):  # checked when made, as a list would be per call
        ctx.engine(1, shape, [np.zeros(4, np.float16)] * NL)
