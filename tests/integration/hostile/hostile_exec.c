/* hostile_exec.c — findings 5, 7 and 14 (exec's working directory) of the
 * attack run, in miniature (see hostile.h):
 *
 *  5. The exec kill could be escaped: a child that drops the mark (env -i,
 *     or a new MSB_EXEC_ID) outlived the deadline, and one holding stdout
 *     held the TimeoutError back. Here, on both file planes: four execs
 *     with a 2 s deadline leave such children (one forks in a loop up to
 *     the sandbox's pids limit); each answers TimeoutError
 *     (the client's wait is only a hang guard), and afterwards none of
 *     those processes is in the container (the engine's top, polled until
 *     gone, then asserted), while a concurrent exec still within its
 *     deadline keeps its process.
 *  7. Identity drift: an image whose user (uid 1000, Config.User "tester")
 *     can write /etc/passwd rewrites its own line to uid 0 through an exec;
 *     a later exec is still uid 1000 and a files.write lands 1000:1000.
 * 14. working_directory /proc/self/cwd, /proc/self/fd/3 (and /sys, /dev)
 *     are refused: ConfinementError naming the path.
 *
 * Each test starts its own daemon(s), uses sandboxes labelled with the
 * run's id, disposes them and asserts the daemon exits 0. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "harness.h"
#include "hostile.h"
#include "xmalloc.h"

#define ENGINE_WAIT_MS 15000   /* hang guard */
#define ERR_CONFINEMENT 1200
#define ERR_TIMEOUT 1205
#define ERR_OS 1203
/* The deadline of the escaping execs, and the hang guard on their reply
 * (the client's own wait is 30 s). */
#define ESCAPE_TIMEOUT_S 2
#define REPLY_GUARD_MS 20000   /* hang guard */
/* How long the killed processes may take to leave the container (a hang
 * guard: the engine's top is polled until they are gone). */
#define GONE_GUARD_MS 20000   /* hang guard */
#define POLL_MS 200
/* The concurrent exec's deadline: well past this test's own length. */
#define SURVIVOR_TIMEOUT_S 120   /* hang guard */
#define SURVIVOR_REQ_ID 7
/* The user image of the identity test. */
#define USER_UID "1000"

/* Markers of the processes the escaping execs leave behind. */
static const char *const escapee_markers[] = { "while :; do :; done", "sleep 1005", "sleep 1007", "sleep 1010" };
/* The escape test's sandboxes run at most this many processes (the fork
 * loop fills it). */
#define ESCAPE_PIDS_LIMIT "sandbox.pids_limit=128"
#define SURVIVOR_MARKER "sleep 1006"

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A daemon on p serving plane, its registry synchronised. */
static void daemon_up(struct msbd_proc *p, const char *plane, const char *const *args)
{
	json_t *r = NULL;

	/* The harness passes $MSB_FILE_PLANE on to every daemon it starts. */
	setenv("MSB_FILE_PLANE", plane, 1);
	msbd_start(p, args);
	json_decref(wait_engine_state(p->sock, "reachable", ENGINE_WAIT_MS));
	for (int i = 0; i < 200 && !r; i++) {
		r = call(p->sock, "sandbox.list", NULL, NULL, NULL);
		if (!r)
			usleep(50 * 1000);
	}
	ck_assert_msg(r, "the registry never synchronised");
	json_decref(r);
}

/* Acquires {run-test, plane} with spec (stolen); its id into out. */
static void acquire(struct msbd_proc *p, const char *test, const char *plane, json_t *spec, char out[80])
{
	char scope[96];
	int code = 0;
	json_t *r;

	snprintf(scope, sizeof(scope), "%s-%s", hostile_run_id, test);
	json_object_set_new(spec, "requires", json_pack("[sss]", "exec", "files_in", "files_out"));
	r = call(p->sock, "sandbox.acquire",
		 json_pack("{s:{s:s, s:s, s:s}, s:o}", "key", "scope", scope, "thread_id", plane, "agent_dir", "a",
			   "spec", spec),
		 &code, NULL);
	if (!r)
		msbd_dump_log(p);
	ck_assert_msg(r, "sandbox.acquire failed: %d", code);
	ck_assert_str_eq(jstr(r, "file_plane"), plane);
	snprintf(out, 80, "%s", jstr(r, "sandbox"));
	json_decref(r);
}

