/* csv_monitor (monitor.h). */
#include "cli/monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsio.h"
#include "core/log.h"

static const char *const figure_names[ZN_MONITOR_FIGURES] = {
	"train_loss", "lr", "loss_scale", "grad_norm", "elapsed_time_ms_step",
	"elapsed_time_ms_forward", "elapsed_time_ms_backward", "elapsed_time_ms_optimizer",
	"elapsed_time_ms_wait", "tokens_per_second",
};

/* mkdir -p for a directory path (no symlink checks: the files themselves are checked). */
static int make_dirs(const char *dir)
{
	char buf[ZN_PATH_MAX + 300];

	snprintf(buf, sizeof(buf), "%s", dir);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

static int open_figure(const char *dir, const char *name, int *out)
{
	char path[ZN_PATH_MAX + 400], head[128];
	struct stat st;
	int fd, n;

	snprintf(path, sizeof(path), "%s/Train_Samples_%s.csv", dir, name);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		zn_error("csv_monitor: cannot write %s (%s): give another csv_monitor.output_path",
			 path, fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	if (st.st_size == 0) {
		n = snprintf(head, sizeof(head), "step,%s\n", name);
		if (write(fd, head, (size_t)n) != n) {
			zn_error("csv_monitor: cannot write %s: %s", path, strerror(errno));
			close(fd);
			return -EIO;
		}
	}
	*out = fd;
	return 0;
}

int zn_monitor_open(struct zn_monitor *m, const struct zn_config *cfg)
{
	const struct zn_monitor_config *c = &cfg->monitor;
	char dir[ZN_PATH_MAX + 300];
	int rc = 0;

	for (int i = 0; i < ZN_MONITOR_FIGURES; i++)
		m->fd[i] = -1;
	m->on = false;
	if (!c->csv_enabled)
		return 0;
	snprintf(dir, sizeof(dir), "%s/%s", c->csv_output_path[0] ? c->csv_output_path :
				       "csv_monitor", c->csv_job_name);
	rc = make_dirs(dir);
	if (rc) {
		zn_error("csv_monitor: cannot create %s: %s", dir, strerror(-rc));
		return rc;
	}
	/* the files' own directory is never a link (core/fsio.h, outputs) */
	rc = zn_output_dir_make(dir, "csv_monitor.output_path");
	if (rc)
		return rc;
	for (int i = 0; !rc && i < ZN_MONITOR_FIGURES; i++)
		rc = open_figure(dir, figure_names[i], &m->fd[i]);
	if (rc) {
		zn_monitor_close(m);
		return rc;
	}
	m->on = true;
	return 0;
}

int zn_monitor_step(struct zn_monitor *m, const struct zn_step_stats *st, int64_t samples)
{
	double v[ZN_MONITOR_FIGURES] = {
		st->loss, st->lr, (double)st->loss_scale, st->grad_norm, st->step_ms, st->fwd_ms, st->bwd_ms,
		st->opt_ms, st->wait_ms,
		st->step_ms > 0 ? (double)st->tokens / (st->step_ms / 1000.0) : 0.0,
	};

	if (!m->on)
		return 0;
	for (int i = 0; i < ZN_MONITOR_FIGURES; i++) {
		char row[96];
		int n = snprintf(row, sizeof(row), "%" PRId64 ",%.9g\n", samples, v[i]);

		if (write(m->fd[i], row, (size_t)n) != n) {
			zn_error("csv_monitor: cannot write %s: %s", figure_names[i], strerror(errno));
			return -EIO;
		}
	}
	return 0;
}

void zn_monitor_close(struct zn_monitor *m)
{
	for (int i = 0; i < ZN_MONITOR_FIGURES; i++) {
		if (m->fd[i] >= 0)
			close(m->fd[i]);
		m->fd[i] = -1;
	}
	m->on = false;
}
