/* The I/O engine's queue order, without a backend or a clock: requests are submitted to an
 * engine whose backend takes nothing by itself, then zn_aio_take_locked() is called as a
 * ring worker would, and the order of the pieces it hands out is checked.
 *
 * The rules (aio.h, enum zn_aio_prio): normal requests go in submission order, before any
 * background request, even one submitted earlier; background pieces go when no normal
 * request is queued, at most ZN_AIO_BACKGROUND_INFLIGHT of them in flight; a promoted
 * background request is a normal one from then on; under a bandwidth cap, a direction held
 * back by its bucket does not hold back the other. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "nvme/aio_impl.h"

static void nop_wake(struct zn_aio *aio)
{
	(void)aio;
}

static const struct zn_aio_backend_ops stub_ops = { .name = "stub", .wake_locked = nop_wake };

static struct zn_aio aio;
static struct zn_aio_file file = { .fd = 3, .fixed_index = -1, .name = "stub.bin" };
static _Alignas(4096) char buf[1 << 16];

static void setup(void)
{
	memset(&aio, 0, sizeof(aio));
	aio.cfg.block_size_bytes = 4096;
	aio.cfg.queue_depth = 32;
	aio.cfg.intra_op_parallelism = 1;
	aio.ops = &stub_ops;
	pthread_mutex_init(&aio.lock, NULL);
	pthread_cond_init(&aio.done_cv, NULL);
	aio.lock_ok = true;
}

static void teardown(void)
{
	pthread_cond_destroy(&aio.done_cv);
	pthread_mutex_destroy(&aio.lock);
}

TestSuite(nvme_aio_queue, .init = setup, .fini = teardown);

/* a request of `pieces` 4 KiB pieces */
static void submit(struct zn_aio_req *r, enum zn_aio_op op, int pieces, enum zn_aio_prio prio)
{
	struct zn_aio_io io = { .op = op, .file = &file, .offset = 0,
				.bytes = (uint64_t)pieces * 4096, .buf_h = buf, .prio = prio };

	cr_assert_eq(zn_aio_submit(&aio, &io, r), 0);
}

/* takes one piece; NULL when none may go */
static struct zn_aio_req *take(struct zn_aio_piece *p)
{
	uint64_t wait_ns;
	bool ok;

	pthread_mutex_lock(&aio.lock);
	ok = zn_aio_take_locked(&aio, p, &wait_ns);
	pthread_mutex_unlock(&aio.lock);
	return ok ? p->req : NULL;
}

static void finish(struct zn_aio_piece *p)
{
	p->done = p->bytes;
	pthread_mutex_lock(&aio.lock);
	zn_aio_finish_locked(&aio, p);
	pthread_mutex_unlock(&aio.lock);
}

Test(nvme_aio_queue, normal_reads_overtake_background_reads)
{
	struct zn_aio_req bg1, bg2, param1, param2;
	struct zn_aio_piece p[8];

	/* the optimizer's read-ahead is queued first, then the parameter reads */
	submit(&bg1, ZN_AIO_READ, 2, ZN_AIO_PRIO_BACKGROUND);
	submit(&bg2, ZN_AIO_READ, 1, ZN_AIO_PRIO_BACKGROUND);
	submit(&param1, ZN_AIO_READ, 2, ZN_AIO_PRIO_NORMAL);
	submit(&param2, ZN_AIO_READ, 1, ZN_AIO_PRIO_NORMAL);
	cr_assert_eq(take(&p[0]), &param1, "a normal read goes before background reads");
	cr_assert_eq(take(&p[1]), &param1);
	cr_assert_eq(take(&p[2]), &param2, "normal reads keep their order");
	cr_assert_eq(take(&p[3]), &bg1, "background reads go when no normal one is queued");
	cr_assert_eq(take(&p[4]), &bg1);
	cr_assert_eq(aio.background_inflight, 2);
	cr_assert_null(take(&p[5]), "at most %d background pieces in flight",
		       ZN_AIO_BACKGROUND_INFLIGHT);
	finish(&p[3]);
	cr_assert_eq(aio.background_inflight, 1);
	cr_assert_eq(take(&p[5]), &bg2, "a finished background piece makes room for the next");
	for (int i = 0; i < 6; i++)
		if (i != 3)
			finish(&p[i]);
	cr_assert_eq(aio.background_inflight, 0);
	cr_assert(param1.done && param2.done && bg1.done && bg2.done);
	cr_assert_null(aio.head);
}

