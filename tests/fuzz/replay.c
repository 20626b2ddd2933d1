/* SPDX-License-Identifier: BSD-3-Clause */
/* Regression driver: feeds every file of a fuzz target's corpus to its LLVMFuzzerTestOneInput, built
 * with the normal compiler (no libFuzzer), and prints TAP (one line per file). A crash or a broken
 * invariant aborts, which the TAP driver reports as an error.
 *
 *   replay_<target> [--tap=-] [FILE|DIR ...]
 * Without paths it replays $KVC_TEST_SRCDIR/tests/fuzz/corpus/<target> (KVC_FUZZ_SRCDIR when the
 * variable is unset). --tap=- is accepted (and ignored) for tests/harness/criterion_tap.sh. */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef KVC_FUZZ_NAME
#error "KVC_FUZZ_NAME (the target name) must be defined"
#endif

typedef struct {
    char **paths;
    size_t n, cap;
} list_t;

static void add(list_t *l, const char *path)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->paths = realloc(l->paths, l->cap * sizeof(char *));
        if (!l->paths) abort();
    }
    l->paths[l->n++] = strdup(path);
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A file, or the regular files of a directory (sorted, so the TAP numbering is stable). */
static int collect(list_t *l, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        add(l, path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    const size_t first = l->n;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) add(l, full);
    }
    closedir(d);
    qsort(l->paths + first, l->n - first, sizeof(char *), cmp);
    return 0;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    const int err = ferror(f);
    fclose(f);
    if (err || !buf) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    list_t files = { 0 };
    int explicit_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--tap", 5)) continue;
        explicit_paths = 1;
        if (collect(&files, argv[i]) != 0) return 1;
    }
    if (!explicit_paths) {
        const char *src = getenv("KVC_TEST_SRCDIR");
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", src && *src ? src : KVC_FUZZ_SRCDIR, KVC_FUZZ_NAME);
        if (collect(&files, dir) != 0) return 1;
    }
    if (files.n == 0) {
        fprintf(stderr, "replay: no inputs for %s\n", KVC_FUZZ_NAME);
        return 1;
    }
    printf("1..%zu\n", files.n);
    fflush(stdout);
    for (size_t i = 0; i < files.n; i++) {
        size_t len = 0;
        uint8_t *data = slurp(files.paths[i], &len);
        if (!data) {
            printf("not ok %zu - %s: cannot read\n", i + 1, files.paths[i]);
            return 1;
        }
        /* An exact-size copy, as libFuzzer passes it, so reads past the input are caught. */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, data, len);
        free(data);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        const char *base = strrchr(files.paths[i], '/');
        printf("ok %zu - %s %s\n", i + 1, KVC_FUZZ_NAME, base ? base + 1 : files.paths[i]);
        fflush(stdout);
        free(files.paths[i]);
    }
    free(files.paths);
    return 0;
}
