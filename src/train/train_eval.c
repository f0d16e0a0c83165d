/* Validation during zinc train and the data-order flags (train_eval.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_eval.h"
#include "core/args.h"
#include "core/log.h"
#include "data/pack.h"
#include "model/data.h"

const char zn_train_eval_usage[] =
	"  --shuffle          visit the windows in a permutation drawn per epoch from\n"
	"                     --seed (the same for any rank count; default: file order)\n"
	"  --epochs N         train N passes over the data (sets the steps; not with --steps)\n"
	"  --val-data FILE    validation tokens (zinc tokenize --val-fraction writes them)\n"
	"  --eval-steps N     a validation pass every N steps (and after the last; default:\n"
	"                     only after the last)\n"
	"  --eval-batches K   global batches per validation pass (default 10, at most the\n"
	"                     file's)\n";

int zn_train_eval_flag(int n, char **rest, int *i, struct zn_train_eval_opts *o)
{
	const char *a = rest[*i];

	if (!strcmp(a, "--shuffle")) {
		o->shuffle = true;
		return 1;
	}
	if (!strcmp(a, "--val-data")) {
		o->val_data = zn_arg_value(n, rest, i);
		return o->val_data ? 1 : ZN_EUSAGE;
	}
	if (!strcmp(a, "--epochs"))
		return zn_arg_int(n, rest, i, 1, 1000000, &o->epochs) ? ZN_EUSAGE : 1;
	if (!strcmp(a, "--eval-steps"))
		return zn_arg_int(n, rest, i, 1, 100000000, &o->eval_steps) ? ZN_EUSAGE : 1;
	if (!strcmp(a, "--eval-batches"))
		return zn_arg_int(n, rest, i, 1, 1000000, &o->eval_batches) ? ZN_EUSAGE : 1;
	return 0;
}

/* The validation file's batches of one micro-batch row each (windows, or packed rows),
 * counted once, alone (one rank, one row per step), so that one check below says what a
 * file too short for a global batch lacks, whichever of micro-batch, accumulation and
 * ranks it is short of. */
static int rows_of(const char *path, enum zn_data_format format, int T, bool packed,
		   uint64_t *rows)
{
	struct zn_data *d = NULL;
	struct zn_pack *p = NULL;
	int rc = zn_data_open_as(&d, path, format, 1, T, 0, 1, 0, false);

	if (!rc && packed)
		rc = zn_pack_open(&p, d, 1, T, 0, 1);
	if (!rc)
		*rows = packed ? zn_pack_rows(p) : zn_data_steps_per_epoch(d);
	zn_pack_close(p);
	zn_data_close(d);
	return rc;
}

int zn_train_eval_open(struct zn_train_eval *v, const struct zn_train_eval_opts *o,
		       enum zn_data_format format, int vocab, const struct zn_engine *e, int T,
		       uint64_t seed, bool packed)
{
	uint64_t per_pass, rows = 0, need;
	int rc;

	memset(v, 0, sizeof(*v));
	v->o = o;
	if (!o->val_data) {
		if (o->eval_steps || o->eval_batches)
			zn_warn("--eval-steps / --eval-batches without --val-data: no validation");
		return 0;
	}
	/* one global batch: grad_accum x micro-batch x ranks rows */
	need = (uint64_t)zn_engine_grad_accum(e) * (uint64_t)zn_engine_micro_batch(e) *
	       (uint64_t)zn_engine_world(e);
	rc = rows_of(o->val_data, format, T, packed, &rows);
	if (!rc && rows < need) {
		zn_error("--val-data %s: %llu %s of %d tokens, fewer than one global batch of %llu "
			 "(micro-batch %d x accumulation %d x %d ranks): give more validation "
			 "data, or a smaller --micro-batch or --grad-accum", o->val_data,
			 (unsigned long long)rows, packed ? "packed rows" : "windows", T + !packed,
			 (unsigned long long)need, zn_engine_micro_batch(e),
			 zn_engine_grad_accum(e), zn_engine_world(e));
		return ZN_EUSAGE;
	}
	if (!rc)
		rc = zn_train_data_open(&v->d, o->val_data, format, vocab, e, T, seed, false,
					packed);
	/* --packing documents: validation rows packed as the training rows are */
	if (!rc && packed)
		rc = zn_train_data_pack(&v->d, e, "val data");
	if (rc) {
		zn_error("--val-data %s: cannot be used (see above)", o->val_data);
		if (v->d.d)
			zn_train_data_close(&v->d);
		return rc;
	}
	/* one batch = grad_accum data steps of the file (at least one: checked above) */
	per_pass = zn_train_data_steps_per_epoch(&v->d) / (uint64_t)v->d.gas;
	v->batches = o->eval_batches ? o->eval_batches : 10;
	if ((uint64_t)v->batches > per_pass)
		v->batches = (int)per_pass;
	v->on = true;
	v->best = INFINITY;
	return 0;
}

int zn_train_eval_run(struct zn_train_eval *v, struct zn_engine *e, int step, float *loss)
{
	double sum = 0.0;
	int rc = 0;

	if (!v->on) {
		zn_error("eval: no validation data (--val-data FILE)");
		return -EINVAL;
	}
	zn_data_seek(v->d.d, 0);
	for (int b = 0; !rc && b < v->batches; b++) {
		float l = 0.0f;

		rc = zn_train_data_next(&v->d);
		if (!rc)
			rc = zn_engine_eval_pos(e, v->d.inputs, v->d.targets, v->d.pos, &l);
		sum += l;
	}
	if (rc)
		return rc;
	v->last = (float)(sum / v->batches);
	v->runs++;
	if (v->last < v->best) {
		v->best = v->last;
		v->best_step = step;
	}
	*loss = v->last;
	return 0;
}

int zn_train_eval_after_step(struct zn_train_eval *v, struct zn_engine *e, int step, int steps,
			     FILE *out)
{
	float loss;
	int rc;

	if (!v->on || (step != steps && !(v->o->eval_steps && step % v->o->eval_steps == 0)))
		return 0;
	rc = zn_train_eval_run(v, e, step, &loss);
	if (!rc && zn_engine_rank(e) == 0)
		fprintf(out, "val loss %.4f | ppl %.2f | step %d | %d batches\n", v->last,
			exp((double)v->last), step, v->batches);
	return rc;
}

void zn_train_eval_summary(FILE *f, const struct zn_train_eval *v)
{
	if (!v->on || !v->runs)
		return;
	fprintf(f, "val summary: last %.4f (ppl %.2f) | best %.4f (ppl %.2f) at step %d | %d "
		"passes\n", v->last, exp((double)v->last), v->best, exp((double)v->best),
		v->best_step, v->runs);
}

void zn_train_eval_close(struct zn_train_eval *v)
{
	if (v->on)
		zn_train_data_close(&v->d);
	memset(v, 0, sizeof(*v));
}
