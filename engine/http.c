/* http.c — HTTP/1.1 to the engine through libcurl's multi-socket API on the
 * libevent loop (the pattern of curl's docs/examples/hiperfifo.c):
 * CURLMOPT_SOCKETFUNCTION keeps one struct event per socket,
 * CURLMOPT_TIMERFUNCTION one evtimer, and both call
 * curl_multi_socket_action() and then drain curl_multi_info_read().
 *
 * A request moves NEW → RUNNING → DONE through req_set_state() only.
 * Completion (curl finished, idle deadline, cancel, free) always goes
 * through req_complete(): the easy handle leaves the multi handle before the
 * user callback runs, and the request is freed right after it returns.
 *
 * Callbacks may free the http object: every entry from the loop brackets
 * its work with http_enter()/http_leave(), and engine_http_free() inside
 * such a bracket only marks the object dead; the last http_leave() frees. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "cleanup.h"
#include "http.h"
#include "log.h"
#include "xmalloc.h"

#define ENGINE_HTTP_MAX_URL            8192
/* Connecting may take this long even for a request without a deadline. */
#define ENGINE_HTTP_CONNECT_TIMEOUT_MS 30000L
/* Idle keep-alive connections to the engine kept for reuse. libcurl's own
 * default grows with the requests ever in flight at once (4 per request), so
 * one burst of parallel calls left that many descriptors open to the engine
 * for good; past this many, a connection is closed when its request ends. */
#define ENGINE_HTTP_MAX_IDLE_CONNECTIONS 8L

enum engine_req_state {
	ENGINE_REQ_NEW,       /* configured, not yet in the multi handle */
	ENGINE_REQ_RUNNING,   /* in the multi handle; bytes may flow */
	ENGINE_REQ_DONE,      /* the callback fired; freed right after */
	_ENGINE_REQ_STATE_MAX,
};

struct engine_header {
	char *name;
	char *value;
};

struct engine_req {
	struct engine_http *req_http;
	enum engine_req_state req_state;
	uint64_t req_id;
	CURL *req_easy;
	struct curl_slist *req_hdrs_out;
	char *req_method;
	char *req_path;
	void *req_body;
	size_t req_body_len;
	engine_done_cb *req_cb;
	void *req_arg;
	engine_data_cb *req_on_data;
	void *req_data_arg;
	size_t req_max_body;
	long req_idle_ms;
	struct event *req_idle;
	char *req_buf;              /* buffered body, NUL-terminated */
	size_t req_len, req_cap;
	struct engine_header *req_hdrs;
	size_t req_nhdrs, req_hdrs_cap, req_hdr_bytes;
	int req_abort;              /* set by our libcurl callbacks; 0 = none */
	bool req_paused;            /* on_data paused it: the idle deadline waits too */
	char req_errbuf[CURL_ERROR_SIZE];
	struct engine_req *req_prev, *req_next;
};

struct http_sock {
	struct engine_http *http;
	curl_socket_t fd;
	struct event *ev;
	struct http_sock *prev, *next;
};

struct engine_http {
	struct event_base *base;
	struct engine_endpoint *ep;
	CURLM *multi;
	struct event *timer;
	struct engine_req *reqs;
	struct http_sock *socks;
	uint64_t started;
	unsigned in_flight;
	unsigned busy;              /* our loop callbacks on the stack */
	bool in_curl;               /* inside curl_multi_socket_action() */
	bool dead;                  /* engine_http_free() ran while busy */
};

static const char *engine_req_state_to_string(enum engine_req_state s)
{
	static const char *const names[_ENGINE_REQ_STATE_MAX] = {
		[ENGINE_REQ_NEW] = "new",
		[ENGINE_REQ_RUNNING] = "running",
		[ENGINE_REQ_DONE] = "done",
	};

	if ((unsigned)s >= _ENGINE_REQ_STATE_MAX)
		return "invalid";
	return names[s];
}

/* The one transition function: NEW → RUNNING → DONE. */
static void req_set_state(struct engine_req *req, enum engine_req_state s)
{
	switch (s) {
	case ENGINE_REQ_RUNNING:
		assert(req->req_state == ENGINE_REQ_NEW);
		break;
	case ENGINE_REQ_DONE:
		assert(req->req_state == ENGINE_REQ_RUNNING);
		break;
	case ENGINE_REQ_NEW:
	default:
		assert(!"unreachable");
	}
	log_debug("engine", "req %llu %s %s: %s -> %s", (unsigned long long)req->req_id,
		  req->req_method, req->req_path, engine_req_state_to_string(req->req_state),
		  engine_req_state_to_string(s));
	req->req_state = s;
}

