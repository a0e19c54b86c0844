/* check_execkill.c — which processes a timed-out exec's kill selects
 * (execkill.h), from tables and from a fake /proc and cgroup tree (a
 * mkdtemp directory): cgroup v1 (the pids hierarchy), v2, and the pid
 * namespace fallback. Nothing is killed here: execkill_run acts on real
 * pids and is exercised by the integration suite 'hostile'. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "execkill.h"
#include "xmalloc.h"


/* ---- /proc/<pid>/stat ------------------------------------------------------ */

START_TEST(test_parse_stat)
{
	/* 52 fields, as Linux 5.x writes them; the comm holds ") (" and spaces. */
	const char *line = "4242 (a) (b c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
			   "987654 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 "
			   "0 0 0 0 0 0 0 0\n";
	struct execkill_proc p;

	ck_assert_int_eq(execkill_parse_stat(line, strlen(line), &p), 0);
	ck_assert_int_eq(p.pid, 4242);
	ck_assert_int_eq(p.ppid, 17);
	ck_assert_int_eq(p.state, 'S');
	ck_assert_uint_eq(p.start, 987654);
}
END_TEST

static const char *const bad_stat_rows[] = {
	"",
	"4242 (x S 17",                                      /* no ')' */
	"4242 (x) S 17 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0",     /* cut before field 22 */
	"abc (x) S 17 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1", /* pid not a number */
	"4242 (x) SS 17 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1", /* state not one byte */
	"4242 (x) S -1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1",  /* ppid negative */
	"4242 (x) S 17 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5x 1", /* start not a number */
	"0 (x) S 17 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1",     /* pid 0 */
};

START_TEST(test_parse_stat_bad)
{
	struct execkill_proc p = { .pid = 99 };

	ck_assert_int_eq(execkill_parse_stat(bad_stat_rows[_i], strlen(bad_stat_rows[_i]), &p), -EINVAL);
	ck_assert_int_eq(p.pid, 99);   /* written only on success */
}
END_TEST

/* ---- the rule ------------------------------------------------------------------ */

/* A container: its init 100 (parent 50, the runtime's shim, outside) and
 * the keepalive it started (101); an old background job (150, orphaned
 * long before); the timed-out exec X (root 200, parent 60 outside,
 * started at tick 1000), its child (201), a child that shed the mark and
 * went to the init (202, env -i ... &, setsid + double fork), a zombie
 * (203), a grandchild under 201 (204); a concurrent exec Y (root 300,
 * parent 61 outside, started at 1500) and its child (301); a daemon's own
 * exec (rm, 400) started before X. */
static const struct execkill_proc box[] = {
	{ 100, 50, 'S', 10 },   { 101, 100, 'S', 11 },  { 150, 100, 'S', 500 },
	{ 200, 60, 'S', 1000 }, { 201, 200, 'R', 1001 }, { 202, 100, 'R', 1002 },
	{ 203, 100, 'Z', 1003 }, { 204, 201, 'S', 1004 },
	{ 300, 61, 'S', 1500 }, { 301, 300, 'S', 1501 },
	{ 400, 62, 'D', 900 },
};

static const struct {
	const char *what;
	struct execkill_target t;
	pid_t want[8];        /* 0-terminated, in box's order */
} select_rows[] = {
	{ "X: its tree and the orphan started since", { 100, 200, 1000, 0, 0, NULL }, { 200, 201, 202, 204 } },
	{ "X, its root unknown: the orphans started since only", { 100, 0, 1000, 0, 0, NULL }, { 202 } },
	{ "X, its root a pid that started before it (recycled): as unknown", { 100, 150, 1000, 0, 0, NULL }, { 202 } },
	{ "X, its root named as the init: never the init", { 100, 100, 1000, 0, 0, NULL }, { 202 } },
	{ "Y: its tree; X's orphan started before Y, spared", { 100, 300, 1500, 0, 0, NULL }, { 300, 301 } },
	{ "an exec older than everything: every process under the init", { 100, 0, 0, 0, 0, NULL }, { 101, 150, 202 } },
	{ "X, a later exec started at 1002: the orphan started then is that exec's, spared",
	  { 100, 200, 1000, 1002, 0, NULL }, { 200, 201, 204 } },
	{ "an exec older than everything, the next at 501: the orphans before it only",
	  { 100, 0, 0, 501, 0, NULL }, { 101, 150 } },
	{ "an exec started after everything: nothing", { 100, 999, 99999, 0, 0, NULL }, { 0 } },
	{ "X, its root reported at tick 999 (before 200 started: recycled): as unknown",
	  { 100, 200, 1000, 0, 999, NULL }, { 202 } },
	{ "X, its root reported at its own start tick: its tree", { 100, 200, 1000, 0, 1000, NULL },
	  { 200, 201, 202, 204 } },
};

