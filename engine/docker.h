/* docker.h — typed Engine API calls on top of engine_call_start (versioned
 * paths, JSON in and out), the image pull progress stream, and the /events
 * follower. Callers never build URLs by hand: every name, id and ref that
 * goes into a path or query is percent-encoded here.
 *
 * Contract (libuv's, as engine.h): if a docker_* start function returns < 0
 * (-ENOTCONN when the engine is not reachable, -EINVAL for a bad argument),
 * its callback is never called; otherwise it fires exactly once, from the
 * loop. A request can be cancelled with engine_req_cancel(*ret_req) (the
 * callback then fires with -ECANCELED). */
#ifndef MSB_DOCKER_H
#define MSB_DOCKER_H

#include <stdbool.h>
#include <event2/event.h>
#include <jansson.h>

#include "engine.h"

/* Buffered JSON replies larger than this fail with -EMSGSIZE. */
#define DOCKER_MAX_JSON_REPLY (8u * 1024 * 1024)
/* One line of a progress or events stream; longer → the stream fails -EMSGSIZE. */
#define DOCKER_MAX_STREAM_LINE (256u * 1024)

struct docker_reply {
	int error;            /* 0, or the transport error (-ETIMEDOUT, -ECONNRESET, ...) */
	long status;          /* HTTP status when error == 0 */
	json_t *body;         /* parsed body (borrowed), NULL if empty or not JSON */
	const char *message;  /* Docker's {"message": ...} on an error status, else NULL */
};

typedef void docker_cb(const struct docker_reply *reply, void *arg);

/* Percent-encodes s (RFC 3986 unreserved kept). malloc'd. */
char *docker_escape(const char *s);

/* method + unversioned path (already escaped) + optional JSON body
 * (borrowed; sent with Content-Type: application/json). timeout_ms 0 = the
 * engine's default. */
int docker_call(struct engine *e, const char *method, const char *path, const json_t *body,
		long timeout_ms, docker_cb *cb, void *arg, struct engine_req **ret_req);

/* GET /containers/json?all=1&filters=<filters as JSON> (filters borrowed, may be NULL). */
int docker_containers_list(struct engine *e, const json_t *filters, docker_cb *cb, void *arg,
			   struct engine_req **ret_req);
/* GET /containers/{id_or_name}/json (404 = absent). */
int docker_container_inspect(struct engine *e, const char *id_or_name, docker_cb *cb, void *arg,
			     struct engine_req **ret_req);
/* POST /containers/create?name=NAME with config (borrowed). 201 {"Id"}; 409 name in use. */
int docker_container_create(struct engine *e, const char *name, const json_t *config, docker_cb *cb,
			    void *arg, struct engine_req **ret_req);
/* POST /containers/{id}/start: 204 started, 304 already running. */
int docker_container_start(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req);
/* POST /containers/{id}/pause: 204. 409 not running / already paused /
 * restarting; 404 absent. */
int docker_container_pause(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req);
/* POST /containers/{id}/unpause: 204. Not paused: 500 (409 on some
 * engines) "Container X is not paused"; 404 absent. */
int docker_container_unpause(struct engine *e, const char *id, docker_cb *cb, void *arg,
			     struct engine_req **ret_req);
/* DELETE /containers/{id}?force=1 (force) : 204 removed, 404 absent. */
int docker_container_remove(struct engine *e, const char *id, bool force, docker_cb *cb, void *arg,
			    struct engine_req **ret_req);
/* GET /images/{ref}/json: 200 present, 404 absent. */
int docker_image_inspect(struct engine *e, const char *ref, docker_cb *cb, void *arg,
			 struct engine_req **ret_req);
/* GET /networks?filters=..., GET /networks/{id}, DELETE /networks/{id}. */
int docker_networks_list(struct engine *e, const json_t *filters, docker_cb *cb, void *arg,
			 struct engine_req **ret_req);
int docker_network_inspect(struct engine *e, const char *id, docker_cb *cb, void *arg,
			   struct engine_req **ret_req);
int docker_network_remove(struct engine *e, const char *id, docker_cb *cb, void *arg,
			  struct engine_req **ret_req);
