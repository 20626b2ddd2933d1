/* SPDX-License-Identifier: BSD-3-Clause */
/* The NEON tier's arithmetic coder: the lane-parallel coder of the x86 tiers (cpu_cachegen_avx512.c,
 * docs/CACHEGEN.md "Lane-parallel coder") in 4-lane registers, up to 4 of them a group. NEON has
 * vclz (the leading zeros), vdivq_f64 (the exact divide, 2 lanes at a time) and per-lane shifts,
 * but no gather: each lane's input bytes and (encoder) table entry come from scalar loads into its
 * lane. Shift counts are clamped to 32 first, since ushl reads only a count's low byte (as a
 * signed one) while the x86 kernels rely on counts of 32 or more, and -1, giving 0. Channels left
 * over (fewer than 4) and streams the lanes cannot take go through the scalar tier's kernel. Same
 * bytes and symbols as the scalar coder; tested under qemu (tests/neon/run.sh), not timed on
 * hardware (no AArch64 machine here). Compiled to nothing unless the target is AArch64. */
#include "config.h"

#include "cpu_cachegen.h"

#ifdef KVC_CG_HAVE_NEON

#include <arm_neon.h>

#include "common/halfs.h"
#include "cpu_cachegen_lanes.h"

#define LANES 4

/* x << n and x >> n per lane, 0 for counts of 32 or more (vpsllvd / vpsrlvd). */
LANE_INLINE uint32x4_t lane_shl(uint32x4_t x, uint32x4_t n)
{
    return vshlq_u32(x, vreinterpretq_s32_u32(vminq_u32(n, vdupq_n_u32(32))));
}

LANE_INLINE uint32x4_t lane_shr(uint32x4_t x, uint32x4_t n)
{
    return vshlq_u32(x, vnegq_s32(vreinterpretq_s32_u32(vminq_u32(n, vdupq_n_u32(32)))));
}

/* Bit i set where lane i of the compare result m is true. */
LANE_INLINE unsigned lane_bits(uint32x4_t m)
{
    static const uint32_t bit[4] = { 1, 2, 4, 8 };
    return vaddvq_u32(vandq_u32(m, vld1q_u32(bit)));
}

LANE_INLINE void lane_range(uint32x4_t r1, uint32x4_t *a, uint32x4_t *b)
{
    *b = vandq_u32(vaddq_u32(r1, vdupq_n_u32(1)), vdupq_n_u32(0xFFFF));
    *a = vsubq_u32(vshrq_n_u32(r1, 16), vceqq_u32(*b, vdupq_n_u32(0)));
}

LANE_INLINE uint32x4_t lane_scale(uint32x4_t a, uint32x4_t b, uint32x4_t cdf)
{
    return vaddq_u32(vmulq_u32(a, cdf), vshrq_n_u32(vmulq_u32(b, cdf), 16));
}

LANE_INLINE void lane_shifts(uint32x4_t lo, uint32x4_t hi, uint32x4_t *n1, uint32x4_t *n3)
{
    *n1 = vclzq_u32(veorq_u32(lo, hi));
    const uint32x4_t u = lane_shl(vbicq_u32(lo, hi), vaddq_u32(*n1, vdupq_n_u32(1)));
    *n3 = vclzq_u32(vmvnq_u32(u));
}

LANE_INLINE uint32x4_t lane_high(uint32x4_t hi, uint32x4_t n)
{
    return vorrq_u32(vorrq_u32(lane_shl(hi, n), vmvnq_u32(lane_shl(vdupq_n_u32(0xFFFFFFFFu), n))),
                     vdupq_n_u32(0x80000000u));
}

/* The 4 bytes at each lane's byte position (big-endian), from its stream while they lie inside
 * it, else from its zero-padded last bytes (the x86 kernels' gathers). */
LANE_INLINE uint32x4_t lane_read(const lane_dec_group_t *g, int first, uint32x4_t bp)
{
    uint32_t at[LANES], w[LANES];
    vst1q_u32(at, vshrq_n_u32(bp, 3));
    for (int i = 0; i < LANES; i++) {
        const int k = first + i;
        const uint32_t t = at[i] - (uint32_t)g->tbeg[k];
        const uint8_t *p = (int32_t)at[i] <= g->lim[k] ? g->base + g->off[k] + at[i] : g->tail[k] + (t < 12 ? t : 12);
        uint32_t x;
        memcpy(&x, p, 4);
        w[i] = __builtin_bswap32(x);
    }
    return vld1q_u32(w);
}

/* The streams of channels c .. c + 4 NV - 1 of layer l in NV registers; 0 when they do not fit
 * 32-bit offsets. */
