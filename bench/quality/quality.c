/* SPDX-License-Identifier: BSD-3-Clause */
/* Quality bench for the CacheGen codec (bench/quality/README.md): a forward pass of the stories260K
 * Llama-2 model (read from its GGUF file) attends to a prefix KV cache that went through kvcore's
 * codec, and the next-token distributions are compared with those of the exact (fp16) cache.
 * Prints one JSON line per (config, sequence, prefix) and one summary line per config. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcore.h>

/* ------------------------------------------------------------------ GGUF (v3, F32 tensors only) */

typedef struct {
    char name[64];
    uint64_t dims[4];
    uint32_t ndim, type;
    uint64_t offset;
} gguf_tensor_t;

typedef struct {
    uint8_t *data;
    size_t size;
    uint64_t ntensors;
    gguf_tensor_t *tensors;
    const uint8_t *base; /* tensor data section */
    uint32_t dim, hidden, layers, heads, kv_heads, vocab, alignment;
    float eps;
    uint64_t nvocab;          /* tokenizer.ggml.tokens: the pieces (not NUL-terminated) */
    const uint8_t **piece;
    uint64_t *piece_len;
} gguf_t;

typedef struct {
    const uint8_t *p, *end;
    int bad;
} reader_t;

static int rd(reader_t *r, void *out, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) { r->bad = 1; if (out) memset(out, 0, n); return 0; }
    if (out) memcpy(out, r->p, n);
    r->p += n;
    return 1;
}

static uint64_t rd_u64(reader_t *r) { uint64_t v; rd(r, &v, 8); return v; }
static uint32_t rd_u32(reader_t *r) { uint32_t v; rd(r, &v, 4); return v; }

static size_t scalar_size(uint32_t t)
{
    static const size_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return t < sizeof(sz) / sizeof(sz[0]) ? sz[t] : 0;
}

/* Skips a value of type t; stores a scalar u32 / f32 in *u32 / *f32 when asked. */
static void skip_value(reader_t *r, uint32_t t, uint32_t *u32, float *f32)
{
    if (t == 8) { uint64_t n = rd_u64(r); rd(r, NULL, n); return; }
    if (t == 9) {
        const uint32_t at = rd_u32(r);
        const uint64_t n = rd_u64(r);
        for (uint64_t i = 0; i < n && !r->bad; i++) skip_value(r, at, NULL, NULL);
        return;
    }
    const size_t n = scalar_size(t);
    if (!n) { r->bad = 1; return; }
    uint8_t v[8] = { 0 };
    rd(r, v, n);
    if (u32 && t == 4) memcpy(u32, v, 4);
    if (f32 && t == 6) memcpy(f32, v, 4);
}

static int gguf_load(const char *path, gguf_t *g)
{
    memset(g, 0, sizeof(*g));
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "quality: cannot open %s: %s\n", path, strerror(errno)); return -1; }
    fseek(f, 0, SEEK_END);
    g->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g->data = malloc(g->size);
    if (!g->data || fread(g->data, 1, g->size, f) != g->size) { fclose(f); fprintf(stderr, "quality: cannot read %s\n", path); return -1; }
    fclose(f);
    reader_t r = { g->data, g->data + g->size, 0 };
    char magic[4];
    rd(&r, magic, 4);
    const uint32_t version = rd_u32(&r);
    g->ntensors = rd_u64(&r);
    const uint64_t nkv = rd_u64(&r);
    if (memcmp(magic, "GGUF", 4) || version != 3 || g->ntensors > 4096) { fprintf(stderr, "quality: %s is not a GGUF v3 file\n", path); return -1; }
    g->alignment = 32;
    for (uint64_t i = 0; i < nkv && !r.bad; i++) {
        const uint64_t klen = rd_u64(&r);
        char key[128] = { 0 };
        if (klen >= sizeof(key)) { r.bad = 1; break; }
        rd(&r, key, klen);
        const uint32_t t = rd_u32(&r);
        uint32_t u = 0;
        float fl = 0;
        if (!strcmp(key, "tokenizer.ggml.tokens") && t == 9) {
            const uint32_t at = rd_u32(&r);
            const uint64_t n = rd_u64(&r);
            if (at != 8 || n > (1u << 20)) { r.bad = 1; break; }
            g->nvocab = n;
            g->piece = calloc(n, sizeof(*g->piece));
            g->piece_len = calloc(n, sizeof(*g->piece_len));
            if (!g->piece || !g->piece_len) { r.bad = 1; break; }
            for (uint64_t k = 0; k < n && !r.bad; k++) {
                g->piece_len[k] = rd_u64(&r);
                g->piece[k] = r.p;
                rd(&r, NULL, g->piece_len[k]);
            }
            continue;
        }
        skip_value(&r, t, &u, &fl);
        if (!strcmp(key, "llama.embedding_length")) g->dim = u;
        else if (!strcmp(key, "llama.feed_forward_length")) g->hidden = u;
        else if (!strcmp(key, "llama.block_count")) g->layers = u;
        else if (!strcmp(key, "llama.attention.head_count")) g->heads = u;
        else if (!strcmp(key, "llama.attention.head_count_kv")) g->kv_heads = u;
        else if (!strcmp(key, "llama.attention.layer_norm_rms_epsilon")) g->eps = fl;
        else if (!strcmp(key, "general.alignment")) g->alignment = u;
    }
    g->tensors = calloc(g->ntensors, sizeof(*g->tensors));
    for (uint64_t i = 0; i < g->ntensors && !r.bad; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        const uint64_t n = rd_u64(&r);
        if (n >= sizeof(t->name)) { r.bad = 1; break; }
        rd(&r, t->name, n);
        t->ndim = rd_u32(&r);
        if (t->ndim > 4) { r.bad = 1; break; }
        for (uint32_t d = 0; d < t->ndim; d++) t->dims[d] = rd_u64(&r);
        t->type = rd_u32(&r);
        t->offset = rd_u64(&r);
    }
    if (r.bad || !g->dim || !g->layers || !g->heads || !g->kv_heads || !g->alignment) {
        fprintf(stderr, "quality: %s: malformed GGUF header or missing llama.* keys\n", path);
        return -1;
    }
    const size_t hdr = (size_t)(r.p - g->data), a = g->alignment;
    g->base = g->data + (hdr + a - 1) / a * a;
    return 0;
}

/* An F32 tensor of exactly `elems` elements, or NULL (with a message). */
static const float *gguf_f32(const gguf_t *g, const char *name, uint64_t elems)
{
    for (uint64_t i = 0; i < g->ntensors; i++) {
        const gguf_tensor_t *t = &g->tensors[i];
        if (strcmp(t->name, name)) continue;
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->ndim; d++) n *= t->dims[d];
        if (t->type != 0 || n != elems || t->offset > g->size || (uint64_t)(g->base - g->data) + t->offset + 4 * n > g->size) {
            fprintf(stderr, "quality: tensor %s: not F32 of %llu elements inside the file\n", name, (unsigned long long)elems);
            return NULL;
        }
        return (const float *)(g->base + t->offset);
    }
    fprintf(stderr, "quality: tensor %s missing\n", name);
    return NULL;
}

/* ------------------------------------------------------------------ model */

typedef struct {
    const float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3;
} layer_w_t;

