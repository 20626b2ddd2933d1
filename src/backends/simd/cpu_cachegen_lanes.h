/* SPDX-License-Identifier: BSD-3-Clause */
/* The lane-parallel arithmetic coder's pieces that do not depend on the vector width (docs/
 * CACHEGEN.md, "Lane-parallel coder"): loading a group of streams for the decoder, the encoder's
 * tables, and the per-lane scalar output (words, long underflow runs, the flush), shared by the
 * avx512 (16 lanes), avx2 (8) and neon (4) kernels; and each tier's exact lane divide, which a
 * test checks on its own. Include only from code built with a tier's flags. */
#ifndef KVC_CPU_CACHEGEN_LANES_H
#define KVC_CPU_CACHEGEN_LANES_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "cpu_cachegen.h"

#define LANE_INLINE static inline __attribute__((always_inline))
/* Streams in the registers of one group at most (4 registers of 16 lanes). */
#define LANE_GROUP_MAX 64
/* Bit positions (32 + at most 18 bits a token) stay below 2^32. */
#define LANE_MAX_TOKENS (1u << 27)
/* Longer streams go to the scalar kernel: 8 * (len + 4) stays below 2^31. */
#define LANE_MAX_LEN (1u << 27)
/* Streams of a group copied side by side up to this many bytes, each followed by LANE_PAD zeros. */
#define LANE_COPY_MAX (32u << 10) /* on the stack, with 16 KiB of tables */
#define LANE_PAD 8

/* ------------------------------------------------------------------ decoder */

/* A decoder group of n streams in registers of `lanes` lanes; stream i (lane i % lanes of
 * register i / lanes) reads the 4 bytes at offset off[i] + (bit position / 8) of base while that
 * is at most lim[i], else byte (bit position / 8) - tbeg[i] of tail[i]. Its symbol bounds are in
 * pairs of registers as 16-bit lanes: entry s of pair p is lo / hm + (p * KVC_CG_MAX_BINS + s) *
 * 2 * lanes, cdf[s] and cdf[s + 1] - 1 (65535 for the last symbol), both increasing in s. */
typedef struct lane_dec_group {
    uint16_t lo[2 * KVC_CG_MAX_BINS * 32] __attribute__((aligned(64)));
    uint16_t hm[2 * KVC_CG_MAX_BINS * 32] __attribute__((aligned(64)));
    uint8_t tail[LANE_GROUP_MAX][16] __attribute__((aligned(64))); /* the last 8 bytes, zero padded */
    uint8_t copy[LANE_COPY_MAX] __attribute__((aligned(64)));
    int32_t off[LANE_GROUP_MAX], lim[LANE_GROUP_MAX], tbeg[LANE_GROUP_MAX];
    uint32_t d0[LANE_GROUP_MAX]; /* the first 4 bytes, big-endian */
    const uint8_t *base;         /* NULL: every stream is empty */
} lane_dec_group_t;

/* Stream k's first byte (offset from the job's base) and its length. */
LANE_INLINE void lane_stream(const cg_dec_job_t *j, size_t k, size_t *start, size_t *len)
{
    if (j->prefsum) {
        *start = k ? (size_t)j->prefsum[k - 1] : 0;
        *len = (size_t)j->prefsum[k] - *start;
    } else {
        *start = k * j->stride;
        *len = (size_t)j->lengths[k];
    }
}

/* Fills g for the n streams of channels c .. c + n - 1 of layer l; returns 0, having written
 * nothing, when they do not fit 32-bit gather offsets (the caller decodes them with the scalar
 * kernel). */
