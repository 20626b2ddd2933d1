/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen codec and .kvc container: round trips on real KV data with the quantiser's error bound,
 * LMCache-compatible streams, byte-exact re-encode, and every corruption rejected with its status. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "common/half.h"
#include "npy_load.h"
#include "ref/cachegen_ref.h"
#include "test_util.h"
#include "container_edit.h"
#include "core/bitio.h"
#include "core/checksum.h"
#include "common/halfs.h"

/* Real K/V of stories260K: [5 layers, 512 tokens, 4 heads, 8] fp16 each, stacked to KV_2LTD. */
static uint16_t *real_kv(size_t *nl, size_t *t, size_t *nh, size_t *hs)
{
    test_npy_t k = test_npy_load(kvc_test_data("kvdata/story_prompt_K.npy"));
    test_npy_t v = test_npy_load(kvc_test_data("kvdata/story_prompt_V.npy"));
    cr_assert_str_eq(k.descr, "<f2");
    *nl = k.shape[0];
    *t = k.shape[1];
    *nh = k.shape[2];
    *hs = k.shape[3];
    uint16_t *kv = malloc(2 * k.count * 2);
    memcpy(kv, k.data, k.count * 2);
    memcpy(kv + k.count, v.data, v.count * 2);
    test_npy_free(&k);
    test_npy_free(&v);
    return kv;
}

static kvc_codec_params_t params_for(kvc_dtype_t dt, size_t nl, size_t t, size_t nh, size_t hs)
{
    kvc_codec_params_t p = { .dtype = dt, .layout = KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = t, .num_heads = nh,
                             .head_size = hs };
    return p;
}

static double elem(const void *base, size_t i, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F32) return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return dt == KVC_DTYPE_F16 ? kvc_f16_to_f32(h) : kvc_bf16_to_f32(h);
}

/* |x - x^| <= scale / (2M) per element (+ output rounding), scale = row max-abs, M = bins/2 - 1. */
static void assert_error_bound(const void *orig, const void *dec, kvc_dtype_t dt, size_t L, size_t T, size_t C,
                               const uint32_t *bins)
{
    const double rel_round = dt == KVC_DTYPE_F32 ? 1e-6 : dt == KVC_DTYPE_F16 ? 1.0 / 1024 : 1.0 / 128;
    for (size_t l = 0; l < L; l++) {
        const double M = bins[l] / 2 - 1;
        for (size_t t = 0; t < T; t++) {
            const size_t row = (l * T + t) * C;
            double scale = 0;
            for (size_t c = 0; c < C; c++) scale = fmax(scale, fabs(elem(orig, row + c, dt)));
            for (size_t c = 0; c < C; c++) {
                const double x = elem(orig, row + c, dt), y = elem(dec, row + c, dt);
                cr_assert_leq(fabs(x - y), scale / (2 * M) * (1 + 1e-5) + fabs(x) * rel_round + 1e-30,
                              "layer %zu token %zu channel %zu: %g decoded as %g (scale %g, M %g)", l, t, c, x, y, scale, M);
            }
        }
    }
}

Test(codec, real_data_round_trip_within_bound)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_context_t *ctx = kvc_test_cpu_context();
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
    cr_assert_eq(info.num_layers, nl);
    cr_assert_eq(info.num_tokens, t);
    cr_assert_eq(info.container_bytes, len);
    cr_assert_eq(info.original_bytes, 2 * nl * t * nh * hs * 2);
    cr_assert_lt(len, info.original_bytes / 3, "real data should compress > 3x vs fp16 (got %zu of %zu)", len,
                 info.original_bytes);
    /* The compact CDF must beat LMCache's int16 table by a wide margin. */
    const size_t lmcache_cdf = 2 * nl * nh * hs * (info.cdf_bins + 1) * 2;
    cr_assert_lt(info.cdf_bytes * 2, lmcache_cdf, "coded CDF %zu bytes vs LMCache's %zu", info.cdf_bytes, lmcache_cdf);
    cr_assert_lt(len, info.lmcache_bytes);

    uint16_t *dec = malloc(info.original_bytes);
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_OK, "%s", kvc_last_error());
    uint32_t bins[10];
    kvc_cg_default_bins(nl, bins);
    assert_error_bound(kv, dec, KVC_DTYPE_F16, 2 * nl, t, nh * hs, bins);

    /* Per-layer statistics: coded size within 2 % of the symbols' entropy (+ flush bits). */
    kvc_codec_layer_stats_t ls[10];
    cr_assert_eq(kvc_codec_layer_stats(buf, len, ls, 10), KVC_OK);
    for (int l = 0; l < 10; l++) {
        cr_assert_gt(ls[l].entropy_bits, 1.0);
        cr_assert_geq(ls[l].bits_per_symbol, ls[l].entropy_bits * 0.999);
        cr_assert_lt(ls[l].bits_per_symbol, ls[l].entropy_bits * 1.02, "layer %d: %f bits vs entropy %f", l,
                     ls[l].bits_per_symbol, ls[l].entropy_bits);
    }
    cr_assert_eq(kvc_codec_layer_stats(buf, len, ls, 9), KVC_ERR_NO_SPACE);
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes - 1, NULL), KVC_ERR_NO_SPACE);

    /* Re-encoding the decoded chunk reproduces the container byte for byte. */
    uint8_t *buf2;
    size_t len2;
    cr_assert_eq(kvc_codec_encode(ctx, &p, dec, &buf2, &len2), KVC_OK);
    cr_assert_eq(len2, len);
    cr_assert(memcmp(buf, buf2, len) == 0, "re-encode of the decoded chunk differs");
    kvc_codec_free(buf2);
    /* Encoding is deterministic. */
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf2, &len2), KVC_OK);
    cr_assert(len2 == len && memcmp(buf, buf2, len) == 0);
    kvc_codec_free(buf2);
    free(dec);
    kvc_codec_free(buf);
    free(kv);
    kvc_context_destroy(ctx);
}

/* The STREAMS section is LMCache's packed bytestream: each window equals kvc_cg_encode with the
 * CDF that kvc_cg_cdf computes over the whole chunk's symbols (LMCache's calculate_cdf). */
Test(codec, streams_are_lmcache_streams)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_context_t *ctx = kvc_test_cpu_context();
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK);
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);

    const size_t L = 2 * nl, C = nh * hs, B = info.cdf_bins;
    uint32_t bins[10];
    kvc_cg_default_bins(nl, bins);
    uint8_t *sym = malloc(L * t * C);
    float *scales = malloc(L * t * sizeof(float));
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F16, .values = kv, .symbols = sym, .scales = scales, .bins = bins, .layers = L,
                           .tokens = t, .channels = C };
    cr_assert_eq(kvc_quantise(ctx, &q), KVC_OK);
    uint16_t *cdf = malloc(L * C * (B + 1) * 2);
    kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = L, .tokens = t, .channels = C, .num_bins = (unsigned)B };
    cr_assert_eq(kvc_cg_cdf(ctx, &ca), KVC_OK);

    /* Window 0 (tokens 0..255) coded on its own, LMCache-style. */
    const size_t W = info.window_tokens, cap = kvc_cg_encode_bound(W);
    uint8_t *win = malloc(L * W * C), *streams = malloc(L * C * cap);
    int32_t *lens = malloc(L * C * sizeof(int32_t));
    for (size_t l = 0; l < L; l++) memcpy(win + l * W * C, sym + l * t * C, W * C);
    kvc_cg_encode_params_t e = { .cdf = cdf, .symbols = win, .streams = streams, .lengths = lens, .layers = L, .tokens = W,
                            .channels = C, .capacity = cap, .num_bins = (unsigned)B };
    cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_OK);
    size_t total = 0;
    for (size_t s = 0; s < L * C; s++) total += (size_t)lens[s];
    uint8_t *packed = malloc(total);
    size_t off = 0;
    for (size_t s = 0; s < L * C; s++) {
        memcpy(packed + off, streams + s * cap, (size_t)lens[s]);
        off += (size_t)lens[s];
    }
    /* The STREAMS section is the last one: its payload ends the file. */
    const uint8_t *streams_section = buf + len - info.streams_bytes;
    cr_assert(memcmp(streams_section, packed, total) == 0, "window 0 is not LMCache's packed bytestream");
    free(packed);
    free(win);
    free(streams);
    free(lens);
    free(cdf);
    free(sym);
    free(scales);
    kvc_codec_free(buf);
    free(kv);
    kvc_context_destroy(ctx);
}

static void synth(void *buf, kvc_dtype_t dt, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        const float x = (float)((rand() % 20001) - 10000) / 1000.0f * (i % 7 == 0 ? 8.0f : 1.0f);
        if (dt == KVC_DTYPE_F32) ((float *)buf)[i] = x;
        else if (dt == KVC_DTYPE_F16) ((uint16_t *)buf)[i] = kvc_f32_to_f16(x);
        else ((uint16_t *)buf)[i] = kvc_f32_to_bf16(x);
    }
}

Test(codec, every_dtype_layout_and_window)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    for (int di = 0; di < 3; di++) {
        for (int mla = 0; mla < 2; mla++) {
            const size_t nl = 3, t = 300, nh = mla ? 1 : 2, hs = mla ? 40 : 12, planes = mla ? 1 : 2;
            const size_t n = planes * nl * t * nh * hs, es = kvc_dtype_size(dts[di]);
            void *kv = malloc(n * es), *dec = malloc(n * es);
            synth(kv, dts[di], n, 7u + (unsigned)di);
            const uint32_t bins[6] = { 32, 16, 8, 64, 4, 16 };
            kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW, .dtype = dts[di],
                                     .layout = mla ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD, .num_layers = nl, .num_tokens = t,
                                     .num_heads = nh, .head_size = hs, .bins = bins, .window_tokens = 64 };
            uint8_t *buf;
            size_t len;
            cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
            kvc_codec_info_t info;
            cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, n * es, &info), KVC_OK, "%s", kvc_last_error());
            cr_assert_eq(info.num_windows, 5u);
            cr_assert_eq(info.cdf_bins, mla ? 32u : 64u); /* max of the bins in use */
            cr_assert_eq(info.planes, planes);
            assert_error_bound(kv, dec, dts[di], planes * nl, t, nh * hs, bins);
            kvc_tensor_t tt;
            cr_assert_eq(kvc_codec_decode_alloc(ctx, buf, len, &tt), KVC_OK);
            cr_assert_eq(tt.ndim, mla ? 3 : 4);
            cr_assert_eq(tt.nbytes, n * es);
            cr_assert(memcmp(tt.data, dec, n * es) == 0);
            kvc_tensor_free(&tt);
            kvc_codec_free(buf);
            free(kv);
            free(dec);
        }
    }
    kvc_context_destroy(ctx);
}

typedef struct {
    size_t calls, last, total;
} decode_progress_t;
static void on_decode_progress(void *user, size_t done, size_t total)
{
    decode_progress_t *d = user;
    cr_assert_gt(done, d->last, "progress goes forward");
    cr_assert(d->total == 0 || total == d->total, "one total");
    d->last = done;
    d->total = total;
    d->calls++;
}

/* kvc_codec_decode_ex: the progress callback is called once per coded window and once when the
 * values are restored, in order, and the output is kvc_codec_decode's; no params is decode; a
 * field_mask bit without a field is refused before anything is written. */
Test(codec, decode_ex_reports_progress_per_window)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const size_t nl = 2, t = 300, nh = 2, hs = 8, n = 2 * nl * t * nh * hs;
    uint16_t *kv = malloc(n * 2), *a = malloc(n * 2), *b = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 11u);
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = nl, .num_tokens = t, .num_heads = nh, .head_size = hs, .window_tokens = 64 };
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, a, n * 2, NULL), KVC_OK);
    decode_progress_t d = { 0 };
    const kvc_codec_decode_params_t dp = { KVC_CODEC_DECODE_PARAM_PROGRESS, on_decode_progress, &d };
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2, &dp, &info), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(info.num_windows, 5u);
    cr_assert_eq(d.calls, 6, "5 windows and the restore: %zu calls", d.calls);
    cr_assert_eq(d.last, 6);
    cr_assert_eq(d.total, 6);
    cr_assert(memcmp(a, b, n * 2) == 0);
    memset(b, 0, n * 2);
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2, NULL, NULL), KVC_OK);
    cr_assert(memcmp(a, b, n * 2) == 0);
    const kvc_codec_decode_params_t unset = { KVC_CODEC_DECODE_PARAM_PROGRESS, NULL, NULL };
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2, &unset, NULL), KVC_OK);
    memset(b, 0x5a, n * 2);
    d = (decode_progress_t){ 0 };
    const kvc_codec_decode_params_t bad = { KVC_CODEC_DECODE_PARAM_PROGRESS | (1u << 7), on_decode_progress, &d };
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2, &bad, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "field_mask"), "%s", kvc_last_error());
    cr_assert_eq(d.calls, 0);
    for (size_t i = 0; i < n; i++) cr_assert_eq(b[i], 0x5a5a, "nothing written on a refused call");
    cr_assert_eq(kvc_codec_decode_ex(NULL, buf, len, b, n * 2, &dp, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2 - 1, &dp, NULL), KVC_ERR_NO_SPACE);
    kvc_codec_free(buf);
    /* The rANS coder too (it decodes its 4 full windows in one call, then the short one): a call a
     * window and one for the restore, as for ac (before, rANS containers reported only the restore). */
    p.field_mask |= KVC_CODEC_PARAM_CODER;
    p.coder = KVC_CODER_RANS;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
    d = (decode_progress_t){ 0 };
    cr_assert_eq(kvc_codec_decode_ex(ctx, buf, len, b, n * 2, &dp, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(d.calls, 6, "rANS: 5 windows and the restore: %zu calls", d.calls);
    cr_assert_eq(d.last, 6);
    cr_assert(memcmp(a, b, n * 2) == 0, "rANS decodes to ac's values");
    kvc_codec_free(buf);
    free(kv);
    free(a);
    free(b);
    kvc_context_destroy(ctx);
}

Test(codec, all_zero_and_nan_rows_have_defined_results)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const size_t nl = 1, t = 4, c = 8, n = 2 * nl * t * c;
    float kv[64] = { 0 }, dec[64];
    for (size_t i = 8; i < 16; i++) kv[i] = (float)i - 11.5f; /* token 1 of K: finite values */
    kv[17] = NAN;                                             /* token 2 of K: one NaN, rest 0 */
    kvc_codec_params_t p = params_for(KVC_DTYPE_F32, nl, t, 1, c);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, sizeof(dec), NULL), KVC_OK);
    for (size_t i = 0; i < n; i++) {
        cr_assert(!isnan(dec[i]), "element %zu decoded as NaN", i);
        if (i < 8 || (i >= 16 && i < 24) || i >= 32) cr_assert_eq(dec[i], 0.0f, "element %zu: %g", i, (double)dec[i]);
    }
    kvc_codec_free(buf);
    kvc_context_destroy(ctx);
}