typedef struct {
    int dim, hidden, layers, heads, kv_heads, head_dim, kv_dim, vocab;
    float eps;
    const float *emb, *out_norm, *out;
    layer_w_t *l;
} model_t;

static int model_init(const gguf_t *g, model_t *m)
{
    m->dim = (int)g->dim;
    m->hidden = (int)g->hidden;
    m->layers = (int)g->layers;
    m->heads = (int)g->heads;
    m->kv_heads = (int)g->kv_heads;
    m->head_dim = m->dim / m->heads;
    m->kv_dim = m->kv_heads * m->head_dim;
    m->eps = g->eps;
    m->vocab = 0;
    for (uint64_t i = 0; i < g->ntensors; i++)
        if (!strcmp(g->tensors[i].name, "token_embd.weight")) m->vocab = (int)g->tensors[i].dims[1];
    const size_t D = (size_t)m->dim, H = (size_t)m->hidden, KV = (size_t)m->kv_dim, V = (size_t)m->vocab;
    m->emb = gguf_f32(g, "token_embd.weight", D * V);
    m->out_norm = gguf_f32(g, "output_norm.weight", D);
    m->out = gguf_f32(g, "output.weight", D * V);
    m->l = calloc((size_t)m->layers, sizeof(*m->l));
    int ok = m->emb && m->out_norm && m->out && m->l;
    for (int l = 0; l < m->layers && ok; l++) {
        char n[64];
#define W(field, suffix, count) (snprintf(n, sizeof(n), "blk.%d." suffix, l), (m->l[l].field = gguf_f32(g, n, (count))) != NULL)
        ok = W(attn_norm, "attn_norm.weight", D) && W(wq, "attn_q.weight", D * D) && W(wk, "attn_k.weight", D * KV) &&
             W(wv, "attn_v.weight", D * KV) && W(wo, "attn_output.weight", D * D) && W(ffn_norm, "ffn_norm.weight", D) &&
             W(w1, "ffn_gate.weight", D * H) && W(w2, "ffn_down.weight", H * D) && W(w3, "ffn_up.weight", D * H);
#undef W
    }
    return ok ? 0 : -1;
}

static void rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) o[i] = w[i] * (ss * x[i]);
}

/* y[rows] = W[rows][cols] x (GGUF stores a [out, in] matrix as `out` rows of `in`). */
static void matvec(float *y, const float *w, const float *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < cols; c++) s += w[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

/* llama2.c's rotary embedding: adjacent pairs (2i, 2i+1) inside each head. */
static void rope(float *v, int n, int head_dim, int pos)
{
    for (int i = 0; i < n; i += 2) {
        const int j = i % head_dim;
        const float freq = 1.0f / powf(10000.0f, (float)j / (float)head_dim), a = (float)pos * freq;
        const float c = cosf(a), s = sinf(a), x0 = v[i], x1 = v[i + 1];
        v[i] = x0 * c - x1 * s;
        v[i + 1] = x0 * s + x1 * c;
    }
}

/* Runs positions [p0, p1) of `tokens`; the cache kc/vc [layers][tmax][kv_dim] already holds positions
 * < p0 and receives p0 .. p1-1. logits (may be NULL): [p1 - p0][vocab]. */
static void forward(const model_t *m, const int32_t *tokens, int p0, int p1, float *kc, float *vc, int tmax, float *logits)
{
    const int D = m->dim, KV = m->kv_dim, HD = m->head_dim, group = m->heads / m->kv_heads;
    float *x = malloc(sizeof(float) * (size_t)D), *xb = malloc(sizeof(float) * (size_t)D), *q = malloc(sizeof(float) * (size_t)D);
    float *att = malloc(sizeof(float) * (size_t)tmax), *hb = malloc(sizeof(float) * (size_t)m->hidden);
    float *hb2 = malloc(sizeof(float) * (size_t)m->hidden), *xo = malloc(sizeof(float) * (size_t)D);
    for (int pos = p0; pos < p1; pos++) {
        memcpy(x, m->emb + (size_t)tokens[pos] * D, sizeof(float) * (size_t)D);
        for (int l = 0; l < m->layers; l++) {
            const layer_w_t *w = &m->l[l];
            float *k = kc + ((size_t)l * tmax + pos) * KV, *v = vc + ((size_t)l * tmax + pos) * KV;
            rmsnorm(xb, x, w->attn_norm, D, m->eps);
            matvec(q, w->wq, xb, D, D);
            matvec(k, w->wk, xb, KV, D);
            matvec(v, w->wv, xb, KV, D);
            rope(q, D, HD, pos);
            rope(k, KV, HD, pos);
            for (int h = 0; h < m->heads; h++) {
                const int kvh = h / group;
                float mx = -INFINITY;
                for (int t = 0; t <= pos; t++) {
                    const float *kt = kc + ((size_t)l * tmax + t) * KV + kvh * HD;
                    float s = 0;
                    for (int i = 0; i < HD; i++) s += q[h * HD + i] * kt[i];
                    att[t] = s / sqrtf((float)HD);
                    if (att[t] > mx) mx = att[t];
                }
                float sum = 0;
                for (int t = 0; t <= pos; t++) sum += att[t] = expf(att[t] - mx);
                for (int i = 0; i < HD; i++) {
                    float s = 0;
                    for (int t = 0; t <= pos; t++) s += att[t] * vc[((size_t)l * tmax + t) * KV + kvh * HD + i];
                    xb[h * HD + i] = s / sum;
                }
            }
            matvec(xo, w->wo, xb, D, D);
            for (int i = 0; i < D; i++) x[i] += xo[i];
            rmsnorm(xb, x, w->ffn_norm, D, m->eps);
            matvec(hb, w->w1, xb, m->hidden, D);
            matvec(hb2, w->w3, xb, m->hidden, D);
            for (int i = 0; i < m->hidden; i++) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
            matvec(xo, w->w2, hb, D, m->hidden);
            for (int i = 0; i < D; i++) x[i] += xo[i];
        }
        if (logits) {
            rmsnorm(xb, x, m->out_norm, D, m->eps);
            matvec(logits + (size_t)(pos - p0) * m->vocab, m->out, xb, m->vocab, D);
        }
    }
    free(x); free(xb); free(q); free(att); free(hb); free(hb2); free(xo);
}

/* ------------------------------------------------------------------ data */

/* int32 tokens from a .npy file (header length from the preamble). */
static int32_t *load_tokens(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "quality: cannot open %s: %s\n", path, strerror(errno)); return NULL; }
    uint8_t pre[10];
    int32_t *t = NULL;
    if (fread(pre, 1, 10, f) == 10 && !memcmp(pre, "\x93NUMPY", 6) && pre[6] == 1) {
        const long hl = pre[8] | pre[9] << 8;
        char hdr[512] = { 0 };
        if (hl < (long)sizeof(hdr) && fread(hdr, 1, (size_t)hl, f) == (size_t)hl && strstr(hdr, "'<i4'")) {
            fseek(f, 0, SEEK_END);
            const long bytes = ftell(f) - 10 - hl;
            fseek(f, 10 + hl, SEEK_SET);
            *n = (int)(bytes / 4);
            t = malloc((size_t)bytes);
            if (t && fread(t, 4, (size_t)*n, f) != (size_t)*n) { free(t); t = NULL; }
        }
    }
    fclose(f);
    if (!t) fprintf(stderr, "quality: %s is not an int32 .npy vector\n", path);
    return t;
}