static inline int lane_dec_load(const cg_dec_job_t *j, size_t l, size_t c, int n, int lanes, lane_dec_group_t *g)
{
    size_t start[LANE_GROUP_MAX], len[LANE_GROUP_MAX];
    const size_t C = j->channels, B = j->num_bins;
    const unsigned max_sym = (unsigned)B - 1;
    const int pair = 2 * lanes;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        lane_stream(j, l * C + c + (size_t)i, &start[i], &len[i]);
        total += len[i] + LANE_PAD;
    }
    const size_t first = start[0];
    /* The next group's streams in this layer, while this one decodes: copying streams from
     * slots apart waits on memory where packed streams are prefetched by the hardware. */
    if (j->base)
        for (size_t k = c + (size_t)n; k < c + (size_t)(2 * n) && k < C; k++) {
            size_t s0, n0;
            lane_stream(j, l * C + k, &s0, &n0);
            for (size_t b = 0; b < n0 && b < LANE_COPY_MAX; b += 64) __builtin_prefetch(j->base + s0 + b);
        }
    for (int i = 0; i < n; i++)
        if (len[i] > LANE_MAX_LEN || start[i] - first + len[i] > (size_t)INT32_MAX) return 0;
    /* The group's streams are copied next to each other when they fit, each followed by zeros:
     * slots a power of two (or nearly) apart put every lane's line into the same few L1 sets,
     * and the copy reads sequentially where 64 slots are out of the hardware prefetcher's reach. */
    const int copied = j->base && total <= LANE_COPY_MAX;
    g->base = j->base ? copied ? g->copy : j->base + first : NULL;
    for (int i = 0, pos = 0; i < (n + pair - 1) / pair * pair; i++) {
        uint16_t *lo = g->lo + (size_t)(i / pair) * KVC_CG_MAX_BINS * pair + i % pair;
        uint16_t *hm = g->hm + (lo - g->lo);
        if (i >= n) { /* an unused half of a pair */
            for (unsigned s = 0; s <= max_sym; s++) lo[s * pair] = hm[s * pair] = 0;
            continue;
        }
        const size_t k = l * C + c + (size_t)i, nb = len[i];
        const uint16_t *cdf = j->cdf + k * (B + 1);
        for (unsigned s = 0; s <= max_sym; s++) {
            lo[s * pair] = cdf[s];
            hm[s * pair] = (uint16_t)((s < max_sym ? cdf[s + 1] : 65536u) - 1);
        }
        const uint8_t *p = nb ? j->base + start[i] : NULL;
        const size_t tb = nb >= 8 ? nb - 8 : 0;
        memset(g->tail[i], 0, 16);
        if (nb) memcpy(g->tail[i], p + tb, nb - tb);
        uint32_t w = 0;
        for (size_t b = 0; b < 4; b++) w = w << 8 | (b < nb ? p[b] : 0u);
        g->d0[i] = w;
        g->tbeg[i] = (int32_t)tb;
        if (copied) { /* 4-byte reads from up to nb + 4 stay inside the zeros after the stream */
            if (nb) memcpy(g->copy + pos, p, nb);
            memset(g->copy + pos + nb, 0, LANE_PAD);
            g->off[i] = pos;
            g->lim[i] = (int32_t)nb + 4;
            pos += (int)(nb + LANE_PAD);
        } else {
            for (size_t b = 64; b < nb; b += 64) __builtin_prefetch(p + b);
            g->off[i] = (int32_t)(start[i] - first);
            g->lim[i] = (int32_t)nb - 4;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ encoder */

/* Entry s of stream i of a group: cdf[s] | (cdf[s + 1] - 1) << 16 (65535 for the last symbol),
 * at ent[(i / lanes * KVC_CG_MAX_BINS + s) * lanes + i % lanes] (a register's table gathers
 * symbol * lanes + lane). */
typedef struct lane_enc_table {
    uint32_t ent[LANE_GROUP_MAX * KVC_CG_MAX_BINS] __attribute__((aligned(64)));
} lane_enc_table_t;

/* A lane's output: bits not yet in a word (nbits < 32 of them, right-aligned in acc) and the
 * bytes produced, counted past the capacity (the scalar kernel's cg_put and capacity rules). */
typedef struct lane_out {
    uint32_t acc, nbits, pos;
    uint8_t *out;
} lane_out_t;

static inline void lane_enc_load(const cg_enc_job_t *j, size_t l, size_t c, int n, int lanes, lane_enc_table_t *t,
                                 lane_out_t *o)
{
    const size_t C = j->channels, B = j->num_bins, cap = j->capacity;
    for (int i = 0; i < n; i++) {
        const size_t k = l * C + c + (size_t)i;
        const uint16_t *cdf = j->cdf + k * (B + 1);
        uint32_t *e = t->ent + (size_t)(i / lanes) * KVC_CG_MAX_BINS * (size_t)lanes + (size_t)(i % lanes);
        for (size_t s = 0; s < B; s++) e[s * (size_t)lanes] = cdf[s] | ((s + 1 < B ? cdf[s + 1] : 65536u) - 1) << 16;
        o[i] = (lane_out_t){ .out = j->streams ? j->streams + k * cap : NULL };
    }
}

static inline void lane_store(lane_out_t *o, size_t cap, uint32_t w)
{
    if (o->pos + (size_t)4 <= cap) {
        const uint32_t be = __builtin_bswap32(w);
        memcpy(o->out + o->pos, &be, 4);
    } else {
        for (size_t i = 0; i < 4; i++)
            if (o->pos + i < cap) o->out[o->pos + i] = (uint8_t)(w >> (24 - 8 * i));
    }
    o->pos += 4;
}

/* Append the n <= 32 low bits of bits. */
static inline void lane_put(lane_out_t *o, size_t cap, uint32_t bits, unsigned n)
{
    uint64_t a = (uint64_t)o->acc << n | bits;
    unsigned t = o->nbits + n;
    if (t >= 32) {
        t -= 32;
        lane_store(o, cap, (uint32_t)(a >> t));
        a &= ((uint64_t)1 << t) - 1;
    }
    o->acc = (uint32_t)a;
    o->nbits = t;
}

/* The first decided bit b (top bit of the n1 >= 1 bits of top), `pending` copies of !b, the rest:
 * cg_emit's bits, for the lanes whose run does not fit one 32-bit append and for the flush. */
static inline void lane_emit(lane_out_t *o, size_t cap, uint32_t top, unsigned n1, uint32_t pending)
{
    const uint32_t b = top >> (n1 - 1);
    lane_put(o, cap, b, 1);
    for (uint32_t left = pending; left;) {
        const unsigned k = left >= 32 ? 32 : left;
        lane_put(o, cap, b ? 0u : (uint32_t)(0xFFFFFFFFull >> (32 - k)), k);
        left -= k;
    }
    lane_put(o, cap, top & ((1u << (n1 - 1)) - 1), n1 - 1);
}

/* The full words of the lanes in mask (lane_store). */
static inline void lane_store_words(lane_out_t *o, size_t cap, unsigned mask, const uint32_t *word)
{
    for (; mask; mask &= mask - 1) lane_store(&o[__builtin_ctz(mask)], cap, word[__builtin_ctz(mask)]);
}

/* The lanes in mask, whose run does not fit one append: their accumulators (acc, nb, in and out)
 * through lane_emit. */
static inline void lane_emit_runs(lane_out_t *o, size_t cap, unsigned mask, uint32_t *acc, uint32_t *nb,
                                  const uint32_t *top, const uint32_t *n1, const uint32_t *pend)
{
    for (; mask; mask &= mask - 1) {
        const int i = __builtin_ctz(mask);
        o[i].acc = acc[i];
        o[i].nbits = nb[i];
        lane_emit(&o[i], cap, top[i], n1[i], pend[i]);
        acc[i] = o[i].acc;
        nb[i] = o[i].nbits;
    }
}

/* The flush of n lanes (cg_enc_finish): pending + 1 bits after the bit that picks a point inside
 * [low, high], zero padding to a byte; the lengths of streams first .. first + n - 1. */
static inline void lane_flush(const cg_enc_job_t *j, size_t first, lane_out_t *o, int n, const uint32_t *low,
                              const uint32_t *acc, const uint32_t *nb, const uint32_t *pend)
{
    const size_t cap = j->capacity;
    for (int i = 0; i < n; i++) {
        lane_out_t *e = &o[i];
        e->acc = acc[i];
        e->nbits = nb[i];
        lane_emit(e, cap, low[i] >= 0x40000000u, 1, pend[i] + 1);
        const unsigned nbytes = (e->nbits + 7) / 8;
        const uint32_t last = (uint32_t)((uint64_t)e->acc << (32 - e->nbits));
        for (unsigned b = 0; b < nbytes; b++)
            if (e->pos + b < cap) e->out[e->pos + b] = (uint8_t)(last >> (24 - 8 * b));
        j->lengths[first + (size_t)i] = (int32_t)(e->pos + nbytes);
    }
}

/* ------------------------------------------------------------------ the drivers */

/* A tier's kernel-table entries cg_decode_lanes_<suffix> and cg_encode_lanes_<suffix> (declared in
 * cpu_cachegen.h), for the file's
 * LANES, lane_decode and lane_encode: groups of 4, 2 and 1 registers (NV a constant in each call,
 * so that the kernels' loops unroll); the channels left over, and a group lane_decode refuses
 * (offsets past 32 bits), through rest_decode / rest_encode. */
#define LANE_DEFINE_DRIVERS(suffix, rest_encode, rest_decode)                                              \
    void cg_decode_lanes_##suffix(const cg_dec_job_t *j, size_t l, size_t c0, size_t n)                \
    {                                                                                                      \
        size_t c = c0;                                                                                     \
        const size_t end = c0 + n;                                                                         \
        if (j->tokens && j->tokens <= LANE_MAX_TOKENS)                                                     \
            while (end - c >= LANES) {                                                                     \
                const int nv = end - c >= 4 * LANES ? 4 : end - c >= 2 * LANES ? 2 : 1;                    \
                if (!(nv == 4   ? lane_decode(j, l, c, 4)                                                  \
                      : nv == 2 ? lane_decode(j, l, c, 2)                                                  \
                                : lane_decode(j, l, c, 1)))                                                \
                    break;                                                                                 \
                c += (size_t)nv * LANES;                                                                   \
            }                                                                                              \
        if (c < end) rest_decode(j, l, c, end - c);                                                        \
    }                                                                                                      \
    void cg_encode_lanes_##suffix(const cg_enc_job_t *j, size_t l, size_t c0, size_t n)                \
    {                                                                                                      \
        size_t c = c0;                                                                                     \
        const size_t end = c0 + n;                                                                         \
        if (j->tokens && j->tokens <= LANE_MAX_TOKENS)                                                     \
            while (end - c >= LANES) {                                                                     \
                const int nv = end - c >= 4 * LANES ? 4 : end - c >= 2 * LANES ? 2 : 1;                    \
                if (nv == 4) lane_encode(j, l, c, 4);                                                      \
                else if (nv == 2) lane_encode(j, l, c, 2);                                                 \
                else lane_encode(j, l, c, 1);                                                              \
                c += (size_t)nv * LANES;                                                                   \
            }                                                                                              \
        if (c < end) rest_encode(j, l, c, end - c);                                                        \
    }

/* ------------------------------------------------------------------ the divide */

/* floor(((d << 16) | 0xFFFF) / (r1 + 1)) per lane, for r1 + 1 in (2^30, 2^32] (the decoder's
 * range after renormalisation: low < 2^30 or high >= 3 * 2^30) and any d. The numerator (< 2^48)
 * and the divisor are exact doubles and the quotient q is below 2^18; the correctly rounded
 * double quotient is within q * 2^-53 < 2^-35 of q, while a q that is not an integer is at least
 * 1 / (r1 + 1) >= 2^-32 from the next one, so truncating it gives floor(q) with no correction. */
#if defined(__AVX512F__)
LANE_INLINE __m512i cg_lane_quotient(__m512i d, __m512i r1)
{
    const __m512d k16 = _mm512_set1_pd(65536.0), kff = _mm512_set1_pd(65535.0), one = _mm512_set1_pd(1.0);
    const __m512d n0 = _mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(d)), k16, kff);
    const __m512d n1 = _mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(d, 1)), k16, kff);
    const __m512d r0 = _mm512_add_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(r1)), one);
    const __m512d rh = _mm512_add_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(r1, 1)), one);
    const __m256i q0 = _mm512_cvttpd_epu32(_mm512_div_pd(n0, r0)), q1 = _mm512_cvttpd_epu32(_mm512_div_pd(n1, rh));
    return _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
}
#elif defined(__AVX2__)
/* 4 unsigned 32-bit values as exact doubles: the 2^52 exponent over their 64-bit zero extension,
 * less 2^52 (AVX2 converts only signed 32-bit values). */
