/* The whole GPT-2 on host memory with zn_kernels_cpu, driven layer by layer through the same
 * per-layer functions the engine uses: the reference for the engine's tests and the model
 * behind the safetensors load/save. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt2/gpt2.h"

void zn_gpt2_host_destroy(struct zn_gpt2_host *m)
{
	if (!m)
		return;
	for (int l = 0; l < m->layer_count; l++) {
		if (m->params)
			free(m->params[l]);
		if (m->grads)
			free(m->grads[l]);
	}
	free(m->params);
	free(m->grads);
	zn_layer_descs_free(m->layers, zn_gpt2_layer_count(&m->cfg));
	free(m);
}

static float **alloc_buffers(const struct zn_layer_desc *layers, int n)
{
	float **b = calloc((size_t)n, sizeof(*b));

	if (!b)
		return NULL;
	for (int l = 0; l < n; l++) {
		b[l] = calloc(layers[l].numel, sizeof(float));
		if (!b[l]) {
			for (int j = 0; j < l; j++)
				free(b[j]);
			free(b);
			return NULL;
		}
	}
	return b;
}

int zn_gpt2_host_create(struct zn_gpt2_host **out, const struct zn_gpt2_config *cfg,
			bool with_grads)
{
	struct zn_gpt2_host *m;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	rc = zn_gpt2_config_validate(&m->cfg);
	if (rc)
		goto destroy;
	rc = -ENOMEM;
	m->layers = calloc((size_t)zn_gpt2_layer_count(&m->cfg), sizeof(*m->layers));
	if (!m->layers)
		goto destroy;
	rc = zn_gpt2_layers(&m->cfg, m->layers);
	if (rc)
		goto destroy;
	rc = -ENOMEM;
	m->params = alloc_buffers(m->layers, zn_gpt2_layer_count(&m->cfg));
	if (!m->params)
		goto destroy;
	/* layer_count set only now: destroy frees per-layer buffers up to it */
	m->layer_count = zn_gpt2_layer_count(&m->cfg);
	if (with_grads) {
		m->grads = alloc_buffers(m->layers, m->layer_count);
		if (!m->grads)
			goto destroy;
	}
	*out = m;
	return 0;
destroy:
	if (rc == -ENOMEM)
		zn_error("zn_gpt2_host_create: out of memory for %llu parameters",
			 (unsigned long long)zn_gpt2_param_numel(&m->cfg));
	zn_gpt2_host_destroy(m);
	return rc;
}

void zn_gpt2_host_init(struct zn_gpt2_host *m, uint64_t seed)
{
	for (int l = 0; l < m->layer_count; l++)
		zn_gpt2_init_layer(&m->cfg, &m->layers[l], m->params[l], seed);
}

void zn_gpt2_host_zero_grads(struct zn_gpt2_host *m)
{
	if (!m->grads)
		return;
	for (int l = 0; l < m->layer_count; l++)
		memset(m->grads[l], 0, m->layers[l].numel * sizeof(float));
}

/* Working buffers of one forward/backward: x[l] is layer l's output (l = 0 .. L), one acts
 * buffer per layer, one scratch shared by all. */
struct host_bufs {
	float **x;
	float **acts;
	float *scratch;
	uint64_t scratch_numel;
	float *losses;
	float *dx_a, *dx_b;
};

static void host_bufs_free(struct host_bufs *b, int n)
{
	for (int l = 0; l < n; l++) {
		if (b->x)
			free(b->x[l]);
		if (b->acts)
			free(b->acts[l]);
	}
	free(b->x);
	free(b->acts);
	free(b->scratch);
	free(b->losses);
	free(b->dx_a);
	free(b->dx_b);
}

static int host_bufs_alloc(struct host_bufs *b, const struct zn_gpt2_host *m, int B, int T)
{
	const int n = m->layer_count;
	const size_t btc = (size_t)B * (size_t)T * (size_t)m->cfg.d_model;

	memset(b, 0, sizeof(*b));
	b->x = calloc((size_t)n, sizeof(*b->x));
	b->acts = calloc((size_t)n, sizeof(*b->acts));
	b->losses = calloc((size_t)B * (size_t)T, sizeof(float));
	b->dx_a = calloc(btc, sizeof(float));
	b->dx_b = calloc(btc, sizeof(float));
	if (!b->x || !b->acts || !b->losses || !b->dx_a || !b->dx_b)
		return -ENOMEM;
	for (int l = 0; l < n; l++) {
		const struct zn_layer_desc *L = &m->layers[l];
		uint64_t s = zn_gpt2_scratch_numel(&m->cfg, L, B, T);

		/* +1: calloc(0) may return NULL; every buffer is non-NULL */
		b->acts[l] = calloc(zn_gpt2_act_numel(&m->cfg, L, B, T) + 1, sizeof(float));
		b->x[l] = l < n - 1 ? calloc(btc, sizeof(float)) : NULL;
		if (!b->acts[l] || (l < n - 1 && !b->x[l]))
			return -ENOMEM;
		if (s > b->scratch_numel)
			b->scratch_numel = s;
	}
	b->scratch = calloc(b->scratch_numel + 1, sizeof(float));
	return b->scratch ? 0 : -ENOMEM;
}

