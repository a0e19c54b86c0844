/* check_hostlock.c — the host-wide freeze lock (hostlock.h): a lock one
 * process holds is refused to every other, until it is released or its
 * holder dies (the kernel drops it); locks are counted per offset within a
 * process; ids map to stable offsets; bad lock paths fail with a clear
 * message. Other processes are forked children with their own open of the
 * file (an OFD lock never conflicts with its own open file description). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostlock.h"

#define ID_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
/* The same first 15 hex digits as ID_A: the same offset. */
#define ID_A_TWIN "0123456789abcdeffffffffffffffffffffffffffffffffffffffffffffffff0"

/* What another process's try answered (its exit status). */
enum other_try {
	OTHER_GOT = 0,       /* it took the lock (and dropped it on exit) */
	OTHER_AGAIN = 1,     /* -EAGAIN: held */
	OTHER_ERROR = 2,
};

static char dir[64];
static char path[192];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/check-hostlock-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/freeze.lock", dir);
	umask(022);
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Handles a test opened, kept reachable: other_try's forked probe exits
 * with them open, and valgrind checks that child's leaks too. */
#define OPENED_MAX 8
static struct hostlock *opened[OPENED_MAX];

static struct hostlock *open_ok(const char *p)
{
	struct hostlock *h = NULL;
	char *err = NULL;
	int r = hostlock_open(p, &h, &err);

	ck_assert_msg(r == 0, "hostlock_open(%s): %d %s", p, r, err ? err : "");
	ck_assert_ptr_nonnull(h);
	for (size_t i = 0; i < OPENED_MAX; i++)
		if (!opened[i]) {
			opened[i] = h;
			break;
		}
	return h;
}

/* Another process (its own open of the file) tries id and exits. */
static enum other_try other_try(const char *id)
{
	pid_t pid = fork();
	int status;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct hostlock *h = NULL;
		char *err = NULL;
		int r;

		if (hostlock_open(path, &h, &err) < 0)
			_exit(OTHER_ERROR);
		r = hostlock_try(h, id);
		hostlock_free(h);   /* valgrind checks this child's leaks too */
		_exit(r == 0 ? OTHER_GOT : r == -EAGAIN ? OTHER_AGAIN : OTHER_ERROR);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	return (enum other_try)WEXITSTATUS(status);
}

