/* A checkpoint's metadata read back (ckpt_impl.h): the CRC line first, then the text split
 * into key=value lines, every key one the writer (ckpt_meta.c) writes and none twice,
 * every value in the range a run could have written and the fields consistent with each
 * other (skipped <= step, ...), all before any rank file is opened; the rank files and
 * config.json are checked against the sizes and CRCs read here by ckpt_load.c. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/log.h"
#include "cpu/adamw.h"
#include "model/model.h"
#include "sched/ckpt_impl.h"

/* the largest step a run reaches (its loop counts in int) */
#define MAX_STEP INT32_MAX
/* per layer and in all: numel x 12 bytes (master, m, v) must stay far inside uint64 */
#define MAX_LAYER_NUMEL (UINT64_C(1) << 48)
#define MAX_TOTAL_NUMEL (UINT64_C(1) << 56)

static int bad(const char *path, const char *what, const char *key)
{
	zn_error("checkpoint %s: %s%s%s: the metadata is damaged or not a zinc checkpoint's; "
		 "resume from another checkpoint", path, what, key ? " " : "", key ? key : "");
	return -EBADMSG;
}

/* A decimal without sign, leading zeros or overflow: "0", "17", not "017", "+1", "1e3". */
static bool parse_u64(const char *v, uint64_t *out)
{
	uint64_t x = 0;

	if (!v || !*v || (v[0] == '0' && v[1]))
		return false;
	for (; *v; v++) {
		if (*v < '0' || *v > '9' || x > (UINT64_MAX - (uint64_t)(*v - '0')) / 10)
			return false;
		x = x * 10 + (uint64_t)(*v - '0');
	}
	*out = x;
	return true;
}

/* key's value as a decimal integer in [lo, hi] ("-1" for a negative one) */
static int get_int(const struct zn_ckpt_meta *m, const char *path, const char *key, int64_t lo,
		   int64_t hi, int64_t *out)
{
	const char *v = zn_ckpt_meta_get(m, key);
	bool neg = v && v[0] == '-';
	uint64_t x;

	if (!v)
		return bad(path, "missing key", key);
	if (!parse_u64(v + neg, &x) || x > (uint64_t)INT64_MAX + neg || (neg && x == 0))
		return bad(path, "bad value of", key);
	*out = neg ? (x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x) : (int64_t)x;
	if (*out < lo || *out > hi)
		return bad(path, "value out of range of", key);
	return 0;
}

static bool is_hex8(const char *s)
{
	for (int i = 0; i < 8; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[8] == '\0';
}

/* "SIZE CRC": a decimal and 8 lowercase hex digits */
static int get_file(const struct zn_ckpt_meta *m, const char *path, const char *key,
		    uint64_t *size, uint32_t *crc)
{
	const char *v = zn_ckpt_meta_get(m, key), *sp = v ? strchr(v, ' ') : NULL;
	char num[24];

	if (!sp || sp - v >= (long)sizeof(num) || !is_hex8(sp + 1))
		return bad(path, "missing or bad file entry", key);
	memcpy(num, v, (size_t)(sp - v));
	num[sp - v] = 0;
	if (!parse_u64(num, size))
		return bad(path, "bad size in", key);
	*crc = (uint32_t)strtoul(sp + 1, NULL, 16);
	return 0;
}

/* The last line "crc32=XXXXXXXX" covers all bytes before it; *body: their count. */
static int check_crc(struct zn_ckpt_meta *m, size_t len, const char *path, size_t *body)
{
	char *last;

	if (len < 2 || m->text[len - 1] != '\n')
		return bad(path, "truncated (no final line)", NULL);
	if (memchr(m->text, 0, len))
		return bad(path, "a NUL byte in the text", NULL);
	m->text[len - 1] = 0;
	last = strrchr(m->text, '\n');
	last = last ? last + 1 : m->text;
	if (strncmp(last, "crc32=", 6) || !is_hex8(last + 6))
		return bad(path, "truncated or damaged: no crc32 line at the end", NULL);
	if (zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), m->text, (size_t)(last - m->text)) !=
	    (uint32_t)strtoul(last + 6, NULL, 16))
		return bad(path, "CRC-32 mismatch: the file was changed or damaged", NULL);
	*last = 0;
	*body = (size_t)(last - m->text);
	return 0;
}

