/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore bench [SUITE...|all] [--json] [--threads N] [--quick] [--case TEXT] [--list] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvcore.h>

#include "../../bench/suites.h"
#include "cli.h"
#include "util.h"

static void list(void)
{
    for (size_t i = 0; i < bench_suite_count; i++)
        if (bench_suites[i].name) printf("  %-10s %s\n", bench_suites[i].name, bench_suites[i].summary);
}

static void bench_help(void)
{
    printf("usage: kvcore bench [OPTIONS] [SUITE...|all]\n"
           "Throughput of each op next to a baseline measured in the same run. The backend is the one kvcore\n"
           "selects (KVCORE_BACKEND forces one).\n"
           "  --json       one JSON object per measurement on stdout\n"
           "  --threads N  CPU threads (default: the library's)\n"
           "  --quick      shorter runs\n"
           "  --case TEXT  report only the cases whose name contains TEXT (the memory suite also skips the\n"
           "               others' work)\n"
           "  --list       list the suites and exit\n"
           "  --progress, --no-progress  a line on stderr between cases (suite, cases done, seconds): by\n"
           "               default only when stderr is a terminal\n"
           "The table fits 79 columns; each suite ends with a summary (cases, seconds, the range and\n"
           "geometric mean of the ratios to the baselines, a line per unit when a suite mixes units).\n"
           "suites:\n");
    list();
}

int kvc_cmd_bench(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONG,
        { "json", no_argument, NULL, 'J' },
        { "quick", no_argument, NULL, 'Q' },
        { "threads", required_argument, NULL, 'T' },
        { "list", no_argument, NULL, 'L' },
        { "case", required_argument, NULL, 'C' },
        { "progress", no_argument, NULL, 'P' },
        { "no-progress", no_argument, NULL, 'N' },
        { NULL, 0, NULL, 0 },
    };
    bench_opts_t o = { 0 };
    const char *want[16];
    int nwant = 0, progress = -1, c;
    cli_common_t com = { 0 };
    size_t threads;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, CLI_COMMON_SHORT, longopts, NULL)) != -1) {
        switch (c) {
        case 'J': o.json = 1; break;
        case 'Q': o.quick = 1; break;
        case 'L': list(); return 0;
        case 'C': o.only = optarg; break;
        case 'P':
        case 'N': progress = c == 'P'; break;
        case 'T':
            if (!cli_parse_size("bench", "--threads", optarg, &threads) || threads > 4096) {
                if (threads > 4096) fprintf(stderr, "kvcore bench: --threads %s is more than 4096\n", optarg);
                return 2;
            }
            o.threads = (int)threads;
            break;
        default: {
            int r = cli_common_option("bench", c, argv, &com, bench_help);
            if (r >= 0) return r;
        }
        }
    }
    for (; optind < argc; optind++) {
        if (nwant == 16) {
            fprintf(stderr, "kvcore bench: at most 16 suites\n");
            return 2;
        }
        want[nwant++] = argv[optind];
    }
    /* Every name is checked before anything runs: a typo is not silently skipped. */
    for (int w = 0; w < nwant; w++) {
        int known = !strcmp(want[w], "all");
        for (size_t i = 0; i < bench_suite_count; i++) known |= bench_suites[i].name && !strcmp(want[w], bench_suites[i].name);
        if (!known) {
            fprintf(stderr, "kvcore bench: no suite named '%s'; the suites are:", want[w]);
            for (size_t i = 0; i < bench_suite_count; i++)
                if (bench_suites[i].name) fprintf(stderr, " %s", bench_suites[i].name);
            fprintf(stderr, " (or all; see kvcore bench --list)\n");
            return 2;
        }
    }
    o.quiet = com.quiet;
    o.progress = progress > 0 || (progress < 0 && !com.quiet && isatty(STDERR_FILENO));
    kvc_context_params_t p = { 0 };
    if (o.threads > 0) {
        p.field_mask |= KVC_CONTEXT_PARAM_NUM_THREADS;
        p.num_threads = o.threads;
    }
    kvc_status_t st = kvc_context_create(&p, &o.ctx);
    if (st != KVC_OK) {
        fprintf(stderr, "kvcore bench: %s: %s\n", kvc_status_string(st), kvc_last_error());
        return 1;
    }
    if (o.threads <= 0) o.threads = kvc_context_num_threads(o.ctx);
    o.cpu = bench_cpu_model();
    if (!o.json && !com.quiet)
        printf("# kvcore bench on backend %s, cpu %s, isa %s, up to %d threads\n", kvc_context_backend_name(o.ctx),
               o.cpu, kvc_context_isa(o.ctx), o.threads);
    int rc = 0;
    for (size_t i = 0; i < bench_suite_count; i++) {
        if (!bench_suites[i].name) continue;
        int selected = nwant == 0;
        for (int w = 0; w < nwant; w++) selected |= !strcmp(want[w], "all") || !strcmp(want[w], bench_suites[i].name);
        if (!selected) continue;
        bench_suite_begin(&o, bench_suites[i].name);
        const int failed = bench_suites[i].run(&o) != 0;
        bench_suite_end(&o);
        if (failed) {
            fprintf(stderr, "kvcore bench: suite %s failed\n", bench_suites[i].name);
            rc = 1;
        }
    }
    kvc_context_destroy(o.ctx);
    return rc;
}
