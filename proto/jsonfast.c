/* jsonfast.c — see jsonfast.h. The jansson 2.14 behaviour matched here:
 *  - dump_string: a string is iterated as UTF-8 (utf8_iterate; an invalid
 *    sequence fails the dump), '"' '\\' and bytes < 0x20 are escaped (\b \f
 *    \n \r \t, else \u00XX with upper-case hex), everything else is raw.
 *    Plain bytes are written only when an escape follows or at the end, and
 *    a key's failure is ignored by do_dump: a key with invalid UTF-8 leaves
 *    '"' and the text up to its last escape, then the ':' follows.
 *  - objects iterate in insertion order (json_object_iter), integers are
 *    "%" JSON_INTEGER_FORMAT, reals go through json_dumps itself.
 *  - the lexer takes a string's raw bytes as strict UTF-8 (utf8_check_first
 *    and utf8_check_full), refuses raw bytes < 0x20, accepts the escapes
 *    \" \\ \/ \b \f \n \r \t \uXXXX, pairs surrogates and refuses lone ones,
 *    and parse_value refuses a decoded NUL without JSON_ALLOW_NUL.
 * Errors are always jansson's own, from text that is the original up to
 * where jansson stops, but for long string values it had already read
 * (replaced by placeholders): the reduced text's error (an admitted frame
 * with trailing garbage, a duplicate key at its end), or the reduced text
 * up to and including a long literal jsonfast refuses (verbatim), or up to
 * the end from an unclosed one; its position, line and column are mapped
 * back to the original. The original is never lexed whole by jansson once
 * it is split, but where jsonfast is unsure (OOM, a placeholder clash, a
 * NUL byte anywhere, which jansson counts or drops by context, nesting
 * over CUTS_MAX_DEPTH): then json_loadb decides on it. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "jsonfast.h"

/* "\"jsonfast:" + 16 hex digits + ":" + index + "\"" */
#define PLACEHOLDER_TAG "jsonfast:"
#define PLACEHOLDER_MAX 48
#define INTEGER_TEXT_MAX 32

static size_t load_min = JSONFAST_LOAD_MIN_BYTES;
static size_t splice_min = JSONFAST_SPLICE_MIN_BYTES;
static uint64_t nonce;
static uint64_t spliced_loads;

void jsonfast_set_thresholds(size_t new_load_min, size_t new_splice_min)
{
	load_min = new_load_min;
	splice_min = new_splice_min;
}

size_t jsonfast_test_spliced(void)
{
	return (size_t)__atomic_load_n(&spliced_loads, __ATOMIC_RELAXED);
}

/* ---- bytes ---------------------------------------------------------------- */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* True if some byte of w is below n (n <= 0x80). */
static inline bool word_has_less(uint64_t w, uint8_t n)
{
	return ((w - ONES * n) & ~w & HIGHS) != 0;
}

static inline bool word_has_byte(uint64_t w, uint8_t b)
{
	return word_has_less(w ^ (ONES * b), 1);
}

/* True if the 8 bytes at p are ASCII >= 0x20 and none is '\\' (or '"' when
 * quote): bytes that need neither an escape nor UTF-8 decoding. */
static inline bool word_is_plain(const unsigned char *p, bool quote)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w));
	if (w & HIGHS)
		return false;
	if (word_has_less(w, 0x20) || word_has_byte(w, '\\'))
		return false;
	return !quote || !word_has_byte(w, '"');
}

/* Length of the UTF-8 sequence at p (p[0] >= 0x80) as jansson's
 * utf8_check_first/utf8_check_full accept it, or 0. */
static size_t utf8_seq_len(const unsigned char *p, size_t avail)
{
	unsigned char u = p[0];
	size_t n;
	uint32_t v;

	if (u >= 0xc2 && u <= 0xdf) {
		n = 2;
		v = u & 0x1f;
	} else if (u >= 0xe0 && u <= 0xef) {
		n = 3;
		v = u & 0x0f;
	} else if (u >= 0xf0 && u <= 0xf4) {
		n = 4;
		v = u & 0x07;
	} else {
		return 0;
	}
	if (n > avail)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
		v = (v << 6) | (p[i] & 0x3f);
	}
	if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	if ((n == 3 && v < 0x800) || (n == 4 && v < 0x10000))
		return 0;
	return n;
}

