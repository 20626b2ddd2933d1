/* SPDX-License-Identifier: BSD-3-Clause */
/* CacheGen: LMCache's quantiser and 32-bit arithmetic coder (docs/CACHEGEN.md), bit-exact on the wire.
 *
 * Tensors (all C order, element types fixed so LMCache's tensors can be passed as they are):
 *   symbols  uint8  [layers, tokens, channels]   (LMCache: int8 with the same bytes)
 *   cdf      uint16 [layers, channels, num_bins + 1]   (LMCache: int16 read as uint16)
 *   streams  uint8  [layers, channels, capacity]  one independent stream per (layer, channel)
 *   lengths  int32  [layers, channels]
 *   prefsum  int64  [layers, channels]  inclusive prefix sums of lengths, stream k = layer*channels + channel
 *
 * Limits: 1 <= num_bins <= 64, tokens <= KVC_CG_MAX_TOKENS (0 allowed), layers and channels >= 1.
 * Errors: KVC_ERR_INVALID_ARG for NULL pointers, zero layers/channels, bad num_bins/bins/dtype,
 * sizes whose products overflow, and a CDF that is not strictly increasing passed to the encoder;
 * KVC_ERR_OUT_OF_RANGE for a symbol >= num_bins (cdf, encode) or above 2M (dequantise), naming
 * the first such index; KVC_ERR_CORRUPT for decoder input that cannot be a valid encoding (a CDF
 * that is not strictly increasing, lengths < 0 or > capacity, prefix sums that decrease, are
 * negative or exceed the packed buffer); KVC_ERR_NO_SPACE when an encoded stream does not fit its
 * capacity. No output is written when a call fails validation; see each op for NO_SPACE.
 * Details are in docs/CACHEGEN.md.
 * Thread safety: any number of threads may call these on one context at once (context.h); a call's
 * output buffers must not be written by a concurrent call. */
#ifndef KVCORE_CACHEGEN_H
#define KVCORE_CACHEGEN_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/context.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_CG_MAX_BINS 64u
/* Largest token count: keeps every stream length (and kvc_cg_encode_bound) inside int32. */
#define KVC_CG_MAX_TOKENS (1u << 28)

/* Every call takes a parameter struct whose first field is a field mask, as kvc_context_params_t:
 * fields added later get a bit and are read only when it is set, so callers built against this
 * header keep working. No bit is defined yet: field_mask must be 0, and a bit this library does not
 * know is KVC_ERR_INVALID_ARG (a caller built against a newer header fails loudly). */


/* Histogram + normalised CDF per (layer, channel):
 * cdf[i] = floor((65535 - num_bins) * count(symbol < i) / tokens) + i for i = 0..num_bins,
 * so cdf[0] = 0, cdf[num_bins] = 65535, strictly increasing. tokens = 0 gives cdf[i] = i (as
 * LMCache's fallback and SYCL port). Counts are 32-bit: no overflow up to KVC_CG_MAX_TOKENS. */
typedef struct kvc_cg_cdf_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint8_t *symbols; /* [layers, tokens, channels], each < num_bins */
    uint16_t *cdf;          /* out: [layers, channels, num_bins + 1] */
    size_t layers, tokens, channels;
    unsigned num_bins;
} kvc_cg_cdf_params_t;

/* Arithmetic encoder (LMCache's encode_fast_new), any token count and 1..64 bins.
 * Only cdf[0..num_bins-1] are read (the last symbol's upper bound is 65536); they must be strictly
 * increasing (cdf[0] may be above 0). Stream (l, c) is written from streams[(l*channels + c) *
 * capacity]; bytes after its length are left untouched (LMCache zero-fills the buffer first).
 * lengths[k] receives the stream's full length even when it exceeds capacity: such a stream
 * holds its first `capacity` bytes, the other streams are complete, and the call returns
 * KVC_ERR_NO_SPACE. streams may be NULL when capacity is 0 (measure only: every length is
 * reported). kvc_cg_encode_bound(tokens) is a capacity that always suffices. */
typedef struct kvc_cg_encode_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1] */
    const uint8_t *symbols;  /* [layers, tokens, channels], each < num_bins (checked before encoding) */
    uint8_t *streams;        /* out: [layers, channels, capacity] */
    int32_t *lengths;        /* out: [layers, channels] */
    size_t layers, tokens, channels;
    size_t capacity;         /* bytes per stream, at most INT32_MAX */
    unsigned num_bins;
    size_t *needed;          /* optional out (host): the longest stream's length, set on OK and NO_SPACE */
} kvc_cg_encode_params_t;

/* Decoder over per-stream buffers (LMCache's decode_fast_new): stream (l, c) is
 * streams[(l*channels + c)*capacity ...] of lengths[l*channels + c] bytes. Bytes past a stream's
 * length are read as zeros (never from the neighbouring stream), so a valid stream decodes to the
 * symbols LMCache decodes, and truncated or random bytes decode to some symbols without any read
 * outside the given bytes. */