static struct timeval ms_to_tv(long ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

/* ---- error mapping ----------------------------------------------------- */

static const struct {
	CURLcode code;
	int error;
} curlcode_errors[] = {
	{ CURLE_COULDNT_CONNECT, -ECONNREFUSED },
	{ CURLE_COULDNT_RESOLVE_HOST, -ECONNREFUSED },
	{ CURLE_COULDNT_RESOLVE_PROXY, -ECONNREFUSED },
	{ CURLE_SSL_CONNECT_ERROR, -ECONNREFUSED },
	{ CURLE_PEER_FAILED_VERIFICATION, -ECONNREFUSED },
	{ CURLE_SSL_CERTPROBLEM, -ECONNREFUSED },
	{ CURLE_SSL_CIPHER, -ECONNREFUSED },
	{ CURLE_SSL_CACERT_BADFILE, -ECONNREFUSED },
	{ CURLE_SSL_ISSUER_ERROR, -ECONNREFUSED },
	{ CURLE_OPERATION_TIMEDOUT, -ETIMEDOUT },
	{ CURLE_GOT_NOTHING, -ECONNRESET },
	{ CURLE_PARTIAL_FILE, -ECONNRESET },
	{ CURLE_RECV_ERROR, -ECONNRESET },
	{ CURLE_SEND_ERROR, -ECONNRESET },
	{ CURLE_UNSUPPORTED_PROTOCOL, -EPROTO },
	{ CURLE_WEIRD_SERVER_REPLY, -EPROTO },
	{ CURLE_BAD_CONTENT_ENCODING, -EPROTO },
	{ CURLE_HTTP2, -EPROTO },
	{ CURLE_FILESIZE_EXCEEDED, -EMSGSIZE },
	{ CURLE_OUT_OF_MEMORY, -ENOMEM },
	{ CURLE_URL_MALFORMAT, -EINVAL },
	{ CURLE_ABORTED_BY_CALLBACK, -ECANCELED },
};

static int curlcode_to_errno(CURLcode code)
{
	if (code == CURLE_OK)
		return 0;
	for (size_t i = 0; i < ELEMENTSOF(curlcode_errors); i++)
		if (curlcode_errors[i].code == code)
			return curlcode_errors[i].error;
	return -EIO;
}

/* ---- loop brackets ------------------------------------------------------ */

static void http_destroy(struct engine_http *http);

static void http_enter(struct engine_http *http)
{
	http->busy++;
}

static void http_leave(struct engine_http *http)
{
	assert(http->busy > 0);
	if (--http->busy == 0 && http->dead)
		http_destroy(http);
}

/* ---- request bookkeeping ------------------------------------------------ */

static void req_link(struct engine_req *req)
{
	struct engine_http *http = req->req_http;

	req->req_next = http->reqs;
	if (http->reqs)
		http->reqs->req_prev = req;
	http->reqs = req;
	http->in_flight++;
}

static void req_unlink(struct engine_req *req)
{
	struct engine_http *http = req->req_http;

	if (req->req_prev)
		req->req_prev->req_next = req->req_next;
	else
		http->reqs = req->req_next;
	if (req->req_next)
		req->req_next->req_prev = req->req_prev;
	req->req_prev = req->req_next = NULL;
	http->in_flight--;
}

static void req_headers_clear(struct engine_req *req)
{
	for (size_t i = 0; i < req->req_nhdrs; i++) {
		free(req->req_hdrs[i].name);
		free(req->req_hdrs[i].value);
	}
	req->req_nhdrs = 0;
	req->req_hdr_bytes = 0;
}

static void req_free(struct engine_req *req)
{
	if (!req)
		return;
	if (req->req_easy)
		curl_easy_cleanup(req->req_easy);
	curl_slist_free_all(req->req_hdrs_out);
	if (req->req_idle)
		event_free(req->req_idle);
	req_headers_clear(req);
	free(req->req_hdrs);
	free(req->req_buf);
	free(req->req_body);
	free(req->req_method);
	free(req->req_path);
	free(req);
}

/* Restarts the idle deadline: called for every byte received, and on
 * resume. A paused stream has none: we, not the engine, hold it back. */
static void req_touch(struct engine_req *req)
{
	struct timeval tv;

	if (!req->req_idle || req->req_paused)
		return;
	tv = ms_to_tv(req->req_idle_ms);
	if (evtimer_add(req->req_idle, &tv) < 0)
		log_warnx("%s: req %llu: cannot arm the idle timer, ignoring", __func__,
			  (unsigned long long)req->req_id);
}

/* Fires the callback exactly once, then frees the request. */
static void req_complete(struct engine_req *req, int error)
{
	struct engine_http *http = req->req_http;
	struct engine_reply reply = { .body = "", .req = req, .error_text = "" };
	CURLMcode mc;

	mc = curl_multi_remove_handle(http->multi, req->req_easy);
	if (mc != CURLM_OK)
		log_warnx("%s: req %llu: %s, ignoring", __func__, (unsigned long long)req->req_id,
			  curl_multi_strerror(mc));
	if (req->req_idle)
		evtimer_del(req->req_idle);
	req_unlink(req);
	req_set_state(req, ENGINE_REQ_DONE);
	if (curl_easy_getinfo(req->req_easy, CURLINFO_RESPONSE_CODE, &reply.status) != CURLE_OK)
		reply.status = 0;
	if (req->req_buf) {
		reply.body = req->req_buf;
		reply.body_len = req->req_len;
	}
	if (error != 0)
		reply.error_text = req->req_errbuf;
	log_debug("engine", "req %llu %s %s: error %d, status %ld%s%s", (unsigned long long)req->req_id,
		  req->req_method, req->req_path, error, reply.status, *reply.error_text ? ": " : "",
		  reply.error_text);
	http_enter(http);
	req->req_cb(req, error, &reply, req->req_arg);
	req_free(req);
	http_leave(http);
}

/* A failed connect: the socket's own errno tells a refused or missing
 * socket from one we may not use; for a Unix socket the detail names the
 * path (libcurl's text would name its dummy host and port 80). */
static int req_connect_error(struct engine_req *req)
{
	const struct engine_endpoint *ep = req->req_http->ep;
	long os_errno = 0;

	if (curl_easy_getinfo(req->req_easy, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
		os_errno = 0;
	if (ep->kind == ENGINE_ENDPOINT_UNIX && os_errno > 0)
		snprintf(req->req_errbuf, sizeof(req->req_errbuf), "cannot connect to %s: %s", ep->unix_path,
			 strerror((int)os_errno));
	return os_errno == EACCES || os_errno == EPERM ? -EACCES : -ECONNREFUSED;
}

/* The error a finished transfer reports: our own abort reason first. */
static int req_result(struct engine_req *req, CURLcode code)
{
	if (req->req_abort < 0)
		return req->req_abort;
	if (code == CURLE_COULDNT_CONNECT)
		return req_connect_error(req);
	return curlcode_to_errno(code);
}

/* ---- libcurl data callbacks (run inside curl_multi_socket_action) ------- */

static int req_buffer(struct engine_req *req, const char *data, size_t n)
{
	size_t need;

	if (n > req->req_max_body - req->req_len)
		return -EMSGSIZE;
	need = req->req_len + n + 1;
	if (need > req->req_cap) {
		size_t cap = req->req_cap ? req->req_cap : 4096;
		char *p;

		while (cap < need)
			cap *= 2;
		if (cap > req->req_max_body + 1)
			cap = req->req_max_body + 1;
		p = realloc(req->req_buf, cap);
		if (!p)
			return -ENOMEM;
		req->req_buf = p;
		req->req_cap = cap;
	}
	memcpy(req->req_buf + req->req_len, data, n);
	req->req_len += n;
	req->req_buf[req->req_len] = '\0';
	return 0;
}

static int req_stream(struct engine_req *req, const char *data, size_t n)
{
	long status = 0;
	int r;

	if (curl_easy_getinfo(req->req_easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
		status = 0;
	r = req->req_on_data(req, status, data, n, req->req_data_arg);
	return r < 0 || r == ENGINE_DATA_PAUSE ? r : 0;
}

static size_t req_write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct engine_req *req = userdata;
	size_t n = size * nmemb;
	int r;

	req_touch(req);
	if (n == 0)
		return 0;
	if (req->req_abort < 0)
		return 0;
	r = req->req_on_data ? req_stream(req, data, n) : req_buffer(req, data, n);
	if (r < 0) {
		req->req_abort = r;
		return 0;
	}
	if (r == ENGINE_DATA_PAUSE) {
		/* the idle deadline stops until engine_req_resume() */
		req->req_paused = true;
		if (req->req_idle)
			evtimer_del(req->req_idle);
		return CURL_WRITEFUNC_PAUSE;
	}
	return n;
}

static char *trimmed_dup(const char *s, size_t n)
{
	while (n > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	return xstrndup(s, n);
}

/* One header line without its CRLF. A status line starts a new response
 * (an interim 1xx or a redirect), so only the final one's headers stay. */
static int req_header_line(struct engine_req *req, const char *line, size_t n)
{
	const char *colon;

	if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		req_headers_clear(req);
		return 0;
	}
	if (n == 0 || line[0] == ' ' || line[0] == '\t')
		return 0;  /* end of block; obsolete line folding is dropped */
	colon = memchr(line, ':', n);
	if (!colon)
		return 0;
	req->req_hdr_bytes += n;
	if (req->req_hdr_bytes > ENGINE_HTTP_MAX_HEADER_BYTES)
		return -EMSGSIZE;
	if (req->req_nhdrs == req->req_hdrs_cap) {
		req->req_hdrs_cap = req->req_hdrs_cap ? 2 * req->req_hdrs_cap : 16;
		req->req_hdrs = xrealloc(req->req_hdrs, req->req_hdrs_cap * sizeof(*req->req_hdrs));
	}
	req->req_hdrs[req->req_nhdrs++] = (struct engine_header){
		.name = trimmed_dup(line, (size_t)(colon - line)),
		.value = trimmed_dup(colon + 1, n - (size_t)(colon - line) - 1),
	};
	return 0;
}

static size_t req_header_cb(char *data, size_t size, size_t nitems, void *userdata)
{
	struct engine_req *req = userdata;
	size_t n = size * nitems, len = n;
	int r;

	req_touch(req);
	if (req->req_abort < 0)
		return 0;
	while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		len--;
	r = req_header_line(req, data, len);
	if (r < 0) {
		req->req_abort = r;
		return 0;
	}
	return n;
}

/* ---- driving libcurl from the loop --------------------------------------- */

/* Completes every transfer libcurl reports finished. Stops once the http
 * object is dead: its requests were all cancelled already. */
static void http_check_done(struct engine_http *http)
{
	CURLMsg *msg;
	int left;

	while (!http->dead && (msg = curl_multi_info_read(http->multi, &left))) {
		struct engine_req *req = NULL;
		CURLcode code = msg->data.result;

		if (msg->msg != CURLMSG_DONE)
			continue;
		if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req) != CURLE_OK ||
		    !req) {
			log_warnx("%s: finished transfer without a request, ignoring", __func__);
			continue;
		}
		req_complete(req, req_result(req, code));
	}
}

static void http_socket_action(struct engine_http *http, curl_socket_t fd, int action)
{
	CURLMcode mc;
	int running;

	http_enter(http);
	http->in_curl = true;
	mc = curl_multi_socket_action(http->multi, fd, action, &running);
	http->in_curl = false;
	if (mc != CURLM_OK)
		log_warnx("%s: %s, ignoring", __func__, curl_multi_strerror(mc));
	http_check_done(http);
	http_leave(http);
}

static void http_sock_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_sock *hs = arg;
	int action = ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);

	/* hs may be freed inside: only its http is used afterwards. */
	http_socket_action(hs->http, fd, action);
}

