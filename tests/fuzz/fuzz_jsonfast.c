/* fuzz_jsonfast.c — differential libFuzzer target for proto/jsonfast.c
 * against jansson itself. The input is:
 *   byte 0: json_loadb flags (JSON_ALLOW_NUL, JSON_REJECT_DUPLICATES,
 *           JSON_DECODE_ANY, JSON_DECODE_INT_AS_REAL, and now and then
 *           JSON_DISABLE_EOF_CHECK);
 *   byte 1: the splice threshold (jsonfast_set_thresholds, the test hook,
 *           with no load threshold), 0..15 bytes, or with bit 4 set 21..36
 *           (above jansson's 20-byte error context), so short inputs reach
 *           the splicing fast path;
 *   the rest: the text.
 * Invariants:
 *   - jsonfast_loadb and json_loadb agree: both refuse with the same error
 *     code, text, source, line, column and position, or both accept equal
 *     values with the same error struct (its position). jansson's error
 *     text quotes the token it stopped at when that is at most 20 bytes
 *     ("... near 'x'"); jsonfast's may stop at a placeholder (over 20
 *     bytes) for a string value of splice threshold bytes or more, so below
 *     21 the text is compared up to that quote;
 *   - for an accepted value, jsonfast_dump is json_dumps(v, JSON_COMPACT |
 *     JSON_ENCODE_ANY) byte for byte, with its extra room writable;
 *   - jsonfast_scan reads the text to its end; for a value jansson accepts
 *     (no JSON_DISABLE_EOF_CHECK) it counts exactly its values (keys
 *     included; at least that many without JSON_REJECT_DUPLICATES) and
 *     its depth; its limits (values, depth, structure bytes) refuse
 *     exactly one below what it counts, and admit at the count;
 *   - the raw text as a string value and as an object key (built with the
 *     *_nocheck calls, so not necessarily UTF-8) dumps the same by both: the
 *     same failure on a bad value, jansson's partial text on a bad key.
 * A broken invariant aborts. Built by tests/fuzz/run.sh with clang, and by
 * meson with replay_main.c as the unit test 'fuzz_jsonfast'. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "jsonfast.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)
/* Bytes of the input header (flags, threshold). */
#define HEADER_BYTES 2
/* Extra room asked of jsonfast_dump, and written to. */
#define DUMP_EXTRA 2

static size_t input_flags(uint8_t b)
{
	size_t flags = 0;

	if (b & 1)
		flags |= JSON_ALLOW_NUL;
	if (b & 2)
		flags |= JSON_REJECT_DUPLICATES;
	if (b & 4)
		flags |= JSON_DECODE_ANY;
	if (b & 8)
		flags |= JSON_DECODE_INT_AS_REAL;
	if ((b & 0xf0) == 0xf0)
		flags |= JSON_DISABLE_EOF_CHECK;
	return flags;
}

static void check_dump(const json_t *v)
{
	char *want = json_dumps(v, DUMP_FLAGS);
	size_t n = 0;
	char *got = jsonfast_dump(v, DUMP_EXTRA, &n);

	require(!want == !got, "jsonfast_dump and json_dumps disagree on failure");
	if (want) {
		require(n == strlen(want), "jsonfast_dump's length differs");
		require(memcmp(got, want, n + 1) == 0, "jsonfast_dump's text differs");
		memset(got + n, '\n', DUMP_EXTRA);
		got[n + DUMP_EXTRA] = '\0';
	}
	free(want);
	free(got);
}

/* Length of an error text without its " near '<token>'" context. */
static size_t text_without_context(const char *t)
{
	const char *near = strstr(t, " near '");

	return near ? (size_t)(near - t) : strlen(t);
}

static void check_errors(const json_error_t *a, const json_error_t *b, bool whole_text)
{
	size_t n = text_without_context(a->text);

	/* (on success, the code byte is not set) */
	require(!b->text[0] || json_error_code(a) == json_error_code(b), "error codes differ");
	if (whole_text)
		require(strcmp(a->text, b->text) == 0, "error texts differ");
	else
		require(n == text_without_context(b->text) && memcmp(a->text, b->text, n) == 0,
			"error texts differ (their context aside)");
	require(strcmp(a->source, b->source) == 0, "error sources differ");
	require(a->line == b->line && a->column == b->column, "error lines or columns differ");
	require(a->position == b->position, "error positions differ");
}

