/* check_engine_req.c — the http layer (struct engine_req on libcurl multi +
 * libevent) against the fake engine on a temporary Unix socket.
 *
 * Every case checks the contract of http.h: the callback fires exactly
 * once (counted, and counted again after the loop ran on), never from
 * inside engine_req_start, with the documented error. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cleanup.h"
#include "endpoint.h"
#include "fake_engine.h"
#include "loop.h"
#include "slow.h"
#include "http.h"
#include "xmalloc.h"

#define RUN_MAX_MS      2000     /* hang guard: the longest any test waits for a callback */
#define SETTLE_MS       30       /* loop time after a result, to catch a second callback */

static struct event_base *base;
static struct engine_http *http;
static bool in_start;            /* engine_req_start is on the stack */

struct result {
	int calls;
	int error;
	long status;
	char *body;
	size_t body_len;
	bool fired_in_start;
	char api_version[64];
	char error_text[256];
	/* streaming */
	int chunks;
	char *data;
	size_t data_len;
	long data_status;
	int data_ret;               /* what on_data returns */
	/* chained actions */
	struct engine_req *cancel_other;
	bool free_http;
	struct result *next_result;
	const struct engine_call *next_call;
	int next_start_ret;
};

static void run_until(const int *counter, int want, int max_ms)
{
	loop_run_until(base, counter, want, max_ms);
}

static void run_for(int ms)
{
	run_until(NULL, 0, ms);
}

static void result_release(struct result *r)
{
	free(r->body);
	free(r->data);
}

static void done_cb(struct engine_req *req, int error, const struct engine_reply *reply, void *arg)
{
	struct result *r = arg;
	const char *v;

	r->calls++;
	r->fired_in_start = r->fired_in_start || in_start;
	r->error = error;
	ck_assert_ptr_nonnull(reply);
	ck_assert_ptr_nonnull(reply->body);
	ck_assert_ptr_nonnull(reply->error_text);
	r->status = reply->status;
	free(r->body);
	r->body = xmalloc(reply->body_len + 1);
	memcpy(r->body, reply->body, reply->body_len + 1);
	r->body_len = reply->body_len;
	v = engine_reply_header(reply, "api-version");
	snprintf(r->api_version, sizeof(r->api_version), "%s", v ? v : "");
	snprintf(r->error_text, sizeof(r->error_text), "%s", reply->error_text);
	if (r->cancel_other)
		engine_req_cancel(r->cancel_other);
	if (r->next_call) {
		in_start = true;
		r->next_start_ret = engine_req_start(http, r->next_call, done_cb, r->next_result, NULL);
		in_start = false;
	}
	if (r->free_http)
		http = engine_http_free(http);
}

static int data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct result *r = arg;

	r->chunks++;
	r->data_status = status;
	r->data = xrealloc(r->data, r->data_len + len + 1);
	memcpy(r->data + r->data_len, data, len);
	r->data_len += len;
	r->data[r->data_len] = '\0';
	return r->data_ret;
}

static int start(const struct engine_call *call, struct result *r, struct engine_req **ret_req)
{
	int ret;

	in_start = true;
	ret = engine_req_start(http, call, done_cb, r, ret_req);
	in_start = false;
	return ret;
}

/* Starts, runs until the callback, lets the loop settle, and checks the
 * exactly-once contract and the error. */
