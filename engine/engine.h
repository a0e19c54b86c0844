/* engine.h — the engine session: negotiation, reachability, reconnection.
 *
 * State machine:
 *   ENGINE_CONNECTING  → probe: GET /_ping (Api-Version header), negotiate
 *                        min(ours, engine's); below MSB_ENGINE_API_MIN →
 *                        ENGINE_UNSUPPORTED; else GET /vX.Y/version → info
 *                        → ENGINE_REACHABLE.
 *   any probe failure  → ENGINE_UNREACHABLE, retry after a backoff that
 *                        doubles from reconnect_min_ms to reconnect_max_ms.
 *   ENGINE_REACHABLE   → ENGINE_UNREACHABLE when a call fails in transport
 *                        (-ECONNREFUSED, -ECONNRESET), which starts probing.
 *   ENGINE_UNSUPPORTED → re-probed on the same backoff (an upgraded engine
 *                        is picked up without a restart).
 * Calls are refused (-ENOTCONN, nothing sent) unless ENGINE_REACHABLE. */
#ifndef MSB_ENGINE_ENGINE_H
#define MSB_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <event2/event.h>

#include "endpoint.h"
#include "http.h"

/* Our API range: the highest version we speak, and the floor below which we
 * refuse an engine (20.10 = 1.41 is the oldest engine we support). */
#define MSB_ENGINE_API_MAX "1.51"
#define MSB_ENGINE_API_MIN "1.41"

enum engine_state {
	ENGINE_CONNECTING,
	ENGINE_REACHABLE,
	ENGINE_UNREACHABLE,
	ENGINE_UNSUPPORTED,
	_ENGINE_STATE_MAX,
};

const char *engine_state_to_string(enum engine_state s);

struct engine_info {
	char *version;             /* /version Version, e.g. "20.10.24+dfsg1" */
	char *engine_api_version;  /* the engine's maximum, from /_ping Api-Version */
	char *api_version;         /* negotiated: min(ours, engine's) */
	char *os;                  /* /version Os, e.g. "linux" */
	char *arch;                /* /version Arch */
	char *kernel_version;      /* /version KernelVersion */
};

struct engine_options {
	long timeout_ms;           /* per request (engine.timeout_ms) */
	long reconnect_min_ms;     /* first retry delay (engine.reconnect_min_ms) */
	long reconnect_max_ms;     /* backoff ceiling (engine.reconnect_max_ms) */
};

struct engine;
typedef void engine_state_cb(struct engine *e, enum engine_state old_state,
			     enum engine_state new_state, void *arg);

/* Takes ownership of endpoint (freed here if NULL is returned). state_cb may
 * be NULL, and may free the engine. Does not contact the engine until
 * engine_start(). Returns NULL if the http layer cannot be set up. */
struct engine *engine_new(struct event_base *base, struct engine_endpoint *endpoint,
			  const struct engine_options *opts, engine_state_cb *state_cb, void *arg);
/* Starts the first probe (state ENGINE_CONNECTING). */
void engine_start(struct engine *e);
/* Cancels every call in flight (their callbacks fire with -ECANCELED) and
 * frees. NULL-safe; returns NULL. */
struct engine *engine_free(struct engine *e);
/* New options take effect from the next request / retry. */
void engine_set_options(struct engine *e, const struct engine_options *opts);

enum engine_state engine_get_state(const struct engine *e);
/* Info from the last successful probe; NULL if none ever succeeded. While
 * not ENGINE_REACHABLE it describes the last engine seen. */
const struct engine_info *engine_get_info(const struct engine *e);
const struct engine_endpoint *engine_get_endpoint(const struct engine *e);
/* Why the engine is not reachable (last probe or call failure), or NULL: a
 * stable reason (the step, the HTTP status, "could not connect to" the
 * endpoint), never the engine's message, strerror or curl's text, which
 * only the log gets. daemon.status shows it. */
const char *engine_get_last_error(const struct engine *e);
/* Every HTTP request made to the engine, probes included. */
uint64_t engine_requests_made(const struct engine *e);
/* The requests made on behalf of calls (engine_call_start), probes excluded. */
uint64_t engine_call_requests_made(const struct engine *e);

/* engine.timeout_ms as configured (0: none). */
long engine_default_timeout_ms(const struct engine *e);

/* Starts a call on the negotiated version: call->path is unversioned
 * ("/version", "/containers/json?all=1") and is sent as "/vX.Y" + path.
 * call->timeout_ms 0 means opts.timeout_ms unless call->on_data is set.
 * Returns -ENOTCONN (nothing sent, cb never called) unless ENGINE_REACHABLE.
 * A transport failure (-ECONNREFUSED, -ECONNRESET) of the call marks the
 * engine unreachable and starts probing, then the callback fires. The
 * callbacks follow http.h's re-entrancy rules (on_data must not cancel or
 * free; the done callback may, engine_free included). */
int engine_call_start(struct engine *e, const struct engine_call *call, engine_done_cb *cb,
		      void *arg, struct engine_req **ret_req);

/* A hijacked request (hijack.h) on the negotiated version: path is
 * unversioned. -ENOTCONN unless ENGINE_REACHABLE; -EPROTONOSUPPORT over
 * TLS. engine_free cancels every one still running (done: -ECANCELED). A
 * transport failure does not mark the engine unreachable (the ordinary
 * requests do that). */
struct engine_hijack;
int engine_hijack_call(struct engine *e, const char *path, const char *body,
		       int (*data)(const void *, size_t, void *),
		       void (*done)(int, long, const char *, size_t, void *), void *arg,
		       struct engine_hijack **ret);

/* Compares "1.41"-style versions: <0, 0, >0. Unparseable sorts lowest. */
int engine_api_version_cmp(const char *a, const char *b);

#endif
