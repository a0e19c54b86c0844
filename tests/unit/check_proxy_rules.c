/* check_proxy_rules.c — the egress proxy's pure parts
 * (egress-proxy/rules.[ch]): the incremental request-head parser and
 * its limits, the CONNECT target, the non-global address table and its
 * private_allow override, CIDR lists, the configuration from the environment,
 * and the exact reply and log bytes. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "rules.h"

#define HEAD_OK "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"

/* Feeds s in chunks of the given sizes (cycled); returns the result and
 * the bytes used in all. */
static enum proxy_head_result feed_chunks(struct proxy_head *h, const char *s, size_t len,
					  const size_t *sizes, size_t n_sizes, size_t *ret_used)
{
	enum proxy_head_result r = PROXY_HEAD_MORE;
	size_t off = 0, k = 0, total = 0;

	while (off < len && r == PROXY_HEAD_MORE) {
		size_t n = sizes[k++ % n_sizes], used = 0;

		if (n > len - off)
			n = len - off;
		r = proxy_head_feed(h, s + off, n, &used);
		ck_assert_uint_le(used, n);
		if (r == PROXY_HEAD_MORE)
			ck_assert_uint_eq(used, n);
		total += used;
		off += n;
	}
	*ret_used = total;
	return r;
}

static enum proxy_head_result feed_all(struct proxy_head *h, const char *s, size_t *ret_used)
{
	static const size_t whole[] = { SIZE_MAX };

	proxy_head_init(h);
	return feed_chunks(h, s, strlen(s), whole, 1, ret_used);
}

/* ---- the head: accepted --------------------------------------------------------- */

START_TEST(test_head_ok)
{
	struct proxy_head h;
	size_t used;

	ck_assert_int_eq(feed_all(&h, HEAD_OK, &used), PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, strlen(HEAD_OK));
	ck_assert_str_eq(h.ph_target.host, "example.com");
	ck_assert_uint_eq(h.ph_target.port, 443);
	ck_assert_int_eq(h.ph_target.parsed.kind, MSB_EGRESS_HOST_NAME);
	ck_assert_ptr_null(h.ph_error);
	/* No header lines at all, and HTTP/1.0. */
	ck_assert_int_eq(feed_all(&h, "CONNECT [::1]:8443 HTTP/1.0\r\n\r\n", &used), PROXY_HEAD_DONE);
	ck_assert_str_eq(h.ph_target.host, "[::1]");
	ck_assert_uint_eq(h.ph_target.port, 8443);
	ck_assert_int_eq(h.ph_target.parsed.kind, MSB_EGRESS_HOST_IPV6);
}
END_TEST

/* What follows the head is not consumed: it is the tunnel's payload. */
START_TEST(test_head_payload_left)
{
	static const char in[] = HEAD_OK "\x16\x03\x01 client hello\r\n\r\n";
	struct proxy_head h;
	size_t used;

	ck_assert_int_eq(feed_all(&h, in, &used), PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, strlen(HEAD_OK));
}
END_TEST

/* Every split of the head in two, and one byte at a time: same result. */
START_TEST(test_head_split_everywhere)
{
	const char *s = HEAD_OK;
	size_t len = strlen(s), used;
	struct proxy_head h;

	for (size_t cut = 0; cut <= len; cut++) {
		size_t u1 = 0, u2 = 0;
		enum proxy_head_result r;

		proxy_head_init(&h);
		r = proxy_head_feed(&h, s, cut, &u1);
		ck_assert_int_eq(r, cut == len ? PROXY_HEAD_DONE : PROXY_HEAD_MORE);
		r = proxy_head_feed(&h, s + cut, len - cut, &u2);
		ck_assert_int_eq(r, PROXY_HEAD_DONE);
		ck_assert_uint_eq(u1 + u2, len);
		ck_assert_str_eq(h.ph_target.host, "example.com");
	}
	{
		static const size_t one[] = { 1 };

		proxy_head_init(&h);
		ck_assert_int_eq(feed_chunks(&h, s, len, one, 1, &used), PROXY_HEAD_DONE);
		ck_assert_uint_eq(used, len);
	}
}
END_TEST

/* CRLF CRLF itself split across chunks in every way, with chunks of 0 too. */
START_TEST(test_head_terminator_split)
{
	static const size_t patterns[][4] = {
		{ 1, 0, 1, 2 }, { 2, 2, 0, 0 }, { 3, 1, 0, 0 }, { 1, 3, 0, 0 }, { 1, 1, 1, 1 },
	};
	static const char end[] = "\r\n\r\n";
	const char *line = "CONNECT a.example:443 HTTP/1.1";
	size_t llen = strlen(line);

	for (size_t p = 0; p < ELEMENTSOF(patterns); p++) {
		struct proxy_head h;
		enum proxy_head_result r;
		size_t used = 0, off = 0;

		proxy_head_init(&h);
		ck_assert_int_eq(proxy_head_feed(&h, line, llen, &used), PROXY_HEAD_MORE);
		r = PROXY_HEAD_MORE;
		for (size_t k = 0; k < 4 && off <= 4; k++) {
			size_t n = patterns[p][k];

			r = proxy_head_feed(&h, &end[off], n, &used);
			ck_assert_uint_eq(used, n);
			off += n;
			if (off == 4)
				break;
			ck_assert_int_eq(r, PROXY_HEAD_MORE);
		}
		ck_assert_int_eq(r, PROXY_HEAD_DONE);
		ck_assert_uint_eq(h.ph_len, llen + 4);
	}
}
END_TEST

