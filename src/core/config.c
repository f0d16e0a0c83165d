/* Config: defaults, the key table, value parsing and command-line flags.
 * JSON in and out is config_json.c; cross-field rules are config_validate.c.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/config_keys.h"
#include "core/log.h"

void zn_config_defaults(struct zn_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->steps_per_print = 10;
	cfg->optimizer = (struct zn_optimizer_config){ .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
						       .eps = 1e-8f, .weight_decay = 0.01f,
						       .adam_w_mode = true };
	cfg->scheduler.warmup_max_lr = 1e-3f;
	cfg->scheduler.warmup_num_steps = 1000;
	cfg->scheduler.warmup_log = true;
	cfg->scheduler.cos_min_ratio = 1e-4f;
	/* OneCycle and LRRangeTest: DeepSpeed's argument defaults */
	cfg->scheduler.cycle_min_lr = 0.01f;
	cfg->scheduler.cycle_max_lr = 0.1f;
	cfg->scheduler.cycle_first_step_size = 2000;
	cfg->scheduler.cycle_momentum = true;
	cfg->scheduler.cycle_min_mom = 0.8f;
	cfg->scheduler.cycle_max_mom = 0.9f;
	cfg->scheduler.lr_range_test_min_lr = 1e-3f;
	cfg->scheduler.lr_range_test_step_size = 2000;
	cfg->scheduler.lr_range_test_step_rate = 1.0f;
	snprintf(cfg->monitor.csv_job_name, sizeof(cfg->monitor.csv_job_name), "DeepSpeedJobName");
	cfg->precision = (struct zn_precision_config){ .initial_scale_power = 16,
						       .loss_scale_window = 1000, .hysteresis = 2,
						       .consecutive_hysteresis = false,
						       .min_loss_scale = 1 };
	cfg->zero.contiguous_gradients = true;
	cfg->zero.overlap_comm = true;
	cfg->zero.reduce_bucket_size = 500000000;
	cfg->zero.stage3_prefetch_bucket_size = 50000000;
	cfg->zero.stage3_max_live_parameters = 1000000000;
	cfg->zero.stage3_param_persistence_threshold = 100000;
	cfg->zero.sub_group_size = 1000000000;
	cfg->zero.offload_optimizer = (struct zn_offload_config){ .pin_memory = true,
								  .buffer_count = 4,
								  .pipeline_read = true,
								  .pipeline_write = true };
	cfg->zero.offload_param = (struct zn_offload_config){ .pin_memory = true,
							      .buffer_count = 5,
							      .buffer_size = 100000000,
							      .max_in_cpu = 1000000000 };
	cfg->aio = (struct zn_aio_config){ .block_size_bytes = 1 << 20, .queue_depth = 32,
					   .intra_op_parallelism = 1, .overlap_events = true };
	cfg->runtime.numa_node = -1;
	cfg->runtime.hot_layers = -1;
	cfg->runtime.seed = 1337;
	cfg->act_ckpt.every = 1;
}

int zn_edit_distance(const char *a, const char *b)
{
	size_t n = strlen(b);
	int row[128];

	if (n >= 128)
		return 1000;
	for (size_t j = 0; j <= n; j++)
		row[j] = (int)j;
	for (size_t i = 1; *a; a++, i++) {
		int diag = row[0];

		row[0] = (int)i;
		for (size_t j = 1; j <= n; j++) {
			int up = row[j];
			int cost = *a == b[j - 1] ? 0 : 1;
			int best = diag + cost;

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[n];
}

/* Parses a number with an optional suffix; binary picks 1024 or 1000 as the base. "B" as
 * a suffix means billion for counts (70B params) and bytes for sizes (4KiB, 1MB). */
static int parse_scaled(const char *s, bool binary, uint64_t *out)
{
	char *end;
	double v, mul = 1, base = binary ? 1024.0 : 1000.0;

	if (!s || !*s)
		return ZN_EUSAGE;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return ZN_EUSAGE;
	switch (*end) {
	case 'k': case 'K': mul = base; end++; break;
	case 'm': case 'M': mul = base * base; end++; break;
	case 'g': case 'G': mul = base * base * base; end++; break;
	case 't': case 'T': mul = base * base * base * base; end++; break;
	case 'b': case 'B':
		if (!binary) {
			mul = 1e9;
			end++;
		}
		break;
	default: break;
	}
	if (binary && (!strcasecmp(end, "ib") || !strcasecmp(end, "b")))
		end += strlen(end);
	if (*end)
		return ZN_EUSAGE;
	v *= mul;
	if (v > 1.8e19 || v != floor(v))
		return ZN_EUSAGE;
	*out = (uint64_t)v;
	return 0;
}

int zn_parse_size(const char *s, uint64_t *out)
{
	return parse_scaled(s, true, out);
}

int zn_parse_count(const char *s, uint64_t *out)
{
	return parse_scaled(s, false, out);
}

static int parse_bool(const char *s, bool *out)
{
	if (!strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "yes") ||
	    !strcasecmp(s, "on"))
		*out = true;
	else if (!strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "no") ||
		 !strcasecmp(s, "off"))
		*out = false;
	else
		return ZN_EUSAGE;
	return 0;
}

