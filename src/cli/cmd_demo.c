/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore demo: the main job on real data. Real K/V caches of a real model (embedded) are placed
 * into a vLLM-layout paged cache, offloaded to 256-token chunks with the block transfer, CacheGen-
 * encoded, decoded, loaded back into a fresh paged cache, and verified against the original.
 * --synthetic runs the same pipeline at 7B-class size on generated data with realistic structure. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "common/half.h"
#include "chart.h"
#include "cli.h"
#include "demo_data.h"
#include "synth_kv.h"
#include "util.h"

#define BLOCK_SIZE 16
#define CHUNK_TOKENS 256

typedef struct {
    size_t nl, t, nh, hs;
    const char *source;
} demo_shape_t;

typedef struct {
    const char *name;
    double seconds;
    size_t bytes; /* bytes processed by the stage (its throughput basis) */
} stage_t;

/* xorshift64*: fast, deterministic (the block table's shuffle). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Load the embedded real K/V into KV_2LTD [2, NL, T, NH*HS] fp16. */
static uint16_t *load_embedded(demo_shape_t *s)
{
    kvc_tensor_t k, v;
    kvc_status_t st = kvc_npy_view(kvc_demo_k_npy, (size_t)(kvc_demo_k_npy_end - kvc_demo_k_npy), &k);
    if (st == KVC_OK) st = kvc_npy_view(kvc_demo_v_npy, (size_t)(kvc_demo_v_npy_end - kvc_demo_v_npy), &v);
    if (st != KVC_OK || k.ndim != 4 || k.dtype != KVC_DTYPE_F16 || memcmp(k.shape, v.shape, sizeof(k.shape))) {
        fprintf(stderr, "kvcore demo: embedded data unreadable: %s\n", kvc_last_error());
        return NULL;
    }
    *s = (demo_shape_t){ k.shape[0], k.shape[1], k.shape[2], k.shape[3], "stories260K, story_prompt (real model, real text)" };
    uint16_t *kv = malloc(2 * k.nbytes);
    if (!kv) return NULL;
    memcpy(kv, k.data, k.nbytes);
    memcpy((uint8_t *)kv + k.nbytes, v.data, v.nbytes);
    return kv;
}

/* Synthetic KV (synth_kv.c) at the requested size. */
static uint16_t *make_synthetic(demo_shape_t *s)
{
    s->source = "synthetic (per-channel scales, outlier key channels, AR(1) keys)";
    return synth_kv_f16(s->nl, s->t, s->nh, s->hs, 0);
}

static void shuffle(int64_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        const size_t j = (size_t)(rng() % i);
        const int64_t x = a[i - 1];
        a[i - 1] = a[j];
        a[j] = x;
    }
}

/* A vLLM flash-attention paged cache (format 1: NL x [2, NB, BS, NH, HS]) with room for twice the
 * sequence, and a random block table for the sequence. */
typedef struct {
    uint8_t *pool;
    void **layer_ptrs;
    size_t layer_bytes, nb;
    int64_t *block_table; /* blocks of the sequence, in token order */
    size_t nblocks;
} paged_t;

static int paged_alloc(paged_t *pc, const demo_shape_t *s)
{
    pc->nblocks = (s->t + BLOCK_SIZE - 1) / BLOCK_SIZE;
    pc->nb = 2 * pc->nblocks;
    pc->layer_bytes = 2 * pc->nb * BLOCK_SIZE * s->nh * s->hs * sizeof(uint16_t);
    pc->pool = calloc(s->nl, pc->layer_bytes);
    pc->layer_ptrs = malloc(s->nl * sizeof(void *));
    int64_t *all = malloc(pc->nb * sizeof(int64_t));
    pc->block_table = malloc(pc->nblocks * sizeof(int64_t));
    if (!pc->pool || !pc->layer_ptrs || !all || !pc->block_table) {
        free(all);
        return -1;
    }
    for (size_t l = 0; l < s->nl; l++) pc->layer_ptrs[l] = pc->pool + l * pc->layer_bytes;
    for (size_t b = 0; b < pc->nb; b++) all[b] = (int64_t)b;
    shuffle(all, pc->nb);
    memcpy(pc->block_table, all, pc->nblocks * sizeof(int64_t));
    free(all);
    return 0;
}

