/* include/zinc.h's model and trainer (zn_net_*, zn_trainer_*): the calls zinc train makes
 * (train/trainer.h), with the options a library caller gives instead of argv. The checks a
 * command line needs before any work (outputs that are inputs, locks on --save-dir, the
 * print-outs) stay the zinc command's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sched/ckpt.h"
#include "train/train_hf.h"
#include "train/train_recipe.h"
#include "train/trainer.h"
#include "zinc.h"

#define NET_MAX_FLAGS 64

/* The model flags as given (zinc train's model flags), kept for the checkpoints' recipe
 * (train_recipe.h), and the model they make. */
struct zn_net {
	struct zn_train_model tm;
	int flag_count;
	char *flags[NET_MAX_FLAGS]; /* copies; --init-from / --model-config taken out */
	char *init_from, *model_config;
	struct zn_model model;      /* zn_net_model's: { ops, config } pointing into tm */
};

size_t zn_config_size(void)
{
	return sizeof(struct zn_config);
}

void zn_net_destroy(struct zn_net *net)
{
	if (!net)
		return;
	for (int i = 0; i < net->flag_count; i++)
		free(net->flags[i]);
	free(net->init_from);
	free(net->model_config);
	free(net);
}

static char *copy(const char *s)
{
	char *c = s ? malloc(strlen(s) + 1) : NULL;

	if (c)
		strcpy(c, s);
	return c;
}

int zn_net_from_flags(struct zn_net **out, int argc, const char *const *argv)
{
	struct zn_net *net = calloc(1, sizeof(*net));
	int rc = net ? 0 : -ENOMEM;

	*out = NULL;
	if (!rc && argc > NET_MAX_FLAGS) {
		zn_error("zn_net_from_flags: %d arguments, at most %d", argc, NET_MAX_FLAGS);
		rc = ZN_EUSAGE;
	}
	for (int i = 0; !rc && i < argc; i++) {
		const char *a = argv[i];
		char **to = &net->flags[net->flag_count];

		if (!strcmp(a, "--init-from") && i + 1 < argc) {
			to = &net->init_from;
			a = argv[++i];
		} else if (!strcmp(a, "--model-config") && i + 1 < argc) {
			to = &net->model_config;
			a = argv[++i];
		} else {
			net->flag_count++;
		}
		free(*to); /* a repeated --init-from: the last one, as zinc train */
		*to = copy(a);
		if (!*to)
			rc = -ENOMEM;
	}
	if (!rc) {
		/* all the flags, --init-from / --model-config included, as zinc train reads them */
		char *all[NET_MAX_FLAGS];
		int n = 0;

		for (int i = 0; i < argc && i < NET_MAX_FLAGS; i++)
			all[n++] = (char *)argv[i];
		rc = zn_train_model_from_flags(n, all, &net->tm, NULL) ? ZN_EUSAGE : 0;
		net->model = zn_train_model_get(&net->tm);
	}
	if (rc) {
		zn_net_destroy(net);
		return rc;
	}
	*out = net;
	return 0;
}

int zn_net_from_preset(struct zn_net **out, const char *name)
{
	const char *argv[] = { "--model", name };

	return zn_net_from_flags(out, 2, argv);
}

int zn_net_from_hf(struct zn_net **out, const char *dir)
{
	const char *argv[] = { "--init-from", dir };

	return zn_net_from_flags(out, 2, argv);
}

int zn_net_seq(const struct zn_net *net)
{
	return zn_train_model_seq(&net->tm);
}

int zn_net_vocab(const struct zn_net *net)
{
	return zn_train_model_vocab(&net->tm);
}

uint64_t zn_net_params(const struct zn_net *net)
{
	return zn_train_model_params(&net->tm);
}

const struct zn_model *zn_net_model(const struct zn_net *net)
{
	return &net->model;
}

/* The options as zinc train's (its defaults: --steps, eval batches) and the resumed
 * checkpoint, checked against the net as `zinc train --resume` checks it. */
static int options(struct zn_trainer *t, const struct zn_net *net,
		   const struct zn_trainer_options *in, uint64_t seed, struct zn_train_recipe *r)
{
	struct zn_train_opts *o = &t->own_opts;
	int rc = 0;

	const char *given[5] = { in->data, in->val_data, in->resume, net->init_from,
				 net->model_config };

	/* the caller's strings are copied: the trainer reads them after create returns, and
	 * the net may be destroyed before the trainer */
	for (int i = 0; i < 5; i++)
		if (given[i] && !(t->own_paths[i] = copy(given[i])))
			return -ENOMEM;
	*o = (struct zn_train_opts){
		.data = t->own_paths[0], .init_from = t->own_paths[3],
		.model_config = t->own_paths[4], .seq = in->seq, .steps = in->steps,
		.warmup_ratio = in->warmup_ratio, .trace_first = 1,
		.ev = { .val_data = t->own_paths[1], .eval_batches = in->eval_batches },
		.ck = { .resume = t->own_paths[2] },
	};
	if (in->steps < 0 || in->seq < 0 || in->eval_batches < 0) {
		zn_error("zn_trainer_create: steps, seq and eval_batches are counts (>= 0)");
		return ZN_EUSAGE;
	}
	if (in->steps > 0 && !in->data) {
		zn_error("zn_trainer_create: give the training tokens (options.data)");
		return ZN_EUSAGE;
	}
	*r = (struct zn_train_recipe){ .init_from = net->init_from,
				       .model_config = net->model_config,
				       .flag_count = net->flag_count,
				       .flags = (char **)net->flags };
	if (in->resume) {
		rc = zn_ckpt_open(&o->ck.resume_dir, o->ck.resume, "resume");
		if (!rc)
			rc = zn_train_recipe_check(o->ck.resume_dir, "resume", r, &t->own_tm,
						   &o->lora, seed);
	}
	return rc;
}

