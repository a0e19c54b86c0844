/* msb.c — libmaf-sandbox: synchronous JSON-RPC 2.0 calls over the daemon's
 * Unix socket. Framing and the envelope come from proto/; this file only
 * moves bytes, bounded by one deadline per call. */
#include "msb-build.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base64.h"
#include "cleanup.h"
#include "errors.h"
#include "frame.h"
#include "jsonfast.h"
#include "jsonrpc.h"
#include "msb-limits.h"
#include "msb.h"
#include "types.h"
#include "xmalloc.h"

/* Bytes asked of one recv(). */
#define MSB_READ_CHUNK_BYTES (64 * MSB_KIB)
/* The socket's file name in $XDG_RUNTIME_DIR. */
#define MSB_SOCKET_NAME "maf-sandbox.sock"

struct msb_conn {
	int fd;               /* -1 once the connection is unusable */
	int timeout_ms;       /* per call; 0 = none */
	json_int_t next_id;
	struct frame_buf in;  /* received bytes not yet handed out as frames */
	json_t *last_error;   /* owned: the error object of the last MSB_E_REMOTE, or NULL */
	msb_notify_fn *notify;  /* NULL = skip notifications */
	void *notify_arg;       /* borrowed */
	bool in_notify;         /* the hook is running: calls on conn are refused */
	char *path;             /* owned: the socket, to reconnect after an idle close */
	bool told_why;          /* the daemon sent an error for no request, or
				 * ShuttingDown (it hangs up after it): an EOF
				 * then is no idle close */
	bool subscribed;        /* events.subscribe succeeded: a close loses
				 * events, so it is never replaced silently */
	/* msb_set_cancel_flag: the call in flight, and whether its
	 * call.cancel went out. */
	volatile sig_atomic_t *cancel_flag;
	json_int_t call_id;
	bool in_call;
	bool cancel_sent;
};

static const char *const error_strings[] = {
	[-MSB_OK] = "success",
	[-MSB_E_NOMEM] = "out of memory",
	[-MSB_E_INVAL] = "invalid argument",
	[-MSB_E_CONNECT] = "cannot connect to the daemon",
	[-MSB_E_IO] = "I/O error on the connection",
	[-MSB_E_PROTO] = "protocol error: not a valid reply from the daemon",
	[-MSB_E_REMOTE] = "the daemon answered with an error",
	[-MSB_E_TIMEOUT] = "timed out waiting for the daemon",
	[-MSB_E_CLOSED] = "the connection to the daemon is closed",
};

const char *msb_strerror(int err)
{
	if (err > 0 || err <= -(int)ELEMENTSOF(error_strings))
		return "unknown error";
	return error_strings[-err];
}

char *msb_default_socket_path(void)
{
	const char *env = getenv("MAF_SANDBOX_SOCKET");

	if (env && *env)
		return xstrdup(env);
	if (geteuid() == 0)
		return xstrdup(MSB_DEFAULT_SOCKET);
	/* A daemon the user runs itself, when there is one; else the system's
	 * (which a member of its socket group may use). */
	env = getenv("XDG_RUNTIME_DIR");
	if (env && *env) {
		char *own = xasprintf("%s/%s", env, MSB_SOCKET_NAME);
		struct stat st;

		if (lstat(own, &st) == 0 && S_ISSOCK(st.st_mode))
			return own;
		free(own);
	}
	return xstrdup(MSB_DEFAULT_SOCKET);
}

static int socket_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	int fd;

	if (n == 0 || n >= sizeof(sa.sun_path))
		return MSB_E_INVAL;
	memcpy(sa.sun_path, path, n + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return MSB_E_CONNECT;
	/* A Unix stream connect() interrupted by a signal leaves the socket
	 * unconnected on Linux, so it is simply retried. */
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINTR) {
			closep(&fd);  /* keeps errno */
			return MSB_E_CONNECT;
		}
	}
	return fd;
}

int msb_connect(const char *path, struct msb_conn **ret_conn)
{
	_cleanup_free_ char *dflt = NULL;
	struct msb_conn *conn;
	int fd;

	if (!ret_conn)
		return MSB_E_INVAL;
	if (!path)
		path = dflt = msb_default_socket_path();
	fd = socket_connect(path);
	if (fd < 0)
		return fd;
	conn = xcalloc(1, sizeof(*conn));
	conn->fd = fd;
	conn->path = xstrdup(path);
	conn->timeout_ms = MSB_DEFAULT_TIMEOUT_MS;
	conn->next_id = 1;
	frame_buf_init(&conn->in, MSB_FRAME_MAX_BYTES);
	*ret_conn = conn;
	return MSB_OK;
}

