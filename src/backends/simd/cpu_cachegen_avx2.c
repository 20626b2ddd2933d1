/* SPDX-License-Identifier: BSD-3-Clause */
/* AVX2 CacheGen kernels: the lane-parallel coder in 8 lanes, the interleaved per-stream coder with a
 * SIMD compare-and-count symbol search for the channels it leaves, and the quantiser rows with
 * in-register fp16/bf16 conversion. Compiled with the avx2 tier's flags (Makefile.am,
 * KVC_AVX2_FLAGS: AVX2, FMA, F16C, BMI1/2, LZCNT, POPCNT, which the tier requires) and used for the
 * avx2 and avx512 tiers. Every result equals the scalar kernels' bit for bit. */
#include "config.h"

#include "common/halfs.h"
#include "cpu_cachegen.h"
#include "cpu_cachegen_lanes.h"

#include <immintrin.h>

/* ------------------------------------------------------------------ coder */

/* Entries of tab[0..32) that are <= count: unsigned 16-bit compare as max(x, c) == c. */
static inline __attribute__((always_inline)) unsigned cg_search32_avx2(const uint16_t *tab, uint32_t count)
{
    const __m256i c = _mm256_set1_epi16((short)count);
    const __m256i a = _mm256_load_si256((const __m256i *)tab), b = _mm256_load_si256((const __m256i *)(tab + 16));
    const __m256i le = _mm256_packs_epi16(_mm256_cmpeq_epi16(_mm256_max_epu16(a, c), c),
                                          _mm256_cmpeq_epi16(_mm256_max_epu16(b, c), c));
    return (unsigned)__builtin_popcount((unsigned)_mm256_movemask_epi8(le));
}

static inline __attribute__((always_inline)) unsigned cg_search64_avx2(const uint16_t *tab, uint32_t count)
{
    return cg_search32_avx2(tab, count) + cg_search32_avx2(tab + 32, count);
}

#define CG_SEARCH32(tab, count) cg_search32_avx2((tab), (count))
#define CG_SEARCH64(tab, count) cg_search64_avx2((tab), (count))
#include "cpu_cachegen_coder.h"
CG_DEFINE_CODER(avx2)

/* ------------------------------------------------------------------ quantiser rows */

#define CG_ROW_INLINE static inline __attribute__((always_inline))

CG_ROW_INLINE __m256 load8(kvc_dtype_t dt, const void *x, size_t i)
{
    switch (dt) {
    case KVC_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)));
    case KVC_DTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i))), 16));
    default: return _mm256_loadu_ps((const float *)x + i);
    }
}

/* Round to nearest even into dt. bf16 by integer rounding of the bit pattern (the values come
 * from dequantisation, never NaN). */
CG_ROW_INLINE void store8(kvc_dtype_t dt, void *x, size_t i, __m256 v)
{
    switch (dt) {
    case KVC_DTYPE_F16:
        _mm_storeu_si128((__m128i *)((uint16_t *)x + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        break;
    case KVC_DTYPE_BF16: {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
        _mm_storeu_si128((__m128i *)((uint16_t *)x + i),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
        break;
    }
    default: _mm256_storeu_ps((float *)x + i, v); break;
    }
}

static size_t esize(kvc_dtype_t dt) { return dt == KVC_DTYPE_F32 ? 4 : 2; }

CG_ROW_INLINE float absmax_t(kvc_dtype_t dt, const void *x, size_t n)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), inf = _mm256_set1_ps(__builtin_inff());
    __m256 m = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_and_ps(load8(dt, x, i), absmask);
        m = _mm256_max_ps(m, _mm256_and_ps(v, _mm256_cmp_ps(v, inf, _CMP_LT_OQ))); /* NaN, inf -> 0 */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float head = _mm_cvtss_f32(h);
    const float tail = i < n ? cg_row_absmax_scalar(dt, (const char *)x + i * esize(dt), n - i) : 0.0f;
    return head > tail ? head : tail;
}

CG_ROW_INLINE void quantise_t(kvc_dtype_t dt, const cg_quant_row_t *r, float scale)
{
    const float m = (float)r->m, f = cg_prescale(scale);
    const __m256 vf = _mm256_set1_ps(f), vinv = _mm256_set1_ps(scale > 0.0f ? m / (scale * f) : 0.0f);
    const __m256 vm = _mm256_set1_ps(m), vnegm = _mm256_set1_ps(-m);
    const __m256i vmi = _mm256_set1_epi32((int)r->m);
    uint8_t *q = r->out;
    size_t i = 0;
    for (; i + 8 <= r->channels; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_mul_ps(load8(dt, r->in, i), vf), vinv);
        y = _mm256_and_ps(y, _mm256_cmp_ps(y, y, _CMP_ORD_Q)); /* NaN -> 0 */
        y = _mm256_min_ps(_mm256_max_ps(y, vnegm), vm);
        const __m256i s = _mm256_add_epi32(
            _mm256_cvtps_epi32(_mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), vmi);
        const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(w, w));
    }
    if (i < r->channels) {
        const cg_quant_row_t tail = { .in = (const char *)r->in + i * esize(dt), .out = q + i,
                                      .channels = r->channels - i, .m = r->m };
        cg_quantise_row_scalar(dt, &tail, scale);
    }
}

