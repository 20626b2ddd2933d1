/* SPDX-License-Identifier: BSD-3-Clause */
/* .safetensors reader and writer: 8-byte little-endian header length N, N bytes of JSON, data.
 * The JSON is parsed by a small strict RFC 8259 parser that knows the safetensors schema; the
 * validation follows the reference implementation (huggingface/safetensors, tensor.rs): the
 * tensors' byte ranges must tile the data section exactly, each range must match its shape and
 * dtype, and nothing may overflow. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/context.h>

#include "io_internal.h"

/* Nesting allowed inside values the schema does not use (the schema itself needs 3 levels). */
#define JSON_MAX_DEPTH 64

typedef struct st_entry {
    const char *name; /* in the arena, NUL-terminated */
    size_t name_len;
    kvc_dtype_t dtype;
    int ndim;
    size_t shape[KVC_TENSOR_MAX_DIMS];
    size_t begin, end; /* relative to the data section */
} st_entry_t;

typedef struct st_meta {
    const char *key, *value;
    size_t key_len;
} st_meta_t;

struct kvc_safetensors {
    kvc_src_t src;
    size_t data_start; /* 8 + N */
    st_entry_t *entries; /* file order (by offset) */
    size_t count;
    size_t *by_name; /* entry indices sorted by name */
    st_meta_t *meta;
    size_t nmeta;
    char *arena;  /* decoded strings */
    char *header; /* the JSON when read from a file */
};

/* ------------------------------------------------------------------ UTF-8 */

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates, <= U+10FFFF),
 * or 0. */
