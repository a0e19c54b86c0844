/* rpc.h — method dispatch (STYLE G8, G9).
 *
 * Methods and their params are data: a table of struct rpc_method, each with
 * a table of struct rpc_param. rpc_dispatch() validates params centrally and
 * hands the handler a filled C struct. A handler's result can only come from
 * rpc_reply(), rpc_fail() or rpc_pending(). A pending call is finished later
 * with rpc_call_reply()/rpc_call_fail(). If the client has left
 * (rpc_call_detach), the reply is dropped with a debug log, but the
 * operation still runs to its end.
 *
 * Ownership: a call is created by rpc_dispatch and freed when it finishes
 * (rpc_reply/rpc_fail, or rpc_call_reply/rpc_call_fail for a pending one).
 * The done callback runs once per call, at that moment, while attached. */
#ifndef MSB_RPC_H
#define MSB_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "errors.h"
#include "jsonrpc.h"

struct rpc_call;
struct rpc_result;

struct rpc_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin;        /* resolved once, when the connection was accepted */
};

/* Called once when the call finishes, unless detached. reply is stolen;
 * NULL for a notification (nothing to send). */
typedef void rpc_done_fn(struct rpc_call *call, json_t *reply, void *arg);
/* Sends a notification frame (stolen) to the call's client. */
typedef void rpc_notify_fn(struct rpc_call *call, json_t *notification, void *arg);

/* The call in flight on the same connection as call whose request id is
 * id (json_equal), other than call itself; NULL if none. */
typedef struct rpc_call *rpc_find_fn(const struct rpc_call *call, const json_t *id, void *arg);

/* How a call reaches its client (the server's connection). */
struct rpc_call_ops {
	rpc_done_fn *done;
	rpc_notify_fn *notify;   /* NULL: notifications are dropped */
	rpc_find_fn *find;       /* NULL: no call is found (call.cancel, exec.stdin) */
};

typedef struct rpc_result *rpc_handler(struct rpc_call *call, const void *params);

enum rpc_param_type {
	RPC_PARAM_STRING,   /* const char * (borrowed from the request) */
	RPC_PARAM_INT,      /* int64_t */
	RPC_PARAM_BOOL,     /* bool */
	RPC_PARAM_OBJECT,   /* json_t * (borrowed) */
	RPC_PARAM_ARRAY,    /* json_t * (borrowed) */
	RPC_PARAM_JSON,     /* json_t * (borrowed), any type */
	_RPC_PARAM_TYPE_MAX,
};

/* A custom check after the type check; returns 0 or -EINVAL with a
 * malloc'd *reterr_message. */
typedef int rpc_param_check(const json_t *value, char **reterr_message);

/* A check for RPC_PARAM_JSON params that must be strings: JSON strings
 * keep their length, so an embedded NUL stays visible to the handler. */
int rpc_check_string(const json_t *value, char **reterr_message);

struct rpc_param {
	const char *name;
	enum rpc_param_type type;
	bool required;
	size_t offset;            /* into the method's params struct */
	rpc_param_check *check;   /* NULL = none */
};

struct msbd_config;

/* The most bytes the call's reply and notifications may take on the wire
 * (replybound.h), from its params (borrowed, not yet validated: anything a
 * client sent) and the configuration. */
typedef size_t rpc_reply_bound_fn(const json_t *params, const struct msbd_config *cfg);

struct rpc_method {
	const char *name;
	rpc_handler *handler;
	const struct rpc_param *params;   /* terminated by a NULL name; NULL = none */
	size_t params_size;               /* sizeof the params struct */
	rpc_reply_bound_fn *reply_bound;  /* NULL: REPLYBOUND_DEFAULT_BYTES */
};

const char *rpc_param_type_to_string(enum rpc_param_type t);

/* Validates and runs one request against a table. req is borrowed (the
 * call keeps its own reference to what it needs). ctx is handed to the
 * handler through rpc_call_ctx(). Returns the call if it is still pending
 * (the caller may detach it later), NULL if it finished. */
