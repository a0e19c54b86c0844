/* egresslog.c — the proxy's log grammar and its key.v1 label. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base64.h"
#include "cleanup.h"
#include "egresslog.h"
#include "names.h"
#include "xmalloc.h"

/* The most JSON bytes whose padded base64 fits EGRESSLOG_KEY_MAX characters. */
#define KEY_JSON_MAX  (EGRESSLOG_KEY_MAX / 4 * 3)
#define KEY_FIELDS    4
#define PORT_MAX      65535
#define ASCII_PRINT_FIRST 0x21      /* '!': space is a separator */
#define ASCII_PRINT_LAST  0x7e      /* '~' */
#define JSON_ESCAPE_BELOW 0x20
#define ASCII_DEL         0x7f
#define UNICODE_MAX       0x10ffff
#define BMP_MAX           0xffff

/* ---- the log grammar --------------------------------------------------------- */

static const char *const verdict_words[_EGRESS_VERDICT_MAX] = {
	[EGRESS_ALLOW] = "ALLOW",
	[EGRESS_DENY] = "DENY",
	[EGRESS_DENY_NONGLOBAL] = "DENY-NONGLOBAL",
	[EGRESS_UNREACHABLE] = "UNREACHABLE",
};

const char *egress_verdict_to_string(enum egress_verdict v)
{
	return (unsigned)v < _EGRESS_VERDICT_MAX ? verdict_words[v] : "unknown";
}

/* The verdict word line starts with, followed by a space; its length + 1 in
 * *ret_skip. -1 when none. */
static int verdict_of(const char *line, size_t len, size_t *ret_skip)
{
	for (int v = 0; v < _EGRESS_VERDICT_MAX; v++) {
		size_t wlen = strlen(verdict_words[v]);

		if (len > wlen && memcmp(line, verdict_words[v], wlen) == 0 && line[wlen] == ' ') {
			*ret_skip = wlen + 1;
			return v;
		}
	}
	return -1;
}

static bool host_is_valid(const char *h, size_t len)
{
	if (len == 0 || len > EGRESSLOG_HOST_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)h[i] < ASCII_PRINT_FIRST || (unsigned char)h[i] > ASCII_PRINT_LAST)
			return false;
	return true;
}

/* 1..EGRESSLOG_PORT_DIGITS ASCII digits valued 1..65535. */
static bool port_parse(const char *p, size_t len, uint16_t *ret)
{
	unsigned v = 0;

	if (len == 0 || len > EGRESSLOG_PORT_DIGITS)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (v == 0 || v > PORT_MAX)
		return false;
	*ret = (uint16_t)v;
	return true;
}

static const char *const reason_log_words[_EGRESS_REASON_MAX] = {
	[EGRESS_REASON_NOT_CONNECT] = "not-CONNECT",
};

static const char *const reason_wire_words[_EGRESS_REASON_MAX] = {
	[EGRESS_REASON_NOT_CONNECT] = "not_connect",
};

const char *egress_reason_to_log(enum egress_reason r)
{
	return (unsigned)r < _EGRESS_REASON_MAX ? reason_log_words[r] : NULL;
}

const char *egress_reason_to_string(enum egress_reason r)
{
	return (unsigned)r < _EGRESS_REASON_MAX ? reason_wire_words[r] : NULL;
}

/* The reason word r[0..len) names, or -1. */
static int reason_of(const char *r, size_t len)
{
	for (int i = EGRESS_REASON_NONE + 1; i < _EGRESS_REASON_MAX; i++)
		if (strlen(reason_log_words[i]) == len && memcmp(r, reason_log_words[i], len) == 0)
			return i;
	return -1;
}

