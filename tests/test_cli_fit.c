/* zinc estimate --fit (src/cli/estimate_fit.c): the largest layer count of a shape family
 * per ZeRO stage and offload choice, and the budget one more layer breaks, against figures
 * computed by hand below; the free space of --nvme-path from statvfs; bad input refused
 * with a message naming the flag. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

/* Runs zinc ARGS; stdout (and stderr when both) into out. Returns the exit status. */
static int run(const char *args, bool both, char *out, size_t size)
{
	char cmd[2048];
	size_t n;
	FILE *p;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s %s", ZN_ZINC_EXE, args, both ? "2>&1" : "2>/dev/null");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static cJSON *fit_json(const char *args)
{
	static char out[1 << 16];
	char cmd[1024];
	cJSON *root;

	snprintf(cmd, sizeof(cmd), "estimate --fit --json %s", args);
	cr_assert_eq(run(cmd, false, out, sizeof(out)), 0, "zinc %s", cmd);
	root = cJSON_Parse(out);
	cr_assert_not_null(root, "not JSON: %s", out);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "fit")), 16);
	return root;
}

static cJSON *row(cJSON *root, int stage, const char *opt, const char *prm)
{
	cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItem(root, "fit"))
		if (cJSON_GetObjectItem(r, "stage")->valueint == stage &&
		    !strcmp(cJSON_GetObjectItem(r, "offload_optimizer")->valuestring, opt) &&
		    !strcmp(cJSON_GetObjectItem(r, "offload_param")->valuestring, prm))
			return r;
	cr_assert_fail("no row stage %d %s %s", stage, opt, prm);
	return NULL;
}

static double num(cJSON *r, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(r, key);

	cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
	return v->valuedouble;
}

static void expect(cJSON *root, int stage, const char *opt, const char *prm, int layers,
		   const char *limit)
{
	cJSON *r = row(root, stage, opt, prm);

	cr_expect_eq(cJSON_GetObjectItem(r, "layers")->valueint, layers,
		     "stage %d %s/%s: %d layers, expected %d", stage, opt, prm,
		     cJSON_GetObjectItem(r, "layers")->valueint, layers);
	cr_expect_str_eq(cJSON_GetObjectItem(r, "limited_by")->valuestring, limit,
			 "stage %d %s/%s", stage, opt, prm);
	/* params of the member: 68224 + 49984 L (the family below) */
	if (layers)
		cr_expect_eq(num(r, "params"), 68224.0 + 49984.0 * layers);
}

/* The family: GPT shape C = 64, V = 1000, T = 64, L blocks.
 *   block   = 12 C^2 + 13 C = 49152 + 832 = 49984
 *   embed   = V C + T C = 64000 + 4096 = 68096 (the largest layer), final norm 2 C = 128
 *   P(L)    = 68224 + 49984 L
 * bf16 mixed precision: parameter 2 B, gradient 2 B, optimizer (master, m, v) 12 B.
 * Budgets: device 64 MiB = 67108864, host 256 MiB = 268435456, nvme 1 GiB = 1073741824;
 * 1 rank, prefetch depth 1, 4 staging buffers. */
#define FAMILY "--layers 2 --hidden 64 --heads 4 --vocab 1000 --seq 64"
#define BUDGETS "--device-mem 64M --host-mem 256M --nvme-mem 1G"

