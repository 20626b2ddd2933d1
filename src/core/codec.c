/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen codec: quantise -> counts -> windows of entropy-coded streams -> .kvc container, and
 * back (docs/CACHEGEN.md, docs/FORMAT.md). Two coders: `ac`, LMCache's arithmetic coder over a
 * 16-bit CDF (the default, the one LMCache reads), through the backend's ops (kvc_cg_encode,
 * kvc_cg_decode_packed); and `rans`, 12-bit frequencies, whose windows run on the built-in CPU
 * backend through the private calls of backends/simd/cpu_codec.h (several windows in place, the
 * dequantiser in the decode's team). This file shapes the data, fits a rate target (the bins),
 * and writes the container; container.c alone reads one. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/cachegen.h>
#include <kvcore/codec.h>

#include "codec_internal.h"
#include "container.h"
#include "common/checked.h"
#include "common/cdf.h"
#include "common/half.h"
#include "common/halfs.h"
#include "internal.h"
#include "log.h"
#include "common/rans.h"
#include "backends/simd/cpu_codec.h"

#define DEFAULT_WINDOW KVC_CODEC_LMCACHE_WINDOW

typedef struct {
    size_t planes, layers, tokens, channels; /* layers = planes * NL */
} dims_t;

/* ---- scratch kept across calls ----------------------------------------------------------------
 * A 7B-class chunk needs ~55 MB of working buffers; allocating them per call made the kernel zero
 * and fault in every page each time (a fifth of an encode). The context keeps them, grown to the
 * largest call so far, until it is destroyed. One call at a time uses the context's set; a call
 * that finds it busy (another thread on the same context) works on a set of its own. */
enum { SC_SYMBOLS, SC_WINDOW, SC_STREAMS, SC_SCALES, SC_SCALES_DT, SC_CDF, SC_LENS, SC_COUNTS, SC_LENGTHS, SC_PACKED,
       SC_PREFSUM, SC_TVALUES, SC_TSYMBOLS, SC_LAYER_OFFSETS, SC_COUNT };

struct kvc_codec_scratch {
    int busy;       /* the context's set: taken by a call (atomic) */
    int own;        /* a call's private set (never shared, freed at release) */
    void *buf[SC_COUNT];
    size_t cap[SC_COUNT];
};
typedef struct kvc_codec_scratch scratch_t;

void kvc_codec_scratch_free(scratch_t *s)
{
    if (!s) return;
    for (int i = 0; i < SC_COUNT; i++) free(s->buf[i]);
    free(s);
}

/* The context's set when free (created on first use), else a private one. */
static scratch_t *scratch_acquire(kvc_context_t *ctx)
{
    scratch_t *s = __atomic_load_n(&ctx->codec_scratch, __ATOMIC_ACQUIRE);
    if (!s) {
        scratch_t *fresh = calloc(1, sizeof(*fresh)), *expected = NULL;
        if (!fresh) return NULL;
        if (__atomic_compare_exchange_n(&ctx->codec_scratch, &expected, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) s = fresh;
        else {
            free(fresh);
            s = expected;
        }
    }
    if (!__atomic_exchange_n(&s->busy, 1, __ATOMIC_ACQUIRE)) return s;
    s = calloc(1, sizeof(*s));
    if (s) s->own = 1;
    return s;
}

static void scratch_release(scratch_t *s)
{
    if (!s) return;
    if (s->own) kvc_codec_scratch_free(s);
    else __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* Buffer i of at least n bytes (contents undefined), or NULL when out of memory. */
static void *scratch_get(scratch_t *s, int i, size_t n)
{
    if (!n) n = 1;
    if (s->cap[i] < n) {
        free(s->buf[i]);
        s->buf[i] = malloc(n);
        s->cap[i] = s->buf[i] ? n : 0;
    }
    return s->buf[i];
}

static void scale_store(void *p, size_t i, uint8_t dt, float f)
{
    if (dt == KVC_DTYPE_F32) { memcpy((uint8_t *)p + 4 * i, &f, 4); return; }
    const uint16_t h = dt == KVC_DTYPE_F16 ? kvc_f32_to_f16(f) : kvc_f32_to_bf16(f);
    memcpy((uint8_t *)p + 2 * i, &h, 2);
}

/* Symbols of window [t0, t0+tw) of every layer, gathered into a contiguous [layers, tw, C] block
 * (the coder's tensor shape), or scattered back. */
static void window_copy(uint8_t *win, uint8_t *all, const dims_t *d, size_t t0, size_t tw, int gather, int threads)
{
    const size_t row = tw * d->channels;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t l = 0; l < d->layers; l++) {
        uint8_t *a = all + (l * d->tokens + t0) * d->channels, *w = win + l * row;
        if (gather) memcpy(w, a, row);
        else memcpy(a, w, row);
    }
}

static kvc_status_t check_params(const kvc_codec_params_t *p, dims_t *d, uint32_t *bins, unsigned *cdf_bins,
                                 uint32_t *window, int *channel_keys)
{
    if ((p->field_mask & KVC_CODEC_PARAM_CODER) && p->coder != KVC_CODER_AC && p->coder != KVC_CODER_RANS)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec coder %d is unknown (KVC_CODER_AC or KVC_CODER_RANS)", (int)p->coder);
    if (p->dtype != KVC_DTYPE_F16 && p->dtype != KVC_DTYPE_BF16 && p->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "codec dtype %s: only f16, bf16 and f32 chunks are coded", kvc_dtype_name(p->dtype));
    if (p->layout != KVC_CODEC_KV_2LTD && p->layout != KVC_CODEC_MLA)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec layout %d is unknown", (int)p->layout);
    if (!p->num_layers || !p->num_tokens || !p->num_heads || !p->head_size)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec dimensions must be non-zero (layers %zu, tokens %zu, heads %zu, head size %zu)",
                         p->num_layers, p->num_tokens, p->num_heads, p->head_size);
    if (p->layout == KVC_CODEC_MLA && p->num_heads != 1)
        return kvc_error(KVC_ERR_SHAPE, "MLA chunks have one latent head, not %zu", p->num_heads);
    if ((p->field_mask & KVC_CODEC_PARAM_HEADS_UNKNOWN) && p->num_heads != 1)
        return kvc_error(KVC_ERR_SHAPE, "with an unknown head split num_heads must be 1, not %zu", p->num_heads);
    if (p->num_layers > 4096 || p->num_tokens > UINT32_MAX || p->num_heads * p->head_size > (1u << 24))
        return kvc_error(KVC_ERR_SHAPE, "codec dimensions too large (layers <= 4096, channels <= 2^24)");
    d->planes = p->layout == KVC_CODEC_KV_2LTD ? 2 : 1;
    d->layers = d->planes * p->num_layers;
    d->tokens = p->num_tokens;
    d->channels = p->num_heads * p->head_size;
    size_t n;
    if (!kvc_mul3_ok(d->layers, d->tokens, d->channels, &n))
        return kvc_error(KVC_ERR_SHAPE, "codec chunk size overflows");
    if (p->field_mask & KVC_CODEC_PARAM_BINS) {
        if (!p->bins) return kvc_error(KVC_ERR_INVALID_ARG, "bins must not be NULL when KVC_CODEC_PARAM_BINS is set");
        memcpy(bins, p->bins, d->layers * sizeof(*bins));
    } else {
        uint32_t defaults[2 * 4096];
        kvc_cg_default_bins(p->num_layers, defaults);
        memcpy(bins, defaults, d->layers * sizeof(*bins)); /* MLA: the key pattern */
    }
    *cdf_bins = 0;
    for (size_t i = 0; i < d->layers; i++) {
        if (bins[i] < 4 || bins[i] > KVC_CONTAINER_MAX_BINS || bins[i] % 2)
            return kvc_error(KVC_ERR_INVALID_ARG, "bins[%zu] = %u: must be even and in [4, 64]", i, bins[i]);
        if (bins[i] > *cdf_bins) *cdf_bins = bins[i];
    }
    *window = (p->field_mask & KVC_CODEC_PARAM_WINDOW) ? p->window_tokens : DEFAULT_WINDOW;
    if (*window == 0) return kvc_error(KVC_ERR_INVALID_ARG, "window_tokens must be > 0");
    *channel_keys = 0;
    if (p->field_mask & KVC_CODEC_PARAM_KEY_SCALING) {
        if (p->key_scaling != KVC_CODEC_SCALE_TOKEN && p->key_scaling != KVC_CODEC_SCALE_CHANNEL)
            return kvc_error(KVC_ERR_INVALID_ARG, "key_scaling %d is unknown (KVC_CODEC_SCALE_TOKEN or _CHANNEL)", (int)p->key_scaling);
        *channel_keys = p->key_scaling == KVC_CODEC_SCALE_CHANNEL;
    }
    return KVC_OK;
}

/* [n][rows][cols] -> [n][cols][rows] for elements of es bytes (1, 2 or 4). */
static void transpose(const void *src, void *dst, size_t n, size_t rows, size_t cols, size_t es, int threads)
{
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t b = 0; b < n; b++) {
        const uint8_t *s = (const uint8_t *)src + b * rows * cols * es;
        uint8_t *o = (uint8_t *)dst + b * rows * cols * es;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) memcpy(o + (c * rows + r) * es, s + (r * cols + c) * es, es);
    }
}

