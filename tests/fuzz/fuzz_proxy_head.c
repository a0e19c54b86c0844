/* fuzz_proxy_head.c — libFuzzer target for the egress proxy's pure parsers
 * (egress-proxy/rules.c, proto/egress_rule.c). One input drives:
 *   - the request-head parser, whole and in chunks whose size the first
 *     byte picks: both must agree on the result, the bytes used and the
 *     target, and a DONE head's target must print as a well-formed log line;
 *   - the target parser and the CIDR parser on the raw bytes (not
 *     NUL-terminated, so ASan sees any over-read);
 *   - the allow-rule parser on a NUL-terminated copy: a parsed rule must
 *     match its own host on its own port, and not on another port;
 *   - the non-global table on the first 4 and 16 bytes.
 * A broken invariant aborts. Built by tests/fuzz/run.sh with clang, and by
 * meson with replay_main.c as the unit test 'fuzz_proxy_head'. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "egress_rule.h"
#include "rules.h"

/* The rule parser sees at most this much of an input. */
#define FUZZ_ENTRY_MAX 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_proxy_head: invariant broken: %s\n", what);
		abort();
	}
}

static enum proxy_head_result feed_chunked(struct proxy_head *h, const char *s, size_t len,
					   size_t step, size_t *ret_used)
{
	enum proxy_head_result r = PROXY_HEAD_MORE;
	size_t off = 0, total = 0;

	proxy_head_init(h);
	while (r == PROXY_HEAD_MORE && off < len) {
		size_t n = len - off < step ? len - off : step, used = 0;

		r = proxy_head_feed(h, s + off, n, &used);
		require(used <= n, "used more than fed");
		require(r != PROXY_HEAD_MORE || used == n, "MORE without using everything");
		total += used;
		off += n;
	}
	*ret_used = total;
	return r;
}

static void check_log_line(const struct proxy_target *t)
{
	char line[MSB_EGRESS_HOST_MAX + 64];
	int n = proxy_format_decision(PROXY_DENY_NONGLOBAL, t, line, sizeof(line));

	require(n > 0, "a target does not format");
	require(line[n - 1] == '\n' && memchr(line, '\n', (size_t)n - 1) == NULL,
		"a log line holds a newline");
	require(strchr(line + strlen("DENY-NONGLOBAL "), ' ') == NULL, "a log line holds a space");
}

static void fuzz_head(const char *s, size_t len, size_t step)
{
	struct proxy_head a, b;
	enum proxy_head_result ra, rb;
	size_t ua = 0, ub = 0;

	proxy_head_init(&a);
	ra = proxy_head_feed(&a, s, len, &ua);
	rb = feed_chunked(&b, s, len, step, &ub);
	require(ra == rb && ua == ub && a.ph_len == b.ph_len, "whole and chunked disagree");
	require(ua <= len && a.ph_len == ua, "consumed count");
	require(ua <= PROXY_HEAD_MAX, "consumed past the limit");
	if (ra == PROXY_HEAD_MORE)
		require(ua == len && len < PROXY_HEAD_MAX, "MORE past the limit");
	if (ra == PROXY_HEAD_BAD || ra == PROXY_HEAD_NOT_CONNECT)
		require(a.ph_error != NULL, "a refusal without a reason");
	if (ra == PROXY_HEAD_NOT_CONNECT) {
		struct proxy_target pt;

		/* A plain-HTTP request's target, when it has one, logs as any other. */
		if (proxy_head_plain_target(&a, &pt) == 0) {
			char line[MSB_EGRESS_HOST_MAX + 64];
			int n;

			require(pt.port != 0, "plain target port 0");
			check_log_line(&pt);
			/* The line the proxy writes: one line, the reason its only space after the target. */
			n = proxy_format_decision_reason(PROXY_DENY, &pt, PROXY_REASON_NOT_CONNECT, line, sizeof(line));
			require(n > 0 && line[n - 1] == '\n' && memchr(line, '\n', (size_t)n - 1) == NULL,
				"a not-CONNECT line is not one line");
			require(strchr(line + strlen("DENY "), ' ') == strrchr(line, ' ') &&
				strcmp(strrchr(line, ' '), " " PROXY_REASON_NOT_CONNECT "\n") == 0,
				"a not-CONNECT line's target holds a space");
		}
	} else {
		struct proxy_target pt;

		require(proxy_head_plain_target(&a, &pt) < 0, "a plain target of a head that is not 405");
	}
	if (ra != PROXY_HEAD_DONE)
		return;
	require(strcmp(a.ph_target.host, b.ph_target.host) == 0 &&
		a.ph_target.port == b.ph_target.port, "whole and chunked targets differ");
	require(a.ph_target.port != 0, "port 0");
	require(ua >= 4 && memcmp(s + ua - 4, "\r\n\r\n", 4) == 0, "DONE not at CRLFCRLF");
	check_log_line(&a.ph_target);
}

static void fuzz_target(const char *s, size_t len)
{
	struct proxy_target t, again;
	char text[PROXY_TARGET_MAX + 8];
	int n;

	if (proxy_target_parse(s, len, &t, NULL) < 0)
		return;
	check_log_line(&t);
	n = snprintf(text, sizeof(text), "%s:%u", t.host, (unsigned)t.port);
	require(n > 0 && (size_t)n == len && memcmp(text, s, len) == 0, "a target does not round-trip");
	require(proxy_target_parse(text, (size_t)n, &again, NULL) == 0 &&
		again.parsed.kind == t.parsed.kind, "a printed target does not parse");
}

static void fuzz_rule(const uint8_t *data, size_t size)
{
	char entry[FUZZ_ENTRY_MAX + 1], host[MSB_EGRESS_HOST_MAX + 8];
	struct msb_egress_rule r;
	size_t n = size < FUZZ_ENTRY_MAX ? size : FUZZ_ENTRY_MAX;

	memcpy(entry, data, n);
	entry[n] = '\0';
	if (msb_egress_rule_parse(entry, &r, NULL) < 0) {
		require(msb_egress_rule_check(entry, NULL) < 0, "check and parse disagree");
		return;
	}
	require(msb_egress_rule_check(entry, NULL) == 0, "check and parse disagree");
	require(strlen(entry) <= MSB_EGRESS_ENTRY_MAX && r.port != 0, "rule limits");
	if (r.wildcard)
		snprintf(host, sizeof(host), "x.%s", r.host);
	else
		snprintf(host, sizeof(host), "%s", r.host);
	if (strlen(host) <= MSB_EGRESS_HOST_MAX)
		require(msb_egress_rule_match(&r, host, r.port), "a rule does not match its own host");
	require(!msb_egress_rule_match(&r, host, (uint16_t)(r.port + 1)), "a rule matches another port");
	if (r.wildcard)
		require(!msb_egress_rule_match(&r, r.host, r.port), "a wildcard matches its apex");
}

static void fuzz_addresses(const uint8_t *data, size_t size)
{
	struct proxy_cidr c;

	if (proxy_cidr_parse((const char *)data, size, &c, NULL) == 0)
		require(proxy_cidr_contains(&c, c.family, c.addr), "a CIDR lacks its own address");
	if (size >= 4)
		(void)proxy_addr_is_global(AF_INET, data);
	if (size >= 16)
		(void)proxy_addr_is_global(AF_INET6, data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t step = size ? (size_t)(data[0] % 23) + 1 : 1;

	fuzz_head((const char *)data, size, step);
	fuzz_target((const char *)data, size);
	fuzz_rule(data, size);
	fuzz_addresses(data, size);
	return 0;
}
