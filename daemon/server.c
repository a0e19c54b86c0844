#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "cleanup.h"
#include "config.h"
#include "frame.h"
#include "jsonrpc.h"
#include "log.h"
#include "owner.h"
#include "replybound.h"
#include "sd.h"
#include "server.h"
#include "xmalloc.h"

/* What one admitted call is charged (the reply budgets). */
struct conn_charge {
	struct rpc_call *call;
	size_t reply_left;          /* of its reply bound, not yet queued */
	size_t request;             /* its request's bytes, held until it finishes */
	size_t overtook;            /* of its charge, counted in rb_overtaking */
};

struct conn {
	struct server *srv;
	uint64_t id;
	struct bufferevent *bev;
	struct frame_buf in;
	size_t accounted;           /* bytes of `in` counted in srv->stats.buffered_bytes */
	struct rpc_peer peer;
	struct rpc_call **calls;    /* pending calls, to detach on close */
	size_t n_calls;
	unsigned inflight;          /* calls dispatched and not finished */
	struct event *frame_ev;     /* deadline for the frame under way */
	struct event *closed_ev;    /* while reading is paused: the peer closed (EV_CLOSED) */
	struct event *resume_ev;    /* takes held-back frames at the loop boundary */
	struct event *free_ev;      /* frees the connection at the loop boundary */
	bool eof;                   /* the client closed its side */
	bool peer_closed;           /* seen closed while paused: read it to EOF */
	uint64_t partial_seq;       /* when its current partial frame began (0: none) */
	bool closing;               /* flush the output, then close */
	bool dead;                  /* torn down; freed by free_ev */
	uint32_t sub_types;         /* events subscribed to (server_event_type), 0: none */
	char *sub_scope;            /* only this scope's, or NULL */
	struct uid_share *share;    /* its uid's share (a reference until freed) */
	struct event *idle_ev;      /* closes it after limits.idle_timeout_ms idle */
	struct timespec idle_since; /* when it last became idle (0: not idle) */
	struct timespec frame_first; /* when its current partial frame began */
	TAILQ_ENTRY(conn) entry;
	/* The reply budgets (issue 17): what is charged to this connection. */
	size_t rb_reserved;         /* Σ reply_left + request of its charges */
	size_t rb_queued;           /* its output buffer's length, as seen by rb_out_cb */
	struct conn_charge *rb_charges;  /* calls admitted and pending */
	size_t rb_n_charges;
	struct conn_charge rb_cur;  /* the call being dispatched (may finish inside) */
	bool rb_dispatching;
	bool rb_cur_done;
	size_t rb_last_sent;        /* bytes the last conn_send queued */
	struct evbuffer_cb_entry *rb_out_cb;
	bool rb_is_parked;          /* a request waits for budget */
	size_t rb_admit_overtook;   /* set by conn_rb_admit: of its charge, overtaking */
	bool rb_peer_gone;          /* closed both ways: what would park is dropped */
	char *rb_parked_frame;      /* its frame's bytes (the parse is freed; parsed again to run) */
	size_t rb_parked_charge;
	size_t rb_parked_len;       /* its frame's bytes, counted in parked_bytes */
	size_t rb_parked_accounted; /* of them, counted in srv->stats.parked_bytes */
	TAILQ_ENTRY(conn) rb_park_entry;
};

/* One uid's share of the daemon (fairness): its connections, its calls in
 * flight and the bytes buffered from it. Kept while a connection of it
 * exists, freed or dead. */
struct uid_share {
	uid_t uid;
	unsigned refs;              /* connections pointing here, dead ones included */
	unsigned conns;             /* live connections */
	unsigned inflight;          /* calls in flight over all its connections */
	size_t buffered;            /* bytes held from it, counted against its share */
	bool over;                  /* holds limits.uid_buffer_bytes or more */
	struct conn *reader;        /* while over: its one connection still read */
	size_t orphan_rb;           /* reply-budget charges its orphans still hold */
	LIST_ENTRY(uid_share) entry;
};

/* A call still running after its connection closed: counted against its
 * uid's limits.max_inflight_per_uid, and its charge against the reply
 * budgets (the daemon's and its uid's), until it finishes: the work it
 * does holds that memory whether or not anyone reads its reply. */
struct server_orphan {
	struct server *srv;
	struct uid_share *share;    /* a reference */
	struct rpc_call *call;
	size_t charge;              /* of the reply budgets, held until it ends */
	LIST_ENTRY(server_orphan) entry;
};

/* One published event, kept for subscribers that ask for a replay. */
struct server_event {
	uint32_t type;
	uid_t owner;
	char *scope;
	char *method;
	json_t *params;
};

struct server {
	struct server_env env;      /* what it serves, and its owner's answers */
	struct server_event *ring;  /* the last SERVER_EVENTS_KEPT events */
	size_t ring_head, ring_len;
	uint64_t events_dropped;    /* fell out of the ring */
	struct evconnlistener *listener;
	struct event *accept_retry_ev;
	struct event *drained_ev;
	char *path;
	bool activated;
	bool bound;                 /* we created the socket file */
	dev_t bound_dev;
	ino_t bound_ino;
	bool budget_spent;
	struct conn *budget_reader; /* while spent: the one connection still read */
	uint64_t next_partial_seq;
	bool draining;
	server_drained_fn *drained;
	void *drained_arg;
	uint64_t next_conn_id;
	struct server_stats stats;
	TAILQ_HEAD(, conn) conns;
	LIST_HEAD(, uid_share) shares;
	LIST_HEAD(, server_orphan) orphans;  /* calls of closed connections, running */
	/* The reply budgets: connections with a parked request, oldest first. */
	TAILQ_HEAD(, conn) rb_parked_q;
	struct event *rb_unpark_ev;
	struct event *rb_trim_ev;
	size_t rb_freed;            /* charged bytes freed since the last trim */
	size_t rb_overtaking;       /* charges of small calls admitted before a parked one */
	bool rb_pool_spent;         /* parked_bytes at limits.buffer_budget_bytes */
	int64_t rb_last_trim_ms;    /* CLOCK_MONOTONIC (0: never) */
	int64_t rb_over_warned_ms;  /* when a reply over its bound was last said */
};

/* The configuration as it is now (the daemon replaces it whole on SIGHUP). */
static const struct msbd_config *server_cfg(const struct server *srv)
{
	return *srv->env.config;
}

static void conn_process(struct conn *c);
struct server_event;
static void server_event_release(struct server_event *ev);
static void conn_close(struct conn *c, const char *reason);
static void conn_free_events(struct conn *c);
static void conn_rb_release_call(struct conn *c, struct rpc_call *call);
static void conn_rb_send_notification(struct conn *c, struct rpc_call *call, json_t *notification);
static void conn_rb_close(struct conn *c);
static void conn_rb_peer_gone(struct conn *c);
static void conn_rb_refuse_parked(struct conn *c);
static bool conn_rb_admit(struct conn *c, struct jsonrpc_request *req, const char *line, size_t len,
			  size_t *ret_charge);
static void conn_dispatch(struct conn *c, struct jsonrpc_request *req, size_t charge, size_t len,
			  size_t overtook);
static bool conn_rb_may_take(const struct conn *c);
static bool conn_rb_small_idle(const struct conn *c, size_t pending_below);
static void server_rb_pool_update(struct server *srv);

/* ---- fairness between uids -------------------------------------------- */

static void conn_update_read(struct conn *c);
static bool conn_may_take(const struct conn *c);

static int64_t fair_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t fair_ms_of(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000 + ts->tv_nsec / 1000000;
}

static void fair_timeval(int64_t ms, struct timeval *ret)
{
	if (ms < 0)
		ms = 0;
	ret->tv_sec = (time_t)(ms / 1000);
	ret->tv_usec = (suseconds_t)((ms % 1000) * 1000);
}

/* The uid's share, made on its first connection; the caller holds a reference. */
static struct uid_share *server_share_get(struct server *srv, uid_t uid)
{
	struct uid_share *s;

	LIST_FOREACH(s, &srv->shares, entry)
		if (s->uid == uid)
			break;
	if (!s) {
		s = xcalloc(1, sizeof(*s));
		s->uid = uid;
		LIST_INSERT_HEAD(&srv->shares, s, entry);
	}
	s->refs++;
	return s;
}

static void server_share_put(struct uid_share *s)
{
	if (!s)
		return;
	assert(s->refs > 0);
	if (--s->refs > 0)
		return;
	LIST_REMOVE(s, entry);
	free(s);
}

static unsigned server_share_conns(struct server *srv, uid_t uid)
{
	struct uid_share *s;

	LIST_FOREACH(s, &srv->shares, entry)
		if (s->uid == uid)
			return s->conns;
	return 0;
}

/* Under limits.max_inflight_per_uid (admins: always): may take a frame. */
static bool conn_fair_may_take(const struct conn *c)
{
	return c->peer.admin || !c->share ||
	       c->share->inflight < (unsigned)server_cfg(c->srv)->max_inflight_per_uid;
}

/* Within its uid's buffer share, or the one connection of the uid still
 * read: may read more bytes. */
static bool conn_fair_may_read(const struct conn *c)
{
	return !c->share || !c->share->over || c->share->reader == c;
}

/* The uid's connection whose partial frame is oldest, among those that
 * may take frames. */
static struct conn *server_share_oldest(const struct server *srv, const struct uid_share *s)
{
	struct conn *c, *best = NULL;

	TAILQ_FOREACH(c, &srv->conns, entry)
		if (c->share == s && !c->dead && c->partial_seq && conn_may_take(c) &&
		    (!best || c->partial_seq < best->partial_seq))
			best = c;
	return best;
}

/* Re-evaluates whether the uid holds its share of the buffer budget. While
 * it does only its oldest partial frame is read, so it holds at most its
 * share plus one frame, and the rest of the budget stays for other uids.
 * Returns whether anything changed. */
static bool server_share_update(struct server *srv, struct uid_share *s)
{
	size_t limit = config_uid_buffer_bytes(server_cfg(srv));
	bool over = s->buffered >= limit;
	struct conn *reader = over ? server_share_oldest(srv, s) : NULL, *c;

	if (over == s->over && reader == s->reader)
		return false;
	if (over && !s->over)
		log_info("uid %u holds %zu buffered bytes (limits.uid_buffer_bytes %zu): reading only "
			 "its oldest partial frame", (unsigned)s->uid, s->buffered, limit);
	s->over = over;
	s->reader = reader;
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (c->share == s && !c->dead)
			conn_update_read(c);
	return true;
}

static void server_update_budget(struct server *srv);

