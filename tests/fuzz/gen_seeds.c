/* SPDX-License-Identifier: BSD-3-Clause */
/* Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/seed-*) from the test
 * data, through the public API: small valid inputs of every kind each target understands. The
 * committed corpus was made with it; crash inputs found by fuzzing are added next to the seeds.
 *   make tests/fuzz/gen_seeds && tests/fuzz/gen_seeds SRCDIR   (writes SRCDIR/tests/fuzz/corpus) */
#include <errno.h>
#include <sys/stat.h>
#include <zlib.h>

#include "fuzz.h"

static const char *srcdir;
static kvc_context_t *ctx;

static void die(const char *what, kvc_status_t st)
{
    fprintf(stderr, "gen_seeds: %s: %s (%s)\n", what, kvc_status_name(st), kvc_last_error());
    exit(1);
}

static void put(const char *target, const char *name, const void *a, size_t na, const void *b, size_t nb)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/%s", srcdir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/%s/seed-%s", srcdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static kvc_tensor_t load_npy(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/data/%s", srcdir, rel);
    kvc_tensor_t t;
    const kvc_status_t st = kvc_npy_read(path, &t);
    if (st != KVC_OK) die(path, st);
    return t;
}

/* ------------------------------------------------------------------ real KV: a small chunk */

/* [2, NL, T, NH*HS] f32 from the first layers and tokens of the story prompt (f16 [5, 512, 4, 8]). */
static float *kv_chunk(size_t nl, size_t t, size_t d)
{
    kvc_tensor_t k = load_npy("kvdata/story_prompt_K.npy"), v = load_npy("kvdata/story_prompt_V.npy");
    float *out = malloc(2 * nl * t * d * sizeof(float));
    const kvc_tensor_t *src[2] = { &k, &v };
    for (size_t p = 0; p < 2; p++)
        for (size_t l = 0; l < nl; l++)
            for (size_t i = 0; i < t; i++)
                for (size_t c = 0; c < d; c++) {
                    uint16_t h;
                    memcpy(&h, (const uint8_t *)src[p]->data + 2 * ((l * 512 + i) * 32 + c), 2);
                    /* binary16 -> float (normal numbers and zero, which is all this data holds) */
                    const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
                    const uint32_t bits = e ? sign | (e + 112) << 23 | m << 13 : sign;
                    memcpy(&out[((p * nl + l) * t + i) * d + c], &bits, 4);
                }
    kvc_tensor_free(&k);
    kvc_tensor_free(&v);
    return out;
}

static void convert(const float *in, size_t n, kvc_dtype_t dt, void *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &in[i], 4);
        if (dt == KVC_DTYPE_F32) memcpy((uint8_t *)out + 4 * i, &b, 4);
        else if (dt == KVC_DTYPE_BF16) {
            const uint16_t h = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
            memcpy((uint8_t *)out + 2 * i, &h, 2);
        } else { /* f16, truncating: seeds need plausible values, not exact ones */
            const uint32_t sign = (b >> 16) & 0x8000;
            const int e = (int)((b >> 23) & 255) - 112;
            const uint16_t h = (uint16_t)(e <= 0 ? sign : e >= 31 ? sign | 0x7bff : sign | (uint32_t)e << 10 | ((b >> 13) & 1023));
            memcpy((uint8_t *)out + 2 * i, &h, 2);
        }
    }
}

/* ------------------------------------------------------------------ container */

static uint32_t crc(const uint8_t *p, size_t n) { return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n); }

static void container_seed(const char *name, kvc_dtype_t dt, kvc_codec_layout_t layout, size_t nl, size_t t,
                           size_t nh, size_t hs, uint32_t window, const float *chunk, kvc_codec_coder_t coder)
{
    const size_t n = (layout == KVC_CODEC_MLA ? 1 : 2) * nl * t * nh * hs;
    uint8_t *kv = malloc(n * 4);
    convert(chunk, n, dt, kv);
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW | KVC_CODEC_PARAM_CODER, .dtype = dt, .layout = layout,
                             .num_layers = nl, .num_tokens = t, .num_heads = nh, .head_size = hs, .window_tokens = window,
                             .coder = coder };
    uint8_t *buf;
    size_t len;
    const kvc_status_t st = kvc_codec_encode(ctx, &p, kv, &buf, &len);
    if (st != KVC_OK) die("kvc_codec_encode", st);
    char full[64];
    for (uint8_t mode = 0; mode < 4; mode += 3) { /* as is; repaired + short-buffer decode */
        snprintf(full, sizeof(full), "%s-mode%u", name, mode);
        put("container", full, &mode, 1, buf, len);
    }
    kvc_codec_free(buf);
    free(kv);
}

