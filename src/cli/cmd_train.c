/* zinc train: config from --config JSON and flags; --print-config prints the effective
 * config. Training itself is wired in by the engine (src/sched). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/log.h"
#include "zinc.h"

static int world_size_from_env(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
					    "WORLD_SIZE", NULL };

	for (int i = 0; vars[i]; i++) {
		const char *v = getenv(vars[i]);

		if (v && atoi(v) > 0)
			return atoi(v);
	}
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: zinc train [--config ds.json] [flags] [--print-config]\n\n");
	zn_config_print_flags_help(f);
}

int zn_cmd_train(int argc, char **argv)
{
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	bool print_config = false;
	struct zn_config cfg;
	int n = 0, rc;

	if (!rest)
		return 1;
	rc = zn_config_from_args(&cfg, argc - 1, argv + 1, rest, &n);
	if (rc) {
		free(rest);
		return ZN_EXIT_USAGE;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(rest[i], "--print-config")) {
			print_config = true;
		} else if (!strcmp(rest[i], "-h") || !strcmp(rest[i], "--help")) {
			usage(stdout);
			free(rest);
			return 0;
		} else {
			zn_config_report_unknown_flag(rest[i]);
			free(rest);
			return ZN_EXIT_USAGE;
		}
	}
	free(rest);
	if (zn_config_validate(&cfg, world_size_from_env()))
		return ZN_EXIT_USAGE;
	if (print_config) {
		char *json = zn_config_to_json(&cfg);

		if (!json)
			return 1;
		printf("%s\n", json);
		free(json);
		return 0;
	}
	zn_error("zinc train: the training engine is not built yet");
	return 1;
}
