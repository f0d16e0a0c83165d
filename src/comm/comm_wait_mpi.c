/* Bounded waits for MPI collectives and the arrival queries that name a missing rank
 * (comm_mpi.h).
 *
 * A query is two int64 {channel, op} sent on the watch communicator (a duplicate of the
 * world kept for this only, so queries never match a collective's messages); the answer is
 * the answering rank's ops begun per channel {host, stream}. A rank answers only while it
 * polls (in zn_mpi_wait): a rank that is stopped, dead, or computing outside the
 * collectives does not answer, which is what "did not arrive" means. Either waiting thread
 * answers (one at a time, serve_lock); answers go out from a ring of send buffers, each
 * reused once its send completed.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/comm_mpi.h"
#include "core/log.h"

#define TAG_QUERY 1
#define TAG_ANSWER 2
#define ANSWER_SLOTS 64
/* after a timeout: how long to wait for the peers' answers (they answer within a poll) */
#define GRACE_S 1.0
/* polling: yield for the first SPIN_S (most collectives end within it), then nap, the nap
 * doubling from NAP_MIN_NS to NAP_MAX_NS (the latency a slow collective can gain) */
#define SPIN_S 0.005
#define NAP_MIN_NS 20000L
#define NAP_MAX_NS 500000L

struct answer_slot {
	MPI_Request req;
	int64_t reached[ZN_MPI_CHANNELS];
};

