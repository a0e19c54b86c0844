/* check_client.c — libmaf-sandbox against a fake daemon: a pthread serving
 * canned reply bytes on a temporary Unix socket under a mkdtemp directory.
 * Each test also checks that it leaves no file descriptor behind. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "msb.h"
#include "../../proto/msb-limits.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

/* --- the fake daemon ----------------------------------------------------- */

#define FAKE_MAX_CHUNKS    8
#define FAKE_MAX_EXCHANGES 2
/* The fake never waits longer than this for the client, so a broken test
 * ends instead of hanging. */
#define FAKE_IO_WAIT_MS    2000
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
};

struct fake {
	char dir[64];
	char path[128];
	int lfd;
	pthread_t thread;
	const struct fake_script *script;
	char *request[FAKE_MAX_EXCHANGES];  /* bytes of each request, LF included */
	size_t request_len[FAKE_MAX_EXCHANGES];
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

/* Reads one request, up to and including its LF. NULL if none came. */
static char *fake_read_request(int fd, size_t *ret_len)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);

	while (!memchr(buf, '\n', len)) {
		ssize_t k;

		if (len == cap)
			buf = realloc(buf, cap *= 2);
		if (!fake_wait(fd) || (k = recv(fd, buf + len, cap - len, 0)) <= 0) {
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

/* Waits (bounded) for the client to close its end, draining what it sends. */
static void fake_hold(int fd)
{
	char buf[4096];
	int64_t end = now_ms() + FAKE_IO_WAIT_MS;

	while (now_ms() < end && fake_wait(fd))
		if (recv(fd, buf, sizeof(buf), 0) <= 0)
			break;
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
	if (f->script->hold || f->script->deaf)
		fake_hold(fd);
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
	*f = (struct fake){ .script = script };
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
#define TIMEOUT_SLACK_MS 900

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

START_TEST(test_timeout)
{
	const struct timeout_row *row = &timeout_rows[_i];
	int64_t start = now_ms(), took;
	int rc = run_call(&row->script, TIMEOUT_MS, row->big ? big_params() : NULL, NULL);

	took = now_ms() - start;
	ck_assert_msg(rc == MSB_E_TIMEOUT, "%s: %s", row->name, msb_strerror(rc));
	ck_assert_int_ge(took, TIMEOUT_MS);
	ck_assert_int_lt(took, TIMEOUT_MS + TIMEOUT_SLACK_MS);
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
	const char *xdg_env;     /* XDG_RUNTIME_DIR; NULL = unset */
	bool root;               /* effective uid 0 */
	const char *want;        /* NULL = no default */
};

static const struct default_path_row default_path_rows[] = {
	{ "/tmp/a.sock", NULL, false, "/tmp/a.sock" },
	{ "/tmp/a.sock", "/run/user/1000", false, "/tmp/a.sock" },
	{ "/tmp/a.sock", "/run/user/1000", true, "/tmp/a.sock" },
	{ "", "/run/user/1000", false, "/run/user/1000/maf-sandbox.sock" },
	{ "", NULL, true, "/run/maf-sandbox.sock" },
	{ NULL, NULL, true, "/run/maf-sandbox.sock" },
	{ NULL, "/run/user/1000", true, "/run/maf-sandbox.sock" },
	{ NULL, "/run/user/1000", false, "/run/user/1000/maf-sandbox.sock" },
	{ NULL, "", false, NULL },
	{ NULL, NULL, false, NULL },
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
	char *path;

	/* A row for root can only run as root; a row for another user drops
	 * the effective uid for the call when the suite runs as root. */
	if (row->root && !was_root)
		return;
	env_put("MAF_SANDBOX_SOCKET", row->socket_env);
	env_put("XDG_RUNTIME_DIR", row->xdg_env);
	if (!row->root && was_root)
		ck_assert_int_eq(seteuid(UNPRIVILEGED_UID), 0);
	path = msb_default_socket_path();
	if (!row->root && was_root)
		ck_assert_int_eq(seteuid(0), 0);
	ck_assert_pstr_eq(path, row->want);
	free(path);
}
END_TEST

START_TEST(test_connect_no_default)
{
	bool was_root = geteuid() == 0;
	struct msb_conn *conn = NULL;
	int rc;

	unsetenv("MAF_SANDBOX_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	if (was_root)
		ck_assert_int_eq(seteuid(UNPRIVILEGED_UID), 0);
	rc = msb_connect(NULL, &conn);
	if (was_root)
		ck_assert_int_eq(seteuid(0), 0);
	ck_assert_int_eq(rc, MSB_E_CONNECT);
	ck_assert_ptr_null(conn);
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

	tc = tcase_create("rejects_bad_arguments");
	tcase_add_test(tc, test_bad_arguments);
	suite_add_tcase(s, tc);

	tc = tcase_create("connects");
	tcase_add_loop_test(tc, test_connect_fails, 0, ELEMENTSOF(connect_rows));
	tcase_add_test(tc, test_connect_bad_path);
	tcase_add_test(tc, test_connect_default_path);
	tcase_add_test(tc, test_connect_no_default);
	suite_add_tcase(s, tc);

	tc = tcase_create("default_socket_path");
	tcase_add_loop_test(tc, test_default_socket_path, 0, ELEMENTSOF(default_path_rows));
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
