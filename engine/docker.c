/* docker.c — typed Engine API calls on engine_call_start (see docker.h).
 *
 * Four kinds of request:
 *   - buffered JSON calls (docker_call and its wrappers, the archive PUT):
 *     one small context per call carries the caller's callback; the reply
 *     body is parsed, lent to the callback, and freed with the context
 *     right after it returns;
 *   - the archive HEAD and GET: the stat header is lent raw; the GET's tar
 *     streams through on_data straight to the caller (http.h's on_data
 *     rules bind its data callback), a failed reply's body is kept, capped,
 *     for its message;
 *   - the pull: the body streams through on_data into a frame_buf split on
 *     LF. Progress is handed on from inside the transfer, so http.h's on_data
 *     rules bind the progress callback (no cancel, no free; a request it
 *     starts is refused with -EBUSY). The first in-band error aborts the
 *     request by returning a negative value from on_data;
 *   - the /events follower: lines are parsed inside the transfer but queued,
 *     and handed to the event callback from the loop (an event made active),
 *     so its callbacks may start requests and free the follower. Entries
 *     from the loop are bracketed by events_enter()/events_leave(): a free
 *     inside a callback only marks the follower dead, the last leave frees. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "docker.h"
#include "errors.h"
#include "frame.h"
#include "log.h"
#include "xmalloc.h"

#define DOCKER_CONTENT_TYPE_JSON  "application/json"
#define DOCKER_CONTENT_TYPE_TAR   "application/x-tar"
#define DOCKER_DEFAULT_TAG        "latest"
#define DOCKER_SINCE_LEN          32        /* "seconds.nanoseconds" and a NUL */
/* A stream open this long counts as healthy: its end resets the backoff. */
#define DOCKER_EVENTS_STABLE_MS   DOCKER_EVENTS_RETRY_MAX_MS
/* Events parsed but not yet handed on; more → the stream is dropped and
 * re-followed after a resync (which covers whatever was dropped). */
#define DOCKER_EVENTS_MAX_QUEUED  4096

/* ---- escaping ----------------------------------------------------------------- */

static bool char_is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '.' || c == '_' || c == '~';
}

char *docker_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out, *p;

	if (!s)
		return NULL;
	out = xmalloc(3 * strlen(s) + 1);
	for (p = out; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (char_is_unreserved(c)) {
			*p++ = (char)c;
		} else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 0x0f];
		}
	}
	*p = '\0';
	return out;
}

/* prefix + escaped id + suffix; NULL for a missing or empty id. */
static char *path_with(const char *prefix, const char *id, const char *suffix)
{
	_cleanup_free_ char *esc = NULL;

	if (!id || !*id)
		return NULL;
	esc = docker_escape(id);
	return xasprintf("%s%s%s", prefix, esc, suffix);
}

/* sep + "filters=" + the escaped compact JSON; "" for NULL filters; NULL if
 * they are not an object jansson can encode. */
static char *filters_query(const json_t *filters, char sep)
{
	_cleanup_free_ char *json = NULL, *esc = NULL;

	if (!filters)
		return xstrdup("");
	if (!json_is_object(filters))
		return NULL;
	json = json_dumps(filters, JSON_COMPACT);
	if (!json)
		return NULL;
	esc = docker_escape(json);
	return xasprintf("%cfilters=%s", sep, esc);
}

/* ---- messages ------------------------------------------------------------------- */

/* Untrusted text for a log or an error: at most MSB_ECHO_MAX_BYTES, cut at
 * a UTF-8 character, control characters replaced. malloc'd. */
static char *text_snippet(const char *s)
{
	char *out = xstrndup(s, (size_t)msb_echo_len(s));

	for (char *p = out; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	return out;
}

/* "Connection reset by peer (Recv failure: ...)". malloc'd. */
static char *transport_message(int error, const struct engine_reply *reply)
{
	const char *detail = reply && reply->error_text ? reply->error_text : "";

	if (!*detail)
		return xstrdup(strerror(-error));
	return xasprintf("%s (%s)", strerror(-error), detail);
}

/* The body of a non-200 stream reply is kept, up to one line's limit, for
 * its message. */
static void error_body_keep(struct frame_buf *fb, const void *data, size_t len)
{
	if (len <= fb->max && frame_buf_pending(fb) <= fb->max - len)
		(void)frame_buf_append(fb, data, len);
}

/* Docker's {"message"} from a kept error body, else what the body starts
 * with. malloc'd. */
static char *error_body_message(struct frame_buf *fb, long status)
{
	const char *line = NULL;
	size_t n;

	if (frame_buf_append(fb, "\n", 1) == 0 && frame_buf_next(fb, &line, &n) > 0) {
		json_auto_t *v = json_loadb(line, n, 0, NULL);
		const char *m = json_string_value(json_object_get(v, "message"));  /* borrows */
		_cleanup_free_ char *s = NULL;

		if (m)
			return xstrdup(m);
		s = text_snippet(line);
		return xasprintf("the engine answered HTTP %ld: %s", status, s);
	}
	return xasprintf("the engine answered HTTP %ld", status);
}

/* ---- buffered JSON calls ---------------------------------------------------------- */

struct docker_call_ctx {
	docker_cb *cb;
	void *arg;
};

static void docker_call_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				void *arg)
{
	struct docker_call_ctx *ctx = arg;
	struct docker_reply r = { .error = error };
	json_auto_t *body = NULL;

	if (error == 0) {
		r.status = reply->status;
		if (reply->body_len > 0)
			body = json_loadb(reply->body, reply->body_len, JSON_DECODE_ANY, NULL);
		r.body = body;
		if (reply->status >= 400)
			r.message = json_string_value(json_object_get(body, "message"));  /* borrows */
	}
	ctx->cb(&r, ctx->arg);
	free(ctx);
}

