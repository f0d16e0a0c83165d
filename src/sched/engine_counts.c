/* The counts a run asks for, checked before anything scales with them, and the model's
 * layers read in two passes (engine.c calls both; the CLI calls zn_engine_check_counts
 * before its own per-layer work).
 *
 * zn_engine_check_counts refuses, in constant memory, what zinc cannot represent or this
 * machine cannot hold: the step's tokens per rank (micro-batch x seq x accumulation) must
 * fit the int the kernels and the data loader count them in, and the host bookkeeping that
 * grows with the counts (each layer's descriptor and state, the step's tokens staged on the
 * host, per micro-batch events) must fit the memory the kernel says is available. Pass one
 * (zn_engine_layer_sizes) then describes each layer into one scratch descriptor and keeps
 * only what the plan needs, two numbers per layer and the activation sums; the full
 * descriptors (a few KiB per layer) are read in pass two (zn_engine_layer_descs), after
 * the plan fits the budgets. Sizes go through core/size.h, so none wraps. Also the model's
 * own checks (its ops and config) and the warning for budgets beyond the machine.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/size.h"
#include "cpu/topo.h"
#include "sched/engine_impl.h"

/* Host bytes per micro-batch for its events (3: start, forward end, backward end; a cuda
 * event handle or a host event, rounded up) */
#define EVENT_HOST_BYTES 256
/* The step's tokens as int32 on the host: the loader's inputs, targets and positions,
 * and the engine's staged tokens, targets, positions and losses */
#define TOKEN_COPIES 7

uint64_t zn_engine_layer_host_bytes(void)
{
	/* the descriptor twice (the engine's, a checkpoint loader's), the layer's tier state,
	 * its sizes (numel, frozen numel), activation pointers and schedule entries */
	return 2 * sizeof(struct zn_layer_desc) + sizeof(struct zn_layer) + 8 * sizeof(uint64_t) +
	       4 * sizeof(struct zn_use);
}

static double gib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

int zn_engine_check_counts(const struct zn_config *cfg, const struct zn_model *model,
			   int seq_len)
{
	uint64_t B = cfg->train_micro_batch_size_per_gpu > 0 ?
			     (uint64_t)cfg->train_micro_batch_size_per_gpu : 1;
	uint64_t G = cfg->gradient_accumulation_steps > 0 ?
			     (uint64_t)cfg->gradient_accumulation_steps : 1;
	uint64_t T = seq_len > 0 ? (uint64_t)seq_len : 1, tokens, n, layers_b, tokens_b, events_b;
	uint64_t heap, avail;

	n = (uint64_t)model->ops->layer_count(model->config);
	tokens = zn_size_mul(zn_size_mul(B, T), G);
	if (tokens > INT_MAX) {
		zn_error("train_micro_batch_size_per_gpu (--micro-batch) %llu x seq %llu x "
			 "gradient_accumulation_steps (--grad-accum) %llu = %.0f tokens per rank "
			 "and step: at most %d (zinc counts a step's tokens in an int); lower one "
			 "of them", (unsigned long long)B, (unsigned long long)T,
			 (unsigned long long)G, (double)B * (double)T * (double)G, INT_MAX);
		return ZN_EUSAGE;
	}
	layers_b = zn_size_mul(n, zn_engine_layer_host_bytes());
	tokens_b = zn_size_mul(tokens, TOKEN_COPIES * sizeof(int));
	events_b = zn_size_mul(3 * G, EVENT_HOST_BYTES);
	heap = zn_size_add(zn_size_add(layers_b, tokens_b), events_b);
	avail = zn_mem_available_bytes();
	if (avail && heap > avail) {
		zn_error("host memory: %.2f GiB is available but the run's bookkeeping needs %.2f "
			 "GiB: %llu layers x %llu bytes (descriptors, state) %.2f GiB, the step's "
			 "tokens (micro-batch %llu x seq %llu x grad-accum %llu, %d int32 copies) "
			 "%.2f GiB, %llu micro-batches' events %.2f GiB; lower the largest",
			 gib(avail), gib(heap), (unsigned long long)n,
			 (unsigned long long)zn_engine_layer_host_bytes(), gib(layers_b),
			 (unsigned long long)B, (unsigned long long)T, (unsigned long long)G,
			 TOKEN_COPIES, gib(tokens_b), (unsigned long long)G, gib(events_b));
		return ZN_EUSAGE;
	}
	return 0;
}

/* The model through its ops (model.h): its config validated and its layer count; the
 * layers themselves are read in two passes (engine_counts.c). */
int zn_engine_check_model(struct zn_engine *e, const struct zn_model *model)
{
	const struct zn_model_ops *ops = model ? model->ops : NULL;
	int rc;

	if (!ops || !model->config || !ops->validate || !ops->layer_count || !ops->describe ||
	    !ops->max_seq || !ops->vocab || !ops->width || !ops->act_numel ||
	    !ops->scratch_numel || !ops->init || !ops->forward || !ops->backward) {
		zn_error("zn_engine_create: the model has no configuration or lacks a required "
			 "op (model.h: every op but load_layer and save is required)");
		return -EINVAL;
	}
	e->model = *model;
	rc = ops->validate(model->config);
	if (rc)
		return rc;
	e->n = ops->layer_count(model->config);
	if (e->n < 2) {
		zn_error("model %s has %d layers: the engine needs at least 2 (input, output)",
			 ops->family, e->n);
		return -EINVAL;
	}
	return 0;
}

