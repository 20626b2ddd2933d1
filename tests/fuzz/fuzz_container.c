/* SPDX-License-Identifier: BSD-3-Clause */
/* .kvc containers: kvc_codec_inspect, kvc_codec_layer_stats and kvc_codec_decode on arbitrary
 * bytes (docs/FORMAT.md). Input: one mode byte, then the container.
 *   mode bit 0: repair the header's total size and every CRC before the calls, so that mutations
 *               reach the section parsers instead of stopping at a checksum;
 *   mode bit 1: also decode into a buffer one byte too small (must be KVC_ERR_NO_SPACE).
 * Invariants: no access outside the container or the exact-size output buffers; inspect, stats and
 * decode agree on validity of the container framing; decode reports what inspect reported; a
 * two-thread decode (its parse checks STREAMS' checksum on the second thread) gives the status,
 * message and values of the one-thread one. */
#include <zlib.h>

#include "fuzz.h"

/* Decoded chunks above this are skipped (the caller chooses the output size; time per input). */
#define MAX_DECODED_BYTES ((size_t)4 << 20)

static kvc_context_t *ctx, *ctx2;

/* The two-thread decode of what ctx decoded with status sd (and message why): the same status,
 * message and (when OK) n bytes of values. */
static void same_on_two_threads(const uint8_t *buf, size_t len, size_t n, kvc_status_t sd, const char *why, const uint8_t *out)
{
    uint8_t *out2 = malloc(n ? n : 1);
    const kvc_status_t s2 = kvc_codec_decode(ctx2, buf, len, out2, n, NULL);
    FUZZ_CHECK(s2 == sd, "two threads decode with %s, one with %s", kvc_status_name(s2), kvc_status_name(sd));
    FUZZ_CHECK(sd == KVC_OK || strcmp(why, kvc_last_error()) == 0, "two threads say \"%s\", one \"%s\"", kvc_last_error(), why);
    FUZZ_CHECK(sd != KVC_OK || memcmp(out, out2, n) == 0, "two threads decode other values");
    free(out2);
}

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t crc(const uint8_t *p, size_t n) { return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n); }

/* Header: 48 bytes, CRC of bytes 0-43 at 44, total size at 24. Sections: type, CRC, size (u64). */
static void repair(uint8_t *b, size_t len)
{
    if (len < 48) return;
    put_u64(b + 24, len);
    put_u32(b + 44, crc(b, 44));
    for (size_t pos = 48; len - pos >= 16;) {
        const uint64_t sz = get_u64(b + pos + 8);
        if (sz > len - pos - 16) break;
        put_u32(b + pos + 4, crc(b + pos + 16, (size_t)sz));
        pos += 16 + (size_t)sz;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx) ctx = fuzz_cpu_context("best");
    if (!ctx2) ctx2 = fuzz_cpu_context_threads("best", 2);
    if (size < 1) return 0;
    const unsigned mode = data[0];
    const size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, data + 1, len);
    if (mode & 1) repair(buf, len);

    kvc_codec_info_t info;
    const kvc_status_t st = kvc_codec_inspect(buf, len, &info);
    FUZZ_CHECK(st == KVC_OK || st == KVC_ERR_CORRUPT || st == KVC_ERR_VERSION, "inspect returned %s",
               kvc_status_name(st));

    /* Stats parse the same container: same verdict; entries for every (plane, layer). */
    size_t nstats = st == KVC_OK ? info.planes * info.num_layers : 1;
    kvc_codec_layer_stats_t *stats = malloc(nstats * sizeof(*stats));
    const kvc_status_t st_stats = kvc_codec_layer_stats(buf, len, stats, nstats);
    FUZZ_CHECK(st_stats == st, "layer_stats returned %s, inspect %s", kvc_status_name(st_stats), kvc_status_name(st));
    free(stats);

    if (st == KVC_OK) {
        FUZZ_CHECK(info.container_bytes == len, "container_bytes %zu for %zu bytes", info.container_bytes, len);
        FUZZ_CHECK(info.planes == (info.layout == KVC_CODEC_MLA ? 1u : 2u), "planes %zu", info.planes);
        const size_t esize = kvc_dtype_size(info.dtype);
        FUZZ_CHECK(esize == 2 || esize == 4, "dtype %d", (int)info.dtype);
        FUZZ_CHECK(info.original_bytes ==
                       info.planes * info.num_layers * info.num_tokens * info.num_heads * info.head_size * esize,
                   "original_bytes %zu", info.original_bytes);
        FUZZ_CHECK(info.meta_bytes + info.scales_bytes + info.cdf_bytes + info.lengths_bytes + info.streams_bytes +
                           48 + 5 * 16 == len,
                   "section sizes do not add up to %zu", len);
        if (info.original_bytes <= MAX_DECODED_BYTES) {
            uint8_t *out = malloc(info.original_bytes);
            kvc_codec_info_t dinfo;
            const kvc_status_t sd = kvc_codec_decode(ctx, buf, len, out, info.original_bytes, &dinfo);
            /* Inspect checks all but the coded streams, whose symbols only decode can reject. */
            FUZZ_CHECK(sd == KVC_OK || sd == KVC_ERR_CORRUPT, "decode returned %s", kvc_status_name(sd));
            char why[512];
            snprintf(why, sizeof why, "%s", sd == KVC_OK ? "" : kvc_last_error());
            same_on_two_threads(buf, len, info.original_bytes, sd, why, out);
            if (sd == KVC_OK)
                FUZZ_CHECK(dinfo.original_bytes == info.original_bytes && dinfo.num_tokens == info.num_tokens &&
                               dinfo.dtype == info.dtype,
                           "decode and inspect describe different chunks");
            if (mode & 2) {
                const kvc_status_t ss = kvc_codec_decode(ctx, buf, len, out, info.original_bytes - 1, NULL);
                FUZZ_CHECK(ss == KVC_ERR_NO_SPACE, "decode into %zu bytes returned %s", info.original_bytes - 1,
                           kvc_status_name(ss));
            }
            free(out);
        }
    } else {
        uint8_t out[64];
        const kvc_status_t sd = kvc_codec_decode(ctx, buf, len, out, sizeof(out), NULL);
        FUZZ_CHECK(sd == st, "decode returned %s on a container inspect rejects with %s", kvc_status_name(sd),
                   kvc_status_name(st));
        char why[512];
        snprintf(why, sizeof why, "%s", kvc_last_error());
        same_on_two_threads(buf, len, sizeof(out), sd, why, out);
    }
    free(buf);
    return 0;
}
