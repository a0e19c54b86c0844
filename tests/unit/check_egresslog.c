/* check_egresslog.c — the proxy's log grammar (behaviour-docker §4.5) and
 * its key.v1 label (§3). The key vectors are Python's own
 * base64.urlsafe_b64encode(json.dumps([...], ensure_ascii=True)), pinned:
 * a changed encoding strands every existing proxy's attribution. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "cleanup.h"
#include "egresslog.h"
#include "names.h"
#include "xmalloc.h"

#define GOLDEN "WyJzY29wZS1hIiwgInRocmVhZC0xIiwgImRldm9wcy1lbmdpbmVlciIsICIiXQ=="

static struct msb_key key_of(const char *scope, const char *thread, const char *agent,
			     const char *call)
{
	return (struct msb_key){ (char *)scope, (char *)thread, (char *)agent, (char *)call };
}

/* ---- the log grammar ------------------------------------------------------------ */

struct parse_row {
	const char *line;
	int want;                       /* 1: a decision */
	enum egress_verdict verdict;
	const char *host;
	unsigned port;
};

#define H63 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"
#define H255 H63 "." H63 "." H63 "." H63   /* 255 bytes */
#define NO 0, 0, NULL, 0

static const struct parse_row parse_rows[] = {
	{ "ALLOW example.com:443", 1, EGRESS_ALLOW, "example.com", 443 },
	{ "DENY evil.example:443", 1, EGRESS_DENY, "evil.example", 443 },
	{ "DENY-NONGLOBAL internal.corp:443", 1, EGRESS_DENY_NONGLOBAL, "internal.corp", 443 },
	{ "UNREACHABLE down.example:443", 1, EGRESS_UNREACHABLE, "down.example", 443 },
	/* The host is greedy: the port is what follows the last ':'. */
	{ "ALLOW ::1:443", 1, EGRESS_ALLOW, "::1", 443 },
	{ "ALLOW [2001:db8::1]:443", 1, EGRESS_ALLOW, "[2001:db8::1]", 443 },
	{ "DENY example.com:443:8443", 1, EGRESS_DENY, "example.com:443", 8443 },
	{ "DENY 10.0.0.1:22", 1, EGRESS_DENY, "10.0.0.1", 22 },
	{ "DENY *.x.com:443", 1, EGRESS_DENY, "*.x.com", 443 },
	{ "DENY a:1", 1, EGRESS_DENY, "a", 1 },
	{ "DENY a:65535", 1, EGRESS_DENY, "a", 65535 },
	{ "DENY a:00443", 1, EGRESS_DENY, "a", 443 },
	{ "ALLOW example.com:443\r", 1, EGRESS_ALLOW, "example.com", 443 },
	{ "DENY " H255 ":443", 1, EGRESS_DENY, H255, 443 },
	{ "DENY " H255 "a:443", NO },            /* 256 bytes of host */
	{ "ALLOW example.com:443\r\r", NO },
	{ "ALLOW example.com:443\n", NO },
	{ "ALLOW example.com:0", NO },
	{ "ALLOW example.com:65536", NO },
	{ "ALLOW example.com:100000", NO },
	{ "ALLOW example.com:-443", NO },
	{ "ALLOW example.com:+443", NO },
	{ "ALLOW example.com:4 43", NO },
	{ "ALLOW example.com:443 ", NO },
	{ "ALLOW example.com:\xef\xbc\x94\xef\xbc\x94\xef\xbc\x93", NO },   /* fullwidth digits */
	{ "ALLOW example.com", NO },
	{ "ALLOW example.com:", NO },
	{ "ALLOW :443", NO },
	{ "ALLOW  example.com:443", NO },        /* a space in the host */
	{ "ALLOW a b:443", NO },
	{ "ALLOW a\tb:443", NO },
	{ "ALLOW a\x7f:443", NO },
	{ "ALLOW a\x01:443", NO },
	{ "ALLOW \xc3\xa9.example:443", NO },    /* not ASCII */
	{ "ALLOW", NO },
	{ "ALLOW ", NO },
	{ "allow example.com:443", NO },
	{ "ALLOWexample.com:443", NO },
	{ "DENY-NONGLOBALx:443", NO },
	{ "DENY-example.com:443", NO },
	{ " ALLOW example.com:443", NO },
	{ "ACCEPT example.com:443", NO },
	{ "listening on 3128; allowing: mcr.microsoft.com, *.data.mcr.microsoft.com", NO },
	{ "listening on 3128; allowing: nothing", NO },
	{ "", NO },
	{ "\r", NO },
	{ "Traceback (most recent call last):", NO },
	/* A reason word after the port (reason_rows): only known words, only after DENY. */
	{ "ALLOW example.com:80 not-CONNECT", NO },
	{ "UNREACHABLE example.com:80 not-CONNECT", NO },
	{ "DENY example.com:80 not-connect", NO },
	{ "DENY example.com:80 not-CONNECT x", NO },
	{ "DENY example.com:80  not-CONNECT", NO },
	{ "DENY example.com:80 not-CONNECT ", NO },
	{ "DENY example.com not-CONNECT", NO },
	{ "DENY not-CONNECT", NO },
};

