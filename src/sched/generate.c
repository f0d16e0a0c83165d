/* zinc generate's forward with a KV cache (generate.h): buffers, loading, the layer loop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "cpu/topo.h"
#include "sched/generate_impl.h"

static int dalloc(struct zn_gen *g, void **p, uint64_t bytes, const char *what)
{
	int rc;

	if (!bytes)
		return 0;
	rc = zn_device_alloc(g->dev, p, bytes);
	if (rc)
		zn_error("zinc generate: %s (%llu bytes) does not fit on the device: lower "
			 "--max-seq / the prompt, raise --device-mem, or stream the layers with "
			 "--offload-param cpu|nvme", what, (unsigned long long)bytes);
	return rc;
}

static int check_opts(const struct zn_model *m, const struct zn_gen_opts *o)
{
	const struct zn_model_ops *ops = m->ops;
	int lim;

	if (!ops->decode || !ops->decode_kv_numel || !ops->decode_scratch_numel ||
	    !ops->decode_max_t) {
		zn_error("zinc generate: the %s family has no decode (KV cache) ops", ops->family);
		return -EINVAL;
	}
	lim = ops->decode_max_t(m->config);
	if (o->max_t < 1 || o->max_t > lim) {
		zn_error("zinc generate: prompt + --max-new-tokens is %d positions; the model "
			 "takes at most %d (its position limit): shorten the prompt or lower "
			 "--max-new-tokens", o->max_t, lim);
		return -EINVAL;
	}
	if (o->max_chunk < 1 || o->max_chunk > o->max_t) {
		zn_error("zinc generate: chunk of %d tokens outside 1 .. %d", o->max_chunk, o->max_t);
		return -EINVAL;
	}
	if (o->home == ZN_GEN_NVME && (!o->nvme_path || !*o->nvme_path)) {
		zn_error("zinc generate: --offload-param nvme needs --nvme-path DIR");
		return -EINVAL;
	}
	if (!o->init_layer) {
		zn_error("zinc generate: no weights to load");
		return -EINVAL;
	}
	if (o->lora && (o->lora->base.ops != ops || o->lora->base.config != m->config ||
			!o->lora->lay || o->lora->dropout != 0 || !o->init_adapter)) {
		zn_error("zinc generate: the adapters must be prepared on this model, with "
			 "dropout 0 and a loader");
		return -EINVAL;
	}
	return 0;
}

/* the extra scratch of layer l's adapters for chunks of up to T tokens (0: none) */
static uint64_t lora_extra(const struct zn_gen *g, int l, int T)
{
	if (!g->o.lora || !g->o.lora->lay[l].count)
		return 0;
	return zn_lora_scratch_extra(g->o.lora, &g->ad[l], 1, T, false);
}