static int cmp_keys(const struct zn_ckpt_meta *m, int a, int b)
{
	return strcmp(m->key[a], m->key[b]);
}

/* insertion of index i into the sorted order[0 .. n) would be O(n^2): merge sort */
static void sort_order(const struct zn_ckpt_meta *m, int *a, int *tmp, int n)
{
	int h = n / 2, i = 0, j = h, k = 0;

	if (n < 2)
		return;
	sort_order(m, a, tmp, h);
	sort_order(m, a + h, tmp, n - h);
	while (i < h && j < n)
		tmp[k++] = cmp_keys(m, a[i], a[j]) <= 0 ? a[i++] : a[j++];
	while (i < h)
		tmp[k++] = a[i++];
	while (j < n)
		tmp[k++] = a[j++];
	memcpy(a, tmp, (size_t)n * sizeof(*a));
}

static bool key_chars(const char *k)
{
	if (!*k)
		return false;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '.' ||
		      *k == '_'))
			return false;
	return true;
}

/* splits the first len bytes into lines "key=value", in place; keys sorted and unique */
static int split(struct zn_ckpt_meta *m, const char *path, size_t len)
{
	int lines = 0, *tmp;

	for (size_t i = 0; i < len; i++)
		lines += m->text[i] == '\n';
	m->key = calloc((size_t)lines + 1, sizeof(char *));
	m->val = calloc((size_t)lines + 1, sizeof(char *));
	m->order = calloc((size_t)lines + 1, sizeof(int));
	tmp = calloc((size_t)lines + 1, sizeof(int));
	if (!m->key || !m->val || !m->order || !tmp) {
		free(tmp);
		return -ENOMEM;
	}
	for (char *p = m->text; *p;) {
		char *nl = strchr(p, '\n'), *eq = strchr(p, '=');

		if (!nl || !eq || eq > nl) {
			free(tmp);
			return bad(path, "a line is not key=value", NULL);
		}
		*nl = 0;
		*eq = 0;
		if (!key_chars(p)) {
			free(tmp);
			return bad(path, "a key is empty or has characters no key has:", p);
		}
		m->order[m->kv_count] = m->kv_count;
		m->key[m->kv_count] = p;
		m->val[m->kv_count++] = eq + 1;
		p = nl + 1;
	}
	sort_order(m, m->order, tmp, m->kv_count);
	free(tmp);
	for (int i = 1; i < m->kv_count; i++)
		if (!cmp_keys(m, m->order[i - 1], m->order[i]))
			return bad(path, "a key given twice:", m->key[m->order[i]]);
	return 0;
}

static int parse_scaler(struct zn_ckpt_meta *m, const char *path)
{
	const char *v = zn_ckpt_meta_get(m, "ls.scale");
	bool fp16 = m->info.dtype == ZN_DTYPE_F16;
	char *end = NULL;
	int64_t h = 0;
	int rc;

	if (!v)
		return bad(path, "missing key", "ls.scale");
	m->ls.scale = strtod(v, &end);
	/* an fp16 run's scale is a power of two >= min_loss_scale > 0; the others save 0 */
	if (end == v || *end || !isfinite(m->ls.scale) || m->ls.scale < 0 ||
	    (fp16 && !(m->ls.scale > 0)))
		return bad(path, "bad value of", "ls.scale");
	rc = get_int(m, path, "ls.cur_hysteresis", fp16 ? 1 : 0, INT32_MAX, &h);
	m->ls.cur_hysteresis = (int)h;
	if (!rc)
		rc = get_int(m, path, "ls.iter", 0, m->info.step, &m->ls.iter);
	/* an overflow is recorded at the iteration it happened, before iter counts it (the
	 * non-fp16 runs save 0 and 0) */
	if (!rc)
		rc = get_int(m, path, "ls.last_overflow_iter", -1,
			     m->ls.iter > 0 ? m->ls.iter - 1 : 0, &m->ls.last_overflow_iter);
	return rc;
}

