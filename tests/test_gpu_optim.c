/* The kernel table's optimizer ops on CUDA against the CPU table, and the engine with its
 * optimizer on a CUDA device against the same run on the host device. Skips, with the
 * reason, when zinc is built without CUDA or no GPU is usable.
 *
 * adamw: master, m, v within rel 1e-6 (kc_close) after each of 3 steps, decay on and off,
 * sizes not multiples of 32. Both sides run the same IEEE operations in the same order
 * (adamw.h; the CUDA op uses __fmaf_rn etc. and the CPU's per-call scalars), so where the
 * CPU build has hardware FMA (FP_FAST_FMAF, e.g. -march=native on x86-64 with FMA) the
 * bf16 copy must be bit-exact; a CPU build without it computes a*b + c with two roundings
 * where CUDA fuses, so the fp32 master can differ in its last bit and its bf16 rounding by
 * one bf16 ulp: then 1 ulp is allowed.
 * grad_sumsq: both sum exact double products in double, in different orders: relative
 * difference <= N x 2^-53 (< 1e-9 here); bit-identical on the GPU across two calls; the
 * non-finite flag for inf and NaN; N = 0; guard bytes after the outputs and the scratch.
 * Engine: stage 0 (and stage 2 with clipping: the norm on the device) on cuda vs host;
 * the backends' matmuls sum in different orders, which Adam's normalisation of small
 * gradients turns into weight differences near lr x 1e-3: tolerance rel 1e-3.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "engine_common.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "optim_check.h"
#include "zinc.h"

#define RTOL_STATE 1e-6
#define RTOL_SUMSQ 1e-9

static const struct zn_kernel_table *cpu = &zn_kernels_cpu;

static void close_f32(const char *what, const float *d, const float *cpu_h, size_t n)
{
	float *g = malloc(n * sizeof(float));
	double *ref = malloc(n * sizeof(double));

	cr_assert(g && ref);
	down(g, d, n * sizeof(float), what);
	for (size_t i = 0; i < n; i++)
		ref[i] = cpu_h[i];
	cr_assert(kc_close(what, g, ref, n, RTOL_STATE), "%s: CUDA vs CPU", what);
	free(g);
	free(ref);
}

/* bf16 copies: exact with hardware FMA on the CPU side, else within 1 bf16 ulp */
static void close_bf16(const char *what, const uint16_t *d, const uint16_t *cpu_h, size_t n)
{
	uint16_t *g = malloc(n * sizeof(uint16_t));
#ifdef FP_FAST_FMAF
	const int ulps = 0;
#else
	const int ulps = 1;
#endif

	cr_assert(g);
	down(g, d, n * sizeof(uint16_t), what);
	for (size_t i = 0; i < n; i++) {
		/* same sign: the bit patterns are ordered like the values */
		int diff = abs((int)g[i] - (int)cpu_h[i]);

		cr_assert(diff <= ulps && (g[i] & 0x8000) == (cpu_h[i] & 0x8000),
			  "%s: element %zu of %zu: CUDA bf16 0x%04x, CPU 0x%04x (%d ulp allowed)",
			  what, i, n, g[i], cpu_h[i], ulps);
	}
	free(g);
}

static void check_adamw(float weight_decay, int32_t l2)
{
	static const size_t sizes[] = { 1, 33, 1000, 100003 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct oc_state h;
		size_t n = sizes[k];
		char what[96];

		oc_state_init(&h, n, 300 + k);
		float *master_d = up(h.master, n * 4), *m_d = up(h.m, n * 4);
		float *v_d = up(h.v, n * 4), *grad_d = up(h.grad, n * 4);
		uint16_t *out_d = up(h.out, n * 2);

		for (int64_t step = 1; step <= 3; step++) {
			struct zn_kernel_adamw hp = oc_hparams(step, weight_decay);

			hp.l2 = l2;
			gpu->adamw(st, master_d, m_d, v_d, out_d, grad_d, &hp, n);
			cpu->adamw(NULL, h.master, h.m, h.v, h.out, h.grad, &hp, n);
			snprintf(what, sizeof(what), "adamw n %zu step %lld wd %g l2 %d", n,
				 (long long)step, weight_decay, (int)l2);
			close_f32(what, master_d, h.master, n);
			close_f32(what, m_d, h.m, n);
			close_f32(what, v_d, h.v, n);
			close_bf16(what, out_d, h.out, n);
			/* a fresh gradient for the next step on both sides */
			oc_regrad(&h, 2000 * step + k);
			gt_free(grad_d);
			grad_d = up(h.grad, n * 4);
		}
		gt_free(master_d);
		gt_free(m_d);
		gt_free(v_d);
		gt_free(grad_d);
		gt_free(out_d);
		oc_state_free(&h);
	}
	close_gpu(st);
}

