/* Planner: shard bounds and the ZeRO model-state formulas. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "model/gpt2/gpt2.h"
#include "sched/plan.h"

Test(plan, shard_bounds_cover_the_layer)
{
	static const uint64_t sizes[] = { 1, 2047, 2048, 10000, 123457, 1u << 22 };
	static const int worlds[] = { 1, 2, 3, 4, 7, 64 };

	for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
		for (size_t b = 0; b < sizeof(worlds) / sizeof(worlds[0]); b++) {
			uint64_t covered = 0, next = 0;

			for (int r = 0; r < worlds[b]; r++) {
				struct zn_shard s;

				zn_plan_shard(sizes[a], worlds[b], r, &s);
				cr_assert_eq(s.shard_numel % ZN_SHARD_ALIGN_NUMEL, 0);
				cr_assert_eq(s.offset, next, "shards are contiguous");
				cr_assert_eq(s.padded_numel, s.shard_numel * (uint64_t)worlds[b]);
				cr_assert(s.padded_numel >= sizes[a]);
				cr_assert(s.shard_numel * 2 % 4096 == 0, "bf16 shard is 4 KiB aligned");
				cr_assert(s.real_numel <= s.shard_numel);
				covered += s.real_numel;
				next = s.offset + s.shard_numel;
			}
			cr_assert_eq(covered, sizes[a], "n=%llu world=%d",
				     (unsigned long long)sizes[a], worlds[b]);
		}
	}
}

Test(plan, shard_example)
{
	struct zn_shard s;

	zn_plan_shard(10000, 3, 2, &s);
	cr_assert_eq(s.shard_numel, 4096); /* ceil(10000/3) = 3334 -> 4096 */
	cr_assert_eq(s.offset, 8192);
	cr_assert_eq(s.real_numel, 10000 - 8192);
	zn_plan_shard(100, 4, 3, &s);
	cr_assert_eq(s.real_numel, 0, "a rank past the end holds padding only");
}

static struct zn_estimate est(uint64_t P, int N, int stage, enum zn_offload_device opt,
			      enum zn_offload_device prm)
{
	struct zn_estimate_input in = { .params = P, .largest_layer = P / 100, .ranks = N,
					.ranks_per_node = N < 8 ? N : 8, .stage = stage,
					.offload_optimizer = opt, .offload_param = prm,
					.prefetch_depth = 1, .buffer_count = 4,
					.mixed_precision = true };
	struct zn_estimate e;

	cr_assert_eq(zn_plan_estimate(&in, &e), 0);
	return e;
}

Test(plan, seed_example_70b_on_64)
{
	uint64_t P = 70000000000ull;

	cr_assert_eq(est(P, 64, 0, 0, 0).device_model_bytes, 1120000000000ull); /* 1.12 TB */
	cr_assert_eq(est(P, 64, 3, 0, 0).device_model_bytes, 17500000000ull);   /* 17.5 GB */
}

Test(plan, zero_formulas_at_1_8_64)
{
	static const int Ns[] = { 1, 8, 64 };
	uint64_t P = 7000000000ull * 64; /* divisible by every N */

	for (int i = 0; i < 3; i++) {
		uint64_t N = (uint64_t)Ns[i];

		cr_assert_eq(est(P, Ns[i], 0, 0, 0).device_model_bytes, 16 * P);
		cr_assert_eq(est(P, Ns[i], 1, 0, 0).device_model_bytes, 4 * P + 12 * P / N);
		cr_assert_eq(est(P, Ns[i], 2, 0, 0).device_model_bytes, 2 * P + 14 * P / N);
		cr_assert_eq(est(P, Ns[i], 3, 0, 0).device_model_bytes, 16 * P / N);
	}
}

Test(plan, offload_moves_bytes_between_tiers)
{
	uint64_t P = 64000000000ull, N = 64;
	struct zn_estimate a = est(P, 64, 3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU);
	struct zn_estimate b = est(P, 64, 3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME);
	struct zn_estimate c = est(P, 64, 2, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NONE);

	cr_assert_eq(a.device_model_bytes, 0);
	cr_assert_eq(a.host_bytes, 16 * P / N, "all model states on the host");
	cr_assert_eq(a.nvme_bytes, 0);
	cr_assert_eq(b.nvme_bytes, 14 * P / N, "params + optimizer on nvme, grads on host");
	cr_assert_eq(b.host_bytes, 2 * P / N + b.pinned_staging_bytes);
	cr_assert(b.pinned_staging_bytes > 0);
	cr_assert_eq(c.device_model_bytes, 2 * P, "stage 2 + cpu offload keeps bf16 params");
	cr_assert_eq(c.host_bytes, 14 * P / N);
	/* working set: (1 + depth) gathered layers + one layer of full grads */
	cr_assert_eq(a.device_working_bytes, (2 * 2 + 2) * (P / 100));
	cr_assert_eq(a.host_node_bytes, a.host_bytes * 8);
}