LANE_INLINE int lane_decode(const cg_dec_job_t *j, size_t l, size_t c, const int NV)
{
    lane_dec_group_t g;
    if (!lane_dec_load(j, l, c, NV * LANES, LANES, &g)) return 0;
    const size_t C = j->channels;
    const unsigned max_sym = j->num_bins - 1;
    const uint32x4_t one = vdupq_n_u32(1), k31 = vdupq_n_u32(0x7FFFFFFF), k32 = vdupq_n_u32(32);
    const uint32x4_t ffff = vdupq_n_u32(0xFFFF), seven = vdupq_n_u32(7);
    uint32x4_t low[4], r1[4], d[4], bp[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        low[v] = vdupq_n_u32(0);
        r1[v] = vdupq_n_u32(0xFFFFFFFFu); /* high - low */
        d[v] = vld1q_u32(g.d0 + v * LANES);
        bp[v] = k32;
    }
    uint8_t *row = j->symbols + l * j->tokens * C + c;
    for (size_t t = 0; t < j->tokens; t++, row += C) {
        __builtin_prefetch(row + CG_PREFETCH_ROWS * C, 1);
        uint32x4_t count[4], bits[4];
        uint16x8_t key[2], cnt[2], sym_lo[2], sym_hm[2];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            count[v] = vandq_u32(cg_lane_quotient(d[v], r1[v]), ffff); /* & 0xFFFF, as the scalar */
            bits[v] = lane_shl(lane_read(&g, v * LANES, bp[v]), vandq_u32(bp[v], seven));
        }
        /* The symbol of each pair of registers as 8 16-bit lanes (the x86 kernels' lane_search). */
#pragma GCC unroll 2
        for (int p = 0; p < (NV + 1) / 2; p++) {
            key[p] = vcombine_u16(vmovn_u32(count[2 * p]), 2 * p + 1 < NV ? vmovn_u32(count[2 * p + 1]) : vdup_n_u16(0));
            cnt[p] = vdupq_n_u16(0);
            sym_lo[p] = vld1q_u16(g.lo + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES);
            sym_hm[p] = vld1q_u16(g.hm + (size_t)p * KVC_CG_MAX_BINS * 2 * LANES);
        }
        for (unsigned s = 1; s <= max_sym; s++)
#pragma GCC unroll 2
            for (int p = 0; p < (NV + 1) / 2; p++) {
                const size_t at = ((size_t)p * KVC_CG_MAX_BINS + s) * 2 * LANES;
                const uint16x8_t e = vld1q_u16(g.lo + at), le = vcleq_u16(e, key[p]);
                cnt[p] = vsubq_u16(cnt[p], le);
                sym_lo[p] = vmaxq_u16(sym_lo[p], vandq_u16(e, le));
                sym_hm[p] = vmaxq_u16(sym_hm[p], vandq_u16(vld1q_u16(g.hm + at), le));
            }
        if (NV == 1) vst1_lane_u32((uint32_t *)(void *)row, vreinterpret_u32_u8(vmovn_u16(cnt[0])), 0);
#pragma GCC unroll 2
        for (int p = 0; p < NV / 2; p++) vst1_u8(row + 2 * p * LANES, vmovn_u16(cnt[p]));
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            uint32x4_t a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const uint16x4_t slo = v % 2 ? vget_high_u16(sym_lo[v / 2]) : vget_low_u16(sym_lo[v / 2]);
            const uint16x4_t shm = v % 2 ? vget_high_u16(sym_hm[v / 2]) : vget_low_u16(sym_hm[v / 2]);
            const uint32x4_t lo_off = lane_scale(a, b, vmovl_u16(slo));
            const uint32x4_t hi_off = lane_scale(a, b, vaddq_u32(vmovl_u16(shm), one));
            const uint32x4_t lo = vaddq_u32(low[v], lo_off), hi = vsubq_u32(vaddq_u32(low[v], hi_off), one);
            lane_shifts(lo, hi, &n1, &n3);
            const uint32x4_t n = vaddq_u32(n1, n3);
            low[v] = vandq_u32(lane_shl(lo, n), k31);
            r1[v] = vsubq_u32(lane_high(hi, n), low[v]);
            d[v] = vorrq_u32(lane_shl(vsubq_u32(d[v], lo_off), n), lane_shr(bits[v], vsubq_u32(k32, n)));
            bp[v] = vaddq_u32(bp[v], n);
        }
    }
    return 1;
}

