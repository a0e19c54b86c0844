/* check_execrun.c — one command run over the Engine API (execrun.h) and the
 * docker_exec_* calls under it (docker.h), against the fake engine: the
 * exact requests, the demultiplexed output byte for byte whatever the
 * chunking, malformed streams, the output cap, the deadline, the paused
 * retry under our own freeze, every refusal, and exactly-once callbacks
 * on success, failure, timeout and cancel.
 *
 * The fake's `raw` replies are C strings, and a frame header always holds
 * NUL bytes, so a stream read to the close (no Content-Length, no
 * chunking: what the engine sends) comes from a small raw server of our
 * own, bound to the fake's socket path once the engine is reachable. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "cleanup.h"
#include "docker.h"
#include "endpoint.h"
#include "engine.h"
#include "execrun.h"
#include "fake_engine.h"
#include "freeze.h"
#include "log.h"
#include "loop.h"
#include "slow.h"
#include "xmalloc.h"

#define RUN_MAX_MS   2000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define SETTLE_MS    40
#define SHORT_MS     150         /* a deadline that passes during a test */
#define SLOW_MS      1000        /* a reply held back longer than SHORT_MS */
/* A reply held back for good, as far as a test can tell: the fake ends the
 * wait when the client closes the request (or the fake stops), and counts
 * that (fake_engine_abandoned_count). */
#define NEVER_MS     60000
/* A run's deadline that has to pass in a test after the run reached a
 * given step (start sent, probe asked): hang guard margin for reaching it
 * (a few requests), stretched under valgrind (by less than the factor: a
 * test's run under valgrind stays inside Check's 30 s); the test then waits
 * for the deadline to pass. */
#define STEP_DEADLINE_MS (3L * SHORT_MS * (test_is_slow() ? 5 : 1))
#define API          "/v1.45"
#define TEXT_MAX     512
#define REC_BYTES    8192        /* output bytes a record keeps (lengths are kept whole) */
#define PROBE_REQUESTS 2

#define VERSION_BODY \
	"{\"Version\":\"26.1.0\",\"ApiVersion\":\"1.45\",\"Os\":\"linux\",\"Arch\":\"amd64\"," \
	"\"KernelVersion\":\"6.1.0\"}"
#define PING    { .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .body = VERSION_BODY, .repeat = true }

#define C1           "c1"
#define E1           "e1"
#define CREATE_PATH  API "/containers/" C1 "/exec"
#define START_PATH   API "/exec/" E1 "/start"
#define INSPECT_PATH API "/exec/" E1 "/json"
#define MUX_TYPE     "Content-Type: application/vnd.docker.multiplexed-stream\r\n"
#define JSON_TYPE    "Content-Type: application/json\r\n"
#define PAUSED_MSG   "Container c1 is paused, unpause the container before exec"

#define CREATE_R(st, b, ...) { .method = "POST", .path = CREATE_PATH, .status = st, .headers = JSON_TYPE, \
			       .body = b, __VA_ARGS__ }
#define CREATE(...)          CREATE_R(201, "{\"Id\":\"" E1 "\"}", __VA_ARGS__)
#define CREATE_PAUSED(...)   CREATE_R(409, "{\"message\":\"" PAUSED_MSG "\"}", __VA_ARGS__)
#define START_R(st, b, ...)  { .method = "POST", .path = START_PATH, .status = st, .body = b, __VA_ARGS__ }
/* The output: bytes (NULs included) of length n. */
#define START(b, n, ...)     { .method = "POST", .path = START_PATH, .headers = MUX_TYPE, .body = (const char *)(b), \
			       .body_len = n, .close = true, __VA_ARGS__ }
#define INSPECT_R(st, b, ...) { .method = "GET", .path = INSPECT_PATH, .status = st, .headers = JSON_TYPE, \
				.body = b, __VA_ARGS__ }
#define INSPECT(code)        INSPECT_R(200, "{\"ID\":\"" E1 "\",\"Running\":false,\"ExitCode\":" #code "}", )
#define PAUSE        { .method = "POST", .path = API "/containers/" C1 "/pause", .status = 204 }
#define UNPAUSE      { .method = "POST", .path = API "/containers/" C1 "/unpause", .status = 204 }

static struct event_base *base;
static struct engine *engine;
static struct freeze_table *table;
static int reachable_count;

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};
/* No engine request timeout: a request held back for good ends only by the
 * run's deadline or cancel (not by the engine's 2 s, after them). */
static const struct engine_options no_timeout_opts = { .reconnect_min_ms = 20, .reconnect_max_ms = 80 };

static void run_until(const int *counter, int want, int max_ms)
{
	loop_run_until(base, counter, want, max_ms);
}

static void run_for(int ms)
{
	run_until(NULL, 0, ms);
}

/* "Nothing more is sent" is counted where requests are sent, by the
 * engine (engine_call_requests_made), not where the fake's thread reads
 * them, which on a loaded machine can be a while later. */
/* A run ended while its start was sent and unsettled leaves a linger that
 * asks the engine (GET /exec/{eid}/json) until the start settles: its
 * requests come after the run's end. Waits until none is left (the
 * scripts answer its first probe with an exit code). */
static void lingers_settled(void)
{
	/* hang guard */
	LOOP_RUN_WHILE(base, execrun_lingers_count() > 0, 5 * RUN_MAX_MS);
	ck_assert_uint_eq(execrun_lingers_count(), 0);
}

static void raw_stop(void);

static void setup(void)
{
	reachable_count = 0;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
	table = freeze_table_new();
	log_set_debug(true);   /* the debug lines are formatted too (UBSan sees them) */
}

static void teardown(void)
{
	execrun_lingers_end();
	engine = engine_free(engine);
	table = freeze_table_free(table);
	event_base_free(base);
	raw_stop();
	fake_engine_cleanup();
}

static void start_reachable(const struct fake_reply *script, size_t n)
{
	loop_engine_start_reachable(base, engine, &reachable_count, script, n, RUN_MAX_MS);
}

/* Requests the fake saw whose path starts with prefix. */
static size_t requests_to(const char *prefix)
{
	size_t n = 0;

	for (size_t i = 0; i < fake_engine_request_count(); i++)
		n += strncmp(fake_engine_request(i)->path, prefix, strlen(prefix)) == 0;
	return n;
}

/* The first request to prefix. */
static const struct fake_request *request_to(const char *prefix)
{
	for (size_t i = 0; i < fake_engine_request_count(); i++)
		if (strncmp(fake_engine_request(i)->path, prefix, strlen(prefix)) == 0)
			return fake_engine_request(i);
	ck_abort_msg("no request to %s", prefix);
	return NULL;
}

/* ---- building streams ------------------------------------------------------------------ */

struct bytes {
	uint8_t *p;
	size_t n;
};

static void bytes_release(struct bytes *b)
{
	free(b->p);
	*b = (struct bytes){ 0 };
}

