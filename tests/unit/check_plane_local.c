/* check_plane_local.c — the local file plane (plane_local.h) against a
 * hostile tree on this host. No Docker: the "container root" is a mkdtemp
 * directory opened O_PATH|O_DIRECTORY and passed as root; each test (forked)
 * builds its own layout beneath it:
 *
 *   /w                     the working directory
 *   /w-outside/secret.txt  what an escape would reach
 *   /w/link-dir  -> /w-outside               (absolute: unconfined, it would
 *   /w/link-file -> /w-outside/secret.txt     name the HOST's path)
 *   /w/rel-link  -> ../w-outside
 *   /w/real/inside.txt, /w/plain.txt, /w/fifo, /w/hard.txt (+ /w/hard-link.txt)
 *
 * Every call is checked for its outcome (the wire code, and the errno an
 * OSError names), for what it left on disk (the secret, the link targets, no
 * temporary file), and for what it leaves behind in the process: no
 * descriptor, and the daemon's credentials again (fsuid and fsgid 0, its
 * supplementary groups, its effective capabilities). Mounts are made in a
 * private mount namespace of the forked test; the recycled-pid test runs
 * in a pid namespace of its own, with its own /proc.
 *
 * The tests need root (they take a guest's credentials, mount, pin other
 * processes) and openat2 (valgrind 3.19 does not know it): without either,
 * the whole suite says why and is skipped (exit 77). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "cleanup.h"
#include "errors.h"
#include "paths.h"
#include "plane_local.h"
#include "xmalloc.h"

#define SECRET        "top secret\n"
#define INSIDE        "inside\n"
#define PLAIN         "plain text\n"
#define GUEST_ID      65534
#define TEMP_PREFIX   ".maf-sandbox-"
/* The supplementary groups each test sets before it starts: a call must put
 * back exactly these. */
static const gid_t test_groups[] = { 0, 4, 27 };
#define GROUPS_MAX    64
/* The guard against a read that blocks (a FIFO opened for reading). */
#define BLOCK_GUARD_S 2
/* Tries at getting a reaped child's pid for a new child. */
#define RECYCLE_TRIES 50
/* A container id is matched as a substring of /proc/<pid>/cgroup: at least this long. */
#define ID_MIN_LEN    12

static const struct plocal_cred guest_root = { 0, 0 };
static const struct plocal_cred nobody = { GUEST_ID, GUEST_ID };

/* The suite's own directory (main makes it and removes it at the end, even
 * after a failed test); each test has a root beneath it. */
static char suite_dir[64];

/* ---- credentials ---------------------------------------------------------- */

struct creds {
	uid_t fsuid;
	gid_t fsgid;
	int n_groups;
	gid_t groups[GROUPS_MAX];
	uint32_t eff[2], prm[2];
};

static void caps_now(uint32_t eff[2], uint32_t prm[2])
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	/* Zeroed: valgrind knows capget writes only the first of the two. */
	struct __user_cap_data_struct d[2] = { { 0 } };

	ck_assert_int_eq(syscall(SYS_capget, &h, d), 0);
	eff[0] = d[0].effective;
	eff[1] = d[1].effective;
	if (prm) {
		prm[0] = d[0].permitted;
		prm[1] = d[1].permitted;
	}
}

static void caps_set_eff(const uint32_t eff[2])
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };

	ck_assert_int_eq(syscall(SYS_capget, &h, d), 0);
	d[0].effective = eff[0];
	d[1].effective = eff[1];
	ck_assert_int_eq(syscall(SYS_capset, &h, d), 0);
}

static void creds_now(struct creds *c)
{
	*c = (struct creds){ 0 };
	c->fsuid = (uid_t)setfsuid((uid_t)-1);
	c->fsgid = (gid_t)setfsgid((gid_t)-1);
	c->n_groups = getgroups(GROUPS_MAX, c->groups);
	ck_assert_int_ge(c->n_groups, 0);
	caps_now(c->eff, c->prm);
}

/* What the process was when the test began. */
static struct creds daemon_creds;

static void creds_are_daemons_(const char *where, int line)
{
	struct creds now;

	creds_now(&now);
	ck_assert_msg(now.fsuid == 0 && now.fsgid == 0, "%s (line %d): fsuid/fsgid %u/%u after the call", where,
		      line, (unsigned)now.fsuid, (unsigned)now.fsgid);
	ck_assert_msg(now.n_groups == daemon_creds.n_groups &&
		      memcmp(now.groups, daemon_creds.groups, (size_t)now.n_groups * sizeof(gid_t)) == 0,
		      "%s (line %d): %d supplementary groups after the call, %d before", where, line, now.n_groups,
		      daemon_creds.n_groups);
	ck_assert_msg(now.eff[0] == daemon_creds.eff[0] && now.eff[1] == daemon_creds.eff[1],
		      "%s (line %d): effective capabilities %08x%08x after the call, %08x%08x before", where, line,
		      now.eff[1], now.eff[0], daemon_creds.eff[1], daemon_creds.eff[0]);
	ck_assert_msg(now.prm[0] == daemon_creds.prm[0] && now.prm[1] == daemon_creds.prm[1],
		      "%s (line %d): permitted capabilities changed", where, line);
}
#define creds_are_daemons() creds_are_daemons_(__func__, __LINE__)

/* ---- the layout ------------------------------------------------------------ */

static char top[128];        /* this test's root, on the host */
static int root = -1;        /* ... opened O_PATH|O_DIRECTORY */

/* The host path of a guest path ("/w/x" or "w/x"); a few live at once. */
static const char *H(const char *guest)
{
	static char bufs[8][PATH_MAX];
	static unsigned next;
	char *b = bufs[next++ % ELEMENTSOF(bufs)];

	int n = snprintf(b, PATH_MAX, "%s/%s", top, guest[0] == '/' ? guest + 1 : guest);

	ck_assert_msg(n > 0 && n < PATH_MAX, "a path too long for the test");
	return b;
}

static void put(const char *guest, const void *data, size_t len, mode_t mode)
{
	_cleanup_close_ int fd = open(H(guest), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);

	ck_assert_msg(fd >= 0, "creating %s: %s", guest, strerror(errno));
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, mode), 0);
}

static void put_s(const char *guest, const char *s)
{
	put(guest, s, strlen(s), 0644);
}

static void mkdir_ok(const char *guest, mode_t mode)
{
	ck_assert_msg(mkdir(H(guest), mode) == 0, "mkdir %s: %s", guest, strerror(errno));
	ck_assert_int_eq(chmod(H(guest), mode), 0);
}

static void symlink_ok(const char *target, const char *guest)
{
	ck_assert_msg(symlink(target, H(guest)) == 0, "symlink %s: %s", guest, strerror(errno));
}

/* The whole content of a host file (malloc'd, NUL-terminated), or NULL when absent. */
static char *slurp(const char *guest, size_t *ret_len)
{
	_cleanup_close_ int fd = open(H(guest), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	size_t len = 0, cap = 256;
	char *buf;

	if (fd < 0) {
		ck_assert_msg(errno == ENOENT, "opening %s: %s", guest, strerror(errno));
		return NULL;
	}
	buf = xmalloc(cap);
	for (;;) {
		ssize_t n;

		if (len + 1 == cap)
			buf = xrealloc(buf, cap *= 2);
		n = read(fd, buf + len, cap - 1 - len);
		ck_assert_int_ge(n, 0);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return buf;
}

static void content_is(const char *guest, const char *want)
{
	_cleanup_free_ char *got = slurp(guest, NULL);

	ck_assert_msg(got, "%s is gone", guest);
	ck_assert_str_eq(got, want);
}

static bool exists(const char *guest)
{
	struct stat sb;

	return lstat(H(guest), &sb) == 0;
}

static mode_t lmode(const char *guest)
{
	struct stat sb;

	ck_assert_msg(lstat(H(guest), &sb) == 0, "lstat %s: %s", guest, strerror(errno));
	return sb.st_mode;
}

/* The names in a host directory (sorted, comma-joined, malloc'd). */
static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *names_in(const char *guest)
{
	_cleanup_free_ char **names = NULL;
	size_t n = 0, len = 1;
	struct dirent *de;
	DIR *d = opendir(H(guest));
	char *out, *p;

	ck_assert_msg(d, "opendir %s: %s", guest, strerror(errno));
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		names = xrealloc(names, (n + 1) * sizeof(*names));
		names[n++] = xstrdup(de->d_name);
		len += strlen(de->d_name) + 1;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), name_cmp);
	out = p = xmalloc(len);
	*p = '\0';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		p = stpcpy(p, names[i]);
		free(names[i]);
	}
	return out;
}

static void names_are(const char *guest, const char *want)
{
	_cleanup_free_ char *got = names_in(guest);

	ck_assert_msg(strcmp(got, want) == 0, "%s holds [%s], expected [%s]", guest, got, want);
}

/* No temporary file of a write under guest dir (recursively). */
static int temp_seen;

static int temp_visit(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
	(void)sb, (void)flag;
	if (strncmp(path + f->base, TEMP_PREFIX, strlen(TEMP_PREFIX)) == 0) {
		fprintf(stderr, "temporary file left behind: %s\n", path);
		temp_seen++;
	}
	return 0;
}

static void no_temp_under(const char *guest)
{
	temp_seen = 0;
	ck_assert_int_eq(nftw(H(guest), temp_visit, 16, FTW_PHYS), 0);
	ck_assert_msg(temp_seen == 0, "%d temporary files under %s", temp_seen, guest);
}

/* Nothing outside the working directory was touched: the secret is whole,
 * alone, and the links still name it. */
static void outside_intact(void)
{
	char buf[PATH_MAX];
	ssize_t n;

	names_are("/w-outside", "secret.txt");
	content_is("/w-outside/secret.txt", SECRET);
	ck_assert(S_ISREG(lmode("/w-outside/secret.txt")));
	ck_assert_uint_eq(lmode("/w-outside/secret.txt") & 07777, 0600);
	n = readlink(H("/w/link-dir"), buf, sizeof(buf) - 1);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "/w-outside");
	n = readlink(H("/w/link-file"), buf, sizeof(buf) - 1);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "/w-outside/secret.txt");
}

