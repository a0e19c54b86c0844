/* hijack.c — an engine request turned raw stream (see hijack.h).
 *
 *   CONNECTING ── writable, SO_ERROR 0 ──→ SENDING
 *   SENDING    ── request written ──→ HEAD
 *   HEAD       ── 101 / 200 ──→ STREAM;  another status ──→ BODY
 *   STREAM     ── EOF ──→ done(0, status)
 *   BODY       ── Content-Length read, or EOF ──→ done(0, status, body)
 *
 * One socket, non-blocking, two events (read, write; both persistent, the
 * write one added only while there is something to send). The stdin write
 * waits for STREAM: the engine reads the request through a buffer and
 * drops what that buffer held beyond it when it takes the connection over,
 * so a byte sent before the 101 could be lost (the docker CLI waits too). */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "cleanup.h"
#include "endpoint.h"
#include "hijack.h"
#include "log.h"
#include "xmalloc.h"

/* ---- the response head (pure) ------------------------------------------- */

static bool is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

/* One header line [p, p + n) (no CRLF): Content-Length kept. */
static int head_header(const uint8_t *p, size_t n, struct engine_hijack_head *h)
{
	static const char cl[] = "content-length";
	const uint8_t *colon = memchr(p, ':', n);
	size_t name_len, i, digits;
	long long v = 0;

	if (!colon || colon == p)
		return -EPROTO;
	name_len = (size_t)(colon - p);
	for (i = 0; i < name_len; i++)
		if (p[i] <= ' ' || p[i] >= 0x7f)
			return -EPROTO;   /* no space before the colon, no control bytes */
	if (name_len != sizeof(cl) - 1 || strncasecmp((const char *)p, cl, name_len) != 0)
		return 0;
	i = name_len + 1;
	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	for (digits = 0; i < n && is_digit(p[i]); i++, digits++) {
		if (v > (1LL << 50))
			return -EPROTO;
		v = v * 10 + (p[i] - '0');
	}
	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	if (i != n || digits == 0)
		return -EPROTO;
	if (h->content_length >= 0 && h->content_length != v)
		return -EPROTO;
	h->content_length = v;
	return 0;
}

/* [p + from, p + to) holds no NUL, CR or LF. */
static bool line_clean(const uint8_t *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (p[i] == 0 || p[i] == '\r' || p[i] == '\n')
			return false;
	return true;
}

int engine_hijack_parse_head(const uint8_t *p, size_t n, struct engine_hijack_head *ret)
{
	struct engine_hijack_head h = { .content_length = -1 };
	size_t limit = n < ENGINE_HIJACK_MAX_HEAD_BYTES ? n : ENGINE_HIJACK_MAX_HEAD_BYTES;
	size_t end = 0, i, le;
	const uint8_t *e;

	/* The blank line first: nothing is judged of a head not yet whole. */
	e = limit >= 4 ? memmem(p, limit, "\r\n\r\n", 4) : NULL;
	if (!e)
		return n >= ENGINE_HIJACK_MAX_HEAD_BYTES ? -EMSGSIZE : 0;
	end = (size_t)(e - p) + 4;
	/* "HTTP/1.x SSS[ reason]" */
	if (end < 16 || memcmp(p, "HTTP/1.", 7) != 0 || !is_digit(p[7]) || p[8] != ' ' || p[9] < '1' ||
	    p[9] > '9' || !is_digit(p[10]) || !is_digit(p[11]) || (p[12] != ' ' && p[12] != '\r'))
		return -EPROTO;
	h.status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	le = (size_t)((const uint8_t *)memmem(p, end, "\r\n", 2) - p);
	if (!line_clean(p, 0, le))
		return -EPROTO;
	/* Header lines, each CRLF-terminated, up to the blank line. */
	for (i = le + 2; i < end - 2; i = le + 2) {
		int r;

		le = (size_t)((const uint8_t *)memmem(p + i, end - i, "\r\n", 2) - p);
		if (!line_clean(p, i, le))
			return -EPROTO;
		r = head_header(p + i, le - i, &h);
		if (r < 0)
			return r;
	}
	h.upgraded = h.status == 101 || h.status == 200;
	h.len = end;
	*ret = h;
	return 1;
}