/* optimizer_states: fp32, bf16 or int8; fp32 when absent (checkpoints from before the
 * setting) */
static int parse_states(struct zn_ckpt_meta *m, const char *path)
{
	const char *v = zn_ckpt_meta_get(m, "optimizer_states");

	m->states = ZN_STATES_FP32;
	for (int s = ZN_STATES_FP32; v && s <= ZN_STATES_INT8; s++)
		if (!strcmp(v, zn_optim_states_name(s))) {
			m->states = s;
			return 0;
		}
	return v ? bad(path, "bad value (fp32, bf16 or int8) of", "optimizer_states") : 0;
}

static int parse_counts(struct zn_ckpt_meta *m, const char *path)
{
	struct zn_ckpt_info *in = &m->info;
	const char *dt = zn_ckpt_meta_get(m, "dtype"), *fam = zn_ckpt_meta_get(m, "family");
	const char *seed = zn_ckpt_meta_get(m, "seed");
	int64_t x[10];
	static const struct {
		const char *key;
		int64_t lo, hi;
	} keys[] = { { "zinc_checkpoint", 1, 1 }, { "step", 0, MAX_STEP },
		     { "skipped", 0, MAX_STEP }, { "data_step", 0, INT64_MAX },
		     { "global_micro", 1, INT32_MAX }, { "seq", 1, 1 << 24 },
		     { "world", 1, 1 << 20 }, { "stage", 0, 3 }, { "layers", 1, 1 << 24 } };
	int rc = 0;

	for (int i = 0; !rc && i < 9; i++)
		rc = get_int(m, path, keys[i].key, keys[i].lo, keys[i].hi, &x[i]);
	if (rc)
		return rc;
	in->step = x[1];
	m->skipped = x[2];
	in->data_step = x[3];
	in->global_micro = x[4];
	in->seq = (int)x[5];
	in->world = (int)x[6];
	in->stage = (int)x[7];
	m->layers = (int)x[8];
	/* every step takes at least one data step, and skips count steps taken */
	if (m->skipped > in->step)
		return bad(path, "more skipped steps than steps:", "skipped");
	if (in->data_step < in->step)
		return bad(path, "fewer data steps than steps:", "data_step");
	/* world x micro batch */
	if (in->global_micro % in->world)
		return bad(path, "not a multiple of world:", "global_micro");
	if (!parse_u64(seed, &in->seed))
		return bad(path, "missing or bad value of", "seed");
	if (!dt || (strcmp(dt, "fp32") && strcmp(dt, "bf16") && strcmp(dt, "fp16")))
		return bad(path, "missing or unknown", "dtype");
	in->dtype = !strcmp(dt, "fp16") ? ZN_DTYPE_F16 : !strcmp(dt, "bf16") ? ZN_DTYPE_BF16 :
					     ZN_DTYPE_F32;
	if (!fam || !key_chars(fam) || strlen(fam) > 32)
		return bad(path, "missing or bad", "family");
	rc = parse_states(m, path);
	return rc ? rc : parse_scaler(m, path);
}