START_TEST(test_select)
{
	pid_t got[ELEMENTSOF(box)];
	size_t n = execkill_select(box, ELEMENTSOF(box), &select_rows[_i].t, got), want = 0;

	while (select_rows[_i].want[want])
		want++;
	ck_assert_msg(n == want, "%s: %zu selected, want %zu", select_rows[_i].what, n, want);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == select_rows[_i].want[i], "%s: #%zu is %d, want %d", select_rows[_i].what, i,
			      (int)got[i], (int)select_rows[_i].want[i]);
}
END_TEST

/* A parent chain that loops (a scan racing a reparenting) ends. */
START_TEST(test_select_loop)
{
	static const struct execkill_proc loop[] = {
		{ 100, 50, 'S', 10 }, { 500, 501, 'S', 2000 }, { 501, 500, 'S', 2000 },
	};
	struct execkill_target t = { 100, 0, 1000, 0, 0, NULL };
	pid_t got[3];

	ck_assert_uint_eq(execkill_select(loop, ELEMENTSOF(loop), &t, got), 0);
}
END_TEST

/* ---- the container's processes, from a fake tree --------------------------------- */

struct tree {
	char dir[64];
	char *proc, *cg;
};

static void put(const char *path, const char *body)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(body, f);
	fclose(f);
}

static void mkdirs(const char *path)
{
	_cleanup_free_ char *p = xstrdup(path);

	for (char *c = p + 1; *c; c++)
		if (*c == '/') {
			*c = '\0';
			mkdir(p, 0755);
			*c = '/';
		}
	mkdir(p, 0755);
}

/* /proc/<pid>/stat and its pid namespace link. */
static void add_proc(struct tree *t, const struct execkill_proc *p, const char *ns)
{
	_cleanup_free_ char *d = xasprintf("%s/%d/ns", t->proc, (int)p->pid);
	_cleanup_free_ char *stat = xasprintf("%s/%d/stat", t->proc, (int)p->pid);
	_cleanup_free_ char *link = xasprintf("%s/%d/ns/pid", t->proc, (int)p->pid);
	_cleanup_free_ char *body = xasprintf("%d (p %d) %c %d 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %llu 1 1\n",
					      (int)p->pid, (int)p->pid, p->state, (int)p->ppid, p->start);

	mkdirs(d);
	put(stat, body);
	ck_assert_int_eq(symlink(ns, link), 0);
}

static void tree_empty(struct tree *t)
{
	snprintf(t->dir, sizeof(t->dir), "/tmp/check-execkill-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t->dir));
	t->proc = xasprintf("%s/proc", t->dir);
	t->cg = xasprintf("%s/cgroup", t->dir);
	mkdirs(t->proc);
	mkdirs(t->cg);
}

/* The box in the container's namespace, plus a host process (7, in the
 * host's) that started after X: never the container's. */
static void tree_new(struct tree *t)
{
	static const struct execkill_proc host = { 7, 1, 'R', 1200 };

	tree_empty(t);
	for (size_t i = 0; i < ELEMENTSOF(box); i++)
		add_proc(t, &box[i], "pid:[4026532000]");
	add_proc(t, &host, "pid:[4026531836]");
}

static void tree_free(struct tree *t)
{
	_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", t->dir);

	ck_assert_int_eq(system(cmd), 0);
	free(t->proc);
	free(t->cg);
}

/* The pids box lists, one a line, as cgroup.procs has them. */
static char *box_procs(void)
{
	char *s = xstrdup("");

	for (size_t i = 0; i < ELEMENTSOF(box); i++) {
		char *n = xasprintf("%s%d\n", s, (int)box[i].pid);

		free(s);
		s = n;
	}
	return s;
}

static void check_scan(struct tree *t, bool want_cgroup)
{
	_cleanup_free_ struct execkill_proc *procs = NULL;
	struct execkill_target x = { 100, 200, 1000, 0, 0, NULL };
	pid_t got[32];
	size_t n = 0;
	bool by_cgroup = !want_cgroup;

	ck_assert_int_eq(execkill_scan(t->proc, t->cg, 100, &procs, &n, &by_cgroup), 0);
	ck_assert_uint_eq(n, ELEMENTSOF(box));
	ck_assert(by_cgroup == want_cgroup);
	ck_assert_uint_eq(execkill_select(procs, n, &x, got), 4);
}

/* cgroup v1 (this project's CI machine): the pids hierarchy's cgroup.procs. */
START_TEST(test_scan_cgroup_v1)
{
	struct tree t;
	_cleanup_free_ char *cgf = NULL, *dir = NULL, *procs = box_procs();

	tree_new(&t);
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "12:cpuset:/docker/abc\n9:pids:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n");
	dir = xasprintf("%s/pids/docker/abc", t.cg);
	mkdirs(dir);
	free(cgf);
	cgf = xasprintf("%s/cgroup.procs", dir);
	put(cgf, procs);
	check_scan(&t, true);
	tree_free(&t);
}
END_TEST