Test(plan, bad_inputs_refused)
{
	struct zn_estimate_input in = { .params = 100, .ranks = 0, .ranks_per_node = 1 };
	struct zn_estimate e;

	cr_assert_neq(zn_plan_estimate(&in, &e), 0);
	in.ranks = 1;
	in.stage = 2;
	in.offload_param = ZN_OFFLOAD_CPU;
	cr_assert_neq(zn_plan_estimate(&in, &e), 0, "offload_param needs stage 3");
	in.stage = 4;
	in.offload_param = ZN_OFFLOAD_NONE;
	cr_assert_neq(zn_plan_estimate(&in, &e), 0);
}

Test(plan, gpt2_small_parameter_count)
{
	uint64_t p, largest;

	zn_gpt2_shape_params(12, 768, 50257, 1024, &p, &largest);
	cr_assert_eq(p, 124439808u, "GPT-2 124M with tied embeddings");
	cr_assert_eq(largest, 50257u * 768 + 1024u * 768);
}

Test(plan, placement)
{
	struct zn_placement pl;

	zn_plan_placement(0, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NONE, &pl);
	cr_assert(!pl.optim_sharded && !pl.grads_sharded && !pl.params_sharded);
	zn_plan_placement(2, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NONE, &pl);
	cr_assert(pl.optim_sharded && pl.grads_sharded && !pl.params_sharded);
	cr_assert_eq(pl.optim, ZN_TIER_NVME);
	cr_assert_eq(pl.grads, ZN_TIER_HOST);
	cr_assert_eq(pl.params, ZN_TIER_DEVICE);
	zn_plan_placement(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, &pl);
	cr_assert_eq(pl.params, ZN_TIER_NVME);
	cr_assert_eq(pl.optim, ZN_TIER_HOST);
}

/* ---- the engine's plan ---------------------------------------------------------------- */

/* m and v as stored: the ZeRO formulas with 12 bytes of optimizer state per parameter
 * become 8 (bf16) and 4 + 2 x (1 + 4/256) (int8) */
Test(plan, optimizer_states_change_the_optimizer_bytes_per_parameter)
{
	uint64_t P = 64000000000ull, N = 64; /* P / N a multiple of 256 */
	struct zn_estimate_input in = { .params = P, .largest_layer = P / 100, .ranks = 64,
					.ranks_per_node = 8, .stage = 3,
					.offload_optimizer = ZN_OFFLOAD_NVME,
					.offload_param = ZN_OFFLOAD_CPU, .prefetch_depth = 1,
					.buffer_count = 4, .mixed_precision = true };
	struct zn_state_bytes b;
	struct zn_estimate e;

	zn_plan_state_bytes(true, ZN_STATES_FP32, &b);
	cr_assert_float_eq(b.optim, 12.0, 1e-12);
	zn_plan_state_bytes(true, ZN_STATES_BF16, &b);
	cr_assert_float_eq(b.optim, 8.0, 1e-12);
	zn_plan_state_bytes(true, ZN_STATES_INT8, &b);
	cr_assert_float_eq(b.optim, 4.0 + 2 * (1.0 + 4.0 / 256), 1e-12);
	zn_plan_state_bytes(false, ZN_STATES_INT8, &b);
	cr_assert_float_eq(b.optim, 2 * (1.0 + 4.0 / 256), 1e-12, "fp32: the params are the master");
	cr_assert_eq(zn_plan_estimate(&in, &e), 0);
	cr_assert_eq(e.nvme_bytes, 12 * P / N);
	in.states = ZN_STATES_BF16;
	cr_assert_eq(zn_plan_estimate(&in, &e), 0);
	cr_assert_eq(e.nvme_bytes, 8 * P / N);
	in.states = ZN_STATES_INT8;
	cr_assert_eq(zn_plan_estimate(&in, &e), 0);
	cr_assert_eq(e.nvme_bytes, 4 * P / N + 2 * (P / N + P / N / 256 * 4));
}

