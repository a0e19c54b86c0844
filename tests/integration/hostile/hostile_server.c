/* hostile_server.c — see hostile.h. */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "msb.h"

/* ---- fairness between uids (findings 2 and 13): fair_* ------------------
 * The daemon runs as root; unprivileged users are forked children that
 * setuid() to uids no account needs to exist for (SO_PEERCRED reports
 * them as they are), in group nogroup, which is given the socket. Children
 * use no Check assertion: each ends with _exit(0) or the number of the
 * check that failed, and the parent asserts that. */

#define FAIR_GID      65534       /* nogroup: socket.group=nogroup */
#define FAIR_UID_A    61001
#define FAIR_UID_B    61002
#define FAIR_UID_C    61003
#define FAIR_WAIT_MS  15000       /* hang guard of one reply */
#define FAIR_ENGINE_WAIT_MS 15000
#define FAIR_MIB      (1024 * 1024)
#define FAIR_N(a)     (sizeof(a) / sizeof((a)[0]))

static long fair_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void fair_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The daemon on d with socket.group=nogroup and the extra sets (NULL-ended
 * list of "key=value"), its directory open to the children. */
static void fair_start(struct msbd_proc *d, const char *const *sets)
{
	const char *args[32] = { "--set", "socket.group=nogroup" };
	size_t n = 2;

	for (size_t i = 0; sets[i]; i++) {
		ck_assert_uint_lt(n + 2, FAIR_N(args));
		args[n++] = "--set";
		args[n++] = sets[i];
	}
	args[n] = NULL;
	msbd_start(d, args);
	ck_assert_int_eq(chmod(d->dir, 0755), 0);
}

/* In a child: become uid, group nogroup only. */
static bool fair_become(uid_t uid)
{
	return setgroups(0, NULL) == 0 && setgid(FAIR_GID) == 0 && setuid(uid) == 0;
}

/* Sends all of buf (no Check assertion); false when the peer is gone. */
static bool fair_send(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		buf += k;
		len -= (size_t)k;
	}
	return true;
}

/* One daemon.status on fd: the reply frame (result or error), or NULL. */
static json_t *fair_status_on(int fd)
{
	static const char req[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"}\n";

	/* A refused connection may be closed already: what it said is still read. */
	(void)fair_send(fd, req, sizeof(req) - 1);
	return raw_recv(fd, FAIR_WAIT_MS);
}

/* Is reply TooManyConnections with data {limit, scope} and a message naming key? */
static bool fair_is_refusal(json_t *reply, const char *scope, long limit, const char *key)
{
	json_t *err = json_object_get(reply, "error");
	const char *msg = json_string_value(json_object_get(err, "message"));

	return json_integer_value(json_object_get(err, "code")) == 1302 && msg && strstr(msg, key) &&
	       json_integer_value(jget(err, "data.limit")) == limit &&
	       jstr(err, "data.scope") && strcmp(jstr(err, "data.scope"), scope) == 0;
}

/* The entry of uid in a status result's connections.by_uid, or NULL (borrowed). */
static json_t *fair_by_uid(json_t *status, uid_t uid)
{
	json_t *by = jget(status, "connections.by_uid"), *e;
	size_t i;

	json_array_foreach(by, i, e)
		if (json_integer_value(json_object_get(e, "uid")) == (json_int_t)uid)
			return e;
	return NULL;
}

/* Child: as uid, opens connections (each answering daemon.status) until
 * one is refused for the uid's cap; expects `cap` accepted, then holds them
 * until the parent writes to hold_fd (or it closes). */
static int fair_fill_uid(const char *sock, uid_t uid, long cap, int ready_fd, int hold_fd)
{
	int fds[64], n = 0;
	char c = 'R';

	if (!fair_become(uid))
		return 1;
	for (;;) {
		json_t *r;
		int fd = raw_connect(sock);

		if (fd < 0 || n == (int)FAIR_N(fds))
			return 2;
		r = fair_status_on(fd);
		if (!r)
			return 3;
		if (json_object_get(r, "result")) {
			fds[n++] = fd;
			json_decref(r);
			continue;
		}
		if (!fair_is_refusal(r, "uid", cap, "limits.max_connections_per_uid"))
			return 4;
		json_decref(r);
		close(fd);
		break;
	}
	if (n != cap)
		return 5;
	if (write(ready_fd, &c, 1) != 1)
		return 6;
	(void)!read(hold_fd, &c, 1);
	return 0;
}

struct fair_child {
	pid_t pid;
	int ready;    /* read end: the child says it holds its connections */
	int hold;     /* write end: the parent lets it go */
};

static void fair_fill_start(struct fair_child *ch, const char *sock, uid_t uid, long cap)
{
	int ready[2], hold[2];
	char c = 0;

	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(hold), 0);
	ch->pid = fork();
	ck_assert_int_ge(ch->pid, 0);
	if (ch->pid == 0) {
		close(ready[0]);
		close(hold[1]);
		_exit(fair_fill_uid(sock, uid, cap, ready[1], hold[0]));
	}
	close(ready[1]);
	close(hold[0]);
	ch->ready = ready[0];
	ch->hold = hold[1];
	ck_assert_msg(read(ch->ready, &c, 1) == 1 && c == 'R', "uid %u could not fill its connections",
		      (unsigned)uid);
}

