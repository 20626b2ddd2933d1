# SPDX-License-Identifier: BSD-3-Clause
"""Host memory through the binding: views keep the memory (and its context) alive; LMCache's raw
alloc_*/free_* pairs; copies (kvc_memcpy, LMCache's split async copy, batched copies)."""
import ctypes
import gc
import os

import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
import kvcore.lmcache_extras as lmc_ext
from conftest import needs_torch, raises_status


def test_numpy_view_outlives_buffer_and_context():
    ctx = kvcore.Context(backend="cpu")
    probe = kvcore.Context(backend="cpu")  # only to prove nothing leaks into another context
    buf = ctx.alloc_host(1 << 16)
    arr = buf.numpy(np.float32, (128, 128))
    arr[:] = 3.0
    del buf, ctx
    gc.collect()
    assert arr.sum() == 3.0 * 128 * 128  # the memory is still mapped: the view holds the buffer
    owner = arr.base
    while not isinstance(owner, kvcore.HostBuffer):
        owner = owner.base
    c = owner._ctx
    assert c.live_allocations() == 1
    del arr, owner
    gc.collect()
    assert c.live_allocations() == 0  # the last view gone: freed
    assert probe.live_allocations() == 0


def test_torch_tensor_outlives_buffer():
    torch = needs_torch()
    ctx = kvcore.Context(backend="cpu")
    buf = ctx.alloc_host(4096, pinned=True)
    t = buf.torch(torch.bfloat16, (2, 1024))
    t.fill_(1.5)
    c = ctx
    del buf, ctx
    gc.collect()
    assert c.live_allocations() == 1
    assert float(t.float().sum()) == 1.5 * 2048
    del t
    gc.collect()
    assert c.live_allocations() == 0


def test_close_refused_while_views_live():
    ctx = kvcore.Context(backend="cpu")
    a = ctx.alloc_host(100).numpy()
    with raises_status("KVC_ERR_STATE"):
        ctx.close()
    del a
    gc.collect()
    ctx.close()
    with raises_status("KVC_ERR_STATE"):
        ctx.alloc_host(10)


def test_buffer_is_an_input(ctx):
    src = ctx.alloc_host(256)
    src.numpy()[:] = np.arange(256, dtype=np.uint8)
    dst = np.zeros(256, np.uint8)
    ctx.memcpy(dst, src)
    np.testing.assert_array_equal(dst, np.arange(256, dtype=np.uint8))
    with raises_status("KVC_ERR_NO_SPACE"):
        ctx.memcpy(dst[:10], src)


def test_shared_attach(ctx):
    name = f"/kvc_pytest_{os.getpid()}"
    a = ctx.alloc_host(8192, shared_name=name)
    a.numpy()[:5] = [1, 2, 3, 4, 5]
    b = ctx.attach_shared(name)
    assert b.size == 8192 and list(b.numpy()[:5]) == [1, 2, 3, 4, 5]
    assert a.report["name"] == name
    with raises_status("KVC_ERR_EXISTS"):
        ctx.alloc_host(8192, shared_name=name)
    del b
    del a


def test_bad_shared_name(ctx):
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.alloc_host(4096, shared_name="no-slash")


@pytest.mark.parametrize("size", [1, 4095, 4096, 8192, 1 << 20])
def test_lmcache_pinned_is_page_aligned(size):
    p = c_ops.alloc_pinned_ptr(size, 0)
    assert p % 4096 == 0
    c_ops.free_pinned_ptr(p)


def test_lmcache_alloc_free_pairs():
    pairs = [(c_ops.alloc_numa_ptr(4096, 0), c_ops.free_numa_ptr),
             (c_ops.alloc_pinned_numa_ptr(4096, 0), c_ops.free_pinned_numa_ptr),
             (c_ops.alloc_hugepage_pinned_ptr(4096, 0), c_ops.free_hugepage_pinned_ptr),
             (c_ops.alloc_hugepage_pinned_numa_ptr(4096, 0), c_ops.free_hugepage_pinned_numa_ptr)]
    for p, free in pairs:
        assert p
        free(p, 4096)
    name = f"/test_lmcache_shm_{os.getpid()}"
    p = c_ops.alloc_shm_pinned_ptr(4096, name)
    with raises_status("KVC_ERR_INVALID_ARG"):
        c_ops.free_shm_pinned_ptr(p, 4096, "/other")
    c_ops.free_shm_pinned_ptr(p, 4096, name)


def test_lmcache_free_errors():
    p = c_ops.alloc_numa_ptr(4096, 0)
    with raises_status("KVC_ERR_INVALID_ARG"):
        c_ops.free_numa_ptr(p, 8192)  # LMCache would munmap the wrong length
    c_ops.free_numa_ptr(p, 4096)
    with raises_status("KVC_ERR_STATE"):
        c_ops.free_numa_ptr(p, 4096)  # double free


