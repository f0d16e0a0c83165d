/* The plan's gradient homes and pinned reserve (docs/memory.md): with the optimizer on nvme
 * and nothing needing the gradients after their update, the pinned gradient bytes are the
 * ring's plus layer 0's whatever the layer count; accumulation, clipping (or fp16) and the
 * cpu optimizer hold every shard; the device optimizer keeps them on the device. The arena
 * reserves the plan's bytes plus ZN_PLAN_PINNED_MARGIN, never above the budget. (The homes'
 * results against cpu offload: tests/mpi/grads_homes.c.) */
#include <criterion/criterion.h>

#include "sched/plan.h"

#define LAYER 100000ull /* elements of every block */

static uint64_t numel[130];

static struct zn_engine_plan_input input(int layers, enum zn_offload_device opt, int gas,
					 bool norm_first, int world)
{
	numel[0] = 3 * LAYER; /* embeddings: the largest */
	for (int l = 1; l < layers; l++)
		numel[l] = LAYER;
	return (struct zn_engine_plan_input){
		.layer_count = layers, .layer_numel = numel, .world = world, .stage = 3,
		.offload_optimizer = opt, .offload_param = opt, .grad_accum = gas,
		.norm_first = norm_first, .prefetch_depth = 1, .swap_buffer_count = 2,
		.optim_path_count = 1, .param_path_count = 1,
	};
}

static uint64_t shard_bytes(uint64_t n, int world)
{
	struct zn_shard s;

	zn_plan_shard(n, world, 0, &s);
	return zn_plan_host_alloc_bytes(s.shard_numel * 4);
}

Test(grads, ring_bytes_do_not_grow_with_the_layers)
{
	for (int world = 1; world <= 2; world++) {
		struct zn_engine_plan_input a = input(10, ZN_OFFLOAD_NVME, 1, false, world);
		struct zn_engine_plan pa, pb;
		struct zn_engine_plan_input b = input(130, ZN_OFFLOAD_NVME, 1, false, world);

		cr_assert_eq(zn_plan_engine(&a, &pa), 0);
		cr_assert_eq(zn_plan_engine(&b, &pb), 0);
		cr_assert_eq(pa.grad_home, ZN_GRAD_PINNED_RING);
		cr_assert_eq(pa.grad_ring, ZN_PLAN_GRAD_RING);
		/* layer 0's own shard + the ring of the largest other shard */
		cr_assert_eq(pa.host_grad_bytes, shard_bytes(3 * LAYER, world) +
				 ZN_PLAN_GRAD_RING * shard_bytes(LAYER, world));
		cr_assert_eq(pb.host_grad_bytes, pa.host_grad_bytes, "%llu vs %llu",
			     (unsigned long long)pb.host_grad_bytes,
			     (unsigned long long)pa.host_grad_bytes);
		cr_assert_eq(pb.host_bytes - pb.host_grad_bytes, pa.host_bytes - pa.host_grad_bytes,
			     "nothing else pinned grows with the layers either");
	}
}

Test(grads, accumulation_clipping_and_cpu_hold_every_shard)
{
	struct zn_engine_plan_input in[3] = {
		input(10, ZN_OFFLOAD_NVME, 2, false, 1),
		input(10, ZN_OFFLOAD_NVME, 1, true, 1),
		input(10, ZN_OFFLOAD_CPU, 1, false, 1),
	};

	for (int i = 0; i < 3; i++) {
		struct zn_engine_plan p;
		uint64_t want = shard_bytes(3 * LAYER, 1) + 9 * shard_bytes(LAYER, 1);

		cr_assert_eq(zn_plan_engine(&in[i], &p), 0);
		cr_assert_eq(p.grad_home, ZN_GRAD_PINNED_HELD, "case %d", i);
		cr_assert_eq(p.grad_ring, 0);
		/* accumulation adds a receive shard per layer */
		cr_assert_eq(p.host_grad_bytes, i == 0 ? 2 * want : want, "case %d", i);
	}
}

Test(grads, device_optimizer_keeps_them_on_the_device)
{
	struct zn_engine_plan_input in = input(10, ZN_OFFLOAD_NONE, 1, false, 1);
	struct zn_engine_plan p;

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_eq(p.grad_home, ZN_GRAD_DEVICE);
	cr_assert_eq(p.host_grad_bytes, 0);
	cr_assert_str_eq(zn_plan_grad_home_name(p.grad_home), "device");
	cr_assert_str_eq(zn_plan_grad_home_name(ZN_GRAD_PINNED_RING), "pinned ring");
}

Test(grads, reserve_is_the_plan_and_the_margin_within_the_budget)
{
	struct zn_engine_plan_input in = input(10, ZN_OFFLOAD_NVME, 1, false, 1);
	struct zn_engine_plan p;

	cr_assert_eq(zn_plan_engine(&in, &p), 0);
	cr_assert_gt(p.host_bytes, 0);
	cr_assert_eq(zn_plan_pinned_reserve(&p, 0), p.host_bytes + ZN_PLAN_PINNED_MARGIN);
	cr_assert_eq(zn_plan_pinned_reserve(&p, 1ull << 40), p.host_bytes + ZN_PLAN_PINNED_MARGIN);
	cr_assert_eq(zn_plan_pinned_reserve(&p, p.host_bytes + 4096), p.host_bytes + 4096);
	cr_assert_eq(zn_plan_pinned_reserve(&p, p.host_bytes), p.host_bytes);
	p.host_bytes = 0;
	cr_assert_eq(zn_plan_pinned_reserve(&p, 0), 0, "no pinned bytes, no arena");
}