CG_ROW_INLINE void dequantise_t(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    const __m256i vmi = _mm256_set1_epi32((int)r->m);
    const size_t C = r->channels;
    for (size_t row = 0; row < r->rows; row++) {
        const float scale = r->scales[row], f = cg_prescale(scale);
        const uint8_t *q = r->in + row * C;
        void *out = (char *)r->out + row * C * esize(dt);
        size_t i = 0;
        if (f == 1.0f) { /* a scale in [2^-64, 2^64]: (x * step) * 1 is x * step bit for bit, so one multiply and no 1 / f */
            const __m256 step = _mm256_set1_ps(scale / (float)r->m);
            for (; i + 8 <= C; i += 8) {
                const __m256i s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i))), vmi);
                store8(dt, out, i, _mm256_mul_ps(_mm256_cvtepi32_ps(s), step));
            }
        } else {
            const __m256 step = _mm256_set1_ps(scale * f / (float)r->m), unscale = _mm256_set1_ps(1.0f / f);
            for (; i + 8 <= C; i += 8) {
                const __m256i s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i))), vmi);
                store8(dt, out, i, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), step), unscale));
            }
        }
        if (i < C) {
            const cg_quant_row_t tail = { .in = q + i, .out = (char *)out + i * esize(dt), .channels = C - i, .m = r->m };
            cg_dequantise_row_scalar(dt, &tail, scale);
        }
    }
}

CG_ROW_INLINE void quantise_rows_t(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    for (size_t i = 0; i < r->rows; i++) {
        const void *x = (const char *)r->in + i * r->channels * esize(dt);
        const cg_quant_row_t row = { .in = x, .out = r->out + i * r->channels, .channels = r->channels, .m = r->m };
        const float scale = absmax_t(dt, x, r->channels);
        quantise_t(dt, &row, scale);
        r->scales[i] = scale;
    }
}

static void quantise_rows_avx2(kvc_dtype_t dt, const cg_quant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: quantise_rows_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: quantise_rows_t(KVC_DTYPE_BF16, r); break;
    default: quantise_rows_t(KVC_DTYPE_F32, r); break;
    }
}

static void dequantise_rows_avx2(kvc_dtype_t dt, const cg_dequant_rows_t *r)
{
    switch (dt) {
    case KVC_DTYPE_F16: dequantise_t(KVC_DTYPE_F16, r); break;
    case KVC_DTYPE_BF16: dequantise_t(KVC_DTYPE_BF16, r); break;
    default: dequantise_t(KVC_DTYPE_F32, r); break;
    }
}

/* F16C (every AVX2 CPU has it): 8 fp16 a conversion, exact for every input (subnormals too, DAZ
 * does not apply to it); bf16 is its bits shifted up. The tail by the portable code. */
static void halves_to_f32_avx2(const uint8_t *p, size_t n, int bf16, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        const __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
        _mm256_storeu_ps(out + i, f);
    }
    kvc_halfs_to_f32(p + 2 * i, n - i, bf16, out + i);
}