/* A budget beyond what the machine has is allowed (the plan may need less) but said. */
void zn_engine_warn_budgets(const struct zn_engine *e, uint64_t dev_budget,
			    uint64_t pinned_budget)
{
	uint64_t total = zn_mem_total_bytes();
	bool host_dev = zn_device_kind_of(e->rt.dev) == ZN_DEVICE_HOST;

	if (!total)
		return;
	if (e->cfg.runtime.pinned_mem_bytes && pinned_budget > total)
		zn_warn("--pinned-mem %.2f GiB is more than this machine's memory (%.2f GiB "
			"MemTotal): a plan that needs it fails when the memory runs out",
			gib(pinned_budget), gib(total));
	if (host_dev && e->cfg.runtime.device_mem_bytes && dev_budget > total)
		zn_warn("--device-mem %.2f GiB is more than this machine's memory (%.2f GiB "
			"MemTotal), which the host device allocates from: a plan that needs it "
			"fails when the memory runs out", gib(dev_budget), gib(total));
}

/* Layer l's sizes from d into e (pass one and two alike). */
static void add_sizes(struct zn_engine *e, int l, const struct zn_layer_desc *d)
{
	const struct zn_model_ops *o = e->model.ops;
	uint64_t a = zn_size_mul((e->compute16 ? o->act_numel_bf16 : o->act_numel)(
					 e->model.config, d, e->B, e->T), 4);
	uint64_t sc = zn_size_mul((e->compute16 ? o->scratch_numel_bf16 : o->scratch_numel)(
					  e->model.config, d, e->B, e->T), 4);

	e->numel[l] = d->numel;
	e->frozen_numel[l] = d->frozen_numel;
	/* layer-major runs a tied last layer's backward again (lmajor.h) */
	if (d->tied_layer == 0 && l == e->n - 1)
		e->act.lm.tied = true;
	else if (d->tied_layer == 0)
		e->act.lm.tie_other = true;
	if (l > 0 && a > e->act_sums.acts_max)
		e->act_sums.acts_max = a;
	if (sc > e->act_sums.scratch_max)
		e->act_sums.scratch_max = sc;
	e->act_sums.all_acts = zn_size_add(e->act_sums.all_acts, zn_plan_device_alloc_bytes(a));
}

static int check_layer(const struct zn_engine *e, int l, const struct zn_layer_desc *d)
{
	const struct zn_model_ops *ops = e->model.ops;
	struct zn_optim_span sp[ZN_OPTIM_MAX_SPANS];

	/* layer 0 is the one kept for the whole step (prefetch, reduce) */
	if (d->tied_layer != -1 && (d->tied_layer != 0 || l == 0)) {
		zn_error("model %s: layer %d ties to layer %d: the engine supports ties to layer 0 "
			 "only", ops->family, l, d->tied_layer);
		return -EINVAL;
	}
	if (zn_optim_spans(d, 0, d->numel, sp) < 0) {
		zn_error("model %s: layer %d's %d tensors change their weight-decay flag more "
			 "than %d times (the optimizer's spans, sched/optim.h): order the "
			 "tensors so those that decay are adjacent", ops->family, l,
			 d->tensor_count, ZN_OPTIM_MAX_SPANS - 1);
		return -EINVAL;
	}
	if (d->frozen_numel && !ops->init_frozen) {
		zn_error("model %s: layer %d has frozen parameters but the ops have no init_frozen "
			 "(model.h)", ops->family, l);
		return -EINVAL;
	}
	return 0;
}

int zn_engine_layer_sizes(struct zn_engine *e)
{
	struct zn_layer_desc *d;
	int rc = 0;

	e->numel = zn_size_calloc((uint64_t)e->n, sizeof(*e->numel), "the layers' sizes");
	e->frozen_numel = zn_size_calloc((uint64_t)e->n, sizeof(*e->frozen_numel),
					 "the layers' frozen sizes");
	d = zn_size_alloc(sizeof(*d), "a layer descriptor");
	if (!e->numel || !e->frozen_numel || !d) {
		free(d);
		return -ENOMEM;
	}
	e->act_sums = (struct zn_act_sums){ 0 };
	for (int l = 0; !rc && l < e->n; l++) {
		*d = (struct zn_layer_desc){ 0 };
		rc = e->model.ops->describe(e->model.config, l, d);
		d->work_bytes = e->work_bytes;
		if (!rc)
			rc = check_layer(e, l, d);
		if (!rc)
			add_sizes(e, l, d);
		zn_layer_desc_release(d);
	}
	free(d);
	return rc;
}

int zn_engine_layer_descs(struct zn_engine *e)
{
	int rc = 0;

	e->ld = zn_size_calloc((uint64_t)e->n, sizeof(*e->ld), "the layer descriptors");
	if (!e->ld)
		return -ENOMEM;
	for (int l = 0; !rc && l < e->n; l++) {
		rc = e->model.ops->describe(e->model.config, l, &e->ld[l]);
		e->ld[l].work_bytes = e->work_bytes;
		/* the plan was made from pass one: a family must describe a layer the same way
		 * twice */
		if (!rc && (e->ld[l].numel != e->numel[l] ||
			    e->ld[l].frozen_numel != e->frozen_numel[l])) {
			zn_error("model %s: layer %d described twice with different sizes",
				 e->model.ops->family, l);
			rc = -EINVAL;
		}
	}
	return rc;
}
