/* SPDX-License-Identifier: BSD-3-Clause */
/* Bytes source / sink and text buffer the file formats (npy.c, safetensors.c, kvcache.c) are built on. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_internal.h"

/* ------------------------------------------------------------------ byte source */

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO (named pipe)" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

kvc_status_t kvc_src_open_file(kvc_src_t *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    if (!path) return kvc_error(KVC_ERR_INVALID_ARG, "path is NULL");
    /* O_NONBLOCK: a FIFO without a writer would otherwise block open() until one appears. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == EISDIR) return kvc_error(KVC_ERR_INVALID_ARG, "%s is a directory", path);
        return kvc_error(kvc_status_from_errno(e), "cannot open %s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return kvc_error(kvc_status_from_errno(e), "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return kvc_error(KVC_ERR_INVALID_ARG, "%s is %s, not a regular file", path, file_kind(sb.st_mode));
    }
    s->fd = fd;
    s->size = (size_t)sb.st_size;
    s->name = path;
    return KVC_OK;
}

void kvc_src_open_mem(kvc_src_t *s, const void *buf, size_t len)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->mem = buf;
    s->size = len;
    s->name = "buffer";
}

void kvc_src_close(kvc_src_t *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

kvc_status_t kvc_src_read(const kvc_src_t *s, size_t off, void *dst, size_t n)
{
    if (off > s->size || n > s->size - off)
        return kvc_error(KVC_ERR_CORRUPT, "%s: %zu bytes at offset %zu are past its end (%zu bytes)", s->name, n,
                         off, s->size);
    if (n == 0) return KVC_OK;
    if (s->mem) {
        memcpy(dst, s->mem + off, n);
        return KVC_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        size_t chunk = n < (size_t)1 << 30 ? n : (size_t)1 << 30;
        ssize_t r = pread(s->fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            return kvc_error(kvc_status_from_errno(e), "%s: read failed: %s", s->name, strerror(e));
        }
        if (r == 0) return kvc_error(KVC_ERR_IO, "%s: the file shrank while it was read", s->name);
        p += r;
        off += (size_t)r;
        n -= (size_t)r;
    }
    return KVC_OK;
}

/* ------------------------------------------------------------------ byte sink */

/* Temporaries of writes in progress, for kvc_io_remove_temporaries (a signal handler): fixed
 * slots so that the handler reads no memory that a writer may free. */
#define TMP_SLOTS 32
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_ARMED };
static struct {
    _Atomic int state;
    char path[PATH_MAX];
} tmp_slots[TMP_SLOTS];
static _Atomic unsigned long tmp_seq;

static int slot_claim(void)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        int want = SLOT_FREE;
        if (atomic_compare_exchange_strong(&tmp_slots[i].state, &want, SLOT_CLAIMED)) return i;
    }
    return -1; /* all busy: that write's temporary is not removed by a signal handler */
}

KVC_API void kvc_io_remove_temporaries(void)
{
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load(&tmp_slots[i].state) == SLOT_ARMED) unlink(tmp_slots[i].path);
}

static kvc_status_t sink_open_direct(kvc_sink_t *k, const char *path, const struct stat *sb)
{
    if (S_ISDIR(sb->st_mode)) return kvc_error(KVC_ERR_INVALID_ARG, "%s is a directory", path);
    /* A device or a FIFO cannot be replaced by a rename: write into it (O_NONBLOCK: a FIFO with no
     * reader fails with ENXIO instead of blocking). */
    k->fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (k->fd < 0) {
        int e = errno;
        return kvc_error(kvc_status_from_errno(e), "cannot open %s for writing: %s", path,
                         e == ENXIO ? "no process is reading it" : strerror(e));
    }
    fcntl(k->fd, F_SETFL, fcntl(k->fd, F_GETFL) & ~O_NONBLOCK);
    return KVC_OK;
}

