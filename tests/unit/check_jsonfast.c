/* check_jsonfast.c — proto/jsonfast.[ch] against jansson itself.
 *
 * jsonfast_dump must write json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)
 * byte for byte, and jsonfast_loadb must give json_loadb's outcome for
 * every input: an equal value and the same error struct on success, NULL
 * and the same error text, line, column and position on failure. Loads run
 * at the shipped thresholds and at tiny ones (jsonfast_set_thresholds), so
 * short rows reach the splicing fast path; rows that jansson accepts say
 * whether the fast path must have been taken (jsonfast_test_spliced). */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "jsonfast.h"

/* Tiny thresholds: every input is a candidate and strings of at least this
 * many bytes are spliced. */
#define TINY_SPLICE_MIN 4
/* Random values per random test, and how deep / wide they grow. */
#define RANDOM_ROUNDS 400
#define RANDOM_DEPTH 5
#define RANDOM_WIDTH 6
/* Deeper than JSONFAST_DUMP_MAX_DEPTH: jsonfast hands it to json_dumps. */
#define DEEP_NESTING (JSONFAST_DUMP_MAX_DEPTH + 100)
/* Bytes of base64 in the big files.write-like frame (well over the thresholds). */
#define BIG_CONTENT_BYTES (3 * 1024 * 1024)
/* A key longer than JSONFAST_SPLICE_MIN_BYTES; three of it pass the load threshold. */
#define LONG_KEY_BYTES (JSONFAST_LOAD_MIN_BYTES / 2)
#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)

/* ---- helpers ---------------------------------------------------------- */

static uint32_t rng_state;

static uint32_t rng(void)
{
	uint32_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return rng_state = x;
}

/* jsonfast_dump(v) equals json_dumps(v), and the extra room is writable. */
static void assert_dump_same(const json_t *v)
{
	_cleanup_free_ char *want = json_dumps(v, DUMP_FLAGS);
	size_t n = 0x5a5a;
	_cleanup_free_ char *got = jsonfast_dump(v, 3, &n);

	if (!want) {
		ck_assert_msg(got == NULL, "jansson fails, jsonfast gave \"%s\"", got);
		ck_assert_uint_eq(n, 0x5a5a);
		return;
	}
	ck_assert_msg(got != NULL, "jsonfast fails where jansson gives \"%s\"", want);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_msg(memcmp(got, want, n + 1) == 0, "jsonfast \"%s\" != jansson \"%s\"", got, want);
	memcpy(got + n, "\n\n\n", 4);
}

/* The splice threshold set (jsonfast_set_thresholds through this). */
static size_t splice_now = JSONFAST_SPLICE_MIN_BYTES;

static void set_thresholds(size_t load_min, size_t splice_min)
{
	splice_now = splice_min;
	jsonfast_set_thresholds(load_min, splice_min);
}

/* Length of an error text without its " near '<token>'" context. */
static size_t text_without_context(const char *t)
{
	const char *near = strstr(t, " near '");

	return near ? (size_t)(near - t) : strlen(t);
}

/* jansson's error text quotes the token it stopped at if at most 20 bytes;
 * jsonfast's may stop at a placeholder (over 20) for a string of the splice
 * threshold or more: under 21, the texts are the same but that context. */
static void assert_errors_same(const json_error_t *a, const json_error_t *b)
{
	size_t n = text_without_context(a->text);

	/* (on success, the code byte is not set) */
	if (b->text[0])
		ck_assert_int_eq(json_error_code(a), json_error_code(b));
	if (splice_now > 20)
		ck_assert_str_eq(a->text, b->text);
	else
		ck_assert_msg(n == text_without_context(b->text) && memcmp(a->text, b->text, n) == 0,
			      "\"%s\" is not \"%s\" (context aside)", a->text, b->text);
	ck_assert_str_eq(a->source, b->source);
	ck_assert_int_eq(a->line, b->line);
	ck_assert_int_eq(a->column, b->column);
	ck_assert_int_eq(a->position, b->position);
}

/* jsonfast_loadb and json_loadb agree on buf. Returns true if jsonfast took
 * the fast path. */
