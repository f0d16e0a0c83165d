/* zinc train's token batches (through the model's data loader, src/model/data.h: llm.c
 * token files or text as bytes) and its per-step lines. */
#include "train/train_io.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/dtype.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/size.h"
#include "core/units.h"
#include "data/pack.h"
#include "model/data.h"
#include "sched/plan.h"

/* the most a family pads its vocabulary by (GPT-2: to a multiple of 128) */
#define VOCAB_PAD_MAX 128

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
	if (need > INT_MAX - VOCAB_PAD_MAX)
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
		       int vocab, const struct zn_engine *e, int T, uint64_t seed, bool shuffle,
		       bool packed)
{
	uint64_t bt;
	int rc;

	memset(d, 0, sizeof(*d));
	d->B = zn_engine_micro_batch(e);
	d->gas = zn_engine_grad_accum(e);
	d->T = T;
	bt = (uint64_t)d->B * (uint64_t)T;
	/* consecutive windows (llm.c's order) unless shuffle: a permutation per epoch drawn
	 * from (seed, epoch), the same on every rank */
	/* packed: the rows are the packer's (data/pack.h), which counts them against
	 * world x B itself; the windows need only exist (one of T + 1 tokens) */
	rc = zn_data_open_as(&d->d, path, format, packed ? 1 : d->B, T,
			     packed ? 0 : zn_engine_rank(e), packed ? 1 : zn_engine_world(e), seed,
			     shuffle);
	if (rc)
		return rc;
	rc = check_vocab(d->d, path, vocab);
	if (rc) {
		zn_train_data_close(d);
		return rc;
	}
	d->inputs = zn_size_calloc(zn_size_mul(bt, (uint64_t)d->gas), sizeof(int),
				   "the step's input tokens");
	d->targets = zn_size_calloc(zn_size_mul(bt, (uint64_t)d->gas), sizeof(int),
				    "the step's target tokens");
	if (!d->inputs || !d->targets) {
		zn_train_data_close(d);
		return -ENOMEM;
	}
	return 0;
}

int zn_train_data_pack(struct zn_train_data *d, const struct zn_engine *e, const char *what)
{
	uint64_t bt = (uint64_t)d->B * (uint64_t)d->T, rows, toks;
	int rc = zn_pack_open(&d->pack, d->d, d->B, d->T, zn_engine_rank(e), zn_engine_world(e));

	if (rc)
		return rc;
	d->pos = zn_size_calloc(zn_size_mul(bt, (uint64_t)d->gas), sizeof(int),
				"the step's token positions");
	if (!d->pos)
		return -ENOMEM;
	rows = zn_pack_rows(d->pack);
	toks = zn_data_token_count(d->d);
	if (zn_engine_rank(e) == 0)
		printf("%s%spacking documents: %llu documents in %llu rows of %d tokens (%.1f%% "
		       "padding), %llu steps per epoch\n", what ? what : "", what ? ": " : "",
		       (unsigned long long)zn_pack_documents(d->pack), (unsigned long long)rows,
		       d->T, rows ? 100.0 * (1.0 - (double)toks / ((double)rows * d->T)) : 0.0,
		       (unsigned long long)zn_pack_steps_per_epoch(d->pack));
	return 0;
}

int zn_train_data_next(struct zn_train_data *d)
{
	uint64_t bt = (uint64_t)d->B * (uint64_t)d->T;
	int rc = 0;

	/* one global batch per micro-batch */
	for (int k = 0; !rc && k < d->gas; k++)
		rc = d->pack ? zn_pack_next(d->pack, d->inputs + k * bt, d->targets + k * bt,
					    d->pos + k * bt) :
			       zn_data_next(d->d, d->inputs + k * bt, d->targets + k * bt);
	return rc;
}

uint64_t zn_train_data_position(const struct zn_train_data *d)
{
	return zn_data_step(d->d);
}

void zn_train_data_seek(struct zn_train_data *d, uint64_t position)
{
	zn_data_seek(d->d, position);
}

uint64_t zn_train_data_steps_per_epoch(const struct zn_train_data *d)
{
	if (d->pack)
		return zn_pack_steps_per_epoch(d->pack);
	return zn_data_steps_per_epoch(d->d);
}

int zn_train_data_epoch_steps(const struct zn_train_data *d, int epochs, int *steps)
{
	uint64_t per = zn_train_data_steps_per_epoch(d);
	uint64_t n = zn_size_mul(per, (uint64_t)epochs) / (uint64_t)d->gas;

	if (n > INT_MAX) {
		zn_error("--epochs %d x %llu micro-batches per epoch / grad-accum %d is more than "
			 "%d steps: lower --epochs", epochs, (unsigned long long)per, d->gas,
			 INT_MAX);
		return ZN_EUSAGE;
	}
	*steps = n < 1 ? 1 : (int)n;
	return 0;
}

