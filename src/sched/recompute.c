/* Activation checkpointing: runs, checkpoints and their homes (recompute.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/size.h"
#include "sched/acts.h"
#include "sched/runtime.h"
#include "sched/tiers.h"

/* ---- shape: pure functions of the model, B, T and the choice ------------------------- */

int zn_act_shape_every(const struct zn_act_shape *s)
{
	int k = s->every;

	return k < 1 ? 1 : k > s->n - 1 ? s->n - 1 : k;
}

int zn_act_shape_runs(const struct zn_act_shape *s)
{
	int k = zn_act_shape_every(s);

	return (s->n - 1 + k - 1) / k;
}

/* Layer l's activation (or scratch) bytes: from s->ld, or described now. */
static uint64_t layer_bytes(const struct zn_act_shape *s, int l, bool scratch)
{
	const struct zn_model_ops *o = s->model.ops;
	uint64_t (*numel)(const void *, const struct zn_layer_desc *, int, int);
	struct zn_layer_desc d;
	uint64_t bytes;

	if (scratch)
		numel = s->compute16 ? o->scratch_numel_bf16 : o->scratch_numel;
	else
		numel = s->compute16 ? o->act_numel_bf16 : o->act_numel;
	if (s->ld)
		return zn_size_mul(numel(s->model.config, &s->ld[l], s->B, s->T), 4);
	/* a layer the family cannot describe was refused when the engine read it first */
	d = (struct zn_layer_desc){ 0 };
	if (o->describe(s->model.config, l, &d))
		return ZN_SIZE_OVERFLOW;
	d.work_bytes = s->work_bytes;
	bytes = zn_size_mul(numel(s->model.config, &d, s->B, s->T), 4);
	zn_layer_desc_release(&d);
	return bytes;
}

uint64_t zn_act_layer_bytes(const struct zn_act_shape *s, int l)
{
	return layer_bytes(s, l, false);
}

void zn_act_sums_of(const struct zn_act_shape *s, struct zn_act_sums *out)
{
	*out = (struct zn_act_sums){ 0 };
	for (int l = 0; l < s->n; l++) {
		uint64_t a = layer_bytes(s, l, false), sc = layer_bytes(s, l, true);

		if (l > 0 && a > out->acts_max)
			out->acts_max = a;
		if (sc > out->scratch_max)
			out->scratch_max = sc;
		out->all_acts = zn_size_add(out->all_acts, zn_plan_device_alloc_bytes(a));
	}
}

/* checkpoints on the host or nvme: 0 .. R-2 leave the device; pinned buffers for them */
static int shape_bufs(const struct zn_act_shape *s)
{
	int off = s->home == ZN_TIER_DEVICE ? 0 : zn_act_shape_runs(s) - 1;

	if (s->home == ZN_TIER_NVME && off > ZN_RECOMPUTE_STAGES)
		return ZN_RECOMPUTE_STAGES;
	return off;
}

void zn_act_bytes_of(const struct zn_act_shape *s, struct zn_act_bytes *out)
{
	uint64_t bt = (uint64_t)s->B * (uint64_t)s->T, smax, xa;
	struct zn_act_sums sums;

	*out = (struct zn_act_bytes){ 0 };
	if (s->sums)
		sums = *s->sums;
	else
		zn_act_sums_of(s, &sums);
	out->acts_max = sums.acts_max;
	out->all_acts = sums.all_acts;
	smax = sums.scratch_max;
	out->x = zn_size_mul(zn_size_mul(bt, (uint64_t)s->model.ops->width(s->model.config)), 4);
	xa = zn_plan_device_alloc_bytes(out->x);
	if (s->on) {
		int K = zn_act_shape_every(s), R = zn_act_shape_runs(s), runs_off;
		int xn = s->home == ZN_TIER_DEVICE ? R : (R < 2 ? R : 2);

		/* checkpoints (or two slots), K-1 outputs inside a run, the sink, K buffers */
		xn += K - 1 + (R > 1 ? 1 : 0);
		out->every = K;
		out->runs = R;
		out->device_acts = zn_size_add(zn_size_mul((uint64_t)xn, xa),
					       zn_size_mul((uint64_t)K,
							   zn_plan_device_alloc_bytes(out->acts_max)));
		runs_off = s->home == ZN_TIER_DEVICE ? 0 : R - 1;
		/* host: the checkpoints; nvme: their staging, and the extents */
		out->host = zn_size_mul((uint64_t)shape_bufs(s), zn_plan_host_alloc_bytes(out->x));
		out->nvme = s->home == ZN_TIER_NVME ?
			    zn_size_mul((uint64_t)runs_off, zn_plan_host_alloc_bytes(out->x)) : 0;
	} else {
		/* every layer's activations and outputs x[0 .. n-2] */
		out->device_acts = zn_size_add(out->all_acts, zn_size_mul((uint64_t)(s->n - 1), xa));
	}
	/* two dx buffers, scratch, tokens, targets (and positions), losses (and the auxiliary
	 * loss's buffer) */
	out->device_fixed = zn_size_add(zn_size_add(zn_size_mul(2, xa),
						     zn_plan_device_alloc_bytes(smax)),
					(s->pos ? 3 : 2) * zn_plan_device_alloc_bytes(bt * sizeof(int)) +
					zn_plan_device_alloc_bytes(bt * 4));
	if (s->model.ops->aux_floats && s->model.ops->aux_floats(s->model.config) > 0)
		out->device_fixed = zn_size_add(out->device_fixed, zn_plan_device_alloc_bytes(
			(uint64_t)(s->gas > 1 ? s->gas : 1) *
			(uint64_t)s->model.ops->aux_floats(s->model.config) * 4));
	out->device = zn_size_add(out->device_acts, out->device_fixed);
}

