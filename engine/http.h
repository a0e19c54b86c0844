/* http.h — HTTP/1.1 to the engine: libcurl's multi-socket API driven by the
 * libevent loop (the hiperfifo.c pattern). One struct engine_req wraps one
 * easy handle; keep-alive connections are reused by the multi handle, at most
 * ENGINE_HTTP_MAX_IDLE_CONNECTIONS (http.c) of them kept idle.
 *
 * Ownership: engine_http_new() → engine_http_free(). A request is owned by
 * the http layer; the caller may hold its pointer until the callback fires
 * and must not touch it afterwards.
 *
 * Contract (libuv's): if engine_req_start() returns < 0, the callback is
 * never called. Otherwise the callback fires exactly once, from the event
 * loop (never from inside engine_req_start), with error 0 (any HTTP status,
 * reply filled), -ETIMEDOUT (deadline or idle deadline), -ECANCELED
 * (engine_req_cancel or engine_http_free), -ECONNREFUSED (nothing listens,
 * socket missing, host unresolvable, TLS handshake or verification failed),
 * -EACCES (connecting to the socket was not permitted),
 * -ECONNRESET (peer closed before or mid-reply), -EMSGSIZE (buffered body
 * over max_body, or response headers over ENGINE_HTTP_MAX_HEADER_BYTES),
 * -EPROTO (not HTTP), the on_data callback's own negative value, or -EIO.
 * The reply is lent to the callback and is never NULL (on failure its
 * status may be 0 and error_text says what libcurl saw).
 *
 * Re-entrancy: the done callback may start requests, cancel others and
 * free the http object. on_data runs inside libcurl: it must not cancel
 * or free anything (return a negative value instead), and a request
 * started from it is refused with -EBUSY. After engine_http_free has
 * begun, engine_req_start returns -ESHUTDOWN. */
#ifndef MSB_ENGINE_HTTP_H
#define MSB_ENGINE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <event2/event.h>

#include "endpoint.h"

struct engine_http;
struct engine_req;

struct engine_reply {
	long status;            /* HTTP status (0 if no response line was read) */
	const char *body;       /* buffered body, NUL-terminated ("" when streamed) */
	size_t body_len;
	const struct engine_req *req;  /* for engine_reply_header */
	const char *error_text;        /* libcurl's detail when error != 0, else "" */
};

/* Streamed bodies: called for each chunk of the response body once the
 * status is known. Return 0 to go on, ENGINE_DATA_PAUSE to leave the chunk
 * untaken (libcurl keeps it and reads nothing more of this reply until
 * engine_req_resume(); the idle deadline stops meanwhile), or a negative
 * errno to abort the request (the done callback then gets that value).
 * After a resume the bytes come again from the first one left untaken, but
 * not cut as before: the kept chunk and what libcurl had already decoded
 * after it, in pieces of at most 16 KiB (CURL_MAX_WRITE_SIZE). */
#define ENGINE_DATA_PAUSE 1
typedef int engine_data_cb(struct engine_req *req, long status, const void *data, size_t len,
			   void *arg);
typedef void engine_done_cb(struct engine_req *req, int error, const struct engine_reply *reply,
			    void *arg);

struct engine_call {
	const char *method;        /* "GET", "POST", "HEAD", "PUT", "DELETE" */
	const char *path;          /* absolute path with query, sent as is: "/v1.41/version" */
	const char *content_type;  /* NULL when no body */
	const void *body;          /* copied by engine_req_start */
	size_t body_len;
	long timeout_ms;           /* whole-request deadline; 0 = none (use with streams) */
	long idle_timeout_ms;      /* no byte for this long → -ETIMEDOUT; 0 = none */
	size_t max_body;           /* buffered: more than this → -EMSGSIZE; 0 = 16 MiB */
	engine_data_cb *on_data;   /* NULL: buffer the body; else stream it */
	void *data_arg;
};

#define ENGINE_HTTP_DEFAULT_MAX_BODY (16u * 1024 * 1024)
/* Response header block (the final response's, trailers included). */
#define ENGINE_HTTP_MAX_HEADER_BYTES (64u * 1024)

/* endpoint is copied. Returns NULL only if libcurl cannot be set up. */
struct engine_http *engine_http_new(struct event_base *base, const struct engine_endpoint *endpoint);
/* Cancels every request in flight (each callback fires with -ECANCELED),
 * then frees. NULL-safe; returns NULL. */
struct engine_http *engine_http_free(struct engine_http *http);

int engine_req_start(struct engine_http *http, const struct engine_call *call, engine_done_cb *cb,
		     void *arg, struct engine_req **ret_req);
/* The callback fires once, synchronously, with -ECANCELED. No-op if the
 * request has already completed (cannot happen for a pointer still held). */
void engine_req_cancel(struct engine_req *req);

/* A streamed request paused by its on_data (ENGINE_DATA_PAUSE) goes on: the
 * bytes it left are handed to on_data again, maybe before this returns, and
 * its idle deadline runs again from now. If that ends the transfer (on_data
 * aborts, or the reply was whole), its done callback fires before this
 * returns too: the caller must not touch req (nor what done frees) after
 * it. From the loop only, never from on_data. No-op unless it is running. */
void engine_req_resume(struct engine_req *req);

/* A response header's value (case-insensitive name), or NULL. Valid while
 * the reply is. */
const char *engine_reply_header(const struct engine_reply *reply, const char *name);

/* Requests started since engine_http_new (every engine_req_start that
 * returned 0). */
uint64_t engine_http_requests_started(const struct engine_http *http);
/* Requests in flight now. */
unsigned engine_http_requests_in_flight(const struct engine_http *http);

#endif