static void setup(void)
{
	ck_assert_msg(geteuid() == 0, "the local plane's tests run as root");
	umask(022);
	ck_assert_int_eq(setgroups(ELEMENTSOF(test_groups), test_groups), 0);
	creds_now(&daemon_creds);
	ck_assert_uint_eq(daemon_creds.fsuid, 0);

	snprintf(top, sizeof(top), "%s/root-XXXXXX", suite_dir);
	ck_assert_ptr_nonnull(mkdtemp(top));
	ck_assert_int_eq(chmod(top, 0755), 0);
	mkdir_ok("/w", 0755);
	mkdir_ok("/w-outside", 0755);
	put("/w-outside/secret.txt", SECRET, strlen(SECRET), 0600);
	symlink_ok("/w-outside", "/w/link-dir");
	symlink_ok("/w-outside/secret.txt", "/w/link-file");
	symlink_ok("../w-outside", "/w/rel-link");
	mkdir_ok("/w/real", 0755);
	put_s("/w/real/inside.txt", INSIDE);
	put_s("/w/plain.txt", PLAIN);
	ck_assert_int_eq(mkfifo(H("/w/fifo"), 0644), 0);
	put_s("/w/hard.txt", "hard\n");
	ck_assert_int_eq(link(H("/w/hard.txt"), H("/w/hard-link.txt")), 0);
	root = open(top, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(root, 0);
}

static int rm_visit(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
	(void)sb, (void)f;
	if (remove(path) < 0 && errno != ENOENT)
		fprintf(stderr, "check_plane_local: removing %s: %s (flag %d)\n", path, strerror(errno), flag);
	return 0;
}

/* Removes a host tree, never following a link, never crossing a mount. */
static void rm_rf(const char *path)
{
	nftw(path, rm_visit, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static void teardown(void)
{
	if (root >= 0)
		close(root);
	root = -1;
	rm_rf(top);
}

/* Opens the root again: after unshare(CLONE_NEWNS), the one opened before
 * still resolves in the old mount namespace (where a new mount is not). */
static void root_reopen(void)
{
	close(root);
	root = open(top, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(root, 0);
}

/* The descriptors this process holds (a call must not leave one open). */
static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void fds_same_(int before, const char *where, int line)
{
	int now = fd_count();

	ck_assert_msg(now == before, "%s (line %d): %d descriptors open after the call, %d before", where, line,
		      now, before);
}
#define fds_same(before) fds_same_((before), __func__, __LINE__)

/* ---- calls -------------------------------------------------------------------- */

static struct paths_plan *plan_of(enum paths_op op, const char *wd, const char *path)
{
	struct paths_plan *p = NULL;
	enum paths_reason reason = 0;
	int r = paths_plan_new(op, path, SIZE_MAX, wd, SIZE_MAX, "/", &p, &reason);

	ck_assert_msg(r == 0, "paths_plan_new(%s, wd %s, %s) = %d, reason %d", paths_op_to_string(op), wd, path, r,
		      (int)reason);
	return p;
}

/* r and e say code (0: success, r >= 0). An OSError's data.errno is
 * checked when want_errno is set. */
static void outcome_is_(int r, const struct msb_error *e, int code, const char *want_errno, const char *what, int line)
{
	if (code == 0) {
		ck_assert_msg(r >= 0, "%s (line %d): failed %d, code %d: %s", what, line, r, e->code,
			      e->message ? e->message : "");
		return;
	}
	ck_assert_msg(r < 0, "%s (line %d): succeeded (%d); expected code %d (%s)", what, line, r, code,
		      msb_error_name(code));
	ck_assert_msg(e->code == code, "%s (line %d): code %d (%s: %s); expected %d (%s)", what, line, e->code,
		      msb_error_name(e->code), e->message ? e->message : "", code, msb_error_name(code));
	if (want_errno) {
		json_t *en = json_object_get(e->data, "errno");

		ck_assert_msg(json_is_string(en) && strcmp(json_string_value(en), want_errno) == 0,
			      "%s (line %d): data.errno %s; expected %s", what, line,
			      json_is_string(en) ? json_string_value(en) : "(none)", want_errno);
	}
}
/* (the calling test's struct msb_error is named e) */
#define outcome_is(r, code, errno_name) outcome_is_((r), &e, (code), (errno_name), __func__, __LINE__)

/* The refusal of a mount point: OSError, errno EBUSY, data.mount naming it. */
#define mount_refused(r, mount) do { \
		outcome_is((r), MSB_ERR_OS_ERROR, "EBUSY"); \
		ck_assert_msg(json_is_string(json_object_get(e.data, "mount")) && \
			      strcmp(json_string_value(json_object_get(e.data, "mount")), (mount)) == 0, \
			      "line %d: data.mount %s; expected %s", __LINE__, \
			      json_string_value(json_object_get(e.data, "mount")), (mount)); \
		msb_error_clear(&e); \
	} while (0)

static int do_stat(const char *wd, const char *path, const struct plocal_cred *c, bool *found,
		   struct paths_stat *st, struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_STAT, wd, path);
	int r, fds = fd_count();

	*st = (struct paths_stat){ 0 };
	r = plocal_stat(root, p, c, found, st, e);
	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	return r;
}

static int do_read(const char *wd, const char *path, const struct plocal_cred *c, uint64_t max,
		   uint8_t **data, size_t *len, struct paths_stat *st, struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_READ, wd, path);
	int r, fds = fd_count();

	*data = NULL;
	*len = 0;
	*st = (struct paths_stat){ 0 };
	r = plocal_read(root, p, c, max, data, len, st, e);
	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	return r;
}

/* A read whose bytes are not wanted (released here). */
static int do_read_drop(const char *wd, const char *path, const struct plocal_cred *c, struct msb_error *e)
{
	struct paths_stat st;
	uint8_t *data;
	size_t len;
	int r = do_read(wd, path, c, UINT32_MAX, &data, &len, &st, e);

	if (r == 0) {
		ck_assert_ptr_nonnull(data);
		free(data);
		paths_stat_release(&st);
	}
	return r;
}

static int do_write(const char *wd, const char *path, const struct plocal_cred *c, const void *data, size_t len,
		    struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_WRITE, wd, path);
	int fds = fd_count();
	int r = plocal_write(root, p, c, NULL, data, len, e);

	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	return r;
}

static int do_write_check(const char *wd, const char *path, const struct plocal_cred *c, struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_WRITE, wd, path);
	int fds = fd_count();
	int r = plocal_write_check(root, p, c, e);

	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	return r;
}

static int do_list(const char *wd, const char *path, const struct plocal_cred *c, size_t max, json_t **ret,
		   struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_LIST, wd, path);
	int r, fds = fd_count();

	*ret = NULL;
	r = plocal_list(root, p, c, max, ret, e);
	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	if (r == 0)
		ck_assert(json_is_array(*ret));
	return r;
}

/* A whole removal: begin, then steps of budget until done; *ret_steps
 * counts the steps. 0 done, <0 refused. */
static int do_rm_op(enum paths_op op, const char *wd, const char *path, const struct plocal_cred *c, bool recursive,
		    size_t budget, size_t *ret_steps, struct msb_error *e)
{
	struct paths_plan *p = plan_of(op, wd, path);
	struct plocal_rm *rm = NULL;
	size_t steps = 0;
	int r, fds = fd_count();

	r = plocal_rm_begin(root, p, c, recursive, &rm, e);
	creds_are_daemons();
	paths_plan_free(p);
	if (r > 0) {
		ck_assert_ptr_null(rm);
		r = 0;
	} else if (r == 0) {
		ck_assert_ptr_nonnull(rm);
		do {
			r = plocal_rm_step(rm, budget, e);
			creds_are_daemons();
			steps++;
			ck_assert_msg(steps < 1000000, "the removal never ends");
		} while (r == 0);
		r = r > 0 ? 0 : r;
	} else {
		ck_assert_ptr_null(rm);
	}
	plocal_rm_free(rm);
	fds_same(fds);
	if (ret_steps)
		*ret_steps = steps;
	return r;
}

static int do_rm(const char *wd, const char *path, const struct plocal_cred *c, bool recursive, size_t budget,
		 size_t *ret_steps, struct msb_error *e)
{
	return do_rm_op(PATHS_OP_DELETE, wd, path, c, recursive, budget, ret_steps, e);
}

/* ---- refusals: one table for every method ------------------------------------ */

enum call { C_STAT, C_READ, C_WRITE, C_WRITE_CHECK, C_LIST, C_REMOVE };

struct refusal_row {
	enum call call;
	const char *wd;
	const char *path;
	int code;            /* 0: success */
	int found;           /* C_STAT success: 1 found, 0 not found */
	const char *made;    /* a path that must not exist afterwards (NULL: none) */
};

#define CONF   MSB_ERR_CONFINEMENT
#define NOTDIR MSB_ERR_NOT_A_DIRECTORY
#define NOENT  MSB_ERR_FILE_NOT_FOUND
#define OSERR  MSB_ERR_OS_ERROR

static const struct refusal_row refusal_rows[] = {
	/* stat */
	{ C_STAT, "/w", "link-dir/secret.txt", CONF, 0, NULL },
	{ C_STAT, "/w", "rel-link/secret.txt", CONF, 0, NULL },
	{ C_STAT, "/w", "link-file/x", CONF, 0, NULL },
	{ C_STAT, "/w", "plain.txt/x", NOTDIR, 0, NULL },
	{ C_STAT, "/w", "fifo/x", NOTDIR, 0, NULL },
	{ C_STAT, "/w", "absent", 0, 0, NULL },
	{ C_STAT, "/w", "absent/deeper/x", 0, 0, NULL },
	{ C_STAT, "/w", "real/inside.txt", 0, 1, NULL },
	{ C_STAT, "/w/link-dir", ".", CONF, 0, NULL },
	{ C_STAT, "/w/link-dir", "secret.txt", CONF, 0, NULL },
	{ C_STAT, "/w/plain.txt", ".", NOTDIR, 0, NULL },
	{ C_STAT, "/w/absent", ".", 0, 0, NULL },
	{ C_STAT, "/", ".", 0, 1, NULL },
	{ C_STAT, "/", "w-outside/secret.txt", 0, 1, NULL },
	/* read */
	{ C_READ, "/w", "link-dir/secret.txt", CONF, 0, NULL },
	{ C_READ, "/w", "rel-link/secret.txt", CONF, 0, NULL },
	{ C_READ, "/w", "plain.txt/x", NOTDIR, 0, NULL },
	{ C_READ, "/w", "absent", NOENT, 0, NULL },
	{ C_READ, "/w", "absent/x", NOENT, 0, NULL },
	{ C_READ, "/w", "link-file", OSERR, 0, NULL },
	{ C_READ, "/w", "link-dir", OSERR, 0, NULL },
	{ C_READ, "/w", "real", OSERR, 0, NULL },
	{ C_READ, "/w", ".", OSERR, 0, NULL },
	{ C_READ, "/w/link-dir", ".", CONF, 0, NULL },
	{ C_READ, "/w/link-dir", "secret.txt", CONF, 0, NULL },
	{ C_READ, "/w", "real/inside.txt", 0, 0, NULL },
	{ C_READ, "/", ".", OSERR, 0, NULL },
	{ C_READ, "/w/plain.txt", ".", NOTDIR, 0, NULL },
	/* write */
	{ C_WRITE, "/w", "link-dir/new.txt", CONF, 0, "/w-outside/new.txt" },
	{ C_WRITE, "/w", "link-dir/sub/new.txt", CONF, 0, "/w-outside/sub" },
	{ C_WRITE, "/w", "rel-link/new.txt", CONF, 0, "/w-outside/new.txt" },
	{ C_WRITE, "/w", "link-file", CONF, 0, NULL },
	{ C_WRITE, "/w", "plain.txt/x", NOTDIR, 0, NULL },
	{ C_WRITE, "/w", "plain.txt/x/y", NOTDIR, 0, NULL },
	{ C_WRITE, "/w", "real", OSERR, 0, NULL },
	{ C_WRITE, "/w/link-dir", "new.txt", CONF, 0, "/w-outside/new.txt" },
	{ C_WRITE, "/w", "absent/deeper/new.txt", 0, 0, NULL },
	/* write check: the same refusals, nothing made */
	{ C_WRITE_CHECK, "/w", "link-dir/new.txt", CONF, 0, "/w-outside/new.txt" },
	{ C_WRITE_CHECK, "/w", "link-dir/sub/new.txt", CONF, 0, "/w-outside/sub" },
	{ C_WRITE_CHECK, "/w", "link-file", CONF, 0, NULL },
	{ C_WRITE_CHECK, "/w", "plain.txt/x", NOTDIR, 0, NULL },
	{ C_WRITE_CHECK, "/w", "real", OSERR, 0, NULL },
	{ C_WRITE_CHECK, "/w/link-dir", "new.txt", CONF, 0, "/w-outside/new.txt" },
	{ C_WRITE_CHECK, "/w", "absent/deeper/new.txt", 0, 0, "/w/absent" },
	{ C_WRITE_CHECK, "/w", "new.txt", 0, 0, "/w/new.txt" },
	/* list */
	{ C_LIST, "/w", "link-dir", CONF, 0, NULL },
	{ C_LIST, "/w", "rel-link", CONF, 0, NULL },
	{ C_LIST, "/w", "link-dir/sub", CONF, 0, NULL },
	{ C_LIST, "/w", "plain.txt", NOTDIR, 0, NULL },
	{ C_LIST, "/w", "fifo", NOTDIR, 0, NULL },
	{ C_LIST, "/w", "link-file", CONF, 0, NULL },
	{ C_LIST, "/w", "absent", NOENT, 0, NULL },
	{ C_LIST, "/w/link-dir", ".", CONF, 0, NULL },
	{ C_LIST, "/w", "real", 0, 0, NULL },
	{ C_LIST, "/w/absent", ".", NOENT, 0, NULL },
	{ C_LIST, "/w/plain.txt", ".", NOTDIR, 0, NULL },
	/* remove */
	{ C_REMOVE, "/w", "link-dir/secret.txt", CONF, 0, NULL },
	{ C_REMOVE, "/w", "rel-link/secret.txt", CONF, 0, NULL },
	{ C_REMOVE, "/w/link-dir", "secret.txt", CONF, 0, NULL },
	{ C_REMOVE, "/w", "plain.txt/x", NOTDIR, 0, NULL },
	{ C_REMOVE, "/w", "absent", 0, 0, NULL },
	{ C_REMOVE, "/w", "absent/x", 0, 0, NULL },
	{ C_REMOVE, "/w/absent", "x", 0, 0, NULL },
	{ C_REMOVE, "/w", "fifo/x", NOTDIR, 0, NULL },
};

START_TEST(test_refusal)
{
	const struct refusal_row *row = &refusal_rows[_i];
	struct msb_error e = { 0 };
	struct paths_stat st;
	json_t *list = NULL;
	bool found = false;
	int r = 0;

	switch (row->call) {
	case C_STAT:
		r = do_stat(row->wd, row->path, &guest_root, &found, &st, &e);
		if (r == 0) {
			ck_assert_int_eq(found, row->found);
			if (found)
				paths_stat_release(&st);
		}
		break;
	case C_READ:
		r = do_read_drop(row->wd, row->path, &guest_root, &e);
		break;
	case C_WRITE:
		r = do_write(row->wd, row->path, &guest_root, "new\n", 4, &e);
		break;
	case C_WRITE_CHECK:
		r = do_write_check(row->wd, row->path, &guest_root, &e);
		break;
	case C_LIST:
		r = do_list(row->wd, row->path, &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e);
		json_decref(list);
		break;
	case C_REMOVE:
		r = do_rm(row->wd, row->path, &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e);
		break;
	}
	outcome_is_(r, &e, row->code, NULL, row->path, (int)_i);
	if (row->code)
		ck_assert_msg(e.message && *e.message, "row %d: a refusal without a message", _i);
	if (row->made)
		ck_assert_msg(!exists(row->made), "row %d: %s was made", _i, row->made);
	outside_intact();
	no_temp_under("/");
	content_is("/w/plain.txt", PLAIN);
	content_is("/w/real/inside.txt", INSIDE);
	msb_error_clear(&e);
}
END_TEST

