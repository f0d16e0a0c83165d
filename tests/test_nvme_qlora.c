/* QLoRA (docs/qlora.md): LoRA on a base whose linear weights are quantized to NF4 at load
 * (zinc.quantize_base nf4, with and without double quant), with the base on the device, in
 * pinned host memory and in the frozen file on nvme, fp32 and bf16 compute, against a
 * reference: the same LoRA run on an unquantized base holding the dequantized values
 * (src/model/quant's host dequantization, itself checked against the float64 rules in
 * test_nf4). The device's dequantization is the kernel table's: the losses and adapters
 * must be the reference's bit for bit, the base read back must be the dequantized base,
 * and the nvme bytes per step are the 4-bit extents, as the plan counts them. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "model/lora/lora.h"
#include "model/quant/q4.h"
#include "nvme_test_util.h"
#include "sched/engine_impl.h"

#define QL_STEPS 3

struct qres {
	float loss[QL_STEPS];
	int n;
	uint64_t numel[8];
	float *w[8], *f[8];
	uint64_t nvme_read, plan_read, home_bytes;
};

static void qres_free(struct qres *r)
{
	for (int l = 0; l < r->n; l++) {
		free(r->w[l]);
		free(r->f[l]);
	}
	memset(r, 0, sizeof(*r));
}

struct deq {
	const struct zn_lora_config *lc;
	const struct zn_gpt2_config *mc;
	uint64_t seed;
	enum zn_dtype stored;
	bool nested;
};

/* the reference's base: the model's init, quantized and dequantized on the host */
static int dequantized(void *ctx, int layer, const struct zn_layer_desc *L, float *out)
{
	const struct deq *d = ctx;
	const struct zn_layer_desc *bd = &d->lc->lay[layer].base;
	struct zn_q4_layer q;
	void *x;
	int rc;

	(void)L;
	zn_gpt2_ops.init(d->mc, bd, 0, bd->numel, out, d->seed);
	rc = zn_q4_layout(&q, bd, bd->numel, d->stored, d->nested, NULL);
	if (rc)
		return rc;
	x = malloc(q.bytes);
	rc = zn_q4_pack(&q, x, out, d->stored);
	if (!rc)
		rc = zn_q4_unpack(&q, out, x, d->stored);
	free(x);
	return rc;
}

