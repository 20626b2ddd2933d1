/* SPDX-License-Identifier: BSD-3-Clause */
/* The AVX-512 tier's arithmetic decoder, 16 streams in the lanes of a register (docs/CACHEGEN.md,
 * "Lane-parallel decoder"), and its quantiser and dequantiser rows: 16 values a step, a row's
 * last values through masked loads and stores instead of the scalar tail. The same operations as the scalar rows (cpu_cachegen_quant.c): the
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
#define LANE_INLINE static inline __attribute__((always_inline))
/* Bit positions (32 + at most 18 bits a token) stay below 2^32. */
#define LANE_MAX_TOKENS (1u << 27)
/* Longer streams go to the scalar kernel: 8 * (len + 4) stays below 2^31. */
#define LANE_MAX_LEN (1u << 27)
/* Streams of a group copied side by side up to this many bytes, each followed by LANE_PAD zeros. */
#define LANE_COPY_MAX (32u << 10) /* on the stack, with 16 KiB of tables */
#define LANE_PAD 8

/* Stream k's first byte (offset from the job's base) and its length. */
static void lane_stream(const cg_dec_job_t *j, size_t k, size_t *start, size_t *len)
{
    if (j->prefsum) {
        *start = k ? (size_t)j->prefsum[k - 1] : 0;
        *len = (size_t)j->prefsum[k] - *start;
    } else {
        *start = k * j->stride;
        *len = (size_t)j->lengths[k];
    }
}

/* The symbol of 32 lanes (registers 2p and 2p + 1 of a group, as 16-bit lanes): the count of
 * cdf[1 .. max_sym] that are <= key (LMCache's binary search), and, the matches being a prefix,
 * the largest cdf[s] and cdf[s + 1] - 1 among them (entry 0 when none). */