/* Moves the connection's buffered bytes from was to now in its uid's share. */
static void conn_fair_account(struct conn *c, size_t was, size_t now)
{
	if (!c->share)
		return;
	c->share->buffered = c->share->buffered - was + now;
	if (c->share->reader == c && c->dead)
		c->share->reader = NULL;
	/* The daemon-wide reader is chosen among those the shares let read. */
	if (server_share_update(c->srv, c->share))
		server_update_budget(c->srv);
}

/* Sets the frame deadline at limits.frame_timeout_ms after the partial
 * frame's first byte. Returns false when there is no partial frame. */
static bool conn_frame_deadline_from_first(struct conn *c)
{
	int64_t left;
	struct timeval tv;

	if (c->partial_seq == 0)
		return false;
	left = server_cfg(c->srv)->frame_timeout_ms - (fair_now_ms() - fair_ms_of(&c->frame_first));
	fair_timeval(left, &tv);
	evtimer_add(c->frame_ev, &tv);
	return true;
}

/* A frame of a uid over its share is the cause of its wait: its deadline
 * runs from its first byte whatever holds it back, never renewed. Returns
 * true when it set the deadline so. */
static bool conn_fair_frame_deadline(struct conn *c)
{
	if (!c->share || !c->share->over)
		return false;
	return conn_frame_deadline_from_first(c);
}

static void conn_fair_call_start(struct conn *c)
{
	if (c->share)
		c->share->inflight++;
}

/* Takes n calls off the uid's count; when the uid was at
 * limits.max_inflight_per_uid, its connections (but except) take held
 * frames. */
static void server_share_calls_end(struct server *srv, struct uid_share *s, unsigned n,
				   const struct conn *except)
{
	unsigned cap = (unsigned)server_cfg(srv)->max_inflight_per_uid;
	struct conn *o;

	if (!s || n == 0)
		return;
	assert(s->inflight >= n);
	s->inflight -= n;
	if (s->inflight + n < cap || s->inflight >= cap)
		return;
	TAILQ_FOREACH(o, &srv->conns, entry)
		if (o->share == s && o != except && !o->dead)
			event_active(o->resume_ev, EV_TIMEOUT, 0);
	/* A parked call the queue passed over at the cap: run it again (an
	 * orphan's end frees no charge, so nothing else would). */
	if (!TAILQ_EMPTY(&srv->rb_parked_q))
		event_active(srv->rb_unpark_ev, EV_TIMEOUT, 0);
}

/* Takes the calls of the connection off its uid's count. */
static void conn_fair_calls_end(struct conn *c, unsigned n)
{
	server_share_calls_end(c->srv, c->share, n, c);
}

/* An orphan's charge is no longer held. */
static void server_orphan_release(struct server_orphan *o)
{
	assert(o->srv->stats.reply_reserved_bytes >= o->charge && o->share->orphan_rb >= o->charge);
	o->srv->stats.reply_reserved_bytes -= o->charge;
	o->share->orphan_rb -= o->charge;
	o->charge = 0;
}

static void server_rb_freed(struct server *srv, size_t n);
static struct conn_charge *conn_rb_find(struct conn *c, struct rpc_call *call);

static void server_orphan_done(void *arg)
{
	struct server_orphan *o = arg;
	size_t freed = o->charge;

	server_orphan_release(o);
	server_rb_freed(o->srv, freed);
	server_share_calls_end(o->srv, o->share, 1, NULL);
	server_share_put(o->share);
	LIST_REMOVE(o, entry);
	free(o);
}

/* The call of a closing connection (counted in the uid's in_flight) runs
 * on detached: it stays counted until it finishes. */
static void conn_fair_orphan(struct conn *c, struct rpc_call *call)
{
	struct server_orphan *o;

	if (!c->share) {
		rpc_call_detach(call);
		return;
	}
	o = xcalloc(1, sizeof(*o));
	o->srv = c->srv;
	o->share = c->share;
	o->share->refs++;
	o->call = call;
	/* Its charge stays held (conn_rb_close, run after this, releases the
	 * connection's own). */
	{
		const struct conn_charge *ch = conn_rb_find(c, call);

		o->charge = ch ? ch->reply_left + ch->request : 0;
		c->srv->stats.reply_reserved_bytes += o->charge;
		o->share->orphan_rb += o->charge;
	}
	LIST_INSERT_HEAD(&c->srv->orphans, o, entry);
	rpc_call_orphan(call, server_orphan_done, o);
}

/* The daemon stops: calls still running are no longer counted. */
static void server_orphans_free(struct server *srv)
{
	struct server_orphan *o;

	while ((o = LIST_FIRST(&srv->orphans))) {
		rpc_call_orphan(o->call, NULL, NULL);
		server_orphan_release(o);
		server_share_put(o->share);
		LIST_REMOVE(o, entry);
		free(o);
	}
}

static bool conn_may_read(const struct conn *c);

/* Bytes the client sent that the kernel still holds for the daemon. */
static bool conn_has_unread(const struct conn *c)
{
	int n = 0;

	return ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n > 0;
}

/* Nothing under way: no call (in flight or parked for the reply budget),
 * no output, no partial frame, no subscription; and nothing the client
 * sent waits unread: the daemon reads it (a paused connection may hold a
 * whole request in its socket) and its socket holds no byte. */
static bool conn_is_idle(const struct conn *c)
{
	return !c->dead && !c->closing && !c->eof && c->inflight == 0 && c->n_calls == 0 && !c->rb_is_parked &&
	       c->sub_types == 0 && frame_buf_pending(&c->in) == 0 &&
	       evbuffer_get_length(bufferevent_get_input(c->bev)) == 0 &&
	       evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
	       conn_may_read(c) && !conn_has_unread(c);
}

/* The idle timer runs while the connection is idle, from when it became so. */
static void conn_update_idle(struct conn *c)
{
	long ms = server_cfg(c->srv)->idle_timeout_ms;
	struct timeval tv;

	if (c->dead || !c->idle_ev)
		return;
	if (!conn_is_idle(c)) {
		evtimer_del(c->idle_ev);
		c->idle_since = (struct timespec){ 0 };
		return;
	}
	if (c->idle_since.tv_sec == 0 && c->idle_since.tv_nsec == 0)
		clock_gettime(CLOCK_MONOTONIC, &c->idle_since);
	if (ms == 0) {
		evtimer_del(c->idle_ev);
		return;
	}
	if (evtimer_pending(c->idle_ev, NULL))
		return;
	fair_timeval(ms - (fair_now_ms() - fair_ms_of(&c->idle_since)), &tv);
	evtimer_add(c->idle_ev, &tv);
}

/* How long the connection has been idle, in ms; -1 when it is not. */
static int64_t conn_idle_ms(const struct conn *c)
{
	if (c->dead || (c->idle_since.tv_sec == 0 && c->idle_since.tv_nsec == 0) || !conn_is_idle(c))
		return -1;
	return fair_now_ms() - fair_ms_of(&c->idle_since);
}

static void conn_close(struct conn *c, const char *reason);

static void conn_idle_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd, (void)what;
	if (!conn_is_idle(c)) {
		conn_update_idle(c);
		return;
	}
	log_info("connection %llu (uid %u pid %d): idle for %ld ms (limits.idle_timeout_ms), closing",
		 (unsigned long long)c->id, (unsigned)c->peer.uid, (int)c->peer.pid,
		 server_cfg(c->srv)->idle_timeout_ms);
	c->srv->stats.connections_idle_closed++;
	conn_close(c, "idle timeout");
}

/* The connection is being torn down: off its uid's counts (its buffered
 * bytes leave the share through conn_account). */
static void conn_fair_closing(struct conn *c)
{
	if (c->idle_ev)
		evtimer_del(c->idle_ev);
	if (!c->share)
		return;
	assert(c->share->conns > 0);
	c->share->conns--;
	if (c->share->reader == c)
		c->share->reader = NULL;
	/* Its pending calls run on as orphans, still counted (conn_fair_orphan). */
	assert(c->inflight >= c->n_calls);
	conn_fair_calls_end(c, c->inflight - (unsigned)c->n_calls);
}

/* The longest-idle connection, idle at least limits.idle_evict_ms, of uid
 * (or of any non-admin when !of_uid); NULL if none. */
static struct conn *server_evictable(const struct server *srv, bool of_uid, uid_t uid)
{
	long min = server_cfg(srv)->idle_evict_ms;
	int64_t best_ms = -1;
	struct conn *c, *best = NULL;

	if (min == 0)
		return NULL;
	TAILQ_FOREACH(c, &srv->conns, entry) {
		int64_t idle = conn_idle_ms(c);

		if (idle < min || (of_uid ? c->peer.uid != uid : c->peer.admin))
			continue;
		if (idle > best_ms)
			best = c, best_ms = idle;
	}
	return best;
}

/* How many connections server_evictable could offer, one after another. */
static unsigned server_count_evictable(const struct server *srv, bool of_uid, uid_t uid)
{
	long min = server_cfg(srv)->idle_evict_ms;
	const struct conn *c;
	unsigned n = 0;

	if (min == 0)
		return 0;
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (conn_idle_ms(c) >= min && !(of_uid ? c->peer.uid != uid : c->peer.admin))
			n++;
	return n;
}

static void server_evict(struct server *srv, struct conn *victim, const char *why)
{
	log_info("connection %llu (uid %u pid %d): idle %lld ms, closed to make room (%s)",
		 (unsigned long long)victim->id, (unsigned)victim->peer.uid, (int)victim->peer.pid,
		 (long long)conn_idle_ms(victim), why);
	srv->stats.connections_evicted++;
	conn_close(victim, "evicted while idle");
}

/* Refuses a new connection over a connection limit: TooManyConnections
 * with {limit, scope}, the message naming the key. */
