/* zinc train's token batches (through the model's data loader, src/model/data.h: llm.c
 * token files or text as bytes) and its per-step lines. */
#include "cli/train_io.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "model/data.h"

/* Every token below the model's vocabulary, or an error naming the first one, its
 * position and the vocabulary the file needs. */
static int check_vocab(struct zn_data *d, const char *path, int vocab)
{
	uint64_t pos = 0;
	int64_t tok = 0, need;
	int rc = zn_data_limit_vocab(d, vocab, &pos, &tok);

	if (rc <= 0)
		return rc;
	need = zn_data_vocab(d);
	if (need > INT_MAX - ZN_GPT2_VOCAB_PAD)
		zn_error("--data %s: token %lld at position %llu is not below the model's "
			 "vocabulary %d, and no --vocab can hold it: is the file a token file "
			 "of the kind its header says?", path, (long long)tok,
			 (unsigned long long)pos, vocab);
	else
		zn_error("--data %s: token %lld at position %llu is not below the model's "
			 "vocabulary %d: use --vocab %lld%s", path, (long long)tok,
			 (unsigned long long)pos, vocab, (long long)need,
			 zn_data_kind_of(d) == ZN_DATA_TEXT ? " (text: one token per byte)" : "");
	return -EINVAL;
}

int zn_train_data_open(struct zn_train_data *d, const char *path, enum zn_data_format format,
		       int vocab, const struct zn_engine *e, int T, uint64_t seed)
{
	uint64_t bt;
	int rc;

	memset(d, 0, sizeof(*d));
	d->B = zn_engine_micro_batch(e);
	d->gas = zn_engine_grad_accum(e);
	d->T = T;
	bt = (uint64_t)d->B * (uint64_t)T;
	/* consecutive windows, no shuffle: the run is reproducible and matches llm.c */
	rc = zn_data_open_as(&d->d, path, format, d->B, T, zn_engine_rank(e),
			     zn_engine_world(e), seed, false);
	if (rc)
		return rc;
	rc = check_vocab(d->d, path, vocab);
	if (rc) {
		zn_train_data_close(d);
		return rc;
	}
	d->inputs = malloc(bt * (uint64_t)d->gas * sizeof(int));
	d->targets = malloc(bt * (uint64_t)d->gas * sizeof(int));
	if (!d->inputs || !d->targets) {
		zn_train_data_close(d);
		return -ENOMEM;
	}
	return 0;
}

int zn_train_data_next(struct zn_train_data *d)
{
	uint64_t bt = (uint64_t)d->B * (uint64_t)d->T;
	int rc = 0;

	/* one global batch per micro-batch */
	for (int k = 0; !rc && k < d->gas; k++)
		rc = zn_data_next(d->d, d->inputs + k * bt, d->targets + k * bt);
	return rc;
}

void zn_train_data_close(struct zn_train_data *d)
{
	zn_data_close(d->d);
	free(d->inputs);
	free(d->targets);
	memset(d, 0, sizeof(*d));
}

/* ---- output ------------------------------------------------------------------------ */

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

static const char *off_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_CPU ? "cpu" : d == ZN_OFFLOAD_NVME ? "nvme" : "none";
}

void zn_train_print_header(FILE *f, const struct zn_config *cfg,
			   const struct zn_gpt2_config *mc, const struct zn_engine *e, int T,
			   int steps)
{
	if (zn_engine_rank(e) != 0)
		return;
	fprintf(f, "model: %d layers, %d heads, d_model %d, vocab %d, seq %d: %.2fM "
		"parameters (%s)\n", mc->layers, mc->heads, mc->d_model, mc->vocab, mc->seq,
		(double)zn_gpt2_param_count(mc) / 1e6, cfg->precision.bf16 ? "bf16" : "fp32");
	fprintf(f, "zero stage %d, offload optimizer %s, param %s; %d rank(s) x micro-batch %d "
		"x accumulation %d x seq %d = %d tokens per step; %d steps\n", cfg->zero.stage,
		off_name(cfg->zero.offload_optimizer.device),
		off_name(cfg->zero.offload_param.device), zn_engine_world(e),
		zn_engine_micro_batch(e), zn_engine_grad_accum(e), T,
		zn_engine_world(e) * zn_engine_micro_batch(e) * zn_engine_grad_accum(e) * T,
		steps);
	fflush(f);
}

void zn_train_print_step(FILE *f, const struct zn_step_stats *st, int steps, int every,
			 bool tty)
{
	double tps = st->step_ms > 0 ? (double)st->tokens / (st->step_ms / 1e3) : 0;
	bool line = st->step % every == 0 || st->step == steps || st->step == 1;

	if (!line) {
		if (tty) {
			int w = 30, done = (int)((int64_t)w * st->step / steps);

			fprintf(f, "\r[%.*s%*s] %lld/%d loss %.4f", done,
				"##############################", w - done, "",
				(long long)st->step, steps, st->loss);
			fflush(f);
		}
		return;
	}
	if (tty)
		fprintf(f, "\r\033[K");
	fprintf(f, "step %lld/%d | loss %.4f | %.1fk tok/s | %.0f ms (fwd %.0f, bwd %.0f, opt "
		"%.0f, wait %.0f) | dev peak %.1f MiB | pinned %.1f MiB\n", (long long)st->step,
		steps, st->loss, tps / 1e3, st->step_ms, st->fwd_ms, st->bwd_ms, st->opt_ms,
		st->wait_ms, mib(st->device_peak_bytes), mib(st->pinned_bytes));
	fflush(f);
}
