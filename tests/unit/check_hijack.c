/* check_hijack.c — the hijacked start (engine/hijack.c): its
 * response head parser, and one hijack end to end against a scripted
 * engine on a unix socket (the request it sends, the 101, the stream both
 * ways, the write side's shutdown as the end of stdin, a refusal's body). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "endpoint.h"
#include "hijack.h"

#define HEAD_OF(s) ((const uint8_t *)(s)), (sizeof(s) - 1)

START_TEST(an_upgrade_is_parsed)
{
	struct engine_hijack_head h;
	static const char in[] = "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
				 "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n\x01\x00\x00\x00";

	ck_assert_int_eq(engine_hijack_parse_head(HEAD_OF(in), &h), 1);
	ck_assert_int_eq(h.status, 101);
	ck_assert(h.upgraded);
	ck_assert_int_eq(h.content_length, -1);
	ck_assert_uint_eq(h.len, sizeof(in) - 1 - 4);
}
END_TEST

START_TEST(a_refusal_keeps_its_length)
{
	struct engine_hijack_head h;

	ck_assert_int_eq(engine_hijack_parse_head(HEAD_OF("HTTP/1.1 404 Not Found\r\nContent-Length:  27 \r\n\r\n"),
						  &h), 1);
	ck_assert_int_eq(h.status, 404);
	ck_assert(!h.upgraded);
	ck_assert_int_eq(h.content_length, 27);
	/* 200 (an engine that hijacks without 101) streams too. */
	ck_assert_int_eq(engine_hijack_parse_head(HEAD_OF("HTTP/1.0 200 OK\r\n\r\n"), &h), 1);
	ck_assert(h.upgraded);
}
END_TEST

START_TEST(incomplete_heads_wait)
{
	struct engine_hijack_head h;
	static const char in[] = "HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\n\r\n";

	for (size_t k = 0; k < sizeof(in) - 1; k++)
		ck_assert_msg(engine_hijack_parse_head((const uint8_t *)in, k, &h) == 0, "prefix %zu", k);
}
END_TEST

START_TEST(malformed_heads_are_refused)
{
	static const char *const bad[] = {
		"HTTP/2 101 X\r\n\r\n",
		"HTTP/1.1 01 X\r\n\r\n",
		"HTTP/1.1 099 X\r\n\r\n",
		"HTTP/1.1 1011 X\r\n\r\n",
		"ICY 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\nX: y\r\n\r\n",           /* a bare LF */
		"HTTP/1.1 200 OK\r\nX y\r\n\r\n",           /* no colon */
		"HTTP/1.1 200 OK\r\nX : y\r\n\r\n",         /* a space before it */
		"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
	};
	struct engine_hijack_head h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(engine_hijack_parse_head((const uint8_t *)bad[i], strlen(bad[i]), &h) == -EPROTO,
			      "accepted: %s", bad[i]);
	/* The same length twice is one length. */
	ck_assert_int_eq(engine_hijack_parse_head(HEAD_OF("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
							  "content-length: 2\r\n\r\n"), &h), 1);
}
END_TEST

START_TEST(a_head_past_its_bound_is_refused)
{
	size_t n = ENGINE_HIJACK_MAX_HEAD_BYTES + 10;
	uint8_t *in = malloc(n);
	struct engine_hijack_head h;

	memcpy(in, "HTTP/1.1 101 X\r\nX-Pad: ", 23);
	memset(in + 23, 'a', n - 23);
	ck_assert_int_eq(engine_hijack_parse_head(in, ENGINE_HIJACK_MAX_HEAD_BYTES - 1, &h), 0);
	ck_assert_int_eq(engine_hijack_parse_head(in, n, &h), -EMSGSIZE);
	free(in);
}
END_TEST

/* ---- end to end ------------------------------------------------------------ */