/* Closes the socket: the connection is unusable from now on. Keeps errno. */
static void conn_close(struct msb_conn *conn)
{
	int saved = errno;

	if (conn->fd >= 0)
		(void)close(conn->fd);
	conn->fd = -1;
	frame_buf_release(&conn->in);
	errno = saved;
}

struct msb_conn *msb_conn_free(struct msb_conn *conn)
{
	if (!conn)
		return NULL;
	conn_close(conn);
	json_decref(conn->last_error);
	free(conn->path);
	free(conn);
	return NULL;
}

void msb_set_notify(struct msb_conn *conn, msb_notify_fn *fn, void *arg)
{
	if (!conn)
		return;
	conn->notify = fn;
	conn->notify_arg = arg;
}

void msb_set_timeout(struct msb_conn *conn, int timeout_ms)
{
	if (conn)
		conn->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd is ready for events or deadline (ms, 0 = none) passes.
 * A signal caught meanwhile ends the wait as the deadline would when
 * stop_on_signal, else the wait goes on. Returns MSB_OK, MSB_E_TIMEOUT or
 * MSB_E_IO. */
static int wait_fd(int fd, short events, int64_t deadline, bool stop_on_signal)
{
	struct pollfd pfd = { .fd = fd, .events = events };

	for (;;) {
		int64_t left = deadline ? deadline - now_ms() : -1;
		int r;

		if (deadline && left <= 0)
			return MSB_E_TIMEOUT;
		r = poll(&pfd, 1, (int)left);
		if (r > 0)
			return MSB_OK;
		if (r == 0 || (errno == EINTR && stop_on_signal))
			return MSB_E_TIMEOUT;
		if (errno != EINTR)
			return MSB_E_IO;
	}
}

/* Connects as socket_connect does, but gives up at deadline (ms, 0 =
 * none): non-blocking, since a Unix socket whose backlog is full refuses
 * such a connect (EAGAIN) instead of waiting, it is retried every few ms
 * until then. The fd returned is blocking. Returns the fd, MSB_E_TIMEOUT
 * or MSB_E_CONNECT. */
static int socket_connect_until(const char *path, int64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(path);
	int fd, err = 0, flags;
	socklen_t elen = sizeof(err);

	if (!deadline)
		return socket_connect(path);
	if (n == 0 || n >= sizeof(sa.sun_path))
		return MSB_E_INVAL;
	memcpy(sa.sun_path, path, n + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return MSB_E_CONNECT;
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		struct timespec ts = { 0, 5 * 1000000 };

		if (errno == EINTR)
			continue;
		if (errno == EINPROGRESS) {
			int r = wait_fd(fd, POLLOUT, deadline, false);

			if (r == MSB_OK && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0))
				r = MSB_E_CONNECT;
			if (r < 0) {
				close(fd);
				return r == MSB_E_TIMEOUT ? r : MSB_E_CONNECT;
			}
			break;
		}
		if (errno != EAGAIN) {
			close(fd);
			return MSB_E_CONNECT;
		}
		if (now_ms() >= deadline) {
			close(fd);
			return MSB_E_TIMEOUT;
		}
		nanosleep(&ts, NULL);
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		close(fd);
		return MSB_E_CONNECT;
	}
	return fd;
}

static bool errno_is_closed(void)
{
	return errno == EPIPE || errno == ECONNRESET;
}

/* Sends all n bytes of p, however the kernel splits them. */
static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		int r;

		if (k >= 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno_is_closed() ? MSB_E_CLOSED : MSB_E_IO;
		r = wait_fd(fd, POLLOUT, deadline, false);
		if (r < 0)
			return r;
	}
	return MSB_OK;
}

/* A signal came while a call waited: with the cancel flag set, call.cancel
 * for it goes out once, as a notification (nothing answers it; the call's
 * own answer says what became of it). */
static void call_cancel_maybe(struct msb_conn *conn, int64_t deadline)
{
	json_auto_t *n = NULL;
	_cleanup_free_ char *frame = NULL;
	size_t len;

	if (!conn->cancel_flag || !*conn->cancel_flag || !conn->in_call || conn->cancel_sent)
		return;
	conn->cancel_sent = true;
	n = json_pack("{s:s, s:s, s:{s:I}}", "jsonrpc", "2.0", "method", MSB_METHOD_CALL_CANCEL, "params", "id",
		      conn->call_id);
	frame = n ? frame_encode(n, &len) : NULL;
	if (frame)
		(void)send_all(conn->fd, frame, len, deadline);
}

