/* SPDX-License-Identifier: BSD-3-Clause */
/* The AVX-512 tier's arithmetic encoder and decoder, 16 streams in the lanes of a register
 * (docs/CACHEGEN.md, "Lane-parallel coder"), and its quantiser and dequantiser rows: 16 values a
 * step, a row's last values through masked loads and stores instead of the scalar tail. The same
 * operations as the scalar rows (cpu_cachegen_quant.c): the
 * scale is the largest finite |x|, a symbol x * f * (M / (scale * f)) clamped to [-M, M] and
 * rounded to nearest even, plus M; a value (q - M) * step * (1 / f) in fp32, rounded to nearest
 * even into the dtype. */
#include "config.h"

#include <immintrin.h>

#include "cpu_cachegen.h"
#include "cpu_cachegen_lanes.h"

#define ROW_INLINE static inline __attribute__((always_inline))

/* bf16 by integer rounding of the bit pattern (the values come from dequantisation, never NaN). */
ROW_INLINE void store16(kvc_dtype_t dt, void *x, size_t i, __m512 v, __mmask16 k)
{
    switch (dt) {
    case KVC_DTYPE_F16: _mm256_mask_storeu_epi16((uint16_t *)x + i, k, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); break;
    case KVC_DTYPE_BF16: {
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
        _mm256_mask_storeu_epi16((uint16_t *)x + i, k, _mm512_cvtepi32_epi16(r));
        break;
    }
    default: _mm512_mask_storeu_ps((float *)x + i, k, v); break;
    }
}

/* Values i .. i + 15 of x (the lanes of k; zero elsewhere) in fp32. */
ROW_INLINE __m512 load16(kvc_dtype_t dt, const void *x, size_t i, __mmask16 k)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i));
    case KVC_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)x + i)), 16));
    default: return _mm512_maskz_loadu_ps(k, (const float *)x + i);
    }
}

/* A row's 16 symbols of values v (lanes of k) to q + i. */
ROW_INLINE void quantise16(__m512 v, __m512 vf, __m512 vinv, __m512 vm, __m512i vmi, uint8_t *q, size_t i, __mmask16 k)
{
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(v, vf), vinv);
    y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y); /* NaN -> 0 */
    y = _mm512_min_ps(_mm512_max_ps(y, _mm512_sub_ps(_mm512_setzero_ps(), vm)), vm);
    const __m512i s = _mm512_add_epi32(_mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vmi);
    _mm_mask_storeu_epi8(q + i, k, _mm512_cvtepi32_epi8(s));
}

ROW_INLINE void quantise_t(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    const size_t C = r->channels, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    const __mmask16 tail = (__mmask16)((1u << (C % 16)) - 1);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)), inf = _mm512_set1_ps(__builtin_inff());
    const __m512 vm = _mm512_set1_ps((float)r->m);
    const __m512i vmi = _mm512_set1_epi32((int)r->m);
    for (size_t row = 0; row < r->rows; row++) {
        const void *x = (const char *)r->in + row * C * es;
        uint8_t *q = r->out + row * C;
        __m512 mx = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= C; i += 16) { /* largest finite |x|: NaN and inf compare false */
            const __m512 v = _mm512_and_ps(load16(dt, x, i, (__mmask16)0xFFFF), absmask);
            mx = _mm512_mask_max_ps(mx, _mm512_cmp_ps_mask(v, inf, _CMP_LT_OQ), mx, v);
        }
        if (tail) {
            const __m512 v = _mm512_and_ps(load16(dt, x, i, tail), absmask);
            mx = _mm512_mask_max_ps(mx, _mm512_cmp_ps_mask(v, inf, _CMP_LT_OQ), mx, v);
        }
        const float scale = _mm512_reduce_max_ps(mx), f = cg_prescale(scale);
        const __m512 vf = _mm512_set1_ps(f), vinv = _mm512_set1_ps(scale > 0.0f ? (float)r->m / (scale * f) : 0.0f);
        for (i = 0; i + 16 <= C; i += 16) quantise16(load16(dt, x, i, (__mmask16)0xFFFF), vf, vinv, vm, vmi, q, i, (__mmask16)0xFFFF);
        if (tail) quantise16(load16(dt, x, i, tail), vf, vinv, vm, vmi, q, i, tail);
        r->scales[row] = scale;
    }
}