/* cgroup v2: the unified path. */
START_TEST(test_scan_cgroup_v2)
{
	struct tree t;
	_cleanup_free_ char *cgf = NULL, *dir = NULL, *procs = box_procs();

	tree_new(&t);
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "0::/system.slice/docker-abc.scope\n");
	dir = xasprintf("%s/system.slice/docker-abc.scope", t.cg);
	mkdirs(dir);
	free(cgf);
	cgf = xasprintf("%s/cgroup.procs", dir);
	put(cgf, procs);
	check_scan(&t, true);
	tree_free(&t);
}
END_TEST

/* No readable cgroup: every process in the init's pid namespace (the host
 * process 7 is not). */
START_TEST(test_scan_pidns)
{
	struct tree t;
	_cleanup_free_ char *cgf = NULL;

	tree_new(&t);
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "9:pids:/docker/gone\n");
	check_scan(&t, false);
	tree_free(&t);
}
END_TEST

/* The init's cgroup lines, hostile or odd, against container id "abc":
 * followed only when absolute, not "/", free of "." and "..", naming the
 * id; none naming it → not the container's init (-ESRCH, no scan). */
static const struct {
	const char *cgroup;
	int want_r;
	bool want_cgroup;
} cgroup_rows[] = {
	{ "9:pids:/docker/abc\n", 0, true },
	{ "0::/system.slice/docker-abc.scope\n", 0, true },
	{ "9:pids:/\n0::/\n", -ESRCH, false },
	{ "9:pids:/..\n0::/..\n", -ESRCH, false },
	{ "9:pids:/elsewhere\n0::/elsewhere\n", -ESRCH, false },
	{ "9:pids:/docker/abc/..\n", 0, false },          /* named, not followed: the pid namespace */
	{ "9:pids:/docker/./abc\n", 0, false },
	{ "9:pids:/docker/abc\\x\n", 0, false },
};

START_TEST(test_scan_cgroup_lines)
{
	struct tree t;
	_cleanup_free_ struct execkill_proc *procs = NULL;
	_cleanup_free_ char *cgf = NULL, *procs_list = box_procs();
	static const char *const dirs[] = { "pids/docker/abc", "system.slice/docker-abc.scope", "pids", "",
					    "pids/elsewhere", "elsewhere" };
	size_t n = 0;
	bool by_cgroup = false;

	tree_new(&t);
	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		_cleanup_free_ char *d = xasprintf("%s/%s", t.cg, dirs[i]);
		_cleanup_free_ char *f = xasprintf("%s/cgroup.procs", d);

		mkdirs(d);
		put(f, procs_list);
	}
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, cgroup_rows[_i].cgroup);
	ck_assert_int_eq(execkill_scan_id(t.proc, t.cg, 100, "abc", &procs, &n, &by_cgroup), cgroup_rows[_i].want_r);
	if (cgroup_rows[_i].want_r == 0) {
		ck_assert_msg(by_cgroup == cgroup_rows[_i].want_cgroup, "%s: by cgroup %d", cgroup_rows[_i].cgroup,
			      by_cgroup);
		ck_assert_uint_eq(n, ELEMENTSOF(box));
	}
	tree_free(&t);
}
END_TEST

