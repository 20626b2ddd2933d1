/* SPDX-License-Identifier: BSD-3-Clause */
/* The C side of bench/bench_python.py: times one op called straight from C, on the shapes the Python
 * script uses (32 layers, 256 tokens, 8 KV heads x 128, fp16, block size 16), so the script can
 * report what the Python package adds per call. Usage: pybench-c CASE REPS; prints one JSON line
 * {"case": CASE, "c_us": microseconds per call in the fastest of 5 rounds of REPS calls (the round
 * least disturbed by other load)}. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvcore/cachegen.h>
#include <kvcore/context.h>
#include <kvcore/recorder.h>
#include <kvcore/rope.h>
#include <kvcore/transfer.h>

enum { NL = 32, NH = 8, HS = 128, BS = 16, NB = 32, T = 256, MAX_ROUNDS = 1000 };

static kvc_context_t *ctx;
static kvc_token_transfer_t tok;
static kvc_block_transfer_t blk;
static kvc_cg_cdf_params_t cdf;
static kvc_rope_keys_t keys;
static kvc_rope_table_t table;
static int64_t *positions;
static const kvc_rope_params_t neox = { .field_mask = KVC_ROPE_PARAM_STYLE, .style = KVC_ROPE_NEOX };
static void *mc_dst, *mc_src;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *zalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) { fprintf(stderr, "pybench-c: out of memory\n"); exit(1); }
    memset(p, 0, n); /* faulted in now, not inside the timed calls */
    return p;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static kvc_status_t call(const char *c)
{
    if (!strcmp(c, "tokens_d2h") || !strcmp(c, "tokens_h2d") || !strcmp(c, "tiny_tokens"))
        return kvc_transfer_tokens(ctx, &tok);
    if (!strcmp(c, "blocks_d2h")) return kvc_transfer_blocks(ctx, &blk);
    if (!strcmp(c, "cdf") || !strcmp(c, "cdf_tiny")) return kvc_cg_cdf(ctx, &cdf);
    if (!strcmp(c, "rope")) return kvc_rope_k_fused(ctx, NULL, &keys, positions, positions + T, &table, &neox);
    if (!strcmp(c, "memcpy64")) return kvc_memcpy(ctx, mc_dst, mc_src, 64);
    return KVC_ERR_INVALID_ARG;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: pybench-c CASE REPS [ROUNDS]\n"); return 2; }
    const char *c = argv[1];
    const int reps = atoi(argv[2]);
    const int rounds = argc == 4 ? atoi(argv[3]) : 5;
    if (reps < 1 || rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "pybench-c: bad REPS or ROUNDS\n"); return 2; }
    if (kvc_context_create(NULL, &ctx) != KVC_OK) { fprintf(stderr, "pybench-c: %s\n", kvc_last_error()); return 1; }
    const int tiny = !strcmp(c, "tiny_tokens");
    const int nl = tiny ? 1 : NL, nh = tiny ? 1 : NH, hs = tiny ? 8 : HS, t = tiny ? 1 : T;
    void *layers[NL];
    for (int l = 0; l < nl; l++) layers[l] = zalloc((size_t)2 * NB * BS * nh * hs * 2);
    int64_t slots[NB * BS];
    for (int i = 0; i < NB * BS; i++) slots[i] = i;
    uint32_t s = 12345; /* random placement, as the Python side */
    for (int i = NB * BS - 1; i > 0; i--) {
        s = s * 1664525u + 1013904223u;
        int j = (int)(s % (uint32_t)(i + 1));
        int64_t x = slots[i]; slots[i] = slots[j]; slots[j] = x;
    }
    void *chunk = zalloc((size_t)2 * nl * t * nh * hs * 2);
    kvc_page_shape_t shape = { .kv_size = 2, .element_size = 2, .nl = nl, .nb = NB, .bs = BS, .nh = nh, .hs = hs };
    tok = (kvc_token_transfer_t){ .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = strcmp(c, "tokens_h2d") ? KVC_D2H : KVC_H2D,
                                  .shape = shape, .engine_ptrs = layers, .num_engine_ptrs = nl, .chunk = chunk,
                                  .num_tokens = t, .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = t };
    int64_t ids[T / BS];
    for (int i = 0; i < T / BS; i++) ids[i] = slots[i] / BS;
    void *objs[1] = { chunk };
    blk = (kvc_block_transfer_t){ .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = KVC_D2H, .shape = shape,
                                  .engine_ptrs = layers, .num_engine_ptrs = nl, .objects = objs, .num_objects = 1,
                                  .chunk_tokens = T, .block_ids = ids, .block_id_type = KVC_INDEX_INT64,
                                  .num_block_ids = T / BS };
    const int cdf_tiny = !strcmp(c, "cdf_tiny");
    size_t cl = cdf_tiny ? 1 : 2 * NL, ct = cdf_tiny ? 1 : T, cc = cdf_tiny ? 1 : NH * HS;
    cdf = (kvc_cg_cdf_params_t){ .symbols = zalloc(cl * ct * cc), .cdf = zalloc(cl * cc * 33 * 2), .layers = cl, .tokens = ct,
                            .channels = cc, .num_bins = 32 };
    keys = (kvc_rope_keys_t){ .data = zalloc((size_t)T * NH * HS * 2), .dtype = KVC_DTYPE_F16, .num_tokens = T,
                              .num_heads = NH, .head_size = HS };
    table = (kvc_rope_table_t){ .data = zalloc((size_t)4096 * HS * 2), .dtype = KVC_DTYPE_F16, .max_position = 4096,
                                .rot_dim = HS };
    /* a real cos/sin table: all-zero rows would take the factors' slow path for degenerate rows */
    if (kvc_rope_cache_build(ctx, NULL, &table, 10000.0) != KVC_OK) {
        fprintf(stderr, "pybench-c: cos/sin table: %s\n", kvc_last_error());
        return 1;
    }
    positions = zalloc(2 * T * sizeof(int64_t));
    for (int i = 0; i < T; i++) { positions[i] = i; positions[T + i] = i + 1000; }
    mc_dst = zalloc(64);
    mc_src = zalloc(64);
    if (call(c) != KVC_OK) { fprintf(stderr, "pybench-c: %s: %s\n", c, kvc_last_error()); return 1; }
    static double r[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) (void)call(c);
        r[k] = (now() - t0) / reps * 1e6;
    }
    qsort(r, (size_t)rounds, sizeof(r[0]), cmp);
    printf("{\"case\":\"%s\",\"c_us\":%.4f}\n", c, r[0]);
    kvc_context_destroy(ctx);
    return 0;
}