LANE_INLINE void lane_search(const uint16_t (*lo)[KVC_CG_MAX_BINS][2 * LANES],
                             const uint16_t (*hm)[KVC_CG_MAX_BINS][2 * LANES], unsigned max_sym, const int NP,
                             const __m512i *key, __m512i *cnt, __m512i *sym_lo, __m512i *sym_hm)
{
    const __m512i ones = _mm512_set1_epi16(-1);
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
        cnt[p] = _mm512_setzero_si512();
        sym_lo[p] = _mm512_load_si512(lo[p][0]);
        sym_hm[p] = _mm512_load_si512(hm[p][0]);
    }
    for (unsigned s = 1; s <= max_sym; s++)
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++) {
            const __m512i e = _mm512_load_si512(lo[p][s]);
            const __mmask32 le = _mm512_cmple_epu16_mask(e, key[p]);
            cnt[p] = _mm512_mask_sub_epi16(cnt[p], le, cnt[p], ones);
            sym_lo[p] = _mm512_mask_max_epu16(sym_lo[p], le, sym_lo[p], e);
            sym_hm[p] = _mm512_mask_max_epu16(sym_hm[p], le, sym_hm[p], _mm512_load_si512(hm[p][s]));
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
    /* Per pair of registers: cdf[s] and cdf[s + 1] - 1 (65535 for the last symbol) of its 32
     * channels, both increasing in s; and the last bytes of each stream, zero padded. */
    uint16_t tlo[2][KVC_CG_MAX_BINS][2 * LANES] __attribute__((aligned(64)));
    uint16_t thm[2][KVC_CG_MAX_BINS][2 * LANES] __attribute__((aligned(64)));
    uint8_t tail[4][LANES][16] __attribute__((aligned(64)));
    uint8_t copy[LANE_COPY_MAX] __attribute__((aligned(64)));
    int32_t off[4][LANES], lim[4][LANES], tbeg[4][LANES];
    uint32_t d0[4][LANES];
    size_t start[4 * LANES], len[4 * LANES];
    const size_t C = j->channels, B = j->num_bins;
    const unsigned max_sym = (unsigned)B - 1;
    size_t total = 0;
    for (int i = 0; i < NV * LANES; i++) {
        lane_stream(j, l * C + c + (size_t)i, &start[i], &len[i]);
        total += len[i] + LANE_PAD;
    }
    const size_t first = start[0];
    /* The next group's streams in this layer, while this one decodes: copying streams from
     * slots apart waits on memory where packed streams are prefetched by the hardware. */
    if (j->base)
        for (size_t k = c + (size_t)NV * LANES; k < c + (size_t)(2 * NV * LANES) && k < C; k++) {
            size_t s0, n0;
            lane_stream(j, l * C + k, &s0, &n0);
            for (size_t b = 0; b < n0 && b < LANE_COPY_MAX; b += 64) __builtin_prefetch(j->base + s0 + b);
        }
    for (int i = 0; i < NV * LANES; i++)
        if (len[i] > LANE_MAX_LEN || start[i] - first + len[i] > (size_t)INT32_MAX) return 0;
    /* The group's streams are copied next to each other when they fit, each followed by zeros:
     * slots a power of two (or nearly) apart put every lane's line into the same few L1 sets,
     * and the copy reads sequentially where 64 slots are out of the hardware prefetcher's reach. */
    const int copied = j->base && total <= LANE_COPY_MAX;
    const uint8_t *base = j->base ? copied ? copy : j->base + first : NULL; /* NULL: every stream is empty */
    for (int v = 0, pos = 0; v < NV; v++)
        for (int i = 0; i < LANES; i++) {
            const size_t k = l * C + c + (size_t)(v * LANES + i), n = len[v * LANES + i];
            const uint16_t *cdf = j->cdf + k * (B + 1);
            for (unsigned s = 0; s <= max_sym; s++) {
                tlo[v / 2][s][v % 2 * LANES + i] = cdf[s];
                thm[v / 2][s][v % 2 * LANES + i] = (uint16_t)((s < max_sym ? cdf[s + 1] : 65536u) - 1);
                if (NV == 1) tlo[0][s][LANES + i] = thm[0][s][LANES + i] = 0; /* an unused half */
            }
            const uint8_t *p = n ? j->base + start[v * LANES + i] : NULL;
            const size_t tb = n >= 8 ? n - 8 : 0;
            memset(tail[v][i], 0, 16);
            if (n) memcpy(tail[v][i], p + tb, n - tb);
            uint32_t w = 0;
            for (size_t b = 0; b < 4; b++) w = w << 8 | (b < n ? p[b] : 0u);
            d0[v][i] = w;
            tbeg[v][i] = (int32_t)tb;
            if (copied) { /* 4-byte reads from up to n + 4 stay inside the zeros after the stream */
                if (n) memcpy(copy + pos, p, n);
                memset(copy + pos + n, 0, LANE_PAD);
                off[v][i] = pos;
                lim[v][i] = (int32_t)n + 4;
                pos += (int)(n + LANE_PAD);
            } else {
                for (size_t b = 64; b < n; b += 64) __builtin_prefetch(p + b);
                off[v][i] = (int32_t)(start[v * LANES + i] - first);
                lim[v][i] = (int32_t)n - 4;
            }
        }

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
        d[v] = _mm512_loadu_si512(d0[v]);
        bp[v] = k32;
        vo[v] = _mm512_loadu_si512(off[v]);
        vlim[v] = _mm512_loadu_si512(lim[v]);
        vtb[v] = _mm512_loadu_si512(tbeg[v]);
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
                w = _mm512_mask_i32gather_epi32(w, (__mmask16)~inside, ti, tail[v], 1);
            }
            bits[v] = _mm512_sllv_epi32(_mm512_shuffle_epi8(w, bswap), _mm512_and_si512(bp[v], seven));
        }
#pragma GCC unroll 2
        for (int p = 0; p < (NV + 1) / 2; p++)
            key[p] = _mm512_inserti64x4(_mm512_castsi256_si512(count[2 * p]),
                                        2 * p + 1 < NV ? count[2 * p + 1] : _mm256_setzero_si256(), 1);
        lane_search(tlo, thm, max_sym, (NV + 1) / 2, key, cnt, sym_lo, sym_hm);
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

/* Groups of 64, 32 and 16 channels through the lanes, the rest (and streams the lanes cannot
 * take) through the AVX2 tier's interleaved scalar kernel. */
void cg_decode_streams_avx512(const cg_dec_job_t *j, size_t l, size_t c0, size_t n)
{
    size_t c = c0;
    const size_t end = c0 + n;
    if (j->tokens && j->tokens <= LANE_MAX_TOKENS)
        while (end - c >= LANES) {
            const int nv = end - c >= 4 * LANES ? 4 : end - c >= 2 * LANES ? 2 : 1;
            if (!(nv == 4 ? lane_decode(j, l, c, 4) : nv == 2 ? lane_decode(j, l, c, 2) : lane_decode(j, l, c, 1))) break;
            c += (size_t)nv * LANES;
        }
    if (c < end) cg_kernels_avx2.decode(j, l, c, end - c);
}

/* ------------------------------------------------------------------ lane-parallel encoder */

/* A lane's output: bits not yet in a word (nbits < 32 of them, right-aligned in acc) and the
 * bytes produced, counted past the capacity (the scalar kernel's cg_put and capacity rules). */
typedef struct lane_out {
    uint32_t acc, nbits, pos;
    uint8_t *out;
} lane_out_t;

