/* User settings read from the environment: the few ZINC_ variables a user sets on
 * purpose (the log level, the NVMe I/O backend), documented in README.md. Test hooks are
 * not here: they live in core/fault.h and are compiled out of release builds; these stay
 * in every build.
 *
 * zn_env_value() returns the setting's text, or NULL when it is unset or empty; what the
 * text means, and the error for a bad one, stay with the module that uses it. It reads
 * the environment at each call.
 *
 *     const char *s = zn_env_value(ZN_ENV_LOG);   // "debug" or NULL
 */
#ifndef ZN_CORE_ENV_H
#define ZN_CORE_ENV_H

enum zn_env {
	ZN_ENV_LOG,         /* ZINC_LOG=debug|info|warn|error (core/log.c) */
	ZN_ENV_AIO_BACKEND, /* ZINC_AIO_BACKEND=auto|uring|pool (nvme/aio.c) */
	ZN_ENV_COUNT
};

/* The setting's environment variable, e.g. "ZINC_LOG". */
const char *zn_env_name(enum zn_env e);

/* The setting's value, or NULL when it is unset or empty. */
const char *zn_env_value(enum zn_env e);

#endif
