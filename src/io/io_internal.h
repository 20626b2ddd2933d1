/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the file readers and writers in src/io: a bounds-checked byte source (a file or a
 * memory buffer) and a byte sink (a file or a memory buffer). The dtype table is the core's
 * (src/core/tensor.h). */
#ifndef KVC_IO_INTERNAL_H
#define KVC_IO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/io.h>
#include <kvcore/types.h>

#include "common/checked.h"
#include "log.h"
#include "tensor.h"

/* The readers copy little-endian data straight into host tensors. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kvcore file I/O assumes a little-endian host");

/* A byte source: a regular file read with pread, or a memory image. Reads outside [0, size) are
 * refused, so a parser can only see bytes that exist. */
typedef struct kvc_src {
    const unsigned char *mem; /* NULL for a file */
    int fd;
    size_t size;
    const char *name; /* path, or "buffer", for messages */
} kvc_src_t;

kvc_status_t kvc_src_open_file(kvc_src_t *s, const char *path);
void kvc_src_open_mem(kvc_src_t *s, const void *buf, size_t len);
void kvc_src_close(kvc_src_t *s);
/* Copy n bytes at off; KVC_ERR_CORRUPT when they are not all there (a parser bug otherwise). */
kvc_status_t kvc_src_read(const kvc_src_t *s, size_t off, void *dst, size_t n);

/* A byte sink: a file or a memory buffer whose capacity the caller already checked. A regular file
 * (new or existing) is written to a temporary PATH.tmp.PID.N beside it, flushed and renamed over
 * PATH by kvc_sink_finish; a device or FIFO is written directly; a directory is refused. */
typedef struct kvc_sink {
    unsigned char *mem;
    size_t cap, pos;
    int fd;
    int slot;     /* kvc_io_remove_temporaries slot, or -1 */
    char *tmp;    /* temporary path; NULL when writing directly */
    char *target; /* what tmp is renamed to (PATH, or the file a symbolic link PATH points to) */
    const char *path;
} kvc_sink_t;

kvc_status_t kvc_sink_open_file(kvc_sink_t *k, const char *path);
void kvc_sink_open_mem(kvc_sink_t *k, void *buf, size_t cap);
kvc_status_t kvc_sink_write(kvc_sink_t *k, const void *p, size_t n);
/* Close; on success rename the temporary into place, on error (st, or a failed flush, close or
 * rename) remove it. Returns the first error. */
kvc_status_t kvc_sink_finish(kvc_sink_t *k, kvc_status_t st);

/* Grow-on-demand text buffer for headers. */
typedef struct kvc_strbuf {
    char *p;
    size_t len, cap;
    int failed; /* an allocation failed: the content is incomplete */
} kvc_strbuf_t;

void kvc_sb_put(kvc_strbuf_t *b, const char *s, size_t n);
void kvc_sb_puts(kvc_strbuf_t *b, const char *s);
void kvc_sb_putc(kvc_strbuf_t *b, char c);
void kvc_sb_size(kvc_strbuf_t *b, size_t v);
void kvc_sb_free(kvc_strbuf_t *b);

/* npy.c: the header of an .npy image, validated against the source size. */
typedef struct kvc_npy_header {
    kvc_dtype_t dtype;
    int ndim;
    size_t shape[KVC_TENSOR_MAX_DIMS];
    size_t data_offset;
    size_t nbytes;
} kvc_npy_header_t;

kvc_status_t kvc_npy_parse_src(const kvc_src_t *s, kvc_npy_header_t *h);
/* Does the source start with the .npy magic? */
int kvc_npy_has_magic(const kvc_src_t *s);

/* safetensors.c: parse and validate an archive on a source (which it takes over on success and
 * closes on kvc_safetensors_close). */
kvc_status_t kvc_safetensors_open_src(kvc_src_t *s, kvc_safetensors_t **out);

#endif
