/* The store's tiered home (src/store/home.h) on the host device: items copied down into
 * pinned buffers, homed there or written behind to nvme extents (a temporary directory),
 * read ahead and waited for, copied back up bit for bit; the bytes each item moves; an
 * injected write or read error names the item, the operation and the swap file; a home on
 * a swap store it is given (the parameters' extents: kind ZN_SWAP_PARAM, items of their
 * own sizes, buffers of their own sizes), its ready query and read submission times. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <string.h>

#include "core/rand.h"
#include "core/trace.h"
#include "cpu/arena.h"
#include "nvme_test_util.h"
#include "store/home.h"

#define ITEMS 6
#define FLOATS 750 /* 3000 bytes: an extent of 4 KiB */

struct fixture {
	struct zn_device *dev;
	struct zn_stream *s;
	struct zn_arena *arena;
	struct zn_config cfg;
	float *src_d[ITEMS], *dst_d;
	char dir[ZN_PATH_MAX];
};

static void name_of(const void *ctx, int id, char *out, size_t size)
{
	snprintf(out, size, "%s %d", (const char *)ctx, id);
}

static void setup(struct fixture *f)
{
	struct zn_device_config dc = { .kind = ZN_DEVICE_HOST };
	struct zn_arena_config ac;

	memset(f, 0, sizeof(*f));
	zn_config_defaults(&f->cfg);
	cr_assert_eq(zn_device_create(&f->dev, &dc), 0);
	cr_assert_eq(zn_stream_create(f->dev, &f->s), 0);
	zn_arena_config_init(&ac, NULL);
	ac.bytes = 1 << 20;
	ac.pin_required = false;
	cr_assert_eq(zn_arena_create(&f->arena, &ac), 0);
	for (int i = 0; i < ITEMS; i++) {
		cr_assert_eq(zn_device_alloc(f->dev, (void **)&f->src_d[i], FLOATS * 4), 0);
		/* seeded, different per item: the host device's memory is the host's */
		for (int j = 0; j < FLOATS; j++)
			f->src_d[i][j] = zn_normal_at(27 + (uint64_t)i, (uint64_t)j);
	}
	cr_assert_eq(zn_device_alloc(f->dev, (void **)&f->dst_d, FLOATS * 4), 0);
}

static void teardown(struct fixture *f)
{
	for (int i = 0; i < ITEMS; i++)
		zn_device_free(f->dev, f->src_d[i]);
	zn_device_free(f->dev, f->dst_d);
	zn_arena_destroy(f->arena);
	zn_stream_destroy(f->s);
	zn_device_destroy(f->dev);
}

static void open_home(struct fixture *f, struct zn_home *h, enum zn_tier tier, int buf_n)
{
	struct zn_home_config c = {
		.tier = tier, .count = ITEMS, .buf_n = buf_n, .item_bytes = FLOATS * 4,
		.kind = ZN_SWAP_ACTIVATION, .dev = f->dev, .arena = f->arena, .rank = 0,
		.paths = &f->cfg.act_ckpt.home,
		.run_id = "", .what = "home", .aio = &f->cfg.aio, .name = name_of,
		.ctx = "test item",
	};

	if (tier == ZN_TIER_NVME) {
		nvme_test_dir(f->dir, sizeof(f->dir));
		f->cfg.act_ckpt.home.nvme_path_count = 1;
		snprintf(f->cfg.act_ckpt.home.nvme_path[0], ZN_PATH_MAX, "%s", f->dir);
	}
	cr_assert_eq(zn_home_open(h, &c), 0);
	cr_assert_eq(h->c.buf_n, buf_n);
	for (int i = 0; i < buf_n; i++)
		cr_assert(zn_home_buf(h, i)->id == -1 && zn_home_buf(h, i)->state == ZN_HOME_FREE);
}

/* item i copied down into buffer b and put (written behind on nvme) */
static int put_item(struct fixture *f, struct zn_home *h, struct zn_home_buf *b, int i)
{
	int rc = zn_home_settle(h, b);

	cr_assert_eq(rc, 0, "buffer settled before item %d (%d)", i, rc);
	cr_assert_eq(zn_memcpy_async(f->s, b->h, f->src_d[i], FLOATS * 4, ZN_COPY_D2H), 0);
	cr_assert_eq(zn_event_record(b->down, f->s), 0);
	zn_home_filled(b, i);
	cr_assert(b->id == i && b->state == ZN_HOME_DOWN);
	return zn_home_put(h, b);
}

