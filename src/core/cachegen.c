/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen public API: argument validation (pointers, counts, size overflow) once, then the op of
 * the table where the data lives (residence.c). Checks that read the data are the backend's (see
 * backend.h). */
#include "config.h"

#include <stdint.h>

#include <kvcore/backend.h>

#include "common/checked.h"
#include "common/rans.h"
#include "internal.h"

/* No field-mask bit is defined yet (cachegen.h). */
static kvc_status_t check_mask(const char *op, uint64_t mask)
{
    if (mask)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: params.field_mask has unknown bits 0x%llx (built against a newer kvcore?)",
                         op, (unsigned long long)mask);
    return KVC_OK;
}

/* Shape checks shared by every coder op; names the first bad field. */
static kvc_status_t check_shape(const char *op, size_t layers, size_t tokens, size_t channels, unsigned num_bins)
{
    if (layers == 0 || channels == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: layers (%zu) and channels (%zu) must be at least 1", op, layers,
                         channels);
    if (tokens > KVC_CG_MAX_TOKENS)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: tokens %zu above the limit %u", op, tokens, KVC_CG_MAX_TOKENS);
    if (num_bins < 1 || num_bins > KVC_CG_MAX_BINS)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: num_bins %u outside [1, %u]", op, num_bins, KVC_CG_MAX_BINS);
    size_t n;
    if (!kvc_mul3_ok(layers, tokens, channels, &n) || !kvc_mul3_ok(layers, channels, (size_t)num_bins + 1, &n))
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: %zu x %zu x %zu elements overflow size_t", op, layers, tokens,
                         channels);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_cg_cdf(kvc_context_t *ctx, const kvc_cg_cdf_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "cg_cdf: ctx and args must not be NULL");
    kvc_status_t st = check_mask("cg_cdf", a->field_mask);
    if (st == KVC_OK) st = check_shape("cg_cdf", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cdf || (!a->symbols && a->tokens))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_cdf: symbols and cdf must not be NULL");
    const struct kvc_cdf_args op = { .symbols = a->symbols, .cdf = a->cdf, .layers = a->layers, .tokens = a->tokens,
                                     .channels = a->channels, .num_bins = a->num_bins };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "cg_cdf");
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_res_add(&r, "cdf", -1, a->cdf);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->cg_cdf(to.b, &op);
}

KVC_API size_t kvc_cg_encode_bound(size_t tokens)
{
    if (tokens > KVC_CG_MAX_TOKENS) return 0;
    return 2 * tokens + tokens / 32768 + 4;
}

KVC_API kvc_status_t kvc_cg_encode(kvc_context_t *ctx, const kvc_cg_encode_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "cg_encode: ctx and args must not be NULL");
    kvc_status_t st = check_mask("cg_encode", a->field_mask);
    if (st == KVC_OK) st = check_shape("cg_encode", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cdf || !a->lengths || (!a->symbols && a->tokens))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_encode: cdf, symbols and lengths must not be NULL");
    if (a->capacity > INT32_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_encode: capacity %zu above INT32_MAX (lengths are int32)",
                         a->capacity);
    if (!a->streams && a->capacity)
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_encode: streams is NULL with capacity %zu (NULL needs capacity 0)",
                         a->capacity);
    size_t n;
    if (!kvc_mul3_ok(a->layers, a->channels, a->capacity, &n))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_encode: stream buffer of %zu x %zu x %zu bytes overflows size_t",
                         a->layers, a->channels, a->capacity);
    /* Backends always report the longest stream. */
    size_t needed = 0;
    const struct kvc_encode_args op = { .cdf = a->cdf, .symbols = a->symbols, .streams = a->streams,
                                        .lengths = a->lengths, .layers = a->layers, .tokens = a->tokens,
                                        .channels = a->channels, .capacity = a->capacity, .num_bins = a->num_bins,
                                        .needed = a->needed ? a->needed : &needed };
    kvc_residence_t r; /* needed is host memory on every backend */
    kvc_res_init(&r, ctx, "cg_encode");
    kvc_res_add(&r, "cdf", -1, a->cdf);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_res_add(&r, "streams", -1, a->streams);
    kvc_res_add(&r, "lengths", -1, a->lengths);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->cg_encode(to.b, &op);
}

