#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include <sys/queue.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "engine.h"
#include "fileop.h"
#include "log.h"
#include "plane.h"
#include "plane_local.h"
#include "registry.h"
#include "sha256.h"
#include "xmalloc.h"

/* Every path of the guest: beneath the root, no link, no magic link. */
#define RESOLVE_GUEST (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
/* One component below a directory we hold. */
#define RESOLVE_STEP  (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

#define DIR_MODE  0755
#define FILE_MODE 0644

/* Pseudo filesystems whose files are not the guest's data: never read. */
static const unsigned long pseudo_fs[] = {
	PROC_SUPER_MAGIC, SYSFS_MAGIC, CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC,
	SECURITYFS_MAGIC, TRACEFS_MAGIC, BPF_FS_MAGIC, EFIVARFS_MAGIC, SELINUX_MAGIC,
	SMACK_MAGIC, PSTOREFS_MAGIC,
};

static int sys_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
	struct open_how how = { .flags = flags | O_CLOEXEC, .resolve = resolve };

	for (int i = 0;; i++) {
		int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

		if (fd >= 0)
			return fd;
		if (errno != EAGAIN || i >= PLOCAL_EAGAIN_RETRIES)
			return -errno;
	}
}

static bool pidfd_alive(int pidfd);

/* Whether the calls the plane makes are allowed here (a service manager's
 * capability bounding set or syscall filter may forbid them): each is
 * tried and undone. 0, or -errno with *reterr_why. */
static int probe_credentials(const char **reterr_why)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	gid_t groups[256];
	uid_t fsuid = (uid_t)setfsuid((uid_t)-1);
	gid_t fsgid = (gid_t)setfsgid((gid_t)-1);
	int n, pidfd;

	/* Read before the round trips: setfsuid back to 0 raises the file
	 * system capabilities from the permitted set; the capset below puts
	 * the daemon's own effective set back. */
	if (syscall(SYS_capget, &h, data) < 0) {
		*reterr_why = "the daemon cannot read its capabilities (capget)";
		return -EPERM;
	}
	setfsuid(65534);
	if ((uid_t)setfsuid(fsuid) != 65534) {
		*reterr_why = "the daemon cannot take a guest's file system uid (CAP_SETUID)";
		return -EPERM;
	}
	setfsgid(65534);
	if ((gid_t)setfsgid(fsgid) != 65534) {
		*reterr_why = "the daemon cannot take a guest's file system gid (CAP_SETGID)";
		return -EPERM;
	}
	n = getgroups(sizeof(groups) / sizeof(groups[0]), groups);
	if (n < 0 || syscall(SYS_setgroups, (size_t)n, groups) < 0) {
		*reterr_why = "the daemon cannot set its supplementary groups (CAP_SETGID, setgroups)";
		return -EPERM;
	}
	if (syscall(SYS_capset, &h, data) < 0) {
		*reterr_why = "the daemon cannot set its capabilities (capset)";
		return -EPERM;
	}
	pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (pidfd < 0 || !pidfd_alive(pidfd)) {
		if (pidfd >= 0)
			close(pidfd);
		*reterr_why = "the kernel has no pollable pidfd (pidfd_open: Linux >= 5.3)";
		return -ENOSYS;
	}
	close(pidfd);
	return 0;
}

int plocal_available(const char **reterr_why)
{
	int fd;

	if (geteuid() != 0) {
		*reterr_why = "the daemon does not run as root";
		return -EPERM;
	}
	fd = sys_openat2(AT_FDCWD, "/", O_PATH | O_DIRECTORY, RESOLVE_GUEST);
	if (fd < 0) {
		*reterr_why = fd == -ENOSYS ? "the kernel has no openat2 (Linux >= 5.6)"
					    : "openat2 with RESOLVE_IN_ROOT is refused";
		return fd;
	}
	close(fd);
	return probe_credentials(reterr_why);
}

/* ---- errors ----------------------------------------------------------------- */

static const char *errno_name(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "EIO";
}

/* A refusal of the path rules. */
static int fail_reason(enum paths_reason reason, const char *rel, struct msb_error *err)
{
	static const int errnos[_PATHS_R_MAX] = {
		[PATHS_R_SYMLINK_ANCESTOR] = ELOOP, [PATHS_R_SYMLINK_LEAF] = ELOOP,
		[PATHS_R_NOT_A_DIRECTORY] = ENOTDIR, [PATHS_R_NOT_FOUND] = ENOENT,
		[PATHS_R_NOT_REGULAR] = EINVAL, [PATHS_R_IS_DIRECTORY] = EISDIR,
		[PATHS_R_TOO_LONG] = ENAMETOOLONG,
	};

	paths_error_from_reason(reason, rel, err);
	return errnos[reason] ? -errnos[reason] : -EINVAL;
}

/* What the guest's filesystem said (OSError), naming the errno. */
static int fail_os(int r, const char *rel, const char *what, struct msb_error *err)
{
	msb_error_set(err, MSB_ERR_OS_ERROR,
		      json_pack("{s:s, s:s}", "path", rel && *rel ? rel : ".", "errno", errno_name(-r)),
		      "%s: %s", what, strerror(-r));
	return r;
}

/* A failed resolution of a directory on the way. */
static int fail_walk(int r, const char *rel, const char *what, struct msb_error *err)
{
	switch (r) {
	case -ELOOP:
		return fail_reason(PATHS_R_SYMLINK_ANCESTOR, rel, err);
	case -ENOTDIR:
		return fail_reason(PATHS_R_NOT_A_DIRECTORY, rel, err);
	case -ENOENT:
		return fail_reason(PATHS_R_NOT_FOUND, rel, err);
	case -ENAMETOOLONG:
		return fail_reason(PATHS_R_TOO_LONG, rel, err);
	case -EISDIR:
		return fail_reason(PATHS_R_NOT_REGULAR, rel, err);
	default:
		return fail_os(r, rel, what, err);
	}
}

/* ---- mount points ------------------------------------------------------------ */

/* The mount id of what fd stands for (an O_PATH handle will do). */
static int mnt_id_of(int fd, uint64_t *ret)
{
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) < 0)
		return -errno;
	if (!(sx.stx_mask & STATX_MNT_ID))
		return -EOPNOTSUPP;
	*ret = sx.stx_mnt_id;
	return 0;
}

/* Whether name below dir is the root of a mount (a bind-mounted file such
 * as /etc/resolv.conf, a tmpfs...): STATX_ATTR_MOUNT_ROOT where the kernel
 * says it, else its mount id differs from dir's. The final component is
 * not followed. 1 yes, 0 no (or absent), -errno. */
static int entry_is_mount(int dir, const char *name)
{
	struct statx sx;
	uint64_t dir_mnt = 0;
	int r;

	if (statx(dir, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE | STATX_MNT_ID, &sx) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return !!(sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
	if (!(sx.stx_mask & STATX_MNT_ID))
		return -EOPNOTSUPP;
	r = mnt_id_of(dir, &dir_mnt);
	if (r < 0)
		return r;
	return sx.stx_mnt_id != dir_mnt;
}

/* The refusal of a call that would replace or remove a mount point:
 * OSError, errno EBUSY, data.mount naming it. */
static int fail_mount(const char *rel, const char *mount, struct msb_error *err)
{
	const char *m = mount && *mount ? mount : ".";

	msb_error_set(err, MSB_ERR_OS_ERROR,
		      json_pack("{s:s, s:s, s:s}", "path", rel && *rel ? rel : ".", "errno", "EBUSY", "mount", m),
		      "%s is a mount point: file calls never replace or remove a mount", m);
	return -EBUSY;
}

/* Refuses when name below dir is a mount point; 0 when it is not. */
static int check_not_mount(int dir, const char *name, const char *rel, const char *mount_rel,
			   struct msb_error *err)
{
	int r = entry_is_mount(dir, name);

	if (r > 0)
		return fail_mount(rel, mount_rel, err);
	if (r < 0)
		return fail_os(r, rel, "examining the path", err);
	return 0;
}

/* ---- credentials ------------------------------------------------------------ */

static void caps_get(uint32_t eff[2], struct __user_cap_data_struct data[2])
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };

	if (syscall(SYS_capget, &h, data) < 0)
		fatal("capget");
	eff[0] = data[0].effective;
	eff[1] = data[1].effective;
}

static void caps_set_effective(const uint32_t eff[2])
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	uint32_t cur[2];

	caps_get(cur, data);
	data[0].effective = eff[0];
	data[1].effective = eff[1];
	if (syscall(SYS_capset, &h, data) < 0)
		fatal("capset");
}

