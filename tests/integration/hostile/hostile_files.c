/* hostile_files.c — see hostile.h. Findings 6, 8, 9, 10 and the file half
 * of 14, on both file planes where they apply:
 *   mounts      files.write over /etc/resolv.conf and files.remove of
 *               /etc/hosts refused (OSError, errno EBUSY, data.mount), the
 *               container's mountinfo still lists both; on the archive
 *               plane writes under /proc and /sys refused (EXDEV); a
 *               hard-linked file's stat says "file" on both planes
 *   kill -9     a daemon SIGKILLed mid-write: the final name keeps its old
 *               content whole; the next daemon removes the temporary the
 *               killed one left (local plane: the journal), never listed
 *   fd budget   concurrent reclaims of deep trees under a small
 *               files.removal_fd_budget all succeed, the daemon's
 *               descriptors stay within its idle count plus the budget */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "harness.h"
#include "hostile.h"

#define KILL_BYTES        (24u * 1024 * 1024)   /* the write a kill interrupts (32 MiB in base64) */
#define WAIT_MS           30000   /* hang guard */
#define RECLAIMS          24
#define TREE_DEPTH        48
#define TREE_FILES        1100                  /* at the bottom: a removal spans slices (1024 entries) */
#define FD_BUDGET         16                    /* four removals at once */
#define OLD_CONTENT       "old content, whole\n"

static char lock_set[160], journal_set[160], journal_dir[128], test_dir[96];

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The test's shared freeze lock and journal: a private dir under the run's
 * directory (main removes it whatever failed). */
static void dirs_once(void)
{
	struct msbd_proc holder = { 0 };

	if (test_dir[0])
		return;
	msbd_prepare(&holder);
	snprintf(test_dir, sizeof(test_dir), "%s", holder.dir);
	snprintf(journal_dir, sizeof(journal_dir), "%s/journal", test_dir);
	snprintf(lock_set, sizeof(lock_set), "freeze.lock_file=%s/freeze.lock", test_dir);
	snprintf(journal_set, sizeof(journal_set), "files.journal_dir=%s", journal_dir);
}

static void daemon_up(struct msbd_proc *d, const char *plane, const char *extra)
{
	char plane_set[64];
	const char *args[12];
	size_t n = 0;

	dirs_once();
	/* The integration lane names a plane for every daemon ($MSB_FILE_PLANE):
	 * these tests name their own (Check forks each test). */
	unsetenv("MSB_FILE_PLANE");
	snprintf(plane_set, sizeof(plane_set), "files.plane=%s", plane);
	args[n++] = "--set";
	args[n++] = lock_set;
	args[n++] = "--set";
	args[n++] = journal_set;
	args[n++] = "--set";
	args[n++] = "egress.proxy_binary=";
	args[n++] = "--set";
	args[n++] = plane_set;
	if (extra) {
		args[n++] = "--set";
		args[n++] = extra;
	}
	args[n] = NULL;
	msbd_start(d, args);
	json_decref(wait_engine_state(d->sock, "reachable", WAIT_MS));
	for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS; usleep(50000)) {
		json_t *r = call(d->sock, "sandbox.list", NULL, NULL, NULL);

		if (r) {
			json_decref(r);
			return;
		}
	}
	ck_abort_msg("the daemon never read the engine's sandboxes");
}

/* image: NULL for the run's own. */
static char *acquire_image(const struct msbd_proc *d, const char *scope, const char *want_plane, const char *image)
{
	json_t *key = json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "agent");
	json_t *spec = hostile_spec();
	int code = 0;
	char *type = NULL, *id;
	json_t *r;

	if (image)
		json_object_set_new(spec, "image", json_string(image));
	r = call(d->sock, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key, "spec", spec), &code, &type);

	ck_assert_msg(r, "acquire failed: %d %s", code, type ? type : "");
	free(type);
	id = strdup(jstr(r, "sandbox"));
	ck_assert_msg(jstr(r, "file_plane") && strcmp(jstr(r, "file_plane"), want_plane) == 0,
		      "the sandbox is served by the %s file plane; the test needs %s",
		      jstr(r, "file_plane") ? jstr(r, "file_plane") : "(none)", want_plane);
	json_decref(r);
	return id;
}

static char *acquire(const struct msbd_proc *d, const char *scope, const char *want_plane)
{
	return acquire_image(d, scope, want_plane, NULL);
}

