/* SPDX-License-Identifier: BSD-3-Clause */
/* Backend discovery: the CPU backend is built in; GPU backends are modules opened with dlopen only
 * when hwloc shows a GPU of their vendor (or when forced / asked to load all), ABI-checked, then
 * probed. Selection: a forced backend must start or the context fails; otherwise the usable
 * backend with the highest priority wins. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "internal.h"

typedef struct {
    const char *name;
    uint16_t pci_vendor;
    const char *vendor_name;
} module_spec_t;

static const module_spec_t module_specs[] = {
    { "cuda", 0x10de, "NVIDIA" },
    { "hip", 0x1002, "AMD" },
};

/* ---- stubs: every unsupported op slot resolves to one of these (never NULL) ---- */
#define UNSUP(name) return kvc_error(KVC_ERR_UNSUPPORTED, "the selected backend does not implement %s", name)
static kvc_status_t st_reg(kvc_backend_ctx_t *b, void *p, size_t n) { (void)b; (void)p; (void)n; UNSUP("host register/unregister"); }
static kvc_status_t st_dalloc(kvc_backend_ctx_t *b, size_t n, void **o) { (void)b; (void)n; (void)o; UNSUP("device_alloc"); }
static kvc_status_t st_dfree(kvc_backend_ctx_t *b, void *p) { (void)b; (void)p; UNSUP("device_free"); }
static kvc_status_t st_mcpy(kvc_backend_ctx_t *b, void *d, const void *s, size_t n) { (void)b; (void)d; (void)s; (void)n; UNSUP("memcpy_sync"); }
static kvc_status_t st_split(kvc_backend_ctx_t *b, const struct kvc_copy_split *a) { (void)b; (void)a; UNSUP("memcpy_split"); }
static kvc_status_t st_batch(kvc_backend_ctx_t *b, const struct kvc_batched_copy *a) { (void)b; (void)a; UNSUP("batched_memcpy"); }
static kvc_status_t st_sync(kvc_backend_ctx_t *b, kvc_stream_t s) { (void)b; (void)s; UNSUP("stream_synchronize"); }
static kvc_status_t st_pci(kvc_backend_ctx_t *b, int d, char *buf, size_t n) { (void)b; (void)d; (void)buf; (void)n; UNSUP("pci_bus_id"); }
static kvc_status_t st_tok(kvc_backend_ctx_t *b, const struct kvc_token_plan *p) { (void)b; (void)p; UNSUP("transfer_tokens"); }
static kvc_status_t st_blk(kvc_backend_ctx_t *b, const struct kvc_block_plan *p) { (void)b; (void)p; UNSUP("transfer_blocks"); }
static kvc_status_t st_cdf(kvc_backend_ctx_t *b, const struct kvc_cdf_args *a) { (void)b; (void)a; UNSUP("cdf"); }
static kvc_status_t st_enc(kvc_backend_ctx_t *b, const struct kvc_encode_args *a) { (void)b; (void)a; UNSUP("encode"); }
static kvc_status_t st_dec(kvc_backend_ctx_t *b, const struct kvc_decode_args *a) { (void)b; (void)a; UNSUP("decode"); }
static kvc_status_t st_decp(kvc_backend_ctx_t *b, const struct kvc_decode_packed_args *a) { (void)b; (void)a; UNSUP("decode_packed"); }
static kvc_status_t st_q(kvc_backend_ctx_t *b, const struct kvc_quant_args *a) { (void)b; (void)a; UNSUP("quantise/dequantise"); }
static kvc_status_t st_rope(kvc_backend_ctx_t *b, const struct kvc_rope_args *a) { (void)b; (void)a; UNSUP("rope_k_fused"); }
static kvc_status_t st_ropec(kvc_backend_ctx_t *b, const struct kvc_rope_cache_args *a) { (void)b; (void)a; UNSUP("rope_cache_build"); }
static kvc_status_t st_roped(kvc_backend_ctx_t *b, const struct kvc_rope_delta_args *a) { (void)b; (void)a; UNSUP("rope_k_delta"); }
static kvc_status_t st_cb(kvc_backend_ctx_t *b, kvc_stream_t s, kvc_host_fn_t f, void *a) { (void)b; (void)s; (void)f; (void)a; UNSUP("launch_host_callback"); }
static kvc_status_t st_kind(kvc_backend_ctx_t *b, const void *p, int *k) { (void)b; (void)p; (void)k; UNSUP("pointer_kind"); }
static kvc_status_t st_plan(kvc_backend_ctx_t *b, const struct kvc_plan_args *a) { (void)b; (void)a; UNSUP("run_plan"); }
static kvc_status_t st_tokp(kvc_backend_ctx_t *b, const struct kvc_token_plan *p, const struct kvc_row_parts *r) { (void)b; (void)p; (void)r; UNSUP("transfer_tokens_parts"); }
static kvc_status_t st_blkp(kvc_backend_ctx_t *b, const struct kvc_block_plan *p, const struct kvc_row_parts *r) { (void)b; (void)p; (void)r; UNSUP("transfer_blocks_parts"); }
static kvc_status_t st_renc(kvc_backend_ctx_t *b, const struct kvc_rans_encode_args *a) { (void)b; (void)a; UNSUP("rans_encode"); }
static kvc_status_t st_rdec(kvc_backend_ctx_t *b, const struct kvc_rans_decode_args *a) { (void)b; (void)a; UNSUP("rans_decode"); }
static kvc_status_t st_rtab(kvc_backend_ctx_t *b, const struct kvc_rans_tables_args *a) { (void)b; (void)a; UNSUP("rans_tables"); }
#undef UNSUP

