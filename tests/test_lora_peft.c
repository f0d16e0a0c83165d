/* PEFT's adapter files read by --init-adapter (src/model/lora/lora_peft*.c, docs/lora.md):
 * - adapter_config.json: every LoraConfig field that changes the model or its training is
 *   refused by name unless at the value PEFT treats as its default (a real PEFT config with
 *   every field at its default is accepted); r, lora_alpha, lora_dropout, fan_in_fan_out
 *   and target_modules are checked, and taken where the run gave none;
 * - adapter_model.safetensors: tensors outside the run's targets are refused naming their
 *   modules, a missing one too, and NaN or Inf naming the tensor. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include "engine_common.h"
#include "model/llama/llama.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"

/* adapter_config.json as PEFT 0.17 writes it, every field at its default */
static const char peft_config[] =
	"{\"alpha_pattern\": {}, \"auto_mapping\": null, \"base_model_name_or_path\": "
	"\"meta-llama/Llama-3.2-1B\", \"bias\": \"none\", \"corda_config\": null, "
	"\"eva_config\": null, \"exclude_modules\": null, \"fan_in_fan_out\": false, "
	"\"inference_mode\": true, \"init_lora_weights\": true, \"layer_replication\": null, "
	"\"layers_pattern\": null, \"layers_to_transform\": null, \"loftq_config\": {}, "
	"\"lora_alpha\": 16, \"lora_bias\": false, \"lora_dropout\": 0.05, "
	"\"megatron_config\": null, \"megatron_core\": \"megatron.core\", "
	"\"modules_to_save\": null, \"peft_type\": \"LORA\", \"peft_version\": \"0.17.1\", "
	"\"qalora_group_size\": 16, \"r\": 8, \"rank_pattern\": {}, \"revision\": null, "
	"\"target_modules\": [\"v_proj\", \"q_proj\"], \"target_parameters\": null, "
	"\"task_type\": \"CAUSAL_LM\", \"trainable_token_indices\": null, \"use_dora\": false, "
	"\"use_qalora\": false, \"use_rslora\": false}";

/* peft_config with key set to the JSON value (NULL: removed); caller frees */
static char *with(const char *key, const char *value)
{
	cJSON *j = cJSON_Parse(peft_config);
	char *s;

	cr_assert_not_null(j);
	cJSON_DeleteItemFromObjectCaseSensitive(j, key);
	if (value) {
		cJSON *v = cJSON_Parse(value);

		cr_assert_not_null(v, "%s", value);
		cJSON_AddItemToObject(j, key, v);
	}
	s = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return s;
}

static int parse_with(const char *key, const char *value, struct zn_lora_peft *p)
{
	char *text = with(key, value);
	int rc = zn_lora_peft_parse(text, "a/adapter_config.json", p);

	free(text);
	return rc;
}

/* everything written to stderr so far */
static char *stderr_text(void)
{
	static char buf[1 << 16];
	FILE *f = cr_get_redirected_stderr();
	size_t n;

	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	return buf;
}

/* Fields that change the model or training, at values PEFT acts on: each refused. */
static const char *const refused[][2] = {
	{ "peft_type", "\"PREFIX_TUNING\"" }, { "peft_type", NULL }, { "bias", "\"all\"" },
	{ "bias", "\"lora_only\"" }, { "bias", "null" },
	{ "modules_to_save", "[\"lm_head\"]" }, { "layers_to_transform", "[0, 1]" },
	{ "layers_to_transform", "0" }, { "layers_pattern", "\"layers\"" },
	{ "rank_pattern", "{\"q_proj\": 16}" }, { "alpha_pattern", "{\"q_proj\": 32}" },
	{ "use_dora", "true" }, { "lora_bias", "true" }, { "exclude_modules", "[\"k_proj\"]" },
	{ "exclude_modules", "\".*k_proj\"" }, { "init_lora_weights", "\"pissa\"" },
	{ "init_lora_weights", "\"pissa_niter_4\"" }, { "init_lora_weights", "\"olora\"" },
	{ "init_lora_weights", "\"loftq\"" }, { "init_lora_weights", "\"corda\"" },
	{ "init_lora_weights", "\"lora_ga\"" }, { "init_lora_weights", "\"mica\"" },
	{ "megatron_config", "{\"tensor_model_parallel_size\": 2}" },
	{ "layer_replication", "[[0, 2], [1, 2]]" }, { "trainable_token_indices", "[1, 2]" },
	{ "target_parameters", "[\"experts.down_proj\"]" }, { "use_qalora", "true" },
	{ "alora_invocation_tokens", "[5, 6]" }, { "velora_config", "{}" },
	{ "monteclora_config", "{}" }, { "use_bdlora", "{}" }, { "arrow_config", "{}" },
	{ "kasa_config", "{}" }, { "task_type", "\"SEQ_CLS\"" },
	{ "lora_dropout", "1.0" }, { "lora_dropout", "-0.1" }, { "lora_dropout", "\"0.1\"" },
	{ "r", "8.5" }, { "r", "0" }, { "r", "\"8\"" }, { "r", NULL }, { "lora_alpha", "0" },
	{ "lora_alpha", "1e400" }, { "use_rslora", "\"yes\"" }, { "fan_in_fan_out", "1" },
	{ "target_modules", "5" }, { "target_modules", "[\"q_proj\", 3]" },
	{ "some_new_field", "1" }, { "some_new_field", "\"on\"" },
};

