/* zinc train's data order and validation flags: --shuffle, --epochs N, --val-data FILE,
 * --eval-steps N, --eval-batches K. Internal to zinc (src/train).
 *
 * Validation: every N optimizer steps and after the last, K global batches of the
 * validation file (from its start, the same tokens each time, laid out as a training
 * batch) go through zn_engine_eval (forward only: no gradients, no optimizer I/O);
 * rank 0 prints "val loss 3.2101 | ppl 24.78 | step 100" and the summary the best and the
 * last value. With --packing documents the validation file is packed as the training
 * data is (its rows, positions and predicted targets; zn_engine_eval_pos). */
#ifndef ZN_TRAIN_EVAL_H
#define ZN_TRAIN_EVAL_H

#include <stdbool.h>
#include <stdio.h>

#include "train/train_io.h"

struct zn_train_eval_opts {
	const char *val_data;
	int eval_steps;   /* 0: only at the end */
	int eval_batches; /* default 10, at most the file's */
	bool shuffle;     /* windows in a seeded permutation per epoch */
	int epochs;       /* 0: --steps decides */
};

/* Takes rest[*i] (and its value) when it is one of these flags: 1 taken, 0 not one of
 * them, ZN_EUSAGE a bad value (logged). */
int zn_train_eval_flag(int n, char **rest, int *i, struct zn_train_eval_opts *o);
extern const char zn_train_eval_usage[];

struct zn_train_eval {
	struct zn_train_data d;
	const struct zn_train_eval_opts *o;
	int batches;
	bool on;
	float best, last;
	int best_step, runs;
};

int zn_train_eval_open(struct zn_train_eval *v, const struct zn_train_eval_opts *o,
		       enum zn_data_format format, int vocab, const struct zn_engine *e, int T,
		       uint64_t seed, bool packed);
/* Evaluates now, forward only: *loss the mean over the batches, recorded (last, best) as
 * of optimizer step `step`. -EINVAL (logged) without validation data. Collective. */
int zn_train_eval_run(struct zn_train_eval *v, struct zn_engine *e, int step, float *loss);
/* After optimizer step `step` (1-based) of `steps`: evaluates when due, one line to out. */
int zn_train_eval_after_step(struct zn_train_eval *v, struct zn_engine *e, int step, int steps,
			     FILE *out);
void zn_train_eval_summary(FILE *f, const struct zn_train_eval *v); /* nothing when off */
void zn_train_eval_close(struct zn_train_eval *v);

#endif