Test(codec, bad_parameters)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    uint16_t kv[64] = { 0 };
    uint8_t *buf = (uint8_t *)0x1;
    size_t len = 7;
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 1, 4, 2, 4);
    cr_assert_eq(kvc_codec_encode(NULL, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_encode(ctx, NULL, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_encode(ctx, &p, NULL, &buf, &len), KVC_ERR_INVALID_ARG);
    p.dtype = KVC_DTYPE_I32;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_DTYPE);
    p = params_for(KVC_DTYPE_F16, 1, 0, 2, 4);
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p = params_for(KVC_DTYPE_F16, 1, 4, 2, 4);
    p.layout = KVC_CODEC_MLA;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_SHAPE);
    p.layout = (kvc_codec_layout_t)7;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p = params_for(KVC_DTYPE_F16, 1, 4, 2, 4);
    const uint32_t odd[2] = { 31, 16 }, small[2] = { 2, 16 }, big[2] = { 66, 16 };
    p.field_mask = KVC_CODEC_PARAM_BINS;
    p.bins = odd;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p.bins = small;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p.bins = big;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p.bins = NULL;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p = params_for(KVC_DTYPE_F16, 1, 4, 2, 4);
    p.field_mask = KVC_CODEC_PARAM_WINDOW;
    p.window_tokens = 0;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    p = params_for(KVC_DTYPE_F16, 1, 4, 2, 4);
    p.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
    p.key_scaling = (kvc_codec_scaling_t)2;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_ERR_INVALID_ARG);
    cr_assert_eq(buf, (uint8_t *)0x1, "out must be untouched on failure");
    cr_assert_eq(len, 7u);
    kvc_context_destroy(ctx);
}

/* ---- corruption ---- */

static uint8_t *small_container(kvc_context_t *ctx, size_t *len)
{
    uint16_t kv[2 * 2 * 40 * 6];
    synth(kv, KVC_DTYPE_F16, sizeof(kv) / 2, 3);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 2, 40, 2, 3);
    p.field_mask = KVC_CODEC_PARAM_WINDOW;
    p.window_tokens = 16;
    uint8_t *buf;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, len), KVC_OK);
    return buf;
}

static kvc_status_t try_decode(kvc_context_t *ctx, const uint8_t *buf, size_t len)
{
    static uint16_t out[2 * 2 * 40 * 6];
    return kvc_codec_decode(ctx, buf, len, out, sizeof(out), NULL);
}

Test(codec, corrupted_bytes_are_detected)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    uint8_t *good = small_container(ctx, &len), *bad = malloc(len);
    cr_assert_eq(try_decode(ctx, good, len), KVC_OK);
    /* Flip one bit in every byte in turn: the checksums catch each one. */
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, good, len);
        bad[i] ^= 0x10;
        const kvc_status_t st = try_decode(ctx, bad, len);
        cr_assert(st == KVC_ERR_CORRUPT || (i >= 8 && i < 10 && st == KVC_ERR_VERSION), "byte %zu flipped: %s", i,
                  kvc_status_name(st));
    }
    free(bad);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

Test(codec, truncation_and_padding)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len);
    sections(good, off);
    for (size_t n = 0; n < len; n++) cr_assert_eq(try_decode(ctx, good, n), KVC_ERR_CORRUPT, "truncated to %zu", n);
    uint8_t *padded = malloc(len + 1);
    memcpy(padded, good, len);
    padded[len] = 0;
    cr_assert_eq(try_decode(ctx, padded, len + 1), KVC_ERR_CORRUPT);
    free(padded);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

Test(codec, magic_and_version)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    uint8_t *buf = small_container(ctx, &len);
    buf[8] = 2; /* major version 2 */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_VERSION);
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_VERSION);
    buf[8] = 1;
    buf[10] = 7; /* a newer minor version of the same major is readable */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_OK);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
    cr_assert_eq(info.version_minor, 7u);
    buf[1] = 'X';
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    kvc_codec_free(buf);
    kvc_context_destroy(ctx);
}

/* ---- kvc_container_probe: the one reader of the header outside the full parse ---- */

/* A small container of another kind: coder, key scaling, head split, layout. */
static uint8_t *kind_container(kvc_context_t *ctx, kvc_codec_coder_t coder, int channel_keys, int heads_unknown, int mla,
                               size_t *len)
{
    uint16_t kv[2 * 2 * 40 * 6];
    synth(kv, KVC_DTYPE_F16, sizeof(kv) / 2, 5);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 2, 40, heads_unknown ? 1 : 2, heads_unknown ? 6 : 3);
    p.field_mask = KVC_CODEC_PARAM_WINDOW | KVC_CODEC_PARAM_CODER;
    p.window_tokens = 16;
    p.coder = coder;
    if (channel_keys) {
        p.field_mask |= KVC_CODEC_PARAM_KEY_SCALING;
        p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    }
    if (heads_unknown) p.field_mask |= KVC_CODEC_PARAM_HEADS_UNKNOWN;
    if (mla) {
        p.layout = KVC_CODEC_MLA;
        p.num_heads = 1;
        p.head_size = 6;
    }
    uint8_t *buf;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, len), KVC_OK, "%s", kvc_last_error());
    return buf;
}

/* The probe says what inspect says of the header and META. */
static void assert_probe_matches_inspect(const uint8_t *buf, size_t len, const char *what)
{
    kvc_container_info_t pi;
    kvc_codec_info_t ci;
    cr_assert_eq(kvc_container_probe(buf, len, &pi), KVC_OK, "%s: %s", what, kvc_last_error());
    cr_assert_eq(kvc_codec_inspect(buf, len, &ci), KVC_OK, "%s", what);
    cr_assert_eq(pi.kind, KVC_CONTAINER_ONE, "%s", what);
    cr_assert_eq(pi.version_major, ci.version_major, "%s", what);
    cr_assert_eq(pi.version_minor, ci.version_minor, "%s", what);
    cr_assert_eq(pi.header_bytes, (size_t)KVC_CONTAINER_HEADER_BYTES, "%s", what);
    cr_assert_eq(pi.container_bytes, (uint64_t)len, "%s", what);
    cr_assert_eq(pi.needed_bytes, (uint64_t)len, "%s", what);
    cr_assert_eq(pi.coder, ci.coder, "%s", what);
    cr_assert_eq(pi.raw_cdf, ci.raw_cdf, "%s", what);
    cr_assert_eq(pi.heads_known, ci.heads_known, "%s", what);
    cr_assert_eq(pi.key_scaling, ci.key_scaling, "%s", what);
    cr_assert_eq(pi.meta, 1, "%s", what);
    cr_assert_eq(pi.dtype, ci.dtype, "%s", what);
    cr_assert_eq(pi.layout, ci.layout, "%s", what);
    cr_assert_eq(pi.planes, ci.planes, "%s", what);
    cr_assert_eq(pi.num_layers, ci.num_layers, "%s", what);
    cr_assert_eq(pi.num_tokens, ci.num_tokens, "%s", what);
    cr_assert_eq(pi.num_heads, ci.num_heads, "%s", what);
    cr_assert_eq(pi.head_size, ci.head_size, "%s", what);
    cr_assert_eq(pi.window_tokens, ci.window_tokens, "%s", what);
    cr_assert_eq(pi.num_windows, ci.num_windows, "%s", what);
    cr_assert_eq(pi.cdf_bins, ci.cdf_bins, "%s", what);
    cr_assert_eq(pi.flags, rd32(buf + 12), "%s", what);
}

Test(codec, probe_says_each_kind)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    uint8_t *buf = small_container(ctx, &len);
    assert_probe_matches_inspect(buf, len, "ac");
    kvc_container_info_t pi;
    cr_assert_eq(kvc_container_probe(buf, len, &pi), KVC_OK);
    cr_assert_eq(pi.version_minor, 0u);
    cr_assert_eq(pi.flags, 0u);
    cr_assert_eq(pi.coder, KVC_CODER_AC);
    cr_assert_eq(pi.num_tokens, 40u);
    struct { kvc_codec_coder_t coder; int channel, unknown, mla; uint32_t flags; const char *what; } kinds[] = {
        { KVC_CODER_RANS, 0, 0, 0, 8u | 16u | 32u, "rans" },
        { KVC_CODER_AC, 1, 0, 0, 4u, "per-channel keys" },
        { KVC_CODER_AC, 0, 1, 0, 2u, "head split unknown" },
        { KVC_CODER_AC, 0, 0, 1, 0u, "MLA" },
    };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        size_t n;
        uint8_t *b = kind_container(ctx, kinds[k].coder, kinds[k].channel, kinds[k].unknown, kinds[k].mla, &n);
        assert_probe_matches_inspect(b, n, kinds[k].what);
        cr_assert_eq(kvc_container_probe(b, n, &pi), KVC_OK);
        cr_assert_eq(pi.flags, kinds[k].flags, "%s", kinds[k].what);
        kvc_codec_free(b);
    }
    /* A stream: two containers back to back; the probe describes the first. */
    uint8_t *two = malloc(2 * len);
    memcpy(two, buf, len);
    memcpy(two + len, buf, len);
    cr_assert_eq(kvc_container_probe(two, 2 * len, &pi), KVC_OK);
    cr_assert_eq(pi.kind, KVC_CONTAINER_STREAM);
    cr_assert_eq(pi.container_bytes, (uint64_t)len);
    cr_assert_eq(pi.meta, 1);
    /* Part of one: the header alone, the header and a cut META, the header and META. */
    const size_t meta_end = 48 + 16 + rd32(buf + 48 + 8);
    for (size_t n = KVC_CONTAINER_HEADER_BYTES; n < len; n++) {
        cr_assert_eq(kvc_container_probe(buf, n, &pi), KVC_OK, "%zu bytes: %s", n, kvc_last_error());
        cr_assert_eq(pi.kind, KVC_CONTAINER_PART, "%zu bytes", n);
        cr_assert_eq(pi.container_bytes, (uint64_t)len, "%zu bytes", n);
        cr_assert_eq(pi.needed_bytes, (uint64_t)len, "%zu bytes", n);
        cr_assert_eq(pi.meta, n >= meta_end, "%zu bytes", n);
    }
    free(two);
    kvc_codec_free(buf);
    kvc_context_destroy(ctx);
}

/* The probe reads no more than KVC_CONTAINER_PROBE_BYTES: that prefix of a large container, in a
 * buffer of exactly that size (a read past it is a sanitizer's error), has the whole META. */
Test(codec, probe_reads_at_most_probe_bytes)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t nl, t, nh, hs, len;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    uint8_t *buf;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK);
    cr_assert_gt(len, (size_t)KVC_CONTAINER_PROBE_BYTES);
    uint8_t *head = malloc(KVC_CONTAINER_PROBE_BYTES);
    memcpy(head, buf, KVC_CONTAINER_PROBE_BYTES);
    kvc_container_info_t pi;
    cr_assert_eq(kvc_container_probe(head, KVC_CONTAINER_PROBE_BYTES, &pi), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(pi.kind, KVC_CONTAINER_PART);
    cr_assert_eq(pi.container_bytes, (uint64_t)len);
    cr_assert_eq(pi.meta, 1);
    cr_assert_eq(pi.num_tokens, t);
    cr_assert_eq(pi.num_layers, nl);
    free(head);
    kvc_codec_free(buf);
    free(kv);
    kvc_context_destroy(ctx);
}

/* A copy of good with header bytes [at, at + n) set to v, its header checksum resealed. */
static uint8_t *header_edit(const uint8_t *good, size_t len, size_t at, const void *v, size_t n)
{
    uint8_t *b = malloc(len);
    memcpy(b, good, len);
    memcpy(b + at, v, n);
    wr32(b + 44, (uint32_t)crc32(0, b, 44));
    return b;
}

/* Each error with its exact status, the kind and the sizes the probe could still say, and the
 * same status from inspect for the whole container. */
static void assert_probe_error(const uint8_t *b, size_t len, kvc_status_t want, kvc_container_kind_t kind, const char *what)
{
    kvc_container_info_t pi;
    cr_assert_eq(kvc_container_probe(b, len, &pi), want, "%s: %s", what, kvc_last_error());
    cr_assert_eq(pi.kind, kind, "%s", what);
    cr_assert_eq(pi.meta, 0, "%s", what);
    kvc_codec_info_t ci;
    cr_assert_eq(kvc_codec_inspect(b, len, &ci), want, "%s: inspect", what);
}

