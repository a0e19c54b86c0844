/* check_faults.c — faults against the real engine: a daemon SIGKILLed in
 * the middle of a write with its guest frozen, dockerd restarted under a
 * running daemon, clients that leave in the middle of a call, 64 clients
 * at once, 500 connections trickling one byte a second, and garbage on the
 * socket.
 *
 * Each scenario runs its own daemon on its own socket, makes its sandboxes
 * under its own scope with this run's label (msb-it-run=<run>), and checks
 * that nothing is lost (calls answered, writes readable, the same
 * containers served again) and nothing is left behind: containers beyond
 * the scenario's own, paused guests, calls in flight, client connections,
 * and the daemon's descriptors (/proc/PID/fd back to its idle census;
 * engine keep-alive connections may stay, within ENGINE_CONN_SLACK). Under
 * the sanitizers a daemon's own leaks fail its stop (exit status 0 is
 * asserted).
 *
 * Every daemon of this run shares one freeze lock file in the run
 * directory (freeze.lock_file), so the SIGKILLed daemon and the one started
 * after it agree on the host lock, as two daemons of one host do.
 *
 * The dockerd restart stops the engine for everyone on this machine: the
 * integration suites run one at a time (is_parallel: false), and the engine
 * is always started again with the argv it had — by the test before any
 * assertion, and by main() if the test died. main() removes every
 * container of this run and its test image, whatever failed. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"
/* The daemon's own host lock module (linked in: tests/meson.build), to see
 * the lock byte exactly as another maf-sandboxd would. */
#include "../../domain/hostlock.h"

#define RUN_LABEL "msb-it-run"
#define ENGINE_WAIT_MS 30000      /* hang guard */
#define SYNC_WAIT_MS 30000        /* hang guard */
#define RECV_MS 30000             /* hang guard */
#define CALL_TIMEOUT_MS 120000    /* hang guard */
/* Engine keep-alive connections the daemon may keep past a burst: its
 * cache holds at most ENGINE_HTTP_MAX_IDLE_CONNECTIONS (engine/http.c,
 * 8) idle ones, and the idle census already counts those it held. */
#define ENGINE_CONN_SLACK 8
/* How long the daemon gets to close what a scenario opened. */
#define SETTLE_MS 15000           /* hang guard */
#define THAW_WAIT_MS 15000        /* hang guard */
#define CLEANUP_TIMEOUT_S 120

/* SIGKILL mid-write: the content (base64 in the frame: 4/3 of it). */
#define KILL_WRITE_BYTES (32u * 1024 * 1024)
#define KILL_PAUSE_WAIT_MS 60000  /* hang guard */
#define KILL_ATTEMPTS 5           /* kills of a write that landed first before the test fails */

/* dockerd restart. */
#define OUTAGE_ENGINE_TIMEOUT_MS 10000    /* the daemon's engine.timeout_ms */
#define DOCKERD_STOP_WAIT_MS 90000    /* hang guard */
#define DOCKERD_START_WAIT_MS 90000   /* hang guard */
#define DOCKERD_LOG "/var/log/dockerd.log"
#define DOCKERD_PIDFILE "/var/run/docker.pid"
#define DOCKERD_CMDLINE_MAX 8192
#define DOCKERD_ARGV_MAX 128
#define DOCKERD_ENVIRON_MAX 65536
#define DOCKERD_ENV_MAX 512
#define CONCURRENT_ACQUIRES 4

/* Leaving mid-read: a file whose copy lasts long enough to leave in it. */
#define LEAVE_READ_MIB 48

/* Mixed load. */
#define MIX_CLIENTS 64
#define MIX_SECONDS 60
/* Sandboxes the clients share, each getting execs and file calls from 16
 * clients. Under ASan exec starts then take seconds to be confirmed: a
 * freeze that went on into an unconfirmed start would freeze the runtime's
 * init joining the cgroup and hang the engine on the container (exit 126
 * or TimeoutError here, a guest left paused); execrun keeps its mark. */
#define MIX_SANDBOXES 4
#define MIX_CALL_TIMEOUT_MS 90000     /* hang guard */

/* Slow connections. */
#define SLOW_CONNS 500
/* hang guard: the trickle sends a byte a second until the test stops it,
 * at most this long (under the frames' length, 51 bytes at least, and the
 * daemon's limits.frame_timeout_ms, set to SLOW_FRAME_TIMEOUT_MS). */
#define SLOW_TRICKLE_S 40
#define SLOW_FRAME_TIMEOUT_MS 120000    /* hang guard */
#define SLOW_PROBES 20
#define SLOW_PROBE_GAP_MS 250
#define SLOW_FD_HEADROOM 100

/* Garbage. */
#define GARBAGE_RANDOM_BYTES (1024 * 1024)
#define GARBAGE_RANDOM_LINES 1000
#define GARBAGE_HUGE_LINE (16 * 1024 * 1024)
#define GARBAGE_NEST_DEPTH 100000
#define GARBAGE_NEST_OK 60                 /* under the frame's nesting limit (64, MSB_JSON_MAX_DEPTH) */
#define GARBAGE_NEST_DEEP 1000             /* over it, under jansson's own (2048) */
#define GARBAGE_NUMBER_DIGITS (1024 * 1024)
#define GARBAGE_MANY_IDS 100000
#define GARBAGE_SOME_MEMBERS 30000          /* 60,001 values: under the frame's 65,536 */
#define GARBAGE_PIPELINED 5000
#define GARBAGE_BLANK_LINES (1024 * 1024)
#define GARBAGE_HANGUP_BYTES (32 * 1024 * 1024)
#define ECHO_MAX 128                       /* client text echoed in an error (PROTOCOL.md) */

static char run_id[32];
static char image[64];
static char lock_set[200];      /* "freeze.lock_file=<run dir>/freeze.lock" */
static char lock_path[160];

/* ---- helpers ---------------------------------------------------------------- */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The file plane this run's daemons serve (MSB_FILE_PLANE; the suite runs
 * on both): the archive plane freezes a guest for a file call, the local
 * plane never does, and holds a pidfd (its pin) per sandbox it serves. */
static bool plane_local(void)
{
	const char *p = harness_file_plane();

	return p && strcmp(p, "local") == 0;
}

static const char *scope_of(const char *test)
{
	static char s[96];

	snprintf(s, sizeof(s), "%s-%s", run_id, test);
	return s;
}

static json_t *spec_default(void)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "kind", "k", "image", image, "labels", RUN_LABEL, run_id);
}

static json_t *key_for(const char *scope, const char *thread)
{
	return json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", thread, "agent_dir", "agent");
}

static json_t *acquire_params(const char *scope, const char *thread)
{
	return json_pack("{s:o, s:o}", "key", key_for(scope, thread), "spec", spec_default());
}

/* sandbox.acquire through the C client; the result (asserted). */
static json_t *acquire(const char *sock, const char *scope, const char *thread)
{
	char *type = NULL;
	int code = 0;
	json_t *r = call(sock, "sandbox.acquire", acquire_params(scope, thread), &code, &type);

	ck_assert_msg(r, "acquire %s/%s failed: %d %s", scope, thread, code, type ? type : "");
	free(type);
	return r;
}

static int containers_of(const char *scope, const char *extra)
{
	char filter[256];

	snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s %s", scope, extra ? extra : "");
	return engine_count_containers("maf-sandbox.label." RUN_LABEL, run_id, filter);
}

static int paused_of_run(void)
{
	return engine_count_containers("maf-sandbox.label." RUN_LABEL, run_id, "--filter status=paused");
}

static bool engine_paused(const char *id)
{
	char path[128], *body;
	json_t *j;
	bool paused;

	snprintf(path, sizeof(path), "/containers/%s/json", id);
	body = engine_get(path, NULL, NULL);
	j = json_loads(body, 0, NULL);
	paused = json_is_true(jget(j, "State.Paused"));
	json_decref(j);
	free(body);
	return paused;
}

static bool wait_unpaused(const char *id, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;

	while (engine_paused(id)) {
		if (now_ms() > deadline)
			return false;
		sleep_ms(20);
	}
	return true;
}

static char *guest_out(const char *id, const char *cmd)
{
	return sh_out("docker exec %s sh -c '%s' 2>&1", id, cmd);
}

static bool log_has(const struct msbd_proc *d, const char *text)
{
	char *out = sh_out("grep -cF '%s' %s", text, d->log);
	bool found = atoi(out) > 0;

	free(out);
	return found;
}

/* Starts a daemon of this run (the shared lock file, no egress proxy, plus
 * extra) and waits until the engine is reachable and the registry read. */
static void daemon_up(struct msbd_proc *d, const char *const *extra)
{
	const char *args[40];
	size_t n = 0;
	long deadline;

	args[n++] = "--set";
	args[n++] = lock_set;
	args[n++] = "--set";
	args[n++] = "egress.proxy_binary=";
	for (; extra && *extra && n < 38; extra++)
		args[n++] = *extra;
	args[n] = NULL;
	msbd_start(d, args);
	{
		json_t *st = wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS);

		/* The plane the run asked for (a run meant for one plane never passes on the other). */
		if (harness_file_plane())
			ck_assert_msg(jstr(st, "file_plane") && strcmp(jstr(st, "file_plane"), harness_file_plane()) == 0,
				      "the daemon serves the %s plane, the run asked for %s", jstr(st, "file_plane"),
				      harness_file_plane());
		json_decref(st);
	}
	deadline = now_ms() + SYNC_WAIT_MS;
	for (;;) {
		json_t *r = call(d->sock, "sandbox.list", NULL, NULL, NULL);

		if (r) {
			json_decref(r);
			return;
		}
		if (now_ms() > deadline) {
			msbd_dump_log(d);
			ck_abort_msg("the registry never synchronised");
		}
		sleep_ms(50);
	}
}

/* ---- the daemon's descriptors ------------------------------------------------ */

/* How many pidfds pid holds: on the local plane, one per sandbox it has
 * pinned (the pin lives as long as the sandbox is known; a kill's pidfds
 * are closed within its turn). */
static int pidfds_of(pid_t pid)
{
	char *out = sh_out("ls -l /proc/%d/fd 2>/dev/null | grep -c 'anon_inode:\\[pidfd\\]'", (int)pid);
	int n = atoi(out);

	free(out);
	return n;
}

/* The pidfds of the idle census (census_idle). */
static int idle_pidfds;

/* The idle census, taken when the daemon is seen idle: no call in flight
 * (daemon.status, orphans included: assert_idle), then no client connected
 * (only the listener on the socket: the status call's connection seen
 * closed). The files counted leave out the pins (pidfds; assert_fds_back
 * checks them apart). */
static void assert_idle(const struct msbd_proc *d, const char *what);
static struct fd_census census_idle(const struct msbd_proc *d)
{
	struct fd_census a;
	long deadline = now_ms() + SETTLE_MS;     /* hang guard */

	assert_idle(d, "the idle census");
	for (;;) {
		ck_assert_msg(fd_census_take(d->pid, d->sock, &a), "the daemon is gone");
		idle_pidfds = pidfds_of(d->pid);
		if (a.on_sock == 1)
			return a;
		/* hang guard */
		ck_assert_msg(now_ms() < deadline, "the daemon's client connections never closed (%d on its socket)",
			      a.on_sock);
		sleep_ms(50);
	}
}

/* The running containers of a test's scope (none without one): on the
 * local plane the daemon may hold a pin (a pidfd) of each. */
static int running_of_scope(const char *scope)
{
	return scope ? containers_of(scope, "--filter status=running") : 0;
}

/* Back to the idle census: the same files but the pins, which the archive
 * plane never holds and the local plane holds at most one of per running
 * sandbox (a pin outliving its sandbox, or a kill's pidfd left open, fails). */
static bool census_back(const struct fd_census *now, int now_pidfds, const struct fd_census *base,
			const char *scope)
{
	int pins = now_pidfds - idle_pidfds;

	return now->files - now_pidfds == base->files - idle_pidfds && now->on_sock == base->on_sock &&
	       now->other_sock <= base->other_sock + ENGINE_CONN_SLACK &&
	       /* Fewer pidfds than idle is no leak: a pin the idle census saw goes
	        * with its container (a dockerd restart stops them all). */
	       (plane_local() ? pins <= running_of_scope(scope) : pins == 0);
}