static void http_timer_event_cb(evutil_socket_t fd, short what, void *arg)
{
	http_socket_action(arg, CURL_SOCKET_TIMEOUT, 0);
}

static void http_sock_free(struct engine_http *http, struct http_sock *hs)
{
	if (!hs)
		return;
	if (hs->ev)
		event_free(hs->ev);
	if (hs->prev)
		hs->prev->next = hs->next;
	else
		http->socks = hs->next;
	if (hs->next)
		hs->next->prev = hs->prev;
	free(hs);
}

static struct http_sock *http_sock_new(struct engine_http *http, curl_socket_t fd)
{
	struct http_sock *hs = xcalloc(1, sizeof(*hs));

	hs->http = http;
	hs->fd = fd;
	hs->next = http->socks;
	if (http->socks)
		http->socks->prev = hs;
	http->socks = hs;
	if (curl_multi_assign(http->multi, fd, hs) != CURLM_OK)
		log_warnx("%s: cannot attach socket %d, ignoring", __func__, (int)fd);
	return hs;
}

/* CURLMOPT_SOCKETFUNCTION: (re)arms one persistent event per socket. */
static int http_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct engine_http *http = userp;
	struct http_sock *hs = socketp;
	short kind;

	if (what == CURL_POLL_REMOVE) {
		http_sock_free(http, hs);
		return 0;
	}
	if (!hs)
		hs = http_sock_new(http, fd);
	kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
	if (hs->ev)
		event_free(hs->ev);
	hs->ev = event_new(http->base, fd, kind, http_sock_event_cb, hs);
	if (!hs->ev || event_add(hs->ev, NULL) < 0) {
		log_warnx("%s: cannot watch socket %d", __func__, (int)fd);
		return -1;
	}
	return 0;
}