Test(codec, probe_errors_have_exact_statuses)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    uint8_t *good = small_container(ctx, &len);
    kvc_container_info_t pi;
    cr_assert_eq(kvc_container_probe(good, len, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_container_probe(NULL, 1, &pi), KVC_ERR_INVALID_ARG);
    /* A header cut short, at every length: the magic's bytes as far as they go, then the rest. */
    for (size_t n = 0; n < KVC_CONTAINER_HEADER_BYTES; n++) {
        cr_assert_eq(kvc_container_probe(n ? good : NULL, n, &pi), KVC_ERR_CORRUPT, "%zu bytes", n);
        cr_assert_eq(pi.kind, n < 8 ? KVC_CONTAINER_NONE : KVC_CONTAINER_INVALID, "%zu bytes", n);
        cr_assert_eq(pi.needed_bytes, (uint64_t)KVC_CONTAINER_HEADER_BYTES, "%zu bytes", n);
        cr_assert_eq(pi.container_bytes, 0u, "%zu bytes", n);
    }
    /* Another magic, any of its bytes, also in fewer bytes than the header */
    for (size_t i = 0; i < 8; i++) {
        uint8_t *b = malloc(len);
        memcpy(b, good, len);
        b[i] ^= 0x20;
        assert_probe_error(b, len, KVC_ERR_CORRUPT, KVC_CONTAINER_NONE, "magic");
        cr_assert_eq(kvc_container_probe(b, i + 1, &pi), KVC_ERR_CORRUPT);
        cr_assert_eq(pi.kind, KVC_CONTAINER_NONE);
        cr_assert_eq(pi.needed_bytes, 0u);
        free(b);
    }
    /* The header's checksum, and a field changed without it */
    for (size_t i = 8; i < 48; i++) {
        uint8_t *b = malloc(len);
        memcpy(b, good, len);
        b[i] ^= 0x01;
        assert_probe_error(b, len, KVC_ERR_CORRUPT, KVC_CONTAINER_INVALID, "header checksum");
        free(b);
    }
    /* Each field, checksum resealed */
    const uint8_t two[2] = { 2, 0 }, seven[2] = { 7, 0 }, four[2] = { 4, 0 }, one = 1;
    const uint8_t flag40[4] = { 0x40, 0, 0, 0 }, index_only[4] = { 32, 0, 0, 0 }, hdr49[4] = { 49, 0, 0, 0 },
                  sec4[4] = { 4, 0, 0, 0 }, small[8] = { 100 };
    struct { size_t at; const void *v; size_t n; kvc_status_t st; const char *what; } edits[] = {
        { 8, two, 2, KVC_ERR_VERSION, "major version 2" },
        { 12, flag40, 4, KVC_ERR_CORRUPT, "an unknown flag at format 1.0" },
        { 12, index_only, 4, KVC_ERR_CORRUPT, "a format 1.4 flag at format 1.0" },
        { 16, hdr49, 4, KVC_ERR_CORRUPT, "header size 49" },
        { 20, sec4, 4, KVC_ERR_CORRUPT, "4 sections" },
        { 24, small, 8, KVC_ERR_CORRUPT, "a total of 100 bytes" },
    };
    for (size_t k = 0; k < sizeof(edits) / sizeof(edits[0]); k++) {
        uint8_t *b = header_edit(good, len, edits[k].at, edits[k].v, edits[k].n);
        assert_probe_error(b, len, edits[k].st, KVC_CONTAINER_INVALID, edits[k].what);
        free(b);
    }
    for (size_t i = 32; i < 44; i++) {
        uint8_t *b = header_edit(good, len, i, &one, 1);
        assert_probe_error(b, len, KVC_ERR_CORRUPT, KVC_CONTAINER_INVALID, "a reserved byte");
        free(b);
    }
    /* The version is said with KVC_ERR_VERSION; a newer minor is read, and its unknown flags are
     * KVC_ERR_VERSION; a minor too old for the flags stays corrupt */
    uint8_t *b = header_edit(good, len, 8, two, 2);
    cr_assert_eq(kvc_container_probe(b, len, &pi), KVC_ERR_VERSION);
    cr_assert_eq(pi.version_major, 2u);
    cr_assert_eq(pi.container_bytes, (uint64_t)len); /* the checksum passed: the header's size stands */
    b[44] ^= 1;
    cr_assert_eq(kvc_container_probe(b, len, &pi), KVC_ERR_CORRUPT);
    cr_assert_eq(pi.version_major, 0u); /* nothing from a header that fails its checksum */
    cr_assert_eq(pi.container_bytes, 0u);
    free(b);
    b = header_edit(good, len, 10, seven, 2);
    cr_assert_eq(kvc_container_probe(b, len, &pi), KVC_OK);
    cr_assert_eq(pi.version_minor, 7u);
    memcpy(b + 12, flag40, 4);
    wr32(b + 44, (uint32_t)crc32(0, b, 44));
    assert_probe_error(b, len, KVC_ERR_VERSION, KVC_CONTAINER_INVALID, "an unknown flag at format 1.7");
    free(b);
    b = header_edit(good, len, 10, four, 2);
    memcpy(b + 12, index_only, 4);
    wr32(b + 44, (uint32_t)crc32(0, b, 44));
    assert_probe_error(b, len, KVC_ERR_CORRUPT, KVC_CONTAINER_INVALID, "the CDF index without rANS");
    free(b);
    /* A damaged META: the header's facts stand, the status is the parse's */
    b = malloc(len);
    memcpy(b, good, len);
    b[48 + 16] ^= 0x01;
    assert_probe_error(b, len, KVC_ERR_CORRUPT, KVC_CONTAINER_ONE, "META checksum");
    cr_assert_eq(kvc_container_probe(b, len, &pi), KVC_ERR_CORRUPT);
    cr_assert_eq(pi.container_bytes, (uint64_t)len);
    b[48 + 16] ^= 0x01;
    wr32(b + 48, 2); /* SCALES where META belongs: damage, even in bytes cut before META ends */
    cr_assert_eq(kvc_container_probe(b, 48 + 16 + 1, &pi), KVC_ERR_CORRUPT);
    cr_assert_eq(pi.kind, KVC_CONTAINER_PART);
    free(b);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* Every META field set to an inconsistent value, with valid checksums: field validation rejects it. */
Test(codec, every_meta_field_validated)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len), *bad = malloc(len);
    sections(good, off);
    const size_t m = off[0] + 16;
    struct {
        size_t at;
        int width;
        uint32_t value;
    } edits[] = {
        { 0, 1, 0 }, { 0, 1, 9 },             /* dtype */
        { 1, 1, 1 }, { 1, 1, 5 },             /* layout */
        { 2, 1, 1 }, { 2, 1, 3 },             /* planes */
        { 3, 1, 1 }, { 3, 1, 65 }, { 3, 1, 8 }, /* CDF width (8 < bins of layer 0) */
        { 4, 4, 0 }, { 4, 4, 3 }, { 4, 4, 5000 }, /* layers */
        { 8, 4, 0 }, { 8, 4, 41 }, { 8, 4, 39 }, /* tokens */
        { 12, 4, 0 }, { 12, 4, 3 },           /* heads */
        { 16, 4, 0 }, { 16, 4, 4 },           /* head size */
        { 20, 4, 0 }, { 20, 4, 13 },          /* window (4 windows, not 3) */
        { 24, 4, 2 }, { 24, 4, 4 },           /* window count */
        { 32, 1, 2 }, { 32, 1, 200 },         /* bins of (K, layer 0) */
    };
    for (size_t e = 0; e < sizeof(edits) / sizeof(edits[0]); e++) {
        memcpy(bad, good, len);
        if (edits[e].width == 1) bad[m + edits[e].at] = (uint8_t)edits[e].value;
        else wr32(bad + m + edits[e].at, edits[e].value);
        reseal(bad, off[0]);
        cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT, "META+%zu = %u accepted", edits[e].at, edits[e].value);
    }
    /* Section type out of order, and a section size running past the end (resealed header). */
    memcpy(bad, good, len);
    wr32(bad + off[2], 4);
    cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT);
    memcpy(bad, good, len);
    wr32(bad + off[4] + 8, (uint32_t)len);
    cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT);
    /* A stream length moved from one stream to its neighbour (same total): still a valid container
     * structurally, decodes to garbage but in bounds; a length made larger breaks the sum. */
    memcpy(bad, good, len);
    bad[off[3] + 16] = (uint8_t)(bad[off[3] + 16] + 1);
    reseal(bad, off[3]);
    cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT);
    /* Unknown flag bits. */
    memcpy(bad, good, len);
    bad[12] |= 0x80;
    reseal(bad, off[0]);
    cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT);
    free(bad);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* The container with its LENGTHS payload replaced, so a re-encoded varint reaches the parser. */
static uint8_t *with_lengths(const uint8_t *good, size_t len, const uint8_t *lengths, size_t n, size_t *out_len)
{
    return with_section(good, len, 3, lengths, n, out_len);
}

static void expect_lengths(kvc_context_t *ctx, const uint8_t *good, size_t len, const uint8_t *lengths, size_t n,
                           kvc_status_t want, const char *what)
{
    size_t blen;
    uint8_t *b = with_lengths(good, len, lengths, n, &blen);
    kvc_codec_info_t info;
    cr_assert_eq(try_decode(ctx, b, blen), want, "%s: decode gave %s", what, kvc_status_name(try_decode(ctx, b, blen)));
    cr_assert_eq(kvc_codec_inspect(b, blen, &info), want, "%s: inspect", what);
    free(b);
}

/* Each LENGTHS varint must fit 32 bits and be in its shortest form: a length written as L + 2^32
 * must not wrap back to L, and 0x88 0x00 is not another spelling of 8. */
Test(codec, lengths_varints_fit_32_bits_and_are_minimal)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len);
    sections(good, off);
    const size_t n = rd32(good + off[3] + 8);
    const uint8_t *L = good + off[3] + 16;
    cr_assert(L[0] < 0x80 && L[0] > 0, "first length %u is one byte here", L[0]);
    uint8_t *edit = malloc(n + 8);
    /* Unchanged payload through the same rebuild: accepted (the helper itself is sound). */
    expect_lengths(ctx, good, len, L, n, KVC_OK, "rebuilt as is");
    /* L0 + 2^32 in 5 bytes. */
    const uint64_t big = (uint64_t)L[0] + (1ull << 32);
    for (int i = 0; i < 5; i++) edit[i] = (uint8_t)(((big >> (7 * i)) & 0x7f) | (i < 4 ? 0x80 : 0));
    memcpy(edit + 5, L + 1, n - 1);
    expect_lengths(ctx, good, len, edit, n + 4, KVC_ERR_CORRUPT, "L0 + 2^32");
    /* The largest 32-bit value's 5th byte is 0x0f; 0x1f there is bit 32. */
    const uint8_t top[] = { 0xff, 0xff, 0xff, 0xff, 0x1f };
    memcpy(edit, top, 5);
    expect_lengths(ctx, good, len, edit, n + 4, KVC_ERR_CORRUPT, "2^33 - 1");
    /* Overlong: L0 | 0x80, 0x00 (e.g. 0x88 0x00 for 8), and L0 padded to 5 bytes. */
    edit[0] = (uint8_t)(L[0] | 0x80);
    edit[1] = 0;
    memcpy(edit + 2, L + 1, n - 1);
    expect_lengths(ctx, good, len, edit, n + 1, KVC_ERR_CORRUPT, "overlong 2 bytes");
    const uint8_t pad[] = { (uint8_t)(L[0] | 0x80), 0x80, 0x80, 0x80, 0x00 };
    memcpy(edit, pad, 5);
    memcpy(edit + 5, L + 1, n - 1);
    expect_lengths(ctx, good, len, edit, n + 4, KVC_ERR_CORRUPT, "overlong 5 bytes");
    free(edit);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* Reserved fields (header bytes 32-43, META bytes 28-31) must be zero: writers zero them, readers
 * reject anything else (docs/FORMAT.md), decode and inspect alike. */
Test(codec, reserved_fields_must_be_zero)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len), *bad = malloc(len);
    sections(good, off);
    for (size_t i = 32; i < 44; i++) cr_assert_eq(good[i], 0, "writer left header byte %zu non-zero", i);
    for (size_t i = 28; i < 32; i++) cr_assert_eq(good[off[0] + 16 + i], 0, "writer left META byte %zu non-zero", i);
    kvc_codec_info_t info;
    for (size_t i = 32; i < 44; i++) {
        memcpy(bad, good, len);
        bad[i] = 1;
        reseal(bad, off[0]);
        cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT, "header byte %zu", i);
        cr_assert_eq(kvc_codec_inspect(bad, len, &info), KVC_ERR_CORRUPT, "header byte %zu", i);
    }
    for (size_t i = 28; i < 32; i++) {
        memcpy(bad, good, len);
        bad[off[0] + 16 + i] = 0x80;
        reseal(bad, off[0]);
        cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT, "META byte %zu", i);
        cr_assert_eq(kvc_codec_inspect(bad, len, &info), KVC_ERR_CORRUPT, "META byte %zu", i);
    }
    free(bad);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* inspect and layer_stats run every check decode runs (all but decoding the coded streams): a scale
 * that is NaN, negative or infinite is rejected by all three. */
