/* The text side of zinc generate (docs/generate.md): the generated tokens' bytes go out
 * through a writer as soon as they are safe to show, never in the middle of a UTF-8
 * character, and never a stop string (--stop TEXT) or the start of one that may still
 * complete.
 *
 *     static int put_stdout(void *ctx, const char *p, size_t n) { ...fwrite, fflush... }
 *     struct zn_gen_text *t;
 *     rc = zn_gen_text_create(&t, stops, n_stops, put_stdout, NULL);
 *     for (each new token) {
 *             rc = zn_gen_text_put(t, piece, len);   // 1: a stop string completed
 *             if (rc) break;
 *     }
 *     rc = zn_gen_text_finish(t);                     // what was held back, if no stop
 *     zn_gen_text_destroy(t);
 *
 * Held back after each piece: the longest tail that is a proper prefix of a stop string,
 * then the bytes of an incomplete UTF-8 character before it. A byte that cannot start or
 * continue a character (invalid UTF-8, e.g. a byte-level model's stray byte) is written as
 * it is, not held: it would never complete. When a stop string appears (it may span
 * pieces), everything before its first occurrence is written and the rest dropped, as
 * Hugging Face's stop_strings end generation without printing the match. finish writes what
 * is still held (a character cut by the token limit, a stop string's unfinished prefix).
 * The writer returns 0 or a negative code, which every call passes back.
 */
#ifndef ZN_SCHED_GENERATE_TEXT_H
#define ZN_SCHED_GENERATE_TEXT_H

#include <stddef.h>

struct zn_gen_text;

typedef int (*zn_gen_text_writer)(void *ctx, const char *p, size_t n);

/* stops[0 .. n_stops): non-empty strings, copied. 0, -EINVAL (an empty stop) or -ENOMEM. */
int zn_gen_text_create(struct zn_gen_text **out, const char *const *stops, int n_stops,
		       zn_gen_text_writer write, void *ctx);
void zn_gen_text_destroy(struct zn_gen_text *t); /* accepts NULL */
/* Appends p[0 .. n) and writes what is safe. 1 when a stop string completed (then later
 * puts and finish write nothing), 0, or a negative code (-ENOMEM, the writer's). */
int zn_gen_text_put(struct zn_gen_text *t, const char *p, size_t n);
int zn_gen_text_finish(struct zn_gen_text *t);
/* The index of the stop string that ended the text, or -1. */
int zn_gen_text_stopped(const struct zn_gen_text *t);

#endif
