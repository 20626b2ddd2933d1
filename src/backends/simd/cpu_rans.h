/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS coder of the CPU backend (docs/CACHEGEN.md "rANS coder"): the portable coder
 * (cpu_rans.c: scalar reference, checked loops and fast paths), the backend's window ops, and the
 * kernels of the ISA tiers (cpu_rans_avx2.c, cpu_rans_avx512.c), which write the same streams
 * byte for byte and are picked by the context's tier. */
#ifndef KVC_SIMD_CPU_RANS_H
#define KVC_SIMD_CPU_RANS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <kvcore/backend.h>

#include "common/rans.h"

/* The backend's rans_tables / rans_encode slots (backend.h); the codec's encode of several windows
 * is kvc_cpu_rans_encode_windows (cpu_codec.h), here too. */
kvc_status_t kvc_cpu_rans_tables(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a);
kvc_status_t kvc_cpu_rans_encode(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a);
/* The decode of the rans_decode slot (wins and x NULL: one window, every check) and of the codec's
 * kvc_cpu_rans_decode_windows (cpu_codec.h: several windows, trusted, its fusions), which
 * cpu_backend.c makes of it with the backend's dequantiser as `then`: run in the decode's thread
 * team when x->then_dequantise is set, once every stream decoded (every thread calls it; its
 * orphaned `omp for` shares the blocks). Passed in, so that this file's copies in tests link
 * without the quantiser. */
struct kvc_cpu_windows;
struct kvc_cpu_decode_extras;
typedef void (*kvc_cpu_then_fn)(kvc_backend_ctx_t *b, const struct kvc_quant_args *a, const uint8_t *halves);
kvc_status_t kvc_cpu_rans_decode_run(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a, const struct kvc_cpu_windows *wins,
                                     const struct kvc_cpu_decode_extras *x, kvc_cpu_then_fn then);

/* A stream codes nch channels (1 .. 8 * KVC_RANS_STREAM_GROUPS)
 * with min(8, nch) states: its groups of 8 channels one after another, state i coding channel
 * 8k + i of group k (docs/FORMAT.md "rANS streams"). A stream is coded a group at a time by the
 * kernels below, which take and leave the states in these cursors, so groups of different streams
 * (neighbouring channels, or other layers) go through one SIMD kernel together. */
typedef struct {
    uint32_t x[KVC_RANS_GROUP]; /* the states */
    uint8_t *w;                 /* the words are written backwards, below w */
    uint32_t bad;               /* nonzero: a symbol without frequency was met */
} kvc_rans_enc_t;

typedef struct {
    uint32_t x[KVC_RANS_GROUP];
    const uint8_t *p, *end; /* the words still to read */
} kvc_rans_dec_t;

/* The groups of a stream of nch channels, and the lanes of group k. */
static inline unsigned kvc_rans_stream_groups(unsigned nch) { return (nch + KVC_RANS_GROUP - 1) / KVC_RANS_GROUP; }
static inline unsigned kvc_rans_group_lanes(unsigned nch, unsigned k)
{
    return nch - KVC_RANS_GROUP * k < KVC_RANS_GROUP ? nch - KVC_RANS_GROUP * k : KVC_RANS_GROUP;
}

/* An encode into out[0, cap) (cap >= kvc_rans_bound(nch, tokens)): states 2^16, words from the end. */
static inline void kvc_rans_enc_begin(kvc_rans_enc_t *s, uint8_t *out, size_t cap)
{
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++) s->x[i] = KVC_RANS_L;
    s->w = out + cap;
    s->bad = 0;
}

/* The states of a stream of nch channels: min(8, nch). */
static inline unsigned kvc_rans_stream_states(unsigned nch) { return nch < KVC_RANS_GROUP ? nch : KVC_RANS_GROUP; }

/* The end of an encode of nch channels whose groups are all coded (last to first): 0 when a
 * symbol had no frequency; else the stream's final states (u32 LE) at out, the words moved right
 * behind them, and the stream length returned. */
