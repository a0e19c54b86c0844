/* check_bridgecheck.c — the unaddressed-bridge verdict over synthetic
 * getifaddrs lists, the real call on lo and on a name that cannot exist,
 * and the bridge names we give networks. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "bridgecheck.h"

#define BR "msb0123456789ab"
#define MAX_ENTRIES 8

/* ---- synthetic lists ---------------------------------------------------------- */

/* One list entry: "packet" (AF_PACKET), "none" (no address), or an IPv4 or
 * IPv6 literal. */
struct entry {
	const char *ifname;
	const char *addr;
};

struct list {
	struct ifaddrs ifa[MAX_ENTRIES];
	struct sockaddr_storage ss[MAX_ENTRIES];
};

static void entry_fill(struct list *l, size_t i, const struct entry *e)
{
	struct sockaddr_in *in = (struct sockaddr_in *)&l->ss[i];
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&l->ss[i];

	l->ifa[i].ifa_name = (char *)e->ifname;
	l->ifa[i].ifa_addr = (struct sockaddr *)&l->ss[i];
	if (strcmp(e->addr, "none") == 0) {
		l->ifa[i].ifa_addr = NULL;
	} else if (strcmp(e->addr, "packet") == 0) {
		l->ss[i].ss_family = AF_PACKET;
	} else if (strchr(e->addr, ':')) {
		in6->sin6_family = AF_INET6;
		ck_assert_int_eq(inet_pton(AF_INET6, e->addr, &in6->sin6_addr), 1);
	} else {
		in->sin_family = AF_INET;
		ck_assert_int_eq(inet_pton(AF_INET, e->addr, &in->sin_addr), 1);
	}
}

/* The entries up to the first with a NULL ifname, linked in order. */
static struct ifaddrs *list_build(struct list *l, const struct entry *entries)
{
	size_t n = 0;

	memset(l, 0, sizeof(*l));
	for (; n < MAX_ENTRIES && entries[n].ifname; n++) {
		entry_fill(l, n, &entries[n]);
		if (n > 0)
			l->ifa[n - 1].ifa_next = &l->ifa[n];
	}
	return n ? &l->ifa[0] : NULL;
}

struct verdict_row {
	const char *what;
	struct entry entries[MAX_ENTRIES];
	int want;
	const char *reason;     /* for -EADDRINUSE */
};

static const struct verdict_row verdict_rows[] = {
	{ "isolated: a link and nothing else", { { BR, "packet" } }, 0, NULL },
	{ "an entry with no address", { { BR, "none" } }, 0, NULL },
	{ "only link-local IPv6", { { BR, "packet" }, { BR, "fe80::1" } }, 0, NULL },
	{ "the top of fe80::/10", { { BR, "packet" }, { BR, "febf:ffff::1" } }, 0, NULL },
	{ "IPv4 held", { { BR, "packet" }, { BR, "10.213.0.1" } }, -EADDRINUSE,
	  "bridge " BR " holds 10.213.0.1" },
	{ "global IPv6 held", { { BR, "packet" }, { BR, "2001:db8::1" } }, -EADDRINUSE,
	  "bridge " BR " holds 2001:db8::1" },
	{ "ULA IPv6 held", { { BR, "fd00::1" } }, -EADDRINUSE, "bridge " BR " holds fd00::1" },
	{ "just past fe80::/10", { { BR, "fec0::1" } }, -EADDRINUSE,
	  "bridge " BR " holds fec0::1" },
	{ "every address named",
	  { { BR, "packet" }, { BR, "10.213.0.1" }, { BR, "fe80::1" }, { BR, "fd00::1" } },
	  -EADDRINUSE, "bridge " BR " holds 10.213.0.1, fd00::1" },
	{ "other interfaces' addresses ignored",
	  { { "eth0", "192.168.1.5" }, { BR, "packet" }, { "docker0", "172.17.0.1" },
	    { "msb0123456789ac", "10.213.0.17" }, { "msb0123456789a", "10.213.0.33" } },
	  0, NULL },
	{ "absent", { { "lo", "127.0.0.1" }, { "eth0", "packet" } }, -ENODEV, NULL },
	{ "absent: a prefix of its name", { { "msb0123456789a", "packet" } }, -ENODEV, NULL },
	{ "an empty list", { { NULL, NULL } }, -ENODEV, NULL },
};

START_TEST(test_verdict)
{
	const struct verdict_row *row = &verdict_rows[_i];
	struct list l;
	struct ifaddrs *list = list_build(&l, row->entries);
	_cleanup_free_ char *reason = NULL;
	int r = bridgecheck_verdict(list, BR, &reason);

	ck_assert_msg(r == row->want, "%s: %d, want %d", row->what, r, row->want);
	if (!row->reason) {
		ck_assert_ptr_null(reason);
		return;
	}
	ck_assert_ptr_nonnull(reason);
	ck_assert_str_eq(reason, row->reason);
}
END_TEST

/* ---- the real list ------------------------------------------------------------------ */

START_TEST(test_real_lo)
{
	_cleanup_free_ char *reason = NULL;

	ck_assert_int_eq(bridgecheck_unaddressed("lo", &reason), -EADDRINUSE);
	ck_assert_ptr_nonnull(reason);
	ck_assert_msg(strncmp(reason, "bridge lo holds ", 16) == 0, "%s", reason);
}
END_TEST

START_TEST(test_real_absent)
{
	_cleanup_free_ char *reason = NULL;

	/* Longer than IFNAMSIZ - 1: no interface can carry it. */
	ck_assert_int_eq(bridgecheck_unaddressed("msb-no-such-interface", &reason), -ENODEV);
	ck_assert_ptr_null(reason);
}
END_TEST

/* ---- names ------------------------------------------------------------------------- */

struct name_row {
	const char *container;
	const char *bridge;
};

static const struct name_row name_rows[] = {
	{ "maf-sandbox-docker-6f8a8ed7a21c", "msb6f8a8ed7a21c" },
	{ "maf-sandbox-docker-6f8a8ed7a21c-net", "msb6f8a8ed7a21c" },
	{ "maf-sandbox-docker-6f8a8ed7a21c-proxy", "msb6f8a8ed7a21c" },
	/* Not ours: the first 12 hex of SHA-256 of the name. */
	{ "", "msbe3b0c44298fc" },
	{ "maf-sandbox-docker-6F8A8ED7A21C", "msb63a2b647cb09" },
	{ "maf-sandbox-docker-6f8a8ed7a21c-x", "msb17cae499c7c7" },
};

START_TEST(test_name)
{
	const struct name_row *row = &name_rows[_i];
	char out[IFNAMSIZ];

	memset(out, 'Z', sizeof(out));
	bridgecheck_name(row->container, out);
	ck_assert_str_eq(out, row->bridge);
	ck_assert_uint_eq(strlen(out), BRIDGECHECK_NAME_LEN);
	ck_assert_uint_eq(strlen(out), IFNAMSIZ - 1);
}
END_TEST

static Suite *bridgecheck_suite(void)
{
	Suite *s = suite_create("bridgecheck");
	TCase *tc;

	tc = tcase_create("verdict");
	tcase_add_loop_test(tc, test_verdict, 0, ELEMENTSOF(verdict_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("host");
	tcase_add_test(tc, test_real_lo);
	tcase_add_test(tc, test_real_absent);
	suite_add_tcase(s, tc);

	tc = tcase_create("name");
	tcase_add_loop_test(tc, test_name, 0, ELEMENTSOF(name_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(bridgecheck_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