/* Listed by the cgroup but in another pid namespace: never a candidate. */
START_TEST(test_scan_cgroup_foreign_ns)
{
	struct tree t;
	_cleanup_free_ struct execkill_proc *procs = NULL;
	_cleanup_free_ char *cgf = NULL, *dir = NULL, *body = NULL, *list = box_procs();
	size_t n = 0;
	bool by_cgroup = false;

	tree_new(&t);
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "9:pids:/docker/abc\n");
	dir = xasprintf("%s/pids/docker/abc", t.cg);
	mkdirs(dir);
	free(cgf);
	cgf = xasprintf("%s/cgroup.procs", dir);
	body = xasprintf("%s7\n", list);   /* the host process 7 */
	put(cgf, body);
	ck_assert_int_eq(execkill_scan_id(t.proc, t.cg, 100, "abc", &procs, &n, &by_cgroup), 0);
	ck_assert(by_cgroup);
	ck_assert_uint_eq(n, ELEMENTSOF(box));
	for (size_t i = 0; i < n; i++)
		ck_assert_int_ne(procs[i].pid, 7);
	tree_free(&t);
}
END_TEST

/* The init gone: -ESRCH. */
START_TEST(test_scan_init_gone)
{
	struct tree t;
	_cleanup_free_ struct execkill_proc *procs = NULL;
	size_t n = 0;
	bool by_cgroup;

	tree_new(&t);
	ck_assert_int_eq(execkill_scan(t.proc, t.cg, 99, &procs, &n, &by_cgroup), -ESRCH);
	tree_free(&t);
}
END_TEST

/* Nothing selected: execkill_run ends after one scan, killing nothing. */
START_TEST(test_run_nothing)
{
	struct tree t;
	struct execkill_target x = { 100, 999, 99999, 0, 0, NULL };
	size_t killed = 1;

	tree_new(&t);
	ck_assert_int_eq(execkill_run(t.proc, t.cg, &x, &killed), 0);
	ck_assert_uint_eq(killed, 0);
	tree_free(&t);
}
END_TEST

/* A process that will not go (here: a pid no process can have, so every
 * kill fails): the rounds are bounded, -EAGAIN. */
START_TEST(test_run_bounded)
{
	struct tree t;
	struct execkill_target x = { 100, 0, 1000, 0, 0, NULL };
	struct execkill_proc ghost = { 0, 100, 'R', 2000 };
	_cleanup_free_ char *cgf = NULL;
	size_t killed = 1;
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
	long max = 0;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%ld", &max), 1);
	fclose(f);
	ck_assert_int_lt(max, INT_MAX - 10);
	ghost.pid = (pid_t)(max + 5);
	/* Only the init and the ghost: no fake pid a real process could hold
	 * is ever selected (execkill_run signals real pids). */
	tree_empty(&t);
	add_proc(&t, &box[0], "pid:[4026532000]");
	add_proc(&t, &ghost, "pid:[4026532000]");
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "9:pids:/docker/gone\n");   /* by the pid namespace */
	ck_assert_int_eq(execkill_run(t.proc, t.cg, &x, &killed), -EAGAIN);
	ck_assert_uint_eq(killed, 0);
	tree_free(&t);
}
END_TEST

/* A listed pid with no readable stat (a fork-hopper's generation gone
 * between the list and the read; its child not listed yet) is not a
 * finished scan: the rounds go on and run out (-EAGAIN), never 0. */
START_TEST(test_run_unreadable)
{
	struct tree t;
	struct execkill_target x = { 100, 0, 1000, 0, 0, NULL };
	_cleanup_free_ char *cgf = NULL, *dir = NULL;
	size_t killed = 1;

	tree_empty(&t);
	add_proc(&t, &box[0], "pid:[4026532000]");
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "9:pids:/docker/abc\n");
	dir = xasprintf("%s/pids/docker/abc", t.cg);
	mkdirs(dir);
	free(cgf);
	cgf = xasprintf("%s/cgroup.procs", dir);
	put(cgf, "100\n555\n");
	ck_assert_int_eq(execkill_run(t.proc, t.cg, &x, &killed), -EAGAIN);
	ck_assert_uint_eq(killed, 0);
	tree_free(&t);
}
END_TEST

/* EXECKILL_MAX_PROCS processes, each the parent of the next (a chain as
 * deep as the bound), in a fake /proc listed by cgroup.procs: the
 * selection walks every chain once (memoized, found by binary search), so
 * the run ends at once (the check's timeout is the hang guard). None is
 * selected: all started before the exec, and their pids are past pid_max
 * (no real process is ever signalled). */