static int parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return ZN_EUSAGE;
	*out = v;
	return 0;
}

/* Whether a float holds v: finite, at most FLT_MAX (casting a larger double is undefined),
 * and a nonzero v at least FLT_MIN (below it the float loses v's digits, down to 0). */
static bool float_holds(double v)
{
	return isfinite(v) && fabs(v) <= FLT_MAX && (v == 0 || fabs(v) >= FLT_MIN);
}

/* a number a float holds at s, up to *end */
static int parse_float_at(const char *s, char **end, float *out)
{
	double v;

	errno = 0;
	v = strtod(s, end);
	if (errno || *end == s || !float_holds(v))
		return ZN_EUSAGE;
	*out = (float)v;
	return 0;
}

static int parse_float(const char *s, float *out)
{
	char *end;

	return parse_float_at(s, &end, out) || *end ? ZN_EUSAGE : 0;
}

/* "b1,b2" (spaces allowed around the comma) */
static int parse_betas(const char *s, float *b1, float *b2)
{
	char *end;

	if (parse_float_at(s, &end, b1))
		return ZN_EUSAGE;
	end += strspn(end, " \t");
	if (*end != ',')
		return ZN_EUSAGE;
	if (parse_float_at(end + 1, &end, b2))
		return ZN_EUSAGE;
	return end[strspn(end, " \t")] ? ZN_EUSAGE : 0;
}

static void choices_text(const struct zn_key *k, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = 0;
	for (int i = 0; k->choices[i] && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 k->choices[i]);
}

static int parse_enum(const struct zn_key *k, const char *s, int *out)
{
	for (int i = 0; k->choices[i]; i++) {
		if (!strcasecmp(s, k->choices[i])) {
			*out = i;
			return 0;
		}
	}
	/* DeepSpeed spells "no offload" both ways. */
	if (k->choices[0] && !strcmp(k->choices[0], "none") && !strcasecmp(s, "null")) {
		*out = 0;
		return 0;
	}
	return ZN_EUSAGE;
}

static int set_paths(struct zn_offload_config *o, const char *value, bool append)
{
	if (!append)
		o->nvme_path_count = 0;
	/* a 9th path or a truncated one would silently change where the state goes */
	if (o->nvme_path_count >= ZN_MAX_NVME_PATHS || !*value || strlen(value) >= ZN_PATH_MAX)
		return ZN_EUSAGE;
	snprintf(o->nvme_path[o->nvme_path_count], ZN_PATH_MAX, "%s", value);
	o->nvme_path_count++;
	return 0;
}

static int set_name(char *dst, const char *value)
{
	size_t len = strlen(value);

	if (!len || len > ZN_RUN_ID_MAX ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
		    len)
		return ZN_EUSAGE;
	memcpy(dst, value, len + 1);
	return 0;
}

