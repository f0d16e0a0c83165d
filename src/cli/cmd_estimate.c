/* zinc estimate: placeholder until its issue lands. */
#include <stdio.h>

#include "cli/cli.h"

int zn_cmd_estimate(int argc, char **argv)
{
	fprintf(stderr, "zinc estimate: not built yet\n");
	return 1;
}
