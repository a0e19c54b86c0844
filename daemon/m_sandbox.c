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
#include "egress.h"
#include "docker.h"
#include "engine.h"
#include "errmap.h"
#include "log.h"
#include "m_files.h"
#include "m_sandbox.h"
#include "msb-limits.h"
#include "names.h"
#include "reap.h"
#include "replybound.h"
#include "fileop.h"
#include "registry.h"
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

/* Serves a running, registered, unlocked sandbox without an engine request. */
static struct rpc_result *acquire_warm(struct rpc_call *call, struct msbd *d,
				       const struct sandbox *sb, const struct msb_key *key,
				       const struct msb_spec *spec, const struct m_sandbox_acquire_params *p)
{
	struct msb_error err = { 0 };
	struct rpc_result *r;

	if (acquire_check(&d->dom, sb->name, key, spec, rpc_call_peer(call), sb->labels, sb->image, sb->image_id,
			  &err) < 0) {
		r = rpc_fail_error(call, &err);
		msb_error_clear(&err);
		return r;
	}
	log_debug("op", "sandbox %s reused (warm)", sb->name);
	if (acquire_spec_needs_prepare(spec))
		/* The work dir must still be there (one HEAD), the guest known. */
		return acquire_start_warm(&d->dom, call, sb, p->key, p->spec, rpc_call_peer(call)->uid);
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
	names_container_ns(key, spec->kind, egress_id, acquire_key_space(&d->dom, rpc_call_peer(call)), name);
	sb = registry_find_name(d->dom.registry, name);
	if (d->dom.registry_synced && docker_events_is_connected(d->dom.events) && sb && sb->state == SANDBOX_RUNNING &&
	    !acquire_in_flight(d->dom.acquires, name) &&
	    (!egress_spec_needs_proxy(spec) || egress_proxy_ok(d->dom.egress, name, &einfo)))
		return acquire_warm(call, d, sb, key, spec, p);
	return acquire_start(&d->dom, call, name, p->key, p->spec, rpc_call_peer(call)->uid);
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

/* ---- disposal: the sweep (behaviour-docker §2.10–2.12) ---------------- */

enum sweep_mode {
	SWEEP_KEY,        /* sandbox.dispose by key: null or {code, detail} */
	SWEEP_SCOPE,      /* sandbox.dispose_scope: {disposed, undisposed} */
};

/* What a sweep removes, in this order (behaviour-docker §2.12): proxies
 * (each drained first: its decisions are published before it goes), then
 * workloads, then a leftover proxy of an allowlisted workload by name, then
 * the networks. Only workloads count, and only their failures are reported. */
enum sweep_kind {
	SWEEP_PROXY,
	SWEEP_WORKLOAD,
	SWEEP_PROXY_BY_NAME,
	SWEEP_NETWORK,
};

struct sweep_item {
	enum sweep_kind kind;
	char *ref;                /* id, or name for *_BY_NAME and networks */
	char *name;               /* a workload's name, for the log (NULL: not known) */
	bool drained;
};

struct sweep_op {
	struct msbd *d;
	struct rpc_call *call;
	enum sweep_mode mode;
	json_t *filters;          /* label filter for the listing */
	struct sweep_item *items; /* to remove, in order */
	size_t n_items, next;
	size_t disposed;          /* workloads removed (not proxies, not already absent) */
	json_t *failures;         /* [{code, detail}] */
	char *why;                /* for the log: the method and the caller */
};

/* Precedence, most actionable first (behaviour-core §1.3). */
static const char *const disposal_codes[] = { "unreachable", "timeout", "refused", "unlisted", "unknown" };

/* fold_disposal_failures: none → NULL; one → itself; several → the first
 * code of the precedence present, details joined with "; ". */
static json_t *fold_failures(const json_t *failures)
{
	size_t n = json_array_size(failures), i;
	json_t *f;
	char *detail = NULL;
	const char *code = "unknown";

	if (n == 0)
		return NULL;
	if (n == 1)
		return json_incref(json_array_get(failures, 0));
	for (size_t c = ELEMENTSOF(disposal_codes); c-- > 0;)
		json_array_foreach(failures, i, f)
			if (strcmp(json_string_value(json_object_get(f, "code")), disposal_codes[c]) == 0)
				code = disposal_codes[c];
	json_array_foreach(failures, i, f) {
		char *grown = xasprintf("%s%s%s", detail ? detail : "", detail ? "; " : "",
					json_string_value(json_object_get(f, "detail")));

		free(detail);
		detail = grown;
	}
	f = json_pack("{s:s, s:s}", "code", code, "detail", detail);
	free(detail);
	return f;
}

static void sweep_add_failure(struct sweep_op *op, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void sweep_add_failure(struct sweep_op *op, const char *code, const char *fmt, ...)
{
	va_list ap;
	char *detail;

	va_start(ap, fmt);
	detail = xvasprintf(fmt, ap);
	va_end(ap);
	log_warnx("disposal: %s: %s", code, detail);
	json_array_append_new(op->failures, json_pack("{s:s, s:s}", "code", code, "detail", detail));
	free(detail);
}

static void sweep_free(struct sweep_op *op)
{
	for (size_t i = 0; i < op->n_items; i++) {
		free(op->items[i].ref);
		free(op->items[i].name);
	}
	free(op->items);
	json_decref(op->filters);
	json_decref(op->failures);
	free(op->why);
	free(op);
}

static void sweep_finish(struct sweep_op *op)
{
	json_t *folded = fold_failures(op->failures);

	if (op->mode == SWEEP_KEY)
		rpc_call_reply(op->call, folded ? folded : json_null());
	else
		rpc_call_reply(op->call, json_pack("{s:I, s:o}", "disposed", (json_int_t)op->disposed,
						   "undisposed", folded ? folded : json_null()));
	sweep_free(op);
}

static void sweep_add(struct sweep_op *op, enum sweep_kind kind, const char *ref)
{
	for (size_t i = 0; i < op->n_items; i++)
		if (op->items[i].kind == kind && strcmp(op->items[i].ref, ref) == 0)
			return;
	op->items = xrealloc(op->items, (op->n_items + 1) * sizeof(*op->items));
	op->items[op->n_items++] = (struct sweep_item){ .kind = kind, .ref = xstrdup(ref) };
}

/* Names the workload ref for the log (the registry may have let it go by
 * the time its removal is answered: its destroy event comes first). */
static void sweep_name(struct sweep_op *op, const char *ref, const char *name)
{
	for (size_t i = 0; i < op->n_items; i++)
		if (op->items[i].kind == SWEEP_WORKLOAD && strcmp(op->items[i].ref, ref) == 0 && !op->items[i].name &&
		    name)
			op->items[i].name = xstrdup(name[0] == '/' ? name + 1 : name);
}

/* Stable: proxies, workloads, proxies by name, networks. */
static int sweep_item_cmp(const void *a, const void *b)
{
	const struct sweep_item *x = a, *y = b;

	return (int)x->kind - (int)y->kind;
}

static void sweep_order(struct sweep_op *op)
{
	/* insertion sort keeps the listing's order within a kind */
	for (size_t i = 1; i < op->n_items; i++)
		for (size_t j = i; j > 0 && sweep_item_cmp(&op->items[j - 1], &op->items[j]) > 0; j--) {
			struct sweep_item t = op->items[j];

			op->items[j] = op->items[j - 1];
			op->items[j - 1] = t;
		}
}

/* An allowlisted workload (or its proxy): its proxy by name and its network
 * go too, whatever the daemon's configuration now is. */
static void sweep_add_topology(struct sweep_op *op, const char *workload)
{
	_cleanup_free_ char *proxy = xasprintf("%s%s", workload, EGRESS_PROXY_SUFFIX);
	_cleanup_free_ char *net = xasprintf("%s%s", workload, EGRESS_NET_SUFFIX);

	sweep_add(op, SWEEP_PROXY_BY_NAME, proxy);
	sweep_add(op, SWEEP_NETWORK, net);
}

static void sweep_remove_next(struct sweep_op *op);

static void sweep_removed_cb(const struct docker_reply *r, void *arg)
{
	struct sweep_op *op = arg;
	struct sweep_item *it = &op->items[op->next];
	const char *ref = it->ref;
	struct sandbox *sb = it->kind == SWEEP_WORKLOAD ? registry_find_id(op->d->dom.registry, ref) : NULL;
	bool gone = r->error == 0 && (r->status == 204 || r->status == 200 || r->status == 404);

	if (r->error == -ECANCELED) {       /* the daemon is stopping: start nothing new */
		sweep_add_failure(op, "unknown", "the daemon stopped before %.12s was removed", ref);
		op->next = op->n_items;
		sweep_finish(op);
		return;
	}
	if (it->kind != SWEEP_WORKLOAD) {
		/* proxies and networks: only logged (behaviour-docker §2.12) */
		if (!gone)
			log_warnx("disposal: could not remove %s: %s", ref,
				  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
		else if (it->kind == SWEEP_PROXY)
			egress_proxy_removed(op->d->dom.egress, ref);
		op->next++;
		sweep_remove_next(op);
		return;
	}
	if (r->error == 0 && r->status == 204) {
		op->disposed++;
		log_info("sandbox %s disposed: %s", it->name ? it->name : sb ? sb->name : ref,
			 op->why ? op->why : "disposal");
		if (sb)
			registry_remove(op->d->dom.registry, sb);
		fileop_journal_forget(&op->d->dom, ref);
	} else if (r->error == 0 && r->status == 404) {
		if (sb)
			registry_remove(op->d->dom.registry, sb);  /* silently absent: not counted */
		fileop_journal_forget(&op->d->dom, ref);
	} else if (r->error == -ETIMEDOUT) {
		sweep_add_failure(op, "timeout", "removing %.12s timed out; it may remain", ref);
	} else if (r->error) {
		sweep_add_failure(op, "unreachable", "could not reach the engine to remove %.12s", ref);
	} else {
		/* The engine's text is for the log; the detail goes on the wire. */
		log_warnx("disposal: the engine refused to remove %.12s (HTTP %ld): %s", ref, r->status,
			  r->message ? r->message : "");
		sweep_add_failure(op, "refused", "the engine refused to remove %.12s (HTTP %ld)", ref, r->status);
	}
	op->next++;
	sweep_remove_next(op);
}

static void sweep_drained_cb(int error, void *arg)
{
	struct sweep_op *op = arg;

	if (error == -ECANCELED) {
		sweep_add_failure(op, "unknown", "the daemon stopped before %.12s was removed",
				  op->items[op->next].ref);
		op->next = op->n_items;
		sweep_finish(op);
		return;
	}
	/* An unreadable log is logged by the drain; the removal goes on. */
	op->items[op->next].drained = true;
	sweep_remove_next(op);
}

/* One at a time, force, never stop (a proxy is stopped by its drain). */
static void sweep_remove_next(struct sweep_op *op)
{
	while (op->next < op->n_items) {
		struct sweep_item *it = &op->items[op->next];
		int r;

		if (it->kind == SWEEP_PROXY && !it->drained &&
		    egress_drain(op->d->dom.egress, it->ref, sweep_drained_cb, op) == 0)
			return;
		if (it->kind == SWEEP_NETWORK)
			r = docker_network_remove(op->d->dom.engine, it->ref, sweep_removed_cb, op, NULL);
		else
			r = docker_container_remove(op->d->dom.engine, it->ref, true, sweep_removed_cb, op, NULL);
		if (r >= 0)
			return;
		if (it->kind == SWEEP_WORKLOAD)
			sweep_add_failure(op, "unreachable", "could not reach the engine to remove %.12s", it->ref);
		op->next++;
	}
	sweep_finish(op);
}

/* Do labels match the sweep's label filter? (the registry fallback when the
 * listing fails or misses names, and acquires in flight) */
static bool labels_match_filter(const json_t *filters, const json_t *labels)
{
	const char *cond;
	json_t *v;

	json_object_foreach(json_object_get(filters, "label"), cond, v) {
		_cleanup_free_ char *k = xstrdup(cond);
		char *eq = strchr(k, '=');
		const char *have;

		if (!eq)
			return false;
		*eq = '\0';
		have = json_string_value(json_object_get(labels, k));
		if (!have || strcmp(have, eq + 1))
			return false;
	}
	return true;
}

static bool sweep_matches(const struct sweep_op *op, const struct sandbox *sb)
{
	return labels_match_filter(op->filters, sb->labels);
}

/* An acquire in flight may create a sandbox this sweep selects just after
 * it: say so, as a disposal another operation has not reported on. */
static void sweep_note_acquire_cb(const char *name, const json_t *labels, void *arg)
{
	struct sweep_op *op = arg;

	if (labels_match_filter(op->filters, labels))
		sweep_add_failure(op, "unknown", "an acquire of %s is in flight; it may create that "
				  "sandbox after this disposal", name);
}

static void sweep_listed_cb(const struct docker_reply *r, void *arg)
{
	struct sweep_op *op = arg;
	size_t i;
	json_t *item;
	struct sandbox *sb;

	if (r->error == -ECANCELED) {
		sweep_add_failure(op, "unknown", "the daemon stopped before the sweep ran");
		sweep_finish(op);
		return;
	}
	if (r->error || r->status != 200 || !json_is_array(r->body)) {
		sweep_add_failure(op, "unlisted", "could not list containers, so the sweep may be partial");
	} else {
		json_array_foreach(r->body, i, item) {
			const json_t *labels = json_object_get(item, "Labels");
			const char *role = json_string_value(json_object_get(labels, LABEL_ROLE));
			const char *egress = json_string_value(json_object_get(labels, LABEL_EGRESS));
			const char *id = json_string_value(json_object_get(item, "Id"));
			const char *name = json_string_value(json_array_get(json_object_get(item, "Names"), 0));
			bool proxy = role && strcmp(role, "proxy") == 0;

			if (!id)
				continue;
			sweep_add(op, proxy ? SWEEP_PROXY : SWEEP_WORKLOAD, id);
			sweep_name(op, id, name);
			if (name && name[0] == '/')
				name++;
			if (name && (proxy || (egress && strcmp(egress, "allowlist") == 0))) {
				char workload[NAMES_CONTAINER_MAX];
				size_t len = strlen(name);

				if (proxy && len > strlen(EGRESS_PROXY_SUFFIX))
					len -= strlen(EGRESS_PROXY_SUFFIX);
				snprintf(workload, sizeof(workload), "%.*s", (int)len, name);
				if (names_is_ours(workload, NULL))
					sweep_add_topology(op, workload);
			}
		}
	}
	for (sb = registry_first(op->d->dom.registry); sb; sb = registry_next(sb))
		if (sweep_matches(op, sb)) {
			const char *egress = sandbox_label(sb, LABEL_EGRESS);

			sweep_add(op, SWEEP_WORKLOAD, sb->id);
			sweep_name(op, sb->id, sb->name);
			if (egress && strcmp(egress, "allowlist") == 0)
				sweep_add_topology(op, sb->name);
		}
	acquire_foreach(op->d->dom.acquires, sweep_note_acquire_cb, op);
	sweep_order(op);
	sweep_remove_next(op);
}

/* Starts a sweep over the containers matching filters (stolen). */
static struct rpc_result *sweep_start(struct rpc_call *call, enum sweep_mode mode, json_t *filters)
{
	struct sweep_op *op = xcalloc(1, sizeof(*op));

	op->d = rpc_call_ctx(call);
	op->call = call;
	op->mode = mode;
	op->filters = filters;
	op->failures = json_array();
	op->why = xasprintf("%s by uid %u", mode == SWEEP_KEY ? "sandbox.dispose of its key" : "sandbox.dispose_scope",
			    (unsigned)rpc_call_peer(call)->uid);
	if (docker_containers_list(op->d->dom.engine, filters, sweep_listed_cb, op, NULL) < 0) {
		/* The engine is away: the fallback still names what we know, but
		 * nothing can be removed; answer now. */
		struct rpc_result *res;
		json_t *failure = json_pack("{s:s, s:s}", "code", "unreachable",
					    "detail", "the Docker engine is not reachable; nothing was removed");

		res = rpc_reply(call, mode == SWEEP_KEY ? failure :
				json_pack("{s:i, s:o}", "disposed", 0, "undisposed", failure));
		sweep_free(op);
		return res;
	}
	return rpc_pending(call);
}

/* Non-admins only ever select their own sandboxes. */
static uid_t owner_filter(const struct rpc_call *call)
{
	return rpc_call_peer(call)->admin ? (uid_t)-1 : rpc_call_peer(call)->uid;
}

/* ---- sandbox.dispose by instance id ----------------------------------- */

struct instance_op {
	struct msbd *d;
	struct rpc_call *call;
	struct msb_key key;
	char *kind;      /* NULL: any */
	char *id;
	char *name;      /* from its inspect, for the log */
	bool removing;
};

static void instance_free(struct instance_op *op)
{
	msb_key_release(&op->key);
	free(op->kind);
	free(op->id);
	free(op->name);
	free(op);
}

static void instance_reply_failure(struct instance_op *op, const char *code, const char *detail)
{
	log_warnx("disposal of %.12s: %s: %s", op->id, code, detail);
	rpc_call_reply(op->call, json_pack("{s:s, s:s}", "code", code, "detail", detail));
	instance_free(op);
}

/* The instance must be this key's (and kind's) and the caller's; anything
 * else is treated as absent, so no one learns of another's sandbox. */
static bool instance_is_callers(struct instance_op *op, const json_t *inspect)
{
	const json_t *labels = json_object_get(json_object_get(inspect, "Config"), "Labels");
	const char *name = json_string_value(json_object_get(inspect, "Name"));
	const char *id = json_string_value(json_object_get(inspect, "Id"));
	json_t *filters;
	bool mine;

	if (!name || !names_is_ours(name[0] == '/' ? name + 1 : name, NULL) || !id || strcmp(id, op->id))
		return false;
	/* The same selection a disposal by key makes. */
	filters = names_label_filter(op->key.scope, op->key.thread_id, op->key.agent_dir, op->key.call_id,
				     op->kind, owner_filter(op->call));
	mine = labels_match_filter(filters, labels);
	json_decref(filters);
	return mine;
}

static bool instance_is_allowlisted(const json_t *inspect)
{
	const json_t *labels = json_object_get(json_object_get(inspect, "Config"), "Labels");
	const char *egress = json_string_value(json_object_get(labels, LABEL_EGRESS));

	return egress && strcmp(egress, "allowlist") == 0 && json_string_value(json_object_get(inspect, "Name"));
}

/* Returns the failure code and detail for a failed step, or NULL. */
static const char *instance_failure(const struct instance_op *op, const struct docker_reply *r,
				    const char **ret_detail)
{
	if (r->error == -ECANCELED)
		return *ret_detail = "the daemon stopped before the disposal ran", "unknown";
	if (r->error == -ETIMEDOUT)
		return *ret_detail = "the engine did not answer in time", "timeout";
	if (r->error)
		return *ret_detail = "could not reach the engine", "unreachable";
	if (!op->removing && r->status != 200 && r->status != 404)
		return *ret_detail = "could not inspect the sandbox", "unlisted";
	if (op->removing && r->status != 204 && r->status != 404) {
		log_warnx("disposal of %.12s: the engine answered HTTP %ld: %s", op->id, r->status,
			  r->message ? r->message : "");
		return *ret_detail = "the engine refused to remove it", "refused";
	}
	return NULL;
}

static void instance_cb(const struct docker_reply *r, void *arg)
{
	struct instance_op *op = arg;
	const char *detail = NULL, *code = instance_failure(op, r, &detail);
	struct sandbox *sb;

	if (code) {
		instance_reply_failure(op, code, detail);
		return;
	}
	if (!op->removing && (r->status == 404 || !instance_is_callers(op, r->body))) {
		rpc_call_reply(op->call, json_null());      /* absent, or not the caller's */
		instance_free(op);
		return;
	}
	if (!op->removing && instance_is_allowlisted(r->body)) {
		/* its proxy first (drained), then it, then its network */
		const char *name = json_string_value(json_object_get(r->body, "Name"));
		struct sweep_op *sw = xcalloc(1, sizeof(*sw));
		_cleanup_free_ char *proxy = NULL, *net = NULL;

		name = name[0] == '/' ? name + 1 : name;
		proxy = xasprintf("%s%s", name, EGRESS_PROXY_SUFFIX);
		net = xasprintf("%s%s", name, EGRESS_NET_SUFFIX);
		sw->d = op->d;
		sw->call = op->call;
		sw->mode = SWEEP_KEY;
		sw->failures = json_array();
		sw->why = xasprintf("sandbox.dispose of it by uid %u", (unsigned)rpc_call_peer(op->call)->uid);
		sweep_add(sw, SWEEP_PROXY, proxy);
		sweep_add(sw, SWEEP_WORKLOAD, op->id);
		sweep_name(sw, op->id, name);
		sweep_add(sw, SWEEP_NETWORK, net);
		instance_free(op);
		sweep_remove_next(sw);
		return;
	}
	if (!op->removing) {
		const char *name = json_string_value(json_object_get(r->body, "Name"));

		op->name = name ? xstrdup(name[0] == '/' ? name + 1 : name) : NULL;
		op->removing = true;
		if (docker_container_remove(op->d->dom.engine, op->id, true, instance_cb, op, NULL) < 0)
			instance_reply_failure(op, "unreachable", "could not reach the engine");
		return;
	}
	sb = registry_find_id(op->d->dom.registry, op->id);
	if (r->status == 204)
		log_info("sandbox %s disposed: sandbox.dispose of it by uid %u", op->name ? op->name : op->id,
			 (unsigned)rpc_call_peer(op->call)->uid);
	if (sb)
		registry_remove(op->d->dom.registry, sb);
	fileop_journal_forget(&op->d->dom, op->id);
	rpc_call_reply(op->call, json_null());
	instance_free(op);
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

static struct rpc_result *dispose_instance(struct rpc_call *call, struct msb_key *key,
					   const char *kind, const char *given)
{
	struct instance_op *op;
	char id[REGISTRY_ID_LEN + 1];

	if (!dispose_instance_id(given, id)) {
		struct rpc_result *fail = NULL;
		const struct sandbox *sb = NULL;
		int r = m_files_sandbox_resolve(rpc_call_ctx(call), call, given, &sb, &fail);

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
	op = xcalloc(1, sizeof(*op));
	op->d = rpc_call_ctx(call);
	op->call = call;
	op->key = *key;
	op->kind = kind ? xstrdup(kind) : NULL;
	op->id = xstrdup(id);
	if (docker_container_inspect(op->d->dom.engine, id, instance_cb, op, NULL) < 0) {
		struct rpc_result *res = rpc_reply(call, json_pack("{s:s, s:s}", "code", "unreachable",
			"detail", "the Docker engine is not reachable; nothing was removed"));

		instance_free(op);
		return res;
	}
	return rpc_pending(call);
}

struct rpc_result *m_sandbox_dispose(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_dispose_params *p = params;
	struct msb_key key;
	const char *field = NULL;
	char *msg = NULL;
	json_t *filters;

	if (msb_key_decode(p->key, &key, &field, &msg) < 0)
		return fail_params(call, "key", field, msg);
	if (p->sandbox)
		return dispose_instance(call, &key, p->kind, p->sandbox);   /* takes the key */
	filters = names_label_filter(key.scope, key.thread_id, key.agent_dir, key.call_id, p->kind,
				     owner_filter(call));
	msb_key_release(&key);
	return sweep_start(call, SWEEP_KEY, filters);
}

struct rpc_result *m_sandbox_dispose_scope(struct rpc_call *call, const void *params)
{
	const struct m_sandbox_scope_params *p = params;

	if (!*p->scope || !*p->thread_id)
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
				json_pack("{s:s}", "field", *p->scope ? "thread_id" : "scope"),
				"scope and thread_id must not be empty");
	/* Selected by labels read back from the engine, never from memory. */
	return sweep_start(call, SWEEP_SCOPE,
			   names_label_filter(p->scope, p->thread_id, NULL, NULL, NULL, owner_filter(call)));
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
	json_t *filters = names_label_filter(p->scope, p->thread_id, NULL, NULL, NULL, owner_filter(call));
	struct sweep_op match = { .filters = filters };
	json_t *out = json_array();
	const struct sandbox *sb;

	if (engine_get_state(d->dom.engine) != ENGINE_REACHABLE || !d->dom.registry_synced ||
	    !docker_events_is_connected(d->dom.events)) {
		json_decref(filters);
		json_decref(out);
		return rpc_fail(call, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
	}
	for (sb = registry_first(d->dom.registry); sb; sb = registry_next(sb))
		if (sweep_matches(&match, sb))
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
