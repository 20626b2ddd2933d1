# SPDX-License-Identifier: BSD-3-Clause
"""LMCache's own CacheGen serializer and deserializer, both generations (lmcache.storage_backend.serde
and v1's CreateSerde("cachegen")), on a 600-token chunk (windows of 256, 256 and 88 tokens), with
kvcore wired in by `python3 -m kvcore.lmcache install` as a user does it, against the same LMCache
on its own fallback: every component of the bytes the same, the decoded chunk the same and within
the quantisation bound of the input, and both timed."""
import os
import subprocess
import sys

import pytest
import torch

from lmcache.storage_backend.serde.cachegen_basics import CacheGenGPUEncoderOutput

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = 600


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serde")
    env = dict(os.environ, PYTHONUSERBASE=str(tmp / "userbase"), NUMBA_CACHE_DIR=str(tmp / "numba"))
    env.pop("KVCORE_LMCACHE", None)
    r = subprocess.run([sys.executable, "-m", "kvcore.lmcache", "install", "--user"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    out = {}
    for name, extra in (("kvcore", {}), ("lmcache", {"KVCORE_LMCACHE": "0"})):
        path = tmp / f"{name}.pt"
        r = subprocess.run([sys.executable, os.path.join(HERE, "serde_roundtrip.py"), str(path), str(TOKENS)],
                           env=dict(env, **extra), capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr[-4000:]
        print(r.stdout.strip())
        out[name] = torch.load(path)
    return out


def test_kvcore_was_wired_in_by_the_hook(runs):
    assert runs["kvcore"]["c_ops"] == "kvcore.lmcache_ops"
    assert runs["lmcache"]["c_ops"] == "lmcache.python_ops_fallback"


@pytest.mark.parametrize("gen", ["legacy", "v1"])
def test_encoded_components_are_lmcaches(runs, gen):
    a = CacheGenGPUEncoderOutput.from_bytes(runs["kvcore"][f"{gen}_bytes"])
    b = CacheGenGPUEncoderOutput.from_bytes(runs["lmcache"][f"{gen}_bytes"])
    assert torch.equal(a.cdf, b.cdf)
    assert torch.equal(a.max_tensors_key, b.max_tensors_key) and torch.equal(a.max_tensors_value, b.max_tensors_value)
    assert (a.num_heads, a.head_size) == (b.num_heads, b.head_size)
    assert [c.ntokens for c in a.data_chunks] == [c.ntokens for c in b.data_chunks] == [256, 256, 88]
    for ca, cb in zip(a.data_chunks, b.data_chunks):
        assert torch.equal(ca.bytestream_lengths, cb.bytestream_lengths)
        assert torch.equal(ca.bytestream, cb.bytestream)
    # the serialised bytes themselves are not compared: torch.save names each storage by a memory
    # address, which differs between any two runs, in value and in length


@pytest.mark.parametrize("gen", ["legacy", "v1"])
def test_decoded_as_lmcache_and_within_the_quantisation_bound(runs, gen):
    got, want = runs["kvcore"][f"{gen}_decoded"], runs["lmcache"][f"{gen}_decoded"]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)
    x = runs["kvcore"]["input"].float()  # [NL, 2, T, NH, HS]
    y = got.float()
    if gen == "v1":  # KV_2LTD [2, NL, T, NH*HS]
        y = y.reshape(2, x.shape[0], TOKENS, x.shape[3], x.shape[4]).permute(1, 0, 2, 3, 4)
    nl = x.shape[0]
    err = (y - x).abs().flatten(3)  # [NL, 2, T, C]
    mx = x.abs().flatten(3).amax(dim=-1, keepdim=True)
    # LMCache's bins for this model (CacheGenConfig): 32 for the first 10 key / 2 value layers, else 16
    bins = torch.tensor([[32 if l < 10 else 16, 32 if l < 2 else 16] for l in range(nl)], dtype=torch.float32)
    step = mx / (bins // 2 - 1).view(nl, 2, 1, 1)
    assert (err <= step * 0.5 * 1.01 + mx * 2 ** -7).all()  # half a step, plus bf16's rounding of the result


def test_kvcore_is_faster_than_lmcaches_fallback(runs):
    """Reported, not a timed assertion: the times of both (printed by the runs above)."""
    for gen in ("legacy", "v1"):
        for op in ("encode", "decode"):
            k, f = runs["kvcore"][f"{gen}_{op}_s"], runs["lmcache"][f"{gen}_{op}_s"]
            print(f"{gen} {op}: kvcore {k:.3f} s, LMCache's fallback {f:.3f} s ({f / k:.1f}x)")