/* ---- dump ----------------------------------------------------------------- */

struct out {
	char *p;
	size_t len, cap;
	bool oom;
};

enum {
	DUMP_OK = 0,
	DUMP_FAIL = -1,      /* json_dumps fails too */
	DUMP_TOO_DEEP = -2,  /* leave the whole value to json_dumps */
};

static bool out_reserve(struct out *o, size_t n)
{
	size_t cap;
	char *p;

	if (o->oom)
		return false;
	if (n <= o->cap - o->len)
		return true;
	cap = o->cap ? o->cap : 256;
	while (cap - o->len < n) {
		if (cap > SIZE_MAX / 2) {
			o->oom = true;
			return false;
		}
		cap *= 2;
	}
	p = realloc(o->p, cap);
	if (!p) {
		o->oom = true;
		return false;
	}
	o->p = p;
	o->cap = cap;
	return true;
}

static void out_put(struct out *o, const void *p, size_t n)
{
	if (out_reserve(o, n)) {
		memcpy(o->p + o->len, p, n);
		o->len += n;
	}
}

static void out_escape(struct out *o, unsigned char c)
{
	static const char hex[] = "0123456789ABCDEF";
	char seq[6] = { '\\', 0 };
	size_t n = 2;

	switch (c) {
	case '"': seq[1] = '"'; break;
	case '\\': seq[1] = '\\'; break;
	case '\b': seq[1] = 'b'; break;
	case '\f': seq[1] = 'f'; break;
	case '\n': seq[1] = 'n'; break;
	case '\r': seq[1] = 'r'; break;
	case '\t': seq[1] = 't'; break;
	default:
		memcpy(seq + 1, "u00", 3);
		seq[4] = hex[c >> 4];
		seq[5] = hex[c & 0xf];
		n = 6;
	}
	out_put(o, seq, n);
}

/* Writes s as a JSON string. On invalid UTF-8, leaves what jansson's
 * dump_string leaves ('"' and the text up to the last escape) and returns
 * DUMP_FAIL. */
static int dump_string(struct out *o, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n, *run = p;

	if (!out_reserve(o, n + 2))
		return DUMP_FAIL;
	o->p[o->len++] = '"';
	while (p < end) {
		unsigned char c;

		while (end - p >= 8 && word_is_plain(p, true))
			p += 8;
		if (p == end)
			break;
		c = *p;
		if (c >= 0x80) {
			size_t k = utf8_seq_len(p, (size_t)(end - p));

			if (k == 0)
				return DUMP_FAIL;
			p += k;
		} else if (c < 0x20 || c == '"' || c == '\\') {
			out_put(o, run, (size_t)(p - run));
			out_escape(o, c);
			run = ++p;
		} else {
			p++;
		}
	}
	out_put(o, run, (size_t)(p - run));
	out_put(o, "\"", 1);
	return o->oom ? DUMP_FAIL : DUMP_OK;
}

static int dump_real(struct out *o, const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

	if (!s)
		return DUMP_FAIL;
	out_put(o, s, strlen(s));
	free(s);
	return DUMP_OK;
}

static int dump_value(struct out *o, const json_t *v, int depth);

static int dump_array(struct out *o, const json_t *v, int depth)
{
	size_t n = json_array_size(v);
	int r;

	out_put(o, "[", 1);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			out_put(o, ",", 1);
		r = dump_value(o, json_array_get(v, i), depth + 1);
		if (r < 0)
			return r;
	}
	out_put(o, "]", 1);
	return DUMP_OK;
}

static int dump_object(struct out *o, const json_t *v, int depth)
{
	/* jansson's iterator API takes a non-const object; it does not write. */
	json_t *obj = (json_t *)(uintptr_t)v;
	int r;

	out_put(o, "{", 1);
	for (void *it = json_object_iter(obj), *first = it; it; it = json_object_iter_next(obj, it)) {
		if (it != first)
			out_put(o, ",", 1);
		/* jansson ignores a key's failure: so do we (see the top). */
		(void)dump_string(o, json_object_iter_key(it), json_object_iter_key_len(it));
		out_put(o, ":", 1);
		r = dump_value(o, json_object_iter_value(it), depth + 1);
		if (r < 0)
			return r;
	}
	out_put(o, "}", 1);
	return DUMP_OK;
}