static int check_tokens(const char *what, const int *tok, size_t n, int vocab)
{
	for (size_t i = 0; i < n; i++) {
		if (tok[i] < 0 || tok[i] >= vocab) {
			zn_error("zn_gpt2_host_forward_backward: %s[%zu] = %d is outside the "
				 "vocabulary [0, %d)", what, i, tok[i], vocab);
			return -EINVAL;
		}
	}
	return 0;
}

static void host_forward(struct zn_gpt2_host *m, struct host_bufs *b, const int *tokens,
			 const int *targets, int B, int T)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	const int n = m->layer_count;

	zn_gpt2_layer_forward(k, NULL, &m->cfg, &m->layers[0], m->params[0], NULL, b->acts[0],
			      b->scratch, NULL, b->x[0], tokens, NULL, NULL, B, T);
	for (int l = 1; l < n - 1; l++)
		zn_gpt2_layer_forward(k, NULL, &m->cfg, &m->layers[l], m->params[l], NULL,
				      b->acts[l], b->scratch, b->x[l - 1], b->x[l], tokens, NULL,
				      NULL, B, T);
	zn_gpt2_layer_forward(k, NULL, &m->cfg, &m->layers[n - 1], m->params[n - 1],
			      m->params[0], b->acts[n - 1], b->scratch, b->x[n - 2], NULL, tokens,
			      targets, b->losses, B, T);
}

static void host_backward(struct zn_gpt2_host *m, struct host_bufs *b, const int *tokens,
			  const int *targets, int B, int T)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	const int n = m->layer_count;
	const float scale = 1.0f / ((float)B * (float)T);
	const size_t scratch_bytes = b->scratch_numel * sizeof(float);
	float *dx_out = b->dx_a, *dx_in = b->dx_b, *tmp;

	/* the contract: scratch is zero on entry to every backward */
	memset(b->scratch, 0, scratch_bytes);
	zn_gpt2_layer_backward(k, NULL, &m->cfg, &m->layers[n - 1], m->params[n - 1],
			       m->params[0], m->grads[n - 1], m->grads[0], b->acts[n - 1],
			       b->scratch, b->x[n - 2], NULL, dx_out, tokens, targets, scale, B, T);
	for (int l = n - 2; l >= 1; l--) {
		memset(b->scratch, 0, scratch_bytes);
		zn_gpt2_layer_backward(k, NULL, &m->cfg, &m->layers[l], m->params[l], NULL,
				       m->grads[l], NULL, b->acts[l], b->scratch, b->x[l - 1],
				       dx_out, dx_in, tokens, targets, scale, B, T);
		tmp = dx_out;
		dx_out = dx_in;
		dx_in = tmp;
	}
	zn_gpt2_layer_backward(k, NULL, &m->cfg, &m->layers[0], m->params[0], NULL, m->grads[0],
			       NULL, NULL, NULL, NULL, dx_out, NULL, tokens, targets, scale, B, T);
}

int zn_gpt2_host_forward_backward(struct zn_gpt2_host *m, const int *tokens_h,
				  const int *targets_h, int B, int T, bool backward,
				  float *mean_loss)
{
	struct host_bufs b;
	size_t bt = (size_t)B * (size_t)T;
	double sum = 0.0;
	int rc;

	if (B <= 0 || T <= 0 || T > m->cfg.seq) {
		zn_error("zn_gpt2_host_forward_backward: B %d, T %d: need B >= 1 and 1 <= T <= "
			 "seq %d", B, T, m->cfg.seq);
		return -EINVAL;
	}
	if (backward && !m->grads) {
		zn_error("zn_gpt2_host_forward_backward: backward asked of a model created "
			 "without gradients");
		return -EINVAL;
	}
	rc = check_tokens("tokens", tokens_h, bt, m->cfg.vocab);
	if (!rc)
		rc = check_tokens("targets", targets_h, bt, m->cfg.vocab);
	if (rc)
		return rc;
	rc = host_bufs_alloc(&b, m, B, T);
	if (rc) {
		zn_error("zn_gpt2_host_forward_backward: out of memory for B %d x T %d", B, T);
		goto free_bufs;
	}
	host_forward(m, &b, tokens_h, targets_h, B, T);
	for (size_t i = 0; i < bt; i++)
		sum += b.losses[i];
	*mean_loss = (float)(sum / (double)bt);
	if (backward)
		host_backward(m, &b, tokens_h, targets_h, B, T);
free_bufs:
	host_bufs_free(&b, m->layer_count);
	return rc;
}
