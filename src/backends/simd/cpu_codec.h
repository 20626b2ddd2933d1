/* SPDX-License-Identifier: BSD-3-Clause */
/* The codec's private interface to the CPU backend: what src/core/codec.c asks of the built-in
 * CPU backend beyond the public ops of include/kvcore/backend.h. Not installed and not part of the
 * backend ABI; only src/core/codec.c and src/backends/simd include it, never a GPU module or an
 * installed header (tests/check-deps.sh).
 *
 * The codec's buffers are host memory, so its rANS work always runs on the CPU backend of the
 * context (the context's own, or the one a GPU context keeps beside its module: ctx->cpu_bctx).
 * It calls these functions directly with that backend's context; the backend's public slots
 * (rans_encode, rans_decode, dequantise) run the same code with none of the extras below.
 *
 * Every call here is trusted: the codec made the tables (or counts) and end offsets itself, from
 * a container whose parse checked them, so the data checks of the public slots are skipped. */
#ifndef KVC_SIMD_CPU_CODEC_H
#define KVC_SIMD_CPU_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/backend.h>

/* Where a call's windows lie: `windows` (>= 1) windows of a->tokens tokens each, window w's layer l
 * at symbols + w * window_stride + l * layer_stride (layer_stride >= tokens * channels: the
 * windows of a chunk's symbols coded in place), their streams (and lengths or end offsets) one
 * window after another. The codec's full windows go in one call: more streams for the threads
 * and the SIMD kernels to share than one window has. */
struct kvc_cpu_windows {
    size_t windows, window_stride, layer_stride;
};

/* rans_encode of several windows; a->cum was counted from these very symbols. */
kvc_status_t kvc_cpu_rans_encode_windows(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a,
                                         const struct kvc_cpu_windows *w);

/* The fusions of the codec's rANS decode, each optional (NULL or 0: not done). */
struct kvc_cpu_decode_extras {
    /* In place of a->cum (then NULL): the counts the tables come from ([layers, channels,
     * num_bins], each channel's adding up to count_total; freq: kvc_rans_freq_table(count_total),
     * or NULL). Each task's tables are made by the thread that decodes it, in its cache. */
    const uint32_t *counts;
    const uint16_t *freq;
    uint64_t count_total;
    /* When every stream decoded: this trusted dequantise (its symbols are the ones decoded) in
     * the decode's thread team, one fork and join for both. */
    const struct kvc_quant_args *then_dequantise;
    /* With then_dequantise only: its scales as the container holds them, fp16 or bf16 bytes
     * (then_dequantise->dtype), little-endian, finite and >= 0, converted into
     * then_dequantise->scales block by block by the thread that dequantises the block. */
    const uint8_t *then_scales;
};

/* rans_decode of several windows with the fusions above. a->ends: every window's streams' end
 * offsets, counted on from the first window's start; a->nbytes: the windows' bytes. */
kvc_status_t kvc_cpu_rans_decode_windows(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a,
                                         const struct kvc_cpu_windows *w, const struct kvc_cpu_decode_extras *x);

/* dequantise of symbols and scales the codec vouches for (every symbol <= 2M, every scale finite
 * and >= 0: its rANS decode's): the slot's data checks are skipped. */
kvc_status_t kvc_cpu_dequantise_trusted(kvc_backend_ctx_t *b, const struct kvc_quant_args *a);

#endif