static const uint64_t eng_layers[] = { 300000, 120000, 120000, 5000 };

static struct zn_engine_plan_input eng_in(int stage, enum zn_offload_device opt,
					  enum zn_offload_device prm, bool bf16, int world)
{
	return (struct zn_engine_plan_input){ .layer_count = 4, .layer_numel = eng_layers,
					      .world = world, .stage = stage,
					      .offload_optimizer = opt, .offload_param = prm,
					      .bf16 = bf16, .grad_accum = 1, .prefetch_depth = 1,
					      .activation_bytes = 1 << 20 };
}

Test(plan, engine_stage0_fp32_is_16_bytes_per_param_plus_acts)
{
	struct zn_engine_plan_input in = eng_in(0, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NONE, false, 1);
	struct zn_engine_plan p;
	uint64_t padded = 0;

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	for (int l = 0; l < 4; l++) {
		struct zn_shard s;

		zn_plan_shard(eng_layers[l], 1, 0, &s);
		padded += s.padded_numel;
	}
	cr_assert(p.master_aliases_params, "fp32 parameters on the device are the master");
	cr_assert(!p.gathers);
	cr_assert_eq(p.dev_param_bytes, 4 * padded);
	cr_assert_eq(p.dev_grad_bytes, 4 * padded);
	cr_assert_eq(p.dev_optim_bytes, 8 * padded);
	cr_assert_eq(p.device_bytes, 16 * padded + (1 << 20));
	cr_assert_eq(p.host_bytes, 0);
}

Test(plan, engine_stage3_offload_keeps_only_the_working_set_on_device)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU, true, 4);
	struct zn_engine_plan p;
	struct zn_shard s0, s1;

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	zn_plan_shard(eng_layers[0], 4, 0, &s0);
	zn_plan_shard(eng_layers[1], 4, 0, &s1);
	cr_assert_eq(p.dev_param_bytes + p.dev_grad_bytes + p.dev_optim_bytes, 0);
	cr_assert_eq(p.param_slots, 2, "prefetch 1 + the layer computing");
	cr_assert_eq(p.slot_numel, s1.padded_numel);
	/* fp32 + bf16 working copies of layer 0 and two ring slots, full-gradient buffers */
	cr_assert_eq(p.dev_working_bytes, 6 * s0.padded_numel + 2 * 6 * s1.padded_numel +
					      4 * s0.padded_numel + 2 * 4 * s1.padded_numel);
	cr_assert(!p.master_aliases_params, "bf16 parameters need an fp32 master");
	cr_assert(p.host_param_bytes > 0 && p.host_optim_bytes > 0 && p.host_grad_bytes > 0);
	cr_assert_eq(p.host_staging_bytes, 0, "AdamW writes the host parameter shard itself");
}

Test(plan, engine_refuses_with_the_budget_and_the_shortfall)
{
	struct zn_engine_plan_input in = eng_in(0, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NONE, false, 1);
	struct zn_engine_plan p;
	char msg[512];
	int rc;

	rc = zn_plan_engine_fit(&in, true, 4 << 20, 0, &p, msg, sizeof(msg));
	cr_assert_eq(rc, -ENOMEM);
	cr_assert(strstr(msg, "device budget 4.00 MiB is short by"), "%s", msg);
	cr_assert(strstr(msg, "--zero-stage 3 --offload-optimizer cpu --offload-param cpu"),
		  "%s", msg);
	in = eng_in(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU, false, 1);
	cr_assert_eq(zn_plan_engine_fit(&in, true, 16 << 20, 0, &p, msg, sizeof(msg)), 0);
	cr_assert_eq(zn_plan_engine_fit(&in, true, 16 << 20, 4096, &p, msg, sizeof(msg)),
		     -ENOMEM);
	cr_assert(strstr(msg, "pinned host budget"), "%s", msg);
}

Test(plan, engine_shrinks_an_automatic_prefetch_to_fit)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_CPU, false, 1);
	struct zn_engine_plan deep, p;
	char msg[512];

	in.prefetch_depth = 2;
	cr_assert_eq(zn_plan_engine(&in, &deep), 0);
	cr_assert_eq(zn_plan_engine_fit(&in, true, deep.device_bytes - 1, 0, &p, msg,
					sizeof(msg)), 0);
	cr_assert(p.prefetch_depth < 2 && p.device_bytes < deep.device_bytes);
	cr_assert_eq(zn_plan_engine_fit(&in, false, deep.device_bytes - 1, 0, &p, msg,
					sizeof(msg)), -ENOMEM, "an explicit depth is kept");
}