/* The same fields at what PEFT treats as their default, and fields that only describe the
 * run or an initialization the loaded weights replace: each accepted. */
static const char *const accepted[][2] = {
	{ "modules_to_save", "[]" }, { "layers_to_transform", "[]" },
	{ "layers_pattern", "\"\"" }, { "layers_pattern", "[]" }, { "rank_pattern", "null" },
	{ "alpha_pattern", "null" }, { "use_dora", "null" }, { "exclude_modules", "\"\"" },
	{ "exclude_modules", "[]" }, { "init_lora_weights", "false" },
	{ "init_lora_weights", "\"gaussian\"" }, { "init_lora_weights", "\"eva\"" },
	{ "init_lora_weights", "\"orthogonal\"" }, { "init_lora_weights", NULL },
	{ "megatron_config", "{}" }, { "alora_invocation_tokens", "[]" },
	{ "velora_config", "null" }, { "task_type", "null" }, { "task_type", NULL },
	{ "loftq_config", "{\"loftq_bits\": 4}" }, { "ensure_weight_tying", "true" },
	{ "lora_dropout", "0.99" }, { "lora_dropout", NULL }, { "fan_in_fan_out", "true" },
	{ "bias", NULL }, /* absent: LoraConfig's default "none" */
	{ "target_modules", "\"all-linear\"" }, { "target_modules", "null" },
	{ "base_model_name_or_path", "null" }, { "some_new_field", "null" },
	{ "some_new_field", "false" }, { "some_new_field", "[]" }, { "some_new_field", "{}" },
};

Test(lora_peft, config_fields_that_change_the_model_are_refused_by_name,
     .init = cr_redirect_stderr)
{
	struct zn_lora_peft p;
	char *err;

	cr_assert_eq(zn_lora_peft_parse(peft_config, "a/adapter_config.json", &p), 0);
	cr_assert_eq(p.r, 8);
	cr_assert_float_eq(p.alpha, 16.0f, 0);
	cr_assert_float_eq(p.dropout, 0.05f, 1e-9);
	cr_assert(!p.rslora && !p.fan_in_fan_out);
	cr_assert_eq(p.targets_kind, ZN_LORA_PEFT_TARGETS_LIST);
	cr_assert_str_eq(p.targets, "v_proj,q_proj");
	cr_assert_str_eq(p.base, "meta-llama/Llama-3.2-1B");
	for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
		cr_assert_eq(parse_with(accepted[i][0], accepted[i][1], &p), 0, "%s: %s",
			     accepted[i][0], accepted[i][1] ? accepted[i][1] : "(absent)");
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		cr_assert_eq(parse_with(refused[i][0], refused[i][1], &p), -EINVAL, "%s: %s",
			     refused[i][0], refused[i][1] ? refused[i][1] : "(absent)");
	err = stderr_text();
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		cr_assert_not_null(strstr(err, refused[i][0]), "%s not named:\n%s", refused[i][0],
				   err);
	cr_assert_not_null(strstr(err, "modules_to_save is [\"lm_head\"], which trains and saves"),
			   "%s", err);
	/* two equal keys: the last value, as PEFT's json.load (core/json, docs/config.md) */
	cr_assert_eq(zn_lora_peft_parse("{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": 8, "
					"\"bias\": \"none\", \"r\": 16}", "x", &p), 0);
	cr_assert_eq(p.r, 16);
	cr_assert_neq(zn_lora_peft_parse("[1]", "x", &p), 0);
	cr_assert_neq(zn_lora_peft_parse("{\"r\": ", "x", &p), 0);
}

