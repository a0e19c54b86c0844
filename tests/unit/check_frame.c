/* check_frame.c — line framing (struct frame_buf) and frame_encode.
 *
 * Framing is byte-oriented: it splits on LF, drops one CR before the LF,
 * skips blank lines and enforces the per-frame limit while bytes arrive.
 * What the bytes mean is JSON's business, not framing's. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "frame.h"
#include "msb-limits.h"
#include "xmalloc.h"

/* A limit small enough to reach byte by byte. */
#define SMALL_MAX        64
#define MAX_FRAMES       16
/* The splitting steps every framing row is fed with (0 = all in one append). */
static const size_t split_steps[] = { 0, 1, 2, 3, 7, 4096 };

struct bytes {
	const char *p;
	size_t n;
};
#define B(lit) { lit, sizeof(lit) - 1 }

/* Frames handed out so far, copied (they are only valid until the next call). */
struct frames {
	char *v[MAX_FRAMES];
	size_t len[MAX_FRAMES];
	size_t n;
};

static void frames_release(struct frames *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i]);
	f->n = 0;
}

/* Takes every complete frame held. Returns 0 or the first negative result. */
static int drain(struct frame_buf *fb, struct frames *out)
{
	const char *line;
	size_t len;
	int r;

	while ((r = frame_buf_next(fb, &line, &len)) == 1) {
		ck_assert_msg(line[len] == '\0', "frame not NUL-terminated");
		ck_assert_uint_lt(out->n, MAX_FRAMES);
		out->v[out->n] = xmalloc(len + 1);
		memcpy(out->v[out->n], line, len + 1);
		out->len[out->n++] = len;
	}
	return r;
}

/* Appends p in pieces of step bytes (0: at once), draining after each. */
static int feed(struct frame_buf *fb, const char *p, size_t n, size_t step, struct frames *out)
{
	size_t off = 0;
	int r;

	if (step == 0)
		step = n ? n : 1;
	do {
		size_t k = n - off < step ? n - off : step;

		r = frame_buf_append(fb, p + off, k);
		if (r < 0)
			return r;
		r = drain(fb, out);
		if (r < 0)
			return r;
		off += k;
	} while (off < n);
	return 0;
}

/* ---- splitting ---------------------------------------------------------- */

struct split_row {
	const char *name;
	struct bytes in;
	struct bytes want[MAX_FRAMES];  /* ends at .p == NULL */
	size_t want_pending;            /* bytes of an unterminated tail */
};

static const struct split_row split_rows[] = {
	{ "one frame", B("{}\n"), { B("{}") }, 0 },
	{ "many frames", B("{\"a\":1}\n{\"b\":2}\n[]\n"),
	  { B("{\"a\":1}"), B("{\"b\":2}"), B("[]") }, 0 },
	{ "CRLF stripped", B("{}\r\n{\"x\":1}\r\n"), { B("{}"), B("{\"x\":1}") }, 0 },
	{ "only one CR stripped", B("a\r\r\n"), { B("a\r") }, 0 },
	{ "inner CR kept", B("a\rb\n"), { B("a\rb") }, 0 },
	{ "blank lines skipped", B("\n\n{}\n\n\n[1]\n"), { B("{}"), B("[1]") }, 0 },
	{ "whitespace-only lines skipped", B(" \n\t\n \t \r\n\r\n{}\n   \n\t\r\n"), { B("{}") }, 0 },
	{ "only blank lines", B("\n\r\n \n\t\n"), { { NULL, 0 } }, 0 },
	{ "empty input", B(""), { { NULL, 0 } }, 0 },
	{ "leading and trailing spaces kept", B("  {} \n"), { B("  {} ") }, 0 },
	{ "unterminated tail held back", B("{}\n{\"partial\""), { B("{}") }, 10 },
	{ "garbage passes untouched", B("a\0b\xff\xfe\xc3(\n\0\0\n\x80\x01\x7f\n"),
	  { B("a\0b\xff\xfe\xc3("), B("\0\0"), B("\x80\x01\x7f") }, 0 },
	{ "NUL-only line is not blank", B("\0\n"), { B("\0") }, 0 },
};

