/* csv_monitor: per-step figures as CSV files, as DeepSpeed's CsvMonitor writes them: one
 * file per figure, OUTPUT_PATH/JOB_NAME/Train_Samples_<name>.csv, a "step,<name>" header
 * and one "samples,value" row per optimizer step (the x axis is the global sample count,
 * as in DeepSpeed's Train/Samples events). zinc writes train_loss, lr, loss_scale (1: no
 * fp16 scaling), grad_norm, elapsed_time_ms_step and its split (forward, backward,
 * optimizer, wait) and tokens_per_second. Rank 0 only. Existing files are appended to, as
 * DeepSpeed does; a symlink or non-regular file there is refused. Internal to zinc (src/train). */
#ifndef ZN_TRAIN_MONITOR_H
#define ZN_TRAIN_MONITOR_H

#include "zinc.h"

#define ZN_MONITOR_FIGURES 10

struct zn_monitor {
	int fd[ZN_MONITOR_FIGURES]; /* -1 when off */
	bool on;
};

/* Opens the files when cfg->monitor.csv_enabled (else does nothing). Returns 0 or a
 * negative code, logged with the path. */
int zn_monitor_open(struct zn_monitor *m, const struct zn_config *cfg);
/* Appends one row per figure for this step; samples = the global sample count so far. */
int zn_monitor_step(struct zn_monitor *m, const struct zn_step_stats *st, int64_t samples);
void zn_monitor_close(struct zn_monitor *m);

#endif
