/* CacheGen codec: quantise -> counts/CDF -> windowed arithmetic coding -> .kvc container, and back.
 * All heavy lifting goes through the selected backend's ops (kvc_quantise, kvc_cg_encode,
 * kvc_cg_decode_packed, kvc_dequantise); this file only shapes the data and the container. */
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
#include "internal.h"

#define DEFAULT_WINDOW KVC_CODEC_LMCACHE_WINDOW

typedef struct {
    size_t planes, layers, tokens, channels; /* layers = planes * NL */
} dims_t;

static float scale_load(const void *p, size_t i, uint8_t dt)
{
    if (dt == KVC_DTYPE_F32) { float f; memcpy(&f, (const uint8_t *)p + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, 2);
    return dt == KVC_DTYPE_F16 ? kvc_f16_to_f32(h) : kvc_bf16_to_f32(h);
}

static void scale_store(void *p, size_t i, uint8_t dt, float f)
{
    if (dt == KVC_DTYPE_F32) { memcpy((uint8_t *)p + 4 * i, &f, 4); return; }
    const uint16_t h = dt == KVC_DTYPE_F16 ? kvc_f32_to_f16(f) : kvc_f32_to_bf16(f);
    memcpy((uint8_t *)p + 2 * i, &h, 2);
}

/* Symbols of window [t0, t0+tw) of every layer, gathered into a contiguous [layers, tw, C] block
 * (the coder's tensor shape), or scattered back. */
static void window_copy(uint8_t *win, uint8_t *all, const dims_t *d, size_t t0, size_t tw, int gather)
{
    const size_t row = tw * d->channels;
#pragma omp parallel for schedule(static)
    for (size_t l = 0; l < d->layers; l++) {
        uint8_t *a = all + (l * d->tokens + t0) * d->channels, *w = win + l * row;
        if (gather) memcpy(w, a, row);
        else memcpy(a, w, row);
    }
}

static kvc_status_t check_params(const kvc_codec_params_t *p, dims_t *d, uint32_t *bins, unsigned *cdf_bins,
                                 uint32_t *window)
{
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
    return KVC_OK;
}

KVC_API kvc_status_t kvc_codec_encode(kvc_context_t *ctx, const kvc_codec_params_t *p, const void *kv, uint8_t **out,
                                      size_t *out_len)
{
    if (!ctx || !p || !kv || !out || !out_len)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec encode: ctx, params, kv, out and out_len must not be NULL");
    dims_t d;
    uint32_t bins[2 * 4096];
    unsigned B;
    uint32_t W;
    kvc_status_t st = check_params(p, &d, bins, &B, &W);
    if (st != KVC_OK) return st;
    const size_t L = d.layers, T = d.tokens, C = d.channels, S = L * C;
    const uint32_t nwin = (uint32_t)((T + W - 1) / W);
    const size_t tw_max = T < W ? T : W, cap = kvc_cg_encode_bound(tw_max);

    kvc_container_t *c = calloc(1, sizeof(*c));
    /* One window (the common 256-token chunk): the coder reads the symbols in place. */
    uint8_t *symbols = malloc(L * T * C), *win = nwin > 1 ? malloc(L * tw_max * C) : NULL, *streams = malloc(S * cap);
    float *scales = malloc(L * T * sizeof(float));
    void *scales_dt = malloc(L * T * 4);
    uint16_t *cdf = malloc(S * (B + 1) * sizeof(uint16_t));
    int32_t *lens = malloc(S * sizeof(int32_t));
    uint8_t *packed = NULL, *buf = NULL;
    size_t packed_len = 0, packed_cap = 0;
    if (c) {
        c->counts = calloc(S * B, sizeof(uint32_t));
        c->lengths = malloc((size_t)nwin * S * sizeof(uint32_t));
    }
    if (!c || !symbols || (nwin > 1 && !win) || !streams || !scales || !scales_dt || !cdf || !lens || !c->counts || !c->lengths) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for a %zu x %zu x %zu chunk", L, T, C);
        goto done;
    }

    kvc_quant_params_t q = { .dtype = p->dtype, .values = (void *)kv, .symbols = symbols, .scales = scales, .bins = bins,
                           .layers = L, .tokens = T, .channels = C };
    if ((st = kvc_quantise(ctx, &q)) != KVC_OK) goto done;

    /* Counts over the whole chunk (stored in the container), then LMCache's CDF from them. */
#pragma omp parallel for schedule(static)
    for (size_t l = 0; l < L; l++) {
        uint32_t *cnt = c->counts + l * C * B;
        for (size_t t = 0; t < T; t++) {
            const uint8_t *row = symbols + (l * T + t) * C;
            for (size_t ch = 0; ch < C; ch++) cnt[ch * B + row[ch]]++;
        }
        for (size_t ch = 0; ch < C; ch++) kvc_cdf_from_hist(cnt + ch * B, 1, B, T, NULL, cdf + (l * C + ch) * (B + 1), 1);
    }

    for (uint32_t w = 0; w < nwin; w++) {
        const size_t t0 = (size_t)w * W, tw = T - t0 < W ? T - t0 : W;
        if (win) window_copy(win, symbols, &d, t0, tw, 1);
        kvc_cg_encode_params_t e = { .cdf = cdf, .symbols = win ? win : symbols, .streams = streams, .lengths = lens, .layers = L, .tokens = tw,
                                .channels = C, .capacity = cap, .num_bins = B };
        if ((st = kvc_cg_encode(ctx, &e)) != KVC_OK) goto done;
        size_t add = 0;
        for (size_t s = 0; s < S; s++) add += (size_t)lens[s];
        if (packed_len + add > packed_cap) {
            packed_cap = (packed_len + add) * 2 + 4096;
            uint8_t *np = realloc(packed, packed_cap);
            if (!np) { st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for coded streams"); goto done; }
            packed = np;
        }
        for (size_t s = 0; s < S; s++) {
            memcpy(packed + packed_len, streams + s * cap, (size_t)lens[s]);
            packed_len += (size_t)lens[s];
            c->lengths[(size_t)w * S + s] = (uint32_t)lens[s];
        }
        if ((p->field_mask & KVC_CODEC_PARAM_PROGRESS) && p->progress) p->progress(p->progress_user, w + 1u, nwin);
    }

    const uint8_t dt = (uint8_t)p->dtype;
    for (size_t i = 0; i < L * T; i++) scale_store(scales_dt, i, dt, scales[i]);
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
    c->scales_bytes = L * T * (dt == KVC_DTYPE_F32 ? 4 : 2);
    c->streams = packed ? packed : (const uint8_t *)"";
    c->streams_bytes = packed_len;
    size_t total;
    if ((st = kvc_container_size(c, &total)) != KVC_OK) goto done;
    if (!(buf = malloc(total))) { st = kvc_error(KVC_ERR_NO_MEMORY, "codec encode: no memory for %zu bytes", total); goto done; }
    if ((st = kvc_container_write(c, buf, total, out_len)) != KVC_OK) goto done;
    *out = buf;
    buf = NULL;
done:
    if (c) kvc_container_release(c);
    free(c);
    free(symbols);
    free(win);
    free(streams);
    free(scales);
    free(scales_dt);
    free(cdf);
    free(lens);
    free(packed);
    free(buf);
    return st;
}

KVC_API void kvc_codec_free(void *p) { free(p); }

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
    info->original_bytes = L * c->num_tokens * C * dsize;
    info->scales_bytes = L * c->num_tokens * dsize;
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
    kvc_status_t st = kvc_container_parse(buf, len, c);
    if (st == KVC_OK) {
        fill_info(c, len, info);
        /* Section sizes: whatever is not header, META, SCALES or STREAMS is CDF + LENGTHS; split them
         * by re-measuring the lengths' varints. */
        size_t lengths_bytes = 0;
        const size_t n = (size_t)c->num_windows * kvc_container_streams_per_window(c);
        for (size_t i = 0; i < n; i++) for (uint32_t v = c->lengths[i];; v >>= 7) { lengths_bytes++; if (v < 0x80) break; }
        info->lengths_bytes = lengths_bytes;
        info->cdf_bytes = len - KVC_CONTAINER_HEADER_BYTES - 5 * KVC_CONTAINER_SECTION_BYTES - info->meta_bytes -
                          info->scales_bytes - lengths_bytes - info->streams_bytes;
        kvc_container_release(c);
    }
    free(c);
    return st;
}

