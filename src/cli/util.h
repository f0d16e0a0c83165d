/* Small helpers for the subcommands' own options: values, numbers, human units.
 * Each parser logs "--flag: what is wrong" and returns 0 or ZN_EUSAGE; *i is advanced past
 * the value. Formatters write into the caller's buffer and return it. */
#ifndef ZN_CLI_UTIL_H
#define ZN_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

const char *zn_cli_value(int argc, char **argv, int *i);
int zn_cli_int(int argc, char **argv, int *i, int min, int max, int *out);
int zn_cli_count(int argc, char **argv, int *i, uint64_t *out); /* 70B, 1.5M, 5e8 */
int zn_cli_size(int argc, char **argv, int *i, uint64_t *out);  /* 1M, 4K, 80G (binary) */
const char *zn_cli_fmt_bytes(uint64_t bytes, char *buf, size_t size); /* "17.50 GB" (1e9) */
const char *zn_cli_fmt_count(uint64_t n, char *buf, size_t size);     /* "70.00B" */
const char *zn_cli_fmt_ibytes(uint64_t bytes, char *buf, size_t size); /* "1.00 GiB" */
/* The precision ("fp32", "bf16" or "fp16") and the bytes per parameter of the model states
 * (the plan's rule): "bf16 mixed precision (2+2+12 B/param)", "bf16 mixed precision, int8
 * optimizer states (2+2+6.03 B/param)", "fp32 (4+4+8 B/param)", ... */
const char *zn_cli_fmt_state_bytes(const char *dtype, enum zn_optim_states states, char *buf,
				   size_t size);
/* "fp32", "bf16", "int8" from argv (--optimizer-states VALUE): 0 or ZN_EUSAGE (logged) */
int zn_cli_optimizer_states(int argc, char **argv, int *i, enum zn_optim_states *out);

struct zn_io;
/* Appends the --config FILE / --config=FILE inputs of the command line to io (at most
 * max - *n of them) for zn_io_check (core/fsio.h). */
void zn_cli_config_inputs(int argc, char **argv, struct zn_io *io, int *n, int max);

#endif
