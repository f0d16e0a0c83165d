/* The plan of a prepared engine (engine_impl.h zn_engine_plan_once): the plan's input
 * from the configuration, the layers and the activations' bytes, fitted to the device and
 * pinned budgets. The engine (make_plan) and the schedule's choice (engine_schedule.c, which
 * plans each order it weighs) call it. */
#include <stdio.h>

#include "cpu/arena.h"
#include "sched/engine_impl.h"

void zn_act_shape_of(const struct zn_engine *e, struct zn_act_shape *s)
{
	enum zn_offload_device d = e->cfg.act_ckpt.home.device;

	*s = (struct zn_act_shape){ .model = e->model, .ld = e->ld, .sums = &e->act_sums,
				    .n = e->n, .B = e->B, .T = e->T, .work_bytes = e->work_bytes,
				    .gas = e->gas,
				    .compute16 = e->compute16,
				    .on = e->cfg.act_ckpt.enabled,
				    .every = e->cfg.act_ckpt.every,
				    .pos = e->cfg.runtime.packing == ZN_PACKING_DOCUMENTS,
				    .home = d == ZN_OFFLOAD_NVME ? ZN_TIER_NVME :
					    d == ZN_OFFLOAD_CPU ? ZN_TIER_HOST : ZN_TIER_DEVICE };
}

const struct zn_offload_config *zn_lmajor_nvme_paths(const struct zn_engine *e)
{
	const struct zn_config *c = &e->cfg;

	if (c->act_ckpt.home.nvme_path_count > 0)
		return &c->act_ckpt.home;
	if (c->zero.offload_optimizer.nvme_path_count > 0)
		return &c->zero.offload_optimizer;
	if (c->zero.offload_param.nvme_path_count > 0)
		return &c->zero.offload_param;
	return NULL;
}

static uint64_t padded_bytes(const struct zn_engine *e, int l)
{
	struct zn_shard s;

	zn_plan_shard(e->numel[l], e->rt.world, 0, &s);
	return s.padded_numel * 4;
}

void zn_engine_acts_config(struct zn_engine *e, struct zn_acts_config *c)
{
	*c = (struct zn_acts_config){
		.rt = &e->rt, .arena = e->arena,
		.norm_bytes = zn_devops_norm_bytes(&e->cfg, e->n),
		.ckpt_paths = &e->cfg.act_ckpt.home, .bnd_paths = zn_lmajor_nvme_paths(e),
		.aio = &e->cfg.aio, .run_id = e->cfg.runtime.run_id,
		.host_act_bytes = e->plan.host_act_bytes, .nvme_act_bytes = e->plan.nvme_act_bytes,
	};
	zn_act_shape_of(e, &c->shape);
	/* layer-major's tied head runs again: layer 0's and the last layer's gradients and
	 * the head's parameters as the compute reads them (bf16 compute: 16-bit) */
	if (e->act.lm.tied && e->gas >= 2) {
		c->tied_grad0_bytes = padded_bytes(e, 0);
		c->tied_grad_last_bytes = padded_bytes(e, e->n - 1);
		c->head_bytes = e->compute16 ? padded_bytes(e, e->n - 1) / 2 :
					       padded_bytes(e, e->n - 1);
	}
}

/* The plan for the prepared engine on e->rt.world ranks and a device of dev_budget bytes:
 * e->pin, e->plan and e->pinned_budget; -ENOMEM (msg says why) when a budget is short.
 * Logs nothing: the run (make_plan) and zn_engine_plan_memory say it their way. */
