/* check_egress_rule.c — the egress allow-rule grammar (proto/egress.[ch]):
 * which entries parse and to what, which are refused and why, how rules
 * match hosts and ports, and the host and port parsers the proxy shares. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "egress_rule.h"

/* A string of n copies of c. Caller frees. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* ---- accepted entries ------------------------------------------------------------ */

struct good_row {
	const char *entry;
	const char *host;      /* stored host */
	bool wildcard, is_ip;
	uint16_t port;
};

static const struct good_row good_rows[] = {
	{ "example.com", "example.com", false, false, 443 },
	{ "Example.COM", "example.com", false, false, 443 },
	{ "example.com:8443", "example.com", false, false, 8443 },
	{ "*.example.com", "example.com", true, false, 443 },
	{ "*.Data.MCR.microsoft.com:443", "data.mcr.microsoft.com", true, false, 443 },
	{ "*.com", "com", true, false, 443 },
	{ "localhost", "localhost", false, false, 443 },
	{ "a", "a", false, false, 443 },
	{ "a-b_c.d9", "a-b_c.d9", false, false, 443 },
	{ "_acme.example", "_acme.example", false, false, 443 },
	{ "1a.example", "1a.example", false, false, 443 },
	{ "123.example", "123.example", false, false, 443 },
	{ "h:1", "h", false, false, 1 },
	{ "h:65535", "h", false, false, 65535 },
	{ "1.2.3.4", "1.2.3.4", false, true, 443 },
	{ "0.0.0.0:80", "0.0.0.0", false, true, 80 },
	{ "255.255.255.255", "255.255.255.255", false, true, 443 },
	{ "[2001:db8::1]", "2001:db8::1", false, true, 443 },
	{ "[2001:DB8::1]:8443", "2001:db8::1", false, true, 8443 },
	{ "[::1]", "::1", false, true, 443 },
	{ "[::ffff:1.2.3.4]:443", "::ffff:1.2.3.4", false, true, 443 },
};

START_TEST(test_good)
{
	const struct good_row *row = &good_rows[_i];
	struct msb_egress_rule r;
	const char *why = "untouched";

	ck_assert_msg(msb_egress_rule_parse(row->entry, &r, &why) == 0, "\"%s\" refused: %s",
		      row->entry, why);
	ck_assert_str_eq(why, "untouched");
	ck_assert_str_eq(r.host, row->host);
	ck_assert_int_eq(r.wildcard, row->wildcard);
	ck_assert_int_eq(r.is_ip, row->is_ip);
	ck_assert_uint_eq(r.port, row->port);
	ck_assert_int_eq(msb_egress_rule_check(row->entry, NULL), 0);
}
END_TEST

/* ---- refused entries ----------------------------------------------------------- */

struct bad_row {
	const char *entry;
	const char *frag;      /* in the reason */
};

