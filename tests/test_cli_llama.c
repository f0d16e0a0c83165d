/* zinc train and zinc estimate with Llama-family models (src/train/train_model.c, train_hf.c):
 * --model llama-tiny trains from the loss of a uniform guess; a sharded Hugging Face
 * directory round trip (save, --init-from DIR, a 0-learning-rate step at ZeRO-3 with CPU
 * offload, save again: the same files byte for byte) for untied and tied lm_head, fp32 and
 * bf16; a lone .safetensors file with the config beside it or in its metadata; malformed
 * directories refused naming the file and the key; estimate --model / --model-config.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_child.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clillama_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_llama, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* Runs a command line (zinc's path first when zinc is true); its stdout and stderr in out.
 * Returns the exit code. */
static int run(const char *args, char *out, size_t size)
{
	char cmd[2048];
	FILE *p;
	size_t n;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void sh(const char *fmt, const char *a, const char *b)
{
	zt_sh(fmt, a, b);
}

#define COMMON "--device host --seq 16 --micro-batch 2 --no-pin-memory --data " \
	       ZN_TEST_SRC_DIR "/data/demo.txt"

Test(cli_llama, preset_trains_from_a_uniform_guess)
{
	char out[16384];
	const char *s;
	double loss1 = 0, loss4 = 0;

	cr_assert_eq(run("train " COMMON " --model llama-tiny --steps 4 --lr 3e-3", out,
			 sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "model: llama, 2 layers, 4 heads (2 kv), head_dim 16, hidden 64, "
			      "intermediate 128, vocab 256, seq 16, untied: 0.11M parameters"),
		  "%s", out);
	s = strstr(out, "step 1/4 | loss ");
	cr_assert_not_null(s, "%s", out);
	cr_assert_eq(sscanf(s, "step 1/4 | loss %lf", &loss1), 1);
	s = strstr(out, "step 4/4 | loss ");
	cr_assert_not_null(s, "%s", out);
	cr_assert_eq(sscanf(s, "step 4/4 | loss %lf", &loss4), 1);
	/* weights of std 0.02: near-uniform over 256 tokens at first, then it learns */
	cr_expect(fabs(loss1 - log(256.0)) < 0.15, "step 1 loss %g vs ln 256", loss1);
	cr_expect_lt(loss4, loss1 - 0.1);
	/* a Llama flag on a GPT-2 preset is no GPT-2 flag */
	cr_expect_eq(run("train " COMMON " --model tiny --kv-heads 2 --steps 1", out,
			 sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--kv-heads"), "%s", out);
}

/* save a sharded directory, reload it at ZeRO-3 + CPU offload, lr 0, save again: equal */
static void round_trip(const char *flags, const char *dtype)
{
	char args[1024], out[16384], pa[160], pb[160], *index, *da, *db;
	size_t na, nb, ni;
	int shards = 0;

	snprintf(args, sizeof(args), "train " COMMON " --model llama-tiny %s --steps 2 "
		 "--save-final %s/a --save-shard-size 40KB --save-dtype %s", flags, dir, dtype);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	snprintf(pa, sizeof(pa), "%s/a/model.safetensors.index.json", dir);
	index = zt_read_all(pa, &ni);
	cr_assert_not_null(strstr(index, "-of-"), "%s", index);
	cr_assert_eq(sscanf(strstr(index, "-of-") + 4, "%5d", &shards), 1);
	cr_expect_gt(shards, 3, "%s", index);
	cr_expect_eq(!strstr(index, "\"lm_head.weight\""), !!strstr(flags, "true"), "%s", index);
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/a --steps 1 --lr 0 "
		 "--zero-stage 3 --offload-optimizer cpu --offload-param cpu --save-final %s/b "
		 "--save-shard-size 40KB --save-dtype %s", dir, dir, dtype);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "model: llama, 2 layers"), "%s", out);
	for (int k = 0; k <= shards + 1; k++) {
		char name[64];

		if (k < shards)
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, shards);
		else
			snprintf(name, sizeof(name), k == shards ? "config.json" :
					"model.safetensors.index.json");
		snprintf(pa, sizeof(pa), "%s/a/%s", dir, name);
		snprintf(pb, sizeof(pb), "%s/b/%s", dir, name);
		da = zt_read_all(pa, &na);
		db = zt_read_all(pb, &nb);
		cr_expect(na == nb && !memcmp(da, db, (size_t)na), "%s differs", name);
		free(da);
		free(db);
	}
	free(index);
}

Test(cli_llama, sharded_round_trip_untied)
{
	round_trip("", "fp32");
}

Test(cli_llama, sharded_round_trip_tied_bf16)
{
	round_trip("--tied-embeddings true", "bf16");
}

