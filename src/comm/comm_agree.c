/* Ranks that agree before they work, a failing rank that takes the job down, and the line
 * naming the ranks a timed-out collective waited for (comm.h).
 *
 * zn_comm_agree: rank 0 broadcasts the length of its text, then the text; every rank
 * finds the first line where its own text differs; an all-gather of (ok, first differing
 * line) per rank gives every rank every verdict, so all return the same code and none is
 * left waiting in a later collective.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_backends.h"
#include "comm/comm_impl.h"
#include "core/log.h"

/* Line k of text (0-based): start and length (without the newline); false past the end. */
static bool line_at(const char *text, int k, const char **start, size_t *len)
{
	const char *p = text;

	for (int i = 0; i < k; i++) {
		p = strchr(p, '\n');
		if (!p)
			return false;
		p++;
	}
	if (!*p)
		return false;
	*start = p;
	*len = strchr(p, '\n') ? (size_t)(strchr(p, '\n') - p) : strlen(p);
	return true;
}

/* A line's compared part: up to a tab (what follows it is a note, shown, not compared). */
static size_t compared(const char *p, size_t len)
{
	const char *tab = memchr(p, '\t', len);

	return tab ? (size_t)(tab - p) : len;
}

/* The first line where a and b differ, or -1 when they are the same. */
static int first_difference(const char *a, const char *b)
{
	for (int k = 0;; k++) {
		const char *pa = NULL, *pb = NULL;
		size_t la = 0, lb = 0;
		bool ha = line_at(a, k, &pa, &la), hb = line_at(b, k, &pb, &lb);

		if (!ha && !hb)
			return -1;
		if (ha)
			la = compared(pa, la);
		if (hb)
			lb = compared(pb, lb);
		if (ha != hb || la != lb || memcmp(pa, pb, la))
			return k;
	}
}

/* "key" and "value" of line k ("key=value", or "key=value<TAB>note": "value (note)");
 * "(none)" past the end. */
static void split_line(const char *text, int k, char *key, size_t key_size, char *val,
		       size_t val_size)
{
	const char *p, *eq;
	size_t len, vlen, vcmp;

	if (!line_at(text, k, &p, &len)) {
		snprintf(key, key_size, "(line %d)", k + 1);
		snprintf(val, val_size, "(none)");
		return;
	}
	eq = memchr(p, '=', len);
	if (!eq) {
		snprintf(key, key_size, "%.*s", (int)len, p);
		snprintf(val, val_size, "(none)");
		return;
	}
	snprintf(key, key_size, "%.*s", (int)(eq - p), p);
	vlen = len - (size_t)(eq - p) - 1;
	vcmp = compared(eq + 1, vlen);
	if (vcmp == vlen)
		snprintf(val, val_size, "%.*s", (int)vlen, eq + 1);
	else
		snprintf(val, val_size, "%.*s (%.*s)", (int)vcmp, eq + 1, (int)(vlen - vcmp - 1),
			 eq + 2 + vcmp);
}

static void report(const char *mine, const char *root_text, const float *verdict, int rank,
		   int size)
{
	char key[256], here[512], there[512];
	int bad = -1, diff = -1;

	for (int r = 0; r < size; r++) {
		if (verdict[2 * r] == 0) {
			if (r != rank)
				zn_error("rank %d could not start (see its error): every rank stops",
					 r);
			return;
		}
	}
	for (int r = 1; r < size && bad < 0; r++) {
		if (verdict[2 * r + 1] >= 0) {
			bad = r;
			diff = (int)verdict[2 * r + 1];
		}
	}
	if (bad < 0)
		return;
	if (rank == bad || (rank != 0 && verdict[2 * rank + 1] >= 0)) {
		int k = (int)verdict[2 * rank + 1];

		split_line(mine, k, key, sizeof(key), here, sizeof(here));
		split_line(root_text, k, key, sizeof(key), there, sizeof(there));
		zn_error("ranks disagree on %s: %s here on rank %d, %s on rank 0: give every rank "
			 "the same config and flags", key, here, rank, there);
	} else if (rank == 0) {
		split_line(mine, diff, key, sizeof(key), there, sizeof(there));
		zn_error("rank %d disagrees with rank 0 on %s (rank 0 has %s): give every rank the "
			 "same config and flags", bad, key, there);
	}
}

