/* Activation checkpointing (src/sched/recompute.c, docs/activations.md): GPT-2 and Llama
 * at ZeRO stages 0-3, with offload and gradient accumulation, give bit-identical losses and
 * weights with checkpoints on the device and in host memory, every 1, 2 or 3 layers, and
 * in every case a device peak within the plan and lower than without checkpointing by
 * the planned amount; Llama's relatives (Qwen2, attention_bias, Mistral); the use sequence
 * recomputes each run but the last; the config keys; zinc estimate's activation figures
 * for a GPT shape, a Llama preset and a Qwen2 config.json, against hand-computed ones. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "engine_recompute.h"
#include <errno.h>
#include <unistd.h>

#include "sched/engine_impl.h"

static const int everies[] = { 1, 2, 3 };
#define NEV ((int)(sizeof(everies) / sizeof(everies[0])))

static void both_homes(bool llama, int stage, enum zn_offload_device off, int gas)
{
	struct rc_case k = { .llama = llama, .stage = stage, .off = off, .gas = gas };

	k.home = ZN_OFFLOAD_NONE;
	rc_check(k, everies, NEV);
	k.home = ZN_OFFLOAD_CPU;
	rc_check(k, everies, NEV);
}

Test(engine_recompute, gpt2_stage0) { both_homes(false, 0, ZN_OFFLOAD_NONE, 1); }
Test(engine_recompute, gpt2_stage1_accum) { both_homes(false, 1, ZN_OFFLOAD_NONE, 2); }
Test(engine_recompute, gpt2_stage2) { both_homes(false, 2, ZN_OFFLOAD_NONE, 1); }
Test(engine_recompute, gpt2_stage3_accum) { both_homes(false, 3, ZN_OFFLOAD_NONE, 2); }
Test(engine_recompute, gpt2_stage3_offload) { both_homes(false, 3, ZN_OFFLOAD_CPU, 1); }
Test(engine_recompute, llama_stage0) { both_homes(true, 0, ZN_OFFLOAD_NONE, 1); }
Test(engine_recompute, llama_stage1) { both_homes(true, 1, ZN_OFFLOAD_NONE, 1); }
Test(engine_recompute, llama_stage2_accum) { both_homes(true, 2, ZN_OFFLOAD_NONE, 2); }
Test(engine_recompute, llama_stage3_offload) { both_homes(true, 3, ZN_OFFLOAD_CPU, 1); }

/* Llama's relatives through the same model ops: Qwen2 (q/k/v biases, tied embeddings: the
 * lm_head reads layer 0's parameters), attention_bias (o_proj bias too), Mistral's window */
Test(engine_recompute, llama_relatives)
{
	static const int rel[] = { RC_QWEN2, RC_ATTENTION_BIAS, RC_MISTRAL };

	for (int i = 0; i < 3; i++) {
		struct rc_case k = { .llama = true, .relative = rel[i], .stage = 1 + i,
				     .off = i == 2 ? ZN_OFFLOAD_CPU : ZN_OFFLOAD_NONE, .gas = 1 };

		k.home = i == 1 ? ZN_OFFLOAD_CPU : ZN_OFFLOAD_NONE;
		rc_check(k, everies, NEV);
	}
}

/* 6 layers, runs of 2: [1 2] [3 4] [5]; forward 1..5, the last run's backward, then each
 * run recomputed (forward of all but its last layer, that one forward + backward) */
