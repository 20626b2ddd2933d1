/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS encoder of the AVX2 tier (also what an AVX2-only CPU gets): two groups per call, each
 * group's 8 states in one register, the two chains interleaved so one's latency hides the
 * other's. Per token and group: one 8-lane gather of the table entries, the emitting lanes by
 * one compare of x >> 20 with f - 1, their words packed to 16 bits and moved to the top of a
 * 16-byte register in lane order by a pshufb row chosen by the lane mask (a 4 KiB table), one
 * plain store below the previous words; the quotient x / f estimated in single precision and
 * corrected by its remainder (quotient8). Same bytes as the portable coder (tested). */
#include "config.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "cpu_rans.h"

#define PROB_BITS 12
#define SCALE (1u << PROB_BITS)
#define GROUP 8
#define BAD KVC_RANS_ENC_BAD

/* Row m: the pshufb that takes the 16-bit words of the lanes set in m (of 8), in lane order, to
 * the top of the register (bytes 16 - 2n .. 15, n = popcount(m)); zeros below. */
static uint8_t to_top[256][16];
static pthread_once_t to_top_once = PTHREAD_ONCE_INIT;

static void to_top_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        const unsigned n = (unsigned)__builtin_popcount(m);
        unsigned d = 16 - 2 * n;
        memset(to_top[m], 0x80, 16);
        for (unsigned lane = 0; lane < GROUP; lane++)
            if (m >> lane & 1) {
                to_top[m][d++] = (uint8_t)(2 * lane);
                to_top[m][d++] = (uint8_t)(2 * lane + 1);
            }
    }
}

/* x / f for x < f << 20 (an encoder's state after renormalisation; f in [1, 4096], or 2^15 for a
 * symbol without frequency, whose stream is refused): an estimate in single precision, 8 lanes an
 * instruction, off by at most one (x >> 1 and three roundings of 2^-24 make it err by less than
 * 1 / f + 0.2), corrected by the remainder x - q f, which is then in [-f, 2f). The double division
 * it replaced (4 lanes, and AVX2's missing unsigned conversions) was 1.12x slower end to end. */
static inline __m256i quotient8(__m256i x, __m256i f)
{
    const __m256 xf = _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 1));
    const __m256 r2 = _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_cvtepi32_ps(f));
    __m256i q = _mm256_cvttps_epi32(_mm256_mul_ps(xf, r2));
    const __m256i r = _mm256_sub_epi32(x, _mm256_mullo_epi32(q, f));
    q = _mm256_sub_epi32(q, _mm256_cmpgt_epi32(r, _mm256_sub_epi32(f, _mm256_set1_epi32(1)))); /* r >= f: one more */
    return _mm256_add_epi32(q, _mm256_cmpgt_epi32(_mm256_setzero_si256(), r));                 /* r < 0: one less */
}

void kvc_rans_quotient_avx2(const uint32_t x[8], const uint32_t f[8], uint32_t q[8])
{
    _mm256_storeu_si256((__m256i *)(void *)q, quotient8(_mm256_loadu_si256((const __m256i *)(const void *)x),
                                                          _mm256_loadu_si256((const __m256i *)(const void *)f)));
}

typedef struct {
    __m256i x, flags;
    uint8_t *w;
} lane8_t;

/* The encoder's entries of a full group with a 65th entry a lane (KVC_RANS_ENC_BAD): a symbol's
 * index is min(s, 64), so one or over the gathered entries finds symbols >= 64 too (no second
 * accumulator, which this 16-register tier would spill). */
#define ENC_ROW 65

static void enc_table65(uint32_t *tab, const uint16_t *cum, unsigned bins)
{
    uint32_t t64[GROUP * 64];
    kvc_rans_enc_table(t64, cum, bins);
    for (unsigned i = 0; i < GROUP; i++) {
        memcpy(tab + i * ENC_ROW, t64 + i * 64, 64 * sizeof(uint32_t));
        tab[i * ENC_ROW + 64] = BAD;
    }
}