int egresslog_parse(const char *line, size_t len, struct egress_decision *ret)
{
	const char *rest, *colon, *space;
	size_t skip, rlen, hlen;
	uint16_t port;
	int v, reason = EGRESS_REASON_NONE;

	if (len > 0 && line[len - 1] == '\r')
		len--;
	v = verdict_of(line, len, &skip);
	if (v < 0)
		return 0;
	rest = line + skip;
	rlen = len - skip;
	space = memchr(rest, ' ', rlen);       /* the host has none: a reason follows */
	if (space) {
		reason = reason_of(space + 1, rlen - (size_t)(space - rest) - 1);
		if (reason < 0 || v != EGRESS_DENY)
			return 0;
		rlen = (size_t)(space - rest);
	}
	colon = memrchr(rest, ':', rlen);
	if (!colon)
		return 0;
	hlen = (size_t)(colon - rest);
	if (!host_is_valid(rest, hlen) || !port_parse(colon + 1, rlen - hlen - 1, &port))
		return 0;
	ret->verdict = (enum egress_verdict)v;
	ret->reason = (enum egress_reason)reason;
	memcpy(ret->host, rest, hlen);
	ret->host[hlen] = '\0';
	ret->port = port;
	return 1;
}

bool egresslog_is_ready(const char *line, size_t len)
{
	size_t plen = strlen(EGRESSLOG_READY_PREFIX);

	return len >= plen && memcmp(line, EGRESSLOG_READY_PREFIX, plen) == 0;
}

/* ---- coalescing ------------------------------------------------------------------ */

const char *egress_coalesce_result_to_string(enum egress_coalesce_result r)
{
	static const char *const names[_EGRESS_COALESCE_RESULT_MAX] = {
		[EGRESS_COALESCE_PUBLISH] = "publish",
		[EGRESS_COALESCE_HELD] = "held",
	};

	return (unsigned)r < _EGRESS_COALESCE_RESULT_MAX ? names[r] : "unknown";
}

static void held_add(struct egress_held *h, const struct egress_decision *dec, const char *ts)
{
	if (h->count++ == 0) {
		h->dec = *dec;
		snprintf(h->first_ts, sizeof(h->first_ts), "%s", ts);
	}
	snprintf(h->last_ts, sizeof(h->last_ts), "%s", ts);
}

static bool same_decision(const struct egress_decision *a, const struct egress_decision *b)
{
	return a->verdict == b->verdict && a->reason == b->reason && a->port == b->port &&
	       strcmp(a->host, b->host) == 0;
}

enum egress_coalesce_result egress_coalesce_add(struct egress_coalesce *c, const struct egress_decision *dec,
					       const char *ts, int64_t now_ms)
{
	if (!c->window_open || now_ms >= c->window_end_ms) {
		if (c->held_total == 0) {
			c->window_open = true;
			c->window_end_ms = now_ms + EGRESS_COALESCE_WINDOW_MS;
			c->window_published = 0;
		}
	}
	if (c->held_total == 0 && c->window_published < EGRESS_EVENTS_PER_WINDOW) {
		c->window_published++;
		return EGRESS_COALESCE_PUBLISH;
	}
	c->held_total++;
	for (size_t i = 0; i < c->n_held; i++)
		if (same_decision(&c->held[i].dec, dec)) {
			held_add(&c->held[i], dec, ts);
			return EGRESS_COALESCE_HELD;
		}
	if (c->n_held < EGRESS_COALESCE_KEYS) {
		held_add(&c->held[c->n_held++], dec, ts);
		return EGRESS_COALESCE_HELD;
	}
	{
		unsigned v = (unsigned)dec->verdict < _EGRESS_VERDICT_MAX ? (unsigned)dec->verdict : 0;
		struct egress_held *o = &c->overflow[v];
		struct egress_decision any = { .verdict = dec->verdict, .port = 0 };

		if (o->count == 0 && c->n_overflow < _EGRESS_VERDICT_MAX)
			c->overflow_order[c->n_overflow++] = (unsigned char)v;
		snprintf(any.host, sizeof(any.host), "%s", EGRESSLOG_OVERFLOW_HOST);
		held_add(o, &any, ts);
	}
	return EGRESS_COALESCE_HELD;
}

bool egress_coalesce_due(const struct egress_coalesce *c, int64_t now_ms)
{
	return c->held_total > 0 && now_ms >= c->window_end_ms;
}

int64_t egress_coalesce_deadline(const struct egress_coalesce *c)
{
	return c->held_total > 0 ? c->window_end_ms : -1;
}

uint64_t egress_coalesce_flush(struct egress_coalesce *c, egress_coalesce_fn *fn, void *arg)
{
	uint64_t n = c->held_total;

	for (size_t i = 0; i < c->n_held; i++)
		fn(&c->held[i], arg);
	for (size_t i = 0; i < c->n_overflow; i++)
		fn(&c->overflow[c->overflow_order[i]], arg);
	memset(c->held, 0, c->n_held * sizeof(c->held[0]));
	memset(c->overflow, 0, sizeof(c->overflow));
	c->n_held = 0;
	c->n_overflow = 0;
	c->held_total = 0;
	return n;
}