static void dispose(struct msbd_proc *p, const char *test, const char *plane)
{
	char scope[96];
	int code = 0;
	json_t *r;

	snprintf(scope, sizeof(scope), "%s-%s", hostile_run_id, test);
	r = call(p->sock, "sandbox.dispose",
		 json_pack("{s:{s:s, s:s, s:s}, s:s}", "key", "scope", scope, "thread_id", plane, "agent_dir", "a",
			   "kind", "k"),
		 &code, NULL);
	ck_assert_msg(code == 0, "sandbox.dispose failed: %d", code);
	json_decref(r);
}

/* sandbox.exec of a shell command; the result (new ref), or NULL with
 * *ret_code (and the error's type into *ret_type when wanted). */
static json_t *exec_sh(struct msbd_proc *p, const char *sb, const char *cmd, double timeout_s, int *ret_code,
		       char **ret_type)
{
	return call(p->sock, "sandbox.exec",
		    json_pack("{s:s, s:s, s:f, s:b}", "sandbox", sb, "command", cmd, "timeout_seconds", timeout_s,
			      "text", 1),
		    ret_code, ret_type);
}

/* stdout of a shell command that must succeed (malloc'd). */
static char *exec_out(struct msbd_proc *p, const char *sb, const char *cmd)
{
	int code = 0;
	json_t *r = exec_sh(p, sb, cmd, 30, &code, NULL);
	char *out;

	ck_assert_msg(r, "exec %s failed: %d", cmd, code);
	ck_assert_msg(jint(r, "exit_code") == 0, "exec %s exited %d: %s", cmd, (int)jint(r, "exit_code"),
		      jstr(r, "stderr_text"));
	out = strdup(jstr(r, "stdout_text"));
	json_decref(r);
	return out;
}

/* The container's processes, as the engine's top lists them (its JSON). */
static char *top(const char *sb)
{
	char path[128];

	snprintf(path, sizeof(path), "/containers/%s/top?ps_args=-eo%%20pid,args", sb);
	return engine_get(path, NULL, NULL);
}

static int escapees_in(const char *t)
{
	int n = 0;

	for (size_t i = 0; i < sizeof(escapee_markers) / sizeof(escapee_markers[0]); i++)
		n += strstr(t, escapee_markers[i]) != NULL;
	return n;
}

/* ---- finding 5: the exec kill ---------------------------------------------- */