KVC_API kvc_status_t kvc_cg_decode(kvc_context_t *ctx, const kvc_cg_decode_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode: ctx and args must not be NULL");
    kvc_status_t st = check_mask("cg_decode", a->field_mask);
    if (st == KVC_OK) st = check_shape("cg_decode", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cdf || !a->lengths || (!a->symbols && a->tokens) || (!a->streams && a->capacity))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode: cdf, streams, lengths and symbols must not be NULL");
    if (a->capacity > INT32_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode: capacity %zu above INT32_MAX (lengths are int32)",
                         a->capacity);
    size_t n;
    if (!kvc_mul3_ok(a->layers, a->channels, a->capacity, &n))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode: stream buffer of %zu x %zu x %zu bytes overflows size_t",
                         a->layers, a->channels, a->capacity);
    const struct kvc_decode_args op = { .cdf = a->cdf, .streams = a->streams, .lengths = a->lengths,
                                        .symbols = a->symbols, .layers = a->layers, .tokens = a->tokens,
                                        .channels = a->channels, .capacity = a->capacity, .num_bins = a->num_bins };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "cg_decode");
    kvc_res_add(&r, "cdf", -1, a->cdf);
    kvc_res_add(&r, "streams", -1, a->streams);
    kvc_res_add(&r, "lengths", -1, a->lengths);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->cg_decode(to.b, &op);
}

KVC_API kvc_status_t kvc_cg_decode_packed(kvc_context_t *ctx, const kvc_cg_decode_packed_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode_packed: ctx and args must not be NULL");
    kvc_status_t st = check_mask("cg_decode_packed", a->field_mask);
    if (st == KVC_OK) st = check_shape("cg_decode_packed", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cdf || !a->prefsum || (!a->symbols && a->tokens) || (!a->bytes && a->nbytes))
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode_packed: cdf, bytes, prefsum and symbols must not be NULL");
    if (a->nbytes > INT64_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_decode_packed: nbytes %zu above INT64_MAX", a->nbytes);
    const struct kvc_decode_packed_args op = { .cdf = a->cdf, .bytes = a->bytes, .nbytes = a->nbytes,
                                               .prefsum = a->prefsum, .symbols = a->symbols, .layers = a->layers,
                                               .tokens = a->tokens, .channels = a->channels, .num_bins = a->num_bins };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "cg_decode_packed");
    kvc_res_add(&r, "cdf", -1, a->cdf);
    kvc_res_add(&r, "bytes", -1, a->bytes);
    kvc_res_add(&r, "prefsum", -1, a->prefsum);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->cg_decode_packed(to.b, &op);
}

/* ------------------------------------------------------------------ interleaved rANS */

/* The public limit is the codec's window limit (src/common/rans.h cannot include kvcore's headers). */
_Static_assert(KVC_RANS_MAX_TOKENS == KVC_RANS_MAX_WINDOW, "one token limit for rANS streams");

static kvc_status_t check_rans_shape(const char *op, size_t layers, size_t tokens, size_t channels, unsigned num_bins)
{
    if (tokens > KVC_RANS_MAX_TOKENS)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: tokens %zu above the limit %u (KVC_RANS_MAX_TOKENS)", op, tokens,
                         KVC_RANS_MAX_TOKENS);
    return check_shape(op, layers, tokens, channels, num_bins);
}

KVC_API size_t kvc_rans_encode_bound(size_t tokens)
{
    if (tokens > KVC_RANS_MAX_TOKENS) return 0;
    return kvc_rans_bound((size_t)KVC_RANS_GROUP * KVC_RANS_STREAM_GROUPS, tokens);
}