static void server_fair_reject(struct server *srv, int fd, const struct rpc_peer *peer,
			       const char *scope, const char *key, long limit)
{
	_cleanup_free_ char *msg = xasprintf("too many connections%s (%s: %ld): close idle "
					     "connections or raise the limit",
					     strcmp(scope, "uid") == 0 ? " of this uid" : "", key, limit);
	json_t *data = json_pack("{s:I, s:s}", "limit", (json_int_t)limit, "scope", scope);
	json_t *reply = jsonrpc_reply_error(NULL, msb_error_object(MSB_ERR_TOO_MANY_CONNECTIONS, msg, data));
	_cleanup_free_ char *buf = NULL;
	size_t len;

	log_warnx("connection from uid %u pid %d refused: %s = %ld reached", (unsigned)peer->uid,
		  (int)peer->pid, key, limit);
	srv->stats.connections_rejected++;
	if (strcmp(scope, "uid") == 0)
		srv->stats.connections_refused_uid++;
	buf = frame_encode(reply, &len);
	json_decref(reply);
	if (buf && send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("conn", "cannot tell a refused client why: %s", strerror(errno));
	close(fd);
}

/* Admits a new connection of peer under the per-uid and daemon-wide
 * limits, evicting an idle connection to make room where one qualifies.
 * Returns 0, or -EUSERS after refusing (fd closed). */
static int server_fair_admit(struct server *srv, int fd, const struct rpc_peer *peer)
{
	const struct msbd_config *cfg = server_cfg(srv);
	long per_uid = cfg->max_connections_per_uid;
	/* At most max_connections - 1 reserved: one connection stays open to everyone. */
	long reserve = cfg->admin_reserved_connections < cfg->max_connections ?
		cfg->admin_reserved_connections : cfg->max_connections - 1;
	long total = peer->admin ? cfg->max_connections : cfg->max_connections - reserve;
	unsigned uid_conns = peer->admin ? 0 : server_share_conns(srv, peer->uid);
	unsigned cur = srv->stats.connections_current;
	/* Evictions needed under each limit (after a SIGHUP lowered one, more
	 * than one); an eviction for the uid also frees a daemon-wide place. */
	unsigned need_uid = !peer->admin && uid_conns >= (unsigned)per_uid ? uid_conns - (unsigned)per_uid + 1 : 0;
	unsigned need_all = cur >= (unsigned)total ? cur - (unsigned)total + 1 : 0;
	struct conn *victim;

	/* Decided before any eviction, so none is made for a refusal. */
	if (need_uid > server_count_evictable(srv, true, peer->uid)) {
		server_fair_reject(srv, fd, peer, "uid", "limits.max_connections_per_uid", per_uid);
		return -EUSERS;
	}
	if ((need_all > need_uid ? need_all : need_uid) > server_count_evictable(srv, false, 0)) {
		server_fair_reject(srv, fd, peer, "daemon", peer->admin || reserve == 0 ?
				   "limits.max_connections" :
				   "limits.max_connections less limits.admin_reserved_connections",
				   total);
		return -EUSERS;
	}
	while (!peer->admin && server_share_conns(srv, peer->uid) >= (unsigned)per_uid &&
	       (victim = server_evictable(srv, true, peer->uid)))
		server_evict(srv, victim, "limits.max_connections_per_uid");
	while (srv->stats.connections_current >= (unsigned)total && (victim = server_evictable(srv, false, 0)))
		server_evict(srv, victim, "limits.max_connections");
	return 0;
}

/* Sets up the connection's fairness state once it is accepted. */
static int conn_fair_init(struct conn *c)
{
	c->share = server_share_get(c->srv, c->peer.uid);
	c->share->conns++;
	c->idle_ev = evtimer_new(c->srv->env.base, conn_idle_timeout_cb, c);
	return c->idle_ev ? 0 : -ENOMEM;
}

/* After a SIGHUP: idle timers and uid shares follow the new limits. */
static void server_fair_config_changed(struct server *srv)
{
	struct uid_share *s;
	struct conn *c;

	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead && c->idle_ev) {
			evtimer_del(c->idle_ev);
			conn_update_idle(c);
		}
	LIST_FOREACH(s, &srv->shares, entry)
		server_share_update(srv, s);
	server_update_budget(srv);
	/* Frames held back under the old limits (a raised
	 * limits.max_inflight_per_uid) are taken at the loop boundary. */
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead)
			event_active(c->resume_ev, EV_TIMEOUT, 0);
}

static size_t conn_rb_total(const struct conn *c);

/* What the uid's connections are charged of the reply budget. */
static size_t server_share_rb_total(const struct server *srv, const struct uid_share *s)
{
	const struct conn *c;
	size_t n = s ? s->orphan_rb : 0;

	TAILQ_FOREACH(c, &srv->conns, entry)
		if (c->share == s && !c->dead)
			n += conn_rb_total(c);
	return n;
}

/* Order of daemon.status's by_uid: most connections, then most bytes, then uid. */
static bool fair_share_before(const struct uid_share *a, const struct uid_share *b)
{
	if (a->conns != b->conns)
		return a->conns > b->conns;
	if (a->buffered != b->buffered)
		return a->buffered > b->buffered;
	return a->uid < b->uid;
}

json_t *server_fair_status(const struct server *srv, size_t max_uids)
{
	json_t *by_uid = json_array();
	const struct uid_share *s, *best;
	const struct uid_share *prev = NULL;
	size_t n_uids = 0;

	/* A uid shows while it has connections or calls running (orphans). */
	LIST_FOREACH(s, &srv->shares, entry)
		if (s->conns > 0 || s->inflight > 0)
			n_uids++;
	/* The top max_uids by connections, then buffered bytes (selection: n is small). */
	for (size_t i = 0; i < max_uids; i++) {
		best = NULL;
		LIST_FOREACH(s, &srv->shares, entry) {
			if ((s->conns == 0 && s->inflight == 0) || (prev && !fair_share_before(prev, s)))
				continue;
			if (!best || fair_share_before(s, best))
				best = s;
		}
		if (!best)
			break;
		json_array_append_new(by_uid, json_pack("{s:I, s:I, s:I, s:I, s:b, s:I}",
			"uid", (json_int_t)best->uid, "connections", (json_int_t)best->conns,
			"in_flight", (json_int_t)best->inflight, "buffered_bytes", (json_int_t)best->buffered,
			"over_share", best->over, "reply_bytes", (json_int_t)server_share_rb_total(srv, best)));
		prev = best;
	}
	return json_pack("{s:I, s:I, s:I, s:I, s:o}",
		"uids", (json_int_t)n_uids,
		"idle_closed", (json_int_t)srv->stats.connections_idle_closed,
		"evicted", (json_int_t)srv->stats.connections_evicted,
		"refused_uid", (json_int_t)srv->stats.connections_refused_uid,
		"by_uid", by_uid);
}

/* ---- sending ---------------------------------------------------------- */

static void conn_frame_free_cb(const void *data, size_t len, void *arg)
{
	(void)len, (void)arg;
	free((void *)data);
}

/* Queues one reply frame (by reference: the encoded frame is freed as it
 * leaves the output buffer, never copied). reply stolen. */
static void conn_send(struct conn *c, json_t *reply)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;

	c->rb_last_sent = 0;
	if (c->dead) {
		json_decref(reply);
		return;
	}
	if (json_object_get(reply, "error"))
		c->srv->stats.requests_errors++;
	buf = frame_encode(reply, &len);
	json_decref(reply);
	if (!buf || evbuffer_add_reference(bufferevent_get_output(c->bev), buf, len, conn_frame_free_cb, NULL) < 0) {
		conn_close(c, "cannot queue a reply");
		return;
	}
	buf = NULL;     /* the output buffer's now */
	c->rb_last_sent = len;
}

/* Replies with an error that ends the connection, then closes after flushing. */
static void conn_fail_protocol(struct conn *c, int code, json_t *data)
{
	conn_send(c, jsonrpc_reply_error(NULL, msb_error_object(code, NULL, data)));
	if (c->dead)
		return;
	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	evtimer_del(c->frame_ev);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c, msb_error_name(code));
}

static void conn_account(struct conn *c);

/* A frame that broke a limit: drop what is held of it, say why, close. */
static void conn_abandon_frame(struct conn *c, int code, json_t *data)
{
	frame_buf_release(&c->in);
	conn_account(c);
	conn_fail_protocol(c, code, data);
}

/* ---- accounting and interest (G16 step 4) ----------------------------- */

static void server_check_drained(struct server *srv)
{
	struct conn *c;

	if (!srv->draining || !srv->drained || srv->stats.requests_in_flight > 0)
		return;
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
			return;
	event_active(srv->drained_ev, EV_TIMEOUT, 0);
}

/* Would the connection dispatch frames it holds, but for its uid's
 * limits.max_inflight_per_uid? */
static bool conn_may_take_but_uid_cap(const struct conn *c)
{
	const struct msbd_config *cfg = server_cfg(c->srv);

	return !c->dead && !c->closing && !c->srv->draining && !c->rb_is_parked && conn_rb_may_take(c) &&
	       c->inflight < (unsigned)cfg->max_inflight &&
	       evbuffer_get_length(bufferevent_get_output(c->bev)) < MSB_CONN_OUTPUT_PAUSE_BYTES;
}

/* May the connection dispatch frames it already holds? */
static bool conn_may_take(const struct conn *c)
{
	return conn_may_take_but_uid_cap(c) && conn_fair_may_take(c);
}

/* May it read more bytes from its socket? While the budget is spent only
 * one connection is read, the one whose partial frame is oldest: budget >=
 * max_frame_bytes lets it finish, so concurrent large frames cannot starve
 * each other; memory stays under budget + one frame. */
static bool conn_may_read(const struct conn *c)
{
	if (c->dead || c->closing || c->eof)
		return false;
	/* A peer that closed can send no more than its socket buffer holds:
	 * read it to EOF whatever the budget, so its bytes are freed. */
	if (c->peer_closed)
		return true;
	/* A connection holding nothing gets one read whatever the daemon's
	 * buffer budget, so a fresh daemon.status is answered; past its uid's
	 * own share only an administrator's does (a uid over its share waits
	 * for itself). */
	{
		bool idle1 = conn_rb_small_idle(c, 1);

		return conn_may_take(c) && (conn_fair_may_read(c) || (c->peer.admin && idle1)) &&
		       (!c->srv->budget_spent || c->srv->budget_reader == c || idle1);
	}
}

static void conn_update_frame_timer(struct conn *c, unsigned taken);

/* Reading on or off as conn_may_read says; the frame deadline and the
 * idle timer follow (pausing stops the idle timer, resuming re-arms it). */
static void conn_update_read(struct conn *c)
{
	if (c->dead)
		return;
	conn_update_frame_timer(c, 0);
	conn_update_idle(c);
	if (conn_may_read(c)) {
		bufferevent_enable(c->bev, EV_READ);
		if (c->closed_ev)
			event_del(c->closed_ev);
		return;
	}
	bufferevent_disable(c->bev, EV_READ);
	/* Paused, a connection still learns that its peer left. */
	if (c->closed_ev && !c->eof && !c->closing && !c->peer_closed)
		event_add(c->closed_ev, NULL);
}

static struct conn *server_oldest_partial(const struct server *srv)
{
	struct conn *c, *best = NULL;

	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead && c->partial_seq && conn_may_take(c) && conn_fair_may_read(c) &&
		    (!best || c->partial_seq < best->partial_seq))
			best = c;
	return best;
}