/* Starts call (its max_body set here) with a JSON-decoding completion. */
static int docker_call_start(struct engine *e, struct engine_call *call, docker_cb *cb, void *arg,
			     struct engine_req **ret_req)
{
	struct docker_call_ctx *ctx;
	int r;

	call->max_body = DOCKER_MAX_JSON_REPLY;
	ctx = xmalloc(sizeof(*ctx));
	*ctx = (struct docker_call_ctx){ .cb = cb, .arg = arg };
	r = engine_call_start(e, call, docker_call_done_cb, ctx, ret_req);
	if (r < 0)
		free(ctx);
	return r;
}

int docker_call(struct engine *e, const char *method, const char *path, const json_t *body,
		long timeout_ms, docker_cb *cb, void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *json = NULL;
	struct engine_call call = { .method = method, .path = path, .timeout_ms = timeout_ms };

	if (!e || !method || !path || !cb || timeout_ms < 0)
		return -EINVAL;
	if (body) {
		json = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!json)
			return -EINVAL;
		call.content_type = DOCKER_CONTENT_TYPE_JSON;
		call.body = json;
		call.body_len = strlen(json);
	}
	return docker_call_start(e, &call, cb, arg, ret_req);
}

/* method prefix{id}suffix, id escaped; an empty id is refused. */
static int docker_call_on(struct engine *e, const char *method, const char *prefix, const char *id,
			  const char *suffix, const json_t *body, docker_cb *cb, void *arg,
			  struct engine_req **ret_req)
{
	_cleanup_free_ char *path = path_with(prefix, id, suffix);

	if (!path)
		return -EINVAL;
	return docker_call(e, method, path, body, 0, cb, arg, ret_req);
}

int docker_containers_list(struct engine *e, const json_t *filters, docker_cb *cb, void *arg,
			   struct engine_req **ret_req)
{
	_cleanup_free_ char *q = filters_query(filters, '&');
	_cleanup_free_ char *path = NULL;

	if (!q)
		return -EINVAL;
	path = xasprintf("/containers/json?all=1%s", q);
	return docker_call(e, "GET", path, NULL, 0, cb, arg, ret_req);
}

int docker_container_inspect(struct engine *e, const char *id_or_name, docker_cb *cb, void *arg,
			     struct engine_req **ret_req)
{
	return docker_call_on(e, "GET", "/containers/", id_or_name, "/json", NULL, cb, arg, ret_req);
}

int docker_container_create(struct engine *e, const char *name, const json_t *config, docker_cb *cb,
			    void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *path = NULL;

	if (!json_is_object(config))
		return -EINVAL;
	if (!name)
		return docker_call(e, "POST", "/containers/create", config, 0, cb, arg, ret_req);
	path = path_with("/containers/create?name=", name, "");
	if (!path)
		return -EINVAL;
	return docker_call(e, "POST", path, config, 0, cb, arg, ret_req);
}

int docker_container_start(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req)
{
	return docker_call_on(e, "POST", "/containers/", id, "/start", NULL, cb, arg, ret_req);
}

int docker_container_pause(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req)
{
	return docker_call_on(e, "POST", "/containers/", id, "/pause", NULL, cb, arg, ret_req);
}

int docker_container_unpause(struct engine *e, const char *id, docker_cb *cb, void *arg,
			     struct engine_req **ret_req)
{
	return docker_call_on(e, "POST", "/containers/", id, "/unpause", NULL, cb, arg, ret_req);
}

int docker_container_remove(struct engine *e, const char *id, bool force, docker_cb *cb, void *arg,
			    struct engine_req **ret_req)
{
	return docker_call_on(e, "DELETE", "/containers/", id, force ? "?force=1" : "", NULL, cb, arg,
			      ret_req);
}

int docker_image_inspect(struct engine *e, const char *ref, docker_cb *cb, void *arg,
			 struct engine_req **ret_req)
{
	return docker_call_on(e, "GET", "/images/", ref, "/json", NULL, cb, arg, ret_req);
}

int docker_networks_list(struct engine *e, const json_t *filters, docker_cb *cb, void *arg,
			 struct engine_req **ret_req)
{
	_cleanup_free_ char *q = filters_query(filters, '?');
	_cleanup_free_ char *path = NULL;

	if (!q)
		return -EINVAL;
	path = xasprintf("/networks%s", q);
	return docker_call(e, "GET", path, NULL, 0, cb, arg, ret_req);
}

int docker_network_inspect(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req)
{
	return docker_call_on(e, "GET", "/networks/", id, "", NULL, cb, arg, ret_req);
}

int docker_network_remove(struct engine *e, const char *id, docker_cb *cb, void *arg,
			  struct engine_req **ret_req)
{
	return docker_call_on(e, "DELETE", "/networks/", id, "", NULL, cb, arg, ret_req);
}

