/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU backend modules (CUDA / HIP, src/backends/gpu with src/backends/cuda and src/backends/hip).
 *
 * Always (CPU-only CI): the modules are built and export only kvc_backend_entry, libkvcore.so needs
 * no GPU runtime, `kvcore info --all` loads them and reports no device, and the device memory API
 * works on the CPU backend.
 *
 * Comparison suite: every GPU op against the CPU backend, byte for byte, on random and golden
 * inputs, with device buffers through kvc_device_alloc / kvc_memcpy. It runs twice:
 *   - "gpu":  on the real CUDA or HIP module (KVC_TEST_GPU=cuda|hip picks one; skipped with the
 *             reason when kvc_context_create reports no device or no module);
 *   - "emu":  on tests/modules/gpu_emu.so, the kernels' per-element / per-stream code compiled for
 *             the CPU (see that file for what it does and does not cover).
 * KVC_TEST_GPU_MODULE=<file> runs the "gpu" tests on that module file, loaded as "cuda": tests/shell/test_gpu_host.sh
 * runs them on tests/modules/gpu_host.so, the GPU module's own source (kernels and glue) built for
 * the CPU. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "npy_load.h"
#include "test_util.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rng_next(&seed);
}

typedef enum { TARGET_GPU, TARGET_EMU } target_t;

/* The module file the "gpu" tests run on instead of the installed GPU modules (NULL: those). */
static const char *gpu_module_file(void)
{
    const char *m = getenv("KVC_TEST_GPU_MODULE");
    return m && *m ? m : NULL;
}

/* A context on the GPU backend under test, or a skip saying why there is none. */
static kvc_context_t *open_target(target_t t)
{
    kvc_context_t *ctx = NULL;
    if (t == TARGET_EMU || gpu_module_file()) {
        const char *so = t == TARGET_EMU ? kvc_test_build("tests/modules/.libs/gpu_emu.so") : gpu_module_file();
        const char *dir = kvc_test_module_dir(so, "kvcore_cuda.so");
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_MODULE_PATH,
                                   .backend = "cuda",
                                   .module_path = dir };
        const kvc_status_t st = kvc_context_create(&p, &ctx);
        cr_assert_eq(st, KVC_OK, "module %s: %s (%s)", so, kvc_status_string(st), kvc_last_error());
        return ctx;
    }
    const char *want = getenv("KVC_TEST_GPU");
    const char *names[2] = { "cuda", "hip" };
    char why[2][512] = { "", "" };
    for (int i = 0; i < 2; i++) {
        if (want && strcmp(want, names[i]) != 0) {
            snprintf(why[i], sizeof(why[i]), "not selected (KVC_TEST_GPU=%s)", want);
            continue;
        }
        kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND, .backend = names[i] };
        const kvc_status_t st = kvc_context_create(&p, &ctx);
        if (st == KVC_OK) return ctx;
        cr_assert(st == KVC_ERR_NO_DEVICE || st == KVC_ERR_NOT_FOUND, "%s context: %s (%s)", names[i],
                  kvc_status_string(st), kvc_last_error());
        snprintf(why[i], sizeof(why[i]), "%s", kvc_last_error());
    }
    cr_skip_test("no GPU device: cuda: %s; hip: %s", why[0], why[1]);
    return NULL;
}

static void *dev_alloc(kvc_context_t *ctx, size_t n)
{
    void *p = NULL;
    const kvc_status_t st = kvc_device_alloc(ctx, n ? n : 1, &p);
    cr_assert_eq(st, KVC_OK, "device_alloc(%zu): %s", n, kvc_last_error());
    return p;
}

static void *dev_copy_of(kvc_context_t *ctx, const void *host, size_t n)
{
    void *p = dev_alloc(ctx, n);
    if (n) cr_assert_eq(kvc_memcpy(ctx, p, host, n), KVC_OK, "memcpy to device: %s", kvc_last_error());
    return p;
}

static void *host_copy_of(kvc_context_t *ctx, const void *dev, size_t n)
{
    void *h = malloc(n ? n : 1);
    if (n) cr_assert_eq(kvc_memcpy(ctx, h, dev, n), KVC_OK, "memcpy to host: %s", kvc_last_error());
    return h;
}

/* dev (on ctx) holds exactly the bytes of host[0, n). */
static void assert_same(kvc_context_t *ctx, const void *dev, const void *host, size_t n, const char *what)
{
    uint8_t *h = host_copy_of(ctx, dev, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != ((const uint8_t *)host)[i])
            cr_assert_fail("%s: byte %zu differs: device %u, CPU backend %u", what, i, h[i],
                           ((const uint8_t *)host)[i]);
    free(h);
}

/* ------------------------------------------------------------------ transfers */

typedef struct geometry {
    int format, element_size;
    int64_t nl, nb, bs, nh, hs, pad; /* pad: extra elements per block (formats 3, 10-13) */
} geometry_t;

static kvc_page_shape_t shape_of(const geometry_t *g)
{
    const int mla = kvc_format_is_mla(g->format), fused = kvc_format_is_fused_packed(g->format);
    kvc_page_shape_t s = { .kv_size = mla || fused ? 1 : 2, .element_size = g->element_size, .nl = g->nl, .nb = g->nb,
                           .bs = g->bs, .nh = mla ? 1 : g->nh, .hs = g->hs };
    int64_t R = s.hs * s.element_size;
    if (g->format == KVC_FMT_NL_X_NB_BSV_BSS) { /* a row of 4-byte units: values, then the scale */
        R = R < 8 ? 8 : (R + 3) / 4 * 4;
        s.hs = R / s.element_size;
    }
    if (g->format == KVC_FMT_NL_X_NP_X_NB_BS_ONE_HS) { /* up to 3 planes of unequal widths */
        s.num_planes = R < 3 ? (int)R : 3;
        s.plane_bytes[0] = s.num_planes == 1 ? R : R / 2;
        if (s.num_planes == 3) s.plane_bytes[1] = (R - R / 2) / 2;
        s.plane_bytes[s.num_planes - 1] = R - s.plane_bytes[0] - (s.num_planes == 3 ? s.plane_bytes[1] : 0);
    }
    if (g->pad) s.block_stride_elems = s.bs * s.nh * s.hs + g->pad;
    return s;
}

/* Bytes of each engine tensor (generous: every format fits). */
static size_t tensor_bytes(const geometry_t *g, const kvc_page_shape_t *s)
{
    const size_t block = (size_t)(s->block_stride_elems ? s->block_stride_elems : s->bs * s->nh * s->hs);
    const size_t planes = kvc_format_is_cross_layer(g->format) ? 2 * (size_t)s->nl : 2;
    return block * planes * (size_t)s->nb * (size_t)s->element_size;
}

typedef struct xfer_fixture {
    kvc_context_t *cpu, *dev;
    int64_t nptr;
    size_t tbytes;
    void **eng_cpu, **eng_dev; /* pointer tables (host arrays) */
} xfer_fixture_t;

static void engines_init(xfer_fixture_t *f, const geometry_t *g, const kvc_page_shape_t *s, uint64_t seed)
{
    f->nptr = kvc_shape_ptr_count(g->format, s);
    f->tbytes = tensor_bytes(g, s);
    f->eng_cpu = calloc((size_t)f->nptr, sizeof(void *));
    f->eng_dev = calloc((size_t)f->nptr, sizeof(void *));
    for (int64_t i = 0; i < f->nptr; i++) {
        f->eng_cpu[i] = malloc(f->tbytes);
        fill_random(f->eng_cpu[i], f->tbytes, seed + (uint64_t)i);
        f->eng_dev[i] = dev_copy_of(f->dev, f->eng_cpu[i], f->tbytes);
    }
}

static void engines_check_free(xfer_fixture_t *f, const char *what)
{
    for (int64_t i = 0; i < f->nptr; i++) {
        char name[160];
        snprintf(name, sizeof(name), "%s: engine tensor %lld", what, (long long)i);
        assert_same(f->dev, f->eng_dev[i], f->eng_cpu[i], f->tbytes, name);
        free(f->eng_cpu[i]);
        cr_assert_eq(kvc_device_free(f->dev, f->eng_dev[i]), KVC_OK);
    }
    free(f->eng_cpu);
    free(f->eng_dev);
}

/* Distinct random slots, some negative. */
static void random_slots(int64_t *slots, int64_t n, int64_t nslots, uint64_t seed)
{
    for (int64_t t = 0; t < n; t++) {
        int dup;
        do {
            slots[t] = (int64_t)(rng_next(&seed) % (uint64_t)nslots);
            dup = 0;
            for (int64_t k = 0; k < t; k++) dup |= slots[k] == slots[t];
        } while (dup);
        if (rng_next(&seed) % 7 == 0) slots[t] = -1;
    }
}

static void check_tokens(kvc_context_t *cpu, kvc_context_t *dev, const geometry_t *g, int direction, int64_t T,
                         int64_t skip)
{
    xfer_fixture_t f = { .cpu = cpu, .dev = dev };
    const kvc_page_shape_t s = shape_of(g);
    engines_init(&f, g, &s, 100 + (uint64_t)g->format);
    const size_t chunk_bytes = (size_t)s.kv_size * (size_t)s.nl * (size_t)T * (size_t)(s.nh * s.hs * s.element_size);
    void *chunk_cpu = malloc(chunk_bytes);
    fill_random(chunk_cpu, chunk_bytes, 7 + (uint64_t)direction);
    void *chunk_dev = dev_copy_of(dev, chunk_cpu, chunk_bytes);
    int64_t *slots = malloc((size_t)T * sizeof(int64_t));
    random_slots(slots, T, s.nb * s.bs, 99 + (uint64_t)T);
    kvc_token_transfer_t a = { .format = g->format, .direction = direction, .shape = s, .engine_ptrs = f.eng_cpu,
                               .num_engine_ptrs = f.nptr, .chunk = chunk_cpu, .num_tokens = T, .slots = slots,
                               .slot_type = KVC_INDEX_INT64, .num_slots = T, .skip_prefix_tokens = skip };
    cr_assert_eq(kvc_transfer_tokens(cpu, &a), KVC_OK, "cpu: %s", kvc_last_error());
    a.engine_ptrs = f.eng_dev;
    a.chunk = chunk_dev;
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "format %d: %s", g->format, kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    char what[128];
    snprintf(what, sizeof(what), "tokens format %d %s es %d nh %lld", g->format, direction ? "D2H" : "H2D",
             g->element_size, (long long)s.nh);
    assert_same(dev, chunk_dev, chunk_cpu, chunk_bytes, what);
    engines_check_free(&f, what);
    cr_assert_eq(kvc_device_free(dev, chunk_dev), KVC_OK);
    free(chunk_cpu);
    free(slots);
}

