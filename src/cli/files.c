/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcore.h>

#define NPY_MAGIC "\x93NUMPY"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

cli_format_t cli_sniff(const uint8_t *head, size_t n)
{
    kvc_container_info_t ci;
    kvc_container_probe(head, n, &ci); /* the kind: its status is the decoder's to report */
    if (ci.kind != KVC_CONTAINER_NONE) return CLI_FMT_KVC;
    if (n >= 6 && !memcmp(head, NPY_MAGIC, 6)) return CLI_FMT_NPY;
    /* safetensors: an 8-byte header length, then the JSON header's '{' */
    if (n >= 9 && le64(head) >= 2 && le64(head) <= KVC_SAFETENSORS_MAX_HEADER && head[8] == '{')
        return CLI_FMT_SAFETENSORS;
    return CLI_FMT_UNKNOWN;
}

const char *cli_format_name(cli_format_t f)
{
    return f == CLI_FMT_NPY ? "an .npy file" : f == CLI_FMT_SAFETENSORS ? "a .safetensors file"
         : f == CLI_FMT_KVC ? "a kvcore container" : "unknown";
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a device";
}

/* Read up to n bytes (fewer only at end of input). -1 on error (errno set). */
static ssize_t read_full(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Append exactly n more bytes of fd to in->data (fewer at end of input); -1 on error. */
static ssize_t append(cli_input_t *in, int fd, size_t n, size_t *cap)
{
    if (n > SIZE_MAX - in->len) {
        errno = ENOMEM;
        return -1;
    }
    if (in->len + n > *cap) {
        size_t want = *cap ? *cap : 1 << 16;
        while (want < in->len + n) want = want > SIZE_MAX / 2 ? in->len + n : want * 2;
        uint8_t *p = realloc(in->data, want);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        in->data = p;
        *cap = want;
    }
    ssize_t r = read_full(fd, in->data + in->len, n);
    if (r > 0) in->len += (size_t)r;
    return r;
}

/* Containers from a stream, back to back (a .kvcs is a file of them): each read as far as its
 * header (kvc_container_probe) declares, so /dev/zero or an endless pipe of junk is not read
 * without bound; after a complete container, the next one if the bytes that follow start one.
 * Bytes that do not (trailing junk, up to one header's worth) and a container cut short stop the
 * read and stay in the buffer, for the decoder to reject exactly as it rejects the same bytes in a
 * regular file. */
static ssize_t read_container_stream(cli_input_t *in, int fd)
{
    size_t cap = 0;
    for (;;) {
        const size_t start = in->len;
        ssize_t r = append(in, fd, KVC_CONTAINER_HEADER_BYTES, &cap);
        kvc_container_info_t ci;
        if (r < 0 || kvc_container_probe(in->data + start, in->len - start, &ci) != KVC_OK) return r < 0 ? r : 0;
        /* the rest in steps, so memory grows with the bytes that come, not with what a header claims */
        while (in->len - start < ci.container_bytes) {
            const uint64_t left = ci.container_bytes - (in->len - start);
            const size_t step = left < (1u << 20) ? (size_t)left : 1u << 20;
            if ((r = append(in, fd, step, &cap)) < 0 || (size_t)r < step) return r < 0 ? r : 0;
        }
    }
}

int cli_kvc_is_stream(const uint8_t *data, size_t len)
{
    kvc_container_info_t ci;
    return len >= KVC_CONTAINER_HEADER_BYTES && kvc_container_probe(data, KVC_CONTAINER_HEADER_BYTES, &ci) == KVC_OK &&
           ci.container_bytes < len;
}

/* A tensor file from a stream: its type from the first bytes, then the rest to its end. */
static ssize_t read_tensor_stream(cli_input_t *in, int fd)
{
    size_t cap = 0;
    ssize_t r = append(in, fd, 16, &cap);
    if (r < 0 || cli_sniff(in->data, in->len) == CLI_FMT_UNKNOWN) return r;
    while ((r = append(in, fd, 1 << 20, &cap)) > 0) {}
    return r;
}

static int type_error(const char *cmd, const cli_input_t *in, int want_kvc)
{
    if (in->len == 0) fprintf(stderr, "kvcore %s: %s is empty\n", cmd, in->label);
    else if (want_kvc)
        fprintf(stderr, "kvcore %s: %s is not a kvcore container (.kvc)%s\n", cmd, in->label,
                in->fmt == CLI_FMT_NPY || in->fmt == CLI_FMT_SAFETENSORS ? "; it is a KV cache file: use kvcore encode" : "");
    else
        fprintf(stderr, "kvcore %s: %s is not an .npy or .safetensors file%s\n", cmd, in->label,
                in->fmt == CLI_FMT_KVC ? "; it is a kvcore container: use kvcore decode" : "");
    return CLI_EXIT_ERROR;
}

/* A FIFO opened without blocking reads end-of-file until a writer opens it, so a producer that is
 * still starting up would be taken for none. Give it CLI_FIFO_WAIT_MS: on Linux, poll() on such a
 * descriptor reports neither data nor hang-up until a writer has connected. Where poll() says
 * hang-up at once, the read that follows finds no data and the FIFO is refused as before. */
static void wait_for_fifo_writer(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, CLI_FIFO_WAIT_MS) < 0 && errno == EINTR) {
    }
}

