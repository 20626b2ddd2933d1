/* SPDX-License-Identifier: BSD-3-Clause */
/* POSIX shared memory: exclusive creation (an existing name is an error, never shared), an owner
 * lock (flock) held by the creator for the allocation's lifetime so that an abandoned segment can be
 * told from a live one, an owner record that proves a segment kvcore's before a reclaim removes it, space reserved up front (a full /dev/shm is KVC_ERR_NO_SPACE
 * now instead of a SIGBUS later), attach by name. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hostmem.h"

kvc_status_t kvc_shm_check_name(const char *name)
{
    if (!name) return kvc_error(KVC_ERR_INVALID_ARG, "shared memory needs a name (params.name)");
    const size_t len = strlen(name);
    if (len < 2 || len > KVC_MEM_SHM_NAME_MAX)
        return kvc_error(KVC_ERR_INVALID_ARG, "shared memory name of %zu characters: want 2 to %d (\"/name\")", len,
                         KVC_MEM_SHM_NAME_MAX);
    if (name[0] != '/')
        return kvc_error(KVC_ERR_INVALID_ARG, "shared memory name '%s' must start with '/'", name);
    for (size_t i = 1; i < len; i++) {
        const unsigned char c = (unsigned char)name[i];
        if (c == '/')
            return kvc_error(KVC_ERR_INVALID_ARG, "shared memory name '%s' has a '/' at position %zu (only the "
                                                  "leading one is allowed)", name, i);
        if (c < 0x20 || c > 0x7e)
            return kvc_error(KVC_ERR_INVALID_ARG, "shared memory name has a non-printable byte 0x%02x at position %zu",
                             c, i);
    }
    if (!strcmp(name, "/.") || !strcmp(name, "/.."))
        return kvc_error(KVC_ERR_INVALID_ARG, "shared memory name '%s' is a directory entry", name);
    return KVC_OK;
}

/* The owner record: a second shared memory object, named from a hash of the segment's name, that
 * the creator writes once it holds the owner lock: "kvcore-shm-owner 1 DEV INO PID NAME". It is
 * what proves a segment kvcore's (the segment's bytes are all the caller's): reclaim removes only a
 * segment whose device and inode the record names. The creator removes it with the segment. */
static void record_name(const char *name, char out[40])
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    snprintf(out, 40, "/.kvcore-owner-%016llx", (unsigned long long)h);
}

static void record_write(const char *name, int seg_fd)
{
    char rec[40], text[KVC_MEM_SHM_NAME_MAX + 96];
    struct stat st;
    record_name(name, rec);
    if (fstat(seg_fd, &st) != 0) return;
    const int n = snprintf(text, sizeof(text), "kvcore-shm-owner 1 %llu %llu %ld %s\n", (unsigned long long)st.st_dev,
                           (unsigned long long)st.st_ino, (long)getpid(), name);
    const int fd = shm_open(rec, O_CREAT | O_TRUNC | O_RDWR, 0600);
    /* Without a record the segment still works; only a later reclaim cannot prove it ours. */
    if (fd < 0 || write(fd, text, (size_t)n) != n)
        KVC_INFO("shared memory '%s': no owner record (%s): it cannot be reclaimed if its creator dies", name,
                 fd < 0 ? strerror(errno) : "short write");
    if (fd >= 0) close(fd);
}

/* The creator pid the record gives for the segment open at seg_fd, or 0 when there is no record of
 * this very file (another program's segment, or one that replaced a dead kvcore creator's). */
static long record_owner(const char *name, int seg_fd)
{
    char rec[40], text[KVC_MEM_SHM_NAME_MAX + 96], rname[KVC_MEM_SHM_NAME_MAX + 2];
    struct stat st;
    record_name(name, rec);
    const int fd = shm_open(rec, O_RDONLY, 0);
    if (fd < 0) return 0;
    const ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    unsigned long long dev, ino;
    long pid;
    if (n <= 0 || fstat(seg_fd, &st) != 0) return 0;
    text[n] = '\0';
    char fmt[48];
    snprintf(fmt, sizeof(fmt), "kvcore-shm-owner 1 %%llu %%llu %%ld %%%ds", KVC_MEM_SHM_NAME_MAX + 1);
    if (sscanf(text, fmt, &dev, &ino, &pid, rname) != 4 || strcmp(rname, name) || dev != (unsigned long long)st.st_dev ||
        ino != (unsigned long long)st.st_ino || pid <= 0)
        return 0;
    return pid;
}

void kvc_shm_record_remove(const char *name)
{
    char rec[40];
    record_name(name, rec);
    shm_unlink(rec);
}

/* An existing segment `name`: who holds it, as an error, or reclaimed (-1: gone or just removed,
 * create again). Only a segment proven kvcore's (the owner record names this very file) whose owner
 * lock nobody holds is abandoned; reclaim unlinks it and its record. */
