/* check_server.c — the server's connection life cycle on a real socket, no
 * engine: a connection closed inside its own call's dispatch. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "daemon.h"
#include "server.h"
#include "slow.h"

#define WAIT_MS (10000 * test_slow_factor())   /* hang guard */

static char dir[64];
static struct msbd d;

static void setup(void)
{
	char path[128], *err = NULL;
	struct server_env env;

	snprintf(dir, sizeof(dir), "/tmp/check_server.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/sock", dir);
	d = (struct msbd){ .dom = { .base = event_base_new(), .config = config_new_defaults() } };
	ck_assert_ptr_nonnull(d.dom.base);
	ck_assert_int_eq(config_set(d.dom.config, "socket.path", path, &err), 0);
	ck_assert_int_eq(config_set(d.dom.config, "socket.group", "nogroup", &err), 0);
	ck_assert_int_eq(config_set(d.dom.config, "events.max_backlog_bytes", "4096", &err), 0);
	msbd_server_env(&d, &env);
	d.server = server_new(&env);
	msbd_wire_domain(&d);
	ck_assert_msg(server_listen(d.server, &err) == 0, "listen: %s", err ? err : "?");
}

static void teardown(void)
{
	d.server = server_free(d.server);
	d.dom.config = config_free(d.dom.config);
	event_base_free(d.dom.base);
	rmdir(dir);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int client(const char *frame)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", d.dom.config->socket_path);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ck_assert_int_eq(send(fd, frame, strlen(frame), MSG_NOSIGNAL), (ssize_t)strlen(frame));
	return fd;
}

/* Runs the loop until fd has a whole line (returned, malloc'd) or EOF
 * (NULL); *ret_bytes: what was received. */
static char *run_until_line_or_eof(int fd, size_t *ret_bytes)
{
	long deadline = now_ms() + WAIT_MS;
	size_t len = 0, cap = 1 << 20;
	char *buf = malloc(cap);

	for (;;) {
		ssize_t n;

		ck_assert_msg(now_ms() < deadline, "no reply and no EOF in %d ms", WAIT_MS);
		event_base_loop(d.dom.base, EVLOOP_NONBLOCK);
		n = recv(fd, buf + len, cap - len - 1, MSG_DONTWAIT);
		if (n == 0)
			break;
		if (n < 0) {
			ck_assert_int_eq(errno, EAGAIN);
			poll(NULL, 0, 5);
			continue;
		}
		len += (size_t)n;
		buf[len] = '\0';
		if (memchr(buf, '\n', len))
			break;
	}
	*ret_bytes = len;
	if (!memchr(buf, '\n', len)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Runs the loop until the daemon closes fd; returns what was received if
 * it holds a reply (an "id"), else NULL. */
static char *run_until_eof(int fd, size_t *ret_bytes)
{
	long deadline = now_ms() + WAIT_MS;
	size_t len = 0, cap = 1 << 20;
	char *buf = malloc(cap);

	for (;;) {
		ssize_t n;

		ck_assert_msg(now_ms() < deadline, "no EOF in %d ms", WAIT_MS);
		event_base_loop(d.dom.base, EVLOOP_NONBLOCK);
		n = recv(fd, buf + len, cap - len - 1, MSG_DONTWAIT);
		if (n == 0)
			break;
		if (n < 0) {
			ck_assert_int_eq(errno, EAGAIN);
			poll(NULL, 0, 5);
			continue;
		}
		len += (size_t)n;
		ck_assert_uint_lt(len, cap - 1);
	}
	buf[len] = '\0';
	*ret_bytes = len;
	if (strstr(buf, "\"id\""))
		return buf;
	free(buf);
	return NULL;
}

#define SUBSCRIBE(replay) "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"events.subscribe\"," \
	"\"params\":{\"types\":[\"egress.decision\"],\"replay\":" replay "}}\n"

/* A replay past events.max_backlog_bytes closes the connection inside
 * events.subscribe's dispatch, then the call fails: the daemon lives on
 * (it asserted on the closed connection's in-flight count) and serves the
 * next connection. */
START_TEST(closed_inside_its_dispatch)
{
	char big[3000];
	json_t *params;
	size_t got = 0;
	char *line;
	int fd;

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	params = json_pack("{s:s}", "pad", big);
	for (int i = 0; i < 4; i++)
		server_publish(d.server, SERVER_EVENT_EGRESS_DECISION, getuid(), NULL, "events.event", params);
	json_decref(params);

	fd = client(SUBSCRIBE("true"));
	/* An event or two may arrive before the close; never a reply. */
	ck_assert_ptr_null(run_until_eof(fd, &got));
	close(fd);
	ck_assert_uint_eq(server_get_stats(d.server)->requests_in_flight, 0);

	fd = client(SUBSCRIBE("false"));
	line = run_until_line_or_eof(fd, &got);
	ck_assert_msg(line && strstr(line, "\"result\""), "no result on the next connection: %s",
		      line ? line : "(EOF)");
	free(line);
	close(fd);
}
END_TEST

static Suite *server_suite(void)
{
	Suite *s = suite_create("server");
	TCase *tc = tcase_create("close");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, closed_inside_its_dispatch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(server_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
