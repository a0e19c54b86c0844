/* egress_rule.h — the egress allow-rule grammar, shared by the daemon's spec
 * validation (egress_allow entries) and the egress proxy (MAF_SANDBOX_ALLOW).
 * Pure: no I/O, no logging, no allocation, no name resolution.
 *
 * An entry is HOST or "*." NAME, optionally followed by ":" PORT:
 *
 *   NAME   labels of [A-Za-z0-9_-], each 1..MSB_EGRESS_LABEL_MAX bytes, not
 *          starting or ending with '-', joined by single dots; at most
 *          MSB_EGRESS_HOST_MAX bytes in all (counting a leading "*."); no
 *          trailing dot. A name whose last label is all digits, or "0x" and
 *          hex digits, reads as a number to resolvers and is refused unless
 *          the whole name is an IPv4 literal.
 *   HOST   NAME, or an IPv4 literal (strict dotted quad, no leading zeros),
 *          or an IPv6 literal in brackets ("[2001:db8::1]"; no zone).
 *   PORT   decimal 1..65535, no sign, no leading zero. Absent = 443.
 *
 * Refused: an empty entry, whitespace or control bytes, a scheme ("://"), a
 * path ("/"), a bare "*", a '*' anywhere but a leading "*.", '?', '[' outside
 * an IPv6 literal, an unbracketed IPv6 address, a wildcard over an address,
 * port 0 or a port that is not digits.
 *
 * Matching: case-insensitive for names. "*.x.com" matches a.x.com and
 * a.b.x.com but not x.com. An address rule matches the same address (after
 * parsing, so [2001:DB8::1] matches [2001:db8:0::1]) and never a name. A
 * port-less entry matches port 443 only. */
#ifndef MSB_EGRESS_RULE_H
#define MSB_EGRESS_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSB_EGRESS_HOST_MAX 253
#define MSB_EGRESS_LABEL_MAX 63
#define MSB_EGRESS_DEFAULT_PORT 443
/* The longest entry: a longest host, ':' and five digits. A bracketed IPv6
 * literal ("[" 45 "]") is shorter. */
#define MSB_EGRESS_ENTRY_MAX (MSB_EGRESS_HOST_MAX + 1 + 5)
/* The longest IPv6 literal text, without brackets (INET6_ADDRSTRLEN - 1). */
#define MSB_EGRESS_IPV6_TEXT_MAX 45

enum msb_egress_host_kind {
	MSB_EGRESS_HOST_NAME,
	MSB_EGRESS_HOST_IPV4,
	MSB_EGRESS_HOST_IPV6,
	_MSB_EGRESS_HOST_KIND_MAX,
};

/* A parsed host. addr holds the address in network order (4 or 16 bytes)
 * for the literal kinds, zeros for a name. */
struct msb_egress_host {
	enum msb_egress_host_kind kind;
	unsigned char addr[16];
};

struct msb_egress_rule {
	/* Lower-cased name (for a wildcard, the suffix after "*."), or the
	 * address literal as given (IPv6 without its brackets). */
	char host[MSB_EGRESS_HOST_MAX + 1];
	bool wildcard;
	bool is_ip;                      /* kind is IPV4 or IPV6 */
	enum msb_egress_host_kind kind;
	unsigned char addr[16];          /* the address when is_ip */
	uint16_t port;
};

const char *msb_egress_host_kind_to_string(enum msb_egress_host_kind k);

/* Parses s[0..len) as a HOST (a name, an IPv4 literal or a bracketed IPv6
 * literal; no wildcard, no port). Returns 0 and fills *ret_host (may be
 * NULL), or -EINVAL and *reterr_reason (static text; may be NULL). */
int msb_egress_host_parse(const char *s, size_t len, struct msb_egress_host *ret_host,
			  const char **reterr_reason);

/* Parses s[0..len) as a PORT. Returns 0 and *ret_port, or -EINVAL and
 * *reterr_reason (static text; may be NULL). */
int msb_egress_port_parse(const char *s, size_t len, uint16_t *ret_port,
			  const char **reterr_reason);

/* Parses one entry (NUL-terminated, not trimmed). Returns 0 and fills
 * *ret_rule, or -EINVAL and *reterr_reason (static text saying what is
 * wrong, without the entry; may be NULL). *ret_rule is written only on
 * success. */
int msb_egress_rule_parse(const char *entry, struct msb_egress_rule *ret_rule,
			  const char **reterr_reason);

/* msb_egress_rule_parse without the result. */
int msb_egress_rule_check(const char *entry, const char **reterr_reason);

/* Whether the rule admits host (a HOST as msb_egress_host_parse takes it,
 * NUL-terminated; an IPv6 literal with or without brackets) on port. A host
 * that does not parse matches nothing. */
bool msb_egress_rule_match(const struct msb_egress_rule *rule, const char *host, uint16_t port);

#endif
