/* A checkpoint's metadata, zinc-checkpoint.txt: "key=value" lines (the step and counters,
 * the data position, the seed, the rank layout, every layer's tensors, every file's size
 * and CRC-32) and a last line "crc32=XXXXXXXX" over all the bytes before it. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "sched/engine_impl.h"

struct text {
	char *s;
	size_t len, cap;
	bool oom;
};

static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (t->len + (size_t)n + 1 > t->cap) {
		size_t cap = (t->cap + (size_t)n + 1) * 2;
		char *p = realloc(t->s, cap);

		if (!p) {
			t->oom = true;
			return;
		}
		t->s = p;
		t->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	t->len += (size_t)n;
}

static const char *dtype_name(enum zn_dtype d)
{
	return d == ZN_DTYPE_BF16 ? "bf16" : d == ZN_DTYPE_F16 ? "fp16" : "fp32";
}

char *zn_ckpt_meta_text(struct zn_engine *e, const struct zn_ckpt_save_args *a,
			const uint64_t *file_size, const uint32_t *file_crc,
			uint64_t config_size, uint32_t config_crc)
{
	struct text t = { 0 };
	int64_t step, skipped;
	struct zn_lossscale ls;

	zn_ckpt_state_counters(e, &step, &skipped, &ls);
	add(&t, "zinc_checkpoint=1\nstep=%" PRId64 "\nskipped=%" PRId64 "\n", step, skipped);
	add(&t, "data_step=%" PRId64 "\nglobal_micro=%" PRId64 "\nseq=%d\n", a->data_step,
	    a->global_micro, a->seq);
	add(&t, "world=%d\nstage=%d\ndtype=%s\nseed=%" PRIu64 "\nfamily=%s\n", e->rt.world,
	    e->cfg.zero.stage, dtype_name(e->pdt), e->cfg.runtime.seed, e->model.ops->family);
	add(&t, "optimizer_states=%s\n", zn_optim_states_name(e->plan.states));
	add(&t, "ls.scale=%a\nls.cur_hysteresis=%d\nls.iter=%" PRId64
	    "\nls.last_overflow_iter=%" PRId64 "\n", ls.scale, ls.cur_hysteresis, ls.iter,
	    ls.last_overflow_iter);
	add(&t, "layers=%d\n", e->n);
	for (int l = 0; l < e->n; l++) {
		const struct zn_layer_desc *L = &e->ld[l];

		add(&t, "layer.%d=%" PRIu64 "\n", l, e->numel[l]);
		for (int k = 0; k < L->tensor_count; k++)
			add(&t, "tensor.%d.%d=%s %" PRId64 "x%" PRId64 "\n", l, k, L->tensors[k].name,
			    L->tensors[k].shape[0], L->tensors[k].ndim > 1 ? L->tensors[k].shape[1] : 1);
	}
	for (int r = 0; r < e->rt.world; r++)
		add(&t, "rank.%d=%" PRIu64 " %08" PRIx32 "\n", r, file_size[r], file_crc[r]);
	add(&t, "config=%" PRIu64 " %08" PRIx32 "\n", config_size, config_crc);
	if (!t.oom)
		add(&t, "crc32=%08" PRIx32 "\n", zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), t.s, t.len));
	if (t.oom) {
		free(t.s);
		return NULL;
	}
	return t.s;
}

const char *zn_ckpt_meta_get(const struct zn_ckpt_meta *m, const char *key)
{
	for (int i = 0; i < m->kv_count; i++)
		if (!strcmp(m->key[i], key))
			return m->val[i];
	return NULL;
}

void zn_ckpt_meta_free(struct zn_ckpt_meta *m)
{
	free(m->numel);
	free(m->file_size);
	free(m->file_crc);
	free(m->text);
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

static int bad(const char *path, const char *what, const char *key)
{
	zn_error("checkpoint %s: %s%s%s: the metadata is damaged or not a zinc checkpoint's; "
		 "resume from another checkpoint", path, what, key ? " " : "", key ? key : "");
	return -EBADMSG;
}

/* key's value as an integer in [lo, hi] */
static int get_int(const struct zn_ckpt_meta *m, const char *path, const char *key, int64_t lo,
		   int64_t hi, int64_t *out)
{
	const char *v = zn_ckpt_meta_get(m, key);
	char *end;
	long long x;

	if (!v)
		return bad(path, "missing key", key);
	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return bad(path, "bad value of", key);
	*out = x;
	return 0;
}

/* splits the text into lines "key=value", in place */
static int split(struct zn_ckpt_meta *m, const char *path, size_t len)
{
	int lines = 0;

	for (size_t i = 0; i < len; i++)
		lines += m->text[i] == '\n';
	m->key = calloc((size_t)lines + 1, sizeof(char *));
	m->val = calloc((size_t)lines + 1, sizeof(char *));
	if (!m->key || !m->val)
		return -ENOMEM;
	for (char *p = m->text; *p;) {
		char *nl = strchr(p, '\n'), *eq = strchr(p, '=');

		if (!nl || !eq || eq > nl)
			return bad(path, "a line is not key=value", NULL);
		*nl = 0;
		*eq = 0;
		m->key[m->kv_count] = p;
		m->val[m->kv_count++] = eq + 1;
		p = nl + 1;
	}
	return 0;
}