/* CURLMOPT_TIMERFUNCTION: one evtimer; -1 means delete it. */
static int http_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	struct engine_http *http = userp;
	struct timeval tv;

	if (timeout_ms < 0)
		return evtimer_del(http->timer) < 0 ? -1 : 0;
	tv = ms_to_tv(timeout_ms);
	return evtimer_add(http->timer, &tv) < 0 ? -1 : 0;
}

static void req_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct engine_req *req = arg;

	log_debug("engine", "req %llu %s %s: no byte for %ld ms", (unsigned long long)req->req_id,
		  req->req_method, req->req_path, req->req_idle_ms);
	req_complete(req, -ETIMEDOUT);
}

/* ---- setting up a request ------------------------------------------------- */

static const char *const engine_methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE" };

static int call_validate(const struct engine_call *call)
{
	bool known = false;

	for (size_t i = 0; i < ELEMENTSOF(engine_methods); i++)
		known = known || (call->method && strcmp(call->method, engine_methods[i]) == 0);
	if (!known || !call->path || call->path[0] != '/')
		return -EINVAL;
	if (strlen(call->path) > ENGINE_HTTP_MAX_URL)
		return -ENAMETOOLONG;
	for (const char *p = call->path; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return -EINVAL;
	if (call->body_len > 0 && !call->body)
		return -EINVAL;
	if (call->body_len > 0 && (!strcmp(call->method, "GET") || !strcmp(call->method, "HEAD")))
		return -EINVAL;
	if (call->content_type && strpbrk(call->content_type, "\r\n"))
		return -EINVAL;
	return 0;
}

static int req_setup_method(struct engine_req *req)
{
	CURL *e = req->req_easy;
	bool bad = false;
	bool has_body = strcmp(req->req_method, "POST") == 0 || strcmp(req->req_method, "PUT") == 0 ||
			req->req_body_len > 0;

	if (strcmp(req->req_method, "HEAD") == 0)
		bad |= curl_easy_setopt(e, CURLOPT_NOBODY, 1L) != CURLE_OK;
	else if (strcmp(req->req_method, "GET") == 0)
		bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
	if (has_body) {
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->req_body ? req->req_body : "") != CURLE_OK;
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->req_body_len) != CURLE_OK;
	}
	if (strcmp(req->req_method, "POST") != 0 && strcmp(req->req_method, "GET") != 0 &&
	    strcmp(req->req_method, "HEAD") != 0)
		bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->req_method) != CURLE_OK;
	return bad ? -EIO : 0;
}

