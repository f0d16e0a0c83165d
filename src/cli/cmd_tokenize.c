/* zinc tokenize: text files (one document each) or JSONL ({"text": ...} per line) to llm.c
 * token files with a Hugging Face tokenizer (src/data/tokenizer.h). Streams the inputs in
 * batches of documents, encodes each batch on every core (OpenMP over documents; output
 * in input order), and sends whole documents to the validation file by a seeded hash. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "data/tokfile.h"
#include "zinc.h"

#define BATCH_BYTES ((size_t)32 << 20)
#define BATCH_DOCS 65536
#define TEXT_FILE_MAX ((size_t)1 << 31)

struct doc {
	char *text; /* the raw line (JSONL) or file contents */
	size_t len;
	bool jsonl;
	const char *file;
	uint64_t line;
	struct zn_ids ids, mask; /* mask: --template */
	int rc;
};

struct tz {
	const struct zn_tok *tok;
	enum zn_sft_template tmpl;
	struct zn_tok_scratch **scratch;
	int threads;
	double val_fraction;
	uint64_t seed, docs, val_docs, bytes, total_bytes;
	struct zn_tokfile train, val;
	bool progress;
	double t0;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc tokenize --tokenizer DIR|tokenizer.json -o OUT.bin [options] INPUT...\n"
		"\n"
		"INPUT: a text file (one document) or a .jsonl file (one {\"text\": ...} document per\n"
		"line). Each document is written as llm.c does: the tokenizer's BOS (or, when it adds\n"
		"none, its EOS / <|endoftext|>) before it, its EOS after it when add_eos_token is set.\n"
		"\n"
		"  --tokenizer P       a model directory holding tokenizer.json (and\n"
		"                      tokenizer_config.json), or the tokenizer.json file\n"
		"  --init-from DIR     the model directory whose tokenizer to use (as --tokenizer DIR)\n"
		"  -o, --output FILE   the training token file (GPT-2 header + uint16 when the vocab\n"
		"                      fits 65536, else the Llama 3 header + uint32)\n"
		"  --val-fraction F    send this fraction of whole documents (0..1) to the\n"
		"                      validation file (default 0)\n"
		"  --val-output FILE   the validation file (default: OUT with _val before .bin)\n"
		"  --seed N            which documents go to validation (default 1234)\n"
		"  --threads N         encoding threads (default: every core)\n"
		"  --template NAME     .jsonl lines are conversations, {\"messages\": [{\"role\",\n"
		"                      \"content\"}, ...]}, rendered with the built-in template\n"
		"                      llama3 or chatml (not the Jinja chat_template) into a masked\n"
		"                      token file: only the assistant's tokens are labels\n"
		"  --quiet             no progress bar\n");
}

static int encode_doc(struct tz *z, struct zn_tok_scratch *s, struct doc *d)
{
	const char *text = d->text;
	size_t len = d->len;
	cJSON *root = NULL;
	int rc = 0;

	if (z->tmpl && !d->jsonl) {
		zn_error("%s: --template reads conversations from .jsonl files", d->file);
		return -EINVAL;
	}
	if (z->tmpl)
		return zn_sft_encode(z->tok, s, z->tmpl, d->text, d->len, d->file, d->line, &d->ids,
				     &d->mask);
	if (d->jsonl) {
		/* core/json, as Python's json.loads: the line number in errors, the last of a
		 * repeated key, and the text's length through \u0000 */
		struct zn_json_opts o = { .origin = d->file, .line = d->line,
					  .flags = ZN_JSON_NUL_OK | ZN_JSON_QUIET_DUP };

		if (zn_json_parse(d->text, d->len, &o, &root))
			return -EINVAL;
		text = zn_json_string(cJSON_GetObjectItemCaseSensitive(root, "text"), &len);
		if (!text) {
			zn_error("%s:%llu: each JSONL line needs a \"text\" string", d->file,
				 (unsigned long long)d->line);
			cJSON_Delete(root);
			return -EINVAL;
		}
	}
	if (zn_tok_adds_bos(z->tok))
		rc = zn_ids_push(&d->ids, zn_tok_bos(z->tok));
	else
		rc = zn_ids_push(&d->ids, zn_tok_eos(z->tok));
	if (!rc)
		rc = zn_tok_encode(z->tok, s, text, len, &d->ids);
	if (!rc && zn_tok_adds_eos(z->tok))
		rc = zn_ids_push(&d->ids, zn_tok_eos(z->tok));
	cJSON_Delete(root);
	return rc;
}

