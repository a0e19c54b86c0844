/* units.c — sizes and durations as text (units.h). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "units.h"

/* Fraction digits kept: more cannot change a uint64 result's whole part
 * (10^19 > UINT64_MAX), and 19 digits still fit a uint64. */
#define UNITS_FRAC_DIGITS 19

/* A decimal number "D+[.D*]" or ".D+": its whole part, its fraction as
 * frac / 10^frac_digits (the digits past UNITS_FRAC_DIGITS dropped), and
 * the rest of s. */
struct units_number {
	uint64_t whole;
	uint64_t frac;
	unsigned frac_digits;
	const char *rest;
};

/* 128-bit intermediates (GCC and Clang on 64-bit targets). */
__extension__ typedef unsigned __int128 units_u128;

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int number_parse(const char *s, struct units_number *ret)
{
	struct units_number n = { 0 };
	const char *p = s;
	bool digits = false;

	for (; is_digit(*p); p++, digits = true)
		if (__builtin_mul_overflow(n.whole, 10, &n.whole) ||
		    __builtin_add_overflow(n.whole, (uint64_t)(*p - '0'), &n.whole))
			return -ERANGE;
	if (*p == '.') {
		p++;
		for (; is_digit(*p); p++, digits = true)
			if (n.frac_digits < UNITS_FRAC_DIGITS) {
				n.frac = n.frac * 10 + (uint64_t)(*p - '0');
				n.frac_digits++;
			}
	}
	if (!digits)
		return -EINVAL;
	n.rest = p;
	*ret = n;
	return 0;
}

static uint64_t pow10u(unsigned n)
{
	uint64_t v = 1;

	while (n--)
		v *= 10;
	return v;
}

/* n * mult / div (mult < 2^41, div 1 or 1000), rounded down, or -EDOM when
 * exact and a remainder is left. whole * mult and frac * mult each fit 128
 * bits (< 2^105), so nothing overflows on the way. */
static int number_scale(const struct units_number *n, uint64_t mult, uint64_t div, bool exact,
			uint64_t *ret)
{
	units_u128 den = pow10u(n->frac_digits);
	units_u128 frac = (units_u128)n->frac * mult;
	units_u128 q = (units_u128)n->whole * mult + frac / den;

	if (exact && (frac % den || q % div))
		return -EDOM;
	q /= div;
	if (q > UINT64_MAX)
		return -ERANGE;
	*ret = (uint64_t)q;
	return 0;
}

/* The multiplier of a size's unit letter (K, M, G, T, any case), or 0. */
static uint64_t size_unit(char c)
{
	static const char units[] = "KMGT";
	uint64_t mult = 1;

	if (c >= 'a' && c <= 'z')
		c = (char)(c - 'a' + 'A');
	for (const char *p = units; *p; p++) {
		mult *= 1024;
		if (*p == c)
			return mult;
	}
	return 0;
}

int msb_size_parse(const char *s, uint64_t *ret_bytes)
{
	struct units_number n;
	uint64_t mult = 1;
	const char *u;
	int r;

	if (!s)
		return -EINVAL;
	r = number_parse(s, &n);
	if (r < 0)
		return r;
	u = n.rest;
	if (*u && size_unit(*u)) {
		mult = size_unit(*u++);
		if (*u == 'i' || *u == 'I') {
			u++;
			if (*u != 'b' && *u != 'B')
				return -EINVAL;   /* "Ki" */
		}
	}
	if (*u == 'b' || *u == 'B')
		u++;
	if (*u)
		return -EINVAL;
	return number_scale(&n, mult, 1, false, ret_bytes);
}

const char *msb_time_unit_to_string(enum msb_time_unit u)
{
	switch (u) {
	case MSB_TIME_MS: return "milliseconds";
	case MSB_TIME_S: return "seconds";
	default: return "?";
	}
}

static uint64_t time_unit_ms(enum msb_time_unit u)
{
	return u == MSB_TIME_S ? 1000 : 1;
}

int msb_duration_parse(const char *s, enum msb_time_unit plain, enum msb_time_unit out, uint64_t *ret)
{
	static const struct {
		const char *name;
		uint64_t ms;
	} units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 },
		{ "d", 86400ULL * 1000 },
	};
	struct units_number n;
	uint64_t ms = time_unit_ms(plain);
	size_t i;
	int r;

	if (!s)
		return -EINVAL;
	r = number_parse(s, &n);
	if (r < 0)
		return r;
	if (*n.rest) {
		for (i = 0; i < ELEMENTSOF(units) && strcmp(units[i].name, n.rest); i++)
			;
		if (i == ELEMENTSOF(units))
			return -EINVAL;
		ms = units[i].ms;
	}
	return number_scale(&n, ms, time_unit_ms(out), true, ret);
}
