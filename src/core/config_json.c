/* Config from and to DeepSpeed-style JSON (cJSON). Every key is looked up in the key
 * table (config.c); unknown keys get a warning naming the closest valid key, because
 * DeepSpeed silently ignores misspellings and zinc must not.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_keys.h"
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"

struct json_ctx {
	struct zn_config *cfg;
	const char *origin; /* file name for messages */
	int rc;
};

/* True when some key lives below path (path names a JSON object zinc knows). */
static bool is_known_object(const char *path)
{
	size_t n = strlen(path);

	for (size_t i = 0; i < zn_config_key_count; i++)
		if (!strncmp(zn_config_keys[i].path, path, n) && zn_config_keys[i].path[n] == '.')
			return true;
	return false;
}

/* The name of the next component below prefix in path ("" prefix = top level), or NULL. */
static const char *child_name(const char *path, const char *prefix, char *buf, size_t size)
{
	size_t n = strlen(prefix);
	const char *rest, *dot;

	if (n) {
		if (strncmp(path, prefix, n) || path[n] != '.')
			return NULL;
		rest = path + n + 1;
	} else {
		rest = path;
	}
	dot = strchr(rest, '.');
	n = dot ? (size_t)(dot - rest) : strlen(rest);
	if (n >= size)
		return NULL;
	memcpy(buf, rest, n);
	buf[n] = 0;
	return buf;
}

static void warn_unknown(struct json_ctx *c, const char *prefix, const char *key)
{
	char best[64] = "", name[64];
	int best_d = 1000;

	for (size_t i = 0; i < zn_config_key_count; i++) {
		const char *child = child_name(zn_config_keys[i].path, prefix, name, sizeof(name));
		int d;

		if (!child)
			continue;
		d = zn_edit_distance(key, child);
		if (d < best_d) {
			best_d = d;
			snprintf(best, sizeof(best), "%s", child);
		}
	}
	for (const struct zn_doc_key *dk = zn_config_doc_keys; dk->path; dk++) {
		const char *child = child_name(dk->path, prefix, name, sizeof(name));
		int d;

		if (!child)
			continue;
		d = zn_edit_distance(key, child);
		if (d < best_d) {
			best_d = d;
			snprintf(best, sizeof(best), "%s", child);
		}
	}
	if (best[0] && best_d <= 1 + (int)strlen(key) / 3)
		zn_warn("%s: unknown key '%s%s%s' is ignored: did you mean '%s'?", c->origin,
			prefix, *prefix ? "." : "", key, best);
	else
		zn_warn("%s: unknown key '%s%s%s' is ignored (closest valid key here: '%s')",
			c->origin, prefix, *prefix ? "." : "", key, best);
}

static int set_from_json(struct json_ctx *c, const struct zn_key *k, const cJSON *v,
			 const char *path)
{
	char buf[64], origin[256];
	const cJSON *item;

	snprintf(origin, sizeof(origin), "%s: %s", c->origin, path);
	if (cJSON_IsNull(v))
		return 0; /* null keeps the default, as DeepSpeed does */
	if (cJSON_IsString(v)) {
		/* "auto" (Hugging Face): the flag if one is given, else the default or derived
		 * value (zn_config_resolve_auto). Not for names and paths. */
		if (!strcmp(v->valuestring, "auto") && k->type != ZN_KEY_ENUM &&
		    k->type != ZN_KEY_PATHS && k->type != ZN_KEY_STRING &&
		    k->type != ZN_KEY_NAME) {
			zn_config_set_auto(c->cfg, k);
			return 0;
		}
		return zn_config_set_string(c->cfg, k, v->valuestring, origin);
	}
	if (cJSON_IsBool(v))
		return zn_config_set_string(c->cfg, k, cJSON_IsTrue(v) ? "true" : "false", origin);
	if (cJSON_IsNumber(v)) {
		/* as written: an integer exact past 2^53 (9007199254740993 stays itself), a
		 * float key's value as the user wrote it in messages; other keys given a float
		 * (4.0, 5e8) get the double's shortest digits ("4", "500000000") */
		if (v->valuestring && (k->type == ZN_KEY_FLOAT || !strpbrk(v->valuestring, ".eE")))
			return zn_config_set_string(c->cfg, k, v->valuestring, origin);
		snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
		return zn_config_set_string(c->cfg, k, buf, origin);
	}
	if (cJSON_IsArray(v) && k->type == ZN_KEY_BETAS && cJSON_GetArraySize(v) == 2 &&
	    cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(v, 1))) {
		snprintf(buf, sizeof(buf), "%.9g,%.9g", cJSON_GetArrayItem(v, 0)->valuedouble,
			 cJSON_GetArrayItem(v, 1)->valuedouble);
		return zn_config_set_string(c->cfg, k, buf, origin);
	}
	if (cJSON_IsArray(v) && k->type == ZN_KEY_PATHS) {
		struct zn_offload_config *o =
			(void *)((char *)c->cfg + k->offset -
				 offsetof(struct zn_offload_config, nvme_path_count));

		o->nvme_path_count = 0;
		cJSON_ArrayForEach(item, v) {
			if (!cJSON_IsString(item) || o->nvme_path_count >= ZN_MAX_NVME_PATHS ||
			    !item->valuestring[0] || strlen(item->valuestring) >= ZN_PATH_MAX) {
				zn_error("%s: give a directory or a list of at most %d directories "
					 "(each 1 to %d bytes)", origin, ZN_MAX_NVME_PATHS,
					 ZN_PATH_MAX - 1);
				return ZN_EUSAGE;
			}
			snprintf(o->nvme_path[o->nvme_path_count++], ZN_PATH_MAX, "%s",
				 item->valuestring);
		}
		return 0;
	}
	zn_error("%s: this value has the wrong type (see 'zinc train --help' for the key)",
		 origin);
	return ZN_EUSAGE;
}

