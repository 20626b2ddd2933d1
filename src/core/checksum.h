/* SPDX-License-Identifier: BSD-3-Clause */
/* The container's checksum (docs/FORMAT.md): CRC-32 as zlib computes it (polynomial 0xEDB88320,
 * reflected, initial and final XOR 0xFFFFFFFF). libdeflate's when configure found it (folded with
 * carry-less multiplies: zlib 1.2's table-driven CRC took 7 % of a container decode), zlib's
 * otherwise; the same values either way. Pieces are joined with zlib's crc32_combine (libdeflate
 * has none). Include config.h first. */
#ifndef KVC_CORE_CHECKSUM_H
#define KVC_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>
#ifdef KVC_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

static inline uint32_t kvc_crc32(const void *p, size_t n)
{
#ifdef KVC_HAVE_LIBDEFLATE
    return libdeflate_crc32(0, p, n);
#else
    return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)p, n);
#endif
}

/* The CRC of a then b, from crc(a), crc(b) and b's length. */
static inline uint32_t kvc_crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);
}

#endif
