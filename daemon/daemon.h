/* daemon.h — the daemon's one context object. The only globals are this
 * (owned by main) and what it points to. */
#ifndef MSB_DAEMON_H
#define MSB_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <event2/event.h>

#include "config.h"
#include "domain.h"
#include "rpc.h"

struct server;
struct registry_sync;

struct msbd {
	struct domain dom;                  /* what the domain's operations get */
	const struct msbd_cmdline *cmdline;
	struct server *server;
	struct registry_sync *sync;         /* keeps dom.registry current (registry_sync.h) */
	struct timespec started;           /* CLOCK_MONOTONIC */
};

/* root, or a member of sandbox.admin_group: looked up in the user database
 * (which may block), so the server does it once per connection... */
bool msbd_lookup_admin(const struct msbd *d, uid_t uid, gid_t gid);

/* Wires the domain's ways out (domain.h) to d's server (events) and to
 * msbd_lookup_admin. The server must be set (or NULL: events go nowhere). */
void msbd_wire_domain(struct msbd *d);

/* The method table served on the socket. */
extern const struct rpc_method msbd_methods[];
extern const size_t msbd_n_methods;
/* The reply bound the server charges req (rpc_reply_bound over the table),
 * but for the methods whose reply depends on the daemon's state:
 * sandbox.list's is its listing as the registry stands
 * (m_sandbox_list_reply_bound). */
struct jsonrpc_request;
size_t msbd_reply_bound(struct msbd *d, const struct jsonrpc_request *req);

/* What d's server serves (server_new): the table above, d as its context,
 * msbd_lookup_admin and msbd_reply_bound. */
struct server_env;
void msbd_server_env(struct msbd *d, struct server_env *ret_env);

#endif
