/* SPDX-License-Identifier: BSD-3-Clause */
/* File I/O: NumPy .npy and .safetensors readers and writers, and a KV-cache loader/saver on top.
 * docs/FILES.md lists exactly what each reader accepts and rejects.
 *
 * The readers treat their input as untrusted: every length, offset and size is checked against the
 * bytes actually present, with overflow-checked arithmetic, before anything is read. Each reader
 * works on a file or on a memory buffer, with the same checks and the same status codes:
 *   KVC_ERR_CORRUPT      malformed or truncated data (bad magic, bad header syntax, sizes that do not
 *                        match the bytes present, overlapping offsets, duplicate names, ...)
 *   KVC_ERR_VERSION      an .npy format version other than 1.0, 2.0, 3.0
 *   KVC_ERR_DTYPE        a well-formed element type kvcore does not know
 *   KVC_ERR_UNSUPPORTED  a well-formed file kvcore cannot represent (big-endian data, Fortran order,
 *                        structured dtypes, more than 8 dimensions, names holding a NUL character)
 *   KVC_ERR_NOT_FOUND / KVC_ERR_PERMISSION / KVC_ERR_IO   from the operating system
 * kvc_last_error() says what was wrong and where. Outputs are set only on success.
 *
 * Writers validate every argument before creating a file, so a rejected call leaves nothing on
 * disk. A writer never damages an existing file: it writes PATH.tmp.PID.N in the same directory,
 * flushes it (fsync) and renames it over PATH only when complete; a failed write removes the
 * temporary and leaves PATH as it was. An existing PATH keeps its permissions; a symbolic link is
 * followed (the file it points to is replaced); a device or FIFO is written directly; a directory
 * is KVC_ERR_INVALID_ARG. A process killed during a write (SIGKILL, or a signal whose handler does
 * not call kvc_io_remove_temporaries) leaves PATH.tmp.PID.N behind, PATH untouched.
 * Readers refuse directories, FIFOs and devices (KVC_ERR_INVALID_ARG) without blocking on them.
 *
 * Thread safety: readers and writers share no state (writers only an atomic list of their
 * temporaries), so calls on different files, buffers and archives may run concurrently. One
 * kvc_safetensors_t may be read (count, info, find, load, read, view, metadata) from any number of
 * threads at once (file reads use pread: no shared cursor); kvc_safetensors_close must not overlap
 * them. Two writes of one path at once corrupt nothing: each
 * writes its own temporary, and the last rename wins. */
#ifndef KVCORE_IO_H
#define KVCORE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <kvcore/export.h>
#include <kvcore/status.h>
#include <kvcore/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Remove the temporary files of the writes this process has in progress. Async-signal-safe: meant
 * for a SIGINT/SIGTERM handler that then ends the process (a write that continues afterwards fails
 * when it renames its vanished temporary). At most 32 concurrent writes are tracked. */
KVC_API void kvc_io_remove_temporaries(void);

/* ------------------------------------------------------------------ NumPy .npy */

/* Read an .npy file into a new tensor (owns_data = 1). */
KVC_API kvc_status_t kvc_npy_read(const char *path, kvc_tensor_t *out);

/* Parse an .npy image held in memory without copying: out->data points into buf (owns_data = 0),
 * so buf must outlive the tensor. out->data is not necessarily aligned for the element type. */
KVC_API kvc_status_t kvc_npy_view(const void *buf, size_t len, kvc_tensor_t *out);

/* Write a tensor as .npy version 1.0, byte for byte as numpy.save writes it (64-byte aligned
 * header). KVC_ERR_DTYPE for fp8 types, which .npy cannot name. bf16 is written as '<V2', the
 * descriptor numpy gives ml_dtypes.bfloat16 arrays. */
KVC_API kvc_status_t kvc_npy_write(const char *path, const kvc_tensor_t *t);

/* The same bytes into buf. *len_out receives the file size; when cap is smaller, nothing is written
 * and KVC_ERR_NO_SPACE is returned (buf may then be NULL). */