START_TEST(test_parse)
{
	const struct parse_row *row = &parse_rows[_i];
	struct egress_decision d = { .verdict = _EGRESS_VERDICT_MAX, .host = "untouched", .port = 7 };
	int r = egresslog_parse(row->line, strlen(row->line), &d);

	ck_assert_msg(r == row->want, "'%s': %d, want %d", row->line, r, row->want);
	if (!row->want) {
		ck_assert_str_eq(d.host, "untouched");
		ck_assert_int_eq(d.port, 7);
		return;
	}
	ck_assert_int_eq(d.verdict, row->verdict);
	ck_assert_str_eq(d.host, row->host);
	ck_assert_uint_eq(d.port, row->port);
	ck_assert_int_eq(d.reason, EGRESS_REASON_NONE);
}
END_TEST

/* A plain-HTTP request's decision (the proxy's "DENY host:port not-CONNECT"). */
static const struct {
	const char *line;
	const char *host;
	unsigned port;
} reason_rows[] = {
	{ "DENY example.com:80 not-CONNECT", "example.com", 80 },
	{ "DENY [::1]:8080 not-CONNECT", "[::1]", 8080 },
	{ "DENY a:443 not-CONNECT\r", "a", 443 },
};

START_TEST(test_parse_reason)
{
	struct egress_decision d = { .verdict = _EGRESS_VERDICT_MAX };

	ck_assert_int_eq(egresslog_parse(reason_rows[_i].line, strlen(reason_rows[_i].line), &d), 1);
	ck_assert_int_eq(d.verdict, EGRESS_DENY);
	ck_assert_int_eq(d.reason, EGRESS_REASON_NOT_CONNECT);
	ck_assert_str_eq(d.host, reason_rows[_i].host);
	ck_assert_uint_eq(d.port, reason_rows[_i].port);
	ck_assert_str_eq(egress_reason_to_string(d.reason), "not_connect");
	ck_assert_str_eq(egress_reason_to_log(d.reason), "not-CONNECT");
	ck_assert_ptr_null(egress_reason_to_string(EGRESS_REASON_NONE));
}
END_TEST

/* The length is the line: bytes past it are never read, a NUL inside is a
 * control character. */
START_TEST(test_parse_length)
{
	static const char buf[] = "ALLOW a:443garbage";
	static const char nul[] = "ALLOW a\0b:443";
	struct egress_decision d;

	ck_assert_int_eq(egresslog_parse(buf, strlen("ALLOW a:443"), &d), 1);
	ck_assert_str_eq(d.host, "a");
	ck_assert_uint_eq(d.port, 443);
	ck_assert_int_eq(egresslog_parse(buf, strlen("ALLOW a:44"), &d), 1);
	ck_assert_uint_eq(d.port, 44);
	ck_assert_int_eq(egresslog_parse(nul, sizeof(nul) - 1, &d), 0);
	ck_assert_int_eq(egresslog_parse(buf, 0, &d), 0);
	ck_assert_int_eq(egresslog_parse(buf, 5, &d), 0);
	ck_assert_int_eq(egresslog_parse(buf, 6, &d), 0);
}
END_TEST

START_TEST(test_verdict_names)
{
	static const char *const words[] = { "ALLOW", "DENY", "DENY-NONGLOBAL", "UNREACHABLE" };

	ck_assert_uint_eq(ELEMENTSOF(words), _EGRESS_VERDICT_MAX);
	for (int v = 0; v < _EGRESS_VERDICT_MAX; v++) {
		_cleanup_free_ char *line = xasprintf("%s h:443", words[v]);
		struct egress_decision d;

		ck_assert_str_eq(egress_verdict_to_string((enum egress_verdict)v), words[v]);
		ck_assert_int_eq(egresslog_parse(line, strlen(line), &d), 1);
		ck_assert_int_eq(d.verdict, v);
	}
	ck_assert_str_eq(egress_verdict_to_string(_EGRESS_VERDICT_MAX), "unknown");
}
END_TEST

struct ready_row {
	const char *line;
	bool ready;
};

static const struct ready_row ready_rows[] = {
	{ "listening on 3128; allowing: nothing", true },
	{ "listening on 3128; allowing: a.example, *.b.example", true },
	{ "listening on ", true },
	{ "listening on", false },
	{ "Listening on 3128", false },
	{ " listening on 3128", false },
	{ "ALLOW listening.on:443", false },
	{ "", false },
};

START_TEST(test_ready)
{
	const struct ready_row *row = &ready_rows[_i];

	ck_assert_msg(egresslog_is_ready(row->line, strlen(row->line)) == row->ready, "'%s'",
		      row->line);
}
END_TEST

/* ---- key.v1: encoding ---------------------------------------------------------------- */

struct key_row {
	const char *f[4];
	const char *label;
};

