/* Layer-major accumulation with the parameters and optimizer state on nvme (zinc.schedule,
 * src/sched/step_lm.c): bit-identical to micro-batch order, every step reads what the plan
 * says, and the difference is exactly the parameter fetches saved: each layer read once
 * per direction instead of once per micro-batch and direction (the tied GPT-2 head twice).
 * With activation checkpoints on nvme the layer boundaries live there too: the same bits,
 * and each step writes and reads exactly the boundaries the plan counts; an injected read
 * or write error on a boundary stops the step naming the boundary and the swap file. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>

#include "engine_recompute.h"
#include "nvme_test_util.h"
#include "model/lora/lora.h"
#include "sched/engine_impl.h"
#include "sched/lmajor.h"
#include "sched/plan.h"

static void train(struct et_run *r, struct rc_case k, const int *tok)
{
	struct zn_gpt2_config g = rc_gpt2();
	struct zn_llama_config l = rc_llama(k.relative);
	struct zn_model m = k.llama ? zn_llama_model(&l) : zn_gpt2_model(&g);
	struct zn_config c;

	rc_config(&c, &k);
	c.runtime.hot_layers = 0; /* every layer but 0 read for each use */
	cr_assert_eq(et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, RC_STEPS), 0);
}

/* bytes micro-batch order reads more than layer-major: (2k - uses) shards per layer */
static uint64_t saved_bytes(const struct et_run *r, int gas, bool tied)
{
	uint64_t sum = 0;
	int n = r->layer_count;

	for (int l = 1; l < n; l++) {
		struct zn_shard s;
		uint64_t uses = l == n - 1 && !tied ? 1 : 2;

		zn_plan_shard(r->numel[l], 1, 0, &s);
		sum += (2 * (uint64_t)gas - uses) * s.shard_numel * 4;
	}
	return sum;
}

static void nvme_case(bool llama, int gas)
{
	char dir[ZN_PATH_MAX];
	struct rc_case k = { .llama = llama, .stage = 3, .off = ZN_OFFLOAD_NVME, .gas = gas,
			     .nvme_dir = dir };
	int *tok = et_tokens(et_stream_len(RC_STEPS, gas, 1, ET_B), 32, 5);
	struct et_run mb, lm;

	nvme_test_dir(dir, sizeof(dir));
	train(&mb, k, tok);
	k.layer_major = true;
	train(&lm, k, tok);
	rc_assert_same(&mb, &lm, &k);
	for (int s = 0; s < RC_STEPS; s++) {
		cr_assert_eq(mb.nvme_read[s], mb.plan_nvme_read, "micro-batch step %d", s + 1);
		cr_assert_eq(lm.nvme_read[s], lm.plan_nvme_read, "layer-major step %d: read %llu, "
			     "plan %llu", s + 1, (unsigned long long)lm.nvme_read[s],
			     (unsigned long long)lm.plan_nvme_read);
	}
	cr_assert_eq(mb.plan_nvme_read - lm.plan_nvme_read,
		     saved_bytes(&mb, gas, !llama && gas > 1),
		     "%s grad-accum %d: micro-batch order reads %llu, layer-major %llu",
		     llama ? "llama" : "gpt2", gas, (unsigned long long)mb.plan_nvme_read,
		     (unsigned long long)lm.plan_nvme_read);
	et_run_free(&mb);
	et_run_free(&lm);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_schedule, gpt2_each_layer_read_once_per_direction)
{
	nvme_case(false, 2);
	nvme_case(false, 4);
}

Test(nvme_schedule, llama_each_layer_read_once_per_direction)
{
	nvme_case(true, 4);
}

/* LoRA with the frozen base on nvme: the same bits, each step reads what the plan says,
 * and layer-major reads less (the base once per layer and direction) */
Test(nvme_schedule, lora_base_read_once_per_direction)
{
	char dir[ZN_PATH_MAX];
	struct zn_gpt2_config g = rc_gpt2();
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct rc_case k = { .stage = 3, .off = ZN_OFFLOAD_NVME, .gas = 4, .nvme_dir = dir };
	int *tok = et_tokens(et_stream_len(RC_STEPS, 4, 1, ET_B), 32, 5);
	struct et_run r[2];
	struct zn_model m;

	nvme_test_dir(dir, sizeof(dir));
	lc.base = zn_gpt2_model(&g);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	m = zn_lora_model(&lc);
	for (int i = 0; i < 2; i++) {
		struct zn_config c;

		k.layer_major = i;
		rc_config(&c, &k);
		c.runtime.hot_layers = 0;
		cr_assert_eq(et_train_any(&r[i], &c, &m, ZN_COMM_SINGLE, tok, RC_STEPS), 0);
		for (int s = 1; s < RC_STEPS; s++) /* step 1 reads layer 0's base too */
			cr_assert_eq(r[i].nvme_read[s], r[i].plan_nvme_read, "%s step %d: read "
				     "%llu, plan %llu", i ? "layer-major" : "micro-batch", s + 1,
				     (unsigned long long)r[i].nvme_read[s],
				     (unsigned long long)r[i].plan_nvme_read);
	}
	rc_assert_same(&r[0], &r[1], &k);
	cr_assert_lt(r[1].plan_nvme_read * 3, r[0].plan_nvme_read, "layer-major %llu, "
		     "micro-batch %llu", (unsigned long long)r[1].plan_nvme_read,
		     (unsigned long long)r[0].plan_nvme_read);
	et_run_free(&r[0]);
	et_run_free(&r[1]);
	zn_lora_release(&lc);
	free(tok);
	nvme_test_rmdir(dir);
}

