/* egresslog.h — the egress proxy's words: its log grammar (behaviour-docker
 * §4.2, §4.5 step 3) and the key label it carries (maf-sandbox.key.v1, §3),
 * which says whose decisions its log holds.
 *
 * Pure: no I/O, no logging, no engine.
 *
 * Ownership: egresslog_parse fills a caller-owned fixed-size struct (no
 * allocation). egresslog_key_encode returns a malloc'd string.
 * egresslog_key_decode fills a caller-owned struct msb_key on success only,
 * released with msb_key_release() (proto/sandbox.h). */
#ifndef MSB_EGRESSLOG_H
#define MSB_EGRESSLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox.h"

/* A decision's host: a DNS name (253) or a bracketed IPv6 literal. */
#define EGRESSLOG_HOST_MAX    (253 + 2)
#define EGRESSLOG_PORT_DIGITS 5
/* The readiness line: "listening on <port>; allowing: <a, b | nothing>". */
#define EGRESSLOG_READY_PREFIX "listening on "

/* The proxy's key label, and its bound: the summed field bytes and the
 * encoded characters are each at most this (inclusive). */
#define EGRESSLOG_LABEL_KEY   "maf-sandbox.key.v1"
#define EGRESSLOG_KEY_MAX     4096

enum egress_verdict {
	EGRESS_ALLOW,            /* allowed and connected */
	EGRESS_DENY,             /* host or port not allowed */
	EGRESS_DENY_NONGLOBAL,   /* allowed name, non-global address */
	EGRESS_UNREACHABLE,      /* allowed, the dial failed */
	_EGRESS_VERDICT_MAX
};
/* The log's word: "ALLOW", "DENY", "DENY-NONGLOBAL", "UNREACHABLE". */
const char *egress_verdict_to_string(enum egress_verdict v);

/* Why, beyond the verdict: a decision line may end in a reason word. */
enum egress_reason {
	EGRESS_REASON_NONE,
	EGRESS_REASON_NOT_CONNECT,   /* "not-CONNECT": plain HTTP, refused with 405 (DENY) */
	_EGRESS_REASON_MAX
};
/* The log's word ("not-CONNECT"), or NULL for none. */
const char *egress_reason_to_log(enum egress_reason r);
/* The wire's word ("not_connect": egress.decision's reason), or NULL for none. */
const char *egress_reason_to_string(enum egress_reason r);

struct egress_decision {
	enum egress_verdict verdict;
	enum egress_reason reason;          /* EGRESS_REASON_NONE for a CONNECT's decision */
	char host[EGRESSLOG_HOST_MAX + 1];  /* NUL-terminated; brackets kept */
	uint16_t port;                      /* 1..65535 */
};

/* One log line (line[0..len), no '\n'; one trailing '\r' is dropped) against
 * ^(ALLOW|DENY-NONGLOBAL|DENY|UNREACHABLE) (?P<host>.+):(?P<port>\d+)( REASON)?$ with
 * REASON a known reason word (egress_reason_to_log; only after DENY), and
 * the host greedy: the port is the digits after the last ':', so
 * "ALLOW ::1:443" is host "::1". Beyond the pattern: the host is 1..
 * EGRESSLOG_HOST_MAX bytes of printable ASCII (no space, no control, no
 * byte >= 0x80); the port is 1..EGRESSLOG_PORT_DIGITS ASCII digits valued
 * 1..65535. Returns 1 and fills *ret for a decision, 0 for anything else
 * (the readiness line, a blank line, noise; *ret untouched). Never fails. */
int egresslog_parse(const char *line, size_t len, struct egress_decision *ret);

/* True when line[0..len) starts with EGRESSLOG_READY_PREFIX. */
bool egresslog_is_ready(const char *line, size_t len);

/* ---- coalescing: one proxy's decisions as a bounded number of events ----
 *
 * Per proxy, time runs in windows of EGRESS_COALESCE_WINDOW_MS, each opened
 * by the first decision after the last one ended. The first
 * EGRESS_EVENTS_PER_WINDOW decisions of a window are published one by one
 * (count 1). The rest are held: identical (verdict, host, port) add to one
 * entry (count, first and last timestamps), up to EGRESS_COALESCE_KEYS
 * entries in the order first seen; a decision with a new key once they are
 * taken adds to its verdict's overflow entry (host "*", port 0). When the
 * window ends the held entries are published, one event each: at most
 * EVENTS_PER_WINDOW + COALESCE_KEYS + the verdicts' count events a window
 * (plus COALESCE_KEYS + the verdicts' count per flush the caller makes
 * before the window's end), whatever the guest does, and every decision is
 * in exactly one event, the events in the order of their first decisions.
 *
 * Pure: the caller gives the time (a monotonic clock in ms) and publishes. */