static bool has_enabled_true(const cJSON *v)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, v) {
		if (c->string && !strcmp(c->string, "enabled") && cJSON_IsTrue(c))
			return true;
		if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && has_enabled_true(c))
			return true;
	}
	return false;
}

/* Whether a refused row's value must be refused (rules in config_keys.c). */
static bool refused_value(const struct zn_doc_key *d, const cJSON *v)
{
	char *text;
	bool bad = true;

	if (cJSON_IsNull(v))
		return false;
	if (cJSON_IsObject(v)) {
		if (d->ok && !strcmp(d->ok, "!"))
			return cJSON_GetArraySize(v) > 0;
		return has_enabled_true(v);
	}
	if (!d->ok)
		return !cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0);
	text = cJSON_PrintUnformatted(v);
	if (!text)
		return true;
	for (const char *p = d->ok; *p;) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);

		if (strlen(text) == n && !strncmp(text, p, n))
			bad = false;
		p += n + (bar ? 1 : 0);
	}
	free(text);
	return bad;
}

static void walk(struct json_ctx *c, const cJSON *obj, const char *prefix)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, obj) {
		char path[256];
		const struct zn_key *k;
		const struct zn_doc_key *d;

		snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", v->string);
		if (!strcmp(v->string, "aio") && *prefix) {
			zn_error("%s: the 'aio' block is inside '%s': move it to the top level of "
				 "the config, where DeepSpeed reads it", c->origin, prefix);
			c->rc = ZN_EUSAGE;
			continue;
		}
		k = zn_config_key_by_path(path);
		if (k) {
			if (set_from_json(c, k, v, path))
				c->rc = ZN_EUSAGE;
			else if (k->note && !cJSON_IsNull(v))
				zn_info("%s: '%s' has no effect in zinc: %s", c->origin, path,
					k->note);
			continue;
		}
		d = zn_config_doc_key(path);
		if (d) {
			if (d->refused && refused_value(d, v)) {
				zn_error("%s: '%s' is not supported: %s", c->origin, path, d->why);
				c->rc = ZN_EUSAGE;
			} else {
				zn_info("%s: '%s' has no effect in zinc: %s", c->origin, path,
					d->refused ? "its value changes nothing" : d->why);
			}
			continue;
		}
		if (is_known_object(path)) {
			if (!cJSON_IsObject(v)) {
				zn_error("%s: '%s' must be an object { ... }", c->origin, path);
				c->rc = ZN_EUSAGE;
				continue;
			}
			walk(c, v, path);
			continue;
		}
		warn_unknown(c, prefix, v->string);
	}
}

static int load_text(struct zn_config *cfg, const char *json, size_t len, const char *origin)
{
	struct json_ctx c = { .cfg = cfg, .origin = origin, .rc = 0 };
	struct zn_json_opts o = { .origin = origin };
	cJSON *root;

	/* core/json: strict JSON; a repeated key takes its last value, as Python's json.load in
	 * the Hugging Face Trainer does (DeepSpeed's own launcher refuses it) */
	if (zn_json_parse(json, len, &o, &root))
		return ZN_EUSAGE;
	if (!cJSON_IsObject(root)) {
		zn_error("%s: the config must be a JSON object { ... }", origin);
		cJSON_Delete(root);
		return ZN_EUSAGE;
	}
	walk(&c, root, "");
	cJSON_Delete(root);
	return c.rc;
}

int zn_config_load_json_string(struct zn_config *cfg, const char *json, const char *origin)
{
	return load_text(cfg, json, strlen(json), origin);
}

