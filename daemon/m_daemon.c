/* m_daemon.c — the daemon.* methods: describe, status, engine. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "daemon.h"
#include "egress.h"
#include "engine.h"
#include "errmap.h"
#include "cleanup.h"
#include "xmalloc.h"
#include "msb-limits.h"
#include "log.h"
#include "m_exec.h"
#include "m_files.h"
#include "m_sandbox.h"
#include "msb-build.h"
#include "replybound.h"
#include "server.h"
#include "types.h"
#include "cleanup.h"
#include "xmalloc.h"

bool msbd_lookup_admin(const struct msbd *d, uid_t uid, gid_t gid)
{
	const char *group = d->dom.config->admin_group;
	struct group *gr;
	struct passwd *pw;
	gid_t groups[256];
	int n = 256;

	if (uid == 0)
		return true;
	if (!group || !(gr = getgrnam(group)))
		return false;
	if (gid == gr->gr_gid)
		return true;
	/* Supplementary groups, from the user database. */
	pw = getpwuid(uid);
	if (!pw || getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
		return false;
	for (int i = 0; i < n; i++)
		if (groups[i] == gr->gr_gid)
			return true;
	return false;
}

/* The domain's ways out (domain.h), to the server and the user database. */
static size_t publish_cb(void *arg, enum domain_event type, uid_t owner, const char *scope, const char *method,
			 const json_t *params)
{
	struct msbd *d = arg;

	if (!d->server)
		return 0;
	switch (type) {
	case DOMAIN_EVENT_EGRESS_DECISION:
		return server_publish(d->server, SERVER_EVENT_EGRESS_DECISION, owner, scope, method, params);
	}
	return 0;
}

static bool is_admin_cb(void *arg, uid_t uid, gid_t gid)
{
	return msbd_lookup_admin(arg, uid, gid);
}

void msbd_wire_domain(struct msbd *d)
{
	d->dom.publish = publish_cb;
	d->dom.is_admin = is_admin_cb;
	d->dom.out_arg = d;
}

/* Largest /version reply we read. */
#define MSB_ENGINE_VERSION_MAX_BODY (64 * 1024)

struct no_params {
	int unused;
};

static double msbd_uptime(const struct msbd *d)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - d->started.tv_sec) + (now.tv_nsec - d->started.tv_nsec) / 1e9;
}

static json_t *json_string_or_null(const char *s)
{
	json_t *j = s ? json_string(s) : NULL;

	return j ? j : json_null();
}

static struct rpc_result *m_daemon_describe(struct rpc_call *call, const void *params)
{
	const struct msbd *d = rpc_call_ctx(call);
	const struct msb_transfer_limits lim = {
		MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES
	};
	json_t *r;

	(void)params;
	r = json_pack("{s:{s:s, s:s}, s:s, s:s, s:s, s:o, s:o, s:b, s:o, s:o, s:{s:o, s:o}, s:{s:I}, s:{s:I, s:I}}",
		      "daemon", "name", "maf-sandboxd", "version", PACKAGE_VERSION,
		      "protocol_version", MSB_PROTOCOL_VERSION,
		      "backend", "docker",
		      "isolation", msb_isolation_to_string(MSB_ISOLATION_CONTAINER),
		      "capabilities", msb_capability_set_encode(backend_capabilities(&d->dom)),
		      "egress_modes", msb_egress_set_encode(backend_egress_modes(&d->dom)),
		      "observes_egress", egress_ready(d->dom.egress),
		      "isolation_scopes", msb_scope_set_encode(backend_scopes()),
		      "os_families", msb_os_family_set_encode(backend_os_families(&d->dom)),
		      "limits", "files_in", msb_transfer_limits_encode(&lim),
		      "files_out", msb_transfer_limits_encode(&lim),
		      "exec", "max_output_bytes", (json_int_t)d->dom.config->exec_max_output_bytes,
		      "wire", "max_frame_bytes", (json_int_t)d->dom.config->max_frame_bytes,
		      "max_inflight", (json_int_t)d->dom.config->max_inflight);
	if (!r)
		return rpc_fail(call, MSB_ERR_INTERNAL, NULL, "cannot encode the declarations");
	return rpc_reply(call, r);
}

