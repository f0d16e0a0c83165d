/* What differs between a checkpoint and the run resuming from it and does not stop the
 * resume (ckpt.h): the effective config, key by key, and the training data's identity
 * (its size and a sampled CRC-32); each difference is one line naming it and both values. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include "core/fsio.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"

#define SAMPLE_BYTES (1u << 20)
#define MAX_LINES 20 /* differences listed one by one; the rest counted */

/* CRC-32 of [off, off + n) of fd into *crc */
static int crc_range(int fd, const char *path, uint64_t off, uint64_t n, unsigned char *buf,
		     uint32_t *crc)
{
	int rc = n ? zn_pread_all(fd, buf, (size_t)n, off, path) : 0;

	if (!rc)
		*crc = zn_ckpt_crc(*crc, buf, (size_t)n);
	return rc;
}

int zn_ckpt_data_id(const char *path, struct zn_ckpt_data_id *out)
{
	uint64_t size = 0;
	unsigned char *buf = malloc(SAMPLE_BYTES);
	uint32_t crc = zn_ckpt_crc(0, NULL, 0);
	int fd = zn_open_input_regular(path, "--data", &size), rc = fd < 0 ? fd : 0;

	if (!rc && !buf)
		rc = -ENOMEM;
	if (!rc && size <= 3 * (uint64_t)SAMPLE_BYTES) {
		/* the whole file, in pieces */
		for (uint64_t off = 0; !rc && off < size; off += SAMPLE_BYTES)
			rc = crc_range(fd, path, off, size - off < SAMPLE_BYTES ? size - off :
				       SAMPLE_BYTES, buf, &crc);
	} else if (!rc) {
		rc = crc_range(fd, path, 0, SAMPLE_BYTES, buf, &crc);
		if (!rc)
			rc = crc_range(fd, path, size / 2 - SAMPLE_BYTES / 2, SAMPLE_BYTES, buf,
				       &crc);
		if (!rc)
			rc = crc_range(fd, path, size - SAMPLE_BYTES, SAMPLE_BYTES, buf, &crc);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	if (rc)
		return rc;
	out->size = size;
	out->crc = crc;
	return 0;
}

int zn_ckpt_check_data(const struct zn_ckpt_info *in, const char *path,
		       const struct zn_ckpt_data_id *id)
{
	if (!in->has_data || (in->data.size == id->size && in->data.crc == id->crc))
		return 0;
	zn_warn("--resume %s: the data file differs from the one the checkpoint was saved with "
		"(%s: %" PRIu64 " bytes, sampled CRC-32 %08" PRIx32 "; now %s: %" PRIu64
		" bytes, %08" PRIx32 "): training goes on from data step %" PRId64 " of this "
		"file", in->path, in->data_path, in->data.size, in->data.crc, path, id->size,
		id->crc, in->data_step);
	return 1;
}

struct diff {
	int count;
	const char *dir;
};

/* v printed compactly, cut to fit */
static void shown(const cJSON *v, char *buf, size_t size)
{
	char *s = v ? cJSON_PrintUnformatted(v) : NULL;

	snprintf(buf, size, "%s", v ? (s ? s : "?") : "(absent)");
	if (s && strlen(s) >= size && size > 4)
		memcpy(buf + size - 4, "...", 4);
	free(s);
}

static void report(struct diff *d, const char *key, const cJSON *saved, const cJSON *mine)
{
	char a[80], b[80];

	if (++d->count > MAX_LINES)
		return;
	shown(saved, a, sizeof(a));
	shown(mine, b, sizeof(b));
	zn_warn("--resume: config %s is %s in the checkpoint (%s/%s), %s in this run", key, a,
		d->dir, ZN_CKPT_CONFIG, b);
}

/* Compares two values at key (dotted path; "" at the top), recursing into objects. */
static void compare(struct diff *d, const char *key, const cJSON *saved, const cJSON *mine)
{
	const cJSON *x;
	char sub[256];

	if (!cJSON_IsObject(saved) || !cJSON_IsObject(mine)) {
		if (!saved || !mine || !cJSON_Compare(saved, mine, true))
			report(d, key[0] ? key : "(the whole config)", saved, mine);
		return;
	}
	cJSON_ArrayForEach(x, saved) {
		snprintf(sub, sizeof(sub), "%s%s%s", key, key[0] ? "." : "", x->string);
		compare(d, sub, x, cJSON_GetObjectItemCaseSensitive(mine, x->string));
	}
	cJSON_ArrayForEach(x, mine)
		if (!cJSON_GetObjectItemCaseSensitive(saved, x->string)) {
			snprintf(sub, sizeof(sub), "%s%s%s", key, key[0] ? "." : "", x->string);
			report(d, sub, NULL, x);
		}
}

int zn_ckpt_config_diff(const char *dir, const char *saved, const char *mine)
{
	cJSON *a = cJSON_Parse(saved), *b = cJSON_Parse(mine);
	struct diff d = { .dir = dir };

	compare(&d, "", a, b);
	if (d.count > MAX_LINES)
		zn_warn("--resume: and %d more config differences", d.count - MAX_LINES);
	if (d.count)
		zn_warn("--resume: training goes on with this run's config");
	cJSON_Delete(a);
	cJSON_Delete(b);
	return d.count;
}
