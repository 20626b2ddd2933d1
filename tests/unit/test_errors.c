/* SPDX-License-Identifier: BSD-3-Clause */
/* docs/ERRORS.md against the library and the public headers: the status table has one row per
 * status with its exact name and string, every status named in the file exists, and every public
 * function returning kvc_status_t (the headers in include/kvcore) has a row, as every row has a function. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#define MAX_LINES 4096

typedef struct {
    char *text;
    char *lines[MAX_LINES];
    int n;
} doc_t;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len, "cannot read %s", path);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static const char *srcdir(void)
{
    const char *d = getenv("KVC_TEST_SRCDIR");
    return d && *d ? d : ".";
}

static void load_doc(doc_t *d)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/ERRORS.md", srcdir());
    d->text = slurp(path);
    d->n = 0;
    for (char *p = d->text, *nl; *p && d->n < MAX_LINES; p = nl + 1) {
        d->lines[d->n++] = p;
        if (!(nl = strchr(p, '\n'))) break;
        *nl = '\0';
    }
}

/* Cells of a table row "| a | b | ... |", trimmed and with surrounding backticks removed (in place). */
static int cells(char *line, char **out, int max)
{
    if (line[0] != '|') return 0;
    int n = 0;
    for (char *p = line + 1, *bar; n < max && (bar = strchr(p, '|')); p = bar + 1) {
        *bar = '\0';
        while (isspace((unsigned char)*p)) p++;
        char *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1])) *--end = '\0';
        if (end - p >= 2 && *p == '`' && end[-1] == '`') {
            end[-1] = '\0';
            p++;
        }
        out[n++] = p;
    }
    return n;
}

/* Lines between "## <title>" and the next "## " heading. */
static void section(const doc_t *d, const char *title, int *first, int *end)
{
    *first = *end = -1;
    for (int i = 0; i < d->n; i++) {
        if (!strncmp(d->lines[i], "## ", 3)) {
            if (*first >= 0) {
                *end = i;
                return;
            }
            if (!strcmp(d->lines[i] + 3, title)) *first = i + 1;
        }
    }
    cr_assert_geq(*first, 0, "docs/ERRORS.md has no section \"## %s\"", title);
    *end = d->n;
}

static int status_by_name(const char *name)
{
    for (int s = 0; s >= KVC_STATUS_MIN; s--)
        if (!strcmp(kvc_status_name((kvc_status_t)s), name)) return s;
    return 1;
}

Test(errors, status_table_matches_the_library)
{
    doc_t d;
    load_doc(&d);
    int first, end;
    section(&d, "Status codes", &first, &end);
    int rows[1 - KVC_STATUS_MIN] = { 0 };
    for (int i = first; i < end; i++) {
        char *c[8];
        const int n = cells(d.lines[i], c, 8);
        if (n < 5) continue;
        char *num_end;
        const long code = strtol(c[0], &num_end, 10);
        if (num_end == c[0] || *num_end) continue; /* header and separator rows */
        cr_assert(code <= 0 && code >= KVC_STATUS_MIN, "row for %ld: not a status value", code);
        cr_expect_str_eq(c[1], kvc_status_name((kvc_status_t)code), "row %ld names %s", code, c[1]);
        cr_expect_str_eq(c[2], kvc_status_string((kvc_status_t)code), "row %ld (%s): string \"%s\"", code, c[1], c[2]);
        cr_expect(strlen(c[3]) > 0 && strlen(c[4]) > 0, "row %ld (%s) lacks when / what to do", code, c[1]);
        rows[-code]++;
    }
    for (int s = 0; s >= KVC_STATUS_MIN; s--)
        cr_expect_eq(rows[-s], 1, "%s (%d) has %d rows in the status table", kvc_status_name((kvc_status_t)s), s,
                     rows[-s]);
    cr_expect_str_eq(kvc_status_name((kvc_status_t)(KVC_STATUS_MIN - 1)), "KVC_UNKNOWN",
                     "a status below KVC_STATUS_MIN exists: the table does not cover it");
    free(d.text);
}

Test(errors, every_status_named_exists)
{
    doc_t d;
    load_doc(&d);
    int named = 0;
    for (int i = 0; i < d.n; i++)
        for (const char *p = d.lines[i]; (p = strstr(p, "KVC_")); p++) {
            if (p > d.lines[i] && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
            char name[64];
            size_t k = 0;
            while (k < sizeof(name) - 1 && (isupper((unsigned char)p[k]) || isdigit((unsigned char)p[k]) || p[k] == '_'))
                name[k] = p[k], k++;
            name[k] = '\0';
            if (strncmp(name, "KVC_ERR_", 8) && strcmp(name, "KVC_OK")) continue;
            cr_expect_leq(status_by_name(name), 0, "line %d names %s, which is not a status", i + 1, name);
            named++;
        }
    cr_assert_gt(named, 100, "only %d status names found", named);
    free(d.text);
}

/* Names of the public functions returning kvc_status_t. */
static int public_status_functions(char names[][64], int max)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/include/kvcore", srcdir());
    DIR *dp = opendir(dir);
    cr_assert_not_null(dp, "cannot open %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        const size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        char *text = slurp(path);
        static const char key[] = "KVC_API kvc_status_t ";
        for (const char *p = text; (p = strstr(p, key)); p++) {
            const char *s = p + sizeof(key) - 1, *paren = strchr(s, '(');
            cr_assert(paren && paren - s < 64 && n < max, "cannot parse a declaration in %s", path);
            memcpy(names[n], s, (size_t)(paren - s));
            names[n++][paren - s] = '\0';
        }
        free(text);
    }
    closedir(dp);
    return n;
}

Test(errors, every_public_function_has_a_row)
{
    static char names[512][64];
    const int n = public_status_functions(names, 512);
    cr_assert_gt(n, 40, "only %d functions found in include/kvcore", n);
    doc_t d;
    load_doc(&d);
    int first, end;
    section(&d, "Functions", &first, &end);
    static char rows[512][64];
    int nrows = 0;
    for (int i = first; i < end; i++) {
        char *c[4];
        if (cells(d.lines[i], c, 4) < 2 || strncmp(c[0], "kvc_", 4)) continue;
        cr_assert_lt(nrows, 512);
        cr_expect_gt(strlen(c[1]), 0, "%s has no statuses", c[0]);
        snprintf(rows[nrows++], 64, "%s", c[0]);
    }
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int r = 0; r < nrows; r++) found += !strcmp(names[i], rows[r]);
        cr_expect_eq(found, 1, "%s (include/kvcore) has %d rows in docs/ERRORS.md \"## Functions\"", names[i], found);
    }
    for (int r = 0; r < nrows; r++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= !strcmp(names[i], rows[r]);
        cr_expect(found, "docs/ERRORS.md has a row for %s, which no public header declares", rows[r]);
    }
    free(d.text);
}
