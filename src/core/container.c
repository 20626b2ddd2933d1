/* SPDX-License-Identifier: BSD-3-Clause */
/* .kvc container: header + five checksummed sections (docs/FORMAT.md). Every length and count read
 * from the buffer is checked before use; arithmetic on sizes is overflow-checked. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bitio.h"
#include "checksum.h"
#include "common/checked.h"
#include "common/half.h"
#include "common/scales.h"
#include "container.h"
#include "log.h"

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static uint32_t crc(const uint8_t *p, size_t n) { return kvc_crc32(p, n); }


static size_t dtype_bytes(uint8_t dt) { return dt == KVC_DTYPE_F32 ? 4 : (dt == KVC_DTYPE_F16 || dt == KVC_DTYPE_BF16) ? 2 : 0; }

static size_t meta_bytes(const kvc_container_t *c) { return 32 + (size_t)c->kvs * c->num_layers; }

/* ---- LEB128 varints: the lengths, the CDF index ---- */

static size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        const uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (out) out[n] = (uint8_t)(b | (v ? 0x80 : 0));
        n++;
    } while (v);
    return n;
}

/* A varint of at most `bits` bits (32: a stream length; 64: the CDF index) from p[*off], n bytes:
 * VARINT_OK and *v; VARINT_TRUNCATED when the bytes end first or a byte more than the bits need
 * follows; VARINT_OVERLONG for a last byte of 0 after others (not the shortest form: 0x88 0x00
 * is not another spelling of 8); VARINT_ABOVE for a value of more bits (never reduced modulo). */
enum { VARINT_OK, VARINT_TRUNCATED, VARINT_OVERLONG, VARINT_ABOVE };
static int get_varint(const uint8_t *p, size_t n, size_t *off, unsigned bits, uint64_t *v)
{
    const unsigned last = (bits - 1) / 7 * 7; /* the last byte's shift: 28 for 32 bits, 63 for 64 */
    uint64_t x = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (*off >= n || shift > last) return VARINT_TRUNCATED;
        const uint8_t b = p[(*off)++];
        if (shift && b == 0) return VARINT_OVERLONG;
        if (shift == last && (b & 0x7f) >> (bits - last)) return VARINT_ABOVE;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return VARINT_OK;
        }
    }
}

/* ---- coded counts: per stream, symbol range [lo, hi], Rice parameter, counts of lo..hi-1 (hi's
 * count is implied by the token total) ---- */

static unsigned rice_param(const uint32_t *cnt, unsigned lo, unsigned hi)
{
    uint64_t sum = 0;
    for (unsigned s = lo; s < hi; s++) sum += cnt[s];
    const uint64_t n = hi > lo ? hi - lo : 1, mean = sum / n;
    unsigned k = 0;
    while (k < 31 && (2ull << k) <= mean) k++;
    return k;
}

/* Streams [s0, s1) of the coded counts; with w->buf NULL only counts the bits. */
static void put_counts(kvc_bitwriter_t *w, const kvc_container_t *c, uint64_t s0, uint64_t s1)
{
    for (uint64_t st = s0; st < s1; st++) {
        const uint32_t *cnt = c->counts + st * c->cdf_bins;
        unsigned lo = 0, hi = c->cdf_bins - 1u;
        while (lo < hi && cnt[lo] == 0) lo++;
        while (hi > lo && cnt[hi] == 0) hi--;
        const unsigned k = rice_param(cnt, lo, hi);
        kvc_bw_put(w, (uint64_t)lo << 11 | hi << 5 | k, 17);
        kvc_rice_put_run(w, cnt + lo, hi - lo, k);
    }
}

/* The coded counts in parts of streams, written by threads at once (a 7B-class chunk has 64 K
 * streams). Without the index (ac containers) the section is one bit stream: each
 * part is sized, then written into its own buffer at the bit phase of its final position, and the
 * parts are joined by OR-ing one boundary byte and copying the rest. With the index (rANS, format
 * 1.4) each part starts on a byte, behind varints of the part count and of every part's size but
 * the last's, and is written in place; a reader's threads parse the parts at once. */
#define COUNT_PARTS 16         /* parts of a section without index (any count makes the same bits) */
#define INDEX_PARTS_MAX 64     /* the most parts this writer indexes (readers take up to KVC_CONTAINER_MAX_CDF_PARTS) */
#define INDEX_PART_STREAMS 128 /* streams a part at least: a small chunk's counts take microseconds */
typedef struct {
    uint64_t nstreams;    /* streams per window */
    unsigned cdf_parts;   /* parts of the coded counts */
    size_t meta, scales, cdf, lengths, streams, total;
    size_t cdf_part_bits[INDEX_PARTS_MAX]; /* coded counts: each part's bits */
} layout_t;

static unsigned count_parts(const kvc_container_t *c, uint64_t nstreams)
{
    if (!(c->flags & KVC_CONTAINER_FLAG_CDF_INDEX)) return nstreams < COUNT_PARTS ? 1 : COUNT_PARTS;
    const uint64_t n = nstreams / INDEX_PART_STREAMS;
    return n < 1 ? 1 : n > INDEX_PARTS_MAX ? INDEX_PARTS_MAX : (unsigned)n;
}

/* Where piece i of n items cut in `pieces` starts: the counts' parts (part i holds streams
 * [S i / P, S (i + 1) / P)) and the checksums' pieces. */
static uint64_t piece_at(uint64_t n, unsigned pieces, unsigned i) { return n * i / pieces; }

/* Sizing: each part's bits, and the section's bytes. */
static size_t counts_size(const kvc_container_t *c, uint64_t nstreams, unsigned parts, size_t *bits)
{
    const int threads = c->threads > 1 ? c->threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (unsigned i = 0; i < parts; i++) {
        kvc_bitwriter_t w = { NULL, 0, 0 };
        put_counts(&w, c, piece_at(nstreams, parts, i), piece_at(nstreams, parts, i + 1));
        bits[i] = w.bits;
    }
    size_t total = 0;
    if (c->flags & KVC_CONTAINER_FLAG_CDF_INDEX) {
        total = put_varint(NULL, parts);
        for (unsigned i = 0; i < parts; i++) total += (bits[i] + 7) / 8 + (i + 1 < parts ? put_varint(NULL, (bits[i] + 7) / 8) : 0);
        return total;
    }
    for (unsigned i = 0; i < parts; i++) total += bits[i];
    return (total + 7) / 8;
}

