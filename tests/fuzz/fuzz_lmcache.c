/* SPDX-License-Identifier: BSD-3-Clause */
/* LMCache interchange: kvc_codec_import_lmcache on arbitrary arrays (an LMCache object is data from
 * another process or a remote cache), then decode and export of what it accepted.
 * Input: 8 header bytes (mode, dtype/layout, layers, tokens, channels, CDF width, windows, window
 * tokens), then the CDF table, the maxima and per window the lengths and bytes, each cut to what is
 * left of the input (missing bytes are zeros).
 *   mode bit 0: repair the arrays (strictly increasing CDF rows from 0, lengths that add up to the
 *               window's bytes, finite non-negative maxima) so that mutations reach the decoder.
 * Invariants: import fails only with its documented statuses and then writes nothing; an accepted
 * object inspects and decodes (or is KVC_ERR_CORRUPT for symbols the quantiser cannot produce);
 * export of it gives back the same arrays, and re-importing them the same container. */
#include "fuzz.h"

static kvc_context_t *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fuzz_cpu_context("best");
    fuzz_input_t in = { data, size };
    const unsigned mode = fuzz_u8(&in), dl = fuzz_u8(&in);
    const size_t NL = 1 + fuzz_u8(&in) % 3, T = 1 + fuzz_u8(&in) % 40, C = 1 + fuzz_u8(&in) % 12;
    const unsigned B = 4 + fuzz_u8(&in) % 61;
    const size_t nwin = 1 + fuzz_u8(&in) % 3, W = 1 + fuzz_u8(&in) % 40;
    const kvc_dtype_t dts[] = { KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_DTYPE_I32 };
    const kvc_dtype_t dt = dts[dl % 4];
    const int mla = (dl >> 2) & 1;
    const size_t planes = mla ? 1 : 2, S = planes * NL * C, es = dt == KVC_DTYPE_F32 || dt == KVC_DTYPE_I32 ? 4 : 2;

    uint16_t *cdf = (uint16_t *)fuzz_take(&in, S * (B + 1) * 2, NULL);
    uint8_t *maxima = fuzz_take(&in, planes * NL * T * es, NULL);
    kvc_lmcache_window_t win[3];
    int32_t *lens[3] = { NULL, NULL, NULL };
    uint8_t *bytes[3] = { NULL, NULL, NULL };
    size_t left = T;
    for (size_t w = 0; w < nwin; w++) {
        lens[w] = (int32_t *)fuzz_take(&in, S * 4, NULL);
        size_t want = 0;
        for (size_t s = 0; s < S; s++) {
            if (mode & 1) lens[w][s] = (int32_t)((uint32_t)lens[w][s] % 9);
            want += lens[w][s] > 0 ? (size_t)lens[w][s] : 0;
        }
        if (want > 4096) want = 4096;
        size_t got;
        bytes[w] = fuzz_take(&in, want, &got);
        /* Windows: W tokens each, the last one what remains (or W when mutated). */
        const size_t tw = (mode & 1) ? (w + 1 < nwin ? (W < left ? W : left) : left) : W;
        left -= tw < left ? tw : left;
        win[w] = (kvc_lmcache_window_t){ .bytes = bytes[w], .nbytes = want, .lengths = lens[w], .num_tokens = tw };
    }
    if (mode & 1) {
        for (size_t s = 0; s < S; s++) { /* strictly increasing from 0, within 16 bits */
            uint16_t *row = cdf + s * (B + 1);
            unsigned v = 0;
            row[0] = 0;
            for (unsigned i = 1; i <= B; i++) {
                v += 1 + row[i] % (65535u / B - 1);
                row[i] = (uint16_t)v;
            }
        }
        for (size_t w = 0; w < nwin; w++) { /* lengths add up to the bytes present */
            size_t sum = 0;
            for (size_t s = 0; s < S; s++) sum += (size_t)lens[w][s];
            win[w].nbytes = sum;
        }
        for (size_t i = 0; i < planes * NL * T; i++) { /* finite, >= 0: clear sign and top exponent bit */
            if (es == 2) maxima[2 * i + 1] &= 0x3f;
            else maxima[4 * i + 3] &= 0x3f;
        }
    }
    kvc_lmcache_chunk_t c = { .dtype = dt, .layout = mla ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD, .num_layers = NL,
                              .num_tokens = T, .num_heads = 1, .head_size = C, .cdf_bins = B, .cdf = cdf,
                              .max_key = maxima, .max_value = mla ? NULL : maxima + NL * T * es, .bins = NULL,
                              .num_windows = nwin, .windows = win };
    uint32_t bins[6];
    if (mode & 2) { /* explicit bins, possibly invalid */
        for (size_t i = 0; i < planes * NL; i++) bins[i] = fuzz_u8(&in) % 70;
        c.bins = bins;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    const kvc_status_t st = kvc_codec_import_lmcache(&c, &buf, &len);
    FUZZ_CHECK(st == KVC_OK || st == KVC_ERR_INVALID_ARG || st == KVC_ERR_SHAPE || st == KVC_ERR_CORRUPT ||
                   st == KVC_ERR_DTYPE,
               "import returned %s", kvc_status_name(st));
    if (st != KVC_OK) FUZZ_CHECK(buf == NULL, "a failed import handed out a buffer");
    else {
        kvc_codec_info_t info;
        FUZZ_CHECK(kvc_codec_inspect(buf, len, &info) == KVC_OK, "an imported container does not inspect");
        uint8_t *out = malloc(info.original_bytes);
        const kvc_status_t sd = kvc_codec_decode(ctx, buf, len, out, info.original_bytes, NULL);
        FUZZ_CHECK(sd == KVC_OK || sd == KVC_ERR_CORRUPT, "decode of an imported container returned %s", kvc_status_name(sd));
        free(out);
        kvc_lmcache_chunk_t ex;
        void *storage = NULL;
        const kvc_status_t se = kvc_codec_export_lmcache(buf, len, &ex, &storage);
        /* Refused exactly when inspect says LMCache cannot read it (windows, CDF size, stream bytes). */
        FUZZ_CHECK(info.lmcache_readable ? se == KVC_OK : se == KVC_ERR_UNSUPPORTED,
                   "export returned %s for a container inspect calls %sreadable by LMCache", kvc_status_name(se),
                   info.lmcache_readable ? "" : "not ");
        if (se == KVC_OK) {
            FUZZ_CHECK(memcmp(ex.cdf, cdf, S * (B + 1) * 2) == 0, "exported CDF differs from the imported one");
            uint8_t *again = NULL;
            size_t again_len = 0;
            FUZZ_CHECK(kvc_codec_import_lmcache(&ex, &again, &again_len) == KVC_OK, "re-import of an export failed");
            FUZZ_CHECK(again_len == len && memcmp(again, buf, len) == 0, "export + import changed the container");
            kvc_codec_free(again);
            kvc_codec_free(storage);
        }
        kvc_codec_free(buf);
    }
    free(cdf);
    free(maxima);
    for (size_t w = 0; w < nwin; w++) {
        free(lens[w]);
        free(bytes[w]);
    }
    return 0;
}
