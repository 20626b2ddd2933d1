/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS encoder of the AVX-512 tier: the 8 states of a group in one register. Per token: the
 * 8 table entries in one gather, the words of the lanes that renormalise compressed into lane
 * order and stored below the previous ones with one 16-byte store, and the quotient x / f
 * estimated in single precision and corrected by its remainder (quotient16), 16 lanes at once.
 * Same bytes as the portable coder (tested). */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "cpu_rans.h"

#define PROB_BITS 12
#define SCALE (1u << PROB_BITS)
#define GROUP 8
#define BAD KVC_RANS_ENC_BAD
#define MAXR KVC_RANS_DEC_REGS_AVX512

/* pshufb masks that move the n words at the bottom of a 16-byte register to its top (row n). */
static const uint8_t to_top[GROUP + 1][16] = {
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80 },
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01 },
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x02, 0x03 },
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05 },
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07 },
    { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09 },
    { 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b },
    { 0x80, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d },
    { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f },
};

/* Words of the lanes in k (in lane order) stored just below w; returns the new w. */
static inline uint8_t *put_words(uint8_t *w, __m512i x, __mmask16 k)
{
    const unsigned n = (unsigned)__builtin_popcount(k);
    const __m128i words = _mm256_castsi256_si128(_mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(k, x))); /* low 8 */
    _mm_storeu_si128((__m128i *)(void *)(w - 16), _mm_shuffle_epi8(words, _mm_loadu_si128((const __m128i *)(const void *)to_top[n])));
    return w - 2 * n;
}

/* x / f for x < f << 20, as the AVX2 tier's quotient8 (cpu_rans_avx2.c) does it, 16 lanes: the
 * estimate in single precision errs by less than 0.2 (three roundings of 2^-24; the unsigned
 * conversions are AVX-512's), corrected by the remainder. The double division it replaced: 1.02x. */
static inline __m512i quotient16(__m512i x, __m512i f)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512i q = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_cvtepu32_ps(x), _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_cvtepu32_ps(f))));
    const __m512i r = _mm512_sub_epi32(x, _mm512_mullo_epi32(q, f));
    q = _mm512_mask_add_epi32(q, _mm512_cmpge_epi32_mask(r, f), q, one);
    return _mm512_mask_sub_epi32(q, _mm512_cmplt_epi32_mask(r, _mm512_setzero_si512()), q, one);
}

void kvc_rans_quotient_avx512(const uint32_t x[16], const uint32_t f[16], uint32_t q[16])
{
    _mm512_storeu_si512(q, quotient16(_mm512_loadu_si512(x), _mm512_loadu_si512(f)));
}

/* Two groups at once, 16 lanes (A in 0-7, B in 8-15): one register chain carries both, so every
 * step serves 16 symbols, and the latency of a token (compare, convert, multiply, convert,
 * multiply) is paid once per two groups. The loop is a function of its own with plain arguments:
 * inlined into the cursor-taking kernel, GCC 12 kept the states on the stack (a store and a load
 * in the token's dependency chain). */