int docker_network_create(struct engine *e, const json_t *body, docker_cb *cb, void *arg,
			  struct engine_req **ret_req)
{
	if (!json_is_object(body))
		return -EINVAL;
	return docker_call(e, "POST", "/networks/create", body, 0, cb, arg, ret_req);
}

int docker_network_connect(struct engine *e, const char *net, const json_t *body, docker_cb *cb,
			   void *arg, struct engine_req **ret_req)
{
	if (!json_is_object(body))
		return -EINVAL;
	return docker_call_on(e, "POST", "/networks/", net, "/connect", body, cb, arg, ret_req);
}

int docker_container_stop(struct engine *e, const char *id, long grace_s, docker_cb *cb, void *arg,
			  struct engine_req **ret_req)
{
	_cleanup_free_ char *suffix = NULL, *path = NULL;
	long timeout_ms;

	if (!e || grace_s < 0 || grace_s > 3600)
		return -EINVAL;
	suffix = xasprintf("/stop?t=%ld", grace_s);
	path = path_with("/containers/", id, suffix);
	if (!path)
		return -EINVAL;
	timeout_ms = engine_default_timeout_ms(e) > 0 ? engine_default_timeout_ms(e) + grace_s * 1000 : 0;
	return docker_call(e, "POST", path, NULL, timeout_ms, cb, arg, ret_req);
}

int docker_version(struct engine *e, docker_cb *cb, void *arg, struct engine_req **ret_req)
{
	return docker_call(e, "GET", "/version", NULL, 0, cb, arg, ret_req);
}

/* ---- the archive endpoints ---------------------------------------------------------- */

/* "/containers/{id}/archive?path=PATH" + suffix, both escaped; NULL for a
 * missing or empty id or path. */
static char *archive_path(const char *id, const char *path, const char *suffix)
{
	_cleanup_free_ char *eid = NULL, *epath = NULL;

	if (!id || !*id || !path || !*path)
		return NULL;
	eid = docker_escape(id);
	epath = docker_escape(path);
	return xasprintf("/containers/%s/archive?path=%s%s", eid, epath, suffix);
}

struct docker_stat_ctx {
	docker_stat_cb *cb;
	void *arg;
};

static void archive_stat_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				 void *arg)
{
	struct docker_stat_ctx *ctx = arg;

	if (error < 0)
		ctx->cb(error, 0, NULL, ctx->arg);
	else
		ctx->cb(0, reply->status, engine_reply_header(reply, DOCKER_ARCHIVE_STAT_HEADER), ctx->arg);
	free(ctx);
}

int docker_archive_stat(struct engine *e, const char *id, const char *path, docker_stat_cb *cb,
			void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *url = archive_path(id, path, "");
	struct engine_call call = { .method = "HEAD", .path = url, .max_body = DOCKER_MAX_ERROR_BODY };
	struct docker_stat_ctx *ctx;
	int r;

	if (!e || !url || !cb)
		return -EINVAL;
	ctx = xmalloc(sizeof(*ctx));
	*ctx = (struct docker_stat_ctx){ .cb = cb, .arg = arg };
	r = engine_call_start(e, &call, archive_stat_done_cb, ctx, ret_req);
	if (r < 0)
		free(ctx);
	return r;
}

struct docker_archive_get {
	docker_data_cb *data;
	docker_archive_done_cb *done;
	void *arg;
	int error;            /* the data callback's abort (0: none) */
	char *err_body;       /* a failed reply's body, up to DOCKER_MAX_ERROR_BODY */
	size_t err_len;
	bool err_dropped;     /* it was longer: no message */
};

static void archive_get_free(struct docker_archive_get *g)
{
	free(g->err_body);
	free(g);
}

static void archive_error_body_keep(struct docker_archive_get *g, const void *data, size_t len)
{
	if (g->err_dropped || len > DOCKER_MAX_ERROR_BODY - g->err_len) {
		g->err_dropped = true;
		return;
	}
	g->err_body = xrealloc(g->err_body, g->err_len + len);
	memcpy(g->err_body + g->err_len, data, len);
	g->err_len += len;
}

/* Inside libcurl: a 200's tar goes to the caller, a failure's body is
 * kept for its message; a negative return aborts with that value. */
static int archive_get_data_cb(struct engine_req *req, long status, const void *data, size_t len,
			       void *arg)
{
	struct docker_archive_get *g = arg;
	int r;

	if (g->error < 0)
		return g->error;
	if (status != 200) {
		if (status >= 400)
			archive_error_body_keep(g, data, len);
		return 0;
	}
	r = g->data(data, len, g->arg);
	if (r < 0)
		g->error = r;
	return r < 0 ? r : 0;
}

static void archive_get_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				void *arg)
{
	struct docker_archive_get *g = arg;
	json_auto_t *body = NULL;
	const char *message = NULL;

	if (g->error < 0)
		error = g->error;
	if (error < 0) {
		g->done(error, 0, NULL, NULL, g->arg);
		archive_get_free(g);
		return;
	}
	if (reply->status >= 400 && !g->err_dropped && g->err_len > 0) {
		body = json_loadb(g->err_body, g->err_len, 0, NULL);
		message = json_string_value(json_object_get(body, "message"));  /* borrows */
	}
	g->done(0, reply->status, message, engine_reply_header(reply, DOCKER_ARCHIVE_STAT_HEADER), g->arg);
	archive_get_free(g);
}

