/* SPDX-License-Identifier: BSD-3-Clause */
/* File I/O: element types and tensors, .npy and .safetensors readers and writers (byte-exact
 * against numpy-written files, the safetensors reference's own test vectors and the tests/ref
 * oracle), the KV-cache loader and saver, and every malformed-input path with its exact status.
 * Each malformed image goes through both the memory and the file reader. Temporary files live in
 * /tmp and are removed by each suite's fini, also when a test fails. */
#define _GNU_SOURCE /* memmem, mkstemps */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <kvcore.h>

#include "npy_load.h"
#include "ref/io_ref.h"
#include "test_util.h"

/* ------------------------------------------------------------------ temporary files */

#define MAX_TMP 16
static char tmp_files[MAX_TMP][64];
static int ntmp;

static const char *tmp_path(const char *suffix)
{
    cr_assert_lt(ntmp, MAX_TMP, "too many temporary files in one test");
    char *p = tmp_files[ntmp++];
    snprintf(p, sizeof(tmp_files[0]), "/tmp/kvc-test-io-XXXXXX%s", suffix);
    int fd = mkstemps(p, (int)strlen(suffix));
    cr_assert_geq(fd, 0, "mkstemps: %s", strerror(errno));
    close(fd);
    return p;
}

/* A fresh name with no file behind it (to check that a failed write creates nothing). */
static const char *tmp_absent(const char *suffix)
{
    const char *p = tmp_path(suffix);
    unlink(p);
    return p;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void remove_tmp(void)
{
    for (int i = 0; i < ntmp; i++) unlink(tmp_files[i]);
    ntmp = 0;
}

TestSuite(io_types, .fini = remove_tmp);
TestSuite(io_npy, .fini = remove_tmp);
TestSuite(io_st, .fini = remove_tmp);
TestSuite(io_kv, .fini = remove_tmp);
TestSuite(io_fuzz, .fini = remove_tmp);

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "fopen %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131u + seed * 17u + (i >> 8));
}

static const size_t base_shape[4] = { 3, 2, 5, 4 };

/* ------------------------------------------------------------------ types */

Test(io_types, dtype_table)
{
    static const struct { kvc_dtype_t d; size_t size; const char *name; } want[] = {
        { KVC_DTYPE_F16, 2, "f16" },   { KVC_DTYPE_BF16, 2, "bf16" }, { KVC_DTYPE_F32, 4, "f32" },
        { KVC_DTYPE_F64, 8, "f64" },   { KVC_DTYPE_U8, 1, "u8" },     { KVC_DTYPE_I8, 1, "i8" },
        { KVC_DTYPE_I16, 2, "i16" },   { KVC_DTYPE_I32, 4, "i32" },   { KVC_DTYPE_I64, 8, "i64" },
        { KVC_DTYPE_U16, 2, "u16" },   { KVC_DTYPE_U32, 4, "u32" },   { KVC_DTYPE_U64, 8, "u64" },
        { KVC_DTYPE_BOOL, 1, "bool" }, { KVC_DTYPE_F8_E4M3, 1, "f8_e4m3" }, { KVC_DTYPE_F8_E5M2, 1, "f8_e5m2" },
    };
    cr_assert_eq(sizeof(want) / sizeof(want[0]), (size_t)KVC_DTYPE_END - 1);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_eq(kvc_dtype_size(want[i].d), want[i].size, "%s", want[i].name);
        cr_assert_str_eq(kvc_dtype_name(want[i].d), want[i].name);
    }
    cr_assert_eq(kvc_dtype_size(KVC_DTYPE_INVALID), 0u);
    cr_assert_eq(kvc_dtype_size((kvc_dtype_t)KVC_DTYPE_END), 0u);
    cr_assert_eq(kvc_dtype_size((kvc_dtype_t)-1), 0u);
    cr_assert_str_eq(kvc_dtype_name((kvc_dtype_t)99), "invalid");
}

Test(io_types, nbytes_checks_overflow)
{
    size_t n = 7;
    size_t shape[3] = { 2, 3, 4 };
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F32, 3, shape, &n), KVC_OK);
    cr_assert_eq(n, 96u);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F32, 0, NULL, &n), KVC_OK);
    cr_assert_eq(n, 4u, "a 0-d tensor is one element");
    size_t big[2] = { SIZE_MAX / 2 + 1, 2 };
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_U8, 2, big, &n), KVC_ERR_OUT_OF_RANGE);
    size_t big1[1] = { SIZE_MAX / 2 + 1 };
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F16, 1, big1, &n), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F16, 9, shape, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F16, -1, shape, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F16, 2, NULL, &n), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_INVALID, 1, shape, &n), KVC_ERR_DTYPE);
    cr_assert_eq(kvc_tensor_nbytes(KVC_DTYPE_F16, 1, shape, NULL), KVC_ERR_INVALID_ARG);
}

Test(io_types, alloc_wrap_free)
{
    size_t shape[2] = { 3, 5 };
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_alloc(&t, KVC_DTYPE_BF16, 2, shape), KVC_OK);
    cr_assert_eq(t.nbytes, 30u);
    cr_assert(t.owns_data);
    cr_assert_eq((uintptr_t)t.data % 64, 0u);
    for (size_t i = 0; i < t.nbytes; i++) cr_assert_eq(((unsigned char *)t.data)[i], 0);
    kvc_tensor_free(&t);
    cr_assert_null(t.data);
    cr_assert_eq(t.ndim, 0);
    kvc_tensor_free(NULL);

    unsigned char buf[30];
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_I16, 2, shape, buf), KVC_OK);
    cr_assert_not(t.owns_data);
    kvc_tensor_free(&t); /* must not free buf (ASan would catch it) */
    kvc_tensor_t untouched = { .ndim = 77 };
    cr_assert_eq(kvc_tensor_wrap(&untouched, KVC_DTYPE_I16, 2, shape, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(untouched.ndim, 77, "out must be untouched on failure");
    size_t empty[2] = { 3, 0 };
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_I16, 2, empty, NULL), KVC_OK);
    cr_assert_eq(t.nbytes, 0u);
    cr_assert_eq(kvc_tensor_alloc(&t, KVC_DTYPE_I16, 2, empty), KVC_OK);
    cr_assert_null(t.data);
    kvc_tensor_free(&t);
}

/* ------------------------------------------------------------------ .npy */

static const char *npy_descr(kvc_dtype_t d)
{
    switch (d) {
    case KVC_DTYPE_F16: return "<f2";
    case KVC_DTYPE_BF16: return "<V2";
    case KVC_DTYPE_F32: return "<f4";
    case KVC_DTYPE_F64: return "<f8";
    case KVC_DTYPE_U8: return "|u1";
    case KVC_DTYPE_I8: return "|i1";
    case KVC_DTYPE_I16: return "<i2";
    case KVC_DTYPE_I32: return "<i4";
    case KVC_DTYPE_I64: return "<i8";
    case KVC_DTYPE_U16: return "<u2";
    case KVC_DTYPE_U32: return "<u4";
    case KVC_DTYPE_U64: return "<u8";
    case KVC_DTYPE_BOOL: return "|b1";
    default: return NULL;
    }
}

static void assert_same_tensor(const kvc_tensor_t *a, kvc_dtype_t dtype, int ndim, const size_t *shape,
                               const void *data, size_t nbytes)
{
    cr_assert_eq(a->dtype, dtype);
    cr_assert_eq(a->ndim, ndim);
    for (int i = 0; i < ndim; i++) cr_assert_eq(a->shape[i], shape[i], "dim %d", i);
    cr_assert_eq(a->nbytes, nbytes);
    if (nbytes) cr_assert_arr_eq(a->data, data, nbytes);
    else cr_assert_null(a->data);
}

Test(io_npy, roundtrip_every_dtype_and_ndim)
{
    unsigned char data[1024], img[2048], want[2048];
    const char *path = tmp_path(".npy");
    for (int d = 1; d < KVC_DTYPE_END; d++) {
        const char *descr = npy_descr((kvc_dtype_t)d);
        if (!descr) continue;
        for (int ndim = 0; ndim <= 4; ndim++) {
            kvc_tensor_t t, v, r;
            fill(data, sizeof(data), (unsigned)(d * 10 + ndim));
            cr_assert_eq(kvc_tensor_wrap(&t, (kvc_dtype_t)d, ndim, base_shape, data), KVC_OK);
            size_t len = 0;
            cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK, "%s", kvc_last_error());
            size_t wlen = ref_npy_image(descr, ndim, base_shape, data, t.nbytes, want, sizeof(want));
            cr_assert_eq(len, wlen, "%s ndim %d", descr, ndim);
            cr_assert_arr_eq(img, want, len, "%s ndim %d: bytes differ from numpy's layout", descr, ndim);
            cr_assert_eq((len - t.nbytes) % 64, 0u, "header must end on a 64-byte boundary");

            cr_assert_eq(kvc_npy_view(img, len, &v), KVC_OK, "%s", kvc_last_error());
            assert_same_tensor(&v, (kvc_dtype_t)d, ndim, base_shape, data, t.nbytes);
            cr_assert_not(v.owns_data);
            cr_assert_eq((unsigned char *)v.data, img + (len - t.nbytes));

            cr_assert_eq(kvc_npy_write(path, &t), KVC_OK, "%s", kvc_last_error());
            size_t flen;
            unsigned char *file = slurp(path, &flen);
            cr_assert_eq(flen, len);
            cr_assert_arr_eq(file, img, len);
            free(file);
            cr_assert_eq(kvc_npy_read(path, &r), KVC_OK, "%s", kvc_last_error());
            assert_same_tensor(&r, (kvc_dtype_t)d, ndim, base_shape, data, t.nbytes);
            cr_assert(r.owns_data);
            kvc_tensor_free(&r);
        }
    }
}

/* Piecewise writing gives kvc_npy_write's bytes whatever the order of the pieces; the header reader
 * gives the offset of the data; failures leave nothing behind. */
