/* engine.c — the engine session (see engine.h for the state machine).
 *
 * A probe is two requests: GET /_ping (unversioned; its Api-Version header
 * is the engine's maximum) and GET /vX.Y/version on the negotiated version.
 * Only engine_start() shows ENGINE_CONNECTING; a retry keeps the current
 * state, so state_cb fires and the log speaks once per change, not per try.
 *
 * Calls go through call_done_cb, which notices transport failures before
 * handing the result on. Callbacks may free the engine: entries from the
 * loop are bracketed by engine_enter()/engine_leave() like the http layer. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cleanup.h"
#include "engine.h"
#include "hijack.h"
#include "log.h"
#include "xmalloc.h"

#define ENGINE_PROBE_MAX_BODY          (64 * 1024)
#define ENGINE_PROBE_DEFAULT_TIMEOUT_MS 10000   /* when opts.timeout_ms is 0 */
#define ENGINE_DEFAULT_RECONNECT_MIN_MS 100
#define ENGINE_API_VERSION_LEN          16      /* "NNNN.NNNN" and a NUL */
#define ENGINE_API_PART_MAX             9999    /* a version part above this is garbage */
#define ENGINE_MESSAGE_MAX              512     /* engine error text kept for the log (last_detail) */

enum engine_probe_step {
	ENGINE_PROBE_IDLE,
	ENGINE_PROBE_PING,
	ENGINE_PROBE_VERSION,
};

struct engine {
	struct event_base *base;
	struct engine_endpoint *ep;
	struct engine_http *http;
	struct engine_options opts;
	engine_state_cb *state_cb;
	void *state_arg;
	enum engine_state state;
	enum engine_probe_step probe_step;
	struct engine_req *probe_req;
	struct event *retry_timer;
	long backoff_ms;
	char engine_api[ENGINE_API_VERSION_LEN];   /* from the probe in progress */
	char api[ENGINE_API_VERSION_LEN];          /* negotiated by it */
	struct engine_info *info;
	char *last_error;          /* a stable reason: the step, the status, our endpoint */
	char *last_detail;         /* the reason with the engine's, libc's and curl's text: the log's */
	uint64_t call_requests;
	unsigned busy;
	bool dead;
	struct engine_hijack_set hijacks;   /* hijack.h: cancelled by engine_free */
};

/* What a call carries through its request. */
struct engine_call_ctx {
	struct engine *e;
	engine_done_cb *cb;
	void *arg;
	char *what;                /* "GET /v1.45/containers/json" (no query: a caller's image ref), for last_error */
};

const char *engine_state_to_string(enum engine_state s)
{
	static const char *const names[_ENGINE_STATE_MAX] = {
		[ENGINE_CONNECTING] = "connecting",
		[ENGINE_REACHABLE] = "reachable",
		[ENGINE_UNREACHABLE] = "unreachable",
		[ENGINE_UNSUPPORTED] = "unsupported",
	};

	if ((unsigned)s >= _ENGINE_STATE_MAX)
		return "invalid";
	return names[s];
}

/* ---- versions --------------------------------------------------------------- */

/* "MAJOR.MINOR", decimal, each part at most ENGINE_API_PART_MAX. */
static bool api_version_parse(const char *s, unsigned *ret_major, unsigned *ret_minor)
{
	unsigned v[2] = { 0, 0 };

	if (!s)
		return false;
	for (unsigned part = 0; part < 2; part++) {
		const char *start = s;

		while (*s >= '0' && *s <= '9') {
			v[part] = v[part] * 10 + (unsigned)(*s - '0');
			if (v[part] > ENGINE_API_PART_MAX)
				return false;
			s++;
		}
		if (s == start || *s != (part == 0 ? '.' : '\0'))
			return false;
		s++;
	}
	*ret_major = v[0];
	*ret_minor = v[1];
	return true;
}

int engine_api_version_cmp(const char *a, const char *b)
{
	unsigned amaj = 0, amin = 0, bmaj = 0, bmin = 0;
	bool aok = api_version_parse(a, &amaj, &amin);
	bool bok = api_version_parse(b, &bmaj, &bmin);

	if (!aok || !bok)
		return (int)aok - (int)bok;
	if (amaj != bmaj)
		return amaj < bmaj ? -1 : 1;
	if (amin != bmin)
		return amin < bmin ? -1 : 1;
	return 0;
}

/* ---- info -------------------------------------------------------------------- */

static struct engine_info *engine_info_free(struct engine_info *info)
{
	if (!info)
		return NULL;
	free(info->version);
	free(info->engine_api_version);
	free(info->api_version);
	free(info->os);
	free(info->arch);
	free(info->kernel_version);
	free(info);
	return NULL;
}