static int fair_wait_child(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Child: as uid, one connection, refused by the daemon-wide limit for non-admins. */
static int fair_refused_daemon(const char *sock, uid_t uid, long limit)
{
	json_t *r;
	int fd;

	if (!fair_become(uid))
		return 1;
	fd = raw_connect(sock);
	if (fd < 0)
		return 2;
	r = fair_status_on(fd);
	if (!r || !fair_is_refusal(r, "daemon", limit, "limits.admin_reserved_connections"))
		return 3;
	json_decref(r);
	close(fd);
	return 0;
}

/* Child: as uid, one daemon.status on a new connection answers. */
static int fair_status_as(const char *sock, uid_t uid)
{
	json_t *r;
	int fd;

	if (!fair_become(uid))
		return 1;
	fd = raw_connect(sock);
	if (fd < 0)
		return 2;
	r = fair_status_on(fd);
	if (!r || !json_object_get(r, "result"))
		return 3;
	json_decref(r);
	close(fd);
	return 0;
}

static int fair_run_as(int (*fn)(const char *, uid_t), const char *sock, uid_t uid)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(fn(sock, uid));
	return fair_wait_child(pid);
}

/* Finding 2: one uid holding every connection it may locks no one out. */
START_TEST(fair_uid_caps)
{
	struct msbd_proc d = { 0 };
	struct fair_child a, b;
	json_t *st, *e;
	pid_t pid;

	fair_start(&d, (const char *const[]){ "limits.max_connections=12",
		"limits.admin_reserved_connections=4", "limits.max_connections_per_uid=4",
		"limits.idle_evict_ms=0", NULL });
	/* A takes its four and is refused the fifth, for its uid. */
	fair_fill_start(&a, d.sock, FAIR_UID_A, 4);
	/* B and root still connect and are answered. */
	ck_assert_int_eq(fair_run_as(fair_status_as, d.sock, FAIR_UID_B), 0);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(st);
	json_decref(st);
	/* B takes its four too: 8 = max_connections - admin_reserved_connections. */
	fair_fill_start(&b, d.sock, FAIR_UID_B, 4);
	/* C, within its own cap, is refused by the daemon-wide limit for non-admins... */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(fair_refused_daemon(d.sock, FAIR_UID_C, 8));
	ck_assert_int_eq(fair_wait_child(pid), 0);
	/* ...while root, an administrator, has the reserve. */
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(jint(st, "connections.refused_uid"), 2);
	ck_assert_int_ge(jint(st, "connections.rejected"), 3);
	e = fair_by_uid(st, FAIR_UID_A);
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(jint(e, "connections"), 4);
	e = fair_by_uid(st, FAIR_UID_B);
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(jint(e, "connections"), 4);
	json_decref(st);
	close(a.hold);
	close(b.hold);
	ck_assert_int_eq(fair_wait_child(a.pid), 0);
	ck_assert_int_eq(fair_wait_child(b.pid), 0);
	close(a.ready);
	close(b.ready);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* Child: as A, with max_connections_per_uid=2 and idle_evict_ms=1000:
 * two busy connections (a partial frame each) make a third refused; once
 * they are idle past the minimum, a third evicts the longest-idle one. */
static int fair_evict_child(const char *sock, uid_t uid)
{
	static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,";
	static const char tail[] = "\"method\":\"daemon.status\"}\n";
	int c1, c2, c3;
	json_t *r;

	if (!fair_become(uid))
		return 1;
	c1 = raw_connect(sock);
	c2 = raw_connect(sock);
	/* Each holds a partial frame: not idle, never evictable. */
	if (c1 < 0 || c2 < 0 || !fair_send(c1, head, sizeof(head) - 1) || !fair_send(c2, head, sizeof(head) - 1))
		return 2;
	c3 = raw_connect(sock);
	r = c3 < 0 ? NULL : fair_status_on(c3);
	if (!r || !fair_is_refusal(r, "uid", 2, "limits.max_connections_per_uid"))
		return 3;
	json_decref(r);
	close(c3);
	/* Finished, answered: idle from now, c1 first. */
	for (int *c = (int[]){ c1, c2, -1 }; *c >= 0; c++) {
		if (!fair_send(*c, tail, sizeof(tail) - 1) || !(r = raw_recv(*c, FAIR_WAIT_MS)) ||
		    !json_object_get(r, "result"))
			return 4;
		json_decref(r);
	}
	fair_sleep_ms(1500);    /* past limits.idle_evict_ms (a lower bound: nothing closes them else) */
	c3 = raw_connect(sock);
	r = c3 < 0 ? NULL : fair_status_on(c3);
	if (!r || !json_object_get(r, "result"))
		return 5;
	json_decref(r);
	/* c1, the longest idle, made room; c2 stays. */
	if (!raw_is_closed(c1, FAIR_WAIT_MS))
		return 6;
	if (raw_is_closed(c2, 0))
		return 7;
	return 0;
}

/* At its cap, a uid's longest-idle connection is evicted rather than the
 * new one refused; a busy one never is. */
START_TEST(fair_idle_eviction)
{
	struct msbd_proc d = { 0 };
	json_t *st;

	fair_start(&d, (const char *const[]){ "limits.max_connections_per_uid=2",
		"limits.idle_evict_ms=1000", "limits.idle_timeout_ms=0", NULL });
	ck_assert_int_eq(fair_run_as(fair_evict_child, d.sock, FAIR_UID_A), 0);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(jint(st, "connections.evicted"), 1);
	ck_assert_int_eq(jint(st, "connections.refused_uid"), 1);
	json_decref(st);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

static void fair_send_request(int fd, json_int_t id, const char *method, json_t *params)
{
	json_t *req = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method", method,
				"params", params);
	char *s = json_dumps(req, JSON_COMPACT);

	ck_assert_ptr_nonnull(s);
	ck_assert(fair_send(fd, s, strlen(s)) && fair_send(fd, "\n", 1));
	free(s);
	json_decref(req);
}

/* Polls daemon.status until connections.idle_closed >= n (hang guard). */
static void fair_wait_idle_closed(const char *sock, long n)
{
	long end = fair_now_ms() + FAIR_WAIT_MS;

	for (;;) {
		json_t *st = call(sock, "daemon.status", NULL, NULL, NULL);
		long got = st ? (long)jint(st, "connections.idle_closed") : -1;

		json_decref(st);
		if (got >= n)
			return;
		ck_assert_msg(fair_now_ms() < end, "idle_closed stayed at %ld, not %ld", got, n);
		fair_sleep_ms(100);
	}
}

/* An idle connection is closed after limits.idle_timeout_ms; one with an
 * event subscription or a call in flight is not; the C client replaces a
 * connection closed idle on its next call. */
START_TEST(fair_idle_timeout)
{
	struct msbd_proc d = { 0 };
	struct msb_conn *mc = NULL;
	json_t *r, *key;
	int sub, idle, ex;
	char scope[64];

	fair_start(&d, (const char *const[]){ "limits.idle_timeout_ms=2000", NULL });
	json_decref(wait_engine_state(d.sock, "reachable", FAIR_ENGINE_WAIT_MS));
	snprintf(scope, sizeof(scope), "%s-fair-idle", hostile_run_id);
	key = json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "a");
	r = call(d.sock, "sandbox.acquire", json_pack("{s:O, s:o}", "key", key, "spec", hostile_spec()),
		 NULL, NULL);
	ck_assert_ptr_nonnull(r);
	/* A subscriber, an idle connection, the C client's, then a call in flight. */
	sub = raw_connect(d.sock);
	fair_send_request(sub, 1, "events.subscribe", json_pack("{s:[s]}", "types", "egress.decision"));
	json_decref(raw_recv(sub, FAIR_WAIT_MS));
	idle = raw_connect(d.sock);
	fair_send_request(idle, 1, "daemon.status", json_object());
	json_decref(raw_recv(idle, FAIR_WAIT_MS));
	ck_assert_int_eq(msb_connect(d.sock, &mc), MSB_OK);
	ck_assert_int_eq(msb_status(mc, NULL), MSB_OK);
	ex = raw_connect(d.sock);
	fair_send_request(ex, 1, "sandbox.exec", json_pack("{s:s, s:[s, s], s:i}", "sandbox",
			  jstr(r, "sandbox"), "command", "sleep", "4", "timeout_seconds", 30));
	/* The idle one is closed, then the C client's (idle since before the exec began)... */
	ck_assert(raw_is_closed(idle, FAIR_WAIT_MS));
	fair_wait_idle_closed(d.sock, 2);
	/* ...which the library replaces on its next call, transparently. */
	ck_assert_int_eq(msb_status(mc, NULL), MSB_OK);
	/* The exec (4 s, twice the timeout) is answered on its connection: never closed in flight. */
	json_decref(r);
	r = raw_recv(ex, 30000);
	ck_assert_ptr_nonnull(r);
	/* (Its exit code is the guest's business: it ran longer than the timeout, in flight.) */
	if (!json_object_get(r, "result") || jint(r, "result.duration_ms") < 2000) {
		char *text = json_dumps(r, JSON_COMPACT);

		msbd_dump_log(&d);
		ck_abort_msg("the exec was not answered whole: %s", text);
	}
	json_decref(r);
	/* The subscriber, idle-looking for longer than the timeout, is still there. */
	ck_assert(!raw_is_closed(sub, 0));
	/* Once answered, the exec's connection is idle and goes too. */
	ck_assert(raw_is_closed(ex, FAIR_WAIT_MS));
	close(sub), close(idle), close(ex);
	msb_conn_free(mc);
	r = call(d.sock, "sandbox.dispose", json_pack("{s:o}", "key", key), NULL, NULL);
	json_decref(r);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* Child, as A with limits.max_inflight_per_uid=1: an exec in flight on one
 * connection; once the parent saw it (byte on go), a daemon.status on a
 * second connection waits for it: dispatched only after the exec ended,
 * it counts A's calls in flight as 1 (itself), not 2. */
static int fair_inflight_child(const char *sock, int ready_fd, int go_fd)
{
	static const char status_req[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\"}\n";
	struct msb_conn *mc = NULL;
	json_t *key, *r = NULL, *a;
	char scope[64], c;
	int c1, c2, rc = 0;

	if (!fair_become(FAIR_UID_A))
		return 1;
	snprintf(scope, sizeof(scope), "%s-fair-inflight", hostile_run_id);
	key = json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "a");
	if (msb_connect(sock, &mc) != MSB_OK ||
	    msb_call(mc, "sandbox.acquire", json_pack("{s:O, s:o}", "key", key, "spec", hostile_spec()), &r) != MSB_OK)
		return 2;
	c1 = raw_connect(sock);
	c2 = raw_connect(sock);
	if (c1 < 0 || c2 < 0)
		return 3;
	{
		json_t *req = json_pack("{s:s, s:i, s:s, s:{s:s, s:[s, s], s:i}}", "jsonrpc", "2.0", "id", 1,
					"method", "sandbox.exec", "params", "sandbox",
					json_string_value(json_object_get(r, "sandbox")), "command", "sleep", "3",
					"timeout_seconds", 30);
		char *text = json_dumps(req, JSON_COMPACT);

		json_decref(req);
		if (!text || !fair_send(c1, text, strlen(text)) || !fair_send(c1, "\n", 1))
			return 4;
		free(text);
	}
	json_decref(r);
	if (write(ready_fd, "E", 1) != 1 || read(go_fd, &c, 1) != 1)
		return 5;
	if (!fair_send(c2, status_req, sizeof(status_req) - 1))
		return 6;
	r = raw_recv(c1, 30000);
	if (!r || !json_object_get(r, "result"))
		rc = 7;
	json_decref(r);
	r = raw_recv(c2, FAIR_WAIT_MS);
	a = r ? fair_by_uid(json_object_get(r, "result"), FAIR_UID_A) : NULL;
	if (!rc && (!a || jint(a, "in_flight") != 1))
		rc = 8;
	json_decref(r);
	if (msb_call(mc, "sandbox.dispose", json_pack("{s:o}", "key", key), NULL) != MSB_OK && !rc)
		rc = 9;
	msb_conn_free(mc);
	close(c1), close(c2);
	return rc;
}

/* A uid at limits.max_inflight_per_uid waits (no error) on every connection
 * of its own; others, root included, are answered meanwhile. */
START_TEST(fair_inflight_per_uid)
{
	struct msbd_proc d = { 0 };
	int ready[2], go[2];
	long end;
	pid_t pid;
	char c;

	fair_start(&d, (const char *const[]){ "limits.max_inflight_per_uid=1", NULL });
	json_decref(wait_engine_state(d.sock, "reachable", FAIR_ENGINE_WAIT_MS));
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(ready[0]), close(go[1]);
		_exit(fair_inflight_child(d.sock, ready[1], go[0]));
	}
	close(ready[1]), close(go[0]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	/* Root is answered while A's exec is in flight (A at its cap). */
	for (end = fair_now_ms() + FAIR_WAIT_MS;;) {
		json_t *st = call(d.sock, "daemon.status", NULL, NULL, NULL);
		json_t *a = fair_by_uid(st, FAIR_UID_A);
		bool seen = a && jint(a, "in_flight") == 1;

		json_decref(st);
		if (seen)
			break;
		ck_assert_msg(fair_now_ms() < end, "A's exec was never seen in flight");
		fair_sleep_ms(50);
	}
	ck_assert_int_eq(write(go[1], "G", 1), 1);
	ck_assert_int_eq(fair_wait_child(pid), 0);
	close(ready[0]), close(go[1]);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- finding 13 in miniature: fair_frame_share ---- */

#define FAIR_FRAME_CONNS     6
#define FAIR_FRAME_BYTES     (39 * FAIR_MIB / 10)   /* under max_frame_bytes (4 MiB) */
#define FAIR_FRAME_TIMEOUT   8000
#define FAIR_SHARE_BYTES     (6 * FAIR_MIB)
/* More than any socket buffer holds: the daemon read these bytes. */
#define FAIR_READ_BYTES      FAIR_MIB
#define FAIR_DEADLINE_SLACK_MS 3000   /* a renewed deadline would add a whole 8 s */

struct fair_frame_conn {
	long first_ms;     /* its first byte sent */
	long close_ms;     /* EOF seen (0: never) */
	size_t written;
	int timeout_said;  /* the daemon said FrameTimeout (1304) */
};

/* Writes as much of frame as the daemon takes, giving up after 200 ms
 * without progress. */
static size_t fair_write_some(int fd, const char *frame, size_t len)
{
	size_t done = 0;

	while (done < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		ssize_t k;

		if (poll(&pfd, 1, 200) <= 0)
			break;
		k = send(fd, frame + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0)
			break;
		done += (size_t)k;
	}
	return done;
}

/* Trickles a byte every 200 ms on each open connection and reads what the
 * daemon says until every one is closed (or the hang guard). */
static void fair_trickle(int *fds, struct fair_frame_conn *st, long guard_ms)
{
	long end = fair_now_ms() + guard_ms;
	int open = FAIR_FRAME_CONNS;

	while (open > 0 && fair_now_ms() < end) {
		struct pollfd pfd[FAIR_FRAME_CONNS];

		for (int i = 0; i < FAIR_FRAME_CONNS; i++) {
			pfd[i] = (struct pollfd){ .fd = st[i].close_ms ? -1 : fds[i], .events = POLLIN };
			if (!st[i].close_ms)
				(void)send(fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		if (poll(pfd, FAIR_FRAME_CONNS, 200) <= 0)
			continue;
		for (int i = 0; i < FAIR_FRAME_CONNS; i++) {
			char buf[4096];
			ssize_t k;

			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			k = recv(fds[i], buf, sizeof(buf) - 1, MSG_DONTWAIT);
			if (k > 0) {
				buf[k] = '\0';
				st[i].timeout_said |= strstr(buf, "1304") != NULL;
				continue;
			}
			if (k < 0 && errno == EAGAIN)
				continue;
			st[i].close_ms = fair_now_ms();
			open--;
		}
	}
}

/* Child, as A: unfinished frames on FAIR_FRAME_CONNS connections, then a
 * trickle; says 'W' on ready once written, then reports st[] on out. */
static int fair_frame_child(const char *sock, int ready_fd, int out_fd)
{
	static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\",\"params\":{\"pad\":\"";
	struct fair_frame_conn st[FAIR_FRAME_CONNS] = { 0 };
	int fds[FAIR_FRAME_CONNS];
	char *frame = malloc(FAIR_FRAME_BYTES);

	if (!frame || !fair_become(FAIR_UID_A))
		return 1;
	memset(frame, 'a', FAIR_FRAME_BYTES);
	memcpy(frame, head, sizeof(head) - 1);
	for (int i = 0; i < FAIR_FRAME_CONNS; i++) {
		fds[i] = raw_connect(sock);
		if (fds[i] < 0)
			return 2;
		st[i].first_ms = fair_now_ms();
		st[i].written = fair_write_some(fds[i], frame, FAIR_FRAME_BYTES);
	}
	free(frame);
	if (write(ready_fd, "W", 1) != 1)
		return 3;
	fair_trickle(fds, st, 4 * FAIR_FRAME_TIMEOUT);
	if (write(out_fd, st, sizeof(st)) != (ssize_t)sizeof(st))
		return 4;
	return 0;
}

/* Child, as B: while A holds its share, B's daemon.status is answered, and
 * says A holds at least its share (its frames are held at that moment). */
static int fair_frame_observer(const char *sock, uid_t uid)
{
	json_t *r, *a;
	int fd;

	if (!fair_become(uid))
		return 1;
	fd = raw_connect(sock);
	r = fd < 0 ? NULL : fair_status_on(fd);
	if (!r || !json_object_get(r, "result"))
		return 2;
	a = fair_by_uid(json_object_get(r, "result"), FAIR_UID_A);
	if (!a)
		return 3;
	if (jint(a, "buffered_bytes") < FAIR_SHARE_BYTES || !json_is_true(json_object_get(a, "over_share")))
		return 4;
	json_decref(r);
	close(fd);
	return 0;
}

/* One uid sending unfinished frames stalls only itself, and its frames
 * meet their deadline from their first byte: never renewed. */
START_TEST(fair_frame_share)
{
	struct fair_frame_conn st[FAIR_FRAME_CONNS];
	struct msbd_proc d = { 0 };
	int ready[2], out[2], read_ones = 0;
	char c = 0;
	json_t *s;
	pid_t pid;

	fair_start(&d, (const char *const[]){ "limits.max_frame_bytes=4M",
		"limits.buffer_budget_bytes=16M", "limits.uid_buffer_bytes=6M",
		"limits.frame_timeout_ms=8000", NULL });
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(out), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(ready[0]), close(out[0]);
		_exit(fair_frame_child(d.sock, ready[1], out[1]));
	}
	close(ready[1]), close(out[1]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	ck_assert_int_eq(fair_run_as(fair_frame_observer, d.sock, FAIR_UID_B), 0);
	ck_assert_int_eq(read(out[0], st, sizeof(st)), (ssize_t)sizeof(st));
	ck_assert_int_eq(fair_wait_child(pid), 0);
	for (int i = 0; i < FAIR_FRAME_CONNS; i++) {
		ck_assert_msg(st[i].close_ms > 0, "connection %d of A was never closed", i);
		ck_assert_msg(st[i].timeout_said, "connection %d of A closed without FrameTimeout", i);
		if (st[i].written < FAIR_READ_BYTES)
			continue;
		/* Read by the daemon while A was over its share: first byte + timeout. */
		read_ones++;
		ck_assert_msg(st[i].close_ms - st[i].first_ms <= FAIR_FRAME_TIMEOUT + FAIR_DEADLINE_SLACK_MS,
			      "connection %d of A closed %ld ms after its first byte (limit %d)", i,
			      st[i].close_ms - st[i].first_ms, FAIR_FRAME_TIMEOUT);
	}
	ck_assert_int_ge(read_ones, 2);
	s = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_null(fair_by_uid(s, FAIR_UID_A));
	json_decref(s);
	close(ready[0]), close(out[0]);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

TCase *hostile_server_tcase(void)
{
	TCase *tc = tcase_create("server");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, fair_uid_caps);
	tcase_add_test(tc, fair_idle_eviction);
	tcase_add_test(tc, fair_idle_timeout);
	tcase_add_test(tc, fair_inflight_per_uid);
	tcase_add_test(tc, fair_frame_share);
	return tc;
}
