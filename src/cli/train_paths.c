/* zinc train's inputs and outputs compared by identity (train_paths.h). The name lists
 * say which files inside a directory each flag reads or writes, so an output may sit
 * beside an input in one directory as long as neither touches the other's files. */
#include "cli/train_paths.h"

#include <string.h>

#include "cli/util.h"
#include "core/fsio.h"
#include "zinc.h"

#define MAX_PATHS 64

/* a Hugging Face directory: what --init-from reads and --save-final writes (or removes) */
static const char *const hf_names[] = { "config.json", "*.safetensors",
					"model.safetensors.index.json", NULL };
static const char *const adapter_names[] = { "adapter_config.json", "adapter_model.safetensors",
					     NULL };
/* a save directory or one checkpoint */
static const char *const ckpt_names[] = { "latest", "checkpoint-*", ".tmp-checkpoint-*",
					  "zinc-checkpoint.txt", "config.json", "rank-*.bin",
					  ZN_DIR_LOCK_NAME, NULL };
static const char *const save_dir_hf_names[] = { "latest", "checkpoint-*", ".tmp-checkpoint-*",
						 ZN_DIR_LOCK_NAME, "hf-*", NULL };
static const char *const csv_names[] = { "Train_Samples_*.csv", NULL };

static bool is_file_path(const char *p)
{
	size_t n = strlen(p);

	return n >= 12 && !strcmp(p + n - 12, ".safetensors");
}

int zn_train_paths_check(const struct zn_train_paths *p)
{
	struct zn_io io[MAX_PATHS];
	int n = 0;

	io[n++] = (struct zn_io){ p->data, "--data", false, NULL, false };
	io[n++] = (struct zn_io){ p->val_data, "--val-data", false, NULL, false };
	io[n++] = (struct zn_io){ p->model_config, "--model-config", false, NULL, false };
	io[n++] = (struct zn_io){ p->init_from, "--init-from", false, hf_names, false };
	io[n++] = (struct zn_io){ p->init_adapter, "--init-adapter", false, adapter_names, false };
	/* a --resume of the save directory is read and written by design */
	io[n++] = (struct zn_io){ p->resume, "--resume", false, ckpt_names, true };
	zn_cli_config_inputs(p->argc, p->argv, io, &n, MAX_PATHS - 6);
	io[n++] = (struct zn_io){ p->save_final, "--save-final", true,
				  p->save_final && !is_file_path(p->save_final) ? hf_names : NULL,
				  false };
	io[n++] = (struct zn_io){ p->save_adapter, "--save-adapter", true, adapter_names, false };
	io[n++] = (struct zn_io){ p->trace, "--trace", true, NULL, false };
	io[n++] = (struct zn_io){ p->save_dir, "--save-dir", true,
				  p->save_hf ? save_dir_hf_names : ckpt_names, true };
	io[n++] = (struct zn_io){ p->csv_dir, "csv_monitor.output_path", true, csv_names, false };
	return zn_io_check(io, n);
}
