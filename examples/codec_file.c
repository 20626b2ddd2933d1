/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore example: compress a KV chunk with the CacheGen codec into a .kvc file, read the file
 * back, describe it and decompress it.
 *
 * The chunk is [2 (K, V), layers, tokens, kv_heads * head_size] in fp32 (fp16 and bf16 work the
 * same way). The codec quantises each (plane, layer, token) row by its largest |x| to 2M+1 levels
 * (M = bins/2 - 1) and arithmetic-codes the symbols with one CDF per (plane, layer, channel); the
 * .kvc container is self-describing and checksummed (docs/FORMAT.md). The data here is synthetic:
 * smooth per-channel signals, different in every (plane, layer).
 *
 * Build against an installed kvcore:
 *   cc -std=c11 codec_file.c $(pkg-config --cflags --libs kvcore) -lm -o codec_file
 * Usage: codec_file [FILE.kvc]   (default example.kvc; `kvcore inspect FILE.kvc` reads it too)
 * Exit status 0 when every decoded value is within the quantiser's error bound. */
#include <kvcore.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { NL = 4, T = 512, NH = 4, HS = 64 };
#define C (NH * HS)

static int fail(const char *what, kvc_status_t st)
{
    fprintf(stderr, "%s: %s (%s): %s\n", what, kvc_status_string(st), kvc_status_name(st), kvc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "example.kvc";
    const size_t n = (size_t)2 * NL * T * C;
    float *kv = malloc(n * sizeof *kv), *back = malloc(n * sizeof *back);
    if (!kv || !back)
        return 1;
    for (size_t i = 0; i < n; i++) {
        const size_t c = i % C, t = i / C % T, pl = i / ((size_t)T * C); /* pl: plane * NL + layer */
        kv[i] = (float)(sin(0.01 * (double)t * (double)(1 + (c + pl) % 7) + (double)c) * (1.0 + (double)(c % (5 + pl))));
    }

    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK)
        return fail("kvc_context_create", st);

    /* Encode. field_mask 0: LMCache's default bins per layer and 256-token windows. */
    kvc_codec_params_t p = { .dtype = KVC_DTYPE_F32, .layout = KVC_CODEC_KV_2LTD,
                             .num_layers = NL, .num_tokens = T, .num_heads = NH, .head_size = HS };
    uint8_t *kvc = NULL;
    size_t kvc_len = 0;
    if ((st = kvc_codec_encode(ctx, &p, kv, &kvc, &kvc_len)) != KVC_OK)
        return fail("kvc_codec_encode", st);

    FILE *f = fopen(path, "wb");
    if (!f || fwrite(kvc, 1, kvc_len, f) != kvc_len || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    kvc_codec_free(kvc);

    /* Read the file back, as another process would. */
    f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = malloc(kvc_len + 1);
    const size_t len = buf ? fread(buf, 1, kvc_len + 1, f) : 0;
    fclose(f);
    if (len != kvc_len) {
        fprintf(stderr, "%s: read %zu bytes, wrote %zu\n", path, len, kvc_len);
        return 1;
    }

    /* Inspect validates every section and checksum before describing the container. */
    kvc_codec_info_t info;
    if ((st = kvc_codec_inspect(buf, len, &info)) != KVC_OK)
        return fail("kvc_codec_inspect", st);
    printf("%s: %zu bytes for %zu bytes of fp32 (ratio %.2f); streams %zu, CDF %zu, scales %zu bytes\n", path,
           info.container_bytes, info.original_bytes, (double)info.original_bytes / (double)info.container_bytes,
           info.streams_bytes, info.cdf_bytes, info.scales_bytes);
    kvc_codec_layer_stats_t stats[2 * NL];
    if ((st = kvc_codec_layer_stats(buf, len, stats, 2 * NL)) != KVC_OK)
        return fail("kvc_codec_layer_stats", st);
    for (int i = 0; i < 2 * NL; i++)
        printf("  %s layer %u: %u bins, %.3f bits/symbol (entropy %.3f)\n", stats[i].plane ? "V" : "K",
               stats[i].layer, stats[i].bins, stats[i].bits_per_symbol, stats[i].entropy_bits);

    /* Decode into our own buffer (kvc_codec_decode_alloc would allocate a tensor instead). */
    if ((st = kvc_codec_decode(ctx, buf, len, back, n * sizeof *back, NULL)) != KVC_OK)
        return fail("kvc_codec_decode", st);

    /* Every value within scale/(2M) of the original, scale = the row's largest |x|, plus fp32
     * rounding (the 1e-5 relative slack). */
    uint32_t bins[2 * NL];
    if ((st = kvc_cg_default_bins(NL, bins)) != KVC_OK)
        return fail("kvc_cg_default_bins", st);
    size_t over = 0;
    double worst = 0;
    for (size_t r = 0; r < n / C; r++) { /* rows: (plane, layer, token) */
        const float *x = kv + r * C, *y = back + r * C;
        const size_t plane_layer = r / T;
        double scale = 0;
        for (size_t c = 0; c < C; c++)
            scale = fmax(scale, fabs(x[c]));
        const double bound = scale / (2.0 * (bins[plane_layer] / 2 - 1)) * (1 + 1e-5);
        for (size_t c = 0; c < C; c++) {
            const double e = fabs((double)x[c] - (double)y[c]);
            worst = fmax(worst, scale > 0 ? e / scale : 0);
            over += e > bound;
        }
    }
    printf("decoded: largest error %.4f of the row's max |x|; %zu values over the bound\n", worst, over);

    free(buf);
    free(kv);
    free(back);
    kvc_context_destroy(ctx);
    return over ? 1 : 0;
}