static inline size_t kvc_rans_enc_end(const kvc_rans_enc_t *s, unsigned nch, uint8_t *out, size_t cap)
{
    const unsigned n = kvc_rans_stream_states(nch);
    if (s->bad) return 0;
    const size_t words = (size_t)(out + cap - s->w);
    memmove(out + 4 * n, s->w, words);
    for (unsigned i = 0; i < n; i++)
        for (unsigned b = 0; b < 4; b++) out[4 * i + b] = (uint8_t)(s->x[i] >> (8 * b));
    return 4 * n + words;
}

/* The start of a decode of in[0, len), a stream of nch channels: KVC_ERR_CORRUPT for a stream
 * shorter than its states or with an odd payload, or a state below 2^16. */
static inline kvc_status_t kvc_rans_dec_begin(kvc_rans_dec_t *s, unsigned nch, const uint8_t *in, size_t len)
{
    const unsigned n = kvc_rans_stream_states(nch);
    if (len < 4 * (size_t)n || (len - 4 * (size_t)n) % 2) return KVC_ERR_CORRUPT;
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *q = in + 4 * i;
        s->x[i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        if (s->x[i] < KVC_RANS_L) return KVC_ERR_CORRUPT;
    }
    for (unsigned i = n; i < KVC_RANS_GROUP; i++) s->x[i] = KVC_RANS_L;
    s->p = in + 4 * (size_t)n;
    s->end = in + len;
    return KVC_OK;
}

/* The end of a decode whose groups are all decoded: every word read and every state back at the
 * encoder's 2^16, else KVC_ERR_CORRUPT. */
static inline kvc_status_t kvc_rans_dec_end(const kvc_rans_dec_t *s)
{
    unsigned ok = s->p == s->end;
    for (unsigned i = 0; i < KVC_RANS_GROUP; i++) ok &= s->x[i] == KVC_RANS_L;
    return ok ? KVC_OK : KVC_ERR_CORRUPT;
}

/* One group of g lanes (1..8) of a stream, portable: symbol t of lane i is sym[t * stride + i],
 * coded with the table cum + i * (bins + 1). The encoder visits the tokens backwards and sets
 * s->bad for a symbol without frequency; full groups of 16 tokens or more take the fast path. The
 * decoder returns KVC_ERR_CORRUPT when the stream runs out of words; isa (a kvc_isa_t) picks the
 * tier's slot-table fill and NEON fast path. */
void kvc_rans_enc_group(kvc_rans_enc_t *s, unsigned g, const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum,
                        unsigned bins);
kvc_status_t kvc_rans_dec_group(int isa, kvc_rans_dec_t *s, unsigned g, const uint16_t *cum, uint8_t *sym, size_t stride,
                                size_t tokens, unsigned bins);

/* A whole stream of nch channels at sym / cum (channel c at sym[c], table cum + c * (bins + 1)):
 * the scalar reference and what tests compare the tiers with. The encoder needs
 * cap >= kvc_rans_bound(nch, tokens) and returns the length, 0 when a symbol has no frequency
 * (the counts do not describe the symbols). The decoder reads only in[0, len) and returns
 * KVC_ERR_CORRUPT when the stream is truncated, too long, starts from an impossible state or
 * does not end in the encoder's initial states (returned, not logged). isa: the tier's kernels
 * for the stream's full groups, the same bytes and symbols. */
size_t kvc_rans_encode_stream(int isa, const uint8_t *sym, size_t stride, size_t tokens, unsigned nch, const uint16_t *cum,
                              unsigned bins, uint8_t *out, size_t cap);
kvc_status_t kvc_rans_decode_stream(int isa, const uint8_t *in, size_t len, size_t tokens, unsigned nch, const uint16_t *cum,
                                    unsigned bins, uint8_t *sym, size_t stride);

/* The backend slots' tasks, on the tier isa, and what the one-stream calls above run: two
 * streams encoded together (nch[1] = 0: one; len[j] as kvc_rans_encode_stream's), and
 * n <= KVC_RANS_TASK streams decoded together (arrays of n entries; KVC_ERR_CORRUPT when any is,
 * and the slot then decodes them one by one to name it). The streams may be any: neighbours in a
 * layer, or of different layers; their full groups go through the tier's kernels together. */