static json_t *status_engine(const struct engine *e)
{
	const struct engine_info *info = engine_get_info(e);
	const struct engine_endpoint *ep = engine_get_endpoint(e);
	enum engine_state st = engine_get_state(e);
	json_t *j = json_object();

	json_object_set_new(j, "endpoint", json_string_or_null(ep->host));
	json_object_set_new(j, "endpoint_source", json_string_or_null(ep->source));
	json_object_set_new(j, "state", json_string(engine_state_to_string(st)));
	json_object_set_new(j, "reachable", json_boolean(st == ENGINE_REACHABLE));
	json_object_set_new(j, "version", json_string_or_null(info ? info->version : NULL));
	json_object_set_new(j, "api_version", json_string_or_null(info ? info->api_version : NULL));
	json_object_set_new(j, "engine_api_version",
			    json_string_or_null(info ? info->engine_api_version : NULL));
	json_object_set_new(j, "os", json_string_or_null(info ? info->os : NULL));
	json_object_set_new(j, "last_error", json_string_or_null(engine_get_last_error(e)));
	json_object_set_new(j, "requests", json_integer((json_int_t)engine_requests_made(e)));
	json_object_set_new(j, "call_requests", json_integer((json_int_t)engine_call_requests_made(e)));
	return j;
}

/* The request and reply budgets, what they hold now (issue 17). */
static json_t *status_memory(const struct server_stats *s, const struct msbd_config *cfg)
{
	json_t *m = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			 "buffered_bytes", (json_int_t)s->buffered_bytes,
			 "buffer_budget_bytes", (json_int_t)cfg->buffer_budget_bytes,
			 "reply_reserved_bytes", (json_int_t)s->reply_reserved_bytes,
			 "reply_queued_bytes", (json_int_t)s->reply_queued_bytes,
			 "reply_budget_bytes", (json_int_t)cfg->reply_budget_bytes,
			 "conn_reply_budget_bytes", (json_int_t)cfg->conn_reply_budget_bytes,
			 "parked_calls", (json_int_t)s->parked_calls,
			 "parked_bytes", (json_int_t)s->parked_bytes,
			 "parked_total", (json_int_t)s->parked_total,
			 "replies_over_bound", (json_int_t)s->replies_over_bound,
			 "malloc_trims", (json_int_t)s->malloc_trims);

	if (m)
		json_object_set_new(m, "uid_reply_budget_bytes",
				    json_integer((json_int_t)config_uid_reply_budget_bytes(cfg)));
	return m;
}

/* daemon.status's connections.by_uid lists at most this many uids. */
#define MSB_STATUS_TOP_UIDS 8

/* Adds the fairness counters and the top uids to status's "connections". */
static json_t *status_add_fairness(json_t *status, const struct server *srv)
{
	json_t *fair = server_fair_status(srv, MSB_STATUS_TOP_UIDS);

	if (status && fair)
		json_object_update(json_object_get(status, "connections"), fair);
	json_decref(fair);
	return status;
}

/* status's "egress" gains what a user needs to see why allowlist is or is
 * not served: "modes" (as describe's egress_modes), "proxy_binary" (the
 * egress.proxy_binary key, null when unset) and "allowlist_off_reason"
 * (null while allowlist is served). */
static void status_add_egress(json_t *egress, const struct msbd *d)
{
	_cleanup_free_ char *why = egress_allowlist_off_reason(&d->dom);
	const char *bin = d->dom.config->egress_proxy_binary;

	if (!json_is_object(egress))
		return;
	json_object_set_new(egress, "modes", msb_egress_set_encode(backend_egress_modes(&d->dom)));
	json_object_set_new(egress, "proxy_binary", json_string_or_null(bin && *bin ? bin : NULL));
	json_object_set_new(egress, "allowlist_off_reason", json_string_or_null(why));
}

static struct rpc_result *m_daemon_status(struct rpc_call *call, const void *params)
{
	const struct msbd *d = rpc_call_ctx(call);
	const struct server_stats *s = server_get_stats(d->server);

	json_t *r;

	(void)params;
	r = json_pack("{s:{s:s, s:I, s:f, s:s?}, s:o, s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:o, "
					 "s:s, s:s*}",
		"daemon", "version", PACKAGE_VERSION, "pid", (json_int_t)getpid(),
		"uptime_seconds", msbd_uptime(d), "socket", server_get_path(d->server),
		"engine", status_engine(d->dom.engine),
		"connections", "current", (json_int_t)s->connections_current,
		"accepted", (json_int_t)s->connections_accepted,
		"rejected", (json_int_t)s->connections_rejected,
		"requests", "total", (json_int_t)s->requests_total,
		"in_flight", (json_int_t)s->requests_in_flight,
		"errors", (json_int_t)s->requests_errors,
		"egress", egress_status_json(d->dom.egress),
		"file_plane", d->dom.plane_local ? "local" : "archive",
		"file_plane_reason", d->dom.plane_reason);
	if (r)
		json_object_set_new(r, "memory", status_memory(s, d->dom.config));
	if (r)
		status_add_egress(json_object_get(r, "egress"), d);
	return rpc_reply(call, status_add_fairness(r, d->server));
}

