/* SPDX-License-Identifier: BSD-3-Clause */
/* .safetensors images: kvc_safetensors_open_mem and every reader call on the archive, then
 * kvc_kvcache_load_mem, on arbitrary bytes. Invariants: no access outside the input; every tensor's
 * bytes lie inside the data section and match its shape; find() returns each tensor's own index;
 * metadata lookups agree with the metadata list; a loaded KV cache is a consistent [2, NL, T, D]
 * tensor. The last two bytes choose the loader's hints. */
#include "fuzz.h"

static void walk(const kvc_safetensors_t *arch, const uint8_t *data, size_t size)
{
    const size_t n = kvc_safetensors_count(arch);
    for (size_t i = 0; i < n; i++) {
        kvc_safetensors_info_t info;
        FUZZ_CHECK(kvc_safetensors_info(arch, i, &info) == KVC_OK, "info(%zu) of %zu failed", i, n);
        FUZZ_CHECK(info.offset <= size && info.nbytes <= size - info.offset, "tensor %zu [%zu, +%zu) outside %zu bytes",
                   i, info.offset, info.nbytes, size);
        size_t nbytes, found;
        FUZZ_CHECK(kvc_tensor_nbytes(info.dtype, info.ndim, info.shape, &nbytes) == KVC_OK && nbytes == info.nbytes,
                   "tensor %zu has %zu bytes for its shape", i, info.nbytes);
        FUZZ_CHECK(kvc_safetensors_find(arch, info.name, &found) == KVC_OK && found == i, "find(\"%s\") is not %zu",
                   info.name, i);
        kvc_tensor_t view, loaded;
        FUZZ_CHECK(kvc_safetensors_view(arch, i, &view) == KVC_OK, "view(%zu) failed", i);
        FUZZ_CHECK(!view.nbytes || (const uint8_t *)view.data == data + info.offset, "view(%zu) elsewhere than info", i);
        fuzz_touch(&view);
        FUZZ_CHECK(kvc_safetensors_load(arch, i, &loaded) == KVC_OK, "load(%zu) failed", i);
        FUZZ_CHECK(loaded.nbytes == info.nbytes && (!info.nbytes || !memcmp(loaded.data, view.data, info.nbytes)),
                   "load(%zu) differs from the view", i);
        kvc_tensor_free(&loaded);
        uint8_t *exact = malloc(info.nbytes ? info.nbytes : 1);
        FUZZ_CHECK(kvc_safetensors_read(arch, i, exact, info.nbytes) == KVC_OK, "read(%zu) failed", i);
        if (info.nbytes)
            FUZZ_CHECK(kvc_safetensors_read(arch, i, exact, info.nbytes - 1) == KVC_ERR_NO_SPACE,
                       "read(%zu) into a short buffer", i);
        free(exact);
    }
    kvc_safetensors_info_t past;
    FUZZ_CHECK(kvc_safetensors_info(arch, n, &past) == KVC_ERR_OUT_OF_RANGE, "info past the count");
    const size_t m = kvc_safetensors_metadata_count(arch);
    for (size_t i = 0; i < m; i++) {
        const char *key, *value, *again;
        FUZZ_CHECK(kvc_safetensors_metadata_at(arch, i, &key, &value) == KVC_OK, "metadata_at(%zu) failed", i);
        FUZZ_CHECK(kvc_safetensors_metadata_get(arch, key, &again) == KVC_OK && again == value,
                   "metadata_get(\"%s\") disagrees with metadata_at(%zu)", key, i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvc_safetensors_t *arch = NULL;
    const kvc_status_t st = kvc_safetensors_open_mem(data, size, &arch);
    if (st == KVC_OK) {
        walk(arch, data, size);
        kvc_safetensors_close(arch);
    } else {
        FUZZ_CHECK(arch == NULL, "archive set on failure");
        FUZZ_CHECK(st == KVC_ERR_CORRUPT || st == KVC_ERR_DTYPE || st == KVC_ERR_UNSUPPORTED,
                   "kvc_safetensors_open_mem returned %s", kvc_status_name(st));
    }
    const unsigned hint = size >= 2 ? data[size - 1] | (unsigned)data[size - 2] << 8 : 0;
    fuzz_kvcache_load(data, size, hint);
    return 0;
}