static inline __attribute__((always_inline)) void enc_token(lane8_t *g, const uint8_t *row, const uint32_t *tab)
{
    const __m256i base = _mm256_setr_epi32(0, ENC_ROW, 2 * ENC_ROW, 3 * ENC_ROW, 4 * ENC_ROW, 5 * ENC_ROW, 6 * ENC_ROW, 7 * ENC_ROW),
                  m16 = _mm256_set1_epi32(0xFFFF);
    uint64_t r8;
    memcpy(&r8, row, 8);
    const __m256i s = _mm256_min_epu32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)r8)), _mm256_set1_epi32(64));
    const __m256i e = _mm256_i32gather_epi32((const int *)tab, _mm256_add_epi32(base, s), 4);
    g->flags = _mm256_or_si256(g->flags, e);
    const __m256i f = _mm256_and_si256(_mm256_srli_epi32(e, 16), m16), c = _mm256_and_si256(e, m16);
    /* emit where x >= f << 20, that is x >> 20 > f - 1 (both below 2^12: a signed compare) */
    const __m256i need = _mm256_cmpgt_epi32(_mm256_srli_epi32(g->x, 32 - PROB_BITS), _mm256_sub_epi32(f, _mm256_set1_epi32(1)));
    const unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(need));
    const __m256i lo = _mm256_and_si256(g->x, m16);
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    _mm_storeu_si128((__m128i *)(void *)(g->w - 16), _mm_shuffle_epi8(words, _mm_loadu_si128((const __m128i *)(const void *)to_top[m])));
    g->w -= 2 * (unsigned)__builtin_popcount(m);
    __m256i x = _mm256_blendv_epi8(g->x, _mm256_srli_epi32(g->x, 16), need);
    /* x / f * 4096 + x % f + cum = x + cum + q * (4096 - f) */
    const __m256i q = quotient8(x, f);
    g->x = _mm256_add_epi32(_mm256_add_epi32(x, c), _mm256_mullo_epi32(q, _mm256_sub_epi32(_mm256_set1_epi32((int)SCALE), f)));
}

KVC_RANS_KERNEL
void kvc_rans_enc8x2_avx2(kvc_rans_enc_t *const s[2], const uint8_t *const sym[2], const uint16_t *const cum[2], size_t stride,
                          size_t tokens, unsigned bins)
{
    pthread_once(&to_top_once, to_top_init);
    const unsigned n = s[1] ? 2 : 1;
    uint32_t tab[2][GROUP * ENC_ROW];
    lane8_t g[2];
    for (unsigned j = 0; j < n; j++) {
        enc_table65(tab[j], cum[j], bins);
        g[j] = (lane8_t){ _mm256_loadu_si256((const __m256i *)(const void *)s[j]->x), _mm256_setzero_si256(), s[j]->w };
    }
    for (size_t t = tokens; t-- > 0;) {
        enc_token(&g[0], sym[0] + t * stride, tab[0]);
        if (n == 2) enc_token(&g[1], sym[1] + t * stride, tab[1]);
    }
    for (unsigned j = 0; j < n; j++) { /* the or'ed entries checked once */
        uint32_t fv[GROUP], any = 0;
        _mm256_storeu_si256((__m256i *)(void *)fv, g[j].flags);
        _mm256_storeu_si256((__m256i *)(void *)s[j]->x, g[j].x);
        for (unsigned i = 0; i < GROUP; i++) any |= fv[i] & BAD;
        s[j]->w = g[j].w;
        s[j]->bad |= any != 0;
    }
}

/* ---- decoder: a full group of two streams, one register of 8 states each, the AVX-512 tier's
 * lookup (cpu_rans.h, kvc_rans_dec_range; docs/CACHEGEN.md "AVX-512 decoder"): the lane's symbol is
 * key - min(key - e) over the entries of its channel, 8 channels a register, and the words go
 * to the renormalising lanes by a vpermd row chosen by the lane mask (an 8 KiB table). */

/* Row m: for each lane set in m, the index of its word among the words read (the set lanes
 * below it); other lanes 0 (masked off). */
static uint32_t expand_row[256][GROUP];
static pthread_once_t expand_once = PTHREAD_ONCE_INIT;