static KVC_RANS_KERNEL __attribute__((noinline)) void
enc8x2(const uint8_t *sym_a, const uint8_t *sym_b, size_t stride, size_t tokens,
                                             const uint32_t *tab, uint32_t *xs, uint8_t **wap, uint8_t **wbp, uint32_t *sv, uint32_t *fv)
{
    const __m512i base = _mm512_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960),
                  m63 = _mm512_set1_epi32(63), m16 = _mm512_set1_epi32(0xFFFF), scale = _mm512_set1_epi32((int)SCALE);
    __m512i x = _mm512_loadu_si512(xs), seen = _mm512_setzero_si512(), flags = _mm512_setzero_si512();
    uint8_t *wa = *wap, *wb = *wbp;
    for (size_t t = tokens; t-- > 0;) {
        uint64_t ra, rb;
        memcpy(&ra, sym_a + t * stride, 8);
        memcpy(&rb, sym_b + t * stride, 8);
        const __m512i s = _mm512_cvtepu8_epi32(_mm_set_epi64x((long long)rb, (long long)ra));
        seen = _mm512_or_si512(seen, s);
        const __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(base, _mm512_and_si512(s, m63)), (const void *)tab, 4);
        flags = _mm512_or_si512(flags, e);
        const __m512i f = _mm512_and_si512(_mm512_srli_epi32(e, 16), m16), c = _mm512_and_si512(e, m16);
        /* emit where x >= f << 20, that is x >> 20 >= f (f << 20 is a multiple of 2^20; f = 4096: never) */
        const __mmask16 k = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(x, 32 - PROB_BITS), f);
        wa = put_words(wa, x, (__mmask16)(k & 0xFF));
        wb = put_words(wb, x, (__mmask16)(k & 0xFF00));
        x = _mm512_mask_srli_epi32(x, k, x, 16);
        /* x / f * 4096 + x % f + cum = x + cum + q * (4096 - f) */
        const __m512i q = quotient16(x, f);
        x = _mm512_add_epi32(_mm512_add_epi32(x, c), _mm512_mullo_epi32(q, _mm512_sub_epi32(scale, f)));
    }
    _mm512_storeu_si512(sv, seen);
    _mm512_storeu_si512(fv, flags);
    _mm512_storeu_si512(xs, x);
    *wap = wa;
    *wbp = wb;
}

void kvc_rans_enc8x2_avx512(kvc_rans_enc_t *const st[2], const uint8_t *const sym[2], const uint16_t *const cum[2], size_t stride,
                            size_t tokens, unsigned bins)
{
    uint32_t tab[2 * GROUP * 64], sv[2 * GROUP], fv[2 * GROUP], xs[2 * GROUP];
    kvc_rans_enc_table(tab, cum[0], bins);
    kvc_rans_enc_table(tab + GROUP * 64, cum[1], bins);
    memcpy(xs, st[0]->x, sizeof st[0]->x);
    memcpy(xs + GROUP, st[1]->x, sizeof st[1]->x);
    enc8x2(sym[0], sym[1], stride, tokens, tab, xs, &st[0]->w, &st[1]->w, sv, fv);
    uint32_t sa = 0, sb = 0, fa = 0, fb = 0;
    for (unsigned i = 0; i < GROUP; i++) sa |= sv[i], sb |= sv[GROUP + i], fa |= fv[i], fb |= fv[GROUP + i];
    memcpy(st[0]->x, xs, sizeof st[0]->x);
    memcpy(st[1]->x, xs + GROUP, sizeof st[1]->x);
    st[0]->bad |= (sa & ~63u) || (fa & BAD);
    st[1]->bad |= (sb & ~63u) || (fb & BAD);
}

void kvc_rans_fill_tables_avx512(uint8_t *tab, const uint16_t *cum, unsigned g, unsigned bins)
{
    for (unsigned i = 0; i < g; i++) {
        const uint16_t *c = cum + (size_t)i * (bins + 1);
        uint8_t *row = tab + (size_t)i * SCALE;
        for (unsigned s = 0; s < bins; s++) {
            const __m512i v = _mm512_set1_epi8((char)s);
            for (unsigned p = c[s]; p < c[s + 1]; p += 64) _mm512_storeu_si512(row + p, v);
        }
    }
}

/* ---- decoder: a full group of 2 to 12 streams, 16 lanes a pair (docs/CACHEGEN.md
 * "AVX-512 decoder"). No slot table: each lane's symbol is found among the cumulative
 * frequencies of its own channel, stored transposed (cpu_rans.h: entry s of the 16
 * lanes in one register), so one step serves 16 channels. Only the symbols some lane uses are
 * scanned. */

/* r[i] lane j -> r[j] lane i (16 x 16 dwords). */
static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) { /* 32-bit pairs */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* 64-bit pairs */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) { /* 128-bit lanes: first across pairs of 4-row groups, then across the halves */
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
    }
}