void cg_quantise_rows_avx512(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: quantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: quantise_t(KVC_DTYPE_BF16, r); break;
    default: quantise_t(KVC_DTYPE_F32, r); break;
    }
}

ROW_INLINE void dequantise_t(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    const size_t C = r->channels, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    const __m512i vmi = _mm512_set1_epi32((int)r->m);
    const __mmask16 tail = (__mmask16)((1u << (C % 16)) - 1);
    for (size_t row = 0; row < r->rows; row++) {
        const float scale = r->scales[row], f = cg_prescale(scale);
        const __m512 step = _mm512_set1_ps(scale * f / (float)r->m), unscale = _mm512_set1_ps(1.0f / f);
        const uint8_t *q = r->in + row * C;
        void *out = (char *)r->out + row * C * es;
        size_t i = 0;
        for (; i + 16 <= C; i += 16) {
            const __m512i s = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(q + i))), vmi);
            store16(dt, out, i, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), step), unscale), (__mmask16)0xFFFF);
        }
        if (tail) {
            const __m512i s = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(tail, q + i)), vmi);
            store16(dt, out, i, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), step), unscale), tail);
        }
    }
}

void cg_dequantise_rows_avx512(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: dequantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: dequantise_t(KVC_DTYPE_BF16, r); break;
    default: dequantise_t(KVC_DTYPE_F32, r); break;
    }
}

/* ------------------------------------------------------------------ lane-parallel decoder */

#define LANES 16

/* The symbol of 32 lanes (registers 2p and 2p + 1 of a group, as 16-bit lanes): the count of
 * cdf[1 .. max_sym] that are <= key (LMCache's binary search), and, the matches being a prefix,
 * the largest cdf[s] and cdf[s + 1] - 1 among them (entry 0 when none). */
LANE_INLINE void lane_search(const uint16_t *lo, const uint16_t *hm, unsigned max_sym, const int NP,
                             const __m512i *key, __m512i *cnt, __m512i *sym_lo, __m512i *sym_hm)
{
    const __m512i ones = _mm512_set1_epi16(-1);
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
        cnt[p] = _mm512_setzero_si512();
        sym_lo[p] = _mm512_load_si512(lo + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES);
        sym_hm[p] = _mm512_load_si512(hm + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES);
    }
    for (unsigned s = 1; s <= max_sym; s++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const __m512i e = _mm512_load_si512(lo + ((size_t)p * KVC_CG_MAX_BINS + s) * 2 * LANES);
            const __mmask32 le = _mm512_cmple_epu16_mask(e, key[p]);
            cnt[p] = _mm512_mask_sub_epi16(cnt[p], le, cnt[p], ones);
            sym_lo[p] = _mm512_mask_max_epu16(sym_lo[p], le, sym_lo[p], e);
            sym_hm[p] = _mm512_mask_max_epu16(sym_hm[p], le, sym_hm[p], _mm512_load_si512(hm + ((size_t)p * KVC_CG_MAX_BINS + s) * 2 * LANES));
        }
}

/* The 16-bit lanes 16 h .. 16 h + 15 of x as 32-bit lanes. */
LANE_INLINE __m512i lane_half(__m512i x, int h)
{
    return _mm512_cvtepu16_epi32(h ? _mm512_extracti64x4_epi64(x, 1) : _mm512_castsi512_si256(x));
}

/* range * cdf >> 16 in 32-bit lanes for range = r1 + 1 = a * 2^16 + b: a * cdf + (b * cdf >> 16),
 * a up to 2^16 for the full range, whose products wrap as the scalar kernel's 64-bit ones
 * truncated to 32 bits do. */
LANE_INLINE void lane_range(__m512i r1, __m512i *a, __m512i *b)
{
    const __m512i one = _mm512_set1_epi32(1);
    *b = _mm512_and_si512(_mm512_add_epi32(r1, one), _mm512_set1_epi32(0xFFFF));
    const __m512i a0 = _mm512_srli_epi32(r1, 16);
    *a = _mm512_mask_add_epi32(a0, _mm512_testn_epi32_mask(*b, *b), a0, one);
}

