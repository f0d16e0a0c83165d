/* Activation checkpointing: runs, checkpoints and their homes (recompute.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/size.h"
#include "sched/engine_impl.h"

/* ---- shape: pure functions of the model, B, T and the choice ------------------------- */

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

static int shape_every(const struct zn_act_shape *s)
{
	int k = s->every;

	return k < 1 ? 1 : k > s->n - 1 ? s->n - 1 : k;
}

static int shape_runs(const struct zn_act_shape *s)
{
	int k = shape_every(s);

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
	int off = s->home == ZN_TIER_DEVICE ? 0 : shape_runs(s) - 1;

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
		int K = shape_every(s), R = shape_runs(s), runs_off;
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

/* engine shorthands */
static int every_of(const struct zn_engine *e)
{
	struct zn_act_shape s;

	zn_act_shape_of(e, &s);
	return shape_every(&s);
}

static int runs_of(const struct zn_engine *e)
{
	struct zn_act_shape s;

	zn_act_shape_of(e, &s);
	return shape_runs(&s);
}

static int bufs_of(const struct zn_engine *e)
{
	struct zn_act_shape s;

	zn_act_shape_of(e, &s);
	return shape_bufs(&s);
}

int zn_recompute_schedule(const struct zn_engine *e, struct zn_use *use)
{
	int n = e->n, k = 0, K = every_of(e), R = runs_of(e);
	bool on = e->cfg.act_ckpt.enabled;

#define ZN_USE(l, f, b)                                                                   \
	do {                                                                              \
		if (use)                                                                  \
			use[k] = (struct zn_use){ (l), (f), (b) };                        \
		k++;                                                                      \
	} while (0)
	for (int l = 1; l < n; l++)
		ZN_USE(l, true, false);
	for (int r = R - 1; r >= 0; r--) {
		int s = 1 + r * K, t = on && (r + 1) * K < n - 1 ? (r + 1) * K : n - 1;

		if (!on) {
			for (int l = n - 1; l >= 1; l--)
				ZN_USE(l, false, true);
			break;
		}
		/* the last run's buffers are the forward's; the others recompute first */
		for (int l = s; r < R - 1 && l < t; l++)
			ZN_USE(l, true, false);
		ZN_USE(t, r < R - 1, true);
		for (int l = t - 1; l >= s; l--)
			ZN_USE(l, false, true);
	}
#undef ZN_USE
	return k;
}

/* ---- the io of a layer ---------------------------------------------------------------- */

void zn_recompute_fwd_io(struct zn_engine *e, int l, bool recompute, struct zn_layer_io *io)
{
	struct zn_recompute *ck = &e->act.rec;
	int r, i, t;

	if (l == 0) {
		io->acts = NULL;
		io->x_in = NULL;
		io->x_out = zn_recompute_x(e, 0);
		return;
	}
	r = zn_recompute_run_of(e, l);
	i = l - zn_recompute_run_first(e, r);
	t = zn_recompute_run_last(e, r);
	io->acts = ck->run_acts_d[i];
	io->x_in = i == 0 ? zn_recompute_x(e, r) : ck->run_x_d[i - 1];
	if (l == e->n - 1)
		io->x_out = NULL;
	else if (l == t)
		io->x_out = recompute ? ck->sink_d : zn_recompute_x(e, r + 1);
	else
		io->x_out = ck->run_x_d[i];
}

void zn_recompute_bwd_io(struct zn_engine *e, int l, struct zn_layer_io *io)
{
	float *x_out = io->x_out;

	zn_recompute_fwd_io(e, l, true, io);
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
static int open_home(struct zn_engine *e)
{
	struct zn_recompute *ck = &e->act.rec;
	struct zn_home_config c = {
		.tier = ck->home, .count = ck->runs - 1, .buf_n = ck->buf_n,
		.item_bytes = ck->x_bytes, .dev = e->rt.dev, .arena = e->arena,
		.rank = e->rt.rank, .kind = ZN_SWAP_ACTIVATION, .paths = &e->cfg.act_ckpt.home,
		.run_id = e->cfg.runtime.run_id, .what = "acts", .aio = &e->cfg.aio,
		.name = ck_name, .ctx = ck,
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

int zn_recompute_create(struct zn_engine *e)
{
	struct zn_recompute *ck = &e->act.rec;
	int K = every_of(e), rc = 0;

	struct zn_act_shape sh;
	struct zn_act_bytes ab;

	zn_act_shape_of(e, &sh);
	zn_act_bytes_of(&sh, &ab);
	ck->on = true;
	ck->every = K;
	ck->runs = runs_of(e);
	ck->home = sh.home;
	ck->x_bytes = ab.x;
	ck->acts_bytes = ab.acts_max;
	ck->x_n = ck->home == ZN_TIER_DEVICE ? ck->runs : (ck->runs < 2 ? ck->runs : 2);
	ck->buf_n = bufs_of(e);
	ck->x_d = zn_size_calloc((uint64_t)ck->x_n, sizeof(*ck->x_d), "the checkpoint slots");
	ck->run_acts_d = zn_size_calloc((uint64_t)K, sizeof(*ck->run_acts_d),
					"a run's activation buffers");
	ck->run_x_d = zn_size_calloc((uint64_t)K, sizeof(*ck->run_x_d), "a run's outputs");
	if (!ck->x_d || !ck->run_acts_d || !ck->run_x_d)
		return -ENOMEM;
	for (int i = 0; !rc && i < ck->x_n; i++)
		rc = zn_tiers_dalloc(e->rt.dev, &ck->x_d[i], ck->x_bytes);
	for (int i = 0; !rc && i < K - 1; i++)
		rc = zn_tiers_dalloc(e->rt.dev, &ck->run_x_d[i], ck->x_bytes);
	if (!rc && ck->runs > 1)
		rc = zn_tiers_dalloc(e->rt.dev, &ck->sink_d, ck->x_bytes);
	for (int i = 0; !rc && i < K; i++)
		rc = zn_tiers_dalloc(e->rt.dev, &ck->run_acts_d[i], ck->acts_bytes);
	for (int i = 0; !rc && i < 2; i++) {
		rc = zn_event_create(e->rt.dev, &ck->made[i]);
		if (!rc)
			rc = zn_event_create(e->rt.dev, &ck->slot_free[i]);
	}
	if (!rc && ck->home != ZN_TIER_DEVICE)
		rc = open_home(e);
	if (!rc)
		zn_info("activation checkpointing: %d runs of %d layers, checkpoints on %s; "
			"activations %.1f MiB on the device (%.1f MiB without), %.1f MiB pinned, "
			"%.1f MiB nvme", ck->runs, K, zn_tier_name(ck->home),
			(double)ab.device / 1048576.0,
			(double)without_bytes(&sh) / 1048576.0,
			(double)e->plan.host_act_bytes / 1048576.0,
			(double)e->plan.nvme_act_bytes / 1048576.0);
	return rc;
}

void zn_recompute_destroy(struct zn_engine *e)
{
	struct zn_recompute *ck = &e->act.rec;

	if (!ck->on)
		return;
	zn_recompute_quiesce(e);
	for (int i = 0; ck->x_d && i < ck->x_n; i++)
		zn_device_free(e->rt.dev, ck->x_d[i]);
	for (int i = 0; ck->run_x_d && i < ck->every; i++)
		zn_device_free(e->rt.dev, ck->run_x_d[i]);
	for (int i = 0; ck->run_acts_d && i < ck->every; i++)
		zn_device_free(e->rt.dev, ck->run_acts_d[i]);
	zn_device_free(e->rt.dev, ck->sink_d);
	for (int i = 0; i < 2; i++) {
		zn_event_destroy(ck->made[i]);
		zn_event_destroy(ck->slot_free[i]);
	}
	free(ck->x_d);
	free(ck->run_x_d);
	free(ck->run_acts_d);
	zn_home_close(&ck->st);
	*ck = (struct zn_recompute){ 0 };
}

struct zn_aio *zn_engine_ckpt_aio(struct zn_engine *e)
{
	return zn_home_aio(e->act.lm.on ? &e->act.lm.st : &e->act.rec.st);
}