static void run_call(const struct engine_call *call, struct result *r, int want_error)
{
	ck_assert_int_eq(start(call, r, NULL), 0);
	ck_assert_int_eq(r->calls, 0);
	run_until(&r->calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_msg(r->calls == 1, "callback fired %d times", r->calls);
	ck_assert(!r->fired_in_start);
	ck_assert_msg(r->error == want_error, "error %d (%s), wanted %d; %s", r->error, strerror(-r->error),
		      want_error, r->error_text);
}

static void setup(void)
{
	_cleanup_free_ char *host = xasprintf("unix://%s", fake_engine_socket_path());
	_cleanup_free_ char *err = NULL;
	struct engine_endpoint *ep = NULL;

	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	ck_assert_int_eq(engine_endpoint_from_host(host, "test", &ep, &err), 0);
	http = engine_http_new(base, ep);
	ck_assert_ptr_nonnull(http);
	engine_endpoint_free(ep);
}

static void teardown(void)
{
	http = engine_http_free(http);
	event_base_free(base);
	fake_engine_cleanup();
}

#define GET(p) { .method = "GET", .path = (p), .timeout_ms = 5000 }

/* ---- replies -------------------------------------------------------------- */

START_TEST(test_content_length)
{
	static const struct fake_reply script[] = {
		{ .path = "/v1.41/version", .headers = "Content-Type: application/json\r\n",
		  .body = "{\"Version\":\"28.0.1\"}" },
	};
	struct engine_call call = GET("/v1.41/version");
	struct result r = { 0 };
	const struct fake_request *q;
	char v[128];

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	ck_assert_int_eq(r.status, 200);
	ck_assert_str_eq(r.body, "{\"Version\":\"28.0.1\"}");
	ck_assert_uint_eq(r.body_len, strlen(r.body));
	ck_assert_uint_eq(fake_engine_request_count(), 1);
	q = fake_engine_request(0);
	ck_assert_str_eq(q->method, "GET");
	ck_assert_str_eq(q->path, "/v1.41/version");
	ck_assert(fake_request_header(q, "Host", v, sizeof(v)));
	ck_assert_str_eq(v, "api.moby.localhost");
	ck_assert(!fake_request_header(q, "Accept-Encoding", v, sizeof(v)));
	ck_assert(!fake_request_header(q, "Expect", v, sizeof(v)));
	ck_assert(!fake_request_header(q, "Content-Type", v, sizeof(v)));
	result_release(&r);
}
END_TEST

START_TEST(test_chunked)
{
	static const struct fake_reply script[] = {
		{ .body = "{\"a\":\"0123456789abcdefghijklmnopqrstuvwxyz\"}", .chunked = true, .chunk_size = 3 },
	};
	struct engine_call call = GET("/x");
	struct result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	ck_assert_int_eq(r.status, 200);
	ck_assert_str_eq(r.body, script[0].body);
	result_release(&r);
}
END_TEST

/* on_data sees every chunk with the status; the reply body stays empty. */
START_TEST(test_stream_on_data)
{
	static const struct fake_reply script[] = {
		{ .status = 201, .body = "line one\nline two\nline three\n", .chunked = true, .chunk_size = 9,
		  .chunk_delay_ms = 10 },
	};
	struct result r = { 0 };
	struct engine_call call = { .method = "GET", .path = "/events", .on_data = data_cb, .data_arg = &r };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	ck_assert_int_eq(r.status, 201);
	ck_assert_int_eq(r.data_status, 201);
	ck_assert_int_ge(r.chunks, 2);
	ck_assert_str_eq(r.data, script[0].body);
	ck_assert_str_eq(r.body, "");
	ck_assert_uint_eq(r.body_len, 0);
	result_release(&r);
}
END_TEST

/* A negative on_data result aborts; the done callback gets that value. */
START_TEST(test_stream_abort)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdef0123456789abcdef", .chunked = true, .chunk_size = 4, .chunk_delay_ms = 5 },
	};
	struct result r = { .data_ret = -EPIPE };
	struct engine_call call = { .method = "GET", .path = "/logs", .on_data = data_cb, .data_arg = &r };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, -EPIPE);
	ck_assert_int_eq(r.chunks, 1);
	result_release(&r);
}
END_TEST

/* ENGINE_DATA_PAUSE leaves the chunk with libcurl: nothing more comes
 * until engine_req_resume() (from the loop), which hands that chunk again;
 * the body arrives whole and in order. */
struct pausing {
	struct result r;
	struct engine_req *req;
	struct event *resume_ev;
	int offered, paused, resumed;
	bool paused_now;
};

static int pausing_data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct pausing *p = arg;
	static const struct timeval zero = { 0, 0 };

	ck_assert(!p->paused_now);   /* nothing while paused */
	if (p->offered++ % 2 == 0) {
		p->paused++;
		p->paused_now = true;
		evtimer_add(p->resume_ev, &zero);
		return ENGINE_DATA_PAUSE;
	}
	return data_cb(req, status, data, len, &p->r);
}

static void pausing_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pausing *p = arg;

	(void)fd, (void)what;
	p->paused_now = false;
	p->resumed++;
	engine_req_resume(p->req);
}

START_TEST(test_stream_pause)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", .chunked = true,
		  .chunk_size = 7, .chunk_delay_ms = 3 },
	};
	struct pausing p = { .r = { 0 } };
	struct engine_call call = { .method = "GET", .path = "/logs", .on_data = pausing_data_cb, .data_arg = &p };

	p.resume_ev = evtimer_new(base, pausing_resume_cb, &p);
	ck_assert_ptr_nonnull(p.resume_ev);
	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&call, &p.r, &p.req), 0);
	run_until(&p.r.calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, 0);
	ck_assert_int_ge(p.paused, 2);
	ck_assert_int_eq(p.resumed, p.paused);
	ck_assert_str_eq(p.r.data, script[0].body);
	engine_req_resume(NULL);   /* NULL-safe */
	event_free(p.resume_ev);
	result_release(&p.r);
}
END_TEST

/* A stream paused once on its first chunk, resumed resume_ms later; on
 * the chunk handed again on_data returns redelivery_ret (0: takes it). */
struct pause_once {
	struct result r;
	struct engine_req *req;
	struct event *resume_ev;
	int offered, resumed, redelivery_ret;
	long resume_ms;
	int action;                 /* at resume_ms: 0 resume, 1 cancel, 2 free the http object */
};

