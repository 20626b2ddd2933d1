/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for the part of Criterion the thread-safety suites use (tests/unit/test_recorder.c,
 * tests/unit/test_context.c), so that they run under ThreadSanitizer: Criterion's own runner cannot
 * start under TSan (Snaipe/Criterion#274). Each Test() registers itself; tests/tsan/runner.c runs
 * every test in a forked child (Criterion's isolation: a test may setenv or crash) and prints TAP.
 * Assertion failure: exit 1; cr_skip_test: exit 77. Test options (.timeout, ...) are ignored. */
#ifndef KVC_TSAN_CRITERION_SHIM_H
#define KVC_TSAN_CRITERION_SHIM_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An assertion without a message expands to kvc_shim_msg(""). */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

typedef struct kvc_shim_test {
    const char *suite, *name;
    void (*fn)(void);
} kvc_shim_test_t;

void kvc_shim_register(const char *suite, const char *name, void (*fn)(void));
void kvc_shim_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define Test(suite, name, ...)                                                              \
    static void suite##_##name(void);                                                       \
    __attribute__((constructor)) static void suite##_##name##_register(void)                \
    {                                                                                       \
        kvc_shim_register(#suite, #name, suite##_##name);                                   \
    }                                                                                       \
    static void suite##_##name(void)

#define cr_assert(cond, ...)                                                                \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);    \
            kvc_shim_msg("" __VA_ARGS__);                                                   \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
#define cr_assert_not(c, ...) cr_assert(!(c), __VA_ARGS__)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_fail(...) cr_assert(0, __VA_ARGS__)
#define cr_skip_test(...)                                                                   \
    do {                                                                                    \
        kvc_shim_msg("" __VA_ARGS__);                                                       \
        exit(77);                                                                           \
    } while (0)
#define cr_log_info(...) kvc_shim_msg("" __VA_ARGS__)
#define cr_log_warn(...) kvc_shim_msg("" __VA_ARGS__)

#endif