void zn_train_data_close(struct zn_train_data *d)
{
	zn_pack_close(d->pack);
	free(d->pos);
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
			   const struct zn_train_model *tm, const struct zn_engine *e, int T,
			   int steps)
{
	struct zn_engine_memory m;
	char line[256], sbl[96];
	const char *dt = cfg->precision.fp16 ? "fp16" : cfg->precision.bf16 ? "bf16" : "fp32";

	if (zn_engine_rank(e) != 0)
		return;
	zn_train_model_line(tm, line, sizeof(line));
	fprintf(f, "model: %s: %.2fM parameters (%s)\n", line,
		(double)zn_train_model_params(tm) / 1e6, cfg->precision.bf16 ? "bf16" : "fp32");
	fprintf(f, "zero stage %d, offload optimizer %s, param %s; %s; %d rank(s) x micro-batch "
		"%d x accumulation %d x seq %d = %d tokens per step; %d steps\n", cfg->zero.stage,
		off_name(cfg->zero.offload_optimizer.device),
		off_name(cfg->zero.offload_param.device),
		zn_plan_fmt_state_bytes(dt, cfg->optimizer.states, sbl, sizeof(sbl)),
		zn_engine_world(e),
		zn_engine_micro_batch(e), zn_engine_grad_accum(e), T,
		zn_engine_world(e) * zn_engine_micro_batch(e) * zn_engine_grad_accum(e) * T,
		steps);
	zn_engine_memory(e, &m);
	zn_train_print_memory_plan(f, &m);
	zn_train_print_schedule(f, &m);
	if (zn_engine_frozen_q4(e)) {
		char fb[32];

		fprintf(f, "frozen base: linear weights in 4 bits (bitsandbytes %s), %s on its "
			"tier\n", cfg->runtime.quantize_base == ZN_QUANTIZE_NF4 ?
			(cfg->runtime.double_quant ? "NF4, blocks of 64, double quant" :
						     "NF4, blocks of 64") : "checkpoint",
			zn_format_bytes(fb, sizeof(fb), m.frozen_bytes));
	}
	fflush(f);
}

void zn_train_print_memory_plan(FILE *f, const struct zn_engine_memory *m)
{
	char b[6][32];

	fprintf(f, "memory plan: device %s, pinned %s + margin %s = %s reserved (budget %s); "
		"gradients: %s", zn_format_bytes(b[0], sizeof(b[0]), m->device_bytes),
		zn_format_bytes(b[1], sizeof(b[1]), m->pinned_plan_bytes),
		zn_format_bytes(b[2], sizeof(b[2]),
				m->pinned_reserved_bytes > m->pinned_plan_bytes ?
				m->pinned_reserved_bytes - m->pinned_plan_bytes : 0),
		zn_format_bytes(b[3], sizeof(b[3]), m->pinned_reserved_bytes),
		zn_format_bytes(b[4], sizeof(b[4]), m->pinned_budget_bytes), m->grad_home);
	if (m->grad_ring)
		fprintf(f, " (%d buffers)", m->grad_ring);
	fprintf(f, ", %s\n", zn_format_bytes(b[5], sizeof(b[5]), m->grad_pinned_bytes));
}

void zn_train_print_schedule(FILE *f, const struct zn_engine_memory *m)
{
	char b[32], x[32];

	if (!m->schedule[0])
		return;
	fprintf(f, "schedule: %s", m->schedule);
	if (m->nvme_step_read_bytes)
		fprintf(f, "; nvme read per step %s",
			zn_format_bytes(b, sizeof(b), m->nvme_step_read_bytes));
	if (m->expert_bytes)
		fprintf(f, "%s frozen experts fetched as routed, %s an expert, at most %s per step",
			m->nvme_step_read_bytes ? " (the layers without their experts);" : ";",
			zn_format_bytes(b, sizeof(b), m->expert_bytes),
			zn_format_bytes(x, sizeof(x), m->step_expert_bytes));
	fprintf(f, "\n");
}

void zn_train_print_step(FILE *f, const struct zn_step_stats *st, int steps, int every,
			 bool tty)
{
	double sec = st->step_ms / 1e3;
	bool line = st->step % every == 0 || st->step == steps || st->step == 1 || st->overflow;
	char tps[32], t[5][32], rd[32], wr[32], xb[32];

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
	fprintf(f, "step %lld/%d | loss %.4f", (long long)st->step, steps, st->loss);
	/* a mixture of experts' load-balancing loss, before its coefficient (docs/model.md) */
	if (st->has_aux)
		fprintf(f, " | aux %.4f", st->aux_loss);
	fprintf(f, " | lr %.3g | %s | %s (fwd %s, bwd %s, opt %s, wait %s) | dev peak %.1f MiB | "
		"pinned %.1f MiB", (double)st->lr, zn_format_rate(tps, sizeof(tps), sec > 0 ? (double)st->tokens / sec : 0, "tok/s"),
		zn_format_ms(t[0], sizeof(t[0]), st->step_ms),
		zn_format_ms(t[1], sizeof(t[1]), st->fwd_ms),
		zn_format_ms(t[2], sizeof(t[2]), st->bwd_ms),
		zn_format_ms(t[3], sizeof(t[3]), st->opt_ms),
		zn_format_ms(t[4], sizeof(t[4]), st->wait_ms), mib(st->device_peak_bytes),
		mib(st->pinned_bytes));
	if (st->plan_nvme_read_bytes || st->plan_nvme_write_bytes || st->nvme_read_bytes ||
	    st->nvme_write_bytes)
		fprintf(f, " | nvme read %s, write %s",
			zn_format_rate(rd, sizeof(rd), sec > 0 ? st->nvme_read_bytes / sec : 0, "B/s"),
			zn_format_rate(wr, sizeof(wr), sec > 0 ? st->nvme_write_bytes / sec : 0,
				       "B/s"));
	/* frozen experts fetched per routed expert: their bytes moved up, and how many of
	 * the whole layers' (docs/lora.md) */
	if (st->plan_expert_fetches)
		fprintf(f, " | experts %s (%llu of %llu)",
			zn_format_bytes(xb, sizeof(xb), st->expert_bytes),
			(unsigned long long)st->expert_fetches,
			(unsigned long long)st->plan_expert_fetches);
	/* fp16: the loss scale, and DeepSpeed's word for a skipped step */
	if (st->overflow)
		fprintf(f, " | overflow, skipped, scale %g, next %g", (double)st->loss_scale,
			(double)st->next_loss_scale);
	else if (st->loss_scale != 1.0f)
		fprintf(f, " | scale %g", (double)st->loss_scale);
	fprintf(f, "\n");
	fflush(f);
}

