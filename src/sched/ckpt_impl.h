/* Internal to src/sched/ckpt*.c: the rank file format (ckpt_io.c), the metadata (ckpt_meta.c),
 * the engine's state read and put back (ckpt_state.c) and the fault hook. */
#ifndef ZN_SCHED_CKPT_IMPL_H
#define ZN_SCHED_CKPT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/ckpt.h"
#include "sched/lossscale.h"

struct zn_engine;

#define ZN_CKPT_MAGIC "ZNCKPT01"
#define ZN_CKPT_END 0x444e455au /* "ZEND" */
#define ZN_CKPT_HEADER_BYTES 64u
#define ZN_CKPT_TABLE_BYTES 24u  /* per layer: numel, offset, count */
#define ZN_CKPT_TRAILER_BYTES 8u /* crc32, end magic */
#define ZN_CKPT_CONFIG_MAX_BYTES (64u << 20)

/* ---- fault hook and counted file operations (ckpt_io.c) ---- */
/* Counts one create/write/fsync/mkdir/rename/copy of a save; at ZINC_CKPT_FAIL_AT's
 * count, logs `op` and path and kills the process with SIGKILL, or, with
 * ZINC_CKPT_FAIL_ERRNO=ENOSPC (EIO, EDQUOT) set too, returns that error for the caller to
 * fail the operation with. 0 otherwise. */
int zn_ckpt_fault_point(const char *op, const char *path);
int zn_ckpt_write(int fd, const void *buf, size_t n, const char *path);
int zn_ckpt_fsync(int fd, const char *path);
int zn_ckpt_fsync_dir(const char *dir);
/* 0 renamed; 1 exchanged with an existing `to` (the old one is now at `from`) */
int zn_ckpt_rename(const char *from, const char *to);
/* A small file written through a temporary name, fsync and rename (dir fsynced). */
int zn_ckpt_write_small(const char *dir, const char *name, const void *buf, size_t n);
uint32_t zn_ckpt_crc(uint32_t crc, const void *buf, size_t n);
/* "DIR/rank-RRRRR-of-WWWWW.bin" */
void zn_ckpt_rank_name(char *buf, size_t n, int rank, int world);
/* Bytes of one layer slice of count elements in a rank file: the fp32 master, then m and
 * v as stored (zn_plan_moment_bytes: int8 codes, then their blocks' absmax). */
uint64_t zn_ckpt_slice_bytes(enum zn_optim_states states, uint64_t count);
/* bytes of rank r's file of a world of w ranks for layers numel[0 .. layers) */
uint64_t zn_ckpt_rank_file_bytes(const uint64_t *numel, int layers, int rank, int world,
				 enum zn_optim_states states);

/* ---- one rank file ---- */
struct zn_ckpt_rank_hdr {
	int rank, world, stage, layers;
	enum zn_optim_states states; /* m and v as stored (header bytes 28..31) */
};
/* Writes this rank's file to fd (named path), streamed layer by layer through the engine's
 * state read, and fsyncs it; *crc gets the file's CRC-32. */
int zn_ckpt_write_rank_file(struct zn_engine *e, int fd, const char *path, uint32_t *crc,
			    const struct zn_ckpt_rank_hdr *hd, const uint64_t *numel);
/* Checks a rank file: size, header (every byte: hd's rank, world, stage, layers, optimizer
 * states, version 1, zeros), layer table against numel, and CRC. Logs what differs naming path. */
int zn_ckpt_verify_rank(const char *path, const struct zn_ckpt_rank_hdr *hd,
			const uint64_t *numel, uint64_t size, uint32_t crc);