static void check_blocks(kvc_context_t *cpu, kvc_context_t *dev, const geometry_t *g, int direction,
                         int64_t nblocks, int64_t bpo, int64_t skip)
{
    xfer_fixture_t f = { .cpu = cpu, .dev = dev };
    const kvc_page_shape_t s = shape_of(g);
    engines_init(&f, g, &s, 300 + (uint64_t)g->format);
    const int64_t C = bpo * s.bs, nobj = (nblocks + bpo - 1) / bpo;
    const size_t obj_bytes = (size_t)s.kv_size * (size_t)s.nl * (size_t)C * (size_t)(s.nh * s.hs * s.element_size);
    void **obj_cpu = calloc((size_t)nobj, sizeof(void *)), **obj_dev = calloc((size_t)nobj, sizeof(void *));
    for (int64_t o = 0; o < nobj; o++) {
        obj_cpu[o] = malloc(obj_bytes);
        fill_random(obj_cpu[o], obj_bytes, 500 + (uint64_t)o);
        obj_dev[o] = dev_copy_of(dev, obj_cpu[o], obj_bytes);
    }
    int64_t *ids = malloc((size_t)nblocks * sizeof(int64_t));
    random_slots(ids, nblocks, s.nb, 77);
    for (int64_t i = 0; i < nblocks; i++) /* block ids are never negative: take a free one */
        if (ids[i] < 0) {
            int64_t v = 0, used;
            do {
                used = 0;
                for (int64_t k = 0; k < nblocks; k++) used |= ids[k] == v;
            } while (used && ++v);
            ids[i] = v;
        }
    kvc_block_transfer_t a = { .format = g->format, .direction = direction, .shape = s, .engine_ptrs = f.eng_cpu,
                               .num_engine_ptrs = f.nptr, .objects = obj_cpu, .num_objects = nobj, .chunk_tokens = C,
                               .block_ids = ids, .block_id_type = KVC_INDEX_INT64, .num_block_ids = nblocks,
                               .skip_prefix_blocks = skip };
    cr_assert_eq(kvc_transfer_blocks(cpu, &a), KVC_OK, "cpu: %s", kvc_last_error());
    a.engine_ptrs = f.eng_dev;
    a.objects = obj_dev;
    cr_assert_eq(kvc_transfer_blocks(dev, &a), KVC_OK, "format %d: %s", g->format, kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    char what[128];
    snprintf(what, sizeof(what), "blocks format %d %s es %d nh %lld", g->format, direction ? "D2H" : "H2D",
             g->element_size, (long long)s.nh);
    for (int64_t o = 0; o < nobj; o++) {
        assert_same(dev, obj_dev[o], obj_cpu[o], obj_bytes, what);
        free(obj_cpu[o]);
        cr_assert_eq(kvc_device_free(dev, obj_dev[o]), KVC_OK);
    }
    engines_check_free(&f, what);
    free(obj_cpu);
    free(obj_dev);
    free(ids);
}

/* Every format, both directions, element sizes giving 16/8/4/2/1-byte copy words, 128 heads. */
static void transfer_suite(target_t t, int blocks)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    for (int fmt = 0; fmt < KVC_FORMAT_COUNT; fmt++) {
        const int fused = kvc_format_is_fused_packed(fmt);
        const geometry_t geos[] = {
            { fmt, 2, 3, 7, 4, 2, fused ? 16 : 8, 0 },  /* 16-byte words */
            { fmt, 1, 2, 5, 3, 3, fused ? 6 : 3, 0 },   /* odd rows: 1-byte words */
            { fmt, 4, 2, 6, 2, 2, 2, 0 },               /* 8-byte words */
            { fmt, 2, 2, 6, 2, 128, fused ? 4 : 2, 0 }, /* 128 heads */
        };
        for (size_t gi = 0; gi < sizeof(geos) / sizeof(geos[0]); gi++)
            for (int dir = 0; dir < 2; dir++) {
                if (blocks) check_blocks(cpu, dev, &geos[gi], dir, 5, 2, gi == 1 ? 0 : 1);
                else check_tokens(cpu, dev, &geos[gi], dir, 11, gi == 1 ? 0 : 2);
            }
        if (fmt == 3 || fmt == KVC_FMT_NL_X_NB_BSV_BSS || fused) { /* padded pools */
            const geometry_t pad = { fmt, 2, 2, 5, 4, 2, fused ? 16 : 8, 24 };
            for (int dir = 0; dir < 2; dir++) {
                if (blocks) check_blocks(cpu, dev, &pad, dir, 4, 3, 0);
                else check_tokens(cpu, dev, &pad, dir, 9, 1);
            }
        }
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, transfer_tokens_every_format) { transfer_suite(TARGET_GPU, 0); }
Test(gpu, transfer_blocks_every_format) { transfer_suite(TARGET_GPU, 1); }
Test(emu, transfer_tokens_every_format) { transfer_suite(TARGET_EMU, 0); }
Test(emu, transfer_blocks_every_format) { transfer_suite(TARGET_EMU, 1); }

/* Single-layer (token-major) and flash ops reach the same kernel through their own plans. */
static void layer_and_flash(target_t t)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    const int64_t T = 9, NB = 5, BS = 4, NH = 3, HS = 8, NL = 2;
    const size_t cache_bytes = (size_t)(NB * BS * NH * HS * 2), kv_bytes = (size_t)(2 * NL * T * NH * HS * 2);
    int64_t slots[9];
    random_slots(slots, T, NB * BS, 5);
    for (int dir = 0; dir < 2; dir++) {
        /* flash pair on layer 1 */
        uint8_t *kc = malloc(cache_bytes), *vc = malloc(cache_bytes), *kv = malloc(kv_bytes);
        fill_random(kc, cache_bytes, 1);
        fill_random(vc, cache_bytes, 2);
        fill_random(kv, kv_bytes, 3);
        void *kc_d = dev_copy_of(dev, kc, cache_bytes), *vc_d = dev_copy_of(dev, vc, cache_bytes);
        void *kv_d = dev_copy_of(dev, kv, kv_bytes);
        kvc_flash_transfer_t a = { .shape = { .kv_size = 2, .element_size = 2, .nl = NL, .nb = NB, .bs = BS, .nh = NH,
                                              .hs = HS },
                                   .key_value = kv, .num_tokens = T, .key_cache = kc, .value_cache = vc,
                                   .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T, .layer_idx = 1 };
        kvc_status_t (*op)(kvc_context_t *, const kvc_flash_transfer_t *) =
            dir ? kvc_load_and_reshape_flash : kvc_reshape_and_cache_back_flash;
        cr_assert_eq(op(cpu, &a), KVC_OK, "%s", kvc_last_error());
        a.key_value = kv_d;
        a.key_cache = kc_d;
        a.value_cache = vc_d;
        cr_assert_eq(op(dev, &a), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, kv_d, kv, kv_bytes, "flash key_value");
        assert_same(dev, kc_d, kc, cache_bytes, "flash key_cache");
        assert_same(dev, vc_d, vc, cache_bytes, "flash value_cache");
        /* single layer, format 2 ([NB, 2, BS, NH, HS]), token-major chunk [T, 2, row] */
        const size_t eng_bytes = 2 * cache_bytes, chunk_bytes = (size_t)(T * 2 * NH * HS * 2);
        uint8_t *eng = malloc(eng_bytes), *chunk = malloc(chunk_bytes);
        fill_random(eng, eng_bytes, 4);
        fill_random(chunk, chunk_bytes, 5);
        void *eng_d = dev_copy_of(dev, eng, eng_bytes), *chunk_d = dev_copy_of(dev, chunk, chunk_bytes);
        void *ptr_cpu[1] = { eng }, *ptr_dev[1] = { eng_d };
        kvc_layer_transfer_t la = { .format = KVC_FMT_NL_X_NB_TWO_BS_NH_HS, .direction = dir,
                                    .shape = { .kv_size = 2, .element_size = 2, .nl = 1, .nb = NB, .bs = BS, .nh = NH,
                                               .hs = HS },
                                    .engine_ptrs = ptr_cpu, .num_engine_ptrs = 1, .chunk = chunk, .token_major = 1,
                                    .num_tokens = T, .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = T };
        cr_assert_eq(kvc_transfer_layer(cpu, &la), KVC_OK, "%s", kvc_last_error());
        la.engine_ptrs = ptr_dev;
        la.chunk = chunk_d;
        cr_assert_eq(kvc_transfer_layer(dev, &la), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, eng_d, eng, eng_bytes, "layer engine");
        assert_same(dev, chunk_d, chunk, chunk_bytes, "layer chunk");
        void *all[] = { kc_d, vc_d, kv_d, eng_d, chunk_d };
        for (size_t i = 0; i < 5; i++) cr_assert_eq(kvc_device_free(dev, all[i]), KVC_OK);
        free(kc);
        free(vc);
        free(kv);
        free(eng);
        free(chunk);
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, layer_and_flash_transfers) { layer_and_flash(TARGET_GPU); }
Test(emu, layer_and_flash_transfers) { layer_and_flash(TARGET_EMU); }

/* Pageable host memory handed to a GPU transfer: a clear error (or, on a device that reads
 * pageable memory coherently, the right bytes), never a fault. */
Test(gpu, pageable_chunk_is_refused_or_works)
{
    kvc_context_t *dev = open_target(TARGET_GPU);
    const size_t n = 2 * 4 * 2 * 8 * 2;
    void *eng = dev_alloc(dev, 4096), *ptrs[1] = { eng };
    uint8_t *chunk = calloc(1, n);
    int64_t slots[2] = { 0, 1 };
    kvc_token_transfer_t a = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = KVC_D2H,
                               .shape = { .kv_size = 2, .element_size = 2, .nl = 1, .nb = 2, .bs = 4, .nh = 2,
                                          .hs = 8 },
                               .engine_ptrs = ptrs, .num_engine_ptrs = 1, .chunk = chunk, .num_tokens = 2,
                               .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = 2 };
    const kvc_status_t st = kvc_transfer_tokens(dev, &a);
    cr_assert(st == KVC_OK || st == KVC_ERR_INVALID_ARG, "status %s", kvc_status_name(st));
    if (st == KVC_ERR_INVALID_ARG) cr_assert(strstr(kvc_last_error(), "chunk"), "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "the context is still usable");
    free(chunk);
    kvc_context_destroy(dev);
}

/* ------------------------------------------------------------------ CacheGen coder */

typedef struct coder_case {
    size_t L, T, C, cap;
    unsigned B;
    uint8_t *sym;
} coder_case_t;

/* Skewed random symbols: per channel a centre and spread, like KV data. */
static uint8_t *coder_symbols(size_t L, size_t T, size_t C, unsigned B, uint64_t seed)
{
    const size_t n = L * T * C;
    uint8_t *s = malloc(n ? n : 1);
    for (size_t l = 0; l < L; l++)
        for (size_t c = 0; c < C; c++) {
            const unsigned centre = (unsigned)(rng_next(&seed) % B), spread = 1 + (unsigned)(rng_next(&seed) % B);
            for (size_t t = 0; t < T; t++) {
                int v = (int)centre + (int)(rng_next(&seed) % spread) - (int)(spread / 2);
                s[(l * T + t) * C + c] = (uint8_t)(v < 0 ? 0 : v >= (int)B ? (int)B - 1 : v);
            }
        }
    return s;
}

/* cdf, encode (full and measure-only), decode and decode_packed on both backends, compared
 * (with same_messages, the error message of a failing encode too). */
static void coder_roundtrip(kvc_context_t *cpu, kvc_context_t *dev, const coder_case_t *k, int same_messages)
{
    const size_t nsym = k->L * k->T * k->C, ns = k->L * k->C, ncdf = ns * (k->B + 1);
    uint16_t *cdf = malloc(2 * ncdf);
    uint8_t *sym_d = dev_copy_of(dev, k->sym, nsym);
    uint16_t *cdf_d = dev_alloc(dev, 2 * ncdf);
    kvc_cg_cdf_params_t ca = { .symbols = k->sym, .cdf = cdf, .layers = k->L, .tokens = k->T, .channels = k->C,
                          .num_bins = k->B };
    cr_assert_eq(kvc_cg_cdf(cpu, &ca), KVC_OK, "%s", kvc_last_error());
    ca.symbols = sym_d;
    ca.cdf = cdf_d;
    cr_assert_eq(kvc_cg_cdf(dev, &ca), KVC_OK, "%s", kvc_last_error());
    assert_same(dev, cdf_d, cdf, 2 * ncdf, "cdf");

    uint8_t *streams = calloc(ns, k->cap ? k->cap : 1);
    int32_t *len = malloc(4 * ns);
    uint8_t *streams_d = dev_copy_of(dev, streams, ns * k->cap);
    int32_t *len_d = dev_alloc(dev, 4 * ns);
    size_t need_cpu = 0, need_dev = 1;
    kvc_cg_encode_params_t ea = { .cdf = cdf, .symbols = k->sym, .streams = streams, .lengths = len, .layers = k->L,
                             .tokens = k->T, .channels = k->C, .capacity = k->cap, .num_bins = k->B,
                             .needed = &need_cpu };
    const kvc_status_t st_cpu = kvc_cg_encode(cpu, &ea);
    const char *msg = kvc_last_error();
    char msg_cpu[512];
    snprintf(msg_cpu, sizeof(msg_cpu), "%s", msg);
    ea.cdf = cdf_d;
    ea.symbols = sym_d;
    ea.streams = streams_d;
    ea.lengths = len_d;
    ea.needed = &need_dev;
    const kvc_status_t st_dev = kvc_cg_encode(dev, &ea);
    if (st_cpu != KVC_OK && same_messages)
        cr_assert_str_eq(kvc_last_error(), msg_cpu, "the same message as the CPU backend");
    cr_assert_eq(st_dev, st_cpu, "encode status %s, CPU %s (%s)", kvc_status_name(st_dev), kvc_status_name(st_cpu),
                 kvc_last_error());
    cr_assert_eq(need_dev, need_cpu, "needed %zu vs CPU %zu", need_dev, need_cpu);
    assert_same(dev, len_d, len, 4 * ns, "lengths");
    assert_same(dev, streams_d, streams, ns * k->cap, "streams");
    if (st_cpu == KVC_OK) {
        /* measure only: streams NULL, capacity 0 */
        ea.streams = NULL;
        ea.capacity = 0;
        const kvc_status_t st = kvc_cg_encode(dev, &ea);
        cr_assert_eq(st, KVC_ERR_NO_SPACE, "every stream is longer than 0 bytes");
        assert_same(dev, len_d, len, 4 * ns, "measured lengths");
        cr_assert_eq(need_dev, need_cpu);

        uint8_t *out = malloc(nsym ? nsym : 1);
        uint8_t *out_d = dev_alloc(dev, nsym);
        kvc_cg_decode_params_t da = { .cdf = cdf_d, .streams = streams_d, .lengths = len_d, .symbols = out_d,
                                 .layers = k->L, .tokens = k->T, .channels = k->C, .capacity = k->cap,
                                 .num_bins = k->B };
        cr_assert_eq(kvc_cg_decode(dev, &da), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, k->sym, nsym, "decoded symbols");
        /* packed */
        int64_t *ps = malloc(8 * ns);
        size_t nbytes = 0;
        for (size_t i = 0; i < ns; i++) nbytes += (size_t)len[i];
        uint8_t *packed = malloc(nbytes ? nbytes : 1);
        nbytes = 0;
        for (size_t i = 0; i < ns; i++) {
            memcpy(packed + nbytes, streams + i * k->cap, (size_t)len[i]);
            nbytes += (size_t)len[i];
            ps[i] = (int64_t)nbytes;
        }
        uint8_t *packed_d = dev_copy_of(dev, packed, nbytes);
        int64_t *ps_d = dev_copy_of(dev, ps, 8 * ns);
        kvc_cg_decode_packed_params_t pa = { .cdf = cdf_d, .bytes = packed_d, .nbytes = nbytes, .prefsum = ps_d,
                                        .symbols = out_d, .layers = k->L, .tokens = k->T, .channels = k->C,
                                        .num_bins = k->B };
        uint8_t *zero = calloc(1, nsym ? nsym : 1);
        if (nsym) cr_assert_eq(kvc_memcpy(dev, out_d, zero, nsym), KVC_OK);
        cr_assert_eq(kvc_cg_decode_packed(dev, &pa), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, k->sym, nsym, "decoded symbols (packed)");
        free(zero);
        free(out);
        free(ps);
        free(packed);
        kvc_device_free(dev, out_d);
        kvc_device_free(dev, packed_d);
        kvc_device_free(dev, ps_d);
    }
    free(cdf);
    free(streams);
    free(len);
    kvc_device_free(dev, sym_d);
    kvc_device_free(dev, cdf_d);
    kvc_device_free(dev, streams_d);
    kvc_device_free(dev, len_d);
}

static void coder_random(target_t t)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    const struct {
        size_t L, T, C;
        unsigned B;
    } shapes[] = { { 3, 300, 37, 32 }, { 2, 256, 130, 64 }, { 1, 100, 5, 1 }, { 2, 1000, 9, 16 }, { 1, 0, 4, 8 },
                   { 2, 17, 129, 2 } };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        coder_case_t k = { .L = shapes[i].L, .T = shapes[i].T, .C = shapes[i].C, .B = shapes[i].B };
        k.cap = kvc_cg_encode_bound(k.T);
        k.sym = coder_symbols(k.L, k.T, k.C, k.B, 1000 + i);
        coder_roundtrip(cpu, dev, &k, t == TARGET_GPU);
        /* a capacity too small for some streams: NO_SPACE, same bytes and lengths */
        k.cap = 6;
        if (k.T > 16) coder_roundtrip(cpu, dev, &k, t == TARGET_GPU);
        free(k.sym);
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, coder_random_shapes_and_capacity) { coder_random(TARGET_GPU); }
Test(emu, coder_random_shapes_and_capacity) { coder_random(TARGET_EMU); }