static void paged_free(paged_t *pc)
{
    free(pc->pool);
    free(pc->layer_ptrs);
    free(pc->block_table);
}

static kvc_page_shape_t page_shape(const demo_shape_t *s, const paged_t *pc)
{
    return (kvc_page_shape_t){ .kv_size = 2, .element_size = 2, .nl = (int64_t)s->nl, .nb = (int64_t)pc->nb,
                               .bs = BLOCK_SIZE, .nh = (int64_t)s->nh, .hs = (int64_t)s->hs };
}

/* Per-token transfer of the whole sequence between a KV_2LTD buffer and the paged cache. */
static kvc_status_t tokens_xfer(kvc_context_t *ctx, const demo_shape_t *s, paged_t *pc, void *kv, kvc_direction_t dir)
{
    int64_t *slots = malloc(s->t * sizeof(int64_t));
    if (!slots) return KVC_ERR_NO_MEMORY;
    for (size_t t = 0; t < s->t; t++) slots[t] = pc->block_table[t / BLOCK_SIZE] * BLOCK_SIZE + (int64_t)(t % BLOCK_SIZE);
    kvc_token_transfer_t a = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = dir, .shape = page_shape(s, pc),
                               .engine_ptrs = pc->layer_ptrs, .num_engine_ptrs = (int64_t)s->nl, .chunk = kv,
                               .chunk_layout = KVC_CHUNK_DEFAULT, .num_tokens = (int64_t)s->t, .slots = slots,
                               .slot_type = KVC_INDEX_INT64, .num_slots = (int64_t)s->t };
    kvc_status_t st = kvc_transfer_tokens(ctx, &a);
    free(slots);
    return st;
}

/* Block transfer of the whole sequence between the paged cache and the 256-token chunk objects. */
static kvc_status_t blocks_xfer(kvc_context_t *ctx, const demo_shape_t *s, paged_t *pc, void **chunks, size_t nchunks,
                                kvc_direction_t dir)
{
    kvc_block_transfer_t a = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = dir, .shape = page_shape(s, pc),
                               .engine_ptrs = pc->layer_ptrs, .num_engine_ptrs = (int64_t)s->nl, .objects = chunks,
                               .num_objects = (int64_t)nchunks, .chunk_layout = KVC_CHUNK_DEFAULT,
                               .chunk_tokens = CHUNK_TOKENS, .block_ids = pc->block_table,
                               .block_id_type = KVC_INDEX_INT64, .num_block_ids = (int64_t)pc->nblocks };
    return kvc_transfer_blocks(ctx, &a);
}

/* -q: only the verification line. */
static int demo_quiet;
#define say(...) (demo_quiet ? 0 : printf(__VA_ARGS__))

static void report_stage(const stage_t *st)
{
    char r[16];
    say("  %-36s %9.2f ms  %10s/s\n", st->name, 1e3 * st->seconds, cli_human(st->seconds > 0 ? (double)st->bytes / st->seconds : 0, r));
}

static void demo_help(void)
{
    printf("usage: kvcore demo [OPTIONS]\n"
           "Without options: real K/V caches of stories260K (embedded) through paged cache -> chunks ->\n"
           "CacheGen encode -> decode -> fresh paged cache, verified.\n"
           "  --synthetic     generated 7B-class data instead, sized by:\n"
           "    --layers N    (default 32)   --heads N (default 8)\n"
           "    --head-size N (default 128)  --tokens N (default 4096)\n"
           "  -q              only the verification line\n"
           "  --chart, --no-chart  a bar chart of bits/symbol and relative RMS error per layer: by default only\n"
           "                  when standard output is a terminal\n"
           "  --svg FILE      the same chart as an SVG image\n"
           "  -f, --force     replace an existing --svg FILE\n");
}

