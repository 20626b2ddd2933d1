/* SPDX-License-Identifier: BSD-3-Clause */
/* LMCache interchange: a CacheGen object of LMCache's (CDF table, per-window bytestreams and
 * lengths, per-token maxima) to and from a .kvc container. The coded streams are copied, never
 * re-coded, so both sides decode to the same symbols. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/cachegen.h>
#include <kvcore/codec.h>

#include "codec_internal.h"
#include "container.h"
#include "common/cdf.h"
#include "common/half.h"
#include "internal.h"

static size_t dtype_size(kvc_dtype_t d) { return d == KVC_DTYPE_F32 ? 4 : 2; }

static float load_scalar(const void *p, size_t i, kvc_dtype_t d)
{
    if (d == KVC_DTYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, 2);
    return d == KVC_DTYPE_F16 ? kvc_f16_to_f32(h) : kvc_bf16_to_f32(h);
}

/* Shapes, bins and windows of an LMCache object; fills bins (planes * NL entries). */
static kvc_status_t check_chunk(const kvc_lmcache_chunk_t *in, size_t *planes, uint32_t *bins)
{
    if (in->dtype != KVC_DTYPE_F16 && in->dtype != KVC_DTYPE_BF16 && in->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "lmcache import: dtype %s (only f16, bf16 and f32)", kvc_dtype_name(in->dtype));
    if (in->layout != KVC_CODEC_KV_2LTD && in->layout != KVC_CODEC_MLA)
        return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: layout %d is unknown", (int)in->layout);
    if (!in->num_layers || !in->num_tokens || !in->num_heads || !in->head_size || !in->num_windows)
        return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: layers, tokens, heads, head size and windows must be non-zero");
    if (!in->cdf || !in->max_key || !in->windows || (in->layout == KVC_CODEC_KV_2LTD && !in->max_value))
        return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: cdf, max_key, windows (and max_value for K/V) must not be NULL");
    if (in->layout == KVC_CODEC_MLA && in->num_heads != 1)
        return kvc_error(KVC_ERR_SHAPE, "lmcache import: MLA chunks have one latent head, not %zu", in->num_heads);
    if (in->num_layers > 4096 || in->num_tokens > UINT32_MAX || in->num_heads > (1u << 24) || in->head_size > (1u << 24) ||
        in->num_heads * in->head_size > (1u << 24))
        return kvc_error(KVC_ERR_SHAPE, "lmcache import: dimensions too large (layers <= 4096, channels <= 2^24)");
    if (in->cdf_bins < 4 || in->cdf_bins > KVC_CONTAINER_MAX_BINS)
        return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: cdf_bins %u outside [4, %d]", in->cdf_bins, KVC_CONTAINER_MAX_BINS);
    *planes = in->layout == KVC_CODEC_KV_2LTD ? 2 : 1;
    const size_t L = *planes * in->num_layers;
    if (in->bins) memcpy(bins, in->bins, L * sizeof(*bins));
    else kvc_cg_default_bins(in->num_layers, bins); /* MLA: the key pattern */
    for (size_t i = 0; i < L; i++)
        if (bins[i] < 4 || bins[i] > in->cdf_bins || bins[i] % 2)
            return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: bins[%zu] = %u must be even and in [4, cdf_bins = %u]", i,
                             bins[i], in->cdf_bins);
    const size_t W = in->windows[0].num_tokens;
    size_t sum = 0;
    for (size_t w = 0; w < in->num_windows; w++) {
        const size_t tw = in->windows[w].num_tokens;
        if (!tw || tw > W || (tw != W && w + 1 < in->num_windows) || W > UINT32_MAX)
            return kvc_error(KVC_ERR_SHAPE, "lmcache import: window %zu has %zu tokens; all windows but the last must have %zu",
                             w, tw, W);
        sum += tw;
    }
    if (sum != in->num_tokens)
        return kvc_error(KVC_ERR_SHAPE, "lmcache import: windows hold %zu tokens, the chunk has %zu", sum, in->num_tokens);
    return KVC_OK;
}