static json_t *engine_version_result(const struct engine *e, const char *body, size_t len)
{
	const struct engine_info *info = engine_get_info(e);
	json_t *v = json_loadb(body, len, 0, NULL);
	json_t *r;

	if (!json_is_object(v)) {
		json_decref(v);
		return NULL;
	}
	r = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}",
		      "version", json_string_or_null(json_string_value(json_object_get(v, "Version"))),
		      "api_version", json_string_or_null(info ? info->api_version : NULL),
		      "engine_api_version",
		      json_string_or_null(json_string_value(json_object_get(v, "ApiVersion"))),
		      "os", json_string_or_null(json_string_value(json_object_get(v, "Os"))),
		      "arch", json_string_or_null(json_string_value(json_object_get(v, "Arch"))),
		      "kernel_version",
		      json_string_or_null(json_string_value(json_object_get(v, "KernelVersion"))));
	json_decref(v);
	return r;
}

static void m_daemon_engine_done(struct engine_req *req, int error, const struct engine_reply *reply,
				 void *arg)
{
	struct rpc_call *call = arg;
	const struct msbd *d = rpc_call_ctx(call);
	struct msb_error e = { 0 };
	json_t *r;

	(void)req;
	if (error < 0 || reply->status >= 400) {
		errmap_engine(error, reply, "reading the engine version", &e);
		rpc_call_fail_error(call, &e);
		msb_error_clear(&e);
		return;
	}
	r = engine_version_result(d->dom.engine, reply->body, reply->body_len);
	if (!r) {
		rpc_call_fail(call, MSB_ERR_ENGINE_ERROR, NULL,
			      "the Docker engine sent an unreadable version");
		return;
	}
	rpc_call_reply(call, r);
}

static struct rpc_result *m_daemon_engine(struct rpc_call *call, const void *params)
{
	const struct msbd *d = rpc_call_ctx(call);
	const struct engine_call ec = {
		.method = "GET", .path = "/version", .max_body = MSB_ENGINE_VERSION_MAX_BODY,
	};
	struct msb_error e = { 0 };
	struct rpc_result *res;
	int r;

	(void)params;
	r = engine_call_start(d->dom.engine, &ec, m_daemon_engine_done, call, NULL);
	if (r >= 0)
		return rpc_pending(call);
	errmap_engine(r, NULL, "reading the engine version", &e);
	res = rpc_fail_error(call, &e);
	msb_error_clear(&e);
	return res;
}

/* ---- events.subscribe ---- */

struct m_events_params {
	json_t *types;
	const char *scope;
	bool replay;
};

static const struct rpc_param m_events_subscribe_spec[] = {
	{ "types", RPC_PARAM_ARRAY, true, offsetof(struct m_events_params, types), NULL },
	{ "scope", RPC_PARAM_STRING, false, offsetof(struct m_events_params, scope), rpc_check_string },
	{ "replay", RPC_PARAM_BOOL, false, offsetof(struct m_events_params, replay), NULL },
	{ NULL },
};

static const struct {
	const char *name;
	uint32_t bit;
} event_types[] = {
	{ MSB_EVENT_EGRESS_DECISION, SERVER_EVENT_EGRESS_DECISION },
};

/* Subscribes the caller's connection: events of these types about
 * sandboxes it may see (its own; every one for an admin), within scope. */
static struct rpc_result *m_events_subscribe(struct rpc_call *call, const void *params)
{
	const struct m_events_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	uint32_t mask = 0;
	json_t *v, *names = json_array();
	size_t i;
	int r;

	json_array_foreach(p->types, i, v) {
		size_t k;

		for (k = 0; k < ELEMENTSOF(event_types); k++)
			if (json_is_string(v) && strcmp(json_string_value(v), event_types[k].name) == 0)
				break;
		if (k == ELEMENTSOF(event_types)) {
			json_decref(names);
			return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
					json_pack("{s:s, s:[s]}", "field", "types", "known", MSB_EVENT_EGRESS_DECISION),
					"types[%zu] is not an event type this daemon publishes", i);
		}
		if (!(mask & event_types[k].bit))
			json_array_append_new(names, json_string(event_types[k].name));
		mask |= event_types[k].bit;
	}
	if (!mask) {
		json_decref(names);
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "types"),
				"types must name at least one event type");
	}
	if (p->scope && !*p->scope) {
		json_decref(names);
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "scope"),
				"scope must not be empty");
	}
	r = server_subscribe(d->server, call, mask, p->scope, p->replay);
	if (r < 0) {
		json_decref(names);
		return rpc_fail(call, MSB_ERR_INVALID_REQUEST, NULL, r == -ENOBUFS ?
				"the replay passed events.max_backlog_bytes unread" :
				"events need a connection to arrive on");
	}
	return rpc_reply(call, json_pack("{s:o, s:s?}", "types", names, "scope", p->scope));
}

