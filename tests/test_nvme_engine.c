/* The engine with state homed on nvme (offload_optimizer / offload_param nvme), one rank,
 * host device: the same arithmetic as cpu offload, so the same losses and final weights bit
 * for bit, and stage 0 within 1e-5; striping over two paths; the swap files gone after
 * destroy; an injected I/O error stops the step with the file named; a damaged int8 extent
 * fails its checksum. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine_common.h"
#include "nvme_test_util.h"
#include "sched/engine_impl.h"

static int *stream_for(int steps, int gas)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	return et_tokens(et_stream_len(steps, gas, 1, ET_B), mc.vocab, 7);
}

/* Points both offload blocks at the given directories. */
static void set_paths(struct zn_config *c, const char *const *dirs, int n)
{
	struct zn_offload_config *o[] = { &c->zero.offload_optimizer, &c->zero.offload_param };

	for (int k = 0; k < 2; k++) {
		o[k]->nvme_path_count = n;
		for (int i = 0; i < n; i++)
			snprintf(o[k]->nvme_path[i], ZN_PATH_MAX, "%s", dirs[i]);
	}
}

/* Entries under dir that a swap store made (zinc-swap-* and its temporaries). */
static int swap_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += !strncmp(e->d_name, "zinc-swap-", 10) || !strncmp(e->d_name, ".zinc", 5);
	if (d)
		closedir(d);
	return n;
}

static void assert_identical(const char *what, const struct et_run *a, const struct et_run *b)
{
	for (int s = 0; s < a->steps; s++)
		cr_assert_eq(memcmp(&a->loss[s], &b->loss[s], 4), 0,
			     "%s: step %d loss %.9g vs cpu offload %.9g", what, s + 1, b->loss[s],
			     a->loss[s]);
	for (int l = 0; l < a->layer_count; l++)
		for (uint64_t i = 0; i < a->numel[l]; i++)
			cr_assert_eq(memcmp(&a->w[l][i], &b->w[l][i], 4), 0,
				     "%s: layer %d element %llu: %.9g vs cpu offload %.9g", what, l,
				     (unsigned long long)i, b->w[l][i], a->w[l][i]);
}

struct nv_case {
	int stage;
	enum zn_offload_device opt, prm;
	bool bf16;
	int gas;
	int paths;
	int buffers;
	bool pipeline;
	float clip;
	int layers; /* 0: the default tiny model (2 blocks) */
	enum zn_optim_states states; /* m and v as stored: the same in all three runs */
};

static void run_case(int stage, enum zn_offload_device opt, enum zn_offload_device prm,
		     bool bf16, int gas, int paths, int buffers, bool pipeline, float clip,
		     int layers);