#define KVC_RANS_TASK 12     /* streams of a decode task, at most: AVX-512's six registers */
#define KVC_RANS_ENC_TASK 2  /* pairs of streams of an encode task, at most */
void kvc_rans_encode_pair(int isa, const uint8_t *const sym[2], const uint16_t *const cum[2], const unsigned nch[2], size_t stride,
                          size_t tokens, unsigned bins, uint8_t *const out[2], size_t cap, size_t len[2]);
kvc_status_t kvc_rans_decode_task(int isa, unsigned n, const uint8_t *const *in, const size_t *len, const uint16_t *const *cum,
                                  uint8_t *const *sym, const unsigned *nch, size_t stride, size_t tokens, unsigned bins);

/* The tiers' kernels start on a 64-byte line: where the linker put them moved their loops across
 * fetch blocks, and an unrelated change elsewhere in the library made the AVX-512 decode 4-5 %
 * slower on the real K/V (measured; aligned, the same code ran at its former speed). */
#define KVC_RANS_KERNEL __attribute__((aligned(64)))

/* The encoders' table of one full group: entry (lane i, symbol s) at i * 64 + s is cum | f << 16,
 * or KVC_RANS_ENC_BAD for a symbol without frequency (count 0, or s >= bins), which the kernels
 * or together and check once at the end. Shared by the tiers' files (one source). */
#define KVC_RANS_ENC_BAD (1u << 31)

static inline void kvc_rans_enc_table(uint32_t *tab, const uint16_t *cum, unsigned bins)
{
    for (unsigned i = 0; i < 8; i++) {
        const uint16_t *c = cum + (size_t)i * (bins + 1);
        for (unsigned s = 0; s < 64; s++) {
            const uint32_t f = s < bins ? (uint32_t)c[s + 1] - c[s] : 0;
            tab[i * 64 + s] = f ? c[s] | f << 16 : KVC_RANS_ENC_BAD;
        }
    }
}

/* The SIMD encoders' x / f (x < f << 20, f in [1, 4096]), 8 (AVX2) or 16 (AVX-512) lanes: what
 * their kernels compute, exported for the test that checks it exact at every f. */
void kvc_rans_quotient_avx2(const uint32_t x[8], const uint32_t f[8], uint32_t q[8]);
void kvc_rans_quotient_avx512(const uint32_t x[16], const uint32_t f[16], uint32_t q[16]);

/* AVX-512 (F/BW/DQ/VL): a full group of two streams at once (s[j]: group sym[j], tables cum[j];
 * bins <= 64): what two kvc_rans_enc_group calls with g = 8 do to the cursors. */
void kvc_rans_enc8x2_avx512(kvc_rans_enc_t *const s[2], const uint8_t *const sym[2], const uint16_t *const cum[2], size_t stride,
                            size_t tokens, unsigned bins);

/* AVX2: like kvc_rans_enc8x2_avx512; s[1] = NULL codes one group (the AVX-512 tier's lone full
 * groups too). */
void kvc_rans_enc8x2_avx2(kvc_rans_enc_t *const s[2], const uint8_t *const sym[2], const uint16_t *const cum[2], size_t stride,
                          size_t tokens, unsigned bins);

/* The SIMD decoders' lookup (docs/CACHEGEN.md "AVX-512 decoder"): the entries of a register's
 * channels (cum rows of bins + 1) transposed, e[s * lanes + lane] = cum << 20 | freq << 7 | s, so
 * that the largest entry <= slot << 20 | 0xFFFFF is the lane's symbol with its freq and cum (a
 * symbol without frequency never is: the next one with a frequency has the same cum and a larger
 * entry, and with none after it cum is 4096, which wraps the entry to s, below every real one).
 * Each tier builds them a register of symbols at a time (dec_entries8 / dec_entries16, a transpose
 * of one register per channel) and gets the symbols with a frequency in some lane as a bit mask
 * `used`; the symbols to scan are then [*lo, *hi]. KVC_ERR_CORRUPT for tables without any
 * frequency (not kvc_rans_cum_from_counts'). */