void plocal_cred_enter(const struct plocal_cred *c, struct plocal_saved *s)
{
	static const uint32_t none[2] = { 0, 0 };
	struct __user_cap_data_struct data[2];
	int n;

	*s = (struct plocal_saved){ 0 };
	n = getgroups(0, NULL);
	if (n < 0)
		fatal("getgroups");
	s->groups = xmalloc(((size_t)n + 1) * sizeof(gid_t));
	s->n_groups = getgroups(n, s->groups);
	if (s->n_groups < 0)
		fatal("getgroups");
	caps_get(s->cap_eff, data);
	s->fsuid = (uid_t)setfsuid((uid_t)-1);
	s->fsgid = (gid_t)setfsgid((gid_t)-1);
	s->entered = true;
	/* Per thread (the raw syscalls): no supplementary group, the guest's
	 * fsgid and fsuid, then no capability at all. */
	if (syscall(SYS_setgroups, 0, NULL) < 0)
		fatal("setgroups");
	setfsgid(c->gid);
	setfsuid(c->uid);
	if ((gid_t)setfsgid((gid_t)-1) != c->gid || (uid_t)setfsuid((uid_t)-1) != c->uid)
		fatalx("%s: could not take the guest's credentials %u:%u", __func__, (unsigned)c->uid,
		       (unsigned)c->gid);
	caps_set_effective(none);
}

void plocal_cred_leave(struct plocal_saved *s)
{
	if (!s->entered)
		return;
	/* Capabilities first: setgroups needs CAP_SETGID back. */
	caps_set_effective(s->cap_eff);
	setfsuid(s->fsuid);
	setfsgid(s->fsgid);
	if ((uid_t)setfsuid((uid_t)-1) != s->fsuid || (gid_t)setfsgid((gid_t)-1) != s->fsgid)
		fatalx("%s: could not restore the daemon's file system ids", __func__);
	if (syscall(SYS_setgroups, (size_t)s->n_groups, s->groups) < 0)
		fatal("setgroups (restore)");
	/* setfsuid back to 0 raised the file system capabilities from the
	 * permitted set: the daemon's own effective set, exactly. */
	caps_set_effective(s->cap_eff);
	free(s->groups);
	*s = (struct plocal_saved){ 0 };
}

/* ---- pinning ---------------------------------------------------------------- */

bool plocal_pin_valid(const struct plocal_pin *pin)
{
	return pin && pin->pidfd >= 0;
}

void plocal_pin_close(struct plocal_pin *pin)
{
	if (pin->pidfd >= 0)
		close(pin->pidfd);
	*pin = (struct plocal_pin)PLOCAL_PIN_INIT;
}

/* A pidfd polls readable once its process has exited: no permission to
 * signal it is needed (a non-root init, a bounding set without CAP_KILL). */
static bool pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	return r == 0;
}

/* Reads fd to its end or size - 1 bytes (NUL-terminated); the length or -errno. */
static int read_upto(int fd, char *buf, size_t size)
{
	size_t len = 0;

	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, size - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return (int)len;
}

/* Reads a small /proc file whole (NUL-terminated); -errno. */
static int read_small(const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return -errno;
	return read_upto(fd, buf, size);
}

/* True when every line of a uid_map/gid_map is the identity of the whole range. */
static bool map_is_identity(const char *map)
{
	unsigned long inside, outside, count;

	return sscanf(map, " %lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 &&
	       count == 4294967295UL && !strchr(strchr(map, '\n') ? strchr(map, '\n') + 1 : "", '\n');
}

int plocal_pin_open(pid_t pid, const char *id, struct plocal_pin *ret)
{
	char path[64], buf[8192];
	int pidfd, r;

	*ret = (struct plocal_pin)PLOCAL_PIN_INIT;
	if (pid <= 0 || !id || strlen(id) < 12)
		return -EINVAL;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -errno;
	/* Held now: whatever /proc/<pid> shows from here is this process's,
	 * as long as the pidfd says it is alive afterwards. */
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	r = read_small(path, buf, sizeof(buf));
	if (r >= 0 && !strstr(buf, id))
		r = -ENOENT;
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
		r = read_small(path, buf, sizeof(buf));
		if (r >= 0 && !map_is_identity(buf))
			r = -EOPNOTSUPP;
	}
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		r = read_small(path, buf, sizeof(buf));
		if (r >= 0 && !map_is_identity(buf))
			r = -EOPNOTSUPP;
	}
	if (r >= 0 && !pidfd_alive(pidfd))
		r = -ESRCH;
	if (r < 0) {
		close(pidfd);
		return r == -ENOENT && kill(pid, 0) < 0 && errno == ESRCH ? -ESRCH : r;
	}
	ret->pid = pid;
	ret->pidfd = pidfd;
	return 0;
}

int plocal_root_open(const struct plocal_pin *pin, int *ret_fd)
{
	char path[64];
	int fd;

	if (!plocal_pin_valid(pin))
		return -EBADF;
	snprintf(path, sizeof(path), "/proc/%d/root", (int)pin->pid);
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno != ENOENT && errno != ESRCH)
		return -errno;
	/* Alive after the open: the pid named this process all along. */
	if (!pidfd_alive(pin->pidfd)) {
		if (fd >= 0)
			close(fd);
		return -ESRCH;
	}
	if (fd < 0)
		return -ESRCH;
	*ret_fd = fd;
	return 0;
}

/* ---- resolution ------------------------------------------------------------- */

/* A guest directory (absolute, normalised) beneath root: oflags plus
 * O_DIRECTORY. -errno as the kernel says it. */
static int open_dir(int root, const char *gpath, uint64_t oflags)
{
	return sys_openat2(root, strcmp(gpath, "/") == 0 ? "." : gpath, oflags | O_DIRECTORY, RESOLVE_GUEST);
}

/* The final component of an absolute, normalised guest path ("/" has none). */
static const char *leaf_name(const char *gpath)
{
	return strrchr(gpath, '/') + 1;
}

/* The parent directory of gpath (malloc'd): "/a/b" → "/a", "/a" → "/". */
static char *parent_of(const char *gpath)
{
	const char *slash = strrchr(gpath, '/');

	return slash == gpath ? xstrdup("/") : xstrndup(gpath, (size_t)(slash - gpath));
}

static void stat_fill(const struct stat *sb, const char *name, int dirfd, struct paths_stat *st)
{
	*st = (struct paths_stat){ 0 };
	st->name = xstrdup(name);
	st->kind = paths_kind_from_st_mode(sb->st_mode);
	st->size = sb->st_size > 0 ? (uint64_t)sb->st_size : 0;
	st->perm = sb->st_mode & 07777;
	st->mtime_sec = sb->st_mtim.tv_sec;
	st->mtime_nsec = (uint32_t)sb->st_mtim.tv_nsec;
	st->link_target = NULL;
	if (st->kind == PATHS_KIND_SYMLINK && dirfd >= 0) {
		char buf[PLOCAL_LINK_MAX_BYTES + 1];
		ssize_t n = readlinkat(dirfd, name, buf, sizeof(buf) - 1);

		buf[n > 0 ? n : 0] = '\0';
		st->link_target = xstrdup(buf);
	}
	if (!st->link_target)
		st->link_target = xstrdup("");
}

/* Opens the parent of plan's target; *ret_absent when it is not there. */
static int open_parent(int root, const struct paths_plan *plan, bool *ret_absent, struct msb_error *err)
{
	_cleanup_free_ char *parent = parent_of(plan->target.path);
	int fd = open_dir(root, parent, O_PATH);

	*ret_absent = false;
	if (fd == -ENOENT) {
		*ret_absent = true;
		return -ENOENT;
	}
	if (fd < 0)
		return fail_walk(fd, plan->target.rel, "resolving the path", err);
	return fd;
}

/* ---- stat ------------------------------------------------------------------- */

static int do_stat(int root, const struct paths_plan *plan, bool *ret_found, struct paths_stat *ret_st,
		   struct msb_error *err)
{
	_cleanup_close_ int dir = -1;
	struct stat sb;
	bool absent;

	*ret_found = false;
	if (plan->target.path[1] == '\0') {
		/* "/" itself */
		if (fstat(root, &sb) < 0)
			return fail_os(-errno, plan->target.rel, "examining the path", err);
		stat_fill(&sb, "/", -1, ret_st);
		*ret_found = true;
		return 0;
	}
	if (plan->target.is_wd) {
		/* The working directory itself must be a real directory, like
		 * every one above it. */
		dir = open_dir(root, plan->target.path, O_PATH);
		if (dir == -ENOENT)
			return 0;
		if (dir < 0)
			return fail_walk(dir, plan->target.rel, "resolving the working directory", err);
		if (fstat(dir, &sb) < 0)
			return fail_os(-errno, plan->target.rel, "examining the path", err);
		stat_fill(&sb, leaf_name(plan->target.path), -1, ret_st);
		*ret_found = true;
		return 0;
	}
	dir = open_parent(root, plan, &absent, err);
	if (absent)
		return 0;
	if (dir < 0)
		return dir;
	if (fstatat(dir, leaf_name(plan->target.path), &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return 0;
		return fail_os(-errno, plan->target.rel, "examining the path", err);
	}
	stat_fill(&sb, leaf_name(plan->target.path), dir, ret_st);
	*ret_found = true;
	return 0;
}

int plocal_stat(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool *ret_found,
		struct paths_stat *ret_st, struct msb_error *reterr)
{
	struct plocal_saved s;
	int r;

