/* The swap store: random extents striped over several paths written and read back (whole
 * and in parts, from several threads), file modes, reservation, a full disk found before
 * anything is written, cleanup at destroy and after a crash, the checksum catching a
 * corrupted file. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "nvme/aio.h"
#include "nvme/crc32c.h"
#include "nvme/swap.h"
#include "nvme_test_util.h"

static char dir[ZN_PATH_MAX];
static char sub[3][ZN_PATH_MAX + 16];

static void setup(void)
{
	int i;

	if (dir[0])
		return;
	nvme_test_dir(dir, sizeof(dir));
	for (i = 0; i < 3; i++) {
		snprintf(sub[i], sizeof(sub[i]), "%s/nvme%d", dir, i);
		cr_assert_eq(mkdir(sub[i], 0755), 0);
	}
}

static void teardown(void)
{
	if (dir[0])
		nvme_test_rmdir(dir);
	dir[0] = 0;
}

TestSuite(nvme_swap, .init = setup, .fini = teardown, .timeout = 120);

static struct zn_aio *engine(enum zn_aio_backend b, int rings)
{
	struct zn_aio_config c = {
		.block_size_bytes = 32768, .queue_depth = 8, .intra_op_parallelism = rings,
		.overlap_events = true,
	};
	struct zn_aio *aio;
	int rc = zn_aio_create_backend(&aio, &c, b);

	if (rc == -ENOSYS)
		cr_skip_test("io_uring is not available here (kernel, seccomp or valgrind)");
	cr_assert_eq(rc, 0);
	return aio;
}

static struct zn_swap_config swap_cfg(int paths, const struct zn_swap_extent *ext, size_t n)
{
	struct zn_swap_config c = {
		.path_count = paths, .run_id = "test", .rank = 0, .extents = ext,
		.extent_count = n, .stripe_bytes = 65536, .checksum = true,
	};
	int i;

	for (i = 0; i < paths; i++)
		c.paths[i] = sub[i];
	return c;
}

enum { NEXT = 12 };

static void make_extents(struct zn_swap_extent *ext, uint64_t *seed)
{
	int i;

	for (i = 0; i < NEXT; i++) {
		ext[i].key = (struct zn_swap_key){ i % 5, i / 5, 0 };
		/* 4 KiB .. 600 KiB, some not a multiple of 4 KiB (rounded up by the store) */
		ext[i].bytes = 4096 + nvme_test_rand(seed) % (600 << 10);
	}
}

/* Checks byte `off` of extent `key` against the file where zn_swap_locate() says it is. */
static void check_located(struct zn_swap *s, struct zn_swap_key key, uint64_t off,
			  const char *want)
{
	uint64_t foff;
	int path, fd;
	char *blk = nvme_test_alloc(4096);

	cr_assert_eq(zn_swap_locate(s, key, off, &path, &foff), 0);
	/* The swap file itself, read around the store to check the layout. */
	fd = open(zn_swap_file(s, path), O_RDONLY | O_DIRECT);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, blk, 4096, (off_t)(foff & ~4095ull)), 4096);
	cr_assert_eq(memcmp(blk + (foff & 4095), want, 8), 0, "layout: byte %llu of extent",
		     (unsigned long long)off);
	close(fd);
	free(blk);
}

