/* egress_rule.c — the egress allow-rule grammar (see egress_rule.h). */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "egress_rule.h"

_Static_assert(MSB_EGRESS_ENTRY_MAX == 259, "the refusal text below says 259");
_Static_assert(MSB_EGRESS_HOST_MAX == 253, "the refusal text below says 253");

static const char *const host_kind_names[_MSB_EGRESS_HOST_KIND_MAX] = {
	[MSB_EGRESS_HOST_NAME] = "name",
	[MSB_EGRESS_HOST_IPV4] = "ipv4",
	[MSB_EGRESS_HOST_IPV6] = "ipv6",
};

const char *msb_egress_host_kind_to_string(enum msb_egress_host_kind k)
{
	if ((unsigned)k >= ELEMENTSOF(host_kind_names))
		return NULL;
	return host_kind_names[k];
}

static int refuse(const char **reterr_reason, const char *reason)
{
	if (reterr_reason)
		*reterr_reason = reason;
	return -EINVAL;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_name_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
	       c == '_';
}

static char ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool ascii_caseeq(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ascii_lower(a[i]) != ascii_lower(b[i]))
			return false;
	return true;
}

/* ---- literals --------------------------------------------------------------- */

/* A strict dotted quad: four decimal parts 0..255, no leading zeros. */
static bool ipv4_parse(const char *s, size_t len, unsigned char out[4])
{
	size_t i = 0;

	for (int part = 0; part < 4; part++) {
		unsigned v = 0;
		size_t start = i;

		if (part > 0) {
			if (i >= len || s[i] != '.')
				return false;
			start = ++i;
		}
		while (i < len && is_digit(s[i]) && i - start < 3)
			v = v * 10 + (unsigned)(s[i++] - '0');
		if (i == start || v > 255 || (s[start] == '0' && i - start > 1))
			return false;
		out[part] = (unsigned char)v;
	}
	return i == len;
}

/* The inside of an IPv6 literal: hex digits, ':' and '.' only (no zone). */
static int ipv6_parse(const char *s, size_t len, unsigned char out[16], const char **reterr_reason)
{
	char buf[MSB_EGRESS_IPV6_TEXT_MAX + 1];

	if (len == 0)
		return refuse(reterr_reason, "the IPv6 address in brackets is empty");
	if (len > MSB_EGRESS_IPV6_TEXT_MAX)
		return refuse(reterr_reason, "the IPv6 address in brackets is too long");
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%')
			return refuse(reterr_reason, "an IPv6 zone index ('%') is not allowed");
		if (!is_hex(s[i]) && s[i] != ':' && s[i] != '.')
			return refuse(reterr_reason, "the text in brackets is not an IPv6 address");
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET6, buf, out) != 1)
		return refuse(reterr_reason, "the text in brackets is not an IPv6 address");
	return 0;
}

/* ---- names ------------------------------------------------------------------ */

/* The first byte no host may hold, with the reason; NULL if all are fine. */
static const char *bad_host_char(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f)
			return "whitespace and control characters are not allowed";
		if (c == '/')
			return "a path ('/') is not allowed";
		if (c == '*')
			return "'*' is allowed only as a leading \"*.\"";
		if (c == '?')
			return "'?' is not allowed (only exact hosts and a leading \"*.\")";
		if (c == '[' || c == ']')
			return "'[' and ']' are allowed only around an IPv6 address";
		if (c == ':')
			return "an IPv6 address must be in brackets, e.g. \"[2001:db8::1]:443\"";
		if (!is_name_char((char)c) && c != '.')
			return "a host may contain only letters, digits, '-', '_' and '.'";
	}
	return NULL;
}

/* A label that resolvers read as a number: all digits, or 0x and hex. */
static bool label_is_numeric(const char *s, size_t len)
{
	size_t i = 0;

	if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		for (i = 2; i < len && is_hex(s[i]); i++)
			;
		return i == len;
	}
	for (i = 0; i < len && is_digit(s[i]); i++)
		;
	return i == len;
}

static const char *label_check(const char *s, size_t len)
{
	if (len == 0)
		return "a host must not have an empty label (a leading, trailing or double dot)";
	if (len > MSB_EGRESS_LABEL_MAX)
		return "a label of a host is longer than 63 bytes";
	if (s[0] == '-' || s[len - 1] == '-')
		return "a label of a host must not start or end with '-'";
	return NULL;
}