static const struct key_row key_rows[] = {
	/* §3's example. */
	{ { "scope-a", "thread-1", "devops-engineer", "" }, GOLDEN },
	{ { "scope-a", "thread-1", "devops-engineer", "call-a" },
	  "WyJzY29wZS1hIiwgInRocmVhZC0xIiwgImRldm9wcy1lbmdpbmVlciIsICJjYWxsLWEiXQ==" },
	/* é and 中: lowercase \uXXXX. */
	{ { "sc\xc3\xa9ne", "th\xe4\xb8\xad", "agent", "c" },
	  "WyJzY1x1MDBlOW5lIiwgInRoXHU0ZTJkIiwgImFnZW50IiwgImMiXQ==" },
	/* U+1F600, U+10000, U+10FFFF: surrogate pairs. */
	{ { "astral-\xf0\x9f\x98\x80", "t\xf0\x90\x80\x80", "a\xf4\x8f\xbf\xbf", "" },
	  "WyJhc3RyYWwtXHVkODNkXHVkZTAwIiwgInRcdWQ4MDBcdWRjMDAiLCAiYVx1ZGJmZlx1ZGZmZiIsICIiXQ==" },
	/* The short escapes. */
	{ { "q\"uote", "back\\slash", "nl\nx\rx\ty", "b\bf\f" },
	  "WyJxXCJ1b3RlIiwgImJhY2tcXHNsYXNoIiwgIm5sXG54XHJ4XHR5IiwgImJcYmZcZiJd" },
	/* Other controls and DEL as \u00XX; '/' and space as themselves; U+2028, BOM. */
	{ { "c\x01\x1f\x7f", "sl/ash", "~ ", "\xe2\x80\xa8\xef\xbb\xbf" },
	  "WyJjXHUwMDAxXHUwMDFmXHUwMDdmIiwgInNsL2FzaCIsICJ-ICIsICJcdTIwMjhcdWZlZmYiXQ==" },
	/* URL-safe: '-' and '_' where standard base64 has '+' and '/'. */
	{ { "?\?\?>>>", "~~~", "a", "" }, "WyI_Pz8-Pj4iLCAifn5-IiwgImEiLCAiIl0=" },
};

START_TEST(test_key_encode)
{
	const struct key_row *row = &key_rows[_i];
	struct msb_key key = key_of(row->f[0], row->f[1], row->f[2], row->f[3]);
	_cleanup_free_ char *label = egresslog_key_encode(&key);

	ck_assert_str_eq(label, row->label);
}
END_TEST

/* A key Python could not hold as str: no attribution. */
START_TEST(test_key_encode_not_utf8)
{
	static const char *const bad[] = {
		"\xff", "a\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xe4\xb8", "\xf0\x9f\x98",
	};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct msb_key key = key_of("s", "t", bad[i], "");
		_cleanup_free_ char *label = egresslog_key_encode(&key);

		ck_assert_msg(strcmp(label, "") == 0, "bad[%zu] encoded", i);
	}
}
END_TEST

