/* check_proxy_e2e.c — the built maf-sandbox-egress-proxy ($MSB_PROXY), end to
 * end, on loopback only: the readiness line, a tunnel with bytes both ways
 * and half-close, back-pressure on a large echo, every decision and its
 * reply, no decision line for a 400 nor for a 405 without a target (a
 * plain-HTTP request naming one is a DENY ... not-CONNECT), the exact stdout, and exit 0 on
 * SIGTERM. Names resolve through a fake DNS server on 127.0.0.1 that the
 * proxy is pointed at with MAF_SANDBOX_PROXY_RESOLV_CONF; nothing leaves
 * the machine. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "../fakes/slow.h"   /* test_slow_factor(); this suite is not built with tests/fakes */

#define IO_TIMEOUT_MS (3000 * test_slow_factor())   /* hang guard on every wait for a peer */
#define START_TRIES 5
#define LINE_MAX_BYTES 1024
#define MAX_LINES 32
#define ECHO_BYTES (4 * 1024 * 1024)

static const char reply_200[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
static const char reply_400[] = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
static const char reply_403[] = "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n";
static const char reply_405[] = "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n";
static const char reply_502[] = "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n";

/* ---- sockets ------------------------------------------------------------------ */

static uint16_t local_port(int fd)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);

	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	return ntohs(sin.sin_port);
}

/* A socket bound to addr:0 (type SOCK_STREAM listens). */
static int bound_socket(int type, in_addr_t addr)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = addr };
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	if (type == SOCK_STREAM)
		ck_assert_int_eq(listen(fd, 16), 0);
	return fd;
}

/* A port nothing listens on right now (the proxy binds 0.0.0.0). */
static uint16_t free_port(void)
{
	int fd = bound_socket(SOCK_DGRAM, htonl(INADDR_ANY));
	uint16_t port = local_port(fd);

	close(fd);
	return port;
}

static void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = IO_TIMEOUT_MS / 1000 };

	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
}

