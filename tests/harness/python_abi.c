/* SPDX-License-Identifier: BSD-3-Clause */
/* ABI probe for the Python binding (python/kvcore/_abi.py mirrors these structs and constants with
 * ctypes): prints every struct's size, every field's offset and size, and every constant's value as
 * compiled from the public headers. test_abi.py compares both sides, so a header change that the
 * binding does not mirror fails `make check`. */
#include <stddef.h>
#include <stdio.h>
#include <kvcore/cachegen.h>
#include <kvcore/codec.h>
#include <kvcore/context.h>
#include <kvcore/io.h>
#include <kvcore/memory.h>
#include <kvcore/plan.h>
#include <kvcore/recorder.h>
#include <kvcore/rope.h>
#include <kvcore/status.h>
#include <kvcore/transfer.h>
#include <kvcore/types.h>

#define S(t) printf("struct %s %zu\n", #t, sizeof(t))
#define F(t, f) printf("field %s.%s %zu %zu\n", #t, #f, offsetof(t, f), sizeof(((t *)0)->f))
#define K(c) printf("const %s %lld\n", #c, (long long)(c))

int main(void)
{
    S(kvc_tensor_t); F(kvc_tensor_t, dtype); F(kvc_tensor_t, ndim); F(kvc_tensor_t, shape);
        F(kvc_tensor_t, data); F(kvc_tensor_t, nbytes); F(kvc_tensor_t, owns_data);
    S(kvc_kvcache_io_params_t); F(kvc_kvcache_io_params_t, field_mask); F(kvc_kvcache_io_params_t, format);
        F(kvc_kvcache_io_params_t, num_heads); F(kvc_kvcache_io_params_t, head_size);
        F(kvc_kvcache_io_params_t, form);
    S(kvc_kvcache_dims_t); F(kvc_kvcache_dims_t, num_layers); F(kvc_kvcache_dims_t, num_tokens);
        F(kvc_kvcache_dims_t, num_heads); F(kvc_kvcache_dims_t, head_size); F(kvc_kvcache_dims_t, hidden);
    S(kvc_context_params_t); F(kvc_context_params_t, field_mask); F(kvc_context_params_t, backend);
        F(kvc_context_params_t, device); F(kvc_context_params_t, module_path);
        F(kvc_context_params_t, load_all_modules); F(kvc_context_params_t, num_threads);
    S(kvc_page_shape_t); F(kvc_page_shape_t, kv_size); F(kvc_page_shape_t, element_size);
        F(kvc_page_shape_t, nl); F(kvc_page_shape_t, nb); F(kvc_page_shape_t, bs); F(kvc_page_shape_t, nh);
        F(kvc_page_shape_t, hs); F(kvc_page_shape_t, block_stride_elems); F(kvc_page_shape_t, num_planes);
        F(kvc_page_shape_t, plane_bytes);
    S(kvc_token_transfer_t); F(kvc_token_transfer_t, format); F(kvc_token_transfer_t, direction);
        F(kvc_token_transfer_t, shape); F(kvc_token_transfer_t, engine_ptrs);
        F(kvc_token_transfer_t, num_engine_ptrs); F(kvc_token_transfer_t, chunk);
        F(kvc_token_transfer_t, chunk_layout); F(kvc_token_transfer_t, num_tokens);
        F(kvc_token_transfer_t, slots); F(kvc_token_transfer_t, slot_type); F(kvc_token_transfer_t, num_slots);
        F(kvc_token_transfer_t, skip_prefix_tokens); F(kvc_token_transfer_t, stream);
    S(kvc_block_transfer_t); F(kvc_block_transfer_t, format); F(kvc_block_transfer_t, direction);
        F(kvc_block_transfer_t, shape); F(kvc_block_transfer_t, engine_ptrs);
        F(kvc_block_transfer_t, num_engine_ptrs); F(kvc_block_transfer_t, objects);
        F(kvc_block_transfer_t, num_objects); F(kvc_block_transfer_t, chunk_layout);
        F(kvc_block_transfer_t, chunk_tokens); F(kvc_block_transfer_t, block_ids);
        F(kvc_block_transfer_t, block_id_type); F(kvc_block_transfer_t, num_block_ids);
        F(kvc_block_transfer_t, skip_prefix_blocks); F(kvc_block_transfer_t, stream);
    S(kvc_layer_transfer_t); F(kvc_layer_transfer_t, format); F(kvc_layer_transfer_t, direction);
        F(kvc_layer_transfer_t, shape); F(kvc_layer_transfer_t, engine_ptrs);
        F(kvc_layer_transfer_t, num_engine_ptrs); F(kvc_layer_transfer_t, chunk);
        F(kvc_layer_transfer_t, chunk_layout); F(kvc_layer_transfer_t, token_major);
        F(kvc_layer_transfer_t, num_tokens); F(kvc_layer_transfer_t, slots); F(kvc_layer_transfer_t, slot_type);
        F(kvc_layer_transfer_t, num_slots); F(kvc_layer_transfer_t, stream);
    S(kvc_flash_transfer_t); F(kvc_flash_transfer_t, shape); F(kvc_flash_transfer_t, key_value);
        F(kvc_flash_transfer_t, num_tokens); F(kvc_flash_transfer_t, key_cache);
        F(kvc_flash_transfer_t, value_cache); F(kvc_flash_transfer_t, slots);
        F(kvc_flash_transfer_t, slot_type); F(kvc_flash_transfer_t, num_slots);
        F(kvc_flash_transfer_t, layer_idx); F(kvc_flash_transfer_t, stream);
    S(kvc_cg_cdf_params_t); F(kvc_cg_cdf_params_t, field_mask); F(kvc_cg_cdf_params_t, symbols);
        F(kvc_cg_cdf_params_t, cdf); F(kvc_cg_cdf_params_t, layers); F(kvc_cg_cdf_params_t, tokens);
        F(kvc_cg_cdf_params_t, channels); F(kvc_cg_cdf_params_t, num_bins);
    S(kvc_cg_encode_params_t); F(kvc_cg_encode_params_t, field_mask); F(kvc_cg_encode_params_t, cdf);
        F(kvc_cg_encode_params_t, symbols); F(kvc_cg_encode_params_t, streams);
        F(kvc_cg_encode_params_t, lengths); F(kvc_cg_encode_params_t, layers);
        F(kvc_cg_encode_params_t, tokens); F(kvc_cg_encode_params_t, channels);
        F(kvc_cg_encode_params_t, capacity); F(kvc_cg_encode_params_t, num_bins);
        F(kvc_cg_encode_params_t, needed);
    S(kvc_cg_decode_params_t); F(kvc_cg_decode_params_t, field_mask); F(kvc_cg_decode_params_t, cdf);
        F(kvc_cg_decode_params_t, streams); F(kvc_cg_decode_params_t, lengths);
        F(kvc_cg_decode_params_t, symbols); F(kvc_cg_decode_params_t, layers);
        F(kvc_cg_decode_params_t, tokens); F(kvc_cg_decode_params_t, channels);
        F(kvc_cg_decode_params_t, capacity); F(kvc_cg_decode_params_t, num_bins);
    S(kvc_cg_decode_packed_params_t); F(kvc_cg_decode_packed_params_t, field_mask);
        F(kvc_cg_decode_packed_params_t, cdf); F(kvc_cg_decode_packed_params_t, bytes);
        F(kvc_cg_decode_packed_params_t, nbytes); F(kvc_cg_decode_packed_params_t, prefsum);
        F(kvc_cg_decode_packed_params_t, symbols); F(kvc_cg_decode_packed_params_t, layers);
        F(kvc_cg_decode_packed_params_t, tokens); F(kvc_cg_decode_packed_params_t, channels);
        F(kvc_cg_decode_packed_params_t, num_bins);
    S(kvc_rans_tables_params_t); F(kvc_rans_tables_params_t, field_mask); F(kvc_rans_tables_params_t, symbols);
        F(kvc_rans_tables_params_t, cum); F(kvc_rans_tables_params_t, layers); F(kvc_rans_tables_params_t, tokens);
        F(kvc_rans_tables_params_t, channels); F(kvc_rans_tables_params_t, num_bins);
    S(kvc_rans_encode_params_t); F(kvc_rans_encode_params_t, field_mask); F(kvc_rans_encode_params_t, cum);
        F(kvc_rans_encode_params_t, symbols); F(kvc_rans_encode_params_t, streams);
        F(kvc_rans_encode_params_t, lengths); F(kvc_rans_encode_params_t, layers);
        F(kvc_rans_encode_params_t, tokens); F(kvc_rans_encode_params_t, channels);
        F(kvc_rans_encode_params_t, capacity); F(kvc_rans_encode_params_t, num_bins);
    S(kvc_rans_decode_params_t); F(kvc_rans_decode_params_t, field_mask); F(kvc_rans_decode_params_t, cum);
        F(kvc_rans_decode_params_t, bytes); F(kvc_rans_decode_params_t, nbytes); F(kvc_rans_decode_params_t, ends);
        F(kvc_rans_decode_params_t, symbols); F(kvc_rans_decode_params_t, layers);
        F(kvc_rans_decode_params_t, tokens); F(kvc_rans_decode_params_t, channels);
        F(kvc_rans_decode_params_t, num_bins);
    S(kvc_quant_params_t); F(kvc_quant_params_t, field_mask); F(kvc_quant_params_t, dtype);
        F(kvc_quant_params_t, values); F(kvc_quant_params_t, symbols); F(kvc_quant_params_t, scales);
        F(kvc_quant_params_t, bins); F(kvc_quant_params_t, layers); F(kvc_quant_params_t, tokens);
        F(kvc_quant_params_t, channels);
    S(kvc_codec_params_t); F(kvc_codec_params_t, field_mask); F(kvc_codec_params_t, dtype);
        F(kvc_codec_params_t, layout); F(kvc_codec_params_t, num_layers); F(kvc_codec_params_t, num_tokens);
        F(kvc_codec_params_t, num_heads); F(kvc_codec_params_t, head_size); F(kvc_codec_params_t, bins);
        F(kvc_codec_params_t, window_tokens); F(kvc_codec_params_t, progress);
        F(kvc_codec_params_t, progress_user); F(kvc_codec_params_t, key_scaling);
        F(kvc_codec_params_t, bits); F(kvc_codec_params_t, coder);
    S(kvc_codec_info_t); F(kvc_codec_info_t, dtype); F(kvc_codec_info_t, layout); F(kvc_codec_info_t, planes);
        F(kvc_codec_info_t, num_layers); F(kvc_codec_info_t, num_tokens); F(kvc_codec_info_t, num_heads);
        F(kvc_codec_info_t, head_size); F(kvc_codec_info_t, window_tokens); F(kvc_codec_info_t, num_windows);
        F(kvc_codec_info_t, cdf_bins); F(kvc_codec_info_t, version_major); F(kvc_codec_info_t, version_minor);
        F(kvc_codec_info_t, raw_cdf); F(kvc_codec_info_t, container_bytes); F(kvc_codec_info_t, original_bytes);
        F(kvc_codec_info_t, streams_bytes); F(kvc_codec_info_t, cdf_bytes); F(kvc_codec_info_t, scales_bytes);
        F(kvc_codec_info_t, lengths_bytes); F(kvc_codec_info_t, meta_bytes); F(kvc_codec_info_t, lmcache_bytes);
        F(kvc_codec_info_t, heads_known); F(kvc_codec_info_t, key_scaling);
        F(kvc_codec_info_t, lmcache_readable); F(kvc_codec_info_t, coder);
    S(kvc_container_info_t); F(kvc_container_info_t, kind); F(kvc_container_info_t, version_major);
        F(kvc_container_info_t, version_minor); F(kvc_container_info_t, flags); F(kvc_container_info_t, header_bytes);
        F(kvc_container_info_t, container_bytes); F(kvc_container_info_t, needed_bytes); F(kvc_container_info_t, coder);
        F(kvc_container_info_t, raw_cdf); F(kvc_container_info_t, heads_known); F(kvc_container_info_t, key_scaling);
        F(kvc_container_info_t, meta); F(kvc_container_info_t, dtype); F(kvc_container_info_t, layout);
        F(kvc_container_info_t, planes); F(kvc_container_info_t, num_layers); F(kvc_container_info_t, num_tokens);
        F(kvc_container_info_t, num_heads); F(kvc_container_info_t, head_size); F(kvc_container_info_t, window_tokens);
        F(kvc_container_info_t, num_windows); F(kvc_container_info_t, cdf_bins);
    S(kvc_rope_keys_t); F(kvc_rope_keys_t, data); F(kvc_rope_keys_t, dtype); F(kvc_rope_keys_t, num_tokens);
        F(kvc_rope_keys_t, num_heads); F(kvc_rope_keys_t, head_size); F(kvc_rope_keys_t, head_stride);
        F(kvc_rope_keys_t, token_stride);
    S(kvc_rope_params_t); F(kvc_rope_params_t, field_mask); F(kvc_rope_params_t, style);
    S(kvc_rope_table_t); F(kvc_rope_table_t, data); F(kvc_rope_table_t, dtype);
        F(kvc_rope_table_t, max_position); F(kvc_rope_table_t, rot_dim);
    S(kvc_completion_record_t); F(kvc_completion_record_t, kind); F(kvc_completion_record_t, payload);
        F(kvc_completion_record_t, payload_len);
    S(kvc_str_meta_t); F(kvc_str_meta_t, key); F(kvc_str_meta_t, value);
    S(kvc_int_meta_t); F(kvc_int_meta_t, key); F(kvc_int_meta_t, value);
    S(kvc_event_record_t); F(kvc_event_record_t, name); F(kvc_event_record_t, session_id);
        F(kvc_event_record_t, timestamp); F(kvc_event_record_t, str_meta); F(kvc_event_record_t, num_str_meta);
        F(kvc_event_record_t, int_meta); F(kvc_event_record_t, num_int_meta);
    S(kvc_mem_params_t); F(kvc_mem_params_t, field_mask); F(kvc_mem_params_t, kind);
        F(kvc_mem_params_t, target); F(kvc_mem_params_t, node); F(kvc_mem_params_t, pci_bus_id);
        F(kvc_mem_params_t, policy); F(kvc_mem_params_t, name); F(kvc_mem_params_t, pin_chunk);
        F(kvc_mem_params_t, touch); F(kvc_mem_params_t, reclaim);
    S(kvc_mem_report_t); F(kvc_mem_report_t, size); F(kvc_mem_report_t, mapped_size);
        F(kvc_mem_report_t, kind_requested); F(kvc_mem_report_t, kind_obtained); F(kvc_mem_report_t, policy);
        F(kvc_mem_report_t, page_size); F(kvc_mem_report_t, pages_kind); F(kvc_mem_report_t, huge_bytes);
        F(kvc_mem_report_t, pinned); F(kvc_mem_report_t, pin_calls); F(kvc_mem_report_t, numa_requested);
        F(kvc_mem_report_t, numa_bound); F(kvc_mem_report_t, pages_total); F(kvc_mem_report_t, pages_sampled);
        F(kvc_mem_report_t, pages_unplaced); F(kvc_mem_report_t, location_count); F(kvc_mem_report_t, location);
        F(kvc_mem_report_t, location_known); F(kvc_mem_report_t, fallbacks); F(kvc_mem_report_t, fallback_text);
        F(kvc_mem_report_t, attached); F(kvc_mem_report_t, name);
    S(kvc_staging_copy_t); F(kvc_staging_copy_t, dest); F(kvc_staging_copy_t, src); F(kvc_staging_copy_t, nbytes);
        F(kvc_staging_copy_t, host_offset);
    S(kvc_launch_var_t); F(kvc_launch_var_t, group_idx); F(kvc_launch_var_t, block_ids_offset);
        F(kvc_launch_var_t, total_blocks); F(kvc_launch_var_t, num_objects); F(kvc_launch_var_t, skip_prefix_blocks);
    S(kvc_batch_step_t); F(kvc_batch_step_t, staging); F(kvc_batch_step_t, num_staging);
        F(kvc_batch_step_t, launches); F(kvc_batch_step_t, num_launches);
    S(kvc_kernel_group_t); F(kvc_kernel_group_t, format); F(kvc_kernel_group_t, shape);
        F(kvc_kernel_group_t, engine_ptrs); F(kvc_kernel_group_t, num_engine_ptrs); F(kvc_kernel_group_t, objects);
        F(kvc_kernel_group_t, num_objects); F(kvc_kernel_group_t, chunk_layout); F(kvc_kernel_group_t, chunk_tokens);
        F(kvc_kernel_group_t, block_ids); F(kvc_kernel_group_t, block_ids_capacity);
    S(kvc_object_plan_t); F(kvc_object_plan_t, field_mask); F(kvc_object_plan_t, direction);
        F(kvc_object_plan_t, host_buffer_alignment); F(kvc_object_plan_t, groups); F(kvc_object_plan_t, num_groups);
        F(kvc_object_plan_t, steps); F(kvc_object_plan_t, num_steps); F(kvc_object_plan_t, stream);
    S(kvc_cb_group_t); F(kvc_cb_group_t, format); F(kvc_cb_group_t, shape); F(kvc_cb_group_t, engine_ptrs);
        F(kvc_cb_group_t, num_engine_ptrs); F(kvc_cb_group_t, temp_slots); F(kvc_cb_group_t, num_temp_slots);
        F(kvc_cb_group_t, slot_tokens); F(kvc_cb_group_t, slot_mapping); F(kvc_cb_group_t, slot_mapping_capacity);
        F(kvc_cb_group_t, table); F(kvc_cb_group_t, key_dtype); F(kvc_cb_group_t, rope_num_heads);
        F(kvc_cb_group_t, rope_head_stride); F(kvc_cb_group_t, rope_base_offset); F(kvc_cb_group_t, style);
    S(kvc_cb_plan_t); F(kvc_cb_plan_t, field_mask); F(kvc_cb_plan_t, host_buffer_alignment); F(kvc_cb_plan_t, groups);
        F(kvc_cb_plan_t, num_groups); F(kvc_cb_plan_t, staging); F(kvc_cb_plan_t, num_staging); F(kvc_cb_plan_t, ropes);
        F(kvc_cb_plan_t, num_ropes); F(kvc_cb_plan_t, scatters); F(kvc_cb_plan_t, num_scatters);
        F(kvc_cb_plan_t, step_offsets); F(kvc_cb_plan_t, num_steps); F(kvc_cb_plan_t, stream);
    K(KVC_OK); K(KVC_ERR_INVALID_ARG); K(KVC_ERR_NO_MEMORY); K(KVC_ERR_UNSUPPORTED); K(KVC_ERR_NO_DEVICE);
    K(KVC_ERR_OUT_OF_RANGE); K(KVC_ERR_NO_SPACE); K(KVC_ERR_CORRUPT); K(KVC_ERR_VERSION); K(KVC_ERR_EXISTS);
    K(KVC_ERR_NOT_FOUND); K(KVC_ERR_IO); K(KVC_ERR_ABI); K(KVC_ERR_BACKEND); K(KVC_ERR_PERMISSION);
    K(KVC_ERR_LIMIT); K(KVC_ERR_ALIGNMENT); K(KVC_ERR_DTYPE); K(KVC_ERR_SHAPE); K(KVC_ERR_FORMAT);
    K(KVC_ERR_PLACEMENT); K(KVC_ERR_STATE); K(KVC_ERR_OVERLAP); K(KVC_DTYPE_F16); K(KVC_DTYPE_BF16);
    K(KVC_DTYPE_F32); K(KVC_DTYPE_F64); K(KVC_DTYPE_U8); K(KVC_DTYPE_I8); K(KVC_DTYPE_I16); K(KVC_DTYPE_I32);
    K(KVC_DTYPE_I64); K(KVC_DTYPE_U16); K(KVC_DTYPE_U32); K(KVC_DTYPE_U64); K(KVC_DTYPE_BOOL);
    K(KVC_DTYPE_F8_E4M3); K(KVC_DTYPE_F8_E5M2); K(KVC_TENSOR_MAX_DIMS); K(KVC_FILE_AUTO); K(KVC_FILE_NPY);
    K(KVC_FILE_SAFETENSORS); K(KVC_KVCACHE_FUSED); K(KVC_KVCACHE_SPLIT); K(KVC_KVCACHE_PARAM_FORMAT);
    K(KVC_KVCACHE_PARAM_NUM_HEADS); K(KVC_KVCACHE_PARAM_HEAD_SIZE); K(KVC_KVCACHE_PARAM_FORM);
    K(KVC_CONTEXT_PARAM_BACKEND); K(KVC_CONTEXT_PARAM_DEVICE); K(KVC_CONTEXT_PARAM_MODULE_PATH);
    K(KVC_CONTEXT_PARAM_LOAD_ALL); K(KVC_CONTEXT_PARAM_NUM_THREADS); K(KVC_FORMAT_COUNT); K(KVC_MAX_PLANES); K(KVC_H2D);
    K(KVC_D2H); K(KVC_INDEX_INT32); K(KVC_INDEX_INT64); K(KVC_CHUNK_DEFAULT); K(KVC_CHUNK_SPLIT_KV);
    K(KVC_CHUNK_FUSED_PACKED); K(KVC_CHUNK_INTERLEAVED_KV); K(KVC_CG_MAX_BINS); K(KVC_CODEC_KV_2LTD); K(KVC_CODEC_MLA);
    K(KVC_CODEC_PARAM_BINS); K(KVC_CODEC_PARAM_WINDOW); K(KVC_CODEC_PARAM_PROGRESS);
    K(KVC_CODEC_PARAM_HEADS_UNKNOWN); K(KVC_CODEC_PARAM_KEY_SCALING); K(KVC_CODEC_PARAM_BITS); K(KVC_CODEC_PARAM_CODER);
    K(KVC_CODER_AC); K(KVC_CODER_RANS); K(KVC_CODEC_SCALE_TOKEN);
    K(KVC_CODEC_SCALE_CHANNEL); K(KVC_CONTAINER_HEADER_BYTES); K(KVC_CONTAINER_PROBE_BYTES); K(KVC_CONTAINER_NONE);
    K(KVC_CONTAINER_INVALID); K(KVC_CONTAINER_PART); K(KVC_CONTAINER_ONE); K(KVC_CONTAINER_STREAM); K(KVC_ROPE_NEOX); K(KVC_ROPE_GPTJ); K(KVC_ROPE_PARAM_STYLE); K(KVC_MEM_PLAIN);
    K(KVC_MEM_PINNED); K(KVC_MEM_NUMA); K(KVC_MEM_SHARED); K(KVC_MEM_HUGEPAGE); K(KVC_MEM_DEVICE_FILE); K(KVC_MEM_TARGET_LOCAL);
    K(KVC_MEM_TARGET_NODE); K(KVC_MEM_TARGET_PCI); K(KVC_MEM_POLICY_PREFERRED); K(KVC_MEM_POLICY_STRICT);
    K(KVC_MEM_PARAM_KIND); K(KVC_MEM_PARAM_TARGET); K(KVC_MEM_PARAM_POLICY); K(KVC_MEM_PARAM_NAME);
    K(KVC_MEM_PARAM_PIN_CHUNK); K(KVC_MEM_PARAM_TOUCH); K(KVC_MEM_PARAM_RECLAIM); K(KVC_MEM_REPORT_NODES);
    return 0;
}