static char *repeat(char c, size_t n)
{
	char *s = xmalloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* §3: "a scope of 3056 x gives exactly 4096; 3057 gives ''". That holds with
 * the other three fields empty (the JSON is then 3056 + 16 = 3072 bytes,
 * exactly 4096 base64 characters); with "thread-1", "devops-engineer", ""
 * the same edge falls at 3033/3034. Both pinned against Python. */
struct bound_row {
	size_t n;
	const char *thread, *agent;
	const char *tail;       /* the encoding's last 16 characters; NULL: "" */
};

static const struct bound_row bound_rows[] = {
	{ 3056, "", "", "ICIiLCAiIiwgIiJd" },
	{ 3057, "", "", NULL },
	{ 3033, "thread-1", "devops-engineer", "Z2luZWVyIiwgIiJd" },
	{ 3034, "thread-1", "devops-engineer", NULL },
	{ 4096, "", "", NULL },
	{ 4097, "", "", NULL },
};

START_TEST(test_key_bound)
{
	const struct bound_row *row = &bound_rows[_i];
	_cleanup_free_ char *scope = repeat('x', row->n);
	struct msb_key key = key_of(scope, row->thread, row->agent, "");
	_cleanup_free_ char *label = egresslog_key_encode(&key);

	if (!row->tail) {
		ck_assert_str_eq(label, "");
		return;
	}
	ck_assert_uint_eq(strlen(label), EGRESSLOG_KEY_MAX);
	ck_assert_str_eq(label + EGRESSLOG_KEY_MAX - 16, row->tail);
	ck_assert_int_eq(strncmp(label, "WyJ4eHh4eHh4eHh4", 16), 0);
}
END_TEST

/* Escapes count toward the bound: 600 é (1200 bytes) are 3600 JSON bytes. */
START_TEST(test_key_bound_escapes)
{
	_cleanup_free_ char *scope = xmalloc(2 * 600 + 1);
	struct msb_key key = key_of(scope, "t", "a", "");
	_cleanup_free_ char *label = NULL;

	for (size_t i = 0; i < 600; i++)
		memcpy(scope + 2 * i, "\xc3\xa9", 2);
	scope[1200] = '\0';
	label = egresslog_key_encode(&key);
	ck_assert_str_eq(label, "");
}
END_TEST

/* ---- key.v1: decoding ------------------------------------------------------------------ */

/* The labels a proxy of key k carries (names_workload_labels' identity part). */
static json_t *labels_of(const struct msb_key *k)
{
	json_t *labels = json_object();
	_cleanup_free_ char *s = names_label_value(k->scope);
	_cleanup_free_ char *t = names_label_value(k->thread_id);
	_cleanup_free_ char *a = names_label_value(k->agent_dir);

	json_object_set_new(labels, LABEL_SCOPE, json_string(s));
	json_object_set_new(labels, LABEL_THREAD, json_string(t));
	json_object_set_new(labels, LABEL_AGENT, json_string(a));
	json_object_set_new(labels, LABEL_KIND, json_string("bicep"));
	json_object_set_new(labels, LABEL_ROLE, json_string("proxy"));
	if (*k->call_id) {
		_cleanup_free_ char *c = names_label_value(k->call_id);

		json_object_set_new(labels, LABEL_CALL, json_string(c));
	}
	return labels;
}

/* URL-safe base64 of any text, to build hostile labels. */
static char *label_of_text(const char *text)
{
	size_t len;
	char *s = msb_base64_encode(text, strlen(text), &len);

	for (size_t i = 0; i < len; i++)
		s[i] = s[i] == '+' ? '-' : s[i] == '/' ? '_' : s[i];
	return s;
}

static void key_assert_eq(const struct msb_key *k, const struct msb_key *want)
{
	ck_assert_str_eq(k->scope, want->scope);
	ck_assert_str_eq(k->thread_id, want->thread_id);
	ck_assert_str_eq(k->agent_dir, want->agent_dir);
	ck_assert_str_eq(k->call_id, want->call_id);
}

#define SENTINEL ((char *)"sentinel")
static const struct msb_key untouched = { SENTINEL, SENTINEL, SENTINEL, SENTINEL };

static void key_assert_untouched(const struct msb_key *k)
{
	ck_assert_ptr_eq(k->scope, SENTINEL);
	ck_assert_ptr_eq(k->thread_id, SENTINEL);
	ck_assert_ptr_eq(k->agent_dir, SENTINEL);
	ck_assert_ptr_eq(k->call_id, SENTINEL);
}

START_TEST(test_key_round_trip)
{
	const struct key_row *row = &key_rows[_i];
	struct msb_key want = key_of(row->f[0], row->f[1], row->f[2], row->f[3]);
	json_auto_t *labels = labels_of(&want);
	struct msb_key got = untouched;

	ck_assert_int_eq(egresslog_key_decode(row->label, labels, &got), 0);
	key_assert_eq(&got, &want);
	msb_key_release(&got);
}
END_TEST

/* Long and odd fields travel through digested selector labels. */
START_TEST(test_key_round_trip_digested)
{
	_cleanup_free_ char *scope = repeat('s', MSB_KEY_FIELD_MAX_BYTES);
	struct msb_key want = key_of(scope, "a=b", "sha256-0123", "call with spaces");
	json_auto_t *labels = labels_of(&want);
	_cleanup_free_ char *label = egresslog_key_encode(&want);
	struct msb_key got = untouched;

	ck_assert_str_ne(label, "");
	ck_assert_int_eq(egresslog_key_decode(label, labels, &got), 0);
	key_assert_eq(&got, &want);
	msb_key_release(&got);
}
END_TEST

/* A label carrying this JSON text, against the labels of key k. */
struct refuse_row {
	const char *what;
	const char *label;      /* used as is when non-NULL */
	const char *json;       /* else the URL-safe base64 of this */
};

static const struct refuse_row refuse_rows[] = {
	{ "not base64", "!!!!", NULL },
	{ "padding missing", "WyJzY29wZS1hIiwgInRocmVhZC0xIiwgImRldm9wcy1lbmdpbmVlciIsICIiXQ", NULL },
	{ "not canonical", "WyJzY29wZS1hIiwgInRocmVhZC0xIiwgImRldm9wcy1lbmdpbmVlciIsICIiXR==", NULL },
	{ "standard alphabet", "WyI/Pz8+Pj4iLCAifn5+IiwgImEiLCAiIl0=", NULL },
	{ "whitespace", "WyJzY29wZS1hIiwgInRocmVhZC0xIiwgImRldm9wcy1lbmdpbmVlciIsICIiXQ== ", NULL },
	{ "not JSON", NULL, "[\"scope-a\", \"thread-1\"" },
	{ "trailing bytes", NULL, "[\"scope-a\", \"thread-1\", \"devops-engineer\", \"\"] x" },
	{ "an object", NULL, "{\"scope\": \"scope-a\"}" },
	{ "a string", NULL, "\"scope-a\"" },
	{ "three strings", NULL, "[\"scope-a\", \"thread-1\", \"devops-engineer\"]" },
	{ "five strings", NULL, "[\"scope-a\", \"thread-1\", \"devops-engineer\", \"\", \"\"]" },
	{ "a number", NULL, "[\"scope-a\", \"thread-1\", \"devops-engineer\", 1]" },
	{ "a null", NULL, "[\"scope-a\", null, \"devops-engineer\", \"\"]" },
	{ "a NUL inside", NULL, "[\"scope-a\\u0000\", \"thread-1\", \"devops-engineer\", \"\"]" },
	{ "a lone surrogate", NULL, "[\"scope-a\\ud800\", \"thread-1\", \"devops-engineer\", \"\"]" },
	{ "another scope", NULL, "[\"scope-b\", \"thread-1\", \"devops-engineer\", \"\"]" },
	{ "another thread", NULL, "[\"scope-a\", \"thread-2\", \"devops-engineer\", \"\"]" },
	{ "another agent", NULL, "[\"scope-a\", \"thread-1\", \"devops\", \"\"]" },
	{ "a call, no call label", NULL, "[\"scope-a\", \"thread-1\", \"devops-engineer\", \"c\"]" },
};

START_TEST(test_key_refused)
{
	const struct refuse_row *row = &refuse_rows[_i];
	struct msb_key k = key_of("scope-a", "thread-1", "devops-engineer", "");
	json_auto_t *labels = labels_of(&k);
	_cleanup_free_ char *label = row->label ? xstrdup(row->label) : label_of_text(row->json);
	struct msb_key got = untouched;

	ck_assert_msg(egresslog_key_decode(label, labels, &got) == -EINVAL, "%s accepted", row->what);
	key_assert_untouched(&got);
}
END_TEST

/* The golden label against labels that do not fit it. */
START_TEST(test_key_selector_mismatch)
{
	struct msb_key k = key_of("scope-a", "thread-1", "devops-engineer", "");
	static const char *const selectors[] = { LABEL_SCOPE, LABEL_THREAD, LABEL_AGENT };
	struct msb_key got = untouched;

	for (size_t i = 0; i < ELEMENTSOF(selectors); i++) {
		json_auto_t *missing = labels_of(&k);
		json_auto_t *other = labels_of(&k);
		json_auto_t *number = labels_of(&k);

		json_object_del(missing, selectors[i]);
		json_object_set_new(other, selectors[i], json_string("other"));
		json_object_set_new(number, selectors[i], json_integer(1));
		ck_assert_int_eq(egresslog_key_decode(GOLDEN, missing, &got), -EINVAL);
		ck_assert_int_eq(egresslog_key_decode(GOLDEN, other, &got), -EINVAL);
		ck_assert_int_eq(egresslog_key_decode(GOLDEN, number, &got), -EINVAL);
	}
	ck_assert_int_eq(egresslog_key_decode(GOLDEN, NULL, &got), -EINVAL);
	key_assert_untouched(&got);
}
END_TEST

/* Unhashed: a selector must be label_value(field), not the raw field. */
START_TEST(test_key_selector_raw_refused)
{
	struct msb_key k = key_of("a=b", "thread-1", "devops-engineer", "");
	_cleanup_free_ char *label = egresslog_key_encode(&k);
	json_auto_t *labels = labels_of(&k);
	struct msb_key got = untouched;

	json_object_set_new(labels, LABEL_SCOPE, json_string("a=b"));
	ck_assert_int_eq(egresslog_key_decode(label, labels, &got), -EINVAL);
	key_assert_untouched(&got);
}
END_TEST

/* The call rule, both ways. */
START_TEST(test_key_call_rule)
{
	struct msb_key conv = key_of("scope-a", "thread-1", "devops-engineer", "");
	struct msb_key call = key_of("scope-a", "thread-1", "devops-engineer", "call-a");
	_cleanup_free_ char *call_label = egresslog_key_encode(&call);
	json_auto_t *conv_labels = labels_of(&conv);
	json_auto_t *with_call = labels_of(&call);
	json_auto_t *other_call = labels_of(&call);
	struct msb_key got = untouched;

	json_object_set_new(other_call, LABEL_CALL, json_string("call-b"));
	/* An empty decoded call needs the call label absent. */
	ck_assert_int_eq(egresslog_key_decode(GOLDEN, with_call, &got), -EINVAL);
	/* A non-empty one needs it present and equal. */
	ck_assert_int_eq(egresslog_key_decode(call_label, conv_labels, &got), -EINVAL);
	ck_assert_int_eq(egresslog_key_decode(call_label, other_call, &got), -EINVAL);
	key_assert_untouched(&got);
	ck_assert_int_eq(egresslog_key_decode(call_label, with_call, &got), 0);
	key_assert_eq(&got, &call);
	msb_key_release(&got);
}
END_TEST

/* Fields our wire could not carry (empty scope, thread or agent; any field
 * over MSB_KEY_FIELD_MAX_BYTES) are no client's key, even when the labels
 * fit them. */
START_TEST(test_key_field_bounds)
{
	_cleanup_free_ char *big = repeat('s', MSB_KEY_FIELD_MAX_BYTES + 1);
	const struct msb_key keys[] = {
		key_of(big, "t", "a", ""), key_of("s", "t", "a", big),
		key_of("", "t", "a", ""), key_of("s", "", "a", ""), key_of("s", "t", "", ""),
	};

	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		_cleanup_free_ char *label = egresslog_key_encode(&keys[i]);
		json_auto_t *labels = labels_of(&keys[i]);
		struct msb_key got = untouched;

		ck_assert_str_ne(label, "");
		ck_assert_msg(egresslog_key_decode(label, labels, &got) == -EINVAL, "keys[%zu]", i);
		key_assert_untouched(&got);
	}
}
END_TEST

