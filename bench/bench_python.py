#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""What the Python package adds per call: each op through kvcore (Context method, and the
lmcache_ops function LMCache would call) next to the same op called from C on the same shapes
(bench/pybench-c, run in the same session, rounds interleaved). Shapes: 32 layers, 256 tokens,
8 KV heads x 128, fp16, block size 16 (a 32 MiB chunk), plus tiny ops that expose the fixed cost.

    KVCORE_LIBRARY=.libs/libkvcore.so PYTHONPATH=python python3 bench/bench_python.py [--reps N]

Every figure is the fastest of 3 x 5 rounds (3 x 20 for calls on less than 1 MiB; C and Python
rounds interleaved), the one least disturbed by other load. Prints `kvcore bench`-style JSON lines: value = microseconds per call
through Python, baseline =
the C call (another process); overhead_us = value - baseline, overhead_pct relative to it.
`ctypes_us` (transfers, memcpy) is a bare ctypes call with a prebuilt argument struct on the same
buffers in this process, and over_ctypes_us what the package's argument handling adds to it: the
in-process figure, free of the two processes' different memory and scheduling."""
import argparse
import ctypes as C
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import kvcore
import kvcore.lmcache_ops as c_ops
from kvcore import _abi, _lib

try:
    import torch
except ImportError:
    torch = None

NL, NH, HS, BS, NB, T = 32, 8, 128, 16, 32, 256
HERE = os.path.dirname(os.path.abspath(__file__))


def timeit(fn, reps, rounds):
    fn()
    r = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        r.append((time.perf_counter() - t0) / reps * 1e6)
    return min(r)  # the round least disturbed by other load, as pybench-c reports


def c_time(exe, case, reps, rounds, threads):
    env = dict(os.environ, KVCORE_NUM_THREADS=str(threads))  # the same CPU threads as the Python side
    out = subprocess.run([exe, case, str(reps), str(rounds)], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)["c_us"]


def setup(ctx, tiny=False):
    nl, nh, hs, t = (1, 1, 8, 1) if tiny else (NL, NH, HS, T)
    rng = np.random.default_rng(12345)
    layers = [np.zeros((2, NB, BS, nh, hs), np.float16) for _ in range(nl)]
    slots = rng.permutation(NB * BS)[:t].astype(np.int64)
    chunk = np.zeros((2, nl, t, nh * hs), np.float16)
    shape = kvcore.PageShape(kv_size=2, element_size=2, nl=nl, nb=NB, bs=BS, nh=nh, hs=hs)
    return layers, slots, chunk, shape


def raw_tokens(ctx, layers, chunk, slots, shape, d):
    """A bare ctypes call of kvc_transfer_tokens on the same buffers (prebuilt argument struct)."""
    tab = (C.c_void_p * len(layers))(*[x.ctypes.data for x in layers])
    a = _abi.TokenTransfer(1, d, shape, C.addressof(tab), len(layers), chunk.ctypes.data, 0, len(slots),
                           slots.ctypes.data, _abi.INDEX_INT64, len(slots), 0, None)
    h, ref = ctx._handle(), C.byref(a)
    return lambda tab=tab, a=a: _lib.kvc_transfer_tokens(h, ref)


