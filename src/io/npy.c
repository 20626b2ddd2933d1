/* SPDX-License-Identifier: BSD-3-Clause */
/* NumPy .npy reader and writer. The header is a Python dict literal; it is parsed strictly (the
 * three keys numpy writes, each once, with the value types numpy checks) and every size is checked
 * against the bytes present before any data is touched. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcore/context.h>

#include "io_internal.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* numpy pads the header so that the first axis can grow to this many digits in place. */
#define NPY_GROWTH_AXIS_MAX_DIGITS 21
/* Real headers are a few hundred bytes; numpy itself refuses more than 10000 by default. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

int kvc_npy_has_magic(const kvc_src_t *s)
{
    unsigned char m[NPY_MAGIC_LEN];
    return s->size >= NPY_MAGIC_LEN && kvc_src_read(s, 0, m, NPY_MAGIC_LEN) == KVC_OK &&
           memcmp(m, NPY_MAGIC, NPY_MAGIC_LEN) == 0;
}

/* ------------------------------------------------------------------ header dict parser */

typedef struct cursor {
    const char *begin, *p, *end;
    const char *src; /* source name for messages */
} cursor_t;

static size_t pos(const cursor_t *c) { return (size_t)(c->p - c->begin); }
static int peek(const cursor_t *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

static void skip_ws(cursor_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int accept(cursor_t *c, char ch)
{
    if (peek(c) != (unsigned char)ch) return 0;
    c->p++;
    return 1;
}

static int is_ident_char(int ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
           ch == '.';
}

static kvc_status_t bad(const cursor_t *c, const char *what)
{
    return kvc_error(KVC_ERR_CORRUPT, "%s: .npy header, byte %zu: %s", c->src, pos(c), what);
}

/* A quoted Python string without escapes (numpy never writes any): printable ASCII only. */
static kvc_status_t py_string(cursor_t *c, const char **s, size_t *n)
{
    int q = peek(c);
    if (q != '\'' && q != '"') return bad(c, "expected a quoted string");
    c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != (char)q) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < 0x20 || ch > 0x7e) return bad(c, "escape or non-printable character in a string");
        c->p++;
    }
    if (c->p >= c->end) return bad(c, "unterminated string");
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return KVC_OK;
}

/* A non-negative decimal Python int that fits in size_t. */
static kvc_status_t py_size(cursor_t *c, size_t *v)
{
    int ch = peek(c);
    if (ch < '0' || ch > '9') return bad(c, "expected a non-negative integer");
    if (ch == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
        return bad(c, "integer with a leading zero");
    size_t x = 0;
    while ((ch = peek(c)) >= '0' && ch <= '9') {
        if (!kvc_mul_ok(x, 10, &x) || !kvc_add_ok(x, (size_t)(ch - '0'), &x))
            return bad(c, "integer does not fit in size_t");
        c->p++;
    }
    if (is_ident_char(peek(c))) return bad(c, "malformed integer");
    *v = x;
    return KVC_OK;
}

static int py_word(cursor_t *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
    if (c->p + n < c->end && is_ident_char((unsigned char)c->p[n])) return 0;
    c->p += n;
    return 1;
}

typedef struct npy_dict {
    const char *descr;
    size_t descr_len;
    int fortran;
    size_t ndim; /* may exceed KVC_TENSOR_MAX_DIMS; only the first dims are kept */
    size_t shape[KVC_TENSOR_MAX_DIMS];
} npy_dict_t;

/* Parse "(", ")" ; "(n,)" ; "(n, m[, ...][,])". "(n)" is an int in Python, not a tuple. */
static kvc_status_t py_shape(cursor_t *c, npy_dict_t *d)
{
    if (!accept(c, '(')) return bad(c, "shape is not a tuple");
    skip_ws(c);
    d->ndim = 0;
    if (accept(c, ')')) return KVC_OK;
    for (;;) {
        size_t v = 0;
        kvc_status_t st = py_size(c, &v);
        if (st != KVC_OK) return st;
        if (d->ndim < KVC_TENSOR_MAX_DIMS) d->shape[d->ndim] = v;
        d->ndim++;
        skip_ws(c);
        if (accept(c, ',')) {
            skip_ws(c);
            if (accept(c, ')')) return KVC_OK;
            continue;
        }
        if (accept(c, ')')) return d->ndim == 1 ? bad(c, "shape (n) without a comma is not a tuple") : KVC_OK;
        return bad(c, "expected ',' or ')' in the shape");
    }
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static kvc_status_t parse_dict(cursor_t *c, npy_dict_t *d)
{
    kvc_status_t st;
    unsigned seen = 0;
    skip_ws(c);
    if (!accept(c, '{')) return bad(c, "the header is not a dict");
    for (;;) {
        skip_ws(c);
        if (accept(c, '}')) break;
        const char *key;
        size_t klen;
        if ((st = py_string(c, &key, &klen)) != KVC_OK) return st;
        skip_ws(c);
        if (!accept(c, ':')) return bad(c, "expected ':' after a key");
        skip_ws(c);
        unsigned bit;
        if (klen == 5 && !memcmp(key, "descr", 5)) {
            bit = KEY_DESCR;
            if (peek(c) == '[')
                return kvc_error(KVC_ERR_UNSUPPORTED, "%s: structured (record) dtypes are not supported", c->src);
            if ((st = py_string(c, &d->descr, &d->descr_len)) != KVC_OK) return st;
        } else if (klen == 13 && !memcmp(key, "fortran_order", 13)) {
            bit = KEY_FORTRAN;
            if (py_word(c, "True")) d->fortran = 1;
            else if (py_word(c, "False")) d->fortran = 0;
            else return bad(c, "fortran_order is not True or False");
        } else if (klen == 5 && !memcmp(key, "shape", 5)) {
            bit = KEY_SHAPE;
            if ((st = py_shape(c, d)) != KVC_OK) return st;
        } else {
            return bad(c, "unexpected key (only 'descr', 'fortran_order', 'shape')");
        }
        if (seen & bit) return bad(c, "duplicate key");
        seen |= bit;
        skip_ws(c);
        if (accept(c, ',')) continue;
        if (accept(c, '}')) break;
        return bad(c, "expected ',' or '}'");
    }
    skip_ws(c);
    if (c->p != c->end) return bad(c, "bytes after the dict");
    if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE))
        return kvc_error(KVC_ERR_CORRUPT, "%s: .npy header lacks %s", c->src,
                         !(seen & KEY_DESCR) ? "'descr'" : !(seen & KEY_FORTRAN) ? "'fortran_order'" : "'shape'");
    return KVC_OK;
}