struct fake {
	int listen_fd;
	char path[108];
	const char *reply;         /* sent after the request */
	bool echo;                 /* then echo what comes, as stdout frames, until EOF */
	bool hold;                 /* then read (and drop) until EOF: never answer more */
	char request[4096];        /* what it read up to the blank line and body */
	size_t request_len;
	bool saw_eof;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->listen_fd, NULL, NULL);
	char buf[4096];
	ssize_t n = -1;

	if (fd < 0)
		return NULL;
	/* The request: its head, then its body (Content-Length, small). */
	while (f->request_len < sizeof(f->request) - 1 && !strstr(f->request, "}")) {
		n = read(fd, f->request + f->request_len, sizeof(f->request) - 1 - f->request_len);
		if (n <= 0)
			break;
		f->request_len += (size_t)n;
		f->request[f->request_len] = '\0';
	}
	if (send(fd, f->reply, strlen(f->reply), MSG_NOSIGNAL) < 0)
		return NULL;
	while (f->hold && read(fd, buf, sizeof(buf)) > 0)
		;
	while (f->echo && (n = read(fd, buf, sizeof(buf))) > 0) {
		uint8_t hdr[8] = { 1, 0, 0, 0, 0, 0, (uint8_t)(n >> 8), (uint8_t)n };

		if (send(fd, hdr, 8, MSG_NOSIGNAL) < 0 || send(fd, buf, (size_t)n, MSG_NOSIGNAL) < 0)
			break;
	}
	f->saw_eof = f->echo && n == 0;
	close(fd);
	return NULL;
}

struct outcome {
	struct event_base *base;
	int done_calls, write_calls;
	bool write_before_done;
	char data[4096];
	size_t data_len;
	int error, write_error;
	long status;
	char body[256];
	size_t written;
	bool done, wrote;
};

static int data_cb(const void *data, size_t len, void *arg)
{
	struct outcome *o = arg;

	ck_assert(o->data_len + len < sizeof(o->data));
	memcpy(o->data + o->data_len, data, len);
	o->data_len += len;
	return 0;
}

static void done_cb(int error, long status, const char *body, size_t body_len, void *arg)
{
	struct outcome *o = arg;

	o->done_calls++;
	o->done = true;
	o->error = error;
	o->status = status;
	snprintf(o->body, sizeof(o->body), "%.*s", (int)body_len, body);
	event_base_loopbreak(o->base);
}

static void write_cb(int error, size_t written, void *arg)
{
	struct outcome *o = arg;

	o->write_calls++;
	o->write_before_done = !o->done;
	o->wrote = true;
	o->write_error = error;
	o->written = written;
}

static void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(f->path, sizeof(f->path), "/tmp/msb-hijack-%d.sock", (int)getpid());
	unlink(f->path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(f->listen_fd, 0);
	ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->listen_fd, 1), 0);
}

static void run_hijack(struct fake *f, struct outcome *o, const char *stdin_data)
{
	struct engine_endpoint ep = { .kind = ENGINE_ENDPOINT_UNIX, .unix_path = f->path,
				      .base_url = (char *)"http://api.moby.localhost" };
	struct engine_hijack_set set = { 0 };
	struct engine_hijack *h = NULL;
	pthread_t t;

	o->base = event_base_new();
	ck_assert_int_eq(pthread_create(&t, NULL, fake_main, f), 0);
	ck_assert_int_eq(engine_hijack_start(o->base, &ep, &set, "/v1.41/exec/abc/start", "{\"Detach\":false}",
					     data_cb, done_cb, o, &h), 0);
	if (stdin_data)
		ck_assert_int_eq(engine_hijack_write(h, stdin_data, strlen(stdin_data), true, write_cb, o), 0);
	event_base_dispatch(o->base);
	ck_assert(o->done);
	pthread_join(t, NULL);
	ck_assert(LIST_EMPTY(&set.list));
	event_base_free(o->base);
	close(f->listen_fd);
	unlink(f->path);
}

START_TEST(stdin_goes_through_and_its_end_is_a_half_close)
{
	struct fake f = { .reply = "HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\n\r\n", .echo = true };
	struct outcome o = { 0 };

	fake_listen(&f);
	run_hijack(&f, &o, "hello stdin");
	ck_assert_msg(strstr(f.request, "POST /v1.41/exec/abc/start HTTP/1.1\r\n"), "request: %s", f.request);
	ck_assert_msg(strstr(f.request, "\r\nConnection: Upgrade\r\n") && strstr(f.request, "\r\nUpgrade: tcp\r\n"),
		      "no upgrade headers: %s", f.request);
	ck_assert_msg(strstr(f.request, "\r\n\r\n{\"Detach\":false}"), "body: %s", f.request);
	ck_assert(o.wrote);
	ck_assert_int_eq(o.write_error, 0);
	ck_assert_uint_eq(o.written, 11);
	ck_assert(f.saw_eof);   /* shutdown(SHUT_WR) after the bytes */
	ck_assert_int_eq(o.done_calls, 1);
	ck_assert_int_eq(o.write_calls, 1);
	ck_assert_int_eq(o.error, 0);
	ck_assert_int_eq(o.status, 101);
	ck_assert_uint_eq(o.data_len, 8 + 11);
	ck_assert(memcmp(o.data + 8, "hello stdin", 11) == 0);
}
END_TEST