static int req_setup_headers(struct engine_req *req, const char *content_type)
{
	_cleanup_free_ char *ct = content_type ? xasprintf("Content-Type: %s", content_type)
					       : xstrdup("Content-Type:");
	struct curl_slist *l;

	/* "Expect:" stops libcurl's 100-continue; a bare "Content-Type:" its
	 * form-urlencoded default. No Accept-Encoding is ever sent. */
	l = curl_slist_append(NULL, "Expect:");
	if (l)
		req->req_hdrs_out = l;
	l = l ? curl_slist_append(l, ct) : NULL;
	if (!l)
		return -ENOMEM;
	return curl_easy_setopt(req->req_easy, CURLOPT_HTTPHEADER, l) == CURLE_OK ? 0 : -EIO;
}

static int req_setup_endpoint(struct engine_req *req, const struct engine_endpoint *ep)
{
	CURL *e = req->req_easy;
	bool bad = false;

	if (ep->kind == ENGINE_ENDPOINT_UNIX)
		return curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, ep->unix_path) == CURLE_OK ? 0 : -EIO;
	if (!ep->tls)
		return 0;
	if (ep->ca_file)
		bad |= curl_easy_setopt(e, CURLOPT_CAINFO, ep->ca_file) != CURLE_OK;
	if (ep->cert_file)
		bad |= curl_easy_setopt(e, CURLOPT_SSLCERT, ep->cert_file) != CURLE_OK;
	if (ep->key_file)
		bad |= curl_easy_setopt(e, CURLOPT_SSLKEY, ep->key_file) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, ep->tls_verify ? 1L : 0L) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, ep->tls_verify ? 2L : 0L) != CURLE_OK;
	return bad ? -EIO : 0;
}