START_TEST(test_split)
{
	const struct split_row *row = &split_rows[_i];

	for (size_t s = 0; s < ELEMENTSOF(split_steps); s++) {
		struct frame_buf fb;
		struct frames got = { 0 };
		size_t nwant = 0;

		frame_buf_init(&fb, SMALL_MAX);
		ck_assert_int_eq(feed(&fb, row->in.p, row->in.n, split_steps[s], &got), 0);
		while (row->want[nwant].p)
			nwant++;
		ck_assert_msg(got.n == nwant, "%s (step %zu): %zu frames, want %zu",
			      row->name, split_steps[s], got.n, nwant);
		for (size_t i = 0; i < nwant; i++) {
			ck_assert_msg(got.len[i] == row->want[i].n, "%s (step %zu): frame %zu is %zu bytes, want %zu",
				      row->name, split_steps[s], i, got.len[i], row->want[i].n);
			ck_assert_mem_eq(got.v[i], row->want[i].p, row->want[i].n);
		}
		ck_assert_uint_eq(frame_buf_pending(&fb), row->want_pending);
		ck_assert(frame_buf_in_frame(&fb) == (row->want_pending > 0));
		frames_release(&got);
		frame_buf_release(&fb);
	}
}
END_TEST

START_TEST(test_empty_append)
{
	struct frame_buf fb;
	const char *line = "sentinel";
	size_t len = 12345;

	frame_buf_init(&fb, SMALL_MAX);
	/* Nothing appended at all. */
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_str_eq(line, "sentinel");
	ck_assert_uint_eq(len, 12345);
	ck_assert_int_eq(frame_buf_append(&fb, NULL, 0), 0);
	ck_assert_int_eq(frame_buf_append(&fb, "", 0), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	ck_assert(!frame_buf_in_frame(&fb));
	frame_buf_release(&fb);
}
END_TEST

/* Many frames in one append, drained one next() at a time, mixed lengths. */
START_TEST(test_many_in_one_append)
{
	struct frame_buf fb;
	struct frames got = { 0 };
	char in[MAX_FRAMES * (SMALL_MAX + 1)];
	size_t n = 0;

	for (size_t i = 0; i < MAX_FRAMES; i++) {
		size_t len = 1 + (i * 5) % SMALL_MAX;

		memset(in + n, 'a' + (int)i, len);
		n += len;
		in[n++] = '\n';
	}
	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(frame_buf_append(&fb, in, n), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), n);
	ck_assert_int_eq(drain(&fb, &got), 0);
	ck_assert_uint_eq(got.n, MAX_FRAMES);
	for (size_t i = 0; i < MAX_FRAMES; i++) {
		ck_assert_uint_eq(got.len[i], 1 + (i * 5) % SMALL_MAX);
		for (size_t k = 0; k < got.len[i]; k++)
			ck_assert_int_eq(got.v[i][k], 'a' + (int)i);
	}
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* ---- the limit ---------------------------------------------------------- */

static char *repeat(char c, size_t n, const char *suffix)
{
	size_t sn = strlen(suffix);
	char *s = xmalloc(n + sn + 1);

	memset(s, c, n);
	memcpy(s + n, suffix, sn + 1);
	return s;
}

START_TEST(test_limit_exact_accepted)
{
	_cleanup_free_ char *in = repeat('x', SMALL_MAX, "\n");

	for (size_t s = 0; s < ELEMENTSOF(split_steps); s++) {
		struct frame_buf fb;
		struct frames got = { 0 };

		frame_buf_init(&fb, SMALL_MAX);
		ck_assert_int_eq(feed(&fb, in, SMALL_MAX + 1, split_steps[s], &got), 0);
		ck_assert_uint_eq(got.n, 1);
		ck_assert_uint_eq(got.len[0], SMALL_MAX);
		ck_assert_mem_eq(got.v[0], in, SMALL_MAX);
		frames_release(&got);
		frame_buf_release(&fb);
	}
}
END_TEST

/* max-1 bytes and CRLF: the CR is the terminator's, the frame fits. */
START_TEST(test_limit_crlf_accepted)
{
	_cleanup_free_ char *in = repeat('x', SMALL_MAX - 1, "\r\n");
	struct frame_buf fb;
	struct frames got = { 0 };

	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(feed(&fb, in, SMALL_MAX + 1, 0, &got), 0);
	ck_assert_uint_eq(got.n, 1);
	ck_assert_uint_eq(got.len[0], SMALL_MAX - 1);
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* limit+1 with its LF in the same append: refused at append or at next,
 * and never handed out, whatever follows it. */
struct over_row {
	const char *name;
	const char *before;  /* good frames ahead of the oversize one */
	const char *after;   /* bytes after the oversize frame's LF */
	size_t want_good;
};

static const struct over_row over_rows[] = {
	{ "alone", "", "", 0 },
	{ "followed by a good frame", "", "{}\n", 0 },
	{ "after a good frame", "{}\n", "", 1 },
	{ "between good frames", "{}\n[]\n", "{}\n", 2 },
};

START_TEST(test_limit_plus_one_with_lf_refused)
{
	const struct over_row *row = &over_rows[_i];
	_cleanup_free_ char *big = repeat('x', SMALL_MAX + 1, "\n");
	_cleanup_free_ char *in = xasprintf("%s%s%s", row->before, big, row->after);
	struct frame_buf fb;
	struct frames got = { 0 };
	int r;

	frame_buf_init(&fb, SMALL_MAX);
	r = frame_buf_append(&fb, in, strlen(in));
	ck_assert_msg(r == 0 || r == -EMSGSIZE, "%s: append returned %d", row->name, r);
	if (r == 0)
		r = drain(&fb, &got);
	ck_assert_msg(r == -EMSGSIZE, "%s: got %d, want -EMSGSIZE", row->name, r);
	ck_assert_uint_le(got.n, row->want_good);
	for (size_t i = 0; i < got.n; i++)
		ck_assert_uint_le(got.len[i], SMALL_MAX);
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* An unterminated frame growing past the limit fails in append itself,
 * at the first append that takes it over, before any LF. */
START_TEST(test_limit_tail_grows_past)
{
	for (size_t s = 1; s < ELEMENTSOF(split_steps); s++) {
		size_t step = split_steps[s];
		_cleanup_free_ char *in = repeat('y', SMALL_MAX + step, "");
		struct frame_buf fb;
		size_t off = 0;
		int r = 0;

		frame_buf_init(&fb, SMALL_MAX);
		while (off < SMALL_MAX + step) {
			r = frame_buf_append(&fb, in + off, step);
			off += step;
			if (r < 0)
				break;
			ck_assert_msg(off <= SMALL_MAX, "step %zu: %zu bytes held, no error", step, off);
			/* Nothing complete is held, and next agrees nothing is over. */
			ck_assert_int_eq(frame_buf_next(&fb, &(const char *){ NULL }, &(size_t){ 0 }), 0);
		}
		ck_assert_int_eq(r, -EMSGSIZE);
		/* The first append past max failed: at most one append over. */
		ck_assert_uint_gt(off, SMALL_MAX);
		ck_assert_uint_le(off, SMALL_MAX + step);
		ck_assert_uint_le(frame_buf_pending(&fb), SMALL_MAX + step);
		ck_assert_int_eq(frame_buf_next(&fb, &(const char *){ NULL }, &(size_t){ 0 }), -EMSGSIZE);
		frame_buf_release(&fb);
	}
}
END_TEST

/* The tail counts from the last LF: completed frames do not count. */
START_TEST(test_limit_is_per_frame)
{
	_cleanup_free_ char *a = repeat('a', SMALL_MAX, "\n");
	_cleanup_free_ char *b = repeat('b', SMALL_MAX, "");
	struct frame_buf fb;
	struct frames got = { 0 };

	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(frame_buf_append(&fb, a, SMALL_MAX + 1), 0);
	/* Not taken yet: the buffer now holds more than max bytes. */
	ck_assert_int_eq(frame_buf_append(&fb, b, SMALL_MAX), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 2 * SMALL_MAX + 1);
	ck_assert(frame_buf_in_frame(&fb));
	ck_assert_int_eq(drain(&fb, &got), 0);
	ck_assert_uint_eq(got.n, 1);
	ck_assert_int_eq(frame_buf_append(&fb, "\n", 1), 0);
	ck_assert_int_eq(drain(&fb, &got), 0);
	ck_assert_uint_eq(got.n, 2);
	ck_assert_uint_eq(got.len[1], SMALL_MAX);
	ck_assert_mem_eq(got.v[1], b, SMALL_MAX);
	/* Then one byte over, across appends. */
	ck_assert_int_eq(frame_buf_append(&fb, b, SMALL_MAX), 0);
	ck_assert_int_eq(frame_buf_append(&fb, "b", 1), -EMSGSIZE);
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* A frame of max bytes followed by a short one, at once and in chunks. */
START_TEST(test_long_then_short)
{
	const size_t max = MSB_MIB;
	size_t n = 2 * (max + 1) + 3;
	_cleanup_free_ char *in = xmalloc(n);
	static const size_t steps[] = { 0, 4096, 1000, 65537 };

	memset(in, 'L', max);
	in[max] = '\n';
	memcpy(in + max + 1, "{}\n", 3);
	memset(in + max + 4, 'M', max);
	in[n - 1] = '\n';
	for (size_t s = 0; s < ELEMENTSOF(steps); s++) {
		struct frame_buf fb;
		struct frames got = { 0 };

		frame_buf_init(&fb, max);
		ck_assert_int_eq(feed(&fb, in, n, steps[s], &got), 0);
		ck_assert_uint_eq(got.n, 3);
		ck_assert_uint_eq(got.len[0], max);
		ck_assert(memcmp(got.v[0], in, max) == 0);
		ck_assert_uint_eq(got.len[1], 2);
		ck_assert_str_eq(got.v[1], "{}");
		ck_assert_uint_eq(got.len[2], max);
		ck_assert(memcmp(got.v[2], in + max + 4, max) == 0);
		frames_release(&got);
		frame_buf_release(&fb);
	}
}
END_TEST

/* ---- state queries, release --------------------------------------------- */

START_TEST(test_pending_in_frame)
{
	struct frame_buf fb;
	const char *line;
	size_t len;

	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	ck_assert(!frame_buf_in_frame(&fb));

	ck_assert_int_eq(frame_buf_append(&fb, "{}\n{\"a\"", 7), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 7);
	ck_assert(frame_buf_in_frame(&fb));

	/* Two complete frames held, none taken: nothing is under way. */
	ck_assert_int_eq(frame_buf_append(&fb, ":1}\n", 4), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 11);
	ck_assert(!frame_buf_in_frame(&fb));

	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "{}");
	ck_assert_uint_eq(frame_buf_pending(&fb), 8);
	ck_assert(!frame_buf_in_frame(&fb));

	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "{\"a\":1}");
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	ck_assert(!frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);

	/* Blank lines are pending until skipped, and are not a frame under way. */
	ck_assert_int_eq(frame_buf_append(&fb, "\n\r\n", 3), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 3);
	ck_assert(!frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);

	/* A complete frame with a partial one behind it. */
	ck_assert_int_eq(frame_buf_append(&fb, "[1]\n[", 5), 0);
	ck_assert(frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "[1]");
	ck_assert_uint_eq(frame_buf_pending(&fb), 1);
	ck_assert(frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert(frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_append(&fb, "2]\n", 3), 0);
	ck_assert(!frame_buf_in_frame(&fb));
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "[2]");
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	frame_buf_release(&fb);
}
END_TEST

START_TEST(test_release_reinit)
{
	struct frame_buf fb;
	struct frames got = { 0 };

	/* Release of a buffer that never held anything, twice. */
	frame_buf_init(&fb, SMALL_MAX);
	frame_buf_release(&fb);
	frame_buf_release(&fb);

	/* Release with a partial frame and a complete one held. */
	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(frame_buf_append(&fb, "{}\n{\"half", 9), 0);
	frame_buf_release(&fb);

	/* Re-init with another limit: nothing of the old stream survives. */
	frame_buf_init(&fb, 4);
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	ck_assert(!frame_buf_in_frame(&fb));
	ck_assert_int_eq(feed(&fb, "1234\n", 5, 1, &got), 0);
	ck_assert_uint_eq(got.n, 1);
	ck_assert_str_eq(got.v[0], "1234");
	ck_assert_int_eq(frame_buf_append(&fb, "12345", 5), -EMSGSIZE);
	frame_buf_release(&fb);

	/* A buffer refused for size can be released and started over. */
	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(feed(&fb, "[]\n", 3, 0, &got), 0);
	ck_assert_uint_eq(got.n, 2);
	ck_assert_str_eq(got.v[1], "[]");
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* ---- frame_encode ------------------------------------------------------- */

static json_t *parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &e);

	ck_assert_msg(j != NULL, "test JSON %s: %s", s, e.text);
	return j;
}

struct encode_row {
	const char *in;    /* JSON text */
	const char *want;  /* the exact frame */
};

static const struct encode_row encode_rows[] = {
	{ "{ \"a\" : [ 1, 2 ],\n  \"b\" : { \"c\" : null } }", "{\"a\":[1,2],\"b\":{\"c\":null}}\n" },
	{ "{\"s\": \"line1\\nline2\\r\\nline3\\n\"}", "{\"s\":\"line1\\nline2\\r\\nline3\\n\"}\n" },
	{ "{\"k\\nk\": \"\\u2028\\t\"}", "{\"k\\nk\":\"\u2028\\t\"}\n" },
	{ "{}", "{}\n" },
	{ "[]", "[]\n" },
	{ "\"x\\ny\"", "\"x\\ny\"\n" },
	{ "42", "42\n" },
};

START_TEST(test_encode)
{
	const struct encode_row *row = &encode_rows[_i];
	json_auto_t *v = parse(row->in);
	json_auto_t *back = NULL;
	_cleanup_free_ char *s = NULL;
	size_t len = 0;

	s = frame_encode(v, &len);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, row->want);
	ck_assert_uint_eq(len, strlen(s));
	ck_assert_int_eq(s[len - 1], '\n');
	ck_assert_ptr_eq(memchr(s, '\n', len), s + len - 1);
	ck_assert_ptr_null(strchr(s, '\r'));
	back = json_loadb(s, len - 1, JSON_DECODE_ANY, NULL);
	ck_assert(json_equal(back, v));
}
END_TEST

