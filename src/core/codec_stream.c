/* SPDX-License-Identifier: BSD-3-Clause */
/* Streams of .kvc containers (docs/FORMAT.md "Streams"): a KV cache of any length coded chunk by
 * chunk through caller callbacks, so memory stays at one chunk and its container. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <kvcore/codec.h>

#include "common/checked.h"
#include "container.h"
#include "log.h"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

KVC_API kvc_status_t kvc_codec_encode_stream(kvc_context_t *ctx, const kvc_codec_params_t *p, size_t chunk_tokens,
                                             kvc_codec_chunk_read_fn read, void *read_user,
                                             kvc_codec_bytes_write_fn write, void *write_user)
{
    if (!ctx || !p || !read || !write || chunk_tokens == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec stream encode: ctx, params and callbacks must not be NULL, chunk_tokens > 0");
    /* Checked before the first read, which fills a buffer sized by the dtype. */
    if (p->dtype != KVC_DTYPE_F16 && p->dtype != KVC_DTYPE_BF16 && p->dtype != KVC_DTYPE_F32)
        return kvc_error(KVC_ERR_DTYPE, "codec stream encode: dtype %s: only f16, bf16 and f32 chunks are coded",
                         kvc_dtype_name(p->dtype));
    const size_t es = kvc_dtype_size(p->dtype);
    if (p->num_layers == 0 || p->num_tokens == 0 || p->num_heads == 0 || p->head_size == 0)
        return kvc_error(KVC_ERR_INVALID_ARG, "codec stream encode: dimensions must be non-zero");
    const size_t planes = p->layout == KVC_CODEC_MLA ? 1 : 2;
    const size_t T = p->num_tokens, n_max = chunk_tokens < T ? chunk_tokens : T;
    size_t bytes;
    if (!kvc_mul_ok(planes, p->num_layers, &bytes) || !kvc_mul_ok(bytes, n_max, &bytes) ||
        !kvc_mul_ok(bytes, p->num_heads, &bytes) || !kvc_mul_ok(bytes, p->head_size, &bytes) ||
        !kvc_mul_ok(bytes, es, &bytes))
        return kvc_error(KVC_ERR_SHAPE, "codec stream encode: chunk size overflows");
    void *chunk = malloc(bytes);
    if (!chunk) return kvc_error(KVC_ERR_NO_MEMORY, "codec stream encode: no memory for a %zu-byte chunk", bytes);
    kvc_codec_params_t cp = *p;
    cp.field_mask &= ~(uint64_t)KVC_CODEC_PARAM_PROGRESS; /* progress is reported per chunk */
    kvc_status_t st = KVC_OK;
    for (size_t t0 = 0; t0 < T && st == KVC_OK; t0 += n_max) {
        const size_t n = T - t0 < n_max ? T - t0 : n_max;
        st = read(read_user, t0, n, chunk);
        if (st != KVC_OK) break;
        cp.num_tokens = n;
        uint8_t *out = NULL;
        size_t len = 0;
        st = kvc_codec_encode(ctx, &cp, chunk, &out, &len);
        if (st == KVC_OK) st = write(write_user, out, len);
        kvc_codec_free(out);
        if (st == KVC_OK && (p->field_mask & KVC_CODEC_PARAM_PROGRESS) && p->progress)
            p->progress(p->progress_user, t0 + n, T);
    }
    free(chunk);
    return st;
}

/* Read exactly n bytes; *got tells how many came before the end of the stream. */
static kvc_status_t read_full(kvc_codec_bytes_read_fn read, void *user, uint8_t *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        size_t g = 0;
        kvc_status_t st = read(user, buf + *got, n - *got, &g);
        if (st != KVC_OK) return st;
        if (g == 0) break;
        *got += g;
    }
    return KVC_OK;
}

static int same_kind(const kvc_codec_info_t *a, const kvc_codec_info_t *b)
{
    return a->dtype == b->dtype && a->layout == b->layout && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->head_size == b->head_size && a->heads_known == b->heads_known;
}