static void dispose(const struct msbd_proc *d, const char *scope)
{
	json_t *key = json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "agent");

	json_decref(call(d->sock, "sandbox.dispose", json_pack("{s:o}", "key", key), NULL, NULL));
}

static char *guest_out(const char *id, const char *cmd)
{
	return sh_out("docker exec %s sh -c '%s' 2>&1", id, cmd);
}

/* A call expected to fail with OSError: data.errno is want_errno and, when
 * want_mount is set, data.mount names it. */
static void call_refused(const struct msbd_proc *d, const char *method, json_t *params, const char *want_errno,
			 const char *want_mount)
{
	int fd = raw_connect(d->sock);
	json_t *r, *err;
	char *text;

	ck_assert_int_ge(fd, 0);
	raw_request_send(fd, 7, method, params);
	r = raw_recv(fd, WAIT_MS);
	close(fd);
	ck_assert_msg(r, "%s: no reply", method);
	text = json_dumps(r, JSON_COMPACT);
	err = json_object_get(r, "error");
	ck_assert_msg(err, "%s succeeded: %s", method, text);
	ck_assert_msg(jstr(r, "error.data.type") && strcmp(jstr(r, "error.data.type"), "OSError") == 0 &&
		      jstr(r, "error.data.errno") && strcmp(jstr(r, "error.data.errno"), want_errno) == 0,
		      "%s: %s; expected OSError %s", method, text, want_errno);
	if (want_mount)
		ck_assert_msg(jstr(r, "error.data.mount") && strstr(jstr(r, "error.data.mount"), want_mount),
			      "%s: %s; expected data.mount %s", method, text, want_mount);
	free(text);
	json_decref(r);
}

static void dirs_remove(void)
{
	free(sh_out("rm -rf %s", test_dir));
}

/* ---- mounts, pseudo filesystems, hard links ------------------------------------- */

static void mounts_on(const char *plane)
{
	struct msbd_proc d = { 0 };
	char scope[64], *id, *out;
	json_t *r;

	snprintf(scope, sizeof(scope), "hf-mounts-%s", plane);
	daemon_up(&d, plane, NULL);
	id = acquire(&d, scope, plane);
	/* Over a bind-mounted file, and a removal of one: refused, mounts kept. */
	call_refused(&d, "files.write",
		     json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory", "/", "path",
			       "etc/resolv.conf", "content_text", "nameserver 192.0.2.1\n"), "EBUSY", "resolv.conf");
	call_refused(&d, "files.remove",
		     json_pack("{s:s, s:s, s:s}", "sandbox", id, "working_directory", "/", "path", "etc/hosts"),
		     "EBUSY", "hosts");
	/* docker-init: the engine's read-only bind (sandbox.init, on by default). */
	call_refused(&d, "files.write",
		     json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory", "/", "path",
			       "sbin/docker-init", "content_text", "#!/bin/sh\n"), "EBUSY", "docker-init");
	call_refused(&d, "files.remove",
		     json_pack("{s:s, s:s, s:s}", "sandbox", id, "working_directory", "/", "path", "sbin/docker-init"),
		     "EBUSY", "docker-init");
	out = guest_out(id, "grep -c -E \" /(etc/resolv.conf|etc/hosts|sbin/docker-init) \" /proc/self/mountinfo");
	ck_assert_msg(atoi(out) == 3, "the container's mounts changed: %s", out);
	free(out);
	out = guest_out(id, "grep -c 192.0.2.1 /etc/resolv.conf");
	ck_assert_int_eq(atoi(out), 0);
	free(out);
	/* A file with two names: "file" on both planes (the kind of its inode). */
	free(guest_out(id, "cd /maf-sandbox/work && echo one > a && ln a b"));
	r = call(d.sock, "files.stat", json_pack("{s:s, s:s}", "sandbox", id, "path", "b"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(jstr(r, "kind"), "file");
	json_decref(r);
	if (strcmp(plane, "archive") == 0) {
		/* Beneath the runtime's mounts the archive API would write hidden: refused. */
		call_refused(&d, "files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory",
							  "/", "path", "proc/hidden", "content_text", "x"), "EXDEV", "/proc");
		call_refused(&d, "files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory",
							  "/", "path", "sys/hidden", "content_text", "x"), "EXDEV", "/sys");
		call_refused(&d, "files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory",
							  "/", "path", "dev/shm/hidden", "content_text", "x"), "EXDEV", "/dev");
	} else {
		/* The local plane never writes on a pseudo filesystem. */
		call_refused(&d, "files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory",
							  "/", "path", "proc/hidden", "content_text", "x"), "EXDEV", NULL);
	}
	dispose(&d, scope);
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
}

