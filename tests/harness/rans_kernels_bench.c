/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS decode kernels alone (docs/CACHEGEN.md "AVX-512 decoder", "AVX2 decoder"): 12 streams
 * of one full group (8 channels) x 256 tokens, 31 of 32 symbols in use (the real K/V's range),
 * coded by the portable encoder, then decoded by each kernel size (AVX-512: 2 to 12 streams at
 * once; AVX2: a pair, a four, a six) as many times as REPS; prints the best ns a symbol and checks
 * the symbols. Kernels this CPU lacks are skipped. Built on demand: make tests/harness/rans_kernels_bench;
 * usage: tests/harness/rans_kernels_bench [REPS (3000)]. It links its own copy of the coder, as tests/unit/test_rans. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/simd/cpu_rans.h"
#include "common/rans.h"

enum { NS = 12, G = 8, T = 256, B = 32 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t rng = 1;
static uint32_t rnd(void) { return (rng = rng * 1664525u + 1013904223u) >> 8; }

int main(int argc, char **argv)
{
#ifndef KVC_HAVE_X86_SIMD
    (void)argc;
    (void)argv;
    printf("rans_kernels_bench: no x86 SIMD tier in this build\n");
    return 0;
#else
    const int reps = argc > 1 ? atoi(argv[1]) : 3000;
    static uint16_t cum[NS][G * (B + 1)];
    static uint8_t sym[NS][T * G], out[NS][T * G];
    uint8_t *buf[NS];
    size_t len[NS];
    for (int j = 0; j < NS; j++) {
        for (unsigned i = 0; i < G; i++) { /* a peaked distribution over all 32 symbols */
            uint32_t cnt[B];
            uint64_t tot = 0;
            for (unsigned b = 0; b < B; b++) tot += cnt[b] = 1 + 200 / (1 + (b < 16 ? (16 - b) * (16 - b) : (b - 16) * (b - 16)) / 4);
            kvc_rans_cum_from_counts(cnt, B, tot, cum[j] + i * (B + 1));
        }
        for (size_t t = 0; t < T; t++)
            for (unsigned i = 0; i < G; i++) {
                const uint16_t *c = cum[j] + i * (B + 1);
                const uint32_t u = rnd() % 4096;
                unsigned s = 0;
                while (c[s + 1] <= u) s++;
                sym[j][t * G + i] = (uint8_t)s;
            }
        const size_t cap = kvc_rans_bound(G, T);
        buf[j] = malloc(cap);
        len[j] = kvc_rans_encode_stream(KVC_ISA_SCALAR, sym[j], G, T, G, cum[j], B, buf[j], cap);
    }
    const int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    const int has2 = __builtin_cpu_supports("avx2");
    for (int mode = 0; mode < 9; mode++) { /* 0-5: AVX-512 with 2 (mode + 1) streams; 6-8: AVX2 pair, four, six */
        const unsigned n = mode < 6 ? 2u * (unsigned)(mode + 1) : mode == 6 ? 2u : mode == 7 ? 4u : 6u;
        if ((mode < 6 && !has512) || (mode >= 6 && !has2)) continue;
        const unsigned used = NS / n * n; /* streams decoded: whole kernels */
        double best = 1e9;
        int ok = 1;
        for (int r = 0; r < reps; r++) {
            kvc_rans_dec_t d[NS];
            kvc_rans_dec_t *s[NS];
            const uint16_t *c[NS];
            uint8_t *y[NS];
            for (int j = 0; j < NS; j++) {
                kvc_rans_dec_begin(&d[j], G, buf[j], len[j]);
                s[j] = &d[j], c[j] = cum[j], y[j] = out[j];
            }
            const double t0 = now();
            for (unsigned q = 0; q < used; q += n) {
                kvc_status_t st;
                if (mode < 6) st = kvc_rans_dec_streams_avx512(n, s + q, c + q, y + q, G, T, B);
                else if (n == 2) st = kvc_rans_dec_streams2_avx2(s + q, c + q, y + q, G, T, B);
                else if (n == 4) st = kvc_rans_dec_streams4_avx2(s + q, c + q, y + q, G, T, B);
                else st = kvc_rans_dec_streams6_avx2(s + q, c + q, y + q, G, T, B);
                ok &= st == KVC_OK;
            }
            const double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        for (unsigned j = 0; j < used; j++) ok &= memcmp(out[j], sym[j], sizeof sym[j]) == 0;
        printf("%s, %2u streams at once: %.3f ns a symbol%s\n", mode < 6 ? "avx512" : "avx2", n, best * 1e9 / ((double)used * T * G),
               ok ? "" : "  WRONG SYMBOLS");
        if (!ok) return 1;
    }
    for (int j = 0; j < NS; j++) free(buf[j]);
    return 0;
#endif
}
