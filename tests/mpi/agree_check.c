/* agree_check: zn_comm_agree across the ranks of one launch (comm.h).
 *
 *     mpirun -np 2 ./mpi_agree_check
 *     ./mpi_agree_check                        # one rank: the single backend
 *
 * A plain program (ctest runs it plain and with 2 and 4 ranks). Every rank describes the
 * same run; then, case by case, the last rank changes one line, drops one, adds one, or
 * says its start-up failed, and every rank must get the same answer: 0 when all agree,
 * -EINVAL when a line differs, -ECANCELED when a rank is not ok. One rank alone: 0 when
 * ok, -ECANCELED when not. The exit status is 1 if any rank saw a wrong answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

static const char base[] = "train_batch_size=8\nzero_optimization.stage=3\nbf16.enabled=false\n"
			   "model.d_model=64\ntrain.steps=20\n";

struct agree_case {
	const char *name;
	const char *last_text; /* the last rank's text (others: base) */
	bool last_ok;
	int want;              /* with more than one rank */
};

int main(void)
{
	static const struct agree_case cases[] = {
		{ "all the same", base, true, 0 },
		{ "a different value", "train_batch_size=8\nzero_optimization.stage=2\n"
		  "bf16.enabled=false\nmodel.d_model=64\ntrain.steps=20\n", true, -EINVAL },
		{ "a value of another length", "train_batch_size=8\nzero_optimization.stage=3\n"
		  "bf16.enabled=true\nmodel.d_model=64\ntrain.steps=20\n", true, -EINVAL },
		{ "a line missing", "train_batch_size=8\nzero_optimization.stage=3\n"
		  "bf16.enabled=false\nmodel.d_model=64\n", true, -EINVAL },
		{ "a line more", "train_batch_size=8\nzero_optimization.stage=3\n"
		  "bf16.enabled=false\nmodel.d_model=64\ntrain.steps=20\nx=1\n", true, -EINVAL },
		{ "a rank that failed", base, false, -ECANCELED },
		{ "failed and different", "zero_optimization.stage=1\n", false, -ECANCELED },
		{ "all the same again", base, true, 0 },
	};
	struct zn_comm_config cfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *c = NULL;
	int rank, size, failed = 0, rc;

	rc = zn_comm_create(&c, &cfg);
	if (rc) {
		fprintf(stderr, "agree_check: zn_comm_create: %d\n", rc);
		return 1;
	}
	rank = zn_comm_rank(c);
	size = zn_comm_size(c);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct agree_case *k = &cases[i];
		bool last = rank == size - 1;
		int want = size > 1 ? k->want : (k->last_ok ? 0 : -ECANCELED);

		rc = zn_comm_agree(c, last ? k->last_text : base, last ? k->last_ok : true);
		if (size == 1 && strcmp(k->last_text, base) && k->last_ok)
			want = 0; /* one rank compares with itself */
		if (rc != want) {
			fprintf(stderr, "agree_check: rank %d of %d: %s: got %d, want %d\n", rank,
				size, k->name, rc, want);
			failed++;
		}
	}
	printf("agree_check: rank %d of %d: %zu cases, %d wrong\n", rank, size,
	       sizeof(cases) / sizeof(cases[0]), failed);
	zn_comm_destroy(c);
	return failed ? 1 : 0;
}