START_TEST(mounts_never_replaced_or_removed)
{
	mounts_on("local");
	mounts_on("archive");
	dirs_remove();
}
END_TEST

/* ---- kill -9 mid-write ----------------------------------------------------------- */

static char *big_b64(char fill)
{
	char *content = malloc(KILL_BYTES), *b64;

	ck_assert_ptr_nonnull(content);
	memset(content, fill, KILL_BYTES);
	b64 = harness_b64_encode(content, KILL_BYTES);
	free(content);
	return b64;
}

/* Whether a write's temporary is in the container's work dir (seen from the host). */
static bool temp_present(pid_t cpid)
{
	char path[96];
	struct dirent *de;
	bool found = false;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/root/maf-sandbox/work", (int)cpid);
	dir = opendir(path);
	if (!dir)
		return false;
	while ((de = readdir(dir)))
		found = found || strncmp(de->d_name, ".maf-sandbox-", 13) == 0;
	closedir(dir);
	return found;
}

/* Stops pid and waits (hang guard: WAIT_MS) until the kernel says it is
 * stopped ('T' in /proc/PID/stat). */
static void stop_and_wait(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS;) {   /* hang guard */
		char stat[512] = "", *end;
		FILE *f = fopen(path, "re");

		if (f) {
			if (!fgets(stat, sizeof(stat), f))
				stat[0] = '\0';
			fclose(f);
		}
		end = strrchr(stat, ')');
		if (end && end[1] == ' ' && (end[2] == 'T' || end[2] == 't'))
			return;
	}
	ck_abort_msg("pid %d never stopped", (int)pid);
}

/* How many times the write is sent again when it ended between two looks. */
#define KILL_ATTEMPTS 10

static void kill_on(const char *plane)
{
	struct msbd_proc d1 = { 0 }, d2 = { 0 };
	char scope[64], *id, *b64, *frame, *out;
	json_t *req, *r;
	pid_t cpid;
	bool seen = false;
	int fd;

	snprintf(scope, sizeof(scope), "hf-kill-%s", plane);
	daemon_up(&d1, plane, NULL);
	id = acquire(&d1, scope, plane);
	r = call(d1.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", "big.bin",
						   "content_text", OLD_CONTENT), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	for (int i = 0; i < 50 && (cpid = container_pid(id)) <= 0; i++)
		usleep(100000);
	if (cpid <= 0)
		free(sh_out("docker inspect %s >&2", id));
	ck_assert_msg(cpid > 0, "no pid for the sandbox's init");
	b64 = big_b64('n');
	req = json_pack("{s:s, s:i, s:s, s:{s:s, s:s, s:s}}", "jsonrpc", "2.0", "id", 1, "method", "files.write",
			"params", "sandbox", id, "path", "big.bin", "content_b64", b64);
	frame = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	free(b64);
	fd = raw_connect(d1.sock);
	ck_assert_int_ge(fd, 0);
	/* The daemon runs in short steps, stopped between them: a temporary
	 * seen while it is stopped is a write under way, whatever its speed
	 * (the optimized build's local plane writes 24 MiB within one step of
	 * a free-running poll). If the write ended between two looks (its
	 * reply came), the old content goes back and it is sent again. */
	for (int attempt = 0; !seen && attempt < KILL_ATTEMPTS; attempt++) {
		if (attempt > 0) {
			r = call(d1.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", "big.bin",
								   "content_text", OLD_CONTENT), NULL, NULL);
			ck_assert_ptr_nonnull(r);
			json_decref(r);
		}
		raw_send(fd, frame, strlen(frame));
		raw_send(fd, "\n", 1);
		for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS;) {   /* hang guard */
			struct pollfd pfd = { .fd = fd, .events = POLLIN };

			stop_and_wait(d1.pid);
			if ((seen = temp_present(cpid)))
				break;          /* stays stopped: killed with the write under way */
			if (poll(&pfd, 1, 0) > 0) {
				ck_assert_int_eq(kill(d1.pid, SIGCONT), 0);
				json_decref(raw_recv(fd, WAIT_MS));   /* hang guard */
				break;
			}
			ck_assert_int_eq(kill(d1.pid, SIGCONT), 0);
			usleep(500);
		}
	}
	free(frame);
	ck_assert_msg(seen, "no temporary appeared in %d writes: the write was never caught under way", KILL_ATTEMPTS);
	msbd_signal(&d1, SIGKILL);
	ck_assert_int_eq(msbd_wait(&d1, 20000), 128 + SIGKILL);
	close(fd);

	/* The next daemon: thaws (archive), removes the temporary. */
	daemon_up(&d2, plane, NULL);
	for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS && temp_present(cpid);)
		usleep(50000);
	ck_assert_msg(!temp_present(cpid), "the killed daemon's temporary is still there");
	out = guest_out(id, "cat /maf-sandbox/work/big.bin");
	ck_assert_str_eq(out, "old content, whole");   /* sh_out drops the newline */
	free(out);
	if (strcmp(plane, "local") == 0) {
		char *n = sh_out("grep -c 'the temporary of a write a killed daemon left' %s", d2.log);
		int code = 0;
		char *type = NULL;

		r = call(d2.sock, "files.list", json_pack("{s:s, s:s}", "sandbox", id, "path", "."), &code, &type);
		ck_assert_msg(atoi(n) == 1, "the next daemon did not say it removed the temporary");
		free(n);
		ck_assert_msg(r, "files.list failed: %d %s", code, type ? type : "");
		for (size_t i = 0; i < json_array_size(jget(r, "entries")); i++)
			ck_assert_ptr_null(strstr(json_string_value(json_object_get(
							  json_array_get(jget(r, "entries"), i), "path")), ".maf-sandbox-"));
		json_decref(r);
	}
	dispose(&d2, scope);
	free(id);
	ck_assert_int_eq(msbd_stop(&d2), 0);
	msbd_stop(&d1);
	dirs_remove();
}

