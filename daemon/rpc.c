#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cleanup.h"
#include "log.h"
#include "replybound.h"
#include "rpc.h"
#include "xmalloc.h"

struct rpc_result {
	int unused;
};

static struct rpc_result rpc_finished_marker, rpc_pending_marker;

struct rpc_call {
	uint64_t seq;
	json_t *root;          /* the request, kept so borrowed params stay valid */
	json_t *id;            /* borrowed from root; NULL for a notification */
	const struct rpc_method *method;
	void *params;          /* the filled params struct */
	struct rpc_peer peer;
	void *ctx;
	const struct rpc_call_ops *ops;  /* NULL once detached */
	void *ops_arg;
	rpc_orphan_fn *orphan_done;      /* detached: told when it finishes */
	void *orphan_arg;
	rpc_cancel_fn *cancel;           /* NULL: not cancellable */
	void *cancel_arg;
	bool pending;
};

static uint64_t rpc_next_seq = 1;

static const char *const param_type_names[_RPC_PARAM_TYPE_MAX] = {
	[RPC_PARAM_STRING] = "a string",
	[RPC_PARAM_INT] = "an integer",
	[RPC_PARAM_BOOL] = "a boolean",
	[RPC_PARAM_OBJECT] = "an object",
	[RPC_PARAM_ARRAY] = "an array",
	[RPC_PARAM_JSON] = "any JSON value",
};

int rpc_check_string(const json_t *value, char **reterr_message)
{
	if (json_is_string(value))
		return 0;
	*reterr_message = xstrdup("must be a string");
	return -EINVAL;
}

const char *rpc_param_type_to_string(enum rpc_param_type t)
{
	return t < _RPC_PARAM_TYPE_MAX ? param_type_names[t] : NULL;
}

static struct rpc_call *rpc_call_free(struct rpc_call *call)
{
	if (!call)
		return NULL;
	json_decref(call->root);
	free(call->params);
	free(call);
	return NULL;
}

/* Sends the reply (if any and attached) and frees the call. */
static void rpc_call_finish(struct rpc_call *call, json_t *result, json_t *error)
{
	json_t *reply = NULL;

	if (call->id)
		reply = error ? jsonrpc_reply_error(call->id, error) : jsonrpc_reply_result(call->id, result);
	else {
		json_decref(result);
		json_decref(error);
	}
	if (call->ops)
		call->ops->done(call, reply, call->ops_arg);
	else {
		log_debug("rpc", "%s: call %llu (%s) finished after its client left, reply dropped",
			  __func__, (unsigned long long)call->seq, call->method ? call->method->name : "?");
		json_decref(reply);
		if (call->orphan_done)
			call->orphan_done(call->orphan_arg);
	}
	rpc_call_free(call);
}

static json_t *rpc_error_vobject(int code, json_t *data, const char *fmt, va_list ap)
{
	_cleanup_free_ char *msg = fmt ? xvasprintf(fmt, ap) : NULL;

	return msb_error_object(code, msg, data);
}

struct rpc_result *rpc_reply(struct rpc_call *call, json_t *result)
{
	rpc_call_finish(call, result, NULL);
	return &rpc_finished_marker;
}

struct rpc_result *rpc_fail(struct rpc_call *call, int code, json_t *data, const char *fmt, ...)
{
	va_list ap;
	json_t *err;

	va_start(ap, fmt);
	err = rpc_error_vobject(code, data, fmt, ap);
	va_end(ap);
	rpc_call_finish(call, NULL, err);
	return &rpc_finished_marker;
}

struct rpc_result *rpc_fail_error(struct rpc_call *call, const struct msb_error *e)
{
	rpc_call_finish(call, NULL, msb_error_to_json(e));
	return &rpc_finished_marker;
}

struct rpc_result *rpc_pending(struct rpc_call *call)
{
	call->pending = true;
	return &rpc_pending_marker;
}

void rpc_call_reply(struct rpc_call *call, json_t *result)
{
	assert(call->pending);
	rpc_call_finish(call, result, NULL);
}

