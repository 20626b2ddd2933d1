# SPDX-License-Identifier: BSD-3-Clause
"""The C ABI of libkvcore as ctypes declarations: enum values, struct layouts, prototypes.

This is the only module that mirrors kvcore's headers; every other module uses its names. The
layouts are checked against the compiled headers by tests/harness/python_abi.c (see test_abi.py), so a
header change that is not mirrored here fails `make check`.
"""
import ctypes as C

# ---------------------------------------------------------------- status.h
STATUS = {
    0: "KVC_OK", -1: "KVC_ERR_INVALID_ARG", -2: "KVC_ERR_NO_MEMORY", -3: "KVC_ERR_UNSUPPORTED",
    -4: "KVC_ERR_NO_DEVICE", -5: "KVC_ERR_OUT_OF_RANGE", -6: "KVC_ERR_NO_SPACE", -7: "KVC_ERR_CORRUPT",
    -8: "KVC_ERR_VERSION", -9: "KVC_ERR_EXISTS", -10: "KVC_ERR_NOT_FOUND", -11: "KVC_ERR_IO",
    -12: "KVC_ERR_ABI", -13: "KVC_ERR_BACKEND", -14: "KVC_ERR_PERMISSION", -15: "KVC_ERR_LIMIT",
    -16: "KVC_ERR_ALIGNMENT", -17: "KVC_ERR_DTYPE", -18: "KVC_ERR_SHAPE", -19: "KVC_ERR_FORMAT",
    -20: "KVC_ERR_PLACEMENT", -21: "KVC_ERR_STATE", -22: "KVC_ERR_OVERLAP",
}
STATUS_CODES = {n: v for v, n in STATUS.items()}
KVC_OK = 0
KVC_ERR_INVALID_ARG = -1
KVC_ERR_NO_MEMORY = -2
KVC_ERR_UNSUPPORTED = -3
KVC_ERR_NO_DEVICE = -4
KVC_ERR_OUT_OF_RANGE = -5
KVC_ERR_NO_SPACE = -6
KVC_ERR_CORRUPT = -7
KVC_ERR_VERSION = -8
KVC_ERR_EXISTS = -9
KVC_ERR_NOT_FOUND = -10
KVC_ERR_IO = -11
KVC_ERR_ABI = -12
KVC_ERR_BACKEND = -13
KVC_ERR_PERMISSION = -14
KVC_ERR_LIMIT = -15
KVC_ERR_ALIGNMENT = -16
KVC_ERR_DTYPE = -17
KVC_ERR_SHAPE = -18
KVC_ERR_FORMAT = -19
KVC_ERR_PLACEMENT = -20
KVC_ERR_STATE = -21
KVC_ERR_OVERLAP = -22

# ---------------------------------------------------------------- types.h
DTYPE_INVALID, DTYPE_F16, DTYPE_BF16, DTYPE_F32, DTYPE_F64 = 0, 1, 2, 3, 4
DTYPE_U8, DTYPE_I8, DTYPE_I16, DTYPE_I32, DTYPE_I64 = 5, 6, 7, 8, 9
DTYPE_U16, DTYPE_U32, DTYPE_U64, DTYPE_BOOL, DTYPE_F8_E4M3, DTYPE_F8_E5M2 = 10, 11, 12, 13, 14, 15
TENSOR_MAX_DIMS = 8


class Tensor(C.Structure):
    _fields_ = [("dtype", C.c_int), ("ndim", C.c_int), ("shape", C.c_size_t * TENSOR_MAX_DIMS),
                ("data", C.c_void_p), ("nbytes", C.c_size_t), ("owns_data", C.c_int)]


# ---------------------------------------------------------------- io.h (KV-cache files)
FILE_AUTO, FILE_NPY, FILE_SAFETENSORS = 0, 1, 2
KVCACHE_FUSED, KVCACHE_SPLIT = 0, 1
KVCACHE_PARAM_FORMAT, KVCACHE_PARAM_NUM_HEADS, KVCACHE_PARAM_HEAD_SIZE, KVCACHE_PARAM_FORM = 1, 2, 4, 8


class KvcacheIoParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("format", C.c_int), ("num_heads", C.c_size_t),
                ("head_size", C.c_size_t), ("form", C.c_int)]


class KvcacheDims(C.Structure):
    _fields_ = [("num_layers", C.c_size_t), ("num_tokens", C.c_size_t), ("num_heads", C.c_size_t),
                ("head_size", C.c_size_t), ("hidden", C.c_size_t)]


# ---------------------------------------------------------------- context.h
CONTEXT_PARAM_BACKEND, CONTEXT_PARAM_DEVICE, CONTEXT_PARAM_MODULE_PATH = 1, 2, 4
CONTEXT_PARAM_LOAD_ALL, CONTEXT_PARAM_NUM_THREADS = 8, 16


class ContextParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("backend", C.c_char_p), ("device", C.c_int),
                ("module_path", C.c_char_p), ("load_all_modules", C.c_int), ("num_threads", C.c_int)]


# ---------------------------------------------------------------- transfer.h
FORMAT_COUNT = 18  # kvcore implements EngineKVFormat 0 .. FORMAT_COUNT-1
MAX_PLANES = 4  # format 17: planes per layer
H2D, D2H = 0, 1
INDEX_INT32, INDEX_INT64 = 1, 2
CHUNK_DEFAULT, CHUNK_SPLIT_KV, CHUNK_FUSED_PACKED, CHUNK_INTERLEAVED_KV = 0, 1, 2, 3


class PageShape(C.Structure):
    """An engine's paged geometry (kvc_page_shape_t): nl layers of nb blocks of bs tokens, nh heads
    of hs elements, kv_size planes (2: K and V; 1: MLA). element_size 0 takes the bytes per element
    from the tensors' dtype; block_stride_elems 0 means dense blocks; num_planes / plane_bytes
    describe format 17's per-layer planes."""
    _fields_ = [("kv_size", C.c_int32), ("element_size", C.c_int32), ("nl", C.c_int64), ("nb", C.c_int64),
                ("bs", C.c_int64), ("nh", C.c_int64), ("hs", C.c_int64), ("block_stride_elems", C.c_int64),
                ("num_planes", C.c_int32), ("plane_bytes", C.c_int64 * 4)]

    def __init__(self, *, nl: int = 0, nb: int = 0, bs: int = 0, nh: int = 1, hs: int = 0, kv_size: int = 2,
                 element_size: int = 0, block_stride_elems: int = 0, num_planes: int = 0,
                 plane_bytes: "tuple[int, ...] | list[int]" = ()) -> None:
        super().__init__(kv_size=kv_size, element_size=element_size, nl=nl, nb=nb, bs=bs, nh=nh, hs=hs,
                         block_stride_elems=block_stride_elems, num_planes=num_planes)
        for i, b in enumerate(plane_bytes):
            self.plane_bytes[i] = b

    def __repr__(self) -> str:
        s = (f"PageShape(nl={self.nl}, nb={self.nb}, bs={self.bs}, nh={self.nh}, hs={self.hs}, "
             f"kv_size={self.kv_size}, element_size={self.element_size}")
        if self.block_stride_elems:
            s += f", block_stride_elems={self.block_stride_elems}"
        if self.num_planes:
            s += f", num_planes={self.num_planes}, plane_bytes={list(self.plane_bytes)[:self.num_planes]}"
        return s + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PageShape) and bytes(self) == bytes(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list


class TokenTransfer(C.Structure):
    _fields_ = [("format", C.c_int), ("direction", C.c_int), ("shape", PageShape),
                ("engine_ptrs", C.c_void_p), ("num_engine_ptrs", C.c_int64), ("chunk", C.c_void_p),
                ("chunk_layout", C.c_int), ("num_tokens", C.c_int64), ("slots", C.c_void_p),
                ("slot_type", C.c_int), ("num_slots", C.c_int64), ("skip_prefix_tokens", C.c_int64),
                ("stream", C.c_void_p)]


class BlockTransfer(C.Structure):
    _fields_ = [("format", C.c_int), ("direction", C.c_int), ("shape", PageShape),
                ("engine_ptrs", C.c_void_p), ("num_engine_ptrs", C.c_int64), ("objects", C.c_void_p),
                ("num_objects", C.c_int64), ("chunk_layout", C.c_int), ("chunk_tokens", C.c_int64),
                ("block_ids", C.c_void_p), ("block_id_type", C.c_int), ("num_block_ids", C.c_int64),
                ("skip_prefix_blocks", C.c_int64), ("stream", C.c_void_p)]


class LayerTransfer(C.Structure):
    _fields_ = [("format", C.c_int), ("direction", C.c_int), ("shape", PageShape),
                ("engine_ptrs", C.c_void_p), ("num_engine_ptrs", C.c_int64), ("chunk", C.c_void_p),
                ("chunk_layout", C.c_int), ("token_major", C.c_int32), ("num_tokens", C.c_int64),
                ("slots", C.c_void_p), ("slot_type", C.c_int), ("num_slots", C.c_int64),
                ("stream", C.c_void_p)]


class FlashTransfer(C.Structure):
    _fields_ = [("shape", PageShape), ("key_value", C.c_void_p), ("num_tokens", C.c_int64),
                ("key_cache", C.c_void_p), ("value_cache", C.c_void_p), ("slots", C.c_void_p),
                ("slot_type", C.c_int), ("num_slots", C.c_int64), ("layer_idx", C.c_int64),
                ("stream", C.c_void_p)]


# ---------------------------------------------------------------- cachegen.h
CG_MAX_BINS = 64


class CgCdfParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("symbols", C.c_void_p), ("cdf", C.c_void_p), ("layers", C.c_size_t), ("tokens", C.c_size_t),
                ("channels", C.c_size_t), ("num_bins", C.c_uint)]


class CgEncodeParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("cdf", C.c_void_p), ("symbols", C.c_void_p), ("streams", C.c_void_p), ("lengths", C.c_void_p),
                ("layers", C.c_size_t), ("tokens", C.c_size_t), ("channels", C.c_size_t),
                ("capacity", C.c_size_t), ("num_bins", C.c_uint), ("needed", C.c_void_p)]


class CgDecodeParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("cdf", C.c_void_p), ("streams", C.c_void_p), ("lengths", C.c_void_p), ("symbols", C.c_void_p),
                ("layers", C.c_size_t), ("tokens", C.c_size_t), ("channels", C.c_size_t),
                ("capacity", C.c_size_t), ("num_bins", C.c_uint)]


class CgDecodePackedParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("cdf", C.c_void_p), ("bytes", C.c_void_p), ("nbytes", C.c_size_t), ("prefsum", C.c_void_p),
                ("symbols", C.c_void_p), ("layers", C.c_size_t), ("tokens", C.c_size_t),
                ("channels", C.c_size_t), ("num_bins", C.c_uint)]


class RansTablesParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("symbols", C.c_void_p), ("cum", C.c_void_p), ("layers", C.c_size_t),
                ("tokens", C.c_size_t), ("channels", C.c_size_t), ("num_bins", C.c_uint)]


class RansEncodeParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("cum", C.c_void_p), ("symbols", C.c_void_p), ("streams", C.c_void_p),
                ("lengths", C.c_void_p), ("layers", C.c_size_t), ("tokens", C.c_size_t), ("channels", C.c_size_t),
                ("capacity", C.c_size_t), ("num_bins", C.c_uint)]


class RansDecodeParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("cum", C.c_void_p), ("bytes", C.c_void_p), ("nbytes", C.c_size_t),
                ("ends", C.c_void_p), ("symbols", C.c_void_p), ("layers", C.c_size_t), ("tokens", C.c_size_t),
                ("channels", C.c_size_t), ("num_bins", C.c_uint)]


class QuantParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("dtype", C.c_int), ("values", C.c_void_p), ("symbols", C.c_void_p), ("scales", C.c_void_p),
                ("bins", C.c_void_p), ("layers", C.c_size_t), ("tokens", C.c_size_t), ("channels", C.c_size_t)]


# ---------------------------------------------------------------- codec.h
CODEC_KV_2LTD, CODEC_MLA = 0, 1
CODEC_PARAM_BINS, CODEC_PARAM_WINDOW, CODEC_PARAM_PROGRESS, CODEC_PARAM_HEADS_UNKNOWN = 1, 2, 4, 8
CODEC_PARAM_KEY_SCALING = 16
CODEC_PARAM_BITS = 32
CODEC_PARAM_CODER = 64
CODER_AC, CODER_RANS = 0, 1
CODEC_SCALE_TOKEN, CODEC_SCALE_CHANNEL = 0, 1
PROGRESS_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_size_t, C.c_size_t)


class CodecParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("dtype", C.c_int), ("layout", C.c_int),
                ("num_layers", C.c_size_t), ("num_tokens", C.c_size_t), ("num_heads", C.c_size_t),
                ("head_size", C.c_size_t), ("bins", C.c_void_p), ("window_tokens", C.c_uint32),
                ("progress", PROGRESS_FN), ("progress_user", C.c_void_p), ("key_scaling", C.c_int),
                ("bits", C.c_double), ("coder", C.c_int)]


class CodecInfo(C.Structure):
    _fields_ = [("dtype", C.c_int), ("layout", C.c_int), ("planes", C.c_size_t), ("num_layers", C.c_size_t),
                ("num_tokens", C.c_size_t), ("num_heads", C.c_size_t), ("head_size", C.c_size_t),
                ("window_tokens", C.c_uint32), ("num_windows", C.c_uint32), ("cdf_bins", C.c_uint32),
                ("version_major", C.c_uint), ("version_minor", C.c_uint), ("raw_cdf", C.c_int),
                ("container_bytes", C.c_size_t), ("original_bytes", C.c_size_t), ("streams_bytes", C.c_size_t),
                ("cdf_bytes", C.c_size_t), ("scales_bytes", C.c_size_t), ("lengths_bytes", C.c_size_t),
                ("meta_bytes", C.c_size_t), ("lmcache_bytes", C.c_size_t),
                ("heads_known", C.c_int), ("key_scaling", C.c_int), ("lmcache_readable", C.c_int),
                ("coder", C.c_int)]


