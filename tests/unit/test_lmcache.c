/* SPDX-License-Identifier: BSD-3-Clause */
/* LMCache interchange (kvc_codec_import_lmcache / kvc_codec_export_lmcache): LMCache's golden
 * coder output imports and exports unchanged; an LMCache-style object built step by step (its
 * pipeline, docs/LMCACHE.md: quantise, whole-chunk CDF, per-window coding) imports and decodes to the
 * oracle's dequantisation; kvcore containers survive export + import byte for byte; every
 * validation error has its exact status. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>
#include <zlib.h>

#include "npy_load.h"
#include "ref/cachegen_ref.h"
#include "test_util.h"

/* One golden case as a single-window, one-plane (MLA-shaped) LMCache object. */
typedef struct {
    test_npy_t sym, cdf, len, packed;
    uint16_t *maxima;
    kvc_lmcache_window_t win;
    kvc_lmcache_chunk_t chunk;
    uint32_t bins[8];
} golden_t;

static void golden_load(golden_t *g, const char *name)
{
    char path[256];
    const char *parts[] = { "symbols", "cdf", "output_lengths", "packed_bytes" };
    test_npy_t *dst[] = { &g->sym, &g->cdf, &g->len, &g->packed };
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "golden/%s_%s.npy", name, parts[i]);
        *dst[i] = test_npy_load(kvc_test_data(path));
    }
    const size_t L = g->sym.shape[0], T = g->sym.shape[1], C = g->sym.shape[2];
    cr_assert_leq(L, 8);
    g->maxima = malloc(L * T * 2);
    for (size_t i = 0; i < L * T; i++) g->maxima[i] = ref_f32_to_f16(0.25f + (float)(i % 97) / 16.0f);
    for (size_t l = 0; l < L; l++) g->bins[l] = (uint32_t)g->cdf.shape[2] - 1;
    g->win = (kvc_lmcache_window_t){ .bytes = g->packed.data, .nbytes = g->packed.count, .lengths = g->len.data, .num_tokens = T };
    g->chunk = (kvc_lmcache_chunk_t){ .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_MLA, .num_layers = L, .num_tokens = T,
                                      .num_heads = 1, .head_size = C, .cdf_bins = (uint32_t)g->cdf.shape[2] - 1,
                                      .cdf = g->cdf.data, .max_key = g->maxima, .bins = g->bins, .num_windows = 1,
                                      .windows = &g->win };
}

static void golden_free(golden_t *g)
{
    test_npy_free(&g->sym);
    test_npy_free(&g->cdf);
    test_npy_free(&g->len);
    test_npy_free(&g->packed);
    free(g->maxima);
}

