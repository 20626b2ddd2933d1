# SPDX-License-Identifier: BSD-3-Clause
"""kvcore.lmcache_ops against a model of LMCache's ops written here, with torch indexing (not
kvcore): every op, in every calling convention LMCache's callers use (lists and tuples of
per-layer tensors, a pointer tensor, one stacked or cross-layer data tensor; chunk objects as
addresses or as tensors), in both directions, for float32, float16 and bfloat16. The model
follows LMCache's CPU path (lmcache/python_ops_fallback.py): what it reads and writes, which slots
it skips, how a flat block list maps onto chunk objects."""
import inspect

import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
import kvcore.lmcache_extras as lmc_ext

torch = pytest.importorskip("torch", reason="the differential test drives LMCache's torch calling conventions")

H2D, D2H = c_ops.TransferDirection.H2D, c_ops.TransferDirection.D2H
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NL, NB, BS, NH, HS = 2, 6, 4, 2, 8
D = NH * HS
PBS = NB * BS


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def same(a, b):
    """Bitwise equality (transfers copy bits; bfloat16 has no numpy type)."""
    return torch.equal(a.contiguous().view(torch.uint8) if a.dtype != torch.uint8 else a,
                       b.contiguous().view(torch.uint8) if b.dtype != torch.uint8 else b)


def convention(layers, conv, stacked=None):
    """The engine argument in one of LMCache's conventions, plus the tensors that hold the data."""
    if conv == "ptrs":
        return torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64), layers
    if conv == "list":
        return list(layers), layers
    if conv == "tuple":
        return tuple(layers), layers
    assert conv == "stacked"
    return stacked, layers


CONVENTIONS = ["ptrs", "list", "tuple", "stacked"]


# ---------------------------------------------------------------- per-token transfers

def token_layer_shape(fmt):
    return {0: (2, PBS, D), 1: (2, NB, BS, NH, HS), 2: (NB, 2, BS, NH, HS), 3: (NB, BS, D), 5: (PBS, 1, D)}[fmt]


def token_pool(layer, fmt):
    """One layer as LMCache's per-token op sees it: [planes, PBS, D], a view into the layer."""
    if fmt in (0, 1):
        return layer.view(2, PBS, D)
    if fmt == 2:  # [NB, 2, BS, D] -> [2, NB, BS, D] (a view; reshape would copy)
        return layer.view(NB, 2, BS, D).permute(1, 0, 2, 3)
    return layer.view(1, PBS, D)


def cross_layer_pool(e, l):
    """Layer l of a cross-layer tensor [NB, NL, 2, BS, NH, HS] as [2, NB, BS, NH, HS] (a view)."""
    return e[:, l].permute(1, 0, 2, 3, 4)


