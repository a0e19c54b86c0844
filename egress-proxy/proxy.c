/* proxy.c — maf-sandbox-egress-proxy: the CONNECT-only egress proxy of an
 * allowlisted sandbox (behaviour-docker §4). It runs alone in a container
 * (this static binary, /etc/passwd, /etc/group; non-root, read-only rootfs,
 * no capabilities) and never writes a file.
 *
 * Environment: MAF_SANDBOX_ALLOW, MAF_SANDBOX_PROXY_PORT,
 * MAF_SANDBOX_PRIVATE_ALLOW (rules.h, proxy_config_parse), and
 * MAF_SANDBOX_PROXY_RESOLV_CONF (default /etc/resolv.conf; for tests). A bad
 * value is reported on stderr and the proxy exits 2.
 *
 * stdout (each line flushed; the daemon reads it through `docker logs`):
 *   listening on <port>; allowing: <entry>, <entry> | nothing
 *   ALLOW|DENY|DENY-NONGLOBAL|UNREACHABLE <host>:<port>
 *   DENY <host>:<port> not-CONNECT
 * one decision line per CONNECT that names a target, in decision order, and
 * one per plain-HTTP request (405) whose absolute-form target names one
 * (proxy_head_plain_target); no line for a 400, nor for a 405 without a
 * target. Diagnostics go to stderr only.
 *
 * One connection is one struct tunnel, driven through
 *   TUNNEL_HEAD → TUNNEL_RESOLVE → TUNNEL_CONNECT → TUNNEL_PIPE
 * with TUNNEL_REPLY (an error reply, then a short linger) and TUNNEL_CLOSED
 * (freed at the loop boundary) reachable from each. Names are resolved with
 * evdns only: the binary is linked with --wrap for glibc's NSS entry points
 * (below), so nothing can reach NSS. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "cleanup.h"
#include "rules.h"
#include "xmalloc.h"

#define PROXY_PROGNAME "maf-sandbox-egress-proxy"
#define PROXY_RESOLV_CONF "/etc/resolv.conf"
/* A decision line: the longest decision name, a host, ':' and a port. */
#define PROXY_LOG_LINE_MAX (MSB_EGRESS_HOST_MAX + 32)
#define PROXY_EXIT_CONFIG 2

enum tunnel_state {
	TUNNEL_HEAD,
	TUNNEL_RESOLVE,
	TUNNEL_CONNECT,
	TUNNEL_PIPE,
	TUNNEL_REPLY,
	TUNNEL_CLOSED,
	_TUNNEL_STATE_MAX,
};

/* The two sides of a tunnel, and the index of each in t_eof/t_shut/t_paused. */
enum { SIDE_CLIENT, SIDE_UPSTREAM, SIDE_MAX };

struct proxy {
	struct event_base *base;
	struct evdns_base *dns;              /* NULL: every lookup fails */
	const struct proxy_config *config;
	struct evconnlistener *listeners[2]; /* IPv4, IPv6 (may be NULL) */
	struct event *accept_retry;
	long idle_ms;                        /* a tunnel's idle limit */
	int listen_family;                   /* MAF_SANDBOX_PROXY_LISTEN: AF_INET(6), or 0 (any) */
	struct in6_addr listen_addr;         /* its address (an in_addr for AF_INET) */
	size_t n_tunnels;
	LIST_HEAD(, tunnel) tunnels;
};

/* A pending lookup points here, not at its tunnel, so a tunnel can go away
 * while libevent still owes the (cancelled) lookup its callback. */
struct resolve_job {
	struct tunnel *t;                    /* NULL once the tunnel has let go */
};

struct tunnel {
	LIST_ENTRY(tunnel) t_entry;
	struct proxy *t_proxy;
	enum tunnel_state t_state;
	struct bufferevent *t_side[SIDE_MAX];
	struct event *t_timer;               /* the deadline of the current state */
	struct event *t_reap;                /* frees the tunnel at the loop boundary */
	struct resolve_job *t_job;
	struct evdns_getaddrinfo_request *t_dns;
	struct proxy_head t_head;
	struct sockaddr_storage t_addrs[PROXY_MAX_ADDRS];
	socklen_t t_addr_lens[PROXY_MAX_ADDRS];
	size_t t_n_addrs, t_next_addr;
	bool t_eof[SIDE_MAX];                /* this side has sent its FIN */
	bool t_shut[SIDE_MAX];               /* we have sent this side our FIN */
	bool t_paused[SIDE_MAX];             /* this side's reads wait for the other's output */
};