/* A connection to addr:port (host order), or -errno. */
static int connect_addr(uint32_t addr, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(addr) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

	ck_assert_int_ge(fd, 0);
	r = connect(fd, (struct sockaddr *)&sin, sizeof(sin));
	if (r < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	set_timeouts(fd);
	return fd;
}

static int connect_to(uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	set_timeouts(fd);
	return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void send_str(int fd, const char *s)
{
	send_all(fd, s, strlen(s));
}

/* Reads exactly len bytes and checks them. */
static void recv_expect(int fd, const char *want, size_t len)
{
	_cleanup_free_ char *got = malloc(len + 1);
	size_t have = 0;

	ck_assert_ptr_nonnull(got);
	while (have < len) {
		ssize_t n = recv(fd, got + have, len - have, 0);

		ck_assert_msg(n > 0, "recv after %zu of %zu bytes: %s", have, len,
			      n == 0 ? "EOF" : strerror(errno));
		have += (size_t)n;
	}
	got[len] = '\0';
	ck_assert_msg(memcmp(got, want, len) == 0, "got \"%s\", want \"%.*s\"", got, (int)len, want);
}

static void recv_expect_str(int fd, const char *want)
{
	recv_expect(fd, want, strlen(want));
}

static void recv_eof(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, 0);

	ck_assert_msg(n == 0, "want EOF, got %zd (%s)", n, n < 0 ? strerror(errno) : "data");
}

/* Accepts one connection within the timeout (-1 when none came). */
static int accept_within(int lfd, int ms)
{
	struct pollfd pfd = { .fd = lfd, .events = POLLIN };
	int fd;

	if (poll(&pfd, 1, ms) != 1)
		return -1;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	set_timeouts(fd);
	return fd;
}

/* One request on its own connection: the whole reply, then EOF. */
static void request_expect(uint16_t proxy_port, const char *req, size_t req_len,
			   const char *reply)
{
	int fd = connect_to(proxy_port);

	send_all(fd, req, req_len);
	recv_expect_str(fd, reply);
	recv_eof(fd);
	close(fd);
}

static void connect_expect(uint16_t proxy_port, const char *target, const char *reply)
{
	char req[512];

	snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
	request_expect(proxy_port, req, strlen(req), reply);
}

/* ---- a fake DNS server on 127.0.0.1 -------------------------------------------------- */

struct dns {
	int fd;
	uint16_t port;
	int stop[2];            /* a pipe: writing to it stops the thread */
	pthread_t thread;
	char dir[64];           /* holds resolv.conf */
	char resolv[96];
};

/* The question's name, lower-cased and dotted, and where the question ends. */
static size_t dns_qname(const unsigned char *q, size_t len, char *out, size_t cap)
{
	size_t i = 12, o = 0;

	while (i < len && q[i] != 0) {
		size_t l = q[i++];

		if (l > 63 || i + l > len || o + l + 2 > cap)
			return 0;
		if (o)
			out[o++] = '.';
		for (size_t k = 0; k < l; k++) {
			char c = (char)q[i + k];

			out[o++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
		}
		i += l;
	}
	out[o] = '\0';
	return i + 5 <= len ? i + 5 : 0;   /* the 0, QTYPE, QCLASS */
}

/* ok.test has A 127.0.0.1 and no AAAA; every other name does not exist. */
static size_t dns_answer(const unsigned char *q, size_t len, unsigned char *r, size_t cap)
{
	static const unsigned char a_rr[] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4,
					      127, 0, 0, 1 };
	char name[256];
	size_t end = dns_qname(q, len, name, sizeof(name));
	bool known, is_a;

	if (end == 0 || end + sizeof(a_rr) > cap)
		return 0;
	known = strcmp(name, "ok.test") == 0;
	is_a = q[end - 4] == 0 && q[end - 3] == 1;
	memcpy(r, q, end);
	r[2] = 0x81;                        /* QR, RD */
	r[3] = known ? 0x80 : 0x83;         /* RA; NXDOMAIN for the unknown */
	memset(r + 6, 0, 6);                /* AN, NS, AR */
	r[5] = 1;
	if (!known || !is_a)
		return end;
	r[7] = 1;
	memcpy(r + end, a_rr, sizeof(a_rr));
	return end + sizeof(a_rr);
}

static void *dns_thread(void *arg)
{
	struct dns *d = arg;

	for (;;) {
		struct pollfd pfd[2] = { { .fd = d->fd, .events = POLLIN },
					 { .fd = d->stop[0], .events = POLLIN } };
		unsigned char q[512], r[600];
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		ssize_t n;
		size_t rn;

		if (poll(pfd, 2, -1) < 0 || pfd[1].revents)
			return NULL;
		n = recvfrom(d->fd, q, sizeof(q), 0, (struct sockaddr *)&from, &flen);
		if (n < 12)
			continue;
		rn = dns_answer(q, (size_t)n, r, sizeof(r));
		if (rn)
			sendto(d->fd, r, rn, 0, (struct sockaddr *)&from, flen);
	}
}

static void dns_start(struct dns *d)
{
	FILE *f;

	d->fd = bound_socket(SOCK_DGRAM, htonl(INADDR_LOOPBACK));
	d->port = local_port(d->fd);
	ck_assert_int_eq(pipe2(d->stop, O_CLOEXEC), 0);
	snprintf(d->dir, sizeof(d->dir), "/tmp/msb-proxy-e2e-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->resolv, sizeof(d->resolv), "%s/resolv.conf", d->dir);
	f = fopen(d->resolv, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "nameserver 127.0.0.1:%u\noptions timeout:1 attempts:1\n", (unsigned)d->port);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(pthread_create(&d->thread, NULL, dns_thread, d), 0);
}

static void dns_stop(struct dns *d)
{
	ck_assert_int_eq(write(d->stop[1], "x", 1), 1);
	pthread_join(d->thread, NULL);
	close(d->stop[0]);
	close(d->stop[1]);
	close(d->fd);
	unlink(d->resolv);
	rmdir(d->dir);
}

/* ---- the proxy process ------------------------------------------------------------------ */

struct proxy {
	pid_t pid;
	int out;                /* its stdout */
	uint16_t port;
	long idle_ms;           /* > 0: MAF_SANDBOX_PROXY_IDLE_MS */
	const char *listen;     /* MAF_SANDBOX_PROXY_LISTEN, or NULL */
	char buf[LINE_MAX_BYTES];
	size_t have;
};

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

/* One line of the proxy's stdout without its LF; false at EOF. */
static bool proxy_line(struct proxy *p, char *line, size_t cap)
{
	for (;;) {
		char *nl = memchr(p->buf, '\n', p->have);
		struct pollfd pfd = { .fd = p->out, .events = POLLIN };
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - p->buf);

			ck_assert_uint_lt(len, cap);
			memcpy(line, p->buf, len);
			line[len] = '\0';
			memmove(p->buf, nl + 1, p->have - len - 1);
			p->have -= len + 1;
			return true;
		}
		ck_assert_msg(p->have < sizeof(p->buf), "a proxy line is too long");
		ck_assert_msg(poll(&pfd, 1, IO_TIMEOUT_MS) == 1, "the proxy printed nothing");
		n = read(p->out, p->buf + p->have, sizeof(p->buf) - p->have);
		ck_assert_int_ge(n, 0);
		if (n == 0) {
			ck_assert_msg(p->have == 0, "the proxy's last line has no LF");
			return false;
		}
		p->have += (size_t)n;
	}
}

