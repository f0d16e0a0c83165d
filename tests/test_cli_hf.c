/* zinc train with Hugging Face directories: --save-final DIR (sharded by
 * --save-shard-size), --init-from DIR, a 0-learning-rate step and a second save equal to
 * the first file for file and byte for byte; --init-from of a lone shard that has no
 * n_head metadata reads the config.json beside it; a Llama config.json beside GPT-2 weights
 * is refused naming the file and the tensor.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_child.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clihf_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_hf, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* Runs zinc with args; its stdout and stderr in out. Returns the exit code. */
static int run(const char *args, char *out, size_t size)
{
	char cmd[2048];
	FILE *p;
	size_t n;
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define COMMON "--device host --seq 16 --micro-batch 2 --no-pin-memory --data " \
	       ZN_TEST_SRC_DIR "/data/demo.txt"

Test(cli_hf, save_dir_init_from_dir_round_trip)
{
	char args[1024], out[16384], pa[160], pb[160], *index, *da, *db;
	size_t na, nb, ni;
	int shards = 0;

	snprintf(args, sizeof(args), "train " COMMON " --model tiny --vocab 256 --steps 2 "
		 "--save-final %s/a --save-shard-size 40KB", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	snprintf(pa, sizeof(pa), "%s/a/model.safetensors.index.json", dir);
	index = zt_read_all(pa, &ni);
	cr_assert_not_null(strstr(index, "-of-"), "%s", index);
	cr_assert_eq(sscanf(strstr(index, "-of-") + 4, "%5d", &shards), 1);
	cr_expect_gt(shards, 3, "%s", index);
	if (!system("command -v python3 > /dev/null 2>&1")) {
		snprintf(args, sizeof(args), "python3 %s/scripts/hf_check.py %s/a > /dev/null",
			 ZN_TEST_SRC_DIR, dir);
		cr_expect_eq(system(args), 0, "%s", args);
	}
	/* reload (ZeRO-3, CPU offload), one step at lr 0, save again: the same files */
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/a --steps 1 --lr 0 "
		 "--zero-stage 3 --offload-optimizer cpu --offload-param cpu --save-final %s/b "
		 "--save-shard-size 40KB", dir, dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "model: 2 layers, 4 heads, d_model 64, vocab 256, seq 16"), "%s",
		  out);
	for (int k = 0; k <= shards + 1; k++) {
		char name[64];

		if (k < shards)
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, shards);
		else
			snprintf(name, sizeof(name), k == shards ? "config.json" :
					"model.safetensors.index.json");
		snprintf(pa, sizeof(pa), "%s/a/%s", dir, name);
		snprintf(pb, sizeof(pb), "%s/b/%s", dir, name);
		da = zt_read_all(pa, &na);
		db = zt_read_all(pb, &nb);
		cr_expect(na == nb && !memcmp(da, db, (size_t)na), "%s differs", name);
		free(da);
		free(db);
	}
	free(index);
}

Test(cli_hf, lone_file_reads_config_beside_it)
{
	char args[1024], out[16384], p[160];

	/* one shard (model.safetensors: metadata format=pt only, no n_head) + config.json;
	 * 2 layers x 64 is no GPT-2 preset, so without config.json it needs --heads */
	snprintf(args, sizeof(args), "train " COMMON " --model tiny --vocab 256 --steps 1 "
		 "--heads 2 --save-final %s/c", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	/* saving into the existing directory again is fine */
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/c --steps 1 "
		 "--save-final %s/c/", dir, dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/c/model.safetensors "
		 "--steps 1", dir);
	cr_assert_eq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "model: 2 layers, 2 heads, d_model 64"), "%s", out);
	/* a contradicting --heads is refused */
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/c --heads 4 --steps 1",
		 dir);
	cr_expect_eq(run(args, out, sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--heads 4 contradicts n_head 2"), "%s", out);
	/* a Llama config beside GPT-2 weights: the missing Llama tensor named */
	snprintf(p, sizeof(p), "%s/c/config.json", dir);
	{
		FILE *f = fopen(p, "w");

		fputs("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
		      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,"
		      " \"max_position_embeddings\": 16}", f);
		fclose(f);
	}
	snprintf(args, sizeof(args), "train " COMMON " --init-from %s/c --steps 1", dir);
	cr_expect_neq(run(args, out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "c/model.safetensors: no tensor 'model.embed_tokens.weight', which a "
			      "llama model"), "%s", out);
	cr_expect_eq(run("train --save-shard-size 5XB --data x", out, sizeof(out)), 2, "%s", out);
	cr_expect(strstr(out, "--save-shard-size '5XB'"), "%s", out);
}