/* The entries of 16 lanes (cpu_rans.h; lanes 0-7: the rows at cum_lo, 8-15: at cum_hi) and their `used` mask: each channel's entries of 16
 * symbols computed in one register from its cum row, then 16 such registers transposed, so e[]
 * is written a register a symbol (the scalar loop, a store an entry with 64-byte strides, was 15 %
 * of the kernel's time on real K/V). Rows are read with masked loads: nothing past row bins + 1. */
static uint64_t dec_entries16(const uint16_t *cum_lo, const uint16_t *cum_hi, unsigned bins, uint32_t *e)
{
    uint64_t used = 0;
    const __m512i s_base = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (unsigned s0 = 0; s0 < bins; s0 += 16) {
        const unsigned n = bins - s0 < 16 ? bins - s0 : 16; /* symbols of this step */
        const __mmask16 kc = (__mmask16)((1u << n) - 1);
        __m512i r[16];
        __mmask16 nz = 0;
        for (unsigned i = 0; i < 16; i++) {
            const uint16_t *c = (i < GROUP ? cum_lo + (size_t)i * (bins + 1) : cum_hi + (size_t)(i - GROUP) * (bins + 1)) + s0;
            const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(kc, c));
            const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(kc, c + 1));
            const __m512i f = _mm512_sub_epi32(hi, lo);
            nz |= _mm512_test_epi32_mask(f, f);
            r[i] = _mm512_or_si512(_mm512_or_si512(_mm512_slli_epi32(lo, 20), _mm512_slli_epi32(f, 7)),
                                   _mm512_add_epi32(s_base, _mm512_set1_epi32((int)s0)));
        }
        used |= (uint64_t)(nz & kc) << s0;
        transpose16(r);
        for (unsigned k = 0; k < n; k++) _mm512_store_si512(e + 16 * (s0 + k), r[k]);
    }
    return used;
}

/* 8 words from p into the lanes of k, in lane order (zero elsewhere); n of them are readable
 * (n >= 8: an unmasked load). */
static inline __m256i dec_words(const uint8_t *p, __mmask8 k, size_t n)
{
    const __m128i w = n >= GROUP ? _mm_loadu_si128((const __m128i *)(const void *)p)
                                 : _mm_maskz_loadu_epi16((__mmask8)((1u << n) - 1), (const void *)p);
    return _mm256_maskz_expand_epi32(k, _mm256_cvtepu16_epi32(w));
}

/* The rest of a token of a pair of groups (lanes 0-7: stream *a, 8-15: *b), its symbols' entries
 * cur found: the symbols to the rows ra / rb, x advanced and renormalised. na / nb: words readable
 * at *a / *b; 0 is returned when a group needs more. */
static inline __attribute__((always_inline)) int dec_finish(__m512i *xp, __m512i cur, uint8_t *ra, uint8_t *rb, const uint8_t **a,
                                                             const uint8_t **b, size_t na, size_t nb)
{
    const __m512i x = *xp;
    const __m128i sy = _mm512_cvtepi32_epi8(_mm512_and_si512(cur, _mm512_set1_epi32(127)));
    _mm_storel_epi64((__m128i *)(void *)ra, sy);
    _mm_storel_epi64((__m128i *)(void *)rb, _mm_unpackhi_epi64(sy, sy));
    const __m512i f = _mm512_and_si512(_mm512_srli_epi32(cur, 7), _mm512_set1_epi32(0x1FFF));
    const __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x, PROB_BITS)),
                                       _mm512_sub_epi32(_mm512_and_si512(x, _mm512_set1_epi32((int)SCALE - 1)), _mm512_srli_epi32(cur, 20)));
    const __mmask16 k = _mm512_cmplt_epu32_mask(y, _mm512_set1_epi32(1 << 16));
    const __mmask8 ka = (__mmask8)k, kb = (__mmask8)(k >> 8);
    const unsigned ca = (unsigned)__builtin_popcount(ka), cb = (unsigned)__builtin_popcount(kb);
    if (ca > na || cb > nb) return 0;
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(dec_words(*a, ka, na)), dec_words(*b, kb, nb), 1);
    *xp = _mm512_or_si512(_mm512_mask_slli_epi32(y, k, y, 16), w);
    *a += 2 * ca;
    *b += 2 * cb;
    return 1;
}

