/* Small helpers for the subcommands' own options: values, numbers, human units.
 * Each parser logs "--flag: what is wrong" and returns 0 or ZN_EUSAGE; *i is advanced past
 * the value. Formatters write into the caller's buffer and return it. */
#ifndef ZN_CORE_ARGS_H
#define ZN_CORE_ARGS_H

#include <stddef.h>
#include <stdint.h>

const char *zn_arg_value(int argc, char **argv, int *i);
int zn_arg_int(int argc, char **argv, int *i, int min, int max, int *out);
int zn_arg_double(int argc, char **argv, int *i, double min, double max, double *out);
int zn_arg_count(int argc, char **argv, int *i, uint64_t *out); /* 70B, 1.5M, 5e8 */
int zn_arg_size(int argc, char **argv, int *i, uint64_t *out);  /* 1M, 4K, 80G (binary) */
const char *zn_arg_fmt_bytes(uint64_t bytes, char *buf, size_t size); /* "17.50 GB" (1e9) */
const char *zn_arg_fmt_count(uint64_t n, char *buf, size_t size);     /* "70.00B" */
const char *zn_arg_fmt_ibytes(uint64_t bytes, char *buf, size_t size); /* "1.00 GiB" */

struct zn_io;
/* Appends the --config FILE / --config=FILE inputs of the command line to io (at most
 * max - *n of them) for zn_io_check (core/fsio.h). */
void zn_arg_config_inputs(int argc, char **argv, struct zn_io *io, int *n, int max);

#endif