static void expand_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned n = 0;
        for (unsigned lane = 0; lane < GROUP; lane++) expand_row[m][lane] = m >> lane & 1 ? n++ : 0;
    }
}

/* r[i] lane j -> r[j] lane i (8 x 8 dwords). */
static inline void transpose8(__m256i r[8])
{
    __m256i t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2x128_si256(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2x128_si256(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

/* The entries of 8 lanes (cpu_rans.h) and their `used` mask, as the AVX-512 tier's
 * dec_entries16: each channel's entries of 8 symbols in one register from its cum row, 8 such
 * registers transposed, e[] written a register a symbol. A row's last values go through a zeroed
 * copy, so nothing past row bins + 1 is read. */
static uint64_t dec_entries8(const uint16_t *cum, unsigned bins, uint32_t *e)
{
    uint64_t used = 0;
    const __m256i s_base = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (unsigned s0 = 0; s0 < bins; s0 += 8) {
        const unsigned n = bins - s0 < 8 ? bins - s0 : 8; /* symbols of this step */
        __m256i r[8], nz = _mm256_setzero_si256();
        for (unsigned i = 0; i < GROUP; i++) {
            const uint16_t *c = cum + (size_t)i * (bins + 1) + s0;
            __m128i lo16, hi16;
            if (n == 8 && s0 + 9 <= bins + 1) {
                lo16 = _mm_loadu_si128((const __m128i *)(const void *)c);
                hi16 = _mm_loadu_si128((const __m128i *)(const void *)(c + 1));
            } else { /* the row's last symbols: only cum[s0 .. bins] */
                uint16_t buf[10] = { 0 };
                memcpy(buf, c, (n + 1) * sizeof(uint16_t));
                lo16 = _mm_loadu_si128((const __m128i *)(const void *)buf);
                hi16 = _mm_loadu_si128((const __m128i *)(const void *)(buf + 1));
            }
            const __m256i lo = _mm256_cvtepu16_epi32(lo16), f = _mm256_sub_epi32(_mm256_cvtepu16_epi32(hi16), lo);
            nz = _mm256_or_si256(nz, _mm256_xor_si256(_mm256_cmpeq_epi32(f, _mm256_setzero_si256()), _mm256_set1_epi32(-1)));
            r[i] = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(lo, 20), _mm256_slli_epi32(f, 7)),
                                   _mm256_add_epi32(s_base, _mm256_set1_epi32((int)s0)));
        }
        used |= (uint64_t)((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nz)) & ((1u << n) - 1)) << s0;
        transpose8(r);
        for (unsigned k = 0; k < n; k++) _mm256_store_si256((__m256i *)(void *)(e + GROUP * (s0 + k)), r[k]);
    }
    return used;
}

/* The largest entry <= key in each lane of both groups (8 lanes each, entries e[s * 8 + lane], s in
 * [lo, hi]): the two groups' minima in one loop, two accumulators each, so that four chains
 * overlap (two separate loops ran one dependent minimum at a time). */
static inline __attribute__((always_inline)) void dec_lookup8x2(const uint32_t *ea, const uint32_t *eb, unsigned lo,
                                                                 unsigned hi, __m256i xa, __m256i xb, __m256i *ca, __m256i *cb)
{
    const __m256i low = _mm256_set1_epi32(0xFFFFF);
    const __m256i ka = _mm256_or_si256(_mm256_slli_epi32(xa, 32 - PROB_BITS), low), kb = _mm256_or_si256(_mm256_slli_epi32(xb, 32 - PROB_BITS), low);
#define ENTRY(e, s) _mm256_load_si256((const __m256i *)(const void *)((e) + GROUP * (s)))
    __m256i a0 = _mm256_sub_epi32(ka, ENTRY(ea, lo)), a1 = a0, b0 = _mm256_sub_epi32(kb, ENTRY(eb, lo)), b1 = b0;
    unsigned s = lo + 1;
    for (; s + 1 <= hi; s += 2) {
        a0 = _mm256_min_epu32(a0, _mm256_sub_epi32(ka, ENTRY(ea, s)));
        b0 = _mm256_min_epu32(b0, _mm256_sub_epi32(kb, ENTRY(eb, s)));
        a1 = _mm256_min_epu32(a1, _mm256_sub_epi32(ka, ENTRY(ea, s + 1)));
        b1 = _mm256_min_epu32(b1, _mm256_sub_epi32(kb, ENTRY(eb, s + 1)));
    }
    if (s <= hi) {
        a0 = _mm256_min_epu32(a0, _mm256_sub_epi32(ka, ENTRY(ea, s)));
        b0 = _mm256_min_epu32(b0, _mm256_sub_epi32(kb, ENTRY(eb, s)));
    }
#undef ENTRY
    *ca = _mm256_sub_epi32(ka, _mm256_min_epu32(a0, a1));
    *cb = _mm256_sub_epi32(kb, _mm256_min_epu32(b0, b1));
}

