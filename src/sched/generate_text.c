/* Generated text out at UTF-8 boundaries, stop strings withheld (generate_text.h). */
#include "sched/generate_text.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

struct zn_gen_text {
	char **stops;
	size_t *stop_len;
	int n_stops, stopped;
	char *buf; /* bytes not written yet */
	size_t n, cap;
	zn_gen_text_writer write;
	void *ctx;
};

int zn_gen_text_create(struct zn_gen_text **out, const char *const *stops, int n_stops,
		       zn_gen_text_writer write, void *ctx)
{
	struct zn_gen_text *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->write = write;
	t->ctx = ctx;
	t->stopped = -1;
	t->stops = calloc((size_t)n_stops + 1, sizeof(*t->stops));
	t->stop_len = calloc((size_t)n_stops + 1, sizeof(*t->stop_len));
	if (!t->stops || !t->stop_len) {
		zn_gen_text_destroy(t);
		return -ENOMEM;
	}
	for (int i = 0; i < n_stops; i++) {
		if (!stops[i] || !*stops[i]) {
			zn_gen_text_destroy(t);
			return -EINVAL;
		}
		t->stops[i] = strdup(stops[i]);
		if (!t->stops[i]) {
			zn_gen_text_destroy(t);
			return -ENOMEM;
		}
		t->stop_len[i] = strlen(stops[i]);
		t->n_stops = i + 1;
	}
	*out = t;
	return 0;
}

void zn_gen_text_destroy(struct zn_gen_text *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_stops; i++)
		free(t->stops[i]);
	free(t->stops);
	free(t->stop_len);
	free(t->buf);
	free(t);
}

/* writes buf[0 .. k) and keeps the rest */
static int emit(struct zn_gen_text *t, size_t k)
{
	int rc = k ? t->write(t->ctx, t->buf, k) : 0;

	if (k && t->n > k)
		memmove(t->buf, t->buf + k, t->n - k);
	t->n -= k;
	return rc;
}

/* the earliest position of a stop string in buf (its index in *which), or -1 */
static long find_stop(const struct zn_gen_text *t, int *which)
{
	long best = -1;

	for (int i = 0; i < t->n_stops; i++) {
		size_t m = t->stop_len[i];

		for (size_t p = 0; p + m <= t->n && (best < 0 || (long)p < best); p++)
			if (!memcmp(t->buf + p, t->stops[i], m)) {
				best = (long)p;
				*which = i;
				break;
			}
	}
	return best;
}

/* the longest tail of buf that is a proper prefix of a stop string */
static size_t stop_tail(const struct zn_gen_text *t)
{
	size_t hold = 0;

	for (int i = 0; i < t->n_stops; i++)
		for (size_t k = t->stop_len[i] - 1; k > hold; k--)
			if (k <= t->n && !memcmp(t->buf + t->n - k, t->stops[i], k)) {
				hold = k;
				break;
			}
	return hold;
}

/* buf[0 .. ret) ends at a character boundary: an incomplete character before end is
 * held; an invalid byte is passed through (it never completes) */
static size_t utf8_safe(const struct zn_gen_text *t, size_t end)
{
	size_t pos = 0;
	bool bad = true;

	while (pos < end && bad) {
		pos += zn_utf8_prefix((const unsigned char *)t->buf + pos, end - pos, &bad);
		pos += bad ? 1 : 0;
	}
	return pos;
}

int zn_gen_text_put(struct zn_gen_text *t, const char *p, size_t n)
{
	int which = -1;
	long at;

	if (t->stopped >= 0)
		return 1;
	if (!n) /* a special token: nothing to add or to write */
		return 0;
	if (t->n + n > t->cap) {
		size_t cap = (t->n + n) * 2 + 64;
		char *b = realloc(t->buf, cap);

		if (!b)
			return -ENOMEM;
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->n, p, n);
	t->n += n;
	at = find_stop(t, &which);
	if (at >= 0) {
		int rc = emit(t, (size_t)at);

		t->n = 0;
		t->stopped = which;
		return rc ? rc : 1;
	}
	return emit(t, utf8_safe(t, t->n - stop_tail(t)));
}

int zn_gen_text_finish(struct zn_gen_text *t)
{
	return t->stopped >= 0 ? 0 : emit(t, t->n);
}

int zn_gen_text_stopped(const struct zn_gen_text *t)
{
	return t->stopped;
}
