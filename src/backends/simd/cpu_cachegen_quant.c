/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU quantise / dequantise (docs/LMCACHE.md with defined edge cases, see cachegen.h): the OpenMP
 * drivers and the scalar row kernels every ISA must match bit for bit. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/half.h"
#include "cpu_cachegen.h"
#include "cpu_codec.h"

static inline float load_value(kvc_dtype_t dt, const void *x, size_t i)
{
    switch (dt) {
    case KVC_DTYPE_F16: return kvc_f16_to_f32(((const uint16_t *)x)[i]);
    case KVC_DTYPE_BF16: return kvc_bf16_to_f32(((const uint16_t *)x)[i]);
    default: return ((const float *)x)[i];
    }
}

static inline void store_value(kvc_dtype_t dt, void *x, size_t i, float v)
{
    switch (dt) {
    case KVC_DTYPE_F16: ((uint16_t *)x)[i] = kvc_f32_to_f16(v); break;
    case KVC_DTYPE_BF16: ((uint16_t *)x)[i] = kvc_f32_to_bf16(v); break;
    default: ((float *)x)[i] = v; break;
    }
}

/* ------------------------------------------------------------------ scalar rows */

float cg_row_absmax_scalar(kvc_dtype_t dtype, const void *x, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float v = fabsf(load_value(dtype, x, i));
        if (v < INFINITY && v > m) m = v; /* NaN and inf compare false */
    }
    return m;
}

void cg_quantise_row_scalar(kvc_dtype_t dtype, const cg_quant_row_t *r, float scale)
{
    const float m = (float)r->m, f = cg_prescale(scale);
    const float inv = scale > 0.0f ? m / (scale * f) : 0.0f;
    uint8_t *q = r->out;
    for (size_t i = 0; i < r->channels; i++) {
        float y = load_value(dtype, r->in, i) * f * inv;
        if (y != y) y = 0.0f; /* NaN, or inf in a row whose scale is 0 */
        y = y < -m ? -m : y > m ? m : y;
        q[i] = (uint8_t)((int)nearbyintf(y) + (int)r->m);
    }
}

void cg_quantise_rows_scalar(kvc_dtype_t dtype, const cg_quant_rows_t *r)
{
    const size_t es = dtype == KVC_DTYPE_F32 ? 4 : 2;
    for (size_t i = 0; i < r->rows; i++) {
        const void *x = (const char *)r->in + i * r->channels * es;
        const cg_quant_row_t row = { .in = x, .out = r->out + i * r->channels, .channels = r->channels, .m = r->m };
        const float scale = cg_row_absmax_scalar(dtype, x, r->channels);
        cg_quantise_row_scalar(dtype, &row, scale);
        r->scales[i] = scale;
    }
}

void cg_dequantise_row_scalar(kvc_dtype_t dtype, const cg_quant_row_t *r, float scale)
{
    const float f = cg_prescale(scale), step = scale * f / (float)r->m, unscale = 1.0f / f;
    const uint8_t *q = r->in;
    for (size_t i = 0; i < r->channels; i++)
        store_value(dtype, r->out, i, (float)((int)q[i] - (int)r->m) * step * unscale);
}

void cg_dequantise_rows_scalar(kvc_dtype_t dtype, const cg_dequant_rows_t *r)
{
    const size_t es = dtype == KVC_DTYPE_F32 ? 4 : 2;
    for (size_t i = 0; i < r->rows; i++) {
        const cg_quant_row_t row = { .in = r->in + i * r->channels, .out = (char *)r->out + i * r->channels * es,
                                     .channels = r->channels, .m = r->m };
        cg_dequantise_row_scalar(dtype, &row, r->scales[i]);
    }
}

/* ------------------------------------------------------------------ drivers */

static size_t dtype_size(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

/* Tokens per quantise or dequantise task: blocks of ~8 K values of one layer (one bin count; for
 * the dequantiser one bound, one scan). */
#define CG_QUANT_BLOCK_VALUES 8192u

kvc_status_t cpu_quantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a)
{
    const cg_kernels_t *k = cg_kernels_for(b);
    const size_t T = a->tokens, C = a->channels, rows = a->layers * T, es = dtype_size(a->dtype);
    const size_t tb = C >= CG_QUANT_BLOCK_VALUES ? 1 : CG_QUANT_BLOCK_VALUES / C, nb = (T + tb - 1) / tb;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) if (rows * C >= CG_PARALLEL_MIN)
    for (size_t j = 0; j < a->layers * nb; j++) {
        const size_t l = j / nb, t0 = j % nb * tb, row0 = l * T + t0;
        const cg_quant_rows_t r = { .in = (const char *)a->values + row0 * C * es, .out = a->symbols + row0 * C,
                                    .scales = a->scales + row0, .rows = T - t0 < tb ? T - t0 : tb, .channels = C,
                                    .m = a->bins[l] / 2 - 1 };
        k->quantise_rows(a->dtype, &r);
    }
    return KVC_OK;
}

