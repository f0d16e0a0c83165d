/* zinc train's checkpoints: --save-dir/--save-steps/--save-total-limit, --resume (alias
 * --resume-from-checkpoint), and the SIGTERM stop (finish the step, save, exit 0).
 * The checkpoint itself is src/sched/ckpt.h; docs/checkpoint.md. Internal to src/cli.
 *
 *     struct zn_train_ckpt ck;
 *     rc = zn_train_ckpt_begin(&ck, &opts, cfg, &model, comm, world, T);  // opens --resume
 *     eo.init_layer = ck.resume ? zn_ckpt_init_layer : NULL; ...
 *     rc = zn_train_ckpt_resumed(&ck, e, data);       // m, v, counters, data position
 *     for (s = ck.start; s < steps && !stop; s++) {
 *             ... step ...
 *             rc = zn_train_ckpt_after_step(&ck, e, data, s + 1, steps, &stop);
 *     }
 *     zn_train_ckpt_end(&ck);
 */
#ifndef ZN_CLI_TRAIN_CKPT_H
#define ZN_CLI_TRAIN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sched/ckpt.h"
#include "zinc.h"

struct zn_ckpt_dir;
struct zn_comm;
struct zn_engine;
struct zn_model;
struct zn_train_data;

struct zn_train_ckpt_opts {
	const char *save_dir;
	int save_steps;  /* 0: only at the last step and on SIGTERM */
	int keep;        /* --save-total-limit; 0: all */
	const char *resume;
	int save_hf_steps; /* --save-hf-steps: gathered weights as DIR/hf-<step> every N */
};

/* rest[*i] one of this file's flags: 1 taken (with its value), 0 not ours, ZN_EUSAGE. */
int zn_train_ckpt_flag(int n, char **rest, int *i, struct zn_train_ckpt_opts *o);
void zn_train_ckpt_usage(FILE *f);
/* agreement lines ("train.save_dir=given\n" ...) */
void zn_train_ckpt_text(const struct zn_train_ckpt_opts *o, char *buf, size_t size);
/* Before any work: --resume with --init-from refused; on rank 0, --save-dir can be
 * written, is made, and is locked for the run (core/fsio.h, zn_dir_lock: another run
 * holding it is refused naming it), and an existing DIR/hf-N the run would write is a
 * directory, not a link. *lock_fd: the lock, to close at the end (-1: none). */
int zn_train_ckpt_check_opts(const struct zn_train_ckpt_opts *o, bool init_from, int rank,
			     int *lock_fd);

struct zn_train_ckpt {
	const struct zn_train_ckpt_opts *o;
	struct zn_ckpt_dir *resume;  /* the opened --resume checkpoint, or NULL */
	struct zn_comm *comm;    /* host comm over the ranks; NULL with one */
	int64_t start;           /* steps already taken (the checkpoint's step) */
	int64_t global_micro;
	int seq;
	char *config_json;
	const char *data_path;   /* --data and its identity (zn_ckpt_data_id), with */
	struct zn_ckpt_data_id data_id; /* --save-dir or --resume */
	const char *stop_sig;    /* "SIGTERM" once a stop was agreed */
	bool deferred;           /* SIGTERM finishes the step (one rank, or --save-dir) */
};

int zn_train_ckpt_begin(struct zn_train_ckpt *t, const struct zn_train_ckpt_opts *o,
			const struct zn_config *cfg, const struct zn_model *model,
			struct zn_comm *comm, int world, int seq);
/* after zn_engine_create and the data's open: the data file's identity (with --save-dir or
 * --resume; a line when it differs from the checkpoint's), state, counters and data
 * position */
int zn_train_ckpt_resumed(struct zn_train_ckpt *t, struct zn_engine *e,
			  struct zn_train_data *d);
/* after step `step` of `steps`: the agreed SIGTERM stop and the saves; *stop: end now */
int zn_train_ckpt_after_step(struct zn_train_ckpt *t, struct zn_engine *e,
			     struct zn_train_data *d, int64_t step, int steps, bool *stop);
void zn_train_ckpt_end(struct zn_train_ckpt *t);
/* after step `step`: whether --save-hf-steps asks for DIR/hf-<step> (its path in buf) */
bool zn_train_ckpt_hf_due(const struct zn_train_ckpt *t, int64_t step, char *buf, size_t n);

#endif
