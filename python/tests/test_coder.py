# SPDX-License-Identifier: BSD-3-Clause
"""CacheGen coder through the binding (Context and lmcache_ops) against scalar Python oracles of
the CDF (docs/CACHEGEN.md formula), the 32-bit arithmetic encoder, and the quantiser."""
import numpy as np
import pytest

import kvcore
import kvcore.lmcache_ops as c_ops
from conftest import raises_status

rng = np.random.default_rng(11)


def cdf_oracle(sym, bins):
    L, T, C = sym.shape
    out = np.zeros((L, C, bins + 1), np.uint16)
    for l in range(L):
        for c in range(C):
            counts = np.bincount(sym[l, :, c].astype(np.int64), minlength=bins)
            cum = np.concatenate([[0], np.cumsum(counts)])
            for i in range(bins + 1):
                out[l, c, i] = ((65535 - bins) * int(cum[i]) // T if T else 0) + i
    return out


def encode_oracle(cdf_row, syms):
    """The 32-bit coder of docs/CACHEGEN.md, one stream: bytes."""
    M = 0xFFFFFFFF
    max_sym = len(cdf_row) - 2
    low, high, pending, bits = 0, M, 0, []

    def emit(b):
        nonlocal pending
        bits.append(b)
        bits.extend([1 - b] * pending)
        pending = 0
    for s in syms:
        rng_ = high - low + 1
        c_lo = int(cdf_row[s])
        c_hi = 65536 if s == max_sym else int(cdf_row[s + 1])
        high = (low - 1 + (rng_ * c_hi >> 16)) & M
        low = (low + (rng_ * c_lo >> 16)) & M
        while True:
            if high < 1 << 31:
                emit(0)
            elif low >= 1 << 31:
                emit(1)
            elif low >= 1 << 30 and high < 3 << 30:
                pending += 1
                low = (2 * low) & 0x7FFFFFFF
                high = ((2 * high) & M) | 0x80000001
                continue
            else:
                break
            low = (2 * low) & M
            high = ((2 * high) & M) | 1
    pending += 1
    emit(0 if low < 1 << 30 else 1)
    while len(bits) % 8:
        bits.append(0)
    return bytes(int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8))


def test_cdf_matches_oracle(ctx, xp):
    sym = rng.integers(0, 11, (2, 300, 5), dtype=np.uint8)
    got = ctx.cdf(xp.asarray(sym), 16)
    np.testing.assert_array_equal(got, cdf_oracle(sym, 16))


def test_calculate_cdf_int16_like_lmcache(xp):
    sym = rng.integers(0, 32, (3, 257, 4)).astype(np.int8)
    got = c_ops.calculate_cdf(xp.asarray(sym), 32)
    got = np.asarray(xp.tonumpy(got))
    assert got.dtype == np.int16 and got.shape == (3, 4, 33)
    np.testing.assert_array_equal(got.view(np.uint16), cdf_oracle(sym.view(np.uint8), 32))


def test_cdf_symbol_out_of_range(ctx):
    sym = np.full((1, 4, 2), 9, np.uint8)
    with raises_status("KVC_ERR_OUT_OF_RANGE"):
        ctx.cdf(sym, 8)


def test_encode_bit_exact_and_decode(ctx, xp):
    # the cross-backend fixture: un-normalised CDF 0, 6, ..., 90, symbols cycling 0..14
    L, C, T = 2, 4, 128
    cdf = np.tile(np.arange(0, 96, 6, dtype=np.uint16), (L, C, 1))
    sym = np.zeros((L, T, C), np.uint8)
    sym[...] = (np.arange(T) % 15)[None, :, None]
    streams = xp.asarray(np.zeros((L, C, 256), np.uint8))
    lengths = xp.asarray(np.zeros((L, C), np.int32))
    c_ops.encode_fast_new(xp.asarray(cdf.view(np.int16)), xp.asarray(sym.view(np.int8)), streams, lengths)
    st, ln = xp.tonumpy(streams), xp.tonumpy(lengths)
    want = encode_oracle(cdf[0, 0], sym[0, :, 0])
    assert ln[0, 0] == len(want) and 0 < len(want) <= 256
    assert bytes(st[0, 0, :ln[0, 0]]) == want
    out = xp.asarray(np.zeros((L, T, C), np.uint8))
    c_ops.decode_fast_new(xp.asarray(cdf), streams, lengths, out)
    np.testing.assert_array_equal(xp.tonumpy(out), sym)