static size_t utf8_seq(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    if (avail < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* ------------------------------------------------------------------ JSON parser */

typedef struct jp {
    const unsigned char *begin, *p, *end;
    const char *src;
    char *arena;
    size_t arena_pos;
    /* First error of meaning (unknown dtype, too many dimensions, NUL in a name): reported only
     * once the whole header has parsed, so syntax errors always win. */
    kvc_status_t semantic;
    char semantic_msg[200];
} jp_t;

static size_t jpos(const jp_t *j) { return (size_t)(j->p - j->begin); }
static int jpeek(const jp_t *j) { return j->p < j->end ? *j->p : -1; }

static void jws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int jaccept(jp_t *j, char c)
{
    if (jpeek(j) != (unsigned char)c) return 0;
    j->p++;
    return 1;
}

static kvc_status_t jbad(const jp_t *j, const char *what)
{
    return kvc_error(KVC_ERR_CORRUPT, "%s: safetensors header, byte %zu: %s", j->src, jpos(j), what);
}

static void jsemantic(jp_t *j, kvc_status_t st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jsemantic(jp_t *j, kvc_status_t st, const char *fmt, ...)
{
    if (j->semantic != KVC_OK) return;
    j->semantic = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->semantic_msg, sizeof(j->semantic_msg), fmt, ap);
    va_end(ap);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(jp_t *j, unsigned *out)
{
    if (j->end - j->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(j->p[i]);
        if (h < 0) return 0;
        v = v << 4 | (unsigned)h;
    }
    j->p += 4;
    *out = v;
    return 1;
}

static void put_utf8(char *d, size_t *n, unsigned cp)
{
    if (cp < 0x80) d[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        d[(*n)++] = (char)(0xc0 | cp >> 6);
        d[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        d[(*n)++] = (char)(0xe0 | cp >> 12);
        d[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        d[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        d[(*n)++] = (char)(0xf0 | cp >> 18);
        d[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3f));
        d[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        d[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* A JSON string, decoded into the arena (NUL-terminated). The decoded form is never longer than
 * the quoted source, so an arena of the header's size always suffices. *has_nul: it holds U+0000. */
static kvc_status_t jstring(jp_t *j, const char **out, size_t *len, int *has_nul)
{
    if (!jaccept(j, '"')) return jbad(j, "expected a string");
    char *d = j->arena + j->arena_pos;
    size_t n = 0;
    *has_nul = 0;
    for (;;) {
        if (j->p >= j->end) return jbad(j, "unterminated string");
        unsigned c = *j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) return jbad(j, "control character in a string");
        if (c == '\\') {
            j->p++;
            int e = jpeek(j);
            if (e < 0) return jbad(j, "unterminated string");
            j->p++;
            switch (e) {
            case '"': d[n++] = '"'; break;
            case '\\': d[n++] = '\\'; break;
            case '/': d[n++] = '/'; break;
            case 'b': d[n++] = '\b'; break;
            case 'f': d[n++] = '\f'; break;
            case 'n': d[n++] = '\n'; break;
            case 'r': d[n++] = '\r'; break;
            case 't': d[n++] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (!hex4(j, &cp)) return jbad(j, "bad \\u escape");
                if (cp >= 0xdc00 && cp <= 0xdfff) return jbad(j, "lone low surrogate in a \\u escape");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                        return jbad(j, "lone high surrogate in a \\u escape");
                    j->p += 2;
                    if (!hex4(j, &lo)) return jbad(j, "bad \\u escape");
                    if (lo < 0xdc00 || lo > 0xdfff) return jbad(j, "high surrogate without a low one");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (cp == 0) *has_nul = 1;
                put_utf8(d, &n, cp);
                break;
            }
            default: return jbad(j, "unknown escape in a string");
            }
            continue;
        }
        size_t k = utf8_seq(j->p, (size_t)(j->end - j->p));
        if (!k) return jbad(j, "invalid UTF-8 in a string");
        memcpy(d + n, j->p, k);
        n += k;
        j->p += k;
    }
    d[n] = '\0';
    j->arena_pos += n + 1;
    *out = d;
    *len = n;
    return KVC_OK;
}

/* A non-negative integer without sign, fraction or exponent, fitting in size_t (the reference
 * reads these as usize). */
static kvc_status_t jsize(jp_t *j, size_t *out)
{
    int c = jpeek(j);
    if (c == '-') return jbad(j, "negative size");
    if (c < '0' || c > '9') return jbad(j, "expected a non-negative integer");
    size_t v = 0;
    if (c == '0') j->p++;
    else
        while ((c = jpeek(j)) >= '0' && c <= '9') {
            if (!kvc_mul_ok(v, 10, &v) || !kvc_add_ok(v, (size_t)(c - '0'), &v))
                return jbad(j, "integer does not fit in 64 bits");
            j->p++;
        }
    c = jpeek(j);
    if (c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9')) return jbad(j, "not a plain integer");
    *out = v;
    return KVC_OK;
}

static int jword(jp_t *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return 0;
    j->p += n;
    return 1;
}

/* Any JSON number (RFC 8259 grammar). */
static kvc_status_t jnumber(jp_t *j)
{
    jaccept(j, '-');
    int c = jpeek(j);
    if (c == '0') j->p++;
    else if (c >= '1' && c <= '9')
        while ((c = jpeek(j)) >= '0' && c <= '9') j->p++;
    else return jbad(j, "malformed number");
    if (jaccept(j, '.')) {
        if ((c = jpeek(j)) < '0' || c > '9') return jbad(j, "malformed number");
        while ((c = jpeek(j)) >= '0' && c <= '9') j->p++;
    }
    if (jaccept(j, 'e') || jaccept(j, 'E')) {
        if (!jaccept(j, '+')) jaccept(j, '-');
        if ((c = jpeek(j)) < '0' || c > '9') return jbad(j, "malformed number");
        while ((c = jpeek(j)) >= '0' && c <= '9') j->p++;
    }
    return KVC_OK;
}

/* Any JSON value, checked and discarded (fields the schema does not use). */
static kvc_status_t jskip(jp_t *j, int depth)
{
    kvc_status_t st;
    const char *s;
    size_t n;
    int nul;
    if (depth > JSON_MAX_DEPTH) return jbad(j, "nesting too deep");
    jws(j);
    int c = jpeek(j);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jws(j);
        if (jaccept(j, close)) return KVC_OK;
        for (;;) {
            if (c == '{') {
                jws(j);
                if ((st = jstring(j, &s, &n, &nul)) != KVC_OK) return st;
                jws(j);
                if (!jaccept(j, ':')) return jbad(j, "expected ':'");
            }
            if ((st = jskip(j, depth + 1)) != KVC_OK) return st;
            jws(j);
            if (jaccept(j, ',')) continue;
            if (jaccept(j, close)) return KVC_OK;
            return jbad(j, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') return jstring(j, &s, &n, &nul);
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(j);
    if (jword(j, "true") || jword(j, "false") || jword(j, "null")) return KVC_OK;
    return c < 0 ? jbad(j, "unexpected end of the header") : jbad(j, "unexpected character");
}

/* "[a, b, ...]" of sizes; keeps up to `max` values, counts all. */
static kvc_status_t jsize_array(jp_t *j, size_t *vals, size_t max, size_t *count)
{
    kvc_status_t st;
    *count = 0;
    if (!jaccept(j, '[')) return jbad(j, "expected an array");
    jws(j);
    if (jaccept(j, ']')) return KVC_OK;
    for (;;) {
        jws(j);
        size_t v = 0;
        if ((st = jsize(j, &v)) != KVC_OK) return st;
        if (*count < max) vals[*count] = v;
        (*count)++;
        jws(j);
        if (jaccept(j, ',')) continue;
        if (jaccept(j, ']')) return KVC_OK;
        return jbad(j, "expected ',' or ']'");
    }
}

static kvc_dtype_t dtype_from_st(const char *s)
{
    for (int d = KVC_DTYPE_INVALID + 1; d < KVC_DTYPE_END; d++)
        if (!strcmp(kvc_dtype_info((kvc_dtype_t)d)->st_name, s)) return (kvc_dtype_t)d;
    return KVC_DTYPE_INVALID;
}

enum { F_DTYPE = 1, F_SHAPE = 2, F_OFFSETS = 4 };

/* {"dtype": "F16", "shape": [...], "data_offsets": [begin, end], other fields ignored}. */
static kvc_status_t jtensor(jp_t *j, st_entry_t *e)
{
    kvc_status_t st;
    unsigned seen = 0;
    if (!jaccept(j, '{')) return jbad(j, "a tensor entry is not an object");
    jws(j);
    if (!jaccept(j, '}'))
        for (;;) {
            const char *key;
            size_t klen;
            int nul;
            jws(j);
            if ((st = jstring(j, &key, &klen, &nul)) != KVC_OK) return st;
            jws(j);
            if (!jaccept(j, ':')) return jbad(j, "expected ':'");
            jws(j);
            unsigned bit = 0;
            if (!strcmp(key, "dtype") && !nul) {
                bit = F_DTYPE;
                const char *ds;
                size_t dlen;
                if (jpeek(j) != '"') return jbad(j, "dtype is not a string");
                if ((st = jstring(j, &ds, &dlen, &nul)) != KVC_OK) return st;
                e->dtype = nul ? KVC_DTYPE_INVALID : dtype_from_st(ds);
                if (e->dtype == KVC_DTYPE_INVALID)
                    jsemantic(j, KVC_ERR_DTYPE, "tensor \"%s\": dtype \"%.32s\" is not one kvcore knows", e->name, ds);
            } else if (!strcmp(key, "shape") && !nul) {
                bit = F_SHAPE;
                size_t n;
                if ((st = jsize_array(j, e->shape, KVC_TENSOR_MAX_DIMS, &n)) != KVC_OK) return st;
                if (n > KVC_TENSOR_MAX_DIMS)
                    jsemantic(j, KVC_ERR_UNSUPPORTED, "tensor \"%s\": more than 8 dimensions", e->name);
                e->ndim = n > KVC_TENSOR_MAX_DIMS ? KVC_TENSOR_MAX_DIMS : (int)n;
            } else if (!strcmp(key, "data_offsets") && !nul) {
                bit = F_OFFSETS;
                size_t off[2], n;
                if ((st = jsize_array(j, off, 2, &n)) != KVC_OK) return st;
                if (n != 2) return jbad(j, "data_offsets is not [begin, end]");
                e->begin = off[0];
                e->end = off[1];
            } else if ((st = jskip(j, 3)) != KVC_OK) {
                return st;
            }
            if (seen & bit) return jbad(j, "duplicate field in a tensor entry");
            seen |= bit;
            jws(j);
            if (jaccept(j, ',')) continue;
            if (jaccept(j, '}')) break;
            return jbad(j, "expected ',' or '}'");
        }
    if (seen != (F_DTYPE | F_SHAPE | F_OFFSETS))
        return jbad(j, !(seen & F_DTYPE) ? "tensor entry lacks dtype"
                       : !(seen & F_SHAPE) ? "tensor entry lacks shape" : "tensor entry lacks data_offsets");
    return KVC_OK;
}

/* "__metadata__": {"key": "value", ...} or null. */
static kvc_status_t jmetadata(jp_t *j, kvc_safetensors_t *t)
{
    kvc_status_t st;
    if (jword(j, "null")) return KVC_OK;
    if (!jaccept(j, '{')) return jbad(j, "__metadata__ is not an object");
    jws(j);
    if (jaccept(j, '}')) return KVC_OK;
    size_t cap = 0;
    for (;;) {
        st_meta_t m;
        size_t vlen;
        int knul, vnul;
        jws(j);
        if ((st = jstring(j, &m.key, &m.key_len, &knul)) != KVC_OK) return st;
        jws(j);
        if (!jaccept(j, ':')) return jbad(j, "expected ':'");
        jws(j);
        if (jpeek(j) != '"') return jbad(j, "a __metadata__ value is not a string");
        if ((st = jstring(j, &m.value, &vlen, &vnul)) != KVC_OK) return st;
        if (knul || vnul) jsemantic(j, KVC_ERR_UNSUPPORTED, "__metadata__ entry \"%s\" holds a NUL character", m.key);
        if (t->nmeta == cap) {
            cap = cap ? cap * 2 : 8;
            st_meta_t *p = realloc(t->meta, cap * sizeof(*p));
            if (!p) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the metadata table");
            t->meta = p;
        }
        t->meta[t->nmeta++] = m;
        jws(j);
        if (jaccept(j, ',')) continue;
        if (jaccept(j, '}')) return KVC_OK;
        return jbad(j, "expected ',' or '}'");
    }
}

static kvc_status_t jheader(jp_t *j, kvc_safetensors_t *t)
{
    kvc_status_t st;
    size_t cap = 0;
    int seen_meta = 0;
    jws(j);
    if (!jaccept(j, '{')) return jbad(j, "the header is not a JSON object");
    jws(j);
    if (!jaccept(j, '}'))
        for (;;) {
            const char *key;
            size_t klen;
            int nul;
            jws(j);
            if ((st = jstring(j, &key, &klen, &nul)) != KVC_OK) return st;
            jws(j);
            if (!jaccept(j, ':')) return jbad(j, "expected ':' after a key");
            jws(j);
            if (!nul && !strcmp(key, "__metadata__")) {
                if (seen_meta) return jbad(j, "duplicate __metadata__");
                seen_meta = 1;
                if ((st = jmetadata(j, t)) != KVC_OK) return st;
            } else {
                if (t->count == cap) {
                    cap = cap ? cap * 2 : 16;
                    st_entry_t *p = realloc(t->entries, cap * sizeof(*p));
                    if (!p) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the tensor table");
                    t->entries = p;
                }
                st_entry_t *e = &t->entries[t->count++];
                memset(e, 0, sizeof(*e));
                e->name = key;
                e->name_len = klen;
                if (nul) jsemantic(j, KVC_ERR_UNSUPPORTED, "a tensor name holds a NUL character");
                if ((st = jtensor(j, e)) != KVC_OK) return st;
            }
            jws(j);
            if (jaccept(j, ',')) continue;
            if (jaccept(j, '}')) break;
            return jbad(j, "expected ',' or '}'");
        }
    jws(j);
    if (j->p != j->end) return jbad(j, "bytes after the JSON object");
    return KVC_OK;
}

/* ------------------------------------------------------------------ validation */

typedef struct name_idx {
    const char *name;
    size_t index;
} name_idx_t;

static int cmp_name_idx(const void *a, const void *b)
{
    return strcmp(((const name_idx_t *)a)->name, ((const name_idx_t *)b)->name);
}

static int cmp_offsets(const void *a, const void *b)
{
    const st_entry_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta_t *)a)->key, ((const st_meta_t *)b)->key);
}

static kvc_status_t validate(kvc_safetensors_t *t, size_t data_size)
{
    const char *src = t->src.name;
    for (size_t i = 0; i < t->count; i++) {
        st_entry_t *e = &t->entries[i];
        size_t nbytes = kvc_dtype_size(e->dtype);
        for (int d = 0; d < e->ndim; d++)
            if (!kvc_mul_ok(nbytes, e->shape[d], &nbytes))
                return kvc_error(KVC_ERR_CORRUPT, "%s: tensor \"%s\": shape[%d] = %zu: the size overflows", src,
                                 e->name, d, e->shape[d]);
        if (e->begin > e->end)
            return kvc_error(KVC_ERR_CORRUPT, "%s: tensor \"%s\": data_offsets [%zu, %zu] end before they begin", src,
                             e->name, e->begin, e->end);
        if (e->end - e->begin != nbytes)
            return kvc_error(KVC_ERR_CORRUPT, "%s: tensor \"%s\": data_offsets span %zu bytes, shape and dtype need %zu",
                             src, e->name, e->end - e->begin, nbytes);
    }
    /* The ranges must tile [0, data_size): no overlap, no gap, nothing past the end. */
    if (t->count) qsort(t->entries, t->count, sizeof(*t->entries), cmp_offsets);
    size_t at = 0;
    for (size_t i = 0; i < t->count; i++) {
        const st_entry_t *e = &t->entries[i];
        if (e->end > data_size)
            return kvc_error(KVC_ERR_CORRUPT, "%s: tensor \"%s\": data_offsets [%zu, %zu] run past the end of the data (%zu bytes)",
                             src, e->name, e->begin, e->end, data_size);
        if (e->begin != at)
            return kvc_error(KVC_ERR_CORRUPT, "%s: tensor \"%s\": data_offsets [%zu, %zu] %s the previous tensor (ends at %zu)",
                             src, e->name, e->begin, e->end, e->begin < at ? "overlap" : "leave a gap after", at);
        at = e->end;
    }
    if (at != data_size)
        return kvc_error(KVC_ERR_CORRUPT, "%s: %zu bytes after the last tensor", src, data_size - at);

    if (t->count) {
        name_idx_t *v = malloc(t->count * sizeof(*v));
        if (!v || !(t->by_name = malloc(t->count * sizeof(size_t)))) {
            free(v);
            return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the name index");
        }
        for (size_t i = 0; i < t->count; i++) v[i] = (name_idx_t){ t->entries[i].name, i };
        qsort(v, t->count, sizeof(*v), cmp_name_idx);
        for (size_t i = 0; i < t->count; i++) t->by_name[i] = v[i].index;
        free(v);
    }
    for (size_t i = 1; i < t->count; i++)
        if (!strcmp(t->entries[t->by_name[i]].name, t->entries[t->by_name[i - 1]].name))
            return kvc_error(KVC_ERR_CORRUPT, "%s: duplicate tensor name \"%s\"", src, t->entries[t->by_name[i]].name);

    /* Duplicate keys are checked on a sorted copy: the header order is kept for the API. */
    if (t->nmeta > 1) {
        st_meta_t *m = malloc(t->nmeta * sizeof(*m));
        if (!m) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the metadata index");
        memcpy(m, t->meta, t->nmeta * sizeof(*m));
        qsort(m, t->nmeta, sizeof(*m), cmp_meta);
        for (size_t i = 1; i < t->nmeta; i++)
            if (!strcmp(m[i].key, m[i - 1].key)) {
                kvc_status_t st = kvc_error(KVC_ERR_CORRUPT, "%s: duplicate __metadata__ key \"%s\"", src, m[i].key);
                free(m);
                return st;
            }
        free(m);
    }
    return KVC_OK;
}

static void st_free(kvc_safetensors_t *t)
{
    kvc_src_close(&t->src);
    free(t->entries);
    free(t->by_name);
    free(t->meta);
    free(t->arena);
    free(t->header);
    free(t);
}

kvc_status_t kvc_safetensors_open_src(kvc_src_t *s, kvc_safetensors_t **out)
{
    if (s->size < 8)
        return kvc_error(KVC_ERR_CORRUPT, "%s: %zu bytes, too short for the safetensors header length", s->name,
                         s->size);
    unsigned char lenbuf[8];
    kvc_status_t st = kvc_src_read(s, 0, lenbuf, 8);
    if (st != KVC_OK) return st;
    uint64_t n64 = 0;
    for (int i = 7; i >= 0; i--) n64 = n64 << 8 | lenbuf[i];
    if (n64 > KVC_SAFETENSORS_MAX_HEADER)
        return kvc_error(KVC_ERR_CORRUPT, "%s: header length %llu exceeds the %u-byte limit", s->name,
                         (unsigned long long)n64, KVC_SAFETENSORS_MAX_HEADER);
    size_t n = (size_t)n64;
    if (n > s->size - 8)
        return kvc_error(KVC_ERR_CORRUPT, "%s: header length %zu runs past the end (%zu bytes)", s->name, n, s->size);

    kvc_safetensors_t *t = calloc(1, sizeof(*t));
    if (!t) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the archive");
    t->src = *s;
    t->data_start = 8 + n;
    if (!(t->arena = malloc(n + 1))) {
        free(t);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate %zu bytes for the header", n);
    }
    const unsigned char *text;
    if (s->mem) {
        text = s->mem + 8;
    } else {
        if (!(t->header = malloc(n ? n : 1))) st = kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the header");
        else st = kvc_src_read(s, 8, t->header, n);
        text = (const unsigned char *)t->header;
    }
    if (st == KVC_OK) {
        jp_t j = { .begin = text, .p = text, .end = text + n, .src = s->name, .arena = t->arena };
        st = jheader(&j, t);
        if (st == KVC_OK && j.semantic != KVC_OK) st = kvc_error(j.semantic, "%s: %s", s->name, j.semantic_msg);
        if (st == KVC_OK) st = validate(t, s->size - t->data_start);
    }
    /* The JSON text is no longer needed: every string lives in the arena. */
    free(t->header);
    t->header = NULL;
    if (st != KVC_OK) {
        t->src.fd = -1; /* the caller still owns the source on failure */
        st_free(t);
        return st;
    }
    *out = t;
    return KVC_OK;
}

/* ------------------------------------------------------------------ reader API */

KVC_API kvc_status_t kvc_safetensors_open(const char *path, kvc_safetensors_t **out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_open: out is NULL");
    kvc_src_t s;
    kvc_status_t st = kvc_src_open_file(&s, path);
    if (st != KVC_OK) return st;
    if ((st = kvc_safetensors_open_src(&s, out)) != KVC_OK) kvc_src_close(&s);
    return st;
}

KVC_API kvc_status_t kvc_safetensors_open_mem(const void *buf, size_t len, kvc_safetensors_t **out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_open_mem: out is NULL");
    if (!buf && len) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_open_mem: buf is NULL with len %zu", len);
    kvc_src_t s;
    kvc_src_open_mem(&s, buf, len);
    return kvc_safetensors_open_src(&s, out);
}

KVC_API void kvc_safetensors_close(kvc_safetensors_t *st)
{
    if (st) st_free(st);
}

KVC_API size_t kvc_safetensors_count(const kvc_safetensors_t *st) { return st ? st->count : 0; }

static kvc_status_t entry_at(const kvc_safetensors_t *st, size_t index, const st_entry_t **e)
{
    if (!st) return kvc_error(KVC_ERR_INVALID_ARG, "archive is NULL");
    if (index >= st->count)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "tensor index %zu, the archive holds %zu", index, st->count);
    *e = &st->entries[index];
    return KVC_OK;
}

static size_t entry_nbytes(const st_entry_t *e) { return e->end - e->begin; }

KVC_API kvc_status_t kvc_safetensors_info(const kvc_safetensors_t *st, size_t index, kvc_safetensors_info_t *out)
{
    const st_entry_t *e = NULL;
    kvc_status_t s = entry_at(st, index, &e);
    if (s != KVC_OK) return s;
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_info: out is NULL");
    memset(out, 0, sizeof(*out));
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof(out->shape));
    out->offset = st->data_start + e->begin;
    out->nbytes = entry_nbytes(e);
    return KVC_OK;
}

KVC_API kvc_status_t kvc_safetensors_find(const kvc_safetensors_t *st, const char *name, size_t *index)
{
    if (!st || !name || !index) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_find: NULL argument");
    size_t lo = 0, hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->entries[st->by_name[mid]].name, name);
        if (c == 0) {
            *index = st->by_name[mid];
            return KVC_OK;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return kvc_error(KVC_ERR_NOT_FOUND, "%s: no tensor \"%s\"", st->src.name, name);
}

static void entry_tensor(const st_entry_t *e, kvc_tensor_t *t)
{
    memset(t, 0, sizeof(*t));
    t->dtype = e->dtype;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof(t->shape));
    t->nbytes = entry_nbytes(e);
}

KVC_API kvc_status_t kvc_safetensors_read(const kvc_safetensors_t *st, size_t index, void *dst, size_t cap)
{
    const st_entry_t *e = NULL;
    kvc_status_t s = entry_at(st, index, &e);
    if (s != KVC_OK) return s;
    size_t n = entry_nbytes(e);
    if (cap < n) return kvc_error(KVC_ERR_NO_SPACE, "tensor \"%s\" needs %zu bytes, the buffer holds %zu", e->name, n, cap);
    if (n && !dst) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_read: dst is NULL");
    return kvc_src_read(&st->src, st->data_start + e->begin, dst, n);
}

KVC_API kvc_status_t kvc_safetensors_load(const kvc_safetensors_t *st, size_t index, kvc_tensor_t *out)
{
    const st_entry_t *e = NULL;
    kvc_status_t s = entry_at(st, index, &e);
    if (s != KVC_OK) return s;
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_load: out is NULL");
    void *data;
    if ((s = kvc_data_alloc(entry_nbytes(e), &data)) != KVC_OK) return s;
    if ((s = kvc_src_read(&st->src, st->data_start + e->begin, data, entry_nbytes(e))) != KVC_OK) {
        free(data);
        return s;
    }
    entry_tensor(e, out);
    out->data = data;
    out->owns_data = data != NULL;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_safetensors_view(const kvc_safetensors_t *st, size_t index, kvc_tensor_t *out)
{
    const st_entry_t *e = NULL;
    kvc_status_t s = entry_at(st, index, &e);
    if (s != KVC_OK) return s;
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_view: out is NULL");
    if (!st->src.mem)
        return kvc_error(KVC_ERR_UNSUPPORTED, "%s: views need an archive opened from memory", st->src.name);
    entry_tensor(e, out);
    out->data = out->nbytes ? (void *)(st->src.mem + st->data_start + e->begin) : NULL;
    return KVC_OK;
}

KVC_API size_t kvc_safetensors_metadata_count(const kvc_safetensors_t *st) { return st ? st->nmeta : 0; }

KVC_API kvc_status_t kvc_safetensors_metadata_at(const kvc_safetensors_t *st, size_t index, const char **key,
                                                 const char **value)
{
    if (!st || !key || !value) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_metadata_at: NULL argument");
    if (index >= st->nmeta)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "metadata index %zu, the archive holds %zu", index, st->nmeta);
    *key = st->meta[index].key;
    *value = st->meta[index].value;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_safetensors_metadata_get(const kvc_safetensors_t *st, const char *key, const char **value)
{
    if (!st || !key || !value) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_metadata_get: NULL argument");
    for (size_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[i].key, key)) {
            *value = st->meta[i].value;
            return KVC_OK;
        }
    return kvc_error(KVC_ERR_NOT_FOUND, "%s: no __metadata__ key \"%s\"", st->src.name, key);
}

/* ------------------------------------------------------------------ writer */

/* JSON string as serde_json writes it (what the reference writer uses). */
static void json_string(kvc_strbuf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    kvc_sb_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': kvc_sb_puts(b, "\\\""); break;
        case '\\': kvc_sb_puts(b, "\\\\"); break;
        case '\b': kvc_sb_puts(b, "\\b"); break;
        case '\f': kvc_sb_puts(b, "\\f"); break;
        case '\n': kvc_sb_puts(b, "\\n"); break;
        case '\r': kvc_sb_puts(b, "\\r"); break;
        case '\t': kvc_sb_puts(b, "\\t"); break;
        default:
            if (*p < 0x20) {
                char esc[6] = { '\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15] };
                kvc_sb_put(b, esc, sizeof(esc));
            } else {
                kvc_sb_putc(b, (char)*p);
            }
        }
    }
    kvc_sb_putc(b, '"');
}

typedef struct write_slot {
    int rank;
    const char *name;
    size_t index;
} write_slot_t;

/* The reference's order: descending dtype alignment rank, then name. */
static int cmp_write(const void *a, const void *b)
{
    const write_slot_t *x = a, *y = b;
    if (x->rank != y->rank) return y->rank - x->rank;
    return strcmp(x->name, y->name);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* KVC_ERR_INVALID_ARG naming the first duplicate among the n strings. */
static kvc_status_t unique_strings(const char **v, size_t n, const char *what)
{
    if (n < 2) return KVC_OK;
    const char **s = malloc(n * sizeof(*s));
    if (!s) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a name list");
    memcpy(s, v, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_cstr);
    kvc_status_t st = KVC_OK;
    for (size_t i = 1; i < n && st == KVC_OK; i++)
        if (!strcmp(s[i], s[i - 1])) st = kvc_error(KVC_ERR_INVALID_ARG, "duplicate %s \"%s\"", what, s[i]);
    free(s);
    return st;
}

static kvc_status_t check_items(const kvc_named_tensor_t *tensors, size_t n, const kvc_metadata_entry_t *meta,
                                size_t nmeta)
{
    kvc_status_t st = KVC_OK;
    char what[48];
    if (n && !tensors) return kvc_error(KVC_ERR_INVALID_ARG, "tensors is NULL with n = %zu", n);
    if (nmeta && !meta) return kvc_error(KVC_ERR_INVALID_ARG, "meta is NULL with nmeta = %zu", nmeta);
    for (size_t i = 0; i < n; i++) {
        if (!tensors[i].name) return kvc_error(KVC_ERR_INVALID_ARG, "tensors[%zu].name is NULL", i);
        if (!utf8_valid(tensors[i].name)) return kvc_error(KVC_ERR_INVALID_ARG, "tensors[%zu].name is not UTF-8", i);
        if (!strcmp(tensors[i].name, "__metadata__"))
            return kvc_error(KVC_ERR_INVALID_ARG, "tensors[%zu].name is the reserved \"__metadata__\"", i);
        snprintf(what, sizeof(what), "tensors[%zu].tensor", i);
        if ((st = kvc_tensor_check(tensors[i].tensor, what)) != KVC_OK) return st;
    }
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) return kvc_error(KVC_ERR_INVALID_ARG, "meta[%zu] has a NULL key or value", i);
        if (!utf8_valid(meta[i].key) || !utf8_valid(meta[i].value))
            return kvc_error(KVC_ERR_INVALID_ARG, "meta[%zu] is not UTF-8", i);
    }
    size_t most = n > nmeta ? n : nmeta;
    const char **names = malloc((most ? most : 1) * sizeof(*names));
    if (!names) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate a name list");
    for (size_t i = 0; i < n; i++) names[i] = tensors[i].name;
    st = unique_strings(names, n, "tensor name");
    for (size_t i = 0; i < nmeta && st == KVC_OK; i++) names[i] = meta[i].key;
    if (st == KVC_OK) st = unique_strings(names, nmeta, "metadata key");
    free(names);
    return st;
}

/* Header JSON (padded) and the write order of the tensors. */
static kvc_status_t build_header(const kvc_named_tensor_t *tensors, size_t n, const kvc_metadata_entry_t *meta,
                                 size_t nmeta, kvc_strbuf_t *b, size_t **order_out, size_t *data_size)
{
    size_t *order = malloc((n ? n : 1) * sizeof(*order));
    write_slot_t *slots = malloc((n ? n : 1) * sizeof(*slots));
    if (!order || !slots) {
        free(order);
        free(slots);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the write order");
    }
    for (size_t i = 0; i < n; i++)
        slots[i] = (write_slot_t){ kvc_dtype_info(tensors[i].tensor->dtype)->st_rank, tensors[i].name, i };
    qsort(slots, n, sizeof(*slots), cmp_write);
    for (size_t i = 0; i < n; i++) order[i] = slots[i].index;
    free(slots);

    kvc_sb_putc(b, '{');
    if (nmeta) {
        kvc_sb_puts(b, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (i) kvc_sb_putc(b, ',');
            json_string(b, meta[i].key);
            kvc_sb_putc(b, ':');
            json_string(b, meta[i].value);
        }
        kvc_sb_putc(b, '}');
    }
    size_t offset = 0;
    for (size_t k = 0; k < n; k++) {
        const kvc_named_tensor_t *it = &tensors[order[k]];
        if (k || nmeta) kvc_sb_putc(b, ',');
        json_string(b, it->name);
        kvc_sb_puts(b, ":{\"dtype\":\"");
        kvc_sb_puts(b, kvc_dtype_info(it->tensor->dtype)->st_name);
        kvc_sb_puts(b, "\",\"shape\":[");
        for (int d = 0; d < it->tensor->ndim; d++) {
            if (d) kvc_sb_putc(b, ',');
            kvc_sb_size(b, it->tensor->shape[d]);
        }
        kvc_sb_puts(b, "],\"data_offsets\":[");
        kvc_sb_size(b, offset);
        kvc_sb_putc(b, ',');
        if (!kvc_add_ok(offset, it->tensor->nbytes, &offset)) {
            free(order);
            return kvc_error(KVC_ERR_OUT_OF_RANGE, "the total data size overflows size_t");
        }
        kvc_sb_size(b, offset);
        kvc_sb_puts(b, "]}");
    }
    kvc_sb_putc(b, '}');
    while (b->len % 8) kvc_sb_putc(b, ' ');
    if (b->failed) {
        free(order);
        return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the safetensors header");
    }
    *order_out = order;
    *data_size = offset;
    return KVC_OK;
}

static kvc_status_t st_emit(kvc_sink_t *k, const kvc_named_tensor_t *tensors, size_t n, const size_t *order,
                            const kvc_strbuf_t *b)
{
    unsigned char lenbuf[8];
    uint64_t len = b->len;
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(len >> (8 * i));
    kvc_status_t st = kvc_sink_write(k, lenbuf, 8);
    if (st == KVC_OK) st = kvc_sink_write(k, b->p, b->len);
    for (size_t i = 0; i < n && st == KVC_OK; i++)
        st = kvc_sink_write(k, tensors[order[i]].tensor->data, tensors[order[i]].tensor->nbytes);
    return st;
}

KVC_API kvc_status_t kvc_safetensors_write_mem(const kvc_named_tensor_t *tensors, size_t n,
                                               const kvc_metadata_entry_t *meta, size_t nmeta, void *buf, size_t cap,
                                               size_t *len_out)
{
    if (!len_out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_write_mem: len_out is NULL");
    kvc_status_t st = check_items(tensors, n, meta, nmeta);
    if (st != KVC_OK) return st;
    kvc_strbuf_t b = { 0 };
    size_t *order = NULL, data_size, total;
    if ((st = build_header(tensors, n, meta, nmeta, &b, &order, &data_size)) != KVC_OK) goto out;
    if (!kvc_add_ok(8 + b.len, data_size, &total)) {
        st = kvc_error(KVC_ERR_OUT_OF_RANGE, "the safetensors image size overflows size_t");
        goto out;
    }
    *len_out = total;
    if (cap < total) {
        st = kvc_error(KVC_ERR_NO_SPACE, "the safetensors image needs %zu bytes, the buffer holds %zu", total, cap);
        goto out;
    }
    if (!buf) {
        st = kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_write_mem: buf is NULL");
        goto out;
    }
    kvc_sink_t k;
    kvc_sink_open_mem(&k, buf, cap);
    st = st_emit(&k, tensors, n, order, &b);
out:
    free(order);
    kvc_sb_free(&b);
    return st;
}

KVC_API kvc_status_t kvc_safetensors_write(const char *path, const kvc_named_tensor_t *tensors, size_t n,
                                           const kvc_metadata_entry_t *meta, size_t nmeta)
{
    if (!path) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_safetensors_write: path is NULL");
    kvc_status_t st = check_items(tensors, n, meta, nmeta);
    if (st != KVC_OK) return st;
    kvc_strbuf_t b = { 0 };
    size_t *order = NULL, data_size;
    if ((st = build_header(tensors, n, meta, nmeta, &b, &order, &data_size)) == KVC_OK) {
        kvc_sink_t k;
        if ((st = kvc_sink_open_file(&k, path)) == KVC_OK) st = kvc_sink_finish(&k, st_emit(&k, tensors, n, order, &b));
    }
    free(order);
    kvc_sb_free(&b);
    return st;
}