Test(io_npy, piecewise_writer_and_header_reader)
{
    unsigned char data[480];
    fill(data, sizeof(data), 7);
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 4, base_shape, data), KVC_OK);
    const char *whole = tmp_path(".npy"), *pieces = tmp_absent(".npy");
    cr_assert_eq(kvc_npy_write(whole, &t), KVC_OK);
    kvc_npy_writer_t *w;
    cr_assert_eq(kvc_npy_writer_open(pieces, &t, &w), KVC_OK, "%s", kvc_last_error());
    cr_assert_not(exists(pieces), "the file appears only when finished");
    for (size_t off = sizeof(data); off > 0; off -= 96) /* back to front */
        cr_assert_eq(kvc_npy_writer_pwrite(w, off - 96, data + off - 96, 96), KVC_OK);
    cr_assert_eq(kvc_npy_writer_pwrite(w, 400, data, 81), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_npy_writer_pwrite(w, SIZE_MAX, data, 2), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_npy_writer_finish(w, KVC_OK), KVC_OK, "%s", kvc_last_error());
    size_t la, lb;
    unsigned char *a = slurp(whole, &la), *b = slurp(pieces, &lb);
    cr_assert_eq(la, lb);
    cr_assert_arr_eq(a, b, la);
    free(a);
    free(b);

    kvc_tensor_t h;
    size_t off = 0;
    cr_assert_eq(kvc_npy_read_header(pieces, &h, &off), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(h.dtype, KVC_DTYPE_F32);
    cr_assert_eq(h.ndim, 4);
    cr_assert_eq(h.shape[2], 5);
    cr_assert_null(h.data);
    cr_assert_eq(off, lb - sizeof(data));
    cr_assert_eq(truncate(pieces, (off_t)(lb - 1)), 0);
    cr_assert_eq(kvc_npy_read_header(pieces, &h, &off), KVC_ERR_CORRUPT, "data shorter than the header says");

    /* Unwritten pieces read as zeros; a failed write leaves nothing. */
    const char *zeros = tmp_absent(".npy"), *failed = tmp_absent(".npy");
    cr_assert_eq(kvc_npy_writer_open(zeros, &t, &w), KVC_OK);
    cr_assert_eq(kvc_npy_writer_finish(w, KVC_OK), KVC_OK);
    kvc_tensor_t r;
    cr_assert_eq(kvc_npy_read(zeros, &r), KVC_OK);
    for (size_t i = 0; i < r.nbytes; i++) cr_assert_eq(((unsigned char *)r.data)[i], 0);
    kvc_tensor_free(&r);
    cr_assert_eq(kvc_npy_writer_open(failed, &t, &w), KVC_OK);
    cr_assert_eq(kvc_npy_writer_finish(w, KVC_ERR_IO), KVC_ERR_IO);
    cr_assert_not(exists(failed));
    cr_assert_eq(kvc_npy_writer_open("/dev/null", &t, &w), KVC_ERR_INVALID_ARG);
    t.dtype = KVC_DTYPE_F8_E4M3;
    cr_assert_eq(kvc_npy_writer_open(failed, &t, &w), KVC_ERR_DTYPE);
    cr_assert_not(exists(failed));
}

Test(io_npy, zero_length_data)
{
    unsigned char img[256];
    size_t shapes[2][2] = { { 0, 0 }, { 3, 0 } };
    for (int k = 0; k < 2; k++) {
        int ndim = k + 1;
        kvc_tensor_t t, v, r;
        cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, ndim, shapes[k], NULL), KVC_OK);
        size_t len;
        cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
        cr_assert_eq(len, 128u);
        cr_assert_eq(kvc_npy_view(img, len, &v), KVC_OK);
        assert_same_tensor(&v, KVC_DTYPE_F32, ndim, shapes[k], NULL, 0);
        const char *path = tmp_path(".npy");
        cr_assert_eq(kvc_npy_write(path, &t), KVC_OK);
        cr_assert_eq(kvc_npy_read(path, &r), KVC_OK);
        assert_same_tensor(&r, KVC_DTYPE_F32, ndim, shapes[k], NULL, 0);
        kvc_tensor_free(&r);
    }
}

/* The real K cache: float16 (5, 512, 4, 8), written by numpy. */
Test(io_npy, real_kv_file)
{
    const char *path = kvc_test_data("kvdata/story_prompt_K.npy");
    kvc_tensor_t t;
    cr_assert_eq(kvc_npy_read(path, &t), KVC_OK, "%s", kvc_last_error());
    size_t shape[4] = { 5, 512, 4, 8 };
    cr_assert_eq(t.dtype, KVC_DTYPE_F16);
    cr_assert_eq(t.ndim, 4);
    for (int i = 0; i < 4; i++) cr_assert_eq(t.shape[i], shape[i]);
    cr_assert_eq(t.nbytes, 5u * 512 * 4 * 8 * 2);

    size_t flen;
    unsigned char *raw = slurp(path, &flen);
    size_t header = 10 + ((size_t)raw[8] | (size_t)raw[9] << 8);
    cr_assert_eq(header, 128u);
    cr_assert_eq(flen, header + t.nbytes);
    /* Values read with Python's struct module from the file. */
    static const struct { size_t l, tok, h, d; uint16_t bits; } known[] = {
        { 0, 0, 0, 0, 0xb4e8 }, /* -0.3066 */
        { 0, 0, 0, 1, 0xb9da }, /* -0.7314 */
        { 2, 100, 3, 5, 0x4140 }, /* 2.625 */
        { 4, 511, 3, 7, 0x470f }, /* 7.0586 */
    };
    const uint16_t *v = t.data;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        size_t e = ((known[i].l * 512 + known[i].tok) * 4 + known[i].h) * 8 + known[i].d;
        uint16_t in_file = (uint16_t)(raw[header + 2 * e] | raw[header + 2 * e + 1] << 8);
        cr_assert_eq(in_file, known[i].bits, "file element %zu", e);
        cr_assert_eq(v[e], known[i].bits, "element %zu", e);
    }
    cr_assert_arr_eq(t.data, raw + header, t.nbytes);

    /* The test-only loader (a separate implementation) agrees. */
    test_npy_t ref = test_npy_load(path);
    cr_assert_eq(ref.count * ref.itemsize, t.nbytes);
    cr_assert_arr_eq(ref.data, t.data, t.nbytes);
    test_npy_free(&ref);
    free(raw);
    kvc_tensor_free(&t);
}

/* Every .npy in tests/data was written by numpy: reading and writing it back gives the same bytes. */
static int rewrite_dir(const char *rel)
{
    const char *dirpath = kvc_test_data(rel);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", dirpath);
    DIR *dp = opendir(dir);
    cr_assert_not_null(dp, "cannot list %s", dir);
    int count = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t n = strlen(de->d_name);
        if (n < 4 || strcmp(de->d_name + n - 4, ".npy")) continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        size_t flen, len;
        unsigned char *file = slurp(path, &flen);
        kvc_tensor_t t;
        cr_assert_eq(kvc_npy_read(path, &t), KVC_OK, "%s: %s", path, kvc_last_error());
        unsigned char *img = malloc(flen);
        cr_assert_eq(kvc_npy_write_mem(&t, img, flen, &len), KVC_OK, "%s: %s", path, kvc_last_error());
        cr_assert_eq(len, flen, "%s", path);
        cr_assert_arr_eq(img, file, flen, "%s: rewritten bytes differ from numpy's", path);
        free(img);
        free(file);
        kvc_tensor_free(&t);
        count++;
    }
    closedir(dp);
    return count;
}

Test(io_npy, byte_exact_with_numpy_files)
{
    cr_assert_gt(rewrite_dir("golden"), 20);
    cr_assert_geq(rewrite_dir("kvdata"), 6);
}

/* ---- malformed .npy images: memory and file readers must agree on the exact status */

static unsigned char imgbuf[1 << 16];

/* An .npy image: magic, version, header length (2 bytes for 1.x, 4 otherwise), header text as
 * given, ndata data bytes. */
static size_t make_npy_n(int major, int minor, const char *header, size_t h, size_t ndata)
{
    size_t at = 0;
    memcpy(imgbuf, "\x93NUMPY", 6);
    imgbuf[6] = (unsigned char)major;
    imgbuf[7] = (unsigned char)minor;
    at = 8;
    for (int i = 0; i < (major == 1 ? 2 : 4); i++) imgbuf[at++] = (unsigned char)(h >> (8 * i));
    memcpy(imgbuf + at, header, h);
    at += h;
    fill(imgbuf + at, ndata, 3);
    return at + ndata;
}

static size_t make_npy(int major, int minor, const char *header, size_t ndata)
{
    return make_npy_n(major, minor, header, strlen(header), ndata);
}

static kvc_status_t npy_status(const void *img, size_t len)
{
    kvc_tensor_t v, r;
    kvc_status_t a = kvc_npy_view(img, len, &v);
    char amsg[512];
    snprintf(amsg, sizeof(amsg), "%s", kvc_last_error());
    if (a == KVC_OK) cr_assert(len == 0 || v.nbytes <= len);
    const char *path = tmp_path(".npy");
    write_file(path, img, len);
    kvc_status_t b = kvc_npy_read(path, &r);
    if (b == KVC_OK) kvc_tensor_free(&r);
    unlink(path);
    ntmp--;
    cr_assert_eq(a, b, "memory reader: %s (%s), file reader: %s (%s)", kvc_status_name(a), amsg, kvc_status_name(b),
                 kvc_last_error());
    return a;
}

#define EXPECT_NPY(img, len, status)                                                                          \
    do {                                                                                                      \
        kvc_status_t got_ = npy_status((img), (len));                                                         \
        cr_assert_eq(got_, (status), "line %d: expected %s, got %s: %s", __LINE__, kvc_status_name(status),   \
                     kvc_status_name(got_), kvc_last_error());                                                \
    } while (0)

#define HDR(descr, fortran, shape) "{'descr': '" descr "', 'fortran_order': " fortran ", 'shape': " shape ", }"
#define EXPECT_NPY1(header, ndata, status) EXPECT_NPY(imgbuf, make_npy(1, 0, (header), (ndata)), status)

Test(io_npy, accepted_header_variants)
{
    kvc_tensor_t v;
    size_t len;
    /* keys in any order, double quotes, no trailing comma, no spaces, newlines and tabs */
    len = make_npy(1, 0, "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}", 24);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(v.ndim, 2);
    cr_assert_eq(v.shape[1], 3u);
    len = make_npy(1, 0, "{\n\t'fortran_order' : False ,\n 'descr' : '<i2' , 'shape' : ( 7 , ) ,\n}\n   ", 14);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(v.dtype, KVC_DTYPE_I16);
    cr_assert_eq(v.ndim, 1);
    cr_assert_eq(v.shape[0], 7u);
    len = make_npy(1, 0, HDR("<f8", "False", "(2, 3,)"), 48);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    cr_assert_eq(v.ndim, 2);
    len = make_npy(1, 0, HDR("<f8", "False", "()"), 8);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    cr_assert_eq(v.ndim, 0);
    cr_assert_eq(v.nbytes, 8u);
    /* bf16 as numpy saves ml_dtypes.bfloat16 ('<V2' or '|V2'), or the literal name */
    const char *bf[] = { HDR("<V2", "False", "(4,)"), HDR("|V2", "False", "(4,)"), HDR("bfloat16", "False", "(4,)") };
    for (int i = 0; i < 3; i++) {
        len = make_npy(1, 0, bf[i], 8);
        cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK, "%s", bf[i]);
        cr_assert_eq(v.dtype, KVC_DTYPE_BF16);
    }
    /* byte order is meaningless for one-byte types */
    len = make_npy(1, 0, HDR("<u1", "False", "(4,)"), 4);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    cr_assert_eq(v.dtype, KVC_DTYPE_U8);
    /* Fortran order is C order when at most one dimension exceeds 1 */
    len = make_npy(1, 0, HDR("<f4", "True", "(5,)"), 20);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    len = make_npy(1, 0, HDR("<f4", "True", "(1, 5, 1)"), 20);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    /* trailing bytes after the data are ignored, as numpy.load does */
    len = make_npy(1, 0, HDR("<f4", "False", "(2,)"), 8 + 5);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK);
    cr_assert_eq(v.nbytes, 8u);
}

Test(io_npy, versions)
{
    size_t len = make_npy(2, 0, HDR("<i4", "False", "(3,)"), 12);
    kvc_tensor_t v;
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(v.shape[0], 3u);
    cr_assert_eq((unsigned char *)v.data, imgbuf + 12 + strlen(HDR("<i4", "False", "(3,)")));
    len = make_npy(3, 0, HDR("<i4", "False", "(3,)"), 12);
    cr_assert_eq(kvc_npy_view(imgbuf, len, &v), KVC_OK, "%s", kvc_last_error());
    EXPECT_NPY(imgbuf, make_npy(4, 0, HDR("<i4", "False", "(3,)"), 12), KVC_ERR_VERSION);
    EXPECT_NPY(imgbuf, make_npy(1, 1, HDR("<i4", "False", "(3,)"), 12), KVC_ERR_VERSION);
    EXPECT_NPY(imgbuf, make_npy(0, 0, HDR("<i4", "False", "(3,)"), 12), KVC_ERR_VERSION);
}