/* Writing the section of L->cdf bytes that counts_size measured. */
static kvc_status_t counts_section(const kvc_container_t *c, const layout_t *L, uint8_t *out)
{
    const int threads = c->threads > 1 ? c->threads : 1;
    const unsigned parts = L->cdf_parts;
    const uint64_t S = L->nstreams;
    memset(out, 0, L->cdf);
    size_t at[INDEX_PARTS_MAX + 1]; /* each part's first byte (with the index) or bit (without) */
    if (c->flags & KVC_CONTAINER_FLAG_CDF_INDEX) {
        at[0] = put_varint(out, parts);
        for (unsigned i = 0; i + 1 < parts; i++) at[0] += put_varint(out + at[0], (L->cdf_part_bits[i] + 7) / 8);
        for (unsigned i = 0; i < parts; i++) at[i + 1] = at[i] + (L->cdf_part_bits[i] + 7) / 8;
#pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
        for (unsigned i = 0; i < parts; i++) {
            kvc_bitwriter_t w = { out + at[i], at[i + 1] - at[i], 0 };
            put_counts(&w, c, piece_at(S, parts, i), piece_at(S, parts, i + 1));
        }
        return KVC_OK;
    }
    at[0] = 0;
    for (unsigned i = 0; i < parts; i++) at[i + 1] = at[i] + L->cdf_part_bits[i];
    if (parts == 1) {
        kvc_bitwriter_t w = { out, L->cdf, 0 };
        put_counts(&w, c, 0, S);
        return KVC_OK;
    }
    uint8_t *tmp[COUNT_PARTS] = { NULL };
    int failed = 0;
    for (unsigned i = 0; i < parts; i++) failed |= !(tmp[i] = calloc((at[i] % 8 + at[i + 1] - at[i] + 7) / 8 + 1, 1));
    if (!failed) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (unsigned i = 0; i < parts; i++) {
            const size_t phase = at[i] % 8, n = (phase + at[i + 1] - at[i] + 7) / 8;
            kvc_bitwriter_t w = { tmp[i], n, phase };
            put_counts(&w, c, piece_at(S, parts, i), piece_at(S, parts, i + 1));
        }
        for (unsigned i = 0; i < parts; i++) {
            const size_t b0 = at[i] / 8, n = (at[i] % 8 + at[i + 1] - at[i] + 7) / 8;
            if (!n) continue;
            out[b0] |= tmp[i][0];
            memcpy(out + b0 + 1, tmp[i] + 1, n - 1);
        }
    }
    for (unsigned i = 0; i < parts; i++) free(tmp[i]);
    return failed ? kvc_error(KVC_ERR_NO_MEMORY, "container: no memory for the coded CDF") : KVC_OK;
}

/* 1 when some scale of the SCALES section (n bytes of dtype) is not finite and >= 0. */
static int scales_bad(const uint8_t *p, size_t n, kvc_dtype_t dtype)
{
    if (dtype == KVC_DTYPE_F32) return kvc_scales_bad32(p, n / 4);
    return kvc_scales_bad16(p, n / 2, dtype == KVC_DTYPE_F16 ? 0x7C00u : 0x7F80u);
}

/* Streams [s0, s1) of the coded counts from p[0, len), which they must fill to its last byte;
 * part: the index's part (-1: a section without index). say = 0: the status alone, no message
 * (a thread of a parallel parse; the caller parses the first failing part again to say why). */
static kvc_status_t get_counts(const uint8_t *p, size_t len, kvc_container_t *c, uint64_t s0, uint64_t s1, int part, int say)
{
#define FAIL(...) (say ? kvc_error(KVC_ERR_CORRUPT, __VA_ARGS__) : KVC_ERR_CORRUPT)
    kvc_bitreader_t r = { p, len, 0, 0 };
    const uint64_t C = (uint64_t)c->num_heads * c->head_size; /* streams of a layer (one a channel) */
    const int rans = !!(c->flags & KVC_CONTAINER_FLAG_RANS);
    for (uint64_t st = s0; st < s1; st++) {
        uint32_t *cnt = c->counts + st * c->cdf_bins;
        const unsigned lo = (unsigned)kvc_br_get(&r, 6), hi = (unsigned)kvc_br_get(&r, 6), k = (unsigned)kvc_br_get(&r, 5);
        if (hi >= c->cdf_bins || lo > hi || k > 31)
            return FAIL("container CDF: stream %llu has symbol range [%u, %u] for %u bins", (unsigned long long)st, lo, hi, c->cdf_bins);
        /* The quantiser's symbols of a layer of B bins are at most 2M = 2 (B / 2 - 1): in a rANS
         * container (kvcore's encoder alone writes them) a count above is corrupt, and the codec's
         * rANS decode relies on it (a symbol without a count has no frequency, so none above 2M
         * can come out). Not for ac: LMCache's objects, imported, may code any symbol below the
         * CDF's width. */
        const unsigned top = 2u * (c->bins[st / C] / 2u - 1u);
        if (rans && hi > top)
            return FAIL("container CDF: stream %llu (layer %llu) counts symbol %u, above 2M = %u of its %u bins", (unsigned long long)st,
                        (unsigned long long)(st / C), hi, top, c->bins[st / C]);
        const uint64_t sum = kvc_rice_get_run(&r, k, hi - lo, cnt + lo);
        if (r.overrun)
            return part < 0 ? FAIL("container CDF section is truncated at stream %llu", (unsigned long long)st)
                            : FAIL("container CDF part %d is truncated at stream %llu", part, (unsigned long long)st);
        if (sum > c->num_tokens)
            return FAIL("container CDF: stream %llu counts %llu symbols for %u tokens", (unsigned long long)st, (unsigned long long)sum,
                        c->num_tokens);
        cnt[hi] = c->num_tokens - (uint32_t)sum;
        if (hi > lo && (cnt[lo] == 0 || cnt[hi] == 0))
            return FAIL("container CDF: stream %llu range ends have zero counts", (unsigned long long)st);
    }
    if ((r.pos + 7) / 8 != len)
        return part < 0 ? FAIL("container CDF section has %zu bytes, its content %zu", len, (r.pos + 7) / 8)
                        : FAIL("container CDF part %d has %zu bytes, its content %zu", part, len, (r.pos + 7) / 8);
    return KVC_OK;
#undef FAIL
}


