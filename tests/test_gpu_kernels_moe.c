/* kernels/cuda's mixture-of-experts ops against kernels/cpu (itself checked against
 * float64 in test_moe.c): the whole block (src/model/moe) forward and backward through
 * each table from the same inputs: the routing (top-k choices, the grouping by expert)
 * exactly, outputs and gradients within 1e-4 (kc_close rtol), the load-balancing
 * statistics within 1e-5. Guard bytes after every device buffer; a non-default stream.
 * Skips, with the reason, without CUDA or a GPU. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "gpu_kernel_check.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "kernels_check.h"
#include "model/moe/moe.h"

Test(kernels_gpu_moe, block_matches_cpu)
{
	void *st;
	const struct zn_kernel_table *g = open_gpu(&st);
	const struct zn_kernel_table *c = &zn_kernels_cpu;
	struct zn_moe_dims d = { .N = 300, .C = 64, .E = 16, .K = 4, .I = 48, .norm = 1 };
	size_t NC = (size_t)d.N * d.C, nr = (size_t)d.E * d.C;
	size_t ngu = (size_t)d.E * 2 * d.I * d.C, ndn = (size_t)d.E * d.C * d.I;
	struct kc_rng rng = { 23 };
	float *h = gk_frand(&rng, NC, 1.0f), *rw = gk_frand(&rng, nr, 0.3f);
	float *gu = gk_frand(&rng, ngu, 0.2f), *dn = gk_frand(&rng, ndn, 0.2f);
	float *dout = gk_frand(&rng, NC, 1.0f), dprob[16];
	uint64_t ab = zn_moe_acts_bytes(&d), sb = zn_moe_scratch_bytes(&d);
	void *acts = aligned_alloc(256, ab), *scr = calloc(1, sb);
	float *out = calloc(NC, 4), *dh = calloc(NC, 4), *grw = calloc(nr, 4);
	float *ggu = calloc(ngu, 4), *gdn = calloc(ndn, 4), aux[32] = { 0 };
	int off_c[17], off_g[17];
	struct zn_moe_acts ac, ag;
	struct zn_moe_scratch sc, sg;

	for (int e = 0; e < d.E; e++)
		dprob[e] = 1e-3f * (float)(e + 1);
	zn_moe_acts_carve(&ac, acts, off_c, &d);
	zn_moe_scratch_carve(&sc, scr, &d);
	{
		struct zn_moe_weights W = { rw, gu, dn };
		struct zn_moe_grads G = { grw, ggu, gdn };

		zn_moe_forward(c, NULL, &d, &W, NULL, &ac, h, out, aux);
		zn_moe_backward(c, NULL, &d, &W, NULL, &G, &ac, &sc, h, dout, dprob, dh);
	}
	{
		float *h_d = up(h, NC * 4), *rw_d = up(rw, nr * 4), *gu_d = up(gu, ngu * 4);
		float *dn_d = up(dn, ndn * 4), *dout_d = up(dout, NC * 4);
		float *dprob_d = up(dprob, sizeof(dprob)), *out_d = up(NULL, NC * 4);
		float *zero = calloc(ngu > NC ? ngu : NC, 4);
		float *dh_d = up(zero, NC * 4), *grw_d = up(zero, nr * 4);
		float *ggu_d = up(zero, ngu * 4), *gdn_d = up(zero, ndn * 4);
		float *aux_d = up(zero, sizeof(aux));
		void *acts_d = up(NULL, ab), *scr_d = up(NULL, sb);
		char *sz = calloc(1, sb);
		int *sel = malloc((size_t)d.N * d.K * sizeof(int));
		const char *err = "";
		struct zn_moe_weights W = { rw_d, gu_d, dn_d };
		struct zn_moe_grads G = { grw_d, ggu_d, gdn_d };

		gt_free(scr_d);
		scr_d = up(sz, sb); /* the backward's scratch starts zero, as the engine's */
		zn_moe_acts_carve(&ag, acts_d, off_g, &d);
		zn_moe_scratch_carve(&sg, scr_d, &d);
		zn_moe_forward(g, st, &d, &W, NULL, &ag, h_d, out_d, aux_d);
		zn_moe_backward(g, st, &d, &W, NULL, &G, &ag, &sg, h_d, dout_d, dprob_d, dh_d);
		cr_assert_eq(gt_kernels_error(), 0, "a CUDA op failed");
		cr_assert(!memcmp(off_c, off_g, sizeof(off_c)), "rows per expert differ");
		gt_download_part(sel, ag.sel, 0, (size_t)d.N * d.K * sizeof(int), &err);
		cr_assert_str_empty(err);
		cr_assert(!memcmp(sel, ac.sel, (size_t)d.N * d.K * sizeof(int)), "top-k differs");
		gk_near("moe out", out_d, out, NC, 1e-4);
		gk_near("moe aux", aux_d, aux, 2 * (size_t)d.E, 1e-5);
		gk_near("moe dh", dh_d, dh, NC, 1e-4);
		gk_near("moe router grad", grw_d, grw, nr, 1e-4);
		gk_near("moe gate_up grad", ggu_d, ggu, ngu, 1e-4);
		gk_near("moe down grad", gdn_d, gdn, ndn, 1e-4);
		{
			float lc[1 + 16], *lg_d = up(NULL, sizeof(lc));

			c->moe_aux_finish(NULL, lc, lc + 1, aux, d.E, (float)d.N, 0.5f);
			g->moe_aux_finish(st, lg_d, lg_d + 1, aux_d, d.E, (float)d.N, 0.5f);
			gk_near("moe aux loss and dprob", lg_d, lc, 1 + (size_t)d.E, 1e-5);
			gt_free(lg_d);
		}
		gt_free(h_d), gt_free(rw_d), gt_free(gu_d), gt_free(dn_d), gt_free(dout_d);
		gt_free(dprob_d), gt_free(out_d), gt_free(dh_d), gt_free(grw_d), gt_free(ggu_d);
		gt_free(gdn_d), gt_free(aux_d), gt_free(acts_d), gt_free(scr_d);
		free(zero), free(sz), free(sel);
	}
	free(h), free(rw), free(gu), free(dn), free(dout), free(acts), free(scr), free(out);
	free(dh), free(grw), free(ggu), free(gdn);
	close_gpu(st);
}