/* The raw bytes as a string value and as a key, not necessarily UTF-8. */
static void check_raw_dump(const char *text, size_t len)
{
	json_t *o = json_object();
	json_t *s = json_stringn_nocheck(text, len);

	require(o && s, "OOM");
	check_dump(s);
	json_object_setn_new_nocheck(o, text, len, json_true());
	json_object_set_new_nocheck(o, "v", s);
	check_dump(o);
	json_decref(o);
}

/* Values (keys included) and container depth of v, as jsonfast_scan counts. */
static void count_value(const json_t *v, size_t level, size_t *values, size_t *depth)
{
	const char *key;
	json_t *e;
	size_t i;

	(*values)++;
	if (!json_is_array(v) && !json_is_object(v))
		return;
	if (level + 1 > *depth)
		*depth = level + 1;
	if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			count_value(e, level + 1, values, depth);
		return;
	}
	json_object_foreach((json_t *)v, key, e) {
		(*values)++;
		count_value(e, level + 1, values, depth);
	}
}

static int scan(const char *text, size_t len, size_t values, size_t depth, size_t structure,
		struct jsonfast_shape *ret)
{
	struct jsonfast_limits lim = { .values = values, .depth = depth, .structure_bytes = structure };

	return jsonfast_scan(text, len, &lim, ret);
}

static void check_scan(const char *text, size_t len, size_t flags, const json_t *v)
{
	struct jsonfast_shape shape;
	size_t values = 0, depth = 0, structure;

	require(scan(text, len, SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape) == 0, "jsonfast_scan refused");
	require(shape.position == len, "jsonfast_scan stopped short");
	require(shape.structure_bytes <= len, "more structure bytes than bytes");
	structure = shape.structure_bytes;
	require(scan(text, len, shape.values, shape.depth, structure, &shape) == 0,
		"the limits refuse at the counts");
	if (shape.values > 0)
		require(scan(text, len, shape.values - 1, SIZE_MAX, SIZE_MAX, &shape) == -E2BIG,
			"the value limit does not refuse below the count");
	if (structure > 0)
		require(scan(text, len, SIZE_MAX, SIZE_MAX, structure - 1, &shape) == -E2BIG,
			"the structure limit does not refuse below the count");
	if (!v || (flags & JSON_DISABLE_EOF_CHECK))
		return;
	scan(text, len, SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape);
	count_value(v, 0, &values, &depth);
	require(shape.depth == depth, "jsonfast_scan's depth differs");
	if (flags & JSON_REJECT_DUPLICATES)
		require(shape.values == values, "jsonfast_scan's count differs");
	else
		require(shape.values >= values, "jsonfast_scan counts fewer values");
	if (depth > 0)
		require(scan(text, len, SIZE_MAX, depth - 1, SIZE_MAX, &shape) == -E2BIG,
			"the depth limit does not refuse below the depth");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t want_err, got_err;
	const char *text;
	size_t flags, len, splice_min;
	json_t *want, *got;

	fuzz_json_seed();
	if (size < HEADER_BYTES)
		return 0;
	flags = input_flags(data[0]);
	splice_min = (data[1] & 0x0f) + ((data[1] & 0x10) ? 21 : 0);
	jsonfast_set_thresholds(0, splice_min);
	text = (const char *)data + HEADER_BYTES;
	len = size - HEADER_BYTES;

	want = json_loadb(text, len, flags, &want_err);
	got = jsonfast_loadb(text, len, flags, &got_err);
	require(!want == !got, "jsonfast_loadb and json_loadb disagree on failure");
	check_errors(&got_err, &want_err, splice_min > 20);
	if (want) {
		require(json_equal(want, got), "jsonfast_loadb's value differs");
		check_dump(got);
	}
	check_scan(text, len, flags, want);
	json_decref(want);
	json_decref(got);
	check_raw_dump(text, len);
	return 0;
}
