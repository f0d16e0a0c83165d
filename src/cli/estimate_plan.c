/* zinc estimate with a model (estimate_plan.h): zinc train's flags read by zinc train's own
 * code (train_setup.h), the plan made by the engine's own planning code
 * (zn_engine_plan_memory), the line printed by the run's own printer
 * (zn_train_print_memory_plan). Nothing here computes a byte. */
#include "cli/estimate_plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/estimate_acts.h"
#include "cli/flags.h"
#include "train/train_io.h"
#include "cli/train_setup.h"
#include "core/args.h"
#include "core/log.h"
#include "gpu/device.h"
#include "sched/plan.h"

#define ARGS_MAX 256

/* The flags that say which model (zinc train's model flags; --hidden is --d-model). */
static const char *const model_flags[] = { "--model", "--model-config", "--init-from",
					   "--layers", "--hidden", "--d-model", "--heads",
					   "--kv-heads", "--head-dim", "--intermediate", "--vocab",
					   "--padded-vocab", "--tied-embeddings" };
/* The ZeRO paper's table and --fit (cmd_estimate.c). */
static const char *const paper_flags[] = { "--fit", "--params", "--largest-layer",
					   "--lora-params", "-h", "--help" };

static bool listed(const char *a, const char *const *list, size_t n)
{
	size_t len = strcspn(a, "=");

	for (size_t i = 0; i < n; i++)
		if (strlen(list[i]) == len && !strncmp(a, list[i], len))
			return true;
	return false;
}

bool zn_estimate_plan_wanted(int argc, char **argv)
{
	bool model = false;

	for (int i = 1; i < argc; i++) {
		if (listed(argv[i], paper_flags, sizeof(paper_flags) / sizeof(*paper_flags)))
			return false;
		model = model || listed(argv[i], model_flags,
					sizeof(model_flags) / sizeof(*model_flags));
	}
	return model;
}

struct plan_opts {
	int gpus, nodes;
	bool json;
	uint64_t host_mem; /* --host-mem: the fits_host budget per node (0: none) */
	char *targv[ARGS_MAX]; /* zinc train's command line: "train" and the rest */
	int targc;
};

/* zinc estimate's own flags out; the rest, in order, are zinc train's. */
static int split_args(int argc, char **argv, struct plan_opts *o)
{
	int rc = 0;

	*o = (struct plan_opts){ .gpus = 1, .nodes = 1 };
	o->targv[o->targc++] = "train";
	for (int i = 1; !rc && i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--gpus"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->gpus);
		else if (!strcmp(a, "--nodes"))
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &o->nodes);
		else if (!strcmp(a, "--json"))
			o->json = true;
		else if (!strcmp(a, "--nvme-mem")) {
			zn_error("--nvme-mem is a budget of --fit: add --fit");
			rc = ZN_EUSAGE;
		}
		else if (!strcmp(a, "--host-mem")) {
			rc = zn_arg_size(argc, argv, &i, &o->host_mem);
			if (!rc && !o->host_mem) {
				zn_error("--host-mem 0: a budget must be above 0 (leave it out)");
				rc = ZN_EUSAGE;
			}
		}
		else if (o->targc + 2 >= ARGS_MAX)
			rc = ZN_EUSAGE;
		else /* zinc estimate's --hidden is zinc train's --d-model */
			o->targv[o->targc++] = strcmp(a, "--hidden") ? argv[i] : "--d-model";
	}
	if (!rc && (int64_t)o->gpus * o->nodes > (1 << 20)) {
		zn_error("--gpus %d x --nodes %d: at most %d ranks", o->gpus, o->nodes, 1 << 20);
		rc = ZN_EUSAGE;
	}
	o->targv[o->targc] = NULL;
	return rc;
}

/* The budget of the device the run would create (the run's own device code). */
static int device_budget(const struct zn_config *cfg, uint64_t *out)
{
	struct zn_device_config dc = { .kind = cfg->runtime.device,
				       .budget_bytes = cfg->runtime.device_mem_bytes };
	struct zn_device *dev = NULL;
	int rc = zn_device_create(&dev, &dc);

	*out = rc ? 0 : zn_device_budget_bytes(dev);
	zn_device_destroy(dev);
	return rc;
}

struct row {
	int stage;
	enum zn_offload_device opt, prm;
	int rc; /* 0, -ENOMEM (a budget is short), else not planned */
	struct zn_engine_memory m;
};

