/* The trainer's run (trainer.h): begin, the step and what follows it, finish, end. The
 * argv side (flags, checks before any work, the header and step lines) is the zinc
 * command's (cli/cmd_train.c); the public API over these calls is train/api.c. */
#include "train/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/trace.h"
#include "sched/ckpt.h"
#include "train/train_hf.h"

/* The engine, with the weights from --init-from, the checkpoint or the seed: a failure
 * here is zinc train's exit 2 (a usage error) or 1. */
static int make_engine(struct zn_trainer *t)
{
	struct zn_train_opts *o = t->o;
	struct zn_train_hf_loader *init = NULL;
	int rc;

	/* A resumed full fine-tune reads its weights from the checkpoint; LoRA its base from
	 * --init-from (never copied into the checkpoint) and its adapters from the checkpoint */
	bool base_read = o->init_from && (!o->ck.resume_dir || o->lora.on);

	t->exit_code = 1;
	t->model = zn_train_model_get(t->tm);
	/* the counts first, so a loader does no per-layer work for a run the engine refuses */
	rc = zn_engine_check_counts(&t->cfg, &t->model, t->eo.seq_len);
	if (rc) {
		t->exit_code = ZN_EXIT_USAGE;
		return rc;
	}
	if (base_read) {
		rc = zn_train_hf_loader_open(&init, o->init_from, t->tm);
		if (rc) {
			zn_train_hf_loader_close(init);
			return rc;
		}
	}
	/* a bitsandbytes 4-bit checkpoint: its base read as stored (docs/qlora.md) */
	if (init && zn_train_hf_is_4bit(init)) {
		if (!o->lora.on) {
			zn_error("--init-from %s is a 4-bit bitsandbytes checkpoint: its base is "
				 "frozen; train LoRA adapters on it (--lora-r R --lora-targets "
				 "LIST), or start from the 16-bit model", o->init_from);
			zn_train_hf_loader_close(init);
			t->exit_code = ZN_EXIT_USAGE;
			return -EINVAL;
		}
		rc = zn_train_hf_q4_layouts(init, t->cfg.precision.bf16 ? ZN_DTYPE_BF16 :
					    t->cfg.precision.fp16 ? ZN_DTYPE_F16 : ZN_DTYPE_F32,
					    &t->eo.frozen_q4);
		t->eo.init_frozen_q4 = zn_train_hf_load_q4;
		if (rc) {
			zn_train_hf_loader_close(init);
			t->exit_code = ZN_EXIT_USAGE;
			return rc;
		}
	}
	if (o->lora.save_quantized && t->cfg.runtime.quantize_base == ZN_QUANTIZE_NONE &&
	    !(init && zn_train_hf_is_4bit(init))) {
		zn_error("--save-quantized %s writes a 4-bit base: add --quantize-base nf4 (or "
			 "start from a 4-bit checkpoint)", o->lora.save_quantized);
		zn_train_hf_loader_close(init);
		t->exit_code = ZN_EXIT_USAGE;
		return -EINVAL;
	}
	/* the checkpoint goes in one layer at a time, through the engine's buffer */
	t->eo.init_layer = init ? zn_train_hf_load_layer :
		o->ck.resume_dir && !o->lora.on ? zn_ckpt_init_layer : NULL;
	t->eo.init_ctx = init ? (void *)init : (void *)o->ck.resume_dir;
	o->lora.adapter_load = o->ck.resume_dir ? zn_ckpt_init_layer : NULL;
	o->lora.adapter_ctx = o->ck.resume_dir;
	rc = zn_train_lora_setup(&o->lora, &t->model, &t->eo, t->cfg.runtime.seed, o->init_from);
	if (rc)
		t->exit_code = rc == ZN_EUSAGE ? ZN_EXIT_USAGE : 1;
	/* after the LoRA wrap: a LoRA checkpoint's layers are the adapters */
	if (!rc) {
		rc = zn_train_ckpt_begin(&t->ck, &o->ck, &t->cfg, &t->model, t->ranks->comm,
					 t->ranks->world, t->eo.seq_len);
		if (!rc) {
			rc = zn_engine_create(&t->e, &t->cfg, &t->model, &t->eo);
			/* -ENOMEM: an allocation failed */
			t->exit_code = rc == ZN_EUSAGE ? ZN_EXIT_USAGE : 1;
		}
		/* the 4-bit base written once, before training: --steps 0 only quantizes */
		if (!rc && o->lora.save_quantized) {
			rc = zn_train_lora_save_quantized(&o->lora, t->e, t->tm, o->init_from,
				t->cfg.precision.bf16 ? ZN_DTYPE_BF16 :
				t->cfg.precision.fp16 ? ZN_DTYPE_F16 : ZN_DTYPE_F32);
			t->exit_code = rc == ZN_EUSAGE ? ZN_EXIT_USAGE : 1;
		}
	}
	zn_train_hf_loader_close(init);
	return rc;
}