static int make_layers(struct zn_gen *g)
{
	const struct zn_model_ops *ops = g->m.ops;
	uint64_t scratch = 0;
	int rc = 0;
	uint64_t avail = zn_mem_available_bytes(),
		 per_layer = sizeof(*g->L) + 3 * sizeof(float *) + sizeof(*g->ad);

	g->n = ops->layer_count(g->m.config);
	g->width = ops->width(g->m.config);
	g->vocab = ops->vocab(g->m.config);
	/* the layers' descriptors are host memory in proportion to the layer count: a count
	 * the machine cannot hold is refused before they are allocated */
	if (avail && zn_size_mul((uint64_t)g->n, per_layer) > avail) {
		zn_error("zinc generate: %d layers need %.2f GiB of host memory for their "
			 "descriptors; %.2f GiB is available", g->n,
			 (double)zn_size_mul((uint64_t)g->n, per_layer) / (1 << 30),
			 (double)avail / (1 << 30));
		return ZN_EUSAGE;
	}
	g->L = zn_size_calloc((uint64_t)g->n, sizeof(*g->L), "the layer descriptors");
	g->params_d = zn_size_calloc((uint64_t)g->n, sizeof(float *), "the layers' pointers");
	g->kv_d = zn_size_calloc((uint64_t)g->n, sizeof(float *), "the KV caches' pointers");
	g->adapters_d = zn_size_calloc((uint64_t)g->n, sizeof(float *), "the adapters' pointers");
	g->ad = zn_size_calloc((uint64_t)g->n, sizeof(*g->ad), "the adapter descriptors");
	if (!g->L || !g->params_d || !g->kv_d || !g->adapters_d || !g->ad)
		return -ENOMEM;
	for (int l = 0; l < g->n && !rc; l++) {
		rc = ops->describe(g->m.config, l, &g->L[l]);
		if (!rc && g->L[l].tied_layer > 0) {
			zn_error("zinc generate: layer %d is tied to layer %d; only ties to layer 0 "
				 "are supported", l, g->L[l].tied_layer);
			rc = -EINVAL;
		}
		if (!rc && g->L[l].frozen_numel) {
			zn_error("zinc generate: layer %d has frozen parameters (a LoRA model): merge "
				 "the adapters first", l);
			rc = -EINVAL;
		}
		if (!rc && g->o.lora)
			rc = zn_lora_describe(g->o.lora, l, &g->ad[l]);
		if (!rc) {
			/* the adapters' scratch follows the base's (zn_lora_decode) */
			uint64_t s = ops->decode_scratch_numel(g->m.config, &g->L[l], g->o.max_chunk) +
				     lora_extra(g, l, g->o.max_chunk);

			scratch = s > scratch ? s : scratch;
		}
	}
	for (int l = 0; l < g->n && !rc; l++) {
		uint64_t kv = ops->decode_kv_numel(g->m.config, &g->L[l], g->o.max_t);

		rc = dalloc(g, (void **)&g->kv_d[l], zn_size_mul(kv, sizeof(float)), "a KV cache");
	}
	if (!rc)
		rc = dalloc(g, (void **)&g->scratch_d, zn_size_mul(scratch, sizeof(float)),
			    "scratch");
	return rc;
}

static int make_io(struct zn_gen *g)
{
	const uint64_t x = zn_size_mul(zn_size_mul((uint64_t)g->o.max_chunk, (uint64_t)g->width),
				       sizeof(float));
	const uint64_t ints = (uint64_t)g->o.max_chunk * sizeof(int);
	int rc = 0;

	rc = dalloc(g, (void **)&g->x_d[0], x, "activations");
	if (!rc)
		rc = dalloc(g, (void **)&g->x_d[1], x, "activations");
	if (!rc)
		rc = dalloc(g, (void **)&g->logits_d,
			    zn_size_mul(zn_size_mul((uint64_t)g->o.max_chunk, (uint64_t)g->vocab),
					sizeof(float)), "logits");
	if (!rc)
		rc = dalloc(g, (void **)&g->tokens_d, ints, "tokens");
	if (!rc)
		rc = dalloc(g, (void **)&g->pos_d, ints, "positions");
	if (!rc)
		rc = zn_device_host_alloc(g->dev, (void **)&g->tokens_h, ints);
	if (!rc)
		rc = zn_device_host_alloc(g->dev, (void **)&g->pos_h, ints);
	return rc;
}

/* layer 0 (the embeddings; a tied head reads them again): read on the host, copied to
 * the device for the run */