static void escape_on(const char *plane)
{
	/* Each leaves a child that sheds the call's mark and holds stdout. */
	static const char *const escapes[] = {
		/* a CPU burner with no environment at all */
		"env -i sh -c 'while :; do :; done' &",
		/* the mark replaced, and the exec's own process becomes it */
		"export MSB_EXEC_ID=x; exec sleep 1005",
		/* daemonized: a new session, the middle process gone (double fork) */
		"env -i setsid sh -c 'sleep 1007 & exit 0'; exit 0",
		/* a loop forking faster than one scan, up to the pids limit */
		"env -i sh -c 'while :; do sleep 1010 & done' &",
	};
	struct msbd_proc p = { 0 };
	char sb[80];
	char *t = NULL;
	long deadline;
	int fd;

	static const char *const args[] = { "--set", ESCAPE_PIDS_LIMIT, NULL };

	daemon_up(&p, plane, args);
	acquire(&p, "escape", plane, hostile_spec(), sb);
	/* The concurrent exec, still within its deadline when the others end. */
	fd = raw_connect(p.sock);
	raw_request_send(fd, SURVIVOR_REQ_ID, "sandbox.exec",
			 json_pack("{s:s, s:s, s:i}", "sandbox", sb, "command", SURVIVOR_MARKER, "timeout_seconds",
				   SURVIVOR_TIMEOUT_S));
	for (deadline = now_ms() + GONE_GUARD_MS; now_ms() < deadline; usleep(POLL_MS * 1000)) {
		free(t);
		t = top(sb);
		if (strstr(t, SURVIVOR_MARKER))
			break;
	}
	ck_assert_msg(strstr(t, SURVIVOR_MARKER), "the concurrent exec never started: %s", t);
	for (size_t i = 0; i < sizeof(escapes) / sizeof(escapes[0]); i++) {
		_cleanup_free_ char *type = NULL;
		long t0 = now_ms();
		int code = 0;
		json_t *r = exec_sh(&p, sb, escapes[i], ESCAPE_TIMEOUT_S, &code, &type);

		if (r || code != ERR_TIMEOUT) {
			_cleanup_free_ char *dump = r ? json_dumps(r, 0) : NULL;

			fprintf(stderr, "%s (%s): %s\n", escapes[i], plane, dump ? dump : "(error)");
			msbd_dump_log(&p);
		}
		ck_assert_msg(!r && code == ERR_TIMEOUT, "%s (%s): %d, want TimeoutError", escapes[i], plane, code);
		ck_assert_str_eq(type, "TimeoutError");
		ck_assert_msg(now_ms() - t0 < REPLY_GUARD_MS, "%s: the reply hung", escapes[i]);
	}
	/* Observe the container until none of them is left (hang guard), then assert. */
	for (deadline = now_ms() + GONE_GUARD_MS; now_ms() < deadline; usleep(POLL_MS * 1000)) {
		free(t);
		t = top(sb);
		if (escapees_in(t) == 0)
			break;
	}
	if (escapees_in(t) || !strstr(t, SURVIVOR_MARKER))
		msbd_dump_log(&p);
	ck_assert_msg(escapees_in(t) == 0, "%s: processes outlived their exec's deadline: %s", plane, t);
	ck_assert_msg(strstr(t, SURVIVOR_MARKER), "%s: the concurrent exec within its deadline was killed: %s",
		      plane, t);
	free(t);
	close(fd);
	dispose(&p, "escape", plane);
	ck_assert_int_eq(msbd_stop(&p), 0);
}

START_TEST(test_exec_kill_escapes_archive)
{
	escape_on("archive");
}
END_TEST

START_TEST(test_exec_kill_escapes_local)
{
	escape_on("local");
}
END_TEST

/* ---- the fork-hopper: each generation forks and exits --------------------------- */

/* Busy: this many long-lived processes (started before the exec, so not
 * its own) make one scan of the container slower. */
#define HOPPER_BUSY 1000
#define HOPPER_PIDS_LIMIT "sandbox.pids_limit=1100"
/* The daemon's record (log.debug) that the kill scanned a frozen container. */
#define HOPPER_FROZEN_LOG "killed from the host (frozen)"

/* Whether the daemon's log holds s. */
static bool log_has(const struct msbd_proc *p, const char *s)
{
	_cleanup_free_ char *buf = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f = fopen(p->log, "r");

	ck_assert_ptr_nonnull(f);
	while (!found && getline(&buf, &cap, f) > 0)
		found = strstr(buf, s) != NULL;
	fclose(f);
	return found;
}
#define HOPPER_MARKER "./hopper"
/* The hopper: no libc, each generation forks and exits at once, so a pid
 * read from cgroup.procs is gone before its stat is read. */
static const char hopper_src[] =
	"#include <sys/syscall.h>\n"
	"static long sc(long n, long a) { long r; __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(n), \"D\"(a)"
	" : \"rcx\", \"r11\", \"memory\"); return r; }\n"
	"void _start(void) { for (;;) if (sc(SYS_fork, 0) > 0) sc(SYS_exit, 0); }\n";

/* The hopper, built static on this host: base64 of it (malloc'd). */
static char *hopper_b64(void)
{
	char dir[] = "/tmp/hostile-hopper-XXXXXX", cmd[512], *out = NULL;
	size_t cap = 0;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "%s/h.c", dir);
	f = fopen(cmd, "w");
	ck_assert_ptr_nonnull(f);
	fputs(hopper_src, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "gcc -static -nostdlib -Os -s -fno-stack-protector -o %s/h %s/h.c >&2 && base64 -w0 %s/h; rm -rf %s",
		 dir, dir, dir, dir);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_gt(getline(&out, &cap, f), 0);
	ck_assert_int_eq(pclose(f), 0);
	return out;
}

