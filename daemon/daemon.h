/* daemon.h — the daemon's one context object. The only globals are this
 * (owned by main) and what it points to. */
#ifndef MSB_DAEMON_H
#define MSB_DAEMON_H

#include <stdint.h>
#include <time.h>
#include <event2/event.h>

#include "config.h"
#include "rpc.h"

struct engine;
struct server;

struct msbd {
	struct event_base *base;
	struct msbd_config *config;        /* current; replaced whole on SIGHUP */
	const struct msbd_cmdline *cmdline;
	struct engine *engine;
	struct server *server;
	struct timespec started;           /* CLOCK_MONOTONIC */
};

/* The method table served on the socket. */
extern const struct rpc_method msbd_methods[];
extern const size_t msbd_n_methods;

#endif