int zn_recompute_schedule(const struct zn_act_shape *s, struct zn_use *use)
{
	int n = s->n, k = 0, K = zn_act_shape_every(s), R = zn_act_shape_runs(s);
	bool on = s->on;

#define ZN_USE(l, f, b)                                                                   \
	do {                                                                              \
		if (use)                                                                  \
			use[k] = (struct zn_use){ (l), (f), (b) };                        \
		k++;                                                                      \
	} while (0)
	for (int l = 1; l < n; l++)
		ZN_USE(l, true, false);
	for (int r = R - 1; r >= 0; r--) {
		int f = 1 + r * K, t = on && (r + 1) * K < n - 1 ? (r + 1) * K : n - 1;

		if (!on) {
			for (int l = n - 1; l >= 1; l--)
				ZN_USE(l, false, true);
			break;
		}
		/* the last run's buffers are the forward's; the others recompute first */
		for (int l = f; r < R - 1 && l < t; l++)
			ZN_USE(l, true, false);
		ZN_USE(t, r < R - 1, true);
		for (int l = t - 1; l >= f; l--)
			ZN_USE(l, false, true);
	}
#undef ZN_USE
	return k;
}

/* ---- the io of a layer ---------------------------------------------------------------- */

void zn_recompute_fwd_io(struct zn_recompute *ck, int l, bool recompute, struct zn_layer_io *io)
{
	int r, i, t;

	if (l == 0) {
		io->acts = NULL;
		io->x_in = NULL;
		io->x_out = zn_recompute_x(ck, 0);
		return;
	}
	r = zn_recompute_run_of(ck, l);
	i = l - zn_recompute_run_first(ck, r);
	t = zn_recompute_run_last(ck, r);
	io->acts = ck->run_acts_d[i];
	io->x_in = i == 0 ? zn_recompute_x(ck, r) : ck->run_x_d[i - 1];
	if (l == ck->n - 1)
		io->x_out = NULL;
	else if (l == t)
		io->x_out = recompute ? ck->sink_d : zn_recompute_x(ck, r + 1);
	else
		io->x_out = ck->run_x_d[i];
}

void zn_recompute_bwd_io(struct zn_recompute *ck, int l, struct zn_layer_io *io)
{
	float *x_out = io->x_out;

	zn_recompute_fwd_io(ck, l, true, io);
	io->x_out = x_out;
}

/* ---- create and destroy ---------------------------------------------------------------- */

/* "activation checkpoint 3 (input of layer 4)" (ctx: the checkpointing's state) */
static void ck_name(const void *ctx, int c, char *out, size_t size)
{
	const struct zn_recompute *ck = ctx;

	snprintf(out, size, "activation checkpoint %d (input of layer %d)", c,
		 1 + c * ck->every);
}

/* checkpoints 0 .. R-2 in pinned buffers, or staged to their nvme extents */
static int open_home(struct zn_recompute *ck, const struct zn_acts_config *ac)
{
	struct zn_home_config c = {
		.tier = ck->home, .count = ck->runs - 1, .buf_n = ck->buf_n,
		.item_bytes = ck->x_bytes, .dev = ck->rt->dev, .arena = ac->arena,
		.rank = ck->rt->rank, .kind = ZN_SWAP_ACTIVATION, .paths = ac->ckpt_paths,
		.run_id = ac->run_id, .what = "acts", .aio = ac->aio, .name = ck_name, .ctx = ck,
	};

	return zn_home_open(&ck->st, &c);
}