/* The dequantise slot (trusted 0) and the codec's kvc_cpu_dequantise_trusted (cpu_codec.h). */
static kvc_status_t dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a, int trusted)
{
    const size_t T = a->tokens, C = a->channels, rows = a->layers * T;
    const size_t tb = C >= CG_QUANT_BLOCK_VALUES ? 1 : CG_QUANT_BLOCK_VALUES / C, nb = (T + tb - 1) / tb;
    const size_t tasks = a->layers * nb, checked = trusted ? 0 : tasks; /* blocks the scan below looks at */
    /* Validate everything first so nothing is written on error: a block's symbols in one scan
     * (they share the layer's bound), the exact index only when it finds one. Not when the core
     * vouches for the data (trusted: the codec's rANS decode, whose container parse checked every
     * scale and every stream's symbol range). */
    size_t bad_scale = rows, bad_sym = rows * C;
#pragma omp parallel for schedule(static) num_threads(b->num_threads) reduction(min : bad_scale, bad_sym) \
    if (checked && rows * C >= CG_PARALLEL_MIN)
    for (size_t j = 0; j < checked; j++) {
        const size_t l = j / nb, t0 = j % nb * tb, n = T - t0 < tb ? T - t0 : tb, row0 = l * T + t0;
        if (kvc_scales_bad32(a->scales + row0, n))
            for (size_t r = row0; r < row0 + n; r++) {
                const float s = a->scales[r];
                if (!(s >= 0.0f && s < INFINITY)) {
                    if (r < bad_scale) bad_scale = r;
                    break;
                }
            }
        const unsigned top = 2 * (a->bins[l] / 2 - 1);
        const uint8_t *q = a->symbols + row0 * C;
        if (cg_any_at_least(q, n * C, (uint8_t)(top + 1)))
            for (size_t i = 0; i < n * C; i++)
                if (q[i] > top) {
                    if (row0 * C + i < bad_sym) bad_sym = row0 * C + i;
                    break;
                }
    }
    if (bad_scale < rows)
        return b->svc->set_error(KVC_ERR_INVALID_ARG, "dequantise: scales[%zu] (layer %zu, token %zu) = %g is not a finite value >= 0",
                                 bad_scale, bad_scale / T, bad_scale % T, (double)a->scales[bad_scale]);
    if (bad_sym < rows * C) {
        const size_t l = bad_sym / C / T;
        return b->svc->set_error(KVC_ERR_OUT_OF_RANGE,
                                 "dequantise: symbols[%zu] (layer %zu, token %zu, channel %zu) = %u is above 2M = %u "
                                 "for %u bins",
                                 bad_sym, l, bad_sym / C % T, bad_sym % C, a->symbols[bad_sym],
                                 2 * (a->bins[l] / 2 - 1), a->bins[l]);
    }
#pragma omp parallel num_threads(b->num_threads) if (rows * C >= CG_PARALLEL_MIN)
    cpu_dequantise_blocks(b, a, NULL);
    return KVC_OK;
}

kvc_status_t cpu_dequantise(kvc_backend_ctx_t *b, const struct kvc_quant_args *a) { return dequantise(b, a, 0); }

kvc_status_t kvc_cpu_dequantise_trusted(kvc_backend_ctx_t *b, const struct kvc_quant_args *a) { return dequantise(b, a, 1); }

void cpu_dequantise_blocks(kvc_backend_ctx_t *b, const struct kvc_quant_args *a, const uint8_t *halves)
{
    const cg_kernels_t *k = cg_kernels_for(b);
    const size_t T = a->tokens, C = a->channels, es = dtype_size(a->dtype);
    const size_t tb = C >= CG_QUANT_BLOCK_VALUES ? 1 : CG_QUANT_BLOCK_VALUES / C, nb = (T + tb - 1) / tb;
#pragma omp for schedule(static) nowait /* both callers end their parallel region next: its barrier is enough */
    for (size_t j = 0; j < a->layers * nb; j++) {
        const size_t l = j / nb, t0 = j % nb * tb, row0 = l * T + t0, rows = T - t0 < tb ? T - t0 : tb;
        if (halves) k->halves_to_f32(halves + 2 * row0, rows, a->dtype == KVC_DTYPE_BF16, a->scales + row0);
        const cg_dequant_rows_t r = { .in = a->symbols + row0 * C, .out = (char *)a->values + row0 * C * es, .scales = a->scales + row0,
                                      .rows = rows, .channels = C, .m = a->bins[l] / 2 - 1 };
        k->dequantise_rows(a->dtype, &r);
    }
}
