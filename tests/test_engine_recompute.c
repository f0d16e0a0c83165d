/* Activation checkpointing (src/sched/recompute.c, docs/activations.md): GPT-2 and Llama
 * at ZeRO stages 0-3, with offload and gradient accumulation, give bit-identical losses and
 * weights with checkpoints on the device and in host memory, every 1, 2 or 3 layers; the
 * use sequence recomputes each run but the last; the config keys. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "engine_recompute.h"
#include <errno.h>

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

/* 6 layers, runs of 2: [1 2] [3 4] [5]; forward 1..5, the last run's backward, then each
 * run recomputed (forward of all but its last layer, that one forward + backward) */
Test(engine_recompute, schedule_recomputes_every_run_but_the_last)
{
	static const int want[][3] = {
		{ 1, 1, 0 }, { 2, 1, 0 }, { 3, 1, 0 }, { 4, 1, 0 }, { 5, 1, 0 }, { 5, 0, 1 },
		{ 3, 1, 0 }, { 4, 1, 1 }, { 3, 0, 1 }, { 1, 1, 0 }, { 2, 1, 1 }, { 1, 0, 1 },
	};
	struct zn_engine e = { .n = 6 };
	struct zn_use u[32];
	int n;

	zn_config_defaults(&e.cfg);
	e.cfg.act_ckpt.enabled = true;
	e.cfg.act_ckpt.every = 2;
	n = zn_ckpt_schedule(&e, u);
	cr_assert_eq(n, 12);
	for (int i = 0; i < n; i++)
		cr_assert(u[i].layer == want[i][0] && u[i].fwd == want[i][1] &&
			  u[i].bwd == want[i][2], "use %d: layer %d fwd %d bwd %d", i, u[i].layer,
			  u[i].fwd, u[i].bwd);
	/* off: forward 1..5, backward 5..1 */
	e.cfg.act_ckpt.enabled = false;
	n = zn_ckpt_schedule(&e, u);
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

Test(engine_recompute, peak_within_plan_on_the_device) { rc_check_peak(ZN_OFFLOAD_NONE, 1, 0, NULL); }
Test(engine_recompute, peak_within_plan_on_the_device_every_2) { rc_check_peak(ZN_OFFLOAD_NONE, 2, 3, NULL); }
Test(engine_recompute, peak_within_plan_in_host_memory) { rc_check_peak(ZN_OFFLOAD_CPU, 1, 3, NULL); }

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
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), -ENOMEM);
	k.every = 1;
	rc_config(&c, &k);
	c.runtime.device_mem_bytes = (off.plan_bytes + on.plan_bytes) / 2;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	zn_engine_destroy(e);
	k.home = ZN_OFFLOAD_CPU;
	rc_config(&c, &k);
	c.runtime.pinned_mem_bytes = 4096;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), -ENOMEM);
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
