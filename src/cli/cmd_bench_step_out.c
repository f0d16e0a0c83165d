/* zinc bench step's rows: the bound of each (docs/bench-step.md, "Formulas"), and the
 * table, JSON, CSV and gnuplot outputs. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cmd_bench_step.h"
#include "core/fault.h"
#include "core/fsio.h"
#include "core/log.h"
#include "zinc.h"

int zn_bs_parse_bw(const char *list, struct zn_bs_row *rows, int *n)
{
	const char *p = list;

	*n = 0;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		struct zn_bs_row *r = &rows[*n];
		char item[24];
		uint64_t v = 0;

		if (*n == ZN_BS_MAX_CAPS) {
			zn_error("--bw '%s': at most %d caps", list, ZN_BS_MAX_CAPS);
			return ZN_EUSAGE;
		}
		if (!len || len >= sizeof(item)) {
			zn_error("--bw '%s': %s; give caps such as 250M,500M,1G,max", list,
				 len ? "a cap is too long" : "an empty cap");
			return ZN_EUSAGE;
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if (strcmp(item, "max") && (zn_parse_size(item, &v) || !v || v < 4096)) {
			zn_error("--bw '%s': '%s' is not a bandwidth: give bytes per second per "
				 "direction of at least 4K (250M, 1G, 1.5G) or max", list, item);
			return ZN_EUSAGE;
		}
		for (int i = 0; i < *n; i++)
			if (rows[i].cap_bps == v) {
				zn_error("--bw '%s': '%s' is given twice", list, item);
				return ZN_EUSAGE;
			}
		memset(r, 0, sizeof(*r));
		snprintf(r->cap, sizeof(r->cap), "%s", item);
		r->cap_bps = v;
		(*n)++;
		if (!end)
			return 0;
		p = end + 1;
	}
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

void zn_bs_finish_rows(const struct zn_bs_env *env, struct zn_bs_row *rows, int n)
{
	for (int i = 0; i < n; i++) {
		struct zn_bs_row *r = &rows[i];
		double big = (double)(r->read_bytes > r->write_bytes ? r->read_bytes : r->write_bytes);
		double other;

		if (r->cap_bps) {
			r->nvme_ms = max2(big / (double)r->cap_bps * 1e3 - ZN_BS_BURST_MS, 0.0);
			r->x_bps = (double)r->cap_bps;
		} else {
			r->nvme_ms = env->mixed_ms;
			r->x_bps = env->mixed_ms > 0 ? big / (env->mixed_ms / 1e3) : 0.0;
		}
		r->copy_ms = max2((double)r->h2d_bytes / env->h2d_bps,
				  (double)r->d2h_bytes / env->d2h_bps) * 1e3;
		r->adamw_ms = env->adamw_ms;
		/* host device: compute and CPU AdamW share the cores, so they count as one: the
		 * baseline step, measured with both running */
		r->compute_ms = env->host_device ? r->base_step_ms : r->base_compute_ms;
		other = env->host_device ? r->compute_ms : max2(r->compute_ms, r->adamw_ms);
		r->bound_ms = max2(max2(r->nvme_ms, r->copy_ms), other);
		r->bound_by = r->bound_ms == r->nvme_ms ? "nvme" : r->bound_ms == r->copy_ms ? "copy" :
			      env->host_device ? "compute+adamw" :
			      r->bound_ms == r->compute_ms ? "compute" : "adamw";
		r->efficiency = r->step_ms > 0 ? r->bound_ms / r->step_ms : 0.0;
	}
}

/* The bandwidth per direction below which the NVMe term is the bound: where
 * max(read, write) / bw - burst equals the largest other term. */
static double knee_bps(const struct zn_bs_row *r)
{
	double other = max2(r->copy_ms, r->compute_ms), big;

	if (r->bound_by && strcmp(r->bound_by, "compute+adamw"))
		other = max2(other, r->adamw_ms);
	big = (double)(r->read_bytes > r->write_bytes ? r->read_bytes : r->write_bytes);
	return big / ((other + ZN_BS_BURST_MS) / 1e3);
}