Test(lmcache, golden_objects_import_and_export_unchanged)
{
    const char *cases[] = { "coder0_nb16", "coder0_nb32", "coder1_nb16", "coder1_nb32" };
    for (int ci = 0; ci < 4; ci++) {
        golden_t g;
        golden_load(&g, cases[ci]);
        const size_t L = g.sym.shape[0], T = g.sym.shape[1], C = g.sym.shape[2], B = g.chunk.cdf_bins;
        uint8_t *buf;
        size_t len;
        cr_assert_eq(kvc_codec_import_lmcache(&g.chunk, &buf, &len), KVC_OK, "%s: %s", cases[ci], kvc_last_error());
        kvc_codec_info_t info;
        cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
        /* LMCache's CDF is its normalisation of the counts: stored as counts, not verbatim. */
        cr_assert_eq(info.raw_cdf, 0, "%s: the CDF should have been turned back into counts", cases[ci]);
        cr_assert_eq(info.streams_bytes, g.packed.count);
        cr_assert_lt(info.container_bytes, info.lmcache_bytes, "%s: %zu bytes vs LMCache's %zu", cases[ci],
                     info.container_bytes, info.lmcache_bytes);

        /* Per-layer bits/symbol agree with the golden streams. */
        kvc_codec_layer_stats_t st[8];
        cr_assert_eq(kvc_codec_layer_stats(buf, len, st, 8), KVC_OK);
        for (size_t l = 0; l < L; l++) {
            size_t bytes = 0;
            for (size_t c = 0; c < C; c++) bytes += (size_t)((const int32_t *)g.len.data)[l * C + c];
            cr_assert_float_eq(st[l].bits_per_symbol, 8.0 * (double)bytes / (double)(T * C), 1e-9);
        }

        kvc_lmcache_chunk_t ex;
        void *storage = NULL;
        if (T > 256) { /* a coder-level vector: LMCache's pipeline never codes more than 256 tokens per window */
            cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_ERR_UNSUPPORTED);
            cr_assert_null(storage);
            kvc_codec_free(buf);
            golden_free(&g);
            continue;
        }
        cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(ex.num_windows, 1);
        cr_assert_eq(ex.layout, KVC_CODEC_MLA);
        cr_assert_eq(ex.num_tokens, T);
        cr_assert_eq(ex.head_size, C);
        cr_assert_eq(ex.cdf_bins, B);
        cr_assert(memcmp(ex.cdf, g.cdf.data, L * C * (B + 1) * 2) == 0, "%s: exported CDF differs", cases[ci]);
        cr_assert(memcmp(ex.windows[0].lengths, g.len.data, L * C * 4) == 0, "%s: exported lengths differ", cases[ci]);
        cr_assert_eq(ex.windows[0].nbytes, g.packed.count);
        cr_assert(memcmp(ex.windows[0].bytes, g.packed.data, g.packed.count) == 0, "%s: exported bytes differ", cases[ci]);
        cr_assert(memcmp(ex.max_key, g.maxima, L * T * 2) == 0);
        cr_assert_null(ex.max_value);
        for (size_t l = 0; l < L; l++) cr_assert_eq(ex.bins[l], g.bins[l]);
        kvc_codec_free(storage);
        kvc_codec_free(buf);
        golden_free(&g);
    }
}

/* LMCache's pipeline (docs/LMCACHE.md) on real K/V, step by step with kvcore's ops, which the coder
 * tests prove byte-identical to LMCache's: quantise, CDF over the whole chunk, code each window of
 * 256 tokens. The resulting arrays are what LMCache would hold. */
typedef struct {
    size_t nl, T, C, nwin;
    uint16_t *kv;
    uint8_t *sym;
    float *scales;
    uint16_t *maxk, *maxv, *cdf;
    uint32_t bins[16];
    uint8_t *bytes[4];
    int32_t *lens[4];
    kvc_lmcache_window_t win[4];
    kvc_lmcache_chunk_t chunk;
} lm_object_t;

