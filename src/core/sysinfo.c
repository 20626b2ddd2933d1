/* SPDX-License-Identifier: BSD-3-Clause */
/* Hugetlb pools, THP mode, cgroup limits and per-node free memory, read from sysfs/procfs. */
#include "config.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sysinfo.h"

/* First line of a file without its newline; 0 on success. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static int read_u64(const char *path, uint64_t *v)
{
    char buf[64], *end;
    if (read_line(path, buf, sizeof(buf)) != 0) return -1;
    *v = strtoull(buf, &end, 10);
    return end == buf ? -1 : 0;
}

static void copy_str(char *dst, size_t len, const char *src)
{
    const size_t n = strnlen(src, len - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int by_page_size(const void *a, const void *b)
{
    const uint64_t x = ((const kvc_hugepage_pool_t *)a)->page_size, y = ((const kvc_hugepage_pool_t *)b)->page_size;
    return (x > y) - (x < y);
}

int kvc_sys_hugepage_pools_at(const char *dir, kvc_hugepage_pool_t *out, int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    kvc_hugepage_pool_t pools[16];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 16;) {
        unsigned long long kb;
        char tail;
        if (sscanf(e->d_name, "hugepages-%llukB%c", &kb, &tail) != 1) continue;
        kvc_hugepage_pool_t p = { .page_size = (uint64_t)kb * 1024 };
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s/nr_hugepages", dir, e->d_name);
        if (read_u64(path, &p.total) != 0) continue;
        snprintf(path, sizeof(path), "%s/%s/free_hugepages", dir, e->d_name);
        read_u64(path, &p.free);
        snprintf(path, sizeof(path), "%s/%s/resv_hugepages", dir, e->d_name);
        read_u64(path, &p.reserved);
        snprintf(path, sizeof(path), "%s/%s/surplus_hugepages", dir, e->d_name);
        read_u64(path, &p.surplus);
        pools[n++] = p;
    }
    closedir(d);
    qsort(pools, (size_t)n, sizeof(pools[0]), by_page_size);
    for (int i = 0; out && i < n && i < max; i++) out[i] = pools[i];
    return n;
}

kvc_thp_mode_t kvc_sys_thp_mode_at(const char *enabled_file)
{
    char buf[256];
    if (read_line(enabled_file, buf, sizeof(buf)) != 0) return KVC_THP_UNAVAILABLE;
    if (strstr(buf, "[always]")) return KVC_THP_ALWAYS;
    if (strstr(buf, "[madvise]")) return KVC_THP_MADVISE;
    if (strstr(buf, "[never]")) return KVC_THP_NEVER;
    return KVC_THP_UNAVAILABLE;
}

/* Path of `controller` in a /proc/self/cgroup file ("" for the v2 line); 0 when found. */
static int self_cgroup_path(const char *self_file, const char *controller, char *path, size_t len)
{
    FILE *f = fopen(self_file, "r");
    if (!f) return -1;
    char line[1024];
    int found = -1;
    while (found != 0 && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1;
        int match = !*controller ? !*ctrls : 0;
        if (*controller) {
            char list[256];
            snprintf(list, sizeof(list), "%s", ctrls);
            char *save = NULL;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (!strcmp(t, controller)) match = 1;
        }
        if (match) {
            snprintf(path, len, "%s", c2 + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* The cgroup directory under base for the process's path, or base itself when the path is not
 * visible there (a container whose /sys/fs/cgroup is its own cgroup). */
static void cgroup_dir(const char *base, const char *path, char *dir, size_t len)
{
    snprintf(dir, len, "%s%s", base, path);
    size_t n = strlen(dir);
    while (n > strlen(base) && dir[n - 1] == '/') dir[--n] = '\0';
    if (!is_dir(dir)) snprintf(dir, len, "%s", base);
}

/* Smallest limit in `file` from dir up to base (inclusive). Values from `unlimited_from` up, and
 * the word "max", mean no limit. */
static int64_t smallest_limit(const char *base, const char *dir, const char *file, uint64_t unlimited_from)
{
    char cur[1024];
    snprintf(cur, sizeof(cur), "%s", dir);
    int64_t best = -1;
    for (;;) {
        char path[1200], buf[64];
        snprintf(path, sizeof(path), "%s/%s", cur, file);
        if (read_line(path, buf, sizeof(buf)) == 0 && strcmp(buf, "max") != 0) {
            char *end;
            const uint64_t v = strtoull(buf, &end, 10);
            if (end != buf && v < unlimited_from && (best < 0 || (int64_t)v < best)) best = (int64_t)v;
        }
        if (strlen(cur) <= strlen(base)) break;
        char *slash = strrchr(cur, '/');
        if (!slash) break;
        *slash = '\0';
        if (strlen(cur) < strlen(base)) break;
    }
    return best;
}

/* First of the files found from dir up to base. */
static void first_found(const char *base, const char *dir, const char *const *files, char *out, size_t len)
{
    char cur[1024];
    snprintf(cur, sizeof(cur), "%s", dir);
    out[0] = '\0';
    for (;;) {
        for (const char *const *f = files; *f; f++) {
            char path[1200];
            snprintf(path, sizeof(path), "%s/%s", cur, *f);
            if (read_line(path, out, len) == 0 && out[0]) return;
        }
        if (strlen(cur) <= strlen(base)) break;
        char *slash = strrchr(cur, '/');
        if (!slash) break;
        *slash = '\0';
        if (strlen(cur) < strlen(base)) break;
    }
    out[0] = '\0';
}

int kvc_sys_cgroup_at(const char *root, const char *self_file, kvc_cgroup_info_t *out)
{
    if (!out) return -1;
    memset(out, 0, sizeof(*out));
    out->memory_limit = -1;
    out->memory_usage = -1;
    char path[512], dir[1024], file[1200];
    uint64_t usage;
    snprintf(file, sizeof(file), "%s/cgroup.controllers", root);
    struct stat st;
    if (stat(file, &st) == 0) {
        out->version = 2;
        if (self_cgroup_path(self_file, "", path, sizeof(path)) != 0) snprintf(path, sizeof(path), "/");
        cgroup_dir(root, path, dir, sizeof(dir));
        copy_str(out->memory_path, sizeof(out->memory_path), dir);
        out->memory_limit = smallest_limit(root, dir, "memory.max", UINT64_MAX);
        snprintf(file, sizeof(file), "%s/memory.current", dir);
        if (read_u64(file, &usage) == 0) out->memory_usage = (int64_t)usage;
        static const char *const cpus[] = { "cpuset.cpus.effective", NULL };
        static const char *const mems[] = { "cpuset.mems.effective", NULL };
        first_found(root, dir, cpus, out->cpuset_cpus, sizeof(out->cpuset_cpus));
        first_found(root, dir, mems, out->cpuset_mems, sizeof(out->cpuset_mems));
        return 0;
    }
    char base[1024];
    snprintf(base, sizeof(base), "%s/memory", root);
    if (is_dir(base)) {
        out->version = 1;
        if (self_cgroup_path(self_file, "memory", path, sizeof(path)) != 0) snprintf(path, sizeof(path), "/");
        cgroup_dir(base, path, dir, sizeof(dir));
        copy_str(out->memory_path, sizeof(out->memory_path), dir);
        /* v1 writes "no limit" as LONG_MAX rounded down to a page. */
        out->memory_limit = smallest_limit(base, dir, "memory.limit_in_bytes", (uint64_t)1 << 62);
        snprintf(file, sizeof(file), "%s/memory.usage_in_bytes", dir);
        if (read_u64(file, &usage) == 0) out->memory_usage = (int64_t)usage;
    }
    snprintf(base, sizeof(base), "%s/cpuset", root);
    if (is_dir(base)) {
        out->version = 1;
        if (self_cgroup_path(self_file, "cpuset", path, sizeof(path)) != 0) snprintf(path, sizeof(path), "/");
        cgroup_dir(base, path, dir, sizeof(dir));
        static const char *const cpus[] = { "cpuset.effective_cpus", "cpuset.cpus", NULL };
        static const char *const mems[] = { "cpuset.effective_mems", "cpuset.mems", NULL };
        first_found(base, dir, cpus, out->cpuset_cpus, sizeof(out->cpuset_cpus));
        first_found(base, dir, mems, out->cpuset_mems, sizeof(out->cpuset_mems));
    }
    return 0;
}

/* Smallest quota / period ratio from dir up to base: v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"),
 * v1 cpu.cfs_quota_us (-1 = none) with cpu.cfs_period_us. */
static double smallest_cpu_quota(const char *base, const char *dir, int v2)
{
    char cur[1024];
    snprintf(cur, sizeof(cur), "%s", dir);
    double best = -1;
    for (;;) {
        char path[1200], buf[128];
        long long quota = -1, period = 0;
        if (v2) {
            snprintf(path, sizeof(path), "%s/cpu.max", cur);
            if (read_line(path, buf, sizeof(buf)) == 0 && sscanf(buf, "%lld %lld", &quota, &period) != 2) quota = -1;
        } else {
            snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", cur);
            if (read_line(path, buf, sizeof(buf)) == 0) quota = strtoll(buf, NULL, 10);
            snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", cur);
            if (read_line(path, buf, sizeof(buf)) == 0) period = strtoll(buf, NULL, 10);
        }
        if (quota > 0 && period > 0 && (best < 0 || (double)quota / (double)period < best)) best = (double)quota / (double)period;
        if (strlen(cur) <= strlen(base)) break;
        char *slash = strrchr(cur, '/');
        if (!slash) break;
        *slash = '\0';
        if (strlen(cur) < strlen(base)) break;
    }
    return best;
}

double kvc_sys_cpu_quota_at(const char *root, const char *self_file)
{
    char path[512], dir[1024], file[1200], base[1024];
    struct stat st;
    snprintf(file, sizeof(file), "%s/cgroup.controllers", root);
    if (stat(file, &st) == 0) {
        if (self_cgroup_path(self_file, "", path, sizeof(path)) != 0) snprintf(path, sizeof(path), "/");
        cgroup_dir(root, path, dir, sizeof(dir));
        return smallest_cpu_quota(root, dir, 1);
    }
    static const char *const names[] = { "cpu", "cpu,cpuacct", "cpuacct,cpu" };
    for (int i = 0; i < 3; i++) {
        snprintf(base, sizeof(base), "%s/%s", root, names[i]);
        if (!is_dir(base)) continue;
        if (self_cgroup_path(self_file, "cpu", path, sizeof(path)) != 0) snprintf(path, sizeof(path), "/");
        cgroup_dir(base, path, dir, sizeof(dir));
        return smallest_cpu_quota(base, dir, 0);
    }
    return -1;
}

int64_t kvc_sys_node_free_bytes(unsigned node)
{
    char path[128], line[256];
    snprintf(path, sizeof(path), KVC_SYS_NODE_DIR "/node%u/meminfo", node);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int64_t free_bytes = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned n;
        unsigned long long kb;
        if (sscanf(line, "Node %u MemFree: %llu kB", &n, &kb) == 2) {
            free_bytes = (int64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return free_bytes;
}

int64_t kvc_sys_node_free_hugepages(unsigned node, size_t page_size)
{
    char path[192];
    uint64_t v;
    snprintf(path, sizeof(path), KVC_SYS_NODE_DIR "/node%u/hugepages/hugepages-%zukB/free_hugepages", node,
             page_size / 1024);
    return read_u64(path, &v) == 0 ? (int64_t)v : -1;
}

int64_t kvc_sys_llc_bytes_at(const char *dir)
{
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[512], buf[64];
        snprintf(path, sizeof(path), "%s/index%d/level", dir, i);
        uint64_t level = 0;
        if (read_u64(path, &level) != 0) break;
        snprintf(path, sizeof(path), "%s/index%d/type", dir, i);
        if (read_line(path, buf, sizeof(buf)) != 0 || strcmp(buf, "Instruction") == 0) continue;
        snprintf(path, sizeof(path), "%s/index%d/size", dir, i);
        if ((int)level < best_level || read_line(path, buf, sizeof(buf)) != 0) continue;
        char *unit;
        const long long v = strtoll(buf, &unit, 10);
        if (v <= 0) continue;
        best = (int64_t)v * (*unit == 'K' ? 1024 : *unit == 'M' ? 1024 * 1024 : *unit == 'G' ? 1 << 30 : 1);
        best_level = (int)level;
    }
    return best;
}

void kvc_sys_llc_resolve(int64_t sysfs_bytes, int64_t sysconf_bytes, kvc_llc_info_t *out)
{
    *out = (kvc_llc_info_t){ .sysfs_bytes = sysfs_bytes > 0 ? sysfs_bytes : 0,
                             .cpuid_bytes = sysconf_bytes > 0 ? sysconf_bytes : 0 };
    if (out->sysfs_bytes) { /* the kernel's view; CPUID only when it says less (as before the cap) */
        out->bytes = out->cpuid_bytes && out->cpuid_bytes < out->sysfs_bytes ? out->cpuid_bytes : out->sysfs_bytes;
        out->source = KVC_LLC_SYSFS;
    } else if (out->cpuid_bytes > KVC_LLC_CPUID_CAP) {
        out->bytes = KVC_LLC_CPUID_CAP;
        out->source = KVC_LLC_CPUID_CAPPED;
    } else if (out->cpuid_bytes) {
        out->bytes = out->cpuid_bytes;
        out->source = KVC_LLC_CPUID;
    }
}