/* The built-in CPU backend's context: the context's own, or the one a GPU context keeps. The
 * codec's buffers are host memory, so its rANS work and its trusted dequantise run there, through
 * the private calls of cpu_codec.h. */
static kvc_backend_ctx_t *cpu_backend(kvc_context_t *ctx) { return ctx->cpu_bctx ? ctx->cpu_bctx : ctx->bctx; }

/* kvc_dequantise; trusted: the rANS decode's symbols and the parsed container's scales, whose
 * checks the CPU backend then skips (a backend elsewhere, for device output, checks them). */
static kvc_status_t dequantise(kvc_context_t *ctx, const kvc_quant_params_t *a, int trusted)
{
    struct kvc_quant_args op;
    kvc_route_t to;
    const kvc_status_t st = kvc_dequantise_route(ctx, a, &op, &to);
    if (st != KVC_OK) return st;
    return trusted && to.b == cpu_backend(ctx) ? kvc_cpu_dequantise_trusted(to.b, &op) : to.ops->dequantise(to.b, &op);
}

/* Quantise (or dequantise) plane 0 with per-(layer, channel) scales: the per-token quantiser run on
 * the transposed plane [NL, C, T], so every ISA tier and backend that matches the per-token
 * quantiser matches this mode too. symbols [NL, T, C]; scales [NL, C]. */
static kvc_status_t channel_plane(kvc_context_t *ctx, scratch_t *sc, kvc_dtype_t dt, void *values, uint8_t *symbols, float *scales,
                                  const uint32_t *bins, size_t NL, size_t T, size_t C, int decode, int trusted)
{
    const size_t es = dt == KVC_DTYPE_F32 ? 4 : 2;
    void *tv = scratch_get(sc, SC_TVALUES, NL * T * C * es);
    uint8_t *ts = scratch_get(sc, SC_TSYMBOLS, NL * T * C);
    if (!tv || !ts) return kvc_error(KVC_ERR_NO_MEMORY, "codec: no memory to transpose a %zu x %zu x %zu key plane", NL, T, C);
    kvc_quant_params_t q = { .dtype = dt, .values = tv, .symbols = ts, .scales = scales, .bins = (uint32_t *)bins,
                           .layers = NL, .tokens = C, .channels = T };
    kvc_status_t st;
    if (decode) {
        transpose(symbols, ts, NL, T, C, 1, ctx->num_threads);
        if ((st = dequantise(ctx, &q, trusted)) == KVC_OK) transpose(tv, values, NL, C, T, es, ctx->num_threads);
    } else {
        transpose(values, tv, NL, T, C, es, ctx->num_threads);
        if ((st = kvc_quantise(ctx, &q)) == KVC_OK) transpose(ts, symbols, NL, C, T, 1, ctx->num_threads);
    }
    return st;
}

/* Quantise or dequantise a whole chunk: planes per token, or plane 0 per channel. trusted (decode
 * only): the rANS decode's symbols and the parsed container's scales (dequantise). */
