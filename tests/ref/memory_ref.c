/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar oracles for the copies (see memory_ref.h). */
#include "memory_ref.h"

#include <stdlib.h>

size_t ref_split_pieces(size_t nbytes, size_t host_buffer_offset, size_t alignment, size_t *off, size_t *len,
                        size_t max)
{
    size_t count = 0, o = 0;
    while (o < nbytes) {
        const size_t region_end = ((o + host_buffer_offset) & ~(alignment - 1)) + alignment;
        const size_t end = host_buffer_offset + nbytes < region_end ? host_buffer_offset + nbytes : region_end;
        const size_t n = end - o - host_buffer_offset;
        if (count < max) {
            off[count] = o;
            len[count] = n;
        }
        count++;
        o += n;
    }
    return count;
}

void ref_batched_memcpy(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count)
{
    for (size_t e = 0; e < count; e++) {
        if (sizes[e] == 0) continue;
        unsigned char *bounce = malloc(sizes[e]);
        if (!bounce) abort();
        const unsigned char *s = srcs[e];
        unsigned char *d = dsts[e];
        for (size_t i = 0; i < sizes[e]; i++) bounce[i] = s[i];
        for (size_t i = 0; i < sizes[e]; i++) d[i] = bounce[i];
        free(bounce);
    }
}