Test(engine_recompute, schedule_recomputes_every_run_but_the_last)
{
	static const int want[][3] = {
		{ 1, 1, 0 }, { 2, 1, 0 }, { 3, 1, 0 }, { 4, 1, 0 }, { 5, 1, 0 }, { 5, 0, 1 },
		{ 3, 1, 0 }, { 4, 1, 1 }, { 3, 0, 1 }, { 1, 1, 0 }, { 2, 1, 1 }, { 1, 0, 1 },
	};
	struct zn_act_shape s = { .n = 6, .on = true, .every = 2 };
	struct zn_use u[32];
	int n;

	n = zn_recompute_schedule(&s, u);
	cr_assert_eq(n, 12);
	for (int i = 0; i < n; i++)
		cr_assert(u[i].layer == want[i][0] && u[i].fwd == want[i][1] &&
			  u[i].bwd == want[i][2], "use %d: layer %d fwd %d bwd %d", i, u[i].layer,
			  u[i].fwd, u[i].bwd);
	/* off: forward 1..5, backward 5..1 */
	s.on = false;
	n = zn_recompute_schedule(&s, u);
	cr_assert_eq(n, 10);
	cr_assert(u[5].layer == 5 && u[5].bwd && !u[5].fwd && u[9].layer == 1);
}

static int load(struct zn_config *c, const char *json)
{
	zn_config_defaults(c);
	return zn_config_load_json_string(c, json, "test") || zn_config_validate(c, 1);
}

Test(engine_recompute, config_keys, .init = cr_redirect_stderr)
{
	struct zn_config c;

	/* DeepSpeed's block: cpu_checkpointing homes the checkpoints on the host */
	cr_assert_eq(load(&c, "{\"activation_checkpointing\": {\"partition_activations\": true,"
			  " \"cpu_checkpointing\": true, \"contiguous_memory_optimization\": true,"
			  " \"number_checkpoints\": 4, \"synchronize_checkpoint_boundary\": false,"
			  " \"profile\": false}}"), 0);
	cr_assert(c.act_ckpt.enabled && c.act_ckpt.home.device == ZN_OFFLOAD_CPU);
	/* without cpu_checkpointing the block alone changes nothing */
	cr_assert_eq(load(&c, "{\"activation_checkpointing\": {\"partition_activations\": true}}"),
		     0);
	cr_assert(!c.act_ckpt.enabled);
	cr_assert_eq(load(&c, "{\"zinc\": {\"gradient_checkpointing\": true}}"), 0);
	cr_assert(c.act_ckpt.enabled && c.act_ckpt.every == 1 &&
		  c.act_ckpt.home.device == ZN_OFFLOAD_NONE);
	cr_assert_eq(load(&c, "{\"zinc\": {\"checkpoint_every\": 3}}"), 0);
	cr_assert(c.act_ckpt.enabled && c.act_ckpt.every == 3);
	/* refusals name the key */
	cr_assert_neq(load(&c, "{\"zinc\": {\"checkpoint_every\": 0}}"), 0);
	cr_assert_neq(load(&c, "{\"activation_checkpointing\": {\"device\": \"nvme\"}}"), 0);
	cr_assert_neq(load(&c, "{\"activation_checkpointing\": {\"cpu_checkpointing\": true,"
			  " \"device\": \"device\"}}"), 0);
	fflush(stderr);
	{
		FILE *f = cr_get_redirected_stderr();
		char buf[8192];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);

		buf[n] = 0;
		cr_assert_not_null(strstr(buf, "--checkpoint-every"), "%s", buf);
		cr_assert_not_null(strstr(buf, "--checkpoint-nvme-path"), "%s", buf);
		cr_assert_not_null(strstr(buf, "cpu_checkpointing is true but device"), "%s", buf);
	}
}

Test(engine_recompute, peak_within_plan_on_the_device) { rc_check_peak(false, ZN_OFFLOAD_NONE, 1, 0, NULL); }
Test(engine_recompute, peak_within_plan_on_the_device_every_2) { rc_check_peak(false, ZN_OFFLOAD_NONE, 2, 3, NULL); }
Test(engine_recompute, peak_within_plan_in_host_memory) { rc_check_peak(false, ZN_OFFLOAD_CPU, 1, 3, NULL); }
Test(engine_recompute, llama_peak_within_plan_on_the_device) { rc_check_peak(true, ZN_OFFLOAD_NONE, 1, 2, NULL); }
Test(engine_recompute, llama_peak_within_plan_in_host_memory) { rc_check_peak(true, ZN_OFFLOAD_CPU, 2, 1, NULL); }