static void server_update_budget(struct server *srv)
{
	size_t budget = server_cfg(srv)->buffer_budget_bytes;
	bool spent = srv->stats.buffered_bytes >= budget;
	struct conn *old_reader = srv->budget_reader, *c;

	srv->budget_reader = spent ? server_oldest_partial(srv) : NULL;
	if (spent == srv->budget_spent) {
		if (old_reader != srv->budget_reader) {
			if (old_reader)
				conn_update_read(old_reader);
			if (srv->budget_reader)
				conn_update_read(srv->budget_reader);
		}
		return;
	}
	srv->budget_spent = spent;
	if (spent)
		log_warnx("buffer budget of %zu bytes spent; reading only the oldest partial frame",
			  budget);
	else
		log_info("buffer budget available again; reading resumed");
	TAILQ_FOREACH(c, &srv->conns, entry)
		conn_update_read(c);
}

static void conn_account(struct conn *c)
{
	size_t now = c->dead ? 0 : frame_buf_pending(&c->in), was = c->accounted + c->rb_parked_accounted;
	size_t parked = c->dead ? 0 : c->rb_parked_len;

	c->srv->stats.buffered_bytes = c->srv->stats.buffered_bytes - c->accounted + now;
	c->accounted = now;
	/* A parked request is held apart from the reading gate (its own pool). */
	c->srv->stats.parked_bytes = c->srv->stats.parked_bytes - c->rb_parked_accounted + parked;
	c->rb_parked_accounted = parked;
	server_update_budget(c->srv);
	server_rb_pool_update(c->srv);
	conn_fair_account(c, was, now + parked);
}

/* The frame deadline runs only while the daemon waits on the client: part
 * of a frame is held and the daemon reads the connection. While it holds
 * back for its own reasons (calls in flight, replies queued, draining, or
 * the buffer budget spent and another connection's frame read first) there
 * is no deadline: under a burst of large frames the client that sent its
 * whole frame is not the one to blame. When reading resumes, and when a
 * frame restarts (frames were taken in this pass), it gets a fresh one.
 * A wait the uid causes itself is no such reason: held only by its own
 * limits.max_inflight_per_uid, or over its buffer share, the frame's
 * deadline runs from its first byte, never renewed. */
static void conn_update_frame_timer(struct conn *c, unsigned taken)
{
	struct timeval tv;
	long ms = server_cfg(c->srv)->frame_timeout_ms;
	bool live = !c->dead && !c->closing && !c->eof && frame_buf_in_frame(&c->in);

	if (live && conn_may_take_but_uid_cap(c) && !conn_fair_may_take(c) &&
	    conn_frame_deadline_from_first(c))
		return;
	if (live && conn_may_take(c) && conn_fair_frame_deadline(c))
		return;
	if (c->dead || c->closing || c->eof || !frame_buf_in_frame(&c->in) || !conn_may_take(c) ||
	    !conn_may_read(c)) {
		evtimer_del(c->frame_ev);
		return;
	}
	if (taken == 0 && evtimer_pending(c->frame_ev, NULL))
		return;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(c->frame_ev, &tv);
}

/* Numbers a partial frame when it begins, so the budget can favour the oldest. */
static void conn_update_partial(struct conn *c, unsigned taken)
{
	if (c->dead || !frame_buf_in_frame(&c->in))
		c->partial_seq = 0;
	else if (taken > 0 || c->partial_seq == 0) {
		c->partial_seq = ++c->srv->next_partial_seq;
		clock_gettime(CLOCK_MONOTONIC, &c->frame_first);
	}
}

/* ---- calls ------------------------------------------------------------ */

static void conn_forget_call(struct conn *c, struct rpc_call *call)
{
	for (size_t i = 0; i < c->n_calls; i++)
		if (c->calls[i] == call) {
			c->calls[i] = c->calls[--c->n_calls];
			return;
		}
}

static void conn_call_done(struct rpc_call *call, json_t *reply, void *arg)
{
	struct conn *c = arg;
	struct server *srv = c->srv;

	conn_forget_call(c, call);
	if (c->dead) {
		/* Closed inside its own dispatch (an events replay past
		 * events.max_backlog_bytes): conn_close counted it out and
		 * released its charge; nobody is left to answer. */
		json_decref(reply);
		return;
	}
	assert(c->inflight > 0 && srv->stats.requests_in_flight > 0);
	c->inflight--;
	srv->stats.requests_in_flight--;
	conn_fair_calls_end(c, 1);
	c->rb_last_sent = 0;
	if (reply)
		conn_send(c, reply);
	conn_rb_release_call(c, call);
	/* Frames held back by the in-flight limit are taken at the loop
	 * boundary, never from inside a dispatch. */
	if (!c->dead)
		event_active(c->resume_ev, EV_TIMEOUT, 0);
	server_check_drained(srv);
}

static void conn_call_notify(struct rpc_call *call, json_t *notification, void *arg)
{
	conn_rb_send_notification(arg, call, notification);
}

/* call.cancel and exec.stdin name a call of the same connection by its id. */
static struct rpc_call *conn_call_find(const struct rpc_call *call, const json_t *id, void *arg)
{
	struct conn *c = arg;

	for (size_t i = 0; i < c->n_calls; i++) {
		const json_t *cid = rpc_call_id(c->calls[i]);

		if (c->calls[i] != call && !json_is_null(cid) && json_equal(cid, id))
			return c->calls[i];
	}
	return NULL;
}

static const struct rpc_call_ops conn_call_ops = {
	.done = conn_call_done,
	.notify = conn_call_notify,
	.find = conn_call_find,
};

static void conn_handle_frame(struct conn *c, const char *line, size_t len)
{
	struct server *srv = c->srv;
	struct jsonrpc_request req;
	json_t *err_reply = NULL;
	size_t charge;

	srv->stats.requests_total++;
	if (jsonrpc_request_parse(line, len, &req, &err_reply) < 0) {
		log_debug("conn", "connection %llu: bad frame: %s", (unsigned long long)c->id,
			  json_string_value(json_object_get(json_object_get(err_reply, "error"), "message")));
		conn_send(c, err_reply);
		return;
	}
	/* Parked (its frame kept, req released) until the reply budgets admit it. */
	if (!conn_rb_admit(c, &req, line, len, &charge))
		return;
	conn_dispatch(c, &req, charge, len, c->rb_admit_overtook);
}

/* Runs an admitted request charged charge bytes (len of them its own);
 * req released. */
static void conn_dispatch(struct conn *c, struct jsonrpc_request *req, size_t charge, size_t len,
			  size_t overtook)
{
	struct server *srv = c->srv;
	struct rpc_call *call;

	c->rb_reserved += charge;
	srv->stats.reply_reserved_bytes += charge;
	srv->rb_overtaking += overtook;
	c->rb_cur = (struct conn_charge){ .reply_left = charge - len, .request = len, .overtook = overtook };
	c->rb_dispatching = true;
	c->rb_cur_done = false;
	c->inflight++;
	srv->stats.requests_in_flight++;
	conn_fair_call_start(c);
	call = rpc_dispatch(srv->env.methods, srv->env.n_methods, req, &c->peer, srv->env.ctx, &conn_call_ops, c);
	c->rb_dispatching = false;
	if (call && c->dead) {
		/* Closed while the call started: it may not call back into c.
		 * It runs on, counted against its uid again. */
		if (c->share)
			c->share->inflight++;
		conn_fair_orphan(c, call);
		call = NULL;
	}
	if (call) {
		c->calls = xrealloc(c->calls, (c->n_calls + 1) * sizeof(*c->calls));
		c->calls[c->n_calls++] = call;
		if (!c->rb_cur_done) {
			c->rb_cur.call = call;
			c->rb_charges = xrealloc(c->rb_charges, (c->rb_n_charges + 1) * sizeof(*c->rb_charges));
			c->rb_charges[c->rb_n_charges++] = c->rb_cur;
		}
	}
	jsonrpc_request_release(req);
}

/* ---- connection events ------------------------------------------------ */

static void conn_process(struct conn *c)
{
	unsigned taken = 0;

	while (conn_may_take(c)) {
		const char *line;
		size_t len;
		int r = frame_buf_next(&c->in, &line, &len);

		if (r == 0)
			break;
		if (r < 0) {
			conn_abandon_frame(c, MSB_ERR_FRAME_TOO_LARGE,
					   json_pack("{s:I}", "limit", (json_int_t)c->in.max));
			break;
		}
		taken++;
		conn_handle_frame(c, line, len);
	}
	conn_update_partial(c, taken);
	conn_account(c);
	conn_update_frame_timer(c, taken);
	conn_update_read(c);
	if (c->eof && !c->dead && c->inflight == 0 && !c->rb_is_parked &&
	    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c, "client closed the connection");
	conn_update_idle(c);
}

/* Appends bytes to the frame buffer; an oversize frame ends the connection.
 * Returns 0, or -EMSGSIZE after closing. */
static int conn_append(struct conn *c, const void *p, size_t n)
{
	if (frame_buf_append(&c->in, p, n) == 0)
		return 0;
	log_warnx("connection %llu (uid %u): frame over %zu bytes, closing",
		  (unsigned long long)c->id, (unsigned)c->peer.uid, c->in.max);
	conn_abandon_frame(c, MSB_ERR_FRAME_TOO_LARGE,
			   json_pack("{s:I}", "limit", (json_int_t)c->in.max));
	return -EMSGSIZE;
}

