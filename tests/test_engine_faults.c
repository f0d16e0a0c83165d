/* Fault injection through the engine (STYLE.md habit 8), host device, one rank, the tiny
 * GPT of engine_common.h:
 *   - zn_engine_create with the Nth device allocation, stream creation, event creation or
 *     (offload cpu) pinned arena view failing, for N = 1, 2, ... until create succeeds:
 *     every failure is the injected -ENOMEM with a line naming what was being allocated,
 *     the half-built engine is torn down with nothing left on the device (the device
 *     warns at destroy about any live allocation, stream or event: no such warning may
 *     appear; host memory is LSan's part in the sanitizer build), and the first N past
 *     the last call gives an engine that trains one step with exactly the loss of an
 *     unfaulted run;
 *   - zn_engine_step with the Kth collective failing (ZINC_COMM_FAIL_OP): the step returns
 *     -EIO, the log names the collective and the step, destroy is clean; K past the
 *     step's collectives trains with the unfaulted loss.
 * The knobs are the environment variables each module reads when it creates its object
 * (the engine creates its own device, arena and comm): ZINC_DEVICE_FAIL_ALLOC / _STREAM /
 * _EVENT, ZINC_ARENA_FAIL_ALLOC, ZINC_COMM_FAIL_OP. The log is captured per attempt by
 * pointing fd 2 at a temporary file. Under AddressSanitizer each test ends with a leak
 * check of its own: LeakSanitizer's report at exit does not fail a Criterion test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "core/log.h"
#include "engine_common.h"

#define MAX_FAULTS 500

struct capture {
	FILE *f;
	int saved_fd;
};

static void capture_begin(struct capture *c)
{
	fflush(stderr);
	c->f = tmpfile(); /* this attempt's log */
	cr_assert_not_null(c->f, "tmpfile for the captured log");
	c->saved_fd = dup(2);
	cr_assert_geq(c->saved_fd, 0);
	cr_assert_geq(dup2(fileno(c->f), 2), 0);
}

/* Restores stderr; returns the captured text (caller frees). */
static char *capture_end(struct capture *c)
{
	long n;
	char *text;

	fflush(stderr);
	dup2(c->saved_fd, 2);
	close(c->saved_fd);
	fseek(c->f, 0, SEEK_END);
	n = ftell(c->f);
	rewind(c->f);
	text = calloc((size_t)n + 1, 1);
	cr_assert_not_null(text);
	if (n > 0)
		cr_assert_eq(fread(text, 1, (size_t)n, c->f), (size_t)n);
	fclose(c->f);
	return text;
}

/* Under ASan: no unreachable host memory so far (LSan prints the stacks). */
static void assert_no_host_leak(void)
{
#ifdef __SANITIZE_ADDRESS__
	cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,
		     "LeakSanitizer found leaked host memory (stacks on stderr)");
#endif
}

/* What the device says at destroy when something was left on it. */
static bool leaked(const char *log)
{
	return strstr(log, "still live") || strstr(log, "not destroyed");
}

/* A configuration to walk; gas micro-batches of ET_B sequences. */
struct fcase {
	const char *name;
	int stage;
	enum zn_offload_device off;
	bool bf16;
	float clip;
	int gas;
	bool ckpt_cpu; /* activation checkpoints (layer-major: its boundaries) on the cpu */
};

static void config_for(struct zn_config *c, const struct fcase *fc)
{
	et_config(c, fc->stage, fc->off, ET_B, fc->gas);
	c->precision.bf16 = fc->bf16;
	c->gradient_clipping = fc->clip;
	if (fc->ckpt_cpu) {
		c->act_ckpt.enabled = true;
		c->act_ckpt.home.device = ZN_OFFLOAD_CPU;
	}
}

/* One step on e over the first batch of tok. */
static int step_once(struct zn_engine *e, const int *tok, float *loss)
{
	struct zn_step_stats st;
	int rc = zn_engine_step(e, tok, tok + 1, &st);

	*loss = st.loss;
	return rc;
}

/* Creates, steps once, destroys; the log goes to stderr as usual. */
static float unfaulted_loss(const struct zn_config *c, const int *tok)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_engine *e;
	float loss;

	et_model(&mc);
	cr_assert_eq(zn_engine_create(&e, c, et_gpt2(&mc), &o), 0, "unfaulted create");
	cr_assert_eq(step_once(e, tok, &loss), 0, "unfaulted step");
	zn_engine_destroy(e);
	cr_assert(isfinite(loss) && loss > 0, "unfaulted loss %g", loss);
	return loss;
}

static void set_env_int(const char *name, int n)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", n);
	cr_assert_eq(setenv(name, v, 1), 0);
}

/* Fails the nth call counted by env during create, for n = 1, 2, ...; returns how many
 * such calls create makes (the n - 1 of the first success). */
