/* Fuzz targets: one entry point per parser, shared by the libFuzzer build (ZINC_FUZZ=ON,
 * clang) and the corpus replay tests of the normal suite (replay_main.c).
 *
 * Each tests/fuzz/fuzz_<target>.c defines zn_fuzz_one(data, n): it feeds the bytes to the
 * parser the way zinc reads them (a file for file inputs), checks the invariants of what
 * the parser accepted (abort() on a violation, so the fuzzer reports it as a crash) and
 * returns 1 when the input was accepted, 0 when it was refused with an error.
 */
#ifndef ZN_TESTS_FUZZ_H
#define ZN_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int zn_fuzz_one(const uint8_t *data, size_t n);

/* The path of a private temporary file holding exactly data[0 .. n) (the same file,
 * rewritten on every call; removed at exit). Aborts when it cannot be written. */
const char *zn_fuzz_file(const uint8_t *data, size_t n);

/* abort() with a message when cond is false: an invariant of an accepted input broke. */
#define ZN_FUZZ_CHECK(cond) zn_fuzz_check((cond), #cond, __FILE__, __LINE__)
void zn_fuzz_check(int cond, const char *what, const char *file, int line);

#endif
