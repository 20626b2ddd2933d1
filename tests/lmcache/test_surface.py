# SPDX-License-Identifier: BSD-3-Clause
"""kvcore.lmcache_ops against LMCache's own pure-Python ops (lmcache.python_ops_fallback) at the
commit kvcore follows: the same public surface, the same signatures as LMCache reads them (names,
order, kinds, defaults, annotations), and the same results where LMCache's own code paths broke
on kvcore before (padded MLA pools, skips past the end, window-by-window decodes). Run by
tests/lmcache/run.sh with LMCache's source on sys.path and `-p kvwire` (its torch 1.13 shims)."""
import enum
import inspect

import pytest
import torch

import kvcore.lmcache
import kvcore.lmcache_ops as kv
import lmcache.python_ops_fallback as fb


def public(mod):
    return {n: o for n, o in vars(mod).items() if not n.startswith("_") and getattr(o, "__module__", None) ==
            mod.__name__}


def annotation(a, module):
    """An annotation as text: LMCache's (objects, some strings) and kvcore's (strings) compare equal."""
    if a is inspect.Parameter.empty:
        return None
    return a if isinstance(a, str) else inspect.formatannotation(a, base_module=module.__name__)


def signature(f, module):
    sig = inspect.signature(f)
    return ([(p.name, p.kind, repr(p.default), annotation(p.annotation, module)) for p in sig.parameters.values()],
            annotation(sig.return_annotation, module))


def test_the_same_public_names():
    assert sorted(public(kv)) == sorted(public(fb))
    assert sorted(kv.__all__) == sorted(public(fb))


@pytest.mark.parametrize("name", sorted(n for n, o in public(fb).items() if inspect.isfunction(o) or
                                        (inspect.isclass(o) and not issubclass(o, enum.Enum))))
def test_signature_as_lmcache_reads_it(name):
    assert signature(getattr(kv, name), kv) == signature(getattr(fb, name), fb)


@pytest.mark.parametrize("name", sorted(n for n, o in public(fb).items() if inspect.isclass(o) and
                                        issubclass(o, enum.Enum)))
def test_enum_members(name):
    assert {m.name: int(m) for m in getattr(kv, name)} == {m.name: int(m) for m in getattr(fb, name)}
    assert issubclass(getattr(kv, name), enum.IntEnum) == issubclass(getattr(fb, name), enum.IntEnum)


def test_shape_desc_attributes():
    def attrs(o):
        return {a: getattr(o, a) for a in dir(o) if not a.startswith("_") and not callable(getattr(o, a))}
    assert attrs(kv.PageBufferShapeDesc()) == attrs(fb.PageBufferShapeDesc())


def test_lmcache_picks_its_tensor_path_for_kvcore():
    """LMCache's multiprocess transfer reads multi_layer_block_kv_transfer's lmcache_objects_ptrs
    annotation to choose tensors or raw pointers (transfer_context/base.py)."""
    ann = str(inspect.signature(kv.multi_layer_block_kv_transfer).parameters["lmcache_objects_ptrs"].annotation)
    assert "Tensor" in ann


def test_the_commit_is_the_one_tested(lmcache_commit):
    assert kvcore.lmcache.LMCACHE_COMMIT == lmcache_commit


# ---------------------------------------------------------------- results, side by side with LMCache

def desc_for(mod, **fields):
    d = mod.PageBufferShapeDesc()
    for k, v in fields.items():
        setattr(d, k, v)
    return d


@pytest.mark.parametrize("skip", [0, 2, 3, 9])
def test_padded_mla_pool_block_transfer_as_lmcache(skip):
    """DeepSeek's padded MLA pool (block_stride_elems = stride(0) > BS*HS): both directions, with
    skips up to and past the end, element for element LMCache's result."""
    nl, nb, bs, hs, pad, chunk = 3, 8, 4, 16, 8, 8
    g = torch.Generator().manual_seed(skip)
    out = {}
    for name, mod in (("kvcore", kv), ("lmcache", fb)):
        pools = [torch.randn((nb, bs * hs + pad), generator=torch.Generator().manual_seed(l)) for l in range(nl)]
        views = [p[:, :bs * hs].unflatten(1, (bs, hs)) for p in pools]
        desc = desc_for(mod, kv_size=1, nl=nl, nb=nb, bs=bs, nh=1, hs=hs, element_size=4,
                        block_stride_elems=views[0].stride(0))
        ids = torch.tensor([6, 1, 3], dtype=torch.int64)
        objs = [torch.full((nl, chunk, hs), -1.0) for _ in range(2)]
        mod.multi_layer_block_kv_transfer(views, objs, ids, "cpu", mod.TransferDirection.D2H, desc, chunk,
                                          mod.EngineKVFormat.NL_X_NB_BS_HS, skip)
        back = [torch.randn((nl, chunk, hs), generator=g) for _ in range(2)]
        mod.multi_layer_block_kv_transfer(views, back, ids, "cpu", mod.TransferDirection.H2D, desc, chunk,
                                          mod.EngineKVFormat.NL_X_NB_BS_HS, skip)
        out[name] = (objs, pools)
        g = torch.Generator().manual_seed(skip)  # the same H2D objects for the second run
    for a, b in zip(out["kvcore"][0] + out["kvcore"][1], out["lmcache"][0] + out["lmcache"][1]):
        assert torch.equal(a, b)


def window_streams(nl2, t, c, bins, seed):
    sym = torch.randint(0, bins, (nl2, t, c), generator=torch.Generator().manual_seed(seed)).to(torch.int8)
    cdf = fb.calculate_cdf(sym, bins)
    buf = torch.zeros((nl2, c, 256), dtype=torch.uint8)
    lengths = torch.zeros((nl2, c), dtype=torch.int32)
    fb.encode_fast_new(cdf, sym, buf, lengths)
    return cdf, buf, lengths


@pytest.mark.parametrize("decoder", ["decode_fast_new", "decode_fast_prefsum"])
def test_window_by_window_decode_as_lmcache(decoder):
    """LMCache's decode_function_gpu: 600 tokens as windows of 256, 256, 88 into output[:, a:b, :]."""
    nl2, c, bins = 4, 16, 32
    outs = {}
    for name, mod in (("kvcore", kv), ("lmcache", fb)):
        output = torch.full((nl2, 600, c), 0xEE, dtype=torch.uint8)
        for w, (a, b) in enumerate(((0, 256), (256, 512), (512, 600))):
            cdf, buf, lengths = window_streams(nl2, b - a, c, bins, w)
            if decoder == "decode_fast_new":
                mod.decode_fast_new(cdf, buf, lengths, output[:, a:b, :])
            else:
                data = torch.cat([buf[l, k, :lengths[l, k]] for l in range(nl2) for k in range(c)])
                prefsum = lengths.flatten().cumsum(0).reshape(lengths.shape)
                mod.decode_fast_prefsum(cdf, data, prefsum, output[:, a:b, :])
        outs[name] = output
    assert torch.equal(outs["kvcore"], outs["lmcache"])
    assert not (outs["kvcore"] == 0xEE).all(dim=0).any(), "every token of every window was written"
