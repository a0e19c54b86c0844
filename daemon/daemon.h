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
struct freeze_table;
struct fileop_table;
struct egress;

struct msbd {
	struct event_base *base;
	struct msbd_config *config;        /* current; replaced whole on SIGHUP */
	const struct msbd_cmdline *cmdline;
	struct engine *engine;
	struct server *server;
	struct registry *registry;          /* our workloads, as the engine has them */
	struct docker_events *events;       /* keeps the registry current */
	struct acquire_table *acquires;     /* acquires in flight */
	struct freeze_table *freezes;       /* the pause lock of each container */
	struct fileop_table *fileops;       /* file operations in flight */
	struct egress *egress;              /* allowlist: proxy image, networks, proxies, decisions */
	bool registry_synced;               /* a listing has been read since the last resync */
	bool journal_replayed;              /* files.journal_dir was replayed (once, at the first listing) */
	size_t orphan_thaws;                /* thaws of a dead daemon's freezes in flight (the replay waits) */
	uint64_t resync_gen;                /* the resync a listing reply belongs to */
	struct event *resync_timer;         /* retries a failed listing */
	long resync_backoff_ms;
	struct timespec started;           /* CLOCK_MONOTONIC */
	/* The file plane new sandboxes get (files.plane, decided at start):
	 * local, or archive and why. fileop.h decides per sandbox. */
	bool plane_local;
	const char *plane_reason;          /* static; NULL when local */
	/* A timed-out exec's processes are found and killed from the host
	 * (execkill.h): the engine is on a local unix socket, the daemon is
	 * root and has pidfds. Else by the mark only (m_exec.c). */
	bool exec_host_kill;
};

/* A failed registry listing is retried after a backoff between these. */
#define MSBD_RESYNC_RETRY_MIN_MS 250
#define MSBD_RESYNC_RETRY_MAX_MS 10000

/* What the Docker backend declares (behaviour-docker §1). */
uint32_t msbd_capabilities(const struct msbd *d);
uint32_t msbd_egress_modes(const struct msbd *d);
uint32_t msbd_scopes(void);
/* posix iff the engine reported Os linux at its last probe, else none. */
uint32_t msbd_os_families(const struct msbd *d);

/* root, or a member of sandbox.admin_group: looked up in the user database
 * (which may block), so the server does it once per connection... */
bool msbd_lookup_admin(const struct msbd *d, uid_t uid, gid_t gid);
/* ...and this reads the answer it kept. */
bool msbd_peer_is_admin(const struct msbd *d, const struct rpc_peer *peer);

/* The method table served on the socket. */
extern const struct rpc_method msbd_methods[];
extern const size_t msbd_n_methods;
/* The reply bound the server charges req (rpc_reply_bound over the table),
 * but for the methods whose reply depends on the daemon's state:
 * sandbox.list's is its listing as the registry stands
 * (m_sandbox_list_reply_bound). */
struct jsonrpc_request;
size_t msbd_reply_bound(struct msbd *d, const struct jsonrpc_request *req);

#endif
