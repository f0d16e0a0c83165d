/* How a run's model was made, in its checkpoints (train_recipe.h). The base's identity is
 * a 64-bit FNV-1a hash of the files that define it (config.json, adapter_config.json, the
 * safetensors index, and every .safetensors file's header: its 8-byte length and the JSON
 * with every tensor's name, dtype, shape and offsets), in name order, with the first and
 * last 64 KiB of each file's tensor bytes (the headers alone cannot tell two models of one
 * layout apart; a fine-tune changes the first and last tensors too). A few reads however
 * large the model; a change confined to the middle of a shard goes unseen. */
#include "train/train_recipe.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "sched/ckpt.h"
#include "zinc.h"

#define HEADER_MAX (100u << 20) /* safetensors' own limit on a header */

struct fnv {
	uint64_t h;
	bool bad;
};

static void fnv_add(struct fnv *f, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	for (size_t i = 0; i < n; i++)
		f->h = (f->h ^ p[i]) * 0x100000001b3ull;
}

/* the first `limit` bytes of path; a .safetensors file: its length field and header */
static void fnv_file(struct fnv *f, const char *path, bool safetensors)
{
	unsigned char buf[65536], len8[8];
	uint64_t left = 64u << 20, n = 0;
	FILE *fp = fopen(path, "rb");
	size_t k;

	if (!fp) {
		f->bad = true;
		return;
	}
	if (safetensors) {
		if (fread(len8, 1, 8, fp) != 8) {
			f->bad = true;
			fclose(fp);
			return;
		}
		for (int i = 7; i >= 0; i--)
			n = n << 8 | len8[i];
		fnv_add(f, len8, 8);
		left = n < HEADER_MAX ? n : HEADER_MAX;
	}
	while (left && (k = fread(buf, 1, left < sizeof(buf) ? (size_t)left : sizeof(buf), fp))) {
		fnv_add(f, buf, k);
		left -= k;
	}
	if (safetensors) {
		/* the data's first and last 64 KiB (sizeof(buf)) */
		k = fread(buf, 1, sizeof(buf), fp);
		fnv_add(f, buf, k);
		if (k == sizeof(buf) && !fseek(fp, -(long)sizeof(buf), SEEK_END) &&
		    ftell(fp) >= (long)(8 + n + sizeof(buf))) {
			k = fread(buf, 1, sizeof(buf), fp);
			fnv_add(f, buf, k);
		}
	}
	fclose(fp);
}

static bool ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && !strcmp(s + a - b, tail);
}

static int defining(const struct dirent *d)
{
	return !strcmp(d->d_name, "config.json") || !strcmp(d->d_name, "adapter_config.json") ||
	       ends_with(d->d_name, ".safetensors.index.json") ||
	       ends_with(d->d_name, ".safetensors");
}

