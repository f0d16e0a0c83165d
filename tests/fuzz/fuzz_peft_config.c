/* Fuzz target: a PEFT adapter_config.json as --init-adapter reads it (zn_lora_peft_read,
 * zn_lora_peft_apply, then zn_lora_peft_open: src/model/lora/lora_peft*.c).
 * The directory (made once per process) holds the adapter_model.safetensors that zinc
 * saves for a 2-layer GPT-2 with LoRA r 4, alpha 8 on c_attn; the input is
 * adapter_config.json. An accepted config must say r 4, lora_alpha 8 and no rsLoRA as
 * Python's json.load reads the text (core/json, the last of a repeated key), and every
 * layer's adapters must then load and read back as saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "model/gpt2/gpt2.h"
#include "model/lora/lora.h"
#include "model/safetensors.h"
#include "fuzz.h"

static char dir[4096];
static struct zn_gpt2_config mc = { .layers = 2, .heads = 2, .d_model = 8, .seq = 8,
				    .vocab = 16, .padded_vocab = 16 };
static struct zn_lora_config lc = { .r = 4, .alpha = 8 };
static float **saved;
static float *back;

static void remove_dir(void)
{
	const char *names[] = { "adapter_config.json", "adapter_model.safetensors" };
	char p[4200];

	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

/* The adapters (every element distinct) saved in PEFT's layout, once. */
static void make_dir(void)
{
	const char *tmp = getenv("TMPDIR");
	struct zn_layer_desc d;
	uint64_t most = 0;

	snprintf(dir, sizeof(dir), "%s/zinc-fuzz-peft-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ZN_FUZZ_CHECK(mkdtemp(dir) != NULL);
	atexit(remove_dir);
	lc.base = zn_gpt2_model(&mc);
	ZN_FUZZ_CHECK(zn_lora_add_targets(&lc, "c_attn") == 0);
	ZN_FUZZ_CHECK(zn_lora_prepare(&lc) == 0);
	saved = calloc((size_t)lc.layers, sizeof(*saved));
	ZN_FUZZ_CHECK(saved != NULL);
	for (int l = 0; l < lc.layers; l++) {
		ZN_FUZZ_CHECK(zn_lora_describe(&lc, l, &d) == 0);
		saved[l] = calloc(d.numel + 1, sizeof(float));
		ZN_FUZZ_CHECK(saved[l] != NULL);
		for (uint64_t i = 0; i < d.numel; i++)
			saved[l][i] = (float)(l * 1000 + (int)i) * 0.25f;
		most = d.numel > most ? d.numel : most;
		zn_layer_desc_release(&d);
	}
	back = calloc(most + 1, sizeof(float));
	ZN_FUZZ_CHECK(back != NULL);
	ZN_FUZZ_CHECK(zn_lora_save_peft(&lc, (const float *const *)saved, dir, NULL) == 0);
}

/* what the text says, by the reader's own rules: r, lora_alpha, use_rslora */
static void check_config(const uint8_t *data, size_t n)
{
	struct zn_json_opts o = { .origin = "fuzz adapter_config.json",
				  .flags = ZN_JSON_QUIET_DUP };
	cJSON *j = NULL;
	const cJSON *r, *alpha;

	ZN_FUZZ_CHECK(zn_json_parse((const char *)data, n, &o, &j) == 0);
	ZN_FUZZ_CHECK(cJSON_IsObject(j));
	r = cJSON_GetObjectItemCaseSensitive(j, "r");
	alpha = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
	ZN_FUZZ_CHECK(cJSON_IsNumber(r) && r->valuedouble == 4.0);
	ZN_FUZZ_CHECK(cJSON_IsNumber(alpha) && (float)alpha->valuedouble == 8.0f);
	ZN_FUZZ_CHECK(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_rslora")));
	cJSON_Delete(j);
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	struct zn_st_file *f = NULL;
	struct zn_lora_peft peft;
	struct zn_layer_desc d;
	char p[4200];
	FILE *fp;

	if (!dir[0])
		make_dir();
	snprintf(p, sizeof(p), "%s/adapter_config.json", dir);
	fp = fopen(p, "wb");
	ZN_FUZZ_CHECK(fp != NULL);
	ZN_FUZZ_CHECK(fwrite(data, 1, n, fp) == n);
	ZN_FUZZ_CHECK(fclose(fp) == 0);
	if (zn_lora_peft_read(dir, "--init-adapter", &peft) ||
	    zn_lora_peft_apply(&lc, &peft, p, false) || zn_lora_peft_open(&lc, dir, &f))
		return 0;
	check_config(data, n);
	for (int l = 0; l < lc.layers; l++) {
		ZN_FUZZ_CHECK(zn_lora_describe(&lc, l, &d) == 0);
		ZN_FUZZ_CHECK(zn_lora_peft_load_layer(f, &d, back) == 0);
		ZN_FUZZ_CHECK(memcmp(back, saved[l], d.numel * sizeof(float)) == 0);
		zn_layer_desc_release(&d);
	}
	zn_st_close(f);
	return 1;
}
