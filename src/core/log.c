/* Logging: one line per message to stderr, with level, file:line for errors. */
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/env.h"

static int zn_level = -1;
/* zn_last_error's line: per thread, so a trainer's error is not another thread's */
static _Thread_local char zn_last_err[1024];

static enum zn_log_level level_from_env(void)
{
	const char *s = zn_env_value(ZN_ENV_LOG);

	if (!s)
		return ZN_LOG_INFO;
	if (!strcasecmp(s, "debug"))
		return ZN_LOG_DEBUG;
	if (!strcasecmp(s, "warn"))
		return ZN_LOG_WARN;
	if (!strcasecmp(s, "error"))
		return ZN_LOG_ERROR;
	return ZN_LOG_INFO;
}

void zn_log_set_level(enum zn_log_level level)
{
	zn_level = level;
}

enum zn_log_level zn_log_get_level(void)
{
	if (zn_level < 0)
		zn_level = level_from_env();
	return zn_level;
}

void zn_log(enum zn_log_level level, const char *file, int line, const char *fmt, ...)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	char msg[1024];
	va_list ap;

	if (level > zn_log_get_level())
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level == ZN_LOG_ERROR)
		memcpy(zn_last_err, msg, sizeof(zn_last_err));
	if (level == ZN_LOG_INFO)
		fprintf(stderr, "zinc: %s\n", msg);
	else if (level == ZN_LOG_WARN)
		fprintf(stderr, "zinc: warning: %s\n", msg);
	else
		fprintf(stderr, "zinc: %s: %s (%s:%d)\n", names[level], msg, file, line);
}

int zn_check_errno(long rc, const char *call, const char *file, int line)
{
	int err = errno;

	if (rc >= 0)
		return 0;
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s", call, strerror(err));
	return -err;
}

int zn_check_neg(long rc, const char *call, const char *file, int line)
{
	if (rc >= 0)
		return 0;
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s", call, strerror((int)-rc));
	return (int)rc;
}

const char *zn_last_error(void)
{
	return zn_last_err;
}

const char *zn_strerror(int rc)
{
	return strerror(rc < 0 ? -rc : rc);
}