static int req_setup_easy(struct engine_req *req, const struct engine_call *call)
{
	struct engine_http *http = req->req_http;
	_cleanup_free_ char *url = xasprintf("%s%s", http->ep->base_url, call->path);
	CURL *e = req->req_easy;
	bool bad = false;

	bad |= curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)req) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->req_errbuf) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, req_write_cb) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, req) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, req_header_cb) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, req) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
	bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
	bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) != CURLE_OK;
#endif
	bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ENGINE_HTTP_CONNECT_TIMEOUT_MS) != CURLE_OK;
	if (call->timeout_ms > 0)
		bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, call->timeout_ms) != CURLE_OK;
	if (bad)
		return -EIO;
	return req_setup_endpoint(req, http->ep);
}

static struct engine_req *req_new(struct engine_http *http, const struct engine_call *call,
				  engine_done_cb *cb, void *arg)
{
	struct engine_req *req = xcalloc(1, sizeof(*req));

	req->req_http = http;
	req->req_state = ENGINE_REQ_NEW;
	req->req_id = http->started + 1;
	req->req_method = xstrdup(call->method);
	req->req_path = xstrdup(call->path);
	if (call->body_len > 0) {
		req->req_body = xmalloc(call->body_len);
		memcpy(req->req_body, call->body, call->body_len);
		req->req_body_len = call->body_len;
	}
	req->req_cb = cb;
	req->req_arg = arg;
	req->req_on_data = call->on_data;
	req->req_data_arg = call->data_arg;
	req->req_max_body = call->max_body ? call->max_body : ENGINE_HTTP_DEFAULT_MAX_BODY;
	req->req_idle_ms = call->idle_timeout_ms;
	return req;
}

static int req_setup(struct engine_req *req, const struct engine_call *call)
{
	int r;

	req->req_easy = curl_easy_init();
	if (!req->req_easy)
		return -ENOMEM;
	r = req_setup_easy(req, call);
	if (r >= 0)
		r = req_setup_method(req);
	if (r >= 0)
		r = req_setup_headers(req, call->content_type);
	if (r < 0)
		return r;
	if (req->req_idle_ms > 0) {
		req->req_idle = evtimer_new(req->req_http->base, req_idle_cb, req);
		if (!req->req_idle)
			return -ENOMEM;
	}
	return 0;
}

/* ---- public API -------------------------------------------------------------- */

int engine_req_start(struct engine_http *http, const struct engine_call *call, engine_done_cb *cb,
		     void *arg, struct engine_req **ret_req)
{
	struct engine_req *req;
	CURLMcode mc;
	int r;

	if (!http || !call || !cb)
		return -EINVAL;
	if (http->dead)
		return -ESHUTDOWN;
	if (http->in_curl)
		return -EBUSY;
	r = call_validate(call);
	if (r < 0)
		return r;
	req = req_new(http, call, cb, arg);
	r = req_setup(req, call);
	if (r < 0) {
		req_free(req);
		return r;
	}
	/* Adding only arms the timer: nothing runs before the loop does. */
	mc = curl_multi_add_handle(http->multi, req->req_easy);
	if (mc != CURLM_OK) {
		log_warnx("%s: %s %s: %s", __func__, call->method, call->path, curl_multi_strerror(mc));
		req_free(req);
		return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
	}
	req_set_state(req, ENGINE_REQ_RUNNING);
	req_link(req);
	http->started++;
	req_touch(req);
	if (ret_req)
		*ret_req = req;
	return 0;
}

void engine_req_cancel(struct engine_req *req)
{
	if (!req || req->req_state != ENGINE_REQ_RUNNING)
		return;
	/* Cancelling from on_data (inside libcurl) is a caller bug. */
	assert(!req->req_http->in_curl);
	req_complete(req, -ECANCELED);
}