/* zinc estimate --micro-batch: per layer lines and the totals of each home, the same
 * function the engine plans with: GPT-2 XL at seq 1024, micro-batch 1 */
Test(engine_recompute, estimate_counts_activations)
{
	char cmd[1024], out[8192];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s estimate --layers 48 --hidden 1600 --heads 25 --vocab "
		 "50257 --seq 1024 --micro-batch 1 --gradient-checkpointing 2>&1", ZN_ZINC_EXE);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = 0;
	cr_assert_eq(pclose(f), 0, "%s", out);
	/* 1 x 1024 x 1600 fp32 = 6.55 MB per output; a block keeps ln1, qkv, atty, res2, ln2,
	 * fch, fch_gelu (1 + 3 + 1 + 1 + 1 + 4 + 4 = 15 x 6.55 MB) plus row statistics */
	cr_assert_not_null(strstr(out, "layers 1-48: activations 98.42 MB each, output 6.55 MB"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "without checkpointing: device 5.05 GB"), "%s", out);
	cr_assert_not_null(strstr(out, "checkpoints on host  : device 118.08 MB, pinned host "
				       "314.57 MB"), "%s", out);
	cr_assert_not_null(strstr(out, "+ activations (checkpointing, on the device)"), "%s",
			   out);
}

static void estimate(const char *args, char *out, size_t size)
{
	char cmd[1024];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s estimate %s 2>&1", ZN_ZINC_EXE, args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, size - 1, f);
	out[n] = 0;
	cr_assert_eq(pclose(f), 0, "%s: %s", args, out);
}

/* --model llama-3-8b --seq 2048, micro-batch 1, by hand: x = 2048 x 4096 x 4 B = 33.55 MB.
 * A block keeps h1, res2, h2 (3 x BTH), rstd1, rstd2 (2 x BT), qkv (BT x (32 + 2 x 8) x
 * 128), atty (BT x 4096), lse (32 x BT), gate/up (BT x 2 x 14336), m (BT x 14336):
 * 134,287,360 floats = 537.15 MB; the final layer hn (BTH), rstd (BT) (chunked lm_head + CE:
 * no probs): 8,390,656 floats = 33.56 MB. Without checkpointing 32 blocks + final + 33 outputs =
 * 19.38 GB; every layer kept (33 runs): 33 checkpoints + the largest run buffer (the final
 * layer's) + the sink = 2.23 GB on the device; host or nvme: 2 slots instead of 33
 * checkpoints = 1.18 GB, the other 32 checkpoints 1.07 GB pinned (host) or on nvme with 4
 * staging buffers (134.22 MB). */
Test(engine_recompute, estimate_counts_llama_activations)
{
	char out[8192];

	estimate("--model llama-3-8b --seq 2048 --micro-batch 1 --gradient-checkpointing", out,
		 sizeof(out));
	cr_assert_not_null(strstr(out, "layer 0: activations 0 B, output 33.55 MB"), "%s", out);
	cr_assert_not_null(strstr(out, "layers 1-32: activations 537.15 MB each, output "
				       "33.55 MB each"), "%s", out);
	cr_assert_not_null(strstr(out, "layer 33: activations 33.56 MB, output 0 B"), "%s", out);
	cr_assert_not_null(strstr(out, "without checkpointing: device 18.33 GB"), "%s", out);
	cr_assert_not_null(strstr(out, "checkpoints on device: device 1.68 GB, pinned host 0 B, "
				       "nvme 0 B (33 runs)"), "%s", out);
	cr_assert_not_null(strstr(out, "checkpoints on host  : device 637.81 MB, pinned host "
				       "1.07 GB, nvme 0 B"), "%s", out);
	cr_assert_not_null(strstr(out, "checkpoints on nvme  : device 637.81 MB, pinned host "
				       "134.22 MB, nvme 1.07 GB"), "%s", out);
	cr_assert_not_null(strstr(out, "+ activations (checkpointing, on the device)"), "%s",
			   out);
}

