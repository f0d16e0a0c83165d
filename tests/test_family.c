/* The model-family registry (src/model/family.h): every entry complete (the required hooks
 * set, its configuration within ZN_FAMILY_CONFIG_BYTES), model_types and presets unique
 * across families, look-ups by name / model_type / preset finding their entry, each
 * preset's model naming its family in its ops and writing a config.json that reads back as
 * the same family and variant with the same parameter count; the lists in messages. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "model/family.h"
#include "model/hf_config.h"

Test(family, entries_complete_and_names_unique)
{
	int n = zn_family_count(), types = 0;

	cr_assert_geq(n, 2);
	cr_expect_null(zn_family_at(n));
	cr_expect_null(zn_family_at(-1));
	for (int i = 0; i < n; i++) {
		const struct zn_family *f = zn_family_at(i);

		cr_assert_not_null(f);
		cr_expect(f->name && f->type_count > 0 && f->presets && f->presets()[0] &&
			  f->flags_help && f->lora_targets && f->lora_targets[0], "%s", f->name);
		cr_expect(f->hf_parse && f->hf_write && f->hf_layout && f->hf_param_count &&
			  f->from_flags && f->from_source && f->to_hf && f->model &&
			  f->param_count && f->line && f->text, "%s: a required hook is NULL",
			  f->name);
		cr_expect(f->config_bytes > 0 && f->config_bytes <= ZN_FAMILY_CONFIG_BYTES);
		cr_expect_eq(zn_family_by_name(f->name), f);
		for (int t = 0; t < f->type_count; t++, types++) {
			int type = -1;

			cr_expect(f->types[t].model_type && f->types[t].architecture);
			cr_expect_eq(zn_family_of_model_type(f->types[t].model_type, &type), f,
				     "model_type %s in two families", f->types[t].model_type);
			cr_expect_eq(type, t);
		}
		for (int p = 0; f->presets()[p]; p++)
			cr_expect_eq(zn_family_of_preset(f->presets()[p]), f,
				     "preset %s in two families", f->presets()[p]);
	}
	cr_expect_null(zn_family_by_name("gpt5"));
	cr_expect_null(zn_family_of_preset("gpt5"));
	cr_expect(types >= 5);
}

/* every preset: ops named for the family, config.json back to the same family and variant,
 * the same count from the layout as from the model */
Test(family, presets_round_trip_through_config_json)
{
	for (int i = 0; i < zn_family_count(); i++) {
		const struct zn_family *f = zn_family_at(i);

		for (int p = 0; f->presets()[p]; p++) {
			_Alignas(16) unsigned char cfg[ZN_FAMILY_CONFIG_BYTES];
			const char *name = f->presets()[p];
			char *argv[] = { "--model", (char *)name }, *rest[2];
			struct zn_hf_config hf, back;
			int k = 0;
			char *json;

			cr_assert_eq(f->from_flags(cfg, 2, argv, rest, &k), 0, "%s", name);
			cr_expect_eq(k, 0);
			cr_expect_str_eq(f->model(cfg).ops->family, f->name, "%s", name);
			f->to_hf(cfg, &hf);
			cr_expect_eq(hf.family, f, "%s", name);
			cr_expect_eq(zn_hf_param_count(&hf), f->param_count(cfg), "%s", name);
			json = zn_hf_config_to_json(&hf, NULL);
			cr_assert_not_null(json);
			cr_assert_eq(zn_hf_config_parse(json, name, &back), 0, "%s: %s", name,
				     json);
			cr_expect(back.family == f && back.type == hf.type, "%s", name);
			cr_expect_eq(zn_hf_param_count(&back), f->param_count(cfg), "%s", name);
			cr_expect_str_eq(zn_hf_model_type(&back), f->types[hf.type].model_type);
			free(json);
		}
	}
}

Test(family, message_lists)
{
	char buf[2048];

	zn_family_model_types(buf, sizeof(buf));
	cr_expect_str_eq(buf, "gpt2, llama, qwen2, mistral, qwen3, mixtral and qwen3_moe");
	zn_family_preset_list(buf, sizeof(buf));
	cr_expect(!strncmp(buf, "gpt2: tiny, small,", 18) && strstr(buf, "; llama: llama-tiny") &&
		  strstr(buf, "qwen3-32b"), "%s", buf);
	zn_family_model_types(buf, 12); /* cut, still a string */
	cr_expect_eq(strlen(buf), 11u);
}