static const struct bad_row bad_rows[] = {
	{ "", "empty" },
	{ "*", "bare '*'" },
	{ "*:443", "bare '*'" },
	{ "*.", "empty" },
	{ "**.example.com", "'*'" },
	{ "*example.com", "'*'" },
	{ "a.*.example.com", "'*'" },
	{ "example.*", "'*'" },
	{ "*.*.example.com", "'*'" },
	{ "exam?le.com", "'?'" },
	{ "[a-z].example.com", "PORT" },
	{ "a[1].com", "'['" },
	{ "https://example.com", "scheme" },
	{ "example.com://", "scheme" },
	{ "example.com/path", "path" },
	{ "/", "path" },
	{ " example.com", "whitespace" },
	{ "example.com ", "whitespace" },
	{ "exa mple.com", "whitespace" },
	{ "example.com\t", "whitespace" },
	{ "example.com\x7f", "whitespace" },
	{ "example.com:", "empty" },
	{ "example.com:0", "port 0" },
	{ "example.com:00443", "leading zero" },
	{ "example.com:65536", "1..65535" },
	{ "example.com:999999", "1..65535" },
	{ "example.com:https", "digits" },
	{ "example.com:-1", "digits" },
	{ "example.com:+443", "digits" },
	{ "example.com:4 43", "whitespace" },
	{ "example.com.", "empty label" },
	{ ".example.com", "empty label" },
	{ "example..com", "empty label" },
	{ "-example.com", "'-'" },
	{ "example-.com", "'-'" },
	{ "exa%mple.com", "letters, digits" },
	{ "exämple.com", "letters, digits" },
	{ "2001:db8::1", "brackets" },
	{ "::1", "brackets" },
	{ "2001:db8::1:443", "brackets" },
	{ "[2001:db8::1", "']'" },
	{ "[2001:db8::1]x", "PORT" },
	{ "[2001:db8::1]]", "PORT" },
	{ "[]", "empty" },
	{ "[example.com]", "IPv6" },
	{ "[1.2.3.4]", "IPv6" },
	{ "[fe80::1%eth0]", "zone" },
	{ "[2001:db8::g]", "IPv6" },
	{ "*.1.2.3.4", "address" },
	{ "*.[::1]", "brackets" },
	{ "1.2.3", "IPv4" },
	{ "1.2.3.4.5", "IPv4" },
	{ "256.1.1.1", "IPv4" },
	{ "01.2.3.4", "IPv4" },
	{ "1.2.3.04", "IPv4" },
	{ "127.1", "IPv4" },
	{ "123", "IPv4" },
	{ "0x7f.1", "IPv4" },
	{ "example.0x1F", "IPv4" },
	{ "example.0x", "IPv4" },    /* inet_aton reads "0x" as 0 */
	{ "*.123", "IPv4" },
	{ "a:b:c", "brackets" },
};

START_TEST(test_bad)
{
	const struct bad_row *row = &bad_rows[_i];
	struct msb_egress_rule r, before;
	const char *why = NULL;

	memset(&r, 0x5a, sizeof(r));
	before = r;
	ck_assert_msg(msb_egress_rule_parse(row->entry, &r, &why) == -EINVAL,
		      "\"%s\" accepted", row->entry);
	ck_assert_ptr_nonnull(why);
	ck_assert_msg(strstr(why, row->frag), "\"%s\": reason \"%s\" lacks \"%s\"", row->entry,
		      why, row->frag);
	ck_assert_msg(memcmp(&r, &before, sizeof(r)) == 0, "\"%s\": ret written on failure",
		      row->entry);
	ck_assert_int_eq(msb_egress_rule_check(row->entry, NULL), -EINVAL);
}
END_TEST

/* Lengths at their edges: a label of 63/64, a host of 253/254, with and
 * without "*." and a port. */
START_TEST(test_lengths)
{
	_cleanup_free_ char *l63 = repeat('a', 63), *l64 = repeat('a', 64);
	char host[600], entry[600];
	const char *why;
	size_t n;

	ck_assert_int_eq(msb_egress_rule_check(l63, NULL), 0);
	ck_assert_int_eq(msb_egress_rule_check(l64, &why), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "63"));
	/* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 */
	snprintf(host, sizeof(host), "%s.%s.%s.%.*s", l63, l63, l63, 61, l63);
	n = strlen(host);
	ck_assert_uint_eq(n, MSB_EGRESS_HOST_MAX);
	ck_assert_int_eq(msb_egress_rule_check(host, NULL), 0);
	snprintf(entry, sizeof(entry), "%.*s:65535", (int)MSB_EGRESS_HOST_MAX, host);
	ck_assert_uint_eq(strlen(entry), MSB_EGRESS_ENTRY_MAX);
	ck_assert_int_eq(msb_egress_rule_check(entry, NULL), 0);
	snprintf(host, sizeof(host), "%s.%s.%s.%.*s", l63, l63, l63, 62, l63);  /* 254 */
	ck_assert_int_eq(msb_egress_rule_check(host, &why), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "253"));
	/* "*." counts toward the 253. */
	snprintf(host, sizeof(host), "*.%s.%s.%s.%.*s", l63, l63, l63, 59, l63);  /* 253 */
	ck_assert_int_eq(msb_egress_rule_check(host, NULL), 0);
	snprintf(host, sizeof(host), "*.%s.%s.%s.%.*s", l63, l63, l63, 60, l63);  /* 254 */
	ck_assert_int_eq(msb_egress_rule_check(host, &why), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "253"));
	/* An entry longer than any valid one is refused for its length. */
	snprintf(entry, sizeof(entry), "%s.%s.%s.%.*s:655350", l63, l63, l63, 61, l63);
	ck_assert_int_eq(msb_egress_rule_check(entry, &why), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "259"));
}
END_TEST

