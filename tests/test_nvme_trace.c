/* zinc train --trace: a 2-step host-device run with optimizer and parameters on nvme
 * writes Chrome trace-event JSON (parsed here with cJSON) with a track per stream, per
 * NVMe direction, per CPU AdamW worker and the step; spans named "fwd 3", "fetch 4", ...;
 * the NVMe spans' bytes of each step add up to the plan's NVMe bytes per step (the
 * summary line). --trace-steps limits the steps; bad values are usage errors. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fsio.h"
#include "nvme_test_util.h"

static int zinc(char *out, size_t size, const char *args)
{
	char cmd[2048];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct run {
	char dir[ZN_PATH_MAX], trace[ZN_PATH_MAX + 32];
	unsigned long long rd_plan, wr_plan;
	cJSON *root;
};

/* A tiny 2-step run on nvme with --trace; parses the summary's plan figures and the trace. */
static void run_traced(struct run *r, const char *extra)
{
	static char out[65536];
	char args[4096], *json = NULL;
	const char *p;

	nvme_test_dir(r->dir, sizeof(r->dir));
	snprintf(r->trace, sizeof(r->trace), "%s/t.json", r->dir);
	/* prefetch depth 1: layers 0-2 hot (plan.h), 3-5 fetched from nvme */
	snprintf(args, sizeof(args), "train --device host --model tiny --layers 4 --vocab 256 "
		 "--prefetch-depth 1 --seq 16 --micro-batch 2 --grad-accum 2 --steps 2 "
		 "--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path %s --data "
		 "%s/data/demo.txt --trace %s %s", r->dir, ZN_TEST_SRC_DIR, r->trace, extra);
	cr_assert_eq(zinc(out, sizeof(out), args), 0, "%s\n%s", args, out);
	cr_assert_not_null(strstr(out, "trace "), "%s", out);
	p = strstr(out, "nvme per step read ");
	cr_assert_not_null(p, "%s", out);
	cr_assert_eq(sscanf(p, "nvme per step read %*u B (plan %llu), write %*u B (plan %llu)",
			    &r->rd_plan, &r->wr_plan), 2, "%s", p);
	cr_assert_eq(zn_read_input_file(r->trace, "trace", 64u << 20, &json, NULL), 0);
	r->root = cJSON_Parse(json);
	free(json);
	cr_assert_not_null(r->root, "%s is not valid JSON", r->trace);
}

static void run_free(struct run *r)
{
	cJSON_Delete(r->root);
	nvme_test_rmdir(r->dir);
}

/* the name of track tid (thread_name metadata), or NULL */
static const char *track_name(const cJSON *events, int tid)
{
	const cJSON *ev;

	cJSON_ArrayForEach(ev, events) {
		const cJSON *ph = cJSON_GetObjectItem(ev, "ph"), *t = cJSON_GetObjectItem(ev, "tid");

		if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "M") && cJSON_IsNumber(t) &&
		    t->valueint == tid &&
		    !strcmp(cJSON_GetObjectItem(ev, "name")->valuestring, "thread_name"))
			return cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "args"), "name")
				->valuestring;
	}
	return NULL;
}

static bool has_track(const cJSON *events, const char *name)
{
	for (int tid = 0; tid < 1000; tid++) {
		const char *n = track_name(events, tid);

		if (n && !strcmp(n, name))
			return true;
	}
	return false;
}

/* spans named `name` (on a track whose name starts with `track`, NULL: any), and the sum
 * of their bytes in step `step` (0: any) */
static int count_spans(const cJSON *events, const char *track, const char *name, int step,
		       double *bytes)
{
	const cJSON *ev;
	int n = 0;

	if (bytes)
		*bytes = 0;
	cJSON_ArrayForEach(ev, events) {
		const cJSON *ph = cJSON_GetObjectItem(ev, "ph"), *args, *nm, *b;
		const char *tn;

		if (strcmp(ph->valuestring, "X"))
			continue;
		cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(ev, "ts")) &&
			  cJSON_IsNumber(cJSON_GetObjectItem(ev, "dur")) &&
			  cJSON_GetObjectItem(ev, "dur")->valuedouble >= 0);
		args = cJSON_GetObjectItem(ev, "args");
		nm = cJSON_GetObjectItem(ev, "name");
		tn = track_name(events, cJSON_GetObjectItem(ev, "tid")->valueint);
		cr_assert_not_null(tn, "a span on an unnamed track");
		if (step && cJSON_GetObjectItem(args, "step")->valueint != step)
			continue;
		if (track && strncmp(tn, track, strlen(track)))
			continue;
		if (name && strncmp(nm->valuestring, name, strlen(name)))
			continue;
		n++;
		b = cJSON_GetObjectItem(args, "bytes");
		if (bytes && b)
			*bytes += b->valuedouble;
	}
	return n;
}

