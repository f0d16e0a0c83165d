/* Mixtral and Qwen3-MoE (the Llama family's mixtral and qwen3_moe model_types) through the
 * zinc commands: a tiny config.json of each trains to memorize a line, saves a Hugging Face
 * directory whose shards name every expert as the published checkpoints do (never the
 * fused stack zinc keeps), reloads at ZeRO-3 with CPU offload (an lr-0 step: the same files
 * byte for byte) and `zinc generate` says the line back greedily; the load-balancing loss
 * on the step line with output_router_logits or --router-aux-loss-coef; `zinc estimate`
 * with the presets; every bad value of an MoE key refused naming the key. The float64
 * reference of the math is scripts/llama_check.py --model mixtral|qwen3_moe.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli_child.h"

#define LINE "hello from zinc, the tiny moe. "
#define ATTN                                                                                \
	"\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "        \
	"\"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 64, " \
	"\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\""
#define MIXTRAL                                                                      \
	"{\"model_type\": \"mixtral\", \"architectures\": [\"MixtralForCausalLM\"], " ATTN \
	", \"intermediate_size\": 64, \"rms_norm_eps\": 1e-5, \"sliding_window\": null, "  \
	"\"num_local_experts\": 4, \"num_experts_per_tok\": 2%s}"
#define QWEN3_MOE                                                                         \
	"{\"model_type\": \"qwen3_moe\", \"architectures\": [\"Qwen3MoeForCausalLM\"], " ATTN \
	", \"head_dim\": 24, \"intermediate_size\": 96, \"moe_intermediate_size\": 32, "      \
	"\"rms_norm_eps\": 1e-6, \"num_experts\": 8, \"num_experts_per_tok\": 2, "            \
	"\"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [1], "    \
	"\"use_sliding_window\": false, \"sliding_window\": null, \"attention_bias\": false%s}"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_climoe_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_moe, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* DIR/name from the format fmt with extra keys (", \"key\": value" or "") */
static const char *write_config(const char *name, const char *fmt, const char *extra)
{
	const char *p = zt_path(dir, name);
	FILE *f = fopen(p, "w");

	cr_assert_not_null(f, "%s", p);
	fprintf(f, fmt, extra);
	fclose(f);
	return p;
}

/* trains cfg to memorize LINE, saves DIR/m, checks the names (want[], none of bad[]),
 * reloads at ZeRO-3 with offload for an lr-0 step and generates the line back */
static void memorize(const char *cfg, const char *model, const char *const *want, int nw)
{
	char out[32768], *text;

	zt_write_lines(dir, "mem.txt", LINE, 100);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 8 --data %s/mem.txt --steps 150 --lr 5e-3 "
				 "--steps-per-print 50 --save-final %s/m", cfg, dir, dir), 0,
		     "%s", out);
	cr_expect(strstr(out, model), "%s", out);
	/* no output_router_logits: no load-balancing loss, none printed */
	cr_expect(!strstr(out, "| aux "), "%s", out);
	text = zt_read_text(dir, "m/model.safetensors");
	for (int i = 0; i < nw; i++)
		cr_expect(strstr(text + 8, want[i]), "the saved header lacks %s", want[i]);
	cr_expect(!strstr(text + 8, "gate_up_proj") && !strstr(text + 8, "experts.down_proj"),
		  "the saved header has zinc's fused expert stack");
	free(text);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --seq 32 "
				 "--micro-batch 8 --data %s/mem.txt --init-from %s/m --steps 1 "
				 "--lr 0 --zero-stage 3 --offload-optimizer cpu --offload-param cpu "
				 "--save-final %s/n", dir, dir, dir), 0, "%s", out);
	zt_same_file(dir, "m/model.safetensors", "n/model.safetensors");
	zt_same_file(dir, "m/config.json", "n/config.json");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --device host --init-from %s/m "
				 "--tokenizer bytes --prompt hello --max-new-tokens 26", dir), 0,
		     "%s", out);
	cr_expect(strstr(out, "hello from zinc, the tiny moe."), "%s", out);
	/* the layers streamed from host memory: only the routed experts come up, the same
	 * line back (docs/generate.md) */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --device host --init-from %s/m "
				 "--tokenizer bytes --prompt hello --max-new-tokens 26 "
				 "--offload-param cpu", dir), 0, "%s", out);
	cr_expect(strstr(out, "hello from zinc, the tiny moe."), "%s", out);
	cr_expect(strstr(out, "; experts ") && strstr(out, " fetches)"), "%s", out);
}

