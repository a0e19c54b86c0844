#include <check.h>
#include <time.h>

#include "loop.h"

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
	long deadline = loop_now_ms() + max_ms;

	ck_assert_ptr_nonnull(tick);
	ck_assert_int_eq(event_add(tick, &tv), 0);
	while ((!counter || *counter < want) && loop_now_ms() < deadline)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(tick);
}
