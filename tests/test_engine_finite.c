/* Nothing non-finite is trained on or saved (issue 14, item 4).
 *
 * - zinc train --init-from a checkpoint holding a NaN or an infinity is refused before
 *   any step, naming the tensor; nothing is saved.
 * - A finite but huge weight (2.3e36) makes the loss or the gradients non-finite at step
 *   1: the step fails with -ERANGE naming the step and the first layer whose gradient is
 *   not finite, with or without --grad-clip, for every optimizer tier (device, cpu
 *   offload); zinc train exits 1 and saves nothing.
 * - zn_engine_save refuses weights that are not finite, naming the layer.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_common.h"

static char out[1 << 16];

/* The tiny preset's weights, seeded, with layer `layer` element `at` set to v, saved. */
static void write_checkpoint(const char *path, int layer, uint64_t at, float v)
{
	struct zn_gpt2_config mc;
	struct zn_layer_desc *ld;
	float **p;
	int n;

	cr_assert_eq(zn_gpt2_config_from_preset("tiny", &mc), 0);
	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	n = zn_gpt2_layer_count(&mc);
	ld = calloc((size_t)n, sizeof(*ld));
	p = calloc((size_t)n, sizeof(*p));
	cr_assert_eq(zn_gpt2_layers(&mc, ld), 0);
	for (int l = 0; l < n; l++) {
		p[l] = calloc(ld[l].numel, sizeof(float));
		zn_gpt2_init_layer(&mc, &ld[l], p[l], 7);
	}
	p[layer][at] = v;
	cr_assert_eq(zn_gpt2_save_safetensors(&mc, ld, (const float *const *)p, path,
					      ZN_DTYPE_F32), 0);
	for (int l = 0; l < n; l++)
		free(p[l]);
	free(p);
	zn_layer_descs_free(ld, n);
}

static int zinc(const char *args)
{
	char cmd[4096];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "cd %s && %s train %s 2>&1", ZN_TEST_SRC_DIR, ZN_ZINC_EXE,
		 args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status), "%s", out);
	return WEXITSTATUS(status);
}

static void checkpoint_case(float v, const char *what, int stage, const char *offload,
			    const char *clip)
{
	char dir[] = "/tmp/zn-finite-XXXXXX", ck[64], saved[64], args[1024];
	struct stat st;
	int rc;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(ck, sizeof(ck), "%s/in.st", dir);
	snprintf(saved, sizeof(saved), "%s/out.st", dir);
	write_checkpoint(ck, 1, 5, v); /* block 0, an attention weight */
	snprintf(args, sizeof(args), "--device host --init-from %s --data data/demo.txt "
		 "--seq 16 --steps 3 --zero-stage %d --offload-optimizer %s %s --save-final %s",
		 ck, stage, offload, clip, saved);
	rc = zinc(args);
	cr_assert_eq(rc, 1, "%s: exit %d: %s", what, rc, out);
	cr_assert_neq(stat(saved, &st), 0, "%s: weights were saved: %s", what, out);
	unlink(ck);
	rmdir(dir);
}

Test(engine_finite, a_checkpoint_with_nan_is_refused)
{
	checkpoint_case(NAN, "NaN", 0, "none", "");
	cr_assert(strstr(out, "transformer.h.0.") && strstr(out, "NaN"), "%s", out);
	cr_assert_null(strstr(out, "step 1/"), "no step may run: %s", out);
}

Test(engine_finite, a_checkpoint_with_inf_is_refused)
{
	checkpoint_case(-INFINITY, "-inf", 2, "cpu", "");
	cr_assert(strstr(out, "transformer.h.0.") && strstr(out, "infinity"), "%s", out);
	cr_assert_null(strstr(out, "step 1/"), "no step may run: %s", out);
}

static void huge_weight_stops(int stage, const char *offload, const char *clip)
{
	checkpoint_case(2.3e36f, "2.3e36", stage, offload, clip);
	cr_assert(strstr(out, "step 1:") && strstr(out, "not finite"),
		  "stage %d %s %s: %s", stage, offload, clip, out);
	cr_assert_null(strstr(out, "saved "), "%s", out);
}

Test(engine_finite, a_huge_weight_stops_the_run_device_optimizer)
{
	huge_weight_stops(0, "none", "");
	huge_weight_stops(1, "none", "");
	huge_weight_stops(3, "none", "");
}

