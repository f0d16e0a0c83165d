/* Reading JSON files and values (json.h): a file into a tree, a string with its length, an
 * integer exactly from its literal. The parser is json.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/json.h"

int zn_json_load(const char *path, const char *what, size_t max_bytes,
		 const struct zn_json_opts *opts, cJSON **out)
{
	struct zn_json_opts o = { 0 };
	char *text = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	if (opts)
		o = *opts;
	if (!o.origin)
		o.origin = path;
	/* a regular file only (core/fsio): a FIFO or directory is refused, never waited on */
	rc = zn_read_input_file(path, what, max_bytes, &text, &len);
	if (!rc)
		rc = zn_json_parse(text, len, &o, out);
	free(text);
	return rc;
}

const char *zn_json_string(const cJSON *v, size_t *len)
{
	size_t n;

	if (!cJSON_IsString(v) || !v->valuestring)
		return NULL;
	/* zn_json_parse keeps the decoded length in valuedouble; a string made in memory
	 * (cJSON_CreateString) has 0 there and no NUL inside */
	n = strlen(v->valuestring);
	if (v->valuedouble > (double)n)
		n = (size_t)v->valuedouble;
	*len = n;
	return v->valuestring;
}

int zn_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	const char *s = cJSON_IsNumber(v) ? v->valuestring : NULL;
	char *end;
	long long x;

	if (!cJSON_IsNumber(v))
		return -EDOM;
	if (!s) { /* a number made in memory: its double */
		double d = v->valuedouble;

		if (!(d >= -9.2e18 && d <= 9.2e18))
			return d == d ? -ERANGE : -EDOM;
		if (d != (double)(int64_t)d)
			return -EDOM;
		x = (long long)d;
	} else {
		if (strpbrk(s, ".eE"))
			return -EDOM; /* 5.0 and 1e3 are floats in Python */
		errno = 0;
		x = strtoll(s, &end, 10);
		if (errno == ERANGE)
			return -ERANGE;
		if (*end || end == s)
			return -EDOM;
	}
	if (x < lo || x > hi)
		return -ERANGE;
	*out = x;
	return 0;
}