void engine_req_resume(struct engine_req *req)
{
	struct engine_http *http;
	CURLcode code;

	if (!req || req->req_state != ENGINE_REQ_RUNNING)
		return;
	http = req->req_http;
	/* Resuming from on_data (inside libcurl) is a caller bug. */
	assert(!http->in_curl);
	http_enter(http);
	/* the idle deadline runs again from now (on_data may pause it again) */
	req->req_paused = false;
	req_touch(req);
	http->in_curl = true;
	/* May hand the kept chunk to on_data now; the rest comes from the loop. */
	code = curl_easy_pause(req->req_easy, CURLPAUSE_CONT);
	http->in_curl = false;
	if (code != CURLE_OK) {
		/* on_data refused the kept chunk (its abort: libcurl 7.88 then
		 * returns CURLE_WRITE_ERROR before it arms the transfer again), or
		 * libcurl failed: nothing would ever drive this transfer on, so it
		 * ends here and its done callback fires now. */
		log_debug("engine", "req %llu %s %s: resume: %s", (unsigned long long)req->req_id,
			  req->req_method, req->req_path, curl_easy_strerror(code));
		req_complete(req, req->req_abort < 0 ? req->req_abort : curlcode_to_errno(code));
	}
	http_check_done(http);
	http_leave(http);
}

const char *engine_reply_header(const struct engine_reply *reply, const char *name)
{
	const struct engine_req *req;

	if (!reply || !reply->req || !name)
		return NULL;
	req = reply->req;
	for (size_t i = 0; i < req->req_nhdrs; i++)
		if (strcasecmp(req->req_hdrs[i].name, name) == 0)
			return req->req_hdrs[i].value;
	return NULL;
}

uint64_t engine_http_requests_started(const struct engine_http *http)
{
	return http ? http->started : 0;
}

unsigned engine_http_requests_in_flight(const struct engine_http *http)
{
	return http ? http->in_flight : 0;
}

static pthread_once_t http_global_once = PTHREAD_ONCE_INIT;
static CURLcode http_global_result = CURLE_FAILED_INIT;

static void http_global_init(void)
{
	http_global_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct engine_http *engine_http_new(struct event_base *base, const struct engine_endpoint *endpoint)
{
	struct engine_http *http;
	bool bad = false;

	if (!base || !endpoint || !endpoint->base_url)
		return NULL;
	if (pthread_once(&http_global_once, http_global_init) != 0 || http_global_result != CURLE_OK)
		return NULL;
	http = xcalloc(1, sizeof(*http));
	http->base = base;
	http->ep = engine_endpoint_dup(endpoint);
	http->multi = curl_multi_init();
	http->timer = evtimer_new(base, http_timer_event_cb, http);
	if (!http->multi || !http->timer) {
		http_destroy(http);
		return NULL;
	}
	bad |= curl_multi_setopt(http->multi, CURLMOPT_SOCKETFUNCTION, http_socket_cb) != CURLM_OK;
	bad |= curl_multi_setopt(http->multi, CURLMOPT_SOCKETDATA, http) != CURLM_OK;
	bad |= curl_multi_setopt(http->multi, CURLMOPT_TIMERFUNCTION, http_timer_cb) != CURLM_OK;
	bad |= curl_multi_setopt(http->multi, CURLMOPT_TIMERDATA, http) != CURLM_OK;
	bad |= curl_multi_setopt(http->multi, CURLMOPT_MAXCONNECTS, ENGINE_HTTP_MAX_IDLE_CONNECTIONS) != CURLM_OK;
	if (bad) {
		http_destroy(http);
		return NULL;
	}
	return http;
}

/* Frees what is left once no request remains. */
static void http_destroy(struct engine_http *http)
{
	assert(!http->reqs);
	if (http->multi)
		curl_multi_cleanup(http->multi);
	while (http->socks)
		http_sock_free(http, http->socks);
	if (http->timer)
		event_free(http->timer);
	engine_endpoint_free(http->ep);
	free(http);
}

struct engine_http *engine_http_free(struct engine_http *http)
{
	if (!http || http->dead)
		return NULL;
	/* Freeing from on_data (inside libcurl) is a caller bug. */
	assert(!http->in_curl);
	http->dead = true;
	http_enter(http);
	while (http->reqs)
		req_complete(http->reqs, -ECANCELED);
	http_leave(http);
	return NULL;
}
