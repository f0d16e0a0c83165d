/* zinc estimate. With a model (--model, --model-config, --init-from, a shape) and any of
 * zinc train's flags: the run's own plan (estimate_plan.c). With --params and
 * --largest-layer (a model known by its size only): bytes per rank for every ZeRO stage
 * and offload choice from the ZeRO paper's accounting (src/sched/plan.h zn_plan_estimate).
 * --fit: the largest model of a family per choice (estimate_fit.c), the same accounting. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/estimate_fit.h"
#include "core/args.h"
#include "cli/estimate_plan.h"
#include "cli/flags.h"
#include "cli/train_setup.h"
#include "core/log.h"
#include "cpu/adamw.h"
#include "sched/plan.h"

struct est_opts {
	uint64_t params, largest_layer;
	int layers, hidden, heads, vocab, seq;
	int gpus, nodes, prefetch_depth, buffer_count;
	int frozen_read_buffers; /* LoRA, base on nvme: 0 = the engine's automatic count */
	bool fp32, json;
	enum zn_optim_states states; /* --optimizer-states */
	uint64_t device_mem, host_mem;
	/* --fit's family: a model by name, config or zinc train's model flags
	 * (train_model.h) */
	char *margv[64];
	int margc;
	bool model;
	/* LoRA (docs/lora.md): --lora-params adapters trained, the model above frozen */
	uint64_t lora_params;
	int micro; /* --micro-batch: refused here (it needs the model's layers) */
	bool fit; /* --fit: estimate_fit.c */
	const char *nvme_path[ZN_FIT_MAX_PATHS];
	int nvme_path_count;
	uint64_t nvme_mem;
	const char *zero_budget; /* a budget flag given as 0 */
};

/* zinc train's model flags beyond the GPT shape ones: any of them (or --model,
 * --model-config, --init-from) takes every shape flag to the model (train_model.h). */
static const char *const model_flags[] = { "--model", "--model-config", "--init-from",
					   "--d-model", "--kv-heads", "--head-dim",
					   "--intermediate", "--padded-vocab", "--tied-embeddings" };

static bool model_flag(const char *a)
{
	for (size_t f = 0; f < sizeof(model_flags) / sizeof(*model_flags); f++)
		if (!strcmp(a, model_flags[f]))
			return true;
	return false;
}

/* The shape flags are kept for the model too (--hidden is its --d-model). */
static int keep_model_arg(struct est_opts *o, const char *flag, int argc, char **argv, int i)
{
	if (i + 1 >= argc || o->margc + 2 > 64) {
		zn_error("%s needs a value", flag);
		return ZN_EUSAGE;
	}
	o->margv[o->margc++] = (char *)(strcmp(flag, "--hidden") ? flag : "--d-model");
	o->margv[o->margc++] = argv[i + 1];
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc estimate (--model NAME | --model-config FILE | --init-from PATH |\n"
		"                      --layers L --hidden C --heads H --vocab V --seq T)\n"
		"                     [every flag of zinc train] [--gpus N] [--nodes M]\n"
		"                     [--host-mem SIZE] [--json]\n"
		"       zinc estimate --params N --largest-layer N [--lora-params N] [--gpus N]\n"
		"                     [--nodes M] [--prefetch-depth D] [--buffer-count B]\n"
		"                     [--dtype bf16|fp32] [--optimizer-states fp32|bf16|int8]\n"
		"                     [--device-mem SIZE] [--host-mem SIZE]\n"
		"                     [--frozen-read-buffers N] [--json]\n"
		"       zinc estimate --fit (a model | a GPT shape) [--device-mem SIZE]\n"
		"                     [--host-mem SIZE] [--nvme-path DIR]... | [--nvme-mem SIZE]\n"
		"\n"
		"With a model: the memory zinc train plans for the same flags, from the engine's own\n"
		"planning code, and its start-up line 'memory plan: ...' exactly as the run prints\n"
		"it (docs/memory.md). Every zinc train flag is taken: --micro-batch, --grad-accum,\n"
		"--dtype (default fp32, as zinc train), --zero-stage, --offload-optimizer,\n"
		"--offload-param, --nvme-path, --gradient-checkpointing, --checkpoint-every,\n"
		"--seq, --packing, --lora-r, --lora-targets, --init-adapter, --config FILE, ...;\n"
		"the device budget is the device's (--device, --device-mem) and the pinned budget\n"
		"--pinned-mem or the run's default. Then the same plan for every ZeRO stage and\n"
		"offload choice, and the activations per layer (docs/activations.md). --gpus x\n"
		"--nodes ranks (--gpus per node: pinned/node); --host-mem adds a fits_host column.\n"
		"--hidden is --d-model.\n"
		"\n"
		"With --params: a model known by its size only, every stage and offload choice from\n"
		"the ZeRO paper's accounting (bf16 mixed precision 2+2+12 B/param unless --dtype\n"
		"fp32: 4+4+8), plus the working set offload needs (the largest layer's full\n"
		"parameters x (1 + prefetch depth) and its full gradients); --lora-params N: N\n"
		"adapter params trained, the --params base frozen (parameters only, on the\n"
		"parameters' tier; with the base on nvme, pinned read buffers of its largest layer:\n"
		"layer 0's and --frozen-read-buffers N, default 1 + prefetch depth + 4).\n"
		"Counts take K/M/B/T suffixes (70B = 70e9); sizes K/M/G (binary). Bytes in decimal\n"
		"units (1 GB = 1e9 B), as the ZeRO paper does.\n"
		"--optimizer-states bf16|int8: AdamW's m and v as zinc train stores them (2 + 2\n"
		"bytes, or bitsandbytes' blockwise 8-bit: 1 + 1 and an fp32 scale per 256; the\n"
		"fp32 master stays; docs/cpu.md).\n"
		"--fit: for every stage and offload choice, the most layers (and parameters) of\n"
		"this model that fit --device-mem (default 1 GiB) per rank, --host-mem (default\n"
		"RAM) per node and --nvme-mem or the free space on the --nvme-path directories per\n"
		"node (unlimited without either), and which budget one more layer breaks\n"
		"(device, host, nvme, or the layer cap of 1000000), from the ZeRO paper's\n"
		"accounting (docs/memory.md).\n");
}