/* A Qwen2 config.json (q/k/v biases, tied), micro-batch 2, seq 256, every 2 layers, by
 * hand: BT = 512, x = 512 x 64 x 4 B = 131.07 KB; a block 396,288 floats (h1, res2, h2
 * 3 x 32768, rstd 2 x 512, qkv 512 x 128, atty 512 x 64, lse 4 x 512, gate/up 512 x 256,
 * m 512 x 128) = 1.59 MB; the final layer 32768 + 512 + 512 x 1000 floats = 2.18 MB.
 * Without: 3 blocks + final + 4 outputs = 7.46 MB. Every 2 (layers 1-4: runs [1 2] [3 4],
 * 2 checkpoints): device 2 checkpoints + 2 run buffers of the largest (final) layer + 1
 * run output + the sink = 4.89 MB; --checkpoint-every turns checkpointing on, as in
 * zinc train. */
Test(engine_recompute, estimate_counts_qwen2_config_activations)
{
	char dir[] = "/tmp/zn-est-acts-XXXXXX", path[64], args[256], out[8192];
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128,"
	      " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
	      " \"vocab_size\": 1000, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-6,"
	      " \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true}", f);
	fclose(f);
	snprintf(args, sizeof(args), "--model-config %s --seq 256 --micro-batch 2 "
		 "--checkpoint-every 2", path);
	estimate(args, out, sizeof(out));
	cr_assert_not_null(strstr(out, "qwen2, 3 layers"), "%s", out);
	cr_assert_not_null(strstr(out, "layers 1-3: activations 1.59 MB each, output 131.07 KB "
				       "each"), "%s", out);
	cr_assert_not_null(strstr(out, "layer 4: activations 133.12 KB, output 0 B"), "%s", out);
	cr_assert_not_null(strstr(out, "without checkpointing: device 5.41 MB"), "%s", out);
	cr_assert_not_null(strstr(out, "--checkpoint-every 2, checkpoints on device: device "
				       "3.69 MB, pinned host 0 B, nvme 0 B (2 runs)"), "%s", out);
	/* --checkpoint-every turns checkpointing on in zinc train: the plan has it */
	cr_assert_not_null(strstr(out, "+ activations (checkpointing, on the device)\n"), "%s",
			   out);
	remove(path);
	rmdir(dir);
}

/* The plan refuses what does not fit, activations counted: a device budget between the
 * two plans refuses the run without checkpointing and takes it with; a pinned budget too
 * small for host checkpoints names them. */
Test(engine_recompute, plan_refuses_what_does_not_fit, .init = cr_redirect_stderr)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc = rc_gpt2();
	struct rc_case k = { .stage = 0, .gas = 1 };
	int *tok = et_tokens(et_stream_len(RC_STEPS, 1, 1, ET_B), 32, 3);
	struct et_run off, on;
	struct zn_config c;
	struct zn_engine *e = NULL;
	char buf[8192];
	size_t n;

	rc_train(&off, &k, tok);
	k.every = 1;
	rc_train(&on, &k, tok);
	k.every = 0;
	rc_config(&c, &k);
	c.runtime.device_mem_bytes = (off.plan_bytes + on.plan_bytes) / 2;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), ZN_EUSAGE);
	k.every = 1;
	rc_config(&c, &k);
	c.runtime.device_mem_bytes = (off.plan_bytes + on.plan_bytes) / 2;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	zn_engine_destroy(e);
	k.home = ZN_OFFLOAD_CPU;
	rc_config(&c, &k);
	c.runtime.pinned_mem_bytes = 4096;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), ZN_EUSAGE);
	fflush(stderr);
	n = fread(buf, 1, sizeof(buf) - 1, cr_get_redirected_stderr());
	buf[n] = 0;
	cr_assert_not_null(strstr(buf, "device budget"), "%s", buf);
	cr_assert_not_null(strstr(buf, "activations"), "%s", buf);
	cr_assert_not_null(strstr(buf, "activation checkpoints 0.02"), "%s", buf);
	et_run_free(&off);
	et_run_free(&on);
	free(tok);
}
