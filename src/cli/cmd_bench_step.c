/* zinc bench step: step time against NVMe bandwidth, next to the bound the hardware allows
 * (docs/bench-step.md has every formula).
 *
 * One process: the pinned copy bandwidth and CPU AdamW alone are measured first; then the
 * model is built with the given ZeRO/offload flags (state on NVMe), warmed up, and for each
 * --bw cap (the engine's aio bandwidth cap, per direction) one settling step and N timed
 * steps run; for `max` the step's own NVMe reads and writes are also timed at once, uncapped,
 * through a swap store on the same paths. The same model with the NVMe classes in pinned
 * memory gives the compute-only baseline: built next to the NVMe model, timed in rounds
 * before the first cap and after each, its figure the median of every round's steps (the
 * machine drifts during a run; the rounds sample it where the caps run).
 * cmd_bench_step_out.c prints the rows.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cmd_bench_step.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "core/args.h"
#include "comm/comm.h"
#include "core/fsio.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/size.h"
#include "core/trace.h"
#include "cpu/adamw.h"
#include "gpu/device.h"
#include "train/train_model.h"
#include "model/model.h"
#include "nvme/swap.h"
#include "zinc.h"

struct opts {
	struct zn_bs_row rows[ZN_BS_MAX_CAPS];
	int caps, warmup, steps, seq;
	bool json;
	const char *csv, *plot, *trace, *model_config;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc bench step [train flags] --bw LIST [--warmup N] [--steps N]\n"
		"                       [--json] [--csv FILE] [--plot FILE.png] [--trace FILE]\n\n"
		"Times training steps with state on NVMe at each NVMe bandwidth cap and prints\n"
		"them next to the bound (NVMe, host-device copies, CPU AdamW, compute-only) and\n"
		"the efficiency bound / step (docs/bench-step.md).\n\n"
		"  --bw LIST          caps per direction, e.g. 250M,500M,1G,2G,max (binary units;\n"
		"                     max: uncapped); default max\n"
		"  --warmup N         untimed steps before the first cap (default 2)\n"
		"  --steps N          timed steps per cap and for the baseline (default 5)\n"
		"  --seq T            sequence length (default: the model's)\n"
		"  --dtype fp32|bf16|fp16  as zinc train\n"
		"  --json             the rows as JSON on stdout instead of the table\n"
		"  --csv FILE         the rows as CSV\n"
		"  --plot FILE.png    step and bound against bandwidth (gnuplot)\n"
		"  --trace FILE       trace of the first timed step at each cap (docs/trace.md)\n"
		"  model: as zinc train: --model tiny|small|gpt2|llama-tiny|qwen3-0.6b|...,\n"
		"         --model-config config.json, --layers --heads --d-model --vocab --seq\n"
		"  and every zinc train config flag: state on NVMe needs --offload-optimizer nvme\n"
		"  and/or --offload-param nvme with --nvme-path DIR\n");
}

/* The options "did you mean" chooses from: these and the config's. */
static void help_all(FILE *f)
{
	usage(f);
	zn_config_print_flags_help(f);
}

enum {
	OPT_BW, OPT_WARMUP, OPT_STEPS, OPT_JSON, OPT_CSV, OPT_PLOT, OPT_TRACE, OPT_MODEL_CONFIG,
	OPT_SEQ, OPT_DTYPE
};

static const struct zn_bench_opt opts[] = {
	[OPT_BW] = { "--bw", true },
	[OPT_WARMUP] = { "--warmup", true },
	[OPT_STEPS] = { "--steps", true },
	[OPT_JSON] = { "--json", false },
	[OPT_CSV] = { "--csv", true },
	[OPT_PLOT] = { "--plot", true },
	[OPT_TRACE] = { "--trace", true },
	[OPT_MODEL_CONFIG] = { "--model-config", true },
	[OPT_SEQ] = { "--seq", true },
	[OPT_DTYPE] = { "--dtype", true },
};

struct own {
	struct opts *o;
	struct zn_config *cfg;
};