/* Trains the case with its tiers on nvme, then with both on cpu and at stage 0. */
static void check_case(const struct nv_case *k)
{
	char dir[ZN_PATH_MAX], sub[2][ZN_PATH_MAX + 16];
	const char *dirs[2] = { sub[0], sub[1] };
	struct zn_config c;
	struct et_run cpu, nv, ref;
	int *tok = stream_for(ET_STEPS, k->gas);
	struct zn_gpt2_config mc;
	char what[128];

	et_model(&mc);
	if (k->layers) {
		mc.layers = k->layers;
		zn_gpt2_config_validate(&mc);
	}
	nvme_test_dir(dir, sizeof(dir));
	for (int i = 0; i < k->paths; i++) {
		snprintf(sub[i], sizeof(sub[i]), "%s/p%d", dir, i);
		cr_assert_eq(mkdir(sub[i], 0700), 0, "mkdir %s", sub[i]);
	}
	snprintf(what, sizeof(what), "stage %d optimizer %s params %s%s gas %d, %d path%s, "
		 "states %s", k->stage, k->opt == ZN_OFFLOAD_NVME ? "nvme" : "cpu",
		 k->prm == ZN_OFFLOAD_NVME ? "nvme" : k->prm == ZN_OFFLOAD_CPU ? "cpu" : "device",
		 k->bf16 ? " bf16" : "", k->gas, k->paths, k->paths > 1 ? "s" : "",
		 zn_optim_states_name(k->states));

	et_config(&c, k->stage, ZN_OFFLOAD_CPU, ET_B, k->gas);
	c.optimizer.states = k->states;
	c.zero.offload_param.device = k->prm == ZN_OFFLOAD_NONE ? ZN_OFFLOAD_NONE : ZN_OFFLOAD_CPU;
	c.precision.bf16 = k->bf16;
	c.gradient_clipping = k->clip;
	cr_assert_eq(et_train_model(&cpu, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);

	c.zero.offload_optimizer.device = k->opt;
	c.zero.offload_param.device = k->prm;
	c.zero.offload_optimizer.buffer_count = k->buffers;
	c.zero.offload_optimizer.pipeline_read = k->pipeline;
	c.zero.offload_optimizer.pipeline_write = k->pipeline;
	set_paths(&c, dirs, k->paths);
	cr_assert_eq(et_train_model(&nv, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0, "%s failed", what);
	assert_identical(what, &cpu, &nv);
	cr_assert(nv.peak_bytes <= nv.plan_bytes, "%s: device peak over the plan", what);
	for (int i = 0; i < k->paths; i++)
		cr_assert_eq(swap_entries(sub[i]), 0, "%s: swap files left in %s", what, sub[i]);

	et_config(&c, 0, ZN_OFFLOAD_NONE, ET_B, k->gas);
	c.precision.bf16 = k->bf16;
	c.gradient_clipping = k->clip;
	c.optimizer.states = k->states;
	cr_assert_eq(et_train_model(&ref, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	cr_assert(nv.loss[ET_STEPS - 1] != ref.loss[0], "the weights moved");
	cr_assert_eq(et_compare(what, &ref, &nv, 1e-5), 0,
		     "%s differs from stage 0", what);
	et_run_free(&cpu);
	et_run_free(&nv);
	et_run_free(&ref);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_engine, stage3_optimizer_nvme_equals_cpu_offload)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_CPU, false, 1, 1, 4, true, 0, 0);
}

Test(nvme_engine, stage3_optimizer_and_params_nvme_equal_cpu_offload)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, false, 1, 1, 4, true, 0, 0);
}

Test(nvme_engine, bf16_stage3_all_nvme_two_paths_accumulation)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, true, 2, 2, 2, true, 0, 0);
}

Test(nvme_engine, stage3_params_nvme_optimizer_cpu_clipped)
{
	run_case(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, false, 1, 1, 3, true, 0.05f, 0);
}

Test(nvme_engine, stage2_optimizer_nvme_without_pipelining)
{
	run_case(2, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NONE, false, 1, 2, 2, false, 0, 0);
}

Test(nvme_engine, bf16_stage1_optimizer_nvme)
{
	run_case(1, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NONE, true, 1, 1, 2, true, 0, 0);
}

/* 16 staging buffers: chunks of the state / 16 (plan.h), so every block's shard is several
 * chunks: AdamW, the read-ahead, the write-behind, the hot layers' shards and the read-back
 * go chunk by chunk, bit for bit cpu offload's. */
Test(nvme_engine, state_staged_in_chunks_fp32_aliased)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, false, 1, 1, 16, true, 0, 0);
}

Test(nvme_engine, state_staged_in_chunks_bf16_accumulation_two_paths)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, true, 2, 2, 16, true, 0, 0);
}

Test(nvme_engine, params_staged_in_chunks_optimizer_cpu_clipped)
{
	run_case(3, ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME, true, 1, 1, 16, false, 0.05f, 0);
}

Test(nvme_engine, state_staged_in_chunks_stage1_optimizer_nvme)
{
	run_case(1, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NONE, false, 1, 1, 16, true, 0, 0);
}

/* Compact optimizer state (zinc.optimizer_states): extents, staging, read-ahead and
 * write-behind sized to it, bit for bit with cpu offload of the same setting */
Test(nvme_engine, int8_states_all_nvme_two_paths_two_buffers_equal_cpu_offload)
{
	check_case(&(struct nv_case){ .stage = 3, .opt = ZN_OFFLOAD_NVME, .prm = ZN_OFFLOAD_NVME,
				      .gas = 1, .paths = 2, .buffers = 2, .pipeline = true,
				      .layers = 4, .states = ZN_STATES_INT8 });
}

