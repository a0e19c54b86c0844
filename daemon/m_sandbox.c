/* m_sandbox.c — sandbox.acquire, sandbox.dispose, sandbox.dispose_scope,
 * sandbox.list. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "acquire.h"
#include "backend.h"
#include "cleanup.h"
#include "daemon.h"
#include "dispose.h"
#include "egress.h"
#include "engine.h"
#include "errmap.h"
#include "log.h"
#include "m_sandbox.h"
#include "msb-limits.h"
#include "names.h"
#include "owner.h"
#include "reap.h"
#include "replybound.h"
#include "fileop.h"
#include "registry.h"
#include "registry_sync.h"
#include "sandbox.h"
#include "xmalloc.h"

const struct rpc_param m_sandbox_acquire_spec[] = {
	{ "key", RPC_PARAM_OBJECT, true, offsetof(struct m_sandbox_acquire_params, key), NULL },
	{ "spec", RPC_PARAM_OBJECT, true, offsetof(struct m_sandbox_acquire_params, spec), NULL },
	{ NULL },
};

const struct rpc_param m_sandbox_dispose_spec[] = {
	{ "key", RPC_PARAM_OBJECT, true, offsetof(struct m_sandbox_dispose_params, key), NULL },
	{ "kind", RPC_PARAM_STRING, false, offsetof(struct m_sandbox_dispose_params, kind), NULL },
	{ "sandbox", RPC_PARAM_STRING, false, offsetof(struct m_sandbox_dispose_params, sandbox), NULL },
	{ NULL },
};

const struct rpc_param m_sandbox_dispose_scope_spec[] = {
	{ "scope", RPC_PARAM_STRING, true, offsetof(struct m_sandbox_scope_params, scope), NULL },
	{ "thread_id", RPC_PARAM_STRING, true, offsetof(struct m_sandbox_scope_params, thread_id), NULL },
	{ NULL },
};

const struct rpc_param m_sandbox_list_spec[] = {
	{ "scope", RPC_PARAM_STRING, false, offsetof(struct m_sandbox_scope_params, scope), NULL },
	{ "thread_id", RPC_PARAM_STRING, false, offsetof(struct m_sandbox_scope_params, thread_id), NULL },
	{ NULL },
};

/* A bad key or spec: data.field is "spec.<member>" (or "key.<member>"). */
const struct rpc_param m_sandbox_reap_spec[] = {
	{ "older_than_seconds", RPC_PARAM_INT, true,
	  offsetof(struct m_sandbox_reap_params, older_than_seconds), NULL },
	{ "scope", RPC_PARAM_STRING, false, offsetof(struct m_sandbox_reap_params, scope), NULL },
	{ "dry_run", RPC_PARAM_BOOL, false, offsetof(struct m_sandbox_reap_params, dry_run), NULL },
	{ NULL },
};

static struct rpc_result *fail_params(struct rpc_call *call, const char *param, const char *member,
				      char *msg)
{
	_cleanup_free_ char *field = member && *member ? xasprintf("%s.%s", param, member) : xstrdup(param);
	struct rpc_result *r = rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", field),
					"%s: %s", param, msg ? msg : "invalid");

	free(msg);
	return r;
}

/* behaviour-core §3.2, in the seed's order; the first refusal wins. */
/* Allowlist before its image is ready: accepted while the image is being
 * made (the acquire waits for it). An empty allowlist gets --network none,
 * but is still only taken where allowlist is offered. */
static bool egress_accepts(const struct msbd *d, const struct msb_spec *spec)
{
	return spec->egress == MSB_EGRESS_ALLOWLIST && egress_usable(d->dom.egress);
}

/* An egress mode this daemon does not serve. Allowlist names the key that
 * would serve it (data.config_key) and why it is off now. */
static int refuse_egress(const struct msbd *d, const struct msb_spec *spec, struct msb_error *err)
{
	_cleanup_free_ char *why = spec->egress == MSB_EGRESS_ALLOWLIST ? egress_allowlist_off_reason(&d->dom) : NULL;
	json_t *data = json_pack("{s:o}", "declared", msb_egress_set_encode(backend_egress_modes(&d->dom)));

	if (why) {
		json_object_set_new(data, "config_key", json_string("egress.proxy_binary"));
		msb_error_set(err, MSB_ERR_EGRESS_NOT_ENFORCED, data,
			      "this daemon does not serve egress allowlist: %s", why);
	} else {
		msb_error_set(err, MSB_ERR_EGRESS_NOT_ENFORCED, data,
			      "this backend cannot enforce egress %s (it serves closed, and allowlist where "
			      "egress.proxy_binary is set)", msb_egress_to_string(spec->egress));
	}
	return -EPERM;
}

