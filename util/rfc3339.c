/* rfc3339.c — RFC 3339 timestamps (the engine's Created, event and log
 * times, the archive stat's mtime): parse, compare, format. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "rfc3339.h"

#define RFC3339_SECONDS_PER_DAY 86400

int rfc3339_cmp(const struct rfc3339_time *a, const struct rfc3339_time *b)
{
	if (a->s != b->s)
		return a->s < b->s ? -1 : 1;
	if (a->ns != b->ns)
		return a->ns < b->ns ? -1 : 1;
	return 0;
}

/* Exactly n decimal digits at s; their value in *ret. */
static bool digits(const char *s, int n, int *ret)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*ret = v;
	return true;
}

static bool year_is_leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int y, int m)
{
	static const int days[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

	return m == 2 && year_is_leap(y) ? 29 : days[m - 1];
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
 * (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* ".d{1,9}" at *p, if any: nanoseconds in *ns, *p moved past it. */
static bool parse_fraction(const char **p, int32_t *ns)
{
	const char *s = *p;
	int n = 0;
	int32_t v = 0;

	*ns = 0;
	if (*s != '.')
		return true;
	for (s++; *s >= '0' && *s <= '9'; s++, n++) {
		if (n == 9)
			return false;
		v = v * 10 + (*s - '0');
	}
	if (n == 0)
		return false;
	for (int i = n; i < 9; i++)
		v *= 10;
	*ns = v;
	*p = s;
	return true;
}

/* "Z" or "±hh:mm", the whole rest of the string: the zone's offset east of
 * UTC in seconds. */
static bool parse_zone(const char *s, int *ret_offset)
{
	int hh, mm;

	if ((s[0] == 'Z' || s[0] == 'z') && s[1] == '\0') {
		*ret_offset = 0;
		return true;
	}
	if ((s[0] != '+' && s[0] != '-') || !digits(s + 1, 2, &hh) || s[3] != ':' ||
	    !digits(s + 4, 2, &mm) || s[6] != '\0' || hh > 23 || mm > 59)
		return false;
	*ret_offset = (s[0] == '-' ? -1 : 1) * (hh * 3600 + mm * 60);
	return true;
}

int rfc3339_parse(const char *s, struct rfc3339_time *ret_t)
{
	int y, mo, d, h, mi, sec, offset;
	int32_t ns;
	const char *p;

	if (!s || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
	    !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) ||
	    s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &sec))
		return -EINVAL;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > month_days(y, mo) || h > 23 || mi > 59 ||
	    sec > 59)
		return -EINVAL;
	p = s + 19;
	if (!parse_fraction(&p, &ns) || !parse_zone(p, &offset))
		return -EINVAL;
	ret_t->s = days_from_civil(y, mo, d) * RFC3339_SECONDS_PER_DAY + h * 3600 + mi * 60 + sec - offset;
	ret_t->ns = ns;
	return 0;
}

void rfc3339_format(const struct rfc3339_time *t, char *buf, size_t size)
{
	time_t secs = (time_t)t->s;
	struct tm tm;
	size_t n;

	if (!gmtime_r(&secs, &tm)) {
		snprintf(buf, size, "%lld", (long long)t->s);
		return;
	}
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (t->ns)
		snprintf(buf + n, size - n, ".%09dZ", (int)t->ns);
	else
		snprintf(buf + n, size - n, "Z");
}