int cli_input_open(const char *cmd, const char *path, int want_kvc, cli_input_t *in)
{
    memset(in, 0, sizeof(*in));
    in->path = path;
    in->label = path;
    int fd = 0;
    struct stat sb;
    if (!strcmp(path, "-")) {
        in->label = "standard input";
        if (isatty(STDIN_FILENO)) {
            fprintf(stderr, "kvcore %s: standard input is a terminal; give a file or a pipe\n", cmd);
            return CLI_EXIT_USAGE;
        }
    } else {
        /* O_NONBLOCK: opening a FIFO that has no writer must not block. */
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "kvcore %s: cannot open %s: %s\n", cmd, path, errno == EISDIR ? "it is a directory" : strerror(errno));
            return CLI_EXIT_ERROR;
        }
    }
    int rc = CLI_EXIT_ERROR;
    if (fstat(fd, &sb) != 0) {
        fprintf(stderr, "kvcore %s: cannot read %s: %s\n", cmd, in->label, strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "kvcore %s: %s is a directory\n", cmd, in->label);
        goto done;
    }
    ssize_t r;
    if (S_ISREG(sb.st_mode) && fd != 0) {
        uint8_t head[16];
        r = read_full(fd, head, sizeof(head));
        if (r >= 0) in->fmt = cli_sniff(head, (size_t)r);
        in->len = r > 0 ? (size_t)r : 0;
    } else {
        if (fd != 0 && S_ISFIFO(sb.st_mode)) {
            wait_for_fifo_writer(fd);
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        }
        in->stream = 1;
        r = want_kvc ? read_container_stream(in, fd) : read_tensor_stream(in, fd);
        in->fmt = cli_sniff(in->data, in->len);
        if (r >= 0 && in->len == 0 && S_ISFIFO(sb.st_mode) && fd != 0) {
            fprintf(stderr, "kvcore %s: %s is %s with no data (no process wrote to it within %d s)\n", cmd, in->label,
                    kind_of(sb.st_mode), CLI_FIFO_WAIT_MS / 1000);
            goto done;
        }
    }
    if (r < 0) {
        fprintf(stderr, "kvcore %s: cannot read %s: %s\n", cmd, in->label, strerror(errno));
        goto done;
    }
    if (want_kvc ? in->fmt != CLI_FMT_KVC : in->fmt != CLI_FMT_NPY && in->fmt != CLI_FMT_SAFETENSORS) {
        rc = type_error(cmd, in, want_kvc);
        goto done;
    }
    rc = 0;
done:
    if (fd != 0) close(fd);
    if (rc) cli_input_close(in);
    return rc;
}

