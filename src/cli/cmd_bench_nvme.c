/* zinc bench nvme: placeholder until its issue lands. */
#include <stdio.h>

#include "cli/cli.h"

int zn_cmd_bench_nvme(int argc, char **argv)
{
	fprintf(stderr, "zinc bench nvme: not built yet\n");
	return 1;
}