static int parse_counts(struct zn_ckpt_meta *m, const char *path)
{
	struct zn_ckpt_info *in = &m->info;
	int64_t x[12];
	static const char *const keys[] = { "zinc_checkpoint", "step", "skipped", "data_step",
					    "global_micro", "seq", "world", "stage", "seed",
					    "layers", "ls.cur_hysteresis", "ls.iter" };
	const char *v;
	int rc = 0;

	for (int i = 0; !rc && i < 12; i++)
		rc = get_int(m, path, keys[i], i == 0 ? 1 : 0, i == 0 ? 1 : INT64_MAX, &x[i]);
	if (!rc && (x[6] < 1 || x[6] > 1 << 20 || x[9] < 1 || x[9] > 1 << 24 || x[7] > 3 ||
		    x[5] > 1 << 24))
		rc = bad(path, "world, layers, stage or seq out of range", NULL);
	if (rc)
		return rc;
	in->step = x[1];
	m->skipped = x[2];
	in->data_step = x[3];
	in->global_micro = x[4];
	in->seq = (int)x[5];
	in->world = (int)x[6];
	in->stage = (int)x[7];
	in->seed = (uint64_t)x[8];
	m->layers = (int)x[9];
	m->ls.cur_hysteresis = (int)x[10];
	m->ls.iter = x[11];
	rc = get_int(m, path, "ls.last_overflow_iter", INT64_MIN, INT64_MAX,
		     &m->ls.last_overflow_iter);
	v = zn_ckpt_meta_get(m, "ls.scale");
	if (!rc && !v)
		rc = bad(path, "missing key", "ls.scale");
	if (!rc)
		m->ls.scale = strtod(v, NULL);
	return rc;
}

/* "SIZE CRC" of key */
static int get_file(const struct zn_ckpt_meta *m, const char *path, const char *key,
		    uint64_t *size, uint32_t *crc)
{
	const char *v = zn_ckpt_meta_get(m, key);
	unsigned long long s;
	unsigned int c;

	if (!v || sscanf(v, "%llu %x", &s, &c) != 2)
		return bad(path, "missing or bad file entry", key);
	*size = s;
	*crc = c;
	return 0;
}

/* optimizer_states: fp32 when absent (checkpoints from before the setting) */
static int get_states(struct zn_ckpt_meta *m, const char *path)
{
	const char *v = zn_ckpt_meta_get(m, "optimizer_states");

	m->states = ZN_STATES_FP32;
	for (int s = ZN_STATES_FP32; v && s <= ZN_STATES_INT8; s++)
		if (!strcmp(v, zn_optim_states_name(s))) {
			m->states = s;
			return 0;
		}
	return v ? bad(path, "bad value of", "optimizer_states") : 0;
}

int zn_ckpt_meta_read(struct zn_ckpt_meta *m, const char *path)
{
	size_t len = 0;
	char *last, key[64];
	unsigned int stored;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = zn_read_input_file(path, "checkpoint metadata", 64u << 20, &m->text, &len);
	if (rc)
		return rc;
	/* the last line is the CRC of everything before it */
	if (len < 2 || m->text[len - 1] != '\n')
		return bad(path, "truncated (no final line)", NULL);
	m->text[len - 1] = 0;
	last = strrchr(m->text, '\n');
	last = last ? last + 1 : m->text;
	if (sscanf(last, "crc32=%8x", &stored) != 1)
		return bad(path, "truncated or damaged: no crc32 line at the end", NULL);
	if (zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), m->text, (size_t)(last - m->text)) != stored)
		return bad(path, "CRC-32 mismatch: the file was changed or damaged", NULL);
	*last = 0;
	rc = split(m, path, (size_t)(last - m->text));
	if (!rc)
		rc = parse_counts(m, path);
	if (rc)
		return rc;
	m->numel = calloc((size_t)m->layers, sizeof(*m->numel));
	m->file_size = calloc((size_t)m->info.world, sizeof(*m->file_size));
	m->file_crc = calloc((size_t)m->info.world, sizeof(*m->file_crc));
	if (!m->numel || !m->file_size || !m->file_crc)
		return -ENOMEM;
	for (int l = 0; !rc && l < m->layers; l++) {
		int64_t x;

		snprintf(key, sizeof(key), "layer.%d", l);
		rc = get_int(m, path, key, 1, INT64_MAX, &x);
		m->numel[l] = (uint64_t)x;
	}
	for (int r = 0; !rc && r < m->info.world; r++) {
		snprintf(key, sizeof(key), "rank.%d", r);
		rc = get_file(m, path, key, &m->file_size[r], &m->file_crc[r]);
	}
	if (!rc)
		rc = get_file(m, path, "config", &m->config_size, &m->config_crc);
	if (!rc)
		rc = get_states(m, path);
	return rc;
}
