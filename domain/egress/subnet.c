/* subnet.c — the pool of per-sandbox IPv4 subnets: a bitmap of equal blocks
 * and a cursor. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "subnet.h"
#include "xmalloc.h"

#define IPV4_BITS   32
#define OCTET_MAX   255
#define OCTET_DIGITS 3
#define PREFIX_DIGITS 2
#define WORD_BITS   64

_Static_assert(sizeof(((struct subnet_block *)0)->subnet) == sizeof("255.255.255.255/32"),
	       "subnet holds the longest CIDR");
_Static_assert(sizeof(((struct subnet_block *)0)->gateway) == sizeof("255.255.255.255"),
	       "gateway holds the longest address");

struct subnet_pool {
	uint32_t base;          /* the pool's network address */
	unsigned prefix;        /* the pool's prefix length */
	unsigned block_prefix;
	size_t n;               /* blocks */
	size_t used;
	size_t cursor;          /* where the next take starts looking */
	uint64_t *bits;         /* bit i set: block i in use */
};

/* ---- parsing ------------------------------------------------------------- */

/* A decimal of 1..max_digits digits with no leading zero ("0" itself is
 * fine), at most max. Advances *s past it. */
static int parse_decimal(const char **s, unsigned max_digits, unsigned max, unsigned *ret)
{
	const char *p = *s;
	unsigned v = 0, n = 0;

	while (*p >= '0' && *p <= '9' && n < max_digits + 1) {
		v = v * 10 + (unsigned)(*p - '0');
		p++;
		n++;
	}
	if (n == 0 || n > max_digits || (n > 1 && **s == '0') || v > max)
		return -EINVAL;
	*s = p;
	*ret = v;
	return 0;
}

/* "a.b.c.d/len": four decimal octets, a prefix 0..32, nothing else. Host
 * bits are not checked here. */
static int cidr_parse(const char *s, uint32_t *ret_addr, unsigned *ret_prefix)
{
	uint32_t addr = 0;
	unsigned v, prefix;

	for (int i = 0; i < 4; i++) {
		if (parse_decimal(&s, OCTET_DIGITS, OCTET_MAX, &v) < 0)
			return -EINVAL;
		addr = addr << 8 | v;
		if (*s++ != (i < 3 ? '.' : '/'))
			return -EINVAL;
	}
	if (parse_decimal(&s, PREFIX_DIGITS, IPV4_BITS, &prefix) < 0 || *s)
		return -EINVAL;
	*ret_addr = addr;
	*ret_prefix = prefix;
	return 0;
}

static uint32_t prefix_mask(unsigned prefix)
{
	return prefix == 0 ? 0 : UINT32_MAX << (IPV4_BITS - prefix);
}

/* As cidr_parse, and the host bits must be zero. */
static int cidr_parse_strict(const char *s, uint32_t *ret_addr, unsigned *ret_prefix)
{
	uint32_t addr;
	unsigned prefix;

	if (cidr_parse(s, &addr, &prefix) < 0 || (addr & ~prefix_mask(prefix)))
		return -EINVAL;
	*ret_addr = addr;
	*ret_prefix = prefix;
	return 0;
}

/* ---- blocks ---------------------------------------------------------------- */

static void addr_format(uint32_t a, char *out, size_t size)
{
	snprintf(out, size, "%u.%u.%u.%u", a >> 24, a >> 16 & OCTET_MAX, a >> 8 & OCTET_MAX,
		 a & OCTET_MAX);
}

static void cidr_format(uint32_t a, unsigned prefix, char *out, size_t size)
{
	char addr[sizeof("255.255.255.255")];

	addr_format(a, addr, sizeof(addr));
	snprintf(out, size, "%s/%u", addr, prefix);
}

/* The block at network address a, prefix <= SUBNET_BLOCK_MAX_PREFIX. */
static void block_fill(uint32_t a, unsigned prefix, struct subnet_block *out)
{
	uint32_t half = (uint32_t)1 << (IPV4_BITS - prefix - 1);

	cidr_format(a, prefix, out->subnet, sizeof(out->subnet));
	addr_format(a + 1, out->gateway, sizeof(out->gateway));
	addr_format(a + 2, out->proxy, sizeof(out->proxy));
	cidr_format(a + half, prefix + 1, out->ip_range, sizeof(out->ip_range));
}

int subnet_block_from_cidr(const char *cidr, unsigned block_prefix, struct subnet_block *ret)
{
	uint32_t a;
	unsigned prefix;

	if (block_prefix > SUBNET_BLOCK_MAX_PREFIX || cidr_parse_strict(cidr, &a, &prefix) < 0 ||
	    prefix != block_prefix)
		return -EINVAL;
	block_fill(a, prefix, ret);
	return 0;
}

/* ---- the bitmap ------------------------------------------------------------ */

static bool bit_is_set(const struct subnet_pool *p, size_t i)
{
	return p->bits[i / WORD_BITS] >> (i % WORD_BITS) & 1;
}