/* The error names the path the caller gave (relative to the wd). */
START_TEST(test_refusal_names_path)
{
	struct msb_error e = { 0 };
	int r = do_read_drop("/w", "link-dir/secret.txt", &guest_root, &e);

	outcome_is(r, CONF, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(e.data, "path")), "link-dir/secret.txt");
	msb_error_clear(&e);
}
END_TEST

START_TEST(test_available)
{
	const char *why = NULL;

	ck_assert_int_eq(plocal_available(&why), 0);
}
END_TEST

/* ---- stat -------------------------------------------------------------------- */

START_TEST(test_stat_link_leaf)
{
	struct msb_error e = { 0 };
	struct paths_stat st;
	bool found;

	ck_assert_int_eq(do_stat("/w", "link-file", &guest_root, &found, &st, &e), 0);
	ck_assert(found);
	ck_assert_int_eq(st.kind, PATHS_KIND_SYMLINK);
	ck_assert_str_eq(st.name, "link-file");
	ck_assert_str_eq(st.link_target, "/w-outside/secret.txt");
	paths_stat_release(&st);

	ck_assert_int_eq(do_stat("/w", "link-dir", &guest_root, &found, &st, &e), 0);
	ck_assert(found);
	ck_assert_int_eq(st.kind, PATHS_KIND_SYMLINK);
	ck_assert_str_eq(st.link_target, "/w-outside");
	paths_stat_release(&st);
	outside_intact();
}
END_TEST

START_TEST(test_stat_kinds)
{
	static const struct {
		const char *path;
		enum paths_kind kind;
		uint64_t size;
	} rows[] = {
		{ "plain.txt", PATHS_KIND_FILE, sizeof(PLAIN) - 1 },
		{ "real", PATHS_KIND_DIRECTORY, 0 },
		{ ".", PATHS_KIND_DIRECTORY, 0 },
		{ "fifo", PATHS_KIND_OTHER, 0 },
	};
	struct msb_error e = { 0 };

	ck_assert_int_eq(chmod(H("/w/plain.txt"), 0640), 0);
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		struct paths_stat st;
		bool found;

		ck_assert_int_eq(do_stat("/w", rows[i].path, &guest_root, &found, &st, &e), 0);
		ck_assert_msg(found, "%s not found", rows[i].path);
		ck_assert_int_eq(st.kind, rows[i].kind);
		if (rows[i].kind == PATHS_KIND_FILE) {
			ck_assert_uint_eq(st.size, rows[i].size);
			ck_assert_uint_eq(st.perm, 0640);
		}
		ck_assert_str_eq(st.link_target, "");
		paths_stat_release(&st);
	}
}
END_TEST

/* ---- read -------------------------------------------------------------------- */

static void alarm_fail(int sig)
{
	(void)sig;
	static const char msg[] = "check_plane_local: the read blocked\n";

	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(3);
}

START_TEST(test_read_fifo_never_blocks)
{
	struct msb_error e = { 0 };
	int r;

	signal(SIGALRM, alarm_fail);
	alarm(BLOCK_GUARD_S);
	r = do_read_drop("/w", "fifo", &guest_root, &e);
	alarm(0);
	outcome_is(r, OSERR, NULL);
	msb_error_clear(&e);
}
END_TEST

/* A device is never opened (/dev/null would read as an empty file). */
START_TEST(test_read_device)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(mknod(H("/w/null"), S_IFCHR | 0666, makedev(1, 3)), 0);
	outcome_is(do_read_drop("/w", "null", &guest_root, &e), OSERR, NULL);
	msb_error_clear(&e);
}
END_TEST

START_TEST(test_read_hard_link)
{
	struct msb_error e = { 0 };

	outcome_is(do_read_drop("/w", "hard.txt", &guest_root, &e), OSERR, NULL);
	msb_error_clear(&e);
	outcome_is(do_read_drop("/w", "hard-link.txt", &guest_root, &e), OSERR, NULL);
	msb_error_clear(&e);
	/* One link again: read. */
	ck_assert_int_eq(unlink(H("/w/hard-link.txt")), 0);
	outcome_is(do_read_drop("/w", "hard.txt", &guest_root, &e), 0, NULL);
}
END_TEST

START_TEST(test_read_cap)
{
	static const char ten[] = "0123456789";
	struct msb_error e = { 0 };
	struct paths_stat st;
	uint8_t *data;
	size_t len;
	int r;

	put_s("/w/ten.txt", ten);
	r = do_read("/w", "ten.txt", &guest_root, 9, &data, &len, &st, &e);
	outcome_is(r, MSB_ERR_TRANSFER_CAP_EXCEEDED, NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(e.data, "limit")), 9);
	ck_assert_ptr_null(data);
	msb_error_clear(&e);

	r = do_read("/w", "ten.txt", &guest_root, 10, &data, &len, &st, &e);
	outcome_is(r, 0, NULL);
	ck_assert_uint_eq(len, 10);
	ck_assert_mem_eq(data, ten, 10);
	free(data);
	paths_stat_release(&st);

	r = do_read("/w", "ten.txt", &guest_root, 0, &data, &len, &st, &e);
	outcome_is(r, MSB_ERR_TRANSFER_CAP_EXCEEDED, NULL);
	msb_error_clear(&e);
}
END_TEST

START_TEST(test_read_empty)
{
	struct msb_error e = { 0 };
	struct paths_stat st;
	uint8_t *data;
	size_t len = 99;

	put("/w/empty", "", 0, 0644);
	ck_assert_int_eq(do_read("/w", "empty", &guest_root, 0, &data, &len, &st, &e), 0);
	ck_assert_ptr_nonnull(data);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(st.kind, PATHS_KIND_FILE);
	ck_assert_uint_eq(st.size, 0);
	free(data);
	paths_stat_release(&st);
}
END_TEST

#define BINARY_LEN (300 * 1024 + 7)

START_TEST(test_read_exact)
{
	_cleanup_free_ uint8_t *want = xmalloc(BINARY_LEN);
	struct msb_error e = { 0 };
	struct paths_stat st;
	uint8_t *data;
	size_t len;

	for (size_t i = 0; i < BINARY_LEN; i++)
		want[i] = (uint8_t)(i * 7 + i / 251);
	want[0] = 0;
	want[BINARY_LEN - 1] = 0;
	put("/w/real/blob.bin", want, BINARY_LEN, 0644);
	ck_assert_int_eq(do_read("/w", "real/blob.bin", &guest_root, BINARY_LEN, &data, &len, &st, &e), 0);
	ck_assert_uint_eq(len, BINARY_LEN);
	ck_assert_int_eq(memcmp(data, want, BINARY_LEN), 0);
	ck_assert_uint_eq(st.size, BINARY_LEN);
	ck_assert_str_eq(st.name, "blob.bin");
	free(data);
	paths_stat_release(&st);
	/* An absolute path inside the wd, and ".." staying inside: the same file. */
	ck_assert_int_eq(do_read("/w", "/w/real/../real/inside.txt", &guest_root, 100, &data, &len, &st, &e), 0);
	ck_assert_uint_eq(len, strlen(INSIDE));
	ck_assert_mem_eq(data, INSIDE, len);
	free(data);
	paths_stat_release(&st);
}
END_TEST

/* The real "/" as the root: a file of /proc is never read, and /proc/self
 * (a link) is never followed. */
START_TEST(test_read_pseudo_fs)
{
	struct msb_error e = { 0 };
	char path[64];

	close(root);
	root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(root, 0);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)getpid());
	outcome_is(do_read_drop("/proc", path, &guest_root, &e), OSERR, NULL);
	msb_error_clear(&e);
	outcome_is(do_read_drop("/proc", "/proc/self/status", &guest_root, &e), CONF, NULL);
	msb_error_clear(&e);
	outcome_is(do_read_drop("/sys", "/sys/kernel/uevent_seqnum", &guest_root, &e), OSERR, NULL);
	msb_error_clear(&e);
}
END_TEST

/* ---- write -------------------------------------------------------------------- */

START_TEST(test_write_parents_and_modes)
{
	struct msb_error e = { 0 };
	struct stat sb;

	umask(077);
	ck_assert_int_eq(do_write("/w", "a/b/c/new.txt", &guest_root, "data\n", 5, &e), 0);
	content_is("/w/a/b/c/new.txt", "data\n");
	ck_assert_uint_eq(lmode("/w/a") & 07777, 0755);
	ck_assert_uint_eq(lmode("/w/a/b") & 07777, 0755);
	ck_assert_uint_eq(lmode("/w/a/b/c") & 07777, 0755);
	ck_assert_uint_eq(lmode("/w/a/b/c/new.txt") & 07777, 0644);
	ck_assert(S_ISREG(lmode("/w/a/b/c/new.txt")));
	ck_assert_int_eq(lstat(H("/w/a/b/c/new.txt"), &sb), 0);
	ck_assert_uint_eq(sb.st_nlink, 1);
	/* An existing directory keeps its mode. */
	ck_assert_int_eq(chmod(H("/w/real"), 0750), 0);
	ck_assert_int_eq(do_write("/w", "real/more.txt", &guest_root, "", 0, &e), 0);
	ck_assert_uint_eq(lmode("/w/real") & 07777, 0750);
	ck_assert_uint_eq(lmode("/w/real/more.txt") & 07777, 0644);
	no_temp_under("/w");
	outside_intact();
}
END_TEST

/* ---- a write's mode, from the first byte ------------------------------------ */

/* The mode a write's temporary has while its content goes in: the
 * content's second page is missing (userfaultfd), so the write stops on
 * it; this thread stats the temporary then, and lets the write go on. */
struct temp_watch {
	int uffd;
	char *pages;
	size_t page;
	const char *dir;             /* host path of the temporary's directory */
	int mode;                    /* -1 until seen */
};

