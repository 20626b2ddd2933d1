# SPDX-License-Identifier: BSD-3-Clause
"""An LMCache-style CPU offload written only against kvcore.lmcache_ops (plus torch for LMCache's
own Python steps: quantisation and byte collection): a paged vLLM KV cache in torch -> 256-token
chunks -> CacheGen bytes -> back into a fresh paged cache, verified."""
import numpy as np
import pytest

import kvcore.lmcache_ops as c_ops
from conftest import needs_torch

NL, NB, BS, NH, HS = 4, 64, 16, 4, 32
C = NH * HS
CHUNK = 256


def lmcache_bins(nl):
    key = [32 if l < 10 else 16 for l in range(nl)]
    value = [32 if l < 2 else 16 for l in range(nl)]
    return key, value


def cachegen_encode(torch, kv):
    """LMCache's encode_function on one KV_2LTD chunk [2, NL, T, C]: (bytestream, lengths, cdf, maxima)."""
    kb, vb = lmcache_bins(NL)
    qs, maxima = [], []
    for plane, bins in ((0, kb), (1, vb)):
        x = kv[plane].float()
        mx = x.abs().amax(dim=-1, keepdim=True)
        M = torch.tensor([b // 2 - 1 for b in bins], dtype=torch.float32).view(NL, 1, 1)
        qs.append(torch.round(x * M / mx + M).to(torch.int8))
        maxima.append(mx)
    sym = torch.cat(qs)  # [2NL, T, C]
    cdf = torch.cat([c_ops.calculate_cdf(qs[0], 32), c_ops.calculate_cdf(qs[1], 32)])
    out = torch.zeros((2 * NL, C, CHUNK), dtype=torch.uint8)
    lengths = torch.zeros((2 * NL, C), dtype=torch.int32)
    c_ops.encode_fast_new(cdf, sym, out, lengths)
    # collect_bytes: the valid bytes of every stream, back to back
    stream = torch.cat([out[l, c, :lengths[l, c]] for l in range(2 * NL) for c in range(C)])
    return stream.numpy().tobytes(), lengths, cdf, maxima


def cachegen_decode(torch, blob, lengths, cdf, maxima, ntok, dtype):
    stream = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    prefsum = torch.cumsum(lengths.flatten().to(torch.int64), 0).view(2 * NL, C)
    sym = torch.zeros((2 * NL, ntok, C), dtype=torch.uint8)
    c_ops.decode_fast_prefsum(cdf, stream, prefsum, sym)
    kb, vb = lmcache_bins(NL)
    planes = []
    for plane, bins in ((0, kb), (1, vb)):
        M = torch.tensor([b // 2 - 1 for b in bins], dtype=torch.float32).view(NL, 1, 1)
        q = sym[plane * NL:(plane + 1) * NL].float()
        planes.append(((q - M) / M * maxima[plane]).to(dtype))
    return torch.stack(planes)


def test_offload_and_restore_through_cachegen():
    torch = needs_torch()
    g = torch.Generator().manual_seed(0)
    dtype = torch.float16
    cache = [torch.randn((2, NB, BS, NH, HS), generator=g).to(dtype) for _ in range(NL)]
    ptrs = torch.tensor([t.data_ptr() for t in cache], dtype=torch.int64)
    ntok = 600
    slots = torch.randperm(NB * BS, generator=g)[:ntok].to(torch.int64)

    stored = []
    for start in range(0, ntok, CHUNK):
        sm = slots[start:start + CHUNK].contiguous()
        kv = torch.empty((2, NL, len(sm), C), dtype=dtype)
        c_ops.multi_layer_kv_transfer(kv, ptrs, sm, torch.device("cpu"), NB * BS, c_ops.TransferDirection.D2H,
                                      c_ops.EngineKVFormat.NL_X_TWO_NB_BS_NH_HS, BS, HS)
        for l in range(NL):  # the store is exact
            for p in range(2):
                want = cache[l][p].reshape(NB * BS, C)[sm]
                assert torch.equal(kv[p, l], want)
        stored.append((sm, cachegen_encode(torch, kv), len(sm)))
    raw = ntok * 2 * NL * C * 2
    coded = sum(len(s[1][0]) for s in stored)
    assert coded < raw / 2  # 4-5 bits per element instead of 16

    fresh = [torch.zeros_like(t) for t in cache]
    fptrs = torch.tensor([t.data_ptr() for t in fresh], dtype=torch.int64)
    for sm, (blob, lengths, cdf, maxima), n in stored:
        kv = cachegen_decode(torch, blob, lengths, cdf, maxima, n, dtype).contiguous()
        c_ops.multi_layer_kv_transfer(kv, fptrs, sm, torch.device("cpu"), NB * BS, c_ops.TransferDirection.H2D,
                                      c_ops.EngineKVFormat.NL_X_TWO_NB_BS_NH_HS, BS, HS)
    used = torch.zeros(NB * BS, dtype=torch.bool)
    used[slots] = True
    kb, vb = lmcache_bins(NL)
    for l in range(NL):
        for p, bins in ((0, kb), (1, vb)):
            orig = cache[l][p].reshape(NB * BS, C).float()
            back = fresh[l][p].reshape(NB * BS, C).float()
            assert not back[~used].any()  # slots never stored stay empty
            M = bins[l] // 2 - 1
            tol = orig[used].abs().amax(dim=-1, keepdim=True) / (2 * M) * 1.01 + 2e-3
            assert ((back[used] - orig[used]).abs() <= tol).all(), (l, p)