static char *json_string_dup(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));  /* borrows */

	return xstrdup(s ? s : "");
}

/* Builds the info from a /version body; NULL if it is not usable. */
static struct engine_info *engine_info_parse(const char *body, size_t len, const char *engine_api,
					     const char *api)
{
	json_auto_t *v = json_loadb(body, len, 0, NULL);
	struct engine_info *info;

	if (!json_is_object(v) || !json_is_string(json_object_get(v, "Version")))
		return NULL;
	info = xcalloc(1, sizeof(*info));
	info->version = json_string_dup(v, "Version");
	info->os = json_string_dup(v, "Os");
	info->arch = json_string_dup(v, "Arch");
	info->kernel_version = json_string_dup(v, "KernelVersion");
	info->engine_api_version = xstrdup(engine_api);
	info->api_version = xstrdup(api);
	return info;
}

/* Docker's {"message": …} out of an error body, or the start of the body,
 * cut to ENGINE_MESSAGE_MAX bytes with control characters replaced: it
 * goes into logs and status replies. */
static char *reply_message(const struct engine_reply *reply)
{
	json_auto_t *v = json_loadb(reply->body, reply->body_len, 0, NULL);
	const char *m = json_string_value(json_object_get(v, "message"));  /* borrows */
	char *s;

	if (!m && reply->body_len == 0)
		return xstrdup("(empty body)");
	s = xstrndup(m ? m : reply->body, ENGINE_MESSAGE_MAX);
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	return s;
}

/* ---- state ----------------------------------------------------------------- */

static void engine_destroy(struct engine *e);

static void engine_enter(struct engine *e)
{
	e->busy++;
}

static void engine_leave(struct engine *e)
{
	assert(e->busy > 0);
	if (--e->busy == 0 && e->dead)
		engine_destroy(e);
}