KVC_API kvc_status_t kvc_codec_decode_stream(kvc_context_t *ctx, kvc_codec_bytes_read_fn read, void *read_user,
                                             kvc_codec_chunk_write_fn write, void *write_user,
                                             kvc_codec_info_t *first)
{
    if (!ctx || !read || !write) return kvc_error(KVC_ERR_INVALID_ARG, "codec stream decode: ctx and callbacks must not be NULL");
    uint8_t *buf = NULL, *out = NULL;
    size_t buf_cap = 0, out_cap = 0, token0 = 0, chunks = 0;
    kvc_codec_info_t head;
    memset(&head, 0, sizeof(head));
    kvc_status_t st = KVC_OK;
    for (;;) {
        uint8_t hdr[KVC_CONTAINER_HEADER_BYTES];
        size_t got = 0;
        st = read_full(read, read_user, hdr, sizeof(hdr), &got);
        if (st != KVC_OK) break;
        if (got == 0 && chunks > 0) break; /* the end of the stream, at a container boundary */
        if (got < sizeof(hdr)) {
            st = kvc_error(KVC_ERR_CORRUPT, "codec stream: %s after %zu chunks (%zu of %d header bytes)",
                           got ? "truncated container header" : "empty stream", chunks, got, KVC_CONTAINER_HEADER_BYTES);
            break;
        }
        /* The total size decides an allocation: trust it only from a header that checks out. */
        if (memcmp(hdr, KVC_CONTAINER_MAGIC, 8) != 0 ||
            (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), hdr, 44) != le32(hdr + 44)) {
            st = kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu has no valid container header (magic or CRC)", chunks);
            break;
        }
        const uint64_t total = le64(hdr + 24);
        if (total < KVC_CONTAINER_HEADER_BYTES || total > SIZE_MAX / 2) {
            st = kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu claims %llu bytes", chunks, (unsigned long long)total);
            break;
        }
        if (total > buf_cap) {
            uint8_t *nb = realloc(buf, (size_t)total);
            if (!nb) {
                st = kvc_error(KVC_ERR_NO_MEMORY, "codec stream: no memory for a %llu-byte container", (unsigned long long)total);
                break;
            }
            buf = nb;
            buf_cap = (size_t)total;
        }
        memcpy(buf, hdr, sizeof(hdr));
        st = read_full(read, read_user, buf + sizeof(hdr), (size_t)total - sizeof(hdr), &got);
        if (st != KVC_OK) break;
        if (got < (size_t)total - sizeof(hdr)) {
            st = kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu truncated (%zu of %llu bytes)", chunks,
                           got + sizeof(hdr), (unsigned long long)total);
            break;
        }
        kvc_codec_info_t info;
        st = kvc_codec_inspect(buf, (size_t)total, &info);
        if (st != KVC_OK) break;
        if (chunks > 0 && !same_kind(&head, &info)) {
            st = kvc_error(KVC_ERR_CORRUPT, "codec stream: chunk %zu differs from chunk 0 in dtype, layout, layers or heads", chunks);
            break;
        }
        if (info.original_bytes > out_cap) {
            uint8_t *nb = realloc(out, info.original_bytes);
            if (!nb) {
                st = kvc_error(KVC_ERR_NO_MEMORY, "codec stream: no memory for a %zu-byte chunk", info.original_bytes);
                break;
            }
            out = nb;
            out_cap = info.original_bytes;
        }
        st = kvc_codec_decode(ctx, buf, (size_t)total, out, out_cap, NULL);
        if (st == KVC_OK) st = write(write_user, token0, out, &info);
        if (st != KVC_OK) break;
        if (chunks == 0) {
            head = info;
        } else {
            head.num_tokens += info.num_tokens;
            head.original_bytes += info.original_bytes;
            head.container_bytes += info.container_bytes;
        }
        token0 += info.num_tokens;
        chunks++;
    }
    free(buf);
    free(out);
    if (st == KVC_OK && first) *first = head;
    return st;
}