static void lane_store(lane_out_t *o, size_t cap, uint32_t w)
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
static void lane_put(lane_out_t *o, size_t cap, uint32_t bits, unsigned n)
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
static void lane_emit(lane_out_t *o, size_t cap, uint32_t top, unsigned n1, uint32_t pending)
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

/* The streams of channels c .. c + 16 NV - 1 of layer l, the symbols' bounds by a gather from
 * each register's transposed table, the arithmetic as in the decoder, and the output bits
 * appended in the lanes: a lane whose accumulator fills stores its word by a scalar store (a
 * lane fills one every 32 / (bits a symbol) tokens), one whose underflow run does not fit one
 * append goes through lane_emit. */
LANE_INLINE void lane_encode(const cg_enc_job_t *j, size_t l, size_t c, const int NV)
{
    /* Entry s of each channel: cdf[s] | (cdf[s + 1] - 1) << 16 (65535 for the last symbol). */
    uint32_t ent[4][KVC_CG_MAX_BINS][LANES] __attribute__((aligned(64)));
    uint32_t vacc[LANES], vnb[LANES], vword[LANES], vtop[LANES], vn1[LANES], vpend[LANES];
    lane_out_t o[4][LANES];
    const size_t C = j->channels, B = j->num_bins, cap = j->capacity;
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < LANES; i++) {
            const size_t k = l * C + c + (size_t)(v * LANES + i);
            const uint16_t *cdf = j->cdf + k * (B + 1);
            for (size_t s = 0; s < B; s++) ent[v][s][i] = cdf[s] | ((s + 1 < B ? cdf[s + 1] : 65536u) - 1) << 16;
            o[v][i] = (lane_out_t){ .out = j->streams ? j->streams + k * cap : NULL };
        }
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
            const __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(_mm512_slli_epi32(sym, 4), lane), ent[v], 4);
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
                for (unsigned m = full; m; m &= m - 1) lane_store(&o[v][__builtin_ctz(m)], cap, vword[__builtin_ctz(m)]);
            }
            if (lng) {
                for (unsigned m = lng; m; m &= m - 1) {
                    const int i = __builtin_ctz(m);
                    o[v][i].acc = vacc[i];
                    o[v][i].nbits = vnb[i];
                    lane_emit(&o[v][i], cap, vtop[i], vn1[i], vpend[i]);
                    vacc[i] = o[v][i].acc;
                    vnb[i] = o[v][i].nbits;
                }
                acc[v] = _mm512_mask_loadu_epi32(acc[v], lng, vacc);
                nb[v] = _mm512_mask_loadu_epi32(nb[v], lng, vnb);
            }
        }
    }
    /* The flush (cg_enc_finish): pending + 1 bits after the bit that picks a point inside
     * [low, high], zero padding to a byte. */
    for (int v = 0; v < NV; v++) {
        uint32_t lw[LANES];
        _mm512_storeu_si512(lw, low[v]);
        _mm512_storeu_si512(vacc, acc[v]);
        _mm512_storeu_si512(vnb, nb[v]);
        _mm512_storeu_si512(vpend, pend[v]);
        for (int i = 0; i < LANES; i++) {
            lane_out_t *e = &o[v][i];
            e->acc = vacc[i];
            e->nbits = vnb[i];
            lane_emit(e, cap, lw[i] >= 0x40000000u, 1, vpend[i] + 1);
            const unsigned nbytes = (e->nbits + 7) / 8;
            const uint32_t last = (uint32_t)((uint64_t)e->acc << (32 - e->nbits));
            for (unsigned b = 0; b < nbytes; b++)
                if (e->pos + b < cap) e->out[e->pos + b] = (uint8_t)(last >> (24 - 8 * b));
            j->lengths[l * C + c + (size_t)(v * LANES + i)] = (int32_t)(e->pos + nbytes);
        }
    }
}

/* Groups of 64, 32 and 16 channels through the lanes, the rest through the AVX2 tier's kernel. */
void cg_encode_streams_avx512(const cg_enc_job_t *j, size_t l, size_t c0, size_t n)
{
    size_t c = c0;
    const size_t end = c0 + n;
    if (j->tokens && j->tokens <= LANE_MAX_TOKENS)
        while (end - c >= LANES) {
            const int nv = end - c >= 4 * LANES ? 4 : end - c >= 2 * LANES ? 2 : 1;
            if (nv == 4) lane_encode(j, l, c, 4);
            else if (nv == 2) lane_encode(j, l, c, 2);
            else lane_encode(j, l, c, 1);
            c += (size_t)nv * LANES;
        }
    if (c < end) cg_kernels_avx2.encode(j, l, c, end - c);
}