static void proxy_spawn(struct proxy *p, const char *allow, const char *private_allow,
			const char *resolv)
{
	const char *path = getenv("MSB_PROXY");
	char e_allow[2048], e_port[64], e_priv[256], e_resolv[256], e_idle[64], e_listen[96];
	char *envp[7] = { NULL };
	char *argv[] = { (char *)"maf-sandbox-egress-proxy", NULL };
	size_t n = 0;
	int fds[2];

	ck_assert_msg(path != NULL, "MSB_PROXY is not set");
	snprintf(e_port, sizeof(e_port), "MAF_SANDBOX_PROXY_PORT=%u", (unsigned)p->port);
	envp[n++] = e_port;
	if (allow) {
		snprintf(e_allow, sizeof(e_allow), "MAF_SANDBOX_ALLOW=%s", allow);
		envp[n++] = e_allow;
	}
	if (private_allow) {
		snprintf(e_priv, sizeof(e_priv), "MAF_SANDBOX_PRIVATE_ALLOW=%s", private_allow);
		envp[n++] = e_priv;
	}
	if (resolv) {
		snprintf(e_resolv, sizeof(e_resolv), "MAF_SANDBOX_PROXY_RESOLV_CONF=%s", resolv);
		envp[n++] = e_resolv;
	}
	if (p->idle_ms) {
		snprintf(e_idle, sizeof(e_idle), "MAF_SANDBOX_PROXY_IDLE_MS=%ld", p->idle_ms);
		envp[n++] = e_idle;
	}
	if (p->listen) {
		snprintf(e_listen, sizeof(e_listen), "MAF_SANDBOX_PROXY_LISTEN=%s", p->listen);
		envp[n++] = e_listen;
	}
	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		/* A failed test must not leave the proxy behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fds[1], STDOUT_FILENO);
		execve(path, argv, envp);
		_exit(127);
	}
	close(fds[1]);
	p->out = fds[0];
	p->have = 0;
}

/* Waits for the proxy to end; returns its wait status. */
static int proxy_wait(struct proxy *p)
{
	int status = 0;

	ck_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
	close(p->out);
	p->pid = -1;
	return status;
}

/* Starts the proxy on a free port and checks its readiness line. */
static void proxy_start(struct proxy *p, const char *allow, const char *private_allow,
			const char *resolv, const char *shown)
{
	char line[LINE_MAX_BYTES], want[LINE_MAX_BYTES];

	for (int i = 0; i < START_TRIES; i++) {
		p->port = free_port();
		proxy_spawn(p, allow, private_allow, resolv);
		if (proxy_line(p, line, sizeof(line))) {
			snprintf(want, sizeof(want), "listening on %u; allowing: %s",
				 (unsigned)p->port, shown);
			ck_assert_str_eq(line, want);
			return;
		}
		proxy_wait(p);  /* the port was taken meanwhile: try another */
	}
	ck_abort_msg("the proxy never reported listening");
}

/* SIGTERM; the rest of stdout must be exactly want (NULL-terminated); exit 0. */
static void proxy_stop_expect(struct proxy *p, const char *const *want)
{
	char line[LINE_MAX_BYTES];
	size_t n = 0;
	int status;

	ck_assert_int_eq(kill(p->pid, SIGTERM), 0);
	while (proxy_line(p, line, sizeof(line))) {
		ck_assert_msg(want[n] != NULL, "unexpected line \"%s\"", line);
		ck_assert_str_eq(line, want[n]);
		n++;
	}
	ck_assert_msg(want[n] == NULL, "missing line \"%s\"", want[n]);
	status = proxy_wait(p);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "proxy status %#x", status);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static struct dns dns;
static int target_fd = -1;     /* a listener on 127.0.0.1 the proxy may reach */
static uint16_t target_port;
static struct proxy proxy = { .pid = -1 };
static char allow_list[512];

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	dns_start(&dns);
	target_fd = bound_socket(SOCK_STREAM, htonl(INADDR_LOOPBACK));
	target_port = local_port(target_fd);
	snprintf(allow_list, sizeof(allow_list), "127.0.0.1:%u, ok.test:%u,nx.test:%u",
		 (unsigned)target_port, (unsigned)target_port, (unsigned)target_port);
}