/* LMCache's golden vectors: the target alone must reproduce them. */
static void coder_golden(target_t t)
{
    kvc_context_t *dev = open_target(t);
    const char *names[] = { "coder0_nb16", "coder0_nb32", "coder1_nb16", "coder1_nb32" };
    for (size_t n = 0; n < 4; n++) {
        char rel[128];
        test_npy_t f[6];
        const char *what[6] = { "symbols", "cdf", "output_buffer", "output_lengths", "packed_bytes",
                                "lengths_prefsum" };
        for (int i = 0; i < 6; i++) {
            snprintf(rel, sizeof(rel), "golden/%s_%s.npy", names[n], what[i]);
            f[i] = test_npy_load(kvc_test_data(rel));
        }
        const size_t L = f[0].shape[0], T = f[0].shape[1], C = f[0].shape[2], cap = f[2].shape[2];
        const unsigned B = (unsigned)f[1].shape[2] - 1;
        void *d[6];
        for (int i = 0; i < 6; i++) d[i] = dev_copy_of(dev, f[i].data, f[i].count * f[i].itemsize);
        uint16_t *cdf_d = dev_alloc(dev, f[1].count * 2);
        kvc_cg_cdf_params_t ca = { .symbols = d[0], .cdf = cdf_d, .layers = L, .tokens = T, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_cg_cdf(dev, &ca), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, cdf_d, f[1].data, f[1].count * 2, names[n]);
        uint8_t *zero = calloc(1, f[2].count);
        uint8_t *streams_d = dev_copy_of(dev, zero, f[2].count);
        int32_t *len_d = dev_alloc(dev, 4 * L * C);
        kvc_cg_encode_params_t ea = { .cdf = d[1], .symbols = d[0], .streams = streams_d, .lengths = len_d, .layers = L,
                                 .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
        cr_assert_eq(kvc_cg_encode(dev, &ea), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, len_d, f[3].data, 4 * L * C, names[n]);
        assert_same(dev, streams_d, f[2].data, f[2].count, names[n]);
        uint8_t *out_d = dev_copy_of(dev, zero, L * T * C);
        kvc_cg_decode_params_t da = { .cdf = d[1], .streams = d[2], .lengths = d[3], .symbols = out_d, .layers = L,
                                 .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
        cr_assert_eq(kvc_cg_decode(dev, &da), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, f[0].data, L * T * C, names[n]);
        kvc_cg_decode_packed_params_t pa = { .cdf = d[1], .bytes = d[4], .nbytes = f[4].count, .prefsum = d[5],
                                        .symbols = out_d, .layers = L, .tokens = T, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_memcpy(dev, out_d, zero, L * T * C), KVC_OK);
        cr_assert_eq(kvc_cg_decode_packed(dev, &pa), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, f[0].data, L * T * C, names[n]);
        for (int i = 0; i < 6; i++) {
            kvc_device_free(dev, d[i]);
            test_npy_free(&f[i]);
        }
        kvc_device_free(dev, cdf_d);
        kvc_device_free(dev, streams_d);
        kvc_device_free(dev, len_d);
        kvc_device_free(dev, out_d);
        free(zero);
    }
    kvc_context_destroy(dev);
}

Test(gpu, coder_golden_vectors) { coder_golden(TARGET_GPU); }
Test(emu, coder_golden_vectors) { coder_golden(TARGET_EMU); }

/* The device-side data checks: the CPU backend's status and message, and no output written. */
Test(gpu, coder_bad_input_statuses)
{
    kvc_context_t *dev = open_target(TARGET_GPU), *cpu = kvc_test_cpu_context();
    const size_t L = 2, T = 40, C = 5, ns = L * C;
    const unsigned B = 8;
    uint8_t *sym = coder_symbols(L, T, C, B, 3);
    uint16_t *cdf = malloc(2 * ns * (B + 1));
    kvc_cg_cdf_params_t ca = { .symbols = sym, .cdf = cdf, .layers = L, .tokens = T, .channels = C, .num_bins = B };
    cr_assert_eq(kvc_cg_cdf(cpu, &ca), KVC_OK);
    char msg[512];
    uint8_t *sym_d = dev_copy_of(dev, sym, L * T * C);
    uint16_t *cdf_d = dev_copy_of(dev, cdf, 2 * ns * (B + 1));
    uint16_t *cdf_out_d = dev_copy_of(dev, cdf, 2 * ns * (B + 1));

    /* symbol >= num_bins: cdf and encode say OUT_OF_RANGE naming the first one */
    uint8_t bad = 9;
    cr_assert_eq(kvc_memcpy(dev, sym_d + 123, &bad, 1), KVC_OK);
    cr_assert_eq(kvc_memcpy(dev, sym_d + 200, &bad, 1), KVC_OK);
    sym[123] = sym[200] = bad;
    uint16_t *cdf_tmp = malloc(2 * ns * (B + 1));
    ca.cdf = cdf_tmp;
    cr_assert_eq(kvc_cg_cdf(cpu, &ca), KVC_ERR_OUT_OF_RANGE);
    snprintf(msg, sizeof(msg), "%s", kvc_last_error());
    ca.symbols = sym_d;
    ca.cdf = cdf_out_d;
    cr_assert_eq(kvc_cg_cdf(dev, &ca), KVC_ERR_OUT_OF_RANGE);
    cr_assert_str_eq(kvc_last_error(), msg);
    assert_same(dev, cdf_out_d, cdf, 2 * ns * (B + 1), "cdf untouched");
    int32_t *len_d = dev_alloc(dev, 4 * ns);
    const size_t cap = kvc_cg_encode_bound(T);
    uint8_t *streams_d = dev_alloc(dev, ns * cap);
    kvc_cg_encode_params_t ea = { .cdf = cdf_d, .symbols = sym_d, .streams = streams_d, .lengths = len_d, .layers = L,
                             .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_cg_encode(dev, &ea), KVC_ERR_OUT_OF_RANGE);
    cr_assert(strstr(kvc_last_error(), "symbols[123]"), "%s", kvc_last_error());

    /* a CDF that is not strictly increasing: INVALID_ARG for the encoder, CORRUPT for decoders */
    sym[123] = sym[200] = 0;
    cr_assert_eq(kvc_memcpy(dev, sym_d, sym, L * T * C), KVC_OK);
    uint16_t *cdf_bad = malloc(2 * ns * (B + 1));
    memcpy(cdf_bad, cdf, 2 * ns * (B + 1));
    cdf_bad[7 * (B + 1) + 3] = cdf_bad[7 * (B + 1) + 2];
    cr_assert_eq(kvc_memcpy(dev, cdf_d, cdf_bad, 2 * ns * (B + 1)), KVC_OK);
    uint8_t *streams = malloc(ns * cap);
    int32_t *len = malloc(4 * ns);
    kvc_cg_encode_params_t ec = ea;
    ec.cdf = cdf_bad;
    ec.symbols = sym;
    ec.streams = streams;
    ec.lengths = len;
    cr_assert_eq(kvc_cg_encode(cpu, &ec), KVC_ERR_INVALID_ARG);
    snprintf(msg, sizeof(msg), "%s", kvc_last_error());
    cr_assert_eq(kvc_cg_encode(dev, &ea), KVC_ERR_INVALID_ARG);
    cr_assert_str_eq(kvc_last_error(), msg);
    kvc_cg_decode_params_t da = { .cdf = cdf_d, .streams = streams_d, .lengths = len_d, .symbols = sym_d, .layers = L,
                             .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
    cr_assert_eq(kvc_cg_decode(dev, &da), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "stream 7"), "%s", kvc_last_error());
    assert_same(dev, sym_d, sym, L * T * C, "symbols untouched");

    /* lengths outside [0, capacity], prefix sums that decrease or run past the end: CORRUPT */
    cr_assert_eq(kvc_memcpy(dev, cdf_d, cdf, 2 * ns * (B + 1)), KVC_OK);
    for (size_t i = 0; i < ns; i++) len[i] = (int32_t)(i == 4 ? cap + 1 : 3);
    cr_assert_eq(kvc_memcpy(dev, len_d, len, 4 * ns), KVC_OK);
    cr_assert_eq(kvc_cg_decode(dev, &da), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "lengths[4]"), "%s", kvc_last_error());
    int64_t ps[10] = { 3, 6, 9, 8, 12, 15, 18, 21, 24, 27 };
    int64_t *ps_d = dev_copy_of(dev, ps, sizeof(ps));
    uint8_t *bytes_d = dev_alloc(dev, 27);
    kvc_cg_decode_packed_params_t pa = { .cdf = cdf_d, .bytes = bytes_d, .nbytes = 27, .prefsum = ps_d, .symbols = sym_d,
                                    .layers = L, .tokens = T, .channels = C, .num_bins = B };
    cr_assert_eq(kvc_cg_decode_packed(dev, &pa), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "prefsum[3]") && strstr(kvc_last_error(), "decreases"), "%s",
              kvc_last_error());
    pa.nbytes = 20;
    ps[3] = 10;
    cr_assert_eq(kvc_memcpy(dev, ps_d, ps, sizeof(ps)), KVC_OK);
    cr_assert_eq(kvc_cg_decode_packed(dev, &pa), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "prefsum[7]") && strstr(kvc_last_error(), "past the end"), "%s",
              kvc_last_error());
    /* a CDF row that does not increase is named before the prefix sums */
    cr_assert_eq(kvc_memcpy(dev, cdf_d, cdf_bad, 2 * ns * (B + 1)), KVC_OK);
    cr_assert_eq(kvc_cg_decode_packed(dev, &pa), KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "stream 7") && strstr(kvc_last_error(), "not strictly increasing"), "%s",
              kvc_last_error());
    assert_same(dev, sym_d, sym, L * T * C, "symbols untouched");

    void *all[] = { sym_d, cdf_d, cdf_out_d, len_d, streams_d, ps_d, bytes_d };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) cr_assert_eq(kvc_device_free(dev, all[i]), KVC_OK);
    free(sym);
    free(cdf);
    free(cdf_tmp);
    free(cdf_bad);
    free(streams);
    free(len);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

/* ------------------------------------------------------------------ interleaved rANS */

/* status and message of the last call, kept */
typedef struct {
    kvc_status_t st;
    char msg[512];
} outcome_t;

static outcome_t outcome(kvc_status_t st)
{
    outcome_t o = { .st = st };
    snprintf(o.msg, sizeof(o.msg), "%s", st == KVC_OK ? "" : kvc_last_error());
    return o;
}

/* The device says what the CPU backend says: the same status and, on the real module (kernels and
 * glue: a GPU, or gpu_host), the same words. */
static void same_outcome(outcome_t dev, outcome_t cpu, const char *what)
{
    cr_assert_eq(dev.st, cpu.st, "%s: status %s, CPU backend %s (%s | %s)", what, kvc_status_name(dev.st),
                 kvc_status_name(cpu.st), dev.msg, cpu.msg);
    cr_assert_str_eq(dev.msg, cpu.msg, "%s: the CPU backend's message", what);
}

/* kvc_rans_tables / _encode / _decode on device tensors against the CPU backend on host copies:
 * the tables and every stream byte for byte (the bytes up to each length), the packed streams
 * decoded back; then each data check (symbols, tables, end offsets, a damaged stream) with the
 * CPU backend's status and message, and nothing written. */
