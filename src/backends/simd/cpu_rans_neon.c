/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS decoder's fast path on the NEON tier (AArch64, where Advanced SIMD is baseline): a full
 * group's 8 states in two 4-lane registers, the symbols from the portable path's slot tables by
 * scalar loads (NEON has no gather; the lookup of the x86 tiers, a subtract and a minimum per
 * symbol in use, costs more than these loads on the real K/V's 31-symbol ranges), each lane's
 * `cum | freq << 16` loaded straight into its vector lane, the state update on 4 lanes at a time,
 * and the renormalisation without branches: the lanes below 2^16 as an 8-bit mask, their words
 * taken from one 16-byte load by a `tbl` row chosen by the mask (8 KiB, built once). Same symbols,
 * words and states as rans_decode_fast8 (cpu_rans.c), which it replaces for the unchecked runs;
 * the checked loop that follows is the portable one. GCC 12 -O2 compiles the portable loop for
 * AArch64 to 188-218 instructions a token (8 symbols) with 24 stack accesses (16 table row
 * pointers do not fit the registers; x86 addresses them as one base plus a constant); this loop
 * keeps one base per table. Not measured on hardware (no AArch64 machine here): bytes and statuses
 * are tested under qemu (tests/neon/run.sh). Compiled to nothing unless the target is AArch64. */
#include "config.h"

#include "cpu_rans.h"

#ifdef KVC_RANS_HAVE_NEON

#include <arm_neon.h>
#include <pthread.h>
#include <string.h>

/* Row m (bit i: lane i takes a word): for each lane i, bytes 4i .. 4i + 3 are the tbl indices of
 * its word among the 8 words loaded (2k, 2k + 1 for the k-th lane of the mask, in lane order) and
 * two 0xFF (tbl gives 0), so the word comes out zero-extended to 32 bits; 0xFF for other lanes. */
static uint8_t expand[256][32];
static pthread_once_t expand_once = PTHREAD_ONCE_INIT;

static void expand_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned k = 0;
        for (unsigned lane = 0; lane < KVC_RANS_GROUP; lane++) {
            uint8_t *e = expand[m] + 4 * lane;
            e[0] = e[1] = e[2] = e[3] = 0xFF;
            if (m >> lane & 1) {
                e[0] = (uint8_t)(2 * k);
                e[1] = (uint8_t)(2 * k + 1);
                k++;
            }
        }
    }
}

size_t kvc_rans_decode_fast8_neon(const uint8_t *in, size_t len, size_t *pos, size_t tokens, const uint8_t *tab,
                                  const uint32_t *cf, uint32_t *x, uint8_t *sym, size_t stride)
{
    pthread_once(&expand_once, expand_init);
    const uint32x4_t slot_mask = vdupq_n_u32(KVC_RANS_PROB_SCALE - 1), low16 = vdupq_n_u32(0xFFFF),
                     lower = vdupq_n_u32(KVC_RANS_L);
    static const uint16_t bit_of_lane[8] = { 1, 2, 4, 8, 16, 32, 64, 128 };
    const uint16x8_t bits = vld1q_u16(bit_of_lane);
    uint32x4_t xa = vld1q_u32(x), xb = vld1q_u32(x + 4);
    const uint8_t *ip = in + *pos, *const end = in + len;
    size_t t = 0;
    for (;;) {
        /* A token reads at most 8 words (16 bytes): runs that cannot reach the end need no check,
         * and the 16-byte load stays inside the stream. */
        size_t run = kvc_rans_dec_run(&ip, &end, 1, tokens - t);
        if (!run) break;
        uint8_t *row = sym + t * stride;
        t += run;
        for (; run; run--, row += stride) {
            const uint32x4_t sa = vandq_u32(xa, slot_mask), sb = vandq_u32(xb, slot_mask);
            /* symbol of lane i: row i of the slot tables, one base register for all 8 */
            const unsigned s0 = tab[vgetq_lane_u32(sa, 0)], s1 = tab[1 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sa, 1)],
                           s2 = tab[2 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sa, 2)],
                           s3 = tab[3 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sa, 3)],
                           s4 = tab[4 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sb, 0)],
                           s5 = tab[5 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sb, 1)],
                           s6 = tab[6 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sb, 2)],
                           s7 = tab[7 * KVC_RANS_PROB_SCALE + vgetq_lane_u32(sb, 3)];
            row[0] = (uint8_t)s0, row[1] = (uint8_t)s1, row[2] = (uint8_t)s2, row[3] = (uint8_t)s3;
            row[4] = (uint8_t)s4, row[5] = (uint8_t)s5, row[6] = (uint8_t)s6, row[7] = (uint8_t)s7;
            uint32x4_t ea = vdupq_n_u32(0), eb = vdupq_n_u32(0); /* cum | freq << 16 */
            ea = vld1q_lane_u32(cf + s0, ea, 0);
            ea = vld1q_lane_u32(cf + 64 + s1, ea, 1);
            ea = vld1q_lane_u32(cf + 128 + s2, ea, 2);
            ea = vld1q_lane_u32(cf + 192 + s3, ea, 3);
            eb = vld1q_lane_u32(cf + 256 + s4, eb, 0);
            eb = vld1q_lane_u32(cf + 320 + s5, eb, 1);
            eb = vld1q_lane_u32(cf + 384 + s6, eb, 2);
            eb = vld1q_lane_u32(cf + 448 + s7, eb, 3);
            /* x = freq * (x >> 12) + slot - cum (mod 2^32, as the portable step) */
            xa = vsubq_u32(vmlaq_u32(sa, vshrq_n_u32(ea, 16), vshrq_n_u32(xa, KVC_RANS_PROB_BITS)), vandq_u32(ea, low16));
            xb = vsubq_u32(vmlaq_u32(sb, vshrq_n_u32(eb, 16), vshrq_n_u32(xb, KVC_RANS_PROB_BITS)), vandq_u32(eb, low16));
            const uint32x4_t na = vcltq_u32(xa, lower), nb = vcltq_u32(xb, lower);
            const unsigned m = vaddvq_u16(vandq_u16(vcombine_u16(vmovn_u32(na), vmovn_u32(nb)), bits));
            const uint8x16_t words = vld1q_u8(ip);
            const uint32x4_t wa = vreinterpretq_u32_u8(vqtbl1q_u8(words, vld1q_u8(expand[m]))),
                             wb = vreinterpretq_u32_u8(vqtbl1q_u8(words, vld1q_u8(expand[m] + 16)));
            xa = vbslq_u32(na, vorrq_u32(vshlq_n_u32(xa, 16), wa), xa);
            xb = vbslq_u32(nb, vorrq_u32(vshlq_n_u32(xb, 16), wb), xb);
            ip += 2 * (unsigned)__builtin_popcount(m);
        }
    }
    vst1q_u32(x, xa);
    vst1q_u32(x + 4, xb);
    *pos = (size_t)(ip - in);
    return t;
}