def test_encode_no_space(ctx):
    cdf = np.tile(np.arange(0, 96, 6, dtype=np.uint16), (1, 1, 1))
    sym = (np.arange(128) % 15).astype(np.uint8).reshape(1, 128, 1)
    streams, lengths = np.zeros((1, 1, 16), np.uint8), np.zeros((1, 1), np.int32)
    with raises_status("KVC_ERR_NO_SPACE"):
        ctx.encode_streams(cdf, sym, streams, lengths)
    assert lengths[0, 0] == len(encode_oracle(cdf[0, 0], sym[0, :, 0]))  # the full length is reported


def test_decode_prefsum_round_trip(ctx, xp):
    L, T, C, B = 3, 200, 6, 32
    sym = rng.integers(0, B, (L, T, C), dtype=np.uint8)
    cdf = cdf_oracle(sym, B)
    streams, lengths = ctx.encode(cdf, sym)
    packed = np.concatenate([streams[l, c, :lengths[l, c]] for l in range(L) for c in range(C)])
    prefsum = np.cumsum(lengths.reshape(-1)).astype(np.int64).reshape(L, C)
    out = xp.asarray(np.zeros((L, T, C), np.uint8))
    c_ops.decode_fast_prefsum(xp.asarray(cdf.view(np.int16)), xp.asarray(packed), xp.asarray(prefsum), out)
    np.testing.assert_array_equal(xp.tonumpy(out), sym)
    for l in range(L):
        for c in range(C):
            assert bytes(streams[l, c, :lengths[l, c]]) == encode_oracle(cdf[l, c], sym[l, :, c])


def test_decode_corrupt_lengths(ctx):
    cdf = np.tile(np.arange(0, 96, 6, dtype=np.uint16), (1, 1, 1))
    streams, lengths = np.zeros((1, 1, 8), np.uint8), np.array([[9]], np.int32)
    out = np.full((1, 4, 1), 77, np.uint8)
    with raises_status("KVC_ERR_CORRUPT"):
        ctx.decode(cdf, streams, lengths, 4, out=out)
    assert (out == 77).all()


def test_decode_wrong_dtype(ctx):
    cdf = np.zeros((1, 1, 16), np.float32)
    with raises_status("KVC_ERR_DTYPE"):
        ctx.decode(cdf, np.zeros((1, 1, 8), np.uint8), np.zeros((1, 1), np.int32), 4)