static kvc_status_t quant_chunk(kvc_context_t *ctx, scratch_t *sc, kvc_dtype_t dt, void *values, uint8_t *symbols, float *scales,
                                const uint32_t *bins, const dims_t *d, int channel_keys, int decode, int trusted)
{
    kvc_quant_params_t q = { .dtype = dt, .values = values, .symbols = symbols, .scales = scales, .bins = (uint32_t *)bins,
                           .layers = d->layers, .tokens = d->tokens, .channels = d->channels };
    if (!channel_keys) return decode ? dequantise(ctx, &q, trusted) : kvc_quantise(ctx, &q);
    const size_t NL = d->layers / d->planes, T = d->tokens, C = d->channels, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    kvc_status_t st = channel_plane(ctx, sc, dt, values, symbols, scales, bins, NL, T, C, decode, trusted);
    if (st != KVC_OK || d->planes == 1) return st;
    q.values = (uint8_t *)values + NL * T * C * es;
    q.symbols = symbols + NL * T * C;
    q.scales = scales + NL * C;
    q.bins = (uint32_t *)bins + NL;
    q.layers = NL;
    return decode ? dequantise(ctx, &q, trusted) : kvc_quantise(ctx, &q);
}

/* Counts over the whole chunk (stored in the container), then the coder's table from them:
 * LMCache's CDF, or the rANS frequencies (cumulative) when rans is set. Tasks are
 * (layer, block of 64 channels), counted in 16-bit counters of a fixed 64-symbol stride (8 KiB, in
 * L1; index = channel << 6 | symbol, no multiply), flushed to the 32-bit counts every 65535 tokens. */
#define COUNT_BLOCK 64
static void count_and_cdf(const uint8_t *symbols, const dims_t *d, unsigned B, uint32_t *counts, uint16_t *cdf, int rans,
                          int threads)
{
    const size_t L = d->layers, T = d->tokens, C = d->channels, nb = (C + COUNT_BLOCK - 1) / COUNT_BLOCK;
    uint16_t fbuf[KVC_RANS_FREQ_STACK], *freq = rans ? kvc_rans_freq_make(T, L * C * B, fbuf) : NULL;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t task = 0; task < L * nb; task++) {
        const size_t l = task / nb, c0 = task % nb * COUNT_BLOCK, n = C - c0 < COUNT_BLOCK ? C - c0 : COUNT_BLOCK;
        uint16_t local[COUNT_BLOCK * 64];
        uint32_t *cnt = counts + (l * C + c0) * B;
        memset(cnt, 0, n * B * sizeof(uint32_t));
        const uint8_t *row = symbols + l * T * C + c0;
        for (size_t t0 = 0; t0 < T; t0 += 65535) {
            const size_t tn = T - t0 < 65535 ? T - t0 : 65535;
            memset(local, 0, sizeof(local));
            if (n == COUNT_BLOCK) /* unrolled: two instructions per symbol (load, add to a fixed offset) */
                for (size_t t = 0; t < tn; t++, row += C) {
#pragma GCC unroll 64
                    for (size_t ch = 0; ch < COUNT_BLOCK; ch++) local[ch << 6 | (row[ch] & 63u)]++;
                }
            else if (n % 8 == 0) /* 8 channels a step: the loop a channel ran at half speed when it crossed a 64-byte line */
                for (size_t t = 0; t < tn; t++, row += C)
                    for (size_t c8 = 0; c8 < n; c8 += 8) {
#pragma GCC unroll 8
                        for (size_t ch = c8; ch < c8 + 8; ch++) local[ch << 6 | (row[ch] & 63u)]++;
                    }
            else
                for (size_t t = 0; t < tn; t++, row += C)
                    for (size_t ch = 0; ch < n; ch++) local[ch << 6 | (row[ch] & 63u)]++;
            for (size_t ch = 0; ch < n; ch++)
                for (unsigned b = 0; b < B; b++) cnt[ch * B + b] += local[ch << 6 | b];
        }
        for (size_t ch = 0; ch < n; ch++) {
            uint16_t *out = cdf + (l * C + c0 + ch) * (B + 1);
            if (freq) kvc_rans_cum_from_freq_table(cnt + ch * B, B, freq, out);
            else if (rans) kvc_rans_cum_from_counts(cnt + ch * B, B, T, out);
            else kvc_cdf_from_hist(cnt + ch * B, 1, B, T, NULL, out, 1);
        }
    }
    kvc_rans_freq_done(freq, fbuf);
}

/* Streams a rANS encode call codes at least, when the chunk has that many (whole windows). */
#define RANS_CALL_STREAMS 64

/* nw consecutive windows [L, tw, C] of symbols (window w's layer l at sym + w * tw * C + l *
 * stride: the chunk's own symbols, no window copy) in one call (more streams for the threads to
 * share than a window has) to nw * L * ceil(C / 32) rANS streams, stream k at streams + k * cap. */
static kvc_status_t rans_encode_windows(kvc_context_t *ctx, const uint8_t *sym, size_t stride, size_t nw, size_t L, size_t tw,
                                        size_t C, const uint16_t *cum, unsigned B, uint8_t *streams, size_t cap, int32_t *lens)
{
    const struct kvc_rans_encode_args a = { .symbols = sym, .cum = cum, .streams = streams, .lengths = lens, .layers = L,
                                            .tokens = tw, .channels = C, .capacity = cap, .num_bins = B };
    const struct kvc_cpu_windows wn = { .windows = nw, .window_stride = tw * C, .layer_stride = stride };
    return kvc_cpu_rans_encode_windows(cpu_backend(ctx), &a, &wn); /* trusted: cum counted from these symbols */
}

/* What the decode's team does after the decode (kvc_cpu_decode_extras): the dequantiser, with the
 * container's 2-byte scales or none (already fp32). */
typedef struct {
    const struct kvc_quant_args *dq;
    const uint8_t *dq_scales;
} team_extras_t;

/* The inverse, for nw consecutive windows of tw tokens each in one call (more streams for the
 * threads and the SIMD kernels to share than a window has): their streams (lengths wl[nw * L * Q],
 * packed from bytes) into sym
 * [L, tw, C] per window (window w's layer l at sym + w * tw * C + l * stride). */