static void tunnel_close(struct tunnel *t);
static void tunnel_reply(struct tunnel *t, int status);

/* ---- NSS fences -------------------------------------------------------------------
 * Linked with -Wl,--wrap=NAME (meson.build): libevent's evutil.o refers to
 * these, a static glibc would pull NSS in for them, and the proxy must never
 * use them. Each fails. freeaddrinfo can only be handed what getaddrinfo
 * returned, which is nothing. */
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		       struct addrinfo **res);
void __wrap_freeaddrinfo(struct addrinfo *ai);
struct servent *__wrap_getservbyname(const char *name, const char *proto);
struct protoent *__wrap_getprotobynumber(int proto);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		       struct addrinfo **res)
{
	return EAI_FAIL;
}

void __wrap_freeaddrinfo(struct addrinfo *ai)
{
}

struct servent *__wrap_getservbyname(const char *name, const char *proto)
{
	return NULL;
}

struct protoent *__wrap_getprotobynumber(int proto)
{
	return NULL;
}

/* ---- output ------------------------------------------------------------------------ */

static void proxy_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void proxy_warnx(const char *fmt, ...)
{
	va_list ap;

	fputs(PROXY_PROGNAME ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void log_decision(enum proxy_decision d, const struct proxy_target *target)
{
	char line[PROXY_LOG_LINE_MAX];

	if (proxy_format_decision(d, target, line, sizeof(line)) < 0)
		return;
	fputs(line, stdout);
	fflush(stdout);
}

/* A plain-HTTP request's decision: DENY with its reason, when its target
 * can be read. */
static void log_not_connect(const struct proxy_head *head)
{
	char line[PROXY_LOG_LINE_MAX + sizeof(PROXY_REASON_NOT_CONNECT)];
	struct proxy_target target;

	if (proxy_head_plain_target(head, &target) < 0 ||
	    proxy_format_decision_reason(PROXY_DENY, &target, PROXY_REASON_NOT_CONNECT, line,
					 sizeof(line)) < 0)
		return;
	fputs(line, stdout);
	fflush(stdout);
}

static void log_ready(const struct proxy_config *c)
{
	printf("listening on %u; allowing: ", (unsigned)c->port);
	for (size_t i = 0; i < c->n_rules; i++)
		printf("%s%s", i ? ", " : "", c->entries[i]);
	printf("%s\n", c->n_rules ? "" : "nothing");
	fflush(stdout);
}

/* ---- tunnel lifetime ------------------------------------------------------------------ */

static const char *const tunnel_state_names[_TUNNEL_STATE_MAX] = {
	[TUNNEL_HEAD] = "head",
	[TUNNEL_RESOLVE] = "resolve",
	[TUNNEL_CONNECT] = "connect",
	[TUNNEL_PIPE] = "pipe",
	[TUNNEL_REPLY] = "reply",
	[TUNNEL_CLOSED] = "closed",
};

static const char *tunnel_state_to_string(enum tunnel_state s)
{
	if ((unsigned)s >= ELEMENTSOF(tunnel_state_names))
		return NULL;
	return tunnel_state_names[s];
}

static void tunnel_free(struct tunnel *t)
{
	if (!t)
		return;
	LIST_REMOVE(t, t_entry);
	t->t_proxy->n_tunnels--;
	if (t->t_timer)
		event_free(t->t_timer);
	if (t->t_reap)
		event_free(t->t_reap);
	free(t);
}

static void tunnel_reap_cb(evutil_socket_t fd, short what, void *arg)
{
	tunnel_free(arg);
}

/* Lets go of a pending lookup; libevent still calls back, into the job. */
static void tunnel_drop_lookup(struct tunnel *t)
{
	if (t->t_job)
		t->t_job->t = NULL;
	t->t_job = NULL;
	if (t->t_dns)
		evdns_getaddrinfo_cancel(t->t_dns);
	t->t_dns = NULL;
}

static void tunnel_drop_side(struct tunnel *t, int side)
{
	/* bufferevent_free is safe inside the bufferevent's own callback
	 * (libevent reference-counts it); the tunnel itself waits for t_reap. */
	if (t->t_side[side])
		bufferevent_free(t->t_side[side]);
	t->t_side[side] = NULL;
}

/* The single teardown: closes both sockets now, frees at the loop boundary. */
static void tunnel_close(struct tunnel *t)
{
	if (t->t_state == TUNNEL_CLOSED)
		return;
	t->t_state = TUNNEL_CLOSED;
	tunnel_drop_lookup(t);
	tunnel_drop_side(t, SIDE_CLIENT);
	tunnel_drop_side(t, SIDE_UPSTREAM);
	evtimer_del(t->t_timer);
	event_active(t->t_reap, EV_TIMEOUT, 0);
}

static void tunnel_arm(struct tunnel *t, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	evtimer_add(t->t_timer, &tv);
}

/* Logs the decision; anything but ALLOW ends in its error reply. */
static void tunnel_decide(struct tunnel *t, enum proxy_decision d)
{
	log_decision(d, &t->t_head.ph_target);
	if (d != PROXY_ALLOW)
		tunnel_reply(t, proxy_decision_status(d));
}

/* ---- error replies ----------------------------------------------------------------------- */

static void reply_read_cb(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);

	evbuffer_drain(in, evbuffer_get_length(in));
}

/* The reply is out: send our FIN, and keep reading until the client's. */
static void reply_write_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) > 0 || t->t_shut[SIDE_CLIENT])
		return;
	t->t_shut[SIDE_CLIENT] = true;
	if (shutdown(bufferevent_getfd(bev), SHUT_WR) < 0)
		tunnel_close(t);
}