LANE_INLINE __m256d cg_lane_u32_pd(__m128i x)
{
    const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll);
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_cvtepu32_epi64(x), magic)),
                         _mm256_castsi256_pd(magic));
}

LANE_INLINE __m256i cg_lane_quotient(__m256i d, __m256i r1)
{
    const __m256d k16 = _mm256_set1_pd(65536.0), kff = _mm256_set1_pd(65535.0), one = _mm256_set1_pd(1.0);
    const __m256d n0 = _mm256_fmadd_pd(cg_lane_u32_pd(_mm256_castsi256_si128(d)), k16, kff);
    const __m256d n1 = _mm256_fmadd_pd(cg_lane_u32_pd(_mm256_extracti128_si256(d, 1)), k16, kff);
    const __m256d r0 = _mm256_add_pd(cg_lane_u32_pd(_mm256_castsi256_si128(r1)), one);
    const __m256d rh = _mm256_add_pd(cg_lane_u32_pd(_mm256_extracti128_si256(r1, 1)), one);
    /* quotients below 2^18: the signed conversion is exact */
    const __m128i q0 = _mm256_cvttpd_epi32(_mm256_div_pd(n0, r0)), q1 = _mm256_cvttpd_epi32(_mm256_div_pd(n1, rh));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
}

/* Leading zeros of 8 lanes (AVX2 has no vplzcntd): y = x & ~(x >> 1) keeps x's top bit k and
 * clears the one below, so y < 1.5 * 2^k and its conversion to fp32 (24 bits, any rounding) has
 * exponent k: 158 - (127 + k) = 31 - k zeros; 0 gives exponent field 0 (capped to 32), and a lane
 * with bit 31 set converts negative, its sign making the field 256 + k (floored to 0). */
