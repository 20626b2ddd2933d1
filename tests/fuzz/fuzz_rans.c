/* SPDX-License-Identifier: BSD-3-Clause */
/* The rANS coder (--coder rans, container format 1.4) through the codec: a chunk built from the
 * input is coded with both coders, then the rANS container's LENGTHS and STREAMS are damaged as the
 * input says, checksums repaired, and decoded (docs/FORMAT.md "rANS streams").
 *
 * Input: shape bytes, then a u16 count of value bytes and the values, then edits of 3 bytes each
 * (u16 position in LENGTHS + STREAMS, xor mask):
 *   0: bit 0 MLA, bits 1-2 dtype (f16, bf16, f32), bit 3 per-channel keys
 *   1: layers 1-3   2: tokens 1-64   3: channels 1-40 (a stream of 32 and up: four full groups;
 *   8 and up in a window of several (plane, layer)s or windows: tasks of eight full groups, the
 *   AVX-512 tier's widest decoder)   4: window 1-64   5: bins 4-64 (even)
 * Invariants: no access outside the container or the exact-size output; rANS and ac containers of
 * the same chunk decode to the same bytes; a damaged container is KVC_OK or KVC_ERR_CORRUPT for both
 * inspect and decode, decode never accepting what inspect refused; the public kvc_rans_decode on the
 * (damaged) STREAMS bytes is KVC_OK or KVC_ERR_CORRUPT too. */
#include <zlib.h>

#include "fuzz.h"

static kvc_context_t *ctx;

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t crc(const uint8_t *p, size_t n) { return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n); }

static uint16_t half_bits(float f, int bf16)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf16) return (uint16_t)(u >> 16);
    /* Small integers / 16 are exact in f16: sign, exponent, mantissa by hand for |f| < 8. */
    if (f == 0) return 0;
    const uint16_t sign = f < 0 ? 0x8000 : 0;
    float a = f < 0 ? -f : f;
    int e = 15;
    while (a >= 2) { a /= 2; e++; }
    while (a < 1) { a *= 2; e--; }
    return (uint16_t)(sign | (uint16_t)e << 10 | (uint16_t)((a - 1) * 1024));
}