#define EGRESS_COALESCE_WINDOW_MS 1000
#define EGRESS_EVENTS_PER_WINDOW  20
#define EGRESS_COALESCE_KEYS      32
#define EGRESSLOG_TS_MAX          40
#define EGRESSLOG_OVERFLOW_HOST   "*"

struct egress_held {
	struct egress_decision dec;
	uint64_t count;
	char first_ts[EGRESSLOG_TS_MAX];
	char last_ts[EGRESSLOG_TS_MAX];
};

struct egress_coalesce {
	bool window_open;
	int64_t window_end_ms;
	unsigned window_published;        /* published one by one in this window */
	struct egress_held held[EGRESS_COALESCE_KEYS];
	size_t n_held;
	struct egress_held overflow[_EGRESS_VERDICT_MAX];
	uint64_t held_total;              /* decisions held now */
	/* the overflow entries in use, in the order first seen (verdicts) */
	unsigned char overflow_order[_EGRESS_VERDICT_MAX];
	size_t n_overflow;
};

enum egress_coalesce_result {
	EGRESS_COALESCE_PUBLISH,   /* publish it now, alone (nothing is held) */
	EGRESS_COALESCE_HELD,      /* held until the window's end */
	_EGRESS_COALESCE_RESULT_MAX
};
/* "publish", "held" ("unknown" for anything else). */
const char *egress_coalesce_result_to_string(enum egress_coalesce_result r);

/* A decision at now_ms with its timestamp ts (cut to EGRESSLOG_TS_MAX - 1).
 * The caller must have flushed first when egress_coalesce_due(). */
enum egress_coalesce_result egress_coalesce_add(struct egress_coalesce *c, const struct egress_decision *dec,
					       const char *ts, int64_t now_ms);
/* Something is held and its window has ended at now_ms. */
bool egress_coalesce_due(const struct egress_coalesce *c, int64_t now_ms);
/* When the held entries are due (ms, the same clock), or -1 when none is held. */
int64_t egress_coalesce_deadline(const struct egress_coalesce *c);
/* Hands each held entry to fn (held entries in the order first seen, then
 * the overflow entries in the order first seen: every entry in the order
 * of its first decision), forgets them, and returns how many decisions
 * they carried. The window goes on: a flush before its end (the caller's
 * stream ended) lets up to COALESCE_KEYS + the verdicts' count more
 * entries be held in it. */
typedef void egress_coalesce_fn(const struct egress_held *h, void *arg);
uint64_t egress_coalesce_flush(struct egress_coalesce *c, egress_coalesce_fn *fn, void *arg);

/* key.v1: URL-safe base64, with padding, of Python's
 * json.dumps([scope, thread_id, agent_dir, call_id], ensure_ascii=True)
 * (", " separators; \" \\ \n \r \t \b \f; other bytes below 0x20 and 0x7f as
 * \u00XX; non-ASCII as lowercase \uXXXX, astral characters as surrogate
 * pairs). "" when the summed field bytes exceed EGRESSLOG_KEY_MAX, when the
 * encoding does, or when a field is not valid UTF-8 (no Python str is).
 * Every field must be non-NULL. Returns a malloc'd string, never NULL. */
char *egresslog_key_encode(const struct msb_key *key);

/* The key of a proxy from its key.v1 label and its labels object (both
 * borrowed; labels NULL counts as empty).
 * - label non-empty: strict base64url (alphabet A-Za-z0-9-_, '=' padding
 *   required, canonical; '+' and '/' refused) of at most EGRESSLOG_KEY_MAX
 *   characters, decoding to a JSON array of exactly 4 strings; scope,
 *   thread_id and agent_dir non-empty; every field at most
 *   MSB_KEY_FIELD_MAX_BYTES; names_label_value() of each of the first three
 *   equal to its selector label (maf-sandbox.scope/thread/agent); a
 *   non-empty call equal after names_label_value() to maf-sandbox.call, an
 *   empty one only with that label absent. 0, or -EINVAL for any refusal
 *   (present but refused: never to be overridden by a caller's key).
 * - label NULL (no key.v1 label): the key from the selector labels when all
 *   three are present and unhashed (names_label_value(v) is v itself) and
 *   maf-sandbox.call is absent; call_id "". 0, or -ENOENT.
 * - label "" (recovery disabled): -ENOENT.
 * *ret is written only on 0. */
int egresslog_key_decode(const char *label, const json_t *labels, struct msb_key *ret);

#endif