static void lm_build(kvc_context_t *ctx, lm_object_t *o, const uint16_t *custom_cdf)
{
    test_npy_t k = test_npy_load(kvc_test_data("kvdata/story_prompt_K.npy"));
    test_npy_t v = test_npy_load(kvc_test_data("kvdata/story_prompt_V.npy"));
    o->nl = k.shape[0];
    o->T = k.shape[1];
    o->C = k.shape[2] * k.shape[3];
    cr_assert_leq(o->nl, 8);
    const size_t L = 2 * o->nl, T = o->T, C = o->C, B = 32, W = 256;
    o->kv = malloc(2 * k.count * 2);
    memcpy(o->kv, k.data, k.count * 2);
    memcpy(o->kv + k.count, v.data, v.count * 2);
    kvc_cg_default_bins(o->nl, o->bins);
    o->sym = malloc(L * T * C);
    o->scales = malloc(L * T * sizeof(float));
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F16, .values = o->kv, .symbols = o->sym, .scales = o->scales, .bins = o->bins,
                           .layers = L, .tokens = T, .channels = C };
    cr_assert_eq(kvc_quantise(ctx, &q), KVC_OK);
    o->maxk = malloc(o->nl * T * 2);
    o->maxv = malloc(o->nl * T * 2);
    for (size_t i = 0; i < o->nl * T; i++) {
        o->maxk[i] = ref_f32_to_f16(o->scales[i]);
        o->maxv[i] = ref_f32_to_f16(o->scales[o->nl * T + i]);
    }
    o->cdf = malloc(L * C * (B + 1) * 2);
    if (custom_cdf) memcpy(o->cdf, custom_cdf, L * C * (B + 1) * 2);
    else ref_cg_cdf(o->sym, L, T, C, (unsigned)B, o->cdf);
    o->nwin = (T + W - 1) / W;
    cr_assert_leq(o->nwin, 4);
    uint8_t *win = malloc(L * W * C);
    const size_t cap = kvc_cg_encode_bound(W);
    uint8_t *streams = malloc(L * C * cap);
    for (size_t w = 0; w < o->nwin; w++) {
        const size_t t0 = w * W, tw = T - t0 < W ? T - t0 : W;
        for (size_t l = 0; l < L; l++) memcpy(win + l * tw * C, o->sym + (l * T + t0) * C, tw * C);
        o->lens[w] = malloc(L * C * sizeof(int32_t));
        kvc_cg_encode_params_t e = { .cdf = o->cdf, .symbols = win, .streams = streams, .lengths = o->lens[w], .layers = L,
                                .tokens = tw, .channels = C, .capacity = cap, .num_bins = (unsigned)B };
        cr_assert_eq(kvc_cg_encode(ctx, &e), KVC_OK);
        size_t n = 0;
        for (size_t s = 0; s < L * C; s++) n += (size_t)o->lens[w][s];
        o->bytes[w] = malloc(n + 1);
        size_t off = 0;
        for (size_t s = 0; s < L * C; s++) {
            memcpy(o->bytes[w] + off, streams + s * cap, (size_t)o->lens[w][s]);
            off += (size_t)o->lens[w][s];
        }
        o->win[w] = (kvc_lmcache_window_t){ .bytes = o->bytes[w], .nbytes = n, .lengths = o->lens[w], .num_tokens = tw };
    }
    free(win);
    free(streams);
    test_npy_free(&k);
    test_npy_free(&v);
    o->chunk = (kvc_lmcache_chunk_t){ .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = o->nl,
                                      .num_tokens = T, .num_heads = k.shape[2], .head_size = k.shape[3], .cdf_bins = B,
                                      .cdf = o->cdf, .max_key = o->maxk, .max_value = o->maxv, .bins = NULL,
                                      .num_windows = o->nwin, .windows = o->win };
}

static void lm_free(lm_object_t *o)
{
    for (size_t w = 0; w < o->nwin; w++) {
        free(o->bytes[w]);
        free(o->lens[w]);
    }
    free(o->kv);
    free(o->sym);
    free(o->scales);
    free(o->maxk);
    free(o->maxv);
    free(o->cdf);
}

/* The oracle's dequantisation, docs/LMCACHE.md: x = (q - M) / M * max, rounded to fp16 (within one fp16
 * rounding of kvcore's fp32 evaluation order). */
static void assert_dequantised(const lm_object_t *o, const uint16_t *dec)
{
    const size_t L = 2 * o->nl;
    for (size_t l = 0; l < L; l++) {
        const double M = o->bins[l] / 2 - 1;
        for (size_t t = 0; t < o->T; t++) {
            const double mx = ref_f16_to_f32(l < o->nl ? o->maxk[l * o->T + t] : o->maxv[(l - o->nl) * o->T + t]);
            for (size_t c = 0; c < o->C; c++) {
                const size_t i = (l * o->T + t) * o->C + c;
                const double want = ((double)o->sym[i] - M) / M * mx, got = ref_f16_to_f32(dec[i]);
                cr_assert_leq(fabs(got - want), fabs(want) / 1024 + 1e-7, "layer %zu token %zu channel %zu: %g, want %g", l, t,
                              c, got, want);
            }
        }
    }
}

