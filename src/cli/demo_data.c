/* SPDX-License-Identifier: BSD-3-Clause */
/* The demo's default data (data/story_prompt_{K,V}.npy), embedded in the binary with .incbin so
 * `kvcore demo` needs no files at run time. KVC_DATA_DIR is set by the Makefile. */
#include "demo_data.h"

#define EMBED(sym, file)                                                                                     \
    __asm__(".section .rodata\n.balign 64\n.global " #sym "\n.hidden " #sym "\n" #sym ":\n.incbin \"" KVC_DATA_DIR \
            "/" file "\"\n.global " #sym "_end\n.hidden " #sym "_end\n" #sym "_end:\n.byte 0\n.previous\n")

EMBED(kvc_demo_k_npy, "story_prompt_K.npy");
EMBED(kvc_demo_v_npy, "story_prompt_V.npy");