static bool assert_load_same(const char *buf, size_t len, size_t flags)
{
	json_error_t want_err, got_err;
	json_auto_t *want = json_loadb(buf, len, flags, &want_err);
	size_t before = jsonfast_test_spliced();
	json_auto_t *got = jsonfast_loadb(buf, len, flags, &got_err);
	bool fast = jsonfast_test_spliced() > before;
	json_auto_t *again = jsonfast_loadb(buf, len, flags, NULL);

	ck_assert_msg(!want == !got, "jansson %s, jsonfast %s on \"%.*s\" (flags %#zx): %s / %s",
		      want ? "accepts" : "refuses", got ? "accepts" : "refuses", (int)(len > 200 ? 200 : len),
		      buf, flags, want_err.text, got_err.text);
	assert_errors_same(&got_err, &want_err);
	if (want)
		ck_assert_msg(json_equal(want, got), "values differ on \"%.*s\"", (int)len, buf);
	else
		ck_assert(!fast);
	ck_assert(!again == !want);
	return fast;
}

/* ---- dump ------------------------------------------------------------- */

/* Texts loaded by jansson (JSON_DECODE_ANY | JSON_ALLOW_NUL), then dumped. */
static const char *const dump_rows[] = {
	"null", "true", "false", "0", "-1", "9223372036854775807", "-9223372036854775808",
	"0.1", "1e300", "-0.0", "1.0", "3.141592653589793", "1e-300",
	"\"\"", "[]", "{}", "[[]]", "{\"\":{}}", "[1,[2,[3,[4]]],{}]",
	"\"a/b\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u0000\\u0001\\u001f\\u007f\\u0020\"",
	"\"\\u00e9\\u4e2d\\ud83d\\ude00\"", "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"",
	"{\"b\":1,\"a\":2,\"c\":[true,false,null]}", "{\"k\\n\\u0001\":\"v\\t\"}",
	"[\"abcdefgh\",\"abcdefg\\\"\",\"abcdefghijklmnop\\\\qrstuvwxyz0123456789\"]",
	"\"0123456789abcdef\\u0000ghijklmnop\\nqrstuvwx\\u00e9yz\"",
	"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"stdout_b64\":\"aGVsbG8K\",\"stdout_text\":\"hello\\n\"}}",
};

START_TEST(test_dump_rows)
{
	json_error_t err;
	json_auto_t *v = json_loads(dump_rows[_i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);

	ck_assert_msg(v != NULL, "row %d: %s", _i, err.text);
	assert_dump_same(v);
}
END_TEST

/* Every byte value in a string, alone and among plain bytes at each
 * alignment of the 8-byte scan. */
START_TEST(test_dump_every_byte)
{
	for (unsigned b = 0; b < 0x80; b++) {
		for (size_t at = 0; at < 17; at++) {
			char s[40];
			json_auto_t *v = NULL;

			memset(s, 'x', sizeof(s));
			s[at] = (char)b;
			v = json_stringn_nocheck(s, sizeof(s));
			assert_dump_same(v);
		}
	}
}
END_TEST

/* UTF-8 of 2, 3 and 4 bytes, valid and not, in values and keys (a value that
 * is not UTF-8 fails both; a key that is not leaves jansson's partial text). */
static const char *const utf8_rows[] = {
	"\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf",
	"\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80",
	"\xf5\x80\x80\x80", "\xff", "\x80", "\xbf", "\xc3", "\xe4\xb8", "\xf0\x9f\x98", "\xc3\x28",
	"\xe4\x28\xad", "ab\n\"\xc3", "a\tb\xf0\x9f\x98\x80z\x01\xe4", "0123456789\n0123456789\xff" "0123",
};

START_TEST(test_dump_utf8)
{
	char buf[64];
	size_t n;

	for (size_t pad = 0; pad < 9; pad++) {
		json_auto_t *o = json_object();
		json_auto_t *a = json_array();

		n = (size_t)snprintf(buf, sizeof(buf), "%.*s%s", (int)pad, "........", utf8_rows[_i]);
		json_array_append_new(a, json_stringn_nocheck(buf, n));
		json_object_setn_new_nocheck(o, buf, n, json_integer(1));
		json_object_set_new(o, "next", json_true());
		assert_dump_same(a);
		assert_dump_same(o);
		assert_dump_same(json_array_get(a, 0));
	}
}
END_TEST

static json_t *random_string(void)
{
	static const char *const pieces[] = {
		"a", "Z", " ", "/", "\"", "\\", "\n", "\x01", "\x1f", "\x7f", "\xc3\xa9",
		"\xe4\xb8\xad", "\xf0\x9f\x98\x80", "0123456789abcdef", "",
	};
	char buf[256];
	size_t n = 0, k = rng() % 24;

	for (size_t i = 0; i < k; i++) {
		const char *p = pieces[rng() % ELEMENTSOF(pieces)];
		size_t l = strlen(p);

		memcpy(buf + n, p, l);
		n += l;
	}
	if (rng() % 8 == 0)
		buf[n++] = '\0';
	return json_stringn(buf, n);
}

static json_t *random_value(int depth)
{
	unsigned kind = rng() % (depth >= RANDOM_DEPTH ? 7 : 9);
	json_t *v;

	switch (kind) {
	case 0: return json_null();
	case 1: return json_true();
	case 2: return json_false();
	case 3: return json_integer((json_int_t)((uint64_t)rng() << 32 | rng()));
	case 4: return json_real((double)(int32_t)rng() / ((rng() % 1000) + 1));
	case 5:
	case 6: return random_string();
	case 7:
		v = json_array();
		for (unsigned i = rng() % RANDOM_WIDTH; i > 0; i--)
			json_array_append_new(v, random_value(depth + 1));
		return v;
	default:
		v = json_object();
		for (unsigned i = rng() % RANDOM_WIDTH; i > 0; i--) {
			json_auto_t *k = random_string();

			json_object_setn_new(v, json_string_value(k), json_string_length(k),
					     random_value(depth + 1));
		}
		return v;
	}
}

START_TEST(test_dump_random)
{
	rng_state = 0x2545f491;
	for (int i = 0; i < RANDOM_ROUNDS; i++) {
		json_auto_t *v = random_value(0);

		assert_dump_same(v);
	}
}
END_TEST

/* Keys in insertion order, also after deletions and re-insertions. */
START_TEST(test_dump_key_order)
{
	json_auto_t *o = json_object();
	char key[16];

	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "k%d", (i * 37) % 100);
		json_object_set_new(o, key, json_integer(i));
	}
	json_object_del(o, "k5");
	json_object_set_new(o, "k5", json_string("again"));
	json_object_set_new(o, "k7", json_string("replaced"));
	assert_dump_same(o);
}
END_TEST

