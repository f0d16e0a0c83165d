/* zinc bench adam: placeholder until its issue lands. */
#include <stdio.h>

#include "cli/cli.h"

int zn_cmd_bench_adam(int argc, char **argv)
{
	fprintf(stderr, "zinc bench adam: not built yet\n");
	return 1;
}
