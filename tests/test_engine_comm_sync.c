/* The engine's end of step and its host buffers (issue 16, items 7 and 9), host device,
 * one rank, the tiny GPT of engine_common.h:
 *   - the loss, token, target and norm-result host buffers come from zn_device_host_alloc
 *     (page-locked under cuda, so their copies are asynchronous): the device's count of
 *     live host blocks is 4 with an engine and 0 without, and the staged tokens are the
 *     caller's;
 *   - a comm stream that never finishes (a launched fn blocked on a gate stands in for a
 *     collective whose peer hung) makes the step return -ETIMEDOUT after the comm's
 *     timeout (zinc.comm_timeout) instead of waiting forever; the error is sticky: the
 *     next step returns it at once;
 *   - the teardown order after a comm error (zn_runtime_comm_first).
 * No assertion depends on how long anything took: the timeout is only an upper bound. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "engine_common.h"
#include "sched/engine_impl.h"

static atomic_int gate;

static void wait_gate(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct timespec ts = { 0, 1000000 };

	(void)ctx;
	(void)native;
	(void)k;
	while (!atomic_load(&gate))
		nanosleep(&ts, NULL);
}

static struct zn_engine *make(int stage, float clip, int gas, float timeout_s)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_config c;
	struct zn_engine *e = NULL;

	et_model(&mc);
	et_config(&c, stage, ZN_OFFLOAD_NONE, ET_B, gas);
	c.gradient_clipping = clip;
	c.runtime.comm_timeout_s = timeout_s;
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	return e;
}

static void host_buffers(int stage, float clip, int gas, int want_live)
{
	uint64_t n = (uint64_t)gas * ET_B * ET_T;
	int *tok = et_tokens(n + 1, 96, 7);
	struct zn_engine *e = make(stage, clip, gas, 600.0f);
	struct zn_step_stats st;

	cr_assert_eq(zn_device_host_live(e->rt.dev), want_live,
		     "stage %d clip %g: %d live host blocks, want %d (loss, tokens, targets%s)",
		     stage, clip, zn_device_host_live(e->rt.dev), want_live,
		     want_live == 4 ? ", norm result" : "");
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), 0);
	for (uint64_t i = 0; i < n; i++) {
		cr_assert_eq(e->act.tok_h[i], tok[i], "staged token %llu", (unsigned long long)i);
		cr_assert_eq(e->act.tgt_h[i], tok[i + 1], "staged target %llu",
			     (unsigned long long)i);
	}
	cr_assert(isfinite(st.loss) && st.loss > 0.0f);
	zn_engine_destroy(e);
	free(tok);
}

Test(engine_comm_sync, host_buffers_from_device_host_alloc)
{
	/* the optimizer on the device always sums the gradients there (finite check) */
	host_buffers(0, 0.0f, 1, 4);
	host_buffers(2, 1.0f, 2, 4);
}

static void hung_comm(int stage, float clip, int gas)
{
	uint64_t n = (uint64_t)gas * ET_B * ET_T;
	int *tok = et_tokens(n + 1, 96, 7);
	struct zn_engine *e;
	struct zn_step_stats st;

	/* the limit is the comm's, from the engine's config */
	e = make(stage, clip, gas, 0.2f);
	atomic_store(&gate, 0);
	cr_assert_eq(zn_launch(e->rt.comm_s, wait_gate, NULL, 0), 0);
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), -ETIMEDOUT,
		     "stage %d: a hung comm stream must end the step with -ETIMEDOUT", stage);
	cr_assert_eq(atomic_load(&gate), 0, "returned while the comm stream was still hung");
	cr_assert_eq(zn_comm_check(e->rt.comm), -ETIMEDOUT, "the timeout is sticky");
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), -ETIMEDOUT,
		     "stage %d: the next step returns the comm's sticky error", stage);
	atomic_store(&gate, 1); /* let the streams drain before the engine goes */
	zn_engine_destroy(e);
	free(tok);
}

Test(engine_comm_sync, hung_comm_stream_ends_the_step_stage0) { hung_comm(0, 0.0f, 1); }
Test(engine_comm_sync, hung_comm_stream_ends_the_step_stage2_accumulation)
{
	hung_comm(2, 0.0f, 2);
}

Test(engine_comm_sync, comm_destroyed_first_only_after_an_nccl_error)
{
	cr_assert(zn_runtime_comm_first(ZN_COMM_NCCL, -EIO));
	cr_assert(zn_runtime_comm_first(ZN_COMM_NCCL, -ETIMEDOUT));
	cr_assert_not(zn_runtime_comm_first(ZN_COMM_NCCL, 0));
	cr_assert_not(zn_runtime_comm_first(ZN_COMM_SINGLE, -ETIMEDOUT),
		      "host streams run comm ops that use the comm: streams first");
	cr_assert_not(zn_runtime_comm_first(ZN_COMM_MPI, -EIO));
}
