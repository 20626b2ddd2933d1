/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore status codes: 0 is success, errors are negative. The numeric values are stable ABI.
 * Thread safety: the functions here are pure; any thread may call them at any time. */
#ifndef KVCORE_STATUS_H
#define KVCORE_STATUS_H

#include <kvcore/export.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvc_status {
    KVC_OK = 0,
    KVC_ERR_INVALID_ARG = -1,   /* a NULL pointer, a zero or negative count, a bad enum value */
    KVC_ERR_NO_MEMORY = -2,     /* host or device allocation failed */
    KVC_ERR_UNSUPPORTED = -3,   /* the selected backend or build does not implement this */
    KVC_ERR_NO_DEVICE = -4,     /* a forced backend found no usable device */
    KVC_ERR_OUT_OF_RANGE = -5,  /* a slot, block id, position or index outside its buffer */
    KVC_ERR_NO_SPACE = -6,      /* an output buffer is too small; the size needed is reported */
    KVC_ERR_CORRUPT = -7,       /* compressed data or a container failed validation */
    KVC_ERR_VERSION = -8,       /* a container or module of an unsupported version */
    KVC_ERR_EXISTS = -9,        /* a named object (shared memory) already exists */
    KVC_ERR_NOT_FOUND = -10,    /* a named object, file or module does not exist */
    KVC_ERR_IO = -11,           /* a read/write/system call failed */
    KVC_ERR_ABI = -12,          /* a backend module was built for another ABI version */
    KVC_ERR_BACKEND = -13,      /* a backend/runtime call failed (see the log for the vendor error) */
    KVC_ERR_PERMISSION = -14,   /* the OS refused (EPERM/EACCES, e.g. a binding refused in a container) */
    KVC_ERR_LIMIT = -15,        /* a resource limit (RLIMIT_MEMLOCK, hugepage pool) is too low */
    KVC_ERR_ALIGNMENT = -16,    /* a pointer or size is not aligned as required */
    KVC_ERR_DTYPE = -17,        /* wrong element type or element size for the operation */
    KVC_ERR_SHAPE = -18,        /* sizes that do not fit together (e.g. chunk not a multiple of block) */
    KVC_ERR_FORMAT = -19,       /* unknown layout/format value */
    KVC_ERR_PLACEMENT = -20,    /* strict NUMA placement could not be honoured */
    KVC_ERR_STATE = -21,        /* call not valid in the current state (double free, unknown pointer) */
    KVC_ERR_OVERLAP = -22,      /* buffers that must be distinct overlap (a chunk and the engine pool) */
} kvc_status_t;

/* Lowest (most negative) status value; used by tests and bindings that walk the table. */
#define KVC_STATUS_MIN KVC_ERR_OVERLAP

/* A short, static, lower-case description ("invalid argument"). Never NULL; unknown values give
 * "unknown status". */
KVC_API const char *kvc_status_string(kvc_status_t status);

/* The enum name ("KVC_ERR_INVALID_ARG"); "KVC_UNKNOWN" for values outside the table. */
KVC_API const char *kvc_status_name(kvc_status_t status);

#ifdef __cplusplus
}
#endif
#endif
