/* egress_pool.h — the subnet pool of the allowlisted networks, recovered
 * from the engine: every network it lists marks its subnets used (whoever
 * owns it), so a block is taken only where nothing is. subnet.h has the
 * arithmetic; this is its engine side: the listing, once after start and
 * again when the pool looks full (stale marks: blocks of networks removed
 * since come back). */
#ifndef MSB_EGRESS_POOL_H
#define MSB_EGRESS_POOL_H

#include <stdbool.h>

#include "subnet.h"

struct domain;
struct docker_reply;
struct egress_pool;

/* After a listing rebuilt the pool: mark the blocks the owner's ops hold
 * (a listing may not show them yet). */
typedef void egress_pool_held_fn(struct egress_pool *pool, void *arg);
/* A listing ended: r says how (ok: error 0, status 200; -ECANCELED: the
 * daemon stops). Borrowed for the call. */
typedef void egress_pool_listed_fn(const struct docker_reply *r, void *arg);

/* Exits (fatalx) if egress.subnet_pool or egress.block_prefix is unusable
 * (the configuration has checked them). */
struct egress_pool *egress_pool_new(struct domain *d, egress_pool_held_fn *held, egress_pool_listed_fn *listed,
				    void *arg);
/* Cancels the listing (its callback fires, -ECANCELED). NULL-safe; returns NULL. */
struct egress_pool *egress_pool_free(struct egress_pool *pool);

/* Lists the engine's networks unless a listing is under way. 0 (the
 * listed callback fires from the loop) or -errno (it never fires). */
int egress_pool_list(struct egress_pool *pool);
/* Listed since start (or since egress_pool_unsync). */
bool egress_pool_synced(const struct egress_pool *pool);
/* The marks may be stale: the next use lists again. */
void egress_pool_unsync(struct egress_pool *pool);

/* subnet_pool_take, _mark, _release on the pool. */
int egress_pool_take(struct egress_pool *pool, struct subnet_block *ret);
void egress_pool_mark(struct egress_pool *pool, const char *cidr);
void egress_pool_release(struct egress_pool *pool, const struct subnet_block *b);

#endif