static kvc_status_t rans_decode_windows(kvc_context_t *ctx, const uint8_t *bytes, const uint32_t *wl, int64_t *ends, size_t nw,
                                        size_t L, size_t tw, size_t C, const uint32_t *counts, const uint16_t *freq,
                                        uint64_t total, unsigned B, uint8_t *sym, size_t stride, const team_extras_t *x)
{
    int64_t sum = 0;
    for (size_t k = 0; k < nw * L * kvc_rans_streams(C, KVC_RANS_STREAM_GROUPS); k++) ends[k] = sum += wl[k];
    const struct kvc_rans_decode_args a = { .bytes = bytes, .ends = ends, .symbols = sym, .layers = L, .tokens = tw,
                                            .channels = C, .num_bins = B, .nbytes = (size_t)sum };
    const struct kvc_cpu_windows wn = { .windows = nw, .window_stride = tw * C, .layer_stride = stride };
    const struct kvc_cpu_decode_extras e = { .counts = counts, .freq = freq, .count_total = total, .then_dequantise = x->dq,
                                             .then_scales = x->dq_scales };
    return kvc_cpu_rans_decode_windows(cpu_backend(ctx), &a, &wn, &e); /* trusted: the parsed counts, ends from the checked lengths */
}

KVC_API kvc_status_t kvc_codec_level_params(int level, kvc_codec_params_t *p, uint32_t *bins)
{
    if (!p || !bins) return kvc_error(KVC_ERR_INVALID_ARG, "codec level: params and bins must not be NULL");
    if (level < 0 || level > KVC_CODEC_LEVEL_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec level %d is unknown (0 .. %d)", level, KVC_CODEC_LEVEL_MAX);
    if (!p->num_layers || p->num_layers > 4096)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec level: num_layers %zu outside [1, 4096]", p->num_layers);
    /* Relative to LMCache's default for this layer count (kvc_cg_default_bins): a level gives the
     * bins of a layer LMCache codes with 32; a layer it codes with b gets b/32 of that, rounded up
     * to even, in [4, 62]. Chosen on bench/quality's tuning set (docs/CACHEGEN.md). */
    static const struct { uint32_t k, v; } levels[KVC_CODEC_LEVEL_MAX + 1] = {
        { 32, 32 }, /* LMCache's defaults */
        { 62, 12 }, /* lowest tuning-set KL at <= 95 % of level 0's size */
        { 46, 8 },  /* the smallest "no worse" than level 0 on the tuning set */
        { 32, 8 },  /* the smallest within 0.002 nats of level 0's mean KL (upper 95 % bound) */
    };
    const size_t NL = p->num_layers;
    kvc_cg_default_bins(NL, bins);
    for (size_t i = 0; i < 2 * NL; i++) {
        const uint32_t per32 = i < NL ? levels[level].k : levels[level].v, b = (bins[i] * per32 + 63) / 64 * 2;
        bins[i] = b < 4 ? 4 : b > 62 ? 62 : b;
    }
    /* MLA has one plane, the key pattern (bins[0, NL)). */
    p->bins = bins;
    p->key_scaling = KVC_CODEC_SCALE_TOKEN;
    p->field_mask |= KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_KEY_SCALING;
    return KVC_OK;
}

static kvc_status_t encode_bins(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, uint8_t **out,
                                size_t *out_len)
{
    if (!ctx || !p || !kv || !out || !out_len)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: ctx, params, kv, out and out_len must not be NULL");
    dims_t d;
    uint32_t bins[2 * 4096];
    unsigned B = 0;
    uint32_t W = 0;
    int chan = 0;
    kvc_status_t st = check_params(p, &d, bins, &B, &W, &chan);
    if (st != KVC_OK) return st;
    const int rans = (p->field_mask & KVC_CODEC_PARAM_CODER) && p->coder == KVC_CODER_RANS;
    const size_t L = d.layers, T = d.tokens, C = d.channels, S = L * C;
    const size_t G = rans ? kvc_rans_streams(C, KVC_RANS_STREAM_GROUPS) : C, NS = L * G; /* coded streams per layer, per window */
    const size_t nscales = chan ? d.layers / d.planes * (C + (d.planes - 1) * T) : L * T;
    const uint32_t nwin = (uint32_t)((T + W - 1) / W);
    /* rANS codes the full windows up to nwc a call (RANS_CALL_STREAMS streams when the chunk has
     * them: work for every thread, and the scratch for the streams stays a window's when a window
     * has that many), then a shorter last one */
    const size_t nfull = T / W, want = (RANS_CALL_STREAMS + NS - 1) / NS;
    const size_t nwc = rans && nfull > 1 ? (want < nfull ? want : nfull) : 1;
    const size_t tw_max = T < W ? T : W, cap = rans ? kvc_rans_bound(C < 8 * KVC_RANS_STREAM_GROUPS ? C : 8 * KVC_RANS_STREAM_GROUPS, tw_max) : kvc_cg_encode_bound(tw_max);
    /* A stream's length must fit the coder's int32 lengths (64 bytes a token at most). */
    if (rans && tw_max > KVC_RANS_MAX_WINDOW)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: rANS windows of %zu tokens; at most %u (window_tokens)", tw_max,
                         KVC_RANS_MAX_WINDOW);

    kvc_container_t *c = calloc(1, sizeof(*c));
    scratch_t *sc = scratch_acquire(ctx);
    uint8_t *symbols = NULL, *win = NULL, *streams = NULL, *packed = NULL, *buf = NULL;
    float *scales = NULL;
    void *scales_dt = NULL;
    uint16_t *cdf = NULL;
    int32_t *lens = NULL;
    size_t packed_len = 0;
    if (c && sc) {
        symbols = scratch_get(sc, SC_SYMBOLS, L * T * C);
        /* One window (the common 256-token chunk), or the rANS coder (a layer stride): the coder
         * reads the symbols in place. */
        win = nwin > 1 && !rans ? scratch_get(sc, SC_WINDOW, L * tw_max * C) : NULL;
        streams = scratch_get(sc, SC_STREAMS, nwc * NS * cap);
        scales = scratch_get(sc, SC_SCALES, nscales * sizeof(float));
        scales_dt = scratch_get(sc, SC_SCALES_DT, nscales * 4);
        cdf = scratch_get(sc, SC_CDF, S * (B + 1) * sizeof(uint16_t));
        lens = scratch_get(sc, SC_LENS, (nwc * NS > S ? nwc * NS : S) * sizeof(int32_t));
        c->counts = scratch_get(sc, SC_COUNTS, S * B * sizeof(uint32_t));
        c->lengths = scratch_get(sc, SC_LENGTHS, (size_t)nwin * S * sizeof(uint32_t));
    }
    if (!c || !sc || !symbols || (nwin > 1 && !rans && !win) || !streams || !scales || !scales_dt || !cdf || !lens || !c->counts ||
        !c->lengths) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for a %zu x %zu x %zu chunk", L, T, C);
        goto done;
    }

    if ((st = quant_chunk(ctx, sc, p->dtype, (void *)kv, symbols, scales, bins, &d, chan, 0, 0)) != KVC_OK) goto done;

    count_and_cdf(symbols, &d, B, c->counts, cdf, rans, ctx->num_threads);

    for (uint32_t w = 0; w < nwin;) {
        const size_t t0 = (size_t)w * W, tw = T - t0 < W ? T - t0 : W, nw = tw < W ? 1 : nwc < (T - t0) / W ? nwc : (T - t0) / W;
        if (rans) st = rans_encode_windows(ctx, symbols + t0 * C, T * C, nw, L, tw, C, cdf, B, streams, cap, lens);
        else {
            if (win) window_copy(win, symbols, &d, t0, tw, 1, ctx->num_threads);
            kvc_cg_encode_params_t e = { .cdf = cdf, .symbols = win ? win : symbols, .streams = streams, .lengths = lens, .layers = L,
                                         .tokens = tw, .channels = C, .capacity = cap, .num_bins = B };
            st = kvc_cg_encode(ctx, &e);
        }
        if (st != KVC_OK) goto done;
        for (size_t i = 0; i < nw; i++, w++) {
            const int32_t *wlens = lens + i * NS;
            const uint8_t *wstreams = streams + i * NS * cap;
            size_t add = 0;
            for (size_t s = 0; s < NS; s++) add += (size_t)wlens[s];
            if (packed_len + add > sc->cap[SC_PACKED]) { /* grows by window; kept for the next call */
                const size_t ncap = (packed_len + add) * 2 + 4096;
                uint8_t *np = realloc(sc->buf[SC_PACKED], ncap);
                if (!np) { st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for coded streams"); goto done; }
                sc->buf[SC_PACKED] = np;
                sc->cap[SC_PACKED] = ncap;
            }
            packed = sc->buf[SC_PACKED];
            /* Window offsets of each layer's streams, then the copies in parallel over layers. */
            uint32_t *wl = c->lengths + (size_t)w * NS;
            for (size_t s = 0; s < NS; s++) wl[s] = (uint32_t)wlens[s];
            size_t *loff = scratch_get(sc, SC_LAYER_OFFSETS, (L + 1) * sizeof(size_t));
            if (!loff) { st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for stream offsets"); goto done; }
            loff[0] = packed_len;
            for (size_t l = 0; l < L; l++) {
                size_t n = 0;
                for (size_t ch = 0; ch < G; ch++) n += wl[l * G + ch];
                loff[l + 1] = loff[l] + n;
            }
#pragma omp parallel for schedule(static) num_threads(ctx->num_threads)
            for (size_t l = 0; l < L; l++) {
                size_t o = loff[l];
                for (size_t ch = 0; ch < G; ch++) {
                    memcpy(packed + o, wstreams + (l * G + ch) * cap, wl[l * G + ch]);
                    o += wl[l * G + ch];
                }
            }
            packed_len = loff[L];
            if ((p->field_mask & KVC_CODEC_PARAM_PROGRESS) && p->progress) p->progress(p->progress_user, w + 1u, nwin);
        }
    }

    const uint8_t dt = (uint8_t)p->dtype;
    for (size_t i = 0; i < nscales; i++) scale_store(scales_dt, i, dt, scales[i]);
    c->flags = (chan ? KVC_CONTAINER_FLAG_CHANNEL_KEYS : 0) |
               (rans ? KVC_CONTAINER_FLAG_RANS | KVC_CONTAINER_FLAG_RANS_SPAN4 | KVC_CONTAINER_FLAG_CDF_INDEX : 0);
    c->threads = ctx->num_threads;
    c->dtype = dt;
    c->layout = p->layout == KVC_CODEC_MLA ? KVC_CT_LAYOUT_MLA : KVC_CT_LAYOUT_KV_2LTD;
    c->kvs = (uint8_t)d.planes;
    c->cdf_bins = (uint8_t)B;
    c->num_layers = (uint32_t)p->num_layers;
    c->num_tokens = (uint32_t)T;
    c->num_heads = (uint32_t)p->num_heads;
    c->head_size = (uint32_t)p->head_size;
    if (p->field_mask & KVC_CODEC_PARAM_HEADS_UNKNOWN) c->flags |= KVC_CONTAINER_FLAG_NO_HEADS;
    c->window_tokens = W;
    c->num_windows = nwin;
    for (size_t i = 0; i < L; i++) c->bins[i] = (uint8_t)bins[i];
    c->scales = scales_dt;
    c->scales_bytes = nscales * (dt == KVC_DTYPE_F32 ? 4 : 2);
    c->streams = packed ? packed : (const uint8_t *)"";
    c->streams_bytes = packed_len;
    if ((st = kvc_container_write_alloc(c, &buf, out_len)) != KVC_OK) goto done;
    char why[160];
    /* rANS was asked for by name: not worth a warning. */
    if (!rans && kvc_codec_lmcache_unreadable(c, why, sizeof(why))) KVC_WARN("codec encode: LMCache cannot read this container: %s", why);
    *out = buf;
    buf = NULL;
done:
    scratch_release(sc); /* counts and lengths are scratch: not kvc_container_release */
    free(c);
    free(buf);
    return st;
}

/* Rate target: bins from kvc_codec_rate_bins for a stream budget of the target minus the other
 * sections (scales exactly, lengths and header estimated), then lowered by the measured excess plus
 * a growing margin until the container fits (the allocation moves in steps of whole bins). */
static kvc_status_t encode_rate(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, uint8_t **out,
                                size_t *out_len)
{
    if (p->field_mask & KVC_CODEC_PARAM_BINS)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: a bits target and explicit bins exclude each other");
    if (!isfinite(p->bits) || p->bits <= 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: bits per element %g must be finite and > 0", p->bits);
    if ((p->field_mask & KVC_CODEC_PARAM_KEY_SCALING) && p->key_scaling == KVC_CODEC_SCALE_CHANNEL)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: a bits target works with per-token key scales only");
    kvc_codec_params_t q = *p;
    q.field_mask &= ~(uint64_t)KVC_CODEC_PARAM_BITS;
    dims_t d;
    uint32_t bins[2 * 4096];
    unsigned B;
    uint32_t W;
    int chan;
    kvc_status_t st = check_params(&q, &d, bins, &B, &W, &chan);
    if (st != KVC_OK) return st;
    const size_t L = d.layers, T = d.tokens, C = d.channels, es = p->dtype == KVC_DTYPE_F32 ? 4 : 2;
    const double elems = (double)L * (double)T * (double)C, target = p->bits * elems;
    double budget = target - 8.0 * ((double)(L * T * es) + (double)(L * C) * (double)((T + W - 1) / W) + 256);
    q.bins = bins;
    q.field_mask |= KVC_CODEC_PARAM_BINS;
    for (int round = 0;; round++) {
        if (kvc_codec_rate_bins(kv, p->dtype, L, T, C, budget, ctx->num_threads, bins))
            return kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for the rate search of a %zu x %zu x %zu chunk", L, T, C);
        if ((st = encode_bins(ctx, &q, kv, out, out_len)) != KVC_OK) return st;
        const double got = 8.0 * (double)*out_len;
        if (got <= target) return KVC_OK;
        int all4 = 1;
        for (size_t i = 0; i < L; i++) all4 &= bins[i] == 4;
        kvc_codec_free(*out);
        *out = NULL;
        if (all4 || round == 12)
            return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: %g bits per element is below what this chunk codes to%s (%.3f)",
                             p->bits, all4 ? " with 4 bins everywhere" : "", got / elems);
        budget -= got - target + target * 0.0005 * (double)(1u << round); /* a step the allocation must take */
    }
}

KVC_API kvc_status_t kvc_codec_encode(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, uint8_t **out,
                                      size_t *out_len)
{
    if (!ctx || !p || !kv || !out || !out_len)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: ctx, params, kv, out and out_len must not be NULL");
    return p->field_mask & KVC_CODEC_PARAM_BITS ? encode_rate(ctx, p, kv, out, out_len) : encode_bins(ctx, p, kv, out, out_len);
}

KVC_API void kvc_codec_free(void *p) { free(p); }

/* The decoded chunk's bytes (META's sizes). */
static size_t chunk_bytes(const kvc_container_t *c)
{
    return (size_t)c->kvs * c->num_layers * c->num_tokens * c->num_heads * c->head_size * (c->dtype == KVC_DTYPE_F32 ? 4u : 2u);
}

static void fill_info(const kvc_container_t *c, size_t len, kvc_codec_info_t *info)
{
    const size_t planes = c->kvs, L = planes * c->num_layers, C = (size_t)c->num_heads * c->head_size;
    const size_t dsize = c->dtype == KVC_DTYPE_F32 ? 4 : 2;
    memset(info, 0, sizeof(*info));
    info->dtype = (kvc_dtype_t)c->dtype;
    info->layout = c->layout == KVC_CT_LAYOUT_MLA ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD;
    info->planes = planes;
    info->num_layers = c->num_layers;
    info->num_tokens = c->num_tokens;
    info->num_heads = c->num_heads;
    info->head_size = c->head_size;
    info->window_tokens = c->window_tokens;
    info->num_windows = c->num_windows;
    info->cdf_bins = c->cdf_bins;
    info->version_major = KVC_CONTAINER_VERSION_MAJOR;
    info->version_minor = c->version_minor;
    info->raw_cdf = !!(c->flags & KVC_CONTAINER_FLAG_RAW_CDF);
    info->heads_known = !(c->flags & KVC_CONTAINER_FLAG_NO_HEADS);
    info->container_bytes = len;
    info->original_bytes = chunk_bytes(c);
    info->scales_bytes = kvc_container_num_scales(c) * dsize;
    info->key_scaling = c->flags & KVC_CONTAINER_FLAG_CHANNEL_KEYS ? KVC_CODEC_SCALE_CHANNEL : KVC_CODEC_SCALE_TOKEN;
    char why[160];
    info->lmcache_readable = !kvc_codec_lmcache_unreadable(c, why, sizeof(why));
    info->coder = c->flags & KVC_CONTAINER_FLAG_RANS ? KVC_CODER_RANS : KVC_CODER_AC;
    info->meta_bytes = 32 + L;
    info->streams_bytes = c->streams_bytes;
    info->cdf_bytes = 0; /* set by callers that parsed the CDF section */
    info->lengths_bytes = 0;
    info->lmcache_bytes = c->streams_bytes + L * C * (c->cdf_bins + 1u) * 2 + (size_t)c->num_windows * L * C * 4 +
                          info->scales_bytes;
}

KVC_API kvc_status_t kvc_codec_inspect(const void *buf, size_t len, kvc_codec_info_t *info)
{
    if (!buf || !info) return kvc_error(KVC_ERR_INVALID_ARG, "codec inspect: buf and info must not be NULL");
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "codec inspect: no memory");
    kvc_status_t st = kvc_container_parse(buf, len, c, 1);
    if (st == KVC_OK) {
        fill_info(c, len, info);
        /* Section sizes: whatever is not header, META, SCALES or STREAMS is CDF + LENGTHS; split them
         * by re-measuring the lengths' varints. */
        size_t lengths_bytes = 0;
        const size_t n = (size_t)c->num_windows * kvc_container_coded_per_window(c);
        for (size_t i = 0; i < n; i++) for (uint32_t v = c->lengths[i];; v >>= 7) { lengths_bytes++; if (v < 0x80) break; }
        info->lengths_bytes = lengths_bytes;
        info->cdf_bytes = len - KVC_CONTAINER_HEADER_BYTES - 5 * KVC_CONTAINER_SECTION_BYTES - info->meta_bytes -
                          info->scales_bytes - lengths_bytes - info->streams_bytes;
        kvc_container_release(c);
    }
    free(c);
    return st;
}

