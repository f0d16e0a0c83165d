/* Device work the kernel table does not have yet (AdamW, a squared-norm reduction), as
 * zn_launch callbacks. Under the host device the callback runs on the stream's worker
 * thread and the "device" buffers are host memory, so the CPU tier's AdamW and norm do the
 * work in order with the stream's other work. Under cuda a callback may only enqueue
 * kernels, and there are none for these yet: zn_devops_supported says so and the engine
 * refuses a device-resident optimizer there (use offload_optimizer cpu).
 */
#include <errno.h>
#include <stdbool.h>

#include "core/log.h"
#include "cpu/adamw.h"
#include "sched/engine_impl.h"

struct adamw_job {
	struct zn_engine *e;
	int layer;
	float *master, *m, *v;
	const float *grad;
	void *out;
	float grad_scale;
};

struct sumsq_job {
	struct zn_engine *e;
	const float *grad;
	uint64_t n;
	double *out;
};

bool zn_devops_supported(const struct zn_engine *e)
{
	return zn_device_kind_of(e->dev) == ZN_DEVICE_HOST;
}

static void adamw_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct adamw_job *j = ctx;
	struct zn_layer *ly = &j->e->L[j->layer];
	double t0 = zn_engine_now_ms();
	int rc;

	rc = zn_adamw_layer_span(j->e, j->layer, ly->opt_off, ly->opt_count, j->grad_scale,
				 j->master, j->m, j->v, j->grad, j->out, j->e->pdt);
	/* a worker cannot return an error: keep the first one for the step to report */
	if (rc && !j->e->first_error)
		j->e->first_error = rc;
	atomic_fetch_add(&j->e->opt_ns, (uint64_t)((zn_engine_now_ms() - t0) * 1e6));
}

static void sumsq_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct sumsq_job *j = ctx;
	bool nonfinite = false;
	int rc = zn_grad_sumsq(j->grad, ZN_DTYPE_F32, (size_t)j->n, 0, j->out, &nonfinite);

	if (rc && !j->e->first_error)
		j->e->first_error = rc;
	if (nonfinite)
		*j->out = 1.0 / 0.0;
}

int zn_devops_adamw(struct zn_engine *e, struct zn_stream *s, int layer, float *master,
		    float *m, float *v, const float *grad, void *out, float grad_scale)
{
	struct adamw_job j = { e, layer, master, m, v, grad, out, grad_scale };

	if (!zn_devops_supported(e))
		return -ENOTSUP;
	return zn_launch(s, adamw_fn, &j, sizeof(j));
}

int zn_devops_sumsq(struct zn_engine *e, struct zn_stream *s, const float *grad, uint64_t n,
		    double *out)
{
	struct sumsq_job j = { e, grad, n, out };

	if (!zn_devops_supported(e))
		return -ENOTSUP;
	return zn_launch(s, sumsq_fn, &j, sizeof(j));
}
