/* One NVMe bandwidth measurement with zinc's engine, for `zinc bench nvme` and for
 * anything that wants the machine's NVMe bandwidth (a placement planner).
 *
 * A case writes the first `bytes` of an O_DIRECT file sequentially as one request, then
 * reads them back as one request, `iters` times; the engine cuts each request into
 * block_size pieces with queue_depth in flight per ring, as training I/O is. The host
 * buffer holds min(bytes, block x depth x rings, 256 MiB) and is reused cyclically (the
 * file then repeats with that period), registered as fixed buffers unless told not to.
 *
 * Checked, outside the timed part: after each write the file is read back and compared
 * with what was written; after each read the buffer is compared with the pattern (a buffer
 * poisoned before the read). Each iteration writes a different pattern, so stale data
 * fails. Timed: from submitting the request to zn_aio_wait() returning.
 */
#ifndef ZN_NVME_BENCH_H
#define ZN_NVME_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "nvme/aio.h"

struct zn_nvme_bench_case {
	struct zn_aio_config aio;
	enum zn_aio_backend backend;
	int fd;             /* open O_DIRECT, read-write, at least `bytes` long */
	const char *name;   /* for messages */
	uint64_t bytes;     /* multiple of 4096 */
	int iters;          /* >= 1 */
	bool write;         /* time writes */
	bool read;          /* time reads (the file is written untimed first when !write) */
	bool plain_buffers; /* do not register the buffer */
	bool warmup;        /* one untimed write first (a new file's blocks are unwritten
			     * extents, slower to write the first time) */
	uint64_t seed;
	const struct zn_aio_fault *fault; /* tests: armed on the engine before the first I/O */
};

struct zn_nvme_bench_result {
	double write_s;      /* median over iters */
	double read_s;
	double write_min_s;
	double write_max_s;
	double read_min_s;
	double read_max_s;
	uint64_t buffer_bytes;
	bool fixed_buffers;  /* every piece went as READ_FIXED / WRITE_FIXED */
	bool ok;             /* every check passed */
	char check[200];     /* "ok" or what failed */
	char engine[192];    /* zn_aio_describe() */
};

/* Returns 0 when the case ran (see r->ok for the checks), or -errno when it could not
 * (engine, memory, an I/O error: logged). */
int zn_nvme_bench_run(const struct zn_nvme_bench_case *c, struct zn_nvme_bench_result *r);

#endif