/* The rest of a token of one group, its symbols' entries c found: x advanced and renormalised
 * from *p (n words readable there). 0 when the group needs more words than n. */
static inline __attribute__((always_inline)) int dec_finish8(__m256i *xp, __m256i c, const uint8_t **p, size_t n)
{
    const __m256i x = *xp;
    const __m256i f = _mm256_and_si256(_mm256_srli_epi32(c, 7), _mm256_set1_epi32(0x1FFF));
    const __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x, PROB_BITS)),
                                       _mm256_sub_epi32(_mm256_and_si256(x, _mm256_set1_epi32((int)SCALE - 1)), _mm256_srli_epi32(c, 20)));
    const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), _mm256_setzero_si256()); /* y < 2^16 */
    const unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(need)), k = (unsigned)__builtin_popcount(m);
    if (n < GROUP && k > n) return 0; /* k <= 8 always: checked only where fewer words are left */
    __m128i raw;
    if (n >= GROUP) raw = _mm_loadu_si128((const __m128i *)(const void *)*p);
    else { /* the last words of the stream: only what is there */
        uint8_t buf[16] = { 0 };
        memcpy(buf, *p, 2 * n);
        raw = _mm_loadu_si128((const __m128i *)(const void *)buf);
    }
    const __m256i w = _mm256_and_si256(
        _mm256_permutevar8x32_epi32(_mm256_cvtepu16_epi32(raw), _mm256_loadu_si256((const __m256i *)(const void *)expand_row[m])), need);
    /* y << 16 | word where needed: the shift count 16 & need */
    *xp = _mm256_or_si256(_mm256_sllv_epi32(y, _mm256_and_si256(need, _mm256_set1_epi32(16))), w);
    *p += 2 * k;
    return 1;
}

/* The two groups' symbols (entries ca, cb) to 8 bytes of each group's row. */
static inline void dec_store8x2(uint8_t *ra, uint8_t *rb, __m256i ca, __m256i cb)
{
    const __m256i s7 = _mm256_set1_epi32(127);
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(ca, s7), _mm256_and_si256(cb, s7)), 0xD8);
    const __m128i v = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storel_epi64((__m128i *)(void *)ra, v);
    _mm_storel_epi64((__m128i *)(void *)rb, _mm_unpackhi_epi64(v, v));
}

/* 2P streams (P = 1, 2 or 3 pairs), a full group each: the pairs through the same steps, so that
 * one pair's chain (lookup, multiply, renormalisation) overlaps the others' (per symbol on the
 * real K/V's 31-symbol ranges: 1.39 ns a pair, 0.98 four, 0.96 six; four pairs, 0.97, were no
 * faster than two fours and 3-5 % slower on the bench chunk at two threads). Every loop over the
 * pairs is unrolled: one with a variable bound (the last tokens' loop stopped at the first corrupt
 * pair) kept the states on the stack in the whole function, and the four ran at 1.22 ns where the
 * previous kernel took 1.07. */