/* ---- the connection ------------------------------------------------------ */

enum hijack_state {
	HIJACK_CONNECTING,
	HIJACK_SENDING,
	HIJACK_HEAD,
	HIJACK_STREAM,
	HIJACK_BODY,
	HIJACK_DONE,
};

struct engine_hijack {
	LIST_ENTRY(engine_hijack) entry;
	struct engine_hijack_set *set;
	int fd;
	enum hijack_state state;
	struct event *rev, *wev;
	engine_hijack_data_cb *data;
	engine_hijack_done_cb *done;
	void *arg;
	/* The request, then the head or the refusal's body. */
	char *req;
	size_t req_len, req_sent;
	uint8_t *in;
	size_t in_len, in_cap;
	struct engine_hijack_head head;
	unsigned long long body_seen;
	/* The stdin write in progress. */
	const uint8_t *w;
	size_t w_len, w_sent;
	bool w_eof, w_active, wr_shut;
	engine_hijack_write_cb *w_cb;
	void *w_arg;
};

static void hijack_free(struct engine_hijack *h)
{
	if (h->set)
		LIST_REMOVE(h, entry);
	if (h->rev)
		event_free(h->rev);
	if (h->wev)
		event_free(h->wev);
	if (h->fd >= 0)
		close(h->fd);
	free(h->req);
	free(h->in);
	free(h);
}

/* The pending write ends (its cb, cleared first: it may start another). */
static void hijack_write_end(struct engine_hijack *h, int error)
{
	engine_hijack_write_cb *cb = h->w_cb;

	if (!h->w_active)
		return;
	h->w_active = false;
	h->w_cb = NULL;
	if (h->wev && h->state != HIJACK_CONNECTING && h->state != HIJACK_SENDING)
		event_del(h->wev);
	cb(error, h->w_sent, h->w_arg);
}

/* The one end: a pending write's cb, then done; frees h. */
static void hijack_finish(struct engine_hijack *h, int error)
{
	long status = h->head.status;
	const char *body = h->state == HIJACK_BODY && h->in ? (const char *)h->in : "";
	size_t body_len = h->state == HIJACK_BODY ? h->in_len : 0;

	bool streamed = h->state == HIJACK_STREAM;

	if (h->state == HIJACK_DONE)
		return;
	h->state = HIJACK_DONE;
	event_del(h->rev);
	event_del(h->wev);
	/* A write that never began: -EAGAIN when the request did not become a
	 * stream (the caller may start again and write there). */
	hijack_write_end(h, error < 0 ? error : streamed ? -EPIPE : -EAGAIN);
	if (h->in && body_len < h->in_cap)
		h->in[body_len] = '\0';
	h->done(error, error < 0 ? 0 : status, body, body_len, h->arg);
	hijack_free(h);
}

static int in_reserve(struct engine_hijack *h, size_t more)
{
	if (h->in_len + more + 1 <= h->in_cap)
		return 0;
	h->in_cap = h->in_len + more + 1;
	h->in = xrealloc(h->in, h->in_cap);
	return 0;
}

/* The head is whole: the stream or the refusal's body follows. */
static int hijack_head_done(struct engine_hijack *h)
{
	size_t rest = h->in_len - h->head.len;

	if (h->head.upgraded) {
		uint8_t *tail = rest ? h->in + h->head.len : NULL;
		int r = 0;

		/* An engine that switches protocols before it has our whole
		 * request would take the request's rest as the command's stdin:
		 * refuse it. */
		if (h->req_sent < h->req_len)
			return -EPROTO;

		h->state = HIJACK_STREAM;
		if (tail)
			r = h->data(tail, rest, h->arg);
		h->in_len = 0;
		if (r < 0)
			return r;
		if (h->w_active)
			event_add(h->wev, NULL);
		return 0;
	}
	h->state = HIJACK_BODY;
	memmove(h->in, h->in + h->head.len, rest);
	h->in_len = rest > ENGINE_HIJACK_MAX_ERROR_BODY ? ENGINE_HIJACK_MAX_ERROR_BODY : rest;
	h->body_seen = rest;
	return 0;
}