Test(cli_llama, lone_files)
{
	char args[1024], out[16384];
	double l1 = 0, l2 = 0, l3 = 0;

	/* one file with the config in its metadata; a directory's lone model.safetensors with
	 * config.json beside it: the same model, the same first loss */
	snprintf(args, sizeof(args), "train " COMMON " --model llama-tiny --steps 1 "
		 "--save-final %s/x.safetensors", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/x.safetensors --steps 1 "
		 "--lr 0 --save-final %s/d", dir, dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(sscanf(strstr(out, "step 1/1 | loss "), "step 1/1 | loss %lf", &l1), 1);
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/d/model.safetensors "
		 "--steps 1", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(sscanf(strstr(out, "step 1/1 | loss "), "step 1/1 | loss %lf", &l2), 1);
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/d --steps 1", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(sscanf(strstr(out, "step 1/1 | loss "), "step 1/1 | loss %lf", &l3), 1);
	cr_expect(l1 > 4 && l1 == l2 && l2 == l3, "%g %g %g", l1, l2, l3);
	/* the model comes from the checkpoint: a shape flag is refused */
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/d --layers 3 --steps 1",
		 dir);
	cr_expect_eq(run(args, out, sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--layers: the model comes from"), "%s", out);
	/* --model-config: the shapes of d's config.json, seeded: the preset's first loss */
	cr_assert_eq(run("train " COMMON " --model llama-tiny --steps 1", out, sizeof(out)), 0);
	cr_assert_eq(sscanf(strstr(out, "step 1/1 | loss "), "step 1/1 | loss %lf", &l1), 1);
	snprintf(args, sizeof(args), "train " COMMON " --model-config %s/d --steps 1", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "model: llama, 2 layers, 4 heads (2 kv)"), "%s", out);
	cr_assert_eq(sscanf(strstr(out, "step 1/1 | loss "), "step 1/1 | loss %lf", &l2), 1);
	cr_expect_eq(l1, l2);
		/* without config.json a Llama file cannot be read */
	sh("rm %s/d/config.json%s", dir, "");
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/d/model.safetensors "
		 "--steps 1", dir);
	cr_expect_eq(run(args, out, sizeof(out)), 2, "%s", out);
}

/* each malformed copy of a good directory is refused naming the file and the key */
Test(cli_llama, malformed_directories_refused)
{
	static const struct {
		const char *edit, *want;
	} cases[] = {
		/* missing shard */
		{ "rm %s/t/model-00003-of-00012.safetensors%s",
		  "names shard" },
		/* index naming a tensor in a shard that does not hold it */
		{ "sed -i 's/\"lm_head.weight\": \"model-000[0-9]*-of-00012/\"lm_head.weight\": "
		  "\"model-00001-of-00012/' %s/t/model.safetensors.index.json%s",
		  "key \"weight_map\".\"lm_head.weight\" puts the tensor in" },
		/* untied config, index without lm_head */
		{ "sed -i 's/\"lm_head.weight\": \"[^\"]*\",\\?//' %s/t/model.safetensors.index.json%s",
		  "no tensor 'lm_head.weight'" },
		/* config/tensor shape mismatch */
		{ "sed -i 's/\"intermediate_size\": 128/\"intermediate_size\": 96/' %s/t/config.json%s",
		  "'model.layers.0.mlp.gate_proj.weight' has shape [128, 64] but the config gives "
		  "[96, 64]" },
		/* unknown model_type */
		{ "sed -i 's/\"model_type\": \"llama\"/\"model_type\": \"gpt_neox\"/' "
		  "%s/t/config.json%s", "key \"model_type\" is \"gpt_neox\"" },
	};
	char args[1024], out[16384];

	snprintf(args, sizeof(args), "train " COMMON " --model llama-tiny --steps 1 "
		 "--save-final %s/a --save-shard-size 40KB", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "rm -rf %s/t && cp -r %s/a %s/t", dir, dir, dir);
		cr_assert_eq(system(cmd), 0);
		sh(cases[i].edit, dir, "");
		snprintf(args, sizeof(args), "train " COMMON " --init-from %s/t --steps 1", dir);
		cr_expect_neq(run(args, out, sizeof(out)), 0, "case %zu: %s", i, out);
		cr_expect(strstr(out, cases[i].want), "case %zu: %s", i, out);
		cr_expect(strstr(out, "/t/"), "case %zu names no file: %s", i, out);
	}
}

