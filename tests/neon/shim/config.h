/* SPDX-License-Identifier: BSD-3-Clause */
/* Stand-in for the configure-generated config.h: the NEON harness (tests/neon/run.sh) compiles
 * cpu_rope.c, cpu_rope_neon.c, cpu_rans.c, cpu_rans_neon.c and the cpu_cachegen files alone for
 * AArch64, without running configure for that target.
 * Those files need nothing from it (KVC_HAVE_X86_SIMD stays undefined, as on AArch64). */
