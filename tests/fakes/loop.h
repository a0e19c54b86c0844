/* loop.h — driving a libevent loop from a unit test. */
#ifndef MSB_TEST_LOOP_H
#define MSB_TEST_LOOP_H

#include <event2/event.h>

/* CLOCK_MONOTONIC in milliseconds. */
long loop_now_ms(void);
/* Runs base until *counter reaches want (counter NULL: never) or max_ms
 * pass; a 5 ms tick keeps the loop turning when nothing else is pending. */
void loop_run_until(struct event_base *base, const int *counter, int want, int max_ms);

#endif
