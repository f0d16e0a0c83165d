/* Resume: open and verify a checkpoint (every file's CRC before anything runs), check it
 * against this run's model and batch layout, then read layers back by element range from
 * whichever rank files hold them, so another rank count or ZeRO stage re-shards. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsio.h"
#include "core/log.h"
#include "cpu/q8.h"
#include "model/model.h"
#include "sched/ckpt_impl.h"
#include "sched/engine_impl.h"

struct zn_ckpt_dir {
	struct zn_ckpt_meta m;
	char dir[ZN_PATH_MAX + 80];
	const char *what;        /* the flag that named it, for errors */
	char *config;            /* the saved config.json */
	int *fd;                 /* per saved rank */
	uint64_t *data_off;      /* [rank * layers + l]: where layer l's master starts */
};

const struct zn_ckpt_info *zn_ckpt_info(const struct zn_ckpt_dir *c)
{
	return &c->m.info;
}

const char *zn_ckpt_get(const struct zn_ckpt_dir *c, const char *key)
{
	return zn_ckpt_meta_get(&c->m, key);
}

void zn_ckpt_close(struct zn_ckpt_dir *c)
{
	if (!c)
		return;
	for (int r = 0; c->fd && r < c->m.info.world; r++)
		if (c->fd[r] >= 0)
			close(c->fd[r]);
	free(c->fd);
	free(c->data_off);
	free(c->config);
	zn_ckpt_meta_free(&c->m);
	free(c);
}

static bool is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* path is a checkpoint (has the metadata) or a save directory (has `latest`) */
static int resolve(struct zn_ckpt_dir *c, const char *path, const char *what)
{
	char p[ZN_PATH_MAX + 80], *name = NULL;
	size_t len = 0;
	int rc;

	snprintf(p, sizeof(p), "%s/%s", path, ZN_CKPT_META);
	if (is_file(p)) {
		snprintf(c->dir, sizeof(c->dir), "%s", path);
		return 0;
	}
	snprintf(p, sizeof(p), "%s/%s", path, ZN_CKPT_LATEST);
	if (!is_file(p)) {
		zn_error("%s %s: neither a checkpoint (no %s) nor a save directory with a "
			 "checkpoint (no %s): give --save-dir's directory or one of its "
			 "checkpoint-N", what, path, ZN_CKPT_META, ZN_CKPT_LATEST);
		return -ENOENT;
	}
	rc = zn_read_input_file(p, what, 4096, &name, &len);
	if (rc)
		return rc;
	while (len > 0 && (name[len - 1] == '\n' || name[len - 1] == '\r'))
		name[--len] = 0;
	if (strncmp(name, "checkpoint-", 11) || strchr(name, '/') || len > 40) {
		zn_error("%s %s: 'latest' names '%s', not a checkpoint-N: the save directory is "
			 "damaged; give one of its checkpoint-N directories", what, p, name);
		free(name);
		return -EBADMSG;
	}
	snprintf(c->dir, sizeof(c->dir), "%s/%s", path, name);
	free(name);
	return 0;
}

static int verify_files(struct zn_ckpt_dir *c)
{
	const struct zn_ckpt_meta *m = &c->m;
	int W = m->info.world, L = m->layers, rc = 0;
	char p[ZN_PATH_MAX + 160];
	size_t len = 0;

	snprintf(p, sizeof(p), "%s/%s", c->dir, ZN_CKPT_CONFIG);
	rc = zn_read_input_file(p, "checkpoint config", ZN_CKPT_CONFIG_MAX_BYTES, &c->config,
				&len);
	if (!rc && (len != m->config_size ||
		    zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), c->config, len) != m->config_crc)) {
		zn_error("checkpoint %s: size or CRC-32 differs from the metadata's: the file "
			 "was changed or damaged", p);
		rc = -EBADMSG;
	}
	c->fd = malloc((size_t)W * sizeof(*c->fd));
	c->data_off = calloc((size_t)W * (size_t)L, sizeof(*c->data_off));
	if (!rc && (!c->fd || !c->data_off))
		rc = -ENOMEM;
	for (int r = 0; c->fd && r < W; r++)
		c->fd[r] = -1;
	for (int r = 0; !rc && r < W; r++) {
		char name[64];
		uint64_t off = ZN_CKPT_HEADER_BYTES + (uint64_t)L * ZN_CKPT_TABLE_BYTES;

		zn_ckpt_rank_name(name, sizeof(name), r, W);
		snprintf(p, sizeof(p), "%s/%s", c->dir, name);
		rc = zn_ckpt_verify_rank(p, &(struct zn_ckpt_rank_hdr){ r, W, m->info.stage, L,
								   m->states },
					 m->numel, m->file_size[r], m->file_crc[r]);
		if (!rc) {
			c->fd[r] = zn_open_input_regular(p, "checkpoint file", NULL);
			rc = c->fd[r] < 0 ? c->fd[r] : 0;
		}
		for (int l = 0; !rc && l < L; l++) {
			struct zn_shard s;

			zn_plan_shard(m->numel[l], W, r, &s);
			c->data_off[(size_t)r * L + l] = off;
			off += zn_ckpt_slice_bytes(m->states, s.real_numel);
		}
	}
	return rc;
}

