/* zinc merge's output directory (docs/lora.md, "zinc merge"), internal to src/cli: the
 * checks before any work, the staging directory the merged model is written into, the
 * base's tokenizer and generation files copied beside it, and the move into place.
 *
 * OUT may be: absent (its parent a writable directory), an empty directory, or with
 * --overwrite an earlier merge's output: a directory of regular files whose names are all
 * ones a merge writes (merge_out_is_ours), and neither the base's nor the adapter's
 * directory. A symlink at OUT, a file, a non-empty directory without --overwrite, or one
 * holding anything else is refused naming it. The model is written into OUT.merge.PID (a
 * sibling, so the final step is a rename on one filesystem), completed there, and then
 * renamed to OUT: an absent or empty OUT is replaced by the rename itself; an earlier merge
 * is first renamed aside and removed after. OUT is at every moment either the old content
 * or the whole new one. Nothing is written through a symlink: the staging directory is
 * new (mkdir fails on anything at its name) and its files are created there.
 */
#ifndef ZN_CLI_MERGE_OUT_H
#define ZN_CLI_MERGE_OUT_H

#include <stdbool.h>
#include <stddef.h>

enum merge_out_state { MERGE_OUT_ABSENT, MERGE_OUT_EMPTY, MERGE_OUT_REPLACE };

struct merge_out {
	char out[4096];     /* OUT without trailing '/' */
	char staging[4200]; /* OUT.merge.PID */
	enum merge_out_state state;
};

/* Checks OUT (above) against the base (a directory or a file: its directory) and the
 * adapter directory. 0, or ZN_EUSAGE with a line saying what to do. */
int merge_out_check(struct merge_out *mo, const char *out, const char *base,
		    const char *adapter, bool overwrite);
/* A name a merge writes: config.json, model.safetensors, model-DDDDD-of-DDDDD.safetensors,
 * the index, or one of the files copied from the base (merge_out_copy). */
bool merge_out_is_ours(const char *name);
/* Copies the base's tokenizer and generation files that exist (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, tokenizer.model, vocab.json, merges.txt,
 * added_tokens.json, chat_template.jinja, chat_template.json, generation_config.json; read
 * through symlinks, as a Hugging Face cache holds them) into the staging directory. Their
 * count in *copied. 0 or a negative code (logged). */
int merge_out_copy(const struct merge_out *mo, const char *base, int *copied);
/* Renames the staging directory to OUT (above). 0 or a negative code (logged; the
 * staging directory is left for merge_out_abort). */
int merge_out_commit(struct merge_out *mo);
/* Removes the staging directory and what it holds (after a failure). */
void merge_out_abort(struct merge_out *mo);

#endif
