/* check_subnet.c — the pool of per-sandbox subnets: parsing, exhaustion,
 * marking what the engine already holds, the cursor, release, and the
 * addresses of a block. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "subnet.h"

static struct subnet_pool *pool_of(const char *cidr, unsigned block_prefix)
{
	_cleanup_free_ char *err = NULL;
	struct subnet_pool *p = subnet_pool_new(cidr, block_prefix, &err);

	ck_assert_msg(p != NULL, "pool %s/%u: %s", cidr, block_prefix, err);
	return p;
}

static void take_ok(struct subnet_pool *p, const char *want_subnet)
{
	struct subnet_block b;

	ck_assert_int_eq(subnet_pool_take(p, &b), 0);
	ck_assert_str_eq(b.subnet, want_subnet);
}

/* ---- parsing ---------------------------------------------------------------- */

struct parse_row {
	const char *cidr;
	unsigned block;
	const char *err_part;   /* NULL: accepted */
};

static const struct parse_row parse_rows[] = {
	{ "10.213.0.0/16", 28, NULL },
	{ "10.213.0.0/16", 16, NULL },              /* one block */
	{ "10.213.0.0/16", 29, NULL },
	{ "10.0.0.0/8", 28, NULL },                 /* exactly SUBNET_POOL_MAX_BLOCKS */
	{ "0.0.0.0/0", 0, NULL },
	{ "192.168.7.8/29", 29, NULL },
	{ "10.0.0.0/8", 29, "more than" },          /* 2^21 blocks */
	{ "0.0.0.0/0", 28, "more than" },
	{ "10.213.0.0/16", 30, "between" },         /* too small to hold the proxy */
	{ "10.213.0.0/16", 15, "between" },         /* bigger than the pool */
	{ "10.213.0.1/16", 28, "host bits" },
	{ "10.213.128.0/16", 28, "host bits" },
	{ "10.213.0.0", 28, "not an IPv4" },
	{ "10.213.0.0/", 28, "not an IPv4" },
	{ "10.213.0.0/33", 28, "not an IPv4" },
	{ "10.213.0.0/016", 28, "not an IPv4" },
	{ "10.213.0/16", 28, "not an IPv4" },
	{ "10.213.0.0.0/16", 28, "not an IPv4" },
	{ "10.213.00.0/16", 28, "not an IPv4" },    /* leading zero */
	{ "10.256.0.0/16", 28, "not an IPv4" },
	{ "10.2130.0.0/16", 28, "not an IPv4" },
	{ " 10.213.0.0/16", 28, "not an IPv4" },
	{ "10.213.0.0/16 ", 28, "not an IPv4" },
	{ "10.213.0.0/+6", 28, "not an IPv4" },
	{ "10.213.-0.0/16", 28, "not an IPv4" },
	{ "fd00::/64", 28, "not an IPv4" },
	{ "", 28, "not an IPv4" },
};

START_TEST(test_parse)
{
	const struct parse_row *row = &parse_rows[_i];
	_cleanup_free_ char *err = NULL;
	_cleanup_(subnet_pool_freep) struct subnet_pool *p =
		subnet_pool_new(row->cidr, row->block, &err);

	if (!row->err_part) {
		ck_assert_msg(p != NULL, "%s/%u refused: %s", row->cidr, row->block, err);
		ck_assert_ptr_null(err);
		return;
	}
	ck_assert_msg(p == NULL, "%s/%u accepted", row->cidr, row->block);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, row->err_part), "%s/%u: '%s' lacks '%s'", row->cidr, row->block,
		      err, row->err_part);
}
END_TEST

START_TEST(test_sizes)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *dflt =
		pool_of(SUBNET_POOL_DEFAULT, SUBNET_BLOCK_DEFAULT_PREFIX);
	_cleanup_(subnet_pool_freep) struct subnet_pool *max = pool_of("10.0.0.0/8", 28);
	_cleanup_(subnet_pool_freep) struct subnet_pool *one = pool_of("10.213.0.0/16", 16);

	ck_assert_uint_eq(subnet_pool_size(dflt), 4096);
	ck_assert_uint_eq(subnet_pool_used(dflt), 0);
	ck_assert_uint_eq(subnet_pool_size(max), SUBNET_POOL_MAX_BLOCKS);
	ck_assert_uint_eq(subnet_pool_size(one), 1);
	ck_assert_ptr_null(subnet_pool_free(NULL));
}
END_TEST

/* ---- taking, exhaustion, the cursor, release ----------------------------------- */