/* The streams of channels c .. c + 4 NV - 1 of layer l (the x86 kernels' lane_encode). */
LANE_INLINE void lane_encode(const cg_enc_job_t *j, size_t l, size_t c, const int NV)
{
    lane_enc_table_t tab;
    uint32_t vacc[LANES], vnb[LANES], vword[LANES], vtop[LANES], vn1[LANES], vpend[LANES], ent[LANES];
    lane_out_t o[4 * LANES];
    const size_t C = j->channels, cap = j->capacity;
    lane_enc_load(j, l, c, NV * LANES, LANES, &tab, o);
    const uint32x4_t ffff = vdupq_n_u32(0xFFFF), one = vdupq_n_u32(1), ones = vdupq_n_u32(0xFFFFFFFFu);
    const uint32x4_t k31 = vdupq_n_u32(0x7FFFFFFF), k32 = vdupq_n_u32(32), zero = vdupq_n_u32(0);
    uint32x4_t low[4], r1[4], pend[4], acc[4], nb[4];
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
            const uint32_t *tv = tab.ent + (size_t)v * KVC_CG_MAX_BINS * LANES;
            for (int i = 0; i < LANES; i++) ent[i] = tv[(size_t)row[v * LANES + i] * LANES + (size_t)i];
            const uint32x4_t e = vld1q_u32(ent);
            const uint32x4_t lo_c = vandq_u32(e, ffff), hi_c = vaddq_u32(vshrq_n_u32(e, 16), one);
            uint32x4_t a, b, n1, n3;
            lane_range(r1[v], &a, &b);
            const uint32x4_t lo = vaddq_u32(low[v], lane_scale(a, b, lo_c));
            const uint32x4_t hi = vsubq_u32(vaddq_u32(low[v], lane_scale(a, b, hi_c)), one);
            lane_shifts(lo, hi, &n1, &n3);
            const uint32x4_t n = vaddq_u32(n1, n3);
            /* the decided bits as one append where they fit (the x86 kernels' lane_encode) */
            const uint32x4_t nz = vmvnq_u32(vceqq_u32(n1, zero));
            const uint32x4_t top = lane_shr(lo, vsubq_u32(k32, n1));
            const uint32x4_t n1m = vsubq_u32(n1, one);
            const uint32x4_t first = vaddq_u32(vsubq_u32(lane_shl(one, pend[v]), one), lane_shr(top, n1m));
            const uint32x4_t w = vandq_u32(nz, vorrq_u32(lane_shl(first, n1m), vbicq_u32(top, lane_shl(ones, n1m))));
            const uint32x4_t k = vandq_u32(nz, vaddq_u32(pend[v], n1));
            const uint32x4_t lng = vandq_u32(nz, vcgtq_u32(k, k32));
            const uint32x4_t total = vaddq_u32(nb[v], k), r = vsubq_u32(total, k32);
            const uint32x4_t full = vbicq_u32(vcgeq_u32(total, k32), lng);
            const uint32x4_t word = vorrq_u32(lane_shl(acc[v], vsubq_u32(k32, nb[v])), lane_shr(w, r));
            uint32x4_t nacc = vorrq_u32(lane_shl(acc[v], k), w);
            nacc = vbslq_u32(full, vbicq_u32(w, lane_shl(ones, r)), nacc);
            const uint32x4_t nnb = vbslq_u32(full, r, total);
            const unsigned mlng = lane_bits(lng), mfull = lane_bits(full);
            if (mlng) { /* the old accumulator, the run, through lane_emit */
                vst1q_u32(vacc, acc[v]);
                vst1q_u32(vnb, nb[v]);
                vst1q_u32(vtop, top);
                vst1q_u32(vn1, n1);
                vst1q_u32(vpend, pend[v]);
            }
            acc[v] = vbslq_u32(lng, acc[v], nacc);
            nb[v] = vbslq_u32(lng, nb[v], nnb);
            pend[v] = vbslq_u32(nz, n3, vaddq_u32(pend[v], n3));
            low[v] = vandq_u32(lane_shl(lo, n), k31);
            r1[v] = vsubq_u32(lane_high(hi, n), low[v]);
            if (mfull) {
                vst1q_u32(vword, word);
                lane_store_words(o + v * LANES, cap, mfull, vword);
            }
            if (mlng) {
                lane_emit_runs(o + v * LANES, cap, mlng, vacc, vnb, vtop, vn1, vpend);
                acc[v] = vbslq_u32(lng, vld1q_u32(vacc), acc[v]);
                nb[v] = vbslq_u32(lng, vld1q_u32(vnb), nb[v]);
            }
        }
    }
    for (int v = 0; v < NV; v++) {
        uint32_t lw[LANES];
        vst1q_u32(lw, low[v]);
        vst1q_u32(vacc, acc[v]);
        vst1q_u32(vnb, nb[v]);
        vst1q_u32(vpend, pend[v]);
        lane_flush(j, l * C + c + (size_t)(v * LANES), o + v * LANES, LANES, lw, vacc, vnb, vpend);
    }
}

/* Groups of 16, 8 and 4 channels through the lanes, the rest through the scalar tier's kernel. */
LANE_DEFINE_DRIVERS(neon, cg_kernels_scalar.encode, cg_kernels_scalar.decode)

/* The scalar tier's quantiser rows (the lanes are the coder only). */
const cg_kernels_t cg_kernels_neon = {
    .encode = cg_encode_lanes_neon,
    .decode = cg_decode_lanes_neon,
    .quantise_rows = cg_quantise_rows_scalar,
    .dequantise_rows = cg_dequantise_rows_scalar,
    .halves_to_f32 = kvc_halfs_to_f32,
};

#endif
