/* Logging and error reporting shared by every module.
 *
 * Library functions return 0 or a negative errno-style code and log one line that names
 * the failing call, file:line and the system's own message; they never exit. Callers
 * keep the goto/return visible:
 *
 *     rc = zn_check_errno(fallocate(fd, 0, 0, n), "fallocate", __FILE__, __LINE__);
 *     if (rc)
 *             goto close_fd;
 *
 * Thread-safe: each line is written with one fprintf to stderr.
 */
#ifndef ZN_CORE_LOG_H
#define ZN_CORE_LOG_H

#include <stdarg.h>

enum zn_log_level {
	ZN_LOG_ERROR = 0,
	ZN_LOG_WARN = 1,
	ZN_LOG_INFO = 2,
	ZN_LOG_DEBUG = 3,
};

/* Messages above this level are dropped. Default ZN_LOG_INFO; env ZINC_LOG=debug|info|warn|error. */
void zn_log_set_level(enum zn_log_level level);
enum zn_log_level zn_log_get_level(void);

void zn_log(enum zn_log_level level, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#define zn_error(...) zn_log(ZN_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define zn_warn(...) zn_log(ZN_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define zn_info(...) zn_log(ZN_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define zn_debug(...) zn_log(ZN_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* For calls that return -1 and set errno: returns 0 when rc >= 0, else logs
 * "call failed at file:line: strerror" and returns -errno. */
int zn_check_errno(long rc, const char *call, const char *file, int line);

/* For calls that return a negative errno directly (liburing): returns rc (0 if rc >= 0). */
int zn_check_neg(long rc, const char *call, const char *file, int line);

/* Error text for a negative zinc code (-errno). */
const char *zn_strerror(int rc);

#endif