static void show_progress(struct tz *z, bool last)
{
	double dt = now_s() - z->t0, mb = (double)z->bytes / 1e6;
	int w = 30, fill = z->total_bytes ? (int)((double)w * (double)z->bytes / (double)z->total_bytes) : w;

	if (!z->progress)
		return;
	if (fill > w)
		fill = w;
	fprintf(stderr, "\rtokenize [%.*s%*s] %5.1f%% %.1f MB/s %llu docs", fill,
		"##############################", w - fill, "",
		z->total_bytes ? 100.0 * (double)z->bytes / (double)z->total_bytes : 100.0,
		dt > 0 ? mb / dt : 0.0, (unsigned long long)z->docs);
	if (last)
		fputc('\n', stderr);
}

static int flush_batch(struct tz *z, struct doc *docs, size_t n)
{
	int rc = 0;

#pragma omp parallel for schedule(dynamic, 1) num_threads(z->threads)
	for (size_t i = 0; i < n; i++)
		docs[i].rc = encode_doc(z, z->scratch[omp_get_thread_num()], &docs[i]);
	for (size_t i = 0; i < n; i++) {
		bool val = z->val_fraction > 0 &&
			   (double)(mix(z->seed ^ mix(z->docs)) >> 11) * 0x1p-53 < z->val_fraction;

		if (!rc)
			rc = docs[i].rc;
		if (!rc && z->tmpl)
			rc = zn_tokfile_append_masked(val ? &z->val : &z->train, docs[i].ids.v,
						      docs[i].mask.v, docs[i].ids.n);
		else if (!rc)
			rc = zn_tokfile_append(val ? &z->val : &z->train, docs[i].ids.v, docs[i].ids.n);
		z->docs++;
		z->val_docs += val;
		z->bytes += docs[i].len + (docs[i].jsonl ? 1 : 0);
		zn_ids_free(&docs[i].ids);
		zn_ids_free(&docs[i].mask);
		free(docs[i].text);
		docs[i].text = NULL;
	}
	show_progress(z, false);
	return rc;
}

static bool is_jsonl(const char *path)
{
	size_t n = strlen(path);

	return (n > 6 && !strcmp(path + n - 6, ".jsonl")) || (n > 5 && !strcmp(path + n - 5, ".json"));
}

static int run_inputs(struct tz *z, char **inputs, int n_inputs)
{
	struct doc *docs = calloc(BATCH_DOCS, sizeof(*docs));
	size_t nd = 0, bytes = 0;
	int rc = 0;

	if (!docs)
		return -ENOMEM;
	for (int f = 0; f < n_inputs && !rc; f++) {
		if (!is_jsonl(inputs[f])) {
			char *text = NULL;
			size_t len = 0;

			rc = zn_read_input_file(inputs[f], "input", TEXT_FILE_MAX, &text, &len);
			if (rc)
				break;
			docs[nd++] = (struct doc){ .text = text, .len = len, .file = inputs[f] };
			bytes += len;
		} else {
			FILE *fp = fopen(inputs[f], "r");
			char *line = NULL;
			size_t cap = 0;
			ssize_t got;
			uint64_t lineno = 0;

			if (!fp) {
				rc = zn_check_errno(-1, inputs[f], __FILE__, __LINE__);
				break;
			}
			while (!rc && (got = getline(&line, &cap, fp)) >= 0) {
				lineno++;
				while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
					got--;
				if (got == 0)
					continue;
				char *copy = malloc((size_t)got + 1);

				if (!copy) {
					rc = -ENOMEM;
					break;
				}
				memcpy(copy, line, (size_t)got);
				copy[got] = 0;
				docs[nd++] = (struct doc){ .text = copy, .len = (size_t)got, .jsonl = true,
							   .file = inputs[f], .line = lineno };
				bytes += (size_t)got;
				if (nd == BATCH_DOCS || bytes >= BATCH_BYTES) {
					rc = flush_batch(z, docs, nd);
					nd = bytes = 0;
				}
			}
			free(line);
			fclose(fp);
		}
		if (!rc && (nd == BATCH_DOCS || bytes >= BATCH_BYTES)) {
			rc = flush_batch(z, docs, nd);
			nd = bytes = 0;
		}
	}
	if (!rc && nd)
		rc = flush_batch(z, docs, nd);
	for (size_t i = 0; i < nd; i++) {
		free(docs[i].text);
		zn_ids_free(&docs[i].ids);
		zn_ids_free(&docs[i].mask);
	}
	free(docs);
	return rc;
}