int docker_archive_get(struct engine *e, const char *id, const char *path, long idle_timeout_ms,
		       docker_data_cb *data, docker_archive_done_cb *done, void *arg,
		       struct engine_req **ret_req)
{
	_cleanup_free_ char *url = archive_path(id, path, "");
	struct engine_call call = {
		.method = "GET", .path = url, .idle_timeout_ms = idle_timeout_ms, .on_data = archive_get_data_cb,
	};
	struct docker_archive_get *g;
	int r;

	if (!e || !url || !data || !done || idle_timeout_ms < 0)
		return -EINVAL;
	g = xcalloc(1, sizeof(*g));
	g->data = data;
	g->done = done;
	g->arg = arg;
	call.data_arg = g;
	r = engine_call_start(e, &call, archive_get_done_cb, g, ret_req);
	if (r < 0)
		archive_get_free(g);
	return r;
}

int docker_archive_put(struct engine *e, const char *id, const char *dir, const void *tar, size_t len,
		       docker_cb *cb, void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *url = archive_path(id, dir, "&noOverwriteDirNonDir=1");
	struct engine_call call = {
		.method = "PUT", .path = url, .content_type = DOCKER_CONTENT_TYPE_TAR, .body = tar,
		.body_len = len,
	};

	if (!e || !url || !cb || (!tar && len > 0))
		return -EINVAL;
	if (len > DOCKER_MAX_ARCHIVE_PUT)
		return -EMSGSIZE;
	return docker_call_start(e, &call, cb, arg, ret_req);
}

/* ---- the pull --------------------------------------------------------------------------- */

struct docker_pull {
	docker_progress_cb *progress;
	docker_pull_done_cb *done;          /* a load's */
	docker_image_pull_cb *pull_done;    /* a pull's */
	void *arg;
	long status;           /* the reply's HTTP status (0: none) */
	struct frame_buf fb;   /* progress lines; a failed reply's body */
	int error;             /* the failure that ended the pull (0: none yet) */
	char *message;         /* its text */
};

static void pull_free(struct docker_pull *p)
{
	frame_buf_release(&p->fb);
	free(p->message);
	free(p);
}

/* Records the failure (message stolen) and returns it. */
static int pull_fail(struct docker_pull *p, int error, char *message)
{
	assert(error < 0);
	p->error = error;
	free(p->message);
	p->message = message;
	return error;
}

/* errorDetail.message, else error, of an in-band failure line (borrowed). */
static const char *pull_inband_message(const json_t *line)
{
	const char *m = json_string_value(json_object_get(json_object_get(line, "errorDetail"), "message"));

	if (!m)
		m = json_string_value(json_object_get(line, "error"));
	return m ? m : "the engine reported a pull error without a message";
}

static int pull_line(struct docker_pull *p, const char *line, size_t n)
{
	json_auto_t *v = json_loadb(line, n, 0, NULL);

	if (!json_is_object(v)) {
		_cleanup_free_ char *s = text_snippet(line);

		return pull_fail(p, -EPROTO, xasprintf("malformed progress line from the engine: %s", s));
	}
	if (json_object_get(v, "error") || json_object_get(v, "errorDetail"))
		return pull_fail(p, -EIO, xstrdup(pull_inband_message(v)));
	if (p->progress)
		p->progress(v, p->arg);
	return 0;
}

/* Hands on every complete line held; < 0 once one ends the pull. */
static int pull_lines(struct docker_pull *p)
{
	const char *line;
	size_t n;
	int r;

	while ((r = frame_buf_next(&p->fb, &line, &n)) > 0) {
		r = pull_line(p, line, n);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return pull_fail(p, -EMSGSIZE, xasprintf("a progress line is longer than %u bytes",
							 DOCKER_MAX_STREAM_LINE));
	return 0;
}

/* Inside libcurl: a negative return aborts the request with that value. */
static int pull_data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct docker_pull *p = arg;

	if (p->error < 0)
		return p->error;
	if (status != 200) {
		error_body_keep(&p->fb, data, len);
		return 0;
	}
	if (frame_buf_append(&p->fb, data, len) < 0)
		return pull_fail(p, -EMSGSIZE, xasprintf("a progress line is longer than %u bytes",
							 DOCKER_MAX_STREAM_LINE));
	return pull_lines(p);
}

/* How the pull ended: 0, or the failure recorded in p. */
static int pull_result(struct docker_pull *p, int error, const struct engine_reply *reply)
{
	if (p->error < 0)
		return p->error;
	if (error < 0) {
		char *why = transport_message(error, reply);

		/* -EIO is the engine's refusal only (docker.h): libcurl's
		 * catch-all and a cut after the response line are told apart. */
		if ((error == -ECONNRESET || error == -EIO) && reply && reply->status > 0)
			error = -ECONNABORTED;
		else if (error == -EIO)
			error = -ECONNRESET;
		return pull_fail(p, error, why);
	}
	if (reply->status != 200)
		return pull_fail(p, -EIO, error_body_message(&p->fb, reply->status));
	/* The last line may come without its LF. */
	if (frame_buf_in_frame(&p->fb) && frame_buf_append(&p->fb, "\n", 1) == 0)
		return pull_lines(p);
	return 0;
}

