#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "loop.h"
#include "slow.h"
#include "xmalloc.h"

long loop_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
}

void loop_run_until(struct event_base *base, const int *counter, int want, int max_ms)
{
	struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
	struct timeval tv = { 0, 5000 };
	/* A wait for a counter is a hang guard: stretched under valgrind. */
	long deadline = loop_now_ms() + (long)max_ms * (counter ? test_slow_factor() : 1);

	ck_assert_ptr_nonnull(tick);
	ck_assert_int_eq(event_add(tick, &tv), 0);
	while ((!counter || *counter < want) && loop_now_ms() < deadline)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(tick);
}

static void loop_state_cb(struct engine *e, enum engine_state old_state, enum engine_state new_state,
			  void *arg)
{
	int *reachable = arg;

	(void)e, (void)old_state;
	*reachable += new_state == ENGINE_REACHABLE;
}

struct engine *loop_engine_new(struct event_base *base, const struct engine_options *opts, int *reachable)
{
	_cleanup_free_ char *host = xasprintf("unix://%s", fake_engine_socket_path());
	_cleanup_free_ char *err = NULL;
	struct engine_endpoint *ep = NULL;
	struct engine *e;

	ck_assert_int_eq(engine_endpoint_from_host(host, "test", &ep, &err), 0);
	e = engine_new(base, ep, opts, loop_state_cb, reachable);
	ck_assert_ptr_nonnull(e);
	return e;
}

void loop_engine_start_reachable(struct event_base *base, struct engine *e, int *reachable,
				 const struct fake_reply *script, size_t n, int max_ms)
{
	int want = *reachable + 1;

	fake_engine_start(script, n);
	engine_start(e);
	loop_run_until(base, reachable, want, max_ms);
	ck_assert_int_eq(engine_get_state(e), ENGINE_REACHABLE);
}

/* ---- the log: stderr goes to a file for the test's length ------------------------- */

static int saved_stderr = -1;
static char log_path[4096];

void loop_log_capture_start(void)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	int fd;

	snprintf(log_path, sizeof(log_path), "%s/test-log-XXXXXX", dir);
	fd = mkstemp(log_path);
	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	ck_assert_int_ge(saved_stderr, 0);
	ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
	close(fd);
}

void loop_log_capture_stop(void)
{
	if (saved_stderr < 0)
		return;
	fflush(stderr);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	saved_stderr = -1;
	unlink(log_path);
}

const char *loop_logged(void)
{
	static char buf[LOOP_LOG_MAX];
	_cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	fflush(stderr);
	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	return buf;
}
