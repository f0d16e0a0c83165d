/* User settings from the environment (env.h): the one table of their names. */
#include "core/env.h"

#include <stdlib.h>

static const char *const names[ZN_ENV_COUNT] = {
	[ZN_ENV_LOG] = "ZINC_LOG",
	[ZN_ENV_AIO_BACKEND] = "ZINC_AIO_BACKEND",
};

const char *zn_env_name(enum zn_env e)
{
	if ((unsigned)e >= ZN_ENV_COUNT)
		return "ZINC_(unknown setting)";
	return names[e];
}

const char *zn_env_value(enum zn_env e)
{
	const char *v;

	if ((unsigned)e >= ZN_ENV_COUNT)
		return NULL;
	v = getenv(names[e]);
	return v && *v ? v : NULL;
}
