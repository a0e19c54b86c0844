/* msb.h — libmaf-sandbox: a synchronous C client for maf-sandboxd.
 *
 * One struct msb_conn is one Unix stream connection to the daemon. Calls are
 * synchronous: msb_call() sends one JSON-RPC 2.0 request and waits for its
 * reply; notifications the daemon sends meanwhile (e.g. sandbox.pull_progress)
 * go to the hook set with msb_set_notify(), or are skipped when none is set.
 * Notifications that outlive a call (those of events.subscribe) are read
 * with msb_wait_notify(), one per call, into the same hook.
 * A connection is not thread-safe; use one per thread.
 *
 * Errors are the negative MSB_E_* codes below (msb_strerror() names them).
 * After MSB_E_IO, MSB_E_PROTO, MSB_E_TIMEOUT or MSB_E_CLOSED the connection is
 * unusable: it is closed, every later call returns MSB_E_CLOSED, and the only
 * thing left to do is msb_conn_free(). MSB_E_REMOTE, MSB_E_INVAL and
 * MSB_E_NOMEM leave it usable.
 *
 * The daemon closes a connection left idle (nothing in flight, no event
 * subscription) for limits.idle_timeout_ms. msb_call() notices that before
 * it sends and connects again to the same path, transparently: no call is
 * lost or sent twice, since none was in flight. Should that new connect
 * fail, msb_call() returns MSB_E_CONNECT and the connection is unusable
 * (MSB_E_TIMEOUT when the call's timeout, msb_set_timeout, passed while
 * connecting: the timeout covers the reconnect).
 * A connection the daemon closed during a call, or after it said why (an
 * error with id null, or ShuttingDown), is not replaced (the call fails, as
 * above): a call is never sent twice. Nor is one that subscribed to events
 * (events.subscribe succeeded on it): its subscription, and any events
 * meanwhile, went with it, so the next msb_call() returns MSB_E_CLOSED.
 *
 * Small allocations abort on out-of-memory (as everywhere in maf-sandbox);
 * MSB_E_NOMEM reports a JSON value that could not be built or encoded.
 *
 * This header stands alone: it needs only jansson (and signal.h's sig_atomic_t). */
#ifndef MSB_CLIENT_H
#define MSB_CLIENT_H

#include <signal.h>
#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

struct msb_conn;

enum {
	MSB_OK        =  0,
	MSB_E_NOMEM   = -1,  /* a JSON value could not be built or encoded */
	MSB_E_INVAL   = -2,  /* a bad argument: NULL, non-object params, path too long */
	MSB_E_CONNECT = -3,  /* the socket is missing, refuses or is not permitted; see errno */
	MSB_E_IO      = -4,  /* a read or write failed; see errno */
	MSB_E_PROTO   = -5,  /* the daemon sent something that is not a valid reply */
	MSB_E_REMOTE  = -6,  /* the daemon answered with an error; see msb_last_error_*() */
	MSB_E_TIMEOUT = -7,  /* no whole reply within the call's timeout */
	MSB_E_CLOSED  = -8,  /* the daemon closed the connection, or it was already unusable */
};

/* The per-call timeout a new connection starts with. */
#define MSB_DEFAULT_TIMEOUT_MS 120000

/* A static description of err (any int). Never NULL; distinct per code. */
const char *msb_strerror(int err);

/* The default socket: $MAF_SANDBOX_SOCKET if set and non-empty; else
 * /run/maf-sandbox.sock when the effective uid is 0; else
 * $XDG_RUNTIME_DIR/maf-sandbox.sock when XDG_RUNTIME_DIR is set and a socket
 * is there (a daemon the user runs); else /run/maf-sandbox.sock (the
 * system daemon, open to its socket group). Never NULL; the caller frees it. */
char *msb_default_socket_path(void);

/* Connects to path (borrowed; NULL = msb_default_socket_path()). On MSB_OK
 * *ret_conn is a new connection the caller frees with msb_conn_free().
 * MSB_E_CONNECT when the socket cannot be reached or no default exists
 * (errno tells which: ENOENT, ECONNREFUSED, EACCES, ...); MSB_E_INVAL when
 * path is empty or too long for a Unix socket address. */
int msb_connect(const char *path, struct msb_conn **ret_conn);

/* Closes and frees conn (owned). NULL-safe; returns NULL. */
struct msb_conn *msb_conn_free(struct msb_conn *conn);

/* Sets the timeout of each later call, in ms: sending the request and
 * receiving its whole reply. 0 or negative = wait forever.
 * Default MSB_DEFAULT_TIMEOUT_MS. */
void msb_set_timeout(struct msb_conn *conn, int timeout_ms);

/* A notification the daemon sent while a call on the connection waited.
 * method: borrowed, valid only during the hook. params: borrowed, valid only
 * during the hook (json_incref() it to keep it); the notification's "params"
 * member as sent, or NULL when it has none. arg: as given to msb_set_notify().
 * Runs inside msb_call(), on its thread, once per notification, in the order
 * the daemon sent them, before msb_call() returns. A frame that is an object
 * with "method" and no "id" is a notification; it reaches the hook when its
 * method is a string (else it is skipped). Notifications the daemon sent
 * after the reply are not delivered by that call: those already read reach
 * the hook during the next msb_call() or msb_wait_notify() on the
 * connection. They do not extend a call's timeout. The hook must not free
 * the connection; a msb_call() or msb_wait_notify() from the hook on the
 * same connection is refused with MSB_E_INVAL. */