static void rans_suite(target_t t)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    const struct {
        size_t L, T, C;
        unsigned B;
    } shapes[] = { { 3, 300, 130, 32 }, { 2, 256, 37, 64 }, { 1, 100, 5, 1 }, { 2, 1000, 9, 16 }, { 1, 0, 4, 8 },
                   { 2, 17, 129, 2 }, { 2, 64, 32, 32 } };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const size_t L = shapes[i].L, T = shapes[i].T, C = shapes[i].C, G = (C + 31) / 32, Tt = T ? T : 1;
        const unsigned B = shapes[i].B;
        const size_t nsym = L * T * C, nt = L * C * (B + 1), cap = kvc_rans_encode_bound(T);
        uint8_t *sym = coder_symbols(L, Tt, C, B, 500 + i); /* tables of Tt >= 1 tokens; T = 0 codes none */
        uint16_t *cum = malloc(2 * nt);
        uint8_t *sym_d = dev_copy_of(dev, sym, L * Tt * C);
        uint16_t *cum_d = dev_alloc(dev, 2 * nt);
        kvc_rans_tables_params_t tp = { .symbols = sym, .cum = cum, .layers = L, .tokens = Tt, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_rans_tables(cpu, &tp), KVC_OK, "%s", kvc_last_error());
        tp.symbols = sym_d;
        tp.cum = cum_d;
        cr_assert_eq(kvc_rans_tables(dev, &tp), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, cum_d, cum, 2 * nt, "rANS tables");

        uint8_t *streams = malloc(L * G * cap), *streams_h;
        int32_t *len = malloc(4 * L * G), *len_h;
        uint8_t *streams_d = dev_alloc(dev, L * G * cap);
        int32_t *len_d = dev_alloc(dev, 4 * L * G);
        kvc_rans_encode_params_t ep = { .cum = cum, .symbols = sym, .streams = streams, .lengths = len, .layers = L,
                                        .tokens = T, .channels = C, .capacity = cap, .num_bins = B };
        cr_assert_eq(kvc_rans_encode(cpu, &ep), KVC_OK, "%s", kvc_last_error());
        ep.cum = cum_d, ep.symbols = sym_d, ep.streams = streams_d, ep.lengths = len_d;
        cr_assert_eq(kvc_rans_encode(dev, &ep), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, len_d, len, 4 * L * G, "rANS lengths");
        streams_h = host_copy_of(dev, streams_d, L * G * cap);
        len_h = host_copy_of(dev, len_d, 4 * L * G);
        int64_t *ends = malloc(8 * L * G);
        uint8_t *packed = malloc(L * G * cap);
        size_t nbytes = 0;
        for (size_t k = 0; k < L * G; k++) {
            cr_assert(memcmp(streams_h + k * cap, streams + k * cap, (size_t)len[k]) == 0,
                      "L %zu T %zu C %zu B %u: stream %zu differs from the CPU backend's", L, T, C, B, k);
            memcpy(packed + nbytes, streams + k * cap, (size_t)len[k]);
            ends[k] = (int64_t)(nbytes += (size_t)len[k]);
        }
        uint8_t *packed_d = dev_copy_of(dev, packed, nbytes);
        int64_t *ends_d = dev_copy_of(dev, ends, 8 * L * G);
        uint8_t *out_d = dev_alloc(dev, nsym);
        kvc_rans_decode_params_t dp = { .cum = cum_d, .bytes = packed_d, .nbytes = nbytes, .ends = ends_d, .symbols = out_d,
                                        .layers = L, .tokens = T, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_rans_decode(dev, &dp), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, sym, nsym, "rANS decoded symbols");

        if (i == 0) { /* the data checks: L 3, T 300, C 130 (5 streams a layer, the last of 2 channels), 32 bins */
            kvc_rans_decode_params_t dc = { .cum = cum, .bytes = packed, .nbytes = nbytes, .ends = ends, .symbols = sym,
                                            .layers = L, .tokens = T, .channels = C, .num_bins = B };
            uint8_t *sym2 = malloc(nsym), *out = malloc(nsym);
            memcpy(sym2, sym, nsym);
            /* a symbol >= num_bins (tables) and one without frequency (encode) */
            sym2[5000] = 40;
            cr_assert_eq(kvc_memcpy(dev, sym_d, sym2, nsym), KVC_OK);
            tp.symbols = sym2, tp.cum = cum;
            uint16_t *cum2 = malloc(2 * nt);
            memcpy(cum2, cum, 2 * nt);
            tp.cum = cum2;
            const outcome_t tc = outcome(kvc_rans_tables(cpu, &tp));
            tp.symbols = sym_d, tp.cum = cum_d;
            same_outcome(outcome(kvc_rans_tables(dev, &tp)), tc, "tables: symbol >= num_bins");
            assert_same(dev, cum_d, cum, 2 * nt, "tables untouched");
            cr_assert_eq(tc.st, KVC_ERR_OUT_OF_RANGE);
            unsigned zero = 0; /* symbol 5000 is layer 0, token 38, channel 60 */
            while (cum[60 * (B + 1) + zero + 1] > cum[60 * (B + 1) + zero]) zero++;
            cr_assert_lt(zero, B, "channel 60 has a symbol without frequency");
            sym2[5000] = (uint8_t)zero;
            sym2[9000] = 33;
            cr_assert_eq(kvc_memcpy(dev, sym_d, sym2, nsym), KVC_OK);
            ep.cum = cum, ep.symbols = sym2, ep.streams = streams, ep.lengths = len;
            const outcome_t ec = outcome(kvc_rans_encode(cpu, &ep));
            cr_assert_eq(ec.st, KVC_ERR_OUT_OF_RANGE);
            cr_assert(strstr(ec.msg, "symbols[5000]") && strstr(ec.msg, "frequency 0"), "%s", ec.msg);
            ep.cum = cum_d, ep.symbols = sym_d, ep.streams = streams_d, ep.lengths = len_d;
            cr_assert_eq(kvc_memcpy(dev, len_d, len_h, 4 * L * G), KVC_OK);
            same_outcome(outcome(kvc_rans_encode(dev, &ep)), ec, "encode: symbol without frequency");
            assert_same(dev, len_d, len_h, 4 * L * G, "lengths untouched");
            cr_assert_eq(kvc_memcpy(dev, sym_d, sym, nsym), KVC_OK);
            /* tables that are not: INVALID_ARG to the encoder, CORRUPT to the decoder */
            const size_t at[] = { 40 * (B + 1), 3 * (B + 1) + B, 70 * (B + 1) + 7 };
            const uint16_t val[] = { 2, 4000, 4095 };
            for (size_t j = 0; j < 3; j++) {
                memcpy(cum2, cum, 2 * nt);
                cum2[at[j]] = val[j];
                ep.cum = cum2, ep.symbols = sym, ep.streams = streams, ep.lengths = len;
                const outcome_t e1 = outcome(kvc_rans_encode(cpu, &ep));
                cr_assert_eq(e1.st, KVC_ERR_INVALID_ARG, "%s", e1.msg);
                dc.cum = cum2, dc.symbols = out;
                const outcome_t d1 = outcome(kvc_rans_decode(cpu, &dc));
                cr_assert_eq(d1.st, KVC_ERR_CORRUPT, "%s", d1.msg);
                cr_assert_eq(kvc_memcpy(dev, cum_d, cum2, 2 * nt), KVC_OK);
                ep.cum = cum_d, ep.symbols = sym_d, ep.streams = streams_d, ep.lengths = len_d;
                same_outcome(outcome(kvc_rans_encode(dev, &ep)), e1, "encode: not a table");
                cr_assert_eq(kvc_memcpy(dev, out_d, packed, nsym < nbytes ? nsym : nbytes), KVC_OK);
                uint8_t *before = host_copy_of(dev, out_d, nsym);
                same_outcome(outcome(kvc_rans_decode(dev, &dp)), d1, "decode: not a table");
                assert_same(dev, out_d, before, nsym, "symbols untouched");
                free(before);
            }
            cr_assert_eq(kvc_memcpy(dev, cum_d, cum, 2 * nt), KVC_OK);
            dc.cum = cum;
            /* end offsets that decrease, start below 0 or pass nbytes */
            int64_t *e2 = malloc(8 * L * G);
            for (size_t j = 0; j < 3; j++) {
                memcpy(e2, ends, 8 * L * G);
                if (j == 0) e2[7] = e2[6] - 1;
                if (j == 1) e2[0] = -5;
                if (j == 2) e2[L * G - 2] = (int64_t)nbytes + 1;
                dc.ends = e2;
                const outcome_t d1 = outcome(kvc_rans_decode(cpu, &dc));
                cr_assert_eq(d1.st, KVC_ERR_CORRUPT, "%s", d1.msg);
                cr_assert_eq(kvc_memcpy(dev, ends_d, e2, 8 * L * G), KVC_OK);
                same_outcome(outcome(kvc_rans_decode(dev, &dp)), d1, "decode: bad end offsets");
            }
            cr_assert_eq(kvc_memcpy(dev, ends_d, ends, 8 * L * G), KVC_OK);
            dc.ends = ends;
            /* damaged streams: the first one named; a flipped state bit and random bytes */
            uint8_t *p2 = malloc(nbytes);
            for (size_t j = 0; j < 4; j++) {
                memcpy(p2, packed, nbytes);
                const size_t k = j == 0 ? 9 : j == 1 ? 0 : j == 2 ? L * G - 1 : 6;
                const size_t start = k ? (size_t)ends[k - 1] : 0;
                if (j < 3) p2[start + 3] ^= 0x80;
                else
                    for (size_t b = start; b < (size_t)ends[k]; b++) p2[b] = (uint8_t)(b * 131 + 7);
                if (j == 0) p2[(size_t)ends[11] + 3] ^= 0x80; /* a later one too: the first is named */
                dc.bytes = p2;
                const outcome_t d1 = outcome(kvc_rans_decode(cpu, &dc));
                cr_assert_eq(d1.st, KVC_ERR_CORRUPT, "%s", d1.msg);
                char want[64];
                snprintf(want, sizeof want, "rANS stream %zu ", k);
                cr_assert(strstr(d1.msg, want), "%s names stream %zu", d1.msg, k);
                cr_assert_eq(kvc_memcpy(dev, packed_d, p2, nbytes), KVC_OK);
                same_outcome(outcome(kvc_rans_decode(dev, &dp)), d1, "decode: a damaged stream");
            }
            free(p2);
            free(e2);
            free(cum2);
            free(sym2);
            free(out);
        }
        void *all[] = { sym_d, cum_d, streams_d, len_d, packed_d, ends_d, out_d };
        for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++) cr_assert_eq(kvc_device_free(dev, all[j]), KVC_OK);
        free(sym);
        free(cum);
        free(streams);
        free(streams_h);
        free(len);
        free(len_h);
        free(ends);
        free(packed);
    }
    { /* no tokens, symbols NULL: streams of states alone, decoded without a symbol */
        const size_t L = 2, C = 36, G = 2, B = 4; /* streams of 32 channels (8 states) and 4 (4 states) */
        uint16_t cum[2 * 36 * 5];
        for (size_t k = 0; k < L * C; k++) {
            const uint16_t row[5] = { 0, 1000, 1000, 3000, 4096 };
            memcpy(cum + k * 5, row, sizeof row);
        }
        uint16_t *cum_d = dev_copy_of(dev, cum, sizeof cum);
        const size_t cap = kvc_rans_encode_bound(0);
        uint8_t *streams_d = dev_alloc(dev, L * G * cap), streams[4 * 32];
        int32_t *len_d = dev_alloc(dev, 4 * L * G), len[4];
        kvc_rans_encode_params_t ep = { .cum = cum, .streams = streams, .lengths = len, .layers = L, .channels = C,
                                        .capacity = cap, .num_bins = B };
        cr_assert_eq(kvc_rans_encode(cpu, &ep), KVC_OK, "%s", kvc_last_error());
        ep.cum = cum_d, ep.streams = streams_d, ep.lengths = len_d;
        cr_assert_eq(kvc_rans_encode(dev, &ep), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, len_d, len, sizeof len, "lengths of no tokens");
        int64_t ends[4] = { len[0], len[0] + len[1], len[0] + len[1] + len[2], len[0] + len[1] + len[2] + len[3] };
        cr_assert_eq(ends[3], 32 + 16 + 32 + 16);
        uint8_t packed[96];
        for (size_t k = 0, at = 0; k < 4; at += (size_t)len[k], k++) memcpy(packed + at, streams + k * cap, (size_t)len[k]);
        uint8_t *packed_d = dev_copy_of(dev, packed, sizeof packed);
        int64_t *ends_d = dev_copy_of(dev, ends, sizeof ends);
        kvc_rans_decode_params_t dp = { .cum = cum_d, .bytes = packed_d, .nbytes = sizeof packed, .ends = ends_d,
                                        .layers = L, .channels = C, .num_bins = B };
        cr_assert_eq(kvc_rans_decode(dev, &dp), KVC_OK, "%s", kvc_last_error());
        void *all[] = { cum_d, streams_d, len_d, packed_d, ends_d };
        for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++) cr_assert_eq(kvc_device_free(dev, all[j]), KVC_OK);
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, rans_against_cpu_backend) { rans_suite(TARGET_GPU); }

/* ------------------------------------------------------------------ quantiser */

static uint16_t f32_to_bits16(float v, int dtype)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (dtype == KVC_DTYPE_BF16) return (uint16_t)(u >> 16); /* truncation is fine for test inputs */
    /* fp16 of a float in range (test inputs only): via _Float16 */
    _Float16 h = (_Float16)v;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static void quant_suite(target_t t)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    const size_t L = 2, T = 7, C = 300, n = L * T * C;
    const uint32_t bins[2] = { 32, 16 };
    for (int dtype = KVC_DTYPE_F16; dtype <= KVC_DTYPE_F32; dtype++) {
        const size_t es = dtype == KVC_DTYPE_F32 ? 4 : 2;
        uint8_t *vals = malloc(n * es);
        uint64_t seed = 10 + (uint64_t)dtype;
        for (size_t i = 0; i < n; i++) {
            const size_t row = i / C;
            float v = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 * 2 - 1);
            if (row == 1) v = 0.0f;                                   /* all-zero row */
            if (row == 2) v *= dtype == KVC_DTYPE_F32 ? 1e-30f : 1e-6f;  /* tiny / subnormal */
            if (row == 3) v *= dtype == KVC_DTYPE_F16 ? 6e4f : 1e30f;    /* huge */
            if (row == 4 && i % C == 5) v = NAN;
            if (row == 4 && i % C == 6) v = INFINITY;
            if (row == 5 && i % C == 9) v = -INFINITY;
            if (es == 4) memcpy(vals + 4 * i, &v, 4);
            else {
                const uint16_t b = f32_to_bits16(v, dtype);
                memcpy(vals + 2 * i, &b, 2);
            }
        }
        uint8_t *sym = malloc(n);
        float *scales = malloc(4 * L * T);
        kvc_quant_params_t q = { .dtype = dtype, .values = vals, .symbols = sym, .scales = scales, .bins = bins,
                               .layers = L, .tokens = T, .channels = C };
        cr_assert_eq(kvc_quantise(cpu, &q), KVC_OK, "%s", kvc_last_error());
        void *vals_d = dev_copy_of(dev, vals, n * es);
        uint8_t *sym_d = dev_alloc(dev, n);
        float *scales_d = dev_alloc(dev, 4 * L * T);
        kvc_quant_params_t qd = q;
        qd.values = vals_d;
        qd.symbols = sym_d;
        qd.scales = scales_d;
        cr_assert_eq(kvc_quantise(dev, &qd), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, sym_d, sym, n, "quantised symbols");
        assert_same(dev, scales_d, scales, 4 * L * T, "scales");
        /* dequantise into fresh buffers */
        uint8_t *out = calloc(n, es);
        void *out_d = dev_copy_of(dev, out, n * es);
        q.values = out;
        qd.values = out_d;
        cr_assert_eq(kvc_dequantise(cpu, &q), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(kvc_dequantise(dev, &qd), KVC_OK, "%s", kvc_last_error());
        assert_same(dev, out_d, out, n * es, "dequantised values");
        if (t == TARGET_GPU) { /* device-side checks: bad scale, symbol above 2M */
            char msg[512];
            const float neg = -1.0f;
            uint8_t big = 31; /* layer 1 has 16 bins: 2M = 14 */
            uint8_t *before = host_copy_of(dev, out_d, n * es);
            cr_assert_eq(kvc_memcpy(dev, scales_d + 3, &neg, 4), KVC_OK);
            scales[3] = neg;
            cr_assert_eq(kvc_dequantise(cpu, &q), KVC_ERR_INVALID_ARG);
            snprintf(msg, sizeof(msg), "%s", kvc_last_error());
            cr_assert_eq(kvc_dequantise(dev, &qd), KVC_ERR_INVALID_ARG);
            cr_assert_str_eq(kvc_last_error(), msg);
            scales[3] = 1.0f;
            cr_assert_eq(kvc_memcpy(dev, scales_d, scales, 4 * L * T), KVC_OK);
            cr_assert_eq(kvc_memcpy(dev, sym_d + T * C + 17, &big, 1), KVC_OK);
            sym[T * C + 17] = big;
            cr_assert_eq(kvc_dequantise(cpu, &q), KVC_ERR_OUT_OF_RANGE);
            snprintf(msg, sizeof(msg), "%s", kvc_last_error());
            cr_assert_eq(kvc_dequantise(dev, &qd), KVC_ERR_OUT_OF_RANGE);
            cr_assert_str_eq(kvc_last_error(), msg);
            assert_same(dev, out_d, before, n * es, "values untouched");
            free(before);
        }
        kvc_device_free(dev, vals_d);
        kvc_device_free(dev, sym_d);
        kvc_device_free(dev, scales_d);
        kvc_device_free(dev, out_d);
        free(vals);
        free(sym);
        free(scales);
        free(out);
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, quantise_dequantise_every_dtype) { quant_suite(TARGET_GPU); }
Test(emu, quantise_dequantise_every_dtype) { quant_suite(TARGET_EMU); }

/* ------------------------------------------------------------------ device memory API */