static void bytes_add(struct bytes *b, const void *p, size_t n)
{
	b->p = xrealloc(b->p, b->n + n + 1);
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void frame_header_add(struct bytes *b, unsigned stream, uint32_t len)
{
	uint8_t h[8] = { (uint8_t)stream, 0, 0, 0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
			 (uint8_t)len };

	bytes_add(b, h, sizeof(h));
}

static void frame_add(struct bytes *b, unsigned stream, const void *p, size_t n)
{
	frame_header_add(b, stream, (uint32_t)n);
	bytes_add(b, p, n);
}

static void frame_add_str(struct bytes *b, unsigned stream, const char *s)
{
	frame_add(b, stream, s, strlen(s));
}

/* ---- recording runs ------------------------------------------------------------------- */

enum action {
	ACT_NONE,
	ACT_FREE_ENGINE,     /* engine_free from inside the callback */
	ACT_CANCEL_OTHER,    /* execrun_cancel of another run from inside the callback */
};

struct run_rec {
	struct execrun *x;
	int calls;
	int error;
	long status;
	bool message_null;
	char message[TEXT_MAX];
	int exit_code;
	bool out_null, err_null;
	uint8_t out[REC_BYTES], err[REC_BYTES];
	size_t out_len, err_len;
	char exec_id[TEXT_MAX];      /* "" when the result had none */
	enum action action;
	struct execrun *other;
};

static void run_cb(const struct execrun_result *r, void *arg)
{
	struct run_rec *rec = arg;

	rec->calls++;
	rec->error = r->error;
	rec->status = r->status;
	rec->message_null = r->message == NULL;
	snprintf(rec->message, sizeof(rec->message), "%s", r->message ? r->message : "(null)");
	rec->exit_code = r->exit_code;
	rec->out_null = r->out == NULL;
	rec->err_null = r->err == NULL;
	rec->out_len = r->out_len;
	rec->err_len = r->err_len;
	snprintf(rec->exec_id, sizeof(rec->exec_id), "%s", r->exec_id ? r->exec_id : "");
	if (r->out)
		memcpy(rec->out, r->out, r->out_len < REC_BYTES ? r->out_len : REC_BYTES);
	if (r->err)
		memcpy(rec->err, r->err, r->err_len < REC_BYTES ? r->err_len : REC_BYTES);
	if (rec->action == ACT_FREE_ENGINE)
		engine = engine_free(engine);
	if (rec->action == ACT_CANCEL_OTHER)
		execrun_cancel(rec->other);
}

static const char *const argv_default[] = { "sh", "-c", "echo hi", NULL };

static void run_start_spec(struct run_rec *rec, const struct execrun_spec *spec)
{
	ck_assert_int_eq(execrun_start(base, engine, table, C1, spec, run_cb, rec, &rec->x), 0);
	ck_assert_ptr_nonnull(rec->x);
	ck_assert_int_eq(rec->calls, 0);   /* never inside execrun_start */
}

static void run_start(struct run_rec *rec, long timeout_ms, size_t max_output)
{
	struct execrun_spec spec = { .argv = argv_default, .timeout_ms = timeout_ms, .max_output = max_output };

	run_start_spec(rec, &spec);
}

/* Waits for the callback, then makes sure no second one follows. */
static void run_wait(struct run_rec *rec)
{
	run_until(&rec->calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec->calls, 1);
	ck_assert(!rec->out_null);
	ck_assert(!rec->err_null);
}

static void assert_out(const struct run_rec *rec, const void *p, size_t n)
{
	ck_assert_uint_eq(rec->out_len, n);
	ck_assert(n <= REC_BYTES);
	ck_assert_msg(memcmp(rec->out, p, n) == 0, "stdout differs");
}

static void assert_err(const struct run_rec *rec, const void *p, size_t n)
{
	ck_assert_uint_eq(rec->err_len, n);
	ck_assert(n <= REC_BYTES);
	ck_assert_msg(memcmp(rec->err, p, n) == 0, "stderr differs");
}

/* ---- a raw server: replies sent byte for byte, then the connection closed ----------- */

#define RAW_MAX_REPLIES  8
#define RAW_MAX_REQUESTS 16
#define RAW_MAX_HEAD     4096

struct raw_reply {
	const char *path;          /* matched against the request line's path (prefix) */
	const void *bytes;
	size_t len;
};

static struct {
	bool running;
	int listen_fd;
	int stop_pipe[2];
	pthread_t thread;
	const struct raw_reply *script;
	size_t n;
	bool used[RAW_MAX_REPLIES];
	pthread_mutex_t lock;
	char requests[RAW_MAX_REQUESTS][RAW_MAX_HEAD];   /* head and body as received */
	size_t nrequests;
} raw = { .listen_fd = -1, .stop_pipe = { -1, -1 }, .lock = PTHREAD_MUTEX_INITIALIZER };

/* 1 when fd is readable, 0 when stopping. */
static int raw_wait(int fd)
{
	struct pollfd p[2] = { { .fd = raw.stop_pipe[0], .events = POLLIN }, { .fd = fd, .events = POLLIN } };

	while (poll(p, 2, -1) < 0)
		if (errno != EINTR)
			return 0;
	return p[0].revents ? 0 : 1;
}

/* Reads one request (head and Content-Length body) into buf. */
static size_t raw_read_request(int fd, char *buf, size_t cap)
{
	size_t len = 0;

	while (len < cap - 1 && raw_wait(fd)) {
		ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
		const char *end, *cl;

		if (k <= 0)
			break;
		len += (size_t)k;
		buf[len] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		cl = strcasestr(buf, "Content-Length:");
		if (!cl || cl > end || len >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			break;
	}
	buf[len] = '\0';
	return len;
}

static const struct raw_reply *raw_match(const char *req)
{
	char path[RAW_MAX_HEAD];

	if (sscanf(req, "%*s %4095s", path) != 1)
		return NULL;
	for (size_t i = 0; i < raw.n; i++) {
		if (raw.used[i] || strncmp(path, raw.script[i].path, strlen(raw.script[i].path)) != 0)
			continue;
		raw.used[i] = true;
		return &raw.script[i];
	}
	return NULL;
}

static void *raw_main(void *arg)
{
	static const char not_found[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

	(void)arg;
	while (raw_wait(raw.listen_fd)) {
		char req[RAW_MAX_HEAD];
		const struct raw_reply *r;
		int fd = accept4(raw.listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			continue;
		raw_read_request(fd, req, sizeof(req));
		pthread_mutex_lock(&raw.lock);
		if (raw.nrequests < RAW_MAX_REQUESTS)
			memcpy(raw.requests[raw.nrequests++], req, sizeof(req));
		r = raw_match(req);
		pthread_mutex_unlock(&raw.lock);
		if (r)
			(void)!send(fd, r->bytes, r->len, MSG_NOSIGNAL);
		else
			(void)!send(fd, not_found, strlen(not_found), MSG_NOSIGNAL);
		shutdown(fd, SHUT_WR);
		close(fd);
	}
	return NULL;
}

/* Stops the fake (its connections close; libcurl opens new ones) and
 * serves script on the same socket path, one request per connection. */
static void raw_start(const struct raw_reply *script, size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	ck_assert_uint_le(n, RAW_MAX_REPLIES);
	fake_engine_stop();
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fake_engine_socket_path());
	raw.script = script;
	raw.n = n;
	memset(raw.used, 0, sizeof(raw.used));
	raw.nrequests = 0;
	ck_assert_int_eq(pipe2(raw.stop_pipe, O_CLOEXEC), 0);
	raw.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(raw.listen_fd, 0);
	unlink(sa.sun_path);
	ck_assert_int_eq(bind(raw.listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(raw.listen_fd, 8), 0);
	ck_assert_int_eq(pthread_create(&raw.thread, NULL, raw_main, NULL), 0);
	raw.running = true;
}

static void raw_stop(void)
{
	if (!raw.running)
		return;
	(void)!write(raw.stop_pipe[1], "x", 1);
	pthread_join(raw.thread, NULL);
	close(raw.listen_fd);
	close(raw.stop_pipe[0]);
	close(raw.stop_pipe[1]);
	raw.listen_fd = raw.stop_pipe[0] = raw.stop_pipe[1] = -1;
	unlink(fake_engine_socket_path());
	raw.running = false;
}

/* The raw server's request i (head and body). */
static const char *raw_request(size_t i)
{
	ck_assert_uint_lt(i, raw.nrequests);
	return raw.requests[i];
}

/* A whole JSON reply that closes its connection. malloc'd into b. */
static void raw_json(struct bytes *b, const char *status_line, const char *json)
{
	_cleanup_free_ char *s = xasprintf("HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
					   "Connection: close\r\n\r\n%s", status_line, strlen(json), json);

	bytes_add(b, s, strlen(s));
}

/* The engine's hijacked start reply: a head with neither length nor
 * chunking, then the stream until the close. */
static void raw_stream_head(struct bytes *b)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\n"
				   "Api-Version: 1.45\r\nServer: Docker/26.1.0 (linux)\r\n\r\n";

	bytes_add(b, head, strlen(head));
}

/* ---- exit codes and output ------------------------------------------------------------ */

START_TEST(test_exit_codes)
{
	static const int codes[] = { 0, 7 };
	_cleanup_(bytes_release) struct bytes s = { 0 };
	_cleanup_free_ char *inspect = xasprintf("{\"ID\":\"e1\",\"Running\":false,\"ExitCode\":%d,\"Pid\":42}", codes[_i]);
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT_R(200, inspect) };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "hello\n");
	frame_add_str(&s, 2, "oops\n");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.exit_code, codes[_i]);
	ck_assert_int_eq(rec.status, 0);
	ck_assert(rec.message_null);
	assert_out(&rec, "hello\n", 6);
	assert_err(&rec, "oops\n", 5);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS + 3);
	ck_assert_str_eq(fake_engine_request(PROBE_REQUESTS)->path, CREATE_PATH);
	ck_assert_str_eq(fake_engine_request(PROBE_REQUESTS + 1)->path, START_PATH);
	ck_assert_str_eq(fake_engine_request(PROBE_REQUESTS + 2)->path, INSPECT_PATH);
}
END_TEST

/* Every byte value on both streams, interleaved frames, empty frames and
 * stdin frames (ignored): each stream comes out whole and in order. */
START_TEST(test_bytes_exact)
{
	_cleanup_(bytes_release) struct bytes s = { 0 }, want_out = { 0 }, want_err = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	uint8_t all[256], rev[256];
	struct run_rec rec = { 0 };

	for (int i = 0; i < 256; i++) {
		all[i] = (uint8_t)i;
		rev[i] = (uint8_t)(255 - i);
	}
	frame_add(&s, 1, all, 128);
	frame_add(&s, 2, rev, 256);
	frame_add(&s, 1, "", 0);
	frame_add(&s, 0, "stdin?", 6);
	frame_add(&s, 1, all + 128, 128);
	frame_add(&s, 2, "\0\0\x80\xff", 4);
	bytes_add(&want_out, all, 256);
	bytes_add(&want_err, rev, 256);
	bytes_add(&want_err, "\0\0\x80\xff", 4);
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	assert_out(&rec, want_out.p, want_out.n);
	assert_err(&rec, want_err.p, want_err.n);
}
END_TEST

/* Frame headers and payloads split at every point: chunk sizes 1 to 9
 * and 13 (libcurl hands each chunk on by itself), and one Content-Length
 * body. */
static const struct {
	bool chunked;
	size_t chunk_size;
} split_rows[] = {
	{ true, 1 }, { true, 2 }, { true, 3 }, { true, 4 }, { true, 5 }, { true, 6 }, { true, 7 },
	{ true, 8 }, { true, 9 }, { true, 13 }, { false, 0 },
};

START_TEST(test_split_frames)
{
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(3) };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "one");
	frame_add_str(&s, 2, "two\0two");
	frame_add_str(&s, 1, "");
	frame_add_str(&s, 1, "three");
	frame_add(&s, 2, "\xff\x00\x01", 3);
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	script[3].chunked = split_rows[_i].chunked;
	script[3].chunk_size = split_rows[_i].chunk_size;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.exit_code, 3);
	assert_out(&rec, "onethree", 8);
	assert_err(&rec, "two\xff\x00\x01", 6);
}
END_TEST

/* The engine's own framing: no length, no chunking, the body ends at the
 * close; each of the three requests on a connection of its own. */
START_TEST(test_read_to_close)
{
	static const struct fake_reply script[] = { PING, VERSION };
	_cleanup_(bytes_release) struct bytes create = { 0 }, start = { 0 }, inspect = { 0 };
	uint8_t big[3000];
	struct run_rec rec = { 0 };
	struct raw_reply replies[3];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	raw_json(&create, "201 Created", "{\"Id\":\"e1\"}");
	raw_stream_head(&start);
	frame_add(&start, 1, big, sizeof(big));
	frame_add(&start, 2, "\0err\n", 5);
	raw_json(&inspect, "200 OK", "{\"Running\":false,\"ExitCode\":5}");
	replies[0] = (struct raw_reply){ CREATE_PATH, create.p, create.n };
	replies[1] = (struct raw_reply){ START_PATH, start.p, start.n };
	replies[2] = (struct raw_reply){ INSPECT_PATH, inspect.p, inspect.n };
	start_reachable(script, ELEMENTSOF(script));
	raw_start(replies, ELEMENTSOF(replies));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_msg(rec.error == 0, "error %d: %s", rec.error, rec.message);
	ck_assert_int_eq(rec.exit_code, 5);
	assert_out(&rec, big, sizeof(big));
	assert_err(&rec, "\0err\n", 5);
	ck_assert_uint_eq(raw.nrequests, 3);
	ck_assert_ptr_nonnull(strstr(raw_request(1), "POST " START_PATH " HTTP/1.1\r\n"));
}
END_TEST

