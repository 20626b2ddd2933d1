# SPDX-License-Identifier: BSD-3-Clause
"""Device arrays through the binding on a GPU context, without a GPU: the emulated module
(tests/modules/gpu_emu.c: device memory from an arena the host cannot read, pageable host memory
refused like a real GPU) loaded as "cuda". Checks that __cuda_array_interface__ arrays reach the
module as device pointers, that pinned host buffers and device arrays mix, that host-only calls
still run on the CPU ops, and that pageable + device in one call is refused, nothing written.
Every test runs twice: on the emulation module, and on tests/modules/gpu_host.so (the GPU module's
own source, kernels and glue, built for the CPU: tests/modules/gpu_host/gpu_runtime.h)."""
import ctypes
import os

import numpy as np
import pytest

import kvcore
from conftest import raises_status

NL, NB, BS, NH, HS, T = 2, 4, 4, 2, 8, 6


@pytest.fixture(scope="module", params=["gpu_emu.so", "gpu_host.so"])
def gctx(request, tmp_path_factory):
    lib = os.environ.get("KVCORE_LIBRARY", "")
    emu = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "tests", "modules", ".libs",
                       request.param)
    if not lib or not os.path.exists(emu):
        pytest.skip(f"the {request.param} GPU module is not built ({emu})")
    d = tmp_path_factory.mktemp("mods")
    os.symlink(emu, d / "kvcore_cuda.so")
    ctx = kvcore.Context(backend="cuda", module_path=str(d))
    assert ctx.backend == "cuda"
    return ctx


def pinned(ctx, a):
    """A pinned host copy of numpy array a."""
    buf = ctx.alloc_host(max(a.nbytes, 1), pinned=True)
    h = buf.numpy(a.dtype, a.shape)
    h[...] = a
    return h


def to_device(ctx, a):
    d = ctx.alloc_device(a.nbytes).view(a.dtype, a.shape)
    ctx.memcpy(d, pinned(ctx, a))
    return d


def to_host(ctx, d):
    h = pinned(ctx, np.zeros(d.shape, d.dtype))
    ctx.memcpy(h, d)
    return np.array(h)


def test_device_buffer_protocols(gctx, ctx):
    d = gctx.alloc_device(64)
    assert hasattr(d, "__cuda_array_interface__") and not hasattr(d, "__array_interface__")
    assert d.__cuda_array_interface__["data"][0] == d.ptr
    h = ctx.alloc_device(64)  # the CPU backend's "device" is host memory
    assert hasattr(h, "__array_interface__") and not hasattr(h, "__cuda_array_interface__")
    with raises_status("KVC_ERR_SHAPE"):
        d.view(np.float32, (17,))


def test_round_trip_through_device_memory(gctx):
    a = np.arange(96, dtype=np.float16).reshape(2, 48)
    assert (to_host(gctx, to_device(gctx, a)) == a).all()


@pytest.mark.parametrize("direction", [kvcore.D2H, kvcore.H2D])
def test_tokens_device_engine_pinned_chunk(gctx, ctx, direction):
    """Format 1 (NL x [2, NB, BS, NH, HS]) on the device, the chunk in pinned host memory: the same
    result as the CPU context on host arrays."""
    rng = np.random.default_rng(7)
    shape = kvcore.PageShape(kv_size=2, element_size=2, nl=NL, nb=NB, bs=BS, nh=NH, hs=HS)
    layers = [rng.standard_normal((2, NB, BS, NH, HS)).astype(np.float16) for _ in range(NL)]
    chunk = rng.standard_normal((2, NL, T, NH * HS)).astype(np.float16)
    slots = np.array([3, 0, -1, 9, 15, 4], np.int64)
    want_layers, want_chunk = [x.copy() for x in layers], chunk.copy()
    if direction == kvcore.D2H:
        want_chunk[...] = 0
        want_chunk[:, :, 2] = chunk[:, :, 2]  # the negative slot's row is left alone
        want_chunk[:, :, 2] = 0
    ctx.transfer_tokens(1, direction, shape, want_layers, want_chunk, slots)  # the CPU backend's answer

    dev = [to_device(gctx, x) for x in layers]
    hchunk = pinned(gctx, np.zeros_like(chunk) if direction == kvcore.D2H else chunk)
    gctx.transfer_tokens(1, direction, shape, dev, hchunk, slots)
    gctx.synchronize()
    if direction == kvcore.D2H:
        assert (hchunk == want_chunk).all()
    else:
        for d, w in zip(dev, want_layers):
            assert (to_host(gctx, d) == w).all()