LANE_INLINE __m256i cg_lane_lzcnt(__m256i x)
{
    const __m256i y = _mm256_andnot_si256(_mm256_srli_epi32(x, 1), x);
    const __m256i e = _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(y)), 23);
    const __m256i z = _mm256_sub_epi32(_mm256_set1_epi32(158), e);
    return _mm256_min_epi32(_mm256_max_epi32(z, _mm256_setzero_si256()), _mm256_set1_epi32(32));
}
#elif defined(__aarch64__) && defined(__ARM_NEON)
LANE_INLINE uint32x4_t cg_lane_quotient(uint32x4_t d, uint32x4_t r1)
{
    const uint64x2_t kff = vdupq_n_u64(0xFFFF), one = vdupq_n_u64(1);
    const float64x2_t n0 = vcvtq_f64_u64(vorrq_u64(vshll_n_u32(vget_low_u32(d), 16), kff));
    const float64x2_t n1 = vcvtq_f64_u64(vorrq_u64(vshll_high_n_u32(d, 16), kff));
    const float64x2_t r0 = vcvtq_f64_u64(vaddq_u64(vmovl_u32(vget_low_u32(r1)), one));
    const float64x2_t rh = vcvtq_f64_u64(vaddq_u64(vmovl_high_u32(r1), one));
    return vcombine_u32(vmovn_u64(vcvtq_u64_f64(vdivq_f64(n0, r0))), vmovn_u64(vcvtq_u64_f64(vdivq_f64(n1, rh))));
}
#endif

#endif