START_TEST(test_exhaustion)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/26", 28);
	struct subnet_block b = { .subnet = "untouched" };

	take_ok(p, "10.213.0.0/28");
	take_ok(p, "10.213.0.16/28");
	take_ok(p, "10.213.0.32/28");
	take_ok(p, "10.213.0.48/28");
	ck_assert_uint_eq(subnet_pool_used(p), 4);
	ck_assert_int_eq(subnet_pool_take(p, &b), -ENOSPC);
	ck_assert_str_eq(b.subnet, "untouched");
	subnet_pool_release_cidr(p, "10.213.0.16/28");
	take_ok(p, "10.213.0.16/28");
	ck_assert_int_eq(subnet_pool_take(p, &b), -ENOSPC);
}
END_TEST

START_TEST(test_whole_default_pool)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/16", 28);
	struct subnet_block b;

	for (size_t i = 0; i < 4096; i++)
		ck_assert_int_eq(subnet_pool_take(p, &b), 0);
	ck_assert_str_eq(b.subnet, "10.213.255.240/28");
	ck_assert_uint_eq(subnet_pool_used(p), 4096);
	ck_assert_int_eq(subnet_pool_take(p, &b), -ENOSPC);
}
END_TEST

/* A released block is not handed out again while others are free; the
 * cursor wraps to reach it once they are gone. */
START_TEST(test_cursor)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/26", 28);
	struct subnet_block first;

	ck_assert_int_eq(subnet_pool_take(p, &first), 0);
	ck_assert_str_eq(first.subnet, "10.213.0.0/28");
	subnet_pool_release(p, &first);
	ck_assert_uint_eq(subnet_pool_used(p), 0);
	take_ok(p, "10.213.0.16/28");
	take_ok(p, "10.213.0.32/28");
	subnet_pool_release_cidr(p, "10.213.0.16/28");
	take_ok(p, "10.213.0.48/28");
	take_ok(p, "10.213.0.0/28");            /* wrapped */
	take_ok(p, "10.213.0.16/28");
}
END_TEST

/* The cursor skips blocks marked in use. */
START_TEST(test_take_skips_marked)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/26", 28);

	ck_assert_int_eq(subnet_pool_mark(p, "10.213.0.0/27"), 2);
	take_ok(p, "10.213.0.32/28");
	take_ok(p, "10.213.0.48/28");
	subnet_pool_release_cidr(p, "10.213.0.0/28");       /* a marked one can be freed */
	take_ok(p, "10.213.0.0/28");
}
END_TEST

START_TEST(test_release_not_ours)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/26", 28);
	struct subnet_block b;

	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(subnet_pool_take(p, &b), 0);
	subnet_pool_release_cidr(p, "10.214.0.0/28");       /* outside */
	subnet_pool_release_cidr(p, "10.213.0.0/27");       /* not a block */
	subnet_pool_release_cidr(p, "10.213.0.0/29");
	subnet_pool_release_cidr(p, "10.213.0.8/28");       /* not aligned */
	subnet_pool_release_cidr(p, "10.213.0.64/28");      /* just past the pool */
	subnet_pool_release_cidr(p, "garbage");
	subnet_pool_release_cidr(p, "fd00::/64");
	ck_assert_uint_eq(subnet_pool_used(p), 4);
	subnet_pool_release_cidr(p, "10.213.0.48/28");
	subnet_pool_release_cidr(p, "10.213.0.48/28");      /* twice: no underflow */
	ck_assert_uint_eq(subnet_pool_used(p), 3);
}
END_TEST

/* ---- marking what the engine holds ---------------------------------------------- */

struct mark_row {
	const char *cidr;
	int marked;             /* the return value */
	size_t used;            /* used afterwards */
};

/* Pool 10.213.0.0/24 in /28s: 16 blocks. */
static const struct mark_row mark_rows[] = {
	{ "10.213.0.0/28", 1, 1 },              /* exactly a block */
	{ "10.213.0.32/28", 1, 1 },
	{ "10.213.0.0/26", 4, 4 },              /* bigger, inside */
	{ "10.213.0.0/24", 16, 16 },            /* the pool itself */
	{ "10.213.0.0/16", 16, 16 },            /* around the pool */
	{ "0.0.0.0/0", 16, 16 },
	{ "10.213.0.64/30", 1, 1 },             /* smaller: blocks its block */
	{ "10.213.0.77/32", 1, 1 },
	{ "10.213.0.255/32", 1, 1 },            /* the last address */
	{ "10.213.0.20/24", 16, 16 },           /* host bits set: the network covers it */
	{ "10.213.1.0/24", 0, 0 },              /* just past */
	{ "10.212.255.0/24", 0, 0 },            /* just before */
	{ "172.17.0.0/16", 0, 0 },
	{ "fd00:1::/64", 0, 0 },                /* IPv6: ignored */
	{ "::ffff:10.213.0.0/120", 0, 0 },
	{ "10.213.0.0", -EINVAL, 0 },
	{ "10.213.0.0/33", -EINVAL, 0 },
	{ "bridge", -EINVAL, 0 },
	{ "", -EINVAL, 0 },
};