static void gpt2_lora(struct zn_gpt2_config *mc, struct zn_lora_config *lc, int r, float alpha)
{
	et_model(mc);
	memset(lc, 0, sizeof(*lc));
	lc->base = zn_gpt2_model(mc);
	lc->r = r;
	lc->alpha = alpha;
}

/* r, lora_alpha, use_rslora must be the run's; target_modules and lora_dropout taken only
 * where the run gave none; fan_in_fan_out true only on GPT-2's Conv1D */
Test(lora_peft, apply_checks_and_takes_values, .init = cr_redirect_stderr)
{
	struct zn_gpt2_config mc;
	struct zn_llama_config llc;
	struct zn_lora_config lc;
	struct zn_lora_peft p;
	char *text;

	text = with("target_modules", "[\"c_attn\", \"c_fc\"]");
	cr_assert_eq(zn_lora_peft_parse(text, "a", &p), 0);
	free(text);
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), 0);
	cr_assert_eq(lc.target_count, 2);
	cr_assert_str_eq(lc.targets[1], "c_fc");
	cr_assert_float_eq(lc.dropout, 0.05f, 1e-9);
	/* the run's own targets and dropout win */
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_proj"), 0);
	lc.dropout = 0.25f;
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", false), 0);
	cr_assert_eq(lc.target_count, 1);
	cr_assert_float_eq(lc.dropout, 0.25f, 0);
	/* another r or alpha */
	gpt2_lora(&mc, &lc, 4, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), -EINVAL);
	gpt2_lora(&mc, &lc, 8, 8);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), -EINVAL);
	/* "all-linear": the family's linear layers */
	text = with("target_modules", "\"all-linear\"");
	cr_assert_eq(zn_lora_peft_parse(text, "a", &p), 0);
	free(text);
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), 0);
	cr_assert_eq(lc.target_count, 3);
	/* a regular expression, or names zinc cannot target: give --lora-targets */
	text = with("target_modules", "\".*\\\\.c_attn\"");
	cr_assert_eq(zn_lora_peft_parse(text, "a", &p), 0);
	free(text);
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), -EINVAL);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn"), 0);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), 0);
	text = with("target_modules", "[\"c_attn\", \"lm_head\"]");
	cr_assert_eq(zn_lora_peft_parse(text, "a", &p), 0);
	free(text);
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), -EINVAL);
	/* fan_in_fan_out: PEFT writes true for GPT-2's Conv1D; on nn.Linear it is wrong */
	text = with("fan_in_fan_out", "true");
	cr_assert_eq(zn_lora_peft_parse(text, "a", &p), 0);
	free(text);
	gpt2_lora(&mc, &lc, 8, 16);
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), 0);
	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &llc), 0);
	memset(&lc, 0, sizeof(lc));
	lc.base = zn_llama_model(&llc);
	lc.r = 8;
	lc.alpha = 16;
	cr_assert_eq(zn_lora_peft_apply(&lc, &p, "a", true), -EINVAL);
	cr_assert_not_null(strstr(stderr_text(), "fan_in_fan_out is true, but the llama family"));
}

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_lorapeft_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	cr_redirect_stderr();
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

/* Saves cfg's adapters (random values; poison: element 5 of the last tensor) to dir. */
static void save_adapters(const struct zn_lora_config *lc, float poison)
{
	float **ad = calloc((size_t)lc->layers, sizeof(*ad));

	for (int l = 0; l < lc->layers; l++) {
		struct zn_layer_desc d;

		cr_assert_eq(zn_lora_describe(lc, l, &d), 0);
		ad[l] = calloc(d.numel + 1, sizeof(float));
		for (uint64_t i = 0; i < d.numel; i++)
			ad[l][i] = (float)((i * 7919 + (uint64_t)l * 31) % 1000) * 1e-4f - 0.05f;
		if (l == lc->layers - 2 && d.tensor_count)
			ad[l][d.tensors[d.tensor_count - 1].offset + 5] = poison;
		zn_layer_desc_release(&d);
	}
	cr_assert_eq(zn_lora_save_peft(lc, (const float *const *)ad, dir, NULL), 0);
	for (int l = 0; l < lc->layers; l++)
		free(ad[l]);
	free(ad);
}

/* An adapter on c_attn and c_fc opened by a run on c_attn alone: the c_fc tensors would be
 * dropped and lost at --save-adapter, so the open refuses naming c_fc; on c_attn and
 * c_proj, the missing c_proj tensors are named. */
