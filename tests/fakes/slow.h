/* slow.h — unit tests under valgrind.
 *
 * `meson test --setup valgrind` sets MSB_TEST_SLOW=1: code runs 20-50 times
 * slower there, so a test that asserts what happens inside a wall-clock
 * window (a count of retries in 400 ms, a 150 ms idle deadline racing a
 * fake's chunks) cannot hold. Such a test says SKIP_WHEN_SLOW() first and
 * runs in the plain and ASan builds only; every other test runs under
 * valgrind too, with its waits stretched by test_slow_factor().
 *
 * MSB_TEST_NO_WINDOWS=1 skips those same tests and stretches nothing: the
 * Debian package build sets it (debian/rules), since it runs on builders
 * whose load no one controls, where a wall-clock window cannot hold. */
#ifndef MSB_TEST_SLOW_H
#define MSB_TEST_SLOW_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Tests that assert a wall-clock window are skipped (MSB_TEST_SLOW or
 * MSB_TEST_NO_WINDOWS). */
static inline bool test_skips_windows(void)
{
	const char *s = getenv("MSB_TEST_NO_WINDOWS");

	return test_is_slow() || (s && *s && strcmp(s, "0") != 0);
}

#define SKIP_WHEN_SLOW()                                                                           \
	do {                                                                                       \
		if (test_skips_windows()) {                                                        \
			fprintf(stderr, "%s: skipped under MSB_TEST_SLOW or MSB_TEST_NO_WINDOWS "  \
				"(asserts a wall-clock window)\n", __func__);                     \
			return;                                                                    \
		}                                                                                  \
	} while (0)

#endif
