/* Checkpoints: the whole training state of every rank, written atomically, verified on
 * resume, and re-sharded when the rank count or ZeRO stage changes (docs/checkpoint.md).
 *
 * Layout of a save directory (--save-dir DIR):
 *
 *     DIR/checkpoint-<step>/zinc-checkpoint.txt   metadata, "key=value" lines, its own CRC
 *     DIR/checkpoint-<step>/config.json           the effective config of the run
 *     DIR/checkpoint-<step>/rank-RRRRR-of-WWWWW.bin  rank R's fp32 master, m, v per layer
 *                                                 (m and v as zinc.optimizer_states stores them)
 *     DIR/checkpoint-<step>/...                   the caller's extra_files (a LoRA run:
 *                                                 adapter_model.safetensors, adapter_config.json)
 *     DIR/latest                                  "checkpoint-<step>", written last
 *
 * A rank file holds, for every layer, the elements [offset, offset + count) of the layer
 * that rank R owns under sharding over W ranks (zn_plan_shard: the same slices at every
 * stage, so a file never depends on the stage), master (count floats) then m then v (as
 * stored: count floats, count bf16, or count int8 codes then their blocks' fp32 absmax);
 * a header, a layer table and a trailer with the CRC-32 (zlib) of all bytes before it.
 * Parameters are not stored: in every stage and dtype they are the master cast to the
 * stored dtype (AdamW writes both from one value, with the same rounding as the cast), so
 * the resume recreates them exactly.
 *
 * Save (collective): rank 0 makes DIR/.tmp-checkpoint-<step> (removing a stale one a kill
 * left), every rank writes and fsyncs its file there, rank 0 writes config.json and the
 * metadata (with every file's size and CRC), fsyncs the directory, renames it to
 * checkpoint-<step> (an existing one is exchanged atomically, then removed), fsyncs DIR,
 * writes `latest` through a temporary file and rename, then removes the oldest checkpoints
 * beyond keep. A kill at any point leaves `latest` naming a complete checkpoint.
 *
 * Resume: zn_ckpt_open resolves DIR (through `latest`) or DIR/checkpoint-N, checks the
 * metadata's CRC and every file's size, header and CRC before anything else runs;
 * zn_ckpt_check compares the model and batch layout with this run's; the engine is created
 * with zn_ckpt_init_layer (the full fp32 master of each layer, read from whichever files
 * hold its slices); zn_ckpt_restore puts m and v on their tiers and the step counters back.
 * Every refusal names the file and what differs.
 *
 * A failed save removes its partial temporary directory (rank 0, after every rank's
 * writes); removals never follow links (core/fsio.h, zn_remove_tree), and rotation takes
 * only real checkpoint-N directories.
 *
 * Fault injection (tests): ZINC_CKPT_FAIL_AT=K kills the process (SIGKILL) at the K-th
 * create, write, fsync, mkdir, rename or copy of this process's saves, after logging
 * which; with ZINC_CKPT_FAIL_ERRNO=ENOSPC (EIO, EDQUOT) that operation fails instead.
 */
#ifndef ZN_SCHED_CKPT_H
#define ZN_SCHED_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

struct zn_comm;
struct zn_engine;
struct zn_model;
struct zn_layer_desc;
struct zn_ckpt_dir;

#define ZN_CKPT_META "zinc-checkpoint.txt"
#define ZN_CKPT_CONFIG "config.json"
#define ZN_CKPT_LATEST "latest"

/* The training data's identity: its size and the CRC-32 of up to 1 MiB at its start,
 * middle and end (a sample: the whole file is not read). */
struct zn_ckpt_data_id {
	uint64_t size;
	uint32_t crc;
};
/* The identity of the file at path. 0 or -errno (logged, naming path). */
int zn_ckpt_data_id(const char *path, struct zn_ckpt_data_id *out);