/* ---- sizes ---- */


static kvc_status_t plan(const kvc_container_t *c, layout_t *L)
{
    memset(L, 0, sizeof(*L));
    L->nstreams = kvc_container_streams_per_window(c);
    L->meta = meta_bytes(c);
    L->scales = c->scales_bytes;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF) {
        uint64_t n;
        if (!kvc_mul_ok_u64(L->nstreams, (uint64_t)(c->cdf_bins + 1) * 2, &n)) return KVC_ERR_NO_MEMORY;
        L->cdf = n;
    } else {
        L->cdf_parts = count_parts(c, L->nstreams);
        L->cdf = counts_size(c, L->nstreams, L->cdf_parts, L->cdf_part_bits);
    }
    for (uint64_t i = 0; i < kvc_container_coded_per_window(c) * c->num_windows; i++) L->lengths += put_varint(NULL, c->lengths[i]);
    L->streams = c->streams_bytes;
    L->total = KVC_CONTAINER_HEADER_BYTES + 5 * KVC_CONTAINER_SECTION_BYTES + L->meta + L->scales + L->cdf + L->lengths +
               L->streams;
    return KVC_OK;
}

kvc_status_t kvc_container_size(const kvc_container_t *c, size_t *bytes)
{
    layout_t L;
    kvc_status_t st = plan(c, &L);
    if (st == KVC_OK) *bytes = L.total;
    return st;
}

static uint8_t *section_with_crc(uint8_t *p, uint32_t type, size_t n, uint32_t sum)
{
    put_u32(p, type);
    put_u32(p + 4, sum);
    put_u64(p + 8, n);
    return p + KVC_CONTAINER_SECTION_BYTES + n;
}

static uint8_t *section(uint8_t *p, uint32_t type, const uint8_t *payload, size_t n)
{
    return section_with_crc(p, type, n, crc(payload, n));
}

/* The CRC of n bytes cut in `pieces` (piece_at) from the pieces' CRCs: the writer's copy and the
 * parse's look-ahead checksum. */
static uint32_t crc_of_pieces(const uint32_t *sums, unsigned pieces, size_t n)
{
    uint32_t sum = sums[0];
    for (unsigned i = 1; i < pieces; i++) sum = kvc_crc32_combine(sum, sums[i], (size_t)(piece_at(n, pieces, i + 1) - piece_at(n, pieces, i)));
    return sum;
}

/* memcpy + CRC-32 of the copy, in one piece per thread above 1 MiB (the streams of a 7B-class
 * chunk are ~8 MB), the pieces' CRCs joined (kvc_crc32_combine). */
static uint32_t copy_crc(uint8_t *dst, const uint8_t *src, size_t n, int threads)
{
    const unsigned parts = threads > 1 && n > (1u << 20) ? (threads < 16 ? (unsigned)threads : 16u) : 1u;
    uint32_t sums[16];
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (unsigned i = 0; i < parts; i++) {
        const size_t a = (size_t)piece_at(n, parts, i), b = (size_t)piece_at(n, parts, i + 1);
        memcpy(dst + a, src + a, b - a);
        sums[i] = crc(dst + a, b - a);
    }
    return crc_of_pieces(sums, parts, n);
}

static kvc_status_t write_planned(const kvc_container_t *c, const layout_t *Lp, uint8_t *out, size_t cap, size_t *written);

kvc_status_t kvc_container_write(const kvc_container_t *c, uint8_t *out, size_t cap, size_t *written)
{
    layout_t L;
    kvc_status_t st = plan(c, &L);
    return st != KVC_OK ? st : write_planned(c, &L, out, cap, written);
}

kvc_status_t kvc_container_write_alloc(const kvc_container_t *c, uint8_t **out, size_t *written)
{
    layout_t L;
    kvc_status_t st = plan(c, &L);
    if (st != KVC_OK) return st;
    uint8_t *buf = malloc(L.total);
    if (!buf) return kvc_error(KVC_ERR_NO_MEMORY, "container: no memory for %zu bytes", L.total);
    if ((st = write_planned(c, &L, buf, L.total, written)) != KVC_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return KVC_OK;
}

static kvc_status_t write_planned(const kvc_container_t *c, const layout_t *Lp, uint8_t *out, size_t cap, size_t *written)
{
    const layout_t L = *Lp;
    if (cap < L.total) return kvc_error(KVC_ERR_NO_SPACE, "container needs %zu bytes, buffer has %zu", L.total, cap);
    /* Zero only what is not overwritten whole (header, META's reserved bytes, the CDF's padding):
     * the streams of a 7B-class chunk are ~8 MB. */
    memset(out, 0, KVC_CONTAINER_HEADER_BYTES + KVC_CONTAINER_SECTION_BYTES + L.meta);
    memcpy(out, KVC_CONTAINER_MAGIC, 8);
    put_u16(out + 8, KVC_CONTAINER_VERSION_MAJOR);
    /* The oldest minor that has every feature used: format 1.0 containers stay byte-identical. */
    put_u16(out + 10, c->flags & KVC_CONTAINER_FLAGS_RANS ? 4 : c->flags & KVC_CONTAINER_FLAGS_MINOR1 ? 1 : 0);
    put_u32(out + 12, c->flags);
    put_u32(out + 16, KVC_CONTAINER_HEADER_BYTES);
    put_u32(out + 20, 5);
    put_u64(out + 24, L.total);
    put_u32(out + 44, crc(out, 44));
    uint8_t *p = out + KVC_CONTAINER_HEADER_BYTES;

    uint8_t *m = p + KVC_CONTAINER_SECTION_BYTES;
    m[0] = c->dtype;
    m[1] = c->layout;
    m[2] = c->kvs;
    m[3] = c->cdf_bins;
    put_u32(m + 4, c->num_layers);
    put_u32(m + 8, c->num_tokens);
    put_u32(m + 12, c->num_heads);
    put_u32(m + 16, c->head_size);
    put_u32(m + 20, c->window_tokens);
    put_u32(m + 24, c->num_windows);
    memcpy(m + 32, c->bins, (size_t)c->kvs * c->num_layers);
    p = section(p, KVC_SECTION_META, m, L.meta);

    memcpy(p + KVC_CONTAINER_SECTION_BYTES, c->scales, L.scales);
    p = section(p, KVC_SECTION_SCALES, p + KVC_CONTAINER_SECTION_BYTES, L.scales);

    uint8_t *q = p + KVC_CONTAINER_SECTION_BYTES;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF) memcpy(q, c->raw_cdf, L.cdf);
    else {
        const kvc_status_t st = counts_section(c, &L, q);
        if (st != KVC_OK) return st;
    }
    p = section(p, KVC_SECTION_CDF, q, L.cdf);

    q = p + KVC_CONTAINER_SECTION_BYTES;
    size_t off = 0;
    for (uint64_t i = 0; i < kvc_container_coded_per_window(c) * c->num_windows; i++) off += put_varint(q + off, c->lengths[i]);
    p = section(p, KVC_SECTION_LENGTHS, q, L.lengths);

    const uint32_t streams_crc = copy_crc(p + KVC_CONTAINER_SECTION_BYTES, c->streams, L.streams, c->threads);
    p = section_with_crc(p, KVC_SECTION_STREAMS, L.streams, streams_crc);
    *written = L.total;
    return KVC_OK;
}

