/* PEFT's adapter_config.json read (lora.h): every LoraConfig field that changes the model
 * or its training is either taken (r, lora_alpha, use_rslora, lora_dropout,
 * target_modules) or refused by name unless it holds the value PEFT treats as its default
 * (docs/lora.md, "What --init-adapter reads"). Fields that only describe the run
 * (task_type CAUSAL_LM, inference_mode, revision, peft_version, ...) are accepted. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "model/family.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

/* How a field's value is judged default (accepted) or not (refused). */
enum rule {
	FALSY,     /* Python's truthiness: null, false, 0, "", [], {} (PEFT tests `if x:`) */
	NONE_ONLY, /* null only (PEFT tests `x is not None`, or turns {} into a config) */
	NONE_OR_EMPTY_LIST, /* null or [] (layers_to_transform: `len(x) != 0`) */
	ANY,       /* describes the run, or read only by an init zinc refuses elsewhere */
};

static const struct field {
	const char *key;
	enum rule rule;
	const char *does; /* what a non-default value does, for the refusal */
} fields[] = {
	{ "modules_to_save", FALSY, "trains and saves whole modules besides the adapters (a "
	  "router trained in full, [\"gate\"]: zinc trains the router through LoRA, "
	  "target_modules \"gate\")" },
	{ "layers_to_transform", NONE_OR_EMPTY_LIST, "puts adapters on some layers only" },
	{ "layers_pattern", FALSY, "names the layer list for layers_to_transform" },
	{ "rank_pattern", FALSY, "gives some modules another rank than r" },
	{ "alpha_pattern", FALSY, "gives some modules another alpha than lora_alpha" },
	{ "exclude_modules", FALSY, "leaves modules out of target_modules" },
	{ "target_parameters", FALSY, "puts adapters on parameters instead of modules "
	  "(transformers 5's fused experts through PEFT's ParamWrapper, lora_A [r x experts, "
	  "in]: zinc reads one adapter per expert, target_modules with the experts' "
	  "projections gate_proj,up_proj,down_proj or w1,w2,w3)" },
	{ "use_dora", FALSY, "adds DoRA's magnitude vectors" },
	{ "lora_bias", FALSY, "adds a trained bias to lora_B" },
	{ "use_qalora", FALSY, "pools the adapter's input (QALoRA)" },
	{ "megatron_config", FALSY, "builds Megatron's parallel layers" },
	{ "layer_replication", FALSY, "repeats layers of the base model" },
	{ "trainable_token_indices", FALSY, "trains rows of the embedding" },
	{ "alora_invocation_tokens", FALSY, "turns the adapter on only after the invocation "
					    "tokens (aLoRA)" },
	{ "velora_config", NONE_ONLY, "compresses the adapter's saved activations (VeLoRA)" },
	{ "monteclora_config", NONE_ONLY, "samples the adapters (MonteCLoRA)" },
	{ "use_bdlora", NONE_ONLY, "makes the factors block-diagonal (BD-LoRA)" },
	{ "arrow_config", NONE_ONLY, "routes between adapters (Arrow)" },
	{ "kasa_config", NONE_ONLY, "adds KaSA's singular-value diagonal" },
	{ "enable_lora", NONE_ONLY, "is old PEFT's MergedLinear layout" },
	/* described elsewhere in this file (checked below) */
	{ "peft_type", ANY, NULL }, { "r", ANY, NULL }, { "lora_alpha", ANY, NULL },
	{ "use_rslora", ANY, NULL }, { "lora_dropout", ANY, NULL },
	{ "target_modules", ANY, NULL }, { "fan_in_fan_out", ANY, NULL },
	{ "bias", ANY, NULL }, { "init_lora_weights", ANY, NULL }, { "task_type", ANY, NULL },
	{ "base_model_name_or_path", ANY, NULL },
	/* the run's description, or read only by an initialization refused above */
	{ "inference_mode", ANY, NULL }, { "revision", ANY, NULL },
	{ "peft_version", ANY, NULL }, { "auto_mapping", ANY, NULL },
	{ "megatron_core", ANY, NULL }, { "qalora_group_size", ANY, NULL },
	{ "runtime_config", ANY, NULL }, { "ensure_weight_tying", ANY, NULL },
	{ "loftq_config", ANY, NULL }, { "eva_config", ANY, NULL },
	{ "corda_config", ANY, NULL }, { "lora_ga_config", ANY, NULL },
};