START_TEST(kill9_mid_write_local)
{
	kill_on("local");
}
END_TEST

START_TEST(kill9_mid_write_archive)
{
	kill_on("archive");
}
END_TEST

/* ---- a non-root guest's archive write: its temporary removed ----------------------- */

/* Journal entries left in the test's journal dir. */
static int journal_entries(void)
{
	struct dirent *de;
	int n = 0;
	DIR *dir = opendir(journal_dir);

	if (!dir)
		return 0;
	while ((de = readdir(dir)))
		n += strncmp(de->d_name, ".maf-sandbox-", 13) == 0;
	closedir(dir);
	return n;
}

START_TEST(archive_write_as_nonroot_cleans_up)
{
	struct msbd_proc d = { 0 };
	char image[160], *id, *out;
	json_t *r;
	int code = 0;
	char *type = NULL;

	/* The run's image with USER 1000:1000: a guest that cannot write /etc. */
	snprintf(image, sizeof(image), "msb-it-hostile-u1000:%s", hostile_run_id);
	out = sh_out("cid=$(docker create %s /bin/true) && docker commit --change 'USER 1000:1000' $cid %s >/dev/null "
		     "&& docker rm $cid >/dev/null && echo made", hostile_image, image);
	ck_assert_msg(strstr(out, "made"), "the USER 1000 image was not made: %s", out);
	free(out);
	daemon_up(&d, "archive", NULL);
	id = acquire_image(&d, "hf-nonroot", "archive", image);
	r = call(d.sock, "files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", id, "working_directory", "/",
						  "path", "etc/x.conf", "content_text", "x=1\n"), &code, &type);
	ck_assert_msg(r, "files.write failed: %d %s", code, type ? type : "");
	json_decref(r);
	/* No temporary in /etc, the file has one name, no journal entry left. */
	out = guest_out(id, "ls -a /etc | grep -c maf-sandbox");
	ck_assert_msg(atoi(out) == 0, "the write's temporary is still in /etc (%s)", out);
	free(out);
	out = guest_out(id, "stat -c %h /etc/x.conf");
	ck_assert_msg(atoi(out) == 1, "/etc/x.conf has %s names", out);
	free(out);
	/* And in a directory the guest owns (its work dir, and one the write
	 * makes there): root in the sandbox has no CAP_DAC_OVERRIDE, so the
	 * guest's own rm removes the temporary there. */
	r = call(d.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", "sub/y.txt",
						  "content_text", "y=1\n"), &code, &type);
	ck_assert_msg(r, "files.write failed: %d %s", code, type ? type : "");
	json_decref(r);
	out = guest_out(id, "ls -a /maf-sandbox/work/sub | grep -c maf-sandbox; stat -c %h/%u /maf-sandbox/work/sub/y.txt");
	ck_assert_msg(strcmp(out, "0\n1/1000\n") == 0 || strcmp(out, "0\n1/1000") == 0,
		      "the write's temporary in the guest's directory, or the file's names/owner: %s", out);
	free(out);
	ck_assert_int_eq(journal_entries(), 0);
	dispose(&d, "hf-nonroot");
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
	free(sh_out("docker rmi -f %s >/dev/null 2>&1", image));
	dirs_remove();
}
END_TEST

