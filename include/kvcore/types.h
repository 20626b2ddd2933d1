/* SPDX-License-Identifier: BSD-3-Clause */
/* Element types and the host tensor descriptor shared by the topics (file I/O, quantiser, codec,
 * RoPE). Tensors are C-contiguous (row-major) and little-endian, as on every host kvcore supports.
 * Thread safety: the dtype queries are pure; the tensor calls touch only the tensor they are given,
 * so calls on different tensors may run concurrently (one tensor is the caller's to guard). */
#ifndef KVCORE_TYPES_H
#define KVCORE_TYPES_H

#include <stddef.h>
#include <kvcore/export.h>
#include <kvcore/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The numeric values are stable ABI; 0 is never a valid type, so a zeroed struct
 * does not silently mean f16. The set is that of safetensors (the richest of the file formats). */
typedef enum kvc_dtype {
    KVC_DTYPE_INVALID = 0,
    KVC_DTYPE_F16 = 1,     /* IEEE binary16 */
    KVC_DTYPE_BF16 = 2,    /* bfloat16 */
    KVC_DTYPE_F32 = 3,
    KVC_DTYPE_F64 = 4,
    KVC_DTYPE_U8 = 5,
    KVC_DTYPE_I8 = 6,
    KVC_DTYPE_I16 = 7,
    KVC_DTYPE_I32 = 8,
    KVC_DTYPE_I64 = 9,
    KVC_DTYPE_U16 = 10,
    KVC_DTYPE_U32 = 11,
    KVC_DTYPE_U64 = 12,
    KVC_DTYPE_BOOL = 13,   /* one byte, 0 or 1 */
    KVC_DTYPE_F8_E4M3 = 14, /* fp8 e4m3 (finite-only "fn" variant, as vLLM's fp8 KV caches) */
    KVC_DTYPE_F8_E5M2 = 15,
} kvc_dtype_t;

/* One past the largest valid kvc_dtype_t (for loops over all types). */
#define KVC_DTYPE_END 16

/* Direction of a transfer or copy between the host and the device (LMCache's TransferDirection
 * values). Transfers: H2D = chunk -> paged cache (LMCache retrieve / load), D2H = paged cache ->
 * chunk (store / offload). kvc_memcpy_async: H2D = src is the host buffer, D2H = dst is. */
typedef enum kvc_direction {
    KVC_H2D = 0,
    KVC_D2H = 1,
} kvc_direction_t;

/* Size of one element in bytes; 0 for a value that is not a valid type. */
KVC_API size_t kvc_dtype_size(kvc_dtype_t dtype);

/* Short lower-case name ("f16", "bf16", "f32", "u8", "f8_e4m3", ...); "invalid" for a value that
 * is not a valid type. Never NULL. */
KVC_API const char *kvc_dtype_name(kvc_dtype_t dtype);

/* Most dimensions a kvc_tensor_t holds. */
#define KVC_TENSOR_MAX_DIMS 8

/* A host tensor: C-contiguous elements of one type. ndim 0 is a scalar (one element). A dimension
 * of size 0 is allowed (no elements; data may then be NULL). */
typedef struct kvc_tensor {
    kvc_dtype_t dtype;
    int ndim;                          /* 0 .. KVC_TENSOR_MAX_DIMS */
    size_t shape[KVC_TENSOR_MAX_DIMS]; /* entries at and past ndim are 0 */
    void *data;                        /* nbytes bytes; NULL when nbytes is 0 */
    size_t nbytes;                     /* product(shape) * kvc_dtype_size(dtype) */
    int owns_data;                     /* 1: data was allocated by kvcore and kvc_tensor_free frees it */
} kvc_tensor_t;

/* Bytes of a tensor of this type and shape, with every multiplication checked:
 * KVC_ERR_DTYPE (invalid type), KVC_ERR_INVALID_ARG (ndim outside 0..8, shape NULL with ndim > 0,
 * out NULL), KVC_ERR_OUT_OF_RANGE (the size does not fit in size_t). */
KVC_API kvc_status_t kvc_tensor_nbytes(kvc_dtype_t dtype, int ndim, const size_t *shape, size_t *out);

/* Describe caller-owned memory as a tensor (owns_data = 0; kvc_tensor_free leaves data alone).
 * data may be NULL only when the tensor has no elements. Errors as kvc_tensor_nbytes, plus
 * KVC_ERR_INVALID_ARG for data NULL with elements. *out is set only on success. */
KVC_API kvc_status_t kvc_tensor_wrap(kvc_tensor_t *out, kvc_dtype_t dtype, int ndim, const size_t *shape,
                                     void *data);

/* Allocate a zero-filled tensor (64-byte aligned data, owns_data = 1). Errors as kvc_tensor_nbytes,
 * plus KVC_ERR_NO_MEMORY. *out is set only on success. */
KVC_API kvc_status_t kvc_tensor_alloc(kvc_tensor_t *out, kvc_dtype_t dtype, int ndim, const size_t *shape);

/* Free the data when the tensor owns it, then zero the descriptor. NULL is a no-op. */
KVC_API void kvc_tensor_free(kvc_tensor_t *t);

#ifdef __cplusplus
}
#endif
#endif
