/* server.h — the listener and client connections (STYLE G11–G13, G16).
 *
 * A connection reads bytes into a frame buffer (limit enforced as bytes
 * arrive), dispatches each complete frame, and writes replies in order of
 * completion. Reading on a connection stops while it has max_inflight calls
 * in flight or a large reply queued, and on all connections while the
 * daemon-wide buffer budget is spent. Each request is charged its reply
 * bound (rpc_reply_bound) plus its own bytes before it is dispatched; one
 * that would pass the connection's or the daemon's reply budget is parked
 * (the connection is neither read nor served meanwhile) until written
 * replies free enough, parked connections in arrival order; a call that
 * fits is not held behind them (server.c, "the reply budgets", says when
 * it may go first). Parked requests are counted apart from the reading
 * gate (stats.parked_bytes, under their own limits.buffer_budget_bytes),
 * and a connection with nothing charged is always read. A charge is
 * released as the reply's bytes leave the output buffer. Protocol violations (an oversize
 * frame, a frame that does not arrive whole in time) get an error reply with
 * id null and close the connection; anything else gets a reply and the
 * connection stays. Ownership: server_new → server_free; connections are
 * owned by the server and freed at the loop boundary.
 *
 * Fairness between uids (SO_PEERCRED; administrators exempt from the caps):
 * a uid has at most limits.max_connections_per_uid connections and
 * limits.max_inflight_per_uid calls in flight over them (past it its
 * connections are not read, no error); non-administrators are refused at
 * limits.max_connections less limits.admin_reserved_connections. At a
 * connection limit, a connection idle for limits.idle_evict_ms is closed
 * to make room (the caller's own longest-idle at the uid limit, any
 * non-administrator's at the daemon's) before the new one is refused. A
 * connection idle for limits.idle_timeout_ms (no call, no output, no
 * partial frame, no subscription) is closed. A uid holding its share of the
 * buffer budget (limits.uid_buffer_bytes) is read only on its oldest
 * partial frame, and its frames' deadlines run from their first byte. */
#ifndef MSB_SERVER_H
#define MSB_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rpc.h"
#include "settings.h"

struct event_base;
struct jsonrpc_request;

/* Stop taking new frames from a connection while this much of its output is queued. */
#define MSB_CONN_OUTPUT_PAUSE_BYTES (1024 * 1024)
/* The most of a connection's output written in one loop turn (libevent's
 * default, 16 KiB, took a 1 MiB read's reply 86 turns). */
#define MSB_CONN_MAX_SINGLE_WRITE (256 * 1024)
/* A call whose charge (reply bound + request bytes) is at most this is
 * always admitted on a connection with nothing charged: daemon.status
 * answers however the budget is spent (beyond it by at most
 * max_connections × this). */
#define SERVER_REPLY_IDLE_BYTES (128 * 1024)
/* Once this many charged bytes were freed, hand idle memory back to the
 * system (malloc_trim) after SERVER_TRIM_DELAY_MS, when no call is in
 * flight (never forced), at most every SERVER_TRIM_MIN_INTERVAL_MS, and
 * only when the allocator holds SERVER_TRIM_MIN_FREE_BYTES free. */
#define SERVER_TRIM_AFTER_BYTES (1024 * 1024)
#define SERVER_TRIM_DELAY_MS    200
#define SERVER_TRIM_MIN_INTERVAL_MS 10000
#define SERVER_TRIM_MIN_FREE_BYTES  (8 * 1024 * 1024)
/* After EMFILE/ENFILE on accept, wait this long before accepting again. */
#define MSB_ACCEPT_RETRY_MS 1000