def quant_oracle(x, bins):
    L, T, C = x.shape
    x = x.astype(np.float32)
    sym = np.zeros((L, T, C), np.uint8)
    scales = np.zeros((L, T), np.float32)
    for l in range(L):
        M = np.float32(bins[l] // 2 - 1)
        for t in range(T):
            s = np.float32(np.abs(x[l, t]).max())
            scales[l, t] = s
            if s == 0:
                sym[l, t] = M
                continue
            q = M + np.rint(x[l, t] * (M / s)).astype(np.float32)
            sym[l, t] = np.clip(q, 0, 2 * M).astype(np.uint8)
    return sym, scales


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_quantise_dequantise(ctx, dtype):
    L, T, C = 3, 17, 24
    x = (rng.standard_normal((L, T, C)) * 3).astype(dtype)
    x[1, 4] = 0  # an all-zero row: symbols M, dequantised to exactly 0
    bins = np.array([32, 16, 8], np.uint32)
    sym, sc = ctx.quantise(x, bins)
    wsym, wsc = quant_oracle(x, bins)
    np.testing.assert_array_equal(sc, wsc)
    np.testing.assert_array_equal(sym, wsym)
    back = ctx.dequantise(sym, sc, bins, np.empty_like(x))
    M = (bins // 2 - 1).astype(np.float32)[:, None, None]
    want = ((sym.astype(np.float32) - M) * (sc[:, :, None] / M)).astype(dtype)
    np.testing.assert_array_equal(back, want)
    assert not back[1, 4].any()


def test_quantise_bad_bins(ctx):
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.quantise(np.ones((1, 2, 3), np.float32), [3])
    with raises_status("KVC_ERR_SHAPE"):
        ctx.quantise(np.ones((2, 2, 3), np.float32), [32])


def test_default_bins():
    b = kvcore.default_bins(32)
    assert list(b[:10]) == [32] * 10 and list(b[10:32]) == [16] * 22
    assert list(b[32:34]) == [32, 32] and list(b[34:]) == [16] * 30
    assert kvcore.encode_bound(256) >= 512


# ---- interleaved rANS (docs/FORMAT.md "rANS streams"), against a pure-Python oracle of the format

def rans_cum_oracle(counts, total):
    f = [0 if n == 0 else max(1, (n * 4096 + total // 2) // total) for n in counts]
    top = max(range(len(counts)), key=lambda s: (counts[s], -s))  # the first most frequent
    f[top] += 4096 - sum(f)
    return np.concatenate([[0], np.cumsum(f)]).astype(np.uint16)


def rans_encode_oracle(cum_rows, syms):
    """One stream of n <= 32 channels: cum_rows [n, B + 1], syms [T, n] -> bytes. Decode order: the
    groups of 8 channels one after another, in each token by token, channel by channel; channel
    8k + i is coded by state i (min(8, n) states)."""
    T, n = syms.shape
    order = [(t, c) for k in range(0, n, 8) for t in range(T) for c in range(k, min(k + 8, n))]
    x, words = [1 << 16] * min(8, n), []
    for t, c in reversed(order):
        i, s = c % 8, int(syms[t, c])
        lo, f = int(cum_rows[c][s]), int(cum_rows[c][s + 1]) - int(cum_rows[c][s])
        if x[i] >= f << 20:
            words.append(x[i] & 0xFFFF)
            x[i] >>= 16
        x[i] = (x[i] // f) * 4096 + x[i] % f + lo
    return b"".join(v.to_bytes(4, "little") for v in x) + b"".join(w.to_bytes(2, "little") for w in reversed(words))


def test_rans_tables_streams_and_round_trip(ctx, xp):
    L, T, C, B = 2, 150, 45, 24  # two streams a layer: 32 channels (4 groups), 13 (a group and 5)
    sym = np.minimum(rng.geometric(0.3, (L, T, C)) - 1, B - 1).astype(np.uint8)
    cum = ctx.rans_tables(xp.asarray(sym), B)
    for l in range(L):
        for c in range(C):
            np.testing.assert_array_equal(cum[l, c], rans_cum_oracle(np.bincount(sym[l, :, c], minlength=B).tolist(), T))
    data, ends = ctx.rans_encode(cum, sym)
    assert ends.shape == (L, 2) and ends.dtype == np.int64 and ends[-1, -1] == len(data)
    start = 0
    for k, e in enumerate(ends.reshape(-1).tolist()):
        l, q = divmod(k, 2)
        cs = slice(32 * q, min(32 * q + 32, C))
        assert bytes(data[start:e]) == rans_encode_oracle(cum[l, cs], sym[l, :, cs]), f"stream {k}"
        start = e
    out = xp.asarray(np.zeros((L, T, C), np.uint8))
    ctx.rans_decode(cum, xp.asarray(data), ends, T, out=out)
    np.testing.assert_array_equal(xp.tonumpy(out), sym)
    assert kvcore.rans_encode_bound(T) == 32 + 64 * T


def test_rans_bad_input_statuses(ctx):
    L, T, C, B = 1, 40, 8, 8
    sym = (np.arange(L * T * C) % 5).astype(np.uint8).reshape(L, T, C)
    cum = ctx.rans_tables(sym, B)
    bad = sym.copy()
    bad[0, 3, 2] = 6  # in range, never counted: frequency 0
    with raises_status("KVC_ERR_OUT_OF_RANGE") as e:
        ctx.rans_encode(cum, bad)
    assert "frequency 0" in str(e.value)
    bad[0, 3, 2] = 9
    with raises_status("KVC_ERR_OUT_OF_RANGE"):
        ctx.rans_tables(bad, B)
    broken = cum.copy()
    broken[0, 4, B] = 4095
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.rans_encode(broken, sym)
    data, ends = ctx.rans_encode(cum, sym)
    out = np.full((L, T, C), 77, np.uint8)
    with raises_status("KVC_ERR_CORRUPT"):
        ctx.rans_decode(broken, data, ends, T, out=out)
    assert (out == 77).all()
    with raises_status("KVC_ERR_CORRUPT"):
        ctx.rans_decode(cum, data[:-2], ends, T, out=out)  # the end is past the data
    assert (out == 77).all()
    flipped = data.copy()
    flipped[3] ^= 0x80
    with raises_status("KVC_ERR_CORRUPT") as e:
        ctx.rans_decode(cum, flipped, ends, T, out=out)
    assert "rANS stream 0 (layer 0, channels 0-7)" in str(e.value)  # C = 8: one stream of 8 channels
    with raises_status("KVC_ERR_INVALID_ARG"):
        ctx.rans_tables(sym[:, :0], B)  # no tokens: no frequencies
