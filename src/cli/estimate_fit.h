/* zinc estimate --fit (docs/memory.md, "zinc estimate --fit"): for every ZeRO stage and
 * offload choice, the largest model of the given shape family (the model with its layer
 * count changed) whose per-rank bytes fit the budgets, and which budget stops it. */
#ifndef ZN_CLI_ESTIMATE_FIT_H
#define ZN_CLI_ESTIMATE_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/plan.h"

#define ZN_FIT_MAX_PATHS 8
#define ZN_FIT_MAX_LAYERS 1000000
#define ZN_FIT_ROWS 16
#define ZN_FIT_DEFAULT_DEVICE (1ull << 30) /* zinc train's host-device default */

struct zn_fit_opts {
	/* the family: zinc train's model flags (model) or a GPT shape */
	bool model;
	int margc;
	char **margv;
	int hidden, vocab, seq;
	/* as zinc estimate */
	int ranks, ranks_per_node, prefetch_depth, buffer_count;
	bool fp32, json;
	enum zn_optim_states states;
	/* budgets: 0 = from the machine (device: ZN_FIT_DEFAULT_DEVICE; host: MemTotal; nvme:
	 * the free space of the nvme_path file systems, unlimited without a path) */
	uint64_t device_mem, host_mem, nvme_mem;
	const char *nvme_path[ZN_FIT_MAX_PATHS];
	int nvme_path_count;
};

struct zn_fit_budgets {
	uint64_t device; /* per rank */
	uint64_t host;   /* per node */
	uint64_t nvme;   /* per node; 0 with nvme_unlimited */
	bool nvme_unlimited;
};

struct zn_fit_row {
	int stage;
	enum zn_offload_device opt, prm;
	int layers;           /* the most layers that fit (0: not even one) */
	uint64_t params;      /* of that member */
	struct zn_estimate e; /* at that size */
	const char *limit;    /* what one more layer breaks: device, host, nvme, model, layer cap */
};

/* The budgets from the options and the machine. Returns 0 or ZN_EUSAGE (logged). */
int zn_fit_budgets(const struct zn_fit_opts *f, struct zn_fit_budgets *out);

/* The ZN_FIT_ROWS rows (stage 0; stages 1-2 x optimizer none/cpu/nvme; stage 3 x optimizer
 * x parameters). Returns 0, or ZN_EUSAGE when the family cannot be sized (logged). */
int zn_fit_rows(const struct zn_fit_opts *f, const struct zn_fit_budgets *b,
		struct zn_fit_row rows[ZN_FIT_ROWS]);

/* Budgets, rows, and the table (or --json) on stdout. Returns 0 or ZN_EUSAGE (logged). */
int zn_estimate_fit(const struct zn_fit_opts *f);

/* Bytes free to an unprivileged writer on the file systems of paths, each file system
 * counted once (two paths on one device share its space). -errno (logged, naming the
 * path) when a path cannot be read. */
int zn_fit_nvme_free(const char *const *paths, int n, uint64_t *out);

#endif