typedef void msb_notify_fn(const char *method, json_t *params, void *arg);

/* Sets the notification hook of conn: fn (NULL = skip notifications, the
 * default) is called with arg (borrowed, passed through). Replaces any
 * earlier hook; takes effect from the next notification read. */
void msb_set_notify(struct msb_conn *conn, msb_notify_fn *fn, void *arg);

/* Calls method (borrowed) with params (steals, even on failure; NULL = no
 * "params" member; otherwise it must be an object). On MSB_OK *ret_result is
 * a new reference the caller owns (ret_result may be NULL to discard it).
 * On MSB_E_REMOTE the daemon's error is available through the
 * msb_last_error_*() accessors until the next call on conn; an error reply
 * with id null is taken as the answer to this call (only one is ever in
 * flight). A reply with any other id than this call's is MSB_E_PROTO.
 * Notifications received while waiting go to the hook (see msb_notify_fn). */
int msb_call(struct msb_conn *conn, const char *method, json_t *params, json_t **ret_result);

/* Waits for the next notification on conn, with no call in flight (e.g.
 * the live events after the reply to events.subscribe), and hands it to the
 * hook as msb_call() would (see msb_notify_fn). Notifications already read
 * come first, in order; one is handled per call. timeout_ms: how long to
 * wait; 0 = only what can be read without waiting; negative = no limit.
 * The connection's call timeout (msb_set_timeout) does not apply.
 * Returns:
 *   1              one notification was read (handed to the hook, or
 *                  skipped: no hook, or its method is not a string);
 *   0              none within timeout_ms, or a signal was caught while
 *                  waiting (so a handler's flag can end a wait loop); part
 *                  of a frame read so far is kept, the connection usable;
 *   MSB_E_CLOSED   the daemon closed the connection (notifications read
 *                  whole before that were handed out first), or it was
 *                  already unusable;
 *   MSB_E_PROTO    a frame that is not a notification: a reply (anything
 *                  with an "id": no call is waiting for it), not JSON, or
 *                  over the frame limit;
 *   MSB_E_IO       a read failed (see errno);
 *   MSB_E_INVAL    conn is NULL, or this is called from the hook.
 * After MSB_E_CLOSED, MSB_E_PROTO or MSB_E_IO the connection is unusable
 * (as after msb_call). msb_last_error_*() are left as they were. */
int msb_wait_notify(struct msb_conn *conn, int timeout_ms);

/* The last MSB_E_REMOTE error of conn (borrowed from conn; valid until the
 * next call or msb_conn_free). When there is none: code 0, NULL otherwise. */
int msb_last_error_code(const struct msb_conn *conn);          /* error.code */
const char *msb_last_error_type(const struct msb_conn *conn);  /* error.data.type, or NULL */
const char *msb_last_error_message(const struct msb_conn *conn); /* error.message */
json_t *msb_last_error_data(const struct msb_conn *conn);      /* error.data, or NULL */

/* Cancelling the call in flight (call.cancel, PROTOCOL.md). flag (borrowed;
 * NULL = never, the default) is typically set by a signal handler: when a
 * signal interrupts msb_call()'s or msb_call_stdin()'s wait and *flag is
 * non-zero, call.cancel {id} for that call is sent, once per call, as a
 * notification, and the call keeps waiting for its answer (a cancelled
 * sandbox.exec answers Cancelled, 1209, with its partial output; a call
 * that cannot be cancelled, or that had finished, answers as it would
 * have). Signals that leave *flag 0 are ignored, as before. The handler
 * must be installed so that poll() is interrupted (any sigaction: poll is
 * never restarted). */
void msb_set_cancel_flag(struct msb_conn *conn, volatile sig_atomic_t *flag);

/* Bytes of fd sent in one exec.stdin request (the daemon's bound on one is
 * larger). */
#define MSB_STDIN_CHUNK_BYTES (256 * 1024)

/* As msb_call(), for a call that takes a streamed stdin (sandbox.exec):
 * "stdin_stream": true is set in params (which must be an object, stolen),
 * and while the call waits, what fd (borrowed, left open) yields is sent as
 * exec.stdin requests {call, data_b64, eof} of at most
 * MSB_STDIN_CHUNK_BYTES, one at a time (the next only once the daemon
 * answered the last: it answers once the bytes reached the engine, so the
 * daemon holds at most one chunk and fd is read no faster than the command
 * takes it); fd's end (read returns 0, or fails) is sent as eof. Their
 * answers are taken here, with their own ids; an answer that says fewer
 * bytes went than were sent (the command closed its stdin or ended) stops
 * the reading of fd. Notifications go to the hook, the cancel flag works as
 * for msb_call(), and the result and errors are msb_call()'s (plus
 * MSB_E_INVAL for fd < 0). fd may be a pipe, a file or a terminal; it is
 * read only when poll() says it is readable. */
int msb_call_stdin(struct msb_conn *conn, const char *method, json_t *params, int fd, json_t **ret_result);

/* Shorthands for msb_call(conn, "daemon.*", NULL, ret_result); same ownership. */
int msb_describe(struct msb_conn *conn, json_t **ret_result);  /* daemon.describe */
int msb_status(struct msb_conn *conn, json_t **ret_result);    /* daemon.status */
int msb_engine(struct msb_conn *conn, json_t **ret_result);    /* daemon.engine */

#ifdef __cplusplus
}
#endif

#endif