/* bench step's own flags; --seq is the model's too (passed on), --dtype the config's */
static int set_opt(void *ctx, int opt, const char *v)
{
	struct opts *o = ((struct own *)ctx)->o;
	struct zn_config *cfg = ((struct own *)ctx)->cfg;

	switch (opt) {
	case OPT_BW: return zn_bs_parse_bw(v, o->rows, &o->caps) ? ZN_BENCH_SAID : 0;
	case OPT_WARMUP: return zn_bench_int(v, 0, 1000, &o->warmup);
	case OPT_STEPS: return zn_bench_int(v, 1, 1000, &o->steps);
	case OPT_JSON: o->json = true; return 0;
	case OPT_CSV: o->csv = v; return 0;
	case OPT_PLOT: o->plot = v; return 0;
	case OPT_TRACE: o->trace = v; return 0;
	case OPT_MODEL_CONFIG: o->model_config = v; return 0;
	case OPT_SEQ: return zn_bench_int(v, 1, 1 << 20, &o->seq) ? ZN_BENCH_BAD : ZN_BENCH_PASS;
	default:
		if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "fp16")) {
			zn_error("--dtype '%s': use fp32, bf16 or fp16", v);
			return ZN_BENCH_SAID;
		}
		cfg->precision.bf16 = !strcmp(v, "bf16");
		cfg->precision.fp16 = !strcmp(v, "fp16");
		return 0;
	}
}

static int parse(int argc, char **argv, struct opts *o, struct zn_config *cfg,
		 struct zn_train_model *tm, bool *help)
{
	/* rest[0] stands for argv[0]: zn_bench_args reads rest as an argv */
	char **rest = calloc((size_t)argc + 1, sizeof(*rest)), **left = NULL, **pass = NULL;
	struct own own = { o, cfg };
	int n = 0, m = 0, k = 0, rc;

	if (!rest)
		return -ENOMEM;
	rest[0] = argv[0];
	rc = zn_config_from_args(cfg, argc - 1, argv + 1, rest + 1, &n);
	for (int i = 1; !rc && i <= n; i++)
		if (!strcmp(rest[i], "-h") || !strcmp(rest[i], "--help"))
			*help = true;
	if (!rc && !*help && !(pass = calloc((size_t)n + 1, sizeof(*pass))))
		rc = -ENOMEM;
	if (!rc && !*help)
		rc = zn_bench_args("zinc bench step", n + 1, rest, opts,
				   (int)(sizeof(opts) / sizeof(*opts)), set_opt, &own, help_all,
				   pass, &m);
	if (!rc && !*help && !(left = calloc((size_t)m + 1, sizeof(*left))))
		rc = -ENOMEM;
	if (!rc && !*help)
		rc = zn_train_model_parse(tm, m, pass, NULL, o->model_config, left, &k);
	if (!rc && !*help && k > 0) {
		zn_cli_unknown_flag("zinc bench step", left[0], help_all);
		rc = ZN_EUSAGE;
	}
	free(left);
	free(pass);
	free(rest);
	return rc;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the machine: pinned copy bandwidth, CPU AdamW alone, the step's NVMe mix ----------- */

static int measure_copy(const struct zn_config *cfg, struct zn_bs_env *env)
{
	struct zn_device_config dc = { .kind = cfg->runtime.device };
	const uint64_t bytes = 64ull << 20;
	struct zn_device *dev = NULL;
	struct zn_stream *s = NULL;
	void *d = NULL, *h = NULL;
	double t[2][5];
	int rc;

	rc = zn_device_create(&dev, &dc);
	if (!rc)
		rc = zn_stream_create(dev, &s);
	if (!rc)
		rc = zn_device_alloc(dev, &d, bytes);
	if (!rc)
		rc = zn_device_host_alloc(dev, &h, bytes);
	for (int k = 0; !rc && k < 2; k++)
		for (int i = -1; !rc && i < 5; i++) { /* one untimed first */
			double t0 = now_ms();

			rc = k ? zn_memcpy_async(s, h, d, bytes, ZN_COPY_D2H) :
				 zn_memcpy_async(s, d, h, bytes, ZN_COPY_H2D);
			if (!rc)
				rc = zn_stream_synchronize(s);
			if (i >= 0)
				t[k][i] = now_ms() - t0;
		}
	if (!rc) {
		env->h2d_bps = (double)bytes / (zn_bench_fastest(t[0], 5) / 1e3);
		env->d2h_bps = (double)bytes / (zn_bench_fastest(t[1], 5) / 1e3);
		snprintf(env->device, sizeof(env->device), "%s", zn_device_name(dev));
		env->host_device = zn_device_kind_of(dev) == ZN_DEVICE_HOST;
	}
	zn_device_host_free(dev, h);
	zn_device_free(dev, d);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
	return rc;
}

/* AdamW over numel elements of this rank's shard, m and v stored as the run stores them
 * (zinc.optimizer_states), nothing else running: 5 runs after one untimed, the fastest. */
static int measure_adamw(const struct zn_config *cfg, uint64_t numel, enum zn_dtype pdt,
			 struct zn_bs_env *env)
{
	size_t n = (size_t)numel, cap = (n + 255) / 256 * 256; /* whole int8 blocks */
	uint64_t mb = zn_adamw_state_bytes(cfg->optimizer.states, cap);
	float *b = calloc(2 * n + 1, sizeof(float));
	void *m = calloc(mb + 1, 1), *v = calloc(mb + 1, 1);
	void *out = pdt == ZN_DTYPE_F32 ? NULL : calloc(n + 1, 2);
	struct zn_adamw_span all = { 0, n, cfg->optimizer.weight_decay };
	struct zn_adamw_moments mo;
	struct zn_adamw_params p;
	double t[5];
	int rc = 0;