static bool falsy(const cJSON *v)
{
	if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v))
		return true;
	if (cJSON_IsNumber(v))
		return v->valuedouble == 0;
	if (cJSON_IsString(v))
		return !v->valuestring[0];
	if (cJSON_IsArray(v) || cJSON_IsObject(v))
		return !v->child;
	return false;
}

static bool is_default(const cJSON *v, enum rule rule)
{
	switch (rule) {
	case FALSY:
		return falsy(v);
	case NONE_ONLY:
		return !v || cJSON_IsNull(v);
	case NONE_OR_EMPTY_LIST:
		return !v || cJSON_IsNull(v) || (cJSON_IsArray(v) && !v->child);
	case ANY:
		break;
	}
	return true;
}

/* v printed compactly into buf (cut with "..." past its size) */
static const char *shown(const cJSON *v, char *buf, size_t size)
{
	char *s = cJSON_PrintUnformatted(v);

	snprintf(buf, size, "%s", s ? s : "?");
	if (s && strlen(s) >= size && size > 4)
		memcpy(buf + size - 4, "...", 4);
	free(s);
	return buf;
}

/* v NULL: the key is missing */
static int refuse(const char *path, const char *key, const cJSON *v, const char *does)
{
	char b[96];

	if (!v)
		zn_error("%s: %s is missing (PEFT's LoraConfig writes it)", path,
			 key);
	else
		zn_error("%s: %s is %s, which %s: zinc trains plain LoRA and "
			 "cannot apply it (train the adapter without it)", path, key,
			 shown(v, b, sizeof(b)), does);
	return -EINVAL;
}

static const struct field *field_of(const char *key)
{
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (!strcmp(fields[i].key, key))
			return &fields[i];
	return NULL;
}

/* Every member: a known field at its default or one this file reads; an unknown one only
 * when falsy (a newer PEFT's field at its default). */
static int check_fields(const cJSON *j, const char *path)
{
	const cJSON *v;
	char b[96];

	cJSON_ArrayForEach(v, j) {
		const struct field *f = field_of(v->string);

		if (f && !is_default(v, f->rule))
			return refuse(path, f->key, v, f->does);
		if (!f && !falsy(v)) {
			zn_error("%s: %s is %s, a field zinc does not know (not "
				 "PEFT's LoraConfig): zinc cannot tell whether it changes the model; "
				 "remove it if the adapter does not use it", path, v->string,
				 shown(v, b, sizeof(b)));
			return -EINVAL;
		}
	}
	return 0;
}

/* init_lora_weights: the initializations a loaded adapter replaces are accepted; those
 * that change the base weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA: the adapter goes
 * with a residual base) or the training (MiCA freezes B) are refused. */
static int check_init(const cJSON *v, const char *path)
{
	static const char *const ok[] = { "gaussian", "orthogonal", "eva" };

	if (!v || cJSON_IsNull(v) || cJSON_IsBool(v))
		return 0;
	for (size_t i = 0; cJSON_IsString(v) && i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(v->valuestring, ok[i]))
			return 0;
	return refuse(path, "init_lora_weights", v, "changes the base weights or freezes a "
		      "factor (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA, MiCA), or is unknown");
}

static int get_targets(const cJSON *v, const char *path, struct zn_lora_peft *out)
{
	const cJSON *t;
	size_t used = 0;

	if (!v || cJSON_IsNull(v)) {
		out->targets_kind = ZN_LORA_PEFT_TARGETS_NONE;
		return 0;
	}
	if (cJSON_IsString(v)) {
		out->targets_kind = strcasecmp(v->valuestring, "all-linear") ?
					    ZN_LORA_PEFT_TARGETS_REGEX :
					    ZN_LORA_PEFT_TARGETS_ALL_LINEAR;
		snprintf(out->targets, sizeof(out->targets), "%s", v->valuestring);
		return 0;
	}
	if (!cJSON_IsArray(v))
		return refuse(path, "target_modules", v, "is neither a list of names nor a "
			      "string");
	out->targets_kind = ZN_LORA_PEFT_TARGETS_LIST;
	cJSON_ArrayForEach(t, v) {
		size_t n = cJSON_IsString(t) ? strlen(t->valuestring) : 0;

		if (!n || strchr(t->valuestring, ',') || used + n + 2 > sizeof(out->targets))
			return refuse(path, "target_modules", v, "is not a list of module names "
				      "(or too long for zinc's targets)");
		used += (size_t)snprintf(out->targets + used, sizeof(out->targets) - used,
					 "%s%s", used ? "," : "", t->valuestring);
	}
	return 0;
}

