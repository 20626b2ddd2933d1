/* SPDX-License-Identifier: BSD-3-Clause */
/* The element-type table and tensor helpers behind types.h, shared by the core and src/io. */
#ifndef KVC_CORE_TENSOR_H
#define KVC_CORE_TENSOR_H

#include <stddef.h>

#include <kvcore/types.h>

#define KVC_DATA_ALIGN 64

typedef struct kvc_dtype_info {
    size_t size;
    const char *name;        /* kvc_dtype_name */
    const char *npy_descr;   /* what kvc_npy_write writes; NULL: no .npy form */
    const char *st_name;     /* safetensors dtype string */
    int st_rank;             /* the reference's enum order (alignment ascending), for write order */
} kvc_dtype_info_t;

/* NULL for a value that is not a valid type. */
const kvc_dtype_info_t *kvc_dtype_info(kvc_dtype_t dtype);

/* 64-byte aligned allocation; NULL for n == 0 (callers treat that as success). */
kvc_status_t kvc_data_alloc(size_t n, void **out);

/* Validate a tensor given to a writer (argument index `what` names it in messages). */
kvc_status_t kvc_tensor_check(const kvc_tensor_t *t, const char *what);

#endif