static void reply_event_cb(struct bufferevent *bev, short events, void *arg)
{
	tunnel_close(arg);
}

/* Sends "HTTP/1.1 <status> ..." and closes after the client's FIN, or after
 * PROXY_LINGER_MS, so unread request bytes do not turn our close into a
 * reset that could destroy the reply. */
static void tunnel_reply(struct tunnel *t, int status)
{
	struct bufferevent *c = t->t_side[SIDE_CLIENT];
	char reply[PROXY_REPLY_MAX];
	int n = proxy_format_reply(status, reply, sizeof(reply));

	tunnel_drop_lookup(t);
	tunnel_drop_side(t, SIDE_UPSTREAM);
	if (n < 0 || !c) {
		tunnel_close(t);
		return;
	}
	t->t_state = TUNNEL_REPLY;
	evtimer_del(t->t_timer);
	tunnel_arm(t, PROXY_LINGER_MS);
	bufferevent_setcb(c, reply_read_cb, reply_write_cb, reply_event_cb, t);
	bufferevent_setwatermark(c, EV_WRITE, 0, 0);
	if (bufferevent_write(c, reply, (size_t)n) < 0 ||
	    bufferevent_enable(c, EV_READ | EV_WRITE) < 0)
		tunnel_close(t);
}

/* ---- the pipe ----------------------------------------------------------------------------- */

static int side_of(struct tunnel *t, struct bufferevent *bev)
{
	return bev == t->t_side[SIDE_CLIENT] ? SIDE_CLIENT : SIDE_UPSTREAM;
}

static void pipe_check_done(struct tunnel *t)
{
	if (t->t_shut[SIDE_CLIENT] && t->t_shut[SIDE_UPSTREAM])
		tunnel_close(t);
}

/* Sends side our FIN once the other side has sent its own and all it sent
 * has been written to side. */