/* b (holding item i) copied up and compared bit for bit with the item's source */
static void check_up(struct fixture *f, struct zn_home *h, struct zn_home_buf *b, int i)
{
	memset(f->dst_d, 0xa5, FLOATS * 4);
	cr_assert_eq(zn_memcpy_async(f->s, f->dst_d, b->h, FLOATS * 4, ZN_COPY_H2D), 0);
	cr_assert_eq(zn_event_record(b->up, f->s), 0);
	zn_home_emptying(h, b);
	cr_assert_eq(zn_stream_synchronize(f->s), 0);
	for (int j = 0; j < FLOATS; j++)
		cr_assert(memcmp(&f->dst_d[j], &f->src_d[i][j], 4) == 0,
			  "item %d float %d: %a read back, %a written", i, j, (double)f->dst_d[j],
			  (double)f->src_d[i][j]);
}

Test(store_home, host_items_live_in_their_buffers)
{
	struct fixture f;
	struct zn_home h;

	setup(&f);
	open_home(&f, &h, ZN_TIER_HOST, ITEMS);
	cr_assert_null(zn_home_aio(&h), "no nvme engine in pinned memory");
	for (int i = 0; i < ITEMS; i++)
		cr_assert_eq(put_item(&f, &h, zn_home_buf(&h, i), i), 0);
	/* put writes nothing on the host: each buffer still holds its copy down */
	for (int i = 0; i < ITEMS; i++)
		cr_assert_eq(zn_home_buf(&h, i)->state, ZN_HOME_DOWN);
	for (int i = ITEMS - 1; i >= 0; i--) {
		struct zn_home_buf *b = zn_home_buf(&h, i);

		cr_assert_eq(zn_home_read_ahead(&h, b, i), 0);
		cr_assert_eq(zn_home_wait(&h, b), 0);
		check_up(&f, &h, b, i);
		/* the buffer is the item's home: a copy up leaves it as it was */
		cr_assert(b->id == i && b->state == ZN_HOME_DOWN);
	}
	cr_assert_eq(zn_home_quiesce(&h), 0);
	for (int i = 0; i < ITEMS; i++)
		cr_assert_eq(zn_home_buf(&h, i)->state, ZN_HOME_FREE);
	zn_home_close(&h);
	cr_assert_null(h.buf);
	teardown(&f);
}

Test(store_home, nvme_items_written_behind_and_read_ahead)
{
	struct fixture f;
	struct zn_aio_stats io;
	struct zn_home h;

	setup(&f);
	open_home(&f, &h, ZN_TIER_NVME, 2);
	cr_assert_not_null(zn_home_aio(&h));
	/* six items through two staging buffers: settling a buffer waits its previous write */
	for (int i = 0; i < ITEMS; i++) {
		cr_assert_eq(put_item(&f, &h, zn_home_buf(&h, i % 2), i), 0);
		cr_assert_eq(zn_home_buf(&h, i % 2)->state, ZN_HOME_WRITING);
	}
	cr_assert_eq(zn_home_quiesce(&h), 0);
	zn_aio_get_stats(zn_home_aio(&h), &io);
	cr_assert_eq(io.bytes_written, ITEMS * 4096ull, "each item's 4 KiB extent written once "
		     "(%llu bytes)", (unsigned long long)io.bytes_written);
	cr_assert_eq(io.bytes_read, 0);
	/* read ahead two, then wait and copy up each; again for the next two */
	for (int i = ITEMS - 1; i >= 1; i -= 2) {
		struct zn_home_buf *a = zn_home_buf(&h, 0), *b = zn_home_buf(&h, 1);

		cr_assert_eq(zn_home_read_ahead(&h, a, i), 0);
		cr_assert_eq(zn_home_read_ahead(&h, b, i - 1), 0);
		/* a read already under way is not issued again */
		cr_assert_eq(zn_home_read_ahead(&h, a, i), 0);
		cr_assert(a->state == ZN_HOME_READING && a->id == i);
		cr_assert_eq(zn_home_wait(&h, a), 0);
		check_up(&f, &h, a, i);
		cr_assert_eq(a->state, ZN_HOME_UP);
		cr_assert_eq(zn_home_wait(&h, b), 0);
		check_up(&f, &h, b, i - 1);
	}
	cr_assert_eq(zn_home_quiesce(&h), 0);
	zn_aio_get_stats(zn_home_aio(&h), &io);
	cr_assert_eq(io.bytes_read, ITEMS * 4096ull, "each item read once (%llu bytes)",
		     (unsigned long long)io.bytes_read);
	zn_home_close(&h);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}