typedef struct kvc_cg_decode_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1]; cdf[0..num_bins-1] strictly increasing */
    const uint8_t *streams;  /* [layers, channels, capacity] */
    const int32_t *lengths;  /* [layers, channels], each in [0, capacity] */
    uint8_t *symbols;        /* out: [layers, tokens, channels] */
    size_t layers, tokens, channels;
    size_t capacity;
    unsigned num_bins;
} kvc_cg_decode_params_t;

/* Decoder over one packed byte array (LMCache's decode_fast_prefsum): stream k = l*channels + c
 * occupies bytes[prefsum[k-1] .. prefsum[k]) with prefsum[-1] = 0. Same zero-padding rule. */
typedef struct kvc_cg_decode_packed_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint16_t *cdf;     /* [layers, channels, num_bins + 1] */
    const uint8_t *bytes;    /* [nbytes]; may be NULL when nbytes is 0 */
    size_t nbytes;
    const int64_t *prefsum;  /* [layers, channels]: non-decreasing, each in [0, nbytes] */
    uint8_t *symbols;        /* out: [layers, tokens, channels] */
    size_t layers, tokens, channels;
    unsigned num_bins;
} kvc_cg_decode_packed_params_t;

/* Quantise / dequantise, with M = bins[l]/2 - 1 (15 for 32 bins, 7 for 16):
 *   scale[l,t] = max |x| over the row's finite values (0 when there is none)
 *   q = M + round_half_even((x * f) * (M / (scale * f))) clamped to [0, 2M], computed in fp32
 *   x^ = ((q - M) * (scale * f / M)) / f in fp32, rounded to the output dtype (nearest-even)
 * so |x - x^| <= scale/(2M) plus fp32/dtype rounding (f: see below). Edge cases (LMCache turns an all-zero row
 * into NaN symbols; kvcore never produces NaN or out-of-range symbols):
 *   - all-zero row: scale 0, every symbol M, dequantises to exactly 0;
 *   - NaN: ignored by the scale, symbol M (dequantises to 0);
 *   - +-inf: ignored by the scale, symbol 2M or 0 (dequantises to +-scale); in a row without a
 *     finite non-zero value (scale 0) it gets symbol M like a NaN;
 *   - both directions rescale by f = 2^64 when scale < 2^-64 and f = 2^-64 when scale > 2^64
 *     (f = 1 otherwise; exact power-of-two rescaling), so tiny (subnormal) or huge rows quantise
 *     like ordinary ones instead of overflowing M / scale or losing precision in scale / M.
 * Symbols may differ from LMCache's torch quantiser (which divides in the input dtype) at exact
 * rounding ties; the coded streams do not depend on how the symbols were made. Dequantise rejects
 * symbols above 2M (KVC_ERR_OUT_OF_RANGE) and negative or non-finite scales (KVC_ERR_INVALID_ARG). */
typedef struct kvc_quant_params {
    uint64_t field_mask;     /* see above: 0 */
    kvc_dtype_t dtype;
    void *values;           /* [layers, tokens, channels] of dtype: read by quantise, written by dequantise */
    uint8_t *symbols;       /* [layers, tokens, channels]: written by quantise, read by dequantise */
    float *scales;          /* [layers, tokens]: written by quantise, read by dequantise */
    const uint32_t *bins;   /* [layers] (host memory), each in [4, 64] */
    size_t layers, tokens, channels;
} kvc_quant_params_t;

/* ------------------------------------------------------------------ interleaved rANS
 * The container's second coder (`kvcore encode --coder rans`; docs/FORMAT.md "rANS streams") on
 * tensors, for callers that keep their symbols on a GPU or store streams themselves. The streams
 * are kvcore's, not LMCache's. The same symbols, with per-(layer, channel) frequencies of 12 bits:
 *   cum      uint16 [layers, channels, num_bins + 1]  each channel's cumulative frequencies:
 *            cum[0] = 0, non-decreasing, cum[num_bins] = 4096 (kvc_rans_tables makes them from
 *            the symbols; a symbol to encode must have a frequency, cum[s + 1] > cum[s])
 *   streams  uint8  [layers, Q, capacity]  Q = ceil(channels / 32): stream (l, q) codes the
 *            channels [32q, min(32q + 32, channels)) of layer l with 8 states, state i coding
 *            channels 32q + i, 32q + 8 + i, 32q + 16 + i, 32q + 24 + i one after another
 *   lengths  int32  [layers, Q]
 *   ends     int64  [layers, Q]  the streams packed back to back: stream k ends at ends[k]
 *            (inclusive prefix sums of lengths)
 * Limits: 1 <= num_bins <= 64, tokens <= KVC_RANS_MAX_TOKENS. Errors as the arithmetic coder's
 * calls (above), and: KVC_ERR_OUT_OF_RANGE for a symbol to encode without a frequency in its
 * table; KVC_ERR_INVALID_ARG for a table that is not one (above) given to the encoder, and
 * KVC_ERR_CORRUPT given to the decoder; KVC_ERR_CORRUPT for end offsets that decrease or pass
 * nbytes, and for a stream that is truncated, overlong or does not end in the encoder's initial
 * states (the symbols are then unspecified). Other failures leave the outputs as they were, but
 * for the streams of an encode that meets a symbol without frequency (scratch: docs/ERRORS.md).
 * Each call runs where its tensors live (host memory: the CPU backend's SIMD coder; device memory:
 * the GPU module's kernels, one thread per stream), with the same bytes and statuses. */
