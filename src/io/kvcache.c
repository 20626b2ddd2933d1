/* SPDX-License-Identifier: BSD-3-Clause */
/* KV-cache files: either one fused tensor [2, NL, T, NH*HS] (LMCache's KV_2LTD memory object) or
 * separate K and V tensors [NL, T, NH, HS], in .npy or .safetensors. Loading always produces one
 * contiguous [2, NL, T, D] tensor, read straight into place (no second copy of the data). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore/context.h>

#include "io_internal.h"

#define META_NUM_HEADS "kvcore.num_heads"
#define META_HEAD_SIZE "kvcore.head_size"

typedef struct kv_opts {
    kvc_file_format_t format;
    kvc_kvcache_form_t form;
    size_t num_heads, head_size; /* 0 = not given */
} kv_opts_t;

static kvc_status_t get_opts(const kvc_kvcache_io_params_t *p, kv_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    if (!p) return KVC_OK;
    if (p->field_mask & KVC_KVCACHE_PARAM_FORMAT) {
        if (p->format < KVC_FILE_AUTO || p->format > KVC_FILE_SAFETENSORS)
            return kvc_error(KVC_ERR_INVALID_ARG, "params->format = %d is not a kvc_file_format_t", (int)p->format);
        o->format = p->format;
    }
    if (p->field_mask & KVC_KVCACHE_PARAM_FORM) {
        if (p->form != KVC_KVCACHE_FUSED && p->form != KVC_KVCACHE_SPLIT)
            return kvc_error(KVC_ERR_INVALID_ARG, "params->form = %d is not a kvc_kvcache_form_t", (int)p->form);
        o->form = p->form;
    }
    if (p->field_mask & KVC_KVCACHE_PARAM_NUM_HEADS) {
        if (p->num_heads == 0) return kvc_error(KVC_ERR_INVALID_ARG, "params->num_heads is 0");
        o->num_heads = p->num_heads;
    }
    if (p->field_mask & KVC_KVCACHE_PARAM_HEAD_SIZE) {
        if (p->head_size == 0) return kvc_error(KVC_ERR_INVALID_ARG, "params->head_size is 0");
        o->head_size = p->head_size;
    }
    return KVC_OK;
}

/* Fold a further NH/HS source into the hints; two sources that disagree are a shape error. */
static kvc_status_t merge_hint(size_t *hint, size_t value, const char *what, const char *from)
{
    if (!value) return KVC_OK;
    if (*hint && *hint != value)
        return kvc_error(KVC_ERR_SHAPE, "%s %zu from %s, but %zu was given", what, value, from, *hint);
    *hint = value;
    return KVC_OK;
}

/* NH and HS for a hidden size D from the hints (either may be 0 = unknown). */
static kvc_status_t resolve_heads(size_t d, const kv_opts_t *o, kvc_kvcache_dims_t *dims)
{
    size_t nh = o->num_heads, hs = o->head_size, prod;
    if (nh && hs) {
        if (!kvc_mul_ok(nh, hs, &prod) || prod != d)
            return kvc_error(KVC_ERR_SHAPE, "num_heads %zu x head_size %zu is not the hidden size %zu", nh, hs, d);
    } else if (nh) {
        if (d % nh) return kvc_error(KVC_ERR_SHAPE, "hidden size %zu is not a multiple of num_heads %zu", d, nh);
        hs = d / nh;
    } else if (hs) {
        if (d % hs) return kvc_error(KVC_ERR_SHAPE, "hidden size %zu is not a multiple of head_size %zu", d, hs);
        nh = d / hs;
    }
    dims->num_heads = nh;
    dims->head_size = hs;
    dims->hidden = d;
    return KVC_OK;
}

/* [2, NL, T, D] or [2, NL, T, NH, HS]. */
static kvc_status_t fused_dims(const char *what, int ndim, const size_t *shape, kv_opts_t o, kvc_kvcache_dims_t *dims)
{
    if ((ndim != 4 && ndim != 5) || shape[0] != 2)
        return kvc_error(KVC_ERR_SHAPE, "%s: a fused KV cache is [2, NL, T, D] or [2, NL, T, NH, HS]", what);
    memset(dims, 0, sizeof(*dims));
    dims->num_layers = shape[1];
    dims->num_tokens = shape[2];
    size_t d = shape[3];
    if (ndim == 5) {
        kvc_status_t st;
        if ((st = merge_hint(&o.num_heads, shape[3], "num_heads", what)) != KVC_OK ||
            (st = merge_hint(&o.head_size, shape[4], "head_size", what)) != KVC_OK)
            return st;
        d = shape[3] * shape[4]; /* the caller's shape was size-checked */
    }
    return resolve_heads(d, &o, dims);
}

