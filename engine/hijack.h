/* hijack.h — an engine request whose connection becomes a raw
 * bidirectional stream (the Engine API's "hijack": POST /exec/{id}/start
 * with `Connection: Upgrade`, `Upgrade: tcp`; the engine answers
 * `101 UPGRADED` and from then on the socket carries the exec's stdin one
 * way and its multiplexed output the other; closing our write side
 * (shutdown(SHUT_WR)) is the stdin's end, which the engine turns into the
 * process's stdin close).
 *
 * Why a socket of our own, not libcurl: the multi interface drives a
 * request to its end, never hands its connection over mid-reply, and
 * CURLOPT_CONNECT_ONLY with curl_easy_send/recv would leave the half-close
 * out of reach (libcurl has no call that shuts a connection's write side
 * down, and over TLS the end of stdin would need a close_notify without
 * closing, which it cannot send either). So this module speaks the one
 * request itself, non-blocking on the event loop, over the transports
 * where a half-close is a plain shutdown(): a unix socket and plain tcp.
 * (A tcp endpoint's host name is resolved with getaddrinfo, which
 * blocks the loop for the lookup: engine.host names an address as a rule.)
 * TLS endpoints are refused (-EPROTONOSUPPORT): stdin is not offered
 * there (the callers say so with SandboxCapabilityNotSupported). Requests
 * without stdin keep going through http.h.
 *
 * Contract (libuv's, as http.h): engine_hijack_start() < 0 → no callback
 * ever; otherwise done fires exactly once, from the loop (never from inside
 * start), or synchronously from engine_hijack_cancel(). A pending write's
 * callback fires before done. data runs from the loop; it must not cancel
 * (return a negative value to abort: done then gets that value). The write
 * callback may start the next write. done may free everything; the
 * hijack is freed right after done returns.
 *
 * Ownership: a hijack belongs to a set (the engine's): engine_hijack_set_
 * cancel_all ends every one in it (the engine going away). */
#ifndef MSB_ENGINE_HIJACK_H
#define MSB_ENGINE_HIJACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct engine_endpoint;
struct engine_hijack;

/* The response head (status line and headers) at most this long. */
#define ENGINE_HIJACK_MAX_HEAD_BYTES (16u * 1024)
/* A refusal's body kept for its message (the rest is read and dropped). */
#define ENGINE_HIJACK_MAX_ERROR_BODY (64u * 1024)
/* Read from the stream per turn of the loop. */
#define ENGINE_HIJACK_READ_BYTES (64u * 1024)

/* ---- the response head (pure) -------------------------------------------- */

struct engine_hijack_head {
	long status;                 /* 100..999 */
	long long content_length;    /* -1 when absent */
	bool upgraded;               /* 101, or 200 with the stream following */
	size_t len;                  /* the head's bytes, up to and including the blank line */
};

/* Parses p[0..n): 0 while the head is incomplete (and within
 * ENGINE_HIJACK_MAX_HEAD_BYTES), 1 with *ret filled, -EPROTO when it is not
 * an HTTP/1.x status line with well-formed headers (a Content-Length that is
 * not a decimal number, or given twice with different values, included),
 * -EMSGSIZE past the bound without a blank line. Exposed for the unit tests
 * and the fuzz target. */
int engine_hijack_parse_head(const uint8_t *p, size_t n, struct engine_hijack_head *ret);

/* ---- the connection ------------------------------------------------------ */

struct engine_hijack_set {
	LIST_HEAD(, engine_hijack) list;
};

/* Stream bytes (after the head); 0 to go on, < 0 to abort. */
typedef int engine_hijack_data_cb(const void *data, size_t len, void *arg);
/* error 0: the request ended: status is the engine's (101/200: the stream
 * ran to the engine's close; else body holds the refusal's body, cut);
 * else -ECANCELED, a transport errno, -EPROTO (a bad head), -EMSGSIZE (a
 * head over its bound), or data's negative value. body is lent. */
typedef void engine_hijack_done_cb(int error, long status, const char *body, size_t body_len, void *arg);
/* A write ended: every byte handed to the kernel (error 0), or error
 * (-EPIPE: the engine closed its side; -ECANCELED: the hijack ended;
 * -EAGAIN: the request ended without becoming a stream, a refusal — nothing
 * of the write was sent) with written the bytes that went. */
typedef void engine_hijack_write_cb(int error, size_t written, void *arg);

/* Connects to ep (a unix socket or plain tcp; TLS → -EPROTONOSUPPORT),
 * sends "POST path" with body (JSON) and the upgrade headers. Returns 0
 * (*ret if ret), -EPROTONOSUPPORT, -EINVAL, or a socket errno. */
int engine_hijack_start(struct event_base *base, const struct engine_endpoint *ep, struct engine_hijack_set *set,
			const char *path, const char *body, engine_hijack_data_cb *data,
			engine_hijack_done_cb *done, void *arg, struct engine_hijack **ret);

/* Sends p[0..n) (borrowed until cb) on the stream, then, if eof, shuts the
 * write side down. Bytes wait until the engine has answered the upgrade.
 * One write at a time: -EBUSY; -EPIPE once eof was sent or the engine closed
 * its side. cb fires from the loop. */
int engine_hijack_write(struct engine_hijack *h, const void *p, size_t n, bool eof, engine_hijack_write_cb *cb,
			void *arg);

/* Ends it now: a pending write's cb, then done, with -ECANCELED. NULL-safe. */
void engine_hijack_cancel(struct engine_hijack *h);

void engine_hijack_set_cancel_all(struct engine_hijack_set *set);

#endif