static bool number_in(const cJSON *v, double lo, double hi)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= lo &&
	       v->valuedouble < hi;
}

/* r, lora_alpha, use_rslora, lora_dropout, fan_in_fan_out, peft_type, task_type, bias,
 * base_model_name_or_path: types and ranges */
static int get_values(const cJSON *j, const char *path, struct zn_lora_peft *out)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r");
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
	const cJSON *ff = cJSON_GetObjectItemCaseSensitive(j, "fan_in_fan_out");
	const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "peft_type");
	const cJSON *tt = cJSON_GetObjectItemCaseSensitive(j, "task_type");
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bias");
	const cJSON *base = cJSON_GetObjectItemCaseSensitive(j, "base_model_name_or_path");

	if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA"))
		return refuse(path, "peft_type", pt, "is not a LoRA "
			      "adapter's (PEFT writes \"LORA\")");
	if (tt && !cJSON_IsNull(tt) &&
	    (!cJSON_IsString(tt) || strcmp(tt->valuestring, "CAUSAL_LM")))
		return refuse(path, "task_type", tt, "puts the adapter on another model class "
			      "than a causal LM");
	if (!number_in(r, 1, 65537) || r->valuedouble != floor(r->valuedouble))
		return refuse(path, "r", r, "is not a rank (an "
			      "integer 1 .. 65536)");
	if (!number_in(a, 1e-6, 1e9))
		return refuse(path, "lora_alpha", a, "is not a "
			      "scale numerator (a number > 0)");
	if (rs && !cJSON_IsNull(rs) && !cJSON_IsBool(rs))
		return refuse(path, "use_rslora", rs, "is not true or false");
	if (d && !cJSON_IsNull(d) && !number_in(d, 0, 1))
		return refuse(path, "lora_dropout", d, "is not a probability in [0, 1)");
	if (ff && !cJSON_IsNull(ff) && !cJSON_IsBool(ff))
		return refuse(path, "fan_in_fan_out", ff, "is not true or false");
	/* absent: LoraConfig's default "none"; null is no value PEFT trains with */
	if (b && (!cJSON_IsString(b) || strcmp(b->valuestring, "none")))
		return refuse(path, "bias", b, "trains biases (PEFT "
			      "accepts \"none\", \"all\", \"lora_only\"; zinc \"none\")");
	if (base && !cJSON_IsNull(base) && !cJSON_IsString(base))
		return refuse(path, "base_model_name_or_path", base, "is not a name");
	out->r = (int)r->valuedouble;
	out->alpha = (float)a->valuedouble;
	out->rslora = cJSON_IsTrue(rs);
	out->dropout = cJSON_IsNumber(d) ? (float)d->valuedouble : 0.0f;
	out->fan_in_fan_out = cJSON_IsTrue(ff);
	snprintf(out->base, sizeof(out->base), "%s", cJSON_IsString(base) ? base->valuestring :
		 "");
	return 0;
}

/* label: the flag and the file, for messages */
static int parse(const char *text, size_t len, const char *label, struct zn_lora_peft *out)
{
	/* core/json: a repeated key takes its last value, as PEFT's json.load */
	struct zn_json_opts o = { .origin = label };
	cJSON *j = NULL;
	int rc = zn_json_parse(text, len, &o, &j);

	memset(out, 0, sizeof(*out));
	if (!rc && !cJSON_IsObject(j)) {
		zn_error("%s: not a JSON object (PEFT's adapter_config.json)", label);
		rc = -EINVAL;
	}
	if (!rc)
		rc = check_fields(j, label);
	if (!rc)
		rc = get_values(j, label, out);
	if (!rc)
		rc = check_init(cJSON_GetObjectItemCaseSensitive(j, "init_lora_weights"), label);
	if (!rc)
		rc = get_targets(cJSON_GetObjectItemCaseSensitive(j, "target_modules"), label, out);
	cJSON_Delete(j);
	return rc;
}

