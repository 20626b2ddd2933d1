/* Bytes source / sink and text buffer the file formats (npy.c, safetensors.c, kvcache.c) are built on. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_internal.h"

/* ------------------------------------------------------------------ byte source */

kvc_status_t kvc_src_open_file(kvc_src_t *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    if (!path) return kvc_error(KVC_ERR_INVALID_ARG, "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
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
        return kvc_error(KVC_ERR_INVALID_ARG, "%s is not a regular file", path);
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

kvc_status_t kvc_sink_open_file(kvc_sink_t *k, const char *path)
{
    memset(k, 0, sizeof(*k));
    k->path = path;
    /* Only a file this call creates may be removed on failure (never an existing device or file). */
    k->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (k->fd >= 0) {
        k->created = 1;
        return KVC_OK;
    }
    if (errno == EEXIST) k->fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (k->fd < 0) {
        int e = errno;
        return kvc_error(kvc_status_from_errno(e), "cannot create %s: %s", path, strerror(e));
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
    if (close(k->fd) != 0 && st == KVC_OK) {
        int e = errno;
        st = kvc_error(kvc_status_from_errno(e), "%s: close failed: %s", k->path, strerror(e));
    }
    k->fd = -1;
    if (st != KVC_OK && k->created) unlink(k->path);
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