/* CDF table of a parsed container: from the counts (or LMCache's raw table). */
static kvc_status_t container_cdf(const kvc_container_t *c, size_t S, uint16_t **out)
{
    const unsigned B = c->cdf_bins;
    uint16_t *cdf = malloc(S * (B + 1) * sizeof(uint16_t));
    if (!cdf) return kvc_error(KVC_ERR_NO_MEMORY, "codec decode: no memory for the CDF table");
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF)
        for (size_t i = 0; i < S * (B + 1); i++) cdf[i] = (uint16_t)(c->raw_cdf[2 * i] | (c->raw_cdf[2 * i + 1] << 8));
    else
        for (size_t s = 0; s < S; s++) kvc_cdf_from_hist(c->counts + s * B, 1, B, c->num_tokens, NULL, cdf + s * (B + 1), 1);
    *out = cdf;
    return KVC_OK;
}

static kvc_status_t decode_container(kvc_context_t *ctx, const kvc_container_t *c, void *out)
{
    const dims_t d = { c->kvs, (size_t)c->kvs * c->num_layers, c->num_tokens, (size_t)c->num_heads * c->head_size };
    const size_t L = d.layers, T = d.tokens, C = d.channels, S = L * C, W = c->window_tokens;
    const size_t tw_max = T < W ? T : W;
    uint16_t *cdf = NULL;
    uint8_t *symbols = malloc(L * T * C), *win = c->num_windows > 1 ? malloc(L * tw_max * C) : NULL;
    int64_t *prefsum = malloc(S * sizeof(int64_t));
    float *scales = malloc(L * T * sizeof(float));
    kvc_status_t st = KVC_OK;
    if (!symbols || (c->num_windows > 1 && !win) || !prefsum || !scales) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "codec decode: no memory for a %zu x %zu x %zu chunk", L, T, C);
        goto done;
    }
    if ((st = container_cdf(c, S, &cdf)) != KVC_OK) goto done;
    size_t off = 0;
    for (uint32_t w = 0; w < c->num_windows; w++) {
        const size_t t0 = (size_t)w * W, tw = T - t0 < W ? T - t0 : W;
        int64_t sum = 0;
        for (size_t s = 0; s < S; s++) prefsum[s] = sum += c->lengths[(size_t)w * S + s];
        kvc_cg_decode_packed_params_t a = { .cdf = cdf, .bytes = c->streams + off, .nbytes = (size_t)sum, .prefsum = prefsum,
                                       .symbols = win ? win : symbols, .layers = L, .tokens = tw, .channels = C,
                                       .num_bins = c->cdf_bins };
        if ((st = kvc_cg_decode_packed(ctx, &a)) != KVC_OK) goto done;
        if (win) window_copy(win, symbols, &d, t0, tw, 0);
        off += (size_t)sum;
    }
    for (size_t i = 0; i < L * T; i++) {
        scales[i] = scale_load(c->scales, i, c->dtype);
        if (!(scales[i] >= 0.0f) || isinf(scales[i])) {
            st = kvc_error(KVC_ERR_CORRUPT, "container scale %zu is %g (must be finite and >= 0)", i, (double)scales[i]);
            goto done;
        }
    }
    uint32_t bins[2 * 4096];
    for (size_t i = 0; i < L; i++) bins[i] = c->bins[i];
    kvc_quant_params_t q = { .dtype = (kvc_dtype_t)c->dtype, .values = out, .symbols = symbols, .scales = scales, .bins = bins,
                           .layers = L, .tokens = T, .channels = C };
    st = kvc_dequantise(ctx, &q);
    if (st == KVC_ERR_OUT_OF_RANGE) /* a symbol above 2M can only come from corrupt streams */
        st = kvc_error(KVC_ERR_CORRUPT, "container streams decode to symbols outside the quantiser's range");