/* POST /networks/create with body (borrowed): 201 {"Id","Warning"}; 409
 * name taken (Engine >= 25); 400/403/500 e.g. a pool overlap. */
int docker_network_create(struct engine *e, const json_t *body, docker_cb *cb, void *arg,
			  struct engine_req **ret_req);
/* POST /networks/{net}/connect with body (borrowed; {"Container": id, ...}): 200. */
int docker_network_connect(struct engine *e, const char *net, const json_t *body, docker_cb *cb,
			   void *arg, struct engine_req **ret_req);
/* POST /containers/{id}/stop?t=grace_s: 204 stopped, 304 already stopped,
 * 404 absent. The request's own timeout is the engine's default plus the grace. */
int docker_container_stop(struct engine *e, const char *id, long grace_s, docker_cb *cb, void *arg,
			  struct engine_req **ret_req);
/* GET /version. */
int docker_version(struct engine *e, docker_cb *cb, void *arg, struct engine_req **ret_req);

/* ---- the archive endpoints (engine-api.md §2.1) ----
 * /containers/{id}/archive?path=PATH, id and path escaped. Archives are
 * uncompressed tars both ways: no Accept-Encoding is ever sent (http.c), so
 * a GET body is never gzip/deflate, and a PUT body is sent as
 * application/x-tar, never compressed (security-notes.md: CVE-2026-41567).
 * The stat header is handed on raw: decoding it is
 * paths_stat_decode_header's job (domain/files/paths.h). */
#define DOCKER_ARCHIVE_STAT_HEADER "X-Docker-Container-Path-Stat"
/* An archive PUT body larger than this is refused with -EMSGSIZE. */
/* The content ceiling (256 MiB a call) plus room for headers, PAX records
 * and directory entries of 256 files at the deepest paths. */
#define DOCKER_MAX_ARCHIVE_PUT (320u * 1024 * 1024)
/* The body of a failed archive GET kept for its message; the rest is
 * dropped (the message is then NULL). */
#define DOCKER_MAX_ERROR_BODY (64u * 1024)

/* stat: the X-Docker-Container-Path-Stat value as the engine sent it
 * (borrowed, valid during the callback), or NULL. status 0 when error < 0. */
typedef void docker_stat_cb(int error, long status, const char *stat, void *arg);
/* HEAD /containers/{id}/archive?path=PATH: 200 + stat header; 400 bad
 * request. A HEAD reply has no body, so its 404 cannot tell "no such
 * container" from "no such path": inspect the container first, or use
 * docker_archive_get, whose 404 carries the message. */
int docker_archive_stat(struct engine *e, const char *id, const char *path, docker_stat_cb *cb,
			void *arg, struct engine_req **ret_req);

/* One chunk of a 200 reply's tar (borrowed). Return 0 to go on, or a
 * negative errno to abort: done then gets that error. A logs or exec stream
 * may also return ENGINE_DATA_PAUSE (http.h): its bytes are handed again,
 * maybe cut otherwise, after engine_req_resume() on its request (which may
 * fire done before it returns). Runs inside the
 * transfer, under http.h's on_data rules (no cancel, no free; a request it
 * starts is refused with -EBUSY). Never called for any other status. */
typedef int docker_data_cb(const void *data, size_t len, void *arg);
/* error: 0, the data callback's own negative value, or the transport
 * error (status 0 then). message: Docker's {"message"} when status >= 400
 * and the body was JSON within DOCKER_MAX_ERROR_BODY, else NULL. stat: as
 * for docker_stat_cb. Both borrowed, valid during the callback. */
typedef void docker_archive_done_cb(int error, long status, const char *message, const char *stat,
				    void *arg);
/* GET /containers/{id}/archive?path=PATH, the tar streamed to data.
 * 404: "Could not find the file P in container C" / "No such container: C".
 * No whole-request deadline: idle_timeout_ms (0 = none) bounds the wait for
 * each byte. done fires exactly once, after the last data call. */
int docker_archive_get(struct engine *e, const char *id, const char *path, long idle_timeout_ms,
		       docker_data_cb *data, docker_archive_done_cb *done, void *arg,
		       struct engine_req **ret_req);