void zn_bs_print_table(FILE *f, const struct zn_bs_env *env, const struct zn_bs_row *rows,
		       int n)
{
	fprintf(f, "# zinc bench step: %s; %s\n", env->model, env->setting);
	fprintf(f, "# schedule: %s; the plan reads %.2f MB per step from NVMe\n", env->schedule,
		(double)env->plan_read_bytes / 1e6);
	zn_bench_preamble(f, "step");
	fprintf(f, "# device %s; %d warm-up steps, %d timed steps per cap (median; spread = "
		"max - min)\n", env->device, env->warmup, env->steps);
	fprintf(f, "# pinned copy h2d %.2f GB/s, d2h %.2f GB/s | cpu adamw alone %.2f ms | "
		"compute-only (state in pinned memory) step %.2f ms, fwd+bwd %.2f ms (median "
		"of %d rounds between the caps; rounds %.2f-%.2f ms; each cap's comp_ms: the "
		"rounds just before and after it)\n",
		env->h2d_bps / 1e9, env->d2h_bps / 1e9, env->adamw_ms, env->base_step_ms,
		env->base_compute_ms, env->base_rounds, env->base_round_min_ms,
		env->base_round_max_ms);
	if (env->mixed_ms > 0)
		fprintf(f, "# nvme uncapped, the step's reads (%.1f MB) and writes (%.1f MB) at "
			"once: %.2f ms (%.2f GB/s together)\n", (double)env->mix_read_bytes / 1e6,
			(double)env->mix_write_bytes / 1e6, env->mixed_ms, env->mixed_bps / 1e9);
	fprintf(f, "# bound = max(nvme, copy, %s); efficiency = bound / step\n#\n",
		env->host_device ? "compute+adamw (host device: one term)" : "compute, adamw");
	fprintf(f, "#%7s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %-13s %5s\n",
		"cap", "MB/s", "step_ms", "spread", "fwd_ms", "bwd_ms", "opt_ms", "wait_ms",
		"read_MB", "write_MB", "nvme_ms", "copy_ms", "adamw_ms", "comp_ms", "bound_ms",
		"bound_by", "eff");
	for (int i = 0; i < n; i++) {
		const struct zn_bs_row *r = &rows[i];

		fprintf(f, " %7s %9.0f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f "
			"%8.2f %8.2f %9.2f %9.2f %-13s %5.2f\n", r->cap, r->x_bps / 1e6, r->step_ms,
			r->step_max_ms - r->step_min_ms, r->fwd_ms, r->bwd_ms, r->opt_ms, r->wait_ms,
			(double)r->read_bytes / 1e6, (double)r->write_bytes / 1e6, r->nvme_ms,
			r->copy_ms, r->adamw_ms, r->compute_ms, r->bound_ms, r->bound_by,
			r->efficiency);
	}
	if (n)
		fprintf(f, "# knee: below %.0f MB/s per direction the step is NVMe bound\n",
			knee_bps(&rows[0]) / 1e6);
	fprintf(f, "# load average %s\n", env->load);
}