/* ------------------------------------------------------------------ held-out sequences */

/* splitmix64: the held-out set's only randomness, so every platform draws the same tokens. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Greedy longest-match tokenisation with the model's pieces (SentencePiece style: a leading space
 * and every space become U+2581). Not SentencePiece's exact segmentation, but every piece is the
 * model's own, which is all an opening needs. Returns the token count (<= cap). */
static int tokenise(const gguf_t *g, const char *text, int32_t *out, int cap)
{
    char buf[1024];
    size_t n = 0;
    for (const char *c = text; *c && n + 4 < sizeof(buf); c++) {
        if (c == text || *c == ' ') { memcpy(buf + n, "\xe2\x96\x81", 3); n += 3; }
        if (*c != ' ') buf[n++] = *c;
    }
    int k = 0;
    for (size_t i = 0; i < n && k < cap;) {
        uint64_t best = 0, best_len = 0;
        for (uint64_t v = 3; v < g->nvocab; v++)
            if (g->piece_len[v] > best_len && g->piece_len[v] <= n - i && !memcmp(g->piece[v], buf + i, g->piece_len[v])) {
                best = v;
                best_len = g->piece_len[v];
            }
        if (!best_len) { out[k++] = 3 + (uint8_t)buf[i]; i++; continue; } /* <0xXX> byte pieces start at id 3 */
        out[k++] = (int32_t)best;
        i += best_len;
    }
    return k;
}

/* BOS, the opening, then sampling at temperature temp (0: greedy) up to n tokens. */
static int32_t *generate(const model_t *m, const gguf_t *g, const char *opening, double temp, uint64_t seed, int n)
{
    int32_t *tok = calloc((size_t)n, sizeof(*tok));
    float *kc = calloc((size_t)m->layers * n * m->kv_dim, sizeof(float)), *vc = calloc((size_t)m->layers * n * m->kv_dim, sizeof(float));
    float *lg = malloc(sizeof(float) * (size_t)m->vocab);
    double *p = malloc(sizeof(double) * (size_t)m->vocab);
    tok[0] = 1;
    int have = 1 + tokenise(g, opening, tok + 1, n / 4);
    uint64_t st = seed;
    for (int pos = 0; pos + 1 < n; pos++) {
        forward(m, tok, pos, pos + 1, kc, vc, n, lg);
        if (pos + 1 < have) continue;
        int next = 0;
        if (temp <= 0) {
            for (int v = 1; v < m->vocab; v++) if (lg[v] > lg[next]) next = v;
        } else {
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < m->vocab; v++) if (lg[v] > mx) mx = lg[v];
            for (int v = 0; v < m->vocab; v++) sum += p[v] = exp((lg[v] - mx) / temp);
            double u = rng_unit(&st) * sum;
            next = m->vocab - 1;
            for (int v = 0; v < m->vocab; v++) if ((u -= p[v]) < 0) { next = v; break; }
        }
        tok[pos + 1] = next;
        have = pos + 2;
    }
    free(kc); free(vc); free(lg); free(p);
    return tok;
}

/* ------------------------------------------------------------------ configurations */

enum { CFG_LEVEL, CFG_BINS, CFG_BITS };

typedef struct {
    char name[48];
    int kind, level, channel_keys;
    uint32_t bins_k, bins_v;
    double bits;
} config_t;

/* "default" (= level0), "levelN", "k46v8" (bins per plane), "pc:k16v8" (per-channel key scales) or
 * "bits:3.5" (the rate target). */
static int parse_config(const char *s, config_t *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", s);
    char tail;
    if (!strcmp(s, "default")) { c->kind = CFG_LEVEL; return 0; }
    if (sscanf(s, "level%d%c", &c->level, &tail) == 1 && c->level >= 0 && c->level <= KVC_CODEC_LEVEL_MAX) { c->kind = CFG_LEVEL; return 0; }
    if (sscanf(s, "bits:%lf%c", &c->bits, &tail) == 1 && c->bits > 0) { c->kind = CFG_BITS; return 0; }
    c->kind = CFG_BINS;
    if (!strncmp(s, "pc:", 3)) { c->channel_keys = 1; s += 3; }
    if (sscanf(s, "k%uv%u%c", &c->bins_k, &c->bins_v, &tail) == 2) return 0;
    fprintf(stderr, "quality: config '%s': expected default, levelN (0..%d), kKvV (e.g. k46v8), pc:kKvV or bits:B\n", c->name,
            KVC_CODEC_LEVEL_MAX);
    return -1;
}

/* Codec parameters of config c for a [2, NL, T, C] chunk; bins: 2 * NL entries of storage. */
static int config_params(const config_t *c, size_t NL, size_t T, size_t heads, size_t hs, kvc_codec_params_t *prm, uint32_t *bins)
{
    *prm = (kvc_codec_params_t){ .dtype = KVC_DTYPE_F16, .layout = KVC_CODEC_KV_2LTD, .num_layers = NL, .num_tokens = T,
                                 .num_heads = heads, .head_size = hs };
    if (c->kind == CFG_LEVEL) return kvc_codec_level_params(c->level, prm, bins) == KVC_OK ? 0 : -1;
    if (c->kind == CFG_BITS) {
        prm->field_mask |= KVC_CODEC_PARAM_BITS;
        prm->bits = c->bits;
        return 0;
    }
    for (size_t l = 0; l < NL; l++) { bins[l] = c->bins_k; bins[NL + l] = c->bins_v; }
    prm->field_mask |= KVC_CODEC_PARAM_BINS | KVC_CODEC_PARAM_KEY_SCALING;
    prm->bins = bins;
    prm->key_scaling = c->channel_keys ? KVC_CODEC_SCALE_CHANNEL : KVC_CODEC_SCALE_TOKEN;
    return 0;
}

typedef struct {
    double bits, bits32, dce, kl, top1;
    int readable;
} result_t;

static void f16_round(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        _Float16 h = (_Float16)in[i];
        memcpy(&out[i], &h, 2);
    }
}

static float f16_value(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

/* Cache [layers][tmax][kv_dim] (positions < T) from a KV_2LTD fp16 chunk [2][layers][T][kv_dim]. */
static void restore_cache(const model_t *m, const uint16_t *chunk, int T, float *kc, float *vc, int tmax)
{
    const size_t KV = (size_t)m->kv_dim;
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < m->layers; l++)
            for (int t = 0; t < T; t++)
                for (size_t c = 0; c < KV; c++)
                    (p ? vc : kc)[((size_t)l * tmax + t) * KV + c] = f16_value(chunk[(((size_t)p * m->layers + l) * T + t) * KV + c]);
}

static void log_softmax(const float *z, int n, double *out)
{
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) if (z[i] > mx) mx = z[i];
    for (int i = 0; i < n; i++) s += exp(z[i] - mx);
    const double lse = mx + log(s);
    for (int i = 0; i < n; i++) out[i] = z[i] - lse;
}

static int argmax(const float *z, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++) if (z[i] > z[b]) b = i;
    return b;
}

