/* The table of config keys: one row per DeepSpeed JSON key (or zinc extension) with its
 * command-line flag, type and place in struct zn_config. config.c (flags), config_json.c
 * (JSON in and out) and the tests read the same table, so a key cannot be accepted by
 * one and not the other. Internal to src/core.
 */
#ifndef ZN_CORE_CONFIG_KEYS_H
#define ZN_CORE_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "zinc.h"

enum zn_key_type {
	ZN_KEY_INT,    /* int */
	ZN_KEY_I64,    /* int64_t */
	ZN_KEY_U64,    /* uint64_t count; accepts 5e8, "500M" (decimal suffixes) */
	ZN_KEY_SIZE,   /* uint64_t bytes; accepts 1048576, "1M" (binary suffixes) */
	ZN_KEY_FLOAT,  /* float */
	ZN_KEY_BOOL,   /* bool; flag --x sets true, --no-x false */
	ZN_KEY_ENUM,   /* int-sized enum, value from choices[] */
	ZN_KEY_PATHS,  /* nvme paths of an offload block; string or array in JSON */
	ZN_KEY_BETAS,  /* optimizer betas: [b1, b2] in JSON, "b1,b2" as a flag */
	ZN_KEY_NAME,   /* char[ZN_RUN_ID_MAX + 1]: letters, digits, '.', '_', '-' */
	ZN_KEY_STRING, /* char[size] */
};

/* Which offload blocks a flag writes: --nvme-path and --pin-memory set both. */
enum zn_key_mirror {
	ZN_MIRROR_NONE = 0,
	ZN_MIRROR_PARAM = 1, /* the same field in offload_param as well */
};

struct zn_key {
	const char *path;  /* "zero_optimization.offload_optimizer.device" */
	const char *flag;  /* "offload-optimizer" (without --), NULL if JSON only */
	enum zn_key_type type;
	size_t offset;     /* into struct zn_config */
	const char *const *choices; /* ENUM: names, index = value; NULL-terminated */
	enum zn_key_mirror mirror;
	const char *help;
	const char *note;  /* NULL: implemented; else why it has no effect in zinc */
	size_t size;       /* STRING: bytes of the char array */
};

/* A documented DeepSpeed key (or block) without a value in struct zn_config. */
struct zn_doc_key {
	const char *path;
	bool refused;      /* false: accepted, no effect; true: refused unless ok */
	const char *ok;    /* refused rows: the values still accepted (see config_keys.c) */
	const char *why;   /* why it has no effect, or why it is refused */
};

extern const struct zn_key zn_config_keys[];
extern const size_t zn_config_key_count;

/* Documented DeepSpeed keys with no value in zn_config, NULL-path terminated. */
extern const struct zn_doc_key zn_config_doc_keys[];

/* The doc_keys row for path: an exact row, else the innermost block row holding it. */
const struct zn_doc_key *zn_config_doc_key(const char *path);


const struct zn_key *zn_config_key_by_path(const char *path);
const struct zn_key *zn_config_key_by_flag(const char *flag);

/* Sets a key from a string (flag value or JSON string). origin names where it came from
 * for the error line ("--zero-stage", "ds.json: zero_optimization.stage"). */
int zn_config_set_string(struct zn_config *cfg, const struct zn_key *k, const char *value,
			 const char *origin);

/* Marks k as "auto": its value is resolved by zn_config_resolve_auto. */
void zn_config_set_auto(struct zn_config *cfg, const struct zn_key *k);

#include "core/edit.h" /* zn_edit_distance, for "did you mean" */

#endif