/* ---- malformed streams ------------------------------------------------------------------ */

/* The stream ends inside a frame: in its header, or in its payload. */
static const struct {
	size_t cut;          /* bytes of the last frame sent */
	bool chunked;
} midframe_rows[] = {
	{ 1, false }, { 7, false }, { 8, false }, { 9, false }, { 1, true }, { 8, true }, { 10, true },
};

START_TEST(test_ends_mid_frame)
{
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	struct run_rec rec = { 0 };
	size_t whole;

	frame_add_str(&s, 1, "ok");
	whole = s.n;
	frame_add_str(&s, 2, "truncated");
	script[3].body = (const char *)s.p;
	script[3].body_len = whole + midframe_rows[_i].cut;
	script[3].chunked = midframe_rows[_i].chunked;
	script[3].chunk_size = 3;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EIO);
	ck_assert_ptr_nonnull(strstr(rec.message, "inside a frame"));
	assert_out(&rec, "ok", 2);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);
}
END_TEST

/* The same, read to the close as the engine sends it. */
START_TEST(test_ends_mid_frame_at_close)
{
	static const struct fake_reply script[] = { PING, VERSION };
	_cleanup_(bytes_release) struct bytes create = { 0 }, start = { 0 };
	struct run_rec rec = { 0 };
	struct raw_reply replies[2];

	raw_json(&create, "201 Created", "{\"Id\":\"e1\"}");
	raw_stream_head(&start);
	frame_add_str(&start, 1, "ok");
	frame_header_add(&start, 1, 100);
	bytes_add(&start, "short", 5);
	replies[0] = (struct raw_reply){ CREATE_PATH, create.p, create.n };
	replies[1] = (struct raw_reply){ START_PATH, start.p, start.n };
	start_reachable(script, ELEMENTSOF(script));
	raw_start(replies, ELEMENTSOF(replies));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EIO);
	ck_assert_ptr_nonnull(strstr(rec.message, "inside a frame"));
	ck_assert_uint_eq(raw.nrequests, 2);
}
END_TEST

/* A stream type that does not exist aborts the stream: -EIO, no inspect. */
START_TEST(test_unknown_stream)
{
	static const unsigned streams[] = { 4, 0x7f, 0xff };
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0, .stall = true), INSPECT(0) };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "ok");
	frame_add_str(&s, streams[_i], "??");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EIO);
	ck_assert_ptr_nonnull(strstr(rec.message, "unknown stream"));
	assert_out(&rec, "ok", 2);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);
}
END_TEST

/* Stream 3 carries the engine's own error: -EIO with its text (control
 * characters replaced), once the frame is whole, even if split. */
START_TEST(test_system_error_frame)
{
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START(NULL, 0, .chunked = true, .chunk_size = 5, .stall = true), INSPECT(0),
	};
	struct run_rec rec = { 0 };

	frame_add_str(&s, 3, "OCI runtime exec failed\r\n");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EIO);
	ck_assert_str_eq(rec.message, "the engine reported an error in the exec output: OCI runtime exec failed??");
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);
}
END_TEST

/* ---- the exit code ------------------------------------------------------------------------- */

/* Running after the stream ended: asked again, a bounded number of times. */
START_TEST(test_inspect_still_running_then_exited)
{
	static const struct fake_reply script[] = {
		PING, VERSION, CREATE(), START(NULL, 0),
		INSPECT_R(200, "{\"Running\":true,\"ExitCode\":null}"),
		INSPECT_R(200, "{\"Running\":true,\"ExitCode\":null}"),
		INSPECT(9),
	};
	struct run_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.exit_code, 9);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 3);
}
END_TEST

START_TEST(test_inspect_never_exits)
{
	static const struct fake_reply script[] = {
		PING, VERSION, CREATE(), START(NULL, 0),
		INSPECT_R(200, "{\"Running\":true,\"ExitCode\":null}", .repeat = true),
	};
	struct run_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EIO);
	ck_assert_ptr_nonnull(strstr(rec.message, "still runs"));
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 1 + EXECRUN_INSPECT_RETRIES);
}
END_TEST

/* Inspect replies that make no sense, and an exec gone by inspect time. */
static const struct {
	int status;
	const char *body;
	int error;
} inspect_bad_rows[] = {
	{ 200, "{\"Running\":false}", -EIO },
	{ 200, "{\"Running\":false,\"ExitCode\":null}", -EIO },
	{ 200, "{\"Running\":false,\"ExitCode\":\"7\"}", -EIO },
	{ 200, "{\"Running\":false,\"ExitCode\":4294967296}", -EIO },
	{ 200, "[]", -EIO },
	{ 200, "not json", -EIO },
	{ 500, "{\"message\":\"boom\"}", -EIO },
	{ 404, "{\"message\":\"No such exec instance: e1\"}", -ENOENT },
};

START_TEST(test_inspect_bad)
{
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START(NULL, 0),
		INSPECT_R(inspect_bad_rows[_i].status, inspect_bad_rows[_i].body),
	};
	struct run_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, inspect_bad_rows[_i].error);
	ck_assert(!rec.message_null);
	if (inspect_bad_rows[_i].status != 200)
		ck_assert_int_eq(rec.status, inspect_bad_rows[_i].status);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 1);
}
END_TEST

/* ---- the output cap ------------------------------------------------------------------------- */

#define CAP 10

/* stdout + stderr together: exactly the cap passes, one more byte is
 * refused at once even when the guest then goes silent (a stall with no
 * deadline), with no inspect. */
static const struct {
	const char *out, *err;
	int error;
} cap_rows[] = {
	{ "123456", "7890", 0 },
	{ "1234567890", "", 0 },
	{ "", "1234567890", 0 },
	{ "123456", "78901", -EFBIG },
	{ "12345678901", "", -EFBIG },
	{ "", "12345678901", -EFBIG },
};

START_TEST(test_output_cap)
{
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0, .stall = true), INSPECT(0) };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, cap_rows[_i].out);
	frame_add_str(&s, 2, cap_rows[_i].err);
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	if (cap_rows[_i].error == 0)
		script[3].stall = false;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, CAP);
	run_wait(&rec);   /* past the cap the stream stalls for good: only the cap ends it */
	ck_assert_int_eq(rec.error, cap_rows[_i].error);
	if (rec.error == 0) {
		assert_out(&rec, cap_rows[_i].out, strlen(cap_rows[_i].out));
		assert_err(&rec, cap_rows[_i].err, strlen(cap_rows[_i].err));
		ck_assert_uint_eq(requests_to(INSPECT_PATH), 1);
	} else {
		ck_assert_uint_le(rec.out_len + rec.err_len, CAP);
		ck_assert_ptr_nonnull(strstr(rec.message, "more than 10 bytes"));
		ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);
	}
}
END_TEST

/* No cap named: EXECRUN_DEFAULT_MAX_OUTPUT, exactly and one over. */
START_TEST(test_output_default_cap)
{
	size_t n = EXECRUN_DEFAULT_MAX_OUTPUT + (size_t)_i;
	_cleanup_free_ uint8_t *payload = xmalloc(n);
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	struct run_rec rec = { 0 };

	memset(payload, 'x', n);
	frame_add(&s, 1, payload, n);
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, _i == 0 ? 0 : -EFBIG);
	if (_i == 0)
		ck_assert_uint_eq(rec.out_len, EXECRUN_DEFAULT_MAX_OUTPUT);
}
END_TEST

/* ---- requests --------------------------------------------------------------------------------- */

static const char *const argv_odd[] = { "rm", "-rf", "--", "/w/a b; touch pwned", "\"q\"\\", "\xc3\xa9t\xc3\xa9",
					"", NULL };

static const struct {
	const char *const *argv;
	const char *wd;
	const char *user;
	const char *want;
} body_rows[] = {
	{ argv_default, NULL, NULL,
	  "{\"AttachStdin\":false,\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,"
	  "\"Cmd\":[\"sh\",\"-c\",\"echo hi\"]}" },
	{ argv_default, "/maf-sandbox/work", NULL,
	  "{\"AttachStdin\":false,\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,"
	  "\"Cmd\":[\"sh\",\"-c\",\"echo hi\"],\"WorkingDir\":\"/maf-sandbox/work\"}" },
	{ argv_default, NULL, "0",
	  "{\"AttachStdin\":false,\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,"
	  "\"Cmd\":[\"sh\",\"-c\",\"echo hi\"],\"User\":\"0\"}" },
	{ argv_odd, "/", "1000:1000",
	  "{\"AttachStdin\":false,\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,"
	  "\"Cmd\":[\"rm\",\"-rf\",\"--\",\"/w/a b; touch pwned\",\"\\\"q\\\"\\\\\",\"\xc3\xa9t\xc3\xa9\",\"\"],"
	  "\"WorkingDir\":\"/\",\"User\":\"1000:1000\"}" },
};

/* The exact bodies: create (Cmd verbatim; WorkingDir and User only when
 * given), start {"Detach":false,"Tty":false} as JSON and no Upgrade. */