Test(lmcache, lmcache_object_imports_and_decodes)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    lm_object_t o;
    lm_build(ctx, &o, NULL);
    cr_assert_gt(o.nwin, 1, "the real sequence should span more than one window");
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_import_lmcache(&o.chunk, &buf, &len), KVC_OK, "%s", kvc_last_error());
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
    cr_assert_eq(info.raw_cdf, 0);
    cr_assert_eq(info.num_windows, o.nwin);
    uint16_t *dec = malloc(info.original_bytes);
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_OK, "%s", kvc_last_error());
    assert_dequantised(&o, dec);

    /* kvcore's own encoder, given the same chunk, writes exactly the imported container. */
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = o.nl, .num_tokens = o.T,
                             .num_heads = o.chunk.num_heads, .head_size = o.chunk.head_size };
    uint8_t *own;
    size_t own_len;
    cr_assert_eq(kvc_codec_encode(ctx, &p, o.kv, &own, &own_len), KVC_OK);
    cr_assert_eq(own_len, len);
    cr_assert(memcmp(own, buf, len) == 0, "imported LMCache object differs from kvcore's own container");

    /* And exporting it gives LMCache's arrays back. */
    kvc_lmcache_chunk_t ex;
    void *storage;
    cr_assert_eq(kvc_codec_export_lmcache(own, own_len, &ex, &storage), KVC_OK);
    cr_assert_eq(ex.num_windows, o.nwin);
    cr_assert(memcmp(ex.cdf, o.cdf, 2 * o.nl * o.C * 33 * 2) == 0);
    cr_assert(memcmp(ex.max_key, o.maxk, o.nl * o.T * 2) == 0);
    cr_assert(memcmp(ex.max_value, o.maxv, o.nl * o.T * 2) == 0);
    for (size_t w = 0; w < o.nwin; w++) {
        cr_assert_eq(ex.windows[w].num_tokens, o.win[w].num_tokens);
        cr_assert_eq(ex.windows[w].nbytes, o.win[w].nbytes);
        cr_assert(memcmp(ex.windows[w].bytes, o.win[w].bytes, o.win[w].nbytes) == 0);
        cr_assert(memcmp(ex.windows[w].lengths, o.win[w].lengths, 2 * o.nl * o.C * 4) == 0);
    }
    /* Re-importing the export is the identity on the container bytes. */
    uint8_t *again;
    size_t again_len;
    cr_assert_eq(kvc_codec_import_lmcache(&ex, &again, &again_len), KVC_OK);
    cr_assert(again_len == own_len && memcmp(again, own, own_len) == 0);
    kvc_codec_free(again);
    kvc_codec_free(storage);
    kvc_codec_free(own);
    kvc_codec_free(buf);
    free(dec);
    lm_free(&o);
    kvc_context_destroy(ctx);
}

