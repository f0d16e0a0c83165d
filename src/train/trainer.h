/* The trainer: zinc train's run as library calls, shared by the zinc command (cli/cmd_train.c)
 * and include/zinc.h's zn_trainer_* (train/api.c), so both train the same way.
 *
 * It owns the engine, the training and validation data, the checkpoint cadence and resume
 * (train_ckpt.h), the LoRA wrapping (train_lora.h), the csv monitor and the trace; it is
 * given the config (resolved and validated), the model, the options and the ranks (the
 * caller has agreed them, train_ranks.h). It prints what zinc train prints besides the
 * header, the step line and the summary (the caller's): eval, save and resume lines, to
 * stdout on rank 0. Signal handling is the caller's (zinc train installs it).
 *
 *     struct zn_trainer t;
 *     rc = zn_train_begin(&t, &cfg, &tm, &opts, &ranks);   // t.exit_code on failure
 *     while (!rc && zn_train_more(&t)) {
 *             rc = zn_train_step(&t, &st);                  // batch, engine step
 *             ... print st ...
 *             if (!rc)
 *                     rc = zn_train_after_step(&t, &st);    // csv, eval, checkpoints
 *     }
 *     rc = zn_train_finish(&t, rc);                         // flush, final saves, trace
 *     zn_train_end(&t);
 *
 * Internal to zinc (src/train); the public face is include/zinc.h.
 */
#ifndef ZN_TRAIN_TRAINER_H
#define ZN_TRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "train/monitor.h"
#include "train/train_ckpt.h"
#include "train/train_eval.h"
#include "train/train_io.h"
#include "train/train_lora.h"
#include "train/train_model.h"
#include "train/train_ranks.h"
#include "zinc.h"

/* What a run does, besides the config and the model: zinc train's own flags. */
struct zn_train_opts {
	const char *data;
	const char *init_from;    /* the base's HF directory or file (weights), or NULL */
	const char *model_config;
	const char *save_final;
	enum zn_dtype save_dtype; /* fp32 (default) or bf16 */
	uint64_t shard_bytes;     /* --save-shard-size; 0: 5GB */
	int seq;                  /* T; 0 = the model's seq */
	int steps;
	double warmup_ratio;      /* --warmup-ratio: the warmup as a share of the steps */
	const char *trace;        /* --trace FILE (rank 0) */
	int64_t trace_first, trace_last; /* --trace-steps (default every step) */
	struct zn_train_lora lora;    /* --lora-* (train_lora.h) */
	struct zn_train_ckpt_opts ck; /* train_ckpt.h */
	struct zn_train_eval_opts ev; /* --shuffle --epochs --val-data --eval-* */
};

struct zn_trainer {
	struct zn_config cfg;
	const struct zn_train_model *tm;
	struct zn_train_opts *o;
	struct zn_train_ranks *ranks;
	struct zn_engine_options eo;
	struct zn_model model;        /* tm's, or LoRA's wrapping of it */
	struct zn_engine *e;
	struct zn_train_data data;
	struct zn_train_eval val;
	struct zn_monitor mon;
	struct zn_train_totals tot;
	struct zn_trace *trace;
	struct zn_train_ckpt ck;
	int steps;                    /* of the run (--epochs: counted from the data) */
	int64_t done;                 /* optimizer steps taken (a resumed run: from its step) */
	bool stop;                    /* SIGTERM: stop after this step (train_ckpt.h) */
	int exit_code;                /* zinc train's exit status for a failed begin */
	/* zn_trainer_create's own (train/api.c): what the above point to */
	struct zn_train_model own_tm;
	struct zn_train_opts own_opts;
	struct zn_train_ranks own_ranks;
	char run_meta[16384];         /* how the model was made, for its checkpoints */
	/* copies of the caller's data, val_data, resume and the net's init_from, model_config */
	char *own_paths[5];
	bool own;                     /* made by zn_trainer_create: eval only when asked */
};

/* Builds the engine (weights from --init-from, a checkpoint or the seed), opens the data,
 * the validation data, the monitor and the trace, and restores a resumed run. cfg is
 * copied; tm, o and ranks must outlive t. Returns 0, or a negative code (logged) with
 * t->exit_code the status zinc train exits with (2: a setting to change, 1: a failure);
 * call zn_train_end either way. */
int zn_train_begin(struct zn_trainer *t, const struct zn_config *cfg,
		   const struct zn_train_model *tm, struct zn_train_opts *o,
		   struct zn_train_ranks *ranks);
/* Whether a step is left (not after a SIGTERM stop). */
bool zn_train_more(const struct zn_trainer *t);
/* The next batch and one optimizer step of the engine; st as zn_engine_step's. */
int zn_train_step(struct zn_trainer *t, struct zn_step_stats *st);
/* After the step: the csv monitor, a due evaluation, the checkpoint cadence (and the
 * SIGTERM stop), a due --save-hf-steps directory. */
int zn_train_after_step(struct zn_trainer *t, const struct zn_step_stats *st);
/* After the last step (rc: the loop's result): waits for the write-behind, writes
 * --save-final / the adapter, closes the trace. Returns the first error. */
int zn_train_finish(struct zn_trainer *t, int rc);
/* Frees everything; accepts a trainer whose begin failed part way (zeroed first). */
void zn_train_end(struct zn_trainer *t);

#endif
