/* SPDX-License-Identifier: BSD-3-Clause */
/* Copies: the split copy of LMCache's lmcache_memcpy_async and batched memcpy. Arguments are
 * validated here once; the backends only copy. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostmem.h"

static int wraps(const void *p, size_t n) { return (uintptr_t)p > UINTPTR_MAX - n; }

static int overlap(uintptr_t a, size_t na, uintptr_t b, size_t nb) { return a < b + nb && b < a + na; }

kvc_status_t kvc_copy_check(void *dst, const void *src, size_t nbytes, size_t host_buffer_offset,
                            size_t host_buffer_alignment)
{
    if (!dst || !src) return kvc_error(KVC_ERR_INVALID_ARG, "dst and src must not be NULL (nbytes %zu)", nbytes);
    if (host_buffer_offset > SIZE_MAX - nbytes || host_buffer_offset + nbytes > SIZE_MAX - host_buffer_alignment)
        return kvc_error(KVC_ERR_INVALID_ARG, "host_buffer_offset %zu + nbytes %zu overflows", host_buffer_offset,
                         nbytes);
    if (wraps(dst, nbytes) || wraps(src, nbytes))
        return kvc_error(KVC_ERR_INVALID_ARG, "a %zu-byte range at dst or src wraps around the address space", nbytes);
    if (overlap((uintptr_t)dst, nbytes, (uintptr_t)src, nbytes))
        return kvc_error(KVC_ERR_INVALID_ARG, "dst [%p, +%zu) and src [%p, +%zu) overlap", dst, nbytes, src, nbytes);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_memcpy_async(kvc_context_t *ctx, void *dst, const void *src, size_t nbytes,
                                      kvc_direction_t direction, size_t host_buffer_offset,
                                      size_t host_buffer_alignment, kvc_stream_t stream)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    /* LMCache's check (A & (A-1)) == 0 lets 0 through; 0 is rejected here. */
    if (host_buffer_alignment == 0 || (host_buffer_alignment & (host_buffer_alignment - 1)))
        return kvc_error(KVC_ERR_INVALID_ARG, "host_buffer_alignment %zu is not a power of two > 0",
                         host_buffer_alignment);
    if (direction != KVC_H2D && direction != KVC_D2H)
        return kvc_error(KVC_ERR_INVALID_ARG, "direction %d is neither KVC_H2D nor KVC_D2H", (int)direction);
    if (nbytes == 0) return KVC_OK;
    const kvc_status_t st = kvc_copy_check(dst, src, nbytes, host_buffer_offset, host_buffer_alignment);
    if (st != KVC_OK) return st;
    const struct kvc_copy_split a = { .dst = dst,
                                      .src = src,
                                      .nbytes = nbytes,
                                      .direction = direction,
                                      .host_offset = host_buffer_offset,
                                      .host_alignment = host_buffer_alignment,
                                      .stream = stream };
    return ctx->ops.memcpy_split(ctx->bctx, &a);
}

typedef struct {
    uintptr_t lo, hi;
    size_t entry;
} range_t;

/* Sort ranges by start: LSD radix sort on (lo - smallest lo), 11 bits per pass, as many passes as
 * the span of the addresses needs (3 for a pool of up to 8 GiB); qsort took as long as copying 4 KiB
 * entries. tmp has room for n ranges. */
static void sort_by_start(range_t *r, range_t *tmp, size_t n)
{
    enum { BITS = 11, BUCKETS = 1 << BITS };
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo < lo) lo = r[i].lo;
        if (r[i].lo > hi) hi = r[i].lo;
    }
    size_t count[BUCKETS];
    range_t *src = r, *dst = tmp;
    for (unsigned shift = 0; shift < sizeof(uintptr_t) * 8 && ((hi - lo) >> shift) != 0; shift += BITS) {
        memset(count, 0, sizeof(count));
        for (size_t i = 0; i < n; i++) count[((src[i].lo - lo) >> shift) & (BUCKETS - 1)]++;
        for (size_t b = 0, sum = 0; b < BUCKETS; b++) {
            const size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[((src[i].lo - lo) >> shift) & (BUCKETS - 1)]++] = src[i];
        range_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != r) memcpy(r, src, n * sizeof(*r));
}

