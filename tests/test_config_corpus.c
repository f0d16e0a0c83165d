/* tests/configs: published DeepSpeed configs and what zinc does with each (EXPECTED there):
 * "trains" passes --print-config (the run's validation) and trains 2 steps of a tiny model;
 * "refuses TEXT" exits 2 with TEXT in the error, from --print-config and from a run. The
 * OneCycle config also writes csv_monitor files, checked here against its schedule. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[64];

/* Copies tests/configs/name to tmp with @NVME@ and @OUT@ replaced by tmp. */
static void materialize(const char *name, char *out, size_t size)
{
	char src[512], line[512];
	FILE *in, *o;

	snprintf(src, sizeof(src), "%s/tests/configs/%s", ZN_TEST_SRC_DIR, name);
	snprintf(out, size, "%s/%s", tmp, name);
	in = fopen(src, "r");
	o = fopen(out, "w");
	cr_assert(in && o, "%s", src);
	while (fgets(line, sizeof(line), in)) {
		char *at;

		while ((at = strstr(line, "@NVME@")) || (at = strstr(line, "@OUT@"))) {
			char rest[512];
			size_t n = at[1] == 'N' ? 6 : 5;

			snprintf(rest, sizeof(rest), "%s", at + n);
			snprintf(at, sizeof(line) - (size_t)(at - line), "%s%s", tmp, rest);
		}
		fputs(line, o);
	}
	fclose(in);
	fclose(o);
}

static int run(const char *args, char *err, size_t size)
{
	char cmd[2048], errf[128];
	FILE *f;
	int status;
	size_t n = 0;

	snprintf(errf, sizeof(errf), "%s/stderr.txt", tmp);
	snprintf(cmd, sizeof(cmd), "cd %s && %s %s >/dev/null 2>%s", tmp, ZN_ZINC_EXE, args, errf);
	status = system(cmd);
	f = fopen(errf, "r");
	if (f) {
		n = fread(err, 1, size - 1, f);
		fclose(f);
	}
	err[n] = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(config_corpus, every_config_gives_its_outcome)
{
	char path[512], line[512], args[2048], cfg[600];
	static char err[1 << 16];
	FILE *f;
	int count = 0;

	snprintf(tmp, sizeof(tmp), "/tmp/zn-corpus-XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
	snprintf(path, sizeof(path), "%s/tests/configs/EXPECTED", ZN_TEST_SRC_DIR);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		char name[128], outcome[32], text[256] = "";
		const char *common = "--device host --model tiny --vocab 256 --seq 16 "
				     "--steps 2 --data";

		if (line[0] == '#' || sscanf(line, "%127s %31s", name, outcome) != 2)
			continue;
		/* refuses TEXT; trains [FLAGS]: flags for the run (a published batch too big
		 * for a test run is shrunk there) */
		{
			char *p = strstr(line, outcome) + strlen(outcome), *hash = strchr(p, '#');

			while (*p == ' ')
				p++;
			snprintf(text, sizeof(text), "%.*s", (int)(hash ? hash - p : (long)strlen(p)),
				 p);
			for (size_t n = strlen(text); n && (text[n - 1] == ' ' || text[n - 1] == '\n');)
				text[--n] = 0;
		}
		materialize(name, cfg, sizeof(cfg));
		snprintf(args, sizeof(args), "train --config %s --print-config", cfg);
		int rc = run(args, err, sizeof(err));

		if (!strcmp(outcome, "trains")) {
			cr_assert_eq(rc, 0, "%s: --print-config exit %d: %s", name, rc, err);
			cr_assert_null(strstr(err, "unknown key"), "%s: %s", name, err);
			snprintf(args, sizeof(args), "train --config %s %s %s %s/data/demo.txt", cfg,
				 text, common, ZN_TEST_SRC_DIR);
			rc = run(args, err, sizeof(err));
			cr_assert_eq(rc, 0, "%s: training exit %d: %s", name, rc, err);
		} else {
			cr_assert_eq(rc, 2, "%s: --print-config exit %d, want 2", name, rc);
			cr_assert_not_null(strstr(err, text), "%s: want '%s' in: %s", name, text, err);
			snprintf(args, sizeof(args), "train --config %s %s %s/data/demo.txt", cfg,
				 common, ZN_TEST_SRC_DIR);
			rc = run(args, err, sizeof(err));
			cr_assert_eq(rc, 2, "%s: run exit %d, want 2", name, rc);
			cr_assert_not_null(strstr(err, text), "%s: want '%s' in: %s", name, text, err);
		}
		count++;
	}
	fclose(f);
	cr_assert_geq(count, 8);

	/* csv_monitor of the OneCycle run: lr per step as DeepSpeed's OneCycle gives it
	 * (first 2, second 2: 1e-4, 5.5e-4, 1e-3 at samples 8, 16, ...) */
	snprintf(path, sizeof(path), "%s/onecycle/Train_Samples_lr.csv", tmp);
	f = fopen(path, "r");
	cr_assert_not_null(f, "no %s", path);
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert_str_eq(line, "step,lr\n");
	double want[2] = { 1e-4, 5.5e-4 };
	for (int k = 0; k < 2; k++) {
		long long s;
		double v;

		cr_assert(fgets(line, sizeof(line), f) && sscanf(line, "%lld,%lf", &s, &v) == 2);
		cr_assert_eq(s, 8LL * (k + 1));
		cr_assert_float_eq(v, want[k], 1e-9, "step %d lr %g", k + 1, v);
	}
	fclose(f);
	snprintf(path, sizeof(path), "%s/onecycle/Train_Samples_train_loss.csv", tmp);
	cr_assert_eq(access(path, R_OK), 0);
	snprintf(args, sizeof(args), "rm -rf %s", tmp);
	cr_assert_eq(system(args), 0);
}

/* --print-config validates as a run does (issue: it exited 0 for configs a run refuses). */
Test(config_corpus, print_config_refuses_what_a_run_refuses)
{
	static char err[1 << 14];

	snprintf(tmp, sizeof(tmp), "/tmp");
	cr_assert_eq(run("train --print-config --fp16 --hysteresis 0", err, sizeof(err)), 2);
	cr_assert_eq(run("train --print-config --zero-stage 3 --offload-param cpu", err,
			 sizeof(err)), 2);
	cr_assert_eq(run("train --print-config --device-mem 0", err, sizeof(err)), 2);
	cr_assert_eq(run("train --print-config --micro-batch 4294967297", err, sizeof(err)), 2);
	cr_assert_eq(run("train --print-config --lr-schedule OneCycle --csv-monitor", err,
			 sizeof(err)), 0);
	cr_assert_not_null(strstr(err, "scheduler.params.cycle_max_lr"), "origins on stderr");
}