Test(io_npy, malformed_container)
{
    EXPECT_NPY("", 0, KVC_ERR_CORRUPT);                    /* empty file */
    EXPECT_NPY("\x93NU", 3, KVC_ERR_CORRUPT);              /* shorter than the magic */
    EXPECT_NPY("\x93NUMPY\x01", 7, KVC_ERR_CORRUPT);       /* no version minor */
    EXPECT_NPY("\x93NUMPY\x01\x00\x10", 9, KVC_ERR_CORRUPT); /* half a length field */
    EXPECT_NPY("\x93NUMPY\x02\x00\x10\x00", 10, KVC_ERR_CORRUPT); /* v2 needs a 4-byte field */
    size_t len = make_npy(1, 0, HDR("<f4", "False", "(2,)"), 8);
    imgbuf[1] = 'X';
    EXPECT_NPY(imgbuf, len, KVC_ERR_CORRUPT); /* bad magic */

    /* truncated in the header: the length field says more than is there */
    len = make_npy(1, 0, HDR("<f4", "False", "(2,)"), 0);
    EXPECT_NPY(imgbuf, len - 10, KVC_ERR_CORRUPT);
    /* header length past the end of the file */
    len = make_npy(1, 0, HDR("<f4", "False", "(2,)"), 8);
    imgbuf[8] = 0xff;
    imgbuf[9] = 0xff;
    EXPECT_NPY(imgbuf, len, KVC_ERR_CORRUPT);
    len = make_npy(2, 0, HDR("<f4", "False", "(2,)"), 8);
    imgbuf[11] = 0xff; /* 4 GiB header length in a tiny file */
    EXPECT_NPY(imgbuf, len, KVC_ERR_CORRUPT);
    /* a header longer than kvcore reads (1 MiB; real ones are a few hundred bytes) */
    size_t big = ((size_t)1 << 20) + 1;
    unsigned char *huge = malloc(12 + big);
    memcpy(huge, "\x93NUMPY\x02\x00", 8);
    for (int i = 0; i < 4; i++) huge[8 + i] = (unsigned char)(big >> (8 * i));
    memset(huge + 12, ' ', big);
    memcpy(huge + 12, HDR("|u1", "False", "()"), strlen(HDR("|u1", "False", "()")));
    EXPECT_NPY(huge, 12 + big, KVC_ERR_UNSUPPORTED);
    free(huge);
    /* truncated data */
    EXPECT_NPY1(HDR("<f4", "False", "(2, 3)"), 23, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(2, 3)"), 0, KVC_ERR_CORRUPT);
    /* 0-length data is fine */
    EXPECT_NPY1(HDR("<f4", "False", "(0,)"), 0, KVC_OK);
    EXPECT_NPY1(HDR("<f4", "False", "(4, 0, 3)"), 0, KVC_OK);
}

Test(io_npy, malformed_header_dict)
{
    EXPECT_NPY1("", 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1("   ", 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1("[]", 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{}", 0, KVC_ERR_CORRUPT);                                         /* no keys */
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False}", 0, KVC_ERR_CORRUPT);   /* no shape */
    EXPECT_NPY1("{'descr': '<f4', 'shape': (1,)}", 4, KVC_ERR_CORRUPT);            /* no fortran_order */
    EXPECT_NPY1("{'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);    /* no descr */
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4, KVC_ERR_CORRUPT); /* no } */
    EXPECT_NPY1("{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT); /* no : */
    EXPECT_NPY1("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT); /* no , */
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)},", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': 'False', 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}", 4, KVC_ERR_CORRUPT);
    EXPECT_NPY1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,),,}", 4, KVC_ERR_CORRUPT);
    static const char with_nul[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\0";
    EXPECT_NPY(imgbuf, make_npy_n(1, 0, with_nul, sizeof(with_nul), 4), KVC_ERR_CORRUPT); /* NUL padding */
}

Test(io_npy, malformed_shape)
{
    EXPECT_NPY1(HDR("<f4", "False", "(5)"), 20, KVC_ERR_CORRUPT);  /* an int, not a tuple */
    EXPECT_NPY1(HDR("<f4", "False", "[5]"), 20, KVC_ERR_CORRUPT);  /* a list */
    EXPECT_NPY1(HDR("<f4", "False", "5"), 20, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(-1,)"), 20, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(5.0,)"), 20, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(05,)"), 20, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(5L,)"), 20, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(5_0,)"), 200, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(,)"), 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(1 2)"), 8, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f4", "False", "(1,"), 8, KVC_ERR_CORRUPT);
    /* a value that does not fit in size_t */
    EXPECT_NPY1(HDR("|u1", "False", "(18446744073709551616,)"), 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("|u1", "False", "(99999999999999999999999,)"), 0, KVC_ERR_CORRUPT);
    /* products that overflow size_t must not wrap: 2^63 * 2 = 2^64 would wrap to 0 bytes */
    EXPECT_NPY1(HDR("|u1", "False", "(9223372036854775808, 2)"), 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("|u1", "False", "(4294967296, 4294967296, 0)"), 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f2", "False", "(9223372036854775808,)"), 0, KVC_ERR_CORRUPT);
    EXPECT_NPY1(HDR("<f8", "False", "(18446744073709551615,)"), 0, KVC_ERR_CORRUPT);
    /* a huge but representable size is simply truncated data */
    EXPECT_NPY1(HDR("|u1", "False", "(18446744073709551615,)"), 4, KVC_ERR_CORRUPT);
    /* more dimensions than a kvc_tensor_t holds */
    EXPECT_NPY1(HDR("|u1", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 1, KVC_ERR_UNSUPPORTED);
    EXPECT_NPY1(HDR("|u1", "False", "(1, 1, 1, 1, 1, 1, 1, 1)"), 1, KVC_OK);
}

Test(io_npy, unsupported_and_unknown_dtypes)
{
    EXPECT_NPY1(HDR("<f4", "True", "(2, 3)"), 24, KVC_ERR_UNSUPPORTED); /* Fortran order */
    EXPECT_NPY1(HDR(">f4", "False", "(2,)"), 8, KVC_ERR_UNSUPPORTED);   /* big-endian */
    EXPECT_NPY1(HDR(">i8", "False", "(2,)"), 16, KVC_ERR_UNSUPPORTED);
    EXPECT_NPY1(HDR(">f2", "False", "(2,)"), 4, KVC_ERR_UNSUPPORTED);
    EXPECT_NPY1(HDR(">V2", "False", "(2,)"), 4, KVC_ERR_UNSUPPORTED);
    EXPECT_NPY1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, KVC_ERR_UNSUPPORTED);
    EXPECT_NPY1(HDR("<c8", "False", "(2,)"), 16, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("|O", "False", "(2,)"), 16, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("<U3", "False", "(2,)"), 24, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("|V1", "False", "(2,)"), 2, KVC_ERR_DTYPE); /* fp8 or anything: ambiguous */
    EXPECT_NPY1(HDR("|f4", "False", "(2,)"), 8, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("=f4", "False", "(2,)"), 8, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("<f16", "False", "(2,)"), 32, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("", "False", "(2,)"), 8, KVC_ERR_DTYPE);
    EXPECT_NPY1(HDR("float32", "False", "(2,)"), 8, KVC_ERR_DTYPE);
    /* syntax errors win over meaning */
    EXPECT_NPY1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,) x", 8, KVC_ERR_CORRUPT);
}

Test(io_npy, writer_errors_leave_no_file)
{
    unsigned char data[16] = { 0 }, img[256];
    size_t shape[1] = { 4 };
    kvc_tensor_t t;
    const char *path = tmp_absent(".npy");

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F8_E4M3, 1, shape, data), KVC_OK);
    cr_assert_eq(kvc_npy_write(path, &t), KVC_ERR_DTYPE);
    cr_assert_not(exists(path));
    size_t len = 0;
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_ERR_DTYPE);

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 1, shape, data), KVC_OK);
    t.nbytes = 12; /* inconsistent with the shape */
    cr_assert_eq(kvc_npy_write(path, &t), KVC_ERR_SHAPE);
    cr_assert_not(exists(path));
    t.nbytes = 16;
    t.data = NULL;
    cr_assert_eq(kvc_npy_write(path, &t), KVC_ERR_INVALID_ARG);
    t.data = data;
    t.ndim = 9;
    cr_assert_eq(kvc_npy_write(path, &t), KVC_ERR_INVALID_ARG);
    t.ndim = 1;
    t.dtype = (kvc_dtype_t)42;
    cr_assert_eq(kvc_npy_write(path, &t), KVC_ERR_DTYPE);
    t.dtype = KVC_DTYPE_F32;
    cr_assert_eq(kvc_npy_write(path, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_write(NULL, &t), KVC_ERR_INVALID_ARG);
    cr_assert_not(exists(path));
    cr_assert_eq(kvc_npy_write("/nonexistent-dir-kvc/x.npy", &t), KVC_ERR_NOT_FOUND);

    /* too small a buffer: the size needed is reported, nothing is written */
    memset(img, 0xab, sizeof(img));
    cr_assert_eq(kvc_npy_write_mem(&t, img, 100, &len), KVC_ERR_NO_SPACE);
    cr_assert_eq(len, 128u + 16u);
    for (size_t i = 0; i < sizeof(img); i++) cr_assert_eq(img[i], 0xab);
    cr_assert_eq(kvc_npy_write_mem(&t, NULL, 0, &len), KVC_ERR_NO_SPACE);
    cr_assert_eq(len, 144u);
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), NULL), KVC_ERR_INVALID_ARG);
}

