/* execkill.c — a timed-out exec's processes, found and killed from the host
 * (see execkill.h for the rule). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "execkill.h"
#include "xmalloc.h"

/* /proc/<pid>/cgroup and /proc/<pid>/stat are read up to this much. */
#define EXECKILL_SMALL_FILE_MAX 65536
/* A cgroup.procs line: a pid and its newline. */
#define EXECKILL_PROCS_LINE_MAX 12

unsigned long long execkill_now_ticks(void)
{
	struct timespec ts;
	long hz = sysconf(_SC_CLK_TCK);

	if (hz <= 0)
		hz = 100;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
	       (unsigned long long)ts.tv_nsec / (1000000000ULL / (unsigned long long)hz);
}

/* ---- reading /proc ---------------------------------------------------------- */

/* The whole of a small file, NUL-terminated, at most max bytes: *ret
 * malloc'd. -errno (-EFBIG when longer). */
static int read_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 4096;

	if (fd < 0)
		return -errno;
	buf = xmalloc(cap + 1);
	for (;;) {
		ssize_t n;

		if (len == cap) {
			if (cap >= max)
				return -EFBIG;
			cap = cap * 2 > max ? max : cap * 2;
			buf = xrealloc(buf, cap + 1);
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

/* A decimal field of at most a long long: false when it is not one. */
static bool parse_ull(const char *s, const char *end, unsigned long long *ret)
{
	unsigned long long v = 0;

	if (s == end)
		return false;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9' || v > (ULLONG_MAX - (unsigned long long)(*s - '0')) / 10)
			return false;
		v = v * 10 + (unsigned long long)(*s - '0');
	}
	*ret = v;
	return true;
}

int execkill_parse_stat(const char *buf, size_t len, struct execkill_proc *ret)
{
	const char *end = buf + len, *p, *close = NULL;
	unsigned long long v, pid, ppid = 0, start = 0;
	char state = 0;
	unsigned field = 3;

	for (p = buf; p < end; p++)
		if (*p == ')')
			close = p;
	p = memchr(buf, ' ', len);
	if (!close || !p || p > close || !parse_ull(buf, p, &pid) || pid == 0 || pid > INT_MAX ||
	    close + 2 >= end || close[1] != ' ')
		return -EINVAL;
	for (p = close + 2; p < end && field <= 22; field++) {
		const char *f = p, *sp = memchr(p, ' ', (size_t)(end - p));
		const char *fe = sp ? sp : end;

		while (fe > f && (fe[-1] == '\n'))
			fe--;
		if (field == 3) {
			if (fe - f != 1)
				return -EINVAL;
			state = *f;
		} else if (field == 4 || field == 22) {
			if (!parse_ull(f, fe, &v) || (field == 4 && v > INT_MAX))
				return -EINVAL;
			if (field == 4)
				ppid = v;
			else
				start = v;
		}
		p = sp ? sp + 1 : end;
	}
	if (field <= 22)
		return -EINVAL;
	*ret = (struct execkill_proc){ .pid = (pid_t)pid, .ppid = (pid_t)ppid, .state = state, .start = start };
	return 0;
}

static int read_stat(const char *proc_root, pid_t pid, struct execkill_proc *ret)
{
	_cleanup_free_ char *path = xasprintf("%s/%d/stat", proc_root, (int)pid);
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = read_file(path, EXECKILL_SMALL_FILE_MAX, &buf, &len);

	if (r < 0)
		return r;
	r = execkill_parse_stat(buf, len, ret);
	return r < 0 ? r : (ret->pid == pid ? 0 : -EINVAL);
}

/* ---- the rule (pure) ---------------------------------------------------------- */

static const struct execkill_proc *find_proc(const struct execkill_proc *procs, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

static bool is_gone(const struct execkill_proc *p)
{
	return p->state == 'Z' || p->state == 'X' || p->state == 'x';
}

/* What a parent chain meets first, memoized per process: the selection is
 * O(n log n) whatever the chains (a scan is on the event loop). */
enum chain_class {
	CHAIN_UNKNOWN = 0,
	CHAIN_VISITING,   /* on the path being walked: met again, a loop */
	CHAIN_ROOT,       /* the exec's own process */
	CHAIN_INIT,       /* the container's init: an orphan */
	CHAIN_OTHER,      /* a parent outside the container, or a loop */
};

struct chains {
	const struct execkill_proc *procs;
	size_t n;
	size_t *by_pid;   /* indices into procs, sorted by pid */
	uint8_t *cls;     /* enum chain_class, per index */
	size_t *path;     /* scratch: the path being walked */
};

static int cmp_by_pid(const void *a, const void *b, void *arg)
{
	const struct execkill_proc *procs = arg;
	pid_t x = procs[*(const size_t *)a].pid, y = procs[*(const size_t *)b].pid;

	return x < y ? -1 : x > y;
}

/* The index of pid in c, or SIZE_MAX. */
static size_t chains_find(const struct chains *c, pid_t pid)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		pid_t m = c->procs[c->by_pid[mid]].pid;

		if (m == pid)
			return c->by_pid[mid];
		if (m < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

/* What the chain from procs[i] meets first; every process on the walked
 * path gets the same answer, so each is walked once. */
static enum chain_class chain_of(struct chains *c, const struct execkill_target *t, bool root_ok, size_t i)
{
	enum chain_class res = CHAIN_OTHER;
	size_t k = 0, cur = i;

	while (cur != SIZE_MAX) {
		const struct execkill_proc *q = &c->procs[cur];

		if (c->cls[cur] == CHAIN_VISITING)
			break;   /* a loop (a scan that raced): CHAIN_OTHER */
		if (c->cls[cur] != CHAIN_UNKNOWN) {
			res = (enum chain_class)c->cls[cur];
			break;
		}
		if (root_ok && q->pid == t->root) {
			res = c->cls[cur] = CHAIN_ROOT;
			break;
		}
		if (q->pid == t->init) {
			res = c->cls[cur] = CHAIN_INIT;
			break;
		}
		c->cls[cur] = CHAIN_VISITING;
		c->path[k++] = cur;
		cur = chains_find(c, q->ppid);
	}
	while (k > 0)
		c->cls[c->path[--k]] = (uint8_t)res;
	return (enum chain_class)c->cls[i] == CHAIN_UNKNOWN ? res : (enum chain_class)c->cls[i];
}

size_t execkill_select(const struct execkill_proc *procs, size_t n, const struct execkill_target *t,
		       pid_t *ret)
{
	const struct execkill_proc *root = t->root > 0 ? find_proc(procs, n, t->root) : NULL;
	/* A root that started before the exec is a recycled pid: not the exec's. */
	bool root_ok = root && root->start >= t->since && (t->root_by == 0 || root->start <= t->root_by) &&
		       root->pid != t->init;
	struct chains c = { .procs = procs, .n = n };
	size_t k = 0;

	if (n == 0)
		return 0;
	c.by_pid = xcalloc(n, sizeof(*c.by_pid));
	c.cls = xcalloc(n, sizeof(*c.cls));
	c.path = xcalloc(n, sizeof(*c.path));
	for (size_t i = 0; i < n; i++)
		c.by_pid[i] = i;
	qsort_r(c.by_pid, n, sizeof(*c.by_pid), cmp_by_pid, (void *)procs);
	for (size_t i = 0; i < n; i++) {
		const struct execkill_proc *p = &procs[i];
		enum chain_class cl;

		if (p->pid == t->init || is_gone(p))
			continue;
		cl = chain_of(&c, t, root_ok, i);
		if (cl == CHAIN_ROOT ||
		    (cl == CHAIN_INIT && p->start >= t->since && (t->until == 0 || p->start < t->until)))
			ret[k++] = p->pid;
	}
	free(c.by_pid);
	free(c.cls);
	free(c.path);
	return k;
}

/* ---- the container's processes -------------------------------------------------- */

/* Whether the comma-separated list s[0..n) holds word. */
static bool list_has(const char *s, size_t n, const char *word)
{
	size_t w = strlen(word);

	while (n > 0) {
		const char *c = memchr(s, ',', n);
		size_t k = c ? (size_t)(c - s) : n;

		if (k == w && memcmp(s, word, w) == 0)
			return true;
		if (!c)
			break;
		n -= k + 1;
		s = c + 1;
	}
	return false;
}

/* Whether a cgroup path (from /proc/<pid>/cgroup) may be followed: absolute,
 * not "/", no "." or ".." component, no backslash, and naming id when
 * given. */
static bool cgroup_path_ok(const char *path, const char *id)
{
	const char *p = path;

	if (path[0] != '/' || path[1] == '\0' || strchr(path, '\\'))
		return false;
	while (*p) {
		const char *c = p + 1, *e = strchr(c, '/');
		size_t len = e ? (size_t)(e - c) : strlen(c);

		if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		p = e ? e : c + len;
	}
	return !id || strstr(path, id) != NULL;
}

/* The cgroup.procs of init's cgroup: the v1 pids hierarchy's, else the v2
 * one. NULL when /proc/<init>/cgroup names neither (-ENOENT), or, id
 * given, when no line names it (-ESRCH: not the container's init). */
static char *cgroup_procs_path(const char *proc_root, const char *cgroup_root, pid_t init, const char *id,
			       int *reterr)
{
	bool named = false;
	_cleanup_free_ char *path = xasprintf("%s/%d/cgroup", proc_root, (int)init);
	_cleanup_free_ char *buf = NULL, *v2 = NULL;
	size_t len;
	char *line, *save = NULL;

	*reterr = read_file(path, EXECKILL_SMALL_FILE_MAX, &buf, &len);
	if (*reterr < 0)
		return NULL;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (c2 && id && strstr(c2 + 1, id))
			named = true;
		if (!c2 || !cgroup_path_ok(c2 + 1, id))
			continue;
		if (list_has(c1 + 1, (size_t)(c2 - c1 - 1), "pids"))
			return xasprintf("%s/pids%s/cgroup.procs", cgroup_root, c2 + 1);
		if (!v2 && c1 - line == 1 && line[0] == '0' && c2 == c1 + 1)
			v2 = xasprintf("%s%s/cgroup.procs", cgroup_root, c2 + 1);
	}
	*reterr = v2 ? 0 : id && !named ? -ESRCH : -ENOENT;
	return TAKE_PTR(v2);
}

static int pids_from_cgroup(const char *proc_root, const char *cgroup_root, pid_t init, const char *id,
			    pid_t **ret, size_t *ret_n)
{
	int r;
	_cleanup_free_ char *path = cgroup_procs_path(proc_root, cgroup_root, init, id, &r);
	_cleanup_free_ char *buf = NULL;
	_cleanup_free_ pid_t *pids = NULL;
	size_t len, n = 0;
	char *line, *save = NULL;

	if (!path)
		return r;
	r = read_file(path, (size_t)EXECKILL_MAX_PROCS * EXECKILL_PROCS_LINE_MAX, &buf, &len);
	if (r < 0 && r != -EFBIG)
		return r;
	if (r == -EFBIG)
		return r;   /* the pid namespace scan is cut at the bound instead */
	pids = xcalloc(EXECKILL_MAX_PROCS, sizeof(*pids));
	for (line = strtok_r(buf, "\n", &save); line && n < EXECKILL_MAX_PROCS;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long v;

		if (parse_ull(line, line + strlen(line), &v) && v > 0 && v <= INT_MAX)
			pids[n++] = (pid_t)v;
	}
	*ret = TAKE_PTR(pids);
	*ret_n = n;
	return 0;
}

static int ns_of(const char *proc_root, const char *pid, char *buf, size_t size)
{
	_cleanup_free_ char *path = xasprintf("%s/%s/ns/pid", proc_root, pid);
	ssize_t n = readlink(path, buf, size - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int pids_from_pidns(const char *proc_root, pid_t init, pid_t **ret, size_t *ret_n)
{
	char want[64], have[64], init_s[16];
	_cleanup_free_ pid_t *pids = NULL;
	DIR *dir;
	struct dirent *de;
	size_t n = 0;
	int r;

	snprintf(init_s, sizeof(init_s), "%d", (int)init);
	r = ns_of(proc_root, init_s, want, sizeof(want));
	if (r < 0)
		return r;
	dir = opendir(proc_root);
	if (!dir)
		return -errno;
	pids = xcalloc(EXECKILL_MAX_PROCS, sizeof(*pids));
	while ((de = readdir(dir)) && n < EXECKILL_MAX_PROCS) {
		unsigned long long v;

		if (!parse_ull(de->d_name, de->d_name + strlen(de->d_name), &v) || v == 0 || v > INT_MAX)
			continue;
		if (ns_of(proc_root, de->d_name, have, sizeof(have)) == 0 && strcmp(have, want) == 0)
			pids[n++] = (pid_t)v;
	}
	closedir(dir);
	*ret = TAKE_PTR(pids);
	*ret_n = n;
	return 0;
}

/* execkill_scan, and how many listed pids had no readable stat (gone
 * between the list and the read, or a pid the list names but /proc has not
 * got: a fork-hopper's generation). */
static int scan_counted(const char *proc_root, const char *cgroup_root, pid_t init, const char *id,
			struct execkill_proc **ret, size_t *ret_n, bool *ret_by_cgroup, size_t *ret_unreadable)
{
	char want[64], have[64], init_s[16], pid_s[16];
	_cleanup_free_ pid_t *pids = NULL;
	_cleanup_free_ struct execkill_proc *procs = NULL;
	struct execkill_proc self;
	size_t n = 0, k = 0, n_foreign = 0;
	bool by_cgroup = true;
	int r;

	if (read_stat(proc_root, init, &self) < 0)
		return -ESRCH;
	r = pids_from_cgroup(proc_root, cgroup_root, init, id, &pids, &n);
	if (r == -ESRCH)
		return r;   /* the init's cgroups do not name the container */
	snprintf(init_s, sizeof(init_s), "%d", (int)init);
	if (r == 0 && ns_of(proc_root, init_s, want, sizeof(want)) < 0)
		return -ESRCH;
	if (r < 0) {
		by_cgroup = false;
		r = pids_from_pidns(proc_root, init, &pids, &n);
	}
	if (r < 0)
		return r;
	procs = n ? xcalloc(n, sizeof(*procs)) : NULL;
	for (size_t i = 0; i < n; i++) {
		if (by_cgroup) {
			/* Only the init's pid namespace: a cgroup the guest
			 * could share is not a licence to signal outside it. */
			snprintf(pid_s, sizeof(pid_s), "%d", (int)pids[i]);
			if (ns_of(proc_root, pid_s, have, sizeof(have)) < 0)
				continue;   /* gone: counted unreadable */
			if (strcmp(have, want) != 0) {
				n_foreign++;
				continue;
			}
		}
		if (read_stat(proc_root, pids[i], &procs[k]) == 0)
			k++;
	}
	*ret = TAKE_PTR(procs);
	*ret_n = k;
	*ret_by_cgroup = by_cgroup;
	*ret_unreadable = n - k - n_foreign;
	return 0;
}

int execkill_scan_id(const char *proc_root, const char *cgroup_root, pid_t init, const char *id,
		     struct execkill_proc **ret, size_t *ret_n, bool *ret_by_cgroup)
{
	size_t unreadable;

	return scan_counted(proc_root, cgroup_root, init, id, ret, ret_n, ret_by_cgroup, &unreadable);
}

int execkill_scan(const char *proc_root, const char *cgroup_root, pid_t init, struct execkill_proc **ret,
		  size_t *ret_n, bool *ret_by_cgroup)
{
	return execkill_scan_id(proc_root, cgroup_root, init, NULL, ret, ret_n, ret_by_cgroup);
}

/* ---- killing ------------------------------------------------------------------------ */

/* SIGKILL to pid if it is still the process that started at start: true
 * when sent. */
static bool kill_same(const char *proc_root, pid_t pid, unsigned long long start)
{
	_cleanup_close_ int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct execkill_proc now;

	if (fd < 0)
		return false;
	/* The pidfd holds this very process: if its start still matches, the
	 * pid was not recycled between the scan and the open. */
	if (read_stat(proc_root, pid, &now) < 0 || now.start != start)
		return false;
	return syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0;
}

struct killed {
	pid_t pid;
	unsigned long long start;
};

static int cmp_killed(const void *a, const void *b)
{
	const struct killed *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int cmp_proc_pid(const void *a, const void *b)
{
	pid_t x = ((const struct execkill_proc *)a)->pid, y = ((const struct execkill_proc *)b)->pid;

	return x < y ? -1 : x > y;
}

/* done[0..n) is sorted (cmp_killed). */
static bool was_killed(const struct killed *done, size_t n, const struct execkill_proc *p)
{
	struct killed key = { p->pid, p->start };

	return n > 0 && bsearch(&key, done, n, sizeof(*done), cmp_killed) != NULL;
}

int execkill_run(const char *proc_root, const char *cgroup_root, const struct execkill_target *t,
		 size_t *ret_killed)
{
	_cleanup_free_ struct killed *done = NULL;
	struct execkill_proc init0, init_now;
	size_t n_done = 0;
	int r = -EAGAIN;

	/* The init as it is now: after each scan it must still be this one. */
	if (read_stat(proc_root, t->init, &init0) < 0) {
		if (ret_killed)
			*ret_killed = 0;
		return -ESRCH;
	}
	for (unsigned round = 0; round < EXECKILL_MAX_ROUNDS; round++) {
		_cleanup_free_ struct execkill_proc *procs = NULL;
		_cleanup_free_ pid_t *sel = NULL;
		size_t n = 0, k, fresh = 0, unreadable = 0;
		bool by_cgroup;

		r = scan_counted(proc_root, cgroup_root, t->init, t->id, &procs, &n, &by_cgroup, &unreadable);
		if (r < 0)
			break;
		if (read_stat(proc_root, t->init, &init_now) < 0 || init_now.start != init0.start ||
		    is_gone(&init_now)) {
			r = -ESRCH;   /* the init went (or its pid is another's now) */
			break;
		}
		size_t n_sorted = n_done;

		sel = xcalloc(n ? n : 1, sizeof(*sel));
		k = execkill_select(procs, n, t, sel);
		/* By pid, to find each selected one (the selection keeps none of
		 * procs' order that matters here). */
		if (n > 1)
			qsort(procs, n, sizeof(*procs), cmp_proc_pid);
		if (k > 0)
			done = xrealloc(done, (n_done + k) * sizeof(*done));
		for (size_t i = 0; i < k; i++) {
			struct execkill_proc key = { .pid = sel[i] };
			const struct execkill_proc *p = bsearch(&key, procs, n, sizeof(*procs), cmp_proc_pid);

			if (!p || was_killed(done, n_sorted, p))
				continue;
			fresh++;
			if (kill_same(proc_root, p->pid, p->start))
				done[n_done++] = (struct killed){ p->pid, p->start };
		}
		if (n_done > n_sorted)
			qsort(done, n_done, sizeof(*done), cmp_killed);
		/* A listed pid whose stat could not be read may have been the
		 * exec's, replaced meanwhile by a child the list did not have
		 * yet (a fork-hopper): not finished, scan again. */
		if (fresh == 0 && unreadable == 0) {
			r = 0;
			break;
		}
		r = -EAGAIN;
	}
	if (ret_killed)
		*ret_killed = n_done;
	return r;
}