/* What a save records besides the engine's state. */
struct zn_ckpt_save_args {
	const char *dir;         /* the save directory (created when missing) */
	int keep;                /* --save-total-limit: newest kept; 0 = all */
	int64_t data_step;       /* the data loader's position (global micro-batch steps) */
	int64_t global_micro;    /* world x micro batch: sequences per loader step */
	int seq;                 /* T */
	const char *config_json; /* the effective config */
	const char *data_path;   /* the training data (NULL: not recorded) and its identity */
	const struct zn_ckpt_data_id *data_id;
	const char *run_meta;    /* the caller's "run.KEY=value\n" lines (how the model was
				  * made: train/train_recipe.h), copied into the metadata; or NULL */
	/* the caller's own files, written into the temporary directory dir after the rank
	 * files and before the metadata, so they appear with the checkpoint or not at all (a
	 * LoRA run's PEFT adapter, as the Hugging Face Trainer's checkpoint-N holds it).
	 * Called on every rank (it may be collective; rank 0 writes); 0 or a negative code.
	 * NULL: none */
	int (*extra_files)(void *ctx, struct zn_engine *e, const char *dir);
	void *extra_ctx;
};

/* Saves a checkpoint of e after its step e->step (every rank calls it; c: a comm of host
 * ops over the ranks, NULL for one rank). On success `where` holds DIR/checkpoint-<step>.
 * 0, or a negative code on every rank. */
int zn_ckpt_save(struct zn_engine *e, struct zn_comm *c, const struct zn_ckpt_save_args *a,
		 char *where, size_t where_size);

/* What zn_ckpt_open read from the metadata. */
struct zn_ckpt_info {
	int64_t step, data_step, global_micro;
	int seq, world, stage;
	enum zn_dtype dtype;     /* the parameters' dtype of the run that saved it */
	uint64_t seed;
	const char *path;        /* the checkpoint directory */
	bool has_data;           /* the data file was recorded: */
	const char *data_path;
	struct zn_ckpt_data_id data;
};

/* Opens and verifies the checkpoint at path (a save directory: its `latest`; or one
 * checkpoint directory). `what` names the flag in errors. 0 or a negative code (logged:
 * the file and what is wrong). */
int zn_ckpt_open(struct zn_ckpt_dir **out, const char *path, const char *what);
void zn_ckpt_close(struct zn_ckpt_dir *c); /* accepts NULL */
const struct zn_ckpt_info *zn_ckpt_info(const struct zn_ckpt_dir *c);
/* A metadata value (e.g. a "run." key a save's run_meta wrote), or NULL; valid until close. */
const char *zn_ckpt_get(const struct zn_ckpt_dir *c, const char *key);
/* The model (layer count, each tensor's name and shape) and the batch layout (world x
 * micro, seq) of this run against the checkpoint's; config_json: this run's effective
 * config (each differing key is only reported: a warning line naming it and both values).
 * ZN_EUSAGE naming what differs. */
int zn_ckpt_check(const struct zn_ckpt_dir *c, const struct zn_model *model, int64_t global_micro,
		  int seq, const char *config_json);
/* The optimizer states setting of this run against the checkpoint's (a checkpoint keeps
 * m and v as stored: another setting is refused). ZN_EUSAGE naming both. */
int zn_ckpt_check_states(const struct zn_ckpt_dir *c, enum zn_optim_states states);
/* A warning line when the checkpoint recorded its data file and id differs from it
 * (path: this run's --data). Returns 1 then, else 0. */
int zn_ckpt_check_data(const struct zn_ckpt_info *in, const char *path,
		       const struct zn_ckpt_data_id *id);
/* zn_engine_options.init_layer with ctx = the zn_ckpt: layer l's fp32 master. */
int zn_ckpt_init_layer(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
/* After zn_engine_create with zn_ckpt_init_layer: m and v of this rank's span of every
 * layer onto their tiers, the step counters (step, fp16 skips and loss scale). */
int zn_ckpt_restore(struct zn_engine *e, const struct zn_ckpt_dir *c);

/* Bytes of nvme-resident state this process copied file to file (copy_file_range). */
uint64_t zn_ckpt_nvme_copied_bytes(void);

/* Whether any rank passed true (c: host comm as for save; NULL: one rank). */
int zn_ckpt_any(struct zn_comm *c, bool local, bool *any);

#endif
