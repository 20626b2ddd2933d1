/* SPDX-License-Identifier: BSD-3-Clause */
/* .npy images: kvc_npy_view and kvc_kvcache_load_mem on arbitrary bytes. Invariants: no access
 * outside the input; an accepted view has the size of its shape and lies inside the input; a loaded
 * KV cache is a consistent [2, NL, T, D] tensor. The last two bytes (array data, which the parser
 * never interprets) choose the loader's hints. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvc_tensor_t t;
    const kvc_status_t st = kvc_npy_view(data, size, &t);
    if (st == KVC_OK) {
        size_t nbytes;
        FUZZ_CHECK(kvc_tensor_nbytes(t.dtype, t.ndim, t.shape, &nbytes) == KVC_OK && nbytes == t.nbytes,
                   "view of %zu bytes for its shape", t.nbytes);
        FUZZ_CHECK(!t.owns_data, "a view owns its data");
        if (t.nbytes) {
            const uint8_t *p = t.data;
            FUZZ_CHECK(p >= data && t.nbytes <= size && (size_t)(p - data) <= size - t.nbytes,
                       "view [%zu, +%zu) outside the %zu-byte input", (size_t)(p - data), t.nbytes, size);
        }
        fuzz_touch(&t);
    } else {
        FUZZ_CHECK(st == KVC_ERR_CORRUPT || st == KVC_ERR_VERSION || st == KVC_ERR_DTYPE || st == KVC_ERR_UNSUPPORTED,
                   "kvc_npy_view returned %s", kvc_status_name(st));
    }
    const unsigned hint = size >= 2 ? data[size - 1] | (unsigned)data[size - 2] << 8 : 0;
    fuzz_kvcache_load(data, size, hint);
    return 0;
}