/* An LMCache import: raw uint16 CDF table (flag bit 0), built by hand as docs/FORMAT.md describes:
 * KV_2LTD f16, NL = 1, T = 8, NH = 1, HS = 2, one window, 4 bins, every symbol 1 (CDF 0, 1, 65534
 * ... strictly increasing), streams of 1 byte each. */
static void raw_cdf_seed(const char *name, const uint8_t *lengths, size_t nlengths, kvc_status_t want)
{
    uint8_t b[512] = { 0 };
    size_t pos = 48;
    memcpy(b, "\x89KVC\r\n\x1a\n", 8);
    b[8] = 1;  /* major */
    b[12] = 1; /* flags: raw CDF */
    b[16] = 48;
    b[20] = 5;
    const unsigned streams = 2 * 1 * 2, bins = 4, T = 8;
    uint8_t meta[34] = { 1, 0, 2, (uint8_t)bins, 1, 0, 0, 0, (uint8_t)T, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,
                         (uint8_t)T, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 4 };
    uint8_t scales[2 * 1 * 8 * 2];
    for (size_t i = 0; i < sizeof(scales); i += 2) { scales[i] = 0x00; scales[i + 1] = 0x3c; } /* 1.0 */
    uint8_t cdf[4 * 5 * 2];
    const uint16_t row[5] = { 0, 1, 65533, 65534, 65535 };
    for (unsigned s = 0; s < streams; s++)
        for (unsigned i = 0; i <= bins; i++) { cdf[(s * 5 + i) * 2] = (uint8_t)row[i]; cdf[(s * 5 + i) * 2 + 1] = (uint8_t)(row[i] >> 8); }
    const uint8_t data[4] = { 0x40, 0x41, 0x42, 0x43 };
    const struct { const uint8_t *p; size_t n; } sec[5] = {
        { meta, sizeof(meta) }, { scales, sizeof(scales) }, { cdf, sizeof(cdf) }, { lengths, nlengths }, { data, 4 }
    };
    for (uint32_t s = 0; s < 5; s++) {
        b[pos] = (uint8_t)(s + 1);
        const uint32_t c = crc(sec[s].p, sec[s].n);
        for (int i = 0; i < 4; i++) b[pos + 4 + i] = (uint8_t)(c >> (8 * i));
        b[pos + 8] = (uint8_t)sec[s].n;
        memcpy(b + pos + 16, sec[s].p, sec[s].n);
        pos += 16 + sec[s].n;
    }
    b[24] = (uint8_t)pos;
    b[25] = (uint8_t)(pos >> 8);
    const uint32_t h = crc(b, 44);
    for (int i = 0; i < 4; i++) b[44 + i] = (uint8_t)(h >> (8 * i));
    kvc_codec_info_t info;
    const kvc_status_t st = kvc_codec_inspect(b, pos, &info);
    if (st != want || (st == KVC_OK && !info.raw_cdf)) die(name, st);
    const uint8_t mode = 0;
    put("container", name, &mode, 1, b, pos);
}

/* ------------------------------------------------------------------ decode (golden streams) */

