/* The table of config keys: one row per DeepSpeed JSON key (or zinc extension) with its
 * command-line flag, type and place in struct zn_config. config.c (flags), config_json.c
 * (JSON in and out) and the tests read the same table, so a key cannot be accepted by
 * one and not the other. Internal to src/core.
 */
#ifndef ZN_CORE_CONFIG_KEYS_H
#define ZN_CORE_CONFIG_KEYS_H

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
};

extern const struct zn_key zn_config_keys[];
extern const size_t zn_config_key_count;

/* DeepSpeed keys that zinc accepts and ignores (they have no effect here). */
extern const char *const zn_config_ignored_keys[];

const struct zn_key *zn_config_key_by_path(const char *path);
const struct zn_key *zn_config_key_by_flag(const char *flag);

/* Sets a key from a string (flag value or JSON string). origin names where it came from
 * for the error line ("--zero-stage", "ds.json: zero_optimization.stage"). */
int zn_config_set_string(struct zn_config *cfg, const struct zn_key *k, const char *value,
			 const char *origin);

/* Levenshtein distance, for "did you mean". */
int zn_edit_distance(const char *a, const char *b);

#endif