	plocal_cred_enter(c, &s);
	r = do_stat(root, plan, ret_found, ret_st, reterr);
	plocal_cred_leave(&s);
	return r;
}

/* ---- read ------------------------------------------------------------------- */

static bool on_pseudo_fs(int fd)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return true;
	for (size_t i = 0; i < sizeof(pseudo_fs) / sizeof(pseudo_fs[0]); i++)
		if ((unsigned long)sf.f_type == pseudo_fs[i])
			return true;
	return false;
}

/* A write whose directory lies on a pseudo filesystem (proc, sysfs...). */
static int fail_pseudo(const char *rel, struct msb_error *err)
{
	msb_error_set(err, MSB_ERR_OS_ERROR, json_pack("{s:s, s:s}", "path", rel && *rel ? rel : ".", "errno", "EXDEV"),
		      "%s lies on a pseudo filesystem (proc, sysfs, cgroup...); file calls never write there",
		      rel && *rel ? rel : ".");
	return -EXDEV;
}

static int do_read(int root, const struct paths_plan *plan, uint64_t max_bytes, uint8_t **ret_data,
		   size_t *ret_len, struct paths_stat *ret_st, struct msb_error *err)
{
	_cleanup_close_ int dir = -1, handle = -1, fd = -1;
	const char *rel = plan->target.rel;
	char self[64];
	struct stat sb, sb2;
	uint8_t *buf;
	size_t len = 0, cap;
	bool absent;

	if (plan->target.path[1] == '\0')
		return fail_reason(PATHS_R_NOT_REGULAR, rel, err);
	/* One byte past the cap must fit in a size_t (the grown-while-read check). */
	if (max_bytes >= SIZE_MAX / 2)
		max_bytes = SIZE_MAX / 2 - 1;
	if (plan->target.is_wd) {
		/* The working directory: a directory (never read), or refused. */
		handle = open_dir(root, plan->target.path, O_PATH);
		return fail_walk(handle < 0 ? handle : -EISDIR, rel, "resolving the working directory", err);
	}
	dir = open_parent(root, plan, &absent, err);
	if (absent)
		return fail_reason(PATHS_R_NOT_FOUND, rel, err);
	if (dir < 0)
		return dir;
	for (int tries = 0;; tries++) {
		handle = sys_openat2(dir, leaf_name(plan->target.path), O_PATH | O_NOFOLLOW, RESOLVE_STEP);
		if (handle == -ENOENT)
			return fail_reason(PATHS_R_NOT_FOUND, rel, err);
		if (handle == -ELOOP)
			return fail_reason(PATHS_R_NOT_REGULAR, rel, err);
		if (handle < 0)
			return fail_os(handle, rel, "opening the file", err);
		if (fstat(handle, &sb) < 0)
			return fail_os(-errno, rel, "examining the file", err);
		if (sb.st_nlink != 0)
			break;
		/* Unlinked since we opened it (removed, or replaced by a rename):
		 * look again, once; then it is gone. */
		close(handle);
		handle = -1;
		if (tries == 1)
			return fail_reason(PATHS_R_NOT_FOUND, rel, err);
	}
	/* Only a regular file with one link on an ordinary filesystem. */
	if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1 || on_pseudo_fs(handle))
		return fail_reason(PATHS_R_NOT_REGULAR, rel, err);
	if ((uint64_t)sb.st_size > max_bytes) {
		msb_error_set(err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
			      json_pack("{s:s, s:I, s:I}", "path", rel, "limit", (json_int_t)max_bytes,
					"size", (json_int_t)sb.st_size),
			      "'%s' is %llu bytes and the caller allowed %llu", rel,
			      (unsigned long long)sb.st_size, (unsigned long long)max_bytes);
		return -EFBIG;
	}
	/* That very inode, opened for reading with the guest's credentials. */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", handle);
	fd = open(self, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return fail_os(-errno, rel, "opening the file", err);
	if (fstat(fd, &sb2) < 0 || sb2.st_dev != sb.st_dev || sb2.st_ino != sb.st_ino)
		return fail_reason(PATHS_R_NOT_REGULAR, rel, err);
	cap = (size_t)sb.st_size + 1;
	buf = xmalloc(cap);
	for (;;) {
		ssize_t n;

		if (len == cap) {
			if ((uint64_t)len > max_bytes)
				break;
			cap = cap * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : cap * 2;
			buf = xrealloc(buf, cap);
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = -errno;

			free(buf);
			return fail_os(e, rel, "reading the file", err);
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if ((uint64_t)len > max_bytes) {
		/* It grew while we read: a refusal, never a truncation. */
		free(buf);
		msb_error_set(err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
			      json_pack("{s:s, s:I}", "path", rel, "limit", (json_int_t)max_bytes),
			      "'%s' is larger than the caller allowed", rel);
		return -EFBIG;
	}
	stat_fill(&sb2, leaf_name(plan->target.path), -1, ret_st);
	ret_st->size = len;
	*ret_data = buf;
	*ret_len = len;
	return 0;
}

int plocal_read(int root, const struct paths_plan *plan, const struct plocal_cred *c, uint64_t max_bytes,
		uint8_t **ret_data, size_t *ret_len, struct paths_stat *ret_st, struct msb_error *reterr)
{
	struct plocal_saved s;
	int r;

	plocal_cred_enter(c, &s);
	r = do_read(root, plan, max_bytes, ret_data, ret_len, ret_st, reterr);
	plocal_cred_leave(&s);
	return r;
}

/* ---- making directories ----------------------------------------------------- */

/* Opens (making it when absent) each directory of gpath from root down;
 * made ones get mode 0755 and, when owner is set, that owner (the
 * daemon's authority: PREPARE); missing_from counts as "from here down,
 * made by us". Returns the fd of gpath (O_PATH) or -errno with *err. */
static int make_dirs(int root, const char *gpath, const char *rel, bool create, const struct plocal_cred *owner,
		     size_t owner_from_depth, bool *ret_missing, struct msb_error *err)
{
	_cleanup_free_ char *copy = xstrdup(gpath);
	char *save = NULL, *comp;
	int cur = dup(root);
	size_t depth = 0;

	if (ret_missing)
		*ret_missing = false;
	if (cur < 0)
		return fail_os(-errno, rel, "resolving the path", err);
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save), depth++) {
		int next = sys_openat2(cur, comp, O_PATH | O_DIRECTORY, RESOLVE_STEP);
		bool made;

		if (next == -ENOENT) {
			if (ret_missing)
				*ret_missing = true;
			if (!create) {
				close(cur);
				return -ENOENT;
			}
			made = mkdirat(cur, comp, DIR_MODE) == 0;
			if (!made && errno != EEXIST) {
				int e = -errno;

				close(cur);
				return fail_os(e, rel, "creating a directory", err);
			}
			/* Made (or raced into being): opened without following (a link
			 * there is ELOOP; O_NOFOLLOW with O_DIRECTORY would say ENOTDIR). */
			next = sys_openat2(cur, comp, O_RDONLY | O_DIRECTORY, RESOLVE_STEP);
			if (next >= 0 && made) {
				/* Ours: its mode whatever the umask, its owner (PREPARE). */
				if (fchmod(next, DIR_MODE) < 0)
					log_debug("files", "fchmod of a new directory: %s", strerror(errno));
				if (owner && fchown(next, depth >= owner_from_depth ? owner->uid : 0,
						    depth >= owner_from_depth ? owner->gid : 0) < 0) {
					int e = -errno;

					close(next);
					close(cur);
					return fail_os(e, rel, "giving a directory its owner", err);
				}
			}
		}
		close(cur);
		if (next < 0)
			return fail_walk(next, rel, "resolving the path", err);
		cur = next;
	}
	return cur;
}

/* ---- write ------------------------------------------------------------------ */