START_TEST(test_encode_failure)
{
	json_t *a = json_array(), *b = json_array();
	size_t len = 777;

	/* A cycle: jansson refuses to encode it. */
	ck_assert_int_eq(json_array_append(a, b), 0);
	ck_assert_int_eq(json_array_append(b, a), 0);
	ck_assert_ptr_null(frame_encode(a, &len));
	ck_assert_uint_eq(len, 777);
	json_array_clear(b);
	json_decref(a);
	json_decref(b);
}
END_TEST

/* Encoded frames fed back through frame_buf, byte by byte, decode equal. */
START_TEST(test_encode_roundtrip)
{
	static const char *const values[] = {
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"t\":\"a\\nb\\n\\n\"}}",
		"{\"multi\":\"\\n\\n\\r\\n\"}",
		"[\"\\n\",\"\\r\",\" \"]",
		"{\"x\":\"\u00e9\u4e2d\"}",
	};
	struct frame_buf fb;
	struct frames got = { 0 };
	_cleanup_free_ char *all = xstrdup("");

	for (size_t i = 0; i < ELEMENTSOF(values); i++) {
		json_auto_t *v = parse(values[i]);
		_cleanup_free_ char *s = NULL;
		char *joined;
		size_t len;

		s = frame_encode(v, &len);
		ck_assert_ptr_nonnull(s);
		joined = xasprintf("%s%s", all, s);
		free(all);
		all = joined;
	}
	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(feed(&fb, all, strlen(all), 1, &got), 0);
	ck_assert_uint_eq(got.n, ELEMENTSOF(values));
	for (size_t i = 0; i < got.n; i++) {
		json_auto_t *want = parse(values[i]);
		json_auto_t *back = json_loadb(got.v[i], got.len[i], 0, NULL);

		ck_assert_msg(json_equal(back, want), "frame %zu: %s", i, got.v[i]);
	}
	frames_release(&got);
	frame_buf_release(&fb);
}
END_TEST

