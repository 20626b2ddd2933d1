/* SPDX-License-Identifier: BSD-3-Clause */
/* Test-only .npy loader (independent of the library's own reader): little-endian, C order. */
#ifndef KVC_TEST_NPY_LOAD_H
#define KVC_TEST_NPY_LOAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct test_npy {
    char descr[16];   /* e.g. "<f2", "<i8", "|u1" */
    int ndim;
    size_t shape[8];
    size_t count;     /* number of elements */
    size_t itemsize;
    void *data;       /* malloc'ed, count * itemsize bytes */
} test_npy_t;

/* Load a file; aborts the Criterion test with a message on any problem. */
test_npy_t test_npy_load(const char *path);
void test_npy_free(test_npy_t *a);

#endif