/* Streams (layer 0, channels [c0, c0+C)) of a golden case, in the layout fuzz_decode.c reads. */
static void decode_seeds(const char *gcase, unsigned bins, size_t c0, size_t C, size_t T)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/%s_cdf.npy", gcase);
    kvc_tensor_t cdf = load_npy(rel); /* int16 [2, 64, bins+1] */
    snprintf(rel, sizeof(rel), "golden/%s_output_buffer.npy", gcase);
    kvc_tensor_t buf = load_npy(rel); /* uint8 [2, 64, 256] */
    snprintf(rel, sizeof(rel), "golden/%s_output_lengths.npy", gcase);
    kvc_tensor_t lens = load_npy(rel); /* int32 [2, 64] */
    const size_t cap = buf.shape[2];
    uint8_t in[65536];
    size_t n = 0;
    for (int packed = 0; packed < 2; packed++) {
        n = 0;
        in[n++] = (uint8_t)packed; /* raw CDF, raw lengths / prefix sums */
        in[n++] = 0;               /* 1 layer */
        in[n++] = (uint8_t)(C - 1);
        in[n++] = (uint8_t)T;
        in[n++] = (uint8_t)(T >> 8);
        in[n++] = (uint8_t)bins;
        memcpy(in + n, (const uint16_t *)cdf.data + c0 * (bins + 1), C * (bins + 1) * 2);
        n += C * (bins + 1) * 2;
        const int32_t *L = (const int32_t *)lens.data + c0;
        if (packed) {
            int64_t sum = 0;
            for (size_t c = 0; c < C; c++) {
                sum += L[c];
                memcpy(in + n, &sum, 8);
                n += 8;
            }
            for (size_t c = 0; c < C; c++) {
                memcpy(in + n, (const uint8_t *)buf.data + (c0 + c) * cap, (size_t)L[c]);
                n += (size_t)L[c];
            }
        } else {
            const uint16_t capacity = (uint16_t)cap;
            memcpy(in + n, &capacity, 2);
            n += 2;
            memcpy(in + n, L, C * 4);
            n += C * 4;
            memcpy(in + n, (const uint8_t *)buf.data + c0 * cap, C * cap);
            n += C * cap;
        }
        char name[64];
        snprintf(name, sizeof(name), "%s-c%zu-%s", gcase, c0, packed ? "packed" : "streams");
        put("decode", name, in, n, NULL, 0);
    }
    kvc_tensor_free(&cdf);
    kvc_tensor_free(&buf);
    kvc_tensor_free(&lens);
}

/* Round trip (flag 2) and counts-CDF (flags 4 | 8) inputs: header then bytes. */
static void decode_synthetic(void)
{
    uint8_t in[600];
    for (size_t i = 0; i < sizeof(in); i++) in[i] = (uint8_t)(i * 7 + (i >> 3));
    const uint8_t heads[][6] = { { 2, 1, 5, 40, 0, 16 }, { 2, 0, 66, 3, 1, 64 }, { 2, 3, 0, 0, 0, 1 },
                                 { 12, 0, 3, 20, 0, 8 }, { 13, 1, 2, 9, 0, 33 } };
    for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
        memcpy(in, heads[h], 6);
        char name[32];
        snprintf(name, sizeof(name), "synthetic-%zu", h);
        put("decode", name, in, sizeof(in), NULL, 0);
    }
}

/* ------------------------------------------------------------------ npy, safetensors */

static void npy_seed(const char *name, const kvc_tensor_t *t)
{
    uint8_t buf[8192];
    size_t len;
    const kvc_status_t st = kvc_npy_write_mem(t, buf, sizeof(buf), &len);
    if (st != KVC_OK) die("kvc_npy_write_mem", st);
    put("npy", name, buf, len, NULL, 0);
}

static void st_seed(const char *name, const kvc_named_tensor_t *t, size_t n, const kvc_metadata_entry_t *m, size_t nm)
{
    uint8_t buf[16384];
    size_t len;
    const kvc_status_t st = kvc_safetensors_write_mem(t, n, m, nm, buf, sizeof(buf), &len);
    if (st != KVC_OK) die("kvc_safetensors_write_mem", st);
    put("safetensors", name, buf, len, NULL, 0);
}

