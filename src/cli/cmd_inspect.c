/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore inspect: a container's header, sizes and ratios, and its coded bits/symbol against the
 * entropy per layer (and the error against the original); a stream's chunks and totals. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "chart.h"
#include "cli.h"
#include "codec_common.h"
#include "files.h"
#include "json.h"
#include "lmcache_config.h"
#include "util.h"

/* --lmcache-config, --chart / --no-chart / --svg FILE (demo has its own chart options). */
enum { OPT_LMCACHE_CONFIG = 1000, OPT_CHART = 1200, OPT_NO_CHART, OPT_SVG };

static void inspect_help(void)
{
    printf("usage: kvcore inspect [OPTIONS] IN.kvc\n"
           "Header, sizes and ratios, coded bits/symbol vs entropy per layer. '-' reads standard input.\n"
           "  --original KV_FILE      also the reconstruction error per layer against the original: the\n"
           "  --original K --original V   inputs encode takes (a KV file, or a K file and a V file)\n"
           "  --json                  one JSON object on stdout\n"
           "  --lmcache-config        the settings LMCache needs to read it (bins per layer for K and V), or why\n"
           "                          it cannot; with --original, also every level's size on the original\n"
           "  --chart, --no-chart     a bar chart of bits/symbol (and error, with --original) per layer after\n"
           "                          the table: by default only when standard output is a terminal\n"
           "  --svg FILE              the same chart as an SVG image ('-': standard output, instead of the report)\n"
           "  -f, --force             replace an existing --svg FILE\n");
}

/* The original as encode would read it, checked against the container. */
static int load_original(const char *const *orig, int norig, const kvc_codec_info_t *info, kvc_tensor_t *kv)
{
    cli_input_t src[2];
    int rc = 0;
    for (int i = 0; i < norig; i++)
        if ((rc = cli_input_open("inspect", orig[i], 0, &src[i])) != 0) {
            if (i) cli_input_close(&src[0]);
            return rc;
        }
    kvc_kvcache_io_params_t io = { 0 };
    if (info->heads_known) {
        io.field_mask = KVC_KVCACHE_PARAM_NUM_HEADS;
        io.num_heads = info->num_heads;
    }
    kvc_status_t st;
    if (norig == 2) st = kvc_kvcache_load_pair(orig[0], orig[1], &io, kv, NULL);
    else if (src[0].stream) st = kvc_kvcache_load_mem(src[0].data, src[0].len, &io, kv, NULL);
    else st = kvc_kvcache_load(orig[0], &io, kv, NULL);
    for (int i = 0; i < norig; i++) cli_input_close(&src[i]);
    if (st != KVC_OK) return cli_fail("inspect", st);
    if (kv->nbytes != info->original_bytes || kv->dtype != info->dtype) {
        fprintf(stderr, "kvcore inspect: the original (%s, %zu bytes) does not match the container (%s, %zu bytes)\n",
                kvc_dtype_name(kv->dtype), kv->nbytes, kvc_dtype_name(info->dtype), info->original_bytes);
        kvc_tensor_free(kv);
        return CLI_EXIT_ERROR;
    }
    return 0;
}

/* Bits/symbol per (plane, layer) over a stream's n chunks: each chunk's layer stats weighted by its
 * tokens (total bits over total symbols). *rows: planes * layers rows, or the exit status. */
static int stream_layer_rows(const char *label, const uint8_t *buf, const kvc_codec_info_t *ci, size_t n, size_t T,
                             cli_chart_row_t **rows)
{
    const size_t L = ci[0].planes * ci[0].num_layers;
    cli_chart_row_t *r = calloc(L, sizeof(*r));
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    if (!r || !ls) {
        free(r);
        free(ls);
        return cli_fail("inspect", KVC_ERR_NO_MEMORY);
    }
    for (size_t i = 0, off = 0; i < n; off += ci[i].container_bytes, i++) {
        const kvc_status_t st = kvc_codec_layer_stats(buf + off, ci[i].container_bytes, ls, L);
        if (st != KVC_OK) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu: %s\n", kvc_status_string(st), label, i, kvc_last_error());
            free(r);
            free(ls);
            return CLI_EXIT_ERROR;
        }
        for (size_t l = 0; l < L; l++) {
            r[l] = (cli_chart_row_t){ ls[l].plane ? "V" : (ci[0].planes == 2 ? "K" : "latent"), ls[l].layer,
                                      r[l].bits + ls[l].bits_per_symbol * (double)ci[i].num_tokens / (double)T, 0 };
        }
    }
    free(ls);
    *rows = r;
    return 0;
}

