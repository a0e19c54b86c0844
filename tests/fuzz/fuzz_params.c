/* fuzz_params.c — libFuzzer target for what the daemon decodes from a
 * request before it needs an engine. The input is one request frame (no
 * LF). It is parsed (proto/jsonrpc.c) and dispatched (daemon/rpc.c, which
 * validates params centrally) against the daemon's own method table,
 * msbd_methods, with every handler replaced by a stub, so each method's
 * real param table (m_sandbox.c, m_files.c, m_exec.c, m_daemon.c) and its
 * checks run. The stub then runs the pure decoders its method feeds:
 *   sandbox.acquire  msb_key_decode + msb_spec_decode (proto/sandbox.c)
 *   sandbox.dispose  msb_key_decode
 *   files.*          paths_plan_new for each path (domain/files/paths.c),
 *                    msb_base64_decode for content_b64
 *   sandbox.exec     paths_confine_resolve of the working directory
 * Invariants: every reply (a dispatch refusal included) is one frame the
 * client's parser accepts, with the request's id; a stub only runs with
 * each param stored as given and every required one present; a decoded key
 * or spec is within its limits (a spec's egress_allow valid rules, sorted,
 * without case-insensitive duplicates, only with egress allowlist) and
 * round-trips (encoded and decoded again: the same), a refused one names
 * its field and says why; a plan's paths are absolute, normalised, within
 * the limits, its walk the target's ancestors outermost first, its target
 * under the working directory (but an absolute reclaim). A broken invariant
 * aborts. Built by tests/fuzz/run.sh with clang, and by meson with
 * replay_main.c as the unit test 'fuzz_params'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include "daemon.h"
#include "egress_rule.h"
#include "frame.h"
#include "fuzz.h"
#include "jsonrpc.h"
#include "m_exec.h"
#include "m_files.h"
#include "m_sandbox.h"
#include "paths.h"
#include "rpc.h"
#include "sandbox.h"

/* Methods in the stub table, at most. */
#define FUZZ_METHODS_MAX 64

struct dispatch {
	const struct jsonrpc_request *req;
	bool handled;                  /* the stub ran */
	bool replied;
};

/* ---- key and spec ---------------------------------------------------------- */

/* FUZZ_DEBUG set: say what was refused (to check a seed does what it should). */
static void debug(const char *what, const char *field, const char *message)
{
	if (getenv("FUZZ_DEBUG"))
		fprintf(stderr, "fuzz_params: %s: %s: %s\n", what, field ? field : "-", message ? message : "-");
}

static void check_refusal(const char *what, const char *field, char *message)
{
	require(field != NULL, "a refusal without a field");
	require(message && *message, "a refusal without a message");
	debug(what, field, message);
	free(message);
}

static bool strlen_ok(const char *s, size_t max, bool nonempty)
{
	size_t n = s ? strlen(s) : 0;

	return s && n <= max && (!nonempty || n > 0);
}

static void fuzz_key(const json_t *j)
{
	struct msb_key key, again;
	const char *field = NULL;
	char *message = NULL;
	json_t *enc;

	if (msb_key_decode(j, &key, &field, &message) < 0) {
		check_refusal("key", field, message);
		return;
	}
	require(strlen_ok(key.scope, MSB_KEY_FIELD_MAX_BYTES, true) &&
		strlen_ok(key.thread_id, MSB_KEY_FIELD_MAX_BYTES, true) &&
		strlen_ok(key.agent_dir, MSB_KEY_FIELD_MAX_BYTES, true) &&
		strlen_ok(key.call_id, MSB_KEY_FIELD_MAX_BYTES, false), "a key field's limits");
	enc = msb_key_encode(&key);
	require(enc != NULL, "a key does not encode");
	require(msb_key_decode(enc, &again, &field, &message) == 0, "an encoded key is refused");
	require(!strcmp(key.scope, again.scope) && !strcmp(key.thread_id, again.thread_id) &&
		!strcmp(key.agent_dir, again.agent_dir) && !strcmp(key.call_id, again.call_id),
		"a key does not round-trip");
	msb_key_release(&again);
	json_decref(enc);
	msb_key_release(&key);
}