/* PUT /containers/{id}/archive?path=DIR&noOverwriteDirNonDir=1, tar[0..len)
 * sent as Content-Type: application/x-tar (copied: http.c copies bodies
 * today; streaming uploads with a read callback are future work). DIR must
 * be an existing directory. copyUIDGID is not sent: ownership comes from
 * the tar headers. The reply is docker_call's, on the engine's default
 * timeout: 200 extracted; 400 "extraction point is not a directory" /
 * read-only; 404 missing path or container (message set). len over
 * DOCKER_MAX_ARCHIVE_PUT → -EMSGSIZE, nothing sent. */
int docker_archive_put(struct engine *e, const char *id, const char *dir, const void *tar, size_t len,
		       docker_cb *cb, void *arg, struct engine_req **ret_req);

/* ---- exec (engine-api.md §2.3) ----
 * Three calls run one command: create, start (its output streamed until
 * the command ends), inspect (its exit code). The exec process lives on in
 * the guest whatever happens to the connection: there is no exec kill. */

/* POST /containers/{id}/exec with config (borrowed; {"AttachStdout",
 * "AttachStderr","Tty","Cmd",...}): 201 {"Id"}; 404 no such container;
 * 409 "Container C is paused, unpause the container before exec" /
 * "container C is not running" / "... is restarting ...". */
int docker_exec_create(struct engine *e, const char *id, const json_t *config, docker_cb *cb, void *arg,
		       struct engine_req **ret_req);

/* error: 0, the data callback's own negative value, or the transport
 * error (status 0 then). message: on a status other than 200, Docker's
 * {"message"}, else a description of the reply (DOCKER_MAX_ERROR_BODY of
 * it kept); NULL on 200 and when error < 0. Borrowed, valid during the
 * callback. */
typedef void docker_exec_done_cb(int error, long status, const char *message, void *arg);
/* POST /exec/{eid}/start with {"Detach":false,"Tty":false} and no Upgrade
 * header: the engine hijacks the connection and answers 200
 * (Content-Type application/vnd.docker.multiplexed-stream, or raw-stream
 * before API 1.42: the framing follows the exec's Tty, not the type),
 * then writes the output until the command ends and closes the
 * connection: no Content-Length, no chunking. libcurl reads such a body
 * to the close and never reuses that connection. A 200's body goes to
 * data raw (frame headers included), chunk by chunk, under http.h's
 * on_data rules; never called for any other status. 404 no such exec; 409
 * paused / not running. No whole-request deadline: the caller owns it
 * (engine_req_cancel); idle_timeout_ms (0 = none) bounds the wait for each
 * byte. done fires exactly once, after the last data call. */
int docker_exec_start(struct engine *e, const char *exec_id, long idle_timeout_ms, docker_data_cb *data,
		      docker_exec_done_cb *done, void *arg, struct engine_req **ret_req);

/* The same start with the exec's stdin (an exec created with
 * AttachStdin): the request is hijacked (hijack.h: `Connection: Upgrade`,
 * answered 101), its output goes to data as above, and stdin is written
 * with engine_hijack_write on *ret (its end: eof). done as above (status
 * 101 or 200 for a stream that ran to its end; a refusal's message from
 * its body). -EPROTONOSUPPORT over a TLS endpoint (stdin is not offered
 * there), -ENOTCONN unless the engine is reachable. */
int docker_exec_start_attached(struct engine *e, const char *exec_id, docker_data_cb *data,
			       docker_exec_done_cb *done, void *arg, struct engine_hijack **ret);
/* GET /exec/{eid}/json: 200 {"Running", "ExitCode" (null while running),
 * ...}; 404 no such exec (exited execs are collected after minutes, and
 * at an engine restart). */
int docker_exec_inspect(struct engine *e, const char *exec_id, docker_cb *cb, void *arg,
			struct engine_req **ret_req);