/* A head in many odd-sized chunks, with a long header block. */
START_TEST(test_head_many_chunks)
{
	static const size_t sizes[] = { 7, 1, 13, 2, 31, 5, 64, 3 };
	_cleanup_free_ char *s = NULL;
	struct proxy_head h;
	size_t used;
	size_t cap = 16384, n = 0;

	s = malloc(cap);
	ck_assert_ptr_nonnull(s);
	n += (size_t)snprintf(s + n, cap - n, "CONNECT 203.0.113.7:8443 HTTP/1.1\r\n");
	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(s + n, cap - n, "X-Header-%d: value %d\t\x01 junk\r\n", i, i);
	n += (size_t)snprintf(s + n, cap - n, "\r\nPAYLOAD");
	proxy_head_init(&h);
	ck_assert_int_eq(feed_chunks(&h, s, n, sizes, ELEMENTSOF(sizes), &used), PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, n - strlen("PAYLOAD"));
	ck_assert_str_eq(h.ph_target.host, "203.0.113.7");
	ck_assert_int_eq(h.ph_target.parsed.kind, MSB_EGRESS_HOST_IPV4);
	ck_assert_uint_eq(h.ph_target.port, 8443);
}
END_TEST

/* ---- the head: the size limit ---------------------------------------------------- */

/* A head of exactly total bytes: the request line, one padding header,
 * CRLF CRLF. Caller frees. */
static char *head_of_size(size_t total)
{
	static const char line[] = "CONNECT example.com:443 HTTP/1.1\r\nX-Pad: ";
	size_t pre = strlen(line), pad = total - pre - 4;
	char *s = malloc(total + 1);

	ck_assert_ptr_nonnull(s);
	memcpy(s, line, pre);
	memset(s + pre, 'p', pad);
	memcpy(s + pre + pad, "\r\n\r\n", 5);
	ck_assert_uint_eq(strlen(s), total);
	return s;
}

START_TEST(test_head_limit_exact)
{
	static const size_t sizes[] = { 4096, 1, 1000 };
	_cleanup_free_ char *s = head_of_size(PROXY_HEAD_MAX);
	struct proxy_head h;
	size_t used;

	ck_assert_int_eq(feed_all(&h, s, &used), PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, PROXY_HEAD_MAX);
	proxy_head_init(&h);
	ck_assert_int_eq(feed_chunks(&h, s, PROXY_HEAD_MAX, sizes, ELEMENTSOF(sizes), &used),
			 PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, PROXY_HEAD_MAX);
}
END_TEST

START_TEST(test_head_limit_plus_one)
{
	static const size_t sizes[] = { 4096, 1, 1000 };
	_cleanup_free_ char *s = head_of_size(PROXY_HEAD_MAX + 1);
	struct proxy_head h;
	size_t used;

	ck_assert_int_eq(feed_all(&h, s, &used), PROXY_HEAD_BAD);
	/* Refused as soon as it cannot fit: the 65536th byte is not its end. */
	ck_assert_uint_eq(used, PROXY_HEAD_MAX);
	ck_assert_ptr_nonnull(strstr(h.ph_error, "65536"));
	proxy_head_init(&h);
	ck_assert_int_eq(feed_chunks(&h, s, PROXY_HEAD_MAX + 1, sizes, ELEMENTSOF(sizes), &used),
			 PROXY_HEAD_BAD);
	ck_assert_uint_eq(used, PROXY_HEAD_MAX);
}
END_TEST

/* A result sticks: later feeds use nothing and say it again. */
START_TEST(test_head_sticky)
{
	struct proxy_head h;
	size_t used = 99;

	ck_assert_int_eq(feed_all(&h, HEAD_OK, &used), PROXY_HEAD_DONE);
	ck_assert_int_eq(proxy_head_feed(&h, "more", 4, &used), PROXY_HEAD_DONE);
	ck_assert_uint_eq(used, 0);
	ck_assert_int_eq(feed_all(&h, "GET / HTTP/1.1\r\n", &used), PROXY_HEAD_NOT_CONNECT);
	ck_assert_int_eq(proxy_head_feed(&h, "\r\n", 2, &used), PROXY_HEAD_NOT_CONNECT);
	ck_assert_uint_eq(used, 0);
	ck_assert_int_eq(feed_all(&h, "\0", &used), PROXY_HEAD_MORE);
	ck_assert_int_eq(proxy_head_feed(&h, "\0x", 2, &used), PROXY_HEAD_BAD);
	ck_assert_uint_eq(used, 1);
	ck_assert_int_eq(proxy_head_feed(&h, "x", 1, &used), PROXY_HEAD_BAD);
	ck_assert_uint_eq(used, 0);
	ck_assert_str_eq(proxy_head_result_to_string(PROXY_HEAD_NOT_CONNECT), "not-connect");
	ck_assert_ptr_null(proxy_head_result_to_string(_PROXY_HEAD_RESULT_MAX));
}
END_TEST

/* ---- the head: refused --------------------------------------------------------------- */

struct head_bad_row {
	const char *in;
	size_t len;                       /* 0: strlen */
	enum proxy_head_result want;
	const char *frag;                 /* in ph_error */
	size_t used;                      /* 0: not checked */
};

#define ROW(s, r, f) { s, 0, r, f, 0 }
/* With NUL bytes inside: the literal's own length, and the bytes used. */
#define ROWN(s, r, f, used) { s, sizeof(s) - 1, r, f, used }