/* ------------------------------------------------------------------ runs */

typedef struct {
    const int32_t *tok;
    int ntok, prefix;
    char name[48];
} run_t;

/* Encoded size of the same tokens as a 32-layer cache: layer l holds the real layer l % NL (a
 * stand-in for a deep model's cache, for LMCache's per-layer defaults), bits per element. */
static double bits_32_layers(kvc_context_t *ctx, const config_t *c, const uint16_t *chunk, const model_t *m, int P)
{
    enum { NL32 = 32 };
    const size_t KV = (size_t)m->kv_dim, plane = (size_t)P * KV, elems = 2 * NL32 * plane;
    uint16_t *big = malloc(2 * elems);
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < NL32; l++)
            memcpy(big + ((size_t)p * NL32 + l) * plane, chunk + ((size_t)p * m->layers + l % m->layers) * plane, 2 * plane);
    kvc_codec_params_t prm;
    uint32_t bins[2 * NL32];
    uint8_t *buf = NULL;
    size_t len = 0;
    double bits = NAN;
    if (!config_params(c, NL32, (size_t)P, (size_t)m->kv_heads, (size_t)m->head_dim, &prm, bins) &&
        kvc_codec_encode(ctx, &prm, big, &buf, &len) == KVC_OK)
        bits = 8.0 * (double)len / (double)elems;
    kvc_codec_free(buf);
    free(big);
    return bits;
}

/* One run: the prefix's exact fp16 cache, the reference continuation, then every config. The
 * continuation is 128 tokens, or up to the sequence's last token. res: nconf entries. */
static int eval_run(const model_t *m, kvc_context_t *ctx, const run_t *run, const config_t *cf, int nconf, int with32, result_t *res,
                    int verbose)
{
    const int P = run->prefix, tmax = run->ntok, end = P + 128 < run->ntok ? P + 128 : run->ntok - 1, N = end - P;
    const size_t KV = (size_t)m->kv_dim, elems = 2 * (size_t)m->layers * P * KV;
    const int32_t *tok = run->tok;
    float *kc = calloc((size_t)m->layers * tmax * KV, sizeof(float)), *vc = calloc((size_t)m->layers * tmax * KV, sizeof(float));
    float *lref = malloc(sizeof(float) * (size_t)N * m->vocab), *lq = malloc(sizeof(float) * (size_t)N * m->vocab);
    double *lpr = malloc(sizeof(double) * (size_t)m->vocab), *lpq = malloc(sizeof(double) * (size_t)m->vocab);
    uint16_t *chunk = malloc(2 * elems), *dec = malloc(2 * elems);
    float *tmp = malloc(sizeof(float) * elems);
    forward(m, tok, 0, P, kc, vc, tmax, NULL);
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < m->layers; l++)
            memcpy(tmp + ((size_t)p * m->layers + l) * P * KV, (p ? vc : kc) + (size_t)l * tmax * KV, sizeof(float) * P * KV);
    f16_round(tmp, chunk, elems);
    restore_cache(m, chunk, P, kc, vc, tmax);
    forward(m, tok, P, end, kc, vc, tmax, lref);
    int rc = 0;
    for (int ci = 0; ci < nconf && !rc; ci++) {
        const config_t *c = &cf[ci];
        kvc_codec_params_t prm;
        uint32_t bins[2 * 64];
        uint8_t *buf = NULL;
        size_t len = 0;
        kvc_codec_info_t info = { 0 };
        kvc_status_t st = config_params(c, (size_t)m->layers, (size_t)P, (size_t)m->kv_heads, (size_t)m->head_dim, &prm, bins)
                              ? KVC_ERR_INVALID_ARG
                              : kvc_codec_encode(ctx, &prm, chunk, &buf, &len);
        if (st == KVC_OK) st = kvc_codec_decode(ctx, buf, len, dec, 2 * elems, &info);
        kvc_codec_free(buf);
        if (st != KVC_OK) { fprintf(stderr, "quality: %s, config %s: %s\n", run->name, c->name, kvc_last_error()); rc = -1; break; }
        restore_cache(m, dec, P, kc, vc, tmax);
        forward(m, tok, P, end, kc, vc, tmax, lq);
        double dce = 0, kl = 0;
        int agree = 0;
        for (int t = 0; t < N; t++) {
            const float *zr = lref + (size_t)t * m->vocab, *zq = lq + (size_t)t * m->vocab;
            log_softmax(zr, m->vocab, lpr);
            log_softmax(zq, m->vocab, lpq);
            dce += lpr[tok[P + t + 1]] - lpq[tok[P + t + 1]];
            for (int v = 0; v < m->vocab; v++) kl += exp(lpr[v]) * (lpr[v] - lpq[v]);
            agree += argmax(zr, m->vocab) == argmax(zq, m->vocab);
        }
        result_t *r = &res[ci];
        *r = (result_t){ 8.0 * (double)len / (double)elems, NAN, dce / N, kl / N, (double)agree / N, info.lmcache_readable };
        if (with32 && c->kind == CFG_LEVEL) r->bits32 = bits_32_layers(ctx, c, chunk, m, P);
        if (verbose)
            printf("{\"config\":\"%s\",\"run\":\"%s\",\"prefix\":%d,\"tokens\":%d,\"bits_per_element\":%.4f,\"container_bytes\":%zu,"
                   "\"dce_nats\":%.5f,\"kl\":%.6f,\"top1\":%.4f,\"lmcache_readable\":%s}\n",
                   c->name, run->name, P, N, r->bits, len, r->dce, r->kl, r->top1, info.lmcache_readable ? "true" : "false");
    }
    fflush(stdout);
    free(kc); free(vc); free(lref); free(lq); free(lpr); free(lpq); free(chunk); free(dec); free(tmp);
    return rc;
}

/* ------------------------------------------------------------------ paired statistics */

/* The rule a configuration must meet to be "no worse" than the reference (level 0), on KL:
 * the bootstrap 95 % interval of the mean paired difference ends at or below 0, and no run is
 * worse than the reference by more than TOL_KL nats. Fixed before any held-out run was made. */
#define TOL_KL 0.002
#define BOOT 4000

typedef struct {
    double bits, bits32, bits_ref, bits32_ref, kl, d_mean, d_lo, d_hi, d_max, dce, top1_min;
    int worse, n, pass, readable;
} summary_t;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* res[config][run]; config ref is the reference. */
static summary_t summarise(const result_t *res, int nruns, int ci, int ref)
{
    summary_t u = { 0 };
    u.n = nruns;
    u.d_max = -INFINITY;
    u.top1_min = 1;
    u.readable = 1;
    double *d = malloc(sizeof(double) * nruns), *boot = malloc(sizeof(double) * BOOT);
    for (int i = 0; i < nruns; i++) {
        const result_t *r = &res[(size_t)ci * nruns + i], *r0 = &res[(size_t)ref * nruns + i];
        u.bits += r->bits / nruns;
        u.bits_ref += r0->bits / nruns;
        u.bits32 += r->bits32 / nruns;
        u.bits32_ref += r0->bits32 / nruns;
        u.kl += r->kl / nruns;
        u.dce += r->dce / nruns;
        d[i] = r->kl - r0->kl;
        u.d_mean += d[i] / nruns;
        if (d[i] > u.d_max) u.d_max = d[i];
        u.worse += d[i] > 0;
        if (r->top1 < u.top1_min) u.top1_min = r->top1;
        u.readable &= r->readable;
    }
    uint64_t s = 0x5EED;
    for (int b = 0; b < BOOT; b++) {
        double sum = 0;
        for (int i = 0; i < nruns; i++) sum += d[rng_next(&s) % (uint64_t)nruns];
        boot[b] = sum / nruns;
    }
    qsort(boot, BOOT, sizeof(double), cmp_double);
    u.d_lo = boot[(int)(0.025 * BOOT)];
    u.d_hi = boot[(int)(0.975 * BOOT) - 1];
    u.pass = u.d_hi <= 0 && u.d_max <= TOL_KL;
    free(d);
    free(boot);
    return u;
}