/* Waits until the daemon holds what it held idle: the same files, no
 * client connection, engine connections within the slack. */
static void assert_fds_back(const struct msbd_proc *d, const struct fd_census *base, const char *scope,
			    const char *what)
{
	long deadline = now_ms() + SETTLE_MS;     /* hang guard */
	struct fd_census now;
	int pidfds;

	for (;;) {
		ck_assert_msg(fd_census_take(d->pid, d->sock, &now), "the daemon is gone");
		pidfds = pidfds_of(d->pid);
		if (census_back(&now, pidfds, base, scope))
			break;
		if (now_ms() > deadline) {
			char *ls = sh_out("ls -l /proc/%d/fd 2>&1 | tail -n +2 | awk '{print $NF}' | sort | uniq -c",
					  (int)d->pid);

			msbd_dump_log(d);
			ck_abort_msg("%s: the daemon's descriptors did not come back: files %d (idle %d), pidfds %d (idle "
				     "%d, %s plane, %d of its scope's sandboxes running), client sockets %d (idle %d), other sockets %d "
				     "(idle %d + %d)\n%s", what, now.files, base->files, pidfds, idle_pidfds,
				     plane_local() ? "local" : "archive", running_of_scope(scope), now.on_sock, base->on_sock,
				     now.other_sock, base->other_sock, ENGINE_CONN_SLACK, ls);
		}
		sleep_ms(100);
	}
	fprintf(stderr, "%s: descriptors back: files %d (pidfds %d), client sockets %d, engine sockets %d (idle %d)\n",
		what, now.files, pidfds, now.on_sock, now.other_sock, base->other_sock);
}

/* The calls in flight by uid (daemon.status's connections.by_uid[].in_flight):
 * unlike requests.in_flight, these count a closed connection's calls still
 * running (orphans) until they finish. -1 when the shape is not that. */
static long long by_uid_in_flight(json_t *st)
{
	json_t *by_uid = jget(st, "connections.by_uid"), *u;
	long long sum = 0;
	size_t i;

	if (!json_is_array(by_uid))
		return -1;
	json_array_foreach(by_uid, i, u) {
		json_t *n = json_object_get(u, "in_flight");

		if (!json_is_integer(n))
			return -1;
		sum += json_integer_value(n);
	}
	return sum;
}

/* Nothing in flight but this status call (a closed connection's calls
 * still running included), no connection but its own. */
static void assert_idle(const struct msbd_proc *d, const char *what)
{
	long deadline = now_ms() + SETTLE_MS;     /* hang guard */
	json_t *st = NULL;

	for (;;) {
		json_decref(st);
		st = call(d->sock, "daemon.status", NULL, NULL, NULL);
		ck_assert_msg(st, "%s: daemon.status failed", what);
		ck_assert_msg(by_uid_in_flight(st) >= 0, "%s: daemon.status has no connections.by_uid[].in_flight", what);
		if (jint(st, "requests.in_flight") == 1 && jint(st, "connections.current") == 1 &&
		    by_uid_in_flight(st) == 1)
			break;
		if (now_ms() > deadline)
			ck_abort_msg("%s: the daemon is not idle: %lld calls in flight (%lld by uid, orphans "
				     "included), %lld connections", what, (long long)jint(st, "requests.in_flight"),
				     by_uid_in_flight(st), (long long)jint(st, "connections.current"));
		sleep_ms(100);
	}
	json_decref(st);
}

/* The end of every scenario: idle, nothing paused, descriptors back,
 * the daemon stops cleanly (sanitizers: no leak, no error). */
static void assert_clean_stop(struct msbd_proc *d, const struct fd_census *base, const char *scope,
			      const char *what)
{
	int rc;

	assert_idle(d, what);
	ck_assert_msg(paused_of_run() == 0, "%s: a guest of this run is left paused", what);
	assert_fds_back(d, base, scope, what);
	ck_assert_msg(!log_has(d, "AddressSanitizer") && !log_has(d, "runtime error"),
		      "%s: the sanitizers reported an error", what);
	rc = msbd_stop(d);
	ck_assert_msg(rc == 0, "%s: the daemon's stop exited %d", what, rc);
}

/* ---- a buffered reader of reply frames ----------------------------------------- */

struct reader {
	int fd;
	char *buf;
	size_t len, cap;
};

static void reader_init(struct reader *r, int fd)
{
	*r = (struct reader){ .fd = fd, .cap = 65536 };
	r->buf = malloc(r->cap);
	ck_assert_ptr_nonnull(r->buf);
}

static void reader_free(struct reader *r)
{
	free(r->buf);
	r->buf = NULL;
}

/* The next frame, parsed; NULL on EOF or timeout. *ret_eof tells which. */
static json_t *reader_next(struct reader *r, int timeout_ms, bool *ret_eof)
{
	long deadline = now_ms() + timeout_ms;

	if (ret_eof)
		*ret_eof = false;
	for (;;) {
		char *lf = memchr(r->buf, '\n', r->len);
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		long left;
		ssize_t n;

		if (lf) {
			size_t flen = (size_t)(lf - r->buf);
			json_t *j = json_loadb(r->buf, flen, 0, NULL);

			ck_assert_msg(j, "the daemon sent a frame that is not JSON: %.200s", r->buf);
			memmove(r->buf, lf + 1, r->len - flen - 1);
			r->len -= flen + 1;
			return j;
		}
		if (r->len == r->cap) {
			r->buf = realloc(r->buf, r->cap *= 2);
			ck_assert_ptr_nonnull(r->buf);
		}
		left = deadline - now_ms();
		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return NULL;
		n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (ret_eof)
				*ret_eof = true;
			return NULL;
		}
		r->len += (size_t)n;
	}
}

/* ---- SIGKILL in the middle of a write, the guest frozen ------------------------ */

/* KILL_WRITE_BYTES of 'a'..'z' repeated, base64 (malloc'd). */
static char *kill_content_b64(void)
{
	char *content = malloc(KILL_WRITE_BYTES), *b64;

	ck_assert_ptr_nonnull(content);
	for (size_t i = 0; i < KILL_WRITE_BYTES; i++)
		content[i] = (char)('a' + i % 26);
	b64 = harness_b64_encode(content, KILL_WRITE_BYTES);
	free(content);
	return b64;
}

/* Sends files.write of b64 to path on a raw connection of d, and waits
 * until the engine reports the guest paused: the copy is under way (the
 * frame arrived, was decoded, the walk ran). Returns the connection. */
static int write_until_frozen(const struct msbd_proc *d, const char *id, const char *path, const char *b64)
{
	json_t *req = json_pack("{s:s, s:i, s:s, s:{s:s, s:s, s:s}}", "jsonrpc", "2.0", "id", 1, "method",
				"files.write", "params", "sandbox", id, "path", path, "content_b64", b64);
	char *frame = json_dumps(req, JSON_COMPACT);
	int fd = raw_connect(d->sock);
	bool paused = false;
	long t0;

	json_decref(req);
	ck_assert_ptr_nonnull(frame);
	ck_assert_int_ge(fd, 0);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	free(frame);
	for (t0 = now_ms(); !paused && now_ms() - t0 < KILL_PAUSE_WAIT_MS;)
		if (!(paused = engine_paused(id)))
			sleep_ms(1);
	ck_assert_msg(paused, "the write never froze the guest within %d ms", KILL_PAUSE_WAIT_MS);
	return fd;
}

/* The daemon holds the guest's byte in the host lock file while it is
 * frozen; SIGKILL, and the kernel drops the lock with the process (an
 * open-file-description lock), while the guest stays paused. */
static void kill_holding_the_freeze(struct msbd_proc *d, const char *id)
{
	struct hostlock *h = NULL;
	char *err = NULL;

	ck_assert_msg(hostlock_open(lock_path, &h, &err) == 0, "%s", err ? err : "");
	ck_assert_msg(hostlock_try(h, id) == -EAGAIN, "the daemon holds the guest frozen without its host lock");
	msbd_signal(d, SIGKILL);
	ck_assert_int_eq(msbd_wait(d, 20000), 128 + SIGKILL);     /* hang guard */
	ck_assert_msg(engine_paused(id), "the write ended before the kill: nothing to test (raise KILL_WRITE_BYTES)");
	ck_assert_msg(hostlock_try(h, id) == 0, "the killed daemon's host lock outlived it");
	hostlock_release(h, id);
	hostlock_free(h);
}

/* The guest is thawed by the next daemon's start, which says so. */
static void assert_thawed_by(const struct msbd_proc *d, const char *id)
{
	long t0;

	ck_assert_msg(wait_unpaused(id, THAW_WAIT_MS), "the next daemon did not thaw the guest in %d ms", THAW_WAIT_MS);
	for (t0 = now_ms(); !log_has(d, "thawed; a previous daemon left it frozen") && now_ms() - t0 < THAW_WAIT_MS;)
		sleep_ms(50);
	ck_assert_msg(log_has(d, "thawed; a previous daemon left it frozen"),
		      "the guest was thawed, but not by the next daemon's start");
}

/* ---- the local plane: SIGKILL in the middle of a write, no freeze ----------- */

/* How many entries the journal directory holds (0 when it is absent). */
static int journal_entries(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!dp)
		return 0;
	while ((de = readdir(dp)))     /* entries are named after temporaries: .maf-sandbox-*.tmp */
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(dp);
	return n;
}

/* The guest's temporaries of writes (.maf-sandbox-*.tmp) in its work dir. */
static int guest_temporaries(const char *id)
{
	char *out = guest_out(id, "ls -a /maf-sandbox/work | grep -c \"^\\.maf-sandbox-.*\\.tmp$\"");
	int n = atoi(out);

	free(out);
	return n;
}

/* The guest's init pid (the host's view of its root: /proc/<pid>/root). */
static pid_t guest_init_pid(const char *id)
{
	char *out = sh_out("docker inspect -f '{{.State.Pid}}' %s", id);
	pid_t pid = (pid_t)atoi(out);

	free(out);
	ck_assert_msg(pid > 0, "no init pid for %s", id);
	return pid;
}

/* Whether the guest's work dir holds a temporary of a write
 * (.maf-sandbox-*.tmp) with bytes in it, read from the host through
 * /proc/<init>/root (no docker exec: as fast as the directory reads). */
