/* zinc generate with its layers on nvme (src/sched/generate_fz.c: layers 1 .. n-1 as the
 * training engine's frozen parameters, read through the aio engine): the same ids and
 * logits as layers on the device at every read-ahead depth; the bytes read from the file
 * per forward are the streamed layers' extents (the aio engine's own count); an injected
 * read error fails the forward with lines naming the layer, the store's file and
 * --nvme-path. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvme/aio.h"
#include "sched/generate.h"

#include "generate_check.h"
#include "nvme_test_util.h"

static struct zn_gen *make_nvme(const struct zn_model *m, const char *dir, int depth,
				int forwards)
{
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = ZN_GEN_NVME,
				 .nvme_path = dir, .device = ZN_DEVICE_HOST,
				 .prefetch_depth = depth, .fz_forwards = forwards,
				 .init_layer = init_layer };
	struct zn_gen *g = NULL;

	cr_assert_eq(zn_gen_create(&g, m, &o), 0);
	return g;
}

static struct zn_gpt2_config gpt2_deep(void)
{
	struct zn_gpt2_config c = gpt2_cfg();

	c.layers = 4; /* 5 layers in all: 4 streamed, room to read ahead */
	cr_assert_eq(zn_gpt2_config_validate(&c), 0);
	return c;
}

static void check_equal(const struct zn_model *m, const char *what)
{
	const int V = m->ops->vocab(m->config);
	const size_t bytes = sizeof(float) * T_ALL * (size_t)V;
	float *want = malloc(bytes), *got = malloc(bytes);
	int want_ids[T_ALL], got_ids[T_ALL];
	char dir[ZN_PATH_MAX];
	/* depth (0 auto, < 0 none) x forwards per use sequence (0: the default) */
	static const int runs[][2] = { { 0, 0 }, { -1, 0 }, { 1, 0 }, { 2, 3 }, { 3, 1 } };
	struct zn_gen *g;

	nvme_test_dir(dir, sizeof(dir));
	g = make(m, ZN_GEN_DEVICE, NULL);
	decode_all(g, V, want);
	zn_gen_reset(g);
	greedy(g, V, want_ids);
	zn_gen_destroy(g);
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		struct zn_gen_stats s;

		memset(got, 0, bytes);
		memset(got_ids, 0xff, sizeof(got_ids));
		g = make_nvme(m, dir, runs[r][0], runs[r][1]);
		decode_all(g, V, got);
		zn_gen_reset(g);
		greedy(g, V, got_ids);
		zn_gen_stats(g, &s);
		cr_expect_gt(s.nvme_read_bytes, 0, "%s run %zu read nothing from nvme", what, r);
		cr_expect(!memcmp(want, got, bytes), "%s depth %d forwards %d: logits differ from "
			  "the on-device ones", what, runs[r][0], runs[r][1]);
		cr_expect(!memcmp(want_ids, got_ids, sizeof(int) * (T_ALL - 5)),
			  "%s depth %d forwards %d: greedy ids differ", what, runs[r][0],
			  runs[r][1]);
		if (runs[r][0] > 0)
			cr_expect_eq(s.prefetch_depth, runs[r][0], "%s: depth", what);
		zn_gen_destroy(g);
	}
	cr_expect_eq(rmdir(dir), 0, "the layers' file was left in %s", dir);
	free(want), free(got);
}

Test(nvme_generate, same_ids_and_logits_as_on_device_gpt2)
{
	struct zn_gpt2_config c = gpt2_deep();
	struct zn_model m = zn_gpt2_model(&c);

	check_equal(&m, "gpt2");
}

Test(nvme_generate, same_ids_and_logits_as_on_device_llama)
{
	struct zn_llama_config c = llama_cfg(true, true, 4);
	struct zn_model m;

	c.layers = 3;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	m = zn_llama_model(&c);
	check_equal(&m, "llama");
}

/* one use sequence per forward: every read of a forward is complete at its end and none
 * of the next has begun, so the aio engine's count moves by exactly one forward's reads */