/* A process whose generations each fork the next and exit (no mark: env -i)
 * escaped the kill: the scan read cgroup.procs and then each stat, by
 * which time the listed pid was gone and its child not listed. The kill
 * scans the container frozen; nothing of the hopper is left, the older
 * processes are spared. */
START_TEST(test_exec_kill_hopper)
{
	struct msbd_proc p = { 0 };
	char sb[80];
	_cleanup_free_ char *busy = NULL, *bin = NULL;
	char *t = NULL;
	_cleanup_free_ char *type = NULL;
	int code = 0;
	long deadline;
	json_t *r;
	static const char *const args[] = { "--set", HOPPER_PIDS_LIMIT, "--set", "log.debug=true", NULL };

#ifndef __x86_64__
	return;   /* the hopper is x86-64 code */
#endif
	bin = hopper_b64();
	daemon_up(&p, "archive", args);
	acquire(&p, "hopper", "archive", hostile_spec(), sb);
	busy = xasprintf("i=0; while [ $i -lt %d ]; do sleep 3000 >/dev/null 2>&1 & i=$((i+1)); done", HOPPER_BUSY);
	free(exec_out(&p, sb, busy));
	r = call(p.sock, "files.write",
		 json_pack("{s:s, s:s, s:s}", "sandbox", sb, "path", "hopper", "content_b64", bin), &code, NULL);
	ck_assert_msg(r, "files.write of the hopper failed: %d", code);
	json_decref(r);
	free(exec_out(&p, sb, "chmod 755 " HOPPER_MARKER));
	r = exec_sh(&p, sb, "env -i " HOPPER_MARKER " & exec sleep 1020", ESCAPE_TIMEOUT_S, &code, &type);
	ck_assert_msg(!r && code == ERR_TIMEOUT, "the hopper's exec: %d, want TimeoutError", code);
	for (deadline = now_ms() + GONE_GUARD_MS; now_ms() < deadline; usleep(POLL_MS * 1000)) {
		free(t);
		t = top(sb);
		if (!strstr(t, HOPPER_MARKER) && !strstr(t, "sleep 1020"))
			break;
	}
	if (strstr(t, HOPPER_MARKER))
		msbd_dump_log(&p);
	ck_assert_msg(!strstr(t, HOPPER_MARKER), "the fork-hopper outlived its exec's deadline");
	ck_assert_msg(!strstr(t, "sleep 1020"), "the exec's own process outlived its deadline");
	/* The busy processes were not the exec's: spared. */
	ck_assert_msg(strstr(t, "sleep 3000"), "processes older than the exec were killed");
	/* And the snapshot was a consistent one: taken frozen. */
	ck_assert_msg(log_has(&p, HOPPER_FROZEN_LOG), "the kill did not scan the container frozen");
	free(t);
	dispose(&p, "hopper", "archive");
	ck_assert_int_eq(msbd_stop(&p), 0);
}
END_TEST

/* ---- finding 7: identity drift ------------------------------------------------ */

static char user_image[128];

/* The run's image with a user tester (uid 1000) as Config.User, and an
 * /etc/passwd it may write. */
static void user_image_build(void)
{
	_cleanup_free_ char *out = NULL;

	snprintf(user_image, sizeof(user_image), "msb-it-hostile-user:%s", hostile_run_id);
	out = sh_out("printf 'FROM %s\\nRUN echo tester:x:" USER_UID ":" USER_UID "::/tmp:/bin/sh >> /etc/passwd "
		     "&& echo tester:x:" USER_UID ": >> /etc/group && chmod 666 /etc/passwd "
		     "&& mkdir /keep && touch /keep/x\\nUSER tester\\n' | "
		     "timeout 120 docker build -q -t %s - >/dev/null 2>&1 && echo built",
		     hostile_image, user_image);
	ck_assert_msg(strcmp(out, "built") == 0, "cannot build %s", user_image);
}

