/* check_engine.c — the engine session (probe, negotiation, reachability,
 * reconnection, versioned calls, counters) against the fake engine. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cleanup.h"
#include "endpoint.h"
#include "engine.h"
#include "fake_engine.h"
#include "loop.h"
#include "log.h"
#include "slow.h"
#include "xmalloc.h"

#define RUN_MAX_MS   2000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define SETTLE_MS    30
#define MAX_CHANGES  32

#define VERSION_BODY \
	"{\"Version\":\"28.0.1\",\"ApiVersion\":\"1.48\",\"MinAPIVersion\":\"1.24\",\"Os\":\"linux\"," \
	"\"Arch\":\"amd64\",\"KernelVersion\":\"6.1.0-18-amd64\"}"

static struct event_base *base;
static struct engine *engine;
static bool free_on_reachable;

static struct {
	enum engine_state from[MAX_CHANGES], to[MAX_CHANGES];
	int n;
	int reachable, unreachable, unsupported;
} changes;

static void run_until(const int *counter, int want, int max_ms)
{
	loop_run_until(base, counter, want, max_ms);
}

static void run_for(int ms)
{
	run_until(NULL, 0, ms);
}

static void state_cb(struct engine *e, enum engine_state old_state, enum engine_state new_state, void *arg)
{
	ck_assert_ptr_eq(e, engine);
	ck_assert_int_ne(old_state, new_state);
	ck_assert_int_eq(engine_get_state(e), new_state);
	ck_assert_int_lt(changes.n, MAX_CHANGES);
	changes.from[changes.n] = old_state;
	changes.to[changes.n++] = new_state;
	changes.reachable += new_state == ENGINE_REACHABLE;
	changes.unreachable += new_state == ENGINE_UNREACHABLE;
	changes.unsupported += new_state == ENGINE_UNSUPPORTED;
	if (new_state == ENGINE_REACHABLE && free_on_reachable)
		engine = engine_free(e);
}

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

static void setup(void)
{
	_cleanup_free_ char *host = xasprintf("unix://%s", fake_engine_socket_path());
	_cleanup_free_ char *err = NULL;
	struct engine_endpoint *ep = NULL;

	memset(&changes, 0, sizeof(changes));
	free_on_reachable = false;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	ck_assert_int_eq(engine_endpoint_from_host(host, "test", &ep, &err), 0);
	engine = engine_new(base, ep, &test_opts, state_cb, NULL);
	ck_assert_ptr_nonnull(engine);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_CONNECTING);
}

static void teardown(void)
{
	engine = engine_free(engine);
	event_base_free(base);
	fake_engine_cleanup();
}

/* A script for an engine at the given API version. */
#define PING(v) { .method = "GET", .path = "/_ping", .headers = "Api-Version: " v "\r\nOstype: linux\r\n", \
		  .body = "OK", .repeat = true }
#define VERSION(v) { .method = "GET", .path = "/v" v "/version", .body = VERSION_BODY, .repeat = true }

static void start_and_wait_reachable(void)
{
	engine_start(engine);
	run_until(&changes.reachable, 1, RUN_MAX_MS);
	ck_assert_msg(engine_get_state(engine) == ENGINE_REACHABLE, "state %s: %s",
		      engine_state_to_string(engine_get_state(engine)),
		      engine_get_last_error(engine) ? engine_get_last_error(engine) : "");
}

/* Counts recorded requests whose path starts with prefix. */
static size_t requests_to(const char *prefix)
{
	size_t n = 0;

	for (size_t i = 0; i < fake_engine_request_count(); i++)
		n += strncmp(fake_engine_request(i)->path, prefix, strlen(prefix)) == 0;
	return n;
}

/* ---- calls ---------------------------------------------------------------- */

struct call_result {
	int calls;
	int error;
	long status;
	enum engine_state state_in_cb;
	char last_error_in_cb[512];
};

static void call_cb(struct engine_req *req, int error, const struct engine_reply *reply, void *arg)
{
	struct call_result *r = arg;

	r->calls++;
	r->error = error;
	r->status = reply->status;
	r->state_in_cb = engine_get_state(engine);
	snprintf(r->last_error_in_cb, sizeof(r->last_error_in_cb), "%s",
		 engine_get_last_error(engine) ? engine_get_last_error(engine) : "");
}