/* Capabilities the spec requires and this daemon does not declare; files_list
 * names files.plane, the key that serves it where the host allows. */
static int refuse_capabilities(const struct msbd *d, uint32_t missing, struct msb_error *err)
{
	json_t *data = json_pack("{s:o, s:o}", "missing", msb_capability_set_encode(missing),
				 "declared", msb_capability_set_encode(backend_capabilities(&d->dom)));

	if (missing & MSB_BIT(MSB_CAP_FILES_LIST)) {
		json_object_set_new(data, "config_key", json_string("files.plane"));
		msb_error_set(err, MSB_ERR_CAPABILITY_NOT_SUPPORTED, data,
			      "the spec requires capabilities this backend does not declare: files_list needs "
			      "the local file plane, and this daemon serves the archive plane (%s); "
			      "files.plane = auto or local serves it where the daemon runs as root on a local "
			      "engine socket", d->dom.plane_reason ? d->dom.plane_reason : "not available");
		return -EPERM;
	}
	msb_error_set(err, MSB_ERR_CAPABILITY_NOT_SUPPORTED, data,
		      "the spec requires capabilities this backend does not declare");
	return -EPERM;
}

static int match_declarations(const struct msbd *d, const struct msb_spec *spec, struct msb_error *err)
{
	const struct msb_transfer_limits ceiling = {
		MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES
	};
	uint32_t missing = spec->requires & ~backend_capabilities(&d->dom);

	if (spec->min_isolation > MSB_ISOLATION_CONTAINER) {
		msb_error_set(err, MSB_ERR_BACKEND_NOT_PERMITTED, NULL,
			      "the spec asks for isolation %s; this backend is container",
			      msb_isolation_to_string(spec->min_isolation));
		return -EPERM;
	}
	if (missing)
		return refuse_capabilities(d, missing, err);
	if (spec->requires_os_family >= 0 &&
	    !(backend_os_families(&d->dom) & MSB_BIT(spec->requires_os_family))) {
		msb_error_set(err, MSB_ERR_OS_FAMILY_NOT_SUPPORTED,
			      json_pack("{s:o}", "declared", msb_os_family_set_encode(backend_os_families(&d->dom))),
			      "the spec requires OS family %s, which this backend does not serve",
			      msb_os_family_to_string(spec->requires_os_family));
		return -EPERM;
	}
	if (!msb_transfer_limits_within(&spec->files_in, &ceiling) ||
	    !msb_transfer_limits_within(&spec->files_out, &ceiling)) {
		msb_error_set(err, MSB_ERR_TRANSFER_LIMITS_NOT_PERMITTED,
			      json_pack("{s:o}", "ceiling", msb_transfer_limits_encode(&ceiling)),
			      "the spec's transfer limits exceed this backend's");
		return -EPERM;
	}
	if (!(backend_egress_modes(&d->dom) & MSB_BIT(spec->egress)) && !egress_accepts(d, spec))
		return refuse_egress(d, spec, err);
	if (!(backend_scopes() & MSB_BIT(spec->isolation_scope))) {
		msb_error_set(err, MSB_ERR_SCOPE_NOT_ENFORCED, NULL,
			      "this backend does not enforce isolation scope %s",
			      msb_scope_to_string(spec->isolation_scope));
		return -EPERM;
	}
	return 0;
}

/* ---- an acquire's waiter: the pending call ------------------------------ *
 * The domain answers its waiters through these; the call stays pending
 * until done, and a detached one still counts as a waiter (its answer is
 * dropped, and it is never the one told "created"). */

static void acquire_call_done(json_t *result, const struct msb_error *err, void *arg)
{
	struct rpc_call *call = arg;

	if (err)
		rpc_call_fail_error(call, err);
	else
		rpc_call_reply(call, result);
}

static bool acquire_call_detached(void *arg)
{
	return rpc_call_is_detached(arg);
}

static void acquire_call_notify(const char *method, json_t *params, void *arg)
{
	rpc_call_notify(arg, method, params);
}

static const struct acquire_waiter_ops acquire_call_ops = {
	.done = acquire_call_done,
	.detached = acquire_call_detached,
	.notify = acquire_call_notify,
};

static struct acquire_caller acquire_caller_of(const struct rpc_call *call)
{
	const struct rpc_peer *peer = rpc_call_peer(call);