Test(lmcache, a_cdf_not_made_from_counts_is_kept_verbatim)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    /* A valid, strictly increasing table that no count vector over 512 tokens normalises to. */
    const size_t L = 10, C = 32, B = 32;
    uint16_t *cdf = malloc(L * C * (B + 1) * 2);
    for (size_t s = 0; s < L * C; s++)
        for (size_t i = 0; i <= B; i++) cdf[s * (B + 1) + i] = (uint16_t)(i == B ? 65535 : i * 2047 + (s % 5));
    for (size_t s = 0; s < L * C; s++) cdf[s * (B + 1)] = 0;
    lm_object_t o;
    lm_build(ctx, &o, cdf);
    cr_assert_eq(2 * o.nl * o.C, L * C, "the real data's shape changed");
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_import_lmcache(&o.chunk, &buf, &len), KVC_OK, "%s", kvc_last_error());
    kvc_codec_info_t info;
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_OK);
    cr_assert_eq(info.raw_cdf, 1);
    kvc_container_info_t pi; /* the probe tells an LMCache import from the header */
    cr_assert_eq(kvc_container_probe(buf, len, &pi), KVC_OK);
    cr_assert_eq(pi.raw_cdf, 1);
    cr_assert_eq(pi.flags & 1u, 1u);
    uint16_t *dec = malloc(info.original_bytes);
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_OK, "%s", kvc_last_error());
    assert_dequantised(&o, dec);
    kvc_lmcache_chunk_t ex;
    void *storage;
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_OK);
    cr_assert(memcmp(ex.cdf, cdf, L * C * (B + 1) * 2) == 0);
    /* A stored table that is not strictly increasing (resealed, so it reaches the check): decode
     * refuses it, and so does inspect, which runs the same check. */
    size_t pos = 48;
    for (int sec = 0; sec < 2; sec++) pos += 16 + (size_t)(buf[pos + 8] | buf[pos + 9] << 8 | buf[pos + 10] << 16);
    const size_t n = (size_t)(buf[pos + 8] | buf[pos + 9] << 8 | buf[pos + 10] << 16 | (uint32_t)buf[pos + 11] << 24);
    uint8_t *entry = buf + pos + 16 + (3 * (B + 1) + 5) * 2;
    memcpy(entry, entry - 2, 2); /* stream 3: cdf[5] = cdf[4] */
    const uint32_t crc = (uint32_t)crc32(0, buf + pos + 16, (uInt)n);
    for (int i = 0; i < 4; i++) buf[pos + 4 + i] = (uint8_t)(crc >> (8 * i));
    cr_assert_eq(kvc_codec_decode(ctx, buf, len, dec, info.original_bytes, NULL), KVC_ERR_CORRUPT);
    cr_assert_eq(kvc_codec_inspect(buf, len, &info), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "stream 3"), "%s", kvc_last_error());
    kvc_codec_free(storage);
    kvc_codec_free(buf);
    free(dec);
    free(cdf);
    lm_free(&o);
    kvc_context_destroy(ctx);
}

static kvc_status_t try_import(const kvc_lmcache_chunk_t *c)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    const kvc_status_t st = kvc_codec_import_lmcache(c, &buf, &len);
    if (st == KVC_OK) kvc_codec_free(buf);
    else cr_assert_null(buf, "a failed import must not hand out a buffer");
    return st;
}

Test(lmcache, import_errors)
{
    golden_t g;
    golden_load(&g, "coder0_nb32");
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_import_lmcache(NULL, &buf, &len), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_import_lmcache(&g.chunk, NULL, &len), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_import_lmcache(&g.chunk, &buf, NULL), KVC_ERR_INVALID_ARG);

    kvc_lmcache_chunk_t c = g.chunk;
    c.dtype = KVC_DTYPE_I32;
    cr_assert_eq(try_import(&c), KVC_ERR_DTYPE);
    c = g.chunk;
    c.layout = (kvc_codec_layout_t)7;
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    c = g.chunk;
    c.num_tokens = 0;
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    c = g.chunk;
    c.cdf = NULL;
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    c = g.chunk;
    c.layout = KVC_CODEC_KV_2LTD; /* needs max_value */
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    c = g.chunk;
    c.num_heads = 2;
    c.head_size /= 2;
    cr_assert_eq(try_import(&c), KVC_ERR_SHAPE, "MLA with two heads");
    c = g.chunk;
    c.cdf_bins = 65;
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    uint32_t bad_bins[8];
    memcpy(bad_bins, g.bins, sizeof(bad_bins));
    bad_bins[1] = 31; /* odd */
    c = g.chunk;
    c.bins = bad_bins;
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);
    bad_bins[1] = 34; /* above the CDF's width */
    cr_assert_eq(try_import(&c), KVC_ERR_INVALID_ARG);

    /* Window token counts must add up and be uniform. */
    kvc_lmcache_window_t w2[2] = { g.win, g.win };
    c = g.chunk;
    c.windows = w2;
    c.num_windows = 2;
    cr_assert_eq(try_import(&c), KVC_ERR_SHAPE, "512 tokens of windows for a 256-token chunk");
    w2[0].num_tokens = 100;
    w2[1].num_tokens = 156;
    cr_assert_eq(try_import(&c), KVC_ERR_SHAPE, "a last window longer than the first");

    /* Corrupt bytes. */
    const size_t L = g.sym.shape[0], C = g.sym.shape[2], B = g.chunk.cdf_bins;
    kvc_lmcache_window_t w = g.win;
    c = g.chunk;
    c.windows = &w;
    w.nbytes = g.win.nbytes - 1;
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "lengths that do not add up to the bytestream");
    int32_t *lens = malloc(L * C * 4);
    memcpy(lens, g.len.data, L * C * 4);
    lens[3] = -lens[3];
    w = g.win;
    w.lengths = lens;
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "a negative length");
    uint16_t *cdf = malloc(L * C * (B + 1) * 2);
    memcpy(cdf, g.cdf.data, L * C * (B + 1) * 2);
    c = g.chunk;
    c.cdf = cdf;
    cdf[5 * (B + 1) + 7] = cdf[5 * (B + 1) + 6];
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "a CDF row that is not strictly increasing");
    memcpy(cdf, g.cdf.data, L * C * (B + 1) * 2);
    cdf[0] = 1;
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "a CDF row that does not start at 0");
    uint16_t *mx = malloc(L * g.sym.shape[1] * 2);
    memcpy(mx, g.maxima, L * g.sym.shape[1] * 2);
    mx[9] = 0x7e00; /* NaN */
    c = g.chunk;
    c.max_key = mx;
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "a NaN maximum");
    mx[9] = 0xbc00; /* -1 */
    cr_assert_eq(try_import(&c), KVC_ERR_CORRUPT, "a negative maximum");
    free(mx);
    free(cdf);
    free(lens);
    golden_free(&g);
}

