/* SPDX-License-Identifier: BSD-3-Clause */
/* Environment knobs: every variable kvcore reads is declared in the table in env.c. */
#ifndef KVC_CORE_ENV_H
#define KVC_CORE_ENV_H

/* getenv for a knob that must be in the table (asserts in debug builds). */
const char *kvc_env_get(const char *name);

#endif
