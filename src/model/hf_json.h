/* JSON text as Hugging Face writes its files: Python's json.dumps(obj, indent=2,
 * sort_keys=True) plus a newline (config.json, model.safetensors.index.json).
 * Numbers that are whole print as integers, others as the shortest text that reads back
 * the same double; a cJSON raw item (cJSON_CreateRaw("500000.0")) prints as it is, so a
 * caller can keep Python's float spelling for keys that are floats. Strings are printed
 * as UTF-8 with ", \, and control characters escaped. */
#ifndef ZN_MODEL_HF_JSON_H
#define ZN_MODEL_HF_JSON_H

#include <cjson/cJSON.h>

/* A malloc'd string, or NULL when out of memory. */
char *zn_hf_json_dumps(const cJSON *v);

/* Python's repr of a float ("10000.0", "1e-05", "0.02") as a cJSON raw item, or NULL. */
cJSON *zn_hf_json_float(double x);

#endif