/* ---- encoder: a full group of a stream, its 8 states in two 4-lane registers. Per token: each lane's table
 * entry (`cum | freq << 16`, kvc_rans_enc_table) and 1 / freq loaded straight into vector lanes,
 * the emitting lanes by one unsigned compare, their words narrowed to 16 bits and moved to the top
 * of a 16-byte register in lane order by a `tbl` row chosen by the lane mask (4 KiB, built once),
 * one store below the previous words; the quotient as the portable fast path computes it
 * ((x + 0.5) · (1 / f) in double precision, truncated), two lanes a register. Same bytes as the
 * portable coder (tests/neon/run.sh). */

/* Row m: the tbl that takes the 16-bit words of the lanes set in m, in lane order, to the top of a
 * 16-byte register (bytes 16 - 2n .. 15, n = popcount(m)); 0xFF (zero) below. */
static uint8_t to_top[256][16];
static pthread_once_t to_top_once = PTHREAD_ONCE_INIT;

static void to_top_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned d = 16 - 2 * (unsigned)__builtin_popcount(m);
        memset(to_top[m], 0xFF, 16);
        for (unsigned lane = 0; lane < KVC_RANS_GROUP; lane++)
            if (m >> lane & 1) {
                to_top[m][d++] = (uint8_t)(2 * lane);
                to_top[m][d++] = (uint8_t)(2 * lane + 1);
            }
    }
}

/* floor((x + 0.5) * inv) of two lanes (x < 2^32, exact: see cpu_rans.c) */
static inline uint64x2_t quotient2(uint32x2_t x, float64x2_t inv)
{
    return vcvtq_u64_f64(vmulq_f64(vaddq_f64(vcvtq_f64_u64(vmovl_u32(x)), vdupq_n_f64(0.5)), inv));
}