/* CDF table of a parsed container (S * (cdf_bins + 1) entries): from the counts (or LMCache's raw table). */
static void container_cdf_into(const kvc_container_t *c, size_t S, uint16_t *cdf)
{
    const unsigned B = c->cdf_bins;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF)
        for (size_t i = 0; i < S * (B + 1); i++) cdf[i] = (uint16_t)(c->raw_cdf[2 * i] | (c->raw_cdf[2 * i + 1] << 8));
    else
        for (size_t s = 0; s < S; s++) kvc_cdf_from_hist(c->counts + s * B, 1, B, c->num_tokens, NULL, cdf + s * (B + 1), 1);
}

static kvc_status_t container_cdf(const kvc_container_t *c, size_t S, uint16_t **out)
{
    uint16_t *cdf = malloc(S * (c->cdf_bins + 1u) * sizeof(uint16_t));
    if (!cdf) return kvc_error(KVC_ERR_NO_MEMORY, "codec: no memory for the CDF table");
    container_cdf_into(c, S, cdf);
    *out = cdf;
    return KVC_OK;
}

/* Decode a parsed container into out. */
static kvc_status_t decode_container(kvc_context_t *ctx, kvc_container_t *c, void *out, const kvc_codec_decode_params_t *p)
{
    const int report = p && (p->field_mask & KVC_CODEC_DECODE_PARAM_PROGRESS) && p->progress;
    const dims_t d = { c->kvs, (size_t)c->kvs * c->num_layers, c->num_tokens, (size_t)c->num_heads * c->head_size };
    const size_t L = d.layers, T = d.tokens, C = d.channels, S = L * C, W = c->window_tokens;
    const size_t tw_max = T < W ? T : W, nscales = kvc_container_num_scales(c);
    const int chan = !!(c->flags & KVC_CONTAINER_FLAG_CHANNEL_KEYS);
    scratch_t *sc = scratch_acquire(ctx);
    uint8_t *symbols = NULL, *win = NULL;
    int64_t *prefsum = NULL;
    float *scales = NULL;
    uint16_t *cdf = NULL, fbuf[KVC_RANS_FREQ_STACK], *freq = NULL;
    const int rans = !!(c->flags & KVC_CONTAINER_FLAG_RANS); /* the parse refused rANS with a raw CDF */
    const int windowed = c->num_windows > 1 && !rans;       /* rANS decodes windows in place (a layer stride) */
    if (sc) {
        symbols = scratch_get(sc, SC_SYMBOLS, L * T * C);
        win = windowed ? scratch_get(sc, SC_WINDOW, L * tw_max * C) : NULL;
        /* end offsets: a window's streams (ac), every window's (rANS decodes its full windows in one call) */
        const size_t nends = rans ? (size_t)c->num_windows * kvc_container_coded_per_window(c) : S;
        prefsum = scratch_get(sc, SC_PREFSUM, nends * sizeof(int64_t));
        scales = scratch_get(sc, SC_SCALES, nscales * sizeof(float));
        if (!rans) cdf = scratch_get(sc, SC_CDF, S * (c->cdf_bins + 1u) * sizeof(uint16_t));
    }
    kvc_status_t st = KVC_OK;
    if (!sc || !symbols || (windowed && !win) || !prefsum || !scales || (!rans && !cdf)) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "codec decode: no memory for a %zu x %zu x %zu chunk", L, T, C);
        goto done;
    }
    uint32_t bins[2 * 4096];
    for (size_t i = 0; i < L; i++) bins[i] = c->bins[i];
    /* rANS, per-token scales, every window in one decode call, and the dequantiser on the CPU
     * backend (host output): the backend dequantises in the decode's thread team
     * (then_dequantise), one fork and join less. */
    struct kvc_quant_args then_dq, *then = NULL;
    if (rans && !chan && (T % W == 0 || T < W)) {
        const kvc_quant_params_t q = { .dtype = (kvc_dtype_t)c->dtype, .values = out, .symbols = symbols, .scales = scales,
                                       .bins = bins, .layers = L, .tokens = T, .channels = C };
        kvc_route_t to;
        if ((st = kvc_dequantise_route(ctx, &q, &then_dq, &to)) != KVC_OK) goto done;
        if (to.b == cpu_backend(ctx)) then = &then_dq;
    }
    team_extras_t x = { .dq = then };
    /* rANS: the backend's decode tasks make their own tables from the counts (no team for them) */
    if (rans) freq = kvc_rans_freq_make(T, S * c->cdf_bins, fbuf);
    else container_cdf_into(c, S, cdf);
    /* The scales, validated by the parse; 2-byte ones with `then` by the decode's team, a block's
     * by the thread that dequantises it (then_scales) */
    x.dq_scales = then && c->dtype != KVC_DTYPE_F32 ? c->scales : NULL;
    if (c->dtype == KVC_DTYPE_F32) memcpy(scales, c->scales, nscales * sizeof(float));
    else if (!x.dq_scales) kvc_halfs_to_f32(c->scales, nscales, c->dtype == KVC_DTYPE_BF16, scales);
    const size_t NS = kvc_container_coded_per_window(c);
    size_t off = 0;
    for (uint32_t w = 0; w < c->num_windows; w++) {
        const size_t t0 = (size_t)w * W, tw = T - t0 < W ? T - t0 : W;
        if (rans) { /* the windows of W tokens in one call, then a shorter last one */
            const size_t nw = tw == W ? (T - t0) / W : 1;
            st = rans_decode_windows(ctx, c->streams + off, c->lengths + (size_t)w * NS, prefsum, nw, L, tw, C,
                                     c->counts, freq, T, c->cdf_bins, symbols + t0 * C, T * C, &x);
            if (st != KVC_OK) goto done;
            off += (size_t)prefsum[nw * NS - 1];
            for (size_t i = 1; report && i <= nw; i++) p->progress(p->progress_user, w + i, c->num_windows + 1u); /* a call a window */
            w += (uint32_t)nw - 1;
            continue;
        }
        int64_t sum = 0;
        for (size_t s = 0; s < S; s++) prefsum[s] = sum += c->lengths[(size_t)w * S + s];
        kvc_cg_decode_packed_params_t a = { .cdf = cdf, .bytes = c->streams + off, .nbytes = (size_t)sum, .prefsum = prefsum,
                                       .symbols = win ? win : symbols, .layers = L, .tokens = tw, .channels = C,
                                       .num_bins = c->cdf_bins };
        if ((st = kvc_cg_decode_packed(ctx, &a)) != KVC_OK) goto done;
        if (win) window_copy(win, symbols, &d, t0, tw, 0, ctx->num_threads);
        off += (size_t)sum;
        if (report) p->progress(p->progress_user, w + 1u, c->num_windows + 1u);
    }
    if (!then) st = quant_chunk(ctx, sc, (kvc_dtype_t)c->dtype, out, symbols, scales, bins, &d, chan, 1, rans);
    if (st == KVC_ERR_OUT_OF_RANGE) /* a symbol above 2M can only come from corrupt streams */
        st = kvc_error(KVC_ERR_CORRUPT, "container streams decode to symbols outside the quantiser's range");
    if (st == KVC_OK && report) p->progress(p->progress_user, c->num_windows + 1u, c->num_windows + 1u);