static const struct head_bad_row head_bad_rows[] = {
	/* 405: a request line of three good tokens and another method */
	ROW("GET http://example.com/ HTTP/1.1\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	ROW("GET / HTTP/1.1\r\nHost: x\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	ROW("connect example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	ROW("CONNECTX example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	ROW("CONNEC example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	ROW("AVERYLONGMETHODNAME x HTTP/1.1\r\n\r\n", PROXY_HEAD_NOT_CONNECT, "CONNECT"),
	/* decided at the request line's end, before the rest of the head */
	{ "GET / HTTP/1.1\r\nHost: x", 0, PROXY_HEAD_NOT_CONNECT, "CONNECT", 16 },
	/* 400: the three-token rule, checked before the method */
	ROW("GET http://example.com/\r\n\r\n", PROXY_HEAD_BAD, "fewer than 3"),
	ROW("GET\r\n\r\n", PROXY_HEAD_BAD, "fewer than 3"),
	ROW("CONNECT example.com:443\r\n\r\n", PROXY_HEAD_BAD, "fewer than 3"),
	ROW("GET / HTTP/1.1 x\r\n\r\n", PROXY_HEAD_BAD, "more than 3"),
	ROW("CONNECT  example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "empty part"),
	ROW(" CONNECT example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "empty part"),
	ROW("CONNECT example.com:443 HTTP/1.1 \r\n\r\n", PROXY_HEAD_BAD, "more than 3"),
	ROW("CONNECT example.com:443  HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "empty part"),
	ROW("CONNECT\texample.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "control"),
	ROW("\r\n\r\n", PROXY_HEAD_BAD, "empty part"),
	/* versions */
	ROW("CONNECT example.com:443 HTTP/2\r\n\r\n", PROXY_HEAD_BAD, "version"),
	ROW("CONNECT example.com:443 HTTP/1.10\r\n\r\n", PROXY_HEAD_BAD, "version"),
	ROW("CONNECT example.com:443 http/1.1\r\n\r\n", PROXY_HEAD_BAD, "version"),
	ROW("CONNECT example.com:443 HTTP/1.1x\r\n\r\n", PROXY_HEAD_BAD, "version"),
	ROW("GET / HTTP/3.0\r\n\r\n", PROXY_HEAD_BAD, "version"),
	/* targets */
	ROW("CONNECT example.com HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "host:port"),
	ROW("CONNECT example.com:0 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "port 0"),
	ROW("CONNECT example.com:65536 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "1..65535"),
	ROW("CONNECT example.com:https HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "digits"),
	ROW("CONNECT http://example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "not a URL"),
	ROW("CONNECT http://example.com/ HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "not a URL"),
	ROW("CONNECT example.com:443/ HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "not a URL"),
	ROW("CONNECT /x HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "not a URL"),
	ROW("CONNECT ::1:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "brackets"),
	ROW("CONNECT [::1] HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "[IPv6]:port"),
	ROW("CONNECT [::1]443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "[IPv6]:port"),
	ROW("CONNECT *.example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "'*'"),
	ROW("CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "letters"),
	ROW("CONNECT example.com.:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "empty label"),
	ROW("CONNECT 127.1:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "IPv4"),
	ROW("CONNECT 0x7f000001:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "IPv4"),
	ROW("CONNECT :443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "empty"),
	/* garbage anywhere */
	ROWN("CONNECT example.com:443 HTTP/1.1\r\nHost: a\0b\r\n\r\n", PROXY_HEAD_BAD, "NUL", 42),
	ROWN("CONNECT example.com:443 HTTP/1.1\r\n\0\r\n", PROXY_HEAD_BAD, "NUL", 35),
	ROWN("CONNECT a\0:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "control", 10),
	ROWN("\0CONNECT a:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "control", 1),
	ROW("CONNECT example.com:443 HTTP/1.1\rX\n\r\n", PROXY_HEAD_BAD, "CR"),
	ROW("CONNECT example.com:443 HTTP/1.1\r\nHost: a\rb\r\n\r\n", PROXY_HEAD_BAD, "CR"),
	ROW("CONNECT example.com:443 HTTP/1.1\r\n\rX", PROXY_HEAD_BAD, "CR"),
	ROW("CONNECT example.com:443 HTTP/1.1\n\n", PROXY_HEAD_BAD, "bare LF"),
	ROW("CONNECT example.com:443 HTTP/1.1\r\nHost: a\n\r\n", PROXY_HEAD_BAD, "bare LF"),
	ROW("CONNECT example.com:443 HTTP/1.1\r\n\n", PROXY_HEAD_BAD, "bare LF"),
	ROW("CONNECT ex\xc3\xa4mple.com:443 HTTP/1.1\r\n\r\n", PROXY_HEAD_BAD, "non-ASCII"),
};

START_TEST(test_head_refused)
{
	const struct head_bad_row *row = &head_bad_rows[_i];
	size_t len = row->len ? row->len : strlen(row->in), used;
	struct proxy_head h;
	enum proxy_head_result r;

	proxy_head_init(&h);
	r = proxy_head_feed(&h, row->in, len, &used);
	ck_assert_msg(r == row->want, "row %d: got %s, want %s", _i, proxy_head_result_to_string(r),
		      proxy_head_result_to_string(row->want));
	ck_assert_msg(h.ph_error && strstr(h.ph_error, row->frag),
		      "row %d: reason \"%s\" lacks \"%s\"", _i, h.ph_error ? h.ph_error : "(null)",
		      row->frag);
	if (row->used)
		ck_assert_uint_eq(used, row->used);
}
END_TEST

/* A target longer than any valid one is refused, whatever its length. */
START_TEST(test_head_long_target)
{
	_cleanup_free_ char *s = malloc(PROXY_HEAD_MAX);
	struct proxy_head h;
	size_t n, used;

	ck_assert_ptr_nonnull(s);
	n = (size_t)snprintf(s, PROXY_HEAD_MAX, "CONNECT ");
	memset(s + n, 'a', 20000);
	n += 20000;
	n += (size_t)snprintf(s + n, PROXY_HEAD_MAX - n, ".com:443 HTTP/1.1\r\n\r\n");
	proxy_head_init(&h);
	ck_assert_int_eq(proxy_head_feed(&h, s, n, &used), PROXY_HEAD_BAD);
	ck_assert_ptr_nonnull(strstr(h.ph_error, "too long"));
	/* A long method is simply not CONNECT. */
	n = 0;
	memset(s, 'M', 30000);
	n = 30000;
	n += (size_t)snprintf(s + n, PROXY_HEAD_MAX - n, " x HTTP/1.1\r\n");
	proxy_head_init(&h);
	ck_assert_int_eq(proxy_head_feed(&h, s, n, &used), PROXY_HEAD_NOT_CONNECT);
}
END_TEST

/* ---- targets --------------------------------------------------------------------------- */

struct target_row {
	const char *in;
	const char *host;     /* NULL: refused */
	unsigned port;
	int kind;
};

static const struct target_row target_rows[] = {
	{ "example.com:443", "example.com", 443, MSB_EGRESS_HOST_NAME },
	{ "Example.COM:1", "Example.COM", 1, MSB_EGRESS_HOST_NAME },
	{ "a:65535", "a", 65535, MSB_EGRESS_HOST_NAME },
	{ "1.2.3.4:80", "1.2.3.4", 80, MSB_EGRESS_HOST_IPV4 },
	{ "[2001:db8::1]:443", "[2001:db8::1]", 443, MSB_EGRESS_HOST_IPV6 },
	{ "[::ffff:10.0.0.1]:443", "[::ffff:10.0.0.1]", 443, MSB_EGRESS_HOST_IPV6 },
	{ "[::1]:22", "[::1]", 22, MSB_EGRESS_HOST_IPV6 },
	{ "example.com", NULL, 0, 0 },
	{ "example.com:", NULL, 0, 0 },
	{ ":443", NULL, 0, 0 },
	{ "example.com:0443", NULL, 0, 0 },
	{ "example.com:443:443", NULL, 0, 0 },
	{ "2001:db8::1:443", NULL, 0, 0 },
	{ "[2001:db8::1]", NULL, 0, 0 },
	{ "[2001:db8::1]:", NULL, 0, 0 },
	{ "[2001:db8::1]x443", NULL, 0, 0 },
	{ "[fe80::1%25eth0]:443", NULL, 0, 0 },
	{ "[example.com]:443", NULL, 0, 0 },
	{ "[1.2.3.4]:443", NULL, 0, 0 },
	{ "1.2.3.256:443", NULL, 0, 0 },
	{ "*.example.com:443", NULL, 0, 0 },
	{ "exa_mple-1.com:443", "exa_mple-1.com", 443, MSB_EGRESS_HOST_NAME },
	{ "", NULL, 0, 0 },
	{ "[", NULL, 0, 0 },
	{ "]:443", NULL, 0, 0 },
};

START_TEST(test_target)
{
	const struct target_row *row = &target_rows[_i];
	struct proxy_target t;
	const char *why = NULL;
	int r = proxy_target_parse(row->in, strlen(row->in), &t, &why);

	if (!row->host) {
		ck_assert_msg(r == -EINVAL, "\"%s\" accepted", row->in);
		ck_assert_ptr_nonnull(why);
		return;
	}
	ck_assert_msg(r == 0, "\"%s\" refused: %s", row->in, why);
	ck_assert_str_eq(t.host, row->host);
	ck_assert_uint_eq(t.port, row->port);
	ck_assert_int_eq(t.parsed.kind, row->kind);
}
END_TEST

/* ---- the non-global table ------------------------------------------------------------------ */

struct addr_row {
	const char *addr;
	bool global;
};

static const struct addr_row addr_rows[] = {
	/* IPv4 */
	{ "0.0.0.0", false }, { "0.255.255.255", false },
	{ "10.0.0.1", false }, { "10.255.255.255", false }, { "11.0.0.1", true }, { "9.255.255.255", true },
	{ "100.64.0.1", false }, { "100.127.255.255", false }, { "100.63.255.255", true }, { "100.128.0.0", true },
	{ "127.0.0.1", false }, { "127.255.255.254", false },
	{ "169.254.169.254", false }, { "169.253.0.1", true }, { "169.255.0.1", true },
	{ "172.16.0.1", false }, { "172.31.255.255", false }, { "172.15.255.255", true }, { "172.32.0.0", true },
	{ "192.0.0.1", false }, { "192.0.1.1", true },
	{ "192.0.2.1", false }, { "192.88.99.1", false }, { "192.88.98.1", true },
	{ "192.168.1.1", false }, { "192.169.0.1", true },
	{ "198.18.0.1", false }, { "198.19.255.255", false }, { "198.17.255.255", true }, { "198.20.0.0", true },
	{ "198.51.100.1", false }, { "203.0.113.1", false }, { "203.0.114.1", true },
	{ "224.0.0.1", false }, { "239.255.255.255", false }, { "240.0.0.1", false },
	{ "255.255.255.255", false }, { "223.255.255.255", true },
	{ "1.1.1.1", true }, { "8.8.8.8", true }, { "93.184.216.34", true },
	/* IPv6 */
	{ "::", false }, { "::1", false }, { "::2", false },
	{ "::ffff:127.0.0.1", false }, { "::ffff:10.1.2.3", false }, { "::ffff:169.254.169.254", false },
	{ "::ffff:8.8.8.8", true },
	{ "::8.8.8.8", false },                     /* v4-compatible: never */
	{ "64:ff9b::8.8.8.8", true }, { "64:ff9b::10.0.0.1", false }, { "64:ff9b::127.0.0.1", false },
	{ "64:ff9b:1::8.8.8.8", false },
	{ "100::1", false }, { "100:0:0:1::1", false },  /* outside the /64, outside 2000::/3 */
	{ "2001::1", false }, { "2001:0:4136:e378::1", false }, { "2001:1ff::1", false }, { "2001:200::1", true },
	{ "2001:db8::1", false }, { "2001:db9::1", true },
	{ "2002:0808:0808::1", true }, { "2002:0a00:0001::1", false }, { "2002:7f00:0001::1", false },
	{ "2002:a9fe:a9fe::1", false },
	{ "fc00::1", false }, { "fd00:ec2::254", false }, { "fdff::1", false },
	{ "fe80::1", false }, { "febf::1", false }, { "fec0::1", false }, { "feff::1", false },
	{ "ff02::1", false }, { "ff0e::1", false },
	{ "2606:4700:4700::1111", true }, { "2a00:1450:4001::1", true }, { "3fff::1", false }, { "3fff:fff::1", false },
	{ "3fff:1000::1", true }, { "3ffe::1", true },
	{ "4000::1", false }, { "1000::1", false }, { "e000::1", false },
};

static int parse_addr(const char *s, unsigned char out[16])
{
	if (inet_pton(AF_INET, s, out) == 1)
		return AF_INET;
	ck_assert_msg(inet_pton(AF_INET6, s, out) == 1, "test address %s", s);
	return AF_INET6;
}

START_TEST(test_addr_global)
{
	const struct addr_row *row = &addr_rows[_i];
	struct proxy_cidr_list none = { 0 };
	unsigned char a[16];
	int family = parse_addr(row->addr, a);

	ck_assert_msg(proxy_addr_is_global(family, a) == row->global, "%s: want %s", row->addr,
		      row->global ? "global" : "non-global");
	ck_assert_int_eq(proxy_addr_is_allowed(&none, family, a), row->global);
}
END_TEST

/* private_allow lets named non-global blocks through, and nothing else. */
START_TEST(test_private_allow)
{
	static const struct {
		const char *addr;
		bool allowed;
	} rows[] = {
		{ "127.0.0.1", true }, { "127.9.9.9", true }, { "10.1.2.3", true },
		{ "10.2.0.0", false }, { "192.168.1.1", false }, { "fd00:ec2::254", true },
		{ "fd00:ec3::1", false }, { "::1", false }, { "8.8.8.8", true },
		{ "::ffff:127.0.0.1", false },  /* the list is matched by family */
	};
	struct proxy_config *c = malloc(sizeof(*c));
	char err[256];

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(proxy_config_parse(NULL, NULL, "127.0.0.0/8, 10.1.0.0/16,fd00:ec2::/32",
					    c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c->private_allow.n, 3);
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		unsigned char a[16];
		int family = parse_addr(rows[i].addr, a);

		ck_assert_msg(proxy_addr_is_allowed(&c->private_allow, family, a) == rows[i].allowed,
			      "%s", rows[i].addr);
	}
	free(c);
}
END_TEST

/* ---- CIDRs and lists ------------------------------------------------------------------------ */

struct cidr_row {
	const char *in;
	int family;          /* 0: refused */
	unsigned prefix;
};

static const struct cidr_row cidr_rows[] = {
	{ "127.0.0.0/8", AF_INET, 8 },
	{ "10.0.0.1", AF_INET, 32 },
	{ "0.0.0.0/0", AF_INET, 0 },
	{ "10.0.0.1/32", AF_INET, 32 },
	{ "::/0", AF_INET6, 0 },
	{ "fd00::/8", AF_INET6, 8 },
	{ "::1", AF_INET6, 128 },
	{ "2001:db8::/32", AF_INET6, 32 },
	{ "10.0.0.1/8", 0, 0 },         /* host bits */
	{ "fd00::1/8", 0, 0 },
	{ "10.0.0.0/33", 0, 0 },
	{ "::/129", 0, 0 },
	{ "10.0.0.0/08", 0, 0 },
	{ "10.0.0.0/", 0, 0 },
	{ "10.0.0.0/x", 0, 0 },
	{ "10.0.0.0/8/8", 0, 0 },
	{ "10.0.0/24", 0, 0 },
	{ "010.0.0.0/8", 0, 0 },
	{ "[::1]/128", 0, 0 },
	{ "fe80::1%eth0/128", 0, 0 },
	{ "localhost/8", 0, 0 },
	{ "", 0, 0 },
	{ "/8", 0, 0 },
};

START_TEST(test_cidr)
{
	const struct cidr_row *row = &cidr_rows[_i];
	struct proxy_cidr c = { .family = 77 };
	const char *why = NULL;
	int r = proxy_cidr_parse(row->in, strlen(row->in), &c, &why);

	if (!row->family) {
		ck_assert_msg(r == -EINVAL, "\"%s\" accepted", row->in);
		ck_assert_ptr_nonnull(why);
		ck_assert_int_eq(c.family, 77);
		return;
	}
	ck_assert_msg(r == 0, "\"%s\" refused: %s", row->in, why);
	ck_assert_int_eq(c.family, row->family);
	ck_assert_uint_eq(c.prefix, row->prefix);
}
END_TEST

START_TEST(test_cidr_contains)
{
	struct proxy_cidr c;
	unsigned char a[16];

	ck_assert_int_eq(proxy_cidr_parse("172.16.0.0/12", 13, &c, NULL), 0);
	ck_assert(proxy_cidr_contains(&c, parse_addr("172.31.255.255", a), a));
	ck_assert(!proxy_cidr_contains(&c, parse_addr("172.32.0.0", a), a));
	ck_assert(!proxy_cidr_contains(&c, parse_addr("::ffff:172.16.0.1", a), a));
	ck_assert_int_eq(proxy_cidr_parse("0.0.0.0/0", 9, &c, NULL), 0);
	ck_assert(proxy_cidr_contains(&c, parse_addr("1.2.3.4", a), a));
	ck_assert(!proxy_cidr_contains(&c, parse_addr("::1", a), a));
	ck_assert_int_eq(proxy_cidr_parse("fe80::/10", 9, &c, NULL), 0);
	ck_assert(proxy_cidr_contains(&c, parse_addr("febf:ffff::1", a), a));
	ck_assert(!proxy_cidr_contains(&c, parse_addr("fec0::1", a), a));
}
END_TEST

START_TEST(test_list_next)
{
	static const struct {
		const char *in;
		const char *want[4];
	} rows[] = {
		{ "", { NULL } },
		{ " , ,\t,", { NULL } },
		{ "a", { "a", NULL } },
		{ " a , b ,, c ", { "a", "b", "c", NULL } },
		{ ",a,", { "a", NULL } },
		{ "a b,\tc\n", { "a b", "c", NULL } },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		const char *cur = rows[i].in, *item;
		size_t len, n = 0;

		while (proxy_list_next(&cur, &item, &len)) {
			ck_assert_ptr_nonnull(rows[i].want[n]);
			ck_assert_uint_eq(len, strlen(rows[i].want[n]));
			ck_assert(memcmp(item, rows[i].want[n], len) == 0);
			n++;
		}
		ck_assert_ptr_null(rows[i].want[n]);
		ck_assert(!proxy_list_next(&cur, &item, &len));
	}
}
END_TEST

/* ---- configuration ---------------------------------------------------------------------- */

struct config_row {
	const char *allow, *port, *private_allow;
	const char *frag;     /* NULL: accepted */
	const char *frag2;
};

static const struct config_row config_bad_rows[] = {
	{ "a.example,*", NULL, NULL, "MAF_SANDBOX_ALLOW entry 1 \"*\"", "bare" },
	{ "https://a.example", NULL, NULL, "MAF_SANDBOX_ALLOW entry 0", "scheme" },
	{ "a.example:0", NULL, NULL, "MAF_SANDBOX_ALLOW", "port 0" },
	{ "a b", NULL, NULL, "MAF_SANDBOX_ALLOW", "whitespace" },
	{ "2001:db8::1", NULL, NULL, "MAF_SANDBOX_ALLOW", "brackets" },
	{ NULL, "0", NULL, "MAF_SANDBOX_PROXY_PORT \"0\"", NULL },
	{ NULL, "65536", NULL, "MAF_SANDBOX_PROXY_PORT", NULL },
	{ NULL, "", NULL, "MAF_SANDBOX_PROXY_PORT is set but empty", NULL },
	{ NULL, " 3128", NULL, "MAF_SANDBOX_PROXY_PORT", NULL },
	{ NULL, "3128x", NULL, "MAF_SANDBOX_PROXY_PORT", NULL },
	{ NULL, "-1", NULL, "MAF_SANDBOX_PROXY_PORT", NULL },
	{ NULL, NULL, "10.0.0.0/8,bogus", "MAF_SANDBOX_PRIVATE_ALLOW entry 1 \"bogus\"", NULL },
	{ NULL, NULL, "10.0.0.1/8", "MAF_SANDBOX_PRIVATE_ALLOW", "bits" },
};

START_TEST(test_config_refused)
{
	const struct config_row *row = &config_bad_rows[_i];
	struct proxy_config *c = malloc(sizeof(*c));
	char err[512] = "";

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(proxy_config_parse(row->allow, row->port, row->private_allow, c, err,
					    sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, row->frag), "\"%s\" lacks \"%s\"", err, row->frag);
	if (row->frag2)
		ck_assert_msg(strstr(err, row->frag2), "\"%s\" lacks \"%s\"", err, row->frag2);
	ck_assert_uint_eq(c->n_rules, 0);
	free(c);
}
END_TEST

START_TEST(test_config_ok)
{
	struct proxy_config *c = malloc(sizeof(*c));
	struct proxy_target t;
	char err[512];

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(proxy_config_parse(NULL, NULL, NULL, c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c->port, PROXY_DEFAULT_PORT);
	ck_assert_uint_eq(c->n_rules, 0);
	ck_assert_uint_eq(c->private_allow.n, 0);
	ck_assert_int_eq(proxy_config_parse(" mcr.microsoft.com , ,*.data.mcr.microsoft.com:8443,",
					    "1", "", c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c->port, 1);
	ck_assert_uint_eq(c->n_rules, 2);
	ck_assert_str_eq(c->entries[0], "mcr.microsoft.com");
	ck_assert_str_eq(c->entries[1], "*.data.mcr.microsoft.com:8443");
	ck_assert_int_eq(proxy_target_parse("MCR.microsoft.com:443", 21, &t, NULL), 0);
	ck_assert(proxy_config_allows(c, &t));
	ck_assert_int_eq(proxy_target_parse("mcr.microsoft.com:8443", 22, &t, NULL), 0);
	ck_assert(!proxy_config_allows(c, &t));
	ck_assert_int_eq(proxy_target_parse("x.data.mcr.microsoft.com:8443", 29, &t, NULL), 0);
	ck_assert(proxy_config_allows(c, &t));
	ck_assert_int_eq(proxy_config_parse("", "65535", NULL, c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c->port, 65535);
	ck_assert_uint_eq(c->n_rules, 0);
	free(c);
}
END_TEST

START_TEST(test_config_limits)
{
	struct proxy_config *c = malloc(sizeof(*c));
	size_t cap = (PROXY_MAX_RULES + 1) * 16;
	_cleanup_free_ char *list = malloc(cap), *cidrs = malloc(cap);
	char err[512];
	size_t n = 0, m = 0;

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(list);
	ck_assert_ptr_nonnull(cidrs);
	for (int i = 0; i < PROXY_MAX_RULES; i++)
		n += (size_t)snprintf(list + n, cap - n, "h%d.example,", i);
	for (int i = 0; i < PROXY_MAX_CIDRS; i++)
		m += (size_t)snprintf(cidrs + m, cap - m, "10.0.%d.0/24,", i);
	ck_assert_int_eq(proxy_config_parse(list, NULL, cidrs, c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c->n_rules, PROXY_MAX_RULES);
	ck_assert_uint_eq(c->private_allow.n, PROXY_MAX_CIDRS);
	snprintf(list + n, cap - n, "one-more.example");
	ck_assert_int_eq(proxy_config_parse(list, NULL, NULL, c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "more than 256"));
	snprintf(cidrs + m, cap - m, "10.1.0.0/16");
	ck_assert_int_eq(proxy_config_parse(NULL, NULL, cidrs, c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "more than 64"));
	/* An entry longer than any valid one: refused, shown cut. */
	memset(list, 'a', 2000);
	list[2000] = '\0';
	ck_assert_int_eq(proxy_config_parse(list, NULL, NULL, c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "longer than 259"));
	ck_assert_uint_lt(strlen(err), 200);
	free(c);
}
END_TEST

/* ---- replies and log lines ------------------------------------------------------------- */

START_TEST(test_replies)
{
	static const struct {
		int status;
		const char *want;
	} rows[] = {
		{ 200, "HTTP/1.1 200 Connection Established\r\n\r\n" },
		{ 400, "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n" },
		{ 403, "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n" },
		{ 405, "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n" },
		{ 502, "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n" },
	};
	char buf[PROXY_REPLY_MAX];

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		ck_assert_int_eq(proxy_format_reply(rows[i].status, buf, sizeof(buf)),
				 (int)strlen(rows[i].want));
		ck_assert_str_eq(buf, rows[i].want);
	}
	ck_assert_int_eq(proxy_format_reply(404, buf, sizeof(buf)), -EINVAL);
	ck_assert_int_eq(proxy_format_reply(403, buf, 10), -EINVAL);
}
END_TEST

START_TEST(test_decisions)
{
	static const struct {
		enum proxy_decision d;
		const char *target;
		const char *line;
		int status;
	} rows[] = {
		{ PROXY_ALLOW, "example.com:443", "ALLOW example.com:443\n", 200 },
		{ PROXY_DENY, "Example.COM:8443", "DENY Example.COM:8443\n", 403 },
		{ PROXY_DENY_NONGLOBAL, "[::1]:443", "DENY-NONGLOBAL [::1]:443\n", 403 },
		{ PROXY_UNREACHABLE, "10.0.0.1:1", "UNREACHABLE 10.0.0.1:1\n", 502 },
	};
	char buf[512];

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		struct proxy_target t;

		ck_assert_int_eq(proxy_target_parse(rows[i].target, strlen(rows[i].target), &t, NULL), 0);
		ck_assert_int_eq(proxy_format_decision(rows[i].d, &t, buf, sizeof(buf)),
				 (int)strlen(rows[i].line));
		ck_assert_str_eq(buf, rows[i].line);
		ck_assert_int_eq(proxy_decision_status(rows[i].d), rows[i].status);
		ck_assert_int_eq(proxy_format_decision(rows[i].d, &t, buf, 5), -EINVAL);
	}
	ck_assert_ptr_null(proxy_decision_to_string(_PROXY_DECISION_MAX));
}
END_TEST

/* A plain-HTTP request's target (proxy_head_plain_target): absolute form
 * only, http or https, the scheme's port unless given; its decision line
 * carries the reason. */
static const struct {
	const char *head;
	const char *host;   /* NULL: no target */
	unsigned port;
} plain_rows[] = {
	{ "GET http://example.com/ HTTP/1.1\r\n", "example.com", 80 },
	{ "GET http://example.com HTTP/1.1\r\n", "example.com", 80 },
	{ "POST HTTPS://Example.COM?q=1 HTTP/1.0\r\n", "Example.COM", 443 },
	{ "GET http://example.com:8080/x#f HTTP/1.1\r\n", "example.com", 8080 },
	{ "HEAD http://[::1]/ HTTP/1.1\r\n", "[::1]", 80 },
	{ "HEAD http://[::1]:81/ HTTP/1.1\r\n", "[::1]", 81 },
	{ "GET http://10.0.0.1:1/ HTTP/1.1\r\n", "10.0.0.1", 1 },
	{ "GET / HTTP/1.1\r\n", NULL, 0 },
	{ "GET ftp://example.com/ HTTP/1.1\r\n", NULL, 0 },
	{ "GET http:/example.com/ HTTP/1.1\r\n", NULL, 0 },
	{ "GET http:///x HTTP/1.1\r\n", NULL, 0 },
	{ "GET http://user@example.com/ HTTP/1.1\r\n", NULL, 0 },
	{ "GET http://example.com:0/ HTTP/1.1\r\n", NULL, 0 },
	{ "GET http://example.com:99999/ HTTP/1.1\r\n", NULL, 0 },
	{ "GET http://*.example.com/ HTTP/1.1\r\n", NULL, 0 },
};

START_TEST(test_plain_target)
{
	struct proxy_target t = { .port = 7 };
	struct proxy_head h;
	char line[512];
	size_t used;
	int r;

	proxy_head_init(&h);
	ck_assert_int_eq(proxy_head_feed(&h, plain_rows[_i].head, strlen(plain_rows[_i].head), &used),
			 PROXY_HEAD_NOT_CONNECT);
	r = proxy_head_plain_target(&h, &t);
	if (!plain_rows[_i].host) {
		ck_assert_msg(r == -EINVAL, "%s: a target", plain_rows[_i].head);
		return;
	}
	ck_assert_msg(r == 0, "%s: no target", plain_rows[_i].head);
	ck_assert_str_eq(t.host, plain_rows[_i].host);
	ck_assert_uint_eq(t.port, plain_rows[_i].port);
	snprintf(line, sizeof(line), "DENY %s:%u not-CONNECT\n", plain_rows[_i].host, plain_rows[_i].port);
	ck_assert_int_eq(proxy_format_decision_reason(PROXY_DENY, &t, PROXY_REASON_NOT_CONNECT, line + 256, 256),
			 (int)strlen(line));
	ck_assert_str_eq(line + 256, line);
	ck_assert_int_eq(proxy_format_decision_reason(PROXY_DENY, &t, PROXY_REASON_NOT_CONNECT, line, 8), -EINVAL);
}
END_TEST

/* Only a head refused as not CONNECT has one; a target cut at
 * PROXY_TARGET_MAX before its authority ended has none. */
START_TEST(test_plain_target_refused)
{
	_cleanup_free_ char *s = malloc(PROXY_HEAD_MAX);
	struct proxy_target t;
	struct proxy_head h;
	size_t n, used;

	proxy_head_init(&h);
	ck_assert_int_eq(proxy_head_feed(&h, "CONNECT a:1 HTTP/1.1\r\n\r\n", 24, &used), PROXY_HEAD_DONE);
	ck_assert_int_eq(proxy_head_plain_target(&h, &t), -EINVAL);
	ck_assert_ptr_nonnull(s);
	n = (size_t)snprintf(s, PROXY_HEAD_MAX, "GET http://");
	memset(s + n, 'a', PROXY_TARGET_MAX);
	n += PROXY_TARGET_MAX;
	n += (size_t)snprintf(s + n, PROXY_HEAD_MAX - n, "/ HTTP/1.1\r\n");
	proxy_head_init(&h);
	ck_assert_int_eq(proxy_head_feed(&h, s, n, &used), PROXY_HEAD_NOT_CONNECT);
	ck_assert_int_eq(proxy_head_plain_target(&h, &t), -EINVAL);
}
END_TEST

static Suite *proxy_rules_suite(void)
{
	Suite *s = suite_create("proxy_rules");
	TCase *tc;

	tc = tcase_create("head_accepted");
	tcase_add_test(tc, test_head_ok);
	tcase_add_test(tc, test_head_payload_left);
	tcase_add_test(tc, test_head_split_everywhere);
	tcase_add_test(tc, test_head_terminator_split);
	tcase_add_test(tc, test_head_many_chunks);
	tcase_add_test(tc, test_head_sticky);
	suite_add_tcase(s, tc);

	tc = tcase_create("head_limits");
	tcase_add_test(tc, test_head_limit_exact);
	tcase_add_test(tc, test_head_limit_plus_one);
	tcase_add_test(tc, test_head_long_target);
	suite_add_tcase(s, tc);

	tc = tcase_create("head_refused");
	tcase_add_loop_test(tc, test_head_refused, 0, ELEMENTSOF(head_bad_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("targets");
	tcase_add_loop_test(tc, test_target, 0, ELEMENTSOF(target_rows));
	tcase_add_loop_test(tc, test_plain_target, 0, ELEMENTSOF(plain_rows));
	tcase_add_test(tc, test_plain_target_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("addresses");
	tcase_add_loop_test(tc, test_addr_global, 0, ELEMENTSOF(addr_rows));
	tcase_add_test(tc, test_private_allow);
	tcase_add_loop_test(tc, test_cidr, 0, ELEMENTSOF(cidr_rows));
	tcase_add_test(tc, test_cidr_contains);
	tcase_add_test(tc, test_list_next);
	suite_add_tcase(s, tc);

	tc = tcase_create("config");
	tcase_add_loop_test(tc, test_config_refused, 0, ELEMENTSOF(config_bad_rows));
	tcase_add_test(tc, test_config_ok);
	tcase_add_test(tc, test_config_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_add_test(tc, test_replies);
	tcase_add_test(tc, test_decisions);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(proxy_rules_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