/* Reads what the socket holds into conn->in, waiting for it if need be
 * (until deadline; stop_on_signal as for wait_fd). */
static int recv_some(struct msb_conn *conn, int64_t deadline, bool stop_on_signal)
{
	char buf[MSB_READ_CHUNK_BYTES];

	for (;;) {
		ssize_t k = recv(conn->fd, buf, sizeof(buf), MSG_DONTWAIT);
		int r;

		if (k > 0)
			return frame_buf_append(&conn->in, buf, (size_t)k) < 0 ? MSB_E_PROTO : MSB_OK;
		if (k == 0)
			return MSB_E_CLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno_is_closed() ? MSB_E_CLOSED : MSB_E_IO;
		/* A signal that came outside the wait (it interrupts nothing
		 * then) is seen here, before waiting. */
		call_cancel_maybe(conn, deadline);
		r = wait_fd(conn->fd, POLLIN, deadline, stop_on_signal || conn->cancel_flag);
		if (r == MSB_E_TIMEOUT && !stop_on_signal && conn->cancel_flag && (!deadline || now_ms() < deadline)) {
			/* A signal, not the deadline: maybe cancel; wait on. */
			call_cancel_maybe(conn, deadline);
			continue;
		}
		if (r < 0)
			return r;
	}
}

/* When the frame is a notification (an object with "method" and no "id"),
 * hands it to conn's hook if there is one and the method is a string, and
 * returns true. */
static bool take_notification(struct msb_conn *conn, const char *line, size_t len)
{
	json_auto_t *v = jsonfast_loadb(line, len, 0, NULL);
	const char *method;

	if (!json_is_object(v) || !json_object_get(v, "method") || json_object_get(v, "id"))
		return false;
	method = json_string_value(json_object_get(v, "method"));
	if (conn->notify && method) {
		conn->in_notify = true;
		conn->notify(method, json_object_get(v, "params"), conn->notify_arg);
		conn->in_notify = false;
	}
	return true;
}

/* Takes the reply to call id from one frame. Returns 1 when the frame was a
 * notification (handed to the hook or skipped), else MSB_OK, MSB_E_REMOTE or
 * MSB_E_PROTO. */
static int take_reply(struct msb_conn *conn, const char *line, size_t len, json_int_t id,
		      json_t **ret_result)
{
	struct jsonrpc_response resp;
	bool null_error;
	int r;

	if (jsonrpc_response_parse(line, len, &resp) < 0)
		return take_notification(conn, line, len) ? 1 : MSB_E_PROTO;
	null_error = resp.error && json_is_null(resp.id);
	if (!null_error && !(json_is_integer(resp.id) && json_integer_value(resp.id) == id)) {
		r = MSB_E_PROTO;
	} else if (resp.error) {
		/* An error for no request, or ShuttingDown: the daemon hangs up next. */
		conn->told_why |= null_error ||
			json_integer_value(json_object_get(resp.error, "code")) == MSB_ERR_SHUTTING_DOWN;
		conn->last_error = json_incref(resp.error);
		r = MSB_E_REMOTE;
	} else {
		if (ret_result)
			*ret_result = json_incref(resp.result);
		r = MSB_OK;
	}
	jsonrpc_response_release(&resp);
	return r;
}

static int await_reply(struct msb_conn *conn, json_int_t id, int64_t deadline, json_t **ret_result)
{
	for (;;) {
		const char *line;
		size_t len;
		int r = frame_buf_next(&conn->in, &line, &len);

		if (r < 0)
			return MSB_E_PROTO;
		if (r > 0) {
			r = take_reply(conn, line, len, id, ret_result);
			if (r <= 0)
				return r;
			continue;
		}
		r = recv_some(conn, deadline, false);
		if (r < 0)
			return r;
	}
}

/* Takes the next notification, from conn->in or the socket. Returns 1 when
 * one was taken, else MSB_E_TIMEOUT (deadline passed, or a signal came),
 * MSB_E_PROTO (a frame that is no notification) or what recv_some says. */
static int await_notification(struct msb_conn *conn, int64_t deadline)
{
	for (;;) {
		const char *line;
		size_t len;
		int r = frame_buf_next(&conn->in, &line, &len);

		if (r < 0)
			return MSB_E_PROTO;
		if (r > 0)
			return take_notification(conn, line, len) ? 1 : MSB_E_PROTO;
		r = recv_some(conn, deadline, true);
		if (r < 0)
			return r;
	}
}

