/* zinc estimate --fit: the largest model of a shape family per stage and offload choice
 * (estimate_fit.h). A family member is the model with its layer count L changed: its
 * parameters are base + L x per_layer and its largest layer does not change (the
 * embedding or one block), read from the model at 1 and 2 layers and checked against the
 * model as given. Sizes come from zn_plan_estimate (the ZeRO paper's accounting, as the
 * estimate table), with the gradient shards of an nvme optimizer counted as the pinned
 * ring (one micro-batch, no clipping: docs/memory.md). The bytes grow with L, so a binary
 * search finds the largest L that fits every budget. */
#include "cli/estimate_fit.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "cli/cli.h"
#include "train/train_model.h"
#include "core/args.h"
#include "core/log.h"
#include "model/family.h"

/* no member above 2^58 parameters: 16 bytes each stays far from 2^64 */
#define FIT_MAX_PARAMS (1ull << 58)

int zn_fit_nvme_free(const char *const *paths, int n, uint64_t *out)
{
	dev_t seen[ZN_FIT_MAX_PATHS];
	int ns = 0;

	*out = 0;
	for (int i = 0; i < n && i < ZN_FIT_MAX_PATHS; i++) {
		struct statvfs s;
		struct stat st;
		bool dup = false;

		if (stat(paths[i], &st) || statvfs(paths[i], &s)) {
			int err = errno;

			zn_error("--nvme-path %s: %s; give an existing directory", paths[i],
				 strerror(err));
			return -err;
		}
		if (!S_ISDIR(st.st_mode)) {
			zn_error("--nvme-path %s: not a directory; give the directory the swap "
				 "files would go in", paths[i]);
			return -ENOTDIR;
		}
		for (int k = 0; k < ns; k++)
			dup = dup || seen[k] == st.st_dev;
		if (dup)
			continue;
		seen[ns++] = st.st_dev;
		*out += (uint64_t)s.f_bavail * s.f_frsize;
	}
	return 0;
}

static uint64_t mem_total(void)
{
	unsigned long long kb = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb * 1024;
}

int zn_fit_budgets(const struct zn_fit_opts *f, struct zn_fit_budgets *out)
{
	*out = (struct zn_fit_budgets){ .device = f->device_mem, .host = f->host_mem,
					.nvme = f->nvme_mem };
	if (!out->device)
		out->device = ZN_FIT_DEFAULT_DEVICE;
	if (!out->host)
		out->host = mem_total();
	if (!out->host) {
		zn_error("--fit: cannot read MemTotal from /proc/meminfo; give --host-mem SIZE");
		return ZN_EUSAGE;
	}
	if (f->nvme_mem && f->nvme_path_count) {
		zn_error("--fit: give --nvme-mem SIZE or --nvme-path DIR (its free space), not both");
		return ZN_EUSAGE;
	}
	if (f->nvme_path_count && zn_fit_nvme_free(f->nvme_path, f->nvme_path_count, &out->nvme))
		return ZN_EUSAGE;
	out->nvme_unlimited = !f->nvme_mem && !f->nvme_path_count;
	return 0;
}

/* The model as given (layers 0) or with --layers `layers`: its parameters and largest
 * layer. */
static int model_size(const struct zn_fit_opts *f, int layers, uint64_t *params,
		      uint64_t *largest)
{
	char *argv[72], n[16], line[256];
	int argc = 0;

	if (!layers)
		return zn_train_model_size(f->margc, f->margv, params, largest, line, sizeof(line));
	for (int i = 0; i + 1 < f->margc && argc < 68; i += 2)
		if (strcmp(f->margv[i], "--layers")) {
			argv[argc++] = f->margv[i];
			argv[argc++] = f->margv[i + 1];
		}
	snprintf(n, sizeof(n), "%d", layers);
	argv[argc++] = "--layers";
	argv[argc++] = n;
	argv[argc] = NULL;
	return zn_train_model_size(argc, argv, params, largest, line, sizeof(line));
}

/* The family: params(L) = base + L x per_layer, largest layer fixed. */
struct family {
	uint64_t base, per_layer, largest;
	int max_layers; /* ZN_FIT_MAX_LAYERS, or fewer where params would pass FIT_MAX_PARAMS */
};