static int write_all(int fd, const uint8_t *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The leaf of a write: a link is refused (never followed), a directory
 * too; absent or a file is fine. */
static int write_leaf_check(int dir, const char *leaf, const char *rel, struct msb_error *err)
{
	struct stat sb;

	if (fstatat(dir, leaf, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISLNK(sb.st_mode))
			return fail_reason(PATHS_R_SYMLINK_LEAF, rel, err);
		if (S_ISDIR(sb.st_mode))
			return fail_reason(PATHS_R_IS_DIRECTORY, rel, err);
		/* A bind-mounted file (/etc/resolv.conf): a rename over it would
		 * take the mount away, which the guest itself cannot. */
		return check_not_mount(dir, leaf, rel, rel, err);
	} else if (errno != ENOENT) {
		return fail_os(-errno, rel, "examining the path", err);
	}
	return 0;
}

static int do_write_check(int root, const struct paths_plan *plan, struct msb_error *err)
{
	_cleanup_free_ char *parent = parent_of(plan->target.path);
	_cleanup_close_ int dir = open_dir(root, parent, O_PATH);

	if (dir == -ENOENT) {
		/* Made by the write: but nothing on the way may be a link or a file. */
		bool missing;
		int fd = make_dirs(root, parent, plan->target.rel, false, NULL, 0, &missing, err);

		if (fd >= 0)
			close(fd);
		return fd == -ENOENT ? 0 : fd < 0 ? fd : 0;
	}
	if (dir < 0)
		return fail_walk(dir, plan->target.rel, "resolving the path", err);
	return write_leaf_check(dir, leaf_name(plan->target.path), plan->target.rel, err);
}

static int do_write(int root, const struct paths_plan *plan, const char *tmp, const uint8_t *data, size_t len,
		    mode_t mode, struct msb_error *err)
{
	_cleanup_free_ char *parent = parent_of(plan->target.path);
	_cleanup_close_ int dir = -1, fd = -1;
	const char *rel = plan->target.rel, *leaf = leaf_name(plan->target.path);
	int r;

	dir = open_dir(root, parent, O_PATH);
	if (dir == -ENOENT)
		dir = make_dirs(root, parent, rel, true, NULL, 0, NULL, err);
	else if (dir < 0)
		return fail_walk(dir, rel, "resolving the path", err);
	if (dir < 0)
		return dir;
	if (on_pseudo_fs(dir))
		return fail_pseudo(rel, err);
	r = write_leaf_check(dir, leaf, rel, err);
	if (r < 0)
		return r;
	/* Created with no bit the file will not have (a 0600 file's content is
	 * never readable by others on the way); the descriptor writes whatever
	 * the mode, 0 included. */
	fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & FILE_MODE);
	if (fd < 0 && errno == ENOENT)
		/* The directory was removed under us. */
		return fail_reason(PATHS_R_NOT_FOUND, rel, err);
	if (fd < 0)
		return fail_os(-errno, rel, "creating the file", err);
	r = write_all(fd, data, len);
	/* The mode is the temporary's before the rename: the file appears
	 * at its name with its mode, never first without it. */
	if (r == 0 && fchmod(fd, mode) < 0)
		r = -errno;
	/* Closed whatever happened: an open temporary keeps its blocks. */
	if (close(TAKE_FD(fd)) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(dir, tmp, dir, leaf) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dir, tmp, 0);
		if (r == -EISDIR)
			return fail_reason(PATHS_R_IS_DIRECTORY, rel, err);
		if (r == -ENOENT)
			return fail_reason(PATHS_R_NOT_FOUND, rel, err);
		return fail_os(r, rel, "writing the file", err);
	}
	return 0;
}

void plocal_temp_name(char *buf, size_t size)
{
	uint64_t rnd;

	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint64_t)getpid() ^ (uint64_t)(uintptr_t)&rnd ^ (uint64_t)time(NULL);
	snprintf(buf, size, PLOCAL_TEMP_PREFIX "%016llx" PLOCAL_TEMP_SUFFIX, (unsigned long long)rnd);
}

