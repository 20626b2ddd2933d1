/* SPDX-License-Identifier: BSD-3-Clause */
/* Test oracle for the file writers: the expected bytes of .npy and .safetensors files, built the
 * plainest way from the format descriptions (numpy/lib/format.py; the safetensors reference writer),
 * independently of src/io. */
#ifndef KVC_TEST_IO_REF_H
#define KVC_TEST_IO_REF_H

#include <stddef.h>

/* numpy.save of a C-order array: magic, version 1.0, header dict, growth padding, spaces to a
 * 64-byte boundary, '\n', data. Returns the image size (written only when it fits in cap). */
size_t ref_npy_image(const char *descr, int ndim, const size_t *shape, const void *data, size_t nbytes,
                     unsigned char *out, size_t cap);

typedef struct ref_st_tensor {
    const char *name;  /* plain ASCII, no characters that need escaping */
    const char *dtype; /* "F32", ... */
    int ndim;
    const size_t *shape;
    const void *data;
    size_t nbytes;
} ref_st_tensor_t;

/* safetensors image of tensors given in the order they are to appear; optional single metadata
 * entry (meta_key NULL: none). Returns the size (written only when it fits in cap). */
size_t ref_st_image(const ref_st_tensor_t *t, size_t n, const char *meta_key, const char *meta_value,
                    unsigned char *out, size_t cap);

#endif