void rpc_call_fail(struct rpc_call *call, int code, json_t *data, const char *fmt, ...)
{
	va_list ap;
	json_t *err;

	assert(call->pending);
	va_start(ap, fmt);
	err = rpc_error_vobject(code, data, fmt, ap);
	va_end(ap);
	rpc_call_finish(call, NULL, err);
}

void rpc_call_fail_error(struct rpc_call *call, const struct msb_error *e)
{
	assert(call->pending);
	rpc_call_finish(call, NULL, msb_error_to_json(e));
}

const json_t *rpc_call_id(const struct rpc_call *call)
{
	static json_t *null_id;

	if (call->id)
		return call->id;
	if (!null_id)
		null_id = json_null();   /* a singleton in jansson: never freed */
	return null_id;
}

void rpc_call_notify(struct rpc_call *call, const char *method, json_t *params)
{
	json_t *n;

	if (!call->ops || !call->ops->notify) {
		json_decref(params);
		return;
	}
	n = json_object();
	json_object_set_new(n, "jsonrpc", json_string("2.0"));
	json_object_set_new(n, "method", json_string(method));
	json_object_set_new(n, "params", params ? params : json_object());
	call->ops->notify(call, n, call->ops_arg);
}

void *rpc_call_transport(const struct rpc_call *call, const struct rpc_call_ops *ops)
{
	return call->ops && call->ops == ops ? call->ops_arg : NULL;
}

void rpc_call_detach(struct rpc_call *call)
{
	call->ops = NULL;
	call->ops_arg = NULL;
}

void rpc_call_orphan(struct rpc_call *call, rpc_orphan_fn *done, void *arg)
{
	rpc_call_detach(call);
	call->orphan_done = done;
	call->orphan_arg = arg;
}

bool rpc_call_is_detached(const struct rpc_call *call)
{
	return call->ops == NULL;
}

void *rpc_call_ctx(const struct rpc_call *call)
{
	return call->ctx;
}

const struct rpc_peer *rpc_call_peer(const struct rpc_call *call)
{
	return &call->peer;
}

const char *rpc_call_method(const struct rpc_call *call)
{
	return call->method->name;
}

uint64_t rpc_call_seq(const struct rpc_call *call)
{
	return call->seq;
}

static const struct rpc_method *rpc_method_find(const struct rpc_method *table, size_t n,
						const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	return NULL;
}

static const struct rpc_param *rpc_param_find(const struct rpc_param *params, const char *name)
{
	for (const struct rpc_param *p = params; p && p->name; p++)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}

static bool rpc_param_type_matches(enum rpc_param_type t, const json_t *v)
{
	switch (t) {
	case RPC_PARAM_STRING: return json_is_string(v);
	case RPC_PARAM_INT: return json_is_integer(v);
	case RPC_PARAM_BOOL: return json_is_boolean(v);
	case RPC_PARAM_OBJECT: return json_is_object(v);
	case RPC_PARAM_ARRAY: return json_is_array(v);
	case RPC_PARAM_JSON: return true;
	default: assert(!"unreachable"); return false;
	}
}

static void rpc_param_store(const struct rpc_param *p, json_t *v, void *params)
{
	char *slot = (char *)params + p->offset;

	switch (p->type) {
	case RPC_PARAM_STRING:
		*(const char **)slot = json_string_value(v);
		break;
	case RPC_PARAM_INT:
		*(int64_t *)slot = json_integer_value(v);
		break;
	case RPC_PARAM_BOOL:
		*(bool *)slot = json_is_true(v);
		break;
	case RPC_PARAM_OBJECT:
	case RPC_PARAM_ARRAY:
	case RPC_PARAM_JSON:
		*(json_t **)slot = v;
		break;
	default:
		assert(!"unreachable");
	}
}

/* Fills the params struct. Returns 0, or -EINVAL with the error object to
 * send in *reterr (new reference). */