KVC_API kvc_status_t kvc_npy_write_mem(const kvc_tensor_t *t, void *buf, size_t cap, size_t *len_out);

/* Piecewise .npy, for arrays larger than memory (kvcore encode/decode of a stream of chunks). */

/* Read and validate an .npy file's header only (the file's size is checked against it): out
 * describes the array (data = NULL, owns_data = 0) and *data_offset is where its C-order data
 * starts, for the caller to read pieces with pread. Errors as kvc_npy_read. */
KVC_API kvc_status_t kvc_npy_read_header(const char *path, kvc_tensor_t *out, size_t *data_offset);

/* An .npy file being written in pieces: open writes the header (as kvc_npy_write would, for the
 * dtype and shape of desc; desc->data is ignored) to the temporary beside path and sizes it to the
 * full array; pwrite puts n bytes at `offset` into the data (KVC_ERR_OUT_OF_RANGE beyond it), in any
 * order; finish(w, KVC_OK) flushes and renames it into place, finish(w, error) removes it, as the
 * other writers do. Bytes never written read as zeros. A path that exists and is not a regular
 * file is KVC_ERR_INVALID_ARG (pieces need offsets). One writer is not for concurrent pwrites of
 * overlapping ranges; disjoint ranges from several threads are fine. */
typedef struct kvc_npy_writer kvc_npy_writer_t;
KVC_API kvc_status_t kvc_npy_writer_open(const char *path, const kvc_tensor_t *desc, kvc_npy_writer_t **out);
KVC_API kvc_status_t kvc_npy_writer_pwrite(kvc_npy_writer_t *w, size_t offset, const void *buf, size_t n);
KVC_API kvc_status_t kvc_npy_writer_finish(kvc_npy_writer_t *w, kvc_status_t st);

/* ------------------------------------------------------------------ .safetensors */

typedef struct kvc_safetensors kvc_safetensors_t; /* a parsed, validated archive */

/* Largest header a reader accepts (the reference implementation's limit). */
#define KVC_SAFETENSORS_MAX_HEADER 100000000u

/* Parse and validate a file's header; tensor data is read on demand. */
KVC_API kvc_status_t kvc_safetensors_open(const char *path, kvc_safetensors_t **out);

/* Parse and validate an image held in memory (not copied: buf must outlive the archive). */
KVC_API kvc_status_t kvc_safetensors_open_mem(const void *buf, size_t len, kvc_safetensors_t **out);

/* Close an archive (NULL is a no-op). Tensors read from it stay valid; views do not outlive buf. */
KVC_API void kvc_safetensors_close(kvc_safetensors_t *st);

/* One tensor's description. Strings belong to the archive. */
typedef struct kvc_safetensors_info {
    const char *name;
    kvc_dtype_t dtype;
    int ndim;
    size_t shape[KVC_TENSOR_MAX_DIMS];
    size_t offset; /* first byte, from the start of the file */
    size_t nbytes;
} kvc_safetensors_info_t;

/* Number of tensors (the "__metadata__" entry is not one). */
KVC_API size_t kvc_safetensors_count(const kvc_safetensors_t *st);

/* Tensors are numbered in file order (by data offset). KVC_ERR_OUT_OF_RANGE past the count. */
KVC_API kvc_status_t kvc_safetensors_info(const kvc_safetensors_t *st, size_t index, kvc_safetensors_info_t *out);

/* Index of the tensor called name; KVC_ERR_NOT_FOUND if there is none. */
KVC_API kvc_status_t kvc_safetensors_find(const kvc_safetensors_t *st, const char *name, size_t *index);

/* A tensor's data as a new tensor (owns_data = 1, 64-byte aligned), read from the file or copied
 * from the buffer. */
KVC_API kvc_status_t kvc_safetensors_load(const kvc_safetensors_t *st, size_t index, kvc_tensor_t *out);

