/* Test fault hooks: environment variables that make a dev or test build fail on purpose
 * (the N-th allocation, I/O or collective, a SIGTERM after a step, a missing tool), so the
 * tests can walk every cleanup path of code they do not create themselves (the engine's
 * device, arena and comm; the CLI's saves). Every hook is listed here and in
 * docs/testing.md; no other file reads a ZINC_ variable for a test.
 *
 * Contract:
 *   - zn_fault_value() returns the hook's text, or NULL when it is unset or empty. It reads
 *     the environment at each call (tests set and unset hooks between calls in one
 *     process), so callers read a hook once, where it arms (at create), except the
 *     checkpoint's file operations, which count while the hook is set.
 *   - What a value means (a count, an errno name, STEP@RANK) and its error message stay
 *     with the code that fails: this module only names and reads the hooks.
 *   - A release build (-DZINC_FAULT_HOOKS=OFF, the default for CMAKE_BUILD_TYPE=Release)
 *     compiles the hooks out: zn_fault_value() is a constant NULL there, so no test hook
 *     can change a production run. The API faults (zn_device_inject_fault, a comm config's
 *     fail_op_index, a swap config's inject_fallocate_errno) stay in every build.
 *   - Thread-safe as getenv() is: do not set a hook while another thread reads it.
 *
 *     const char *v = zn_fault_value(ZN_FAULT_ARENA_ALLOC);   // "3" or NULL
 *
 *     if (v)
 *             zn_arena_inject_fault(a, atoi(v));
 */
#ifndef ZN_CORE_FAULT_H
#define ZN_CORE_FAULT_H

#include <stdbool.h>

enum zn_fault {
	ZN_FAULT_DEVICE_ALLOC,        /* ZINC_DEVICE_FAIL_ALLOC=N: the N-th device allocation */
	ZN_FAULT_DEVICE_STREAM,       /* ZINC_DEVICE_FAIL_STREAM=N: the N-th stream creation */
	ZN_FAULT_DEVICE_EVENT,        /* ZINC_DEVICE_FAIL_EVENT=N: the N-th event creation */
	ZN_FAULT_ARENA_ALLOC,         /* ZINC_ARENA_FAIL_ALLOC=N: the N-th arena allocation */
	ZN_FAULT_ARENA_CUDA_REGISTER, /* ZINC_ARENA_FAIL_CUDA_REGISTER=1: cudaHostRegister */
	ZN_FAULT_COMM_FAIL_OP,        /* ZINC_COMM_FAIL_OP=K: the K-th collective fails */
	ZN_FAULT_COMM_STOP_OP,        /* ZINC_COMM_STOP_OP=K: SIGSTOP at the K-th collective */
	ZN_FAULT_SWAP_FALLOCATE,      /* ZINC_SWAP_FAIL_FALLOCATE=ENOSPC|...: swap fallocate */
	ZN_FAULT_CKPT_FAIL_AT,        /* ZINC_CKPT_FAIL_AT=K: the K-th save file operation */
	ZN_FAULT_CKPT_FAIL_ERRNO,     /* ZINC_CKPT_FAIL_ERRNO=ENOSPC|EIO|EDQUOT: fail, not kill */
	ZN_FAULT_CKPT_NO_COPY,        /* ZINC_CKPT_NO_COPY=1: saves skip copy_file_range */
	ZN_FAULT_OVERFLOW,            /* ZINC_TEST_OVERFLOW=STEP[@RANK]: an fp16 overflow */
	ZN_FAULT_SIGTERM_AT,          /* ZINC_TEST_SIGTERM_AT=STEP: SIGTERM after that step */
	ZN_FAULT_NO_GNUPLOT,          /* ZINC_NO_GNUPLOT=1: bench step acts as if gnuplot is missing */
	ZN_FAULT_FA2_ONE_STAGE,       /* ZINC_TEST_FA2_ONE_STAGE=1: FlashAttention-2 single-buffered */
	ZN_FAULT_LATE_EARLY_ADAMW,    /* ZINC_TEST_LATE_EARLY_ADAMW=1: early AdamW from layer 1 on */
	ZN_FAULT_COUNT
};

/* The hook's environment variable, e.g. "ZINC_ARENA_FAIL_ALLOC" (for messages). */
const char *zn_fault_name(enum zn_fault f);

/* Whether this build reads the hooks (-DZINC_FAULT_HOOKS=ON). */
bool zn_fault_hooks_built(void);

#ifdef ZN_FAULT_HOOKS
/* The hook's value, or NULL when it is unset or empty. */
const char *zn_fault_value(enum zn_fault f);
#else
static inline const char *zn_fault_value(enum zn_fault f)
{
	(void)f;
	return 0; /* compiled out: a release build has no test hooks */
}
#endif

#endif