int cli_input_load(const char *cmd, cli_input_t *in)
{
    if (in->stream) return 0;
    int fd = open(in->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fprintf(stderr, "kvcore %s: cannot read %s: %s\n", cmd, in->label, strerror(errno));
        if (fd >= 0) close(fd);
        return CLI_EXIT_ERROR;
    }
    size_t cap = 0;
    in->len = 0;
    ssize_t r = append(in, fd, (size_t)sb.st_size, &cap);
    close(fd);
    if (r < 0) {
        fprintf(stderr, "kvcore %s: cannot read %s: %s\n", cmd, in->label, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    in->stream = 1;
    return 0;
}

void cli_input_close(cli_input_t *in)
{
    free(in->data);
    in->data = NULL;
    in->len = 0;
    in->stream = 0;
}

int cli_is_dir(const char *path)
{
    struct stat sb;
    const size_t n = strlen(path);
    return (n > 0 && path[n - 1] == '/') || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
}

char *cli_output_in_dir(const char *dir, const char *input, const char *ext)
{
    const char *base = strrchr(input, '/') ? strrchr(input, '/') + 1 : input;
    const char *dot = strrchr(base, '.');
    const int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    const size_t dn = strlen(dir), n = dn + (size_t)stem + strlen(ext) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%.*s%s", dir, dn && dir[dn - 1] == '/' ? "" : "/", stem, base, ext);
    return p;
}

char *cli_output_beside(const char *input, const char *ext)
{
    const char *base = strrchr(input, '/') ? strrchr(input, '/') + 1 : input;
    const char *dot = strrchr(base, '.');
    const size_t keep = dot && dot != base ? (size_t)(dot - input) : strlen(input), n = keep + strlen(ext) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%.*s%s", (int)keep, input, ext);
    return p;
}

int cli_check_output(const char *cmd, const char *out, int force, const char *const *inputs, int ninputs)
{
    if (!strcmp(out, "-")) {
        if (isatty(STDOUT_FILENO) && !force) {
            fprintf(stderr, "kvcore %s: refusing to write binary data to a terminal (use -f to force)\n", cmd);
            return CLI_EXIT_ERROR;
        }
        return 0;
    }
    struct stat so, si;
    if (stat(out, &so) != 0) return 0; /* does not exist yet (a bad directory is reported when written) */
    if (S_ISDIR(so.st_mode)) {
        fprintf(stderr, "kvcore %s: %s is a directory\n", cmd, out);
        return CLI_EXIT_ERROR;
    }
    for (int i = 0; i < ninputs; i++)
        if (strcmp(inputs[i], "-") && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            fprintf(stderr, "kvcore %s: %s is also an input; refusing to overwrite it\n", cmd, out);
            return CLI_EXIT_ERROR;
        }
    if (S_ISREG(so.st_mode) && !force) {
        fprintf(stderr, "kvcore %s: %s already exists (use -f to overwrite)\n", cmd, out);
        return CLI_EXIT_ERROR;
    }
    return 0;
}

/* ------------------------------------------------------------------ writes and signals */

static char tmp_path[PATH_MAX + 64];
static volatile sig_atomic_t tmp_armed;

static void on_signal(int sig)
{
    if (tmp_armed) unlink(tmp_path);
    kvc_io_remove_temporaries();
    raise(sig); /* SA_RESETHAND: the default action (death by the signal) once this handler returns */
}

void cli_install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction old;
        /* A signal ignored by whoever started us (nohup, a background job) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

int cli_write_stdout(const char *cmd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = write(STDOUT_FILENO, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            fprintf(stderr, "kvcore %s: cannot write to standard output: %s\n", cmd, strerror(errno));
            return CLI_EXIT_ERROR;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int cli_out_open(const char *cmd, const char *path, cli_out_t *o)
{
    memset(o, 0, sizeof(*o));
    o->cmd = cmd;
    o->path = path;
    o->fd = -1;
    if (!strcmp(path, "-")) {
        o->fd = STDOUT_FILENO;
        o->direct = 1;
        return 0;
    }
    struct stat sb, lsb;
    const int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) { /* a device or FIFO (/dev/null): write into it */
        o->fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (o->fd < 0) {
            fprintf(stderr, "kvcore %s: cannot write %s: %s\n", cmd, path, errno == ENXIO ? "no process is reading it" : strerror(errno));
            return CLI_EXIT_ERROR;
        }
        fcntl(o->fd, F_SETFL, fcntl(o->fd, F_GETFL) & ~O_NONBLOCK);
        o->direct = 1;
        return 0;
    }
    if (exists && lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        if (!realpath(path, o->target)) {
            fprintf(stderr, "kvcore %s: cannot resolve %s: %s\n", cmd, path, strerror(errno));
            return CLI_EXIT_ERROR;
        }
    } else if (snprintf(o->target, sizeof(o->target), "%s", path) >= (int)sizeof(o->target)) {
        fprintf(stderr, "kvcore %s: %s: name too long\n", cmd, path);
        return CLI_EXIT_ERROR;
    }
    /* Signals are held while the temporary is created and registered for the handler. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    int fd = -1;
    for (unsigned n = 0; fd < 0 && n < 100; n++) {
        snprintf(tmp_path, sizeof(tmp_path), "%s.tmp.%ld.c%u", o->target, (long)getpid(), n);
        fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd >= 0) tmp_armed = 1;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (fd < 0) {
        fprintf(stderr, "kvcore %s: cannot create %s: %s\n", cmd, path, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    if (exists) fchmod(fd, sb.st_mode & 07777);
    o->fd = fd;
    return 0;
}

int cli_out_write(cli_out_t *o, const void *buf, size_t len)
{
    if (o->err) return CLI_EXIT_ERROR;
    if (write_all(o->fd, buf, len) != 0) {
        o->err = errno ? errno : EIO;
        return CLI_EXIT_ERROR;
    }
    return 0;
}

int cli_out_finish(cli_out_t *o, int failed)
{
    int e = o->err, bad = e != 0;
    if (o->fd == STDOUT_FILENO) {
        if (bad) fprintf(stderr, "kvcore %s: cannot write to standard output: %s\n", o->cmd, strerror(e));
        return bad || failed ? CLI_EXIT_ERROR : 0;
    }
    if (!bad && !failed && !o->direct && fsync(o->fd) != 0) bad = 1, e = errno;
    if (close(o->fd) != 0 && !bad) bad = 1, e = errno;
    if (!o->direct) {
        if (!bad && !failed && rename(tmp_path, o->target) != 0) bad = 1, e = errno;
        if (bad || failed) unlink(tmp_path);
        tmp_armed = 0;
    }
    if (bad) fprintf(stderr, "kvcore %s: cannot write %s: %s\n", o->cmd, o->path, strerror(e));
    return bad || failed ? CLI_EXIT_ERROR : 0;
}

int cli_write_file(const char *cmd, const char *path, const void *buf, size_t len)
{
    if (!strcmp(path, "-")) return cli_write_stdout(cmd, buf, len);
    cli_out_t o;
    int rc = cli_out_open(cmd, path, &o);
    if (rc) return rc;
    cli_out_write(&o, buf, len);
    return cli_out_finish(&o, 0);
}