/* ---- parsing ---- */

/* STREAMS sections from this size get their checksum on a second thread (kvc_container_parse with threads). */
#define CRC_AHEAD_MIN (32u << 10)

/* The smallest container: a header and five empty section headers (no valid one is that small). */
#define MIN_CONTAINER_BYTES (KVC_CONTAINER_HEADER_BYTES + 5 * KVC_CONTAINER_SECTION_BYTES)

/* The header's checks after its magic and length, shared by the parse and the probe so that both
 * accept the same headers. exact: the total size must be len (a parse); else (a probe, whose bytes
 * may end before the container or go past it) at least MIN_CONTAINER_BYTES. */
static kvc_status_t check_header(const uint8_t *buf, size_t len, int exact, kvc_container_t *c)
{
    if (get_u32(buf + 44) != crc(buf, 44)) return kvc_error(KVC_ERR_CORRUPT, "container header checksum mismatch");
    const unsigned major = get_u16(buf + 8);
    if (major != KVC_CONTAINER_VERSION_MAJOR)
        return kvc_error(KVC_ERR_VERSION, "container format version %u.%u; this kvcore reads %u.x", major, get_u16(buf + 10),
                         KVC_CONTAINER_VERSION_MAJOR);
    if (get_u32(buf + 16) != KVC_CONTAINER_HEADER_BYTES || get_u32(buf + 20) != 5)
        return kvc_error(KVC_ERR_CORRUPT, "container header has unexpected sizes");
    const uint64_t total = get_u64(buf + 24);
    if (exact && total != len)
        return kvc_error(KVC_ERR_CORRUPT, "container says %llu bytes, %zu given (truncated or padded)", (unsigned long long)total, len);
    if (!exact && total < MIN_CONTAINER_BYTES)
        return kvc_error(KVC_ERR_CORRUPT, "container says %llu bytes, fewer than its header and sections", (unsigned long long)total);
    for (unsigned i = 32; i < 44; i++)
        if (buf[i]) return kvc_error(KVC_ERR_CORRUPT, "container header reserved byte %u is 0x%02x, must be 0", i, buf[i]);
    c->flags = get_u32(buf + 12);
    c->version_minor = get_u16(buf + 10);
    if (c->flags & ~KVC_CONTAINER_FLAGS_KNOWN) {
        /* A newer minor may add flags: say so instead of calling the file corrupt. */
        if (c->version_minor > KVC_CONTAINER_VERSION_MINOR)
            return kvc_error(KVC_ERR_VERSION, "container format 1.%u uses features (flags 0x%x) this kvcore (format 1.%u) cannot read",
                             c->version_minor, c->flags, KVC_CONTAINER_VERSION_MINOR);
        return kvc_error(KVC_ERR_CORRUPT, "container has unknown flags 0x%x", c->flags);
    }
    if ((c->flags & KVC_CONTAINER_FLAGS_MINOR1) && c->version_minor < 1)
        return kvc_error(KVC_ERR_CORRUPT, "container format 1.%u cannot have flags 0x%x (format 1.1 features)", c->version_minor,
                         c->flags);
    if ((c->flags & KVC_CONTAINER_FLAG_CDF_INDEX) && !(c->flags & KVC_CONTAINER_FLAG_RANS))
        return kvc_error(KVC_ERR_CORRUPT, "container has the CDF index flag without rANS streams (flags 0x%x)", c->flags);
    if ((c->flags & KVC_CONTAINER_FLAG_RANS_SPAN4) && !(c->flags & KVC_CONTAINER_FLAG_RANS))
        return kvc_error(KVC_ERR_CORRUPT, "container has the rANS stream span flag without rANS streams (flags 0x%x)", c->flags);
    /* rANS frequencies come from the counts: a raw LMCache table has none. */
    if ((c->flags & KVC_CONTAINER_FLAG_RANS) && (c->flags & KVC_CONTAINER_FLAG_RAW_CDF))
        return kvc_error(KVC_ERR_CORRUPT, "container has rANS streams with a raw CDF table (flags 0x%x)", c->flags);
    const uint32_t rans = c->flags & KVC_CONTAINER_FLAGS_RANS;
    /* The rANS layouts of formats 1.2 (8-channel streams) and 1.3 (the counts without the index)
     * came before any release and are not read (docs/FORMAT.md "Versions"). */
    if ((c->version_minor == 2 && rans == KVC_CONTAINER_FLAG_RANS) ||
        (c->version_minor == 3 && rans == (KVC_CONTAINER_FLAG_RANS | KVC_CONTAINER_FLAG_RANS_SPAN4)))
        return kvc_error(KVC_ERR_VERSION, "container format 1.%u has a pre-release rANS layout this kvcore does not read (only 1.4's): "
                         "encode the chunk again", c->version_minor);
    if (rans && c->version_minor < 4)
        return kvc_error(KVC_ERR_CORRUPT, "container format 1.%u cannot have flags 0x%x (format 1.4 features)", c->version_minor,
                         c->flags);
    if (rans && rans != KVC_CONTAINER_FLAGS_RANS)
        return kvc_error(KVC_ERR_CORRUPT, "container has rANS flags 0x%x; a rANS container has all of 0x%x", rans,
                         KVC_CONTAINER_FLAGS_RANS);
    return KVC_OK;
}