START_TEST(test_mark)
{
	const struct mark_row *row = &mark_rows[_i];
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/24", 28);

	ck_assert_msg(subnet_pool_mark(p, row->cidr) == row->marked, "mark %s: %d, want %d",
		      row->cidr, subnet_pool_mark(p, row->cidr), row->marked);
	ck_assert_uint_eq(subnet_pool_used(p), row->used);
	/* Again: nothing new. */
	ck_assert_int_eq(subnet_pool_mark(p, row->cidr), row->marked < 0 ? row->marked : 0);
	ck_assert_uint_eq(subnet_pool_used(p), row->used);
}
END_TEST

START_TEST(test_mark_partial_overlap)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/26", 28);
	struct subnet_block b;

	ck_assert_int_eq(subnet_pool_mark(p, "10.213.0.16/28"), 1);
	ck_assert_int_eq(subnet_pool_mark(p, "10.213.0.0/27"), 1);   /* one of two is new */
	take_ok(p, "10.213.0.32/28");
	take_ok(p, "10.213.0.48/28");
	ck_assert_int_eq(subnet_pool_take(p, &b), -ENOSPC);
}
END_TEST

/* ---- the addresses of a block ----------------------------------------------------- */

struct block_row {
	const char *cidr;
	unsigned prefix;
	const char *gateway, *proxy, *ip_range;     /* NULL gateway: refused */
};

static const struct block_row block_rows[] = {
	{ "10.213.0.0/28", 28, "10.213.0.1", "10.213.0.2", "10.213.0.8/29" },
	{ "10.213.255.240/28", 28, "10.213.255.241", "10.213.255.242", "10.213.255.248/29" },
	{ "10.213.0.8/29", 29, "10.213.0.9", "10.213.0.10", "10.213.0.12/30" },
	{ "192.168.0.0/24", 24, "192.168.0.1", "192.168.0.2", "192.168.0.128/25" },
	{ "255.255.255.248/29", 29, "255.255.255.249", "255.255.255.250", "255.255.255.252/30" },
	{ "10.213.0.0/28", 27, NULL, NULL, NULL },          /* not the block size */
	{ "10.213.0.0/30", 30, NULL, NULL, NULL },          /* too small */
	{ "10.213.0.4/28", 28, NULL, NULL, NULL },          /* host bits */
	{ "fd00::/64", 64, NULL, NULL, NULL },
};

START_TEST(test_block_from_cidr)
{
	const struct block_row *row = &block_rows[_i];
	struct subnet_block b = { .subnet = "untouched" };
	int r = subnet_block_from_cidr(row->cidr, row->prefix, &b);

	if (!row->gateway) {
		ck_assert_int_eq(r, -EINVAL);
		ck_assert_str_eq(b.subnet, "untouched");
		return;
	}
	ck_assert_int_eq(r, 0);
	ck_assert_str_eq(b.subnet, row->cidr);
	ck_assert_str_eq(b.gateway, row->gateway);
	ck_assert_str_eq(b.proxy, row->proxy);
	ck_assert_str_eq(b.ip_range, row->ip_range);
}
END_TEST

START_TEST(test_take_fills_addresses)
{
	_cleanup_(subnet_pool_freep) struct subnet_pool *p = pool_of("10.213.0.0/16", 28);
	struct subnet_block b;

	ck_assert_int_eq(subnet_pool_mark(p, "10.213.0.0/24"), 16);
	ck_assert_int_eq(subnet_pool_take(p, &b), 0);
	ck_assert_str_eq(b.subnet, "10.213.1.0/28");
	ck_assert_str_eq(b.gateway, "10.213.1.1");
	ck_assert_str_eq(b.proxy, "10.213.1.2");
	ck_assert_str_eq(b.ip_range, "10.213.1.8/29");
}
END_TEST

static Suite *subnet_suite(void)
{
	Suite *s = suite_create("subnet");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_loop_test(tc, test_parse, 0, ELEMENTSOF(parse_rows));
	tcase_add_test(tc, test_sizes);
	suite_add_tcase(s, tc);

	tc = tcase_create("take");
	tcase_add_test(tc, test_exhaustion);
	tcase_add_test(tc, test_whole_default_pool);
	tcase_add_test(tc, test_cursor);
	tcase_add_test(tc, test_take_skips_marked);
	tcase_add_test(tc, test_release_not_ours);
	suite_add_tcase(s, tc);

	tc = tcase_create("mark");
	tcase_add_loop_test(tc, test_mark, 0, ELEMENTSOF(mark_rows));
	tcase_add_test(tc, test_mark_partial_overlap);
	suite_add_tcase(s, tc);

	tc = tcase_create("addresses");
	tcase_add_loop_test(tc, test_block_from_cidr, 0, ELEMENTSOF(block_rows));
	tcase_add_test(tc, test_take_fills_addresses);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(subnet_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