static const kvc_backend_ops_t stub_ops = {
    .host_register = st_reg, .host_unregister = st_reg, .device_alloc = st_dalloc, .device_free = st_dfree,
    .memcpy_sync = st_mcpy, .memcpy_split = st_split, .batched_memcpy = st_batch, .stream_synchronize = st_sync,
    .pci_bus_id = st_pci, .transfer_tokens = st_tok, .transfer_blocks = st_blk, .cg_cdf = st_cdf,
    .cg_encode = st_enc, .cg_decode = st_dec, .cg_decode_packed = st_decp, .quantise = st_q, .dequantise = st_q,
    .rope_k_fused = st_rope, .rope_cache_build = st_ropec, .rope_k_delta = st_roped, .launch_host_callback = st_cb,
    .pointer_kind = st_kind, .run_plan = st_plan, .transfer_tokens_parts = st_tokp, .transfer_blocks_parts = st_blkp,
    .rans_encode = st_renc, .rans_decode = st_rdec, .rans_tables = st_rtab,
};

void kvc_ops_resolve(kvc_backend_ops_t *out, const kvc_backend_t *desc)
{
    /* Slots beyond what the backend's struct_size covers (an older module) keep the stub. */
    typedef void (*fn_t)(void);
    const size_t nslots = sizeof(kvc_backend_ops_t) / sizeof(fn_t);
    const size_t ops_off = offsetof(kvc_backend_t, ops);
    size_t have = 0;
    if (desc && desc->struct_size > ops_off) have = (desc->struct_size - ops_off) / sizeof(fn_t);
    if (have > nslots) have = nslots;
    fn_t *dst = (fn_t *)out;
    const fn_t *stub = (const fn_t *)&stub_ops;
    const fn_t *src = desc ? (const fn_t *)&desc->ops : NULL;
    for (size_t i = 0; i < nslots; i++) dst[i] = (i < have && src[i]) ? src[i] : stub[i];
}

/* The transfer_*_parts slots are optional: without them the core runs one plan per part. */
int kvc_ops_have_parts(const kvc_backend_ops_t *ops)
{
    return ops->transfer_tokens_parts != st_tokp && ops->transfer_blocks_parts != st_blkp;
}

/* ---- module search ---- */

/* Directory of libkvcore itself + "/kvcore": makes a relocated install find its modules. In a
 * build tree (libkvcore in .libs/), libtool puts the modules beside the library: .libs itself is
 * searched too. */
static int self_module_dir(char *buf, size_t len)
{
    Dl_info info;
    if (!dladdr((void *)kvc_ops_resolve, &info) || !info.dli_fname) return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return -1;
    const int n = (int)(slash - info.dli_fname);
    if (n >= 6 && !strncmp(slash - 6, "/.libs", 6))
        snprintf(buf, len, "%.*s/" PACKAGE ":%.*s", n, info.dli_fname, n, info.dli_fname);
    else
        snprintf(buf, len, "%.*s/" PACKAGE, n, info.dli_fname);
    return 0;
}

/* Find kvcore_<name>.so in a ':'-separated path list; returns 1 and fills out when found, else 0
 * and fills out with the first candidate (for messages). */
static int find_module(const char *dirs, const char *name, char *out, size_t len)
{
    char first[PATH_MAX] = "";
    const char *p = dirs;
    while (p && *p) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0) {
            char cand[PATH_MAX];
            snprintf(cand, sizeof(cand), "%.*s/kvcore_%s.so", (int)n, p, name);
            if (!first[0]) snprintf(first, sizeof(first), "%s", cand);
            if (access(cand, R_OK) == 0) {
                snprintf(out, len, "%s", cand);
                return 1;
            }
        }
        p = colon ? colon + 1 : NULL;
    }
    snprintf(out, len, "%s", first);
    return 0;
}

