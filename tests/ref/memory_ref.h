/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar oracles for the copies, written from docs/LMCACHE.md one step or byte at a time. */
#ifndef KVC_TEST_MEMORY_REF_H
#define KVC_TEST_MEMORY_REF_H

#include <stddef.h>

/* The pieces lmcache_memcpy_async issues (docs/LMCACHE.md loop, literally): offsets and lengths relative
 * to the start of the copy. Returns the number of pieces (writes at most max). */
size_t ref_split_pieces(size_t nbytes, size_t host_buffer_offset, size_t alignment, size_t *off, size_t *len,
                        size_t max);

/* batched_memcpy: for each triple, a memmove one byte at a time (through a bounce buffer so that an
 * entry whose src and dst overlap behaves as memmove); zero sizes skipped. */
void ref_batched_memcpy(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count);

#endif