/* Another process takes id and keeps it until killed; its pid. */
static pid_t other_hold(const char *id)
{
	int fds[2];
	pid_t pid;
	char c = 0;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct hostlock *h = NULL;
		char *err = NULL;

		close(fds[0]);
		if (hostlock_open(path, &h, &err) < 0 || hostlock_try(h, id) < 0)
			_exit(1);
		if (write(fds[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(c, 'k');
	close(fds[0]);
	return pid;
}

/* Kills it (no cleanup of its own: the kernel drops its locks). */
static void other_kill(pid_t pid)
{
	int status;

	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}

/* ---- taking and giving back ------------------------------------------------ */

START_TEST(test_try_release)
{
	struct hostlock *h = open_ok(path);

	ck_assert_str_eq(hostlock_path(h), path);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_uint_eq(hostlock_held(h), 1);
	ck_assert_int_eq(other_try(ID_A), OTHER_AGAIN);
	ck_assert_int_eq(other_try(ID_B), OTHER_GOT);         /* another container is free */
	hostlock_release(h, ID_A);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_int_eq(other_try(ID_A), OTHER_GOT);
	/* Again after a release. */
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_int_eq(other_try(ID_A), OTHER_AGAIN);
	hostlock_release(h, ID_A);
	hostlock_release(h, ID_A);                          /* not held: nothing */
	hostlock_release(h, ID_B);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_int_eq(other_try(ID_A), OTHER_GOT);
	hostlock_free(h);
}
END_TEST

/* Counted per offset: a second try of the same id, or of a colliding one,
 * shares the byte, which stays locked until the last release. */
START_TEST(test_counted_per_offset)
{
	struct hostlock *h = open_ok(path);

	ck_assert_uint_eq(hostlock_offset(ID_A), hostlock_offset(ID_A_TWIN));
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_int_eq(hostlock_try(h, ID_A_TWIN), 0);
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_uint_eq(hostlock_held(h), 1);
	hostlock_release(h, ID_A);
	ck_assert_int_eq(other_try(ID_A), OTHER_AGAIN);
	hostlock_release(h, ID_A_TWIN);
	ck_assert_int_eq(other_try(ID_A), OTHER_AGAIN);
	hostlock_release(h, ID_A);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_int_eq(other_try(ID_A), OTHER_GOT);
	hostlock_free(h);
}
END_TEST

/* Held by another live process → -EAGAIN, and nothing is counted; its
 * death frees it, with no release of its own. */
START_TEST(test_other_process_holds_until_it_dies)
{
	pid_t pid = other_hold(ID_A);
	struct hostlock *h = open_ok(path);

	ck_assert_int_eq(hostlock_try(h, ID_A), -EAGAIN);
	ck_assert_int_eq(hostlock_try(h, ID_A), -EAGAIN);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_int_eq(hostlock_try(h, ID_B), 0);           /* only its own container */
	other_kill(pid);
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_int_eq(other_try(ID_A), OTHER_AGAIN);
	hostlock_free(h);                                     /* closing drops every lock */
	ck_assert_int_eq(other_try(ID_A), OTHER_GOT);
	ck_assert_int_eq(other_try(ID_B), OTHER_GOT);
}
END_TEST

/* No host lock (NULL): every try succeeds; bad ids are still refused. */
START_TEST(test_null_and_bad_ids)
{
	struct hostlock *h = open_ok(path);

	ck_assert_int_eq(hostlock_try(NULL, ID_A), 0);
	hostlock_release(NULL, ID_A);
	ck_assert_uint_eq(hostlock_held(NULL), 0);
	ck_assert_ptr_null(hostlock_path(NULL));
	ck_assert_ptr_null(hostlock_free(NULL));
	ck_assert_int_eq(hostlock_try(NULL, NULL), -EINVAL);
	ck_assert_int_eq(hostlock_try(h, NULL), -EINVAL);
	ck_assert_int_eq(hostlock_try(h, ""), -EINVAL);
	hostlock_release(h, NULL);
	ck_assert_uint_eq(hostlock_held(h), 0);
	ck_assert_ptr_null(hostlock_free(h));
}
END_TEST

/* ---- offsets ----------------------------------------------------------------- */

static const struct {
	const char *id;
	uint64_t offset;
} offset_rows[] = {
	/* a full id: its first 15 hex digits */
	{ ID_A, UINT64_C(0x0123456789abcde) },
	{ ID_B, UINT64_C(0xfedcba9876543210) >> 4 },
	{ "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF", UINT64_C(0x0123456789abcde) },
	{ "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", (UINT64_C(1) << 60) - 1 },
	/* anything else: FNV-1a 64 of it, cut to 60 bits (golden values) */
	{ "c1", UINT64_C(0x8a27f07b54a6859) },
	{ "maf-sandbox-docker-6f8a8ed7a21c", UINT64_C(0xfefb2f063dde8bd) },
	/* 63 hex digits is not a full id */
	{ "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde", UINT64_C(0x13ceb5f14c1df41) },
};

START_TEST(test_offsets_are_stable)
{
	uint64_t off = hostlock_offset(offset_rows[_i].id);

	ck_assert_msg(off == offset_rows[_i].offset, "%s: %#llx, want %#llx", offset_rows[_i].id,
		      (unsigned long long)off, (unsigned long long)offset_rows[_i].offset);
	ck_assert_uint_lt(off, UINT64_C(1) << HOSTLOCK_OFFSET_BITS);
	ck_assert_uint_eq(hostlock_offset(offset_rows[_i].id), off);
}
END_TEST

/* Many ids: all below the bound, and the lock at the highest offset works. */
START_TEST(test_offsets_in_range)
{
	struct hostlock *h = open_ok(path);
	char id[32];

	for (int i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "name-%d", i);
		ck_assert_uint_lt(hostlock_offset(id), UINT64_C(1) << HOSTLOCK_OFFSET_BITS);
	}
	ck_assert_uint_eq(hostlock_offset(NULL), 0);
	ck_assert_int_eq(hostlock_try(h, offset_rows[3].id), 0);
	ck_assert_int_eq(other_try(offset_rows[3].id), OTHER_AGAIN);
	hostlock_free(h);
}
END_TEST

/* ---- the file ---------------------------------------------------------------- */

/* A missing directory is made 0755, the file 0600; a second open shares it. */
START_TEST(test_file_and_directory_made)
{
	char sub[160];
	struct hostlock *h, *h2;
	struct stat st;

	snprintf(sub, sizeof(sub), "%s/run/freeze.lock", dir);
	h = open_ok(sub);
	snprintf(path, sizeof(path), "%s", sub);   /* other_try opens this one */
	ck_assert_int_eq(stat(sub, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, HOSTLOCK_FILE_MODE);
	snprintf(sub, sizeof(sub), "%s/run", dir);
	ck_assert_int_eq(stat(sub, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, HOSTLOCK_DIR_MODE);
	h2 = open_ok(path);
	ck_assert_int_eq(hostlock_try(h, ID_A), 0);
	ck_assert_int_eq(hostlock_try(h2, ID_A), -EAGAIN);   /* another open: another holder */
	hostlock_free(h);
	ck_assert_int_eq(hostlock_try(h2, ID_A), 0);
	hostlock_free(h2);
}
END_TEST

enum bad_kind {
	BAD_AS_GIVEN,        /* the path as written */
	BAD_DIRECTORY,       /* dir/d is a directory */
	BAD_LINK,            /* dir/l links to a regular file */
	BAD_FIFO,            /* dir/f is a fifo */
	BAD_NO_PARENT,       /* dir/a/b/freeze.lock: two levels missing */
	BAD_PARENT_FILE,     /* dir/file/freeze.lock: the parent is a file */
};

static const struct {
	enum bad_kind kind;
	const char *given;
	int error;
	const char *text;    /* in the message */
} bad_rows[] = {
	{ BAD_AS_GIVEN, "", -EINVAL, "absolute" },
	{ BAD_AS_GIVEN, "freeze.lock", -EINVAL, "absolute" },
	{ BAD_AS_GIVEN, "/", -EINVAL, "absolute" },
	{ BAD_AS_GIVEN, "/tmp/", -EINVAL, "absolute" },
	{ BAD_DIRECTORY, NULL, -EISDIR, "cannot open" },
	{ BAD_LINK, NULL, -ELOOP, "symbolic link" },
	{ BAD_FIFO, NULL, -EINVAL, "not a regular file" },
	{ BAD_NO_PARENT, NULL, -ENOENT, "cannot create the directory" },
	{ BAD_PARENT_FILE, NULL, -ENOTDIR, "Not a directory" },
};

START_TEST(test_bad_paths)
{
	char p[256], target[192];
	struct hostlock *h = NULL;
	char *err = NULL;
	FILE *f;
	int r;

	switch (bad_rows[_i].kind) {
	case BAD_AS_GIVEN:
		snprintf(p, sizeof(p), "%s", bad_rows[_i].given);
		break;
	case BAD_DIRECTORY:
		snprintf(p, sizeof(p), "%s/d", dir);
		ck_assert_int_eq(mkdir(p, 0755), 0);
		break;
	case BAD_LINK:
		snprintf(target, sizeof(target), "%s/target", dir);
		f = fopen(target, "w");
		ck_assert_ptr_nonnull(f);
		fclose(f);
		snprintf(p, sizeof(p), "%s/l", dir);
		ck_assert_int_eq(symlink(target, p), 0);
		break;
	case BAD_FIFO:
		snprintf(p, sizeof(p), "%s/f", dir);
		ck_assert_int_eq(mkfifo(p, 0600), 0);
		break;
	case BAD_NO_PARENT:
		snprintf(p, sizeof(p), "%s/a/b/freeze.lock", dir);
		break;
	case BAD_PARENT_FILE:
		snprintf(target, sizeof(target), "%s/file", dir);
		f = fopen(target, "w");
		ck_assert_ptr_nonnull(f);
		fclose(f);
		snprintf(p, sizeof(p), "%s/file/freeze.lock", dir);
		break;
	default:
		ck_abort_msg("unreachable");
	}
	r = hostlock_open(p, &h, &err);
	ck_assert_int_eq(r, bad_rows[_i].error);
	ck_assert_ptr_null(h);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, bad_rows[_i].text), "%s", err);
	if (p[0] == '/' && bad_rows[_i].kind != BAD_AS_GIVEN)
		ck_assert_msg(strstr(err, dir), "the message names the path: %s", err);
	free(err);
	err = NULL;
	ck_assert_int_eq(hostlock_open(NULL, &h, &err), -EINVAL);
	ck_assert_ptr_null(h);
	free(err);
}
END_TEST

/* ---- the suite ------------------------------------------------------------ */

static Suite *hostlock_suite(void)
{
	Suite *s = suite_create("hostlock");
	TCase *tc;

	tc = tcase_create("locks");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_try_release);
	tcase_add_test(tc, test_counted_per_offset);
	tcase_add_test(tc, test_other_process_holds_until_it_dies);
	tcase_add_test(tc, test_null_and_bad_ids);
	suite_add_tcase(s, tc);

	tc = tcase_create("offsets");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_offsets_are_stable, 0, (int)(sizeof(offset_rows) / sizeof(offset_rows[0])));
	tcase_add_test(tc, test_offsets_in_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_file_and_directory_made);
	tcase_add_loop_test(tc, test_bad_paths, 0, (int)(sizeof(bad_rows) / sizeof(bad_rows[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hostlock_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