int kvc_cmd_demo(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        { "synthetic", no_argument, NULL, 'Y' },
        { "layers", required_argument, NULL, 'l' },
        { "heads", required_argument, NULL, 'n' },
        { "head-size", required_argument, NULL, 's' },
        { "tokens", required_argument, NULL, 't' },
        { "chart", no_argument, NULL, 'C' },
        { "no-chart", no_argument, NULL, 'N' },
        { "svg", required_argument, NULL, 'G' },
        { "force", no_argument, NULL, 'f' },
        { NULL, 0, NULL, 0 },
    };
    int synthetic = 0, chart = -1, force = 0, c;
    const char *svg = NULL;
    const char *sized = NULL; /* a size option, which applies only to --synthetic */
    cli_common_t com = { 0 };
    demo_shape_t s = { 32, 4096, 8, 128, NULL };
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT "f", longopts, NULL)) != -1) {
        size_t *dst = c == 'l' ? &s.nl : c == 'n' ? &s.nh : c == 's' ? &s.hs : c == 't' ? &s.t : NULL;
        if (c == 'Y') synthetic = 1;
        else if (c == 'C' || c == 'N') chart = c == 'C';
        else if (c == 'G') svg = optarg;
        else if (c == 'f') force = 1;
        else if (dst) {
            sized = c == 'l' ? "--layers" : c == 'n' ? "--heads" : c == 's' ? "--head-size" : "--tokens";
            if (!cli_parse_size("demo", sized, optarg, dst)) return 2;
        } else {
            int r = cli_common_option("demo", c, argv, &com, demo_help);
            if (r >= 0) return r;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvcore demo: unexpected argument '%s' (see kvcore demo --help)\n", argv[optind]);
        return 2;
    }
    demo_quiet = com.quiet;
    if (sized && !synthetic) {
        fprintf(stderr, "kvcore demo: %s sizes the --synthetic data; the embedded real data has its own size\n", sized);
        return 2;
    }
    if (svg && !strcmp(svg, "-")) { /* standard output holds the report */
        fprintf(stderr, "kvcore demo: --svg needs a file name (standard output holds the report)\n");
        return 2;
    }
    if (svg && (c = cli_chart_svg_check("demo", svg, force, NULL, 0)) != 0) return c;
    if (chart < 0 && demo_quiet) chart = 0;
    uint16_t *orig = synthetic ? make_synthetic(&s) : load_embedded(&s);
    if (!orig) return 1;
    kvc_context_t *ctx;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK) {
        free(orig);
        return cli_fail("demo", st);
    }
    const size_t C = s.nh * s.hs, nchunks = (s.t + CHUNK_TOKENS - 1) / CHUNK_TOKENS;
    const size_t chunk_bytes = 2 * s.nl * CHUNK_TOKENS * C * sizeof(uint16_t), total_bytes = 2 * s.nl * s.t * C * 2;
    say("kvcore demo: %s\n", s.source);
    say("  %zu layers x %zu tokens x %zu KV heads x %zu head size, fp16: %.2f MB of K+V; backend %s, %d threads\n", s.nl,
           s.t, s.nh, s.hs, (double)total_bytes / 1e6, kvc_context_backend_name(ctx), kvc_context_num_threads(ctx));
    say("  vLLM paged cache (format 1, block size %d, shuffled blocks) -> %zu chunk(s) of %d tokens\n\n", BLOCK_SIZE,
           nchunks, CHUNK_TOKENS);

    paged_t src = { 0 }, dst = { 0 };
    void **chunks = calloc(nchunks, sizeof(void *)), **back = calloc(nchunks, sizeof(void *));
    uint8_t **kvc = calloc(nchunks, sizeof(uint8_t *));
    size_t *kvc_len = calloc(nchunks, sizeof(size_t));
    uint16_t *check = malloc(total_bytes);
    stage_t stages[6];
    cli_chart_row_t *rows = NULL;
    int rc = 1, nst = 0;
    if (!chunks || !back || !kvc || !kvc_len || !check || paged_alloc(&src, &s) || paged_alloc(&dst, &s)) {
        fprintf(stderr, "kvcore demo: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < nchunks; i++) {
        chunks[i] = calloc(1, chunk_bytes);
        back[i] = calloc(1, chunk_bytes);
        if (!chunks[i] || !back[i]) { fprintf(stderr, "kvcore demo: out of memory\n"); goto done; }
    }
    /* Chunk objects are [2, NL, 256, C]: a short last chunk is coded with its real token count. */
#define STAGE(label, bytes, call)                                                                            \
    do {                                                                                                     \
        const double t0_ = cli_now();                                                                        \
        if ((st = (call)) != KVC_OK) { rc = cli_fail("demo", st); goto done; }                               \
        stages[nst++] = (stage_t){ label, cli_now() - t0_, bytes };                                          \
    } while (0)

    STAGE("1 prefill: tokens -> paged cache", total_bytes, tokens_xfer(ctx, &s, &src, orig, KVC_H2D));
    STAGE("2 offload: paged -> chunks (blocks)", total_bytes, blocks_xfer(ctx, &s, &src, chunks, nchunks, KVC_D2H));
    size_t coded = 0;
    double t0 = cli_now();
    for (size_t i = 0; i < nchunks; i++) {
        const size_t tok = s.t - i * CHUNK_TOKENS < CHUNK_TOKENS ? s.t - i * CHUNK_TOKENS : CHUNK_TOKENS;
        /* Compact a short last chunk to [2, NL, tok, C] (the codec codes exactly its tokens). */
        if (tok < CHUNK_TOKENS)
            for (size_t pl = 1; pl < 2 * s.nl; pl++)
                memmove((uint8_t *)chunks[i] + pl * tok * C * 2, (uint8_t *)chunks[i] + pl * CHUNK_TOKENS * C * 2, tok * C * 2);
        kvc_codec_params_t p = { .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = s.nl, .num_tokens = tok,
                                 .num_heads = s.nh, .head_size = s.hs };
        if ((st = kvc_codec_encode(ctx, &p, chunks[i], &kvc[i], &kvc_len[i])) != KVC_OK) { rc = cli_fail("demo", st); goto done; }
        coded += kvc_len[i];
    }
    stages[nst++] = (stage_t){ "3 CacheGen encode", cli_now() - t0, total_bytes };
    t0 = cli_now();
    for (size_t i = 0; i < nchunks; i++) {
        kvc_codec_info_t info;
        if ((st = kvc_codec_decode(ctx, kvc[i], kvc_len[i], back[i], chunk_bytes, &info)) != KVC_OK) { rc = cli_fail("demo", st); goto done; }
        const size_t tok = info.num_tokens;
        if (tok < CHUNK_TOKENS) /* spread a short chunk back to the object layout */
            for (size_t pl = 2 * s.nl; pl-- > 1;)
                memmove((uint8_t *)back[i] + pl * CHUNK_TOKENS * C * 2, (uint8_t *)back[i] + pl * tok * C * 2, tok * C * 2);
    }
    stages[nst++] = (stage_t){ "4 CacheGen decode", cli_now() - t0, total_bytes };
    STAGE("5 load: chunks -> fresh paged cache", total_bytes, blocks_xfer(ctx, &s, &dst, back, nchunks, KVC_H2D));
    STAGE("6 verify read: paged cache -> tokens", total_bytes, tokens_xfer(ctx, &s, &dst, check, KVC_D2H));

    /* Statistics: sizes, bits/symbol vs entropy (overall, and per layer over the chunks, weighted by
     * their tokens), reconstruction error. */
    double bits = 0, ent = 0;
    size_t nls = 0;
    rows = calloc(2 * s.nl, sizeof(*rows));
    if (!rows) goto done;
    for (size_t i = 0; i < nchunks; i++) {
        kvc_codec_info_t info;
        kvc_codec_inspect(kvc[i], kvc_len[i], &info);
        kvc_codec_layer_stats_t *ls = calloc(2 * s.nl, sizeof(*ls));
        if (!ls || kvc_codec_layer_stats(kvc[i], kvc_len[i], ls, 2 * s.nl) != KVC_OK) { free(ls); goto done; }
        for (size_t l = 0; l < 2 * s.nl; l++) {
            rows[l].bits += ls[l].bits_per_symbol * (double)info.num_tokens / (double)s.t;
            bits += ls[l].bits_per_symbol * (double)info.num_tokens;
            ent += ls[l].entropy_bits * (double)info.num_tokens;
        }
        nls += info.num_tokens;
        free(ls);
    }
    cli_err_t *err = calloc(2 * s.nl, sizeof(*err));
    if (!err) goto done;
    cli_error_stats(orig, check, KVC_DTYPE_F16, 2 * s.nl, s.t * C, err);
    const double q8 = (double)total_bytes / 2 + 2.0 * 2 * s.nl * s.t; /* int8 symbols + fp16 scale per row */
    say("stages (each timed once; `kvcore bench` measures speed):\n");
    for (int i = 0; i < nst; i++) report_stage(&stages[i]);
    say("\nsize:\n  fp16 K+V            %12zu bytes\n  8-bit quantisation  %12.0f bytes\n  CacheGen (.kvc)     %12zu bytes"
           "  -> %.2fx vs fp16, %.2fx vs 8-bit\n",
           total_bytes, q8, coded, (double)total_bytes / (double)coded, q8 / (double)coded);
    say("  coded %.3f bits/symbol vs %.3f bits empirical entropy (coder overhead %.2f%%)\n", bits / (double)(nls * 2 * s.nl),
           ent / (double)(nls * 2 * s.nl), 100.0 * (bits / ent - 1.0));
    say("\nreconstruction error per layer (max |x - x^|, relative RMS):\n");
    double worst = 0;
    for (size_t l = 0; l < s.nl; l++) {
        say("  layer %3zu   K %9.4g %7.4f   V %9.4g %7.4f\n", l, err[l].max_abs, err[l].rel_rms, err[s.nl + l].max_abs,
               err[s.nl + l].rel_rms);
        worst = fmax(worst, fmax(err[l].rel_rms, err[s.nl + l].rel_rms));
    }
    for (size_t l = 0; l < 2 * s.nl; l++) {
        rows[l].plane = l < s.nl ? "K" : "V";
        rows[l].layer = (unsigned)(l % s.nl);
        rows[l].err = err[l].rel_rms;
    }
    if (cli_chart_wanted(chart)) {
        say("\nper layer:\n");
        if (!demo_quiet || chart == 1) cli_chart_print(stdout, rows, 2 * s.nl, 1);
    }
    if (svg && cli_chart_svg("demo", svg, "kvcore demo: bits/symbol and relative RMS error per layer", rows, 2 * s.nl, 1)) {
        free(err);
        goto done;
    }
    /* The pipeline must restore exactly what the codec decoded, and every element must be within
     * the quantiser's guarantee: |x - x^| <= scale / (2M) (scale: the row's max |x|, M = bins/2 - 1)
     * plus one fp16 rounding. The relative RMS above is information, not a pass mark: it depends on
     * how far the row's largest channel sits above the others. */
    int exact = 1;
    for (size_t i = 0; i < nchunks && exact; i++) {
        const size_t tok = s.t - i * CHUNK_TOKENS < CHUNK_TOKENS ? s.t - i * CHUNK_TOKENS : CHUNK_TOKENS;
        for (size_t pl = 0; pl < 2 * s.nl && exact; pl++)
            exact = !memcmp((uint8_t *)back[i] + pl * CHUNK_TOKENS * C * 2, check + (pl * s.t + i * CHUNK_TOKENS) * C, tok * C * 2);
    }
    free(err);
    size_t outside = 0;
    uint32_t *bins = malloc(2 * s.nl * sizeof(uint32_t));
    if (!bins) goto done;
    kvc_cg_default_bins(s.nl, bins);
    for (size_t r = 0; r < 2 * s.nl * s.t; r++) {
        const uint16_t *x = orig + r * C, *y = check + r * C;
        double scale = 0;
        for (size_t c = 0; c < C; c++) {
            const double v = fabs(kvc_f16_to_f32(x[c]));
            if (isfinite(v) && v > scale) scale = v;
        }
        const double M = bins[r / s.t] / 2 - 1;
        for (size_t c = 0; c < C; c++) {
            const double a = kvc_f16_to_f32(x[c]), b = kvc_f16_to_f32(y[c]);
            if (isfinite(a) && !(fabs(a - b) <= scale / (2 * M) * (1 + 1e-6) + fabs(a) / 1024 + 1e-7)) outside++;
        }
    }
    free(bins);
    printf("%sverify: transfers byte-exact %s; elements outside the quantisation bound: %zu %s (worst relative RMS %.4f)\n", demo_quiet ? "" : "\n",
           exact ? "yes" : "NO", outside, outside ? "(FAIL)" : "(ok)", worst);
    rc = exact && !outside ? 0 : 1;
done:
    for (size_t i = 0; chunks && back && kvc && i < nchunks; i++) {
        free(chunks[i]);
        free(back[i]);
        kvc_codec_free(kvc[i]);
    }
    free(chunks);
    free(back);
    free(kvc);
    free(kvc_len);
    free(check);
    free(rows);
    paged_free(&src);
    paged_free(&dst);
    kvc_context_destroy(ctx);
    free(orig);
    return rc;
}