START_TEST(test_key_label_too_long)
{
	/* 4100 'A's: valid base64 of zero bytes, and too long before any decoding. */
	_cleanup_free_ char *label = repeat('A', EGRESSLOG_KEY_MAX + 4);
	struct msb_key k = key_of("scope-a", "thread-1", "devops-engineer", "");
	json_auto_t *labels = labels_of(&k);
	struct msb_key got = untouched;

	ck_assert_int_eq(egresslog_key_decode(label, labels, &got), -EINVAL);
	key_assert_untouched(&got);
}
END_TEST

/* ---- key.v1: no label, an empty label ------------------------------------------------- */

START_TEST(test_key_empty_label)
{
	struct msb_key k = key_of("scope-a", "thread-1", "devops-engineer", "");
	json_auto_t *labels = labels_of(&k);
	struct msb_key got = untouched;

	/* Recovery is disabled even with plain selectors. */
	ck_assert_int_eq(egresslog_key_decode("", labels, &got), -ENOENT);
	ck_assert_int_eq(egresslog_key_decode("", NULL, &got), -ENOENT);
	key_assert_untouched(&got);
}
END_TEST

START_TEST(test_key_absent_recovers)
{
	struct msb_key k = key_of("scope-a", "thread-1", "devops-engineer", "");
	json_auto_t *labels = labels_of(&k);
	struct msb_key got = untouched;

	ck_assert_int_eq(egresslog_key_decode(NULL, labels, &got), 0);
	key_assert_eq(&got, &k);
	msb_key_release(&got);
}
END_TEST