static void pipe_maybe_shut(struct tunnel *t, int side)
{
	struct bufferevent *bev = t->t_side[side];

	if (t->t_shut[side] || !t->t_eof[!side] ||
	    evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return;
	t->t_shut[side] = true;
	if (shutdown(bufferevent_getfd(bev), SHUT_WR) < 0) {
		tunnel_close(t);
		return;
	}
	pipe_check_done(t);
}

/* Moves what side has read to the other side's output; past the high-water
 * mark, side stops reading until that output drains (pipe_write_cb). */
static void pipe_forward(struct tunnel *t, int side)
{
	struct bufferevent *src = t->t_side[side], *dst = t->t_side[!side];
	struct evbuffer *out = bufferevent_get_output(dst);

	if (evbuffer_add_buffer(out, bufferevent_get_input(src)) < 0) {
		tunnel_close(t);
		return;
	}
	if (evbuffer_get_length(out) > PROXY_PIPE_HIGH_WATER && !t->t_paused[side]) {
		t->t_paused[side] = true;
		bufferevent_disable(src, EV_READ);
	}
}

static void pipe_read_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;

	tunnel_arm(t, (int)t->t_proxy->idle_ms);   /* activity: the idle clock starts again */
	pipe_forward(t, side_of(t, bev));
}

static void pipe_write_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;
	int side = side_of(t, bev);

	tunnel_arm(t, (int)t->t_proxy->idle_ms);
	if (t->t_paused[!side] &&
	    evbuffer_get_length(bufferevent_get_output(bev)) <= PROXY_PIPE_HIGH_WATER / 2) {
		t->t_paused[!side] = false;
		if (bufferevent_enable(t->t_side[!side], EV_READ) < 0) {
			tunnel_close(t);
			return;
		}
	}
	pipe_maybe_shut(t, side);
}

static void pipe_event_cb(struct bufferevent *bev, short events, void *arg)
{
	struct tunnel *t = arg;
	int side = side_of(t, bev);

	if (!(events & BEV_EVENT_EOF) || (events & BEV_EVENT_ERROR)) {
		tunnel_close(t);
		return;
	}
	pipe_forward(t, side);
	if (t->t_state == TUNNEL_CLOSED)
		return;
	t->t_eof[side] = true;
	pipe_maybe_shut(t, !side);
}

static void tunnel_pipe(struct tunnel *t)
{
	char reply[PROXY_REPLY_MAX];
	int n = proxy_format_reply(200, reply, sizeof(reply));

	t->t_state = TUNNEL_PIPE;
	tunnel_arm(t, (int)t->t_proxy->idle_ms);
	tunnel_decide(t, PROXY_ALLOW);
	for (int side = 0; side < SIDE_MAX; side++) {
		struct bufferevent *bev = t->t_side[side];

		bufferevent_setcb(bev, pipe_read_cb, pipe_write_cb, pipe_event_cb, t);
		bufferevent_setwatermark(bev, EV_WRITE, PROXY_PIPE_HIGH_WATER / 2, 0);
		if (bufferevent_enable(bev, EV_READ | EV_WRITE) < 0) {
			tunnel_close(t);
			return;
		}
	}
	if (n < 0 || bufferevent_write(t->t_side[SIDE_CLIENT], reply, (size_t)n) < 0) {
		tunnel_close(t);
		return;
	}
	/* Bytes the client sent after its head go first. */
	pipe_forward(t, SIDE_CLIENT);
}

/* ---- connecting ---------------------------------------------------------------------------- */

static void connect_event_cb(struct bufferevent *bev, short events, void *arg);

/* Starts a connection to the next address; none left → UNREACHABLE. */
static void tunnel_connect_next(struct tunnel *t)
{
	struct event_base *base = t->t_proxy->base;

	while (t->t_next_addr < t->t_n_addrs) {
		size_t i = t->t_next_addr++;
		struct bufferevent *bev = bufferevent_socket_new(
			base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);

		if (!bev)
			break;
		bufferevent_setcb(bev, NULL, NULL, connect_event_cb, t);
		if (bufferevent_socket_connect(bev, (struct sockaddr *)&t->t_addrs[i],
					       (int)t->t_addr_lens[i]) == 0) {
			t->t_side[SIDE_UPSTREAM] = bev;
			return;
		}
		bufferevent_free(bev);
	}
	tunnel_decide(t, PROXY_UNREACHABLE);
}