static void io_seeds(const float *chunk)
{
    uint8_t data[2 * 1 * 4 * 8 * 4];
    convert(chunk, 64, KVC_DTYPE_F16, data);
    const size_t s4[4] = { 2, 1, 4, 8 }, s5[5] = { 2, 1, 4, 2, 4 }, sk[4] = { 1, 4, 2, 4 }, s0[1] = { 0 };
    kvc_tensor_t fused, fused5, k, v, empty, scalar, bf;
    kvc_tensor_wrap(&fused, KVC_DTYPE_F16, 4, s4, data);
    kvc_tensor_wrap(&fused5, KVC_DTYPE_F16, 5, s5, data);
    kvc_tensor_wrap(&k, KVC_DTYPE_F16, 4, sk, data);
    kvc_tensor_wrap(&v, KVC_DTYPE_F16, 4, sk, data + 64);
    kvc_tensor_wrap(&empty, KVC_DTYPE_F32, 1, s0, NULL);
    kvc_tensor_wrap(&scalar, KVC_DTYPE_U8, 0, NULL, data);
    kvc_tensor_wrap(&bf, KVC_DTYPE_BF16, 4, s4, data);
    npy_seed("fused-f16", &fused);
    npy_seed("fused5-f16", &fused5);
    npy_seed("k-f16", &k);
    npy_seed("empty-f32", &empty);
    npy_seed("scalar-u8", &scalar);
    npy_seed("fused-bf16", &bf);
    /* Version 2.0: the same dict after a 4-byte header length. */
    uint8_t v1[512], v2[520];
    size_t len;
    kvc_npy_write_mem(&k, v1, sizeof(v1), &len);
    const size_t hlen = (size_t)v1[8] | (size_t)v1[9] << 8;
    memcpy(v2, v1, 8);
    v2[6] = 2;
    v2[8] = (uint8_t)hlen;
    v2[9] = (uint8_t)(hlen >> 8);
    v2[10] = v2[11] = 0;
    memcpy(v2 + 12, v1 + 10, len - 10);
    put("npy", "k-f16-v2", v2, len + 2, NULL, 0);

    const kvc_named_tensor_t one[1] = { { "kv", &fused } }, split[2] = { { "k", &k }, { "v", &v } },
                             kv_names[2] = { { "key", &k }, { "value", &v } }, other[1] = { { "cache", &fused5 } },
                             mixed[3] = { { "a", &empty }, { "b", &scalar }, { "c", &bf } };
    const kvc_metadata_entry_t meta[2] = { { "kvcore.num_heads", "2" }, { "kvcore.head_size", "4" } },
                               note[1] = { { "format", "pt" } };
    st_seed("kv-meta", one, 1, meta, 2);
    st_seed("kv", one, 1, NULL, 0);
    st_seed("k-v", split, 2, NULL, 0);
    st_seed("key-value", kv_names, 2, note, 1);
    st_seed("single-5d", other, 1, NULL, 0);
    st_seed("mixed", mixed, 3, note, 1);
}

/* ------------------------------------------------------------------ transfer, env */

/* Valid calls in fuzz_transfer.c's layout: op, format, direction, kv_size, element size index (1: 2
 * bytes), nl, nb, bs, nh, hs, stride, chunk layout, T, mistakes (2 bytes), chunk_tokens, num_ids,
 * then indices and the skip byte. */
static void transfer_seeds(void)
{
    static const uint8_t formats[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
    for (unsigned op = 0; op < 5; op++)
        for (size_t i = 0; i < sizeof(formats); i++) {
            const uint8_t f = formats[i];
            if ((op == 2 && (f == 0 || f == 8)) || (op >= 3 && f != 9)) continue;
            const int single = f == 3 || f == 5 || f >= 10;
            const uint8_t nl = op == 2 || op >= 3 ? 1 : 2, nh = (f == 3 || f == 5) ? 1 : 2;
            uint8_t in[64] = { (uint8_t)op, f, (uint8_t)(i % 2), single ? 1 : 2, 1, nl, 3, 2, nh, 4,
                               f == 12 ? 130 : 0, f == 11 ? 1 : 0, 4, 0, 0, 4, 3 };
            size_t n = 17;
            /* slots -1, 4, 1, 2 (of nb*bs = 6); skip 0; block ids 0, 1, 2 */
            uint8_t tail[] = { 0, 5, 2, 3, 1, 1, 2, 3, 0 };
            if (op >= 3) tail[5] = 0; /* the flash ops read layer_idx right after skip */
            memcpy(in + n, tail, sizeof(tail));
            n += sizeof(tail);
            char name[32];
            snprintf(name, sizeof(name), "op%u-fmt%u", op, f);
            put("transfer", name, in, n, NULL, 0);
        }
}

static void env_seeds(void)
{
    static const struct { const char *name; uint8_t control; const char *text; } s[] = {
        { "defaults", 0, "" },
        { "cpu-scalar", 0x1f, "cpu\nscalar\noff\n2\n0\n/nonexistent" },
        { "auto-best", 0x3b, "auto\nbest\nwarn\n1\n0\n." },
        { "cuda-forced", 0x21, "cuda\n\n\n\n\n/tmp" },
        { "hip-params", 0xc0, "hip\navx2\n\n3\n1\n/tmp:/nonexistent" },
        { "bad-values", 0x3f, "gpu\nsse9\nloud\n-4\nx\n" },
        { "numbers", 0x1c, "\n\n3\n4096\n4097\n" },
    };
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) put("env", s[i].name, &s[i].control, 1, s[i].text, strlen(s[i].text));
}

