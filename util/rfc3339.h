/* rfc3339.h — RFC 3339 timestamps, as the Docker engine writes them. */
#ifndef MSB_RFC3339_H
#define MSB_RFC3339_H

#include <stddef.h>
#include <stdint.h>

/* A point in time: seconds since the epoch (UTC) and 0 <= ns < 1e9. */
struct rfc3339_time {
	int64_t s;
	int32_t ns;
};

/* <0, 0, >0. */
int rfc3339_cmp(const struct rfc3339_time *a, const struct rfc3339_time *b);
/* YYYY-MM-DDTHH:MM:SS[.1-9 digits](Z|±hh:mm) ('t' and 'z' accepted too).
 * 0, or -EINVAL (a missing zone included); *ret_t written only on success. */
int rfc3339_parse(const char *s, struct rfc3339_time *ret_t);
/* UTC, seconds (and nanoseconds when there are any), into buf. */
void rfc3339_format(const struct rfc3339_time *t, char *buf, size_t size);

#endif