Test(io_npy, reader_errors)
{
    kvc_tensor_t t = { .ndim = 5 };
    cr_assert_eq(kvc_npy_read("/nonexistent-dir-kvc/x.npy", &t), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_npy_read("/tmp", &t), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_read(NULL, &t), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_read(kvc_test_data("kvdata/story_prompt_K.npy"), NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_view(NULL, 10, &t), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_view(NULL, 0, &t), KVC_ERR_CORRUPT);
    cr_assert_eq(t.ndim, 5, "out must be untouched on failure");
}

/* ------------------------------------------------------------------ .safetensors */

/* The reference implementation's own expected bytes (safetensors/src/tensor.rs tests). */
static const unsigned char ref_serialization[] = {
    64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34, 58,
    34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116,
    97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0, 0, 0, 128, 63,
    0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64
};
static const unsigned char ref_forced_alignment[] = {
    72, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34, 58, 34,
    70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97,
    116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 32, 32, 32, 32, 32,
    32, 32, 0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64
};
static const unsigned char ref_empty[] = { 8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32 };
static const unsigned char ref_empty_meta[] = {
    40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95, 95, 34, 58, 123, 34, 102,
    114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112, 116, 34, 125, 125, 32, 32, 32, 32, 32
};

Test(io_st, reference_vectors)
{
    float data[6] = { 0, 1, 2, 3, 4, 5 };
    unsigned char img[256];
    size_t len;
    kvc_tensor_t t;
    size_t s3[3] = { 1, 2, 3 }, s4[4] = { 1, 1, 2, 3 };

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 3, s3, data), KVC_OK);
    kvc_named_tensor_t item = { "attn.0", &t };
    cr_assert_eq(kvc_safetensors_write_mem(&item, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(len, sizeof(ref_serialization));
    cr_assert_arr_eq(img, ref_serialization, len);

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 4, s4, data), KVC_OK);
    item.name = "attn0";
    cr_assert_eq(kvc_safetensors_write_mem(&item, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(len, sizeof(ref_forced_alignment));
    cr_assert_arr_eq(img, ref_forced_alignment, len);

    cr_assert_eq(kvc_safetensors_write_mem(NULL, 0, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(len, sizeof(ref_empty));
    cr_assert_arr_eq(img, ref_empty, len);

    kvc_metadata_entry_t meta = { "framework", "pt" };
    cr_assert_eq(kvc_safetensors_write_mem(NULL, 0, &meta, 1, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(len, sizeof(ref_empty_meta));
    cr_assert_arr_eq(img, ref_empty_meta, len);

    /* and the reader takes them back */
    kvc_safetensors_t *st;
    cr_assert_eq(kvc_safetensors_open_mem(ref_serialization, sizeof(ref_serialization), &st), KVC_OK);
    cr_assert_eq(kvc_safetensors_count(st), 1u);
    kvc_tensor_t v;
    cr_assert_eq(kvc_safetensors_view(st, 0, &v), KVC_OK);
    assert_same_tensor(&v, KVC_DTYPE_F32, 3, s3, data, 24);
    kvc_safetensors_close(st);
    cr_assert_eq(kvc_safetensors_open_mem(ref_empty_meta, sizeof(ref_empty_meta), &st), KVC_OK);
    cr_assert_eq(kvc_safetensors_count(st), 0u);
    const char *value;
    cr_assert_eq(kvc_safetensors_metadata_get(st, "framework", &value), KVC_OK);
    cr_assert_str_eq(value, "pt");
    kvc_safetensors_close(st);
}

static const char *st_dtype(kvc_dtype_t d)
{
    static const char *names[KVC_DTYPE_END] = {
        [KVC_DTYPE_F16] = "F16", [KVC_DTYPE_BF16] = "BF16", [KVC_DTYPE_F32] = "F32", [KVC_DTYPE_F64] = "F64",
        [KVC_DTYPE_U8] = "U8", [KVC_DTYPE_I8] = "I8", [KVC_DTYPE_I16] = "I16", [KVC_DTYPE_I32] = "I32",
        [KVC_DTYPE_I64] = "I64", [KVC_DTYPE_U16] = "U16", [KVC_DTYPE_U32] = "U32", [KVC_DTYPE_U64] = "U64",
        [KVC_DTYPE_BOOL] = "BOOL", [KVC_DTYPE_F8_E4M3] = "F8_E4M3", [KVC_DTYPE_F8_E5M2] = "F8_E5M2",
    };
    return names[d];
}

Test(io_st, roundtrip_every_dtype_and_ndim)
{
    unsigned char data[1024], img[2048], want[2048];
    const char *path = tmp_path(".safetensors");
    for (int d = 1; d < KVC_DTYPE_END; d++) {
        for (int ndim = 0; ndim <= 4; ndim++) {
            kvc_tensor_t t, v, r;
            fill(data, sizeof(data), (unsigned)(d * 10 + ndim));
            cr_assert_eq(kvc_tensor_wrap(&t, (kvc_dtype_t)d, ndim, base_shape, data), KVC_OK);
            kvc_named_tensor_t item = { "x", &t };
            size_t len;
            cr_assert_eq(kvc_safetensors_write_mem(&item, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
            ref_st_tensor_t rt = { "x", st_dtype((kvc_dtype_t)d), ndim, base_shape, data, t.nbytes };
            size_t wlen = ref_st_image(&rt, 1, NULL, NULL, want, sizeof(want));
            cr_assert_eq(len, wlen, "%s ndim %d", st_dtype((kvc_dtype_t)d), ndim);
            cr_assert_arr_eq(img, want, len, "%s ndim %d", st_dtype((kvc_dtype_t)d), ndim);

            kvc_safetensors_t *st;
            cr_assert_eq(kvc_safetensors_open_mem(img, len, &st), KVC_OK, "%s", kvc_last_error());
            cr_assert_eq(kvc_safetensors_view(st, 0, &v), KVC_OK);
            assert_same_tensor(&v, (kvc_dtype_t)d, ndim, base_shape, data, t.nbytes);
            kvc_safetensors_info_t info;
            cr_assert_eq(kvc_safetensors_info(st, 0, &info), KVC_OK);
            cr_assert_str_eq(info.name, "x");
            cr_assert_eq(info.offset, len - t.nbytes);
            cr_assert_eq(info.offset % 8, 0u);
            kvc_safetensors_close(st);

            cr_assert_eq(kvc_safetensors_write(path, &item, 1, NULL, 0), KVC_OK, "%s", kvc_last_error());
            size_t flen;
            unsigned char *file = slurp(path, &flen);
            cr_assert_eq(flen, len);
            cr_assert_arr_eq(file, img, len);
            free(file);
            cr_assert_eq(kvc_safetensors_open(path, &st), KVC_OK, "%s", kvc_last_error());
            cr_assert_eq(kvc_safetensors_load(st, 0, &r), KVC_OK);
            assert_same_tensor(&r, (kvc_dtype_t)d, ndim, base_shape, data, t.nbytes);
            kvc_tensor_free(&r);
            cr_assert_eq(kvc_safetensors_view(st, 0, &v), KVC_ERR_UNSUPPORTED);
            kvc_safetensors_close(st);
        }
    }
}

Test(io_st, several_tensors_order_and_metadata)
{
    unsigned char a[24], b[6], c[16], img[4096], want[4096];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    fill(c, sizeof(c), 3);
    size_t sa[2] = { 2, 3 }, sb[1] = { 6 }, sc[2] = { 2, 4 }, se[2] = { 0, 5 };
    kvc_tensor_t ta, tb, tc, tz, te;
    cr_assert_eq(kvc_tensor_wrap(&ta, KVC_DTYPE_F32, 2, sa, a), KVC_OK);   /* 24 bytes */
    cr_assert_eq(kvc_tensor_wrap(&tb, KVC_DTYPE_U8, 1, sb, b), KVC_OK);    /* 6 bytes */
    cr_assert_eq(kvc_tensor_wrap(&tc, KVC_DTYPE_F16, 2, sc, c), KVC_OK);   /* 16 bytes */
    cr_assert_eq(kvc_tensor_wrap(&tz, KVC_DTYPE_F16, 2, sc, c + 0), KVC_OK);
    cr_assert_eq(kvc_tensor_wrap(&te, KVC_DTYPE_I64, 2, se, NULL), KVC_OK); /* empty */
    kvc_named_tensor_t items[5] = { { "bytes", &tb }, { "zeta", &tz }, { "alpha", &ta }, { "half", &tc }, { "none", &te } };
    kvc_metadata_entry_t meta[2] = { { "format", "kv" }, { "note", "two entries" } };
    size_t len;
    cr_assert_eq(kvc_safetensors_write_mem(items, 5, meta, 2, img, sizeof(img), &len), KVC_OK, "%s", kvc_last_error());

    /* The reference order: I64 > F32 > F16 ("half" < "zeta") > U8. With one metadata entry the
     * bytes must equal the oracle's; with two, check the header text around it. */
    ref_st_tensor_t order[5] = {
        { "none", "I64", 2, se, NULL, 0 }, { "alpha", "F32", 2, sa, a, 24 }, { "half", "F16", 2, sc, c, 16 },
        { "zeta", "F16", 2, sc, c, 16 },  { "bytes", "U8", 1, sb, b, 6 },
    };
    size_t one_len;
    cr_assert_eq(kvc_safetensors_write_mem(items, 5, meta, 1, img, sizeof(img), &one_len), KVC_OK);
    size_t wlen = ref_st_image(order, 5, "format", "kv", want, sizeof(want));
    cr_assert_eq(one_len, wlen);
    cr_assert_arr_eq(img, want, wlen);

    cr_assert_eq(kvc_safetensors_write_mem(items, 5, meta, 2, img, sizeof(img), &len), KVC_OK);
    const char *head = "{\"__metadata__\":{\"format\":\"kv\",\"note\":\"two entries\"},\"none\":";
    cr_assert(memmem(img, len, head, strlen(head)) != NULL);
    kvc_safetensors_t *st;
    cr_assert_eq(kvc_safetensors_open_mem(img, len, &st), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_safetensors_count(st), 5u);
    cr_assert_eq(kvc_safetensors_metadata_count(st), 2u);
    const char *k, *v;
    cr_assert_eq(kvc_safetensors_metadata_at(st, 1, &k, &v), KVC_OK);
    cr_assert_str_eq(k, "note");
    cr_assert_str_eq(v, "two entries");
    cr_assert_eq(kvc_safetensors_metadata_at(st, 2, &k, &v), KVC_ERR_OUT_OF_RANGE);
    cr_assert_eq(kvc_safetensors_metadata_get(st, "absent", &v), KVC_ERR_NOT_FOUND);
    /* file order: "none" (empty) and "alpha" both start at 0; then half, zeta, bytes */
    const char *file_order[5] = { "none", "alpha", "half", "zeta", "bytes" };
    for (size_t i = 0; i < 5; i++) {
        kvc_safetensors_info_t info;
        cr_assert_eq(kvc_safetensors_info(st, i, &info), KVC_OK);
        cr_assert_str_eq(info.name, file_order[i]);
        size_t idx;
        cr_assert_eq(kvc_safetensors_find(st, file_order[i], &idx), KVC_OK);
        cr_assert_eq(idx, i);
    }
    for (size_t i = 0; i < 5; i++) {
        size_t idx;
        cr_assert_eq(kvc_safetensors_find(st, items[i].name, &idx), KVC_OK);
        kvc_tensor_t r;
        cr_assert_eq(kvc_safetensors_load(st, idx, &r), KVC_OK);
        assert_same_tensor(&r, items[i].tensor->dtype, items[i].tensor->ndim, items[i].tensor->shape,
                           items[i].tensor->data, items[i].tensor->nbytes);
        kvc_tensor_free(&r);
    }
    size_t idx;
    cr_assert_eq(kvc_safetensors_find(st, "missing", &idx), KVC_ERR_NOT_FOUND);
    kvc_safetensors_info_t info;
    cr_assert_eq(kvc_safetensors_info(st, 5, &info), KVC_ERR_OUT_OF_RANGE);
    unsigned char small[8];
    cr_assert_eq(kvc_safetensors_find(st, "alpha", &idx), KVC_OK);
    cr_assert_eq(kvc_safetensors_read(st, idx, small, sizeof(small)), KVC_ERR_NO_SPACE);
    unsigned char got[24];
    cr_assert_eq(kvc_safetensors_read(st, idx, got, sizeof(got)), KVC_OK);
    cr_assert_arr_eq(got, a, 24);
    kvc_safetensors_close(st);
    kvc_safetensors_close(NULL);
}

Test(io_st, names_with_escapes)
{
    unsigned char d[2] = { 7, 9 }, img[1024];
    size_t s1[1] = { 2 };
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_U8, 1, s1, d), KVC_OK);
    const char *names[] = { "q\"uote", "back\\slash", "new\nline\ttab", "ctl\x01\x1f", "caf\xc3\xa9", "emoji \xf0\x9f\x98\x80", "sl/ash" };
    const char *json[] = { "\"q\\\"uote\"", "\"back\\\\slash\"", "\"new\\nline\\ttab\"", "\"ctl\\u0001\\u001f\"",
                           "\"caf\xc3\xa9\"", "\"emoji \xf0\x9f\x98\x80\"", "\"sl/ash\"" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        kvc_named_tensor_t item = { names[i], &t };
        size_t len;
        cr_assert_eq(kvc_safetensors_write_mem(&item, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
        cr_assert(memmem(img, len, json[i], strlen(json[i])) != NULL, "%s not escaped as serde_json does", json[i]);
        kvc_safetensors_t *st;
        cr_assert_eq(kvc_safetensors_open_mem(img, len, &st), KVC_OK, "%s", kvc_last_error());
        size_t idx;
        cr_assert_eq(kvc_safetensors_find(st, names[i], &idx), KVC_OK);
        kvc_safetensors_close(st);
    }
}

/* ---- malformed safetensors images */

/* 8-byte length of the JSON, the JSON, ndata data bytes. */
static size_t make_st_n(const char *json, size_t n, size_t ndata)
{
    for (int i = 0; i < 8; i++) imgbuf[i] = (unsigned char)((unsigned long long)n >> (8 * i));
    memcpy(imgbuf + 8, json, n);
    fill(imgbuf + 8 + n, ndata, 5);
    return 8 + n + ndata;
}

static size_t make_st(const char *json, size_t ndata) { return make_st_n(json, strlen(json), ndata); }

static kvc_status_t st_status(const void *img, size_t len)
{
    kvc_safetensors_t *a = NULL, *b = NULL;
    kvc_status_t sa = kvc_safetensors_open_mem(img, len, &a);
    char amsg[512];
    snprintf(amsg, sizeof(amsg), "%s", kvc_last_error());
    if (sa == KVC_OK) {
        /* every view lies inside the buffer */
        for (size_t i = 0; i < kvc_safetensors_count(a); i++) {
            kvc_safetensors_info_t info;
            cr_assert_eq(kvc_safetensors_info(a, i, &info), KVC_OK);
            cr_assert(info.offset <= len && info.nbytes <= len - info.offset);
        }
        kvc_safetensors_close(a);
    }
    const char *path = tmp_path(".safetensors");
    write_file(path, img, len);
    kvc_status_t sb = kvc_safetensors_open(path, &b);
    if (sb == KVC_OK) kvc_safetensors_close(b);
    unlink(path);
    ntmp--;
    cr_assert_eq(sa, sb, "memory reader: %s (%s), file reader: %s (%s)", kvc_status_name(sa), amsg,
                 kvc_status_name(sb), kvc_last_error());
    return sa;
}

#define EXPECT_ST_IMG(img, len, status)                                                                       \
    do {                                                                                                      \
        kvc_status_t got_ = st_status((img), (len));                                                          \
        cr_assert_eq(got_, (status), "line %d: expected %s, got %s: %s", __LINE__, kvc_status_name(status),   \
                     kvc_status_name(got_), kvc_last_error());                                                \
    } while (0)
#define EXPECT_ST(json, ndata, status) EXPECT_ST_IMG(imgbuf, make_st((json), (ndata)), status)
#define T1(body) "{\"t\":{" body "}}"

Test(io_st, malformed_container)
{
    EXPECT_ST_IMG("", 0, KVC_ERR_CORRUPT);                /* empty file */
    EXPECT_ST_IMG("\x02\0\0\0\0\0\0", 7, KVC_ERR_CORRUPT); /* no full length field */
    /* header length past the end */
    size_t len = make_st("{}", 0);
    imgbuf[0] = 200;
    EXPECT_ST_IMG(imgbuf, len, KVC_ERR_CORRUPT);
    /* over the 100 MB limit, and values that would wrap 8 + N */
    uint64_t bad_n[3] = { 100000001ull, 1ull << 63, UINT64_MAX };
    for (int i = 0; i < 3; i++) {
        len = make_st("{}", 0);
        for (int b = 0; b < 8; b++) imgbuf[b] = (unsigned char)(bad_n[i] >> (8 * b));
        EXPECT_ST_IMG(imgbuf, len, KVC_ERR_CORRUPT);
    }
    cr_assert(strstr(kvc_last_error(), "limit"), "%s", kvc_last_error());
    /* empty archive, padded header, no data: fine */
    EXPECT_ST("{}", 0, KVC_OK);
    EXPECT_ST("  {}      ", 0, KVC_OK);
    EXPECT_ST("{\"__metadata__\":null}", 0, KVC_OK);
    /* 0-length tensor data */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]"), 0, KVC_OK);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[3,0,2],\"data_offsets\":[0,0]"), 0, KVC_OK);
    /* trailing data after the last tensor, and data with no tensor at all */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"), 5, KVC_ERR_CORRUPT);
    EXPECT_ST("{}", 1, KVC_ERR_CORRUPT);
}

Test(io_st, malformed_json)
{
    EXPECT_ST("", 0, KVC_ERR_CORRUPT);
    EXPECT_ST("   ", 0, KVC_ERR_CORRUPT);
    EXPECT_ST("[]", 0, KVC_ERR_CORRUPT);                       /* not an object */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32}}", 0, KVC_ERR_CORRUPT); /* unterminated string */
    EXPECT_ST("{\"t", 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\" \"F32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT); /* missing colon */
    EXPECT_ST("{\"t\" {}}", 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "x", 4, KVC_ERR_CORRUPT); /* trailing garbage */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "}", 4, KVC_ERR_CORRUPT);
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, KVC_ERR_CORRUPT); /* trailing comma */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",,\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST("{'t':{}}", 0, KVC_ERR_CORRUPT); /* single quotes */
    EXPECT_ST("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, KVC_ERR_CORRUPT); /* unclosed */
    static const char with_nul[] = T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]") "\0";
    EXPECT_ST_IMG(imgbuf, make_st_n(with_nul, sizeof(with_nul), 4), KVC_ERR_CORRUPT); /* NUL padding */
    EXPECT_ST("{\"t\":[]}", 0, KVC_ERR_CORRUPT);       /* an entry that is not an object */
    EXPECT_ST("{\"t\":\"x\"}", 0, KVC_ERR_CORRUPT);
    EXPECT_ST("{\"__metadata__\":[]}", 0, KVC_ERR_CORRUPT);
    EXPECT_ST("{\"__metadata__\":{\"a\":1}}", 0, KVC_ERR_CORRUPT);  /* metadata values are strings */
    EXPECT_ST("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, KVC_ERR_CORRUPT); /* duplicate key */
    EXPECT_ST("{\"__metadata__\":{},\"__metadata__\":{}}", 0, KVC_ERR_CORRUPT);
    /* strings */
    EXPECT_ST("{\"a\x01\":{}}", 0, KVC_ERR_CORRUPT);     /* raw control character */
    EXPECT_ST("{\"a\\x\":{}}", 0, KVC_ERR_CORRUPT);      /* unknown escape */
    EXPECT_ST("{\"a\\u12\":{}}", 0, KVC_ERR_CORRUPT);    /* short \u */
    EXPECT_ST("{\"a\\ud800\":{}}", 0, KVC_ERR_CORRUPT);  /* lone high surrogate */
    EXPECT_ST("{\"a\\udc00\":{}}", 0, KVC_ERR_CORRUPT);  /* lone low surrogate */
    EXPECT_ST("{\"a\\ud800\\u0041\":{}}", 0, KVC_ERR_CORRUPT);
    EXPECT_ST("{\"a\xff\":{}}", 0, KVC_ERR_CORRUPT);     /* invalid UTF-8 */
    EXPECT_ST("{\"a\xc0\xaf\":{}}", 0, KVC_ERR_CORRUPT); /* overlong */
    EXPECT_ST("{\"a\xed\xa0\x80\":{}}", 0, KVC_ERR_CORRUPT); /* UTF-8 surrogate */
    EXPECT_ST("{\"a\xe2\x82\":{}}", 0, KVC_ERR_CORRUPT);  /* cut sequence */
    /* numbers */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[+1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    /* schema */
    EXPECT_ST(T1("\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);   /* no dtype */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT); /* no shape */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1]"), 4, KVC_ERR_CORRUPT);         /* no offsets */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    /* unknown fields are skipped, as the reference does, but must be valid JSON */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"x\":{\"y\":[1,-2.5e+3,true,false,null,\"s\",{}]},\"shape\":[1],\"data_offsets\":[0,4]"), 4,
              KVC_OK);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"x\":[1.],\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"x\":tru,\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
}

Test(io_st, nesting_too_deep)
{
    static char json[4096];
    char *p = json;
    p += sprintf(p, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"deep\":");
    for (int i = 0; i < 200; i++) *p++ = '[';
    for (int i = 0; i < 200; i++) *p++ = ']';
    strcpy(p, "}}");
    EXPECT_ST(json, 4, KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "too deep"), "%s", kvc_last_error());
    /* 50 levels are fine */
    p = json + strlen("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"deep\":");
    for (int i = 0; i < 50; i++) *p++ = '[';
    for (int i = 0; i < 50; i++) *p++ = ']';
    strcpy(p, "}}");
    EXPECT_ST(json, 4, KVC_OK);
}