/* Writes one parsed value at offset off. */
static int set_at(struct zn_config *cfg, const struct zn_key *k, size_t off, const char *value,
		  bool append)
{
	char *base = (char *)cfg + off;
	int64_t i64;
	uint64_t u64;
	int e, rc = 0;
	bool b;
	float f;

	switch (k->type) {
	case ZN_KEY_INT:
		rc = parse_i64(value, &i64);
		if (!rc && (i64 < -2147483647LL || i64 > 2147483647LL))
			rc = ZN_EUSAGE;
		if (!rc)
			*(int *)base = (int)i64;
		break;
	case ZN_KEY_I64:
		rc = parse_i64(value, &i64);
		if (!rc)
			*(int64_t *)base = i64;
		break;
	case ZN_KEY_U64:
		rc = zn_parse_count(value, &u64);
		if (!rc)
			*(uint64_t *)base = u64;
		break;
	case ZN_KEY_SIZE:
		rc = zn_parse_size(value, &u64);
		if (!rc)
			*(uint64_t *)base = u64;
		break;
	case ZN_KEY_FLOAT:
		rc = parse_float(value, &f);
		if (!rc)
			*(float *)base = f;
		break;
	case ZN_KEY_BOOL:
		rc = parse_bool(value, &b);
		if (!rc)
			*(bool *)base = b;
		break;
	case ZN_KEY_ENUM:
		rc = parse_enum(k, value, &e);
		if (!rc) {
			if (off == offsetof(struct zn_config, scheduler.warmup_log))
				*(bool *)base = e == 1;
			else
				*(int *)base = e;
		}
		break;
	case ZN_KEY_PATHS:
		rc = set_paths((struct zn_offload_config *)(base - offsetof(struct zn_offload_config,
									     nvme_path_count)),
			       value, append);
		break;
	case ZN_KEY_NAME:
		rc = set_name(base, value);
		break;
	case ZN_KEY_STRING:
		if (strlen(value) >= k->size)
			rc = ZN_EUSAGE;
		else
			snprintf(base, k->size, "%s", value);
		break;
	case ZN_KEY_BETAS: {
		float b1, b2;

		if (parse_betas(value, &b1, &b2))
			rc = ZN_EUSAGE;
		else {
			cfg->optimizer.beta1 = b1;
			cfg->optimizer.beta2 = b2;
		}
		break;
	}
	}
	return rc;
}

static const char *type_hint(const struct zn_key *k, char *buf, size_t size)
{
	switch (k->type) {
	case ZN_KEY_INT:
	case ZN_KEY_I64:
		return "an integer";
	case ZN_KEY_U64:
		return "a non-negative count (e.g. 5e8 or 500M)";
	case ZN_KEY_SIZE:
		return "a size in bytes (e.g. 1048576, 1M, 4K)";
	case ZN_KEY_FLOAT:
		return "a number a 32-bit float holds (0, or 1.2e-38 to 3.4e38 either sign)";
	case ZN_KEY_BOOL:
		return "true or false";
	case ZN_KEY_ENUM:
		choices_text(k, buf, size);
		return buf;
	case ZN_KEY_PATHS:
		return "a directory of 1 to 1023 bytes, at most 8 of them";
	case ZN_KEY_BETAS:
		return "two numbers a 32-bit float holds, e.g. 0.9,0.95";
	case ZN_KEY_NAME:
		return "1 to 40 letters, digits, '.', '_' or '-'";
	case ZN_KEY_STRING:
		snprintf(buf, size, "a string of at most %zu bytes", k->size - 1);
		return buf;
	}
	return "?";
}

static void set_origin(struct zn_config *cfg, const struct zn_key *k, enum zn_config_origin o)
{
	size_t i = (size_t)(k - zn_config_keys);

	if (i < ZN_CONFIG_MAX_KEYS)
		cfg->origin[i] = (unsigned char)o;
}

static int set_value(struct zn_config *cfg, const struct zn_key *k, const char *value,
		     const char *origin, bool append, bool mirror_ok)
{
	size_t mirror = offsetof(struct zn_config, zero.offload_param) -
			offsetof(struct zn_config, zero.offload_optimizer);
	enum zn_config_origin o = mirror_ok ? ZN_ORIGIN_FLAG : ZN_ORIGIN_CONFIG;
	char hint[128];
	int rc;

	rc = set_at(cfg, k, k->offset, value, append);
	if (!rc)
		set_origin(cfg, k, o);
	if (!rc && mirror_ok && k->mirror == ZN_MIRROR_PARAM) {
		rc = set_at(cfg, k, k->offset + mirror, value, append);
		for (size_t i = 0; !rc && i < zn_config_key_count; i++)
			if (zn_config_keys[i].offset == k->offset + mirror)
				set_origin(cfg, &zn_config_keys[i], o);
	}
	if (rc)
		zn_log(ZN_LOG_ERROR, __FILE__, __LINE__, "%s: '%s' is not valid: give %s", origin,
		       value, type_hint(k, hint, sizeof(hint)));
	return rc;
}