static bool guest_temporary_has_bytes(pid_t init)
{
	char dir[96], path[512];
	struct dirent *de;
	struct stat sb;
	bool found = false;
	DIR *dp;
	size_t n;

	snprintf(dir, sizeof(dir), "/proc/%d/root/maf-sandbox/work", (int)init);
	dp = opendir(dir);
	if (!dp)
		return false;
	while (!found && (de = readdir(dp))) {
		n = strlen(de->d_name);
		if (strncmp(de->d_name, ".maf-sandbox-", 13) != 0 || n < 17 || strcmp(de->d_name + n - 4, ".tmp") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		found = stat(path, &sb) == 0 && sb.st_size > 0;
	}
	closedir(dp);
	return found;
}

/* Sends files.write of b64 to path, and SIGKILLs the daemon the moment the
 * guest holds the write's temporary with bytes in it: the copy is under
 * way. No freeze: the guest runs all along. True when the kill caught the
 * write (the final name absent, a temporary left in the guest, its journal
 * entry kept); false when the write landed before the kill (the caller
 * retries on a fresh path; the final name is then whole, never short). */
static bool kill_mid_local_write(struct msbd_proc *d, const char *id, const char *path, const char *b64,
				 const char *jdir)
{
	json_t *req = json_pack("{s:s, s:i, s:s, s:{s:s, s:s, s:s}}", "jsonrpc", "2.0", "id", 1, "method",
				"files.write", "params", "sandbox", id, "path", path, "content_b64", b64);
	char *frame = json_dumps(req, JSON_COMPACT), cmd[160], *out;
	int fd = raw_connect(d->sock);
	pid_t init = guest_init_pid(id);
	bool seen = false, landed;
	long t0;

	json_decref(req);
	ck_assert_ptr_nonnull(frame);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(journal_entries(jdir), 0);
	ck_assert_int_eq(guest_temporaries(id), 0);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	free(frame);
	/* Polled as fast as the directory reads (hang guard: KILL_PAUSE_WAIT_MS). */
	for (t0 = now_ms(); !seen && now_ms() - t0 < KILL_PAUSE_WAIT_MS;)
		seen = guest_temporary_has_bytes(init);
	if (seen)
		msbd_signal(d, SIGKILL);
	ck_assert_msg(seen, "the write's temporary never showed bytes in the guest within %d ms", KILL_PAUSE_WAIT_MS);
	ck_assert_int_eq(msbd_wait(d, 20000), 128 + SIGKILL);     /* hang guard */
	close(fd);
	ck_assert_msg(!engine_paused(id), "the local plane's write paused the guest");
	snprintf(cmd, sizeof(cmd), "stat -c %%s /maf-sandbox/work/%s 2>/dev/null || echo absent", path);
	out = guest_out(id, cmd);
	landed = strcmp(out, "absent") != 0;
	if (landed) {
		char whole[32];

		snprintf(whole, sizeof(whole), "%u", KILL_WRITE_BYTES);
		ck_assert_msg(strcmp(out, whole) == 0, "the killed write left a short file: %s bytes", out);
		fprintf(stderr, "sigkill mid-write (local plane): the write to %s landed before the kill\n", path);
	}
	free(out);
	if (landed)
		return false;
	ck_assert_msg(journal_entries(jdir) > 0, "the killed daemon's journal entry is gone");
	ck_assert_msg(guest_temporaries(id) >= 1, "the killed write left no temporary in the guest: the next "
		      "daemon's removal would be vacuous");
	fprintf(stderr, "sigkill mid-write (local plane): %d temporary(ies) left in the guest\n",
		guest_temporaries(id));
	return true;
}

/* The next daemon's start removes what the killed one journalled: its
 * temporary, then the entry. */
static void assert_temporaries_removed_by(const struct msbd_proc *d, const char *id, const char *jdir)
{
	long t0;

	(void)d;
	for (t0 = now_ms(); journal_entries(jdir) > 0 && now_ms() - t0 < THAW_WAIT_MS;)     /* hang guard */
		sleep_ms(50);
	ck_assert_msg(journal_entries(jdir) == 0, "the next daemon left the killed one's journal entry");
	ck_assert_msg(guest_temporaries(id) == 0, "the next daemon left the killed one's temporary in the guest");
}

/* files.read of path: its content_b64 (asserted; malloc'd). */
static char *read_b64(const struct msbd_proc *d, const char *id, const char *path)
{
	json_t *r = call(d->sock, "files.read", json_pack("{s:s, s:s}", "sandbox", id, "path", path), NULL, NULL);
	char *b64;

	ck_assert_msg(r && jstr(r, "content_b64"), "files.read %s failed", path);
	b64 = strdup(jstr(r, "content_b64"));
	json_decref(r);
	return b64;
}

START_TEST(sigkill_mid_write_then_the_next_daemon_thaws_and_writes)
{
	static const char after[] = "written after the kill";
	const char *scope = scope_of("sigkill");
	struct msbd_proc d1 = { 0 }, d2 = { 0 };
	struct fd_census base;
	char *b64, *out, *want, *got, id[80], jdir[160], jset[200];
	const char *jargs[] = { "--set", jset, NULL };
	json_t *a, *r;
	int fd;

	/* The local plane's killed write is cleaned up through the journal:
	 * this scenario's own, where the test sees its entries. */
	msbd_prepare(&d1);
	snprintf(jdir, sizeof(jdir), "%s/journal", d1.dir);
	snprintf(jset, sizeof(jset), "files.journal_dir=%s", jdir);
	daemon_up(&d1, jargs);
	a = acquire(d1.sock, scope, "t");
	snprintf(id, sizeof(id), "%s", jstr(a, "sandbox"));
	json_decref(a);
	b64 = kill_content_b64();
	if (plane_local()) {
		/* No freeze: the kill lands in the write itself; the next daemon
		 * removes the temporary it journalled. */
		char path[32];

		for (int attempt = 1;; attempt++) {
			snprintf(path, sizeof(path), "big%d.bin", attempt);
			if (kill_mid_local_write(&d1, id, path, b64, jdir))
				break;
			ck_assert_msg(attempt < KILL_ATTEMPTS, "the write landed before the kill %d times: nothing to "
				      "test (raise KILL_WRITE_BYTES)", attempt);
			/* The write landed: a fresh daemon (it clears what the kill
			 * left), and again on a fresh path. */
			daemon_up(&d1, jargs);
			assert_temporaries_removed_by(&d1, id, jdir);
		}
		ck_assert_int_ge(guest_temporaries(id), 1);
		daemon_up(&d2, jargs);
		assert_temporaries_removed_by(&d2, id, jdir);
	} else {
		fd = write_until_frozen(&d1, id, "big.bin", b64);
		kill_holding_the_freeze(&d1, id);
		close(fd);
		daemon_up(&d2, jargs);
		assert_thawed_by(&d2, id);
	}
	base = census_idle(&d2);
	/* Nothing lost: the same sandbox, and the next write lands whole. */
	a = acquire(d2.sock, scope, "t");
	ck_assert_str_eq(jstr(a, "sandbox"), id);
	ck_assert(json_is_false(jget(a, "created")));
	json_decref(a);
	r = call(d2.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", "big.bin",
						   "content_b64", b64), NULL, NULL);
	ck_assert_msg(r, "the write after the kill failed");
	ck_assert_int_eq(jint(r, "bytes"), KILL_WRITE_BYTES);
	json_decref(r);
	free(b64);
	out = guest_out(id, "stat -c %s /maf-sandbox/work/big.bin; head -c 26 /maf-sandbox/work/big.bin; echo; "
			"tail -c 6 /maf-sandbox/work/big.bin");
	{
		char expect[96], tail[7];

		for (size_t i = 0; i < 6; i++)
			tail[i] = (char)('a' + (KILL_WRITE_BYTES - 6 + i) % 26);
		tail[6] = '\0';
		snprintf(expect, sizeof(expect), "%u\nabcdefghijklmnopqrstuvwxyz\n%s", KILL_WRITE_BYTES, tail);
		ck_assert_str_eq(out, expect);
	}
	free(out);
	r = call(d2.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", "after.txt",
						   "content_text", after), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	want = harness_b64_encode(after, strlen(after));
	got = read_b64(&d2, id, "after.txt");
	ck_assert_str_eq(got, want);
	free(want);
	free(got);
	ck_assert_int_eq(containers_of(scope, NULL), 1);
	ck_assert_int_eq(containers_of(scope, "--filter status=running"), 1);
	assert_clean_stop(&d2, &base, scope, "after the SIGKILL");
	msbd_stop(&d1);
}
END_TEST

/* ---- clients leaving in the middle of a call ------------------------------------ */

static int send_request(const char *sock, json_int_t rid, const char *method, json_t *params)
{
	int fd = raw_connect(sock);

	ck_assert_int_ge(fd, 0);
	raw_request_send(fd, rid, method, params);
	return fd;
}

/* Two clients ask for one new sandbox and the first leaves: the other gets
 * it. A third asks for another and leaves at once: its acquire completes
 * without anyone (or rolls back), and the next acquire of that key gets the
 * one container. */
START_TEST(a_client_leaving_mid_acquire)
{
	const char *scope = scope_of("leave-acquire");
	struct msbd_proc d = { 0 };
	struct fd_census base;
	int fa, fb, fc;
	json_t *r, *again;

	daemon_up(&d, NULL);
	base = census_idle(&d);
	fa = send_request(d.sock, 1, "sandbox.acquire", acquire_params(scope, "shared"));
	fb = send_request(d.sock, 2, "sandbox.acquire", acquire_params(scope, "shared"));
	fc = send_request(d.sock, 3, "sandbox.acquire", acquire_params(scope, "alone"));
	/* The three calls running (and this status call): each client leaves
	 * a call the daemon has started. */
	{
		long deadline = now_ms() + SETTLE_MS;     /* hang guard */
		json_t *st;

		for (;;) {
			st = call(d.sock, "daemon.status", NULL, NULL, NULL);
			ck_assert_msg(st, "daemon.status failed");
			if (jint(st, "requests.in_flight") == 4)
				break;
			/* hang guard */
			ck_assert_msg(now_ms() < deadline, "the three acquires never ran at once (%lld in flight)",
				      (long long)jint(st, "requests.in_flight"));
			json_decref(st);
			sleep_ms(20);
		}
		json_decref(st);
	}
	close(fc);
	close(fa);
	r = raw_recv(fb, CALL_TIMEOUT_MS);
	ck_assert_msg(r && jget(r, "result"), "the client that stayed got no sandbox: %s",
		      r ? json_dumps(r, JSON_COMPACT) : "no reply");
	ck_assert_int_eq(jint(r, "id"), 2);
	/* `created` is one caller's: request 1's (it started the acquire) unless
	 * the daemon saw its connection go before the container was ready, then
	 * request 2's. Either way request 2 is told a boolean. */
	ck_assert(json_is_boolean(jget(r, "result.created")));
	ck_assert_str_eq(jstr(r, "result.state"), "running");
	close(fb);
	/* The acquire nobody waits for ends (the daemon idles again). */
	assert_idle(&d, "leave mid-acquire");
	again = acquire(d.sock, scope, "shared");
	ck_assert_str_eq(jstr(again, "sandbox"), jstr(r, "result.sandbox"));
	ck_assert(json_is_false(jget(again, "created")));
	json_decref(again);
	json_decref(r);
	/* The daemon idle (above), the abandoned acquire has ended: what it
	 * made is there, or rolled back. */
	{
		int made = containers_of(scope, NULL);

		/* Completed: the container stays and is served; rolled back: none. */
		again = acquire(d.sock, scope, "alone");
		fprintf(stderr, "leave mid-acquire: the abandoned acquire %s\n",
			made == 2 ? "completed" : "rolled back");
		ck_assert_msg(json_is_false(jget(again, "created")) == (made == 2),
			      "the abandoned acquire's container is not what the next acquire found");
		json_decref(again);
	}
	ck_assert_int_eq(containers_of(scope, NULL), 2);
	ck_assert_int_eq(containers_of(scope, "--filter status=running"), 2);
	assert_clean_stop(&d, &base, scope, "leave mid-acquire");
}
END_TEST

/* How many of the container's processes run the leave-exec test's two
 * commands, seen from the host (/proc, by the init's pid namespace): no
 * docker exec, which a freeze of the daemon's (the kill's scan) could catch
 * mid-start and wedge the container. */
static int leave_exec_procs(const char *id)
{
	char *out = sh_out("P=$(docker inspect -f '{{.State.Pid}}' %s) && NS=$(readlink /proc/$P/ns/pid) && "
			   "for d in /proc/[0-9]*; do [ \"$(readlink $d/ns/pid 2>/dev/null)\" = \"$NS\" ] && "
			   "tr '\\0' ' ' < $d/cmdline 2>/dev/null && echo; done | "
			   "grep -c -e '[s]leep 300' -e 'lt 600[0]'", id);
	int n = atoi(out);

	free(out);
	return n;
}

/* How many of the container's processes have a command line matching the
 * grep pattern (the same host view as leave_exec_procs). */
static int guest_procs_matching(const char *id, const char *pattern)
{
	char *out = sh_out("P=$(docker inspect -f '{{.State.Pid}}' %s) && NS=$(readlink /proc/$P/ns/pid) && "
			   "for d in /proc/[0-9]*; do [ \"$(readlink $d/ns/pid 2>/dev/null)\" = \"$NS\" ] && "
			   "tr '\\0' ' ' < $d/cmdline 2>/dev/null && echo; done | grep -c -e '%s'", id, pattern);
	int n = atoi(out);

	free(out);
	return n;
}

/* An exec whose client left is cancelled (PROTOCOL "call.cancel"): what it
 * started is killed, nothing is orphaned in the daemon, a streaming one
 * writes to nobody, and the sandbox serves the next call. */