static struct timeval ms_to_tv(long ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

static void engine_log_state(const struct engine *e)
{
	const char *why = e->last_detail ? e->last_detail : "unknown error";

	switch (e->state) {
	case ENGINE_CONNECTING:
		log_info("engine: connecting to %s (from %s)", e->ep->host, e->ep->source);
		break;
	case ENGINE_REACHABLE:
		log_info("engine: reachable at %s: Docker %s, API %s (engine's maximum %s)", e->ep->host,
			 e->info->version, e->info->api_version, e->info->engine_api_version);
		break;
	case ENGINE_UNREACHABLE:
		log_warnx("engine: %s is unreachable: %s; retrying", e->ep->host, why);
		break;
	case ENGINE_UNSUPPORTED:
		log_warnx("engine: %s is not supported: %s; retrying", e->ep->host, why);
		break;
	default:
		assert(!"unreachable");
	}
}

/* The one transition function: logs and reports changes only. */
static void engine_set_state(struct engine *e, enum engine_state s)
{
	enum engine_state old = e->state;

	assert((unsigned)s < _ENGINE_STATE_MAX);
	if (old == s)
		return;
	e->state = s;
	engine_log_state(e);
	if (e->state_cb)
		e->state_cb(e, old, s, e->state_arg);
}

static void engine_clear_error(struct engine *e)
{
	free(e->last_error);
	free(e->last_detail);
	e->last_error = e->last_detail = NULL;
}

/* last_error becomes the stable reason fmt makes (daemon.status shows it);
 * detail (the engine's message, strerror, curl's text; NULL: none) is
 * appended for the log only. */
static void engine_set_error(struct engine *e, const char *detail, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void engine_set_error(struct engine *e, const char *detail, const char *fmt, ...)
{
	va_list ap;

	engine_clear_error(e);
	va_start(ap, fmt);
	e->last_error = xvasprintf(fmt, ap);
	va_end(ap);
	e->last_detail = detail ? xasprintf("%s (%s)", e->last_error, detail) : xstrdup(e->last_error);
	log_debug("engine", "%s", e->last_detail);
}

/* "GET /_ping: could not connect to unix:///var/run/docker.sock"; the log
 * adds "(Connection refused: Could not connect to server)". */
static void engine_set_transport_error(struct engine *e, const char *what, int error,
				       const struct engine_reply *reply)
{
	const char *text = reply && reply->error_text ? reply->error_text : "";
	_cleanup_free_ char *detail = xasprintf("%s%s%s", strerror(-error), *text ? ": " : "", text);
	const char *host = e->ep->host;

	switch (error) {
	case -ETIMEDOUT:
		engine_set_error(e, detail, "%s: no answer from %s in time", what, host);
		break;
	case -ECONNRESET:
	case -EPIPE:
		engine_set_error(e, detail, "%s: the connection to %s was cut", what, host);
		break;
	case -EPROTO:
	case -EMSGSIZE:
	case -EBADMSG:
		engine_set_error(e, detail, "%s: %s sent an unusable reply", what, host);
		break;
	default:
		engine_set_error(e, detail, "%s: could not connect to %s", what, host);
		break;
	}
}

static void engine_options_normalize(struct engine_options *o)
{
	if (o->timeout_ms < 0)
		o->timeout_ms = 0;
	if (o->reconnect_min_ms <= 0)
		o->reconnect_min_ms = ENGINE_DEFAULT_RECONNECT_MIN_MS;
	if (o->reconnect_max_ms < o->reconnect_min_ms)
		o->reconnect_max_ms = o->reconnect_min_ms;
}

/* ---- probing ------------------------------------------------------------------ */

static void engine_probe_start(struct engine *e);

static void engine_schedule_retry(struct engine *e)
{
	struct timeval tv = ms_to_tv(e->backoff_ms);

	if (e->dead)
		return;
	log_debug("engine", "next probe in %ld ms", e->backoff_ms);
	if (evtimer_add(e->retry_timer, &tv) < 0)
		log_warnx("%s: cannot arm the retry timer; the engine is not probed again", __func__);
	e->backoff_ms = e->backoff_ms > e->opts.reconnect_max_ms / 2 ? e->opts.reconnect_max_ms
								     : 2 * e->backoff_ms;
}

/* A probe ended without success; e->last_error says why. */
static void engine_probe_failed(struct engine *e, enum engine_state s)
{
	e->probe_step = ENGINE_PROBE_IDLE;
	engine_set_state(e, s);
	engine_schedule_retry(e);
}

static long engine_probe_timeout(const struct engine *e)
{
	return e->opts.timeout_ms > 0 ? e->opts.timeout_ms : ENGINE_PROBE_DEFAULT_TIMEOUT_MS;
}

static void engine_probe_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				 void *arg);

static void engine_probe_version(struct engine *e)
{
	_cleanup_free_ char *path = xasprintf("/v%s/version", e->api);
	struct engine_call call = {
		.method = "GET", .path = path, .timeout_ms = engine_probe_timeout(e),
		.max_body = ENGINE_PROBE_MAX_BODY,
	};
	int r;

	e->probe_step = ENGINE_PROBE_VERSION;
	r = engine_req_start(e->http, &call, engine_probe_done_cb, e, &e->probe_req);
	if (r < 0) {
		engine_set_error(e, strerror(-r), "GET %s: could not start the request", path);
		engine_probe_failed(e, ENGINE_UNREACHABLE);
	}
}

/* Api-Version from /_ping → negotiated version, or UNSUPPORTED. */
static void engine_ping_result(struct engine *e, int error, const struct engine_reply *reply)
{
	const char *v = engine_reply_header(reply, "Api-Version");
	unsigned major, minor;

	if (error < 0) {
		engine_set_transport_error(e, "GET /_ping", error, reply);
		engine_probe_failed(e, ENGINE_UNREACHABLE);
		return;
	}
	if (reply->status != 200) {
		_cleanup_free_ char *msg = reply_message(reply);

		engine_set_error(e, msg, "GET /_ping: HTTP %ld", reply->status);
		engine_probe_failed(e, ENGINE_UNREACHABLE);
		return;
	}
	if (!api_version_parse(v, &major, &minor)) {
		_cleanup_free_ char *seen = v ? xasprintf("\"%.32s\"", v) : NULL;

		if (seen)   /* the engine's bytes: the log's only */
			for (char *p = seen; *p; p++)
				if ((unsigned char)*p < ' ' || *p == 0x7f)
					*p = '?';
		engine_set_error(e, seen, "GET /_ping: %s Api-Version header", v ? "unusable" : "no");
		engine_probe_failed(e, ENGINE_UNREACHABLE);
		return;
	}
	snprintf(e->engine_api, sizeof(e->engine_api), "%u.%u", major, minor);
	if (engine_api_version_cmp(e->engine_api, MSB_ENGINE_API_MAX) > 0)
		snprintf(e->api, sizeof(e->api), "%s", MSB_ENGINE_API_MAX);
	else
		snprintf(e->api, sizeof(e->api), "%s", e->engine_api);
	if (engine_api_version_cmp(e->api, MSB_ENGINE_API_MIN) < 0) {
		engine_set_error(e, NULL, "the engine speaks API versions up to %s; this daemon needs %s to %s",
				 e->engine_api, MSB_ENGINE_API_MIN, MSB_ENGINE_API_MAX);
		engine_probe_failed(e, ENGINE_UNSUPPORTED);
		return;
	}
	engine_probe_version(e);
}

/* /vX.Y/version → info and ENGINE_REACHABLE. */
static void engine_version_result(struct engine *e, int error, const struct engine_reply *reply)
{
	_cleanup_free_ char *what = xasprintf("GET /v%s/version", e->api);
	_cleanup_free_ char *msg = NULL;
	struct engine_info *info;

	if (error < 0) {
		engine_set_transport_error(e, what, error, reply);
		engine_probe_failed(e, ENGINE_UNREACHABLE);
		return;
	}
	if (reply->status != 200) {
		msg = reply_message(reply);
		/* 400 is the engine refusing our API version (too old or new). */
		engine_set_error(e, msg, "%s: HTTP %ld%s", what, reply->status,
				 reply->status == 400 ? " (the engine refuses this API version)" : "");
		engine_probe_failed(e, reply->status == 400 ? ENGINE_UNSUPPORTED : ENGINE_UNREACHABLE);
		return;
	}
	info = engine_info_parse(reply->body, reply->body_len, e->engine_api, e->api);
	if (!info) {
		engine_set_error(e, NULL, "%s: the reply is not a version object", what);
		engine_probe_failed(e, ENGINE_UNREACHABLE);
		return;
	}
	engine_info_free(e->info);
	e->info = info;
	engine_clear_error(e);
	e->backoff_ms = e->opts.reconnect_min_ms;
	e->probe_step = ENGINE_PROBE_IDLE;
	engine_set_state(e, ENGINE_REACHABLE);
}

/* One completion for both probe steps: the step says which result it is. */
static void engine_probe_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				 void *arg)
{
	struct engine *e = arg;
	enum engine_probe_step step = e->probe_step;

	e->probe_req = NULL;
	if (e->dead) {
		e->probe_step = ENGINE_PROBE_IDLE;
		return;
	}
	engine_enter(e);
	if (step == ENGINE_PROBE_PING)
		engine_ping_result(e, error, reply);
	else
		engine_version_result(e, error, reply);
	engine_leave(e);
}