#define KVC_RANS_MAX_TOKENS (1u << 24)

typedef struct kvc_rans_tables_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint8_t *symbols;  /* [layers, tokens, channels], each < num_bins */
    uint16_t *cum;           /* out: [layers, channels, num_bins + 1] */
    size_t layers, tokens, channels; /* tokens >= 1 */
    unsigned num_bins;
} kvc_rans_tables_params_t;

typedef struct kvc_rans_encode_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint16_t *cum;     /* [layers, channels, num_bins + 1] */
    const uint8_t *symbols;  /* [layers, tokens, channels]; may be NULL when tokens is 0 */
    uint8_t *streams;        /* out: [layers, Q, capacity]; a stream's bytes past its length are scratch */
    int32_t *lengths;        /* out: [layers, Q] */
    size_t layers, tokens, channels;
    size_t capacity;         /* bytes per stream, >= kvc_rans_encode_bound(tokens) */
    unsigned num_bins;
} kvc_rans_encode_params_t;

typedef struct kvc_rans_decode_params {
    uint64_t field_mask;     /* see above: 0 */
    const uint16_t *cum;     /* [layers, channels, num_bins + 1] */
    const uint8_t *bytes;    /* [nbytes]; may be NULL when nbytes is 0 */
    size_t nbytes;
    const int64_t *ends;     /* [layers, Q] */
    uint8_t *symbols;        /* out: [layers, tokens, channels]; may be NULL when tokens is 0 */
    size_t layers, tokens, channels;
    unsigned num_bins;
} kvc_rans_decode_params_t;

/* ------------------------------------------------------------------ public calls */

/* Per-(layer, channel) histogram and CDF (kvc_cg_cdf_params_t). Symbols >= num_bins: KVC_ERR_OUT_OF_RANGE. */
KVC_API kvc_status_t kvc_cg_cdf(kvc_context_t *ctx, const kvc_cg_cdf_params_t *a);

/* Encode every (layer, channel) stream (kvc_cg_encode_params_t). */
KVC_API kvc_status_t kvc_cg_encode(kvc_context_t *ctx, const kvc_cg_encode_params_t *a);

/* A per-stream capacity that always suffices for `tokens` symbols under any valid CDF
 * (2*tokens + tokens/32768 + 4 bytes; a symbol costs at most 16.0001 bits). 0 when tokens exceeds
 * KVC_CG_MAX_TOKENS. Typical KV streams need 3-5 bits per symbol. */
KVC_API size_t kvc_cg_encode_bound(size_t tokens);

/* Decode per-stream buffers (kvc_cg_decode_params_t) or one packed array (kvc_cg_decode_packed_params_t). */
KVC_API kvc_status_t kvc_cg_decode(kvc_context_t *ctx, const kvc_cg_decode_params_t *a);
KVC_API kvc_status_t kvc_cg_decode_packed(kvc_context_t *ctx, const kvc_cg_decode_packed_params_t *a);

/* Quantise values into symbols + per-(layer, token) scales, and back (kvc_quant_params_t). */
KVC_API kvc_status_t kvc_quantise(kvc_context_t *ctx, const kvc_quant_params_t *a);
KVC_API kvc_status_t kvc_dequantise(kvc_context_t *ctx, const kvc_quant_params_t *a);

/* Interleaved rANS (kvc_rans_*_params_t above): the frequency tables of the symbols, the streams,
 * and the symbols back. kvc_rans_encode_bound(tokens) = 32 + 64 * tokens, a capacity that always
 * suffices (0 above KVC_RANS_MAX_TOKENS). */
KVC_API kvc_status_t kvc_rans_tables(kvc_context_t *ctx, const kvc_rans_tables_params_t *a);
KVC_API kvc_status_t kvc_rans_encode(kvc_context_t *ctx, const kvc_rans_encode_params_t *a);
KVC_API kvc_status_t kvc_rans_decode(kvc_context_t *ctx, const kvc_rans_decode_params_t *a);
KVC_API size_t kvc_rans_encode_bound(size_t tokens);

/* LMCache's default bins for a model with num_layers layers, in the order of a KV_2LTD chunk seen
 * as [2*num_layers, T, C]: bins[0..NL) for keys (32 for layers 0..9, then 16), bins[NL..2NL) for
 * values (32 for layers 0..1, then 16); a model with fewer than 10 layers gets 32 everywhere.
 * bins must hold 2*num_layers entries. */
KVC_API kvc_status_t kvc_cg_default_bins(size_t num_layers, uint32_t *bins);

#ifdef __cplusplus
}
#endif
#endif