Test(io_st, malformed_offsets_and_sizes)
{
    /* offsets past the end */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"), 8, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[18446744073709551612,18446744073709551615]"), 8,
              KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,18446744073709551616]"), 8, KVC_ERR_CORRUPT);
    /* overlapping offsets */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "overlap"), "%s", kvc_last_error());
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, KVC_ERR_CORRUPT);
    /* a gap between tensors */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, KVC_ERR_CORRUPT);
    /* out of order in the header is fine (the reference sorts by offset) */
    EXPECT_ST("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, KVC_OK);
    /* begin after end */
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]"), 4, KVC_ERR_CORRUPT);
    /* size mismatch */
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 4, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]"), 8, KVC_ERR_CORRUPT);
    /* duplicate names */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, KVC_ERR_CORRUPT);
    cr_assert(strstr(kvc_last_error(), "duplicate"), "%s", kvc_last_error());
    /* duplicate names spelled differently (an escape) */
    EXPECT_ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, KVC_ERR_CORRUPT);
    /* negative and huge shapes: products that overflow must not wrap (2^32 * 2^32 = 2^64 -> 0) */
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"F16\",\"shape\":[9223372036854775808],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,0]"), 0, KVC_ERR_CORRUPT);
}

Test(io_st, wrong_dtype_strings_and_unsupported)
{
    EXPECT_ST(T1("\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_DTYPE);
    EXPECT_ST(T1("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_DTYPE);
    EXPECT_ST(T1("\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_DTYPE);
    EXPECT_ST(T1("\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]"), 8, KVC_ERR_DTYPE);
    EXPECT_ST(T1("\"dtype\":\"F32 \",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_DTYPE);
    EXPECT_ST(T1("\"dtype\":\"F3\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, KVC_ERR_DTYPE);
    /* a syntax error anywhere wins over an unknown dtype */
    EXPECT_ST("{\"t\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]} x", 4, KVC_ERR_CORRUPT);
    /* more than 8 dimensions */
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 1, KVC_ERR_UNSUPPORTED);
    EXPECT_ST(T1("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 1, KVC_OK);
    /* names holding NUL cannot be C strings */
    EXPECT_ST("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, KVC_ERR_UNSUPPORTED);
    EXPECT_ST("{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0, KVC_ERR_UNSUPPORTED);
    /* every dtype string the reference knows */
    for (int d = 1; d < KVC_DTYPE_END; d++) {
        char json[256];
        snprintf(json, sizeof(json), T1("\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%zu]"),
                 st_dtype((kvc_dtype_t)d), 3 * kvc_dtype_size((kvc_dtype_t)d));
        EXPECT_ST(json, 3 * kvc_dtype_size((kvc_dtype_t)d), KVC_OK);
    }
}

Test(io_st, writer_errors_leave_no_file)
{
    unsigned char d[4] = { 1, 2, 3, 4 }, img[512];
    size_t s1[1] = { 4 };
    kvc_tensor_t t, bad;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_U8, 1, s1, d), KVC_OK);
    const char *path = tmp_absent(".safetensors");
    kvc_named_tensor_t dup[2] = { { "a", &t }, { "a", &t } };
    cr_assert_eq(kvc_safetensors_write(path, dup, 2, NULL, 0), KVC_ERR_INVALID_ARG);
    kvc_named_tensor_t reserved = { "__metadata__", &t };
    cr_assert_eq(kvc_safetensors_write(path, &reserved, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    kvc_named_tensor_t badutf = { "a\xff", &t };
    cr_assert_eq(kvc_safetensors_write(path, &badutf, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    kvc_named_tensor_t noname = { NULL, &t };
    cr_assert_eq(kvc_safetensors_write(path, &noname, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    kvc_named_tensor_t notensor = { "a", NULL };
    cr_assert_eq(kvc_safetensors_write(path, &notensor, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    bad = t;
    bad.nbytes = 3;
    kvc_named_tensor_t badsize = { "a", &bad };
    cr_assert_eq(kvc_safetensors_write(path, &badsize, 1, NULL, 0), KVC_ERR_SHAPE);
    bad = t;
    bad.dtype = KVC_DTYPE_INVALID;
    cr_assert_eq(kvc_safetensors_write(path, &badsize, 1, NULL, 0), KVC_ERR_DTYPE);
    kvc_named_tensor_t ok = { "a", &t };
    kvc_metadata_entry_t dupmeta[2] = { { "k", "1" }, { "k", "2" } };
    cr_assert_eq(kvc_safetensors_write(path, &ok, 1, dupmeta, 2), KVC_ERR_INVALID_ARG);
    kvc_metadata_entry_t nullmeta = { "k", NULL };
    cr_assert_eq(kvc_safetensors_write(path, &ok, 1, &nullmeta, 1), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_safetensors_write(path, NULL, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_safetensors_write(path, &ok, 1, NULL, 1), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_safetensors_write(NULL, &ok, 1, NULL, 0), KVC_ERR_INVALID_ARG);
    cr_assert_not(exists(path), "a rejected write must not create the file");

    size_t len = 0;
    memset(img, 0xcd, sizeof(img));
    cr_assert_eq(kvc_safetensors_write_mem(&ok, 1, NULL, 0, img, 20, &len), KVC_ERR_NO_SPACE);
    cr_assert_gt(len, 20u);
    for (size_t i = 0; i < sizeof(img); i++) cr_assert_eq(img[i], 0xcd);
    cr_assert_eq(kvc_safetensors_write_mem(&ok, 1, NULL, 0, img, sizeof(img), NULL), KVC_ERR_INVALID_ARG);

    kvc_safetensors_t *st = (kvc_safetensors_t *)0x1;
    cr_assert_eq(kvc_safetensors_open("/nonexistent-dir-kvc/x.safetensors", &st), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_safetensors_open_mem(NULL, 8, &st), KVC_ERR_INVALID_ARG);
    cr_assert_eq(st, (kvc_safetensors_t *)0x1, "out must be untouched on failure");
    cr_assert_eq(kvc_safetensors_open_mem(img, 8, NULL), KVC_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ KV caches */

static const size_t NL = 5, T = 512, NH = 4, HS = 8;

static kvc_tensor_t load_real_pair(kvc_kvcache_dims_t *dims)
{
    kvc_tensor_t kv;
    char k_path[4096], v_path[4096]; /* kvc_test_data returns a static buffer */
    snprintf(k_path, sizeof(k_path), "%s", kvc_test_data("kvdata/story_prompt_K.npy"));
    snprintf(v_path, sizeof(v_path), "%s", kvc_test_data("kvdata/story_prompt_V.npy"));
    cr_assert_eq(kvc_kvcache_load_pair(k_path, v_path, NULL, &kv, dims), KVC_OK, "%s", kvc_last_error());
    return kv;
}

static void assert_kv(const kvc_tensor_t *kv, const kvc_kvcache_dims_t *dims, const kvc_tensor_t *want, size_t nh,
                      size_t hs)
{
    cr_assert_eq(kv->dtype, want->dtype);
    cr_assert_eq(kv->ndim, 4);
    size_t shape[4] = { 2, NL, T, NH * HS };
    for (int i = 0; i < 4; i++) cr_assert_eq(kv->shape[i], shape[i], "dim %d", i);
    cr_assert_eq(kv->nbytes, want->nbytes);
    cr_assert_arr_eq(kv->data, want->data, want->nbytes);
    cr_assert(kv->owns_data);
    cr_assert_eq(dims->num_layers, NL);
    cr_assert_eq(dims->num_tokens, T);
    cr_assert_eq(dims->hidden, NH * HS);
    cr_assert_eq(dims->num_heads, nh);
    cr_assert_eq(dims->head_size, hs);
}

Test(io_kv, load_real_npy_pair)
{
    kvc_kvcache_dims_t dims;
    kvc_tensor_t kv = load_real_pair(&dims);
    kvc_tensor_t want = kv;
    assert_kv(&kv, &dims, &want, NH, HS);
    /* kv[0] is the K file's data, kv[1] the V file's (independent loader) */
    test_npy_t k = test_npy_load(kvc_test_data("kvdata/story_prompt_K.npy"));
    test_npy_t v = test_npy_load(kvc_test_data("kvdata/story_prompt_V.npy"));
    size_t half = kv.nbytes / 2;
    cr_assert_eq(k.count * k.itemsize, half);
    cr_assert_arr_eq(kv.data, k.data, half);
    cr_assert_arr_eq((char *)kv.data + half, v.data, half);
    cr_assert_eq(((uint16_t *)kv.data)[half / 2], 0xb63f, "first V element");
    test_npy_free(&k);
    test_npy_free(&v);
    kvc_tensor_free(&kv);
}

Test(io_kv, save_load_every_form)
{
    kvc_kvcache_dims_t dims, d2;
    kvc_tensor_t kv = load_real_pair(&dims), got;
    kvc_kvcache_io_params_t heads = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = NH };
    kvc_kvcache_io_params_t hsize = { .field_mask = KVC_KVCACHE_PARAM_HEAD_SIZE, .head_size = HS };
    kvc_kvcache_io_params_t split = { .field_mask = KVC_KVCACHE_PARAM_FORM | KVC_KVCACHE_PARAM_NUM_HEADS,
                                      .form = KVC_KVCACHE_SPLIT, .num_heads = NH };

    /* fused .npy: [2, NL, T, D]; NH is unknown unless the caller says */
    const char *npy = tmp_path(".npy");
    cr_assert_eq(kvc_kvcache_save(npy, &kv, NULL), KVC_OK, "%s", kvc_last_error());
    kvc_tensor_t raw;
    cr_assert_eq(kvc_npy_read(npy, &raw), KVC_OK);
    cr_assert_eq(raw.ndim, 4);
    cr_assert_eq(raw.shape[3], NH * HS);
    kvc_tensor_free(&raw);
    cr_assert_eq(kvc_kvcache_load(npy, NULL, &got, &d2), KVC_OK, "%s", kvc_last_error());
    assert_kv(&got, &d2, &kv, 0, 0);
    kvc_tensor_free(&got);
    cr_assert_eq(kvc_kvcache_load(npy, &heads, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);
    cr_assert_eq(kvc_kvcache_load(npy, &hsize, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);

    /* fused .safetensors: "kv" plus kvcore's NH/HS metadata */
    const char *sft = tmp_path(".safetensors");
    cr_assert_eq(kvc_kvcache_save(sft, &kv, &heads), KVC_OK, "%s", kvc_last_error());
    kvc_safetensors_t *st;
    cr_assert_eq(kvc_safetensors_open(sft, &st), KVC_OK);
    size_t idx;
    cr_assert_eq(kvc_safetensors_find(st, "kv", &idx), KVC_OK);
    const char *val;
    cr_assert_eq(kvc_safetensors_metadata_get(st, "kvcore.num_heads", &val), KVC_OK);
    cr_assert_str_eq(val, "4");
    kvc_safetensors_close(st);
    cr_assert_eq(kvc_kvcache_load(sft, NULL, &got, &d2), KVC_OK, "%s", kvc_last_error());
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);
    /* without NH known, no metadata is written */
    cr_assert_eq(kvc_kvcache_save(sft, &kv, NULL), KVC_OK);
    cr_assert_eq(kvc_kvcache_load(sft, NULL, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, 0, 0);
    kvc_tensor_free(&got);

    /* split .safetensors: "k" and "v", each [NL, T, NH, HS] */
    cr_assert_eq(kvc_kvcache_save(sft, &kv, &split), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_safetensors_open(sft, &st), KVC_OK);
    cr_assert_eq(kvc_safetensors_count(st), 2u);
    kvc_safetensors_info_t info;
    cr_assert_eq(kvc_safetensors_find(st, "v", &idx), KVC_OK);
    cr_assert_eq(kvc_safetensors_info(st, idx, &info), KVC_OK);
    cr_assert_eq(info.ndim, 4);
    cr_assert_eq(info.shape[2], NH);
    cr_assert_eq(info.shape[3], HS);
    kvc_safetensors_close(st);
    cr_assert_eq(kvc_kvcache_load(sft, NULL, &got, &d2), KVC_OK, "%s", kvc_last_error());
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);

    /* pairs of files, .npy and .safetensors */
    const char *kn = tmp_path(".npy"), *vn = tmp_path(".npy");
    cr_assert_eq(kvc_kvcache_save_pair(kn, vn, &kv, &heads), KVC_OK, "%s", kvc_last_error());
    size_t flen;
    unsigned char *kfile = slurp(kn, &flen), *orig;
    size_t olen;
    orig = slurp(kvc_test_data("kvdata/story_prompt_K.npy"), &olen);
    cr_assert_eq(flen, olen);
    cr_assert_arr_eq(kfile, orig, olen, "saved K must equal numpy's file byte for byte");
    free(kfile);
    free(orig);
    cr_assert_eq(kvc_kvcache_load_pair(kn, vn, NULL, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);
    const char *ks = tmp_path(".safetensors"), *vs = tmp_path(".safetensors");
    cr_assert_eq(kvc_kvcache_save_pair(ks, vs, &kv, &hsize), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_kvcache_load_pair(ks, vs, NULL, &got, &d2), KVC_OK, "%s", kvc_last_error());
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);
    /* mixed formats in one pair */
    cr_assert_eq(kvc_kvcache_load_pair(kn, vs, NULL, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);

    /* 5-D input [2, NL, T, NH, HS] carries NH and HS itself */
    kvc_tensor_t kv5 = kv;
    kv5.ndim = 5;
    kv5.shape[3] = NH;
    kv5.shape[4] = HS;
    kv5.owns_data = 0;
    cr_assert_eq(kvc_kvcache_save(sft, &kv5, NULL), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(kvc_kvcache_load(sft, NULL, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);
    /* a 5-D .npy loads too */
    cr_assert_eq(kvc_npy_write(npy, &kv5), KVC_OK);
    cr_assert_eq(kvc_kvcache_load(npy, NULL, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, NH, HS);
    kvc_tensor_free(&got);

    /* explicit format overrides the extension */
    const char *noext = tmp_path(".bin");
    kvc_kvcache_io_params_t asnpy = { .field_mask = KVC_KVCACHE_PARAM_FORMAT, .format = KVC_FILE_NPY };
    cr_assert_eq(kvc_kvcache_save(noext, &kv, &asnpy), KVC_OK);
    cr_assert_eq(kvc_kvcache_load(noext, &asnpy, &got, &d2), KVC_OK);
    assert_kv(&got, &d2, &kv, 0, 0);
    kvc_tensor_free(&got);
    kvc_tensor_free(&kv);
}

/* safetensors files with K and V under other names, or a single tensor. */
Test(io_kv, safetensors_naming)
{
    unsigned char kd[2 * 3 * 2 * 4 * 2], vd[sizeof(kd)], img[4096];
    fill(kd, sizeof(kd), 1);
    fill(vd, sizeof(vd), 2);
    size_t s4[4] = { 2, 3, 2, 4 };
    kvc_tensor_t k, v, got;
    kvc_kvcache_dims_t dims;
    cr_assert_eq(kvc_tensor_wrap(&k, KVC_DTYPE_BF16, 4, s4, kd), KVC_OK);
    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_BF16, 4, s4, vd), KVC_OK);
    kvc_named_tensor_t kvnames[2] = { { "value", &v }, { "key", &k } };
    size_t len;
    cr_assert_eq(kvc_safetensors_write_mem(kvnames, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(got.dtype, KVC_DTYPE_BF16);
    cr_assert_eq(got.shape[3], 8u);
    cr_assert_eq(dims.num_heads, 2u);
    cr_assert_eq(dims.head_size, 4u);
    cr_assert_arr_eq(got.data, kd, sizeof(kd));
    cr_assert_arr_eq((char *)got.data + sizeof(kd), vd, sizeof(vd));
    kvc_tensor_free(&got);

    /* a single tensor of any other name, fused 4-D */
    size_t f4[4] = { 2, 2, 3, 4 };
    kvc_tensor_t f;
    cr_assert_eq(kvc_tensor_wrap(&f, KVC_DTYPE_BF16, 4, f4, kd), KVC_OK);
    kvc_named_tensor_t one = { "past_key_values", &f };
    cr_assert_eq(kvc_safetensors_write_mem(&one, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_OK, "%s", kvc_last_error());
    cr_assert_eq(dims.num_layers, 2u);
    cr_assert_eq(dims.num_tokens, 3u);
    cr_assert_eq(dims.hidden, 4u);
    cr_assert_eq(dims.num_heads, 0u);
    cr_assert_arr_eq(got.data, kd, sizeof(kd));
    kvc_tensor_free(&got);

    /* "kv" wins over k/v */
    kvc_named_tensor_t both[3] = { { "k", &k }, { "v", &v }, { "kv", &f } };
    cr_assert_eq(kvc_safetensors_write_mem(both, 3, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_OK);
    cr_assert_eq(dims.num_tokens, 3u);
    cr_assert_eq(dims.num_heads, 0u, "loaded the fused tensor, not k/v");
    kvc_tensor_free(&got);

    /* a lone "k" is not a KV cache; nor are two unrelated tensors */
    kvc_named_tensor_t lone = { "k", &k };
    cr_assert_eq(kvc_safetensors_write_mem(&lone, 1, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_NOT_FOUND);
    kvc_named_tensor_t other[2] = { { "a", &k }, { "b", &v } };
    cr_assert_eq(kvc_safetensors_write_mem(other, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_NOT_FOUND);
    kvc_named_tensor_t mixed[2] = { { "k", &k }, { "value", &v } };
    cr_assert_eq(kvc_safetensors_write_mem(mixed, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_NOT_FOUND);
}

Test(io_kv, mismatched_k_and_v)
{
    unsigned char kd[2 * 3 * 2 * 4 * 4] = { 0 }, vd[sizeof(kd)] = { 0 }, img[4096];
    size_t s4[4] = { 2, 3, 2, 4 }, s4b[4] = { 2, 3, 4, 2 }, s3[3] = { 2, 3, 8 };
    kvc_tensor_t k, v, got = { .ndim = 9 };
    kvc_kvcache_dims_t dims;
    size_t len;
    cr_assert_eq(kvc_tensor_wrap(&k, KVC_DTYPE_F16, 4, s4, kd), KVC_OK);

    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_BF16, 4, s4, vd), KVC_OK);
    kvc_named_tensor_t pair[2] = { { "k", &k }, { "v", &v } };
    cr_assert_eq(kvc_safetensors_write_mem(pair, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_DTYPE);

    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_F16, 4, s4b, vd), KVC_OK);
    cr_assert_eq(kvc_safetensors_write_mem(pair, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_SHAPE);

    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_F16, 3, s3, vd), KVC_OK);
    cr_assert_eq(kvc_safetensors_write_mem(pair, 2, NULL, 0, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_SHAPE);

    /* the same through a pair of .npy files */
    const char *kp = tmp_path(".npy"), *vp = tmp_path(".npy");
    cr_assert_eq(kvc_npy_write(kp, &k), KVC_OK);
    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_F32, 4, s4, vd), KVC_OK);
    cr_assert_eq(kvc_npy_write(vp, &v), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_pair(kp, vp, NULL, &got, &dims), KVC_ERR_DTYPE);
    cr_assert_eq(kvc_tensor_wrap(&v, KVC_DTYPE_F16, 4, s4b, vd), KVC_OK);
    cr_assert_eq(kvc_npy_write(vp, &v), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_pair(kp, vp, NULL, &got, &dims), KVC_ERR_SHAPE);
    /* hints that disagree with the files */
    kvc_kvcache_io_params_t p = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = 3 };
    cr_assert_eq(kvc_kvcache_load_pair(kp, kp, &p, &got, &dims), KVC_ERR_SHAPE);
    cr_assert_eq(kvc_kvcache_load_pair(kp, kp, NULL, &got, &dims), KVC_OK);
    kvc_tensor_free(&got);
    got.ndim = 9;
    /* a pair file with several tensors */
    const char *multi = tmp_path(".safetensors");
    cr_assert_eq(kvc_safetensors_write(multi, pair, 2, NULL, 0), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_pair(multi, kp, NULL, &got, &dims), KVC_ERR_NOT_FOUND);
    cr_assert_eq(kvc_kvcache_load_pair(kp, "/nonexistent-dir-kvc/v.npy", NULL, &got, &dims), KVC_ERR_NOT_FOUND);
    cr_assert_eq(got.ndim, 9, "out must be untouched on failure");
}

Test(io_kv, fused_shape_and_hint_errors)
{
    unsigned char d[3 * 2 * 2 * 6 * 2] = { 0 }, img[4096];
    kvc_tensor_t t, got;
    kvc_kvcache_dims_t dims;
    size_t len;
    size_t s_lead3[4] = { 3, 2, 2, 6 }, s3d[3] = { 2, 2, 12 }, s4[4] = { 2, 2, 3, 6 }, s5[5] = { 2, 2, 3, 2, 3 };

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 4, s_lead3, d), KVC_OK);
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_SHAPE);
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 3, s3d, d), KVC_OK);
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_SHAPE);

    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 4, s4, d), KVC_OK);
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
    kvc_kvcache_io_params_t p = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = 4 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_SHAPE); /* 6 % 4 */
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_HEAD_SIZE, .head_size = 4 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_SHAPE);
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS | KVC_KVCACHE_PARAM_HEAD_SIZE,
                                   .num_heads = 2, .head_size = 2 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_SHAPE); /* 2 x 2 != 6 */
    p.head_size = 3;
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_OK);
    cr_assert_eq(dims.num_heads, 2u);
    kvc_tensor_free(&got);

    /* 5-D against a disagreeing hint */
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 5, s5, d), KVC_OK);
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = 3 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_SHAPE);

    /* kvcore metadata against a disagreeing hint, and malformed metadata */
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 4, s4, d), KVC_OK);
    kvc_named_tensor_t item = { "kv", &t };
    kvc_metadata_entry_t meta = { "kvcore.num_heads", "2" };
    cr_assert_eq(kvc_safetensors_write_mem(&item, 1, &meta, 1, img, sizeof(img), &len), KVC_OK);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_SHAPE);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_OK);
    cr_assert_eq(dims.head_size, 3u);
    kvc_tensor_free(&got);
    const char *badvals[] = { "", "0", "x", "2x", "-2", "99999999999999999999999" };
    for (size_t i = 0; i < sizeof(badvals) / sizeof(badvals[0]); i++) {
        meta.value = badvals[i];
        cr_assert_eq(kvc_safetensors_write_mem(&item, 1, &meta, 1, img, sizeof(img), &len), KVC_OK);
        cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, &got, &dims), KVC_ERR_CORRUPT, "\"%s\"", badvals[i]);
    }

    /* bad parameters */
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = 0 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_INVALID_ARG);
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_FORMAT, .format = (kvc_file_format_t)7 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_INVALID_ARG);
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_FORM, .form = (kvc_kvcache_form_t)7 };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_kvcache_load_mem(img, len, NULL, NULL, &dims), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_kvcache_load_mem(NULL, 5, NULL, &got, &dims), KVC_ERR_INVALID_ARG);
    /* a file that is neither format */
    cr_assert_eq(kvc_kvcache_load_mem("hello, world", 12, NULL, &got, &dims), KVC_ERR_CORRUPT);
    /* a forced format that does not match the bytes */
    p = (kvc_kvcache_io_params_t){ .field_mask = KVC_KVCACHE_PARAM_FORMAT, .format = KVC_FILE_NPY };
    cr_assert_eq(kvc_kvcache_load_mem(img, len, &p, &got, &dims), KVC_ERR_CORRUPT);
}