/* K and V, each [NL, T, NH, HS], of one type and shape. */
static kvc_status_t split_dims(kvc_dtype_t kt, int kn, const size_t *ks, kvc_dtype_t vt, int vn, const size_t *vs,
                               kv_opts_t o, kvc_kvcache_dims_t *dims)
{
    if (kt != vt) return kvc_error(KVC_ERR_DTYPE, "K is %s but V is %s", kvc_dtype_name(kt), kvc_dtype_name(vt));
    if (kn != 4 || vn != 4) return kvc_error(KVC_ERR_SHAPE, "K and V must each be [NL, T, NH, HS] (4-D)");
    for (int i = 0; i < 4; i++)
        if (ks[i] != vs[i])
            return kvc_error(KVC_ERR_SHAPE, "K and V differ in dimension %d (%zu vs %zu)", i, ks[i], vs[i]);
    kvc_status_t st;
    if ((st = merge_hint(&o.num_heads, ks[2], "num_heads", "K")) != KVC_OK ||
        (st = merge_hint(&o.head_size, ks[3], "head_size", "K")) != KVC_OK)
        return st;
    memset(dims, 0, sizeof(*dims));
    dims->num_layers = ks[0];
    dims->num_tokens = ks[1];
    return resolve_heads(ks[2] * ks[3], &o, dims);
}

static kvc_status_t alloc_kv(kvc_dtype_t dtype, const kvc_kvcache_dims_t *dims, kvc_tensor_t *kv)
{
    size_t shape[4] = { 2, dims->num_layers, dims->num_tokens, dims->hidden };
    size_t nbytes;
    kvc_status_t st = kvc_tensor_nbytes(dtype, 4, shape, &nbytes);
    if (st != KVC_OK) return st;
    void *data;
    if ((st = kvc_data_alloc(nbytes, &data)) != KVC_OK) return st;
    memset(kv, 0, sizeof(*kv));
    kv->dtype = dtype;
    kv->ndim = 4;
    memcpy(kv->shape, shape, sizeof(shape));
    kv->nbytes = nbytes;
    kv->data = data;
    kv->owns_data = data != NULL;
    return KVC_OK;
}

/* kvcore's own metadata: a positive decimal size. */
static kvc_status_t meta_size(const kvc_safetensors_t *st, const char *key, size_t *out)
{
    const char *v;
    *out = 0;
    if (kvc_safetensors_metadata_get(st, key, &v) != KVC_OK) return KVC_OK;
    size_t x = 0;
    if (!*v || *v == '0') return kvc_error(KVC_ERR_CORRUPT, "metadata %s = \"%.32s\" is not a positive integer", key, v);
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9' || !kvc_mul_ok(x, 10, &x) || !kvc_add_ok(x, (size_t)(*p - '0'), &x))
            return kvc_error(KVC_ERR_CORRUPT, "metadata %s = \"%.32s\" is not a positive integer", key, v);
    *out = x;
    return KVC_OK;
}

static int find(const kvc_safetensors_t *st, const char *name, size_t *idx)
{
    return kvc_safetensors_find(st, name, idx) == KVC_OK;
}