START_TEST(test_run_many)
{
	struct tree t;
	struct execkill_target x = { 100, 0, 1000, 0, 0, NULL };
	_cleanup_free_ char *cgf = NULL, *dir = NULL;
	size_t killed = 1;
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r"), *procs;
	long max = 0;
	pid_t base;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%ld", &max), 1);
	fclose(f);
	ck_assert_int_lt(max, INT_MAX - EXECKILL_MAX_PROCS - 10);
	base = (pid_t)(max + 5);
	tree_empty(&t);
	add_proc(&t, &box[0], "pid:[4026532000]");
	cgf = xasprintf("%s/100/cgroup", t.proc);
	put(cgf, "9:pids:/docker/abc\n");
	dir = xasprintf("%s/pids/docker/abc", t.cg);
	mkdirs(dir);
	free(cgf);
	cgf = xasprintf("%s/cgroup.procs", dir);
	procs = fopen(cgf, "w");
	ck_assert_ptr_nonnull(procs);
	fprintf(procs, "100\n");
	for (int i = 0; i < EXECKILL_MAX_PROCS - 1; i++) {
		struct execkill_proc p = { base + i, i ? base + i - 1 : 100, 'S', 500 };

		add_proc(&t, &p, "pid:[4026532000]");
		fprintf(procs, "%d\n", (int)p.pid);
	}
	fclose(procs);
	ck_assert_int_eq(execkill_run(t.proc, t.cg, &x, &killed), 0);
	ck_assert_uint_eq(killed, 0);
	tree_free(&t);
}
END_TEST

/* The same chain in memory, the orphan rule selecting every one of it. */
START_TEST(test_select_deep)
{
	size_t n = EXECKILL_MAX_PROCS;
	_cleanup_free_ struct execkill_proc *procs = xcalloc(n, sizeof(*procs));
	_cleanup_free_ pid_t *got = xcalloc(n, sizeof(*got));
	struct execkill_target x = { 100, 0, 1000, 0, 0, NULL };

	procs[0] = (struct execkill_proc){ 100, 50, 'S', 10 };
	/* In reverse pid order: the deepest first, each walk the longest. */
	for (size_t i = 1; i < n; i++)
		procs[i] = (struct execkill_proc){ (pid_t)(200000 - i), i == n - 1 ? 100 : (pid_t)(200000 - i - 1),
						   'S', 2000 };
	ck_assert_uint_eq(execkill_select(procs, n, &x, got), n - 1);
}
END_TEST

START_TEST(test_now_ticks)
{
	unsigned long long a = execkill_now_ticks(), b;
	struct execkill_proc self;
	char buf[4096];
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY);

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(execkill_parse_stat(buf, (size_t)n, &self), 0);
	b = execkill_now_ticks();
	/* This process started before now, on the same clock. */
	ck_assert_uint_le(self.start, a);
	ck_assert_uint_le(a, b);
}
END_TEST

static Suite *execkill_suite(void)
{
	Suite *s = suite_create("execkill");
	TCase *tc = tcase_create("stat");

	tcase_add_test(tc, test_parse_stat);
	tcase_add_loop_test(tc, test_parse_stat_bad, 0, ELEMENTSOF(bad_stat_rows));
	tcase_add_test(tc, test_now_ticks);
	suite_add_tcase(s, tc);

	tc = tcase_create("rule");
	tcase_add_loop_test(tc, test_select, 0, ELEMENTSOF(select_rows));
	tcase_add_test(tc, test_select_loop);
	suite_add_tcase(s, tc);

	tc = tcase_create("scan");
	tcase_add_test(tc, test_scan_cgroup_v1);
	tcase_add_test(tc, test_scan_cgroup_v2);
	tcase_add_test(tc, test_scan_pidns);
	tcase_add_test(tc, test_scan_init_gone);
	tcase_add_loop_test(tc, test_scan_cgroup_lines, 0, ELEMENTSOF(cgroup_rows));
	tcase_add_test(tc, test_scan_cgroup_foreign_ns);
	tcase_add_test(tc, test_run_nothing);
	tcase_add_test(tc, test_run_bounded);
	tcase_add_test(tc, test_run_unreadable);
	suite_add_tcase(s, tc);

	/* 16384 processes: writing the fake tree takes most of it. */
	tc = tcase_create("many");
	tcase_set_timeout(tc, 100);
	tcase_add_test(tc, test_run_many);
	tcase_add_test(tc, test_select_deep);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(execkill_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