static void check_spec(const struct msb_spec *s)
{
	const char *key;
	json_t *v;

	require(strlen_ok(s->kind, MSB_KEY_FIELD_MAX_BYTES, true), "kind's limits");
	require(!s->image || strlen_ok(s->image, MSB_SPEC_STRING_MAX_BYTES, true), "image's limits");
	require(!s->image_id || strlen_ok(s->image_id, MSB_SPEC_STRING_MAX_BYTES, true),
		"image_id's limits");
	require(s->egress < _MSB_EGRESS_MAX && s->isolation_scope < _MSB_SCOPE_MAX, "an enum's range");
	require(s->min_isolation >= -1 && s->min_isolation < _MSB_ISOLATION_MAX, "min_isolation's range");
	require(s->requires_os_family >= -1 && s->requires_os_family < _MSB_OS_MAX,
		"requires_os_family's range");
	require(!(s->requires & MSB_BIT(MSB_CAP_RECLAIM)), "reclaim required");
	require(s->requires < MSB_BIT(_MSB_CAP_MAX), "an unknown capability");
	require(s->n_egress_allow <= MSB_SPEC_MAX_EGRESS_ALLOW, "egress_allow's limit");
	require(s->n_egress_allow == 0 || s->egress == MSB_EGRESS_ALLOWLIST,
		"hosts allowed without egress allowlist");
	for (size_t i = 0; i < s->n_egress_allow; i++) {
		const char *h = s->egress_allow[i];

		require(strlen_ok(h, MSB_SPEC_STRING_MAX_BYTES, true), "a host's limits");
		require(msb_egress_rule_check(h, NULL) == 0, "an invalid egress rule kept");
		require(!strpbrk(h, ", "), "a host with a comma or a space");
		if (i > 0) {
			require(strcmp(s->egress_allow[i - 1], h) < 0, "egress_allow not sorted");
			for (size_t k = 0; k < i; k++)
				require(strcasecmp(s->egress_allow[k], h) != 0, "egress_allow duplicates");
		}
	}
	require(!s->work_dir || (s->work_dir[0] == '/' && !strchr(s->work_dir, '\\') &&
				 strlen(s->work_dir) <= MSB_SPEC_STRING_MAX_BYTES), "work_dir's rules");
	require(json_is_object(s->labels) && json_object_size(s->labels) <= MSB_SPEC_MAX_LABELS,
		"labels' limits");
	json_object_foreach(s->labels, key, v)
		require(json_is_string(v) && strlen(key) <= MSB_SPEC_STRING_MAX_BYTES &&
			strlen_ok(json_string_value(v), MSB_SPEC_STRING_MAX_BYTES, false), "a label's limits");
}

/* The spec as a client would send it to get s again. */
static json_t *spec_encode(const struct msb_spec *s)
{
	json_t *o = json_object(), *allow = json_array();

	for (size_t i = 0; i < s->n_egress_allow; i++)
		json_array_append_new(allow, json_string(s->egress_allow[i]));
	json_object_set_new(o, "kind", json_string(s->kind));
	if (s->image)
		json_object_set_new(o, "image", json_string(s->image));
	if (s->image_id)
		json_object_set_new(o, "image_id", json_string(s->image_id));
	json_object_set_new(o, "egress", json_string(msb_egress_to_string(s->egress)));
	json_object_set_new(o, "egress_allow", allow);
	json_object_set_new(o, "work_dir", s->work_dir ? json_string(s->work_dir) : json_null());
	json_object_set(o, "labels", s->labels);
	json_object_set_new(o, "requires", msb_capability_set_encode(s->requires));
	json_object_set_new(o, "min_isolation", s->min_isolation < 0 ? json_null() :
			    json_string(msb_isolation_to_string(s->min_isolation)));
	json_object_set_new(o, "isolation_scope", json_string(msb_scope_to_string(s->isolation_scope)));
	json_object_set_new(o, "requires_os_family", s->requires_os_family < 0 ? json_null() :
			    json_string(msb_os_family_to_string(s->requires_os_family)));
	json_object_set_new(o, "files_in", msb_transfer_limits_encode(&s->files_in));
	json_object_set_new(o, "files_out", msb_transfer_limits_encode(&s->files_out));
	return o;
}

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static bool limits_eq(const struct msb_transfer_limits *a, const struct msb_transfer_limits *b)
{
	return a->max_bytes_per_file == b->max_bytes_per_file &&
	       a->max_total_bytes == b->max_total_bytes && a->max_files == b->max_files;
}