START_TEST(a_client_leaving_mid_exec)
{
	const char *scope = scope_of("leave-exec");
	struct msbd_proc d = { 0 };
	struct fd_census base;
	char id[80], *out;
	json_t *a, *r;
	int fd1, fd2;
	long t0;
	bool gone = false;

	daemon_up(&d, NULL);
	a = acquire(d.sock, scope, "t");
	snprintf(id, sizeof(id), "%s", jstr(a, "sandbox"));
	json_decref(a);
	base = census_idle(&d);
	fd1 = send_request(d.sock, 1, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id, "command",
				"echo started > /tmp/exec-1; sleep 300; echo finished > /tmp/exec-1",
				"timeout_seconds", 600));
	fd2 = send_request(d.sock, 2, "sandbox.exec", json_pack("{s:s, s:s, s:i, s:b}", "sandbox", id, "command",
				"echo started > /tmp/exec-2; i=0; while [ $i -lt 6000 ]; do echo line $i; "
				"i=$((i+1)); sleep 0.05; done; echo finished > /tmp/exec-2",
				"timeout_seconds", 600, "stream", 1));
	/* Both commands run (observed, not waited for). */
	for (t0 = now_ms(); now_ms() - t0 < 15000 && leave_exec_procs(id) < 3; sleep_ms(100))     /* hang guard */
		;
	/* exec-1: its sh and its sleep; exec-2: its sh (the loop) */
	ck_assert_msg(leave_exec_procs(id) >= 3, "the two commands never started");
	close(fd1);
	close(fd2);
	/* Their processes go: no sleep 300, no loop left in the guest. */
	gone = false;
	for (t0 = now_ms(); !gone && now_ms() - t0 < 15000; sleep_ms(200))     /* hang guard */
		gone = leave_exec_procs(id) == 0;
	ck_assert_msg(gone, "the commands of the clients that left were not killed");
	assert_idle(&d, "leave mid-exec");
	out = guest_out(id, "cat /tmp/exec-1 /tmp/exec-2");
	ck_assert_msg(strcmp(out, "started\nstarted") == 0, "a command of a client that left ran on: %s", out);
	free(out);
	ck_assert_msg(log_has(&d, "cancelled by"), "no cancel was logged");
	r = call(d.sock, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id, "command", "echo next",
						   "timeout_seconds", 30), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	out = harness_b64_field(r, "stdout_b64");
	ck_assert_pstr_eq(out, "next\n");
	free(out);
	json_decref(r);
	ck_assert_int_eq(containers_of(scope, NULL), 1);
	assert_clean_stop(&d, &base, scope, "leave mid-exec");
}
END_TEST

/* engine.call_requests of d's status: the engine requests made for calls. */
static json_int_t call_requests_of(const struct msbd_proc *d)
{
	json_t *st = call(d->sock, "daemon.status", NULL, NULL, NULL);
	json_int_t n;

	ck_assert_ptr_nonnull(st);
	n = jint(st, "engine.call_requests");
	json_decref(st);
	return n;
}

/* A read whose client left while the guest was frozen: the guest is
 * thawed, the copy's engine connection let go, the next call served. The
 * local plane reads with no freeze and no engine request: its guest is
 * never paused, and the engine is never asked anything for the read. */
START_TEST(a_client_leaving_mid_read)
{
	const char *scope = scope_of("leave-read");
	struct msbd_proc d = { 0 };
	struct fd_census base;
	char id[80], cmd[160], *out;
	json_t *a, *r;
	json_int_t before;
	bool seen = false;
	long t0;
	int fd;

	daemon_up(&d, NULL);
	a = acquire(d.sock, scope, "t");
	snprintf(id, sizeof(id), "%s", jstr(a, "sandbox"));
	json_decref(a);
	snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of=/maf-sandbox/work/big.bin bs=1048576 count=%d 2>/dev/null; "
		 "echo ok", LEAVE_READ_MIB);
	out = guest_out(id, cmd);
	ck_assert_str_eq(out, "ok");
	free(out);
	base = census_idle(&d);
	/* The acquire's start event, applied after its pin of the guest (local
	 * plane), closed that pin: the next file call pins again (an inspect).
	 * One stat settles the pin, then the read and stat are counted. (The
	 * event is sent as the start happens, before the docker exec above
	 * ran; no barrier here proves the daemon had applied it.) */
	json_decref(call(d.sock, "files.stat", json_pack("{s:s, s:s}", "sandbox", id, "path", "big.bin"), NULL, NULL));
	before = call_requests_of(&d);
	fd = send_request(d.sock, 1, "files.read", json_pack("{s:s, s:s}", "sandbox", id, "path", "big.bin"));
	if (plane_local()) {
		/* No freeze to wait for: the client leaves as soon as it asked. */
		close(fd);
		ck_assert_msg(!engine_paused(id), "the local plane's read paused the guest");
	} else {
		/* hang guard: 10 s for the freeze to be seen */
		for (t0 = now_ms(); !seen && now_ms() - t0 < 10000;)
			if (!(seen = engine_paused(id)))
				sleep_ms(2);
		close(fd);
		fprintf(stderr, "leave mid-read: the freeze was %sseen before the client left\n", seen ? "" : "not ");
	}
	ck_assert_msg(wait_unpaused(id, THAW_WAIT_MS), "the guest is still paused after its client left");
	assert_idle(&d, "leave mid-read");
	r = call(d.sock, "files.stat", json_pack("{s:s, s:s}", "sandbox", id, "path", "big.bin"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(jint(r, "size"), (json_int_t)LEAVE_READ_MIB * 1048576);
	json_decref(r);
	if (plane_local())
		ck_assert_msg(call_requests_of(&d) == before, "the local plane's read and stat made %lld engine request(s)",
			      (long long)(call_requests_of(&d) - before));
	ck_assert_int_eq(containers_of(scope, NULL), 1);
	assert_clean_stop(&d, &base, scope, "leave mid-read");
}
END_TEST

/* ---- 64 clients, mixed operations ------------------------------------------------ */

enum mix_op {
	MIX_DESCRIBE, MIX_STATUS, MIX_LIST, MIX_ACQUIRE, MIX_EXEC, MIX_WRITE, MIX_READ, MIX_STAT,
	MIX_READ_MISSING, MIX_EXEC_UNKNOWN, MIX_BAD_PARAMS, MIX_OPS
};

static const struct {
	const char *name;
	const char *expected;      /* the one refusal this op is meant to get, or NULL */
	int weight;                /* of 100 */
} mix_ops[MIX_OPS] = {
	[MIX_DESCRIBE] = { "daemon.describe", NULL, 10 },
	[MIX_STATUS] = { "daemon.status", NULL, 10 },
	[MIX_LIST] = { "sandbox.list", NULL, 10 },
	[MIX_ACQUIRE] = { "sandbox.acquire (warm)", NULL, 15 },
	[MIX_EXEC] = { "sandbox.exec", NULL, 15 },
	[MIX_WRITE] = { "files.write", NULL, 15 },     /* each followed by its read */
	[MIX_READ] = { "files.read (back)", NULL, 0 },
	[MIX_STAT] = { "files.stat", NULL, 10 },
	[MIX_READ_MISSING] = { "files.read (missing)", "FileNotFoundError", 5 },
	[MIX_EXEC_UNKNOWN] = { "sandbox.exec (unknown)", "SandboxNotFound", 5 },
	[MIX_BAD_PARAMS] = { "sandbox.acquire (bad)", "InvalidParams", 5 },
};

#define MIX_OUTCOMES 8

struct mix_tally {
	long ok;
	struct {
		char type[48];
		long n;
	} err[MIX_OUTCOMES];
	int n_err;
};

struct mix_shared {
	const char *sock;
	const char *scope;
	char ids[MIX_SANDBOXES][80];
	long deadline;
	pthread_mutex_t mu;
	struct mix_tally tally[MIX_OPS];
	long unexpected;
	char first_unexpected[512];
};

struct mix_client {
	struct mix_shared *s;
	int idx;
	uint64_t rng;
	long calls;
	pthread_t thread;
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Counts one outcome: type NULL is a success; detail says what went wrong
 * when it was not expected. */
static void mix_count(struct mix_shared *s, enum mix_op op, const char *type, const char *detail)
{
	struct mix_tally *t = &s->tally[op];
	bool expected = type ? mix_ops[op].expected && strcmp(type, mix_ops[op].expected) == 0
			     : !mix_ops[op].expected;
	int i;

	pthread_mutex_lock(&s->mu);
	if (!type) {
		t->ok++;
	} else {
		for (i = 0; i < t->n_err && strcmp(t->err[i].type, type); i++)
			;
		if (i == t->n_err && t->n_err < MIX_OUTCOMES)
			snprintf(t->err[t->n_err++].type, sizeof(t->err[0].type), "%s", type);
		if (i < t->n_err)
			t->err[i].n++;
	}
	if (!expected) {
		if (s->unexpected++ == 0)
			snprintf(s->first_unexpected, sizeof(s->first_unexpected), "%s: %s (%s)", mix_ops[op].name,
				 type ? type : "success where a refusal was expected", detail ? detail : "");
	}
	pthread_mutex_unlock(&s->mu);
}

/* One call on the client's connection (reconnected if it broke). Returns
 * the result (owned) or NULL with *type set (static or the connection's). */
static json_t *mix_call(struct mix_client *c, struct msb_conn **conn, const char *method, json_t *params,
			const char **type, char *detail, size_t detail_len)
{
	json_t *result = NULL;
	int r;

	*type = NULL;
	detail[0] = '\0';
	if (!*conn) {
		r = msb_connect(c->s->sock, conn);
		if (r != MSB_OK) {
			json_decref(params);
			*type = "client: cannot connect";
			snprintf(detail, detail_len, "%s", msb_strerror(r));
			*conn = NULL;
			return NULL;
		}
		msb_set_timeout(*conn, MIX_CALL_TIMEOUT_MS);
	}
	c->calls++;
	r = msb_call(*conn, method, params, &result);
	if (r == MSB_OK)
		return result;
	if (r == MSB_E_REMOTE) {
		*type = msb_last_error_type(*conn) ? msb_last_error_type(*conn) : "remote error without a type";
		snprintf(detail, detail_len, "%s", msb_last_error_message(*conn) ? msb_last_error_message(*conn) : "");
		return NULL;
	}
	*type = "client: transport failure";
	snprintf(detail, detail_len, "%s", msb_strerror(r));
	*conn = msb_conn_free(*conn);
	return NULL;
}

static void mix_step(struct mix_client *c, struct msb_conn **conn, int i)
{
	struct mix_shared *s = c->s;
	int k = (int)(xorshift(&c->rng) % MIX_SANDBOXES), w = (int)(xorshift(&c->rng) % 100), acc = 0;
	const char *id = s->ids[k], *type;
	char detail[256], thread[16], path[32], text[96], *want;
	enum mix_op op;
	json_t *r;

	for (op = 0; op < MIX_OPS; op++)
		if (w < (acc += mix_ops[op].weight))
			break;
	snprintf(thread, sizeof(thread), "t%d", k);
	snprintf(path, sizeof(path), "c%d.txt", c->idx);
	switch (op) {
	case MIX_DESCRIBE:
		r = mix_call(c, conn, "daemon.describe", NULL, &type, detail, sizeof(detail));
		if (r && (!jstr(r, "isolation") || strcmp(jstr(r, "isolation"), "container")))
			type = "wrong result";
		break;
	case MIX_STATUS:
		r = mix_call(c, conn, "daemon.status", NULL, &type, detail, sizeof(detail));
		break;
	case MIX_LIST:
		r = mix_call(c, conn, "sandbox.list", json_pack("{s:s}", "scope", s->scope), &type, detail,
			     sizeof(detail));
		if (r && json_array_size(r) != MIX_SANDBOXES)
			type = "wrong result";
		break;
	case MIX_ACQUIRE:
		r = mix_call(c, conn, "sandbox.acquire", acquire_params(s->scope, thread), &type, detail,
			     sizeof(detail));
		if (r && (!jstr(r, "sandbox") || strcmp(jstr(r, "sandbox"), id) || !json_is_false(jget(r, "created"))))
			type = "wrong result";
		break;
	case MIX_EXEC:
		snprintf(text, sizeof(text), "echo c%d-%d", c->idx, i);
		r = mix_call(c, conn, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id, "command", text,
								"timeout_seconds", 60), &type, detail, sizeof(detail));
		if (r) {
			/* The exact bytes: echo's argument and its newline. */
			char *out = harness_b64_field(r, "stdout_b64");

			if (jint(r, "exit_code") != 0 || !out || strlen(out) != strlen(text + 5) + 1 ||
			    strncmp(out, text + 5, strlen(text + 5)) || out[strlen(text + 5)] != '\n') {
				type = "wrong result";
				snprintf(detail, sizeof(detail), "exit %lld, stdout %s",
					 (long long)jint(r, "exit_code"), out ? out : "(no stdout_b64)");
			}
			free(out);
		}
		break;
	case MIX_WRITE:
		snprintf(text, sizeof(text), "client %d call %d", c->idx, i);
		r = mix_call(c, conn, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", path,
							       "content_text", text), &type, detail, sizeof(detail));
		mix_count(s, op, type, detail);
		json_decref(r);
		if (type)
			return;
		/* Nothing lost: what was written reads back. */
		op = MIX_READ;
		r = mix_call(c, conn, "files.read", json_pack("{s:s, s:s}", "sandbox", id, "path", path), &type,
			     detail, sizeof(detail));
		want = harness_b64_encode(text, strlen(text));
		if (r && (!jstr(r, "content_b64") || strcmp(jstr(r, "content_b64"), want)))
			type = "wrong result";
		free(want);
		break;
	case MIX_STAT:
		r = mix_call(c, conn, "files.stat", json_pack("{s:s, s:s}", "sandbox", id, "path", path), &type,
			     detail, sizeof(detail));
		break;
	case MIX_READ_MISSING:
		r = mix_call(c, conn, "files.read", json_pack("{s:s, s:s}", "sandbox", id, "path", "no-such-file"),
			     &type, detail, sizeof(detail));
		break;
	case MIX_EXEC_UNKNOWN:
		r = mix_call(c, conn, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox",
				"0000000000000000000000000000000000000000000000000000000000000000", "command", "true",
				"timeout_seconds", 5), &type, detail, sizeof(detail));
		break;
	default:
		op = MIX_BAD_PARAMS;
		r = mix_call(c, conn, "sandbox.acquire", json_pack("{s:o, s:{s:s}}", "key", key_for(s->scope, thread),
								  "spec", "image", image), &type, detail, sizeof(detail));
		break;
	}
	mix_count(s, op, type, detail);
	json_decref(r);
}

