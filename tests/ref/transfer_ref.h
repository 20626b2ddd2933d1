/* SPDX-License-Identifier: BSD-3-Clause */
/* Scalar oracle for the KV transfers, written from the layouts and op rules of docs/LMCACHE.md: every element is
 * located by flattening the engine tensor's shape (one element at a time), independently of the
 * library's stride plans. It does not validate: call it with valid arguments only. */
#ifndef KVC_REF_TRANSFER_H
#define KVC_REF_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include <kvcore/transfer.h>

/* Bytes of each engine tensor (of kvc_format_ptr_count) for a format and shape; format 17: plane 0's. */
size_t ref_engine_tensor_bytes(int format, const kvc_page_shape_t *s);
/* Bytes of engine tensor i of the pointer table (format 17: its planes differ). */
size_t ref_engine_ptr_bytes(int format, const kvc_page_shape_t *s, int64_t i);
/* Formats 14 and 17: address of byte k of the chunk row of the token at (block b, offset o) of
 * layer l (their rows are pieces stored apart, located byte by byte). */
uint8_t *ref_engine_byte(int format, const kvc_page_shape_t *s, void *const *ptrs, int64_t l, int64_t b, int64_t o,
                         int64_t k);
/* Planes and per-plane head elements of the chunk side. */
int64_t ref_chunk_planes(int format, int chunk_layout);
int64_t ref_chunk_head_elems(int format, const kvc_page_shape_t *s, int chunk_layout);

/* Address of element e of head h of the token at (block b, offset o) of layer l, chunk plane p. */
uint8_t *ref_engine_elem(int format, const kvc_page_shape_t *s, int chunk_layout, void *const *ptrs, int64_t l,
                         int64_t p, int64_t b, int64_t o, int64_t h, int64_t e);

void ref_transfer_tokens(const kvc_token_transfer_t *a);
void ref_transfer_blocks(const kvc_block_transfer_t *a);
void ref_transfer_layer(const kvc_layer_transfer_t *a);
void ref_flash(const kvc_flash_transfer_t *a, int direction);

#endif