kvc_status_t kvc_sink_open_file(kvc_sink_t *k, const char *path)
{
    memset(k, 0, sizeof(*k));
    k->fd = -1;
    k->slot = -1;
    k->path = path;
    struct stat sb;
    const int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) return sink_open_direct(k, path, &sb);
    /* A regular file is written to PATH.tmp.PID.N in the same directory and renamed over PATH only
     * when complete and flushed, so a failed or interrupted write never damages an existing file. */
    char real[PATH_MAX];
    const char *target = path;
    struct stat lsb;
    if (exists && lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        if (!realpath(path, real)) {
            int e = errno;
            return kvc_error(kvc_status_from_errno(e), "cannot resolve %s: %s", path, strerror(e));
        }
        target = real; /* replace the file the link points to, not the link */
    }
    const size_t tn = strlen(target) + 48;
    if (!(k->target = malloc(strlen(target) + 1)) || !(k->tmp = malloc(tn))) {
        free(k->target);
        k->target = NULL;
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a path");
    }
    strcpy(k->target, target);
    for (int tries = 0; k->fd < 0 && tries < 100; tries++) { /* a name left by a killed process is skipped */
        snprintf(k->tmp, tn, "%s.tmp.%ld.%lu", target, (long)getpid(), atomic_fetch_add(&tmp_seq, 1));
        k->fd = open(k->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (k->fd < 0 && errno != EEXIST) break;
    }
    if (k->fd < 0) {
        int e = errno;
        kvc_status_t st = kvc_error(kvc_status_from_errno(e), "cannot create %s: %s", path, strerror(e));
        free(k->tmp);
        free(k->target);
        k->tmp = k->target = NULL;
        return st;
    }
    if (exists) fchmod(k->fd, sb.st_mode & 07777); /* the replacement keeps the file's permissions */
    if (strlen(k->tmp) < PATH_MAX && (k->slot = slot_claim()) >= 0) {
        strcpy(tmp_slots[k->slot].path, k->tmp);
        atomic_store(&tmp_slots[k->slot].state, SLOT_ARMED);
    }
    return KVC_OK;
}

void kvc_sink_open_mem(kvc_sink_t *k, void *buf, size_t cap)
{
    memset(k, 0, sizeof(*k));
    k->fd = -1;
    k->mem = buf;
    k->cap = cap;
}

kvc_status_t kvc_sink_write(kvc_sink_t *k, const void *p, size_t n)
{
    if (n == 0) return KVC_OK;
    if (k->mem) {
        if (n > k->cap - k->pos) return kvc_error(KVC_ERR_NO_SPACE, "output buffer too small");
        memcpy(k->mem + k->pos, p, n);
        k->pos += n;
        return KVC_OK;
    }
    const unsigned char *c = p;
    while (n > 0) {
        size_t chunk = n < (size_t)1 << 30 ? n : (size_t)1 << 30;
        ssize_t w = write(k->fd, c, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            return kvc_error(kvc_status_from_errno(e), "%s: write failed: %s", k->path, strerror(e));
        }
        c += w;
        n -= (size_t)w;
    }
    return KVC_OK;
}

kvc_status_t kvc_sink_finish(kvc_sink_t *k, kvc_status_t st)
{
    if (k->mem || k->fd < 0) return st;
    if (st == KVC_OK && k->tmp && fsync(k->fd) != 0) {
        int e = errno;
        st = kvc_error(kvc_status_from_errno(e), "%s: write failed: %s", k->path, strerror(e));
    }
    if (close(k->fd) != 0 && st == KVC_OK) {
        int e = errno;
        st = kvc_error(kvc_status_from_errno(e), "%s: write failed: %s", k->path, strerror(e));
    }
    k->fd = -1;
    if (!k->tmp) return st;
    if (st == KVC_OK && rename(k->tmp, k->target) != 0) {
        int e = errno;
        st = kvc_error(kvc_status_from_errno(e), "cannot replace %s: %s", k->path, strerror(e));
    }
    if (st != KVC_OK) unlink(k->tmp);
    else {
        /* Make the rename itself durable. */
        char *slash = strrchr(k->target, '/');
        if (slash) *slash = '\0';
        int dfd = open(slash ? (slash == k->target ? "/" : k->target) : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    if (k->slot >= 0) atomic_store(&tmp_slots[k->slot].state, SLOT_FREE);
    free(k->tmp);
    free(k->target);
    k->tmp = k->target = NULL;
    return st;
}

/* ------------------------------------------------------------------ text buffer */

void kvc_sb_put(kvc_strbuf_t *b, const char *s, size_t n)
{
    if (b->failed || n == 0) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) { b->failed = 1; return; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->failed = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void kvc_sb_puts(kvc_strbuf_t *b, const char *s) { kvc_sb_put(b, s, strlen(s)); }
void kvc_sb_putc(kvc_strbuf_t *b, char c) { kvc_sb_put(b, &c, 1); }

void kvc_sb_size(kvc_strbuf_t *b, size_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    kvc_sb_put(b, tmp + i, sizeof(tmp) - i);
}

void kvc_sb_free(kvc_strbuf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}