Test(cli_moe, mixtral_memorize_save_reload_generate)
{
	static const char *const want[] = {
		"\"model.layers.0.block_sparse_moe.gate.weight\"",
		"\"model.layers.1.block_sparse_moe.experts.0.w1.weight\"",
		"\"model.layers.1.block_sparse_moe.experts.3.w2.weight\"",
		"\"model.layers.0.block_sparse_moe.experts.2.w3.weight\"",
	};
	char cfg[160], *text;

	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", MIXTRAL, ""));
	memorize(cfg, "model: mixtral, 2 layers, 4 heads (2 kv), head_dim 16, hidden 64, "
		      "intermediate 64, vocab 256, seq 32, untied, 4 experts (2 per token, "
		      "intermediate 64; 2 of 2 layers sparse, 0.10M expert parameters), aux loss "
		      "off", want, 4);
	text = zt_read_text(dir, "m/config.json");
	cr_expect(strstr(text, "\"MixtralForCausalLM\"") &&
		  strstr(text, "\"num_local_experts\": 4") &&
		  strstr(text, "\"num_experts_per_tok\": 2") &&
		  strstr(text, "\"output_router_logits\": false") &&
		  strstr(text, "\"router_jitter_noise\": 0"), "%s", text);
	free(text);
}

Test(cli_moe, qwen3_moe_memorize_save_reload_generate)
{
	static const char *const want[] = {
		"\"model.layers.0.mlp.gate.weight\"",
		"\"model.layers.0.mlp.experts.7.gate_proj.weight\"",
		"\"model.layers.0.mlp.experts.0.up_proj.weight\"",
		"\"model.layers.0.mlp.experts.5.down_proj.weight\"",
		"\"model.layers.1.mlp.gate_proj.weight\"", /* mlp_only_layers: dense */
		"\"model.layers.1.self_attn.q_norm.weight\"",
	};
	char cfg[160], *text;

	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", QWEN3_MOE, ""));
	memorize(cfg, "model: qwen3_moe, 2 layers, 4 heads (2 kv), head_dim 24, hidden 64, "
		      "intermediate 96, vocab 256, seq 32, untied, 8 experts (2 per token, "
		      "intermediate 32; 1 of 2 layers sparse, 0.05M expert parameters), aux loss "
		      "off", want, 6);
	text = zt_read_text(dir, "m/model.safetensors");
	cr_expect(!strstr(text + 8, "model.layers.1.mlp.experts"), "layer 1 is dense");
	free(text);
	text = zt_read_text(dir, "m/config.json");
	cr_expect(strstr(text, "\"Qwen3MoeForCausalLM\"") && strstr(text, "\"num_experts\": 8") &&
		  strstr(text, "\"moe_intermediate_size\": 32") &&
		  strstr(text, "\"norm_topk_prob\": true") &&
		  strstr(text, "\"mlp_only_layers\": [\n    1\n  ]"), "%s", text);
	free(text);
}

/* the load-balancing loss: on the step line with output_router_logits, and with the flag */
Test(cli_moe, aux_loss_on_the_step_line)
{
	char out[32768], cfg[160], *text;

	zt_write_lines(dir, "mem.txt", LINE, 20);
	snprintf(cfg, sizeof(cfg), "%s", write_config("a.json", QWEN3_MOE,
						       ", \"output_router_logits\": true"));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 1", cfg, dir),
		     0, "%s", out);
	cr_expect(strstr(out, "| aux "), "%s", out);
	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", MIXTRAL, ""));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 1 "
				 "--router-aux-loss-coef 0.05 --save-final %s/f", cfg, dir, dir), 0,
		     "%s", out);
	cr_expect(strstr(out, "| aux ") && strstr(out, "aux loss on"), "%s", out);
	text = zt_read_text(dir, "f/config.json");
	cr_expect(strstr(text, "\"output_router_logits\": true") &&
		  strstr(text, "\"router_aux_loss_coef\": 0.05"), "%s", text);
	free(text);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model llama-tiny "
				 "--seq 32 --data %s/mem.txt --steps 1 --router-aux-loss-coef 0.1",
				 dir), 2, "%s", out);
	cr_expect(strstr(out, "--router-aux-loss-coef: the model has no experts"), "%s", out);
	cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --data %s/mem.txt --steps 1 --router-aux-loss-coef -1",
				 cfg, dir), 2, "%s", out);
	cr_expect(strstr(out, "--router-aux-loss-coef '-1'"), "%s", out);
}

