/* zinc generate: text from a model with a KV cache (docs/generate.md). The prompt is
 * tokenized with the model's tokenizer, run through the model in chunks (prefill), then
 * one token at a time (decode), each chosen greedily or drawn (generate_sample.h); the
 * layers stay on the device or stream from host memory or NVMe (src/sched/generate.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cmd_generate.h"
#include "cli/util.h"
#include "core/log.h"
#include "model/hf_dir.h"
#include "sched/generate.h"
#include "sched/generate_sample.h"
#include "zinc.h"

struct gen_args {
	const char *init_from, *prompt, *tokenizer, *nvme_path;
	int max_new, top_k, chunk, max_seq, depth;
	float temperature, top_p;
	uint64_t seed, device_mem;
	enum zn_gen_home home;
	enum zn_device_kind device;
	bool ignore_eos, print_ids;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc generate --init-from PATH --prompt TEXT [options] [model flags]\n"
		"\n"
		"  --init-from PATH        a Hugging Face model directory or .safetensors file (zinc's\n"
		"                          --save-final output too), or a zinc checkpoint directory\n"
		"                          (--save-dir: the model it records, no model flags)\n"
		"  --prompt TEXT           the text to continue\n"
		"  --tokenizer DIR|FILE    tokenizer.json (default: the model directory's own);\n"
		"                          'bytes' for a byte-level model trained on text (vocab 256)\n"
		"  --max-new-tokens N      tokens to generate (default 64)\n"
		"  --temperature T         0 (default): greedy; > 0: sample from softmax(logits / T)\n"
		"  --top-k K               sample among the K most likely (default 0: all)\n"
		"  --top-p P               ... and the most likely summing to P (default 1: all)\n"
		"  --seed N                the draws' seed (default 0): the same seed, the same text\n"
		"  --ignore-eos            go on past the tokenizer's end-of-text token\n"
		"  --max-seq N             positions in the KV cache (default prompt + new tokens)\n"
		"  --prefill-chunk N       prompt tokens per forward (default 256)\n"
		"  --device auto|host|cuda the compute device (default auto)\n"
		"  --device-mem SIZE       device memory budget (1G, 512M; default: the backend's)\n"
		"  --offload-param none|cpu|nvme  where the layers live: on the device (default), in\n"
		"                          page-locked host memory or in a file under --nvme-path,\n"
		"                          streamed to the device layer by layer (ZeRO-Inference)\n"
		"  --nvme-path DIR         the directory for --offload-param nvme\n"
		"  --prefetch-depth N      streamed layers fetched ahead of the one computing\n"
		"                          (default: as zinc train, lowered to fit --device-mem)\n"
		"  --print-ids             the generated token ids on stderr\n");
}

static int float_flag(int argc, char **argv, int *i, float lo, float *out)
{
	const char *flag = argv[*i], *v = zn_cli_value(argc, argv, i);
	char *end;
	double x;

	if (!v)
		return ZN_EUSAGE;
	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < lo) {
		zn_error("%s '%s': give a number >= %g", flag, v, (double)lo);
		return ZN_EUSAGE;
	}
	*out = (float)x;
	return 0;
}

static int parse(struct gen_args *a, int argc, char **argv, char **other, int *n_other)
{
	int rc = 0;

	for (int i = 1; i < argc && !rc; i++) {
		const char *f = argv[i], *v;

		if (!strcmp(f, "--init-from")) {
			rc = (a->init_from = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--prompt")) {
			rc = (a->prompt = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--tokenizer")) {
			rc = (a->tokenizer = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--nvme-path")) {
			rc = (a->nvme_path = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--max-new-tokens")) {
			rc = zn_cli_int(argc, argv, &i, 0, 1 << 24, &a->max_new);
		} else if (!strcmp(f, "--max-seq")) {
			rc = zn_cli_int(argc, argv, &i, 1, 1 << 24, &a->max_seq);
		} else if (!strcmp(f, "--prefetch-depth")) {
			rc = zn_cli_int(argc, argv, &i, 0, 1 << 10, &a->depth);
			a->depth = a->depth ? a->depth : -1; /* zn_gen_opts: < 0 is none */
		} else if (!strcmp(f, "--prefill-chunk")) {
			rc = zn_cli_int(argc, argv, &i, 1, 1 << 20, &a->chunk);
		} else if (!strcmp(f, "--top-k")) {
			rc = zn_cli_int(argc, argv, &i, 0, 1 << 30, &a->top_k);
		} else if (!strcmp(f, "--temperature")) {
			rc = float_flag(argc, argv, &i, 0.0f, &a->temperature);
		} else if (!strcmp(f, "--top-p")) {
			rc = float_flag(argc, argv, &i, 0.0f, &a->top_p);
		} else if (!strcmp(f, "--seed")) {
			rc = zn_cli_count(argc, argv, &i, &a->seed);
		} else if (!strcmp(f, "--ignore-eos")) {
			a->ignore_eos = true;
		} else if (!strcmp(f, "--print-ids")) {
			a->print_ids = true;
		} else if (!strcmp(f, "--device-mem")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc)
				rc = zn_hf_parse_size(v, "--device-mem", &a->device_mem);
		} else if (!strcmp(f, "--device")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && !strcmp(v, "auto"))
				a->device = ZN_DEVICE_AUTO;
			else if (!rc && !strcmp(v, "host"))
				a->device = ZN_DEVICE_HOST;
			else if (!rc && !strcmp(v, "cuda"))
				a->device = ZN_DEVICE_CUDA;
			else if (!rc) {
				zn_error("--device '%s': give auto, host or cuda", v);
				rc = ZN_EUSAGE;
			}
		} else if (!strcmp(f, "--offload-param")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && !strcmp(v, "none"))
				a->home = ZN_GEN_DEVICE;
			else if (!rc && !strcmp(v, "cpu"))
				a->home = ZN_GEN_CPU;
			else if (!rc && !strcmp(v, "nvme"))
				a->home = ZN_GEN_NVME;
			else if (!rc) {
				zn_error("--offload-param '%s': give none, cpu or nvme", v);
				rc = ZN_EUSAGE;
			}
		} else {
			other[(*n_other)++] = argv[i]; /* a model flag, or its value */
		}
	}
	if (!rc && !a->prompt) {
		zn_error("zinc generate: --prompt TEXT is required");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->home == ZN_GEN_NVME && !a->nvme_path) {
		zn_error("zinc generate: --offload-param nvme needs --nvme-path DIR");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->nvme_path && a->home != ZN_GEN_NVME) {
		zn_error("zinc generate: --nvme-path is used only with --offload-param nvme");
		rc = ZN_EUSAGE;
	}
	if (!rc && (a->top_p <= 0.0f || a->top_p > 1.0f)) {
		zn_error("--top-p %g: give a probability in (0, 1] (1: no limit)", (double)a->top_p);
		rc = ZN_EUSAGE;
	}
	return rc;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int generate(const struct gen_args *a, struct zn_gen_model *gm);