static void *mix_client_main(void *arg)
{
	struct mix_client *c = arg;
	struct msb_conn *conn = NULL;

	for (int i = 0; now_ms() < c->s->deadline; i++)
		mix_step(c, &conn, i);
	msb_conn_free(conn);
	return NULL;
}

static void mix_print(const struct mix_shared *s, long calls, long ms)
{
	fprintf(stderr, "mixed load: %d clients, %ld calls in %ld ms (%.1f/s)\n", MIX_CLIENTS, calls, ms,
		calls * 1000.0 / (ms ? ms : 1));
	for (int op = 0; op < MIX_OPS; op++) {
		const struct mix_tally *t = &s->tally[op];

		fprintf(stderr, "  %-24s ok %6ld", mix_ops[op].name, t->ok);
		for (int i = 0; i < t->n_err; i++)
			fprintf(stderr, "  %s %ld%s", t->err[i].type, t->err[i].n,
				mix_ops[op].expected && strcmp(t->err[i].type, mix_ops[op].expected) == 0 ?
				" (expected)" : " (UNEXPECTED)");
		fputc('\n', stderr);
	}
}

START_TEST(sixty_four_clients_of_mixed_operations)
{
	static struct mix_shared s;
	static struct mix_client clients[MIX_CLIENTS];
	struct msbd_proc d = { 0 };
	struct fd_census base;
	const char *env = getenv("MSB_FAULTS_MIX_SECONDS");
	long seconds = env && atol(env) > 0 ? atol(env) : MIX_SECONDS, t0, calls = 0;

	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.mu, NULL);
	s.scope = scope_of("mixed");
	daemon_up(&d, NULL);
	s.sock = d.sock;
	for (int k = 0; k < MIX_SANDBOXES; k++) {
		char thread[16];
		json_t *a;

		snprintf(thread, sizeof(thread), "t%d", k);
		a = acquire(d.sock, s.scope, thread);
		snprintf(s.ids[k], sizeof(s.ids[k]), "%s", jstr(a, "sandbox"));
		json_decref(a);
	}
	base = census_idle(&d);
	t0 = now_ms();
	s.deadline = t0 + seconds * 1000;
	for (int i = 0; i < MIX_CLIENTS; i++) {
		clients[i] = (struct mix_client){ .s = &s, .idx = i, .rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) };
		ck_assert_int_eq(pthread_create(&clients[i].thread, NULL, mix_client_main, &clients[i]), 0);
	}
	for (int i = 0; i < MIX_CLIENTS; i++) {
		pthread_join(clients[i].thread, NULL);
		calls += clients[i].calls;
	}
	mix_print(&s, calls, now_ms() - t0);
	if (s.unexpected)
		msbd_dump_log(&d);
	ck_assert_msg(s.unexpected == 0, "%ld unexpected outcomes; the first: %s", s.unexpected, s.first_unexpected);
	for (int i = 0; i < MIX_CLIENTS; i++)
		ck_assert_msg(clients[i].calls > 0, "client %d made no call", i);
	for (int op = 0; op < MIX_OPS; op++)
		ck_assert_msg(s.tally[op].ok + s.tally[op].n_err > 0, "%s was never called", mix_ops[op].name);
	ck_assert_int_eq(containers_of(s.scope, NULL), MIX_SANDBOXES);
	ck_assert_int_eq(containers_of(s.scope, "--filter status=running"), MIX_SANDBOXES);
	assert_clean_stop(&d, &base, s.scope, "mixed load");
	pthread_mutex_destroy(&s.mu);
}
END_TEST

/* ---- 500 slow connections -------------------------------------------------------- */

struct trickle {
	int *fds;
	char (*frames)[96];
	volatile int stop;
	int sent_bytes;            /* bytes of each frame sent so far */
	int failures;
	int ran_out;               /* it stopped sending by itself (SLOW_TRICKLE_S), not told to */
};

static void *trickle_main(void *arg)
{
	struct trickle *t = arg;

	for (int s = 0; s < SLOW_TRICKLE_S && !t->stop; s++) {
		long next = now_ms() + 1000;

		for (int i = 0; i < SLOW_CONNS; i++)
			if (send(t->fds[i], t->frames[i] + t->sent_bytes, 1, MSG_NOSIGNAL) != 1)
				t->failures++;
		t->sent_bytes++;
		while (!t->stop && now_ms() < next)
			sleep_ms(20);
	}
	if (!t->stop)
		__atomic_store_n(&t->ran_out, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* One normal client: connect, describe, status; the round trip in ms. */
static long probe_rtt(const char *sock)
{
	long t0 = now_ms();
	int fd = raw_connect(sock);
	json_t *r;

	ck_assert_int_ge(fd, 0);
	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"}\n");
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r && jget(r, "result"), "a normal client got no describe");
	json_decref(r);
	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"daemon.status\"}\n");
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r && jget(r, "result"), "a normal client got no status");
	json_decref(r);
	close(fd);
	return now_ms() - t0;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

static void probe_series(const char *sock, long *ret_median, long *ret_max)
{
	long v[SLOW_PROBES];

	for (int i = 0; i < SLOW_PROBES; i++) {
		v[i] = probe_rtt(sock);
		sleep_ms(SLOW_PROBE_GAP_MS);
	}
	qsort(v, SLOW_PROBES, sizeof(v[0]), cmp_long);
	*ret_median = v[SLOW_PROBES / 2];
	*ret_max = v[SLOW_PROBES - 1];
}

START_TEST(five_hundred_trickling_connections_do_not_delay_others)
{
	static int fds[SLOW_CONNS];
	static char frames[SLOW_CONNS][96];
	struct trickle t = { .fds = fds, .frames = frames };
	struct msbd_proc d = { 0 };
	struct fd_census base;
	struct rlimit rl;
	long base_med, base_max, slow_med, slow_max;
	pthread_t thread;
	json_t *st;
	char conns[64], frame_to[64];

	/* The test holds SLOW_CONNS sockets at once. */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < SLOW_CONNS + SLOW_FD_HEADROOM && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	ck_assert_msg(rl.rlim_cur >= SLOW_CONNS + SLOW_FD_HEADROOM, "RLIMIT_NOFILE is %llu: the test needs %d",
		      (unsigned long long)rl.rlim_cur, SLOW_CONNS + SLOW_FD_HEADROOM);
	snprintf(conns, sizeof(conns), "limits.max_connections=%d", SLOW_CONNS * 2);
	snprintf(frame_to, sizeof(frame_to), "limits.frame_timeout_ms=%d", SLOW_FRAME_TIMEOUT_MS);
	daemon_up(&d, (const char *[]){ "--set", conns, "--set", frame_to, NULL });
	base = census_idle(&d);
	probe_series(d.sock, &base_med, &base_max);

	for (int i = 0; i < SLOW_CONNS; i++) {
		snprintf(frames[i], sizeof(frames[i]), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.status\"}\n", i);
		fds[i] = raw_connect(d.sock);
		ck_assert_msg(fds[i] >= 0, "slow connection %d: %s", i, strerror(errno));
	}
	ck_assert_int_eq(pthread_create(&thread, NULL, trickle_main, &t), 0);
	/* Every slow connection has begun its frame (hang guard: SETTLE_MS). */
	for (long t0 = now_ms(); __atomic_load_n(&t.sent_bytes, __ATOMIC_SEQ_CST) < 1 && now_ms() - t0 < SETTLE_MS;)
		sleep_ms(10);
	ck_assert_msg(t.sent_bytes >= 1, "the slow connections never began their frames");
	probe_series(d.sock, &slow_med, &slow_max);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	/* The probes (and that status) were served while the slow connections
	 * were still trickling: the thread had not run out of its time. */
	ck_assert_msg(!__atomic_load_n(&t.ran_out, __ATOMIC_SEQ_CST), "the trickle ended (%d s) before the probes "
		      "did: they did not run against trickling connections", SLOW_TRICKLE_S);
	/* The normal client was served while every slow frame was still
	 * unfinished (the test sends their ends only below): no slow connection
	 * has had a reply, or been closed, yet. The round trips are printed,
	 * not bounded (the probes' RECV_MS is the hang guard). */
	for (int i = 0; i < SLOW_CONNS; i++) {
		struct pollfd pfd = { .fd = fds[i], .events = POLLIN };

		ck_assert_msg(poll(&pfd, 1, 0) == 0, "slow connection %d was answered or closed before its frame ended", i);
	}
	t.stop = 1;
	pthread_join(thread, NULL);
	fprintf(stderr, "slow connections: a normal client's round trip: median %ld ms, max %ld ms; with %d "
		"connections trickling %d byte(s) each: median %ld ms, max %ld ms\n", base_med, base_max, SLOW_CONNS,
		t.sent_bytes, slow_med, slow_max);
	ck_assert_int_eq(t.failures, 0);
	ck_assert_msg(jint(st, "connections.current") == SLOW_CONNS + 1, "the daemon held %lld connections, not %d",
		      (long long)jint(st, "connections.current"), SLOW_CONNS + 1);
	json_decref(st);

	/* Each slow frame was kept whole: finished now, each is answered. */
	for (int i = 0; i < SLOW_CONNS; i++)
		raw_send_str(fds[i], frames[i] + t.sent_bytes);
	for (int i = 0; i < SLOW_CONNS; i++) {
		json_t *r = raw_recv(fds[i], RECV_MS);

		ck_assert_msg(r && jget(r, "result"), "slow connection %d got no reply to its frame", i);
		ck_assert_int_eq(jint(r, "id"), i);
		json_decref(r);
		close(fds[i]);
	}
	assert_clean_stop(&d, &base, NULL, "slow connections");
}
END_TEST

/* ---- garbage on the socket ---------------------------------------------------------- */

struct blob {
	char *p;
	size_t len, cap;
};