Test(lmcache, export_errors)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    golden_t g;
    golden_load(&g, "coder0_nb16");
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_import_lmcache(&g.chunk, &buf, &len), KVC_OK);
    kvc_lmcache_chunk_t ex;
    void *storage = NULL;
    cr_assert_eq(kvc_codec_export_lmcache(NULL, len, &ex, &storage), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, NULL, &storage), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_codec_export_lmcache(buf, len - 1, &ex, &storage), KVC_ERR_CORRUPT);
    buf[len / 2] ^= 0x40;
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_ERR_CORRUPT);
    cr_assert_null(storage);
    kvc_codec_free(buf);

    /* Windows longer than LMCache's 256 tokens cannot be handed to LMCache's decoder. */
    const size_t nl = 2, T = 600, C = 16;
    uint16_t *kv = malloc(2 * nl * T * C * 2);
    for (size_t i = 0; i < 2 * nl * T * C; i++) kv[i] = ref_f32_to_f16((float)((i * 2654435761u) % 1000) / 100.0f - 5.0f);
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = nl, .num_tokens = T, .num_heads = 2, .head_size = C / 2, .window_tokens = 512 };
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK);
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_ERR_UNSUPPORTED);
    cr_assert_null(storage);
    kvc_codec_free(buf);
    p.window_tokens = 200; /* shorter windows are fine */
    cr_assert_eq(kvc_codec_encode(ctx, &p, kv, &buf, &len), KVC_OK);
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &ex, &storage), KVC_OK);
    cr_assert_eq(ex.num_windows, 3);
    cr_assert_eq(ex.windows[2].num_tokens, 200);
    uint8_t *again;
    size_t again_len;
    cr_assert_eq(kvc_codec_import_lmcache(&ex, &again, &again_len), KVC_OK);
    cr_assert(again_len == len && memcmp(again, buf, len) == 0);
    kvc_codec_free(again);
    kvc_codec_free(storage);
    kvc_codec_free(buf);
    free(kv);
    golden_free(&g);
    kvc_context_destroy(ctx);
}

/* ---- a second decoder: LMCache's GPU decoding arithmetic, written here --------------------------
 * Not kvcore's decoder: one stream at a time as LMCache's csrc/ac_dec.cu kernel does it (16-bit CDF
 * precision, 32-bit low / high / value, the stream copied into a 256-byte slot padded with zeros,
 * bits read most significant first, lp = CDF entries per stream and max_sym = lp - 2, its binary
 * search with early exit on an equal entry), then LMCache's dequantisation (q - M) / M * max with
 * M = bins / 2 - 1 from the per-layer bins a CacheGenConfig would have to list. */
