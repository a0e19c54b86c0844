/* slow.h — unit tests under valgrind.
 *
 * `meson test --setup valgrind` sets MSB_TEST_SLOW=1: code runs 20-50 times
 * slower there. No test asserts what happens inside a wall-clock window:
 * tests observe states and counters (requests at the fake engine, the
 * fake seeing a client go, error codes, the order of events). What time
 * bounds remain are hang guards (a test that would otherwise wait for ever
 * ends, failing), and margins a deadline under test must leave for a step
 * to be reached first; both are stretched by test_slow_factor() here, and
 * each carries the words `hang guard` in a comment on its line or the line
 * above. A lower bound that is the behaviour (a deadline not fired early)
 * says `not early` instead, and is never stretched. Every test runs in
 * every lane: plain, ASan, valgrind, the Debian package build. */
#ifndef MSB_TEST_SLOW_H
#define MSB_TEST_SLOW_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* How early a libevent timer may fire, as a test's CLOCK_MONOTONIC sees
 * it: libevent runs its timers on CLOCK_MONOTONIC_COARSE, which a tickless
 * kernel can leave some ms stale when the loop wakes (seen 10 ms). A `not
 * early` bound on a timer of the code under test allows this much. */
#define TEST_TIMER_SLACK_MS 20

/* How much longer a wait for a peer may take under MSB_TEST_SLOW. */
#define TEST_SLOW_FACTOR 20

static inline bool test_is_slow(void)
{
	const char *s = getenv("MSB_TEST_SLOW");

	return s && *s && strcmp(s, "0") != 0;
}

static inline int test_slow_factor(void)
{
	return test_is_slow() ? TEST_SLOW_FACTOR : 1;
}

#endif
