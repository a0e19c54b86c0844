/* check_client.c — libmaf-sandbox and the maf-sandbox CLI against a fake
 * daemon: a pthread serving canned reply bytes on a temporary Unix socket
 * under a mkdtemp directory. Each test also checks that it leaves no file
 * descriptor behind.
 *
 * The CLI's source is built in (its parsers and formatters are static), its
 * main() renamed cli_main(); tests run it in their own forked process, with
 * stdout and stderr captured in files (or stderr on a pseudo-terminal). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "msb.h"
#include "slow.h"
#include "../../proto/msb-limits.h"

int cli_main(int argc, char **argv);
#define main cli_main
#include "../../client/cli.c"
#undef main

/* --- the fake daemon ----------------------------------------------------- */

#define FAKE_MAX_CHUNKS    8
#define FAKE_MAX_EXCHANGES 3
/* The fake never waits longer than this for the client, so a broken test
 * ends instead of hanging (a hang guard, stretched under valgrind: slow.h). */
#define FAKE_IO_WAIT_MS    (2000 * test_slow_factor())
/* Bytes the fake writes at once when flooding. */
#define FAKE_FLOOD_CHUNK   (1024 * 1024)

struct fake_reply {
	const char *chunks[FAKE_MAX_CHUNKS];  /* written in turn; NULL ends */
	int delay_ms;                         /* pause before each chunk but the first */
};

struct fake_script {
	int requests;  /* requests read, request i answered by replies[i]; 0 = 1 */
	struct fake_reply replies[FAKE_MAX_EXCHANGES];
	bool hold;     /* then keep the connection open until the client leaves */
	bool flood;    /* answer with MSB_FRAME_MAX_BYTES + 1 bytes and no LF */
	bool deaf;     /* never read: accept, then hold */
	bool signal_at_gate;  /* once served, wait for the fake's gate to open (at most
			       * FAKE_IO_WAIT_MS), then SIGTERM the thread that started it */
	bool signal_until_gate;  /* once served, SIGTERM that thread every 20 ms until
				  * the gate opens (at most FAKE_IO_WAIT_MS) */
};

struct fake {
	char dir[64];
	char path[128];
	int lfd;
	pthread_t thread;
	const struct fake_script *script;
	pthread_t owner;  /* the thread that started the fake */
	char *request[FAKE_MAX_EXCHANGES];  /* bytes of each request, LF included */
	size_t request_len[FAKE_MAX_EXCHANGES];
	int served;        /* set (atomically) once every reply was written */
	int gate;          /* opened (atomically) by the test: see signal_at_gate */
	bool gate_was_open;  /* the gate was open when the fake signalled */
	bool client_left;    /* a hold ended because the client closed, not the fake */
};

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool fake_wait(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, FAKE_IO_WAIT_MS) > 0;
}

/* Reads one request, up to and including its LF (never a byte of the
 * next: a client may send two back to back). NULL if none came. */
static char *fake_read_request(int fd, size_t *ret_len)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);

	while (!memchr(buf, '\n', len)) {
		ssize_t k;
		char *lf;

		if (len == cap)
			buf = realloc(buf, cap *= 2);
		if (!fake_wait(fd) || (k = recv(fd, buf + len, cap - len, MSG_PEEK)) <= 0) {
			free(buf);
			return NULL;
		}
		lf = memchr(buf + len, '\n', (size_t)k);
		if (lf)
			k = lf - (buf + len) + 1;
		k = recv(fd, buf + len, (size_t)k, 0);
		if (k <= 0) {
			free(buf);
			return NULL;
		}
		len += (size_t)k;
	}
	*ret_len = len;
	return buf;
}

