/* zinc bench nvme: sequential read and write bandwidth of a file through zinc's io_uring
 * engine, for one setting or a grid of them (--sweep), as DeepSpeed's ds_io and
 * ds_nvme_tune do with libaio. Prints an nccl-tests-style table (or --json), the best
 * setting, and with --sweep writes that setting as an "aio" config block. Each case is
 * run and checked by zn_nvme_bench_run() (src/nvme/bench.c); formulas: docs/nvme.md.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/units.h"
#include "nvme/aio.h"
#include "nvme/bench.h"
#include "zinc.h"

#define MAX_LIST 16

struct opts {
	const char *path;
	const char *file;
	const char *config;
	const char *out;
	uint64_t bytes;
	uint64_t blocks[MAX_LIST];
	int block_count;
	int depths[MAX_LIST];
	int depth_count;
	int rings[MAX_LIST];
	int ring_count;
	int iters;
	bool read, write;
	bool sweep, json, keep, plain_buffers;
	struct zn_aio_config aio; /* single_submit, overlap_events, cap, and defaults */
	enum zn_aio_backend backend;
};

struct row {
	uint64_t block;
	int depth, rings;
	struct zn_nvme_bench_result r;
};

static const uint64_t sweep_blocks[] = { 128 << 10, 256 << 10, 512 << 10, 1 << 20,
					 2 << 20,   4 << 20,   8 << 20 };
static const int sweep_depths[] = { 1, 2, 4, 8, 16, 32, 64, 128 };
static const int sweep_rings[] = { 1, 2, 3, 4 };

/* The file made under --path, removed at exit or on a signal. */
static char made_file[ZN_PATH_MAX + 64];

static void on_signal(int sig)
{
	if (made_file[0])
		unlink(made_file);
	_exit(128 + sig);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc bench nvme (--path DIR | --file FILE) [options]\n"
		"\n"
		"Sequential O_DIRECT write and read GB/s through zinc's io_uring engine.\n"
		"  --path DIR          make a scratch file in DIR (removed at exit)\n"
		"  --file FILE         use FILE (created or extended if short; kept; overwritten)\n"
		"  --size SIZE         bytes of the file to use (default 1G)\n"
		"  --block LIST        block sizes, e.g. 1M or 128K,1M,8M (default 1M)\n"
		"  --depth LIST        queue depths per ring (default 32)\n"
		"  --rings LIST        rings = worker threads (default 1)\n"
		"  --sweep             the grid block 128K..8M x depth 1..128 x rings 1..4 (lists\n"
		"                      given explicitly replace their axis); writes the best\n"
		"                      setting to --out (default zinc-aio.json)\n"
		"  --op rw|read|write  what to time (default rw)\n"
		"  --iters N           runs per case; the median is reported (default 3)\n"
		"  --cap RATE          bandwidth cap per direction in bytes/s, e.g. 500M\n"
		"  --single-submit     one io_uring_enter per request\n"
		"  --no-overlap        drain each batch before submitting the next\n"
		"  --plain-buffers     do not register the buffer (no READ_FIXED/WRITE_FIXED)\n"
		"  --backend B         auto, uring or pool (pread/pwrite threads)\n"
		"  --config FILE       take defaults from the \"aio\" block of a zinc/DeepSpeed config\n"
		"  --out FILE          write the best setting as an \"aio\" block to FILE\n"
		"  --json              machine-readable output instead of the table\n"
		"  --keep              keep the scratch file made under --path\n");
}

/* "4096", "128K", "1M", "1.5G" with K = 1024: the config's own size parser. */
static int parse_size(const char *s, uint64_t *out)
{
	return zn_parse_size(s, out) ? -EINVAL : 0;
}

static int parse_list(const char *flag, const char *s, bool sizes, uint64_t *u, int *i,
		      int *count)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	*count = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (*count == MAX_LIST || parse_size(tok, &v) || !v || (!sizes && v > 100000)) {
			fprintf(stderr, "zinc bench nvme: %s '%s': give up to %d positive %s, "
				"comma-separated\n", flag, s, MAX_LIST, sizes ? "sizes" : "integers");
			return ZN_EXIT_USAGE;
		}
		if (sizes)
			u[*count] = v;
		else
			i[*count] = (int)v;
		(*count)++;
	}
	return 0;
}