LANE_INLINE __m512i lane_scale(__m512i a, __m512i b, __m512i cdf)
{
    return _mm512_add_epi32(_mm512_mullo_epi32(a, cdf), _mm512_srli_epi32(_mm512_mullo_epi32(b, cdf), 16));
}

/* Bulk renormalisation as in cpu_cachegen_coder.h: n1 common leading bits of lo and hi, n3
 * underflow steps after them; the state moves by one shift of n = n1 + n3. */
LANE_INLINE void lane_shifts(__m512i lo, __m512i hi, __m512i *n1, __m512i *n3)
{
    *n1 = _mm512_lzcnt_epi32(_mm512_xor_si512(lo, hi));
    const __m512i u = _mm512_sllv_epi32(_mm512_andnot_si512(hi, lo), _mm512_add_epi32(*n1, _mm512_set1_epi32(1)));
    *n3 = _mm512_lzcnt_epi32(_mm512_xor_si512(u, _mm512_set1_epi32(-1)));
}

/* high after the shift by n: hi << n with n ones shifted in, top bit set. */
LANE_INLINE __m512i lane_high(__m512i hi, __m512i n)
{
    const __m512i ones = _mm512_set1_epi32(-1);
    return _mm512_or_si512(_mm512_or_si512(_mm512_sllv_epi32(hi, n), _mm512_andnot_si512(_mm512_sllv_epi32(ones, n), ones)),
                           _mm512_set1_epi32((int)0x80000000u));
}

/* The streams of channels c .. c + 16 NV - 1 of layer l, NV registers of 16 lanes advanced token
 * by token (the registers' dependency chains overlap). Every lane does what cg_dec_run does for
 * its stream; returns 0, having written nothing, when the streams do not fit 32-bit gather
 * offsets, so that the caller decodes them with the scalar kernel. */
LANE_INLINE int lane_decode(const cg_dec_job_t *j, size_t l, size_t c, const int NV)
{
    lane_dec_group_t g;
    if (!lane_dec_load(j, l, c, NV * LANES, LANES, &g)) return 0;
    const size_t C = j->channels;
    const unsigned max_sym = j->num_bins - 1;
    const uint8_t *base = g.base;
    const __m512i one = _mm512_set1_epi32(1), ones = _mm512_set1_epi32(-1), k31 = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i k32 = _mm512_set1_epi32(32), twelve = _mm512_set1_epi32(12), seven = _mm512_set1_epi32(7);
    const __m512i lane16 = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(16));
    const __m512i bswap = _mm512_broadcast_i32x4(_mm_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12));
    __m512i low[4], r1[4], d[4], bp[4], vo[4], vlim[4], vtb[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        low[v] = _mm512_setzero_si512();
        r1[v] = ones; /* high - low */
        d[v] = _mm512_loadu_si512(g.d0 + v * LANES);
        bp[v] = k32;
        vo[v] = _mm512_loadu_si512(g.off + v * LANES);
        vlim[v] = _mm512_loadu_si512(g.lim + v * LANES);
        vtb[v] = _mm512_loadu_si512(g.tbeg + v * LANES);
    }
    uint8_t *row = j->symbols + l * j->tokens * C + c;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C, 1);
        __m256i count[4];
        __m512i bits[4], key[2], cnt[2], sym_lo[2], sym_hm[2];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            count[v] = _mm512_cvtepi32_epi16(cg_lane_quotient(d[v], r1[v])); /* & 0xFFFF, as the scalar */
            /* The 4 bytes at the lane's byte position, from its stream (or the copy) while they
             * lie inside it (or the zeros after the copy), else from its zero-padded last bytes;
             * the top 25 bits after the shift are the next bits of the stream (a symbol takes at
             * most 18). */
            const __m512i at = _mm512_srli_epi32(bp[v], 3);
            const __mmask16 inside = _mm512_cmple_epi32_mask(at, vlim[v]);
            __m512i w = _mm512_setzero_si512();
            if (inside) w = _mm512_mask_i32gather_epi32(w, inside, _mm512_add_epi32(vo[v], at), base, 1);
            if (inside != 0xFFFF) {
                const __m512i ti = _mm512_add_epi32(lane16, _mm512_min_epu32(_mm512_sub_epi32(at, vtb[v]), twelve));
                w = _mm512_mask_i32gather_epi32(w, (__mmask16)~inside, ti, g.tail[v * LANES], 1);
            }
            bits[v] = _mm512_sllv_epi32(_mm512_shuffle_epi8(w, bswap), _mm512_and_si512(bp[v], seven));
        }
