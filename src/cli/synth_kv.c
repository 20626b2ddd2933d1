/* SPDX-License-Identifier: BSD-3-Clause */
/* Synthetic KV caches (see synth_kv.h). */
#include <math.h>
#include <stdlib.h>

#include "common/half.h"
#include "synth_kv.h"

/* xorshift64*: fast, deterministic. */
static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}
static double urand(uint64_t *s) { return (double)(next(s) >> 11) / 9007199254740992.0; }
static double nrand(uint64_t *s)
{
    const double u = urand(s) + 1e-300, v = urand(s);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

uint16_t *synth_kv_f16(size_t nl, size_t t, size_t nh, size_t hs, uint64_t seed)
{
    const size_t C = nh * hs, n = 2 * nl * t * C;
    uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
    uint16_t *kv = malloc(n * sizeof(uint16_t));
    float *scale = malloc(C * sizeof(float)), *state = malloc(C * sizeof(float));
    if (!kv || !scale || !state) {
        free(kv);
        free(scale);
        free(state);
        return NULL;
    }
    for (size_t p = 0; p < 2; p++)
        for (size_t l = 0; l < nl; l++) {
            for (size_t c = 0; c < C; c++) {
                scale[c] = (float)exp(0.5 * nrand(&s)) * (p == 0 ? 1.0f : 0.3f);
                if (p == 0 && next(&s) % 64 == 0) scale[c] *= 12.0f; /* outlier key channel */
                state[c] = (float)nrand(&s);
            }
            const float rho = p == 0 ? 0.9f : 0.3f, innov = sqrtf(1 - rho * rho);
            for (size_t i = 0; i < t; i++) {
                uint16_t *row = kv + ((p * nl + l) * t + i) * C;
                for (size_t c = 0; c < C; c++) {
                    state[c] = rho * state[c] + innov * (float)nrand(&s);
                    row[c] = kvc_f32_to_f16(scale[c] * state[c]);
                }
            }
        }
    free(scale);
    free(state);
    return kv;
}