int zn_bs_print_json(FILE *f, const struct zn_bs_env *env, const struct zn_bs_row *rows,
		     int n)
{
	cJSON *root = cJSON_CreateObject(), *arr, *m;
	char *s = NULL;

	m = root ? cJSON_AddObjectToObject(root, "machine") : NULL;
	if (!m)
		goto fail;
	cJSON_AddStringToObject(m, "device", env->device);
	cJSON_AddBoolToObject(m, "host_device", env->host_device);
	cJSON_AddNumberToObject(m, "h2d_bytes_per_s", env->h2d_bps);
	cJSON_AddNumberToObject(m, "d2h_bytes_per_s", env->d2h_bps);
	cJSON_AddNumberToObject(m, "adamw_ms", env->adamw_ms);
	cJSON_AddNumberToObject(m, "baseline_step_ms", env->base_step_ms);
	cJSON_AddNumberToObject(m, "baseline_compute_ms", env->base_compute_ms);
	cJSON_AddNumberToObject(m, "baseline_rounds", env->base_rounds);
	cJSON_AddNumberToObject(m, "baseline_round_min_ms", env->base_round_min_ms);
	cJSON_AddNumberToObject(m, "baseline_round_max_ms", env->base_round_max_ms);
	cJSON_AddNumberToObject(m, "nvme_mixed_ms", env->mixed_ms);
	cJSON_AddNumberToObject(m, "nvme_mixed_bytes_per_s", env->mixed_bps);
	cJSON_AddStringToObject(m, "load_average", env->load);
	cJSON_AddStringToObject(root, "model", env->model);
	cJSON_AddStringToObject(root, "setting", env->setting);
	cJSON_AddStringToObject(root, "schedule", env->schedule);
	cJSON_AddNumberToObject(root, "plan_read_bytes", (double)env->plan_read_bytes);
	cJSON_AddNumberToObject(root, "warmup_steps", env->warmup);
	cJSON_AddNumberToObject(root, "timed_steps", env->steps);
	arr = cJSON_AddArrayToObject(root, "rows");
	if (!arr)
		goto fail;
	for (int i = 0; i < n; i++) {
		const struct zn_bs_row *r = &rows[i];
		cJSON *o = cJSON_CreateObject();

		if (!o)
			goto fail;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "cap", r->cap);
		cJSON_AddNumberToObject(o, "cap_bytes_per_s", (double)r->cap_bps);
		cJSON_AddNumberToObject(o, "bandwidth_bytes_per_s", r->x_bps);
		cJSON_AddNumberToObject(o, "step_ms", r->step_ms);
		cJSON_AddNumberToObject(o, "step_min_ms", r->step_min_ms);
		cJSON_AddNumberToObject(o, "step_max_ms", r->step_max_ms);
		cJSON_AddNumberToObject(o, "spread_ms", r->step_max_ms - r->step_min_ms);
		cJSON_AddNumberToObject(o, "fwd_ms", r->fwd_ms);
		cJSON_AddNumberToObject(o, "bwd_ms", r->bwd_ms);
		cJSON_AddNumberToObject(o, "opt_ms", r->opt_ms);
		cJSON_AddNumberToObject(o, "wait_ms", r->wait_ms);
		cJSON_AddNumberToObject(o, "nvme_read_bytes", (double)r->read_bytes);
		cJSON_AddNumberToObject(o, "nvme_write_bytes", (double)r->write_bytes);
		cJSON_AddNumberToObject(o, "copy_h2d_bytes", (double)r->h2d_bytes);
		cJSON_AddNumberToObject(o, "copy_d2h_bytes", (double)r->d2h_bytes);
		cJSON_AddNumberToObject(o, "nvme_ms", r->nvme_ms);
		cJSON_AddNumberToObject(o, "copy_ms", r->copy_ms);
		cJSON_AddNumberToObject(o, "adamw_ms", r->adamw_ms);
		cJSON_AddNumberToObject(o, "baseline_step_ms", r->base_step_ms);
		cJSON_AddNumberToObject(o, "baseline_compute_ms", r->base_compute_ms);
		cJSON_AddNumberToObject(o, "compute_ms", r->compute_ms);
		cJSON_AddNumberToObject(o, "bound_ms", r->bound_ms);
		cJSON_AddStringToObject(o, "bound_by", r->bound_by);
		cJSON_AddNumberToObject(o, "efficiency", r->efficiency);
	}
	s = cJSON_Print(root);
	if (!s)
		goto fail;
	fprintf(f, "%s\n", s);
	free(s);
	cJSON_Delete(root);
	return 0;
fail:
	cJSON_Delete(root);
	zn_error("zinc bench step: out of memory for the JSON");
	return -ENOMEM;
}

static char *csv_text(const struct zn_bs_row *rows, int n, size_t *len)
{
	size_t cap = 512 + (size_t)n * 512;
	char *b = malloc(cap);
	size_t k;

	if (!b)
		return NULL;
	k = (size_t)snprintf(b, cap, "cap,bandwidth_bytes_per_s,step_ms,step_min_ms,step_max_ms,"
			     "fwd_ms,bwd_ms,opt_ms,wait_ms,nvme_read_bytes,nvme_write_bytes,"
			     "copy_h2d_bytes,copy_d2h_bytes,nvme_ms,copy_ms,adamw_ms,compute_ms,"
			     "bound_ms,bound_by,efficiency\n");
	for (int i = 0; i < n && k < cap; i++) {
		const struct zn_bs_row *r = &rows[i];

		k += (size_t)snprintf(b + k, cap - k, "%s,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
				      "%llu,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%.4f\n", r->cap,
				      r->x_bps, r->step_ms, r->step_min_ms, r->step_max_ms, r->fwd_ms,
				      r->bwd_ms, r->opt_ms, r->wait_ms,
				      (unsigned long long)r->read_bytes,
				      (unsigned long long)r->write_bytes,
				      (unsigned long long)r->h2d_bytes,
				      (unsigned long long)r->d2h_bytes, r->nvme_ms, r->copy_ms,
				      r->adamw_ms, r->compute_ms, r->bound_ms, r->bound_by,
				      r->efficiency);
	}
	*len = k < cap ? k : cap - 1;
	return b;
}

