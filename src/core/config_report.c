/* The config as people read it: `zinc train --help` (generated from the key tables),
 * --print-config's origin lines, and the resolution of "auto" values.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/config_keys.h"
#include "core/log.h"

static const char *const origin_names[] = { "default", "config", "flag", "auto" };

static void choices(const struct zn_key *k, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = 0;
	for (int i = 0; k->choices[i] && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "",
					 k->choices[i]);
}

void zn_config_print_flags_help(FILE *f)
{
	char hint[128];

	fprintf(f, "config (flags override --config FILE, which overrides defaults; \"auto\" in\n"
		   "the file means the flag if given, else zinc's default or derived value):\n");
	fprintf(f, "  --config FILE                 DeepSpeed-style JSON config\n");
	for (size_t i = 0; i < zn_config_key_count; i++) {
		const struct zn_key *k = &zn_config_keys[i];
		char left[200];

		if (!k->flag)
			continue;
		if (k->type == ZN_KEY_BOOL)
			snprintf(left, sizeof(left), "--[no-]%s", k->flag);
		else if (k->type == ZN_KEY_ENUM)
			snprintf(left, sizeof(left), "--%s {%s}", k->flag,
				 (choices(k, hint, sizeof(hint)), hint));
		else
			snprintf(left, sizeof(left), "--%s X", k->flag);
		fprintf(f, "  %-30s %s  [%s]%s%s\n", left, k->help, k->path,
			k->note ? "\n      no effect in zinc: " : "", k->note ? k->note : "");
	}
	fprintf(f, "\nconfig-only keys:\n");
	for (size_t i = 0; i < zn_config_key_count; i++) {
		const struct zn_key *k = &zn_config_keys[i];

		if (!k->flag)
			fprintf(f, "  %-46s %s%s%s\n", k->path, k->help,
				k->note ? "; no effect in zinc: " : "", k->note ? k->note : "");
	}
	fprintf(f, "\nother DeepSpeed keys (a block covers the keys inside it):\n");
	for (const struct zn_doc_key *d = zn_config_doc_keys; d->path; d++)
		fprintf(f, "  %-46s %s: %s\n", d->path, d->refused ? "refused" : "no effect in zinc",
			d->why);
}

static void value_text(const struct zn_config *cfg, const struct zn_key *k, char *buf,
		       size_t size)
{
	const char *base = (const char *)cfg + k->offset;

	switch (k->type) {
	case ZN_KEY_INT:
		snprintf(buf, size, "%d", *(const int *)base);
		break;
	case ZN_KEY_I64:
		snprintf(buf, size, "%" PRId64, *(const int64_t *)base);
		break;
	case ZN_KEY_U64:
	case ZN_KEY_SIZE:
		snprintf(buf, size, "%" PRIu64, *(const uint64_t *)base);
		break;
	case ZN_KEY_FLOAT:
		snprintf(buf, size, "%.7g", *(const float *)base);
		break;
	case ZN_KEY_BOOL:
		snprintf(buf, size, "%s", *(const bool *)base ? "true" : "false");
		break;
	case ZN_KEY_ENUM: {
		int v = k->offset == offsetof(struct zn_config, scheduler.warmup_log) ?
				*(const bool *)base : *(const int *)base;

		snprintf(buf, size, "%s", k->choices[v]);
		break;
	}
	case ZN_KEY_PATHS: {
		const struct zn_offload_config *o =
			(const void *)(base - offsetof(struct zn_offload_config, nvme_path_count));
		size_t used = 0;

		buf[0] = 0;
		for (int i = 0; i < o->nvme_path_count && used < size; i++)
			used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "",
						 o->nvme_path[i]);
		if (!o->nvme_path_count)
			snprintf(buf, size, "null");
		break;
	}
	case ZN_KEY_BETAS:
		snprintf(buf, size, "%.7g,%.7g", cfg->optimizer.beta1, cfg->optimizer.beta2);
		break;
	case ZN_KEY_STRING:
	case ZN_KEY_NAME:
		snprintf(buf, size, "\"%s\"", base);
		break;
	}
}

void zn_config_print_origins(FILE *f, const struct zn_config *cfg)
{
	for (size_t i = 0; i < zn_config_key_count && i < ZN_CONFIG_MAX_KEYS; i++) {
		const struct zn_key *k = &zn_config_keys[i];
		char v[2 * ZN_PATH_MAX];

		if (!strcmp(k->path, "aio.thread_count")) /* alias of intra_op_parallelism */
			continue;
		value_text(cfg, k, v, sizeof(v));
		fprintf(f, "%-54s %-24s %s%s\n", k->path, v, origin_names[cfg->origin[i] & 3],
			k->note ? " (no effect in zinc)" : "");
	}
}