/* Whole-chunk counts behind LMCache's CDF rows, when every row is exactly the docs/LMCACHE.md
 * normalisation of counts over T tokens (recoverable while (65535 - B) >= T: the map from
 * cumulative count to CDF entry is then one-to-one). Returns 0 (keep the table verbatim) else. */
static int counts_from_cdf(const uint16_t *cdf, size_t S, unsigned B, uint64_t T, uint32_t *counts)
{
    const uint64_t k = 65535u - B;
    if (T > k) return 0;
    uint16_t check[KVC_CONTAINER_MAX_BINS + 1];
    for (size_t s = 0; s < S; s++) {
        const uint16_t *row = cdf + s * (B + 1);
        uint64_t prev = 0;
        for (unsigned i = 1; i <= B; i++) {
            const uint64_t cum = ((uint64_t)(row[i] - i) * T + k - 1) / k; /* smallest c with floor(k c / T) = row[i] - i */
            if (cum < prev || cum > T) return 0;
            counts[s * B + i - 1] = (uint32_t)(cum - prev);
            prev = cum;
        }
        if (prev != T) return 0;
        kvc_cdf_from_hist(counts + s * B, 1, B, T, NULL, check, 1);
        if (memcmp(check, row, (B + 1) * sizeof(uint16_t))) return 0;
    }
    return 1;
}

KVC_API kvc_status_t kvc_codec_import_lmcache(const kvc_lmcache_chunk_t *in, uint8_t **out, size_t *out_len)
{
    if (!in || !out || !out_len) return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: in, out and out_len must not be NULL");
    size_t planes = 0;
    uint32_t bins[2 * 4096];
    kvc_status_t st = check_chunk(in, &planes, bins);
    if (st != KVC_OK) return st;
    const size_t NL = in->num_layers, T = in->num_tokens, C = in->num_heads * in->head_size, L = planes * NL, S = L * C;
    const unsigned B = in->cdf_bins;
    const size_t nwin = in->num_windows, es = dtype_size(in->dtype);

    /* Validate the bytes before building anything. */
    for (size_t s = 0; s < S; s++) {
        const uint16_t *row = in->cdf + s * (B + 1);
        if (row[0] != 0) return kvc_error(KVC_ERR_CORRUPT, "lmcache import: CDF row %zu starts at %u, not 0", s, row[0]);
        for (unsigned i = 1; i <= B; i++)
            if (row[i] <= row[i - 1])
                return kvc_error(KVC_ERR_CORRUPT, "lmcache import: CDF row %zu is not strictly increasing at entry %u", s, i);
    }
    size_t streams_bytes = 0;
    for (size_t w = 0; w < nwin; w++) {
        const kvc_lmcache_window_t *win = &in->windows[w];
        if (!win->lengths || (win->nbytes && !win->bytes))
            return kvc_error(KVC_ERR_INVALID_ARG, "lmcache import: window %zu has NULL bytes or lengths", w);
        uint64_t sum = 0;
        for (size_t s = 0; s < S; s++) {
            if (win->lengths[s] < 0)
                return kvc_error(KVC_ERR_CORRUPT, "lmcache import: window %zu stream %zu has length %d", w, s, (int)win->lengths[s]);
            sum += (uint64_t)win->lengths[s];
        }
        if (sum != win->nbytes)
            return kvc_error(KVC_ERR_CORRUPT, "lmcache import: window %zu lengths add up to %llu bytes, its bytestream has %zu", w,
                             (unsigned long long)sum, win->nbytes);
        streams_bytes += win->nbytes;
    }
    for (size_t p = 0; p < planes; p++) {
        const void *mx = p ? in->max_value : in->max_key;
        for (size_t i = 0; i < NL * T; i++) {
            const float v = load_scalar(mx, i, in->dtype);
            if (!(v >= 0.0f) || isinf(v))
                return kvc_error(KVC_ERR_CORRUPT, "lmcache import: %s[%zu, %zu] is %g (a maximum of |x| must be finite)",
                                 p ? "max_value" : "max_key", i / T, i % T, (double)v);
        }
    }

    kvc_container_t *c = calloc(1, sizeof(*c));
    uint8_t *scales = malloc(L * T * es), *streams = malloc(streams_bytes ? streams_bytes : 1), *buf = NULL;
    uint32_t *counts = malloc(S * B * sizeof(uint32_t)), *lengths = malloc(nwin * S * sizeof(uint32_t));
    uint8_t *raw = NULL;
    if (!c || !scales || !streams || !counts || !lengths) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "lmcache import: no memory for a %zu x %zu x %zu chunk", L, T, C);
        goto done;
    }
    memcpy(scales, in->max_key, NL * T * es);
    if (planes == 2) memcpy(scales + NL * T * es, in->max_value, NL * T * es);
    size_t off = 0;
    for (size_t w = 0; w < nwin; w++) {
        if (in->windows[w].nbytes) memcpy(streams + off, in->windows[w].bytes, in->windows[w].nbytes);
        off += in->windows[w].nbytes;
        for (size_t s = 0; s < S; s++) lengths[w * S + s] = (uint32_t)in->windows[w].lengths[s];
    }
    if (counts_from_cdf(in->cdf, S, B, T, counts)) {
        c->counts = counts;
    } else {
        if (!(raw = malloc(S * (B + 1) * 2))) {
            st = kvc_error(KVC_ERR_NO_MEMORY, "lmcache import: no memory for the CDF table");
            goto done;
        }
        for (size_t i = 0; i < S * (B + 1); i++) {
            raw[2 * i] = (uint8_t)in->cdf[i];
            raw[2 * i + 1] = (uint8_t)(in->cdf[i] >> 8);
        }
        c->flags = KVC_CONTAINER_FLAG_RAW_CDF;
        c->raw_cdf = raw;
    }
    c->dtype = (uint8_t)in->dtype;
    c->layout = planes == 2 ? KVC_CT_LAYOUT_KV_2LTD : KVC_CT_LAYOUT_MLA;
    c->kvs = (uint8_t)planes;
    c->cdf_bins = (uint8_t)B;
    c->num_layers = (uint32_t)NL;
    c->num_tokens = (uint32_t)T;
    c->num_heads = (uint32_t)in->num_heads;
    c->head_size = (uint32_t)in->head_size;
    c->window_tokens = (uint32_t)in->windows[0].num_tokens;
    c->num_windows = (uint32_t)nwin;
    for (size_t i = 0; i < L; i++) c->bins[i] = (uint8_t)bins[i];
    c->scales = scales;
    c->scales_bytes = L * T * es;
    c->lengths = lengths;
    c->streams = streams;
    c->streams_bytes = streams_bytes;
    size_t total;
    if ((st = kvc_container_size(c, &total)) != KVC_OK) goto done;
    if (!(buf = malloc(total))) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "lmcache import: no memory for %zu bytes", total);
        goto done;
    }
    if ((st = kvc_container_write(c, buf, total, out_len)) != KVC_OK) goto done;
    *out = buf;
    buf = NULL;