Test(io_kv, save_errors_leave_no_file)
{
    unsigned char d[2 * 2 * 3 * 6 * 2] = { 0 };
    size_t s4[4] = { 2, 2, 3, 6 }, s_lead3[4] = { 3, 2, 2, 6 };
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 4, s4, d), KVC_OK);
    const char *npy = tmp_absent(".npy"), *sft = tmp_absent(".safetensors"), *other = tmp_absent(".bin");
    kvc_kvcache_io_params_t split = { .field_mask = KVC_KVCACHE_PARAM_FORM, .form = KVC_KVCACHE_SPLIT };
    cr_assert_eq(kvc_kvcache_save(other, &t, NULL), KVC_ERR_INVALID_ARG);    /* unknown extension */
    cr_assert_eq(kvc_kvcache_save(npy, &t, &split), KVC_ERR_INVALID_ARG);    /* split .npy needs two files */
    cr_assert_eq(kvc_kvcache_save(sft, &t, &split), KVC_ERR_INVALID_ARG);    /* NH unknown */
    cr_assert_eq(kvc_kvcache_save_pair(npy, sft, &t, NULL), KVC_ERR_INVALID_ARG);
    split.field_mask |= KVC_KVCACHE_PARAM_NUM_HEADS;
    split.num_heads = 4; /* 6 % 4 */
    cr_assert_eq(kvc_kvcache_save(sft, &t, &split), KVC_ERR_SHAPE);
    kvc_tensor_t bad;
    cr_assert_eq(kvc_tensor_wrap(&bad, KVC_DTYPE_F16, 4, s_lead3, d), KVC_OK);
    cr_assert_eq(kvc_kvcache_save(npy, &bad, NULL), KVC_ERR_SHAPE);
    bad = t;
    bad.nbytes--;
    cr_assert_eq(kvc_kvcache_save(npy, &bad, NULL), KVC_ERR_SHAPE);
    cr_assert_eq(kvc_kvcache_save(npy, NULL, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_kvcache_save(NULL, &t, NULL), KVC_ERR_INVALID_ARG);
    kvc_kvcache_io_params_t pair = { .field_mask = KVC_KVCACHE_PARAM_NUM_HEADS, .num_heads = 2 };
    cr_assert_eq(kvc_kvcache_save_pair(npy, other, &t, &pair), KVC_ERR_INVALID_ARG);
    cr_assert_not(exists(npy));
    cr_assert_not(exists(sft));
    cr_assert_not(exists(other));
}