static int load_layer0(struct zn_gen *g)
{
	uint64_t b = zn_size_mul(g->L[0].numel, sizeof(float));
	float *h = zn_size_alloc(b, "layer 0's parameters on the host");
	int rc;

	if (!h)
		return -ENOMEM;
	rc = dalloc(g, (void **)&g->params_d[0], b, "layer 0's parameters");
	if (!rc)
		rc = g->o.init_layer(g->o.init_ctx, 0, &g->L[0], h);
	if (!rc)
		rc = zn_memcpy_async(g->copy, g->params_d[0], h, b, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(g->copy);
	free(h);
	return rc;
}

/* the adapters (o.lora): read on the host one layer at a time, kept on the device */
static int load_adapters(struct zn_gen *g)
{
	int rc = 0;

	for (int l = 0; g->o.lora && l < g->n && !rc; l++) {
		uint64_t b = g->ad[l].numel * sizeof(float);
		float *h;

		if (!g->o.lora->lay[l].count)
			continue;
		h = malloc(b);
		if (!h)
			return -ENOMEM;
		rc = dalloc(g, (void **)&g->adapters_d[l], b, "the adapters");
		if (!rc)
			rc = g->o.init_adapter(g->o.adapter_ctx, l, &g->ad[l], h);
		if (!rc)
			rc = zn_memcpy_async(g->copy, g->adapters_d[l], h, b, ZN_COPY_H2D);
		if (!rc)
			rc = zn_stream_synchronize(g->copy);
		free(h);
	}
	return rc;
}

int zn_gen_create(struct zn_gen **out, const struct zn_model *m, const struct zn_gen_opts *o)
{
	struct zn_device_config dc = { .kind = o->device, .budget_bytes = o->device_mem };
	struct zn_gen *g;
	int rc;

	*out = NULL;
	rc = check_opts(m, o);
	if (rc)
		return rc;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->m = *m;
	g->o = *o;
	rc = zn_device_create(&g->dev, &dc);
	if (!rc)
		rc = zn_stream_create(g->dev, &g->compute);
	if (!rc)
		rc = zn_stream_create(g->dev, &g->copy);
	if (!rc)
		rc = make_layers(g);
	if (!rc)
		rc = make_io(g);
	if (!rc)
		rc = load_layer0(g);
	if (!rc)
		rc = load_adapters(g);
	if (!rc)
		rc = zn_gen_fz_create(g);
	if (rc) {
		zn_gen_destroy(g);
		return rc;
	}
	*out = g;
	return 0;
}

void zn_gen_destroy(struct zn_gen *g)
{
	if (!g)
		return;
	if (g->compute)
		(void)zn_stream_synchronize(g->compute);
	if (g->copy)
		(void)zn_stream_synchronize(g->copy);
	zn_gen_fz_destroy(g);
	for (int l = 0; l < g->n; l++) {
		if (g->params_d)
			zn_device_free(g->dev, g->params_d[l]);
		if (g->kv_d)
			zn_device_free(g->dev, g->kv_d[l]);
		if (g->adapters_d)
			zn_device_free(g->dev, g->adapters_d[l]);
	}
	zn_device_free(g->dev, g->x_d[0]);
	zn_device_free(g->dev, g->x_d[1]);
	zn_device_free(g->dev, g->scratch_d);
	zn_device_free(g->dev, g->logits_d);
	zn_device_free(g->dev, g->tokens_d);
	zn_device_free(g->dev, g->pos_d);
	if (g->dev) {
		zn_device_host_free(g->dev, g->tokens_h);
		zn_device_host_free(g->dev, g->pos_h);
	}
	zn_stream_destroy(g->compute);
	zn_stream_destroy(g->copy);
	zn_device_destroy(g->dev);
	zn_layer_descs_free(g->L, g->n);
	free(g->params_d);
	free(g->kv_d);
	free(g->adapters_d);
	zn_layer_descs_free(g->ad, g->n);
	free(g);
}

struct launch {
	const struct zn_model_ops *ops;
	const void *config;
	struct zn_decode_io io;
	/* with adapters on this layer: */
	const struct zn_lora_config *lora;
	const struct zn_layer_desc *ad;
	const float *adapters;
	float *extra;
};

static void run_layer(void *ctx, void *native, const struct zn_kernel_table *k)
{
	const struct launch *a = ctx;

	if (a->lora)
		zn_lora_decode(k, native, a->lora, &a->io, a->ad, a->adapters, a->extra);
	else
		a->ops->decode(k, native, a->config, &a->io);
}

static int layer(struct zn_gen *g, int l, int T, int n_logits)
{
	struct launch a = { g->m.ops, g->m.config, { 0 }, NULL, NULL, NULL, NULL };
	const float *p = NULL;
	int rc;

	rc = zn_gen_fz_acquire(g, l, &p);
	if (rc)
		return rc;
	a.io.L = &g->L[l];
	a.io.params = p;
	a.io.tied_params = g->L[l].tied_layer == 0 ? g->params_d[0] : NULL;
	a.io.kv = g->kv_d[l];
	a.io.max_t = g->o.max_t;
	a.io.scratch = g->scratch_d;
	a.io.x_in = l ? g->x_d[(l - 1) % 2] : NULL;
	a.io.x_out = l < g->n - 1 ? g->x_d[l % 2] : NULL;
	a.io.tokens = g->tokens_d;
	a.io.pos = g->pos_d;
	a.io.logits = l == g->n - 1 ? g->logits_d : NULL;
	a.io.n_logits = n_logits;
	a.io.pos0 = g->pos;
	a.io.T = T;
	/* a sparse layer streamed from cpu or nvme: only its routed experts come up */
	a.io.experts = zn_gen_fz_experts(g, l);
	if (g->adapters_d && g->adapters_d[l]) {
		a.lora = g->o.lora;
		a.ad = &g->ad[l];
		a.adapters = g->adapters_d[l];
		a.extra = g->scratch_d + g->m.ops->decode_scratch_numel(g->m.config, &g->L[l], T);
	}
	rc = zn_launch(g->compute, run_layer, &a, sizeof(a));
	if (!rc)
		rc = zn_gen_fz_release(g, l);
	return rc;
}

int zn_gen_forward(struct zn_gen *g, const int *tokens, int T, int n_logits, float *logits_h)
{
	int rc = 0;

	if (T < 1 || T > g->o.max_chunk || g->pos + T > g->o.max_t || n_logits < 1 ||
	    n_logits > T) {
		zn_error("zinc generate: %d tokens at position %d (chunk %d, cache %d, logits %d)",
			 T, g->pos, g->o.max_chunk, g->o.max_t, n_logits);
		return -EINVAL;
	}
	for (int t = 0; t < T; t++) {
		if (tokens[t] < 0 || tokens[t] >= g->vocab) {
			zn_error("zinc generate: token %d at %d is outside the model's vocabulary "
				 "(0 .. %d): the tokenizer does not match the model", tokens[t],
				 g->pos + t, g->vocab - 1);
			return -EINVAL;
		}
		g->tokens_h[t] = tokens[t];
		g->pos_h[t] = g->pos + t;
	}
	rc = zn_memcpy_async(g->compute, g->tokens_d, g->tokens_h, (uint64_t)T * sizeof(int),
			     ZN_COPY_H2D);
	if (!rc)
		rc = zn_memcpy_async(g->compute, g->pos_d, g->pos_h, (uint64_t)T * sizeof(int),
				     ZN_COPY_H2D);
	if (!rc)
		rc = zn_gen_fz_begin(g);
	for (int l = 0; l < g->n && !rc; l++)
		rc = layer(g, l, T, n_logits);
	if (!rc)
		rc = zn_memcpy_async(g->compute, logits_h, g->logits_d,
				     (uint64_t)n_logits * (uint64_t)g->vocab * sizeof(float),
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_stream_synchronize(g->compute);
	if (!rc) /* an expert's fetch that failed during a layer (logged) */
		rc = zn_gen_fz_error(g);
	if (!rc)
		g->pos += T;
	return rc;
}

int zn_gen_pos(const struct zn_gen *g) { return g->pos; }
void zn_gen_reset(struct zn_gen *g) { g->pos = 0; }
int zn_gen_vocab(const struct zn_gen *g) { return g->vocab; }

void zn_gen_stats(struct zn_gen *g, struct zn_gen_stats *s)
{
	*s = (struct zn_gen_stats){ 0 };
	s->device_bytes = zn_device_used_bytes(g->dev);
	s->streamed_bytes = g->streamed_bytes;
	s->nvme_read_bytes = zn_gen_fz_read_bytes(g);
	zn_gen_fz_expert_stats(g, s); /* adds the experts' to both */
	s->prefetch_depth = g->o.home == ZN_GEN_DEVICE ? 0 : zn_gen_fz_depth(g);
	s->device_name = zn_device_name(g->dev);
}
