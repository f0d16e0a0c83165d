/* Qwen3 (Qwen3ForCausalLM, the Llama family's qwen3 model_type) through the zinc commands:
 * a config.json with head_dim apart from hidden / heads trains to memorize a line, saves a
 * Hugging Face directory (q_norm / k_norm under their names, config.json as transformers
 * writes it), reloads at ZeRO-3 with CPU offload (an lr-0 step: the same files byte for
 * byte) and `zinc generate` says the line back greedily; LoRA on PEFT's target names;
 * `zinc estimate` with the presets and the published config.json; every bad value of
 * Qwen3's own keys refused naming the key. The float64 reference of the math is
 * scripts/llama_check.py --model qwen3 (ctest qwen3_check).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_child.h"

#define LINE "hello from zinc, the tiny qwen3. "
#define CONFIG                                                                               \
	"{\"model_type\": \"qwen3\", \"architectures\": [\"Qwen3ForCausalLM\"], "            \
	"\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "        \
	"\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 24, "          \
	"\"vocab_size\": 256, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6, "      \
	"\"rope_theta\": 1000000, \"rope_scaling\": null, \"attention_bias\": false, "        \
	"\"use_sliding_window\": false, \"sliding_window\": null, \"max_window_layers\": 2, " \
	"\"tie_word_embeddings\": false, \"hidden_act\": \"silu\"%s}"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_cliqwen3_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_qwen3, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* DIR/name with CONFIG and extra keys (", \"key\": value" or "") */
static const char *write_config(const char *name, const char *extra)
{
	const char *p = zt_path(dir, name);
	FILE *f = fopen(p, "w");

	cr_assert_not_null(f, "%s", p);
	fprintf(f, CONFIG, extra);
	fclose(f);
	return p;
}

Test(cli_qwen3, memorize_save_reload_generate)
{
	char out[32768], cfg[160], *text;

	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", ""));
	zt_write_lines(dir, "mem.txt", LINE, 100);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 8 --data %s/mem.txt --steps 150 --lr 5e-3 "
				 "--steps-per-print 50 --save-final %s/m", cfg, dir, dir), 0,
		     "%s", out);
	cr_expect(strstr(out, "model: qwen3, 2 layers, 4 heads (2 kv), head_dim 24, hidden 64, "
			      "intermediate 128, vocab 256, seq 32, untied"), "%s", out);
	/* config.json as transformers writes it; the norms under their Hugging Face names */
	text = zt_read_text(dir, "m/config.json");
	cr_expect(strstr(text, "\"model_type\": \"qwen3\"") &&
		  strstr(text, "\"Qwen3ForCausalLM\"") && strstr(text, "\"head_dim\": 24") &&
		  strstr(text, "\"use_sliding_window\": false") &&
		  strstr(text, "\"attention_bias\": false") &&
		  strstr(text, "\"sliding_window\": null"),
		  "%s", text);
	free(text);
	text = zt_read_text(dir, "m/model.safetensors");
	cr_expect(strstr(text + 8, "\"model.layers.1.self_attn.q_norm.weight\"") &&
		  strstr(text + 8, "\"model.layers.1.self_attn.k_norm.weight\"") &&
		  strstr(text + 8, "\"lm_head.weight\"") && !strstr(text + 8, "q_proj.bias"),
		  "the saved header lacks a Qwen3 tensor");
	free(text);
	/* reloaded at ZeRO-3 with CPU offload, a step at lr 0, saved again: the same files */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --seq 32 "
				 "--micro-batch 8 --data %s/mem.txt --init-from %s/m --steps 1 "
				 "--lr 0 --zero-stage 3 --offload-optimizer cpu "
				 "--offload-param cpu "
				 "--save-final %s/n", dir, dir, dir), 0, "%s", out);
	zt_same_file(dir, "m/model.safetensors", "n/model.safetensors");
	zt_same_file(dir, "m/config.json", "n/config.json");
	/* greedy decoding with the KV cache (q/k norms before RoPE) says the line back */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --device host --init-from %s/m "
				 "--tokenizer bytes --prompt hello --max-new-tokens 28", dir), 0,
		     "%s", out);
	cr_expect(strstr(out, "hello from zinc, the tiny qwen3."), "%s", out);
}

/* LoRA on PEFT's names (the norms stay frozen): adapter_config.json as PEFT writes it */
Test(cli_qwen3, lora_targets)
{
	char out[32768], cfg[160], *text;

	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", ""));
	zt_write_lines(dir, "mem.txt", LINE, 20);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 2 --lr 1e-3 "
				 "--lora-r 4 --lora-alpha 8 --lora-targets "
				 "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj "
				 "--save-adapter %s/A", cfg, dir, dir), 0, "%s", out);
	text = zt_read_text(dir, "A/adapter_config.json");
	cr_expect(strstr(text, "\"q_proj\"") && strstr(text, "\"down_proj\"") &&
		  strstr(text, "\"fan_in_fan_out\": false"), "%s", text);
	free(text);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --data %s/mem.txt --steps 1 --lora-r 4 --lora-targets "
				 "q_norm", cfg, dir), 2, "%s", out);
	cr_expect(strstr(out, "unknown module 'q_norm'"), "%s", out);
}

Test(cli_qwen3, estimate_presets_and_config)
{
	char out[32768];

	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model qwen3-8b --json"), 0,
		     "%s", out);
	cr_expect(strstr(out, "\"params\":\t8190735360,"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model qwen3-0.6b --json"), 0,
		     "%s", out);
	cr_expect(strstr(out, "\"params\":\t596049920,"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model-config "
				 "%s/tests/hf/qwen3-32b.json", ZN_TEST_SRC_DIR), 0, "%s", out);
	cr_expect(strstr(out, "# model: qwen3, 64 layers, 64 heads (8 kv), head_dim 128"),
		  "%s", out);
	cr_expect(strstr(out, "32.76B params"), "%s", out);
}

/* every bad value of a key Qwen3 reads is refused, exit 2, naming the key */
Test(cli_qwen3, bad_keys_named)
{
	static const char *const bad[][2] = {
		{ ", \"use_sliding_window\": true", "\"use_sliding_window\"" },
		{ ", \"use_sliding_window\": 1", "\"use_sliding_window\"" },
		{ ", \"sliding_window\": \"4096\"", "\"sliding_window\"" },
		{ ", \"max_window_layers\": -1", "\"max_window_layers\"" },
		{ ", \"layer_types\": [\"full_attention\"]", "\"layer_types\"" },
		{ ", \"layer_types\": [\"full_attention\", \"linear_attention\"]",
		  "\"layer_types\"" },
		{ ", \"attention_dropout\": 0.1", "\"attention_dropout\"" },
		{ ", \"attention_bias\": \"no\"", "\"attention_bias\"" },
		{ ", \"head_dim\": 0", "\"head_dim\"" },
		{ ", \"tie_word_embeddings\": 0", "\"tie_word_embeddings\"" },
		{ ", \"rope_theta\": -1", "\"rope_theta\"" },
		{ ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
		  "\"rope_scaling.rope_type\"" },
	};
	char out[8192], name[32];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(name, sizeof(name), "bad%zu.json", i);
		cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model-config %s",
					 write_config(name, bad[i][0])), 2, "%s: %s", bad[i][0],
						      out);
		cr_expect(strstr(out, bad[i][1]), "%s: %s", bad[i][0], out);
	}
	/* a published layer_types (every layer full) is read */
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model-config %s",
				 write_config("ok.json", ", \"layer_types\": [\"full_attention\", "
					      "\"full_attention\"]")), 0, "%s", out);
}