static kvc_status_t load_archive(const kvc_safetensors_t *st, kv_opts_t o, kvc_tensor_t *kv, kvc_kvcache_dims_t *dims)
{
    kvc_status_t s;
    size_t mh, ms;
    if ((s = meta_size(st, META_NUM_HEADS, &mh)) != KVC_OK || (s = meta_size(st, META_HEAD_SIZE, &ms)) != KVC_OK ||
        (s = merge_hint(&o.num_heads, mh, "num_heads", "the file's metadata")) != KVC_OK ||
        (s = merge_hint(&o.head_size, ms, "head_size", "the file's metadata")) != KVC_OK)
        return s;

    size_t ki, vi, fused;
    int have_fused = find(st, "kv", &fused);
    if (!have_fused && ((find(st, "k", &ki) && find(st, "v", &vi)) || (find(st, "key", &ki) && find(st, "value", &vi)))) {
        kvc_safetensors_info_t k, v;
        if ((s = kvc_safetensors_info(st, ki, &k)) != KVC_OK || (s = kvc_safetensors_info(st, vi, &v)) != KVC_OK ||
            (s = split_dims(k.dtype, k.ndim, k.shape, v.dtype, v.ndim, v.shape, o, dims)) != KVC_OK ||
            (s = alloc_kv(k.dtype, dims, kv)) != KVC_OK)
            return s;
        size_t half = kv->nbytes / 2;
        if ((s = kvc_safetensors_read(st, ki, kv->data, half)) != KVC_OK ||
            (s = kvc_safetensors_read(st, vi, (char *)kv->data + half, half)) != KVC_OK)
            kvc_tensor_free(kv);
        return s;
    }
    if (!have_fused && kvc_safetensors_count(st) == 1) {
        kvc_safetensors_info_t only;
        kvc_safetensors_info(st, 0, &only);
        if (strcmp(only.name, "k") && strcmp(only.name, "v") && strcmp(only.name, "key") && strcmp(only.name, "value")) {
            have_fused = 1;
            fused = 0;
        }
    }
    if (!have_fused)
        return kvc_error(KVC_ERR_NOT_FOUND, "no KV cache in the safetensors file: expected a tensor \"kv\", tensors "
                         "\"k\" and \"v\" or \"key\" and \"value\", or a single tensor");
    kvc_safetensors_info_t f;
    kvc_safetensors_info(st, fused, &f);
    if ((s = fused_dims(f.name, f.ndim, f.shape, o, dims)) != KVC_OK || (s = alloc_kv(f.dtype, dims, kv)) != KVC_OK)
        return s;
    if ((s = kvc_safetensors_read(st, fused, kv->data, kv->nbytes)) != KVC_OK) kvc_tensor_free(kv);
    return s;
}

/* Load from a source; a safetensors archive takes the source over (s->fd is then -1). */
static kvc_status_t load_src(kvc_src_t *s, const kv_opts_t *o, kvc_tensor_t *kv, kvc_kvcache_dims_t *dims)
{
    kvc_file_format_t fmt = o->format;
    if (fmt == KVC_FILE_AUTO) fmt = kvc_npy_has_magic(s) ? KVC_FILE_NPY : KVC_FILE_SAFETENSORS;
    kvc_status_t st;
    if (fmt == KVC_FILE_NPY) {
        kvc_npy_header_t h;
        if ((st = kvc_npy_parse_src(s, &h)) != KVC_OK || (st = fused_dims(s->name, h.ndim, h.shape, *o, dims)) != KVC_OK ||
            (st = alloc_kv(h.dtype, dims, kv)) != KVC_OK)
            return st;
        if ((st = kvc_src_read(s, h.data_offset, kv->data, kv->nbytes)) != KVC_OK) kvc_tensor_free(kv);
        return st;
    }
    kvc_safetensors_t *arch;
    if ((st = kvc_safetensors_open_src(s, &arch)) != KVC_OK) return st;
    s->fd = -1;
    st = load_archive(arch, *o, kv, dims);
    kvc_safetensors_close(arch);
    return st;
}

static kvc_status_t load_common(kvc_src_t *s, const kvc_kvcache_io_params_t *params, kvc_tensor_t *kv,
                                kvc_kvcache_dims_t *dims)
{
    kv_opts_t o;
    kvc_status_t st = get_opts(params, &o);
    kvc_tensor_t t;
    kvc_kvcache_dims_t d;
    if (st == KVC_OK) st = load_src(s, &o, &t, &d);
    kvc_src_close(s);
    if (st != KVC_OK) return st;
    *kv = t;
    if (dims) *dims = d;
    return KVC_OK;
}

KVC_API kvc_status_t kvc_kvcache_load(const char *path, const kvc_kvcache_io_params_t *params, kvc_tensor_t *kv,
                                      kvc_kvcache_dims_t *dims)
{
    if (!kv) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_kvcache_load: kv is NULL");
    kvc_src_t s;
    kvc_status_t st = kvc_src_open_file(&s, path);
    if (st != KVC_OK) return st;
    return load_common(&s, params, kv, dims);
}

KVC_API kvc_status_t kvc_kvcache_load_mem(const void *buf, size_t len, const kvc_kvcache_io_params_t *params,
                                          kvc_tensor_t *kv, kvc_kvcache_dims_t *dims)
{
    if (!kv) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_kvcache_load_mem: kv is NULL");
    if (!buf && len) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_kvcache_load_mem: buf is NULL with len %zu", len);
    kvc_src_t s;
    kvc_src_open_mem(&s, buf, len);
    return load_common(&s, params, kv, dims);
}

