/* zinc train's files by identity (core/fsio.h, zn_io_check): before any work, every
 * output (--save-final, --save-adapter, --trace, --save-dir and its hf-N, the csv
 * monitor's directory) is compared with every input (--data, --val-data, --config,
 * --model-config, --init-from, --init-adapter, --resume) and with the other outputs.
 * Internal to src/cli. */
#ifndef ZN_CLI_TRAIN_PATHS_H
#define ZN_CLI_TRAIN_PATHS_H

#include <stdbool.h>

struct zn_train_paths {
	const char *data, *val_data, *model_config, *init_from, *init_adapter, *resume;
	const char *save_final, *save_adapter, *trace, *save_dir, *csv_dir;
	bool save_hf;     /* --save-hf-steps: DIR/hf-N are written */
	int argc;         /* the command line, for its --config files */
	char **argv;
};

/* 0, or ZN_EUSAGE after the line naming the two flags. */
int zn_train_paths_check(const struct zn_train_paths *p);

#endif
