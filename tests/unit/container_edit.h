/* SPDX-License-Identifier: BSD-3-Clause */
/* Editing a .kvc container in tests (docs/FORMAT.md): little-endian fields, the offsets of the five
 * section headers, and resealing checksums after a deliberate edit so the edit reaches the field
 * validation instead of stopping at the CRC. Needs zlib. */
#ifndef KVC_TEST_CONTAINER_EDIT_H
#define KVC_TEST_CONTAINER_EDIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Offsets of the 5 section headers. */
static inline void sections(const uint8_t *buf, size_t off[5])
{
    size_t pos = 48;
    for (int i = 0; i < 5; i++) {
        off[i] = pos;
        pos += 16 + (size_t)rd32(buf + pos + 8);
    }
}

/* Recompute the section's and the header's checksums. */
static inline void reseal(uint8_t *buf, size_t section_off)
{
    const size_t n = rd32(buf + section_off + 8);
    wr32(buf + section_off + 4, (uint32_t)crc32(0, buf + section_off + 16, (uInt)n));
    wr32(buf + 44, (uint32_t)crc32(0, buf, 44));
}

/* The container with section k's payload replaced by payload[0, n) (the later sections moved, the
 * sizes and checksums rewritten), malloc'ed, so an edited field reaches the parser. */
static inline uint8_t *with_section(const uint8_t *good, size_t len, int k, const uint8_t *payload, size_t n, size_t *out_len)
{
    size_t off[5];
    sections(good, off);
    const size_t old_n = rd32(good + off[k] + 8), tail = off[k] + 16 + old_n;
    *out_len = len - old_n + n;
    uint8_t *b = malloc(*out_len);
    memcpy(b, good, off[k] + 16);
    memcpy(b + off[k] + 16, payload, n);
    memcpy(b + off[k] + 16 + n, good + tail, len - tail);
    wr32(b + off[k] + 8, (uint32_t)n);
    wr32(b + 24, (uint32_t)*out_len); /* total size (fits 32 bits here; bytes 28-31 stay 0) */
    reseal(b, off[k]);
    return b;
}

#endif
