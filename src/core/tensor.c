/* SPDX-License-Identifier: BSD-3-Clause */
/* Element types and host tensors (types.h): the dtype table every topic uses. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcore/context.h>

#include "common/checked.h"
#include "log.h"
#include "tensor.h"

static const kvc_dtype_info_t dtype_table[KVC_DTYPE_END] = {
    [KVC_DTYPE_F16] = { 2, "f16", "<f2", "F16", 7 },
    [KVC_DTYPE_BF16] = { 2, "bf16", "<V2", "BF16", 8 },
    [KVC_DTYPE_F32] = { 4, "f32", "<f4", "F32", 11 },
    [KVC_DTYPE_F64] = { 8, "f64", "<f8", "F64", 12 },
    [KVC_DTYPE_U8] = { 1, "u8", "|u1", "U8", 1 },
    [KVC_DTYPE_I8] = { 1, "i8", "|i1", "I8", 2 },
    [KVC_DTYPE_I16] = { 2, "i16", "<i2", "I16", 5 },
    [KVC_DTYPE_I32] = { 4, "i32", "<i4", "I32", 9 },
    [KVC_DTYPE_I64] = { 8, "i64", "<i8", "I64", 13 },
    [KVC_DTYPE_U16] = { 2, "u16", "<u2", "U16", 6 },
    [KVC_DTYPE_U32] = { 4, "u32", "<u4", "U32", 10 },
    [KVC_DTYPE_U64] = { 8, "u64", "<u8", "U64", 14 },
    [KVC_DTYPE_BOOL] = { 1, "bool", "|b1", "BOOL", 0 },
    [KVC_DTYPE_F8_E4M3] = { 1, "f8_e4m3", NULL, "F8_E4M3", 4 },
    [KVC_DTYPE_F8_E5M2] = { 1, "f8_e5m2", NULL, "F8_E5M2", 3 },
};

const kvc_dtype_info_t *kvc_dtype_info(kvc_dtype_t dtype)
{
    if ((int)dtype <= KVC_DTYPE_INVALID || (int)dtype >= KVC_DTYPE_END) return NULL;
    return &dtype_table[dtype];
}

KVC_API size_t kvc_dtype_size(kvc_dtype_t dtype)
{
    const kvc_dtype_info_t *d = kvc_dtype_info(dtype);
    return d ? d->size : 0;
}

KVC_API const char *kvc_dtype_name(kvc_dtype_t dtype)
{
    const kvc_dtype_info_t *d = kvc_dtype_info(dtype);
    return d ? d->name : "invalid";
}

/* ------------------------------------------------------------------ tensors */

KVC_API kvc_status_t kvc_tensor_nbytes(kvc_dtype_t dtype, int ndim, const size_t *shape, size_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_tensor_nbytes: out is NULL");
    const kvc_dtype_info_t *d = kvc_dtype_info(dtype);
    if (!d) return kvc_error(KVC_ERR_DTYPE, "dtype %d is not a valid kvc_dtype_t", (int)dtype);
    if (ndim < 0 || ndim > KVC_TENSOR_MAX_DIMS)
        return kvc_error(KVC_ERR_INVALID_ARG, "ndim %d outside 0..%d", ndim, KVC_TENSOR_MAX_DIMS);
    if (ndim > 0 && !shape) return kvc_error(KVC_ERR_INVALID_ARG, "shape is NULL with ndim %d", ndim);
    size_t n = d->size;
    for (int i = 0; i < ndim; i++)
        if (!kvc_mul_ok(n, shape[i], &n))
            return kvc_error(KVC_ERR_OUT_OF_RANGE, "shape[%d] = %zu: the tensor size overflows size_t", i, shape[i]);
    *out = n;
    return KVC_OK;
}

static void fill_shape(kvc_tensor_t *t, kvc_dtype_t dtype, int ndim, const size_t *shape, size_t nbytes)
{
    memset(t, 0, sizeof(*t));
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
}

KVC_API kvc_status_t kvc_tensor_wrap(kvc_tensor_t *out, kvc_dtype_t dtype, int ndim, const size_t *shape, void *data)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_tensor_wrap: out is NULL");
    size_t nbytes;
    kvc_status_t st = kvc_tensor_nbytes(dtype, ndim, shape, &nbytes);
    if (st != KVC_OK) return st;
    if (nbytes > 0 && !data) return kvc_error(KVC_ERR_INVALID_ARG, "data is NULL for a tensor of %zu bytes", nbytes);
    fill_shape(out, dtype, ndim, shape, nbytes);
    out->data = nbytes ? data : NULL;
    return KVC_OK;
}

kvc_status_t kvc_data_alloc(size_t n, void **out)
{
    *out = NULL;
    if (n == 0) return KVC_OK;
    size_t rounded; /* aligned_alloc wants a multiple of the alignment */
    if (!kvc_add_ok(n, KVC_DATA_ALIGN - 1, &rounded))
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu bytes", n);
    rounded &= ~(size_t)(KVC_DATA_ALIGN - 1);
    void *p = aligned_alloc(KVC_DATA_ALIGN, rounded);
    if (!p) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu bytes", n);
    *out = p;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_tensor_alloc(kvc_tensor_t *out, kvc_dtype_t dtype, int ndim, const size_t *shape)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_tensor_alloc: out is NULL");
    size_t nbytes;
    kvc_status_t st = kvc_tensor_nbytes(dtype, ndim, shape, &nbytes);
    if (st != KVC_OK) return st;
    void *p;
    if ((st = kvc_data_alloc(nbytes, &p)) != KVC_OK) return st;
    if (p) memset(p, 0, nbytes);
    fill_shape(out, dtype, ndim, shape, nbytes);
    out->data = p;
    out->owns_data = p != NULL;
    return KVC_OK;
}

KVC_API void kvc_tensor_free(kvc_tensor_t *t)
{
    if (!t) return;
    if (t->owns_data) free(t->data);
    memset(t, 0, sizeof(*t));
}

kvc_status_t kvc_tensor_check(const kvc_tensor_t *t, const char *what)
{
    if (!t) return kvc_error(KVC_ERR_INVALID_ARG, "%s is NULL", what);
    size_t nbytes;
    kvc_status_t st = kvc_tensor_nbytes(t->dtype, t->ndim, t->shape, &nbytes);
    if (st != KVC_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", kvc_last_error());
        return kvc_error(st, "%s: %s", what, why);
    }
    if (nbytes != t->nbytes)
        return kvc_error(KVC_ERR_SHAPE, "%s: nbytes %zu but its shape and dtype give %zu", what, t->nbytes, nbytes);
    if (nbytes && !t->data) return kvc_error(KVC_ERR_INVALID_ARG, "%s: data is NULL", what);
    return KVC_OK;
}