/* Every rank runs the same: the config, the model and the options (train_ranks.h); ok:
 * this rank's own set-up went well (a rank that failed still takes part, so none waits). */
static int agree(struct zn_trainer *t, const struct zn_config *cfg, bool ok)
{
	const struct zn_train_opts *o = &t->own_opts;
	char own[1024];

	snprintf(own, sizeof(own), "train.steps=%d\ntrain.seq=%d\ntrain.resume=%s\n", o->steps,
		 o->seq, o->ck.resume ? "given" : "none");
	return zn_train_ranks_agree(&t->own_ranks, cfg, &t->own_tm, own, ok);
}

/* As zinc train: the config's "auto" values from the model and the steps, the ranks
 * started, the config validated for them, and every rank agreeing. */
static int settle(struct zn_trainer *t, struct zn_config *c, const struct zn_trainer_options *in,
		  int rc)
{
	if (!rc && zn_config_resolve_auto(c, &(struct zn_config_derive){
			   .hidden = zn_train_model_width(&t->own_tm),
			   .steps = in->steps ? in->steps : 1, .warmup_ratio = in->warmup_ratio }))
		rc = ZN_EUSAGE;
	/* a config that did not parse still agrees, within the default timeout */
	if (zn_train_ranks_start(&t->own_ranks, rc ? 0 : c->runtime.comm_timeout_s))
		return ZN_EUSAGE;
	if (!rc && zn_config_validate(c, t->own_ranks.world))
		rc = ZN_EUSAGE;
	if (agree(t, c, rc == 0) && !rc)
		rc = ZN_EUSAGE;
	return rc;
}

int zn_trainer_create(struct zn_trainer **out, const struct zn_config *cfg,
		      const struct zn_net *net, const struct zn_trainer_options *options_in)
{
	struct zn_trainer *t = calloc(1, sizeof(*t));
	struct zn_train_recipe recipe;
	struct zn_config c = *cfg;
	int rc;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->own = true;
	t->own_tm = net->tm;
	rc = options(t, net, options_in, c.runtime.seed, &recipe);
	rc = settle(t, &c, options_in, rc);
	if (!rc) {
		t->own_opts.ck.run_meta = t->run_meta;
		rc = zn_train_recipe_text(&recipe, &t->own_tm, NULL, c.runtime.seed, t->run_meta,
					  sizeof(t->run_meta));
	}
	if (!rc)
		rc = zn_train_begin(t, &c, &t->own_tm, &t->own_opts, &t->own_ranks);
	if (rc) {
		zn_trainer_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

int zn_trainer_step(struct zn_trainer *t, struct zn_step_stats *st)
{
	int rc;

	if (!zn_train_more(t))
		return 1;
	rc = zn_train_step(t, st);
	if (!rc)
		rc = zn_train_after_step(t, st);
	return rc;
}

int zn_trainer_eval(struct zn_trainer *t, float *loss)
{
	return zn_train_eval_run(&t->val, t->e, (int)t->done, loss);
}

int zn_trainer_save_hf(struct zn_trainer *t, const char *path)
{
	int rc = zn_engine_flush(t->e);

	if (!rc && zn_engine_rank(t->e) == 0)
		rc = zn_train_hf_output_check(path);
	if (!rc)
		rc = zn_train_hf_save(t->e, t->tm, path, "zn_trainer_save_hf", ZN_DTYPE_F32, 0,
				      t->o->init_from);
	return rc;
}

int zn_trainer_save_checkpoint(struct zn_trainer *t, const char *dir)
{
	char where[ZN_PATH_MAX + 100];
	int rc = zn_engine_flush(t->e);

	if (!rc)
		rc = zn_train_ckpt_save(&t->ck, t->e, &t->data, dir, where, sizeof(where));
	return rc;
}

int64_t zn_trainer_steps_done(const struct zn_trainer *t)
{
	return t->done;
}

struct zn_engine *zn_trainer_engine(struct zn_trainer *t)
{
	return t->e;
}

void zn_trainer_destroy(struct zn_trainer *t)
{
	if (!t)
		return;
	zn_train_end(t);
	zn_ckpt_close(t->own_opts.ck.resume_dir);
	zn_train_ranks_end(&t->own_ranks);
	for (int i = 0; i < 5; i++)
		free(t->own_paths[i]);
	free(t);
}