int zn_cmd_generate(int argc, char **argv)
{
	struct gen_args a = { .max_new = 64, .chunk = 256, .top_p = 1.0f };
	struct zn_gen_model gm;
	char **other;
	int n_other = 0, rc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
	other = calloc((size_t)argc + 1, sizeof(char *));
	if (!other)
		return 1;
	rc = parse(&a, argc, argv, other, &n_other);
	if (!rc)
		rc = zn_gen_model_open(&gm, a.init_from, a.tokenizer, n_other, other);
	else
		memset(&gm, 0, sizeof(gm));
	if (!rc)
		rc = generate(&a, &gm);
	zn_gen_model_close(&gm);
	free(other);
	if (rc == ZN_EUSAGE)
		return ZN_EXIT_USAGE;
	return rc ? 1 : 0;
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
		zn_cli_fmt_ibytes(s.device_bytes, b1, sizeof(b1)), home[a->home],
		zn_cli_fmt_ibytes(s.streamed_bytes, b2, sizeof(b2)));
	if (a->home != ZN_GEN_DEVICE)
		fprintf(stderr, " (%d ahead)", s.prefetch_depth);
	if (a->home == ZN_GEN_NVME)
		fprintf(stderr, ", %s read from nvme",
			zn_cli_fmt_ibytes(s.nvme_read_bytes, b3, sizeof(b3)));
	fputc('\n', stderr);
}