static inline kvc_status_t kvc_rans_dec_range(uint64_t used, unsigned *lo, unsigned *hi)
{
    if (!used) return KVC_ERR_CORRUPT;
    *lo = (unsigned)__builtin_ctzll(used);
    *hi = 63u - (unsigned)__builtin_clzll(used);
    return KVC_OK;
}

/* How many of the `left` tokens no one of n streams can read past its end in (a group reads 8
 * words a token at most): the SIMD decoders' unchecked runs. */
static inline size_t kvc_rans_dec_run(const uint8_t *const *p, const uint8_t *const *end, unsigned n, size_t left)
{
    for (unsigned g = 0; g < n; g++) {
        const size_t r = (size_t)(end[g] - p[g]) / (2 * KVC_RANS_GROUP);
        if (r < left) left = r;
    }
    return left;
}

/* AVX2: a full group of two streams decoded together (s[j]: group tables cum[j], symbols to
 * sym[j]; bins <= 64), one register of 8 states each, the same lookup: what two
 * kvc_rans_dec_group calls with g = 8 do (KVC_ERR_CORRUPT when one runs out of words). */
kvc_status_t kvc_rans_dec_streams2_avx2(kvc_rans_dec_t *const s[2], const uint16_t *const cum[2], uint8_t *const sym[2], size_t stride,
                                        size_t tokens, unsigned bins);
/* AVX2: a full group of four (six) streams, the two (three) pairs' chains interleaved (one pair's
 * latency hides another's): what two (three) kvc_rans_dec_streams2_avx2 calls do. */
kvc_status_t kvc_rans_dec_streams4_avx2(kvc_rans_dec_t *const s[4], const uint16_t *const cum[4], uint8_t *const sym[4], size_t stride,
                                        size_t tokens, unsigned bins);
kvc_status_t kvc_rans_dec_streams6_avx2(kvc_rans_dec_t *const s[6], const uint16_t *const cum[6], uint8_t *const sym[6], size_t stride,
                                        size_t tokens, unsigned bins);

/* AVX-512: a full group of n streams decoded together (n even, 2 .. 2 * KVC_RANS_DEC_REGS_AVX512),
 * a register of 16 lanes a pair, without slot tables: what n kvc_rans_dec_group calls with g = 8
 * do. One kernel (cpu_rans_avx512.c, dec_regs) compiled for each register count. */
#define KVC_RANS_DEC_REGS_AVX512 6
kvc_status_t kvc_rans_dec_streams_avx512(unsigned n, kvc_rans_dec_t *const *s, const uint16_t *const *cum, uint8_t *const *sym,
                                         size_t stride, size_t tokens, unsigned bins);

/* NEON (AArch64, cpu_rans_neon.c): the portable decoder's fast path for a full group (rans_decode_fast8 in
 * cpu_rans.c, whose arguments it takes: the slot tables tab, 8 rows of 4096, and the entries cf,
 * 8 rows of 64 `cum | freq << 16`), with the state update and renormalisation on vectors
 * (cpu_rans_neon.c). Decodes the tokens of [0, tokens) that cannot read past the stream, advancing
 * x and *pos; returns how many. */
#if defined(__aarch64__) && defined(__ARM_NEON)
#define KVC_RANS_HAVE_NEON 1
size_t kvc_rans_decode_fast8_neon(const uint8_t *in, size_t len, size_t *pos, size_t tokens, const uint8_t *tab,
                                  const uint32_t *cf, uint32_t *x, uint8_t *sym, size_t stride);
/* NEON: a full group's encode (kvc_rans_enc_group with g = 8, bins <= 64): the same cursor. */
void kvc_rans_enc8_neon(kvc_rans_enc_t *s, const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins);
#endif

/* The decoder's slot tables of g channels (row i at tab + i * 4096: run s of symbol s is cum[s] ..
 * cum[s + 1]) with 64-byte stores; a run's last store may reach 63 bytes past its end, which the
 * next run (or the next row, or the 64 bytes of padding the caller leaves after the last row)
 * takes. A memset call per run cost 15 % of a 256-token decode, this 10 %; aligned stores (a
 * line at a time, a masked add per run boundary) measured slower than these. */
void kvc_rans_fill_tables_avx512(uint8_t *tab, const uint16_t *cum, unsigned g, unsigned bins);

#endif