/* "fnv64:XXXXXXXXXXXXXXXX" of the model or adapter at path (a directory or one file) */
static int identity(const char *path, char *out, size_t size)
{
	struct fnv f = { 0xcbf29ce484222325ull, false };
	struct dirent **names = NULL;
	char p[PATH_MAX + 256];
	struct stat st;
	int n;

	if (stat(path, &st)) {
		zn_error("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		fnv_file(&f, path, true);
	} else {
		n = scandir(path, &names, defining, alphasort);
		if (n < 0) {
			zn_error("%s: %s", path, strerror(errno));
			return -EIO;
		}
		for (int i = 0; i < n; i++) {
			snprintf(p, sizeof(p), "%s/%s", path, names[i]->d_name);
			fnv_add(&f, names[i]->d_name, strlen(names[i]->d_name) + 1);
			fnv_file(&f, p, ends_with(names[i]->d_name, ".safetensors"));
			free(names[i]);
		}
		free(names);
	}
	if (f.bad) {
		zn_error("%s: a file of the model could not be read", path);
		return -EIO;
	}
	snprintf(out, size, "fnv64:%016" PRIx64, f.h);
	return 0;
}

static void base_identity(const struct zn_train_recipe *r, uint64_t seed, char *out,
			  size_t size, int *rc)
{
	if (r->init_from)
		*rc = identity(r->init_from, out, size);
	else
		snprintf(out, size, "seeded:%" PRIu64, seed);
}

struct text {
	char *buf;
	size_t size, len;
	int rc;
};

static void put(struct text *t, const char *key, const char *val)
{
	int n;

	if (t->rc)
		return;
	if (strchr(val, '\n')) {
		zn_error("%s '%s': a newline cannot be recorded in a checkpoint", key, val);
		t->rc = -EINVAL;
		return;
	}
	n = snprintf(t->buf + t->len, t->size - t->len, "run.%s=%s\n", key, val);
	if (n < 0 || (size_t)n >= t->size - t->len)
		t->rc = -ENAMETOOLONG;
	else
		t->len += (size_t)n;
}

static const char *absolute(const char *path, char *buf)
{
	return realpath(path, buf) ? buf : path;
}

static void targets_text(const struct zn_lora_config *lc, char *buf, size_t size)
{
	size_t k = 0;

	buf[0] = 0;
	for (int i = 0; i < lc->target_count && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? "," : "", lc->targets[i]);
}

static void lora_text(struct text *t, const struct zn_train_lora *tl)
{
	const struct zn_lora_config *lc = &tl->lc;
	char v[ZN_LORA_MAX_TARGETS * ZN_LORA_NAME_MAX + 16], abs[PATH_MAX], id[64];
	float alpha = lc->alpha > 0 ? lc->alpha : (float)lc->r;

	put(t, "lora", "1");
	snprintf(v, sizeof(v), "%d", lc->r);
	put(t, "lora.r", v);
	snprintf(v, sizeof(v), "%a", (double)alpha);
	put(t, "lora.alpha", v);
	snprintf(v, sizeof(v), "%a", (double)lc->dropout);
	put(t, "lora.dropout", v);
	put(t, "lora.rslora", lc->rslora ? "1" : "0");
	targets_text(lc, v, sizeof(v));
	put(t, "lora.targets", v);
	put(t, "lora.init_adapter", tl->init_adapter ? absolute(tl->init_adapter, abs) : "none");
	if (tl->init_adapter && !t->rc) {
		t->rc = identity(tl->init_adapter, id, sizeof(id));
		put(t, "lora.init_adapter.identity", id);
	}
}

int zn_train_recipe_text(const struct zn_train_recipe *r, const struct zn_train_model *tm,
			 const struct zn_train_lora *tl, uint64_t seed, char *buf, size_t size)
{
	struct text t = { buf, size, 0, 0 };
	char v[PATH_MAX + 32], shape[2048], key[64];

	buf[0] = 0;
	put(&t, "model.source", r->init_from ? "init-from" : r->model_config ? "model-config" :
		"flags");
	if (r->init_from || r->model_config)
		put(&t, "model.path", absolute(r->init_from ? r->init_from : r->model_config, v));
	snprintf(v, sizeof(v), "%d", r->flag_count);
	put(&t, "model.flags", v);
	for (int i = 0; i < r->flag_count; i++) {
		snprintf(key, sizeof(key), "model.flag.%d", i);
		put(&t, key, r->flags[i]);
	}
	/* the resolved model: "model.layers=2" lines become run.shape.layers=2 */
	zn_train_model_text(tm, shape, sizeof(shape));
	for (char *line = shape, *nl; !t.rc && (nl = strchr(line, '\n')); line = nl + 1) {
		char *eq = strchr(line, '=');

		*nl = 0;
		if (!eq || eq > nl)
			continue;
		*eq = 0;
		snprintf(key, sizeof(key), "shape.%s", line + strlen("model."));
		put(&t, key, eq + 1);
	}
	base_identity(r, seed, v, sizeof(v), &t.rc);
	put(&t, "base.identity", v);
	if (tl && tl->on)
		lora_text(&t, tl);
	return t.rc;
}

bool zn_train_recipe_recorded(const struct zn_ckpt_dir *ck)
{
	return zn_ckpt_get(ck, "run.model.source") != NULL;
}

static int fill_lora(const struct zn_ckpt_dir *ck, struct zn_train_lora *tl)
{
	const char *r = zn_ckpt_get(ck, "run.lora.r"), *a = zn_ckpt_get(ck, "run.lora.alpha");
	const char *d = zn_ckpt_get(ck, "run.lora.dropout");
	const char *rs = zn_ckpt_get(ck, "run.lora.rslora");
	const char *tg = zn_ckpt_get(ck, "run.lora.targets");

	if (!r || !a || !d || !rs || !tg) {
		zn_error("--resume %s: the LoRA settings are incomplete in its metadata: give "
			 "--lora-r, --lora-alpha and --lora-targets", zn_ckpt_info(ck)->path);
		return ZN_EUSAGE;
	}
	tl->on = true;
	tl->lc.r = atoi(r);
	tl->lc.alpha = (float)strtod(a, NULL);
	tl->lc.dropout = (float)strtod(d, NULL);
	tl->lc.rslora = !strcmp(rs, "1");
	tl->lc.target_count = 0;
	return zn_lora_add_targets(&tl->lc, tg) ? ZN_EUSAGE : 0;
}

int zn_train_recipe_fill(const struct zn_ckpt_dir *ck, struct zn_train_recipe *r,
			 struct zn_train_lora *tl, int *seq)
{
	const char *src = zn_ckpt_get(ck, "run.model.source");
	const char *path = zn_ckpt_get(ck, "run.model.path");
	const char *count = zn_ckpt_get(ck, "run.model.flags");
	int n = count ? atoi(count) : 0;
	char key[64];

	if (!src)
		return 0;
	if (tl && !tl->on && zn_ckpt_get(ck, "run.lora") && fill_lora(ck, tl))
		return ZN_EUSAGE;
	if (r->init_from || r->model_config || r->flag_count)
		return 0;
	if (n < 0 || n > 4096)
		n = 0;
	free(r->flags);
	r->flags = calloc((size_t)n + 1, sizeof(*r->flags));
	if (!r->flags)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "run.model.flag.%d", i);
		r->flags[r->flag_count] = (char *)zn_ckpt_get(ck, key);
		r->flag_count += r->flags[r->flag_count] != NULL;
	}
	if (!strcmp(src, "init-from"))
		r->init_from = path;
	else if (!strcmp(src, "model-config"))
		r->model_config = path;
	r->from_checkpoint = true;
	if (seq && !*seq)
		*seq = zn_ckpt_info(ck)->seq;
	return 0;
}