struct server_stats {
	uint64_t connections_accepted;
	uint64_t connections_rejected;  /* over limits.max_connections */
	unsigned connections_current;
	uint64_t requests_total;        /* frames that parsed as requests or failed to */
	uint64_t requests_errors;       /* replies that were errors */
	unsigned requests_in_flight;
	size_t buffered_bytes;          /* held from clients, counted against the budget */
	uint64_t connections_idle_closed; /* closed after limits.idle_timeout_ms idle */
	uint64_t connections_evicted;   /* closed while idle to admit another at a limit */
	uint64_t connections_refused_uid; /* over limits.max_connections_per_uid */
	/* The reply budgets (limits.reply_budget_bytes): */
	size_t reply_reserved_bytes;    /* charged to calls admitted: reply bounds not yet queued, requests */
	size_t reply_queued_bytes;      /* written to connections' output buffers, not yet sent */
	size_t parked_bytes;            /* parked requests' frames (their own pool) */
	unsigned parked_calls;          /* requests parsed and waiting for budget, one per connection at most */
	uint64_t parked_total;          /* requests that ever waited for budget */
	uint64_t replies_over_bound;    /* replies larger than their bound (counted at their real size) */
	uint64_t malloc_trims;          /* times idle memory was handed back (malloc_trim) */
};

typedef void server_drained_fn(void *arg);

/* What the server serves, and how it asks its owner (the daemon, or a
 * test): given to server_new, copied. */
struct server_env {
	struct event_base *base;
	/* The configuration, read at each use through this (the owner replaces
	 * it whole on SIGHUP, then calls server_config_changed). */
	struct msbd_config *const *config;
	const struct rpc_method *methods;   /* the method table dispatched (rpc_dispatch) */
	size_t n_methods;
	void *ctx;                          /* the methods' (rpc_call_ctx) and the functions' below */
	/* root, or a member of sandbox.admin_group: asked once per connection
	 * (may block: the user database). */
	bool (*lookup_admin)(void *ctx, uid_t uid, gid_t gid);
	/* What a call is charged against the reply budgets (replybound.h). */
	size_t (*reply_bound)(void *ctx, const struct jsonrpc_request *req);
};

struct server *server_new(const struct server_env *env);
/* Takes the socket-activated fd if there is one, else binds config's
 * socket.path (stale file removed, live one refused), then listens. */
int server_listen(struct server *srv, char **reterr_message);
/* Stops accepting (new clients get ShuttingDown) and reading; requests
 * held back unread are answered ShuttingDown; calls drained (from the loop)
 * once no call is in flight and every reply is written. */
void server_drain(struct server *srv, server_drained_fn *drained, void *arg);
/* The configuration was replaced (SIGHUP): open connections take the new
 * frame limit and write timeout; budget and reading are re-evaluated. */
void server_config_changed(struct server *srv);
/* Closes every connection (pending calls are detached), the listener, and
 * unlinks the socket file it bound. NULL-safe; returns NULL. */
struct server *server_free(struct server *srv);

/* ---- event subscriptions (events.subscribe) ----
 * A subscription belongs to the connection of the call that made it and ends
 * with it. An event goes to every subscriber of its type that may see it:
 * the sandbox's owner or an admin, and only within the subscriber's scope
 * if it named one. A subscriber whose unread output passes
 * events.max_backlog_bytes is disconnected (it is told nothing more: the
 * events it missed are in the daemon's log). */
enum server_event_type {
	SERVER_EVENT_EGRESS_DECISION = 1u << 0,
};
/* Events kept for a replay: the last this many published, whoever saw them. */
#define SERVER_EVENTS_KEPT 4096
/* types: a mask of server_event_type; scope: raw scope or NULL (all).
 * Replaces an earlier subscription of the connection. replay: first queue
 * every kept event it may see, oldest first (so they precede the reply).
 * -ENOTCONN if the call's client has gone, -ENOBUFS if the replay alone
 * passed events.max_backlog_bytes (the connection is closed). */
int server_subscribe(struct server *srv, struct rpc_call *call, uint32_t types, const char *scope, bool replay);
/* Sends {"jsonrpc","method":method,"params":params} (params borrowed) to
 * every subscriber that may see it. Returns how many got it. */
size_t server_publish(struct server *srv, uint32_t type, uid_t owner, const char *scope, const char *method,
		      const json_t *params);

const struct server_stats *server_get_stats(const struct server *srv);
/* Fairness for daemon.status (new reference): {uids, idle_closed, evicted,
 * refused_uid, by_uid: the max_uids uids with most connections, each
 * {uid, connections, in_flight, buffered_bytes, over_share}}. */
json_t *server_fair_status(const struct server *srv, size_t max_uids);
/* The path served (bound or activated), or NULL if unknown. */
const char *server_get_path(const struct server *srv);
bool server_is_activated(const struct server *srv);

#endif