static int walk_create(const struct fcase *fc, const char *env, const int *tok, float ref)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_config c;

	et_model(&mc);
	config_for(&c, fc);
	for (int n = 1; n <= MAX_FAULTS; n++) {
		/* any non-NULL value: a failed create must set it to NULL */
		struct zn_engine *e = (struct zn_engine *)&c;
		struct capture cap;
		bool injected;
		char *log;
		float loss = 0.0f;
		int rc, step_rc = 0;

		set_env_int(env, n);
		capture_begin(&cap);
		rc = zn_engine_create(&e, &c, et_gpt2(&mc), &o);
		unsetenv(env);
		if (!rc)
			step_rc = step_once(e, tok, &loss);
		zn_engine_destroy(rc ? NULL : e);
		log = capture_end(&cap);
		injected = strstr(log, "fault injection") != NULL;
		if (rc) {
			cr_assert_eq(rc, -ENOMEM, "%s, %s=%d: create returned %d (%s), want the "
				     "injected -ENOMEM; log:\n%s", fc->name, env, n, rc,
				     zn_strerror(rc), log);
			cr_assert_null(e, "%s, %s=%d: *out not NULL after a failed create",
				       fc->name, env, n);
			cr_assert(injected, "%s, %s=%d: create failed without the fault; log:\n%s",
				  fc->name, env, n, log);
			/* every allocation failure says what was being allocated */
			cr_assert(strstr(log, "out of memory allocating "), "%s, %s=%d: the "
				  "failure does not name what was allocated; log:\n%s", fc->name,
				  env, n, log);
		} else {
			cr_assert_not(injected, "%s, %s=%d: the fault was hit but create succeeded "
				      "(an error was swallowed); log:\n%s", fc->name,
				      env, n, log);
			cr_assert_eq(step_rc, 0, "%s, %s=%d: step after create failed; log:\n%s",
				     fc->name, env, n, log);
			cr_assert(loss == ref, "%s, %s=%d: loss %.9g, unfaulted %.9g",
				  fc->name, env, n, loss, ref);
		}
		cr_assert_not(leaked(log), "%s, %s=%d: the device was left holding memory, "
			      "streams or events; log:\n%s", fc->name, env, n, log);
		free(log);
		if (!rc)
			return n - 1;
	}
	cr_assert_fail("%s, %s: create still failing after %d faults", fc->name,
		       env, MAX_FAULTS);
	return -1;
}

/* Tokens for one step of gas micro-batches: inputs tok, targets tok + 1. */
static int *batch_tokens(int gas)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	return et_tokens(et_stream_len(1, gas, 1, ET_B), mc.vocab, 11);
}

static void walk_all_create(const struct fcase *fc)
{
	static const char *const device_env[] = {
		"ZINC_DEVICE_FAIL_ALLOC", "ZINC_DEVICE_FAIL_STREAM", "ZINC_DEVICE_FAIL_EVENT",
	};
	bool offload = fc->off == ZN_OFFLOAD_CPU;
	struct zn_config c;
	int *tok = batch_tokens(fc->gas);
	float ref;
	int calls;

	config_for(&c, fc);
	ref = unfaulted_loss(&c, tok);
	for (int i = 0; i < 3; i++) {
		calls = walk_create(fc, device_env[i], tok, ref);
		cr_assert_gt(calls, 0, "%s: create made no call that %s counts", fc->name,
			     device_env[i]);
		cr_log_info("%s: %s walked %d calls", fc->name, device_env[i], calls);
	}
	calls = walk_create(fc, "ZINC_ARENA_FAIL_ALLOC", tok, ref);
	/* only offload puts buffers in the pinned arena */
	if (offload)
		cr_assert_gt(calls, 0, "%s: no arena view was allocated", fc->name);
	else
		cr_assert_eq(calls, 0, "%s: %d arena views without offload", fc->name, calls);
	cr_log_info("%s: ZINC_ARENA_FAIL_ALLOC walked %d calls", fc->name, calls);
	free(tok);
	assert_no_host_leak();
}

Test(engine_faults, create_stage3_offload_cpu)
{
	walk_all_create(&(struct fcase){ "stage 3 + offload cpu", 3, ZN_OFFLOAD_CPU, false,
					 0.0f, 1, false });
}

Test(engine_faults, create_stage0)
{
	walk_all_create(&(struct fcase){ "stage 0", 0, ZN_OFFLOAD_NONE, false, 0.0f, 1, false });
}

/* the other buffers: the norm's (device clipping), bf16 master and gather slots, the
 * full-gradient ring, the per-micro-batch timing events, stage 1-2 offload shards */