START_TEST(test_request_bodies)
{
	static const struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	struct execrun_spec spec = { .argv = body_rows[_i].argv, .working_dir = body_rows[_i].wd,
				     .user = body_rows[_i].user };
	json_auto_t *want = json_loads(body_rows[_i].want, 0, NULL);
	json_auto_t *got = NULL;
	const struct fake_request *q;
	struct run_rec rec = { 0 };
	char hv[128];

	ck_assert_ptr_nonnull(want);
	start_reachable(script, ELEMENTSOF(script));
	run_start_spec(&rec, &spec);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	q = request_to(CREATE_PATH);
	ck_assert_str_eq(q->method, "POST");
	ck_assert(fake_request_header(q, "Content-Type", hv, sizeof(hv)));
	ck_assert_str_eq(hv, "application/json");
	ck_assert_str_eq(q->body, body_rows[_i].want);   /* keys in this order, compact */
	got = json_loads(q->body, 0, NULL);
	ck_assert(json_equal(got, want));
	q = request_to(START_PATH);
	ck_assert_str_eq(q->method, "POST");
	ck_assert_str_eq(q->body, "{\"Detach\":false,\"Tty\":false}");
	ck_assert(fake_request_header(q, "Content-Type", hv, sizeof(hv)));
	ck_assert_str_eq(hv, "application/json");
	ck_assert_msg(!fake_request_header(q, "Upgrade", hv, sizeof(hv)), "Upgrade: %s", hv);
	ck_assert(!fake_request_header(q, "Connection", hv, sizeof(hv)) || !strcasestr(hv, "upgrade"));
	q = request_to(INSPECT_PATH);
	ck_assert_str_eq(q->method, "GET");
	ck_assert_uint_eq(q->body_len, 0);
}
END_TEST

/* The container id is escaped into the path. */
START_TEST(test_id_escaped)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .method = "POST", .path = API "/containers/a%20b%2F..%2Fc/exec", .status = 404,
				 .body = "{\"message\":\"No such container: a b/../c\"}" },
	};
	struct execrun_spec spec = { .argv = argv_default };
	struct run_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(execrun_start(base, engine, table, "a b/../c", &spec, run_cb, &rec, NULL), 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -ENOENT);
	ck_assert_str_eq(rec.message, "No such container: a b/../c");
}
END_TEST

/* ---- argv limits and bad specs: refused, nothing sent, no callback --------------------------- */

static const char **argv_many(size_t n, const char *each)
{
	const char **v = xcalloc(n + 1, sizeof(*v));

	for (size_t i = 0; i < n; i++)
		v[i] = each;
	return v;
}

enum spec_case {
	SPEC_ARGS_AT_LIMIT,
	SPEC_ARGS_OVER,
	SPEC_BYTES_AT_LIMIT,
	SPEC_BYTES_OVER,
	SPEC_BYTES_OVER_BY_WD,
	SPEC_BYTES_OVER_BY_USER,
	SPEC_ONE_HUGE,
	SPEC_NO_ARGV,
	SPEC_EMPTY_ARGV,
	SPEC_NOT_UTF8,
	SPEC_RELATIVE_WD,
	SPEC_EMPTY_USER,
	SPEC_NEGATIVE_TIMEOUT,
	_SPEC_CASE_MAX,
};

static const int spec_case_want[_SPEC_CASE_MAX] = {
	[SPEC_ARGS_AT_LIMIT] = 0, [SPEC_ARGS_OVER] = -E2BIG, [SPEC_BYTES_AT_LIMIT] = 0,
	[SPEC_BYTES_OVER] = -E2BIG, [SPEC_BYTES_OVER_BY_WD] = -E2BIG, [SPEC_BYTES_OVER_BY_USER] = -E2BIG,
	[SPEC_ONE_HUGE] = -E2BIG, [SPEC_NO_ARGV] = -EINVAL, [SPEC_EMPTY_ARGV] = -EINVAL,
	[SPEC_NOT_UTF8] = -EINVAL, [SPEC_RELATIVE_WD] = -EINVAL, [SPEC_EMPTY_USER] = -EINVAL,
	[SPEC_NEGATIVE_TIMEOUT] = -EINVAL,
};

START_TEST(test_spec_limits)
{
	static const struct fake_reply script[] = {
		PING, VERSION, CREATE_R(404, "{\"message\":\"No such container: c1\"}", .repeat = true),
	};
	static const char *const empty[] = { NULL };
	static const char *const bad_utf8[] = { "echo", "\xff\xfe", NULL };
	enum spec_case c = (enum spec_case)_i;
	size_t half = EXECRUN_MAX_ARGV_BYTES / 2;
	bool over = c == SPEC_BYTES_OVER;
	/* Two arguments of EXECRUN_MAX_ARGV_BYTES bytes together (one more when over). */
	_cleanup_free_ char *a = xmalloc(half + 1), *b = xmalloc(EXECRUN_MAX_ARGV_BYTES - half + 2);
	_cleanup_free_ char *huge = xmalloc(EXECRUN_MAX_ARGV_BYTES + 2);
	_cleanup_free_ const char **many = NULL;
	const char *pair[3] = { a, b, NULL };
	const char *one[2] = { huge, NULL };
	struct execrun_spec spec = { .argv = argv_default };
	struct run_rec rec = { 0 };
	int r;

	memset(a, 'a', half);
	a[half] = '\0';
	memset(b, 'b', EXECRUN_MAX_ARGV_BYTES - half + over);
	b[EXECRUN_MAX_ARGV_BYTES - half + over] = '\0';
	memset(huge, 'h', EXECRUN_MAX_ARGV_BYTES + 1);
	huge[EXECRUN_MAX_ARGV_BYTES + 1] = '\0';
	switch (c) {
	case SPEC_ARGS_AT_LIMIT: spec.argv = many = argv_many(EXECRUN_MAX_ARGS, "x"); break;
	case SPEC_ARGS_OVER: spec.argv = many = argv_many(EXECRUN_MAX_ARGS + 1, "x"); break;
	case SPEC_BYTES_AT_LIMIT: spec.argv = pair; break;
	case SPEC_BYTES_OVER: spec.argv = pair; break;
	case SPEC_BYTES_OVER_BY_WD: spec.argv = pair; spec.working_dir = "/"; break;
	case SPEC_BYTES_OVER_BY_USER: spec.argv = pair; spec.user = "0"; break;
	case SPEC_ONE_HUGE: spec.argv = one; break;
	case SPEC_NO_ARGV: spec.argv = NULL; break;
	case SPEC_EMPTY_ARGV: spec.argv = empty; break;
	case SPEC_NOT_UTF8: spec.argv = bad_utf8; break;
	case SPEC_RELATIVE_WD: spec.working_dir = "work"; break;
	case SPEC_EMPTY_USER: spec.user = ""; break;
	case SPEC_NEGATIVE_TIMEOUT: spec.timeout_ms = -1; break;
	case _SPEC_CASE_MAX: default: ck_abort();
	}
	start_reachable(script, ELEMENTSOF(script));
	r = execrun_start(base, engine, table, C1, &spec, run_cb, &rec, &rec.x);
	ck_assert_int_eq(r, spec_case_want[c]);
	if (r < 0) {
		run_for(SETTLE_MS);
		ck_assert_int_eq(rec.calls, 0);
		ck_assert_uint_eq(engine_call_requests_made(engine), 0);   /* nothing sent */
		return;
	}
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -ENOENT);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);
}
END_TEST