	if (!b || !m || !v || (pdt != ZN_DTYPE_F32 && !out)) {
		zn_error("zinc bench step: no memory to time AdamW over %zu elements", n);
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		b[i] = 0.01f * (float)(i % 97);   /* master */
		b[n + i] = 1e-3f * (float)(i % 13) - 6e-3f; /* grad */
	}
	zn_adamw_moments_of(&mo, cfg->optimizer.states, m, v, cap);
	zn_adamw_params_init(&p, &cfg->optimizer);
	for (int i = -1; !rc && i < 5; i++) { /* one untimed first: pages, the thread team */
		double t0 = now_ms();

		p.step = i + 2;
		rc = zn_adamw_step_states(&p, b, &mo, b + n, ZN_DTYPE_F32, out, pdt, n, &all, 1);
		if (i >= 0)
			t[i] = now_ms() - t0;
	}
	env->adamw_ms = zn_bench_fastest(t, 5);
out:
	free(b);
	free(m);
	free(v);
	free(out);
	return rc;
}

/* The step's NVMe reads and writes at once, uncapped, through a swap store striped over the
 * same paths as the state: 3 runs after one untimed, the fastest. */
static int measure_mix(const struct zn_config *cfg, uint64_t rd, uint64_t wr,
		       struct zn_bs_env *env)
{
	const struct zn_offload_config *off =
		cfg->zero.offload_optimizer.device == ZN_OFFLOAD_NVME ?
			&cfg->zero.offload_optimizer : &cfg->zero.offload_param;
	uint64_t r4 = (rd + 4095) / 4096 * 4096, w4 = (wr + 4095) / 4096 * 4096;
	struct zn_swap_extent ext[2] = { { { ZN_SWAP_OTHER, 0, 0 }, r4 ? r4 : 4096, 0 },
					 { { ZN_SWAP_OTHER, 1, 0 }, w4 ? w4 : 4096, 0 } };
	struct zn_aio_config ac = cfg->aio;
	struct zn_swap_config sc = { .run_id = "bench-step", .extents = ext, .extent_count = 2 };
	struct zn_aio *aio = NULL;
	struct zn_swap *sw = NULL;
	char *buf = NULL;
	double t[3];
	int rc;

