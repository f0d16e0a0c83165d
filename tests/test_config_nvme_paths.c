/* nvme paths and the run id as flags and JSON keys: a 9th path is refused (not dropped),
 * an empty or too long path is refused (not truncated), the same directory twice is
 * refused naming both, and zinc.run_id / --run-id takes only a short plain name. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zinc.h"

static int flags(struct zn_config *cfg, int argc, char **argv)
{
	char *rest[64];
	int n = 0;

	zn_config_defaults(cfg);
	return zn_config_apply_flags(cfg, argc, argv, rest, &n);
}

static void scratch_dirs(char *base, size_t n, int count)
{
	char sub[ZN_PATH_MAX + 16];

	snprintf(base, n, "/tmp/zn-paths-XXXXXX");
	cr_assert_not_null(mkdtemp(base));
	for (int i = 0; i < count; i++) {
		snprintf(sub, sizeof(sub), "%s/d%d", base, i);
		cr_assert_eq(mkdir(sub, 0700), 0);
	}
}

static void remove_dirs(const char *base, int count)
{
	char sub[ZN_PATH_MAX + 16];

	for (int i = 0; i < count; i++) {
		snprintf(sub, sizeof(sub), "%s/d%d", base, i);
		rmdir(sub);
	}
	rmdir(base);
}

Test(config_nvme_paths, eight_paths_are_taken_a_ninth_is_refused, .init = cr_redirect_stderr)
{
	char base[64], p[9][96], *argv[18];
	struct zn_config cfg;

	for (int i = 0; i < 9; i++) {
		snprintf(p[i], sizeof(p[i]), "/tmp/nvme%d", i);
		argv[2 * i] = "--nvme-path";
		argv[2 * i + 1] = p[i];
	}
	cr_assert_eq(flags(&cfg, 16, argv), 0);
	cr_assert_eq(cfg.zero.offload_optimizer.nvme_path_count, 8);
	cr_assert_str_eq(cfg.zero.offload_param.nvme_path[7], "/tmp/nvme7");
	cr_assert_eq(flags(&cfg, 18, argv), ZN_EUSAGE, "a 9th --nvme-path must be refused");
	/* the same through JSON */
	snprintf(base, sizeof(base), "{\"zero_optimization\": {\"offload_optimizer\": "
		 "{\"nvme_path\": [");
	{
		char json[1024];
		size_t used = (size_t)snprintf(json, sizeof(json), "%s", base);

		for (int i = 0; i < 9; i++)
			used += (size_t)snprintf(json + used, sizeof(json) - used, "%s\"%s\"",
						 i ? ", " : "", p[i]);
		snprintf(json + used, sizeof(json) - used, "]}}}");
		zn_config_defaults(&cfg);
		cr_assert_eq(zn_config_load_json_string(&cfg, json, "t.json"), ZN_EUSAGE);
	}
}

Test(config_nvme_paths, empty_and_too_long_paths_are_refused, .init = cr_redirect_stderr)
{
	static char longp[ZN_PATH_MAX + 8], json[ZN_PATH_MAX + 200];
	char *argv[2] = { "--nvme-path", longp };
	struct zn_config cfg;

	memset(longp, 'a', ZN_PATH_MAX);
	longp[0] = '/';
	longp[ZN_PATH_MAX] = 0; /* 1024 bytes: one too many */
	cr_assert_eq(flags(&cfg, 2, argv), ZN_EUSAGE, "a path longer than 1023 bytes must "
		     "be refused, not truncated");
	longp[ZN_PATH_MAX - 1] = 0; /* 1023 bytes: fits */
	cr_assert_eq(flags(&cfg, 2, argv), 0);
	cr_assert_eq(strlen(cfg.zero.offload_optimizer.nvme_path[0]), ZN_PATH_MAX - 1);
	argv[1] = "";
	cr_assert_eq(flags(&cfg, 2, argv), ZN_EUSAGE);
	longp[ZN_PATH_MAX - 1] = 'a';
	snprintf(json, sizeof(json), "{\"zero_optimization\": {\"offload_param\": "
		 "{\"nvme_path\": [\"%s\"]}}}", longp);
	zn_config_defaults(&cfg);
	cr_assert_eq(zn_config_load_json_string(&cfg, json, "t.json"), ZN_EUSAGE);
}