/* ---- key.v1: encoding ---------------------------------------------------------- */

/* The JSON text, bounded by KEY_JSON_MAX; over marks an overflow. */
struct json_out {
	char p[KEY_JSON_MAX];
	size_t len;
	bool over;
};

static void out_put(struct json_out *o, const char *s, size_t n)
{
	if (o->over || n > KEY_JSON_MAX - o->len) {
		o->over = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void out_str(struct json_out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

static void out_u16(struct json_out *o, uint32_t u)
{
	char esc[sizeof("\\uffffff")];   /* room for any unsigned to the compiler; 6 used */

	snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)(u & BMP_MAX));
	out_put(o, esc, sizeof("\\uffff") - 1);
}

/* One character of s[0..n) as strict UTF-8 (no overlong form, no surrogate,
 * at most U+10FFFF): its length and *ret_cp, or 0 when invalid. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *ret_cp)
{
	static const uint32_t min_of_len[] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;
	uint32_t cp = len == 1 ? s[0] : s[0] & (0x7f >> len);

	if ((len == 1 && s[0] >= 0x80) || s[0] >= 0xf8 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min_of_len[len] || cp > UNICODE_MAX || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	*ret_cp = cp;
	return len;
}

/* The escape json.dumps writes for an ASCII character, or NULL when it is
 * written as itself (printable, not '"' or '\\'). */
static const char *ascii_escape(uint32_t c)
{
	switch (c) {
	case '"': return "\\\"";
	case '\\': return "\\\\";
	case '\n': return "\\n";
	case '\r': return "\\r";
	case '\t': return "\\t";
	case '\b': return "\\b";
	case '\f': return "\\f";
	default: return NULL;
	}
}

static void out_char(struct json_out *o, uint32_t cp)
{
	const char *esc = ascii_escape(cp);
	char c = (char)cp;

	if (esc)
		out_str(o, esc);
	else if (cp >= JSON_ESCAPE_BELOW && cp < ASCII_DEL)
		out_put(o, &c, 1);
	else if (cp <= BMP_MAX)
		out_u16(o, cp);
	else {
		out_u16(o, 0xd800 | ((cp - 0x10000) >> 10));
		out_u16(o, 0xdc00 | ((cp - 0x10000) & 0x3ff));
	}
}

/* A JSON string as ensure_ascii writes it; false when s is not UTF-8. */
static bool out_json_string(struct json_out *o, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);

	out_put(o, "\"", 1);
	while (n > 0 && !o->over) {
		uint32_t cp;
		size_t k = utf8_next(p, n, &cp);

		if (k == 0)
			return false;
		out_char(o, cp);
		p += k;
		n -= k;
	}
	out_put(o, "\"", 1);
	return true;
}

/* '+' '/' → '-' '_' (and back, for decoding, with url false). */
static void base64_alphabet(char *s, size_t len, bool url)
{
	for (size_t i = 0; i < len; i++) {
		if (s[i] == (url ? '+' : '-'))
			s[i] = url ? '-' : '+';
		else if (s[i] == (url ? '/' : '_'))
			s[i] = url ? '_' : '/';
	}
}

char *egresslog_key_encode(const struct msb_key *key)
{
	const char *fields[KEY_FIELDS] = { key->scope, key->thread_id, key->agent_dir, key->call_id };
	_cleanup_free_ struct json_out *o = xcalloc(1, sizeof(*o));
	size_t sum = 0, len;
	char *b64;

	for (size_t i = 0; i < KEY_FIELDS; i++)
		sum += strlen(fields[i]);
	if (sum > EGRESSLOG_KEY_MAX)
		return xstrdup("");
	out_put(o, "[", 1);
	for (size_t i = 0; i < KEY_FIELDS; i++) {
		if (i)
			out_put(o, ", ", 2);
		if (!out_json_string(o, fields[i]))
			return xstrdup("");
	}
	out_put(o, "]", 1);
	if (o->over)
		return xstrdup("");
	b64 = msb_base64_encode(o->p, o->len, &len);
	base64_alphabet(b64, len, true);
	return b64;
}