int zn_config_set_string(struct zn_config *cfg, const struct zn_key *k, const char *value,
			 const char *origin)
{
	/* JSON names each block's key itself: no mirroring into offload_param. */
	return set_value(cfg, k, value, origin, false, false);
}

void zn_config_set_auto(struct zn_config *cfg, const struct zn_key *k)
{
	set_origin(cfg, k, ZN_ORIGIN_AUTO);
}

static const struct zn_key *closest_flag(const char *flag)
{
	const struct zn_key *best = NULL;
	int best_d = 4;

	for (size_t i = 0; i < zn_config_key_count; i++) {
		const struct zn_key *k = &zn_config_keys[i];
		int d;

		if (!k->flag)
			continue;
		d = zn_edit_distance(flag, k->flag);
		if (d < best_d) {
			best_d = d;
			best = k;
		}
	}
	return best;
}

/* Finds the config flag named by arg ("--zero-stage", "--zero-stage=3", "--no-pin-memory").
 * Sets *value to the inline value or NULL, *negated for --no-x. */
static const struct zn_key *match_flag(const char *arg, const char **value, bool *negated)
{
	char name[128];
	const char *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct zn_key *k;

	*value = eq ? eq + 1 : NULL;
	*negated = false;
	if (len < 3 || len - 2 >= sizeof(name) || strncmp(arg, "--", 2))
		return NULL;
	memcpy(name, arg + 2, len - 2);
	name[len - 2] = 0;
	if (!strcmp(name, "batch"))
		return zn_config_key_by_flag("micro-batch");
	k = zn_config_key_by_flag(name);
	if (k)
		return k;
	if (!strncmp(name, "no-", 3)) {
		k = zn_config_key_by_flag(name + 3);
		if (k && k->type == ZN_KEY_BOOL) {
			*negated = true;
			return k;
		}
	}
	return NULL;
}

int zn_config_apply_flags(struct zn_config *cfg, int argc, char **argv, char **rest,
			  int *rest_count)
{
	bool paths_from_flags = false;

	*rest_count = 0;
	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i], *value;
		const struct zn_key *k;
		bool negated;
		int rc;

		k = match_flag(arg, &value, &negated);
		if (!k) {
			rest[(*rest_count)++] = argv[i];
			continue;
		}
		if (k->type == ZN_KEY_BOOL && !value)
			value = negated ? "false" : "true";
		else if (negated) {
			zn_error("--no-%s takes no value", k->flag);
			return ZN_EUSAGE;
		}
		if (!value) {
			if (i + 1 >= argc) {
				zn_error("--%s needs a value: %s", k->flag, k->help);
				return ZN_EUSAGE;
			}
			value = argv[++i];
		}
		/* The first --nvme-path replaces the JSON's list; later ones append. */
		rc = set_value(cfg, k, value, arg, k->type == ZN_KEY_PATHS && paths_from_flags,
			       true);
		if (rc)
			return rc;
		if (k->type == ZN_KEY_PATHS)
			paths_from_flags = true;
	}
	return 0;
}

/* Flags a command does not know are reported with the closest config flag. */
void zn_config_report_unknown_flag(const char *arg)
{
	const struct zn_key *k = NULL;

	if (!strncmp(arg, "--", 2))
		k = closest_flag(arg + 2);
	if (k)
		zn_error("unknown option '%s' (did you mean --%s?)", arg, k->flag);
	else
		zn_error("unknown option '%s'", arg);
}

int zn_config_from_args(struct zn_config *cfg, int argc, char **argv, char **rest,
			int *rest_count)
{
	int rc, n = 0;
	char **left = calloc((size_t)argc + 1, sizeof(*left));

	if (!left)
		return -ENOMEM;
	zn_config_defaults(cfg);
	/* --config first, so every other flag overrides the file whatever the order. */
	for (int i = 0; i < argc; i++) {
		const char *path = NULL;

		if (!strcmp(argv[i], "--config")) {
			if (i + 1 >= argc) {
				zn_error("--config needs a file: --config ds_config.json");
				free(left);
				return ZN_EUSAGE;
			}
			path = argv[++i];
		} else if (!strncmp(argv[i], "--config=", 9)) {
			path = argv[i] + 9;
		} else {
			left[n++] = argv[i];
			continue;
		}
		rc = zn_config_load_json(cfg, path);
		if (rc) {
			free(left);
			return rc;
		}
	}
	rc = zn_config_apply_flags(cfg, n, left, rest, rest_count);
	free(left);
	return rc;
}