static void *temp_watch_run(void *arg)
{
	struct temp_watch *w = arg;
	struct pollfd pfd = { .fd = w->uffd, .events = POLLIN };
	struct uffdio_zeropage z = { .range = { (uintptr_t)(w->pages + w->page), w->page } };
	struct uffd_msg msg;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (poll(&pfd, 1, 30000) != 1 || read(w->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
	    msg.event != UFFD_EVENT_PAGEFAULT)
		return NULL;
	d = opendir(w->dir);
	while (d && (de = readdir(d)))
		if (plocal_name_is_temp(de->d_name) && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			w->mode = (int)(st.st_mode & 07777);
	if (d)
		closedir(d);
	ioctl(w->uffd, UFFDIO_ZEROPAGE, &z);
	return NULL;
}

START_TEST(test_write_mode_from_the_first_byte)
{
	struct temp_watch w = { .page = (size_t)sysconf(_SC_PAGESIZE), .dir = H("/w"), .mode = -1 };
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct paths_plan *p = plan_of(PATHS_OP_WRITE, "/w", "secret-new.txt");
	struct msb_error e = { 0 };
	pthread_t t;

	w.uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (w.uffd < 0) {
		fprintf(stderr, "SKIP test_write_mode_from_the_first_byte: no userfaultfd (%s)\n", strerror(errno));
		paths_plan_free(p);
		return;
	}
	ck_assert_int_eq(ioctl(w.uffd, UFFDIO_API, &api), 0);
	w.pages = mmap(NULL, 2 * w.page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(w.pages != MAP_FAILED);
	memset(w.pages, 's', w.page);
	reg.range = (struct uffdio_range){ (uintptr_t)(w.pages + w.page), w.page };
	ck_assert_int_eq(ioctl(w.uffd, UFFDIO_REGISTER, &reg), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, temp_watch_run, &w), 0);
	ck_assert_int_eq(plocal_write_mode(root, p, &guest_root, NULL, (const uint8_t *)w.pages, 2 * w.page, 0600, &e),
			 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	/* Never readable by others, not even while the content goes in. */
	ck_assert_int_eq(w.mode, 0600);
	ck_assert_uint_eq(lmode("/w/secret-new.txt") & 07777, 0600);
	/* Mode 0: the writer's descriptor writes all the same. */
	ck_assert_int_eq(plocal_write_mode(root, p, &guest_root, NULL, (const uint8_t *)"x", 1, 0, &e), 0);
	ck_assert_uint_eq(lmode("/w/secret-new.txt") & 07777, 0);
	munmap(w.pages, 2 * w.page);
	close(w.uffd);
	paths_plan_free(p);
	no_temp_under("/w");
}
END_TEST

START_TEST(test_write_replaces)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(chmod(H("/w/plain.txt"), 0600), 0);
	ck_assert_int_eq(do_write("/w", "plain.txt", &guest_root, "first, longer content\n", 22, &e), 0);
	content_is("/w/plain.txt", "first, longer content\n");
	ck_assert_uint_eq(lmode("/w/plain.txt") & 07777, 0644);
	ck_assert_int_eq(do_write("/w", "plain.txt", &guest_root, "2\n", 2, &e), 0);
	content_is("/w/plain.txt", "2\n");
	/* Replaced by a rename: a hard link to the old file keeps the old bytes. */
	ck_assert_int_eq(do_write("/w", "hard.txt", &guest_root, "new\n", 4, &e), 0);
	content_is("/w/hard.txt", "new\n");
	content_is("/w/hard-link.txt", "hard\n");
	no_temp_under("/w");
}
END_TEST

START_TEST(test_write_link_leaf)
{
	struct msb_error e = { 0 };

	outcome_is(do_write("/w", "link-file", &guest_root, "pwned\n", 6, &e), CONF, NULL);
	msb_error_clear(&e);
	ck_assert(S_ISLNK(lmode("/w/link-file")));
	outcome_is(do_write("/w", "link-dir", &guest_root, "pwned\n", 6, &e), CONF, NULL);
	msb_error_clear(&e);
	ck_assert(S_ISLNK(lmode("/w/link-dir")));
	/* A dangling link too: nothing made where it points. */
	symlink_ok("/w-outside/made.txt", "/w/dangling");
	outcome_is(do_write("/w", "dangling", &guest_root, "pwned\n", 6, &e), CONF, NULL);
	msb_error_clear(&e);
	ck_assert(S_ISLNK(lmode("/w/dangling")));
	outside_intact();
	no_temp_under("/");
}
END_TEST

/* A FIFO at the leaf is replaced, never opened (which would block). */
START_TEST(test_write_fifo_leaf)
{
	struct msb_error e = { 0 };

	signal(SIGALRM, alarm_fail);
	alarm(BLOCK_GUARD_S);
	ck_assert_int_eq(do_write("/w", "fifo", &guest_root, "now a file\n", 11, &e), 0);
	alarm(0);
	ck_assert(S_ISREG(lmode("/w/fifo")));
	content_is("/w/fifo", "now a file\n");
	no_temp_under("/w");
}
END_TEST

START_TEST(test_write_dir_leaf)
{
	struct msb_error e = { 0 };

	outcome_is(do_write("/w", "real", &guest_root, "x", 1, &e), OSERR, NULL);
	msb_error_clear(&e);
	ck_assert(S_ISDIR(lmode("/w/real")));
	names_are("/w/real", "inside.txt");
	no_temp_under("/w");
}
END_TEST

START_TEST(test_write_check_writes_nothing)
{
	_cleanup_free_ char *before = names_in("/w");
	struct msb_error e = { 0 };

	ck_assert_int_eq(do_write_check("/w", "plain.txt", &guest_root, &e), 0);
	ck_assert_int_eq(do_write_check("/w", "fresh.txt", &guest_root, &e), 0);
	ck_assert_int_eq(do_write_check("/w", "x/y/z.txt", &guest_root, &e), 0);
	/* A link below a missing directory is never reached; one above it is. */
	outcome_is(do_write_check("/w", "link-dir/x/y.txt", &guest_root, &e), CONF, NULL);
	msb_error_clear(&e);
	outcome_is(do_write_check("/w", "plain.txt/x/y.txt", &guest_root, &e), NOTDIR, NULL);
	msb_error_clear(&e);
	names_are("/w", before);
	content_is("/w/plain.txt", PLAIN);
	no_temp_under("/");
	outside_intact();
}
END_TEST

/* A write that fails after its temporary file was made (the filesystem is
 * full) removes it. */
START_TEST(test_write_failure_leaves_no_temp)
{
	_cleanup_free_ uint8_t *big = xcalloc(1, 1024 * 1024);
	struct msb_error e = { 0 };

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
	mkdir_ok("/w/small", 0755);
	ck_assert_int_eq(mount("tmpfs", H("/w/small"), "tmpfs", 0, "size=64k,mode=0755"), 0);
	root_reopen();
	put_s("/w/small/keep.txt", "keep\n");
	outcome_is(do_write("/w", "small/big.bin", &guest_root, big, 1024 * 1024, &e), OSERR, "ENOSPC");
	msb_error_clear(&e);
	names_are("/w/small", "keep.txt");
	outcome_is(do_write("/w", "small/keep.txt", &guest_root, big, 1024 * 1024, &e), OSERR, "ENOSPC");
	msb_error_clear(&e);
	names_are("/w/small", "keep.txt");
	content_is("/w/small/keep.txt", "keep\n");
	ck_assert_int_eq(do_write("/w", "small/fits.txt", &guest_root, "ok\n", 3, &e), 0);
	names_are("/w/small", "fits.txt,keep.txt");
	ck_assert_int_eq(umount2(H("/w/small"), MNT_DETACH), 0);
}
END_TEST

/* ---- the reach rule: the guest's own credentials --------------------------- */

START_TEST(test_reach_write_root_dir)
{
	struct msb_error e = { 0 };

	/* /w is root's, 0755: the guest may not write in it, nor make a directory. */
	outcome_is(do_write("/w", "new.txt", &nobody, "x", 1, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_write("/w", "sub/new.txt", &nobody, "x", 1, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_write("/w", "plain.txt", &nobody, "x", 1, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	ck_assert(!exists("/w/new.txt"));
	ck_assert(!exists("/w/sub"));
	content_is("/w/plain.txt", PLAIN);
	no_temp_under("/w");
}
END_TEST

START_TEST(test_reach_write_guest_dir)
{
	struct msb_error e = { 0 };
	struct stat sb;

	mkdir_ok("/w/home", 0755);
	ck_assert_int_eq(chown(H("/w/home"), GUEST_ID, GUEST_ID), 0);
	ck_assert_int_eq(do_write("/w", "home/a/new.txt", &nobody, "mine\n", 5, &e), 0);
	content_is("/w/home/a/new.txt", "mine\n");
	ck_assert_int_eq(lstat(H("/w/home/a/new.txt"), &sb), 0);
	ck_assert_uint_eq(sb.st_uid, GUEST_ID);
	ck_assert_uint_eq(sb.st_gid, GUEST_ID);
	ck_assert_int_eq(lstat(H("/w/home/a"), &sb), 0);
	ck_assert_uint_eq(sb.st_uid, GUEST_ID);
	ck_assert_uint_eq(sb.st_gid, GUEST_ID);
	/* A root-owned file in the guest's directory: replaced (the directory is
	 * the guest's), and the new one is the guest's. */
	put_s("/w/home/roots.txt", "root\n");
	ck_assert_int_eq(do_write("/w", "home/roots.txt", &nobody, "guest\n", 6, &e), 0);
	ck_assert_int_eq(lstat(H("/w/home/roots.txt"), &sb), 0);
	ck_assert_uint_eq(sb.st_uid, GUEST_ID);
	no_temp_under("/w");
}
END_TEST

START_TEST(test_reach_read)
{
	struct msb_error e = { 0 };

	put("/w/private.txt", "private\n", 8, 0600);
	outcome_is(do_read_drop("/w", "private.txt", &nobody, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	/* The same file readable by all: read. */
	ck_assert_int_eq(chmod(H("/w/private.txt"), 0644), 0);
	outcome_is(do_read_drop("/w", "private.txt", &nobody, &e), 0, NULL);
	/* The guest's supplementary groups are none: a group-readable file of
	 * a group the daemon is in (27) is not the guest's. */
	ck_assert_int_eq(chown(H("/w/private.txt"), 0, 27), 0);
	ck_assert_int_eq(chmod(H("/w/private.txt"), 0640), 0);
	outcome_is(do_read_drop("/w", "private.txt", &nobody, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	/* Its own group: read. */
	ck_assert_int_eq(chown(H("/w/private.txt"), 0, GUEST_ID), 0);
	outcome_is(do_read_drop("/w", "private.txt", &nobody, &e), 0, NULL);
}
END_TEST

START_TEST(test_reach_remove)
{
	struct msb_error e = { 0 };

	outcome_is(do_rm("/w", "plain.txt", &nobody, false, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	content_is("/w/plain.txt", PLAIN);
	outcome_is(do_rm("/w", "real", &nobody, true, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	content_is("/w/real/inside.txt", INSIDE);
	/* A sticky directory of the guest: another's file stays. */
	mkdir_ok("/w/tmp", 01777);
	put_s("/w/tmp/roots.txt", "root\n");
	outcome_is(do_rm("/w", "tmp/roots.txt", &nobody, false, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, "EPERM");
	msb_error_clear(&e);
	content_is("/w/tmp/roots.txt", "root\n");
	/* Its own file there: removed. */
	put_s("/w/tmp/mine.txt", "mine\n");
	ck_assert_int_eq(chown(H("/w/tmp/mine.txt"), GUEST_ID, GUEST_ID), 0);
	outcome_is(do_rm("/w", "tmp/mine.txt", &nobody, false, PLOCAL_REMOVE_SLICE, NULL, &e), 0, NULL);
	ck_assert(!exists("/w/tmp/mine.txt"));
}
END_TEST

/* The guest's root acts without capabilities: uid 0 owns nothing of
 * another user's, and overrides no permission. */
START_TEST(test_reach_guest_root_no_override)
{
	struct msb_error e = { 0 };

	put("/w/users.txt", "user\n", 5, 0600);
	ck_assert_int_eq(chown(H("/w/users.txt"), 1000, 1000), 0);
	mkdir_ok("/w/userdir", 0755);
	ck_assert_int_eq(chown(H("/w/userdir"), 1000, 1000), 0);
	outcome_is(do_read_drop("/w", "users.txt", &guest_root, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_write("/w", "userdir/x.txt", &guest_root, "x", 1, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	ck_assert(!exists("/w/userdir/x.txt"));
	content_is("/w/users.txt", "user\n");
}
END_TEST

/* A directory the guest may not search is an OSError for every method, not
 * a confinement refusal. */
START_TEST(test_reach_closed_dir_on_the_way)
{
	struct msb_error e = { 0 };
	struct paths_stat st;
	json_t *list;
	bool found;

	ck_assert_int_eq(chmod(H("/w/real"), 0700), 0);
	outcome_is(do_stat("/w", "real/inside.txt", &nobody, &found, &st, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_read_drop("/w", "real/inside.txt", &nobody, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_write("/w", "real/new.txt", &nobody, "x", 1, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_list("/w", "real", &nobody, PLOCAL_LIST_MAX_ENTRIES, &list, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	outcome_is(do_rm("/w", "real/inside.txt", &nobody, false, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR,
		   "EACCES");
	msb_error_clear(&e);
	outcome_is(do_stat("/w/real", ".", &nobody, &found, &st, &e), 0, NULL);
	ck_assert(found);
	paths_stat_release(&st);
	outcome_is(do_stat("/w/real", "inside.txt", &nobody, &found, &st, &e), OSERR, "EACCES");
	msb_error_clear(&e);
	content_is("/w/real/inside.txt", INSIDE);
	ck_assert(!exists("/w/real/new.txt"));
	/* The guest's own root: the same directory is searched. */
	outcome_is(do_read_drop("/w", "real/inside.txt", &guest_root, &e), 0, NULL);
}
END_TEST

/* ---- credentials, directly -------------------------------------------------- */

START_TEST(test_cred_enter_leave)
{
	struct plocal_saved s;
	uint32_t eff[2];
	gid_t g[GROUPS_MAX];

	plocal_cred_enter(&nobody, &s);
	ck_assert(s.entered);
	ck_assert_int_eq(setfsuid((uid_t)-1), GUEST_ID);
	ck_assert_int_eq(setfsgid((gid_t)-1), GUEST_ID);
	ck_assert_int_eq(getgroups(0, NULL), 0);
	ck_assert_int_eq(getgroups(GROUPS_MAX, g), 0);
	caps_now(eff, NULL);
	ck_assert_uint_eq(eff[0], 0);
	ck_assert_uint_eq(eff[1], 0);
	/* The real and effective ids are untouched (only the file system's). */
	ck_assert_uint_eq(geteuid(), 0);
	ck_assert_uint_eq(getuid(), 0);
	/* And the kernel acts on them: a root-only file is not opened. */
	ck_assert_int_lt(open(H("/w-outside/secret.txt"), O_RDONLY | O_CLOEXEC), 0);
	ck_assert_int_eq(errno, EACCES);
	plocal_cred_leave(&s);
	ck_assert(!s.entered);
	ck_assert_ptr_null(s.groups);
	creds_are_daemons();
	/* Twice in a row, and with the guest's root. */
	plocal_cred_enter(&guest_root, &s);
	caps_now(eff, NULL);
	ck_assert_uint_eq(eff[0], 0);
	ck_assert_uint_eq(eff[1], 0);
	ck_assert_int_eq(getgroups(0, NULL), 0);
	plocal_cred_leave(&s);
	creds_are_daemons();
	/* Leave of a saved never entered (or left already): nothing. */
	plocal_cred_leave(&s);
	s = (struct plocal_saved){ 0 };
	plocal_cred_leave(&s);
	creds_are_daemons();
}
END_TEST

/* A daemon whose effective set is smaller than its permitted one gets that
 * same smaller set back (setfsuid back to 0 raises the file system
 * capabilities from the permitted set: leave must undo it). */
/* Takes CAP_DAC_OVERRIDE and CAP_FOWNER out of the effective set (they
 * stay permitted), as a daemon started with a smaller effective set has
 * them; the new set is the daemon's from here. */
static void caps_reduce(void)
{
	uint32_t eff[2], reduced[2];

	caps_now(eff, NULL);
	ck_assert_msg(eff[0] & (1u << CAP_DAC_OVERRIDE), "the test needs CAP_DAC_OVERRIDE to begin with");
	reduced[0] = eff[0] & ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_FOWNER));
	reduced[1] = eff[1];
	caps_set_eff(reduced);
	creds_now(&daemon_creds);
}

START_TEST(test_cred_leave_restores_reduced_effective)
{
	struct plocal_saved s;
	struct msb_error e = { 0 };

	caps_reduce();
	plocal_cred_enter(&nobody, &s);
	plocal_cred_leave(&s);
	creds_are_daemons();
	/* And through an operation. */
	outcome_is(do_read_drop("/w", "plain.txt", &nobody, &e), 0, NULL);
}
END_TEST

/* plocal_available tries the calls it needs, and undoes them exactly. */
START_TEST(test_available_leaves_creds)
{
	const char *why = NULL;

	ck_assert_int_eq(plocal_available(&why), 0);
	creds_are_daemons();
	caps_reduce();
	ck_assert_int_eq(plocal_available(&why), 0);
	creds_are_daemons();
}
END_TEST

/* ---- prepare and check ---------------------------------------------------------- */

static int do_prepare(const char *wd, const struct plocal_cred *owner, struct msb_error *e)
{
	struct paths_plan *p = plan_of(PATHS_OP_LIST, wd, ".");
	int fds = fd_count();
	int r = plocal_prepare(root, p, owner, e);

	creds_are_daemons();
	fds_same(fds);
	paths_plan_free(p);
	return r;
}

static void owner_mode_is(const char *guest, uid_t uid, gid_t gid, mode_t mode)
{
	struct stat sb;

	ck_assert_msg(lstat(H(guest), &sb) == 0, "%s: %s", guest, strerror(errno));
	ck_assert_msg(S_ISDIR(sb.st_mode), "%s is not a directory", guest);
	ck_assert_msg(sb.st_uid == uid && sb.st_gid == gid && (sb.st_mode & 07777) == mode,
		      "%s is %u:%u %04o, expected %u:%u %04o", guest, (unsigned)sb.st_uid, (unsigned)sb.st_gid,
		      (unsigned)(sb.st_mode & 07777), (unsigned)uid, (unsigned)gid, (unsigned)mode);
}

START_TEST(test_prepare_new_chain)
{
	struct msb_error e = { 0 };

	umask(077);
	ck_assert_int_eq(do_prepare("/a/b/base", &nobody, &e), 0);
	owner_mode_is("/a", 0, 0, 0755);
	owner_mode_is("/a/b", 0, 0, 0755);
	owner_mode_is("/a/b/base", GUEST_ID, GUEST_ID, 0755);
	/* Below an existing part of the chain. */
	ck_assert_int_eq(do_prepare("/w/base", &nobody, &e), 0);
	owner_mode_is("/w", 0, 0, 0755);
	owner_mode_is("/w/base", GUEST_ID, GUEST_ID, 0755);
	/* A single component. */
	ck_assert_int_eq(do_prepare("/top", &nobody, &e), 0);
	owner_mode_is("/top", GUEST_ID, GUEST_ID, 0755);
}
END_TEST

START_TEST(test_prepare_existing_base)
{
	struct msb_error e = { 0 };

	mkdir_ok("/w/base", 0710);
	ck_assert_int_eq(chown(H("/w/base"), 1234, 5678), 0);
	ck_assert_int_eq(do_prepare("/w/base", &nobody, &e), 0);
	owner_mode_is("/w/base", 1234, 5678, 0710);
	ck_assert_int_eq(do_prepare("/w/real", &nobody, &e), 0);
	owner_mode_is("/w/real", 0, 0, 0755);
	names_are("/w/real", "inside.txt");
}
END_TEST

START_TEST(test_prepare_refusals)
{
	struct msb_error e = { 0 };

	outcome_is(do_prepare("/w/link-dir/base", &nobody, &e), CONF, NULL);
	msb_error_clear(&e);
	outcome_is(do_prepare("/w/link-dir", &nobody, &e), CONF, NULL);
	msb_error_clear(&e);
	outcome_is(do_prepare("/w/rel-link/x/base", &nobody, &e), CONF, NULL);
	msb_error_clear(&e);
	outcome_is(do_prepare("/w/plain.txt/base", &nobody, &e), NOTDIR, NULL);
	msb_error_clear(&e);
	outside_intact();
	ck_assert(!exists("/w-outside/base"));
	ck_assert(!exists("/w-outside/x"));
}
END_TEST

START_TEST(test_check)
{
	static const struct {
		enum paths_op op;
		const char *wd, *path;
		int code;
		bool missing;
	} rows[] = {
		{ PATHS_OP_LIST, "/w", ".", 0, false },
		{ PATHS_OP_LIST, "/w/real", ".", 0, false },
		{ PATHS_OP_LIST, "/w/absent", ".", 0, true },
		{ PATHS_OP_LIST, "/w/absent/more", ".", 0, true },
		{ PATHS_OP_LIST, "/w/link-dir", ".", CONF, false },
		{ PATHS_OP_LIST, "/w/link-dir/x", ".", CONF, false },
		{ PATHS_OP_LIST, "/w/plain.txt", ".", NOTDIR, false },
		{ PATHS_OP_STAT, "/w", "real/inside.txt", 0, false },
		{ PATHS_OP_STAT, "/w", "absent/inside.txt", 0, true },
		{ PATHS_OP_STAT, "/w", "link-dir/secret.txt", CONF, false },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		for (int with_cred = 0; with_cred < 2; with_cred++) {
			struct paths_plan *p = plan_of(rows[i].op, rows[i].wd, rows[i].path);
			struct msb_error e = { 0 };
			bool missing = !rows[i].missing;
			int fds = fd_count();
			int r = plocal_check(root, p, with_cred ? &nobody : NULL, &missing, &e);

			creds_are_daemons();
			fds_same(fds);
			paths_plan_free(p);
			outcome_is_(r, &e, rows[i].code, NULL, rows[i].wd, (int)i);
			if (r == 0)
				ck_assert_msg(missing == rows[i].missing, "row %zu: missing %d", i, missing);
			msb_error_clear(&e);
		}
	}
	ck_assert(!exists("/w/absent"));
}
END_TEST

/* ---- list ---------------------------------------------------------------------- */

static void entry_is(json_t *list, size_t i, const char *path, const char *kind, json_int_t size)
{
	json_t *en = json_array_get(list, i), *sz;

	ck_assert_msg(en, "no entry %zu", i);
	ck_assert_str_eq(json_string_value(json_object_get(en, "path")), path);
	ck_assert_str_eq(json_string_value(json_object_get(en, "kind")), kind);
	sz = json_object_get(en, "size");
	if (size < 0) {
		ck_assert_msg(json_is_null(sz), "%s: size is not null", path);
	} else {
		ck_assert_msg(json_is_integer(sz), "%s: size is not an integer", path);
		ck_assert_int_eq(json_integer_value(sz), size);
	}
}

START_TEST(test_list_wd)
{
	struct msb_error e = { 0 };
	json_t *list;

	ck_assert_int_eq(do_list("/w", ".", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 8);
	entry_is(list, 0, "fifo", "other", -1);
	entry_is(list, 1, "hard-link.txt", "file", 5);
	entry_is(list, 2, "hard.txt", "file", 5);
	entry_is(list, 3, "link-dir", "symlink", -1);
	entry_is(list, 4, "link-file", "symlink", -1);
	entry_is(list, 5, "plain.txt", "file", (json_int_t)strlen(PLAIN));
	entry_is(list, 6, "real", "directory", -1);
	entry_is(list, 7, "rel-link", "symlink", -1);
	json_decref(list);
}
END_TEST

START_TEST(test_list_relative_paths)
{
	struct msb_error e = { 0 };
	json_t *list;

	mkdir_ok("/w/real/sub", 0755);
	put_s("/w/real/sub/deep.txt", "deep\n");
	put_s("/w/real/B.txt", "b");
	put_s("/w/real/a.txt", "aa");
	symlink_ok("/w-outside/secret.txt", "/w/real/zlink");
	ck_assert_int_eq(do_list("/w", "real", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 5);
	entry_is(list, 0, "real/B.txt", "file", 1);
	entry_is(list, 1, "real/a.txt", "file", 2);
	entry_is(list, 2, "real/inside.txt", "file", (json_int_t)strlen(INSIDE));
	entry_is(list, 3, "real/sub", "directory", -1);
	entry_is(list, 4, "real/zlink", "symlink", -1);
	json_decref(list);
	/* The same directory from another wd; an absolute path. */
	ck_assert_int_eq(do_list("/w/real", "sub", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 1);
	entry_is(list, 0, "sub/deep.txt", "file", 5);
	json_decref(list);
	ck_assert_int_eq(do_list("/w", "/w/real/sub", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	entry_is(list, 0, "real/sub/deep.txt", "file", 5);
	json_decref(list);
	/* Empty. */
	mkdir_ok("/w/empty", 0755);
	ck_assert_int_eq(do_list("/w", "empty", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
}
END_TEST

/* A directory the guest may read but not search: its entries cannot be
 * examined. Never a list that leaves them out (it would say "empty"): the
 * call fails, or names every entry. */
START_TEST(test_list_unsearchable)
{
	struct msb_error e = { 0 };
	json_t *list;
	int r;

	mkdir_ok("/w/ronly", 0755);
	put_s("/w/ronly/a.txt", "a");
	mkdir_ok("/w/ronly/sub", 0755);
	ck_assert_int_eq(chmod(H("/w/ronly"), 0744), 0);
	r = do_list("/w", "ronly", &nobody, PLOCAL_LIST_MAX_ENTRIES, &list, &e);
	if (r < 0) {
		outcome_is(r, OSERR, "EACCES");
		msb_error_clear(&e);
		return;
	}
	ck_assert_msg(json_array_size(list) == 2, "%zu entries listed of 2", json_array_size(list));
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "path")), "ronly/a.txt");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 1), "path")), "ronly/sub");
	json_decref(list);
}
END_TEST

#define LIST_CAP_N 40

START_TEST(test_list_cap)
{
	struct msb_error e = { 0 };
	json_t *list;

	mkdir_ok("/w/many", 0755);
	for (int i = 0; i < LIST_CAP_N; i++) {
		char name[64];

		snprintf(name, sizeof(name), "/w/many/f%03d", LIST_CAP_N - 1 - i);
		put_s(name, "");
	}
	ck_assert_int_eq(do_list("/w", "many", &guest_root, LIST_CAP_N, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), LIST_CAP_N);
	entry_is(list, 0, "many/f000", "file", 0);
	entry_is(list, LIST_CAP_N - 1, "many/f039", "file", 0);
	json_decref(list);
	outcome_is(do_list("/w", "many", &guest_root, LIST_CAP_N - 1, &list, &e), MSB_ERR_TRANSFER_CAP_EXCEEDED,
		   NULL);
	ck_assert_ptr_null(list);
	ck_assert_int_eq(json_integer_value(json_object_get(e.data, "limit")), LIST_CAP_N - 1);
	msb_error_clear(&e);
	outcome_is(do_list("/w", "many", &guest_root, 0, &list, &e), MSB_ERR_TRANSFER_CAP_EXCEEDED, NULL);
	msb_error_clear(&e);
}
END_TEST

/* ---- remove and reclaim ------------------------------------------------------------ */

START_TEST(test_rm_file)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(do_rm("/w", "plain.txt", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/plain.txt"));
	ck_assert_int_eq(do_rm("/w", "real/inside.txt", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/real/inside.txt"));
	ck_assert(S_ISDIR(lmode("/w/real")));
	ck_assert_int_eq(do_rm("/w", "fifo", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/fifo"));
	/* Missing: success, twice. */
	ck_assert_int_eq(do_rm("/w", "plain.txt", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	outside_intact();
}
END_TEST

START_TEST(test_rm_links)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(do_rm("/w", "link-file", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/link-file"));
	/* A link to a directory, even recursive: the link goes, never what it names. */
	ck_assert_int_eq(do_rm("/w", "link-dir", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/link-dir"));
	ck_assert_int_eq(do_rm("/w", "rel-link", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/rel-link"));
	names_are("/w-outside", "secret.txt");
	content_is("/w-outside/secret.txt", SECRET);
}
END_TEST

START_TEST(test_rm_dir_needs_recursive)
{
	struct msb_error e = { 0 };

	outcome_is(do_rm("/w", "real", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, NULL);
	msb_error_clear(&e);
	content_is("/w/real/inside.txt", INSIDE);
	mkdir_ok("/w/empty", 0755);
	outcome_is(do_rm("/w", "empty", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, NULL);
	msb_error_clear(&e);
	ck_assert(exists("/w/empty"));
	ck_assert_int_eq(do_rm("/w", "empty", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/empty"));
}
END_TEST

/* A tree with files, links (one to the outside), a FIFO and nested
 * directories, removed one entry per step. */
static size_t tree_make(const char *at)
{
	char p[PATH_MAX];
	size_t entries = 0;

	mkdir_ok(at, 0755);
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/d%d", at, i);
		mkdir_ok(p, 0755);
		entries++;
		for (int j = 0; j < 4; j++) {
			snprintf(p, sizeof(p), "%s/d%d/f%d", at, i, j);
			put_s(p, "x");
			entries++;
		}
		snprintf(p, sizeof(p), "%s/d%d/sub", at, i);
		mkdir_ok(p, 0700);
		snprintf(p, sizeof(p), "%s/d%d/sub/leaf", at, i);
		put_s(p, "y");
		entries += 2;
	}
	snprintf(p, sizeof(p), "%s/out", at);
	symlink_ok("/w-outside", p);
	snprintf(p, sizeof(p), "%s/d0/out-file", at);
	symlink_ok("/w-outside/secret.txt", p);
	snprintf(p, sizeof(p), "%s/d1/up", at);
	symlink_ok("../..", p);
	snprintf(p, sizeof(p), "%s/pipe", at);
	ck_assert_int_eq(mkfifo(H(p), 0600), 0);
	return entries + 4;
}

START_TEST(test_rm_recursive_in_slices)
{
	struct msb_error e = { 0 };
	size_t steps = 0, entries = tree_make("/w/tree");

	ck_assert_int_eq(do_rm("/w", "tree", &guest_root, true, 1, &steps, &e), 0);
	ck_assert(!exists("/w/tree"));
	ck_assert_msg(steps >= entries, "%zu steps for %zu entries at budget 1", steps, entries);
	outside_intact();
	content_is("/w/plain.txt", PLAIN);
	content_is("/w/real/inside.txt", INSIDE);
	/* Reclaim, absolute, the default slice. */
	tree_make("/w/tree2");
	ck_assert_int_eq(do_rm_op(PATHS_OP_RECLAIM, "/w", "/w/tree2", &guest_root, true, PLOCAL_REMOVE_SLICE,
				  &steps, &e), 0);
	ck_assert(!exists("/w/tree2"));
	ck_assert_uint_eq(steps, 1);
	outside_intact();
}
END_TEST

/* A removal abandoned half way (the caller's deadline) frees what it holds. */
START_TEST(test_rm_abandoned)
{
	struct msb_error e = { 0 };
	struct paths_plan *p;
	struct plocal_rm *rm = NULL;

	tree_make("/w/tree");
	p = plan_of(PATHS_OP_DELETE, "/w", "tree");
	ck_assert_int_eq(plocal_rm_begin(root, p, &guest_root, true, &rm, &e), 0);
	paths_plan_free(p);
	ck_assert_int_eq(plocal_rm_step(rm, 2, &e), 0);
	creds_are_daemons();
	ck_assert_ptr_null(plocal_rm_free(rm));
	ck_assert_ptr_null(plocal_rm_free(NULL));
	ck_assert(exists("/w/tree"));
	outside_intact();
}
END_TEST

/* A chain of n directories "d" below guest path at. */
static void chain_make(const char *at, int n)
{
	_cleanup_close_ int fd = -1;

	mkdir_ok(at, 0755);
	fd = open(H(at), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	for (int i = 0; i < n; i++) {
		int next;

		ck_assert_int_eq(mkdirat(fd, "d", 0755), 0);
		next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert_int_ge(next, 0);
		close(fd);
		fd = next;
	}
	ck_assert_int_eq(symlinkat("/w-outside/secret.txt", fd, "bottom-link"), 0);
}

START_TEST(test_rm_depth_limit)
{
	struct msb_error e = { 0 };

	/* PLOCAL_MAX_DEPTH levels below the target: removed. */
	chain_make("/w/ok", PLOCAL_MAX_DEPTH);
	ck_assert_int_eq(do_rm("/w", "ok", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), 0);
	ck_assert(!exists("/w/ok"));
	/* One more: refused, and nothing outside the tree is touched. */
	chain_make("/w/deep", PLOCAL_MAX_DEPTH + 1);
	outcome_is(do_rm("/w", "deep", &guest_root, true, PLOCAL_REMOVE_SLICE, NULL, &e), OSERR, NULL);
	msb_error_clear(&e);
	ck_assert(exists("/w/deep/d"));
	outside_intact();
	content_is("/w/plain.txt", PLAIN);
	content_is("/w/real/inside.txt", INSIDE);
}
END_TEST

START_TEST(test_rm_never_crosses_mount)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
	tree_make("/w/tree");
	mkdir_ok("/w/tree/d2/mnt", 0755);
	ck_assert_int_eq(mount("tmpfs", H("/w/tree/d2/mnt"), "tmpfs", 0, "size=64k,mode=0755"), 0);
	root_reopen();
	put_s("/w/tree/d2/mnt/survivor.txt", "survivor\n");
	mount_refused(do_rm("/w", "tree", &guest_root, true, 1, NULL, &e), "tree/d2/mnt");
	content_is("/w/tree/d2/mnt/survivor.txt", "survivor\n");
	/* The mount point itself, as the target: refused too. */
	mount_refused(do_rm("/w", "tree/d2/mnt", &guest_root, true, 1, NULL, &e), "tree/d2/mnt");
	content_is("/w/tree/d2/mnt/survivor.txt", "survivor\n");
	outside_intact();
	ck_assert_int_eq(umount2(H("/w/tree/d2/mnt"), MNT_DETACH), 0);
}
END_TEST


/* ---- mounts: never replaced, never removed ------------------------------------- */

/* A bind-mounted file (as the engine mounts /etc/resolv.conf): a write
 * over it, a check of that write, a removal of it are refused; the mount
 * and its content stay. (In this test's own mount namespace the kernel
 * would refuse the unlink too — EBUSY without data.mount; seen from the
 * daemon's namespace, a container's mount point is removable.) */
START_TEST(test_mount_file_never_replaced)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
	put_s("/resolv.src", "nameserver 1\n");
	put_s("/w/resolv.conf", "placeholder\n");
	ck_assert_int_eq(mount(H("/resolv.src"), H("/w/resolv.conf"), NULL, MS_BIND, NULL), 0);
	root_reopen();
	mount_refused(do_write("/w", "resolv.conf", &guest_root, "nameserver 2\n", 13, &e), "resolv.conf");
	mount_refused(do_write_check("/w", "resolv.conf", &guest_root, &e), "resolv.conf");
	mount_refused(do_rm("/w", "resolv.conf", &guest_root, false, PLOCAL_REMOVE_SLICE, NULL, &e), "resolv.conf");
	content_is("/w/resolv.conf", "nameserver 1\n");
	no_temp_under("/w");
	ck_assert_int_eq(umount2(H("/w/resolv.conf"), MNT_DETACH), 0);
	content_is("/w/resolv.conf", "placeholder\n");
}
END_TEST

/* A removal that meets a mount point (a bound file deep in a tree, a
 * mounted directory as the target, even empty and not recursive) is
 * refused naming it; the mount stays. */
START_TEST(test_mount_never_removed)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
	tree_make("/w/tree");
	put_s("/w/tree/d2/bound", "");
	put_s("/bind-src", "kept\n");
	ck_assert_int_eq(mount(H("/bind-src"), H("/w/tree/d2/bound"), NULL, MS_BIND, NULL), 0);
	mkdir_ok("/w/mnt", 0755);
	ck_assert_int_eq(mount("tmpfs", H("/w/mnt"), "tmpfs", 0, "size=64k,mode=0755"), 0);
	root_reopen();
	mount_refused(do_rm("/w", "tree", &guest_root, true, 1, NULL, &e), "tree/d2/bound");
	content_is("/w/tree/d2/bound", "kept\n");
	mount_refused(do_rm("/w", "mnt", &guest_root, false, 1, NULL, &e), "mnt");
	mount_refused(do_rm("/w", "mnt", &guest_root, true, 1, NULL, &e), "mnt");
	ck_assert(exists("/w/mnt"));
	outside_intact();
	ck_assert_int_eq(umount2(H("/w/tree/d2/bound"), MNT_DETACH), 0);
	ck_assert_int_eq(umount2(H("/w/mnt"), MNT_DETACH), 0);
}
END_TEST

/* The local plane never writes on a pseudo filesystem. */
START_TEST(test_write_pseudo_fs)
{
	struct msb_error e = { 0 };

	ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
	ck_assert_int_eq(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL), 0);
	mkdir_ok("/w/proc", 0755);
	ck_assert_int_eq(mount("proc", H("/w/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), 0);
	root_reopen();
	outcome_is(do_write("/w", "proc/sys/kernel/hostname", &guest_root, "x", 1, &e), OSERR, "EXDEV");
	msb_error_clear(&e);
	outcome_is(do_write("/w", "proc/new", &guest_root, "x", 1, &e), OSERR, "EXDEV");
	msb_error_clear(&e);
	ck_assert_int_eq(umount2(H("/w/proc"), MNT_DETACH), 0);
}
END_TEST

/* ---- descriptors of a removal ----------------------------------------------- */

/* However deep the tree, a removal in progress holds PLOCAL_RM_FDS
 * descriptors at most (checked between every step of one entry). */
START_TEST(test_rm_fds_bounded)
{
	struct msb_error e = { 0 };
	struct paths_plan *p;
	struct plocal_rm *rm = NULL;
	int before = fd_count(), r, most = 0;

	chain_make("/w/deep", 200);
	tree_make("/w/deep/d/d/d/wide");
	p = plan_of(PATHS_OP_RECLAIM, "/w", "/w/deep");
	ck_assert_int_eq(plocal_rm_begin(root, p, &guest_root, true, &rm, &e), 0);
	paths_plan_free(p);
	do {
		r = plocal_rm_step(rm, 1, &e);
		if (fd_count() - before > most)
			most = fd_count() - before;
	} while (r == 0);
	ck_assert_int_eq(r, 1);
	plocal_rm_free(rm);
	ck_assert_msg(most <= PLOCAL_RM_FDS, "the removal held %d descriptors", most);
	ck_assert(!exists("/w/deep"));
	fds_same(before);
	outside_intact();
}
END_TEST

/* A directory moved away while the removal is inside it: the removal does
 * not follow ".." into the new place (ESTALE), nothing outside is touched. */
START_TEST(test_rm_moved_under_it)
{
	struct msb_error e = { 0 };
	struct paths_plan *p;
	struct plocal_rm *rm = NULL;
	int r;

	chain_make("/w/t", 3);
	put_s("/w/t/d/d/d/f1", "1");
	mkdir_ok("/w/elsewhere", 0755);
	put_s("/w/elsewhere/keep", "keep\n");
	p = plan_of(PATHS_OP_DELETE, "/w", "t");
	ck_assert_int_eq(plocal_rm_begin(root, p, &guest_root, true, &rm, &e), 0);
	paths_plan_free(p);
	/* Step down to the deepest directory (one entry a step). */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(plocal_rm_step(rm, 1, &e), 0);
	ck_assert_int_eq(rename(H("/w/t/d/d/d"), H("/w/elsewhere/d")), 0);
	do
		r = plocal_rm_step(rm, 1, &e);
	while (r == 0);
	plocal_rm_free(rm);
	outcome_is(r, OSERR, "ESTALE");
	msb_error_clear(&e);
	content_is("/w/elsewhere/keep", "keep\n");
	outside_intact();
}
END_TEST

/* ---- temporaries and their journal ------------------------------------------ */

START_TEST(test_temp_names)
{
	char name[PLOCAL_TEMP_NAME_MAX];

	for (int i = 0; i < 16; i++) {
		plocal_temp_name(name, sizeof(name));
		ck_assert_msg(plocal_name_is_temp(name), "%s", name);
	}
	ck_assert(plocal_name_is_temp(".maf-sandbox-0123456789abcdef.tmp"));
	ck_assert(!plocal_name_is_temp(".maf-sandbox-0123456789ABCDEF.tmp"));
	ck_assert(!plocal_name_is_temp(".maf-sandbox-0123456789abcde.tmp"));
	ck_assert(!plocal_name_is_temp(".maf-sandbox-0123456789abcdef.tmpx"));
	ck_assert(!plocal_name_is_temp("maf-sandbox-0123456789abcdef.tmp"));
	ck_assert(!plocal_name_is_temp(".maf-sandbox-x.tmp"));
	ck_assert(!plocal_name_is_temp(""));
}
END_TEST

/* files.list never shows a write's temporary (a daemon killed mid-write
 * may leave one); a name that only looks like one is listed. */
START_TEST(test_list_skips_temps)
{
	struct msb_error e = { 0 };
	json_t *list;

	mkdir_ok("/w/l", 0755);
	put_s("/w/l/.maf-sandbox-0123456789abcdef.tmp", "half");
	put_s("/w/l/.maf-sandbox-nothex0123456789.tmp", "mine");
	put_s("/w/l/a", "a");
	ck_assert_int_eq(do_list("/w", "l", &guest_root, PLOCAL_LIST_MAX_ENTRIES, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 2);
	entry_is(list, 0, "l/.maf-sandbox-nothex0123456789.tmp", "file", 4);
	entry_is(list, 1, "l/a", "file", 1);
	json_decref(list);
	/* One entry over the cap is still no refusal when the extra is a temporary. */
	ck_assert_int_eq(do_list("/w", "l", &guest_root, 2, &list, &e), 0);
	json_decref(list);
}
END_TEST

/* Temporary-looking names count against the listing's scan bound (cap +
 * PLOCAL_LIST_SCAN_SLACK): a flood of them is refused, never scanned whole. */
START_TEST(test_list_scan_bound)
{
	struct msb_error e = { 0 };
	json_t *list = NULL;

	mkdir_ok("/w/flood", 0755);
	put_s("/w/flood/a", "a");
	put_s("/w/flood/b", "b");
	for (int i = 0; i < PLOCAL_LIST_SCAN_SLACK; i++) {
		char p[96];

		snprintf(p, sizeof(p), "/w/flood/.maf-sandbox-%016x.tmp", (unsigned)i);
		put_s(p, "");
	}
	/* Exactly at the bound: listed (the two). */
	ck_assert_int_eq(do_list("/w", "flood", &guest_root, 2, &list, &e), 0);
	ck_assert_uint_eq(json_array_size(list), 2);
	json_decref(list);
	list = NULL;
	put_s("/w/flood/.maf-sandbox-ffffffffffffffff.tmp", "");
	ck_assert_int_eq(do_list("/w", "flood", &guest_root, 2, &list, &e), -EFBIG);
	ck_assert_ptr_null(list);
	ck_assert_int_eq(e.code, MSB_ERR_TRANSFER_CAP_EXCEEDED);
	ck_assert_int_eq(json_integer_value(json_object_get(e.data, "limit")), 2 + PLOCAL_LIST_SCAN_SLACK);
	msb_error_clear(&e);
}
END_TEST

/* The journal: an entry exists (locked) while the write runs and is gone
 * after; a dead writer's entry is taken and names the temporary; a live
 * one's is refused (EBUSY). */
START_TEST(test_journal)
{
	char jdir[PATH_MAX], tmp[PLOCAL_TEMP_NAME_MAX];
	struct plocal_journal_entry je;
	struct msb_error e = { 0 };
	_cleanup_close_ int dfd = -1;
	struct plocal_journal j;
	struct paths_plan *p;
	int lock;

	snprintf(jdir, sizeof(jdir), "%s/journal-XXXXXX", suite_dir);
	ck_assert_ptr_nonnull(mkdtemp(jdir));
	dfd = open(jdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
	j = (struct plocal_journal){ dfd, "0123456789abcdef0123", "engine-one" };
	/* A write journals and forgets. */
	p = plan_of(PATHS_OP_WRITE, "/w", "journalled.txt");
	ck_assert_int_eq(plocal_write(root, p, &guest_root, &j, (const uint8_t *)"j\n", 2, &e), 0);
	paths_plan_free(p);
	content_is("/w/journalled.txt", "j\n");
	{
		DIR *d = opendir(jdir);
		struct dirent *de;
		int n = 0;

		ck_assert_ptr_nonnull(d);
		while ((de = readdir(d)))
			n += de->d_name[0] != '.' || plocal_name_is_temp(de->d_name);
		closedir(d);
		ck_assert_int_eq(n, 0);
	}
	/* An entry in progress: its lock refuses a taker. */
	plocal_temp_name(tmp, sizeof(tmp));
	lock = plocal_journal_begin(&j, "/w/real", tmp);
	ck_assert_int_ge(lock, 0);
	ck_assert_int_eq(plocal_journal_take(dfd, tmp, &je), -EBUSY);
	/* Its writer dies (the lock goes with the descriptor): taken. */
	close(lock);
	ck_assert_int_eq(plocal_journal_take(dfd, tmp, &je), 0);
	ck_assert_str_eq(je.id, "0123456789abcdef0123");
	ck_assert_str_eq(je.parent, "/w/real");
	ck_assert_str_eq(je.tmp, tmp);
	ck_assert_str_eq(je.engine, "engine-one");       /* the writer's engine */
	plocal_journal_entry_release(&je);
	ck_assert_int_eq(plocal_journal_take(dfd, "not-an-entry", &je), -EINVAL);
	ck_assert_int_eq(unlinkat(dfd, tmp, 0), 0);
	/* An older daemon's entry (no engine line): taken, engine NULL. */
	{
		char text[256];
		int fd;

		snprintf(text, sizeof(text), "0123456789abcdef0123\n/w\n%s\n", tmp);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
		close(fd);
		ck_assert_int_eq(plocal_journal_take(dfd, tmp, &je), 0);
		ck_assert_ptr_null(je.engine);
		plocal_journal_entry_release(&je);
		ck_assert_int_eq(unlinkat(dfd, tmp, 0), 0);
	}
	/* A FIFO with an entry's name: refused at once (never a blocking open). */
	ck_assert_int_eq(mkfifoat(dfd, tmp, 0600), 0);
	ck_assert_int_eq(plocal_journal_take(dfd, tmp, &je), -EBADMSG);
	ck_assert_int_eq(unlinkat(dfd, tmp, 0), 0);
	/* A begin publishes its entry whole and locked, and leaves nothing else. */
	lock = plocal_journal_begin(&j, "/w", tmp);
	ck_assert_int_ge(lock, 0);
	{
		DIR *d = opendir(jdir);
		struct dirent *de;
		int n = 0;

		ck_assert_ptr_nonnull(d);
		while ((de = readdir(d)))
			n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
		closedir(d);
		ck_assert_int_eq(n, 1);
	}
	ck_assert_int_eq(plocal_journal_take(dfd, tmp, &je), -EBUSY);
	plocal_journal_end(&j, tmp, lock);
	ck_assert_int_eq(rmdir(jdir), 0);
}
END_TEST

/* A leftover temporary is removed beneath the root, through no link, and
 * only a regular file with a temporary's name. */
START_TEST(test_temp_remove)
{
	const char *t = ".maf-sandbox-00000000000000aa.tmp";
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "/w/real/%s", t);
	put_s(p, "half");
	ck_assert_int_eq(plocal_temp_remove(root, "/w/real", t), 0);
	ck_assert(!exists(p));
	ck_assert_int_eq(plocal_temp_remove(root, "/w/real", t), 0);       /* absent: done */
	ck_assert_int_eq(plocal_temp_remove(root, "/w/gone", t), 0);
	/* Through a link: refused, the file outside kept. */
	snprintf(p, sizeof(p), "/w-outside/%s", t);
	put_s(p, "outside");
	ck_assert_int_eq(plocal_temp_remove(root, "/w/link-dir", t), -ELOOP);
	content_is(p, "outside");
	/* Not a temporary's name; not a regular file. */
	ck_assert_int_eq(plocal_temp_remove(root, "/w", "plain.txt"), -EINVAL);
	content_is("/w/plain.txt", PLAIN);
	snprintf(p, sizeof(p), "/w/real/%s", t);
	mkdir_ok(p, 0755);
	ck_assert_int_eq(plocal_temp_remove(root, "/w/real", t), -EPERM);
	ck_assert(exists(p));
}
END_TEST

/* ---- pinning ------------------------------------------------------------------- */

/* A child that chroots into guest dir (NULL: stays), says so, and sleeps;
 * -1 when it could not. (No ck_assert: the recycled-pid test runs this in
 * a process of its own.) */
static pid_t spawn(const char *chroot_to)
{
	int p[2];
	char c = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (chroot_to && (chroot(H(chroot_to)) < 0 || chdir("/") < 0))
			_exit(2);
		if (write(p[1], "r", 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	close(p[1]);
	if (pid > 0 && read(p[0], &c, 1) != 1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		pid = -1;
	}
	close(p[0]);
	return pid;
}

static bool reap(pid_t pid)
{
	return kill(pid, SIGKILL) == 0 && waitpid(pid, NULL, 0) == pid;
}

static pid_t child_start(const char *chroot_to)
{
	pid_t pid = spawn(chroot_to);

	ck_assert_msg(pid > 0, "starting a child: %s", strerror(errno));
	return pid;
}

static void child_stop(pid_t pid)
{
	ck_assert_msg(reap(pid), "stopping child %d: %s", (int)pid, strerror(errno));
}

/* Whether fd is the directory guest (same device and inode). */
static bool same_dir(int fd, const char *guest)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(H(guest), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* A substring of /proc/<pid>/cgroup long enough to stand for the container
 * id: the tail of its longest line. */
static char *cgroup_id_of(pid_t pid)
{
	char path[64], buf[8192], *best = NULL, *save = NULL;
	size_t best_len = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	f = fopen(path, "re");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strlen(line) > best_len) {
			best = line;
			best_len = strlen(line);
		}
	}
	ck_assert_msg(best_len >= ID_MIN_LEN,
		      "no line of %s is %d characters long: the pin tests need a process in a named cgroup", path,
		      ID_MIN_LEN);
	return xstrdup(best + (best_len > 64 ? best_len - 64 : 0));
}

static void root_is(int fd, const char *guest)
{
	ck_assert_msg(same_dir(fd, guest), "the root opened is not %s", guest);
}

START_TEST(test_pin_root)
{
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	_cleanup_free_ char *id = NULL;
	struct stat via_proc;
	char path[64];
	pid_t pid;
	int fd = -1;

	pid = child_start("/w");
	id = cgroup_id_of(pid);
	ck_assert_int_eq(plocal_pin_open(pid, id, &pin), 0);
	ck_assert(plocal_pin_valid(&pin));
	ck_assert_int_eq(pin.pid, pid);
	ck_assert_int_eq(plocal_root_open(&pin, &fd), 0);
	root_is(fd, "/w");
	snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
	ck_assert_int_eq(stat(path, &via_proc), 0);
	{
		struct stat a;

		ck_assert_int_eq(fstat(fd, &a), 0);
		ck_assert(a.st_dev == via_proc.st_dev && a.st_ino == via_proc.st_ino);
	}
	/* The root is usable as a plane root: the child's "/" is our /w. */
	{
		struct msb_error e = { 0 };
		struct paths_plan *p = plan_of(PATHS_OP_READ, "/real", "inside.txt");
		struct paths_stat st;
		uint8_t *data = NULL;
		size_t len = 0;

		ck_assert_int_eq(plocal_read(fd, p, &guest_root, 100, &data, &len, &st, &e), 0);
		ck_assert_uint_eq(len, strlen(INSIDE));
		ck_assert_mem_eq(data, INSIDE, len);
		free(data);
		paths_stat_release(&st);
		paths_plan_free(p);
		/* Its links are refused there as here. */
		p = plan_of(PATHS_OP_READ, "/", "link-file");
		ck_assert_int_lt(plocal_read(fd, p, &guest_root, 100, &data, &len, &st, &e), 0);
		ck_assert_int_eq(e.code, MSB_ERR_OS_ERROR);
		msb_error_clear(&e);
		paths_plan_free(p);
		p = plan_of(PATHS_OP_READ, "/", "link-dir/secret.txt");
		ck_assert_int_lt(plocal_read(fd, p, &guest_root, 100, &data, &len, &st, &e), 0);
		ck_assert_int_eq(e.code, MSB_ERR_CONFINEMENT);
		msb_error_clear(&e);
		paths_plan_free(p);
	}
	close(fd);
	child_stop(pid);
	fd = -1;
	ck_assert_int_eq(plocal_root_open(&pin, &fd), -ESRCH);
	ck_assert_int_eq(fd, -1);
	plocal_pin_close(&pin);
	ck_assert(!plocal_pin_valid(&pin));
	ck_assert_int_eq(pin.pidfd, -1);
	ck_assert_int_eq(plocal_root_open(&pin, &fd), -EBADF);
	/* A gone process is not pinned. */
	ck_assert_int_eq(plocal_pin_open(pid, id, &pin), -ESRCH);
	ck_assert(!plocal_pin_valid(&pin));
}
END_TEST

/* A child killed but not yet reaped (a zombie): no root, -ESRCH. */
START_TEST(test_pin_zombie)
{
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	_cleanup_free_ char *id = NULL;
	siginfo_t si;
	pid_t pid;
	int fd = -1;

	pid = child_start(NULL);
	id = cgroup_id_of(pid);
	ck_assert_int_eq(plocal_pin_open(pid, id, &pin), 0);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	ck_assert_int_eq(plocal_root_open(&pin, &fd), -ESRCH);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	ck_assert_int_eq(plocal_root_open(&pin, &fd), -ESRCH);
	plocal_pin_close(&pin);
}
END_TEST

START_TEST(test_pin_refusals)
{
	static const char other_id[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	_cleanup_free_ char *id = NULL;
	pid_t pid = child_start(NULL);

	id = cgroup_id_of(pid);
	ck_assert_ptr_null(strstr(id, other_id));
	ck_assert_int_eq(plocal_pin_open(pid, other_id, &pin), -ENOENT);
	ck_assert(!plocal_pin_valid(&pin));
	ck_assert_int_eq(plocal_pin_open(pid, "short", &pin), -EINVAL);
	ck_assert_int_eq(plocal_pin_open(pid, NULL, &pin), -EINVAL);
	ck_assert_int_eq(plocal_pin_open(0, id, &pin), -EINVAL);
	ck_assert_int_eq(plocal_pin_open(-1, id, &pin), -EINVAL);
	ck_assert(!plocal_pin_valid(&pin));
	ck_assert(!plocal_pin_valid(NULL));
	child_stop(pid);
}
END_TEST

/* A process whose user namespace remaps ids (an engine with userns-remap)
 * is left to the archive plane. */
START_TEST(test_pin_remapped)
{
	static const char map[] = "0 100000 65536\n";
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	_cleanup_free_ char *id = NULL;
	int ready[2];
	char path[64], c = 0;
	pid_t pid;

	ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWUSER) < 0 || write(ready[1], "u", 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(ready[0]);
	id = cgroup_id_of(pid);
	/* Not mapped yet: not the identity either. */
	ck_assert_int_eq(plocal_pin_open(pid, id, &pin), -EOPNOTSUPP);
	for (int i = 0; i < 2; i++) {
		_cleanup_close_ int fd = -1;

		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, i ? "gid_map" : "uid_map");
		fd = open(path, O_WRONLY | O_CLOEXEC);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, map, strlen(map)), (ssize_t)strlen(map));
	}
	ck_assert_int_eq(plocal_pin_open(pid, id, &pin), -EOPNOTSUPP);
	ck_assert(!plocal_pin_valid(&pin));
	child_stop(pid);
}
END_TEST

/* The pid of a reaped child, given to a new process: the old pin never
 * opens the new process's root. In a pid namespace of its own (with its
 * own /proc), so that nothing else on the machine takes the pid between
 * setting ns_last_pid and the fork. The namespace's init runs the steps
 * and exits with the first that failed (or RS_OK). */
enum recycle_step {
	RS_OK, RS_NAMESPACE, RS_MOUNT, RS_START, RS_PIN, RS_ROOT, RS_LAST_PID, RS_NOT_RECYCLED, RS_OLD_PIN_OPENED,
	RS_OLD_PIN_ERRNO, RS_NEW_PIN, RS_NEW_ROOT, RS_NEW_ROOT_WRONG, _RS_MAX,
};

static const char *const recycle_what[_RS_MAX] = {
	[RS_OK] = "ok",
	[RS_NAMESPACE] = "making the pid namespace (or its init died)",
	[RS_MOUNT] = "mounting the namespace's /proc",
	[RS_START] = "starting the first child",
	[RS_PIN] = "pinning the first child",
	[RS_ROOT] = "opening the first child's root (or it is not its chroot)",
	[RS_LAST_PID] = "writing ns_last_pid",
	[RS_NOT_RECYCLED] = "no new child got the old pid",
	[RS_OLD_PIN_OPENED] = "the stale pin opened the NEW process's root",
	[RS_OLD_PIN_ERRNO] = "the stale pin failed, but not with -ESRCH",
	[RS_NEW_PIN] = "pinning the new process",
	[RS_NEW_ROOT] = "opening the new process's root",
	[RS_NEW_ROOT_WRONG] = "the new pin opened a root that is not the new process's",
};

static enum recycle_step recycle_steps(const char *id)
{
	struct plocal_pin pin = PLOCAL_PIN_INIT, pin2 = PLOCAL_PIN_INIT;
	pid_t old, again = -1;
	int fd = -1, r;

	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return RS_MOUNT;
	old = spawn("/w");
	if (old < 0)
		return RS_START;
	if (plocal_pin_open(old, id, &pin) < 0)
		return RS_PIN;
	if (plocal_root_open(&pin, &fd) < 0 || !same_dir(fd, "/w"))
		return RS_ROOT;
	close(fd);
	fd = -1;
	reap(old);
	for (int tries = 0; tries < RECYCLE_TRIES && again != old; tries++) {
		FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "we");

		if (!f)
			return RS_LAST_PID;
		fprintf(f, "%d", (int)old - 1);
		if (fclose(f) != 0)
			return RS_LAST_PID;
		again = spawn("/w/real");
		if (again > 0 && again != old)
			reap(again);
	}
	if (again != old)
		return RS_NOT_RECYCLED;
	r = plocal_root_open(&pin, &fd);
	if (r == 0)
		return RS_OLD_PIN_OPENED;
	if (r != -ESRCH || plocal_root_open(&pin, &fd) != -ESRCH)
		return RS_OLD_PIN_ERRNO;
	plocal_pin_close(&pin);
	if (plocal_pin_open(again, id, &pin2) < 0)
		return RS_NEW_PIN;
	if (plocal_root_open(&pin2, &fd) < 0)
		return RS_NEW_ROOT;
	if (!same_dir(fd, "/w/real"))
		return RS_NEW_ROOT_WRONG;
	close(fd);
	plocal_pin_close(&pin2);
	reap(again);
	return RS_OK;
}

START_TEST(test_pin_recycled_pid)
{
	_cleanup_free_ char *id = cgroup_id_of(getpid());
	int status;
	pid_t init;

	/* The namespace is made by a child of ours, never by this process: once
	 * its init is gone, nothing more could be forked from here (not even
	 * LeakSanitizer's tracer at exit). */
	init = fork();
	ck_assert_int_ge(init, 0);
	if (init == 0) {
		pid_t ns_init;

		if (unshare(CLONE_NEWPID) < 0)
			_exit(RS_NAMESPACE);
		ns_init = fork();
		if (ns_init == 0)
			_exit(recycle_steps(id));
		if (ns_init < 0 || waitpid(ns_init, &status, 0) != ns_init)
			_exit(RS_NAMESPACE);
		_exit(WIFEXITED(status) ? WEXITSTATUS(status) : RS_NAMESPACE);
	}
	ck_assert_int_eq(waitpid(init, &status, 0), init);
	ck_assert_msg(WIFEXITED(status), "the namespace's maker died (status %#x)", (unsigned)status);
	ck_assert_msg(WEXITSTATUS(status) < _RS_MAX, "the namespace's init exited %d", WEXITSTATUS(status));
	ck_assert_msg(WEXITSTATUS(status) == RS_OK, "recycled pid: %s", recycle_what[WEXITSTATUS(status)]);
}
END_TEST

/* ---- the suite --------------------------------------------------------------------- */

static Suite *plane_local_suite(void)
{
	Suite *s = suite_create("plane_local");
	TCase *tc;

	tc = tcase_create("refusals");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_refusal, 0, ELEMENTSOF(refusal_rows));
	tcase_add_test(tc, test_refusal_names_path);
	tcase_add_test(tc, test_available);
	suite_add_tcase(s, tc);

	tc = tcase_create("stat");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_stat_link_leaf);
	tcase_add_test(tc, test_stat_kinds);
	suite_add_tcase(s, tc);

	tc = tcase_create("read");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_read_fifo_never_blocks);
	tcase_add_test(tc, test_read_device);
	tcase_add_test(tc, test_read_hard_link);
	tcase_add_test(tc, test_read_cap);
	tcase_add_test(tc, test_read_empty);
	tcase_add_test(tc, test_read_exact);
	tcase_add_test(tc, test_read_pseudo_fs);
	suite_add_tcase(s, tc);

	tc = tcase_create("write");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_write_parents_and_modes);
	tcase_add_test(tc, test_write_replaces);
	tcase_add_test(tc, test_write_mode_from_the_first_byte);
	tcase_add_test(tc, test_write_link_leaf);
	tcase_add_test(tc, test_write_fifo_leaf);
	tcase_add_test(tc, test_write_dir_leaf);
	tcase_add_test(tc, test_write_check_writes_nothing);
	tcase_add_test(tc, test_write_failure_leaves_no_temp);
	suite_add_tcase(s, tc);

	tc = tcase_create("reach");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_reach_write_root_dir);
	tcase_add_test(tc, test_reach_write_guest_dir);
	tcase_add_test(tc, test_reach_read);
	tcase_add_test(tc, test_reach_remove);
	tcase_add_test(tc, test_reach_closed_dir_on_the_way);
	tcase_add_test(tc, test_reach_guest_root_no_override);
	suite_add_tcase(s, tc);

	tc = tcase_create("credentials");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_cred_enter_leave);
	tcase_add_test(tc, test_cred_leave_restores_reduced_effective);
	tcase_add_test(tc, test_available_leaves_creds);
	suite_add_tcase(s, tc);

	tc = tcase_create("prepare_check");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_prepare_new_chain);
	tcase_add_test(tc, test_prepare_existing_base);
	tcase_add_test(tc, test_prepare_refusals);
	tcase_add_test(tc, test_check);
	suite_add_tcase(s, tc);

	tc = tcase_create("list");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_list_wd);
	tcase_add_test(tc, test_list_relative_paths);
	tcase_add_test(tc, test_list_cap);
	tcase_add_test(tc, test_list_unsearchable);
	suite_add_tcase(s, tc);

	tc = tcase_create("remove");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_rm_file);
	tcase_add_test(tc, test_rm_links);
	tcase_add_test(tc, test_rm_dir_needs_recursive);
	tcase_add_test(tc, test_rm_recursive_in_slices);
	tcase_add_test(tc, test_rm_abandoned);
	tcase_add_test(tc, test_rm_depth_limit);
	tcase_add_test(tc, test_rm_never_crosses_mount);
	tcase_add_test(tc, test_mount_file_never_replaced);
	tcase_add_test(tc, test_mount_never_removed);
	tcase_add_test(tc, test_write_pseudo_fs);
	tcase_add_test(tc, test_rm_fds_bounded);
	tcase_add_test(tc, test_rm_moved_under_it);
	tcase_add_test(tc, test_temp_names);
	tcase_add_test(tc, test_list_skips_temps);
	tcase_add_test(tc, test_list_scan_bound);
	tcase_add_test(tc, test_journal);
	tcase_add_test(tc, test_temp_remove);
	suite_add_tcase(s, tc);

	tc = tcase_create("pin");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pin_root);
	tcase_add_test(tc, test_pin_zombie);
	tcase_add_test(tc, test_pin_refusals);
	tcase_add_test(tc, test_pin_remapped);
	tcase_add_test(tc, test_pin_recycled_pid);
	suite_add_tcase(s, tc);
	return s;
}

/* Asked of the kernel directly, not through the code under test. */
static bool have_openat2(void)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));

	if (fd >= 0)
		close(fd);
	return fd >= 0 || errno != ENOSYS;
}

int main(void)
{
	SRunner *sr;
	int failed;

	if (geteuid() != 0) {
		fprintf(stderr, "check_plane_local: SKIPPED — the local file plane's tests need root "
				"(guest credentials, mounts, other processes' roots); CI runs them as root\n");
		return 77;
	}
	if (!have_openat2()) {
		fprintf(stderr, "check_plane_local: SKIPPED — openat2 is not there (Linux < 5.6, or valgrind "
				"< 3.20, which does not know the call): the daemon would serve the archive plane\n");
		return 77;
	}
	snprintf(suite_dir, sizeof(suite_dir), "/tmp/check-plane-local-XXXXXX");
	if (!mkdtemp(suite_dir)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	sr = srunner_create(plane_local_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	rm_rf(suite_dir);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