/* Builds the request frame. Returns MSB_OK, MSB_E_INVAL or MSB_E_NOMEM. */
static int encode_request(json_int_t id, const char *method, json_t *params,
			  char **ret_frame, size_t *ret_len)
{
	json_auto_t *req = jsonrpc_request_new(id, method, params);
	char *frame;
	size_t len;

	if (!req)
		return MSB_E_NOMEM;
	/* jansson refuses a method name that is not UTF-8, leaving no member. */
	if (!json_is_string(json_object_get(req, "method")))
		return MSB_E_INVAL;
	frame = frame_encode(req, &len);
	if (!frame)
		return MSB_E_NOMEM;
	if (len - 1 > MSB_FRAME_MAX_BYTES) {
		free(frame);
		return MSB_E_INVAL;
	}
	*ret_frame = frame;
	*ret_len = len;
	return MSB_OK;
}

/* Did the daemon close the connection while no call was in flight (its
 * idle timeout), with nothing left unread and nothing said? Then no
 * request of ours can have been lost with it. */
static bool conn_closed_idle(const struct msb_conn *conn)
{
	struct pollfd pfd = { .fd = conn->fd, .events = POLLIN };
	char c;

	if (conn->told_why || frame_buf_pending(&conn->in) > 0 || poll(&pfd, 1, 0) <= 0)
		return false;
	if (pfd.revents & (POLLERR | POLLNVAL))
		return true;
	/* Readable: at EOF (0) it closed; a byte waiting is for the caller. */
	return recv(conn->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Before a call: replaces a connection the daemon closed while idle by a
 * new one to the same socket (never while a call is in flight: calls are
 * synchronous, so none is). MSB_OK, or MSB_E_CONNECT (conn then closed). */
static int conn_revive(struct msb_conn *conn, int64_t deadline)
{
	int fd;

	if (!conn_closed_idle(conn))
		return MSB_OK;
	if (conn->subscribed) {
		/* Its subscription (and the events since) went with it: say so. */
		conn_close(conn);
		return MSB_E_CLOSED;
	}
	fd = socket_connect_until(conn->path, deadline);
	conn_close(conn);
	if (fd < 0)
		return fd == MSB_E_TIMEOUT ? MSB_E_TIMEOUT : MSB_E_CONNECT;
	conn->fd = fd;
	frame_buf_init(&conn->in, MSB_FRAME_MAX_BYTES);
	return MSB_OK;
}

static int call_checked(struct msb_conn *conn, const char *method, json_t *params,
			int64_t deadline, json_t **ret_result)
{
	_cleanup_free_ char *frame = NULL;
	json_int_t id = conn->next_id;
	size_t len;
	int r;

	r = encode_request(id, method, params, &frame, &len);
	if (r < 0)
		return r;
	conn->next_id++;  /* ids of requests sent are consecutive */
	r = send_all(conn->fd, frame, len, deadline);
	/* A daemon that hung up may have said why first (an error with id
	 * null, e.g. TooManyConnections): read what it sent before giving up. */
	if (r < 0 && r != MSB_E_CLOSED)
		return r;
	conn->call_id = id;
	conn->in_call = true;
	conn->cancel_sent = false;
	r = await_reply(conn, id, deadline, ret_result);
	conn->in_call = false;
	return r;
}

/* What every call does before it sends: forgets the last error, refuses a
 * connection already unusable, and connects again if the daemon closed an
 * idle one. *ret_deadline is the call's (0: none); it covers the reconnect
 * too. */
static int call_begin(struct msb_conn *conn, int64_t *ret_deadline)
{
	json_decref(conn->last_error);
	conn->last_error = NULL;
	if (conn->fd < 0)
		return MSB_E_CLOSED;
	*ret_deadline = conn->timeout_ms ? now_ms() + conn->timeout_ms : 0;
	return conn_revive(conn, *ret_deadline);
}

int msb_call(struct msb_conn *conn, const char *method, json_t *params, json_t **ret_result)
{
	int64_t deadline;
	int r;

	if (!conn || conn->in_notify || !method || (params && !json_is_object(params))) {
		json_decref(params);
		return MSB_E_INVAL;
	}
	r = call_begin(conn, &deadline);
	if (r < 0) {
		json_decref(params);
		return r;
	}
	r = call_checked(conn, method, params, deadline, ret_result);
	if (r == MSB_OK && strcmp(method, "events.subscribe") == 0)
		conn->subscribed = true;
	if (r == MSB_E_IO || r == MSB_E_PROTO || r == MSB_E_TIMEOUT || r == MSB_E_CLOSED)
		conn_close(conn);
	return r;
}

int msb_wait_notify(struct msb_conn *conn, int timeout_ms)
{
	/* timeout 0: a deadline already reached, so only a read that needs no
	 * wait is made (CLOCK_MONOTONIC is never 0 once anything runs). */
	int64_t deadline = timeout_ms < 0 ? 0 : now_ms() + timeout_ms;
	int r;

	if (!conn || conn->in_notify)
		return MSB_E_INVAL;
	if (conn->fd < 0)
		return MSB_E_CLOSED;
	r = await_notification(conn, deadline);
	if (r == MSB_E_TIMEOUT)
		return 0;
	if (r < 0)
		conn_close(conn);
	return r;
}

int msb_last_error_code(const struct msb_conn *conn)
{
	return conn ? (int)json_integer_value(json_object_get(conn->last_error, "code")) : 0;
}

const char *msb_last_error_type(const struct msb_conn *conn)
{
	return json_string_value(json_object_get(msb_last_error_data(conn), "type"));
}

const char *msb_last_error_message(const struct msb_conn *conn)
{
	return conn ? json_string_value(json_object_get(conn->last_error, "message")) : NULL;
}

json_t *msb_last_error_data(const struct msb_conn *conn)
{
	return conn ? json_object_get(conn->last_error, "data") : NULL;
}

int msb_describe(struct msb_conn *conn, json_t **ret_result)
{
	return msb_call(conn, MSB_METHOD_DAEMON_DESCRIBE, NULL, ret_result);
}

int msb_status(struct msb_conn *conn, json_t **ret_result)
{
	return msb_call(conn, MSB_METHOD_DAEMON_STATUS, NULL, ret_result);
}

int msb_engine(struct msb_conn *conn, json_t **ret_result)
{
	return msb_call(conn, MSB_METHOD_DAEMON_ENGINE, NULL, ret_result);
}

void msb_set_cancel_flag(struct msb_conn *conn, volatile sig_atomic_t *flag)
{
	if (conn)
		conn->cancel_flag = flag;
}

/* ---- msb_call_stdin ---------------------------------------------------------- */

struct stdin_call {
	json_int_t id;          /* the call's */
	json_int_t chunk_id;    /* the exec.stdin in flight; 0: none */
	size_t chunk_len;
	bool in_done;           /* nothing more goes: eof sent, or the command stopped reading */
	bool answered;          /* the call's reply (or error) came */
	int result;             /* its outcome: MSB_OK or MSB_E_REMOTE */
};

/* One frame while the call runs: the answer to an exec.stdin, the call's
 * own, or a notification. MSB_OK, or MSB_E_PROTO. */
static int stdin_take_frame(struct msb_conn *conn, struct stdin_call *sc, const char *line, size_t len,
			    json_t **ret_result)
{
	struct jsonrpc_response resp;
	int r;

	if (jsonrpc_response_parse(line, len, &resp) == 0) {
		bool is_chunk = sc->chunk_id && json_is_integer(resp.id) && json_integer_value(resp.id) == sc->chunk_id;

		if (is_chunk) {
			json_int_t written = json_integer_value(json_object_get(resp.result, "written"));

			/* Refused, or not all taken: the command reads no more. */
			if (resp.error || written < 0 || (size_t)written < sc->chunk_len)
				sc->in_done = true;
			sc->chunk_id = 0;
			jsonrpc_response_release(&resp);
			return MSB_OK;
		}
		jsonrpc_response_release(&resp);
	}
	r = take_reply(conn, line, len, sc->id, ret_result);
	if (r == 1)
		return MSB_OK;   /* a notification */
	if (r == MSB_OK || r == MSB_E_REMOTE) {
		sc->answered = true;
		sc->result = r;
		return MSB_OK;
	}
	return r;
}

/* Reads one chunk of fd and sends it as exec.stdin (its end: eof). */
static int stdin_send_chunk(struct msb_conn *conn, struct stdin_call *sc, int fd, uint8_t *buf, int64_t deadline)
{
	_cleanup_free_ char *frame = NULL, *b64 = NULL;
	json_auto_t *params = NULL, *req = NULL;
	size_t len, b64_len;
	ssize_t n;

	do
		n = read(fd, buf, MSB_STDIN_CHUNK_BYTES);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return MSB_OK;
	if (n < 0)
		n = 0;   /* unreadable: its end */
	b64 = msb_base64_encode(buf, (size_t)n, &b64_len);
	params = json_pack("{s:I, s:s%, s:b}", "call", sc->id, "data_b64", b64, b64_len, "eof", n == 0);
	req = params ? jsonrpc_request_new(conn->next_id, MSB_METHOD_EXEC_STDIN, json_incref(params)) : NULL;
	frame = req ? frame_encode(req, &len) : NULL;
	if (!frame)
		return MSB_E_NOMEM;
	sc->chunk_id = conn->next_id++;
	sc->chunk_len = (size_t)n;
	if (n == 0)
		sc->in_done = true;
	return send_all(conn->fd, frame, len, deadline);
}

static int stdin_call_run(struct msb_conn *conn, struct stdin_call *sc, int fd, int64_t deadline,
			  json_t **ret_result)
{
	_cleanup_free_ uint8_t *buf = xmalloc(MSB_STDIN_CHUNK_BYTES);

	for (;;) {
		struct pollfd pfd[2] = { { .fd = conn->fd, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
		const char *line;
		size_t len;
		int64_t left;
		int r, nfds;

		while ((r = frame_buf_next(&conn->in, &line, &len)) > 0) {
			r = stdin_take_frame(conn, sc, line, len, ret_result);
			if (r < 0)
				return r;
		}
		if (r < 0)
			return MSB_E_PROTO;
		if (sc->answered && !sc->chunk_id)
			return sc->result;
		/* A signal that came outside poll (reading fd, sending a
		 * chunk) interrupted nothing: the flag is looked at each turn. */
		call_cancel_maybe(conn, deadline);
		if (conn->cancel_sent)
			sc->in_done = true;   /* cancelled: no more of it */
		nfds = !sc->in_done && !sc->chunk_id && !sc->answered ? 2 : 1;
		left = deadline ? deadline - now_ms() : -1;
		if (deadline && left <= 0)
			return MSB_E_TIMEOUT;
		r = poll(pfd, (nfds_t)nfds, (int)left);
		if (r < 0) {
			if (errno != EINTR)
				return MSB_E_IO;
			call_cancel_maybe(conn, deadline);
			continue;
		}
		if (pfd[0].revents) {
			char in[MSB_READ_CHUNK_BYTES];
			ssize_t k = recv(conn->fd, in, sizeof(in), MSG_DONTWAIT);

			if (k == 0)
				return MSB_E_CLOSED;
			if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return errno_is_closed() ? MSB_E_CLOSED : MSB_E_IO;
			if (k > 0 && frame_buf_append(&conn->in, in, (size_t)k) < 0)
				return MSB_E_PROTO;
			continue;
		}
		if (nfds == 2 && pfd[1].revents) {
			r = stdin_send_chunk(conn, sc, fd, buf, deadline);
			if (r < 0 && r != MSB_E_CLOSED)
				return r;
		}
	}
}

int msb_call_stdin(struct msb_conn *conn, const char *method, json_t *params, int fd, json_t **ret_result)
{
	_cleanup_free_ char *frame = NULL;
	struct stdin_call sc = { 0 };
	int64_t deadline;
	size_t len;
	int r;

	if (!conn || conn->in_notify || !method || !json_is_object(params) || fd < 0) {
		json_decref(params);
		return MSB_E_INVAL;
	}
	r = call_begin(conn, &deadline);
	if (r < 0) {
		json_decref(params);
		return r;
	}
	json_object_set_new(params, "stdin_stream", json_true());
	sc.id = conn->next_id;
	r = encode_request(sc.id, method, params, &frame, &len);
	if (r < 0)
		return r;
	conn->next_id++;
	r = send_all(conn->fd, frame, len, deadline);
	if (r < 0 && r != MSB_E_CLOSED) {
		conn_close(conn);
		return r;
	}
	conn->call_id = sc.id;
	conn->in_call = true;
	conn->cancel_sent = false;
	r = stdin_call_run(conn, &sc, fd, deadline, ret_result);
	conn->in_call = false;
	if (r == MSB_E_IO || r == MSB_E_PROTO || r == MSB_E_TIMEOUT || r == MSB_E_CLOSED || r == MSB_E_NOMEM)
		conn_close(conn);
	return r;
}