/* The largest entry <= key in each lane of one register (two streams): dec_lookup2 for one,
 * with four accumulators so that the minima still overlap. */
static inline __attribute__((always_inline)) __m512i dec_lookup1(const uint32_t *e0, unsigned lo, unsigned hi, __m512i x0)
{
    const __m512i k0 = _mm512_or_si512(_mm512_slli_epi32(x0, 32 - PROB_BITS), _mm512_set1_epi32(0xFFFFF));
    __m512i a0 = _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * lo)), a1 = a0, a2 = a0, a3 = a0;
    unsigned s = lo + 1;
    for (; s + 3 <= hi; s += 4) {
        a0 = _mm512_min_epu32(a0, _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * s)));
        a1 = _mm512_min_epu32(a1, _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * s + 16)));
        a2 = _mm512_min_epu32(a2, _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * s + 32)));
        a3 = _mm512_min_epu32(a3, _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * s + 48)));
    }
    for (; s <= hi; s++) a0 = _mm512_min_epu32(a0, _mm512_sub_epi32(k0, _mm512_load_si512(e0 + 16 * s)));
    return _mm512_sub_epi32(k0, _mm512_min_epu32(_mm512_min_epu32(a0, a1), _mm512_min_epu32(a2, a3)));
}

/* The largest entry <= key in each lane of R registers (entries e[r]), as key - min(key - e)
 * over the entries: the difference wraps above key for an entry above it (key + 2^32 - e > key),
 * so no compare or mask is needed, only a subtract and a minimum. All registers in one loop, two
 * accumulators each (one register: dec_lookup1's four), so that the chains of minima overlap. */
static inline __attribute__((always_inline)) void dec_lookup(const uint32_t *const *e, unsigned lo, unsigned hi, const __m512i *x,
                                                              __m512i *c, const int R)
{
    if (R == 1) {
        c[0] = dec_lookup1(e[0], lo, hi, x[0]);
        return;
    }
    /* Sized R: with arrays of MAXR, GCC 12 kept one of R = 3's accumulators on the stack (1.36 ns a
     * symbol; 0.62 in registers). */
    __m512i k[R], a[R], b[R];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        k[r] = _mm512_or_si512(_mm512_slli_epi32(x[r], 32 - PROB_BITS), _mm512_set1_epi32(0xFFFFF));
        a[r] = b[r] = _mm512_sub_epi32(k[r], _mm512_load_si512(e[r] + 16 * lo));
    }
    unsigned s = lo + 1;
    for (; s + 1 <= hi; s += 2)
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            a[r] = _mm512_min_epu32(a[r], _mm512_sub_epi32(k[r], _mm512_load_si512(e[r] + 16 * s)));
            b[r] = _mm512_min_epu32(b[r], _mm512_sub_epi32(k[r], _mm512_load_si512(e[r] + 16 * s + 16)));
        }
    if (s <= hi)
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) a[r] = _mm512_min_epu32(a[r], _mm512_sub_epi32(k[r], _mm512_load_si512(e[r] + 16 * s)));
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) c[r] = _mm512_sub_epi32(k[r], _mm512_min_epu32(a[r], b[r]));
}

/* 2R streams (R = 1 .. KVC_RANS_DEC_REGS_AVX512), a full group each: one register of 16 lanes per
 * pair (streams 2r, 2r + 1), their tokens a step at a time so that the R registers' chains (lookup,
 * multiply, renormalisation, the next words' load) overlap: one chain's latency bounds a token, and
 * a register more is nearly a register for free (per symbol, the real K/V's 31-symbol ranges:
 * 1.27 ns with one, 0.75 with two, 0.56 with four). */