/* Reads what is there. Returns 1 when h ended (freed), else 0. */
static int hijack_read(struct engine_hijack *h)
{
	uint8_t buf[ENGINE_HIJACK_READ_BYTES];
	ssize_t n = recv(h->fd, buf, sizeof(buf), 0);
	int r;

	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return 0;
		hijack_finish(h, -errno);
		return 1;
	}
	if (n == 0) {
		if (h->state == HIJACK_STREAM || h->state == HIJACK_BODY) {
			hijack_finish(h, 0);
			return 1;
		}
		hijack_finish(h, -ECONNRESET);
		return 1;
	}
	switch (h->state) {
	case HIJACK_SENDING:
	case HIJACK_HEAD:
		in_reserve(h, (size_t)n);
		memcpy(h->in + h->in_len, buf, (size_t)n);
		h->in_len += (size_t)n;
		r = engine_hijack_parse_head(h->in, h->in_len, &h->head);
		if (r == 0)
			return 0;
		if (r > 0)
			r = hijack_head_done(h);
		break;
	case HIJACK_STREAM:
		r = h->data(buf, (size_t)n, h->arg);
		break;
	case HIJACK_BODY: {
		size_t k = h->in_len < ENGINE_HIJACK_MAX_ERROR_BODY ? ENGINE_HIJACK_MAX_ERROR_BODY - h->in_len : 0;

		k = (size_t)n < k ? (size_t)n : k;
		in_reserve(h, k);
		memcpy(h->in + h->in_len, buf, k);
		h->in_len += k;
		h->body_seen += (size_t)n;
		r = 0;
		break;
	}
	case HIJACK_CONNECTING:
	case HIJACK_DONE:
	default:
		r = -EPROTO;
	}
	if (r == 0 && h->state == HIJACK_BODY && h->head.content_length >= 0 &&
	    h->body_seen >= (unsigned long long)h->head.content_length) {
		hijack_finish(h, 0);
		return 1;
	}
	if (r < 0) {
		hijack_finish(h, r);
		return 1;
	}
	return 0;
}

static void hijack_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct engine_hijack *h = arg;

	(void)fd;
	(void)what;
	hijack_read(h);
}

/* Sends what is pending: the request, then (STREAM) stdin. */
static void hijack_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct engine_hijack *h = arg;
	ssize_t n;

	(void)fd;
	(void)what;
	if (h->state == HIJACK_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			hijack_finish(h, err == ENOENT || err == ECONNREFUSED ? -ECONNREFUSED : -err);
			return;
		}
		h->state = HIJACK_SENDING;
	}
	if (h->state == HIJACK_SENDING) {
		n = send(h->fd, h->req + h->req_sent, h->req_len - h->req_sent, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				hijack_finish(h, -errno);
			return;
		}
		h->req_sent += (size_t)n;
		if (h->req_sent < h->req_len)
			return;
		h->state = HIJACK_HEAD;
		event_del(h->wev);
		return;
	}
	if (h->state != HIJACK_STREAM || !h->w_active) {
		event_del(h->wev);
		return;
	}
	while (h->w_sent < h->w_len) {
		n = send(h->fd, h->w + h->w_sent, h->w_len - h->w_sent, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			h->wr_shut = true;
			hijack_write_end(h, errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno);
			return;
		}
		h->w_sent += (size_t)n;
	}
	if (h->w_eof) {
		shutdown(h->fd, SHUT_WR);
		h->wr_shut = true;
	}
	hijack_write_end(h, 0);
}

/* "http://host[:port]" (the endpoint's base_url) → the Host header's value. */
static const char *url_authority(const char *base_url)
{
	const char *p = strstr(base_url, "://");

	return p ? p + 3 : base_url;
}