/* ------------------------------------------------------------------ LMCache interchange */

/* A real chunk (KV_2LTD f16, 2 layers, 40 tokens, 12 channels, windows of 20) exported to LMCache's
 * arrays and laid out as fuzz_lmcache.c reads them: as is (mode 0) and repaired (mode 1). */
/* fuzz_rans: shape bytes, value bytes, damage (see the target's header). */
static void rans_seeds(void)
{
    uint8_t v[256];
    for (size_t i = 0; i < sizeof(v); i++) v[i] = (uint8_t)((i * 37u + (i >> 3) * 11u) % 256u); /* spread over the range */
    /* f16 KV, 2 layers, 40 tokens, 12 channels, window 16, 32 bins: undamaged, then damaged. */
    const uint8_t kv_shape[] = { 0x00, 1, 39, 11, 15, 14, 0, 1 }; /* count 256 (u16 LE) */
    put("rans", "f16-2ltd", kv_shape, sizeof(kv_shape), v, sizeof(v));
    uint8_t damaged[sizeof(kv_shape) + sizeof(v) + 9];
    memcpy(damaged, kv_shape, sizeof(kv_shape));
    memcpy(damaged + sizeof(kv_shape), v, sizeof(v));
    const uint8_t edits[] = { 0, 0, 0x01, 40, 0, 0x80, 200, 0, 0x10 }; /* a length, two stream bytes */
    memcpy(damaged + sizeof(kv_shape) + sizeof(v), edits, sizeof(edits));
    put("rans", "f16-2ltd-damaged", damaged, sizeof(damaged), NULL, 0);
    /* MLA f32 with per-channel keys, 1 token, 1 channel, 64 bins; bf16 with one value everywhere. */
    const uint8_t mla[] = { 0x01 | 0x04 | 0x08, 0, 0, 0, 63, 30, 1, 0, 0x55 };
    put("rans", "f32-mla-one-token", mla, sizeof(mla), NULL, 0);
    const uint8_t flat[] = { 0x02, 2, 63, 23, 63, 0, 1, 0, 0x10 };
    put("rans", "bf16-constant", flat, sizeof(flat), NULL, 0);
    /* f16 KV, 1 layer, 64 tokens, 36 channels (four full groups and a partial one), 32 bins. */
    const uint8_t wide[] = { 0x00, 0, 63, 35, 63, 14, 0, 1 };
    put("rans", "f16-36-channels", wide, sizeof(wide), v, sizeof(v));
}