/* ------------------------------------------------------------------ protocol report */

static const char *tuning_seqs[] = { "story_prompt", "greedy_512", "sampled_t1_512" };
static const int tuning_prefixes[] = { 256, 384 };

/* Held-out openings (not in the tuning data), each sampled twice with its own seed and temperature. */
static const char *openings[] = { "Tom and his dog went to the park to play", "Mia found a big red box under her bed",
                                  "The sun was hot and the children wanted to swim", "Lily wanted to bake a cake for her mom",
                                  "A small cat saw a shiny ball in the grass" };
static const double temps[] = { 0.8, 1.0, 1.2, 0.9, 1.1, 1.0, 0.7, 1.1, 0.9, 1.3 };
static const int heldout_prefixes[] = { 128, 256, 384, 448 };
enum { HELD_SEQ = 10, HELD_LEN = 512 };

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">%s</text>\n", x, y, anchor, size, s);
}

/* Rate-distortion plot: mean held-out KL (log scale) against mean bits per element. */
static void write_svg(const char *path, const config_t *cf, const summary_t *u, int nconf)
{
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "quality: cannot write %s: %s\n", path, strerror(errno)); return; }
    const double W = 720, H = 440, x0 = 70, x1 = W - 20, y0 = H - 50, y1 = 30;
    double bmin = 1e9, bmax = 0, kmin = 1e9, kmax = 0;
    for (int i = 0; i < nconf; i++) {
        if (u[i].bits < bmin) bmin = u[i].bits;
        if (u[i].bits > bmax) bmax = u[i].bits;
        if (u[i].kl < kmin) kmin = u[i].kl;
        if (u[i].kl > kmax) kmax = u[i].kl;
    }
    bmin = floor(bmin * 2) / 2; bmax = ceil(bmax * 2) / 2;
    const double lk0 = floor(log10(kmin)), lk1 = ceil(log10(kmax));
#define X(b) (x0 + ((b) - bmin) / (bmax - bmin) * (x1 - x0))
#define Y(k) (y0 - (log10(k) - lk0) / (lk1 - lk0) * (y0 - y1))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\">\n"
               "<!-- SPDX-License-Identifier: BSD-3-Clause -->\n<!-- Generated by make quality-table (bench/quality) -->\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<path d=\"M%.1f %.1f V%.1f H%.1f\" stroke=\"black\" fill=\"none\"/>\n", x0, y1, y0, x1);
    char s[96];
    for (double b = bmin; b <= bmax + 1e-9; b += 0.5) {
        fprintf(f, "<path d=\"M%.1f %.1f v5\" stroke=\"black\"/>\n", X(b), y0);
        snprintf(s, sizeof(s), "%.1f", b);
        svg_text(f, X(b), y0 + 18, "middle", 11, s);
    }
    for (double e = lk0; e <= lk1 + 1e-9; e += 1) {
        for (int m = 1; m < 10 && e + log10(m) <= lk1 + 1e-9; m++)
            fprintf(f, "<path d=\"M%.1f %.1f h%d\" stroke=\"%s\"/>\n", x0 - (m == 1 ? 5 : 3), Y(m * pow(10, e)), m == 1 ? 5 : 3,
                    m == 1 ? "black" : "gray");
        snprintf(s, sizeof(s), "1e%d", (int)e);
        svg_text(f, x0 - 8, Y(pow(10, e)) + 4, "end", 11, s);
    }
    svg_text(f, (x0 + x1) / 2, H - 12, "middle", 12, "bits per element (whole container), held-out mean");
    fprintf(f, "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\" font-size=\"12\">"
               "mean KL(exact || restored), nats</text>\n", (y0 + y1) / 2, (y0 + y1) / 2);
    svg_text(f, (x0 + x1) / 2, 18, "middle", 13, "stories260K, held-out runs: rate target vs fixed bins");
    /* Level 0's mean KL and 75 % of its size: the "25 % smaller at no worse KL" corner is below
     * and left of both dashed lines. */
    for (int i = 0; i < nconf; i++)
        if (cf[i].kind == CFG_LEVEL && cf[i].level == 0) {
            fprintf(f, "<path d=\"M%.1f %.1f H%.1f\" stroke=\"#2460a7\" stroke-dasharray=\"4 3\"/>\n", x0, Y(u[i].kl), x1);
            svg_text(f, x1 - 4, Y(u[i].kl) - 4, "end", 10, "level 0 (LMCache's default): mean KL");
            if (X(0.75 * u[i].bits) > x0) {
                fprintf(f, "<path d=\"M%.1f %.1f V%.1f\" stroke=\"gray\" stroke-dasharray=\"4 3\"/>\n", X(0.75 * u[i].bits), y1, y0);
                svg_text(f, X(0.75 * u[i].bits) + 4, y0 - 6, "start", 10, "75 % of level 0's size");
            }
        }
    /* The rate target as a line, then the points. */
    int first = 1;
    fprintf(f, "<path fill=\"none\" stroke=\"#c0392b\" stroke-width=\"1.5\" d=\"");
    for (int i = 0; i < nconf; i++)
        if (cf[i].kind == CFG_BITS) { fprintf(f, "%s%.1f %.1f ", first ? "M" : "L", X(u[i].bits), Y(u[i].kl)); first = 0; }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < nconf; i++) {
        const double x = X(u[i].bits), y = Y(u[i].kl);
        if (cf[i].kind == CFG_BITS) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#c0392b\"/>\n", x, y);
        else if (cf[i].kind == CFG_LEVEL) {
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#2460a7\"/>\n", x - 4, y - 4);
            svg_text(f, x + 6, y - 6, "start", 11, cf[i].name);
        } else if (cf[i].channel_keys)
            fprintf(f, "<path d=\"M%.1f %.1f l4 7 h-8 z\" fill=\"#27ae60\"/>\n", x, y - 4);
        else fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"none\" stroke=\"gray\"/>\n", x, y);
    }
    const double lx = x1 - 200, ly = y1 + 10;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#c0392b\"/>\n", lx, ly);
    svg_text(f, lx + 10, ly + 4, "start", 11, "rate target (--bits)");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#2460a7\"/>\n", lx - 4, ly + 12);
    svg_text(f, lx + 10, ly + 20, "start", 11, "named levels");
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"none\" stroke=\"gray\"/>\n", lx, ly + 32);
    svg_text(f, lx + 10, ly + 36, "start", 11, "fixed K/V bins, per-token keys");
    fprintf(f, "<path d=\"M%.1f %.1f l4 7 h-8 z\" fill=\"#27ae60\"/>\n", lx, ly + 44);
    svg_text(f, lx + 10, ly + 52, "start", 11, "per-channel keys");
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    fclose(f);
}