static void run_call(const struct engine_call *call, struct call_result *r, int want_error)
{
	ck_assert_int_eq(engine_call_start(engine, call, call_cb, r, NULL), 0);
	ck_assert_int_eq(r->calls, 0);
	run_until(&r->calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r->calls, 1);
	ck_assert_msg(r->error == want_error, "error %d, wanted %d", r->error, want_error);
}

/* ---- probing and negotiation ---------------------------------------------------- */

START_TEST(test_probe_reachable)
{
	static const struct fake_reply script[] = { PING("1.45"), VERSION("1.45") };
	const struct engine_info *info;

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_ptr_null(engine_get_info(engine));
	start_and_wait_reachable();
	info = engine_get_info(engine);
	ck_assert_ptr_nonnull(info);
	ck_assert_str_eq(info->version, "28.0.1");
	ck_assert_str_eq(info->os, "linux");
	ck_assert_str_eq(info->arch, "amd64");
	ck_assert_str_eq(info->kernel_version, "6.1.0-18-amd64");
	ck_assert_str_eq(info->engine_api_version, "1.45");
	ck_assert_str_eq(info->api_version, "1.45");
	ck_assert_ptr_null(engine_get_last_error(engine));
	ck_assert_int_eq(changes.n, 1);
	ck_assert_int_eq(changes.from[0], ENGINE_CONNECTING);
	ck_assert_int_eq(changes.to[0], ENGINE_REACHABLE);
	ck_assert_uint_eq(fake_engine_request_count(), 2);
	ck_assert_str_eq(fake_engine_request(0)->path, "/_ping");
	ck_assert_str_eq(fake_engine_request(1)->path, "/v1.45/version");
	ck_assert_uint_eq(engine_requests_made(engine), 2);
	ck_assert_uint_eq(engine_call_requests_made(engine), 0);
	ck_assert_str_eq(engine_get_endpoint(engine)->unix_path, fake_engine_socket_path());
}
END_TEST

/* An engine newer than us: we speak our maximum. */
START_TEST(test_negotiate_newer_engine)
{
	static const struct fake_reply script[] = { PING("1.55"), VERSION(MSB_ENGINE_API_MAX) };

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	ck_assert_str_eq(engine_get_info(engine)->api_version, MSB_ENGINE_API_MAX);
	ck_assert_str_eq(engine_get_info(engine)->engine_api_version, "1.55");
	ck_assert_str_eq(fake_engine_request(1)->path, "/v" MSB_ENGINE_API_MAX "/version");
}
END_TEST

/* The oldest engine we accept negotiates exactly our floor. */
START_TEST(test_negotiate_floor)
{
	static const struct fake_reply script[] = { PING(MSB_ENGINE_API_MIN), VERSION(MSB_ENGINE_API_MIN) };

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	ck_assert_str_eq(engine_get_info(engine)->api_version, MSB_ENGINE_API_MIN);
}
END_TEST

/* Below the floor → ENGINE_UNSUPPORTED, no /version, calls refused; an
 * upgraded engine is then picked up by the re-probe. */
START_TEST(test_unsupported_then_upgraded)
{
	static const struct fake_reply script[] = {
		{ .path = "/_ping", .headers = "Api-Version: 1.40\r\n", .body = "OK" },
		{ .path = "/_ping", .headers = "Api-Version: 1.40\r\n", .body = "OK" },
		PING("1.45"), VERSION("1.45"),
	};
	struct engine_call call = { .method = "GET", .path = "/info" };
	struct call_result r = { 0 };
	const char *err;

	fake_engine_start(script, ELEMENTSOF(script));
	engine_start(engine);
	run_until(&changes.unsupported, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNSUPPORTED);
	err = engine_get_last_error(engine);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, "1.40") && strstr(err, MSB_ENGINE_API_MIN) && strstr(err, MSB_ENGINE_API_MAX),
		      "%s", err);
	ck_assert_int_eq(engine_call_start(engine, &call, call_cb, &r, NULL), -ENOTCONN);
	ck_assert_uint_eq(requests_to("/v"), 0);
	run_until(&changes.reachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_REACHABLE);
	ck_assert_uint_eq(requests_to("/_ping"), 3);
	/* connecting → unsupported → reachable: one report per change, not per retry. */
	ck_assert_int_eq(changes.n, 2);
	ck_assert_int_eq(changes.to[0], ENGINE_UNSUPPORTED);
	ck_assert_int_eq(changes.to[1], ENGINE_REACHABLE);
	ck_assert_int_eq(r.calls, 0);
}
END_TEST