struct absent_row {
	const char *what;
	const char *scope, *thread, *agent, *call;   /* the key the labels are made of */
	const char *drop;                            /* a label removed, or NULL */
};

static const struct absent_row absent_rows[] = {
	{ "a digested scope", "a=b", "thread-1", "devops-engineer", "", NULL },
	{ "a digested thread", "scope-a", "thread one", "devops-engineer", "", NULL },
	{ "a digested agent", "scope-a", "thread-1",
	  "an-agent-name-longer-than-sixty-three-characters-is-always-digested", "", NULL },
	{ "a digest-looking value", "sha256-0123456789abcdef0123456789abcdef0123456789abcdef",
	  "thread-1", "devops-engineer", "", NULL },
	{ "a call label", "scope-a", "thread-1", "devops-engineer", "call-a", NULL },
	{ "no scope label", "scope-a", "thread-1", "devops-engineer", "", LABEL_SCOPE },
	{ "no agent label", "scope-a", "thread-1", "devops-engineer", "", LABEL_AGENT },
};

START_TEST(test_key_absent_refused)
{
	const struct absent_row *row = &absent_rows[_i];
	struct msb_key k = key_of(row->scope, row->thread, row->agent, row->call);
	json_auto_t *labels = labels_of(&k);
	struct msb_key got = untouched;

	if (row->drop)
		json_object_del(labels, row->drop);
	ck_assert_msg(egresslog_key_decode(NULL, labels, &got) == -ENOENT, "%s recovered",
		      row->what);
	key_assert_untouched(&got);
	ck_assert_int_eq(egresslog_key_decode(NULL, NULL, &got), -ENOENT);
}
END_TEST

/* ---- coalescing ---------------------------------------------------------------- */

/* What a flush handed on: the events, in order. */
struct co_events {
	struct egress_held ev[EGRESS_COALESCE_KEYS + _EGRESS_VERDICT_MAX];
	size_t n;
};

static void co_collect(const struct egress_held *h, void *arg)
{
	struct co_events *out = arg;

	ck_assert_uint_lt(out->n, ELEMENTSOF(out->ev));
	out->ev[out->n++] = *h;
}

static struct egress_decision co_dec(enum egress_verdict v, const char *host, uint16_t port)
{
	struct egress_decision d = { .verdict = v, .port = port };

	snprintf(d.host, sizeof(d.host), "%s", host);
	return d;
}

/* A flood of one decision: EVENTS_PER_WINDOW alone, the rest one event with
 * the exact count and the first and last timestamps; the next window starts
 * afresh. */
START_TEST(test_coalesce_one_key)
{
	struct egress_coalesce c = { 0 };
	struct egress_decision d = co_dec(EGRESS_DENY, "denied.test", 1);
	struct co_events out = { .n = 0 };
	const unsigned n = 10000;
	unsigned now_published = 0;
	char ts[EGRESSLOG_TS_MAX];

	ck_assert_int_eq(egress_coalesce_deadline(&c), -1);
	for (unsigned i = 0; i < n; i++) {
		snprintf(ts, sizeof(ts), "t%u", i);
		ck_assert(!egress_coalesce_due(&c, 500));
		if (egress_coalesce_add(&c, &d, ts, 500) == EGRESS_COALESCE_PUBLISH)
			now_published++;
	}
	ck_assert_uint_eq(now_published, EGRESS_EVENTS_PER_WINDOW);
	ck_assert_uint_eq(c.held_total, n - EGRESS_EVENTS_PER_WINDOW);
	ck_assert_int_eq(egress_coalesce_deadline(&c), 500 + EGRESS_COALESCE_WINDOW_MS);
	ck_assert(!egress_coalesce_due(&c, 500 + EGRESS_COALESCE_WINDOW_MS - 1));
	ck_assert(egress_coalesce_due(&c, 500 + EGRESS_COALESCE_WINDOW_MS));
	ck_assert_uint_eq(egress_coalesce_flush(&c, co_collect, &out), n - EGRESS_EVENTS_PER_WINDOW);
	ck_assert_uint_eq(out.n, 1);
	ck_assert_uint_eq(out.ev[0].count, n - EGRESS_EVENTS_PER_WINDOW);
	ck_assert_str_eq(out.ev[0].dec.host, "denied.test");
	ck_assert_int_eq(out.ev[0].dec.port, 1);
	ck_assert_int_eq(out.ev[0].dec.verdict, EGRESS_DENY);
	ck_assert_str_eq(out.ev[0].first_ts, "t20");
	snprintf(ts, sizeof(ts), "t%u", n - 1);
	ck_assert_str_eq(out.ev[0].last_ts, ts);
	ck_assert_uint_eq(c.held_total, 0);
	ck_assert_int_eq(egress_coalesce_deadline(&c), -1);
	/* The next window: one by one again. */
	ck_assert_int_eq(egress_coalesce_add(&c, &d, "u", 500 + EGRESS_COALESCE_WINDOW_MS), EGRESS_COALESCE_PUBLISH);
}
END_TEST