static int pause_once_data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct pause_once *p = arg;
	struct timeval tv = { p->resume_ms / 1000, (p->resume_ms % 1000) * 1000 };

	if (p->offered++ == 0) {
		evtimer_add(p->resume_ev, &tv);
		return ENGINE_DATA_PAUSE;
	}
	if (p->offered == 2 && p->redelivery_ret < 0)
		return p->redelivery_ret;
	return data_cb(req, status, data, len, &p->r);
}

static void pause_once_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pause_once *p = arg;

	(void)fd, (void)what;
	if (p->action == 1) {
		engine_req_cancel(p->req);
		return;
	}
	if (p->action == 2) {
		http = engine_http_free(http);
		return;
	}
	p->resumed++;
	engine_req_resume(p->req);
}

static void pause_once_run(const struct fake_reply *script, struct pause_once *p, long idle_timeout_ms)
{
	struct engine_call call = { .method = "GET", .path = "/logs", .on_data = pause_once_data_cb,
				    .data_arg = p, .idle_timeout_ms = idle_timeout_ms };

	p->resume_ev = evtimer_new(base, pause_once_resume_cb, p);
	ck_assert_ptr_nonnull(p->resume_ev);
	fake_engine_start(script, 1);
	ck_assert_int_eq(start(&call, &p->r, &p->req), 0);
	run_until(&p->r.calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	event_free(p->resume_ev);
}

/* on_data refuses the chunk handed again by the resume (libcurl 7.88 hands
 * it inside curl_easy_pause, which then fails before it re-arms the
 * transfer): the request ends with on_data's value, done fires once.
 * Either the reply stalls (only the resume can end it) or it is whole. */
START_TEST(test_stream_resume_abort)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5,
		  .stall = true },
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5 },
	};
	struct pause_once p = { .redelivery_ret = -EPIPE, .resume_ms = 20 };

	pause_once_run(&script[_i], &p, 0);
	ck_assert_int_eq(p.resumed, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, -EPIPE);
	ck_assert_int_eq(p.offered, 2);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	result_release(&p.r);
}
END_TEST

/* A pause longer than the idle deadline does not end the request: the
 * deadline counts the engine's silence, not ours. The whole reply is sent
 * at once, so with the deadline stopped nothing can time out. */
START_TEST(test_stream_pause_longer_than_idle)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5 },
	};
	/* not early: the pause (900 ms) outlasts the idle deadline (300 ms); both
	 * stretched under valgrind, where the deadline is a hang guard on the first
	 * chunk's arrival */
	struct pause_once p = { .resume_ms = 900L * test_slow_factor() };

	pause_once_run(script, &p, 300L * test_slow_factor());
	ck_assert_int_eq(p.resumed, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, 0);
	ck_assert_str_eq(p.r.data, script[0].body);
	result_release(&p.r);
}
END_TEST

/* ... and the deadline runs again after the resume: a reply that stalls
 * once all of it was taken ends with -ETIMEDOUT, the body whole. */
START_TEST(test_stream_idle_after_resume)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5,
		  .stall = true },
	};
	/* not early: the pause (900 ms) outlasts the idle deadline (300 ms); both
	 * stretched under valgrind, where the deadline is a hang guard on the first
	 * chunk's arrival */
	struct pause_once p = { .resume_ms = 900L * test_slow_factor() };

	pause_once_run(script, &p, 300L * test_slow_factor());
	ck_assert_int_eq(p.resumed, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, -ETIMEDOUT);
	ck_assert_str_eq(p.r.data, script[0].body);
	result_release(&p.r);
}
END_TEST

/* The whole reply, last chunk included, read while paused on its first
 * chunk: the resume hands the rest and the request ends, once. */
START_TEST(test_stream_pause_at_end)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5 },
	};
	struct pause_once p = { .resume_ms = 50 };

	pause_once_run(script, &p, 0);
	ck_assert_int_eq(p.resumed, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, 0);
	ck_assert_str_eq(p.r.data, script[0].body);
	result_release(&p.r);
}
END_TEST

/* The engine closes the connection mid-reply while the stream is paused:
 * the resume hands what came and the request ends with the reset, once. */
START_TEST(test_stream_close_while_paused)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5,
		  .close_after_bytes = 120 },
	};
	struct pause_once p = { .resume_ms = 50 };

	pause_once_run(script, &p, 0);
	ck_assert_int_eq(p.resumed, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, -ECONNRESET);
	result_release(&p.r);
}
END_TEST

/* A paused request cancelled, or its http object freed: -ECANCELED, once. */
START_TEST(test_stream_cancel_while_paused)
{
	static const struct fake_reply script[] = {
		{ .body = "0123456789abcdefghijklmnopqrstuvwxyz", .chunked = true, .chunk_size = 5,
		  .stall = true },
	};
	struct pause_once p = { .resume_ms = 20, .action = 1 + _i };

	pause_once_run(script, &p, 0);
	ck_assert_int_eq(p.offered, 1);
	ck_assert_int_eq(p.r.calls, 1);
	ck_assert_int_eq(p.r.error, -ECANCELED);
	result_release(&p.r);
}
END_TEST