static uint8_t *encode(const kvc_codec_params_t *p, kvc_codec_coder_t coder, const void *kv, size_t *len)
{
    kvc_codec_params_t q = *p;
    q.field_mask |= KVC_CODEC_PARAM_CODER;
    q.coder = coder;
    uint8_t *buf = NULL;
    FUZZ_CHECK(kvc_codec_encode(ctx, &q, kv, &buf, len) == KVC_OK, "encode with coder %d", (int)coder);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fuzz_cpu_context("best");
    fuzz_input_t in = { data, size };
    const uint8_t f = fuzz_u8(&in);
    const int mla = f & 1, chan = (f >> 3) & 1;
    const kvc_dtype_t dt = (f >> 1) % 4 == 1 ? KVC_DTYPE_BF16 : (f >> 1) % 4 == 2 ? KVC_DTYPE_F32 : KVC_DTYPE_F16;
    const size_t NL = 1 + fuzz_u8(&in) % 3, T = 1 + fuzz_u8(&in) % 64, C = 1 + fuzz_u8(&in) % 40;
    const uint32_t W = 1 + fuzz_u8(&in) % 64, b = 4 + 2 * (fuzz_u8(&in) % 31);
    const size_t planes = mla ? 1 : 2, n = planes * NL * T * C, es = dt == KVC_DTYPE_F32 ? 4 : 2;
    uint32_t bins[6];
    for (size_t i = 0; i < planes * NL; i++) bins[i] = b;
    size_t nv = (size_t)fuzz_uint(&in, 2);
    if (nv > in.n) nv = in.n;
    const uint8_t *vals = in.p;
    in.p += nv;
    in.n -= nv;
    uint8_t *kv = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        const float x = nv ? (float)(int8_t)vals[i % nv] / 16.0f : 0.0f;
        if (es == 4) memcpy(kv + 4 * i, &x, 4);
        else {
            const uint16_t h = half_bits(x, dt == KVC_DTYPE_BF16);
            memcpy(kv + 2 * i, &h, 2);
        }
    }
    kvc_codec_params_t p = { .field_mask = KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_WINDOW | KVC_CODEC_PARAM_HEADS_UNKNOWN,
                             .dtype = dt, .layout = mla ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD, .num_layers = NL,
                             .num_tokens = T, .num_heads = 1, .head_size = C, .bins = bins, .window_tokens = W };
    if (chan) {
        p.field_mask |= KVC_CODEC_PARAM_KEY_SCALING;
        p.key_scaling = KVC_CODEC_SCALE_CHANNEL;
    }
    size_t la, lr;
    uint8_t *a = encode(&p, KVC_CODER_AC, kv, &la), *r = encode(&p, KVC_CODER_RANS, kv, &lr);
    uint8_t *da = malloc(n * es), *dr = malloc(n * es);
    FUZZ_CHECK(kvc_codec_decode(ctx, a, la, da, n * es, NULL) == KVC_OK, "decode ac");
    FUZZ_CHECK(kvc_codec_decode(ctx, r, lr, dr, n * es, NULL) == KVC_OK, "decode rans");
    FUZZ_CHECK(memcmp(da, dr, n * es) == 0, "rans and ac decode differently");

    /* Damage LENGTHS + STREAMS (the last two sections), then repair their checksums. */
    size_t pos = 48, off[5];
    for (int s = 0; s < 5; s++) {
        off[s] = pos;
        pos += 16 + (size_t)get_u32(r + pos + 8);
    }
    const size_t lo = off[3] + 16, span = lr - lo;
    int edited = 0;
    while (in.n >= 3 && span) {
        const size_t at = (size_t)fuzz_uint(&in, 2) % span;
        const uint8_t x = fuzz_u8(&in);
        if (lo + at >= off[4] && lo + at < off[4] + 16) continue; /* STREAMS' section header */
        r[lo + at] ^= x;
        edited = 1;
    }
    if (edited) {
        for (int s = 3; s < 5; s++) put_u32(r + off[s] + 4, crc(r + off[s] + 16, get_u32(r + off[s] + 8)));
        kvc_codec_info_t info;
        const kvc_status_t si = kvc_codec_inspect(r, lr, &info), sd = kvc_codec_decode(ctx, r, lr, dr, n * es, NULL);
        FUZZ_CHECK(si == KVC_OK || si == KVC_ERR_CORRUPT, "inspect status %d", si);
        FUZZ_CHECK(sd == KVC_OK || sd == KVC_ERR_CORRUPT, "decode status %d", sd);
        FUZZ_CHECK(si == KVC_OK || sd != KVC_OK, "decode accepted what inspect refused");
    }
    /* The public decoder (kvc_rans_decode) on the damaged STREAMS section, its own end offsets split
     * evenly, with tables made by kvc_rans_tables from symbols of the value bytes: only OK or
     * CORRUPT, symbols below the bins after OK, nothing read outside the exact-size copy. */
    {
        const size_t L = planes * NL, G = (C + 31) / 32, nb = lr - off[4] - 16;
        uint8_t *sy = malloc(L * T * C), *out = malloc(L * T * C), *bytes = malloc(nb ? nb : 1);
        uint16_t *cum = malloc(L * C * (b + 1) * sizeof(uint16_t));
        int64_t *ends = malloc(L * G * sizeof(int64_t));
        for (size_t i = 0; i < L * T * C; i++) sy[i] = (uint8_t)(nv ? vals[i % nv] % b : 0);
        memcpy(bytes, r + off[4] + 16, nb);
        for (size_t k = 0; k < L * G; k++) ends[k] = (int64_t)(nb * (k + 1) / (L * G));
        kvc_rans_tables_params_t tp = { .symbols = sy, .cum = cum, .layers = L, .tokens = T, .channels = C, .num_bins = b };
        FUZZ_CHECK(kvc_rans_tables(ctx, &tp) == KVC_OK, "rans_tables");
        kvc_rans_decode_params_t dp = { .cum = cum, .bytes = nb ? bytes : NULL, .nbytes = nb, .ends = ends, .symbols = out,
                                        .layers = L, .tokens = T, .channels = C, .num_bins = b };
        const kvc_status_t st = kvc_rans_decode(ctx, &dp);
        FUZZ_CHECK(st == KVC_OK || st == KVC_ERR_CORRUPT, "rans_decode status %d", st);
        for (size_t i = 0; st == KVC_OK && i < L * T * C; i++) FUZZ_CHECK(out[i] < b, "rans_decode symbol %u >= %u", out[i], b);
        free(sy);
        free(out);
        free(bytes);
        free(cum);
        free(ends);
    }
    kvc_codec_free(a);
    kvc_codec_free(r);
    free(kv);
    free(da);
    free(dr);
    return 0;
}