static void device_api(kvc_context_t *ctx)
{
    void *p = NULL, *q = NULL;
    cr_assert_eq(kvc_device_alloc(ctx, 0, &p), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_device_alloc(ctx, 16, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_device_alloc(NULL, 16, &p), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_device_alloc(ctx, 4096, &p), KVC_OK);
    cr_assert_eq(kvc_device_alloc(ctx, 100, &q), KVC_OK);
    uint8_t in[4096], out[4096];
    fill_random(in, sizeof(in), 1);
    cr_assert_eq(kvc_memcpy(ctx, p, in, sizeof(in)), KVC_OK);
    cr_assert_eq(kvc_memcpy(ctx, q, (uint8_t *)p + 1000, 100), KVC_OK); /* device to device */
    cr_assert_eq(kvc_memcpy(ctx, out, q, 100), KVC_OK);
    cr_assert_arr_eq(out, in + 1000, 100);
    cr_assert_eq(kvc_memcpy(ctx, NULL, in, 0), KVC_OK);
    cr_assert_eq(kvc_memcpy(ctx, NULL, in, 1), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_memcpy(ctx, out, NULL, 1), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_device_free(ctx, in), KVC_ERR_STATE, "not ours");
    cr_assert_eq(kvc_device_free(ctx, (uint8_t *)p + 1), KVC_ERR_STATE, "interior pointer");
    cr_assert_eq(kvc_device_free(ctx, p), KVC_OK);
    cr_assert_eq(kvc_device_free(ctx, p), KVC_ERR_STATE, "double free");
    cr_assert_eq(kvc_device_free(ctx, NULL), KVC_OK);
    /* q is left for kvc_context_destroy to free */
}

/* A backend's failure reaches the caller once, with its own reason (the core used to format
 * kvc_last_error() into itself: overlapping vsnprintf, reason lost). */
Test(device_api, backend_error_message_kept)
{
    kvc_context_t *ctx = open_target(TARGET_EMU);
    void *p = NULL;
    const size_t huge = (size_t)1 << 50;
    cr_assert_eq(kvc_device_alloc(ctx, huge, &p), KVC_ERR_NO_MEMORY);
    cr_assert_null(p);
    cr_assert_str_eq(kvc_last_error(), "device_alloc: 1125899906842624 bytes on backend cuda: emu: device arena full "
                                        "(1125899906842624 bytes asked)");
    kvc_context_destroy(ctx);
}

Test(device_api, cpu_backend)
{
    kvc_context_t *ctx = kvc_test_cpu_context();
    device_api(ctx);
    kvc_context_destroy(ctx);
}

Test(gpu, device_api)
{
    kvc_context_t *ctx = open_target(TARGET_GPU);
    device_api(ctx);
    kvc_context_destroy(ctx);
}

/* The module's remaining slots and its runtime-error mapping: a completion recorded on a stream is
 * taken once the stream's earlier work is done (the module's host callback), the PCI bus id comes in
 * hwloc's lower-case form, and a runtime allocation failure is KVC_ERR_NO_MEMORY naming the call. */
Test(gpu, recorder_pci_bus_id_and_runtime_errors)
{
    kvc_context_t *dev = open_target(TARGET_GPU);
    const size_t n = 4096;
    uint8_t *src = malloc(n), *back = calloc(1, n);
    fill_random(src, n, 5);
    uint8_t *d = dev_alloc(dev, n);
    cr_assert_eq(kvc_memcpy(dev, d, src, n), KVC_OK);
    void *pinned = NULL;
    const kvc_mem_params_t mp = { .field_mask = KVC_MEM_PARAM_KIND, .kind = KVC_MEM_PINNED };
    cr_assert_eq(kvc_mem_alloc(dev, n, &mp, &pinned, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_memcpy_async(dev, pinned, d, n, KVC_D2H, 0, n, NULL), KVC_OK, "%s", kvc_last_error());
    const char payload[3] = { 'a', 0, 'b' };
    cr_assert_eq(kvc_record_completion(dev, NULL, "copied", payload, sizeof(payload)), KVC_OK, "%s", kvc_last_error());
    kvc_completion_record_t *rec = NULL;
    size_t count = 0;
    if (gpu_module_file()) { /* the host-built module runs a stream's work when the host waits for it */
        cr_assert_eq(kvc_drain_completions(dev, &rec, &count), KVC_OK);
        cr_assert_eq(count, 0, "a completion taken before the stream got there");
    }
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_drain_completions(dev, &rec, &count), KVC_OK);
    cr_assert_eq(count, 1);
    cr_assert_str_eq(rec[0].kind, "copied");
    cr_assert(rec[0].payload_len == sizeof(payload) && !memcmp(rec[0].payload, payload, sizeof(payload)));
    kvc_completion_records_free(rec, count);
    cr_assert_arr_eq(pinned, src, n, "the copy queued before the record is done");

    char bus[32];
    cr_assert_eq(kvc_device_pci_bus_id(dev, 0, bus, sizeof(bus)), KVC_OK, "%s", kvc_last_error());
    unsigned dom, b, dv, fn;
    char end;
    cr_assert_eq(sscanf(bus, "%4x:%2x:%2x.%1x%c", &dom, &b, &dv, &fn, &end), 4, "bus id %s", bus);
    for (const char *c = bus; *c; c++) cr_assert(!(*c >= 'A' && *c <= 'F'), "bus id %s is not lower case", bus);
    if (gpu_module_file()) cr_assert_str_eq(bus, "0000:3b:00.0"); /* the runtime's "0000:3B:00.0" */

    void *huge = NULL;
    cr_assert_eq(kvc_device_alloc(dev, (size_t)1 << 50, &huge), KVC_ERR_NO_MEMORY);
    cr_assert(strstr(kvc_last_error(), "call gpuMalloc") && strstr(kvc_last_error(), "failed"), "%s",
              kvc_last_error());
    cr_assert_eq(kvc_mem_free(dev, pinned), KVC_OK);
    cr_assert_eq(kvc_device_free(dev, d), KVC_OK);
    free(src);
    free(back);
    kvc_context_destroy(dev);
}

/* ------------------------------------------------------------------ modules (always) */

/* A build-tree path that stays valid while the next three calls are made (kvc_test_build reuses
 * one buffer; a test needs at most four paths at once). */
static const char *module_path(const char *name)
{
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof(bufs[0]), "%s", kvc_test_build(name));
    return b;
}

/* Dynamic symbols a module defines: exactly kvc_backend_entry. */
static void exports_only_entry(const char *so)
{
    if (access(so, F_OK) != 0) cr_skip_test("%s was not built (configure found no compiler for it)", so);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' 2>&1", so);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512];
    int entry = 0, others = 0;
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
        if (!strcmp(name, "kvc_backend_entry")) entry++;
        else {
            others++;
            cr_log_error("%s also exports %s (%s)", so, name, type);
        }
    }
    cr_assert_eq(pclose(p), 0, "nm failed on %s", so);
    cr_assert_eq(entry, 1, "%s: kvc_backend_entry not exported", so);
    cr_assert_eq(others, 0, "%s exports %d other symbols", so, others);
    /* and the loader agrees: the entry resolves, internal functions do not */
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "dlopen %s: %s", so, dlerror());
    cr_assert_not_null(dlsym(h, "kvc_backend_entry"));
    const char *internal[] = { "kvc_gpu_status", "kvc_gpu_transfer_tokens", "kvc_gpu_cg_encode", "kvc_gpu_stage_begin" };
    for (size_t i = 0; i < sizeof(internal) / sizeof(internal[0]); i++)
        cr_assert_null(dlsym(h, internal[i]), "%s is visible in %s", internal[i], so);
    dlclose(h);
}

Test(modules, cuda_exports_only_entry) { exports_only_entry(module_path(".libs/kvcore_cuda.so")); }
Test(modules, hip_exports_only_entry) { exports_only_entry(module_path(".libs/kvcore_hip.so")); }

Test(modules, libkvcore_needs_no_gpu_runtime)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "readelf -d '%s' 2>&1", module_path(".libs/libkvcore.so"));
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512];
    int needed = 0;
    while (fgets(line, sizeof(line), p)) {
        if (!strstr(line, "(NEEDED)")) continue;
        needed++;
        const char *bad[] = { "libcuda", "libcudart", "libamdhip", "libhsa", "librocm", "libnvrtc", "libhiprtc" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
            cr_assert_null(strstr(line, bad[i]), "libkvcore.so needs a GPU runtime: %s", line);
    }
    cr_assert_eq(pclose(p), 0, "readelf failed");
    cr_assert_gt(needed, 0, "no NEEDED entries read: is this the right file?");
}

/* `kvcore info --all` opens every built module; on this machine they report no device. */
Test(modules, info_all_loads_modules_without_device)
{
    const int cuda = access(module_path(".libs/kvcore_cuda.so"), F_OK) == 0;
    const int hip = access(module_path(".libs/kvcore_hip.so"), F_OK) == 0;
    if (!cuda && !hip) cr_skip_test("no GPU module was built");
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "KVCORE_MODULE_PATH='%s' '%s' info --all --json 2>&1", module_path(".libs"),
             module_path("kvcore"));
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[1 << 16];
    const size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    cr_assert_eq(pclose(p), 0, "kvcore info failed: %s", out);
    const char *names[2] = { "cuda", "hip" };
    const int built[2] = { cuda, hip };
    for (int i = 0; i < 2; i++) {
        if (!built[i]) continue;
        char key[64];
        snprintf(key, sizeof(key), "\"name\": \"%s\"", names[i]);
        const char *b = strstr(out, key);
        cr_assert_not_null(b, "%s missing from: %s", names[i], out);
        const char *end = strchr(b, '}');
        cr_assert_not_null(end);
        char entry[1024];
        snprintf(entry, sizeof(entry), "%.*s", (int)(end - b), b);
        cr_assert(strstr(entry, "\"loaded\": true"), "%s not loaded: %s", names[i], entry);
        if (strstr(entry, "\"devices\": 0") == NULL)
            cr_log_warn("%s reports a device on this machine: %s", names[i], entry);
    }
}

/* ------------------------------------------------------------------ RoPE and copies */

#include <kvcore/rope.h>

static float rope_value(const void *p, kvc_dtype_t dt, size_t i)
{
    if (dt == KVC_DTYPE_F32) return ((const float *)p)[i];
    uint16_t b = ((const uint16_t *)p)[i];
    if (dt == KVC_DTYPE_BF16) {
        const uint32_t u = (uint32_t)b << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

/* Within a few units in the last place of the dtype (the GPU uses sincosf, the CPU SLEEF). */
static void rope_close(kvc_context_t *dev, const void *dev_buf, const void *cpu_buf, kvc_dtype_t dt, size_t n,
                       const char *what)
{
    const size_t es = kvc_dtype_size(dt);
    uint8_t *h = host_copy_of(dev, dev_buf, n * es);
    const double tol = dt == KVC_DTYPE_F32 ? 2e-5 : dt == KVC_DTYPE_F16 ? 2e-3 : 1.6e-2;
    for (size_t i = 0; i < n; i++) {
        const double a = rope_value(h, dt, i), b = rope_value(cpu_buf, dt, i);
        cr_assert(fabs(a - b) <= tol * (1 + fabs(b)), "%s: element %zu: GPU %g, CPU %g", what, i, a, b);
    }
    free(h);
}

static void rope_suite(target_t t)
{
    kvc_context_t *dev = open_target(t), *cpu = kvc_test_cpu_context();
    const size_t N = 37, NH = 5, HS = 64, ROT = 48, MAXP = 300;
    for (int dt = KVC_DTYPE_F16; dt <= KVC_DTYPE_F32; dt++) {
        const size_t es = kvc_dtype_size((kvc_dtype_t)dt);
        /* table */
        uint8_t *tab = malloc(MAXP * ROT * es);
        void *tab_d = dev_alloc(dev, MAXP * ROT * es);
        kvc_rope_table_t table = { .data = tab, .dtype = dt, .max_position = MAXP, .rot_dim = ROT };
        cr_assert_eq(kvc_rope_cache_build(cpu, NULL, &table, 10000.0), KVC_OK, "%s", kvc_last_error());
        table.data = tab_d;
        cr_assert_eq(kvc_rope_cache_build(dev, NULL, &table, 10000.0), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
        rope_close(dev, tab_d, tab, dt, MAXP * ROT, "cos/sin table");
        table.data = tab;
        void *tab_cpu_d = dev_copy_of(dev, tab, MAXP * ROT * es); /* both sides from the same table */
        int64_t oldp[37], newp[37];
        uint64_t seed = 5;
        for (size_t i = 0; i < N; i++) {
            oldp[i] = (int64_t)(rng_next(&seed) % MAXP);
            newp[i] = (int64_t)(rng_next(&seed) % MAXP);
        }
        for (int style = 0; style < 2; style++)
            for (int delta = 0; delta < 2; delta++) {
                const size_t nel = N * NH * HS;
                uint8_t *key = malloc(nel * es);
                for (size_t i = 0; i < nel; i++) {
                    const float v = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 * 4 - 2);
                    if (dt == KVC_DTYPE_F32) memcpy(key + 4 * i, &v, 4);
                    else {
                        const uint16_t b = f32_to_bits16(v, dt == KVC_DTYPE_BF16 ? KVC_DTYPE_BF16 : KVC_DTYPE_F16);
                        memcpy(key + 2 * i, &b, 2);
                    }
                }
                void *key_d = dev_copy_of(dev, key, nel * es);
                kvc_rope_keys_t k = { .data = key, .dtype = dt, .num_tokens = N, .num_heads = NH, .head_size = HS };
                kvc_status_t st = delta ? kvc_rope_k_delta(cpu, NULL, &k, oldp, newp, ROT, 10000.0, ROPE_STYLE(style))
                                        : kvc_rope_k_fused(cpu, NULL, &k, oldp, newp, &table, ROPE_STYLE(style));
                cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
                k.data = key_d;
                kvc_rope_table_t td = table;
                td.data = tab_cpu_d;
                st = delta ? kvc_rope_k_delta(dev, NULL, &k, oldp, newp, ROT, 10000.0, ROPE_STYLE(style))
                           : kvc_rope_k_fused(dev, NULL, &k, oldp, newp, &td, ROPE_STYLE(style));
                cr_assert_eq(st, KVC_OK, "%s", kvc_last_error());
                cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
                rope_close(dev, key_d, key, dt, nel, delta ? "rope_k_delta" : "rope_k_fused");
                kvc_device_free(dev, key_d);
                free(key);
            }
        kvc_device_free(dev, tab_d);
        kvc_device_free(dev, tab_cpu_d);
        free(tab);
    }
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, rope_against_cpu_backend) { rope_suite(TARGET_GPU); }

static unsigned long emu_syncs(target_t target);

/* RoPE positions in device memory: checked on the device, deferred errors as for index tables. */
static void device_resident_positions(target_t target)
{
    kvc_context_t *dev = open_target(target), *cpu = kvc_test_cpu_context();
    enum { N = 9, NH = 3, HS = 16, MAXP = 50 };
    const size_t nel = N * NH * HS;
    float *tab = malloc(MAXP * HS * 4), *key = malloc(nel * 4), *want = malloc(nel * 4);
    kvc_rope_table_t table = { .data = tab, .dtype = KVC_DTYPE_F32, .max_position = MAXP, .rot_dim = HS };
    cr_assert_eq(kvc_rope_cache_build(cpu, NULL, &table, 10000.0), KVC_OK, "%s", kvc_last_error());
    kvc_rope_table_t td = table;
    td.data = dev_copy_of(dev, tab, MAXP * HS * 4);
    uint64_t seed = 11;
    for (size_t i = 0; i < nel; i++) key[i] = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 * 4 - 2);
    int64_t oldp[N], newp[N];
    for (int i = 0; i < N; i++) {
        oldp[i] = (int64_t)(rng_next(&seed) % MAXP);
        newp[i] = (int64_t)(rng_next(&seed) % MAXP);
    }
    int64_t *oldp_d = dev_copy_of(dev, oldp, sizeof(oldp)), *newp_d = dev_copy_of(dev, newp, sizeof(newp));
    kvc_rope_keys_t k = { .data = want, .dtype = KVC_DTYPE_F32, .num_tokens = N, .num_heads = NH, .head_size = HS };
    for (int delta = 0; delta < 2; delta++) {
        memcpy(want, key, nel * 4);
        k.data = want;
        cr_assert_eq(delta ? kvc_rope_k_delta(cpu, NULL, &k, oldp, newp, HS, 10000.0, NULL)
                           : kvc_rope_k_fused(cpu, NULL, &k, oldp, newp, &table, NULL),
                     KVC_OK, "%s", kvc_last_error());
        k.data = dev_copy_of(dev, key, nel * 4);
        const unsigned long syncs = emu_syncs(target);
        cr_assert_eq(delta ? kvc_rope_k_delta(dev, NULL, &k, oldp_d, newp_d, HS, 10000.0, NULL)
                           : kvc_rope_k_fused(dev, NULL, &k, oldp_d, newp_d, &td, NULL),
                     KVC_OK, "device positions: %s", kvc_last_error());
        cr_assert_eq(emu_syncs(target), syncs, "good device positions make the host wait");
        cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error());
        rope_close(dev, k.data, want, KVC_DTYPE_F32, nel, delta ? "delta, device positions" : "fused, device positions");
        kvc_device_free(dev, k.data);
    }
    /* bad entries in both tables: the CPU names old_positions first; nothing written */
    int64_t bad_old[N], bad_new[N];
    memcpy(bad_old, oldp, sizeof(oldp));
    memcpy(bad_new, newp, sizeof(newp));
    bad_old[5] = MAXP;
    bad_new[3] = -1;
    k.data = want;
    for (int which = 0; which < 2; which++) {
        const int64_t *o = which ? oldp : bad_old;
        cr_assert_eq(kvc_rope_k_fused(cpu, NULL, &k, o, bad_new, &table, NULL), KVC_ERR_OUT_OF_RANGE);
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", kvc_last_error());
        cr_assert_str_eq(msg, which ? "new_positions[3] = -1 outside [0, 50)" : "old_positions[5] = 50 outside [0, 50)");
        int64_t *o_d = dev_copy_of(dev, o, sizeof(oldp)), *n_d = dev_copy_of(dev, bad_new, sizeof(newp));
        kvc_rope_keys_t kd = k;
        kd.data = dev_copy_of(dev, key, nel * 4);
        cr_assert_eq(kvc_rope_k_fused(dev, NULL, &kd, o_d, n_d, &td, NULL), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE);
        cr_assert_str_eq(kvc_last_error(), msg);
        assert_same(dev, kd.data, key, nel * 4, "keys untouched after bad positions");
        cr_assert_eq(kvc_rope_k_delta(dev, NULL, &kd, o_d, n_d, HS, 10000.0, NULL), KVC_OK);
        cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE);
        /* delta's limit is KVC_ROPE_POSITION_LIMIT: only the negative entry is out of range */
        cr_assert_str_eq(kvc_last_error(), "new_positions[3] = -1 outside [0, 2147483648)");
        assert_same(dev, kd.data, key, nel * 4, "keys untouched after bad delta positions");
        kvc_device_free(dev, kd.data);
        kvc_device_free(dev, o_d);
        kvc_device_free(dev, n_d);
    }
    /* one table on each side */
    kvc_rope_keys_t kd = k;
    kd.data = dev_copy_of(dev, key, nel * 4);
    cr_assert_eq(kvc_rope_k_fused(dev, NULL, &kd, oldp_d, newp, &td, NULL), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "both on the device or both on the host"), "%s", kvc_last_error());
    kvc_device_free(dev, kd.data);
    free(tab);
    free(key);
    free(want);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, device_resident_positions) { device_resident_positions(TARGET_GPU); }