def test_device_resident_slots(gctx):
    """Slots in device memory: the module validates them on the device; a bad slot is reported by
    the next synchronize (deferred error), and nothing is written."""
    shape = kvcore.PageShape(kv_size=2, element_size=2, nl=NL, nb=NB, bs=BS, nh=NH, hs=HS)
    dev = [to_device(gctx, np.ones((2, NB, BS, NH, HS), np.float16)) for _ in range(NL)]
    hchunk = pinned(gctx, np.zeros((2, NL, 2, NH * HS), np.float16))
    good = to_device(gctx, np.array([1, 2], np.int64))
    gctx.transfer_tokens(1, kvcore.D2H, shape, dev, hchunk, good)
    gctx.synchronize()
    assert (hchunk == 1).all()
    hchunk[...] = 0
    bad = to_device(gctx, np.array([1, NB * BS], np.int64))
    try:
        gctx.transfer_tokens(1, kvcore.D2H, shape, dev, hchunk, bad)
    except kvcore.KvcoreError as e:  # an implementation may also refuse at once
        assert e.name == "KVC_ERR_OUT_OF_RANGE"
    else:
        with raises_status("KVC_ERR_OUT_OF_RANGE"):
            gctx.synchronize()
    assert not hchunk.any()


def test_pageable_chunk_with_device_engine_refused(gctx):
    shape = kvcore.PageShape(kv_size=2, element_size=2, nl=NL, nb=NB, bs=BS, nh=NH, hs=HS)
    dev = [to_device(gctx, np.ones((2, NB, BS, NH, HS), np.float16)) for _ in range(NL)]
    chunk = np.zeros((2, NL, 2, NH * HS), np.float16)  # pageable numpy memory
    with raises_status("KVC_ERR_INVALID_ARG") as info:
        gctx.transfer_tokens(1, kvcore.D2H, shape, dev, chunk, np.array([1, 2], np.int64))
    assert "pageable" in info.value.message or "registered" in info.value.message
    assert not chunk.any()


def test_host_only_calls_run_on_cpu_ops(gctx, ctx):
    """Pageable host arrays on a GPU context: the CPU ops run them (nothing is refused)."""
    rng = np.random.default_rng(3)
    kv = rng.standard_normal((2, NL, 32, NH * HS)).astype(np.float16)
    assert gctx.codec_encode(kv, num_heads=NH, head_size=HS) == ctx.codec_encode(kv, num_heads=NH, head_size=HS)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("is_neox", [True, False])
def test_rope_on_device_keys(gctx, dtype, is_neox):
    """The GPU module combines the two table rows exactly like the CPU backend (normalised, in
    double) and rotates like its scalar tier: bit-identical keys, and old = new is the identity."""
    scalar = kvcore.Context(backend="cpu", isa="scalar")
    rng = np.random.default_rng(5)
    keys = rng.standard_normal((T, NH, HS)).astype(dtype)
    table = scalar.rope_cache_build(64, HS, 10000.0, dtype=dtype)
    old, new = rng.integers(0, 64, T).astype(np.int64), rng.integers(0, 64, T).astype(np.int64)
    want = keys.copy()
    scalar.rope_k_fused(want, old, new, table, is_neox=is_neox)
    dk, dtab = to_device(gctx, keys), to_device(gctx, table)
    gctx.rope_k_fused(dk, to_device(gctx, old), to_device(gctx, new), dtab, is_neox=is_neox)
    gctx.synchronize()
    assert (to_host(gctx, dk) == want).all()
    same = to_device(gctx, keys)
    gctx.rope_k_fused(same, to_device(gctx, old), to_device(gctx, old), dtab, is_neox=is_neox)
    gctx.synchronize()
    assert (to_host(gctx, same) == keys).all()