static void blob_add(struct blob *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		while (b->len + n + 1 > b->cap)
			b->cap = b->cap ? b->cap * 2 : 4096;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void blob_str(struct blob *b, const char *s)
{
	blob_add(b, s, strlen(s));
}

static void blob_fill(struct blob *b, char c, size_t n)
{
	char chunk[4096];

	memset(chunk, c, sizeof(chunk));
	for (size_t done = 0; done < n; done += sizeof(chunk))
		blob_add(b, chunk, n - done < sizeof(chunk) ? n - done : sizeof(chunk));
}

static void blob_repeat(struct blob *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		blob_str(b, s);
}

static void g_random_bytes(struct blob *b)
{
	uint64_t s = 0x5eed;

	for (size_t i = 0; i < GARBAGE_RANDOM_BYTES; i++) {
		char c = (char)(xorshift(&s) & 0xff);

		blob_add(b, &c, 1);
	}
	blob_str(b, "\n");
}

static void g_random_lines(struct blob *b)
{
	static const char junk[] = "{}[]\":,0123456789abcdefxyz\\-+.eE\x80\xbf\xc3\xff\x01\x7f";
	uint64_t s = 0xbad;

	for (int l = 0; l < GARBAGE_RANDOM_LINES; l++) {
		size_t n = 1 + xorshift(&s) % 200;

		for (size_t i = 0; i < n; i++)
			blob_add(b, &junk[xorshift(&s) % (sizeof(junk) - 1)], 1);
		blob_str(b, "\n");
	}
}

static void g_huge_line(struct blob *b)
{
	blob_fill(b, 'x', GARBAGE_HUGE_LINE);
	blob_str(b, "\n");
}

static void g_huge_valid_frame(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"pad\":\"");
	blob_fill(b, 'p', GARBAGE_HUGE_LINE);
	blob_str(b, "\"}}\n");
}

static void g_nested_arrays(struct blob *b)
{
	blob_fill(b, '[', GARBAGE_NEST_DEPTH);
	blob_fill(b, ']', GARBAGE_NEST_DEPTH);
	blob_str(b, "\n");
}

static void g_nested_objects(struct blob *b)
{
	blob_repeat(b, "{\"a\":", GARBAGE_NEST_DEPTH);
	blob_str(b, "1");
	blob_fill(b, '}', GARBAGE_NEST_DEPTH);
	blob_str(b, "\n");
}

static void g_nested_in_params(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"a\":");
	blob_fill(b, '[', GARBAGE_NEST_DEPTH);
	blob_fill(b, ']', GARBAGE_NEST_DEPTH);
	blob_str(b, "}}\n");
}

static void g_nested_within_depth(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.list\",\"params\":{\"scope\":");
	blob_fill(b, '[', GARBAGE_NEST_OK);
	blob_fill(b, ']', GARBAGE_NEST_OK);
	blob_str(b, "}}\n");
}

static void g_nested_past_depth(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.list\",\"params\":{\"scope\":");
	blob_fill(b, '[', GARBAGE_NEST_DEEP);
	blob_fill(b, ']', GARBAGE_NEST_DEEP);
	blob_str(b, "}}\n");
}

static void g_invalid_utf8(struct blob *b)
{
	static const char *const bad[] = {
		"\xff\xfe", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf8\x88\x80\x80\x80", "\xf4\x90\x80\x80",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.");
		blob_str(b, bad[i]);
		blob_str(b, "\"}\n");
	}
}

static void g_escapes(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.\\ud800\"}\n");
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.\\udc00x\"}\n");
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\\u0000\"}\n");
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.\\x41\"}\n");
}

static void g_nuls(struct blob *b)
{
	static const char in_frame[] = "{\"jsonrpc\":\"2.0\",\0\"id\":1,\"method\":\"daemon.describe\"}\n";
	static const char in_string[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.des\0cribe\"}\n";

	blob_add(b, in_frame, sizeof(in_frame) - 1);
	blob_add(b, in_string, sizeof(in_string) - 1);
	blob_fill(b, '\0', 4096);
	blob_str(b, "\n");
}

static void g_huge_numbers(struct blob *b)
{
	static const char *const ids[] = { "1e999", "-1e999", "123456789012345678901234567890",
					   "-123456789012345678901234567890", "9223372036854775808" };

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":");
		blob_str(b, ids[i]);
		blob_str(b, ",\"method\":\"daemon.describe\"}\n");
	}
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":");
	blob_fill(b, '7', GARBAGE_NUMBER_DIGITS);
	blob_str(b, ",\"method\":\"daemon.describe\"}\n");
}

static void g_huge_numbers_in_params(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.exec\",\"params\":{\"sandbox\":\"x\","
		    "\"command\":\"true\",\"timeout_seconds\":1e308}}\n");
	/* Refused before any sweep: nothing on the shared engine is reaped. */
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sandbox.reap\",\"params\":"
		    "{\"older_than_seconds\":-9223372036854775808}}\n");
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sandbox.exec\",\"params\":{\"sandbox\":\"x\","
		    "\"command\":\"true\",\"timeout_seconds\":1,\"max_output_bytes\":1e20}}\n");
}

static void g_many_ids(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\"");
	for (int i = 0; i < GARBAGE_MANY_IDS; i++) {
		char m[32];

		snprintf(m, sizeof(m), ",\"id\":%d", i);
		blob_str(b, m);
	}
	blob_str(b, ",\"method\":\"daemon.describe\"}\n");
}

static void g_members(struct blob *b, int n)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{");
	for (int i = 0; i < n; i++) {
		char m[32];

		snprintf(m, sizeof(m), "%s\"m%d\":%d", i ? "," : "", i, i);
		blob_str(b, m);
	}
	blob_str(b, "}}\n");
}

/* Past the frame's 65,536 values (members count twice: key and value). */
static void g_many_members(struct blob *b)
{
	g_members(b, GARBAGE_MANY_IDS);
}

/* Within it: parsed, then refused for the unknown params. */
static void g_some_members(struct blob *b)
{
	g_members(b, GARBAGE_SOME_MEMBERS);
}

static void g_huge_method(struct blob *b)
{
	blob_str(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"");
	blob_fill(b, 'm', GARBAGE_HUGE_LINE / 16);
	blob_str(b, "\"}\n");
}

static void g_pipelined(struct blob *b)
{
	for (int i = 0; i < GARBAGE_PIPELINED; i++) {
		char f[96];

		snprintf(f, sizeof(f), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.status\"}\n", i);
		blob_str(b, f);
	}
}

static void g_blank_flood(struct blob *b)
{
	blob_repeat(b, "\r\n", GARBAGE_BLANK_LINES / 2);
	blob_fill(b, '\n', GARBAGE_BLANK_LINES / 2);
}

struct garbage_row {
	const char *name;
	void (*make)(struct blob *b);
	int replies;          /* how many replies before the "alive" one; -1: at least one */
	const char *type;     /* every reply's error type; NULL: any error; "result": results */
};

static const struct garbage_row garbage_rows[] = {
	{ "random bytes", g_random_bytes, -1, NULL },
	{ "random lines", g_random_lines, GARBAGE_RANDOM_LINES, NULL },
	{ "a 16 MiB line", g_huge_line, 1, "ParseError" },
	{ "a 16 MiB string param", g_huge_valid_frame, 1, "InvalidParams" },
	{ "100k nested arrays", g_nested_arrays, 1, "ParseError" },
	{ "100k nested objects", g_nested_objects, 1, "ParseError" },
	{ "100k nested arrays in params", g_nested_in_params, 1, "ParseError" },
	{ "60 nested arrays in a param", g_nested_within_depth, 1, "InvalidParams" },
	{ "1000 nested arrays in a param", g_nested_past_depth, 1, "ParseError" },
	{ "invalid UTF-8 in strings", g_invalid_utf8, 6, "ParseError" },
	{ "bad escapes", g_escapes, 4, "ParseError" },
	{ "NUL bytes", g_nuls, 3, "ParseError" },
	{ "huge numbers as ids", g_huge_numbers, 6, "ParseError" },
	{ "huge numbers in params", g_huge_numbers_in_params, 3, "InvalidParams" },
	{ "100k ids in one frame", g_many_ids, 1, "ParseError" },
	{ "100k params members", g_many_members, 1, "ParseError" },
	{ "30k params members", g_some_members, 1, "InvalidParams" },
	{ "a 1 MiB method name", g_huge_method, 1, "MethodNotFound" },
	{ "5000 pipelined ids", g_pipelined, GARBAGE_PIPELINED, "result" },
	{ "a million blank lines", g_blank_flood, 0, NULL },
};

struct sender {
	int fd;
	const char *p;
	size_t len;
	bool failed;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	for (size_t off = 0; off < s->len;) {
		ssize_t n = send(s->fd, s->p + off, s->len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			s->failed = true;
			break;
		}
		off += (size_t)n;
	}
	return NULL;
}

/* Sends the row's garbage and an "alive" describe on one connection
 * (from a thread: the replies are read meanwhile), and checks every reply. */
static void garbage_row_run(const struct msbd_proc *d, const struct garbage_row *row)
{
	struct blob b = { 0 };
	struct sender s;
	struct reader rd;
	pthread_t thread;
	int replies = 0, fd = raw_connect(d->sock);
	bool *seen = row->type && strcmp(row->type, "result") == 0 ? calloc(GARBAGE_PIPELINED, 1) : NULL;
	long t0 = now_ms();

	ck_assert_int_ge(fd, 0);
	row->make(&b);
	blob_str(&b, "{\"jsonrpc\":\"2.0\",\"id\":\"alive\",\"method\":\"daemon.describe\"}\n");
	s = (struct sender){ .fd = fd, .p = b.p, .len = b.len };
	ck_assert_int_eq(pthread_create(&thread, NULL, sender_main, &s), 0);
	reader_init(&rd, fd);
	for (;;) {
		bool eof;
		json_t *r = reader_next(&rd, RECV_MS, &eof);
		json_t *id;

		ck_assert_msg(r, "%s: %s after %d replies", row->name, eof ? "the daemon closed the connection" :
			      "no more replies", replies);
		id = json_object_get(r, "id");
		if (json_is_string(id) && strcmp(json_string_value(id), "alive") == 0) {
			ck_assert_msg(jget(r, "result"), "%s: the describe after it failed", row->name);
			json_decref(r);
			break;
		}
		replies++;
		if (seen) {
			json_int_t i = json_integer_value(id);

			ck_assert_msg(jget(r, "result") && json_is_integer(id) && i >= 0 && i < GARBAGE_PIPELINED &&
				      !seen[i], "%s: reply %d is not a new result: %s", row->name, replies,
				      json_dumps(r, JSON_COMPACT));
			seen[i] = true;
		} else {
			ck_assert_msg(jget(r, "error"), "%s: reply %d is not an error", row->name, replies);
			if (row->type)
				ck_assert_msg(strcmp(jstr(r, "error.data.type"), row->type) == 0, "%s: reply %d is %s, not %s",
					      row->name, replies, jstr(r, "error.data.type"), row->type);
			if (strcmp(jstr(r, "error.data.type"), "MethodNotFound") == 0) {
				ck_assert_uint_le(strlen(jstr(r, "error.data.method")), ECHO_MAX);
				ck_assert_uint_lt(strlen(jstr(r, "error.message")), 4 * ECHO_MAX);
			}
		}
		json_decref(r);
	}
	pthread_join(thread, NULL);
	ck_assert_msg(!s.failed, "%s: the daemon stopped reading", row->name);
	if (row->replies >= 0)
		ck_assert_msg(replies == row->replies, "%s: %d replies, not %d", row->name, replies, row->replies);
	else
		ck_assert_msg(replies >= 1, "%s: no reply", row->name);
	fprintf(stderr, "garbage: %-30s %8zu bytes, %5d error(s) or replies, then served (%ld ms)\n", row->name, b.len,
		replies, now_ms() - t0);
	reader_free(&rd);
	free(seen);
	free(b.p);
	close(fd);
}

/* A client that sends most of a large frame and hangs up. */
static void garbage_hangup(const struct msbd_proc *d)
{
	struct blob b = { 0 };
	struct sender s;
	int fd = raw_connect(d->sock);

	ck_assert_int_ge(fd, 0);
	blob_str(&b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"pad\":\"");
	blob_fill(&b, 'h', GARBAGE_HANGUP_BYTES);
	s = (struct sender){ .fd = fd, .p = b.p, .len = b.len };
	sender_main(&s);
	ck_assert(!s.failed);
	close(fd);
	free(b.p);
}