/* ---- big input: guards against quadratic scanning or copying ----------- */

#define BIG_FRAME_BYTES  (64 * MSB_MIB)
#define BIG_APPEND_BYTES (4 * MSB_KIB)
/* Generous for the linear work here (well under a second); a scan or copy
 * of the whole buffer on every append or frame would take minutes. */
#define BIG_TIMEOUT_S    20

START_TEST(test_big_frame_small_appends)
{
	static char chunk[BIG_APPEND_BYTES];
	struct frame_buf fb;
	const char *line;
	size_t len, bad = 0;

	memset(chunk, 'z', sizeof(chunk));
	frame_buf_init(&fb, MSB_FRAME_MAX_BYTES);
	/* A short frame first, so the big one starts past offset 0. */
	ck_assert_int_eq(frame_buf_append(&fb, "{}\n", 3), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	/* No ck_assert in the loop: each one is a message to the runner. */
	for (size_t off = 0; off < BIG_FRAME_BYTES; off += sizeof(chunk)) {
		bad += frame_buf_append(&fb, chunk, sizeof(chunk)) != 0;
		bad += frame_buf_next(&fb, &line, &len) != 0;
	}
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), BIG_FRAME_BYTES);
	ck_assert_int_eq(frame_buf_append(&fb, "\r\n[]\n", 5), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_uint_eq(len, BIG_FRAME_BYTES);
	ck_assert_int_eq(line[0], 'z');
	ck_assert_int_eq(line[len - 1], 'z');
	ck_assert_int_eq(line[len], '\0');
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "[]");
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	frame_buf_release(&fb);
}
END_TEST