/* "NAME RxC" of tensor.l.k: rows x cols in *numel */
static int parse_tensor(const char *v, const char *path, const char *key, uint64_t *numel)
{
	const char *sp = v ? strrchr(v, ' ') : NULL, *x = sp ? strchr(sp, 'x') : NULL;
	char a[24], b[24];
	uint64_t r, c;

	if (!sp || sp == v || !x || x - sp - 1 >= (long)sizeof(a) || strlen(x + 1) >= sizeof(b) ||
	    (size_t)(sp - v) >= ZN_MODEL_NAME_MAX || memchr(v, ' ', (size_t)(sp - v)))
		return bad(path, "bad tensor entry", key);
	snprintf(a, sizeof(a), "%.*s", (int)(x - sp - 1), sp + 1);
	snprintf(b, sizeof(b), "%s", x + 1);
	if (!parse_u64(a, &r) || !parse_u64(b, &c) || !r || !c || r > MAX_LAYER_NUMEL ||
	    c > MAX_LAYER_NUMEL / r)
		return bad(path, "bad tensor shape in", key);
	*numel = r * c;
	return 0;
}

/* layer.l (numel), tensor.l.k (k = 0, 1, ... while present; their elements within the
 * layer's), rank.r and config (size, CRC), and data.* (all three or none) */
static int parse_layers(struct zn_ckpt_meta *m, const char *path)
{
	uint64_t total = 0, fixed = ZN_CKPT_HEADER_BYTES + ZN_CKPT_TRAILER_BYTES +
				    (uint64_t)m->layers * ZN_CKPT_TABLE_BYTES;
	char key[64];
	int rc = 0;

	m->numel = calloc((size_t)m->layers, sizeof(*m->numel));
	m->tensors = calloc((size_t)m->layers, sizeof(*m->tensors));
	m->file_size = calloc((size_t)m->info.world, sizeof(*m->file_size));
	m->file_crc = calloc((size_t)m->info.world, sizeof(*m->file_crc));
	if (!m->numel || !m->tensors || !m->file_size || !m->file_crc)
		return -ENOMEM;
	for (int l = 0; !rc && l < m->layers; l++) {
		uint64_t sum = 0, n;
		int64_t x;

		snprintf(key, sizeof(key), "layer.%d", l);
		/* 0: a LoRA model's layer without adapters (the embeddings) */
		rc = get_int(m, path, key, 0, (int64_t)MAX_LAYER_NUMEL, &x);
		m->numel[l] = (uint64_t)x;
		total += m->numel[l];
		/* every tensor has an element: at most numel of them */
		for (int k = 0; !rc && sum <= m->numel[l]; k++) {
			snprintf(key, sizeof(key), "tensor.%d.%d", l, k);
			if (!zn_ckpt_meta_get(m, key))
				break;
			rc = parse_tensor(zn_ckpt_meta_get(m, key), path, key, &n);
			sum += n;
			m->tensors[l]++;
		}
		if (!rc && (sum > m->numel[l] || total > MAX_TOTAL_NUMEL))
			rc = bad(path, "more elements in the tensors than in", key);
	}
	for (int r = 0; !rc && r < m->info.world; r++) {
		snprintf(key, sizeof(key), "rank.%d", r);
		rc = get_file(m, path, key, &m->file_size[r], &m->file_crc[r]);
		/* a rank's share lies between nothing and the whole model (12 bytes an element;
		 * int8 moments add two 4-byte scales per slice, more than the 6 bytes they save
		 * only on a slice of one element) */
		if (!rc && (m->file_size[r] < fixed ||
			    m->file_size[r] > fixed + total * 12 + (uint64_t)m->layers * 8))
			rc = bad(path, "a size no rank file of these layers has in", key);
	}
	if (!rc)
		rc = get_file(m, path, "config", &m->config_size, &m->config_crc);
	if (!rc && m->config_size > ZN_CKPT_CONFIG_MAX_BYTES)
		rc = bad(path, "a config size over the limit in", "config");
	return rc;
}

