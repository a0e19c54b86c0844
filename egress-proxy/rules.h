/* rules.h — the pure parts of maf-sandbox-egress-proxy (behaviour-docker §4):
 * its configuration, the CONNECT request head, the target, which resolved
 * addresses it may dial, and the exact bytes and log lines it writes. No I/O,
 * no logging, no allocation: everything works on caller-owned structs, so the
 * unit tests and the fuzzer reach all of it.
 *
 * The request head (fed in chunks to proxy_head_feed):
 *   - it ends at the first empty line, CRLF CRLF, within PROXY_HEAD_MAX bytes
 *     counting the terminator; every LF must follow a CR and every CR be
 *     followed by an LF, and no byte may be NUL;
 *   - the request line is exactly three tokens of visible ASCII separated by
 *     single spaces: METHOD TARGET VERSION, VERSION "HTTP/1.0" or "HTTP/1.1";
 *   - METHOD must be "CONNECT" (case-sensitive) else 405, so absolute-form
 *     proxying ("GET http://x/ HTTP/1.1") is refused;
 *   - TARGET is authority form, host ":" port (proxy_target_parse);
 *   - header lines are ignored (they only count toward the limit).
 * Garbage (NUL, a bare CR or LF, a control byte, a double space, a fourth
 * token) is reported as soon as it is seen; the request line's verdict
 * (400/405) when its CRLF arrives; success only at the end of the head. */
#ifndef MSB_PROXY_RULES_H
#define MSB_PROXY_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress_rule.h"

/* Every limit of the proxy. */
#define PROXY_DEFAULT_PORT 3128
#define PROXY_HEAD_MAX (64 * 1024)          /* request head bytes, CRLFCRLF included */
#define PROXY_HEAD_TIMEOUT_MS 10000         /* from accept to the end of the head */
#define PROXY_DNS_TIMEOUT_MS 10000          /* one name lookup, both families */
#define PROXY_CONNECT_TIMEOUT_MS 20000      /* all addresses of one target, in turn */
#define PROXY_LINGER_MS 2000                /* reading (and dropping) after an error reply */
/* A tunnel with no byte either way for this long is closed (a stalled one
 * would hold a connection slot for ever). MAF_SANDBOX_PROXY_IDLE_MS sets it,
 * between PROXY_TUNNEL_IDLE_MIN_MS and PROXY_TUNNEL_IDLE_MAX_MS. */
#define PROXY_TUNNEL_IDLE_MS     900000
#define PROXY_TUNNEL_IDLE_MIN_MS 100
#define PROXY_TUNNEL_IDLE_MAX_MS 86400000
#define PROXY_MAX_CONNECTIONS 512           /* client connections at once; more are closed */
#define PROXY_PIPE_HIGH_WATER (64 * 1024)   /* a side's output above this pauses the other's reads */
#define PROXY_MAX_RULES 256                 /* MAF_SANDBOX_ALLOW entries (= MSB_SPEC_MAX_EGRESS_ALLOW) */
#define PROXY_MAX_CIDRS 64                  /* MAF_SANDBOX_PRIVATE_ALLOW entries */
#define PROXY_MAX_ADDRS 16                  /* resolved addresses tried per target */
#define PROXY_LISTEN_BACKLOG 128
#define PROXY_ACCEPT_RETRY_MS 1000          /* accept paused this long after EMFILE and kin */
#define PROXY_TARGET_MAX MSB_EGRESS_ENTRY_MAX
#define PROXY_METHOD_KEPT 8                 /* method bytes kept: enough to tell "CONNECT" */
#define PROXY_VERSION_KEPT 8                /* version bytes kept: "HTTP/1.x" */
#define PROXY_REPLY_MAX 128                 /* the longest reply head */

/* ---- configuration (the environment) ---------------------------------------- */

struct proxy_cidr {
	int family;                 /* AF_INET or AF_INET6 */
	unsigned char addr[16];     /* network order, host bits zero */
	unsigned prefix;            /* 0..32 or 0..128 */
};

struct proxy_cidr_list {
	size_t n;
	struct proxy_cidr cidrs[PROXY_MAX_CIDRS];
};

struct proxy_config {
	uint16_t port;
	size_t n_rules;
	struct msb_egress_rule rules[PROXY_MAX_RULES];
	char entries[PROXY_MAX_RULES][MSB_EGRESS_ENTRY_MAX + 1];  /* as given, trimmed */
	struct proxy_cidr_list private_allow;
};

/* The next item of a comma-separated list at *cursor, trimmed of ASCII
 * whitespace, skipping empty items. Returns false at the end; otherwise
 * *ret_item and *ret_len (not NUL-terminated) and advances *cursor. */
bool proxy_list_next(const char **cursor, const char **ret_item, size_t *ret_len);

/* ADDRESS or ADDRESS "/" PREFIX; IPv4 a strict dotted quad, IPv6 as
 * inet_pton reads it (no brackets, no zone); PREFIX decimal without leading
 * zeros, at most 32 or 128; no host bits set past the prefix. A bare address
 * is a single host. Returns 0 and *ret_cidr, or -EINVAL and *reterr_reason. */
int proxy_cidr_parse(const char *s, size_t len, struct proxy_cidr *ret_cidr,
		     const char **reterr_reason);
bool proxy_cidr_contains(const struct proxy_cidr *cidr, int family, const unsigned char *addr);
bool proxy_cidr_list_contains(const struct proxy_cidr_list *list, int family,
			      const unsigned char *addr);