#define LMC_SLOT 256

static void lmc_decode_stream(const uint16_t *cdf, int lp, const uint8_t *bytes, int32_t length, size_t ntokens, uint8_t *out,
                              size_t stride)
{
    uint8_t slot[LMC_SLOT];
    for (int j = 0; j < LMC_SLOT; j++) slot[j] = j < length ? bytes[j] : 0;
    uint32_t low = 0, high = 0xFFFFFFFFu;
    uint32_t value = (uint32_t)slot[0] << 24 | (uint32_t)slot[1] << 16 | (uint32_t)slot[2] << 8 | slot[3];
    int off = 4, bit = 1;
    uint8_t byte = slot[off];
    const int max_sym = lp - 2;
    for (size_t i = 0; i < ntokens; i++) {
        const uint64_t span = (uint64_t)high - low + 1;
        const uint16_t count = (uint16_t)((((uint64_t)value - low + 1) * 0x10000u - 1) / span);
        uint16_t left = 0, right = (uint16_t)(max_sym + 1);
        int sym = -1;
        while (left + 1 < right) {
            const uint16_t m = (uint16_t)((left + right) / 2);
            if (cdf[m] < count) left = m;
            else if (cdf[m] > count) right = m;
            else { sym = m; break; }
        }
        if (sym < 0) sym = left;
        out[i * stride] = (uint8_t)sym;
        if (i + 1 == ntokens) break;
        const uint32_t c_low = cdf[sym], c_high = sym == max_sym ? 0x10000u : cdf[sym + 1];
        high = (uint32_t)((low - 1) + ((span * c_high) >> 16));
        low = (uint32_t)(low + ((span * c_low) >> 16));
        for (;;) {
            if (low >= 0x80000000u || high < 0x80000000u) {
                low <<= 1;
                high = high << 1 | 1;
            } else if (low >= 0x40000000u && high < 0xC0000000u) {
                low = (low << 1) & 0x7FFFFFFFu;
                high = high << 1 | 0x80000001u;
                value -= 0x40000000u;
            } else break;
            value = value << 1 | ((byte >> (8 - bit)) & 1u);
            if (++bit == 9) {
                bit = 1;
                off++;
                byte = off < LMC_SLOT ? slot[off] : 0;
            }
        }
    }
}

/* Encode a [2, NL, T, C] fp16 chunk with p, export it, decode every window's streams with the
 * decoder above: the symbols must be the quantiser's for the container's per-layer bins, and
 * LMCache's dequantisation with those bins must be within half a step of the input. Returns the
 * CDF entries per stream. */
