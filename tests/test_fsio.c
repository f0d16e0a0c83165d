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