static void pull_done_cb(struct engine_req *req, int error, const struct engine_reply *reply, void *arg)
{
	struct docker_pull *p = arg;
	int r = pull_result(p, error, reply);

	p->status = reply ? reply->status : 0;   /* 0: no response line was read */
	if (p->pull_done)
		p->pull_done(r, p->status, r < 0 ? p->message : NULL, p->arg);
	else
		p->done(r, r < 0 ? p->message : NULL, p->arg);
	pull_free(p);
}

/* Starts call (on_data set here) with its JSON-lines reply handed to
 * progress and its end (or first in-band error) to done: a pull or a load. */
static int lines_start(struct engine *e, struct engine_call *call, docker_progress_cb *progress,
		       docker_pull_done_cb *done, docker_image_pull_cb *pull_done, void *arg,
		       struct engine_req **ret_req)
{
	struct docker_pull *p = xcalloc(1, sizeof(*p));
	int r;

	p->progress = progress;
	p->done = done;
	p->pull_done = pull_done;
	p->arg = arg;
	frame_buf_init(&p->fb, DOCKER_MAX_STREAM_LINE);
	call->on_data = pull_data_cb;
	call->data_arg = p;
	r = engine_call_start(e, call, pull_done_cb, p, ret_req);
	if (r < 0)
		pull_free(p);
	return r;
}

/* "?fromImage=REPO&tag=TAG" for a ref split as docker splits it (see
 * docker.h), values escaped; NULL for an unusable ref. */
static char *pull_query(const char *ref)
{
	_cleanup_free_ char *repo = NULL, *erepo = NULL, *etag = NULL;
	const char *slash, *colon;

	if (!ref || !*ref)
		return NULL;
	if (strchr(ref, '@')) {
		erepo = docker_escape(ref);
		return xasprintf("?fromImage=%s", erepo);
	}
	slash = strrchr(ref, '/');
	colon = strrchr(slash ? slash : ref, ':');
	if (colon && (colon == ref || colon[1] == '\0'))
		return NULL;
	repo = colon ? xstrndup(ref, (size_t)(colon - ref)) : xstrdup(ref);
	erepo = docker_escape(repo);
	etag = docker_escape(colon ? colon + 1 : DOCKER_DEFAULT_TAG);
	return xasprintf("?fromImage=%s&tag=%s", erepo, etag);
}

int docker_image_pull(struct engine *e, const char *ref, long timeout_ms, long idle_timeout_ms,
		      docker_progress_cb *progress, docker_image_pull_cb *done, void *arg,
		      struct engine_req **ret_req)
{
	_cleanup_free_ char *query = NULL, *path = NULL;
	struct engine_call call = {
		.method = "POST", .timeout_ms = timeout_ms, .idle_timeout_ms = idle_timeout_ms,
	};

	if (!e || !done || timeout_ms < 0 || idle_timeout_ms < 0)
		return -EINVAL;
	query = pull_query(ref);
	if (!query)
		return -EINVAL;
	path = xasprintf("/images/create%s", query);
	call.path = path;
	return lines_start(e, &call, progress, NULL, done, arg, ret_req);
}

int docker_image_load(struct engine *e, const void *tar, size_t len, long timeout_ms,
		      docker_progress_cb *progress, docker_pull_done_cb *done, void *arg,
		      struct engine_req **ret_req)
{
	struct engine_call call = {
		.method = "POST", .path = "/images/load?quiet=1", .timeout_ms = timeout_ms,
		.content_type = DOCKER_CONTENT_TYPE_TAR, .body = tar, .body_len = len,
	};

	if (!e || !done || !tar || len == 0 || timeout_ms < 0 || len > DOCKER_MAX_ARCHIVE_PUT)
		return -EINVAL;
	return lines_start(e, &call, progress, done, NULL, arg, ret_req);
}

/* ---- the /events follower ----------------------------------------------------------- */

enum docker_events_state {
	DOCKER_EVENTS_IDLE,        /* not started, or stopped (its stream was cancelled) */
	DOCKER_EVENTS_WAITING,     /* the (re)connect timer is armed or running */
	DOCKER_EVENTS_STREAMING,   /* GET /events in flight */
	_DOCKER_EVENTS_STATE_MAX,
};

struct docker_events {
	struct engine *e;
	char *filters_q;           /* "&filters=…" or "" */
	docker_event_cb *event_cb;
	docker_resync_cb *resync_cb;
	void *arg;
	enum docker_events_state state;
	struct engine_req *req;    /* the stream, while STREAMING */
	struct frame_buf fb;
	json_t *queue;             /* events parsed, not yet handed on, from queue_head */
	size_t queue_head;
	struct event *retry_timer;
	struct event *deliver;     /* made active when events are queued */
	long backoff_ms;           /* the next retry's delay */
	long stream_started_ms;    /* CLOCK_MONOTONIC */
	bool stream_had_event;
	unsigned busy;
	bool dead;
};

static const char *docker_events_state_to_string(enum docker_events_state s)
{
	static const char *const names[_DOCKER_EVENTS_STATE_MAX] = {
		[DOCKER_EVENTS_IDLE] = "idle",
		[DOCKER_EVENTS_WAITING] = "waiting",
		[DOCKER_EVENTS_STREAMING] = "streaming",
	};

	if ((unsigned)s >= _DOCKER_EVENTS_STATE_MAX)
		return "invalid";
	return names[s];
}