Test(config_nvme_paths, the_same_directory_twice_is_refused, .init = cr_redirect_stderr)
{
	char base[64], a[96], b[96], c[96], *argv[6];
	struct zn_config cfg;
	char err[4096] = "";
	FILE *f;

	scratch_dirs(base, sizeof(base), 2);
	snprintf(a, sizeof(a), "%s/d0", base);
	snprintf(b, sizeof(b), "%s/d1", base);
	snprintf(c, sizeof(c), "%s/d1/../d0/", base); /* d0 spelled differently */
	argv[0] = argv[2] = argv[4] = "--nvme-path";
	argv[1] = a;
	argv[3] = b;
	argv[5] = c;
	cr_assert_eq(flags(&cfg, 4, argv), 0);
	cfg.zero.stage = 3;
	cfg.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	cr_assert_eq(zn_config_validate(&cfg, 1), 0, "two different directories are fine");
	cr_assert_eq(flags(&cfg, 6, argv), 0);
	cfg.zero.stage = 3;
	cfg.zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	cr_assert_eq(zn_config_validate(&cfg, 1), ZN_EUSAGE);
	fflush(stderr);
	f = cr_get_redirected_stderr();
	err[fread(err, 1, sizeof(err) - 1, f)] = 0;
	cr_assert(strstr(err, "same directory") && strstr(err, "paths 1") && strstr(err, c),
		  "%s", err);
	remove_dirs(base, 2);
}

Test(config_nvme_paths, run_id_takes_a_short_plain_name, .init = cr_redirect_stderr)
{
	char *ok[2] = { "--run-id", "job-7.a_B" }, *bad[2] = { "--run-id", "a/b" };
	char *empty[2] = { "--run-id", "" };
	char *longer[2] = { "--run-id", "x1234567890123456789012345678901234567890" };
	struct zn_config cfg;
	char *json;

	cr_assert_eq(flags(&cfg, 2, ok), 0);
	cr_assert_str_eq(cfg.runtime.run_id, "job-7.a_B");
	json = zn_config_to_json(&cfg);
	cr_assert(strstr(json, "\"run_id\":\t\"job-7.a_B\""), "%s", json);
	free(json);
	cr_assert_eq(flags(&cfg, 2, bad), ZN_EUSAGE, "a '/' would leave the nvme path");
	cr_assert_eq(flags(&cfg, 2, empty), ZN_EUSAGE);
	cr_assert_eq(strlen(longer[1]), ZN_RUN_ID_MAX + 1);
	cr_assert_eq(flags(&cfg, 2, longer), ZN_EUSAGE);
	zn_config_defaults(&cfg);
	cr_assert_eq(zn_config_load_json_string(&cfg, "{\"zinc\": {\"run_id\": \"r1\"}}", "t"), 0);
	cr_assert_str_eq(cfg.runtime.run_id, "r1");
	cr_assert_eq(zn_config_load_json_string(&cfg, "{\"zinc\": {\"run_id\": \"../x\"}}", "t"),
		     ZN_EUSAGE);
}

/* zinc train itself: a 9th --nvme-path is a usage error naming the flag. */
Test(config_nvme_paths, zinc_train_refuses_a_ninth_path)
{
	char cmd[2048], out[8192];
	size_t used, n;
	FILE *p;
	int status;

	used = (size_t)snprintf(cmd, sizeof(cmd), "%s train --device host --model tiny",
				ZN_ZINC_EXE);
	for (int i = 0; i < 9; i++)
		used += (size_t)snprintf(cmd + used, sizeof(cmd) - used, " --nvme-path /tmp/n%d", i);
	snprintf(cmd + used, sizeof(cmd) - used, " --print-config 2>&1");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	status = pclose(p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == ZN_EXIT_USAGE, "%s", out);
	cr_assert(strstr(out, "--nvme-path") && strstr(out, "at most 8"), "%s", out);
}
