/* daemon.h — the daemon's one context object. The only globals are this
 * (owned by main) and what it points to. */
#ifndef MSB_DAEMON_H
#define MSB_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <event2/event.h>

#include "config.h"
#include "rpc.h"

struct engine;
struct server;
struct registry;
struct docker_events;
struct acquire_table;

struct msbd {
	struct event_base *base;
	struct msbd_config *config;        /* current; replaced whole on SIGHUP */
	const struct msbd_cmdline *cmdline;
	struct engine *engine;
	struct server *server;
	struct registry *registry;          /* our workloads, as the engine has them */
	struct docker_events *events;       /* keeps the registry current */
	struct acquire_table *acquires;     /* acquires in flight */
	bool registry_synced;               /* a listing has been read since the last resync */
	struct timespec started;           /* CLOCK_MONOTONIC */
};

/* What the Docker backend declares (behaviour-docker §1). */
uint32_t msbd_capabilities(void);
uint32_t msbd_egress_modes(void);
uint32_t msbd_scopes(void);
/* posix iff the engine reported Os linux at its last probe, else none. */
uint32_t msbd_os_families(const struct msbd *d);

/* root, or a member of sandbox.admin_group. */
bool msbd_peer_is_admin(const struct msbd *d, const struct rpc_peer *peer);

/* The method table served on the socket. */
extern const struct rpc_method msbd_methods[];
extern const size_t msbd_n_methods;

#endif