static void connect_event_cb(struct bufferevent *bev, short events, void *arg)
{
	struct tunnel *t = arg;

	if (events & BEV_EVENT_CONNECTED) {
		tunnel_pipe(t);
		return;
	}
	tunnel_drop_side(t, SIDE_UPSTREAM);
	tunnel_connect_next(t);
}

static void tunnel_connect(struct tunnel *t)
{
	t->t_state = TUNNEL_CONNECT;
	evtimer_del(t->t_timer);
	tunnel_arm(t, PROXY_CONNECT_TIMEOUT_MS);
	t->t_next_addr = 0;
	tunnel_connect_next(t);
}

/* Keeps addr if the proxy may dial it. */
static void tunnel_add_addr(struct tunnel *t, int family, const void *addr)
{
	const struct proxy_cidr_list *allow = &t->t_proxy->config->private_allow;
	struct sockaddr_storage *ss = &t->t_addrs[t->t_n_addrs];
	uint16_t port = htons(t->t_head.ph_target.port);

	if (t->t_n_addrs == PROXY_MAX_ADDRS || !proxy_addr_is_allowed(allow, family, addr))
		return;
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = port;
		memcpy(&sin->sin_addr, addr, 4);
		t->t_addr_lens[t->t_n_addrs++] = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = port;
		memcpy(&sin6->sin6_addr, addr, 16);
		t->t_addr_lens[t->t_n_addrs++] = sizeof(*sin6);
	}
}

/* After filtering: nothing seen → UNREACHABLE, nothing kept → DENY-NONGLOBAL. */
static void tunnel_dial(struct tunnel *t, size_t seen)
{
	if (seen == 0)
		tunnel_decide(t, PROXY_UNREACHABLE);
	else if (t->t_n_addrs == 0)
		tunnel_decide(t, PROXY_DENY_NONGLOBAL);
	else
		tunnel_connect(t);
}

/* ---- resolving ------------------------------------------------------------------------------- */

static void resolve_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct resolve_job *job = arg;
	struct tunnel *t = job->t;
	size_t seen = 0;

	free(job);
	if (!t) {
		if (res)
			evutil_freeaddrinfo(res);
		return;
	}
	t->t_job = NULL;
	t->t_dns = NULL;
	for (struct evutil_addrinfo *ai = result == 0 ? res : NULL; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			tunnel_add_addr(t, AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr);
			seen++;
		} else if (ai->ai_family == AF_INET6) {
			tunnel_add_addr(t, AF_INET6,
					&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
			seen++;
		}
	}
	if (res)
		evutil_freeaddrinfo(res);
	tunnel_dial(t, seen);
}

static void tunnel_resolve(struct tunnel *t)
{
	struct evutil_addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_protocol = IPPROTO_TCP,
	};
	struct evdns_getaddrinfo_request *req;
	struct resolve_job *job;

	if (!t->t_proxy->dns) {
		tunnel_decide(t, PROXY_UNREACHABLE);
		return;
	}
	t->t_state = TUNNEL_RESOLVE;
	evtimer_del(t->t_timer);
	tunnel_arm(t, PROXY_DNS_TIMEOUT_MS);
	job = xmalloc(sizeof(*job));
	job->t = t;
	t->t_job = job;
	/* May call resolve_cb before it returns (and then returns NULL). */
	req = evdns_getaddrinfo(t->t_proxy->dns, t->t_head.ph_target.host, NULL, &hints,
				resolve_cb, job);
	if (t->t_job == job)
		t->t_dns = req;
}

/* The head is complete: is the target allowed, and where is it. */
static void tunnel_route(struct tunnel *t)
{
	const struct proxy_target *target = &t->t_head.ph_target;

	if (!proxy_config_allows(t->t_proxy->config, target)) {
		tunnel_decide(t, PROXY_DENY);
		return;
	}
	switch (target->parsed.kind) {
	case MSB_EGRESS_HOST_IPV4:
		tunnel_add_addr(t, AF_INET, target->parsed.addr);
		tunnel_dial(t, 1);
		return;
	case MSB_EGRESS_HOST_IPV6:
		tunnel_add_addr(t, AF_INET6, target->parsed.addr);
		tunnel_dial(t, 1);
		return;
	case MSB_EGRESS_HOST_NAME:
		tunnel_resolve(t);
		return;
	default:
		assert(!"unreachable");
	}
}