#pragma GCC unroll 2
        for (int p = 0; p < (NV + 1) / 2; p++)
            key[p] = _mm512_inserti64x4(_mm512_castsi256_si512(count[2 * p]),
                                        2 * p + 1 < NV ? count[2 * p + 1] : _mm256_setzero_si256(), 1);
        lane_search(g.lo, g.hm, max_sym, (NV + 1) / 2, key, cnt, sym_lo, sym_hm);
        if (NV == 1) _mm_storeu_si128((__m128i *)(void *)row, _mm256_castsi256_si128(_mm512_cvtepi16_epi8(cnt[0])));
#pragma GCC unroll 2
        for (int p = 0; p < NV / 2; p++)
            _mm256_storeu_si256((__m256i *)(void *)(row + 2 * p * LANES), _mm512_cvtepi16_epi8(cnt[p]));
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m512i a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const __m512i lo_off = lane_scale(a, b, lane_half(sym_lo[v / 2], v % 2));
            const __m512i hi_off = lane_scale(a, b, _mm512_add_epi32(lane_half(sym_hm[v / 2], v % 2), one));
            const __m512i lo = _mm512_add_epi32(low[v], lo_off), hi = _mm512_sub_epi32(_mm512_add_epi32(low[v], hi_off), one);
            lane_shifts(lo, hi, &n1, &n3);
            const __m512i n = _mm512_add_epi32(n1, n3);
            low[v] = _mm512_and_si512(_mm512_sllv_epi32(lo, n), k31);
            r1[v] = _mm512_sub_epi32(lane_high(hi, n), low[v]);
            /* d - lo_off, shifted by n, with the stream's next n bits below */
            d[v] = _mm512_or_si512(_mm512_sllv_epi32(_mm512_sub_epi32(d[v], lo_off), n),
                                   _mm512_srlv_epi32(bits[v], _mm512_sub_epi32(k32, n)));
            bp[v] = _mm512_add_epi32(bp[v], n);
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ lane-parallel encoder */

/* The streams of channels c .. c + 16 NV - 1 of layer l, the symbols' bounds by a gather from
 * each register's transposed table, the arithmetic as in the decoder, and the output bits
 * appended in the lanes: a lane whose accumulator fills stores its word by a scalar store (a
 * lane fills one every 32 / (bits a symbol) tokens), one whose underflow run does not fit one
 * append goes through lane_emit. */