/* Moves what the bufferevent has read into the frame buffer. */
static int conn_take_input(struct conn *c)
{
	struct evbuffer *input = bufferevent_get_input(c->bev);
	struct evbuffer_iovec v;

	while (evbuffer_peek(input, -1, NULL, &v, 1) > 0 && v.iov_len > 0) {
		int r = conn_append(c, v.iov_base, v.iov_len);

		if (r < 0)
			return r;
		evbuffer_drain(input, v.iov_len);
	}
	return 0;
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *input = bufferevent_get_input(bev);

	if (c->dead || c->closing) {
		evbuffer_drain(input, evbuffer_get_length(input));
		return;
	}
	if (conn_take_input(c) < 0)
		return;
	conn_process(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (c->dead)
		return;
	if (c->closing) {
		conn_close(c, "closed after a protocol error");
		return;
	}
	conn_process(c);
	server_check_drained(c->srv);
}

/* The client is gone (closed both ways, or reset): the connection's
 * cancellable calls (sandbox.exec) are cancelled (rpc_call_cancel: each
 * hook only arranges it; the calls finish later, from the loop). A
 * connection the daemon closes for its own reasons (a protocol error, a
 * write timeout) keeps today's rule: its calls run on, orphaned. */
static void conn_cancel_calls(struct conn *c)
{
	struct rpc_call **cancel = xcalloc(c->n_calls + 1, sizeof(*cancel));
	size_t n = 0;

	for (size_t i = 0; i < c->n_calls; i++)
		if (rpc_call_is_cancellable(c->calls[i]))
			cancel[n++] = c->calls[i];
	if (n)
		log_debug("conn", "connection %llu: the client is gone; cancelling %zu call(s)",
			  (unsigned long long)c->id, n);
	for (size_t i = 0; i < n; i++)
		rpc_call_cancel(cancel[i], "the client leaving");
	free(cancel);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (c->dead)
		return;
	if (what & BEV_EVENT_ERROR) {
		/* The client reset it (or it broke): its cancellable calls are
		 * cancelled; the others run on, orphaned. */
		conn_cancel_calls(c);
		conn_close(c, "connection error");
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		log_warnx("connection %llu (uid %u): replies unread for %ld ms, closing",
			  (unsigned long long)c->id, (unsigned)c->peer.uid,
			  server_cfg(c->srv)->write_timeout_ms);
		conn_close(c, "write timeout");
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Answer what was sent whole before the EOF, then close; a
		 * trailing fragment will never be finished. */
		c->eof = true;
		if (frame_buf_in_frame(&c->in))
			log_debug("conn", "connection %llu: EOF inside a frame, ignoring its %zu bytes",
				  (unsigned long long)c->id, c->in.tail);
		frame_buf_drop_partial(&c->in);
		conn_rb_peer_gone(c);
		/* Gone both ways (not a half-close that still reads its
		 * answers): its cancellable calls (sandbox.exec) are cancelled,
		 * the others run on. */
		if (c->rb_peer_gone)
			conn_cancel_calls(c);
		conn_process(c);
	}
}

static void conn_frame_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd, (void)what;
	if (c->dead || c->closing)
		return;
	log_warnx("connection %llu (uid %u): a frame did not arrive whole within %ld ms, closing",
		  (unsigned long long)c->id, (unsigned)c->peer.uid, server_cfg(c->srv)->frame_timeout_ms);
	conn_abandon_frame(c, MSB_ERR_FRAME_TIMEOUT,
			   json_pack("{s:I}", "timeout_ms", (json_int_t)server_cfg(c->srv)->frame_timeout_ms));
}

static void conn_peer_closed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd, (void)what;
	if (c->dead)
		return;
	log_debug("conn", "connection %llu: peer closed while reading was paused",
		  (unsigned long long)c->id);
	c->peer_closed = true;
	conn_update_read(c);
}

static void conn_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	conn_process(arg);
}

static void conn_free_events(struct conn *c)
{
	struct event **evs[] = { &c->frame_ev, &c->closed_ev, &c->resume_ev, &c->free_ev, &c->idle_ev };

	for (size_t i = 0; i < ELEMENTSOF(evs); i++)
		if (*evs[i]) {
			event_free(*evs[i]);
			*evs[i] = NULL;
		}
}

static void conn_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd, (void)what;
	TAILQ_REMOVE(&c->srv->conns, c, entry);
	conn_free_events(c);
	server_share_put(c->share);
	free(c->calls);
	free(c->rb_charges);
	free(c->sub_scope);
	free(c);
}

/* The one teardown (G5.6): detaches pending calls, drops the socket, and
 * frees the struct at the loop boundary. */
static void conn_close(struct conn *c, const char *reason)
{
	struct server *srv = c->srv;

	if (c->dead)
		return;
	log_debug("conn", "connection %llu (uid %u pid %d) closed: %s", (unsigned long long)c->id,
		  (unsigned)c->peer.uid, (int)c->peer.pid, reason);
	conn_fair_closing(c);
	c->dead = true;
	if (srv->budget_reader == c)
		srv->budget_reader = NULL;
	c->partial_seq = 0;
	for (size_t i = 0; i < c->n_calls; i++)
		conn_fair_orphan(c, c->calls[i]);
	srv->stats.requests_in_flight -= c->inflight;
	c->inflight = 0;
	c->n_calls = 0;
	conn_rb_close(c);
	bufferevent_free(c->bev);
	c->bev = NULL;
	frame_buf_release(&c->in);
	conn_account(c);
	evtimer_del(c->frame_ev);
	if (c->closed_ev)
		event_del(c->closed_ev);
	event_del(c->resume_ev);
	srv->stats.connections_current--;
	event_active(c->free_ev, EV_TIMEOUT, 0);
	server_check_drained(srv);
}

/* ---- the reply budgets (issue 17) --------------------------------------
 * Each admitted call is charged its reply bound (rpc_reply_bound) plus its
 * request's bytes; the reply part moves to the output buffer as the reply
 * (and each notification) is queued, the request part is released when the
 * call finishes, and queued bytes are released as they are written
 * (rb_out_cb). The charged total, reserved + queued, is held under
 * limits.conn_reply_budget_bytes per connection and
 * limits.reply_budget_bytes for the daemon; a request that does not fit is
 * parked on its connection (one at most: nothing more is read or taken
 * from it) and dispatched, oldest first, when written bytes free enough.
 *
 * The parked calls do not block what fits: the head is the oldest parked
 * call whose own connection has room for it (one that waits for its own
 * client blocks nobody); a call that fits both budgets goes before it when
 * it leaves the head's charge free in the daemon's budget, or when it is
 * small (charge <= SERVER_REPLY_IDLE_BYTES) and the small calls gone
 * before parked ones hold at most SERVER_RB_OVERTAKE_BYTES: the head waits
 * only for the calls admitted before it and for that allowance, never
 * forever (the budgets are at least SERVER_RB_OVERTAKE_BYTES above any
 * charge the allowance applies to). Parked requests are counted in
 * stats.parked_bytes, apart from the reading gate of buffered_bytes: while
 * they hold limits.buffer_budget_bytes, connections with a call charged
 * take no frame (nor read), so the pool passes it by one frame at most;
 * a connection with nothing charged and nothing pending is read whatever
 * the buffer budget (one read: daemon.status always answers). */

/* A reply over its bound is logged at most this often (all are counted). */
#define SERVER_RB_WARN_MS 1000
/* Small calls admitted before a parked call, all connections together. */
#define SERVER_RB_OVERTAKE_BYTES (1024 * 1024)

static size_t conn_rb_total(const struct conn *c)
{
	return c->rb_reserved + c->rb_queued;
}

static size_t server_rb_total(const struct server *srv)
{
	return srv->stats.reply_reserved_bytes + srv->stats.reply_queued_bytes;
}

/* Charged bytes were released, n of them memory freed (written replies,
 * finished requests): parked calls may go, and a trim is due after a
 * large free. */
static void server_rb_freed(struct server *srv, size_t n)
{
	struct timeval tv = { SERVER_TRIM_DELAY_MS / 1000, (SERVER_TRIM_DELAY_MS % 1000) * 1000 };

	if (!TAILQ_EMPTY(&srv->rb_parked_q))
		event_active(srv->rb_unpark_ev, EV_TIMEOUT, 0);
	srv->rb_freed += n;
	if (srv->rb_freed >= SERVER_TRIM_AFTER_BYTES && !evtimer_pending(srv->rb_trim_ev, NULL))
		evtimer_add(srv->rb_trim_ev, &tv);
}

static void conn_rb_unreserve(struct conn *c, size_t n)
{
	assert(c->rb_reserved >= n && c->srv->stats.reply_reserved_bytes >= n);
	c->rb_reserved -= n;
	c->srv->stats.reply_reserved_bytes -= n;
}

/* The output buffer grew or was written: the queued count follows it. */
static void conn_rb_output_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *c = arg;
	struct server *srv = c->srv;

	(void)buf;
	if (info->n_added == 0 && info->n_deleted == 0)
		return;
	c->rb_queued += info->n_added;
	srv->stats.reply_queued_bytes += info->n_added;
	assert(c->rb_queued >= info->n_deleted && srv->stats.reply_queued_bytes >= info->n_deleted);
	c->rb_queued -= info->n_deleted;
	srv->stats.reply_queued_bytes -= info->n_deleted;
	if (info->n_deleted > 0)
		server_rb_freed(srv, info->n_deleted);
}

/* What the connections of c's uid are charged together. */
static size_t conn_rb_uid_total(const struct conn *c)
{
	return server_share_rb_total(c->srv, c->share);
}

/* Does a call charged charge bytes fit in the share of c's uid
 * (limits.uid_reply_budget_bytes)? Administrators are exempt, and a uid
 * with nothing charged always fits (the share admits the largest reply). */
static bool conn_rb_uid_fits(const struct conn *c, size_t charge)
{
	size_t share = config_uid_reply_budget_bytes(server_cfg(c->srv)), uid;

	if (c->peer.admin || !c->share)
		return true;
	uid = conn_rb_uid_total(c);
	return uid == 0 || (charge <= share && uid <= share - charge);
}

/* Nothing charged, nothing in flight or parked, under pending_below bytes
 * pending. Such a connection is read whatever the buffer budget while it
 * holds nothing (one read: a fresh daemon.status is always answered; a
 * frame that does not arrive in it waits like any other), and takes frames
 * whatever the parked pool while it holds under SERVER_REPLY_IDLE_BYTES
 * (small calls, or a park of that much). */
static bool conn_rb_small_idle(const struct conn *c, size_t pending_below)
{
	return !c->dead && conn_rb_total(c) == 0 && !c->rb_is_parked && c->inflight == 0 && c->n_calls == 0 &&
	       frame_buf_pending(&c->in) < pending_below;
}

/* While parked requests hold limits.buffer_budget_bytes, only small idle
 * connections take frames (any other might park one more). */
static bool conn_rb_may_take(const struct conn *c)
{
	return !c->srv->rb_pool_spent || conn_rb_small_idle(c, SERVER_REPLY_IDLE_BYTES);
}

/* The parked pool was spent or is free again: reading follows. */
static void server_rb_pool_update(struct server *srv)
{
	bool spent = srv->stats.parked_bytes >= server_cfg(srv)->buffer_budget_bytes;
	struct conn *c;

	if (spent == srv->rb_pool_spent)
		return;
	srv->rb_pool_spent = spent;
	if (spent)
		log_warnx("parked requests hold %zu bytes (limits.buffer_budget_bytes): taking frames only "
			  "from connections with nothing charged", srv->stats.parked_bytes);
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead) {
			conn_update_read(c);
			if (!spent)
				event_active(c->resume_ev, EV_TIMEOUT, 0);
		}
}

/* Has c's own connection budget room for charge? */
static bool conn_rb_conn_fits(const struct conn *c, size_t charge)
{
	size_t mine = conn_rb_total(c), max = server_cfg(c->srv)->conn_reply_budget_bytes;

	return mine == 0 || (charge <= max && mine <= max - charge);
}