/* ------------------------------------------------------------------ mutation fuzzing */

/* Random byte flips and truncations of valid images: every reader must return a status without
 * touching memory outside the (exactly sized, heap) buffer, which ASan builds check. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void mutate_and_run(const unsigned char *img, size_t len, int rounds, int is_npy)
{
    int accepted = 0;
    static const unsigned char interesting[] = { 0, 0xff, '"', '\\', '{', '}', '[', ']', ',', ':', '(', ')', '-',
                                                 '0', '9', 'e', 0x80, '\'', ' ' };
    for (int r = 0; r < rounds; r++) {
        size_t n = len;
        if (rnd() % 4 == 0) n = rnd() % (len + 1);
        unsigned char *buf = malloc(n ? n : 1);
        memcpy(buf, img, n);
        int flips = n ? 1 + rnd() % 4 : 0;
        for (int f = 0; f < flips; f++) {
            size_t at = rnd() % n;
            buf[at] = rnd() % 2 ? (unsigned char)rnd() : interesting[rnd() % sizeof(interesting)];
        }
        kvc_tensor_t t;
        kvc_kvcache_dims_t dims;
        if (is_npy) {
            kvc_status_t st = kvc_npy_view(buf, n, &t);
            if (st == KVC_OK) {
                accepted++;
                cr_assert(t.nbytes == 0 || ((unsigned char *)t.data >= buf && t.nbytes <= n - (size_t)((unsigned char *)t.data - buf)));
                size_t want;
                cr_assert_eq(kvc_tensor_nbytes(t.dtype, t.ndim, t.shape, &want), KVC_OK);
                cr_assert_eq(want, t.nbytes);
            } else {
                cr_assert(st == KVC_ERR_CORRUPT || st == KVC_ERR_VERSION || st == KVC_ERR_DTYPE ||
                          st == KVC_ERR_UNSUPPORTED, "%s", kvc_status_name(st));
            }
        } else {
            kvc_safetensors_t *a;
            kvc_status_t st = kvc_safetensors_open_mem(buf, n, &a);
            if (st == KVC_OK) {
                accepted++;
                for (size_t i = 0; i < kvc_safetensors_count(a); i++) {
                    cr_assert_eq(kvc_safetensors_view(a, i, &t), KVC_OK);
                    size_t want;
                    cr_assert_eq(kvc_tensor_nbytes(t.dtype, t.ndim, t.shape, &want), KVC_OK);
                    cr_assert_eq(want, t.nbytes);
                    if (t.nbytes) cr_assert((unsigned char *)t.data >= buf && (unsigned char *)t.data + t.nbytes <= buf + n);
                    volatile unsigned char sink = 0;
                    for (size_t b = 0; b < t.nbytes; b++) sink ^= ((unsigned char *)t.data)[b];
                    (void)sink;
                }
                kvc_safetensors_close(a);
            } else {
                cr_assert(st == KVC_ERR_CORRUPT || st == KVC_ERR_DTYPE || st == KVC_ERR_UNSUPPORTED,
                          "%s", kvc_status_name(st));
            }
        }
        if (kvc_kvcache_load_mem(buf, n, NULL, &t, &dims) == KVC_OK) kvc_tensor_free(&t);
        free(buf);
    }
    /* both outcomes must be common, or the mutations test nothing */
    cr_assert(accepted > rounds / 20 && accepted < rounds - rounds / 20, "%d of %d mutants accepted", accepted, rounds);
}