/* Missing arguments, and an engine that is not reachable: nothing sent, no callback. */
START_TEST(test_start_refusals)
{
	static const struct fake_reply script[] = { PING, VERSION };
	struct execrun_spec spec = { .argv = argv_default };
	struct run_rec rec = { 0 };
	struct engine *down;
	int dummy = 0;

	ck_assert_int_eq(execrun_start(base, engine, table, C1, &spec, run_cb, &rec, NULL), -ENOTCONN);
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(execrun_start(NULL, engine, table, C1, &spec, run_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(execrun_start(base, NULL, table, C1, &spec, run_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(execrun_start(base, engine, table, NULL, &spec, run_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(execrun_start(base, engine, table, "", &spec, run_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(execrun_start(base, engine, table, C1, NULL, run_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(execrun_start(base, engine, table, C1, &spec, NULL, &rec, NULL), -EINVAL);
	down = loop_engine_new(base, &test_opts, &dummy);   /* never started */
	ck_assert_int_eq(execrun_start(base, down, NULL, C1, &spec, run_cb, &rec, NULL), -ENOTCONN);
	engine_free(down);
	execrun_cancel(NULL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_uint_eq(engine_call_requests_made(engine), 0);   /* nothing sent */
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------------------ */

static const struct {
	bool at_start;       /* the refusal comes at start (create succeeds) */
	int status;
	const char *body;
	int error;
	const char *message;
} refusal_rows[] = {
	{ false, 404, "{\"message\":\"No such container: c1\"}", -ENOENT, "No such container: c1" },
	{ false, 409, "{\"message\":\"container c1 is not running\"}", -ESRCH, "container c1 is not running" },
	{ false, 409, "{\"message\":\"Container c1 is not running\"}", -ESRCH, "Container c1 is not running" },
	{ false, 409, "{\"message\":\"" PAUSED_MSG "\"}", -EBUSY, PAUSED_MSG },
	{ false, 409, "{\"message\":\"Container c1 is restarting, wait until the container is running\"}", -EIO,
	  "Container c1 is restarting, wait until the container is running" },
	{ false, 500, "{\"message\":\"boom\"}", -EIO, "boom" },
	{ false, 500, "oops", -EIO, "the engine answered HTTP 500" },
	{ false, 201, "{\"Id\":\"\"}", -EIO, "the engine's exec create reply has no Id" },
	{ false, 201, "{}", -EIO, "the engine's exec create reply has no Id" },
	{ true, 404, "{\"message\":\"No such exec instance: e1\"}", -ENOENT, "No such exec instance: e1" },
	{ true, 409, "{\"message\":\"container c1 is not running\"}", -ESRCH, "container c1 is not running" },
	{ true, 409, "{\"message\":\"" PAUSED_MSG "\"}", -EBUSY, PAUSED_MSG },
	{ true, 500, "{\"message\":\"boom\"}", -EIO, "boom" },
	{ true, 500, "not json", -EIO, "the engine answered HTTP 500: not json" },
};

/* Each refusal maps to its errno with the status and Docker's message;
 * "paused" without a freeze of ours is -EBUSY at once (no retry), with or
 * without a table. */
START_TEST(test_refusals)
{
	int row = _i / 2;
	struct fake_reply script[] = {
		PING, VERSION,
		CREATE_R(refusal_rows[row].status, refusal_rows[row].body),
		START_R(refusal_rows[row].status, refusal_rows[row].body, .headers = JSON_TYPE),
		INSPECT(0),
	};
	struct execrun_spec spec = { .argv = argv_default, .timeout_ms = 1000 };
	struct run_rec rec = { 0 };

	if (refusal_rows[row].at_start)
		script[2] = (struct fake_reply)CREATE();
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(execrun_start(base, engine, _i % 2 ? table : NULL, C1, &spec, run_cb, &rec, NULL), 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, refusal_rows[row].error);
	ck_assert_int_eq(rec.status, refusal_rows[row].status);
	ck_assert_str_eq(rec.message, refusal_rows[row].message);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);
	ck_assert_uint_eq(requests_to(START_PATH), refusal_rows[row].at_start ? 1 : 0);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);
}
END_TEST

/* ---- paused under our own freeze -------------------------------------------------------------- */

static void granted_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	int *calls = arg;

	ck_assert_int_eq(error, 0);
	(*calls)++;
}

/* Holds a freeze of ours on c1 (the script serves its pause). */
static struct freeze_claim *hold_freeze(void)
{
	struct freeze_claim *claim = NULL;
	int granted = 0;

	ck_assert_int_eq(freeze_acquire(table, engine, C1, granted_cb, &granted, &claim), 0);
	run_until(&granted, 1, RUN_MAX_MS);
	ck_assert_int_eq(granted, 1);
	ck_assert(freeze_is_held(table, C1));
	return claim;
}

static void thawed_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	int *calls = arg;

	ck_assert_int_eq(error, 0);
	(*calls)++;
}

/* Releases the freeze and waits for the thaw (the script serves its unpause). */
static void release_freeze(struct freeze_claim *claim)
{
	int thawed = 0;

	ck_assert_int_eq(freeze_release_then(claim, thawed_cb, &thawed), 0);
	run_until(&thawed, 1, RUN_MAX_MS);
	ck_assert_int_eq(thawed, 1);
}

/* A create refused "is paused" by a freeze of ours taken while it was in
 * flight: the run waits (nothing is sent while the freeze is on, every
 * EXECRUN_PAUSED_RETRY_MS and then EXECRUN_FREEZE_POLL_MS asking only the
 * table), then creates again and runs. */
START_TEST(test_paused_retried)
{
	struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE,
		CREATE_PAUSED(.delay_ms = SETTLE_MS), CREATE(), START(NULL, 0), INSPECT(4),
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct run_rec rec = { 0 };
	struct freeze_claim *claim;

	frame_add_str(&s, 1, "after");
	script[6].body = (const char *)s.p;
	script[6].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 1000, 0);
	claim = hold_freeze();
	run_for(SETTLE_MS + 3 * EXECRUN_PAUSED_RETRY_MS);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);   /* not again while ours is on */
	release_freeze(claim);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.exit_code, 4);
	assert_out(&rec, "after", 5);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 2);
	ck_assert_uint_eq(requests_to(START_PATH), 1);
}
END_TEST

/* The budget spent waiting after a refusal of ours returns that refusal
 * (-EBUSY, 409, Docker's message), not a timeout: the command never ran. */
START_TEST(test_paused_budget_spent)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE, CREATE_PAUSED(.delay_ms = SETTLE_MS, .repeat = true),
	};
	struct run_rec rec = { 0 };
	struct freeze_claim *claim;
	/* hang guard margin: the first 409 must come inside the budget (the
	 * deadline would otherwise pass with no refusal yet: -ETIMEDOUT) */
	const long budget = STEP_DEADLINE_MS;
	long t0;

	start_reachable(script, ELEMENTSOF(script));
	t0 = loop_now_ms();
	run_start(&rec, budget, 0);
	claim = hold_freeze();
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -EBUSY);
	ck_assert_int_eq(rec.status, 409);
	ck_assert_str_eq(rec.message, PAUSED_MSG);
	/* not early: the refusal is returned once the budget is spent */
	ck_assert_int_ge(loop_now_ms() - t0, budget - TEST_TIMER_SLACK_MS);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);
	release_freeze(claim);
}
END_TEST

/* Once our freeze is lifted, "paused" is taken for the engine's late view
 * of our unpause for FREEZE_STALE_BUDGET_MS; after that it is someone
 * else's: -EBUSY. */
START_TEST(test_paused_freeze_lifted)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE, CREATE_PAUSED(.delay_ms = SETTLE_MS, .repeat = true),
	};
	struct run_rec rec = { 0 };
	struct freeze_claim *claim;
	long t0;

	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	claim = hold_freeze();
	/* hang guard */
	LOOP_RUN_WHILE(base, requests_to(CREATE_PATH) < 1, RUN_MAX_MS);
	run_for(SETTLE_MS + EXECRUN_PAUSED_RETRY_MS * 2);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);   /* our freeze: waits, asks nothing more */
	t0 = loop_now_ms();
	freeze_release(claim);
	run_until(&rec.calls, 1, FREEZE_STALE_BUDGET_MS + RUN_MAX_MS);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_int_eq(rec.error, -EBUSY);
	ck_assert_str_eq(rec.message, PAUSED_MSG);
	/* not early: "paused" is ours for FREEZE_STALE_BUDGET_MS after the unpause */
	ck_assert_int_ge(loop_now_ms() - t0, FREEZE_STALE_BUDGET_MS - TEST_TIMER_SLACK_MS);
	ck_assert_uint_ge(requests_to(CREATE_PATH), 3);
}
END_TEST

/* Right after our own unpause, the engine may still answer an exec create
 * "is paused" (its Paused flag lags the unpause's answer): asked again, the
 * run goes on. */
START_TEST(test_paused_right_after_our_unpause)
{
	struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE, CREATE_PAUSED(), CREATE(), START(NULL, 0), INSPECT(0),
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "ok");
	script[6].body = (const char *)s.p;
	script[6].body_len = s.n;
	start_reachable(script, ELEMENTSOF(script));
	release_freeze(hold_freeze());
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, 0);
	assert_out(&rec, "ok", 2);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 2);
}
END_TEST

/* ---- exec starts and our freezes never overlap ----------------------------------------------- */

#define PROBE_NOT_YET  "{\"ID\":\"" E1 "\",\"Running\":true,\"Pid\":0,\"ExitCode\":null}"
#define PROBE_PID      "{\"ID\":\"" E1 "\",\"Running\":true,\"Pid\":4242,\"ExitCode\":null}"
/* An exec whose start the engine never began (never received it). */
#define PROBE_UNBEGUN  "{\"ID\":\"" E1 "\",\"Running\":false,\"Pid\":0,\"ExitCode\":null}"
#define PROBE_UNSTARTED "{\"ID\":\"" E1 "\",\"Running\":false,\"Pid\":0,\"ExitCode\":null}"
#define PROBE_EXITED   "{\"ID\":\"" E1 "\",\"Running\":false,\"Pid\":0,\"ExitCode\":126}"
#define PAUSE_PATH     API "/containers/" C1 "/pause"

/* The index of the nth (0-based) request to prefix, or -1. */
static long request_index(const char *prefix, size_t nth)
{
	for (size_t i = 0; i < fake_engine_request_count(); i++)
		if (strncmp(fake_engine_request(i)->path, prefix, strlen(prefix)) == 0 && nth-- == 0)
			return (long)i;
	return -1;
}

struct hold_rec {
	struct freeze_claim *claim;
	int calls;
	int error;
};

static void hold_rec_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct hold_rec *h = arg;

	(void)claim, (void)f;
	h->calls++;
	h->error = error;
}

static void hold_queue(struct hold_rec *h)
{
	ck_assert_int_eq(freeze_acquire(table, engine, C1, hold_rec_cb, h, &h->claim), 0);
}

/* Waits until the run has sent its start (and holds its mark). */
static void wait_start_sent(const struct run_rec *rec)
{
	/* hang guard */
	LOOP_RUN_WHILE(base, requests_to(START_PATH) == 0 && rec->calls == 0, RUN_MAX_MS);
	ck_assert_uint_eq(requests_to(START_PATH), 1);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
}

/* A freeze of ours on the container (taken before the create, or while
 * it is in flight): no create, no start is sent until its unpause is
 * answered; then the command runs. Spent deadline: -EBUSY, never ran. */
enum hold_at { HOLD_BEFORE_CREATE, HOLD_DURING_CREATE, HOLD_BUDGET_SPENT, _HOLD_AT_MAX };

START_TEST(test_hold_blocks_create_and_start)
{
	enum hold_at at = (enum hold_at)_i;
	struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE, CREATE(), START(NULL, 0), INSPECT(0),
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct freeze_claim *claim = NULL;
	struct run_rec rec = { 0 };
	int thawed = 0;

	script[3].delay_ms = SETTLE_MS;
	frame_add_str(&s, 1, "ok\n");
	script[5].body = (const char *)s.p;
	script[5].body_len = s.n;
	if (at == HOLD_DURING_CREATE)
		script[4].delay_ms = SETTLE_MS;
	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	if (at != HOLD_DURING_CREATE)
		claim = hold_freeze();
	run_start(&rec, at == HOLD_BUDGET_SPENT ? SHORT_MS : 0, 0);
	if (at == HOLD_DURING_CREATE)
		claim = hold_freeze();
	if (at == HOLD_BUDGET_SPENT) {
		run_wait(&rec);
		ck_assert_int_eq(rec.error, -EBUSY);
		ck_assert_int_eq(rec.status, 0);
		ck_assert_ptr_nonnull(strstr(rec.message, "file call"));
		ck_assert_uint_eq(requests_to(CREATE_PATH), 0);
		release_freeze(claim);
		return;
	}
	run_for(SETTLE_MS * 3);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_uint_eq(requests_to(CREATE_PATH), at == HOLD_DURING_CREATE ? 1 : 0);
	ck_assert_uint_eq(requests_to(START_PATH), 0);
	ck_assert_int_eq(freeze_release_then(claim, thawed_cb, &thawed), 0);
	run_for(SETTLE_MS / 2);   /* the unpause is in flight: still nothing */
	ck_assert_uint_eq(requests_to(START_PATH), 0);
	run_wait(&rec);
	ck_assert_int_eq(thawed, 1);
	ck_assert_int_eq(rec.error, 0);
	assert_out(&rec, "ok\n", 3);
	ck_assert_uint_eq(requests_to(CREATE_PATH), 1);
	ck_assert_uint_eq(requests_to(START_PATH), 1);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
}
END_TEST