Test(emu, device_resident_positions) { device_resident_positions(TARGET_EMU); }

#include <kvcore/memory.h>

Test(gpu, split_and_batched_copies)
{
    kvc_context_t *dev = open_target(TARGET_GPU);
    const size_t n = 1 << 20, off = 3 * 4096 + 100, align = 64 * 1024;
    uint8_t *src = malloc(n), *back = calloc(1, n);
    fill_random(src, n, 42);
    uint8_t *d = dev_alloc(dev, n);
    cr_assert_eq(kvc_memcpy_async(dev, d, src, n, KVC_H2D, off, align, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_memcpy_async(dev, back, d, n, KVC_D2H, off, align, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    cr_assert_arr_eq(back, src, n);
    /* batched device-to-device copies, sizes 0 included, and one entry overlapping itself */
    enum { K = 40 };
    void *dsts[K];
    const void *srcs[K];
    size_t sizes[K];
    uint8_t *d2 = dev_alloc(dev, n);
    uint8_t *expect = calloc(1, n);
    cr_assert_eq(kvc_memcpy(dev, d2, expect, n), KVC_OK);
    uint64_t seed = 9;
    for (int i = 0; i < K; i++) {
        sizes[i] = i % 7 == 0 ? 0 : (size_t)(rng_next(&seed) % 9000);
        srcs[i] = d + (size_t)i * 20000;
        dsts[i] = d2 + (size_t)i * 20000;
        if (sizes[i] && i < K - 1) memcpy(expect + (size_t)i * 20000, src + (size_t)i * 20000, sizes[i]);
    }
    /* entry K-1 moves d2[900000, +5000) to d2[900100, ...): overlapping within the entry */
    sizes[K - 1] = 5000;
    srcs[K - 1] = d2 + 900000;
    dsts[K - 1] = d2 + 900100;
    uint8_t *tmp = malloc(5000);
    memcpy(tmp, expect + 900000, 5000);
    memcpy(expect + 900100, tmp, 5000);
    cr_assert_eq(kvc_batched_memcpy(dev, dsts, srcs, sizes, K, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    assert_same(dev, d2, expect, n, "batched copies");
    free(tmp);
    free(src);
    free(back);
    free(expect);
    kvc_context_destroy(dev);
}

/* ------------------------------------------------------------------ a GPU context and host data
 * (dispatch by residence, docs/ARCHITECTURE.md), on the emulated device: its device memory is a
 * separate arena the host cannot dereference, and its ops refuse pageable host memory like the
 * real module. */

Test(emu, split_and_batched_copies_any_memory)
{
    kvc_context_t *dev = open_target(TARGET_EMU);
    const size_t n = 1 << 16;
    uint8_t *src = malloc(n), *back = calloc(1, n);
    fill_random(src, n, 7);
    uint8_t *d = dev_alloc(dev, n);
    cr_assert_eq(kvc_memcpy_async(dev, d, src, n, KVC_H2D, 100, 4096, NULL), KVC_OK, "%s", kvc_last_error());
    void *dsts[1] = { back };
    const void *srcs[1] = { d };
    size_t sizes[1] = { n };
    cr_assert_eq(kvc_batched_memcpy(dev, dsts, srcs, sizes, 1, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    cr_assert_arr_eq(back, src, n);
    free(src);
    free(back);
    kvc_context_destroy(dev);
}

/* A small token transfer: engine pool ptr (1 layer, 2 blocks of 4) <-> a 2-token chunk. */
static kvc_token_transfer_t small_transfer(void **ptrs, void *chunk, int64_t *slots, int direction)
{
    return (kvc_token_transfer_t){ .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = direction,
                                   .shape = { .kv_size = 2, .element_size = 2, .nl = 1, .nb = 2, .bs = 4, .nh = 2,
                                              .hs = 8 },
                                   .engine_ptrs = ptrs, .num_engine_ptrs = 1, .chunk = chunk, .num_tokens = 2,
                                   .slots = slots, .slot_type = KVC_INDEX_INT64, .num_slots = 2 };
}

/* Pageable host memory next to device memory fails as on the real module (not a fault); registered
 * host memory works through the device path. */
static void pageable_chunk_refused_registered_chunk_works(target_t target)
{
    kvc_context_t *dev = open_target(target);
    const size_t n = 2 * 2 * 2 * 8 * 2, pool = 2 * 2 * 4 * 2 * 8 * 2;
    uint8_t *host_pool = malloc(pool);
    fill_random(host_pool, pool, 3);
    void *eng = dev_copy_of(dev, host_pool, pool), *ptrs[1] = { eng };
    int64_t slots[2] = { 5, 2 };
    uint8_t *chunk = calloc(1, n);
    kvc_token_transfer_t a = small_transfer(ptrs, chunk, slots, KVC_D2H);
    const kvc_status_t st = kvc_transfer_tokens(dev, &a);
    if (!(target == TARGET_GPU && st == KVC_OK)) { /* OK: a GPU reading pageable memory (HMM/ATS) */
        cr_assert_eq(st, KVC_ERR_INVALID_ARG);
        cr_assert(strstr(kvc_last_error(), "chunk = ") &&
                      strstr(kvc_last_error(), "is pageable host memory and engine_ptrs[0] = "),
                  "%s", kvc_last_error());
    }
    /* the same bytes from a registered (pinned) chunk, against the CPU backend on host memory */
    void *pinned = NULL;
    const kvc_mem_params_t mp = { .field_mask = KVC_MEM_PARAM_KIND, .kind = KVC_MEM_PINNED };
    cr_assert_eq(kvc_mem_alloc(dev, n, &mp, &pinned, NULL), KVC_OK, "%s", kvc_last_error());
    a.chunk = pinned;
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error()); /* the copy is asynchronous */
    kvc_context_t *cpu = kvc_test_cpu_context();
    void *hptrs[1] = { host_pool };
    kvc_token_transfer_t c = small_transfer(hptrs, chunk, slots, KVC_D2H);
    cr_assert_eq(kvc_transfer_tokens(cpu, &c), KVC_OK, "%s", kvc_last_error());
    cr_assert_arr_eq(pinned, chunk, n);
    kvc_mem_free(dev, pinned);
    kvc_context_destroy(cpu);
    free(chunk);
    free(host_pool);
    kvc_context_destroy(dev);
}
Test(gpu, pageable_chunk_refused_registered_chunk_works) { pageable_chunk_refused_registered_chunk_works(TARGET_GPU); }

/* A device file mapped pinned (kvc_mem_map_file: a PCIe BAR) is registered with the module as I/O
 * memory and works as a chunk next to device memory; unpinned it is refused like pageable memory. */
static void device_file_chunk_is_registered(target_t target)
{
    kvc_context_t *dev = open_target(target);
    const size_t n = 2 * 2 * 2 * 8 * 2, pool = 2 * 2 * 4 * 2 * 8 * 2, page = (size_t)sysconf(_SC_PAGESIZE);
    char path[] = "/tmp/kvc-gpu-bar.XXXXXX";
    const int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(2 * page)), 0);
    close(fd);
    uint8_t *host_pool = malloc(pool);
    fill_random(host_pool, pool, 4);
    void *eng = dev_copy_of(dev, host_pool, pool), *ptrs[1] = { eng };
    int64_t slots[2] = { 7, 1 };
    void *bar = NULL, *plain = NULL;
    cr_assert_eq(kvc_mem_map_file(dev, path, page, page, 0, &plain, NULL), KVC_OK, "%s", kvc_last_error());
    kvc_token_transfer_t a = small_transfer(ptrs, plain, slots, KVC_D2H);
    const kvc_status_t st = kvc_transfer_tokens(dev, &a);
    if (!(target == TARGET_GPU && st == KVC_OK)) cr_assert_eq(st, KVC_ERR_INVALID_ARG, "an unregistered mapping");
    cr_assert_eq(kvc_mem_map_file(dev, path, page, 0, KVC_MEM_PINNED, &bar, NULL), KVC_OK, "%s", kvc_last_error());
    a.chunk = bar;
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error());
    kvc_context_t *cpu = kvc_test_cpu_context();
    void *hptrs[1] = { host_pool };
    uint8_t *want = calloc(1, n);
    kvc_token_transfer_t c = small_transfer(hptrs, want, slots, KVC_D2H);
    cr_assert_eq(kvc_transfer_tokens(cpu, &c), KVC_OK, "%s", kvc_last_error());
    cr_assert_arr_eq(bar, want, n);
    cr_assert_eq(kvc_mem_free(dev, bar), KVC_OK);
    cr_assert_eq(kvc_mem_free(dev, plain), KVC_OK);
    unlink(path);
    kvc_context_destroy(cpu);
    free(want);
    free(host_pool);
    kvc_context_destroy(dev);
}
Test(gpu, device_file_chunk_is_registered) { device_file_chunk_is_registered(TARGET_GPU); }
Test(emu, device_file_chunk_is_registered) { device_file_chunk_is_registered(TARGET_EMU); }
Test(emu, pageable_chunk_refused_registered_chunk_works) { pageable_chunk_refused_registered_chunk_works(TARGET_EMU); }

/* Every op on host memory runs on the CPU table of a GPU context, byte for byte as a CPU context. */
static void host_data_runs_on_the_cpu_ops(target_t target)
{
    kvc_context_t *dev = open_target(target), *cpu = kvc_test_cpu_context();
    kvc_context_t *both[2] = { cpu, dev };
    /* quantiser, cdf, encoder, decoder on malloc'ed buffers */
    const size_t L = 2, T = 40, C = 24, cap = kvc_cg_encode_bound(T);
    float *x = malloc(L * T * C * 4);
    uint64_t seed = 11;
    for (size_t i = 0; i < L * T * C; i++) x[i] = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 * 8 - 4);
    uint32_t bins[2] = { 32, 16 };
    uint8_t *sym[2], *streams[2], *back[2];
    float *scales[2];
    uint16_t *cdf[2];
    int32_t *len[2];
    for (int i = 0; i < 2; i++) {
        sym[i] = malloc(L * T * C);
        back[i] = malloc(L * T * C);
        scales[i] = malloc(L * T * 4);
        cdf[i] = malloc(L * C * 33 * 2);
        streams[i] = malloc(L * C * cap);
        len[i] = malloc(L * C * 4);
        kvc_quant_params_t q = { .dtype = KVC_DTYPE_F32, .values = x, .symbols = sym[i], .scales = scales[i],
                               .bins = bins, .layers = L, .tokens = T, .channels = C };
        cr_assert_eq(kvc_quantise(both[i], &q), KVC_OK, "quantise on %s: %s", kvc_context_backend_name(both[i]),
                     kvc_last_error());
        kvc_cg_cdf_params_t ca = { .symbols = sym[i], .cdf = cdf[i], .layers = L, .tokens = T, .channels = C,
                              .num_bins = 32 };
        cr_assert_eq(kvc_cg_cdf(both[i], &ca), KVC_OK, "cdf: %s", kvc_last_error());
        kvc_cg_encode_params_t e = { .cdf = cdf[i], .symbols = sym[i], .streams = streams[i], .capacity = cap,
                                .lengths = len[i], .layers = L, .tokens = T, .channels = C, .num_bins = 32 };
        cr_assert_eq(kvc_cg_encode(both[i], &e), KVC_OK, "encode: %s", kvc_last_error());
        kvc_cg_decode_params_t d = { .cdf = cdf[i], .streams = streams[i], .capacity = cap, .lengths = len[i],
                                .symbols = back[i], .layers = L, .tokens = T, .channels = C, .num_bins = 32 };
        cr_assert_eq(kvc_cg_decode(both[i], &d), KVC_OK, "decode: %s", kvc_last_error());
    }
    cr_assert_arr_eq(sym[0], sym[1], L * T * C);
    cr_assert_arr_eq(scales[0], scales[1], L * T * 4);
    cr_assert_arr_eq(cdf[0], cdf[1], L * C * 33 * 2);
    cr_assert_arr_eq(len[0], len[1], L * C * 4);
    cr_assert_arr_eq(back[0], sym[0], L * T * C);
    cr_assert_arr_eq(back[1], sym[1], L * T * C);
    for (int i = 0; i < 2; i++) {
        free(sym[i]);
        free(back[i]);
        free(scales[i]);
        free(cdf[i]);
        free(streams[i]);
        free(len[i]);
    }
    free(x);
    /* RoPE: table build, fused and delta rotation on host keys */
    const size_t N = 9, NH = 2, HS = 16, MAXP = 64;
    float *tab[2], *key[2];
    int64_t oldp[9], newp[9];
    for (size_t i = 0; i < N; i++) {
        oldp[i] = (int64_t)(rng_next(&seed) % MAXP);
        newp[i] = (int64_t)(rng_next(&seed) % MAXP);
    }
    for (int i = 0; i < 2; i++) {
        tab[i] = malloc(MAXP * HS * 4);
        key[i] = malloc(N * NH * HS * 4);
        uint64_t s2 = 99;
        for (size_t j = 0; j < N * NH * HS; j++) key[i][j] = (float)((double)(rng_next(&s2) >> 11) * 0x1p-53 - 0.5);
        kvc_rope_table_t t = { .data = tab[i], .dtype = KVC_DTYPE_F32, .max_position = MAXP, .rot_dim = HS };
        cr_assert_eq(kvc_rope_cache_build(both[i], NULL, &t, 10000.0), KVC_OK, "rope table: %s", kvc_last_error());
        kvc_rope_keys_t k = { .data = key[i], .dtype = KVC_DTYPE_F32, .num_tokens = N, .num_heads = NH,
                              .head_size = HS };
        cr_assert_eq(kvc_rope_k_fused(both[i], NULL, &k, oldp, newp, &t, NULL), KVC_OK, "rope: %s", kvc_last_error());
        cr_assert_eq(kvc_rope_k_delta(both[i], NULL, &k, newp, oldp, HS, 10000.0, NULL), KVC_OK, "rope delta: %s",
                     kvc_last_error());
    }
    cr_assert_arr_eq(tab[0], tab[1], MAXP * HS * 4);
    cr_assert_arr_eq(key[0], key[1], N * NH * HS * 4);
    /* a transfer between host pools and a host chunk */
    const size_t pool = 2 * 2 * 4 * 2 * 8 * 2, n = 2 * 2 * 2 * 8 * 2;
    uint8_t *host_pool = malloc(pool), *chunk[2];
    fill_random(host_pool, pool, 4);
    void *ptrs[1] = { host_pool };
    int64_t slots[2] = { 7, 0 };
    for (int i = 0; i < 2; i++) {
        chunk[i] = calloc(1, n);
        kvc_token_transfer_t a = small_transfer(ptrs, chunk[i], slots, KVC_D2H);
        cr_assert_eq(kvc_transfer_tokens(both[i], &a), KVC_OK, "transfer: %s", kvc_last_error());
    }
    cr_assert_arr_eq(chunk[0], chunk[1], n);
    for (int i = 0; i < 2; i++) {
        free(tab[i]);
        free(key[i]);
        free(chunk[i]);
    }
    free(host_pool);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}
Test(gpu, host_data_runs_on_the_cpu_ops) { host_data_runs_on_the_cpu_ops(TARGET_GPU); }
Test(emu, host_data_runs_on_the_cpu_ops) { host_data_runs_on_the_cpu_ops(TARGET_EMU); }

/* One call, two sides: a clear error naming both pointers, nothing written. */
static void mixed_call_names_both_pointers(target_t target)
{
    kvc_context_t *dev = open_target(target);
    const size_t L = 1, T = 4, C = 8;
    float x[32] = { 0 };
    void *xd = dev_copy_of(dev, x, sizeof(x));
    uint8_t sym[32];
    memset(sym, 0xAB, sizeof(sym));
    float *scales = dev_alloc(dev, T * 4);
    uint32_t bins[1] = { 32 };
    kvc_quant_params_t q = { .dtype = KVC_DTYPE_F32, .values = xd, .symbols = sym, .scales = scales, .bins = bins,
                           .layers = L, .tokens = T, .channels = C };
    const kvc_status_t st = kvc_quantise(dev, &q);
    if (target == TARGET_GPU && st == KVC_OK) { /* a GPU reading pageable memory (HMM/ATS) */
        kvc_context_destroy(dev);
        return;
    }
    cr_assert_eq(st, KVC_ERR_INVALID_ARG);
    char want[64];
    snprintf(want, sizeof(want), "is %s device memory", kvc_context_backend_name(dev));
    cr_assert(strstr(kvc_last_error(), "quantise: symbols = ") &&
                  strstr(kvc_last_error(), "is pageable host memory and values = ") && strstr(kvc_last_error(), want),
              "%s", kvc_last_error());
    for (size_t i = 0; i < sizeof(sym); i++) cr_assert_eq(sym[i], 0xAB, "symbols untouched");
    kvc_context_destroy(dev);
}
Test(gpu, mixed_call_names_both_pointers) { mixed_call_names_both_pointers(TARGET_GPU); }
Test(emu, mixed_call_names_both_pointers) { mixed_call_names_both_pointers(TARGET_EMU); }

/* The codec on a GPU context: host tensors in, the same container bytes and values out as on the
 * CPU backend; a device-resident tensor is refused with the mixed-call message. */
static void codec_round_trip_on_gpu_context(target_t target)
{
    kvc_context_t *dev = open_target(target), *cpu = kvc_test_cpu_context();
    const size_t NL = 3, T = 300, NH = 2, HS = 16, nel = 2 * NL * T * NH * HS;
    float *kv = malloc(nel * 4);
    uint64_t seed = 21;
    for (size_t i = 0; i < nel; i++) kv[i] = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 * 2 - 1);
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F32, .layout = KVC_CODEC_KV_2LTD, .num_layers = NL, .num_tokens = T,
                             .num_heads = NH, .head_size = HS };
    uint8_t *out[2] = { NULL, NULL };
    size_t out_len[2] = { 0, 0 };
    float *dec[2];
    kvc_context_t *both[2] = { cpu, dev };
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(kvc_codec_encode(both[i], &p, kv, &out[i], &out_len[i]), KVC_OK, "encode on %s: %s",
                     kvc_context_backend_name(both[i]), kvc_last_error());
        dec[i] = malloc(nel * 4);
        cr_assert_eq(kvc_codec_decode(both[i], out[i], out_len[i], dec[i], nel * 4, NULL), KVC_OK, "decode on %s: %s",
                     kvc_context_backend_name(both[i]), kvc_last_error());
    }
    cr_assert_eq(out_len[0], out_len[1]);
    cr_assert_arr_eq(out[0], out[1], out_len[0]);
    cr_assert_arr_eq(dec[0], dec[1], nel * 4);
    void *kvd = dev_copy_of(dev, kv, nel * 4);
    uint8_t *none = NULL;
    size_t none_len = 0;
    const kvc_status_t st = kvc_codec_encode(dev, &p, kvd, &none, &none_len);
    if (!(target == TARGET_GPU && st == KVC_OK)) { /* OK: a GPU reading pageable memory (HMM/ATS) */
        cr_assert_eq(st, KVC_ERR_INVALID_ARG);
        cr_assert(strstr(kvc_last_error(), "is pageable host memory and values = "), "%s", kvc_last_error());
        cr_assert_null(none);
    }
    kvc_codec_free(none);
    for (int i = 0; i < 2; i++) {
        kvc_codec_free(out[i]);
        free(dec[i]);
    }
    free(kv);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}