/* the recorded model flags, " --model tiny ..." */
static void recorded_flags(const struct zn_ckpt_dir *ck, char *buf, size_t size)
{
	const char *src = zn_ckpt_get(ck, "run.model.source");
	const char *path = zn_ckpt_get(ck, "run.model.path");
	const char *count = zn_ckpt_get(ck, "run.model.flags");
	size_t k = 0;
	char key[64];

	buf[0] = 0;
	if (src && path && strcmp(src, "flags"))
		k += (size_t)snprintf(buf, size, " --%s %s", src, path);
	for (int i = 0; count && i < atoi(count) && k < size; i++) {
		const char *f;

		snprintf(key, sizeof(key), "run.model.flag.%d", i);
		f = zn_ckpt_get(ck, key);
		k += (size_t)snprintf(buf + k, size - k, " %s", f ? f : "");
	}
}

static int differs(const struct zn_ckpt_dir *ck, const char *what, const char *fmt,
		   const char *a, const char *b, const char *hint)
{
	char d[512];

	snprintf(d, sizeof(d), fmt, a, b);
	zn_error("%s %s/%s: %s; %s", what, zn_ckpt_info(ck)->path, ZN_CKPT_META, d, hint);
	return ZN_EUSAGE;
}

static int check_shape(const struct zn_ckpt_dir *ck, const char *what,
		       const struct zn_train_model *tm, bool any_seq)
{
	char shape[2048], key[64], hint[PATH_MAX + 600], rec[PATH_MAX + 400];
	/* a family's text names it (model.family=) but the registry's first's, which
	 * checkpoints wrote before there was a registry */
	const char *saved_fam = zn_ckpt_get(ck, "run.shape.family");

	recorded_flags(ck, rec, sizeof(rec));
	snprintf(hint, sizeof(hint), "drop the model flags (the checkpoint's model is used) or "
		 "give the run's:%s", rec);
	if (!saved_fam)
		saved_fam = zn_family_at(0)->name;
	if (strcmp(saved_fam, tm->fam->name))
		return differs(ck, what, "the model is a %s in this run, a %s in the checkpoint",
			       tm->fam->name, saved_fam, hint);
	zn_train_model_text(tm, shape, sizeof(shape));
	for (char *line = shape, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
		char *eq = strchr(line, '=');
		const char *saved;

		*nl = 0;
		if (!eq)
			continue;
		*eq = 0;
		snprintf(key, sizeof(key), "run.shape.%s", line + strlen("model."));
		if (any_seq && tm->fam->seq_free && !strcmp(key, "run.shape.seq"))
			continue;
		saved = zn_ckpt_get(ck, key);
		if (!saved || strcmp(saved, eq + 1)) {
			char fmt[128];

			snprintf(fmt, sizeof(fmt), "the model's %s is %%s in this run, %%s in the "
				 "checkpoint", line + strlen("model."));
			return differs(ck, what, fmt, eq + 1, saved ? saved : "(none)", hint);
		}
	}
	return 0;
}