/* The engine refusing our version at /version (400) is UNSUPPORTED too. */
START_TEST(test_version_400_unsupported)
{
	static const struct fake_reply script[] = {
		PING("1.45"),
		{ .path = "/v1.45/version", .status = 400, .repeat = true,
		  .body = "{\"message\":\"client version 1.45 is too old. Minimum supported API version is 1.50\"}" },
	};
	const char *logged;

	fake_engine_start(script, ELEMENTSOF(script));
	loop_log_capture_start();
	engine_start(engine);
	run_until(&changes.unsupported, 1, RUN_MAX_MS);
	logged = loop_logged();   /* a static buffer, read before the file goes */
	loop_log_capture_stop();
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNSUPPORTED);
	ck_assert_str_eq(engine_get_last_error(engine),
			 "GET /v1.45/version: HTTP 400 (the engine refuses this API version)");
	ck_assert_msg(strstr(logged, "Minimum supported API version is 1.50"), "%s", logged);
}
END_TEST

START_TEST(test_version_500_unreachable)
{
	static const struct fake_reply script[] = {
		PING("1.45"),
		{ .path = "/v1.45/version", .status = 500, .body = "{\"message\":\"daemon is broken\"}", .repeat = true },
	};
	const char *err;

	fake_engine_start(script, ELEMENTSOF(script));
	engine_start(engine);
	run_until(&changes.unreachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNREACHABLE);
	err = engine_get_last_error(engine);
	ck_assert_msg(err && strstr(err, "GET /v1.45/version") && strstr(err, "HTTP 500") &&
		      !strstr(err, "daemon is broken"), "%s", err ? err : "(null)");
	ck_assert_ptr_null(engine_get_info(engine));
}
END_TEST

/* last_error (daemon.status engine.last_error) is a stable reason: the
 * step and the HTTP status, or "could not connect to" our endpoint. The
 * engine's message, strerror and curl's text are in the log only. */
#define ENGINE_SECRET "SECRET-ENGINE-TEXT 10.0.0.53"

static const struct {
	const char *what;
	struct fake_reply ping, version;
	bool engine_down;      /* no fake engine: a refused connection */
	const char *reason;    /* last_error, exactly (with the endpoint after it if host) */
	const char *host_then; /* non-NULL: the endpoint, then this */
	const char *logged;    /* in the log, not in last_error */
} reason_rows[] = {
	{ "a ping's 500", { .path = "/_ping", .status = 500, .body = "{\"message\":\"" ENGINE_SECRET "\"}",
	  .repeat = true }, { .status = 0 }, false, "GET /_ping: HTTP 500", NULL, ENGINE_SECRET },
	{ "a version's 500", PING("1.45"), { .path = "/v1.45/version", .status = 500, .repeat = true,
	  .body = "{\"message\":\"" ENGINE_SECRET "\"}" }, false, "GET /v1.45/version: HTTP 500", NULL,
	  ENGINE_SECRET },
	{ "an unusable Api-Version", { .path = "/_ping", .headers = "Api-Version: SECRET-ENGINE-TEXT\r\n",
	  .body = "OK", .repeat = true }, { .status = 0 }, false, "GET /_ping: unusable Api-Version header",
	  NULL, "SECRET-ENGINE-TEXT" },
	{ "no engine", { .status = 0 }, { .status = 0 }, true, "GET /_ping: could not connect to ", "",
	  "Connection refused" },
	{ "a dropped connection", { .path = "/_ping", .raw = "", .repeat = true }, { .status = 0 }, false,
	  "GET /_ping: the connection to ", " was cut", "Empty reply from server" },
};