Test(cli_moe, estimate_presets)
{
	char out[32768];

	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model mixtral-8x7b --json"),
		     0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t46702792704,"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model qwen3-30b-a3b --json"),
		     0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t30532122624,"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model qwen3-235b-a22b"), 0,
		     "%s", out);
	cr_expect(strstr(out, "# model: qwen3_moe, 94 layers") &&
		  strstr(out, "128 experts (8 per token, intermediate 1536; 94 of 94 layers "
			 "sparse, 227096.40M expert parameters)"), "%s", out);
}

/* every bad value of an MoE key is refused, exit 2, naming the key */
Test(cli_moe, bad_keys_named)
{
	static const char *const bad[][3] = {
		{ QWEN3_MOE, ", \"num_experts\": 0", "\"num_experts\"" },
		{ QWEN3_MOE, ", \"num_experts\": 513", "\"num_experts\"" },
		{ QWEN3_MOE, ", \"num_experts_per_tok\": 9", "\"num_experts_per_tok\"" },
		{ QWEN3_MOE, ", \"num_experts_per_tok\": 0", "\"num_experts_per_tok\"" },
		{ QWEN3_MOE, ", \"moe_intermediate_size\": 0", "\"moe_intermediate_size\"" },
		{ QWEN3_MOE, ", \"norm_topk_prob\": 1", "\"norm_topk_prob\"" },
		{ QWEN3_MOE, ", \"decoder_sparse_step\": 0", "\"decoder_sparse_step\"" },
		{ QWEN3_MOE, ", \"mlp_only_layers\": [2]", "\"mlp_only_layers\"" },
		{ QWEN3_MOE, ", \"mlp_only_layers\": 1", "\"mlp_only_layers\"" },
		{ QWEN3_MOE, ", \"output_router_logits\": \"yes\"", "\"output_router_logits\"" },
		{ QWEN3_MOE, ", \"router_aux_loss_coef\": -0.1", "\"router_aux_loss_coef\"" },
		{ QWEN3_MOE, ", \"shared_expert_intermediate_size\": 64",
		  "\"shared_expert_intermediate_size\"" },
		{ QWEN3_MOE, ", \"use_sliding_window\": true", "\"use_sliding_window\"" },
		{ MIXTRAL, ", \"num_local_experts\": -1", "\"num_local_experts\"" },
		{ MIXTRAL, ", \"router_jitter_noise\": 0.1", "\"router_jitter_noise\"" },
		{ MIXTRAL, ", \"n_shared_experts\": 2", "\"n_shared_experts\"" },
		{ MIXTRAL, ", \"attention_dropout\": 0.1", "\"attention_dropout\"" },
		{ MIXTRAL, ", \"num_experts_per_tok\": 5", "\"num_experts_per_tok\"" },
	};
	char out[8192], name[32];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(name, sizeof(name), "bad%zu.json", i);
		cr_expect_eq(zt_zinc_run(out, sizeof(out), "", "estimate --model-config %s",
					 write_config(name, bad[i][0], bad[i][1])), 2, "%s: %s",
			     bad[i][1], out);
		cr_expect(strstr(out, bad[i][2]), "%s: %s", bad[i][1], out);
	}
}

/* LoRA on the attention of a mixture of experts (the experts frozen): the load-balancing
 * loss reaches the adapters; on the experts' projections, an adapter per expert */
