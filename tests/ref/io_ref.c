/* SPDX-License-Identifier: BSD-3-Clause */
#include "io_ref.h"

#include <stdio.h>
#include <string.h>

static size_t emit(unsigned char *out, size_t cap, size_t at, const void *p, size_t n)
{
    if (out && n && at + n <= cap) memcpy(out + at, p, n);
    return at + n;
}

size_t ref_npy_image(const char *descr, int ndim, const size_t *shape, const void *data, size_t nbytes,
                     unsigned char *out, size_t cap)
{
    char dict[512], dims[256] = "";
    for (int i = 0; i < ndim; i++) {
        char one[32];
        snprintf(one, sizeof(one), i ? ", %zu" : "%zu", shape[i]);
        strcat(dims, one);
    }
    if (ndim == 1) strcat(dims, ",");
    snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
    if (ndim > 0) {
        /* numpy: " " * (GROWTH_AXIS_MAX_DIGITS - len(repr(shape[0]))) */
        char first[32];
        int digits = snprintf(first, sizeof(first), "%zu", shape[0]);
        for (int i = digits; i < 21; i++) strcat(dict, " ");
    }
    size_t hlen = strlen(dict) + 1; /* + '\n' */
    size_t pad = 64 - (10 + hlen) % 64;
    size_t total_header = hlen + pad;
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(total_header & 0xff),
                              (unsigned char)(total_header >> 8) };
    size_t at = emit(out, cap, 0, pre, 10);
    at = emit(out, cap, at, dict, strlen(dict));
    for (size_t i = 0; i < pad; i++) at = emit(out, cap, at, " ", 1);
    at = emit(out, cap, at, "\n", 1);
    return emit(out, cap, at, data, nbytes);
}

size_t ref_st_image(const ref_st_tensor_t *t, size_t n, const char *meta_key, const char *meta_value,
                    unsigned char *out, size_t cap)
{
    static char json[1 << 16];
    size_t off = 0;
    int len = snprintf(json, sizeof(json), "{");
    if (meta_key) len += snprintf(json + len, sizeof(json) - len, "\"__metadata__\":{\"%s\":\"%s\"}", meta_key, meta_value);
    for (size_t i = 0; i < n; i++) {
        len += snprintf(json + len, sizeof(json) - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (i || meta_key) ? "," : "",
                        t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) len += snprintf(json + len, sizeof(json) - len, d ? ",%zu" : "%zu", t[i].shape[d]);
        len += snprintf(json + len, sizeof(json) - len, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].nbytes);
        off += t[i].nbytes;
    }
    len += snprintf(json + len, sizeof(json) - len, "}");
    while (len % 8) json[len++] = ' ';
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((unsigned long long)len >> (8 * i));
    size_t at = emit(out, cap, 0, n8, 8);
    at = emit(out, cap, at, json, (size_t)len);
    for (size_t i = 0; i < n; i++) at = emit(out, cap, at, t[i].data, t[i].nbytes);
    return at;
}
