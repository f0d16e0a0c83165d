/* How a run's model was made, recorded in its checkpoints ("run." keys of the metadata,
 * sched/ckpt.h) so that `zinc train --resume DIR` and `zinc generate --init-from DIR` need no
 * model flags, and a re-run of the same command line with --resume added is checked against
 * the checkpoint instead of refused (docs/checkpoint.md). Internal to zinc (src/train).
 *
 * Recorded: the source (run.model.source = init-from | model-config | flags), its absolute
 * path, the model flags as given (run.model.flag.K), the resolved model (run.model.* as
 * zn_train_model_text writes it), the base's identity (run.base.identity: a hash of
 * config.json, the index and every safetensors header, or the seed of a seeded base) and,
 * for LoRA, r, alpha, dropout, rslora, targets and the --init-adapter's path and identity.
 *
 *     zn_train_recipe_fill(ck, &r, &tl, &seq);    // nothing given: the checkpoint's recipe
 *     ... zn_train_model_parse(&tm, r.flag_count, r.flags, r.init_from, r.model_config ...)
 *     rc = zn_train_recipe_check(ck, "--resume", &r, &tm, &tl, seed);  // names a difference
 *     rc = zn_train_recipe_text(&r, &tm, &tl, seed, buf, size);       // for the next save
 */
#ifndef ZN_TRAIN_RECIPE_H
#define ZN_TRAIN_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/train_lora.h"
#include "train/train_model.h"

struct zn_ckpt_dir;

struct zn_train_recipe {
	const char *init_from;     /* --init-from, or NULL */
	const char *model_config;  /* --model-config, or NULL */
	int flag_count;            /* the model flags: an allocated array of borrowed strings */
	char **flags;
	bool from_checkpoint;      /* filled by zn_train_recipe_fill */
	bool any_seq;              /* zinc generate: a Llama's training length (seq) is not
				    * compared (it is no tensor's shape, and generation has its own) */
};

/* Whether the checkpoint records its recipe (checkpoints of older zinc do not). */
bool zn_train_recipe_recorded(const struct zn_ckpt_dir *ck);
/* When r holds no model source and no model flag: the checkpoint's (strings borrowed from
 * ck). LoRA settings the user did not give
 * (tl->on false) come from the checkpoint too. *seq (the training length, 0: not given)
 * becomes the checkpoint's. Returns 0 or -ENOMEM. */
int zn_train_recipe_fill(const struct zn_ckpt_dir *ck, struct zn_train_recipe *r,
			 struct zn_train_lora *tl, int *seq);
/* The model tm (made from r), the base behind it and the LoRA settings against the
 * checkpoint's: ZN_EUSAGE (logged: `what` DIR, the first difference and what to change). */
int zn_train_recipe_check(const struct zn_ckpt_dir *ck, const char *what,
			  const struct zn_train_recipe *r, const struct zn_train_model *tm,
			  const struct zn_train_lora *tl, uint64_t seed);
/* The "run." lines for zn_ckpt_save_args.run_meta. tl NULL or off: no LoRA lines. Returns 0,
 * -EINVAL (a path or flag with a newline: logged) or -ENAMETOOLONG. */
int zn_train_recipe_text(const struct zn_train_recipe *r, const struct zn_train_model *tm,
			 const struct zn_train_lora *tl, uint64_t seed, char *buf, size_t size);
void zn_train_recipe_release(struct zn_train_recipe *r);

#endif