/* Boundaries on nvme (activation_checkpointing.device nvme): micro-batch order, layer-major
 * with the boundaries in pinned memory and on nvme, all the same bits; each step's nvme
 * bytes are the plan's, and the nvme home's plan reads and writes more than the pinned
 * home's by exactly the boundaries read again, each once. */
static void boundary_case(bool llama, int gas, enum zn_offload_device off)
{
	char dir[ZN_PATH_MAX];
	struct rc_case k = { .llama = llama, .stage = 3, .off = off, .gas = gas, .every = 1,
			     .home = ZN_OFFLOAD_NVME, .nvme_dir = dir };
	int *tok = et_tokens(et_stream_len(RC_STEPS, gas, 1, ET_B), 32, 5);
	uint64_t width = llama ? (uint64_t)rc_llama(0).hidden : (uint64_t)rc_gpt2().d_model;
	uint64_t x = zn_plan_host_alloc_bytes((uint64_t)ET_B * ET_T * width * 4), bnd;
	struct et_run mb, host, nv;

	nvme_test_dir(dir, sizeof(dir));
	train(&mb, k, tok);
	k.layer_major = true;
	train(&nv, k, tok);
	k.home = ZN_OFFLOAD_CPU;
	train(&host, k, tok);
	rc_assert_same(&mb, &nv, &k);
	rc_assert_same(&host, &nv, &k);
	for (int s = 0; s < RC_STEPS; s++) {
		cr_assert_eq(nv.nvme_read[s], nv.plan_nvme_read, "%s gas %d step %d: read %llu, "
			     "plan %llu", llama ? "llama" : "gpt2", gas, s + 1,
			     (unsigned long long)nv.nvme_read[s],
			     (unsigned long long)nv.plan_nvme_read);
		cr_assert_eq(nv.nvme_write[s] - host.nvme_write[s],
			     nv.plan_nvme_write - host.plan_nvme_write, "%s gas %d step %d: "
			     "boundary writes %llu, plan %llu", llama ? "llama" : "gpt2", gas, s + 1,
			     (unsigned long long)(nv.nvme_write[s] - host.nvme_write[s]),
			     (unsigned long long)(nv.plan_nvme_write - host.plan_nvme_write));
	}
	bnd = (uint64_t)zn_lmajor_stored_count(nv.layer_count, gas, !llama && gas > 1) * x;
	cr_assert_eq(nv.plan_nvme_read - host.plan_nvme_read, bnd, "%s gas %d: the plan reads "
		     "%llu boundary bytes, expected %llu", llama ? "llama" : "gpt2", gas,
		     (unsigned long long)(nv.plan_nvme_read - host.plan_nvme_read),
		     (unsigned long long)bnd);
	cr_assert_eq(nv.plan_nvme_write - host.plan_nvme_write, bnd);
	et_run_free(&mb);
	et_run_free(&host);
	et_run_free(&nv);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_schedule, gpt2_boundaries_on_nvme)
{
	boundary_case(false, 2, ZN_OFFLOAD_CPU);
	boundary_case(false, 4, ZN_OFFLOAD_NVME);
}

Test(nvme_schedule, llama_boundaries_on_nvme)
{
	boundary_case(true, 2, ZN_OFFLOAD_NVME);
	boundary_case(true, 4, ZN_OFFLOAD_CPU);
}

/* GPT-2 of 6 layers, grad-accum 2, its head tied: boundaries of layers 1 .. 4 and the
 * last layer's of micro-batch 1 on nvme (9 of 4 KiB). A step writes extents 0 .. 8
 * (pieces 1-9), then reads 6, 7, 4, 5, 2, 3, 0, 1, 9 (pieces 10-18). */
static void check_fault(uint64_t nth, const char *op, const char *which)
{
	char dir[ZN_PATH_MAX];
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc = rc_gpt2();
	struct rc_case k = { .gas = 2, .every = 1, .home = ZN_OFFLOAD_NVME, .nvme_dir = dir,
			     .layer_major = true };
	struct zn_aio_stats io;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	int *tok = et_tokens(5 * ET_B * ET_T, 96, 5), rc;

	nvme_test_dir(dir, sizeof(dir));
	rc_config(&c, &k);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0, "the unfaulted step trains");
	zn_aio_get_stats(zn_engine_ckpt_aio(e), &io);
	cr_assert_eq(io.bytes_written, 9 * 4096, "9 boundaries written (%llu bytes)",
		     (unsigned long long)io.bytes_written);
	cr_assert_eq(io.bytes_read, 9 * 4096, "9 boundaries read back (%llu bytes)",
		     (unsigned long long)io.bytes_read);
	zn_aio_set_fault(zn_engine_ckpt_aio(e), &(struct zn_aio_fault){ .nth = nth, .err = EIO });
	rc = zn_engine_step(e, tok + 2 * ET_B * ET_T, tok + 2 * ET_B * ET_T + 1, &st);
	cr_assert_eq(rc, -EIO, "the faulted step returns -EIO (got %d)", rc);
	cr_assert(nvme_test_stderr_has(which, op), "the error names the boundary and the %s", op);
	cr_assert(nvme_test_stderr_has(which, "zinc-swap-"), "the error names the swap file");
	zn_engine_destroy(e);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_schedule, boundary_read_fault_names_the_file, .init = cr_redirect_stderr)
{
	check_fault(10, "nvme read of", "layer boundary 6 (input of layer 4, micro-batch 0)");
}

Test(nvme_schedule, boundary_write_fault_names_the_file, .init = cr_redirect_stderr)
{
	check_fault(2, "nvme write of", "layer boundary 1 (input of layer 1, micro-batch 1)");
}
