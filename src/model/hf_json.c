/* json.dumps(indent=2, sort_keys=True) for cJSON trees; see hf_json.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf_json.h"

struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void indent(struct buf *b, int depth)
{
	for (int i = 0; i < depth; i++)
		put(b, "  ", 2);
}

static void put_string(struct buf *b, const char *s)
{
	char esc[8];

	put(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(b, esc, 2);
		} else if (c == '\n') {
			puts_(b, "\\n");
		} else if (c == '\t') {
			puts_(b, "\\t");
		} else if (c == '\r') {
			puts_(b, "\\r");
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			puts_(b, esc);
		} else {
			put(b, s, 1);
		}
	}
	put(b, "\"", 1);
}

/* Python's repr of a finite float: the shortest digits that read back, positional for
 * exponents -4 .. 15 ("500000.0", "0.02"), else "d.ddde+XX" ("1e-05", "1e+16"). */
static void python_float(char *out, size_t n, double x)
{
	char e[40], digits[24], *p;
	int nd = 0, exp, at = 0;

	for (int prec = 0; prec <= 16; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec, x);
		if (strtod(e, NULL) == x)
			break;
	}
	p = e;
	if (*p == '-')
		out[at++] = *p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	exp = atoi(p + 1);
	if (exp < -4 || exp >= 16) {
		snprintf(out + at, n - (size_t)at, "%c%s%s%se%c%02d", digits[0], nd > 1 ? "." : "",
			 digits + 1, "", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
		return;
	}
	if (exp < 0) {
		at += snprintf(out + at, n - (size_t)at, "0.");
		for (int i = 0; i < -exp - 1; i++)
			out[at++] = '0';
		snprintf(out + at, n - (size_t)at, "%s", digits);
		return;
	}
	for (int i = 0; i <= exp; i++)
		out[at++] = i < nd ? digits[i] : '0';
	out[at++] = '.';
	if (nd > exp + 1)
		snprintf(out + at, n - (size_t)at, "%s", digits + exp + 1);
	else
		snprintf(out + at, n - (size_t)at, "0");
}

cJSON *zn_hf_json_float(double x)
{
	char s[48];

	if (!isfinite(x))
		return NULL;
	python_float(s, sizeof(s), x);
	return cJSON_CreateRaw(s);
}

static void put_number(struct buf *b, double x)
{
	char s[40];

	if (x == floor(x) && fabs(x) < 9007199254740992.0)
		snprintf(s, sizeof(s), "%lld", (long long)x);
	else if (isfinite(x))
		python_float(s, sizeof(s), x);
	else
		snprintf(s, sizeof(s), "null");
	puts_(b, s);
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static void dump(struct buf *b, const cJSON *v, int depth);

static void dump_children(struct buf *b, const cJSON *v, int depth, int is_object)
{
	int n = cJSON_GetArraySize(v), i = 0;
	const cJSON **kids;
	const cJSON *c;

	put(b, is_object ? "{" : "[", 1);
	if (!n) {
		put(b, is_object ? "}" : "]", 1);
		return;
	}
	kids = malloc((size_t)n * sizeof(*kids));
	if (!kids) {
		b->oom = 1;
		return;
	}
	cJSON_ArrayForEach(c, v)
		kids[i++] = c;
	if (is_object)
		qsort(kids, (size_t)n, sizeof(*kids), cmp_key);
	for (i = 0; i < n; i++) {
		put(b, i ? ",\n" : "\n", i ? 2 : 1);
		indent(b, depth + 1);
		if (is_object) {
			put_string(b, kids[i]->string);
			put(b, ": ", 2);
		}
		dump(b, kids[i], depth + 1);
	}
	put(b, "\n", 1);
	indent(b, depth);
	put(b, is_object ? "}" : "]", 1);
	free(kids);
}

static void dump(struct buf *b, const cJSON *v, int depth)
{
	if (cJSON_IsObject(v) || cJSON_IsArray(v))
		dump_children(b, v, depth, cJSON_IsObject(v));
	else if (cJSON_IsString(v))
		put_string(b, v->valuestring);
	else if (cJSON_IsRaw(v))
		puts_(b, v->valuestring);
	else if (cJSON_IsNumber(v))
		put_number(b, v->valuedouble);
	else if (cJSON_IsTrue(v))
		puts_(b, "true");
	else if (cJSON_IsFalse(v))
		puts_(b, "false");
	else
		puts_(b, "null");
}

char *zn_hf_json_dumps(const cJSON *v)
{
	struct buf b = { 0 };

	dump(&b, v, 0);
	put(&b, "\n", 1);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