/* data.path, data.size, data.crc32: the training data's identity (ckpt.h) */
static int parse_data(struct zn_ckpt_meta *m, const char *path)
{
	const char *p = zn_ckpt_meta_get(m, "data.path");
	const char *s = zn_ckpt_meta_get(m, "data.size");
	const char *c = zn_ckpt_meta_get(m, "data.crc32");

	if (!p && !s && !c)
		return 0;
	if (!p || !*p || !parse_u64(s, &m->info.data.size) || !c || !is_hex8(c))
		return bad(path, "incomplete or bad data identity", "data.*");
	m->info.data_path = p;
	m->info.data.crc = (uint32_t)strtoul(c, NULL, 16);
	m->info.has_data = true;
	return 0;
}

/* "<prefix>.<i>" with i a decimal below n; rest: what follows it */
static bool indexed(const char *key, const char *prefix, int64_t n, const char **rest)
{
	size_t p = strlen(prefix);
	char *end;
	long long i;

	if (strncmp(key, prefix, p) || key[p] < '0' || key[p] > '9' ||
	    (key[p] == '0' && key[p + 1] >= '0' && key[p + 1] <= '9'))
		return false;
	i = strtoll(key + p, &end, 10);
	*rest = end;
	return i < n;
}

/* "run.NAME": the recipe of how the model was made (ckpt.h's run_meta), written and
 * checked by the trainer that reads it; here only its name: lower-case letters, digits,
 * '_' and '.' */
static bool run_key(const char *key)
{
	if (strncmp(key, "run.", 4) || !key[4])
		return false;
	for (const char *c = key + 4; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' ||
		      *c == '.'))
			return false;
	return true;
}

/* Every key is one the writer writes: a fixed one, an index in range, or a run.* name. */
static int check_keys(const struct zn_ckpt_meta *m, const char *path)
{
	static const char *const fixed[] = {
		"zinc_checkpoint", "step", "skipped", "data_step", "global_micro", "seq",
		"world", "stage", "dtype", "seed", "family", "ls.scale", "ls.cur_hysteresis",
		"ls.iter", "ls.last_overflow_iter", "layers", "config", "data.path",
		"data.size", "data.crc32", "optimizer_states",
	};

	for (int i = 0; i < m->kv_count; i++) {
		const char *k = m->key[i], *rest = "";
		bool ok = false;
		int l;

		for (size_t f = 0; !ok && f < sizeof(fixed) / sizeof(fixed[0]); f++)
			ok = !strcmp(k, fixed[f]);
		if (!ok && (indexed(k, "layer.", m->layers, &rest) ||
			    indexed(k, "rank.", m->info.world, &rest)))
			ok = !*rest;
		ok = ok || run_key(k);
		if (!ok && indexed(k, "tensor.", m->layers, &rest)) {
			l = atoi(k + 7);
			ok = rest[0] == '.' && indexed(rest, ".", m->tensors[l], &rest) && !*rest;
		}
		if (!ok)
			return bad(path, "a key no checkpoint has (or an index out of range):", k);
	}
	return 0;
}

int zn_ckpt_meta_parse(struct zn_ckpt_meta *m, char *text, size_t len, const char *path)
{
	size_t body = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	m->text = text;
	rc = check_crc(m, len, path, &body);
	if (!rc)
		rc = split(m, path, body);
	if (!rc)
		rc = parse_counts(m, path);
	if (!rc)
		rc = parse_layers(m, path);
	if (!rc)
		rc = parse_data(m, path);
	if (!rc)
		rc = check_keys(m, path);
	return rc;
}

int zn_ckpt_meta_read(struct zn_ckpt_meta *m, const char *path)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = zn_read_input_file(path, "checkpoint metadata", 64u << 20, &text, &len);
	if (rc)
		return rc;
	return zn_ckpt_meta_parse(m, text, len, path);
}

const char *zn_ckpt_meta_get(const struct zn_ckpt_meta *m, const char *key)
{
	int lo = 0, hi = m->kv_count - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(m->key[m->order[mid]], key);

		if (!c)
			return m->val[m->order[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}