/* A reference cycle fails both; nesting past the depth limit goes to jansson. */
START_TEST(test_dump_cycle_and_depth)
{
	json_t *a = json_array(), *b = json_array();
	json_auto_t *deep = json_array();
	json_t *cur = deep;

	json_array_append(a, b);
	json_array_append(b, a);
	assert_dump_same(a);
	json_array_clear(b);
	json_decref(a);
	json_decref(b);

	for (int i = 0; i < DEEP_NESTING; i++) {
		json_t *next = json_object();

		if (json_is_array(cur))
			json_array_append_new(cur, next);
		else
			json_object_set_new(cur, "k", next);
		cur = next;
	}
	json_object_set_new(cur, "s", json_string("bottom\n"));
	assert_dump_same(deep);
}
END_TEST

/* A long string: the whole value is one memcpy-sized run. */
START_TEST(test_dump_long_string)
{
	size_t n = 1 << 20;
	_cleanup_free_ char *s = malloc(n);
	json_auto_t *o = json_object();

	for (size_t i = 0; i < n; i++)
		s[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
	json_object_set_new(o, "content_b64", json_stringn(s, n));
	s[n / 2] = '\n';
	s[n / 3] = '"';
	json_object_set_new(o, "stdout_text", json_stringn(s, n));
	assert_dump_same(o);
}
END_TEST

/* ---- load ------------------------------------------------------------- */

struct load_row {
	const char *text;
	size_t flags;
	bool fast;  /* with TINY_SPLICE_MIN, the fast path must be taken */
	size_t len; /* 0: strlen(text) */
};
/* A row whose text holds a NUL. */
#define ROW(text, flags, fast) { text, flags, fast, 0 }
#define NUL_ROW(lit, flags) { lit, flags, false, sizeof(lit) - 1 }
#define ANY JSON_DECODE_ANY
#define DUP JSON_REJECT_DUPLICATES
#define NUL JSON_ALLOW_NUL

static const struct load_row load_rows[] = {
	ROW("{\"a\":\"hello world\"}", 0, true),
	ROW("{\"a\" : \"hello world\" , \"b\":[\"xyzzy\", 1]}", 0, true),
	ROW(" [ \"hello world\" ]\r\n\t ", 0, true),
	ROW("[\"\\u00e9\\u4e2d\\ud83d\\ude00 long text\"]", 0, true),
	ROW("[\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t long\"]", 0, true),
	ROW("[\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 long\"]", 0, true),
	ROW("[\"\\uD83D\\uDE00\\uFFFF\\u0080 upper hex\"]", 0, true),
	ROW("[\"abc\\ud83dxyz long\"]", 0, false),
	ROW("[\"abc\\ud83d\" , \"x\"]", 0, false),
	ROW("[\"abc\\ude00 long\"]", 0, false),
	ROW("[\"\\ud83d\\u0041 long\"]", 0, false),
	ROW("[\"\\ud83d\\ud83d long\"]", 0, false),
	ROW("[\"\\ud83d\\n long\"]", 0, false),
	ROW("[\"x\\u0000y long\"]", 0, false),
	ROW("[\"x\\u0000y long\"]", NUL, true),
	ROW("{\"k\\u0000\":\"x\\u0000y long\"}", NUL, false),
	ROW("[\"\xc3\x28 invalid\"]", 0, false),
	ROW("[\"\xed\xa0\x80 surrogate in utf-8\"]", 0, false),
	ROW("[\"\xc0\xaf overlong\"]", 0, false),
	ROW("[\"\xe0\x80\xaf overlong\"]", 0, false),
	ROW("[\"\xf4\x90\x80\x80 too big\"]", 0, false),
	ROW("[\"truncated \xe4\xb8\"]", 0, false),
	ROW("[\"\xff\xfe bad bytes\"]", 0, false),
	ROW("[\"ab\tcd raw tab\"]", 0, false),
	ROW("[\"ab\ncd raw newline\"]", 0, false),
	ROW("[\"ab\x7f" "cd del is fine\"]", 0, true),
	ROW("[\"\\x long\"]", 0, false),
	ROW("[\"\\u12g4 long\"]", 0, false),
	ROW("[\"long \\u123\"]", 0, false),
	ROW("[\"\\\xc3\xa9 long\"]", 0, false),
	ROW("{\"longkeyXXXX\":1,\"longkeyXXXX\":2}", DUP, false),
	ROW("{\"longkeyXXXX\":\"value one\",\"longkeyXXXX\":\"value two\"}", DUP, false),
	/* The second value replaces the first: its placeholder goes missing. */
	ROW("{\"longkeyXXXX\":\"value one\",\"longkeyXXXX\":\"value two\"}", 0, false),
	ROW("{\"longkeyXXXX\" \n:\t\"value long\"}", DUP, true),
	ROW("\"top level long string\"", ANY, true),
	ROW("\"top level long string\"", 0, false),
	ROW("  \"top level\\nlong\"  ", ANY, true),
	ROW("[[[\"deep long string\"]], {\"k\":[\"x long string\"]}, \"\"]", 0, true),
	ROW("[\"long string without end", 0, false),
	ROW("[\"long string\", \"without end", 0, false),
	ROW("{\"a\":\"long string\"", 0, false),
	ROW("[\"long string\"] x", 0, false),
	ROW("[\"long string\"] \"another long\"", 0, false),
	ROW("[\"long string\"] [\"another long\"]", 0, false),
	ROW("[\"long string\": 1]", 0, false),
	ROW("{\"long string\" 1}", 0, false),
	ROW("{\"long string\"}", 0, false),
	ROW("{\"a\":\"long string\"}   trailing", JSON_DISABLE_EOF_CHECK, false),
	NUL_ROW("[\"long string\"]\0", 0),
	NUL_ROW("[\"long\0string\"]", 0),
	NUL_ROW("[\"long string\", \"x\0y\"]", JSON_ALLOW_NUL),
	ROW("[\"long string\", 1, -0.5e10, 123456789012345678901234567890]", 0, false),
	ROW("[\"long string\", 1, -0.5e10, 12]", JSON_DECODE_INT_AS_REAL, true),
	ROW("[\"long string\", tru]", 0, false),
	ROW("[\"long string\",]", 0, false),
	ROW("[\"long string\" \"other\"]", 0, false),
	/* A long key without its ':' is a key still: jansson refuses the
	 * duplicate (or the NUL in it) before it looks for the ':'. */
	ROW("{\"long key here\":\"value one\",\"long key here\"x}", JSON_REJECT_DUPLICATES, false),
	ROW("{\"long key here\":1, \"long \\u0000 key\" 2}", JSON_ALLOW_NUL, false),
	ROW("[{\"a\":[\"long value\",{}], \"long key here\" 1}]", 0, false),
	ROW("", 0, false),
	ROW("  ", ANY, false),
	ROW("\"", ANY, false),
	ROW("[\"\"]", 0, false),
	ROW("[\"abc\", \"abcd\", \"\\\\\\\\\", \"\\\\\\\"\"]", 0, true),
	ROW("[\"ends with backslash pair \\\\\"]", 0, true),
	ROW("[\"jsonfast:0000000000000000:0\", \"long one\"]", 0, true),
};

static size_t load_len(const struct load_row *row)
{
	return row->len ? row->len : strlen(row->text);
}

START_TEST(test_load_rows)
{
	const struct load_row *row = &load_rows[_i];
	size_t len = load_len(row);
	bool fast;

	set_thresholds(0, TINY_SPLICE_MIN);
	fast = assert_load_same(row->text, len, row->flags);
	ck_assert_msg(fast == row->fast, "row %d: fast path %s", _i, fast ? "taken" : "not taken");
	set_thresholds(0, 0);
	assert_load_same(row->text, len, row->flags);
	set_thresholds(0, 1);
	assert_load_same(row->text, len, row->flags | JSON_ALLOW_NUL);
	set_thresholds(JSONFAST_LOAD_MIN_BYTES, JSONFAST_SPLICE_MIN_BYTES);
	ck_assert(!assert_load_same(row->text, len, row->flags));
}
END_TEST

/* More long strings than one digit of placeholder index. */
START_TEST(test_load_many_strings)
{
	char buf[4096];
	size_t n = 0;

	buf[n++] = '[';
	for (int i = 0; i < 150; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s\"string number %d\"", i ? "," : "", i);
	buf[n++] = ']';
	set_thresholds(0, TINY_SPLICE_MIN);
	ck_assert(assert_load_same(buf, n, 0));
}
END_TEST

/* Random values, dumped by jansson, loaded back by both. */
START_TEST(test_load_random)
{
	rng_state = 0x9e3779b9;
	set_thresholds(0, TINY_SPLICE_MIN);
	for (int i = 0; i < RANDOM_ROUNDS; i++) {
		json_auto_t *v = random_value(0);
		_cleanup_free_ char *s = json_dumps(v, DUMP_FLAGS);

		ck_assert_ptr_nonnull(s);
		assert_load_same(s, strlen(s), JSON_DECODE_ANY | JSON_ALLOW_NUL);
		assert_load_same(s, strlen(s), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES);
		/* Cut short, inside whatever is there. */
		assert_load_same(s, strlen(s) * 2 / 3, JSON_DECODE_ANY | JSON_ALLOW_NUL);
	}
}
END_TEST

/* The shipped thresholds: a files.write-like frame takes the fast path and a
 * long key (never spliced) still works. */
START_TEST(test_load_big_frame)
{
	size_t n = BIG_CONTENT_BYTES;
	_cleanup_free_ char *buf = malloc(n + 4096);
	size_t len = 0;
	char *key = malloc(LONG_KEY_BYTES + 1);
	json_auto_t *v = NULL;

	memset(key, 'k', LONG_KEY_BYTES);
	key[LONG_KEY_BYTES] = '\0';
	set_thresholds(JSONFAST_LOAD_MIN_BYTES, JSONFAST_SPLICE_MIN_BYTES);
	len = (size_t)sprintf(buf, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"files.write\","
			      "\"params\":{\"sandbox\":\"sb-1\",\"path\":\"/tmp/x\",\"content_b64\":\"");
	for (size_t i = 0; i < n; i++)
		buf[len++] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
	len += (size_t)sprintf(buf + len, "\"}}");
	ck_assert(assert_load_same(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY));
	v = jsonfast_loadb(buf, len, 0, NULL);
	ck_assert_uint_eq(json_string_length(json_object_get(json_object_get(v, "params"), "content_b64")), n);

	/* The same content as a key, followed by whitespace and ':'. */
	len = (size_t)snprintf(buf, n + 4096, "{\"%s\" \n: \"%s\", \"b\": \"%s\\n\"}", key, key, key);
	ck_assert(assert_load_same(buf, len, JSON_REJECT_DUPLICATES));
	free(key);
}
END_TEST

/* ---- scan ------------------------------------------------------------- */

/* Values (keys included) and depth of a parsed value, as jsonfast_scan
 * must count them. */
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

/* jsonfast_scan with these limits. */
static int scan(const char *buf, size_t len, size_t values, size_t depth, size_t structure,
		struct jsonfast_shape *ret)
{
	struct jsonfast_limits lim = { .values = values, .depth = depth, .structure_bytes = structure };

	return jsonfast_scan(buf, len, &lim, ret);
}

/* jsonfast_scan of text jansson accepts counts what jansson built, and its
 * limits refuse exactly past those counts. */
static bool assert_scan_counts(const char *buf, size_t len, bool must_load)
{
	json_auto_t *v = json_loadb(buf, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
	struct jsonfast_shape shape;
	size_t values = 0, depth = 0, structure;

	if (!v && !must_load)
		return false;  /* e.g. a random key holding NUL, which jansson refuses */
	ck_assert_msg(v != NULL, "test text refused: %.*s", (int)len, buf);
	count_value(v, 0, &values, &depth);
	ck_assert_int_eq(scan(buf, len, SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape), 0);
	ck_assert_msg(shape.values == values && shape.depth == depth,
		      "scan says %zu values, depth %zu; jansson %zu, %zu: %.*s", shape.values,
		      shape.depth, values, depth, (int)(len > 200 ? 200 : len), buf);
	ck_assert_uint_eq(shape.position, len);
	structure = shape.structure_bytes;
	ck_assert_uint_le(structure, len);
	ck_assert_int_eq(scan(buf, len, values, depth, structure, &shape), 0);
	if (values > 0)
		ck_assert_int_eq(scan(buf, len, values - 1, depth, SIZE_MAX, &shape), -E2BIG);
	if (depth > 0) {
		ck_assert_int_eq(scan(buf, len, values, depth - 1, SIZE_MAX, &shape), -E2BIG);
		ck_assert_uint_eq(shape.depth, depth);
	}
	if (structure > 0)
		ck_assert_int_eq(scan(buf, len, SIZE_MAX, SIZE_MAX, structure - 1, &shape), -E2BIG);
	return true;
}

static const char *const scan_rows[] = {
	"0", "-1.5e+10", "true", "null", "\"\"", "[]", "{}", "[[]]", "[[],{}]",
	"{\"a\":[1,\"x\",true,null,false]}", " [ 1 , 2 ,\t3 ]\r\n",
	"[\"[\", \"{\", \"]]]\", \"}\", \"\\\"[\", \"\\\\\", \"\\\\\\\"{\"]",
	"{\"k\\\"]\":{\"\\u0022\":[-0.0,1E5,2e-3]},\"\":\"\\\\\"}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"files.write\",\"params\":{\"files\":[{\"path\":\"a\",\"content_b64\":\"eA==\"}]}}",
};

START_TEST(test_scan_rows)
{
	assert_scan_counts(scan_rows[_i], strlen(scan_rows[_i]), true);
}
END_TEST

START_TEST(test_scan_random)
{
	int counted = 0;

	rng_state = 0x2545f491;
	for (int i = 0; i < RANDOM_ROUNDS; i++) {
		json_auto_t *v = random_value(0);
		_cleanup_free_ char *s = json_dumps(v, DUMP_FLAGS);
		_cleanup_free_ char *pretty = json_dumps(v, JSON_ENCODE_ANY | JSON_INDENT(2));

		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_nonnull(pretty);
		counted += assert_scan_counts(s, strlen(s), false);
		counted += assert_scan_counts(pretty, strlen(pretty), false);
	}
	ck_assert_int_ge(counted, RANDOM_ROUNDS / 2);
}
END_TEST

/* Text jansson refuses is still scanned to its end or to a limit, never
 * past len: an unclosed string, stray closers, garbage. */
START_TEST(test_scan_bad_text)
{
	static const char *const rows[] = { "\"abc", "]]]]", "[\"\\", "[1,2", "}{", "\x01\xff", "" };
	struct jsonfast_shape shape;

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		ck_assert_int_eq(scan(rows[i], strlen(rows[i]), SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape), 0);
		ck_assert_uint_eq(shape.position, strlen(rows[i]));
	}
	/* Only len bytes are read: the quote after them is not. */
	ck_assert_int_eq(scan("[\"ab\"]", 3, SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape), 0);
	ck_assert_uint_eq(shape.values, 2);
	ck_assert_uint_eq(shape.position, 3);
}
END_TEST

/* The scan stops at the limit: a flat array of a million zeros is refused
 * after max_values + 1 values, the position just past the value too many. */
START_TEST(test_scan_stops_at_limit)
{
	size_t n = 1000000, len = 0;
	_cleanup_free_ char *buf = malloc(2 * n + 2);
	struct jsonfast_shape shape;

	buf[len++] = '[';
	for (size_t i = 0; i < n; i++) {
		buf[len++] = '0';
		buf[len++] = ',';
	}
	buf[len - 1] = ']';
	ck_assert_int_eq(scan(buf, len, 1000, 64, SIZE_MAX, &shape), -E2BIG);
	ck_assert_uint_eq(shape.values, 1001);
	/* position: where the value over the limit starts (the 1000th zero). */
	ck_assert_uint_eq(shape.position, 1 + 999 * 2);
	ck_assert_int_eq(scan(buf, len, n + 1, 64, SIZE_MAX, &shape), 0);
	ck_assert_uint_eq(shape.values, n + 1);
	/* Nesting: refused at the first bracket too deep. */
	memset(buf, '[', 100);
	ck_assert_int_eq(scan(buf, 100, SIZE_MAX, 64, SIZE_MAX, &shape), -E2BIG);
	ck_assert_uint_eq(shape.depth, 65);
	ck_assert_uint_eq(shape.position, 64);
}
END_TEST

/* Structure bytes: string values are not counted (quotes included), keys
 * and everything else are. */
START_TEST(test_scan_structure)
{
	static const char text[] = "{\"key\" : \"value\", \"n\":[12, \"x\"]}";
	struct jsonfast_shape shape;

	ck_assert_int_eq(scan(text, strlen(text), SIZE_MAX, SIZE_MAX, SIZE_MAX, &shape), 0);
	ck_assert_uint_eq(shape.structure_bytes, strlen(text) - strlen("\"value\"") - strlen("\"x\""));
	/* Refused at the token that passes the limit: here the 'n' key. */
	ck_assert_int_eq(scan(text, strlen(text), SIZE_MAX, SIZE_MAX, 11, &shape), -E2BIG);
	ck_assert_uint_eq(shape.position, 18);
	/* A long string value costs nothing; long whitespace does. */
	{
		size_t n = 1 << 20;
		_cleanup_free_ char *buf = malloc(n + 8);

		buf[0] = '"';
		memset(buf + 1, 'a', n);
		buf[n + 1] = '"';
		ck_assert_int_eq(scan(buf, n + 2, SIZE_MAX, SIZE_MAX, 0, &shape), 0);
		memset(buf, ' ', n);
		buf[n] = '0';
		ck_assert_int_eq(scan(buf, n + 1, SIZE_MAX, SIZE_MAX, 4096, &shape), -E2BIG);
		/* the 4097th space, at offset 4096 */
		ck_assert_uint_eq(shape.position, 4096);
	}
}
END_TEST

static Suite *jsonfast_suite(void)
{
	Suite *s = suite_create("jsonfast");
	TCase *tc;

	tc = tcase_create("dump is json_dumps");
	tcase_add_loop_test(tc, test_dump_rows, 0, ELEMENTSOF(dump_rows));
	tcase_add_test(tc, test_dump_every_byte);
	tcase_add_loop_test(tc, test_dump_utf8, 0, ELEMENTSOF(utf8_rows));
	tcase_add_test(tc, test_dump_random);
	tcase_add_test(tc, test_dump_key_order);
	tcase_add_test(tc, test_dump_cycle_and_depth);
	tcase_add_test(tc, test_dump_long_string);
	suite_add_tcase(s, tc);

	tc = tcase_create("loadb is json_loadb");
	tcase_add_loop_test(tc, test_load_rows, 0, ELEMENTSOF(load_rows));
	tcase_add_test(tc, test_load_many_strings);
	tcase_add_test(tc, test_load_random);
	tcase_add_test(tc, test_load_big_frame);
	suite_add_tcase(s, tc);

	tc = tcase_create("scan counts what jansson builds");
	tcase_add_loop_test(tc, test_scan_rows, 0, ELEMENTSOF(scan_rows));
	tcase_add_test(tc, test_scan_random);
	tcase_add_test(tc, test_scan_bad_text);
	tcase_add_test(tc, test_scan_stops_at_limit);
	tcase_add_test(tc, test_scan_structure);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(jsonfast_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