Test(engine_finite, a_huge_weight_stops_the_run_cpu_offload)
{
	huge_weight_stops(2, "cpu", "");
	huge_weight_stops(3, "cpu --offload-param cpu", "");
}

Test(engine_finite, a_huge_weight_stops_the_run_with_clipping)
{
	huge_weight_stops(0, "none", "--grad-clip 1");
	huge_weight_stops(2, "cpu", "--grad-clip 1");
}

/* Engine level: the step's error names the step and a layer; the stats stay readable. */
static void engine_case(int stage, enum zn_offload_device off, float clip, float bad)
{
	struct zn_gpt2_config mc;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_layer_desc *ld;
	struct zn_step_stats st;
	struct zn_engine *e;
	struct zn_config c;
	float **p;
	int n, rc, *tok;
	uint64_t bt;

	et_model(&mc);
	et_config(&c, stage, off, 2, 1);
	c.gradient_clipping = clip;
	n = zn_gpt2_layer_count(&mc);
	ld = calloc((size_t)n, sizeof(*ld));
	p = calloc((size_t)n, sizeof(*p));
	cr_assert_eq(zn_gpt2_layers(&mc, ld), 0);
	for (int l = 0; l < n; l++) {
		p[l] = calloc(ld[l].numel, sizeof(float));
		zn_gpt2_init_layer(&mc, &ld[l], p[l], 3);
	}
	p[1][5] = bad;
	o.init_params_h = (const float *const *)p;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	bt = (uint64_t)zn_engine_micro_batch(e) * ET_T;
	tok = et_tokens(bt + 1, mc.vocab, 5);
	rc = zn_engine_step(e, tok, tok + 1, &st);
	cr_assert_eq(rc, -ERANGE, "stage %d offload %d clip %g: step returned %d", stage, off,
		     clip, rc);
	zn_engine_destroy(e);
	for (int l = 0; l < n; l++)
		free(p[l]);
	free(p);
	zn_layer_descs_free(ld, n);
	free(tok);
}

Test(engine_finite, step_fails_with_erange, .init = cr_redirect_stderr)
{
	static const float bad[] = { 2.3e36f, NAN };

	for (int b = 0; b < 2; b++) {
		for (int stage = 0; stage <= 3; stage++) {
			engine_case(stage, ZN_OFFLOAD_NONE, 0, bad[b]);
			engine_case(stage, ZN_OFFLOAD_NONE, 1.0f, bad[b]);
			if (stage >= 1) {
				engine_case(stage, ZN_OFFLOAD_CPU, 0, bad[b]);
				engine_case(stage, ZN_OFFLOAD_CPU, 1.0f, bad[b]);
			}
		}
	}
}

/* Weights that are not finite are never written: the engine starts from a NaN (the API
 * does not check its caller's arrays) and save refuses, naming the layer. */
Test(engine_finite, save_refuses_non_finite_weights, .init = cr_redirect_stderr)
{
	char path[] = "/tmp/zn-finite-save-XXXXXX";
	struct zn_gpt2_config mc;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_layer_desc *ld;
	struct zn_engine *e;
	struct zn_config c;
	struct stat st;
	float **p;
	int n, fd;

	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	unlink(path);
	et_model(&mc);
	et_config(&c, 2, ZN_OFFLOAD_CPU, 2, 1);
	n = zn_gpt2_layer_count(&mc);
	ld = calloc((size_t)n, sizeof(*ld));
	p = calloc((size_t)n, sizeof(*p));
	cr_assert_eq(zn_gpt2_layers(&mc, ld), 0);
	for (int l = 0; l < n; l++) {
		p[l] = calloc(ld[l].numel, sizeof(float));
		zn_gpt2_init_layer(&mc, &ld[l], p[l], 3);
	}
	p[2][7] = NAN;
	o.init_params_h = (const float *const *)p;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	cr_assert_eq(zn_engine_save(e, path, ZN_DTYPE_F32), -ERANGE);
	cr_assert_neq(stat(path, &st), 0, "a file was written");
	zn_engine_destroy(e);
	for (int l = 0; l < n; l++)
		free(p[l]);
	free(p);
	zn_layer_descs_free(ld, n);
}