static inline __attribute__((always_inline)) kvc_status_t dec_pairs(kvc_rans_dec_t *const *s, const uint16_t *const *cum,
                                                                  uint8_t *const *sym, size_t stride, size_t tokens, unsigned bins,
                                                                  const int P)
{
    pthread_once(&expand_once, expand_init);
    _Alignas(32) uint32_t e[6][64 * GROUP];
    const uint8_t *p[6], *end[6];
    unsigned lo, hi;
    uint64_t used = 0;
    for (int g = 0; g < 2 * P; g++) {
        /* the same tables as an earlier group (another window of the stream, in the same task): a
         * copy of its entries, a quarter of the work of making them */
        int same = g;
        for (int j = 0; j < g && same == g; j++)
            if (cum[j] == cum[g]) same = j;
        if (same < g) memcpy(e[g], e[same], bins * GROUP * sizeof(uint32_t));
        else used |= dec_entries8(cum[g], bins, e[g]);
        p[g] = s[g]->p;
        end[g] = s[g]->end;
    }
    if (kvc_rans_dec_range(used, &lo, &hi) != KVC_OK) return KVC_ERR_CORRUPT;
    __m256i x[6], c[6];
#pragma GCC unroll 6
    for (int g = 0; g < 2 * P; g++) x[g] = _mm256_loadu_si256((const __m256i *)(const void *)s[g]->x);
    size_t t = 0;
    kvc_status_t st = KVC_OK;
    /* Runs of tokens no group can read past its end in (8 words a token at most), unchecked. */
    for (;;) {
        size_t run = kvc_rans_dec_run(p, end, 2 * (unsigned)P, tokens - t);
        if (!run) break;
        for (; run; run--, t++) {
            const size_t o = t * stride;
#pragma GCC unroll 3
            for (int q = 0; q < P; q++) {
                dec_lookup8x2(e[2 * q], e[2 * q + 1], lo, hi, x[2 * q], x[2 * q + 1], &c[2 * q], &c[2 * q + 1]);
                dec_store8x2(sym[2 * q] + o, sym[2 * q + 1] + o, c[2 * q], c[2 * q + 1]);
                dec_finish8(&x[2 * q], c[2 * q], &p[2 * q], GROUP);
                dec_finish8(&x[2 * q + 1], c[2 * q + 1], &p[2 * q + 1], GROUP);
            }
        }
    }
    /* The last tokens: only the words left are read, a group that needs more is corrupt. */
    for (; t < tokens && st == KVC_OK; t++) {
        const size_t o = t * stride;
#pragma GCC unroll 3
        for (int q = 0; q < P; q++) { /* every pair's token decoded, the status checked after it */
            const int a = 2 * q, b = 2 * q + 1;
            dec_lookup8x2(e[a], e[b], lo, hi, x[a], x[b], &c[a], &c[b]);
            dec_store8x2(sym[a] + o, sym[b] + o, c[a], c[b]);
            if (st == KVC_OK && (!dec_finish8(&x[a], c[a], &p[a], (size_t)(end[a] - p[a]) / 2) ||
                                 !dec_finish8(&x[b], c[b], &p[b], (size_t)(end[b] - p[b]) / 2)))
                st = KVC_ERR_CORRUPT;
        }
    }
#pragma GCC unroll 6
    for (int g = 0; g < 2 * P; g++) {
        _mm256_storeu_si256((__m256i *)(void *)s[g]->x, x[g]);
        s[g]->p = p[g];
    }
    return st;
}

KVC_RANS_KERNEL
kvc_status_t kvc_rans_dec_streams2_avx2(kvc_rans_dec_t *const s[2], const uint16_t *const cum[2], uint8_t *const sym[2], size_t stride,
                                        size_t tokens, unsigned bins)
{
    return dec_pairs(s, cum, sym, stride, tokens, bins, 1); /* reads [0, 2) of each array */
}

KVC_RANS_KERNEL
kvc_status_t kvc_rans_dec_streams4_avx2(kvc_rans_dec_t *const s[4], const uint16_t *const cum[4], uint8_t *const sym[4], size_t stride,
                                        size_t tokens, unsigned bins)
{
    return dec_pairs(s, cum, sym, stride, tokens, bins, 2);
}

KVC_RANS_KERNEL
kvc_status_t kvc_rans_dec_streams6_avx2(kvc_rans_dec_t *const s[6], const uint16_t *const cum[6], uint8_t *const sym[6], size_t stride,
                                        size_t tokens, unsigned bins)
{
    return dec_pairs(s, cum, sym, stride, tokens, bins, 3);
}