/* ------------------------------------------------------------------ lane-parallel coder */

/* The avx512 tier's lane-parallel coder (cpu_cachegen_avx512.c, docs/CACHEGEN.md) in 8 lanes: the
 * same steps, with vector masks for mask registers, cg_lane_lzcnt for vplzcntd and unsigned
 * compares by min / max. */

#define LANES 8

/* x <= y as unsigned 32-bit lanes (all ones where true). */
LANE_INLINE __m256i lane_le_epu32(__m256i x, __m256i y) { return _mm256_cmpeq_epi32(_mm256_min_epu32(x, y), x); }

LANE_INLINE unsigned lane_bits(__m256i m) { return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m)); }

/* The symbol of 16 lanes (registers 2p and 2p + 1 of a group, as 16-bit lanes): the count of
 * cdf[1 .. max_sym] that are <= key, and the largest cdf[s] and cdf[s + 1] - 1 among them
 * (entry 0 when none; the matches are a prefix, and unmatched entries are masked to 0). */
LANE_INLINE void lane_search(const uint16_t *lo, const uint16_t *hm, unsigned max_sym, const int NP,
                             const __m256i *key, __m256i *cnt, __m256i *sym_lo, __m256i *sym_hm)
{
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
        cnt[p] = _mm256_setzero_si256();
        sym_lo[p] = _mm256_load_si256((const __m256i *)(const void *)(lo + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES));
        sym_hm[p] = _mm256_load_si256((const __m256i *)(const void *)(hm + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES));
    }
    for (unsigned s = 1; s <= max_sym; s++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const size_t at = ((size_t)p * KVC_CG_MAX_BINS + s) * 2 * LANES;
            const __m256i e = _mm256_load_si256((const __m256i *)(const void *)(lo + at));
            const __m256i le = _mm256_cmpeq_epi16(_mm256_max_epu16(e, key[p]), key[p]);
            cnt[p] = _mm256_sub_epi16(cnt[p], le);
            sym_lo[p] = _mm256_max_epu16(sym_lo[p], _mm256_and_si256(e, le));
            sym_hm[p] = _mm256_max_epu16(sym_hm[p], _mm256_and_si256(_mm256_load_si256((const __m256i *)(const void *)(hm + at)), le));
        }
}

/* The 16-bit lanes 8 h .. 8 h + 7 of x as 32-bit lanes. */
LANE_INLINE __m256i lane_half(__m256i x, int h)
{
    return _mm256_cvtepu16_epi32(h ? _mm256_extracti128_si256(x, 1) : _mm256_castsi256_si128(x));
}

/* range * cdf >> 16 as a * cdf + (b * cdf >> 16) for range = r1 + 1 = a * 2^16 + b (the avx512
 * tier's lane_range). */
LANE_INLINE void lane_range(__m256i r1, __m256i *a, __m256i *b)
{
    *b = _mm256_and_si256(_mm256_add_epi32(r1, _mm256_set1_epi32(1)), _mm256_set1_epi32(0xFFFF));
    *a = _mm256_sub_epi32(_mm256_srli_epi32(r1, 16), _mm256_cmpeq_epi32(*b, _mm256_setzero_si256()));
}

LANE_INLINE __m256i lane_scale(__m256i a, __m256i b, __m256i cdf)
{
    return _mm256_add_epi32(_mm256_mullo_epi32(a, cdf), _mm256_srli_epi32(_mm256_mullo_epi32(b, cdf), 16));
}

LANE_INLINE void lane_shifts(__m256i lo, __m256i hi, __m256i *n1, __m256i *n3)
{
    *n1 = cg_lane_lzcnt(_mm256_xor_si256(lo, hi));
    const __m256i u = _mm256_sllv_epi32(_mm256_andnot_si256(hi, lo), _mm256_add_epi32(*n1, _mm256_set1_epi32(1)));
    *n3 = cg_lane_lzcnt(_mm256_xor_si256(u, _mm256_set1_epi32(-1)));
}