Test(nvme_engine, int8_states_bf16_stage2_optimizer_nvme_accumulation)
{
	check_case(&(struct nv_case){ .stage = 2, .opt = ZN_OFFLOAD_NVME, .bf16 = true, .gas = 2,
				      .paths = 1, .buffers = 3, .pipeline = true,
				      .states = ZN_STATES_INT8 });
}

/* 16 staging buffers, where fp32 state would be staged in chunks: compact m and v are
 * staged whole per layer (plan.c), bit for bit cpu offload's */
Test(nvme_engine, int8_states_with_many_buffers_staged_whole)
{
	check_case(&(struct nv_case){ .stage = 3, .opt = ZN_OFFLOAD_NVME, .prm = ZN_OFFLOAD_NVME,
				      .bf16 = true, .gas = 2, .paths = 2, .buffers = 16,
				      .pipeline = true, .states = ZN_STATES_INT8 });
}

Test(nvme_engine, bf16_states_stage3_optimizer_nvme_without_pipelining)
{
	check_case(&(struct nv_case){ .stage = 3, .opt = ZN_OFFLOAD_NVME, .prm = ZN_OFFLOAD_CPU,
				      .gas = 1, .paths = 1, .buffers = 2, .pipeline = false,
				      .states = ZN_STATES_BF16 });
}

/* Whether some line of the redirected stderr holds a (and b); the first call reads it. */
Test(nvme_engine, six_layers_two_buffers_read_ahead_and_write_behind)
{
	run_case(3, ZN_OFFLOAD_NVME, ZN_OFFLOAD_NVME, true, 1, 2, 2, true, 0, 4);
}

/* Hot layers (plan.h): the layers a micro-batch's forward fetches first keep their current
 * shard in pinned memory, refreshed as AdamW writes the extent, and their fetches copy it
 * up instead of reading nvme. At prefetch depths 4 .. 1 (hot layers 0 .. depth + 1: all
 * of them down to 0 .. 2) the losses and weights are cpu offload's bit for bit, and every step reads
 * exactly the plan's bytes, fewer the more layers are hot. */