static char *default_val_path(const char *out)
{
	size_t n = strlen(out);
	char *p = malloc(n + 8);

	if (!p)
		return NULL;
	if (n > 4 && !strcmp(out + n - 4, ".bin"))
		sprintf(p, "%.*s_val.bin", (int)(n - 4), out);
	else
		sprintf(p, "%s_val", out);
	return p;
}

static int total_size(char **inputs, int n, uint64_t *total)
{
	*total = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;

		if (stat(inputs[i], &st) || !S_ISREG(st.st_mode)) {
			zn_error("input %s: not a readable regular file (give text or .jsonl files)",
				 inputs[i]);
			return ZN_EUSAGE;
		}
		*total += (uint64_t)st.st_size;
	}
	return 0;
}

/* The outputs are neither an input nor each other, by identity (core/fsio.h): -o equal
 * to an input would replace the text with its tokens, -o equal to --val-output would
 * keep one split only. */
static int check_paths(const char *tok, const char *out, const char *val_out, char **inputs,
		       int n_in)
{
	static const char *const tok_names[] = { "tokenizer.json", "tokenizer_config.json",
						 NULL };
	struct zn_io *io = calloc((size_t)n_in + 4, sizeof(*io));
	char *sibling = NULL;
	const char *slash = strrchr(tok, '/');
	struct stat st;
	int n = 0, rc;

	if (!io)
		return -ENOMEM;
	io[n++] = (struct zn_io){ .path = out, .what = "-o", .out = true };
	io[n++] = (struct zn_io){ .path = val_out, .what = "--val-output", .out = true };
	io[n++] = (struct zn_io){ .path = tok, .what = "--tokenizer", .names = tok_names };
	/* a tokenizer.json file is read with the tokenizer_config.json beside it */
	if ((stat(tok, &st) || !S_ISDIR(st.st_mode)) &&
	    asprintf(&sibling, "%.*s%stokenizer_config.json", slash ? (int)(slash - tok) : 0,
		     tok, slash ? "/" : "") < 0)
		sibling = NULL;
	io[n++] = (struct zn_io){ .path = sibling, .what = "--tokenizer" };
	for (int i = 0; i < n_in; i++)
		io[n++] = (struct zn_io){ .path = inputs[i], .what = "input" };
	rc = zn_io_check(io, n);
	free(sibling);
	free(io);
	return rc;
}