static kvc_status_t parse_header(const uint8_t *buf, size_t len, kvc_container_t *c)
{
    if (len < KVC_CONTAINER_HEADER_BYTES) return kvc_error(KVC_ERR_CORRUPT, "container of %zu bytes is shorter than its header", len);
    if (memcmp(buf, KVC_CONTAINER_MAGIC, 8)) return kvc_error(KVC_ERR_CORRUPT, "not a kvcore container (bad magic)");
    return check_header(buf, len, 1, c);
}

/* Next section: checks type, bounds and checksum; returns its payload. */
static kvc_status_t next_section_at(const uint8_t *buf, size_t len, size_t *pos, uint32_t type, const uint8_t **payload, size_t *n,
                                    int check_crc)
{
    if (len - *pos < KVC_CONTAINER_SECTION_BYTES) return kvc_error(KVC_ERR_CORRUPT, "container truncated before section %u", type);
    const uint8_t *h = buf + *pos;
    if (get_u32(h) != type) return kvc_error(KVC_ERR_CORRUPT, "container section %u found where %u was expected", get_u32(h), type);
    const uint64_t sz = get_u64(h + 8);
    if (sz > len - *pos - KVC_CONTAINER_SECTION_BYTES)
        return kvc_error(KVC_ERR_CORRUPT, "container section %u claims %llu bytes past the end", type, (unsigned long long)sz);
    *payload = h + KVC_CONTAINER_SECTION_BYTES;
    *n = (size_t)sz;
    if (check_crc && crc(*payload, *n) != get_u32(h + 4))
        return kvc_error(KVC_ERR_CORRUPT, "container section %u checksum mismatch", type);
    *pos += KVC_CONTAINER_SECTION_BYTES + *n;
    return KVC_OK;
}

static kvc_status_t next_section(const uint8_t *buf, size_t len, size_t *pos, uint32_t type, const uint8_t **payload, size_t *n)
{
    return next_section_at(buf, len, pos, type, payload, n, 1);
}

/* The payload of the section `skip` sections past *pos, when the headers on the way are in
 * bounds (no other check: a look ahead that the parse then makes in order). */
static int section_ahead(const uint8_t *buf, size_t len, size_t pos, unsigned skip, const uint8_t **payload, size_t *n)
{
    for (unsigned i = 0;; i++) {
        if (len - pos < KVC_CONTAINER_SECTION_BYTES) return 0;
        const uint64_t sz = get_u64(buf + pos + 8);
        if (sz > len - pos - KVC_CONTAINER_SECTION_BYTES) return 0;
        if (i == skip) {
            *payload = buf + pos + KVC_CONTAINER_SECTION_BYTES;
            *n = (size_t)sz;
            return 1;
        }
        pos += KVC_CONTAINER_SECTION_BYTES + (size_t)sz;
    }
}

static kvc_status_t parse_meta(const uint8_t *m, size_t n, kvc_container_t *c)
{
    if (n < 32) return kvc_error(KVC_ERR_CORRUPT, "container META section too short (%zu bytes)", n);
    c->dtype = m[0];
    c->layout = m[1];
    c->kvs = m[2];
    c->cdf_bins = m[3];
    c->num_layers = get_u32(m + 4);
    c->num_tokens = get_u32(m + 8);
    c->num_heads = get_u32(m + 12);
    c->head_size = get_u32(m + 16);
    c->window_tokens = get_u32(m + 20);
    c->num_windows = get_u32(m + 24);
    if (get_u32(m + 28)) return kvc_error(KVC_ERR_CORRUPT, "container META reserved word is 0x%x, must be 0", get_u32(m + 28));
    if (!dtype_bytes(c->dtype)) return kvc_error(KVC_ERR_CORRUPT, "container dtype code %u is unknown", c->dtype);
    if (!((c->layout == KVC_CT_LAYOUT_KV_2LTD && c->kvs == 2) || (c->layout == KVC_CT_LAYOUT_MLA && c->kvs == 1 && c->num_heads == 1)))
        return kvc_error(KVC_ERR_CORRUPT, "container layout %u with %u planes and %u heads is inconsistent", c->layout, c->kvs,
                         c->num_heads);
    if (c->cdf_bins < 2 || c->cdf_bins > KVC_CONTAINER_MAX_BINS)
        return kvc_error(KVC_ERR_CORRUPT, "container CDF width %u outside [2, %d]", c->cdf_bins, KVC_CONTAINER_MAX_BINS);
    if (!c->num_layers || c->num_layers > sizeof(c->bins) / 2 || !c->num_tokens || !c->num_heads || !c->head_size ||
        !c->window_tokens)
        return kvc_error(KVC_ERR_CORRUPT, "container has a zero or oversized dimension");
    if (c->num_windows != (c->num_tokens + c->window_tokens - 1) / c->window_tokens)
        return kvc_error(KVC_ERR_CORRUPT, "container window count %u does not match %u tokens / %u", c->num_windows,
                         c->num_tokens, c->window_tokens);
    uint64_t x;
    if (!kvc_mul_ok_u64((uint64_t)c->num_heads, c->head_size, &x) || x > (1u << 24) ||
        !kvc_mul_ok_u64(kvc_container_streams_per_window(c), c->num_windows, &x) || x > (1ull << 40))
        return kvc_error(KVC_ERR_CORRUPT, "container dimensions are implausibly large");
    if (n != meta_bytes(c)) return kvc_error(KVC_ERR_CORRUPT, "container META section has %zu bytes, expected %zu", n, meta_bytes(c));
    for (unsigned i = 0; i < (unsigned)c->kvs * c->num_layers; i++) {
        c->bins[i] = m[32 + i];
        if (c->bins[i] < 4 || c->bins[i] > c->cdf_bins)
            return kvc_error(KVC_ERR_CORRUPT, "container quantiser bins[%u] = %u outside [4, %u]", i, c->bins[i], c->cdf_bins);
    }
    return KVC_OK;
}

/* The header and META, in order. */
static kvc_status_t parse_head(const uint8_t *buf, size_t len, kvc_container_t *c)
{
    memset(c, 0, sizeof(*c));
    kvc_status_t st = parse_header(buf, len, c);
    if (st != KVC_OK) return st;
    size_t pos = KVC_CONTAINER_HEADER_BYTES, n;
    const uint8_t *m;
    st = next_section(buf, len, &pos, KVC_SECTION_META, &m, &n);
    return st != KVC_OK ? st : parse_meta(m, n, c);
}