static int check_lora(const struct zn_ckpt_dir *ck, const char *what,
		      const struct zn_train_lora *tl)
{
	const struct zn_lora_config *lc = &tl->lc;
	float alpha = lc->alpha > 0 ? lc->alpha : (float)lc->r;
	const char *ia = zn_ckpt_get(ck, "run.lora.init_adapter");
	const char *iid = zn_ckpt_get(ck, "run.lora.init_adapter.identity");
	char mine[ZN_LORA_MAX_TARGETS * ZN_LORA_NAME_MAX + 16], saved[64], id[64];
	static const char hint[] = "give the LoRA flags the run was started with, or none (the "
				   "checkpoint's are used)";
	const char *keys[] = { "run.lora.r", "run.lora.alpha", "run.lora.dropout",
			       "run.lora.rslora", "run.lora.targets" };
	const char *names[] = { "--lora-r", "--lora-alpha", "--lora-dropout", "--use-rslora",
				"--lora-targets" };

	for (int i = 0; i < 5; i++) {
		const char *s = zn_ckpt_get(ck, keys[i]);
		bool same;

		if (i == 0)
			snprintf(mine, sizeof(mine), "%d", lc->r);
		else if (i == 1 || i == 2)
			snprintf(mine, sizeof(mine), "%a", (double)(i == 1 ? alpha : lc->dropout));
		else if (i == 3)
			snprintf(mine, sizeof(mine), "%d", lc->rslora ? 1 : 0);
		else
			targets_text(lc, mine, sizeof(mine));
		same = s && !strcmp(s, mine);
		if (!same && (i == 1 || i == 2)) {
			snprintf(saved, sizeof(saved), "%g", s ? strtod(s, NULL) : 0.0);
			snprintf(mine, sizeof(mine), "%g",
				 i == 1 ? (double)alpha : (double)lc->dropout);
		} else {
			snprintf(saved, sizeof(saved), "%.60s", s ? s : "(none)");
		}
		if (!same) {
			char fmt[128];

			snprintf(fmt, sizeof(fmt), "%s is %%s in this run, %%s in the checkpoint",
				 names[i]);
			return differs(ck, what, fmt, mine, saved, hint);
		}
	}
	if (!tl->init_adapter)
		return 0;
	if (!ia || !strcmp(ia, "none"))
		return differs(ck, what, "--init-adapter %s is given; the checkpoint's run started "
			       "without one%s", tl->init_adapter, "",
			       "drop --init-adapter (the checkpoint holds the adapter)");
	if (identity(tl->init_adapter, id, sizeof(id)))
		return ZN_EUSAGE;
	if (!iid || strcmp(iid, id))
		return differs(ck, what, "--init-adapter %s is not the adapter the run started "
			       "from (%s: its files differ)", tl->init_adapter, ia,
			       "drop --init-adapter (the checkpoint holds the adapter)");
	return 0;
}

int zn_train_recipe_check(const struct zn_ckpt_dir *ck, const char *what,
			  const struct zn_train_recipe *r, const struct zn_train_model *tm,
			  const struct zn_train_lora *tl, uint64_t seed)
{
	const char *path = zn_ckpt_get(ck, "run.model.path");
	const char *id = zn_ckpt_get(ck, "run.base.identity");
	bool lora = tl && tl->on, saved_lora = zn_ckpt_get(ck, "run.lora") != NULL;
	char mine[64];
	int rc = 0;

	if (!zn_train_recipe_recorded(ck))
		return 0;
	if (lora != saved_lora)
		return differs(ck, what, "this run %s LoRA, the checkpoint's %s", lora ? "trains" :
			       "does not train", saved_lora ? "did" : "did not",
			       lora ? "drop the --lora-* flags" : "give the run's --lora-* flags, "
			       "or none");
	rc = check_shape(ck, what, tm, r->any_seq);
	if (!rc && lora)
		rc = check_lora(ck, what, tl);
	/* the weights the run reads: a base under LoRA, or the --init-from a re-run names */
	if (rc || (!lora && !r->init_from))
		return rc;
	base_identity(r, seed, mine, sizeof(mine), &rc);
	if (!rc && (!id || strcmp(id, mine))) {
		if (!r->init_from)
			return differs(ck, what, "the seeded base differs (%s in this run, "
				       "%s in the checkpoint)", mine, id ? id : "(none)",
				       "give the run's seed (--seed)");
		return differs(ck, what, "--init-from %s is not the base the checkpoint was "
			       "trained from (%s: its config.json, index, safetensors headers or "
			       "tensor bytes differ)", r->init_from, path ? path : "(none)",
			       "give that base, or drop --init-from");
	}
	return rc;
}

void zn_train_recipe_release(struct zn_train_recipe *r)
{
	free(r->flags);
	r->flags = NULL;
	r->flag_count = 0;
}