static int dump_value(struct out *o, const json_t *v, int depth)
{
	char num[INTEGER_TEXT_MAX];
	int n;

	if (!v)
		return DUMP_FAIL;
	if (depth > JSONFAST_DUMP_MAX_DEPTH)
		return DUMP_TOO_DEEP;
	switch (json_typeof(v)) {
	case JSON_NULL:
		out_put(o, "null", 4);
		break;
	case JSON_TRUE:
		out_put(o, "true", 4);
		break;
	case JSON_FALSE:
		out_put(o, "false", 5);
		break;
	case JSON_INTEGER:
		n = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		if (n < 0 || (size_t)n >= sizeof(num))
			return DUMP_FAIL;
		out_put(o, num, (size_t)n);
		break;
	case JSON_REAL:
		return dump_real(o, v);
	case JSON_STRING:
		return dump_string(o, json_string_value(v), json_string_length(v));
	case JSON_ARRAY:
		return dump_array(o, v, depth);
	case JSON_OBJECT:
		return dump_object(o, v, depth);
	}
	return o->oom ? DUMP_FAIL : DUMP_OK;
}

/* json_dumps itself, in a buffer with room for extra. */
static char *dump_by_jansson(const json_t *v, size_t extra, size_t *ret_len)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n;
	char *p;

	if (!s)
		return NULL;
	n = strlen(s);
	if (extra > SIZE_MAX - n - 1) {
		free(s);
		return NULL;
	}
	p = realloc(s, n + extra + 1);
	if (!p) {
		free(s);
		return NULL;
	}
	*ret_len = n;
	return p;
}

char *jsonfast_dump(const json_t *v, size_t extra, size_t *ret_len)
{
	struct out o = { 0 };
	int r = dump_value(&o, v, 0);
	char *p;

	if (r == DUMP_OK && !o.oom && extra < SIZE_MAX - o.len - 1) {
		p = realloc(o.p, o.len + extra + 1);
		if (p) {
			p[o.len] = '\0';
			*ret_len = o.len;
			return p;
		}
	}
	free(o.p);
	if (r == DUMP_TOO_DEEP)
		return dump_by_jansson(v, extra, ret_len);
	return NULL;
}

/* ---- scan ----------------------------------------------------------------- */

enum scan_class {
	SCAN_OTHER = 0,  /* whitespace, ',' ':' and bytes jansson refuses here */
	SCAN_WORD,       /* a byte of a number or a literal */
	SCAN_QUOTE,
	SCAN_OPEN,
	SCAN_CLOSE,
};

static inline enum scan_class scan_class_of(unsigned char c)
{
	if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '-' ||
	    c == '+' || c == '.')
		return SCAN_WORD;
	switch (c) {
	case '"': return SCAN_QUOTE;
	case '[': case '{': return SCAN_OPEN;
	case ']': case '}': return SCAN_CLOSE;
	default: return SCAN_OTHER;
	}
}

static size_t find_close(const char *buf, size_t from, size_t len);
static bool colon_follows(const char *buf, size_t off, size_t len);

int jsonfast_scan(const char *buf, size_t len, const struct jsonfast_limits *lim,
		  struct jsonfast_shape *ret)
{
	const unsigned char *p = (const unsigned char *)buf;
	size_t values = 0, depth = 0, deepest = 0, strings = 0, i = 0, start, token = 0;
	int r = 0;