/* Pull: POST /images/create?fromImage=REPO&tag=TAG, where a ref
 * "repo[:tag][@digest]" is split as docker does (the tag is after the last
 * ':' that follows the last '/'; a digest goes whole into fromImage; no tag
 * means "latest"). The 200 body is JSON lines: each object goes to progress
 * (borrowed). done fires exactly once, and its error alone says what
 * happened (status is whatever response line was read, 0 if none):
 *   0            success (status 200, message NULL);
 *   -EIO         the engine refused: a non-200 status (status, Docker's
 *                message), or an in-band "error"/"errorDetail" line after
 *                the 200 (200, its message); only this;
 *   -EPROTO, -EMSGSIZE  the progress stream was unusable (a malformed or
 *                overlong line);
 *   -ECONNABORTED  the transfer broke after the engine answered (a stream
 *                cut short; status is what was read, e.g. 200);
 *   -ETIMEDOUT   idle_timeout_ms or timeout_ms passed; -ECANCELED cancelled;
 *   any other -errno  no answer: the engine could not be reached, or the
 *                connection broke before a response line (status 0).
 * idle_timeout_ms bounds the wait for each line. The message is the
 * engine's (or libc's, libcurl's) own text: for the log, never for the
 * wire. progress runs inside the transfer, under
 * http.h's on_data rules (no cancel, no free; a request it starts is
 * refused with -EBUSY). */
typedef void docker_progress_cb(const json_t *line, void *arg);
typedef void docker_pull_done_cb(int error, const char *message, void *arg);
typedef void docker_image_pull_cb(int error, long status, const char *message, void *arg);
int docker_image_pull(struct engine *e, const char *ref, long timeout_ms, long idle_timeout_ms,
		      docker_progress_cb *progress, docker_image_pull_cb *done, void *arg,
		      struct engine_req **ret_req);

/* Load: POST /images/load?quiet=1, the `docker save` archive tar[0..len)
 * as the body (copied). The reply is JSON lines (every error is in-band,
 * after a 200): each line goes to progress; one with "error" or
 * "errorDetail" ends it with done(-EIO, message). Same rules and errors
 * as docker_image_pull. len over DOCKER_MAX_ARCHIVE_PUT → -EINVAL. */
int docker_image_load(struct engine *e, const void *tar, size_t len, long timeout_ms,
		      docker_progress_cb *progress, docker_pull_done_cb *done, void *arg,
		      struct engine_req **ret_req);

/* GET /containers/{id}/logs?stdout=1&stderr=0&timestamps=1[&follow=1][&since=S]:
 * a 200's body (multiplexed frames for a container without a TTY) goes raw
 * to data, under docker_exec_start's rules; done fires once with the
 * status and, for a failure, Docker's message. A follow stream ends when
 * the container stops. since: "seconds[.nanoseconds]" or NULL. */
int docker_container_logs(struct engine *e, const char *id, bool follow, const char *since,
			  long idle_timeout_ms, docker_data_cb *data, docker_exec_done_cb *done, void *arg,
			  struct engine_req **ret_req);

/* The /events follower. Keeps one GET /events?since=T&filters=F stream open
 * while the engine is reachable. Each time it (re)connects it first calls
 * resync (the caller re-lists what it follows), having taken T just before,
 * so events between the listing and the stream are replayed, never lost
 * (handlers must be idempotent). Each event object goes to event
 * (borrowed). When the stream ends or fails it retries after a backoff from
 * DOCKER_EVENTS_RETRY_MIN_MS to DOCKER_EVENTS_RETRY_MAX_MS. event and resync
 * run from the loop: they may start requests and free the follower. Free it
 * before its engine. */
#define DOCKER_EVENTS_RETRY_MIN_MS 100
#define DOCKER_EVENTS_RETRY_MAX_MS 5000

struct docker_events;
typedef void docker_event_cb(const json_t *event, void *arg);
typedef void docker_resync_cb(void *arg);

/* filters borrowed (copied). */
struct docker_events *docker_events_new(struct event_base *base, struct engine *e, const json_t *filters,
					docker_event_cb *event, docker_resync_cb *resync, void *arg);
void docker_events_start(struct docker_events *ev);
/* True while a stream is open. */
bool docker_events_is_connected(const struct docker_events *ev);
/* Stops and frees (no callback fires afterwards). NULL-safe; returns NULL. */
struct docker_events *docker_events_free(struct docker_events *ev);

#endif