/* A file holding exactly one tensor: .npy, or safetensors with one tensor. */
typedef struct one_tensor {
    kvc_src_t src;
    kvc_safetensors_t *arch; /* NULL for .npy */
    kvc_npy_header_t npy;
    kvc_dtype_t dtype;
    int ndim;
    const size_t *shape;
    kvc_safetensors_info_t info;
} one_tensor_t;

static void one_close(one_tensor_t *t)
{
    if (t->arch) kvc_safetensors_close(t->arch);
    else kvc_src_close(&t->src);
    t->arch = NULL;
}

static kvc_status_t one_open(const char *path, kvc_file_format_t fmt, one_tensor_t *t)
{
    memset(t, 0, sizeof(*t));
    kvc_status_t st = kvc_src_open_file(&t->src, path);
    if (st != KVC_OK) return st;
    if (fmt == KVC_FILE_AUTO) fmt = kvc_npy_has_magic(&t->src) ? KVC_FILE_NPY : KVC_FILE_SAFETENSORS;
    if (fmt == KVC_FILE_NPY) {
        if ((st = kvc_npy_parse_src(&t->src, &t->npy)) != KVC_OK) {
            kvc_src_close(&t->src);
            return st;
        }
        t->dtype = t->npy.dtype;
        t->ndim = t->npy.ndim;
        t->shape = t->npy.shape;
        return KVC_OK;
    }
    if ((st = kvc_safetensors_open_src(&t->src, &t->arch)) != KVC_OK) {
        kvc_src_close(&t->src);
        return st;
    }
    if (kvc_safetensors_count(t->arch) != 1) {
        st = kvc_error(KVC_ERR_NOT_FOUND, "%s: holds %zu tensors, one (K or V) was expected", path,
                       kvc_safetensors_count(t->arch));
        one_close(t);
        return st;
    }
    kvc_safetensors_info(t->arch, 0, &t->info);
    t->dtype = t->info.dtype;
    t->ndim = t->info.ndim;
    t->shape = t->info.shape;
    return KVC_OK;
}

static kvc_status_t one_read(const one_tensor_t *t, void *dst, size_t n)
{
    if (t->arch) return kvc_safetensors_read(t->arch, 0, dst, n);
    return kvc_src_read(&t->src, t->npy.data_offset, dst, n);
}

KVC_API kvc_status_t kvc_kvcache_load_pair(const char *k_path, const char *v_path,
                                           const kvc_kvcache_io_params_t *params, kvc_tensor_t *kv,
                                           kvc_kvcache_dims_t *dims)
{
    if (!kv) return kvc_error(KVC_ERR_INVALID_ARG, "kvc_kvcache_load_pair: kv is NULL");
    kv_opts_t o;
    kvc_status_t st = get_opts(params, &o);
    if (st != KVC_OK) return st;
    one_tensor_t k, v;
    if ((st = one_open(k_path, o.format, &k)) != KVC_OK) return st;
    if ((st = one_open(v_path, o.format, &v)) != KVC_OK) {
        one_close(&k);
        return st;
    }
    kvc_tensor_t t;
    kvc_kvcache_dims_t d;
    if ((st = split_dims(k.dtype, k.ndim, k.shape, v.dtype, v.ndim, v.shape, o, &d)) == KVC_OK &&
        (st = alloc_kv(k.dtype, &d, &t)) == KVC_OK) {
        size_t half = t.nbytes / 2;
        if ((st = one_read(&k, t.data, half)) != KVC_OK || (st = one_read(&v, (char *)t.data + half, half)) != KVC_OK)
            kvc_tensor_free(&t);
    }
    one_close(&k);
    one_close(&v);
    if (st != KVC_OK) return st;
    *kv = t;
    if (dims) *dims = d;
    return KVC_OK;
}

/* ------------------------------------------------------------------ saving */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static kvc_status_t format_for(const char *path, kvc_file_format_t fmt, kvc_file_format_t *out)
{
    if (!path) return kvc_error(KVC_ERR_INVALID_ARG, "path is NULL");
    if (fmt == KVC_FILE_AUTO) {
        if (ends_with(path, ".npy")) fmt = KVC_FILE_NPY;
        else if (ends_with(path, ".safetensors")) fmt = KVC_FILE_SAFETENSORS;
        else return kvc_error(KVC_ERR_INVALID_ARG, "%s: extension is neither .npy nor .safetensors (set params->format)", path);
    }
    *out = fmt;
    return KVC_OK;
}