int zn_engine_plan_once(struct zn_engine *e, uint64_t dev_budget, char *msg, size_t msg_size)
{
	const struct zn_config *c = &e->cfg;
	struct zn_acts_config acts;
	uint64_t act_bytes, pinned_budget;
	struct zn_arena_config ac;
	bool auto_depth = c->runtime.prefetch_depth == 0;
	uint64_t slot = 0;
	int rc;

	zn_engine_acts_config(e, &acts);
	act_bytes = zn_acts_bytes(&acts, &e->act.lm);
	for (int l = 0; l < e->n; l++) {
		struct zn_shard s;

		zn_plan_shard(e->numel[l], e->rt.world, 0, &s);
		if (l > 0 && s.padded_numel > slot)
			slot = s.padded_numel;
	}
	e->pin = (struct zn_engine_plan_input){
		.layer_count = e->n, .layer_numel = e->numel, .world = e->rt.world,
		.stage = c->zero.stage, .offload_optimizer = c->zero.offload_optimizer.device,
		.offload_param = c->zero.offload_param.device, .bf16 = c->precision.bf16 || c->precision.fp16,
		.states = c->optimizer.states,
		.compute16 = e->compute16,
		.grad_accum = e->gas,
		.norm_first = c->gradient_clipping > 0 || c->precision.fp16,
		.prefetch_depth = zn_plan_prefetch_depth(c, slot, e->n),
		.activation_bytes = act_bytes,
		.activation_host_bytes = zn_acts_host_bytes(&acts, &e->act.lm),
		.activation_nvme_bytes = zn_acts_nvme_bytes(&acts, &e->act.lm),
		.activation_nvme_step_bytes = zn_acts_nvme_step_bytes(&acts, &e->act.lm),
		.swap_buffer_count = c->zero.offload_optimizer.buffer_count,
		.hot_cap = c->runtime.hot_layers < 0 ? 0 : c->runtime.hot_layers == 0 ? -1 :
			   c->runtime.hot_layers,
		.optim_path_count = c->zero.offload_optimizer.nvme_path_count,
		.param_path_count = c->zero.offload_param.nvme_path_count,
		.frozen_numel = e->frozen_numel,
		.frozen_read_buffers = c->runtime.frozen_read_buffers,
		.layer_major = e->act.lm.on,
		.head_again = e->act.lm.on && e->act.lm.tied && e->gas > 1,
	};
	zn_frozen_plan_input(&e->fz, &e->pin); /* the frozen base's sizes, 4-bit extents, experts */
	zn_arena_config_init(&ac, c);
	pinned_budget = c->runtime.pinned_mem_bytes ? c->runtime.pinned_mem_bytes :
						       zn_arena_default_bytes(&ac);
	e->pinned_budget = pinned_budget;
	rc = zn_plan_engine_fit(&e->pin, auto_depth, dev_budget, pinned_budget, &e->plan, msg,
				msg_size);
	e->pin.prefetch_depth = e->plan.prefetch_depth;
	return rc;
}

void zn_engine_memory_of(const struct zn_engine *e, uint64_t pinned_reserved,
			 struct zn_engine_memory *out)
{
	const struct zn_engine_plan *p = &e->plan;

	*out = (struct zn_engine_memory){
		.device_bytes = p->device_bytes,
		.pinned_plan_bytes = p->host_bytes,
		.pinned_reserved_bytes = pinned_reserved,
		.pinned_budget_bytes = e->pinned_budget,
		.grad_pinned_bytes = p->host_grad_bytes,
		.grad_home = zn_plan_grad_home_name(p->grad_home),
		.grad_ring = p->grad_home == ZN_GRAD_PINNED_RING && p->grad_ring > 0 ?
			     p->grad_ring : 0,
		.device_model_bytes = p->dev_param_bytes + p->dev_grad_bytes + p->dev_optim_bytes +
				      p->dev_frozen_bytes,
		.device_working_bytes = p->dev_working_bytes,
		.device_act_bytes = p->dev_act_bytes,
		.pinned_swap_bytes = p->host_swap_bytes,
		.nvme_bytes = p->nvme_optim_bytes + p->nvme_param_bytes + p->nvme_act_bytes +
			      p->nvme_frozen_bytes,
		.frozen_bytes = p->frozen_home_bytes,
		.prefetch_depth = p->prefetch_depth,
		.nvme_step_read_bytes = p->nvme_step_read_bytes,
		.expert_bytes = p->frozen_expert_bytes,
		.step_expert_bytes = p->frozen_step_expert_bytes,
	};
	snprintf(out->schedule, sizeof(out->schedule), "%s", e->sched_line);
}

void zn_engine_memory(const struct zn_engine *e, struct zn_engine_memory *out)
{
	zn_engine_memory_of(e, e->arena ? zn_arena_size(e->arena) : 0, out);
}