	ac.bandwidth_cap_bytes_per_s = 0;
	zn_swap_config_set_paths(&sc, off);
	rc = zn_aio_create(&aio, &ac);
	if (!rc)
		rc = zn_swap_create(&sw, aio, &sc);
	if (!rc && posix_memalign((void **)&buf, 4096, ext[0].bytes + ext[1].bytes))
		rc = -ENOMEM;
	if (!rc) {
		struct zn_swap_req q;

		memset(buf, 0x5a, ext[0].bytes + ext[1].bytes);
		rc = zn_swap_write(sw, ext[0].key, 0, ext[0].bytes, buf, &q);
		if (!rc)
			rc = zn_swap_wait(&q);
	}
	for (int i = -1; !rc && i < 3; i++) {
		struct zn_swap_req a, b;
		double t0 = now_ms();
		int x;

		rc = zn_swap_read(sw, ext[0].key, 0, r4, buf, &a);
		if (rc)
			break;
		x = w4 ? zn_swap_write(sw, ext[1].key, 0, w4, buf + ext[0].bytes, &b) : 0;
		rc = zn_swap_wait(&a);
		if (w4 && !x)
			x = zn_swap_wait(&b);
		if (!rc)
			rc = x;
		if (i >= 0)
			t[i] = now_ms() - t0;
	}
	if (!rc) {
		env->mixed_ms = zn_bench_fastest(t, 3);
		env->mixed_bps = (double)(r4 + w4) / (env->mixed_ms / 1e3);
		env->mix_read_bytes = r4;
		env->mix_write_bytes = w4;
	}
	free(buf);
	zn_swap_destroy(sw);
	zn_aio_destroy(aio);
	return rc;
}

/* ---- steps ---------------------------------------------------------------------------- */

struct bench {
	struct zn_engine *e;
	int *in, *tgt;
	uint64_t tokens;
	int vocab;
	uint64_t rng;
	int64_t last_step; /* the last step taken (warm) */
};

static int bench_create(struct bench *b, const struct zn_config *cfg,
			const struct zn_train_model *tm, int seq)
{
	struct zn_engine_options eo = { .seq_len = seq, .comm_kind = ZN_COMM_SINGLE };
	struct zn_model model = zn_train_model_get(tm);
	int rc = zn_engine_create(&b->e, cfg, &model, &eo);

	if (rc)
		return rc;
	b->tokens = (uint64_t)zn_engine_grad_accum(b->e) * (uint64_t)zn_engine_micro_batch(b->e) *
		    (uint64_t)seq;
	b->in = zn_size_calloc(b->tokens, sizeof(int), "the step's input tokens");
	b->tgt = zn_size_calloc(b->tokens, sizeof(int), "the step's target tokens");
	b->vocab = zn_train_model_vocab(tm);
	b->rng = ZN_HASH_GOLDEN; /* the LCG's start: any value */
	return b->in && b->tgt ? 0 : -ENOMEM;
}

static void bench_destroy(struct bench *b)
{
	zn_engine_destroy(b->e);
	free(b->in);
	free(b->tgt);
	*b = (struct bench){ 0 };
}

/* one step on fresh pseudo-random tokens (the data does not change the time) */
static int bench_step(struct bench *b, struct zn_step_stats *st)
{
	for (uint64_t i = 0; i < b->tokens; i++) {
		b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull;
		b->in[i] = (int)((b->rng >> 33) % (uint64_t)b->vocab);
		b->tgt[i] = (int)((b->rng >> 13) % (uint64_t)b->vocab);
	}
	return zn_engine_step(b->e, b->in, b->tgt, st);
}

/* N timed steps into row r (medians), the first traced when trace is set; `next` is the
 * first one's step number. The last step's time includes the wait for its NVMe
 * write-behind (each step's writes otherwise go on into the next step). */
static int timed_steps(struct bench *b, int n, struct zn_bs_row *r, struct zn_trace *trace,
		       int64_t next)
{
	double *v = calloc((size_t)n * 9, sizeof(double));
	int rc = v ? 0 : -ENOMEM;

	if (trace) {
		zn_trace_set_steps(trace, next, next);
		rc = zn_engine_set_trace(b->e, trace);
	}
	for (int i = 0; !rc && i < n; i++) {
		struct zn_step_stats st;

		rc = bench_step(b, &st);
		v[i] = st.step_ms;
		if (!rc && i == n - 1) {
			double t0 = now_ms();

			rc = zn_engine_flush(b->e);
			v[i] += now_ms() - t0;
		}
		v[n + i] = st.fwd_ms;
		v[2 * n + i] = st.bwd_ms;
		v[3 * n + i] = st.opt_ms;
		v[4 * n + i] = st.wait_ms;
		v[5 * n + i] = (double)st.nvme_read_bytes;
		v[6 * n + i] = (double)st.nvme_write_bytes;
		v[7 * n + i] = (double)st.copy_h2d_bytes;
		v[8 * n + i] = (double)st.copy_d2h_bytes;
	}
	{
		int x = zn_engine_set_trace(b->e, NULL);

		if (!rc)
			rc = x;
	}
	if (!rc) {
		r->step_ms = zn_bench_median(v, n);
		r->step_min_ms = v[0];
		r->step_max_ms = v[n - 1];
		r->fwd_ms = zn_bench_median(v + n, n);
		r->bwd_ms = zn_bench_median(v + 2 * n, n);
		r->opt_ms = zn_bench_median(v + 3 * n, n);
		r->wait_ms = zn_bench_median(v + 4 * n, n);
		r->read_bytes = (uint64_t)zn_bench_median(v + 5 * n, n);
		r->write_bytes = (uint64_t)zn_bench_median(v + 6 * n, n);
		r->h2d_bytes = (uint64_t)zn_bench_median(v + 7 * n, n);
		r->d2h_bytes = (uint64_t)zn_bench_median(v + 8 * n, n);
	}
	free(v);
	return rc;
}

static int warm(struct bench *b, int n)
{
	struct zn_step_stats st;
	int rc = 0;

	for (int i = 0; !rc && i < n; i++)
		rc = bench_step(b, &st);
	b->last_step = st.step;
	return rc;
}

/* the compute-only baseline's samples over its rounds */
struct base_samples {
	double *step, *comp, *round;
	int n, rounds;
};

/* one baseline round: a settling step, then `steps` timed steps into s */
static int base_round(struct bench *bb, int steps, struct base_samples *s)
{
	double *v = calloc((size_t)steps, sizeof(double));
	int rc = v ? warm(bb, 1) : -ENOMEM;

	for (int i = 0; !rc && i < steps; i++) {
		struct zn_step_stats st;

		rc = bench_step(bb, &st);
		v[i] = s->step[s->n] = st.step_ms;
		s->comp[s->n++] = st.fwd_ms + st.bwd_ms;
	}
	if (!rc)
		s->round[s->rounds++] = zn_bench_median(v, steps);
	free(v);
	return rc;
}

/* the same model with the NVMe classes in pinned memory */
static int base_create(struct bench *bb, const struct zn_config *cfg0,
		       const struct zn_train_model *tm, int seq)
{
	struct zn_config cfg = *cfg0;

	if (cfg.zero.offload_optimizer.device == ZN_OFFLOAD_NVME)
		cfg.zero.offload_optimizer.device = ZN_OFFLOAD_CPU;
	if (cfg.zero.offload_param.device == ZN_OFFLOAD_NVME)
		cfg.zero.offload_param.device = ZN_OFFLOAD_CPU;
	return bench_create(bb, &cfg, tm, seq);
}

/* the NVMe model at every cap, the mix for max; the baseline's rounds between the caps */
static int run_caps(const struct zn_config *cfg, const struct zn_train_model *tm, int seq,
		    struct opts *o, struct zn_bs_env *env, struct zn_trace *trace)
{
	struct bench b = { 0 }, bb = { 0 };
	int rounds = o->caps + 1, rc = bench_create(&b, cfg, tm, seq);
	struct base_samples s = { 0 };
	uint64_t numel = 0;