Test(cli_moe, lora_on_attention)
{
	char out[32768], cfg[160], *text;

	zt_write_lines(dir, "mem.txt", LINE, 20);
	snprintf(cfg, sizeof(cfg), "%s", write_config("a.json", QWEN3_MOE,
						       ", \"output_router_logits\": true"));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 2 --lr 1e-3 "
				 "--lora-r 4 --lora-targets q_proj,v_proj --zero-stage 3 "
				 "--offload-optimizer cpu --offload-param cpu --save-adapter %s/A",
				 cfg, dir, dir), 0,
		     "%s", out);
	cr_expect(strstr(out, "| aux "), "%s", out);
	/* the experts frozen in host memory: only the routed ones fetched, and said so */
	cr_expect(strstr(out, "| experts ") && strstr(out, "| experts per step "), "%s", out);
	text = zt_read_text(dir, "A/adapter_config.json");
	cr_expect(strstr(text, "\"q_proj\"") && strstr(text, "\"v_proj\""), "%s", text);
	free(text);
	/* the router trained through an adapter (PEFT's "gate"), the experts frozen */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 2 --lr 1e-3 "
				 "--lora-r 4 --lora-targets gate --save-adapter %s/G", cfg, dir, dir),
		     0, "%s", out);
	text = zt_read_text(dir, "G/adapter_model.safetensors");
	cr_expect(strstr(text + 8, "model.layers.0.mlp.gate.lora_A.weight") &&
		  !strstr(text + 8, "layers.1.mlp.gate"), "the router's adapter is missing");
	free(text);
	/* up_proj: every expert's of the sparse layer 0 and the dense layer 1's MLP */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --data %s/mem.txt --steps 1 --lora-r 4 --lora-targets "
				 "q_proj,up_proj --save-adapter %s/U", cfg, dir, dir), 0, "%s", out);
	text = zt_read_text(dir, "U/adapter_model.safetensors");
	cr_expect(strstr(text + 8, "\"base_model.model.model.layers.0.mlp.experts.7.up_proj."
				   "lora_A.weight\"") &&
		  strstr(text + 8, "\"base_model.model.model.layers.1.mlp.up_proj.lora_B.weight\"") &&
		  !strstr(text + 8, "gate_proj"), "the experts' adapters are not PEFT's");
	free(text);
}

/* LoRA on every expert of a Mixtral (w1, w2, w3: PEFT's names): the adapter merged by zinc
 * merge generates what the unmerged adapter does, and not what the base does */
Test(cli_moe, lora_on_the_experts_merge_and_generate)
{
	char out[32768], cfg[160], ids[3][256], *text;
	const char *const from[3] = { "%s/M", "%s/b --adapter %s/E", "%s/b" };

	zt_write_lines(dir, "mem.txt", LINE, 20);
	snprintf(cfg, sizeof(cfg), "%s", write_config("c.json", MIXTRAL, ""));
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --model-config %s "
				 "--seq 32 --data %s/mem.txt --steps 0 --save-final %s/b", cfg, dir,
				 dir), 0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --device host --init-from %s/b "
				 "--seq 32 --micro-batch 2 --data %s/mem.txt --steps 3 --lr 2e-2 "
				 "--lora-r 4 --lora-targets w1,w2,w3 --save-adapter %s/E", dir, dir,
				 dir), 0, "%s", out);
	text = zt_read_text(dir, "E/adapter_model.safetensors");
	cr_expect(strstr(text + 8, "\"base_model.model.model.layers.1.block_sparse_moe.experts.3."
				   "w2.lora_B.weight\"") &&
		  strstr(text + 8, "\"base_model.model.model.layers.0.block_sparse_moe.experts.0."
				   "w3.lora_A.weight\""), "the experts' adapters are not PEFT's");
	free(text);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "merge --init-from %s/b --adapter %s/E "
				 "--output %s/M", dir, dir, dir), 0, "%s", out);
	cr_expect(strstr(out, "merged 24 adapters"), "2 layers x 4 experts x 3: %s", out);
	for (int i = 0; i < 3; i++) {
		char cmd[512], *at;

		snprintf(cmd, sizeof(cmd), "generate --device host --init-from %s --tokenizer bytes "
			 "--prompt hello --max-new-tokens 12 --ignore-eos --print-ids", from[i]);
		cr_assert_eq(zt_zinc_run(out, sizeof(out), "", cmd, dir, dir), 0, "%s", out);
		at = strstr(out, "ids: ");
		cr_assert_not_null(at, "%s", out);
		snprintf(ids[i], sizeof(ids[i]), "%.*s", (int)strcspn(at, "\n"), at);
	}
	cr_expect_str_eq(ids[0], ids[1], "merged and unmerged differ");
	cr_expect_str_neq(ids[1], ids[2], "the experts' adapters changed nothing");
}