Test(plan, engine_rejects_what_it_cannot_run)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_NONE, ZN_OFFLOAD_CPU, false, 1);
	struct zn_engine_plan p;

	cr_assert_eq(zn_plan_engine(&in, &p), ZN_EUSAGE, "offload_param without the optimizer");
	in = eng_in(3, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NVME, false, 1);
	cr_assert_eq(zn_plan_engine(&in, &p), ZN_EUSAGE, "offload_param nvme alone");
	in = eng_in(0, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NONE, false, 1);
	cr_assert_eq(zn_plan_engine(&in, &p), ZN_EUSAGE, "offload needs stage >= 1");
}

Test(plan, engine_nvme_counts_extents_per_path_and_pinned_staging)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, true, 2);
	struct zn_engine_plan p;
	uint64_t shard_max = 0, opt = 0, prm = 0;

	in.swap_buffer_count = 1; /* at least two are used */
	in.optim_path_count = 2;
	in.param_path_count = 1;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	for (int l = 0; l < 4; l++) {
		struct zn_shard s;

		zn_plan_shard(eng_layers[l], 2, 0, &s);
		opt += 3 * s.shard_numel * 4;
		prm += s.shard_numel * 2;
		if (s.shard_numel > shard_max)
			shard_max = s.shard_numel;
	}
	cr_assert_eq(p.host_optim_bytes + p.host_param_bytes, 0, "nothing homed in host memory");
	cr_assert(p.host_grad_bytes > 0, "gradient shards still come to host memory");
	cr_assert_eq(p.nvme_optim_bytes, opt);
	cr_assert_eq(p.nvme_param_bytes, prm);
	cr_assert_eq(p.swap_buffers, 2);
	cr_assert_eq(p.fetch_buffers, p.param_slots + 1);
	/* hot layers: prefetch depth 1 + 1 = layers 1 and 2 keep their bf16 shard pinned
	 * (layer 0's is its fetch buffer) */
	cr_assert_eq(p.hot_layers, 2);
	/* staging: 2 buffers of one chunk each (master, m, v 12 B + the bf16 shard 2 B per
	 * element), the chunk the shards' 278528 / 2 = 139264 (below the largest, 151552):
	 * exactly the state; the ring's fetch buffers of the largest shard of layers 1 .. 3
	 * (61440), layer 0's of its own (151552); the hot layers' shards */
	cr_assert_eq(p.swap_chunk_numel, 139264);
	cr_assert_eq(zn_plan_swap_chunks(p.swap_chunk_numel, shard_max), 2);
	cr_assert_eq(zn_plan_swap_chunks(p.swap_chunk_numel, 61440), 1);
	cr_assert_eq(p.host_swap_bytes, 2 * (14 * 139264) + (uint64_t)p.param_slots * 2 * 61440 +
					 2 * shard_max + 2 * zn_plan_host_alloc_bytes(61440 * 2));
	cr_assert_eq(p.nvme_optim_path_bytes,
		     ((opt + ZN_PLAN_SWAP_STRIPE - 1) / ZN_PLAN_SWAP_STRIPE + 1) / 2 *
			     ZN_PLAN_SWAP_STRIPE);
	/* fp32 with both on nvme: the parameter extent is the master */
	in.bf16 = false;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert(p.master_aliases_params);
	cr_assert_eq(p.nvme_optim_bytes, opt / 3 * 2, "m and v only");
	cr_assert_eq(p.nvme_param_bytes, 2 * prm);
}

/* The optimizer staging is chunked (plan.h): a tied embedding 16 x a block no longer sizes
 * the staging buffers. Shards (world 1) of 1048576, 4 x 65536 and 4096 elements: the state
 * 12 x 1314816 B; chunks of floor(1314816 / 4 / 2048) x 2048 = 327680 elements, so 4
 * buffers stage 12 x 4 x 327680 B <= the state (sized to the embedding they were 4 x
 * 12 x 1048576 B, 3.2 x the state); the embedding is 4 chunks, a block 1. A layer of 100M
 * elements is cut at ZN_PLAN_SWAP_CHUNK_NUMEL. */