Test(lora_peft, tensors_outside_the_targets_are_refused_naming_the_modules, .init = make_dir,
     .fini = remove_dir)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc;
	struct zn_st_file *f = NULL;
	char *err;

	gpt2_lora(&mc, &lc, 4, 8);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	save_adapters(&lc, 0.5f);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), 0);
	zn_st_close(f);
	zn_lora_release(&lc);

	gpt2_lora(&mc, &lc, 4, 8);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	cr_assert_null(f);
	zn_lora_release(&lc);
	gpt2_lora(&mc, &lc, 4, 8);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc,c_proj"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	zn_lora_release(&lc);
	/* an adapter of a 3-layer model on this 2-layer one */
	gpt2_lora(&mc, &lc, 4, 8);
	mc.layers = 3;
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	save_adapters(&lc, 0.5f);
	zn_lora_release(&lc);
	gpt2_lora(&mc, &lc, 4, 8);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	/* a tensor that is no LoRA factor (PEFT's bias "all", a module to save) */
	{
		char path[128];
		float v[8] = { 0 };
		struct zn_st_entry e = { .name = "base_model.model.transformer.h.0.attn.c_attn.bias",
					 .ndim = 1, .shape = { 8 }, .data_h = v };

		snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
		cr_assert_eq(zn_st_write(path, ZN_DTYPE_F32, &e, 1, NULL, NULL, 0), 0);
		cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	}
	zn_lora_release(&lc);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "adapters of modules this gpt2 model does not have (e.g. "
				  "base_model.model.transformer.h.2.attn.c_attn.lora_A.weight)"), "%s",
			   err);
	cr_assert_not_null(strstr(err, "1 tensors are no LoRA factor zinc trains (e.g. "
				  "base_model.model.transformer.h.0.attn.c_attn.bias"), "%s", err);
	cr_assert_not_null(strstr(err, "outside --lora-targets c_attn: c_fc (e.g. "
				  "base_model.model.transformer.h.0.mlp.c_fc.lora_A.weight)"), "%s",
			   err);
	cr_assert_not_null(strstr(err, "attn.c_proj.lora_A.weight is missing"), "%s", err);
}

/* NaN or Inf in an adapter is refused when it is opened, naming the tensor and element. */
Test(lora_peft, nan_or_inf_in_an_adapter_is_refused_naming_the_tensor, .init = make_dir,
     .fini = remove_dir)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc;
	struct zn_st_file *f = NULL;
	char *err;

	gpt2_lora(&mc, &lc, 4, 8);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	save_adapters(&lc, NAN);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	cr_assert_null(f);
	save_adapters(&lc, -INFINITY);
	cr_assert_eq(zn_lora_peft_open(&lc, dir, &f), -EINVAL);
	zn_lora_release(&lc);
	err = stderr_text();
	cr_assert_not_null(strstr(err, "transformer.h.1.mlp.c_fc.lora_B.weight holds NaN at [1, "
				  "1]"), "%s", err);
	cr_assert_not_null(strstr(err, "lora_B.weight holds Inf"), "%s", err);
}

/* zinc generate and zinc merge read an adapter through zn_lora_peft_read_config with their
 * own flag's name: messages name that flag and no flag those commands lack (they have no
 * --init-adapter or --lora-targets): the targets taken say nothing, a regular expression
 * is refused with what to write in the file. */
Test(lora_peft, read_config_names_only_the_commands_own_flag, .init = make_dir,
     .fini = remove_dir)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc;
	char path[128], *text, *err;
	FILE *f;

	snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
	for (int regex = 0; regex < 2; regex++) {
		text = with("target_modules", regex ? "\".*\\\\.c_attn\"" : "[\"c_attn\"]");
		f = fopen(path, "w");
		cr_assert_not_null(f);
		fputs(text, f);
		fclose(f);
		free(text);
		gpt2_lora(&mc, &lc, 1, 1);
		cr_assert_eq(zn_lora_peft_read_config(&lc, dir, "--adapter"), regex ? -EINVAL : 0);
		if (!regex)
			cr_assert(lc.r == 8 && lc.target_count == 1 &&
				  !strcmp(lc.targets[0], "c_attn"));
	}
	err = stderr_text();
	cr_assert_not_null(strstr(err, "--adapter "), "%s", err);
	cr_assert_not_null(strstr(err, "target_modules is the regular expression"), "%s", err);
	cr_assert_not_null(strstr(err, "write the module names as a list there"), "%s", err);
	cr_assert(!strstr(err, "--init-adapter") && !strstr(err, "--lora-targets"), "%s", err);
}
