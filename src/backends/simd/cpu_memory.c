/* SPDX-License-Identifier: BSD-3-Clause */
/* CPU backend memory ops: pinning is mlock (bounded by RLIMIT_MEMLOCK unless CAP_IPC_LOCK), copies
 * are memcpy spread over the context's threads by byte ranges. Arguments were validated by the
 * core (src/core/hostmem_copy.c). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef KVC_HAVE_OPENMP
#include <omp.h>
#endif

#include "cpu_memory.h"

/* Bytes per thread below which waking more threads costs more than it saves. */
#define COPY_BYTES_PER_THREAD ((size_t)256 << 10)

/* VmLck of this process in bytes (0 when unknown). */
static unsigned long long locked_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmLck: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* The system calls themselves: sanitizers (ASan) and some preload shims replace mlock with a no-op
 * that reports success, which would make "pinned" a lie. */
static int sys_mlock(const void *p, size_t len) { return (int)syscall(SYS_mlock, p, len); }
static int sys_munlock(const void *p, size_t len) { return (int)syscall(SYS_munlock, p, len); }

kvc_status_t kvc_cpu_host_register(kvc_backend_ctx_t *b, void *ptr, size_t len)
{
    if (sys_mlock(ptr, len) == 0) return KVC_OK;
    const int err = errno;
    struct rlimit rl;
    const int limited = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
    const unsigned long long locked = locked_bytes();
    if ((err == ENOMEM || err == EPERM || err == EAGAIN) && limited && locked + len > (unsigned long long)rl.rlim_cur)
        return b->svc->set_error(KVC_ERR_LIMIT,
                                 "mlock of %zu bytes refused: RLIMIT_MEMLOCK allows %llu bytes and %llu are already "
                                 "locked; raise it (ulimit -l, systemd LimitMEMLOCK=, docker --ulimit memlock=-1) or "
                                 "grant CAP_IPC_LOCK",
                                 len, (unsigned long long)rl.rlim_cur, locked);
    return b->svc->set_error(err == EPERM ? KVC_ERR_PERMISSION : KVC_ERR_NO_MEMORY, "mlock of %zu bytes failed: %s",
                             len, strerror(err));
}

kvc_status_t kvc_cpu_host_unregister(kvc_backend_ctx_t *b, void *ptr, size_t len)
{
    if (sys_munlock(ptr, len) == 0) return KVC_OK;
    const int err = errno;
    return b->svc->set_error(err == ENOMEM ? KVC_ERR_INVALID_ARG : KVC_ERR_BACKEND, "munlock of %zu bytes failed: %s",
                             len, strerror(err));
}

static int copy_threads(const kvc_backend_ctx_t *b, size_t bytes)
{
    const size_t useful = bytes / COPY_BYTES_PER_THREAD;
    return useful < (size_t)b->num_threads ? (useful > 0 ? (int)useful : 1) : b->num_threads;
}

/* [lo, hi) of `total` bytes for thread t of n (balanced to within one byte, no overflow). */
static void share(size_t total, int t, int n, size_t *lo, size_t *hi)
{
    const size_t q = total / (size_t)n, r = total % (size_t)n;
    *lo = (size_t)t * q + ((size_t)t < r ? (size_t)t : r);
    *hi = *lo + q + ((size_t)t < r ? 1 : 0);
}

kvc_status_t kvc_cpu_memcpy_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a)
{
    char *dst = a->dst;
    const char *src = a->src;
    const int nt = copy_threads(b, a->nbytes);
    /* Each thread copies its byte range piece by piece, never across a host_alignment boundary. */
#ifdef KVC_HAVE_OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef KVC_HAVE_OPENMP
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
        const int t = 0, n = 1;
        (void)nt;
#endif
        size_t off, hi;
        share(a->nbytes, t, n, &off, &hi);
        while (off < hi) {
            size_t piece = kvc_copy_split_piece(a, off);
            if (piece > hi - off) piece = hi - off;
            memcpy(dst + off, src + off, piece);
            off += piece;
        }
    }
    return KVC_OK;
}

static int self_overlap(const struct kvc_batched_copy *a, size_t e)
{
    const char *d = a->dsts[e], *s = a->srcs[e];
    return d < s + a->sizes[e] && s < d + a->sizes[e];
}

/* Copy the bytes [lo, hi) of the concatenation of all entries; ends[e] is the exclusive end of
 * entry e in it. An entry whose src and dst overlap is moved whole (memmove) by the thread whose
 * range holds its first byte. */
static void copy_range(const struct kvc_batched_copy *a, const size_t *ends, size_t lo, size_t hi)
{
    size_t e = 0, top = a->count;
    while (e < top) { /* first entry ending after lo */
        const size_t m = e + (top - e) / 2;
        if (ends[m] <= lo) e = m + 1;
        else top = m;
    }
    for (; e < a->count; e++) {
        const size_t size = a->sizes[e], start = ends[e] - size;
        if (start >= hi) break;
        if (!size) continue;
        if (self_overlap(a, e)) {
            if (start >= lo) memmove(a->dsts[e], a->srcs[e], size);
            continue;
        }
        const size_t s0 = (lo > start ? lo : start) - start, s1 = (hi < ends[e] ? hi : ends[e]) - start;
        memcpy((char *)a->dsts[e] + s0, (const char *)a->srcs[e] + s0, s1 - s0);
    }
}

kvc_status_t kvc_cpu_batched_memcpy(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a)
{
    const int nt = copy_threads(b, a->total_bytes);
    size_t *ends = nt > 1 ? malloc(a->count * sizeof(*ends)) : NULL;
    if (!ends) { /* one thread (or no memory for the index): entry by entry */
        for (size_t e = 0; e < a->count; e++)
            if (a->sizes[e]) memmove(a->dsts[e], a->srcs[e], a->sizes[e]);
        return KVC_OK;
    }
    size_t sum = 0;
    for (size_t e = 0; e < a->count; e++) ends[e] = sum += a->sizes[e];
    /* Threads take equal byte ranges of the concatenated entries: balanced whether there are many
     * small entries or a few large ones. */
#ifdef KVC_HAVE_OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef KVC_HAVE_OPENMP
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
        const int t = 0, n = 1;
#endif
        size_t lo, hi;
        share(a->total_bytes, t, n, &lo, &hi);
        copy_range(a, ends, lo, hi);
    }
    free(ends);
    return KVC_OK;
}