/* Reads the "aio" block through the config loader `zinc train --config` uses, so both
 * accept the same keys, sizes and errors. */
static int load_config(const char *path, struct zn_aio_config *aio)
{
	struct zn_config cfg;

	zn_config_defaults(&cfg);
	cfg.aio = *aio;
	if (zn_config_load_json(&cfg, path) || zn_config_validate(&cfg, 1))
		return ZN_EXIT_USAGE;
	*aio = cfg.aio;
	return 0;
}

static const struct option long_opts[] = {
	{ "path", required_argument, NULL, 'p' },   { "file", required_argument, NULL, 'f' },
	{ "size", required_argument, NULL, 's' },   { "block", required_argument, NULL, 'b' },
	{ "depth", required_argument, NULL, 'd' },  { "rings", required_argument, NULL, 'r' },
	{ "sweep", no_argument, NULL, 'S' },        { "op", required_argument, NULL, 'o' },
	{ "iters", required_argument, NULL, 'i' },  { "cap", required_argument, NULL, 'c' },
	{ "single-submit", no_argument, NULL, '1' }, { "no-overlap", no_argument, NULL, 'O' },
	{ "plain-buffers", no_argument, NULL, 'P' }, { "backend", required_argument, NULL, 'B' },
	{ "config", required_argument, NULL, 'C' }, { "out", required_argument, NULL, 'w' },
	{ "json", no_argument, NULL, 'j' },         { "keep", no_argument, NULL, 'k' },
	{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
};

static int parse_op(struct opts *o, const char *s)
{
	o->read = !strcmp(s, "rw") || !strcmp(s, "read");
	o->write = !strcmp(s, "rw") || !strcmp(s, "write");
	if (o->read || o->write)
		return 0;
	fprintf(stderr, "zinc bench nvme: --op '%s': use rw, read or write\n", s);
	return ZN_EXIT_USAGE;
}

static int parse_backend(struct opts *o, const char *s)
{
	if (!strcmp(s, "auto"))
		o->backend = ZN_AIO_BACKEND_AUTO;
	else if (!strcmp(s, "uring") || !strcmp(s, "io_uring"))
		o->backend = ZN_AIO_BACKEND_URING;
	else if (!strcmp(s, "pool"))
		o->backend = ZN_AIO_BACKEND_POOL;
	else {
		fprintf(stderr, "zinc bench nvme: --backend '%s': use auto, uring or pool\n", s);
		return ZN_EXIT_USAGE;
	}
	return 0;
}

/* 1 to 1000, or 0 for anything else ("4294967297", "3x", ""). */
static int parse_iters(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	return errno || end == s || *end || v < 1 || v > 1000 ? 0 : (int)v;
}

/* One flag; config-dependent ones are applied after --config (see parse_args). */
static int parse_one(struct opts *o, int c, const char *arg)
{
	switch (c) {
	case 'p': o->path = arg; return 0;
	case 'f': o->file = arg; return 0;
	case 's':
		if (parse_size(arg, &o->bytes) || !o->bytes || o->bytes % 4096) {
			fprintf(stderr, "zinc bench nvme: --size '%s': give a multiple of 4K\n", arg);
			return ZN_EXIT_USAGE;
		}
		return 0;
	case 'b': return parse_list("--block", arg, true, o->blocks, NULL, &o->block_count);
	case 'd': return parse_list("--depth", arg, false, NULL, o->depths, &o->depth_count);
	case 'r': return parse_list("--rings", arg, false, NULL, o->rings, &o->ring_count);
	case 'S': o->sweep = true; return 0;
	case 'o': return parse_op(o, arg);
	case 'i':
		o->iters = parse_iters(arg);
		if (o->iters < 1) {
			fprintf(stderr, "zinc bench nvme: --iters '%s': give 1 to 1000\n", arg);
			return ZN_EXIT_USAGE;
		}
		return 0;
	case 'B': return parse_backend(o, arg);
	case 'P': o->plain_buffers = true; return 0;
	case 'C': o->config = arg; return 0;
	case 'w': o->out = arg; return 0;
	case 'j': o->json = true; return 0;
	case 'k': o->keep = true; return 0;
	case 'c': case '1': case 'O': return 0; /* after --config */
	case 'h': usage(stdout); return -1;
	default: usage(stderr); return ZN_EXIT_USAGE;
	}
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	int c, rc;

	*o = (struct opts){ .bytes = 1ull << 30, .iters = 3, .read = true, .write = true };
	o->aio = (struct zn_aio_config){ .block_size_bytes = 1 << 20, .queue_depth = 32,
					 .intra_op_parallelism = 1, .overlap_events = true };
	optind = 1;
	/* ':' first: getopt stays quiet and tells a missing value (':') from an unknown
	 * option ('?'), which gets "did you mean" */
	while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
		if (c == ':' || c == '?') {
			if (c == ':')
				fprintf(stderr, "zinc bench nvme: %s needs a value\n", argv[optind - 1]);
			else
				zn_cli_unknown_flag("zinc bench nvme", argv[optind - 1], usage);
			return ZN_EXIT_USAGE;
		}
		if ((rc = parse_one(o, c, optarg)))
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, "zinc bench nvme: unexpected argument '%s'\n", argv[optind]);
		return ZN_EXIT_USAGE;
	}
	if (o->config && (rc = load_config(o->config, &o->aio)))
		return rc;
	/* Flags win over the config file: a second pass for those it also sets. */
	optind = 1;
	while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
		if (c == 'c' && parse_size(optarg, &o->aio.bandwidth_cap_bytes_per_s)) {
			fprintf(stderr, "zinc bench nvme: --cap '%s': give bytes/s, e.g. 500M\n",
				optarg);
			return ZN_EXIT_USAGE;
		}
		o->aio.single_submit |= c == '1';
		if (c == 'O')
			o->aio.overlap_events = false;
	}
	if (!!o->path == !!o->file) {
		fprintf(stderr, "zinc bench nvme: say where with one of --path DIR (a directory on "
			"the drive to test) or --file FILE\n");
		return ZN_EXIT_USAGE;
	}
	if (!o->block_count) {
		o->block_count = o->sweep ? (int)(sizeof(sweep_blocks) / sizeof(sweep_blocks[0])) : 1;
		for (c = 0; c < o->block_count; c++)
			o->blocks[c] = o->sweep ? sweep_blocks[c] : o->aio.block_size_bytes;
	}
	if (!o->depth_count) {
		o->depth_count = o->sweep ? (int)(sizeof(sweep_depths) / sizeof(sweep_depths[0])) : 1;
		for (c = 0; c < o->depth_count; c++)
			o->depths[c] = o->sweep ? sweep_depths[c] : o->aio.queue_depth;
	}
	if (!o->ring_count) {
		o->ring_count = o->sweep ? (int)(sizeof(sweep_rings) / sizeof(sweep_rings[0])) : 1;
		for (c = 0; c < o->ring_count; c++)
			o->rings[c] = o->sweep ? sweep_rings[c] : o->aio.intra_op_parallelism;
	}
	if (o->sweep && !o->out)
		o->out = "zinc-aio.json";
	return 0;
}