CONTAINER_HEADER_BYTES, CONTAINER_PROBE_BYTES = 48, 8288
CONTAINER_NONE, CONTAINER_INVALID, CONTAINER_PART, CONTAINER_ONE, CONTAINER_STREAM = 0, 1, 2, 3, 4


class ContainerInfo(C.Structure):
    _fields_ = [("kind", C.c_int), ("version_major", C.c_uint), ("version_minor", C.c_uint), ("flags", C.c_uint32),
                ("header_bytes", C.c_size_t), ("container_bytes", C.c_uint64), ("needed_bytes", C.c_uint64),
                ("coder", C.c_int), ("raw_cdf", C.c_int), ("heads_known", C.c_int), ("key_scaling", C.c_int),
                ("meta", C.c_int), ("dtype", C.c_int), ("layout", C.c_int), ("planes", C.c_size_t),
                ("num_layers", C.c_size_t), ("num_tokens", C.c_size_t), ("num_heads", C.c_size_t),
                ("head_size", C.c_size_t), ("window_tokens", C.c_uint32), ("num_windows", C.c_uint32),
                ("cdf_bins", C.c_uint32)]


# ---------------------------------------------------------------- rope.h
ROPE_NEOX, ROPE_GPTJ = 0, 1
ROPE_PARAM_STYLE = 1


class RopeParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("style", C.c_int)]


class RopeKeys(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("num_tokens", C.c_size_t), ("num_heads", C.c_size_t),
                ("head_size", C.c_size_t), ("head_stride", C.c_size_t), ("token_stride", C.c_size_t)]


class RopeTable(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("max_position", C.c_size_t), ("rot_dim", C.c_size_t)]


# ---------------------------------------------------------------- recorder.h
class CompletionRecord(C.Structure):
    _fields_ = [("kind", C.c_char_p), ("payload", C.c_void_p), ("payload_len", C.c_size_t)]


class StrMeta(C.Structure):
    _fields_ = [("key", C.c_char_p), ("value", C.c_char_p)]


class IntMeta(C.Structure):
    _fields_ = [("key", C.c_char_p), ("value", C.c_int64)]


class EventRecord(C.Structure):
    _fields_ = [("name", C.c_char_p), ("session_id", C.c_char_p), ("timestamp", C.c_double),
                ("str_meta", C.POINTER(StrMeta)), ("num_str_meta", C.c_size_t),
                ("int_meta", C.POINTER(IntMeta)), ("num_int_meta", C.c_size_t)]


# ---------------------------------------------------------------- memory.h
MEM_PLAIN, MEM_PINNED, MEM_NUMA, MEM_SHARED, MEM_HUGEPAGE = 0, 1, 2, 4, 8
MEM_DEVICE_FILE = 16
MEM_TARGET_LOCAL, MEM_TARGET_NODE, MEM_TARGET_PCI = 0, 1, 2
MEM_POLICY_PREFERRED, MEM_POLICY_STRICT = 0, 1
MEM_PARAM_KIND, MEM_PARAM_TARGET, MEM_PARAM_POLICY, MEM_PARAM_NAME = 1, 2, 4, 8
MEM_PARAM_PIN_CHUNK, MEM_PARAM_TOUCH, MEM_PARAM_RECLAIM = 16, 32, 64
MEM_REPORT_NODES = 16


class MemParams(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("kind", C.c_uint), ("target", C.c_int), ("node", C.c_uint),
                ("pci_bus_id", C.c_char_p), ("policy", C.c_int), ("name", C.c_char_p),
                ("pin_chunk", C.c_size_t), ("touch", C.c_int), ("reclaim", C.c_int)]


class MemNodePages(C.Structure):
    _fields_ = [("os_index", C.c_uint), ("pages", C.c_uint64)]


class MemReport(C.Structure):
    _fields_ = [("size", C.c_size_t), ("mapped_size", C.c_size_t), ("kind_requested", C.c_uint),
                ("kind_obtained", C.c_uint), ("policy", C.c_int), ("page_size", C.c_size_t),
                ("pages_kind", C.c_int), ("huge_bytes", C.c_size_t), ("pinned", C.c_int),
                ("pin_calls", C.c_uint), ("numa_requested", C.c_int), ("numa_bound", C.c_int),
                ("pages_total", C.c_uint64), ("pages_sampled", C.c_uint64), ("pages_unplaced", C.c_uint64),
                ("location_count", C.c_uint), ("location", MemNodePages * MEM_REPORT_NODES),
                ("location_known", C.c_int), ("fallbacks", C.c_uint32), ("fallback_text", C.c_char * 512),
                ("attached", C.c_int), ("name", C.c_char * 256)]