START_TEST(test_last_error_is_stable)
{
	_cleanup_free_ char *host = xasprintf("unix://%s", fake_engine_socket_path());
	_cleanup_free_ char *want = NULL;
	struct fake_reply script[2] = { reason_rows[_i].ping, reason_rows[_i].version };
	const char *err, *logged;

	if (!reason_rows[_i].engine_down)
		fake_engine_start(script, reason_rows[_i].version.path ? 2 : 1);
	loop_log_capture_start();
	engine_start(engine);
	run_until(&changes.unreachable, 1, RUN_MAX_MS);
	logged = loop_logged();   /* a static buffer, read before the file goes */
	loop_log_capture_stop();
	fake_engine_stop();   /* the script lives on this stack */
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNREACHABLE);
	err = engine_get_last_error(engine);
	ck_assert_ptr_nonnull(err);
	want = reason_rows[_i].host_then ? xasprintf("%s%s%s", reason_rows[_i].reason, host, reason_rows[_i].host_then)
					 : xstrdup(reason_rows[_i].reason);
	ck_assert_msg(strcmp(err, want) == 0, "%s: \"%s\", not \"%s\"", reason_rows[_i].what, err, want);
	ck_assert_msg(!strstr(err, "SECRET") && !strstr(err, "10.0.0.53") && !strstr(err, "Connection") &&
		      !strstr(err, "Empty reply"), "%s: %s", reason_rows[_i].what, err);
	ck_assert_msg(strstr(logged, reason_rows[_i].logged), "%s: not logged: %s", reason_rows[_i].what, logged);
}
END_TEST

/* A bad or missing Api-Version, or a /version that is not an object. */
START_TEST(test_bad_probe_replies)
{
	static const struct {
		struct fake_reply ping, version;
		const char *needle;
	} rows[] = {
		{ { .path = "/_ping", .body = "OK", .repeat = true }, { .status = 0 }, "no Api-Version" },
		{ { .path = "/_ping", .headers = "Api-Version: banana\r\n", .body = "OK", .repeat = true },
		  { .status = 0 }, "unusable Api-Version" },
		{ { .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .status = 404, .repeat = true },
		  { .status = 0 }, "HTTP 404" },
		{ PING("1.45"), { .path = "/v1.45/version", .body = "[1,2]", .repeat = true }, "not a version object" },
		{ PING("1.45"), { .path = "/v1.45/version", .body = "{\"Version\": \"20.10", .repeat = true },
		  "not a version object" },
		{ PING("1.45"), { .path = "/v1.45/version", .body = "{\"Version\":7}", .repeat = true },
		  "not a version object" },
	};
	struct fake_reply script[2] = { rows[_i].ping, rows[_i].version };

	fake_engine_start(script, rows[_i].version.path ? 2 : 1);
	engine_start(engine);
	run_until(&changes.unreachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNREACHABLE);
	ck_assert_msg(strstr(engine_get_last_error(engine), rows[_i].needle), "%s",
		      engine_get_last_error(engine));
	fake_engine_stop();   /* the script lives on this stack */
}
END_TEST

/* ---- reachability ----------------------------------------------------------------- */

/* Down at start: UNREACHABLE, calls refused without a request; then the
 * engine appears on that path and is found without a restart. */
START_TEST(test_down_then_up)
{
	static const struct fake_reply script[] = { PING("1.45"), VERSION("1.45") };
	struct engine_call call = { .method = "GET", .path = "/containers/json" };
	struct call_result r = { 0 };
	uint64_t made;

	engine_start(engine);
	run_until(&changes.unreachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_UNREACHABLE);
	ck_assert_msg(strstr(engine_get_last_error(engine), "GET /_ping: could not connect to unix://"), "%s",
		      engine_get_last_error(engine));
	/* several retries on the backoff, still one change (hang guard) */
	LOOP_RUN_WHILE(base, engine_requests_made(engine) < 3, RUN_MAX_MS);
	made = engine_requests_made(engine);
	ck_assert_uint_ge(made, 3);
	ck_assert_int_eq(engine_call_start(engine, &call, call_cb, &r, NULL), -ENOTCONN);
	ck_assert_uint_eq(engine_requests_made(engine), made);
	ck_assert_uint_eq(engine_call_requests_made(engine), 0);

	fake_engine_start(script, ELEMENTSOF(script));
	run_until(&changes.reachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_REACHABLE);
	ck_assert_ptr_null(engine_get_last_error(engine));
	ck_assert_int_eq(changes.n, 2);
	ck_assert_int_eq(changes.to[0], ENGINE_UNREACHABLE);
	ck_assert_int_eq(changes.to[1], ENGINE_REACHABLE);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r.calls, 0);
}
END_TEST