int zn_config_load_json(struct zn_config *cfg, const char *path)
{
	char *buf;
	size_t n;
	int rc;

	/* a regular file only: a directory or FIFO is refused by name, never read or waited on */
	if (zn_read_input_file(path, "--config", 16u << 20, &buf, &n))
		return ZN_EUSAGE;
	rc = load_text(cfg, buf, n, path); /* n, not strlen: a NUL byte is refused, not an end */
	free(buf);
	return rc;
}

/* The object at path's parent, created along the way ("a.b.c" -> object a.b). */
static cJSON *parent_object(cJSON *root, const char *path, const char **leaf)
{
	char part[64];
	const char *p = path, *dot;
	cJSON *obj = root;

	while ((dot = strchr(p, '.'))) {
		size_t n = (size_t)(dot - p);
		cJSON *next;

		if (n >= sizeof(part))
			n = sizeof(part) - 1;
		memcpy(part, p, n);
		part[n] = 0;
		next = cJSON_GetObjectItemCaseSensitive(obj, part);
		if (!next)
			next = cJSON_AddObjectToObject(obj, part);
		obj = next;
		p = dot + 1;
	}
	*leaf = p;
	return obj;
}

static void add_value(cJSON *obj, const char *leaf, const struct zn_key *k,
		      const struct zn_config *cfg)
{
	const char *base = (const char *)cfg + k->offset;

	switch (k->type) {
	case ZN_KEY_INT:
		cJSON_AddNumberToObject(obj, leaf, *(const int *)base);
		break;
	case ZN_KEY_I64:
		cJSON_AddNumberToObject(obj, leaf, (double)*(const int64_t *)base);
		break;
	case ZN_KEY_U64:
	case ZN_KEY_SIZE:
		/* the budgets' 0 means "the default", which a config says with null */
		if (!*(const uint64_t *)base && (!strcmp(k->path, "zinc.device_mem") ||
						 !strcmp(k->path, "zinc.pinned_mem")))
			cJSON_AddNullToObject(obj, leaf);
		else
			cJSON_AddNumberToObject(obj, leaf, (double)*(const uint64_t *)base);
		break;
	case ZN_KEY_FLOAT:
		/* %.9g of the float, so 1e-3f prints as 0.001 and not 0.0010000000474974513 */
		{
			char buf[32];

			snprintf(buf, sizeof(buf), "%.7g", *(const float *)base);
			cJSON_AddItemToObject(obj, leaf, cJSON_CreateRaw(buf));
		}
		break;
	case ZN_KEY_BOOL:
		cJSON_AddBoolToObject(obj, leaf, *(const bool *)base);
		break;
	case ZN_KEY_ENUM: {
		int v = k->offset == offsetof(struct zn_config, scheduler.warmup_log) ?
				*(const bool *)base : *(const int *)base;

		cJSON_AddStringToObject(obj, leaf, k->choices[v]);
		break;
	}
	case ZN_KEY_PATHS: {
		const struct zn_offload_config *o =
			(const void *)(base - offsetof(struct zn_offload_config, nvme_path_count));

		if (o->nvme_path_count == 0) {
			cJSON_AddNullToObject(obj, leaf);
		} else if (o->nvme_path_count == 1) {
			cJSON_AddStringToObject(obj, leaf, o->nvme_path[0]);
		} else {
			cJSON *arr = cJSON_AddArrayToObject(obj, leaf);

			for (int i = 0; i < o->nvme_path_count; i++)
				cJSON_AddItemToArray(arr, cJSON_CreateString(o->nvme_path[i]));
		}
		break;
	}
	case ZN_KEY_NAME:
		if (*base)
			cJSON_AddStringToObject(obj, leaf, base);
		else
			cJSON_AddNullToObject(obj, leaf);
		break;
	case ZN_KEY_STRING:
		cJSON_AddStringToObject(obj, leaf, base);
		break;
	case ZN_KEY_BETAS: {
		cJSON *arr = cJSON_AddArrayToObject(obj, leaf);
		char buf[32];

		snprintf(buf, sizeof(buf), "%.7g", cfg->optimizer.beta1);
		cJSON_AddItemToArray(arr, cJSON_CreateRaw(buf));
		snprintf(buf, sizeof(buf), "%.7g", cfg->optimizer.beta2);
		cJSON_AddItemToArray(arr, cJSON_CreateRaw(buf));
		break;
	}
	}
}

char *zn_config_to_json(const struct zn_config *cfg)
{
	cJSON *root = cJSON_CreateObject();
	char *out;

	if (!root)
		return NULL;
	for (size_t i = 0; i < zn_config_key_count; i++) {
		const struct zn_key *k = &zn_config_keys[i];
		const char *leaf;
		cJSON *obj;

		if (!strcmp(k->path, "aio.thread_count")) /* alias of intra_op_parallelism */
			continue;
		obj = parent_object(root, k->path, &leaf);
		add_value(obj, leaf, k, cfg);
	}
	out = cJSON_Print(root);
	cJSON_Delete(root);
	return out;
}
