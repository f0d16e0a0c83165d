/* zinc train across ranks (train_ranks.h): the agreement text and the failure path.
 *
 * The text is the effective config as zn_config_to_json() prints it, flattened to
 * "a.b.c=value" lines (cJSON's formatted output: one member per line, "key":<TAB>value,
 * nested objects opened by "{" and closed by "}"), minus the keys each rank may set for
 * itself, then "model.*" lines and the caller's extra lines.
 */
#include "train/train_ranks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/signals.h"
#include "nvme/crc32c.h"

/* A data file's identity: its size and a CRC32C of its first and last MiB and of 64
 * pieces of 4 KiB spread evenly between (all of a file up to 2 MiB + 256 KiB), read
 * in a few milliseconds whatever the file's size. */
#define ID_EDGE_BYTES (1u << 20)
#define ID_PIECES 64
#define ID_PIECE_BYTES 4096u

/* Keys a rank may set differently from the others: its own disks, memory pinning and
 * NUMA placement, and its swap directories' names. */
static bool per_rank(const char *path)
{
	static const char *const keys[] = {
		"zero_optimization.offload_optimizer.nvme_path",
		"zero_optimization.offload_optimizer.pin_memory",
		"zero_optimization.offload_param.nvme_path",
		"zero_optimization.offload_param.pin_memory",
		"zinc.numa_node",
		"zinc.run_id",
	};

	if (!strncmp(path, "aio.", 4))
		return true;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(path, keys[i]))
			return true;
	return false;
}

struct text {
	char *buf;
	size_t len, cap;
	bool oom;
};