/* A call refused in transport marks the engine unreachable (before its
 * callback runs) and starts probing; the engine comes back by itself. */
START_TEST(test_call_refused_reprobes)
{
	static const struct fake_reply script[] = { PING("1.45"), VERSION("1.45") };
	struct engine_call call = { .method = "GET", .path = "/containers/json" };
	struct call_result r = { 0 };
	uint64_t made;

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	fake_engine_stop();
	run_call(&call, &r, -ECONNREFUSED);
	ck_assert_int_eq(r.state_in_cb, ENGINE_UNREACHABLE);
	ck_assert_int_eq(changes.unreachable, 1);
	ck_assert_msg(strstr(r.last_error_in_cb, "GET /v1.45/containers/json: could not connect to unix://"),
		      "%s", r.last_error_in_cb);
	made = engine_requests_made(engine);
	ck_assert_uint_ge(made, 4);    /* probe (2), the call, the re-probe's ping */
	ck_assert_uint_eq(engine_call_requests_made(engine), 1);

	fake_engine_start(script, ELEMENTSOF(script));
	run_until(&changes.reachable, 2, RUN_MAX_MS);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_REACHABLE);
	ck_assert_uint_gt(engine_requests_made(engine), made);
}
END_TEST

/* A call's own timeout is not a transport failure: the engine stays reachable. */
START_TEST(test_call_timeout_keeps_state)
{
	static const struct fake_reply script[] = {
		PING("1.45"), VERSION("1.45"), { .path = "/v1.45/slow", .body = "{}", .delay_ms = 3000 },
	};
	struct engine_options opts = test_opts;
	struct engine_call call = { .method = "GET", .path = "/slow" };  /* timeout 0: opts.timeout_ms */
	struct call_result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	opts.timeout_ms = 100;
	engine_set_options(engine, &opts);
	run_call(&call, &r, -ETIMEDOUT);   /* the reply (3 s away) would have been 200 */
	ck_assert_uint_eq(fake_engine_request_count(), 3);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_REACHABLE);
	ck_assert_int_eq(changes.n, 1);
}
END_TEST

/* engine_call_start sends "/vX.Y" + path on the negotiated version. */
START_TEST(test_call_prefix_and_counters)
{
	static const struct fake_reply script[] = {
		PING("1.47"), VERSION("1.47"),
		{ .method = "GET", .path = "/v1.47/containers/json", .body = "[]" },
		{ .method = "POST", .path = "/v1.47/containers/create", .status = 201, .body = "{\"Id\":\"c1\"}" },
	};
	struct engine_call list = { .method = "GET", .path = "/containers/json?all=1&filters=%7B%7D" };
	struct engine_call create = { .method = "POST", .path = "/containers/create?name=sbx-1",
				      .content_type = "application/json", .body = "{}", .body_len = 2 };
	struct call_result r1 = { 0 }, r2 = { 0 };
	const struct fake_request *q;

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	run_call(&list, &r1, 0);
	ck_assert_int_eq(r1.status, 200);
	run_call(&create, &r2, 0);
	ck_assert_int_eq(r2.status, 201);
	ck_assert_uint_eq(fake_engine_request_count(), 4);
	ck_assert_str_eq(fake_engine_request(2)->path, "/v1.47/containers/json?all=1&filters=%7B%7D");
	q = fake_engine_request(3);
	ck_assert_str_eq(q->method, "POST");
	ck_assert_str_eq(q->path, "/v1.47/containers/create?name=sbx-1");
	ck_assert_str_eq(q->body, "{}");
	ck_assert_uint_eq(engine_requests_made(engine), 4);
	ck_assert_uint_eq(engine_call_requests_made(engine), 2);
}
END_TEST