Test(gpu_optim, adamw_matches_cpu_with_decay) { check_adamw(0.1f, 0); }
Test(gpu_optim, adamw_matches_cpu_without_decay) { check_adamw(0.0f, 0); }
/* L2-regularised Adam (hp.l2): the decay in the gradient, on both tables alike */
Test(gpu_optim, l2_adam_matches_cpu) { check_adamw(0.1f, 1); }

/* adamw_states (bf16 and int8 moments): the CUDA op against the CPU table over 3 steps,
 * spans with and without decay that start inside blocks, a non-finite gradient element
 * (int8), a size ending inside a block. The moments as stored must be the CPU's bytes where the
 * CPU build has hardware FMA (the same operations, maps, midpoints and reciprocal). */
static void check_adamw_states(int32_t states)
{
	static const size_t sizes[] = { 1000, 100003 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k], cap = (n + 255) / 256 * 256;
		size_t mb = states == ZN_STATES_INT8 ? cap + cap / 256 * 4 : 2 * cap;
		struct zn_kernel_span sp[3] = { { 0, 77, 0.1f }, { 77, 300, 0.0f },
						{ 377, n - 377, 0.1f } };
		struct oc_state h;
		uint8_t *m = calloc(1, mb), *v = calloc(1, mb), *mg = malloc(mb);
		char what[96];

		cr_assert(m && v && mg);
		oc_state_init(&h, n, 700 + k);
		if (states == ZN_STATES_INT8) /* bitsandbytes' rule: the element is reset */
			h.grad[n / 2] = NAN;
		float *master_d = up(h.master, n * 4), *grad_d = up(h.grad, n * 4);
		void *m_d = up(m, mb), *v_d = up(v, mb);
		uint16_t *out_d = up(h.out, n * 2);
		struct zn_kernel_moments mc = { states, m, v, NULL, NULL };
		struct zn_kernel_moments md = { states, m_d, v_d, NULL, NULL };

		if (states == ZN_STATES_INT8) {
			mc.m_absmax = (float *)(m + cap);
			mc.v_absmax = (float *)(v + cap);
			md.m_absmax = (float *)((uint8_t *)m_d + cap);
			md.v_absmax = (float *)((uint8_t *)v_d + cap);
		}
		for (int64_t step = 1; step <= 3; step++) {
			struct zn_kernel_adamw hp = oc_hparams(step, 0.0f);

			gpu->adamw_states(st, master_d, &md, out_d, grad_d, &hp, sp, 3, n);
			cpu->adamw_states(NULL, h.master, &mc, h.out, h.grad, &hp, sp, 3, n);
			snprintf(what, sizeof(what), "adamw_states %d n %zu step %lld", (int)states,
				 n, (long long)step);
			close_f32(what, master_d, h.master, n);
			close_bf16(what, out_d, h.out, n);
#ifdef FP_FAST_FMAF
			down(mg, m_d, mb, what);
			cr_assert_eq(memcmp(mg, m, mb), 0, "%s: m differs from the CPU's", what);
			down(mg, v_d, mb, what);
			cr_assert_eq(memcmp(mg, v, mb), 0, "%s: v differs from the CPU's", what);
#endif
		}
		gt_free(master_d);
		gt_free(grad_d);
		gt_free(m_d);
		gt_free(v_d);
		gt_free(out_d);
		free(m);
		free(v);
		free(mg);
		oc_state_free(&h);
	}
	close_gpu(st);
}

Test(gpu_optim, adamw_states_bf16_matches_cpu) { check_adamw_states(ZN_STATES_BF16); }
Test(gpu_optim, adamw_states_int8_matches_cpu) { check_adamw_states(ZN_STATES_INT8); }

/* NULL bf16 output: master, m, v as before, nothing else written */
Test(gpu_optim, adamw_without_bf16_copy)
{
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	struct oc_state h;
	struct zn_kernel_adamw hp = oc_hparams(2, 0.1f);
	size_t n = 515;

	oc_state_init(&h, n, 9);
	float *master_d = up(h.master, n * 4), *m_d = up(h.m, n * 4);
	float *v_d = up(h.v, n * 4), *grad_d = up(h.grad, n * 4);

	gpu->adamw(st, master_d, m_d, v_d, NULL, grad_d, &hp, n);
	cpu->adamw(NULL, h.master, h.m, h.v, NULL, h.grad, &hp, n);
	close_f32("adamw no copy: master", master_d, h.master, n);
	close_f32("adamw no copy: m", m_d, h.m, n);
	close_f32("adamw no copy: v", v_d, h.v, n);
	gt_free(master_d);
	gt_free(m_d);
	gt_free(v_d);
	gt_free(grad_d);
	oc_state_free(&h);
	close_gpu(st);
}

struct sumsq_out {
	double sumsq;
	int32_t nonfinite;
};