/* Many small frames: one big append, then many 64 KiB appends. */
#define SMALL_FRAMES 1000000

START_TEST(test_many_small_frames)
{
	static const char one[] = "{\"id\":1}\n";
	size_t n = SMALL_FRAMES * (sizeof(one) - 1);
	_cleanup_free_ char *in = xmalloc(n);
	struct frame_buf fb;
	const char *line;
	size_t len, count = 0, bad = 0;

	for (size_t i = 0; i < SMALL_FRAMES; i++)
		memcpy(in + i * (sizeof(one) - 1), one, sizeof(one) - 1);

	frame_buf_init(&fb, SMALL_MAX);
	ck_assert_int_eq(frame_buf_append(&fb, in, n), 0);
	while (frame_buf_next(&fb, &line, &len) == 1)
		count++;
	ck_assert_uint_eq(count, SMALL_FRAMES);

	/* 64 KiB appends cut frames anywhere; each append is drained. */
	count = 0;
	for (size_t off = 0; off < n; off += 64 * MSB_KIB) {
		size_t k = n - off < 64 * MSB_KIB ? n - off : 64 * MSB_KIB;

		bad += frame_buf_append(&fb, in + off, k) != 0;
		while (frame_buf_next(&fb, &line, &len) == 1) {
			bad += len != sizeof(one) - 2 || memcmp(line, one, len) != 0;
			count++;
		}
	}
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_eq(count, SMALL_FRAMES);
	frame_buf_release(&fb);
}
END_TEST

