/* zinc generate's loop (cmd_generate.h): the prompt through the model in chunks, then one
 * token at a time until --max-new-tokens, an end-of-text id or a --stop text; the text to
 * stdout at UTF-8 boundaries (sched/generate_text.h), the figures to stderr after it, on
 * lines of their own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cmd_generate.h"
#include "core/args.h"
#include "core/log.h"
#include "sched/generate_sample.h"
#include "sched/generate_text.h"
#include "train/train_hf.h"
#include "zinc.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* the text as it becomes safe to show: flushed at once, so a reader sees each character
 * when it is complete */
static int to_stdout(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	if (fwrite(p, 1, n, stdout) != n || fflush(stdout)) {
		zn_error("zinc generate: writing the text to stdout failed");
		return -EIO;
	}
	return 0;
}

static void report(const struct gen_args *a, struct zn_gen *g, int n_prompt, double pre_ms,
		   int n_new, double dec_ms)
{
	struct zn_gen_stats s;
	char b1[32], b2[32], b3[32];
	static const char *home[] = { "device", "cpu", "nvme" };

	zn_gen_stats(g, &s);
	fprintf(stderr,
		"prefill: %d tokens in %.1f ms (%.1f tok/s); decode: %d tokens in %.1f ms "
		"(%.1f tok/s)\n",
		n_prompt, pre_ms, pre_ms > 0 ? 1e3 * n_prompt / pre_ms : 0.0, n_new, dec_ms,
		dec_ms > 0 && n_new ? 1e3 * n_new / dec_ms : 0.0);
	fprintf(stderr, "device %s: %s used; layers on %s, %s streamed", s.device_name,
		zn_arg_fmt_ibytes(s.device_bytes, b1, sizeof(b1)), home[a->home],
		zn_arg_fmt_ibytes(s.streamed_bytes, b2, sizeof(b2)));
	if (a->home != ZN_GEN_DEVICE)
		fprintf(stderr, " (%d ahead)", s.prefetch_depth);
	if (a->home == ZN_GEN_NVME)
		fprintf(stderr, ", %s read from nvme",
			zn_arg_fmt_ibytes(s.nvme_read_bytes, b3, sizeof(b3)));
	/* a mixture of experts: only the routed experts came up (docs/generate.md) */
	if (s.expert_all_fetches)
		fprintf(stderr, "; experts %s of %s (%.1f%%: %llu of %llu fetches)",
			zn_arg_fmt_ibytes(s.expert_bytes, b1, sizeof(b1)),
			zn_arg_fmt_ibytes(s.expert_all_bytes, b2, sizeof(b2)),
			s.expert_all_bytes ? 100.0 * (double)s.expert_bytes /
					     (double)s.expert_all_bytes : 0.0,
			(unsigned long long)s.expert_fetches,
			(unsigned long long)s.expert_all_fetches);
	fputc('\n', stderr);
}

static int open_gen(const struct gen_args *a, struct zn_gen_model *gm, int n_prompt,
		    struct zn_gen **g)
{
	struct zn_gen_opts o = { 0 };

	o.max_t = a->max_seq ? a->max_seq : n_prompt + (a->max_new ? a->max_new : 1);
	if (o.max_t < n_prompt + a->max_new) {
		zn_error("zinc generate: --max-seq %d is below the prompt (%d tokens) + "
			 "--max-new-tokens %d", o.max_t, n_prompt, a->max_new);
		return ZN_EUSAGE;
	}
	o.max_chunk = a->chunk < o.max_t ? a->chunk : o.max_t;
	o.home = a->home;
	o.nvme_path = a->nvme_path;
	o.device = a->device;
	o.device_mem = a->device_mem;
	o.prefetch_depth = a->depth;
	o.init_layer = gm->init_layer;
	o.init_ctx = gm->init_ctx;
	o.quantize_base = a->nf4 ? ZN_QUANTIZE_NF4 : ZN_QUANTIZE_NONE;
	o.double_quant = a->double_quant;
	/* a 4-bit checkpoint: its layers streamed as stored */
	if (gm->hf && zn_train_hf_is_4bit(gm->hf)) {
		int rc = zn_train_hf_q4_layouts(gm->hf, ZN_DTYPE_F32, &o.q4);

		if (rc)
			return rc;
		o.init_q4 = zn_train_hf_load_q4;
	}
	if (gm->lora) {
		o.lora = &gm->lc;
		o.init_adapter = zn_gen_model_load_adapter;
		o.adapter_ctx = gm;
	}
	return zn_gen_create(g, &gm->m, &o);
}