/* '<f4', '|u1', '<V2' (bf16, as numpy saves ml_dtypes.bfloat16), 'bfloat16'. */
static kvc_status_t descr_dtype(const char *src, const char *s, size_t n, kvc_dtype_t *out)
{
    if (n == 8 && !memcmp(s, "bfloat16", 8)) {
        *out = KVC_DTYPE_BF16;
        return KVC_OK;
    }
    static const struct { char kind; char size; kvc_dtype_t dtype; } kinds[] = {
        { 'f', '2', KVC_DTYPE_F16 }, { 'f', '4', KVC_DTYPE_F32 }, { 'f', '8', KVC_DTYPE_F64 },
        { 'i', '1', KVC_DTYPE_I8 },  { 'i', '2', KVC_DTYPE_I16 }, { 'i', '4', KVC_DTYPE_I32 },
        { 'i', '8', KVC_DTYPE_I64 }, { 'u', '1', KVC_DTYPE_U8 },  { 'u', '2', KVC_DTYPE_U16 },
        { 'u', '4', KVC_DTYPE_U32 }, { 'u', '8', KVC_DTYPE_U64 }, { 'b', '1', KVC_DTYPE_BOOL },
        { 'V', '2', KVC_DTYPE_BF16 },
    };
    if (n == 3 && (s[0] == '<' || s[0] == '>' || s[0] == '|')) {
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
            if (kinds[i].kind != s[1] || kinds[i].size != s[2]) continue;
            int one_byte = s[2] == '1', is_void = s[1] == 'V';
            if (s[0] == '>' && !one_byte)
                return kvc_error(KVC_ERR_UNSUPPORTED, "%s: big-endian dtype '%.3s' is not supported", src, s);
            if (s[0] == '|' && !one_byte && !is_void) break; /* numpy never writes '|' for these */
            *out = kinds[i].dtype;
            return KVC_OK;
        }
    }
    return kvc_error(KVC_ERR_DTYPE, "%s: dtype '%.*s' is not one kvcore reads", src, n > 32 ? 32 : (int)n, s);
}

