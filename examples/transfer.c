/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore example: a context, a pinned NUMA-placed host buffer, and a KV transfer.
 *
 * An inference engine keeps its KV cache in pages ("blocks") of a paged pool; kvcore copies the
 * tokens of one request out of that pool into a contiguous host chunk (D2H, "store") and back into
 * another pool (H2D, "retrieve"). The pool here is vLLM's flash-attention layout, EngineKVFormat 1:
 * one tensor per layer of shape [2 (K, V), blocks, block_size, kv_heads, head_size]. The host chunk
 * is [2, layers, tokens, kv_heads * head_size]. On the CPU backend "device" memory is host memory,
 * so this runs anywhere; with a GPU backend the same calls move data between GPU and host.
 *
 * Build against an installed kvcore:
 *   cc -std=c11 transfer.c $(pkg-config --cflags --libs kvcore) -o transfer
 * Exit status 0 when the tokens came back bit for bit. */
#include <kvcore.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum { NL = 4, NB = 16, BS = 16, NH = 4, HS = 64, T = 40 }; /* 40 tokens: two and a half blocks */

/* Print kvcore's message for a failed call and return 1 (main's exit status). */
static int fail(const char *what, kvc_status_t st)
{
    fprintf(stderr, "%s: %s (%s): %s\n", what, kvc_status_string(st), kvc_status_name(st), kvc_last_error());
    return 1;
}

int main(void)
{
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx); /* NULL: defaults, KVCORE_* knobs apply */
    if (st != KVC_OK)
        return fail("kvc_context_create", st);
    printf("backend %s, CPU ISA tier %s\n", kvc_context_backend_name(ctx), kvc_context_isa(ctx));

    /* Two paged pools, one tensor per layer, in the selected backend's memory. */
    const size_t layer_bytes = (size_t)2 * NB * BS * NH * HS * sizeof(uint16_t);
    void *src_layers[NL] = { 0 }, *dst_layers[NL] = { 0 };
    for (int l = 0; l < NL; l++) {
        if ((st = kvc_device_alloc(ctx, layer_bytes, &src_layers[l])) != KVC_OK ||
            (st = kvc_device_alloc(ctx, layer_bytes, &dst_layers[l])) != KVC_OK)
            return fail("kvc_device_alloc", st);
        /* Any bit pattern will do: transfers copy bytes, they never convert. */
        uint16_t *p = src_layers[l];
        for (size_t i = 0; i < layer_bytes / sizeof(uint16_t); i++)
            p[i] = (uint16_t)(i * 2654435761u >> 16);
        memset(dst_layers[l], 0, layer_bytes);
    }

    /* The host chunk: pinned (page-locked, so a GPU can DMA from it) and bound to the NUMA node of
     * the calling thread. Pinning needs RLIMIT_MEMLOCK room (`ulimit -l`); when the limit is too low
     * kvcore says so (KVC_ERR_LIMIT) and this example carries on with unpinned NUMA memory. */
    const size_t chunk_bytes = (size_t)2 * NL * T * NH * HS * sizeof(uint16_t);
    kvc_mem_params_t mp = { .field_mask = KVC_MEM_PARAM_KIND | KVC_MEM_PARAM_TARGET | KVC_MEM_PARAM_POLICY,
                            .kind = KVC_MEM_PINNED | KVC_MEM_NUMA,
                            .target = KVC_MEM_TARGET_LOCAL,
                            .policy = KVC_MEM_POLICY_PREFERRED }; /* unbound rather than fail */
    kvc_mem_report_t rep;
    void *chunk = NULL;
    st = kvc_mem_alloc(ctx, chunk_bytes, &mp, &chunk, &rep);
    if (st == KVC_ERR_LIMIT || st == KVC_ERR_PERMISSION) {
        printf("not pinned: %s\n", kvc_last_error());
        mp.kind = KVC_MEM_NUMA;
        st = kvc_mem_alloc(ctx, chunk_bytes, &mp, &chunk, &rep);
    }
    if (st != KVC_OK)
        return fail("kvc_mem_alloc", st);
    /* The report says what was obtained, never more than the OS gave. */
    printf("chunk: %zu bytes, pinned %s, NUMA node %d%s%s\n", rep.size, rep.pinned ? "yes" : "no", rep.numa_bound,
           rep.fallback_text[0] ? ", " : "", rep.fallback_text);

    /* Which slot of the pool holds each token (slot = block * BS + offset). The request's tokens sit
     * in blocks 5, 2 and 9 of the source pool and go to blocks 0, 1 and 2 of the destination. */
    int64_t src_slots[T], dst_slots[T];
    const int64_t src_blocks[] = { 5, 2, 9 };
    for (int t = 0; t < T; t++) {
        src_slots[t] = src_blocks[t / BS] * BS + t % BS;
        dst_slots[t] = t;
    }

    kvc_token_transfer_t x = {
        .format = KVC_FMT_NL_X_TWO_NB_BS_NH_HS,
        .direction = KVC_D2H, /* paged pool -> chunk */
        .shape = { .kv_size = 2, .element_size = sizeof(uint16_t), .nl = NL, .nb = NB, .bs = BS, .nh = NH, .hs = HS },
        .engine_ptrs = src_layers,
        .num_engine_ptrs = NL, /* kvc_format_ptr_count(format, NL) */
        .chunk = chunk,
        .chunk_layout = KVC_CHUNK_DEFAULT,
        .num_tokens = T,
        .slots = src_slots,
        .slot_type = KVC_INDEX_INT64,
        .num_slots = T,
    };
    if ((st = kvc_transfer_tokens(ctx, &x)) != KVC_OK)
        return fail("kvc_transfer_tokens (D2H)", st);

    x.direction = KVC_H2D; /* chunk -> the other pool */
    x.engine_ptrs = dst_layers;
    x.slots = dst_slots;
    if ((st = kvc_transfer_tokens(ctx, &x)) != KVC_OK)
        return fail("kvc_transfer_tokens (H2D)", st);
    if ((st = kvc_stream_synchronize(ctx, NULL)) != KVC_OK) /* a no-op on the CPU backend */
        return fail("kvc_stream_synchronize", st);

    /* Check: every token row of every layer and plane arrived where its slot says. */
    const size_t row = (size_t)NH * HS * sizeof(uint16_t);
    int bad = 0;
    for (int l = 0; l < NL; l++)
        for (int p = 0; p < 2; p++)
            for (int t = 0; t < T; t++) {
                const char *a = (const char *)src_layers[l] + ((size_t)p * NB * BS + (size_t)src_slots[t]) * row;
                const char *b = (const char *)dst_layers[l] + ((size_t)p * NB * BS + (size_t)dst_slots[t]) * row;
                bad += memcmp(a, b, row) != 0;
            }
    printf("%d tokens x %d layers moved pool -> chunk -> pool: %s\n", T, NL, bad ? "MISMATCH" : "identical");

    kvc_mem_free(ctx, chunk);
    for (int l = 0; l < NL; l++) {
        kvc_device_free(ctx, src_layers[l]);
        kvc_device_free(ctx, dst_layers[l]);
    }
    kvc_context_destroy(ctx);
    return bad ? 1 : 0;
}