def cases(ctx, reps_big, reps_small):
    """(case name, C case, reps, {api: fn}, bytes, raw ctypes fn or None)"""
    out = []
    h = ctx._handle()
    to_t = (lambda a: torch.from_numpy(a)) if torch is not None else (lambda a: a)
    for case, d in (("tokens_d2h", kvcore.D2H), ("tokens_h2d", kvcore.H2D)):
        layers, slots, chunk, shape = setup(ctx)
        tl, tc, ts = [to_t(x) for x in layers], to_t(chunk), to_t(slots)
        ptrs = to_t(np.array([x.ctypes.data for x in layers], np.int64))
        eng = ctx.engine(1, shape, layers)
        out.append((f"tokens/NL_X_TWO_NB_BS_NH_HS/{'D2H' if d else 'H2D'}", case, reps_big, {
            "Context": lambda layers=layers, chunk=chunk, slots=slots, shape=shape, d=d:
                ctx.transfer_tokens(1, d, shape, layers, chunk, slots),
            "Context.engine": lambda eng=eng, chunk=chunk, slots=slots, shape=shape, d=d:
                ctx.transfer_tokens(1, d, shape, eng, chunk, slots),
            "lmcache_ops": lambda tc=tc, ptrs=ptrs, ts=ts, d=d, keep=tl:
                c_ops.multi_layer_kv_transfer(tc, ptrs, ts, "cpu", NB * BS, d, 1, BS, HS),
        }, chunk.nbytes, raw_tokens(ctx, layers, chunk, slots, shape, d)))
    layers, slots, chunk, shape = setup(ctx)
    ids = (slots[:T // BS] // BS).astype(np.int64)
    ptrs = np.array([x.ctypes.data for x in layers], np.int64)
    desc = c_ops.PageBufferShapeDesc()  # LMCache builds it empty, then field by field
    desc.kv_size, desc.nl, desc.nb, desc.bs, desc.nh, desc.hs, desc.element_size = 2, NL, NB, BS, NH, HS, 2
    btab, otab = (C.c_void_p * NL)(*[x.ctypes.data for x in layers]), (C.c_void_p * 1)(chunk.ctypes.data)
    braw = _abi.BlockTransfer(1, 1, shape, C.addressof(btab), NL, C.addressof(otab), 1, 0, T, ids.ctypes.data,
                              _abi.INDEX_INT64, len(ids), 0, None)
    bref = C.byref(braw)
    out.append(("blocks/NL_X_TWO_NB_BS_NH_HS/D2H", "blocks_d2h", reps_big, {
        "Context": lambda: ctx.transfer_blocks(1, kvcore.D2H, shape, layers, [chunk], ids, T),
        "Context.engine": lambda eng=ctx.engine(1, shape, layers): ctx.transfer_blocks(1, kvcore.D2H, shape, eng, [chunk],
                                                                                        ids, T),
        "lmcache_ops": lambda: c_ops.multi_layer_block_kv_transfer(ptrs, [chunk.ctypes.data], ids, "cpu", 1, desc, T,
                                                                   1, 0),
    }, chunk.nbytes, lambda keep=(btab, otab, braw): _lib.kvc_transfer_blocks(h, bref)))
    # tiny transfer: one token of one 8-element head, so the time is the call itself
    tl_, ts_, tc_, tsh = setup(ctx, tiny=True)
    tptrs = np.array([x.ctypes.data for x in tl_], np.int64)
    ptab = (C.c_void_p * 1)(tl_[0].ctypes.data)
    raw = _abi.TokenTransfer(format=1, direction=1, shape=tsh, engine_ptrs=C.addressof(ptab), num_engine_ptrs=1,
                             chunk=tc_.ctypes.data, num_tokens=1, slots=ts_.ctypes.data, slot_type=_abi.INDEX_INT64,
                             num_slots=1)
    rawref = C.byref(raw)
    out.append(("tokens/tiny/D2H", "tiny_tokens", reps_small, {
        "Context": lambda: ctx.transfer_tokens(1, kvcore.D2H, tsh, tl_, tc_, ts_),
        "lmcache_ops": lambda: c_ops.multi_layer_kv_transfer(tc_, tptrs, ts_, "cpu", NB * BS, 1, 1, BS, 8),
    }, tc_.nbytes, lambda keep=(ptab, raw): _lib.kvc_transfer_tokens(h, rawref)))
    sym = np.zeros((2 * NL, T, NH * HS), np.int8)
    cdf_out = np.empty((2 * NL, NH * HS, 33), np.uint16)
    out.append(("cdf/64x256x1024", "cdf", max(1, reps_big // 2), {
        "Context": lambda: ctx.cdf(sym, 32, out=cdf_out),
        "lmcache_ops": lambda: c_ops.calculate_cdf(sym, 32),
    }, sym.nbytes, None))
    s1, o1 = np.zeros((1, 1, 1), np.int8), np.empty((1, 1, 33), np.uint16)
    out.append(("cdf/tiny", "cdf_tiny", reps_small, {
        "Context": lambda: ctx.cdf(s1, 32, out=o1),
        "lmcache_ops": lambda: c_ops.calculate_cdf(s1, 32),
    }, 1, None))
    keys = np.zeros((T, NH, HS), np.float16)
    table = ctx.rope_cache_build(4096, HS, 10000.0, dtype=np.float16)  # zero rows take a slow path
    pos = np.arange(T, dtype=np.int64)
    new = pos + 1000
    out.append(("rope/256x8x128", "rope", reps_small // 10, {
        "Context": lambda: ctx.rope_k_fused(keys, pos, new, table),
        "lmcache_ops": lambda: c_ops.rotary_embedding_k_fused(pos, new, keys, HS, table, True),
    }, keys.nbytes, None))
    a, b = np.zeros(64, np.uint8), np.zeros(64, np.uint8)
    ha, hb = C.c_void_p(a.ctypes.data), C.c_void_p(b.ctypes.data)
    out.append(("memcpy/64B", "memcpy64", reps_small, {"Context": lambda: ctx.memcpy(a, b)}, 64,
                lambda: _lib.kvc_memcpy(h, ha, hb, 64)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10, help="calls per round for the 32 MiB cases (x50 for short ones)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of both sides (default 1)")
    ap.add_argument("--cexe", default=os.environ.get("KVC_PYBENCH_C", os.path.join(HERE, "pybench-c")))
    args = ap.parse_args()
    ctx = kvcore.Context(num_threads=args.threads)
    c_ops._ctx = ctx  # lmcache_ops runs on the same context
    for name, ccase, reps, apis, nbytes, raw in cases(ctx, args.reps, args.reps * 50):
        rounds = 5 if nbytes > 1 << 20 else 20  # short calls: more rounds to find a quiet moment
        cs, ps, rs = [], {api: [] for api in apis}, []
        for _ in range(3):  # interleave C and Python rounds so both see the same machine load
            cs.append(c_time(args.cexe, ccase, reps, rounds, ctx.num_threads))
            for api, fn in apis.items():
                ps[api].append(timeit(fn, reps, rounds))
            if raw is not None:
                if raw() != 0:
                    raise SystemExit(f"{name}: the bare call failed: {_lib.kvc_last_error().decode()}")
                rs.append(timeit(raw, reps, rounds))
        c_us = min(cs)
        for api, r in ps.items():
            v = min(r)
            rec = {"suite": "python", "case": name, "api": api, "value": round(v, 4), "unit": "us",
                   "baseline_name": "c", "baseline_value": round(c_us, 4), "ratio": round(v / c_us, 4),
                   "overhead_us": round(v - c_us, 4), "overhead_pct": round(100 * (v - c_us) / c_us, 2),
                   "bytes": nbytes, "backend": ctx.backend, "threads": ctx.num_threads,
                   "torch": torch is not None and api == "lmcache_ops" and name.startswith("tokens/NL")}
            if raw is not None:  # same process, same buffers: what the package adds over a bare call
                r = min(rs)
                rec["ctypes_us"] = round(r, 4)
                rec["over_ctypes_us"] = round(v - r, 4)
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