Test(codec, inspect_rejects_what_decode_rejects)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len), *bad = malloc(len);
    sections(good, off);
    const uint16_t scales[] = { 0x7e00 /* NaN */, 0xbc00 /* -1 */, 0x7c00 /* +inf */, 0xfc00 /* -inf */ };
    const size_t at[] = { 0, 17, rd32(good + off[1] + 8) / 2 - 1 }; /* first, middle, last scale */
    kvc_codec_info_t info;
    kvc_codec_layer_stats_t stats[4];
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 3; j++) {
            memcpy(bad, good, len);
            bad[off[1] + 16 + 2 * at[j]] = (uint8_t)scales[i];
            bad[off[1] + 16 + 2 * at[j] + 1] = (uint8_t)(scales[i] >> 8);
            reseal(bad, off[1]);
            cr_assert_eq(try_decode(ctx, bad, len), KVC_ERR_CORRUPT, "scale %zu = 0x%04x: decode", at[j], scales[i]);
            cr_assert_eq(kvc_codec_inspect(bad, len, &info), KVC_ERR_CORRUPT, "scale %zu = 0x%04x: inspect", at[j], scales[i]);
            cr_assert_eq(kvc_codec_layer_stats(bad, len, stats, 4), KVC_ERR_CORRUPT, "scale %zu = 0x%04x: stats", at[j],
                         scales[i]);
        }
    /* Zero and the largest finite half are valid scales. */
    const uint16_t fine[] = { 0x0000, 0x8000 /* -0 */, 0x7bff };
    for (size_t i = 0; i < 3; i++) {
        memcpy(bad, good, len);
        bad[off[1] + 16] = (uint8_t)fine[i];
        bad[off[1] + 17] = (uint8_t)(fine[i] >> 8);
        reseal(bad, off[1]);
        cr_assert_eq(kvc_codec_inspect(bad, len, &info), KVC_OK, "scale 0x%04x", fine[i]);
        cr_assert_eq(try_decode(ctx, bad, len), KVC_OK, "scale 0x%04x", fine[i]);
    }
    free(bad);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* The container's scale check works on the bit patterns (docs/FORMAT.md: finite and >= 0, -0
 * included): every fp16 and bf16 pattern, in the first scale (the vector loop) and the last (the
 * tail: 164 scales), and fp32 boundaries and random patterns, judged by inspect as their value
 * says (the oracle converts with the test's own reference and compares as a float). */
static int scale_ok(kvc_dtype_t dt, uint32_t bits)
{
    float f;
    if (dt == KVC_DTYPE_F32) memcpy(&f, &bits, 4);
    else f = dt == KVC_DTYPE_F16 ? ref_f16_to_f32((uint16_t)bits) : ref_bf16_to_f32((uint16_t)bits);
    return f >= 0.0f && f < INFINITY;
}

/* The decode's conversion of the container's scales (common/halfs.h, 4 at a time) gives the test
 * reference's value for every finite fp16 and bf16 pattern, at every position of a 4-wide step
 * and in the tail (n = 4 K + 3). */
Test(codec, every_finite_half_scale_converts_exactly)
{
    enum { N = 4099 };
    static uint8_t buf[2 * N];
    static float out[N];
    for (int bf = 0; bf < 2; bf++)
        for (uint32_t base = 0; base < 65536; base += N) {
            for (size_t i = 0; i < N; i++) {
                uint16_t h = (uint16_t)(base + i);
                if (bf ? (h & 0x7F80u) == 0x7F80u : (h & 0x7C00u) == 0x7C00u) h = (uint16_t)(h & 0x83FFu); /* finite only */
                buf[2 * i] = (uint8_t)h;
                buf[2 * i + 1] = (uint8_t)(h >> 8);
            }
            kvc_halfs_to_f32(buf, N, bf, out);
            for (size_t i = 0; i < N; i++) {
                const uint16_t h = (uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8);
                const float want = bf ? ref_bf16_to_f32(h) : ref_f16_to_f32(h);
                uint32_t a, b;
                memcpy(&a, &out[i], 4);
                memcpy(&b, &want, 4);
                cr_assert_eq(a, b, "%s 0x%04x at %zu: 0x%08x, want 0x%08x", bf ? "bf16" : "fp16", h, i, a, b);
            }
        }
}

Test(codec, every_scale_bit_pattern_is_judged_by_its_value)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    static const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    static float kv[2 * 2 * 41 * 4];
    uint64_t seed = 3;
    for (int d = 0; d < 3; d++) {
        const kvc_dtype_t dt = dts[d];
        const size_t es = dt == KVC_DTYPE_F32 ? 4 : 2, nscales = 2 * 2 * 41;
        synth(kv, dt, sizeof(kv) / 4, 5);
        const kvc_codec_params_t p = params_for(dt, 2, 41, 2, 2);
        uint8_t *good, *bad;
        size_t len, off[5];
        cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &good, &len), KVC_OK, "%s", kvc_last_error());
        sections(good, off);
        cr_assert_eq(rd32(good + off[1] + 8), nscales * es);
        bad = malloc(len);
        const size_t at[2] = { 0, nscales - 1 };
        kvc_codec_info_t info;
        for (int j = 0; j < 2; j++)
            for (uint64_t n = 0; n < (dt == KVC_DTYPE_F32 ? 3000u : 65536u); n++) {
                static const uint32_t edge[] = { 0, 1, 0x3F800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u,
                                                 0x7FFFFFFFu, 0x80000000u, 0x80000001u, 0xBF800000u, 0xFF800000u, 0xFFFFFFFFu };
                uint32_t bits = (uint32_t)n;
                if (dt == KVC_DTYPE_F32) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    bits = n < sizeof(edge) / 4 ? edge[n] : (uint32_t)(seed >> 32);
                }
                memcpy(bad, good, len);
                for (size_t b = 0; b < es; b++) bad[off[1] + 16 + at[j] * es + b] = (uint8_t)(bits >> (8 * b));
                reseal(bad, off[1]);
                const kvc_status_t want = scale_ok(dt, bits) ? KVC_OK : KVC_ERR_CORRUPT;
                cr_assert_eq(kvc_codec_inspect(bad, len, &info), want, "dtype %d scale %zu = 0x%x", dt, at[j], bits);
            }
        free(bad);
        kvc_codec_free(good);
    }
    kvc_context_destroy(ctx);
}

/* Random bytes in the coded sections, resealed so they reach the decoders: never out of bounds
 * (ASan builds check that), and either rejected or decoded to finite values. */
Test(codec, resealed_garbage_stays_in_bounds)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len, off[5];
    uint8_t *good = small_container(ctx, &len), *bad = malloc(len);
    sections(good, off);
    srand(11);
    static uint16_t out[2 * 2 * 40 * 6];
    for (int trial = 0; trial < 300; trial++) {
        memcpy(bad, good, len);
        const int s = 1 + trial % 4; /* SCALES, CDF, LENGTHS or STREAMS */
        const size_t n = rd32(bad + off[s] + 8);
        for (int k = 0; k < 3 && n; k++) bad[off[s] + 16 + (size_t)rand() % n] = (uint8_t)rand();
        reseal(bad, off[s]);
        const kvc_status_t st = kvc_codec_decode(ctx, bad, len, out, sizeof(out), NULL);
        cr_assert(st == KVC_OK || st == KVC_ERR_CORRUPT, "trial %d: %s", trial, kvc_status_name(st));
        if (st == KVC_OK)
            for (size_t i = 0; i < sizeof(out) / 2; i++) cr_assert(isfinite(kvc_f16_to_f32(out[i])));
    }
    free(bad);
    kvc_codec_free(good);
    kvc_context_destroy(ctx);
}

/* The container records whether the head split is known: flag bit 1 (NH = 1, HS = C nominal),
 * identical otherwise; a container without the flag (every one written before) reads as known. */
Test(codec, head_geometry_recorded)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    static uint16_t kv[2 * 2 * 16 * 32];
    for (size_t i = 0; i < sizeof(kv) / 2; i++) kv[i] = (uint16_t)(0x3c00 + (i % 97) * 8);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 2, 16, 4, 8);
    uint8_t *known, *unknown;
    size_t klen, ulen;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &known, &klen), KVC_OK);
    p.num_heads = 1;
    p.head_size = 32;
    p.field_mask = KVC_CODEC_PARAM_HEADS_UNKNOWN;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &unknown, &ulen), KVC_OK);
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(known, klen, &info), KVC_OK);
    cr_assert_eq(info.heads_known, 1);
    cr_assert_eq(info.num_heads, 4u);
    cr_assert_eq(known[12], 0, "a known split sets no flag: the bytes stay those of format 1.0");
    cr_assert_eq(kvc_codec_inspect(unknown, ulen, &info), KVC_OK);
    cr_assert_eq(info.heads_known, 0);
    cr_assert_eq(info.num_heads, 1u);
    cr_assert_eq(unknown[12], 2);
    cr_assert_eq(unknown[10], 1, "an unknown split is a format 1.1 feature");
    kvc_codec_free(unknown);
    p.num_heads = 4;
    p.head_size = 8;
    uint8_t *none = NULL;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &none, &ulen), KVC_ERR_SHAPE, "HEADS_UNKNOWN needs num_heads 1");
    cr_assert_null(none);
    kvc_codec_free(known);
    kvc_context_destroy(ctx);
}

/* ---- quality levels, per-channel keys, LMCache readability ---- */

static uint8_t *encode_ok(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, size_t *len)
{
    uint8_t *buf;
    cr_assert_eq(kvc_codec_encode(ctx, p, kv, &buf, len), KVC_OK, "%s", kvc_last_error());
    return buf;
}

static kvc_status_t try_export(const uint8_t *buf, size_t len)
{
    kvc_lmcache_chunk_t o;
    void *storage = NULL;
    const kvc_status_t st = kvc_codec_export_lmcache(buf, len, &o, &storage);
    kvc_codec_free(storage);
    return st;
}

Test(codec, levels_set_bins_and_key_scaling)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_context_t *ctx = kvc_test_cpu_context();
    uint32_t bins[10], defaults[10];
    kvc_cg_default_bins(nl, defaults);
    const uint32_t want_k[] = { 0, 62, 46, 32 }, want_v[] = { 0, 12, 8, 8 };
    size_t sizes[KVC_CODEC_LEVEL_MAX + 1];
    for (int level = 0; level <= KVC_CODEC_LEVEL_MAX; level++) {
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
        cr_assert_eq(kvc_codec_level_params(level, &p, bins), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(p.bins, bins);
        cr_assert_eq(p.field_mask, (uint64_t)(KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_KEY_SCALING));
        cr_assert_eq(p.key_scaling, KVC_CODEC_SCALE_TOKEN);
        for (size_t l = 0; l < nl; l++) {
            cr_assert_eq(bins[l], level ? want_k[level] : defaults[l], "level %d key bins[%zu]", level, l);
            cr_assert_eq(bins[nl + l], level ? want_v[level] : defaults[nl + l], "level %d value bins[%zu]", level, l);
        }
        size_t len;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
        cr_assert(info.lmcache_readable, "level %d must stay LMCache-readable", level);
        cr_assert_eq(try_export(buf, len), KVC_OK, "level %d: %s", level, kvc_last_error());
        uint16_t *dec = malloc(info.original_bytes);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_OK);
        assert_error_bound(kv, dec, KVC_DTYPE_F16, 2 * nl, t, nh * hs, bins);
        free(dec);
        if (level == 0) { /* level 0 is exactly the default encoding */
            kvc_codec_params_t d = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
            size_t dlen;
            uint8_t *dbuf = encode_ok(ctx, &d, kv, &dlen);
            cr_assert(dlen == len && memcmp(dbuf, buf, len) == 0, "level 0 differs from the default encoding");
            kvc_codec_free(dbuf);
        }
        sizes[level] = len;
        kvc_codec_free(buf);
    }
    /* Each level is smaller than the one before (docs/QUALITY.md has their sizes and quality). */
    for (int level = 1; level <= KVC_CODEC_LEVEL_MAX; level++) cr_assert_lt(sizes[level], sizes[level - 1], "level %d", level);

    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    cr_assert_eq(kvc_codec_level_params(-1, &p, bins), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_level_params(KVC_CODEC_LEVEL_MAX + 1, &p, bins), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_level_params(1, NULL, bins), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_level_params(1, &p, NULL), KVC_ERR_INVALID_ARG);
    p.num_layers = 0;
    cr_assert_eq(kvc_codec_level_params(1, &p, bins), KVC_ERR_INVALID_ARG);
    p.num_layers = 4097;
    cr_assert_eq(kvc_codec_level_params(1, &p, bins), KVC_ERR_INVALID_ARG);
    free(kv);
    kvc_context_destroy(ctx);
}

/* The real 5-layer cache tiled to 32 layers (layer l holds real layer l % 5): LMCache's default
 * then gives keys 32 bins in layers 0-9 and 16 after, values 32 in layers 0-1 and 16 after. */
static uint16_t *tiled_kv(const uint16_t *kv, size_t nl, size_t t, size_t c, size_t NL)
{
    uint16_t *big = malloc(2 * NL * t * c * 2);
    for (size_t p = 0; p < 2; p++)
        for (size_t l = 0; l < NL; l++) memcpy(big + (p * NL + l) * t * c, kv + (p * nl + l % nl) * t * c, t * c * 2);
    return big;
}

Test(codec, levels_follow_lmcache_default_for_32_layers)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    const size_t NL = 32;
    uint16_t *big = tiled_kv(kv, nl, t, nh * hs, NL);
    kvc_context_t *ctx = kvc_test_cpu_context();
    uint32_t bins[64], def[64], small[10];
    kvc_cg_default_bins(NL, def);
    size_t size0 = 0;
    for (int level = 0; level <= KVC_CODEC_LEVEL_MAX; level++) {
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, NL, t, nh, hs), q = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
        cr_assert_eq(kvc_codec_level_params(level, &p, bins), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(kvc_codec_level_params(level, &q, small), KVC_OK, "%s", kvc_last_error());
        for (size_t i = 0; i < 2 * NL; i++) {
            /* A layer LMCache codes with 32 bins gets the level's 5-layer bins; one it codes with 16
             * gets half of them, rounded up to even, at least 4. */
            const uint32_t at32 = small[i < NL ? 0 : nl], want = def[i] == 32 ? at32 : ((at32 + 3) / 4 * 2 < 4 ? 4 : (at32 + 3) / 4 * 2);
            cr_assert_eq(bins[i], want, "level %d bins[%zu] = %u, want %u (LMCache's default %u)", level, i, bins[i], want, def[i]);
        }
        size_t len;
        uint8_t *buf = encode_ok(ctx, &p, big, &len);
        if (!level) size0 = len;
        else cr_assert_lt(len, size0, "level %d on a 32-layer cache: %zu bytes, level 0 (LMCache's default) %zu", level, len, size0);
        kvc_codec_free(buf);
    }
    free(big);
    free(kv);
    kvc_context_destroy(ctx);
}