done:
    kvc_rans_freq_done(freq, fbuf);
    scratch_release(sc);
    return st;
}

KVC_API kvc_status_t kvc_codec_decode(kvc_context_t *ctx, const void *buf, size_t len, void *out, size_t out_bytes,
                                      kvc_codec_info_t *info)
{
    return kvc_codec_decode_ex(ctx, buf, len, out, out_bytes, NULL, info);
}

KVC_API kvc_status_t kvc_codec_decode_ex(kvc_context_t *ctx, const void *buf, size_t len, void *out, size_t out_bytes,
                                         const kvc_codec_decode_params_t *p, kvc_codec_info_t *info)
{
    if (!ctx || !buf || !out) return kvc_error(KVC_ERR_INVALID_ARG, "codec decode: ctx, buf and out must not be NULL");
    if (p && (p->field_mask & ~(uint64_t)KVC_CODEC_DECODE_PARAM_PROGRESS))
        return kvc_error(KVC_ERR_INVALID_ARG, "codec decode: field_mask 0x%llx has bits no field is defined for",
                         (unsigned long long)p->field_mask);
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "codec decode: no memory");
    kvc_status_t st = kvc_container_parse(buf, len, c, ctx->num_threads); /* a corrupt container says so first */
    if (st != KVC_OK) goto done;
    if (out_bytes < chunk_bytes(c))
        st = kvc_error(KVC_ERR_NO_SPACE, "codec decode: output of %zu bytes, the chunk needs %zu", out_bytes, chunk_bytes(c));
    else st = decode_container(ctx, c, out, p);
    if (st == KVC_OK && info) fill_info(c, len, info);
