/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the Criterion suites. */
#ifndef KVC_TEST_UTIL_H
#define KVC_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore.h>

/* RoPE options asking for pair style s. */
#define ROPE_STYLE(s) (&(const kvc_rope_params_t){ .field_mask = KVC_ROPE_PARAM_STYLE, .style = (s) })

/* Path under tests/data (KVC_TEST_DATA, set by `make check`); static buffer. */
const char *kvc_test_data(const char *rel);
/* Build-tree path (KVC_TEST_BUILDDIR); static buffer. */
const char *kvc_test_build(const char *rel);
/* A fresh directory under /tmp holding `file` copied (or linked) as `as`; returns the directory. */
const char *kvc_test_module_dir(const char *module_so, const char *as);
/* A context on the CPU backend (or on $KVC_TEST_BACKEND when set); fails the test if none. */
kvc_context_t *kvc_test_cpu_context(void);
/* kvc_test_cpu_context with its ISA tier capped at `isa` (KVCORE_ISA) while it is made. */
kvc_context_t *kvc_test_isa_context(const char *isa);
/* Whether the machine has tier `isa` (a context asked for it gets it, not a lower one). */
int kvc_test_has_isa(const char *isa);
/* One context per CPU ISA tier this machine has (scalar always; avx2, avx512 when present), so
 * every kernel variant is checked. Returns the count (at most 3). */
int kvc_test_tiers(kvc_context_t *out[3]);
void kvc_test_destroy_tiers(kvc_context_t *c[3], int n);
/* splitmix64: the next value of the state *s. */
uint64_t kvc_test_rng_next(uint64_t *s);
/* n CacheGen CDF rows of B + 1 entries not derived from any data: cdf[0..B-1] random and strictly
 * increasing (cdf[0] may be above 0, some symbols as narrow as 1/65536), garbage in the unread
 * cdf[B]. */
void kvc_test_random_cdf(uint64_t *rng, uint16_t *cdf, size_t n, unsigned B);
/* malloc that fails the test on NULL (n = 0 gives a 1-byte block). */
void *kvc_test_xmalloc(size_t n);
/* The offset of the first byte where a and b differ, or n. */
size_t kvc_test_first_diff(const void *a, const void *b, size_t n);

/* a and b equal over n bytes, else the caller's message (format and arguments) as given and the
 * offset in a line of its own (a Criterion assertion: include criterion/criterion.h). */
#define KVC_TEST_ASSERT_SAME(a, b, n, ...)                                                                 \
    do {                                                                                                   \
        const size_t at_ = kvc_test_first_diff((a), (b), (n));                                             \
        if (at_ != (size_t)(n)) cr_log_error("differ at byte %zu of %zu", at_, (size_t)(n));               \
        cr_assert_eq(at_, (size_t)(n), __VA_ARGS__);                                                       \
    } while (0)

#endif