int zn_cmd_tokenize(int argc, char **argv)
{
	const char *tok_path = NULL, *out = NULL, *val_out = NULL;
	char **inputs = calloc((size_t)argc, sizeof(char *));
	char *val_default = NULL;
	struct zn_tok *tok = NULL;
	struct tz z = { .seed = 1234, .threads = omp_get_max_threads() };
	bool quiet = false, val_open = false, train_open = false;
	int n_in = 0, rc = 0;

	if (!inputs)
		return 1;
	for (int i = 1; i < argc && !rc; i++) {
		const char *a = argv[i];
		const char *v;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			free(inputs);
			return 0;
		} else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--init-from")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			tok_path = v;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			out = v;
		} else if (!strcmp(a, "--val-output")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			val_out = v;
		} else if (!strcmp(a, "--val-fraction")) {
			char *end = NULL;

			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc) {
				z.val_fraction = strtod(v, &end);
				if (*end || end == v || !(z.val_fraction >= 0 && z.val_fraction < 1)) {
					zn_error("--val-fraction %s: give a fraction in [0, 1), e.g. 0.01", v);
					rc = ZN_EUSAGE;
				}
			}
		} else if (!strcmp(a, "--seed")) {
			uint64_t s;

			rc = zn_cli_count(argc, argv, &i, &s);
			z.seed = s;
		} else if (!strcmp(a, "--threads")) {
			rc = zn_cli_int(argc, argv, &i, 1, 4096, &z.threads);
		} else if (!strcmp(a, "--template")) {
			rc = (v = zn_cli_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc)
				rc = zn_sft_template_parse(v, &z.tmpl);
		} else if (!strcmp(a, "--quiet")) {
			quiet = true;
		} else if (a[0] == '-' && a[1]) {
			zn_error("zinc tokenize: unknown option '%s' (see zinc tokenize --help)", a);
			rc = ZN_EUSAGE;
		} else {
			inputs[n_in++] = argv[i];
		}
	}
	if (!rc && (!tok_path || !out || !n_in)) {
		zn_error("zinc tokenize: give --tokenizer DIR|FILE, -o OUT.bin and at least one "
			 "input file (zinc tokenize --help)");
		rc = ZN_EUSAGE;
	}
	if (!rc && !val_out && z.val_fraction > 0) {
		val_out = val_default = default_val_path(out);
		rc = val_out ? 0 : -ENOMEM;
	}
	if (!rc)
		rc = check_paths(tok_path, out, z.val_fraction > 0 ? val_out : NULL, inputs, n_in);
	if (!rc)
		rc = total_size(inputs, n_in, &z.total_bytes);
	if (rc)
		goto out;
	if ((rc = zn_tok_load(&tok, tok_path))) {
		rc = ZN_EUSAGE;
		goto out;
	}
	z.tok = tok;
	if (zn_tok_bos(tok) < 0 && zn_tok_eos(tok) < 0) {
		zn_error("--tokenizer %s: neither a BOS nor an EOS token: documents cannot be "
			 "delimited (set bos_token or eos_token in tokenizer_config.json)", tok_path);
		rc = ZN_EUSAGE;
		goto out;
	}
	if (z.tmpl && (rc = zn_sft_check(tok, z.tmpl, tok_path)))
		goto out;
	z.scratch = calloc((size_t)z.threads, sizeof(*z.scratch));
	for (int t = 0; z.scratch && t < z.threads; t++)
		if (!(z.scratch[t] = zn_tok_scratch_new(tok)))
			rc = -ENOMEM;
	if (!z.scratch)
		rc = -ENOMEM;
	if (!rc && !(rc = z.tmpl ? zn_tokfile_begin_masked(&z.train, out) :
			  zn_tokfile_begin(&z.train, out, zn_tok_vocab(tok))))
		train_open = true;
	if (!rc && z.val_fraction > 0 &&
	    !(rc = z.tmpl ? zn_tokfile_begin_masked(&z.val, val_out) :
		   zn_tokfile_begin(&z.val, val_out, zn_tok_vocab(tok))))
		val_open = true;
	if (rc)
		goto out;
	/* the token each document starts with, recorded for --packing documents */
	z.train.doc_token = z.tmpl ? zn_sft_delimiter(tok, z.tmpl) :
			    zn_tok_adds_bos(tok) ? zn_tok_bos(tok) : zn_tok_eos(tok);
	z.val.doc_token = z.train.doc_token;
	z.progress = !quiet && (z.total_bytes >= ((uint64_t)16 << 20) || isatty(2));
	z.t0 = now_s();
	rc = run_inputs(&z, inputs, n_in);
	if (rc == ZN_EUSAGE)
		rc = -EIO; /* bad data is a runtime failure (exit 1), not a bad flag */
	show_progress(&z, true);
	if (!rc) {
		train_open = false;
		rc = zn_tokfile_commit(&z.train);
	}
	if (!rc && val_open) {
		val_open = false;
		rc = zn_tokfile_commit(&z.val);
	}
	if (!rc) {
		double dt = now_s() - z.t0;
		uint64_t toks = z.train.count + z.val.count;

		printf("tokenize: %llu documents, %llu tokens -> %s (%s, %s header)\n",
		       (unsigned long long)(z.docs - z.val_docs), (unsigned long long)z.train.count,
		       out, z.train.u32 ? "uint32" : "uint16", z.tmpl ? "masked" :
		       z.train.u32 ? "Llama 3" : "GPT-2");
		if (z.tmpl)
			printf("tokenize: template %s: %llu of the tokens are labels (assistant)\n",
			       zn_sft_template_name(z.tmpl), (unsigned long long)z.train.labels);
		if (z.val_fraction > 0)
			printf("tokenize: %llu documents, %llu tokens -> %s (validation)\n",
			       (unsigned long long)z.val_docs, (unsigned long long)z.val.count, val_out);
		printf("tokenize: %s, %s, vocab %lld; %.1f MB in %.2f s: %.1f MB/s, %.2fM tokens/s "
		       "on %d threads\n", tok_path, zn_tok_kind(tok), (long long)zn_tok_vocab(tok),
		       (double)z.bytes / 1e6, dt, dt > 0 ? (double)z.bytes / 1e6 / dt : 0.0,
		       dt > 0 ? (double)toks / 1e6 / dt : 0.0, z.threads);
	}
out:
	if (train_open)
		zn_tokfile_abort(&z.train);
	if (val_open)
		zn_tokfile_abort(&z.val);
	for (int t = 0; z.scratch && t < z.threads; t++)
		zn_tok_scratch_free(z.scratch[t]);
	free(z.scratch);
	zn_tok_free(tok);
	free(val_default);
	free(inputs);
	if (rc == ZN_EUSAGE)
		return ZN_EXIT_USAGE;
	return rc ? 1 : 0;
}