Test(store_home, nvme_write_fault_names_the_item, .init = cr_redirect_stderr)
{
	struct fixture f;
	struct zn_home h;
	int rc;

	setup(&f);
	open_home(&f, &h, ZN_TIER_NVME, 2);
	cr_assert_eq(put_item(&f, &h, zn_home_buf(&h, 0), 0), 0);
	cr_assert_eq(zn_home_settle(&h, zn_home_buf(&h, 0)), 0, "item 0 written unfaulted");
	zn_aio_set_fault(zn_home_aio(&h),
			 &(struct zn_aio_fault){ .nth = 1, .err = EIO, .writes_only = true });
	cr_assert_eq(put_item(&f, &h, zn_home_buf(&h, 1), 3), 0, "the write is submitted");
	rc = zn_home_settle(&h, zn_home_buf(&h, 1));
	cr_assert_eq(rc, -EIO, "the failed write is reported at settle (%d)", rc);
	cr_assert_eq(zn_home_buf(&h, 1)->state, ZN_HOME_FREE);
	cr_assert(nvme_test_stderr_has("test item 3:", "nvme write of"),
		  "the error names the item and the write");
	cr_assert(nvme_test_stderr_has("test item 3:", "zinc-swap-"), "and the swap file");
	zn_home_close(&h);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}