void zn_estimate_help(FILE *f)
{
	usage(f);
	zn_train_usage(f);
}

/* --lora-params and the model: the model is the frozen base. */
static int lora_adapters(const struct est_opts *o)
{
	if (o->lora_params && o->fit) {
		zn_error("--fit grows a model's layer count; LoRA (--lora-params) is not "
			 "supported with --fit");
		return ZN_EUSAGE;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct est_opts *o)
{
	*o = (struct est_opts){ .gpus = 1, .nodes = 1, .prefetch_depth = 1, .buffer_count = 4,
				.heads = 0 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int rc = 0;

		if (model_flag(a) || !strcmp(a, "--layers") || !strcmp(a, "--hidden") ||
		    !strcmp(a, "--heads") || !strcmp(a, "--vocab") || !strcmp(a, "--seq")) {
			o->model = o->model || model_flag(a);
			rc = keep_model_arg(o, a, argc, argv, i);
			if (rc)
				return rc;
			if (model_flag(a)) {
				i++;
				continue;
			}
		}
		if (!strcmp(a, "--json"))
			o->json = true;
		else if (!strcmp(a, "--lora-params"))
			rc = zn_arg_count(argc, argv, &i, &o->lora_params);
		else if (!strcmp(a, "--fit"))
			o->fit = true;
		else if (!strcmp(a, "--nvme-path")) {
			const char *v = zn_arg_value(argc, argv, &i);

			if (!v || o->nvme_path_count >= ZN_FIT_MAX_PATHS) {
				zn_error("--nvme-path takes a directory (at most %d)", ZN_FIT_MAX_PATHS);
				rc = ZN_EUSAGE;
			} else {
				o->nvme_path[o->nvme_path_count++] = v;
			}
		} else if (!strcmp(a, "--nvme-mem")) {
			rc = zn_arg_size(argc, argv, &i, &o->nvme_mem);
			if (!rc && !o->nvme_mem)
				o->zero_budget = a;
		}
		else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		else if (!strcmp(a, "--params"))
			rc = zn_arg_count(argc, argv, &i, &o->params);
		else if (!strcmp(a, "--largest-layer"))
			rc = zn_arg_count(argc, argv, &i, &o->largest_layer);
		else if (!strcmp(a, "--layers"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->layers);
		else if (!strcmp(a, "--hidden"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 24, &o->hidden);
		else if (!strcmp(a, "--heads"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 16, &o->heads);
		else if (!strcmp(a, "--vocab"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 30, &o->vocab);
		else if (!strcmp(a, "--seq"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 24, &o->seq);
		else if (!strcmp(a, "--micro-batch"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->micro);
		else if (!strcmp(a, "--gpus"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->gpus);
		else if (!strcmp(a, "--nodes"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->nodes);
		else if (!strcmp(a, "--prefetch-depth"))
			rc = zn_arg_int(argc, argv, &i, 0, 1024, &o->prefetch_depth);
		else if (!strcmp(a, "--buffer-count"))
			rc = zn_arg_int(argc, argv, &i, 1, 1024, &o->buffer_count);
		else if (!strcmp(a, "--frozen-read-buffers"))
			rc = zn_arg_int(argc, argv, &i, 0, 1024, &o->frozen_read_buffers);
		else if (!strcmp(a, "--device-mem") || !strcmp(a, "--host-mem")) {
			uint64_t *v = a[2] == 'd' ? &o->device_mem : &o->host_mem;

			rc = zn_arg_size(argc, argv, &i, v);
			if (!rc && !*v)
				o->zero_budget = a;
		}
		else if (!strcmp(a, "--optimizer-states")) {
			const char *v = zn_arg_value(argc, argv, &i);

			if (!v)
				rc = ZN_EUSAGE;
			else if (zn_optim_states_parse(v, &o->states)) {
				zn_error("--optimizer-states takes fp32, bf16 or int8 (AdamW's m and v; "
					 "docs/cpu.md), not '%s'", v);
				rc = ZN_EUSAGE;
			}
		}
		else if (!strcmp(a, "--dtype")) {
			const char *v = zn_arg_value(argc, argv, &i);

			if (v && !strcmp(v, "fp32"))
				o->fp32 = true;
			else if (!v || strcmp(v, "bf16")) {
				zn_error("--dtype takes bf16 or fp32");
				rc = ZN_EUSAGE;
			}
		} else {
			zn_cli_unknown_flag("zinc estimate", a, zn_estimate_help);
			rc = ZN_EUSAGE;
		}
		if (rc)
			return rc;
	}
	bool shape = o->layers || o->hidden || o->vocab || o->seq;

	if (!o->fit && (o->nvme_path_count || o->nvme_mem)) {
		zn_error("%s is a budget of --fit: add --fit", o->nvme_mem ? "--nvme-mem" :
			 "--nvme-path");
		return ZN_EUSAGE;
	}
	if (o->zero_budget) {
		zn_error("%s 0: a budget must be above 0 (leave it out for the default)",
			 o->zero_budget);
		return ZN_EUSAGE;
	}
	if (o->fit && (o->params || o->largest_layer || o->lora_params || o->micro)) {
		zn_error("--fit grows a model's layer count: give a model (--model NAME, "
			 "--model-config FILE) or a GPT shape (--layers --hidden --vocab --seq); "
			 "%s is not supported with --fit", o->params || o->largest_layer ?
			 "--params/--largest-layer" : o->micro ? "--micro-batch" : "LoRA");
		return ZN_EUSAGE;
	}
	if ((o->model || shape) && o->params) {
		zn_error("give either --params or a model (--model, --model-config, --init-from, "
			 "a GPT shape), not both");
		return ZN_EUSAGE;
	}
	if (o->fit && !o->model && shape) {
		if (!o->layers || !o->hidden || !o->vocab || !o->seq) {
			zn_error("a GPT shape needs all of --layers --hidden --vocab --seq");
			return ZN_EUSAGE;
		}
		if (o->heads && o->hidden % o->heads) {
			zn_error("--hidden %d is not a multiple of --heads %d", o->hidden, o->heads);
			return ZN_EUSAGE;
		}
	}
	if (o->fit && (o->model || shape))
		return 0;
	if (!o->params) {
		zn_error("say how big the model is: a model (--model NAME, --model-config FILE, "
			 "--init-from PATH, or a GPT shape --layers --hidden --heads --vocab --seq) "
			 "or its size (--params 70B --largest-layer 1B)");
		return ZN_EUSAGE;
	}
	if (o->micro) {
		zn_error("--micro-batch counts the activations of a model: give --model, "
			 "--model-config, --init-from or a GPT shape (with --params the layers are "
			 "unknown)");
		return ZN_EUSAGE;
	}
	if (o->largest_layer > o->params) {
		zn_error("--largest-layer is larger than --params");
		return ZN_EUSAGE;
	}
	return lora_adapters(o);
}

static const char *fits(uint64_t need, uint64_t budget)
{
	if (!budget)
		return "";
	return need <= budget ? "yes" : "no";
}

struct est_row {
	int stage;
	enum zn_offload_device opt, param;
};

static int rows_for(struct est_row *rows)
{
	int n = 0;

	rows[n++] = (struct est_row){ 0, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NONE };
	for (int s = 1; s <= 3; s++)
		for (int opt = 0; opt <= 2; opt++)
			for (int prm = 0; prm <= (s == 3 ? 2 : 0); prm++)
				rows[n++] = (struct est_row){ s, opt, prm };
	return n;
}

static const char *offload_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

static int fit(const struct est_opts *o)
{
	struct zn_fit_opts f = {
		.model = o->model, .margc = o->margc, .margv = (char **)o->margv,
		.hidden = o->hidden, .vocab = o->vocab, .seq = o->seq,
		.ranks = o->gpus * o->nodes, .ranks_per_node = o->gpus,
		.prefetch_depth = o->prefetch_depth, .buffer_count = o->buffer_count,
		.fp32 = o->fp32, .states = o->states, .json = o->json,
		.device_mem = o->device_mem,
		.host_mem = o->host_mem, .nvme_mem = o->nvme_mem,
		.nvme_path_count = o->nvme_path_count,
	};

	for (int i = 0; i < o->nvme_path_count; i++)
		f.nvme_path[i] = o->nvme_path[i];
	return zn_estimate_fit(&f) ? ZN_EXIT_USAGE : 0;
}

int zn_cmd_estimate(int argc, char **argv)
{
	struct est_row rows[16];
	struct est_opts o;
	int n, rc;
	cJSON *jrows = NULL, *root = NULL;

	if (zn_estimate_plan_wanted(argc, argv))
		return zn_estimate_plan(argc, argv);
	rc = parse_args(argc, argv, &o);
	if (rc == 1) {
		usage(stdout);
		return 0;
	}
	if (rc)
		return ZN_EXIT_USAGE;
	if (o.fit)
		return fit(&o);
	n = rows_for(rows);
	int ranks = o.gpus * o.nodes;
	struct zn_state_bytes sb;

	zn_plan_state_bytes(!o.fp32, o.states, &sb);

	if (o.json) {
		root = cJSON_CreateObject();
		cJSON_AddNumberToObject(root, "params", (double)o.params);
		cJSON_AddNumberToObject(root, "largest_layer", (double)o.largest_layer);
		cJSON_AddNumberToObject(root, "ranks", ranks);
		cJSON_AddNumberToObject(root, "gpus_per_node", o.gpus);
		cJSON_AddNumberToObject(root, "nodes", o.nodes);
		cJSON_AddNumberToObject(root, "prefetch_depth", o.prefetch_depth);
		if (o.lora_params)
			cJSON_AddNumberToObject(root, "frozen_read_buffers",
						o.frozen_read_buffers > 0 ? o.frozen_read_buffers :
						1 + o.prefetch_depth + ZN_PLAN_FROZEN_READ_AHEAD);
		cJSON_AddStringToObject(root, "dtype", o.fp32 ? "fp32" : "bf16");
		cJSON_AddStringToObject(root, "optimizer_states", zn_optim_states_name(o.states));
		cJSON_AddNumberToObject(root, "param_bytes_per_param", sb.param);
		cJSON_AddNumberToObject(root, "grad_bytes_per_param", sb.grad);
		cJSON_AddNumberToObject(root, "optimizer_bytes_per_param", sb.optim);
		cJSON_AddNumberToObject(root, "lora_params", (double)o.lora_params);
		jrows = cJSON_AddArrayToObject(root, "rows");
	} else {
		char p[32], l[32], b0[32], b1[32], sbl[96];

		printf("# zinc estimate %s: %s params, largest layer %s, %d GPU(s) x %d node(s) = "
		       "%d ranks, prefetch depth %d, %s\n", ZN_VERSION,
		       zn_arg_fmt_count(o.params, p, sizeof(p)),
		       zn_arg_fmt_count(o.largest_layer, l, sizeof(l)), o.gpus, o.nodes, ranks,
		       o.prefetch_depth,
		       zn_plan_fmt_state_bytes(o.fp32 ? "fp32" : "bf16", o.states, sbl, sizeof(sbl)));
		printf("# device = model states on the device + working set (layers in flight); "
		       "activations not counted (give a model for zinc train's own plan)\n");
		if (o.lora_params)
			printf("# LoRA: %s adapter params trained; the %s params above are the "
			       "frozen base (parameters only, on the parameters' tier)\n",
			       zn_arg_fmt_count(o.lora_params, b0, sizeof(b0)),
			       zn_arg_fmt_count(o.params, b1, sizeof(b1)));
		printf("%5s %9s %9s %12s %12s %12s %12s %12s %12s%s%s\n", "stage", "off_optim",
		       "off_param", "dev_model", "dev_working", "device", "host/rank",
		       "host/node", "nvme/rank", o.device_mem ? "  fits_dev" : "",
		       o.host_mem ? "  fits_host" : "");
		printf("%5s %9s %9s %12s %12s %12s %12s %12s %12s\n", "", "", "", "(B)", "(B)",
		       "(B)", "(B)", "(B)", "(B)");
	}
	for (int i = 0; i < n; i++) {
		struct zn_estimate_input in = {
			.params = o.params, .largest_layer = o.largest_layer, .ranks = ranks,
			.frozen_params = o.lora_params ? o.params : 0,
			.frozen_largest_layer = o.lora_params ? o.largest_layer : 0,
			.frozen_read_buffers = o.frozen_read_buffers,
			.ranks_per_node = o.gpus, .stage = rows[i].stage,
			.offload_optimizer = rows[i].opt, .offload_param = rows[i].param,
			.prefetch_depth = o.prefetch_depth, .buffer_count = o.buffer_count,
			.mixed_precision = !o.fp32, .states = o.states,
		};
		struct zn_estimate e;
		char b[7][32];

		if (o.lora_params) { /* the adapters are what trains */
			in.params = o.lora_params;
			in.largest_layer = o.lora_params; /* the layers are unknown */
		}
		if (zn_plan_estimate(&in, &e))
			continue;
		if (o.json) {
			cJSON *r = cJSON_CreateObject();

			cJSON_AddNumberToObject(r, "stage", in.stage);
			cJSON_AddStringToObject(r, "offload_optimizer", offload_name(in.offload_optimizer));
			cJSON_AddStringToObject(r, "offload_param", offload_name(in.offload_param));
			cJSON_AddNumberToObject(r, "device_model_bytes", (double)e.device_model_bytes);
			cJSON_AddNumberToObject(r, "device_working_bytes", (double)e.device_working_bytes);
			cJSON_AddNumberToObject(r, "device_bytes", (double)e.device_bytes);
			cJSON_AddNumberToObject(r, "host_bytes_per_rank", (double)e.host_bytes);
			cJSON_AddNumberToObject(r, "host_bytes_per_node", (double)e.host_node_bytes);
			cJSON_AddNumberToObject(r, "pinned_staging_bytes", (double)e.pinned_staging_bytes);
			cJSON_AddNumberToObject(r, "nvme_bytes_per_rank", (double)e.nvme_bytes);
			cJSON_AddNumberToObject(r, "frozen_bytes", (double)e.frozen_bytes);
			if (o.device_mem)
				cJSON_AddBoolToObject(r, "fits_device", e.device_bytes <= o.device_mem);
			cJSON_AddItemToArray(jrows, r);
			continue;
		}
		printf("%5d %9s %9s %12s %12s %12s %12s %12s %12s", in.stage,
		       offload_name(in.offload_optimizer), offload_name(in.offload_param),
		       zn_arg_fmt_bytes(e.device_model_bytes, b[0], 32),
		       zn_arg_fmt_bytes(e.device_working_bytes, b[1], 32),
		       zn_arg_fmt_bytes(e.device_bytes, b[2], 32),
		       zn_arg_fmt_bytes(e.host_bytes, b[3], 32),
		       zn_arg_fmt_bytes(e.host_node_bytes, b[4], 32),
		       zn_arg_fmt_bytes(e.nvme_bytes, b[5], 32));
		if (o.device_mem)
			printf("  %8s", fits(e.device_bytes, o.device_mem));
		if (o.host_mem)
			printf("  %9s", fits(e.host_node_bytes, o.host_mem));
		printf("\n");
	}
	if (o.json) {
		char *s = cJSON_Print(root);

		printf("%s\n", s);
		free(s);
		cJSON_Delete(root);
	}
	return 0;
}