struct rpc_call *rpc_dispatch(const struct rpc_method *table, size_t n_methods,
			      const struct jsonrpc_request *req, const struct rpc_peer *peer,
			      void *ctx, const struct rpc_call_ops *ops, void *ops_arg);

/* The bound on the reply to req (borrowed) under cfg: its method's
 * reply_bound (the default for an unknown method or one without), plus the
 * id echoed. Taken before dispatch, so the server can admit the call
 * against its reply budgets. */
size_t rpc_reply_bound(const struct rpc_method *table, size_t n_methods, const struct jsonrpc_request *req,
		       const struct msbd_config *cfg);

struct rpc_result *rpc_reply(struct rpc_call *call, json_t *result) __attribute__((warn_unused_result));
struct rpc_result *rpc_fail(struct rpc_call *call, int code, json_t *data, const char *fmt, ...)
	__attribute__((warn_unused_result, format(printf, 4, 5)));
struct rpc_result *rpc_fail_error(struct rpc_call *call, const struct msb_error *e)
	__attribute__((warn_unused_result));
struct rpc_result *rpc_pending(struct rpc_call *call) __attribute__((warn_unused_result));

/* Finish a pending call (frees it). result/data stolen. */
void rpc_call_reply(struct rpc_call *call, json_t *result);
void rpc_call_fail(struct rpc_call *call, int code, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void rpc_call_fail_error(struct rpc_call *call, const struct msb_error *e);

/* Sends {"jsonrpc":"2.0","method":method,"params":params} to the call's
 * client while it is attached; params stolen. */
void rpc_call_notify(struct rpc_call *call, const char *method, json_t *params);

/* The request's id (borrowed; JSON null when it had none or a null id). */
const json_t *rpc_call_id(const struct rpc_call *call);

/* The client left: drop the reply when it comes. */
void rpc_call_detach(struct rpc_call *call);
/* Told once when a detached call finishes (its reply dropped). */
typedef void rpc_orphan_fn(void *arg);
/* Detaches the call, and done(arg) runs when it finishes (NULL: no longer
 * told). The caller keeps arg alive until then or until it unhooks it. */
void rpc_call_orphan(struct rpc_call *call, rpc_orphan_fn *done, void *arg);
/* The ops_arg the call was dispatched with, if it is still attached through
 * ops (the server's connection); else NULL. */
void *rpc_call_transport(const struct rpc_call *call, const struct rpc_call_ops *ops);
bool rpc_call_is_detached(const struct rpc_call *call);
void *rpc_call_ctx(const struct rpc_call *call);
const struct rpc_peer *rpc_call_peer(const struct rpc_call *call);
const char *rpc_call_method(const struct rpc_call *call);
/* A daemon-unique number for log lines. */
uint64_t rpc_call_seq(const struct rpc_call *call);

/* ---- cancellation (call.cancel, a closed connection) --------------------
 * A pending call whose method can be cancelled sets a hook. rpc_call_cancel
 * runs it: it returns true when it took the cancel (the call is then
 * finished later, from the loop, never from inside the hook), false when
 * the call is past cancelling (already answering). The hook stays set (a
 * second cancel asks it again: it answers false). The hook's arg also
 * lets a sibling request (exec.stdin) reach the call's state: see
 * rpc_call_cancel_arg. */
typedef bool rpc_cancel_fn(struct rpc_call *call, const char *why, void *arg);
void rpc_call_set_cancel(struct rpc_call *call, rpc_cancel_fn *fn, void *arg);
/* false when the call has no hook. why (static text: "call.cancel",
 * "the client leaving") is for the log. */
bool rpc_call_cancel(struct rpc_call *call, const char *why);
bool rpc_call_is_cancellable(const struct rpc_call *call);
/* The hook's arg when the call's hook is fn, else NULL. */
void *rpc_call_cancel_arg(const struct rpc_call *call, rpc_cancel_fn *fn);
/* The call in flight on call's connection with request id id (not call
 * itself), or NULL (none, or call is detached). */
struct rpc_call *rpc_call_find_sibling(const struct rpc_call *call, const json_t *id);

#endif