static void bins_desc(const config_t *c, int NL, char *s, size_t n)
{
    kvc_codec_params_t prm;
    uint32_t bins[2 * 64];
    if (c->kind == CFG_BITS) { snprintf(s, n, "chosen per layer"); return; }
    if (config_params(c, (size_t)NL, 1, 1, 1, &prm, bins)) { snprintf(s, n, "?"); return; }
    snprintf(s, n, "%u / %u", bins[0], bins[NL]);
}

/* The stated rules that pick levels 1-3 from the tuning candidates (index into cf, or -1):
 * 2: the smallest candidate "no worse" than level 0 (summarise's rule);
 * 1: of the candidates at most 95 % of level 0's size, the lowest mean KL;
 * 3: the smallest candidate whose paired mean KL difference is at most TOL_KL (upper 95 % bound). */
static void select_levels(const summary_t *u, int nconf, int first_candidate, int pick[4])
{
    pick[0] = 0;
    pick[1] = pick[2] = pick[3] = -1;
    for (int i = first_candidate; i < nconf; i++) {
        if (u[i].bits <= 0.95 * u[0].bits && (pick[1] < 0 || u[i].kl < u[pick[1]].kl)) pick[1] = i;
        if (u[i].pass && (pick[2] < 0 || u[i].bits < u[pick[2]].bits)) pick[2] = i;
        if (u[i].d_hi <= TOL_KL && (pick[3] < 0 || u[i].bits < u[pick[3]].bits)) pick[3] = i;
    }
}

static int run_set(const model_t *m, kvc_context_t *ctx, const run_t *runs, int nruns, const config_t *cf, int nconf, int with32,
                   result_t *res, int verbose)
{
    result_t *one = malloc(sizeof(result_t) * nconf);
    for (int r = 0; r < nruns; r++) {
        if (eval_run(m, ctx, &runs[r], cf, nconf, with32, one, verbose)) { free(one); return -1; }
        for (int c = 0; c < nconf; c++) res[(size_t)c * nruns + r] = one[c];
        fprintf(stderr, "\rquality: %d / %d runs", r + 1, nruns);
    }
    fprintf(stderr, "\n");
    free(one);
    return 0;
}

static void row(FILE *f, const config_t *c, const summary_t *u, int NL, int with32)
{
    char b5[32];
    bins_desc(c, NL, b5, sizeof(b5));
    fprintf(f, "| `%s` | %s | %.3f | %+.1f %%", c->name, b5, u->bits, 100 * (u->bits / u->bits_ref - 1));
    if (with32) fprintf(f, " | %+.1f %%", 100 * (u->bits32 / u->bits32_ref - 1));
    fprintf(f, " | %.4f | %+.4f [%+.4f, %+.4f] | %+.4f | %d / %d | %+.4f | %.3f | %s |\n", u->kl, u->d_mean, u->d_lo, u->d_hi, u->d_max,
            u->worse, u->n, u->dce, u->top1_min, u->pass ? "**yes**" : "no");
}

