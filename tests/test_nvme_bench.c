/* zinc bench nvme end to end (small sizes): the table, --json, the best setting written
 * as an aio block that --config reads back, the benchmark's own checks, usage errors. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <sys/wait.h>

#include "nvme/bench.h"
#include "nvme_test_util.h"

static char dir[ZN_PATH_MAX];

static void setup(void)
{
	nvme_test_dir(dir, sizeof(dir));
}

static void teardown(void)
{
	if (dir[0])
		nvme_test_rmdir(dir);
}

TestSuite(nvme_bench, .init = setup, .fini = teardown, .timeout = 120);

/* Runs the zinc binary with args; returns its exit status, stdout in out. */
static int zinc(const char *args, char *out, size_t n)
{
	char cmd[4096];
	size_t len = 0;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "%s bench nvme %s 2>/dev/null", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while (len + 1 < n && fgets(out + len, (int)(n - len), p))
		len += strlen(out + len);
	out[len] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(nvme_bench, table_and_best)
{
	static char out[16384];
	char args[2 * ZN_PATH_MAX + 256];
	int rows = 0;
	char *line, *save = NULL;

	snprintf(args, sizeof(args), "--path %s --size 4M --block 64K,1M --depth 1,4 --rings 1,2 "
		 "--iters 1 --out %s/best.json", dir, dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "# zinc "), "%s", out);
	cr_assert_not_null(strstr(out, "# machine: "));
	cr_assert_not_null(strstr(out, "(GB/s)"));
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (line[0] != '#') {
			rows++;
			cr_assert_not_null(strstr(line, " ok"), "row not checked: %s", line);
		}
	cr_assert_eq(rows, 8, "one row per case");
	/* The best setting round-trips through --config. */
	snprintf(args, sizeof(args), "--path %s --size 1M --config %s/best.json --iters 1 --json",
		 dir, dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 0, "%s", out);
	cJSON *doc = cJSON_Parse(out);
	cr_assert_not_null(doc, "--json output is not JSON: %s", out);
	cJSON *cases = cJSON_GetObjectItem(doc, "cases");
	cr_assert_eq(cJSON_GetArraySize(cases), 1);
	cJSON *c = cJSON_GetArrayItem(cases, 0);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")));
	cr_assert_gt(cJSON_GetObjectItem(c, "read_gbps")->valuedouble, 0);
	cr_assert_gt(cJSON_GetObjectItem(c, "write_gbps")->valuedouble, 0);
	double bs = cJSON_GetObjectItem(c, "block_size")->valuedouble;
	cr_assert(bs == 65536 || bs == 1048576, "block %g did not come from the config", bs);
	cJSON_Delete(doc);
	/* The scratch files are gone. */
	DIR *d = opendir(dir);
	struct dirent *e;
	while ((e = readdir(d)))
		cr_assert_null(strstr(e->d_name, "zinc-bench-"), "left behind: %s", e->d_name);
	closedir(d);
}

Test(nvme_bench, pool_backend_and_cap)
{
	static char out[16384];
	char args[2 * ZN_PATH_MAX + 256];

	snprintf(args, sizeof(args), "--path %s --size 2M --block 256K --depth 2 --iters 1 "
		 "--backend pool --cap 50M --json", dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 0, "%s", out);
	cJSON *doc = cJSON_Parse(out);
	cr_assert_not_null(doc);
	cr_assert_not_null(strstr(cJSON_GetObjectItem(doc, "engine")->valuestring, "pool"));
	cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "cases"), 0);
	/* 2 MiB at 50 MB/s, less a 10 ms burst and one block, takes >= 26 ms: < 0.081 GB/s. */
	cr_assert_lt(cJSON_GetObjectItem(c, "write_gbps")->valuedouble, 0.081,
		     "the cap did not hold for writes");
	cr_assert_lt(cJSON_GetObjectItem(c, "read_gbps")->valuedouble, 0.081,
		     "the cap did not hold for reads");
	cJSON_Delete(doc);
}

Test(nvme_bench, usage_errors)
{
	char out[4096], args[ZN_PATH_MAX + 64];

	cr_assert_eq(zinc("--size 1M", out, sizeof(out)), 2, "no --path/--file");
	snprintf(args, sizeof(args), "--path %s --block 5000", dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 1, "a bad block size is refused by the engine");
	snprintf(args, sizeof(args), "--path %s --op sideways", dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "--path %s --size 1000", dir);
	cr_assert_eq(zinc(args, out, sizeof(out)), 2);
	cr_assert_eq(zinc("--help", out, sizeof(out)), 0);
	cr_assert_not_null(strstr(out, "--sweep"));
}

/* The library case directly: an I/O error is the case's result, never a bandwidth; a
 * bad size is refused. */
Test(nvme_bench, io_error_is_an_error)
{
	char path[ZN_PATH_MAX + 32];
	int fd = nvme_test_open(dir, "case.bin", 1 << 20, path, sizeof(path));
	struct zn_aio_fault fault = { .nth = 5, .err = EIO };
	struct zn_nvme_bench_case c = {
		.aio = { .block_size_bytes = 65536, .queue_depth = 2, .intra_op_parallelism = 1,
			 .overlap_events = true },
		.fd = fd, .name = path, .bytes = 1 << 20, .iters = 2, .read = true, .write = true,
		.seed = 1,
	};
	struct zn_nvme_bench_result r;

	cr_assert_eq(zn_nvme_bench_run(&c, &r), 0);
	cr_assert(r.ok, "%s", r.check);
	cr_assert(r.write_s > 0 && r.read_s > 0);
	c.fault = &fault;
	cr_redirect_stderr();
	cr_assert_eq(zn_nvme_bench_run(&c, &r), -EIO);
	c.fault = NULL;
	c.bytes = 1000;
	cr_assert_eq(zn_nvme_bench_run(&c, &r), -EINVAL);
	close(fd);
}