static void run(struct qres *r, enum zn_offload_device prm, bool bf16, bool quant, bool nested,
		const char *dir)
{
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct deq d;
	struct zn_config cfg;
	struct zn_model m;
	struct zn_engine *e;
	uint64_t bt = 2 * ET_B * ET_T;
	int *stream;

	et_model(&mc);
	mc.layers = 4;
	zn_gpt2_config_validate(&mc);
	stream = et_tokens(QL_STEPS * bt + 1, mc.vocab, 7);
	et_config(&cfg, prm == ZN_OFFLOAD_NONE ? 0 : 3, ZN_OFFLOAD_CPU, ET_B, 2);
	cfg.zero.offload_param.device = prm;
	cfg.precision.bf16 = bf16;
	cfg.runtime.prefetch_depth = 1;
	cfg.runtime.quantize_base = quant ? ZN_QUANTIZE_NF4 : ZN_QUANTIZE_NONE;
	cfg.runtime.double_quant = quant && nested;
	cfg.zero.offload_param.nvme_path_count = 1;
	snprintf(cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	lc.base = zn_gpt2_model(&mc);
	cr_assert_eq(zn_lora_add_targets(&lc, "c_attn,c_proj,c_fc"), 0);
	cr_assert_eq(zn_lora_prepare(&lc), 0);
	m = zn_lora_model(&lc);
	d = (struct deq){ &lc, &mc, cfg.runtime.seed, bf16 ? ZN_DTYPE_BF16 : ZN_DTYPE_F32, nested };
	if (!quant) {
		o.init_frozen = dequantized;
		o.init_ctx = &d;
	}
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	cr_assert_eq(e->plan.frozen_q4, quant);
	cr_assert_eq(zn_frozen_pinned_bytes(&e->fz), e->plan.host_frozen_bytes);
	r->home_bytes = e->plan.frozen_home_bytes;
	for (int s = 0; s < QL_STEPS; s++) {
		struct zn_step_stats st;

		cr_assert_eq(zn_engine_step(e, stream + s * bt, stream + s * bt + 1, &st), 0);
		r->loss[s] = st.loss;
		r->nvme_read = st.nvme_read_bytes;
		r->plan_read = st.plan_nvme_read_bytes;
	}
	r->n = zn_engine_layer_count(e);
	for (int l = 0; l < r->n; l++) {
		uint64_t fn = zn_engine_frozen_numel(e, l);
		float *want = malloc((fn + 1) * 4);

		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc((r->numel[l] + 1) * 4);
		r->f[l] = malloc((fn + 1) * 4);
		cr_assert_eq(zn_engine_read_layer(e, l, r->w[l]), 0);
		cr_assert_eq(zn_engine_read_frozen(e, l, r->f[l]), 0);
		/* the base read back is the dequantized base */
		cr_assert_eq(dequantized(&d, l, NULL, want), 0);
		cr_assert_eq(memcmp(want, r->f[l], fn * 4), 0, "layer %d's base", l);
		free(want);
	}
	zn_engine_destroy(e);
	zn_lora_release(&lc);
	free(stream);
}

static void same(const struct qres *a, const struct qres *b, const char *what)
{
	for (int s = 0; s < QL_STEPS; s++)
		cr_assert_eq(memcmp(&a->loss[s], &b->loss[s], 4), 0, "%s: step %d: %.9g vs %.9g",
			     what, s + 1, (double)a->loss[s], (double)b->loss[s]);
	for (int l = 0; l < a->n; l++)
		cr_assert_eq(memcmp(a->w[l], b->w[l], 4 * a->numel[l]), 0, "%s: layer %d", what, l);
}

static void check(enum zn_offload_device prm, bool bf16, bool nested)
{
	char dir[ZN_PATH_MAX];
	struct qres q = { 0 }, ref = { 0 };

	nvme_test_dir(dir, sizeof(dir));
	run(&q, prm, bf16, true, nested, dir);
	run(&ref, prm, bf16, false, nested, dir);
	same(&ref, &q, "NF4 base vs the dequantized base");
	cr_assert(q.home_bytes < ref.home_bytes);
	if (prm == ZN_OFFLOAD_NVME) {
		cr_assert(q.nvme_read > 0);
		cr_assert_eq(q.nvme_read, q.plan_read, "read %llu, plan %llu",
			     (unsigned long long)q.nvme_read, (unsigned long long)q.plan_read);
		cr_assert(q.nvme_read < ref.nvme_read);
	}
	qres_free(&q);
	qres_free(&ref);
	nvme_test_rmdir(dir);
}

Test(nvme_qlora, device_fp32) { check(ZN_OFFLOAD_NONE, false, false); }
Test(nvme_qlora, device_bf16_double_quant) { check(ZN_OFFLOAD_NONE, true, true); }
Test(nvme_qlora, host_fp32_double_quant) { check(ZN_OFFLOAD_CPU, false, true); }
Test(nvme_qlora, host_bf16) { check(ZN_OFFLOAD_CPU, true, false); }
Test(nvme_qlora, nvme_fp32) { check(ZN_OFFLOAD_NVME, false, false); }
Test(nvme_qlora, nvme_bf16_double_quant) { check(ZN_OFFLOAD_NVME, true, true); }

/* full fine-tuning with a quantized base is refused, naming the way to QLoRA */
Test(nvme_qlora, full_fine_tuning_is_refused, .init = cr_redirect_stderr)
{
	struct zn_gpt2_config mc;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config cfg;
	struct zn_engine *e = NULL;

	et_model(&mc);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, ET_B, 1);
	cfg.runtime.quantize_base = ZN_QUANTIZE_NF4;
	cr_assert_eq(zn_engine_create(&e, &cfg, et_gpt2(&mc), &o), -EINVAL);
	fflush(stderr);
	cr_assert_stderr_neq_str("");
}