/* prompt through the model in chunks; then the new tokens one at a time */
static int generate(const struct gen_args *a, struct zn_gen_model *gm)
{
	struct zn_gen_opts o = { 0 };
	struct zn_sampler smp = { 0 };
	struct zn_ids ids = { 0 };
	struct zn_gen *g = NULL;
	float *logits = NULL;
	double t0, t1 = 0, t2 = 0;
	const int eos = a->ignore_eos ? -1 : zn_gen_model_eos(gm);
	int rc, n_prompt, n_new = 0;

	rc = zn_gen_model_encode(gm, a->prompt, &ids);
	if (!rc && ids.n == 0) {
		zn_error("zinc generate: --prompt gives no tokens: give some text");
		rc = ZN_EUSAGE;
	}
	if (rc)
		goto out;
	n_prompt = (int)ids.n;
	o.max_t = a->max_seq ? a->max_seq : n_prompt + (a->max_new ? a->max_new : 1);
	if (o.max_t < n_prompt + a->max_new) {
		zn_error("zinc generate: --max-seq %d is below the prompt (%d tokens) + "
			 "--max-new-tokens %d", o.max_t, n_prompt, a->max_new);
		rc = ZN_EUSAGE;
		goto out;
	}
	o.max_chunk = a->chunk < o.max_t ? a->chunk : o.max_t;
	o.home = a->home;
	o.nvme_path = a->nvme_path;
	o.device = a->device;
	o.device_mem = a->device_mem;
	o.prefetch_depth = a->depth;
	o.init_layer = gm->init_layer;
	o.init_ctx = gm->init_ctx;
	rc = zn_gen_create(&g, &gm->m, &o);
	if (!rc)
		rc = zn_sampler_init(&smp, a->temperature, a->top_k, a->top_p, a->seed,
				     zn_gen_vocab(g));
	if (!rc && !(logits = malloc(sizeof(float) * (size_t)zn_gen_vocab(g))))
		rc = -ENOMEM;
	if (rc)
		goto out;
	fputs(a->prompt, stdout);
	fflush(stdout);
	t0 = now_ms();
	for (int p = 0; p < n_prompt && !rc; p += o.max_chunk) {
		int T = n_prompt - p < o.max_chunk ? n_prompt - p : o.max_chunk;

		rc = zn_gen_forward(g, ids.v + p, T, 1, logits);
	}
	t1 = now_ms();
	for (; n_new < a->max_new && !rc; n_new++) {
		int next = zn_sample(&smp, logits, (uint64_t)n_new);
		char piece[512];
		int k;

		rc = zn_ids_push(&ids, next);
		if (rc || next == eos)
			break;
		k = zn_gen_model_piece(gm, next, piece, sizeof(piece));
		fwrite(piece, 1, (size_t)k, stdout);
		fflush(stdout);
		if (n_new + 1 < a->max_new)
			rc = zn_gen_forward(g, &next, 1, 1, logits);
	}
	t2 = now_ms();
	fputc('\n', stdout);
	if (!rc && a->print_ids) {
		fprintf(stderr, "ids:");
		for (size_t i = (size_t)n_prompt; i < ids.n; i++)
			fprintf(stderr, " %d", ids.v[i]);
		fputc('\n', stderr);
	}
	if (!rc)
		report(a, g, n_prompt, t1 - t0, n_new, t2 - t1);
out:
	free(logits);
	zn_sampler_free(&smp);
	zn_ids_free(&ids);
	zn_gen_destroy(g);
	return rc;
}