# ---------------------------------------------------------------- plan.h
class StagingCopy(C.Structure):
    _fields_ = [("dest", C.c_void_p), ("src", C.c_void_p), ("nbytes", C.c_size_t), ("host_offset", C.c_size_t)]


class LaunchVar(C.Structure):
    _fields_ = [("group_idx", C.c_int64), ("block_ids_offset", C.c_int64), ("total_blocks", C.c_int64),
                ("num_objects", C.c_int64), ("skip_prefix_blocks", C.c_int64)]


class BatchStep(C.Structure):
    _fields_ = [("staging", C.c_void_p), ("num_staging", C.c_int64), ("launches", C.c_void_p),
                ("num_launches", C.c_int64)]


class KernelGroup(C.Structure):
    _fields_ = [("format", C.c_int), ("shape", PageShape), ("engine_ptrs", C.c_void_p),
                ("num_engine_ptrs", C.c_int64), ("objects", C.c_void_p), ("num_objects", C.c_int64),
                ("chunk_layout", C.c_int), ("chunk_tokens", C.c_int64), ("block_ids", C.c_void_p),
                ("block_ids_capacity", C.c_int64)]


class ObjectPlan(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("direction", C.c_int), ("host_buffer_alignment", C.c_size_t),
                ("groups", C.c_void_p), ("num_groups", C.c_int64), ("steps", C.c_void_p), ("num_steps", C.c_int64),
                ("stream", C.c_void_p)]


class CbGroup(C.Structure):
    _fields_ = [("format", C.c_int), ("shape", PageShape), ("engine_ptrs", C.c_void_p),
                ("num_engine_ptrs", C.c_int64), ("temp_slots", C.c_void_p), ("num_temp_slots", C.c_int64),
                ("slot_tokens", C.c_int64), ("slot_mapping", C.c_void_p), ("slot_mapping_capacity", C.c_int64),
                ("table", RopeTable), ("key_dtype", C.c_int), ("rope_num_heads", C.c_int64),
                ("rope_head_stride", C.c_int64), ("rope_base_offset", C.c_int64), ("style", C.c_int)]


class CbPlan(C.Structure):
    _fields_ = [("field_mask", C.c_uint64), ("host_buffer_alignment", C.c_size_t), ("groups", C.c_void_p),
                ("num_groups", C.c_int64), ("staging", C.c_void_p), ("num_staging", C.c_int64),
                ("ropes", C.c_void_p), ("num_ropes", C.c_int64), ("scatters", C.c_void_p),
                ("num_scatters", C.c_int64), ("step_offsets", C.c_void_p), ("num_steps", C.c_int64),
                ("stream", C.c_void_p)]


# Every struct mirrored above, by its C name, for the layout check (tests/harness/python_abi.c).
STRUCTS = {
    "kvc_tensor_t": Tensor, "kvc_kvcache_io_params_t": KvcacheIoParams, "kvc_kvcache_dims_t": KvcacheDims,
    "kvc_context_params_t": ContextParams, "kvc_page_shape_t": PageShape,
    "kvc_token_transfer_t": TokenTransfer, "kvc_block_transfer_t": BlockTransfer,
    "kvc_layer_transfer_t": LayerTransfer, "kvc_flash_transfer_t": FlashTransfer,
    "kvc_cg_cdf_params_t": CgCdfParams, "kvc_cg_encode_params_t": CgEncodeParams,
    "kvc_cg_decode_params_t": CgDecodeParams, "kvc_cg_decode_packed_params_t": CgDecodePackedParams,
    "kvc_quant_params_t": QuantParams, "kvc_rope_params_t": RopeParams,
    "kvc_rans_tables_params_t": RansTablesParams, "kvc_rans_encode_params_t": RansEncodeParams,
    "kvc_rans_decode_params_t": RansDecodeParams,
    "kvc_codec_params_t": CodecParams, "kvc_codec_info_t": CodecInfo, "kvc_container_info_t": ContainerInfo,
    "kvc_rope_keys_t": RopeKeys,
    "kvc_rope_table_t": RopeTable, "kvc_completion_record_t": CompletionRecord, "kvc_str_meta_t": StrMeta,
    "kvc_int_meta_t": IntMeta, "kvc_event_record_t": EventRecord, "kvc_mem_params_t": MemParams,
    "kvc_mem_report_t": MemReport,
    "kvc_staging_copy_t": StagingCopy, "kvc_launch_var_t": LaunchVar, "kvc_batch_step_t": BatchStep,
    "kvc_kernel_group_t": KernelGroup, "kvc_object_plan_t": ObjectPlan, "kvc_cb_group_t": CbGroup,
    "kvc_cb_plan_t": CbPlan,
}