/* Many keys and verdicts, over several windows: every decision is in
 * exactly one event (the counts add up per key, the overflow per verdict),
 * and no window yields more than its bound of events. */
START_TEST(test_coalesce_exact_and_bounded)
{
	static const enum egress_verdict verdicts[] = { EGRESS_DENY, EGRESS_DENY_NONGLOBAL, EGRESS_UNREACHABLE,
							EGRESS_ALLOW };
	struct egress_coalesce c = { 0 };
	const unsigned per_ms = 7, total = 60000, hosts = 100;
	uint64_t want[ELEMENTSOF(verdicts)][100] = { { 0 } }, got[ELEMENTSOF(verdicts)][100] = { { 0 } };
	uint64_t want_verdict[_EGRESS_VERDICT_MAX] = { 0 }, got_verdict[_EGRESS_VERDICT_MAX] = { 0 };
	uint64_t events_window = 0, max_events_window = 0, all = 0;
	int64_t window_of_events = -1;

	for (unsigned i = 0; i < total; i++) {
		int64_t now = i / per_ms;
		unsigned v = (i / 3) % ELEMENTSOF(verdicts), h = (i * 7919u) % hosts;
		char host[32];
		struct egress_decision d;
		struct co_events out = { .n = 0 };

		snprintf(host, sizeof(host), "h%u.test", h);
		d = co_dec(verdicts[v], host, (uint16_t)(443 + h % 3));
		want[v][h]++;
		want_verdict[verdicts[v]]++;
		if (egress_coalesce_due(&c, now)) {
			egress_coalesce_flush(&c, co_collect, &out);
			for (size_t k = 0; k < out.n; k++) {
				unsigned hk;

				all += out.ev[k].count;
				got_verdict[out.ev[k].dec.verdict] += out.ev[k].count;
				if (strcmp(out.ev[k].dec.host, EGRESSLOG_OVERFLOW_HOST) == 0) {
					ck_assert_int_eq(out.ev[k].dec.port, 0);
					continue;
				}
				ck_assert_int_eq(sscanf(out.ev[k].dec.host, "h%u.test", &hk), 1);
				for (size_t vv = 0; vv < ELEMENTSOF(verdicts); vv++)
					if (verdicts[vv] == out.ev[k].dec.verdict)
						got[vv][hk] += out.ev[k].count;
			}
			events_window += out.n;
		}
		if (now / EGRESS_COALESCE_WINDOW_MS != window_of_events) {
			if (events_window > max_events_window)
				max_events_window = events_window;
			events_window = 0;
			window_of_events = now / EGRESS_COALESCE_WINDOW_MS;
		}
		if (egress_coalesce_add(&c, &d, "t", now) == EGRESS_COALESCE_PUBLISH) {
			all++;
			got_verdict[d.verdict]++;
			got[v][h]++;
			events_window++;
		}
	}
	{
		struct co_events out = { .n = 0 };

		egress_coalesce_flush(&c, co_collect, &out);
		for (size_t k = 0; k < out.n; k++) {
			all += out.ev[k].count;
			got_verdict[out.ev[k].dec.verdict] += out.ev[k].count;
		}
	}
	ck_assert_uint_eq(all, total);
	for (size_t v = 0; v < _EGRESS_VERDICT_MAX; v++)
		ck_assert_uint_eq(got_verdict[v], want_verdict[v]);
	/* Per key exact where no overflow was needed: never more than wanted. */
	for (size_t v = 0; v < ELEMENTSOF(verdicts); v++)
		for (size_t h = 0; h < hosts; h++)
			ck_assert_uint_le(got[v][h], want[v][h]);
	ck_assert_uint_le(max_events_window,
			  2 * (EGRESS_EVENTS_PER_WINDOW + EGRESS_COALESCE_KEYS + _EGRESS_VERDICT_MAX));
}
END_TEST

/* Events come in the order of their first decisions, the overflow ones
 * too: past the coalesced keys an UNREACHABLE, then a DENY, then an ALLOW
 * (the reverse of the verdicts' order) flush in that order. */