int zn_lora_peft_parse(const char *text, const char *path, struct zn_lora_peft *out)
{
	char label[ZN_PATH_MAX + 64];

	snprintf(label, sizeof(label), "--init-adapter %s", path);
	return parse(text, strlen(text), label, out);
}

int zn_lora_peft_read(const char *dir, const char *what, struct zn_lora_peft *out)
{
	char path[ZN_PATH_MAX + 32], label[ZN_PATH_MAX + 64], *text = NULL;
	size_t len = 0;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/adapter_config.json", dir) >= sizeof(path)) {
		zn_error("%s: directory path too long: %s", what, dir);
		return -ENAMETOOLONG;
	}
	snprintf(label, sizeof(label), "%s %s", what, path);
	rc = zn_read_input_file(path, what, 1 << 20, &text, &len);
	if (!rc)
		rc = parse(text, len, label, out);
	free(text);
	return rc;
}

/* target_modules as cfg's targets: a list, or "all-linear" (every linear layer but the
 * output head, as PEFT: the family's known names). label names the flag and file in
 * messages; flags: the command has --lora-targets (zinc train) */
static int take_targets(struct zn_lora_config *cfg, const struct zn_lora_peft *p,
			const char *label, bool flags)
{
	const struct zn_family *fam = zn_family_by_name(cfg->base.ops->family);
	char all[ZN_LORA_MAX_TARGETS * (ZN_LORA_NAME_MAX + 1)] = "";
	size_t at = 0;

	if (p->targets_kind == ZN_LORA_PEFT_TARGETS_LIST) {
		char names[sizeof(p->targets)], *save = NULL;

		snprintf(names, sizeof(names), "%s", p->targets);
		for (char *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save))
			if (!zn_lora_target_known(t)) {
				char list[512];

				zn_lora_target_list(list, sizeof(list));
				zn_error("%s: target_modules has '%s', which zinc cannot put an "
					 "adapter on (%s)", label, t, list);
				return -EINVAL;
			}
		return zn_lora_add_targets(cfg, p->targets);
	}
	/* every linear layer but the output head: the family's names */
	for (int i = 0; p->targets_kind == ZN_LORA_PEFT_TARGETS_ALL_LINEAR && fam &&
			fam->lora_targets[i] && at < sizeof(all); i++)
		at += (size_t)snprintf(all + at, sizeof(all) - at, "%s%s", i ? "," : "",
				       fam->lora_targets[i]);
	if (p->targets_kind == ZN_LORA_PEFT_TARGETS_ALL_LINEAR)
		return zn_lora_add_targets(cfg, all);
	zn_error("%s: target_modules is %s%s%s: %s", label,
		 p->targets_kind == ZN_LORA_PEFT_TARGETS_REGEX ? "the regular expression '" :
		 "missing", p->targets_kind == ZN_LORA_PEFT_TARGETS_REGEX ? p->targets : "",
		 p->targets_kind == ZN_LORA_PEFT_TARGETS_REGEX ? "'" : "",
		 flags ? "give the modules with --lora-targets" :
		 "write the module names as a list there (e.g. [\"q_proj\", \"v_proj\"])");
	return -EINVAL;
}

/* zn_lora_peft_apply with label naming the flag and file, and flags: the command has the
 * --lora-* flags (zinc train), whose names the messages may give as remedies */
