/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the Criterion suites. */
#ifndef KVC_TEST_UTIL_H
#define KVC_TEST_UTIL_H

#include <stddef.h>
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

#endif