static void load_module(kvc_context_t *ctx, kvc_backend_slot_t *s, const char *path)
{
    dlerror();
    /* RTLD_LOCAL: a module's runtime symbols never leak into the application's namespace. */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        snprintf(s->reason, sizeof(s->reason), "dlopen failed: %s", e ? e : "unknown error");
        return;
    }
    kvc_backend_entry_fn entry = (kvc_backend_entry_fn)dlsym(dl, KVC_BACKEND_ENTRY_SYMBOL);
    const kvc_backend_t *desc = entry ? entry() : NULL;
    if (!desc) {
        snprintf(s->reason, sizeof(s->reason), "module has no %s symbol", KVC_BACKEND_ENTRY_SYMBOL);
        dlclose(dl);
        return;
    }
    if (desc->abi_version != KVC_BACKEND_ABI_VERSION) {
        snprintf(s->reason, sizeof(s->reason), "ABI mismatch: module built for backend ABI %u, this kvcore needs %u",
                 desc->abi_version, KVC_BACKEND_ABI_VERSION);
        s->loaded = -1; /* marks an ABI rejection */
        dlclose(dl);
        return;
    }
    if (desc->struct_size < offsetof(kvc_backend_t, ops) || !desc->probe || !desc->init || !desc->fini || !desc->name) {
        snprintf(s->reason, sizeof(s->reason), "malformed backend descriptor (struct_size %u)", desc->struct_size);
        s->loaded = -1;
        dlclose(dl);
        return;
    }
    s->dl = dl;
    s->desc = desc;
    s->loaded = 1;
    s->priority = desc->priority;
    int n = 0;
    char why[200] = "";
    kvc_status_t st = desc->probe(&ctx->svc, &n, why, sizeof(why));
    if (st != KVC_OK) n = 0;
    s->num_devices = n;
    if (n > 0) snprintf(s->reason, sizeof(s->reason), "loaded, %d device%s", n, n == 1 ? "" : "s");
    else snprintf(s->reason, sizeof(s->reason), "loaded, no device: %s", why[0] ? why : kvc_status_string(st));
}

kvc_status_t kvc_backends_discover(kvc_context_t *ctx, const char *forced, const char *module_path, int load_all)
{
    char dirs[3 * PATH_MAX + 3];
    char self_dir[2 * PATH_MAX + 1];
    if (module_path && *module_path) snprintf(dirs, sizeof(dirs), "%s", module_path);
    else if (self_module_dir(self_dir, sizeof(self_dir)) == 0 && !strcmp(self_dir, KVC_MODULE_DIR))
        snprintf(dirs, sizeof(dirs), "%s", self_dir); /* installed where configure said: one directory, once */
    else if (self_module_dir(self_dir, sizeof(self_dir)) == 0) snprintf(dirs, sizeof(dirs), "%s:%s", self_dir, KVC_MODULE_DIR);
    else snprintf(dirs, sizeof(dirs), "%s", KVC_MODULE_DIR);

    /* Slot 0: the CPU backend, always usable. */
    kvc_backend_slot_t *cpu = &ctx->slots[0];
    memset(cpu, 0, sizeof(*cpu));
    cpu->name = "cpu";
    cpu->priority = kvc_cpu_backend.priority;
    cpu->desc = &kvc_cpu_backend;
    snprintf(cpu->origin, sizeof(cpu->origin), "built-in");
    cpu->built = cpu->loaded = 1;
    cpu->num_devices = 1;
    snprintf(cpu->reason, sizeof(cpu->reason), "built in, always available");
    ctx->num_slots = 1;

    for (size_t i = 0; i < sizeof(module_specs) / sizeof(module_specs[0]); i++) {
        const module_spec_t *m = &module_specs[i];
        kvc_backend_slot_t *s = &ctx->slots[ctx->num_slots++];
        memset(s, 0, sizeof(*s));
        s->name = m->name;
        s->built = find_module(dirs, m->name, s->origin, sizeof(s->origin));
        char bus[16] = "";
        const int seen = kvc_topology_has_vendor(ctx, m->pci_vendor, bus, sizeof(bus));
        const int is_forced = forced && !strcmp(forced, m->name);
        if (!s->built) {
            snprintf(s->reason, sizeof(s->reason), "module not found (looked for kvcore_%s.so in %.200s)", m->name, dirs);
            continue;
        }
        if (!seen && !is_forced && !load_all) {
            snprintf(s->reason, sizeof(s->reason), "not loaded: hwloc shows no %s GPU (PCI vendor 0x%04x)",
                     m->vendor_name, m->pci_vendor);
            continue;
        }
        load_module(ctx, s, s->origin);
        if (seen && s->loaded == 1 && s->num_devices == 0) {
            /* hwloc saw the vendor's PCI device but the runtime has no compute device there
             * (e.g. an onboard display chip): the vendor id alone is not trusted. */
            char r[sizeof(s->reason)];
            snprintf(r, sizeof(r), "%s (hwloc shows %s PCI device %s)", s->reason, m->vendor_name, bus);
            memcpy(s->reason, r, sizeof(r));
        }
    }
    return KVC_OK;
}

void kvc_backends_unload(kvc_context_t *ctx)
{
    for (int i = 0; i < ctx->num_slots; i++) {
        if (ctx->slots[i].dl) dlclose(ctx->slots[i].dl);
        ctx->slots[i].dl = NULL;
        ctx->slots[i].desc = NULL;
    }
}