/* s[0..len) holds only name characters and dots (bad_host_char passed). */
static int name_check(const char *s, size_t len, const char **reterr_reason)
{
	const char *label = s, *end = s + len, *why;

	if (len > MSB_EGRESS_HOST_MAX)
		return refuse(reterr_reason, "the host is longer than 253 bytes");
	for (const char *c = s; c <= end; c++) {
		if (c < end && *c != '.')
			continue;
		why = label_check(label, (size_t)(c - label));
		if (why)
			return refuse(reterr_reason, why);
		if (c == end && label_is_numeric(label, (size_t)(c - label)))
			return refuse(reterr_reason, "the host looks like an IPv4 address but is not a "
					  "valid one (four decimal parts 0..255, no leading zeros)");
		label = c + 1;
	}
	return 0;
}

int msb_egress_host_parse(const char *s, size_t len, struct msb_egress_host *ret_host,
			  const char **reterr_reason)
{
	struct msb_egress_host h = { .kind = MSB_EGRESS_HOST_NAME };
	const char *why;
	int r;

	if (len == 0)
		return refuse(reterr_reason, "the host is empty");
	if (s[0] == '[') {
		if (len < 2 || s[len - 1] != ']' || memchr(s + 1, ']', len - 2))
			return refuse(reterr_reason, "an IPv6 address must be closed by ']'");
		r = ipv6_parse(s + 1, len - 2, h.addr, reterr_reason);
		if (r < 0)
			return r;
		h.kind = MSB_EGRESS_HOST_IPV6;
	} else if (ipv4_parse(s, len, h.addr)) {
		h.kind = MSB_EGRESS_HOST_IPV4;
	} else {
		why = bad_host_char(s, len);
		if (why)
			return refuse(reterr_reason, why);
		r = name_check(s, len, reterr_reason);
		if (r < 0)
			return r;
	}
	if (ret_host)
		*ret_host = h;
	return 0;
}

int msb_egress_port_parse(const char *s, size_t len, uint16_t *ret_port,
			  const char **reterr_reason)
{
	unsigned long v = 0;

	if (len == 0)
		return refuse(reterr_reason, "the port after ':' is empty");
	for (size_t i = 0; i < len; i++)
		if (!is_digit(s[i]))
			return refuse(reterr_reason, "the port must be decimal digits");
	if (s[0] == '0')
		return refuse(reterr_reason, len == 1 ? "port 0 is not allowed"
						      : "the port must not have a leading zero");
	if (len > 5)
		return refuse(reterr_reason, "the port must be 1..65535");
	for (size_t i = 0; i < len; i++)
		v = v * 10 + (unsigned long)(s[i] - '0');
	if (v > 65535)
		return refuse(reterr_reason, "the port must be 1..65535");
	if (ret_port)
		*ret_port = (uint16_t)v;
	return 0;
}

/* ---- rules ------------------------------------------------------------------ */

/* Refusals that read the whole entry, before it is split. */
static const char *entry_shape(const char *entry, size_t len)
{
	if (len == 0)
		return "the entry is empty";
	if (len > MSB_EGRESS_ENTRY_MAX)
		return "the entry is longer than 259 bytes";
	if (strstr(entry, "://"))
		return "an entry is a host, not a URL: drop the scheme (\"://\")";
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)entry[i] <= ' ' || entry[i] == 0x7f)
			return "whitespace and control characters are not allowed";
	if (strchr(entry, '/'))
		return "an entry is a host, not a URL: drop the path ('/')";
	if (strcmp(entry, "*") == 0 || strncmp(entry, "*:", 2) == 0)
		return "a bare '*' is not allowed; give a host or \"*.\" and a domain";
	return NULL;
}

/* Splits entry into host and port text. host_len is set; port is NULL when
 * the entry has no port. */