static void fuzz_spec(const json_t *j)
{
	struct msb_spec spec, again;
	const char *field = NULL;
	char *message = NULL;
	json_t *enc;

	if (msb_spec_decode(j, &spec, &field, &message) < 0) {
		check_refusal("spec", field, message);
		return;
	}
	check_spec(&spec);
	enc = spec_encode(&spec);
	if (msb_spec_decode(enc, &again, &field, &message) < 0) {
		fprintf(stderr, "refused again: %s: %s\n", field, message);
		require(false, "an encoded spec is refused");
	}
	require(str_eq(spec.kind, again.kind) && str_eq(spec.image, again.image) &&
		str_eq(spec.image_id, again.image_id) && str_eq(spec.work_dir, again.work_dir) &&
		spec.egress == again.egress && spec.n_egress_allow == again.n_egress_allow &&
		json_equal(spec.labels, again.labels) && spec.requires == again.requires &&
		spec.min_isolation == again.min_isolation &&
		spec.isolation_scope == again.isolation_scope &&
		spec.requires_os_family == again.requires_os_family &&
		limits_eq(&spec.files_in, &again.files_in) && limits_eq(&spec.files_out, &again.files_out),
		"a spec does not round-trip");
	for (size_t i = 0; i < spec.n_egress_allow; i++)
		require(!strcmp(spec.egress_allow[i], again.egress_allow[i]), "egress_allow does not round-trip");
	require(!strcmp(msb_spec_work_dir(&spec), spec.work_dir ? spec.work_dir : MSB_DEFAULT_WORK_DIR),
		"the work dir is not the spec's");
	msb_spec_release(&again);
	json_decref(enc);
	msb_spec_release(&spec);
}

/* ---- paths ----------------------------------------------------------------- */

/* Absolute, one slash between components, no "." or ".." component, no
 * trailing slash (but "/"), within the limits. */
static void check_normal(const char *p)
{
	size_t len = strlen(p), components = 0;

	require(p[0] == '/' && len <= PATHS_MAX_BYTES, "a path not absolute or too long");
	if (len == 1)
		return;
	require(p[len - 1] != '/', "a path with a trailing slash");
	for (const char *c = p + 1;;) {
		const char *end = strchrnul(c, '/');
		size_t n = (size_t)(end - c);

		require(n > 0 && n <= PATHS_NAME_MAX_BYTES, "an empty or too long component");
		require(!(n == 1 && c[0] == '.') && !(n == 2 && c[0] == '.' && c[1] == '.'),
			"a dot component");
		components++;
		if (!*end)
			break;
		c = end + 1;
	}
	require(components <= PATHS_MAX_COMPONENTS, "too many components");
}

static void check_resolved(const struct paths_resolved *r, bool reclaim)
{
	size_t wl;

	check_normal(r->path);
	check_normal(r->wd);
	require(r->rel != NULL || reclaim, "no relative path outside a reclaim");
	if (!r->rel)
		return;
	require(r->rel >= r->path && r->rel <= r->path + strlen(r->path), "rel points outside path");
	require(r->is_wd == (r->rel[0] == '\0'), "is_wd is not rel == \"\"");
	wl = strlen(r->wd);
	if (r->is_wd) {
		require(!strcmp(r->path, r->wd), "the wd itself, yet another path");
		return;
	}
	require(!strncmp(r->path, r->wd, wl), "a path outside the working directory");
	require(wl == 1 ? r->rel == r->path + 1 : (r->path[wl] == '/' && r->rel == r->path + wl + 1),
		"rel is not the path below the wd");
}

/* absolute: the path was given absolute (a reclaim then takes it as is,
 * the working directory itself included: behaviour-docker §2.8). */
static void check_plan(enum paths_op op, const struct paths_plan *p, bool absolute)
{
	const char *t = p->target.path;
	/* LIST walks its target; READ and STAT walk the working directory itself. */
	bool self = op == PATHS_OP_LIST ||
		    (p->target.is_wd && (op == PATHS_OP_READ || op == PATHS_OP_STAT));

	require(p->op == op, "a plan for another op");
	check_resolved(&p->target, op == PATHS_OP_RECLAIM);
	require(!((op == PATHS_OP_WRITE || op == PATHS_OP_DELETE ||
		   (op == PATHS_OP_RECLAIM && !absolute)) && p->target.is_wd),
		"the working directory itself accepted");
	require(p->walk && p->walk[p->n_walk] == NULL, "a walk not NULL-terminated");
	require(p->walk_owned_from <= p->n_walk, "walk_owned_from past the walk");
	require(op != PATHS_OP_RECLAIM || p->n_walk == 0, "a reclaim with a walk");
	for (size_t i = 0; i < p->n_walk; i++) {
		size_t n = strlen(p->walk[i]);

		check_normal(p->walk[i]);
		require(!strncmp(t, p->walk[i], n) && (t[n] == '/' || (t[n] == '\0' && self)),
			"a walk step that is not an ancestor");
		require(i == 0 || n > strlen(p->walk[i - 1]), "a walk not outermost first");
	}
}