START_TEST(test_headers)
{
	static const struct fake_reply script[] = {
		{ .path = "/_ping", .headers = "API-Version:   1.45  \r\nOstype: linux\r\nDocker-Experimental: false\r\n",
		  .body = "OK" },
	};
	struct engine_call call = GET("/_ping");
	struct result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	ck_assert_str_eq(r.api_version, "1.45");
	ck_assert_str_eq(r.body, "OK");
	result_release(&r);
}
END_TEST

/* Header lookups from inside the callback, case-insensitively. */
static void header_cb(struct engine_req *req, int error, const struct engine_reply *reply, void *arg)
{
	int *calls = arg;

	(*calls)++;
	ck_assert(!in_start);
	ck_assert_int_eq(error, 0);
	ck_assert_str_eq(engine_reply_header(reply, "ostype"), "linux");
	ck_assert_str_eq(engine_reply_header(reply, "OSTYPE"), "linux");
	ck_assert_str_eq(engine_reply_header(reply, "Content-Length"), "2");
	ck_assert_ptr_null(engine_reply_header(reply, "X-Interim"));
	ck_assert_ptr_null(engine_reply_header(reply, "Missing"));
	ck_assert_ptr_null(engine_reply_header(reply, NULL));
	ck_assert_ptr_null(engine_reply_header(NULL, "Ostype"));
}

/* Only the final response's headers are kept (an interim 100 comes first). */
START_TEST(test_headers_final_only)
{
	static const struct fake_reply script[] = {
		{ .raw = "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
			 "HTTP/1.1 200 OK\r\nOstype: linux\r\nContent-Length: 2\r\n\r\nOK" },
	};
	struct engine_call call = GET("/_ping");
	int calls = 0;

	fake_engine_start(script, ELEMENTSOF(script));
	in_start = true;
	ck_assert_int_eq(engine_req_start(http, &call, header_cb, &calls, NULL), 0);
	in_start = false;
	run_until(&calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(calls, 1);
}
END_TEST

/* A header block over ENGINE_HTTP_MAX_HEADER_BYTES → -EMSGSIZE. */
START_TEST(test_headers_too_big)
{
	size_t n = ENGINE_HTTP_MAX_HEADER_BYTES + 100;
	char *big = xmalloc(n + 32);
	struct fake_reply script[1] = { { .body = "{}" } };
	struct engine_call call = GET("/x");
	struct result r = { 0 };

	snprintf(big, n + 32, "X-Big: ");
	memset(big + 7, 'b', n);
	snprintf(big + 7 + n, 25, "\r\n");
	script[0].headers = big;
	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, -EMSGSIZE);
	fake_engine_stop();
	free(big);
	result_release(&r);
}
END_TEST

/* An engine error is a reply, not a transport failure. */
START_TEST(test_http_500)
{
	static const struct fake_reply script[] = {
		{ .status = 500, .headers = "Content-Type: application/json\r\n",
		  .body = "{\"message\":\"Container abc is not paused\"}" },
	};
	struct engine_call call = { .method = "POST", .path = "/v1.41/containers/abc/unpause" };
	struct result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	ck_assert_int_eq(r.status, 500);
	ck_assert_str_eq(r.body, script[0].body);
	result_release(&r);
}
END_TEST

/* Bodies go out with their Content-Type and no Expect, even when large. */
START_TEST(test_post_body)
{
	static const struct fake_reply script[] = {
		{ .method = "POST", .status = 201, .body = "{\"Id\":\"x\"}", .repeat = true },
	};
	size_t big_len = 1100 * 1024;
	char *big = xmalloc(big_len);
	struct engine_call call = { .method = "POST", .path = "/v1.41/containers/create",
				    .content_type = "application/json", .body = "{\"Image\":\"a\"}",
				    .body_len = 13, .timeout_ms = 5000 };
	struct result r = { 0 }, r2 = { 0 };
	const struct fake_request *q;
	char v[128];

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, 0);
	q = fake_engine_request(0);
	ck_assert_str_eq(q->method, "POST");
	ck_assert_str_eq(q->body, "{\"Image\":\"a\"}");
	ck_assert(fake_request_header(q, "Content-Type", v, sizeof(v)));
	ck_assert_str_eq(v, "application/json");
	ck_assert(fake_request_header(q, "Content-Length", v, sizeof(v)));
	ck_assert_str_eq(v, "13");

	memset(big, 'x', big_len);
	call.content_type = "application/x-tar";
	call.body = big;
	call.body_len = big_len;
	run_call(&call, &r2, 0);
	free(big);
	q = fake_engine_request(1);
	ck_assert_uint_eq(q->body_len, big_len);
	ck_assert(!fake_request_header(q, "Expect", v, sizeof(v)));
	ck_assert(fake_request_header(q, "Content-Type", v, sizeof(v)));
	ck_assert_str_eq(v, "application/x-tar");
	result_release(&r);
	result_release(&r2);
}
END_TEST