/* Destinations must be pairwise disjoint and must not overlap another entry's source (an entry's
 * own src/dst overlap is a memmove). O(n log n): sort the destinations, then look up each source. */
static kvc_status_t check_cross_overlap(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count)
{
    range_t *d = malloc(2 * count * sizeof(*d));
    if (!d) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu ranges to check for overlap", count);
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (sizes[i]) d[n++] = (range_t){ (uintptr_t)dsts[i], (uintptr_t)dsts[i] + sizes[i], i };
    sort_by_start(d, d + count, n);
    kvc_status_t st = KVC_OK;
    for (size_t k = 1; k < n && st == KVC_OK; k++)
        if (d[k].lo < d[k - 1].hi)
            st = kvc_error(KVC_ERR_INVALID_ARG, "dsts[%zu] and dsts[%zu] overlap: the result would depend on the copy "
                           "order", d[k - 1].entry, d[k].entry);
    for (size_t j = 0; j < count && st == KVC_OK; j++) {
        if (!sizes[j]) continue;
        const uintptr_t lo = (uintptr_t)srcs[j], hi = lo + sizes[j];
        /* Last destination starting before hi; the ones overlapping [lo, hi) sit just below it. */
        size_t a = 0, b = n;
        while (a < b) {
            const size_t m = a + (b - a) / 2;
            if (d[m].lo < hi) a = m + 1;
            else b = m;
        }
        for (size_t k = a; k-- > 0 && d[k].hi > lo;)
            if (d[k].entry != j) {
                st = kvc_error(KVC_ERR_INVALID_ARG, "srcs[%zu] overlaps dsts[%zu]: the result would depend on the "
                               "copy order", j, d[k].entry);
                break;
            }
    }
    free(d);
    return st;
}

KVC_API kvc_status_t kvc_batched_memcpy(kvc_context_t *ctx, void *const *dsts, const void *const *srcs,
                                        const size_t *sizes, size_t count, kvc_stream_t stream)
{
    if (!ctx) return kvc_error(KVC_ERR_INVALID_ARG, "ctx must not be NULL");
    if (count == 0) return KVC_OK;
    if (!dsts || !srcs || !sizes)
        return kvc_error(KVC_ERR_INVALID_ARG, "dsts, srcs and sizes must not be NULL (count %zu)", count);
    size_t total = 0, nonzero = 0;
    for (size_t i = 0; i < count; i++) {
        if (!sizes[i]) continue;
        if (!dsts[i] || !srcs[i])
            return kvc_error(KVC_ERR_INVALID_ARG, "entry %zu: %s is NULL with size %zu", i, !dsts[i] ? "dsts[i]" : "srcs[i]",
                             sizes[i]);
        if (wraps(dsts[i], sizes[i]) || wraps(srcs[i], sizes[i]))
            return kvc_error(KVC_ERR_INVALID_ARG, "entry %zu: a %zu-byte range wraps around the address space", i,
                             sizes[i]);
        if (total > SIZE_MAX - sizes[i]) return kvc_error(KVC_ERR_INVALID_ARG, "sizes overflow a size_t at entry %zu", i);
        total += sizes[i];
        nonzero++;
    }
    if (total == 0) return KVC_OK;
    if (nonzero > 1) {
        kvc_status_t st = check_cross_overlap(dsts, srcs, sizes, count);
        if (st != KVC_OK) return st;
    }
    const struct kvc_batched_copy a = {
        .dsts = dsts, .srcs = srcs, .sizes = sizes, .count = count, .total_bytes = total, .stream = stream
    };
    return ctx->ops.batched_memcpy(ctx->bctx, &a);
}
