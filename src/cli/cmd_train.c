/* zinc train: placeholder until its issue lands. */
#include <stdio.h>

#include "cli/cli.h"

int zn_cmd_train(int argc, char **argv)
{
	fprintf(stderr, "zinc train: not built yet\n");
	return 1;
}
