/* kvcore bench [SUITE...|all] [--json] [--threads N] [--quick] [--case TEXT] [--list] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

#include "../../bench/suites.h"
#include "cli.h"

static void list(void)
{
    for (size_t i = 0; i < bench_suite_count; i++)
        if (bench_suites[i].name) printf("  %-10s %s\n", bench_suites[i].name, bench_suites[i].summary);
}

int kvc_cmd_bench(int argc, char **argv)
{
    bench_opts_t o = { 0 };
    const char *want[16];
    int nwant = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) o.json = 1;
        else if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) o.only = argv[++i];
        else if (!strcmp(argv[i], "--list")) { list(); return 0; }
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: kvcore bench [SUITE...|all] [--json] [--threads N] [--quick] [--case TEXT] [--list]\n"
                   "--case TEXT reports only the cases whose name contains TEXT (the memory suite also skips the\n"
                   "others' work). The backend is the one kvcore selects (KVCORE_BACKEND forces one). Suites:\n");
            list();
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "kvcore bench: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (nwant < 16) want[nwant++] = argv[i];
    }
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
    if (!o.json)
        printf("# kvcore bench on backend %s, isa %s, up to %d threads\n", kvc_context_backend_name(o.ctx),
               kvc_context_isa(o.ctx), o.threads);
    int rc = 0, ran = 0;
    for (size_t i = 0; i < bench_suite_count; i++) {
        if (!bench_suites[i].name) continue;
        int selected = nwant == 0;
        for (int w = 0; w < nwant; w++) selected |= !strcmp(want[w], "all") || !strcmp(want[w], bench_suites[i].name);
        if (!selected) continue;
        ran++;
        if (bench_suites[i].run(&o) != 0) {
            fprintf(stderr, "kvcore bench: suite %s failed\n", bench_suites[i].name);
            rc = 1;
        }
    }
    if (!ran) {
        fprintf(stderr, "kvcore bench: no such suite; available:\n");
        list();
        rc = 2;
    }
    kvc_context_destroy(o.ctx);
    return rc;
}