static void teardown(void)
{
	if (proxy.pid > 0) {
		kill(proxy.pid, SIGKILL);
		proxy_wait(&proxy);
	}
	close(target_fd);
	dns_stop(&dns);
}

static const char *shown_allow(void)
{
	static char shown[512];

	snprintf(shown, sizeof(shown), "127.0.0.1:%u, ok.test:%u, nx.test:%u",
		 (unsigned)target_port, (unsigned)target_port, (unsigned)target_port);
	return shown;
}

static void target(char *buf, size_t size, const char *host)
{
	snprintf(buf, size, "%s:%u", host, (unsigned)target_port);
}

/* ---- tests ------------------------------------------------------------------------------- */

/* CONNECT, the 200, bytes both ways (those sent with the head too), then
 * half-close in each direction. */
START_TEST(test_tunnel)
{
	char req[256], line[96];
	const char *const want[] = { line, NULL };
	int c, t;

	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.1\r\nHost: x\r\n\r\nearly",
		 (unsigned)target_port);
	c = connect_to(proxy.port);
	send_str(c, req);
	t = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(t, 0);
	recv_expect_str(c, reply_200);
	recv_expect_str(t, "early");
	send_str(c, "ping");
	recv_expect_str(t, "ping");
	send_str(t, "pong");
	recv_expect_str(c, "pong");
	/* The client is done sending: the target sees EOF, and can still talk. */
	ck_assert_int_eq(shutdown(c, SHUT_WR), 0);
	recv_eof(t);
	send_str(t, "late");
	recv_expect_str(c, "late");
	close(t);
	recv_eof(c);
	close(c);
	snprintf(line, sizeof(line), "ALLOW 127.0.0.1:%u", (unsigned)target_port);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* A tunnel idle for MAF_SANDBOX_PROXY_IDLE_MS is closed; traffic keeps it
 * open. The traffic lasts more than twice the limit, a byte every fifth of
 * it (both stretched under valgrind): a gap would have to grow fivefold on
 * a loaded machine to close the tunnel early (a hang guard margin, not a
 * window asserted). Then silence: both ends see the close, and no sooner
 * than the limit after the last byte was sent (not early). */
#define IDLE_TUNNEL_MS     250
#define IDLE_TUNNEL_ROUNDS (2 * 5 + 2)

START_TEST(test_idle_tunnel_is_closed)
{
	char req[256], line[96];
	const char *const want[] = { line, NULL };
	const long idle_ms = (long)IDLE_TUNNEL_MS * test_slow_factor();
	long t0 = 0;
	int c, t;

	proxy.idle_ms = idle_ms;
	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", (unsigned)target_port);
	c = connect_to(proxy.port);
	send_str(c, req);
	t = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(t, 0);
	recv_expect_str(c, reply_200);
	for (int i = 0; i < IDLE_TUNNEL_ROUNDS; i++) {
		usleep((useconds_t)(idle_ms / 5) * 1000);
		t0 = now_ms();
		send_str(c, "x");
		recv_expect_str(t, "x");
	}
	recv_eof(t);   /* then nothing: both sides are closed */
	recv_eof(c);
	/* not early: the proxy's libevent timer runs on a coarse clock */
	ck_assert_int_ge(now_ms() - t0, idle_ms - TEST_TIMER_SLACK_MS);
	close(t);
	close(c);
	snprintf(line, sizeof(line), "ALLOW 127.0.0.1:%u", (unsigned)target_port);
	proxy_stop_expect(&proxy, want);
	proxy.idle_ms = 0;
}
END_TEST

/* MAF_SANDBOX_PROXY_LISTEN: that address only (the daemon gives it the
 * proxy's address on its sandbox's network, not the outbound leg's). */