static void roundtrip(enum zn_aio_backend b, int paths, int rings)
{
	struct zn_swap_extent ext[NEXT];
	struct zn_swap_req req[NEXT];
	uint64_t seed = 42 + (uint64_t)paths, bytes[NEXT];
	char *src[NEXT], *dst[NEXT];
	struct zn_aio *aio = engine(b, rings);
	struct zn_swap *s;
	int i, k;

	make_extents(ext, &seed);
	struct zn_swap_config c = swap_cfg(paths, ext, NEXT);
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	for (i = 0; i < NEXT; i++) {
		cr_assert_eq(zn_swap_extent_bytes(s, ext[i].key, &bytes[i]), 0);
		cr_assert_eq(bytes[i] % 4096, 0);
		cr_assert_geq(bytes[i], ext[i].bytes);
		src[i] = nvme_test_alloc(bytes[i]);
		dst[i] = nvme_test_alloc(bytes[i]);
		nvme_test_fill(src[i], bytes[i], seed + (uint64_t)i);
	}
	for (i = 0; i < NEXT; i++)
		cr_assert_eq(zn_swap_write(s, ext[i].key, 0, bytes[i], src[i], &req[i]), 0);
	for (i = 0; i < NEXT; i++)
		cr_assert_eq(zn_swap_wait(&req[i]), 0);
	for (i = NEXT - 1; i >= 0; i--)
		cr_assert_eq(zn_swap_read(s, ext[i].key, 0, bytes[i], dst[i], &req[i]), 0);
	for (i = 0; i < NEXT; i++) {
		cr_assert_eq(zn_swap_wait(&req[i]), 0);
		nvme_test_compare(dst[i], src[i], bytes[i], "whole extent");
	}
	/* Random 4K-aligned sub-ranges, crossing stripe boundaries. */
	for (k = 0; k < 40; k++) {
		struct zn_swap_req r;
		uint64_t blocks = bytes[k % NEXT] / 4096;
		uint64_t first = nvme_test_rand(&seed) % blocks;
		uint64_t n = 1 + nvme_test_rand(&seed) % (blocks - first);
		char *got = nvme_test_alloc(n * 4096);

		i = k % NEXT;
		cr_assert_eq(zn_swap_read(s, ext[i].key, first * 4096, n * 4096, got, &r), 0);
		cr_assert_eq(zn_swap_wait(&r), 0);
		nvme_test_compare(got, src[i] + first * 4096, n * 4096, "sub-range");
		check_located(s, ext[i].key, first * 4096 + 8 * (k % 512), src[i] + first * 4096 +
			      8 * (k % 512));
		free(got);
	}
	zn_swap_destroy(s);
	zn_aio_destroy(aio);
	for (i = 0; i < NEXT; i++)
		free(src[i]), free(dst[i]);
}

Test(nvme_swap, stripes_3_paths_2_rings) { roundtrip(ZN_AIO_BACKEND_AUTO, 3, 2); }
Test(nvme_swap, one_path) { roundtrip(ZN_AIO_BACKEND_AUTO, 1, 1); }
Test(nvme_swap, stripes_pool) { roundtrip(ZN_AIO_BACKEND_POOL, 2, 2); }

Test(nvme_swap, striping_spreads_bytes)
{
	struct zn_swap_extent ext = { { ZN_SWAP_MASTER, 0, 0 }, 1 << 20, 0 };
	struct zn_aio *aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(3, &ext, 1);
	struct zn_swap *s;
	int seen[3] = { 0 }, p;
	uint64_t off, foff;

	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	for (off = 0; off < (1 << 20); off += 65536) {
		cr_assert_eq(zn_swap_locate(s, ext.key, off, &p, &foff), 0);
		cr_assert_eq(p, (int)((off / 65536) % 3), "stripe %llu", (unsigned long long)off);
		seen[p]++;
	}
	cr_assert(seen[0] == 6 && seen[1] == 5 && seen[2] == 5);
	zn_swap_destroy(s);
	zn_aio_destroy(aio);
}

struct conc {
	struct zn_swap *s;
	struct zn_swap_key key;
	uint64_t bytes;
	uint64_t seed;
	int rc;
};

static void *conc_main(void *arg)
{
	struct conc *c = arg;
	struct zn_swap_req r;
	char *a = nvme_test_alloc(c->bytes), *b = nvme_test_alloc(c->bytes);
	int round;

	for (round = 0; round < 4 && !c->rc; round++) {
		nvme_test_fill(a, c->bytes, c->seed + (uint64_t)round);
		c->rc = zn_swap_write(c->s, c->key, 0, c->bytes, a, &r);
		c->rc = c->rc ? c->rc : zn_swap_wait(&r);
		c->rc = c->rc ? c->rc : zn_swap_read(c->s, c->key, 0, c->bytes, b, &r);
		c->rc = c->rc ? c->rc : zn_swap_wait(&r);
		if (!c->rc && memcmp(a, b, c->bytes))
			c->rc = -EIO;
	}
	free(a);
	free(b);
	return NULL;
}