Test(cli_fit, largest_layer_count_per_stage_and_offload)
{
	cJSON *root = fit_json(FAMILY " " BUDGETS);

	cr_assert_eq(num(root, "device_budget_bytes"), 67108864.0);
	cr_assert_eq(num(root, "host_budget_bytes"), 268435456.0);
	cr_assert_eq(num(root, "nvme_budget_bytes"), 1073741824.0);
	/* stage 0: 16 P on the device <= 67108864 -> P <= 4194304 -> L <= 4126080 / 49984
	 * = 82.5 */
	expect(root, 0, "none", "none", 82, "device");
	/* stage 2, optimizer cpu: device 2 P + one layer's full gradients 2 x 68096; host
	 * the gradient shard 2 P + optimizer 12 P = 14 P <= 268435456 -> P <= 19173961 ->
	 * L <= 19105737 / 49984 = 382.2 (device would allow P <= 33486336) */
	expect(root, 2, "cpu", "none", 382, "host");
	/* stage 3, cpu/cpu: host 16 P <= 268435456 -> P <= 16777216 -> L <= 16708992 / 49984
	 * = 334.3 */
	expect(root, 3, "cpu", "cpu", 334, "host");
	/* stage 3, nvme/none: device 2 P + working (1 + 1) x 68096 x 2 + 68096 x 2 = 408576
	 * <= 67108864 -> P <= 33350144 -> L <= 33281920 / 49984 = 665.9 */
	expect(root, 3, "nvme", "none", 665, "device");
	/* stage 3, nvme/nvme: nvme 2 P + 12 P = 14 P <= 1073741824 -> P <= 76695844 ->
	 * L <= 76627620 / 49984 = 1533.0; host stays the ring (3 x 68096 x 2) + staging
	 * 4 x 68096 x (12 + 2), the device the working set */
	expect(root, 3, "nvme", "nvme", 1533, "nvme");
	cJSON *r = row(root, 3, "nvme", "nvme");

	cr_expect_eq(num(r, "device_bytes"), 408576.0);
	cr_expect_eq(num(r, "host_bytes_per_node"), 408576.0 + 3813376.0);
	cr_expect_eq(num(r, "nvme_bytes_per_rank"), 14.0 * (68224 + 49984.0 * 1533));
	cJSON_Delete(root);
}

/* Two ranks on the node: shards halve, the host and nvme budgets are per node. Stage 3
 * nvme/nvme: per rank P + 6 P = 7 P <= 1 GiB / 2 -> the same P <= 76695844, L = 1533; per
 * rank staging 4 x 34048 x 14 + ring 3 x 34048 x 2. */
Test(cli_fit, ranks_share_the_node_budgets)
{
	cJSON *root = fit_json(FAMILY " " BUDGETS " --gpus 2");
	cJSON *r = row(root, 3, "nvme", "nvme");

	expect(root, 3, "nvme", "nvme", 1533, "nvme");
	cr_expect_eq(num(r, "nvme_bytes_per_rank"), 7.0 * (68224 + 49984.0 * 1533));
	cr_expect_eq(num(r, "host_bytes_per_node"), 2.0 * (1906688 + 204288));
	/* stage 0 is not sharded: still 82 */
	expect(root, 0, "none", "none", 82, "device");
	cJSON_Delete(root);
}

/* Without --nvme-path or --nvme-mem, nvme is unlimited: the nvme/nvme row stops at the
 * layer cap; a budget too small for one layer gives 0 layers, naming it. */
Test(cli_fit, unlimited_nvme_and_nothing_fits)
{
	cJSON *root = fit_json(FAMILY " --device-mem 64M --host-mem 256M");

	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(root, "nvme_budget_bytes")));
	expect(root, 3, "nvme", "nvme", 1000000, "layer cap");
	cJSON_Delete(root);
	/* 16 P(1) = 16 x 118208 = 1891328 > 1 MiB */
	root = fit_json(FAMILY " --device-mem 1M --host-mem 256M --nvme-mem 1G");
	expect(root, 0, "none", "none", 0, "device");
	cJSON_Delete(root);
}

/* A preset family: the count --fit gives is the largest whose own estimate fits: the
 * ZeRO paper's accounting of zinc estimate --params (GPT-2: 12 C^2 + 13 C = 7087872
 * parameters per block, the largest layer the embedding's 39419904, as zinc estimate
 * --model gpt2 says). */