/* Rate target: the container fits the target, bins differ between K and V layers, a larger target
 * gives a smaller error; every misuse is KVC_ERR_INVALID_ARG with nothing written. */
Test(codec, bits_target)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_context_t *ctx = kvc_test_cpu_context();
    const double elems = 2.0 * (double)(nl * t * nh * hs);
    double prev_err = INFINITY;
    for (double b = 2.5; b <= 5.0; b += 0.5) {
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
        p.field_mask = KVC_CODEC_PARAM_BITS;
        p.bits = b;
        size_t len;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_leq(8.0 * (double)len / elems, b, "target %.1f: %.3f bits per element", b, 8.0 * (double)len / elems);
        cr_assert_geq(8.0 * (double)len / elems, b - 0.35, "target %.1f: %.3f bits per element, far under", b, 8.0 * (double)len / elems);
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
        uint16_t *dec = malloc(info.original_bytes);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_OK);
        double err = 0;
        for (size_t i = 0; i < info.original_bytes / 2; i++) err += pow(elem(kv, i, KVC_DTYPE_F16) - elem(dec, i, KVC_DTYPE_F16), 2);
        cr_assert_lt(err, prev_err, "target %.1f: squared error %g not below the smaller target's %g", b, err, prev_err);
        prev_err = err;
        kvc_codec_layer_stats_t ls[10];
        cr_assert_eq(kvc_codec_layer_stats(buf, len, ls, 2 * nl), KVC_OK);
        cr_assert_neq(ls[0].bins, ls[nl].bins, "target %.1f: keys and values got the same bins", b);
        free(dec);
        kvc_codec_free(buf);
    }
    uint32_t bins[10];
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    uint8_t *none = NULL;
    size_t len = 0;
    const double bad[] = { 0, -1, NAN, INFINITY, 0.5 };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        p.field_mask = KVC_CODEC_PARAM_BITS;
        p.bits = bad[i];
        cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &none, &len), KVC_ERR_INVALID_ARG, "bits %g", bad[i]);
        cr_assert_null(none);
    }
    p.bits = 3.5;
    cr_assert_eq(kvc_codec_level_params(1, &p, bins), KVC_OK);
    p.field_mask |= KVC_CODEC_PARAM_BITS;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &none, &len), KVC_ERR_INVALID_ARG, "bits with bins");
    p.field_mask = KVC_CODEC_PARAM_BITS | KVC_CODEC_PARAM_KEY_SCALING;
    p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &none, &len), KVC_ERR_INVALID_ARG, "bits with per-channel keys");
    cr_assert_null(none);
    free(kv);
    kvc_context_destroy(ctx);
}

/* Per-channel keys against the scalar oracle: every (layer, channel) column of plane 0 quantised by
 * ref_quantise_row over the chunk's tokens, dequantised as (q - M) * scale / M. The decoded value
 * equals the oracle's up to the output dtype's rounding (one step apart only at an exact rounding
 * tie of the quotient), and |x - x^| <= scale / (2M). Values keep the per-token bound. */
static void assert_channel_keys(const void *orig, const void *dec, kvc_dtype_t dt, size_t NL, size_t T, size_t C,
                                const uint32_t *bins)
{
    const double rel_round = dt == KVC_DTYPE_F32 ? 1e-6 : dt == KVC_DTYPE_F16 ? 1.0 / 1024 : 1.0 / 128;
    float *col = malloc(T * sizeof(float));
    double *y = malloc(T * sizeof(double));
    uint8_t *q = malloc(T);
    for (size_t l = 0; l < NL; l++) {
        const unsigned M = bins[l] / 2 - 1;
        for (size_t c = 0; c < C; c++) {
            for (size_t t = 0; t < T; t++) col[t] = (float)elem(orig, (l * T + t) * C + c, dt);
            const double scale = ref_quantise_row(col, T, M, y, q), step = scale / M;
            for (size_t t = 0; t < T; t++) {
                const size_t i = (l * T + t) * C + c;
                const double x = elem(orig, i, dt), got = elem(dec, i, dt), want = ((int)q[t] - (int)M) * step;
                const double frac = fabs(y[t]) - floor(fabs(y[t]));
                const double slack = fabs(want) * rel_round + 1e-6 * scale + (fabs(frac - 0.5) < 1e-5 ? step : 0);
                cr_assert_leq(fabs(got - want), slack, "layer %zu channel %zu token %zu: x %g decoded %g, oracle %g (scale %g, M %u)",
                              l, c, t, x, got, want, scale, M);
                cr_assert_leq(fabs(x - got), scale / (2 * M) * (1 + 1e-5) + fabs(x) * rel_round + 1e-30,
                              "layer %zu channel %zu token %zu: %g decoded as %g (scale %g)", l, c, t, x, got, scale);
            }
        }
    }
    free(col);
    free(y);
    free(q);
}

Test(codec, per_channel_keys_match_the_oracle)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32 };
    for (int di = 0; di < 3; di++)
        for (int mla = 0; mla < 2; mla++)
            for (int tc = 0; tc < 2; tc++) {
                const size_t nl = 3, t = tc ? 300 : 256, nh = mla ? 1 : 2, hs = mla ? 40 : 12, planes = mla ? 1 : 2, C = nh * hs;
                const size_t n = planes * nl * t * C, es = kvc_dtype_size(dts[di]);
                void *kv = malloc(n * es), *dec = malloc(n * es);
                synth(kv, dts[di], n, 11u + (unsigned)(di * 4 + mla * 2 + tc));
                const uint32_t bins[6] = { 16, 24, 8, 64, 4, 12 };
                kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW | KVC_CODEC_PARAM_KEY_SCALING,
                                         .dtype = dts[di], .layout = mla ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD, .num_layers = nl,
                                         .num_tokens = t, .num_heads = nh, .head_size = hs, .bins = bins,
                                         .window_tokens = tc ? 64 : 256, .key_scaling = KVC_CODEC_SCALE_CHANNEL };
                size_t len;
                uint8_t *buf = encode_ok(ctx, &p, kv, &len);
                kvc_codec_info_t info;
                cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, n * es, &info), KVC_OK, "%s", kvc_last_error());
                cr_assert_eq(info.version_minor, 1u);
                cr_assert_eq(info.key_scaling, KVC_CODEC_SCALE_CHANNEL);
                cr_assert_eq(info.scales_bytes, nl * (C + (planes - 1) * t) * es);
                cr_assert_not(info.lmcache_readable);
                assert_channel_keys(kv, dec, dts[di], nl, t, C, bins);
                if (!mla)
                    assert_error_bound((const uint8_t *)kv + nl * t * C * es, (const uint8_t *)dec + nl * t * C * es, dts[di], nl, t,
                                       C, bins + nl);
                /* Re-encoding the decoded chunk reproduces the container byte for byte in the 16-bit
                 * dtypes (in f32, (2M - M) * scale / M can miss the scale by an ulp). */
                if (es == 2) {
                    size_t len2;
                    uint8_t *buf2 = encode_ok(ctx, &p, dec, &len2);
                    cr_assert(len2 == len && memcmp(buf, buf2, len) == 0, "dtype %d mla %d T %zu: re-encode differs", dts[di], mla, t);
                    kvc_codec_free(buf2);
                }
                kvc_codec_free(buf);
                free(kv);
                free(dec);
            }
    kvc_context_destroy(ctx);
}

Test(codec, per_channel_keys_same_bytes_on_every_isa_tier)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    p.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
    p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    const size_t n = 2 * nl * t * nh * hs;
    uint8_t *first = NULL;
    uint16_t *dec0 = malloc(2 * n), *dec = malloc(2 * n);
    size_t first_len = 0;
    int tiers = 0;
    static const char *names[] = { "scalar", "avx2", "avx512" };
    for (int i = 0; i < 3; i++) {
        setenv("KVCORE_ISA", names[i], 1);
        kvc_context_t *ctx = kvc_test_cpu_context();
        unsetenv("KVCORE_ISA");
        if (strcmp(kvc_context_isa(ctx), names[i])) { /* capped: this machine lacks the tier */
            kvc_context_destroy(ctx);
            continue;
        }
        size_t len;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, first ? dec : dec0, 2 * n, NULL), KVC_OK);
        if (!first) {
            first = buf;
            first_len = len;
        } else {
            cr_assert(len == first_len && memcmp(buf, first, len) == 0, "%s container differs from scalar", names[i]);
            cr_assert(memcmp(dec, dec0, 2 * n) == 0, "%s decode differs from scalar", names[i]);
            kvc_codec_free(buf);
        }
        kvc_context_destroy(ctx);
        tiers++;
    }
    cr_assert_geq(tiers, 1);
    if (tiers == 1) cr_log_warn("only the scalar tier is available here: nothing to compare it with");
    kvc_codec_free(first);
    free(dec0);
    free(dec);
    free(kv);
}

/* Format 1.0 containers keep minor 0; per-channel ones are 1.1. Unknown flags are VERSION in a newer
 * minor (a feature this reader predates) and CORRUPT in a minor this reader knows. */
Test(codec, format_minor_versions)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    uint8_t *buf = small_container(ctx, &len);
    cr_assert_eq(buf[10] | buf[11] << 8, 0, "format 1.0 containers must stay 1.0");
    kvc_codec_free(buf);

    uint16_t kv[2 * 2 * 40 * 6];
    synth(kv, KVC_DTYPE_F16, sizeof(kv) / 2, 3);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 2, 40, 2, 3);
    p.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
    p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    buf = encode_ok(ctx, &p, kv, &len);
    cr_assert_eq(buf[10], 1);
    cr_assert_eq(rd32(buf + 12), 4u); /* flag bit 2: per-channel keys */
    cr_assert_eq(try_decode(ctx, buf, len), KVC_OK);
    buf[10] = 0; /* per-channel keys in a 1.0 container */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    buf[10] = 2;
    wr32(buf + 12, 4u | 8u | 16u); /* rANS flags that no format (1.2 had bit 3 alone) sets in a 1.2 header */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "format 1.4 features"), "%s", kvc_last_error());
    buf[10] = 3;
    wr32(buf + 12, 4u | 16u); /* the rANS stream span flag without rANS streams */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    wr32(buf + 12, 4u | 8u | 16u | 32u); /* format 1.4's CDF index in a 1.3 header */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "format 1.4 features"), "%s", kvc_last_error());
    buf[10] = 4;
    wr32(buf + 12, 4u | 32u); /* the CDF index without rANS streams */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "CDF index flag without rANS"), "%s", kvc_last_error());
    wr32(buf + 12, 4u | 8u | 32u); /* rANS without the 32-channel streams: not a layout of any format */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "a rANS container has all of"), "%s", kvc_last_error());
    wr32(buf + 12, 4u | 64u); /* a flag no 1.4 container can have */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    buf[10] = 5; /* ... the same flag from a newer minor: this reader is too old */
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_VERSION);
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_VERSION);
    cr_assert_eq(try_export(buf, len), KVC_ERR_VERSION);
    /* A per-channel SCALES section of the per-token size is rejected. */
    wr32(buf + 12, 0);
    buf[10] = 1;
    reseal(buf, 48);
    cr_assert_eq(try_decode(ctx, buf, len), KVC_ERR_CORRUPT);
    kvc_codec_free(buf);
    kvc_context_destroy(ctx);
}

/* kvc_codec_export_lmcache refuses every container LMCache's GPU decoder cannot read, and
 * info.lmcache_readable says the same. */
Test(codec, lmcache_export_refuses_what_lmcache_cannot_read)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    size_t len;
    kvc_codec_info_t info;
    {   /* per-channel keys */
        uint16_t kv[2 * 2 * 40 * 6];
        synth(kv, KVC_DTYPE_F16, sizeof(kv) / 2, 3);
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, 2, 40, 2, 3);
        p.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
        p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_eq(try_export(buf, len), KVC_ERR_UNSUPPORTED);
        cr_assert(strstr(kvc_last_error(), "per channel"), "%s", kvc_last_error());
        p.key_scaling = KVC_CODEC_SCALE_TOKEN; /* the same chunk per token is readable */
        kvc_codec_free(buf);
        buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_eq(try_export(buf, len), KVC_OK);
        kvc_codec_free(buf);
        /* 64 bins: a CDF of 65 entries */
        const uint32_t bins[4] = { 64, 64, 16, 16 };
        p.field_mask = KVC_CODEC_PARAM_BINS;
        p.bins = bins;
        buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
        cr_assert_not(info.lmcache_readable);
        cr_assert_eq(try_export(buf, len), KVC_ERR_UNSUPPORTED);
        cr_assert(strstr(kvc_last_error(), "65 entries"), "%s", kvc_last_error());
        kvc_codec_free(buf);
    }
    {   /* A window of symbols that are rare in the rest of a long chunk: its stream outgrows the
         * decoder's 256-byte row. Channel 1 sets every token's scale; channel 0 is 0 for 7 windows
         * and spread over all 61 levels in the 8th. */
        const size_t T = 2048, C = 2;
        float *kv = calloc(2 * T * C, sizeof(float));
        for (size_t t = 0; t < T; t++) {
            kv[t * C + 1] = kv[(T + t) * C + 1] = 1.0f;
            if (t >= 7 * 256) kv[t * C] = (float)((int)((t * 37) % 61) - 30) / 30.0f;
        }
        const uint32_t bins[2] = { 62, 4 };
        kvc_codec_params_t p = params_for(KVC_DTYPE_F32, 1, T, 1, C);
        p.field_mask = KVC_CODEC_PARAM_BINS;
        p.bins = bins;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
        cr_assert_not(info.lmcache_readable);
        cr_assert_eq(try_export(buf, len), KVC_ERR_UNSUPPORTED);
        cr_assert(strstr(kvc_last_error(), "256 bytes"), "%s", kvc_last_error());
        kvc_codec_free(buf);
        free(kv);
    }
    kvc_context_destroy(ctx);
}