Test(nvme_swap, concurrent_reads_and_writes)
{
	enum { T = 4 };
	struct zn_swap_extent ext[T];
	struct conc c[T];
	pthread_t th[T];
	struct zn_aio *aio = engine(ZN_AIO_BACKEND_AUTO, 2);
	struct zn_swap *s;
	int i;

	for (i = 0; i < T; i++)
		ext[i] = (struct zn_swap_extent){ { ZN_SWAP_PARAM, i, 0 }, (uint64_t)(200 + 60 * i) << 10, 0 };
	struct zn_swap_config cfg = swap_cfg(2, ext, T);
	cr_assert_eq(zn_swap_create(&s, aio, &cfg), 0);
	for (i = 0; i < T; i++) {
		c[i] = (struct conc){ s, ext[i].key, ext[i].bytes, 1000 * (uint64_t)i, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, conc_main, &c[i]), 0);
	}
	for (i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(c[i].rc, 0, "thread %d: %s", i, zn_strerror(c[i].rc));
	}
	zn_swap_destroy(s);
	zn_aio_destroy(aio);
}

Test(nvme_swap, modes_reservation_and_cleanup)
{
	struct zn_swap_extent ext[2] = { { { ZN_SWAP_GRAD, 0, 0 }, 300000, 0 },
					 { { ZN_SWAP_GRAD, 1, 0 }, 500000, 0 } };
	struct zn_aio *aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(2, ext, 2);
	char dirs[2][ZN_PATH_MAX + 200], lock[ZN_PATH_MAX + 2500];
	struct zn_swap *s;
	struct stat st;
	int p;

	umask(0); /* the store must not depend on the umask for its modes */
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	umask(022);
	for (p = 0; p < 2; p++) {
		snprintf(dirs[p], sizeof(dirs[p]), "%s", zn_swap_dir(s, p));
		cr_assert_eq(lstat(dirs[p], &st), 0);
		cr_assert(S_ISDIR(st.st_mode));
		cr_assert_eq(st.st_mode & 07777, 0700, "dir mode %o", st.st_mode & 07777);
		cr_assert_not_null(strstr(dirs[p], "zinc-swap-test-r0-p"), "%s", dirs[p]);
		cr_assert_eq(lstat(zn_swap_file(s, p), &st), 0);
		cr_assert(S_ISREG(st.st_mode));
		cr_assert_eq(st.st_mode & 07777, 0600, "file mode %o", st.st_mode & 07777);
		/* Reserved: blocks allocated for the whole file before any write. */
		cr_assert_geq((uint64_t)st.st_blocks * 512, (uint64_t)st.st_size);
		cr_assert_geq((uint64_t)st.st_size * 2, 300000 + 500000, "size %lld",
			      (long long)st.st_size);
		snprintf(lock, sizeof(lock), "%s/lock", dirs[p]);
		cr_assert_eq(lstat(lock, &st), 0);
		cr_assert_eq(st.st_mode & 07777, 0600);
	}
	cr_assert_geq(zn_swap_reserved_bytes(s), 300000 + 500000);
	zn_swap_destroy(s);
	for (p = 0; p < 2; p++)
		cr_assert_neq(lstat(dirs[p], &st), 0, "%s survived destroy", dirs[p]);
	zn_aio_destroy(aio);
}

static bool file_contains(FILE *f, const char *a, const char *b)
{
	char line[4096];
	bool found = false;

	fflush(stderr);
	rewind(f);
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, a) && (!b || strstr(line, b));
	return found;
}

static void dir_count(const char *root, int *count)
{
	DIR *d = opendir(root);
	struct dirent *e;

	*count = 0;
	while (d && (e = readdir(d)))
		*count += !strncmp(e->d_name, "zinc-swap-", 10) || !strncmp(e->d_name, ".zinc", 5);
	if (d)
		closedir(d);
}

Test(nvme_swap, full_disk_found_before_writing, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext = { { ZN_SWAP_MASTER, 0, 0 }, 1ull << 50, 0 }; /* 1 PiB */
	struct zn_aio *aio;
	struct zn_swap *s = (void *)1;
	int n;

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(2, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), -ENOSPC);
	cr_assert_null(s);
	cr_assert(file_contains(cr_get_redirected_stderr(), "need 1.00 PiB on", "B free"),
		  "no 'need X PiB on PATH, Y GiB free' line");
	dir_count(sub[0], &n);
	cr_assert_eq(n, 0, "the failed store left a directory");
	zn_aio_destroy(aio);
	teardown();
}