KVC_API kvc_status_t kvc_rans_tables(kvc_context_t *ctx, const kvc_rans_tables_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "rans_tables: ctx and args must not be NULL");
    kvc_status_t st = check_mask("rans_tables", a->field_mask);
    if (st == KVC_OK) st = check_rans_shape("rans_tables", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (a->tokens == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "rans_tables: tokens must be at least 1 (no symbols have no frequencies)");
    if (!a->symbols || !a->cum) return kvc_error(KVC_ERR_INVALID_ARG, "rans_tables: symbols and cum must not be NULL");
    const struct kvc_rans_tables_args op = { .symbols = a->symbols, .cum = a->cum, .layers = a->layers,
                                             .tokens = a->tokens, .channels = a->channels, .num_bins = a->num_bins };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "rans_tables");
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_res_add(&r, "cum", -1, a->cum);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->rans_tables(to.b, &op);
}

KVC_API kvc_status_t kvc_rans_encode(kvc_context_t *ctx, const kvc_rans_encode_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "rans_encode: ctx and args must not be NULL");
    kvc_status_t st = check_mask("rans_encode", a->field_mask);
    if (st == KVC_OK) st = check_rans_shape("rans_encode", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cum || !a->streams || !a->lengths || (!a->symbols && a->tokens))
        return kvc_error(KVC_ERR_INVALID_ARG, "rans_encode: cum, symbols, streams and lengths must not be NULL");
    const size_t need = kvc_rans_encode_bound(a->tokens), Q = kvc_rans_streams(a->channels, KVC_RANS_STREAM_GROUPS);
    if (a->capacity < need || a->capacity > INT32_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG,
                         "rans_encode: capacity %zu outside [kvc_rans_encode_bound(%zu tokens) = %zu, INT32_MAX]",
                         a->capacity, a->tokens, need);
    size_t n;
    if (!kvc_mul3_ok(a->layers, Q, a->capacity, &n))
        return kvc_error(KVC_ERR_INVALID_ARG, "rans_encode: stream buffer of %zu x %zu x %zu bytes overflows size_t",
                         a->layers, Q, a->capacity);
    const struct kvc_rans_encode_args op = { .symbols = a->symbols, .cum = a->cum, .streams = a->streams,
                                             .lengths = a->lengths, .layers = a->layers, .tokens = a->tokens,
                                             .channels = a->channels, .capacity = a->capacity, .num_bins = a->num_bins };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "rans_encode");
    kvc_res_add(&r, "cum", -1, a->cum);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_res_add(&r, "streams", -1, a->streams);
    kvc_res_add(&r, "lengths", -1, a->lengths);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->rans_encode(to.b, &op);
}

KVC_API kvc_status_t kvc_rans_decode(kvc_context_t *ctx, const kvc_rans_decode_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "rans_decode: ctx and args must not be NULL");
    kvc_status_t st = check_mask("rans_decode", a->field_mask);
    if (st == KVC_OK) st = check_rans_shape("rans_decode", a->layers, a->tokens, a->channels, a->num_bins);
    if (st != KVC_OK) return st;
    if (!a->cum || !a->ends || (!a->symbols && a->tokens) || (!a->bytes && a->nbytes))
        return kvc_error(KVC_ERR_INVALID_ARG, "rans_decode: cum, bytes, ends and symbols must not be NULL");
    if (a->nbytes > INT64_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "rans_decode: nbytes %zu above INT64_MAX", a->nbytes);
    const struct kvc_rans_decode_args op = { .bytes = a->bytes, .ends = a->ends, .cum = a->cum, .symbols = a->symbols,
                                             .layers = a->layers, .tokens = a->tokens, .channels = a->channels,
                                             .num_bins = a->num_bins, .nbytes = a->nbytes };
    kvc_residence_t r;
    kvc_res_init(&r, ctx, "rans_decode");
    kvc_res_add(&r, "cum", -1, a->cum);
    kvc_res_add(&r, "bytes", -1, a->bytes);
    kvc_res_add(&r, "ends", -1, a->ends);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_route_t to;
    if ((st = kvc_res_route(&r, &to)) != KVC_OK) return st;
    return to.ops->rans_decode(to.b, &op);
}