static int family_of(const struct zn_fit_opts *f, struct family *fam)
{
	uint64_t p1, p2, l1, l2, pg, lg;

	if (!f->model) {
		/* the default family's shape (model/family.h shape_params) */
		const struct zn_family *d = zn_family_at(0);

		if (!d->shape_params) {
			zn_error("zinc estimate --fit: the default family %s cannot be shaped by "
				 "--hidden, --vocab and --seq alone: give --model", d->name);
			return ZN_EUSAGE;
		}
		d->shape_params(1, f->hidden, f->vocab, f->seq, &p1, &l1);
		d->shape_params(2, f->hidden, f->vocab, f->seq, &p2, &l2);
		pg = p2, lg = l2;
	} else if (model_size(f, 1, &p1, &l1) || model_size(f, 2, &p2, &l2) ||
		   model_size(f, 0, &pg, &lg)) {
		return ZN_EUSAGE; /* logged by the model */
	}
	fam->per_layer = p2 - p1;
	fam->base = p1 - fam->per_layer;
	fam->largest = l1 > l2 ? l1 : l2;
	if (p2 <= p1 || p1 < fam->per_layer || (pg - fam->base) % fam->per_layer ||
	    lg > fam->largest) {
		zn_error("--fit: this model's parameters do not grow by the same count per "
			 "layer (%llu at 1 layer, %llu at 2, %llu as given); --fit needs a "
			 "model whose blocks are all alike", (unsigned long long)p1,
			 (unsigned long long)p2, (unsigned long long)pg);
		return ZN_EUSAGE;
	}
	fam->max_layers = ZN_FIT_MAX_LAYERS;
	if (fam->base >= FIT_MAX_PARAMS)
		fam->max_layers = 0;
	else if ((FIT_MAX_PARAMS - fam->base) / fam->per_layer < ZN_FIT_MAX_LAYERS)
		fam->max_layers = (int)((FIT_MAX_PARAMS - fam->base) / fam->per_layer);
	return 0;
}

/* NULL when the member with `layers` layers fits; else the first budget it breaks. */
static const char *check(const struct zn_fit_opts *f, const struct zn_fit_budgets *b,
			 const struct family *fam, const struct zn_fit_row *r, int layers,
			 uint64_t *params, struct zn_estimate *e)
{
	uint64_t rpn = (uint64_t)f->ranks_per_node;
	struct zn_estimate_input in = {
		.ranks = f->ranks, .ranks_per_node = f->ranks_per_node, .stage = r->stage,
		.offload_optimizer = r->opt, .offload_param = r->prm,
		.prefetch_depth = f->prefetch_depth, .buffer_count = f->buffer_count,
		.mixed_precision = !f->fp32, .states = f->states, .grad_ring = true,
	};

	*params = fam->base + (uint64_t)layers * fam->per_layer;
	in.params = *params;
	in.largest_layer = fam->largest;
	if (layers > fam->max_layers || zn_plan_estimate(&in, e))
		return "layer cap";
	/* per node: a x rpn > B  <=>  a > floor(B / rpn), with no product to overflow */
	if (e->device_bytes > b->device)
		return "device";
	if (e->host_bytes > b->host / rpn)
		return "host";
	if (!b->nvme_unlimited && e->nvme_bytes > b->nvme / rpn)
		return "nvme";
	return NULL;
}

static void fit_row(const struct zn_fit_opts *f, const struct zn_fit_budgets *b,
		    const struct family *fam, struct zn_fit_row *r)
{
	int lo = 0, hi = fam->max_layers + 1; /* lo fits (0: trivially), hi does not */
	struct zn_estimate e;
	uint64_t p;

	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;

		if (check(f, b, fam, r, mid, &p, &e))
			hi = mid;
		else
			lo = mid;
	}
	r->layers = lo;
	r->limit = check(f, b, fam, r, lo + 1, &p, &e);
	if (lo)
		check(f, b, fam, r, lo, &r->params, &r->e);
}

int zn_fit_rows(const struct zn_fit_opts *f, const struct zn_fit_budgets *b,
		struct zn_fit_row rows[ZN_FIT_ROWS])
{
	struct family fam;
	int n = 0;

	if (family_of(f, &fam))
		return ZN_EUSAGE;
	rows[n++] = (struct zn_fit_row){ .stage = 0 };
	for (int s = 1; s <= 3; s++)
		for (int o = 0; o <= 2; o++)
			for (int p = 0; p <= (s == 3 ? 2 : 0); p++)
				rows[n++] = (struct zn_fit_row){ .stage = s, .opt = o, .prm = p };
	for (int i = 0; i < n; i++)
		fit_row(f, b, &fam, &rows[i]);
	return 0;
}

