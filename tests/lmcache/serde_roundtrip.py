# SPDX-License-Identifier: BSD-3-Clause
"""One chunk through both of LMCache's CacheGen serde generations, as LMCache's storage backends call
them, with whatever lmcache.c_ops this interpreter gets (kvcore through its installed hook, or
LMCache's own fallback): writes the encoded bytes, the decoded chunks and the times to OUT.pt.
    serde_roundtrip.py OUT.pt TOKENS"""
import sys
import time

import kvwire  # noqa: F401  (LMCache on Debian's torch 1.13: the test harness's shims; imports lmcache)
import torch

import lmcache
from lmcache.storage_backend.serde.cachegen_decoder import CacheGenDeserializer as LegacyDeserializer
from lmcache.storage_backend.serde.cachegen_encoder import CacheGenSerializer as LegacySerializer
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.naive_serde import CreateSerde

MODEL, NL, NH, HS = "mistralai/Mistral-7B-Instruct-v0.2", 32, 8, 128  # a model CacheGenConfig knows


def kv_chunk(tokens):
    """A deterministic [NL, 2, T, NH, HS] bf16 chunk with per-channel structure, as real K/V has."""
    g = torch.Generator().manual_seed(1234)
    scale = torch.rand((NL, 2, 1, NH, HS), generator=g) * 3 + 0.1
    return (torch.randn((NL, 2, tokens, NH, HS), generator=g) * scale).to(torch.bfloat16)


def timed(f, *a):
    t0 = time.perf_counter()
    r = f(*a)
    return r, time.perf_counter() - t0


def main(out, tokens):
    config = LMCacheEngineConfig.from_defaults(chunk_size=tokens)
    meta = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                           kv_dtype=torch.bfloat16, kv_shape=(NL, 2, tokens, NH, HS))
    kv = kv_chunk(tokens)
    res = {"c_ops": sys.modules["lmcache.c_ops"].multi_layer_kv_transfer.__module__, "tokens": tokens}
    # LMCache's first generation: [NL, 2, T, NH, HS] -> bytes -> the same shape
    ser, des = LegacySerializer(config, meta), LegacyDeserializer(config, meta, torch.bfloat16)
    res["legacy_bytes"], res["legacy_encode_s"] = timed(ser.to_bytes, kv)
    res["legacy_decoded"], res["legacy_decode_s"] = timed(des.from_bytes, res["legacy_bytes"])
    # v1 (CreateSerde): a KV_2LTD memory object [2, NL, T, NH*HS] -> a bytes object -> back
    s, d = CreateSerde("cachegen", meta, config)
    t2ld = kv.permute(1, 0, 2, 3, 4).reshape(2, NL, tokens, NH * HS).contiguous()
    obj = TensorMemoryObj(t2ld, MemoryObjMetadata(shape=t2ld.shape, dtype=t2ld.dtype, address=-1,
                                                  phy_size=t2ld.numel() * t2ld.element_size(), ref_count=-1,
                                                  fmt=MemoryFormat.KV_2LTD), parent_allocator=None)
    blob, res["v1_encode_s"] = timed(s.serialize, obj)
    res["v1_bytes"] = bytes(blob.byte_array)
    back, res["v1_decode_s"] = timed(d.deserialize, blob)
    res["v1_decoded"] = back.tensor.clone()
    res["input"] = kv
    torch.save(res, out)
    print(f"{res['c_ops']}: legacy encode {res['legacy_encode_s']:.3f} s decode {res['legacy_decode_s']:.3f} s; "
          f"v1 encode {res['v1_encode_s']:.3f} s decode {res['v1_decode_s']:.3f} s ({lmcache.__name__})")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