Test(nvme_swap, fallocate_enospc_reported, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext = { { ZN_SWAP_MASTER, 0, 0 }, 1 << 20, 0 };
	struct zn_aio *aio;
	struct zn_swap *s;
	int n, p;

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(3, &ext, 1);
	c.inject_fallocate_errno = ENOSPC;
	cr_assert_eq(zn_swap_create(&s, aio, &c), -ENOSPC);
	/* 1 MiB in 64 KiB stripes over 3 paths: 6 stripes each, in the unit that fits (it
	 * read "need 0.00 GiB") */
	cr_assert(file_contains(cr_get_redirected_stderr(), "need 384.00 KiB on", "fallocate of"));
	for (p = 0; p < 3; p++) {
		dir_count(sub[p], &n);
		cr_assert_eq(n, 0, "path %d kept a directory after the failure", p);
	}
	c.inject_fallocate_errno = EOPNOTSUPP;
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EOPNOTSUPP);
	cr_assert(file_contains(cr_get_redirected_stderr(), "cannot reserve space", NULL));
	zn_aio_destroy(aio);
	teardown();
}

/* A child makes a store and dies without destroying it; the next start cleans up. */
Test(nvme_swap, crash_leftovers_removed_on_next_start, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext = { { ZN_SWAP_EXP_AVG, 2, 0 }, 256 << 10, 0 };
	struct zn_swap *s;
	struct zn_aio *aio;
	int status, n;
	pid_t pid;

	setup();
	pid = fork();
	cr_assert(pid >= 0);
	if (!pid) {
		struct zn_aio *a;
		struct zn_swap *cs;
		struct zn_swap_config c = swap_cfg(2, &ext, 1);
		struct zn_aio_config ac = { .block_size_bytes = 65536, .queue_depth = 2,
					    .intra_op_parallelism = 1 };

		if (zn_aio_create(&a, &ac) || zn_swap_create(&cs, a, &c))
			_exit(3);
		raise(SIGKILL); /* a crash: no destroy, no exit handlers */
		_exit(4);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %#x", status);
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	dir_count(sub[0], &n);
	cr_assert_eq(n, 1, "the crashed run's directory should be there");
	struct zn_swap_config c = swap_cfg(2, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	cr_assert(file_contains(cr_get_redirected_stderr(), "removed stale swap directory",
				"did not exit cleanly"));
	dir_count(sub[0], &n);
	cr_assert_eq(n, 1, "only this run's directory should remain");
	dir_count(sub[1], &n);
	cr_assert_eq(n, 1);
	zn_swap_destroy(s);
	dir_count(sub[0], &n);
	cr_assert_eq(n, 0);
	zn_aio_destroy(aio);
	teardown();
}

/* A live run with the same run id and rank holds its directory: refuse, do not remove. */
Test(nvme_swap, live_run_not_touched, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext = { { ZN_SWAP_PARAM, 0, 0 }, 64 << 10, 0 };
	int ready[2], quit[2], status;
	struct zn_swap *s;
	struct zn_aio *aio;
	char c1;
	pid_t pid;

	setup();
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(quit), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (!pid) {
		struct zn_aio *a;
		struct zn_swap *cs;
		struct zn_swap_config c = swap_cfg(1, &ext, 1);
		struct zn_aio_config ac = { .block_size_bytes = 65536, .queue_depth = 2,
					    .intra_op_parallelism = 1 };
		char x = 1;

		/* Only the parent's end of quit stays open: if it dies, read() sees EOF. */
		close(quit[1]);
		close(ready[0]);
		if (zn_aio_create(&a, &ac) || zn_swap_create(&cs, a, &c))
			_exit(3);
		if (write(ready[1], &x, 1) != 1 || read(quit[0], &x, 1) != 1)
			_exit(4);
		zn_swap_destroy(cs);
		zn_aio_destroy(a);
		_exit(0);
	}
	close(quit[0]);
	close(ready[1]);
	cr_assert_eq(read(ready[0], &c1, 1), 1, "the child could not make its store");
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(1, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EBUSY);
	cr_assert(file_contains(cr_get_redirected_stderr(), "in use by a running zinc", NULL));
	c.run_id = "other";
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0, "another run id shares the path");
	zn_swap_destroy(s);
	cr_assert_eq(write(quit[1], "x", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	zn_aio_destroy(aio);
	teardown();
}

Test(nvme_swap, checksum_catches_corruption, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext = { { ZN_SWAP_EXP_AVG_SQ, 7, 0 }, 300 << 10, 0 };
	struct zn_aio *aio;
	struct zn_swap *s;
	struct zn_swap_req r;
	char *a = nvme_test_alloc(300 << 10), *b = nvme_test_alloc(300 << 10);
	char *blk = nvme_test_alloc(4096);
	uint64_t foff;
	int p, fd;

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 2);
	struct zn_swap_config c = swap_cfg(2, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	nvme_test_fill(a, 300 << 10, 11);
	cr_assert_eq(zn_swap_write(s, ext.key, 0, 300 << 10, a, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	cr_assert_eq(zn_swap_read(s, ext.key, 0, 300 << 10, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0, "clean read must pass the check");
	/* Flip one bit of byte 200000 in the file, behind the store's back. */
	cr_assert_eq(zn_swap_locate(s, ext.key, 200000 & ~4095u, &p, &foff), 0);
	fd = open(zn_swap_file(s, p), O_RDWR | O_DIRECT);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, blk, 4096, (off_t)foff), 4096);
	blk[200000 % 4096] ^= 0x10;
	cr_assert_eq(pwrite(fd, blk, 4096, (off_t)foff), 4096);
	cr_assert_eq(zn_swap_read(s, ext.key, 0, 300 << 10, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), -EBADMSG);
	cr_assert(file_contains(cr_get_redirected_stderr(), "checksum mismatch",
				"(exp_avg_sq, layer 7, rank 0)"));
	/* A whole write makes it valid again. */
	cr_assert_eq(zn_swap_write(s, ext.key, 0, 300 << 10, a, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	cr_assert_eq(zn_swap_read(s, ext.key, 0, 300 << 10, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	nvme_test_compare(b, a, 300 << 10, "after rewrite");
	close(fd);
	zn_swap_destroy(s);
	zn_aio_destroy(aio);
	free(a), free(b), free(blk);
	teardown();
}

/* flips one bit of byte at of key's extent in its file, behind the store's back */
static void flip_byte(struct zn_swap *s, struct zn_swap_key key, uint64_t at)
{
	char *blk = nvme_test_alloc(4096);
	uint64_t foff;
	int p, fd;

	cr_assert_eq(zn_swap_locate(s, key, at & ~(uint64_t)4095, &p, &foff), 0);
	fd = open(zn_swap_file(s, p), O_RDWR | O_DIRECT);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, blk, 4096, (off_t)foff), 4096);
	blk[at % 4096] ^= 0x10;
	cr_assert_eq(pwrite(fd, blk, 4096, (off_t)foff), 4096);
	close(fd);
	free(blk);
}

/* An extent moved in chunks (the optimizer's staging) is checked chunk by chunk: a
 * corrupted chunk fails its read, naming its offset; the others read clean; a partial
 * write leaves only its own block unchecked. */
Test(nvme_swap, checksum_per_block_catches_a_chunk, .init = cr_redirect_stderr)
{
	enum { BLK = 64 << 10, LEN = 200 << 10 }; /* 3 blocks and a 8 KiB tail */
	struct zn_swap_extent ext = { { ZN_SWAP_EXP_AVG, 3, 0 }, LEN, BLK };
	struct zn_aio *aio;
	struct zn_swap *s;
	struct zn_swap_req r;
	char *a = nvme_test_alloc(LEN), *b = nvme_test_alloc(LEN);

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 2);
	struct zn_swap_config c = swap_cfg(2, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	nvme_test_fill(a, LEN, 5);
	/* written chunk by chunk, the tail chunk short */
	for (uint64_t off = 0; off < LEN; off += BLK) {
		uint64_t n = LEN - off < BLK ? LEN - off : BLK;

		cr_assert_eq(zn_swap_write(s, ext.key, off, n, a + off, &r), 0);
		cr_assert_eq(zn_swap_wait(&r), 0);
	}
	flip_byte(s, ext.key, BLK + 1234);
	flip_byte(s, ext.key, 3 * BLK + 100);
	cr_assert_eq(zn_swap_read(s, ext.key, 0, BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0, "a clean chunk reads");
	cr_assert_eq(zn_swap_read(s, ext.key, BLK, BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), -EBADMSG, "the corrupted chunk is caught");
	cr_assert(file_contains(cr_get_redirected_stderr(), "checksum mismatch",
				"(exp_avg, layer 3, rank 0) at byte 65536"));
	cr_assert_eq(zn_swap_read(s, ext.key, 3 * BLK, LEN - 3 * BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), -EBADMSG, "the short tail chunk is checked too");
	/* a whole read checks every block */
	cr_assert_eq(zn_swap_read(s, ext.key, 0, LEN, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), -EBADMSG);
	/* rewriting block 1 whole makes it valid; 8 KiB into block 2 drops block 2's check,
	 * so its (rewritten, then corrupted) bytes pass, while block 3 is still caught */
	cr_assert_eq(zn_swap_write(s, ext.key, BLK, BLK, a + BLK, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	cr_assert_eq(zn_swap_read(s, ext.key, BLK, BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	nvme_test_compare(b, a + BLK, BLK, "block 1 after its rewrite");
	cr_assert_eq(zn_swap_write(s, ext.key, 2 * BLK, 8192, a + 2 * BLK, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0);
	flip_byte(s, ext.key, 2 * BLK + 9000);
	cr_assert_eq(zn_swap_read(s, ext.key, 2 * BLK, BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), 0, "a partly written block is not checked");
	cr_assert_eq(zn_swap_read(s, ext.key, 3 * BLK, LEN - 3 * BLK, b, &r), 0);
	cr_assert_eq(zn_swap_wait(&r), -EBADMSG);
	zn_swap_destroy(s);
	/* a block that is no multiple of 4 KiB is refused at create */
	ext.crc_block = 6000;
	c = swap_cfg(2, &ext, 1);
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EINVAL);
	cr_assert(file_contains(cr_get_redirected_stderr(), "not a multiple of 4 KiB", ""));
	zn_aio_destroy(aio);
	free(a), free(b);
	teardown();
}

Test(nvme_swap, bad_requests_and_configs, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext[2] = { { { ZN_SWAP_PARAM, 0, 0 }, 65536, 0 },
					 { { ZN_SWAP_PARAM, 0, 0 }, 4096, 0 } };
	struct zn_aio *aio;
	struct zn_swap *s;
	struct zn_swap_req r;
	char *buf = nvme_test_alloc(65536 + 4096);

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	struct zn_swap_config c = swap_cfg(1, ext, 2);
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EINVAL, "duplicate key");
	c.extent_count = 1;
	c.run_id = "bad/id";
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EINVAL, "run id with a slash");
	c.run_id = "ok";
	c.path_count = 0;
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EINVAL, "no paths");
	c.path_count = 1;
	c.stripe_bytes = 1000;
	cr_assert_eq(zn_swap_create(&s, aio, &c), -EINVAL, "stripe not 4K");
	c.stripe_bytes = 0;
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	cr_assert_eq(zn_swap_read(s, (struct zn_swap_key){ 9, 9, 9 }, 0, 4096, buf, &r), -ENOENT);
	cr_assert_eq(zn_swap_wait(&r), -ENOENT);
	cr_assert_eq(zn_swap_read(s, ext[0].key, 0, 65536 + 4096, buf, &r), -ERANGE);
	cr_assert_eq(zn_swap_read(s, ext[0].key, 512, 4096, buf, &r), -EINVAL);
	cr_assert_eq(zn_swap_write(s, ext[0].key, 0, 4096, buf + 8, &r), -EINVAL);
	zn_swap_destroy(s);
	zn_swap_destroy(NULL);
	zn_aio_destroy(aio);
	free(buf);
	teardown();
}

Test(nvme_swap, crc32c_values)
{
	uint64_t seed = 5;
	size_t n;
	char *buf = nvme_test_alloc(1 << 20);

	cr_assert_eq(zn_crc32c(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(zn_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(zn_crc32c(0, "", 0), 0);
	nvme_test_fill(buf, 1 << 20, 6);
	/* Every length and alignment path of the fast version against the table. */
	for (n = 0; n < 200; n++) {
		size_t len = nvme_test_rand(&seed) % (1 << 20), off = nvme_test_rand(&seed) % 64;

		if (off + len > (1 << 20))
			len = (1 << 20) - off;
		cr_assert_eq(zn_crc32c(7, buf + off, len), zn_crc32c_sw(7, buf + off, len),
			     "len %zu off %zu", len, off);
	}
	/* Chaining equals one call. */
	cr_assert_eq(zn_crc32c(zn_crc32c(0, buf, 100000), buf + 100000, 300000),
		     zn_crc32c(0, buf, 400000));
	free(buf);
}

/* A second handle through another engine (zn_swap_attach): over 2 striped paths it reads
 * and writes the store's extents (sub-ranges crossing stripes), each engine counting only
 * its own bytes; destroying it leaves the store's files; a checksummed store refuses it. */
Test(nvme_swap, attached_handle_reads_and_writes_the_store, .init = cr_redirect_stderr)
{
	struct zn_swap_extent ext[NEXT] = { 0 };
	struct zn_aio *aio, *aio2;
	struct zn_swap_config c;
	struct zn_aio_stats st, st2;
	struct zn_swap *s, *a;
	struct zn_swap_req req;
	uint64_t seed = 7, bytes;
	char *src, *got, *back;
	struct stat sb;

	setup();
	aio = engine(ZN_AIO_BACKEND_AUTO, 1);
	aio2 = engine(ZN_AIO_BACKEND_POOL, 2);
	make_extents(ext, &seed);
	c = swap_cfg(2, ext, NEXT);
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	cr_assert_eq(zn_swap_attach(&a, s, aio2), -EINVAL, "a checksummed store");
	cr_assert_null(a);
	zn_swap_destroy(s);
	c.checksum = false;
	cr_assert_eq(zn_swap_create(&s, aio, &c), 0);
	cr_assert_eq(zn_swap_attach(&a, s, aio2), 0);
	cr_assert_str_eq(zn_swap_file(a, 1), zn_swap_file(s, 1));
	cr_assert_eq(zn_swap_extent_bytes(s, ext[3].key, &bytes), 0);
	src = nvme_test_alloc(bytes);
	got = nvme_test_alloc(bytes);
	back = nvme_test_alloc(bytes);
	nvme_test_fill(src, bytes, 99);
	cr_assert_eq(zn_swap_write(s, ext[3].key, 0, bytes, src, &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	/* the attached handle reads a part crossing a stripe, and writes one the store reads */
	cr_assert_eq(zn_swap_read(a, ext[3].key, 4096, bytes - 4096, got, &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	nvme_test_compare(got, src + 4096, bytes - 4096, "read through the attached handle");
	nvme_test_fill(got, bytes, 100);
	cr_assert_eq(zn_swap_write(a, ext[3].key, 0, bytes, got, &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	cr_assert_eq(zn_swap_read(s, ext[3].key, 0, bytes, back, &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	nvme_test_compare(back, got, bytes, "written through the attached handle");
	zn_aio_get_stats(aio, &st);
	zn_aio_get_stats(aio2, &st2);
	cr_assert_eq(st.bytes_read, bytes);
	cr_assert_eq(st.bytes_written, bytes);
	cr_assert_eq(st2.bytes_read, bytes - 4096);
	cr_assert_eq(st2.bytes_written, bytes);
	zn_swap_destroy(a);
	cr_assert_eq(stat(zn_swap_file(s, 0), &sb), 0, "the store's file went with the handle");
	cr_assert_eq(zn_swap_read(s, ext[3].key, 0, bytes, back, &req), 0);
	cr_assert_eq(zn_swap_wait(&req), 0);
	nvme_test_compare(back, got, bytes, "after the handle's destroy");
	zn_swap_destroy(s);
	zn_aio_destroy(aio2);
	zn_aio_destroy(aio);
	free(src), free(got), free(back);
	teardown();
}