/* A hold queued while an exec is starting sends no pause until a probe
 * shows the process: a Pid (Running alone is set before the runtime's
 * exec, so it is not enough), or an ExitCode. No probe is sent before a
 * hold waits. */
static const struct {
	const char *first, *second;
} confirm_rows[] = {
	{ PROBE_NOT_YET, PROBE_PID },
	{ PROBE_UNSTARTED, PROBE_EXITED },
};

START_TEST(test_start_defers_pause)
{
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("x", 0, .stall = true, .chunked = true),
		INSPECT_R(200, confirm_rows[_i].first, ), INSPECT_R(200, confirm_rows[_i].second, ),
		PAUSE, UNPAUSE,
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct hold_rec h = { 0 };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "x");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	wait_start_sent(&rec);
	run_for(SETTLE_MS);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 0);   /* nobody waits: no probe */
	hold_queue(&h);
	run_until(&h.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(h.calls, 1);
	ck_assert_int_eq(h.error, 0);
	ck_assert_uint_eq(requests_to(INSPECT_PATH), 2);
	ck_assert_int_gt(request_index(PAUSE_PATH, 0), request_index(INSPECT_PATH, 1));
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	ck_assert_int_eq(rec.calls, 0);   /* the command runs on */
	release_freeze(h.claim);
	execrun_cancel(rec.x);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_int_eq(rec.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
}
END_TEST

/* Every way a starting run ends gives its mark back, once: the hold
 * waiting on it goes on (or, the engine gone, fails without a pause). */
enum mark_end { MARK_CANCEL, MARK_DEADLINE, MARK_ENGINE_GONE, MARK_STREAM_END, _MARK_END_MAX };

START_TEST(test_mark_ends)
{
	enum mark_end how = (enum mark_end)_i;
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("x", 0, .stall = true, .chunked = true),
		INSPECT_R(200, PROBE_NOT_YET, .repeat = true), PAUSE, UNPAUSE,
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct hold_rec h = { 0 };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "x");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	if (how == MARK_STREAM_END) {
		script[3].stall = false;
		script[3].chunked = true;
		script[3].chunk_size = 4;
		/* 9 bytes: the stream ends after two gaps; hang guard margin for
		 * the hold and the probe to come first */
		script[3].chunk_delay_ms = (int)STEP_DEADLINE_MS;
	}
	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, how == MARK_DEADLINE ? STEP_DEADLINE_MS : 0, 0);
	wait_start_sent(&rec);
	hold_queue(&h);
	/* hang guard: the hold makes the run ask */
	LOOP_RUN_WHILE(base, requests_to(INSPECT_PATH) < 1, RUN_MAX_MS);
	ck_assert_int_eq(h.calls, 0);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_uint_ge(requests_to(INSPECT_PATH), 1);
	ck_assert_uint_eq(requests_to(PAUSE_PATH), 0);
	switch (how) {
	case MARK_CANCEL:
		execrun_cancel(rec.x);
		ck_assert_int_eq(rec.calls, 1);
		ck_assert_int_eq(rec.error, -ECANCELED);
		ck_assert_int_eq(h.calls, 0);   /* from the loop, not inside the cancel */
		break;
	case MARK_DEADLINE:
		run_until(&rec.calls, 1, RUN_MAX_MS);
		ck_assert_int_eq(rec.error, -ETIMEDOUT);
		break;
	case MARK_ENGINE_GONE:
		freeze_table_cancel_retries(table);   /* the daemon's order: retries, then the engine */
		ck_assert_int_eq(h.calls, 1);
		ck_assert_int_eq(h.error, -ECANCELED);
		engine = engine_free(engine);
		ck_assert_int_eq(rec.calls, 1);
		ck_assert_int_eq(rec.error, -ECANCELED);
		break;
	case MARK_STREAM_END:
		run_until(&rec.calls, 1, RUN_MAX_MS);
		ck_assert_int_eq(rec.calls, 1);
		break;
	case _MARK_END_MAX:
	default:
		ck_abort();
	}
	if (how == MARK_CANCEL || how == MARK_DEADLINE) {
		/* The start was sent and never confirmed: the engine carries it
		 * out without us, so the mark outlives the run (test_mark_lingers
		 * shows it end on the engine's word); the daemon's shutdown ends
		 * it. */
		run_for(SETTLE_MS);
		ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
		ck_assert_uint_eq(execrun_lingers_count(), 1);
		ck_assert_int_eq(h.calls, 0);
		ck_assert_uint_eq(requests_to(PAUSE_PATH), 0);
		execrun_lingers_end();
		ck_assert_uint_eq(execrun_lingers_count(), 0);
	}
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	if (how != MARK_ENGINE_GONE) {
		run_until(&h.calls, 1, RUN_MAX_MS);
		ck_assert_int_eq(h.calls, 1);
		ck_assert_int_eq(h.error, 0);
		ck_assert_uint_eq(requests_to(PAUSE_PATH), 1);
		release_freeze(h.claim);
	}
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_int_eq(h.calls, 1);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
}
END_TEST

/* A run cancelled (or past its deadline) while its start is not confirmed:
 * its mark lingers, asking the engine, and ends on the engine's word (a
 * Pid); the hold waiting on it pauses only after that answer. */
#define LINGER_NOT_YET 100   /* more than the run itself asks (one per 10 ms) */

START_TEST(test_mark_lingers)
{
	bool deadline = _i == 1;
	struct fake_reply script[4 + LINGER_NOT_YET + 3] = {
		PING, VERSION, CREATE(), START("x", 0, .stall = true, .chunked = true),
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct hold_rec h = { 0 };
	struct run_rec rec = { 0 };
	size_t n = 4;

	for (int i = 0; i < LINGER_NOT_YET; i++)
		script[n++] = (struct fake_reply)INSPECT_R(200, PROBE_NOT_YET, );
	script[n++] = (struct fake_reply)INSPECT_R(200, PROBE_PID, .repeat = true);
	script[n++] = (struct fake_reply)PAUSE;
	script[n++] = (struct fake_reply)UNPAUSE;
	frame_add_str(&s, 1, "x");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	freeze_table_set_base(table, base);
	start_reachable(script, n);
	/* hang guard margin for the start to be sent; short enough that the run
	 * asks fewer than LINGER_NOT_YET times before it (one per 10 ms) */
	run_start(&rec, deadline ? (long)SHORT_MS * (test_is_slow() ? 4 : 1) : 0, 0);
	wait_start_sent(&rec);
	hold_queue(&h);
	if (deadline) {
		run_until(&rec.calls, 1, RUN_MAX_MS);
		ck_assert_int_eq(rec.error, -ETIMEDOUT);
	} else {
		run_for(SETTLE_MS);
		execrun_cancel(rec.x);
		ck_assert_int_eq(rec.error, -ECANCELED);
	}
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_uint_lt(requests_to(INSPECT_PATH), LINGER_NOT_YET);   /* the run saw no Pid */
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
	ck_assert_uint_eq(execrun_lingers_count(), 1);
	run_until(&h.calls, 1, 4 * RUN_MAX_MS);
	ck_assert_int_eq(h.calls, 1);
	ck_assert_int_eq(h.error, 0);
	ck_assert_uint_eq(execrun_lingers_count(), 0);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	/* The pause came after the probe that saw the Pid, never before. */
	ck_assert_int_ge(request_index(INSPECT_PATH, LINGER_NOT_YET), 0);
	ck_assert_int_gt(request_index(PAUSE_PATH, 0), request_index(INSPECT_PATH, LINGER_NOT_YET));
	release_freeze(h.claim);
	run_for(SETTLE_MS);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
}
END_TEST

/* A run cancelled before its start reached the engine (our request closed
 * unsent): the engine never begins it, its exec stays not Running with no
 * ExitCode for good. The linger does not keep the mark (and every freeze
 * of the sandbox) for ever: once EXECRUN_START_PROBES answers in a row say
 * so, the start is settled as never begun, and the hold pauses. */
START_TEST(test_linger_unbegun)
{
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("x", 0, .stall = true, .chunked = true),
		INSPECT_R(200, PROBE_UNBEGUN, .repeat = true), PAUSE, UNPAUSE,
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct hold_rec h = { 0 };
	struct run_rec rec = { 0 };

	frame_add_str(&s, 1, "x");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	wait_start_sent(&rec);
	hold_queue(&h);
	run_for(SETTLE_MS);
	execrun_cancel(rec.x);
	ck_assert_int_eq(rec.error, -ECANCELED);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
	ck_assert_uint_eq(execrun_lingers_count(), 1);
	run_for(SETTLE_MS);   /* not on its first answers (fewer than EXECRUN_START_PROBES) */
	ck_assert_uint_eq(execrun_lingers_count(), 1);
	ck_assert_int_eq(h.calls, 0);
	run_until(&h.calls, 1, 5 * RUN_MAX_MS);   /* a hang guard: ~1.5 s of probes */
	ck_assert_int_eq(h.calls, 1);
	ck_assert_int_eq(h.error, 0);
	ck_assert_uint_eq(execrun_lingers_count(), 0);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	release_freeze(h.claim);
	run_for(SETTLE_MS);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
}
END_TEST

/* A start never confirmed keeps its mark past EXECRUN_START_PROBES (asked
 * more slowly then): the freeze behind it is not paused into it; it goes on
 * once the run ends. */
START_TEST(test_mark_outlasts_the_probes)
{
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("x", 0, .stall = true, .chunked = true),
		INSPECT_R(200, PROBE_NOT_YET, .repeat = true), PAUSE, UNPAUSE,
	};
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct hold_rec h = { 0 };
	struct run_rec rec = { 0 };
	char want[64];

	frame_add_str(&s, 1, "x");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	wait_start_sent(&rec);
	hold_queue(&h);
	/* The fake records only FAKE_MAX_REQUESTS: the run's warning (the only
	 * line logged, debug off) says when the probes are spent. */
	log_set_debug(false);
	loop_log_capture_start();
	snprintf(want, sizeof(want), "after %d inspects; the freeze", EXECRUN_START_PROBES);
	/* hang guard: EXECRUN_START_PROBES probes */
	LOOP_RUN_WHILE(base, !strstr(loop_logged(), want), 5 * RUN_MAX_MS);
	run_for(3 * EXECRUN_START_PROBE_SLOW_MS);
	ck_assert_msg(strstr(loop_logged(), want), "%s", loop_logged());
	loop_log_capture_stop();
	log_set_debug(true);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
	ck_assert_int_eq(h.calls, 0);
	ck_assert_uint_eq(requests_to(PAUSE_PATH), 0);
	execrun_cancel(rec.x);
	ck_assert_int_eq(rec.error, -ECANCELED);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);   /* it lingers */
	execrun_lingers_end();
	run_until(&h.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(h.calls, 1);
	ck_assert_int_eq(h.error, 0);   /* paused now (past the fake's record) */
	release_freeze(h.claim);
	run_for(SETTLE_MS);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
}
END_TEST

