# SPDX-License-Identifier: BSD-3-Clause
"""Codec (bytes in, arrays out, files) and RoPE through the binding; RoPE against a float64
oracle of vLLM's rotation."""
import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
import kvcore.lmcache_extras as lmc_ext
from conftest import needs_torch, raises_status

rng = np.random.default_rng(5)


def test_codec_round_trip(ctx, xp, tmp_path):
    kv = rng.standard_normal((2, 3, 300, 4, 16)).astype(np.float16)
    data = ctx.codec_encode(xp.asarray(kv))
    info = kvcore.inspect(data)
    assert (info["num_layers"], info["num_tokens"], info["num_heads"], info["head_size"]) == (3, 300, 4, 16)
    assert info["dtype"] == "float16" and info["container_bytes"] == len(data) < kv.nbytes
    out = ctx.codec_decode(data)
    assert out.shape == (2, 3, 300, 4, 16) and out.dtype == np.float16  # the head split is recorded
    out = out.reshape(2, 3, 300, 64)
    # max-abs quantisation with 32 or 16 bins: error <= scale / (2M) per row, plus fp16 rounding
    x = kv.reshape(2, 3, 300, 64).astype(np.float32)
    scale = np.abs(x).max(axis=-1, keepdims=True)
    bins = kvcore.default_bins(3).reshape(2, 3)
    M = (bins // 2 - 1)[:, :, None, None]
    assert (np.abs(out.astype(np.float32) - x) <= scale / (2 * M) + np.abs(x) * 2e-3 + 1e-3).all()
    n = ctx.codec_encode_file(tmp_path / "a.kvc", kv)
    assert n == len(data) and (tmp_path / "a.kvc").read_bytes() == data  # deterministic
    np.testing.assert_array_equal(ctx.codec_decode_file(tmp_path / "a.kvc").reshape(out.shape), out)


def test_codec_heads_known(ctx):
    kv = rng.standard_normal((2, 2, 16, 32)).astype(np.float32)
    assert kvcore.inspect(ctx.codec_encode(kv))["heads_known"] == 0  # [2, NL, T, C] without a hint
    info = kvcore.inspect(ctx.codec_encode(kv, num_heads=4))
    assert info["heads_known"] == 1 and (info["num_heads"], info["head_size"]) == (4, 8)


def test_codec_bf16_torch():
    torch = needs_torch()
    ctx = kvcore.Context(backend="cpu")
    kv = torch.randn(2, 2, 64, 32).to(torch.bfloat16)
    data = ctx.codec_encode(kv, num_heads=2)
    out = ctx.codec_decode(data, torch=True)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (2, 2, 64, 2, 16)  # num_heads is recorded
    out = out.reshape(kv.shape)
    assert (out.float() - kv.float()).abs().max() < 0.5


def test_codec_mla_and_options(ctx):
    kv = rng.standard_normal((2, 40, 24)).astype(np.float32)
    data = ctx.codec_encode(kv, mla=True, bins=[16, 16], window_tokens=16)
    info = kvcore.inspect(data)
    assert info["layout"] == "mla" and info["window_tokens"] == 16 and info["num_windows"] == 3
    assert ctx.codec_decode(data).shape == (2, 40, 24)


def test_codec_errors(ctx):
    kv = rng.standard_normal((2, 2, 16, 8)).astype(np.float32)
    data = bytearray(ctx.codec_encode(kv))
    data[len(data) // 2] ^= 0x40
    with raises_status("KVC_ERR_CORRUPT"):
        ctx.codec_decode(bytes(data))
    with raises_status("KVC_ERR_DTYPE"):
        ctx.codec_encode(kv.astype(np.float64))
    with raises_status("KVC_ERR_SHAPE"):
        ctx.codec_encode(kv, num_heads=3)
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.codec_encode(kv, bins=[5, 5, 5, 5])
    good = ctx.codec_encode(kv)
    with raises_status("KVC_ERR_DTYPE"):
        ctx.codec_decode(good, out=np.zeros((2, 2, 16, 8), np.float16))
    with raises_status("KVC_ERR_SHAPE") as info:  # named by shapes, not byte counts
        ctx.codec_decode(good, out=np.zeros((2, 2, 15, 8), np.float32))
    assert "out: shape (2, 2, 15, 8), the container holds (2, 2, 16, 8)" in info.value.message
    with raises_status("KVC_ERR_SHAPE"):
        ctx.codec_decode(good, out=np.zeros(100, np.uint8))


def test_codec_rans(tmp_path):
    kv = rng.standard_normal((2, 3, 100, 2, 12)).astype(np.float16)
    ac, rans = kvcore.compress(kv, level=1), kvcore.compress(kv, level=1, coder="rans")
    info = kvcore.inspect(rans)
    assert info["coder"] == "rans" and info["version_minor"] == 4 and info["lmcache_readable"] == 0
    assert kvcore.inspect(ac)["coder"] == "ac"
    np.testing.assert_array_equal(kvcore.decompress(rans), kvcore.decompress(ac))  # the same symbols
    with kvcore.open(tmp_path / "r.kvcs", "wb", chunk_tokens=40, coder="rans") as f:
        f.write(kv)
    with kvcore.open(tmp_path / "a.kvcs", "wb", chunk_tokens=40) as f:
        f.write(kv)
    np.testing.assert_array_equal(kvcore.open(tmp_path / "r.kvcs").read(), kvcore.open(tmp_path / "a.kvcs").read())
    with raises_status("KVC_ERR_INVALID_ARG"):
        kvcore.compress(kv, coder="zstd")


def rope_oracle(key, old, new, cache, neox):
    """vLLM's rotation in float64: undo the rotation at old, apply it at new."""
    k = key.astype(np.float64).copy()
    rot = cache.shape[1]
    half = rot // 2
    for t in range(k.shape[0]):
        co, so = cache[old[t], :half].astype(np.float64), cache[old[t], half:].astype(np.float64)
        cn, sn = cache[new[t], :half].astype(np.float64), cache[new[t], half:].astype(np.float64)
        for h in range(k.shape[1]):
            if neox:
                x, y = k[t, h, :half].copy(), k[t, h, half:rot].copy()
            else:
                x, y = k[t, h, 0:rot:2].copy(), k[t, h, 1:rot:2].copy()
            xr, yr = x * co + y * so, y * co - x * so
            x2, y2 = xr * cn - yr * sn, yr * cn + xr * sn
            if neox:
                k[t, h, :half], k[t, h, half:rot] = x2, y2
            else:
                k[t, h, 0:rot:2], k[t, h, 1:rot:2] = x2, y2
    return k


@pytest.mark.parametrize("neox", [True, False])
def test_rope_k_fused(ctx, xp, neox):
    N, NKV, HS, rot = 12, 4, 32, 32
    cache = ctx.rope_cache_build(64, rot, 10000.0)
    key = rng.standard_normal((N, NKV, HS)).astype(np.float32)
    old = rng.integers(0, 60, N).astype(np.int64)
    new = rng.integers(0, 60, N).astype(np.int64)
    kx = xp.asarray(key.copy())
    c_ops.rotary_embedding_k_fused(xp.asarray(old), xp.asarray(new), kx, HS, xp.asarray(cache), neox)
    np.testing.assert_allclose(xp.tonumpy(kx), rope_oracle(key, old, new, cache, neox), rtol=0, atol=2e-5)


def test_rope_cache_and_identity(ctx):
    cache = ctx.rope_cache_build(128, 16, 10000.0)
    p = np.arange(128)[:, None]
    theta = 10000.0 ** (-2 * np.arange(8) / 16)
    np.testing.assert_allclose(cache[:, :8], np.cos(p * theta), atol=2e-7)
    np.testing.assert_allclose(cache[:, 8:], np.sin(p * theta), atol=2e-7)
    key = rng.standard_normal((5, 2, 16)).astype(np.float16)
    k2 = key.copy()
    pos = np.arange(5, dtype=np.int64) * 7
    ctx.rope_k_fused(k2, pos, pos, cache)
    np.testing.assert_array_equal(k2, key)  # old == new gives the keys back bit-identical


def test_rope_strided_fused_rows(ctx):
    N, NKV, HS = 6, 2, 16
    cache = ctx.rope_cache_build(32, HS, 500000.0)
    rows = rng.standard_normal((N, NKV, 2 * HS)).astype(np.float32)  # K|V fused per head
    old = np.arange(N, dtype=np.int64)
    new = old + 3
    got = rows.copy()
    lmc_ext.rotary_embedding_k_fused_strided(old, new, got, HS, 2 * HS, cache, True)
    want = rope_oracle(rows[:, :, :HS].copy(), old, new, cache, True)
    np.testing.assert_allclose(got[:, :, :HS], want, atol=2e-5)
    np.testing.assert_array_equal(got[:, :, HS:], rows[:, :, HS:])  # V untouched


def test_rope_delta_matches_table(ctx):
    key = rng.standard_normal((8, 2, 64)).astype(np.float32)
    old = np.arange(8, dtype=np.int64)
    new = old + 100
    a, b = key.copy(), key.copy()
    ctx.rope_k_delta(a, old, new, 64, 10000.0)
    ctx.rope_k_fused(b, old, new, ctx.rope_cache_build(200, 64, 10000.0))
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_rope_errors(ctx):
    cache = ctx.rope_cache_build(16, 8, 10000.0)
    key = np.zeros((3, 2, 8), np.float32)
    with raises_status("KVC_ERR_OUT_OF_RANGE") as info:
        ctx.rope_k_fused(key, np.array([0, 1, 16], np.int64), np.zeros(3, np.int64), cache)
    assert "old_positions" in info.value.message
    with raises_status("KVC_ERR_DTYPE"):
        ctx.rope_k_fused(key.astype(np.float16), np.zeros(3, np.int64), np.zeros(3, np.int64),
                         cache.astype(np.float16)[:, :].astype(np.float64))
    with raises_status("KVC_ERR_SHAPE"):
        ctx.rope_k_fused(key, np.zeros(2, np.int64), np.zeros(2, np.int64), cache)
    with raises_status("KVC_ERR_SHAPE"):
        c_ops.rotary_embedding_k_fused(np.zeros(3, np.int64), np.zeros(3, np.int64), key, 4, cache, True)
    with raises_status("KVC_ERR_DTYPE"):
        ctx.rope_k_fused(key, np.zeros(3, np.int32), np.zeros(3, np.int32), cache)


@pytest.mark.parametrize("ext", ["npy", "safetensors"])
def test_kvcache_files(ext, tmp_path):
    kv = rng.standard_normal((2, 3, 10, 4, 8)).astype(np.float16)
    path = tmp_path / f"kv.{ext}"
    kvcore.save_kvcache(path, kv)
    back, dims = kvcore.load_kvcache(path, num_heads=4)
    assert back.shape == (2, 3, 10, 32) and back.dtype == np.float16
    np.testing.assert_array_equal(back, kv.reshape(2, 3, 10, 32))
    assert (dims["num_layers"], dims["num_tokens"], dims["num_heads"], dims["head_size"]) == (3, 10, 4, 8)
    want, view = kv.reshape(2, 3, 10, 32)[1].copy(), back[1]
    del back, kv
    import gc
    gc.collect()
    np.testing.assert_array_equal(view, want)  # kvcore's tensor lives as long as a view of it


def test_kvcache_file_errors(tmp_path):
    kv = np.zeros((2, 3, 10, 32), np.float32)
    with raises_status("KVC_ERR_INVALID_ARG"):
        kvcore.save_kvcache(tmp_path / "kv.txt", kv)
    with raises_status("KVC_ERR_SHAPE"):
        kvcore.save_kvcache(tmp_path / "kv.npy", kv, num_heads=5)
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with raises_status("KVC_ERR_CORRUPT"):
        kvcore.load_kvcache(tmp_path / "bad.npy")
    with raises_status("KVC_ERR_NOT_FOUND"):
        kvcore.load_kvcache(tmp_path / "missing.npy")