/* A POST without a body sends Content-Length: 0 and no Content-Type; PUT,
 * DELETE and HEAD use their own method. */
START_TEST(test_methods)
{
	static const struct fake_reply script[] = { { .status = 204, .repeat = true } };
	static const char *const methods[] = { "POST", "PUT", "DELETE", "HEAD" };
	char v[128];

	fake_engine_start(script, ELEMENTSOF(script));
	for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
		struct engine_call call = { .method = methods[i], .path = "/v1.41/containers/abc",
					    .timeout_ms = 5000 };
		struct result r = { 0 };
		const struct fake_request *q;

		run_call(&call, &r, 0);
		ck_assert_int_eq(r.status, 204);
		q = fake_engine_request(i);
		ck_assert_str_eq(q->method, methods[i]);
		ck_assert_msg(!fake_request_header(q, "Content-Type", v, sizeof(v)), "%s", methods[i]);
		if (i < 2) {
			ck_assert(fake_request_header(q, "Content-Length", v, sizeof(v)));
			ck_assert_str_eq(v, "0");
		}
		result_release(&r);
	}
}
END_TEST

/* ---- failures ---------------------------------------------------------------- */

struct malformed_row {
	const char *raw;
	int error;
};

static const struct malformed_row malformed_rows[] = {
	{ "garbage that is not HTTP\r\n\r\n", -EPROTO },          /* HTTP/0.9 refused */
	{ "HTTP/1.1 abc\r\n\r\n", -EPROTO },                      /* no status code */
	{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", -ECONNRESET },   /* short body */
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", -ECONNRESET }, /* bad chunk */
	{ "", -ECONNRESET },                                        /* nothing, then close */
};

START_TEST(test_malformed)
{
	struct fake_reply script[1] = { { .raw = malformed_rows[_i].raw } };
	struct engine_call call = GET("/x");
	struct result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, malformed_rows[_i].error);
	fake_engine_stop();
	result_release(&r);
}
END_TEST

/* The peer closes in the middle of the body (Content-Length or chunked). */
START_TEST(test_close_mid_body)
{
	static char body[1000];
	struct fake_reply script[] = {
		{ .path = "/cl", .body = body, .close_after_bytes = 300 },
		{ .path = "/chunked", .body = body, .chunked = true, .chunk_size = 100, .close_after_bytes = 400 },
	};
	struct engine_call call = GET("/cl");
	struct result r = { 0 }, r2 = { 0 };

	memset(body, 'b', sizeof(body) - 1);
	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, -ECONNRESET);
	ck_assert_int_eq(r.status, 200);
	call.path = "/chunked";
	run_call(&call, &r2, -ECONNRESET);
	fake_engine_stop();
	result_release(&r);
	result_release(&r2);
}
END_TEST

/* A reply slower than the request deadline → -ETIMEDOUT (the reply, 30 s
 * away, would have been 200), and the request's connection is closed: the
 * fake sees the client go. */
START_TEST(test_deadline)
{
	static const struct fake_reply script[] = { { .body = "late", .delay_ms = 30000 } };
	/* hang guard margin: the request reaches the fake before the deadline */
	struct engine_call call = { .method = "GET", .path = "/slow", .timeout_ms = 200L * test_slow_factor() };
	struct result r = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, -ETIMEDOUT);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	/* hang guard: the fake's thread notices the close */
	LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
	ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	result_release(&r);
}
END_TEST

/* A stream that stalls after some chunks hits the idle deadline: the
 * request ends with -ETIMEDOUT (nothing else could end it: the fake stalls
 * for ever, and no overall deadline is set) and its connection is closed
 * (the fake sees the client go). What came before the stall was handed on
 * (all of it, unless the machine stalled the loop longer than the deadline
 * between two chunks sent back to back: then a prefix). */
START_TEST(test_idle_stream)
{
	static const struct fake_reply script[] = {
		{ .body = "progress 1\nprogress 2\n", .chunked = true, .chunk_size = 11, .stall = true },
	};
	struct result r = { 0 };
	/* hang guard margin: the reply's head and chunks come before the deadline */
	struct engine_call call = { .method = "POST", .path = "/images/create",
				    .idle_timeout_ms = 150L * test_slow_factor(), .on_data = data_cb, .data_arg = &r };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r, -ETIMEDOUT);
	ck_assert_ptr_nonnull(r.data);
	ck_assert_msg(strncmp(script[0].body, r.data, r.data_len) == 0, "%s", r.data);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	/* hang guard: the fake's thread notices the close */
	LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
	ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	result_release(&r);
}
END_TEST

