/* domain.h — the environment the daemon gives the domain's operations: the
 * loop, the engine, the tables of what is in flight, the configuration, and
 * the ways out (events go to subscribers through a callback the daemon
 * wires to its server). Nothing in domain/ reaches above this: the daemon
 * (daemon/) owns the struct and fills it at start; the domain reads it and
 * never frees what it points to. */
#ifndef MSB_DOMAIN_H
#define MSB_DOMAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <event2/event.h>
#include <jansson.h>

#include "settings.h"

struct engine;
struct registry;
struct docker_events;
struct acquire_table;
struct freeze_table;
struct fileop_table;
struct egress;

/* What a domain event is about, for the subscribers' filters
 * (PROTOCOL.md "Events"). */
enum domain_event {
	DOMAIN_EVENT_EGRESS_DECISION,
};

/* Hands an event to the subscribers allowed to see it: owner's and the
 * administrators', of scope. method and params are the notification's
 * (params borrowed). Returns how many subscribers it reached. */
typedef size_t domain_publish_fn(void *arg, enum domain_event type, uid_t owner, const char *scope,
				 const char *method, const json_t *params);

/* root, or a member of sandbox.admin_group (may block: the user database). */
typedef bool domain_is_admin_fn(void *arg, uid_t uid, gid_t gid);

struct domain {
	struct event_base *base;
	struct msbd_config *config;         /* current; the daemon replaces it whole on SIGHUP */
	struct engine *engine;
	struct registry *registry;          /* our workloads, as the engine has them */
	struct docker_events *events;       /* the engine's events (registry_sync.h) */
	bool registry_synced;               /* a listing has been read since the last resync */
	struct acquire_table *acquires;     /* acquires in flight */
	struct freeze_table *freezes;       /* the pause lock of each container */
	struct fileop_table *fileops;       /* file operations in flight */
	struct egress *egress;              /* allowlist: proxy image, networks, proxies, decisions */
	/* The file plane new sandboxes get (files.plane, decided at start):
	 * local, or archive and why. fileop.h decides per sandbox. */
	bool plane_local;
	const char *plane_reason;          /* static; NULL when local */
	/* A timed-out exec's processes are found and killed from the host
	 * (execkill.h): the engine is on a local unix socket, the daemon is
	 * root and has pidfds. Else by the mark only. */
	bool exec_host_kill;
	/* The ways out, wired by the daemon (NULL: nobody listens). */
	domain_publish_fn *publish;
	domain_is_admin_fn *is_admin;
	void *out_arg;
};

#endif