	while (i < len) {
		token = i;
		switch (scan_class_of(p[i])) {
		case SCAN_WORD:
			/* One number or literal: a run of word bytes. */
			values++;
			while (++i < len && scan_class_of(p[i]) == SCAN_WORD)
				;
			break;
		case SCAN_QUOTE:
			values++;
			start = i;
			i = find_close(buf, i + 1, len);
			/* An unclosed string: nothing more to count. */
			if (i < len)
				i++;
			/* A key is structure; a value's literal is not. */
			if (!colon_follows(buf, i, len))
				strings += i - start;
			break;
		case SCAN_OPEN:
			values++;
			if (++depth > deepest)
				deepest = depth;
			i++;
			break;
		case SCAN_CLOSE:
			if (depth > 0)
				depth--;
			i++;
			break;
		default:
			i++;
			break;
		}
		if (values > lim->values || deepest > lim->depth || i - strings > lim->structure_bytes) {
			r = -E2BIG;
			break;
		}
	}
	*ret = (struct jsonfast_shape){ .values = values, .depth = deepest,
					.structure_bytes = i - strings, .position = r ? token : i };
	return r;
}

/* ---- load ----------------------------------------------------------------- */

/* The texts and decoded strings the load path holds go through jansson's
 * allocator, so whoever counts jansson's memory (the unit tests) sees them. */
static void *jf_malloc(size_t n)
{
	json_malloc_t m;
	json_free_t f;

	json_get_alloc_funcs(&m, &f);
	return m(n);
}

static void jf_free(void *p)
{
	json_malloc_t m;
	json_free_t f;

	json_get_alloc_funcs(&m, &f);
	f(p);
}

/* One long string value cut out of the text: the literal (quotes included)
 * at [start, end) of the buffer; its decoded bytes (borrowed from the buffer
 * when it holds no escape, else owned). */
struct cut {
	size_t start, end;
	size_t rstart, rlen;  /* its placeholder in the reduced text */
	const char *s;
	size_t n;
	char *owned;          /* freed as soon as jansson has its copy */
	bool used;
};

struct cuts {
	struct cut *v;
	size_t n, cap;
	bool bad;          /* a placeholder twice, or out of range */
};

static void cuts_release(struct cuts *c)
{
	for (size_t i = 0; i < c->n; i++)
		jf_free(c->v[i].owned);
	free(c->v);
	*c = (struct cuts){ 0 };
}

