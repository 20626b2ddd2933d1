/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the fuzz targets (tests/fuzz/fuzz_*.c). Each target defines LLVMFuzzerTestOneInput and
 * is built twice: with clang -fsanitize=fuzzer for `make fuzz`, and with the normal compiler and
 * tests/fuzz/replay.c for `make check`, which replays the committed corpus. Targets use only the
 * public API, so the replay build links the real libkvcore. */
#ifndef KVC_FUZZ_H
#define KVC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Source tree (for the test data), set by the Makefile. */
#ifndef KVC_FUZZ_SRCDIR
#define KVC_FUZZ_SRCDIR "."
#endif

/* A broken invariant: report it and abort, so that libFuzzer and the replay driver record a crash. */
#define FUZZ_CHECK(cond, ...)                                                                            \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fprintf(stderr, " (last error: %s)\n", kvc_last_error());                                    \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

/* Consumes the input front to back; reads past the end give zeros (as libFuzzer's data provider). */
typedef struct fuzz_input {
    const uint8_t *p;
    size_t n;
} fuzz_input_t;

static inline uint8_t fuzz_u8(fuzz_input_t *in)
{
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static inline uint64_t fuzz_uint(fuzz_input_t *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)fuzz_u8(in) << (8 * i);
    return v;
}

/* Up to n bytes from the input into a new exact-size buffer (so ASan sees any read past it);
 * *got receives how many were available. NULL when n is 0. */
static inline uint8_t *fuzz_take(fuzz_input_t *in, size_t n, size_t *got)
{
    const size_t k = n < in->n ? n : in->n;
    uint8_t *b = n ? calloc(n, 1) : NULL;
    if (b && k) memcpy(b, in->p, k);
    in->p += k;
    in->n -= k;
    if (got) *got = k;
    return b;
}

/* A CPU context shared by the calls of one process (1 thread: deterministic, and every input's cost
 * is the same). isa_cap is a KVCORE_ISA value ("scalar", "best"). The topology comes from a small
 * recorded XML: probing the real PCI bus (libpciaccess reading pci.ids) takes seconds under ASan. */
static inline kvc_context_t *fuzz_cpu_context_threads(const char *isa_cap, int threads)
{
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("HWLOC_XMLFILE", KVC_FUZZ_SRCDIR "/tests/data/topologies/16amd64-4distances.xml", 0);
    const char *old = getenv("KVCORE_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("KVCORE_ISA", isa_cap, 1);
    kvc_context_params_t p = { .field_mask = KVC_CONTEXT_PARAM_BACKEND | KVC_CONTEXT_PARAM_NUM_THREADS,
                               .backend = "cpu",
                               .num_threads = threads };
    kvc_context_t *ctx = NULL;
    const kvc_status_t st = kvc_context_create(&p, &ctx);
    if (saved) setenv("KVCORE_ISA", saved, 1);
    else unsetenv("KVCORE_ISA");
    free(saved);
    if (st != KVC_OK) {
        fprintf(stderr, "fuzz: cannot create a CPU context: %s\n", kvc_last_error());
        abort();
    }
    return ctx;
}

static inline kvc_context_t *fuzz_cpu_context(const char *isa_cap) { return fuzz_cpu_context_threads(isa_cap, 1); }

/* Sum of every byte of a tensor's data: makes ASan check that a view lies inside its buffer. */
static inline void fuzz_touch(const kvc_tensor_t *t)
{
    unsigned sum = 0;
    for (size_t i = 0; i < t->nbytes; i++) sum += ((const uint8_t *)t->data)[i];
    volatile unsigned sink = sum; /* keeps the reads */
    (void)sink;
}

/* kvc_kvcache_load_mem with hints taken from `hint` (npy and safetensors targets). On success the
 * tensor must be [2, NL, T, D] with D = NH * HS whenever both are known. */
static inline void fuzz_kvcache_load(const uint8_t *buf, size_t len, unsigned hint)
{
    kvc_kvcache_io_params_t p = { .field_mask = hint & 15u,
                                  .format = (kvc_file_format_t)((hint >> 4) % 4),
                                  .num_heads = (hint >> 6) % 5,
                                  .head_size = (hint >> 9) % 9 };
    kvc_tensor_t kv;
    kvc_kvcache_dims_t dims;
    const kvc_status_t st = kvc_kvcache_load_mem(buf, len, (hint & 16) ? &p : NULL, &kv, &dims);
    if (st != KVC_OK) return;
    FUZZ_CHECK(kv.ndim == 4 && kv.shape[0] == 2 && kv.shape[1] == dims.num_layers &&
                   kv.shape[2] == dims.num_tokens && kv.shape[3] == dims.hidden,
               "loaded KV tensor does not match its dims");
    size_t nbytes;
    FUZZ_CHECK(kvc_tensor_nbytes(kv.dtype, kv.ndim, kv.shape, &nbytes) == KVC_OK && nbytes == kv.nbytes,
               "loaded KV tensor of %zu bytes for its shape", kv.nbytes);
    size_t d;
    if (dims.num_heads && dims.head_size)
        FUZZ_CHECK(!__builtin_mul_overflow(dims.num_heads, dims.head_size, &d) && d == dims.hidden,
                   "num_heads %zu x head_size %zu is not hidden %zu", dims.num_heads, dims.head_size, dims.hidden);
    fuzz_touch(&kv);
    kvc_tensor_free(&kv);
}

#endif