static int hijack_connect_tcp(const char *authority, int *ret_fd)
{
	_cleanup_free_ char *host = xstrdup(authority);
	const char *port = "80";
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char *colon, *slash = strchr(host, '/');
	int fd, r;

	if (slash)
		*slash = '\0';
	if (host[0] == '[') {
		char *close_br = strchr(host, ']');

		if (!close_br)
			return -EINVAL;
		*close_br = '\0';
		if (close_br[1] == ':')
			port = close_br + 2;
		memmove(host, host + 1, strlen(host + 1) + 1);
	} else if ((colon = strrchr(host, ':'))) {
		*colon = '\0';
		port = colon + 1;
	}
	r = getaddrinfo(host, port, &hints, &ai);
	if (r != 0 || !ai)
		return -ECONNREFUSED;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(ai);
		return r;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
		r = -errno;
		freeaddrinfo(ai);
		close(fd);
		return r;
	}
	freeaddrinfo(ai);
	*ret_fd = fd;
	return 0;
}

static int hijack_connect_unix(const char *path, int *ret_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS && errno != EAGAIN) {
		r = errno == ENOENT ? -ECONNREFUSED : -errno;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

int engine_hijack_start(struct event_base *base, const struct engine_endpoint *ep, struct engine_hijack_set *set,
			const char *path, const char *body, engine_hijack_data_cb *data,
			engine_hijack_done_cb *done, void *arg, struct engine_hijack **ret)
{
	struct engine_hijack *h;
	int fd = -1, r;

	if (!base || !ep || !set || !path || path[0] != '/' || !body || !data || !done)
		return -EINVAL;
	if (ep->kind == ENGINE_ENDPOINT_TCP && ep->tls)
		return -EPROTONOSUPPORT;
	if (strpbrk(path, " \r\n"))
		return -EINVAL;
	r = ep->kind == ENGINE_ENDPOINT_UNIX ? hijack_connect_unix(ep->unix_path, &fd)
					     : hijack_connect_tcp(url_authority(ep->base_url), &fd);
	if (r < 0)
		return r;
	h = xcalloc(1, sizeof(*h));
	h->fd = fd;
	h->data = data;
	h->done = done;
	h->arg = arg;
	h->state = HIJACK_CONNECTING;
	h->head.content_length = -1;
	h->req = xasprintf("POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: maf-sandboxd\r\n"
			   "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			   "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n%s",
			   path, url_authority(ep->base_url), strlen(body), body);
	h->req_len = strlen(h->req);
	h->rev = event_new(base, fd, EV_READ | EV_PERSIST, hijack_read_cb, h);
	h->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, hijack_write_cb, h);
	if (!h->rev || !h->wev || event_add(h->rev, NULL) < 0 || event_add(h->wev, NULL) < 0) {
		hijack_free(h);
		return -ENOMEM;
	}
	h->set = set;
	LIST_INSERT_HEAD(&set->list, h, entry);
	if (ret)
		*ret = h;
	return 0;
}

int engine_hijack_write(struct engine_hijack *h, const void *p, size_t n, bool eof, engine_hijack_write_cb *cb,
			void *arg)
{
	if (!h || (!p && n) || !cb)
		return -EINVAL;
	if (h->state == HIJACK_DONE || h->wr_shut)
		return -EPIPE;
	if (h->w_active)
		return -EBUSY;
	h->w = p;
	h->w_len = n;
	h->w_sent = 0;
	h->w_eof = eof;
	h->w_cb = cb;
	h->w_arg = arg;
	h->w_active = true;
	/* Before the upgrade the bytes wait (hijack_head_done adds the event). */
	if (h->state == HIJACK_STREAM)
		event_add(h->wev, NULL);
	return 0;
}

void engine_hijack_cancel(struct engine_hijack *h)
{
	if (h)
		hijack_finish(h, -ECANCELED);
}

void engine_hijack_set_cancel_all(struct engine_hijack_set *set)
{
	while (!LIST_EMPTY(&set->list))
		engine_hijack_cancel(LIST_FIRST(&set->list));
}