/* Opens the file to test, making or extending it; *fresh when its blocks are new. */
static int open_target(const struct opts *o, char *name, size_t n, bool *fresh)
{
	struct zn_nvme_path_probe pp;
	struct stat st;
	int fd;

	*fresh = false;
	if (o->path) {
		if (zn_nvme_path_probe(o->path, &pp))
			return -1;
		if (!pp.o_direct) {
			fprintf(stderr, "zinc bench nvme: %s (%s) does not take O_DIRECT (%s): choose "
				"a directory on the NVMe drive\n", o->path, pp.fs_type,
				zn_strerror(pp.o_direct_err));
			return -1;
		}
		if (pp.free_bytes < o->bytes) {
			char need[32], have[32];

			fprintf(stderr, "zinc bench nvme: need %s on %s, %s free: lower --size\n",
				zn_format_bytes(need, sizeof(need), o->bytes), o->path,
				zn_format_bytes(have, sizeof(have), pp.free_bytes));
			return -1;
		}
		snprintf(name, n, "%s/zinc-bench-%ld.bin", o->path, (long)getpid());
		/* The scratch file: new, private, not through a link, unbuffered. */
		fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_DIRECT | O_CLOEXEC, 0600);
		if (fd >= 0)
			snprintf(made_file, sizeof(made_file), "%s", name);
	} else {
		snprintf(name, n, "%s", o->file);
		if (lstat(name, &st) == 0 && !S_ISREG(st.st_mode)) {
			fprintf(stderr, "zinc bench nvme: %s: not a regular file (a symlink, FIFO, "
				"device or directory): give a file to (over)write, or --path DIR\n",
				name);
			return -1;
		}
		/* The file named by --file, made if missing, overwritten by the benchmark: never
		 * through a symlink, never a FIFO or device (non-blocking open, then checked). */
		fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_DIRECT | O_CLOEXEC,
			  0600);
	}
	if (fd < 0) {
		fprintf(stderr, "zinc bench nvme: %s: %s\n", name,
			errno == ELOOP ? "is a symbolic link: give the file itself" : strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "zinc bench nvme: %s: not a regular file: give a file to "
			"(over)write, or --path DIR\n", name);
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* io_uring: blocking I/O */
	if ((uint64_t)st.st_size >= o->bytes)
		return fd;
	*fresh = true;
	if (fallocate(fd, 0, 0, (off_t)o->bytes)) {
		char need[32];

		fprintf(stderr, "zinc bench nvme: reserving %s for %s: %s\n",
			zn_format_bytes(need, sizeof(need), o->bytes), name, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static double gbps(uint64_t bytes, double s)
{
	return s > 0 ? (double)bytes / s / 1e9 : 0;
}

/* Harmonic mean of what was measured: the rate of a step that writes and reads as much. */
static double score(const struct opts *o, const struct row *w)
{
	double a = o->write ? gbps(o->bytes, w->r.write_s) : 0;
	double b = o->read ? gbps(o->bytes, w->r.read_s) : 0;

	if (!w->r.ok)
		return -1;
	if (o->read && o->write)
		return a > 0 && b > 0 ? 2 / (1 / a + 1 / b) : 0;
	return o->read ? b : a;
}

static void print_preamble(const struct opts *o, const char *name, const char *engine)
{
	struct zn_nvme_path_probe pp = { 0 };
	char dir[ZN_PATH_MAX + 64], fr[32], used[32];

	snprintf(dir, sizeof(dir), "%s", o->path ? o->path : name);
	if (!o->path) {
		char *slash = strrchr(dir, '/');

		if (slash)
			*(slash == dir ? slash + 1 : slash) = 0;
		else
			snprintf(dir, sizeof(dir), ".");
	}
	zn_nvme_path_probe(dir, &pp);
	zn_bench_preamble(stdout, "nvme");
	printf("# file: %s (%s, %s free), %s used, O_DIRECT\n", name, pp.fs_type,
	       zn_format_bytes(fr, sizeof(fr), pp.free_bytes),
	       zn_format_bytes(used, sizeof(used), o->bytes));
	printf("# engine: %s%s%s\n", engine, o->aio.single_submit ? ", single submit" : "",
	       o->aio.overlap_events ? "" : ", no overlap");
	if (o->aio.bandwidth_cap_bytes_per_s) {
		char cap[32];

		printf("# bandwidth cap: %s per direction\n",
		       zn_format_rate(cap, sizeof(cap), (double)o->aio.bandwidth_cap_bytes_per_s,
				      "B/s"));
	}
	printf("# each case: %d iteration%s, median time; GB/s = bytes / time / 1e9; checked "
	       "outside the timed part\n#\n", o->iters, o->iters > 1 ? "s" : "");
	printf("#%10s %6s %6s %12s %10s %9s %8s %9s %8s %6s  %s\n", "block", "depth", "rings",
	       "size", "buffer", "wr_time", "wr_bw", "rd_time", "rd_bw", "fixed", "check");
	printf("#%10s %6s %6s %12s %10s %9s %8s %9s %8s %6s\n", "(B)", "", "", "(B)", "(B)",
	       "(ms)", "(GB/s)", "(ms)", "(GB/s)", "");
	fflush(stdout);
}

static void print_row(const struct opts *o, const struct row *w)
{
	char wt[16] = "-", wb[16] = "-", rt[16] = "-", rb[16] = "-";

	if (o->write) {
		snprintf(wt, sizeof(wt), "%.1f", w->r.write_s * 1e3);
		snprintf(wb, sizeof(wb), "%.3f", gbps(o->bytes, w->r.write_s));
	}
	if (o->read) {
		snprintf(rt, sizeof(rt), "%.1f", w->r.read_s * 1e3);
		snprintf(rb, sizeof(rb), "%.3f", gbps(o->bytes, w->r.read_s));
	}
	printf(" %10" PRIu64 " %6d %6d %12" PRIu64 " %10" PRIu64 " %9s %8s %9s %8s %6s  %s\n",
	       w->block, w->depth, w->rings, o->bytes, w->r.buffer_bytes, wt, wb, rt, rb,
	       w->r.fixed_buffers ? "yes" : "no", w->r.check);
	fflush(stdout);
}

static cJSON *aio_block(const struct opts *o, const struct row *best)
{
	cJSON *doc = cJSON_CreateObject(), *aio = cJSON_AddObjectToObject(doc, "aio");

	cJSON_AddNumberToObject(aio, "block_size", (double)best->block);
	cJSON_AddNumberToObject(aio, "queue_depth", best->depth);
	cJSON_AddNumberToObject(aio, "intra_op_parallelism", best->rings);
	cJSON_AddBoolToObject(aio, "single_submit", o->aio.single_submit);
	cJSON_AddBoolToObject(aio, "overlap_events", o->aio.overlap_events);
	return doc;
}

static int write_out(const struct opts *o, const struct row *best)
{
	cJSON *doc = aio_block(o, best);
	char *text = cJSON_Print(doc);
	int rc = 1;

	/* a fresh file renamed over --out (core/fsio.h); errors are logged naming it */
	if (text) {
		size_t n = strlen(text);

		text[n] = '\n'; /* replaces the NUL: written with its length */
		rc = zn_write_file_atomic(o->out, "--out", text, n + 1) ? 1 : 0;
	}
	free(text);
	cJSON_Delete(doc);
	return rc;
}

static void print_json(const struct opts *o, const char *name, const struct row *rows, int n,
		       const struct row *best)
{
	cJSON *doc = cJSON_CreateObject(), *cases = cJSON_AddArrayToObject(doc, "cases");
	struct zn_nvme_path_probe pp = { 0 };
	char *text;
	int i;

	cJSON_AddStringToObject(doc, "zinc_version", ZN_VERSION);
	cJSON_AddStringToObject(doc, "file", name);
	if (o->path && !zn_nvme_path_probe(o->path, &pp))
		cJSON_AddStringToObject(doc, "fs", pp.fs_type);
	cJSON_AddNumberToObject(doc, "bytes", (double)o->bytes);
	cJSON_AddNumberToObject(doc, "iters", o->iters);
	cJSON_AddNumberToObject(doc, "bandwidth_cap_bytes_per_s",
				(double)o->aio.bandwidth_cap_bytes_per_s);
	cJSON_AddStringToObject(doc, "engine", n ? rows[0].r.engine : "");
	for (i = 0; i < n; i++) {
		cJSON *c = cJSON_CreateObject();

		cJSON_AddNumberToObject(c, "block_size", (double)rows[i].block);
		cJSON_AddNumberToObject(c, "queue_depth", rows[i].depth);
		cJSON_AddNumberToObject(c, "rings", rows[i].rings);
		cJSON_AddNumberToObject(c, "buffer_bytes", (double)rows[i].r.buffer_bytes);
		if (o->write) {
			cJSON_AddNumberToObject(c, "write_s", rows[i].r.write_s);
			cJSON_AddNumberToObject(c, "write_gbps", gbps(o->bytes, rows[i].r.write_s));
		}
		if (o->read) {
			cJSON_AddNumberToObject(c, "read_s", rows[i].r.read_s);
			cJSON_AddNumberToObject(c, "read_gbps", gbps(o->bytes, rows[i].r.read_s));
		}
		cJSON_AddBoolToObject(c, "fixed_buffers", rows[i].r.fixed_buffers);
		cJSON_AddBoolToObject(c, "ok", rows[i].r.ok);
		cJSON_AddStringToObject(c, "check", rows[i].r.check);
		cJSON_AddItemToArray(cases, c);
	}
	if (best) {
		cJSON *b = aio_block(o, best);

		cJSON_AddNumberToObject(b, "score_gbps", score(o, best));
		cJSON_AddItemToObject(doc, "best", b);
	}
	text = cJSON_Print(doc);
	printf("%s\n", text);
	free(text);
	cJSON_Delete(doc);
}

static int run_case(const struct opts *o, int fd, const char *name, bool warmup, struct row *w)
{
	struct zn_nvme_bench_case c = {
		.aio = o->aio, .backend = o->backend, .fd = fd, .name = name, .bytes = o->bytes,
		.iters = o->iters, .write = o->write, .read = o->read,
		.plain_buffers = o->plain_buffers, .warmup = warmup, .seed = 0x5eed,
	};

	c.aio.block_size_bytes = w->block;
	c.aio.queue_depth = w->depth;
	c.aio.intra_op_parallelism = w->rings;
	return zn_nvme_bench_run(&c, &w->r);
}

static int run_all(const struct opts *o, int fd, const char *name, bool fresh)
{
	int n = o->block_count * o->depth_count * o->ring_count, i = 0, a, b, c, rc = 0;
	struct row *rows = calloc((size_t)n, sizeof(*rows)), *best = NULL;
	bool failed = false;

	if (!rows)
		return 1;
	for (a = 0; a < o->block_count; a++)
		for (b = 0; b < o->depth_count; b++)
			for (c = 0; c < o->ring_count; c++, i++) {
				rows[i] = (struct row){ .block = o->blocks[a], .depth = o->depths[b],
							.rings = o->rings[c] };
				rc = run_case(o, fd, name, fresh && i == 0, &rows[i]);
				if (rc)
					goto out;
				if (i == 0 && !o->json)
					print_preamble(o, name, rows[0].r.engine);
				if (!o->json)
					print_row(o, &rows[i]);
				failed |= !rows[i].r.ok;
				if (!best || score(o, &rows[i]) > score(o, best))
					best = &rows[i];
			}
out:
	if (rc)
		fprintf(stderr, "zinc bench nvme: block %" PRIu64 " depth %d rings %d: %s\n",
			rows[i].block, rows[i].depth, rows[i].rings, zn_strerror(rc));
	if (best && best->r.ok && !o->json)
		printf("# best: block %" PRIu64 ", depth %d, rings %d (%.3f GB/s %s)\n", best->block,
		       best->depth, best->rings, score(o, best),
		       o->read && o->write ? "harmonic mean of write and read" : "");
	if (o->json)
		print_json(o, name, rows, rc ? i : n, best && best->r.ok ? best : NULL);
	if (best && best->r.ok && o->out && !rc) {
		rc = write_out(o, best);
		if (!rc && !o->json)
			printf("# wrote the best setting to %s (use it with --config)\n", o->out);
	}
	free(rows);
	return rc || failed ? 1 : 0;
}

int zn_cmd_bench_nvme(int argc, char **argv)
{
	char name[ZN_PATH_MAX + 64];
	struct opts o;
	bool fresh;
	int fd, rc;

	rc = parse_args(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : rc;
	/* --out is checked before the benchmark runs, so a bad one wastes no time; neither
	 * it nor --file (overwritten with test data) may be --config or each other */
	if (zn_io_check((struct zn_io[]){ { .path = o.out, .what = "--out", .out = true },
					  { .path = o.file, .what = "--file", .out = true },
					  { .path = o.config, .what = "--config" } }, 3) ||
	    (o.out && zn_output_check(o.out, "--out")))
		return ZN_EXIT_USAGE;
	fd = open_target(&o, name, sizeof(name), &fresh);
	if (fd < 0)
		return 1;
	if (made_file[0] && !o.keep) {
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
	}
	rc = run_all(&o, fd, name, fresh);
	close(fd);
	if (made_file[0] && !o.keep)
		unlink(made_file);
	return rc;
}