/* A tensor's data copied into caller memory: KVC_ERR_NO_SPACE when cap < nbytes. */
KVC_API kvc_status_t kvc_safetensors_read(const kvc_safetensors_t *st, size_t index, void *dst, size_t cap);

/* A view into the buffer of an archive opened with kvc_safetensors_open_mem (owns_data = 0);
 * KVC_ERR_UNSUPPORTED for an archive opened from a file. */
KVC_API kvc_status_t kvc_safetensors_view(const kvc_safetensors_t *st, size_t index, kvc_tensor_t *out);

/* The "__metadata__" string map, in header order. */
KVC_API size_t kvc_safetensors_metadata_count(const kvc_safetensors_t *st);
KVC_API kvc_status_t kvc_safetensors_metadata_at(const kvc_safetensors_t *st, size_t index, const char **key,
                                                 const char **value);
/* Value of a metadata key; KVC_ERR_NOT_FOUND when absent. */
KVC_API kvc_status_t kvc_safetensors_metadata_get(const kvc_safetensors_t *st, const char *key, const char **value);

/* A tensor to write and its name (valid UTF-8, not "__metadata__", unique in the call). */
typedef struct kvc_named_tensor {
    const char *name;
    const kvc_tensor_t *tensor;
} kvc_named_tensor_t;

/* A "__metadata__" entry (key and value valid UTF-8; keys unique in the call). */
typedef struct kvc_metadata_entry {
    const char *key;
    const char *value;
} kvc_metadata_entry_t;

/* Write tensors (and, when nmeta > 0, string metadata) as .safetensors, laid out as the reference
 * implementation does: tensors ordered by descending alignment of their type, then by name; compact
 * JSON; header padded with spaces to a multiple of 8 bytes. For the same tensors and at most one
 * metadata entry the bytes equal the reference writer's. KVC_ERR_INVALID_ARG for bad names,
 * duplicates, NULL pointers; errors of kvc_tensor_nbytes for inconsistent tensors. */
KVC_API kvc_status_t kvc_safetensors_write(const char *path, const kvc_named_tensor_t *tensors, size_t n,
                                           const kvc_metadata_entry_t *meta, size_t nmeta);

/* The same bytes into buf; KVC_ERR_NO_SPACE (nothing written) when cap < *len_out. */
KVC_API kvc_status_t kvc_safetensors_write_mem(const kvc_named_tensor_t *tensors, size_t n,
                                               const kvc_metadata_entry_t *meta, size_t nmeta, void *buf,
                                               size_t cap, size_t *len_out);

/* ------------------------------------------------------------------ KV caches */

/* File format of a KV-cache file. AUTO: on load, from the first bytes (the .npy magic, else
 * safetensors); on save, from the extension (".npy" or ".safetensors"). */
typedef enum kvc_file_format {
    KVC_FILE_AUTO = 0,
    KVC_FILE_NPY = 1,
    KVC_FILE_SAFETENSORS = 2,
} kvc_file_format_t;

/* How K and V are stored. FUSED: one tensor [2, NL, T, NH*HS] (the KV_2LTD memory-object layout);
 * SPLIT: a K and a V tensor, each [NL, T, NH, HS]. */
typedef enum kvc_kvcache_form {
    KVC_KVCACHE_FUSED = 0,
    KVC_KVCACHE_SPLIT = 1,
} kvc_kvcache_form_t;

/* Bits of kvc_kvcache_io_params_t.field_mask: a field is read only when its bit is set. */
enum {
    KVC_KVCACHE_PARAM_FORMAT = 1u << 0,
    KVC_KVCACHE_PARAM_NUM_HEADS = 1u << 1,
    KVC_KVCACHE_PARAM_HEAD_SIZE = 1u << 2,
    KVC_KVCACHE_PARAM_FORM = 1u << 3,
};