const struct rpc_method msbd_methods[] = {
	{ MSB_METHOD_DAEMON_DESCRIBE, m_daemon_describe, NULL, sizeof(struct no_params), NULL },
	{ MSB_METHOD_DAEMON_STATUS, m_daemon_status, NULL, sizeof(struct no_params), NULL },
	{ MSB_METHOD_DAEMON_ENGINE, m_daemon_engine, NULL, sizeof(struct no_params), NULL },
	{ MSB_METHOD_SANDBOX_ACQUIRE, m_sandbox_acquire, m_sandbox_acquire_spec,
	  sizeof(struct m_sandbox_acquire_params), NULL },
	{ MSB_METHOD_SANDBOX_DISPOSE, m_sandbox_dispose, m_sandbox_dispose_spec,
	  sizeof(struct m_sandbox_dispose_params), NULL },
	{ MSB_METHOD_SANDBOX_DISPOSE_SCOPE, m_sandbox_dispose_scope, m_sandbox_dispose_scope_spec,
	  sizeof(struct m_sandbox_scope_params), NULL },
	{ MSB_METHOD_SANDBOX_LIST, m_sandbox_list, m_sandbox_list_spec,
	  sizeof(struct m_sandbox_scope_params), NULL },
	{ MSB_METHOD_SANDBOX_REAP, m_sandbox_reap, m_sandbox_reap_spec,
	  sizeof(struct m_sandbox_reap_params), NULL },
	{ MSB_METHOD_SANDBOX_EXEC, m_exec, m_exec_spec, sizeof(struct m_exec_params), replybound_exec },
	{ MSB_METHOD_EXEC_STDIN, m_exec_stdin, m_exec_stdin_spec, sizeof(struct m_exec_stdin_params), NULL },
	{ MSB_METHOD_CALL_CANCEL, m_call_cancel, m_call_cancel_spec, sizeof(struct m_call_cancel_params), NULL },
	{ MSB_METHOD_FILES_WRITE, m_files_write, m_files_write_spec, sizeof(struct m_files_params), NULL },
	{ MSB_METHOD_FILES_READ, m_files_read, m_files_read_spec, sizeof(struct m_files_params),
	  replybound_files_read },
	{ MSB_METHOD_FILES_STAT, m_files_stat, m_files_stat_spec, sizeof(struct m_files_params), NULL },
	{ MSB_METHOD_FILES_LIST, m_files_list, m_files_list_spec, sizeof(struct m_files_params),
	  replybound_files_list },
	{ MSB_METHOD_FILES_REMOVE, m_files_remove, m_files_remove_spec, sizeof(struct m_files_params), NULL },
	{ MSB_METHOD_FILES_RECLAIM, m_files_reclaim, m_files_reclaim_spec, sizeof(struct m_files_params), NULL },
	{ MSB_METHOD_EVENTS_SUBSCRIBE, m_events_subscribe, m_events_subscribe_spec,
	  sizeof(struct m_events_params), NULL },
};
const size_t msbd_n_methods = sizeof(msbd_methods) / sizeof(msbd_methods[0]);

size_t msbd_reply_bound(struct msbd *d, const struct jsonrpc_request *req)
{
	if (req->method && strcmp(req->method, MSB_METHOD_SANDBOX_LIST) == 0)
		return m_sandbox_list_reply_bound(d) + replybound_id(req->id);
	return rpc_reply_bound(msbd_methods, msbd_n_methods, req, d->dom.config);
}

static size_t reply_bound_cb(void *ctx, const struct jsonrpc_request *req)
{
	return msbd_reply_bound(ctx, req);
}

void msbd_server_env(struct msbd *d, struct server_env *ret_env)
{
	*ret_env = (struct server_env){
		.base = d->dom.base,
		.config = &d->dom.config,
		.methods = msbd_methods,
		.n_methods = msbd_n_methods,
		.ctx = d,
		.lookup_admin = is_admin_cb,
		.reply_bound = reply_bound_cb,
	};
}