static void check_path_refusal(int r, enum paths_reason reason)
{
	require(r < 0 && reason < _PATHS_R_MAX && paths_reason_to_string(reason), "a path refusal's reason");
}

static void fuzz_plan(enum paths_op op, const json_t *path, const json_t *wd)
{
	struct paths_plan *plan = NULL;
	enum paths_reason reason = _PATHS_R_MAX;
	int r;

	if (!json_is_string(path) || (wd && !json_is_string(wd)))
		return;
	r = paths_plan_new(op, json_string_value(path), json_string_length(path),
			   wd ? json_string_value(wd) : NULL, wd ? json_string_length(wd) : 0,
			   PATHS_DEFAULT_BASE, &plan, &reason);
	if (r < 0) {
		check_path_refusal(r, reason);
		require(plan == NULL, "a plan on a refusal");
		debug("path", json_string_value(path), paths_reason_to_string(reason));
		return;
	}
	check_plan(op, plan, json_string_value(path)[0] == '/');
	paths_plan_free(plan);
}

static void fuzz_wd(const json_t *wd)
{
	struct paths_resolved res = { 0 };
	enum paths_reason reason = _PATHS_R_MAX;
	int r;

	r = paths_confine_resolve(".", 1, wd ? json_string_value(wd) : NULL,
				  wd ? json_string_length(wd) : 0, PATHS_DEFAULT_BASE, &res, &reason);
	if (r < 0) {
		check_path_refusal(r, reason);
		return;
	}
	check_resolved(&res, false);
	require(res.is_wd, "\".\" is not the working directory");
	{
		/* m_exec refuses a pseudo filesystem: the root named is the path's own. */
		const char *root = paths_pseudo_fs_root(res.path);

		require(!root || (strncmp(res.path, root, strlen(root)) == 0 &&
				  (res.path[strlen(root)] == '\0' || res.path[strlen(root)] == '/')),
			"a pseudo filesystem root that is not the path's");
	}
	paths_resolved_release(&res);
}

static void fuzz_content(const json_t *b64)
{
	uint8_t *raw = NULL;
	size_t n = 0;

	if (!json_is_string(b64))
		return;
	if (msb_base64_decode(json_string_value(b64), json_string_length(b64), &raw, &n) == 0) {
		require(n <= msb_base64_decoded_max(json_string_length(b64)), "decoded past its bound");
		free(raw);
	}
}

/* ---- the stub handler --------------------------------------------------------- */

static const struct rpc_method *real_method(const char *name)
{
	for (size_t i = 0; i < msbd_n_methods; i++)
		if (!strcmp(msbd_methods[i].name, name))
			return &msbd_methods[i];
	return NULL;
}

/* Each param stored as given, each required one present. */
static void check_params(const struct rpc_method *m, const json_t *given, const void *params)
{
	for (const struct rpc_param *p = m->params; p && p->name; p++) {
		const json_t *v = json_object_get(given, p->name);
		const char *slot = (const char *)params + p->offset;

		require(v || !p->required, "a required param missing");
		switch (p->type) {
		case RPC_PARAM_STRING:
			require(*(const char *const *)slot == (v ? json_string_value(v) : NULL), "a string param");
			break;
		case RPC_PARAM_INT:
			require(*(const int64_t *)slot == (v ? json_integer_value(v) : 0), "an int param");
			require(!v || json_is_integer(v), "an int param of another type");
			break;
		case RPC_PARAM_BOOL:
			require(*(const bool *)slot == json_is_true(v), "a bool param");
			break;
		case RPC_PARAM_OBJECT:
			require(!v || json_is_object(v), "an object param of another type");
			require(*(json_t *const *)slot == v, "a JSON param");
			break;
		case RPC_PARAM_ARRAY:
			require(!v || json_is_array(v), "an array param of another type");
			require(*(json_t *const *)slot == v, "a JSON param");
			break;
		case RPC_PARAM_JSON:
			require(*(json_t *const *)slot == v, "a JSON param");
			break;
		default:
			require(false, "an unknown param type");
		}
	}
}

