/* A checkpoint's metadata, zinc-checkpoint.txt, written: "key=value" lines (the step and
 * counters, the data position, the seed, the rank layout, every layer's tensors, every
 * file's size and CRC-32, the data file's identity) and a last line "crc32=XXXXXXXX" over
 * all the bytes before it. ckpt_meta_read.c reads it back. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "sched/engine_impl.h"

struct text {
	char *s;
	size_t len, cap;
	bool oom;
};

static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (t->len + (size_t)n + 1 > t->cap) {
		size_t cap = (t->cap + (size_t)n + 1) * 2;
		char *p = realloc(t->s, cap);

		if (!p) {
			t->oom = true;
			return;
		}
		t->s = p;
		t->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	t->len += (size_t)n;
}

/* data.path (a line of its own: control characters shown as '?'), data.size, data.crc32 */
static void add_data(struct text *t, const char *path, const struct zn_ckpt_data_id *id)
{
	add(t, "data.path=");
	for (const char *p = path; *p; p++)
		add(t, "%c", (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p);
	add(t, "\ndata.size=%" PRIu64 "\ndata.crc32=%08" PRIx32 "\n", id->size, id->crc);
}

static const char *dtype_name(enum zn_dtype d)
{
	return d == ZN_DTYPE_BF16 ? "bf16" : d == ZN_DTYPE_F16 ? "fp16" : "fp32";
}

char *zn_ckpt_meta_text(struct zn_engine *e, const struct zn_ckpt_save_args *a,
			const uint64_t *file_size, const uint32_t *file_crc,
			uint64_t config_size, uint32_t config_crc)
{
	struct text t = { 0 };
	int64_t step, skipped;
	struct zn_lossscale ls;

	zn_ckpt_state_counters(e, &step, &skipped, &ls);
	add(&t, "zinc_checkpoint=1\nstep=%" PRId64 "\nskipped=%" PRId64 "\n", step, skipped);
	add(&t, "data_step=%" PRId64 "\nglobal_micro=%" PRId64 "\nseq=%d\n", a->data_step,
	    a->global_micro, a->seq);
	add(&t, "world=%d\nstage=%d\ndtype=%s\nseed=%" PRIu64 "\nfamily=%s\n", e->rt.world,
	    e->cfg.zero.stage, dtype_name(e->pdt), e->cfg.runtime.seed, e->model.ops->family);
	add(&t, "optimizer_states=%s\n", zn_optim_states_name(e->plan.states));
	add(&t, "ls.scale=%a\nls.cur_hysteresis=%d\nls.iter=%" PRId64
	    "\nls.last_overflow_iter=%" PRId64 "\n", ls.scale, ls.cur_hysteresis, ls.iter,
	    ls.last_overflow_iter);
	add(&t, "layers=%d\n", e->n);
	for (int l = 0; l < e->n; l++) {
		const struct zn_layer_desc *L = &e->ld[l];

		add(&t, "layer.%d=%" PRIu64 "\n", l, e->numel[l]);
		for (int k = 0; k < L->tensor_count; k++)
			add(&t, "tensor.%d.%d=%s %" PRId64 "x%" PRId64 "\n", l, k, L->tensors[k].name,
			    L->tensors[k].shape[0], L->tensors[k].ndim > 1 ? L->tensors[k].shape[1] : 1);
	}
	if (a->run_meta)
		add(&t, "%s", a->run_meta);
	for (int r = 0; r < e->rt.world; r++)
		add(&t, "rank.%d=%" PRIu64 " %08" PRIx32 "\n", r, file_size[r], file_crc[r]);
	add(&t, "config=%" PRIu64 " %08" PRIx32 "\n", config_size, config_crc);
	if (a->data_path && a->data_id)
		add_data(&t, a->data_path, a->data_id);
	if (!t.oom)
		add(&t, "crc32=%08" PRIx32 "\n", zn_ckpt_crc(zn_ckpt_crc(0, NULL, 0), t.s, t.len));
	if (t.oom) {
		free(t.s);
		return NULL;
	}
	return t.s;
}

void zn_ckpt_meta_free(struct zn_ckpt_meta *m)
{
	free(m->numel);
	free(m->file_size);
	free(m->file_crc);
	free(m->tensors);
	free(m->order);
	free(m->text);
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