static void check_hot(bool bf16)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct et_run cpu, nv;
	int *tok = stream_for(ET_STEPS, 2);
	uint64_t prev = 0;

	et_model(&mc);
	mc.layers = 4; /* 6 engine layers */
	zn_gpt2_config_validate(&mc);
	nvme_test_dir(dir, sizeof(dir));
	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	c.zero.offload_param.device = ZN_OFFLOAD_CPU;
	c.precision.bf16 = bf16;
	cr_assert_eq(et_train_model(&cpu, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	c.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	c.zero.offload_param.device = ZN_OFFLOAD_NVME;
	set_paths(&c, dirs, 1);
	for (int depth = 4; depth >= 1; depth--) { /* 0 would be the automatic depth */
		char what[64];

		snprintf(what, sizeof(what), "%s prefetch depth %d", bf16 ? "bf16" : "fp32", depth);
		c.runtime.prefetch_depth = depth;
		cr_assert_eq(et_train_model(&nv, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0,
			     "%s failed", what);
		assert_identical(what, &cpu, &nv);
		for (int s = 0; s < ET_STEPS; s++)
			cr_assert_eq(nv.nvme_read[s], nv.plan_nvme_read, "%s: step %d read %llu B, "
				     "plan %llu B", what, s + 1, (unsigned long long)nv.nvme_read[s],
				     (unsigned long long)nv.plan_nvme_read);
		/* fewer hot layers (lower depth), more reads; depth 4 makes all 5 hot */
		cr_assert_gt(nv.plan_nvme_read, prev, "%s", what);
		prev = nv.plan_nvme_read;
		et_run_free(&nv);
	}
	/* --hot-layers 0: only layer 0 (its own fetch buffer) stays; more reads again */
	c.runtime.prefetch_depth = 1;
	c.runtime.hot_layers = 0;
	cr_assert_eq(et_train_model(&nv, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	assert_identical("--hot-layers 0", &cpu, &nv);
	for (int s = 0; s < ET_STEPS; s++)
		cr_assert_eq(nv.nvme_read[s], nv.plan_nvme_read, "--hot-layers 0: step %d", s + 1);
	cr_assert_gt(nv.plan_nvme_read, prev);
	et_run_free(&nv);
	et_run_free(&cpu);
	free(tok);
	nvme_test_rmdir(dir);
}

/* Layer-major with GPT-2's tied head fetches the last layer once more at the end of the
 * backward; with the gradient shards landing late (ZINC_TEST_LATE_EARLY_ADAMW: every early
 * AdamW at layer 1's reduction), that fetch's read is submitted before the last layer's
 * AdamW writes its extent, and the results stay cpu offload's bit for bit. The race the
 * write's wait for that read closes (swapio.c wait_layer_reads) needs the read still in
 * flight when the write is submitted, which only a slow drive or a loaded machine makes:
 * this test walks the order, it cannot force the overlap. */
Test(nvme_engine, layer_major_with_late_early_adamw_equals_cpu_offload)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct et_run cpu, nv;
	int *tok = stream_for(ET_STEPS, 2);

	et_model(&mc);
	mc.layers = 4; /* 6 engine layers, the last tied to layer 0 */
	zn_gpt2_config_validate(&mc);
	nvme_test_dir(dir, sizeof(dir));
	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	c.runtime.schedule = ZN_SCHEDULE_LAYER_MAJOR;
	c.runtime.prefetch_depth = 1;
	c.runtime.hot_layers = 0;
	cr_assert_eq(et_train_model(&cpu, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	c.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	c.zero.offload_param.device = ZN_OFFLOAD_NVME;
	set_paths(&c, dirs, 1);
	setenv("ZINC_TEST_LATE_EARLY_ADAMW", "1", 1);
	cr_assert_eq(et_train_model(&nv, &c, &mc, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
	unsetenv("ZINC_TEST_LATE_EARLY_ADAMW");
	assert_identical("late early AdamW", &cpu, &nv);
	for (int s = 0; s < ET_STEPS; s++)
		cr_assert_eq(nv.nvme_read[s], nv.plan_nvme_read, "step %d", s + 1);
	et_run_free(&nv);
	et_run_free(&cpu);
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_engine, hot_layers_at_every_prefetch_depth_equal_cpu_offload)
{
	check_hot(false);
}

Test(nvme_engine, bf16_hot_layers_at_every_prefetch_depth_equal_cpu_offload)
{
	check_hot(true);
}

/* Write-behind: a step returns with its state writes in flight; the next step's fetch of a
 * layer waits for that layer's write (else it reads the old shard). Writes capped at 1 MB/s
 * and reads uncapped make each layer's write outlast the next forward's read of it (the
 * writes of layers n-1 .. 0 queue behind each other), so without the wait the losses and
 * weights differ from cpu offload. */
Test(nvme_engine, write_behind_is_waited_for_by_the_next_fetch)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct et_run cpu;
	struct zn_engine *e;
	int *tok = stream_for(3, 1);

	et_model(&mc);
	mc.layers = 4;
	zn_gpt2_config_validate(&mc);
	nvme_test_dir(dir, sizeof(dir));
	et_config(&c, 3, ZN_OFFLOAD_CPU, ET_B, 1);
	c.runtime.prefetch_depth = 1;
	c.runtime.hot_layers = 0;
	cr_assert_eq(et_train_model(&cpu, &c, &mc, ZN_COMM_SINGLE, tok, 3), 0);
	c.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	c.zero.offload_param.device = ZN_OFFLOAD_NVME;
	set_paths(&c, dirs, 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	zn_aio_set_write_cap(zn_engine_aio(e), 1000000);
	for (int s = 0; s < 3; s++) {
		const int *in = tok + (size_t)s * ET_B * ET_T;
		struct zn_step_stats st;

		cr_assert_eq(zn_engine_step(e, in, in + 1, &st), 0);
		cr_assert_eq(memcmp(&st.loss, &cpu.loss[s], 4), 0, "step %d loss %.9g vs cpu "
			     "offload %.9g", s + 1, st.loss, cpu.loss[s]);
	}
	for (int l = 0; l < cpu.layer_count; l++) {
		float *w = malloc(cpu.numel[l] * sizeof(float));

		cr_assert_eq(zn_engine_read_layer(e, l, w), 0);
		cr_assert_eq(memcmp(w, cpu.w[l], cpu.numel[l] * sizeof(float)), 0,
			     "layer %d differs from cpu offload", l);
		free(w);
	}
	zn_engine_destroy(e);
	et_run_free(&cpu);
	free(tok);
	nvme_test_rmdir(dir);
}

/* zinc train end to end with everything on nvme, one path */
Test(nvme_engine, zinc_train_with_state_on_nvme)
{
	char dir[ZN_PATH_MAX], cmd[2 * ZN_PATH_MAX + 512], out[16384];
	size_t n;
	FILE *p;
	int status;

	nvme_test_dir(dir, sizeof(dir));
	snprintf(cmd, sizeof(cmd), "%s train --device host --model tiny --vocab 256 --seq 16 "
		 "--micro-batch 2 --steps 3 --zero-stage 3 --offload-optimizer nvme "
		 "--offload-param nvme --nvme-path %s --no-pin-memory --data %s/data/demo.txt 2>&1",
		 ZN_ZINC_EXE, dir, ZN_TEST_SRC_DIR);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
	cr_assert(strstr(out, "offload optimizer nvme, param nvme"), "%s", out);
	cr_assert(strstr(out, "step 3/3 | loss "), "%s", out);
	cr_assert_eq(swap_entries(dir), 0, "swap files left after zinc train");
	nvme_test_rmdir(dir);
}

/* What waits for a write that failed behind its step: the next step, zn_engine_flush, or
 * leaving the trace the step was traced into (zn_engine_set_trace) */
enum then { NEXT_STEP, FLUSH, LEAVE_TRACE };

/* The nth I/O piece from now fails with EIO: the step (or, for a write behind it, what
 * `then` names) fails naming the swap file, the engine is destroyed cleanly and its files
 * are gone. */
static void check_fault(enum zn_offload_device prm, uint64_t nth, bool writes_only,
			const char *op, enum then then)
{
	char tpath[ZN_PATH_MAX + 16];
	struct zn_trace *trace = NULL;
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	int *tok = stream_for(3, 1), rc;

	nvme_test_dir(dir, sizeof(dir));
	et_model(&mc);
	et_config(&c, 3, ZN_OFFLOAD_NVME, ET_B, 1);
	c.zero.offload_param.device = prm;
	set_paths(&c, dirs, 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0, "the unfaulted step trains");
	cr_assert_eq(zn_engine_flush(e), 0, "its write-behind lands");
	if (then == LEAVE_TRACE) {
		snprintf(tpath, sizeof(tpath), "%s/t.json", dir);
		cr_assert_eq(zn_trace_open(&trace, tpath, 1, 0, 0), 0);
		cr_assert_eq(zn_engine_set_trace(e, trace), 0);
	}
	zn_aio_set_fault(zn_engine_aio(e), &(struct zn_aio_fault){ .nth = nth, .err = EIO,
								 .writes_only = writes_only });
	rc = zn_engine_step(e, tok + ET_B * ET_T, tok + ET_B * ET_T + 1, &st);
	/* a write behind the step fails the step, or what waits for it next */
	if (!rc && writes_only)
		rc = then == FLUSH	 ? zn_engine_flush(e) :
		     then == LEAVE_TRACE ? zn_engine_set_trace(e, NULL) :
					   zn_engine_step(e, tok + 2 * ET_B * ET_T,
							  tok + 2 * ET_B * ET_T + 1, &st);
	cr_assert_eq(rc, -EIO, "the faulted step returns -EIO (got %d)", rc);
	cr_assert(nvme_test_stderr_has(op, "zinc-swap-") && nvme_test_stderr_has("zinc-swap-", "Input/output error"),
		  "the error names the %s and the swap file", op);
	cr_assert(nvme_test_stderr_has("nvme: ", "layer"), "the error names the layer");
	/* optimizer on nvme, parameters not: every transfer is the optimizer staging's, whose
	 * home names the state, the layer, the operation and the optimizer store's file */
	cr_assert(prm != ZN_OFFLOAD_CPU ||
		  (nvme_test_stderr_has("nvme: the optimizer state of layer", op) &&
		   nvme_test_stderr_has("nvme: the optimizer state of layer", "-optim-")),
		  "the error names the optimizer state, the layer, the %s and its file", op);
	zn_engine_destroy(e);
	zn_trace_close(trace);
	cr_assert_eq(swap_entries(dir), 0, "swap files left after destroy");
	free(tok);
	nvme_test_rmdir(dir);
}

Test(nvme_engine, read_fault_fails_the_step, .init = cr_redirect_stderr)
{
	check_fault(ZN_OFFLOAD_NVME, 1, false, "read of", NEXT_STEP);
}

Test(nvme_engine, late_fault_fails_the_step, .init = cr_redirect_stderr)
{
	/* parameters on cpu: the optimizer's reads */
	check_fault(ZN_OFFLOAD_CPU, 5, false, "read of", NEXT_STEP);
}

Test(nvme_engine, write_behind_fault_fails_the_step, .init = cr_redirect_stderr)
{
	/* the second write piece of the step, whatever order the queue's priorities and the
	 * early AdamW give the reads and writes (counting every piece made this timing
	 * dependent: the 14th piece was a read in a slower, sanitized run) */
	check_fault(ZN_OFFLOAD_CPU, 2, true, "write of", NEXT_STEP);
}

Test(nvme_engine, write_behind_fault_fails_the_flush, .init = cr_redirect_stderr)
{
	/* the same write fault, waited for by zn_engine_flush (zinc train's end) */
	check_fault(ZN_OFFLOAD_CPU, 2, true, "write of", FLUSH);
}

Test(nvme_engine, write_behind_fault_fails_leaving_the_trace, .init = cr_redirect_stderr)
{
	/* traced: zn_engine_set_trace(NULL) waits for the write and returns its error (zinc
	 * train and bench step check it) */
	check_fault(ZN_OFFLOAD_CPU, 2, true, "write of", LEAVE_TRACE);
}

static void run_case(int stage, enum zn_offload_device opt, enum zn_offload_device prm,
		     bool bf16, int gas, int paths, int buffers, bool pipeline, float clip,
		     int layers)
{
	struct nv_case k = { .stage = stage, .opt = opt, .prm = prm, .bf16 = bf16, .gas = gas,
			     .paths = paths, .buffers = buffers, .pipeline = pipeline,
			     .clip = clip, .layers = layers };

	check_case(&k);
}

/* int8 optimizer state on nvme: each moment's extent (codes, then the blocks' absmax) is
 * written whole, so its CRC32C covers the scales too; a byte of layer 1's v scales flipped
 * on disk behind the engine's back fails the next step naming the extent. */
Test(nvme_engine, int8_states_checksum_covers_the_block_scales, .init = cr_redirect_stderr)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_swap_key key = { ZN_SWAP_EXP_AVG_SQ, 1, 0 };
	struct zn_gpt2_config mc;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	char *blk = nvme_test_alloc(4096);
	int *tok = stream_for(2, 1), p, fd, rc;
	uint64_t at, foff;

	nvme_test_dir(dir, sizeof(dir));
	et_model(&mc);
	et_config(&c, 3, ZN_OFFLOAD_NVME, ET_B, 1);
	c.zero.offload_param.device = ZN_OFFLOAD_CPU;
	c.optimizer.states = ZN_STATES_INT8;
	set_paths(&c, dirs, 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0, "the clean step trains");
	cr_assert_eq(zn_engine_flush(e), 0, "its write-behind lands");
	/* byte 1 of block 0's absmax: right after the shard's codes */
	at = e->L[1].sh.shard_numel + 1;
	cr_assert_eq(zn_swap_locate(e->sw.swap_opt, key, at & ~4095ull, &p, &foff), 0);
	fd = open(zn_swap_file(e->sw.swap_opt, p), O_RDWR | O_DIRECT);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, blk, 4096, (off_t)foff), 4096);
	blk[at % 4096] ^= 0x10;
	cr_assert_eq(pwrite(fd, blk, 4096, (off_t)foff), 4096);
	close(fd);
	rc = zn_engine_step(e, tok + ET_B * ET_T, tok + ET_B * ET_T + 1, &st);
	cr_assert_eq(rc, -EBADMSG, "the step reads the damaged extent: %d", rc);
	cr_assert(nvme_test_stderr_has("checksum mismatch", "(exp_avg_sq, layer 1, rank 0)"),
		  "the error names the extent");
	zn_engine_destroy(e);
	free(blk);
	free(tok);
	nvme_test_rmdir(dir);
}

/* Parameters on nvme are fetched through a tiered home (store/home.h) on the swap I/O
 * part's own parameter store: its extents (kind ZN_SWAP_PARAM, each layer's shard bytes),
 * its engine, buffers for the ring, layer 0 and the hot layers. A read fault in a fetch
 * (optimizer on cpu: every read is a parameter read) fails the step naming the layer. */
Test(nvme_engine, params_fetched_through_a_home_on_the_param_store, .init = cr_redirect_stderr)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	struct zn_home *h;
	int *tok = stream_for(2, 1), rc;

	nvme_test_dir(dir, sizeof(dir));
	et_model(&mc);
	et_config(&c, 3, ZN_OFFLOAD_NVME, ET_B, 1);
	c.zero.offload_optimizer.device = ZN_OFFLOAD_CPU;
	c.runtime.hot_layers = 0; /* layer 0 alone stays pinned: the others are read */
	set_paths(&c, dirs, 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	h = &e->sw.fetch;
	cr_assert(h->swap == e->sw.swap_param && zn_home_aio(h) == zn_swapio_aio(&e->sw),
		  "the home reads the parameter store's extents through its engine");
	cr_assert_eq(h->c.kind, ZN_SWAP_PARAM);
	cr_assert_eq(h->c.count, e->n);
	cr_assert_eq(h->c.buf_n, e->sw.c.plan.fetch_buffers + e->sw.c.plan.hot_layers);
	for (int l = 0; l < e->n; l++)
		cr_assert_eq(h->c.item_size[l], e->L[l].sh.shard_numel * e->sw.c.plan.param_bytes,
			     "layer %d's item is its shard", l);
	cr_assert_eq(zn_home_buf(h, e->sw.c.plan.fetch_buffers - 1)->bytes, h->c.item_size[0],
		     "layer 0's buffer holds its shard (the embeddings)");
	zn_aio_set_fault(zn_engine_aio(e), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	rc = zn_engine_step(e, tok, tok + 1, &st);
	cr_assert_eq(rc, -EIO, "the faulted fetch fails the step (got %d)", rc);
	cr_assert(nvme_test_stderr_has("nvme: fetching the parameters of layer", "nvme read of"),
		  "the error names the layer and the read");
	zn_engine_destroy(e);
	cr_assert_eq(swap_entries(dir), 0, "swap files left after destroy");
	free(tok);
	nvme_test_rmdir(dir);
}

/* The optimizer's staging is a tiered home (store/home.h) on the swap I/O part's stores:
 * one item per AdamW position (layer n-1's chunks first), its buffers the staging
 * buffers (sections master | m | v | param), and each position's read and write given as
 * segments: its chunk of the master (the parameter extent, aliased with fp32 parameters on
 * nvme), of m and of v; bf16 parameters add the new shard's chunk to the write. */
static void check_opt_home(bool bf16)
{
	char dir[ZN_PATH_MAX];
	const char *dirs[1] = { dir };
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct zn_engine *e;
	struct zn_home *h;
	struct zn_home_seg rd[ZN_HOME_SEGS], wr[ZN_HOME_SEGS];
	int pos = 0, nr, nw;

	nvme_test_dir(dir, sizeof(dir));
	et_model(&mc);
	et_config(&c, 3, ZN_OFFLOAD_NVME, ET_B, 1);
	c.precision.bf16 = bf16;
	c.zero.offload_optimizer.buffer_count = 16; /* chunks of a layer's shard */
	set_paths(&c, dirs, 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	h = &e->sw.opt;
	cr_assert(h->swap == e->sw.swap_opt && zn_home_aio(h) == zn_swapio_aio(&e->sw),
		  "the home moves the optimizer store's extents through its engine");
	cr_assert_eq(e->sw.c.plan.master_aliases_params, !bf16);
	cr_assert_eq(h->c.buf_n, e->sw.c.plan.swap_buffers);
	for (int l = e->n - 1; l >= 0; l--) {
		cr_assert_eq(e->sw.pos_first[l], pos, "layer %d's chunks follow layer %d's", l, l + 1);
		pos += zn_swapio_chunks(&e->sw, l);
	}
	cr_assert_eq(h->c.count, pos, "one item per position");
	cr_assert_gt(zn_swapio_chunks(&e->sw, 1), 1, "layer 1 is staged in chunks");
	for (int i = 0; i < h->c.buf_n; i++) {
		struct zn_home_buf *b = zn_home_buf(h, i);
		const struct zn_sbuf *sb = &e->sw.sbuf[i];

		cr_assert_eq((void *)sb->master_h, b->h, "buffer %d: the master first", i);
		cr_assert_eq((char *)sb->m_h, (char *)b->h + e->sw.sec_at[1]);
		cr_assert_eq((char *)sb->v_h, (char *)sb->m_h + e->sw.c.plan.swap_moment_bytes);
		cr_assert_eq(sb->param_h != NULL, bf16, "a new shard section unless aliased");
	}
	/* layer 1's second chunk */
	{
		int p = e->sw.pos_first[1] + 1;
		uint64_t off, len;
		enum zn_swap_kind kinds[3] = { bf16 ? ZN_SWAP_MASTER : ZN_SWAP_PARAM,
					       ZN_SWAP_EXP_AVG, ZN_SWAP_EXP_AVG_SQ };

		zn_swapio_chunk(&e->sw, 1, 1, &off, &len);
		nr = h->c.segs(h->c.ctx, p, false, rd);
		nw = h->c.segs(h->c.ctx, p, true, wr);
		cr_assert_eq(nr, 3, "master, m, v read");
		cr_assert_eq(nw, bf16 ? 4 : 3, "and written, with the new shard unless aliased");
		for (int i = 0; i < 3; i++) {
			cr_assert_eq(rd[i].key.kind, (int)kinds[i], "segment %d's extent", i);
			cr_assert_eq(rd[i].key.layer, 1);
			cr_assert_eq(rd[i].off, off * 4, "the chunk's bytes of the extent");
			cr_assert_eq(rd[i].bytes, len * 4);
			cr_assert_eq(rd[i].buf_off, e->sw.sec_at[i], "into its section");
			cr_assert_eq(memcmp(&rd[i], &wr[i], sizeof(rd[i])), 0, "written back alike");
		}
		cr_assert_eq(rd[0].store, bf16 ? e->sw.swap_opt : e->sw.swap_param,
			     "an aliased master is the parameter extent");
		if (bf16) {
			cr_assert_eq(wr[3].store, e->sw.swap_param);
			cr_assert_eq(wr[3].key.kind, ZN_SWAP_PARAM);
			cr_assert_eq(wr[3].off, off * 2, "bf16: 2 bytes a parameter");
			cr_assert_eq(wr[3].bytes, len * 2);
			cr_assert_eq(wr[3].buf_off, e->sw.sec_at[3]);
		}
	}
	zn_engine_destroy(e);
	cr_assert_eq(swap_entries(dir), 0, "swap files left after destroy");
	nvme_test_rmdir(dir);
}

Test(nvme_engine, optimizer_staged_through_a_home_fp32_aliased)
{
	check_opt_home(false);
}

Test(nvme_engine, optimizer_staged_through_a_home_bf16_writes_the_new_shard)
{
	check_opt_home(true);
}