static const char *off(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

static void print_json(const struct zn_fit_budgets *b, const struct zn_fit_row *rows)
{
	cJSON *root = cJSON_CreateObject(), *jr;
	char *s;

	cJSON_AddNumberToObject(root, "device_budget_bytes", (double)b->device);
	cJSON_AddNumberToObject(root, "host_budget_bytes", (double)b->host);
	if (b->nvme_unlimited)
		cJSON_AddNullToObject(root, "nvme_budget_bytes");
	else
		cJSON_AddNumberToObject(root, "nvme_budget_bytes", (double)b->nvme);
	jr = cJSON_AddArrayToObject(root, "fit");
	for (int i = 0; i < ZN_FIT_ROWS; i++) {
		const struct zn_fit_row *r = &rows[i];
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "stage", r->stage);
		cJSON_AddStringToObject(o, "offload_optimizer", off(r->opt));
		cJSON_AddStringToObject(o, "offload_param", off(r->prm));
		cJSON_AddNumberToObject(o, "layers", r->layers);
		cJSON_AddNumberToObject(o, "params", (double)r->params);
		cJSON_AddNumberToObject(o, "device_bytes", (double)r->e.device_bytes);
		cJSON_AddNumberToObject(o, "host_bytes_per_node", (double)r->e.host_node_bytes);
		cJSON_AddNumberToObject(o, "nvme_bytes_per_rank", (double)r->e.nvme_bytes);
		cJSON_AddStringToObject(o, "limited_by", r->limit ? r->limit : "");
		cJSON_AddItemToArray(jr, o);
	}
	s = cJSON_Print(root);
	printf("%s\n", s);
	free(s);
	cJSON_Delete(root);
}

int zn_estimate_fit(const struct zn_fit_opts *f)
{
	struct zn_fit_row rows[ZN_FIT_ROWS];
	struct zn_fit_budgets b;
	char s[8][32], sbl[96];

	if (zn_fit_budgets(f, &b) || zn_fit_rows(f, &b, rows))
		return ZN_EUSAGE;
	if (f->json) {
		print_json(&b, rows);
		return 0;
	}
	printf("# zinc estimate --fit: budgets device %s per rank%s, host %s per node%s, "
	       "nvme %s%s\n", zn_arg_fmt_bytes(b.device, s[0], 32),
	       f->device_mem ? "" : " (zinc train's host-device default: give --device-mem)",
	       zn_arg_fmt_bytes(b.host, s[1], 32), f->host_mem ? "" : " (RAM)",
	       b.nvme_unlimited ? "unlimited" : zn_arg_fmt_bytes(b.nvme, s[2], 32),
	       f->nvme_mem ? "" : f->nvme_path_count ? " free on --nvme-path" :
	       " (give --nvme-path DIR or --nvme-mem SIZE)");
	printf("# the family: the model with its layer count changed; %s; gradients of an "
	       "nvme optimizer through the pinned ring (one micro-batch, no clipping); "
	       "activations not counted\n",
	       zn_plan_fmt_state_bytes(f->fp32 ? "fp32" : "bf16", f->states, sbl, sizeof(sbl)));
	printf("%5s %9s %9s %8s %10s %12s %12s %12s  %s\n", "stage", "off_optim", "off_param",
	       "layers", "params", "device", "host/node", "nvme/rank", "limited by");
	for (int i = 0; i < ZN_FIT_ROWS; i++) {
		const struct zn_fit_row *r = &rows[i];

		printf("%5d %9s %9s %8d %10s %12s %12s %12s  %s\n", r->stage, off(r->opt),
		       off(r->prm), r->layers,
		       r->layers ? zn_arg_fmt_count(r->params, s[3], 32) : "-",
		       r->layers ? zn_arg_fmt_bytes(r->e.device_bytes, s[4], 32) : "-",
		       r->layers ? zn_arg_fmt_bytes(r->e.host_node_bytes, s[5], 32) : "-",
		       r->layers ? zn_arg_fmt_bytes(r->e.nvme_bytes, s[6], 32) : "-",
		       r->limit ? r->limit : "");
	}
	return 0;
}