/* ---- key.v1: decoding ------------------------------------------------------------ */

/* The JSON the label carries, or NULL when it is not strict base64url. */
static json_t *label_json(const char *label)
{
	size_t len = strnlen(label, EGRESSLOG_KEY_MAX + 1);
	_cleanup_free_ char *std = NULL;
	_cleanup_free_ uint8_t *raw = NULL;
	size_t rawlen;

	if (len > EGRESSLOG_KEY_MAX || strpbrk(label, "+/"))
		return NULL;
	std = xstrndup(label, len);
	base64_alphabet(std, len, false);
	if (msb_base64_decode(std, len, &raw, &rawlen) < 0)
		return NULL;
	return json_loadb((const char *)raw, rawlen, 0, NULL);
}

/* labels[name] as a string, or NULL. */
static const char *label_get(const json_t *labels, const char *name)
{
	return labels ? json_string_value(json_object_get(labels, name)) : NULL;
}

/* Whether labels[name] is label_value(v). */
static bool selector_matches(const json_t *labels, const char *name, const char *v)
{
	const char *have = label_get(labels, name);
	_cleanup_free_ char *want = names_label_value(v);

	return have && strcmp(have, want) == 0;
}

static bool field_is_valid(const char *s, bool required)
{
	size_t len = strlen(s);

	return (len > 0 || !required) && len <= MSB_KEY_FIELD_MAX_BYTES;
}

/* The four strings of the label's array, checked against the selectors. */
static int key_check(const char *const f[KEY_FIELDS], const json_t *labels)
{
	static const char *const selectors[] = { LABEL_SCOPE, LABEL_THREAD, LABEL_AGENT };

	for (size_t i = 0; i < ELEMENTSOF(selectors); i++)
		if (!field_is_valid(f[i], true) || !selector_matches(labels, selectors[i], f[i]))
			return -EINVAL;
	if (!field_is_valid(f[3], false))
		return -EINVAL;
	if (*f[3])
		return selector_matches(labels, LABEL_CALL, f[3]) ? 0 : -EINVAL;
	return json_object_get(labels, LABEL_CALL) ? -EINVAL : 0;
}

static void key_fill(const char *const f[KEY_FIELDS], struct msb_key *ret)
{
	*ret = (struct msb_key){ .scope = xstrdup(f[0]), .thread_id = xstrdup(f[1]),
				 .agent_dir = xstrdup(f[2]), .call_id = xstrdup(f[3]) };
}

static int key_from_label(const char *label, const json_t *labels, struct msb_key *ret)
{
	json_auto_t *j = label_json(label);
	const char *f[KEY_FIELDS];
	int r;

	if (!json_is_array(j) || json_array_size(j) != KEY_FIELDS)
		return -EINVAL;
	for (size_t i = 0; i < KEY_FIELDS; i++) {
		f[i] = json_string_value(json_array_get(j, i));
		if (!f[i])
			return -EINVAL;
	}
	r = key_check(f, labels);
	if (r < 0)
		return r;
	key_fill(f, ret);
	return 0;
}

/* A selector label as it was written unhashed, or NULL. */
static const char *selector_plain(const json_t *labels, const char *name)
{
	const char *v = label_get(labels, name);
	_cleanup_free_ char *lv = NULL;

	if (!v)
		return NULL;
	lv = names_label_value(v);
	return strcmp(lv, v) == 0 ? v : NULL;
}

static int key_from_selectors(const json_t *labels, struct msb_key *ret)
{
	const char *f[KEY_FIELDS] = { selector_plain(labels, LABEL_SCOPE),
				      selector_plain(labels, LABEL_THREAD),
				      selector_plain(labels, LABEL_AGENT), "" };

	if (!f[0] || !f[1] || !f[2] || (labels && json_object_get(labels, LABEL_CALL)))
		return -ENOENT;
	key_fill(f, ret);
	return 0;
}

int egresslog_key_decode(const char *label, const json_t *labels, struct msb_key *ret)
{
	if (!label)
		return key_from_selectors(labels, ret);
	if (!*label)
		return -ENOENT;
	return key_from_label(label, labels, ret);
}