LANE_INLINE __m256i lane_high(__m256i hi, __m256i n)
{
    const __m256i ones = _mm256_set1_epi32(-1);
    return _mm256_or_si256(_mm256_or_si256(_mm256_sllv_epi32(hi, n), _mm256_andnot_si256(_mm256_sllv_epi32(ones, n), ones)),
                           _mm256_set1_epi32((int)0x80000000u));
}

/* The streams of channels c .. c + 8 NV - 1 of layer l in NV registers (lane_decode of the avx512
 * tier); 0 when they do not fit 32-bit gather offsets. */
LANE_INLINE int lane_decode(const cg_dec_job_t *j, size_t l, size_t c, const int NV)
{
    lane_dec_group_t g;
    if (!lane_dec_load(j, l, c, NV * LANES, LANES, &g)) return 0;
    const size_t C = j->channels;
    const unsigned max_sym = j->num_bins - 1;
    const int *base = (const int *)(const void *)g.base;
    const __m256i one = _mm256_set1_epi32(1), ones = _mm256_set1_epi32(-1), k31 = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i k32 = _mm256_set1_epi32(32), twelve = _mm256_set1_epi32(12), seven = _mm256_set1_epi32(7);
    const __m256i ffff = _mm256_set1_epi32(0xFFFF), lane16 = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    const __m256i bswap = _mm256_broadcastsi128_si256(_mm_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12));
    __m256i low[4], r1[4], d[4], bp[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        low[v] = _mm256_setzero_si256();
        r1[v] = ones; /* high - low */
        d[v] = _mm256_loadu_si256((const __m256i *)(const void *)(g.d0 + v * LANES));
        bp[v] = k32;
    }
    uint8_t *row = j->symbols + l * j->tokens * C + c;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C, 1);
        __m256i count[4], bits[4], key[2], cnt[2], sym_lo[2], sym_hm[2];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            count[v] = _mm256_and_si256(cg_lane_quotient(d[v], r1[v]), ffff); /* & 0xFFFF, as the scalar */
            /* The 4 bytes at the lane's byte position from its stream while inside it, else from
             * its zero-padded last bytes (the avx512 tier's reads). */
            const __m256i at = _mm256_srli_epi32(bp[v], 3);
            const __m256i vlim = _mm256_loadu_si256((const __m256i *)(const void *)(g.lim + v * LANES));
            const __m256i inside = _mm256_xor_si256(_mm256_cmpgt_epi32(at, vlim), ones);
            const unsigned in = lane_bits(inside);
            __m256i w = _mm256_setzero_si256();
            if (in) {
                const __m256i vo = _mm256_loadu_si256((const __m256i *)(const void *)(g.off + v * LANES));
                w = _mm256_mask_i32gather_epi32(w, base, _mm256_add_epi32(vo, at), inside, 1);
            }
            if (in != 0xFF) {
                const __m256i vtb = _mm256_loadu_si256((const __m256i *)(const void *)(g.tbeg + v * LANES));
                const __m256i ti = _mm256_add_epi32(lane16, _mm256_min_epu32(_mm256_sub_epi32(at, vtb), twelve));
                w = _mm256_mask_i32gather_epi32(w, (const int *)(const void *)g.tail[v * LANES], ti,
                                                _mm256_xor_si256(inside, ones), 1);
            }
            bits[v] = _mm256_sllv_epi32(_mm256_shuffle_epi8(w, bswap), _mm256_and_si256(bp[v], seven));
        }
#pragma GCC unroll 2
        for (int p = 0; p < (NV + 1) / 2; p++) /* packus keeps 128-bit halves: the permute orders them */
            key[p] = _mm256_permute4x64_epi64(
                _mm256_packus_epi32(count[2 * p], 2 * p + 1 < NV ? count[2 * p + 1] : _mm256_setzero_si256()), 0xD8);
        lane_search(g.lo, g.hm, max_sym, (NV + 1) / 2, key, cnt, sym_lo, sym_hm);
        if (NV == 1)
            _mm_storel_epi64((__m128i *)(void *)row, _mm_packus_epi16(_mm256_castsi256_si128(cnt[0]), _mm256_castsi256_si128(cnt[0])));