Test(cli_fit, model_family_matches_its_estimate)
{
	static char out[1 << 16];
	char cmd[256];
	cJSON *root = fit_json("--model gpt2 --device-mem 4G --host-mem 8G --nvme-mem 10G");
	cJSON *r = row(root, 3, "nvme", "nvme");
	int L = cJSON_GetObjectItem(r, "layers")->valueint;

	cr_assert_str_eq(cJSON_GetObjectItem(r, "limited_by")->valuestring, "nvme");
	cr_assert_gt(L, 12);
	cr_assert_eq(num(r, "params"), 124439808.0 + (L - 12) * 7087872.0);
	for (int k = 0; k < 2; k++) {
		cJSON *e, *er;
		double nvme;

		snprintf(cmd, sizeof(cmd), "estimate --params %.0f --largest-layer 39419904 --json",
			 124439808.0 + (L + k - 12) * 7087872.0);
		cr_assert_eq(run(cmd, false, out, sizeof(out)), 0, "%s", cmd);
		e = cJSON_Parse(out);
		cr_assert_not_null(e);
		if (!k)
			cr_expect_eq(num(e, "params"), num(r, "params"));
		cJSON_ArrayForEach(er, cJSON_GetObjectItem(e, "rows"))
			if (num(er, "stage") == 3 &&
			    !strcmp(cJSON_GetObjectItem(er, "offload_param")->valuestring, "nvme") &&
			    !strcmp(cJSON_GetObjectItem(er, "offload_optimizer")->valuestring,
				    "nvme"))
				break;
		cr_assert_not_null(er);
		nvme = num(er, "nvme_bytes_per_rank");
		if (!k)
			cr_expect_leq(nvme, 10737418240.0, "%d layers fit", L);
		else
			cr_expect_gt(nvme, 10737418240.0, "%d layers do not", L + 1);
		cJSON_Delete(e);
	}
	cJSON_Delete(root);
}

static double free_bytes(const char *path)
{
	struct statvfs s;

	cr_assert_eq(statvfs(path, &s), 0, "%s", path);
	return (double)s.f_bavail * (double)s.f_frsize;
}

/* --nvme-path: the free space from statvfs, a file system counted once however many paths
 * name it (other writers may change it meanwhile: bracketed by readings around the run). */
Test(cli_fit, nvme_path_free_space)
{
	char args[512];
	double before, after, got, lo, hi;
	cJSON *root;

	snprintf(args, sizeof(args), FAMILY " --device-mem 64M --host-mem 256M --nvme-path %s "
		 "--nvme-path %s/tests", ZN_TEST_SRC_DIR, ZN_TEST_SRC_DIR);
	before = free_bytes(ZN_TEST_SRC_DIR);
	root = fit_json(args);
	after = free_bytes(ZN_TEST_SRC_DIR);
	got = num(root, "nvme_budget_bytes");
	lo = (before < after ? before : after) - 256.0 * 1048576;
	hi = (before > after ? before : after) + 256.0 * 1048576;
	cr_expect(got >= lo && got <= hi, "nvme budget %.0f, statvfs %.0f .. %.0f", got, before,
		  after);
	cJSON_Delete(root);
}

static void refused(const char *args, const char *message)
{
	static char out[1 << 14];

	cr_expect_eq(run(args, true, out, sizeof(out)), 2, "zinc %s: %s", args, out);
	cr_expect_not_null(strstr(out, message), "zinc %s: '%s' not in: %s", args, message, out);
}

Test(cli_fit, bad_input_refused)
{
	refused("estimate --fit --params 1B --largest-layer 100M", "--params");
	refused("estimate --fit " FAMILY " --micro-batch 1", "--micro-batch");
	refused("estimate --fit " FAMILY " --lora-params 1M", "LoRA");
	refused("estimate " FAMILY " --nvme-mem 1G", "add --fit");
	refused("estimate --fit " FAMILY " --device-mem 0", "--device-mem 0");
	refused("estimate --fit " FAMILY " --nvme-mem 0", "--nvme-mem 0");
	refused("estimate --fit " FAMILY " --nvme-mem 1X", "--nvme-mem '1X'");
	refused("estimate --fit " FAMILY " --nvme-mem 1G --nvme-path /tmp", "not both");
	refused("estimate --fit " FAMILY " --nvme-path /nonexistent/zinc-fit",
		"--nvme-path /nonexistent/zinc-fit");
	refused("estimate --fit " FAMILY " --nvme-path " ZN_TEST_SRC_DIR "/CMakeLists.txt",
		"not a directory");
	refused("estimate --fit --layers 2 --hidden 64", "a GPT shape needs all of");
}