static void fake_send(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void fake_reply(int fd, const struct fake_reply *reply)
{
	for (size_t i = 0; i < FAKE_MAX_CHUNKS && reply->chunks[i]; i++) {
		if (i > 0)
			sleep_ms(reply->delay_ms);
		fake_send(fd, reply->chunks[i], strlen(reply->chunks[i]));
	}
}

static void fake_flood(int fd)
{
	char *junk = malloc(FAKE_FLOOD_CHUNK);
	size_t left = MSB_FRAME_MAX_BYTES + 1;

	memset(junk, 'x', FAKE_FLOOD_CHUNK);
	while (left > 0) {
		size_t n = left < FAKE_FLOOD_CHUNK ? left : FAKE_FLOOD_CHUNK;
		ssize_t k = send(fd, junk, n, MSG_NOSIGNAL);

		if (k <= 0)
			break;
		left -= (size_t)k;
	}
	free(junk);
}

/* Waits (bounded) for the client to close its end, draining what it sends.
 * True if the client closed it (or it failed), false if the fake let go. */
static bool fake_hold(int fd)
{
	char buf[4096];
	int64_t end = now_ms() + FAKE_IO_WAIT_MS;   /* hang guard */

	while (now_ms() < end && fake_wait(fd))
		if (recv(fd, buf, sizeof(buf), 0) <= 0)
			return true;
	return false;
}

static void fake_serve(struct fake *f, int fd)
{
	const struct fake_script *s = f->script;
	int n = s->requests ? s->requests : 1;

	for (int i = 0; i < n; i++) {
		f->request[i] = fake_read_request(fd, &f->request_len[i]);
		if (!f->request[i])
			return;
		if (s->flood) {
			fake_flood(fd);
			return;
		}
		fake_reply(fd, &s->replies[i]);
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd;

	if (!fake_wait(f->lfd))
		return NULL;
	fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (!f->script->deaf)
		fake_serve(f, fd);
	__atomic_store_n(&f->served, 1, __ATOMIC_RELEASE);
	if (f->script->signal_at_gate) {
		int64_t end = now_ms() + FAKE_IO_WAIT_MS;   /* hang guard */

		while (!__atomic_load_n(&f->gate, __ATOMIC_ACQUIRE) && now_ms() < end)
			sleep_ms(5);
		f->gate_was_open = __atomic_load_n(&f->gate, __ATOMIC_ACQUIRE);
		pthread_kill(f->owner, SIGTERM);
	}
	if (f->script->signal_until_gate) {
		int64_t end = now_ms() + FAKE_IO_WAIT_MS;   /* hang guard */

		while (!__atomic_load_n(&f->gate, __ATOMIC_ACQUIRE) && now_ms() < end) {
			pthread_kill(f->owner, SIGTERM);
			sleep_ms(20);
		}
	}
	if (f->script->hold || f->script->deaf)
		f->client_left = fake_hold(fd);
	close(fd);
	return NULL;
}

/* A Unix stream socket bound to path, listening when asked. */
static int socket_at(const char *path, bool listening)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	int fd;

	ck_assert_uint_lt(n, sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, n + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (listening)
		ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

/* A temporary directory, for a fake's socket or a connect test's files. */
static void tmpdir_make(char *dir, size_t size)
{
	snprintf(dir, size, "/tmp/check-client-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void fake_start(struct fake *f, const struct fake_script *script)
{
	*f = (struct fake){ .script = script, .owner = pthread_self() };
	tmpdir_make(f->dir, sizeof(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/d.sock", f->dir);
	f->lfd = socket_at(f->path, true);
	ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

/* Waits for the fake to finish and removes its socket; the requests it
 * received stay readable until fake_free(). */
static void fake_stop(struct fake *f)
{
	pthread_join(f->thread, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
}

static void fake_free(struct fake *f)
{
	for (size_t i = 0; i < FAKE_MAX_EXCHANGES; i++)
		free(f->request[i]);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static bool rc_is_fatal(int rc)
{
	return rc == MSB_E_IO || rc == MSB_E_PROTO || rc == MSB_E_TIMEOUT || rc == MSB_E_CLOSED;
}

/* Whether the last run_call's client closed a held connection before the
 * fake let go of it. */
static bool run_call_client_left;

/* One daemon.status call with params (stolen) against a fake following
 * script. After a fatal error, checks the connection refuses further calls.
 * Checks no fd is left. Returns msb_call's answer. */
static int run_call(const struct fake_script *script, int timeout_ms, json_t *params,
		    json_t **ret_result)
{
	int fds = count_fds();
	struct msb_conn *conn = NULL;
	struct fake f;
	int rc;

	fake_start(&f, script);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	if (timeout_ms)
		msb_set_timeout(conn, timeout_ms);
	rc = msb_call(conn, "daemon.status", params, ret_result);
	if (rc_is_fatal(rc))
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_CLOSED);
	ck_assert_ptr_null(msb_conn_free(conn));
	fake_stop(&f);
	run_call_client_left = f.client_left;
	fake_free(&f);
	ck_assert_int_eq(count_fds(), fds);
	return rc;
}

#define REPLY_OK(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"result\":{\"ok\":true}}\n"
#define NOTIFICATION "{\"jsonrpc\":\"2.0\",\"method\":\"sandbox.event\",\"params\":{\"n\":1}}\n"
#define ONE(s) { .replies = { { .chunks = { s } } } }

/* --- results ------------------------------------------------------------- */

struct reply_row {
	const char *name;
	struct fake_script script;
};

static const struct reply_row result_rows[] = {
	{ "one write", ONE(REPLY_OK(1)) },
	{ "split in three writes", { .replies = { { .chunks = {
		"{\"jsonrpc\":\"2.0\",", "\"id\":1,\"result\":{\"o", "k\":true}}\n" },
		.delay_ms = 40 } } } },
	{ "LF in a write of its own", { .replies = { { .chunks = {
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}", "\n" },
		.delay_ms = 40 } } } },
	{ "CRLF line end", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\r\n") },
	{ "blank lines first", ONE("\n\r\n" REPLY_OK(1)) },
	{ "notification first, same write", ONE(NOTIFICATION REPLY_OK(1)) },
	{ "notification first, own write", { .replies = { { .chunks = {
		NOTIFICATION, REPLY_OK(1) }, .delay_ms = 20 } } } },
	{ "two notifications, split mid-frame", { .replies = { { .chunks = {
		NOTIFICATION "{\"jsonrpc\":\"2.0\",\"meth", "od\":\"x\"}\n" REPLY_OK(1) },
		.delay_ms = 20 } } } },
	{ "notification without jsonrpc member", ONE("{\"method\":\"x\"}\n" REPLY_OK(1)) },
	{ "notification after the reply", ONE(REPLY_OK(1) NOTIFICATION) },
};

START_TEST(test_result_returned)
{
	const struct reply_row *row = &result_rows[_i];
	json_t *want = json_pack("{s:b}", "ok", 1);
	json_t *result = NULL;

	ck_assert_msg(run_call(&row->script, 0, NULL, &result) == MSB_OK, "%s", row->name);
	ck_assert_msg(json_equal(result, want), "%s: wrong result", row->name);
	json_decref(result);
	json_decref(want);
}
END_TEST

START_TEST(test_result_may_be_discarded)
{
	const struct fake_script s = ONE(REPLY_OK(1));

	ck_assert_int_eq(run_call(&s, 0, NULL, NULL), MSB_OK);
}
END_TEST

/* --- protocol errors ----------------------------------------------------- */

static const struct reply_row malformed_rows[] = {
	{ "not JSON", ONE("{not json\n") },
	{ "an array", ONE("[" REPLY_OK(1) "]\n") },
	{ "a string", ONE("\"hello\"\n") },
	{ "no jsonrpc member", ONE("{\"id\":1,\"result\":{}}\n") },
	{ "jsonrpc 1.0", ONE("{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}\n") },
	{ "no id and no method", ONE("{\"jsonrpc\":\"2.0\",\"result\":{}}\n") },
	{ "neither result nor error", ONE("{\"jsonrpc\":\"2.0\",\"id\":1}\n") },
	{ "both result and error", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},"
				       "\"error\":{\"code\":1,\"message\":\"m\"}}\n") },
	{ "error without code", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"m\"}}\n") },
	{ "error code a string", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,"
				     "\"error\":{\"code\":\"1\",\"message\":\"m\"}}\n") },
	{ "error without message", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}\n") },
	{ "error not an object", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"boom\"}\n") },
	{ "garbage after a notification", ONE(NOTIFICATION "}{\n") },
	{ "a frame over MSB_FRAME_MAX_BYTES", { .flood = true } },
};

START_TEST(test_malformed_reply)
{
	const struct reply_row *row = &malformed_rows[_i];
	json_t *result = NULL;

	ck_assert_msg(run_call(&row->script, 0, NULL, &result) == MSB_E_PROTO, "%s", row->name);
	ck_assert_ptr_null(result);
}
END_TEST

static const struct reply_row wrong_id_rows[] = {
	{ "an earlier id", ONE(REPLY_OK(0)) },
	{ "a later id", ONE(REPLY_OK(2)) },
	{ "the id as a string", ONE("{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n") },
	{ "the id as a real", ONE("{\"jsonrpc\":\"2.0\",\"id\":1.0,\"result\":{}}\n") },
	{ "a null id on a result", ONE("{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}\n") },
	{ "another id on an error", ONE("{\"jsonrpc\":\"2.0\",\"id\":7,"
					"\"error\":{\"code\":1000,\"message\":\"m\"}}\n") },
};

START_TEST(test_wrong_id)
{
	const struct reply_row *row = &wrong_id_rows[_i];

	ck_assert_msg(run_call(&row->script, 0, NULL, NULL) == MSB_E_PROTO, "%s", row->name);
}
END_TEST

/* --- the daemon closes ----------------------------------------------------
 * A daemon that hangs up before the reply is MSB_E_CLOSED (not MSB_E_IO):
 * end of stream is an orderly close, whatever was half-received. */

static const struct reply_row closed_rows[] = {
	{ "no reply at all", { .replies = { { .chunks = { NULL } } } } },
	{ "half a reply", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"res") },
	{ "only a notification", ONE(NOTIFICATION) },
};

START_TEST(test_daemon_closes)
{
	const struct reply_row *row = &closed_rows[_i];

	ck_assert_msg(run_call(&row->script, 0, NULL, NULL) == MSB_E_CLOSED, "%s", row->name);
}
END_TEST

/* --- the daemon closes an idle connection ---------------------------------
 * The daemon closes a connection idle for limits.idle_timeout_ms; the next
 * call connects again, transparently, and sends its request once. */

#define SHUTTING_DOWN_1 "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1303," \
	"\"message\":\"the daemon is shutting down\"}}\n"

struct idle_fake {
	struct fake f;
	int closed_pipe[2];     /* the fake writes a byte once it closed the first connection */
	bool stop_listening;    /* after that close, stop listening (the reconnect fails) */
	bool shutting_down;     /* answer the first call ShuttingDown: no idle close then */
	char *second;           /* the request read on the second connection */
	int second_conns;       /* connections accepted after the first */
	bool backlog_full;      /* after that close, fill the backlog and accept no more */
	int fillers[8];         /* the connections that fill it (-1: none) */
	int done_pipe[2];       /* the test writes a byte once its calls returned */
};

static void *idle_fake_main(void *arg)
{
	struct idle_fake *t = arg;
	size_t len;
	int fd;

	if (!fake_wait(t->f.lfd) || (fd = accept4(t->f.lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		return NULL;
	t->f.request[0] = fake_read_request(fd, &t->f.request_len[0]);
	if (t->shutting_down)
		fake_send(fd, SHUTTING_DOWN_1, strlen(SHUTTING_DOWN_1));
	else
		fake_send(fd, REPLY_OK(1), strlen(REPLY_OK(1)));
	close(fd);   /* idle: nothing in flight */
	if (t->backlog_full) {
		/* A connect to it now waits (blocking) or is refused EAGAIN. */
		if (listen(t->f.lfd, 0) < 0)
			return NULL;
		for (size_t i = 0; i < sizeof(t->fillers) / sizeof(t->fillers[0]); i++) {
			struct sockaddr_un sa = { .sun_family = AF_UNIX };

			if (strlen(t->f.path) >= sizeof(sa.sun_path))
				return NULL;
			memcpy(sa.sun_path, t->f.path, strlen(t->f.path) + 1);
			t->fillers[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
			if (connect(t->fillers[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == EAGAIN) {
				close(t->fillers[i]);
				t->fillers[i] = -1;
				break;
			}
		}
		(void)!write(t->closed_pipe[1], "x", 1);
		return NULL;
	}
	if (t->stop_listening) {
		close(t->f.lfd);
		unlink(t->f.path);
		t->f.lfd = -1;
	}
	(void)!write(t->closed_pipe[1], "x", 1);
	if (t->stop_listening)
		return NULL;
	{
		/* A reconnect (wanted or not) connects before the test's calls
		 * return: once they did and nothing is pending, none came. */
		struct pollfd pfd[2] = { { .fd = t->f.lfd, .events = POLLIN },
					 { .fd = t->done_pipe[0], .events = POLLIN } };

		if (poll(pfd, 2, FAKE_IO_WAIT_MS) <= 0 || !(pfd[0].revents & POLLIN) ||
		    (fd = accept4(t->f.lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			return NULL;
	}
	t->second_conns++;
	t->second = fake_read_request(fd, &len);
	fake_send(fd, REPLY_OK(2), strlen(REPLY_OK(2)));
	fake_hold(fd);
	close(fd);
	return NULL;
}

START_TEST(test_idle_close_reconnects)
{
	static const struct fake_script script = { 0 };
	int fds = count_fds();
	struct msb_conn *conn = NULL;
	struct idle_fake t;
	json_t *r = NULL;
	char c;

	/* _i: 0 replaced, 1 the reconnect fails, 2 after ShuttingDown, 3 subscribed,
	 * 4 the reconnect meets a full backlog. */
	t = (struct idle_fake){ .f = { .script = &script }, .stop_listening = _i == 1, .shutting_down = _i == 2,
				.backlog_full = _i == 4 };
	for (size_t i = 0; i < sizeof(t.fillers) / sizeof(t.fillers[0]); i++)
		t.fillers[i] = -1;
	tmpdir_make(t.f.dir, sizeof(t.f.dir));
	snprintf(t.f.path, sizeof(t.f.path), "%s/d.sock", t.f.dir);
	t.f.lfd = socket_at(t.f.path, true);
	ck_assert_int_eq(pipe2(t.closed_pipe, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(t.done_pipe, O_CLOEXEC), 0);
	ck_assert_int_eq(pthread_create(&t.f.thread, NULL, idle_fake_main, &t), 0);
	ck_assert_int_eq(msb_connect(t.f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, _i == 3 ? "events.subscribe" : "daemon.status", NULL, NULL),
			 _i == 2 ? MSB_E_REMOTE : MSB_OK);
	ck_assert_int_eq(read(t.closed_pipe[0], &c, 1), 1);
	if (_i == 0) {
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, &r), MSB_OK);
		ck_assert(json_is_true(json_object_get(r, "ok")));
		json_decref(r);
	} else if (_i == 4) {
		/* The reconnect meets a full backlog: it ends at the call's timeout. */
		msb_set_timeout(conn, 300);
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_TIMEOUT);
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_CLOSED);
	} else if (_i == 1) {
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_CONNECT);
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_CLOSED);
	} else {
		/* After ShuttingDown the close is no idle close; a subscribed
		 * connection lost its events: neither is replaced. */
		ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_E_CLOSED);
	}
	ck_assert_ptr_null(msb_conn_free(conn));
	ck_assert_int_eq(write(t.done_pipe[1], "x", 1), 1);
	pthread_join(t.f.thread, NULL);
	close(t.done_pipe[0]);
	close(t.done_pipe[1]);
	for (size_t i = 0; i < sizeof(t.fillers) / sizeof(t.fillers[0]); i++)
		if (t.fillers[i] >= 0)
			close(t.fillers[i]);
	/* One request on each connection: nothing was sent twice. */
	ck_assert_ptr_nonnull(t.f.request[0]);
	ck_assert_int_eq(t.second_conns, _i == 0 ? 1 : 0);
	if (_i == 0)
		ck_assert_ptr_nonnull(strstr(t.second, "\"id\":2"));
	free(t.second);
	if (t.f.lfd >= 0)
		close(t.f.lfd);
	unlink(t.f.path);
	rmdir(t.f.dir);
	fake_free(&t.f);
	close(t.closed_pipe[0]);
	close(t.closed_pipe[1]);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/* --- the daemon's errors ------------------------------------------------- */

#define ENGINE_DOWN "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1000," \
	"\"message\":\"the Docker engine is not reachable\"," \
	"\"data\":{\"type\":\"EngineUnavailable\",\"endpoint\":\"unix:///x.sock\"}}}\n"

START_TEST(test_remote_error_readable)
{
	const struct fake_script s = {
		.requests = 2,
		.replies = { { .chunks = { NOTIFICATION ENGINE_DOWN } }, { .chunks = { REPLY_OK(2) } } },
	};
	int fds = count_fds();
	struct msb_conn *conn;
	json_t *result = NULL;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_engine(conn, &result), MSB_E_REMOTE);
	ck_assert_ptr_null(result);
	ck_assert_int_eq(msb_last_error_code(conn), 1000);
	ck_assert_str_eq(msb_last_error_type(conn), "EngineUnavailable");
	ck_assert_str_eq(msb_last_error_message(conn), "the Docker engine is not reachable");
	ck_assert_str_eq(json_string_value(json_object_get(msb_last_error_data(conn), "endpoint")),
			 "unix:///x.sock");
	/* The connection stays usable, and the next call clears the error. */
	ck_assert_int_eq(msb_engine(conn, &result), MSB_OK);
	ck_assert_int_eq(msb_last_error_code(conn), 0);
	ck_assert_ptr_null(msb_last_error_type(conn));
	ck_assert_ptr_null(msb_last_error_message(conn));
	ck_assert_ptr_null(msb_last_error_data(conn));
	json_decref(result);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

struct remote_row {
	const char *name;
	struct fake_script script;
	int code;
	const char *type;     /* NULL: no data.type */
	const char *message;
	bool has_data;
};

static const struct remote_row remote_rows[] = {
	{ "no data", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,"
			 "\"message\":\"no such method\"}}\n"),
	  -32601, NULL, "no such method", false },
	{ "data without type", ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1303,"
				   "\"message\":\"bye\",\"data\":{\"n\":1}}}\n"),
	  1303, NULL, "bye", true },
	/* An error with id null answers the one call in flight (e.g. a daemon
	 * refusing the connection before it read a request). */
	{ "null id", ONE("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":1302,"
			 "\"message\":\"too many connections\","
			 "\"data\":{\"type\":\"TooManyConnections\"}}}\n"),
	  1302, "TooManyConnections", "too many connections", true },
};

START_TEST(test_remote_error_variants)
{
	const struct remote_row *row = &remote_rows[_i];
	int fds = count_fds();
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &row->script);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_msg(msb_status(conn, NULL) == MSB_E_REMOTE, "%s", row->name);
	ck_assert_int_eq(msb_last_error_code(conn), row->code);
	ck_assert_pstr_eq(msb_last_error_type(conn), row->type);
	ck_assert_str_eq(msb_last_error_message(conn), row->message);
	ck_assert_int_eq(msb_last_error_data(conn) != NULL, row->has_data);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_remote_error_after_hangup)
{
	/* The daemon says why and hangs up without reading the request: the
	 * client reads the reason even though its write failed. */
	int fds = count_fds();
	struct msb_conn *conn;
	char dir[64], path[128];
	int lfd, cfd;
	const char *why = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":1302,"
			  "\"message\":\"too many connections\"}}\n";

	tmpdir_make(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/d.sock", dir);
	lfd = socket_at(path, true);
	ck_assert_int_eq(msb_connect(path, &conn), MSB_OK);
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(cfd, 0);
	fake_send(cfd, why, strlen(why));
	close(cfd);
	ck_assert_int_eq(msb_status(conn, NULL), MSB_E_REMOTE);
	ck_assert_int_eq(msb_last_error_code(conn), 1302);
	ck_assert_int_eq(msb_status(conn, NULL), MSB_E_CLOSED);
	msb_conn_free(conn);
	close(lfd);
	unlink(path);
	rmdir(dir);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/* --- timeouts ------------------------------------------------------------ */

#define TIMEOUT_MS 100

/* A request bigger than any socket buffer, so a deaf daemon blocks the send. */
#define BIG_PARAM_BYTES (8 * 1024 * 1024)

static json_t *big_params(void)
{
	char *s = malloc(BIG_PARAM_BYTES + 1);
	json_t *params;

	memset(s, 'a', BIG_PARAM_BYTES);
	s[BIG_PARAM_BYTES] = '\0';
	params = json_pack("{s:s}", "blob", s);
	free(s);
	return params;
}

struct timeout_row {
	const char *name;
	struct fake_script script;
	bool big;
};

static const struct timeout_row timeout_rows[] = {
	{ "no reply", { .replies = { { .chunks = { NULL } } }, .hold = true }, false },
	{ "only a notification", { .replies = { { .chunks = { NOTIFICATION } } }, .hold = true },
	  false },
	{ "half a reply", { .replies = { { .chunks = { "{\"jsonrpc\":\"2.0\"," } } }, .hold = true },
	  false },
	{ "request never read", { .deaf = true }, true },
};

/* The call's own deadline ends it: MSB_E_TIMEOUT, the client gone before
 * the fake let go (it holds the connection FAKE_IO_WAIT_MS, then closes
 * it), and not before the deadline. */
START_TEST(test_timeout)
{
	const struct timeout_row *row = &timeout_rows[_i];
	int64_t start = now_ms(), took;
	int rc;

	rc = run_call(&row->script, TIMEOUT_MS, row->big ? big_params() : NULL, NULL);

	took = now_ms() - start;
	ck_assert_msg(rc == MSB_E_TIMEOUT, "%s: %s", row->name, msb_strerror(rc));
	ck_assert_msg(run_call_client_left, "%s: the fake let go first", row->name);
	ck_assert_int_ge(took, TIMEOUT_MS);   /* not early */
}
END_TEST

START_TEST(test_timeout_spans_the_whole_call)
{
	/* Bytes that keep trickling in do not extend the deadline. */
	const struct fake_script s = { .replies = { { .chunks = {
		"{", "\"jsonrpc\"", ":", "\"2.0\"", ",", "\"id\":1", NULL }, .delay_ms = 40 } },
		.hold = true };

	ck_assert_int_eq(run_call(&s, TIMEOUT_MS, NULL, NULL), MSB_E_TIMEOUT);
}
END_TEST

/* --- the request on the wire --------------------------------------------- */

/* Parses the request the fake received, checking the frame and envelope:
 * one compact line, jsonrpc "2.0", an integer id, the method, and nothing
 * else but params. Returns it (new reference). */
static json_t *check_request(const char *bytes, size_t len, const char *method)
{
	json_t *req;
	json_error_t jerr;

	ck_assert_ptr_nonnull(bytes);
	ck_assert_uint_ge(len, 2);
	ck_assert_int_eq(bytes[len - 1], '\n');
	ck_assert_ptr_eq(memchr(bytes, '\n', len), bytes + len - 1);
	req = json_loadb(bytes, len - 1, JSON_REJECT_DUPLICATES, &jerr);
	ck_assert_msg(json_is_object(req), "request is not a JSON object: %s", jerr.text);
	ck_assert_str_eq(json_string_value(json_object_get(req, "jsonrpc")), "2.0");
	ck_assert(json_is_integer(json_object_get(req, "id")));
	ck_assert_str_eq(json_string_value(json_object_get(req, "method")), method);
	ck_assert_uint_eq(json_object_size(req), json_object_get(req, "params") ? 4 : 3);
	return req;
}

START_TEST(test_request_without_params)
{
	const struct fake_script s = ONE(REPLY_OK(1));
	struct msb_conn *conn;
	struct fake f;
	json_t *req;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	req = check_request(f.request[0], f.request_len[0], "daemon.status");
	ck_assert_ptr_null(json_object_get(req, "params"));
	json_decref(req);
	fake_free(&f);
}
END_TEST

START_TEST(test_request_with_params)
{
	const struct fake_script s = ONE(REPLY_OK(1));
	json_t *params = json_pack("{s:i, s:s, s:[i]}", "a", 1, "b", "line\nbreak", "c", 2);
	struct msb_conn *conn;
	struct fake f;
	json_t *req;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "sandbox.exec", json_incref(params), NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	req = check_request(f.request[0], f.request_len[0], "sandbox.exec");
	ck_assert(json_equal(json_object_get(req, "params"), params));
	json_decref(req);
	json_decref(params);
	fake_free(&f);
}
END_TEST

START_TEST(test_request_ids_increase)
{
	/* The first reply's write also starts a notification that the second
	 * write ends: bytes beyond a reply are kept for the next call. */
	const struct fake_script s = {
		.requests = 2,
		.replies = { { .chunks = { REPLY_OK(1) "{\"jsonrpc\":\"2.0\",\"met" } },
			     { .chunks = { "hod\":\"x\"}\n" REPLY_OK(2) } } },
	};
	struct msb_conn *conn;
	struct fake f;
	json_t *r1, *r2;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	r1 = check_request(f.request[0], f.request_len[0], "daemon.status");
	r2 = check_request(f.request[1], f.request_len[1], "daemon.status");
	ck_assert_int_eq(json_integer_value(json_object_get(r2, "id")),
			 json_integer_value(json_object_get(r1, "id")) + 1);
	json_decref(r1);
	json_decref(r2);
	fake_free(&f);
}
END_TEST

START_TEST(test_request_big_arrives_whole)
{
	/* Far beyond one socket buffer: the client must finish partial writes. */
	const struct fake_script s = ONE(REPLY_OK(1));
	json_t *params = big_params();
	struct msb_conn *conn;
	struct fake f;
	json_t *req;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "files.put", json_incref(params), NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	req = check_request(f.request[0], f.request_len[0], "files.put");
	ck_assert(json_equal(json_object_get(req, "params"), params));
	json_decref(req);
	json_decref(params);
	fake_free(&f);
}
END_TEST

struct shorthand_row {
	int (*fn)(struct msb_conn *, json_t **);
	const char *method;
};

static const struct shorthand_row shorthand_rows[] = {
	{ msb_describe, "daemon.describe" },
	{ msb_status, "daemon.status" },
	{ msb_engine, "daemon.engine" },
};

START_TEST(test_request_shorthands)
{
	const struct shorthand_row *row = &shorthand_rows[_i];
	const struct fake_script s = ONE(REPLY_OK(1));
	struct msb_conn *conn;
	json_t *result = NULL, *req;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(row->fn(conn, &result), MSB_OK);
	ck_assert(json_is_true(json_object_get(result, "ok")));
	json_decref(result);
	msb_conn_free(conn);
	fake_stop(&f);
	req = check_request(f.request[0], f.request_len[0], row->method);
	ck_assert_ptr_null(json_object_get(req, "params"));
	json_decref(req);
	fake_free(&f);
}
END_TEST

/* --- bad arguments ------------------------------------------------------- */

START_TEST(test_bad_arguments)
{
	const struct fake_script s = ONE(REPLY_OK(1));
	int fds = count_fds();
	struct msb_conn *conn;
	struct fake f;

	ck_assert_int_eq(msb_call(NULL, "daemon.status", json_object(), NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_wait_notify(NULL, 0), MSB_E_INVAL);
	ck_assert_int_eq(msb_wait_notify(NULL, -1), MSB_E_INVAL);
	ck_assert_ptr_null(msb_conn_free(NULL));
	ck_assert_int_eq(msb_last_error_code(NULL), 0);
	ck_assert_ptr_null(msb_last_error_type(NULL));
	ck_assert_ptr_null(msb_last_error_message(NULL));
	ck_assert_ptr_null(msb_last_error_data(NULL));
	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	/* Refused before anything is sent; the connection stays usable. */
	ck_assert_int_eq(msb_call(conn, NULL, json_object(), NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call(conn, "daemon.status", json_array(), NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call(conn, "daemon.status", json_integer(1), NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call(conn, "bad\xff" "utf8", NULL, NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/* --- connecting ---------------------------------------------------------- */

enum connect_target { TARGET_MISSING, TARGET_NO_LISTENER, TARGET_REGULAR_FILE, TARGET_UNDER_FILE };

struct connect_row {
	const char *name;
	enum connect_target target;
	int err;
};

static const struct connect_row connect_rows[] = {
	{ "missing socket", TARGET_MISSING, ENOENT },
	{ "socket with no listener", TARGET_NO_LISTENER, ECONNREFUSED },
	{ "regular file", TARGET_REGULAR_FILE, ECONNREFUSED },
	{ "path under a regular file", TARGET_UNDER_FILE, ENOTDIR },
};

/* Makes what the row names under dir; returns the path to connect to. */
static void connect_target_make(enum connect_target t, const char *dir, char *path, size_t size)
{
	int fd;

	snprintf(path, size, "%s/x", dir);
	switch (t) {
	case TARGET_MISSING:
		return;
	case TARGET_NO_LISTENER:
		close(socket_at(path, false));
		return;
	case TARGET_REGULAR_FILE:
	case TARGET_UNDER_FILE:
		fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
		if (t == TARGET_UNDER_FILE)
			snprintf(path, size, "%s/x/y", dir);
		return;
	}
}

START_TEST(test_connect_fails)
{
	const struct connect_row *row = &connect_rows[_i];
	struct msb_conn *conn = NULL;
	char dir[64], path[128];
	int fds = count_fds();

	tmpdir_make(dir, sizeof(dir));
	connect_target_make(row->target, dir, path, sizeof(path));
	errno = 0;
	ck_assert_msg(msb_connect(path, &conn) == MSB_E_CONNECT, "%s", row->name);
	ck_assert_msg(errno == row->err, "%s: errno %d, want %d", row->name, errno, row->err);
	ck_assert_ptr_null(conn);
	snprintf(path, sizeof(path), "%s/x", dir);
	unlink(path);
	rmdir(dir);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_connect_bad_path)
{
	char longpath[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	struct msb_conn *conn = NULL;

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	ck_assert_int_eq(msb_connect(longpath, &conn), MSB_E_INVAL);
	/* The longest that fits is tried (and is missing). */
	longpath[sizeof(longpath) - 2] = '\0';
	ck_assert_int_eq(msb_connect(longpath, &conn), MSB_E_CONNECT);
	ck_assert_int_eq(msb_connect("", &conn), MSB_E_INVAL);
	ck_assert_ptr_null(conn);
}
END_TEST

START_TEST(test_connect_default_path)
{
	const struct fake_script s = ONE(REPLY_OK(1));
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &s);
	setenv("MAF_SANDBOX_SOCKET", f.path, 1);
	ck_assert_int_eq(msb_connect(NULL, &conn), MSB_OK);
	ck_assert_int_eq(msb_status(conn, NULL), MSB_OK);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

/* --- the default socket path --------------------------------------------- */

/* Effective uid for rows that need "not root" when the suite runs as root. */
#define UNPRIVILEGED_UID 65534

struct default_path_row {
	const char *socket_env;  /* MAF_SANDBOX_SOCKET; NULL = unset */
	const char *xdg_env;     /* XDG_RUNTIME_DIR; NULL = unset; "@own": a directory with a
				  * socket maf-sandbox.sock in it; "@none": one without; "@file":
				  * one with a regular file of that name */
	bool root;               /* effective uid 0 */
	const char *want;        /* "@own": that directory's socket */
};

#define SYSTEM_SOCKET MSB_DEFAULT_SOCKET

static const struct default_path_row default_path_rows[] = {
	{ "/tmp/a.sock", NULL, false, "/tmp/a.sock" },
	{ "/tmp/a.sock", "@own", false, "/tmp/a.sock" },
	{ "/tmp/a.sock", "@own", true, "/tmp/a.sock" },
	{ "", "@own", false, "@own" },
	{ "", NULL, true, SYSTEM_SOCKET },
	{ NULL, NULL, true, SYSTEM_SOCKET },
	{ NULL, "@own", true, SYSTEM_SOCKET },
	{ NULL, "@own", false, "@own" },
	/* No daemon of the user's own: the system's, which its group may use. */
	{ NULL, "@none", false, SYSTEM_SOCKET },
	{ NULL, "@file", false, SYSTEM_SOCKET },
	{ NULL, "/nonexistent-runtime-dir", false, SYSTEM_SOCKET },
	{ NULL, "", false, SYSTEM_SOCKET },
	{ NULL, NULL, false, SYSTEM_SOCKET },
};

static void env_put(const char *name, const char *value)
{
	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
}

START_TEST(test_default_socket_path)
{
	const struct default_path_row *row = &default_path_rows[_i];
	bool was_root = geteuid() == 0;
	char dir[64] = "", own[128] = "", *path;
	const char *xdg = row->xdg_env;

	/* A row for root can only run as root; a row for another user drops
	 * the effective uid for the call when the suite runs as root. */
	if (row->root && !was_root)
		return;
	if (xdg && xdg[0] == '@') {
		tmpdir_make(dir, sizeof(dir));
		ck_assert_int_eq(chmod(dir, 0755), 0);  /* searchable by the unprivileged uid */
		snprintf(own, sizeof(own), "%s/maf-sandbox.sock", dir);
		if (strcmp(xdg, "@own") == 0)
			close(socket_at(own, false));
		else if (strcmp(xdg, "@file") == 0)
			close(open(own, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
		xdg = dir;
	}
	env_put("MAF_SANDBOX_SOCKET", row->socket_env);
	env_put("XDG_RUNTIME_DIR", xdg);
	if (!row->root && was_root)
		ck_assert_int_eq(seteuid(UNPRIVILEGED_UID), 0);
	path = msb_default_socket_path();
	if (!row->root && was_root)
		ck_assert_int_eq(seteuid(0), 0);
	ck_assert_str_eq(path, strcmp(row->want, "@own") == 0 ? own : row->want);
	free(path);
	if (dir[0]) {
		unlink(own);
		ck_assert_int_eq(rmdir(dir), 0);
	}
}
END_TEST

/* Nothing listens on the default: a connection error, nothing left open. */
START_TEST(test_connect_default_nobody_listens)
{
	struct msb_conn *conn = NULL;
	char dir[64], path[128];
	int fds = count_fds();

	tmpdir_make(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/nobody.sock", dir);
	env_put("MAF_SANDBOX_SOCKET", path);
	ck_assert_int_eq(msb_connect(NULL, &conn), MSB_E_CONNECT);
	ck_assert_ptr_null(conn);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* --- msb_strerror -------------------------------------------------------- */

static const int all_codes[] = {
	MSB_OK, MSB_E_NOMEM, MSB_E_INVAL, MSB_E_CONNECT, MSB_E_IO,
	MSB_E_PROTO, MSB_E_REMOTE, MSB_E_TIMEOUT, MSB_E_CLOSED,
};

START_TEST(test_strerror_distinct)
{
	const char *unknown = msb_strerror(-1000);

	ck_assert_ptr_nonnull(unknown);
	for (size_t i = 0; i < ELEMENTSOF(all_codes); i++) {
		const char *s = msb_strerror(all_codes[i]);

		ck_assert_ptr_nonnull(s);
		ck_assert_uint_gt(strlen(s), 0);
		ck_assert_str_ne(s, unknown);
		for (size_t j = 0; j < i; j++)
			ck_assert_str_ne(s, msb_strerror(all_codes[j]));
	}
}
END_TEST

START_TEST(test_strerror_unknown)
{
	static const int unknown[] = { 1, -9, -1000, INT32_MIN, INT32_MAX };

	for (size_t i = 0; i < ELEMENTSOF(unknown); i++)
		ck_assert_str_eq(msb_strerror(unknown[i]), "unknown error");
}
END_TEST

/* --- notifications ------------------------------------------------------- */

#define NOTIFY_MAX 4
#define PULL_NOTE(status) "{\"jsonrpc\":\"2.0\",\"method\":\"sandbox.pull_progress\"," \
	"\"params\":{\"name\":\"n\",\"image\":\"alpine:3\",\"status\":\"" status "\"}}\n"

/* What a hook saw: each method and params (kept with json_incref). */
struct notify_log {
	int n;
	char *method[NOTIFY_MAX];
	json_t *params[NOTIFY_MAX];
	struct msb_conn *conn;  /* for a hook that calls back */
	int nested_rc;
};

static void notify_log_free(struct notify_log *log)
{
	for (int i = 0; i < log->n; i++) {
		free(log->method[i]);
		json_decref(log->params[i]);
	}
}

static void record_cb(const char *method, json_t *params, void *arg)
{
	struct notify_log *log = arg;

	ck_assert_int_lt(log->n, NOTIFY_MAX);
	log->method[log->n] = strdup(method);
	log->params[log->n] = json_incref(params);
	log->n++;
}

struct notify_row {
	const char *name;
	struct fake_script script;
	int n;
	const char *method[NOTIFY_MAX];
	const char *params[NOTIFY_MAX];  /* JSON text; NULL = the hook gets NULL */
};

static const struct notify_row notify_rows[] = {
	{ "one before the reply", ONE(PULL_NOTE("Downloading") REPLY_OK(1)),
	  1, { "sandbox.pull_progress" },
	  { "{\"name\":\"n\",\"image\":\"alpine:3\",\"status\":\"Downloading\"}" } },
	{ "three in order, across writes, one split", { .replies = { { .chunks = {
		PULL_NOTE("a"), "{\"jsonrpc\":\"2.0\",\"method\":\"x.b\",\"par",
		"ams\":{\"k\":[1,2]}}\n" PULL_NOTE("c") REPLY_OK(1) }, .delay_ms = 20 } } },
	  3, { "sandbox.pull_progress", "x.b", "sandbox.pull_progress" },
	  { "{\"name\":\"n\",\"image\":\"alpine:3\",\"status\":\"a\"}", "{\"k\":[1,2]}",
	    "{\"name\":\"n\",\"image\":\"alpine:3\",\"status\":\"c\"}" } },
	{ "no params", ONE("{\"jsonrpc\":\"2.0\",\"method\":\"x.ping\"}\n" REPLY_OK(1)),
	  1, { "x.ping" }, { NULL } },
	{ "params as sent, not an object",
	  ONE("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1,\"a\"]}\n" REPLY_OK(1)),
	  1, { "x" }, { "[1,\"a\"]" } },
	{ "no jsonrpc member", ONE("{\"method\":\"x\",\"params\":{}}\n" REPLY_OK(1)),
	  1, { "x" }, { "{}" } },
	{ "method not a string: skipped", ONE("{\"jsonrpc\":\"2.0\",\"method\":5}\n" REPLY_OK(1)),
	  0, { NULL }, { NULL } },
	{ "after the reply: not in this call", ONE(REPLY_OK(1) PULL_NOTE("late")), 0, { NULL }, { NULL } },
};

START_TEST(test_notify_delivered)
{
	const struct notify_row *row = &notify_rows[_i];
	struct notify_log log = { 0 };
	int fds = count_fds();
	struct msb_conn *conn;
	json_t *result = NULL;
	struct fake f;

	fake_start(&f, &row->script);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	ck_assert_msg(msb_call(conn, "sandbox.acquire", NULL, &result) == MSB_OK, "%s", row->name);
	ck_assert(json_is_true(json_object_get(result, "ok")));
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	/* The kept params outlive the connection. */
	ck_assert_msg(log.n == row->n, "%s: %d notifications, want %d", row->name, log.n, row->n);
	for (int i = 0; i < row->n; i++) {
		json_t *want = row->params[i] ? json_loads(row->params[i], 0, NULL) : NULL;

		ck_assert_str_eq(log.method[i], row->method[i]);
		ck_assert_msg(row->params[i] ? json_equal(log.params[i], want) : !log.params[i],
			      "%s: notification %d: wrong params", row->name, i);
		json_decref(want);
	}
	notify_log_free(&log);
	json_decref(result);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_notify_unset_skips)
{
	/* A hook set and then unset is not called; the reply still comes. */
	const struct fake_script s = ONE(PULL_NOTE("a") PULL_NOTE("b") REPLY_OK(1));
	struct notify_log log = { 0 };
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	msb_set_notify(conn, NULL, NULL);
	ck_assert_int_eq(msb_call(conn, "sandbox.acquire", NULL, NULL), MSB_OK);
	ck_assert_int_eq(log.n, 0);
	msb_conn_free(conn);
	msb_set_notify(NULL, record_cb, &log);  /* NULL-safe */
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

START_TEST(test_notify_late_goes_to_next_call)
{
	/* A notification read with a reply is delivered during the next call. */
	const struct fake_script s = {
		.requests = 2,
		.replies = { { .chunks = { REPLY_OK(1) PULL_NOTE("late") } },
			     { .chunks = { PULL_NOTE("next") REPLY_OK(2) } } },
	};
	struct notify_log log = { 0 };
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	ck_assert_int_eq(log.n, 0);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	ck_assert_int_eq(log.n, 2);
	ck_assert_str_eq(get_str(log.params[0], "status"), "late");
	ck_assert_str_eq(get_str(log.params[1], "status"), "next");
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	notify_log_free(&log);
}
END_TEST

static void nested_call_cb(const char *method, json_t *params, void *arg)
{
	struct notify_log *log = arg;

	log->nested_rc = msb_call(log->conn, "daemon.status", json_object(), NULL);
	log->n++;
}

START_TEST(test_notify_hook_may_not_call)
{
	/* A call from the hook is refused and sends nothing; the call it
	 * interrupted gets its reply. */
	const struct fake_script s = ONE(PULL_NOTE("a") REPLY_OK(1));
	struct notify_log log = { 0 };
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &log.conn), MSB_OK);
	msb_set_notify(log.conn, nested_call_cb, &log);
	ck_assert_int_eq(msb_call(log.conn, "sandbox.acquire", NULL, NULL), MSB_OK);
	ck_assert_int_eq(log.n, 1);
	ck_assert_int_eq(log.nested_rc, MSB_E_INVAL);
	msb_conn_free(log.conn);
	fake_stop(&f);
	ck_assert_ptr_eq(memchr(f.request[0], '\n', f.request_len[0]), f.request[0] + f.request_len[0] - 1);
	fake_free(&f);
}
END_TEST

/* --- notifications after the reply: msb_wait_notify ---------------------- */

#define WAIT_MAX 4
#define WAIT_LONG_MS 1500      /* hang guard, under FAKE_IO_WAIT_MS: a held fake is still there */
#define SPLIT_NOTE_HEAD "{\"jsonrpc\":\"2.0\",\"method\":\"sandbox.pull_progress\",\"params\":{\"status\":\"s"
#define STRAY_ERROR "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"m\"}}\n"

struct wait_step {
	int timeout_ms;
	int rc;  /* msb_wait_notify's answer */
};

struct wait_row {
	const char *name;
	struct fake_script script;     /* answers one msb_call() */
	int n_call;                    /* notifications the hook saw during the call */
	struct wait_step waits[WAIT_MAX];  /* then each wait in turn, up to one { 0, 0 } */
	const char *status[NOTIFY_MAX];    /* each notification's params.status, in order (all of them) */
};

static const struct wait_row wait_rows[] = {
	{ "before the reply in the call, after it in waits, then EOF", { .replies = { { .chunks = {
		PULL_NOTE("r1") PULL_NOTE("r2") REPLY_OK(1) PULL_NOTE("l1"), PULL_NOTE("l2") },
		.delay_ms = 30 } } },
	  2, { { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, MSB_E_CLOSED } },
	  { "r1", "r2", "l1", "l2" } },
	{ "one split across writes", { .replies = { { .chunks = {
		REPLY_OK(1) SPLIT_NOTE_HEAD, "plit\"}}\n" }, .delay_ms = 30 } } },
	  0, { { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, MSB_E_CLOSED } }, { "split" } },
	{ "EOF after a whole one: it first", ONE(REPLY_OK(1) PULL_NOTE("last")),
	  0, { { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, MSB_E_CLOSED } }, { "last" } },
	{ "EOF mid-frame", ONE(REPLY_OK(1) "{\"jsonrpc\":\"2.0\",\"meth"),
	  0, { { WAIT_LONG_MS, MSB_E_CLOSED }, { 0, MSB_E_CLOSED } }, { NULL } },
	{ "a stray reply", { .replies = { { .chunks = { REPLY_OK(1) PULL_NOTE("l1") REPLY_OK(1) } } },
			     .hold = true },
	  0, { { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, MSB_E_PROTO }, { 0, MSB_E_CLOSED } }, { "l1" } },
	{ "an error with id null", { .replies = { { .chunks = { REPLY_OK(1) STRAY_ERROR } } },
				     .hold = true },
	  0, { { WAIT_LONG_MS, MSB_E_PROTO }, { 0, MSB_E_CLOSED } }, { NULL } },
	{ "a request (method and id)", { .replies = { { .chunks = {
		REPLY_OK(1) "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\"}\n" } } }, .hold = true },
	  0, { { WAIT_LONG_MS, MSB_E_PROTO } }, { NULL } },
	{ "not JSON", { .replies = { { .chunks = { REPLY_OK(1) "{not json\n" } } }, .hold = true },
	  0, { { WAIT_LONG_MS, MSB_E_PROTO } }, { NULL } },
	{ "method not a string: read and skipped", ONE(REPLY_OK(1) "{\"jsonrpc\":\"2.0\",\"method\":5}\n"
						      PULL_NOTE("x")),
	  0, { { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, 1 }, { WAIT_LONG_MS, MSB_E_CLOSED } }, { "x" } },
	{ "timeouts keep part of a frame", { .replies = { { .chunks = {
		REPLY_OK(1) SPLIT_NOTE_HEAD, "plit\"}}\n" }, .delay_ms = 300 } }, .hold = true },
	  0, { { 50, 0 }, { 20, 0 }, { WAIT_LONG_MS, 1 }, { 50, 0 } }, { "split" } },
};

START_TEST(test_wait_notify)
{
	const struct wait_row *row = &wait_rows[_i];
	struct notify_log log = { 0 };
	int fds = count_fds();
	struct msb_conn *conn;
	struct fake f;
	int n = 0;

	fake_start(&f, &row->script);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	ck_assert_msg(msb_call(conn, "events.subscribe", NULL, NULL) == MSB_OK, "%s", row->name);
	ck_assert_msg(log.n == row->n_call, "%s: %d during the call", row->name, log.n);
	for (int i = 0; i < WAIT_MAX && (row->waits[i].timeout_ms || row->waits[i].rc); i++) {
		/* a long wait is a hang guard: stretched under valgrind */
		int rc = msb_wait_notify(conn, row->waits[i].timeout_ms == WAIT_LONG_MS ?
					       WAIT_LONG_MS * test_slow_factor() : row->waits[i].timeout_ms);

		ck_assert_msg(rc == row->waits[i].rc, "%s: wait %d: %d (%s), want %d", row->name, i,
			      rc, msb_strerror(rc), row->waits[i].rc);
	}
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	while (n < NOTIFY_MAX && row->status[n])
		n++;
	ck_assert_msg(log.n == n, "%s: %d notifications, want %d", row->name, log.n, n);
	for (int i = 0; i < n; i++) {
		ck_assert_str_eq(log.method[i], "sandbox.pull_progress");
		ck_assert_str_eq(get_str(log.params[i], "status"), row->status[i]);
	}
	notify_log_free(&log);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_wait_notify_without_hook)
{
	/* No hook: each notification is read and skipped, and still counts. */
	const struct fake_script s = ONE(REPLY_OK(1) PULL_NOTE("a") PULL_NOTE("b"));
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "events.subscribe", NULL, NULL), MSB_OK);
	ck_assert_int_eq(msb_wait_notify(conn, WAIT_LONG_MS), 1);
	ck_assert_int_eq(msb_wait_notify(conn, WAIT_LONG_MS), 1);
	ck_assert_int_eq(msb_wait_notify(conn, WAIT_LONG_MS), MSB_E_CLOSED);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

START_TEST(test_wait_notify_timeout_keeps_connection)
{
	/* A wait that times out takes as long as asked, is not the call
	 * timeout, and leaves the connection usable for calls and waits. */
	const struct fake_script s = {
		.requests = 2,
		.replies = { { .chunks = { REPLY_OK(1) } },
			     { .chunks = { PULL_NOTE("in") REPLY_OK(2) PULL_NOTE("after") } } },
		.hold = true,
	};
	struct notify_log log = { 0 };
	struct msb_conn *conn;
	int64_t start, took;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	ck_assert_int_eq(msb_call(conn, "events.subscribe", NULL, NULL), MSB_OK);
	/* the first exchange answered, the second not asked: nothing is due */
	msb_set_timeout(conn, 10);   /* the call timeout: not the wait's */
	start = now_ms();
	/* 0, not MSB_E_CLOSED: the wait ended on its timeout, before the fake
	 * let go (FAKE_IO_WAIT_MS) */
	ck_assert_int_eq(msb_wait_notify(conn, TIMEOUT_MS), 0);
	took = now_ms() - start;
	ck_assert_int_ge(took, TIMEOUT_MS);   /* not early: the wait's timeout, not the call's 10 ms */
	ck_assert_int_eq(msb_wait_notify(conn, 0), 0);
	msb_set_timeout(conn, WAIT_LONG_MS);
	ck_assert_int_eq(msb_call(conn, "daemon.status", NULL, NULL), MSB_OK);
	ck_assert_int_eq(log.n, 1);
	ck_assert_int_eq(msb_wait_notify(conn, WAIT_LONG_MS), 1);
	ck_assert_int_eq(log.n, 2);
	ck_assert_str_eq(get_str(log.params[0], "status"), "in");
	ck_assert_str_eq(get_str(log.params[1], "status"), "after");
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	notify_log_free(&log);
}
END_TEST

START_TEST(test_wait_notify_zero_reads_what_is_there)
{
	/* Timeout 0 does not wait, but takes what already arrived. */
	const struct fake_script s = { .replies = { { .chunks = { REPLY_OK(1), PULL_NOTE("x") },
						       .delay_ms = 20 } }, .hold = true };
	struct notify_log log = { 0 };
	struct msb_conn *conn;
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	msb_set_notify(conn, record_cb, &log);
	ck_assert_int_eq(msb_call(conn, "events.subscribe", NULL, NULL), MSB_OK);
	/* hang guard: until the fake wrote the notification (then it is in our
	 * socket's buffer) */
	for (int64_t end = now_ms() + FAKE_IO_WAIT_MS; !__atomic_load_n(&f.served, __ATOMIC_ACQUIRE) &&
	     now_ms() < end;)
		sleep_ms(5);
	ck_assert(__atomic_load_n(&f.served, __ATOMIC_ACQUIRE));
	ck_assert_int_eq(msb_wait_notify(conn, 0), 1);
	ck_assert_int_eq(log.n, 1);
	ck_assert_int_eq(msb_wait_notify(conn, 0), 0);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
	notify_log_free(&log);
}
END_TEST

static void noop_signal_cb(int sig)
{
	(void)sig;
}

START_TEST(test_wait_notify_signal_ends_wait)
{
	/* A signal caught while waiting ends the wait with 0; the connection
	 * stays usable. The fake signals with SIGTERM, again and again until
	 * the wait is over (one may come before the wait begins). The wait
	 * has no limit: without the signal it would end only when the fake
	 * lets go (FAKE_IO_WAIT_MS), with MSB_E_CLOSED. */
	const struct fake_script s = { .replies = { { .chunks = { REPLY_OK(1) } } },
				       .signal_until_gate = true, .hold = true };
	struct sigaction sa = { .sa_handler = noop_signal_cb };  /* no SA_RESTART */
	struct msb_conn *conn;
	struct fake f;

	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGTERM, &sa, NULL), 0);
	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call(conn, "events.subscribe", NULL, NULL), MSB_OK);
	ck_assert_int_eq(msb_wait_notify(conn, -1), 0);
	__atomic_store_n(&f.gate, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(msb_wait_notify(conn, 0), 0);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

static void nested_wait_cb(const char *method, json_t *params, void *arg)
{
	struct notify_log *log = arg;

	log->nested_rc = msb_wait_notify(log->conn, 0);
	log->n++;
}

START_TEST(test_wait_notify_hook_may_not_wait)
{
	/* A wait from the hook is refused; the outer wait still returns 1 and
	 * the next notification is still there. */
	const struct fake_script s = ONE(REPLY_OK(1) PULL_NOTE("a") PULL_NOTE("b"));
	struct notify_log log = { 0 };
	struct fake f;

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &log.conn), MSB_OK);
	ck_assert_int_eq(msb_call(log.conn, "events.subscribe", NULL, NULL), MSB_OK);
	msb_set_notify(log.conn, nested_wait_cb, &log);
	ck_assert_int_eq(msb_wait_notify(log.conn, WAIT_LONG_MS), 1);
	ck_assert_int_eq(log.n, 1);
	ck_assert_int_eq(log.nested_rc, MSB_E_INVAL);
	ck_assert_int_eq(msb_wait_notify(log.conn, WAIT_LONG_MS), 1);
	ck_assert_int_eq(log.n, 2);
	msb_conn_free(log.conn);
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

/* --- the CLI: durations -------------------------------------------------- */

struct duration_row {
	const char *s;
	int rc;
	long long secs;
};

static const struct duration_row duration_rows[] = {
	{ "90", 0, 90 },
	{ "90s", 0, 90 },
	{ "15m", 0, 900 },
	{ "24h", 0, 86400 },
	{ "7d", 0, 604800 },
	{ "1", 0, 1 },
	{ "007s", 0, 7 },
	{ "36500d", 0, 3153600000LL },
	{ "3153600000", 0, 3153600000LL },
	{ "3153600001", -ERANGE, 0 },
	{ "36501d", -ERANGE, 0 },
	{ "52560001m", -ERANGE, 0 },
	{ "99999999999999999999999999", -ERANGE, 0 },
	{ "", -EINVAL, 0 },
	{ "0", -EINVAL, 0 },
	{ "0s", -EINVAL, 0 },
	{ "000d", -EINVAL, 0 },
	{ "s", -EINVAL, 0 },
	{ "-5", -EINVAL, 0 },
	{ "+5", -EINVAL, 0 },
	{ " 5", -EINVAL, 0 },
	{ "5 ", -EINVAL, 0 },
	{ "5x", -EINVAL, 0 },
	{ "5S", -EINVAL, 0 },
	{ "1.5h", 0, 5400 },          /* the shared parser (units.h): fractions */
	{ "1.5s", -EDOM, 0 },         /* ... but whole seconds */
	{ "2000ms", 0, 2 },
	{ "5sm", -EINVAL, 0 },
	{ "1h30m", -EINVAL, 0 },
	{ "5s\n", -EINVAL, 0 },
};

START_TEST(test_duration_parse)
{
	const struct duration_row *row = &duration_rows[_i];
	long long secs = -1;
	int rc = parse_duration(row->s, &secs);

	ck_assert_msg(rc == row->rc, "'%s': %d, want %d", row->s, rc, row->rc);
	ck_assert_msg(secs == (rc == 0 ? row->secs : -1), "'%s': %lld seconds", row->s, secs);
}
END_TEST

/* --- the CLI: the pull progress line ------------------------------------- */

struct progress_row {
	const char *name;
	const char *params;
	size_t max_cols;
	size_t size;  /* 0 = CLI_PROGRESS_MAX_BYTES */
	const char *want;
};

static const struct progress_row progress_rows[] = {
	{ "all parts", "{\"image\":\"alpine:3\",\"id\":\"4abc\",\"status\":\"Downloading\","
		       "\"progress\":\"[=>  ] 1MB/2MB\",\"current\":1,\"total\":2}",
	  79, 0, "pulling alpine:3: 4abc: Downloading [=>  ] 1MB/2MB" },
	{ "no id", "{\"image\":\"alpine:3\",\"status\":\"Pulling from library/alpine\"}",
	  79, 0, "pulling alpine:3: Pulling from library/alpine" },
	{ "current and total", "{\"image\":\"a\",\"id\":\"x\",\"status\":\"Extracting\","
			       "\"current\":1536,\"total\":3145728}",
	  79, 0, "pulling a: x: Extracting 1.5 KiB/3.0 MiB" },
	{ "current only", "{\"image\":\"a\",\"status\":\"Downloading\",\"current\":512}",
	  79, 0, "pulling a: Downloading 512 B" },
	{ "empty progress falls back", "{\"image\":\"a\",\"progress\":\"\",\"current\":5368709120,"
				       "\"total\":5368709120}",
	  79, 0, "pulling a 5.0 GiB/5.0 GiB" },
	{ "nothing", "{}", 79, 0, "pulling image" },
	{ "cut at the width", "{\"image\":\"alpine:3\",\"status\":\"Downloading\"}",
	  12, 0, "pulling alpi" },
	{ "control characters shown as ?", "{\"image\":\"a\",\"status\":\"x\\u001b[2J\\u009by\\r\"}",
	  79, 0, "pulling a: x?[2J?y?" },
	{ "UTF-8 counted by character", "{\"image\":\"\\u00e9t\\u00e9\"}", 10, 0, "pulling \xc3\xa9t" },
	{ "UTF-8 never cut by bytes", "{\"image\":\"\\u00e9t\\u00e9\"}", 79, 10, "pulling " },
};

START_TEST(test_progress_format)
{
	const struct progress_row *row = &progress_rows[_i];
	json_t *params = json_loads(row->params, 0, NULL);
	char buf[CLI_PROGRESS_MAX_BYTES];

	ck_assert_ptr_nonnull(params);
	progress_format(params, row->max_cols, buf, row->size ? row->size : sizeof(buf));
	ck_assert_msg(!strcmp(buf, row->want), "%s: '%s', want '%s'", row->name, buf, row->want);
	json_decref(params);
}
END_TEST

/* --- the CLI against the fake daemon ------------------------------------- */

#define CLI_MAX_ARGS 24
#define SANDBOX_ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define REPLY(result) "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":" result "}\n"
#define ACQUIRED "{\"sandbox\":\"" SANDBOX_ID "\",\"name\":\"msb-x\",\"kind\":\"k\"," \
	"\"work_dir\":\"/maf-sandbox/work\",\"created\":true,\"state\":\"running\"}"
#define KEY_ARGS "--scope", "s", "--thread", "t", "--agent", "a"
#define KEY_JSON "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}"
/* events: notifications as the daemon sends them, and their human lines. */
#define EVENT(params) "{\"jsonrpc\":\"2.0\",\"method\":\"events.event\",\"params\":" params "}\n"
#define EV_KEY(call) "{\"scope\":\"s1\",\"thread_id\":\"t1\",\"agent_dir\":\"a1\"," \
	"\"call_id\":\"" call "\"}"
#define EV_DENY "{\"type\":\"egress.decision\",\"key\":" EV_KEY("") ",\"kind\":\"k\"," \
	"\"sandbox\":\"maf-sandbox-docker-d6412c47821c\",\"decision\":\"DENY\",\"host\":\"a.test\"," \
	"\"port\":443,\"time\":\"2026-11-29T14:02:48.817742411Z\"}"
#define EV_DENY_LINE "2026-11-29T14:02:48.817742411Z DENY a.test:443 " \
	"sandbox=maf-sandbox-docker-d6412c47821c scope=s1 thread=t1 agent=a1 kind=k\n"
#define EV_ALLOW "{\"type\":\"egress.decision\",\"key\":" EV_KEY("c7") ",\"kind\":\"py\"," \
	"\"sandbox\":\"msb-2\",\"decision\":\"ALLOW\",\"host\":\"pypi.org\",\"port\":443," \
	"\"time\":\"2026-11-29T14:02:49Z\"}"
#define EV_ALLOW_LINE "2026-11-29T14:02:49Z ALLOW pypi.org:443 sandbox=msb-2 scope=s1 " \
	"thread=t1 agent=a1 call=c7 kind=py\n"
#define EV_LIVE "{\"type\":\"egress.decision\",\"key\":" EV_KEY("") ",\"kind\":\"k\"," \
	"\"sandbox\":\"msb-3\",\"decision\":\"UNREACHABLE\",\"host\":\"10.0.0.9\",\"port\":8080," \
	"\"time\":\"2026-11-29T14:03:00Z\"}"
#define EV_LIVE_LINE "2026-11-29T14:03:00Z UNREACHABLE 10.0.0.9:8080 sandbox=msb-3 scope=s1 " \
	"thread=t1 agent=a1 kind=k\n"
#define SUBSCRIBED REPLY("{\"types\":[\"egress.decision\"],\"scope\":null}")
#define SUBSCRIBE_JSON "{\"types\":[\"egress.decision\"],\"replay\":true}"

/* A file (or a terminal) redirected over stream's fd; capture_end()
 * restores it. */
struct capture {
	FILE *stream;
	int fd;     /* the file */
	int saved;  /* the stream's fd before */
};

static void capture_start(struct capture *c, FILE *stream, int fd)
{
	c->stream = stream;
	c->fd = fd;
	fflush(stream);
	c->saved = dup(fileno(stream));
	ck_assert_int_ge(c->saved, 0);
	ck_assert_int_ge(dup2(fd, fileno(stream)), 0);
}

/* Restores the stream and closes the file; returns what it holds (malloc'd),
 * or NULL when it is not a regular file. */
static char *capture_end(struct capture *c)
{
	struct stat st;
	off_t size;
	char *buf;

	fflush(c->stream);
	ck_assert_int_ge(dup2(c->saved, fileno(c->stream)), 0);
	close(c->saved);
	ck_assert_int_eq(fstat(c->fd, &st), 0);
	if (!S_ISREG(st.st_mode)) {
		close(c->fd);
		return NULL;
	}
	size = lseek(c->fd, 0, SEEK_END);
	ck_assert_int_ge(size, 0);
	buf = malloc((size_t)size + 1);
	ck_assert_int_eq(pread(c->fd, buf, (size_t)size, 0), size);
	buf[size] = '\0';
	close(c->fd);
	return buf;
}

static int tmpfile_fd(const char *dir)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/out-XXXXXX", dir);
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	unlink(path);
	return fd;
}

struct cli_result {
	int rc;
	char *out;  /* stdout */
	char *err;  /* stderr; NULL when it went to err_fd */
};

/* Runs the CLI on "--socket SOCKET ARGS..." (args NULL-ended; "@SPEC" stands
 * for spec_path), with stdout in a file, and stderr in a file or on err_fd
 * (>= 0). Files go under dir. */
static void cli_run_fds(const char *socket, const char *const *args, const char *spec_path,
			int out_fd, int err_fd, struct cli_result *ret);

static void cli_run(const char *dir, const char *socket, const char *const *args,
		    const char *spec_path, int err_fd, struct cli_result *ret)
{
	cli_run_fds(socket, args, spec_path, tmpfile_fd(dir),
		    err_fd >= 0 ? dup(err_fd) : tmpfile_fd(dir), ret);
}

/* As cli_run, with stdout on out_fd and stderr on err_fd (both taken, and
 * closed); out and err are NULL for what is not a regular file. */
static void cli_run_fds(const char *socket, const char *const *args, const char *spec_path,
			int out_fd, int err_fd, struct cli_result *ret)
{
	char *argv[CLI_MAX_ARGS + 4];
	struct capture out, err;
	int argc = 0;

	argv[argc++] = strdup("maf-sandbox");
	argv[argc++] = strdup("--socket");
	argv[argc++] = strdup(socket);
	for (size_t i = 0; args[i]; i++) {
		ck_assert_int_lt(i, CLI_MAX_ARGS);
		argv[argc++] = strdup(!strcmp(args[i], "@SPEC") ? spec_path : args[i]);
	}
	argv[argc] = NULL;
	capture_start(&out, stdout, out_fd);
	capture_start(&err, stderr, err_fd);
	ret->rc = cli_main(argc, argv);
	ret->out = capture_end(&out);
	ret->err = capture_end(&err);
	for (int i = 0; i < argc; i++)
		free(argv[i]);
}

static void cli_result_free(struct cli_result *r)
{
	free(r->out);
	free(r->err);
}

struct cli_row {
	const char *name;
	const char *args[CLI_MAX_ARGS];  /* after --socket PATH */
	const char *spec;                /* the @SPEC file's content, or NULL */
	struct fake_script script;
	const char *method;              /* the request wanted; NULL = none may be sent */
	const char *params;              /* JSON its params must equal */
	int rc;
	const char *out;                 /* stdout, exactly */
	const char *err;                 /* stderr, exactly */
	bool out_json;                   /* compare stdout as JSON */
};

static const struct cli_row cli_rows[] = {
	{ "acquire with --image prints the id",
	  { "acquire", KEY_ARGS, "--kind", "k", "--image", "alpine:3" }, NULL,
	  ONE(REPLY(ACQUIRED)),
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image\":\"alpine:3\"}}",
	  0, SANDBOX_ID "\n", "", false },
	{ "acquire while pulling, stderr not a terminal: no progress",
	  { "acquire", KEY_ARGS, "--kind", "k", "--image", "alpine:3" }, NULL,
	  { .replies = { { .chunks = { PULL_NOTE("Pulling fs layer"), PULL_NOTE("Downloading"),
				       REPLY(ACQUIRED) }, .delay_ms = 10 } } },
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image\":\"alpine:3\"}}",
	  0, SANDBOX_ID "\n", "", false },
	{ "acquire --json prints the result",
	  { "acquire", KEY_ARGS, "--kind", "k", "--image", "alpine:3", "--json" }, NULL,
	  ONE(REPLY(ACQUIRED)),
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image\":\"alpine:3\"}}",
	  0, ACQUIRED, "", true },
	{ "acquire --spec with --image, --call, --scope-call laid over it",
	  { "acquire", KEY_ARGS, "--call", "c1", "--kind", "k", "--spec", "@SPEC", "--image", "img",
	    "--scope-call" },
	  "{\"kind\":\"old\",\"image_id\":\"sha256:aa\",\"labels\":{\"a\":\"b\"},\"egress\":\"closed\"}",
	  ONE(REPLY(ACQUIRED)),
	  "sandbox.acquire", "{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\","
	  "\"call_id\":\"c1\"},\"spec\":{\"kind\":\"k\",\"image\":\"img\",\"labels\":{\"a\":\"b\"},"
	  "\"egress\":\"closed\",\"isolation_scope\":\"call\"}}",
	  0, SANDBOX_ID "\n", "", false },
	{ "acquire --spec alone keeps image_id",
	  { "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC" }, "{\"image_id\":\"sha256:aa\"}",
	  ONE(REPLY(ACQUIRED)),
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image_id\":\"sha256:aa\"}}",
	  0, SANDBOX_ID "\n", "", false },
	{ "acquire refused by the daemon",
	  { "acquire", KEY_ARGS, "--kind", "k", "--image", "i", "--scope-call" }, NULL,
	  ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"isolation "
	      "scope call needs a key with a call_id\",\"data\":{\"type\":\"InvalidParams\","
	      "\"field\":\"key\"}}}\n"),
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image\":\"i\","
	  "\"isolation_scope\":\"call\"}}",
	  1, "", "maf-sandbox: InvalidParams: isolation scope call needs a key with a call_id\n", false },
	{ "acquire with a result naming no sandbox",
	  { "acquire", KEY_ARGS, "--kind", "k", "--image", "i" }, NULL, ONE(REPLY("{}")),
	  "sandbox.acquire", "{\"key\":" KEY_JSON ",\"spec\":{\"kind\":\"k\",\"image\":\"i\"}}",
	  4, "", "maf-sandbox: acquire: the daemon's result names no sandbox\n", false },
	{ "ls prints a table",
	  { "ls" }, NULL,
	  ONE(REPLY("[{\"sandbox\":\"0123456789abcdef0123\",\"name\":\"msb-1\",\"key\":{\"scope\":\"conv\","
		    "\"thread_id\":\"t1\",\"agent_dir\":\"/agents/a\",\"call_id\":\"\"},\"kind\":\"python\","
		    "\"state\":\"running\",\"created\":\"2024-05-01T12:00:00Z\",\"image\":\"python:3\","
		    "\"owner\":\"1000\",\"labels\":{\"team\":\"blue\",\"x\":\"1\"}}, 5, {\"sandbox\":\"cd\","
		    "\"name\":\"msb-long-name\",\"key\":"
		    "{\"scope\":\"call\",\"thread_id\":\"t\\u001b2\",\"agent_dir\":\"a\",\"call_id\":\"c9\"},"
		    "\"kind\":\"sh\",\"state\":\"exited\",\"created\":null,\"labels\":{}}]")),
	  "sandbox.list", "{}", 0,
	  "NAME           ID            STATE    KIND    SCOPE  THREAD  AGENT      CALL  CREATED               LABELS\n"
	  "msb-1          0123456789ab  running  python  conv   t1      /agents/a  -     2024-05-01T12:00:00Z  team=blue,x=1\n"
	  "msb-long-name  cd            exited   sh      call   t?2     a          c9    -                     -\n", "", false },
	{ "ls --scope --thread, none: the header",
	  { "ls", "--scope", "s", "--thread", "t" }, NULL, ONE(REPLY("[]")),
	  "sandbox.list", "{\"scope\":\"s\",\"thread_id\":\"t\"}", 0,
	  "NAME  ID  STATE  KIND  SCOPE  THREAD  AGENT  CALL  CREATED  LABELS\n", "", false },
	{ "ls --json", { "ls", "--json", "--scope", "s" }, NULL, ONE(REPLY("[{\"name\":\"x\"}]")),
	  "sandbox.list", "{\"scope\":\"s\"}", 0, "[{\"name\":\"x\"}]", "", true },
	{ "dispose done: silent",
	  { "dispose", KEY_ARGS, "--kind", "k", "--sandbox", SANDBOX_ID }, NULL, ONE(REPLY("null")),
	  "sandbox.dispose", "{\"key\":" KEY_JSON ",\"kind\":\"k\",\"sandbox\":\"" SANDBOX_ID "\"}",
	  0, "", "", false },
	{ "dispose incomplete",
	  { "dispose", KEY_ARGS, "--call", "c" }, NULL,
	  ONE(REPLY("{\"code\":\"timeout\",\"detail\":\"the engine did not answer\"}")),
	  "sandbox.dispose", "{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\","
	  "\"call_id\":\"c\"}}",
	  1, "", "maf-sandbox: disposal incomplete: timeout: the engine did not answer\n", false },
	{ "dispose-scope",
	  { "dispose-scope", "--scope", "s", "--thread", "t" }, NULL,
	  ONE(REPLY("{\"disposed\":2,\"undisposed\":null}")),
	  "sandbox.dispose_scope", "{\"scope\":\"s\",\"thread_id\":\"t\"}",
	  0, "disposed 2 sandbox(es)\n", "", false },
	{ "dispose-scope incomplete",
	  { "dispose-scope", "--scope", "s", "--thread", "t" }, NULL,
	  ONE(REPLY("{\"disposed\":1,\"undisposed\":{\"code\":\"refused\",\"detail\":\"in use\"}}")),
	  "sandbox.dispose_scope", "{\"scope\":\"s\",\"thread_id\":\"t\"}",
	  1, "disposed 1 sandbox(es)\n", "maf-sandbox: disposal incomplete: refused: in use\n", false },
	{ "reap",
	  { "reap", "--older-than", "24h", "--all" }, NULL,
	  ONE(REPLY("{\"disposed\":3,\"proxies_removed\":1,\"networks_removed\":2,\"failures\":[]}")),
	  "sandbox.reap", "{\"older_than_seconds\":86400}",
	  0, "removed: 3 sandbox(es), 1 proxy container(s), 2 network(s)\n", "", false },
	{ "reap with failures",
	  { "reap", "--scope", "s", "--older-than", "90" }, NULL,
	  ONE(REPLY("{\"disposed\":0,\"proxies_removed\":0,\"networks_removed\":0,\"failures\":["
		    "{\"code\":\"unreachable\",\"detail\":\"engine down\"},"
		    "{\"code\":\"unknown\",\"detail\":\"?\"}]}")),
	  "sandbox.reap", "{\"older_than_seconds\":90,\"scope\":\"s\"}",
	  1, "removed: 0 sandbox(es), 0 proxy container(s), 0 network(s)\n",
	  "maf-sandbox: not reaped: unreachable: engine down\nmaf-sandbox: not reaped: unknown: ?\n", false },
	{ "reap by a non-admin",
	  { "reap", "--older-than", "7d", "--all" }, NULL,
	  ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1300,\"message\":\"sandbox.reap is "
	      "for admins\",\"data\":{\"type\":\"PermissionDenied\"}}}\n"),
	  "sandbox.reap", "{\"older_than_seconds\":604800}",
	  1, "", "maf-sandbox: PermissionDenied: sandbox.reap is for admins\n", false },
	/* Usage errors: nothing is sent (the socket does not even exist). */
	{ "acquire without --scope", { "acquire", "--thread", "t", "--agent", "a", "--kind", "k",
				       "--image", "i" }, NULL, { 0 }, NULL, NULL,
	  2, "", "maf-sandbox: 'acquire' needs --scope\nTry 'maf-sandbox acquire --help'.\n", false },
	{ "acquire without --image or --spec", { "acquire", KEY_ARGS, "--kind", "k" }, NULL, { 0 },
	  NULL, NULL,
	  2, "", "maf-sandbox: 'acquire' needs --image or --spec\nTry 'maf-sandbox acquire --help'.\n", false },
	{ "acquire --spec not an object", { "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC" },
	  "[1]", { 0 }, NULL, NULL, 2, "", "maf-sandbox: the spec @SPEC is not a JSON object\n", false },
	{ "acquire --spec not JSON", { "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC" },
	  "{\"kind\":", { 0 }, NULL, NULL, 2, "", NULL, false },
	{ "acquire --spec with a duplicate", { "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC" },
	  "{\"a\":1,\"a\":2}", { 0 }, NULL, NULL, 2, "", NULL, false },
	{ "dispose-scope without --thread", { "dispose-scope", "--scope", "s" }, NULL, { 0 }, NULL,
	  NULL, 2, "", "maf-sandbox: 'dispose-scope' needs --thread\n"
	  "Try 'maf-sandbox dispose-scope --help'.\n", false },
	{ "reap --older-than 0", { "reap", "--older-than", "0" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "maf-sandbox: invalid --older-than '0': want a duration like 90s, 15m, 1.5h or 7d (plain: "
	  "seconds), whole seconds from 1s to 36500d\nTry 'maf-sandbox reap --help'.\n", false },
	/* reap: a sweep of every scope must be asked for (--all); --dry-run lists. */
	{ "reap without --scope or --all is refused", { "reap", "--older-than", "1" }, NULL, { 0 }, NULL,
	  NULL, 2, "", "maf-sandbox: 'reap' without --scope disposes of every sandbox on this host older "
	  "than 1, whoever owns it: give --all to mean that, or --scope S for one scope (--dry-run lists "
	  "what would go)\nTry 'maf-sandbox reap --help'.\n", false },
	{ "reap --all and --scope", { "reap", "--older-than", "1", "--all", "--scope", "s" }, NULL, { 0 },
	  NULL, NULL, 2, "", "maf-sandbox: 'reap' takes --scope S or --all, not both\n"
	  "Try 'maf-sandbox reap --help'.\n", false },
	{ "reap --dry-run lists what would go",
	  { "reap", "--older-than", "1d", "--dry-run" }, NULL,
	  ONE(REPLY("{\"disposed\":0,\"proxies_removed\":0,\"networks_removed\":0,\"failures\":[],"
		    "\"dry_run\":true,\"would_dispose\":[{\"sandbox\":\"" SANDBOX_ID "\",\"name\":"
		    "\"maf-sandbox-docker-111111111111\",\"scope\":\"s\",\"created\":\"2026-09-06T12:00:00Z\"}],"
		    "\"would_remove_proxies\":1,\"would_remove_networks\":2}")),
	  "sandbox.reap", "{\"older_than_seconds\":86400,\"dry_run\":true}",
	  0, "would remove: 1 sandbox(es), 1 proxy container(s), 2 network(s)\n"
	  "  maf-sandbox-docker-111111111111 s 2026-09-06T12:00:00Z " SANDBOX_ID "\n", "", false },
	{ "reap --dry-run --scope",
	  { "reap", "--older-than", "90", "--scope", "s", "--dry-run" }, NULL,
	  ONE(REPLY("{\"disposed\":0,\"proxies_removed\":0,\"networks_removed\":0,\"failures\":[],"
		    "\"dry_run\":true,\"would_dispose\":[],\"would_remove_proxies\":0,"
		    "\"would_remove_networks\":0}")),
	  "sandbox.reap", "{\"older_than_seconds\":90,\"scope\":\"s\",\"dry_run\":true}",
	  0, "would remove: 0 sandbox(es), 0 proxy container(s), 0 network(s)\n", "", false },
	{ "reap --dry-run: more would go than are listed",
	  { "reap", "--older-than", "1d", "--all", "--dry-run" }, NULL,
	  ONE(REPLY("{\"disposed\":0,\"proxies_removed\":0,\"networks_removed\":0,\"failures\":[],"
		    "\"dry_run\":true,\"would_dispose\":[{\"sandbox\":\"" SANDBOX_ID "\",\"name\":"
		    "\"maf-sandbox-docker-111111111111\",\"scope\":\"s\",\"created\":\"2026-09-06T12:00:00Z\"}],"
		    "\"would_dispose_count\":300,\"would_remove_proxies\":0,\"would_remove_networks\":0}")),
	  "sandbox.reap", "{\"older_than_seconds\":86400,\"dry_run\":true}",
	  0, "would remove: 300 sandbox(es), 0 proxy container(s), 0 network(s)\n"
	  "  maf-sandbox-docker-111111111111 s 2026-09-06T12:00:00Z " SANDBOX_ID "\n"
	  "  ... and 299 more, not listed\n", "", false },
	/* --json: every error one JSON object on stderr, the exit status unchanged. */
	{ "--json: the daemon's error as JSON",
	  { "--json", "reap", "--older-than", "7d", "--all" }, NULL,
	  ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1300,\"message\":\"sandbox.reap is "
	      "for admins\",\"data\":{\"type\":\"PermissionDenied\"}}}\n"),
	  "sandbox.reap", "{\"older_than_seconds\":604800}",
	  1, "", "{\"code\":1300,\"type\":\"PermissionDenied\",\"message\":\"sandbox.reap is for admins\","
	  "\"data\":{\"type\":\"PermissionDenied\"}}\n", false },
	{ "--json: an error without data.type",
	  { "ls", "-j" }, NULL,
	  ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}\n"),
	  "sandbox.list", "{}",
	  1, "", "{\"code\":-32601,\"type\":null,\"message\":\"no\",\"data\":null}\n", false },
	{ "--json: a usage error as JSON",
	  { "reap", "--older-than", "7d", "--json" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "{\"code\":2,\"type\":\"UsageError\",\"message\":\"'reap' without --scope disposes of every "
	  "sandbox on this host older than 7d, whoever owns it: give --all to mean that, or --scope S for "
	  "one scope (--dry-run lists what would go)\",\"data\":{\"command\":\"reap\"}}\n", false },
	{ "--json: an error before --json is parsed",
	  { "--bogus", "--json", "ls" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "{\"code\":2,\"type\":\"UsageError\",\"message\":\"unknown option '--bogus'\",\"data\":null}\n",
	  false },
	{ "--json: an input error as JSON", { "--json", "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC" },
	  "[1]", { 0 }, NULL, NULL, 2, "",
	  "{\"code\":2,\"type\":\"InputError\",\"message\":\"the spec @SPEC is not a JSON object\","
	  "\"data\":null}\n", false },
	{ "--json: a disposal failure as JSON",
	  { "--json", "dispose", KEY_ARGS }, NULL,
	  ONE(REPLY("{\"code\":\"timeout\",\"detail\":\"slow\"}")),
	  "sandbox.dispose", "{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}}",
	  1, "{\n  \"code\": \"timeout\",\n  \"detail\": \"slow\"\n}\n",
	  "{\"code\":1,\"type\":\"DisposalIncomplete\",\"message\":\"disposal incomplete\",\"data\":"
	  "{\"code\":\"timeout\",\"detail\":\"slow\"}}\n", false },
	{ "reap --older-than 2w", { "reap", "--older-than", "2w" }, NULL, { 0 }, NULL, NULL, 2, "",
	  NULL, false },
	{ "an option of another command", { "ls", "--image", "x" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "maf-sandbox: 'ls' takes no option '--image'\nTry 'maf-sandbox ls --help'.\n", false },
	{ "a command option before the command", { "--scope", "s", "ls" }, NULL, { 0 }, NULL, NULL,
	  2, "", "maf-sandbox: option '--scope' goes after the command\nTry 'maf-sandbox --help'.\n", false },
	{ "an operand", { "dispose-scope", "--scope", "s", "--thread", "t", "x" }, NULL, { 0 }, NULL,
	  NULL, 2, "", "maf-sandbox: 'dispose-scope' takes no arguments\n"
	  "Try 'maf-sandbox dispose-scope --help'.\n", false },
	{ "a value that is not UTF-8", { "ls", "--scope", "s\xff" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "maf-sandbox: the value of '--scope' is not valid UTF-8\nTry 'maf-sandbox ls --help'.\n", false },
	/* events */
	{ "events prints the kept events, then exits at the reply",
	  { "events" }, NULL,
	  ONE(EVENT(EV_DENY) PULL_NOTE("other") EVENT(EV_ALLOW) SUBSCRIBED EVENT(EV_LIVE)),
	  "events.subscribe", SUBSCRIBE_JSON, 0, EV_DENY_LINE EV_ALLOW_LINE, "", false },
	{ "events: a coalesced event says its count and its first decision's time",
	  { "events" }, NULL,
	  ONE(EVENT("{\"type\":\"egress.decision\",\"key\":" EV_KEY("") ",\"kind\":\"k\",\"sandbox\":\"x\","
		    "\"decision\":\"DENY\",\"host\":\"a.test\",\"port\":1,\"time\":\"T9\",\"count\":2980,"
		    "\"first_time\":\"T1\"}")
	      EVENT("{\"type\":\"egress.decision\",\"key\":" EV_KEY("") ",\"kind\":\"k\",\"sandbox\":\"x\","
		    "\"decision\":\"DENY\",\"host\":\"a.test\",\"port\":1,\"time\":\"T10\",\"count\":1}")
	      SUBSCRIBED),
	  "events.subscribe", SUBSCRIBE_JSON, 0,
	  "T9 DENY a.test:1 sandbox=x scope=s1 thread=t1 agent=a1 kind=k count=2980 first=T1\n"
	  "T10 DENY a.test:1 sandbox=x scope=s1 thread=t1 agent=a1 kind=k\n", "", false },
	{ "events: a decision's reason ends its line",
	  { "events" }, NULL,
	  ONE(EVENT("{\"type\":\"egress.decision\",\"key\":" EV_KEY("") ",\"kind\":\"k\",\"sandbox\":\"x\","
		    "\"decision\":\"DENY\",\"host\":\"a.test\",\"port\":80,\"time\":\"T\",\"count\":1,"
		    "\"reason\":\"not_connect\"}")
	      SUBSCRIBED),
	  "events.subscribe", SUBSCRIBE_JSON, 0,
	  "T DENY a.test:80 sandbox=x scope=s1 thread=t1 agent=a1 kind=k reason=not_connect\n", "", false },
	{ "events with none kept prints nothing", { "events" }, NULL, ONE(SUBSCRIBED),
	  "events.subscribe", SUBSCRIBE_JSON, 0, "", "", false },
	{ "events --scope --json: each event's params, compact, one per line",
	  { "events", "--scope", "s1", "--json" }, NULL,
	  ONE(EVENT(EV_DENY) EVENT(EV_ALLOW) REPLY("{\"types\":[\"egress.decision\"],\"scope\":\"s1\"}")),
	  "events.subscribe", "{\"types\":[\"egress.decision\"],\"scope\":\"s1\",\"replay\":true}",
	  0, EV_DENY "\n" EV_ALLOW "\n", "", false },
	{ "events: odd events, cleaned; params not an object skipped",
	  { "events" }, NULL,
	  ONE(EVENT("{\"type\":\"egress.decision\",\"key\":{\"scope\":\"s1\",\"thread_id\":\"t\\u001b1\","
		    "\"agent_dir\":\"/a b\",\"call_id\":\"\"},\"sandbox\":\"x\",\"decision\":\"DENY-NONGLOBAL\","
		    "\"host\":\"fd00::1\",\"port\":53,\"time\":\"T\"}")
	      EVENT("{\"type\":\"egress.decision\"}")
	      EVENT("{\"type\":\"sandbox.other\",\"time\":\"T2\",\"sandbox\":\"y\",\"key\":{\"scope\":\"s\"}}")
	      EVENT("[1]") SUBSCRIBED),
	  "events.subscribe", SUBSCRIBE_JSON, 0,
	  "T DENY-NONGLOBAL [fd00::1]:53 sandbox=x scope=s1 thread=t?1 agent=/a b kind=-\n"
	  "- - - sandbox=- scope=- thread=- agent=- kind=-\n"
	  "T2 sandbox.other sandbox=y scope=s thread=- agent=- kind=-\n", "", false },
	{ "events --follow: kept and live ones, until the daemon closes",
	  { "events", "--follow" }, NULL,
	  { .replies = { { .chunks = { EVENT(EV_DENY) SUBSCRIBED, EVENT(EV_ALLOW), EVENT(EV_LIVE) },
			   .delay_ms = 20 } } },
	  "events.subscribe", SUBSCRIBE_JSON, 4, EV_DENY_LINE EV_ALLOW_LINE EV_LIVE_LINE,
	  "maf-sandbox: events: the connection to the daemon is closed\n", false },
	{ "events -f and a stray reply",
	  { "events", "-f" }, NULL, ONE(SUBSCRIBED EVENT(EV_DENY) REPLY_OK(1)),
	  "events.subscribe", SUBSCRIBE_JSON, 4, EV_DENY_LINE,
	  "maf-sandbox: events: protocol error: not a valid reply from the daemon\n", false },
	{ "events refused by the daemon",
	  { "events", "--scope", "" }, NULL,
	  ONE("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"scope must not "
	      "be empty\",\"data\":{\"type\":\"InvalidParams\",\"field\":\"scope\"}}}\n"),
	  "events.subscribe", "{\"types\":[\"egress.decision\"],\"scope\":\"\",\"replay\":true}",
	  1, "", "maf-sandbox: InvalidParams: scope must not be empty\n", false },
	{ "events takes no operand", { "events", "x" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "maf-sandbox: 'events' takes no arguments\nTry 'maf-sandbox events --help'.\n", false },
	{ "--follow is for events only", { "ls", "--follow" }, NULL, { 0 }, NULL, NULL, 2, "",
	  "maf-sandbox: 'ls' takes no option '--follow'\nTry 'maf-sandbox ls --help'.\n", false },
};

/* stderr wanted, "@SPEC" replaced by the spec's path. */
static char *want_err(const char *want, const char *spec_path)
{
	const char *at = strstr(want, "@SPEC");
	char *s;

	if (!at)
		return strdup(want);
	ck_assert_int_ge(asprintf(&s, "%.*s%s%s", (int)(at - want), want, spec_path,
				  at + strlen("@SPEC")), 0);
	return s;
}

static void check_cli_output(const struct cli_row *row, const struct cli_result *res,
			     const char *spec_path)
{
	ck_assert_msg(res->rc == row->rc, "%s: exit %d, want %d (stderr: %s)", row->name, res->rc,
		      row->rc, res->err);
	if (row->out_json) {
		json_t *got = json_loads(res->out, 0, NULL), *want = json_loads(row->out, 0, NULL);

		ck_assert_msg(json_equal(got, want), "%s: stdout '%s'", row->name, res->out);
		json_decref(got);
		json_decref(want);
	} else {
		ck_assert_msg(!strcmp(res->out, row->out), "%s: stdout '%s'", row->name, res->out);
	}
	if (row->err) {
		char *want = want_err(row->err, spec_path);

		ck_assert_msg(!strcmp(res->err, want), "%s: stderr '%s'", row->name, res->err);
		free(want);
	} else {
		ck_assert_msg(!strncmp(res->err, "maf-sandbox: ", strlen("maf-sandbox: ")),
			      "%s: stderr '%s'", row->name, res->err);
	}
}

static void write_file(const char *path, const char *content, size_t len)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, content, len), (ssize_t)len);
	close(fd);
}

START_TEST(test_cli_command)
{
	const struct cli_row *row = &cli_rows[_i];
	char dir[64], spec_path[128], missing[128];
	struct cli_result res;
	int fds = count_fds();
	struct fake f;
	json_t *req, *want;

	tmpdir_make(dir, sizeof(dir));
	snprintf(spec_path, sizeof(spec_path), "%s/spec.json", dir);
	snprintf(missing, sizeof(missing), "%s/none.sock", dir);
	if (row->spec)
		write_file(spec_path, row->spec, strlen(row->spec));
	if (row->method)
		fake_start(&f, &row->script);
	cli_run(dir, row->method ? f.path : missing, row->args, spec_path, -1, &res);
	check_cli_output(row, &res, spec_path);
	if (row->method) {
		fake_stop(&f);
		req = check_request(f.request[0], f.request_len[0], row->method);
		want = json_loads(row->params, 0, NULL);
		ck_assert_ptr_nonnull(want);
		ck_assert_msg(json_equal(json_object_get(req, "params"), want), "%s: wrong params",
			      row->name);
		json_decref(want);
		json_decref(req);
		fake_free(&f);
	}
	cli_result_free(&res);
	unlink(spec_path);
	rmdir(dir);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_cli_spec_too_large)
{
	/* Valid JSON, but one byte over the limit: refused before connecting. */
	static const char *const args[] = { "acquire", KEY_ARGS, "--kind", "k", "--spec", "@SPEC", NULL };
	size_t len = CLI_SPEC_MAX_BYTES + 1;
	char dir[64], spec_path[128], missing[128];
	char *big = malloc(len);
	struct cli_result res;

	tmpdir_make(dir, sizeof(dir));
	snprintf(spec_path, sizeof(spec_path), "%s/spec.json", dir);
	snprintf(missing, sizeof(missing), "%s/none.sock", dir);
	memset(big, ' ', len);
	memcpy(big, "{}", 2);
	write_file(spec_path, big, len);
	cli_run(dir, missing, args, spec_path, -1, &res);
	ck_assert_int_eq(res.rc, CLI_EXIT_USAGE);
	ck_assert_ptr_nonnull(strstr(res.err, "is larger than 1048576 bytes"));
	cli_result_free(&res);
	free(big);
	unlink(spec_path);
	rmdir(dir);
}
END_TEST

/* --json: a connection error is one JSON object on stderr, code 3 (the exit
 * status), type ConnectionError, data naming the socket and the errno. */
START_TEST(test_cli_json_connect_error)
{
	static const char *const args[] = { "status", "--json", NULL };
	char dir[64], missing[128];
	struct cli_result res;
	json_t *e;

	tmpdir_make(dir, sizeof(dir));
	snprintf(missing, sizeof(missing), "%s/none.sock", dir);
	cli_run(dir, missing, args, "", -1, &res);
	ck_assert_int_eq(res.rc, CLI_EXIT_CONNECT);
	ck_assert_str_eq(res.out, "");
	ck_assert_ptr_nonnull(strchr(res.err, '\n'));
	ck_assert_msg(strchr(res.err, '\n')[1] == '\0', "more than one line: %s", res.err);
	e = json_loads(res.err, 0, NULL);
	ck_assert_msg(e, "stderr is not JSON: %s", res.err);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), CLI_EXIT_CONNECT);
	ck_assert_str_eq(get_str(e, "type"), "ConnectionError");
	ck_assert_ptr_nonnull(strstr(get_str(e, "message"), missing));
	ck_assert_str_eq(get_str(json_object_get(e, "data"), "socket"), missing);
	ck_assert_str_eq(get_str(json_object_get(e, "data"), "errno"), "ENOENT");
	json_decref(e);
	cli_result_free(&res);
	rmdir(dir);
}
END_TEST

/* --json exec: its own failures exit 125 (CLI_EXIT_EXEC_FAILED, as docker
 * run), and the JSON error's code is that exit status too. */
START_TEST(test_cli_json_exec_connect_error)
{
	static const char *const args[] = { "exec", "--json", SANDBOX_ID, "--", "true", NULL };
	char dir[64], missing[128];
	struct cli_result res;
	json_t *e;

	tmpdir_make(dir, sizeof(dir));
	snprintf(missing, sizeof(missing), "%s/none.sock", dir);
	cli_run(dir, missing, args, "", -1, &res);
	ck_assert_int_eq(res.rc, CLI_EXIT_EXEC_FAILED);
	e = json_loads(res.err, 0, NULL);
	ck_assert_msg(e, "stderr is not JSON: %s", res.err);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), CLI_EXIT_EXEC_FAILED);
	ck_assert_str_eq(get_str(e, "type"), "ConnectionError");
	json_decref(e);
	cli_result_free(&res);
	rmdir(dir);
}
END_TEST

/* status's egress line: the modes, then the proxy binary, or why allowlist
 * is off (which names the key). */
static const struct {
	const char *egress;
	const char *want;
} status_egress_rows[] = {
	{ "{\"configured\":false,\"modes\":[\"closed\"],\"proxy_binary\":null,\"allowlist_off_reason\":"
	  "\"egress.proxy_binary is not set: set it\"}",
	  "egress: closed; allowlist off: egress.proxy_binary is not set: set it\n" },
	{ "{\"configured\":true,\"modes\":[\"closed\",\"allowlist\"],\"proxy_binary\":\"/usr/p\","
	  "\"allowlist_off_reason\":null}",
	  "egress: closed, allowlist (proxy /usr/p)\n" },
	{ "{\"configured\":false}", "egress: none\n" },
};

START_TEST(test_cli_status_egress_line)
{
	static const char *const args[] = { "status", NULL };
	char dir[64], reply[1024];
	struct fake_script script = { 0 };
	struct cli_result res;
	struct fake f;

	snprintf(reply, sizeof(reply), "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"egress\":%s}}\n",
		 status_egress_rows[_i].egress);
	script.replies[0].chunks[0] = reply;
	tmpdir_make(dir, sizeof(dir));
	fake_start(&f, &script);
	cli_run(dir, f.path, args, "", -1, &res);
	fake_stop(&f);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_str_eq(res.out, status_egress_rows[_i].want);
	fake_free(&f);
	cli_result_free(&res);
	rmdir(dir);
}
END_TEST

/* Reads a pipe to its end, opening *gate when the first whole line came. */
struct pipe_reader {
	int fd;
	char buf[4096];
	size_t len;
	int *gate;
};

static void *pipe_reader_main(void *arg)
{
	struct pipe_reader *p = arg;
	ssize_t k;

	while (p->len + 1 < sizeof(p->buf) &&
	       (k = read(p->fd, p->buf + p->len, sizeof(p->buf) - 1 - p->len)) > 0) {
		p->len += (size_t)k;
		if (memchr(p->buf, '\n', p->len))
			__atomic_store_n(p->gate, 1, __ATOMIC_RELEASE);
	}
	p->buf[p->len] = '\0';
	return NULL;
}

START_TEST(test_cli_events_follow_until_signal)
{
	/* stdout a pipe: a live event is there as soon as it is printed, not
	 * at exit (the fake sends SIGTERM, which ends --follow, only once a
	 * line reached the pipe); SIGTERM ends --follow with status 0 and
	 * nothing on stderr. */
	static const char *const args[] = { "events", "--follow", NULL };
	const struct fake_script s = {
		.replies = { { .chunks = { EVENT(EV_DENY) SUBSCRIBED, EVENT(EV_LIVE) }, .delay_ms = 20 } },
		.signal_at_gate = true, .hold = true,
	};
	struct pipe_reader rd = { 0 };
	struct cli_result res;
	int fds = count_fds(), p[2];
	pthread_t reader;
	char dir[64];
	struct fake f;
	json_t *req, *want = json_loads(SUBSCRIBE_JSON, 0, NULL);

	tmpdir_make(dir, sizeof(dir));
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	fake_start(&f, &s);   /* it waits for the CLI to connect */
	rd.fd = p[0];
	rd.gate = &f.gate;
	ck_assert_int_eq(pthread_create(&reader, NULL, pipe_reader_main, &rd), 0);
	cli_run_fds(f.path, args, NULL, p[1], tmpfile_fd(dir), &res);
	pthread_join(reader, NULL);
	close(p[0]);
	fake_stop(&f);
	ck_assert_msg(res.rc == 0, "exit %d (stderr: %s)", res.rc, res.err);
	ck_assert_str_eq(res.err, "");
	ck_assert_str_eq(rd.buf, EV_DENY_LINE EV_LIVE_LINE);
	ck_assert_msg(f.gate_was_open, "no line reached the pipe before --follow was ended");
	req = check_request(f.request[0], f.request_len[0], "events.subscribe");
	ck_assert(json_equal(json_object_get(req, "params"), want));
	json_decref(req);
	json_decref(want);
	fake_free(&f);
	cli_result_free(&res);
	rmdir(dir);
	ck_assert_int_eq(count_fds(), fds);
}
END_TEST

START_TEST(test_cli_events_help)
{
	/* The command list names events; its own help gives its synopsis. */
	static const char *const top[] = { "--help", NULL };
	static const char *const own[] = { "events", "--help", NULL };
	struct cli_result res;
	char dir[64];

	tmpdir_make(dir, sizeof(dir));
	cli_run(dir, "/nonexistent.sock", top, NULL, -1, &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_ptr_nonnull(strstr(res.out, "\n  events        print the egress decisions"));
	cli_result_free(&res);
	cli_run(dir, "/nonexistent.sock", own, NULL, -1, &res);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_ptr_nonnull(strstr(res.out, "Usage: maf-sandbox [OPTIONS] events [-f] [--scope S]\n"));
	ck_assert_ptr_nonnull(strstr(res.out, "  -f, --follow "));
	cli_result_free(&res);
	rmdir(dir);
}
END_TEST

/* Reads what the terminal got, until it stays quiet. Returns it malloc'd. */
static char *pty_drain(int master)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	struct pollfd pfd = { .fd = master, .events = POLLIN };
	ssize_t k;

	while (poll(&pfd, 1, 100) > 0 && (k = read(master, buf + len, cap - len - 1)) > 0) {
		len += (size_t)k;
		if (len + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	buf[len] = '\0';
	return buf;
}

START_TEST(test_cli_progress_on_terminal)
{
	/* stderr on a 40-column terminal: each notification redraws one line,
	 * cut to 39 columns; the line is cleared before the id is printed. */
	static const char *const args[] = { "acquire", KEY_ARGS, "--kind", "k", "--image", "alpine:3",
					    NULL };
	const struct fake_script s = { .replies = { { .chunks = {
		PULL_NOTE("Pulling fs layer"),
		"{\"jsonrpc\":\"2.0\",\"method\":\"sandbox.pull_progress\",\"params\":{\"name\":\"n\","
		"\"image\":\"alpine:3\",\"id\":\"4abc\",\"status\":\"Downloading\",\"current\":2048,"
		"\"total\":4096}}\n",
		"{\"jsonrpc\":\"2.0\",\"method\":\"other.thing\",\"params\":{}}\n",
		REPLY(ACQUIRED) }, .delay_ms = 10 } } };
	struct winsize ws = { .ws_row = 24, .ws_col = 40 };
	struct cli_result res;
	char dir[64], *tty;
	int master, slave;
	struct fake f;

	master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(master, 0);
	ck_assert_int_eq(grantpt(master), 0);
	ck_assert_int_eq(unlockpt(master), 0);
	slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(slave, 0);
	ck_assert_int_eq(ioctl(master, TIOCSWINSZ, &ws), 0);
	tmpdir_make(dir, sizeof(dir));
	fake_start(&f, &s);
	cli_run(dir, f.path, args, NULL, slave, &res);
	fake_stop(&f);
	fake_free(&f);
	tty = pty_drain(master);
	ck_assert_int_eq(res.rc, 0);
	ck_assert_str_eq(res.out, SANDBOX_ID "\n");
	ck_assert_str_eq(tty, "\rpulling alpine:3: Pulling fs layer\033[K"
			      "\rpulling alpine:3: 4abc: Downloading 2.0\033[K"
			      "\r\033[K");
	free(tty);
	cli_result_free(&res);
	close(slave);
	close(master);
	rmdir(dir);
}
END_TEST

/* --- msb_call_stdin --------------------------------------------------------- */

START_TEST(test_call_stdin_streams_an_fd)
{
	/* The exec (id 1), then its stdin as exec.stdin requests with ids of
	 * their own (2: the bytes, 3: the end), each sent once the last was
	 * answered; the exec's result comes after. */
	const struct fake_script s = {
		.requests = 3,
		.replies = { { .chunks = { NULL } },
			     { .chunks = { "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"written\":3}}\n" } },
			     { .chunks = { "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"written\":0}}\n"
					   "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"exit_code\":0}}\n" } } },
	};
	struct msb_conn *conn;
	json_t *result = NULL, *req;
	int pfd[2];
	struct fake f;

	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(write(pfd[1], "abc", 3), 3);
	close(pfd[1]);
	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call_stdin(conn, "sandbox.exec", json_pack("{s:s}", "sandbox", "x"), pfd[0], &result),
			 MSB_OK);
	ck_assert_int_eq(json_integer_value(json_object_get(result, "exit_code")), 0);
	json_decref(result);
	msb_conn_free(conn);
	fake_stop(&f);
	req = check_request(f.request[0], f.request_len[0], "sandbox.exec");
	ck_assert(json_is_true(json_object_get(json_object_get(req, "params"), "stdin_stream")));
	json_decref(req);
	req = check_request(f.request[1], f.request_len[1], "exec.stdin");
	ck_assert_int_eq(json_integer_value(json_object_get(req, "id")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(req, "params"), "call")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(req, "params"), "data_b64")), "YWJj");
	ck_assert(json_is_false(json_object_get(json_object_get(req, "params"), "eof")));
	json_decref(req);
	req = check_request(f.request[2], f.request_len[2], "exec.stdin");
	ck_assert_int_eq(json_integer_value(json_object_get(req, "id")), 3);
	ck_assert(json_is_true(json_object_get(json_object_get(req, "params"), "eof")));
	json_decref(req);
	close(pfd[0]);
	fake_free(&f);
}
END_TEST

/* The cancel flag set while no wait was interrupted (a signal that came
 * while the client read its fd, sent a chunk or its request): call.cancel
 * still goes out, at the next turn, not only on a later signal. Loop 0:
 * msb_call_stdin, 1: msb_call. */
static volatile sig_atomic_t stdin_cancel_flag;

START_TEST(test_call_stdin_cancel_flag_set_outside_the_wait)
{
	const struct fake_script s = {
		.requests = 2,
		.replies = { { .chunks = { NULL } },
			     { .chunks = { "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1209,"
					   "\"message\":\"cancelled\",\"data\":{\"type\":\"Cancelled\"}}}\n" } } },
	};
	struct msb_conn *conn;
	json_t *result = NULL, *req;
	int pfd[2];
	struct fake f;

	ck_assert_int_eq(pipe(pfd), 0);   /* never readable: the write end stays open */
	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	stdin_cancel_flag = 1;
	msb_set_cancel_flag(conn, &stdin_cancel_flag);
	if (_i == 0)
		ck_assert_int_eq(msb_call_stdin(conn, "sandbox.exec", json_pack("{s:s}", "sandbox", "x"), pfd[0],
						&result), MSB_E_REMOTE);
	else
		ck_assert_int_eq(msb_call(conn, "sandbox.exec", json_pack("{s:s}", "sandbox", "x"), &result),
				 MSB_E_REMOTE);
	ck_assert_int_eq(msb_last_error_code(conn), 1209);
	msb_conn_free(conn);
	fake_stop(&f);
	ck_assert_ptr_nonnull(f.request[1]);
	req = json_loadb(f.request[1], f.request_len[1], 0, NULL);
	ck_assert_ptr_nonnull(req);
	ck_assert_str_eq(json_string_value(json_object_get(req, "method")), "call.cancel");
	ck_assert_ptr_null(json_object_get(req, "id"));   /* a notification */
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(req, "params"), "id")), 1);
	json_decref(req);
	close(pfd[0]);
	close(pfd[1]);
	fake_free(&f);
}
END_TEST

START_TEST(test_call_stdin_bad_arguments)
{
	struct msb_conn *conn;
	struct fake f;
	const struct fake_script s = { .deaf = true };

	fake_start(&f, &s);
	ck_assert_int_eq(msb_connect(f.path, &conn), MSB_OK);
	ck_assert_int_eq(msb_call_stdin(conn, "sandbox.exec", json_object(), -1, NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call_stdin(conn, "sandbox.exec", NULL, 0, NULL), MSB_E_INVAL);
	ck_assert_int_eq(msb_call_stdin(NULL, "sandbox.exec", json_object(), 0, NULL), MSB_E_INVAL);
	msb_conn_free(conn);
	fake_stop(&f);
	fake_free(&f);
}
END_TEST

static Suite *client_suite(void)
{
	Suite *s = suite_create("client");
	TCase *tc;

	tc = tcase_create("returns_result");
	tcase_add_loop_test(tc, test_result_returned, 0, ELEMENTSOF(result_rows));
	tcase_add_test(tc, test_result_may_be_discarded);
	suite_add_tcase(s, tc);

	tc = tcase_create("rejects_malformed_reply");
	tcase_add_loop_test(tc, test_malformed_reply, 0, ELEMENTSOF(malformed_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("rejects_wrong_id");
	tcase_add_loop_test(tc, test_wrong_id, 0, ELEMENTSOF(wrong_id_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("reports_daemon_close");
	tcase_add_loop_test(tc, test_daemon_closes, 0, ELEMENTSOF(closed_rows));
	tcase_add_loop_test(tc, test_idle_close_reconnects, 0, 5);
	suite_add_tcase(s, tc);

	tc = tcase_create("reports_remote_error");
	tcase_add_test(tc, test_remote_error_readable);
	tcase_add_loop_test(tc, test_remote_error_variants, 0, ELEMENTSOF(remote_rows));
	tcase_add_test(tc, test_remote_error_after_hangup);
	suite_add_tcase(s, tc);

	tc = tcase_create("times_out");
	tcase_add_loop_test(tc, test_timeout, 0, ELEMENTSOF(timeout_rows));
	tcase_add_test(tc, test_timeout_spans_the_whole_call);
	suite_add_tcase(s, tc);

	tc = tcase_create("sends_request");
	tcase_add_test(tc, test_request_without_params);
	tcase_add_test(tc, test_request_with_params);
	tcase_add_test(tc, test_request_ids_increase);
	tcase_add_test(tc, test_request_big_arrives_whole);
	tcase_add_loop_test(tc, test_request_shorthands, 0, ELEMENTSOF(shorthand_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("call_stdin");
	tcase_add_test(tc, test_call_stdin_streams_an_fd);
	tcase_add_test(tc, test_call_stdin_bad_arguments);
	tcase_add_loop_test(tc, test_call_stdin_cancel_flag_set_outside_the_wait, 0, 2);
	suite_add_tcase(s, tc);
	tc = tcase_create("rejects_bad_arguments");
	tcase_add_test(tc, test_bad_arguments);
	suite_add_tcase(s, tc);

	tc = tcase_create("connects");
	tcase_add_loop_test(tc, test_connect_fails, 0, ELEMENTSOF(connect_rows));
	tcase_add_test(tc, test_connect_bad_path);
	tcase_add_test(tc, test_connect_default_path);
	tcase_add_test(tc, test_connect_default_nobody_listens);
	suite_add_tcase(s, tc);

	tc = tcase_create("default_socket_path");
	tcase_add_loop_test(tc, test_default_socket_path, 0, ELEMENTSOF(default_path_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("delivers_notifications");
	tcase_add_loop_test(tc, test_notify_delivered, 0, ELEMENTSOF(notify_rows));
	tcase_add_test(tc, test_notify_unset_skips);
	tcase_add_test(tc, test_notify_late_goes_to_next_call);
	tcase_add_test(tc, test_notify_hook_may_not_call);
	suite_add_tcase(s, tc);

	tc = tcase_create("waits_for_notifications");
	tcase_add_loop_test(tc, test_wait_notify, 0, ELEMENTSOF(wait_rows));
	tcase_add_test(tc, test_wait_notify_without_hook);
	tcase_add_test(tc, test_wait_notify_timeout_keeps_connection);
	tcase_add_test(tc, test_wait_notify_zero_reads_what_is_there);
	tcase_add_test(tc, test_wait_notify_signal_ends_wait);
	tcase_add_test(tc, test_wait_notify_hook_may_not_wait);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli_parses_durations");
	tcase_add_loop_test(tc, test_duration_parse, 0, ELEMENTSOF(duration_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("cli_formats_progress");
	tcase_add_loop_test(tc, test_progress_format, 0, ELEMENTSOF(progress_rows));
	tcase_add_test(tc, test_cli_progress_on_terminal);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli_runs_commands");
	tcase_add_loop_test(tc, test_cli_command, 0, ELEMENTSOF(cli_rows));
	tcase_add_test(tc, test_cli_spec_too_large);
	tcase_add_test(tc, test_cli_json_connect_error);
	tcase_add_test(tc, test_cli_json_exec_connect_error);
	tcase_add_loop_test(tc, test_cli_status_egress_line, 0, ELEMENTSOF(status_egress_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("cli_prints_events");
	tcase_add_test(tc, test_cli_events_follow_until_signal);
	tcase_add_test(tc, test_cli_events_help);
	suite_add_tcase(s, tc);

	tc = tcase_create("strerror");
	tcase_add_test(tc, test_strerror_distinct);
	tcase_add_test(tc, test_strerror_unknown);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(client_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