Test(cli_llama, estimate_model_and_model_config)
{
	char args[1024], out[16384];

	cr_assert_eq(run("estimate --model llama-3-8b --json", out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t8030261248,"), "%s", out);
	/* the largest layer: the final one, model.norm 4096 + lm_head 128256 x 4096 */
	cr_expect(strstr(out, "\"largest_layer\":\t525340672,"), "%s", out);
	snprintf(args, sizeof(args), "estimate --model-config %s/tests/hf/llama-3.2-1b.json "
		 "--json", ZN_TEST_SRC_DIR);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t1235814400,"), "%s", out);
	snprintf(args, sizeof(args), "estimate --model-config %s/tests/hf/qwen2-0.5b.json",
		 ZN_TEST_SRC_DIR);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "# model: qwen2, 24 layers"), "%s", out);
	cr_expect(strstr(out, "494.03M params"), "%s", out);
	/* train's model flags change a preset: 2 of llama-3-70b's 80 layers */
	cr_assert_eq(run("estimate --model llama-3-70b --layers 2 --json", out, sizeof(out)), 0,
		     "%s", out);
	/* 2 x 128256 x 8192 + 8192 + 2 x (2 x 8192 + 8192 x (8192 + 2 x 1024 + 8192) +
	 * 3 x 8192 x 28672) */
	cr_expect(strstr(out, "\"params\":\t3812663296,"), "%s", out);
	cr_assert_eq(run("estimate --model gpt2 --json", out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t124439808,"), "%s", out);
	snprintf(args, sizeof(args), "estimate --model-config %s/tests/hf/gpt2.json --json",
		 ZN_TEST_SRC_DIR);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "\"params\":\t124439808,"), "%s", out);
	snprintf(args, sizeof(args), "estimate --model-config %s/tests/hf/llama-3-8b.json "
		 "--heads 8", ZN_TEST_SRC_DIR);
	cr_expect_eq(run(args, out, sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--heads: the model comes from"), "%s", out);
	cr_expect_eq(run("estimate --model llama-9b", out, sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--model 'llama-9b': no such preset"), "%s", out);
}

/* Qwen2 (q/k/v biases, tied) and Mistral (sliding window) from a config.json: seeded
 * training, a directory saved and reloaded (one lr-0 step: the same files), and a Mistral
 * --seq beyond the window refused */
Test(cli_llama, qwen2_and_mistral_from_config)
{
	static const char *const configs[] = {
		"{\"model_type\": \"qwen2\", \"hidden_size\": 32, \"intermediate_size\": 48, "
		"\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
		"\"vocab_size\": 256, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6, "
		"\"rope_theta\": 1000000.0, \"tie_word_embeddings\": true, \"hidden_act\": \"silu\"}",
		"{\"model_type\": \"mistral\", \"hidden_size\": 32, \"intermediate_size\": 48, "
		"\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 1, "
		"\"vocab_size\": 256, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-5, "
		"\"sliding_window\": 32, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"}",
	};
	static const char *const want[] = { "model: qwen2, 2 layers, 4 heads (2 kv)",
					    "model: mistral, 2 layers, 4 heads (1 kv)" };
	char args[1024], out[16384], p[160], *da, *db;
	size_t na, nb;

	for (int i = 0; i < 2; i++) {
		FILE *f;

		snprintf(p, sizeof(p), "%s/c%d.json", dir, i);
		f = fopen(p, "w");
		cr_assert_not_null(f);
		fputs(configs[i], f);
		fclose(f);
		snprintf(args, sizeof(args), "train " COMMON " --model-config %s --steps 2 "
			 "--save-final %s/m%d", p, dir, i);
		cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
		cr_expect(strstr(out, want[i]), "%s", out);
		snprintf(args, sizeof(args), "train " COMMON " --init-from %s/m%d --steps 1 --lr 0 "
			 "--zero-stage 3 --save-final %s/n%d", dir, i, dir, i);
		cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
		cr_expect(strstr(out, want[i]), "%s", out);
		snprintf(p, sizeof(p), "%s/m%d/model.safetensors", dir, i);
		da = zt_read_all(p, &na);
		snprintf(p, sizeof(p), "%s/n%d/model.safetensors", dir, i);
		db = zt_read_all(p, &nb);
		cr_expect(na == nb && !memcmp(da, db, (size_t)na), "config %d: files differ", i);
		free(da);
		free(db);
		snprintf(p, sizeof(p), "%s/m%d/model.safetensors", dir, i);
		da = zt_read_all(p, &na);
		/* the header (after its 8-byte length): qwen2 saves q/k/v biases, mistral an lm_head */
		cr_expect_eq(!!strstr(da + 8, "self_attn.q_proj.bias"), i == 0);
		cr_expect_eq(!!strstr(da + 8, "lm_head.weight"), i == 1);
		free(da);
	}
	snprintf(args, sizeof(args), "train --device host --seq 33 --micro-batch 2 "
		 "--no-pin-memory --data " ZN_TEST_SRC_DIR "/data/demo.txt --init-from %s/m1 "
		 "--steps 1", dir);
	/* beyond the window: the fused attention's sliding window (issue 17), no refusal */
	cr_expect_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "step 1/1 | loss 5."), "%s", out);
}
