/* POSIX shared memory: exclusive creation (a stale segment is an error, never reused), space
 * reserved up front (a full /dev/shm is KVC_ERR_NO_SPACE now instead of a SIGBUS later), attach
 * by name. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
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

kvc_status_t kvc_shm_create_map(const char *name, size_t map_len, int *fd, void **addr)
{
    *fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (*fd < 0) {
        const int err = errno;
        if (err == EEXIST)
            return kvc_error(KVC_ERR_EXISTS,
                             "shared memory '%s' already exists; kvcore never reuses a segment (it may be stale, "
                             "left by a crashed process: remove /dev/shm%s if so)", name, name);
        return kvc_error(kvc_status_from_errno(err), "shm_open('%s') failed: %s", name, strerror(err));
    }
    /* The segment is still empty: mapping it first lets the caller bind the range (the binding
     * becomes the segment's shared policy, which placement of the reserved pages follows). */
    *addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*addr == MAP_FAILED) {
        const int err = errno;
        close(*fd);
        shm_unlink(name);
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
    close(fd);
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
    if (fd >= 0) close(fd);
    shm_unlink(name);
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
        close(fd);
        return kvc_error(KVC_ERR_STATE, "shared memory '%s' has size 0: its creator has not finished reserving it "
                                        "(retry) or it is not a kvcore segment", name);
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