void zn_train_totals_add(struct zn_train_totals *t, const struct zn_step_stats *st)
{
	t->steps++;
	t->tokens += st->tokens;
	t->step_ms += st->step_ms;
	if (st->pinned_bytes > t->pinned_peak)
		t->pinned_peak = st->pinned_bytes;
	if (st->device_peak_bytes > t->device_peak)
		t->device_peak = st->device_peak_bytes;
	t->pinned_size = st->pinned_size_bytes;
	t->nvme_read += st->nvme_read_bytes;
	t->nvme_write += st->nvme_write_bytes;
	t->plan_nvme_read = st->plan_nvme_read_bytes;
	t->plan_nvme_write = st->plan_nvme_write_bytes;
	t->plan_nvme_first_read = st->plan_nvme_first_read_bytes;
	t->expert_fetches += st->expert_fetches;
	t->expert_bytes += st->expert_bytes;
	t->plan_expert_fetches += st->plan_expert_fetches;
	t->plan_expert_bytes += st->plan_expert_bytes;
}

/* Peak resident set of the process from the kernel (ru_maxrss: KiB on Linux). */
static uint64_t peak_rss_bytes(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (uint64_t)ru.ru_maxrss * 1024;
}

void zn_train_print_summary(FILE *f, const struct zn_train_totals *t)
{
	char ms[32], tps[32], rss[32], pin[32], pins[32], dev[32], xb[32], xa[32];
	double mean = t->steps ? t->step_ms / t->steps : 0;

	if (!t->steps)
		return;
	fprintf(f, "summary: %d steps | %llu tokens | mean step %s | %s | peak RSS %s | pinned "
		"peak %s of %s | dev peak %s", t->steps, (unsigned long long)t->tokens,
		zn_format_ms(ms, sizeof(ms), mean),
		zn_format_rate(tps, sizeof(tps), t->step_ms > 0 ? t->tokens / (t->step_ms / 1e3) :
			       0, "tok/s"),
		zn_format_bytes(rss, sizeof(rss), peak_rss_bytes()),
		zn_format_bytes(pin, sizeof(pin), t->pinned_peak),
		zn_format_bytes(pins, sizeof(pins), t->pinned_size),
		zn_format_bytes(dev, sizeof(dev), t->device_peak));
	if (t->plan_nvme_read || t->plan_nvme_write || t->nvme_read || t->nvme_write)
		fprintf(f, " | nvme per step read %.0f B (plan %llu", (double)t->nvme_read / t->steps,
			(unsigned long long)t->plan_nvme_read);
	/* LoRA, base on nvme: layer 0's base is read once, by the first step, and kept */
	if (t->plan_nvme_first_read)
		fprintf(f, "; the first step also reads layer 0's base, %llu B, kept for the run",
			(unsigned long long)t->plan_nvme_first_read);
	if (t->plan_nvme_read || t->plan_nvme_write || t->nvme_read || t->nvme_write)
		fprintf(f, "), write %.0f B (plan %llu)", (double)t->nvme_write / t->steps,
			(unsigned long long)t->plan_nvme_write);
	if (t->plan_expert_fetches)
		fprintf(f, " | experts per step %s of %s (%.1f%%: %llu of %llu fetches)",
			zn_format_bytes(xb, sizeof(xb), t->expert_bytes / (uint64_t)t->steps),
			zn_format_bytes(xa, sizeof(xa), t->plan_expert_bytes / (uint64_t)t->steps),
			t->plan_expert_bytes ? 100.0 * (double)t->expert_bytes /
					       (double)t->plan_expert_bytes : 0.0,
			(unsigned long long)(t->expert_fetches / (uint64_t)t->steps),
			(unsigned long long)(t->plan_expert_fetches / (uint64_t)t->steps));
	fprintf(f, "\n");
	fflush(f);
}