static int protocol(const model_t *m, const gguf_t *g, kvc_context_t *ctx, const char *data_dir, const char *md_path,
                    const char *svg_path)
{
    /* Tuning set: the three stored sequences x prefixes 256 and 384. */
    run_t tune[6];
    int nt = 0;
    int32_t *tseq[3];
    for (int s = 0; s < 3; s++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s_tokens.npy", data_dir, tuning_seqs[s]);
        int n;
        if (!(tseq[s] = load_tokens(path, &n))) return 1;
        for (int i = 0; i < n; i++)
            if (tseq[s][i] < 0 || tseq[s][i] >= m->vocab) { fprintf(stderr, "quality: %s: token out of range\n", path); return 1; }
        for (int p = 0; p < 2; p++) {
            tune[nt] = (run_t){ tseq[s], n, tuning_prefixes[p], "" };
            snprintf(tune[nt].name, sizeof(tune[nt].name), "%s@%d", tuning_seqs[s], tuning_prefixes[p]);
            nt++;
        }
    }
    /* Candidates: level 0 (the reference), then a K x V grid of per-token bins. */
    static const unsigned gk[] = { 24, 28, 32, 36, 40, 46, 54, 62 }, gv[] = { 4, 6, 8, 12, 16, 24, 32 };
    config_t cand[1 + 8 * 7];
    int nc = 0;
    parse_config("level0", &cand[nc++]);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 7; j++) {
            char s[32];
            snprintf(s, sizeof(s), "k%uv%u", gk[i], gv[j]);
            parse_config(s, &cand[nc++]);
        }
    result_t *tres = calloc((size_t)nc * nt, sizeof(*tres));
    fprintf(stderr, "quality: tuning set, %d candidates\n", nc);
    if (run_set(m, ctx, tune, nt, cand, nc, 0, tres, 0)) return 1;
    summary_t *tu = calloc((size_t)nc, sizeof(*tu));
    for (int i = 0; i < nc; i++) tu[i] = summarise(tres, nt, i, 0);
    int pick[4];
    select_levels(tu, nc, 1, pick);

    /* Held-out set: 10 sampled sequences x prefixes 128, 256, 384, 448. */
    run_t held[HELD_SEQ * 4];
    int nh = 0;
    int32_t *hseq[HELD_SEQ];
    for (int s = 0; s < HELD_SEQ; s++) {
        hseq[s] = generate(m, g, openings[s % 5], temps[s], 1000 + (uint64_t)s, HELD_LEN);
        for (int p = 0; p < 4; p++) {
            held[nh] = (run_t){ hseq[s], HELD_LEN, heldout_prefixes[p], "" };
            snprintf(held[nh].name, sizeof(held[nh].name), "heldout%d_t%.1f@%d", s, temps[s], heldout_prefixes[p]);
            nh++;
        }
    }
    static const char *hnames[] = { "level0", "level1", "level2", "level3", "pc:k16v8", "pc:k24v6", "pc:k24v8", "pc:k32v8",
                                    "pc:k32v16", "bits:2.6", "bits:2.9", "bits:3.2", "bits:3.5", "bits:3.8", "bits:4.1",
                                    "bits:4.4", "bits:4.7" };
    static const unsigned hk[] = { 24, 32, 36, 46, 62 }, hv[] = { 4, 6, 8, 12, 16 };
    const int nfix_levels = 4, nnamed = (int)(sizeof(hnames) / sizeof(*hnames));
    config_t hc[sizeof(hnames) / sizeof(*hnames) + 5 * 5];
    int nhc = 0;
    for (int i = 0; i < nnamed; i++) parse_config(hnames[i], &hc[nhc++]);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            char s[32];
            snprintf(s, sizeof(s), "k%uv%u", hk[i], hv[j]);
            parse_config(s, &hc[nhc++]);
        }
    result_t *hres = calloc((size_t)nhc * nh, sizeof(*hres));
    fprintf(stderr, "quality: held-out set, %d configurations\n", nhc);
    if (run_set(m, ctx, held, nh, hc, nhc, 1, hres, 0)) return 1;
    summary_t *hu = calloc((size_t)nhc, sizeof(*hu));
    for (int i = 0; i < nhc; i++) hu[i] = summarise(hres, nh, i, 0);
    for (int i = 0; i < nhc; i++) {
        char b32[32] = "null"; /* measured for the levels only */
        if (isfinite(hu[i].bits32)) snprintf(b32, sizeof(b32), "%.4f", hu[i].bits32 / hu[i].bits32_ref);
        printf("{\"heldout\":\"%s\",\"bits\":%.4f,\"bits_vs_level0\":%.4f,\"bits32_vs_level0\":%s,\"kl_mean\":%.6f,\"dkl_mean\":%.6f,"
               "\"dkl_ci\":[%.6f,%.6f],\"dkl_max\":%.6f,\"worse\":%d,\"runs\":%d,\"dce_mean\":%.5f,\"top1_min\":%.4f,\"no_worse\":%s}\n",
               hc[i].name, hu[i].bits, hu[i].bits / hu[i].bits_ref, b32, hu[i].kl, hu[i].d_mean,
               hu[i].d_lo, hu[i].d_hi, hu[i].d_max, hu[i].worse, hu[i].n, hu[i].dce, hu[i].top1_min, hu[i].pass ? "true" : "false");
    }

    FILE *f = fopen(md_path, "w");
    if (!f) { fprintf(stderr, "quality: cannot write %s: %s\n", md_path, strerror(errno)); return 1; }
    fprintf(f, "<!-- SPDX-License-Identifier: BSD-3-Clause -->\n<!-- Generated by `make quality-table` (bench/quality/quality.c "
               "--protocol); do not edit by hand. -->\n");
    fprintf(f, "# CacheGen quality on held-out data (stories260K)\n\n"
               "Protocol (bench/quality/README.md): levels are chosen on the **tuning set** (the 3 stored sequences x prefixes "
               "256, 384: %d runs) and reported here on the **held-out set** only: %d runs (%d sequences sampled by the model "
               "from %d new openings at temperatures 0.7-1.3 with their own seeds, x prefixes 128, 256, 384, 448; the next 128 "
               "tokens, or up to token 511, are scored). KL is the primary metric: mean KL(exact || restored) per next token, "
               "nats. Each configuration is compared with level 0 (LMCache's default) run by run: the paired KL difference, "
               "its mean with a bootstrap 95 %% interval (%d resamples), the worst run and how many runs are worse. "
               "**No worse** means: the interval's upper end <= 0 and no run worse by more than %.3f nats.\n\n",
            nt, nh, HELD_SEQ, 5, BOOT, TOL_KL);
    fprintf(f, "Sizes are whole containers (scales, counts, lengths, header) in bits per element. \"vs level 0, 32 layers\" "
               "codes the same tokens as a 32-layer cache (layer l holds the model's layer l mod 5), where LMCache's default "
               "gives keys 32 bins in layers 0-9 and 16 after, values 32 in layers 0-1 and 16 after; on this 5-layer model it "
               "is 32 everywhere. Bins are listed as K / V of a layer LMCache codes with 32.\n\n");
    fprintf(f, "## Named levels (held-out)\n\n"
               "| config | K / V bins | bits/elem | vs level 0, 5 layers | vs level 0, 32 layers | KL mean | paired dKL mean [95 %% CI] "
               "| worst run dKL | runs worse | dCE mean | top-1 min | no worse |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nfix_levels; i++) row(f, &hc[i], &hu[i], m->layers, 1);
    fprintf(f, "\nTuning-set choice (rules in quality.c `select_levels`: 1 = lowest KL at <= 95 %% of level 0's size, 2 = smallest "
               "no worse, 3 = smallest with the paired mean's upper bound <= %.3f): ", TOL_KL);
    int mismatch = 0;
    for (int l = 1; l <= 3; l++) {
        char want[32] = "none", have[32];
        if (pick[l] >= 0) bins_desc(&cand[pick[l]], m->layers, want, sizeof(want));
        bins_desc(&hc[l], m->layers, have, sizeof(have));
        fprintf(f, "level %d = %s%s", l, pick[l] >= 0 ? cand[pick[l]].name : "none", l < 3 ? ", " : ".");
        if (strcmp(want, have)) mismatch = 1;
    }
    fprintf(f, "%s\n\n", mismatch ? " **The library's levels differ from this choice.**" : " The library's levels are these.");
    /* The 25 % question, answered on held-out data over every per-token configuration measured. */
    int best25 = -1;
    for (int i = 0; i < nhc; i++)
        if (hc[i].kind != CFG_BITS && !hc[i].channel_keys && hu[i].pass && hu[i].bits <= 0.75 * hu[i].bits_ref &&
            (best25 < 0 || hu[i].bits < hu[best25].bits))
            best25 = i;
    if (best25 >= 0)
        fprintf(f, "At least 25 %% smaller than level 0 and no worse on held-out data: `%s` (%+.1f %%).\n\n", hc[best25].name,
                100 * (hu[best25].bits / hu[best25].bits_ref - 1));
    else
        fprintf(f, "**No per-token configuration measured here that is at least 25 %% smaller than level 0 is no worse on the "
                   "held-out data** (tables below; the curve is [quality_rd.svg](quality_rd.svg)).\n\n");
    fprintf(f, "## Rate target (`--bits`, held-out)\n\n"
               "Each target is compared with the fixed configuration (named level or K x V grid, per-token keys) of lowest "
               "held-out mean KL among those no larger on average: a choice made on the held-out data itself, so it favours "
               "the fixed bins. \"Fixed envelope\" is the lower convex envelope of the fixed configurations' (bits, mean KL) points "
               "at the target's size: what mixing two fixed configurations would give.\n\n| target | bits/elem | KL mean | best fixed at "
               "<= size | its bits | its KL | rate - fixed: paired dKL mean [95 %% CI] | at or below | fixed envelope KL |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nhc; i++) {
        if (hc[i].kind != CFG_BITS) continue;
        int bf = -1;
        for (int j = 0; j < nhc; j++)
            if (hc[j].kind != CFG_BITS && !hc[j].channel_keys && hu[j].bits <= hu[i].bits && (bf < 0 || hu[j].kl < hu[bf].kl)) bf = j;
        /* Lower convex envelope at x: the lowest chord between fixed points on either side of x. */
        const double x = hu[i].bits;
        double env = INFINITY;
        for (int a = 0; a < nhc; a++)
            for (int b = 0; b < nhc; b++) {
                if (hc[a].kind == CFG_BITS || hc[a].channel_keys || hc[b].kind == CFG_BITS || hc[b].channel_keys) continue;
                if (hu[a].bits > x || hu[b].bits < x) continue;
                const double w = hu[b].bits > hu[a].bits ? (x - hu[a].bits) / (hu[b].bits - hu[a].bits) : 0,
                             k = hu[a].kl + w * (hu[b].kl - hu[a].kl);
                if (k < env) env = k;
            }
        if (bf < 0) { fprintf(f, "| `%s` | %.3f | %.4f | none as small | | | | | |\n", hc[i].name, hu[i].bits, hu[i].kl); continue; }
        const summary_t v = summarise(hres, nh, i, bf);
        fprintf(f, "| `%s` | %.3f | %.4f | `%s` | %.3f | %.4f | %+.4f [%+.4f, %+.4f] | %s | ", hc[i].name, hu[i].bits, hu[i].kl,
                hc[bf].name, hu[bf].bits, hu[bf].kl, v.d_mean, v.d_lo, v.d_hi,
                v.d_hi <= 0 ? "yes" : v.d_mean <= 0 ? "mean only" : "no");
        if (isfinite(env)) fprintf(f, "%.4f (%+.0f %%) |\n", env, 100 * (hu[i].kl / env - 1));
        else fprintf(f, "none this large |\n");
    }
    fprintf(f, "\n## Per-channel keys (held-out)\n\n| config | K / V bins | bits/elem | vs level 0 | KL mean | paired dKL mean [95 %% CI] "
               "| worst run dKL | runs worse | dCE mean | top-1 min | no worse |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nhc; i++)
        if (hc[i].channel_keys) row(f, &hc[i], &hu[i], m->layers, 0);
    fprintf(f, "\n## Fixed K x V grid, per-token keys (held-out)\n\n| config | K / V bins | bits/elem | vs level 0 | KL mean | paired "
               "dKL mean [95 %% CI] | worst run dKL | runs worse | dCE mean | top-1 min | no worse |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nhc; i++)
        if (hc[i].kind == CFG_BINS && !hc[i].channel_keys) row(f, &hc[i], &hu[i], m->layers, 0);
    fprintf(f, "\n## Tuning set (%d runs): the candidates levels are chosen from\n\n| config | K / V bins | bits/elem | vs level 0 | "
               "KL mean | paired dKL mean [95 %% CI] | worst run dKL | runs worse | dCE mean | top-1 min | no worse |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n", nt);
    for (int i = 0; i < nc; i++) row(f, &cand[i], &tu[i], m->layers, 0);
    fclose(f);
    write_svg(svg_path, hc, hu, nhc);
    for (int s = 0; s < 3; s++) free(tseq[s]);
    for (int s = 0; s < HELD_SEQ; s++) free(hseq[s]);
    free(tres); free(tu); free(hres); free(hu);
    return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    const char *model_path = NULL, *data_dir = NULL, *md = NULL, *svg = NULL;
    config_t configs[64];
    int nconf = 0, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data_dir = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc && nconf < 64) {
            if (parse_config(argv[++i], &configs[nconf++])) return 2;
        } else if (!strcmp(argv[i], "--check-nll")) check = 1;
        else if (!strcmp(argv[i], "--protocol") && i + 2 < argc) { md = argv[++i]; svg = argv[++i]; }
        else {
            fprintf(stderr, "usage: %s --model stories260K.gguf --data DIR [--check-nll] [--config SPEC]...\n"
                            "       %s --model stories260K.gguf --data DIR --protocol TABLE.md CURVE.svg\n"
                            "  SPEC: default | levelN | kKvV (bins per plane, e.g. k46v8) | pc:kKvV | bits:B\n", argv[0], argv[0]);
            return 2;
        }
    }
    if (!model_path || !data_dir) {
        fprintf(stderr, "quality: --model and --data are required (see bench/quality/README.md)\n");
        return 2;
    }
    gguf_t g;
    model_t m;
    if (gguf_load(model_path, &g) || model_init(&g, &m)) return 1;
    if (md && !g.nvocab) { fprintf(stderr, "quality: %s has no tokenizer.ggml.tokens (needed for the held-out openings)\n", model_path); return 1; }
    /* One codec thread: the bench is serial, and idle OpenMP teams only spin on a shared machine
     * (the containers are the same bytes for every thread count). */
    kvc_context_t *ctx;
    const kvc_context_params_t cp = { .field_mask = KVC_CONTEXT_PARAM_NUM_THREADS, .num_threads = 1 };
    if (kvc_context_create(&cp, &ctx) != KVC_OK) { fprintf(stderr, "quality: %s\n", kvc_last_error()); return 1; }
    int rc = 0;
    if (md) rc = protocol(&m, &g, ctx, data_dir, md, svg);
    else {
        if (!nconf) parse_config("level0", &configs[nconf++]);
        run_t runs[6];
        int32_t *seq[3];
        int nr = 0;
        for (int s = 0; s < 3 && !rc; s++) {
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s_tokens.npy", data_dir, tuning_seqs[s]);
            int n;
            if (!(seq[s] = load_tokens(path, &n))) return 1;
            for (int i = 0; i < n; i++)
                if (seq[s][i] < 0 || seq[s][i] >= m.vocab) { fprintf(stderr, "quality: %s: token %d out of range\n", path, seq[s][i]); return 1; }
            if (check) {
                /* The whole sequence once: mean next-token loss (README.md gives it per sequence). */
                float *kc = calloc((size_t)m.layers * n * m.kv_dim, sizeof(float)), *vc = calloc((size_t)m.layers * n * m.kv_dim, sizeof(float));
                float *lg = malloc(sizeof(float) * (size_t)n * m.vocab);
                double *lp = malloc(sizeof(double) * (size_t)m.vocab), nll = 0;
                forward(&m, seq[s], 0, n, kc, vc, n, lg);
                for (int t = 0; t + 1 < n; t++) { log_softmax(lg + (size_t)t * m.vocab, m.vocab, lp); nll -= lp[seq[s][t + 1]]; }
                printf("{\"check\":\"%s\",\"mean_nll\":%.4f}\n", tuning_seqs[s], nll / (n - 1));
                free(kc); free(vc); free(lg); free(lp);
            }
            for (int p = 0; p < 2; p++) {
                runs[nr] = (run_t){ seq[s], n, tuning_prefixes[p], "" };
                snprintf(runs[nr].name, sizeof(runs[nr].name), "%s@%d", tuning_seqs[s], tuning_prefixes[p]);
                nr++;
            }
        }
        result_t *res = calloc((size_t)nconf * nr, sizeof(*res));
        rc = run_set(&m, ctx, runs, nr, configs, nconf, 0, res, 1) ? 1 : 0;
        /* Per config, paired with the first one (the reference). */
        for (int ci = 0; !rc && ci < nconf; ci++) {
            const summary_t u = summarise(res, nr, ci, 0);
            printf("{\"summary\":\"%s\",\"bits_per_element\":%.4f,\"bits_vs_first\":%.4f,\"kl_mean\":%.6f,\"dkl_mean\":%.6f,"
                   "\"dkl_ci\":[%.6f,%.6f],\"dkl_max\":%.6f,\"dce_mean\":%.5f,\"top1_min\":%.4f,\"lmcache_readable\":%s,"
                   "\"no_worse_than_first\":%s}\n",
                   configs[ci].name, u.bits, u.bits / u.bits_ref, u.kl, u.d_mean, u.d_lo, u.d_hi, u.d_max, u.dce, u.top1_min,
                   u.readable ? "true" : "false", u.pass ? "true" : "false");
        }
        free(res);
        for (int s = 0; s < nr / 2; s++) free(seq[s]);
    }
    kvc_context_destroy(ctx);
    free(m.l); free(g.tensors); free(g.piece); free(g.piece_len); free(g.data);
    return rc;
}