static void user_image_remove(void)
{
	free(sh_out("timeout 60 docker rmi -f %s >/dev/null 2>&1", user_image));
}

/* The tcase's teardown, in the runner's own process: the image goes even
 * when the test failed before removing it. */
static void user_image_teardown(void)
{
	free(sh_out("timeout 60 docker rmi -f msb-it-hostile-entry:%s >/dev/null 2>&1", hostile_run_id));
	free(sh_out("timeout 60 docker rmi -f msb-it-hostile-user:%s >/dev/null 2>&1", hostile_run_id));
}

static void drift_on(const char *plane)
{
	struct msbd_proc p = { 0 };
	json_t *spec = hostile_spec(), *r;
	char sb[80];
	int code = 0;
	_cleanup_free_ char *before = NULL, *passwd = NULL, *after = NULL, *owner = NULL;

	daemon_up(&p, plane, NULL);
	json_object_set_new(spec, "image", json_string(user_image));
	acquire(&p, "drift", plane, spec, sb);
	before = exec_out(&p, sb, "id -u");
	ck_assert_str_eq(before, USER_UID "\n");
	/* The guest makes its user root in its own account database. */
	passwd = exec_out(&p, sb, "printf 'root:x:0:0:root:/root:/bin/sh\\ntester:x:0:0::/tmp:/bin/sh\\n' > "
			  "/etc/passwd && cat /etc/passwd");
	ck_assert_msg(strstr(passwd, "tester:x:0:0:"), "the rewrite did not take: %s", passwd);
	after = exec_out(&p, sb, "id -u");
	ck_assert_msg(strcmp(after, USER_UID "\n") == 0, "%s: a later exec runs as uid %s", plane, after);
	r = call(p.sock, "files.write",
		 json_pack("{s:s, s:s, s:s}", "sandbox", sb, "path", "drift.txt", "content_text", "x"), &code, NULL);
	ck_assert_msg(r, "files.write failed: %d", code);
	json_decref(r);
	owner = exec_out(&p, sb, "stat -c %u:%g drift.txt");
	ck_assert_msg(strcmp(owner, USER_UID ":" USER_UID "\n") == 0, "%s: the write landed as %s", plane, owner);
	/* files.remove's rm (archive plane) runs as uid 1000 too, not as the
	 * name "tester", which now says 0: root's /keep/x stays. */
	r = call(p.sock, "files.remove",
		 json_pack("{s:s, s:s, s:s}", "sandbox", sb, "working_directory", "/keep", "path", "x"), &code, NULL);
	ck_assert_msg(!r && code == ERR_OS, "%s: files.remove of root's file: %d, want OSError", plane, code);
	free(exec_out(&p, sb, "test -e /keep/x"));
	dispose(&p, "drift", plane);
	ck_assert_int_eq(msbd_stop(&p), 0);
}

START_TEST(test_identity_drift)
{
	user_image_build();
	drift_on("archive");
	drift_on("local");
	user_image_remove();
}
END_TEST

/* ---- finding 7's own scenario: the entrypoint rewrites /etc/passwd -------------- */

static char entry_image[128];

/* The user image with an ENTRYPOINT that makes tester uid 0 in
 * /etc/passwd before it execs the command: before any acquire can resolve
 * the name. */
static void entry_image_build(void)
{
	char dir[] = "/tmp/hostile-entry-XXXXXX", path[64];
	_cleanup_free_ char *out = NULL;
	FILE *f;

	snprintf(entry_image, sizeof(entry_image), "msb-it-hostile-entry:%s", hostile_run_id);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/Dockerfile", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "FROM %s\n"
		"ENTRYPOINT [\"/bin/sh\", \"-c\", \"printf 'root:x:0:0:root:/root:/bin/sh\\\\ntester:x:0:0::/tmp:/bin/sh"
		"\\\\n' > /etc/passwd; exec \\\"$@\\\"\", \"sh\"]\n", user_image);
	fclose(f);
	out = sh_out("timeout 120 docker build -q -t %s %s >/dev/null 2>&1 && echo built; rm -rf %s", entry_image,
		     dir, dir);
	ck_assert_msg(strcmp(out, "built") == 0, "cannot build %s", entry_image);
}