static struct sumsq_out gpu_sumsq(const struct zn_kernel_table *gpu, void *st,
				  const float *grad_d, size_t n)
{
	struct sumsq_out o;
	double *sum_d = up(NULL, sizeof(double)), *work_d;
	int32_t *flag_d = up(NULL, sizeof(int32_t));
	double *work_h = malloc(ZN_KERNEL_SUMSQ_WORK_COUNT * sizeof(double));

	cr_assert(work_h);
	work_d = up(NULL, ZN_KERNEL_SUMSQ_WORK_COUNT * sizeof(double));
	gpu->grad_sumsq(st, sum_d, flag_d, work_d, grad_d, n);
	down(&o.sumsq, sum_d, sizeof(double), "grad_sumsq sum");
	down(&o.nonfinite, flag_d, sizeof(int32_t), "grad_sumsq flag");
	down(work_h, work_d, ZN_KERNEL_SUMSQ_WORK_COUNT * sizeof(double), "grad_sumsq work");
	gt_free(sum_d);
	gt_free(flag_d);
	gt_free(work_d);
	free(work_h);
	return o;
}

Test(gpu_optim, grad_sumsq_matches_cpu_and_is_deterministic)
{
	/* 0, tiny, one block, many blocks, more than the partials cap (512 x 2048) */
	static const size_t sizes[] = { 0, 1, 1000, 300001, 3000017 };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct kc_rng r = { 500 + k };
		size_t n = sizes[k];
		float *g = malloc((n ? n : 1) * sizeof(float));
		double want;
		int32_t want_bad;

		cr_assert(g);
		kc_fill(&r, g, n, -2.0f, 3.0f);
		float *g_d = up(g, n * sizeof(float));
		struct sumsq_out a = gpu_sumsq(gpu, st, g_d, n), b = gpu_sumsq(gpu, st, g_d, n);

		cpu->grad_sumsq(NULL, &want, &want_bad, NULL, g, n);
		cr_assert(a.nonfinite == 0 && want_bad == 0, "n %zu: finite data flagged", n);
		cr_assert(fabs(a.sumsq - want) <= RTOL_SUMSQ * want,
			  "n %zu: CUDA sumsq %.17g, CPU %.17g", n, a.sumsq, want);
		cr_assert(!memcmp(&a.sumsq, &b.sumsq, sizeof(double)),
			  "n %zu: two calls gave %.17g and %.17g", n, a.sumsq, b.sumsq);
		gt_free(g_d);
		free(g);
	}
	close_gpu(st);
}

Test(gpu_optim, grad_sumsq_flags_inf_and_nan)
{
	static const float specials[] = { INFINITY, -INFINITY, NAN };
	void *st;
	const struct zn_kernel_table *gpu = open_gpu(&st);
	size_t n = 70001;
	float *g = malloc(n * sizeof(float));

	cr_assert(g);
	for (size_t k = 0; k < 3; k++) {
		struct kc_rng r = { 600 + k };

		kc_fill(&r, g, n, -1.0f, 1.0f);
		g[n - 1 - 7 * k] = specials[k];
		float *g_d = up(g, n * sizeof(float));
		struct sumsq_out a = gpu_sumsq(gpu, st, g_d, n);

		cr_assert_eq(a.nonfinite, 1, "special %zu (%g) not flagged", k, specials[k]);
		gt_free(g_d);
	}
	free(g);
	close_gpu(st);
}

/* the engine's device optimizer on cuda (refused before these ops existed) vs host */
static void check_engine(int stage, float clip)
{
	char why[256];
	struct zn_config c;
	struct zn_gpt2_config mc;
	struct et_run host, gpu;
	char what[64];

	if (!zn_kernels_cuda_table())
		cr_skip_test("no CUDA GPU: zinc was built without CUDA");
	if (!gt_gpu_usable(why, sizeof(why)))
		cr_skip_test("%s", why);
	et_model(&mc);
	int *tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 7);

	cr_assert(tok);
	et_config(&c, stage, ZN_OFFLOAD_NONE, ET_B, 1);
	c.gradient_clipping = clip;
	cr_assert_eq(et_train(&host, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	c.runtime.device = ZN_DEVICE_CUDA;
	c.runtime.device_mem_bytes = 0; /* the GPU's free memory */
	cr_assert_eq(et_train(&gpu, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0,
		     "stage %d on cuda failed", stage);
	snprintf(what, sizeof(what), "stage %d clip %g cuda vs host", stage, clip);
	cr_assert(gpu.loss[ET_STEPS - 1] != gpu.loss[0], "%s: the weights did not move", what);
	cr_assert_eq(et_compare(what, &host, &gpu, 1e-3), 0, "%s differ", what);
	cr_assert(gpu.peak_bytes <= gpu.plan_bytes, "%s: device peak %llu > plan %llu", what,
		  (unsigned long long)gpu.peak_bytes, (unsigned long long)gpu.plan_bytes);
	et_run_free(&host);
	et_run_free(&gpu);
	free(tok);
}

Test(gpu_optim, engine_stage0_on_cuda_matches_host) { check_engine(0, 0.0f); }
Test(gpu_optim, engine_stage2_clipped_on_cuda_matches_host) { check_engine(2, 0.05f); }
