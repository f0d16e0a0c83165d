/* src/core/fsio: inputs open only when regular (a FIFO refused at once, not waited on);
 * outputs through an exclusive temporary renamed into place, never following or replacing
 * a symlink, FIFO, device or directory at the destination, keeping an existing file's
 * mode; the up-front output check; byte sizes printed with a unit that suits. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsio.h"
#include "model/hf_config.h"
#include "model/hf_dir.h"
#include "zinc.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_fsio_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(fsio, .init = make_dir, .fini = remove_dir, .timeout = 60);

static const char *at(const char *name)
{
	static char p[4][160];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static void put(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	cr_assert(fd >= 0, "%s", path);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	cr_assert_eq(chmod(path, mode), 0);
}

static const char *get(const char *path)
{
	static char buf[256];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	cr_assert(fd >= 0, "%s", path);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert(n >= 0);
	buf[n] = 0;
	return buf;
}

/* Entries in dir other than the ones a test made: temporaries left behind. */
static int count_entries(void)
{
	char cmd[160];
	FILE *p;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l", dir);
	p = popen(cmd, "r");
	cr_assert(p && fscanf(p, "%d", &n) == 1);
	pclose(p);
	return n;
}

Test(fsio, inputs_must_be_regular_files)
{
	uint64_t size = 0;
	char *text = NULL;
	size_t len = 0;
	int fd;

	put(at("in.txt"), "hello", 0644);
	fd = zn_open_input_regular(at("in.txt"), "--data", &size);
	cr_assert(fd >= 0);
	cr_expect_eq(size, 5);
	cr_expect_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "blocking after the check");
	close(fd);
	cr_assert_eq(zn_read_input_file(at("in.txt"), "--config", 100, &text, &len), 0);
	cr_expect_str_eq(text, "hello");
	cr_expect_eq(len, 5);
	free(text);
	cr_expect_eq(zn_read_input_file(at("in.txt"), "--config", 4, &text, &len), -EFBIG);
	cr_expect_null(text);
	cr_expect_eq(zn_open_input_regular(at("missing"), "--data", NULL), -ENOENT);
	cr_expect_eq(zn_open_input_regular("", "--data", NULL), -ENOENT);
	cr_expect_eq(zn_open_input_regular(dir, "--data", NULL), -EISDIR);
	cr_expect_eq(zn_read_input_file(dir, "--config", 100, &text, NULL), -EISDIR);
	cr_expect_eq(zn_open_input_regular("/dev/null", "--data", NULL), -EINVAL);
	cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
	/* no writer: a blocking open would wait forever (the suite's timeout fails it) */
	cr_expect_eq(zn_open_input_regular(at("fifo"), "--init-from", NULL), -EINVAL);
	cr_expect_eq(zn_read_input_file(at("fifo"), "--config", 100, &text, NULL), -EINVAL);
	/* a symlink to a regular file is a fine input */
	cr_assert_eq(symlink(at("in.txt"), at("link")), 0);
	fd = zn_open_input_regular(at("link"), "--data", NULL);
	cr_expect(fd >= 0);
	close(fd);
}

Test(fsio, a_planted_symlink_at_a_temporary_name_is_never_written_through)
{
	char tmp_old[200];
	const char *dst = at("model.st");

	/* the name the old writer used (PATH.tmp.PID), pointing at a file the attacker wants
	 * overwritten */
	put(at("victim"), "secret", 0600);
	snprintf(tmp_old, sizeof(tmp_old), "%s.tmp.%ld", dst, (long)getpid());
	cr_assert_eq(symlink(at("victim"), tmp_old), 0);
	cr_assert_eq(zn_write_file_atomic(dst, "--save-final", "weights", 7), 0);
	cr_expect_str_eq(get(at("victim")), "secret", "the symlink's target is untouched");
	{
		struct stat st;

		cr_assert_eq(lstat(dst, &st), 0);
		cr_expect(S_ISREG(st.st_mode), "the destination is a new regular file");
		cr_assert_eq(lstat(tmp_old, &st), 0);
		cr_expect(S_ISLNK(st.st_mode), "the planted link is left as it was");
	}
	cr_expect_str_eq(get(dst), "weights");
	cr_expect_eq(count_entries(), 3, "victim, link, model.st: no temporary left");
}