/* Builds the configuration from the three variables (each NULL when unset):
 * MAF_SANDBOX_ALLOW (comma list of egress_rule.h rules; unset = none),
 * MAF_SANDBOX_PROXY_PORT (1..65535, no sign, no leading zero; unset = 3128),
 * MAF_SANDBOX_PRIVATE_ALLOW (comma list of proxy_cidr_parse; unset = none).
 * Returns 0 and fills *ret_config, or -EINVAL and a sentence naming the
 * variable and the entry in reterr[0..reterr_size). */
int proxy_config_parse(const char *allow, const char *port, const char *private_allow,
		       struct proxy_config *ret_config, char *reterr, size_t reterr_size);

/* ---- the request ------------------------------------------------------------- */

struct proxy_target {
	char host[MSB_EGRESS_HOST_MAX + 1];  /* as sent; an IPv6 literal keeps its brackets */
	struct msb_egress_host parsed;       /* name or literal, and the literal's address */
	uint16_t port;
};

/* Authority form: HOST ":" PORT with msb_egress_host_parse's HOST (a name,
 * an IPv4 literal or a bracketed IPv6 literal; no wildcard) and
 * msb_egress_port_parse's PORT; at most PROXY_TARGET_MAX bytes. Returns 0
 * and *ret_target, or -EINVAL and *reterr_reason (static; may be NULL). */
int proxy_target_parse(const char *s, size_t len, struct proxy_target *ret_target,
		       const char **reterr_reason);

enum proxy_head_result {
	PROXY_HEAD_MORE,         /* need more bytes */
	PROXY_HEAD_DONE,         /* a whole CONNECT head; the target is parsed */
	PROXY_HEAD_BAD,          /* 400 Bad Request */
	PROXY_HEAD_NOT_CONNECT,  /* 405 Method Not Allowed */
	_PROXY_HEAD_RESULT_MAX,
};

struct proxy_head {
	int ph_state;                    /* the parser's (rules.c) */
	enum proxy_head_result ph_result;
	size_t ph_len;                   /* bytes consumed */
	const char *ph_error;            /* BAD/NOT_CONNECT: why (static) */
	size_t ph_method_len, ph_target_len, ph_version_len;  /* full lengths */
	char ph_method[PROXY_METHOD_KEPT];
	char ph_target_text[PROXY_TARGET_MAX];
	char ph_version[PROXY_VERSION_KEPT];
	struct proxy_target ph_target;   /* DONE: the target */
};

const char *proxy_head_result_to_string(enum proxy_head_result r);

void proxy_head_init(struct proxy_head *head);

/* Feeds buf[0..len). Consumes bytes up to and including the one that
 * decides (the head's final LF for DONE) and sets *ret_used to their count;
 * what follows a DONE head is the tunnel's payload. Once a result other
 * than MORE is returned, every later call returns it again, using 0 bytes. */
enum proxy_head_result proxy_head_feed(struct proxy_head *head, const char *buf, size_t len,
				       size_t *ret_used);

/* ---- decisions and replies ------------------------------------------------------ */

enum proxy_decision {
	PROXY_ALLOW,
	PROXY_DENY,
	PROXY_DENY_NONGLOBAL,
	PROXY_UNREACHABLE,
	_PROXY_DECISION_MAX,
};

/* "ALLOW", "DENY", "DENY-NONGLOBAL", "UNREACHABLE". */
const char *proxy_decision_to_string(enum proxy_decision d);
/* 200, 403, 403, 502. */
int proxy_decision_status(enum proxy_decision d);

/* Whether any rule admits the target's host and port. */
bool proxy_config_allows(const struct proxy_config *config, const struct proxy_target *target);

/* Whether addr (4 or 16 bytes, network order) is globally routable: not in
 * the special-purpose table (rules.c; IPv4-mapped, NAT64 64:ff9b::/96 and
 * 6to4 addresses are judged by the IPv4 address inside), and for IPv6
 * inside 2000::/3. */
bool proxy_addr_is_global(int family, const unsigned char *addr);
/* The proxy may dial addr: it is inside private_allow, or it is global. */
bool proxy_addr_is_allowed(const struct proxy_cidr_list *private_allow, int family,
			   const unsigned char *addr);

/* The reason phrase of the statuses the proxy sends (NULL for others). */
const char *proxy_status_reason(int status);
/* The reply head for status: "HTTP/1.1 200 Connection Established\r\n\r\n",
 * or "HTTP/1.1 <code> <reason>\r\ncontent-length: 0\r\n\r\n". Returns its
 * length, or -EINVAL for a status without a reason or a short buffer. */
int proxy_format_reply(int status, char *buf, size_t size);
/* The log line "<DECISION> <host>:<port>\n" (host as sent). Returns its
 * length, or -EINVAL for a short buffer. */
int proxy_format_decision(enum proxy_decision d, const struct proxy_target *target, char *buf,
			  size_t size);

/* The reason word a decision line may end with (after a space): a request
 * that is not CONNECT (plain HTTP through the proxy, refused with 405). */
#define PROXY_REASON_NOT_CONNECT "not-CONNECT"

/* "<DECISION> <host>:<port> <reason>\n". As proxy_format_decision. */
int proxy_format_decision_reason(enum proxy_decision d, const struct proxy_target *target,
				 const char *reason, char *buf, size_t size);

/* The target of a head refused as not CONNECT (PROXY_HEAD_NOT_CONNECT), from
 * an absolute-form request target: "http://" or "https://" (any case), then
 * the authority up to the first '/', '?' or '#' (no userinfo), its port or
 * else 80 / 443, read by proxy_target_parse. Returns 0 and *ret_target, or
 * -EINVAL (another result, origin form, a target cut at PROXY_TARGET_MAX
 * bytes before its authority ended, an authority that does not parse). */
int proxy_head_plain_target(const struct proxy_head *head, struct proxy_target *ret_target);

#endif