/* Options of the KV-cache loader and saver; NULL means all defaults. */
typedef struct kvc_kvcache_io_params {
    uint64_t field_mask;
    kvc_file_format_t format; /* default AUTO */
    size_t num_heads;         /* NH: splits D of a fused [2,NL,T,D] file (load), or is checked against the file */
    size_t head_size;         /* HS: likewise; given one of the two, the other is D / it */
    kvc_kvcache_form_t form;  /* save only; default FUSED */
} kvc_kvcache_io_params_t;

/* Sizes of a loaded KV cache. */
typedef struct kvc_kvcache_dims {
    size_t num_layers; /* NL */
    size_t num_tokens; /* T */
    size_t num_heads;  /* NH; 0 when unknown (a fused 4-D file, no hint and no kvcore metadata) */
    size_t head_size;  /* HS; 0 when unknown */
    size_t hidden;     /* D = NH * HS, always known */
} kvc_kvcache_dims_t;

/* Load a KV cache into a new contiguous tensor kv of shape [2, NL, T, D] (owns_data = 1), K in
 * kv[0], V in kv[1], any element type. The file holds one of:
 *   - .npy: one array [2, NL, T, D] or [2, NL, T, NH, HS];
 *   - .safetensors: a tensor "kv" of either fused shape; else tensors "k" and "v", or "key" and
 *     "value", each [NL, T, NH, HS]; else exactly one tensor of a fused shape. Metadata
 *     "kvcore.num_heads" / "kvcore.head_size" (written by kvc_kvcache_save) give NH and HS.
 * KVC_ERR_SHAPE for other shapes, K and V of different shapes, or hints that do not fit D;
 * KVC_ERR_DTYPE for K and V of different types; KVC_ERR_NOT_FOUND for a safetensors file with none
 * of those tensors; reader errors as above. dims may be NULL. */
KVC_API kvc_status_t kvc_kvcache_load(const char *path, const kvc_kvcache_io_params_t *params, kvc_tensor_t *kv,
                                      kvc_kvcache_dims_t *dims);

/* The same, from an image held in memory (kv still gets its own copy). */
KVC_API kvc_status_t kvc_kvcache_load_mem(const void *buf, size_t len, const kvc_kvcache_io_params_t *params,
                                          kvc_tensor_t *kv, kvc_kvcache_dims_t *dims);

/* Load separate K and V files, each holding one tensor [NL, T, NH, HS] (.npy, or .safetensors with
 * exactly one tensor). Errors as kvc_kvcache_load. */
KVC_API kvc_status_t kvc_kvcache_load_pair(const char *k_path, const char *v_path,
                                           const kvc_kvcache_io_params_t *params, kvc_tensor_t *kv,
                                           kvc_kvcache_dims_t *dims);

/* Save a KV cache kv of shape [2, NL, T, D] or [2, NL, T, NH, HS] to one file:
 *   FUSED: .npy holds [2, NL, T, D]; .safetensors holds "kv" [2, NL, T, D], plus metadata
 *          "kvcore.num_heads" and "kvcore.head_size" when NH and HS are known;
 *   SPLIT: .safetensors holds "k" and "v", each [NL, T, NH, HS] (NH and HS must be known: a 5-D kv
 *          or the params). A split .npy needs two files: KVC_ERR_INVALID_ARG (use _save_pair).
 * KVC_ERR_SHAPE for another shape or hints that do not fit D; KVC_ERR_INVALID_ARG for an unknown
 * extension with format AUTO. */
KVC_API kvc_status_t kvc_kvcache_save(const char *path, const kvc_tensor_t *kv, const kvc_kvcache_io_params_t *params);

/* Save K and V to two files, each [NL, T, NH, HS] (.npy, or .safetensors holding one tensor "k" or
 * "v"); the format of each comes from params or its extension. */
KVC_API kvc_status_t kvc_kvcache_save_pair(const char *k_path, const char *v_path, const kvc_tensor_t *kv,
                                           const kvc_kvcache_io_params_t *params);

#ifdef __cplusplus
}
#endif
#endif