/* ---- the removal fd budget -------------------------------------------------------- */

START_TEST(reclaims_share_the_fd_budget)
{
	struct msbd_proc d = { 0 };
	char budget_set[64], *id, *out;
	struct fd_census base, now;
	int fd, replies = 0, peak = 0;

	snprintf(budget_set, sizeof(budget_set), "files.removal_fd_budget=%d", FD_BUDGET);
	daemon_up(&d, "local", budget_set);
	id = acquire(&d, "hf-fds", "local");
	/* Each tree: a chain TREE_DEPTH deep, TREE_FILES files at its bottom, so
	 * its removal yields to the loop deep inside it, and they interleave. */
	out = guest_out(id, "cd /maf-sandbox/work && p=$(for i in $(seq 48); do printf d/; done) && "
			    "for t in $(seq 24); do mkdir -p t$t/$p && (cd t$t/$p && seq 1100 | xargs touch); done && "
			    "echo made");
	ck_assert_msg(strstr(out, "made"), "the trees were not made: %s", out);
	free(out);
	ck_assert(fd_census_take(d.pid, d.sock, &base));
	fd = raw_connect(d.sock);
	ck_assert_int_ge(fd, 0);
	for (int t = 1; t <= RECLAIMS; t++) {
		char dir[16];

		snprintf(dir, sizeof(dir), "t%d", t);
		raw_request_send(fd, t, "files.reclaim", json_pack("{s:s, s:s}", "sandbox", id, "directory", dir));
	}
	for (long t0 = now_ms(); replies < RECLAIMS;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		json_t *r;

		/* The daemon's descriptors, sampled while the removals run. */
		if (fd_census_take(d.pid, d.sock, &now) && now.files - base.files > peak)
			peak = now.files - base.files;
		if (poll(&pfd, 1, 2) <= 0) {
			ck_assert_msg(now_ms() - t0 < WAIT_MS, "a reclaim never answered");
			continue;
		}
		r = raw_recv(fd, WAIT_MS);
		ck_assert_msg(r, "the daemon closed the connection");
		ck_assert_msg(json_is_null(json_object_get(r, "result")) && json_object_get(r, "result"),
			      "a reclaim failed: %s", json_dumps(r, JSON_COMPACT));
		json_decref(r);
		replies++;
	}
	close(fd);
	ck_assert_msg(peak <= FD_BUDGET, "the daemon held %d descriptors over its idle count (budget %d)", peak,
		      FD_BUDGET);
	out = guest_out(id, "ls /maf-sandbox/work | grep -c ^t");
	ck_assert_int_eq(atoi(out), 0);
	free(out);
	dispose(&d, "hf-fds");
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
	dirs_remove();
}
END_TEST

/* ---- daemons sharing a journal ------------------------------------------------------ */

#define NO_SUCH_ID "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0"
#define OTHER_TMP  ".maf-sandbox-00000000000000a1.tmp"
#define GONE_TMP   ".maf-sandbox-00000000000000a2.tmp"

static void journal_put(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", journal_dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static bool journal_has(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", journal_dir, name);
	return access(path, F_OK) == 0;
}

/* Another engine's entry is never this daemon's to drop; an entry of this
 * engine's is dropped on its inspect's 404 (not for missing from the registry). */
START_TEST(journal_shared_between_engines)
{
	struct msbd_proc d = { 0 };

	dirs_once();
	ck_assert(mkdir(journal_dir, 0700) == 0 || errno == EEXIST);
	journal_put(OTHER_TMP, NO_SUCH_ID "\n/maf-sandbox/work\n" OTHER_TMP "\n"
		    "0000000000000000000000000000000000000000000000000000000000000000\n");
	journal_put(GONE_TMP, NO_SUCH_ID "\n/maf-sandbox/work\n" GONE_TMP "\n");
	daemon_up(&d, "archive", NULL);
	for (long t0 = now_ms(); journal_has(GONE_TMP) && now_ms() - t0 < WAIT_MS;)
		usleep(50000);
	ck_assert_msg(!journal_has(GONE_TMP), "an entry of a container this engine says is gone was kept");
	ck_assert_msg(journal_has(OTHER_TMP), "another engine's journal entry was dropped");
	ck_assert_int_eq(msbd_stop(&d), 0);
	dirs_remove();
}
END_TEST