static kvc_status_t check_quant(const char *op, const kvc_quant_params_t *a)
{
    kvc_status_t st = check_mask(op, a->field_mask);
    if (st != KVC_OK) return st;
    if (a->layers == 0 || a->channels == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: layers (%zu) and channels (%zu) must be at least 1", op, a->layers,
                         a->channels);
    if (a->dtype != KVC_DTYPE_F16 && a->dtype != KVC_DTYPE_BF16 && a->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: dtype %d is not KVC_DTYPE_F16, KVC_DTYPE_BF16 or KVC_DTYPE_F32", op,
                         (int)a->dtype);
    if (!a->bins) return kvc_error(KVC_ERR_INVALID_ARG, "%s: bins must not be NULL", op);
    for (size_t l = 0; l < a->layers; l++)
        if (a->bins[l] < 4 || a->bins[l] > KVC_CG_MAX_BINS)
            return kvc_error(KVC_ERR_INVALID_ARG, "%s: bins[%zu] = %u outside [4, %u]", op, l, a->bins[l],
                             KVC_CG_MAX_BINS);
    size_t n;
    if (!kvc_mul3_ok(a->layers, a->tokens, a->channels, &n) || !kvc_mul3_ok(n, 4, 1, &n))
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: %zu x %zu x %zu elements overflow size_t", op, a->layers,
                         a->tokens, a->channels);
    if (a->tokens && (!a->values || !a->symbols || !a->scales))
        return kvc_error(KVC_ERR_INVALID_ARG, "%s: values, symbols and scales must not be NULL", op);
    return KVC_OK;
}

static struct kvc_quant_args quant_op(const kvc_quant_params_t *a)
{
    const struct kvc_quant_args op = { .dtype = a->dtype, .values = a->values, .symbols = a->symbols,
                                       .scales = a->scales, .bins = a->bins, .layers = a->layers,
                                       .tokens = a->tokens, .channels = a->channels };
    return op;
}

/* bins is host memory on every backend: it does not take part. */
static kvc_status_t route_quant(kvc_context_t *ctx, const char *op, const kvc_quant_params_t *a, kvc_route_t *to)
{
    kvc_residence_t r;
    kvc_res_init(&r, ctx, op);
    kvc_res_add(&r, "values", -1, a->values);
    kvc_res_add(&r, "symbols", -1, a->symbols);
    kvc_res_add(&r, "scales", -1, a->scales);
    return kvc_res_route(&r, to);
}

KVC_API kvc_status_t kvc_quantise(kvc_context_t *ctx, const kvc_quant_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "quantise: ctx and args must not be NULL");
    kvc_status_t st = check_quant("quantise", a);
    if (st != KVC_OK) return st;
    const struct kvc_quant_args op = quant_op(a);
    kvc_route_t to;
    if ((st = route_quant(ctx, "quantise", a, &to)) != KVC_OK) return st;
    return to.ops->quantise(to.b, &op);
}

kvc_status_t kvc_dequantise_route(kvc_context_t *ctx, const kvc_quant_params_t *a, struct kvc_quant_args *op, kvc_route_t *to)
{
    kvc_status_t st = check_quant("dequantise", a);
    if (st != KVC_OK) return st;
    *op = quant_op(a);
    return route_quant(ctx, "dequantise", a, to);
}

KVC_API kvc_status_t kvc_dequantise(kvc_context_t *ctx, const kvc_quant_params_t *a)
{
    if (!ctx || !a) return kvc_error(KVC_ERR_INVALID_ARG, "dequantise: ctx and args must not be NULL");
    struct kvc_quant_args op;
    kvc_route_t to;
    const kvc_status_t st = kvc_dequantise_route(ctx, a, &op, &to);
    return st != KVC_OK ? st : to.ops->dequantise(to.b, &op);
}

KVC_API kvc_status_t kvc_cg_default_bins(size_t num_layers, uint32_t *bins)
{
    if (!bins || num_layers == 0 || num_layers > SIZE_MAX / 2)
        return kvc_error(KVC_ERR_INVALID_ARG, "cg_default_bins: bins NULL or %zu layers", num_layers);
    const int small = num_layers < 10;
    for (size_t l = 0; l < num_layers; l++) {
        bins[l] = small || l < 10 ? 32 : 16;
        bins[num_layers + l] = small || l < 2 ? 32 : 16;
    }
    return KVC_OK;
}