/* ---- the deadline ------------------------------------------------------------------------------- */

enum stall_at { STALL_CREATE, STALL_START_HEADERS, STALL_STREAM, STALL_INSPECT, STALL_SETTLING, _STALL_MAX };

/* The deadline passes at each step: -ETIMEDOUT once, the request in
 * flight cancelled (the fake sees it abandoned: its reply, held back for
 * good, was never awaited) and nothing more is sent, nothing fires again.
 * At SETTLING (the exec still Running after its output ended, asked again
 * every EXECRUN_INSPECT_RETRY_MS, then -EIO) the answers are slowed so that
 * the deadline passes among the retries with a margin each side. */
/* The engine's own request timeout (engine.timeout_ms) before the caller's
 * deadline is the engine's failure (-ETIME), never the caller's -ETIMEDOUT. */
START_TEST(test_engine_timeout_is_not_the_deadline)
{
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	struct run_rec rec = { 0 };

	script[2].delay_ms = (int)test_opts.timeout_ms + 500;
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, test_opts.timeout_ms * 5, 0);
	run_until(&rec.calls, 1, (int)test_opts.timeout_ms * 3);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_int_eq(rec.error, -ETIME);
}
END_TEST

START_TEST(test_deadline)
{
	enum stall_at at = (enum stall_at)_i;
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = {
		PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0),
	};
	struct run_rec rec = { 0 };
	uint64_t before;
	long deadline = SHORT_MS;

	frame_add_str(&s, 1, "partial");
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	switch (at) {
	case STALL_CREATE: script[2].delay_ms = NEVER_MS; break;
	case STALL_START_HEADERS: script[3].delay_ms = NEVER_MS; break;
	case STALL_STREAM: script[3].stall = true; script[3].chunked = true; break;
	case STALL_INSPECT: script[4].delay_ms = NEVER_MS; break;
	case STALL_SETTLING:
		/* hang guard margins: the retries last 6 × (100 + 20) ms, the
		 * deadline passes after 300 (the steps before it take a few ms) */
		script[4] = (struct fake_reply)INSPECT_R(200, "{\"Running\":true}", .repeat = true,
							 .delay_ms = 100 * test_slow_factor());
		deadline = 300L * test_slow_factor();
		break;
	case _STALL_MAX: default: ck_abort();
	}
	start_reachable(script, ELEMENTSOF(script));
	engine_set_options(engine, &no_timeout_opts);   /* only the deadline ends a request */
	run_start(&rec, deadline, 0);
	run_until(&rec.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_msg(rec.error == -ETIMEDOUT, "error %d: %s", rec.error, rec.message);
	ck_assert(rec.message_null);
	ck_assert_int_eq(rec.status, 0);
	if (at != STALL_SETTLING) {
		/* hang guard: the fake's thread notices the close */
		LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
		ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	}
	/* The engine's exec id once created: the timed-out exec's kill asks for its Pid. */
	ck_assert_str_eq(rec.exec_id, at == STALL_CREATE ? "" : E1);
	if (at == STALL_STREAM)
		assert_out(&rec, "partial", 7);
	lingers_settled();
	before = engine_call_requests_made(engine);
	run_for(SLOW_MS / 2 + 100);   /* a late reply would have moved the run on */
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_uint_eq(engine_call_requests_made(engine), before);
}
END_TEST

/* ---- cancel and teardown ---------------------------------------------------------------------- */

enum cancel_at { CANCEL_CREATE, CANCEL_STREAM, CANCEL_INSPECT, CANCEL_PAUSED, CANCEL_SETTLING, _CANCEL_MAX };

static void count_output_cb(unsigned stream, const uint8_t *data, size_t len, void *arg)
{
	(void)stream, (void)data, (void)len;
	++*(int *)arg;
}

/* execrun_cancel in every state: the callback fires now, once, with
 * -ECANCELED; nothing more is sent. */
START_TEST(test_cancel)
{
	enum cancel_at at = (enum cancel_at)_i;
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = {
		PING, VERSION, PAUSE, UNPAUSE, CREATE(), START(NULL, 0), INSPECT(0),
	};
	struct freeze_claim *claim = NULL;
	struct run_rec rec = { 0 };
	int outputs = 0;
	struct execrun_spec spec = { .argv = argv_default, .on_output = count_output_cb, .output_arg = &outputs };
	uint64_t before;

	frame_add_str(&s, 1, "x");
	script[5].body = (const char *)s.p;
	script[5].body_len = s.n;
	switch (at) {
	case CANCEL_CREATE: script[4].delay_ms = NEVER_MS; break;
	case CANCEL_STREAM: script[5].stall = true; script[5].chunked = true; break;
	case CANCEL_INSPECT: script[6].delay_ms = NEVER_MS; break;
	case CANCEL_PAUSED: script[4] = (struct fake_reply)CREATE_PAUSED(.repeat = true); break;
	case CANCEL_SETTLING:
		script[6] = (struct fake_reply)INSPECT_R(200, "{\"Running\":true}", .repeat = true, .delay_ms = 0);
		break;
	case _CANCEL_MAX: default: ck_abort();
	}
	start_reachable(script, ELEMENTSOF(script));
	engine_set_options(engine, &no_timeout_opts);   /* only the cancel ends a request */
	if (at == CANCEL_PAUSED)
		claim = hold_freeze();
	run_start_spec(&rec, &spec);
	switch (at) {
	/* hang guards: the step is reached */
	case CANCEL_CREATE: LOOP_RUN_WHILE(base, requests_to(CREATE_PATH) == 0, RUN_MAX_MS); break;
	/* The stream stalls after its chunk. */
	case CANCEL_STREAM: LOOP_RUN_WHILE(base, outputs == 0 && rec.calls == 0, RUN_MAX_MS); break;
	case CANCEL_INSPECT:
	case CANCEL_SETTLING:
		LOOP_RUN_WHILE(base, requests_to(INSPECT_PATH) == 0 && rec.calls == 0, RUN_MAX_MS);
		run_for(5);
		break;
	case CANCEL_PAUSED:
		run_for(SETTLE_MS);
		ck_assert_uint_eq(requests_to(CREATE_PATH), 0);   /* waits for our freeze */
		break;
	case _CANCEL_MAX: default: ck_abort();
	}
	ck_assert_int_eq(rec.calls, 0);
	execrun_cancel(rec.x);
	ck_assert_int_eq(rec.calls, 1);   /* synchronously */
	ck_assert_int_eq(rec.error, -ECANCELED);
	if (at == CANCEL_STREAM)
		assert_out(&rec, "x", 1);
	if (at == CANCEL_CREATE || at == CANCEL_STREAM || at == CANCEL_INSPECT) {
		/* the request in flight was closed (hang guard: the fake's thread
		 * notices) */
		LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
		ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	}
	lingers_settled();
	before = engine_call_requests_made(engine);
	run_for(SLOW_MS / 2 + 100);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_uint_eq(engine_call_requests_made(engine), before);
	if (claim)
		release_freeze(claim);
}
END_TEST

/* The engine freed mid-stream: -ECANCELED once. */
START_TEST(test_engine_freed)
{
	static const struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("abc", 3, .stall = true, .chunked = true), INSPECT(0),
	};
	struct run_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_for(SETTLE_MS * 2);
	ck_assert_int_eq(rec.calls, 0);
	engine = engine_free(engine);
	ck_assert_int_eq(rec.calls, 1);
	ck_assert_int_eq(rec.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 1);
}
END_TEST

/* The connection lost mid-stream: the transport's error. */
START_TEST(test_connection_lost)
{
	_cleanup_(bytes_release) struct bytes s = { 0 };
	struct fake_reply script[] = { PING, VERSION, CREATE(), START(NULL, 0), INSPECT(0) };
	char payload[2000];
	struct run_rec rec = { 0 };

	memset(payload, 'p', sizeof(payload));
	frame_add(&s, 1, payload, sizeof(payload));
	script[3].body = (const char *)s.p;
	script[3].body_len = s.n;
	script[3].close_after_bytes = 1000;   /* the head and part of the body */
	start_reachable(script, ELEMENTSOF(script));
	run_start(&rec, 0, 0);
	run_wait(&rec);
	ck_assert_int_eq(rec.error, -ECONNRESET);
	ck_assert(rec.message_null);
}
END_TEST

