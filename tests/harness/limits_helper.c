/* SPDX-License-Identifier: BSD-3-Clause */
/* Driven by tests/shell/test_faults_limits.sh under resource limits the script sets (prlimit, a private
 * /dev/shm, SIGKILL): one library call per command, its status name on stdout, exit 0 whenever the
 * call returned (whatever its status) so the script can tell a clean error from a dead process.
 *
 *   threads N         context with params.num_threads = N (0: from KVCORE_NUM_THREADS), then a
 *                     RoPE table build split over the whole team: "threads <count> <status>"
 *   alloc KIND BYTES  kvc_mem_alloc, KIND plain or pinned: "<status>"
 *   shm-create NAME BYTES [hold]   shared segment, "hello" written at its start; with hold: print
 *                     "ready", then wait to be killed
 *   shm-reclaim NAME BYTES         the same with reclaim = 1, then freed
 *   shm-attach NAME   "<status> <first bytes>"
 *   shm-empty NAME    an empty segment with the owner lock held, as a creator killed while
 *                     reserving leaves it: print "ready", wait to be killed
 *   config            "sanitizers=yes|no" */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kvcore.h>

static kvc_context_t *context(int threads)
{
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | (threads ? KVC_CONTEXT_PARAM_NUM_THREADS : 0),
                               .backend = "cpu",
                               .num_threads = threads };
    kvc_context_t *ctx = NULL;
    const kvc_status_t st = kvc_context_create(&p, &ctx);
    if (st != KVC_OK) {
        printf("context %s\n", kvc_status_name(st));
        exit(0);
    }
    return ctx;
}

static void wait_to_be_killed(void)
{
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}

static int shm_create(const char *name, size_t bytes, int reclaim, int hold)
{
    kvc_context_t *ctx = context(1);
    kvc_mem_params_t p = { .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_NAME | KVC_MEM_PARAM_RECLAIM,
                           .kind = KVC_MEM_SHARED,
                           .name = name,
                           .reclaim = reclaim };
    void *ptr;
    const kvc_status_t st = kvc_mem_alloc(ctx, bytes, &p, &ptr, NULL);
    if (st == KVC_OK) memcpy(ptr, "hello", 6);
    if (st == KVC_OK && hold) wait_to_be_killed();
    printf("%s\n", kvc_status_name(st));
    if (st != KVC_OK) fprintf(stderr, "%s\n", kvc_last_error());
    if (st == KVC_OK) kvc_mem_free(ctx, ptr);
    kvc_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "config")) {
        printf("sanitizers=%s\n", strstr(kvc_build_config(), "sanitizers=yes") ? "yes" : "no");
        return 0;
    }
    if (!strcmp(cmd, "threads") && argc == 3) {
        kvc_context_t *ctx = context(atoi(argv[2]));
        /* One table row per position, split over the whole team (up to 2^18 threads). */
        kvc_rope_table_t t = { .dtype = KVC_DTYPE_F32, .max_position = (size_t)1 << 18, .rot_dim = 2 };
        t.data = malloc(t.max_position * 2 * sizeof(float));
        if (!t.data) return 3;
        const kvc_status_t st = kvc_rope_cache_build(ctx, NULL, &t, 10000.0);
        printf("threads %d %s\n", kvc_context_num_threads(ctx), st == KVC_OK && ((float *)t.data)[0] != 1.0f ? "WRONG" : kvc_status_name(st));
        free(t.data);
        kvc_context_destroy(ctx);
        return 0;
    }
    if (!strcmp(cmd, "alloc") && argc == 4) {
        kvc_context_t *ctx = context(1);
        kvc_mem_params_t p = { .field_mask = KVC_MEM_PARAM_KIND, .kind = strcmp(argv[2], "pinned") ? KVC_MEM_PLAIN : KVC_MEM_PINNED };
        void *ptr;
        const kvc_status_t st = kvc_mem_alloc(ctx, strtoull(argv[3], NULL, 10), &p, &ptr, NULL);
        printf("%s\n", kvc_status_name(st));
        if (st != KVC_OK) fprintf(stderr, "%s\n", kvc_last_error());
        else kvc_mem_free(ctx, ptr);
        kvc_context_destroy(ctx);
        return 0;
    }
    if (!strcmp(cmd, "shm-create") && (argc == 4 || argc == 5)) return shm_create(argv[2], strtoull(argv[3], NULL, 10), 0, argc == 5);
    if (!strcmp(cmd, "shm-reclaim") && argc == 4) return shm_create(argv[2], strtoull(argv[3], NULL, 10), 1, 0);
    if (!strcmp(cmd, "shm-attach") && argc == 3) {
        kvc_context_t *ctx = context(1);
        void *ptr;
        size_t size;
        const kvc_status_t st = kvc_mem_attach(ctx, argv[2], 0, &ptr, &size, NULL);
        printf("%s %.5s\n", kvc_status_name(st), st == KVC_OK ? (const char *)ptr : "-");
        if (st == KVC_OK) kvc_mem_free(ctx, ptr);
        kvc_context_destroy(ctx);
        return 0;
    }
    if (!strcmp(cmd, "shm-empty") && argc == 3) {
        const int fd = shm_open(argv[2], O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) != 0) return 3;
        wait_to_be_killed();
    }
    fprintf(stderr, "usage: limits_helper threads N | alloc plain|pinned BYTES | shm-create NAME BYTES [hold] | "
                    "shm-reclaim NAME BYTES | shm-attach NAME | shm-empty NAME | config\n");
    return 2;
}
