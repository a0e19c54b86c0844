/* check_units.c — sizes and durations as text (proto/units.[ch]): the one
 * parser the daemon's configuration and the CLI share. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "cleanup.h"
#include "units.h"

#define SENTINEL UINT64_C(0x5a5a5a5a)

static const struct {
	const char *in;
	int rc;
	uint64_t want;
} size_rows[] = {
	{ "0", 0, 0 },
	{ "4096", 0, 4096 },
	{ "512B", 0, 512 },
	{ "512b", 0, 512 },
	{ "1K", 0, 1024 },
	{ "1k", 0, 1024 },
	{ "1KB", 0, 1024 },
	{ "1KiB", 0, 1024 },
	{ "1kib", 0, 1024 },
	{ "128M", 0, 128ULL << 20 },
	{ "128m", 0, 128ULL << 20 },
	{ "128MiB", 0, 128ULL << 20 },
	{ "1.5G", 0, 3ULL << 29 },
	{ "1.5g", 0, 3ULL << 29 },
	{ "2TiB", 0, 2ULL << 40 },
	{ "0.5K", 0, 512 },
	{ ".5K", 0, 512 },
	{ "1.3K", 0, 1331 },          /* the fraction of a byte is dropped */
	{ "1.", 0, 1 },
	{ "0.1", 0, 0 },
	{ "1.0000000000000000000001T", 0, 1ULL << 40 },  /* fraction digits past 19 dropped */
	/* The edges of uint64. */
	{ "18446744073709551615", 0, UINT64_MAX },
	{ "18446744073709551616", -ERANGE, 0 },
	{ "99999999999999999999999", -ERANGE, 0 },
	{ "16777215.999999T", 0, (16777215ULL << 40) + 1099510528264ULL },
	{ "16777216T", -ERANGE, 0 },
	{ "17179869184G", -ERANGE, 0 },
	{ "17179869183G", 0, 17179869183ULL << 30 },
	/* Junk. */
	{ "", -EINVAL, 0 },
	{ ".", -EINVAL, 0 },
	{ "K", -EINVAL, 0 },
	{ "-1", -EINVAL, 0 },
	{ "+1", -EINVAL, 0 },
	{ " 1", -EINVAL, 0 },
	{ "1 ", -EINVAL, 0 },
	{ "1 K", -EINVAL, 0 },
	{ "1e3", -EINVAL, 0 },
	{ "0x10", -EINVAL, 0 },
	{ "1Ki", -EINVAL, 0 },
	{ "1KBB", -EINVAL, 0 },
	{ "1P", -EINVAL, 0 },
	{ "1iB", -EINVAL, 0 },
	{ "1.2.3", -EINVAL, 0 },
	{ "12q", -EINVAL, 0 },
};

START_TEST(test_size)
{
	uint64_t v = SENTINEL;
	int rc = msb_size_parse(size_rows[_i].in, &v);

	ck_assert_msg(rc == size_rows[_i].rc, "\"%s\": rc %d, want %d", size_rows[_i].in, rc,
		      size_rows[_i].rc);
	if (rc == 0)
		ck_assert_msg(v == size_rows[_i].want, "\"%s\": %llu, want %llu", size_rows[_i].in,
			      (unsigned long long)v, (unsigned long long)size_rows[_i].want);
	else
		ck_assert_msg(v == SENTINEL, "\"%s\": refused, yet wrote %llu", size_rows[_i].in,
			      (unsigned long long)v);
}
END_TEST

