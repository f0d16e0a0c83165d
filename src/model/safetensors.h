/* safetensors files: a validating reader and an atomic writer.
 *
 * Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of JSON (an object: tensor name -> {"dtype", "shape", "data_offsets":
 * [begin, end]} with offsets relative to the data section, plus an optional "__metadata__"
 * object of string -> string), then the data section, which the tensors tile exactly.
 *
 * The reader checks everything before any tensor is read, and rejects with one line naming
 * the file and the problem: N beyond the file (or over 100 MB), JSON that does not parse,
 * a tensor without dtype/shape/data_offsets, an unknown dtype, shape x dtype size not
 * equal to the data_offsets span, offsets past the end of the data (a truncated file),
 * overlapping tensors, holes or trailing bytes in the data section, duplicate names. Any
 * dtype of the format is accepted structurally; zn_st_read_f32 converts F32, BF16 and F16
 * and rejects the others (integer buffers, F64, ...).
 *
 * The writer writes F32, BF16 or F16 (converted from fp32, round-to-nearest-even) to
 * PATH.tmp.PID, fsyncs it, renames it over PATH and fsyncs the folder, so PATH is either
 * the old file or the complete new one. The header is space-padded to a multiple of 8 bytes
 * so the data section is 8-byte aligned.
 *
 *     struct zn_st_file *f;
 *     if (zn_st_open(&f, "model.safetensors"))
 *             return -EINVAL;
 *     const struct zn_st_tensor *t = zn_st_find(f, "wte.weight");
 *     float *w = malloc(t->numel * sizeof(float));
 *     rc = zn_st_read_f32(f, t, w);
 *     zn_st_close(f);
 *
 * Threading: one zn_st_file may be read from several threads (reads use pread).
 */
#ifndef ZN_MODEL_SAFETENSORS_H
#define ZN_MODEL_SAFETENSORS_H

#include <stdint.h>

#include "zinc.h"

#define ZN_ST_MAX_DIMS 8
#define ZN_ST_NAME_MAX 256
#define ZN_ST_HEADER_MAX_BYTES (100u << 20) /* as the reference implementation */

struct zn_st_tensor {
	char name[ZN_ST_NAME_MAX];
	char dtype_name[8]; /* as in the file: "F32", "BF16", "I64", ... */
	int dtype;          /* enum zn_dtype for F32, BF16, F16; -1 for the others */
	int elem_bytes;
	int ndim;
	int64_t shape[ZN_ST_MAX_DIMS];
	uint64_t numel;
	uint64_t begin, end; /* data_offsets: bytes from the start of the data section */
};

struct zn_st_file;

/* Opens and validates PATH. Returns 0, -errno (the file cannot be opened or read) or
 * -EINVAL (malformed; the line logged names what is wrong). */
int zn_st_open(struct zn_st_file **out, const char *path);
void zn_st_close(struct zn_st_file *f); /* accepts NULL */

const char *zn_st_path(const struct zn_st_file *f);
int zn_st_tensor_count(const struct zn_st_file *f);
const struct zn_st_tensor *zn_st_tensor_at(const struct zn_st_file *f, int i); /* file order */
const struct zn_st_tensor *zn_st_find(const struct zn_st_file *f, const char *name); /* or NULL */
/* A "__metadata__" value, or NULL. */
const char *zn_st_metadata(const struct zn_st_file *f, const char *key);
/* A "__metadata__" value as a decimal integer in [lo, hi]: 0, -ENOENT when the key is
 * absent, -EINVAL (logged, naming the file and key) when it is not such an integer
 * ("4294967297" for an int field, "12abc", "", leading spaces). */
int zn_st_metadata_int(const struct zn_st_file *f, const char *key, int64_t lo, int64_t hi,
		       int64_t *out);

/* Reads tensor t into out_h (t->numel floats), converting BF16/F16 to fp32. Returns 0,
 * -EINVAL (dtype not convertible) or -EIO/-errno (read failed or came up short). */
int zn_st_read_f32(const struct zn_st_file *f, const struct zn_st_tensor *t, float *out_h);

/* Reads elements [first, first + count) of tensor t (file order; rows of a 2-D tensor are
 * contiguous) into out_h as dtype want (ZN_DTYPE_F32, _BF16 or _F16), converting F32, BF16
 * and F16 (narrowing rounds to nearest even; same dtype is copied bit for bit). Reads in
 * pieces of at most 16 MiB, so memory beyond out_h stays small. Returns 0, -EINVAL (range
 * outside the tensor, dtype not convertible) or -EIO/-errno. */
int zn_st_read_range(const struct zn_st_file *f, const struct zn_st_tensor *t, uint64_t first,
		     uint64_t count, enum zn_dtype want, void *out_h);

/* Reads tensor t's bytes as stored, whatever its dtype (t->end - t->begin bytes; a 4-bit
 * checkpoint's U8 codes, docs/qlora.md). Returns 0 or -EIO/-errno. */
int zn_st_read_raw(const struct zn_st_file *f, const struct zn_st_tensor *t, void *out_h);

/* One tensor to write: its values in file order come from data_h (numel fp32 values) or,
 * when data_h is NULL, from fill(ctx, out_h) which writes numel floats (returns 0 or a
 * negative code, which aborts the write). */
struct zn_st_entry {
	const char *name;
	int ndim;
	int64_t shape[ZN_ST_MAX_DIMS];
	const float *data_h;
	int (*fill)(void *ctx, float *out_h);
	void *ctx;
};

/* Writes count tensors (in that order) as dtype (ZN_DTYPE_F32, _BF16 or _F16), with
 * meta_count "__metadata__" string pairs (0 for none). Returns 0, -EINVAL (bad argument),
 * -ENOMEM or the -errno of the failed write/fsync/rename (e.g. -ENOSPC); on failure PATH
 * is untouched and the temporary file removed. */
int zn_st_write(const char *path, enum zn_dtype dtype, const struct zn_st_entry *entries,
		int count, const char *const *meta_keys, const char *const *meta_values,
		int meta_count);

/* The same file written tensor by tensor: begin writes the header (entries as for
 * zn_st_write; only their names and shapes are used), then put gives the next
 * tensor's values (numel fp32 floats, converted to dtype) in entries' order, and commit
 * (after the last) fsyncs and renames the file over path. entries is borrowed until commit
 * or abort. Several writers may be open at once (a sharded save). Return 0 or a negative
 * code as zn_st_write; a failed put leaves the writer to abort. */
struct zn_st_writer;
int zn_st_writer_begin(struct zn_st_writer **out, const char *path, enum zn_dtype dtype,
		       const struct zn_st_entry *entries, int count,
		       const char *const *meta_keys, const char *const *meta_values,
		       int meta_count);
int zn_st_writer_put(struct zn_st_writer *w, const float *vals);
/* put of the next entry's data_h, or of what its fill writes into a buffer of its size */
int zn_st_writer_put_entry(struct zn_st_writer *w, const struct zn_st_entry *e);
int zn_st_writer_commit(struct zn_st_writer *w); /* releases w */
void zn_st_writer_abort(struct zn_st_writer *w); /* removes the temporary; accepts NULL */

#endif