	return (struct acquire_caller){ .uid = peer->uid, .gid = peer->gid, .admin = peer->admin };
}

/* Serves a running, registered, unlocked sandbox without an engine request. */
static struct rpc_result *acquire_warm(struct rpc_call *call, struct msbd *d, const struct acquire_caller *caller,
				       const struct sandbox *sb, const struct msb_key *key,
				       const struct msb_spec *spec, const struct m_sandbox_acquire_params *p)
{
	struct msb_error err = { 0 };
	struct rpc_result *r;

	if (acquire_check(&d->dom, sb->name, key, spec, caller, sb->labels, sb->image, sb->image_id, &err) < 0) {
		r = rpc_fail_error(call, &err);
		msb_error_clear(&err);
		return r;
	}
	log_debug("op", "sandbox %s reused (warm)", sb->name);
	if (acquire_spec_needs_prepare(spec)) {
		/* The work dir must still be there (one HEAD), the guest known. */
		r = rpc_pending(call);
		acquire_start_warm(&d->dom, caller, &acquire_call_ops, call, sb, p->key, p->spec);
		return r;
	}
	{
		struct egress_info info;
		bool proxied = egress_spec_needs_proxy(spec) && egress_proxy_ok(d->dom.egress, sb->name, &info);

		return rpc_reply(call, acquire_result(&d->dom, sb, msb_spec_work_dir(spec), false,
						      proxied ? &info : NULL));
	}
}

static struct rpc_result *acquire_decided(struct rpc_call *call, struct msbd *d,
					  const struct m_sandbox_acquire_params *p,
					  const struct msb_key *key, const struct msb_spec *spec)
{
	const struct acquire_caller caller = acquire_caller_of(call);
	struct msb_error err = { 0 };
	char name[NAMES_CONTAINER_MAX];
	_cleanup_free_ char *egress_id = names_egress_id(spec, egress_configured(&d->dom));
	struct egress_info einfo;
	const struct sandbox *sb;
	struct rpc_result *r;

	if (spec->isolation_scope == MSB_SCOPE_CALL && !key->call_id[0])
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "key"),
				"isolation scope call needs a key with a call_id");
	if (spec->isolation_scope == MSB_SCOPE_CONVERSATION && key->call_id[0])
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "key"),
				"isolation scope conversation refuses a key with a call_id");
	if (match_declarations(d, spec, &err) < 0) {
		r = rpc_fail_error(call, &err);
		msb_error_clear(&err);
		return r;
	}
	if (!msb_spec_image_ref(spec))
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "spec"),
				"the spec has neither image nor image_id");
	if (engine_get_state(d->dom.engine) != ENGINE_REACHABLE)
		return rpc_fail(call, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
	names_container_ns(key, spec->kind, egress_id, acquire_key_space(&d->dom, &caller), name);
	sb = registry_find_name(d->dom.registry, name);
	if (registry_sync_current(&d->dom) && sb && sb->state == SANDBOX_RUNNING &&
	    !acquire_in_flight(d->dom.acquires, name) &&
	    (!egress_spec_needs_proxy(spec) || egress_proxy_ok(d->dom.egress, name, &einfo)))
		return acquire_warm(call, d, &caller, sb, key, spec, p);
	r = rpc_pending(call);
	acquire_start(&d->dom, &caller, &acquire_call_ops, call, name, p->key, p->spec);
	return r;
}

struct rpc_result *m_sandbox_acquire(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_acquire_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	struct msb_key key;
	struct msb_spec spec;
	const char *field = NULL;
	char *msg = NULL;
	struct rpc_result *r;

	if (msb_key_decode(p->key, &key, &field, &msg) < 0)
		return fail_params(call, "key", field, msg);
	if (msb_spec_decode(p->spec, &spec, &field, &msg) < 0) {
		msb_key_release(&key);
		return fail_params(call, "spec", field, msg);
	}
	r = acquire_decided(call, d, p, &key, &spec);
	msb_key_release(&key);
	msb_spec_release(&spec);
	return r;
}

/* ---- sandbox.dispose, sandbox.dispose_scope (behaviour-docker §2.10–2.12) -- */

/* The answer when the engine is away: nothing could be removed. */
static json_t *failure_unreachable(void)
{
	return json_pack("{s:s, s:s}", "code", "unreachable",
			 "detail", "the Docker engine is not reachable; nothing was removed");
}

/* sandbox.dispose: null, or its failures folded into one {code, detail}. */
static void dispose_replied_cb(const struct dispose_result *result, void *arg)
{
	json_t *folded = dispose_fold_failures(result->failures);

	rpc_call_reply(arg, folded ? folded : json_null());
}

