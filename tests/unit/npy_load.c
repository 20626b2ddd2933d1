/* SPDX-License-Identifier: BSD-3-Clause */
#include "npy_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

test_npy_t test_npy_load(const char *path)
{
    test_npy_t a;
    memset(&a, 0, sizeof(a));
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    unsigned char pre[10];
    cr_assert_eq(fread(pre, 1, 10, f), 10u, "%s: short file", path);
    cr_assert(memcmp(pre, "\x93NUMPY", 6) == 0, "%s: not an npy file", path);
    size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    cr_assert_eq(pre[6], 1, "%s: only npy v1 is used in tests", path);
    char *hdr = calloc(1, hlen + 1);
    cr_assert_eq(fread(hdr, 1, hlen, f), hlen);
    char *d = strstr(hdr, "'descr': '");
    cr_assert_not_null(d);
    d += 10;
    size_t n = strcspn(d, "'");
    cr_assert_lt(n, sizeof(a.descr));
    memcpy(a.descr, d, n);
    cr_assert_null(strstr(hdr, "'fortran_order': True"), "%s: fortran order", path);
    char *s = strstr(hdr, "'shape': (");
    cr_assert_not_null(s);
    s += 10;
    a.count = 1;
    while (*s && *s != ')') {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s) { s++; continue; }
        cr_assert_lt(a.ndim, 8);
        a.shape[a.ndim++] = (size_t)v;
        a.count *= (size_t)v;
        s = end;
    }
    a.itemsize = (size_t)atoi(a.descr + 2);
    cr_assert_gt(a.itemsize, 0u, "%s: descr %s", path, a.descr);
    a.data = malloc(a.count * a.itemsize + 1);
    cr_assert_eq(fread(a.data, a.itemsize, a.count, f), a.count, "%s: truncated data", path);
    free(hdr);
    fclose(f);
    return a;
}

void test_npy_free(test_npy_t *a)
{
    free(a->data);
    a->data = NULL;
}