START_TEST(test_emptied_buffer_gives_memory_back)
{
	struct frame_buf fb;
	size_t big = 1 << 20, len;
	char *frame = malloc(big + 1);
	const char *line;

	memset(frame, 'x', big);
	frame[big] = '\n';
	frame_buf_init(&fb, 2 * big);
	ck_assert_int_eq(frame_buf_append(&fb, frame, big + 1), 0);
	ck_assert_uint_gt(fb.cap, big);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_uint_eq(len, big);
	/* Taken and emptied: the next look finds nothing and frees the memory. */
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_uint_le(fb.cap, MSB_FRAME_BUF_KEEP_BYTES);
	/* A small frame keeps its small buffer. */
	ck_assert_int_eq(frame_buf_append(&fb, "{}\n", 3), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_uint_le(fb.cap, MSB_FRAME_BUF_KEEP_BYTES);
	ck_assert_int_eq(frame_buf_append(&fb, "{}\n", 3), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	frame_buf_release(&fb);
	free(frame);
}
END_TEST

/* A large frame taken with one byte of the next behind it: the buffer
 * shrinks to the pending bytes' size, it does not keep the large frame's. */
START_TEST(test_large_frame_then_pending_byte_shrinks)
{
	struct frame_buf fb;
	size_t big = 4 << 20, len;
	char *frame = malloc(big + 2);
	const char *line;

	memset(frame, 'x', big);
	frame[big] = '\n';
	frame[big + 1] = '{';
	frame_buf_init(&fb, 2 * big);
	ck_assert_int_eq(frame_buf_append(&fb, frame, big + 2), 0);
	ck_assert_uint_gt(fb.cap, big);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_uint_eq(len, big);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	ck_assert_uint_eq(frame_buf_pending(&fb), 1);
	ck_assert_uint_le(fb.cap, MSB_FRAME_BUF_KEEP_BYTES);
	/* The pending byte is kept and the frame completes. */
	ck_assert_int_eq(frame_buf_append(&fb, "}\n", 2), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_uint_eq(len, 2);
	ck_assert_str_eq(line, "{}");
	frame_buf_release(&fb);
	free(frame);
}
END_TEST

START_TEST(test_drop_partial_keeps_whole_frames)
{
	struct frame_buf fb;
	const char *line;
	size_t len;

	frame_buf_init(&fb, 1024);
	frame_buf_drop_partial(&fb);               /* nothing held: harmless */
	ck_assert_int_eq(frame_buf_append(&fb, "{\"a\":1}\n{\"b\":2}\n{\"unfinished", 29), 0);
	ck_assert(frame_buf_in_frame(&fb));
	frame_buf_drop_partial(&fb);
	ck_assert(!frame_buf_in_frame(&fb));
	ck_assert_uint_eq(frame_buf_pending(&fb), 16);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "{\"a\":1}");
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "{\"b\":2}");
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	/* After a scan that stopped in the fragment, dropping it is still exact. */
	ck_assert_int_eq(frame_buf_append(&fb, "{\"c\":3}\nxyz", 11), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 0);
	frame_buf_drop_partial(&fb);
	ck_assert_uint_eq(frame_buf_pending(&fb), 0);
	ck_assert_int_eq(frame_buf_append(&fb, "{}\n", 3), 0);
	ck_assert_int_eq(frame_buf_next(&fb, &line, &len), 1);
	ck_assert_str_eq(line, "{}");
	frame_buf_release(&fb);
}
END_TEST

static Suite *frame_suite(void)
{
	Suite *s = suite_create("frame");
	TCase *tc;

	tc = tcase_create("splitting");
	tcase_add_loop_test(tc, test_split, 0, ELEMENTSOF(split_rows));
	tcase_add_test(tc, test_empty_append);
	tcase_add_test(tc, test_many_in_one_append);
	suite_add_tcase(s, tc);

	tc = tcase_create("limit");
	tcase_add_test(tc, test_limit_exact_accepted);
	tcase_add_test(tc, test_limit_crlf_accepted);
	tcase_add_loop_test(tc, test_limit_plus_one_with_lf_refused, 0, ELEMENTSOF(over_rows));
	tcase_add_test(tc, test_limit_tail_grows_past);
	tcase_add_test(tc, test_limit_is_per_frame);
	tcase_add_test(tc, test_long_then_short);
	suite_add_tcase(s, tc);

	tc = tcase_create("state");
	tcase_add_test(tc, test_pending_in_frame);
	tcase_add_test(tc, test_release_reinit);
	tcase_add_test(tc, test_emptied_buffer_gives_memory_back);
	tcase_add_test(tc, test_drop_partial_keeps_whole_frames);
	tcase_add_test(tc, test_large_frame_then_pending_byte_shrinks);
	suite_add_tcase(s, tc);

	tc = tcase_create("encode");
	tcase_add_loop_test(tc, test_encode, 0, ELEMENTSOF(encode_rows));
	tcase_add_test(tc, test_encode_failure);
	tcase_add_test(tc, test_encode_roundtrip);
	suite_add_tcase(s, tc);

	tc = tcase_create("big input");
	tcase_set_timeout(tc, BIG_TIMEOUT_S);
	tcase_add_test(tc, test_big_frame_small_appends);
	tcase_add_test(tc, test_many_small_frames);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(frame_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