START_TEST(test_listen_address_only)
{
	const char *const want[] = { NULL };
	int fd;

	proxy.listen = "127.0.0.2";
	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	fd = connect_addr(0x7f000002, proxy.port);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(connect_addr(0x7f000001, proxy.port), -ECONNREFUSED);
	proxy_stop_expect(&proxy, want);
	proxy.listen = NULL;
}
END_TEST

/* The other direction first: the target closes, the client still sends. */
START_TEST(test_half_close_upstream)
{
	char req[256], line[96];
	const char *const want[] = { line, NULL };
	int c, t;

	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%u HTTP/1.0\r\n\r\n", (unsigned)target_port);
	c = connect_to(proxy.port);
	send_str(c, req);
	t = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(t, 0);
	recv_expect_str(c, reply_200);
	send_str(t, "bye");
	ck_assert_int_eq(shutdown(t, SHUT_WR), 0);
	recv_expect_str(c, "bye");
	recv_eof(c);
	send_str(c, "still here");
	recv_expect_str(t, "still here");
	close(c);
	recv_eof(t);
	close(t);
	snprintf(line, sizeof(line), "ALLOW 127.0.0.1:%u", (unsigned)target_port);
	proxy_stop_expect(&proxy, want);
}
END_TEST

struct echo {
	int fd;
	size_t bytes;
};