static kvc_status_t existing(const char *name, int reclaim, int *again)
{
    *again = 0;
    const int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) {
        if (errno == ENOENT) return *again = 1, KVC_OK;
        return kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists and is not readable by this user (%s): "
                                         "another user's, never shared or replaced", name, strerror(errno));
    }
    const long pid = record_owner(name, fd);
    kvc_status_t st;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            st = kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists; its creator (pid %ld) has exited but a "
                                           "process it started still holds the segment's owner lock; kvcore never "
                                           "shares a name", name, pid);
        else if (pid > 0)
            st = kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists and its creator (pid %ld) is alive; "
                                           "kvcore never shares a name", name, pid);
        else
            st = kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists and is in use (its owner lock is held); "
                                           "kvcore never shares a name", name);
    } else if (!pid) {
        st = kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists and is not a kvcore segment (no kvcore owner "
                                       "record names it): left untouched, never reclaimed; remove /dev/shm%s if you "
                                       "know it is not in use", name, name);
    } else if (reclaim) {
        shm_unlink(name);
        kvc_shm_record_remove(name);
        *again = 1;
        st = KVC_OK;
    } else {
        st = kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists, abandoned: its creator (pid %ld) died "
                                       "without freeing it; set KVC_MEM_PARAM_RECLAIM to replace it", name, pid);
    }
    close(fd); /* drops the lock */
    return st;
}

kvc_status_t kvc_shm_create_map(const char *name, size_t map_len, int reclaim, int *fd, void **addr)
{
    for (int attempt = 0;; attempt++) {
        *fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (*fd < 0) {
            const int err = errno;
            if (err != EEXIST)
                return kvc_error(kvc_status_from_errno(err), "shm_open('%s') failed: %s", name, strerror(err));
            int again;
            if (attempt >= 3)
                return kvc_error(KVC_ERR_EXISTS, "shared memory '%s' is being created and reclaimed by other processes",
                                 name);
            const kvc_status_t st = existing(name, reclaim, &again);
            if (again) continue; /* gone, or just reclaimed: create again */
            return st;
        }
        /* The owner lock, held until the allocation is freed or the process dies. A reclaimer that
         * found the new segment before the lock was taken has unlinked it (no links left): create
         * again, so the name ends with exactly one owner. */
        struct stat st;
        int r;
        do r = flock(*fd, LOCK_EX);
        while (r != 0 && errno == EINTR);
        if (r == 0 && fstat(*fd, &st) == 0 && st.st_nlink > 0) break;
        close(*fd);
        if (attempt >= 3)
            return kvc_error(KVC_ERR_EXISTS, "shared memory '%s' is being created and reclaimed by other processes", name);
    }
    record_write(name, *fd);
    /* The segment is still empty: mapping it first lets the caller bind the range (the binding
     * becomes the segment's shared policy, which placement of the reserved pages follows). */
    *addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*addr == MAP_FAILED) {
        const int err = errno;
        shm_unlink(name);
        kvc_shm_record_remove(name);
        close(*fd);
        return kvc_error(kvc_status_from_errno(err), "mmap of shared memory '%s' (%zu bytes) failed: %s", name,
                         map_len, strerror(err));
    }
    return KVC_OK;
}

kvc_status_t kvc_shm_reserve(const char *name, int fd, size_t size)
{
    /* posix_fallocate allocates every page before the file size grows, so an attacher sees size 0
     * (KVC_ERR_STATE) until the whole segment is backed. */
    int err;
    do err = posix_fallocate(fd, 0, (off_t)size);
    while (err == EINTR);
    struct statvfs vfs;
    const unsigned long long avail = fstatvfs(fd, &vfs) == 0 ? (unsigned long long)vfs.f_bavail * vfs.f_frsize : 0ull;
    if (err == 0) return KVC_OK;
    if (err == ENOSPC || err == EFBIG)
        return kvc_error(KVC_ERR_NO_SPACE,
                         "shared memory '%s': %zu bytes requested, the shared memory filesystem has %llu bytes "
                         "free (grow /dev/shm, e.g. docker --shm-size)", name, size, avail);
    return kvc_error(kvc_status_from_errno(err), "reserving %zu bytes of shared memory '%s' failed: %s", size, name,
                     strerror(err));
}

void kvc_shm_abort(const char *name, int fd, void *addr, size_t map_len)
{
    munmap(addr, map_len);
    shm_unlink(name); /* before the lock goes: nobody can take the name for abandoned meanwhile */
    kvc_shm_record_remove(name);
    if (fd >= 0) close(fd);
}

kvc_status_t kvc_shm_attach_map(const char *name, void **addr, size_t *size, size_t *map_len)
{
    const int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        const int err = errno;
        if (err == ENOENT) return kvc_error(KVC_ERR_NOT_FOUND, "no shared memory named '%s'", name);
        return kvc_error(kvc_status_from_errno(err), "shm_open('%s') failed: %s", name, strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int err = errno;
        close(fd);
        return kvc_error(KVC_ERR_IO, "fstat of shared memory '%s' failed: %s", name, strerror(err));
    }
    if (st.st_size <= 0) {
        /* Still empty: being reserved while the creator holds its lock, abandoned otherwise. */
        const int live = flock(fd, LOCK_SH | LOCK_NB) != 0;
        close(fd);
        if (live)
            return kvc_error(KVC_ERR_STATE, "shared memory '%s' is still being created (its creator is reserving the "
                                            "space): retry", name);
        return kvc_error(KVC_ERR_NOT_FOUND, "shared memory '%s' is an empty segment nobody owns: its creator died "
                                            "while creating it, or it is not a kvcore segment (its creator can "
                                            "replace it with KVC_MEM_PARAM_RECLAIM)", name);
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *size = (size_t)st.st_size;
    *map_len = (*size + page - 1) & ~(page - 1);
    *addr = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    close(fd);
    if (*addr == MAP_FAILED)
        return kvc_error(kvc_status_from_errno(err), "mmap of shared memory '%s' (%zu bytes) failed: %s", name,
                         *size, strerror(err));
    return KVC_OK;
}