/* The training and validation data, the resumed state, the monitor and the trace. */
static int open_inputs(struct zn_trainer *t)
{
	struct zn_train_opts *o = t->o;
	const struct zn_runtime_config *r = &t->cfg.runtime;
	bool packed = r->packing == ZN_PACKING_DOCUMENTS;
	int vocab = zn_train_model_vocab(t->tm), rc;

	/* --steps 0 without --data: nothing to read */
	rc = !o->data ? 0 :
	     zn_train_data_open(&t->data, o->data, r->data_format, vocab, t->e, t->eo.seq_len,
				r->seed, o->ev.shuffle, packed);
	if (!rc && packed && o->ev.shuffle) {
		zn_error("--shuffle with --packing documents: packed rows keep the file's order "
			 "(docs/packing.md); drop --shuffle");
		rc = -EINVAL;
	}
	if (!rc && o->data && packed)
		rc = zn_train_data_pack(&t->data, t->e, NULL);
	/* an epoch is steps_per_epoch data steps, grad_accum of them per step */
	if (!rc && o->ev.epochs)
		rc = zn_train_data_epoch_steps(&t->data, o->ev.epochs, &t->steps);
	if (!rc)
		rc = zn_train_ckpt_resumed(&t->ck, t->e, &t->data);
	if (!rc)
		rc = zn_train_eval_open(&t->val, &o->ev, r->data_format, vocab, t->e,
					t->eo.seq_len, r->seed, packed);
	if (!rc && zn_engine_rank(t->e) == 0)
		rc = zn_monitor_open(&t->mon, &t->cfg);
	if (!rc && o->trace && zn_engine_rank(t->e) == 0) {
		rc = zn_trace_open(&t->trace, o->trace, o->trace_first, o->trace_last, 0);
		if (!rc)
			rc = zn_engine_set_trace(t->e, t->trace);
	}
	return rc;
}

int zn_train_begin(struct zn_trainer *t, const struct zn_config *cfg,
		   const struct zn_train_model *tm, struct zn_train_opts *o,
		   struct zn_train_ranks *ranks)
{
	int rc;

	t->cfg = *cfg;
	t->tm = tm;
	t->o = o;
	t->ranks = ranks;
	t->eo = (struct zn_engine_options){ .seq_len = o->seq ? o->seq : zn_train_model_seq(tm) };
	t->steps = o->steps;
	for (int i = 0; i < ZN_MONITOR_FIGURES; i++)
		t->mon.fd[i] = -1;
	rc = make_engine(t);
	if (rc)
		return rc;
	t->exit_code = 1; /* from here on, any failure is a runtime failure */
	rc = open_inputs(t);
	t->done = t->ck.start;
	return rc;
}

bool zn_train_more(const struct zn_trainer *t)
{
	return !t->stop && t->done < t->steps;
}

int zn_train_step(struct zn_trainer *t, struct zn_step_stats *st)
{
	int rc = zn_train_data_next(&t->data);

	if (!rc)
		rc = zn_engine_step_pos(t->e, t->data.inputs, t->data.targets, t->data.pos, st);
	if (rc)
		return rc;
	zn_train_totals_add(&t->tot, st);
	t->done++;
	return 0;
}

int zn_train_after_step(struct zn_trainer *t, const struct zn_step_stats *st)
{
	char hf[ZN_PATH_MAX + 32];
	int step = (int)t->done, rc = 0;

	if (zn_engine_rank(t->e) == 0)
		rc = zn_monitor_step(&t->mon, st, (int64_t)step * t->cfg.train_batch_size);
	if (!rc && !t->own)
		rc = zn_train_eval_after_step(&t->val, t->e, step, t->steps, stdout);
	if (!rc)
		rc = zn_train_ckpt_after_step(&t->ck, t->e, &t->data, step, t->steps, &t->stop);
	if (!rc && zn_train_ckpt_hf_due(&t->ck, step, hf, sizeof(hf))) {
		rc = zn_train_hf_save(t->e, t->tm, hf, "--save-hf-steps", t->o->save_dtype,
				      t->o->shard_bytes, t->o->init_from);
		if (!rc && zn_engine_rank(t->e) == 0)
			printf("saved %s\n", hf);
	}
	return rc;
}

/* --save-adapter and --save-final after the last step (not after a SIGTERM stop, which
 * saved its checkpoint; without --save-dir LoRA writes the adapter alone, so a pre-empted
 * job keeps its work). */
static int save_outputs(struct zn_trainer *t)
{
	struct zn_train_opts *o = t->o;
	int rc = 0;

	if (o->lora.on && (!t->stop || !o->ck.save_dir)) {
		struct zn_train_lora_out lo = { t->stop ? NULL : o->save_final, o->save_dtype,
						o->shard_bytes, t->tm, o->init_from };

		rc = zn_train_lora_save(&o->lora, t->e, &lo);
		if (!rc && o->save_final && !t->stop && zn_engine_rank(t->e) == 0)
			printf("saved %s\n", o->save_final);
	} else if (!o->lora.on && o->save_final && !t->stop) {
		/* streamed layer by layer, a file or a directory */
		rc = zn_train_hf_save(t->e, t->tm, o->save_final, "--save-final", o->save_dtype,
				      o->shard_bytes, o->init_from);
		if (!rc && zn_engine_rank(t->e) == 0)
			printf("saved %s\n", o->save_final);
	}
	return rc;
}

int zn_train_finish(struct zn_trainer *t, int rc)
{
	/* the last step's NVMe write-behind: a failed write fails the run */
	int r = zn_engine_flush(t->e);

	if (!rc)
		rc = r;
	if (!rc)
		rc = save_outputs(t);
	/* the trace is put in place even after a failure: it shows the steps before it */
	if (t->trace) {
		r = zn_engine_set_trace(t->e, NULL);
		if (!rc)
			rc = r;
		r = zn_trace_close(t->trace);
		t->trace = NULL;
		if (!r && !rc)
			printf("trace %s\n", t->o->trace);
		if (!rc)
			rc = r;
	}
	return rc;
}

void zn_train_end(struct zn_trainer *t)
{
	if (t->trace) {
		zn_engine_set_trace(t->e, NULL);
		zn_trace_close(t->trace);
		t->trace = NULL;
	}
	zn_monitor_close(&t->mon);
	zn_train_data_close(&t->data);
	zn_train_eval_close(&t->val);
	zn_engine_destroy(t->e); /* removes the swap files (also after a SIGTERM stop) */
	t->e = NULL;
	zn_train_ckpt_end(&t->ck);
}