Test(nvme_trace, two_steps_have_every_track_span_and_the_plans_nvme_bytes)
{
	static const char *const tracks[] = { "step", "compute", "copy-in", "copy-out", "comm",
					      "nvme read", "nvme write", "adamw worker 0" };
	static const char *const spans[] = { "fwd 3", "bwd 3", "fetch 4", "all-gather 4",
					     "reduce-scatter 3", "grad down 3", "adamw 3",
					     "read optim 3", "write optim 3", "read param 3",
					     "step 1", "step 2" };
	struct run r;
	const cJSON *events;

	run_traced(&r, "");
	events = cJSON_GetObjectItem(r.root, "traceEvents");
	cr_assert(cJSON_IsArray(events));
	for (size_t i = 0; i < sizeof(tracks) / sizeof(tracks[0]); i++)
		cr_assert(has_track(events, tracks[i]), "no track '%s'", tracks[i]);
	for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
		char exact[64];

		snprintf(exact, sizeof(exact), "%s", spans[i]);
		cr_assert_gt(count_spans(events, NULL, exact, 0, NULL), 0, "no span '%s'", exact);
	}
	/* each step's NVMe spans move exactly the plan's bytes; two steps traced */
	for (int step = 1; step <= 2; step++) {
		double rd, wr;

		cr_assert_gt(count_spans(events, "nvme read", NULL, step, &rd), 0);
		cr_assert_gt(count_spans(events, "nvme write", NULL, step, &wr), 0);
		cr_assert_eq((unsigned long long)rd, r.rd_plan, "step %d: read spans %.0f B, plan %llu", step, rd, (unsigned long long)r.rd_plan);
		cr_assert_eq((unsigned long long)wr, r.wr_plan, "step %d: write spans %.0f B", step, wr);
	}
	cr_assert_eq(count_spans(events, "step", "step", 0, NULL), 2);
	/* the fetch copies carry bytes: one shard of fp32 parameters each */
	{
		double b;

		cr_assert_gt(count_spans(events, "copy-in", "fetch", 1, &b), 0);
		cr_assert_gt(b, 0);
	}
	run_free(&r);
}

Test(nvme_trace, bf16_writes_param_spans_and_trace_steps_limits_the_steps)
{
	struct run r;
	const cJSON *events;
	double wr;

	run_traced(&r, "--bf16 --trace-steps 2-2");
	events = cJSON_GetObjectItem(r.root, "traceEvents");
	cr_assert_eq(count_spans(events, NULL, NULL, 1, NULL), 0, "step 1 was not asked for");
	cr_assert_gt(count_spans(events, NULL, "write param 3", 2, NULL), 0);
	cr_assert_eq(count_spans(events, "step", "step 2", 0, NULL), 1);
	count_spans(events, "nvme write", NULL, 2, &wr);
	cr_assert_eq((unsigned long long)wr, r.wr_plan);
	run_free(&r);
}

Test(nvme_trace, bad_trace_steps_are_usage_errors)
{
	static const char *const bad[] = { "0", "3-2", "x", "1-x", "-2", "" };
	char out[4096], args[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "train --device host --model tiny --steps 1 --data "
			 "%s/data/demo.txt --trace /dev/null --trace-steps '%s'", ZN_TEST_SRC_DIR,
			 bad[i]);
		cr_assert_eq(zinc(out, sizeof(out), args), 2, "'%s': %s", bad[i], out);
		cr_assert_not_null(strstr(out, "--trace-steps"), "%s", out);
	}
	/* an output that cannot be written is refused before any step */
	snprintf(args, sizeof(args), "train --device host --model tiny --steps 1 --data "
		 "%s/data/demo.txt --trace /nonexistent-dir/t.json", ZN_TEST_SRC_DIR);
	cr_assert_eq(zinc(out, sizeof(out), args), 2, "%s", out);
	cr_assert_not_null(strstr(out, "--trace"), "%s", out);
}

/* A parameter read that an AdamW write waits for (swapio.c wait_layer_reads: layer-major
 * with GPT-2's tied head fetches the last layer again before its AdamW, every early AdamW
 * late by ZINC_TEST_LATE_EARLY_ADAMW) is traced like one its fetch waits for: each step's
 * read spans still move exactly the plan's bytes. */
Test(nvme_trace, a_read_a_write_waited_for_is_traced)
{
	struct run r;
	const cJSON *events;

	setenv("ZINC_TEST_LATE_EARLY_ADAMW", "1", 1);
	run_traced(&r, "--schedule layer-major --hot-layers 0");
	unsetenv("ZINC_TEST_LATE_EARLY_ADAMW");
	events = cJSON_GetObjectItem(r.root, "traceEvents");
	for (int step = 1; step <= 2; step++) {
		double rd = 0;

		cr_assert_gt(count_spans(events, "nvme read", NULL, step, &rd), 0);
		cr_assert_eq((unsigned long long)rd, r.rd_plan, "step %d: read spans %.0f B, plan %llu",
			     step, rd, r.rd_plan);
	}
	run_free(&r);
}