static int prefill(struct zn_gen *g, const struct zn_ids *ids, int chunk, float *logits)
{
	int rc = 0, n = (int)ids->n;

	if (chunk > n)
		chunk = n;
	for (int p = 0; p < n && !rc; p += chunk) {
		int T = n - p < chunk ? n - p : chunk;

		rc = zn_gen_forward(g, ids->v + p, T, 1, logits);
	}
	return rc;
}

static void print_ids(const struct zn_ids *ids, size_t from)
{
	fprintf(stderr, "ids:");
	for (size_t i = from; i < ids->n; i++)
		fprintf(stderr, " %d", ids->v[i]);
	fputc('\n', stderr);
}

int zn_gen_run(const struct gen_args *a, struct zn_gen_model *gm)
{
	struct zn_sampler smp = { 0 };
	struct zn_ids ids = { 0 };
	struct zn_gen *g = NULL;
	struct zn_gen_text *text = NULL;
	float *logits = NULL;
	double t0, t1 = 0, t2 = 0;
	int rc, n_prompt = 0, n_new = 0;

	rc = zn_gen_model_encode(gm, a, &ids);
	if (!rc && ids.n == 0) {
		zn_error("zinc generate: --prompt gives no tokens: give some text");
		rc = ZN_EUSAGE;
	}
	n_prompt = (int)ids.n;
	if (!rc)
		rc = open_gen(a, gm, n_prompt, &g);
	if (!rc)
		rc = zn_sampler_init(&smp, a->temperature, a->top_k, a->top_p, a->seed,
				     zn_gen_vocab(g));
	if (!rc && !(logits = malloc(sizeof(float) * (size_t)zn_gen_vocab(g))))
		rc = -ENOMEM;
	if (!rc)
		rc = zn_gen_text_create(&text, a->stops, a->n_stops, to_stdout, NULL);
	if (rc)
		goto out;
	/* plain text: the prompt, then its continuation; a chat turn: the reply only */
	if (a->tmpl == ZN_SFT_NONE)
		rc = to_stdout(NULL, a->prompt, strlen(a->prompt));
	t0 = now_ms();
	if (!rc)
		rc = prefill(g, &ids, a->chunk, logits);
	t1 = now_ms();
	for (; n_new < a->max_new && !rc; n_new++) {
		int next = zn_sample(&smp, logits, (uint64_t)n_new);
		char piece[512];
		int k;

		rc = zn_ids_push(&ids, next);
		if (rc || zn_gen_model_is_stop(gm, next))
			break;
		k = zn_gen_model_piece(gm, next, piece, sizeof(piece));
		rc = zn_gen_text_put(text, piece, (size_t)k);
		if (rc) /* 1: a --stop text completed */
			break;
		if (n_new + 1 < a->max_new)
			rc = zn_gen_forward(g, &next, 1, 1, logits);
	}
	n_new += rc == 1 ? 1 : 0;
	rc = rc == 1 ? 0 : rc;
	t2 = now_ms();
	if (!rc)
		rc = zn_gen_text_finish(text);
	/* the text's own line, flushed before the figures go to stderr: on a terminal or
	 * a file shared by both (2>&1) they never land on the text's line */
	fputc('\n', stdout);
	fflush(stdout);
	if (!rc && a->print_ids)
		print_ids(&ids, (size_t)n_prompt);
	if (!rc)
		report(a, g, n_prompt, t1 - t0, n_new, t2 - t1);
out:
	zn_gen_text_destroy(text);
	free(logits);
	zn_sampler_free(&smp);
	zn_ids_free(&ids);
	zn_gen_destroy(g);
	return rc;
}