START_TEST(test_call_refusals)
{
	static const struct fake_reply script[] = { PING("1.45"), VERSION("1.45") };
	struct engine_call bad = { .method = "GET", .path = "containers/json" };
	struct engine_call ok = { .method = "GET", .path = "/info" };
	struct call_result r = { 0 };

	ck_assert_int_eq(engine_call_start(engine, &ok, call_cb, &r, NULL), -ENOTCONN);  /* not started */
	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	ck_assert_int_eq(engine_call_start(engine, &bad, call_cb, &r, NULL), -EINVAL);
	ck_assert_int_eq(engine_call_start(engine, &ok, NULL, &r, NULL), -EINVAL);
	ck_assert_int_eq(engine_call_start(NULL, &ok, call_cb, &r, NULL), -EINVAL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r.calls, 0);
	ck_assert_uint_eq(engine_call_requests_made(engine), 0);
}
END_TEST

/* ---- backoff and teardown ------------------------------------------------------------ */

/* Retries double from reconnect_min_ms and stop growing at reconnect_max_ms:
 * with 40 → 160 ms the log names each next probe's delay, 40, 80, 160, 160,
 * ... (320 if uncapped, 40 if flat), and the fake sees each probe at least
 * half that delay after its answer to the one before (not early: the timer
 * waits. Half, not all: libevent's timers run on CLOCK_MONOTONIC_COARSE,
 * which a tickless kernel can leave several ms stale when the loop wakes). */
#define BACKOFF_PROBES 10

START_TEST(test_backoff)
{
	static const struct fake_reply script[] = { { .path = "/_ping", .status = 500, .repeat = true } };
	static const long want_ms[BACKOFF_PROBES - 1] = { 40, 80, 160, 160, 160, 160, 160, 160, 160 };
	const struct engine_options opts = { .timeout_ms = 2000, .reconnect_min_ms = 40, .reconnect_max_ms = 160 };
	const char *logged, *p;

	engine_set_options(engine, &opts);
	log_set_debug(true);
	fake_engine_start(script, ELEMENTSOF(script));
	loop_log_capture_start();
	engine_start(engine);
	/* hang guard: ten probes take 40 + 80 + 7 × 160 ms when capped */
	LOOP_RUN_WHILE(base, requests_to("/_ping") < BACKOFF_PROBES, RUN_MAX_MS);
	logged = loop_logged();
	loop_log_capture_stop();
	log_set_debug(false);
	ck_assert_uint_ge(requests_to("/_ping"), BACKOFF_PROBES);
	p = logged;
	for (int i = 0; i < BACKOFF_PROBES - 1; i++) {
		char want[64];
		long long gap_us = fake_engine_request(i + 1)->at_us - fake_engine_request(i)->replied_us;

		snprintf(want, sizeof(want), "next probe in %ld ms", want_ms[i]);
		p = strstr(p, "next probe in ");
		ck_assert_msg(p && strncmp(p, want, strlen(want)) == 0, "probe %d: want \"%s\" in: %s", i,
			      want, logged);
		p += strlen(want);
		/* not early: probe i + 1 came no sooner than its delay after the
		 * answer to probe i went out */
		ck_assert_msg(gap_us >= want_ms[i] * 500, "probe %d: %lld us after the last", i + 1, gap_us);
	}
	ck_assert_int_eq(changes.n, 1);
}
END_TEST

START_TEST(test_free_with_call_in_flight)
{
	static const struct fake_reply script[] = {
		PING("1.45"), VERSION("1.45"), { .path = "/v1.45/slow", .body = "{}", .delay_ms = 3000 },
	};
	struct engine_call call = { .method = "GET", .path = "/slow" };
	struct call_result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	start_and_wait_reachable();
	ck_assert_int_eq(engine_call_start(engine, &call, call_cb, &r, NULL), 0);
	run_for(50);
	engine = engine_free(engine);
	ck_assert_ptr_null(engine);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r.calls, 1);
}
END_TEST

/* Freeing while a probe is in flight or a retry is armed. */
START_TEST(test_free_while_probing)
{
	engine_start(engine);
	engine = engine_free(engine);         /* probe in flight */
	ck_assert_ptr_null(engine);
	ck_assert_int_eq(changes.n, 0);
	ck_assert_ptr_null(engine_free(NULL));
}
END_TEST

