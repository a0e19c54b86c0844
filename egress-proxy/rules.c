/* rules.c — the egress proxy's pure parts (see rules.h). */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "rules.h"

/* ---- lists and CIDRs ---------------------------------------------------------- */

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool proxy_list_next(const char **cursor, const char **ret_item, size_t *ret_len)
{
	const char *p = *cursor;

	while (*p) {
		const char *start = p, *end;

		while (*p && *p != ',')
			p++;
		end = p;
		if (*p == ',')
			p++;
		while (start < end && is_space(*start))
			start++;
		while (end > start && is_space(end[-1]))
			end--;
		if (end > start) {
			*cursor = p;
			*ret_item = start;
			*ret_len = (size_t)(end - start);
			return true;
		}
	}
	*cursor = p;
	return false;
}

static int refuse(const char **reterr_reason, const char *reason)
{
	if (reterr_reason)
		*reterr_reason = reason;
	return -EINVAL;
}

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* Whether the first bits of a equal those of b. */
static bool prefix_eq(const unsigned char *a, const unsigned char *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));

	if (memcmp(a, b, whole) != 0)
		return false;
	return rest == 0 || ((a[whole] ^ b[whole]) & mask) == 0;
}

static bool host_bits_zero(const unsigned char *addr, size_t len, unsigned prefix)
{
	for (size_t bit = prefix; bit < len * 8; bit++)
		if (addr[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	return true;
}

static int cidr_address(const char *s, size_t len, struct proxy_cidr *c, const char **reterr_reason)
{
	char buf[MSB_EGRESS_IPV6_TEXT_MAX + 1];
	struct msb_egress_host h;

	if (memchr(s, ':', len)) {
		if (len > MSB_EGRESS_IPV6_TEXT_MAX || memchr(s, '%', len))
			return refuse(reterr_reason, "not an IPv6 address");
		memcpy(buf, s, len);
		buf[len] = '\0';
		if (inet_pton(AF_INET6, buf, c->addr) != 1)
			return refuse(reterr_reason, "not an IPv6 address");
		c->family = AF_INET6;
		return 0;
	}
	if (msb_egress_host_parse(s, len, &h, NULL) < 0 || h.kind != MSB_EGRESS_HOST_IPV4)
		return refuse(reterr_reason, "not an IPv4 address (a strict dotted quad) or an IPv6 "
				  "address");
	memcpy(c->addr, h.addr, 4);
	c->family = AF_INET;
	return 0;
}

int proxy_cidr_parse(const char *s, size_t len, struct proxy_cidr *ret_cidr,
		     const char **reterr_reason)
{
	struct proxy_cidr c = { 0 };
	const char *slash = memchr(s, '/', len);
	size_t alen = slash ? (size_t)(slash - s) : len, max;
	int r;

	r = cidr_address(s, alen, &c, reterr_reason);
	if (r < 0)
		return r;
	max = addr_len(c.family) * 8;
	c.prefix = (unsigned)max;
	if (slash) {
		const char *p = slash + 1;
		size_t plen = len - alen - 1;
		unsigned v = 0;

		if (plen == 0 || plen > 3 || (plen > 1 && p[0] == '0'))
			return refuse(reterr_reason, "the prefix length must be decimal without "
					  "leading zeros");
		for (size_t i = 0; i < plen; i++) {
			if (p[i] < '0' || p[i] > '9')
				return refuse(reterr_reason, "the prefix length must be decimal");
			v = v * 10 + (unsigned)(p[i] - '0');
		}
		if (v > max)
			return refuse(reterr_reason, "the prefix length is longer than the address");
		c.prefix = v;
	}
	if (!host_bits_zero(c.addr, addr_len(c.family), c.prefix))
		return refuse(reterr_reason, "the address has bits set past the prefix length");
	*ret_cidr = c;
	return 0;
}

bool proxy_cidr_contains(const struct proxy_cidr *cidr, int family, const unsigned char *addr)
{
	return cidr->family == family && prefix_eq(cidr->addr, addr, cidr->prefix);
}

bool proxy_cidr_list_contains(const struct proxy_cidr_list *list, int family,
			      const unsigned char *addr)
{
	for (size_t i = 0; i < list->n; i++)
		if (proxy_cidr_contains(&list->cidrs[i], family, addr))
			return true;
	return false;
}

/* ---- configuration -------------------------------------------------------------- */

static int config_fail(char *reterr, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int config_fail(char *reterr, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reterr, size, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Entries are shown cut to this many bytes in messages. */
#define CONFIG_ECHO_MAX 80
#define ECHO(len) ((int)((len) < CONFIG_ECHO_MAX ? (len) : CONFIG_ECHO_MAX))

static int config_allow(struct proxy_config *c, const char *text, char *reterr, size_t size)
{
	const char *item, *why;
	size_t len;

	while (proxy_list_next(&text, &item, &len)) {
		char *entry;

		if (c->n_rules == PROXY_MAX_RULES)
			return config_fail(reterr, size, "MAF_SANDBOX_ALLOW has more than %d entries",
					   PROXY_MAX_RULES);
		if (len > MSB_EGRESS_ENTRY_MAX)
			return config_fail(reterr, size, "MAF_SANDBOX_ALLOW entry %zu \"%.*s...\" is "
					   "longer than %d bytes", c->n_rules, ECHO(len), item,
					   MSB_EGRESS_ENTRY_MAX);
		entry = c->entries[c->n_rules];
		memcpy(entry, item, len);
		entry[len] = '\0';
		if (msb_egress_rule_parse(entry, &c->rules[c->n_rules], &why) < 0)
			return config_fail(reterr, size, "MAF_SANDBOX_ALLOW entry %zu \"%.*s\" is not "
					   "a valid rule: %s", c->n_rules, ECHO(len), entry, why);
		c->n_rules++;
	}
	return 0;
}

static int config_port(struct proxy_config *c, const char *text, char *reterr, size_t size)
{
	const char *why;

	if (!*text)
		return config_fail(reterr, size, "MAF_SANDBOX_PROXY_PORT is set but empty");
	if (msb_egress_port_parse(text, strlen(text), &c->port, &why) < 0)
		return config_fail(reterr, size, "MAF_SANDBOX_PROXY_PORT \"%.*s\" is not a port "
				   "1..65535: %s", ECHO(strlen(text)), text, why);
	return 0;
}

static int config_private(struct proxy_config *c, const char *text, char *reterr, size_t size)
{
	struct proxy_cidr_list *l = &c->private_allow;
	const char *item, *why;
	size_t len;

	while (proxy_list_next(&text, &item, &len)) {
		if (l->n == PROXY_MAX_CIDRS)
			return config_fail(reterr, size, "MAF_SANDBOX_PRIVATE_ALLOW has more than %d "
					   "entries", PROXY_MAX_CIDRS);
		if (proxy_cidr_parse(item, len, &l->cidrs[l->n], &why) < 0)
			return config_fail(reterr, size, "MAF_SANDBOX_PRIVATE_ALLOW entry %zu \"%.*s\" "
					   "is not a CIDR: %s", l->n, ECHO(len), item, why);
		l->n++;
	}
	return 0;
}

int proxy_config_parse(const char *allow, const char *port, const char *private_allow,
		       struct proxy_config *ret_config, char *reterr, size_t reterr_size)
{
	static struct proxy_config zero;
	struct proxy_config *c = ret_config;
	int r = 0;

	/* Built in place (the struct is large); on failure it is reset. */
	*c = zero;
	c->port = PROXY_DEFAULT_PORT;
	if (allow)
		r = config_allow(c, allow, reterr, reterr_size);
	if (r == 0 && port)
		r = config_port(c, port, reterr, reterr_size);
	if (r == 0 && private_allow)
		r = config_private(c, private_allow, reterr, reterr_size);
	if (r < 0)
		*c = zero;
	return r;
}

bool proxy_config_allows(const struct proxy_config *config, const struct proxy_target *target)
{
	for (size_t i = 0; i < config->n_rules; i++)
		if (msb_egress_rule_match(&config->rules[i], target->host, target->port))
			return true;
	return false;
}

/* ---- the target ------------------------------------------------------------------ */

int proxy_target_parse(const char *s, size_t len, struct proxy_target *ret_target,
		       const char **reterr_reason)
{
	struct proxy_target t = { .host = "" };
	const char *colon;
	size_t hlen;
	int r;

	if (len > PROXY_TARGET_MAX)
		return refuse(reterr_reason, "the target is too long");
	if (memchr(s, '/', len))
		return refuse(reterr_reason, "the target must be host:port, not a URL or a path");
	if (len > 0 && s[0] == '[') {
		colon = memchr(s, ']', len);
		if (!colon || colon + 1 == s + len || colon[1] != ':')
			return refuse(reterr_reason, "the target must be [IPv6]:port");
		colon++;
	} else {
		colon = memrchr(s, ':', len);
		if (!colon)
			return refuse(reterr_reason, "the target must be host:port");
	}
	hlen = (size_t)(colon - s);
	r = msb_egress_host_parse(s, hlen, &t.parsed, reterr_reason);
	if (r < 0)
		return r;
	r = msb_egress_port_parse(colon + 1, len - hlen - 1, &t.port, reterr_reason);
	if (r < 0)
		return r;
	assert(hlen < sizeof(t.host));
	memcpy(t.host, s, hlen);
	t.host[hlen] = '\0';
	*ret_target = t;
	return 0;
}

/* ---- the head --------------------------------------------------------------------- */

enum head_state {
	HEAD_METHOD,
	HEAD_TARGET,
	HEAD_VERSION,
	HEAD_LINE_LF,     /* the request line's CR was seen */
	HEAD_FIELD_START, /* at the start of a header line (or the end) */
	HEAD_FIELD,       /* inside a header line */
	HEAD_FIELD_LF,    /* a header line's CR was seen */
	HEAD_END_LF,      /* the empty line's CR was seen */
	HEAD_FINISHED,
};

static const char *const head_result_names[_PROXY_HEAD_RESULT_MAX] = {
	[PROXY_HEAD_MORE] = "more",
	[PROXY_HEAD_DONE] = "done",
	[PROXY_HEAD_BAD] = "bad",
	[PROXY_HEAD_NOT_CONNECT] = "not-connect",
};

const char *proxy_head_result_to_string(enum proxy_head_result r)
{
	if ((unsigned)r >= ELEMENTSOF(head_result_names))
		return NULL;
	return head_result_names[r];
}

void proxy_head_init(struct proxy_head *head)
{
	memset(head, 0, sizeof(*head));
	head->ph_state = HEAD_METHOD;
	head->ph_result = PROXY_HEAD_MORE;
}

static enum proxy_head_result head_finish(struct proxy_head *h, enum proxy_head_result r,
					  const char *why)
{
	h->ph_state = HEAD_FINISHED;
	h->ph_result = r;
	h->ph_error = why;
	return r;
}

static enum proxy_head_result head_bad(struct proxy_head *h, const char *why)
{
	return head_finish(h, PROXY_HEAD_BAD, why);
}

/* Keeps a token byte; past cap only the length grows. */
static void token_add(char *buf, size_t cap, size_t *len, char c)
{
	if (*len < cap)
		buf[*len] = c;
	if (*len < SIZE_MAX)
		(*len)++;
}

static bool token_is(const char *buf, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(buf, want, len) == 0;
}

/* The request line is complete: version, then method, then target. */
static enum proxy_head_result request_line_verdict(struct proxy_head *h)
{
	const char *why;

	if (!token_is(h->ph_version, h->ph_version_len, "HTTP/1.1") &&
	    !token_is(h->ph_version, h->ph_version_len, "HTTP/1.0"))
		return head_bad(h, "the version must be HTTP/1.0 or HTTP/1.1");
	if (!token_is(h->ph_method, h->ph_method_len, "CONNECT"))
		return head_finish(h, PROXY_HEAD_NOT_CONNECT, "only CONNECT is served");
	if (h->ph_target_len > PROXY_TARGET_MAX)
		return head_bad(h, "the target is too long");
	if (proxy_target_parse(h->ph_target_text, h->ph_target_len, &h->ph_target, &why) < 0)
		return head_bad(h, why);
	h->ph_state = HEAD_FIELD_START;
	return PROXY_HEAD_MORE;
}

/* One byte of the request line's tokens. next is the state after a space;
 * a CR ends the line (allowed only in the last token). */
static enum proxy_head_result token_byte(struct proxy_head *h, char c, char *buf, size_t cap,
					 size_t *len)
{
	unsigned char u = (unsigned char)c;

	if (c == ' ') {
		if (*len == 0)
			return head_bad(h, "the request line has an empty part (a double, leading "
					"or trailing space)");
		if (h->ph_state == HEAD_VERSION)
			return head_bad(h, "the request line has more than 3 parts");
		h->ph_state++;
		return PROXY_HEAD_MORE;
	}
	if (c == '\r') {
		if (*len == 0)
			return head_bad(h, "the request line has an empty part (a double, leading "
					"or trailing space)");
		if (h->ph_state != HEAD_VERSION)
			return head_bad(h, "the request line has fewer than 3 parts");
		h->ph_state = HEAD_LINE_LF;
		return PROXY_HEAD_MORE;
	}
	if (c == '\n')
		return head_bad(h, "a line ends with a bare LF");
	if (u < 0x21 || u > 0x7e)
		return head_bad(h, "the request line holds a control or non-ASCII byte");
	token_add(buf, cap, len, c);
	return PROXY_HEAD_MORE;
}

/* One byte after the request line: header lines, then the empty line. */
static enum proxy_head_result field_byte(struct proxy_head *h, char c)
{
	if (c == '\0')
		return head_bad(h, "the head holds a NUL byte");
	switch (h->ph_state) {
	case HEAD_FIELD_START:
	case HEAD_FIELD:
		if (c == '\n')
			return head_bad(h, "a line ends with a bare LF");
		if (c == '\r')
			h->ph_state = h->ph_state == HEAD_FIELD_START ? HEAD_END_LF : HEAD_FIELD_LF;
		else
			h->ph_state = HEAD_FIELD;
		return PROXY_HEAD_MORE;
	case HEAD_FIELD_LF:
	case HEAD_END_LF:
		if (c != '\n')
			return head_bad(h, "a CR is not followed by LF");
		if (h->ph_state == HEAD_END_LF)
			return head_finish(h, PROXY_HEAD_DONE, NULL);
		h->ph_state = HEAD_FIELD_START;
		return PROXY_HEAD_MORE;
	default:
		assert(!"unreachable");
		return head_bad(h, "internal error");
	}
}

static enum proxy_head_result head_byte(struct proxy_head *h, char c)
{
	switch (h->ph_state) {
	case HEAD_METHOD:
		return token_byte(h, c, h->ph_method, sizeof(h->ph_method), &h->ph_method_len);
	case HEAD_TARGET:
		return token_byte(h, c, h->ph_target_text, sizeof(h->ph_target_text),
				  &h->ph_target_len);
	case HEAD_VERSION:
		return token_byte(h, c, h->ph_version, sizeof(h->ph_version), &h->ph_version_len);
	case HEAD_LINE_LF:
		if (c != '\n')
			return head_bad(h, "a CR is not followed by LF");
		return request_line_verdict(h);
	case HEAD_FIELD_START:
	case HEAD_FIELD:
	case HEAD_FIELD_LF:
	case HEAD_END_LF:
		return field_byte(h, c);
	default:
		assert(!"unreachable");
		return head_bad(h, "internal error");
	}
}

enum proxy_head_result proxy_head_feed(struct proxy_head *head, const char *buf, size_t len,
				       size_t *ret_used)
{
	enum proxy_head_result r = head->ph_result;
	size_t i = 0;

	while (r == PROXY_HEAD_MORE && i < len) {
		head->ph_len++;
		r = head_byte(head, buf[i++]);
		if (r == PROXY_HEAD_MORE && head->ph_len >= PROXY_HEAD_MAX)
			r = head_bad(head, "the request head is longer than 65536 bytes");
	}
	*ret_used = i;
	return r;
}

/* ---- addresses --------------------------------------------------------------------- */

enum special_action {
	SPECIAL_NONGLOBAL,
	SPECIAL_EMBEDDED_V4,  /* judged by the IPv4 address at v4_offset */
};

struct special_net {
	int family;
	unsigned char prefix[16];
	unsigned bits;
	enum special_action action;
	unsigned v4_offset;
};

/* Special-purpose blocks (IANA registries, RFC 6890 and successors); the
 * first match decides, so the IPv6 forms with an embedded IPv4 come first. */
static const struct special_net special_nets[] = {
	{ AF_INET, { 0 }, 8, SPECIAL_NONGLOBAL, 0 },                  /* "this network" */
	{ AF_INET, { 10 }, 8, SPECIAL_NONGLOBAL, 0 },                 /* private */
	{ AF_INET, { 100, 64 }, 10, SPECIAL_NONGLOBAL, 0 },           /* CGNAT */
	{ AF_INET, { 127 }, 8, SPECIAL_NONGLOBAL, 0 },                /* loopback */
	{ AF_INET, { 169, 254 }, 16, SPECIAL_NONGLOBAL, 0 },          /* link-local, metadata */
	{ AF_INET, { 172, 16 }, 12, SPECIAL_NONGLOBAL, 0 },           /* private */
	{ AF_INET, { 192, 0, 0 }, 24, SPECIAL_NONGLOBAL, 0 },         /* IETF protocol */
	{ AF_INET, { 192, 0, 2 }, 24, SPECIAL_NONGLOBAL, 0 },         /* TEST-NET-1 */
	{ AF_INET, { 192, 88, 99 }, 24, SPECIAL_NONGLOBAL, 0 },       /* 6to4 relay anycast */
	{ AF_INET, { 192, 168 }, 16, SPECIAL_NONGLOBAL, 0 },          /* private */
	{ AF_INET, { 198, 18 }, 15, SPECIAL_NONGLOBAL, 0 },           /* benchmarking */
	{ AF_INET, { 198, 51, 100 }, 24, SPECIAL_NONGLOBAL, 0 },      /* TEST-NET-2 */
	{ AF_INET, { 203, 0, 113 }, 24, SPECIAL_NONGLOBAL, 0 },       /* TEST-NET-3 */
	{ AF_INET, { 224 }, 4, SPECIAL_NONGLOBAL, 0 },                /* multicast */
	{ AF_INET, { 240 }, 4, SPECIAL_NONGLOBAL, 0 },                /* reserved, broadcast */
	{ AF_INET6, { 0 }, 128, SPECIAL_NONGLOBAL, 0 },               /* :: */
	{ AF_INET6, { [15] = 1 }, 128, SPECIAL_NONGLOBAL, 0 },        /* ::1 */
	{ AF_INET6, { [10] = 0xff, 0xff }, 96, SPECIAL_EMBEDDED_V4, 12 }, /* ::ffff:0:0/96 */
	{ AF_INET6, { 0 }, 96, SPECIAL_NONGLOBAL, 0 },                /* ::/96 v4-compatible */
	{ AF_INET6, { 0, 0x64, 0xff, 0x9b }, 96, SPECIAL_EMBEDDED_V4, 12 }, /* NAT64 well-known */
	{ AF_INET6, { 0, 0x64, 0xff, 0x9b, 0, 1 }, 48, SPECIAL_NONGLOBAL, 0 }, /* NAT64 local */
	{ AF_INET6, { 1 }, 64, SPECIAL_NONGLOBAL, 0 },                /* 100::/64 discard */
	{ AF_INET6, { 0x20, 0x01 }, 23, SPECIAL_NONGLOBAL, 0 },       /* IETF protocol, Teredo */
	{ AF_INET6, { 0x20, 0x01, 0x0d, 0xb8 }, 32, SPECIAL_NONGLOBAL, 0 }, /* documentation */
	{ AF_INET6, { 0x20, 0x02 }, 16, SPECIAL_EMBEDDED_V4, 2 },     /* 6to4 */
	{ AF_INET6, { 0x3f, 0xff }, 20, SPECIAL_NONGLOBAL, 0 },       /* documentation (RFC 9637) */
	{ AF_INET6, { 0xfc }, 7, SPECIAL_NONGLOBAL, 0 },              /* ULA, incl. fd00:ec2::254 */
	{ AF_INET6, { 0xfe, 0x80 }, 10, SPECIAL_NONGLOBAL, 0 },       /* link-local */
	{ AF_INET6, { 0xfe, 0xc0 }, 10, SPECIAL_NONGLOBAL, 0 },       /* site-local */
	{ AF_INET6, { 0xff }, 8, SPECIAL_NONGLOBAL, 0 },              /* multicast */
};

/* IPv6 global unicast: 2000::/3. */
static const unsigned char ipv6_global_unicast[16] = { 0x20 };

bool proxy_addr_is_global(int family, const unsigned char *addr)
{
	for (size_t i = 0; i < ELEMENTSOF(special_nets); i++) {
		const struct special_net *n = &special_nets[i];

		if (n->family != family || !prefix_eq(n->prefix, addr, n->bits))
			continue;
		if (n->action == SPECIAL_EMBEDDED_V4)
			return proxy_addr_is_global(AF_INET, addr + n->v4_offset);
		return false;
	}
	if (family == AF_INET6)
		return prefix_eq(ipv6_global_unicast, addr, 3);
	return family == AF_INET;
}

bool proxy_addr_is_allowed(const struct proxy_cidr_list *private_allow, int family,
			   const unsigned char *addr)
{
	return proxy_cidr_list_contains(private_allow, family, addr) ||
	       proxy_addr_is_global(family, addr);
}

/* ---- decisions and replies ----------------------------------------------------------- */

static const struct {
	const char *name;
	int status;
} decisions[_PROXY_DECISION_MAX] = {
	[PROXY_ALLOW] = { "ALLOW", 200 },
	[PROXY_DENY] = { "DENY", 403 },
	[PROXY_DENY_NONGLOBAL] = { "DENY-NONGLOBAL", 403 },
	[PROXY_UNREACHABLE] = { "UNREACHABLE", 502 },
};

const char *proxy_decision_to_string(enum proxy_decision d)
{
	if ((unsigned)d >= ELEMENTSOF(decisions))
		return NULL;
	return decisions[d].name;
}

int proxy_decision_status(enum proxy_decision d)
{
	assert((unsigned)d < ELEMENTSOF(decisions));
	return decisions[d].status;
}

static const struct {
	int status;
	const char *reason;
} statuses[] = {
	{ 200, "Connection Established" },
	{ 400, "Bad Request" },
	{ 403, "Forbidden" },
	{ 405, "Method Not Allowed" },
	{ 502, "Bad Gateway" },
};

const char *proxy_status_reason(int status)
{
	for (size_t i = 0; i < ELEMENTSOF(statuses); i++)
		if (statuses[i].status == status)
			return statuses[i].reason;
	return NULL;
}

int proxy_format_reply(int status, char *buf, size_t size)
{
	const char *reason = proxy_status_reason(status);
	int n;

	if (!reason)
		return -EINVAL;
	if (status == 200)
		n = snprintf(buf, size, "HTTP/1.1 %d %s\r\n\r\n", status, reason);
	else
		n = snprintf(buf, size, "HTTP/1.1 %d %s\r\ncontent-length: 0\r\n\r\n", status,
			     reason);
	if (n < 0 || (size_t)n >= size)
		return -EINVAL;
	return n;
}

int proxy_format_decision_reason(enum proxy_decision d, const struct proxy_target *target,
				 const char *reason, char *buf, size_t size)
{
	const char *name = proxy_decision_to_string(d);
	int n;

	assert(name && reason);
	n = snprintf(buf, size, "%s %s:%u %s\n", name, target->host, (unsigned)target->port, reason);
	if (n < 0 || (size_t)n >= size)
		return -EINVAL;
	return n;
}

/* Whether an authority (no userinfo) ends in ":port": after the last ']'
 * when it is a bracketed IPv6 literal. */
static bool authority_has_port(const char *a, size_t len)
{
	const char *close = a[0] == '[' ? memchr(a, ']', len) : NULL;
	const char *from = close ? close : a;

	return memchr(from, ':', len - (size_t)(from - a)) != NULL;
}

int proxy_head_plain_target(const struct proxy_head *head, struct proxy_target *ret_target)
{
	static const struct {
		const char *scheme;
		const char *port;
	} schemes[] = { { "http://", "80" }, { "https://", "443" } };
	size_t kept = head->ph_target_len < sizeof(head->ph_target_text) ? head->ph_target_len
		: sizeof(head->ph_target_text);
	const char *t = head->ph_target_text, *auth = NULL, *end, *dflt = NULL, *why;
	char buf[PROXY_TARGET_MAX + 8];
	size_t alen;
	int n;

	if (head->ph_result != PROXY_HEAD_NOT_CONNECT)
		return -EINVAL;
	for (size_t i = 0; i < ELEMENTSOF(schemes) && !auth; i++) {
		size_t sl = strlen(schemes[i].scheme);

		if (kept >= sl && strncasecmp(t, schemes[i].scheme, sl) == 0) {
			auth = t + sl;
			dflt = schemes[i].port;
		}
	}
	if (!auth)
		return -EINVAL;
	for (end = auth; end < t + kept && *end != '/' && *end != '?' && *end != '#'; end++)
		;
	alen = (size_t)(end - auth);
	if ((end == t + kept && head->ph_target_len > kept) || alen == 0 || memchr(auth, '@', alen))
		return -EINVAL;
	if (authority_has_port(auth, alen))
		n = snprintf(buf, sizeof(buf), "%.*s", (int)alen, auth);
	else
		n = snprintf(buf, sizeof(buf), "%.*s:%s", (int)alen, auth, dflt);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -EINVAL;
	return proxy_target_parse(buf, (size_t)n, ret_target, &why);
}

int proxy_format_decision(enum proxy_decision d, const struct proxy_target *target, char *buf,
			  size_t size)
{
	const char *name = proxy_decision_to_string(d);
	int n;

	assert(name);
	n = snprintf(buf, size, "%s %s:%u\n", name, target->host, (unsigned)target->port);
	if (n < 0 || (size_t)n >= size)
		return -EINVAL;
	return n;
}