Test(fsio, non_regular_destinations_are_refused_not_replaced)
{
	struct stat st;

	put(at("target"), "keep", 0600);
	cr_assert_eq(symlink(at("target"), at("link.st")), 0);
	cr_expect_eq(zn_write_file_atomic(at("link.st"), "--save-final", "new", 3), -EEXIST);
	cr_assert_eq(lstat(at("link.st"), &st), 0);
	cr_expect(S_ISLNK(st.st_mode), "the symlink is still a symlink");
	cr_expect_str_eq(get(at("target")), "keep");
	cr_expect_eq(zn_output_check(at("link.st"), "--save-final"), -EEXIST);

	cr_assert_eq(mkfifo(at("fifo.st"), 0600), 0);
	cr_expect_eq(zn_write_file_atomic(at("fifo.st"), "--save-final", "new", 3), -EEXIST);
	cr_assert_eq(lstat(at("fifo.st"), &st), 0);
	cr_expect(S_ISFIFO(st.st_mode));

	cr_assert_eq(mkdir(at("d.st"), 0755), 0);
	cr_expect_eq(zn_write_file_atomic(at("d.st"), "--save-final", "new", 3), -EISDIR);
	cr_expect_eq(zn_output_check(at("d.st"), "--save-final"), -EISDIR);
	cr_expect_eq(zn_output_check("/dev/null", "--save-final"), -EEXIST);
	cr_expect_eq(count_entries(), 4, "nothing left behind");
}

Test(fsio, an_existing_file_keeps_its_mode_and_owner)
{
	struct stat st;

	put(at("m.st"), "old", 0640);
	cr_assert_eq(zn_write_file_atomic(at("m.st"), "--save-final", "new!", 4), 0);
	cr_assert_eq(stat(at("m.st"), &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0640);
	cr_expect_str_eq(get(at("m.st")), "new!");
	if (geteuid() == 0) {
		cr_assert_eq(chown(at("m.st"), 4321, 4322), 0);
		cr_assert_eq(zn_write_file_atomic(at("m.st"), "--save-final", "again", 5), 0);
		cr_assert_eq(stat(at("m.st"), &st), 0);
		cr_expect(st.st_uid == 4321 && st.st_gid == 4322, "owner kept when root");
		cr_expect_eq(st.st_mode & 07777, 0640);
	}
	/* a new file: 0666 less the umask */
	{
		mode_t old = umask(022);

		cr_assert_eq(zn_write_file_atomic(at("n.st"), "--out", "x", 1), 0);
		umask(old);
		cr_assert_eq(stat(at("n.st"), &st), 0);
		cr_expect_eq(st.st_mode & 07777, 0644);
	}
}

Test(fsio, abort_leaves_the_destination_and_no_temporary)
{
	struct zn_atomic_file af;

	put(at("a.st"), "old", 0644);
	cr_assert_eq(zn_atomic_file_begin(&af, at("a.st"), "--save-final"), 0);
	cr_assert_eq(zn_write_all(af.fd, "partial", 7, at("a.st")), 0);
	cr_expect_eq(count_entries(), 2, "the temporary exists while writing");
	zn_atomic_file_abort(&af);
	zn_atomic_file_abort(&af); /* twice is harmless */
	cr_expect_str_eq(get(at("a.st")), "old");
	cr_expect_eq(count_entries(), 1);
}

Test(fsio, output_check_refuses_before_any_work)
{
	char sub[200];

	cr_expect_eq(zn_output_check("", "--save-final"), -EINVAL);
	cr_expect_eq(zn_output_check(at("no/such/dir/m.st"), "--save-final"), -ENOENT);
	cr_expect_eq(zn_output_check(at("x/"), "--save-final"), -EISDIR);
	cr_expect_eq(zn_output_check(at(".."), "--save-final"), -EISDIR);
	put(at("file"), "f", 0644);
	cr_expect_eq(zn_output_check(at("file/m.st"), "--save-final"), -ENOTDIR);
	cr_expect_eq(zn_output_check(at("m.st"), "--save-final"), 0);
	cr_expect_eq(zn_output_check(at("file"), "--save-final"), 0, "an existing regular file");
	cr_expect_eq(count_entries(), 1, "the probe file is removed");
	/* a read-only mount (needs mount rights: as root in most containers) */
	snprintf(sub, sizeof(sub), "%s/ro", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	if (mount("none", sub, "tmpfs", MS_RDONLY, "size=64k") == 0) {
		cr_expect_eq(zn_output_check(at("ro/m.st"), "--save-final"), -EROFS);
		cr_expect_neq(zn_write_file_atomic(at("ro/m.st"), "--save-final", "x", 1), 0);
		umount(sub);
	}
	if (geteuid() != 0) {
		cr_assert_eq(chmod(sub, 0555), 0);
		cr_expect_eq(zn_output_check(at("ro/m.st"), "--save-final"), -EACCES);
	}
}

Test(fsio, sizes_print_with_a_unit_that_suits)
{
	char b[32];

	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 0), "0 bytes");
	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 1000), "1000 bytes");
	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 4096), "4.00 KiB");
	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 3u << 20), "3.00 MiB");
	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 5ull << 29), "2.50 GiB");
	cr_expect_str_eq(zn_format_bytes(b, sizeof(b), 3ull << 40), "3.00 TiB");
}

