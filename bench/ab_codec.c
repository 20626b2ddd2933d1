/* SPDX-License-Identifier: BSD-3-Clause */
/* One process of scripts/ab-codec.sh (an A/B of two libkvcore builds on the real K/V of
 * tests/data/kvdata): loads LIB with dlopen, encodes SET's K and V ([2, 5, T, 4 x 8] f16, the
 * stories260K dump) with the arithmetic coder and with rANS, then prints the best time (us) over
 * 5 rounds of REPS decodes (and REPS / 2 + 1 encodes) of each:
 *   rans_decode ac_decode rans_encode ac_encode
 * Usage: ab_codec LIB.so KVDATA_DIR SET THREADS REPS. One build per process: two builds in one
 * process shared their OpenMP team and placed their buffers differently, which moved the ratios
 * of identical code by up to 6 %. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvcore/codec.h>
#include <kvcore/context.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The data of a little-endian .npy file (header skipped). */
static void *npy(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char h[10];
    if (!f || fread(h, 1, 10, f) != 10 || memcmp(h + 1, "NUMPY", 5)) {
        fprintf(stderr, "ab_codec: cannot read %s\n", path);
        exit(2);
    }
    const size_t hl = (size_t)h[8] | (size_t)h[9] << 8;
    fseek(f, 0, SEEK_END);
    const long sz = ftell(f);
    fseek(f, (long)(10 + hl), SEEK_SET);
    *n = (size_t)sz - 10 - hl;
    void *b = malloc(*n);
    if (!b || fread(b, 1, *n, f) != *n) {
        fprintf(stderr, "ab_codec: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    return b;
}

#define SYM(h, name) dlsym(h, name)

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: ab_codec LIB.so KVDATA_DIR SET THREADS REPS\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "ab_codec: %s\n", dlerror());
        return 2;
    }
    kvc_status_t (*create)(const kvc_context_params_t *, kvc_context_t **) = (kvc_status_t(*)(const kvc_context_params_t *, kvc_context_t **))SYM(h, "kvc_context_create");
    kvc_status_t (*enc)(kvc_context_t *, const kvc_codec_params_t *, const void *, uint8_t **, size_t *) =
        (kvc_status_t(*)(kvc_context_t *, const kvc_codec_params_t *, const void *, uint8_t **, size_t *))SYM(h, "kvc_codec_encode");
    kvc_status_t (*dec)(kvc_context_t *, const void *, size_t, void *, size_t, kvc_codec_info_t *) =
        (kvc_status_t(*)(kvc_context_t *, const void *, size_t, void *, size_t, kvc_codec_info_t *))SYM(h, "kvc_codec_decode");
    void (*release)(void *) = (void (*)(void *))SYM(h, "kvc_codec_free");
    if (!create || !enc || !dec || !release) {
        fprintf(stderr, "ab_codec: %s lacks the codec calls\n", argv[1]);
        return 2;
    }
    const int threads = atoi(argv[4]), reps = atoi(argv[5]);
    kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = threads };
    kvc_context_t *ctx = NULL;
    if (create(&cp, &ctx) != KVC_OK) return 1;
    char pk[4096], pv[4096];
    snprintf(pk, sizeof pk, "%s/%s_K.npy", argv[2], argv[3]);
    snprintf(pv, sizeof pv, "%s/%s_V.npy", argv[2], argv[3]);
    size_t nk, nv;
    void *K = npy(pk, &nk), *V = npy(pv, &nv);
    uint8_t *kv = malloc(nk + nv), *out = malloc(nk + nv);
    memcpy(kv, K, nk);
    memcpy(kv + nk, V, nv);
    /* [5 layers, T, 4 heads x 8] f16 each */
    const kvc_codec_params_t base = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = 5,
                                      .num_tokens = (uint32_t)(nk / 2 / (5 * 32)), .num_heads = 4, .head_size = 8 };
    kvc_codec_params_t p[2] = { base, base }; /* 0: rANS, 1: ac */
    p[0].field_mask |= KVC_CODEC_PARAM_CODER;
    p[0].coder = KVC_CODER_RANS;
    uint8_t *c[2];
    size_t n[2];
    for (int k = 0; k < 2; k++)
        if (enc(ctx, &p[k], kv, &c[k], &n[k]) != KVC_OK) return 1;
    double td[2] = { 1e9, 1e9 }, te[2] = { 1e9, 1e9 };
    for (int round = 0; round < 5; round++)
        for (int k = 0; k < 2; k++) {
            for (int r = 0; r < reps; r++) {
                const double t0 = now();
                if (dec(ctx, c[k], n[k], out, nk + nv, NULL) != KVC_OK) return 1;
                const double t = now() - t0;
                td[k] = t < td[k] ? t : td[k];
            }
            for (int r = 0; r < reps / 2 + 1; r++) {
                uint8_t *b;
                size_t m;
                const double t0 = now();
                if (enc(ctx, &p[k], kv, &b, &m) != KVC_OK) return 1;
                const double t = now() - t0;
                release(b);
                te[k] = t < te[k] ? t : te[k];
            }
        }
    printf("%.2f %.2f %.2f %.2f\n", td[0] * 1e6, td[1] * 1e6, te[0] * 1e6, te[1] * 1e6);
    return 0;
}