static inline __attribute__((always_inline)) kvc_status_t dec_regs(kvc_rans_dec_t *const *st, const uint16_t *const *cum,
                                                                  uint8_t *const *sym, size_t stride, size_t tokens, unsigned bins,
                                                                  const int R)
{
    _Alignas(64) uint32_t e[MAXR][64 * 2 * GROUP];
    const uint32_t *ep[MAXR];
    const uint8_t *p[2 * MAXR], *end[2 * MAXR];
    unsigned lo, hi;
    uint64_t used = 0;
    for (int r = 0; r < R; r++) used |= dec_entries16(cum[2 * r], cum[2 * r + 1], bins, e[r]), ep[r] = e[r];
    if (kvc_rans_dec_range(used, &lo, &hi) != KVC_OK) return KVC_ERR_CORRUPT;
    for (int g = 0; g < 2 * R; g++) p[g] = st[g]->p, end[g] = st[g]->end;
    __m512i x[MAXR], c[MAXR];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        x[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)st[2 * r]->x)),
                                  _mm256_loadu_si256((const __m256i *)(const void *)st[2 * r + 1]->x), 1);
    size_t t = 0;
    kvc_status_t status = KVC_OK;
    /* Runs of tokens no group can read past its end in (8 words a token at most), unchecked. */
    for (;;) {
        size_t run = kvc_rans_dec_run(p, end, 2 * (unsigned)R, tokens - t);
        if (!run) break;
        for (; run; run--, t++) {
            const size_t o = t * stride;
            dec_lookup(ep, lo, hi, x, c, R);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) dec_finish(&x[r], c[r], sym[2 * r] + o, sym[2 * r + 1] + o, &p[2 * r], &p[2 * r + 1], GROUP, GROUP);
        }
    }
    /* The last tokens: loads masked to what is left, a group that needs more is corrupt. */
    for (; t < tokens && status == KVC_OK; t++) {
        const size_t o = t * stride;
        dec_lookup(ep, lo, hi, x, c, R);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) { /* as the AVX2 kernel: a loop of constant bound, the status checked in it */
            const size_t la = (size_t)(end[2 * r] - p[2 * r]) / 2, lb = (size_t)(end[2 * r + 1] - p[2 * r + 1]) / 2;
            if (status == KVC_OK && !dec_finish(&x[r], c[r], sym[2 * r] + o, sym[2 * r + 1] + o, &p[2 * r], &p[2 * r + 1], la, lb))
                status = KVC_ERR_CORRUPT;
        }
    }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_si256((__m256i *)(void *)st[2 * r]->x, _mm512_castsi512_si256(x[r]));
        _mm256_storeu_si256((__m256i *)(void *)st[2 * r + 1]->x, _mm512_extracti64x4_epi64(x[r], 1));
    }
    for (int g = 0; g < 2 * R; g++) st[g]->p = p[g];
    return status;
}

/* One kernel a register count, each on its own line (KVC_RANS_KERNEL). */
#define DEC_KERNEL(R)                                                                                                           \
    KVC_RANS_KERNEL static kvc_status_t dec_regs##R(kvc_rans_dec_t *const *st, const uint16_t *const *cum, uint8_t *const *sym, \
                                                     size_t stride, size_t tokens, unsigned bins)                               \
    {                                                                                                                           \
        return dec_regs(st, cum, sym, stride, tokens, bins, R);                                                                 \
    }
DEC_KERNEL(1)
DEC_KERNEL(2)
DEC_KERNEL(3)
DEC_KERNEL(4)
DEC_KERNEL(5)
DEC_KERNEL(6)

kvc_status_t kvc_rans_dec_streams_avx512(unsigned n, kvc_rans_dec_t *const *st, const uint16_t *const *cum, uint8_t *const *sym,
                                         size_t stride, size_t tokens, unsigned bins)
{
    switch (n) {
    case 2: return dec_regs1(st, cum, sym, stride, tokens, bins);
    case 4: return dec_regs2(st, cum, sym, stride, tokens, bins);
    case 6: return dec_regs3(st, cum, sym, stride, tokens, bins);
    case 8: return dec_regs4(st, cum, sym, stride, tokens, bins);
    case 10: return dec_regs5(st, cum, sym, stride, tokens, bins);
    case 12: return dec_regs6(st, cum, sym, stride, tokens, bins);
    default: return KVC_ERR_INVALID_ARG; /* the callers pass an even count <= 2 * KVC_RANS_DEC_REGS_AVX512 */
    }
}