static int entry_split(const char *entry, size_t len, size_t *ret_host_len, const char **ret_port,
		       const char **reterr_reason)
{
	const char *colon, *close;

	if (entry[0] == '[') {
		close = memchr(entry, ']', len);
		if (!close)
			return refuse(reterr_reason, "an IPv6 address must be closed by ']'");
		colon = close + 1;
		if (*colon != '\0' && *colon != ':')
			return refuse(reterr_reason, "only \":PORT\" may follow an IPv6 address in "
					  "brackets");
	} else {
		colon = strchr(entry, ':');
		if (colon && strchr(colon + 1, ':'))
			return refuse(reterr_reason, "an IPv6 address must be in brackets, e.g. "
					  "\"[2001:db8::1]:443\"");
		if (!colon)
			colon = entry + len;
	}
	*ret_host_len = (size_t)(colon - entry);
	*ret_port = *colon == ':' ? colon + 1 : NULL;
	return 0;
}

static int rule_host(const char *host, size_t len, struct msb_egress_rule *rule,
		     const char **reterr_reason)
{
	struct msb_egress_host h;
	int r;

	if (len >= 2 && host[0] == '*' && host[1] == '.') {
		rule->wildcard = true;
		host += 2;
		len -= 2;
		if (len == 0)
			return refuse(reterr_reason, "the domain after \"*.\" is empty");
		if (len > MSB_EGRESS_HOST_MAX - 2)
			return refuse(reterr_reason, "the host is longer than 253 bytes");
	}
	r = msb_egress_host_parse(host, len, &h, reterr_reason);
	if (r < 0)
		return r;
	if (rule->wildcard && h.kind != MSB_EGRESS_HOST_NAME)
		return refuse(reterr_reason, "\"*.\" must be followed by a domain name, not an "
				  "address");
	rule->kind = h.kind;
	rule->is_ip = h.kind != MSB_EGRESS_HOST_NAME;
	memcpy(rule->addr, h.addr, sizeof(rule->addr));
	if (h.kind == MSB_EGRESS_HOST_IPV6) {
		host++;
		len -= 2;
	}
	assert(len < sizeof(rule->host));
	for (size_t i = 0; i < len; i++)
		rule->host[i] = ascii_lower(host[i]);
	rule->host[len] = '\0';
	return 0;
}

int msb_egress_rule_parse(const char *entry, struct msb_egress_rule *ret_rule,
			  const char **reterr_reason)
{
	struct msb_egress_rule rule = { .port = MSB_EGRESS_DEFAULT_PORT };
	size_t len = strlen(entry), host_len;
	const char *port, *why = entry_shape(entry, len);
	int r;

	if (why)
		return refuse(reterr_reason, why);
	r = entry_split(entry, len, &host_len, &port, reterr_reason);
	if (r < 0)
		return r;
	r = rule_host(entry, host_len, &rule, reterr_reason);
	if (r < 0)
		return r;
	if (port) {
		r = msb_egress_port_parse(port, len - (size_t)(port - entry), &rule.port,
					  reterr_reason);
		if (r < 0)
			return r;
	}
	if (ret_rule)
		*ret_rule = rule;
	return 0;
}

int msb_egress_rule_check(const char *entry, const char **reterr_reason)
{
	return msb_egress_rule_parse(entry, NULL, reterr_reason);
}

/* A host as the matcher takes it: msb_egress_host_parse's forms, plus an
 * IPv6 literal without brackets. */
static int match_host_parse(const char *host, size_t len, struct msb_egress_host *ret)
{
	if (len > 0 && host[0] != '[' && memchr(host, ':', len)) {
		ret->kind = MSB_EGRESS_HOST_IPV6;
		return ipv6_parse(host, len, ret->addr, NULL);
	}
	return msb_egress_host_parse(host, len, ret, NULL);
}

static bool name_matches(const struct msb_egress_rule *rule, const char *host, size_t len)
{
	size_t rlen = strlen(rule->host);

	if (!rule->wildcard)
		return len == rlen && ascii_caseeq(host, rule->host, len);
	return len > rlen + 1 && host[len - rlen - 1] == '.' &&
	       ascii_caseeq(host + len - rlen, rule->host, rlen);
}

bool msb_egress_rule_match(const struct msb_egress_rule *rule, const char *host, uint16_t port)
{
	struct msb_egress_host h;
	size_t len = strlen(host);

	if (port != rule->port || match_host_parse(host, len, &h) < 0)
		return false;
	if (rule->is_ip)
		return h.kind == rule->kind &&
		       memcmp(h.addr, rule->addr, h.kind == MSB_EGRESS_HOST_IPV4 ? 4 : 16) == 0;
	return h.kind == MSB_EGRESS_HOST_NAME && name_matches(rule, host, len);
}