/* The probe reads at most the header and the largest META (32 bytes and the bins). */
_Static_assert(KVC_CONTAINER_PROBE_BYTES == KVC_CONTAINER_HEADER_BYTES + KVC_CONTAINER_SECTION_BYTES + 32 +
                                               sizeof(((kvc_container_t *)0)->bins),
               "KVC_CONTAINER_PROBE_BYTES is the header and the largest META section");

/* The probe: the magic on as many bytes as there are, then the parse's header checks, then META
 * when the whole section is in the bytes (a section cut short is left to the parse). */
KVC_API kvc_status_t kvc_container_probe(const void *bytes, size_t len, kvc_container_info_t *info)
{
    if (!info || (!bytes && len)) return kvc_error(KVC_ERR_INVALID_ARG, "container probe: buf (with len > 0) and info must not be NULL");
    memset(info, 0, sizeof(*info));
    const uint8_t *buf = bytes;
    if (len && memcmp(buf, KVC_CONTAINER_MAGIC, len < 8 ? len : 8))
        return kvc_error(KVC_ERR_CORRUPT, "not a kvcore container (bad magic)");
    if (len >= 8) info->kind = KVC_CONTAINER_INVALID;
    if (len < KVC_CONTAINER_HEADER_BYTES) {
        info->needed_bytes = KVC_CONTAINER_HEADER_BYTES;
        return kvc_error(KVC_ERR_CORRUPT, "container of %zu bytes is shorter than its header", len);
    }
    kvc_container_t *c = calloc(1, sizeof(*c));
    if (!c) return kvc_error(KVC_ERR_NO_MEMORY, "container probe: no memory");
    const uint64_t total = get_u64(buf + 24);
    if (get_u32(buf + 44) == crc(buf, 44)) { /* what the header says, also when a check fails next */
        info->version_major = get_u16(buf + 8);
        info->version_minor = get_u16(buf + 10);
        info->container_bytes = total;
    }
    kvc_status_t st = check_header(buf, len, 0, c);
    if (st != KVC_OK) goto done;
    info->kind = total > len ? KVC_CONTAINER_PART : total == len ? KVC_CONTAINER_ONE : KVC_CONTAINER_STREAM;
    info->flags = c->flags;
    info->header_bytes = KVC_CONTAINER_HEADER_BYTES;
    info->needed_bytes = total;
    info->coder = c->flags & KVC_CONTAINER_FLAG_RANS ? KVC_CODER_RANS : KVC_CODER_AC;
    info->raw_cdf = !!(c->flags & KVC_CONTAINER_FLAG_RAW_CDF);
    info->heads_known = !(c->flags & KVC_CONTAINER_FLAG_NO_HEADS);
    info->key_scaling = c->flags & KVC_CONTAINER_FLAG_CHANNEL_KEYS ? KVC_CODEC_SCALE_CHANNEL : KVC_CODEC_SCALE_TOKEN;
    const size_t end = total < len ? (size_t)total : len; /* the first container's bytes only */
    const uint8_t *h = buf + KVC_CONTAINER_HEADER_BYTES;
    if (end - KVC_CONTAINER_HEADER_BYTES < KVC_CONTAINER_SECTION_BYTES) goto done;
    /* In bytes cut before the container's end, a META that goes past them is not damage (a wrong
     * section type is, and a size no META has) */
    const uint64_t meta_n = get_u64(h + 8);
    if (total > len && get_u32(h) == KVC_SECTION_META && meta_n <= KVC_CONTAINER_PROBE_BYTES - KVC_CONTAINER_HEADER_BYTES - KVC_CONTAINER_SECTION_BYTES &&
        meta_n > end - KVC_CONTAINER_HEADER_BYTES - KVC_CONTAINER_SECTION_BYTES)
        goto done;
    size_t pos = KVC_CONTAINER_HEADER_BYTES, n;
    const uint8_t *m;
    if ((st = next_section(buf, end, &pos, KVC_SECTION_META, &m, &n)) != KVC_OK || (st = parse_meta(m, n, c)) != KVC_OK)
        goto done;
    info->meta = 1;
    info->dtype = (kvc_dtype_t)c->dtype;
    info->layout = c->layout == KVC_CT_LAYOUT_MLA ? KVC_CODEC_MLA : KVC_CODEC_KV_2LTD;
    info->planes = c->kvs;
    info->num_layers = c->num_layers;
    info->num_tokens = c->num_tokens;
    info->num_heads = c->num_heads;
    info->head_size = c->head_size;
    info->window_tokens = c->window_tokens;
    info->num_windows = c->num_windows;
    info->cdf_bins = c->cdf_bins;
done:
    free(c);
    return st;
}

/* The coded counts' parts found by parse_front, and what threads share while parsing them. */
typedef struct {
    const uint8_t *ahead; /* STREAMS' payload, found ahead (NULL when a header on the way is out of bounds) */
    size_t ahead_n;
    /* part i of n: parts + at[i] .. parts + at[i + 1] (one part without the index; none for a raw CDF) */
    const uint8_t *parts;
    unsigned nparts;
    int indexed;
    uint64_t *at, one[2]; /* at: one, or owned */
    unsigned char *bad;   /* [nparts]: a part that failed (threads) */
    uint32_t sums[16];    /* STREAMS' checksum in pieces */
} pending_t;

/* SCALES and CDF, in order: the scales checked, a raw CDF checked, the coded counts' parts found
 * (the index read and checked) and their table allocated; the counts are parsed next
 * (parse_counts). */