Test(store_home, nvme_read_fault_names_the_item, .init = cr_redirect_stderr)
{
	struct fixture f;
	struct zn_home h;
	int rc;

	setup(&f);
	open_home(&f, &h, ZN_TIER_NVME, 2);
	for (int i = 0; i < ITEMS; i++)
		cr_assert_eq(put_item(&f, &h, zn_home_buf(&h, i % 2), i), 0);
	cr_assert_eq(zn_home_quiesce(&h), 0);
	zn_aio_set_fault(zn_home_aio(&h), &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_assert_eq(zn_home_read_ahead(&h, zn_home_buf(&h, 0), 4), 0);
	rc = zn_home_wait(&h, zn_home_buf(&h, 0));
	cr_assert_eq(rc, -EIO, "the failed read is reported at wait (%d)", rc);
	cr_assert(nvme_test_stderr_has("test item 4:", "nvme read of"),
		  "the error names the item and the read");
	cr_assert(nvme_test_stderr_has("test item 4:", "zinc-swap-"), "and the swap file");
	/* the next read of the same item succeeds: the fault hit one piece */
	cr_assert_eq(zn_home_read_ahead(&h, zn_home_buf(&h, 0), 4), 0);
	cr_assert_eq(zn_home_wait(&h, zn_home_buf(&h, 0)), 0);
	check_up(&f, &h, zn_home_buf(&h, 0), 4);
	zn_home_close(&h);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}

/* a bare host home (layer-major's pinned boundaries): buffers only, no events, each its
 * own 4 KiB-aligned view of the arena, every one FREE through quiesce and close */
Test(store_home, bare_host_home_is_buffers_only)
{
	struct zn_home_config c;
	struct fixture f;
	struct zn_home h;

	setup(&f);
	c = (struct zn_home_config){ .tier = ZN_TIER_HOST, .count = ITEMS, .buf_n = ITEMS,
				     .item_bytes = FLOATS * 4, .dev = f.dev, .arena = f.arena,
				     .bare = true };
	cr_assert_eq(zn_home_open(&h, &c), 0);
	for (int i = 0; i < ITEMS; i++) {
		struct zn_home_buf *b = zn_home_buf(&h, i);

		cr_assert(b->h && b->down == NULL && b->up == NULL, "buffer %d: view, no events", i);
		cr_assert_eq((uintptr_t)b->h % 4096, 0, "buffer %d aligned", i);
		for (int j = 0; j < i; j++)
			cr_assert((char *)zn_home_buf(&h, j)->h + 4096 <= (char *)b->h ||
				  (char *)b->h + 4096 <= (char *)zn_home_buf(&h, j)->h,
				  "buffers %d and %d do not overlap", j, i);
		memcpy(b->h, f.src_d[i], FLOATS * 4);
	}
	cr_assert_eq(zn_home_quiesce(&h), 0);
	for (int i = 0; i < ITEMS; i++)
		cr_assert(memcmp(zn_home_buf(&h, i)->h, f.src_d[i], FLOATS * 4) == 0 &&
			  zn_home_buf(&h, i)->state == ZN_HOME_FREE, "buffer %d kept", i);
	zn_home_close(&h);
	teardown(&f);
}

/* A given swap store holding ZN_SWAP_PARAM extents of different sizes (the parameters'
 * shards: layer 0 the largest), written outside the home, read through it: each item's
 * exact bytes, into buffers of their own sizes; the store outlives the home. */
#define GIVEN_N 3
static const uint64_t given_size[GIVEN_N] = { 12288, 4096, 8192 };

static void open_given(struct fixture *f, struct zn_aio **aio, struct zn_swap **swap)
{
	struct zn_swap_extent ext[GIVEN_N];
	struct zn_swap_config sc = { .rank = 0, .extents = ext, .extent_count = GIVEN_N,
				     .stripe_bytes = 1 << 20, .checksum = true, .run_id = "given" };

	for (int i = 0; i < GIVEN_N; i++)
		ext[i] = (struct zn_swap_extent){ { ZN_SWAP_PARAM, i, 0 }, given_size[i], 0 };
	nvme_test_dir(f->dir, sizeof(f->dir));
	f->cfg.zero.offload_param.nvme_path_count = 1;
	snprintf(f->cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", f->dir);
	zn_swap_config_set_paths(&sc, &f->cfg.zero.offload_param);
	cr_assert_eq(zn_aio_create(aio, &f->cfg.aio), 0);
	cr_assert_eq(zn_swap_create(swap, *aio, &sc), 0);
}

Test(store_home, nvme_home_on_a_given_store_reads_its_param_extents)
{
	uint64_t buf_bytes[2] = { 8192, 12288 }, end, t_open;
	struct zn_home_config c;
	struct zn_aio_stats io;
	struct zn_swap_req req;
	struct zn_swap *swap;
	struct zn_aio *aio;
	struct fixture f;
	struct zn_home h;
	char *src[GIVEN_N];

	setup(&f);
	open_given(&f, &aio, &swap);
	for (int i = 0; i < GIVEN_N; i++) {
		src[i] = nvme_test_alloc(given_size[i]);
		nvme_test_fill(src[i], given_size[i], 90 + (uint64_t)i);
		cr_assert_eq(zn_swap_write(swap, (struct zn_swap_key){ ZN_SWAP_PARAM, i, 0 }, 0,
					   given_size[i], src[i], &req), 0);
		cr_assert_eq(zn_swap_wait(&req), 0);
	}
	zn_aio_get_stats(aio, &io);
	end = io.bytes_read;
	c = (struct zn_home_config){ .tier = ZN_TIER_NVME, .count = GIVEN_N, .buf_n = 2,
				     .item_size = given_size, .buf_bytes = buf_bytes,
				     .kind = ZN_SWAP_PARAM, .store = swap, .engine = aio,
				     .dev = f.dev, .arena = f.arena, .what = "params" };
	cr_assert_eq(zn_home_open(&h, &c), 0);
	cr_assert_eq(zn_home_aio(&h), aio, "the given engine");
	cr_assert(zn_home_buf(&h, 0)->bytes == 8192 && zn_home_buf(&h, 1)->bytes == 12288);
	cr_assert(zn_home_ready(&h, zn_home_buf(&h, 0)), "a free buffer is ready");
	/* item 0 (12 KiB) into the large buffer, then 1 and 2 through the small one */
	t_open = zn_trace_now_ns();
	for (int i = 0; i < GIVEN_N; i++) {
		struct zn_home_buf *b = zn_home_buf(&h, i == 0 ? 1 : 0);

		cr_assert_eq(zn_home_read_ahead(&h, b, i), 0, "item %d read through kind 0", i);
		cr_assert(b->t0 >= t_open && b->t0 <= zn_trace_now_ns(), "submission time kept");
		while (!zn_home_ready(&h, b))
			; /* the read completes: ready turns true without waiting */
		cr_assert_eq(zn_home_wait(&h, b), 0);
		cr_assert(b->state == ZN_HOME_FREE && b->id == i);
		nvme_test_compare(b->h, src[i], given_size[i], "item read through the home");
	}
	zn_aio_get_stats(aio, &io);
	cr_assert_eq(io.bytes_read - end, 12288 + 4096 + 8192ull,
		     "each item's exact bytes read (%llu)",
		     (unsigned long long)(io.bytes_read - end));
	zn_home_close(&h);
	/* the store outlives the home: its extents still read */
	memset(src[0], 0, given_size[0]);
	cr_assert_eq(zn_swap_read(swap, (struct zn_swap_key){ ZN_SWAP_PARAM, 2, 0 }, 0,
				  given_size[2], src[0], &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	nvme_test_compare(src[0], src[2], given_size[2], "the store after the home's close");
	for (int i = 0; i < GIVEN_N; i++)
		free(src[i]);
	zn_swap_destroy(swap);
	zn_aio_destroy(aio);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}

/* an item larger than the buffer it is read into is refused, naming the home */
Test(store_home, item_larger_than_its_buffer_is_refused, .init = cr_redirect_stderr)
{
	uint64_t buf_bytes[1] = { 4096 };
	struct zn_home_config c;
	struct zn_swap *swap;
	struct zn_aio *aio;
	struct fixture f;
	struct zn_home h;

	setup(&f);
	open_given(&f, &aio, &swap);
	c = (struct zn_home_config){ .tier = ZN_TIER_NVME, .count = GIVEN_N, .buf_n = 1,
				     .item_size = given_size, .buf_bytes = buf_bytes,
				     .kind = ZN_SWAP_PARAM, .store = swap, .engine = aio,
				     .dev = f.dev, .arena = f.arena, .what = "params" };
	cr_assert_eq(zn_home_open(&h, &c), 0);
	cr_assert_eq(zn_home_read_ahead(&h, zn_home_buf(&h, 0), 0), -EINVAL);
	cr_assert(zn_home_buf(&h, 0)->state == ZN_HOME_FREE && zn_home_buf(&h, 0)->id == -1,
		  "nothing submitted, the buffer as it was");
	cr_assert(nvme_test_stderr_has("home params:", "does not fit"));
	zn_home_close(&h);
	/* a store without its engine is refused */
	c.engine = NULL;
	cr_assert_eq(zn_home_open(&h, &c), -EINVAL);
	zn_home_close(&h);
	zn_swap_destroy(swap);
	zn_aio_destroy(aio);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}

/* Items of several segments (the optimizer's chunks: a chunk of a layer's master in the
 * home's store and of its m in another), written from the host behind, read at background
 * priority, promoted and waited: each chunk's bytes at their offsets in both extents; a
 * failed read names the segment's file. */
#define CHUNKS 3

struct two_stores {
	struct zn_swap *a, *b; /* master (the home's), m */
	bool bad;              /* m's range names an extent the store lacks */
};

static int chunk_segs(const void *ctx, int id, bool write, struct zn_home_seg *out)
{
	const struct two_stores *t = ctx;

	(void)write;
	out[0] = (struct zn_home_seg){ NULL, { ZN_SWAP_MASTER, 0, 0 }, (uint64_t)id * 4096,
				       4096, 0 };
	out[1] = (struct zn_home_seg){ t->b, { ZN_SWAP_EXP_AVG, t->bad ? 9 : 0, 0 },
				       (uint64_t)id * 4096, 4096, 4096 };
	return 2;
}

static void make_store(struct fixture *f, struct zn_aio *aio, int kind, const char *run,
		       struct zn_swap **out)
{
	struct zn_swap_extent ext = { { kind, 0, 0 }, CHUNKS * 4096, 4096 };
	struct zn_swap_config sc = { .rank = 0, .extents = &ext, .extent_count = 1,
				     .stripe_bytes = 1 << 20, .checksum = true, .run_id = run };

	zn_swap_config_set_paths(&sc, &f->cfg.zero.offload_optimizer);
	cr_assert_eq(zn_swap_create(out, aio, &sc), 0);
}

Test(store_home, items_of_segments_in_two_stores, .init = cr_redirect_stderr)
{
	struct two_stores t = { 0 };
	struct zn_home_config c;
	struct zn_aio *aio;
	struct fixture f;
	struct zn_home h;
	char *src[CHUNKS];
	uint64_t t_open;
	int rc;

	setup(&f);
	nvme_test_dir(f.dir, sizeof(f.dir));
	f.cfg.zero.offload_optimizer.nvme_path_count = 1;
	snprintf(f.cfg.zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", f.dir);
	cr_assert_eq(zn_aio_create(&aio, &f.cfg.aio), 0);
	zn_aio_set_timing(aio, true);
	make_store(&f, aio, ZN_SWAP_MASTER, "segs-a", &t.a);
	make_store(&f, aio, ZN_SWAP_EXP_AVG, "segs-b", &t.b);
	c = (struct zn_home_config){ .tier = ZN_TIER_NVME, .count = CHUNKS, .buf_n = 2,
				     .item_bytes = 8192, .kind = ZN_SWAP_MASTER, .store = t.a,
				     .engine = aio, .dev = f.dev, .arena = f.arena,
				     .what = "optim", .segs = chunk_segs, .ctx = &t };
	cr_assert_eq(zn_home_open(&h, &c), 0);
	/* each chunk filled on the host and written behind; its two segments land apart */
	for (int i = 0; i < CHUNKS; i++) {
		struct zn_home_buf *b = zn_home_buf(&h, i % 2);

		cr_assert_eq(zn_home_settle(&h, b), 0);
		src[i] = nvme_test_alloc(8192);
		nvme_test_fill(src[i], 8192, 40 + (uint64_t)i);
		memcpy(b->h, src[i], 8192);
		cr_assert_eq(zn_home_write(&h, b, i), 0);
		cr_assert(b->state == ZN_HOME_WRITING && b->nreq == 2 && b->id == i);
	}
	cr_assert_eq(zn_home_quiesce(&h), 0);
	/* read back in the other order at background priority */
	t_open = zn_trace_now_ns();
	for (int i = CHUNKS - 1; i >= 0; i--) {
		struct zn_home_buf *b = zn_home_buf(&h, i % 2);

		memset(b->h, 0, 8192);
		cr_assert_eq(zn_home_read_ahead_prio(&h, b, i, ZN_AIO_PRIO_BACKGROUND), 0);
		zn_home_promote(b);
		cr_assert_eq(zn_home_wait(&h, b), 0);
		cr_assert(zn_home_idle(&h, b) && b->state == ZN_HOME_FREE);
		cr_assert(zn_home_done_ns(b) >= t_open, "completion stamped");
		nvme_test_compare(b->h, src[i], 8192, "a chunk's two segments read back");
	}
	/* the m extent holds the chunks' second halves at their offsets */
	{
		struct zn_swap_req req;
		char *m = nvme_test_alloc(CHUNKS * 4096);

		cr_assert_eq(zn_swap_read(t.b, (struct zn_swap_key){ ZN_SWAP_EXP_AVG, 0, 0 }, 0,
					  CHUNKS * 4096, m, &req), 0);
		cr_assert_eq(zn_swap_wait(&req), 0);
		for (int i = 0; i < CHUNKS; i++)
			nvme_test_compare(m + i * 4096, src[i] + 4096, 4096, "m chunk in place");
		free(m);
	}
	/* a copy down into a buffer on nvme is still to be written: settling it would block
	 * (it writes the item first) */
	{
		struct zn_home_buf *b = zn_home_buf(&h, 0);

		memcpy(b->h, src[0], 8192);
		cr_assert_eq(zn_event_record(b->down, f.s), 0);
		zn_home_filled(b, 0);
		cr_assert(!zn_home_idle(&h, b), "a copy down not yet written is not idle");
		cr_assert_eq(zn_home_settle(&h, b), 0, "settle writes it");
		cr_assert(zn_home_idle(&h, b) && b->state == ZN_HOME_FREE);
	}
	/* a range the store cannot submit (no such extent) after one that it could: the
	 * submitted one is waited, the buffer left FREE, the error returned */
	t.bad = true;
	rc = zn_home_read_ahead(&h, zn_home_buf(&h, 1), 2);
	cr_assert(rc < 0, "the bad range's submission fails the read (%d)", rc);
	cr_assert_eq(zn_home_buf(&h, 1)->state, ZN_HOME_FREE, "nothing left in flight");
	t.bad = false;
	/* the first request (the master's) fails: the line names the master's store file */
	zn_aio_set_fault(aio, &(struct zn_aio_fault){ .nth = 1, .err = EIO });
	cr_assert_eq(zn_home_read_ahead(&h, zn_home_buf(&h, 0), 1), 0);
	rc = zn_home_wait(&h, zn_home_buf(&h, 0));
	cr_assert_eq(rc, -EIO, "the failed read is reported (%d)", rc);
	/* (the redirected stderr is read once, after both errors) */
	cr_assert(nvme_test_stderr_has("item 2:", "nvme read"), "the bad range names the item");
	cr_assert(nvme_test_stderr_has("item 1:", "segs-a"), "the error names the master's file");
	zn_home_close(&h);
	for (int i = 0; i < CHUNKS; i++)
		free(src[i]);
	zn_swap_destroy(t.a);
	zn_swap_destroy(t.b);
	zn_aio_destroy(aio);
	teardown(&f);
	nvme_test_rmdir(f.dir);
}