/* The context keeps the codec's scratch across calls: calls of different sizes and modes on one
 * context give exactly what fresh contexts give, and so do calls from several threads at once on
 * one context (all but one of them then work on scratch of their own). */
typedef struct {
    kvc_context_t *ctx;
    const kvc_codec_params_t *p;
    const void *kv;
    const uint8_t *want;
    size_t want_len;
    int ok;
} scratch_job_t;

static void *scratch_worker(void *arg)
{
    scratch_job_t *j = arg;
    j->ok = 1;
    for (int r = 0; r < 4; r++) {
        uint8_t *buf;
        size_t len;
        if (kvc_codec_encode(j->ctx, j->p, j->kv, &buf, &len) != KVC_OK) { j->ok = 0; return NULL; }
        if (len != j->want_len || memcmp(buf, j->want, len)) j->ok = 0;
        kvc_codec_free(buf);
    }
    return NULL;
}

Test(codec, scratch_reused_across_calls_and_threads)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    uint16_t small[2 * 2 * 40 * 6];
    synth(small, KVC_DTYPE_F16, sizeof(small) / 2, 5);
    kvc_codec_params_t big = params_for(KVC_DTYPE_F16, nl, t, nh, hs), pc = big, sm = params_for(KVC_DTYPE_F16, 2, 40, 2, 3);
    pc.field_mask = KVC_CODEC_PARAM_KEY_SCALING;
    pc.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    const kvc_codec_params_t *ps[3] = { &big, &sm, &pc };
    const void *data[3] = { kv, small, kv };
    uint8_t *want[3];
    size_t want_len[3];
    for (int i = 0; i < 3; i++) { /* fresh context each */
        kvc_context_t *c = kvc_test_cpu_context();
        want[i] = encode_ok(c, ps[i], data[i], &want_len[i]);
        kvc_context_destroy(c);
    }
    kvc_context_t *ctx = kvc_test_cpu_context();
    const int order[7] = { 0, 1, 0, 2, 1, 2, 0 };
    for (int k = 0; k < 7; k++) {
        const int i = order[k];
        size_t len;
        uint8_t *buf = encode_ok(ctx, ps[i], data[i], &len);
        cr_assert(len == want_len[i] && memcmp(buf, want[i], len) == 0, "call %d (case %d) differs from a fresh context", k, i);
        /* decode on the same context, after an encode of another size */
        const size_t n = i == 1 ? sizeof(small) : 2 * nl * t * nh * hs * 2;
        void *dec = malloc(n), *ref = malloc(n);
        kvc_context_t *fresh = kvc_test_cpu_context();
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, n, NULL), KVC_OK);
        cr_assert_eq(kvc_codec_decode(fresh, buf, len, ref, n, NULL), KVC_OK);
        cr_assert(memcmp(dec, ref, n) == 0, "decode after call %d differs from a fresh context", k);
        kvc_context_destroy(fresh);
        free(dec);
        free(ref);
        kvc_codec_free(buf);
    }
    scratch_job_t jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (scratch_job_t){ .ctx = ctx, .p = ps[i % 3], .kv = data[i % 3], .want = want[i % 3], .want_len = want_len[i % 3] };
        cr_assert_eq(pthread_create(&th[i], NULL, scratch_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert(jobs[i].ok, "thread %d: a concurrent encode on a shared context differs", i);
    }
    for (int i = 0; i < 3; i++) kvc_codec_free(want[i]);
    kvc_context_destroy(ctx);
    free(kv);
}

/* Containers of format 1.0 modes are byte-identical to those of the kvcore that predates format
 * 1.1 and the codec's speed work (tests/data/golden_kvc/README.md). */
static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

Test(codec, golden_containers_unchanged)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs); /* [2][5][512][32] */
    const size_t C = nh * hs;
    kvc_context_t *ctx = kvc_test_cpu_context();
    for (int cs = 0; cs < 3; cs++) {
        const size_t T = cs == 2 ? 100 : 128;
        uint32_t bins[10] = { 46, 46, 46, 46, 46, 6, 6, 6, 6, 6 };
        const uint32_t mla_bins[5] = { 64, 32, 16, 8, 4 };
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, T, nh, hs);
        void *in;
        if (cs < 2) {
            uint16_t *x = malloc(2 * nl * T * C * 2);
            for (size_t pl = 0; pl < 2; pl++)
                for (size_t l = 0; l < nl; l++) memcpy(x + (pl * nl + l) * T * C, kv + ((pl * nl + l) * t) * C, T * C * 2);
            in = x;
            if (cs == 1) {
                p.field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW;
                p.bins = bins;
                p.window_tokens = 32;
            }
        } else {
            float *x = malloc(nl * T * C * 4);
            for (size_t l = 0; l < nl; l++)
                for (size_t i = 0; i < T * C; i++) x[l * T * C + i] = kvc_f16_to_f32(kv[l * t * C + i]);
            in = x;
            p = (kvc_codec_params_t){ .field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F32,
                                      .layout = KVC_CODEC_MLA, .num_layers = nl, .num_tokens = T, .num_heads = 1, .head_size = C,
                                      .bins = mla_bins, .window_tokens = 40 };
        }
        char name[64];
        snprintf(name, sizeof(name), "golden_kvc/case%d.kvc", cs);
        size_t glen, len;
        uint8_t *golden = read_all(kvc_test_data(name), &glen), *buf = encode_ok(ctx, &p, in, &len);
        cr_assert(len == glen && memcmp(buf, golden, len) == 0, "case %d: %zu bytes, golden %zu: the container changed", cs, len, glen);
        kvc_codec_free(buf);
        free(golden);
        free(in);
    }
    free(kv);
    kvc_context_destroy(ctx);
}

/* Thread count does not change a container: the coded CDF in parts, the window's streams packed
 * per layer and the STREAMS CRC computed in pieces (> 1 MiB of streams) give the bytes of one thread. */
Test(codec, same_bytes_with_any_thread_count)
{
#ifdef __SANITIZE_THREAD__
    cr_skip_test("libgomp is not built with TSan: OpenMP regions of several threads report false races (docs/HARDENING.md)");
#endif
    const size_t nl = 4, t = 1200, nh = 4, hs = 128, n = 2 * nl * t * nh * hs;
    uint16_t *kv = malloc(n * 2), *dec = malloc(n * 2);
    synth(kv, KVC_DTYPE_F16, n, 9);
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    uint8_t *first = NULL;
    size_t first_len = 0;
    const int threads[3] = { 1, 2, 5 };
    for (int i = 0; i < 3; i++) {
        kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS, .backend = "cpu",
                                    .num_threads = threads[i] };
        kvc_context_t *ctx;
        cr_assert_eq(kvc_context_create(&cp, &ctx), KVC_OK);
        size_t len;
        uint8_t *buf = encode_ok(ctx, &p, kv, &len);
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, n * 2, &info), KVC_OK, "%s", kvc_last_error());
        cr_assert_gt(info.streams_bytes, (size_t)1 << 20, "the case must exercise the pieced CRC");
        if (!first) {
            first = buf;
            first_len = len;
        } else {
            cr_assert(len == first_len && memcmp(buf, first, len) == 0, "%d threads: container differs from 1 thread", threads[i]);
            kvc_codec_free(buf);
        }
        kvc_context_destroy(ctx);
    }
    kvc_codec_free(first);
    free(kv);
    free(dec);
}

/* ---- streams of containers ---------------------------------------------------------------------- */

/* Copy tokens [t0, t0 + n) of a [L, T, C] tensor (L = planes * NL) into a [L, n, C] chunk. */
static void slice_tokens(const uint16_t *kv, size_t L, size_t T, size_t C, size_t t0, size_t n, uint16_t *dst)
{
    for (size_t l = 0; l < L; l++) memcpy(dst + l * n * C, kv + (l * T + t0) * C, n * C * 2);
}

typedef struct {
    const uint16_t *kv;
    size_t L, T, C;
    size_t reads, fail_at; /* fail_at: the read that returns KVC_ERR_IO (0: never) */
} stream_src_t;

static kvc_status_t src_read(void *user, size_t t0, size_t n, void *dst)
{
    stream_src_t *s = user;
    if (++s->reads == s->fail_at) return KVC_ERR_IO;
    cr_assert_leq(t0 + n, s->T);
    slice_tokens(s->kv, s->L, s->T, s->C, t0, n, dst);
    return KVC_OK;
}

typedef struct {
    uint8_t *p;
    size_t len, cap, pos;
    size_t step; /* bytes handed out per read call (exercises short reads) */
} membuf_t;

static kvc_status_t mem_write(void *user, const void *buf, size_t len)
{
    membuf_t *m = user;
    if (m->len + len > m->cap) {
        m->cap = (m->len + len) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->len, buf, len);
    m->len += len;
    return KVC_OK;
}

static kvc_status_t mem_read(void *user, void *buf, size_t len, size_t *got)
{
    membuf_t *m = user;
    size_t n = m->len - m->pos < len ? m->len - m->pos : len;
    if (m->step && n > m->step) n = m->step;
    memcpy(buf, m->p + m->pos, n);
    m->pos += n;
    *got = n;
    return KVC_OK;
}

typedef struct {
    uint16_t *out; /* [L, T, C] */
    size_t L, T, C, chunks, next;
} stream_dst_t;

static kvc_status_t dst_write(void *user, size_t t0, const void *chunk, const kvc_codec_info_t *info)
{
    stream_dst_t *d = user;
    cr_assert_eq(t0, d->next, "chunks arrive in token order");
    cr_assert_leq(t0 + info->num_tokens, d->T);
    const uint16_t *c = chunk;
    for (size_t l = 0; l < d->L; l++)
        memcpy(d->out + (l * d->T + t0) * d->C, c + l * info->num_tokens * d->C, info->num_tokens * d->C * 2);
    d->next = t0 + info->num_tokens;
    d->chunks++;
    return KVC_OK;
}

static size_t progress_calls, progress_last;
static void count_progress(void *user, size_t done, size_t total)
{
    (void)user;
    cr_assert_gt(done, progress_last);
    cr_assert_eq(total, 512);
    progress_last = done;
    progress_calls++;
}

/* A 512-token cache in chunks of 200 (200, 200, 112): the stream is the per-chunk containers back to
 * back, byte for byte, and decodes to the per-chunk decodes, within the quantiser's bound. */
Test(codec_stream, equals_chunk_by_chunk_and_round_trips)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    cr_assert_eq(t, 512);
    const size_t L = 2 * nl, C = nh * hs, CT = 200;
    kvc_context_t *ctx = kvc_test_cpu_context();
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
    p.progress = count_progress;
    stream_src_t src = { kv, L, t, C, 0, 0 };
    membuf_t stream = { 0 };
    progress_calls = progress_last = 0;
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, CT, src_read, &src, mem_write, &stream), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(src.reads, 3);
    cr_assert_eq(progress_calls, 3);
    cr_assert_eq(progress_last, 512);

    membuf_t ref = { 0 };
    uint16_t *chunk = malloc(L * CT * C * 2), *ref_dec = malloc(L * t * C * 2);
    for (size_t t0 = 0; t0 < t; t0 += CT) {
        const size_t n = t - t0 < CT ? t - t0 : CT;
        slice_tokens(kv, L, t, C, t0, n, chunk);
        kvc_codec_params_t cp = params_for(KVC_DTYPE_F16, nl, n, nh, hs);
        uint8_t *buf;
        size_t len;
        cr_assert_eq(kvc_codec_encode(ctx, &cp, chunk, &buf, &len), KVC_OK);
        mem_write(&ref, buf, len);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, chunk, L * n * C * 2, NULL), KVC_OK);
        for (size_t l = 0; l < L; l++) memcpy(ref_dec + (l * t + t0) * C, chunk + l * n * C, n * C * 2);
        kvc_codec_free(buf);
    }
    cr_assert_eq(stream.len, ref.len);
    cr_assert(memcmp(stream.p, ref.p, ref.len) == 0, "the stream differs from the per-chunk containers");

    stream_dst_t dst = { calloc(L * t * C, 2), L, t, C, 0, 0 };
    kvc_codec_info_t info;
    stream.step = 1000; /* short reads */
    cr_assert_eq(kvc_codec_decode_stream(ctx, mem_read, &stream, dst_write, &dst, &info), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(dst.chunks, 3);
    cr_assert_eq(info.num_tokens, 512);
    cr_assert_eq(info.num_layers, nl);
    cr_assert_eq(info.original_bytes, L * t * C * 2);
    cr_assert_eq(info.container_bytes, stream.len);
    cr_assert(memcmp(dst.out, ref_dec, L * t * C * 2) == 0);
    uint32_t bins[10];
    kvc_cg_default_bins(nl, bins);
    assert_error_bound(kv, dst.out, KVC_DTYPE_F16, L, t, C, bins);

    free(dst.out);
    free(chunk);
    free(ref_dec);
    free(ref.p);
    free(stream.p);
    free(kv);
    kvc_context_destroy(ctx);
}

static kvc_status_t decode_bytes(kvc_context_t *ctx, const uint8_t *p, size_t len, size_t T)
{
    membuf_t m = { (uint8_t *)p, len, len, 0, 0 };
    stream_dst_t dst = { calloc(20 * T * 32 + 1, 2), 10, T, 32, 0, 0 };
    kvc_status_t st = kvc_codec_decode_stream(ctx, mem_read, &m, dst_write, &dst, NULL);
    free(dst.out);
    return st;
}