/* A disposed sandbox's journal entries go with it. */
START_TEST(journal_entries_dropped_on_dispose)
{
	struct msbd_proc d = { 0 };
	char text[256], *id, *full;

	daemon_up(&d, "archive", NULL);
	id = acquire(&d, "hf-forget", "archive");
	full = sh_out("docker inspect -f '{{.Id}}' %s", id);
	ck_assert_int_eq(strlen(full), 64);
	/* An entry a failed cleanup would leave (written after this daemon's replay). */
	snprintf(text, sizeof(text), "%s\n/maf-sandbox/work\n%s\n", full, GONE_TMP);
	journal_put(GONE_TMP, text);
	dispose(&d, "hf-forget");
	ck_assert_msg(!journal_has(GONE_TMP), "the disposed sandbox's journal entry stayed");
	free(full);
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
	dirs_remove();
}
END_TEST

/* ---- a long removal yields to other clients --------------------------------------- */

#define BIG_DIRS 20000                  /* a removal of ~20 slices */

/* Entries of the sandbox's work/big seen from the host; -1 once it is gone. */
static int big_entries(pid_t cpid)
{
	char path[96];
	struct dirent *de;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/root/maf-sandbox/work/big", (int)cpid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

START_TEST(status_answered_during_reclaim)
{
	struct msbd_proc d = { 0 };
	char *id, *out;
	int fr, fs, n = BIG_DIRS;
	struct pollfd pfd;
	json_t *r;
	pid_t cpid;

	daemon_up(&d, "local", NULL);
	id = acquire(&d, "hf-yield", "local");
	out = guest_out(id, "mkdir /maf-sandbox/work/big && cd /maf-sandbox/work/big && seq 20000 | xargs mkdir && "
			    "echo made");
	ck_assert_msg(strstr(out, "made"), "the tree was not made: %s", out);
	free(out);
	cpid = container_pid(id);
	ck_assert_int_gt(cpid, 0);
	ck_assert_int_eq(big_entries(cpid), BIG_DIRS);
	fr = raw_connect(d.sock);
	fs = raw_connect(d.sock);
	ck_assert(fr >= 0 && fs >= 0);
	raw_request_send(fr, 1, "files.reclaim", json_pack("{s:s, s:s}", "sandbox", id, "directory", "big"));
	/* The removal under way (some entries gone, not all), then a status. */
	for (long t0 = now_ms(); n == BIG_DIRS && now_ms() - t0 < WAIT_MS;)
		n = big_entries(cpid);
	ck_assert_msg(n >= 0 && n < BIG_DIRS, "the reclaim was never seen under way (%d entries)", n);
	raw_request_send(fs, 2, "daemon.status", json_object());
	r = raw_recv(fs, WAIT_MS);
	ck_assert_msg(r && json_object_get(r, "result"), "daemon.status was not answered");
	json_decref(r);
	/* Answered while the reclaim still runs: its call has not returned, its tree is still there. */
	pfd = (struct pollfd){ .fd = fr, .events = POLLIN };
	ck_assert_msg(poll(&pfd, 1, 0) == 0, "daemon.status was answered only after the reclaim returned");
	n = big_entries(cpid);
	ck_assert_msg(n >= 0, "daemon.status was answered only once the tree was gone");
	r = raw_recv(fr, 4 * WAIT_MS);   /* hang guard */
	if (!r || !json_object_get(r, "result")) {
		char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;

		msbd_dump_log(&d);
		ck_abort_msg("the reclaim failed: %s", text ? text : "no reply (hang guard)");
	}
	json_decref(r);
	ck_assert_int_eq(big_entries(cpid), -1);
	close(fr);
	close(fs);
	dispose(&d, "hf-yield");
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
	dirs_remove();
}
END_TEST

TCase *hostile_files_tcase(void)
{
	TCase *tc = tcase_create("files");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, mounts_never_replaced_or_removed);
	tcase_add_test(tc, kill9_mid_write_local);
	tcase_add_test(tc, kill9_mid_write_archive);
	tcase_add_test(tc, reclaims_share_the_fd_budget);
	tcase_add_test(tc, archive_write_as_nonroot_cleans_up);
	tcase_add_test(tc, status_answered_during_reclaim);
	tcase_add_test(tc, journal_shared_between_engines);
	tcase_add_test(tc, journal_entries_dropped_on_dispose);
	return tc;
}