int zn_ckpt_open(struct zn_ckpt_dir **out, const char *path, const char *what)
{
	struct zn_ckpt_dir *c = calloc(1, sizeof(*c));
	char p[ZN_PATH_MAX + 160];
	int rc = c ? 0 : -ENOMEM;

	*out = NULL;
	if (!rc)
		rc = resolve(c, path, what);
	snprintf(p, sizeof(p), "%s/%s", c ? c->dir : "", ZN_CKPT_META);
	if (!rc)
		rc = zn_ckpt_meta_read(&c->m, p);
	if (!rc)
		rc = verify_files(c);
	if (rc) {
		zn_ckpt_close(c);
		return rc;
	}
	c->m.info.path = c->dir;
	c->what = what;
	*out = c;
	return 0;
}

static int differs(const struct zn_ckpt_dir *c, const char *what)
{
	zn_error("%s %s/%s: %s: resume with the model, micro batch and rank layout the "
		 "checkpoint was saved with", c->what, c->dir, ZN_CKPT_META, what);
	return ZN_EUSAGE;
}

/* layer l's tensors (names, shapes) and size as the checkpoint lists them */
static int layer_check(const struct zn_ckpt_dir *c, const struct zn_layer_desc *L, int l)
{
	const struct zn_ckpt_meta *m = &c->m;
	char what[512], key[64];

	for (int k = 0; k < L->tensor_count; k++) {
		const struct zn_tensor_desc *t = &L->tensors[k];
		char mine[ZN_MODEL_NAME_MAX + 64];
		const char *saved;

		snprintf(key, sizeof(key), "tensor.%d.%d", l, k);
		snprintf(mine, sizeof(mine), "%s %" PRId64 "x%" PRId64, t->name, t->shape[0],
			 t->ndim > 1 ? t->shape[1] : 1);
		saved = zn_ckpt_meta_get(m, key);
		if (!saved || strcmp(saved, mine)) {
			snprintf(what, sizeof(what), "layer %d tensor %d is '%s' in the checkpoint, "
				 "'%s' (name, shape) in this run's model", l, k,
				 saved ? saved : "(none)", mine);
			return differs(c, what);
		}
	}
	if (L->numel != m->numel[l]) {
		snprintf(what, sizeof(what), "layer %d has %" PRIu64 " parameters in the checkpoint, "
			 "%" PRIu64 " in this run's model", l, m->numel[l], L->numel);
		return differs(c, what);
	}
	return 0;
}

int zn_ckpt_check(const struct zn_ckpt_dir *c, const struct zn_model *model, int64_t global_micro,
		  int seq, const char *config_json)
{
	const struct zn_ckpt_meta *m = &c->m;
	const char *fam = zn_ckpt_meta_get(m, "family");
	int n = model->ops->layer_count(model->config);
	char what[512];

	if (!fam || strcmp(fam, model->ops->family)) {
		snprintf(what, sizeof(what), "model family %s in the checkpoint, %s in this run",
			 fam ? fam : "(none)", model->ops->family);
		return differs(c, what);
	}
	if (n != m->layers) {
		snprintf(what, sizeof(what), "%d layers in the checkpoint, %d in this run's model",
			 m->layers, n);
		return differs(c, what);
	}
	for (int l = 0; l < n; l++) {
		struct zn_layer_desc L;
		int rc;

		if (model->ops->describe(model->config, l, &L))
			return -EINVAL;
		rc = layer_check(c, &L, l);
		zn_layer_desc_release(&L);
		if (rc)
			return rc;
	}
	if (global_micro != m->info.global_micro || seq != m->info.seq) {
		snprintf(what, sizeof(what), "the data position counts batches of %" PRId64
			 " sequences (ranks x micro batch) of %d tokens; this run's are %" PRId64
			 " of %d", m->info.global_micro, m->info.seq, global_micro, seq);
		return differs(c, what);
	}
	if (config_json && c->config && strcmp(config_json, c->config))
		zn_ckpt_config_diff(c->dir, c->config, config_json);
	return 0;
}

