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
	const char *const *final_names =
		p->save_final && !is_file_path(p->save_final) ? hf_names : NULL;
	struct zn_io io[MAX_PATHS];
	int n = 0;

	io[n++] = (struct zn_io){ .path = p->data, .what = "--data" };
	io[n++] = (struct zn_io){ .path = p->val_data, .what = "--val-data" };
	io[n++] = (struct zn_io){ .path = p->model_config, .what = "--model-config" };
	/* a model (or adapter) saved over the one the run started from: updated in place,
	 * as transformers' and PEFT's save_pretrained allow; it was read whole at start */
	io[n++] = (struct zn_io){ .path = p->init_from, .what = "--init-from", .names = hf_names,
				  .kind = "model" };
	io[n++] = (struct zn_io){ .path = p->init_adapter, .what = "--init-adapter",
				  .names = adapter_names, .kind = "adapter" };
	/* a --resume of the save directory is read and written by design */
	io[n++] = (struct zn_io){ .path = p->resume, .what = "--resume", .names = ckpt_names,
				  .shared = true };
	zn_cli_config_inputs(p->argc, p->argv, io, &n, MAX_PATHS - 6);
	io[n++] = (struct zn_io){ .path = p->save_final, .what = "--save-final", .out = true,
				  .names = final_names, .kind = "model" };
	io[n++] = (struct zn_io){ .path = p->save_adapter, .what = "--save-adapter", .out = true,
				  .names = adapter_names, .kind = "adapter" };
	io[n++] = (struct zn_io){ .path = p->trace, .what = "--trace", .out = true };
	io[n++] = (struct zn_io){ .path = p->save_dir, .what = "--save-dir", .out = true,
				  .names = p->save_hf ? save_dir_hf_names : ckpt_names,
				  .shared = true };
	io[n++] = (struct zn_io){ .path = p->csv_dir, .what = "csv_monitor.output_path",
				  .out = true, .names = csv_names };
	return zn_io_check(io, n);
}