done:
    free(c);
    free(scales);
    free(streams);
    free(counts);
    free(lengths);
    free(raw);
    free(buf);
    return st;
}

int kvc_codec_lmcache_unreadable(const kvc_container_t *c, char *why, size_t n)
{
    if (c->flags & KVC_CONTAINER_FLAG_RANS) {
        snprintf(why, n, "its streams are rANS-coded (kvcore encode --coder rans); LMCache reads only its arithmetic coder (--coder ac)");
        return 1;
    }
    if (c->flags & KVC_CONTAINER_FLAG_CHANNEL_KEYS) {
        snprintf(why, n, "keys are scaled per channel; LMCache scales every token");
        return 1;
    }
    if (c->window_tokens > KVC_CODEC_LMCACHE_WINDOW) {
        snprintf(why, n, "windows of %u tokens; LMCache's decoder takes at most %u", c->window_tokens, KVC_CODEC_LMCACHE_WINDOW);
        return 1;
    }
    if (c->cdf_bins + 1u > KVC_CODEC_LMCACHE_MAX_CDF) {
        snprintf(why, n, "a CDF of %u entries; LMCache's decoder takes at most %u", c->cdf_bins + 1u, KVC_CODEC_LMCACHE_MAX_CDF);
        return 1;
    }
    const uint64_t nl = (uint64_t)c->num_windows * kvc_container_streams_per_window(c);
    for (uint64_t i = 0; i < nl; i++)
        if (c->lengths[i] > KVC_CODEC_LMCACHE_STREAM_BYTES) {
            snprintf(why, n, "a coded stream of %u bytes in window %llu; LMCache's decoder reads at most %u bytes per stream",
                     c->lengths[i], (unsigned long long)(i / kvc_container_streams_per_window(c)), KVC_CODEC_LMCACHE_STREAM_BYTES);
            return 1;
        }
    return 0;
}

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