/* ---- matching ------------------------------------------------------------------ */

struct match_row {
	const char *entry;
	const char *host;
	uint16_t port;
	bool match;
};

static const struct match_row match_rows[] = {
	{ "example.com", "example.com", 443, true },
	{ "example.com", "EXAMPLE.com", 443, true },
	{ "EXAMPLE.COM", "example.com", 443, true },
	{ "example.com", "example.com", 80, false },      /* port-less = 443 only */
	{ "example.com", "www.example.com", 443, false },
	{ "example.com", "example.co", 443, false },
	{ "example.com", "example.com.evil", 443, false },
	{ "example.com", "xexample.com", 443, false },
	{ "example.com:8443", "example.com", 8443, true },
	{ "example.com:8443", "example.com", 443, false },
	{ "*.x.com", "a.x.com", 443, true },
	{ "*.x.com", "a.b.x.com", 443, true },
	{ "*.x.com", "A.X.COM", 443, true },
	{ "*.x.com", "x.com", 443, false },
	{ "*.x.com", "ax.com", 443, false },
	{ "*.x.com", ".x.com", 443, false },               /* not a host */
	{ "*.x.com", "a.x.com", 80, false },
	{ "*.x.com", "a.x.com.evil", 443, false },
	{ "*.x.com:80", "a.x.com", 80, true },
	{ "1.2.3.4", "1.2.3.4", 443, true },
	{ "1.2.3.4", "1.2.3.5", 443, false },
	{ "1.2.3.4", "[::ffff:1.2.3.4]", 443, false },      /* another family */
	{ "1.2.3.4:8443", "1.2.3.4", 8443, true },
	{ "[2001:db8::1]", "[2001:db8::1]", 443, true },
	{ "[2001:db8::1]", "2001:db8::1", 443, true },       /* without brackets */
	{ "[2001:db8::1]", "[2001:DB8:0:0::1]", 443, true }, /* same address */
	{ "[2001:db8::1]", "[2001:db8::2]", 443, false },
	{ "[2001:db8::1]:8443", "[2001:db8::1]", 443, false },
	{ "*.com", "1.2.3.4", 443, false },                  /* names never match addresses */
	{ "example.com", "", 443, false },
	{ "example.com", "exa mple.com", 443, false },
	{ "example.com", "example.com.", 443, false },
	{ "localhost", "localhost", 443, true },
};

START_TEST(test_match)
{
	const struct match_row *row = &match_rows[_i];
	struct msb_egress_rule r;

	ck_assert_int_eq(msb_egress_rule_parse(row->entry, &r, NULL), 0);
	ck_assert_msg(msb_egress_rule_match(&r, row->host, row->port) == row->match,
		      "\"%s\" vs %s:%u: want %s", row->entry, row->host, (unsigned)row->port,
		      row->match ? "match" : "no match");
}
END_TEST

/* ---- host and port parsers (the proxy's target uses them) --------------------------- */

struct host_row {
	const char *host;
	int kind;              /* -1: refused */
};