int zn_bs_write_csv(const char *path, const struct zn_bs_row *rows, int n)
{
	size_t len;
	char *b = csv_text(rows, n, &len);
	int rc = b ? zn_write_file_atomic(path, "--csv", b, len) : -ENOMEM;

	free(b);
	return rc;
}

static bool have_gnuplot(void)
{
	const char *path = getenv("PATH");
	char buf[4096];

	while (path && *path) {
		size_t len = strcspn(path, ":");

		if (len && len < sizeof(buf) - 10) {
			memcpy(buf, path, len);
			strcpy(buf + len, "/gnuplot");
			if (!access(buf, X_OK))
				return true;
		}
		path += len + (path[len] == ':');
	}
	return false;
}

const char *zn_bs_plot_fallback(const char *path, char *buf, size_t size)
{
	size_t len = strlen(path);

	if (have_gnuplot() && !zn_fault_value(ZN_FAULT_NO_GNUPLOT))
		return NULL;
	if (len > 4 && !strcmp(path + len - 4, ".png"))
		len -= 4;
	snprintf(buf, size, "%.*s.csv", (int)len, path);
	return buf;
}

int zn_bs_plot(const char *path, const struct zn_bs_env *env, const struct zn_bs_row *rows,
	       int n)
{
	char tmp[ZN_PATH_MAX + 300], csv[ZN_PATH_MAX + 8];
	const char *slash = strrchr(path, '/');
	struct zn_atomic_file af;
	FILE *g;
	int rc;

	if (zn_bs_plot_fallback(path, csv, sizeof(csv))) {
		fprintf(stderr, "zinc bench step: gnuplot not found (apt-get install gnuplot-nox): "
			"no plot; the rows are in %s\n", csv);
		return zn_bs_write_csv(csv, rows, n);
	}
	/* the name goes into gnuplot's script inside '...' */
	if (strpbrk(path, "'\n")) {
		zn_error("--plot %s: a name with ' or a newline cannot be given to gnuplot: choose "
			 "another", path);
		return -EINVAL;
	}
	/* gnuplot writes into our exclusive temporary (never a planted name or link) */
	rc = zn_atomic_file_begin(&af, path, "--plot");
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%.*s%s%s", slash ? (int)(slash - path) : 0, path,
		 slash ? "/" : "", af.tmp);
	g = popen("gnuplot", "w");
	if (!g) {
		zn_atomic_file_abort(&af);
		zn_error("--plot %s: cannot start gnuplot", path);
		return -EIO;
	}
	fprintf(g, "set terminal pngcairo size 960,600 font ',10'\nset output '%s'\n", tmp);
	fprintf(g, "set title \"zinc bench step: %s\\n%s; device %s\" noenhanced\n", env->model,
		env->setting, env->device);
	fprintf(g, "set xlabel 'NVMe bandwidth per direction (MB/s; max: measured)'\n"
		"set ylabel 'time per step (ms)'\nset logscale x\nset grid\nset key top right\n"
		"set yrange [0:*]\n");
	if (n) {
		double k = knee_bps(&rows[0]) / 1e6;

		fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 3 lc 'gray40'\n"
			"set label 'knee %.0f MB/s' at %g, graph 0.5 left offset 0.5,0\n", k, k,
			k, k);
	}
	fprintf(g, "$d << EOD\n");
	/* by bandwidth: max sits where its measured rate puts it */
	for (double last = 0.0;;) {
		const struct zn_bs_row *r = NULL;

		for (int i = 0; i < n; i++)
			if (rows[i].x_bps > last && (!r || rows[i].x_bps < r->x_bps))
				r = &rows[i];
		if (!r)
			break;
		fprintf(g, "%g %g %g %g %g \"%s\"\n", r->x_bps / 1e6, r->step_ms, r->step_min_ms,
			r->step_max_ms, r->bound_ms, r->cap);
		last = r->x_bps;
	}
	fprintf(g, "EOD\n");
	fprintf(g, "plot $d using 1:2:3:4 with yerrorlines lw 2 title 'step (median, min-max)', "
		"$d using 1:5 with linespoints lw 2 dt 2 title 'bound', "
		"%g with lines lc 'dark-green' title 'compute-only (state in pinned memory)', "
		"$d using 1:2:6 with labels offset 0,1 notitle\n",
		env->host_device ? env->base_step_ms : env->base_compute_ms);
	rc = pclose(g);
	if (rc) {
		zn_atomic_file_abort(&af);
		zn_error("--plot %s: gnuplot failed (status %d)", path, rc);
		return -EIO;
	}
	return zn_atomic_file_commit(&af);
}