/* The oldest parked call of c's uid other than c's own that its own
 * connection has room for (one that waits for its own client's reading
 * holds up nobody), or NULL. Administrators have no share. */
static const struct conn *server_rb_uid_oldest(const struct server *srv, const struct conn *c)
{
	const struct conn *o;

	if (c->peer.admin || !c->share)
		return NULL;
	TAILQ_FOREACH(o, &srv->rb_parked_q, rb_park_entry)
		if (!o->dead && o->share == c->share && conn_rb_conn_fits(o, o->rb_parked_charge))
			return o == c ? NULL : o;
	return NULL;
}

/* Must a call of c charged charge wait for its uid: its share is held, or
 * an older parked call of its uid would no longer fit beside it (so a
 * uid's own later calls never starve its oldest one)? */
static bool conn_rb_uid_waits(const struct conn *c, size_t charge)
{
	size_t share = config_uid_reply_budget_bytes(server_cfg(c->srv)), total, older;
	const struct conn *o;

	if (!conn_rb_uid_fits(c, charge))
		return true;
	o = server_rb_uid_oldest(c->srv, c);
	if (!o)
		return false;
	total = conn_rb_uid_total(c);
	older = o->rb_parked_charge;
	return charge > share || older > share - charge || total > share - charge - older;
}

/* A small call of a connection with nothing charged (always admitted). */
static bool conn_rb_idle_small_call(const struct conn *c, size_t charge)
{
	return conn_rb_total(c) == 0 && charge <= SERVER_REPLY_IDLE_BYTES;
}

/* The oldest parked call the daemon's budget holds back: its own
 * connection has room for it, its uid is under its in-flight cap and
 * within its reply share; NULL if none. */
static struct conn *server_rb_head(const struct server *srv)
{
	struct conn *c;

	if (srv->draining)
		return NULL;
	TAILQ_FOREACH(c, &srv->rb_parked_q, rb_park_entry)
		if (!c->dead && conn_rb_conn_fits(c, c->rb_parked_charge) && conn_fair_may_take(c) &&
		    (conn_rb_idle_small_call(c, c->rb_parked_charge) || !conn_rb_uid_waits(c, c->rb_parked_charge)))
			return c;
	return NULL;
}

/* May c start a call charged charge bytes now, the parked call head (NULL:
 * none, or c's own) waiting? *ret_overtook: what of it counts against
 * SERVER_RB_OVERTAKE_BYTES. */
static bool conn_rb_admits(const struct conn *c, size_t charge, const struct conn *head, size_t *ret_overtook)
{
	const struct server *srv = c->srv;
	size_t budget = server_cfg(srv)->reply_budget_bytes;
	size_t all = server_rb_total(srv), h;

	*ret_overtook = 0;
	if (conn_rb_idle_small_call(c, charge))
		return true;    /* a small call of an idle connection: always */
	if (all == 0)
		return true;    /* any one call alone (the budgets admit the largest) */
	if (!conn_rb_conn_fits(c, charge) || charge > budget || all > budget - charge)
		return false;
	if (conn_rb_uid_waits(c, charge))
		return false;    /* its uid holds its share (limits.uid_reply_budget_bytes) */
	if (!head || head == c)
		return true;
	h = head->rb_parked_charge;
	if (h <= budget - charge - all)
		return true;    /* the head's room stays free */
	if (charge <= SERVER_REPLY_IDLE_BYTES && budget >= SERVER_RB_OVERTAKE_BYTES &&
	    h <= budget - SERVER_RB_OVERTAKE_BYTES && srv->rb_overtaking + charge <= SERVER_RB_OVERTAKE_BYTES) {
		*ret_overtook = charge;
		return true;
	}
	return false;
}

/* Admits req (true: *ret_charge set, dispatch it) or parks it on c (false:
 * req released, its frame's bytes kept: a parse may cost many times its
 * frame, so a parked request holds only what it is counted at). */
static bool conn_rb_admit(struct conn *c, struct jsonrpc_request *req, const char *line, size_t len,
			  size_t *ret_charge)
{
	struct server *srv = c->srv;
	size_t charge = srv->env.reply_bound(srv->env.ctx, req) + len;

	if (conn_rb_admits(c, charge, server_rb_head(srv), &c->rb_admit_overtook)) {
		*ret_charge = charge;
		return true;
	}
	if (c->rb_peer_gone) {
		log_debug("conn", "connection %llu: the client is gone, %s dropped instead of parked",
			  (unsigned long long)c->id, req->method);
		jsonrpc_request_release(req);
		return false;
	}
	log_debug("conn", "connection %llu: %s charged %zu bytes waits for the reply budget "
		  "(connection %zu, daemon %zu charged)", (unsigned long long)c->id, req->method, charge,
		  conn_rb_total(c), server_rb_total(srv));
	c->rb_parked_frame = xmalloc(len + 1);
	memcpy(c->rb_parked_frame, line, len);
	c->rb_parked_frame[len] = '\0';
	jsonrpc_request_release(req);
	c->rb_parked_charge = charge;
	c->rb_parked_len = len;
	c->rb_is_parked = true;
	TAILQ_INSERT_TAIL(&srv->rb_parked_q, c, rb_park_entry);
	srv->stats.parked_calls++;
	srv->stats.parked_total++;
	/* Only the order may have held it: let the queue decide. */
	event_active(srv->rb_unpark_ev, EV_TIMEOUT, 0);
	return false;
}

/* Takes the parked request off c, parsed again (it parsed when it came:
 * the same bytes parse the same); *ret owned by the caller. Returns 0, or
 * <0 with *reterr_reply to send. */
static int conn_rb_unpark(struct conn *c, struct jsonrpc_request *ret, json_t **reterr_reply)
{
	int r = 0;

	*reterr_reply = NULL;
	if (ret)
		r = jsonrpc_request_parse(c->rb_parked_frame, c->rb_parked_len, ret, reterr_reply);
	free(c->rb_parked_frame);
	c->rb_parked_frame = NULL;
	c->rb_is_parked = false;
	c->rb_parked_len = 0;
	TAILQ_REMOVE(&c->srv->rb_parked_q, c, rb_park_entry);
	c->srv->stats.parked_calls--;
	return r;
}

/* Serves parked connections in arrival order: one whose own connection has
 * no room waits for its client (and is passed over); the first that the
 * daemon-wide budget cannot take is the head, and those after it go as
 * conn_rb_admits lets them overtake it. */
static void server_rb_unpark_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	bool again = true;

	(void)fd, (void)what;
	while (again) {
		struct conn *c, *head = NULL;

		again = false;
		TAILQ_FOREACH(c, &srv->rb_parked_q, rb_park_entry) {
			struct jsonrpc_request req;
			size_t charge = c->rb_parked_charge, len = c->rb_parked_len, overtook;
			json_t *err;

			/* Its uid at limits.max_inflight_per_uid: it stays parked
			 * (a call of the uid ending frees budget and runs this again). */
			if (c->dead || srv->draining || !conn_rb_conn_fits(c, charge) || !conn_fair_may_take(c))
				continue;
			/* Its uid holds its share (or its older call waits for
			 * it): it waits for that uid's clients, and does not
			 * hold up other uids. */
			if (!conn_rb_idle_small_call(c, charge) && conn_rb_uid_waits(c, charge))
				continue;
			if (!conn_rb_admits(c, charge, head, &overtook)) {
				if (!head)
					head = c;
				continue;
			}
			if (conn_rb_unpark(c, &req, &err) < 0) {
				conn_send(c, err);
			} else {
				log_debug("conn", "connection %llu: %s dispatched from the reply budget's queue",
					  (unsigned long long)c->id, req.method);
				conn_dispatch(c, &req, charge, len, overtook);
			}
			if (!c->dead) {
				conn_account(c);
				event_active(c->resume_ev, EV_TIMEOUT, 0);
			}
			/* The dispatch may have closed connections: start over. */
			again = true;
			break;
		}
	}
}

static struct conn_charge *conn_rb_find(struct conn *c, struct rpc_call *call)
{
	for (size_t i = 0; i < c->rb_n_charges; i++)
		if (c->rb_charges[i].call == call)
			return &c->rb_charges[i];
	return c->rb_dispatching && !c->rb_cur_done ? &c->rb_cur : NULL;
}

/* The call finished (its reply, if any, queued): what is left of its
 * charge is released. */
static void conn_rb_release_call(struct conn *c, struct rpc_call *call)
{
	struct conn_charge *ch = conn_rb_find(c, call);
	size_t sent = c->rb_last_sent;

	c->rb_last_sent = 0;
	if (!ch)
		return;
	if (sent > ch->reply_left && fair_now_ms() - c->srv->rb_over_warned_ms < SERVER_RB_WARN_MS) {
		c->srv->stats.replies_over_bound++;     /* said at most once a second */
	} else if (sent > ch->reply_left) {
		c->srv->stats.replies_over_bound++;
		c->srv->rb_over_warned_ms = fair_now_ms();
		log_warnx("connection %llu: a %s reply of %zu bytes passed its bound by %zu bytes "
			  "(counted at its size)", (unsigned long long)c->id, rpc_call_method(call), sent,
			  sent - ch->reply_left);
	}
	conn_rb_unreserve(c, ch->reply_left + ch->request);
	assert(c->srv->rb_overtaking >= ch->overtook);
	c->srv->rb_overtaking -= ch->overtook;
	server_rb_freed(c->srv, ch->request);
	if (ch == &c->rb_cur)
		c->rb_cur_done = true;
	else
		*ch = c->rb_charges[--c->rb_n_charges];
}

/* A notification of a call in flight: taken from the call's reply bound;
 * past it, counted at its size while both budgets hold it, else the
 * connection is closed (its client leaves notifications unread). */
static void conn_rb_send_notification(struct conn *c, struct rpc_call *call, json_t *notification)
{
	struct conn_charge *ch = conn_rb_find(c, call);
	const struct msbd_config *cfg = server_cfg(c->srv);
	_cleanup_free_ char *buf = NULL;
	size_t len, use, over;

	if (c->dead) {
		json_decref(notification);
		return;
	}
	buf = frame_encode(notification, &len);
	json_decref(notification);
	if (!buf) {
		conn_close(c, "cannot queue a notification");
		return;
	}
	use = ch ? (len < ch->reply_left ? len : ch->reply_left) : 0;
	over = len - use;
	if (over > 0 && (conn_rb_total(c) + over > cfg->conn_reply_budget_bytes ||
			 server_rb_total(c->srv) + over > cfg->reply_budget_bytes)) {
		log_warnx("connection %llu (uid %u): notifications of %s left unread past the reply budget "
			  "(%zu bytes charged to the connection), closing", (unsigned long long)c->id,
			  (unsigned)c->peer.uid, rpc_call_method(call), conn_rb_total(c));
		conn_close(c, "notifications unread past the reply budget");
		return;
	}
	if (ch) {
		ch->reply_left -= use;
		conn_rb_unreserve(c, use);
	}
	if (evbuffer_add_reference(bufferevent_get_output(c->bev), buf, len, conn_frame_free_cb, NULL) < 0) {
		conn_close(c, "cannot queue a notification");
		return;
	}
	buf = NULL;
}