/* Sets bit i; true when it was clear. */
static bool bit_set(struct subnet_pool *p, size_t i)
{
	if (bit_is_set(p, i))
		return false;
	p->bits[i / WORD_BITS] |= (uint64_t)1 << (i % WORD_BITS);
	p->used++;
	return true;
}

static void bit_clear(struct subnet_pool *p, size_t i)
{
	if (!bit_is_set(p, i))
		return;
	p->bits[i / WORD_BITS] &= ~((uint64_t)1 << (i % WORD_BITS));
	p->used--;
}

/* The index of the block holding address a of the pool. 64-bit: a /0 pool
 * of one /0 block shifts by 32. */
static size_t block_index(const struct subnet_pool *p, uint32_t a)
{
	return (size_t)(((uint64_t)a - p->base) >> (IPV4_BITS - p->block_prefix));
}

static uint32_t block_addr(const struct subnet_pool *p, size_t i)
{
	return (uint32_t)(p->base + ((uint64_t)i << (IPV4_BITS - p->block_prefix)));
}

/* ---- the pool -------------------------------------------------------------- */

static char *pool_check(const char *cidr, unsigned block_prefix, uint32_t *ret_base,
			unsigned *ret_prefix)
{
	if (cidr_parse_strict(cidr, ret_base, ret_prefix) < 0)
		return xasprintf("subnet pool '%s' is not an IPv4 CIDR a.b.c.d/len with its host "
				 "bits zero", cidr);
	if (block_prefix < *ret_prefix || block_prefix > SUBNET_BLOCK_MAX_PREFIX)
		return xasprintf("subnet block size /%u must lie between the pool's /%u and /%u",
				 block_prefix, *ret_prefix, SUBNET_BLOCK_MAX_PREFIX);
	if ((uint64_t)1 << (block_prefix - *ret_prefix) > SUBNET_POOL_MAX_BLOCKS)
		return xasprintf("subnet pool %s in /%u blocks would hold more than %u blocks",
				 cidr, block_prefix, SUBNET_POOL_MAX_BLOCKS);
	return NULL;
}

struct subnet_pool *subnet_pool_new(const char *cidr, unsigned block_prefix, char **reterr)
{
	struct subnet_pool *p;
	uint32_t base = 0;
	unsigned prefix = 0;
	char *err = pool_check(cidr, block_prefix, &base, &prefix);

	if (err) {
		*reterr = err;
		return NULL;
	}
	p = xmalloc(sizeof(*p));
	*p = (struct subnet_pool){ .base = base, .prefix = prefix, .block_prefix = block_prefix,
				   .n = (size_t)1 << (block_prefix - prefix) };
	p->bits = xcalloc((p->n + WORD_BITS - 1) / WORD_BITS, sizeof(*p->bits));
	return p;
}

struct subnet_pool *subnet_pool_free(struct subnet_pool *pool)
{
	if (!pool)
		return NULL;
	free(pool->bits);
	free(pool);
	return NULL;
}

size_t subnet_pool_size(const struct subnet_pool *pool)
{
	return pool->n;
}

size_t subnet_pool_used(const struct subnet_pool *pool)
{
	return pool->used;
}

int subnet_pool_mark(struct subnet_pool *pool, const char *cidr)
{
	uint32_t a, first, last, pool_last;
	unsigned prefix;
	int marked = 0;

	if (strchr(cidr, ':'))
		return 0;
	if (cidr_parse(cidr, &a, &prefix) < 0)
		return -EINVAL;
	first = a & prefix_mask(prefix);
	last = first | ~prefix_mask(prefix);
	pool_last = pool->base | ~prefix_mask(pool->prefix);
	if (last < pool->base || first > pool_last)
		return 0;
	first = first < pool->base ? pool->base : first;
	last = last > pool_last ? pool_last : last;
	for (size_t i = block_index(pool, first), end = block_index(pool, last); i <= end; i++)
		marked += bit_set(pool, i);
	return marked;
}

int subnet_pool_take(struct subnet_pool *pool, struct subnet_block *ret)
{
	if (pool->used == pool->n)
		return -ENOSPC;
	for (size_t k = 0; k < pool->n; k++) {
		size_t i = (pool->cursor + k) % pool->n;

		if (bit_is_set(pool, i))
			continue;
		bit_set(pool, i);
		pool->cursor = (i + 1) % pool->n;
		block_fill(block_addr(pool, i), pool->block_prefix, ret);
		return 0;
	}
	return -ENOSPC;
}

void subnet_pool_release_cidr(struct subnet_pool *pool, const char *cidr)
{
	uint32_t a;
	unsigned prefix;

	if (cidr_parse_strict(cidr, &a, &prefix) < 0 || prefix != pool->block_prefix)
		return;
	if ((a & prefix_mask(pool->prefix)) != pool->base)
		return;
	bit_clear(pool, block_index(pool, a));
}

void subnet_pool_release(struct subnet_pool *pool, const struct subnet_block *b)
{
	subnet_pool_release_cidr(pool, b->subnet);
}