static const struct host_row host_rows[] = {
	{ "example.com", MSB_EGRESS_HOST_NAME },
	{ "1.2.3.4", MSB_EGRESS_HOST_IPV4 },
	{ "[::1]", MSB_EGRESS_HOST_IPV6 },
	{ "[::ffff:127.0.0.1]", MSB_EGRESS_HOST_IPV6 },
	{ "*.example.com", -1 },   /* no wildcard in a host */
	{ "example.com:443", -1 },
	{ "::1", -1 },
	{ "[::1]:443", -1 },
	{ "", -1 },
	{ "[", -1 },
	{ "]", -1 },
	{ "[::1", -1 },
};

START_TEST(test_host_parse)
{
	const struct host_row *row = &host_rows[_i];
	struct msb_egress_host h;
	int r = msb_egress_host_parse(row->host, strlen(row->host), &h, NULL);

	if (row->kind < 0) {
		ck_assert_msg(r == -EINVAL, "\"%s\" accepted", row->host);
		return;
	}
	ck_assert_msg(r == 0, "\"%s\" refused", row->host);
	ck_assert_int_eq(h.kind, row->kind);
	ck_assert_str_eq(msb_egress_host_kind_to_string(h.kind),
			 row->kind == MSB_EGRESS_HOST_NAME ? "name"
			 : row->kind == MSB_EGRESS_HOST_IPV4 ? "ipv4" : "ipv6");
}
END_TEST

START_TEST(test_host_addresses)
{
	static const unsigned char v4[4] = { 10, 0, 0, 1 };
	static const unsigned char v6[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
	struct msb_egress_host h;

	ck_assert_int_eq(msb_egress_host_parse("10.0.0.1", 8, &h, NULL), 0);
	ck_assert_mem_eq(h.addr, v4, 4);
	ck_assert_int_eq(msb_egress_host_parse("[2001:db8::1]", 13, &h, NULL), 0);
	ck_assert_mem_eq(h.addr, v6, 16);
	/* Not NUL-terminated input: only len bytes are read. */
	ck_assert_int_eq(msb_egress_host_parse("10.0.0.1junk", 8, &h, NULL), 0);
	ck_assert_mem_eq(h.addr, v4, 4);
	ck_assert_ptr_null(msb_egress_host_kind_to_string(_MSB_EGRESS_HOST_KIND_MAX));
}
END_TEST

START_TEST(test_port_parse)
{
	static const struct {
		const char *s;
		int port;     /* -1: refused */
	} rows[] = {
		{ "1", 1 }, { "443", 443 }, { "65535", 65535 }, { "0", -1 }, { "65536", -1 },
		{ "0443", -1 }, { "", -1 }, { "44a", -1 }, { "100000", -1 }, { " 443", -1 },
		{ "99999", -1 },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		uint16_t port = 7;
		int r = msb_egress_port_parse(rows[i].s, strlen(rows[i].s), &port, NULL);

		if (rows[i].port < 0) {
			ck_assert_msg(r == -EINVAL, "\"%s\" accepted", rows[i].s);
			ck_assert_uint_eq(port, 7);
		} else {
			ck_assert_msg(r == 0, "\"%s\" refused", rows[i].s);
			ck_assert_uint_eq(port, (unsigned)rows[i].port);
		}
	}
}
END_TEST

static Suite *egress_rule_suite(void)
{
	Suite *s = suite_create("egress_rule");
	TCase *tc;

	tc = tcase_create("accepted");
	tcase_add_loop_test(tc, test_good, 0, ELEMENTSOF(good_rows));
	tcase_add_test(tc, test_lengths);
	suite_add_tcase(s, tc);

	tc = tcase_create("refused");
	tcase_add_loop_test(tc, test_bad, 0, ELEMENTSOF(bad_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("matching");
	tcase_add_loop_test(tc, test_match, 0, ELEMENTSOF(match_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("host_and_port");
	tcase_add_loop_test(tc, test_host_parse, 0, ELEMENTSOF(host_rows));
	tcase_add_test(tc, test_host_addresses);
	tcase_add_test(tc, test_port_parse);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(egress_rule_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