Test(io_fuzz, npy_mutations)
{
    unsigned char data[2 * 3 * 4 * 2], img[512];
    fill(data, sizeof(data), 9);
    size_t shape[4] = { 2, 3, 2, 2 };
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F16, 4, shape, data), KVC_OK);
    size_t len;
    cr_assert_eq(kvc_npy_write_mem(&t, img, sizeof(img), &len), KVC_OK);
    mutate_and_run(img, len, 4000, 1);
}

Test(io_fuzz, safetensors_mutations)
{
    unsigned char a[24], b[6], img[1024];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    size_t sa[4] = { 2, 1, 3, 2 }, sb[1] = { 6 };
    kvc_tensor_t ta, tb;
    cr_assert_eq(kvc_tensor_wrap(&ta, KVC_DTYPE_F16, 4, sa, a), KVC_OK);
    cr_assert_eq(kvc_tensor_wrap(&tb, KVC_DTYPE_U8, 1, sb, b), KVC_OK);
    kvc_named_tensor_t items[2] = { { "kv", &ta }, { "extra\\\"\xc3\xa9", &tb } };
    kvc_metadata_entry_t meta[1] = { { "kvcore.num_heads", "1" } };
    size_t len;
    cr_assert_eq(kvc_safetensors_write_mem(items, 2, meta, 1, img, sizeof(img), &len), KVC_OK);
    mutate_and_run(img, len, 4000, 0);
}

/* ------------------------------------------------------------------ writes never damage a file */

static size_t file_bytes(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* No PATH.tmp.* beside path. */
static int temporaries_of(const char *path)
{
    char dir[64], pre[80];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    snprintf(pre, sizeof(pre), "%s.tmp.", strrchr(path, '/') + 1);
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, pre, strlen(pre));
    closedir(d);
    return n;
}

/* A write that fails part-way (here: the file size limit, as a full disk would) leaves the file it
 * was replacing byte for byte as it was, and no temporary. */
Test(io_kv, failed_write_keeps_the_existing_file, .timeout = 30)
{
    static float data[1 << 16];
    for (size_t i = 0; i < sizeof(data) / sizeof(data[0]); i++) data[i] = (float)i;
    size_t shape[5] = { 2, 2, 64, 16, 16 };
    kvc_tensor_t t;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 5, shape, data), KVC_OK);
    const char *paths[3] = { tmp_path(".npy"), tmp_path(".safetensors"), tmp_path(".safetensors") };
    static const char old[] = "previous contents";
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(paths[i], "wb");
        cr_assert(f);
        fwrite(old, 1, sizeof(old), f);
        fclose(f);
        chmod(paths[i], 0640);
    }
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = { 64 << 10, 64 << 10 }; /* below the 256 KiB the tensor needs */
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    kvc_named_tensor_t nt = { "kv", &t };
    const kvc_kvcache_io_params_t io = { .field_mask = KVC_KVCACHE_PARAM_FORM, .form = KVC_KVCACHE_SPLIT };
    cr_assert_eq(kvc_npy_write(paths[0], &t), KVC_ERR_NO_SPACE, "%s", kvc_last_error());
    cr_assert_eq(kvc_safetensors_write(paths[1], &nt, 1, NULL, 0), KVC_ERR_NO_SPACE, "%s", kvc_last_error());
    cr_assert_eq(kvc_kvcache_save(paths[2], &t, &io), KVC_ERR_NO_SPACE, "%s", kvc_last_error());
    unsigned char buf[64];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(file_bytes(paths[i], buf, sizeof(buf)), sizeof(old), "%s was changed", paths[i]);
        cr_assert_eq(memcmp(buf, old, sizeof(old)), 0);
        cr_assert_eq(temporaries_of(paths[i]), 0, "a temporary of %s remains", paths[i]);
    }
    /* Within the limit the write replaces the file and keeps its permissions. */
    shape[2] = 4;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 5, shape, data), KVC_OK);
    cr_assert_eq(kvc_npy_write(paths[0], &t), KVC_OK, "%s", kvc_last_error());
    kvc_tensor_t back;
    cr_assert_eq(kvc_npy_read(paths[0], &back), KVC_OK);
    cr_assert_eq(back.nbytes, t.nbytes);
    cr_assert_eq(memcmp(back.data, data, t.nbytes), 0);
    kvc_tensor_free(&back);
    struct stat sb;
    cr_assert_eq(stat(paths[0], &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0640u);
    cr_assert_eq(temporaries_of(paths[0]), 0);
}

/* A symbolic link is followed: the file it points to is replaced, the link stays a link. */
Test(io_kv, write_through_a_symlink)
{
    const char *target = tmp_path(".npy"), *link = tmp_absent(".npy");
    cr_assert_eq(symlink(target, link), 0);
    float x[4] = { 1, 2, 3, 4 };
    size_t shape[1] = { 4 };
    kvc_tensor_t t, back;
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 1, shape, x), KVC_OK);
    cr_assert_eq(kvc_npy_write(link, &t), KVC_OK, "%s", kvc_last_error());
    struct stat sb;
    cr_assert_eq(lstat(link, &sb), 0);
    cr_assert(S_ISLNK(sb.st_mode));
    cr_assert_eq(kvc_npy_read(target, &back), KVC_OK);
    cr_assert_eq(memcmp(back.data, x, sizeof(x)), 0);
    kvc_tensor_free(&back);
}

/* Readers refuse what is not a regular file, without blocking on a FIFO that has no writer; a
 * writer refuses a directory. */
Test(io_kv, non_regular_inputs, .timeout = 20)
{
    const char *fifo = tmp_absent(".npy");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    kvc_tensor_t t;
    kvc_safetensors_t *st;
    cr_assert_eq(kvc_npy_read(fifo, &t), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "FIFO"), "%s", kvc_last_error());
    cr_assert_eq(kvc_safetensors_open(fifo, &st), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_kvcache_load(fifo, NULL, &t, NULL), KVC_ERR_INVALID_ARG);
    cr_assert_eq(kvc_npy_read("/tmp", &t), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "is a directory"), "%s", kvc_last_error());
    cr_assert_eq(kvc_npy_read("/dev/zero", &t), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "device"), "%s", kvc_last_error());
    float x[1] = { 1 };
    size_t shape[1] = { 1 };
    cr_assert_eq(kvc_tensor_wrap(&t, KVC_DTYPE_F32, 1, shape, x), KVC_OK);
    cr_assert_eq(kvc_npy_write("/tmp", &t), KVC_ERR_INVALID_ARG);
    cr_assert(strstr(kvc_last_error(), "is a directory"), "%s", kvc_last_error());
    /* A FIFO with no reader: refused at once instead of blocking. */
    cr_assert_neq(kvc_npy_write(fifo, &t), KVC_OK);
    cr_assert(strstr(kvc_last_error(), "no process is reading"), "%s", kvc_last_error());
}
