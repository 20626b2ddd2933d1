/* SPDX-License-Identifier: BSD-3-Clause */
/* kvcore example: RoPE re-rotation of cached keys.
 *
 * Keys in a KV cache carry their rotary position embedding: key k of a token at position p is
 * stored as R(p) k. To reuse a cached chunk at other positions (e.g. a shared document placed at
 * another offset of a new prompt, as CacheBlend does), each key must become R(p') k. kvcore does
 * that in place without the unrotated keys: kvc_rope_k_fused applies R(p') R(p)^-1 from a cos/sin
 * table, kvc_rope_k_delta applies R(p' - p) computed on the fly.
 *
 * This program rotates random keys to positions 0..T-1 (as the engine did when it cached them),
 * moves them to positions 1000..1000+T-1 both ways, and compares with keys rotated directly to the
 * new positions. Keys: [tokens, kv_heads, head_size] fp32, neox style (rotate_half pairs), base
 * 10000, the whole head rotated (rot_dim = head_size).
 *
 * Build against an installed kvcore:
 *   cc -std=c11 rope.c $(pkg-config --cflags --libs kvcore) -lm -o rope
 * Exit status 0 when both re-rotations agree with the direct rotation to 1e-5 of the keys' size. */
#include <kvcore.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 256, NH = 8, HS = 128, MAX_POS = 2048, SHIFT = 1000 };
#define N ((size_t)T * NH * HS)

static int fail(const char *what, kvc_status_t st)
{
    fprintf(stderr, "%s: %s (%s): %s\n", what, kvc_status_string(st), kvc_status_name(st), kvc_last_error());
    return 1;
}

static double max_abs_diff(const float *a, const float *b)
{
    double m = 0;
    for (size_t i = 0; i < N; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

int main(void)
{
    kvc_context_t *ctx = NULL;
    kvc_status_t st = kvc_context_create(NULL, &ctx);
    if (st != KVC_OK)
        return fail("kvc_context_create", st);

    /* The cos/sin table, vLLM's layout: row p = [cos(p*theta_i) ..., sin(p*theta_i) ...]. */
    float *table_data = malloc(sizeof(float) * MAX_POS * HS);
    float *fused = malloc(sizeof(float) * N), *delta = malloc(sizeof(float) * N), *direct = malloc(sizeof(float) * N);
    int64_t *zero = calloc(T, sizeof(int64_t)), *old_pos = malloc(sizeof(int64_t) * T),
            *new_pos = malloc(sizeof(int64_t) * T);
    if (!table_data || !fused || !delta || !direct || !zero || !old_pos || !new_pos)
        return 1;
    kvc_rope_table_t table = { .data = table_data, .dtype = KVC_DTYPE_F32, .max_position = MAX_POS,
                               .rot_dim = HS };
    if ((st = kvc_rope_cache_build(ctx, NULL, &table, 10000.0)) != KVC_OK)
        return fail("kvc_rope_cache_build", st);

    srand(1);
    for (size_t i = 0; i < N; i++)
        direct[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    for (int t = 0; t < T; t++) {
        old_pos[t] = t;
        new_pos[t] = SHIFT + t;
    }
    kvc_rope_keys_t keys = { .data = direct, .dtype = KVC_DTYPE_F32, .num_tokens = T, .num_heads = NH,
                             .head_size = HS }; /* strides 0: tightly packed */

    /* Position 0 is the identity rotation, so "from 0 to p" rotates unrotated keys to p. */
    memcpy(fused, direct, sizeof(float) * N);
    keys.data = fused;
    if ((st = kvc_rope_k_fused(ctx, NULL, &keys, zero, old_pos, &table, KVC_ROPE_NEOX)) != KVC_OK)
        return fail("kvc_rope_k_fused (cache the keys)", st);
    memcpy(delta, fused, sizeof(float) * N);
    keys.data = direct; /* the reference: unrotated keys straight to the new positions */
    if ((st = kvc_rope_k_fused(ctx, NULL, &keys, zero, new_pos, &table, KVC_ROPE_NEOX)) != KVC_OK)
        return fail("kvc_rope_k_fused (reference)", st);

    /* The re-rotation of the cached keys, old -> new positions, with the table ... */
    keys.data = fused;
    if ((st = kvc_rope_k_fused(ctx, NULL, &keys, old_pos, new_pos, &table, KVC_ROPE_NEOX)) != KVC_OK)
        return fail("kvc_rope_k_fused", st);
    /* ... and without one (rot_dim and base given instead). */
    keys.data = delta;
    if ((st = kvc_rope_k_delta(ctx, NULL, &keys, old_pos, new_pos, HS, 10000.0, KVC_ROPE_NEOX)) != KVC_OK)
        return fail("kvc_rope_k_delta", st);

    const double e_fused = max_abs_diff(fused, direct), e_delta = max_abs_diff(delta, direct);
    printf("%d tokens x %d heads x %d moved from positions 0.. to %d..: largest difference from the direct "
           "rotation %.2e (table), %.2e (delta)\n", T, NH, HS, SHIFT, e_fused, e_delta);

    free(table_data);
    free(fused);
    free(delta);
    free(direct);
    free(zero);
    free(old_pos);
    free(new_pos);
    kvc_context_destroy(ctx);
    /* Keys are in [-1, 1]: a 1e-5 difference is a few fp32 roundings of one rotation. */
    return e_fused < 1e-5 && e_delta < 1e-5 ? 0 : 1;
}