LANE_INLINE void lane_encode(const cg_enc_job_t *j, size_t l, size_t c, const int NV)
{
    lane_enc_table_t tab;
    uint32_t vacc[LANES], vnb[LANES], vword[LANES], vtop[LANES], vn1[LANES], vpend[LANES];
    lane_out_t o[4 * LANES];
    const size_t C = j->channels, cap = j->capacity;
    lane_enc_load(j, l, c, NV * LANES, LANES, &tab, o);
    const __m512i ffff = _mm512_set1_epi32(0xFFFF), one = _mm512_set1_epi32(1), ones = _mm512_set1_epi32(-1);
    const __m512i k31 = _mm512_set1_epi32(0x7FFFFFFF), k32 = _mm512_set1_epi32(32);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i low[4], r1[4], pend[4], acc[4], nb[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        low[v] = _mm512_setzero_si512();
        r1[v] = ones;
        pend[v] = acc[v] = nb[v] = _mm512_setzero_si512();
    }
    const uint8_t *row = j->symbols + l * j->tokens * C + c;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m512i sym = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(row + v * LANES)));
            const __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(_mm512_slli_epi32(sym, 4), lane),
                                                   tab.ent + v * KVC_CG_MAX_BINS * LANES, 4);
            const __m512i lo_c = _mm512_and_si512(e, ffff), hi_c = _mm512_add_epi32(_mm512_srli_epi32(e, 16), one);
            __m512i a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const __m512i lo = _mm512_add_epi32(low[v], lane_scale(a, b, lo_c));
            const __m512i hi = _mm512_sub_epi32(_mm512_add_epi32(low[v], lane_scale(a, b, hi_c)), one);
            lane_shifts(lo, hi, &n1, &n3);
            const __m512i n = _mm512_add_epi32(n1, n3);
            /* n1 decided bits (top): b, `pend` copies of !b (2^p - 1 + b over p + 1 bits), the
             * other n1 - 1; shift counts of 32 or more give 0 where n1 = 0. */
            const __mmask16 nz = _mm512_test_epi32_mask(n1, n1);
            const __m512i top = _mm512_srlv_epi32(lo, _mm512_sub_epi32(k32, n1));
            const __m512i n1m = _mm512_sub_epi32(n1, one);
            const __m512i first = _mm512_add_epi32(_mm512_sub_epi32(_mm512_sllv_epi32(one, pend[v]), one),
                                                   _mm512_srlv_epi32(top, n1m));
            const __m512i w = _mm512_maskz_or_epi32(nz, _mm512_sllv_epi32(first, n1m),
                                                    _mm512_andnot_si512(_mm512_sllv_epi32(ones, n1m), top));
            const __m512i k = _mm512_maskz_add_epi32(nz, pend[v], n1);
            const __mmask16 lng = _mm512_mask_cmpgt_epu32_mask(nz, k, k32);
            const __m512i total = _mm512_add_epi32(nb[v], k), r = _mm512_sub_epi32(total, k32);
            const __mmask16 full = _mm512_mask_cmpge_epu32_mask((__mmask16)~lng, total, k32);
            const __m512i word = _mm512_or_si512(_mm512_sllv_epi32(acc[v], _mm512_sub_epi32(k32, nb[v])),
                                                 _mm512_srlv_epi32(w, r));
            __m512i nacc = _mm512_or_si512(_mm512_sllv_epi32(acc[v], k), w);
            nacc = _mm512_mask_andnot_epi32(nacc, full, _mm512_sllv_epi32(ones, r), w);
            const __m512i nnb = _mm512_mask_mov_epi32(total, full, r);
            if (lng) { /* the old accumulator, the run, through lane_emit */
                _mm512_storeu_si512(vacc, acc[v]);
                _mm512_storeu_si512(vnb, nb[v]);
                _mm512_storeu_si512(vtop, top);
                _mm512_storeu_si512(vn1, n1);
                _mm512_storeu_si512(vpend, pend[v]);
            }
            acc[v] = _mm512_mask_mov_epi32(acc[v], (__mmask16)~lng, nacc);
            nb[v] = _mm512_mask_mov_epi32(nb[v], (__mmask16)~lng, nnb);
            pend[v] = _mm512_mask_mov_epi32(_mm512_add_epi32(pend[v], n3), nz, n3);
            low[v] = _mm512_and_si512(_mm512_sllv_epi32(lo, n), k31);
            r1[v] = _mm512_sub_epi32(lane_high(hi, n), low[v]);
            if (full) {
                _mm512_storeu_si512(vword, word);
                lane_store_words(o + v * LANES, cap, full, vword);
            }
            if (lng) {
                lane_emit_runs(o + v * LANES, cap, lng, vacc, vnb, vtop, vn1, vpend);
                acc[v] = _mm512_mask_loadu_epi32(acc[v], lng, vacc);
                nb[v] = _mm512_mask_loadu_epi32(nb[v], lng, vnb);
            }
        }
    }
    for (int v = 0; v < NV; v++) {
        uint32_t lw[LANES];
        _mm512_storeu_si512(lw, low[v]);
        _mm512_storeu_si512(vacc, acc[v]);
        _mm512_storeu_si512(vnb, nb[v]);
        _mm512_storeu_si512(vpend, pend[v]);
        lane_flush(j, l * C + c + (size_t)(v * LANES), o + v * LANES, LANES, lw, vacc, vnb, vpend);
    }
}

/* Groups of 64, 32 and 16 channels through the lanes, the rest through the avx2 tier's lanes. */
LANE_DEFINE_DRIVERS(avx512, cg_kernels_avx2.encode, cg_kernels_avx2.decode)