static void events_set_state(struct docker_events *ev, enum docker_events_state s)
{
	assert((unsigned)s < _DOCKER_EVENTS_STATE_MAX);
	if (ev->state == s)
		return;
	log_debug("engine", "events: %s -> %s", docker_events_state_to_string(ev->state),
		  docker_events_state_to_string(s));
	ev->state = s;
}

static long monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wall-clock now as "seconds.nanoseconds", the form /events?since= takes. */
static void events_since_now(char *buf, size_t n)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		ts = (struct timespec){ .tv_sec = time(NULL) };
	snprintf(buf, n, "%lld.%09ld", (long long)ts.tv_sec, ts.tv_nsec);
}

static void events_destroy(struct docker_events *ev)
{
	if (ev->retry_timer)
		event_free(ev->retry_timer);
	if (ev->deliver)
		event_free(ev->deliver);
	json_decref(ev->queue);
	frame_buf_release(&ev->fb);
	free(ev->filters_q);
	free(ev);
}

static void events_enter(struct docker_events *ev)
{
	ev->busy++;
}

static void events_leave(struct docker_events *ev)
{
	assert(ev->busy > 0);
	if (--ev->busy == 0 && ev->dead)
		events_destroy(ev);
}

/* Hands the queued events on, in order, until the follower dies. Runs
 * only from the loop (the deliver event), so never re-entered. */
static void events_deliver(struct docker_events *ev)
{
	while (!ev->dead && ev->queue_head < json_array_size(ev->queue)) {
		json_auto_t *event = json_incref(json_array_get(ev->queue, ev->queue_head));

		ev->queue_head++;
		ev->event_cb(event, ev->arg);
	}
	if (!ev->dead) {
		json_array_clear(ev->queue);
		ev->queue_head = 0;
	}
}

static void events_deliver_cb(evutil_socket_t fd, short what, void *arg)
{
	struct docker_events *ev = arg;

	events_enter(ev);
	events_deliver(ev);
	events_leave(ev);
}

/* Arms the retry timer at the current backoff, which then doubles. */
static void events_schedule(struct docker_events *ev)
{
	struct timeval tv = { .tv_sec = ev->backoff_ms / 1000, .tv_usec = (ev->backoff_ms % 1000) * 1000 };

	events_set_state(ev, DOCKER_EVENTS_WAITING);
	log_debug("engine", "events: next connection in %ld ms", ev->backoff_ms);
	if (evtimer_add(ev->retry_timer, &tv) < 0)
		log_warnx("%s: cannot arm the retry timer; engine events are no longer followed", __func__);
	ev->backoff_ms = ev->backoff_ms > DOCKER_EVENTS_RETRY_MAX_MS / 2 ? DOCKER_EVENTS_RETRY_MAX_MS
									 : 2 * ev->backoff_ms;
}

/* One line of the stream (inside libcurl): queued, or < 0 to drop the stream. */
static int events_line(struct docker_events *ev, const char *line, size_t n)
{
	json_t *v = json_loadb(line, n, 0, NULL);

	if (!json_is_object(v)) {
		_cleanup_free_ char *s = text_snippet(line);

		log_warnx("%s: malformed line in the engine's event stream, reconnecting: %s", __func__, s);
		json_decref(v);
		return -EPROTO;
	}
	if (json_array_size(ev->queue) - ev->queue_head >= DOCKER_EVENTS_MAX_QUEUED) {
		log_warnx("%s: over %u engine events waiting, reconnecting", __func__,
			  DOCKER_EVENTS_MAX_QUEUED);
		json_decref(v);
		return -ENOBUFS;
	}
	if (json_array_append_new(ev->queue, v) < 0)
		return -ENOMEM;
	ev->stream_had_event = true;
	return 0;
}

/* Inside libcurl: parse and queue; the loop hands the events on. */
static int events_data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct docker_events *ev = arg;
	const char *line;
	size_t n;
	int r;

	if (status != 200) {
		error_body_keep(&ev->fb, data, len);
		return 0;
	}
	if (frame_buf_append(&ev->fb, data, len) < 0) {
		log_warnx("%s: an engine event is longer than %u bytes, reconnecting", __func__,
			  DOCKER_MAX_STREAM_LINE);
		return -EMSGSIZE;
	}
	while ((r = frame_buf_next(&ev->fb, &line, &n)) > 0) {
		r = events_line(ev, line, n);
		if (r < 0)
			break;
	}
	if (ev->queue_head < json_array_size(ev->queue))
		event_active(ev->deliver, EV_TIMEOUT, 0);
	return r < 0 ? r : 0;
}

static void events_log_end(struct docker_events *ev, int error, const struct engine_reply *reply)
{
	_cleanup_free_ char *msg = NULL;

	if (error < 0) {
		msg = transport_message(error, reply);
		log_debug("engine", "events: the stream ended: %s", msg);
	} else if (reply->status != 200) {
		msg = error_body_message(&ev->fb, reply->status);
		log_warnx("%s: GET /events: HTTP %ld: %s; retrying", __func__, reply->status, msg);
	} else {
		log_debug("engine", "events: the engine ended the stream");
	}
}

/* The stream ended (from the loop): follow again after the backoff, unless
 * it was cancelled (engine_free). Events it brought are still handed on by
 * the deliver event, before any retry. */