Test(nvme_aio_queue, a_normal_read_waits_only_for_background_pieces_in_flight)
{
	struct zn_aio_req bg, param;
	struct zn_aio_piece p[8];

	submit(&bg, ZN_AIO_READ, 6, ZN_AIO_PRIO_BACKGROUND);
	cr_assert_eq(take(&p[0]), &bg);
	cr_assert_eq(take(&p[1]), &bg);
	/* the parameter read arrives while 4 pieces of the state read are still queued */
	submit(&param, ZN_AIO_READ, 1, ZN_AIO_PRIO_NORMAL);
	cr_assert_eq(take(&p[2]), &param);
	cr_assert_null(take(&p[3]));
	finish(&p[0]);
	finish(&p[1]);
	finish(&p[2]);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(take(&p[i]), &bg);
		finish(&p[i]);
	}
	cr_assert(bg.done && param.done);
}

Test(nvme_aio_queue, promoted_request_is_normal)
{
	struct zn_aio_req bg1, bg2, param;
	struct zn_aio_piece p[4];

	submit(&bg1, ZN_AIO_READ, 1, ZN_AIO_PRIO_BACKGROUND);
	submit(&bg2, ZN_AIO_READ, 1, ZN_AIO_PRIO_BACKGROUND);
	submit(&param, ZN_AIO_READ, 1, ZN_AIO_PRIO_NORMAL);
	/* AdamW waits for bg2 now: it goes in order with the normal reads, before bg1 */
	zn_aio_promote(&bg2);
	cr_assert_eq(take(&p[0]), &bg2);
	cr_assert_eq(take(&p[1]), &param);
	cr_assert_eq(take(&p[2]), &bg1);
	cr_assert_eq(aio.background_inflight, 1, "a promoted piece is not counted as background");
	for (int i = 0; i < 3; i++)
		finish(&p[i]);
	cr_assert_eq(aio.background_inflight, 0);
	zn_aio_promote(&bg2); /* finished: nothing to do */
}

Test(nvme_aio_queue, writes_are_not_held_by_background_reads)
{
	struct zn_aio_req bg, wr;
	struct zn_aio_piece p[4];

	submit(&bg, ZN_AIO_READ, 1, ZN_AIO_PRIO_BACKGROUND);
	submit(&wr, ZN_AIO_WRITE, 1, ZN_AIO_PRIO_NORMAL);
	cr_assert_eq(take(&p[0]), &wr, "the write-behind goes before read-ahead");
	cr_assert_eq(take(&p[1]), &bg);
	finish(&p[0]);
	finish(&p[1]);
}

Test(nvme_aio_queue, capped_direction_does_not_hold_the_other)
{
	struct zn_aio_req rd, bg, wr;
	struct zn_aio_piece p[4];

	zn_aio_cap_init(&aio.cap[ZN_AIO_READ], 4096, 0);
	/* the read bucket is empty far into the future */
	aio.cap[ZN_AIO_READ].tat_ns = UINT64_MAX / 2;
	submit(&rd, ZN_AIO_READ, 1, ZN_AIO_PRIO_NORMAL);
	submit(&bg, ZN_AIO_READ, 1, ZN_AIO_PRIO_BACKGROUND);
	submit(&wr, ZN_AIO_WRITE, 1, ZN_AIO_PRIO_NORMAL);
	cr_assert_eq(take(&p[0]), &wr, "the write goes while the reads wait for the read cap");
	cr_assert_null(take(&p[1]), "no read goes past the read cap, background or not");
	finish(&p[0]);
	zn_aio_cap_init(&aio.cap[ZN_AIO_READ], 0, 0);
	cr_assert_eq(take(&p[1]), &rd);
	cr_assert_eq(take(&p[2]), &bg);
	finish(&p[1]);
	finish(&p[2]);
}

Test(nvme_aio_queue, bad_priority_is_rejected)
{
	struct zn_aio_io io = { .op = ZN_AIO_READ, .file = &file, .bytes = 4096, .buf_h = buf,
				.prio = (enum zn_aio_prio)7 };
	struct zn_aio_req r;

	cr_assert_eq(zn_aio_submit(&aio, &io, &r), -EINVAL);
	cr_assert_eq(zn_aio_poll(&r), -EINVAL);
	cr_assert_null(aio.head);
}
