/* units.h — sizes and durations written as text: one parser for the
 * daemon's configuration (every size key, every *_ms and *_s key) and the
 * CLI's options (--max-bytes, --older-than, --timeout). The wire itself
 * carries plain integers (PROTOCOL.md, "Sizes and durations as text").
 *
 * A size is a decimal number of bytes, with an optional fraction, and an
 * optional unit right after it (no space): B, or K, M, G, T, each alone or
 * followed by B or iB ("K", "KB", "KiB"). Units are powers of 1024 whatever
 * the spelling (as docker's --memory); the letters' case does not matter
 * ("128m", "1.5g", "64kib"). A fraction of a byte left over is dropped
 * ("1.3K" is 1331). Examples: 0, 4096, 128M, 1.5G, 2TiB.
 *
 * A duration is a decimal number, with an optional fraction, and an
 * optional unit right after it: ms, s, m, h or d (lower case only: "M"
 * would read as a size). A plain number is in the caller's unit (the key's:
 * milliseconds for *_ms keys, seconds for *_s keys and the CLI's options).
 * The value must be a whole number of the result's unit ("1.5s" is 1500 ms,
 * but 1.5 s is refused for a key in seconds). Examples: 250, 1.5s, 15m, 24h, 7d.
 *
 * Neither takes a sign, a space, an exponent, hex, or an empty number. Pure:
 * no I/O, no allocation. */
#ifndef MSB_UNITS_H
#define MSB_UNITS_H

#include <stdint.h>

enum msb_time_unit {
	MSB_TIME_MS,
	MSB_TIME_S,
	_MSB_TIME_UNIT_MAX,
};

/* The accepted forms, for error messages. */
#define MSB_SIZE_FORMS "a number of bytes, or with a unit K, M, G or T (powers of 1024; also KB/KiB..., " \
	"any case), fractions allowed: 4096, 128M, 1.5G, 64KiB"
#define MSB_DURATION_FORMS_MS "milliseconds, or with a unit ms, s, m, h or d, fractions allowed: " \
	"250, 1.5s, 15m, 24h"
#define MSB_DURATION_FORMS_S "seconds, or with a unit ms, s, m, h or d, fractions allowed: " \
	"90, 1.5h, 15m, 7d"

/* Parses a size. Returns 0 and *ret_bytes; -EINVAL (not a size) or -ERANGE
 * (more than UINT64_MAX bytes). */
int msb_size_parse(const char *s, uint64_t *ret_bytes);

/* Parses a duration: a plain number is in unit plain, the result in unit
 * out. Returns 0 and *ret; -EINVAL (not a duration), -ERANGE (more than
 * UINT64_MAX of out) or -EDOM (not a whole number of out). */
int msb_duration_parse(const char *s, enum msb_time_unit plain, enum msb_time_unit out, uint64_t *ret);

/* "milliseconds" / "seconds". */
const char *msb_time_unit_to_string(enum msb_time_unit u);

#endif
