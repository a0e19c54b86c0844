/* fake_engine.c — see fake_engine.h. Blocking I/O in threads; every wait
 * also polls a stop pipe, so fake_engine_stop() never hangs. */
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <stdarg.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake_engine.h"

#define FAKE_DEFAULT_CHUNK 8

struct fake_conn {
	int fd;
	unsigned number;
	pthread_t thread;
	char *buf;
	size_t len;
	bool gone;  /* counted in peer_gone */
};

static struct {
	char dir[256];
	char path[300];
	int listen_fd;
	int stop_pipe[2];
	bool running;
	pthread_t accept_thread;
	pthread_mutex_t lock;
	const struct fake_reply *script;
	size_t script_n;
	bool used[256];
	struct fake_request requests[FAKE_MAX_REQUESTS];
	size_t nrequests;
	struct fake_conn *conns[FAKE_MAX_CONNECTIONS];
	unsigned nconns;
	unsigned peer_gone;
	unsigned abandoned;
} fake = { .listen_fd = -1, .stop_pipe = { -1, -1 }, .lock = PTHREAD_MUTEX_INITIALIZER };

static void die(const char *what)
{
	fprintf(stderr, "fake engine: %s: %s\n", what, strerror(errno));
	abort();
}

/* Waits up to ms (-1: forever) for fd to be readable. Returns 1 if it is,
 * 0 on timeout, -1 when stopping. */
static int wait_readable(int fd, int ms)
{
	struct pollfd p[2] = { { .fd = fake.stop_pipe[0], .events = POLLIN }, { .fd = fd, .events = POLLIN } };
	int n = fd >= 0 ? 2 : 1;

	for (;;) {
		int r = poll(p, (nfds_t)n, ms);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("poll");
		if (p[0].revents)
			return -1;
		return r > 0 ? 1 : 0;
	}
}

/* Sleeps ms, or less when stopping. Returns -1 when stopping. */
static int fake_sleep(int ms)
{
	if (ms <= 0)
		return 0;
	return wait_readable(-1, ms) < 0 ? -1 : 0;
}

/* The client went away on c: counted once; abandoned: with its reply
 * not (wholly) sent. */
static void peer_gone(struct fake_conn *c, bool abandoned)
{
	pthread_mutex_lock(&fake.lock);
	if (!c->gone) {
		fake.peer_gone++;
		fake.abandoned += abandoned;
	}
	c->gone = true;
	pthread_mutex_unlock(&fake.lock);
}

/* A reply's delay: ms, or less when stopping (-1) or when the client goes
 * away meanwhile (-1, counted as abandoned). */
static int delay_watching(struct fake_conn *c, int ms)
{
	struct timespec t0, t;

	if (ms <= 0)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		long left;
		char b;
		int r;

		clock_gettime(CLOCK_MONOTONIC, &t);
		left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			return 0;
		r = wait_readable(c->fd, (int)left);
		if (r < 0)
			return -1;
		if (r == 0)
			return 0;
		if (recv(c->fd, &b, 1, MSG_PEEK) <= 0) {
			peer_gone(c, true);
			return -1;
		}
		return fake_sleep((int)left);   /* bytes, not an end: sleep the rest */
	}
}

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- building replies ---------------------------------------------------- */

struct out {
	char *p;
	size_t n, cap;
};

static void out_add(struct out *o, const void *p, size_t n)
{
	if (o->n + n + 1 > o->cap) {
		o->cap = (o->n + n + 1) * 2;
		o->p = realloc(o->p, o->cap);
		if (!o->p)
			die("realloc");
	}
	memcpy(o->p + o->n, p, n);
	o->n += n;
	o->p[o->n] = '\0';
}