#pragma GCC unroll 2
        for (int p = 0; p < NV / 2; p++)
            _mm_storeu_si128((__m128i *)(void *)(row + 2 * p * LANES),
                             _mm_packus_epi16(_mm256_castsi256_si128(cnt[p]), _mm256_extracti128_si256(cnt[p], 1)));
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m256i a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const __m256i lo_off = lane_scale(a, b, lane_half(sym_lo[v / 2], v % 2));
            const __m256i hi_off = lane_scale(a, b, _mm256_add_epi32(lane_half(sym_hm[v / 2], v % 2), one));
            const __m256i lo = _mm256_add_epi32(low[v], lo_off), hi = _mm256_sub_epi32(_mm256_add_epi32(low[v], hi_off), one);
            lane_shifts(lo, hi, &n1, &n3);
            const __m256i n = _mm256_add_epi32(n1, n3);
            low[v] = _mm256_and_si256(_mm256_sllv_epi32(lo, n), k31);
            r1[v] = _mm256_sub_epi32(lane_high(hi, n), low[v]);
            d[v] = _mm256_or_si256(_mm256_sllv_epi32(_mm256_sub_epi32(d[v], lo_off), n),
                                   _mm256_srlv_epi32(bits[v], _mm256_sub_epi32(k32, n)));
            bp[v] = _mm256_add_epi32(bp[v], n);
        }
    }
    return 1;
}