static void engine_probe_start(struct engine *e)
{
	struct engine_call call = {
		.method = "GET", .path = "/_ping", .timeout_ms = engine_probe_timeout(e),
		.max_body = ENGINE_PROBE_MAX_BODY,
	};
	int r;

	if (e->dead || e->probe_step != ENGINE_PROBE_IDLE)
		return;
	evtimer_del(e->retry_timer);
	e->probe_step = ENGINE_PROBE_PING;
	r = engine_req_start(e->http, &call, engine_probe_done_cb, e, &e->probe_req);
	if (r < 0) {
		engine_set_error(e, strerror(-r), "GET /_ping: could not start the request");
		engine_probe_failed(e, ENGINE_UNREACHABLE);
	}
}

static void engine_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct engine *e = arg;

	engine_enter(e);
	engine_probe_start(e);
	engine_leave(e);
}

/* ---- calls --------------------------------------------------------------------- */

static bool engine_error_is_transport(int error)
{
	return error == -ECONNREFUSED || error == -ECONNRESET;
}

static void engine_call_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				void *arg)
{
	struct engine_call_ctx *ctx = arg;
	struct engine *e = ctx->e;

	engine_enter(e);
	/* A reset after the engine answered (a stream cut mid-body) is that
	 * request's failure, not a lost engine: other calls — the unpause a
	 * frozen copy owes — must still go out. */
	if (!e->dead && engine_error_is_transport(error) && e->state == ENGINE_REACHABLE &&
	    !(error == -ECONNRESET && reply && reply->status > 0)) {
		engine_set_transport_error(e, ctx->what, error, reply);
		e->backoff_ms = e->opts.reconnect_min_ms;
		engine_set_state(e, ENGINE_UNREACHABLE);
		engine_probe_start(e);
	}
	ctx->cb(req, error, reply, ctx->arg);
	free(ctx->what);
	free(ctx);
	engine_leave(e);
}