static void events_stream_ended(struct docker_events *ev, int error, const struct engine_reply *reply)
{
	bool healthy = ev->stream_had_event || monotonic_ms() - ev->stream_started_ms >= DOCKER_EVENTS_STABLE_MS;

	events_log_end(ev, error, reply);
	frame_buf_release(&ev->fb);
	if (error == -ECANCELED) {
		log_debug("engine", "events: the stream was cancelled; no longer following");
		events_set_state(ev, DOCKER_EVENTS_IDLE);
		return;
	}
	if (healthy)
		ev->backoff_ms = DOCKER_EVENTS_RETRY_MIN_MS;
	events_schedule(ev);
}

static void events_done_cb(struct engine_req *req, int error, const struct engine_reply *reply, void *arg)
{
	struct docker_events *ev = arg;

	ev->req = NULL;
	if (ev->dead)
		return;   /* docker_events_free cancelled it */
	events_stream_ended(ev, error, reply);
}

/* resync, then GET /events?since=T where T was taken just before resync. */
static void events_connect(struct docker_events *ev)
{
	char since[DOCKER_SINCE_LEN];
	_cleanup_free_ char *path = NULL;
	struct engine_call call = { .method = "GET", .on_data = events_data_cb, .data_arg = ev };
	int r;

	if (engine_get_state(ev->e) != ENGINE_REACHABLE) {
		events_schedule(ev);
		return;
	}
	events_since_now(since, sizeof(since));
	if (ev->resync_cb) {
		ev->resync_cb(ev->arg);
		if (ev->dead)
			return;
	}
	path = xasprintf("/events?since=%s%s", since, ev->filters_q);
	call.path = path;
	ev->stream_had_event = false;
	ev->stream_started_ms = monotonic_ms();
	r = engine_call_start(ev->e, &call, events_done_cb, ev, &ev->req);
	if (r < 0) {
		log_debug("engine", "events: cannot start GET /events: %s", strerror(-r));
		events_schedule(ev);
		return;
	}
	events_set_state(ev, DOCKER_EVENTS_STREAMING);
}

static void events_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct docker_events *ev = arg;

	events_enter(ev);
	events_connect(ev);
	events_leave(ev);
}

struct docker_events *docker_events_new(struct event_base *base, struct engine *e, const json_t *filters,
					docker_event_cb *event, docker_resync_cb *resync, void *arg)
{
	struct docker_events *ev;
	char *q;

	if (!base || !e || !event)
		return NULL;
	q = filters_query(filters, '&');
	if (!q)
		return NULL;
	ev = xcalloc(1, sizeof(*ev));
	ev->e = e;
	ev->filters_q = q;
	ev->event_cb = event;
	ev->resync_cb = resync;
	ev->arg = arg;
	ev->state = DOCKER_EVENTS_IDLE;
	ev->backoff_ms = DOCKER_EVENTS_RETRY_MIN_MS;
	frame_buf_init(&ev->fb, DOCKER_MAX_STREAM_LINE);
	ev->queue = json_array();
	ev->retry_timer = evtimer_new(base, events_retry_cb, ev);
	ev->deliver = event_new(base, -1, 0, events_deliver_cb, ev);
	if (!ev->queue || !ev->retry_timer || !ev->deliver) {
		events_destroy(ev);
		return NULL;
	}
	return ev;
}

void docker_events_start(struct docker_events *ev)
{
	static const struct timeval now = { 0, 0 };

	if (!ev || ev->dead || ev->state != DOCKER_EVENTS_IDLE)
		return;
	/* From the loop, so resync never runs inside the caller. */
	events_set_state(ev, DOCKER_EVENTS_WAITING);
	if (evtimer_add(ev->retry_timer, &now) < 0)
		log_warnx("%s: cannot arm the timer; engine events are not followed", __func__);
}

bool docker_events_is_connected(const struct docker_events *ev)
{
	return ev && !ev->dead && ev->state == DOCKER_EVENTS_STREAMING;
}

struct docker_events *docker_events_free(struct docker_events *ev)
{
	struct engine_req *req;

	if (!ev || ev->dead)
		return NULL;
	ev->dead = true;
	events_enter(ev);
	evtimer_del(ev->retry_timer);
	event_del(ev->deliver);
	req = TAKE_PTR(ev->req);
	if (req)
		engine_req_cancel(req);   /* its callback sees dead and does nothing */
	events_leave(ev);
	return NULL;
}

/* ---- exec ------------------------------------------------------------------------------ */

#define DOCKER_EXEC_START_BODY "{\"Detach\":false,\"Tty\":false}"

int docker_exec_create(struct engine *e, const char *id, const json_t *config, docker_cb *cb, void *arg,
		       struct engine_req **ret_req)
{
	if (!json_is_object(config))
		return -EINVAL;
	return docker_call_on(e, "POST", "/containers/", id, "/exec", config, cb, arg, ret_req);
}

int docker_exec_inspect(struct engine *e, const char *exec_id, docker_cb *cb, void *arg,
			struct engine_req **ret_req)
{
	return docker_call_on(e, "GET", "/exec/", exec_id, "/json", NULL, cb, arg, ret_req);
}

struct docker_exec_stream {
	docker_data_cb *data;
	docker_exec_done_cb *done;
	void *arg;
	int error;             /* the data callback's abort (0: none) */
	struct frame_buf fb;   /* a failed reply's body, for its message */
};