/* The streams of channels c .. c + 8 NV - 1 of layer l (lane_encode of the avx512 tier). */
LANE_INLINE void lane_encode(const cg_enc_job_t *j, size_t l, size_t c, const int NV)
{
    lane_enc_table_t tab;
    uint32_t vacc[LANES], vnb[LANES], vword[LANES], vtop[LANES], vn1[LANES], vpend[LANES];
    lane_out_t o[4 * LANES];
    const size_t C = j->channels, cap = j->capacity;
    lane_enc_load(j, l, c, NV * LANES, LANES, &tab, o);
    const __m256i ffff = _mm256_set1_epi32(0xFFFF), one = _mm256_set1_epi32(1), ones = _mm256_set1_epi32(-1);
    const __m256i k31 = _mm256_set1_epi32(0x7FFFFFFF), k32 = _mm256_set1_epi32(32), zero = _mm256_setzero_si256();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i low[4], r1[4], pend[4], acc[4], nb[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        low[v] = zero;
        r1[v] = ones;
        pend[v] = acc[v] = nb[v] = zero;
    }
    const uint8_t *row = j->symbols + l * j->tokens * C + c;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m256i sym = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(row + v * LANES)));
            const __m256i e = _mm256_i32gather_epi32((const int *)(const void *)(tab.ent + v * KVC_CG_MAX_BINS * LANES),
                                                     _mm256_add_epi32(_mm256_slli_epi32(sym, 3), lane), 4);
            const __m256i lo_c = _mm256_and_si256(e, ffff), hi_c = _mm256_add_epi32(_mm256_srli_epi32(e, 16), one);
            __m256i a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const __m256i lo = _mm256_add_epi32(low[v], lane_scale(a, b, lo_c));
            const __m256i hi = _mm256_sub_epi32(_mm256_add_epi32(low[v], lane_scale(a, b, hi_c)), one);
            lane_shifts(lo, hi, &n1, &n3);
            const __m256i n = _mm256_add_epi32(n1, n3);
            /* the decided bits as one append where they fit (the avx512 tier's lane_encode) */
            const __m256i nz = _mm256_xor_si256(_mm256_cmpeq_epi32(n1, zero), ones);
            const __m256i top = _mm256_srlv_epi32(lo, _mm256_sub_epi32(k32, n1));
            const __m256i n1m = _mm256_sub_epi32(n1, one);
            const __m256i first = _mm256_add_epi32(_mm256_sub_epi32(_mm256_sllv_epi32(one, pend[v]), one),
                                                   _mm256_srlv_epi32(top, n1m));
            const __m256i w = _mm256_and_si256(nz, _mm256_or_si256(_mm256_sllv_epi32(first, n1m),
                                                                   _mm256_andnot_si256(_mm256_sllv_epi32(ones, n1m), top)));
            const __m256i k = _mm256_and_si256(nz, _mm256_add_epi32(pend[v], n1));
            const __m256i lng = _mm256_andnot_si256(lane_le_epu32(k, k32), nz);
            const __m256i total = _mm256_add_epi32(nb[v], k), r = _mm256_sub_epi32(total, k32);
            const __m256i full = _mm256_andnot_si256(lng, lane_le_epu32(k32, total));
            const __m256i word = _mm256_or_si256(_mm256_sllv_epi32(acc[v], _mm256_sub_epi32(k32, nb[v])),
                                                 _mm256_srlv_epi32(w, r));
            __m256i nacc = _mm256_or_si256(_mm256_sllv_epi32(acc[v], k), w);
            nacc = _mm256_blendv_epi8(nacc, _mm256_andnot_si256(_mm256_sllv_epi32(ones, r), w), full);
            const __m256i nnb = _mm256_blendv_epi8(total, r, full);
            const unsigned mlng = lane_bits(lng), mfull = lane_bits(full);
            if (mlng) { /* the old accumulator, the run, through lane_emit */
                _mm256_storeu_si256((__m256i *)(void *)vacc, acc[v]);
                _mm256_storeu_si256((__m256i *)(void *)vnb, nb[v]);
                _mm256_storeu_si256((__m256i *)(void *)vtop, top);
                _mm256_storeu_si256((__m256i *)(void *)vn1, n1);
                _mm256_storeu_si256((__m256i *)(void *)vpend, pend[v]);
            }
            acc[v] = _mm256_blendv_epi8(nacc, acc[v], lng);
            nb[v] = _mm256_blendv_epi8(nnb, nb[v], lng);
            pend[v] = _mm256_blendv_epi8(_mm256_add_epi32(pend[v], n3), n3, nz);
            low[v] = _mm256_and_si256(_mm256_sllv_epi32(lo, n), k31);
            r1[v] = _mm256_sub_epi32(lane_high(hi, n), low[v]);
            if (mfull) {
                _mm256_storeu_si256((__m256i *)(void *)vword, word);
                lane_store_words(o + v * LANES, cap, mfull, vword);
            }
            if (mlng) {
                lane_emit_runs(o + v * LANES, cap, mlng, vacc, vnb, vtop, vn1, vpend);
                acc[v] = _mm256_blendv_epi8(acc[v], _mm256_loadu_si256((const __m256i *)(const void *)vacc), lng);
                nb[v] = _mm256_blendv_epi8(nb[v], _mm256_loadu_si256((const __m256i *)(const void *)vnb), lng);
            }
        }
    }
    for (int v = 0; v < NV; v++) {
        uint32_t lw[LANES];
        _mm256_storeu_si256((__m256i *)(void *)lw, low[v]);
        _mm256_storeu_si256((__m256i *)(void *)vacc, acc[v]);
        _mm256_storeu_si256((__m256i *)(void *)vnb, nb[v]);
        _mm256_storeu_si256((__m256i *)(void *)vpend, pend[v]);
        lane_flush(j, l * C + c + (size_t)(v * LANES), o + v * LANES, LANES, lw, vacc, vnb, vpend);
    }
}

/* Groups of 32, 16 and 8 channels through the lanes, the rest through the interleaved kernel. */
LANE_DEFINE_DRIVERS(avx2, cg_encode_streams_avx2, cg_decode_streams_avx2)

const cg_kernels_t cg_kernels_avx2 = {
    .encode = cg_encode_lanes_avx2,
    .decode = cg_decode_lanes_avx2,
    .quantise_rows = quantise_rows_avx2,
    .dequantise_rows = dequantise_rows_avx2,
    .halves_to_f32 = halves_to_f32_avx2,
};

/* The AVX-512 tier: the lane-parallel coder (this one for channels left over), and 16-lane
 * quantiser rows with masked tails. */
const cg_kernels_t cg_kernels_avx512 = {
    .encode = cg_encode_lanes_avx512,
    .decode = cg_decode_lanes_avx512,
    .quantise_rows = cg_quantise_rows_avx512,
    .dequantise_rows = cg_dequantise_rows_avx512,
    .halves_to_f32 = halves_to_f32_avx2,
};
