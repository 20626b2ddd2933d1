/* SPDX-License-Identifier: BSD-3-Clause */
/* Status strings and the errno -> status mapping. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <kvcore/status.h>

#include "log.h"

typedef struct {
    kvc_status_t status;
    const char *name;
    const char *text;
} status_entry_t;

#define S(code, text) { code, #code, text }
static const status_entry_t status_table[] = {
    S(KVC_OK, "success"),
    S(KVC_ERR_INVALID_ARG, "invalid argument"),
    S(KVC_ERR_NO_MEMORY, "out of memory"),
    S(KVC_ERR_UNSUPPORTED, "operation not supported by this backend"),
    S(KVC_ERR_NO_DEVICE, "no usable device"),
    S(KVC_ERR_OUT_OF_RANGE, "index out of range"),
    S(KVC_ERR_NO_SPACE, "not enough space (output buffer or disk)"),
    S(KVC_ERR_CORRUPT, "corrupt or truncated data"),
    S(KVC_ERR_VERSION, "unsupported version"),
    S(KVC_ERR_EXISTS, "object already exists"),
    S(KVC_ERR_NOT_FOUND, "not found"),
    S(KVC_ERR_IO, "input/output error"),
    S(KVC_ERR_ABI, "backend module ABI mismatch"),
    S(KVC_ERR_BACKEND, "backend runtime error"),
    S(KVC_ERR_PERMISSION, "permission denied"),
    S(KVC_ERR_LIMIT, "resource limit too low"),
    S(KVC_ERR_ALIGNMENT, "misaligned pointer or size"),
    S(KVC_ERR_DTYPE, "wrong element type"),
    S(KVC_ERR_SHAPE, "sizes do not fit together"),
    S(KVC_ERR_FORMAT, "unknown layout format"),
    S(KVC_ERR_PLACEMENT, "memory placement could not be honoured"),
    S(KVC_ERR_STATE, "invalid state for this call"),
    S(KVC_ERR_OVERLAP, "buffers overlap"),
};
#undef S

static const status_entry_t *lookup(kvc_status_t status)
{
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++)
        if (status_table[i].status == status) return &status_table[i];
    return NULL;
}

KVC_API const char *kvc_status_string(kvc_status_t status)
{
    const status_entry_t *e = lookup(status);
    return e ? e->text : "unknown status";
}

KVC_API const char *kvc_status_name(kvc_status_t status)
{
    const status_entry_t *e = lookup(status);
    return e ? e->name : "KVC_UNKNOWN";
}

kvc_status_t kvc_status_from_errno(int err)
{
    switch (err) {
    case 0: return KVC_OK;
    case ENOMEM: return KVC_ERR_NO_MEMORY;
    case EINVAL: return KVC_ERR_INVALID_ARG;
    case EEXIST: return KVC_ERR_EXISTS;
    case ENOENT: return KVC_ERR_NOT_FOUND;
    case EPERM:
    case EACCES: return KVC_ERR_PERMISSION;
    case ENOSPC:
    case EFBIG: return KVC_ERR_NO_SPACE;
    case ENOSYS:
    case EOPNOTSUPP: return KVC_ERR_UNSUPPORTED;
    case EAGAIN: return KVC_ERR_LIMIT;
    case ERANGE:
    case EOVERFLOW: return KVC_ERR_OUT_OF_RANGE;
    default: return KVC_ERR_IO;
    }
}