static kvc_status_t parse_front(const uint8_t *buf, size_t len, kvc_container_t *c, size_t *pos_io, pending_t *cp)
{
    kvc_status_t st;
    size_t pos = *pos_io, n;
    const uint8_t *p;
    const uint64_t nstreams = kvc_container_streams_per_window(c);

    if ((st = next_section(buf, len, &pos, KVC_SECTION_SCALES, &p, &n)) != KVC_OK) return st;
    if (n != kvc_container_num_scales(c) * dtype_bytes(c->dtype))
        return kvc_error(KVC_ERR_CORRUPT, "container SCALES section has %zu bytes for %llu scales", n,
                         (unsigned long long)kvc_container_num_scales(c));
    /* The quantiser's per-row max-abs: finite and >= 0 (-0 included). Checked on the bits first
     * (a float compare a scale was 2-3 % of a decode), then element by element for the message. */
    if (scales_bad(p, n, c->dtype))
        for (size_t i = 0; i < n / dtype_bytes(c->dtype); i++) {
            float f;
            if (c->dtype == KVC_DTYPE_F32) memcpy(&f, p + 4 * i, 4);
            else f = c->dtype == KVC_DTYPE_F16 ? kvc_f16_to_f32((uint16_t)get_u16(p + 2 * i)) : kvc_bf16_to_f32((uint16_t)get_u16(p + 2 * i));
            if (!(f >= 0.0f) || f == INFINITY)
                return kvc_error(KVC_ERR_CORRUPT, "container scale %zu is %g (must be finite and >= 0)", i, (double)f);
        }
    c->scales = p;
    c->scales_bytes = n;

    if ((st = next_section(buf, len, &pos, KVC_SECTION_CDF, &p, &n)) != KVC_OK) return st;
    *pos_io = pos;
    if (c->flags & KVC_CONTAINER_FLAG_RAW_CDF) {
        if (n != nstreams * (c->cdf_bins + 1u) * 2)
            return kvc_error(KVC_ERR_CORRUPT, "container raw CDF section has %zu bytes, expected %llu", n,
                             (unsigned long long)(nstreams * (c->cdf_bins + 1u) * 2));
        /* The decoder's rule: entries [0, B) of every row strictly increasing. */
        for (uint64_t st_i = 0; st_i < nstreams; st_i++) {
            const uint8_t *row = p + st_i * (c->cdf_bins + 1u) * 2;
            for (unsigned s = 1; s < c->cdf_bins; s++)
                if (get_u16(row + 2 * s) <= get_u16(row + 2 * (s - 1)))
                    return kvc_error(KVC_ERR_CORRUPT, "container raw CDF of stream %llu is not strictly increasing at entry %u",
                                     (unsigned long long)st_i, s);
        }
        c->raw_cdf = p;
        return KVC_OK;
    }
    /* Each coded stream takes at least 17 bits: reject before allocating for a claimed size. */
    if ((uint64_t)n * 8 < nstreams * 17)
        return kvc_error(KVC_ERR_CORRUPT, "container CDF section of %zu bytes cannot hold %llu streams", n, (unsigned long long)nstreams);
    c->counts = calloc(nstreams * c->cdf_bins, sizeof(uint32_t));
    if (!c->counts) return kvc_error(KVC_ERR_NO_MEMORY, "no memory for %llu CDF counts", (unsigned long long)nstreams);
    cp->parts = p;
    if (!(c->flags & KVC_CONTAINER_FLAG_CDF_INDEX)) {
        cp->nparts = 1;
        cp->at = cp->one;
        cp->one[0] = 0;
        cp->one[1] = n;
        return KVC_OK;
    }
    size_t off = 0;
    uint64_t parts;
    if (get_varint(p, n, &off, 64, &parts) != VARINT_OK) return kvc_error(KVC_ERR_CORRUPT, "container CDF index is truncated or malformed");
    if (!parts || parts > KVC_CONTAINER_MAX_CDF_PARTS || parts > nstreams)
        return kvc_error(KVC_ERR_CORRUPT, "container CDF index has %llu parts for %llu streams (1 to %d, at most one a stream)",
                         (unsigned long long)parts, (unsigned long long)nstreams, KVC_CONTAINER_MAX_CDF_PARTS);
    if (!(cp->at = malloc((parts + 1) * sizeof *cp->at))) return kvc_error(KVC_ERR_NO_MEMORY, "no memory for the CDF index");
    cp->nparts = (unsigned)parts;
    cp->indexed = 1;
    for (unsigned i = 0; i + 1 < cp->nparts; i++) /* the sizes, then their offsets behind the index */
        if (get_varint(p, n, &off, 64, &cp->at[i + 1]) != VARINT_OK)
            return kvc_error(KVC_ERR_CORRUPT, "container CDF index is truncated or malformed at part %u", i);
    cp->at[0] = off;
    for (unsigned i = 0; i + 1 < cp->nparts; i++) {
        if (cp->at[i + 1] > n - cp->at[i])
            return kvc_error(KVC_ERR_CORRUPT, "container CDF index: part %u of %llu bytes runs past the section's %zu", i,
                             (unsigned long long)cp->at[i + 1], n);
        cp->at[i + 1] += cp->at[i];
    }
    cp->at[cp->nparts] = n; /* the last part: the rest */
    return KVC_OK;
}

/* Count part i of the pending parse (say: set the error message). */
static kvc_status_t count_part(kvc_container_t *c, const pending_t *pp, unsigned i, int say)
{
    const uint64_t S = kvc_container_streams_per_window(c);
    return get_counts(pp->parts + pp->at[i], (size_t)(pp->at[i + 1] - pp->at[i]), c, piece_at(S, pp->nparts, i),
                      piece_at(S, pp->nparts, i + 1), pp->indexed ? (int)i : -1, say);
}

/* The pieces STREAMS' look-ahead checksum is cut in for a team of `threads`: none below
 * CRC_AHEAD_MIN (one thread, in order), else one a thread up to 16. */
static unsigned crc_pieces(const pending_t *pp, int threads)
{
    return threads > 1 && pp->ahead && pp->ahead_n >= CRC_AHEAD_MIN ? (threads < 16 ? (unsigned)threads : 16u) : 0;
}

/* Item i of a team's share of the parse: count part i (a failure flagged in pp->bad, nothing
 * said), else piece i - nparts of STREAMS' checksum cut in `pieces` (to pp->sums). */
static void parse_item(kvc_container_t *c, pending_t *pp, unsigned i, unsigned pieces)
{
    if (i < pp->nparts) {
        pp->bad[i] = count_part(c, pp, i, 0) != KVC_OK;
        return;
    }
    const unsigned j = i - pp->nparts;
    const size_t a = (size_t)piece_at(pp->ahead_n, pieces, j), b = (size_t)piece_at(pp->ahead_n, pieces, j + 1);
    pp->sums[j] = crc(pp->ahead + a, b - a);
}