static int apply(struct zn_lora_config *cfg, const struct zn_lora_peft *p, const char *label,
		 bool take_dropout, bool flags)
{
	bool conv1d = zn_lora_base_conv1d(cfg);

	if (p->r != cfg->r || p->alpha != cfg->alpha || p->rslora != cfg->rslora) {
		zn_error("%s: r %d, lora_alpha %g, use_rslora %s but this run has --lora-r %d "
			 "--lora-alpha %g%s: give the adapter's values", label, p->r,
			 (double)p->alpha, p->rslora ? "true" : "false", cfg->r,
			 (double)cfg->alpha, cfg->rslora ? " --use-rslora" : "");
		return -EINVAL;
	}
	/* PEFT itself resets it to false on an nn.Linear with a warning; the file then
	 * claims a layout the weights do not have */
	if (p->fan_in_fan_out && !conv1d) {
		zn_error("%s: fan_in_fan_out is true, but the %s family's weights are nn.Linear "
			 "([out, in]): set it to false (only GPT-2's Conv1D weights are stored "
			 "fan-in first)", label, cfg->base.ops->family);
		return -EINVAL;
	}
	if (take_dropout)
		cfg->dropout = p->dropout;
	if (cfg->target_count == 0) {
		char list[ZN_LORA_MAX_TARGETS * (ZN_LORA_NAME_MAX + 1)] = "";
		int rc = take_targets(cfg, p, label, flags);

		for (int i = 0, u = 0; !rc && i < cfg->target_count; i++)
			u += snprintf(list + u, sizeof(list) - (size_t)u, "%s%s", i ? "," : "",
				      cfg->targets[i]);
		if (rc)
			return rc;
		/* a command without the flag takes the file as it is: nothing to say */
		if (flags)
			zn_info("%s: --lora-targets %s taken from its target_modules", label, list);
	}
	return 0;
}

int zn_lora_peft_apply(struct zn_lora_config *cfg, const struct zn_lora_peft *p,
		       const char *path, bool take_dropout)
{
	char label[ZN_PATH_MAX + 64];

	snprintf(label, sizeof(label), "--init-adapter %s", path);
	return apply(cfg, p, label, take_dropout, true);
}

int zn_lora_peft_read_config(struct zn_lora_config *cfg, const char *dir, const char *what)
{
	struct zn_lora_peft p;
	char label[ZN_PATH_MAX + 96];
	int rc = zn_lora_peft_read(dir, what, &p);

	if (rc)
		return rc;
	snprintf(label, sizeof(label), "%s %s/adapter_config.json", what, dir);
	cfg->r = p.r;
	cfg->alpha = p.alpha;
	cfg->rslora = p.rslora;
	cfg->target_count = 0;
	return apply(cfg, &p, label, true, false);
}

int zn_lora_peft_check_tensors(const struct zn_lora_config *cfg, const struct zn_st_file *f,
			       const char *what)
{
	int want = 0;

	for (int l = 0; l < cfg->layers; l++) {
		struct zn_layer_desc d;
		int rc = zn_lora_describe(cfg, l, &d);

		for (int t = 0; !rc && t < d.tensor_count; t++) {
			const struct zn_tensor_desc *td = &d.tensors[t];
			const struct zn_st_tensor *s = zn_st_find(f, td->name);

			if (!s || s->ndim != 2 || s->shape[0] != td->shape[0] ||
			    s->shape[1] != td->shape[1] || s->dtype < 0) {
				zn_error("%s %s: %s %s (want [%lld, %lld] in F32, BF16 or F16): "
					 "the adapter was made for another model or other targets",
					 what, zn_st_path(f), td->name,
					 !s ? "is missing" : "has another shape or dtype",
					 (long long)td->shape[0], (long long)td->shape[1]);
				rc = -EINVAL;
				break;
			}
			want++;
		}
		zn_layer_desc_release(&d);
		if (rc)
			return rc;
	}
	if (zn_st_tensor_count(f) != want) {
		for (int i = 0; i < zn_st_tensor_count(f); i++) {
			const struct zn_st_tensor *s = zn_st_tensor_at(f, i);
			bool used = false;

			for (int l = 0; l < cfg->layers && !used; l++) {
				struct zn_layer_desc d;

				if (zn_lora_describe(cfg, l, &d))
					return -EINVAL;
				for (int t = 0; t < d.tensor_count && !used; t++)
					used = !strcmp(d.tensors[t].name, s->name);
				zn_layer_desc_release(&d);
			}
			if (!used) {
				zn_error("%s %s: %s is not an adapter of this model with these "
					 "target_modules: the adapter was made for another model",
					 what, zn_st_path(f), s->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}