/* At EOF: a peer that closed both ways (POLLHUP; one that only shut its
 * writing side still reads) will read no reply: its parked request, and
 * each later one that would park, is dropped, never run (what the budgets
 * admit at once still runs, as before). */
static void conn_rb_peer_gone(struct conn *c)
{
	struct pollfd pfd = { .fd = bufferevent_getfd(c->bev), .events = POLLOUT };
	json_t *err;

	if (poll(&pfd, 1, 0) != 1 || !(pfd.revents & (POLLHUP | POLLERR)))
		return;
	c->rb_peer_gone = true;
	if (!c->rb_is_parked)
		return;
	log_debug("conn", "connection %llu: the client is gone, its parked request dropped",
		  (unsigned long long)c->id);
	conn_rb_unpark(c, NULL, &err);
	conn_account(c);
}

/* A parked request when the drain begins: answered ShuttingDown. */
static void conn_rb_refuse_parked(struct conn *c)
{
	struct jsonrpc_request req;
	json_t *err;

	if (!c->rb_is_parked)
		return;
	if (conn_rb_unpark(c, &req, &err) < 0) {
		conn_account(c);
		conn_send(c, err);
		return;
	}
	conn_account(c);
	if (req.id)
		conn_send(c, jsonrpc_reply_error(req.id, msb_error_object(MSB_ERR_SHUTTING_DOWN, NULL, NULL)));
	jsonrpc_request_release(&req);
}

/* The connection closes: all it was charged is released, a parked request
 * dropped. Before its bufferevent is freed. */
static void conn_rb_close(struct conn *c)
{
	struct server *srv = c->srv;
	size_t freed = c->rb_reserved + c->rb_queued;

	if (c->rb_is_parked) {
		json_t *err;

		conn_rb_unpark(c, NULL, &err);
	}
	if (c->rb_out_cb)
		evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->rb_out_cb);
	c->rb_out_cb = NULL;
	srv->stats.reply_queued_bytes -= c->rb_queued;
	c->rb_queued = 0;
	conn_rb_unreserve(c, c->rb_reserved);
	for (size_t i = 0; i < c->rb_n_charges; i++)
		srv->rb_overtaking -= c->rb_charges[i].overtook;
	if (c->rb_dispatching && !c->rb_cur_done)
		srv->rb_overtaking -= c->rb_cur.overtook;
	c->rb_n_charges = 0;
	c->rb_cur_done = true;
	server_rb_freed(srv, freed);
}

/* Hands idle memory back to the system once charged bytes were freed
 * (malloc_trim walks the whole heap on the loop, so it is bounded): only
 * when no call is in flight (never forced), at most every
 * SERVER_TRIM_MIN_INTERVAL_MS, and only when the allocator holds at least
 * SERVER_TRIM_MIN_FREE_BYTES free (an allocator that reports no arena, a
 * sanitizer's, is trimmed as asked). */
static void server_rb_trim_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;
	struct timeval tv = { SERVER_TRIM_DELAY_MS / 1000, (SERVER_TRIM_DELAY_MS % 1000) * 1000 };
	int64_t now = fair_now_ms(), since = now - srv->rb_last_trim_ms;
	struct mallinfo2 mi;

	(void)fd, (void)what;
	if (srv->stats.requests_in_flight > 0) {
		evtimer_add(srv->rb_trim_ev, &tv);
		return;
	}
	if (srv->rb_last_trim_ms != 0 && since < SERVER_TRIM_MIN_INTERVAL_MS) {
		fair_timeval(SERVER_TRIM_MIN_INTERVAL_MS - since, &tv);
		evtimer_add(srv->rb_trim_ev, &tv);
		return;
	}
	srv->rb_freed = 0;
	mi = mallinfo2();
	if (mi.arena != 0 && mi.fordblks < SERVER_TRIM_MIN_FREE_BYTES)
		return;
	srv->rb_last_trim_ms = now;
	srv->stats.malloc_trims++;
	malloc_trim(0);
}

/* ---- accepting -------------------------------------------------------- */

/* Tells a connection we will not serve it why, and closes it. */
static void server_reject(struct server *srv, int fd, int code)
{
	json_t *data = code == MSB_ERR_TOO_MANY_CONNECTIONS ?
		json_pack("{s:I}", "limit", (json_int_t)server_cfg(srv)->max_connections) : NULL;
	json_t *reply = jsonrpc_reply_error(NULL, msb_error_object(code, NULL, data));
	_cleanup_free_ char *buf = NULL;
	size_t len;

	srv->stats.connections_rejected++;
	buf = frame_encode(reply, &len);
	json_decref(reply);
	/* Best effort: the socket is new, its buffer is empty. */
	if (buf && send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("conn", "cannot tell a rejected client why: %s", strerror(errno));
	close(fd);
}

static void conn_set_timeouts(struct conn *c)
{
	long ms = server_cfg(c->srv)->write_timeout_ms;
	struct timeval wt = { ms / 1000, (ms % 1000) * 1000 };

	bufferevent_set_timeouts(c->bev, NULL, &wt);
}

/* The peer's credentials (SO_PEERCRED), or -errno. */
static int server_peer(int fd, struct rpc_peer *peer)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	*peer = (struct rpc_peer){ .pid = cred.pid, .uid = cred.uid, .gid = cred.gid };
	return 0;
}

static void server_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			     int salen, void *arg)
{
	struct server *srv = arg;
	struct event_base *base = srv->env.base;
	struct rpc_peer peer = { 0 };
	struct conn *c;

	(void)l, (void)sa, (void)salen;
	if (srv->draining) {
		server_reject(srv, fd, MSB_ERR_SHUTTING_DOWN);
		return;
	}
	if (server_peer(fd, &peer) < 0) {
		/* Nothing it asked could be checked against an owner: refused
		 * (uid (uid_t)-1 also means "every owner" to a selection). */
		log_warn("refusing a connection whose credentials cannot be read (SO_PEERCRED)");
		server_reject(srv, fd, MSB_ERR_PERMISSION_DENIED);
		return;
	}
	peer.admin = peer.uid != (uid_t)-1 && srv->env.lookup_admin(srv->env.ctx, peer.uid, peer.gid);
	if (server_fair_admit(srv, fd, &peer) < 0)
		return;
	c = xcalloc(1, sizeof(*c));
	c->srv = srv;
	c->id = ++srv->next_conn_id;
	c->peer = peer;
	frame_buf_init(&c->in, server_cfg(srv)->max_frame_bytes);
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->frame_ev = evtimer_new(base, conn_frame_timeout_cb, c);
	c->resume_ev = event_new(base, -1, 0, conn_resume_cb, c);
	c->free_ev = event_new(base, -1, 0, conn_free_cb, c);
	if (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE)
		c->closed_ev = event_new(base, fd, EV_CLOSED, conn_peer_closed_cb, c);
	if (!c->bev || !c->frame_ev || !c->resume_ev || !c->free_ev || conn_fair_init(c) < 0) {
		log_warnx("%s: cannot set up a connection, closing it", __func__);
		if (c->bev)
			bufferevent_free(c->bev);
		else
			close(fd);
		conn_free_events(c);
		if (c->share)
			c->share->conns--;
		server_share_put(c->share);
		free(c);
		return;
	}
	conn_set_timeouts(c);
	/* A reply goes out in pieces of up to this per loop turn (libevent's default is 16 KiB:
	 * a 1 MiB read's reply took 86 turns). */
	bufferevent_set_max_single_write(c->bev, MSB_CONN_MAX_SINGLE_WRITE);
	c->rb_out_cb = evbuffer_add_cb(bufferevent_get_output(c->bev), conn_rb_output_cb, c);
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	TAILQ_INSERT_TAIL(&srv->conns, c, entry);
	srv->stats.connections_accepted++;
	srv->stats.connections_current++;
	log_debug("conn", "connection %llu from uid %u gid %u pid %d", (unsigned long long)c->id,
		  (unsigned)c->peer.uid, (unsigned)c->peer.gid, (int)c->peer.pid);
	conn_update_idle(c);
}

static void server_accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;

	(void)fd, (void)what;
	if (!srv->draining)
		evconnlistener_enable(srv->listener);
}

static void server_accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct server *srv = arg;
	struct timeval tv = { MSB_ACCEPT_RETRY_MS / 1000, (MSB_ACCEPT_RETRY_MS % 1000) * 1000 };
	int e = EVUTIL_SOCKET_ERROR();

	errno = e;
	log_warn("accept");
	if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
		evconnlistener_disable(l);
		evtimer_add(srv->accept_retry_ev, &tv);
	}
}

static void server_drained_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;

	(void)fd, (void)what;
	if (srv->drained)
		srv->drained(srv->drained_arg);
}

struct server *server_new(const struct server_env *env)
{
	struct server *srv = xcalloc(1, sizeof(*srv));

	srv->env = *env;
	TAILQ_INIT(&srv->conns);
	LIST_INIT(&srv->shares);
	LIST_INIT(&srv->orphans);
	srv->accept_retry_ev = evtimer_new(env->base, server_accept_retry_cb, srv);
	srv->drained_ev = event_new(env->base, -1, 0, server_drained_cb, srv);
	TAILQ_INIT(&srv->rb_parked_q);
	srv->rb_unpark_ev = event_new(env->base, -1, 0, server_rb_unpark_cb, srv);
	srv->rb_trim_ev = evtimer_new(env->base, server_rb_trim_cb, srv);
	if (!srv->accept_retry_ev || !srv->drained_ev || !srv->rb_unpark_ev || !srv->rb_trim_ev)
		fatalx("%s: cannot create events", __func__);
	return srv;
}

/* ---- the socket file -------------------------------------------------- */