Test(engine_faults, create_other_configs)
{
	static const struct fcase cases[] = {
		{ "stage 1 + offload cpu, bf16", 1, ZN_OFFLOAD_CPU, true, 0.0f, 1, false },
		{ "stage 2 + clipping, 2 micro-batches", 2, ZN_OFFLOAD_NONE, false, 1.0f, 2,
		  false },
		{ "stage 2 + offload cpu + clipping", 2, ZN_OFFLOAD_CPU, false, 1.0f, 1, false },
		{ "stage 3 bf16 + clipping, 2 micro-batches", 3, ZN_OFFLOAD_NONE, true, 1.0f, 2,
		  false },
		{ "stage 3 + offload cpu, bf16, 2 micro-batches", 3, ZN_OFFLOAD_CPU, true, 0.0f, 2,
		  false },
		/* layer-major (auto), the tied head's sinks and copy; its boundaries in pinned
		 * memory (the forward slots, their events, the copy-up slots) */
		{ "stage 3 + offload cpu, 4 micro-batches", 3, ZN_OFFLOAD_CPU, false, 0.0f, 4,
		  false },
		{ "stage 3 + offload cpu, 3 micro-batches, boundaries on the cpu", 3,
		  ZN_OFFLOAD_CPU, false, 0.0f, 3, true },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		walk_all_create(&cases[i]);
}

/* The kth collective of the first step fails, for k = 1, 2, ... until the step succeeds;
 * returns how many collectives the step issues. */
static int walk_step_comm(const struct zn_config *c, const char *what, const int *tok,
			  float ref)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;

	et_model(&mc);
	for (int k = 1; k <= MAX_FAULTS; k++) {
		struct zn_engine *e;
		struct capture cap;
		char *log, want[64];
		float loss = 0.0f;
		int rc;

		set_env_int("ZINC_COMM_FAIL_OP", k);
		capture_begin(&cap);
		rc = zn_engine_create(&e, c, et_gpt2(&mc), &o);
		unsetenv("ZINC_COMM_FAIL_OP");
		cr_assert_eq(rc, 0, "%s: create with ZINC_COMM_FAIL_OP=%d failed: %s", what, k,
			     zn_strerror(rc));
		rc = step_once(e, tok, &loss);
		zn_engine_destroy(e);
		log = capture_end(&cap);
		snprintf(want, sizeof(want), "injected fault in collective #%d", k);
		if (rc) {
			cr_assert_eq(rc, -EIO, "%s, collective %d: step returned %d (%s), want "
				     "-EIO; log:\n%s", what, k, rc, zn_strerror(rc), log);
			cr_assert_not_null(strstr(log, want), "%s, collective %d: the log does not "
					   "name the collective; log:\n%s", what, k, log);
			cr_assert_not_null(strstr(log, "step 1 failed"), "%s, collective %d: the "
					   "log does not name the step; log:\n%s", what, k, log);
		} else {
			cr_assert_null(strstr(log, "injected fault"), "%s, collective %d: the fault "
				       "was hit but the step succeeded; log:\n%s", what, k, log);
			cr_assert(loss == ref, "%s, collective %d: loss %.9g, unfaulted %.9g", what,
				  k, loss, ref);
		}
		cr_assert_not(leaked(log), "%s, collective %d: the device was left holding "
			      "memory, streams or events; log:\n%s", what, k, log);
		free(log);
		if (!rc)
			return k - 1;
	}
	cr_assert_fail("%s: step still failing after %d faults", what, MAX_FAULTS);
	return -1;
}

static void check_step_comm(const struct fcase *fc)
{
	struct zn_config c;
	int *tok = batch_tokens(fc->gas);
	int ops;

	config_for(&c, fc);
	ops = walk_step_comm(&c, fc->name, tok, unfaulted_loss(&c, tok));
	/* one rank still gathers (stage 3) and reduce-scatters (stage >= 2) every layer */
	cr_assert_gt(ops, 0, "%s: the step issued no collective", fc->name);
	cr_log_info("%s: step walked %d collectives", fc->name, ops);
	free(tok);
	assert_no_host_leak();
}

Test(engine_faults, step_comm_stage3_offload_cpu)
{
	check_step_comm(&(struct fcase){ "stage 3 + offload cpu", 3, ZN_OFFLOAD_CPU, false,
					 0.0f, 1, false });
}

/* the norm waits for every reduction; the device AdamW runs behind it */
Test(engine_faults, step_comm_stage2_clipping)
{
	check_step_comm(&(struct fcase){ "stage 2 + clipping", 2, ZN_OFFLOAD_NONE, false, 1.0f,
					 1, false });
}

/* bf16 gathers and casts; two micro-batches accumulate before the last reduction */
Test(engine_faults, step_comm_stage3_bf16_accumulation)
{
	check_step_comm(&(struct fcase){ "stage 3 bf16, 2 micro-batches", 3, ZN_OFFLOAD_NONE,
					 true, 0.0f, 2, false });
}

/* offloaded shards of the first micro-batch are added on the host before the second's */
Test(engine_faults, step_comm_stage2_offload_accumulation)
{
	check_step_comm(&(struct fcase){ "stage 2 + offload cpu, 2 micro-batches", 2,
					 ZN_OFFLOAD_CPU, false, 0.0f, 2, false });
}