int zn_comm_agree(struct zn_comm *c, const char *text, bool ok)
{
	int rank = zn_comm_rank(c), size = zn_comm_size(c), rc, diff = -1;
	uint64_t len = rank == 0 ? strlen(text) : 0;
	char *root_text;
	float mine[2], *verdict;

	if (size == 1)
		return ok ? 0 : -ECANCELED;
	rc = zn_comm_broadcast(c, NULL, &len, sizeof(len), 0);
	if (rc)
		return rc;
	root_text = calloc(len + 1, 1);
	verdict = calloc((size_t)size * 2, sizeof(*verdict));
	if (!root_text || !verdict) {
		/* the others would wait for this rank's part: end the job */
		zn_error("out of memory comparing the ranks' configs: every rank stops");
		zn_comm_abort(1);
	}
	if (rank == 0)
		memcpy(root_text, text, len);
	if (len)
		rc = zn_comm_broadcast(c, NULL, root_text, len, 0);
	if (!rc && ok && rank != 0)
		diff = first_difference(text, root_text);
	mine[0] = ok ? 1.0f : 0.0f;
	mine[1] = (float)diff; /* exact: far below 2^24 lines */
	if (!rc)
		rc = zn_comm_all_gather(c, NULL, verdict, mine, 2, ZN_DTYPE_F32);
	if (!rc) {
		report(text, root_text, verdict, rank, size);
		for (int r = 0; r < size && !rc; r++)
			if (verdict[2 * r] == 0)
				rc = -ECANCELED;
		for (int r = 0; r < size && !rc; r++)
			if (verdict[2 * r + 1] >= 0)
				rc = -EINVAL;
	}
	free(root_text);
	free(verdict);
	return rc;
}

void zn_comm_abort(int exit_code)
{
	fflush(stdout);
	fflush(stderr);
	zn_comm_mpi_abort(exit_code);
	exit(exit_code);
}

/* Appends ", r" (or "r" first) to buf for each rank in list[0 .. n). */
static void append_ranks(char *buf, size_t size, const int *list, int n)
{
	for (int i = 0; i < n; i++) {
		size_t k = strlen(buf);

		snprintf(buf + k, size - k, "%s%d", i ? ", " : "", list[i]);
	}
}

int zn_comm_missing_text(char *buf, size_t size, int rank, int world, int channel,
			 int64_t seq, const bool *answered, const int64_t (*reached)[2])
{
	static const char *const chan[2] = { "host op", "stream op" };
	int silent[64], n_listed = 0, n_silent = 0, behind = 0;
	size_t k;

	buf[0] = 0;
	for (int r = 0; r < world; r++) {
		if (r == rank || (answered[r] && reached[r][channel] >= seq))
			continue;
		if (!answered[r] && n_listed < 64)
			silent[n_listed++] = r;
		n_silent += !answered[r];
		behind += answered[r];
	}
	if (n_silent) {
		snprintf(buf, size, "rank%s ", n_silent > 1 ? "s" : "");
		append_ranks(buf, size, silent, n_listed);
		k = strlen(buf);
		if (n_silent > n_listed)
			snprintf(buf + k, size - k, " and %d more", n_silent - n_listed);
		k = strlen(buf);
		snprintf(buf + k, size - k, " did not arrive (no answer: stopped, dead, or busy "
			 "outside the collectives)");
	}
	for (int r = 0; r < world && behind; r++) {
		if (r == rank || !answered[r] || reached[r][channel] >= seq)
			continue;
		k = strlen(buf);
		snprintf(buf + k, size - k, "%srank %d did not arrive (it is at %s %lld, %s %lld)",
			 k ? "; " : "", r, chan[0], (long long)reached[r][0], chan[1],
			 (long long)reached[r][1]);
	}
	if (!buf[0])
		snprintf(buf, size, "every rank arrived: the op is slow, not stuck; raise "
			 "--comm-timeout");
	return n_silent + behind;
}