static int rows_of(struct row *r)
{
	int n = 0;

	r[n++] = (struct row){ .stage = 0 };
	for (int s = 1; s <= 3; s++)
		for (int opt = 0; opt <= 2; opt++)
			/* offload_param needs stage 3 and the optimizer offloaded */
			for (int prm = 0; prm <= (s == 3 && opt ? 2 : 0); prm++)
				r[n++] = (struct row){ .stage = s, .opt = opt, .prm = prm };
	return n;
}

static const char *off(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

/* Every stage and offload choice, the rest of the flags as given. */
static void plan_rows(const struct zn_train_setup *s, int world, uint64_t budget,
		      struct row *rows, int n)
{
	for (int i = 0; i < n; i++) {
		struct zn_config c = s->cfg;
		char msg[512];

		c.zero.stage = rows[i].stage;
		c.zero.offload_optimizer.device = rows[i].opt;
		c.zero.offload_param.device = rows[i].prm;
		rows[i].rc = zn_engine_plan_memory(&c, &s->model, &s->eo, world, budget,
						   &rows[i].m, msg, sizeof(msg));
	}
}

/* Trainable parameters of the model the engine gets (LoRA: the adapters). */
static uint64_t trained_params(const struct zn_model *m)
{
	uint64_t n = 0;

	for (int l = 0; l < m->ops->layer_count(m->config); l++) {
		struct zn_layer_desc d;

		if (!m->ops->describe(m->config, l, &d))
			n += d.numel;
		zn_layer_desc_release(&d);
	}
	return n;
}

static void add_memory(cJSON *o, const struct zn_engine_memory *m)
{
	cJSON_AddNumberToObject(o, "device_bytes", (double)m->device_bytes);
	cJSON_AddNumberToObject(o, "device_model_bytes", (double)m->device_model_bytes);
	cJSON_AddNumberToObject(o, "device_working_bytes", (double)m->device_working_bytes);
	cJSON_AddNumberToObject(o, "device_activation_bytes", (double)m->device_act_bytes);
	cJSON_AddNumberToObject(o, "pinned_bytes", (double)m->pinned_plan_bytes);
	cJSON_AddNumberToObject(o, "pinned_reserved_bytes", (double)m->pinned_reserved_bytes);
	cJSON_AddNumberToObject(o, "pinned_budget_bytes", (double)m->pinned_budget_bytes);
	cJSON_AddNumberToObject(o, "pinned_swap_bytes", (double)m->pinned_swap_bytes);
	cJSON_AddNumberToObject(o, "grad_pinned_bytes", (double)m->grad_pinned_bytes);
	cJSON_AddStringToObject(o, "grad_home", m->grad_home);
	cJSON_AddNumberToObject(o, "nvme_bytes", (double)m->nvme_bytes);
	cJSON_AddNumberToObject(o, "frozen_bytes", (double)m->frozen_bytes);
	cJSON_AddNumberToObject(o, "prefetch_depth", m->prefetch_depth);
}

struct result {
	const struct zn_train_setup *s;
	const struct plan_opts *o;
	char line[512];        /* the memory plan line */
	const char *refused;   /* why the run would be refused, or NULL */
	struct zn_engine_memory m;
	struct row rows[16];
	int n;
	uint64_t lora_params, budget;
};

static void print_json(const struct result *r)
{
	const struct zn_train_setup *s = r->s;
	cJSON *root = cJSON_CreateObject(), *plan, *jr;
	char model[256], *text;

	zn_train_model_line(&s->tm, model, sizeof(model));
	cJSON_AddStringToObject(root, "model", model);
	cJSON_AddNumberToObject(root, "params", (double)zn_train_model_params(&s->tm));
	cJSON_AddNumberToObject(root, "largest_layer",
				(double)zn_train_model_largest_layer(&s->tm));
	cJSON_AddNumberToObject(root, "lora_params", (double)r->lora_params);
	cJSON_AddNumberToObject(root, "ranks", r->o->gpus * r->o->nodes);
	cJSON_AddNumberToObject(root, "gpus_per_node", r->o->gpus);
	cJSON_AddNumberToObject(root, "nodes", r->o->nodes);
	cJSON_AddStringToObject(root, "dtype", s->cfg.precision.bf16 ? "bf16" :
				s->cfg.precision.fp16 ? "fp16" : "fp32");
	cJSON_AddNumberToObject(root, "micro_batch", (double)s->cfg.train_micro_batch_size_per_gpu);
	cJSON_AddNumberToObject(root, "grad_accum", (double)s->cfg.gradient_accumulation_steps);
	cJSON_AddNumberToObject(root, "seq", s->eo.seq_len);
	cJSON_AddNumberToObject(root, "device_budget_bytes", (double)r->budget);
	cJSON_AddNumberToObject(root, "activation_bytes", (double)r->m.device_act_bytes);
	cJSON_AddStringToObject(root, "memory_plan_line", r->line);
	cJSON_AddStringToObject(root, "schedule", r->m.schedule);
	cJSON_AddNumberToObject(root, "nvme_step_read_bytes", (double)r->m.nvme_step_read_bytes);
	/* frozen experts fetched per routed expert: one expert, every expert of a step */
	if (r->m.expert_bytes) {
		cJSON_AddNumberToObject(root, "expert_bytes", (double)r->m.expert_bytes);
		cJSON_AddNumberToObject(root, "step_expert_bytes", (double)r->m.step_expert_bytes);
	}
	if (r->refused)
		cJSON_AddStringToObject(root, "refused", r->refused);
	else
		cJSON_AddNullToObject(root, "refused");
	plan = cJSON_AddObjectToObject(root, "memory_plan");
	add_memory(plan, &r->m);
	jr = cJSON_AddArrayToObject(root, "rows");
	for (int i = 0; i < r->n; i++) {
		const struct row *w = &r->rows[i];
		cJSON *o;

		if (w->rc && w->rc != -ENOMEM)
			continue;
		o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "stage", w->stage);
		cJSON_AddStringToObject(o, "offload_optimizer", off(w->opt));
		cJSON_AddStringToObject(o, "offload_param", off(w->prm));
		add_memory(o, &w->m);
		cJSON_AddNumberToObject(o, "host_bytes_per_node",
					(double)w->m.pinned_plan_bytes * r->o->gpus);
		cJSON_AddNumberToObject(o, "nvme_bytes_per_rank", (double)w->m.nvme_bytes);
		cJSON_AddBoolToObject(o, "fits", !w->rc);
		cJSON_AddItemToArray(jr, o);
	}
	text = cJSON_Print(root);
	printf("%s\n", text);
	free(text);
	cJSON_Delete(root);
}