Test(plan, engine_nvme_staging_never_exceeds_the_state)
{
	static const uint64_t tied[] = { 1048576, 65536, 65536, 65536, 65536, 4096 };
	static const uint64_t big[] = { 100000000, 100000000, 2048 };
	struct zn_engine_plan_input in = eng_in(2, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NONE, false, 1);
	struct zn_engine_plan p;
	uint64_t staging, state = 12ull * 1314816;

	in.layer_count = 6;
	in.layer_numel = tied;
	in.swap_buffer_count = 4;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.swap_shard_numel, 1048576);
	cr_assert_eq(p.swap_chunk_numel, 327680);
	cr_assert_eq(zn_plan_swap_chunks(p.swap_chunk_numel, 1048576), 4);
	cr_assert_eq(zn_plan_swap_chunks(p.swap_chunk_numel, 65536), 1);
	staging = p.host_swap_bytes;
	cr_assert_eq(staging, 4ull * 3 * 327680 * 4);
	cr_assert_leq(staging, state, "staging %llu B for a state of %llu B",
		      (unsigned long long)staging, (unsigned long long)state);
	cr_assert_eq(p.nvme_optim_bytes, state, "the extents: the whole state");
	in.layer_count = 3;
	in.layer_numel = big;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.swap_chunk_numel, ZN_PLAN_SWAP_CHUNK_NUMEL);
	cr_assert_eq(zn_plan_swap_chunks(p.swap_chunk_numel, 100001792), 12, "ceil(100001792 / 8388608)");
	cr_assert_eq(p.host_swap_bytes, 4 * 12 * ZN_PLAN_SWAP_CHUNK_NUMEL);
}

/* NVMe bytes per step, worked by hand: shards (world 2) of 151552, 61440, 61440, 4096
 * elements (sum 278528); grad_accum 3. */
Test(plan, engine_nvme_bytes_per_step)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, true, 2);
	struct zn_engine_plan p;

	in.grad_accum = 3;
	/* bf16: reads 12 x 278528 + 2 x 3 x 2 x 4096 (layer 3; layers 0, 1 and 2 are hot:
	 * prefetch depth 1 + 1); writes 12 x 278528 + 2 x 278528 (the new bf16 shards) */
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.hot_layers, 2);
	cr_assert_eq(p.nvme_step_read_bytes, 3391488);
	cr_assert_eq(p.nvme_step_write_bytes, 3899392);
	/* fp32: the parameter extent is the master, fetched at 4 bytes, not written twice */
	in.bf16 = false;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.nvme_step_read_bytes, 3440640);
	cr_assert_eq(p.nvme_step_write_bytes, 3342336);
	/* no prefetch: layers 0 and 1 hot; layer 2's 2 x 3 x 61440 fp32 fetches read too */
	in.prefetch_depth = 0;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.hot_layers, 1);
	cr_assert_eq(p.nvme_step_read_bytes, 3440640 + 4 * 6 * 61440);
	in.prefetch_depth = 1;
	/* a pinned budget short of the hot layers' shards: fewer hot layers, then none */
	{
		struct zn_engine_plan q;
		char msg[512];
		uint64_t hot1 = zn_plan_host_alloc_bytes(61440 * 4);

		cr_assert_eq(zn_plan_engine(&in, &p), 0);
		cr_assert_eq(p.hot_layers, 2);
		cr_assert_eq(zn_plan_engine_fit(&in, false, 0, p.host_bytes - 1, &q, msg,
						sizeof(msg)), 0, "%s", msg);
		cr_assert_eq(q.hot_layers, 1);
		cr_assert_eq(q.host_bytes, p.host_bytes - hot1);
		cr_assert_eq(q.nvme_step_read_bytes, p.nvme_step_read_bytes + 4 * 6 * 61440);
		cr_assert_eq(zn_plan_engine_fit(&in, false, 0, p.host_bytes - hot1 - 1, &q, msg,
						sizeof(msg)), 0, "%s", msg);
		cr_assert_eq(q.hot_layers, 0);
		cr_assert_eq(zn_plan_engine_fit(&in, false, 0, p.host_bytes - 2 * hot1 - 1, &q,
						msg, sizeof(msg)), -ENOMEM);
	}
	/* optimizer only: master, m, v read and written once */
	in.offload_param = ZN_OFFLOAD_CPU;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.nvme_step_read_bytes, 3342336);
	cr_assert_eq(p.nvme_step_write_bytes, 3342336);
	/* nothing on nvme */
	in.offload_optimizer = ZN_OFFLOAD_CPU;
	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.nvme_step_read_bytes + p.nvme_step_write_bytes, 0);
}