static bool is_auto(const struct zn_config *cfg, const char *path)
{
	const struct zn_key *k = zn_config_key_by_path(path);

	return k && cfg->origin[k - zn_config_keys] == ZN_ORIGIN_AUTO;
}

/* TrainingArguments' defaults: what the Trainer writes over "auto" when no flag gave the
 * value (transformers' integrations/deepspeed.py, trainer_config_process and
 * trainer_config_finalize). Keys left out of the file keep zinc's (DeepSpeed's) defaults. */
#define HF_LR 5e-5f
#define HF_BETA1 0.9f
#define HF_BETA2 0.999f
#define HF_EPS 1e-8f
#define HF_WEIGHT_DECAY 0.0f
#define HF_MAX_GRAD_NORM 1.0f
#define HF_WARMUP_MIN_LR 0.0f

/* warmup_num_steps: "auto" is ceil(steps x warmup_ratio) (0 without a ratio), as the
 * Trainer's get_warmup_steps; a ratio beside a number given for it is refused, as the
 * Trainer refuses a config value that mismatches its argument. */
static int resolve_warmup(struct zn_config *cfg, const struct zn_config_derive *d)
{
	const struct zn_key *k = zn_config_key_by_path("scheduler.params.warmup_num_steps");
	unsigned o = cfg->origin[k - zn_config_keys] & 3;

	if (d->warmup_ratio > 0 && o != ZN_ORIGIN_DEFAULT && o != ZN_ORIGIN_AUTO) {
		zn_error("--warmup-ratio %g and %s %lld both set the warmup: give one",
			 d->warmup_ratio, o == ZN_ORIGIN_FLAG ? "--warmup-steps" :
			 "the config's scheduler.params.warmup_num_steps",
			 (long long)cfg->scheduler.warmup_num_steps);
		return ZN_EUSAGE;
	}
	if (d->warmup_ratio > 0)
		cfg->scheduler.warmup_num_steps = (int64_t)ceil((double)d->steps * d->warmup_ratio);
	else if (o == ZN_ORIGIN_AUTO)
		cfg->scheduler.warmup_num_steps = 0;
	return 0;
}

/* Hugging Face's fill-in for "auto" (transformers' deepspeed integration). */
int zn_config_resolve_auto(struct zn_config *cfg, const struct zn_config_derive *d)
{
	uint64_t h = d->hidden > 0 ? (uint64_t)d->hidden : 0;

	if (is_auto(cfg, "optimizer.params.lr"))
		cfg->optimizer.lr = HF_LR;
	if (is_auto(cfg, "optimizer.params.betas")) {
		cfg->optimizer.beta1 = HF_BETA1;
		cfg->optimizer.beta2 = HF_BETA2;
	}
	if (is_auto(cfg, "optimizer.params.eps"))
		cfg->optimizer.eps = HF_EPS;
	if (is_auto(cfg, "optimizer.params.weight_decay"))
		cfg->optimizer.weight_decay = HF_WEIGHT_DECAY;
	if (is_auto(cfg, "gradient_clipping"))
		cfg->gradient_clipping = HF_MAX_GRAD_NORM;
	if (is_auto(cfg, "scheduler.params.warmup_min_lr"))
		cfg->scheduler.warmup_min_lr = HF_WARMUP_MIN_LR;
	if (h && is_auto(cfg, "zero_optimization.reduce_bucket_size"))
		cfg->zero.reduce_bucket_size = h * h;
	if (h && is_auto(cfg, "zero_optimization.stage3_prefetch_bucket_size"))
		cfg->zero.stage3_prefetch_bucket_size = (uint64_t)(0.9 * (double)h * (double)h);
	if (h && is_auto(cfg, "zero_optimization.stage3_param_persistence_threshold"))
		cfg->zero.stage3_param_persistence_threshold = 10 * h;
	if (is_auto(cfg, "scheduler.params.warmup_max_lr"))
		cfg->scheduler.warmup_max_lr = cfg->optimizer.lr;
	if (is_auto(cfg, "scheduler.params.cycle_max_lr"))
		cfg->scheduler.cycle_max_lr = cfg->optimizer.lr;
	if (d->steps > 0 && is_auto(cfg, "scheduler.params.total_num_steps"))
		cfg->scheduler.total_num_steps = d->steps;
	return resolve_warmup(cfg, d);
}