done:
    free(cdf);
    free(symbols);
    free(win);
    free(prefsum);
    free(scales);
    return st;
}

KVC_API kvc_status_t kvc_codec_decode(kvc_context_t *ctx, const void *buf, size_t len, void *out, size_t out_bytes,
                                      kvc_codec_info_t *info)
{
    if (!ctx || !buf || !out) return kvc_error(KVC_ERR_INVALID_ARG, "codec decode: ctx, buf and out must not be NULL");
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "codec decode: no memory");
    kvc_status_t st = kvc_container_parse(buf, len, c);
    if (st != KVC_OK) goto done;
    kvc_codec_info_t local;
    fill_info(c, len, &local);
    if (out_bytes < local.original_bytes) {
        st = kvc_error(KVC_ERR_NO_SPACE, "codec decode: output of %zu bytes, the chunk needs %zu", out_bytes, local.original_bytes);
        goto done;
    }
    st = decode_container(ctx, c, out);
    if (st == KVC_OK && info) *info = local;
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
    kvc_status_t st = kvc_container_parse(buf, len, c);
    if (st != KVC_OK) goto done;
    const size_t L = (size_t)c->kvs * c->num_layers, C = (size_t)c->num_heads * c->head_size, S = L * C, T = c->num_tokens;
    if (count < L) {
        st = kvc_error(KVC_ERR_NO_SPACE, "codec stats: room for %zu layers, the container has %zu", count, L);
        goto done;
    }
    uint16_t *cdf = NULL;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF && (st = container_cdf(c, S, &cdf)) != KVC_OK) goto done;
    for (size_t l = 0; l < L; l++) {
        uint64_t bytes = 0;
        double h = 0;
        for (size_t ch = 0; ch < C; ch++) {
            const size_t s = l * C + ch;
            for (uint32_t w = 0; w < c->num_windows; w++) bytes += c->lengths[(size_t)w * S + s];
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