Test(fsio, hugging_face_json_inputs_that_are_fifos_are_refused_at_once)
{
	struct zn_hf_config c;
	struct zn_hf_src *src = NULL;
	char sub[160];

	/* a model directory whose config.json is a FIFO: the old reader waited forever */
	snprintf(sub, sizeof(sub), "%s/model", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_assert_eq(mkfifo(at("model/config.json"), 0600), 0);
	cr_expect_eq(zn_hf_config_load(at("model/config.json"), &c), -EINVAL);
	cr_expect_neq(zn_hf_open(&src, sub), 0);
	cr_expect_null(src);
	cr_assert_eq(unlink(at("model/config.json")), 0);
	cr_assert_eq(mkdir(at("model/config.json"), 0755), 0);
	cr_expect_eq(zn_hf_config_load(at("model/config.json"), &c), -EISDIR);
}

Test(fsio, output_directories_are_checked_like_files)
{
	char sub[160];

	cr_expect_eq(zn_output_check_dir("", "--save-final"), -EINVAL);
	cr_expect_eq(zn_output_check_dir(at("new"), "--save-final"), 0, "absent: made later");
	cr_expect_eq(zn_output_check_dir(at("no/such/new"), "--save-final"), -ENOENT);
	snprintf(sub, sizeof(sub), "%s/out", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_expect_eq(zn_output_check_dir(sub, "--save-final"), 0, "an existing directory");
	cr_expect_eq(zn_output_check_dir(at("out/"), "--save-final"), 0, "with a trailing /");
	put(at("file"), "f", 0644);
	cr_expect_eq(zn_output_check_dir(at("file"), "--save-final"), -EEXIST);
	cr_assert_eq(symlink(sub, at("link")), 0);
	cr_expect_eq(zn_output_check_dir(at("link"), "--save-final"), -EEXIST, "not followed");
	cr_expect_eq(count_entries(), 3, "out, file, link: the probes are removed");
	snprintf(sub, sizeof(sub), "%s/ro", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	if (mount("none", sub, "tmpfs", MS_RDONLY, "size=64k") == 0) {
		cr_expect_eq(zn_output_check_dir(sub, "--save-final"), -EROFS);
		cr_expect_eq(zn_output_check_dir(at("ro/new"), "--save-final"), -EROFS);
		umount(sub);
	}
}

/* A tree with a link inside it pointing at a directory outside, and a link to that
 * directory at the top: removal takes the links, never what they point to. */
Test(fsio, removal_never_follows_a_link)
{
	char victim[160], tree[160];
	struct stat st;

	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(tree, sizeof(tree), "%s/tree", dir);
	cr_assert_eq(mkdir(victim, 0755), 0);
	put(at("victim/keep.txt"), "keep", 0644);
	cr_assert_eq(mkdir(tree, 0755), 0);
	cr_assert_eq(mkdir(at("tree/sub"), 0755), 0);
	put(at("tree/a.bin"), "a", 0644);
	put(at("tree/sub/b.bin"), "b", 0644);
	cr_assert_eq(symlink(victim, at("tree/inner-link")), 0);
	cr_assert_eq(symlink(victim, at("tree/sub/deep-link")), 0);
	cr_assert_eq(symlink(at("victim/keep.txt"), at("tree/file-link")), 0);
	cr_assert_eq(symlink(victim, at("top-link")), 0);

	cr_expect_eq(zn_remove_tree(at("top-link"), "test"), 0);
	cr_expect_neq(lstat(at("top-link"), &st), 0, "the link itself is gone");
	cr_expect_str_eq(get(at("victim/keep.txt")), "keep", "its target is untouched");
	cr_expect_eq(zn_remove_tree(at("tree/"), "test"), 0, "a trailing / is the link");
	cr_expect_neq(lstat(tree, &st), 0, "the tree is gone");
	cr_expect_str_eq(get(at("victim/keep.txt")), "keep");
	cr_expect_eq(zn_remove_tree(at("absent"), "test"), 0, "nothing to remove");
	cr_expect_eq(count_entries(), 1, "only the victim is left");
}

/* The lock is per open: a second zn_dir_lock, even in this process, is refused naming
 * the directory and the holder the lock file records. */
Test(fsio, a_locked_directory_is_refused_naming_its_holder)
{
	char sub[160], log[200], *text;
	int a = -1, b = -1, saved, fd;

	snprintf(sub, sizeof(sub), "%s/ck", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_assert_eq(zn_dir_lock(sub, "--save-dir", &a), 0);
	cr_assert_geq(a, 0);
	snprintf(log, sizeof(log), "%s/stderr.txt", dir);
	fflush(stderr);
	saved = dup(2);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	close(fd);
	cr_expect_eq(zn_dir_lock(sub, "--save-dir", &b), -EBUSY);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	cr_expect_eq(b, -1);
	cr_assert_eq(zn_read_input_file(log, "log", 1 << 16, &text, NULL), 0);
	cr_expect(strstr(text, sub) && strstr(text, "in use by another zinc run"), "%s", text);
	snprintf(log, sizeof(log), "pid %ld on host ", (long)getpid());
	cr_expect(strstr(text, log), "the holder is named: %s", text);
	free(text);
	close(a);
	cr_expect_eq(zn_dir_lock(sub, "--save-dir", &b), 0, "free again once closed");
	close(b);
	/* a link planted at the lock file's name is not followed */
	cr_assert_eq(unlink(at("ck/" ZN_DIR_LOCK_NAME)), 0);
	put(at("target"), "t", 0644);
	cr_assert_eq(symlink(at("target"), at("ck/" ZN_DIR_LOCK_NAME)), 0);
	cr_expect_neq(zn_dir_lock(sub, "--save-dir", &b), 0);
	cr_expect_str_eq(get(at("target")), "t");
}

Test(fsio, output_directories_are_made_but_never_a_link)
{
	char sub[160];
	struct stat st;

	snprintf(sub, sizeof(sub), "%s/real", dir);
	cr_expect_eq(zn_output_dir_make(sub, "--save-adapter"), 0);
	cr_expect(!lstat(sub, &st) && S_ISDIR(st.st_mode));
	cr_expect_eq(zn_output_dir_make(at("real/"), "--save-adapter"), 0, "existing");
	cr_assert_eq(symlink(sub, at("link")), 0);
	cr_expect_eq(zn_output_dir_make(at("link"), "--save-adapter"), -EEXIST);
	cr_expect_eq(zn_output_dir_make(at("link/"), "--save-adapter"), -EEXIST,
		     "a trailing / does not follow it either");
	put(at("file"), "f", 0644);
	cr_expect_eq(zn_output_dir_make(at("file"), "--save-adapter"), -EEXIST);
	cr_expect_neq(zn_output_dir_make(at("no/such/dir"), "--save-adapter"), 0);
}

static struct zn_io in(const char *path)
{
	return (struct zn_io){ .path = path, .what = "--data" };
}

static struct zn_io out(const char *path)
{
	return (struct zn_io){ .path = path, .what = "-o", .out = true };
}

static int check2(struct zn_io a, struct zn_io b)
{
	struct zn_io io[2] = { a, b };

	return zn_io_check(io, 2);
}

/* Outputs against inputs and each other by identity, however they are spelled. */
Test(fsio, outputs_are_compared_with_inputs_by_identity)
{
	static const char *const hf[] = { "config.json", "*.safetensors", NULL };
	char sub[160], rel[200], cwd[4096];

	put(at("in.txt"), "text", 0644);
	cr_assert_eq(link(at("in.txt"), at("hard.txt")), 0);
	cr_assert_eq(symlink(at("in.txt"), at("soft.txt")), 0);
	snprintf(sub, sizeof(sub), "%s/model", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_expect_eq(check2(out(at("in.txt")), in(at("in.txt"))), ZN_EUSAGE, "the same spelling");
	snprintf(rel, sizeof(rel), "%s/model/../in.txt", dir);
	cr_expect_eq(check2(out(rel), in(at("in.txt"))), ZN_EUSAGE, "through ..");
	cr_expect_eq(check2(out(at("hard.txt")), in(at("in.txt"))), ZN_EUSAGE, "a hard link");
	cr_expect_eq(check2(out(at("soft.txt")), in(at("in.txt"))), ZN_EUSAGE, "a symlink");
	cr_expect_eq(check2(out(at("out.bin")), in(at("in.txt"))), 0, "another file");
	/* two outputs that do not exist yet: the parent directory and the name */
	snprintf(rel, sizeof(rel), "%s/./model/../new.bin", dir);
	cr_expect_eq(check2(out(at("new.bin")), out(rel)), ZN_EUSAGE);
	cr_expect_eq(check2(out(at("new.bin")), out(at("new2.bin"))), 0);
	cr_assert(getcwd(cwd, sizeof(cwd)));
	cr_assert_eq(chdir(dir), 0);
	cr_expect_eq(check2(out("new.bin"), out(at("new.bin"))), ZN_EUSAGE, "relative");
	cr_expect_eq(check2(out("in.txt"), in("./in.txt")), ZN_EUSAGE);
	cr_assert_eq(chdir(cwd), 0);
	/* a directory's names: an output inside an input directory at a name it reads, an
	 * input inside an output directory at a name it writes, the directories themselves */
	put(at("model/config.json"), "{}", 0644);
	struct zn_io in_dir = { .path = sub, .what = "--init-from", .names = hf };
	struct zn_io out_dir = { .path = sub, .what = "--save-final", .out = true, .names = hf };

	cr_expect_eq(check2(out(at("model/model.safetensors")), in_dir), ZN_EUSAGE);
	cr_expect_eq(check2(out(at("model/notes.txt")), in_dir), 0, "a name it does not read");
	cr_expect_eq(check2(out_dir, in(at("model/config.json"))), ZN_EUSAGE);
	cr_expect_eq(check2(out_dir, in(at("in.txt"))), 0);
	cr_expect_eq(check2(out_dir, in_dir), ZN_EUSAGE, "the same directory");
	/* --save-dir and --resume (both shared) are the same directory by design */
	struct zn_io save = { .path = sub, .what = "--save-dir", .out = true, .names = hf,
			      .shared = true };
	struct zn_io resume = { .path = sub, .what = "--resume", .names = hf, .shared = true };

	cr_expect_eq(check2(save, resume), 0);
	cr_expect_eq(check2(save, in(at("model/config.json"))), ZN_EUSAGE, "but not other inputs");
	cr_expect_eq(check2(out(NULL), in(at("in.txt"))), 0, "a flag not given");
	/* an output over an input of its own kind (a model over the one it started from) */
	in_dir.kind = out_dir.kind = "model";
	cr_expect_eq(check2(out_dir, in_dir), 0);
	out_dir.kind = "adapter";
	cr_expect_eq(check2(out_dir, in_dir), ZN_EUSAGE, "another kind");
}
