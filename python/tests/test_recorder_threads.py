# SPDX-License-Identifier: BSD-3-Clause
"""Recorders through the binding, and calls from several Python threads: they must be correct at
once and run in parallel (the GIL is released inside every libkvcore call)."""
import threading

import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
from conftest import raises_status


def test_completions_in_order(ctx):
    ctx.drain_completions()
    payloads = [b"a\x00b", b"", bytes(range(256))]
    for i, p in enumerate(payloads):
        ctx.record_completion(f"kind{i}", p)
    got = ctx.drain_completions()
    assert got == [(f"kind{i}", p) for i, p in enumerate(payloads)]
    assert ctx.drain_completions() == []


def test_events(ctx):
    t0 = kvcore.recorder_now()
    ctx.record_event("store", "s1", {"k": "v", "x": "y"}, {"n": -5, "big": 1 << 40})
    ctx.record_event("load", "s2")
    ev = ctx.drain_events()
    assert [e[:2] for e in ev] == [("store", "s1"), ("load", "s2")]
    assert ev[0][3] == {"k": "v", "x": "y"} and ev[0][4] == {"n": -5, "big": 1 << 40}
    assert t0 <= ev[0][2] <= ev[1][2] <= kvcore.recorder_now()
    assert ctx.drain_events() == []


def test_lmcache_recorders():
    c_ops.drain_recorded_completions()
    c_ops.drain_recorded_events()
    for i in range(3):
        c_ops.record_completion_on_stream(0, "done", bytes([i]))
    for i in range(5):
        c_ops.record_event_on_stream(0, f"ev{i}", "sess", {"a": "b"}, {"i": i})
    comp = c_ops.drain_recorded_completions()
    assert comp == [("done", bytes([i])) for i in range(3)] and isinstance(comp[0][1], bytes)
    ev = c_ops.drain_recorded_events()
    assert [(e[0], e[4]["i"]) for e in ev] == [(f"ev{i}", i) for i in range(5)]
    assert c_ops.drain_recorded_completions() == [] and c_ops.drain_recorded_events() == []


def test_recorder_errors():
    c = kvcore.Context(backend="cpu")
    with raises_status("KVC_ERR_INVALID_ARG"):
        c.record_event("e", "s", None, {"k": "not an int"})
    assert c.drain_events() == []
    c.close()
    with raises_status("KVC_ERR_STATE"):
        c.record_completion("k", b"x")


def test_threads_give_correct_results(ctx):
    """Eight threads encoding and decoding different data at once all get their own results."""
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((2, 2, 128, 32)).astype(np.float32) for _ in range(8)]
    want = [ctx.codec_encode(d) for d in data]
    got = [None] * 8

    def work(i):
        got[i] = ctx.codec_encode(data[i])
    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == want


def test_gil_released_during_a_call():
    """The main thread observes a transfer half done while another thread is inside libkvcore:
    possible only if that call released the GIL. (A held GIL lets the main thread run only before
    or after the call, when the chunk is all zeros or all copied.)"""
    ctx = kvcore.Context(backend="cpu", num_threads=1)
    nb, bs, row = 4096, 16, 256
    shape = kvcore.PageShape(kv_size=1, element_size=4, nl=1, nb=nb, bs=bs, nh=1, hs=row)
    engine = np.ones((nb, bs, row), np.float32)
    slots = np.arange(nb * bs, dtype=np.int64)
    for attempt in range(5):
        chunk = np.zeros((1, nb * bs, row), np.float32)
        done = threading.Event()
        seen = []

        def work():
            ctx.transfer_tokens(3, kvcore.D2H, shape, [engine], chunk, slots)
            done.set()
        t = threading.Thread(target=work)
        t.start()
        while not done.is_set():
            sample = chunk[0, ::4096, 7]  # 16 rows spread over the chunk
            if 0 < sample.sum() < len(sample):
                seen.append(True)
                break
        t.join()
        assert (chunk == 1).all()
        if seen:
            return
    pytest.fail("never saw a transfer in progress from another thread in 5 tries: is the GIL held?")