void kvc_rans_enc8_neon(kvc_rans_enc_t *st, const uint8_t *sym, size_t stride, size_t tokens, const uint16_t *cum, unsigned bins)
{
    pthread_once(&to_top_once, to_top_init);
    uint32_t tab[KVC_RANS_GROUP * 64];
    double inv[KVC_RANS_GROUP * 64];
    kvc_rans_enc_table(tab, cum, bins);
    for (unsigned i = 0; i < KVC_RANS_GROUP * 64; i++) inv[i] = tab[i] & KVC_RANS_ENC_BAD ? 0.0 : 1.0 / (double)(tab[i] >> 16);
    static const uint16_t bit_of_lane[8] = { 1, 2, 4, 8, 16, 32, 64, 128 };
    const uint16x8_t bits = vld1q_u16(bit_of_lane);
    const uint32x4_t low16 = vdupq_n_u32(0xFFFF), scale = vdupq_n_u32(KVC_RANS_PROB_SCALE), one = vdupq_n_u32(1);
    uint32x4_t xa = vld1q_u32(st->x), xb = vld1q_u32(st->x + 4), flags = vdupq_n_u32(0);
    uint8x8_t seen = vdup_n_u8(0);
    uint8_t *w = st->w; /* words go backwards */
    for (size_t t = tokens; t-- > 0;) {
        const uint8_t *row = sym + t * stride;
        seen = vorr_u8(seen, vld1_u8(row));
        const unsigned s0 = row[0] & 63u, s1 = 64 + (row[1] & 63u), s2 = 128 + (row[2] & 63u), s3 = 192 + (row[3] & 63u),
                       s4 = 256 + (row[4] & 63u), s5 = 320 + (row[5] & 63u), s6 = 384 + (row[6] & 63u),
                       s7 = 448 + (row[7] & 63u);
        uint32x4_t ea = vdupq_n_u32(0), eb = vdupq_n_u32(0);
        ea = vld1q_lane_u32(tab + s0, ea, 0);
        ea = vld1q_lane_u32(tab + s1, ea, 1);
        ea = vld1q_lane_u32(tab + s2, ea, 2);
        ea = vld1q_lane_u32(tab + s3, ea, 3);
        eb = vld1q_lane_u32(tab + s4, eb, 0);
        eb = vld1q_lane_u32(tab + s5, eb, 1);
        eb = vld1q_lane_u32(tab + s6, eb, 2);
        eb = vld1q_lane_u32(tab + s7, eb, 3);
        float64x2_t i0 = vdupq_n_f64(0), i1 = i0, i2 = i0, i3 = i0;
        i0 = vld1q_lane_f64(inv + s0, i0, 0);
        i0 = vld1q_lane_f64(inv + s1, i0, 1);
        i1 = vld1q_lane_f64(inv + s2, i1, 0);
        i1 = vld1q_lane_f64(inv + s3, i1, 1);
        i2 = vld1q_lane_f64(inv + s4, i2, 0);
        i2 = vld1q_lane_f64(inv + s5, i2, 1);
        i3 = vld1q_lane_f64(inv + s6, i3, 0);
        i3 = vld1q_lane_f64(inv + s7, i3, 1);
        flags = vorrq_u32(flags, vorrq_u32(ea, eb));
        const uint32x4_t fa = vandq_u32(vshrq_n_u32(ea, 16), low16), fb = vandq_u32(vshrq_n_u32(eb, 16), low16);
        /* emit where x > (f << 20) - 1 (f = 4096 wraps to 2^32 - 1: never) */
        const uint32x4_t na = vcgtq_u32(xa, vsubq_u32(vshlq_n_u32(fa, 32 - KVC_RANS_PROB_BITS), one)),
                         nb = vcgtq_u32(xb, vsubq_u32(vshlq_n_u32(fb, 32 - KVC_RANS_PROB_BITS), one));
        const unsigned m = vaddvq_u16(vandq_u16(vcombine_u16(vmovn_u32(na), vmovn_u32(nb)), bits));
        const uint8x16_t words = vreinterpretq_u8_u16(vcombine_u16(vmovn_u32(xa), vmovn_u32(xb)));
        vst1q_u8(w - 16, vqtbl1q_u8(words, vld1q_u8(to_top[m])));
        w -= 2 * (unsigned)__builtin_popcount(m);
        xa = vbslq_u32(na, vshrq_n_u32(xa, 16), xa);
        xb = vbslq_u32(nb, vshrq_n_u32(xb, 16), xb);
        /* x / f * 4096 + x % f + cum = x + cum + q * (4096 - f) */
        const uint32x4_t qa = vcombine_u32(vmovn_u64(quotient2(vget_low_u32(xa), i0)), vmovn_u64(quotient2(vget_high_u32(xa), i1)));
        const uint32x4_t qb = vcombine_u32(vmovn_u64(quotient2(vget_low_u32(xb), i2)), vmovn_u64(quotient2(vget_high_u32(xb), i3)));
        xa = vmlaq_u32(vaddq_u32(xa, vandq_u32(ea, low16)), qa, vsubq_u32(scale, fa));
        xb = vmlaq_u32(vaddq_u32(xb, vandq_u32(eb, low16)), qb, vsubq_u32(scale, fb));
    }
    vst1q_u32(st->x, xa);
    vst1q_u32(st->x + 4, xb);
    st->w = w;
    st->bad |= vmaxv_u8(seen) >= 64 || (vmaxvq_u32(vandq_u32(flags, vdupq_n_u32(KVC_RANS_ENC_BAD))) != 0);
}

#endif