START_TEST(garbage_gets_errors_never_a_crash)
{
	struct msbd_proc d = { 0 };
	struct fd_census base;
	json_t *r;

	daemon_up(&d, NULL);
	base = census_idle(&d);
	for (size_t i = 0; i < sizeof(garbage_rows) / sizeof(garbage_rows[0]); i++) {
		garbage_row_run(&d, &garbage_rows[i]);
		ck_assert_msg(kill(d.pid, 0) == 0, "the daemon died after %s", garbage_rows[i].name);
	}
	garbage_hangup(&d);
	/* Still alive, and a normal client is served. */
	ck_assert_int_eq(kill(d.pid, 0), 0);
	r = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_str_eq(jstr(r, "isolation"), "container");
	json_decref(r);
	r = call(d.sock, "sandbox.list", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	assert_clean_stop(&d, &base, NULL, "garbage");
}
END_TEST

/* ---- dockerd restarted under a running daemon ----------------------------------------- */

/* dockerd's argv and environment (NUL-separated, from /proc/PID/cmdline
 * and environ) and its working directory, recorded by main() before any
 * test, so that both the test and main's cleanup start it again as it was
 * — never with this test's environment (its TMPDIR is the run directory,
 * removed at the end: runc would fail every exec). */
static char dockerd_cmdline[DOCKERD_CMDLINE_MAX];
static size_t dockerd_cmdline_len;
static char dockerd_environ[DOCKERD_ENVIRON_MAX];
static size_t dockerd_environ_len;
static char dockerd_cwd[256] = "/";
static bool engine_via_systemd;

/* GET /_ping on the engine socket within timeout_ms; no assertion. */
static bool engine_ping(int timeout_ms)
{
	static const char req[] = "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
	long deadline = now_ms() + timeout_ms;
	char buf[2048];
	size_t len = 0;
	int fd = raw_connect(engine_socket_path());

	if (fd < 0)
		return false;
	if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(req) - 1) {
		close(fd);
		return false;
	}
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		long left = deadline - now_ms();
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0 || len == sizeof(buf) - 1)
			break;
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return strncmp(buf, "HTTP/1.", 7) == 0 && strstr(buf, " 200 ") && len >= 2 && strcmp(buf + len - 2, "OK") == 0;
}

/* The first line of a small file (/proc), or "" (static buffer). */
static const char *read_line(const char *path)
{
	static char buf[256];
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
	return buf;
}

static bool proc_is_dockerd(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	return strcmp(read_line(path), "dockerd") == 0;
}

/* The running dockerd: its pid file's, else the one process named dockerd. */
static pid_t dockerd_find(void)
{
	pid_t pid = (pid_t)atoi(read_line(DOCKERD_PIDFILE)), found = 0;
	struct dirent *e;
	DIR *d;
	int n = 0;

	if (pid > 0 && proc_is_dockerd(pid))
		return pid;
	d = opendir("/proc");
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		pid_t p = (pid_t)atoi(e->d_name);

		if (p > 0 && proc_is_dockerd(p)) {
			found = p;
			n++;
		}
	}
	closedir(d);
	return n == 1 ? found : 0;
}

/* Reads a whole /proc file (NUL-separated lists) into buf; its length, 0
 * if unreadable or too long. */
static size_t read_proc_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n;

	if (fd < 0)
		return 0;
	while (len < size && (n = read(fd, buf + len, size - len)) > 0)
		len += (size_t)n;
	close(fd);
	return len < size ? len : 0;
}

/* Splits a NUL-separated list into v (at most max - 1 entries, NULL-ended). */
static void split_nul_list(char *list, size_t len, char **v, size_t max)
{
	size_t n = 0;

	for (size_t off = 0; off < len && n < max - 1; off += strlen(list + off) + 1)
		v[n++] = list + off;
	v[n] = NULL;
}

