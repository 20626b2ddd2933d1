# SPDX-License-Identifier: BSD-3-Clause
"""The package behaves as numpy, torch and python-zstandard users expect (issue 27): one-line
compress/decompress and .kvcs streams (checked against the `kvcore` CLI), type and shape in = type
and shape out, typed exceptions, enums, PageShape, sequences as index tables, version, hints and
docstrings, and a thread count that does not depend on importing torch first."""
import errno
import inspect
import io
import os
import subprocess
import sys
import typing
import zlib

import numpy as np
import pytest

import kvcore
from kvcore import _abi
from conftest import needs_torch

NL, T, NH, HS = 3, 300, 2, 16


def kv_data(shape=(2, NL, T, NH, HS), dtype=np.float16, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- compress / decompress
@pytest.mark.parametrize("shape", [(2, NL, T, NH, HS), (2, NL, T, NH * HS), (NL, T, HS)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_numpy_round_trip_keeps_shape_and_dtype(shape, dtype):
    kv = kv_data(shape, dtype)
    data = kvcore.compress(kv)
    assert isinstance(data, bytes) and kvcore.probe(data)["kind"] == "one"
    out = kvcore.decompress(data)
    assert type(out) is np.ndarray and out.shape == kv.shape and out.dtype == kv.dtype
    # lossy, but close: CacheGen's quantisation error is a small fraction of the range
    assert np.abs(out.astype(np.float32) - kv.astype(np.float32)).max() < 0.25 * np.abs(kv).max()


def test_compress_equals_context_codec_encode(ctx):
    kv = kv_data()
    assert kvcore.compress(kv) == ctx.codec_encode(kv)
    np.testing.assert_array_equal(kvcore.decompress(kvcore.compress(kv)), ctx.codec_decode(ctx.codec_encode(kv)))


def test_torch_in_torch_out():
    torch = needs_torch()
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        kv = torch.randn(2, NL, 256, NH, HS).to(dt)
        out = kvcore.decompress(kvcore.compress(kv), like=kv)
        assert isinstance(out, torch.Tensor) and out.dtype == dt and tuple(out.shape) == tuple(kv.shape)
        assert out.device == kv.device
        assert (out.float() - kv.float()).abs().max() < 0.25 * kv.float().abs().max()
    # the case: a torch fp16 (2, 4, 256, 8, 128) through the Context codec comes back as such
    ctx = kvcore.default_context()
    kv = torch.randn(2, 4, 256, 8, 128).half()
    out = ctx.codec_decode(ctx.codec_encode(kv), like=kv)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 4, 256, 8, 128) and out.dtype == torch.float16
    assert isinstance(kvcore.decompress(kvcore.compress(kv), like="torch"), torch.Tensor)


def test_torch_noncontiguous_and_out_tensor():
    torch = needs_torch()
    kv = torch.randn(2, NL, 64, HS, NH).half().transpose(3, 4)  # not contiguous
    data = kvcore.compress(kv)
    assert data == kvcore.compress(kv.contiguous())
    out = torch.empty(2, NL, 64, NH, HS, dtype=torch.float16)
    assert kvcore.decompress(data, out=out) is out
    np.testing.assert_array_equal(out.numpy(), kvcore.decompress(data))


def test_decompress_out_checked_by_shape():
    kv = kv_data()
    data = kvcore.compress(kv)
    out = np.empty(kv.shape, kv.dtype)
    assert kvcore.decompress(data, out=out) is out
    flat = np.empty((2, NL, T, NH * HS), kv.dtype)  # the head split flattened is the same bytes
    kvcore.decompress(data, out=flat)
    np.testing.assert_array_equal(flat.reshape(kv.shape), out)
    with pytest.raises(ValueError) as e:
        kvcore.decompress(data, out=np.empty((2, NL, T // 2, NH, HS), kv.dtype))
    assert e.value.status == kvcore.errors.KVC_ERR_SHAPE if hasattr(kvcore.errors, "KVC_ERR_SHAPE") else True
    assert e.value.name == "KVC_ERR_SHAPE"
    assert f"(2, {NL}, {T // 2}, {NH}, {HS})" in str(e.value) and f"(2, {NL}, {T}, {NH}, {HS})" in str(e.value)
    assert "bytes" not in str(e.value)
    with pytest.raises(TypeError, match=r"out: list, expected an array of shape \(2, 3, 300, 2, 16\)"):
        kvcore.decompress(data, out=[])
    with pytest.raises(TypeError) as e:
        kvcore.decompress(data, out=np.empty(kv.shape, np.float32))
    assert e.value.name == "KVC_ERR_DTYPE" and "float32" in str(e.value) and "float16" in str(e.value)
    # the Context's decode names shapes too (it said "output of N bytes, the chunk needs M")
    with pytest.raises(ValueError, match=r"out: shape \(2, 3, 150, 2, 16\), the container holds"):
        kvcore.default_context().codec_decode(data, out=np.empty((2, NL, T // 2, NH, HS), kv.dtype))


def test_levels_bins_key_scaling():
    kv = kv_data(seed=1)
    sizes = [len(kvcore.compress(kv, level)) for level in range(4)]
    assert sizes[2] < sizes[0] and sizes[3] < sizes[0]
    assert kvcore.inspect(kvcore.compress(kv, key_scaling="channel"))["key_scaling"] == 1
    assert kvcore.inspect(kvcore.compress(kv, key_scaling=kvcore.KeyScaling.CHANNEL))["key_scaling"] == 1
    assert kvcore.compress(kv, 2) == kvcore.default_context().codec_encode(kv, level=2)
    assert len(kvcore.compress(kv, bins_k=8, bins_v=4)) < len(kvcore.compress(kv, bins_k=64, bins_v=64))
    assert kvcore.compress(kv, bins_k=[16] * NL) == kvcore.compress(kv, bins_k=16)
    with pytest.raises(ValueError, match="level 9: expected 0 .. 3") as e:
        kvcore.compress(kv, 9)
    assert e.value.name == "KVC_ERR_INVALID_ARG"
    with pytest.raises(ValueError, match="bins_k: 2 bin counts for 3 layers") as e:
        kvcore.compress(kv, bins_k=[8, 8])
    assert e.value.name == "KVC_ERR_SHAPE"
    with pytest.raises(ValueError, match="key_scaling: 'rows' is not one of TOKEN"):
        kvcore.compress(kv, key_scaling="rows")
    with pytest.raises(TypeError) as e:
        kvcore.compress(kv.astype(np.int32))
    assert e.value.name == "KVC_ERR_DTYPE"
    with pytest.raises(ValueError, match=r"kv: shape \(3, 3, 300, 32\)") as e:
        kvcore.compress(np.zeros((3, NL, T, 32), np.float16))
    with pytest.raises(TypeError) as e:
        kvcore.compress("not an array")
    assert e.value.name == "KVC_ERR_INVALID_ARG"


def test_compress_bits_target(tmp_path):
    """compress(bits=B), as `kvcore encode --bits B`: the whole container at or under B bits per
    element, bins chosen per layer; same bytes as the CLI's; refused with level or bins."""
    kv = kv_data(seed=2)
    data = kvcore.compress(kv, bits=3.5)
    assert 8 * len(data) / kv.size <= 3.5
    assert 8 * len(kvcore.compress(kv, bits=5.0)) / kv.size > 8 * len(data) / kv.size
    back = kvcore.decompress(data)
    assert back.shape == kv.shape and back.dtype == kv.dtype
    exe = os.environ.get("KVC_CLI")
    if exe and os.access(exe, os.X_OK):
        np.save(tmp_path / "kv.npy", kv)
        subprocess.run([exe, "encode", str(tmp_path / "kv.npy"), "-o", str(tmp_path / "kv.kvc"), "-q",
                        "--bits", "3.5"], check=True)
        assert (tmp_path / "kv.kvc").read_bytes() == data
    for bad in (dict(level=2), dict(bins_k=8), dict(bins_v=8)):
        with pytest.raises(ValueError, match="bits: a size target chooses the bins") as e:
            kvcore.compress(kv, bits=3.5, **bad)
        assert e.value.name == "KVC_ERR_INVALID_ARG"
    with pytest.raises(ValueError) as e:
        kvcore.compress(kv, bits=0.5)
    assert e.value.name == "KVC_ERR_INVALID_ARG"
    with pytest.raises(ValueError) as e:
        kvcore.compress(kv, bits=3.5, key_scaling="channel")
    assert e.value.name == "KVC_ERR_INVALID_ARG"
    with pytest.raises(ValueError, match="bits: str") as e:
        kvcore.compress(kv, bits="3.5")


# ---------------------------------------------------------------- streams, against the CLI
def cli():
    path = os.environ.get("KVC_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("the kvcore CLI is not built (KVC_CLI unset: tests/shell/test_python.sh sets it)")
    return path


@pytest.mark.parametrize("shape", [(2, NL, T, NH, HS), (2, NL, T, NH * HS)])
def test_stream_is_the_clis_stream(tmp_path, shape):
    exe = cli()
    kv = kv_data(shape)
    np.save(tmp_path / "kv.npy", kv)
    subprocess.run([exe, "encode", "--chunk-tokens", "128", "--level", "2", "-o", str(tmp_path / "cli.kvcs"),
                    str(tmp_path / "kv.npy")], check=True, capture_output=True)
    # written piecewise (odd piece sizes), the Python stream is the CLI's, byte for byte
    with kvcore.open(tmp_path / "py.kvcs", "wb", chunk_tokens=128, level=2) as f:
        for a, b in ((0, 7), (7, 200), (200, T)):
            f.write(kv[:, :, a:b])
    assert (tmp_path / "py.kvcs").read_bytes() == (tmp_path / "cli.kvcs").read_bytes()
    # and the CLI decodes it to what Python reads back, chunk by chunk
    subprocess.run([exe, "decode", "-o", str(tmp_path / "back.npy"), str(tmp_path / "py.kvcs")], check=True,
                   capture_output=True)
    back = np.load(tmp_path / "back.npy")
    with kvcore.open(tmp_path / "cli.kvcs") as r:
        chunks = list(r)
    assert [c.shape[2] for c in chunks] == [128, 128, T - 256]
    assert back.shape == kv.shape
    np.testing.assert_array_equal(np.concatenate(chunks, axis=2), back)
    with open(tmp_path / "cli.kvcs", "rb") as fo:  # a file object works as well as a path
        np.testing.assert_array_equal(kvcore.open(fo, "rb").read(), back)


def test_stream_errors(tmp_path):
    kv = kv_data()
    buf = io.BytesIO()
    w = kvcore.open(buf, "wb", chunk_tokens=100)
    w.write(kv)
    with pytest.raises(ValueError, match=r"kv: shape \(2, 3, 10, 2, 8\) F16; this stream's chunks are "
                                         r"\(2, 3, T, 2, 16\) F16"):
        w.write(np.zeros((2, NL, 10, NH, 8), np.float16))
    w.close()
    data = buf.getvalue()
    assert len(list(kvcore.open(io.BytesIO(data)))) == 3
    with pytest.raises(ValueError, match="truncated") as e:
        kvcore.open(io.BytesIO(data[:-5])).read()
    assert e.value.name == "KVC_ERR_CORRUPT"
    with pytest.raises(ValueError, match="bad magic or CRC"):
        kvcore.open(io.BytesIO(b"x" * 60)).read()
    with pytest.raises(ValueError, match="chunk_tokens=0"):
        kvcore.open(io.BytesIO(), "wb", chunk_tokens=0)
    with pytest.raises(FileNotFoundError):
        kvcore.open(tmp_path / "missing.kvcs")


def test_probe_says_what_the_bytes_are():
    kv = kv_data()
    one, rans = kvcore.compress(kv), kvcore.compress(kv, coder="rans")
    d = kvcore.probe(one)
    assert d["kind"] == "one" and d["container_bytes"] == d["needed_bytes"] == len(one)
    assert (d["version_major"], d["version_minor"], d["flags"], d["header_bytes"]) == (1, 0, 0, 48)
    assert d["meta"] and (d["dtype"], d["layout"], d["coder"], d["key_scaling"]) == ("float16", "kv_2ltd", "ac", "token")
    assert (d["planes"], d["num_layers"], d["num_tokens"], d["num_heads"], d["head_size"]) == (2, NL, T, NH, HS)
    assert d["heads_known"] == 1 and d["raw_cdf"] == 0
    info = kvcore.inspect(one)
    assert all(d[k] == info[k] for k in ("window_tokens", "num_windows", "cdf_bins", "version_minor"))
    d = kvcore.probe(rans)
    assert d["coder"] == "rans" and d["version_minor"] == 4 and d["flags"] == 8 | 16 | 32
    assert kvcore.probe(kvcore.compress(kv, key_scaling="channel"))["key_scaling"] == "channel"
    assert kvcore.probe(kvcore.compress(kv_data((NL, T, HS))))["layout"] == "mla"
    assert kvcore.probe(one + rans)["kind"] == "stream" and kvcore.probe(one + rans)["container_bytes"] == len(one)
    part = kvcore.probe(memoryview(one)[:48])
    assert part["kind"] == "part" and part["needed_bytes"] == len(one) and not part["meta"] and part["dtype"] is None
    assert kvcore.probe(one[:_abi.CONTAINER_PROBE_BYTES])["meta"]


def test_probe_errors():
    one = kvcore.compress(kv_data())
    for n in range(48):  # a header cut short, at every length
        with pytest.raises(ValueError, match="shorter than its header") as e:
            kvcore.probe(one[:n])
        assert e.value.name == "KVC_ERR_CORRUPT"
    with pytest.raises(ValueError, match="bad magic") as e:
        kvcore.probe(b"x" * 60)
    assert e.value.name == "KVC_ERR_CORRUPT"
    bad = bytearray(one)
    bad[30] ^= 1
    with pytest.raises(ValueError, match="header checksum") as e:
        kvcore.probe(bad)
    assert e.value.name == "KVC_ERR_CORRUPT"
    bad = bytearray(one)
    bad[8] = 2  # major version 2, checksum resealed
    bad[44:48] = zlib.crc32(bytes(bad[:44])).to_bytes(4, "little")
    with pytest.raises(kvcore.KvcoreError, match="format version 2.0") as e:
        kvcore.probe(bad)
    assert e.value.name == "KVC_ERR_VERSION"
    # the stream reader reads headers through the probe: another version is said as such
    with pytest.raises(kvcore.KvcoreError) as e:
        kvcore.open(io.BytesIO(bytes(bad))).read()
    assert e.value.name == "KVC_ERR_VERSION"


def test_stream_mla():
    kv = kv_data((NL, 150, HS), np.float32)
    buf = io.BytesIO()
    with kvcore.open(buf, "wb", chunk_tokens=64, bins_k=16) as w:
        w.write(kv[:, :100])
        w.write(kv[:, 100:])
        w.close()
        data = buf.getvalue()
    chunks = list(kvcore.open(io.BytesIO(data)))
    assert [c.shape for c in chunks] == [(NL, 64, HS), (NL, 64, HS), (NL, 22, HS)]
    # each container is compress() of its tokens
    assert data.startswith(kvcore.compress(kv[:, :64], bins_k=16))
    np.testing.assert_array_equal(np.concatenate(chunks, axis=1), kvcore.open(io.BytesIO(data)).read())


def test_stream_torch_like(tmp_path):
    torch = needs_torch()
    kv = torch.randn(2, NL, 70, NH, HS).to(torch.bfloat16)
    with kvcore.open(tmp_path / "t.kvcs", "wb", chunk_tokens=32) as f:
        f.write(kv)
    back = kvcore.open(tmp_path / "t.kvcs", like=kv).read()
    assert isinstance(back, torch.Tensor) and back.dtype == torch.bfloat16 and tuple(back.shape) == tuple(kv.shape)


# ---------------------------------------------------------------- exceptions
def test_errors_are_builtin_classes(ctx, tmp_path):
    E = kvcore.KvcoreError
    cases = {"KVC_ERR_SHAPE": ValueError, "KVC_ERR_INVALID_ARG": ValueError, "KVC_ERR_CORRUPT": ValueError,
             "KVC_ERR_OUT_OF_RANGE": ValueError, "KVC_ERR_DTYPE": TypeError, "KVC_ERR_NO_MEMORY": MemoryError,
             "KVC_ERR_LIMIT": MemoryError, "KVC_ERR_IO": OSError, "KVC_ERR_NOT_FOUND": FileNotFoundError,
             "KVC_ERR_EXISTS": FileExistsError, "KVC_ERR_PERMISSION": PermissionError,
             "KVC_ERR_UNSUPPORTED": NotImplementedError, "KVC_ERR_STATE": RuntimeError}
    codes = {v: k for k, v in kvcore._abi.STATUS.items()}
    for name, cls in cases.items():
        e = E(codes[name], "msg")
        assert isinstance(e, E) and isinstance(e, cls) and isinstance(e, RuntimeError)
        assert e.status == codes[name] and e.name == name and str(e) == f"{name}: msg"
    assert E(codes["KVC_ERR_NOT_FOUND"], "x").errno == errno.ENOENT
    assert E(codes["KVC_ERR_IO"], "x").errno == errno.EIO
    assert type(E(codes["KVC_ERR_STATE"], "x")) is E
    # from real calls
    with pytest.raises(FileNotFoundError) as e:
        kvcore.load_kvcache(str(tmp_path / "nope.npy"))
    assert e.value.errno == errno.ENOENT and e.value.name == "KVC_ERR_NOT_FOUND"
    with pytest.raises(ValueError) as e:
        kvcore.decompress(kvcore.compress(kv_data())[:8] + b"\0" * 60)  # the magic, then zeros
    assert e.value.name == "KVC_ERR_CORRUPT"
    with pytest.raises(TypeError) as e:
        ctx.codec_encode(np.zeros((2, 1, 4, 8), np.int32))
    assert e.value.name == "KVC_ERR_DTYPE"
    with pytest.raises(TypeError) as e:  # an object that is not an array: TypeError, status INVALID_ARG
        ctx.memcpy("dst", np.zeros(4, np.uint8))
    assert e.value.name == "KVC_ERR_INVALID_ARG" and "expected an array" in str(e.value)
    with pytest.raises(TypeError):
        kvcore.Direction.coerce(1.5, "direction")
    import pickle
    e2 = pickle.loads(pickle.dumps(E(codes["KVC_ERR_SHAPE"], "s")))
    assert isinstance(e2, ValueError) and e2.status == codes["KVC_ERR_SHAPE"] and e2.message == "s"


# ---------------------------------------------------------------- enums, PageShape, index tables
def test_enums():
    assert repr(kvcore.D2H) == "<Direction.D2H: 1>" and str(kvcore.D2H) == "D2H" and kvcore.D2H == 1
    assert kvcore.Direction("d2h") is kvcore.D2H and kvcore.Direction(0) is kvcore.H2D
    assert kvcore.Format("NL_X_TWO_NB_BS_NH_HS") == 1 and kvcore.Format(17).name == "NL_X_NP_X_NB_BS_ONE_HS"
    assert kvcore.Format.NL_X_TWO_X_NB_BS_HS is kvcore.Format(17)
    for f in kvcore.Format:
        assert kvcore.format_name(f) == f.name or f == 17
    assert kvcore.DType.of(np.float16) is kvcore.DType.F16 and kvcore.DType("bfloat16") is kvcore.DType.BF16
    assert kvcore.DType.F32.itemsize == 4 and str(kvcore.KeyScaling("channel")) == "CHANNEL"
    assert kvcore.NEOX is kvcore.RopeStyle.NEOX
    with pytest.raises(ValueError, match="direction: 'up' is not one of H2D \\(0\\), D2H \\(1\\)"):
        kvcore.Direction.coerce("up", "direction")


def transfer_setup():
    nb, bs = 4, 4
    shape = kvcore.PageShape(nl=2, nb=nb, bs=bs, nh=NH, hs=HS)
    engine = [np.random.default_rng(i).standard_normal((2, nb, bs, NH, HS)).astype(np.float16) for i in range(2)]
    return shape, engine


def test_pageshape_and_transfer_arguments(ctx):
    shape, engine = transfer_setup()
    assert repr(shape) == f"PageShape(nl=2, nb=4, bs=4, nh={NH}, hs={HS}, kv_size=2, element_size=0)"
    sig = inspect.signature(kvcore.PageShape)
    assert {"nl", "nb", "bs", "nh", "hs", "kv_size", "element_size"} <= set(sig.parameters)
    with pytest.raises(TypeError):
        kvcore.PageShape(2, 4)  # keywords only: the fields' order is easy to get wrong
    slots = [3, 0, 7, 12, -1]
    chunk = np.zeros((2, 2, len(slots), NH * HS), np.float16)
    # element_size from the tensors, a list of slots, the direction and format by name
    ctx.transfer_tokens("NL_X_TWO_NB_BS_NH_HS", "D2H", shape, engine, chunk, slots)
    ref = np.zeros_like(chunk)
    ctx.transfer_tokens(kvcore.Format.NL_X_TWO_NB_BS_NH_HS, kvcore.D2H,
                        kvcore.PageShape(nl=2, nb=4, bs=4, nh=NH, hs=HS, element_size=2), engine, ref,
                        np.array(slots, np.int64))
    np.testing.assert_array_equal(chunk, ref)
    assert chunk.any()
    assert shape.element_size == 0  # the caller's shape is not modified
    with pytest.raises(ValueError, match="direction: 'sideways' is not one of"):
        ctx.transfer_tokens(1, "sideways", shape, engine, chunk, slots)
    with pytest.raises(ValueError) as e:
        ctx.transfer_tokens("NO_SUCH_FORMAT", "D2H", shape, engine, chunk, slots)
    assert e.value.name == "KVC_ERR_FORMAT"
    eng = ctx.engine(1, shape, engine)
    assert eng.fmt is kvcore.Format.NL_X_TWO_NB_BS_NH_HS
    assert repr(eng) == (f"<kvcore.Engine NL_X_TWO_NB_BS_NH_HS, 2 tensor(s), PageShape(nl=2, nb=4, bs=4, nh={NH}, "
                         f"hs={HS}, kv_size=2, element_size=2)>")
    assert repr(ctx.alloc_host(64)).startswith("<kvcore.HostBuffer 64 bytes at 0x")
    ctx.transfer_tokens(1, "D2H", shape, eng, chunk, range(5))


# ---------------------------------------------------------------- version, hints, docstrings
def test_version_and_typed_marker():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "VERSION")) as f:
        want = [ln.split("=", 1)[1].strip() for ln in f if ln.startswith("version=")][0]
    assert kvcore.__version__ == want
    assert os.path.isfile(os.path.join(os.path.dirname(kvcore.__file__), "py.typed"))


def public_api():
    for name in kvcore.__all__:
        obj = getattr(kvcore, name)
        yield f"kvcore.{name}", obj
        if inspect.isclass(obj) and obj.__module__.startswith("kvcore"):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    yield f"kvcore.{name}.{attr}", member
    import kvcore.lmcache_ops as lo
    import kvcore.lmcache_extras as le
    for mod in (lo, le):
        for name in dir(mod):
            obj = getattr(mod, name)
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", obj


def test_every_public_name_has_a_docstring():
    missing = [n for n, o in public_api() if not isinstance(o, (str, int)) and not (o.__doc__ or "").strip()]
    assert not missing, f"no docstring: {missing}"


def test_every_public_function_has_type_hints():
    missing = []
    for n, o in public_api():
        f = o.fget if isinstance(o, property) else o
        if inspect.isfunction(f) or (inspect.isclass(f) and "__init__" in vars(f)):
            if n.startswith("kvcore.lmcache_ops."):
                continue  # LMCache's own annotations, some without a return (tests/lmcache/test_surface.py)
            target = f.__init__ if inspect.isclass(f) else f
            if "return" not in typing.get_type_hints(target):
                missing.append(n)
    assert not missing, f"no type hints: {missing}"


# ---------------------------------------------------------------- threads vs import order
def test_thread_count_does_not_depend_on_importing_torch_first():
    needs_torch()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "KVCORE_NUM_THREADS")}
    code = "import kvcore; print(kvcore.Context(backend='cpu').num_threads, kvcore.Context().num_threads)"
    alone = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(4).sum(); " + code], env=env,
                           capture_output=True, text=True, check=True)
    assert alone.stdout.split() == first.stdout.split(), (alone.stdout, first.stdout)
    n = len(os.sched_getaffinity(0))
    assert alone.stdout.split() == [str(n), str(n)]
    # the knobs still rule: KVCORE_NUM_THREADS, then OMP_NUM_THREADS
    for var, val in (("KVCORE_NUM_THREADS", "3"), ("OMP_NUM_THREADS", "3,1")):
        got = subprocess.run([sys.executable, "-c", "import torch; " + code], env=dict(env, **{var: val}),
                             capture_output=True, text=True, check=True)
        assert got.stdout.split() == ["3", "3"], (var, got.stdout, got.stderr)


# ---------------------------------------------------------------- mypy --strict, the example
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_mypy_strict_on_the_package_and_example(tmp_path):
    if subprocess.run([sys.executable, "-c", "import mypy"], capture_output=True).returncode != 0:
        pytest.skip(f"{sys.executable} has no mypy (Debian: apt-get install mypy)")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", "pyproject.toml", "--cache-dir",
                        str(tmp_path / "cache"), "kvcore", os.path.join(ROOT, "examples", "kv_stream.py")],
                       cwd=os.path.join(ROOT, "python"), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_python_example_runs(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "kv_stream.py"), str(tmp_path / "c.kvcs")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "read back 600 tokens" in r.stdout


# ---------------------------------------------------------------- the package's own imports
def test_no_module_of_the_package_imports_itself_back():
    """The modules' imports of one another (at the top or inside a function) form no cycle, so no
    module works only because of the order the others are imported in."""
    import ast
    pkg = os.path.dirname(kvcore.__file__)
    names = {f[:-3] for f in os.listdir(pkg) if f.endswith(".py")}
    graph = {}
    for name in names:
        with open(os.path.join(pkg, name + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module} if node.module else {a.name for a in node.names}
        graph[name] = {d.split(".")[0] for d in deps if d.split(".")[0] in names} - {"__init__"}

    def cycle_from(start, path):
        for d in sorted(graph[path[-1]]):
            if d == start:
                return path + [d]
            if d not in path:
                found = cycle_from(start, path + [d])
                if found:
                    return found
        return None

    cycles = [" -> ".join(c) for c in (cycle_from(n, [n]) for n in sorted(names - {"__init__"})) if c]
    assert not cycles, cycles
