/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore inspect --lmcache-config: what LMCache needs to read a container. LMCache takes the bins
 * of each layer from its per-model CacheGenConfig (kspecs / vspecs), not from the stored object, and
 * decodes every stream with one CDF width; so a reader needs exactly those settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "lmcache_config.h"
#include "util.h"

/* Runs of equal bins as LMCache's QuantizationSpec list, e.g. "(0, 10, 32), (10, 32, 16)". */
static void print_specs(FILE *f, const uint32_t *bins, size_t NL)
{
    for (size_t a = 0; a < NL;) {
        size_t b = a;
        while (b < NL && bins[b] == bins[a]) b++;
        fprintf(f, "%sQuantizationSpec(start_layer=%zu, end_layer=%zu, bins=%u)", a ? ", " : "", a, b, bins[a]);
        a = b;
    }
}

/* Size of orig encoded at every level, relative to level 0 (LMCache's default for its layer count). */
static int print_level_sizes(FILE *f, const kvc_codec_info_t *info, const void *orig)
{
    kvc_context_t *ctx = NULL;
    if (kvc_context_create(NULL, &ctx) != KVC_OK) return cli_fail("inspect", KVC_ERR_NO_MEMORY);
    size_t size0 = 0;
    int rc = 0;
    fprintf(f, "levels on the original (%zu layers; level 0 = LMCache's default):\n", info->num_layers);
    for (int level = 0; level <= KVC_CODEC_LEVEL_MAX && !rc; level++) {
        kvc_codec_params_t p = { .dtype = info->dtype, .layout = info->layout, .num_layers = info->num_layers,
                                 .num_tokens = info->num_tokens, .num_heads = info->num_heads, .head_size = info->head_size };
        uint32_t *bins = malloc(2 * info->num_layers * sizeof(uint32_t));
        uint8_t *buf = NULL;
        size_t len = 0;
        kvc_status_t st = bins ? kvc_codec_level_params(level, &p, bins) : KVC_ERR_NO_MEMORY;
        if (st == KVC_OK) st = kvc_codec_encode(ctx, &p, orig, &buf, &len);
        if (st != KVC_OK) rc = cli_fail("inspect", st);
        else {
            if (!level) size0 = len;
            fprintf(f, "  level %d: %zu bytes (%+.1f %% vs level 0)\n", level, len, 100.0 * ((double)len / (double)size0 - 1.0));
        }
        kvc_codec_free(buf);
        free(bins);
    }
    kvc_context_destroy(ctx);
    return rc;
}

int cli_lmcache_config(FILE *f, const char *label, const uint8_t *buf, size_t len, const kvc_codec_info_t *info, const void *orig)
{
    const size_t NL = info->num_layers, L = info->planes * NL;
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    uint32_t *bins = malloc(L * sizeof(uint32_t)), *def = malloc(2 * NL * sizeof(uint32_t));
    kvc_status_t st = ls && bins && def ? kvc_codec_layer_stats(buf, len, ls, L) : KVC_ERR_NO_MEMORY;
    int rc = 0;
    if (st != KVC_OK) {
        rc = cli_fail("inspect", st);
        goto done;
    }
    for (size_t i = 0; i < L; i++) bins[i] = ls[i].bins;
    kvc_cg_default_bins(NL, def);
    fprintf(f, "%s: LMCache settings for this container (%zu layers, %s)\n", label, NL,
            info->planes == 2 ? "keys and values" : "one latent plane");
    fprintf(f, "  key bins:   ");
    print_specs(f, bins, NL);
    if (info->planes == 2) {
        fprintf(f, "\n  value bins: ");
        print_specs(f, bins + NL, NL);
    }
    fprintf(f, "\n  CDF: %u entries per stream (LMCache's decoder takes up to 64)\n", info->cdf_bins + 1);
    kvc_lmcache_chunk_t o;
    void *storage = NULL;
    st = kvc_codec_export_lmcache(buf, len, &o, &storage);
    kvc_codec_free(storage);
    if (st == KVC_ERR_UNSUPPORTED) fprintf(f, "LMCache cannot read it: %s\n", kvc_last_error());
    else if (st != KVC_OK) {
        rc = cli_fail("inspect", st);
        goto done;
    } else {
        int is_default = 1;
        for (size_t i = 0; i < L; i++) is_default &= bins[i] == def[i];
        if (is_default)
            fprintf(f, "LMCache reads it with its own default for %zu layers (CacheGenConfig.from_model_name of a "
                       "%zu-layer model): no settings needed.\n", NL, NL);
        else {
            fprintf(f, "LMCache's decoder kernel takes these streams, but LMCache dequantises with the bins of its "
                       "per-model CacheGenConfig, not the stored ones: its default for %zu layers differs, so it needs\n"
                       "  CacheGenConfig(nlayers=%zu, kspecs=[", NL, NL);
            print_specs(f, bins, NL);
            fprintf(f, "], vspecs=[");
            if (info->planes == 2) print_specs(f, bins + NL, NL);
            fprintf(f, "])\n");
        }
        uint32_t kmax = 0, vmax = 0;
        for (size_t l = 0; l < NL; l++) {
            if (bins[l] > kmax) kmax = bins[l];
            if (info->planes == 2 && bins[NL + l] > vmax) vmax = bins[NL + l];
        }
        if (info->planes == 2 && (kmax != vmax || kmax + 1 > 48))
            fprintf(f, "LMCache's encoder cannot produce these streams (its CDF table joins K's %u and V's %u entries, "
                       "which must be equal, and holds at most 48): only its decoder can read them.\n", kmax + 1, vmax + 1);
    }
    if (orig) rc = print_level_sizes(f, info, orig);
done:
    free(ls);
    free(bins);
    free(def);
    return rc;
}