/* Echoes until EOF, in small reads with pauses, so the proxy's buffers fill. */
static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	char buf[8192];
	ssize_t n;

	while ((n = recv(e->fd, buf, sizeof(buf), 0)) > 0) {
		if (send(e->fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
			break;
		e->bytes += (size_t)n;
	}
	shutdown(e->fd, SHUT_WR);
	return NULL;
}

/* Writes ECHO_BYTES and reads them back at once, so both directions run
 * through back-pressure; every byte must come back in order. */
static void pump(int c)
{
	_cleanup_free_ unsigned char *out = malloc(ECHO_BYTES), *in = malloc(ECHO_BYTES);
	size_t sent = 0, got = 0;

	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(in);
	for (size_t i = 0; i < ECHO_BYTES; i++)
		out[i] = (unsigned char)(i * 7 + i / 251);
	while (got < ECHO_BYTES) {
		struct pollfd pfd = { .fd = c, .events = POLLIN | (sent < ECHO_BYTES ? POLLOUT : 0) };
		ssize_t n;

		ck_assert_int_eq(poll(&pfd, 1, IO_TIMEOUT_MS), 1);
		if (pfd.revents & POLLOUT) {
			n = send(c, out + sent, ECHO_BYTES - sent < 65536 ? ECHO_BYTES - sent : 65536,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n > 0)
				sent += (size_t)n;
		}
		if (pfd.revents & POLLIN) {
			n = recv(c, in + got, ECHO_BYTES - got, MSG_DONTWAIT);
			ck_assert_msg(n > 0, "recv after %zu bytes: %zd", got, n);
			got += (size_t)n;
		}
	}
	ck_assert(memcmp(out, in, ECHO_BYTES) == 0);
}

START_TEST(test_echo_large)
{
	char line[96];
	const char *const want[] = { line, NULL };
	struct echo e = { .fd = -1 };
	pthread_t th;
	char tgt[64], req[256];
	int c;

	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	target(tgt, sizeof(tgt), "127.0.0.1");
	snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\n\r\n", tgt);
	c = connect_to(proxy.port);
	send_str(c, req);
	e.fd = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(e.fd, 0);
	recv_expect_str(c, reply_200);
	ck_assert_int_eq(pthread_create(&th, NULL, echo_thread, &e), 0);
	pump(c);
	ck_assert_int_eq(shutdown(c, SHUT_WR), 0);
	recv_eof(c);
	pthread_join(th, NULL);
	ck_assert_uint_eq(e.bytes, ECHO_BYTES);
	close(e.fd);
	close(c);
	snprintf(line, sizeof(line), "ALLOW %s", tgt);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* DENY for hosts and ports not listed; a plain-HTTP request (405) is a
 * DENY with the reason not-CONNECT when its absolute-form target names a
 * host (an allowed one too: only CONNECT is served), none without; 400
 * without a line. */
START_TEST(test_refusals)
{
	static const char nul_head[] = "CONNECT a\0b:443 HTTP/1.1\r\n\r\n";
	char t1[64], t2[64], l1[96], l2[96], l3[96], l4[96], l5[96], req[256];
	const char *const want[] = { l1, l2, l3, l4, l5, "DENY example.com:443 not-CONNECT",
				     "DENY [::1]:8080 not-CONNECT", NULL };

	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	target(t1, sizeof(t1), "127.0.0.2");
	connect_expect(proxy.port, t1, reply_403);
	connect_expect(proxy.port, "127.0.0.1:1", reply_403);
	connect_expect(proxy.port, "example.com:443", reply_403);
	target(t2, sizeof(t2), "[::1]");
	connect_expect(proxy.port, t2, reply_403);
	snprintf(req, sizeof(req), "GET http://127.0.0.1:%u/ HTTP/1.1\r\nHost: x\r\n\r\n",
		 (unsigned)target_port);
	request_expect(proxy.port, req, strlen(req), reply_405);
	request_expect(proxy.port, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 32, reply_405);
	snprintf(req, sizeof(req), "POST HTTPS://example.com?q HTTP/1.0\r\n\r\n");
	request_expect(proxy.port, req, strlen(req), reply_405);
	snprintf(req, sizeof(req), "GET http://u@example.com/ HTTP/1.1\r\n\r\n");
	request_expect(proxy.port, req, strlen(req), reply_405);
	snprintf(req, sizeof(req), "HEAD http://[::1]:8080/x HTTP/1.1\r\n\r\n");
	request_expect(proxy.port, req, strlen(req), reply_405);
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n");
	request_expect(proxy.port, req, strlen(req), reply_400);
	request_expect(proxy.port, nul_head, sizeof(nul_head) - 1, reply_400);
	request_expect(proxy.port, "CONNECT a:443 HTTP/1.1\n\n", 24, reply_400);
	/* None of them reached the target. */
	ck_assert_int_lt(accept_within(target_fd, 0), 0);
	snprintf(l1, sizeof(l1), "DENY %s", t1);
	snprintf(l2, sizeof(l2), "DENY 127.0.0.1:1");
	snprintf(l3, sizeof(l3), "DENY example.com:443");
	snprintf(l4, sizeof(l4), "DENY %s", t2);
	snprintf(l5, sizeof(l5), "DENY 127.0.0.1:%u not-CONNECT", (unsigned)target_port);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* A head that never ends is cut at PROXY_HEAD_MAX with a 400. */
START_TEST(test_oversized_head)
{
	const char *const want[] = { NULL };
	_cleanup_free_ char *big = malloc(70000);
	int c;

	ck_assert_ptr_nonnull(big);
	proxy_start(&proxy, NULL, NULL, dns.resolv, "nothing");
	memcpy(big, "CONNECT a.example:443 HTTP/1.1\r\nX: ", 35);
	memset(big + 35, 'x', 70000 - 35);
	c = connect_to(proxy.port);
	send_all(c, big, 70000);
	recv_expect_str(c, reply_400);
	recv_eof(c);
	close(c);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* Without private_allow, loopback is refused after the allowlist passed,
 * for a literal and for a name that resolves to it; nothing is dialled. */
START_TEST(test_nonglobal)
{
	char t1[64], t2[64], l1[96], l2[96];
	const char *const want[] = { l1, l2, NULL };

	proxy_start(&proxy, allow_list, NULL, dns.resolv, shown_allow());
	target(t1, sizeof(t1), "127.0.0.1");
	connect_expect(proxy.port, t1, reply_403);
	target(t2, sizeof(t2), "ok.test");
	connect_expect(proxy.port, t2, reply_403);
	ck_assert_int_lt(accept_within(target_fd, 0), 0);
	snprintf(l1, sizeof(l1), "DENY-NONGLOBAL %s", t1);
	snprintf(l2, sizeof(l2), "DENY-NONGLOBAL %s", t2);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* A name resolved through evdns: allowed (any case), or NXDOMAIN. */
START_TEST(test_names)
{
	char t1[64], t2[64], t3[64], l1[96], l2[96], l3[96], req[256];
	const char *const want[] = { l1, l2, l3, NULL };
	int c, t;

	proxy_start(&proxy, allow_list, "127.0.0.0/8", dns.resolv, shown_allow());
	target(t1, sizeof(t1), "ok.test");
	snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\n\r\n", t1);
	c = connect_to(proxy.port);
	send_str(c, req);
	t = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(t, 0);
	recv_expect_str(c, reply_200);
	send_str(c, "x");
	recv_expect_str(t, "x");
	close(t);
	recv_eof(c);
	close(c);
	target(t2, sizeof(t2), "OK.Test");
	snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\n\r\n", t2);
	c = connect_to(proxy.port);
	send_str(c, req);
	t = accept_within(target_fd, IO_TIMEOUT_MS);
	ck_assert_int_ge(t, 0);
	close(t);                      /* the target closes at once */
	recv_expect_str(c, reply_200);
	recv_eof(c);
	close(c);
	target(t3, sizeof(t3), "nx.test");
	connect_expect(proxy.port, t3, reply_502);
	snprintf(l1, sizeof(l1), "ALLOW %s", t1);
	snprintf(l2, sizeof(l2), "ALLOW %s", t2);
	snprintf(l3, sizeof(l3), "UNREACHABLE %s", t3);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* Nothing listens on the port: UNREACHABLE and 502. */
START_TEST(test_refused_port)
{
	uint16_t closed = free_port();
	char allow[64], tgt[64], line[96];
	const char *const want[] = { line, NULL };

	snprintf(allow, sizeof(allow), "127.0.0.1:%u", (unsigned)closed);
	snprintf(tgt, sizeof(tgt), "127.0.0.1:%u", (unsigned)closed);
	proxy_start(&proxy, allow, "127.0.0.1", dns.resolv, allow);
	connect_expect(proxy.port, tgt, reply_502);
	snprintf(line, sizeof(line), "UNREACHABLE %s", tgt);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* An unreadable resolv.conf: names fail, addresses still work. */
START_TEST(test_no_resolver)
{
	char tgt[64], line[96];
	const char *const want[] = { line, NULL };

	proxy_start(&proxy, "ok.test", NULL, "/nonexistent/resolv.conf", "ok.test");
	snprintf(tgt, sizeof(tgt), "ok.test:443");
	connect_expect(proxy.port, tgt, reply_502);
	snprintf(line, sizeof(line), "UNREACHABLE %s", tgt);
	proxy_stop_expect(&proxy, want);
}
END_TEST

/* A bad environment: a message on stderr, nothing on stdout, exit 2. */
START_TEST(test_bad_config)
{
	static const char *const bad[][2] = {
		{ "a.example, *", NULL },
		{ "https://a.example", NULL },
		{ "a.example", "10.0.0.1/8" },
	};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		char line[LINE_MAX_BYTES];
		int status;

		proxy.port = free_port();
		proxy_spawn(&proxy, bad[i][0], bad[i][1], NULL);
		ck_assert(!proxy_line(&proxy, line, sizeof(line)));
		status = proxy_wait(&proxy);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "status %#x", status);
	}
	/* a listen address that is not one */
	{
		char line[LINE_MAX_BYTES];
		int status;

		proxy.listen = "localhost";
		proxy.port = free_port();
		proxy_spawn(&proxy, "a.example", NULL, NULL);
		ck_assert(!proxy_line(&proxy, line, sizeof(line)));
		status = proxy_wait(&proxy);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "status %#x", status);
		proxy.listen = NULL;
	}
	/* an idle limit out of range */
	for (int i = 0; i < 2; i++) {
		char line[LINE_MAX_BYTES];
		int status;

		proxy.idle_ms = i == 0 ? 99 : 86400001L;   /* PROXY_TUNNEL_IDLE_MIN_MS - 1, _MAX_MS + 1 */
		proxy.port = free_port();
		proxy_spawn(&proxy, "a.example", NULL, NULL);
		ck_assert(!proxy_line(&proxy, line, sizeof(line)));
		status = proxy_wait(&proxy);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "status %#x", status);
	}
	proxy.idle_ms = 0;
}
END_TEST

static Suite *proxy_e2e_suite(void)
{
	Suite *s = suite_create("proxy_e2e");
	TCase *tc;

	tc = tcase_create("tunnel");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tunnel);
	tcase_add_test(tc, test_idle_tunnel_is_closed);
	tcase_add_test(tc, test_listen_address_only);
	tcase_add_test(tc, test_half_close_upstream);
	tcase_add_test(tc, test_echo_large);
	suite_add_tcase(s, tc);

	tc = tcase_create("decisions");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_oversized_head);
	tcase_add_test(tc, test_nonglobal);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_refused_port);
	tcase_add_test(tc, test_no_resolver);
	suite_add_tcase(s, tc);

	tc = tcase_create("config");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_bad_config);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(proxy_e2e_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