/* The coded counts, part by part; with threads, the parts at once and STREAMS' checksum in pieces
 * beside them (its bytes are most of the container: ahead, found by section_ahead), compared
 * later where the parse in order would have. The status and message are those of the parse in
 * order: the first failing part is parsed again on this thread to say why. */
static kvc_status_t parse_counts(kvc_container_t *c, pending_t *pp, int threads, uint32_t *ahead_crc, int *have_crc)
{
    const unsigned n = pp->nparts, pieces = crc_pieces(pp, threads);
    if (threads <= 1 || n + pieces <= 1) {
        for (unsigned i = 0; i < n; i++) {
            const kvc_status_t st = count_part(c, pp, i, 1);
            if (st != KVC_OK) return st;
        }
        return KVC_OK;
    }
    const int items = (int)(n + pieces), team = items < threads ? items : threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int i = 0; i < items; i++) parse_item(c, pp, (unsigned)i, pieces);
    if (pieces) {
        *ahead_crc = crc_of_pieces(pp->sums, pieces, pp->ahead_n);
        *have_crc = 1;
    }
    kvc_status_t st = KVC_OK;
    for (unsigned i = 0; i < n && st == KVC_OK; i++)
        if (pp->bad[i]) st = count_part(c, pp, i, 1);
    return st;
}

/* LENGTHS and STREAMS' header: STREAMS' payload to *sp / *sn, its checksum not checked (the
 * caller does, next); the stream lengths' total to *sum_out. */
static kvc_status_t parse_back(const uint8_t *buf, size_t len, kvc_container_t *c, size_t *pos_out, const uint8_t **sp, size_t *sn,
                               uint64_t *sum_out)
{
    kvc_status_t st;
    size_t pos = *pos_out, n;
    const uint8_t *p;
    const uint64_t nlen = kvc_container_coded_per_window(c) * c->num_windows;

    if ((st = next_section(buf, len, &pos, KVC_SECTION_LENGTHS, &p, &n)) != KVC_OK) return st;
    if (n < nlen) /* every length takes at least one byte */
        return kvc_error(KVC_ERR_CORRUPT, "container LENGTHS section of %zu bytes cannot hold %llu lengths", n, (unsigned long long)nlen);
    c->lengths = malloc(nlen * sizeof(uint32_t) + 1);
    if (!c->lengths) return kvc_error(KVC_ERR_NO_MEMORY, "no memory for %llu stream lengths", (unsigned long long)nlen);
    size_t off = 0;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < nlen; i++) {
        uint64_t v;
        const int r = get_varint(p, n, &off, 32, &v);
        if (r == VARINT_TRUNCATED)
            return kvc_error(KVC_ERR_CORRUPT, "container LENGTHS section is truncated or malformed at entry %llu", (unsigned long long)i);
        if (r != VARINT_OK)
            return kvc_error(KVC_ERR_CORRUPT, "container LENGTHS entry %llu is %s", (unsigned long long)i,
                             r == VARINT_OVERLONG ? "an overlong varint" : "a varint above 2^32 - 1");
        c->lengths[i] = (uint32_t)v;
        sum += v;
    }
    if (off != n) return kvc_error(KVC_ERR_CORRUPT, "container LENGTHS section has %zu trailing bytes", n - off);
    *sum_out = sum;
    if ((st = next_section_at(buf, len, &pos, KVC_SECTION_STREAMS, sp, sn, 0)) != KVC_OK) return st;
    *pos_out = pos;
    return KVC_OK;
}

/* The checks after LENGTHS and STREAMS' header, in the parse's order. */
static kvc_status_t parse_tail(const uint8_t *p, size_t n, uint64_t sum, size_t pos, size_t len, uint32_t streams_crc)
{
    if (streams_crc != get_u32(p - KVC_CONTAINER_SECTION_BYTES + 4))
        return kvc_error(KVC_ERR_CORRUPT, "container section %u checksum mismatch", KVC_SECTION_STREAMS);
    if (sum != n)
        return kvc_error(KVC_ERR_CORRUPT, "container stream lengths add up to %llu bytes, STREAMS has %zu", (unsigned long long)sum, n);
    if (pos != len) return kvc_error(KVC_ERR_CORRUPT, "container has %zu bytes after its last section", len - pos);
    return KVC_OK;
}

static void pending_done(pending_t *pp)
{
    if (pp->indexed) free(pp->at);
    free(pp->bad);
    pp->at = NULL;
    pp->bad = NULL;
    pp->indexed = 0;
}

kvc_status_t kvc_container_parse(const uint8_t *buf, size_t len, kvc_container_t *c, int threads)
{
    if (!buf || !c) return kvc_error(KVC_ERR_INVALID_ARG, "container buffer and output must not be NULL");
    pending_t pp;
    memset(&pp, 0, sizeof pp);
    kvc_status_t st = parse_head(buf, len, c);
    if (st != KVC_OK) return st;
    size_t pos = KVC_CONTAINER_HEADER_BYTES + KVC_CONTAINER_SECTION_BYTES + meta_bytes(c), n = 0;
    if (!section_ahead(buf, len, pos, 3, &pp.ahead, &pp.ahead_n)) pp.ahead = NULL;
    if ((st = parse_front(buf, len, c, &pos, &pp)) == KVC_OK && !(pp.bad = calloc(pp.nparts + 1u, 1)))
        st = kvc_error(KVC_ERR_NO_MEMORY, "no memory for the CDF parse");
    const uint8_t *p = NULL;
    uint64_t sum = 0;
    uint32_t ahead_crc = 0;
    int have_crc = 0;
    if (st == KVC_OK) st = parse_counts(c, &pp, threads, &ahead_crc, &have_crc);
    if (st == KVC_OK) st = parse_back(buf, len, c, &pos, &p, &n, &sum);
    if (st == KVC_OK) st = parse_tail(p, n, sum, pos, len, have_crc && p == pp.ahead && n == pp.ahead_n ? ahead_crc : crc(p, n));
    pending_done(&pp);
    if (st != KVC_OK) {
        kvc_container_release(c);
        return st;
    }
    c->streams = p;
    c->streams_bytes = n;
    return KVC_OK;
}

void kvc_container_release(kvc_container_t *c)
{
    free(c->counts);
    free(c->lengths);
    c->counts = NULL;
    c->lengths = NULL;
}
