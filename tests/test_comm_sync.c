/* zn_comm_synchronize (issue 16, item 9): the end-of-step wait on the comm stream returns
 * when the work is done, returns a comm error at once while the stream is still busy, and
 * gives up after the comm's timeout (--comm-timeout) instead of waiting forever for a hung
 * peer. Run with
 * the single backend on the host device: a launched fn that blocks on a gate stands in
 * for a collective whose peer never arrives. Also the pure decisions: the wait loop's
 * next step, the line naming the ranks a timed-out collective waited for, and NCCL_ALGO
 * under --deterministic. No assertion
 * depends on how long anything took (the timeout is only an upper bound to reach). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "gpu/device.h"

static atomic_int gate;

static void wait_gate(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct timespec ts = { 0, 1000000 };

	while (!atomic_load(&gate))
		nanosleep(&ts, NULL);
}

struct rig {
	struct zn_device *dev;
	struct zn_stream *s;
	struct zn_comm *c;
};

static void rig_up(struct rig *r, double timeout_s)
{
	struct zn_device_config dc = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 20 };
	struct zn_comm_config cc = { .kind = ZN_COMM_SINGLE, .local = true,
				     .timeout_s = timeout_s };

	cr_assert_eq(zn_device_create(&r->dev, &dc), 0);
	cr_assert_eq(zn_stream_create(r->dev, &r->s), 0);
	cc.dev = r->dev;
	cr_assert_eq(zn_comm_create(&r->c, &cc), 0);
}

static void rig_down(struct rig *r)
{
	atomic_store(&gate, 1); /* let the stream drain before it is destroyed */
	zn_comm_destroy(r->c);
	zn_stream_destroy(r->s);
	zn_device_destroy(r->dev);
}

Test(comm_sync, wait_next_decisions)
{
	cr_assert_eq(zn_comm_wait_next(false, 0, 0.0, 1.0), ZN_COMM_WAIT_AGAIN);
	cr_assert_eq(zn_comm_wait_next(true, 0, 5.0, 1.0), ZN_COMM_WAIT_DONE);
	cr_assert_eq(zn_comm_wait_next(false, -EIO, 0.0, 1.0), ZN_COMM_WAIT_ERROR);
	cr_assert_eq(zn_comm_wait_next(true, -EIO, 0.0, 1.0), ZN_COMM_WAIT_ERROR,
		     "an error seen while waiting is reported even when the work ended");
	cr_assert_eq(zn_comm_wait_next(false, 0, 1.0, 1.0), ZN_COMM_WAIT_TIMEOUT);
	cr_assert_eq(zn_comm_wait_next(false, 0, 1e9, 0.0), ZN_COMM_WAIT_AGAIN, "0 = no limit");
}

Test(comm_sync, nccl_algo_under_deterministic)
{
	cr_assert_str_eq(zn_comm_nccl_algo(true, NULL), "Ring");
	cr_assert_str_eq(zn_comm_nccl_algo(true, ""), "Ring");
	cr_assert_null(zn_comm_nccl_algo(true, "Tree"), "the user's NCCL_ALGO wins");
	cr_assert_null(zn_comm_nccl_algo(false, NULL));
}

Test(comm_sync, done_work_returns_0)
{
	struct rig r;
	float buf[4] = { 1, 2, 3, 4 };

	atomic_store(&gate, 1);
	rig_up(&r, 30);
	cr_assert_eq(zn_comm_all_reduce(r.c, r.s, buf, 4, ZN_DTYPE_F32), 0);
	cr_assert_eq(zn_launch(r.s, wait_gate, NULL, 0), 0);
	cr_assert_eq(zn_comm_synchronize(r.c, r.s), 0);
	cr_assert_float_eq(buf[3], 4.0f, 0.0f);
	cr_assert_eq(zn_comm_check(r.c), 0);
	rig_down(&r);
}

Test(comm_sync, hung_stream_times_out_and_sticks)
{
	struct rig r;

	atomic_store(&gate, 0);
	rig_up(&r, 0.2);
	cr_assert_eq(zn_launch(r.s, wait_gate, NULL, 0), 0); /* never finishes on its own */
	cr_assert_eq(zn_comm_synchronize(r.c, r.s), -ETIMEDOUT);
	cr_assert_eq(zn_comm_check(r.c), -ETIMEDOUT, "the timeout is sticky");
	cr_assert_eq(zn_comm_barrier(r.c), -ETIMEDOUT);
	rig_down(&r);
}

Test(comm_sync, comm_error_returns_while_the_stream_is_busy)
{
	struct rig r;
	float buf[4] = { 0 };

	/* the limit is only there so a broken wait fails instead of hanging */
	setenv("ZINC_COMM_FAIL_OP", "1", 1);
	atomic_store(&gate, 0);
	rig_up(&r, 60);
	cr_assert_eq(zn_launch(r.s, wait_gate, NULL, 0), 0);
	cr_assert_eq(zn_comm_all_reduce(r.c, r.s, buf, 4, ZN_DTYPE_F32), -EIO);
	cr_assert_eq(zn_comm_synchronize(r.c, r.s), -EIO);
	cr_assert_eq(atomic_load(&gate), 0, "returned before the stream's work ended");
	rig_down(&r);
}

/* The MPI backend's timeout line (comm_wait_mpi.c): which ranks did not arrive at op 7 of
 * the stream channel, from their answers to the arrival query. */
Test(comm_sync, missing_ranks_are_named)
{
	bool answered[5] = { false, false, true, true, true };
	const int64_t reached[5][2] = { { 5, 9 }, { 5, 9 }, { 3, 7 }, { 3, 9 }, { 2, 6 } };
	char buf[512];

	/* rank 0 asks: 1 is silent, 2 and 3 are at or past op 7, 4 is at op 6 */
	cr_assert_eq(zn_comm_missing_text(buf, sizeof(buf), 0, 5, 1, 7, answered, reached), 2);
	cr_assert_str_eq(buf, "rank 1 did not arrive (no answer: stopped, dead, or busy outside "
			      "the collectives); rank 4 did not arrive (it is at host op 2, "
			      "stream op 6)");
	answered[4] = false;
	cr_assert_eq(zn_comm_missing_text(buf, sizeof(buf), 0, 5, 1, 7, answered, reached), 2);
	cr_assert(strstr(buf, "ranks 1, 4 did not arrive (no answer"), "%s", buf);
	/* rank 1 asks about stream op 6 of 4 ranks: only rank 0 (silent) is missing */
	cr_assert_eq(zn_comm_missing_text(buf, sizeof(buf), 1, 4, 1, 6, answered, reached), 1);
	cr_assert(strstr(buf, "rank 0 did not arrive (no answer") && !strstr(buf, "rank 4"),
		  "%s", buf);
	/* everyone came: slow, not stuck */
	for (int r = 0; r < 5; r++)
		answered[r] = true;
	cr_assert_eq(zn_comm_missing_text(buf, sizeof(buf), 2, 4, 0, 3, answered, reached), 0);
	cr_assert(strstr(buf, "every rank arrived"), "%s", buf);
}