/* Bytes keep the idle deadline away: a slow but steady stream completes,
 * though it lasts more than twice the deadline. The gap between chunks is a
 * fifth of the deadline, both stretched under valgrind: a gap would have to
 * grow fivefold on a loaded machine to end it (a hang guard margin, not a
 * window asserted), and the stream is long enough that a deadline counted
 * from the request's start (not reset by bytes) would always fire. */
#define IDLE_RESET_GAP_MS  40
#define IDLE_RESET_CHUNKS  (2 * 5 + 2)

START_TEST(test_idle_reset_by_bytes)
{
	char body[IDLE_RESET_CHUNKS * 4 + 1];
	struct fake_reply script[] = {
		{ .body = body, .chunked = true, .chunk_size = 4,
		  .chunk_delay_ms = IDLE_RESET_GAP_MS * test_slow_factor() },
	};
	struct result r = { 0 };
	struct engine_call call = { .method = "GET", .path = "/x",
				    .idle_timeout_ms = 5L * IDLE_RESET_GAP_MS * test_slow_factor(),
				    .on_data = data_cb, .data_arg = &r };

	for (int i = 0; i < IDLE_RESET_CHUNKS; i++)
		memset(body + 4 * i, 'a' + i, 4);
	body[sizeof(body) - 1] = '\0';
	fake_engine_start(script, ELEMENTSOF(script));
	/* hang guard: the stream lasts IDLE_RESET_CHUNKS gaps */
	ck_assert_int_eq(start(&call, &r, NULL), 0);
	run_until(&r.calls, 1, RUN_MAX_MS + IDLE_RESET_CHUNKS * IDLE_RESET_GAP_MS);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_msg(r.error == 0, "error %d", r.error);
	ck_assert_str_eq(r.data, body);
	result_release(&r);
}
END_TEST

START_TEST(test_max_body)
{
	static const struct fake_reply script[] = {
		{ .path = "/exact", .body = "0123456789" },
		{ .path = "/over", .body = "0123456789A" },
		{ .path = "/chunked", .body = "0123456789A", .chunked = true, .chunk_size = 2 },
	};
	struct engine_call call = { .method = "GET", .path = "/exact", .timeout_ms = 5000, .max_body = 10 };
	struct result r1 = { 0 }, r2 = { 0 }, r3 = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r1, 0);
	ck_assert_str_eq(r1.body, "0123456789");
	call.path = "/over";
	run_call(&call, &r2, -EMSGSIZE);
	call.path = "/chunked";
	run_call(&call, &r3, -EMSGSIZE);
	result_release(&r1);
	result_release(&r2);
	result_release(&r3);
}
END_TEST

/* Nothing listens on the socket path → -ECONNREFUSED. */
START_TEST(test_engine_down)
{
	struct engine_call call = GET("/_ping");
	struct result r = { 0 };

	run_call(&call, &r, -ECONNREFUSED);
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.error_text, fake_engine_socket_path()) &&
		      strstr(r.error_text, "No such file or directory"), "%s", r.error_text);
	result_release(&r);
}
END_TEST

/* ---- cancellation and teardown -------------------------------------------------- */

START_TEST(test_cancel_before_connect)
{
	static const struct fake_reply script[] = { { .body = "{}" } };
	struct engine_call call = GET("/x");
	struct result r = { 0 };
	struct engine_req *req = NULL;

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&call, &r, &req), 0);
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(r.calls, 0);
	engine_req_cancel(req);
	ck_assert_int_eq(r.calls, 1);             /* synchronously */
	ck_assert_int_eq(r.error, -ECANCELED);
	run_for(100);
	ck_assert_int_eq(r.calls, 1);
	ck_assert(!r.fired_in_start);
	ck_assert_uint_eq(fake_engine_request_count(), 0);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	result_release(&r);
}
END_TEST

START_TEST(test_cancel_mid_reply)
{
	static const struct fake_reply script[] = {
		{ .body = "first chunk;", .chunked = true, .chunk_size = 64, .stall = true },
	};
	struct result r = { 0 };
	struct engine_call call = { .method = "GET", .path = "/logs", .on_data = data_cb, .data_arg = &r };
	struct engine_req *req = NULL;

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&call, &r, &req), 0);
	run_until(&r.chunks, 1, RUN_MAX_MS);
	ck_assert_int_eq(r.chunks, 1);
	ck_assert_int_eq(r.calls, 0);
	engine_req_cancel(req);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.error, -ECANCELED);
	ck_assert_int_eq(r.status, 200);
	run_for(100);
	ck_assert_int_eq(r.calls, 1);
	ck_assert(!r.fired_in_start);
	result_release(&r);
}
END_TEST

#define IN_FLIGHT 3