bool plocal_name_is_temp(const char *name)
{
	size_t lp = strlen(PLOCAL_TEMP_PREFIX), ls = strlen(PLOCAL_TEMP_SUFFIX);

	if (strlen(name) != lp + 16 + ls || strncmp(name, PLOCAL_TEMP_PREFIX, lp) != 0 ||
	    strcmp(name + lp + 16, PLOCAL_TEMP_SUFFIX) != 0)
		return false;
	for (size_t i = lp; i < lp + 16; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return true;
}

int plocal_write(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		 const struct plocal_journal *j, const uint8_t *data, size_t len, struct msb_error *reterr)
{
	return plocal_write_mode(root, plan, c, j, data, len, FILE_MODE, reterr);
}

int plocal_write_mode(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		      const struct plocal_journal *j, const uint8_t *data, size_t len, mode_t mode,
		      struct msb_error *reterr)
{
	_cleanup_free_ char *parent = parent_of(plan->target.path);
	char tmp[PLOCAL_TEMP_NAME_MAX];
	struct plocal_saved s;
	int r, jfd = -1;

	plocal_temp_name(tmp, sizeof(tmp));
	/* Journalled (with the daemon's authority) before the temporary
	 * exists, forgotten once it is renamed or removed: a daemon killed in
	 * between leaves the entry, and the next one removes the temporary. */
	if (j) {
		jfd = plocal_journal_begin(j, parent, tmp);
		if (jfd < 0)
			return fail_os(jfd, plan->target.rel, "journalling the write's temporary file", reterr);
	}
	plocal_cred_enter(c, &s);
	r = do_write(root, plan, tmp, data, len, mode & PLOCAL_WRITE_MODE_MASK, reterr);
	plocal_cred_leave(&s);
	if (j)
		plocal_journal_end(j, tmp, jfd);
	return r;
}

/* ---- the journal of temporaries --------------------------------------------- */

/* An entry is a file named after the temporary, holding
 * "id\nparent\ntmp\n" and then "engine\n" when the writer knows its
 * engine; its writer holds an exclusive flock on it while the write runs,
 * so a live daemon's entry is never taken for a dead one's. It is written
 * and locked unnamed, then linked at its name: never seen empty or
 * unlocked. Without O_TMPFILE (some filesystems), under a name no taker
 * reads, renamed once locked and whole. */
int plocal_journal_begin(const struct plocal_journal *j, const char *parent, const char *tmp)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ char *side = NULL;
	char proc[64];
	int fd, r;

	if (j->engine && (strchr(j->engine, '\n') || !*j->engine))
		return -EINVAL;
	text = j->engine ? xasprintf("%s\n%s\n%s\n%s\n", j->id, parent, tmp, j->engine)
			 : xasprintf("%s\n%s\n%s\n", j->id, parent, tmp);
	fd = openat(j->dirfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
	if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	if (fd < 0) {
		side = xasprintf("journal-%s", tmp);     /* not a temporary's name: never taken */
		fd = openat(j->dirfd, side, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		r = -errno;
		goto fail;
	}
	r = write_all(fd, (const uint8_t *)text, strlen(text));
	if (r < 0)
		goto fail;
	if (side) {
		if (renameat(j->dirfd, side, j->dirfd, tmp) < 0) {
			r = -errno;
			goto fail;
		}
		return fd;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, j->dirfd, tmp, AT_SYMLINK_FOLLOW) < 0) {
		r = -errno;
		goto fail;
	}
	return fd;
fail:
	if (side)
		unlinkat(j->dirfd, side, 0);
	close(fd);
	return r;
}

void plocal_journal_end(const struct plocal_journal *j, const char *tmp, int fd)
{
	if (unlinkat(j->dirfd, tmp, 0) < 0 && errno != ENOENT)
		log_warnx("files: cannot remove the journal entry %s: %s", tmp, strerror(errno));
	if (fd >= 0)
		close(fd);
}

int plocal_journal_take(int dirfd, const char *name, struct plocal_journal_entry *ret)
{
	char buf[PLOCAL_JOURNAL_ENTRY_MAX + 1], *nl1, *nl2, *nl3, *nl4;
	_cleanup_close_ int fd = -1;
	int r;

	if (!plocal_name_is_temp(name))
		return -EINVAL;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	{
		struct stat sb;

		if (fstat(fd, &sb) < 0)
			return -errno;
		if (!S_ISREG(sb.st_mode))
			return -EBADMSG;          /* a FIFO, a device...: not an entry */
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	r = read_upto(fd, buf, sizeof(buf));
	if (r < 0)
		return r;
	nl1 = strchr(buf, '\n');
	nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
	nl3 = nl2 ? strchr(nl2 + 1, '\n') : NULL;
	nl4 = nl3 && nl3[1] ? strchr(nl3 + 1, '\n') : NULL;     /* the engine line, when there is one */
	if (!nl3 || (nl3[1] != '\0' && (!nl4 || nl4[1] != '\0' || nl4 == nl3 + 1)))
		return -EBADMSG;
	*nl1 = *nl2 = *nl3 = '\0';
	if (nl4)
		*nl4 = '\0';
	if (nl2 + 1 == nl3 || buf[0] == '\0' || nl1[1] != '/' || strcmp(nl2 + 1, name) != 0)
		return -EBADMSG;
	*ret = (struct plocal_journal_entry){ .id = xstrdup(buf), .parent = xstrdup(nl1 + 1),
					      .tmp = xstrdup(nl2 + 1), .engine = nl4 ? xstrdup(nl3 + 1) : NULL,
					      .lock_fd = TAKE_FD(fd) };
	return 0;
}

void plocal_journal_entry_release(struct plocal_journal_entry *e)
{
	free(e->id);
	free(e->parent);
	free(e->tmp);
	free(e->engine);
	if (e->lock_fd >= 0)
		close(e->lock_fd);
	*e = (struct plocal_journal_entry){ .lock_fd = -1 };
}

int plocal_temp_remove(int root, const char *parent, const char *tmp)
{
	_cleanup_close_ int dir = -1;
	struct stat sb;

	if (!plocal_name_is_temp(tmp) || parent[0] != '/')
		return -EINVAL;
	dir = open_dir(root, parent, O_PATH);
	if (dir == -ENOENT)
		return 0;
	if (dir < 0)
		return dir;
	if (fstatat(dir, tmp, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	/* Only what a write leaves: a regular file, never a mount. */
	if (!S_ISREG(sb.st_mode) || entry_is_mount(dir, tmp) != 0)
		return -EPERM;
	if (unlinkat(dir, tmp, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int plocal_write_check(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		       struct msb_error *reterr)
{
	struct plocal_saved s;
	int r;

	plocal_cred_enter(c, &s);
	r = do_write_check(root, plan, reterr);
	plocal_cred_leave(&s);
	return r;
}

/* ---- check / prepare -------------------------------------------------------- */

int plocal_check(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool *ret_missing,
		 struct msb_error *reterr)
{
	struct plocal_saved s = { 0 };
	int fd;

	*ret_missing = false;
	if (c)
		plocal_cred_enter(c, &s);
	if (plan->op == PATHS_OP_LIST) {
		fd = open_dir(root, plan->target.path, O_PATH);
	} else {
		_cleanup_free_ char *parent = parent_of(plan->target.path);

		fd = open_dir(root, parent, O_PATH);
	}
	if (c)
		plocal_cred_leave(&s);
	if (fd == -ENOENT) {
		*ret_missing = true;
		return 0;
	}
	if (fd < 0)
		return fail_walk(fd, plan->target.rel, "resolving the path", reterr);
	close(fd);
	return 0;
}

int plocal_prepare(int root, const struct paths_plan *plan, const struct plocal_cred *owner,
		   struct msb_error *reterr)
{
	size_t depth = 0;
	int fd;

	/* The base is the last component; every one above it stays root's. */
	for (const char *p = plan->target.path; *p; p++)
		depth += *p == '/';
	fd = make_dirs(root, plan->target.path, plan->target.rel, true, owner, depth - 1, NULL, reterr);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

/* ---- list ------------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "path")),
		      json_string_value(json_object_get(*(json_t *const *)b, "path")));
}

static int do_list(int root, const struct paths_plan *plan, size_t max_entries, json_t **ret, struct msb_error *err)
{
	const char *rel = plan->target.rel;
	json_t **items = NULL, *list;
	size_t n = 0, cap = 0, scanned = 0;
	struct dirent *de;
	DIR *dir;
	int fd, r = 0;

	fd = open_dir(root, plan->target.path, O_RDONLY);
	if (fd < 0)
		return fail_walk(fd, rel, "opening the directory", err);
	dir = fdopendir(fd);
	if (!dir) {
		r = -errno;
		close(fd);
		return fail_os(r, rel, "opening the directory", err);
	}
	for (errno = 0; (de = readdir(dir)); errno = 0) {
		struct paths_stat st;
		struct stat sb;
		char *child;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* Every entry read counts, listed or not. */
		if (++scanned > max_entries + PLOCAL_LIST_SCAN_SLACK) {
			msb_error_set(err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:s, s:I}", "path", *rel ? rel : ".", "limit",
						(json_int_t)(max_entries + PLOCAL_LIST_SCAN_SLACK)),
				      "the directory holds more than %zu entries, temporary files included",
				      max_entries + PLOCAL_LIST_SCAN_SLACK);
			r = -EFBIG;
			break;
		}
		/* The daemon's own temporaries (a write in progress) are never listed. */
		if (plocal_name_is_temp(de->d_name))
			continue;
		if (fstatat(dirfd(dir), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;   /* gone since readdir */
			/* Never a list that leaves an entry out. */
			r = fail_os(-errno, rel, "examining an entry", err);
			break;
		}
		if (n == max_entries) {
			msb_error_set(err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:s, s:I}", "path", *rel ? rel : ".", "limit", (json_int_t)max_entries),
				      "the directory holds more than %zu entries", max_entries);
			r = -EFBIG;
			break;
		}
		stat_fill(&sb, de->d_name, -1, &st);
		child = *rel ? xasprintf("%s/%s", rel, de->d_name) : xstrdup(de->d_name);
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			items = xrealloc(items, cap * sizeof(*items));
		}
		items[n++] = paths_entry_encode(child, &st);
		free(child);
		paths_stat_release(&st);
	}
	if (r == 0 && errno)
		r = fail_os(-errno, rel, "reading the directory", err);
	closedir(dir);
	if (r == 0 && n)
		qsort(items, n, sizeof(*items), entry_cmp);
	list = r == 0 ? json_array() : NULL;
	for (size_t i = 0; i < n; i++) {
		if (list)
			json_array_append_new(list, items[i]);
		else
			json_decref(items[i]);
	}
	free(items);
	if (r == 0)
		*ret = list;
	return r;
}

int plocal_list(int root, const struct paths_plan *plan, const struct plocal_cred *c, size_t max_entries,
		json_t **ret_entries, struct msb_error *reterr)
{
	struct plocal_saved s;
	int r;

	plocal_cred_enter(c, &s);
	r = do_list(root, plan, max_entries, ret_entries, reterr);
	plocal_cred_leave(&s);
	return r;
}

/* ---- remove ----------------------------------------------------------------- */

struct rm_frame {
	char *name;          /* its name in the directory above (the target's leaf for frame 0) */
	dev_t dev;           /* the directory itself, to know it again through ".." */
	ino_t ino;
	uint64_t mnt_id;
};

/* Only the deepest frame is open (cur); the others are names and inode
 * numbers, so a removal holds PLOCAL_RM_FDS descriptors at most. */
struct plocal_rm {
	struct plocal_cred cred;
	char *rel;            /* for errors */
	int top_parent;       /* the target's parent directory */
	uint64_t top_mnt;
	DIR *cur;             /* the deepest frame's directory, while depth > 0 */
	struct rm_frame stack[PLOCAL_MAX_DEPTH + 1];
	size_t depth;         /* frames in use */
};

/* The guest-relative path of name inside the deepest frame (for errors). */
static char *rm_path(const struct plocal_rm *rm, const char *name)
{
	char *p = xstrdup(rm->rel);

	for (size_t i = 1; i < rm->depth; i++) {
		char *q = xasprintf("%s/%s", p, rm->stack[i].name);

		free(p);
		p = q;
	}
	if (name) {
		char *q = xasprintf("%s/%s", p, name);

		free(p);
		p = q;
	}
	return p;
}

static int rm_fail_mount(struct plocal_rm *rm, const char *name, struct msb_error *err)
{
	_cleanup_free_ char *m = rm->depth ? rm_path(rm, name) : xstrdup(rm->rel);

	return fail_mount(rm->rel, m, err);
}

/* Opens name below parent as a directory to empty, checking it is on the
 * parent's mount, and makes it the deepest frame (the one above is
 * closed). 1 pushed, 0 it is not a directory (unlink it instead), 2 gone
 * already, <0 refused. */
static int rm_push(struct plocal_rm *rm, int parent, uint64_t parent_mnt, const char *name, struct msb_error *err)
{
	int fd = sys_openat2(parent, name, O_RDONLY | O_DIRECTORY, RESOLVE_STEP);
	uint64_t mnt = 0;
	struct stat sb;
	DIR *dir;
	int r;

	if (fd == -ENOTDIR || fd == -ELOOP)
		return 0;
	if (fd == -ENOENT)
		return 2;     /* gone already */
	if (fd < 0)
		return fail_os(fd, rm->rel, "opening a directory to remove", err);
	r = mnt_id_of(fd, &mnt);
	if (r == 0 && mnt != parent_mnt) {
		close(fd);
		return rm_fail_mount(rm, name, err);
	}
	if (r == 0 && rm->depth > PLOCAL_MAX_DEPTH)
		r = -ELOOP;
	if (r == 0 && fstat(fd, &sb) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		if (r == -ELOOP) {
			msb_error_set(err, MSB_ERR_OS_ERROR,
				      json_pack("{s:s, s:i}", "path", rm->rel, "limit", PLOCAL_MAX_DEPTH),
				      "the tree is deeper than %d levels", PLOCAL_MAX_DEPTH);
			return r;
		}
		return fail_os(r, rm->rel, "examining a directory to remove", err);
	}
	dir = fdopendir(fd);
	if (!dir) {
		r = -errno;
		close(fd);
		return fail_os(r, rm->rel, "opening a directory to remove", err);
	}
	/* name may live in the closed directory's buffer: copied first. */
	rm->stack[rm->depth++] = (struct rm_frame){ .name = xstrdup(name), .dev = sb.st_dev, .ino = sb.st_ino,
						    .mnt_id = mnt };
	if (rm->cur)
		closedir(rm->cur);
	rm->cur = dir;
	return 1;
}

/* Unlinks name below dirfd (mnt: dirfd's mount); a non-directory that is
 * a mount point (a bind-mounted file) is refused. */
static int rm_unlink(struct plocal_rm *rm, int dirfd, uint64_t mnt, const char *name, int flags,
		     struct msb_error *err)
{
	if (!(flags & AT_REMOVEDIR)) {
		struct statx sx;

		if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &sx) < 0)
			return errno == ENOENT ? 0 : fail_os(-errno, rm->rel, "examining an entry to remove", err);
		if (((sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT)) ||
		    ((sx.stx_mask & STATX_MNT_ID) && sx.stx_mnt_id != mnt))
			return rm_fail_mount(rm, name, err);
	}
	if (unlinkat(dirfd, name, flags) == 0 || errno == ENOENT)
		return 0;
	if (errno == EBUSY)
		return rm_fail_mount(rm, name, err);
	return fail_os(-errno, rm->rel, "removing", err);
}

static void rm_pop(struct plocal_rm *rm)
{
	struct rm_frame *f = &rm->stack[--rm->depth];

	free(f->name);
	*f = (struct rm_frame){ 0 };
}

struct plocal_rm *plocal_rm_free(struct plocal_rm *rm)
{
	if (!rm)
		return NULL;
	if (rm->cur)
		closedir(rm->cur);
	while (rm->depth)
		rm_pop(rm);
	if (rm->top_parent >= 0)
		close(rm->top_parent);
	free(rm->rel);
	free(rm);
	return NULL;
}

static int rm_begin(struct plocal_rm *rm, const struct paths_plan *plan, int root, bool recursive,
		    struct msb_error *err)
{
	const char *leaf = leaf_name(plan->target.path);
	_cleanup_free_ char *parent = parent_of(plan->target.path);
	struct stat sb;
	int r;

	rm->top_parent = open_dir(root, parent, O_PATH);
	if (rm->top_parent == -ENOENT)
		return 1;   /* missing is success */
	if (rm->top_parent < 0)
		return fail_walk(rm->top_parent, rm->rel, "resolving the path", err);
	if (fstatat(rm->top_parent, leaf, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 1 : fail_os(-errno, rm->rel, "examining the path", err);
	r = mnt_id_of(rm->top_parent, &rm->top_mnt);
	if (r < 0)
		return fail_os(r, rm->rel, "examining the path", err);
	if (!S_ISDIR(sb.st_mode)) {
		r = rm_unlink(rm, rm->top_parent, rm->top_mnt, leaf, 0, err);
		return r < 0 ? r : 1;
	}
	if (!recursive) {
		/* An empty directory that is a mount point: refused as one. */
		r = entry_is_mount(rm->top_parent, leaf);
		if (r > 0)
			return fail_mount(rm->rel, rm->rel, err);
		msb_error_set(err, MSB_ERR_OS_ERROR, json_pack("{s:s, s:s}", "path", rm->rel, "errno", "EISDIR"),
			      "%s is a directory; removing it needs recursive", *rm->rel ? rm->rel : ".");
		return -EISDIR;
	}
	r = rm_push(rm, rm->top_parent, rm->top_mnt, leaf, err);
	if (r == 0) {
		r = rm_unlink(rm, rm->top_parent, rm->top_mnt, leaf, 0, err);
		return r < 0 ? r : 1;
	}
	return r == 2 ? 1 : r < 0 ? r : 0;
}

int plocal_rm_begin(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool recursive,
		    struct plocal_rm **ret_rm, struct msb_error *reterr)
{
	struct plocal_rm *rm = xcalloc(1, sizeof(*rm));
	struct plocal_saved s;
	int r;

	*ret_rm = NULL;
	rm->cred = *c;
	rm->top_parent = -1;
	rm->rel = xstrdup(plan->target.rel ? (*plan->target.rel ? plan->target.rel : ".") : plan->target.path);
	if (plan->target.path[1] == '\0') {
		plocal_rm_free(rm);
		return fail_reason(PATHS_R_NEAR_ROOT, "/", reterr);
	}
	plocal_cred_enter(c, &s);
	r = rm_begin(rm, plan, root, recursive, reterr);
	plocal_cred_leave(&s);
	if (r != 0) {
		plocal_rm_free(rm);
		return r;
	}
	*ret_rm = rm;
	return 0;
}

/* The deepest frame is empty: step back up to the directory above it
 * (through "..", which must be the very directory the removal stepped
 * down from, on the same mount) and remove it there. */
static int rm_up(struct plocal_rm *rm, struct msb_error *err)
{
	_cleanup_free_ char *name = xstrdup(rm->stack[rm->depth - 1].name);
	const struct rm_frame *above;
	struct stat sb;
	DIR *dir;
	int fd, r;

	if (rm->depth == 1) {
		closedir(rm->cur);
		rm->cur = NULL;
		rm_pop(rm);
		return rm_unlink(rm, rm->top_parent, rm->top_mnt, name, AT_REMOVEDIR, err);
	}
	above = &rm->stack[rm->depth - 2];
	fd = sys_openat2(dirfd(rm->cur), "..", O_RDONLY | O_DIRECTORY,
			 RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
	if (fd < 0)
		return fail_os(fd, rm->rel, "stepping back up a tree being removed", err);
	if (fstat(fd, &sb) < 0 || sb.st_dev != above->dev || sb.st_ino != above->ino) {
		close(fd);
		msb_error_set(err, MSB_ERR_OS_ERROR, json_pack("{s:s, s:s}", "path", rm->rel, "errno", "ESTALE"),
			      "the tree under %s was moved while it was removed", rm->rel);
		return -ESTALE;
	}
	dir = fdopendir(fd);
	if (!dir) {
		r = -errno;
		close(fd);
		return fail_os(r, rm->rel, "opening a directory to remove", err);
	}
	closedir(rm->cur);
	rm->cur = dir;      /* read again from its start: what was removed is gone */
	rm_pop(rm);
	return rm_unlink(rm, dirfd(rm->cur), above->mnt_id, name, AT_REMOVEDIR, err);
}

static int rm_step(struct plocal_rm *rm, size_t budget, struct msb_error *err)
{
	while (rm->depth > 0 && budget > 0) {
		struct rm_frame *f = &rm->stack[rm->depth - 1];
		struct dirent *de;
		int r;

		errno = 0;
		de = readdir(rm->cur);
		if (!de && errno)
			return fail_os(-errno, rm->rel, "reading a directory to remove", err);
		if (!de) {
			r = rm_up(rm, err);
			if (r < 0)
				return r;
			budget--;
			continue;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		budget--;
		if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) {
			r = rm_push(rm, dirfd(rm->cur), f->mnt_id, de->d_name, err);
			if (r < 0)
				return r;
			if (r > 0)
				continue;
		}
		r = rm_unlink(rm, dirfd(rm->cur), f->mnt_id, de->d_name, 0, err);
		if (r < 0)
			return r;
	}
	return rm->depth == 0 ? 1 : 0;
}

int plocal_rm_step(struct plocal_rm *rm, size_t budget, struct msb_error *reterr)
{
	struct plocal_saved s;
	int r;

	plocal_cred_enter(&rm->cred, &s);
	r = rm_step(rm, budget, reterr);
	plocal_cred_leave(&s);
	return r;
}

/* ==== the driver (plane.h): the local plane serving a fileop ================ */

/* Descriptors one local removal holds: the container's root and the
 * removal's own (PLOCAL_RM_FDS). */
#define FOP_RM_FDS (PLOCAL_RM_FDS + 1)

/* The local plane's state of one operation. */
struct fop_local {
	struct fileop_view v;
	struct plocal_shared *shared;   /* the table's (NULL: the daemon keeps none) */
	struct engine_req *req;
	int lookups;                 /* inspects for the init's pid (at most 2) */
	int root;                    /* the container's root, while serving */
	struct plocal_pin own_pin;   /* a pin kept for no sandbox */
	struct plocal_rm *rm;        /* a removal in progress */
	struct event *slice_ev;      /* its next slice */
	/* the removal fd budget (files.removal_fd_budget) */
	bool fd_held;                /* FOP_RM_FDS of it are this op's */
	bool fd_waiting;             /* queued in shared->fd_waiters */
	TAILQ_ENTRY(fop_local) fd_entry;
};

/* A sandbox's init, held while the registry's entry keeps it. */
struct plocal_pinned {
	char id[PLOCAL_ID_LEN + 1];
	struct plocal_pin pin;
	TAILQ_ENTRY(plocal_pinned) entry;
};

struct plocal_shared {
	size_t fd_in_use;            /* of the removal fd budget */
	TAILQ_HEAD(, fop_local) fd_waiters;   /* FIFO */
	TAILQ_HEAD(, plocal_pinned) pins;
	struct registry *watched;    /* the registry telling when an init goes */
};

struct plocal_shared *plocal_shared_new(void)
{
	struct plocal_shared *s = xcalloc(1, sizeof(*s));

	TAILQ_INIT(&s->fd_waiters);
	TAILQ_INIT(&s->pins);
	return s;
}

struct plocal_shared *plocal_shared_free(struct plocal_shared *s)
{
	struct plocal_pinned *p;

	if (!s)
		return NULL;
	if (s->watched)
		registry_watch_inits(s->watched, NULL, NULL);
	while ((p = TAILQ_FIRST(&s->pins))) {
		TAILQ_REMOVE(&s->pins, p, entry);
		plocal_pin_close(&p->pin);
		free(p);
	}
	free(s);
	return NULL;
}

size_t plocal_shared_fds_in_use(const struct plocal_shared *s)
{
	return s ? s->fd_in_use : 0;
}

static struct plocal_pinned *pins_lookup(const struct plocal_shared *s, const char *id)
{
	struct plocal_pinned *p;

	TAILQ_FOREACH(p, &s->pins, entry)
		if (strcmp(p->id, id) == 0)
			return p;
	return NULL;
}

const struct plocal_pin *plocal_pins_find(const struct plocal_shared *s, const char *id)
{
	struct plocal_pinned *p = s && id ? pins_lookup(s, id) : NULL;

	return p ? &p->pin : NULL;
}

void plocal_pins_drop(struct plocal_shared *s, const char *id)
{
	struct plocal_pinned *p = s && id ? pins_lookup(s, id) : NULL;

	if (!p)
		return;
	TAILQ_REMOVE(&s->pins, p, entry);
	plocal_pin_close(&p->pin);
	free(p);
}

/* The registry's word: id's init is gone (a start, a restart, a death), or
 * its entry is; id NULL: the registry is being freed (its entries, and so
 * the pins, went already): forget it, so freeing s later does not reach it. */
static void pins_init_gone(void *arg, const char *id)
{
	struct plocal_shared *s = arg;

	if (!id) {
		s->watched = NULL;
		return;
	}
	plocal_pins_drop(s, id);
}

const struct plocal_pin *plocal_pins_set(struct plocal_shared *s, struct registry *r, const char *id,
					 struct plocal_pin pin)
{
	struct plocal_pinned *p = pins_lookup(s, id);

	if (r && s->watched != r) {
		registry_watch_inits(r, pins_init_gone, s);
		s->watched = r;
	}
	if (!p) {
		p = xcalloc(1, sizeof(*p));
		snprintf(p->id, sizeof(p->id), "%s", id);
		TAILQ_INSERT_TAIL(&s->pins, p, entry);
	} else {
		plocal_pin_close(&p->pin);
	}
	p->pin = pin;
	return &p->pin;
}

/* ---- the removal fd budget ------------------------------------------------ */

static size_t fop_fd_budget(const struct domain *d)
{
	long b = d->config ? d->config->files_removal_fd_budget : 0;
	struct rlimit rl;

	if (b <= 0) {
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
			b = 4096;
		else
			b = (long)(rl.rlim_cur / 4);
	}
	return b < FOP_RM_FDS ? FOP_RM_FDS : (size_t)b;
}

/* Takes op's share, or queues it (FIFO): true when granted now. */
static bool fop_fd_take(struct fop_local *op)
{
	struct plocal_shared *t = op->shared;

	if (!t || op->fd_held)
		return true;
	if (TAILQ_EMPTY(&t->fd_waiters) && t->fd_in_use + FOP_RM_FDS <= fop_fd_budget(op->v.d)) {
		t->fd_in_use += FOP_RM_FDS;
		op->fd_held = true;
		return true;
	}
	TAILQ_INSERT_TAIL(&t->fd_waiters, op, fd_entry);
	op->fd_waiting = true;
	return false;
}

/* Gives op's share back (or leaves the queue), and wakes the ops first in
 * line that now fit. */
static void fop_fd_release(struct fop_local *op)
{
	struct plocal_shared *t = op->shared;
	struct fop_local *w;

	if (!t)
		return;
	if (op->fd_waiting) {
		TAILQ_REMOVE(&t->fd_waiters, op, fd_entry);
		op->fd_waiting = false;
	}
	if (!op->fd_held)
		return;
	op->fd_held = false;
	t->fd_in_use -= FOP_RM_FDS;
	while ((w = TAILQ_FIRST(&t->fd_waiters)) && t->fd_in_use + FOP_RM_FDS <= fop_fd_budget(w->v.d)) {
		TAILQ_REMOVE(&t->fd_waiters, w, fd_entry);
		w->fd_waiting = false;
		w->fd_held = true;
		t->fd_in_use += FOP_RM_FDS;
		event_active(w->slice_ev, EV_TIMEOUT, 0);
	}
}

static void lo_done(struct fop_local *op)
{
	fop_fd_release(op);
	op->req = NULL;
	fileop_done(op->v.fop);
}

static void lo_wind_up(struct fileop *fop);

/* ---- the local plane ------------------------------------------------------ */

static void fop_local_fail(struct fop_local *op, struct msb_error *e)
{
	if (op->root >= 0)
		close(op->root);
	op->root = -1;
	op->rm = plocal_rm_free(op->rm);
	fileop_fail_error(op->v.fop, e);
}

static void fop_local_finish(struct fop_local *op)
{
	if (op->root >= 0)
		close(op->root);
	op->root = -1;
	op->rm = plocal_rm_free(op->rm);
	lo_done(op);
}

/* READ: each item, the total bounded; per_item_errors keeps an item's own
 * refusal. */
static int fop_local_read(struct fop_local *op, const struct plocal_cred *c, struct msb_error *e)
{
	uint64_t total = 0;

	for (size_t i = 0; i < op->v.n_items; i++) {
		struct fileop_item *it = &op->v.items[i];
		int r = plocal_read(op->root, it->plan, c, op->v.p->max_bytes, &it->out, &it->out_len, &it->st, e);

		if (r < 0 && op->v.p->per_item_errors) {
			it->err = *e;
			*e = (struct msb_error){ 0 };
			continue;
		}
		if (r < 0)
			return r;
		it->found = true;
		it->out_cap = it->out_len;
		total += it->out_len;
		if (total > op->v.p->max_total) {
			msb_error_set(e, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:I}", "limit", (json_int_t)op->v.p->max_total),
				      "the files are over %llu bytes in all, the ceiling",
				      (unsigned long long)op->v.p->max_total);
			return -EFBIG;
		}
	}
	return 0;
}

static void fop_local_slice(struct fop_local *op)
{
	struct msb_error e = { 0 };
	int r = plocal_rm_step(op->rm, PLOCAL_REMOVE_SLICE, &e);

	if (r < 0) {
		fop_local_fail(op, &e);
		return;
	}
	if (r == 1) {
		fop_local_finish(op);
		return;
	}
	fileop_enter(op->v.fop, FOP_LOCAL);
	/* The next slice on the next pass of the loop, after its I/O (an
	 * event_active would run it within this pass, and every slice after
	 * it, starving the other clients until the removal ends). */
	{
		static const struct timeval now = { 0, 0 };

		evtimer_add(op->slice_ev, &now);
	}
}

static void fop_local_begin(struct fop_local *op, struct sandbox *sb);

static void fop_slice_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fop_local *op = arg;

	(void)fd, (void)what;
	if (fileop_state(op->v.fop) == FOP_FDWAIT && op->fd_held) {
		fop_local_begin(op, op->v.d->registry ? registry_find_id(op->v.d->registry, op->v.id) : NULL);
		return;
	}
	if (fileop_state(op->v.fop) == FOP_LOCAL && op->rm)
		fop_local_slice(op);
}

/* Serves the whole operation beneath op->root, synchronously (a removal
 * goes on in slices). */
static void fop_local_run(struct fop_local *op)
{
	const struct plocal_cred cred = { op->v.p->uid, op->v.p->gid };
	struct msb_error e = { 0 };
	int r = 0;

	fileop_set_served_locally(op->v.fop);
	switch (op->v.p->kind) {
	case FILEOP_STAT:
		for (size_t i = 0; r == 0 && i < op->v.n_items; i++)
			r = plocal_stat(op->root, op->v.items[i].plan, &cred, &op->v.items[i].found, &op->v.items[i].st, &e);
		break;
	case FILEOP_READ:
		r = fop_local_read(op, &cred, &e);
		break;
	case FILEOP_WRITE:
		/* Every entry is checked before any is written: one refusal refuses the call. */
		for (size_t i = 0; r == 0 && op->v.n_items > 1 && i < op->v.n_items; i++)
			r = plocal_write_check(op->root, op->v.items[i].plan, &cred, &e);
		for (size_t i = 0; r == 0 && i < op->v.n_items; i++) {
			int jfd = fileop_journal_fd(fileop_table_of(op->v.fop), op->v.d->config);
			char eng[SHA256_HEX_BYTES];
			const struct plocal_journal j = { jfd, op->v.id, fileop_engine_ident(op->v.d, eng) };

			r = plocal_write_mode(op->root, op->v.items[i].plan, &cred, jfd >= 0 ? &j : NULL, op->v.items[i].data,
					      op->v.items[i].size, fileop_item_mode(&op->v.items[i]), &e);
		}
		break;
	case FILEOP_CHECK:
		for (size_t i = 0; r == 0 && i < op->v.n_items; i++)
			r = plocal_check(op->root, op->v.items[i].plan, NULL, &op->v.items[i].walk_ended, &e);
		break;
	case FILEOP_PREPARE:
		r = plocal_prepare(op->root, op->v.items[0].plan, &cred, &e);
		break;
	case FILEOP_LIST:
		r = plocal_list(op->root, op->v.items[0].plan, &cred,
				op->v.p->max_entries ? op->v.p->max_entries : PLOCAL_LIST_MAX_ENTRIES,
				&op->v.items[0].entries, &e);
		break;
	case FILEOP_REMOVE:
	case FILEOP_RECLAIM:
		/* The container's known mount points, and directories holding one:
		 * refused before anything is removed (a removal that meets any
		 * other mount is refused where it meets it). */
		r = fileop_archive_mount_check_init(op->v.p->kind, op->v.items[0].plan->target.path,
						    op->v.items[0].plan->target.rel, fileop_init_on(op->v.fop), &e);
		if (r < 0)
			break;
		r = plocal_rm_begin(op->root, op->v.items[0].plan, &cred,
				    op->v.p->kind == FILEOP_RECLAIM || op->v.p->recursive, &op->rm, &e);
		if (r == 0 && op->rm) {
			fop_local_slice(op);
			return;
		}
		if (r > 0)
			r = 0;
		break;
	default:
		assert(!"unreachable");
	}
	if (r < 0) {
		fop_local_fail(op, &e);
		return;
	}
	fop_local_finish(op);
}

static void fop_pin_lookup(struct fop_local *op);

/* The pin (op's own, or the one kept for the sandbox) opens the root, or is stale. */
static void fop_local_with_pin(struct fop_local *op, const struct plocal_pin *pin)
{
	int r = plocal_root_open(pin, &op->root);

	if (r == 0) {
		fop_local_run(op);
		return;
	}
	if (r == -ESRCH && op->lookups < 2) {
		/* The init is gone (a restart, a death): look (again). */
		fop_pin_lookup(op);
		return;
	}
	if (r == -ESRCH) {
		fileop_fail(op->v.fop, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	fileop_fail(op->v.fop, MSB_ERR_INTERNAL, NULL, "the sandbox's root cannot be opened: %s", strerror(-r));
}

static void fop_pin_cb(const struct docker_reply *r, void *arg)
{
	struct fop_local *op = arg;
	const json_t *state = json_object_get(r->body, "State");
	json_int_t pid = json_integer_value(json_object_get(state, "Pid"));
	struct sandbox *sb;
	struct plocal_pin pin;
	int rc;

	op->req = NULL;
	if (fileop_timed_out(op->v.fop)) {
		lo_wind_up(op->v.fop);
		return;
	}
	if (r->error == 0 && r->status == 404) {
		fileop_fail(op->v.fop, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		return;
	}
	if (r->error || r->status != 200) {
		fileop_fail_engine(op->v.fop, r->error, r->status, r->message, "inspecting the sandbox");
		return;
	}
	if (!json_is_true(json_object_get(state, "Running")) || pid <= 0 || pid > INT32_MAX) {
		fileop_fail(op->v.fop, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	rc = plocal_pin_open((pid_t)pid, op->v.id, &pin);
	if (rc == -ESRCH && op->lookups < 2) {
		fop_pin_lookup(op);
		return;
	}
	if (rc == -ESRCH) {
		fileop_fail(op->v.fop, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	sb = op->v.d->registry ? registry_find_id(op->v.d->registry, op->v.id) : NULL;
	if (rc < 0 && strcmp(op->v.d->config->files_plane, "local") == 0) {
		fileop_fail(op->v.fop, MSB_ERR_INTERNAL, json_pack("{s:s}", "file_plane", "local"),
			 "files.plane is local, but this sandbox's root cannot be reached: %s",
			 rc == -ENOENT ? "its init is not in this daemon's pid namespace"
				       : rc == -EOPNOTSUPP ? "its user namespace remaps ids" : strerror(-rc));
		return;
	}
	if (rc < 0) {
		log_info("sandbox %.12s: the archive file plane serves it (no pin of its init: %s)", op->v.id,
			 strerror(-rc));
		if (sb)
			sb->plane = SANDBOX_PLANE_ARCHIVE;
		/* The archive plane holds no descriptor of it: the fd share goes
		 * with this plane's state. */
		fileop_fall_back(op->v.fop);
		return;
	}
	if (sb && op->shared) {
		/* Kept for the next call, as long as the registry's entry keeps
		 * this init (plocal_pins_set). */
		sb->plane = SANDBOX_PLANE_LOCAL;
		fop_local_with_pin(op, plocal_pins_set(op->shared, op->v.d->registry, op->v.id, pin));
		return;
	}
	plocal_pin_close(&op->own_pin);
	op->own_pin = pin;
	fop_local_with_pin(op, &op->own_pin);
}

static void fop_pin_lookup(struct fop_local *op)
{
	int r;

	op->lookups++;
	fileop_enter(op->v.fop, FOP_PIN);
	r = docker_container_inspect(op->v.d->engine, op->v.id, fop_pin_cb, op, &op->req);
	if (r < 0)
		fileop_fail_engine(op->v.fop, r, 0, NULL, "inspecting the sandbox");
}

/* sb: the op's registry entry, or NULL. */
static void fop_local_begin(struct fop_local *op, struct sandbox *sb)
{
	const struct plocal_pin *pin;

	/* A removal holds descriptors across slices: it waits for its share
	 * of files.removal_fd_budget (FIFO, within its deadline) before it
	 * opens anything. */
	if ((op->v.p->kind == FILEOP_REMOVE || op->v.p->kind == FILEOP_RECLAIM) && !fop_fd_take(op)) {
		fileop_enter(op->v.fop, FOP_FDWAIT);
		return;
	}
	pin = sb && op->shared ? plocal_pins_find(op->shared, op->v.id) : NULL;
	if (pin && plocal_pin_valid(pin)) {
		fileop_enter(op->v.fop, FOP_PIN);
		fop_local_with_pin(op, pin);
		return;
	}
	fop_pin_lookup(op);
}

/* ---- the plane -------------------------------------------------------------- */

static struct fop_local *lo_of(const struct fileop *fop)
{
	return fileop_plane_data(fop);
}

static void lo_start(struct fileop *fop)
{
	struct fop_local *op = xcalloc(1, sizeof(*op));

	op->v = fileop_view(fop);
	op->shared = fileop_table_local(fileop_table_of(fop));
	op->root = -1;
	op->own_pin = (struct plocal_pin)PLOCAL_PIN_INIT;
	op->slice_ev = event_new(op->v.d->base, -1, 0, fop_slice_cb, op);
	if (!op->slice_ev)
		fatalx("%s: cannot create an event", __func__);
	fileop_set_plane_data(fop, op);
	fop_local_begin(op, op->v.d->registry ? registry_find_id(op->v.d->registry, op->v.id) : NULL);
}

/* A failure: what the op holds is closed, then it is done (no freeze to lift). */
static void lo_wind_up(struct fileop *fop)
{
	struct fop_local *op = lo_of(fop);

	if (op->root >= 0)
		close(op->root);
	op->root = -1;
	op->rm = plocal_rm_free(op->rm);
	lo_done(op);
}

static bool lo_settled(struct fileop *fop)
{
	(void)fop;
	return false;
}

static void lo_abort(struct fileop *fop)
{
	struct fop_local *op = lo_of(fop);

	if (fileop_state(fop) == FOP_FDWAIT) {
		/* Still waiting for its share of the fd budget: nothing began. */
		lo_done(op);
		return;
	}
	if (fileop_state(fop) == FOP_LOCAL) {
		/* Between two slices of a removal: it stops here. */
		event_del(op->slice_ev);
		op->rm = plocal_rm_free(op->rm);
		lo_done(op);
		return;
	}
	if (op->req) {
		/* Its callback runs now with -ECANCELED and ends the op. */
		engine_req_cancel(op->req);
		return;
	}
	if (fileop_state(fop) == FOP_FREEZE)
		lo_done(op);
}

static void lo_release(struct fileop *fop)
{
	struct fop_local *op = lo_of(fop);

	if (!op)
		return;
	fop_fd_release(op);
	plocal_rm_free(op->rm);
	if (op->root >= 0)
		close(op->root);
	plocal_pin_close(&op->own_pin);
	event_free(op->slice_ev);
	free(op);
}

const struct file_plane file_plane_local = {
	.name = "local",
	.start = lo_start,
	.wind_up = lo_wind_up,
	.settled = lo_settled,
	.abort = lo_abort,
	.release = lo_release,
};
