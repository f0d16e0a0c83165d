/* zn_io_check (fsio.h): a command's outputs against its inputs and each other, by what
 * the paths name on disk rather than how they are spelled. A path that exists is its
 * device and inode (links resolved: a hard link or a symlink to an input is the input);
 * one that does not exist yet is its resolved parent directory and name. */
#include "core/fsio.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "zinc.h"

struct ident {
	char *canon;  /* absolute, links resolved as far as the path exists */
	bool exists;  /* stat() (following links) succeeded */
	bool dir;     /* names apply: an existing directory, or an output declared one */
	dev_t dev;
	ino_t ino;
};

/* dir/base for a canonical dir: "." is dir, ".." its parent, else joined by name. */
static char *join(const char *dir, const char *base)
{
	size_t n = strlen(dir);
	char *out = malloc(n + strlen(base) + 2), *s;

	if (!out)
		return NULL;
	strcpy(out, dir);
	if (!strcmp(base, "..")) {
		s = strrchr(out, '/');
		if (s == out)
			out[1] = 0; /* "/a" -> "/" */
		else
			*s = 0; /* "/a/b" -> "/a" */
	} else if (strcmp(base, ".") && base[0]) {
		if (n > 1)
			strcat(out, "/");
		strcat(out, base);
	}
	return out;
}

/* path with its links resolved as far as it exists, the rest appended by name; NULL
 * when even "." cannot be resolved or out of memory. */
static char *canonical(const char *path, int depth)
{
	char *r = realpath(path, NULL), *copy, *slash, *out;
	size_t n = strlen(path);

	if (r || depth > 64)
		return r;
	while (n > 1 && path[n - 1] == '/')
		n--;
	copy = strndup(path, n);
	if (!copy)
		return NULL;
	slash = strrchr(copy, '/');
	if (slash && slash != copy)
		*slash = 0; /* copy is the parent, slash + 1 the name */
	r = canonical(!slash ? "." : slash == copy ? "/" : copy, depth + 1);
	out = r ? join(r, slash ? slash + 1 : copy) : NULL;
	free(r);
	free(copy);
	return out;
}

static int resolve(const struct zn_io *io, struct ident *id)
{
	struct stat st;

	memset(id, 0, sizeof(*id));
	id->canon = canonical(io->path, 0);
	if (!id->canon)
		return -ENOMEM;
	id->exists = stat(io->path, &st) == 0;
	if (id->exists) {
		id->dev = st.st_dev;
		id->ino = st.st_ino;
	}
	id->dir = io->names && (io->out || (id->exists && S_ISDIR(st.st_mode)));
	return 0;
}

static bool same(const struct ident *a, const struct ident *b)
{
	if (a->exists && b->exists)
		return a->dev == b->dev && a->ino == b->ino;
	return !a->exists && !b->exists && !strcmp(a->canon, b->canon);
}

static bool is_dir(const char *path, const struct ident *d)
{
	struct stat st;

	if (!d->exists)
		return !strcmp(path, d->canon);
	return !stat(path, &st) && st.st_dev == d->dev && st.st_ino == d->ino;
}

static bool matches(const char *const *names, const char *name)
{
	for (int i = 0; names[i]; i++)
		if (!fnmatch(names[i], name, 0))
			return true;
	return false;
}

/* Whether inner lies in the directory d (entry io) at one of its names, or deeper under
 * such a name; *name gets that name (a pointer into a static buffer). */
static bool inside(const struct ident *inner, const struct zn_io *io, const struct ident *d,
		   const char **name)
{
	static char hit[NAME_MAX + 1];
	char *p = strdup(inner->canon), *slash;
	bool found = false;

	while (p && !found && (slash = strrchr(p, '/')) && slash[1]) {
		snprintf(hit, sizeof(hit), "%s", slash + 1);
		if (slash == p)
			slash[1] = 0; /* the parent is "/" */
		else
			*slash = 0;
		found = matches(io->names, hit) && is_dir(p, d);
		if (slash == p)
			break;
	}
	free(p);
	*name = hit;
	return found;
}

/* out may be other: an input of its own kind, read whole before out is written */
static bool replaces_own_kind(const struct zn_io *out, const struct zn_io *other)
{
	return out->kind && other->kind && !other->out && !strcmp(out->kind, other->kind);
}

/* out (an output) against other: 0 or ZN_EUSAGE after the line. */
static int pair(const struct zn_io *out, const struct ident *a, const struct zn_io *other,
		const struct ident *b)
{
	const char *name;

	if (out->shared && other->shared)
		return 0; /* --save-dir and the --resume that reads it */
	if (!out->shared && !other->shared && !replaces_own_kind(out, other) && same(a, b)) {
		zn_error("%s %s and %s %s are the same %s: the %s would %s; give %s another path",
			 out->what, out->path, other->what, other->path, a->dir || b->dir ?
			 "directory" : "file", other->out ? "two outputs" : "output",
			 other->out ? "overwrite each other" : "replace the input", out->what);
		return ZN_EUSAGE;
	}
	if (a->dir && inside(b, out, a, &name)) {
		zn_error("%s %s lies inside %s %s, at %s, which %s writes: give one of them "
			 "another path", other->what, other->path, out->what, out->path, name,
			 out->what);
		return ZN_EUSAGE;
	}
	if (b->dir && inside(a, other, b, &name)) {
		zn_error("%s %s lies inside %s %s, at %s, which %s %s: give %s another path",
			 out->what, out->path, other->what, other->path, name, other->what,
			 other->out ? "writes" : "reads", out->what);
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_io_check(const struct zn_io *io, int n)
{
	struct ident *id = calloc((size_t)n + 1, sizeof(*id));
	int rc = id ? 0 : -ENOMEM;

	for (int i = 0; !rc && i < n; i++)
		if (io[i].path && io[i].path[0])
			rc = resolve(&io[i], &id[i]);
	for (int i = 0; !rc && i < n; i++) {
		if (!io[i].out || !id[i].canon)
			continue;
		/* each output against every input, and against each later output */
		for (int j = 0; !rc && j < n; j++)
			if (j != i && id[j].canon && (!io[j].out || j > i))
				rc = pair(&io[i], &id[i], &io[j], &id[j]);
	}
	for (int i = 0; id && i < n; i++)
		free(id[i].canon);
	free(id);
	return rc;
}