static kvc_status_t fail_write(void *user, size_t t0, const void *chunk, const kvc_codec_info_t *info)
{
    (void)user, (void)t0, (void)chunk, (void)info;
    return KVC_ERR_IO;
}

/* Every truncation inside a container, a damaged header, a chunk of another kind and an empty
 * stream are KVC_ERR_CORRUPT; callback errors come back unchanged. */
Test(codec_stream, bad_streams_have_exact_statuses)
{
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    const size_t L = 2 * nl, C = nh * hs;
    cr_assert_eq(L, 10);
    cr_assert_eq(C, 32);
    kvc_context_t *ctx = kvc_test_cpu_context();
    kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, t, nh, hs);
    stream_src_t src = { kv, L, t, C, 0, 0 };
    membuf_t s = { 0 };
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, 256, src_read, &src, mem_write, &s), KVC_OK);
    cr_assert_eq(decode_bytes(ctx, s.p, s.len, t), KVC_OK);
    kvc_codec_info_t first;
    cr_assert_eq(kvc_codec_inspect(s.p, s.len, &first), KVC_ERR_CORRUPT, "one container is not the whole stream");
    /* The first container's size, from its header. */
    size_t c0 = 0;
    for (int i = 7; i >= 0; i--) c0 = c0 << 8 | s.p[24 + i];
    cr_assert_lt(c0, s.len);

    cr_assert_eq(decode_bytes(ctx, s.p, 0, t), KVC_ERR_CORRUPT, "empty stream");
    const size_t cuts[] = { 1, 47, 48, c0 - 1, c0 + 1, c0 + 47, c0 + 48, s.len - 1 };
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        cr_assert_eq(decode_bytes(ctx, s.p, cuts[i], t), KVC_ERR_CORRUPT, "cut at %zu", cuts[i]);
    /* Cut at a container boundary: a valid shorter stream (no index; docs/FORMAT.md). */
    cr_assert_eq(decode_bytes(ctx, s.p, c0, t), KVC_OK);

    uint8_t *bad = malloc(s.len + 8);
    const size_t flips[] = { c0, c0 + 24, c0 + 44, c0 + 100, s.len - 1 }; /* magic, size, CRC, a section, streams */
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        memcpy(bad, s.p, s.len);
        bad[flips[i]] ^= 0x10;
        cr_assert_eq(decode_bytes(ctx, bad, s.len, t), KVC_ERR_CORRUPT, "byte %zu flipped", flips[i]);
    }
    /* Trailing garbage after the last container. */
    memcpy(bad, s.p, s.len);
    memset(bad + s.len, 0, 8);
    cr_assert_eq(decode_bytes(ctx, bad, s.len + 8, t), KVC_ERR_CORRUPT);
    free(bad);

    /* A chunk of another kind (4 layers instead of 5) after the first. */
    membuf_t mixed = { 0 };
    mem_write(&mixed, s.p, c0);
    kvc_codec_params_t p4 = params_for(KVC_DTYPE_F16, 4, 16, nh, hs);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, &p4, kv, &buf, &len), KVC_OK);
    mem_write(&mixed, buf, len);
    kvc_codec_free(buf);
    cr_assert_eq(decode_bytes(ctx, mixed.p, mixed.len, t), KVC_ERR_CORRUPT);
    free(mixed.p);

    /* Callback failures stop the stream with their status. */
    membuf_t m = { s.p, s.len, s.len, 0, 0 };
    cr_assert_eq(kvc_codec_decode_stream(ctx, mem_read, &m, fail_write, NULL, NULL), KVC_ERR_IO);
    src.reads = 0;
    src.fail_at = 2;
    membuf_t o = { 0 };
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, 256, src_read, &src, mem_write, &o), KVC_ERR_IO);
    cr_assert_eq(o.len, c0, "the first chunk was written before the failing read");
    free(o.p);
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, 0, src_read, &src, mem_write, &o), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, 256, NULL, &src, mem_write, &o), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_decode_stream(ctx, NULL, &m, dst_write, NULL, NULL), KVC_ERR_INVALID_ARG);
    p.dtype = KVC_DTYPE_U8;
    cr_assert_eq(kvc_codec_encode_stream(ctx, &p, 256, src_read, &src, mem_write, &o), KVC_ERR_DTYPE);

    free(s.p);
    free(kv);
    kvc_context_destroy(ctx);
}

/* ---- chunk-parallel streams --------------------------------------------------------------------- */

static kvc_context_t *threads_context(int threads)
{
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS, .backend = "cpu",
                                .num_threads = threads };
    kvc_context_t *ctx = NULL;
    cr_assert_eq(kvc_context_create(&cp, &ctx), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_context_num_threads(ctx), threads, "the context got fewer threads than asked");
    return ctx;
}

/* The per-chunk containers of tokens [0, T) in chunks of ct, back to back, with their sizes. */
static membuf_t reference_stream(kvc_context_t *ctx, const uint16_t *kv, size_t nl, size_t Tall, size_t T, size_t C,
                                 size_t nh, size_t hs, size_t ct, size_t *sizes)
{
    membuf_t ref = { 0 };
    uint16_t *chunk = malloc(2 * nl * ct * C * 2);
    for (size_t t0 = 0, i = 0; t0 < T; t0 += ct, i++) {
        const size_t n = T - t0 < ct ? T - t0 : ct;
        slice_tokens(kv, 2 * nl, Tall, C, t0, n, chunk);
        kvc_codec_params_t cp = params_for(KVC_DTYPE_F16, nl, n, nh, hs);
        uint8_t *buf;
        size_t len;
        cr_assert_eq(kvc_codec_encode(ctx, &cp, chunk, &buf, &len), KVC_OK);
        mem_write(&ref, buf, len);
        sizes[i] = len;
        kvc_codec_free(buf);
    }
    free(chunk);
    return ref;
}

/* A write callback that checks each container against the reference at its offset: fails at the
 * first write out of order. fail_at: the write (1-based) that returns KVC_ERR_IO. */
typedef struct {
    const membuf_t *ref;
    size_t pos, writes, fail_at;
} ordered_sink_t;

static kvc_status_t ordered_write(void *user, const void *buf, size_t len)
{
    ordered_sink_t *o = user;
    if (++o->writes == o->fail_at) return KVC_ERR_IO;
    cr_assert_leq(o->pos + len, o->ref->len, "write %zu runs past the reference stream", o->writes);
    cr_assert(memcmp(buf, o->ref->p + o->pos, len) == 0, "write %zu at offset %zu is not the chunk due there", o->writes, o->pos);
    o->pos += len;
    return KVC_OK;
}

static size_t par_progress[16], par_progress_n;
static void record_progress(void *user, size_t done, size_t total)
{
    (void)user;
    cr_assert_eq(total, 460);
    cr_assert_lt(par_progress_n, 16);
    par_progress[par_progress_n++] = done;
}

static void record_progress_any(void *user, size_t done, size_t total)
{
    (void)user, (void)done, (void)total;
    cr_assert_lt(par_progress_n, 16);
    par_progress_n++;
}

/* T = 460 in chunks of 100 (4 x 100 + 60) with 1, 2 and 3 chunks in
 * flight: each write is the chunk due at that offset, progress comes in order, the decode writes
 * chunks in token order and equals the per-chunk decodes. */
Test(codec_stream, chunk_parallel_is_ordered_and_byte_identical)
{
#ifdef __SANITIZE_THREAD__
    cr_skip_test("libgomp is not built with TSan: OpenMP regions of several threads report false races (docs/HARDENING.md)");
#endif
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    const size_t L = 2 * nl, C = nh * hs, T = 460, CT = 100;
    size_t sizes[5];
    kvc_context_t *ctx1 = threads_context(1);
    membuf_t ref = reference_stream(ctx1, kv, nl, t, T, C, nh, hs, CT, sizes);
    uint16_t *ref_dec = malloc(L * T * C * 2);
    {
        membuf_t m = { ref.p, ref.len, ref.len, 0, 0 };
        stream_dst_t d = { ref_dec, L, T, C, 0, 0 };
        cr_assert_eq(kvc_codec_decode_stream(ctx1, mem_read, &m, dst_write, &d, NULL), KVC_OK);
    }
    for (int k = 1; k <= 3; k++) {
        kvc_context_t *ctx = threads_context(k);
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, T, nh, hs);
        p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
        p.progress = record_progress;
        par_progress_n = 0;
        stream_src_t src = { kv, L, t, C, 0, 0 };
        ordered_sink_t o = { &ref, 0, 0, 0 };
        cr_assert_eq(kvc_codec_encode_stream(ctx, &p, CT, src_read, &src, ordered_write, &o), KVC_OK, "K=%d: %s", k, kvc_last_error());
        cr_assert_eq(o.pos, ref.len, "K=%d", k);
        cr_assert_eq(o.writes, 5);
        cr_assert_eq(src.reads, 5);
        cr_assert_eq(par_progress_n, 5);
        for (size_t i = 0; i < 5; i++) cr_assert_eq(par_progress[i], i < 4 ? (i + 1) * CT : T, "K=%d progress %zu", k, i);

        membuf_t m = { ref.p, ref.len, ref.len, 0, 777 }; /* short reads */
        stream_dst_t d = { calloc(L * T * C, 2), L, T, C, 0, 0 };
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_decode_stream(ctx, mem_read, &m, dst_write, &d, &info), KVC_OK, "K=%d: %s", k, kvc_last_error());
        cr_assert_eq(d.chunks, 5);
        cr_assert_eq(info.num_tokens, T);
        cr_assert_eq(info.container_bytes, ref.len);
        cr_assert(memcmp(d.out, ref_dec, L * T * C * 2) == 0, "K=%d: decode differs", k);
        free(d.out);
        kvc_context_destroy(ctx);
    }
    free(ref_dec);
    free(ref.p);
    free(kv);
    kvc_context_destroy(ctx1);
}

/* Five chunks, 1 to 3 in flight: a read failing at chunk 2 returns its exact status with chunks 0
 * and 1 written and nothing after; so do a failing write, and a damaged container 2 on decode. */
Test(codec_stream, chunk_parallel_first_error_wins)
{
#ifdef __SANITIZE_THREAD__
    cr_skip_test("libgomp is not built with TSan: OpenMP regions of several threads report false races (docs/HARDENING.md)");
#endif
    size_t nl, t, nh, hs;
    uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
    const size_t L = 2 * nl, C = nh * hs, T = 500, CT = 100;
    size_t sizes[5];
    kvc_context_t *ctx1 = threads_context(1);
    membuf_t ref = reference_stream(ctx1, kv, nl, t, T, C, nh, hs, CT, sizes);
    for (int k = 1; k <= 3; k++) {
        kvc_context_t *ctx = threads_context(k);
        kvc_codec_params_t p = params_for(KVC_DTYPE_F16, nl, T, nh, hs);
        p.field_mask |= KVC_CODEC_PARAM_PROGRESS;
        p.progress = record_progress_any;
        par_progress_n = 0;
        stream_src_t src = { kv, L, t, C, 0, 3 }; /* the third read: chunk 2 */
        ordered_sink_t o = { &ref, 0, 0, 0 };
        cr_assert_eq(kvc_codec_encode_stream(ctx, &p, CT, src_read, &src, ordered_write, &o), KVC_ERR_IO, "K=%d", k);
        cr_assert_eq(src.reads, 3, "K=%d: no read after the failing one", k);
        cr_assert_eq(o.writes, 2, "K=%d", k);
        cr_assert_eq(o.pos, sizes[0] + sizes[1], "K=%d", k);
        cr_assert_eq(par_progress_n, 2, "K=%d", k);

        src.reads = src.fail_at = 0;
        ordered_sink_t w = { &ref, 0, 0, 2 }; /* the second write fails */
        cr_assert_eq(kvc_codec_encode_stream(ctx, &p, CT, src_read, &src, ordered_write, &w), KVC_ERR_IO, "K=%d", k);
        cr_assert_eq(w.writes, 2, "K=%d: no write after the failing one", k);
        cr_assert_eq(w.pos, sizes[0], "K=%d", k);

        uint8_t *bad = malloc(ref.len);
        memcpy(bad, ref.p, ref.len);
        bad[sizes[0] + sizes[1] + 100] ^= 0x10; /* a section of container 2 */
        membuf_t m = { bad, ref.len, ref.len, 0, 0 };
        stream_dst_t d = { calloc(L * T * C, 2), L, T, C, 0, 0 };
        cr_assert_eq(kvc_codec_decode_stream(ctx, mem_read, &m, dst_write, &d, NULL), KVC_ERR_CORRUPT, "K=%d", k);
        cr_assert_eq(d.chunks, 2, "K=%d: chunks 0 and 1 written, nothing after", k);
        free(d.out);
        free(bad);
        kvc_context_destroy(ctx);
    }
    free(ref.p);
    free(kv);
    kvc_context_destroy(ctx1);
}

/* ---- the container's bit reader and Rice codes (core/bitio.h): the one-load path for fields
 * that have 8 bytes left behind them and the byte loop for the rest, against a bit-at-a-time
 * oracle, at every bit phase, with escapes, and on cut buffers (ASan: nothing read past them). */

static uint64_t oracle_bits(const uint8_t *buf, size_t pos, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++, pos++) v = v << 1 | (uint64_t)(buf[pos >> 3] >> (7 - (pos & 7)) & 1);
    return v;
}

/* The container's checksum (core/checksum.h: libdeflate's CRC-32 where configure found it) is
 * zlib's crc32, the one docs/FORMAT.md names: every length 0-300 and powers of two to 1 MiB,
 * at 8 alignments, and checksums of pieces joined equal the whole's. */