done:
    kvc_container_release(c);
    free(c);
    return st;
}

KVC_API kvc_status_t kvc_codec_decode_alloc(kvc_context_t *ctx, const void *buf, size_t len, kvc_tensor_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "codec decode: out must not be NULL");
    kvc_codec_info_t info;
    kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    if (st != KVC_OK) return st;
    kvc_tensor_t t;
    size_t shape[4] = { 2, info.num_layers, info.num_tokens, info.num_heads * info.head_size };
    if (info.layout == KVC_CODEC_MLA) st = kvc_tensor_alloc(&t, info.dtype, 3, shape + 1);
    else st = kvc_tensor_alloc(&t, info.dtype, 4, shape);
    if (st != KVC_OK) return st;
    st = kvc_codec_decode(ctx, buf, len, t.data, t.nbytes, NULL);
    if (st != KVC_OK) {
        kvc_tensor_free(&t);
        return st;
    }
    *out = t;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_codec_layer_stats(const void *buf, size_t len, kvc_codec_layer_stats_t *stats, size_t count)
{
    if (!buf || !stats) return kvc_error(KVC_ERR_INVALID_ARG, "codec stats: buf and stats must not be NULL");
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "codec stats: no memory");
    kvc_status_t st = kvc_container_parse(buf, len, c, 1);
    if (st != KVC_OK) goto done;
    const size_t L = (size_t)c->kvs * c->num_layers, C = (size_t)c->num_heads * c->head_size, S = L * C, T = c->num_tokens;
    if (count < L) {
        st = kvc_error(KVC_ERR_NO_SPACE, "codec stats: room for %zu layers, the container has %zu", count, L);
        goto done;
    }
    uint16_t *cdf = NULL;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF && (st = container_cdf(c, S, &cdf)) != KVC_OK) goto done;
    const size_t NS = kvc_container_coded_per_window(c), per_layer = NS / L; /* C streams, or C/32 with rANS */
    for (size_t l = 0; l < L; l++) {
        uint64_t bytes = 0;
        double h = 0;
        for (uint32_t w = 0; w < c->num_windows; w++)
            for (size_t k = 0; k < per_layer; k++) bytes += c->lengths[(size_t)w * NS + l * per_layer + k];
        for (size_t ch = 0; ch < C; ch++) {
            const size_t s = l * C + ch;
            for (unsigned b = 0; b < c->cdf_bins; b++) {
                /* Probabilities from counts, or (imported table) from the CDF's widths. */
                const double pr = cdf ? (double)((b + 1u < c->cdf_bins ? cdf[s * (c->cdf_bins + 1u) + b + 1] : 65536u) -
                                                 cdf[s * (c->cdf_bins + 1u) + b]) / 65536.0
                                      : (double)c->counts[s * c->cdf_bins + b] / (double)T;
                if (pr > 0) h -= pr * log2(pr);
            }
        }
        stats[l] = (kvc_codec_layer_stats_t){ .plane = (unsigned)(l / c->num_layers), .layer = (unsigned)(l % c->num_layers),
                                              .bins = c->bins[l], .bits_per_symbol = 8.0 * (double)bytes / (double)(T * C),
                                              .entropy_bits = h / (double)C };
    }
    free(cdf);
done:
    kvc_container_release(c);
    free(c);
    return st;
}