static void out_printf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out_printf(struct out *o, const char *fmt, ...)
{
	char tmp[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	out_add(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static const char *status_text(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 409: return "Conflict";
	case 500: return "Internal Server Error";
	default: return "Status";
	}
}

static size_t body_len(const struct fake_reply *r)
{
	if (!r->body)
		return 0;
	return r->body_len ? r->body_len : strlen(r->body);
}

static void build_head(const struct fake_reply *r, struct out *o)
{
	int status = r->status ? r->status : 200;
	size_t len = body_len(r);

	out_printf(o, "HTTP/1.1 %d %s\r\nServer: fake-engine\r\n", status, status_text(status));
	if (r->headers)
		out_add(o, r->headers, strlen(r->headers));
	if (r->chunked)
		out_printf(o, "Transfer-Encoding: chunked\r\n");
	else
		out_printf(o, "Content-Length: %zu\r\n", len + (r->stall ? 1 : 0));
	if (r->close)
		out_printf(o, "Connection: close\r\n");
	out_printf(o, "\r\n");
}

/* The whole reply as bytes (chunks included), for close_after_bytes. */
static void build_full(const struct fake_reply *r, struct out *o)
{
	size_t len = body_len(r), step = r->chunk_size ? r->chunk_size : FAKE_DEFAULT_CHUNK;

	build_head(r, o);
	if (!r->chunked) {
		out_add(o, r->body ? r->body : "", len);
		return;
	}
	for (size_t off = 0; off < len; off += step) {
		size_t k = len - off < step ? len - off : step;

		out_printf(o, "%zx\r\n", k);
		out_add(o, r->body + off, k);
		out_printf(o, "\r\n");
	}
	if (!r->stall)
		out_printf(o, "0\r\n\r\n");
}

/* ---- serving --------------------------------------------------------------- */

/* Sends the chunks one by one, chunk_delay_ms apart. */
static int send_chunked(int fd, const struct fake_reply *r)
{
	size_t len = body_len(r), step = r->chunk_size ? r->chunk_size : FAKE_DEFAULT_CHUNK;
	struct out o = { 0 };
	int rc = 0;

	build_head(r, &o);
	rc = send_all(fd, o.p, o.n);
	for (size_t off = 0; rc == 0 && off < len; off += step) {
		size_t k = len - off < step ? len - off : step;

		o.n = 0;
		if (off > 0 && fake_sleep(r->chunk_delay_ms) < 0)
			rc = -1;
		out_printf(&o, "%zx\r\n", k);
		out_add(&o, r->body + off, k);
		out_printf(&o, "\r\n");
		if (rc == 0)
			rc = send_all(fd, o.p, o.n);
	}
	if (rc == 0 && !r->stall)
		rc = send_all(fd, "0\r\n\r\n", 5);
	free(o.p);
	return rc;
}

/* Returns 0 to keep the connection, -1 to close it. idx: the request's
 * record (FAKE_MAX_REQUESTS or more: none), stamped with replied_us. */
static int send_reply(struct fake_conn *c, const struct fake_reply *r, size_t idx)
{
	struct out o = { 0 };
	int fd = c->fd;
	int rc;

	if (delay_watching(c, r->delay_ms) < 0)
		return -1;
	pthread_mutex_lock(&fake.lock);
	if (idx < FAKE_MAX_REQUESTS)
		fake.requests[idx].replied_us = now_us();
	pthread_mutex_unlock(&fake.lock);
	if (r->raw) {
		send_all(fd, r->raw, strlen(r->raw));
		return -1;
	}
	if (r->chunked && r->close_after_bytes <= 0) {
		rc = send_chunked(fd, r);
	} else {
		build_full(r, &o);
		if (r->close_after_bytes > 0 && (size_t)r->close_after_bytes < o.n)
			o.n = (size_t)r->close_after_bytes;
		rc = send_all(fd, o.p, o.n);
		free(o.p);
		if (r->close_after_bytes > 0)
			return -1;
	}
	if (rc < 0) {
		peer_gone(c, true);
		return -1;
	}
	if (r->stall) {
		/* Until the client goes away or the fake stops. */
		while (wait_readable(fd, -1) > 0) {
			char b[256];

			if (recv(fd, b, sizeof(b), 0) <= 0) {
				peer_gone(c, true);
				break;
			}
		}
		return -1;
	}
	return r->close ? -1 : 0;
}

static bool header_find(const char *headers, const char *name, char *out, size_t outlen)
{
	size_t nlen = strlen(name);

	for (const char *p = headers; p && *p; ) {
		const char *eol = strstr(p, "\r\n");
		size_t llen = eol ? (size_t)(eol - p) : strlen(p);

		if (llen > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
			const char *v = p + nlen + 1;
			size_t vlen = llen - nlen - 1;

			while (vlen > 0 && (*v == ' ' || *v == '\t')) {
				v++;
				vlen--;
			}
			if (outlen > 0)
				snprintf(out, outlen, "%.*s", (int)vlen, v);
			return true;
		}
		p = eol ? eol + 2 : NULL;
	}
	return false;
}

/* One complete request at buf → its size (recorded into *req), 0 if more
 * bytes are needed, -1 if it cannot be parsed. */
static long parse_request(const char *buf, size_t len, struct fake_request *req)
{
	const char *end, *eol;
	char cl[32], line[2100];
	size_t head, body = 0;

	if (!buf || len == 0)
		return 0;
	end = memmem(buf, len, "\r\n\r\n", 4);
	if (!end)
		return len > FAKE_MAX_REQUEST_BYTES ? -1 : 0;
	eol = memmem(buf, len, "\r\n", 2);
	/* The buffer is not NUL-terminated: scan a copy of the request line. */
	if ((size_t)(eol - buf) >= sizeof(line))
		return -1;
	memcpy(line, buf, (size_t)(eol - buf));
	line[eol - buf] = '\0';
	if (sscanf(line, "%15s %2047s", req->method, req->path) != 2)
		return -1;
	head = (size_t)(end - buf) + 4;
	req->headers = strndup(eol + 2, (size_t)(end + 2 - (eol + 2)));
	if (header_find(req->headers, "Content-Length", cl, sizeof(cl)))
		body = strtoul(cl, NULL, 10);
	if (body > FAKE_MAX_REQUEST_BYTES)
		return -1;
	if (len < head + body) {
		free(req->headers);
		req->headers = NULL;
		return 0;
	}
	req->body = malloc(body + 1);
	if (!req->body)
		die("malloc");
	memcpy(req->body, buf + head, body);
	req->body[body] = '\0';
	req->body_len = body;
	return (long)(head + body);
}

static bool reply_matches(const struct fake_reply *r, const struct fake_request *req)
{
	if (r->method && strcmp(r->method, req->method) != 0)
		return false;
	return !r->path || strncmp(req->path, r->path, strlen(r->path)) == 0;
}

/* Records the request (taking its strings; *ret_idx: its record, or
 * FAKE_MAX_REQUESTS when not recorded) and picks its reply, or NULL. */
static const struct fake_reply *record_and_match(struct fake_request *req, size_t *ret_idx)
{
	const struct fake_reply *found = NULL;

	pthread_mutex_lock(&fake.lock);
	for (size_t i = 0; i < fake.script_n && !found; i++) {
		if ((fake.used[i] && !fake.script[i].repeat) || !reply_matches(&fake.script[i], req))
			continue;
		fake.used[i] = true;
		found = &fake.script[i];
	}
	*ret_idx = FAKE_MAX_REQUESTS;
	if (fake.nrequests < FAKE_MAX_REQUESTS) {
		*ret_idx = fake.nrequests;
		fake.requests[fake.nrequests++] = *req;
	} else {
		free(req->headers);
		free(req->body);
	}
	pthread_mutex_unlock(&fake.lock);
	return found;
}

static int conn_read(struct fake_conn *c)
{
	ssize_t n;

	if (wait_readable(c->fd, -1) <= 0)
		return -1;
	if (c->len + 65536 > FAKE_MAX_REQUEST_BYTES * 2)
		return -1;
	c->buf = realloc(c->buf, c->len + 65536);
	if (!c->buf)
		die("realloc");
	n = recv(c->fd, c->buf + c->len, 65536, 0);
	if (n <= 0) {
		peer_gone(c, false);
		return -1;
	}
	c->len += (size_t)n;
	return 0;
}

static int serve_one(struct fake_conn *c, struct fake_request *req)
{
	const struct fake_reply *r;
	size_t idx;
	char body[2300];
	struct fake_reply not_found = { .status = 404, .body = body,
					.headers = "Content-Type: application/json\r\n" };

	req->conn = c->number;
	req->at_us = now_us();
	snprintf(body, sizeof(body), "{\"message\":\"fake engine: no reply for %s %s\"}", req->method,
		 req->path);
	r = record_and_match(req, &idx);
	return send_reply(c, r ? r : &not_found, idx);
}

static void *conn_main(void *arg)
{
	struct fake_conn *c = arg;

	for (;;) {
		struct fake_request req = { 0 };
		long used = parse_request(c->buf, c->len, &req);

		if (used < 0)
			break;
		if (used == 0) {
			if (conn_read(c) < 0)
				break;
			continue;
		}
		memmove(c->buf, c->buf + used, c->len - (size_t)used);
		c->len -= (size_t)used;
		if (serve_one(c, &req) < 0)
			break;
	}
	close(c->fd);
	c->fd = -1;
	return NULL;
}

static void *accept_main(void *arg)
{
	while (wait_readable(fake.listen_fd, -1) > 0) {
		int fd = accept4(fake.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		struct fake_conn *c;

		if (fd < 0)
			continue;
		if (fake.nconns == FAKE_MAX_CONNECTIONS) {
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c)
			die("calloc");
		c->fd = fd;
		pthread_mutex_lock(&fake.lock);
		c->number = ++fake.nconns;
		fake.conns[c->number - 1] = c;
		pthread_mutex_unlock(&fake.lock);
		if (pthread_create(&c->thread, NULL, conn_main, c) != 0)
			die("pthread_create");
	}
	return NULL;
}

/* A counter of the fake's, read under its lock. */
static unsigned locked_count(const unsigned *counter)
{
	unsigned n;

	pthread_mutex_lock(&fake.lock);
	n = *counter;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

unsigned fake_engine_peer_gone_count(void)
{
	return locked_count(&fake.peer_gone);
}

unsigned fake_engine_abandoned_count(void)
{
	return locked_count(&fake.abandoned);
}

/* ---- control ------------------------------------------------------------------ */

const char *fake_engine_socket_path(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!fake.dir[0]) {
		snprintf(fake.dir, sizeof(fake.dir), "%s/fake-engine-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(fake.dir))
			die("mkdtemp");
		snprintf(fake.path, sizeof(fake.path), "%s/engine.sock", fake.dir);
		if (strlen(fake.path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
			errno = ENAMETOOLONG;
			die(fake.path);
		}
	}
	return fake.path;
}

static void records_reset(void)
{
	for (size_t i = 0; i < fake.nrequests; i++) {
		free(fake.requests[i].headers);
		free(fake.requests[i].body);
	}
	memset(fake.requests, 0, sizeof(fake.requests));
	fake.nrequests = 0;
}

const char *fake_engine_start(const struct fake_reply *script, size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (fake.running || n > sizeof(fake.used))
		abort();
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fake_engine_socket_path());
	records_reset();
	memset(fake.used, 0, sizeof(fake.used));
	fake.script = script;
	fake.script_n = n;
	fake.nconns = 0;
	fake.peer_gone = 0;
	fake.abandoned = 0;
	if (pipe2(fake.stop_pipe, O_CLOEXEC) < 0)
		die("pipe2");
	fake.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fake.listen_fd < 0)
		die("socket");
	unlink(sa.sun_path);
	if (bind(fake.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fake.listen_fd, 16) < 0)
		die("bind/listen");
	if (pthread_create(&fake.accept_thread, NULL, accept_main, NULL) != 0)
		die("pthread_create");
	fake.running = true;
	return fake.path;
}

void fake_engine_stop(void)
{
	if (!fake.running)
		return;
	if (write(fake.stop_pipe[1], "x", 1) != 1)
		die("write");
	pthread_join(fake.accept_thread, NULL);
	for (unsigned i = 0; i < fake.nconns; i++) {
		pthread_join(fake.conns[i]->thread, NULL);
		free(fake.conns[i]->buf);
		free(fake.conns[i]);
		fake.conns[i] = NULL;
	}
	close(fake.listen_fd);
	fake.listen_fd = -1;
	close(fake.stop_pipe[0]);
	close(fake.stop_pipe[1]);
	fake.stop_pipe[0] = fake.stop_pipe[1] = -1;
	unlink(fake.path);
	fake.running = false;
}

void fake_engine_cleanup(void)
{
	fake_engine_stop();
	records_reset();
	if (fake.dir[0]) {
		unlink(fake.path);
		rmdir(fake.dir);
		fake.dir[0] = '\0';
		fake.path[0] = '\0';
	}
}

size_t fake_engine_request_count(void)
{
	size_t n;

	pthread_mutex_lock(&fake.lock);
	n = fake.nrequests;
	pthread_mutex_unlock(&fake.lock);
	return n;
}

const struct fake_request *fake_engine_request(size_t i)
{
	const struct fake_request *r = NULL;

	pthread_mutex_lock(&fake.lock);
	if (i < fake.nrequests)
		r = &fake.requests[i];
	pthread_mutex_unlock(&fake.lock);
	return r;
}

unsigned fake_engine_connection_count(void)
{
	return locked_count(&fake.nconns);
}

bool fake_request_header(const struct fake_request *r, const char *name, char *out, size_t outlen)
{
	return r && header_find(r->headers, name, out, outlen);
}

/* ---- the test program's directory ------------------------------------------ */

static char run_dir[256];

void fake_run_dir_create(const char *prefix)
{
	snprintf(run_dir, sizeof(run_dir), "/tmp/%s-XXXXXX", prefix);
	if (!mkdtemp(run_dir))
		die("mkdtemp");
	if (setenv("TMPDIR", run_dir, 1) < 0)
		die("setenv");
}

static int remove_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

void fake_run_dir_remove(void)
{
	if (run_dir[0])
		nftw(run_dir, remove_cb, 16, FTW_DEPTH | FTW_PHYS);
	run_dir[0] = '\0';
}