Test(container, checksum_is_zlibs_crc32)
{
    enum { N = (1 << 20) + 64 };
    uint8_t *buf = malloc(N);
    uint64_t seed = 5;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(seed >> 56);
    }
    for (size_t off = 0; off < 8; off++) {
        for (size_t n = 0; n <= 300; n++)
            cr_assert_eq(kvc_crc32(buf + off, n), (uint32_t)crc32(0, buf + off, (uInt)n), "offset %zu length %zu", off, n);
        for (size_t n = 512; n <= (1u << 20); n *= 2) {
            const uint32_t whole = (uint32_t)crc32(0, buf + off, (uInt)n);
            cr_assert_eq(kvc_crc32(buf + off, n), whole, "offset %zu length %zu", off, n);
            const size_t a = n / 3 + off;
            cr_assert_eq(kvc_crc32_combine(kvc_crc32(buf + off, a), kvc_crc32(buf + off + a, n - a), n - a), whole,
                         "offset %zu length %zu split at %zu", off, n, a);
        }
    }
    free(buf);
}

Test(container, bit_reader_and_rice_codes_round_trip)
{
    enum { N = 4000 };
    static uint64_t val[N];
    static unsigned kind[N], width[N]; /* kind 0: raw field of width bits; 1: Rice with k = width */
    static size_t at[N];
    uint64_t seed = 7;
#define NEXT() (seed = seed * 6364136223846793005ull + 1442695040888963407ull, seed >> 11)
    kvc_bitwriter_t w = { NULL, 0, 0 };
    uint8_t *buf = NULL;
    for (int pass = 0; pass < 2; pass++) { /* sizing, then writing */
        if (pass) {
            buf = calloc((w.bits + 7) / 8, 1);
            w = (kvc_bitwriter_t){ buf, (w.bits + 7) / 8, 0 };
        }
        seed = 7;
        for (int i = 0; i < N; i++) {
            kind[i] = NEXT() % 2;
            at[i] = w.bits;
            if (!kind[i]) {
                width[i] = 1 + (unsigned)(NEXT() % 64);
                val[i] = NEXT() & (width[i] == 64 ? ~0ull : (1ull << width[i]) - 1);
                kvc_bw_put(&w, val[i], width[i]);
            } else {
                width[i] = (unsigned)(NEXT() % 32);
                const unsigned q = (unsigned)(NEXT() % 30); /* >= 24: the escape */
                val[i] = (uint32_t)((uint64_t)q << width[i] | (NEXT() & ((1ull << width[i]) - 1)));
                if (NEXT() % 8 == 0) val[i] = (uint32_t)NEXT();
                kvc_rice_put(&w, (uint32_t)val[i], width[i]);
            }
        }
    }
    const size_t bytes = (w.bits + 7) / 8;
    for (int i = 0; i < N; i++) /* what was written is what the fields say */
        if (!kind[i]) cr_assert_eq(oracle_bits(buf, at[i], width[i]), val[i], "field %d", i);
    /* The whole buffer, then cuts of it (exact-size copies): every field that fits reads back. */
    for (size_t cut = bytes; cut + 40 >= bytes && cut > 0; cut--) {
        uint8_t *copy = malloc(cut);
        memcpy(copy, buf, cut);
        kvc_bitreader_t r = { copy, cut, 0, 0 };
        int i = 0;
        for (; i < N; i++) {
            cr_assert_eq(r.pos, at[i], "cut %zu field %d: at bit %zu, written at %zu", cut, i, r.pos, at[i]);
            const uint64_t got = kind[i] ? kvc_rice_get(&r, width[i]) : kvc_br_get(&r, width[i]);
            if (r.overrun) break;
            cr_assert_eq(got, val[i], "cut %zu field %d (%s, %u): %llu, written %llu", cut, i, kind[i] ? "rice" : "raw", width[i],
                         (unsigned long long)got, (unsigned long long)val[i]);
        }
        cr_assert_eq(i == N, cut == bytes, "cut %zu of %zu: %d fields read", cut, bytes, i);
        if (i < N) { /* only a field that does not fit in the cut overruns */
            const size_t end = i + 1 < N ? at[i + 1] : w.bits;
            cr_assert_gt(end, 8 * cut, "cut %zu: field %d (bits %zu..%zu) overran", cut, i, at[i], end);
        }
        free(copy);
    }
    free(buf);
#undef NEXT
}

/* kvc_rice_get_run and kvc_rice_put_run (the container's CDF rows: a run of codes with one k after a few raw fields):
 * runs of 0-40 codes, k 0-31, escapes and long prefixes among short codes, behind raw fields of
 * 0-12 bits so every bit phase occurs, against the written values, their sum and the position
 * after each run; on cut buffers every run that fits reads back and the first that does not sets
 * overrun. */
Test(container, rice_runs_read_like_single_codes)
{
    enum { RUNS = 700, MAXN = 40 };
    static uint32_t val[RUNS][MAXN], got[MAXN];
    static unsigned k_of[RUNS], n_of[RUNS], raw_w[RUNS];
    static uint64_t raw[RUNS];
    static size_t end_at[RUNS];
    uint64_t seed = 99;
#define NEXT() (seed = seed * 6364136223846793005ull + 1442695040888963407ull, seed >> 11)
    kvc_bitwriter_t w = { NULL, 0, 0 };
    uint8_t *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            buf = calloc((w.bits + 7) / 8, 1);
            w = (kvc_bitwriter_t){ buf, (w.bits + 7) / 8, 0 };
        }
        seed = 99;
        for (int r = 0; r < RUNS; r++) {
            raw_w[r] = (unsigned)(NEXT() % 13);
            raw[r] = NEXT() & ((1ull << raw_w[r]) - 1);
            kvc_bw_put(&w, raw[r], raw_w[r]);
            k_of[r] = (unsigned)(NEXT() % 32);
            n_of[r] = (unsigned)(NEXT() % (MAXN + 1));
            for (unsigned i = 0; i < n_of[r]; i++) {
                const unsigned kind = (unsigned)(NEXT() % 16);
                const unsigned q = kind == 0 ? 20 + (unsigned)(NEXT() % 10) : kind == 1 ? (unsigned)(NEXT() % 24) : (unsigned)(NEXT() % 3);
                uint32_t v = (uint32_t)((uint64_t)q << k_of[r] | (NEXT() & ((1ull << k_of[r]) - 1)));
                if (kind == 2) v = (uint32_t)NEXT();
                val[r][i] = v;
                kvc_rice_put(&w, v, k_of[r]);
            }
            end_at[r] = w.bits;
        }
    }
    const size_t bytes = (w.bits + 7) / 8;
    /* kvc_rice_put_run writes the same bits as the codes one by one: sizing, a full buffer (over
     * 0xA5 bytes: the bits it does not write are kept, as kvc_bw_put keeps them), and buffers cut
     * short (bits past cap counted, not written) */
    for (size_t cap = bytes; cap + 24 >= bytes && cap > 0; cap -= cap == bytes ? 1 : 7) {
        uint8_t *one = malloc(bytes), *run = malloc(bytes);
        memset(one, 0xA5, bytes);
        memset(run, 0xA5, bytes);
        kvc_bitwriter_t w1 = { one, cap, 0 }, w2 = { run, cap, 0 }, w0 = { NULL, 0, 0 };
        for (int r = 0; r < RUNS; r++) {
            kvc_bw_put(&w1, raw[r], raw_w[r]);
            kvc_bw_put(&w2, raw[r], raw_w[r]);
            kvc_bw_put(&w0, raw[r], raw_w[r]);
            for (unsigned i = 0; i < n_of[r]; i++) kvc_rice_put(&w1, val[r][i], k_of[r]);
            kvc_rice_put_run(&w2, val[r], n_of[r], k_of[r]);
            kvc_rice_put_run(&w0, val[r], n_of[r], k_of[r]);
            cr_assert_eq(w2.bits, w1.bits, "cap %zu run %d: %zu bits, one by one %zu", cap, r, w2.bits, w1.bits);
            cr_assert_eq(w0.bits, w1.bits, "sizing, run %d", r);
            const size_t upto = (w1.bits + 7) / 8 < cap ? (w1.bits + 7) / 8 : cap; /* the last byte's unwritten bits too */
            cr_assert(memcmp(run, one, upto) == 0, "cap %zu run %d: the bytes differ from the codes' one by one", cap, r);
        }
        cr_assert_eq(w1.bits, w.bits);
        for (size_t i = 0; i < bytes; i++) cr_assert_eq(run[i], one[i], "cap %zu byte %zu: 0x%02x, one by one 0x%02x", cap, i, run[i], one[i]);
        free(one);
        free(run);
    }
    for (size_t cut = bytes; cut + 48 >= bytes && cut > 0; cut--) {
        uint8_t *copy = malloc(cut);
        memcpy(copy, buf, cut);
        kvc_bitreader_t r = { copy, cut, 0, 0 };
        int run = 0;
        for (; run < RUNS; run++) {
            const uint64_t f = kvc_br_get(&r, raw_w[run]);
            const uint64_t sum = kvc_rice_get_run(&r, k_of[run], n_of[run], got);
            if (end_at[run] > 8 * cut) {
                cr_assert(r.overrun, "cut %zu: run %d ends at bit %zu past the cut, no overrun", cut, run, end_at[run]);
                break;
            }
            cr_assert(!r.overrun, "cut %zu run %d: overrun", cut, run);
            cr_assert_eq(f, raw[run], "cut %zu run %d: raw field", cut, run);
            uint64_t want = 0;
            for (unsigned i = 0; i < n_of[run]; i++) {
                cr_assert_eq(got[i], val[run][i], "cut %zu run %d (k %u) code %u: %u, written %u", cut, run, k_of[run], i, got[i],
                             val[run][i]);
                want += val[run][i];
            }
            cr_assert_eq(sum, want, "cut %zu run %d: sum", cut, run);
            cr_assert_eq(r.pos, end_at[run], "cut %zu run %d: at bit %zu, the run ends at %zu", cut, run, r.pos, end_at[run]);
        }
        cr_assert_eq(run == RUNS, cut == bytes, "cut %zu of %zu: %d runs read", cut, bytes, run);
        free(copy);
    }
    free(buf);
#undef NEXT
}

/* Real K/V and a synthetic chunk of 20 channels (a partial group), as rANS containers. */
static uint16_t *rans_input(int cs, kvc_codec_params_t *p, size_t *n)
{
    if (cs == 0) {
        size_t nl, t, nh, hs;
        uint16_t *kv = real_kv(&nl, &t, &nh, &hs);
        const size_t T = 100, C = nh * hs;
        uint16_t *x = malloc(2 * nl * T * C * 2);
        for (size_t pl = 0; pl < 2; pl++)
            for (size_t l = 0; l < nl; l++) memcpy(x + (pl * nl + l) * T * C, kv + ((pl * nl + l) * t) * C, T * C * 2);
        free(kv);
        *p = params_for(KVC_DTYPE_F16, nl, T, nh, hs);
        *n = 2 * nl * T * C;
        return x;
    }
    const size_t nl = 3, T = 70, nh = 5, hs = 4;
    *n = 2 * nl * T * nh * hs;
    uint16_t *x = malloc(*n * 2);
    synth(x, KVC_DTYPE_F16, *n, 12);
    *p = params_for(KVC_DTYPE_F16, nl, T, nh, hs);
    return x;
}

/* The rANS layouts of formats 1.2 (8-channel streams, flag bit 3 alone) and 1.3 (bits 3 and 4,
 * the counts without the index) came before any release: their headers are refused as a version
 * this kvcore does not read, by every reader, before anything else is looked at. */
Test(codec, pre_release_rans_formats_are_refused)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    for (int k = 0; k < 4; k++) {
        const int cs = k % 2, minor = 2 + k / 2;
        kvc_codec_params_t p;
        size_t n, len;
        uint16_t *x = rans_input(cs, &p, &n), *got = malloc(n * 2);
        p.field_mask |= KVC_CODEC_PARAM_WINDOW | KVC_CODEC_PARAM_CODER;
        p.window_tokens = 32;
        p.coder = KVC_CODER_RANS;
        uint8_t *buf = encode_ok(ctx, &p, x, &len);
        cr_assert_eq(buf[10], 4);
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, got, n * 2, NULL), KVC_OK, "%s", kvc_last_error());
        buf[10] = (uint8_t)minor;
        wr32(buf + 12, minor == 2 ? 8u : 8u | 16u);
        reseal(buf, 48);
        kvc_codec_info_t info;
        kvc_codec_layer_stats_t ls[16];
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_VERSION, "format 1.%d", minor);
        cr_assert(strstr(kvc_last_error(), "pre-release rANS layout"), "%s", kvc_last_error());
        cr_assert_eq(kvc_codec_decode(ctx, buf, len, got, n * 2, NULL), KVC_ERR_VERSION, "format 1.%d", minor);
        cr_assert_eq(kvc_codec_layer_stats(buf, len, ls, 16), KVC_ERR_VERSION, "format 1.%d", minor);
        cr_assert_eq(try_export(buf, len), KVC_ERR_VERSION, "format 1.%d", minor);
        /* The probe says what the full parse says, on the whole container and on its header alone */
        kvc_container_info_t pi;
        cr_assert_eq(kvc_container_probe(buf, len, &pi), KVC_ERR_VERSION, "format 1.%d", minor);
        cr_assert(strstr(kvc_last_error(), "pre-release rANS layout"), "%s", kvc_last_error());
        cr_assert_eq(pi.kind, KVC_CONTAINER_INVALID);
        cr_assert_eq(pi.version_major, 1u);
        cr_assert_eq(pi.version_minor, (unsigned)minor);
        cr_assert_eq(kvc_container_probe(buf, KVC_CONTAINER_HEADER_BYTES, &pi), KVC_ERR_VERSION, "format 1.%d", minor);
        kvc_codec_free(buf);
        free(x);
        free(got);
    }
    kvc_context_destroy(ctx);
}