/* ---- the head ------------------------------------------------------------------------------- */

static void head_read_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	enum proxy_head_result r = PROXY_HEAD_MORE;

	while (r == PROXY_HEAD_MORE && evbuffer_get_length(in) > 0) {
		struct evbuffer_iovec v;
		size_t used = 0;

		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		r = proxy_head_feed(&t->t_head, v.iov_base, v.iov_len, &used);
		evbuffer_drain(in, used);
	}
	switch (r) {
	case PROXY_HEAD_MORE:
		return;
	case PROXY_HEAD_BAD:
		tunnel_reply(t, 400);
		return;
	case PROXY_HEAD_NOT_CONNECT:
		log_not_connect(&t->t_head);
		tunnel_reply(t, 405);
		return;
	case PROXY_HEAD_DONE:
		/* What follows the head waits in the input for the pipe. */
		bufferevent_disable(bev, EV_READ);
		tunnel_route(t);
		return;
	default:
		assert(!"unreachable");
	}
}

static void head_event_cb(struct bufferevent *bev, short events, void *arg)
{
	tunnel_close(arg);
}

/* The deadline of the current state. */
static void tunnel_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel *t = arg;

	switch (t->t_state) {
	case TUNNEL_HEAD:
		tunnel_reply(t, 400);
		return;
	case TUNNEL_RESOLVE:
	case TUNNEL_CONNECT:
		tunnel_drop_lookup(t);
		tunnel_drop_side(t, SIDE_UPSTREAM);
		tunnel_decide(t, PROXY_UNREACHABLE);
		return;
	case TUNNEL_REPLY:
	case TUNNEL_PIPE:   /* idle for p->idle_ms */
		tunnel_close(t);
		return;
	case TUNNEL_CLOSED:
		/* The timer is deleted on entering this state. */
		proxy_warnx("a %s tunnel's timer fired, ignoring", tunnel_state_to_string(t->t_state));
		return;
	default:
		assert(!"unreachable");
	}
}

static void tunnel_new(struct proxy *p, evutil_socket_t fd)
{
	struct tunnel *t = xcalloc(1, sizeof(*t));

	t->t_proxy = p;
	t->t_state = TUNNEL_HEAD;
	proxy_head_init(&t->t_head);
	LIST_INSERT_HEAD(&p->tunnels, t, t_entry);
	p->n_tunnels++;
	t->t_side[SIDE_CLIENT] = bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE);
	t->t_timer = evtimer_new(p->base, tunnel_timeout_cb, t);
	t->t_reap = evtimer_new(p->base, tunnel_reap_cb, t);
	if (!t->t_side[SIDE_CLIENT] || !t->t_timer || !t->t_reap) {
		proxy_warnx("cannot set up a connection: out of memory, closing it");
		if (!t->t_side[SIDE_CLIENT])
			evutil_closesocket(fd);
		tunnel_drop_side(t, SIDE_CLIENT);
		tunnel_free(t);
		return;
	}
	bufferevent_setcb(t->t_side[SIDE_CLIENT], head_read_cb, NULL, head_event_cb, t);
	tunnel_arm(t, PROXY_HEAD_TIMEOUT_MS);
	if (bufferevent_enable(t->t_side[SIDE_CLIENT], EV_READ) < 0)
		tunnel_close(t);
}

/* ---- listening --------------------------------------------------------------------------------- */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
		      void *arg)
{
	struct proxy *p = arg;

	if (p->n_tunnels >= PROXY_MAX_CONNECTIONS) {
		evutil_closesocket(fd);
		return;
	}
	tunnel_new(p, fd);
}

