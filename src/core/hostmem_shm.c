/* SPDX-License-Identifier: BSD-3-Clause */
/* POSIX shared memory: exclusive creation (an existing name is an error, never shared), an owner
 * lock (flock) held by the creator for the allocation's lifetime so that an abandoned segment can be
 * told from a live one and reclaimed, space reserved up front (a full /dev/shm is KVC_ERR_NO_SPACE
 * now instead of a SIGBUS later), attach by name. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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

/* Whether the segment `name` has a live creator: its creator holds an exclusive flock on the
 * segment for the allocation's lifetime, and the kernel drops it when the process dies. Returns 1
 * live, 0 abandoned (unlinked first when `reclaim`), -1 gone. */
static int owner_state(const char *name, int reclaim)
{
    const int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) return errno == ENOENT ? -1 : 1; /* another user's segment: not ours to judge */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return 1;
    }
    if (reclaim) shm_unlink(name);
    close(fd); /* drops the lock */
    return 0;
}

kvc_status_t kvc_shm_create_map(const char *name, size_t map_len, int reclaim, int *fd, void **addr)
{
    for (int attempt = 0;; attempt++) {
        *fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (*fd < 0) {
            const int err = errno;
            if (err != EEXIST)
                return kvc_error(kvc_status_from_errno(err), "shm_open('%s') failed: %s", name, strerror(err));
            const int owner = attempt < 3 ? owner_state(name, reclaim) : 1;
            if (owner < 0 || (owner == 0 && reclaim)) continue; /* gone, or just reclaimed: create again */
            if (owner)
                return kvc_error(KVC_ERR_EXISTS, "shared memory '%s' already exists and its creator is alive; kvcore "
                                                 "never shares a name", name);
            return kvc_error(KVC_ERR_EXISTS,
                             "shared memory '%s' already exists, abandoned: its creator died without freeing it; "
                             "set KVC_MEM_PARAM_RECLAIM to replace it (or remove /dev/shm%s)", name, name);
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
    /* The segment is still empty: mapping it first lets the caller bind the range (the binding
     * becomes the segment's shared policy, which placement of the reserved pages follows). */
    *addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*addr == MAP_FAILED) {
        const int err = errno;
        shm_unlink(name);
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