/* The state callback may free the engine. */
START_TEST(test_free_from_state_cb)
{
	static const struct fake_reply script[] = { PING("1.45"), VERSION("1.45") };

	fake_engine_start(script, ELEMENTSOF(script));
	free_on_reachable = true;
	engine_start(engine);
	run_until(&changes.reachable, 1, RUN_MAX_MS);
	ck_assert_int_eq(changes.reachable, 1);
	ck_assert_ptr_null(engine);
	run_for(SETTLE_MS);
}
END_TEST

/* ---- pure helpers --------------------------------------------------------------------- */

static const struct {
	const char *a, *b;
	int sign;
} cmp_rows[] = {
	{ "1.41", "1.9", 1 },
	{ "1.9", "1.41", -1 },
	{ "1.41", "1.41", 0 },
	{ "1.41", "1.51", -1 },
	{ "2.0", "1.99", 1 },
	{ "1.100", "1.99", 1 },
	{ "garbage", "1.41", -1 },
	{ "1.41", "garbage", 1 },
	{ "garbage", "junk", 0 },
	{ NULL, "1.0", -1 },
	{ "", "0.0", -1 },
	{ "1.", "1.0", -1 },
	{ ".1", "0.1", -1 },
	{ "1.41.0", "1.41", -1 },
	{ "1.41 ", "1.41", -1 },
	{ "-1.41", "0.0", -1 },
	{ "1.4x", "1.4", -1 },
	{ "99999999999.1", "1.1", -1 },
};

START_TEST(test_api_version_cmp)
{
	int c = engine_api_version_cmp(cmp_rows[_i].a, cmp_rows[_i].b);
	int sign = (c > 0) - (c < 0);

	ck_assert_msg(sign == cmp_rows[_i].sign, "cmp(%s, %s) = %d", cmp_rows[_i].a ? cmp_rows[_i].a : "NULL",
		      cmp_rows[_i].b, c);
}
END_TEST

START_TEST(test_state_to_string)
{
	ck_assert_str_eq(engine_state_to_string(ENGINE_CONNECTING), "connecting");
	ck_assert_str_eq(engine_state_to_string(ENGINE_REACHABLE), "reachable");
	ck_assert_str_eq(engine_state_to_string(ENGINE_UNREACHABLE), "unreachable");
	ck_assert_str_eq(engine_state_to_string(ENGINE_UNSUPPORTED), "unsupported");
	ck_assert_str_eq(engine_state_to_string(_ENGINE_STATE_MAX), "invalid");
}
END_TEST

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc;

	tc = fixture_tcase("probe_and_negotiation");
	tcase_add_test(tc, test_probe_reachable);
	tcase_add_test(tc, test_negotiate_newer_engine);
	tcase_add_test(tc, test_negotiate_floor);
	tcase_add_test(tc, test_unsupported_then_upgraded);
	tcase_add_test(tc, test_version_400_unsupported);
	tcase_add_test(tc, test_version_500_unreachable);
	tcase_add_loop_test(tc, test_bad_probe_replies, 0, 5);
	tcase_add_loop_test(tc, test_last_error_is_stable, 0, (int)ELEMENTSOF(reason_rows));
	suite_add_tcase(s, tc);

	tc = fixture_tcase("reachability");
	tcase_add_test(tc, test_down_then_up);
	tcase_add_test(tc, test_call_refused_reprobes);
	tcase_add_test(tc, test_call_timeout_keeps_state);
	tcase_add_test(tc, test_call_prefix_and_counters);
	tcase_add_test(tc, test_call_refusals);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("backoff_and_teardown");
	tcase_add_test(tc, test_backoff);
	tcase_add_test(tc, test_free_with_call_in_flight);
	tcase_add_test(tc, test_free_while_probing);
	tcase_add_test(tc, test_free_from_state_cb);
	suite_add_tcase(s, tc);

	tc = tcase_create("helpers");
	tcase_add_loop_test(tc, test_api_version_cmp, 0, (int)ELEMENTSOF(cmp_rows));
	tcase_add_test(tc, test_state_to_string);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(engine_suite());
	int failed;

	fake_run_dir_create("check-engine");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