def model_tokens(kv, pools, slots, d, skip):
    """pools[l]: a view [planes, NB, BS, ...] or [planes, PBS, D] of layer l's cache."""
    planes = kv.shape[0]
    for l, pool in enumerate(pools):
        for t, s in enumerate(slots.tolist()):
            if s < 0 or t < skip:
                continue
            cell = pool[:planes].reshape(planes, NB, BS, D)[:, s // BS, s % BS] if pool.dim() > 3 else \
                pool[:planes, s]
            if d == D2H:
                kv[:, l, t] = cell.reshape(planes, D)
            elif pool.dim() > 3:
                for p in range(planes):
                    pool[p][s // BS, s % BS] = kv[p, l, t].view(pool[p][s // BS, s % BS].shape)
            else:
                pool[:planes, s] = kv[:, l, t]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("conv", CONVENTIONS)
@pytest.mark.parametrize("fmt", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("d", [H2D, D2H], ids=["H2D", "D2H"])
def test_multi_layer_kv_transfer(fmt, conv, dtype, d):
    mla = fmt in (3, 5)
    cross = fmt == 0 and conv == "stacked"  # one data tensor of format 0 is the cross-layer cache
    shape = (NB, NL, 2, BS, NH, HS) if cross else (NL,) + token_layer_shape(fmt)
    stacked, want = rand(shape, dtype, fmt), rand(shape, dtype, fmt)
    pools = (lambda e: [cross_layer_pool(e, l) if cross else token_pool(e[l], fmt) for l in range(NL)])
    slots = torch.tensor([5, -1, 0, 23, 9, 12], dtype=torch.int64)
    kv = rand((1 if mla else 2, NL, len(slots), D), dtype, 100 + fmt)
    want_kv = kv.clone()
    model_tokens(want_kv, pools(want), slots, d, skip=1)
    arg, _ = convention([stacked[l] for l in range(NL)], conv, stacked)
    c_ops.multi_layer_kv_transfer(kv, arg, slots, "cpu", PBS, d, fmt, BS, HS, 1)
    assert same(kv, want_kv) and same(stacked, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("conv", CONVENTIONS + ["nested"])
@pytest.mark.parametrize("d", [H2D, D2H], ids=["H2D", "D2H"])
def test_multi_layer_kv_transfer_unilateral(conv, dtype, d):
    """SGLang MHA: 2*NL buffers [PBS, D], the K list then the V list."""
    stacked = rand((2, NL, PBS, D), dtype, 7)
    bufs = [stacked[kv][l] for kv in range(2) for l in range(NL)]
    slots = torch.tensor([3, 17, -1, 0], dtype=torch.int64)
    kv = rand((2, NL, len(slots), D), dtype, 8)
    want_kv, want = kv.clone(), stacked.clone()
    for p in range(2):
        for l in range(NL):
            for t, s in enumerate(slots.tolist()):
                if s >= 0:
                    if d == D2H:
                        want_kv[p, l, t] = want[p, l, s]
                    else:
                        want[p, l, s] = want_kv[p, l, t]
    arg = [bufs[:NL], bufs[NL:]] if conv == "nested" else convention(bufs, conv, stacked)[0]
    c_ops.multi_layer_kv_transfer_unilateral(kv, arg, slots, "cpu", PBS, d, c_ops.EngineKVFormat.TWO_X_NL_X_NBBS_NH_HS)
    assert same(kv, want_kv) and same(stacked, want)


# ---------------------------------------------------------------- per-block transfers

BLOCK_FORMATS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def block_engine(fmt, dtype, seed):
    """(argument builder, tensors holding the data, kv_view(l, p) -> [NB, BS, NH', HS'])."""
    mla = fmt in (3, 5)
    nh, hs = (1, D) if mla else (NH, HS)
    if fmt in (0, 8):
        e = rand((NB, NL, 2, BS, NH, HS) if fmt == 0 else (NB, NL, 2, NH, BS, HS), dtype, seed)
        view = (lambda l, p: e[:, l, p]) if fmt == 0 else (lambda l, p: e[:, l, p].permute(0, 2, 1, 3))
        return e, [e], view, nh, hs
    if fmt in (4, 9):
        e = rand((2, NL, PBS, NH, HS) if fmt == 4 else (2, NL, NB, BS, NH, HS), dtype, seed)
        return e, [e[p][l] for p in range(2) for l in range(NL)], lambda l, p: e[p][l].view(NB, BS, NH, HS), nh, hs
    per = {1: (2, NB, BS, NH, HS), 2: (NB, 2, BS, NH, HS), 3: (NB, BS, D), 5: (PBS, 1, D), 6: (2, NB, NH, BS, HS),
           7: (NB, 2, NH, BS, HS), 10: (NB, NH, BS, 2, HS), 11: (NB, BS, NH, 2, HS)}[fmt]
    e = rand((NL,) + per, dtype, seed)
    view = {1: lambda l, p: e[l][p], 2: lambda l, p: e[l][:, p], 3: lambda l, p: e[l].view(NB, BS, 1, D),
            5: lambda l, p: e[l].view(NB, BS, 1, D), 6: lambda l, p: e[l][p].permute(0, 2, 1, 3),
            7: lambda l, p: e[l][:, p].permute(0, 2, 1, 3),
            10: lambda l, p: e[l][:, :, :, p].permute(0, 2, 1, 3), 11: lambda l, p: e[l][:, :, :, p]}[fmt]
    return e, [e[l] for l in range(NL)], view, nh, hs


def model_blocks(view, objs, ids, chunk, skip, d, mla):
    """LMCache's block walk: flat block f goes to object f // (chunk / BS), token rows j*BS.."""
    per_obj = chunk // BS
    for f, b in enumerate(ids):
        if f < skip:
            continue
        o, j = divmod(f, per_obj)
        rows = slice(j * BS, (j + 1) * BS)
        for l in range(NL):
            for p in range(1 if mla else 2):
                blk = view(l, p)[b]
                dst = objs[o][l, rows] if mla else objs[o][p, l, rows]
                if d == D2H:
                    dst.copy_(blk.reshape(BS, -1))
                else:
                    blk.copy_(dst.reshape(blk.shape))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("objects", ["addresses", "tensors"])
@pytest.mark.parametrize("fmt,conv", [(f, c) for f in BLOCK_FORMATS for c in CONVENTIONS] +
                         [(4, "nested"), (9, "nested")])  # SGLang's [[K_0..], [V_0..]]
@pytest.mark.parametrize("d", [H2D, D2H], ids=["H2D", "D2H"])
def test_multi_layer_block_kv_transfer(fmt, conv, objects, dtype, d):
    mla = fmt in (3, 5)
    e, tensors, view, nh, hs = block_engine(fmt, dtype, fmt)
    chunk = 2 * BS
    ids = [5, 0, 3, 2, 4]
    nobj = (len(ids) + 1) // 2
    objs = [rand((NL, chunk, D) if mla else (2, NL, chunk, D), dtype, 50 + i) for i in range(nobj)]
    want_objs = [o.clone() for o in objs]
    twin = block_engine(fmt, dtype, fmt)  # the same seed: identical data, for the model to write into
    model_blocks(twin[2], want_objs, ids, chunk, 1, d, mla)
    want_e = twin[0]
    if conv == "stacked":
        arg = e
    elif conv == "nested":
        arg = [tensors[:NL], tensors[NL:]]
    else:
        arg = convention(tensors, conv)[0]
    desc = c_ops.PageBufferShapeDesc()
    desc.kv_size, desc.nl, desc.nb, desc.bs, desc.nh, desc.hs = (1 if mla else 2), NL, NB, BS, nh, hs
    desc.element_size = torch.empty((), dtype=dtype).element_size()
    olist = [o.data_ptr() for o in objs] if objects == "addresses" else objs
    c_ops.multi_layer_block_kv_transfer(arg, olist, torch.tensor(ids), "cpu", d, desc, chunk, fmt, 1)
    assert same(e, want_e)
    for got, want in zip(objs, want_objs):
        assert same(got, want)


@pytest.mark.parametrize("fmt", [1, 3, 10])
def test_block_transfer_with_default_shape_desc(fmt):
    """PageBufferShapeDesc() starts at kv_size 0, element_size 0 (LMCache's defaults): the format
    and the tensors say the rest."""
    mla = fmt in (3, 5)
    desc = c_ops.PageBufferShapeDesc()
    assert (desc.kv_size, desc.nl, desc.nb, desc.bs, desc.nh, desc.hs, desc.element_size,
            desc.block_stride_elems) == (0,) * 8
    e, tensors, view, nh, hs = block_engine(fmt, torch.float32, 3)
    desc.nl, desc.nb, desc.bs, desc.nh, desc.hs = NL, NB, BS, nh, hs
    obj = torch.zeros((NL, BS, D) if mla else (2, NL, BS, D))
    want = obj.clone()
    model_blocks(view, [want], [4], BS, 0, D2H, mla)
    c_ops.multi_layer_block_kv_transfer(tensors, [obj], torch.tensor([4]), "cpu", D2H, desc, BS, fmt, 0)
    assert same(obj, want)


@pytest.mark.parametrize("fmt,pool_shape", [(11, (12, 3, 4, 2, 16)), (10, (12, 3, 2, 4, 16))], ids=["nhd", "hnd"])
def test_blocks_first_fused_padded_stride_roundtrip(fmt, pool_shape):
    """LMCache's blocks-first fused case: each layer a view pool[:, l] of one [NB, NL, ...] pool
    (block stride NL pages), described as kv_size 1 with the fused head width and
    block_stride_elems; D2H from blocks 1, 7 then H2D into 3, 9 moves whole pages, and every
    other page keeps its 0xA5 fill."""
    nb, nl = pool_shape[:2]
    bs, nh, fused = 4, 2, 16
    src = torch.arange(int(np.prod(pool_shape)), dtype=torch.int64).to(torch.uint8).reshape(pool_shape)
    dst = torch.full(pool_shape, 0xA5, dtype=torch.uint8)
    obj = torch.zeros((1, nl, 2 * bs, nh * fused), dtype=torch.uint8)

    def run(pool, ids, d):
        layers = [pool[:, l] for l in range(nl)]
        desc = c_ops.PageBufferShapeDesc()
        desc.kv_size, desc.nl, desc.nb, desc.bs, desc.nh, desc.hs = 1, nl, nb, bs, nh, fused
        desc.element_size, desc.block_stride_elems = 1, layers[0].stride(0)
        table = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64)
        c_ops.multi_layer_block_kv_transfer(table, [obj.data_ptr()], torch.tensor(ids), "cpu", d, desc, 2 * bs,
                                            fmt, 0)
    run(src, [1, 7], D2H)
    run(dst, [3, 9], H2D)
    assert torch.equal(dst[3], src[1]) and torch.equal(dst[9], src[7])
    for b in set(range(nb)) - {3, 9}:
        assert bool((dst[b] == 0xA5).all())


@pytest.mark.parametrize("fmt,pool_shape", [(11, (12, 3, 4, 2, 16)), (10, (12, 3, 2, 4, 16))], ids=["nhd", "hnd"])
def test_blocks_first_object_right_after_the_pool(fmt, pool_shape):
    """The same layer views with the object buffer starting where the pool ends (one allocation):
    layer l's last block is followed by l page steps of padding that run past the pool, which is
    not the layer's memory, so LMCache's call is legal (kvcore refused it with KVC_ERR_OVERLAP
    whenever the allocator put the object there)."""
    nb, nl = pool_shape[:2]
    bs, nh, fused = 4, 2, 16
    n = int(np.prod(pool_shape))
    big = torch.zeros(n + nl * 2 * bs * nh * fused, dtype=torch.uint8)
    pool = big[:n].view(pool_shape)
    pool.copy_(torch.arange(n, dtype=torch.int64).to(torch.uint8).reshape(pool_shape))
    obj = big[n:].view(1, nl, 2 * bs, nh * fused)
    layers = [pool[:, l] for l in range(nl)]
    desc = c_ops.PageBufferShapeDesc()
    desc.kv_size, desc.nl, desc.nb, desc.bs, desc.nh, desc.hs = 1, nl, nb, bs, nh, fused
    desc.element_size, desc.block_stride_elems = 1, layers[0].stride(0)
    table = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64)
    apart = torch.zeros_like(obj)  # the same call with the object elsewhere: the bytes to expect
    for o in (obj, apart):
        c_ops.multi_layer_block_kv_transfer(table, [o.data_ptr()], torch.tensor([1, 7]), "cpu", D2H, desc, 2 * bs, fmt, 0)
    assert torch.equal(obj, apart) and bool(apart.any())


# ---------------------------------------------------------------- single-layer and flash ops

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("fmt,token_major", [(1, False), (1, True), (2, False), (2, True), (3, False)])
@pytest.mark.parametrize("d", [H2D, D2H], ids=["H2D", "D2H"])
def test_single_layer_kv_transfer(fmt, token_major, dtype, d):
    mla = fmt == 3  # (an MLA chunk has no K/V axis for token_major to move)
    eng = rand({1: (2, NB, BS, NH, HS), 2: (NB, 2, BS, NH, HS), 3: (NB, BS, D)}[fmt], dtype, 11)
    slots = torch.tensor([7, -1, 0, 22], dtype=torch.int64)
    t = len(slots)
    lmc = rand((t, D) if mla else ((t, 2, D) if token_major else (2, t, D)), dtype, 12)
    we, wl = eng.clone(), lmc.clone()
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, BS)
        if mla:
            if d == D2H:
                wl[i] = we[b, o]
            else:
                we[b, o] = wl[i]
            continue
        for p in range(2):
            cell = we[p, b, o] if fmt == 1 else we[b, p, o]
            row = wl[i, p] if token_major else wl[p, i]
            if d == D2H:
                row.copy_(cell.reshape(D))
            else:
                cell.copy_(row.reshape(NH, HS))
    c_ops.single_layer_kv_transfer(lmc, eng, slots, d, fmt, token_major)
    assert same(eng, we) and same(lmc, wl)


@pytest.mark.parametrize("token_major", [False, True])
@pytest.mark.parametrize("d", [H2D, D2H], ids=["H2D", "D2H"])
def test_single_layer_kv_transfer_sgl(token_major, d):
    k, v = rand((NB, BS, NH, HS), torch.float16, 1), rand((NB, BS, NH, HS), torch.float16, 2)
    slots = torch.tensor([1, 13, -1], dtype=torch.int64)
    lmc = rand((3, 2, D) if token_major else (2, 3, D), torch.float16, 3)
    wk, wv, wl = k.clone(), v.clone(), lmc.clone()
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        for p, cache in enumerate((wk, wv)):
            row = wl[i, p] if token_major else wl[p, i]
            if d == D2H:
                row.copy_(cache.view(PBS, D)[s])
            else:
                cache.view(PBS, D)[s] = row
    c_ops.single_layer_kv_transfer_sgl(lmc, k, v, slots, d, token_major)
    assert same(k, wk) and same(v, wv) and same(lmc, wl)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_flash_ops(dtype):
    kc, vc = rand((NB, BS, NH, HS), dtype, 4), rand((NB, BS, NH, HS), dtype, 5)
    slots = torch.tensor([2, 19, 6], dtype=torch.int64)
    kv = torch.zeros((2, NL, 3, D), dtype=dtype)
    c_ops.load_and_reshape_flash(kv, kc, vc, slots, 1)
    assert same(kv[0, 1], kc.view(PBS, D)[slots]) and same(kv[1, 1], vc.view(PBS, D)[slots])
    assert not kv[:, 0].any()
    k2, v2 = torch.zeros_like(kc), torch.zeros_like(vc)
    c_ops.reshape_and_cache_back_flash(kv, k2, v2, slots, 1)
    assert same(k2.view(PBS, D)[slots], kv[0, 1]) and same(v2.view(PBS, D)[slots], kv[1, 1])


# ---------------------------------------------------------------- CacheGen

def model_cdf(sym, num_bins):
    """LMCache's CDF: counts per (layer, channel), scaled to (0xFFFF - bins) plus the bin index."""
    l, t, c = sym.shape
    counts = np.zeros((l, c, num_bins), np.int64)
    for li in range(l):
        for ci in range(c):
            counts[li, ci] = np.bincount(np.clip(sym[li, :, ci], 0, num_bins - 1), minlength=num_bins)
    cdf = np.concatenate([np.zeros((l, c, 1), np.int64), np.cumsum(counts, axis=2)], axis=2)
    total = np.maximum(cdf[:, :, -1:], 1)
    return ((0xFFFF - num_bins) * cdf // total + np.arange(num_bins + 1)).astype(np.int16)


@pytest.mark.parametrize("bins", [8, 32])
def test_calculate_cdf(bins):
    sym = torch.from_numpy(np.random.default_rng(bins).integers(0, bins, (2, 40, 6)).astype(np.uint8))
    got = c_ops.calculate_cdf(sym, bins)
    np.testing.assert_array_equal(got.numpy(), model_cdf(sym.numpy().astype(np.int64), bins))
    np.testing.assert_array_equal(c_ops.calculate_cdf(input_tensor=sym, num_bins=bins).numpy(), got.numpy())


def test_encode_fast_new_takes_a_strided_window():
    """LMCache's encoder codes encode_input[:, start:end, :], strided when the chunk is longer than
    the window: the streams equal those of the dense window and decode back to it."""
    rng = np.random.default_rng(1)
    full = torch.from_numpy(rng.integers(0, 16, (2, 300, 5)).astype(np.uint8))
    window = full[:, 256:300, :]
    assert not window.is_contiguous()
    cdf = c_ops.calculate_cdf(window.contiguous(), 16)
    cap = kvcore.encode_bound(window.shape[1])
    out, lengths = torch.zeros((2, 5, cap), dtype=torch.uint8), torch.zeros((2, 5), dtype=torch.int32)
    c_ops.encode_fast_new(cdf, window, out, lengths)
    out2, lengths2 = torch.zeros_like(out), torch.zeros_like(lengths)
    c_ops.encode_fast_new(cdf, window.contiguous(), out2, lengths2)
    assert torch.equal(out, out2) and torch.equal(lengths, lengths2)
    dec = torch.zeros((2, window.shape[1], 5), dtype=torch.uint8)
    c_ops.decode_fast_new(cdf, out, lengths, dec)
    assert torch.equal(dec, window)


def test_decode_fast_prefsum_takes_a_flat_prefix_sum():
    """LMCache's cross-backend tests pass the prefix sum flat, [L*C]."""
    rng = np.random.default_rng(2)
    sym = torch.from_numpy(rng.integers(0, 8, (2, 30, 3)).astype(np.uint8))
    cdf = c_ops.calculate_cdf(sym, 8)
    cap = kvcore.encode_bound(30)
    out, lengths = torch.zeros((2, 3, cap), dtype=torch.uint8), torch.zeros((2, 3), dtype=torch.int32)
    c_ops.encode_fast_new(cdf, sym, out, lengths)
    flat = lengths.flatten().tolist()
    packed = torch.cat([out[i // 3, i % 3, :n] for i, n in enumerate(flat)])
    prefsum = torch.tensor(np.cumsum(flat), dtype=torch.int64)
    for form in (prefsum, prefsum.view(2, 3)):
        dec = torch.zeros((2, 30, 3), dtype=torch.uint8)
        c_ops.decode_fast_prefsum(cdf, packed, form, dec)
        assert torch.equal(dec, sym)


# ---------------------------------------------------------------- RoPE

def model_rope(key, old, new, table, neox):
    """LMCache's rotary_embedding_k_fused: undo at old with the rows as given, redo at new."""
    k = key.double().clone()
    rot, half = table.shape[1], table.shape[1] // 2
    t = table.double()
    oc, os_ = t[old, :half].unsqueeze(1), t[old, half:].unsqueeze(1)
    nc, ns = t[new, :half].unsqueeze(1), t[new, half:].unsqueeze(1)
    xi, yi = (slice(0, half), slice(half, rot)) if neox else (slice(0, rot, 2), slice(1, rot, 2))
    x, y = k[..., xi].clone(), k[..., yi].clone()
    xr, yr = x * oc + y * os_, y * oc - x * os_
    k[..., xi], k[..., yi] = xr * nc - yr * ns, yr * nc + xr * ns
    return k


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("table", ["cos_sin", "arbitrary"])
@pytest.mark.parametrize("neox", [True, False])
def test_rotary_embedding_k_fused(dtype, table, neox):
    t, nkv, hs, rot = 5, 2, 16, 8
    g = torch.Generator().manual_seed(3)
    if table == "cos_sin":
        tab = torch.from_numpy(kvcore.Context(backend="cpu").rope_cache_build(64, rot, 10000.0)).to(dtype)
    else:  # what a caller may pass that is not cos/sin: LMCache applies it as given
        tab = (torch.randn((64, rot), generator=g) * 2).to(dtype)
    key = torch.randn((t, nkv, hs), generator=g).to(dtype)
    old, new = torch.tensor([0, 5, 9, 63, 2]), torch.tensor([1, 0, 40, 7, 2])
    want = model_rope(key, old, new, tab, neox)
    c_ops.rotary_embedding_k_fused(old, new, key, hs, tab, neox)
    tol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    scale = max(1.0, float(want.abs().max()))
    assert float((key.double() - want).abs().max()) <= tol * scale


def test_rotary_embedding_k_fused_strided_arbitrary_table():
    """The strided form (fused K|V rows, K the first HS of each 2*HS) with a table that is not cos/sin."""
    t, nkv, hs = 4, 2, 8
    g = torch.Generator().manual_seed(4)
    rows = torch.randn((t, nkv, 2 * hs), generator=g)
    tab = torch.randn((32, hs), generator=g) * 3
    old, new = torch.tensor([1, 2, 3, 4]), torch.tensor([4, 3, 2, 1])
    want = rows.clone()
    want[..., :hs] = model_rope(rows[..., :hs], old, new, tab, True).float()
    lmc_ext.rotary_embedding_k_fused_strided(old, new, rows, hs, 2 * hs, tab, True)
    assert torch.allclose(rows, want, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- copies and memory

def test_batched_memcpy_overlapping_copies_run_in_list_order():
    """A chain where a later copy reads what an earlier one wrote: LMCache copies entry by entry."""
    buf = np.arange(64, dtype=np.uint8)
    want = buf.copy()
    base = buf.ctypes.data
    entries = [(0, 8, 8), (8, 16, 8), (4, 6, 10)]  # (src, dst, size) offsets
    for s, d, n in entries:
        want[d:d + n] = want[s:s + n].copy()
    c_ops.batched_memcpy([base + s for s, _, _ in entries], [base + d for _, d, _ in entries],
                         [n for _, _, n in entries])
    np.testing.assert_array_equal(buf, want)


def test_page_buffer_shape_desc_defaults():
    d = c_ops.PageBufferShapeDesc()
    assert (d.kv_size, d.nl, d.nb, d.bs, d.nh, d.hs, d.element_size, d.block_stride_elems) == (0,) * 8
    c_ops.set_shape_desc_dtype(d, torch.bfloat16)
    assert d.dtype is torch.bfloat16

    class Fixed:
        __slots__ = ("kv_size",)
    c_ops.set_shape_desc_dtype(Fixed(), torch.float16)  # a descriptor without the attribute: ignored


def test_allocations_with_lmcache_defaults_and_keywords():
    """LMCache's CPU path names and defaults: keyword calls and omitted arguments work."""
    pairs = [(c_ops.alloc_pinned_ptr(size=4096), lambda p: c_ops.free_pinned_ptr(ptr=p)),
             (c_ops.alloc_pinned_numa_ptr(4096), lambda p: c_ops.free_pinned_numa_ptr(p)),
             (c_ops.alloc_numa_ptr(4096, numa_id=0), lambda p: c_ops.free_numa_ptr(p, size=4096)),
             (c_ops.alloc_hugepage_pinned_ptr(4096, device_id=0), lambda p: c_ops.free_hugepage_pinned_ptr(p)),
             (c_ops.alloc_hugepage_pinned_numa_ptr(4096), lambda p: c_ops.free_hugepage_pinned_numa_ptr(p)),
             (c_ops.alloc_shm_pinned_ptr(4096), lambda p: c_ops.free_shm_pinned_ptr(p))]
    for p, free in pairs:
        assert p % 4096 == 0
        free(p)
    with pytest.raises(kvcore.KvcoreError) as e:
        c_ops.free_pinned_ptr(pairs[0][0])
    assert kvcore.status_name(e.value.status) == "KVC_ERR_STATE"


def test_keyword_calls_with_lmcache_parameter_names():
    """Every parameter of every op can be passed by LMCache's name."""
    for name in ("multi_layer_kv_transfer", "multi_layer_block_kv_transfer", "single_layer_kv_transfer",
                 "calculate_cdf", "encode_fast_new", "decode_fast_prefsum", "rotary_embedding_k_fused",
                 "batched_memcpy", "lmcache_memcpy_async", "get_gpu_pci_bus_id", "is_mla"):
        for p in inspect.signature(getattr(c_ops, name)).parameters.values():
            assert p.kind == p.POSITIONAL_OR_KEYWORD, (name, p)
    src, dst = np.arange(16, dtype=np.uint8), np.zeros(16, np.uint8)
    c_ops.lmcache_memcpy_async(dest=dst.ctypes.data, src=src.ctypes.data, nbytes=16, direction=D2H,
                               host_buffer_offset=0, host_buffer_alignments=64)
    np.testing.assert_array_equal(dst, src)
    assert c_ops.is_mla(engine_kv_format=c_ops.EngineKVFormat.NL_X_NB_BS_HS)
    stacked = rand((NL, 2, PBS, D), torch.float32, 9)
    kv = torch.zeros((2, NL, 2, D))
    c_ops.multi_layer_kv_transfer(key_value=kv, key_value_ptrs=list(stacked), slot_mapping=torch.tensor([1, 2]),
                                  paged_memory_device="cpu", page_buffer_size=PBS, direction=D2H,
                                  engine_kv_format=1, block_size=BS, head_size=HS)
    assert same(kv[:, 0], stacked[0][:, 1:3])
