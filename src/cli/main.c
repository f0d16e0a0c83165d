/* zinc: dispatches to the subcommands (train, estimate, tokenize, generate, merge, info,
 * bench nvme|adam|step). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "zinc.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc <command> [options]\n"
		"\n"
		"commands:\n"
		"  train      train a GPT model with ZeRO stages 0-3 and offload\n"
		"  estimate   model-state bytes per rank for every ZeRO stage and offload choice\n"
		"  tokenize   text or JSONL to llm.c token files with a Hugging Face tokenizer.json\n"
		"  generate   text from a model with a KV cache (layers on the device, cpu or nvme)\n"
		"  merge      a LoRA adapter merged into its base, as a Hugging Face directory\n"
		"  info       the machine as zinc sees it (CPU, NUMA, memory, GPUs, io_uring, nvme)\n"
		"  bench nvme NVMe read/write bandwidth with zinc's io_uring engine\n"
		"  bench adam CPU AdamW throughput against the memory-bandwidth bound\n"
		"  bench step step time against NVMe bandwidth caps, next to the bound\n"
		"\n"
		"'zinc <command> --help' lists a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return ZN_EXIT_USAGE;
	}
	const char *cmd = argv[1];

	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version")) {
		printf("zinc %s\n", ZN_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "train"))
		return zn_cmd_train(argc - 1, argv + 1);
	if (!strcmp(cmd, "estimate"))
		return zn_cmd_estimate(argc - 1, argv + 1);
	if (!strcmp(cmd, "tokenize"))
		return zn_cmd_tokenize(argc - 1, argv + 1);
	if (!strcmp(cmd, "generate"))
		return zn_cmd_generate(argc - 1, argv + 1);
	if (!strcmp(cmd, "merge"))
		return zn_cmd_merge(argc - 1, argv + 1);
	if (!strcmp(cmd, "info"))
		return zn_cmd_info(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench")) {
		if (argc >= 3 && !strcmp(argv[2], "nvme"))
			return zn_cmd_bench_nvme(argc - 2, argv + 2);
		if (argc >= 3 && !strcmp(argv[2], "adam"))
			return zn_cmd_bench_adam(argc - 2, argv + 2);
		if (argc >= 3 && !strcmp(argv[2], "step"))
			return zn_cmd_bench_step(argc - 2, argv + 2);
		fprintf(stderr, "zinc bench: say which benchmark: 'zinc bench nvme', 'zinc bench "
			"adam' or 'zinc bench step'\n");
		return ZN_EXIT_USAGE;
	}
	fprintf(stderr, "zinc: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return ZN_EXIT_USAGE;
}