START_TEST(test_free_with_requests_in_flight)
{
	static const struct fake_reply script[] = { { .body = "{}", .delay_ms = 3000, .repeat = true } };
	struct engine_call call = GET("/slow");
	struct result r[IN_FLIGHT] = { { 0 } };

	fake_engine_start(script, ELEMENTSOF(script));
	for (int i = 0; i < IN_FLIGHT; i++)
		ck_assert_int_eq(start(&call, &r[i], NULL), 0);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), IN_FLIGHT);
	/* Connected and sent: the fake sits on them. */
	/* hang guard */
	LOOP_RUN_WHILE(base, fake_engine_request_count() < IN_FLIGHT, RUN_MAX_MS);
	ck_assert_uint_eq(fake_engine_request_count(), IN_FLIGHT);
	http = engine_http_free(http);
	ck_assert_ptr_null(http);
	for (int i = 0; i < IN_FLIGHT; i++) {
		ck_assert_int_eq(r[i].calls, 1);
		ck_assert_int_eq(r[i].error, -ECANCELED);
		ck_assert(!r[i].fired_in_start);
		result_release(&r[i]);
	}
	run_for(SETTLE_MS);
	for (int i = 0; i < IN_FLIGHT; i++)
		ck_assert_int_eq(r[i].calls, 1);
}
END_TEST

/* A callback may start a new request; it completes later, from the loop. */
START_TEST(test_start_from_callback)
{
	static const struct fake_reply script[] = {
		{ .path = "/first", .body = "1" }, { .path = "/second", .body = "2" },
	};
	struct engine_call second = GET("/second");
	struct result r2 = { 0 };
	struct result r1 = { .next_call = &second, .next_result = &r2 };
	struct engine_call first = GET("/first");

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&first, &r1, 0);
	ck_assert_int_eq(r1.next_start_ret, 0);
	run_until(&r2.calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r2.calls, 1);
	ck_assert(!r2.fired_in_start);
	ck_assert_int_eq(r2.error, 0);
	ck_assert_str_eq(r2.body, "2");
	ck_assert_uint_eq(engine_http_requests_started(http), 2);
	result_release(&r1);
	result_release(&r2);
}
END_TEST

/* A callback may cancel another request in flight. */
START_TEST(test_cancel_other_from_callback)
{
	static const struct fake_reply script[] = {
		{ .path = "/fast", .body = "f" }, { .path = "/slow", .body = "s", .delay_ms = 3000 },
	};
	struct engine_call fast = GET("/fast"), slow = GET("/slow");
	struct result rs = { 0 }, rf = { 0 };
	struct engine_req *slow_req = NULL;

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&slow, &rs, &slow_req), 0);
	rf.cancel_other = slow_req;
	run_call(&fast, &rf, 0);
	ck_assert_int_eq(rs.calls, 1);
	ck_assert_int_eq(rs.error, -ECANCELED);
	ck_assert(!rs.fired_in_start);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	result_release(&rs);
	result_release(&rf);
}
END_TEST

/* A callback may free the whole http object: the others are cancelled. */
START_TEST(test_free_from_callback)
{
	static const struct fake_reply script[] = {
		{ .path = "/fast", .body = "f" }, { .path = "/slow", .body = "s", .delay_ms = 3000, .repeat = true },
	};
	struct engine_call fast = GET("/fast"), slow = GET("/slow");
	struct result rs1 = { 0 }, rs2 = { 0 }, rf = { .free_http = true };

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&slow, &rs1, NULL), 0);
	ck_assert_int_eq(start(&slow, &rs2, NULL), 0);
	run_call(&fast, &rf, 0);
	ck_assert_ptr_null(http);
	ck_assert_int_eq(rs1.calls, 1);
	ck_assert_int_eq(rs1.error, -ECANCELED);
	ck_assert_int_eq(rs2.calls, 1);
	ck_assert_int_eq(rs2.error, -ECANCELED);
	result_release(&rs1);
	result_release(&rs2);
	result_release(&rf);
}
END_TEST

/* Two sequential requests share one kept-alive connection. */
START_TEST(test_keep_alive)
{
	static const struct fake_reply script[] = { { .body = "{}", .repeat = true } };
	struct engine_call call = GET("/v1.41/containers/json");
	struct result r1 = { 0 }, r2 = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r1, 0);
	run_call(&call, &r2, 0);
	ck_assert_uint_eq(fake_engine_request_count(), 2);
	ck_assert_uint_eq(fake_engine_connection_count(), 1);
	ck_assert_uint_eq(fake_engine_request(0)->conn, fake_engine_request(1)->conn);
	result_release(&r1);
	result_release(&r2);
}
END_TEST

/* "Connection: close" from the engine: the next request opens a new one. */
START_TEST(test_connection_close)
{
	static const struct fake_reply script[] = { { .body = "{}", .close = true, .repeat = true } };
	struct engine_call call = GET("/x");
	struct result r1 = { 0 }, r2 = { 0 };

	fake_engine_start(script, ELEMENTSOF(script));
	run_call(&call, &r1, 0);
	run_call(&call, &r2, 0);
	ck_assert_uint_eq(fake_engine_connection_count(), 2);
	result_release(&r1);
	result_release(&r2);
}
END_TEST

