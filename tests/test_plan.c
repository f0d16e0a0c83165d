/* Planner: shard bounds and the ZeRO model-state formulas. */
#include <criterion/criterion.h>

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

	zn_plan_gpt_params(12, 768, 50257, 1024, &p, &largest);
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