Test(gpu, codec_round_trip_on_gpu_context) { codec_round_trip_on_gpu_context(TARGET_GPU); }
Test(emu, codec_round_trip_on_gpu_context) { codec_round_trip_on_gpu_context(TARGET_EMU); }

/* Slot lists and block ids in device memory (vLLM keeps slot_mapping and block tables on the GPU):
 * the same bytes as the CPU backend with host tables; a bad entry is caught on the device before
 * any write, with the CPU backend's status and message. */
/* The emulation's count of host waits, or the host-built module's (kvc_gpu_host_waits: stream, event
 * and device synchronisations); 0 on a real GPU, where nothing counts them. */
static unsigned long emu_syncs(target_t target)
{
    const char *so = target == TARGET_EMU ? kvc_test_build("tests/modules/.libs/gpu_emu.so") : gpu_module_file();
    if (!so) return 0;
    void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h, "module %s is not loaded: %s", so, dlerror());
    unsigned long (*count)(void) =
        (unsigned long (*)(void))dlsym(h, target == TARGET_EMU ? "kvc_emu_syncs" : "kvc_gpu_host_waits");
    cr_assert_not_null(count, "%s counts no host waits", so);
    const unsigned long n = count();
    dlclose(h);
    return n;
}

static void device_resident_index_tables(target_t target)
{
    kvc_context_t *dev = open_target(target), *cpu = kvc_test_cpu_context();
    const size_t pool = 2 * 2 * 4 * 2 * 8 * 2, n = 2 * 2 * 2 * 8 * 2;
    uint8_t *host_pool = malloc(pool), *want = calloc(1, n), *got = malloc(n);
    fill_random(host_pool, pool, 8);
    void *eng = dev_copy_of(dev, host_pool, pool), *dptrs[1] = { eng }, *hptrs[1] = { host_pool };
    void *chunk = dev_copy_of(dev, want, n);
    int64_t slots[2] = { 6, -1 };
    int64_t *slots_d = dev_copy_of(dev, slots, sizeof(slots));
    kvc_token_transfer_t c = small_transfer(hptrs, want, slots, KVC_D2H);
    cr_assert_eq(kvc_transfer_tokens(cpu, &c), KVC_OK, "%s", kvc_last_error());
    kvc_token_transfer_t a = small_transfer(dptrs, chunk, slots_d, KVC_D2H);
    const unsigned long syncs = emu_syncs(target);
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "device slots: %s", kvc_last_error());
    cr_assert_eq(emu_syncs(target), syncs, "a good device table makes the host wait");
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    assert_same(dev, chunk, want, n, "device-resident slots");
    /* a bad slot: the CPU backend's status and message, nothing written */
    int64_t bad[2] = { 1, 8 };
    int64_t *bad_d = dev_copy_of(dev, bad, sizeof(bad));
    c.slots = bad;
    cr_assert_eq(kvc_transfer_tokens(cpu, &c), KVC_ERR_OUT_OF_RANGE);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", kvc_last_error());
    a.slots = bad_d;
    a.direction = KVC_H2D; /* would write the pool */
    /* deferred (docs/GPU.md): the call is queued, writes nothing, and the stream's next
     * kvc_stream_synchronize reports the CPU backend's status and message, once */
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "%s", kvc_last_error());
    kvc_stream_t other = (kvc_stream_t)(uintptr_t)0x1000; /* never dereferenced by the emulation */
    if (target == TARGET_EMU) cr_assert_eq(kvc_stream_synchronize(dev, other), KVC_OK, "another stream's sync");
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_str_eq(kvc_last_error(), msg);
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "reported once; the context is still usable");
    assert_same(dev, eng, host_pool, pool, "pool untouched after a bad slot");
    /* a good call after a bad one on the same stream still runs; the bad one is reported first */
    a.direction = KVC_D2H;
    a.slots = bad_d;
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK);
    memset(got, 0, n); /* the skipped slot leaves its zeros */
    void *chunk2 = dev_copy_of(dev, got, n);
    kvc_token_transfer_t g = small_transfer(dptrs, chunk2, slots_d, KVC_D2H);
    cr_assert_eq(kvc_transfer_tokens(dev, &g), KVC_OK);
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_str_eq(kvc_last_error(), msg);
    assert_same(dev, chunk2, want, n, "a good call after a bad one");
    /* block ids: 2 blocks of 4 tokens into one 8-token object */
    int64_t ids[2] = { 1, 0 };
    int64_t *ids_d = dev_copy_of(dev, ids, sizeof(ids));
    const size_t obj = 2 * 8 * 2 * 8 * 2;
    uint8_t *want_obj = calloc(1, obj);
    void *obj_d = dev_copy_of(dev, want_obj, obj), *hobj[1] = { want_obj }, *dobj[1] = { obj_d };
    kvc_block_transfer_t bc = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .direction = KVC_D2H,
                                .shape = { .kv_size = 2, .element_size = 2, .nl = 1, .nb = 2, .bs = 4, .nh = 2,
                                           .hs = 8 },
                                .engine_ptrs = hptrs, .num_engine_ptrs = 1, .objects = hobj, .num_objects = 1,
                                .chunk_tokens = 8, .block_ids = ids, .block_id_type = KVC_INDEX_INT64,
                                .num_block_ids = 2 };
    cr_assert_eq(kvc_transfer_blocks(cpu, &bc), KVC_OK, "%s", kvc_last_error());
    kvc_block_transfer_t bd = bc;
    bd.engine_ptrs = dptrs;
    bd.objects = dobj;
    bd.block_ids = ids_d;
    cr_assert_eq(kvc_transfer_blocks(dev, &bd), KVC_OK, "device block ids: %s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    assert_same(dev, obj_d, want_obj, obj, "device-resident block ids");
    int64_t bad_ids[2] = { 0, -3 };
    int64_t *bad_ids_d = dev_copy_of(dev, bad_ids, sizeof(bad_ids));
    bc.block_ids = bad_ids;
    cr_assert_eq(kvc_transfer_blocks(cpu, &bc), KVC_ERR_OUT_OF_RANGE);
    snprintf(msg, sizeof(msg), "%s", kvc_last_error());
    bd.block_ids = bad_ids_d;
    bd.direction = KVC_H2D; /* would write the pool */
    cr_assert_eq(kvc_transfer_blocks(dev, &bd), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE);
    cr_assert_str_eq(kvc_last_error(), msg);
    assert_same(dev, eng, host_pool, pool, "pool untouched after a bad block id");
    free(host_pool);
    free(want);
    free(got);
    free(want_obj);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

/* Deferred errors are kept per failed call, 64 at most (docs/GPU.md): a call finding 64 unreported
 * failures fails with the oldest one's message and queues nothing; syncs report the rest in order. */
static void deferred_errors_are_bounded(target_t target)
{
    kvc_context_t *dev = open_target(target);
    const size_t pool = 2 * 2 * 4 * 2 * 8 * 2, n = 2 * 2 * 2 * 8 * 2;
    uint8_t *zeros = calloc(1, pool);
    void *eng = dev_copy_of(dev, zeros, pool), *dptrs[1] = { eng }, *chunk = dev_copy_of(dev, zeros, n);
    int64_t slots[2] = { 0, 8 };
    int64_t *slots_d = dev_copy_of(dev, slots, sizeof(slots));
    kvc_token_transfer_t a = small_transfer(dptrs, chunk, slots_d, KVC_D2H);
    const unsigned long syncs = emu_syncs(target);
    for (int64_t i = 0; i < 64; i++) {
        const int64_t v = 8 + i; /* the memcpy is ordered with the NULL stream's transfers */
        cr_assert_eq(kvc_memcpy(dev, slots_d + 1, &v, sizeof(v)), KVC_OK);
        cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "call %lld: %s", (long long)i, kvc_last_error());
    }
    cr_assert_eq(emu_syncs(target), syncs, "64 queued checks need no wait");
    const int64_t v = 100;
    cr_assert_eq(kvc_memcpy(dev, slots_d + 1, &v, sizeof(v)), KVC_OK);
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_ERR_OUT_OF_RANGE, "the 65th unreported failure");
    cr_assert_str_eq(kvc_last_error(), "slots[1] = 8 outside [0, 8) (nb*bs slots)");
    if (target == TARGET_EMU) cr_assert_eq(emu_syncs(target), syncs + 1, "that call waited");
    char want[128];
    for (int i = 1; i < 64; i++) {
        cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_ERR_OUT_OF_RANGE, "sync %d", i);
        snprintf(want, sizeof(want), "slots[1] = %d outside [0, 8) (nb*bs slots)", 8 + i);
        cr_assert_str_eq(kvc_last_error(), want);
    }
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "all reported; the failed 65th call queued nothing");
    assert_same(dev, chunk, zeros, n, "no failed call wrote the chunk");
    free(zeros);
    kvc_context_destroy(dev);
}

