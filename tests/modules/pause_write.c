/* SPDX-License-Identifier: BSD-3-Clause */
/* LD_PRELOAD shim for tests/shell/test_faults.sh: the first write() of at least 4 KiB to a regular file
 * (the bulk of an output file; messages are shorter) creates the file named by KVC_FAULT_MARKER and
 * then waits in pause() for the signal the test sends. This holds a write half done, so that
 * SIGKILL / SIGINT land exactly there rather than at a random point. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

__attribute__((visibility("default"))) ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    static int fired;
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    struct stat sb;
    const char *marker = getenv("KVC_FAULT_MARKER");
    if (!fired && marker && n >= 4096 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        fired = 1;
        ssize_t done = real(fd, buf, n / 2); /* half of it on disk */
        int m = open(marker, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (m >= 0) close(m);
        for (;;) pause();
        return done;
    }
    return real(fd, buf, n);
}