/* The size of the container at buf[0, len), one of a stream cli_stream_tokens walked. */
static size_t container_at(const uint8_t *buf, size_t len)
{
    kvc_container_info_t ci;
    return kvc_container_probe(buf, len, &ci) == KVC_OK ? (size_t)ci.container_bytes : len;
}
/* A stream (.kvcs): one row per chunk (its tokens, bytes, ratio, bits per symbol) and the totals.
 * Every chunk is validated as a container and must be of the first chunk's kind, as decode
 * requires. */
static int inspect_stream(const char *in_path, const char *label, const uint8_t *buf, size_t len, int as_json, int quiet,
                          int chart, const char *svg)
{
    const cli_stream_src_t src = { .fd = -1, .data = buf, .size = len };
    cli_stream_walk_t walk;
    if (!cli_stream_tokens(&src, &walk) && walk.stop < len) return cli_stream_stopped("inspect", label, &walk, len);
    const size_t n = walk.chunks;
    kvc_codec_info_t *ci = calloc(n, sizeof(*ci));
    if (!ci) return cli_fail("inspect", KVC_ERR_NO_MEMORY);
    size_t off = 0, T = 0, orig = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t total = container_at(buf + off, len - off);
        kvc_status_t st = kvc_codec_inspect(buf + off, total, &ci[i]);
        if (st != KVC_OK) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu (bytes %zu to %zu): %s\n", kvc_status_string(st), label, i,
                    off, off + total, kvc_last_error());
            free(ci);
            return CLI_EXIT_ERROR;
        }
        if (ci[i].dtype != ci[0].dtype || ci[i].layout != ci[0].layout || ci[i].num_layers != ci[0].num_layers ||
            ci[i].num_heads != ci[0].num_heads || ci[i].head_size != ci[0].head_size) {
            fprintf(stderr, "kvcore inspect: %s: %s: chunk %zu is not of the first chunk's kind (%s, %zu layers, %zu "
                            "channels): not one stream\n", kvc_status_string(KVC_ERR_CORRUPT), label, i,
                    kvc_dtype_name(ci[0].dtype), ci[0].num_layers, ci[0].num_heads * ci[0].head_size);
            free(ci);
            return CLI_EXIT_ERROR;
        }
        off += total;
        T += ci[i].num_tokens;
        orig += ci[i].original_bytes;
    }
    const kvc_codec_info_t *c0 = &ci[0];
    const size_t es = kvc_dtype_size(c0->dtype);
    const double fp16 = (double)orig / (double)es * 2.0;
    const int draw = !as_json && !quiet && cli_chart_wanted(chart);
    cli_chart_row_t *rows = NULL;
    const size_t L = c0->planes * c0->num_layers;
    int rc = (draw || svg) ? stream_layer_rows(label, buf, ci, n, T, &rows) : 0;
    if (!rc && svg) {
        char title[256];
        snprintf(title, sizeof(title), "%s: bits/symbol per layer (%zu chunks)", label, n);
        rc = cli_chart_svg("inspect", svg, title, rows, L, 0);
        if (!rc && !strcmp(svg, "-")) rc = -1; /* the image instead of the report */
    }
    if (rc) {
        free(rows);
        free(ci);
        return rc < 0 ? 0 : rc;
    }
    if (as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "file", in_path);
        json_bool(&w, "stream", 1);
        json_int(&w, "chunks", (long long)n);
        kvc_codec_info_t all = *c0;
        all.num_tokens = T;
        cli_json_chunk_shape(&w, &all);
        json_begin_object(&w, "bytes");
        json_int(&w, "stream", (long long)len);
        json_int(&w, "original", (long long)orig);
        json_end_object(&w);
        json_double(&w, "ratio_vs_fp16", fp16 / (double)len);
        json_begin_array(&w, "chunks_stats");
        size_t t0 = 0;
        for (size_t i = 0; i < n; i++) {
            json_begin_object(&w, NULL);
            json_int(&w, "chunk", (long long)i);
            json_int(&w, "first_token", (long long)t0);
            json_int(&w, "tokens", (long long)ci[i].num_tokens);
            json_int(&w, "bytes", (long long)ci[i].container_bytes);
            json_int(&w, "original_bytes", (long long)ci[i].original_bytes);
            json_double(&w, "bits_per_symbol", 8.0 * (double)ci[i].streams_bytes * (double)es / (double)ci[i].original_bytes);
            json_bool(&w, "lmcache_readable", ci[i].lmcache_readable);
            json_end_object(&w);
            t0 += ci[i].num_tokens;
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    } else {
        char heads[64] = "channels (head split unknown)";
        if (c0->heads_known) snprintf(heads, sizeof(heads), "heads x %zu", c0->head_size);
        printf("%s: kvcore stream of %zu containers v%u.%u, %s %s, %zu layers x %zu tokens x %zu %s, coder %s\n", label, n,
               c0->version_major, c0->version_minor, cli_layout_name(c0), kvc_dtype_name(c0->dtype), c0->num_layers, T,
               c0->heads_known ? c0->num_heads : c0->num_heads * c0->head_size, heads, cli_coder_name(c0));
        if (!quiet) {
            printf("\n%-6s %-15s %12s %12s %8s %9s\n", "chunk", "tokens", "bytes", "original", "ratio", "bits/sym");
            size_t t0 = 0;
            for (size_t i = 0; i < n; i++) {
                char tok[40];
                snprintf(tok, sizeof(tok), "%zu-%zu", t0, t0 + ci[i].num_tokens - 1);
                printf("%-6zu %-15s %12zu %12zu %7.2fx %9.4f\n", i, tok, ci[i].container_bytes, ci[i].original_bytes,
                       (double)ci[i].original_bytes / (double)es * 2.0 / (double)ci[i].container_bytes,
                       8.0 * (double)ci[i].streams_bytes * (double)es / (double)ci[i].original_bytes);
                t0 += ci[i].num_tokens;
            }
            printf("%-6s %-15zu %12zu %12zu %7.2fx\n", "total", T, len, orig, fp16 / (double)len);
        }
        if (draw) {
            printf("\nper layer, over the %zu chunks:\n", n);
            cli_chart_print(stdout, rows, L, 0);
        }
    }
    free(rows);
    free(ci);
    return 0;
}