	if (!rc) {
		struct zn_engine_memory m;

		zn_engine_memory(b.e, &m);
		snprintf(env->schedule, sizeof(env->schedule), "%s", m.schedule);
		env->plan_read_bytes = m.nvme_step_read_bytes;
		rc = base_create(&bb, cfg, tm, seq);
	}
	s.step = calloc((size_t)(rounds * o->steps), sizeof(double));
	s.comp = calloc((size_t)(rounds * o->steps), sizeof(double));
	s.round = calloc((size_t)rounds, sizeof(double));
	if (!rc && (!s.step || !s.comp || !s.round))
		rc = -ENOMEM;
	for (int l = 0; !rc && l < zn_engine_layer_count(b.e); l++)
		numel += zn_engine_layer_numel(b.e, l);
	if (!rc)
		rc = measure_adamw(cfg, numel, cfg->precision.bf16 ? ZN_DTYPE_BF16 :
					cfg->precision.fp16 ? ZN_DTYPE_F16 : ZN_DTYPE_F32, env);
	if (!rc)
		rc = warm(&b, o->warmup);
	if (!rc)
		rc = warm(&bb, o->warmup);
	if (!rc)
		rc = base_round(&bb, o->steps, &s);
	for (int c = 0; !rc && c < o->caps; c++) {
		struct zn_bs_row *r = &o->rows[c];

		rc = zn_engine_set_nvme_cap(b.e, r->cap_bps);
		if (!rc)
			rc = warm(&b, 1); /* the bucket settles to the new rate */
		if (!rc)
			rc = timed_steps(&b, o->steps, r, trace, b.last_step + 1);
		if (!rc && !r->cap_bps && !env->mixed_ms)
			rc = measure_mix(cfg, r->read_bytes, r->write_bytes, env);
		if (!rc && !o->json)
			fprintf(stderr, "bench step: cap %s: step %.1f ms\n", r->cap, r->step_ms);
		if (!rc)
			rc = base_round(&bb, o->steps, &s);
	}
	/* each cap against the rounds just before and after it (median sorts: first) */
	for (int c = 0; !rc && c < o->caps; c++) {
		size_t k = (size_t)2 * o->steps;
		double *t = malloc(k * sizeof(double));

		if (!t) {
			rc = -ENOMEM;
			break;
		}
		memcpy(t, s.step + (size_t)c * o->steps, k * sizeof(double));
		o->rows[c].base_step_ms = zn_bench_median(t, (int)k);
		memcpy(t, s.comp + (size_t)c * o->steps, k * sizeof(double));
		o->rows[c].base_compute_ms = zn_bench_median(t, (int)k);
		free(t);
	}
	if (!rc) {
		env->base_rounds = s.rounds;
		env->base_step_ms = zn_bench_median(s.step, s.n);
		env->base_compute_ms = zn_bench_median(s.comp, s.n);
		env->base_round_min_ms = zn_bench_fastest(s.round, s.rounds);
		env->base_round_max_ms = s.round[0];
		for (int i = 1; i < s.rounds; i++)
			if (s.round[i] > env->base_round_max_ms)
				env->base_round_max_ms = s.round[i];
	}
	free(s.step);
	free(s.comp);
	free(s.round);
	bench_destroy(&bb);
	bench_destroy(&b);
	return rc;
}

static void describe(const struct zn_config *cfg, const struct zn_train_model *tm,
		     struct zn_bs_env *env)
{
	static const char *const dev[] = { "none", "cpu", "nvme" };
	const struct zn_offload_config *off = cfg->zero.offload_optimizer.device == ZN_OFFLOAD_NVME ?
		&cfg->zero.offload_optimizer : &cfg->zero.offload_param;

