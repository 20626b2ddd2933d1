/* SPDX-License-Identifier: BSD-3-Clause */
/* Rate target (KVC_CODEC_PARAM_BITS): per-(plane, layer) bins that minimise a model-free distortion
 * estimate under a size budget. For every (plane, layer) and every even bin count in [4, 62] the
 * chunk is quantised as the per-token quantiser does (fp32 here: an estimate, not the coded
 * symbols), giving
 *   D(b) = the sum of squared errors over the (plane, layer), in the cache's own units (so a plane
 *          of larger values, typically the keys, gets more bins; bench/quality's tuning set chose it
 *          over the error relative to each layer's energy, which starved the keys), and
 *   R(b) = sum over channels of T * H(symbols) + an estimate of the stored counts' cost (bits).
 * A Lagrange multiplier then picks, per (plane, layer), the b minimising D + lambda R, with the
 * largest total R within the budget (bisection on lambda). docs/CACHEGEN.md "Rate target". */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "common/half.h"
#include "internal.h"

#define RATE_NB ((KVC_CODEC_RATE_MAX_BINS - 4) / 2 + 1) /* candidates 4, 6, ..., 62 */

static float load(const void *p, size_t i, kvc_dtype_t dt)
{
    if (dt == KVC_DTYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, 2);
    return dt == KVC_DTYPE_F16 ? kvc_f16_to_f32(h) : kvc_bf16_to_f32(h);
}

/* D and R of one (plane, layer) [T, C] for every candidate; hist: C * 64 scratch. */
static void layer_curves(const void *kv, kvc_dtype_t dt, size_t l, size_t T, size_t C, float *scale, uint32_t *hist, double *D,
                         double *R)
{
    const size_t base = l * T * C;
    for (size_t t = 0; t < T; t++) {
        float m = 0;
        for (size_t c = 0; c < C; c++) {
            const float x = load(kv, base + t * C + c, dt);
            if (isfinite(x) && fabsf(x) > m) m = fabsf(x);
        }
        scale[t] = m;
    }
    for (int k = 0; k < RATE_NB; k++) {
        const unsigned b = 4 + 2 * (unsigned)k, M = b / 2 - 1;
        memset(hist, 0, C * 64 * sizeof(*hist));
        double err = 0;
        for (size_t t = 0; t < T; t++) {
            const float s = scale[t], f = s > 0 ? (float)M / s : 0, step = s / (float)M;
            for (size_t c = 0; c < C; c++) {
                const float x = load(kv, base + t * C + c, dt);
                long q = (long)M;
                if (isfinite(x)) {
                    q += lrintf(x * f);
                    if (q < 0) q = 0;
                    if (q > (long)(2 * M)) q = (long)(2 * M);
                    const double e = (double)x - (double)((float)(q - (long)M) * step);
                    err += e * e;
                }
                hist[c * 64 + (size_t)q]++;
            }
        }
        double bits = 0;
        for (size_t c = 0; c < C; c++)
            for (unsigned v = 0; v < b; v++) {
                const double n = hist[c * 64 + v];
                /* The stored count: about log2(n) + 2 bits when used, 1 bit when zero. */
                bits += n > 0 ? n * log2((double)T / n) + log2(n + 1) + 2 : 1;
            }
        D[k] = err;
        R[k] = bits;
    }
}

int kvc_codec_rate_bins(const void *kv, kvc_dtype_t dt, size_t L, size_t T, size_t C, double budget_bits, int threads,
                        uint32_t *bins)
{
    double *D = malloc(L * RATE_NB * sizeof(double)), *R = malloc(L * RATE_NB * sizeof(double));
    int fail = !D || !R;
#pragma omp parallel num_threads(threads) reduction(| : fail)
    {
        float *scale = malloc(T * sizeof(float));
        uint32_t *hist = malloc(C * 64 * sizeof(uint32_t));
        if (!scale || !hist) fail = 1;
#pragma omp for schedule(dynamic, 1)
        for (size_t l = 0; l < L; l++)
            if (scale && hist && D && R) layer_curves(kv, dt, l, T, C, scale, hist, D + l * RATE_NB, R + l * RATE_NB);
        free(scale);
        free(hist);
    }
    if (fail) {
        free(D);
        free(R);
        return -1;
    }
    /* Total R is non-increasing in lambda: bisect log(lambda) for the largest R within the budget. */
    double lo = -60, hi = 20, best_r = -1;
    for (size_t l = 0; l < L; l++) bins[l] = 4;
    uint32_t *cand = malloc(L * sizeof(uint32_t));
    if (!cand) {
        free(D);
        free(R);
        return -1;
    }
    for (int it = 0; it < 80; it++) {
        const double mid = 0.5 * (lo + hi), lambda = exp(mid);
        double total = 0;
        for (size_t l = 0; l < L; l++) {
            int bk = 0;
            for (int k = 1; k < RATE_NB; k++)
                if (D[l * RATE_NB + k] + lambda * R[l * RATE_NB + k] < D[l * RATE_NB + bk] + lambda * R[l * RATE_NB + bk]) bk = k;
            cand[l] = 4 + 2 * (uint32_t)bk;
            total += R[l * RATE_NB + bk];
        }
        if (total <= budget_bits) {
            if (total > best_r) {
                best_r = total;
                memcpy(bins, cand, L * sizeof(uint32_t));
            }
            hi = mid; /* smaller lambda: more bits */
        } else lo = mid;
    }
    free(cand);
    free(D);
    free(R);
    return 0;
}