kvc_status_t kvc_npy_parse_src(const kvc_src_t *s, kvc_npy_header_t *h)
{
    unsigned char pre[12];
    if (s->size < NPY_MAGIC_LEN + 2) {
        if (s->size == 0) return kvc_error(KVC_ERR_CORRUPT, "%s: empty, not an .npy file", s->name);
        return kvc_error(KVC_ERR_CORRUPT, "%s: %zu bytes, too short for an .npy file", s->name, s->size);
    }
    kvc_status_t st = kvc_src_read(s, 0, pre, NPY_MAGIC_LEN + 2);
    if (st != KVC_OK) return st;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return kvc_error(KVC_ERR_CORRUPT, "%s: bad magic, not an .npy file", s->name);
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return kvc_error(KVC_ERR_VERSION, "%s: .npy format version %u.%u (kvcore reads 1.0, 2.0, 3.0)", s->name,
                         major, minor);
    size_t prefix = major == 1 ? 10 : 12;
    if (s->size < prefix)
        return kvc_error(KVC_ERR_CORRUPT, "%s: truncated in the .npy header length field", s->name);
    if ((st = kvc_src_read(s, 0, pre, prefix)) != KVC_OK) return st;
    size_t hlen = major == 1 ? (size_t)pre[8] | (size_t)pre[9] << 8
                             : (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    if (hlen > s->size - prefix)
        return kvc_error(KVC_ERR_CORRUPT, "%s: .npy header length %zu runs past the end (%zu bytes)", s->name, hlen,
                         s->size);
    if (hlen > NPY_MAX_HEADER)
        return kvc_error(KVC_ERR_UNSUPPORTED, "%s: .npy header of %zu bytes (kvcore reads up to %zu)", s->name, hlen,
                         NPY_MAX_HEADER);

    char *owned = NULL;
    const char *text;
    if (s->mem) {
        text = (const char *)s->mem + prefix;
    } else {
        if (!(owned = malloc(hlen ? hlen : 1))) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the header");
        if ((st = kvc_src_read(s, prefix, owned, hlen)) != KVC_OK) {
            free(owned);
            return st;
        }
        text = owned;
    }
    cursor_t c = { text, text, text + hlen, s->name };
    npy_dict_t d;
    memset(&d, 0, sizeof(d));
    st = parse_dict(&c, &d);
    kvc_dtype_t dtype = KVC_DTYPE_INVALID;
    if (st == KVC_OK) st = descr_dtype(s->name, d.descr, d.descr_len, &dtype);
    free(owned); /* d.descr pointed into it: not used past here */
    if (st != KVC_OK) return st;

    if (d.ndim > KVC_TENSOR_MAX_DIMS)
        return kvc_error(KVC_ERR_UNSUPPORTED, "%s: %zu dimensions (kvcore holds up to %d)", s->name, d.ndim,
                         KVC_TENSOR_MAX_DIMS);
    if (d.fortran) {
        /* Fortran order is C order when at most one dimension exceeds 1. */
        int big = 0;
        for (size_t i = 0; i < d.ndim; i++) big += d.shape[i] > 1;
        if (big > 1) return kvc_error(KVC_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported", s->name);
    }
    size_t nbytes = kvc_dtype_size(dtype);
    for (size_t i = 0; i < d.ndim; i++)
        if (!kvc_mul_ok(nbytes, d.shape[i], &nbytes))
            return kvc_error(KVC_ERR_CORRUPT, "%s: shape[%zu] = %zu: the array size overflows", s->name, i, d.shape[i]);
    size_t data_offset = prefix + hlen;
    if (nbytes > s->size - data_offset)
        return kvc_error(KVC_ERR_CORRUPT, "%s: truncated: the array needs %zu data bytes, %zu are present", s->name,
                         nbytes, s->size - data_offset);

    memset(h, 0, sizeof(*h));
    h->dtype = dtype;
    h->ndim = (int)d.ndim;
    memcpy(h->shape, d.shape, sizeof(h->shape));
    h->data_offset = data_offset;
    h->nbytes = nbytes;
    return KVC_OK;
}

static void header_to_tensor(const kvc_npy_header_t *h, kvc_tensor_t *t)
{
    memset(t, 0, sizeof(*t));
    t->dtype = h->dtype;
    t->ndim = h->ndim;
    memcpy(t->shape, h->shape, sizeof(t->shape));
    t->nbytes = h->nbytes;
}

KVC_API kvc_status_t kvc_npy_view(const void *buf, size_t len, kvc_tensor_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_view: out is NULL");
    if (!buf && len) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_view: buf is NULL with len %zu", len);
    kvc_src_t s;
    kvc_src_open_mem(&s, buf, len);
    kvc_npy_header_t h;
    kvc_status_t st = kvc_npy_parse_src(&s, &h);
    if (st != KVC_OK) return st;
    header_to_tensor(&h, out);
    out->data = h.nbytes ? (void *)((const unsigned char *)buf + h.data_offset) : NULL;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_npy_read(const char *path, kvc_tensor_t *out)
{
    if (!out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_read: out is NULL");
    kvc_src_t s;
    kvc_status_t st = kvc_src_open_file(&s, path);
    if (st != KVC_OK) return st;
    kvc_npy_header_t h;
    void *data = NULL;
    if ((st = kvc_npy_parse_src(&s, &h)) == KVC_OK && (st = kvc_data_alloc(h.nbytes, &data)) == KVC_OK)
        st = kvc_src_read(&s, h.data_offset, data, h.nbytes);
    kvc_src_close(&s);
    if (st != KVC_OK) {
        free(data);
        return st;
    }
    header_to_tensor(&h, out);
    out->data = data;
    out->owns_data = data != NULL;
    return KVC_OK;
}

/* ------------------------------------------------------------------ writer */

/* The header numpy.save writes for a C-order array (numpy/lib/format.py: dict in sorted key order,
 * growth padding after the dict, spaces to a 64-byte boundary, then '\n'). */
static kvc_status_t npy_header(const kvc_tensor_t *t, kvc_strbuf_t *b)
{
    const kvc_dtype_info_t *d = kvc_dtype_info(t->dtype);
    if (!d->npy_descr)
        return kvc_error(KVC_ERR_DTYPE, "dtype %s has no .npy form (numpy has no such type)", d->name);
    kvc_sb_puts(b, "{'descr': '");
    kvc_sb_puts(b, d->npy_descr);
    kvc_sb_puts(b, "', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < t->ndim; i++) {
        if (i) kvc_sb_puts(b, ", ");
        kvc_sb_size(b, t->shape[i]);
    }
    kvc_sb_puts(b, t->ndim == 1 ? ",), }" : "), }");
    if (t->ndim > 0) {
        size_t digits = 1;
        for (size_t v = t->shape[0]; v >= 10; v /= 10) digits++;
        for (size_t i = digits; i < NPY_GROWTH_AXIS_MAX_DIGITS; i++) kvc_sb_putc(b, ' ');
    }
    size_t pad = NPY_ALIGN - (10 + b->len + 1) % NPY_ALIGN;
    for (size_t i = 0; i < pad; i++) kvc_sb_putc(b, ' ');
    kvc_sb_putc(b, '\n');
    if (b->failed) return kvc_error(KVC_ERR_NO_MEMORY, "cannot allocate the .npy header");
    return KVC_OK;
}

static kvc_status_t npy_emit(kvc_sink_t *k, const kvc_tensor_t *t, const kvc_strbuf_t *b)
{
    unsigned char pre[10];
    memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(b->len & 0xff);
    pre[9] = (unsigned char)(b->len >> 8);
    kvc_status_t st = kvc_sink_write(k, pre, sizeof(pre));
    if (st == KVC_OK) st = kvc_sink_write(k, b->p, b->len);
    if (st == KVC_OK) st = kvc_sink_write(k, t->data, t->nbytes);
    return st;
}

KVC_API kvc_status_t kvc_npy_write_mem(const kvc_tensor_t *t, void *buf, size_t cap, size_t *len_out)
{
    if (!len_out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_write_mem: len_out is NULL");
    kvc_status_t st = kvc_tensor_check(t, "tensor");
    if (st != KVC_OK) return st;
    kvc_strbuf_t b = { 0 };
    if ((st = npy_header(t, &b)) != KVC_OK) {
        kvc_sb_free(&b);
        return st;
    }
    size_t total = 10 + b.len;
    if (!kvc_add_ok(total, t->nbytes, &total)) {
        kvc_sb_free(&b);
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "the .npy image size overflows size_t");
    }
    *len_out = total;
    if (cap < total) {
        kvc_sb_free(&b);
        return kvc_error(KVC_ERR_NO_SPACE, "the .npy image needs %zu bytes, the buffer holds %zu", total, cap);
    }
    if (!buf) {
        kvc_sb_free(&b);
        return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_write_mem: buf is NULL");
    }
    kvc_sink_t k;
    kvc_sink_open_mem(&k, buf, cap);
    st = npy_emit(&k, t, &b);
    kvc_sb_free(&b);
    return st;
}

KVC_API kvc_status_t kvc_npy_write(const char *path, const kvc_tensor_t *t)
{
    if (!path) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_write: path is NULL");
    kvc_status_t st = kvc_tensor_check(t, "tensor");
    if (st != KVC_OK) return st;
    kvc_strbuf_t b = { 0 };
    if ((st = npy_header(t, &b)) == KVC_OK) {
        kvc_sink_t k;
        if ((st = kvc_sink_open_file(&k, path)) == KVC_OK) st = kvc_sink_finish(&k, npy_emit(&k, t, &b));
    }
    kvc_sb_free(&b);
    return st;
}

/* ------------------------------------------------------------------ piecewise */

KVC_API kvc_status_t kvc_npy_read_header(const char *path, kvc_tensor_t *out, size_t *data_offset)
{
    if (!out || !data_offset) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_read_header: out and data_offset must not be NULL");
    kvc_src_t s;
    kvc_status_t st = kvc_src_open_file(&s, path);
    if (st != KVC_OK) return st;
    kvc_npy_header_t h;
    st = kvc_npy_parse_src(&s, &h);
    kvc_src_close(&s);
    if (st != KVC_OK) return st;
    header_to_tensor(&h, out);
    *data_offset = h.data_offset;
    return KVC_OK;
}

struct kvc_npy_writer {
    kvc_sink_t sink;
    size_t data_offset, nbytes;
};

KVC_API kvc_status_t kvc_npy_writer_open(const char *path, const kvc_tensor_t *desc, kvc_npy_writer_t **out)
{
    if (!path || !desc || !out) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_writer_open: path, desc and out must not be NULL");
    if (desc->ndim < 0 || desc->ndim > KVC_TENSOR_MAX_DIMS)
        return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_writer_open: ndim %d", desc->ndim);
    kvc_tensor_t t;
    memset(&t, 0, sizeof(t));
    t.dtype = desc->dtype;
    t.ndim = desc->ndim;
    memcpy(t.shape, desc->shape, sizeof(t.shape));
    kvc_status_t st = kvc_tensor_nbytes(t.dtype, t.ndim, t.shape, &t.nbytes);
    if (st != KVC_OK) return st;
    kvc_strbuf_t b = { 0 };
    kvc_npy_writer_t *w = NULL;
    if ((st = npy_header(&t, &b)) != KVC_OK) goto done;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        st = kvc_error(KVC_ERR_INVALID_ARG, "%s is not a regular file: pieces are written at offsets", path);
        goto done;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        st = kvc_error(KVC_ERR_NO_MEMORY, "kvc_npy_writer_open: no memory");
        goto done;
    }
    w->data_offset = 10 + b.len;
    w->nbytes = t.nbytes;
    if ((st = kvc_sink_open_file(&w->sink, path)) != KVC_OK) goto done;
    t.data = NULL;
    const size_t n = t.nbytes;
    t.nbytes = 0; /* the header only: the data comes in pieces */
    st = npy_emit(&w->sink, &t, &b);
    t.nbytes = n;
    /* The data's full length now, so pieces never written read as zeros and the file has its size. */
    if (st == KVC_OK && ftruncate(w->sink.fd, (off_t)(w->data_offset + n)) != 0)
        st = kvc_error(kvc_status_from_errno(errno), "cannot size %s: %s", path, strerror(errno));
    if (st != KVC_OK) {
        kvc_sink_finish(&w->sink, st);
        goto done;
    }
    *out = w;
    w = NULL;
done:
    free(w);
    kvc_sb_free(&b);
    return st;
}

KVC_API kvc_status_t kvc_npy_writer_pwrite(kvc_npy_writer_t *w, size_t offset, const void *buf, size_t n)
{
    if (!w || (!buf && n)) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_writer_pwrite: NULL argument");
    if (offset > w->nbytes || n > w->nbytes - offset)
        return kvc_error(KVC_ERR_OUT_OF_RANGE, "npy piece [%zu, +%zu) outside the %zu data bytes", offset, n, w->nbytes);
    const unsigned char *p = buf;
    while (n) {
        ssize_t r = pwrite(w->sink.fd, p, n, (off_t)(w->data_offset + offset));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return kvc_error(r < 0 ? kvc_status_from_errno(errno) : KVC_ERR_IO, "cannot write %s: %s", w->sink.path,
                                     r < 0 ? strerror(errno) : "short write");
        p += r;
        offset += (size_t)r;
        n -= (size_t)r;
    }
    return KVC_OK;
}

KVC_API kvc_status_t kvc_npy_writer_finish(kvc_npy_writer_t *w, kvc_status_t st)
{
    if (!w) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_npy_writer_finish: w is NULL");
    st = kvc_sink_finish(&w->sink, st);
    free(w);
    return st;
}