static uint64_t without_bytes(const struct zn_act_shape *s)
{
	struct zn_act_shape off = *s;
	struct zn_act_bytes b;

	off.on = false;
	zn_act_bytes_of(&off, &b);
	return b.device;
}

/* the device buffers: checkpoints (or two slots), a run's outputs, the sink, a run's
 * activations; the copies down's event */
static int alloc_device(struct zn_recompute *ck)
{
	struct zn_device *dev = ck->rt->dev;
	int rc = 0;

	for (int i = 0; !rc && i < ck->x_n; i++)
		rc = zn_tiers_dalloc(dev, &ck->x_d[i], ck->x_bytes);
	for (int i = 0; !rc && i < ck->every - 1; i++)
		rc = zn_tiers_dalloc(dev, &ck->run_x_d[i], ck->x_bytes);
	if (!rc && ck->runs > 1)
		rc = zn_tiers_dalloc(dev, &ck->sink_d, ck->x_bytes);
	for (int i = 0; !rc && i < ck->every; i++)
		rc = zn_tiers_dalloc(dev, &ck->run_acts_d[i], ck->acts_bytes);
	if (!rc)
		rc = zn_event_create(dev, &ck->made);
	return rc;
}

int zn_recompute_create(struct zn_recompute *ck, const struct zn_acts_config *c,
			const struct zn_use *use)
{
	const struct zn_act_shape *sh = &c->shape;
	int K = zn_act_shape_every(sh), rc;
	struct zn_act_bytes ab;

	zn_act_bytes_of(sh, &ab);
	ck->rt = c->rt;
	ck->n = sh->n;
	ck->use = use;
	ck->on = true;
	ck->every = K;
	ck->runs = zn_act_shape_runs(sh);
	ck->home = sh->home;
	ck->x_bytes = ab.x;
	ck->acts_bytes = ab.acts_max;
	ck->x_n = ck->home == ZN_TIER_DEVICE ? ck->runs : (ck->runs < 2 ? ck->runs : 2);
	ck->buf_n = shape_bufs(sh);
	ck->x_d = zn_size_calloc((uint64_t)ck->x_n, sizeof(*ck->x_d), "the checkpoint slots");
	ck->run_acts_d = zn_size_calloc((uint64_t)K, sizeof(*ck->run_acts_d),
					"a run's activation buffers");
	ck->run_x_d = zn_size_calloc((uint64_t)K, sizeof(*ck->run_x_d), "a run's outputs");
	if (!ck->x_d || !ck->run_acts_d || !ck->run_x_d)
		return -ENOMEM;
	rc = alloc_device(ck);
	if (!rc && ck->home != ZN_TIER_DEVICE)
		rc = open_home(ck, c);
	if (!rc && ck->home != ZN_TIER_DEVICE)
		rc = zn_recompute_up_create(ck);
	if (!rc)
		zn_info("activation checkpointing: %d runs of %d layers, checkpoints on %s; "
			"activations %.1f MiB on the device (%.1f MiB without), %.1f MiB pinned, "
			"%.1f MiB nvme", ck->runs, K, zn_tier_name(ck->home),
			(double)ab.device / 1048576.0,
			(double)without_bytes(sh) / 1048576.0,
			(double)c->host_act_bytes / 1048576.0,
			(double)c->nvme_act_bytes / 1048576.0);
	return rc;
}

void zn_recompute_destroy(struct zn_recompute *ck)
{
	if (!ck->on)
		return;
	zn_recompute_quiesce(ck);
	for (int i = 0; ck->x_d && i < ck->x_n; i++)
		zn_device_free(ck->rt->dev, ck->x_d[i]);
	for (int i = 0; ck->run_x_d && i < ck->every; i++)
		zn_device_free(ck->rt->dev, ck->run_x_d[i]);
	for (int i = 0; ck->run_acts_d && i < ck->every; i++)
		zn_device_free(ck->rt->dev, ck->run_acts_d[i]);
	zn_device_free(ck->rt->dev, ck->sink_d);
	zn_event_destroy(ck->made);
	zn_ring_destroy(&ck->up);
	free(ck->x_d);
	free(ck->run_x_d);
	free(ck->run_acts_d);
	zn_home_close(&ck->st);
	*ck = (struct zn_recompute){ 0 };
}