static int rpc_params_fill(const struct rpc_method *m, json_t *given, void *params, json_t **reterr)
{
	const char *key;
	json_t *v;

	if (given && !json_is_object(given)) {
		*reterr = msb_error_object(MSB_ERR_INVALID_PARAMS, "params must be an object", NULL);
		return -EINVAL;
	}
	json_object_foreach(given, key, v) {
		if (!rpc_param_find(m->params, key)) {
			int n = msb_echo_len(key);

			*reterr = msb_error_object(MSB_ERR_INVALID_PARAMS, NULL,
						   json_pack("{s:s%}", "field", key, (size_t)n));
			json_object_set_new(*reterr, "message",
					    json_sprintf("unknown param \"%.*s\" for %s", n, key, m->name));
			return -EINVAL;
		}
	}
	for (const struct rpc_param *p = m->params; p && p->name; p++) {
		_cleanup_free_ char *why = NULL;

		v = json_object_get(given, p->name);
		if (!v && !p->required)
			continue;
		if (!v)
			why = xasprintf("missing param \"%s\"", p->name);
		else if (!rpc_param_type_matches(p->type, v))
			why = xasprintf("param \"%s\" must be %s", p->name, rpc_param_type_to_string(p->type));
		else if (p->check && p->check(v, &why) < 0 && !why)
			why = xasprintf("param \"%s\" is not valid", p->name);
		if (why) {
			*reterr = msb_error_object(MSB_ERR_INVALID_PARAMS, why,
						   json_pack("{s:s}", "field", p->name));
			return -EINVAL;
		}
		rpc_param_store(p, v, params);
	}
	return 0;
}

size_t rpc_reply_bound(const struct rpc_method *table, size_t n_methods, const struct jsonrpc_request *req,
		       const struct msbd_config *cfg)
{
	const struct rpc_method *m = rpc_method_find(table, n_methods, req->method);
	size_t bound = m && m->reply_bound ? m->reply_bound(req->params, cfg) : REPLYBOUND_DEFAULT_BYTES;

	return bound + replybound_id(req->id);
}

struct rpc_call *rpc_dispatch(const struct rpc_method *table, size_t n_methods,
			      const struct jsonrpc_request *req, const struct rpc_peer *peer,
			      void *ctx, const struct rpc_call_ops *ops, void *ops_arg)
{
	struct rpc_call *call = xcalloc(1, sizeof(*call));
	json_t *err = NULL;
	struct rpc_result *res;

	call->seq = rpc_next_seq++;
	call->root = json_incref(req->root);
	call->id = req->id;
	call->peer = *peer;
	call->ctx = ctx;
	call->ops = ops;
	call->ops_arg = ops_arg;
	call->method = rpc_method_find(table, n_methods, req->method);
	if (!call->method) {
		int n = msb_echo_len(req->method);

		err = msb_error_object(MSB_ERR_METHOD_NOT_FOUND, NULL,
				       json_pack("{s:s%}", "method", req->method, (size_t)n));
		json_object_set_new(err, "message",
				    json_sprintf("no such method \"%.*s\"", n, req->method));
		rpc_call_finish(call, NULL, err);
		return NULL;
	}
	call->params = xcalloc(1, call->method->params_size ? call->method->params_size : 1);
	if (rpc_params_fill(call->method, req->params, call->params, &err) < 0) {
		rpc_call_finish(call, NULL, err);
		return NULL;
	}
	log_debug("rpc", "call %llu: %s from uid %u pid %d", (unsigned long long)call->seq,
		  call->method->name, (unsigned)peer->uid, (int)peer->pid);
	res = call->method->handler(call, call->params);
	assert(res == &rpc_finished_marker || res == &rpc_pending_marker);
	return res == &rpc_pending_marker ? call : NULL;
}

void rpc_call_set_cancel(struct rpc_call *call, rpc_cancel_fn *fn, void *arg)
{
	call->cancel = fn;
	call->cancel_arg = arg;
}

bool rpc_call_cancel(struct rpc_call *call, const char *why)
{
	return call->cancel ? call->cancel(call, why, call->cancel_arg) : false;
}

bool rpc_call_is_cancellable(const struct rpc_call *call)
{
	return call->cancel != NULL;
}

void *rpc_call_cancel_arg(const struct rpc_call *call, rpc_cancel_fn *fn)
{
	return call->cancel && call->cancel == fn ? call->cancel_arg : NULL;
}

struct rpc_call *rpc_call_find_sibling(const struct rpc_call *call, const json_t *id)
{
	if (!call->ops || !call->ops->find || !id || json_is_null(id))
		return NULL;
	return call->ops->find(call, id, call->ops_arg);
}