	char line[200];

	zn_train_model_line(tm, line, sizeof(line));
	snprintf(env->model, sizeof(env->model), "%s: %.1fM params", line,
		 (double)zn_train_model_params(tm) / 1e6);
	snprintf(env->setting, sizeof(env->setting), "zero %d, offload optimizer %s, param %s, "
		 "%s, micro-batch %lld x grad-accum %lld, optimizer states %s, nvme %s%s",
		 cfg->zero.stage,
		 dev[cfg->zero.offload_optimizer.device], dev[cfg->zero.offload_param.device],
		 cfg->precision.bf16 ? "bf16" : cfg->precision.fp16 ? "fp16" : "fp32",
		 (long long)cfg->train_micro_batch_size_per_gpu,
		 (long long)cfg->gradient_accumulation_steps, zn_optim_states_name(cfg->optimizer.states), off->nvme_path[0],
		 off->nvme_path_count > 1 ? " (+ more)" : "");
}

/* The outputs are not the inputs or each other, by identity (core/fsio.h); without
 * gnuplot --plot writes a CSV beside it, which --csv must not be either. */
static int check_paths(const struct opts *o, int argc, char **argv)
{
	char csv[ZN_PATH_MAX + 8];
	struct zn_io io[16] = {
		{ .path = o->csv, .what = "--csv", .out = true },
		{ .path = o->plot, .what = "--plot", .out = true },
		{ .path = o->plot ? zn_bs_plot_fallback(o->plot, csv, sizeof(csv)) : NULL,
		  .what = "--plot (its CSV, gnuplot missing)", .out = true },
		{ .path = o->trace, .what = "--trace", .out = true },
		{ .path = o->model_config, .what = "--model-config" },
	};
	int n = 5;

	zn_arg_config_inputs(argc, argv, io, &n, 16);
	return zn_io_check(io, n);
}

int zn_cmd_bench_step(int argc, char **argv)
{
	struct opts o = { .warmup = 2, .steps = 5 };
	struct zn_train_model tm;
	struct zn_bs_env env = { 0 };
	struct zn_trace *trace = NULL;
	struct zn_config cfg;
	bool help = false;
	int rc;

	memset(&tm, 0, sizeof(tm));
	if (parse(argc, argv, &o, &cfg, &tm, &help))
		return ZN_EXIT_USAGE;
	if (help) {
		usage(stdout);
		return 0;
	}
	if (!o.caps)
		zn_bs_parse_bw("max", o.rows, &o.caps);
	zn_config_resolve_auto(&cfg, &(struct zn_config_derive){ .hidden = zn_train_model_width(&tm),
								 .steps = o.steps });
	if (zn_config_validate(&cfg, 1))
		return ZN_EXIT_USAGE;
	if (cfg.zero.offload_optimizer.device != ZN_OFFLOAD_NVME &&
	    cfg.zero.offload_param.device != ZN_OFFLOAD_NVME) {
		zn_error("zinc bench step: nothing is on NVMe: give --offload-optimizer nvme and/or "
			 "--offload-param nvme (stage 3) with --nvme-path DIR");
		return ZN_EXIT_USAGE;
	}
	if (check_paths(&o, argc, argv) ||
	    (o.csv && zn_output_check(o.csv, "--csv")) ||
	    (o.plot && zn_output_check(o.plot, "--plot")) ||
	    (o.trace && zn_output_check(o.trace, "--trace")))
		return ZN_EXIT_USAGE;
	describe(&cfg, &tm, &env);
	env.warmup = o.warmup;
	env.steps = o.steps;
	rc = measure_copy(&cfg, &env);
	if (!rc && o.trace)
		rc = zn_trace_open(&trace, o.trace, 1, 0, 0);
	if (!rc)
		rc = run_caps(&cfg, &tm, o.seq ? o.seq : zn_train_model_seq(&tm), &o, &env, trace);
	if (trace) {
		int r = zn_trace_close(trace);

		if (!rc)
			rc = r;
	}
	if (rc)
		return rc == ZN_EUSAGE ? ZN_EXIT_USAGE : 1;
	zn_bench_load_avg(env.load, sizeof(env.load));
	zn_bs_finish_rows(&env, o.rows, o.caps);
	if (o.json)
		rc = zn_bs_print_json(stdout, &env, o.rows, o.caps);
	else
		zn_bs_print_table(stdout, &env, o.rows, o.caps);
	if (!rc && o.csv)
		rc = zn_bs_write_csv(o.csv, o.rows, o.caps);
	if (!rc && o.plot)
		rc = zn_bs_plot(o.plot, &env, o.rows, o.caps);
	if (!rc && o.trace)
		fprintf(o.json ? stderr : stdout, "# trace %s\n", o.trace);
	return rc ? 1 : 0;
}