static void print_text(const struct result *r)
{
	const struct zn_train_setup *s = r->s;
	const struct zn_config *c = &s->cfg;
	char model[256], b[8][32];

	zn_train_model_line(&s->tm, model, sizeof(model));
	printf("# model: %s\n", model);
	printf("# zinc estimate %s: %s params, largest layer %s, %d GPU(s) x %d node(s), %s, "
	       "micro-batch %lld x accumulation %lld x seq %d; device budget %s\n", ZN_VERSION,
	       zn_arg_fmt_count(zn_train_model_params(&s->tm), b[0], 32),
	       zn_arg_fmt_count(zn_train_model_largest_layer(&s->tm), b[1], 32), r->o->gpus,
	       r->o->nodes, c->precision.bf16 ? "bf16 (fp32 master)" :
	       c->precision.fp16 ? "fp16 (fp32 master)" : "fp32",
	       (long long)c->train_micro_batch_size_per_gpu,
	       (long long)c->gradient_accumulation_steps, s->eo.seq_len,
	       zn_arg_fmt_ibytes(r->budget, b[2], 32));
	if (r->lora_params)
		printf("# LoRA: %s adapter params trained; the base is frozen%s: %s on its tier\n",
		       zn_arg_fmt_count(r->lora_params, b[0], 32),
		       c->runtime.quantize_base == ZN_QUANTIZE_NF4 ?
		       (c->runtime.double_quant ? ", linear weights in NF4 (double quant)" :
						  ", linear weights in NF4") : "",
		       zn_arg_fmt_bytes(r->m.frozen_bytes, b[1], 32));
	printf("# zinc train with these flags plans (per rank):\n");
	printf("%s", r->line);
	zn_train_print_schedule(stdout, &r->m);
	if (r->refused)
		printf("# zinc train refuses this run: %s\n", r->refused);
	printf("# every ZeRO stage and offload choice, the other flags as given (the engine's "
	       "plan; pinned = host memory the run pins):\n");
	printf("# device = model states on the device + working set (layers in flight) + "
	       "activations%s%s%s\n", c->act_ckpt.enabled ? " (checkpointing, on the " : "",
	       c->act_ckpt.enabled ? zn_tier_name(c->act_ckpt.home.device == ZN_OFFLOAD_NVME ?
				ZN_TIER_NVME : c->act_ckpt.home.device == ZN_OFFLOAD_CPU ?
				ZN_TIER_HOST : ZN_TIER_DEVICE) : "",
	       c->act_ckpt.enabled ? ")" : "");
	printf("%5s %9s %9s %12s %12s %12s %12s %12s %12s  %s%s\n", "stage", "off_optim",
	       "off_param", "dev_model", "dev_working", "device", "pinned/rank", "pinned/node",
	       "nvme/rank", "fits", r->o->host_mem ? "  fits_host" : "");
	for (int i = 0; i < r->n; i++) {
		const struct row *w = &r->rows[i];

		if (w->rc && w->rc != -ENOMEM)
			continue;
		printf("%5d %9s %9s %12s %12s %12s %12s %12s %12s  %4s", w->stage, off(w->opt),
		       off(w->prm), zn_arg_fmt_ibytes(w->m.device_model_bytes, b[0], 32),
		       zn_arg_fmt_ibytes(w->m.device_working_bytes, b[1], 32),
		       zn_arg_fmt_ibytes(w->m.device_bytes, b[2], 32),
		       zn_arg_fmt_ibytes(w->m.pinned_plan_bytes, b[3], 32),
		       zn_arg_fmt_ibytes(w->m.pinned_plan_bytes * (uint64_t)r->o->gpus, b[4], 32),
		       zn_arg_fmt_ibytes(w->m.nvme_bytes, b[5], 32), w->rc ? "no" : "yes");
		if (r->o->host_mem)
			printf("  %9s", w->m.pinned_plan_bytes * (uint64_t)r->o->gpus <=
			       r->o->host_mem ? "yes" : "no");
		printf("\n");
	}
}