static void lmcache_seeds(void)
{
    const size_t nl = 2, t = 40, d = 12, n = 2 * nl * t * d;
    float *chunk = kv_chunk(nl, t, d);
    uint8_t *kv = malloc(n * 2);
    convert(chunk, n, KVC_DTYPE_F16, kv);
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_WINDOW, .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = nl, .num_tokens = t, .num_heads = 1, .head_size = d, .window_tokens = 20 };
    uint8_t *buf;
    size_t len;
    kvc_status_t st = kvc_codec_encode(ctx, &p, kv, &buf, &len);
    if (st != KVC_OK) die("kvc_codec_encode", st);
    kvc_lmcache_chunk_t ex;
    void *storage;
    if ((st = kvc_codec_export_lmcache(buf, len, &ex, &storage)) != KVC_OK) die("kvc_codec_export_lmcache", st);
    const size_t S = 2 * nl * d, B = ex.cdf_bins;
    size_t cap = 8 + S * (B + 1) * 2 + 2 * nl * t * 2, used = 0;
    for (size_t w = 0; w < ex.num_windows; w++) cap += S * 4 + ex.windows[w].nbytes;
    uint8_t *in = malloc(cap);
    const uint8_t hdr[8] = { 0, 0, (uint8_t)(nl - 1), (uint8_t)(t - 1), (uint8_t)(d - 1), (uint8_t)(B - 4),
                             (uint8_t)(ex.num_windows - 1), 19 };
    memcpy(in, hdr, 8);
    used = 8;
    memcpy(in + used, ex.cdf, S * (B + 1) * 2);
    used += S * (B + 1) * 2;
    memcpy(in + used, ex.max_key, nl * t * 2);
    used += nl * t * 2;
    memcpy(in + used, ex.max_value, nl * t * 2);
    used += nl * t * 2;
    for (size_t w = 0; w < ex.num_windows; w++) {
        memcpy(in + used, ex.windows[w].lengths, S * 4);
        used += S * 4;
        memcpy(in + used, ex.windows[w].bytes, ex.windows[w].nbytes);
        used += ex.windows[w].nbytes;
    }
    put("lmcache", "real-f16-2ltd", in, used, NULL, 0);
    in[0] = 1;
    put("lmcache", "real-f16-2ltd-repaired", in, used, NULL, 0);
    free(in);
    kvc_codec_free(storage);
    kvc_codec_free(buf);
    free(kv);
    free(chunk);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds SRCDIR\n");
        return 2;
    }
    srcdir = argv[1];
    ctx = fuzz_cpu_context("best");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus", srcdir);
    mkdir(path, 0755);

    float *chunk = kv_chunk(2, 40, 32);
    float *small = kv_chunk(1, 8, 8), *wide = kv_chunk(4, 6, 32);
    container_seed("f16-2ltd", KVC_DTYPE_F16, KVC_CODEC_KV_2LTD, 2, 40, 4, 8, 16, chunk, KVC_CODER_AC);
    container_seed("bf16-2ltd", KVC_DTYPE_BF16, KVC_CODEC_KV_2LTD, 1, 8, 2, 4, 256, small, KVC_CODER_AC);
    container_seed("f32-mla", KVC_DTYPE_F32, KVC_CODEC_MLA, 1, 8, 1, 8, 3, small, KVC_CODER_AC);
    /* rANS (format 1.4): two full windows decoded in one call and a short last one */
    container_seed("f16-2ltd-rans", KVC_DTYPE_F16, KVC_CODEC_KV_2LTD, 2, 40, 4, 8, 16, chunk, KVC_CODER_RANS);
    /* 256 streams: the CDF index's two parts, which a two-thread decode parses at once */
    container_seed("f16-2ltd-rans-parts", KVC_DTYPE_F16, KVC_CODEC_KV_2LTD, 4, 6, 4, 8, 16, wide, KVC_CODER_RANS);
    const uint8_t lengths[] = { 1, 1, 1, 1 };
    raw_cdf_seed("raw-cdf", lengths, 4, KVC_OK);
    /* LENGTHS varints the parser must refuse: 1 + 2^32 (wraps to 1 in 32 bits) and 1 spelled in two
     * or five bytes (overlong). */
    const uint8_t above32[] = { 0x81, 0x80, 0x80, 0x80, 0x10, 1, 1, 1 }, overlong2[] = { 0x81, 0x00, 1, 1, 1 },
                  overlong5[] = { 0x81, 0x80, 0x80, 0x80, 0x00, 1, 1, 1 };
    raw_cdf_seed("varint-above-32-bits", above32, sizeof(above32), KVC_ERR_CORRUPT);
    raw_cdf_seed("varint-overlong-2", overlong2, sizeof(overlong2), KVC_ERR_CORRUPT);
    raw_cdf_seed("varint-overlong-5", overlong5, sizeof(overlong5), KVC_ERR_CORRUPT);
    lmcache_seeds();
    rans_seeds();
    decode_seeds("coder0_nb16", 16, 0, 4, 256);
    decode_seeds("coder1_nb32", 32, 1, 3, 512);
    decode_synthetic();
    io_seeds(small);
    transfer_seeds();
    env_seeds();
    free(chunk);
    free(small);
    free(wide);
    kvc_context_destroy(ctx);
    return 0;
}
