/* SPDX-License-Identifier: BSD-3-Clause */
/* A fake backend module for the loader tests. FAKE_ABI_VERSION overrides the ABI it claims;
 * the device count comes from KVC_FAKE_NDEV (default 0). It leaves most op slots NULL so tests can
 * check that the core resolves them to stubs. */
#include <stdlib.h>
#include <string.h>

#include <kvcore/backend.h>

#ifndef FAKE_ABI_VERSION
#define FAKE_ABI_VERSION KVC_BACKEND_ABI_VERSION
#endif

struct kvc_backend_ctx {
    int device;
};

static kvc_status_t fake_probe(const kvc_backend_services_t *svc, int *n, char *why, size_t len)
{
    (void)svc;
    const char *v = getenv("KVC_FAKE_NDEV");
    *n = v ? atoi(v) : 0;
    if (*n == 0 && why && len) strncpy(why, "fake runtime reports 0 devices", len - 1);
    return KVC_OK;
}

static kvc_status_t fake_init(const kvc_backend_services_t *svc, int device, kvc_backend_ctx_t **out)
{
    (void)svc;
    kvc_backend_ctx_t *b = calloc(1, sizeof(*b));
    if (!b) return KVC_ERR_NO_MEMORY;
    b->device = device;
    *out = b;
    return KVC_OK;
}

static void fake_fini(kvc_backend_ctx_t *b) { free(b); }

static kvc_status_t fake_pci(kvc_backend_ctx_t *b, int device, char *buf, size_t len)
{
    (void)b;
    (void)device;
    strncpy(buf, "0000:06:00.0", len);
    return KVC_OK;
}

static const kvc_backend_t fake = {
    .abi_version = FAKE_ABI_VERSION,
    .struct_size = sizeof(kvc_backend_t),
    .name = "fake",
    .priority = KVC_BACKEND_PRIORITY_CUDA,
    .probe = fake_probe,
    .init = fake_init,
    .fini = fake_fini,
    .ops = { .pci_bus_id = fake_pci },
};

KVC_API const kvc_backend_t *kvc_backend_entry(void) { return &fake; }