/* The plan line as the run prints it, into r->line. */
static void plan_line(struct result *r)
{
	FILE *f = tmpfile();
	size_t n = 0;

	r->line[0] = 0;
	if (!f)
		return;
	zn_train_print_memory_plan(f, &r->m);
	rewind(f);
	n = fread(r->line, 1, sizeof(r->line) - 1, f);
	r->line[n] = 0;
	fclose(f);
}

int zn_estimate_plan(int argc, char **argv)
{
	struct zn_train_setup *s = calloc(1, sizeof(*s));
	struct plan_opts *o = calloc(1, sizeof(*o));
	struct result *r = calloc(1, sizeof(*r));
	char msg[512] = "";
	int world, rc = s && o && r ? 0 : -ENOMEM;

	if (!rc)
		rc = split_args(argc, argv, o);
	world = o ? o->gpus * o->nodes : 1;
	if (!rc)
		rc = zn_train_setup_from_args(s, o->targc, o->targv, world, "zinc estimate",
					      zn_estimate_help);
	if (!rc)
		rc = device_budget(&s->cfg, &r->budget);
	if (!rc) {
		r->s = s;
		r->o = o;
		rc = zn_engine_plan_memory(&s->cfg, &s->model, &s->eo, world, r->budget, &r->m,
					   msg, sizeof(msg));
	}
	if (rc == -ENOMEM) {
		r->refused = msg;
		rc = 0;
	}
	if (!rc) {
		plan_line(r);
		r->lora_params = s->lora ? trained_params(&s->model) : 0;
		r->n = rows_of(r->rows);
		plan_rows(s, world, r->budget, r->rows, r->n);
		if (o->json) {
			print_json(r);
		} else {
			print_text(r);
			rc = zn_estimate_acts(&(struct zn_est_acts){
						      .micro = (int)s->cfg.train_micro_batch_size_per_gpu,
						      .every = s->cfg.act_ckpt.every,
						      .checkpointing = s->cfg.act_ckpt.enabled,
						      .T = s->eo.seq_len,
						      .device_mem = r->budget },
					      &s->tm, &(uint64_t){ 0 });
		}
	}
	if (s)
		zn_train_setup_release(s);
	free(s);
	free(o);
	free(r);
	return rc ? ZN_EXIT_USAGE : 0;
}