/* Removes a stale socket at path; refuses a live one or a non-socket. */
static int server_clear_path(const char *path, char **reterr_message)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		*reterr_message = xasprintf("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		*reterr_message = xasprintf("%s exists and is not a socket; refusing to replace it", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*reterr_message = xasprintf("socket: %s", strerror(errno));
		return -errno;
	}
	strncpy(sun.sun_path, path, sizeof(sun.sun_path) - 1);
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
		*reterr_message = xasprintf("%s is served by another running process; refusing to take "
					    "it over", path);
		return -EADDRINUSE;
	}
	if (errno != ECONNREFUSED) {
		*reterr_message = xasprintf("%s: cannot tell whether it is in use: %s", path,
					    strerror(errno));
		return -errno;
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		*reterr_message = xasprintf("cannot remove the stale socket %s: %s", path, strerror(errno));
		return -errno;
	}
	log_info("removed the stale socket %s", path);
	return 0;
}

static int server_set_perms(const struct msbd_config *cfg, char **reterr_message)
{
	if (cfg->socket_group) {
		struct group *gr = getgrnam(cfg->socket_group);

		if (!gr || chown(cfg->socket_path, (uid_t)-1, gr->gr_gid) < 0) {
			*reterr_message = xasprintf("cannot give %s to group %s: %s", cfg->socket_path,
						    cfg->socket_group, gr ? strerror(errno) : "no such group");
			return -EPERM;
		}
	}
	if (chmod(cfg->socket_path, cfg->socket_mode) < 0) {
		*reterr_message = xasprintf("chmod %s: %s", cfg->socket_path, strerror(errno));
		return -errno;
	}
	return 0;
}

static int server_bind(struct server *srv, char **reterr_message)
{
	const struct msbd_config *cfg = server_cfg(srv);
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	struct stat st;
	mode_t old;
	int r;

	r = server_clear_path(cfg->socket_path, reterr_message);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*reterr_message = xasprintf("socket: %s", strerror(errno));
		return -errno;
	}
	strncpy(sun.sun_path, cfg->socket_path, sizeof(sun.sun_path) - 1);
	old = umask(0177);      /* born 0600: nobody else connects before chmod */
	r = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
	umask(old);
	if (r < 0) {
		*reterr_message = xasprintf("bind %s: %s", cfg->socket_path, strerror(errno));
		return -errno;
	}
	srv->bound = true;
	srv->path = xstrdup(cfg->socket_path);
	if (stat(cfg->socket_path, &st) == 0)
		srv->bound_dev = st.st_dev, srv->bound_ino = st.st_ino;
	r = server_set_perms(cfg, reterr_message);
	if (r < 0)
		return r;
	if (listen(fd, SOMAXCONN) < 0) {
		*reterr_message = xasprintf("listen %s: %s", cfg->socket_path, strerror(errno));
		return -errno;
	}
	return TAKE_FD(fd);
}

static char *server_fd_path(int fd)
{
	struct sockaddr_un sun;
	socklen_t len = sizeof(sun);

	if (getsockname(fd, (struct sockaddr *)&sun, &len) < 0 || len <= sizeof(sa_family_t) ||
	    sun.sun_path[0] == '\0')
		return NULL;
	return xstrndup(sun.sun_path, len - sizeof(sa_family_t));
}

int server_listen(struct server *srv, char **reterr_message)
{
	int fd = sd_activated_socket(reterr_message);

	if (fd >= 0) {
		srv->activated = true;
		srv->path = server_fd_path(fd);
		(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		log_info("serving the socket-activated socket %s", srv->path ? srv->path : "(unnamed)");
	} else if (fd == -ENOENT) {
		fd = server_bind(srv, reterr_message);
		if (fd < 0)
			return fd;
		log_info("listening on %s", srv->path);
	} else {
		return fd;
	}
	srv->listener = evconnlistener_new(srv->env.base, server_accept_cb, srv,
					   LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (!srv->listener) {
		close(fd);
		*reterr_message = xstrdup("cannot watch the listening socket");
		return -EIO;
	}
	evconnlistener_set_error_cb(srv->listener, server_accept_error_cb);
	return 0;
}

/* Complete frames a connection held back will not be served: each request
 * among them is answered ShuttingDown; the partial frame is dropped. */
static void conn_refuse_held(struct conn *c)
{
	const char *line;
	char buf[16384];
	size_t len;
	ssize_t n;

	conn_rb_refuse_parked(c);
	/* What the client had sent when the drain began counts as received,
	 * even if the loop had not read it yet: read it now, without waiting. */
	if (c->dead || conn_take_input(c) < 0)
		return;
	while (!c->eof && (n = recv(bufferevent_getfd(c->bev), buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		if (conn_append(c, buf, (size_t)n) < 0)
			return;
	while (!c->dead && frame_buf_next(&c->in, &line, &len) == 1) {
		struct jsonrpc_request req;
		json_t *err = NULL;

		if (jsonrpc_request_parse(line, len, &req, &err) < 0) {
			conn_send(c, err);
			continue;
		}
		if (req.id)
			conn_send(c, jsonrpc_reply_error(req.id, msb_error_object(MSB_ERR_SHUTTING_DOWN,
										   NULL, NULL)));
		jsonrpc_request_release(&req);
	}
	frame_buf_drop_partial(&c->in);
	conn_update_partial(c, 0);
	conn_account(c);
	conn_update_frame_timer(c, 0);
	conn_update_read(c);
}

void server_drain(struct server *srv, server_drained_fn *drained, void *arg)
{
	struct conn *c;

	srv->draining = true;
	srv->drained = drained;
	srv->drained_arg = arg;
	if (srv->listener)
		evconnlistener_disable(srv->listener);
	TAILQ_FOREACH(c, &srv->conns, entry)
		if (!c->dead)
			conn_refuse_held(c);
	server_check_drained(srv);
}

void server_config_changed(struct server *srv)
{
	struct conn *c;

	TAILQ_FOREACH(c, &srv->conns, entry) {
		if (c->dead)
			continue;
		c->in.max = server_cfg(srv)->max_frame_bytes;
		conn_set_timeouts(c);
	}
	server_update_budget(srv);
	server_fair_config_changed(srv);
	TAILQ_FOREACH(c, &srv->conns, entry)
		conn_update_read(c);
	event_active(srv->rb_unpark_ev, EV_TIMEOUT, 0);
}

struct server *server_free(struct server *srv)
{
	struct conn *c;
	struct stat st;

	if (!srv)
		return NULL;
	while ((c = TAILQ_FIRST(&srv->conns))) {
		conn_close(c, "daemon stopping");
		conn_free_cb(-1, 0, c);
	}
	server_orphans_free(srv);
	if (srv->listener)
		evconnlistener_free(srv->listener);
	/* Unlink only the file we bound, not one a successor put there. */
	if (srv->bound && srv->path && lstat(srv->path, &st) == 0 && st.st_dev == srv->bound_dev &&
	    st.st_ino == srv->bound_ino)
		unlink(srv->path);
	event_free(srv->accept_retry_ev);
	event_free(srv->drained_ev);
	event_free(srv->rb_unpark_ev);
	event_free(srv->rb_trim_ev);
	for (size_t i = 0; srv->ring && i < srv->ring_len; i++)
		server_event_release(&srv->ring[(srv->ring_head + i) % SERVER_EVENTS_KEPT]);
	free(srv->ring);
	free(srv->path);
	free(srv);
	return NULL;
}

static bool conn_may_see(const struct conn *c, uint32_t type, uid_t owner, const char *scope)
{
	if (c->dead || !(c->sub_types & type) || (c->sub_scope && (!scope || strcmp(scope, c->sub_scope))))
		return false;
	return owner_admits(&c->peer, owner);
}

/* Queues one event; false if the subscriber fell too far behind (closed). */
static bool conn_send_event(struct conn *c, const char *method, const json_t *params)
{
	size_t unread = evbuffer_get_length(bufferevent_get_output(c->bev));

	if (unread > server_cfg(c->srv)->events_max_backlog_bytes) {
		log_warnx("connection %llu (uid %u): %zu bytes of events unread, dropping it",
			  (unsigned long long)c->id, (unsigned)c->peer.uid, unread);
		conn_close(c, "events backlog");
		return false;
	}
	conn_send(c, json_pack("{s:s, s:s, s:O}", "jsonrpc", "2.0", "method", method, "params", params));
	return true;
}

int server_subscribe(struct server *srv, struct rpc_call *call, uint32_t types, const char *scope, bool replay)
{
	struct conn *c = rpc_call_transport(call, &conn_call_ops);

	if (!c || c->dead)
		return -ENOTCONN;
	c->sub_types = types;
	free(c->sub_scope);
	c->sub_scope = scope ? xstrdup(scope) : NULL;
	for (size_t i = 0; replay && i < srv->ring_len; i++) {
		const struct server_event *ev = &srv->ring[(srv->ring_head + i) % SERVER_EVENTS_KEPT];

		if (conn_may_see(c, ev->type, ev->owner, ev->scope) && !conn_send_event(c, ev->method, ev->params))
			return -ENOBUFS;
	}
	return 0;
}

static void server_event_release(struct server_event *ev)
{
	free(ev->scope);
	free(ev->method);
	json_decref(ev->params);
	*ev = (struct server_event){ 0 };
}

/* Keeps ev in the ring, the oldest falling out. */
static void server_keep_event(struct server *srv, uint32_t type, uid_t owner, const char *scope,
			      const char *method, const json_t *params)
{
	struct server_event *ev;

	if (!srv->ring)
		srv->ring = xcalloc(SERVER_EVENTS_KEPT, sizeof(*srv->ring));
	if (srv->ring_len == SERVER_EVENTS_KEPT) {
		server_event_release(&srv->ring[srv->ring_head]);
		srv->ring_head = (srv->ring_head + 1) % SERVER_EVENTS_KEPT;
		srv->ring_len--;
		srv->events_dropped++;
	}
	ev = &srv->ring[(srv->ring_head + srv->ring_len++) % SERVER_EVENTS_KEPT];
	*ev = (struct server_event){ .type = type, .owner = owner, .scope = scope ? xstrdup(scope) : NULL,
				     .method = xstrdup(method), .params = json_deep_copy(params) };
}

size_t server_publish(struct server *srv, uint32_t type, uid_t owner, const char *scope, const char *method,
		      const json_t *params)
{
	size_t sent = 0;
	struct conn *c, *next;

	server_keep_event(srv, type, owner, scope, method, params);
	for (c = TAILQ_FIRST(&srv->conns); c; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (conn_may_see(c, type, owner, scope) && conn_send_event(c, method, params))
			sent++;
	}
	return sent;
}

const struct server_stats *server_get_stats(const struct server *srv)
{
	return &srv->stats;
}

const char *server_get_path(const struct server *srv)
{
	return srv->path;
}

bool server_is_activated(const struct server *srv)
{
	return srv->activated;
}
