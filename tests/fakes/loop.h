/* loop.h — driving a libevent loop from a unit test. */
#ifndef MSB_TEST_LOOP_H
#define MSB_TEST_LOOP_H

#include <stddef.h>
#include <event2/event.h>

#include "engine.h"
#include "fake_engine.h"
#include "slow.h"

/* CLOCK_MONOTONIC in milliseconds. */
long loop_now_ms(void);
/* Runs base until *counter reaches want (counter NULL: never) or max_ms
 * pass (with a counter, max_ms * test_slow_factor(): slow.h); a 5 ms tick
 * keeps the loop turning when nothing else is pending. */
void loop_run_until(struct event_base *base, const int *counter, int want, int max_ms);
/* Runs base while cond holds, at most max_ms * test_slow_factor(): a
 * hang guard, never the behaviour (the caller asserts what cond waited for). */
#define LOOP_RUN_WHILE(base, cond, max_ms)                                                          \
	for (long loop_end_ = loop_now_ms() + (long)(max_ms) * test_slow_factor();                 \
	     (cond) && loop_now_ms() < loop_end_;)                                                  \
		loop_run_until((base), NULL, 0, 5)

/* An engine on base, pointed at the fake engine's socket (not started);
 * each move to ENGINE_REACHABLE increments *reachable. */
struct engine *loop_engine_new(struct event_base *base, const struct engine_options *opts, int *reachable);
/* Serves script[0..n) on the fake, starts e, and runs base until *reachable
 * has grown by one and e is ENGINE_REACHABLE (at most max_ms). */
void loop_engine_start_reachable(struct event_base *base, struct engine *e, int *reachable,
				 const struct fake_reply *script, size_t n, int max_ms);

/* stderr (the daemon's log) goes to a temp file from start to stop, so a
 * test can read what was logged (loop_logged: a static buffer of at most
 * LOOP_LOG_MAX - 1 bytes). */
#define LOOP_LOG_MAX (64 * 1024)
void loop_log_capture_start(void);
void loop_log_capture_stop(void);
const char *loop_logged(void);

#endif
