/* subnet.h — the pool of per-sandbox IPv4 subnets for egress networks
 * (behaviour-docker §2.9, §4.4). A configured CIDR (SUBNET_POOL_DEFAULT) is
 * cut into equal blocks (SUBNET_BLOCK_DEFAULT_PREFIX); each allowlisted
 * sandbox's NAME-net takes one, so the engine's own default pools are never
 * consulted and two sandboxes never share a subnet.
 *
 * Pure: no I/O, no logging. At start the daemon marks every subnet the engine
 * already lists (whoever owns it) with subnet_pool_mark(), then takes and
 * releases blocks as it creates and removes networks.
 *
 * Ownership: subnet_pool_new → subnet_pool_free. *reterr is malloc'd and
 * written only on failure. struct subnet_block is a plain value. */
#ifndef MSB_SUBNET_H
#define MSB_SUBNET_H

#include <stdbool.h>
#include <stddef.h>

#define SUBNET_POOL_DEFAULT          "10.213.0.0/16"
#define SUBNET_BLOCK_DEFAULT_PREFIX  28
/* The smallest block: network, gateway, proxy and a dynamic range of four. */
#define SUBNET_BLOCK_MAX_PREFIX      29
/* At most this many blocks in a pool (a /8 of /28s); the bitmap is 128 KiB. */
#define SUBNET_POOL_MAX_BLOCKS       (1u << 20)

/* One block, as the strings POST /networks/create's IPAM config takes. */
struct subnet_block {
	char subnet[19];        /* "a.b.c.d/len", the block */
	char gateway[16];       /* the first host address (.1); IPAM's Gateway */
	char proxy[16];         /* the second (.2): the proxy's fixed address */
	char ip_range[19];      /* the upper half of the block as a CIDR (IPRange):
				 * dynamic addresses come from there, never .2 */
};

struct subnet_pool;

/* A pool over cidr (strict: a dotted quad, "/0".."/32", host bits zero) in
 * blocks of block_prefix (from the pool's own prefix to SUBNET_BLOCK_MAX_PREFIX,
 * at most SUBNET_POOL_MAX_BLOCKS blocks). NULL and *reterr (malloc'd)
 * otherwise. All blocks start free. */
struct subnet_pool *subnet_pool_new(const char *cidr, unsigned block_prefix, char **reterr);
/* NULL-safe; returns NULL. */
struct subnet_pool *subnet_pool_free(struct subnet_pool *pool);
static inline void subnet_pool_freep(struct subnet_pool **pool)
{
	subnet_pool_free(*pool);
}

/* Blocks in the pool, and blocks in use. */
size_t subnet_pool_size(const struct subnet_pool *pool);
size_t subnet_pool_used(const struct subnet_pool *pool);

/* Marks every block that overlaps cidr as in use: a network anyone made on a
 * subnet inside (or around) the pool blocks what it covers. cidr is a dotted
 * quad and "/0".."/32"; host bits are allowed and ignored (the engine's
 * word for what a network covers). Returns the number of blocks newly
 * marked (0 when cidr lies outside the pool or is already marked), 0 for
 * any IPv6 CIDR (it contains ':'; ignored), -EINVAL for a malformed one. */
int subnet_pool_mark(struct subnet_pool *pool, const char *cidr);

/* Takes a free block into *ret. The search starts at a cursor just past the
 * block last taken and wraps, so a block just released is not handed out
 * again until every other free one has been. 0, or -ENOSPC when every block
 * is in use (*ret untouched). */
int subnet_pool_take(struct subnet_pool *pool, struct subnet_block *ret);

/* Frees a block taken or marked before. A subnet that is not exactly one of
 * the pool's blocks (strict CIDR, block-aligned, the block prefix) is
 * ignored, as is a block already free. */
void subnet_pool_release(struct subnet_pool *pool, const struct subnet_block *b);
void subnet_pool_release_cidr(struct subnet_pool *pool, const char *cidr);

/* Fills *ret for an existing block (a network's IPAM subnet), whether or not
 * it lies in a pool. 0, or -EINVAL when cidr is not strict (as
 * subnet_pool_new), its prefix is not block_prefix, or block_prefix is over
 * SUBNET_BLOCK_MAX_PREFIX (*ret untouched). */
int subnet_block_from_cidr(const char *cidr, unsigned block_prefix, struct subnet_block *ret);

#endif