static void accept_pause(struct proxy *p, bool pause)
{
	for (size_t i = 0; i < ELEMENTSOF(p->listeners); i++) {
		if (!p->listeners[i])
			continue;
		if (pause)
			evconnlistener_disable(p->listeners[i]);
		else
			evconnlistener_enable(p->listeners[i]);
	}
}

/* EMFILE and kin: stop accepting for a while rather than spin. */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct proxy *p = arg;
	struct timeval tv = { .tv_sec = PROXY_ACCEPT_RETRY_MS / 1000,
			      .tv_usec = (PROXY_ACCEPT_RETRY_MS % 1000) * 1000 };

	proxy_warnx("accept: %s; pausing for %d ms",
	      evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()), PROXY_ACCEPT_RETRY_MS);
	accept_pause(p, true);
	evtimer_add(p->accept_retry, &tv);
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	accept_pause(arg, false);
}

/* addr: the address to bind (in6_addr or in_addr), or NULL for any. */
static int listen_socket(int family, uint16_t port, const void *addr)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int one = 1;
	_cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = addr ? *(const struct in6_addr *)addr : in6addr_any;
		len = sizeof(*sin6);
		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
			return -errno;
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		if (addr)
			sin->sin_addr = *(const struct in_addr *)addr;
		else
			sin->sin_addr.s_addr = htonl(INADDR_ANY);
		len = sizeof(*sin);
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, PROXY_LISTEN_BACKLOG) < 0)
		return -errno;
	return TAKE_FD(fd);
}

/* With MAF_SANDBOX_PROXY_LISTEN: that address only (the daemon gives the
 * proxy's own address on its sandbox's network, so nothing on its outbound
 * leg can use it). Else 0.0.0.0:port must work, and [::]:port is added when
 * IPv6 is there. */
static int proxy_listen(struct proxy *p)
{
	static const int families[] = { AF_INET, AF_INET6 };

	if (p->listen_family) {
		int fd = listen_socket(p->listen_family, p->config->port, &p->listen_addr);

		if (fd < 0) {
			proxy_warnx("cannot listen on %s port %u: %s", getenv("MAF_SANDBOX_PROXY_LISTEN"),
				    (unsigned)p->config->port, strerror(-fd));
			return fd;
		}
		p->listeners[0] = evconnlistener_new(p->base, accept_cb, p,
						     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
		if (!p->listeners[0]) {
			close(fd);
			proxy_warnx("cannot listen: evconnlistener_new failed");
			return -ENOMEM;
		}
		evconnlistener_set_error_cb(p->listeners[0], accept_error_cb);
		return 0;
	}
	for (size_t i = 0; i < ELEMENTSOF(families); i++) {
		int fd = listen_socket(families[i], p->config->port, NULL);

		if (fd < 0 && families[i] == AF_INET6) {
			proxy_warnx("not listening on [::]:%u: %s", (unsigned)p->config->port, strerror(-fd));
			continue;
		}
		if (fd < 0) {
			proxy_warnx("cannot listen on 0.0.0.0:%u: %s", (unsigned)p->config->port,
			      strerror(-fd));
			return fd;
		}
		p->listeners[i] = evconnlistener_new(p->base, accept_cb, p,
						     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
						     fd);
		if (!p->listeners[i]) {
			close(fd);
			proxy_warnx("cannot listen: evconnlistener_new failed");
			return -ENOMEM;
		}
		evconnlistener_set_error_cb(p->listeners[i], accept_error_cb);
	}
	return 0;
}

/* ---- setup and main ------------------------------------------------------------------------------ */

/* evdns from resolv.conf; if it cannot be read, every lookup fails. */
static struct evdns_base *proxy_resolver(struct event_base *base)
{
	const char *path = getenv("MAF_SANDBOX_PROXY_RESOLV_CONF");
	struct evdns_base *dns = evdns_base_new(base, 0);
	int r;

	if (!path)
		path = PROXY_RESOLV_CONF;
	if (!dns) {
		proxy_warnx("cannot create a resolver: every name lookup will fail");
		return NULL;
	}
	r = evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL | DNS_OPTION_NAMESERVERS_NO_DEFAULT,
					 path);
	if (r != 0) {
		proxy_warnx("cannot use %s (evdns error %d): every name lookup will fail", path, r);
		evdns_base_free(dns, 0);
		return NULL;
	}
	return dns;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopbreak(arg);
}