static void append(struct text *t, const char *s, size_t n)
{
	if (t->oom)
		return;
	if (t->len + n + 1 > t->cap) {
		size_t cap = (t->len + n + 1) * 2;
		char *b = realloc(t->buf, cap);

		if (!b) {
			t->oom = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = 0;
}

/* Appends json's members as path=value lines. */
static void flatten(struct text *t, const char *json)
{
	char path[512] = "";
	size_t depth_len[16];
	int depth = 0;

	for (const char *line = json; line && *line;) {
		const char *end = strchr(line, '\n'), *p = line, *q;
		size_t n = end ? (size_t)(end - line) : strlen(line), vlen;

		while (p < line + n && *p == '\t')
			p++;
		if (*p == '}' && depth > 0) {
			path[depth_len[--depth]] = 0;
		} else if (*p == '"' && (q = strchr(p + 1, '"')) && q < line + n && q[1] == ':') {
			size_t base = strlen(path);
			const char *v = q + 2;

			while (v < line + n && (*v == '\t' || *v == ' '))
				v++;
			vlen = (size_t)(line + n - v);
			if (vlen && v[vlen - 1] == ',')
				vlen--;
			snprintf(path + base, sizeof(path) - base, "%s%.*s", base ? "." : "",
				 (int)(q - p - 1), p + 1);
			if (vlen == 1 && *v == '{' && depth < 16) {
				depth_len[depth++] = base;
			} else {
				/* train_batch_size: added after the others */
				if (!per_rank(path) && strcmp(path, "train_batch_size")) {
					append(t, path, strlen(path));
					append(t, "=", 1);
					append(t, v, vlen);
					append(t, "\n", 1);
				}
				path[base] = 0;
			}
		}
		line = end ? end + 1 : NULL;
	}
}

char *zn_train_ranks_text(const struct zn_config *cfg, const struct zn_train_model *tm,
			  const char *extra)
{
	struct text t = { 0 };
	char *json = zn_config_to_json(cfg), line[1024];

	if (!json)
		return NULL;
	flatten(&t, json);
	free(json);
	/* derived from the micro-batch and accumulation (and the world): compared after
	 * them, so a different --micro-batch is named as such */
	snprintf(line, sizeof(line), "train_batch_size=%lld\n", (long long)cfg->train_batch_size);
	append(&t, line, strlen(line));
	zn_train_model_text(tm, line, sizeof(line));
	append(&t, line, strlen(line));
	if (extra)
		append(&t, extra, strlen(extra));
	if (t.oom || !t.buf) {
		free(t.buf);
		return NULL;
	}
	return t.buf;
}

/* crc of [off, off + n) of fd, chained */
static int crc_range(int fd, const char *path, uint64_t off, uint64_t n, char *buf,
		     uint32_t *crc)
{
	while (n) {
		size_t k = n < ID_EDGE_BYTES ? (size_t)n : ID_EDGE_BYTES;
		int rc = zn_pread_all(fd, buf, k, off, path);

		if (rc)
			return rc;
		*crc = zn_crc32c(*crc, buf, k);
		off += k;
		n -= k;
	}
	return 0;
}

static uint32_t file_crc(int fd, const char *path, uint64_t size, char *buf, int *rc)
{
	uint64_t edge = 2ull * ID_EDGE_BYTES + (uint64_t)ID_PIECES * ID_PIECE_BYTES;
	uint64_t mid, step;
	uint32_t crc = 0;

	if (size <= edge) {
		*rc = crc_range(fd, path, 0, size, buf, &crc);
		return crc;
	}
	mid = size - 2ull * ID_EDGE_BYTES;
	step = mid / ID_PIECES;
	*rc = crc_range(fd, path, 0, ID_EDGE_BYTES, buf, &crc);
	for (int i = 0; !*rc && i < ID_PIECES; i++)
		*rc = crc_range(fd, path, ID_EDGE_BYTES + (uint64_t)i * step, ID_PIECE_BYTES, buf,
				&crc);
	if (!*rc)
		*rc = crc_range(fd, path, size - ID_EDGE_BYTES, ID_EDGE_BYTES, buf, &crc);
	return crc;
}

int zn_train_ranks_file_line(const char *key, const char *flag, const char *path, char *line,
			     size_t size)
{
	uint64_t bytes = 0;
	char *buf, shown[256];
	uint32_t crc;
	size_t k;
	int fd, rc;

	if (!path) {
		snprintf(line, size, "%s=none\n", key);
		return 0;
	}
	fd = zn_open_input_regular(path, flag, &bytes);
	if (fd < 0)
		return fd;
	buf = malloc(ID_EDGE_BYTES);
	if (!buf) {
		close(fd);
		zn_error("%s %s: out of memory allocating its read buffer (%u bytes)", flag, path,
			 ID_EDGE_BYTES);
		return -ENOMEM;
	}
	crc = file_crc(fd, path, bytes, buf, &rc);
	free(buf);
	close(fd);
	if (rc)
		return rc;
	/* the path is shown, never compared (ranks may hold the same file at other paths) */
	snprintf(shown, sizeof(shown), "%s", path);
	for (k = 0; shown[k]; k++)
		if (shown[k] == '\n' || shown[k] == '\t')
			shown[k] = '?';
	snprintf(line, size, "%s=%llu bytes, crc32c %08x\t%s\n", key, (unsigned long long)bytes,
		 crc, shown);
	return 0;
}

int zn_train_ranks_start(struct zn_train_ranks *r, double timeout_s)
{
	/* never the engine's injected comm faults: this comm's ops are counted apart */
	struct zn_comm_config cc = { .kind = ZN_COMM_MPI, .fail_op_index = UINT64_MAX,
				     .stop_op_index = UINT64_MAX, .timeout_s = timeout_s };
	int rc;

	r->comm = NULL;
	r->world = 1;
	rc = zn_comm_world_hint(NULL, &r->world, NULL);
	if (rc || r->world == 1)
		return rc;
	return zn_comm_create(&r->comm, &cc);
}

int zn_train_ranks_agree(struct zn_train_ranks *r, const struct zn_config *cfg,
			 const struct zn_train_model *tm, const char *extra, bool ok)
{
	char *text = zn_train_ranks_text(cfg, tm, extra);
	int rc;

	if (!text) {
		zn_error("out of memory describing the run");
		ok = false;
	}
	if (!r->comm) {
		free(text);
		return ok ? 0 : -ECANCELED;
	}
	rc = zn_comm_agree(r->comm, text ? text : "", ok);
	free(text);
	/* the collective itself failed (a rank that never came: --comm-timeout): the others
	 * may still wait in it, and MPI_Finalize would wait for the missing rank */
	if (rc && rc != -EINVAL && rc != -ECANCELED)
		zn_train_ranks_fail(r, 1);
	return rc;
}

void zn_train_ranks_fail(struct zn_train_ranks *r, int exit_code)
{
	if (r->world <= 1)
		return;
	zn_error("this rank failed: removing its swap files and stopping every rank");
	zn_signals_cleanup();
	zn_comm_abort(exit_code);
}

void zn_train_ranks_end(struct zn_train_ranks *r)
{
	zn_comm_destroy(r->comm);
	r->comm = NULL;
}