static unsigned second_decoder_roundtrip(kvc_context_t *ctx, kvc_codec_params_t *p, const uint16_t *kv)
{
    const size_t NL = p->num_layers, T = p->num_tokens, C = p->num_heads * p->head_size, L = 2 * NL, S = L * C;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvc_codec_encode(ctx, p, kv, &buf, &len), KVC_OK, "%s", kvc_last_error());
    kvc_lmcache_chunk_t o;
    void *storage;
    cr_assert_eq(kvc_codec_export_lmcache(buf, len, &o, &storage), KVC_OK, "%s", kvc_last_error());
    const int lp = (int)o.cdf_bins + 1;
    cr_assert_leq(lp, 64, "LMCache's decoder takes at most 64 CDF entries");
    /* The encoder's symbols: the per-token quantiser with the container's bins. */
    uint8_t *want = malloc(L * T * C), *got = malloc(L * T * C);
    float *scales = malloc(L * T * sizeof(float));
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F16, .values = (void *)kv, .symbols = want, .scales = scales, .bins = o.bins,
                             .layers = L, .tokens = T, .channels = C };
    cr_assert_eq(kvc_quantise(ctx, &q), KVC_OK, "%s", kvc_last_error());
    size_t t0 = 0;
    for (size_t w = 0; w < o.num_windows; w++) {
        const kvc_lmcache_window_t *win = &o.windows[w];
        size_t at = 0;
        for (size_t s = 0; s < S; s++) {
            const size_t l = s / C, c = s % C;
            cr_assert_leq(win->lengths[s], LMC_SLOT);
            lmc_decode_stream(o.cdf + s * (size_t)lp, lp, win->bytes + at, win->lengths[s], win->num_tokens,
                              got + (l * T + t0) * C + c, C);
            at += (size_t)win->lengths[s];
        }
        cr_assert_eq(at, win->nbytes);
        t0 += win->num_tokens;
    }
    cr_assert_eq(t0, T);
    for (size_t i = 0; i < L * T * C; i++)
        cr_assert_eq(got[i], want[i], "symbol %zu (layer %zu): LMCache's arithmetic gives %u, the quantiser %u", i, i / (T * C),
                     got[i], want[i]);
    for (size_t l = 0; l < L; l++) {
        const double M = o.bins[l] / 2 - 1;
        const uint16_t *mx = l < NL ? (const uint16_t *)o.max_key : (const uint16_t *)o.max_value;
        for (size_t t = 0; t < T; t++) {
            const double scale = ref_f16_to_f32(mx[(l % NL) * T + t]);
            for (size_t c = 0; c < C; c++) {
                const size_t i = (l * T + t) * C + c;
                const double x = ref_f16_to_f32(kv[i]), xh = ((double)got[i] - M) / M * scale;
                cr_assert_leq(fabs(x - xh), scale / (2 * M) * 1.002 + 1e-3, "layer %zu bins %u: |%g - %g|", l, o.bins[l], x, xh);
            }
        }
    }
    free(want);
    free(got);
    free(scales);
    kvc_codec_free(storage);
    kvc_codec_free(buf);
    return (unsigned)lp;
}

Test(lmcache, second_decoder_reads_every_level_and_uneven_bins)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    const size_t T = 300, C = 16; /* two windows: 256 + 44 tokens */
    for (size_t NL = 5; NL <= 32; NL += 27) {
        uint16_t *kv = malloc(2 * NL * T * C * 2);
        uint64_t s = 0x1234 + NL;
        for (size_t i = 0; i < 2 * NL * T * C; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const double u = (double)(s >> 11) * 0x1.0p-53, g = (u - 0.5) * (i % 16 == 3 ? 8.0 : 1.0); /* one outlier channel */
            kv[i] = ref_f32_to_f16((float)(g * g * g * 4.0));
        }
        /* Every named level, two uneven fixed pairs (47- and 63-entry CDFs with K != V bins) and a
         * rate target (bins chosen per layer). */
        int saw47 = 0, saw63 = 0;
        for (int cfg = 0; cfg <= KVC_CODEC_LEVEL_MAX + 3; cfg++) {
            kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = NL, .num_tokens = T,
                                     .num_heads = 2, .head_size = C / 2 };
            uint32_t bins[64];
            if (cfg <= KVC_CODEC_LEVEL_MAX) cr_assert_eq(kvc_codec_level_params(cfg, &p, bins), KVC_OK);
            else if (cfg <= KVC_CODEC_LEVEL_MAX + 2) {
                const uint32_t k = cfg == KVC_CODEC_LEVEL_MAX + 1 ? 46 : 62, v = k == 46 ? 6 : 12;
                for (size_t l = 0; l < NL; l++) { bins[l] = k; bins[NL + l] = v; }
                p.bins = bins;
                p.field_mask = KVC_CODEC_PARAM_BINS;
            } else {
                p.field_mask = KVC_CODEC_PARAM_BITS;
                p.bits = 3.5;
            }
            const unsigned lp = second_decoder_roundtrip(ctx, &p, kv);
            saw47 |= lp == 47;
            saw63 |= lp == 63;
        }
        cr_assert(saw47 && saw63, "the cases must include 47- and 63-entry CDFs");
        free(kv);
    }
    kvc_context_destroy(ctx);
}