int kvc_cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        { "original", required_argument, NULL, 'O' },
        { "json", no_argument, NULL, 'J' },
        { "lmcache-config", no_argument, NULL, OPT_LMCACHE_CONFIG },
        { "chart", no_argument, NULL, OPT_CHART },
        { "no-chart", no_argument, NULL, OPT_NO_CHART },
        { "svg", required_argument, NULL, OPT_SVG },
        { "force", no_argument, NULL, 'f' },
        { NULL, 0, NULL, 0 },
    };
    const char *orig[2] = { NULL, NULL }, *svg = NULL;
    int norig = 0, as_json = 0, lmcfg = 0, chart = -1, force = 0, c;
    cli_common_t com = { 0 };
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT "f", longopts, NULL)) != -1) {
        switch (c) {
        case 'J': as_json = 1; break;
        case OPT_LMCACHE_CONFIG: lmcfg = 1; break;
        case OPT_CHART: chart = 1; break;
        case OPT_NO_CHART: chart = 0; break;
        case OPT_SVG: svg = optarg; break;
        case 'f': force = 1; break;
        case 'O':
            if (norig == 2) {
                fprintf(stderr, "kvcore inspect: --original is a KV file or a K file and a V file (at most twice)\n");
                return CLI_EXIT_USAGE;
            }
            orig[norig++] = optarg;
            break;
        default: {
            int r = cli_common_option("inspect", c, argv, &com, inspect_help);
            if (r >= 0) return r;
        }
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "kvcore inspect: need one IN.kvc (see kvcore inspect --help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *in_path = argv[optind];
    if ((norig == 2 && cli_count_stdin(orig, 2)) || (norig && !strcmp(in_path, "-") && cli_count_stdin(orig, norig))) {
        fprintf(stderr, "kvcore inspect: standard input (-) can be read once, and holds a KV file, not one of a K/V pair\n");
        return CLI_EXIT_USAGE;
    }
    if ((chart == 1 || svg) && lmcfg) {
        fprintf(stderr, "kvcore inspect: %s draws the per-layer report, not --lmcache-config\n", svg ? "--svg" : "--chart");
        return CLI_EXIT_USAGE;
    }
    if (chart == 1 && as_json) {
        fprintf(stderr, "kvcore inspect: --chart draws on the text report, not with --json (--svg FILE writes it as an image)\n");
        return CLI_EXIT_USAGE;
    }
    if (svg && !strcmp(svg, "-") && (as_json || chart == 1)) {
        fprintf(stderr, "kvcore inspect: --svg - writes the image to standard output instead of the report: not with %s\n",
                as_json ? "--json" : "--chart");
        return CLI_EXIT_USAGE;
    }
    if (svg) {
        const char *inputs[3] = { in_path, orig[0], orig[1] };
        int rc = cli_chart_svg_check("inspect", svg, force, inputs, 1 + norig);
        if (rc) return rc;
    }
    /* the chart goes after the text report: not with --json, -q or --svg - unless asked */
    if (chart < 0 && (as_json || com.quiet || (svg && !strcmp(svg, "-")))) chart = 0;
    cli_input_t in;
    int rc = cli_input_open("inspect", in_path, 1, &in);
    if (rc || (rc = cli_input_load("inspect", &in)) != 0) {
        cli_input_close(&in);
        return rc;
    }
    const uint8_t *buf = in.data;
    const size_t len = in.len;
    if (cli_kvc_is_stream(buf, len)) {
        if (norig) {
            fprintf(stderr, "kvcore inspect: --original compares one container; %s is a stream: decode it and compare "
                            "the .npy files\n", in.label);
            rc = CLI_EXIT_USAGE;
        } else rc = inspect_stream(in_path, in.label, buf, len, as_json, com.quiet, chart, svg);
        cli_input_close(&in);
        return rc;
    }
    kvc_codec_info_t info;
    kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    if (st != KVC_OK) {
        cli_input_close(&in);
        return cli_fail("inspect", st);
    }
    if (lmcfg) {
        kvc_tensor_t kv = { 0 };
        if (!norig || (rc = load_original(orig, norig, &info, &kv)) == 0)
            rc = cli_lmcache_config(stdout, in.label, buf, len, &info, norig ? kv.data : NULL);
        if (norig && kv.data) kvc_tensor_free(&kv);
        cli_input_close(&in);
        return rc;
    }
    const size_t L = info.planes * info.num_layers, per_layer = info.num_tokens * info.num_heads * info.head_size;
    kvc_codec_layer_stats_t *ls = calloc(L, sizeof(*ls));
    cli_err_t *err = calloc(L, sizeof(*err));
    cli_chart_row_t *rows = NULL;
    int have_err = 0;
    if (!ls || !err || (st = kvc_codec_layer_stats(buf, len, ls, L)) != KVC_OK) {
        rc = cli_fail("inspect", ls && err ? st : KVC_ERR_NO_MEMORY);
        goto done;
    }
    if (norig) {
        kvc_tensor_t kv, dec;
        if ((rc = load_original(orig, norig, &info, &kv)) != 0) goto done;
        kvc_context_t *ctx = cli_open_context("inspect");
        if (!ctx) rc = CLI_EXIT_ERROR;
        else if ((st = kvc_codec_decode_alloc(ctx, buf, len, &dec)) == KVC_OK) {
            cli_error_stats(kv.data, dec.data, info.dtype, L, per_layer, err);
            have_err = 1;
            kvc_tensor_free(&dec);
        } else rc = cli_fail("inspect", st);
        kvc_tensor_free(&kv);
        kvc_context_destroy(ctx);
        if (rc) goto done;
    }
    const double fp16_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) * 2.0;
    const double q8_bytes = (double)info.original_bytes / (double)kvc_dtype_size(info.dtype) + (double)info.scales_bytes;
    rows = calloc(L, sizeof(*rows));
    if (!rows) {
        rc = cli_fail("inspect", KVC_ERR_NO_MEMORY);
        goto done;
    }
    for (size_t l = 0; l < L; l++)
        rows[l] = (cli_chart_row_t){ ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"), ls[l].layer,
                                     ls[l].bits_per_symbol, have_err ? err[l].rel_rms : 0 };
    if (svg) {
        char title[256];
        snprintf(title, sizeof(title), "%s: bits/symbol%s per layer", in.label, have_err ? " and relative RMS error" : "");
        if ((rc = cli_chart_svg("inspect", svg, title, rows, L, have_err)) != 0 || !strcmp(svg, "-")) goto done;
    }
    if (as_json) {
        json_writer_t w;
        json_init(&w, stdout, 1);
        json_begin_object(&w, NULL);
        json_string(&w, "file", in_path);
        json_int(&w, "format_version_major", info.version_major);
        json_int(&w, "format_version_minor", info.version_minor);
        cli_json_chunk_shape(&w, &info);
        json_int(&w, "window_tokens", info.window_tokens);
        json_int(&w, "cdf_bins", info.cdf_bins);
        json_bool(&w, "raw_cdf", info.raw_cdf);
        json_string(&w, "key_scaling", info.key_scaling == KVC_CODEC_SCALE_CHANNEL ? "channel" : "token");
        json_bool(&w, "lmcache_readable", info.lmcache_readable);
        json_begin_object(&w, "bytes");
        json_int(&w, "container", (long long)info.container_bytes);
        json_int(&w, "original", (long long)info.original_bytes);
        json_int(&w, "streams", (long long)info.streams_bytes);
        json_int(&w, "cdf", (long long)info.cdf_bytes);
        json_int(&w, "scales", (long long)info.scales_bytes);
        json_int(&w, "lengths", (long long)info.lengths_bytes);
        json_int(&w, "lmcache_layout", (long long)info.lmcache_bytes);
        json_end_object(&w);
        json_double(&w, "ratio_vs_fp16", fp16_bytes / (double)info.container_bytes);
        json_double(&w, "ratio_vs_int8", q8_bytes / (double)info.container_bytes);
        json_begin_array(&w, "layers_stats");
        for (size_t l = 0; l < L; l++) {
            json_begin_object(&w, NULL);
            json_string(&w, "plane", ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"));
            json_int(&w, "layer", ls[l].layer);
            json_int(&w, "bins", ls[l].bins);
            json_double(&w, "bits_per_symbol", ls[l].bits_per_symbol);
            json_double(&w, "entropy_bits", ls[l].entropy_bits);
            if (have_err) {
                json_double(&w, "max_abs_error", err[l].max_abs);
                json_double(&w, "relative_rms_error", err[l].rel_rms);
            }
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    } else {
        char heads[64] = "channels (head split unknown)";
        if (info.heads_known) snprintf(heads, sizeof(heads), "heads x %zu", info.head_size);
        printf("%s: kvcore container v%u.%u, %s %s, %zu layers x %zu tokens x %zu %s, window %u, CDF %u bins%s, coder %s\n",
               in.label, info.version_major, info.version_minor, cli_layout_name(&info), kvc_dtype_name(info.dtype), info.num_layers,
               info.num_tokens, info.heads_known ? info.num_heads : info.num_heads * info.head_size, heads,
               info.window_tokens, info.cdf_bins, info.raw_cdf ? " (raw LMCache table)" : "", cli_coder_name(&info));
        if (com.quiet) goto done;
        printf("size: %zu bytes = streams %zu + CDF %zu + scales %zu + lengths %zu + header %zu\n", info.container_bytes,
               info.streams_bytes, info.cdf_bytes, info.scales_bytes, info.lengths_bytes,
               info.container_bytes - info.streams_bytes - info.cdf_bytes - info.scales_bytes - info.lengths_bytes);
        if (info.coder == KVC_CODER_RANS) /* LMCache has no layout for rANS streams */
            printf("ratio: %.2fx vs fp16, %.2fx vs 8-bit quantisation\n", fp16_bytes / (double)info.container_bytes,
                   q8_bytes / (double)info.container_bytes);
        else
            printf("ratio: %.2fx vs fp16, %.2fx vs 8-bit quantisation; LMCache's layout of the same streams: %zu bytes (%.1f%% larger)\n",
                   fp16_bytes / (double)info.container_bytes, q8_bytes / (double)info.container_bytes, info.lmcache_bytes,
                   100.0 * ((double)info.lmcache_bytes / (double)info.container_bytes - 1.0));
        printf("\n%-6s %-5s %4s %10s %10s %9s%s\n", "plane", "layer", "bins", "bits/sym", "entropy", "overhead",
               have_err ? "    max|err|   rel.RMS" : "");
        for (size_t l = 0; l < L; l++) {
            printf("%-6s %-5u %4u %10.4f %10.4f %8.2f%%", ls[l].plane ? "V" : (info.planes == 2 ? "K" : "latent"), ls[l].layer,
                   ls[l].bins, ls[l].bits_per_symbol, ls[l].entropy_bits,
                   100.0 * (ls[l].bits_per_symbol / ls[l].entropy_bits - 1.0));
            if (have_err) printf("  %10.4g %9.4f", err[l].max_abs, err[l].rel_rms);
            printf("\n");
        }
        if (cli_chart_wanted(chart)) {
            printf("\n");
            cli_chart_print(stdout, rows, L, have_err);
        }
    }
done:
    free(rows);
    free(ls);
    free(err);
    cli_input_close(&in);
    return rc;
}