START_TEST(test_coalesce_order)
{
	static const enum egress_verdict late[] = { EGRESS_UNREACHABLE, EGRESS_DENY, EGRESS_ALLOW };
	struct egress_coalesce c = { 0 };
	struct co_events out = { .n = 0 };
	char host[32];
	struct egress_decision d;

	for (unsigned i = 0; i < EGRESS_EVENTS_PER_WINDOW + EGRESS_COALESCE_KEYS; i++) {
		snprintf(host, sizeof(host), "h%u.test", i);
		d = co_dec(EGRESS_DENY, host, 443);
		egress_coalesce_add(&c, &d, "t", 0);
	}
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < ELEMENTSOF(late); i++) {
			snprintf(host, sizeof(host), "late%zu.test", i);
			d = co_dec(late[i], host, 80);
			ck_assert_int_eq(egress_coalesce_add(&c, &d, "u", 1), EGRESS_COALESCE_HELD);
		}
	ck_assert_uint_eq(egress_coalesce_flush(&c, co_collect, &out),
			  EGRESS_COALESCE_KEYS + 2 * ELEMENTSOF(late));
	ck_assert_uint_eq(out.n, EGRESS_COALESCE_KEYS + ELEMENTSOF(late));
	for (size_t i = 0; i < EGRESS_COALESCE_KEYS; i++) {
		snprintf(host, sizeof(host), "h%zu.test", EGRESS_EVENTS_PER_WINDOW + i);
		ck_assert_str_eq(out.ev[i].dec.host, host);
	}
	for (size_t i = 0; i < ELEMENTSOF(late); i++) {
		const struct egress_held *o = &out.ev[EGRESS_COALESCE_KEYS + i];

		ck_assert_int_eq(o->dec.verdict, late[i]);
		ck_assert_str_eq(o->dec.host, EGRESSLOG_OVERFLOW_HOST);
		ck_assert_uint_eq(o->count, 2);
	}
	/* and the order starts afresh after a flush */
	out.n = 0;
	for (unsigned i = 0; i <= EGRESS_COALESCE_KEYS; i++) {
		snprintf(host, sizeof(host), "k%u.test", i);
		d = co_dec(i < EGRESS_COALESCE_KEYS ? EGRESS_DENY : EGRESS_ALLOW, host, 443);
		egress_coalesce_add(&c, &d, "v", 2);
	}
	egress_coalesce_flush(&c, co_collect, &out);
	ck_assert_uint_eq(out.n, EGRESS_COALESCE_KEYS + 1);
	ck_assert_int_eq(out.ev[EGRESS_COALESCE_KEYS].dec.verdict, EGRESS_ALLOW);
	ck_assert_uint_eq(out.ev[EGRESS_COALESCE_KEYS].count, 1);
}
END_TEST

/* Under the bound nothing is held: each decision is published at once, in order. */
START_TEST(test_coalesce_quiet_proxy)
{
	struct egress_coalesce c = { 0 };
	struct egress_decision d = co_dec(EGRESS_ALLOW, "a.test", 443);

	for (int64_t t = 0; t < 100000; t += EGRESS_COALESCE_WINDOW_MS / 4)
		ck_assert_int_eq(egress_coalesce_add(&c, &d, "t", t), EGRESS_COALESCE_PUBLISH);
	ck_assert_uint_eq(c.held_total, 0);
	ck_assert_int_eq(egress_coalesce_deadline(&c), -1);
	ck_assert_str_eq(egress_coalesce_result_to_string(EGRESS_COALESCE_PUBLISH), "publish");
	ck_assert_str_eq(egress_coalesce_result_to_string(EGRESS_COALESCE_HELD), "held");
	ck_assert_str_eq(egress_coalesce_result_to_string(_EGRESS_COALESCE_RESULT_MAX), "unknown");
}
END_TEST

static Suite *egresslog_suite(void)
{
	Suite *s = suite_create("egresslog");
	TCase *tc;

	tc = tcase_create("grammar");
	tcase_add_loop_test(tc, test_parse, 0, ELEMENTSOF(parse_rows));
	tcase_add_loop_test(tc, test_parse_reason, 0, ELEMENTSOF(reason_rows));
	tcase_add_test(tc, test_parse_length);
	tcase_add_test(tc, test_verdict_names);
	tcase_add_loop_test(tc, test_ready, 0, ELEMENTSOF(ready_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("key_encode");
	tcase_add_loop_test(tc, test_key_encode, 0, ELEMENTSOF(key_rows));
	tcase_add_test(tc, test_key_encode_not_utf8);
	tcase_add_loop_test(tc, test_key_bound, 0, ELEMENTSOF(bound_rows));
	tcase_add_test(tc, test_key_bound_escapes);
	suite_add_tcase(s, tc);

	tc = tcase_create("key_decode");
	tcase_add_loop_test(tc, test_key_round_trip, 0, ELEMENTSOF(key_rows));
	tcase_add_test(tc, test_key_round_trip_digested);
	tcase_add_loop_test(tc, test_key_refused, 0, ELEMENTSOF(refuse_rows));
	tcase_add_test(tc, test_key_selector_mismatch);
	tcase_add_test(tc, test_key_selector_raw_refused);
	tcase_add_test(tc, test_key_call_rule);
	tcase_add_test(tc, test_key_field_bounds);
	tcase_add_test(tc, test_key_label_too_long);
	suite_add_tcase(s, tc);

	tc = tcase_create("coalesce");
	tcase_add_test(tc, test_coalesce_one_key);
	tcase_add_test(tc, test_coalesce_exact_and_bounded);
	tcase_add_test(tc, test_coalesce_quiet_proxy);
	tcase_add_test(tc, test_coalesce_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("key_recovery");
	tcase_add_test(tc, test_key_empty_label);
	tcase_add_test(tc, test_key_absent_recovers);
	tcase_add_loop_test(tc, test_key_absent_refused, 0, ELEMENTSOF(absent_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(egresslog_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