START_TEST(a_refusal_ends_with_its_body_and_no_write)
{
	struct fake f = { .reply = "HTTP/1.1 409 Conflict\r\nContent-Length: 24\r\n\r\n{\"message\":\"is paused\"}\n" };
	struct outcome o = { 0 };

	fake_listen(&f);
	run_hijack(&f, &o, "never sent");
	ck_assert_int_eq(o.error, 0);
	ck_assert_int_eq(o.status, 409);
	ck_assert_str_eq(o.body, "{\"message\":\"is paused\"}\n");
	ck_assert(o.wrote);
	ck_assert_int_eq(o.write_error, -EAGAIN);   /* nothing went: a retried start takes it */
	ck_assert_uint_eq(o.written, 0);
	ck_assert_uint_eq(o.data_len, 0);
}
END_TEST

/* Cancelled while the engine has not answered: the write's callback, then
 * done, each once, with -ECANCELED, from inside the cancel. */
START_TEST(a_cancel_ends_the_write_then_the_hijack_once)
{
	struct fake f = { .reply = "", .hold = true };
	struct engine_endpoint ep = { .kind = ENGINE_ENDPOINT_UNIX, .unix_path = f.path,
				      .base_url = (char *)"http://api.moby.localhost" };
	struct engine_hijack_set set = { 0 };
	struct engine_hijack *h = NULL;
	struct outcome o = { 0 };
	pthread_t t;

	fake_listen(&f);
	o.base = event_base_new();
	ck_assert_int_eq(pthread_create(&t, NULL, fake_main, &f), 0);
	ck_assert_int_eq(engine_hijack_start(o.base, &ep, &set, "/v1.41/exec/abc/start", "{}", data_cb, done_cb,
					     &o, &h), 0);
	ck_assert_int_eq(engine_hijack_write(h, "x", 1, true, write_cb, &o), 0);
	ck_assert_int_eq(engine_hijack_write(h, "y", 1, true, write_cb, &o), -EBUSY);   /* one at a time */
	event_base_loop(o.base, EVLOOP_NONBLOCK);
	ck_assert_int_eq(o.done_calls, 0);
	engine_hijack_set_cancel_all(&set);
	ck_assert_int_eq(o.write_calls, 1);
	ck_assert(o.write_before_done);
	ck_assert_int_eq(o.write_error, -ECANCELED);
	ck_assert_uint_eq(o.written, 0);
	ck_assert_int_eq(o.done_calls, 1);
	ck_assert_int_eq(o.error, -ECANCELED);
	ck_assert(LIST_EMPTY(&set.list));
	event_base_dispatch(o.base);   /* nothing left to fire */
	ck_assert_int_eq(o.done_calls, 1);
	pthread_join(t, NULL);
	event_base_free(o.base);
	close(f.listen_fd);
	unlink(f.path);
}
END_TEST

START_TEST(tls_is_refused)
{
	struct engine_endpoint ep = { .kind = ENGINE_ENDPOINT_TCP, .tls = true,
				      .base_url = (char *)"https://127.0.0.1:1" };
	struct engine_hijack_set set = { 0 };
	struct event_base *base = event_base_new();
	struct outcome o = { 0 };

	ck_assert_int_eq(engine_hijack_start(base, &ep, &set, "/x", "{}", data_cb, done_cb, &o, NULL),
			 -EPROTONOSUPPORT);
	event_base_free(base);
}
END_TEST

static Suite *hijack_suite(void)
{
	Suite *s = suite_create("hijack");
	TCase *tc = tcase_create("head");

	tcase_add_test(tc, an_upgrade_is_parsed);
	tcase_add_test(tc, a_refusal_keeps_its_length);
	tcase_add_test(tc, incomplete_heads_wait);
	tcase_add_test(tc, malformed_heads_are_refused);
	tcase_add_test(tc, a_head_past_its_bound_is_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("stream");
	tcase_add_test(tc, stdin_goes_through_and_its_end_is_a_half_close);
	tcase_add_test(tc, a_refusal_ends_with_its_body_and_no_write);
	tcase_add_test(tc, a_cancel_ends_the_write_then_the_hijack_once);
	tcase_add_test(tc, tls_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hijack_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