/* compact m and v on every tier: the buffers, the extents, the staging sections and the
 * bytes each step moves; int8 reads and writes about half of fp32 state's, bf16 two thirds */
Test(plan, engine_optimizer_states_on_every_tier)
{
	struct zn_engine_plan_input in = eng_in(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_CPU, true, 1);
	struct zn_engine_plan p[3];
	struct zn_layer_buffers b;
	struct zn_shard s;

	for (int st = 0; st < 3; st++) {
		in.states = st;
		cr_assert_eq(zn_plan_engine(&in, &p[st]), 0);
	}
	zn_plan_shard(eng_layers[0], 1, 0, &s); /* 301056 elements: 1176 blocks */
	cr_assert_eq(p[2].swap_moment_bytes, zn_plan_host_alloc_bytes(301056 + 1176 * 4));
	cr_assert_eq(p[1].swap_moment_bytes, 2 * 301056);
	/* compact m and v are staged whole (one chunk per layer); fp32 in chunks */
	cr_assert_eq(p[2].swap_chunk_numel, p[2].swap_shard_numel);
	cr_assert_eq(p[1].swap_chunk_numel, p[1].swap_shard_numel);
	cr_assert_lt(p[0].swap_chunk_numel, p[0].swap_shard_numel);
	cr_assert_eq(p[0].swap_moment_bytes, zn_plan_host_alloc_bytes(4 * p[0].swap_chunk_numel));
	for (int st = 0; st < 3; st++) {
		uint64_t mv = 0, opt = 0;

		for (int l = 0; l < 4; l++) {
			zn_plan_shard(eng_layers[l], 1, 0, &s);
			mv += 2 * zn_plan_host_alloc_bytes(zn_plan_moment_bytes(st, s.shard_numel));
			opt += 4 * s.shard_numel;
		}
		cr_assert_eq(p[st].nvme_optim_bytes, opt + mv, "states %d", st);
		cr_assert_eq(p[st].nvme_step_read_bytes, opt + mv);
		cr_assert_eq(p[st].nvme_step_write_bytes, opt + mv);
	}
	cr_assert_leq((double)p[2].nvme_step_read_bytes / p[0].nvme_step_read_bytes, 0.51);
	cr_assert_leq((double)p[1].nvme_step_read_bytes / p[0].nvme_step_read_bytes, 0.67);
	/* the host tier and the device tier hold the same bytes as stored */
	in = eng_in(2, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NONE, true, 1);
	in.states = ZN_STATES_INT8;
	cr_assert_eq(zn_plan_engine(&in, &p[0]), 0);
	zn_plan_layer_buffers(&in, &p[0], 1, &b);
	zn_plan_shard(eng_layers[1], 1, 0, &s);
	cr_assert_eq(b.m_h, zn_plan_host_alloc_bytes(s.shard_numel + s.shard_numel / 256 * 4));
	cr_assert_eq(b.v_h, b.m_h);
	cr_assert_eq(b.master_h, zn_plan_host_alloc_bytes(s.shard_numel * 4));
	in = eng_in(0, ZN_OFFLOAD_NONE, ZN_OFFLOAD_NONE, false, 1);
	in.states = ZN_STATES_BF16;
	cr_assert_eq(zn_plan_engine(&in, &p[0]), 0);
	zn_plan_layer_buffers(&in, &p[0], 1, &b);
	cr_assert_eq(b.m_d, zn_plan_device_alloc_bytes(2 * s.padded_numel));
}

Test(plan, prefetch_depth_from_the_stage3_limits)
{
	struct zn_config c;

	zn_config_defaults(&c);
	c.zero.stage3_prefetch_bucket_size = 3000000;
	c.zero.stage3_max_live_parameters = 1000000000;
	cr_assert_eq(zn_plan_prefetch_depth(&c, 1000000, 10), 3);
	c.zero.stage3_max_live_parameters = 2500000;
	cr_assert_eq(zn_plan_prefetch_depth(&c, 1000000, 10), 1, "live = computing + 1");
	c.zero.stage3_prefetch_bucket_size = 100;
	cr_assert_eq(zn_plan_prefetch_depth(&c, 1000000, 10), 1, "at least one ahead");
	c.runtime.prefetch_depth = 6;
	cr_assert_eq(zn_plan_prefetch_depth(&c, 1000000, 10), 6, "explicit wins");
}