/* sandbox.dispose_scope: {disposed, undisposed}. */
static void dispose_scope_replied_cb(const struct dispose_result *result, void *arg)
{
	json_t *folded = dispose_fold_failures(result->failures);

	rpc_call_reply(arg, json_pack("{s:I, s:o}", "disposed", (json_int_t)result->disposed,
				      "undisposed", folded ? folded : json_null()));
}

/* A full id (64 hex, either case) is disposed of as before names: asked
 * of the engine, whatever the registry knows. Lower-cased into id. */
static bool dispose_instance_id(const char *given, char id[REGISTRY_ID_LEN + 1])
{
	if (strlen(given) != REGISTRY_ID_LEN || strspn(given, "0123456789abcdefABCDEF") != REGISTRY_ID_LEN)
		return false;
	for (size_t i = 0; i <= REGISTRY_ID_LEN; i++)
		id[i] = (char)tolower((unsigned char)given[i]);
	return true;
}

/* sandbox.dispose of one instance: only if it is this key's (and kind's)
 * and the caller's — the selection a disposal by key makes. */
static struct rpc_result *dispose_instance(struct rpc_call *call, struct msb_key *key,
					   const char *kind, const char *given)
{
	struct msbd *d = rpc_call_ctx(call);
	char id[REGISTRY_ID_LEN + 1];
	_cleanup_free_ char *why = NULL;
	json_t *filters;

	if (!dispose_instance_id(given, id)) {
		struct rpc_result *fail = NULL;
		const struct sandbox *sb = NULL;
		int r = owner_sandbox_resolve(d, call, given, &sb, &fail);

		if (r == -ENOENT) {
			msb_key_release(key);
			return rpc_reply(call, json_null());     /* nothing of the caller's: idempotent */
		}
		if (r < 0) {
			msb_key_release(key);
			return fail;
		}
		snprintf(id, sizeof(id), "%s", sb->id);
	}
	filters = names_label_filter(key->scope, key->thread_id, key->agent_dir, key->call_id, kind,
				     owner_selector(rpc_call_peer(call)));
	msb_key_release(key);
	why = xasprintf("sandbox.dispose of it by uid %u", (unsigned)rpc_call_peer(call)->uid);
	if (dispose_instance_start(&d->dom, id, filters, why, dispose_replied_cb, call) < 0)
		return rpc_reply(call, failure_unreachable());
	return rpc_pending(call);
}

struct rpc_result *m_sandbox_dispose(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_dispose_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	_cleanup_free_ char *why = NULL;
	struct msb_key key;
	const char *field = NULL;
	char *msg = NULL;
	json_t *filters;

	if (msb_key_decode(p->key, &key, &field, &msg) < 0)
		return fail_params(call, "key", field, msg);
	if (p->sandbox)
		return dispose_instance(call, &key, p->kind, p->sandbox);   /* takes the key */
	filters = names_label_filter(key.scope, key.thread_id, key.agent_dir, key.call_id, p->kind,
				     owner_selector(rpc_call_peer(call)));
	msb_key_release(&key);
	why = xasprintf("sandbox.dispose of its key by uid %u", (unsigned)rpc_call_peer(call)->uid);
	if (dispose_start(&d->dom, filters, why, dispose_replied_cb, call) < 0)
		return rpc_reply(call, failure_unreachable());
	return rpc_pending(call);
}

struct rpc_result *m_sandbox_dispose_scope(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_scope_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	_cleanup_free_ char *why = NULL;

	if (!*p->scope || !*p->thread_id)
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
				json_pack("{s:s}", "field", *p->scope ? "thread_id" : "scope"),
				"scope and thread_id must not be empty");
	why = xasprintf("sandbox.dispose_scope by uid %u", (unsigned)rpc_call_peer(call)->uid);
	/* Selected by labels read back from the engine, never from memory. */
	if (dispose_start(&d->dom, names_label_filter(p->scope, p->thread_id, NULL, NULL, NULL,
						      owner_selector(rpc_call_peer(call))),
			  why, dispose_scope_replied_cb, call) < 0)
		return rpc_reply(call, json_pack("{s:i, s:o}", "disposed", 0, "undisposed", failure_unreachable()));
	return rpc_pending(call);
}

/* ---- sandbox.list ----------------------------------------------------- */