Test(nvme_generate, bytes_read_per_token_are_the_streamed_layers)
{
	struct zn_gpt2_config c = gpt2_deep();
	struct zn_model m = zn_gpt2_model(&c);
	const int n = m.ops->layer_count(m.config), V = m.ops->vocab(m.config);
	uint64_t extents = 0, params = 0, read0, copied0;
	float *z = malloc(sizeof(float) * T_ALL * (size_t)V);
	char dir[ZN_PATH_MAX];
	struct zn_gen_stats s;
	struct zn_gen *g;

	for (int l = 1; l < n; l++) {
		struct zn_layer_desc L;

		cr_assert_eq(m.ops->describe(m.config, l, &L), 0);
		params += L.numel * sizeof(float);
		extents += (L.numel * sizeof(float) + 4095) / 4096 * 4096; /* 4 KiB extents */
		zn_layer_desc_release(&L);
	}
	nvme_test_dir(dir, sizeof(dir));
	g = make_nvme(&m, dir, 2, 1);
	zn_gen_stats(g, &s);
	cr_expect_eq(s.nvme_read_bytes, 0, "reads before the first forward");
	for (int t = 0; t < T_ALL; t += t ? 1 : 5) {
		read0 = s.nvme_read_bytes, copied0 = s.streamed_bytes;
		cr_assert_eq(zn_gen_forward(g, tokens + t, t ? 1 : 5, 1, z), 0);
		zn_gen_stats(g, &s);
		cr_expect_eq(s.nvme_read_bytes - read0, extents,
			     "forward at %d read %llu bytes, the streamed layers are %llu", t,
			     (unsigned long long)(s.nvme_read_bytes - read0),
			     (unsigned long long)extents);
		cr_expect_eq(s.streamed_bytes - copied0, params, "forward at %d copied %llu", t,
			     (unsigned long long)(s.streamed_bytes - copied0));
	}
	zn_gen_destroy(g);
	cr_expect_eq(rmdir(dir), 0);
	free(z);
}

/* stderr into a file while fn runs; its text back in buf */
static void capture(char *buf, size_t size, struct zn_gen *g, float *z, int *rc)
{
	FILE *tmp = tmpfile();
	int saved = dup(2);
	size_t k;

	cr_assert_not_null(tmp);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	*rc = zn_gen_forward(g, tokens, 5, 1, z);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	k = fread(buf, 1, size - 1, tmp);
	buf[k] = 0;
	fclose(tmp);
}

Test(nvme_generate, read_error_names_the_file)
{
	struct zn_gpt2_config c = gpt2_deep();
	struct zn_model m = zn_gpt2_model(&c);
	const int V = m.ops->vocab(m.config);
	float *z = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
	char dir[ZN_PATH_MAX], msg[8192], want_dir[ZN_PATH_MAX + 64];
	struct zn_gen *g;
	int rc;

	nvme_test_dir(dir, sizeof(dir));
	g = make(&m, ZN_GEN_DEVICE, NULL);
	cr_assert_eq(zn_gen_forward(g, tokens, 5, 1, want), 0);
	zn_gen_destroy(g);
	g = make_nvme(&m, dir, 1, 0);
	cr_assert_not_null(zn_gen_aio(g));
	zn_aio_set_fault(zn_gen_aio(g), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	capture(msg, sizeof(msg), g, z, &rc);
	cr_expect_eq(rc, -EIO, "the forward returned %d", rc);
	cr_expect_eq(zn_gen_pos(g), 0, "a failed forward moved the position");
	/* the layer and the store's file under the path */
	snprintf(want_dir, sizeof(want_dir), "frozen parameters of layer 1: nvme read of %s/zinc-swap-",
		 dir);
	cr_expect_not_null(strstr(msg, want_dir), "%s", msg);
	snprintf(want_dir, sizeof(want_dir), "--nvme-path %s", dir);
	cr_expect_not_null(strstr(msg, want_dir), "%s", msg);
	cr_expect_not_null(strstr(msg, "Input/output error"), "%s", msg);
	/* the fault was one read: the same forward again reads it back and gives the logits */
	zn_aio_set_fault(zn_gen_aio(g), NULL);
	cr_assert_eq(zn_gen_forward(g, tokens, 5, 1, z), 0);
	cr_expect(!memcmp(z, want, sizeof(float) * (size_t)V), "logits after the retry");
	zn_gen_destroy(g);
	cr_expect_eq(rmdir(dir), 0, "the layers' file was left in %s", dir);
	free(z), free(want);
}

Test(nvme_generate, a_path_that_cannot_hold_the_file_is_refused)
{
	struct zn_gpt2_config c = gpt2_deep();
	struct zn_model m = zn_gpt2_model(&c);
	struct zn_gen_opts o = { .max_t = T_ALL, .max_chunk = 5, .home = ZN_GEN_NVME,
				 .nvme_path = "/nonexistent/zinc", .device = ZN_DEVICE_HOST,
				 .init_layer = init_layer };
	struct zn_gen *g = NULL;

	cr_expect_neq(zn_gen_create(&g, &m, &o), 0);
	cr_expect_null(g);
}