/* Check kv and give its K and V halves as [NL, T, NH, HS] (or the fused [2, NL, T, D]). */
static kvc_status_t save_prepare(const kvc_tensor_t *kv, const kv_opts_t *o, kvc_kvcache_dims_t *dims)
{
    kvc_status_t st = kvc_tensor_check(kv, "kv");
    if (st != KVC_OK) return st;
    return fused_dims("kv", kv->ndim, kv->shape, *o, dims);
}

static kvc_status_t wrap_half(const kvc_tensor_t *kv, const kvc_kvcache_dims_t *d, int which, kvc_tensor_t *out)
{
    size_t shape[4] = { d->num_layers, d->num_tokens, d->num_heads, d->head_size };
    return kvc_tensor_wrap(out, kv->dtype, 4, shape, kv->nbytes ? (char *)kv->data + which * (kv->nbytes / 2) : NULL);
}

static kvc_status_t need_heads(const kvc_kvcache_dims_t *d)
{
    if (!d->num_heads)
        return kvc_error(KVC_ERR_INVALID_ARG, "separate K and V need num_heads or head_size (a 4-D kv does not say)");
    return KVC_OK;
}

KVC_API kvc_status_t kvc_kvcache_save(const char *path, const kvc_tensor_t *kv, const kvc_kvcache_io_params_t *params)
{
    kv_opts_t o;
    kvc_kvcache_dims_t d;
    kvc_file_format_t fmt;
    kvc_status_t st;
    if ((st = get_opts(params, &o)) != KVC_OK || (st = save_prepare(kv, &o, &d)) != KVC_OK ||
        (st = format_for(path, o.format, &fmt)) != KVC_OK)
        return st;
    if (o.form == KVC_KVCACHE_SPLIT) {
        if (fmt == KVC_FILE_NPY)
            return kvc_error(KVC_ERR_INVALID_ARG, "%s: separate K and V in .npy need two files (kvc_kvcache_save_pair)", path);
        if ((st = need_heads(&d)) != KVC_OK) return st;
        kvc_tensor_t k, v;
        if ((st = wrap_half(kv, &d, 0, &k)) != KVC_OK || (st = wrap_half(kv, &d, 1, &v)) != KVC_OK) return st;
        kvc_named_tensor_t items[2] = { { "k", &k }, { "v", &v } };
        return kvc_safetensors_write(path, items, 2, NULL, 0);
    }
    size_t shape[4] = { 2, d.num_layers, d.num_tokens, d.hidden };
    kvc_tensor_t fused;
    if ((st = kvc_tensor_wrap(&fused, kv->dtype, 4, shape, kv->data)) != KVC_OK) return st;
    if (fmt == KVC_FILE_NPY) return kvc_npy_write(path, &fused);
    char nh[24], hs[24];
    snprintf(nh, sizeof(nh), "%zu", d.num_heads);
    snprintf(hs, sizeof(hs), "%zu", d.head_size);
    kvc_metadata_entry_t meta[2] = { { META_HEAD_SIZE, hs }, { META_NUM_HEADS, nh } };
    kvc_named_tensor_t item = { "kv", &fused };
    return kvc_safetensors_write(path, &item, 1, meta, d.num_heads ? 2 : 0);
}

KVC_API kvc_status_t kvc_kvcache_save_pair(const char *k_path, const char *v_path, const kvc_tensor_t *kv,
                                           const kvc_kvcache_io_params_t *params)
{
    kv_opts_t o;
    kvc_kvcache_dims_t d;
    kvc_file_format_t kf, vf;
    kvc_status_t st;
    if ((st = get_opts(params, &o)) != KVC_OK || (st = save_prepare(kv, &o, &d)) != KVC_OK ||
        (st = need_heads(&d)) != KVC_OK || (st = format_for(k_path, o.format, &kf)) != KVC_OK ||
        (st = format_for(v_path, o.format, &vf)) != KVC_OK)
        return st;
    kvc_tensor_t k, v;
    if ((st = wrap_half(kv, &d, 0, &k)) != KVC_OK || (st = wrap_half(kv, &d, 1, &v)) != KVC_OK) return st;
    kvc_named_tensor_t ki = { "k", &k }, vi = { "v", &v };
    st = kf == KVC_FILE_NPY ? kvc_npy_write(k_path, &k) : kvc_safetensors_write(k_path, &ki, 1, NULL, 0);
    if (st != KVC_OK) return st;
    return vf == KVC_FILE_NPY ? kvc_npy_write(v_path, &v) : kvc_safetensors_write(v_path, &vi, 1, NULL, 0);
}