static uint64_t nonce_get(void)
{
	uint64_t n = __atomic_load_n(&nonce, __ATOMIC_RELAXED), want = 0;
	struct timespec ts;

	if (n)
		return n;
	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != (ssize_t)sizeof(n)) {
		/* Any value will do: a clash only costs the slow path. */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		n = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
	}
	n |= 1;
	__atomic_compare_exchange_n(&nonce, &want, n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return __atomic_load_n(&nonce, __ATOMIC_RELAXED);
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The \uXXXX at p (p[0] == 'u', 4 more bytes available), or -1. */
static int32_t unicode_escape(const unsigned char *p, const unsigned char *end)
{
	int32_t v = 0;

	if (end - p < 5)
		return -1;
	for (int i = 1; i <= 4; i++) {
		int h = hexval(p[i]);

		if (h < 0)
			return -1;
		v = (v << 4) | h;
	}
	return v;
}

static size_t utf8_put(int32_t v, char *t)
{
	if (v < 0x80) {
		t[0] = (char)v;
		return 1;
	}
	if (v < 0x800) {
		t[0] = (char)(0xc0 | (v >> 6));
		t[1] = (char)(0x80 | (v & 0x3f));
		return 2;
	}
	if (v < 0x10000) {
		t[0] = (char)(0xe0 | (v >> 12));
		t[1] = (char)(0x80 | ((v >> 6) & 0x3f));
		t[2] = (char)(0x80 | (v & 0x3f));
		return 3;
	}
	t[0] = (char)(0xf0 | (v >> 18));
	t[1] = (char)(0x80 | ((v >> 12) & 0x3f));
	t[2] = (char)(0x80 | ((v >> 6) & 0x3f));
	t[3] = (char)(0x80 | (v & 0x3f));
	return 4;
}

/* Decodes one escape at *pp (just after the backslash) into t. Returns the
 * bytes written, or 0 where jansson refuses it. */
static size_t decode_escape(const unsigned char **pp, const unsigned char *end, char *t)
{
	const unsigned char *p = *pp;
	int32_t v, lo;

	switch (*p) {
	case '"': case '\\': case '/': *t = (char)*p; break;
	case 'b': *t = '\b'; break;
	case 'f': *t = '\f'; break;
	case 'n': *t = '\n'; break;
	case 'r': *t = '\r'; break;
	case 't': *t = '\t'; break;
	case 'u':
		v = unicode_escape(p, end);
		if (v < 0 || (v >= 0xdc00 && v <= 0xdfff))
			return 0;
		p += 5;
		if (v >= 0xd800 && v <= 0xdbff) {
			if (end - p < 2 || p[0] != '\\' || p[1] != 'u')
				return 0;
			lo = unicode_escape(p + 1, end);
			if (lo < 0xdc00 || lo > 0xdfff)
				return 0;
			p += 6;
			v = ((v - 0xd800) << 10) + (lo - 0xdc00) + 0x10000;
		}
		*pp = p;
		return utf8_put(v, t);
	default:
		return 0;
	}
	*pp = p + 1;
	return 1;
}

/* Decodes the content [p, end) of a string literal (the closing quote is at
 * end, unescaped) into c->s/c->n exactly as jansson would. Returns false
 * where jansson would refuse it (or we are unsure). */
static bool decode_string(const unsigned char *p, const unsigned char *end, size_t flags,
			  struct cut *c)
{
	const unsigned char *begin = p;
	char *t = NULL;

	while (p < end) {
		unsigned char ch;

		while (end - p >= 8 && word_is_plain(p, false))
			p += 8;
		if (p == end)
			break;
		ch = *p;
		if (ch >= 0x80) {
			size_t k = utf8_seq_len(p, (size_t)(end - p));

			if (k == 0)
				return false;
			p += k;
		} else if (ch < 0x20) {
			return false;
		} else if (ch == '\\') {
			break;
		} else {
			p++;
		}
	}
	if (p == end) {
		c->s = (const char *)begin;
		c->n = (size_t)(end - begin);
		return true;
	}
	/* An escape: decode into a copy (never longer than the literal). */
	c->owned = jf_malloc((size_t)(end - begin) + 1);
	if (!c->owned)
		return false;
	memcpy(c->owned, begin, (size_t)(p - begin));
	t = c->owned + (p - begin);
	while (p < end) {
		const unsigned char *run = p;
		size_t k;

		while (end - p >= 8 && word_is_plain(p, false))
			p += 8;
		while (p < end && *p >= 0x20 && *p < 0x80 && *p != '\\')
			p++;
		memcpy(t, run, (size_t)(p - run));
		t += p - run;
		if (p == end)
			break;
		if (*p < 0x20)
			return false;
		if (*p >= 0x80) {
			k = utf8_seq_len(p, (size_t)(end - p));
			if (k == 0)
				return false;
			memcpy(t, p, k);
			t += k;
			p += k;
			continue;
		}
		p++;  /* the backslash; find_close saw to it that a byte follows */
		k = decode_escape(&p, end, t);
		if (k == 0 || (t[0] == '\0' && !(flags & JSON_ALLOW_NUL)))
			return false;
		t += k;
	}
	c->s = c->owned;
	c->n = (size_t)(t - c->owned);
	return true;
}

/* The offset of the quote that closes the literal whose content starts at
 * from, or len if it is not closed. */
static size_t find_close(const char *buf, size_t from, size_t len)
{
	size_t pos = from;

	for (;;) {
		const char *q = memchr(buf + pos, '"', len - pos);
		size_t at, bs = 0;

		if (!q)
			return len;
		at = (size_t)(q - buf);
		while (at - bs > from && buf[at - bs - 1] == '\\')
			bs++;
		if (bs % 2 == 0)
			return at;
		pos = at + 1;
	}
}

/* True if the next byte after off that is not JSON whitespace is ':'. */
static bool colon_follows(const char *buf, size_t off, size_t len)
{
	while (off < len && (buf[off] == ' ' || buf[off] == '\t' || buf[off] == '\n' || buf[off] == '\r'))
		off++;
	return off < len && buf[off] == ':';
}

static bool cuts_add(struct cuts *c, struct cut cut)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 8;
		struct cut *v = reallocarray(c->v, cap, sizeof(*v));

		if (!v)
			return false;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = cut;
	return true;
}