KVC_API kvc_status_t kvc_codec_export_lmcache(const void *buf, size_t len, kvc_lmcache_chunk_t *out, void **storage)
{
    if (!buf || !out || !storage) return kvc_error(KVC_ERR_INVALID_ARG, "lmcache export: buf, out and storage must not be NULL");
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "lmcache export: no memory");
    kvc_status_t st = kvc_container_parse(buf, len, c, 1);
    if (st != KVC_OK) goto done;
    char why[160];
    if (kvc_codec_lmcache_unreadable(c, why, sizeof(why))) {
        st = kvc_error(KVC_ERR_UNSUPPORTED, "lmcache export: LMCache cannot read this container: %s", why);
        goto done;
    }
    const size_t planes = c->kvs, NL = c->num_layers, T = c->num_tokens, C = (size_t)c->num_heads * c->head_size;
    const size_t L = planes * NL, S = L * C, B = c->cdf_bins, nwin = c->num_windows;
    const size_t o_cdf = 0, o_scales = align8(o_cdf + S * (B + 1) * 2), o_bins = align8(o_scales + c->scales_bytes),
                 o_win = align8(o_bins + L * sizeof(uint32_t)), o_len = align8(o_win + nwin * sizeof(kvc_lmcache_window_t)),
                 o_streams = align8(o_len + nwin * S * sizeof(int32_t)), total = o_streams + c->streams_bytes + 1;
    uint8_t *mem = malloc(total);
    if (!mem) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "lmcache export: no memory for %zu bytes", total);
        goto done;
    }
    uint16_t *cdf = (uint16_t *)(mem + o_cdf);
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF)
        for (size_t i = 0; i < S * (B + 1); i++) cdf[i] = (uint16_t)(c->raw_cdf[2 * i] | (c->raw_cdf[2 * i + 1] << 8));
    else
        for (size_t s = 0; s < S; s++) kvc_cdf_from_hist(c->counts + s * B, 1, (unsigned)B, T, NULL, cdf + s * (B + 1), 1);
    memcpy(mem + o_scales, c->scales, c->scales_bytes);
    uint32_t *bins = (uint32_t *)(mem + o_bins);
    for (size_t i = 0; i < L; i++) bins[i] = c->bins[i];
    kvc_lmcache_window_t *win = (kvc_lmcache_window_t *)(mem + o_win);
    int32_t *lengths = (int32_t *)(mem + o_len);
    uint8_t *streams = mem + o_streams;
    memcpy(streams, c->streams, c->streams_bytes);
    size_t off = 0;
    for (size_t w = 0; w < nwin; w++) {
        size_t n = 0;
        for (size_t s = 0; s < S; s++) n += lengths[w * S + s] = (int32_t)c->lengths[w * S + s];
        win[w] = (kvc_lmcache_window_t){ .bytes = streams + off, .nbytes = n, .lengths = lengths + w * S,
                                         .num_tokens = w + 1 < nwin ? c->window_tokens : T - w * c->window_tokens };
        off += n;
    }
    const kvc_dtype_t dt = (kvc_dtype_t)c->dtype;
    *out = (kvc_lmcache_chunk_t){ .dtype = dt, .layout = planes == 2 ? KVC_CODEC_KV_2LTD : KVC_CODEC_MLA, .num_layers = NL,
                                  .num_tokens = T, .num_heads = c->num_heads, .head_size = c->head_size, .cdf_bins = (uint32_t)B,
                                  .cdf = cdf, .max_key = mem + o_scales,
                                  .max_value = planes == 2 ? mem + o_scales + c->scales_bytes / 2 : NULL, .bins = bins,
                                  .num_windows = nwin, .windows = win };
    *storage = mem;
done:
    kvc_container_release(c);
    free(c);
    return st;
}