/* The callback may free the engine, and may cancel another run. */
START_TEST(test_callback_reentry)
{
	static const struct fake_reply script[] = {
		PING, VERSION, CREATE(), START("", 0), INSPECT(0),
		{ .method = "POST", .path = API "/containers/c2/exec", .delay_ms = SLOW_MS },
	};
	struct execrun_spec spec = { .argv = argv_default };
	struct run_rec first = { 0 }, second = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(execrun_start(base, engine, table, "c2", &spec, run_cb, &second, &second.x), 0);
	first.action = _i == 0 ? ACT_CANCEL_OTHER : ACT_FREE_ENGINE;
	first.other = second.x;
	run_start(&first, 0, 0);
	run_until(&first.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(first.calls, 1);
	ck_assert_int_eq(first.error, 0);
	ck_assert_int_eq(second.calls, 1);   /* cancelled by the callback, or by engine_free */
	ck_assert_int_eq(second.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_int_eq(first.calls, 1);
	ck_assert_int_eq(second.calls, 1);
}
END_TEST

/* ---- docker_exec_* directly --------------------------------------------------------------------- */

struct stream_rec {
	int data_calls;
	struct bytes got;
	int done;
	int error;
	long status;
	bool message_null;
	char message[TEXT_MAX];
};

static int stream_data_cb(const void *data, size_t len, void *arg)
{
	struct stream_rec *rec = arg;

	ck_assert_int_eq(rec->done, 0);
	rec->data_calls++;
	bytes_add(&rec->got, data, len);
	return 0;
}

static void stream_done_cb(int error, long status, const char *message, void *arg)
{
	struct stream_rec *rec = arg;

	rec->done++;
	rec->error = error;
	rec->status = status;
	rec->message_null = message == NULL;
	snprintf(rec->message, sizeof(rec->message), "%s", message ? message : "(null)");
}

/* The start's body reaches data raw (headers included), read to the close. */
START_TEST(test_docker_exec_start_raw)
{
	static const struct fake_reply script[] = { PING, VERSION };
	_cleanup_(bytes_release) struct bytes start = { 0 }, body = { 0 };
	struct stream_rec rec = { 0 };
	struct raw_reply replies[1];
	size_t head;

	raw_stream_head(&start);
	head = start.n;
	frame_add_str(&start, 1, "out");
	frame_add(&start, 2, "\0\xff", 2);
	bytes_add(&body, start.p + head, start.n - head);
	replies[0] = (struct raw_reply){ START_PATH, start.p, start.n };
	start_reachable(script, ELEMENTSOF(script));
	raw_start(replies, ELEMENTSOF(replies));
	ck_assert_int_eq(docker_exec_start(engine, E1, 0, stream_data_cb, stream_done_cb, &rec, NULL), 0);
	run_until(&rec.done, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.done, 1);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.status, 200);
	ck_assert(rec.message_null);
	ck_assert_uint_eq(rec.got.n, body.n);
	ck_assert(memcmp(rec.got.p, body.p, body.n) == 0);
	ck_assert_ptr_nonnull(strstr(raw_request(0), "\r\n\r\n{\"Detach\":false,\"Tty\":false}"));
	ck_assert_ptr_null(strcasestr(raw_request(0), "\r\nUpgrade:"));
	bytes_release(&rec.got);
}
END_TEST

/* A refused start: data never runs; Docker's message, or a description. */
static const struct {
	int status;
	const char *body;
	const char *message;
} exec_start_error_rows[] = {
	{ 409, "{\"message\":\"" PAUSED_MSG "\"}\n", PAUSED_MSG },
	{ 404, "{\"message\":\"No such exec instance: e1\"}", "No such exec instance: e1" },
	{ 500, "plain text", "the engine answered HTTP 500: plain text" },
	{ 500, NULL, "the engine answered HTTP 500" },
};

START_TEST(test_docker_exec_start_refused)
{
	struct fake_reply script[] = {
		PING, VERSION,
		START_R(exec_start_error_rows[_i].status, exec_start_error_rows[_i].body, .chunked = true, .chunk_size = 4),
	};
	struct stream_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_exec_start(engine, E1, 0, stream_data_cb, stream_done_cb, &rec, NULL), 0);
	ck_assert_int_eq(rec.done, 0);
	run_until(&rec.done, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.done, 1);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.status, exec_start_error_rows[_i].status);
	ck_assert_str_eq(rec.message, exec_start_error_rows[_i].message);
	ck_assert_int_eq(rec.data_calls, 0);
}
END_TEST

/* The idle deadline bounds a silent stream. */
START_TEST(test_docker_exec_start_idle)
{
	static const struct fake_reply script[] = {
		PING, VERSION, START("ab", 2, .stall = true, .chunked = true),
	};
	struct stream_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_exec_start(engine, E1, 100, stream_data_cb, stream_done_cb, &rec, NULL), 0);
	run_until(&rec.done, 1, RUN_MAX_MS);
	ck_assert_int_eq(rec.done, 1);
	ck_assert_int_eq(rec.error, -ETIMEDOUT);
	ck_assert_int_eq(rec.status, 0);
	ck_assert_uint_eq(rec.got.n, 2);
	bytes_release(&rec.got);
}
END_TEST

struct reply_rec {
	int calls;
	int error;
	long status;
	char body[TEXT_MAX];
};

static void reply_cb(const struct docker_reply *r, void *arg)
{
	struct reply_rec *rec = arg;
	_cleanup_free_ char *dump = r->body ? json_dumps(r->body, JSON_COMPACT) : NULL;

	rec->calls++;
	rec->error = r->error;
	rec->status = r->status;
	snprintf(rec->body, sizeof(rec->body), "%s", dump ? dump : "(null)");
}

/* create and inspect: method, escaped path, body; bad arguments refused. */
START_TEST(test_docker_exec_create_inspect)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "POST", .path = API "/containers/a%2Fb/exec", .status = 201, .body = "{\"Id\":\"x y\"}" },
		{ .method = "GET", .path = API "/exec/x%20y/json", .body = "{\"Running\":false,\"ExitCode\":0}" },
	};
	json_auto_t *config = json_pack("{s[s]}", "Cmd", "true");
	struct reply_rec c = { 0 }, i = { 0 }, bad = { 0 };
	struct stream_rec s = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_exec_create(engine, "a/b", NULL, reply_cb, &bad, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_create(engine, "", config, reply_cb, &bad, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_inspect(engine, "", reply_cb, &bad, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_start(engine, "", 0, stream_data_cb, stream_done_cb, &s, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_start(engine, E1, 0, NULL, stream_done_cb, &s, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_start(engine, E1, 0, stream_data_cb, NULL, &s, NULL), -EINVAL);
	ck_assert_int_eq(docker_exec_start(engine, E1, -1, stream_data_cb, stream_done_cb, &s, NULL), -EINVAL);
	ck_assert_uint_eq(engine_call_requests_made(engine), 0);   /* nothing sent */
	ck_assert_int_eq(docker_exec_create(engine, "a/b", config, reply_cb, &c, NULL), 0);
	run_until(&c.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(c.status, 201);
	ck_assert_str_eq(c.body, "{\"Id\":\"x y\"}");
	ck_assert_str_eq(request_to(API "/containers/a%2Fb/exec")->body, "{\"Cmd\":[\"true\"]}");
	ck_assert_int_eq(docker_exec_inspect(engine, "x y", reply_cb, &i, NULL), 0);
	run_until(&i.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(i.status, 200);
	ck_assert_str_eq(request_to(API "/exec/x%20y/json")->method, "GET");
	run_for(SETTLE_MS);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(i.calls, 1);
	ck_assert_int_eq(bad.calls, 0);
	ck_assert_int_eq(s.done, 0);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------------------ */

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *execrun_suite(void)
{
	Suite *s = suite_create("execrun");
	TCase *tc;

	tc = fixture_tcase("output");
	tcase_add_loop_test(tc, test_exit_codes, 0, 2);
	tcase_add_test(tc, test_bytes_exact);
	tcase_add_loop_test(tc, test_split_frames, 0, (int)ELEMENTSOF(split_rows));
	tcase_add_test(tc, test_read_to_close);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("malformed_stream");
	tcase_add_loop_test(tc, test_ends_mid_frame, 0, (int)ELEMENTSOF(midframe_rows));
	tcase_add_test(tc, test_ends_mid_frame_at_close);
	tcase_add_loop_test(tc, test_unknown_stream, 0, 3);
	tcase_add_test(tc, test_system_error_frame);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("exit_code");
	tcase_add_test(tc, test_inspect_still_running_then_exited);
	tcase_add_test(tc, test_inspect_never_exits);
	tcase_add_loop_test(tc, test_inspect_bad, 0, (int)ELEMENTSOF(inspect_bad_rows));
	suite_add_tcase(s, tc);

	tc = fixture_tcase("output_cap");
	tcase_add_loop_test(tc, test_output_cap, 0, (int)ELEMENTSOF(cap_rows));
	tcase_add_loop_test(tc, test_output_default_cap, 0, 2);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("requests");
	tcase_add_loop_test(tc, test_request_bodies, 0, (int)ELEMENTSOF(body_rows));
	tcase_add_test(tc, test_id_escaped);
	tcase_add_loop_test(tc, test_spec_limits, 0, _SPEC_CASE_MAX);
	tcase_add_test(tc, test_start_refusals);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("refusals");
	tcase_add_loop_test(tc, test_refusals, 0, 2 * (int)ELEMENTSOF(refusal_rows));
	suite_add_tcase(s, tc);

	tc = fixture_tcase("paused_retry");
	tcase_add_test(tc, test_paused_retried);
	tcase_add_test(tc, test_paused_budget_spent);
	tcase_add_test(tc, test_paused_freeze_lifted);
	tcase_add_test(tc, test_paused_right_after_our_unpause);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("freeze_order");
	tcase_add_loop_test(tc, test_hold_blocks_create_and_start, 0, _HOLD_AT_MAX);
	tcase_add_loop_test(tc, test_start_defers_pause, 0, (int)ELEMENTSOF(confirm_rows));
	tcase_add_loop_test(tc, test_mark_lingers, 0, 2);
	tcase_add_test(tc, test_linger_unbegun);
	tcase_add_loop_test(tc, test_mark_ends, 0, _MARK_END_MAX);
	tcase_add_test(tc, test_mark_outlasts_the_probes);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("deadline_and_cancel");
	tcase_add_test(tc, test_engine_timeout_is_not_the_deadline);
	tcase_add_loop_test(tc, test_deadline, 0, _STALL_MAX);
	tcase_add_loop_test(tc, test_cancel, 0, _CANCEL_MAX);
	tcase_add_test(tc, test_engine_freed);
	tcase_add_test(tc, test_connection_lost);
	tcase_add_loop_test(tc, test_callback_reentry, 0, 2);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("docker_exec");
	tcase_add_test(tc, test_docker_exec_start_raw);
	tcase_add_loop_test(tc, test_docker_exec_start_refused, 0, (int)ELEMENTSOF(exec_start_error_rows));
	tcase_add_test(tc, test_docker_exec_start_idle);
	tcase_add_test(tc, test_docker_exec_create_inspect);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(execrun_suite());
	int failed;

	fake_run_dir_create("check-execrun");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