static const struct {
	const char *in;
	enum msb_time_unit plain, out;
	int rc;
	uint64_t want;
} duration_rows[] = {
	{ "250", MSB_TIME_MS, MSB_TIME_MS, 0, 250 },
	{ "0", MSB_TIME_MS, MSB_TIME_MS, 0, 0 },
	{ "1.5s", MSB_TIME_MS, MSB_TIME_MS, 0, 1500 },
	{ "500ms", MSB_TIME_MS, MSB_TIME_MS, 0, 500 },
	{ "15m", MSB_TIME_MS, MSB_TIME_MS, 0, 900000 },
	{ "24h", MSB_TIME_MS, MSB_TIME_MS, 0, 86400000 },
	{ "7d", MSB_TIME_MS, MSB_TIME_MS, 0, 604800000 },
	{ "1.5", MSB_TIME_MS, MSB_TIME_MS, -EDOM, 0 },      /* 1.5 ms */
	{ "0.0015s", MSB_TIME_MS, MSB_TIME_MS, -EDOM, 0 },
	{ "90", MSB_TIME_S, MSB_TIME_S, 0, 90 },
	{ "1.5h", MSB_TIME_S, MSB_TIME_S, 0, 5400 },
	{ "24h", MSB_TIME_S, MSB_TIME_S, 0, 86400 },
	{ "2000ms", MSB_TIME_S, MSB_TIME_S, 0, 2 },
	{ "1500ms", MSB_TIME_S, MSB_TIME_S, -EDOM, 0 },
	{ "1.5", MSB_TIME_S, MSB_TIME_S, -EDOM, 0 },
	{ "1.5", MSB_TIME_S, MSB_TIME_MS, 0, 1500 },        /* the CLI's --timeout */
	{ "0.0005", MSB_TIME_S, MSB_TIME_MS, -EDOM, 0 },
	/* The edges of uint64. */
	{ "18446744073709551615", MSB_TIME_MS, MSB_TIME_MS, 0, UINT64_MAX },
	{ "18446744073709551616", MSB_TIME_MS, MSB_TIME_MS, -ERANGE, 0 },
	{ "18446744073709551615", MSB_TIME_S, MSB_TIME_MS, -ERANGE, 0 },
	{ "18446744073709551s", MSB_TIME_MS, MSB_TIME_MS, 0, 18446744073709551000ULL },
	{ "18446744073709552s", MSB_TIME_MS, MSB_TIME_MS, -ERANGE, 0 },
	{ "213503982334d", MSB_TIME_MS, MSB_TIME_MS, 0, 213503982334ULL * 86400000 },
	{ "213503982335d", MSB_TIME_MS, MSB_TIME_MS, -ERANGE, 0 },
	/* Junk. */
	{ "", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "s", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "-1", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1 s", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1S", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1M", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1w", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1hm", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1h30m", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
	{ "1e3", MSB_TIME_MS, MSB_TIME_MS, -EINVAL, 0 },
};

START_TEST(test_duration)
{
	uint64_t v = SENTINEL;
	int rc = msb_duration_parse(duration_rows[_i].in, duration_rows[_i].plain, duration_rows[_i].out, &v);

	ck_assert_msg(rc == duration_rows[_i].rc, "\"%s\": rc %d, want %d", duration_rows[_i].in, rc,
		      duration_rows[_i].rc);
	if (rc == 0)
		ck_assert_msg(v == duration_rows[_i].want, "\"%s\": %llu, want %llu", duration_rows[_i].in,
			      (unsigned long long)v, (unsigned long long)duration_rows[_i].want);
	else
		ck_assert_msg(v == SENTINEL, "\"%s\": refused, yet wrote %llu", duration_rows[_i].in,
			      (unsigned long long)v);
}
END_TEST

START_TEST(test_null)
{
	uint64_t v = SENTINEL;

	ck_assert_int_eq(msb_size_parse(NULL, &v), -EINVAL);
	ck_assert_int_eq(msb_duration_parse(NULL, MSB_TIME_S, MSB_TIME_S, &v), -EINVAL);
	ck_assert(v == SENTINEL);
}
END_TEST

static Suite *units_suite(void)
{
	Suite *s = suite_create("units");
	TCase *tc;

	tc = tcase_create("sizes");
	tcase_add_loop_test(tc, test_size, 0, ELEMENTSOF(size_rows));
	suite_add_tcase(s, tc);
	tc = tcase_create("durations");
	tcase_add_loop_test(tc, test_duration, 0, ELEMENTSOF(duration_rows));
	tcase_add_test(tc, test_null);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(units_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