/* For main(), before any test: how to start the engine again. */
static void dockerd_record(void)
{
	char *active = sh_out("systemctl is-active docker 2>/dev/null");
	pid_t pid;

	engine_via_systemd = strcmp(active, "active") == 0;
	free(active);
	if (engine_via_systemd)
		return;
	pid = dockerd_find();
	if (pid > 0) {
		char path[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
		dockerd_cmdline_len = read_proc_file(path, dockerd_cmdline, sizeof(dockerd_cmdline));
		snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
		dockerd_environ_len = read_proc_file(path, dockerd_environ, sizeof(dockerd_environ));
		snprintf(path, sizeof(path), "/proc/%d/cwd", (int)pid);
		n = readlink(path, dockerd_cwd, sizeof(dockerd_cwd) - 1);
		dockerd_cwd[n > 0 ? n : 0] = '\0';
		if (n <= 0)
			snprintf(dockerd_cwd, sizeof(dockerd_cwd), "/");
	}
}

/* Exited (a zombie counts: it will never answer again). */
static bool process_gone(pid_t pid)
{
	char path[64];
	const char *stat, *state;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	stat = read_line(path);
	state = strrchr(stat, ')');
	return !state || state[1] == '\0' || state[2] == 'Z' || state[2] == 'X';
}

/* Stops the engine: systemctl, or SIGTERM to dockerd and a wait for its exit
 * (SIGKILL after DOCKERD_STOP_WAIT_MS). No assertion: the caller restores. */
static bool dockerd_stop(char *why, size_t why_len)
{
	pid_t pid;
	long deadline;

	if (engine_via_systemd) {
		char *out = sh_out("systemctl stop docker 2>&1; echo rc=$?");

		snprintf(why, why_len, "systemctl stop docker: %s", out);
		free(out);
		return true;
	}
	pid = dockerd_find();
	if (pid <= 0 || dockerd_cmdline_len == 0) {
		snprintf(why, why_len, "no dockerd process found (or its argv unknown): cannot restart the engine");
		return false;
	}
	kill(pid, SIGTERM);
	deadline = now_ms() + DOCKERD_STOP_WAIT_MS;
	while (!process_gone(pid)) {
		if (now_ms() > deadline) {
			kill(pid, SIGKILL);
			deadline = now_ms() + 10000;
			while (!process_gone(pid) && now_ms() < deadline)
				sleep_ms(100);
			snprintf(why, why_len, "dockerd did not exit within %d ms of SIGTERM; killed",
				 DOCKERD_STOP_WAIT_MS);
			return true;
		}
		sleep_ms(50);
	}
	return true;
}

/* Starts dockerd again, detached (a session of its own, stdin /dev/null,
 * output appended to DOCKERD_LOG), and waits for /_ping. No assertion. */
static bool dockerd_start(void)
{
	long deadline;
	pid_t pid;

	if (engine_via_systemd) {
		free(sh_out("systemctl start docker 2>&1"));
	} else {
		static char *const clean_env[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
						   NULL };
		char *argv[DOCKERD_ARGV_MAX], *envp[DOCKERD_ENV_MAX];

		if (dockerd_cmdline_len == 0)
			return false;
		split_nul_list(dockerd_cmdline, dockerd_cmdline_len, argv, DOCKERD_ARGV_MAX);
		split_nul_list(dockerd_environ, dockerd_environ_len, envp, DOCKERD_ENV_MAX);
		pid = fork();
		if (pid < 0)
			return false;
		if (pid == 0) {
			int in, out;

			setsid();
			if (fork() != 0)
				_exit(0);
			in = open("/dev/null", O_RDONLY);
			out = open(DOCKERD_LOG, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (in < 0 || out < 0)
				_exit(126);
			dup2(in, STDIN_FILENO);
			dup2(out, STDOUT_FILENO);
			dup2(out, STDERR_FILENO);
			for (int fd = 3; fd < 4096; fd++)
				close(fd);
			if (chdir(dockerd_cwd) < 0 && chdir("/") < 0)
				_exit(126);
			/* argv[0] is looked up in the test's PATH; dockerd gets
			 * its own environment back. */
			execvpe(argv[0], argv, envp[0] ? envp : clean_env);
			_exit(127);
		}
		waitpid(pid, NULL, 0);
	}
	deadline = now_ms() + DOCKERD_START_WAIT_MS;
	while (!engine_ping(3000)) {
		if (now_ms() > deadline)
			return false;
		sleep_ms(500);
	}
	return true;
}

/* The engine answers, or is started again. For main() and the test. */
static bool engine_restore(void)
{
	if (engine_ping(5000))
		return true;
	fprintf(stderr, "faults: the engine does not answer; starting it again\n");
	return dockerd_start();
}

/* One call made without any assertion (the engine may be down). */
struct outcome {
	const char *what;
	json_t *result;
	int code;             /* the error's code, a MSB_E_* of the client, or 0 */
	char type[64];
	long ms;
	long answered_at;     /* now_ms() when it ended (answer, error or the client's timeout) */
};

static void try_call(const char *sock, const char *method, json_t *params, struct outcome *o)
{
	struct msb_conn *c = NULL;
	long t0 = now_ms();
	int r;

	o->result = NULL;
	o->code = 0;
	o->type[0] = '\0';
	r = msb_connect(sock, &c);
	if (r == MSB_OK) {
		msb_set_timeout(c, CALL_TIMEOUT_MS);     /* hang guard */
		r = msb_call(c, method, params, &o->result);
	} else {
		json_decref(params);
	}
	if (r == MSB_E_REMOTE) {
		o->code = msb_last_error_code(c);
		snprintf(o->type, sizeof(o->type), "%s", msb_last_error_type(c) ? msb_last_error_type(c) : "?");
	} else if (r != MSB_OK) {
		o->code = r;
		snprintf(o->type, sizeof(o->type), "client: %s", msb_strerror(r));
	}
	o->answered_at = now_ms();
	o->ms = o->answered_at - t0;
	msb_conn_free(c);
}

struct acq_thread {
	const char *sock, *scope;
	struct outcome o;
	pthread_t thread;
};

static void *acq_thread_main(void *arg)
{
	struct acq_thread *t = arg;

	try_call(t->sock, "sandbox.acquire", acquire_params(t->scope, "one"), &t->o);
	return NULL;
}

static void print_foreign_containers(void)
{
	char *out = sh_out("docker ps --format '{{.Names}} {{.Labels}}' | grep -v 'msb-it-run=%s' | cut -c1-160",
			   run_id);

	if (*out)
		fprintf(stderr, "dockerd restart: running containers not of this run (they stop too):\n%s\n", out);
	free(out);
}

/* What the outage looked like, recorded without any assertion. */
#define OUTAGE_CALLS 6
#define OUTAGE_ENGINE_CALLS 4     /* the first ones need the engine */

struct outage {
	bool stopped;
	char why[256];
	long stop_ms;                 /* SIGTERM to dockerd's exit */
	struct outcome inflight;      /* the exec in flight across it */
	struct outcome calls[OUTAGE_CALLS];
	char *state;                  /* daemon.status engine.state meanwhile */
	long restart_at;              /* now_ms() when dockerd was started again */
};

/* Whether calls[i] is not made because an earlier one hung to the client's
 * timeout (then it says so, for the report). */
static bool outage_skip(struct outcome *calls, int i)
{
	for (int k = 0; k < i; k++)
		if (calls[k].code == MSB_E_TIMEOUT) {
			calls[i].result = NULL;
			calls[i].code = MSB_E_TIMEOUT;
			snprintf(calls[i].type, sizeof(calls[i].type), "not made: %s hung", calls[k].what);
			calls[i].answered_at = now_ms();
			return true;
		}
	return false;
}

/* Stops the engine, collects what the daemon answers meanwhile, and starts
 * the engine again. No assertion in here: the engine always comes back.
 * Returns whether it did. */
static bool outage_run(const struct msbd_proc *d, const char *scope, const char *id, struct reader *rd,
		       struct outage *o)
{
	struct outcome *c = o->calls;
	long t0 = now_ms();
	json_t *r;

	o->stopped = dockerd_stop(o->why, sizeof(o->why));
	o->stop_ms = now_ms() - t0;
	if (o->stopped) {
		t0 = now_ms();
		r = reader_next(rd, CALL_TIMEOUT_MS, NULL);     /* hang guard */
		o->inflight = (struct outcome){ .what = "the exec in flight", .result = r, .ms = now_ms() - t0,
						.answered_at = now_ms() };
		if (r && jget(r, "error")) {
			o->inflight.code = (int)json_integer_value(jget(r, "error.code"));
			snprintf(o->inflight.type, sizeof(o->inflight.type), "%s", jstr(r, "error.data.type"));
		}
		/* A call that hangs to the client's timeout (CALL_TIMEOUT_MS, a
		 * hang guard) fails the test: the calls after it are not made,
		 * so the engine is not kept down for each (outage_skip). */
		c[0].what = "daemon.engine";
		try_call(d->sock, "daemon.engine", NULL, &c[0]);
		c[1].what = "sandbox.acquire";
		if (!outage_skip(c, 1))
			try_call(d->sock, "sandbox.acquire", acquire_params(scope, "one"), &c[1]);
		c[2].what = "sandbox.exec";
		if (!outage_skip(c, 2))
			try_call(d->sock, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id, "command", "true",
								   "timeout_seconds", 5), &c[2]);
		c[3].what = "files.stat";
		if (!outage_skip(c, 3))
			try_call(d->sock, "files.stat", json_pack("{s:s, s:s}", "sandbox", id, "path", "x"), &c[3]);
		c[4].what = "daemon.describe";
		if (!outage_skip(c, 4))
			try_call(d->sock, "daemon.describe", NULL, &c[4]);
		c[5].what = "daemon.status";
		if (!outage_skip(c, 5))
			try_call(d->sock, "daemon.status", NULL, &c[5]);
		if (c[5].result && jstr(c[5].result, "engine.state"))
			o->state = strdup(jstr(c[5].result, "engine.state"));
	}
	o->restart_at = now_ms();
	return dockerd_start();
}

/* Every call answered while the engine was down (before dockerd was
 * started again: a call the daemon kept waiting for the engine would end
 * only at the client's timeout, CALL_TIMEOUT_MS, a hang guard, with a
 * client error): the engine's with EngineUnavailable, the others served;
 * the exec in flight answered. */
static void outage_assert(struct outage *o)
{
	ck_assert_msg(o->stopped, "%s", o->why);
	if (o->why[0])
		fprintf(stderr, "dockerd restart: %s\n", o->why);
	fprintf(stderr, "dockerd restart: dockerd took %ld ms to stop; meanwhile:\n", o->stop_ms);
	fprintf(stderr, "  %-20s %6ld ms  %s\n", o->inflight.what, o->inflight.ms,
		o->inflight.result ? (o->inflight.type[0] ? o->inflight.type : "a result") : "no answer");
	for (int i = 0; i < OUTAGE_CALLS; i++)
		fprintf(stderr, "  %-20s %6ld ms  %s (%d)\n", o->calls[i].what, o->calls[i].ms,
			o->calls[i].result ? "a result" : o->calls[i].type, o->calls[i].code);
	/* Its container stopped with the engine: a clear error (or the
	 * command's end), not a hang. */
	ck_assert_msg(o->inflight.result && o->inflight.answered_at <= o->restart_at, "the exec in flight got no "
		      "answer while the engine was down");
	ck_assert_msg(!jget(o->inflight.result, "error") || o->inflight.code == 1000 || o->inflight.code == 1001 ||
		      o->inflight.code == 1002, "the exec in flight failed with %s (%d)", o->inflight.type,
		      o->inflight.code);
	for (int i = 0; i < OUTAGE_CALLS; i++) {
		struct outcome *c = &o->calls[i];

		/* Answered by the daemon before the engine came back (the order),
		 * not left waiting on the engine (the code below says who answered). */
		ck_assert_msg(c->answered_at <= o->restart_at, "%s was answered only after dockerd was started again",
			      c->what);
		/* UNTESTED here (the lead runs engine_restart): the local plane
		 * needs no engine for a file call while the guest's init lives
		 * (answered by the guest's files: "x" is FileNotFoundError, 1202);
		 * once the init is gone its new pin needs the engine's inspect
		 * (EngineUnavailable). The archive plane always needs the engine. */
		if (i == 3 && plane_local())
			ck_assert_msg(!c->result && (c->code == 1000 || c->code == 1202), "%s with the engine down (local "
				      "plane): %s (%d), not FileNotFoundError or EngineUnavailable", c->what,
				      c->result ? "a result" : c->type, c->code);
		else if (i < OUTAGE_ENGINE_CALLS)
			ck_assert_msg(!c->result && c->code == 1000, "%s with the engine down: %s (%d), not "
				      "EngineUnavailable", c->what, c->result ? "a result" : c->type, c->code);
		else
			ck_assert_msg(c->result, "%s failed with the engine down: %s", c->what, c->type);
	}
	ck_assert_msg(o->state && strcmp(o->state, "reachable"), "daemon.status said the engine was %s while it "
		      "was down", o->state ? o->state : "?");
}

static void outage_free(struct outage *o)
{
	json_decref(o->inflight.result);
	for (int i = 0; i < OUTAGE_CALLS; i++)
		json_decref(o->calls[i].result);
	free(o->state);
}

/* sandbox.list of scope once the registry is current again (asserted). */
static json_t *list_when_synced(const struct msbd_proc *d, const char *scope)
{
	long t0 = now_ms();
	json_t *list;

	while (!(list = call(d->sock, "sandbox.list", json_pack("{s:s}", "scope", scope), NULL, NULL))) {
		ck_assert_msg(now_ms() - t0 < SYNC_WAIT_MS, "the registry never synchronised after the engine "
			      "came back");
		sleep_ms(100);
	}
	return list;
}

/* Reconnected and listed again: both sandboxes, stopped with the engine;
 * then the events stream is live: a removal behind the daemon's back
 * reaches the registry. */
static void assert_registry_resynced(const struct msbd_proc *d, const char *scope, const char *id1,
				     const char *id2)
{
	long t0;
	json_t *list;

	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
	list = list_when_synced(d, scope);
	ck_assert_uint_eq(json_array_size(list), 2);
	for (size_t i = 0; i < 2; i++)
		ck_assert_msg(strcmp(jstr(json_array_get(list, i), "state"), "running"),
			      "the registry still says %s runs", jstr(json_array_get(list, i), "sandbox"));
	json_decref(list);
	free(sh_out("docker rm -f %s", id2));
	for (t0 = now_ms();; sleep_ms(100)) {
		list = list_when_synced(d, scope);
		if (json_array_size(list) == 1)
			break;
		ck_assert_msg(now_ms() - t0 < SYNC_WAIT_MS, "the registry missed an event after the engine came back");
		json_decref(list);
	}
	ck_assert_str_eq(jstr(json_array_get(list, 0), "sandbox"), id1);
	json_decref(list);
}

/* No duplicate: acquires of the stopped sandbox's key, at once, all get
 * the same container, started again. */
static void assert_acquires_reuse(const struct msbd_proc *d, const char *scope, const char *id)
{
	struct acq_thread t[CONCURRENT_ACQUIRES];

	for (int i = 0; i < CONCURRENT_ACQUIRES; i++) {
		t[i] = (struct acq_thread){ .sock = d->sock, .scope = scope };
		ck_assert_int_eq(pthread_create(&t[i].thread, NULL, acq_thread_main, &t[i]), 0);
	}
	for (int i = 0; i < CONCURRENT_ACQUIRES; i++) {
		pthread_join(t[i].thread, NULL);
		ck_assert_msg(t[i].o.result, "acquire %d after the restart: %s (%d)", i, t[i].o.type, t[i].o.code);
		ck_assert_str_eq(jstr(t[i].o.result, "sandbox"), id);
		ck_assert(json_is_false(jget(t[i].o.result, "created")));
		ck_assert_str_eq(jstr(t[i].o.result, "state"), "running");
		json_decref(t[i].o.result);
	}
	ck_assert_int_eq(containers_of(scope, NULL), 1);
	ck_assert_int_eq(containers_of(scope, "--filter status=running"), 1);
}

START_TEST(dockerd_restart_fails_calls_cleanly_then_resyncs)
{
	const char *scope = scope_of("dockerd");
	struct msbd_proc d = { 0 };
	struct outage o = { 0 };
	struct fd_census base;
	struct reader rd;
	char id1[80], id2[80], timeout_set[64], *out;
	json_t *a, *r;
	bool restored;
	int fd;

	ck_assert_msg(engine_via_systemd || dockerd_cmdline_len > 0,
		      "cannot restart the engine: no dockerd process found and docker is not a systemd unit");
	snprintf(timeout_set, sizeof(timeout_set), "engine.timeout_ms=%d", OUTAGE_ENGINE_TIMEOUT_MS);
	daemon_up(&d, (const char *[]){ "--set", timeout_set, "--set", "engine.reconnect_min_ms=100",
					"--set", "engine.reconnect_max_ms=1000", NULL });
	a = acquire(d.sock, scope, "one");
	snprintf(id1, sizeof(id1), "%s", jstr(a, "sandbox"));
	json_decref(a);
	a = acquire(d.sock, scope, "two");
	snprintf(id2, sizeof(id2), "%s", jstr(a, "sandbox"));
	json_decref(a);
	base = census_idle(&d);
	fd = send_request(d.sock, 1, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id1, "command",
				"sleep 600", "timeout_seconds", 900));
	reader_init(&rd, fd);
	/* The exec runs: its process seen in the guest (from the host's /proc). */
	for (long t0 = now_ms(); guest_procs_matching(id1, "[s]leep 600") == 0; sleep_ms(50))
		ck_assert_msg(now_ms() - t0 < SETTLE_MS, "the exec never ran in the guest");     /* hang guard */
	print_foreign_containers();

	restored = outage_run(&d, scope, id1, &rd, &o);
	ck_assert_msg(restored, "the engine did not come back within %d ms (see %s)", DOCKERD_START_WAIT_MS,
		      DOCKERD_LOG);
	outage_assert(&o);
	outage_free(&o);
	reader_free(&rd);
	close(fd);

	assert_registry_resynced(&d, scope, id1, id2);
	assert_acquires_reuse(&d, scope, id1);
	r = call(d.sock, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", id1, "command", "echo back",
						   "timeout_seconds", 30), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	out = harness_b64_field(r, "stdout_b64");
	ck_assert_pstr_eq(out, "back\n");
	free(out);
	json_decref(r);
	assert_clean_stop(&d, &base, scope, "dockerd restart");
}
END_TEST

static Suite *faults_suite(void)
{
	Suite *s = suite_create("faults");
	TCase *kill9 = tcase_create("sigkill");
	TCase *leave = tcase_create("leave");
	TCase *load = tcase_create("load");
	TCase *garbage = tcase_create("garbage");
	TCase *engine = tcase_create("engine_restart");

	tcase_set_timeout(kill9, 180);
	tcase_add_test(kill9, sigkill_mid_write_then_the_next_daemon_thaws_and_writes);
	tcase_set_timeout(leave, 120);
	tcase_add_test(leave, a_client_leaving_mid_acquire);
	tcase_add_test(leave, a_client_leaving_mid_exec);
	tcase_add_test(leave, a_client_leaving_mid_read);
	tcase_set_timeout(load, 240);
	tcase_add_test(load, sixty_four_clients_of_mixed_operations);
	tcase_add_test(load, five_hundred_trickling_connections_do_not_delay_others);
	tcase_set_timeout(garbage, 180);
	tcase_add_test(garbage, garbage_gets_errors_never_a_crash);
	/* Last: it stops every container on the engine. */
	tcase_set_timeout(engine, 400);
	tcase_add_test(engine, dockerd_restart_fails_calls_cleanly_then_resyncs);
	suite_add_tcase(s, kill9);
	suite_add_tcase(s, leave);
	suite_add_tcase(s, load);
	suite_add_tcase(s, garbage);
	suite_add_tcase(s, engine);
	return s;
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed = 1;

	snprintf(run_id, sizeof(run_id), "itq%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-faults:%s", run_id);
	dockerd_record();
	if (harness_test_image(image)) {
		harness_run_dir_create();
		snprintf(lock_path, sizeof(lock_path), "%s/freeze.lock", getenv("MSB_IT_RUN_DIR"));
		snprintf(lock_set, sizeof(lock_set), "freeze.lock_file=%s", lock_path);
		sr = srunner_create(faults_suite());
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
		harness_run_dir_remove();
	}
	/* Whatever failed: the engine runs, and nothing of this run stays. */
	if (!engine_restore()) {
		fprintf(stderr, "faults: the engine could not be started again (see %s)\n", DOCKERD_LOG);
		failed = 1;
	}
	/* Bounded: an engine that hangs on a container must not hang CI. */
	out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s | xargs -r timeout %d docker rm -f "
		     ">/dev/null 2>&1; timeout %d docker rmi -f %s >/dev/null 2>&1; echo done", RUN_LABEL, run_id,
		     CLEANUP_TIMEOUT_S, CLEANUP_TIMEOUT_S, image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
