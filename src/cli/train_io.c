/* zinc train's token batches and its per-step lines.
 *
 * Tokens: the whole file is read once (the demo's text is small). An llm.c token file
 * (header of 256 int32: magic 20240520, version 1, token count; then uint16 tokens) gives
 * its tokens; any other file is text, one token per byte. The model helper's data loader
 * (src/model/data.h) is meant to replace this reader when it lands.
 */
#include "cli/train_io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256

static int read_file(const char *path, unsigned char **buf, size_t *len)
{
	/* the whole training file into memory */
	FILE *f = fopen(path, "rb");
	long n;

	if (!f) {
		zn_error("--data %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		zn_error("--data %s: cannot find its size: %s", path, strerror(errno));
		fclose(f);
		return -EIO;
	}
	*buf = malloc((size_t)n + 1);
	if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n) {
		zn_error("--data %s: short read", path);
		fclose(f);
		free(*buf);
		*buf = NULL;
		return -EIO;
	}
	fclose(f);
	*len = (size_t)n;
	return 0;
}

static int decode(struct zn_train_data *d, const char *path, const unsigned char *b,
		  size_t len, int vocab)
{
	int32_t hdr[3] = { 0 };
	bool llmc = false;

	if (len >= LLMC_HEADER_INTS * 4) {
		memcpy(hdr, b, sizeof(hdr));
		llmc = hdr[0] == LLMC_MAGIC;
	}
	if (llmc) {
		size_t have = (len - LLMC_HEADER_INTS * 4) / 2;

		if (hdr[1] != 1 || hdr[2] < 0 || (size_t)hdr[2] > have) {
			zn_error("--data %s: llm.c token file with version %d and %d tokens but "
				 "room for %zu: the file is truncated or not version 1", path,
				 hdr[1], hdr[2], have);
			return -EINVAL;
		}
		d->count = (uint64_t)hdr[2];
	} else {
		d->count = len;
	}
	d->tokens = malloc((d->count ? d->count : 1) * sizeof(int));
	if (!d->tokens)
		return -ENOMEM;
	for (uint64_t i = 0; i < d->count; i++) {
		uint16_t t;

		if (llmc)
			memcpy(&t, b + LLMC_HEADER_INTS * 4 + 2 * i, 2);
		else
			t = b[i];
		if (t >= vocab) {
			zn_error("--data %s: token %u at %" PRIu64 " is not below the model's "
				 "vocabulary %d%s", path, t, i, vocab,
				 llmc ? "" : " (text is one token per byte: use --vocab 256)");
			return -EINVAL;
		}
		d->tokens[i] = t;
	}
	return 0;
}

int zn_train_data_open(struct zn_train_data *d, const char *path, int vocab,
		       const struct zn_engine *e, int T)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	uint64_t bt;
	int rc;

	memset(d, 0, sizeof(*d));
	d->B = zn_engine_micro_batch(e);
	d->gas = zn_engine_grad_accum(e);
	d->rank = zn_engine_rank(e);
	d->world = zn_engine_world(e);
	d->T = T;
	bt = (uint64_t)d->B * (uint64_t)T;
	rc = read_file(path, &buf, &len);
	rc = rc ?: decode(d, path, buf, len, vocab);
	free(buf);
	if (!rc && d->count < (uint64_t)d->world * bt + 1) {
		zn_error("--data %s: %" PRIu64 " tokens, but one global batch needs %" PRIu64
			 ": give more data or a smaller --micro-batch / --seq", path, d->count,
			 (uint64_t)d->world * bt + 1);
		rc = -EINVAL;
	}
	d->inputs = malloc(bt * (uint64_t)d->gas * sizeof(int));
	d->targets = malloc(bt * (uint64_t)d->gas * sizeof(int));
	if (!rc && (!d->inputs || !d->targets))
		rc = -ENOMEM;
	if (rc)
		zn_train_data_close(d);
	return rc;
}

void zn_train_data_next(struct zn_train_data *d, int64_t step)
{
	uint64_t bt = (uint64_t)d->B * (uint64_t)d->T, span = d->count - 1;
	uint64_t batch = (uint64_t)d->world * bt;

	for (int k = 0; k < d->gas; k++) {
		/* whole global batches, wrapping to the start at the end of the file */
		uint64_t per_epoch = span / batch;
		uint64_t g = ((uint64_t)step * (uint64_t)d->gas + (uint64_t)k) % per_epoch;
		uint64_t base = g * batch + (uint64_t)d->rank * bt;

		memcpy(d->inputs + k * bt, d->tokens + base, bt * sizeof(int));
		memcpy(d->targets + k * bt, d->tokens + base + 1, bt * sizeof(int));
	}
}

void zn_train_data_close(struct zn_train_data *d)
{
	free(d->tokens);
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