# Every constant above, by its C name, for the value check.
CONSTANTS = dict(
    {n: v for v, n in STATUS.items()},
    KVC_DTYPE_F16=DTYPE_F16, KVC_DTYPE_BF16=DTYPE_BF16, KVC_DTYPE_F32=DTYPE_F32, KVC_DTYPE_F64=DTYPE_F64,
    KVC_DTYPE_U8=DTYPE_U8, KVC_DTYPE_I8=DTYPE_I8, KVC_DTYPE_I16=DTYPE_I16, KVC_DTYPE_I32=DTYPE_I32,
    KVC_DTYPE_I64=DTYPE_I64, KVC_DTYPE_U16=DTYPE_U16, KVC_DTYPE_U32=DTYPE_U32, KVC_DTYPE_U64=DTYPE_U64,
    KVC_DTYPE_BOOL=DTYPE_BOOL, KVC_DTYPE_F8_E4M3=DTYPE_F8_E4M3, KVC_DTYPE_F8_E5M2=DTYPE_F8_E5M2,
    KVC_TENSOR_MAX_DIMS=TENSOR_MAX_DIMS,
    KVC_FILE_AUTO=FILE_AUTO, KVC_FILE_NPY=FILE_NPY, KVC_FILE_SAFETENSORS=FILE_SAFETENSORS,
    KVC_KVCACHE_FUSED=KVCACHE_FUSED, KVC_KVCACHE_SPLIT=KVCACHE_SPLIT, KVC_KVCACHE_PARAM_FORMAT=KVCACHE_PARAM_FORMAT,
    KVC_KVCACHE_PARAM_NUM_HEADS=KVCACHE_PARAM_NUM_HEADS, KVC_KVCACHE_PARAM_HEAD_SIZE=KVCACHE_PARAM_HEAD_SIZE,
    KVC_KVCACHE_PARAM_FORM=KVCACHE_PARAM_FORM,
    KVC_CONTEXT_PARAM_BACKEND=CONTEXT_PARAM_BACKEND, KVC_CONTEXT_PARAM_DEVICE=CONTEXT_PARAM_DEVICE,
    KVC_CONTEXT_PARAM_MODULE_PATH=CONTEXT_PARAM_MODULE_PATH, KVC_CONTEXT_PARAM_LOAD_ALL=CONTEXT_PARAM_LOAD_ALL,
    KVC_CONTEXT_PARAM_NUM_THREADS=CONTEXT_PARAM_NUM_THREADS,
    KVC_FORMAT_COUNT=FORMAT_COUNT, KVC_MAX_PLANES=MAX_PLANES, KVC_H2D=H2D, KVC_D2H=D2H, KVC_INDEX_INT32=INDEX_INT32,
    KVC_INDEX_INT64=INDEX_INT64, KVC_CHUNK_DEFAULT=CHUNK_DEFAULT, KVC_CHUNK_SPLIT_KV=CHUNK_SPLIT_KV,
    KVC_CHUNK_FUSED_PACKED=CHUNK_FUSED_PACKED, KVC_CHUNK_INTERLEAVED_KV=CHUNK_INTERLEAVED_KV,
    KVC_CG_MAX_BINS=CG_MAX_BINS,
    KVC_CODEC_KV_2LTD=CODEC_KV_2LTD, KVC_CODEC_MLA=CODEC_MLA, KVC_CODEC_PARAM_BINS=CODEC_PARAM_BINS,
    KVC_CODEC_PARAM_WINDOW=CODEC_PARAM_WINDOW, KVC_CODEC_PARAM_PROGRESS=CODEC_PARAM_PROGRESS,
    KVC_CODEC_PARAM_HEADS_UNKNOWN=CODEC_PARAM_HEADS_UNKNOWN, KVC_CODEC_PARAM_KEY_SCALING=CODEC_PARAM_KEY_SCALING,
    KVC_CODEC_PARAM_BITS=CODEC_PARAM_BITS, KVC_CODEC_PARAM_CODER=CODEC_PARAM_CODER,
    KVC_CODER_AC=CODER_AC, KVC_CODER_RANS=CODER_RANS,
    KVC_CODEC_SCALE_TOKEN=CODEC_SCALE_TOKEN, KVC_CODEC_SCALE_CHANNEL=CODEC_SCALE_CHANNEL,
    KVC_CONTAINER_HEADER_BYTES=CONTAINER_HEADER_BYTES, KVC_CONTAINER_PROBE_BYTES=CONTAINER_PROBE_BYTES,
    KVC_CONTAINER_NONE=CONTAINER_NONE, KVC_CONTAINER_INVALID=CONTAINER_INVALID, KVC_CONTAINER_PART=CONTAINER_PART,
    KVC_CONTAINER_ONE=CONTAINER_ONE, KVC_CONTAINER_STREAM=CONTAINER_STREAM,
    KVC_ROPE_NEOX=ROPE_NEOX, KVC_ROPE_GPTJ=ROPE_GPTJ, KVC_ROPE_PARAM_STYLE=ROPE_PARAM_STYLE,
    KVC_MEM_PLAIN=MEM_PLAIN, KVC_MEM_PINNED=MEM_PINNED, KVC_MEM_NUMA=MEM_NUMA, KVC_MEM_SHARED=MEM_SHARED,
    KVC_MEM_HUGEPAGE=MEM_HUGEPAGE, KVC_MEM_DEVICE_FILE=MEM_DEVICE_FILE, KVC_MEM_TARGET_LOCAL=MEM_TARGET_LOCAL, KVC_MEM_TARGET_NODE=MEM_TARGET_NODE,
    KVC_MEM_TARGET_PCI=MEM_TARGET_PCI, KVC_MEM_POLICY_PREFERRED=MEM_POLICY_PREFERRED,
    KVC_MEM_POLICY_STRICT=MEM_POLICY_STRICT, KVC_MEM_PARAM_KIND=MEM_PARAM_KIND,
    KVC_MEM_PARAM_TARGET=MEM_PARAM_TARGET, KVC_MEM_PARAM_POLICY=MEM_PARAM_POLICY,
    KVC_MEM_PARAM_NAME=MEM_PARAM_NAME, KVC_MEM_PARAM_PIN_CHUNK=MEM_PARAM_PIN_CHUNK,
    KVC_MEM_PARAM_TOUCH=MEM_PARAM_TOUCH, KVC_MEM_PARAM_RECLAIM=MEM_PARAM_RECLAIM, KVC_MEM_REPORT_NODES=MEM_REPORT_NODES,
)