static void entry_on(const char *plane)
{
	struct msbd_proc p = { 0 }, q = { 0 };
	json_t *spec = hostile_spec();
	char sb[80];
	_cleanup_free_ char *passwd = NULL, *ids = NULL, *again = NULL;

	daemon_up(&p, plane, NULL);
	json_object_set_new(spec, "image", json_string(entry_image));
	acquire(&p, "entry", plane, spec, sb);
	ids = exec_out(&p, sb, "id -u; id -g");
	passwd = exec_out(&p, sb, "grep ^tester: /etc/passwd");
	ck_assert_msg(strstr(passwd, "tester:x:0:0:"), "the entrypoint's rewrite did not take: %s", passwd);
	ck_assert_msg(strcmp(ids, USER_UID "\n" USER_UID "\n") == 0, "%s: the exec runs as %s", plane, ids);
	/* A restarted daemon serves the rewritten guest the same way. */
	ck_assert_int_eq(msbd_stop(&p), 0);
	daemon_up(&q, plane, NULL);
	again = exec_out(&q, sb, "id -u; id -g");
	ck_assert_msg(strcmp(again, USER_UID "\n" USER_UID "\n") == 0, "%s, after a restart: the exec runs as %s",
		      plane, again);
	dispose(&q, "entry", plane);
	ck_assert_int_eq(msbd_stop(&q), 0);
}

START_TEST(test_identity_entrypoint)
{
	user_image_build();
	entry_image_build();
	entry_on("archive");
	entry_on("local");
	free(sh_out("timeout 60 docker rmi -f %s >/dev/null 2>&1", entry_image));
	user_image_remove();
}
END_TEST

/* ---- finding 14: pseudo filesystems as the working directory --------------------- */

START_TEST(test_exec_wd_pseudo)
{
	static const char *const wds[] = { "/proc/self/cwd", "/proc/self/fd/3", "/proc", "/sys/kernel",
					   "/dev/shm" };
	struct msbd_proc p = { 0 };
	char sb[80];

	daemon_up(&p, "archive", NULL);
	acquire(&p, "wd", "archive", hostile_spec(), sb);
	for (size_t i = 0; i < sizeof(wds) / sizeof(wds[0]); i++) {
		_cleanup_free_ char *type = NULL;
		int code = 0;
		json_t *r = call(p.sock, "sandbox.exec",
				 json_pack("{s:s, s:s, s:s, s:i}", "sandbox", sb, "command", "pwd", "working_directory",
					   wds[i], "timeout_seconds", 10),
				 &code, &type);

		ck_assert_msg(!r && code == ERR_CONFINEMENT, "%s: %d, want ConfinementError", wds[i], code);
		ck_assert_str_eq(type, "ConfinementError");
	}
	/* An ordinary directory runs. */
	{
		int code = 0;
		json_t *r = call(p.sock, "sandbox.exec",
				 json_pack("{s:s, s:s, s:s, s:i, s:b}", "sandbox", sb, "command", "pwd",
					   "working_directory", "/tmp", "timeout_seconds", 10, "text", 1),
				 &code, NULL);

		ck_assert_msg(r && jint(r, "exit_code") == 0, "pwd in /tmp: %d", code);
		ck_assert_str_eq(jstr(r, "stdout_text"), "/tmp\n");
		json_decref(r);
	}
	dispose(&p, "wd", "archive");
	ck_assert_int_eq(msbd_stop(&p), 0);
}
END_TEST

TCase *hostile_exec_tcase(void)
{
	TCase *tc = tcase_create("exec");

	tcase_set_timeout(tc, 300);
	tcase_add_unchecked_fixture(tc, NULL, user_image_teardown);
	tcase_add_test(tc, test_exec_kill_escapes_archive);
	tcase_add_test(tc, test_exec_kill_escapes_local);
	tcase_add_test(tc, test_exec_kill_hopper);
	tcase_add_test(tc, test_identity_drift);
	tcase_add_test(tc, test_identity_entrypoint);
	tcase_add_test(tc, test_exec_wd_pseudo);
	return tc;
}