static void exec_stream_free(struct docker_exec_stream *s)
{
	frame_buf_release(&s->fb);
	free(s);
}

/* Inside libcurl: a 200's body goes to the caller, a failure's is kept
 * for its message; a negative return aborts with that value. */
static int exec_stream_data_cb(struct engine_req *req, long status, const void *data, size_t len, void *arg)
{
	struct docker_exec_stream *s = arg;
	int r;

	if (s->error < 0)
		return s->error;
	if (status != 200) {
		error_body_keep(&s->fb, data, len);
		return 0;
	}
	r = s->data(data, len, s->arg);
	if (r < 0)
		s->error = r;
	return r < 0 || r == ENGINE_DATA_PAUSE ? r : 0;
}

static void exec_stream_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
				void *arg)
{
	struct docker_exec_stream *s = arg;
	_cleanup_free_ char *message = NULL;

	if (s->error < 0)
		error = s->error;
	if (error < 0) {
		s->done(error, 0, NULL, s->arg);
		exec_stream_free(s);
		return;
	}
	if (reply->status != 200)
		message = error_body_message(&s->fb, reply->status);
	s->done(0, reply->status, message, s->arg);
	exec_stream_free(s);
}

/* Starts call (on_data set) with its body streamed to data and its end to done. */
static int exec_stream_start(struct engine *e, struct engine_call *call, docker_data_cb *data,
			     docker_exec_done_cb *done, void *arg, struct engine_req **ret_req)
{
	struct docker_exec_stream *s = xcalloc(1, sizeof(*s));
	int r;

	s->data = data;
	s->done = done;
	s->arg = arg;
	frame_buf_init(&s->fb, DOCKER_MAX_ERROR_BODY);
	call->data_arg = s;
	r = engine_call_start(e, call, exec_stream_done_cb, s, ret_req);
	if (r < 0)
		exec_stream_free(s);
	return r;
}

int docker_exec_start(struct engine *e, const char *exec_id, long idle_timeout_ms, docker_data_cb *data,
		      docker_exec_done_cb *done, void *arg, struct engine_req **ret_req)
{
	_cleanup_free_ char *path = path_with("/exec/", exec_id, "/start");
	struct engine_call call = {
		.method = "POST", .path = path, .content_type = DOCKER_CONTENT_TYPE_JSON,
		.body = DOCKER_EXEC_START_BODY, .body_len = strlen(DOCKER_EXEC_START_BODY),
		.idle_timeout_ms = idle_timeout_ms, .on_data = exec_stream_data_cb,
	};

	if (!e || !path || !data || !done || idle_timeout_ms < 0)
		return -EINVAL;
	return exec_stream_start(e, &call, data, done, arg, ret_req);
}

struct docker_attached {
	docker_data_cb *data;
	docker_exec_done_cb *done;
	void *arg;
};

static int attached_data_cb(const void *data, size_t len, void *arg)
{
	struct docker_attached *a = arg;

	return a->data(data, len, a->arg);
}

static void attached_done_cb(int error, long status, const char *body, size_t body_len, void *arg)
{
	struct docker_attached *a = arg;
	_cleanup_free_ char *message = NULL;

	if (error == 0 && status != 101 && status != 200) {
		json_auto_t *v = json_loadb(body, body_len, 0, NULL);
		const char *m = json_string_value(json_object_get(v, "message"));   /* borrows */

		message = m ? xstrdup(m) : xasprintf("the engine answered HTTP %ld", status);
	}
	a->done(error, error < 0 ? 0 : status == 101 ? 200 : status, message, a->arg);
	free(a);
}

int docker_exec_start_attached(struct engine *e, const char *exec_id, docker_data_cb *data,
			       docker_exec_done_cb *done, void *arg, struct engine_hijack **ret)
{
	_cleanup_free_ char *path = path_with("/exec/", exec_id, "/start");
	struct docker_attached *a;
	int r;

	if (!e || !path || !data || !done)
		return -EINVAL;
	a = xcalloc(1, sizeof(*a));
	a->data = data;
	a->done = done;
	a->arg = arg;
	r = engine_hijack_call(e, path, DOCKER_EXEC_START_BODY, attached_data_cb, attached_done_cb, a, ret);
	if (r < 0)
		free(a);
	return r;
}

int docker_container_logs(struct engine *e, const char *id, bool follow, const char *since,
			  long idle_timeout_ms, docker_data_cb *data, docker_exec_done_cb *done, void *arg,
			  struct engine_req **ret_req)
{
	_cleanup_free_ char *esince = since ? docker_escape(since) : NULL;
	_cleanup_free_ char *suffix = xasprintf("/logs?stdout=1&stderr=0&timestamps=1%s%s%s",
						follow ? "&follow=1" : "", esince ? "&since=" : "",
						esince ? esince : "");
	_cleanup_free_ char *path = path_with("/containers/", id, suffix);
	struct engine_call call = {
		.method = "GET", .path = path, .idle_timeout_ms = idle_timeout_ms,
		.on_data = exec_stream_data_cb,
	};

	if (!e || !path || !data || !done || idle_timeout_ms < 0)
		return -EINVAL;
	return exec_stream_start(e, &call, data, done, arg, ret_req);
}