def test_lmcache_unsupported():
    with raises_status("KVC_ERR_UNSUPPORTED"):
        c_ops.get_gpu_pci_bus_id(0)  # the CPU backend has no GPU


def test_lmcache_pcie_bar(tmp_path):
    """alloc_pcie_bar_ptr maps a device's memory file (a regular file stands in for the sysfs
    resource file: the same open/fstat/mmap path) shared and writable at the offset."""
    bar = tmp_path / "resource0"
    bar.write_bytes(bytes(range(256)) * 64)  # 16 KiB
    p = lmc_ext.alloc_pcie_bar_ptr(str(bar), 4096, 8192)
    view = (ctypes.c_uint8 * 4096).from_address(p)
    assert bytes(view[:4]) == bytes([0, 1, 2, 3])  # offset 8192 = 32 * 256
    view[0] = 0xEE
    with raises_status("KVC_ERR_INVALID_ARG"):
        lmc_ext.free_pcie_bar_ptr(p, 8192)  # the wrong length
    lmc_ext.free_pcie_bar_ptr(p, 4096)
    assert bar.read_bytes()[8192] == 0xEE
    with raises_status("KVC_ERR_STATE"):
        lmc_ext.free_pcie_bar_ptr(p, 4096)
    with raises_status("KVC_ERR_OUT_OF_RANGE"):
        lmc_ext.alloc_pcie_bar_ptr(str(bar), 4096, 16384)
    with raises_status("KVC_ERR_INVALID_ARG"):
        lmc_ext.alloc_pcie_bar_ptr(str(bar), 4096, 100)  # not page aligned
    with raises_status("KVC_ERR_NOT_FOUND"):
        lmc_ext.alloc_pcie_bar_ptr(str(tmp_path / "missing"), 4096, 0)


@pytest.mark.parametrize("off,n", [(0, 64), (32, 32), (32, 64), (0, 192), (64, 128), (16, 200)])
@pytest.mark.parametrize("direction", [0, 1])
def test_lmcache_memcpy_async(xp, off, n, direction):
    host = np.arange(256, dtype=np.uint8)
    dev = (255 - np.arange(256)).astype(np.uint8)
    h, d = xp.asarray(host), xp.asarray(dev)
    hp = h.ctypes.data if xp.name == "numpy" else h.data_ptr()
    dp = d.ctypes.data if xp.name == "numpy" else d.data_ptr()
    if direction == 0:  # H2D: the source is the host buffer, off is its offset
        c_ops.lmcache_memcpy_async(dp, hp + off, n, direction, off, 64)
        got, want = xp.tonumpy(d)[:n], host[off:off + n]
        rest = xp.tonumpy(d)[n:] - dev[n:]
    else:  # D2H: the destination is the host buffer
        c_ops.lmcache_memcpy_async(hp + off, dp, n, direction, off, 64)
        got, want = xp.tonumpy(h)[off:off + n], dev[:n]
        rest = np.concatenate([xp.tonumpy(h)[:off] - host[:off], xp.tonumpy(h)[off + n:] - host[off + n:]])
    np.testing.assert_array_equal(got, want)
    assert not rest.any()


def test_lmcache_memcpy_async_bad_alignment():
    a, b = np.zeros(64, np.uint8), np.ones(64, np.uint8)
    with raises_status("KVC_ERR_INVALID_ARG"):
        c_ops.lmcache_memcpy_async(a.ctypes.data, b.ctypes.data, 64, 0, 0, 0)
    assert not a.any()


def test_batched_memcpy():
    srcs = [np.full(n, i + 1, np.uint8) for i, n in enumerate([10, 0, 300])]
    dsts = [np.zeros(len(s), np.uint8) for s in srcs]
    c_ops.batched_memcpy([s.ctypes.data for s in srcs], [d.ctypes.data for d in dsts], [len(s) for s in srcs])
    for s, d in zip(srcs, dsts):
        np.testing.assert_array_equal(s, d)
    with raises_status("KVC_ERR_SHAPE"):
        c_ops.batched_memcpy([1], [2, 3], [4])


def test_alloc_host_kinds(ctx):
    b = ctx.alloc_host(1 << 21, pinned=True, hugepage=True)
    assert b.report["kind_requested"] == 1 | 8 and b.report["pinned"] == 1
    assert b.ptr % 4096 == 0 and b.query()["size"] == 1 << 21
    n = ctx.alloc_host(1 << 16, numa_node=0, strict=True)
    assert n.report["numa_bound"] == 0 and n.report["kind_obtained"] & 2
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.alloc_host(0)