static void proxy_cleanup(struct proxy *p)
{
	struct tunnel *t;

	while ((t = LIST_FIRST(&p->tunnels))) {
		tunnel_close(t);
		tunnel_free(t);
	}
	for (size_t i = 0; i < ELEMENTSOF(p->listeners); i++)
		if (p->listeners[i])
			evconnlistener_free(p->listeners[i]);
	if (p->accept_retry)
		event_free(p->accept_retry);
	/* Cancelled lookups owe their (deferred) callbacks, which free them
	 * and their jobs: let those run once. */
	event_base_loop(p->base, EVLOOP_NONBLOCK);
	if (p->dns)
		evdns_base_free(p->dns, 0);
}

static int proxy_run(struct proxy *p)
{
	struct event *term = evsignal_new(p->base, SIGTERM, signal_cb, p->base);
	struct event *intr = evsignal_new(p->base, SIGINT, signal_cb, p->base);
	int r = -ENOMEM;

	p->accept_retry = evtimer_new(p->base, accept_retry_cb, p);
	if (!term || !intr || !p->accept_retry || event_add(term, NULL) < 0 ||
	    event_add(intr, NULL) < 0) {
		proxy_warnx("cannot set up the event loop");
		goto out;
	}
	p->dns = proxy_resolver(p->base);
	r = proxy_listen(p);
	if (r < 0)
		goto out;
	log_ready(p->config);
	r = event_base_dispatch(p->base) < 0 ? -EIO : 0;
out:
	proxy_cleanup(p);
	if (term)
		event_free(term);
	if (intr)
		event_free(intr);
	return r;
}

int main(void)
{
	_cleanup_free_ struct proxy_config *config = xmalloc(sizeof(*config));
	struct proxy p = { .config = config };
	char err[512];
	int r;

	r = proxy_config_parse(getenv("MAF_SANDBOX_ALLOW"), getenv("MAF_SANDBOX_PROXY_PORT"),
			       getenv("MAF_SANDBOX_PRIVATE_ALLOW"), config, err, sizeof(err));
	if (r < 0) {
		proxy_warnx("%s", err);
		return PROXY_EXIT_CONFIG;
	}
	p.idle_ms = PROXY_TUNNEL_IDLE_MS;
	if (getenv("MAF_SANDBOX_PROXY_IDLE_MS")) {
		const char *v = getenv("MAF_SANDBOX_PROXY_IDLE_MS");
		char *end;
		long ms;

		errno = 0;
		ms = strtol(v, &end, 10);
		if (errno || end == v || *end || *v < '0' || *v > '9' || ms < PROXY_TUNNEL_IDLE_MIN_MS ||
		    ms > PROXY_TUNNEL_IDLE_MAX_MS) {
			proxy_warnx("MAF_SANDBOX_PROXY_IDLE_MS must be %d..%d milliseconds, not \"%s\"",
				    PROXY_TUNNEL_IDLE_MIN_MS, PROXY_TUNNEL_IDLE_MAX_MS, v);
			return PROXY_EXIT_CONFIG;
		}
		p.idle_ms = ms;
	}
	if (getenv("MAF_SANDBOX_PROXY_LISTEN")) {
		const char *v = getenv("MAF_SANDBOX_PROXY_LISTEN");

		p.listen_family = strchr(v, ':') ? AF_INET6 : AF_INET;
		if (inet_pton(p.listen_family, v, &p.listen_addr) != 1) {
			proxy_warnx("MAF_SANDBOX_PROXY_LISTEN must be an IPv4 or IPv6 address, not \"%s\"", v);
			return PROXY_EXIT_CONFIG;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	LIST_INIT(&p.tunnels);
	p.base = event_base_new();
	if (!p.base) {
		proxy_warnx("cannot create the event loop");
		return EXIT_FAILURE;
	}
	r = proxy_run(&p);
	event_base_free(p.base);
	fflush(stdout);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
