/* Fuzz target: a DeepSpeed-style config file (zn_config_load_json, src/core/config_json.c),
 * then zn_config_validate. An accepted config must print (zn_config_to_json, what
 * --print-config shows) as JSON that loads and validates again. */
#include <stdlib.h>

#include "zinc.h"
#include "fuzz.h"

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	const char *path = zn_fuzz_file(data, n);
	struct zn_config cfg, again;
	char *json;

	zn_config_defaults(&cfg);
	if (zn_config_load_json(&cfg, path) || zn_config_validate(&cfg, 1))
		return 0;
	json = zn_config_to_json(&cfg);
	ZN_FUZZ_CHECK(json != NULL);
	zn_config_defaults(&again);
	ZN_FUZZ_CHECK(zn_config_load_json_string(&again, json, "printed config") == 0);
	ZN_FUZZ_CHECK(zn_config_validate(&again, 1) == 0);
	free(json);
	return 1;
}