/* ---- metadata ---- */
struct zn_ckpt_meta {
	struct zn_ckpt_info info;
	int64_t skipped;
	struct zn_lossscale ls;
	enum zn_optim_states states; /* optimizer_states (fp32 when absent: older files) */
	int layers;
	uint64_t *numel;
	int *tensors;            /* per layer: tensor.l.0 .. tensor.l.(n-1) */
	uint64_t *file_size;     /* per saved rank */
	uint32_t *file_crc;
	uint64_t config_size;
	uint32_t config_crc;
	char *text;              /* the file, parsed in place */
	int kv_count;
	char **key, **val;
	int *order;              /* the lines' indices in key order (unique keys) */
};
/* The metadata text of e's checkpoint (caller frees). */
char *zn_ckpt_meta_text(struct zn_engine *e, const struct zn_ckpt_save_args *a,
			const uint64_t *file_size, const uint32_t *file_crc,
			uint64_t config_size, uint32_t config_crc);
/* Reads path (ckpt_meta_read.c): 0, or -EBADMSG (logged: path and what is wrong) when the
 * CRC line, a line, a key (unknown, twice, an index out of range) or a value (out of its
 * range, or inconsistent: skipped > step, data_step < step, ...) is wrong; -errno when it
 * cannot be read. parse: the same on text[0 .. len) (malloc'd; m owns it from the call,
 * whatever it returns; zn_ckpt_meta_free releases it). */
int zn_ckpt_meta_read(struct zn_ckpt_meta *m, const char *path);
int zn_ckpt_meta_parse(struct zn_ckpt_meta *m, char *text, size_t len, const char *path);
void zn_ckpt_meta_free(struct zn_ckpt_meta *m);
const char *zn_ckpt_meta_get(const struct zn_ckpt_meta *m, const char *key);

/* ---- what differs from this run (ckpt_compare.c) ---- */
/* One warning line per key whose value differs between the saved config.json and this
 * run's (dotted path, both values; the first 20), then how many more. Returns the count. */
int zn_ckpt_config_diff(const char *dir, const char *saved, const char *mine);

/* ---- the engine's state (ckpt_state.c) ---- */
/* Layer l's slice this rank owns under sharding (zn_plan_shard): first element, count. */
void zn_ckpt_state_slice(const struct zn_engine *e, int l, uint64_t *first, uint64_t *count);
/* master, m and v of that slice into buf as the rank file holds them
 * (zn_ckpt_slice_bytes(states, count) bytes). */
int zn_ckpt_state_read(struct zn_engine *e, int l, void *buf);
/* This rank's optimizer span of layer l: [first, first + count) (stage 0: the layer). */
void zn_ckpt_state_span(const struct zn_engine *e, int l, uint64_t *first, uint64_t *count);
/* m and v over the optimizer span (each as a rank file holds a slice of count elements)
 * onto their tier. */
int zn_ckpt_state_put(struct zn_engine *e, int l, const void *m, const void *v);
void zn_ckpt_state_counters(struct zn_engine *e, int64_t *step, int64_t *skipped,
			    struct zn_lossscale *ls);
/* ls: the fp16 scaler's position saved (NULL: the checkpoint is not fp16's). This run's
 * dynamic fp16 scaler goes on from it; a static one, or one without ls, starts as the
 * config says (a line says so). */
void zn_ckpt_state_set_counters(struct zn_engine *e, int64_t step, int64_t skipped,
				const struct zn_lossscale *ls);
uint64_t zn_ckpt_state_max_slice(const struct zn_engine *e); /* largest count of any layer */
bool zn_ckpt_state_on_nvme(const struct zn_engine *e); /* optimizer state in swap extents */
enum zn_optim_states zn_ckpt_state_states(const struct zn_engine *e); /* how m, v are stored */
/* nvme: bytes [from, from + bytes) of layer l's part k (0 master, 1 m, 2 v) appended to fd
 * with copy_file_range; -EOPNOTSUPP (nothing written) where the filesystems cannot */
int zn_ckpt_state_copy(struct zn_engine *e, int l, int k, int fd, uint64_t from,
		       uint64_t bytes, const char *path);
/* The pieces of layer l's part k that make its slice in a rank file: at most 2 (int8 m or
 * v: the codes, then the blocks' absmax), each {offset in the extent, bytes}. */
int zn_ckpt_state_pieces(const struct zn_engine *e, int l, int k, uint64_t piece[2][2]);

#endif