/* Deeper nesting than jansson's own limit (2048) is left to json_loadb. */
#define CUTS_MAX_DEPTH 4096

enum cuts_outcome {
	CUTS_OK,
	CUTS_REFUSED,  /* jansson refuses the literal that ends at *ret_to */
	CUTS_UNSURE,   /* OOM, too deep: json_loadb on the original decides */
};

/* Finds and decodes the long string values. Where jansson refuses a long
 * literal, or a string is not closed (the literal runs to len), says where
 * it ends; cuts then holds those before it. */
static enum cuts_outcome find_cuts(const char *buf, size_t len, size_t flags, struct cuts *cuts,
				   size_t *ret_to)
{
	/* Which containers the text is in (a bit a level: 1 an object), so
	 * that a string where jansson expects a key is never cut, even when no
	 * ':' follows it (jansson then refuses a duplicate or a NUL in it). */
	uint64_t objects[CUTS_MAX_DEPTH / 64] = { 0 };
	size_t pos = 0, depth = 0;
	unsigned char prev = 0;  /* the last byte not whitespace before the string */

	while (pos < len) {
		const char *q = memchr(buf + pos, '"', len - pos);
		size_t start, close, gap_end = q ? (size_t)(q - buf) : len;
		struct cut cut = { 0 };
		bool key;

		for (; pos < gap_end; pos++) {
			unsigned char c = (unsigned char)buf[pos];

			if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
				continue;
			prev = c;
			if (c == '{' || c == '[') {
				if (depth == CUTS_MAX_DEPTH)
					return CUTS_UNSURE;
				if (c == '{')
					objects[depth / 64] |= 1ull << (depth % 64);
				else
					objects[depth / 64] &= ~(1ull << (depth % 64));
				depth++;
			} else if ((c == '}' || c == ']') && depth > 0) {
				depth--;
			}
		}
		if (!q)
			return CUTS_OK;
		start = gap_end;
		key = prev == '{' ||
		      (prev == ',' && depth > 0 && (objects[(depth - 1) / 64] >> ((depth - 1) % 64) & 1));
		prev = '"';
		close = find_close(buf, start + 1, len);
		if (close == len) {
			*ret_to = len;
			return CUTS_REFUSED;
		}
		pos = close + 1;
		if (key || close - start - 1 < splice_min || colon_follows(buf, pos, len))
			continue;
		cut.start = start;
		cut.end = pos;
		if (!decode_string((const unsigned char *)buf + start + 1,
				   (const unsigned char *)buf + close, flags, &cut)) {
			/* (or OOM: refused_error sees jansson accept it) */
			jf_free(cut.owned);
			*ret_to = pos;
			return CUTS_REFUSED;
		}
		if (!cuts_add(cuts, cut)) {
			jf_free(cut.owned);
			return CUTS_UNSURE;
		}
	}
	return CUTS_OK;
}

static size_t placeholder(char *p, uint64_t tag, size_t i)
{
	return (size_t)snprintf(p, PLACEHOLDER_MAX + 1, "\"" PLACEHOLDER_TAG "%016" PRIx64 ":%zu\"",
				tag, i);
}

/* The text buf[0, len) with each cut replaced by its placeholder
 * (jansson-allocated; cuts all end by len), or NULL. Notes where each
 * placeholder is. */
static char *reduce(const char *buf, size_t len, struct cuts *cuts, uint64_t tag,
		    size_t *ret_len)
{
	size_t cap = len + 1, n = 0, at = 0;
	char *r;

	/* The text without its cuts (long, so a placeholder is shorter),
	 * with a placeholder's room for each: never the original's size. */
	for (size_t i = 0; i < cuts->n; i++)
		cap -= cuts->v[i].end - cuts->v[i].start;
	if (cuts->n > (SIZE_MAX - cap) / (PLACEHOLDER_MAX + 1))
		return NULL;
	cap += cuts->n * (PLACEHOLDER_MAX + 1);
	r = jf_malloc(cap);
	if (!r)
		return NULL;
	for (size_t i = 0; i < cuts->n; i++) {
		memcpy(r + n, buf + at, cuts->v[i].start - at);
		n += cuts->v[i].start - at;
		cuts->v[i].rstart = n;
		cuts->v[i].rlen = placeholder(r + n, tag, i);
		n += cuts->v[i].rlen;
		at = cuts->v[i].end;
	}
	memcpy(r + n, buf + at, len - at);
	n += len - at;
	r[n] = '\0';
	*ret_len = n;
	return r;
}