int engine_call_start(struct engine *e, const struct engine_call *call, engine_done_cb *cb,
		      void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *path = NULL;
	struct engine_call c;
	struct engine_call_ctx *ctx;
	size_t qlen;
	int r;

	if (!e || !call || !cb || !call->path || call->path[0] != '/')
		return -EINVAL;
	if (e->dead || e->state != ENGINE_REACHABLE)
		return -ENOTCONN;
	path = xasprintf("/v%s%s", e->api, call->path);
	c = *call;
	c.path = path;
	if (c.timeout_ms == 0 && !c.on_data)
		c.timeout_ms = e->opts.timeout_ms;
	ctx = xmalloc(sizeof(*ctx));
	qlen = strcspn(path, "?");
	*ctx = (struct engine_call_ctx){ .e = e, .cb = cb, .arg = arg,
					 .what = xasprintf("%.16s %.*s", c.method ? c.method : "?",
							   (int)(qlen < 200 ? qlen : 200), path) };
	r = engine_req_start(e->http, &c, engine_call_done_cb, ctx, ret_req);
	if (r < 0) {
		free(ctx->what);
		free(ctx);
		return r;
	}
	e->call_requests++;
	return 0;
}

int engine_hijack_call(struct engine *e, const char *path, const char *body,
		       int (*data)(const void *, size_t, void *),
		       void (*done)(int, long, const char *, size_t, void *), void *arg,
		       struct engine_hijack **ret)
{
	_cleanup_free_ char *vpath = NULL;

	if (!e || !path || path[0] != '/')
		return -EINVAL;
	if (e->dead || e->state != ENGINE_REACHABLE)
		return -ENOTCONN;
	vpath = xasprintf("/v%s%s", e->api, path);
	e->call_requests++;
	return engine_hijack_start(e->base, e->ep, &e->hijacks, vpath, body, data, done, arg, ret);
}

/* ---- lifetime and getters ---------------------------------------------------- */

struct engine *engine_new(struct event_base *base, struct engine_endpoint *endpoint,
			  const struct engine_options *opts, engine_state_cb *state_cb, void *arg)
{
	struct engine *e;

	if (!base || !endpoint || !opts) {
		engine_endpoint_free(endpoint);
		return NULL;
	}
	e = xcalloc(1, sizeof(*e));
	e->base = base;
	e->ep = endpoint;
	e->opts = *opts;
	engine_options_normalize(&e->opts);
	e->backoff_ms = e->opts.reconnect_min_ms;
	e->state_cb = state_cb;
	e->state_arg = arg;
	e->state = ENGINE_CONNECTING;
	e->http = engine_http_new(base, endpoint);
	e->retry_timer = evtimer_new(base, engine_retry_cb, e);
	if (!e->http || !e->retry_timer) {
		engine_destroy(e);
		return NULL;
	}
	return e;
}

void engine_start(struct engine *e)
{
	if (!e || e->dead)
		return;
	engine_enter(e);
	log_info("engine: connecting to %s (from %s)", e->ep->host, e->ep->source);
	engine_probe_start(e);
	engine_leave(e);
}

static void engine_destroy(struct engine *e)
{
	e->http = engine_http_free(e->http);
	if (e->retry_timer)
		event_free(e->retry_timer);
	engine_info_free(e->info);
	engine_endpoint_free(e->ep);
	engine_clear_error(e);
	free(e);
}

struct engine *engine_free(struct engine *e)
{
	if (!e || e->dead)
		return NULL;
	e->dead = true;
	engine_enter(e);
	engine_hijack_set_cancel_all(&e->hijacks);
	/* Cancels the probe (ignored, e is dead) and every call (their callbacks fire). */
	e->http = engine_http_free(e->http);
	engine_leave(e);
	return NULL;
}

void engine_set_options(struct engine *e, const struct engine_options *opts)
{
	if (!e || !opts)
		return;
	e->opts = *opts;
	engine_options_normalize(&e->opts);
	if (e->backoff_ms < e->opts.reconnect_min_ms)
		e->backoff_ms = e->opts.reconnect_min_ms;
	if (e->backoff_ms > e->opts.reconnect_max_ms)
		e->backoff_ms = e->opts.reconnect_max_ms;
}

enum engine_state engine_get_state(const struct engine *e)
{
	return e->state;
}

const struct engine_info *engine_get_info(const struct engine *e)
{
	return e->info;
}

const struct engine_endpoint *engine_get_endpoint(const struct engine *e)
{
	return e->ep;
}

const char *engine_get_last_error(const struct engine *e)
{
	return e->last_error;
}

uint64_t engine_requests_made(const struct engine *e)
{
	return engine_http_requests_started(e->http);
}

uint64_t engine_call_requests_made(const struct engine *e)
{
	return e->call_requests;
}

long engine_default_timeout_ms(const struct engine *e)
{
	return e->opts.timeout_ms;
}