Test(gpu, deferred_errors_are_bounded) { deferred_errors_are_bounded(TARGET_GPU); }
Test(emu, deferred_errors_are_bounded) { deferred_errors_are_bounded(TARGET_EMU); }

Test(gpu, device_resident_index_tables) { device_resident_index_tables(TARGET_GPU); }

/* Formats 14 and 17 move each row as several parts, one launch each: a device-resident index table
 * would be checked, and a bad entry reported, once per part, so it is refused up front. */
static void device_tables_with_multi_part_rows_refused(target_t target)
{
    kvc_context_t *dev = open_target(target);
    const kvc_page_shape_t s14 = { .kv_size = 1, .element_size = 1, .nl = 1, .nb = 2, .bs = 4, .nh = 1, .hs = 132 };
    const size_t pool = 2 * 4 * 132, n = 2 * 132;
    uint8_t *zero = calloc(1, pool);
    void *eng = dev_copy_of(dev, zero, pool), *chunk = dev_copy_of(dev, zero, n), *ptrs[1] = { eng };
    void *objs[1] = { dev_copy_of(dev, zero, 4 * 132) };
    int64_t idx[2] = { 1, 5 };
    int64_t *idx_d = dev_copy_of(dev, idx, sizeof(idx));
    kvc_token_transfer_t a = { .format = KVC_FMT_NL_X_NB_BSV_BSS, .direction = KVC_H2D, .shape = s14,
                               .engine_ptrs = ptrs, .num_engine_ptrs = 1, .chunk = chunk, .num_tokens = 2,
                               .slots = idx_d, .slot_type = KVC_INDEX_INT64, .num_slots = 2 };
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_ERR_UNSUPPORTED, "%s", kvc_last_error());
    cr_assert(strstr(kvc_last_error(), "slots in device memory with format NL_X_NB_BSV_BSS"), "%s", kvc_last_error());
    kvc_block_transfer_t b = { .format = KVC_FMT_NL_X_NB_BSV_BSS, .direction = KVC_H2D, .shape = s14,
                               .engine_ptrs = ptrs, .num_engine_ptrs = 1, .objects = objs, .num_objects = 1,
                               .chunk_tokens = 4, .block_ids = idx_d, .block_id_type = KVC_INDEX_INT64,
                               .num_block_ids = 1 };
    cr_assert_eq(kvc_transfer_blocks(dev, &b), KVC_ERR_UNSUPPORTED, "%s", kvc_last_error());
    assert_same(dev, eng, zero, pool, "engine untouched by refused calls");
    a.slots = idx; /* host slots: the same call runs */
    cr_assert_eq(kvc_transfer_tokens(dev, &a), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK);
    free(zero);
    cr_assert_eq(kvc_device_free(dev, idx_d), KVC_OK);
    cr_assert_eq(kvc_device_free(dev, objs[0]), KVC_OK);
    cr_assert_eq(kvc_device_free(dev, chunk), KVC_OK);
    cr_assert_eq(kvc_device_free(dev, eng), KVC_OK);
    kvc_context_destroy(dev);
}

Test(gpu, device_tables_with_multi_part_rows_refused) { device_tables_with_multi_part_rows_refused(TARGET_GPU); }
Test(emu, device_tables_with_multi_part_rows_refused) { device_tables_with_multi_part_rows_refused(TARGET_EMU); }
Test(emu, device_resident_index_tables) { device_resident_index_tables(TARGET_EMU); }

/* ------------------------------------------------------------------ plans (plan.h) */

/* Plans the emulation's run_plan slot ran (0 on a real GPU, where nothing counts them). */
static unsigned long emu_plans(target_t target)
{
    if (target != TARGET_EMU) return 0;
    void *h = dlopen(kvc_test_build("tests/modules/.libs/gpu_emu.so"), RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h, "the emulation module is not loaded: %s", dlerror());
    unsigned long (*count)(void) = (unsigned long (*)(void))dlsym(h, "kvc_emu_plans");
    cr_assert_not_null(count);
    const unsigned long n = count();
    dlclose(h);
    return n;
}

/* An object-group plan and a CacheBlend plan on device buffers (block ids, slot mapping and table
 * in device memory too) give the CPU backend's bytes (RoPE: within rope_close), through the
 * module's run_plan slot; the same plan on host buffers runs on the CPU ops. Two steps reuse one
 * staging buffer, so the order is visible. */
static void plans_on_device(target_t target)
{
    kvc_context_t *dev = open_target(target), *cpu = kvc_test_cpu_context();
    const kvc_page_shape_t s = { .kv_size = 2, .element_size = 2, .nl = 1, .nb = 4, .bs = 4, .nh = 2, .hs = 8 };
    const size_t pool = 2 * 4 * 4 * 2 * 8 * 2, obj = 2 * 8 * 16 * 2;
    uint8_t *host_pool = malloc(pool), *chunks = malloc(3 * obj), *hobj0 = calloc(1, obj), *hobj1 = calloc(1, obj);
    fill_random(host_pool, pool, 21);
    fill_random(chunks, 3 * obj, 22);
    void *eng = dev_copy_of(dev, host_pool, pool), *dptrs[1] = { eng }, *hptrs[1] = { host_pool };
    void *dobj[2] = { dev_copy_of(dev, hobj0, obj), dev_copy_of(dev, hobj1, obj) }, *hobj[2] = { hobj0, hobj1 };
    int64_t ids[4] = { 2, 0, 3, 1 };
    int64_t *ids_d = dev_copy_of(dev, ids, sizeof(ids));
    for (int dir = 0; dir < 2; dir++) {
        uint8_t *hchunks = malloc(3 * obj), *dchunks = malloc(3 * obj);
        memcpy(hchunks, chunks, 3 * obj);
        memcpy(dchunks, chunks, 3 * obj);
        for (int side = 0; side < 2; side++) {
            void **objs = side ? dobj : hobj;
            uint8_t *c = side ? dchunks : hchunks;
            kvc_staging_copy_t cp[3];
            for (int k = 0; k < 3; k++) {
                void *o = objs[k == 1];
                cp[k] = dir == KVC_H2D ? (kvc_staging_copy_t){ o, c + k * obj, obj, 16 * (size_t)k }
                                       : (kvc_staging_copy_t){ c + k * obj, o, obj, 16 * (size_t)k };
            }
            const kvc_kernel_group_t g = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .shape = s,
                                           .engine_ptrs = side ? dptrs : hptrs, .num_engine_ptrs = 1,
                                           .objects = objs, .num_objects = 2, .chunk_tokens = 8,
                                           .block_ids = side ? ids_d : ids, .block_ids_capacity = 4 };
            const kvc_launch_var_t lv[2] = { { 0, 0, 4, 2, 0 }, { 0, 2, 2, 1, 0 } };
            const kvc_batch_step_t st[2] = { { cp, 2, &lv[0], 1 }, { cp + 2, 1, &lv[1], 1 } };
            const kvc_object_plan_t p = { .direction = dir, .host_buffer_alignment = 64, .groups = &g,
                                          .num_groups = 1, .steps = st, .num_steps = 2 };
            const unsigned long before = emu_plans(target);
            cr_assert_eq(kvc_execute_object_plan(side ? dev : cpu, &p), KVC_OK, "%s", kvc_last_error());
            if (side) {
                cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error());
                if (target == TARGET_EMU) cr_assert_eq(emu_plans(target), before + 1, "not run by run_plan");
            }
        }
        assert_same(dev, eng, host_pool, pool, dir ? "object plan D2H: engine" : "object plan H2D: engine");
        cr_assert(!memcmp(dchunks, hchunks, 3 * obj), "object plan %s: host chunks differ", dir ? "D2H" : "H2D");
        free(hchunks);
        free(dchunks);
    }
    /* The same plan on host buffers of the GPU context: the CPU ops run it, not run_plan. */
    {
        kvc_staging_copy_t cp = { hobj0, chunks, obj, 0 };
        const kvc_kernel_group_t g = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .shape = s, .engine_ptrs = hptrs,
                                       .num_engine_ptrs = 1, .objects = hobj, .num_objects = 2, .chunk_tokens = 8,
                                       .block_ids = ids, .block_ids_capacity = 4 };
        const kvc_launch_var_t lv = { 0, 0, 2, 1, 0 };
        const kvc_batch_step_t st = { &cp, 1, &lv, 1 };
        const kvc_object_plan_t p = { .direction = KVC_H2D, .host_buffer_alignment = 64, .groups = &g,
                                      .num_groups = 1, .steps = &st, .num_steps = 1 };
        const unsigned long before = emu_plans(target);
        cr_assert_eq(kvc_execute_object_plan(dev, &p), KVC_OK, "%s", kvc_last_error());
        cr_assert_eq(emu_plans(target), before, "host data went to the module");
        /* pageable engine with a device object: refused, naming both */
        void *mixed[2] = { dobj[0], dobj[1] };
        kvc_kernel_group_t g2 = g;
        g2.objects = mixed;
        kvc_object_plan_t p2 = p;
        p2.groups = &g2;
        cp.dest = dobj[0];
        cr_assert_eq(kvc_execute_object_plan(dev, &p2), KVC_ERR_INVALID_ARG);
        cr_assert(strstr(kvc_last_error(), "pageable"), "%s", kvc_last_error());
    }
    /* CacheBlend: slot of 4 tokens [2, 1, 4, 16] f16, rotated then scattered, twice. */
    const size_t ST = 4, slot_bytes = 2 * ST * 16 * 2, MAXP = 32, ROT = 8;
    uint16_t *tab = malloc(MAXP * ROT * 2);
    kvc_rope_table_t table = { .data = tab, .dtype = KVC_DTYPE_F16, .max_position = MAXP, .rot_dim = ROT };
    cr_assert_eq(kvc_rope_cache_build(cpu, NULL, &table, 10000.0), KVC_OK, "%s", kvc_last_error());
    void *tab_d = dev_copy_of(dev, tab, MAXP * ROT * 2);
    uint8_t *hslot = calloc(1, slot_bytes), *src = malloc(2 * slot_bytes);
    for (size_t i = 0; i < slot_bytes; i++) { /* finite f16 keys in [-2, 2) */
        const uint16_t b = f32_to_bits16((float)((int)(i * 37 % 400) - 200) / 100.0f, KVC_DTYPE_F16);
        memcpy(src + 2 * (i % (slot_bytes / 2)) + (i >= slot_bytes / 2 ? slot_bytes : 0), &b, 2);
    }
    void *dslot = dev_copy_of(dev, hslot, slot_bytes), *dslots[1] = { dslot }, *hslots[1] = { hslot };
    int64_t map[8] = { 5, -1, 9, 0, 14, 3, 7, 12 };
    int64_t *map_d = dev_copy_of(dev, map, sizeof(map));
    for (size_t i = 0; i < pool / 2; i++) { /* finite f16 engine values (rope_close compares values) */
        const uint16_t b = f32_to_bits16((float)((int)(i * 53 % 300) - 150) / 50.0f, KVC_DTYPE_F16);
        memcpy(host_pool + 2 * i, &b, 2);
    }
    cr_assert_eq(kvc_memcpy(dev, eng, host_pool, pool), KVC_OK, "%s", kvc_last_error());
    uint8_t *eng_before = malloc(pool);
    memcpy(eng_before, host_pool, pool);
    for (int side = 0; side < 2; side++) {
        const kvc_cb_group_t g = { .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS, .shape = s,
                                   .engine_ptrs = side ? dptrs : hptrs, .num_engine_ptrs = 1,
                                   .temp_slots = side ? dslots : hslots, .num_temp_slots = 1, .slot_tokens = ST,
                                   .slot_mapping = side ? map_d : map, .slot_mapping_capacity = 8,
                                   .table = { side ? tab_d : tab, KVC_DTYPE_F16, MAXP, ROT },
                                   .key_dtype = KVC_DTYPE_F16, .rope_num_heads = 2, .rope_head_stride = 8 };
        void *slot = side ? dslot : hslot;
        const int64_t staging[2][4] = { { (int64_t)(uintptr_t)slot, (int64_t)(uintptr_t)src, (int64_t)slot_bytes, 0 },
                                        { (int64_t)(uintptr_t)slot, (int64_t)(uintptr_t)(src + slot_bytes),
                                          (int64_t)slot_bytes, 8 } };
        const int64_t ropes[2][4] = { { 0, 0, 2, 9 }, { 0, 0, 11, 1 } };
        const int64_t scatters[2][4] = { { 0, 0, 0, 4 }, { 0, 0, 4, 3 } };
        const int64_t offsets[2][3] = { { 1, 1, 1 }, { 2, 2, 2 } };
        const kvc_cb_plan_t p = { .host_buffer_alignment = 32, .groups = &g, .num_groups = 1,
                                  .staging = &staging[0][0], .num_staging = 2, .ropes = &ropes[0][0], .num_ropes = 2,
                                  .scatters = &scatters[0][0], .num_scatters = 2, .step_offsets = &offsets[0][0],
                                  .num_steps = 2 };
        const unsigned long before = emu_plans(target);
        cr_assert_eq(kvc_execute_cb_plan(side ? dev : cpu, &p), KVC_OK, "%s", kvc_last_error());
        if (side) {
            cr_assert_eq(kvc_stream_synchronize(dev, NULL), KVC_OK, "%s", kvc_last_error());
            if (target == TARGET_EMU) cr_assert_eq(emu_plans(target), before + 1, "not run by run_plan");
        }
    }
    cr_assert(memcmp(eng_before, host_pool, pool), "the CacheBlend plan wrote nothing");
    rope_close(dev, eng, host_pool, KVC_DTYPE_F16, pool / 2, "CacheBlend plan: engine");
    rope_close(dev, dslot, hslot, KVC_DTYPE_F16, slot_bytes / 2, "CacheBlend plan: temp slot");
    kvc_device_free(dev, tab_d);
    kvc_device_free(dev, dslot);
    kvc_device_free(dev, map_d);
    kvc_device_free(dev, eng);
    kvc_device_free(dev, ids_d);
    kvc_device_free(dev, dobj[0]);
    kvc_device_free(dev, dobj[1]);
    free(tab);
    free(hslot);
    free(src);
    free(eng_before);
    free(host_pool);
    free(chunks);
    free(hobj0);
    free(hobj1);
    kvc_context_destroy(cpu);
    kvc_context_destroy(dev);
}

Test(gpu, plans_on_device) { plans_on_device(TARGET_GPU); }
Test(emu, plans_on_device) { plans_on_device(TARGET_EMU); }