/* If v is a placeholder string: its replacement (a new reference), else
 * NULL. Marks the cut used; a second use or an unknown index sets bad. */
static json_t *splice(struct cuts *cuts, const char *tag, size_t tag_len, const json_t *v)
{
	const char *s = json_string_value(v);
	size_t n = json_string_length(v), i = 0;
	json_t *r;

	if (!s || n < tag_len + 1 || n > tag_len + 20 || memcmp(s, tag, tag_len))
		return NULL;
	s += tag_len;
	n -= tag_len;
	/* tag_len covers the trailing ':'; what is left is the index. */
	if (s[0] == '0' && n > 1)
		return NULL;
	for (size_t k = 0; k < n; k++) {
		if (s[k] < '0' || s[k] > '9')
			return NULL;
		i = i * 10 + (size_t)(s[k] - '0');
	}
	if (i >= cuts->n || cuts->v[i].used) {
		cuts->bad = true;
		return NULL;
	}
	r = json_stringn_nocheck(cuts->v[i].s, cuts->v[i].n);
	if (!r) {
		cuts->bad = true;
		return NULL;
	}
	/* jansson has its copy: the decoded one goes now, not with the rest,
	 * so escaped strings cost the frame once more at most one at a time. */
	jf_free(cuts->v[i].owned);
	cuts->v[i].owned = NULL;
	cuts->v[i].s = NULL;
	cuts->v[i].used = true;
	return r;
}

static void splice_all(struct cuts *cuts, const char *tag, size_t tag_len, json_t *v)
{
	json_t *r, *e;

	if (json_is_object(v)) {
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			e = json_object_iter_value(it);
			if ((r = splice(cuts, tag, tag_len, e)))
				json_object_iter_set_new(v, it, r);
			else
				splice_all(cuts, tag, tag_len, e);
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++) {
			e = json_array_get(v, i);
			if ((r = splice(cuts, tag, tag_len, e)))
				json_array_set_new(v, i, r);
			else
				splice_all(cuts, tag, tag_len, e);
		}
	}
}

/* The position in buf of position p of the text reduce() made of it. */
static size_t map_position(const struct cuts *cuts, size_t p)
{
	size_t base = 0, rbase = 0;

	for (size_t i = 0; i < cuts->n; i++) {
		const struct cut *c = &cuts->v[i];
		size_t off, lit;

		if (p <= c->rstart)
			break;
		if (p < c->rstart + c->rlen) {
			/* Never inside a placeholder (a valid string): clamped. */
			off = p - c->rstart;
			lit = c->end - c->start;
			return c->start + (off < lit ? off : lit);
		}
		base = c->end;
		rbase = c->rstart + c->rlen;
	}
	return base + (p - rbase);
}

/* error (may be NULL) = jerr, jansson's error for the reduced text, where
 * it is in buf: the position mapped back, the column recounted as jansson
 * counts it (the bytes since the last newline that start a UTF-8
 * character: all read, so all valid). The line is jansson's (neither a
 * literal nor a placeholder holds a newline). buf holds no NUL byte. */
static void error_mapped(const char *buf, size_t len, const struct cuts *cuts, const json_error_t *jerr,
			 json_error_t *error)
{
	size_t pos, from, col = 0, i;
	const char *nl;

	if (!error)
		return;
	*error = *jerr;
	if (jerr->position < 0)
		return;
	pos = map_position(cuts, (size_t)jerr->position);
	if (pos > len)
		return;  /* never: jansson's error is in the text */
	nl = memrchr(buf, '\n', pos);
	from = nl ? (size_t)(nl - buf) + 1 : 0;
	for (i = from; i + 8 <= pos; i += 8) {
		uint64_t w;

		memcpy(&w, buf + i, sizeof(w));
		col += 8 - (size_t)__builtin_popcountll(w & ~(w << 1) & HIGHS);
	}
	for (; i < pos; i++)
		col += ((unsigned char)buf[i] & 0xc0) != 0x80;
	error->position = (int)pos;
	error->column = (int)col;
}