struct zn_mpi_watch {
	MPI_Comm comm;
	int rank, size;
	double timeout_s;
	atomic_llong begun[ZN_MPI_CHANNELS]; /* ops begun per channel */
	pthread_mutex_t serve_lock;
	MPI_Request query_req;               /* the posted receive of a query */
	int64_t query[2];
	struct answer_slot slots[ANSWER_SLOTS];
	int next_slot;
	atomic_bool asking;                  /* a timed-out wait has asked the peers */
	/* this rank's own questions after a timeout (kept: sends may still be pending) */
	int64_t asked[2];
	int64_t (*answers)[ZN_MPI_CHANNELS];
	MPI_Request *asks;                   /* 2 per peer: the query sent, the answer */
	bool timed_out;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

int zn_mpi_watch_open(struct zn_mpi_watch **out, MPI_Comm world, double timeout_s)
{
	struct zn_mpi_watch *w = calloc(1, sizeof(*w));
	int rc;

	*out = NULL;
	if (!w) {
		zn_error("comm mpi: out of memory allocating the arrival watch (%zu bytes)",
			 sizeof(*w));
		return -ENOMEM;
	}
	w->comm = MPI_COMM_NULL;
	w->query_req = MPI_REQUEST_NULL;
	w->timeout_s = timeout_s;
	for (int i = 0; i < ANSWER_SLOTS; i++)
		w->slots[i].req = MPI_REQUEST_NULL;
	for (int c = 0; c < ZN_MPI_CHANNELS; c++)
		atomic_init(&w->begun[c], 0);
	atomic_init(&w->asking, false);
	pthread_mutex_init(&w->serve_lock, NULL);
	rc = zn_mpi_check(MPI_Comm_dup(world, &w->comm), "MPI_Comm_dup", __FILE__, __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN),
				  "MPI_Comm_set_errhandler", __FILE__, __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_rank(w->comm, &w->rank), "MPI_Comm_rank", __FILE__,
				  __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_size(w->comm, &w->size), "MPI_Comm_size", __FILE__,
				  __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Irecv(w->query, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_QUERY,
					    w->comm, &w->query_req),
				  "MPI_Irecv (arrival query)", __FILE__, __LINE__);
	if (rc) {
		zn_mpi_watch_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

void zn_mpi_watch_close(struct zn_mpi_watch *w)
{
	if (!w)
		return;
	/* after a timeout a query or answer may still be in flight to a stopped rank: the
	 * job ends by MPI_Abort, so leave the buffers and requests alone */
	if (w->timed_out)
		return;
	if (w->query_req != MPI_REQUEST_NULL) {
		MPI_Cancel(&w->query_req);
		MPI_Wait(&w->query_req, MPI_STATUS_IGNORE);
	}
	/* answers still going out go to ranks that were polling, so they end at once; one
	 * that does not within GRACE_S keeps w (its send still reads the slot) */
	for (int i = 0; i < ANSWER_SLOTS; i++) {
		double t0 = now_s();
		int done = w->slots[i].req == MPI_REQUEST_NULL;

		while (!done && now_s() - t0 < GRACE_S) {
			MPI_Test(&w->slots[i].req, &done, MPI_STATUS_IGNORE);
			if (!done)
				nap(NAP_MAX_NS);
		}
		if (!done)
			return;
	}
	if (w->comm != MPI_COMM_NULL)
		MPI_Comm_free(&w->comm);
	pthread_mutex_destroy(&w->serve_lock);
	free(w->answers);
	free(w->asks);
	free(w);
}

/* Answers a peer's query if one came; the other thread may be doing it (then skip). */
static void serve(struct zn_mpi_watch *w)
{
	struct answer_slot *s;
	MPI_Status st;
	int flag = 0, done = 1;

	if (pthread_mutex_trylock(&w->serve_lock))
		return;
	/* NULL: the receive could not be posted again; this rank answers no more */
	if (w->query_req == MPI_REQUEST_NULL ||
	    MPI_Test(&w->query_req, &flag, &st) != MPI_SUCCESS || !flag)
		goto unlock;
	s = &w->slots[w->next_slot];
	if (s->req != MPI_REQUEST_NULL)
		MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
	/* a slot whose answer is still going out: this query goes unanswered (the asker then
	 * counts this rank as silent; with 64 slots, only when 64 ranks ask at once) */
	if (done) {
		for (int c = 0; c < ZN_MPI_CHANNELS; c++)
			s->reached[c] = atomic_load(&w->begun[c]);
		if (MPI_Isend(s->reached, ZN_MPI_CHANNELS, MPI_INT64_T, st.MPI_SOURCE, TAG_ANSWER,
			      w->comm, &s->req) != MPI_SUCCESS)
			s->req = MPI_REQUEST_NULL;
		w->next_slot = (w->next_slot + 1) % ANSWER_SLOTS;
	}
	MPI_Irecv(w->query, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_QUERY, w->comm, &w->query_req);
unlock:
	pthread_mutex_unlock(&w->serve_lock);
}

/* Asks every peer how far it came, waits GRACE_S for the answers, writes the line's tail
 * into buf. */
static void ask_peers(struct zn_mpi_watch *w, enum zn_mpi_channel ch, int64_t seq, char *buf,
		      size_t size)
{
	int n = w->size;
	bool *answered = calloc((size_t)n, sizeof(*answered));
	double t0 = now_s();
	int pending = 0;

	w->answers = calloc((size_t)n, sizeof(*w->answers));
	w->asks = malloc((size_t)n * 2 * sizeof(*w->asks));
	if (!answered || !w->answers || !w->asks) {
		snprintf(buf, size, "(out of memory asking the other ranks which arrived)");
		free(answered);
		return;
	}
	w->asked[0] = ch;
	w->asked[1] = seq;
	for (int r = 0; r < n; r++) {
		w->asks[2 * r] = w->asks[2 * r + 1] = MPI_REQUEST_NULL;
		if (r == w->rank)
			continue;
		if (MPI_Irecv(w->answers[r], ZN_MPI_CHANNELS, MPI_INT64_T, r, TAG_ANSWER,
			      w->comm, &w->asks[2 * r + 1]) != MPI_SUCCESS)
			continue;
		MPI_Isend(w->asked, 2, MPI_INT64_T, r, TAG_QUERY, w->comm, &w->asks[2 * r]);
		pending++;
	}
	while (pending && now_s() - t0 < GRACE_S) {
		for (int r = 0; r < n; r++) {
			int flag = 0;

			if (w->asks[2 * r + 1] == MPI_REQUEST_NULL || answered[r])
				continue;
			MPI_Test(&w->asks[2 * r + 1], &flag, MPI_STATUS_IGNORE);
			if (flag) {
				answered[r] = true;
				pending--;
			}
		}
		serve(w); /* the peers that timed out too ask this rank */
		nap(NAP_MAX_NS);
	}
	zn_comm_missing_text(buf, size, w->rank, n, ch, seq, answered,
			     (const int64_t(*)[2])w->answers);
	free(answered);
}

int zn_mpi_wait(struct zn_mpi_watch *w, enum zn_mpi_channel ch, const char *call,
		MPI_Request *req)
{
	int64_t seq = atomic_fetch_add(&w->begun[ch], 1) + 1;
	double t0 = now_s(), t;
	long ns = NAP_MIN_NS;
	char tail[768];
	int done = 0;

	for (;;) {
		int rc = zn_mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), call, __FILE__,
				      __LINE__);

		if (rc || done)
			return rc;
		serve(w);
		t = now_s() - t0;
		if (t >= w->timeout_s)
			break;
		if (t < SPIN_S) {
			sched_yield();
			continue;
		}
		nap(ns);
		if (ns < NAP_MAX_NS)
			ns *= 2;
	}
	w->timed_out = true;
	t = now_s() - t0;
	/* the other channel's wait may have timed out too: the peers are asked once */
	if (!atomic_exchange(&w->asking, true))
		ask_peers(w, ch, seq, tail, sizeof(tail));
	else
		snprintf(tail, sizeof(tail), "the ranks it waited for are named above");
	zn_error("%s (%s op %lld) on rank %d timed out after %.1f s (--comm-timeout %g): %s",
		 call, ch == ZN_MPI_HOST ? "host" : "stream", (long long)seq, w->rank, t,
		 w->timeout_s, tail);
	return -ETIMEDOUT;
}