/* kind 0 master, 1 m, 2 v: elements [first, first + count) of layer l into dst, as a rank
 * file holds a slice of count elements (the master fp32; m and v as stored: int8 codes,
 * then the blocks' absmax). first and every slice start are multiples of the int8 block
 * (shard offsets), so the blocks are the same in every sharding. */
static int read_range(const struct zn_ckpt_dir *c, int l, int kind, uint64_t first,
		      uint64_t count, void *dst)
{
	int W = c->m.info.world, rc = 0;
	enum zn_optim_states st = kind ? c->m.states : ZN_STATES_FP32;
	uint64_t es = zn_plan_moment_bytes(st, ZN_Q8_BLOCK) / ZN_Q8_BLOCK; /* 4, 2, 1 */

	for (int r = 0; !rc && r < W; r++) {
		struct zn_shard s;
		uint64_t lo, hi, off;
		char name[64], p[ZN_PATH_MAX + 160];

		zn_plan_shard(c->m.numel[l], W, r, &s);
		lo = s.offset > first ? s.offset : first;
		hi = s.offset + s.real_numel < first + count ? s.offset + s.real_numel :
							       first + count;
		if (lo >= hi)
			continue;
		/* this slice's part: the master, then m, then v */
		off = c->data_off[(size_t)r * c->m.layers + l] +
		      (kind ? s.real_numel * 4 : 0) +
		      (kind == 2 ? zn_plan_moment_bytes(st, s.real_numel) : 0);
		zn_ckpt_rank_name(name, sizeof(name), r, W);
		snprintf(p, sizeof(p), "%s/%s", c->dir, name);
		rc = zn_pread_all(c->fd[r], (char *)dst + (lo - first) * es, (hi - lo) * es,
				  off + (lo - s.offset) * es, p);
		if (!rc && st == ZN_STATES_INT8)
			rc = zn_pread_all(c->fd[r], (char *)dst + count +
					  (lo - first) / ZN_Q8_BLOCK * 4,
					  zn_q8_blocks(hi - lo) * 4,
					  off + s.real_numel + (lo - s.offset) / ZN_Q8_BLOCK * 4, p);
	}
	return rc;
}

int zn_ckpt_check_states(const struct zn_ckpt_dir *c, enum zn_optim_states states)
{
	if (c->m.states == states)
		return 0;
	zn_error("--resume %s/%s: optimizer states %s in the checkpoint, %s in this run: a "
		 "checkpoint keeps m and v as they were stored; resume with --optimizer-states "
		 "%s (zinc.optimizer_states)", c->dir, ZN_CKPT_META,
		 zn_optim_states_name(c->m.states), zn_optim_states_name(states),
		 zn_optim_states_name(c->m.states));
	return ZN_EUSAGE;
}

int zn_ckpt_init_layer(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h)
{
	const struct zn_ckpt_dir *c = ctx;

	return read_range(c, layer, 0, 0, L->numel, params_h);
}

int zn_ckpt_restore(struct zn_engine *e, const struct zn_ckpt_dir *c)
{
	uint64_t max = zn_plan_moment_bytes(e->plan.states, zn_ckpt_state_max_slice(e)) + 4;
	void *m = malloc(max), *v = malloc(max);
	int rc = m && v ? 0 : -ENOMEM;

	if (!rc)
		rc = zn_ckpt_check_states(c, e->plan.states);

	for (int l = 0; !rc && l < e->n; l++) {
		uint64_t first, count;

		zn_ckpt_state_span(e, l, &first, &count);
		rc = read_range(c, l, 1, first, count, m);
		if (!rc)
			rc = read_range(c, l, 2, first, count, v);
		if (!rc)
			rc = zn_ckpt_state_put(e, l, m, v);
	}
	/* only an fp16 run has a loss scaler to go on with (the others save zeros) */
	if (!rc)
		zn_ckpt_state_set_counters(e, c->m.info.step, c->m.skipped,
					   c->m.info.dtype == ZN_DTYPE_F16 ? &c->m.ls : NULL);
	free(m);
	free(v);
	return rc;
}