/* The fast path. Returns the value; or NULL with *ret_done and error set
 * (jansson refused the reduced text: its error, mapped); or NULL where
 * json_loadb on buf must decide. */
static json_t *load_spliced(const char *buf, size_t len, size_t flags, struct cuts *cuts,
			    json_error_t *error, bool *ret_done)
{
	uint64_t t = nonce_get();
	char tag[PLACEHOLDER_MAX];
	size_t red_len, tag_len;
	json_error_t jerr;
	json_t *root, *r;
	char *red;

	red = reduce(buf, len, cuts, t, &red_len);
	if (!red)
		return NULL;
	root = json_loadb(red, red_len, flags, &jerr);
	jf_free(red);
	if (!root) {
		/* A placeholder stands for a valid string: jansson refuses
		 * the original at the same place, for the same reason. */
		error_mapped(buf, len, cuts, &jerr, error);
		*ret_done = true;
		return NULL;
	}
	tag_len = (size_t)snprintf(tag, sizeof(tag), PLACEHOLDER_TAG "%016" PRIx64 ":", t);
	if ((r = splice(cuts, tag, tag_len, root))) {
		json_decref(root);
		root = r;
	} else {
		splice_all(cuts, tag, tag_len, root);
	}
	for (size_t i = 0; i < cuts->n && !cuts->bad; i++)
		cuts->bad = !cuts->v[i].used;
	/* On success jansson's position is the bytes it read: all of them. */
	if (cuts->bad || jerr.position != (int)red_len) {
		json_decref(root);
		return NULL;
	}
	__atomic_fetch_add(&spliced_loads, 1, __ATOMIC_RELAXED);
	if (error) {
		*error = jerr;
		error->position = (int)len;
	}
	return root;
}

/* jansson's error for buf, where jsonfast refuses the literal ending at to
 * (or a string is not closed: to is the end): from the reduced text up to
 * and including that literal, verbatim (the cuts are all before it), so
 * jansson lexes that literal but no other. False (error untouched) where
 * jansson accepts that text up to its end: unsure, json_loadb decides. */
static bool refused_error(const char *buf, size_t len, size_t to, size_t flags, struct cuts *cuts,
			  json_error_t *error)
{
	size_t red_len;
	json_error_t jerr;
	json_t *v;
	char *red;

	red = reduce(buf, to, cuts, nonce_get(), &red_len);
	if (!red)
		return false;
	v = json_loadb(red, red_len, flags, &jerr);
	jf_free(red);
	if (v) {
		json_decref(v);
		return false;
	}
	if (to < len && json_error_code(&jerr) == json_error_premature_end_of_input)
		return false;
	error_mapped(buf, to, cuts, &jerr, error);
	return true;
}

json_t *jsonfast_loadb(const char *buf, size_t len, size_t flags, json_error_t *error)
{
	struct cuts cuts = { 0 };
	size_t to = 0;
	bool done = false;
	json_t *v = NULL;

	if (len < load_min || !buf || (flags & JSON_DISABLE_EOF_CHECK))
		return json_loadb(buf, len, flags, error);
	/* jansson reads a NUL byte as a character or drops it (when it puts it
	 * back after a number): its positions past one are not ours to map.
	 * jsonrpc refuses request frames with one before they get here. */
	if (memchr(buf, '\0', len))
		return json_loadb(buf, len, flags, error);
	switch (find_cuts(buf, len, flags, &cuts, &to)) {
	case CUTS_OK:
		if (cuts.n > 0)
			v = load_spliced(buf, len, flags, &cuts, error, &done);
		break;
	case CUTS_REFUSED:
		done = refused_error(buf, len, to, flags, &cuts, error);
		break;
	case CUTS_UNSURE:
		break;
	}
	cuts_release(&cuts);
	return v || done ? v : json_loadb(buf, len, flags, error);
}