static json_t *list_entry(const struct sandbox *sb)
{
	const char *raw = sandbox_label(sb, LABEL_KEY_JSON);
	json_t *k = raw ? json_loads(raw, 0, NULL) : NULL;
	json_t *key, *e;
	char created[32] = "";
	struct tm tm;

	if (json_is_array(k) && json_array_size(k) == 5)
		key = json_pack("{s:O, s:O, s:O, s:O}", "scope", json_array_get(k, 0), "thread_id",
				json_array_get(k, 1), "agent_dir", json_array_get(k, 2), "call_id",
				json_array_get(k, 3));
	else   /* made by the seed: the labels, which may be digests */
		key = json_pack("{s:s?, s:s?, s:s?, s:s}", "scope", sandbox_label(sb, LABEL_SCOPE),
				"thread_id", sandbox_label(sb, LABEL_THREAD), "agent_dir",
				sandbox_label(sb, LABEL_AGENT), "call_id",
				sandbox_label(sb, LABEL_CALL) ? sandbox_label(sb, LABEL_CALL) : "");
	if (sb->created && gmtime_r(&sb->created, &tm))
		strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	e = json_pack("{s:s, s:s, s:o, s:s?, s:s, s:s?, s:s?, s:s?, s:o}", "sandbox", sb->id, "name", sb->name,
		      "key", key ? key : json_null(),
		      "kind", json_is_array(k) ? json_string_value(json_array_get(k, 4)) : sandbox_label(sb, LABEL_KIND),
		      "state", sandbox_state_to_string(sb->state), "created", created[0] ? created : NULL,
		      "image", sandbox_label(sb, LABEL_IMAGE) ? sandbox_label(sb, LABEL_IMAGE) : sb->image,
		      "owner", sandbox_label(sb, LABEL_OWNER),
		      "labels", acquire_user_labels(sb->labels));
	json_decref(k);
	return e;
}

size_t m_sandbox_list_reply_bound(const struct msbd *d)
{
	size_t bytes = REPLYBOUND_ENVELOPE_BYTES, most = replybound_max(d->dom.config);
	const struct sandbox *sb;

	/* every sandbox: the filters only narrow the listing */
	for (sb = registry_first(d->dom.registry); sb && bytes < most; sb = registry_next(sb)) {
		json_t *e = list_entry(sb);

		bytes += json_dumpb(e, NULL, 0, JSON_COMPACT) + 1;
		json_decref(e);
	}
	return bytes < REPLYBOUND_DEFAULT_BYTES ? REPLYBOUND_DEFAULT_BYTES : bytes > most ? most : bytes;
}

struct rpc_result *m_sandbox_list(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_scope_params *p = params;
	const struct msbd *d = rpc_call_ctx(call);
	json_t *filters = names_label_filter(p->scope, p->thread_id, NULL, NULL, NULL,
					     owner_selector(rpc_call_peer(call)));
	json_t *out = json_array();
	const struct sandbox *sb;

	if (engine_get_state(d->dom.engine) != ENGINE_REACHABLE || !registry_sync_current(&d->dom)) {
		json_decref(filters);
		json_decref(out);
		return rpc_fail(call, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
	}
	for (sb = registry_first(d->dom.registry); sb; sb = registry_next(sb))
		if (names_labels_match(filters, sb->labels))
			json_array_append_new(out, list_entry(sb));
	json_decref(filters);
	return rpc_reply(call, out);
}

/* ---- sandbox.reap (administrators) ------------------------------------ */

static void m_reap_done_cb(const struct reap_result *result, void *arg)
{
	rpc_call_reply(arg, reap_result_to_json(result));
}

struct rpc_result *m_sandbox_reap(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_reap_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	struct timespec now;
	int r;

	if (!rpc_call_peer(call)->admin)
		return rpc_fail(call, MSB_ERR_PERMISSION_DENIED, NULL, "reap is for administrators");
	if (p->older_than_seconds <= 0)
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "older_than_seconds"),
				"older_than_seconds must be a positive number of seconds");
	clock_gettime(CLOCK_REALTIME, &now);
	r = reap_start_dry(&d->dom, p->older_than_seconds, p->scope, (double)now.tv_sec + now.tv_nsec / 1e9,
			   p->dry_run, m_reap_done_cb, call);
	if (r < 0) {
		/* The params were checked above: any failure here is the engine
		 * request's (-ENOTCONN: unreachable), a code and a stable reason. */
		struct msb_error err = { 0 };
		struct rpc_result *res;

		errmap_engine(r, NULL, "listing the containers to reap", &err);
		res = rpc_fail_error(call, &err);
		msb_error_clear(&err);
		return res;
	}
	return rpc_pending(call);
}
