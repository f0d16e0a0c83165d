/* zinc info: placeholder until its issue lands. */
#include <stdio.h>

#include "cli/cli.h"

int zn_cmd_info(int argc, char **argv)
{
	fprintf(stderr, "zinc info: not built yet\n");
	return 1;
}