static void files_paths(const char *method, const struct m_files_params *p)
{
	static const struct {
		const char *method;
		enum paths_op op;
	} ops[] = {
		{ MSB_METHOD_FILES_WRITE, PATHS_OP_WRITE },
		{ MSB_METHOD_FILES_READ, PATHS_OP_READ },
		{ MSB_METHOD_FILES_STAT, PATHS_OP_STAT },
		{ MSB_METHOD_FILES_REMOVE, PATHS_OP_DELETE },
		{ MSB_METHOD_FILES_RECLAIM, PATHS_OP_RECLAIM },
	};
	const json_t *list = p->files ? p->files : p->paths;
	enum paths_op op;
	size_t i, k;
	json_t *e;

	for (k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
		if (!strcmp(method, ops[k].method))
			break;
	require(k < sizeof(ops) / sizeof(ops[0]), "a files method without an op");
	op = ops[k].op;
	fuzz_plan(op, op == PATHS_OP_RECLAIM ? p->directory : p->path, p->working_directory);
	fuzz_content(p->content_b64);
	/* files (write) and paths (read): the other methods take neither. */
	json_array_foreach(list, i, e) {
		const json_t *path = json_is_object(e) ? json_object_get(e, "path") : e;

		fuzz_plan(op, path, p->working_directory);
		if (json_is_object(e))
			fuzz_content(json_object_get(e, "content_b64"));
	}
}

static struct rpc_result *stub(struct rpc_call *call, const void *params)
{
	struct dispatch *ds = rpc_call_ctx(call);
	const char *name = rpc_call_method(call);
	const struct rpc_method *m = real_method(name);

	require(m != NULL, "a stub for no method");
	require(!strcmp(name, ds->req->method), "the stub of another method");
	check_params(m, ds->req->params, params);
	ds->handled = true;
	if (!strcmp(name, MSB_METHOD_SANDBOX_ACQUIRE)) {
		const struct m_sandbox_acquire_params *p = params;

		fuzz_key(p->key);
		fuzz_spec(p->spec);
	} else if (!strcmp(name, MSB_METHOD_SANDBOX_DISPOSE)) {
		fuzz_key(((const struct m_sandbox_dispose_params *)params)->key);
	} else if (!strncmp(name, "files.", 6)) {
		files_paths(name, params);
	} else if (!strcmp(name, MSB_METHOD_SANDBOX_EXEC)) {
		fuzz_wd(((const struct m_exec_params *)params)->working_directory);
	}
	return rpc_reply(call, json_true());
}

static void done(struct rpc_call *call, json_t *reply, void *arg)
{
	struct dispatch *ds = arg;
	struct jsonrpc_response resp;
	size_t len = 0;
	char *s;

	require(!ds->replied, "two replies to one call");
	ds->replied = true;
	if (!ds->req->id) {
		require(reply == NULL, "a reply to a notification");
		return;
	}
	require(reply != NULL, "no reply to a call");
	s = frame_encode(reply, &len);
	require(s && len > 0 && s[len - 1] == '\n' && !memchr(s, '\n', len - 1), "a reply is not one frame");
	require(jsonrpc_response_parse(s, len - 1, &resp) == 0, "the client refuses a reply");
	require(json_equal(resp.id, ds->req->id), "a reply with another id");
	if (ds->handled) {
		require(json_is_true(resp.result), "the stub's result lost");
	} else {
		require(resp.error && (resp.error_code == MSB_ERR_METHOD_NOT_FOUND ||
				       resp.error_code == MSB_ERR_INVALID_PARAMS), "an unexpected refusal");
		debug("dispatch", ds->req->method, resp.error_message);
	}
	jsonrpc_response_release(&resp);
	free(s);
	json_decref(reply);
}

static const struct rpc_call_ops ops = { .done = done };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rpc_method stubs[FUZZ_METHODS_MAX];
	static size_t n_stubs;
	const struct rpc_peer peer = { .pid = 1, .uid = 1000, .gid = 1000 };
	struct jsonrpc_request req;
	struct dispatch ds = { .req = &req };
	json_t *err = NULL;

	fuzz_json_seed();
	if (!n_stubs) {
		require(msbd_n_methods <= FUZZ_METHODS_MAX, "more methods than stubs");
		for (size_t i = 0; i < msbd_n_methods; i++) {
			stubs[i] = msbd_methods[i];
			stubs[i].handler = stub;
		}
		n_stubs = msbd_n_methods;
	}
	if (jsonrpc_request_parse((const char *)data, size, &req, &err) < 0) {
		json_decref(err);
		return 0;
	}
	require(rpc_dispatch(stubs, n_stubs, &req, &peer, &ds, &ops, &ds) == NULL, "a stub left a call pending");
	require(ds.replied, "a call finished without its done callback");
	jsonrpc_request_release(&req);
	return 0;
}
