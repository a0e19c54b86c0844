/* egress_pool.c — the subnet pool, recovered from the engine's networks
 * (egress_pool.h). */
#include <errno.h>
#include <stdlib.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "egress_pool.h"
#include "log.h"
#include "xmalloc.h"

struct egress_pool {
	struct domain *d;
	struct subnet_pool *subnets;
	bool synced;                 /* networks listed since start */
	bool listing;
	struct engine_req *req;
	egress_pool_held_fn *held;
	egress_pool_listed_fn *listed;
	void *arg;
};

static void pool_mark_listing(struct egress_pool *pool, const json_t *list)
{
	size_t i, k;
	json_t *net, *cfg;

	json_array_foreach(list, i, net)
		json_array_foreach(json_object_get(json_object_get(net, "IPAM"), "Config"), k, cfg) {
			const char *subnet = json_string_value(json_object_get(cfg, "Subnet"));

			if (subnet)
				subnet_pool_mark(pool->subnets, subnet);
		}
}

/* The pool anew from a listing (blocks of removed networks come back), plus
 * the blocks the owner's ops hold but the listing may not show yet. */
static void pool_rebuild(struct egress_pool *pool, const json_t *list)
{
	_cleanup_free_ char *err = NULL;
	struct subnet_pool *subnets = subnet_pool_new(pool->d->config->egress_subnet_pool,
						      (unsigned)pool->d->config->egress_block_prefix, &err);

	if (!subnets) {
		log_warnx("egress: cannot make the subnet pool: %s", err);
		pool_mark_listing(pool, list);
		return;
	}
	subnet_pool_free(pool->subnets);
	pool->subnets = subnets;
	pool_mark_listing(pool, list);
	pool->held(pool, pool->arg);
}

static void networks_listed_cb(const struct docker_reply *r, void *arg)
{
	struct egress_pool *pool = arg;

	pool->req = NULL;
	pool->listing = false;
	if (r->error == 0 && r->status == 200 && json_is_array(r->body)) {
		pool_rebuild(pool, r->body);
		pool->synced = true;
		log_debug("egress", "subnet pool: %zu of %zu blocks in use", subnet_pool_used(pool->subnets),
			  subnet_pool_size(pool->subnets));
	}
	pool->listed(r, pool->arg);
}

int egress_pool_list(struct egress_pool *pool)
{
	int r;

	if (pool->listing)
		return 0;
	r = docker_networks_list(pool->d->engine, NULL, networks_listed_cb, pool, &pool->req);
	if (r < 0) {
		pool->req = NULL;
		return r;
	}
	pool->listing = true;
	return 0;
}

bool egress_pool_synced(const struct egress_pool *pool)
{
	return pool->synced;
}

void egress_pool_unsync(struct egress_pool *pool)
{
	pool->synced = false;
}

int egress_pool_take(struct egress_pool *pool, struct subnet_block *ret)
{
	return subnet_pool_take(pool->subnets, ret);
}

void egress_pool_mark(struct egress_pool *pool, const char *cidr)
{
	subnet_pool_mark(pool->subnets, cidr);
}

void egress_pool_release(struct egress_pool *pool, const struct subnet_block *b)
{
	subnet_pool_release(pool->subnets, b);
}

struct egress_pool *egress_pool_new(struct domain *d, egress_pool_held_fn *held, egress_pool_listed_fn *listed,
				    void *arg)
{
	struct egress_pool *pool = xcalloc(1, sizeof(*pool));
	_cleanup_free_ char *err = NULL;

	pool->d = d;
	pool->held = held;
	pool->listed = listed;
	pool->arg = arg;
	pool->subnets = subnet_pool_new(d->config->egress_subnet_pool, (unsigned)d->config->egress_block_prefix,
					&err);
	if (!pool->subnets)
		fatalx("egress.subnet_pool: %s", err);
	return pool;
}

struct egress_pool *egress_pool_free(struct egress_pool *pool)
{
	if (!pool)
		return NULL;
	if (pool->req)
		engine_req_cancel(pool->req);
	subnet_pool_free(pool->subnets);
	free(pool);
	return NULL;
}