_S = C.c_int  # kvc_status_t
_P = C.c_void_p
_Z = C.c_size_t

# name: (restype, argtypes). Every call goes through ctypes.CDLL, which releases the GIL.
PROTOTYPES = {
    "kvc_status_string": (C.c_char_p, [C.c_int]),
    "kvc_status_name": (C.c_char_p, [C.c_int]),
    "kvc_last_error": (C.c_char_p, []),
    "kvc_dtype_size": (_Z, [C.c_int]),
    "kvc_tensor_free": (None, [C.POINTER(Tensor)]),
    "kvc_context_create": (_S, [C.POINTER(ContextParams), C.POINTER(_P)]),
    "kvc_context_destroy": (None, [_P]),
    "kvc_context_backend_name": (C.c_char_p, [_P]),
    "kvc_context_isa": (C.c_char_p, [_P]),
    "kvc_context_num_threads": (C.c_int, [_P]),
    "kvc_stream_synchronize": (_S, [_P, _P]),
    "kvc_memcpy": (_S, [_P, _P, _P, _Z]),
    "kvc_device_alloc": (_S, [_P, _Z, C.POINTER(_P)]),
    "kvc_device_free": (_S, [_P, _P]),
    "kvc_device_pci_bus_id": (_S, [_P, C.c_int, C.c_char_p, _Z]),
    "kvc_build_config": (C.c_char_p, []),
    "kvc_format_is_valid": (C.c_int, [C.c_int]),
    "kvc_format_is_cross_layer": (C.c_int, [C.c_int]),
    "kvc_format_is_kv_list": (C.c_int, [C.c_int]),
    "kvc_format_is_layer_list": (C.c_int, [C.c_int]),
    "kvc_format_is_mla": (C.c_int, [C.c_int]),
    "kvc_format_is_hnd": (C.c_int, [C.c_int]),
    "kvc_format_is_fused_packed": (C.c_int, [C.c_int]),
    "kvc_format_is_two_major": (C.c_int, [C.c_int]),
    "kvc_format_is_pbs_fused": (C.c_int, [C.c_int]),
    "kvc_format_name": (C.c_char_p, [C.c_int]),
    "kvc_format_ptr_count": (C.c_int64, [C.c_int, C.c_int64]),
    "kvc_format_is_kv_second_tuple": (C.c_int, [C.c_int]),
    "kvc_shape_ptr_count": (C.c_int64, [C.c_int, C.POINTER(PageShape)]),
    "kvc_transfer_tokens": (_S, [_P, C.POINTER(TokenTransfer)]),
    "kvc_transfer_blocks": (_S, [_P, C.POINTER(BlockTransfer)]),
    "kvc_transfer_layer": (_S, [_P, C.POINTER(LayerTransfer)]),
    "kvc_load_and_reshape_flash": (_S, [_P, C.POINTER(FlashTransfer)]),
    "kvc_reshape_and_cache_back_flash": (_S, [_P, C.POINTER(FlashTransfer)]),
    "kvc_cg_cdf": (_S, [_P, C.POINTER(CgCdfParams)]),
    "kvc_cg_encode": (_S, [_P, C.POINTER(CgEncodeParams)]),
    "kvc_cg_encode_bound": (_Z, [_Z]),
    "kvc_cg_decode": (_S, [_P, C.POINTER(CgDecodeParams)]),
    "kvc_cg_decode_packed": (_S, [_P, C.POINTER(CgDecodePackedParams)]),
    "kvc_rans_tables": (_S, [_P, C.POINTER(RansTablesParams)]),
    "kvc_rans_encode": (_S, [_P, C.POINTER(RansEncodeParams)]),
    "kvc_rans_decode": (_S, [_P, C.POINTER(RansDecodeParams)]),
    "kvc_rans_encode_bound": (_Z, [_Z]),
    "kvc_quantise": (_S, [_P, C.POINTER(QuantParams)]),
    "kvc_dequantise": (_S, [_P, C.POINTER(QuantParams)]),
    "kvc_cg_default_bins": (_S, [_Z, _P]),
    "kvc_codec_encode": (_S, [_P, C.POINTER(CodecParams), _P, C.POINTER(_P), C.POINTER(_Z)]),
    "kvc_codec_free": (None, [_P]),
    "kvc_codec_level_params": (_S, [C.c_int, C.POINTER(CodecParams), _P]),
    "kvc_version_string": (C.c_char_p, []),
    "kvc_codec_inspect": (_S, [_P, _Z, C.POINTER(CodecInfo)]),
    "kvc_container_probe": (_S, [_P, _Z, C.POINTER(ContainerInfo)]),
    "kvc_codec_decode": (_S, [_P, _P, _Z, _P, _Z, C.POINTER(CodecInfo)]),
    "kvc_rope_k_fused": (_S, [_P, _P, C.POINTER(RopeKeys), _P, _P, C.POINTER(RopeTable), C.POINTER(RopeParams)]),
    "kvc_rope_cache_build": (_S, [_P, _P, C.POINTER(RopeTable), C.c_double]),
    "kvc_rope_k_delta": (_S, [_P, _P, C.POINTER(RopeKeys), _P, _P, _Z, C.c_double, C.POINTER(RopeParams)]),
    "kvc_record_completion": (_S, [_P, _P, C.c_char_p, _P, _Z]),
    "kvc_drain_completions": (_S, [_P, C.POINTER(C.POINTER(CompletionRecord)), C.POINTER(_Z)]),
    "kvc_completion_records_free": (None, [C.POINTER(CompletionRecord), _Z]),
    "kvc_record_event": (_S, [_P, _P, C.c_char_p, C.c_char_p, C.POINTER(StrMeta), _Z, C.POINTER(IntMeta), _Z]),
    "kvc_drain_events": (_S, [_P, C.POINTER(C.POINTER(EventRecord)), C.POINTER(_Z)]),
    "kvc_event_records_free": (None, [C.POINTER(EventRecord), _Z]),
    "kvc_recorder_now": (C.c_double, []),
    "kvc_mem_alloc": (_S, [_P, _Z, C.POINTER(MemParams), C.POINTER(_P), C.POINTER(MemReport)]),
    "kvc_mem_free": (_S, [_P, _P]),
    "kvc_mem_map_file": (_S, [_P, C.c_char_p, _Z, _Z, C.c_uint, C.POINTER(_P), C.POINTER(MemReport)]),
    "kvc_mem_attach": (_S, [_P, C.c_char_p, C.c_uint, C.POINTER(_P), C.POINTER(_Z), C.POINTER(MemReport)]),
    "kvc_mem_query": (_S, [_P, _P, C.POINTER(MemReport)]),
    "kvc_mem_live_count": (_Z, [_P]),
    "kvc_memcpy_async": (_S, [_P, _P, _P, _Z, C.c_int, _Z, _Z, _P]),
    "kvc_batched_memcpy": (_S, [_P, _P, _P, _P, _Z, _P]),
    "kvc_kvcache_load": (_S, [C.c_char_p, C.POINTER(KvcacheIoParams), C.POINTER(Tensor), C.POINTER(KvcacheDims)]),
    "kvc_kvcache_save": (_S, [C.c_char_p, C.POINTER(Tensor), C.POINTER(KvcacheIoParams)]),
    "kvc_execute_object_plan": (_S, [_P, C.POINTER(ObjectPlan)]),
    "kvc_execute_cb_plan": (_S, [_P, C.POINTER(CbPlan)]),
}