/* ---- refusals and counters ---------------------------------------------------- */

START_TEST(test_invalid_calls)
{
	static const char body[] = "x";
	static const struct engine_call rows[] = {
		{ .method = "PATCH", .path = "/x" },
		{ .method = NULL, .path = "/x" },
		{ .method = "GET", .path = "x" },
		{ .method = "GET", .path = NULL },
		{ .method = "GET", .path = "/a b" },
		{ .method = "GET", .path = "/a\r\nX-Injected: 1" },
		{ .method = "GET", .path = "/x", .body = body, .body_len = 1 },
		{ .method = "POST", .path = "/x", .body = NULL, .body_len = 1 },
		{ .method = "POST", .path = "/x", .content_type = "a\r\nb: c" },
	};
	struct result r = { 0 };

	for (size_t i = 0; i < ELEMENTSOF(rows); i++)
		ck_assert_msg(start(&rows[i], &r, NULL) == -EINVAL, "row %zu", i);
	ck_assert_int_eq(engine_req_start(http, &rows[0], NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(engine_req_start(NULL, &rows[0], done_cb, &r, NULL), -EINVAL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r.calls, 0);
	ck_assert_uint_eq(engine_http_requests_started(http), 0);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
}
END_TEST

START_TEST(test_counters)
{
	static const struct fake_reply script[] = { { .body = "{}", .delay_ms = 50, .repeat = true } };
	struct engine_call call = GET("/x");
	struct result r[2] = { { 0 } };

	fake_engine_start(script, ELEMENTSOF(script));
	ck_assert_int_eq(start(&call, &r[0], NULL), 0);
	ck_assert_int_eq(start(&call, &r[1], NULL), 0);
	ck_assert_uint_eq(engine_http_requests_started(http), 2);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 2);
	run_until(&r[1].calls, 1, RUN_MAX_MS);
	run_until(&r[0].calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r[0].calls, 1);
	ck_assert_int_eq(r[1].calls, 1);
	ck_assert_uint_eq(engine_http_requests_in_flight(http), 0);
	ck_assert_uint_eq(engine_http_requests_started(http), 2);
	ck_assert_uint_eq(engine_http_requests_started(NULL), 0);
	result_release(&r[0]);
	result_release(&r[1]);
}
END_TEST

START_TEST(test_free_null)
{
	ck_assert_ptr_null(engine_http_free(NULL));
	engine_req_cancel(NULL);
}
END_TEST

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *engine_req_suite(void)
{
	Suite *s = suite_create("engine_req");
	TCase *tc;

	tc = fixture_tcase("replies");
	tcase_add_test(tc, test_content_length);
	tcase_add_test(tc, test_chunked);
	tcase_add_test(tc, test_stream_on_data);
	tcase_add_test(tc, test_stream_abort);
	tcase_add_test(tc, test_stream_pause);
	tcase_add_loop_test(tc, test_stream_resume_abort, 0, 2);
	tcase_add_test(tc, test_stream_pause_longer_than_idle);
	tcase_add_test(tc, test_stream_idle_after_resume);
	tcase_add_test(tc, test_stream_pause_at_end);
	tcase_add_test(tc, test_stream_close_while_paused);
	tcase_add_loop_test(tc, test_stream_cancel_while_paused, 0, 2);
	tcase_add_test(tc, test_headers);
	tcase_add_test(tc, test_headers_final_only);
	tcase_add_test(tc, test_headers_too_big);
	tcase_add_test(tc, test_http_500);
	tcase_add_test(tc, test_post_body);
	tcase_add_test(tc, test_methods);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("failures");
	tcase_add_loop_test(tc, test_malformed, 0, (int)ELEMENTSOF(malformed_rows));
	tcase_add_test(tc, test_close_mid_body);
	tcase_add_test(tc, test_deadline);
	tcase_add_test(tc, test_idle_stream);
	tcase_add_test(tc, test_idle_reset_by_bytes);
	tcase_add_test(tc, test_max_body);
	tcase_add_test(tc, test_engine_down);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("cancel_and_teardown");
	tcase_add_test(tc, test_cancel_before_connect);
	tcase_add_test(tc, test_cancel_mid_reply);
	tcase_add_test(tc, test_free_with_requests_in_flight);
	tcase_add_test(tc, test_start_from_callback);
	tcase_add_test(tc, test_cancel_other_from_callback);
	tcase_add_test(tc, test_free_from_callback);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("connections");
	tcase_add_test(tc, test_keep_alive);
	tcase_add_test(tc, test_connection_close);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("refusals_and_counters");
	tcase_add_test(tc, test_invalid_calls);
	tcase_add_test(tc, test_counters);
	tcase_add_test(tc, test_free_null);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(engine_req_suite());
	int failed;

	fake_run_dir_create("check-engine-req");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
