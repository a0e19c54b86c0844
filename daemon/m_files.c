/* m_files.c — files.write, files.read, files.stat, files.list,
 * files.remove, files.reclaim through fileop.h: on the local plane every
 * one of them is served in the daemon with the guest's credentials; on the
 * archive plane write/read/stat go under the freeze, list is refused, and
 * remove/reclaim run rm in the guest, as the guest (execrun.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "base64.h"
#include "cleanup.h"
#include "daemon.h"
#include "errmap.h"
#include "execrun.h"
#include "fileop.h"
#include "guest.h"
#include "log.h"
#include "m_files.h"
#include "names.h"
#include "paths.h"
#include "registry.h"
#include "xmalloc.h"

static int check_count(const json_t *v, char **reterr_message)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0)
		return 0;
	*reterr_message = xstrdup("must be an integer >= 0");
	return -EINVAL;
}

#define P(name, type, req, member, check) \
	{ name, type, req, offsetof(struct m_files_params, member), check }
#define P_SANDBOX P("sandbox", RPC_PARAM_STRING, true, sandbox, NULL)
#define P_WD P("working_directory", RPC_PARAM_JSON, false, working_directory, rpc_check_string)

const struct rpc_param m_files_write_spec[] = {
	P_SANDBOX, P_WD,
	P("path", RPC_PARAM_JSON, false, path, rpc_check_string),
	P("content_b64", RPC_PARAM_JSON, false, content_b64, rpc_check_string),
	P("content_text", RPC_PARAM_JSON, false, content_text, rpc_check_string),
	P("files", RPC_PARAM_ARRAY, false, files, NULL),
	P("mode", RPC_PARAM_JSON, false, mode, NULL),
	{ NULL },
};

const struct rpc_param m_files_read_spec[] = {
	P_SANDBOX, P_WD,
	P("path", RPC_PARAM_JSON, false, path, rpc_check_string),
	P("paths", RPC_PARAM_ARRAY, false, paths, NULL),
	P("max_bytes", RPC_PARAM_JSON, false, max_bytes, check_count),
	{ NULL },
};

const struct rpc_param m_files_stat_spec[] = {
	P_SANDBOX, P_WD,
	P("path", RPC_PARAM_JSON, true, path, rpc_check_string),
	{ NULL },
};

const struct rpc_param m_files_list_spec[] = {
	P_SANDBOX, P_WD,
	P("path", RPC_PARAM_JSON, true, path, rpc_check_string),
	{ NULL },
};

const struct rpc_param m_files_remove_spec[] = {
	P_SANDBOX, P_WD,
	P("path", RPC_PARAM_JSON, true, path, rpc_check_string),
	P("recursive", RPC_PARAM_BOOL, false, recursive, NULL),
	{ NULL },
};

const struct rpc_param m_files_reclaim_spec[] = {
	P_SANDBOX, P_WD,
	P("directory", RPC_PARAM_JSON, true, directory, rpc_check_string),
	P("timeout_seconds", RPC_PARAM_JSON, false, timeout_seconds, check_count),
	{ NULL },
};

/* ---- common -------------------------------------------------------------- */

/* A file call in flight: the call, the sandbox it targets, its op. */
struct files_req {
	struct msbd *d;
	struct rpc_call *call;
	char id[REGISTRY_ID_LEN + 1];
	enum fileop_kind kind;
	struct fileop *op;           /* built, started once the guest is known */
	bool single;                 /* one path, not a list: the reply's shape */
	size_t total;                /* WRITE: content bytes */
	/* remove / reclaim */
	char *target;                /* absolute, normalised */
	char *given;                 /* as the caller wrote it (for errors) */
	bool recursive;
	long timeout_ms;
	/* errors name the path as given and the working directory */
	enum paths_op pop;
	char **givens;               /* per item, as the caller wrote it */
	size_t n_givens;
	char *wd;                    /* absolute, normalised (the first item's) */
};

static void files_req_free(struct files_req *fr)
{
	fileop_free(fr->op);
	free(fr->target);
	free(fr->given);
	for (size_t i = 0; i < fr->n_givens; i++)
		free(fr->givens[i]);
	free(fr->givens);
	free(fr->wd);
	free(fr);
}

/* fileop_add, keeping the path as the caller gave it for errors. */
static void files_req_add(struct files_req *fr, enum paths_op pop, struct paths_plan *plan, const json_t *given,
			  uint8_t *data, size_t len)
{
	fr->pop = pop;
	fr->givens = xrealloc(fr->givens, (fr->n_givens + 1) * sizeof(*fr->givens));
	fr->givens[fr->n_givens++] = xstrdup(json_string_value(given));
	if (!fr->wd && plan->target.wd)
		fr->wd = xstrdup(plan->target.wd);
	fileop_add(fr->op, plan, data, len);
}

static struct rpc_result *fail_param(struct rpc_call *call, const char *field, const char *what)
{
	return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", field), "%s", what);
}

/* ---- errors that name the path and the fix ------------------------------- */

/* The paths refusal whose message e carries (code and message both the
 * table's), or -1: the daemon's own table, never a client's text. */
static int files_reason_of(const struct msb_error *e)
{
	for (int r = 0; r < _PATHS_R_MAX; r++) {
		const char *m = paths_reason_to_string((enum paths_reason)r);

		if (e->message && m && strcmp(e->message, m) == 0)
			return r;
	}
	return -1;
}

/* The working directory a call's paths resolve against (absolute,
 * normalised; owned), or NULL when the working directory is refused. */
static char *files_wd_resolved(const json_t *wd, const struct sandbox *sb)
{
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	char *s;

	if (paths_confine_resolve(".", 1, wd ? json_string_value(wd) : NULL, wd ? json_string_length(wd) : 0,
				  m_files_sandbox_base(sb), &r, &why) < 0)
		return NULL;
	s = xstrdup(r.wd);
	paths_resolved_release(&r);
	return s;
}

/* What a path outside wd names (absolute, normalised; owned), or NULL. */
static char *files_outside_target(const char *given, const char *wd)
{
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	_cleanup_free_ char *abs = NULL;
	char *s;

	if (!given || !wd)
		return NULL;
	if (given[0] == '/')
		abs = xstrdup(given);
	else if (asprintf(&abs, "%s/%s", wd, given) < 0)
		return NULL;
	if (paths_confine_resolve(abs, SIZE_MAX, "/", 1, "/", &r, &why) < 0)
		return NULL;
	s = xstrdup(r.path);
	paths_resolved_release(&r);
	return s;
}

/* Client text in a message (a path, a working directory, what they name):
 * cut at MSB_ECHO_MAX_BYTES on a character, "..." marking a cut, as a
 * method or param name is (data.path keeps the path whole). Owned. */
static char *files_echo(const char *s)
{
	int n = msb_echo_len(s);

	return s[n] ? xasprintf("%.*s...", n, s) : xstrdup(s);
}

/* The fix a refusal's message ends with ("" when there is none; owned). */
static char *files_hint(int reason, enum paths_op op, const char *given, const char *wd)
{
	_cleanup_free_ char *target = NULL, *full = NULL;
	char *s = NULL;

	switch (reason) {
	case PATHS_R_OUTSIDE:
		full = files_outside_target(given, wd);
		if (!full)
			break;
		target = files_echo(full);
		if (op == PATHS_OP_RECLAIM) {
			if (asprintf(&s, "; it names %s: give that absolute path to reclaim it", target) < 0)
				s = NULL;
		} else if (given[0] == '/') {
			if (asprintf(&s, "; to reach it, pass working_directory \"/\" (CLI: -w /)") < 0)
				s = NULL;
		} else if (asprintf(&s, "; it names %s: to reach it, pass working_directory \"/\" (CLI: -w /) "
				    "and the path %s", target, target) < 0) {
			s = NULL;
		}
		break;
	case PATHS_R_WD_OUTSIDE_BASE:
		s = xstrdup("; give an absolute working directory to leave the storage base");
		break;
	case PATHS_R_WORKING_DIRECTORY:
		s = xstrdup("; name a path inside it");
		break;
	case PATHS_R_SYMLINK_ANCESTOR:
	case PATHS_R_SYMLINK_LEAF:
		s = xstrdup("; a symbolic link is never followed, even to a place inside the working directory");
		break;
	case PATHS_R_IS_DIRECTORY:
		if (op == PATHS_OP_WRITE)
			s = xstrdup("; a directory cannot be replaced by a file: remove it first, or write to a "
				    "path inside it");
		break;
	default:
		break;
	}
	return s ? s : xstrdup("");
}

/* Makes e name the path as the caller gave it and the working directory
 * it was resolved against: the message becomes "<what>: <given> (resolved
 * in <wd>)<; the fix>" ("at <path>" too when the refusal is about a path
 * other than the item's own, rel), data.working_directory is set. An error
 * that names no path (no data.path, save a lexical refusal) is left as is. */
static void files_error_name_path(struct msb_error *e, enum paths_op op, const char *given, const char *rel,
				  const char *wd, int reason)
{
	const char *at = e->data ? json_string_value(json_object_get(e->data, "path")) : NULL;
	bool other = at && rel && strcmp(at, rel) != 0;
	_cleanup_free_ char *hint = NULL, *given_echo = NULL, *at_echo = NULL, *wd_echo = NULL;
	char *msg = NULL;

	if (!given || (!at && e->code != MSB_ERR_CONFINEMENT))
		return;
	if (reason < 0)
		reason = files_reason_of(e);
	hint = files_hint(reason, op, given, wd);
	if (!e->data)
		e->data = json_object();
	if (!at)
		json_object_set_new(e->data, "path", json_string(given));
	/* A resolved one is at most PATHS_MAX_BYTES; a refused one, the
	 * caller's own, may be as long as a frame: cut as the message's. */
	if (wd && strlen(wd) <= PATHS_MAX_BYTES)
		json_object_set_new(e->data, "working_directory", json_string(wd));
	else if (wd)
		json_object_set_new(e->data, "working_directory", json_string(wd_echo = files_echo(wd)));
	given_echo = files_echo(given);
	at_echo = other ? files_echo(at) : NULL;
	if (wd && !wd_echo)
		wd_echo = files_echo(wd);
	if (asprintf(&msg, "%s: %s (%s%s%sresolved in %s)%s", e->message ? e->message : "the path is refused",
		     given_echo, other ? "at " : "", other ? at_echo : "", other ? ", " : "", wd ? wd_echo : "?",
		     hint) < 0)
		return;
	free(e->message);
	e->message = msg;
}

/* A lexical refusal (before any plan): names the path and the working
 * directory as the caller gave them resolved. */
static struct rpc_result *fail_reason_named(struct rpc_call *call, enum paths_reason reason, enum paths_op op,
					    const json_t *path, const json_t *wd, const struct sandbox *sb)
{
	struct msb_error e = { 0 };
	struct rpc_result *r;
	_cleanup_free_ char *wd_abs = files_wd_resolved(wd, sb);
	const char *given = json_string_value(path);
	/* A path longer than any path is may be as long as a frame: data.path
	 * holds it cut, as the message does. */
	_cleanup_free_ char *shown = given && strlen(given) > PATHS_MAX_BYTES ? files_echo(given) : NULL;

	fileop_error_from_reason(reason, shown ? shown : given, &e);
	files_error_name_path(&e, op, given, NULL, wd_abs ? wd_abs : wd ? json_string_value(wd) : NULL, (int)reason);
	r = rpc_fail_error(call, &e);
	msb_error_clear(&e);
	return r;
}

/* May the caller reach sb? Its owner, root and sandbox.admin_group only. */
static bool files_may_reach(const struct sandbox *sb, void *arg)
{
	struct rpc_call *call = arg;
	const struct rpc_peer *peer = rpc_call_peer(call);

	return peer->admin || (sb->has_owner && sb->owner == peer->uid);
}

/* What the client gave, for a message: cut at MSB_ECHO_MAX_BYTES (at a
 * character), quoted and escaped as a JSON string. malloc'd. */
static char *given_quoted(const char *given)
{
	json_t *s = json_stringn(given, (size_t)msb_echo_len(given));
	char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;

	json_decref(s);
	return q ? q : xstrdup("\"?\"");
}

static struct rpc_result *fail_ambiguous(struct rpc_call *call, const char *given,
					 struct sandbox *const *cands, size_t n, size_t matches)
{
	_cleanup_free_ char *q = given_quoted(given);
	json_t *list = json_array();
	char *names = xstrdup("");

	for (size_t i = 0; i < n; i++) {
		char *grown = xasprintf("%s%s%s", names, i ? ", " : "", cands[i]->name);

		free(names);
		names = grown;
		json_array_append_new(list, json_pack("{s:s, s:s}", "sandbox", cands[i]->id, "name", cands[i]->name));
	}
	{
		struct rpc_result *r = rpc_fail(call, MSB_ERR_INVALID_PARAMS,
			json_pack("{s:s, s:o, s:I}", "field", "sandbox", "candidates", list, "matches", (json_int_t)matches),
			"sandbox %s is ambiguous: it begins the ids of %zu sandboxes (%s%s); give more digits or the name",
			q, matches, names, matches > n ? ", ..." : "");

		free(names);
		return r;
	}
}

int m_files_sandbox_resolve(struct msbd *d, struct rpc_call *call, const char *given,
			    const struct sandbox **ret_sb, struct rpc_result **reterr_fail)
{
	struct sandbox *cands[REGISTRY_CANDIDATES_MAX], *sb = NULL;
	size_t matches = 0;
	int r;

	if (!d->dom.registry_synced) {
		*reterr_fail = rpc_fail(call, MSB_ERR_ENGINE_UNAVAILABLE, NULL,
					"the daemon has not read the engine's sandboxes yet");
		return -EAGAIN;
	}
	r = registry_resolve(d->dom.registry, given, files_may_reach, call, &sb, cands, REGISTRY_CANDIDATES_MAX,
			     &matches);
	if (r == 0) {
		*ret_sb = sb;
		return 0;
	}
	if (r == -ENOTUNIQ) {
		*reterr_fail = fail_ambiguous(call, given, cands,
					      matches < REGISTRY_CANDIDATES_MAX ? matches : REGISTRY_CANDIDATES_MAX, matches);
	} else if (r == -EINVAL) {
		_cleanup_free_ char *q = given_quoted(given);

		*reterr_fail = rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "sandbox"),
					"sandbox %s is too short: name a sandbox by its name, its full id, or at "
					"least %d hex digits of its id (maf-sandbox ls shows them)", q, REGISTRY_PREFIX_MIN);
	}
	return r;
}

const struct sandbox *m_files_sandbox_begin(struct msbd *d, struct rpc_call *call, const char *given,
					    struct rpc_result **ret_fail)
{
	const struct sandbox *sb = NULL;
	int r;

	*ret_fail = NULL;
	r = m_files_sandbox_resolve(d, call, given, &sb, ret_fail);
	if (r == -ENOENT) {
		_cleanup_free_ char *q = given_quoted(given);

		*ret_fail = rpc_fail(call, MSB_ERR_SANDBOX_NOT_FOUND,
				     json_pack("{s:s%}", "sandbox", given, (size_t)msb_echo_len(given)),
				     "no sandbox %s that you may reach (absent, gone, or not yours); list them with "
				     "maf-sandbox ls (sandbox.list)", q);
	}
	return r == 0 ? sb : NULL;
}

const char *m_files_sandbox_base(const struct sandbox *sb)
{
	const char *base = sandbox_label(sb, LABEL_WORK_DIR);

	return base && base[0] == '/' ? base : PATHS_DEFAULT_BASE;
}

/* Builds a plan for a path param (a JSON string, length kept for NUL). */
static int files_plan(enum paths_op op, const json_t *path, const json_t *wd, const struct sandbox *sb,
		      struct paths_plan **ret, enum paths_reason *reterr_reason)
{
	return paths_plan_new(op, json_string_value(path), json_string_length(path),
			      wd ? json_string_value(wd) : NULL, wd ? json_string_length(wd) : 0,
			      m_files_sandbox_base(sb), ret, reterr_reason);
}

/* Replies err, naming the path it is about as the caller gave it and the
 * working directory (op: the call's, for its items; NULL when gone). */
static void files_reply_error(struct files_req *fr, struct fileop *op, const struct msb_error *err)
{
	struct msb_error e = { 0 };
	const char *at;

	msb_error_copy(&e, err);
	at = e.data ? json_string_value(json_object_get(e.data, "path")) : NULL;
	for (size_t i = 0; op && i < fr->n_givens && i < fileop_count(op); i++) {
		const struct paths_plan *pl = fileop_item(op, i)->plan;
		const char *rel = pl->target.rel ? (*pl->target.rel ? pl->target.rel : ".") : NULL;

		/* The item the error names; a one-item call's error is its item's. */
		if ((at && rel && strcmp(at, rel) == 0) || fr->n_givens == 1) {
			files_error_name_path(&e, fr->pop, fr->givens[i], rel, pl->target.wd, -1);
			break;
		}
	}
	if (!op && fr->given)
		files_error_name_path(&e, fr->pop, fr->given, NULL, fr->wd, -1);
	rpc_call_fail_error(fr->call, &e);
	msb_error_clear(&e);
}

/* ---- write / read / stat: the frozen archive plane ---------------------- */

static void files_rm_start(struct files_req *fr);

static json_t *files_read_result(struct fileop *op, bool single)
{
	json_t *list;

	if (single) {
		struct fileop_item *it = fileop_item(op, 0);

		return json_pack("{s:o, s:I}", "content_b64", msb_base64_json(it->out, it->out_len), "size", (json_int_t)it->out_len);
	}
	list = json_array();
	for (size_t i = 0; i < fileop_count(op); i++) {
		struct fileop_item *it = fileop_item(op, i);

		json_array_append_new(list, json_pack("{s:s, s:o, s:I}", "path",
						      it->plan->target.rel[0] ? it->plan->target.rel : ".",
						      "content_b64", msb_base64_json(it->out, it->out_len), "size", (json_int_t)it->out_len));
	}
	return json_pack("{s:o}", "files", list);
}

static void files_op_done(struct fileop *op, const struct msb_error *err, void *arg)
{
	struct files_req *fr = arg;
	struct fileop_item *it;

	fr->op = NULL;      /* the op frees itself */
	if (!err && (fr->kind == FILEOP_REMOVE || fr->kind == FILEOP_RECLAIM) && !fileop_served_locally(op)) {
		/* The archive plane classified the path: rm as the guest does it. */
		files_rm_start(fr);
		return;
	}
	if (err) {
		files_reply_error(fr, op, err);
	} else if (fr->kind == FILEOP_REMOVE || fr->kind == FILEOP_RECLAIM) {
		rpc_call_reply(fr->call, json_null());
	} else if (fr->kind == FILEOP_LIST) {
		it = fileop_item(op, 0);
		rpc_call_reply(fr->call, json_pack("{s:O}", "entries", it->entries));
	} else if (fr->kind == FILEOP_WRITE) {
		rpc_call_reply(fr->call, json_pack("{s:I, s:I}", "files", (json_int_t)fileop_count(op),
						   "bytes", (json_int_t)fr->total));
	} else if (fr->kind == FILEOP_READ) {
		rpc_call_reply(fr->call, files_read_result(op, fr->single));
	} else {
		it = fileop_item(op, 0);
		rpc_call_reply(fr->call, it->found ? paths_entry_encode(it->plan->target.rel, &it->st)
						   : json_null());
	}
	files_req_free(fr);
}

static void files_op_start(struct files_req *fr, uid_t uid, gid_t gid)
{
	struct fileop *op = fr->op;

	fr->op = NULL;
	/* The op was made with placeholder ids; stamp the guest's now. */
	fileop_set_owner(op, uid, gid);
	fr->op = op;
	fileop_start(op, files_op_done, fr);
}

static void files_guest_cb(const struct msb_error *err, const struct guest_identity *id, void *arg)
{
	struct files_req *fr = arg;

	if (err) {
		files_reply_error(fr, NULL, err);
		files_req_free(fr);
		return;
	}
	/* id is the sandbox's fixed identity (guest.c stored it, or kept the
	 * one stored first). */
	if (!id->resolved)
		log_warnx("sandbox %.12s: the guest's user is unresolved; what is written is owned by root",
			  fr->id);
	files_op_start(fr, id->resolved ? id->uid : 0, id->resolved ? id->gid : 0);
}

/* Whether the guest's uid:gid is needed before the op: a write stamps
 * them, and the local plane acts with them for every method. */
static bool files_needs_guest(const struct files_req *fr, const struct sandbox *sb)
{
	if (sb->guest.known)
		return false;
	if (fr->kind == FILEOP_WRITE)
		return true;
	return fileop_plane_local(&fr->d->dom, sb);
}

/* Runs fr's op: first learns who the guest is, when needed (once per instance). */
static struct rpc_result *files_run(struct files_req *fr, const struct sandbox *sb)
{
	struct rpc_result *res = rpc_pending(fr->call);
	int r;

	if (!files_needs_guest(fr, sb)) {
		files_op_start(fr, sb->guest.uid, sb->guest.gid);   /* 0:0 when not known or unresolved */
		return res;
	}
	r = guest_identity_start(&fr->d->dom, fr->id, NULL, files_guest_cb, fr, NULL);
	if (r < 0) {
		rpc_call_fail(fr->call, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
		files_req_free(fr);
	}
	return res;
}

static struct files_req *files_req_new(struct msbd *d, struct rpc_call *call, const struct sandbox *sb,
				       enum fileop_kind kind, long timeout_ms)
{
	struct files_req *fr = xcalloc(1, sizeof(*fr));
	const struct msbd_config *c = d->dom.config;
	struct fileop_params p = {
		.kind = kind, .id = sb->id, .max_bytes = c->files_max_file_bytes,
		.max_total = c->files_max_total_bytes, .timeout_ms = c->files_timeout_ms,
	};

	fr->d = d;
	fr->call = call;
	fr->kind = kind;
	snprintf(fr->id, sizeof(fr->id), "%s", sb->id);
	if (kind == FILEOP_LIST)
		p.max_entries = (size_t)c->files_list_max_entries;
	if (kind == FILEOP_RECLAIM)
		p.timeout_ms = fr->timeout_ms = timeout_ms;
	fr->op = fileop_new(&d->dom, &p);
	return fr;
}

static struct rpc_result *files_cap(struct files_req *fr, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static struct rpc_result *files_cap(struct files_req *fr, json_t *data, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	struct rpc_result *r;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	r = rpc_fail(fr->call, MSB_ERR_TRANSFER_CAP_EXCEEDED, data, "%s", msg ? msg : "over a transfer ceiling");
	files_req_free(fr);
	return r;
}

/* One write entry's content: exactly one of content_b64 / content_text. */
static int files_content(const json_t *b64, const json_t *text, uint8_t **ret, size_t *ret_len,
			 const char **reterr)
{
	if (!!b64 == !!text) {
		*reterr = "exactly one of content_b64 and content_text is needed";
		return -EINVAL;
	}
	if (text) {
		size_t n = json_string_length(text);

		*ret = xmalloc(n ? n : 1);
		memcpy(*ret, json_string_value(text), n);
		*ret_len = n;
		return 0;
	}
	if (msb_base64_decode(json_string_value(b64), json_string_length(b64), ret, ret_len) < 0) {
		*reterr = "content_b64 is not padded standard base64";
		return -EINVAL;
	}
	return 0;
}

/* A write's mode: absent (the default, 0644), or an integer of permission
 * bits 0..0777; setuid, setgid and sticky are refused. */
static int files_mode(const json_t *v, uint32_t *ret, bool *ret_set, const char **reterr)
{
	json_int_t m;

	*ret_set = false;
	if (!v)
		return 0;
	if (!json_is_integer(v)) {
		*reterr = "mode must be an integer (permission bits, e.g. 493 for 0755)";
		return -EINVAL;
	}
	m = json_integer_value(v);
	if (m >= 0 && m <= 07777 && (m & 07000)) {
		*reterr = "mode may hold permission bits only (0 to 0777): setuid, setgid and sticky are refused";
		return -EINVAL;
	}
	if (m < 0 || m > 0777) {
		*reterr = "mode must be from 0 to 0777 (511)";
		return -EINVAL;
	}
	*ret = (uint32_t)m;
	*ret_set = true;
	return 0;
}

/* Two entries of one write may not name one path, nor one lie under another. */
static bool files_paths_conflict(struct fileop *op)
{
	size_t n = fileop_count(op);

	for (size_t i = 0; i < n; i++) {
		const char *a = fileop_item(op, i)->plan->target.path;
		size_t la = strlen(a);

		for (size_t j = 0; j < n; j++) {
			const char *b = fileop_item(op, j)->plan->target.path;

			if (i != j && strncmp(a, b, la) == 0 && (b[la] == '\0' || b[la] == '/'))
				return true;
		}
	}
	return false;
}

struct rpc_result *m_files_write(struct rpc_call *call, const void *params)
{
	const struct m_files_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	const struct msbd_config *c = d->dom.config;
	struct rpc_result *fail;
	const struct sandbox *sb = m_files_sandbox_begin(d, call, p->sandbox, &fail);
	struct files_req *fr;
	size_t n;

	if (!sb)
		return fail;
	if (!!p->files == !!p->path)
		return fail_param(call, "path", "exactly one of path and files is needed");
	if (p->files && (p->content_b64 || p->content_text))
		return fail_param(call, "files", "with files, each entry carries its own content");
	if (p->files && p->mode)
		return fail_param(call, "mode", "with files, each entry carries its own mode");
	n = p->files ? json_array_size(p->files) : 1;
	if (n == 0)
		return fail_param(call, "files", "files is empty");
	fr = files_req_new(d, call, sb, FILEOP_WRITE, 0);
	if (n > (size_t)c->files_max_files)
		return files_cap(fr, json_pack("{s:I, s:I}", "limit", (json_int_t)c->files_max_files, "size", (json_int_t)n),
				 "%zu files in one call; the ceiling is %ld", n, c->files_max_files);
	for (size_t i = 0; i < n; i++) {
		const json_t *e = p->files ? json_array_get(p->files, i) : NULL;
		const json_t *path = e ? json_object_get(e, "path") : p->path;
		const json_t *b64 = e ? json_object_get(e, "content_b64") : p->content_b64;
		const json_t *text = e ? json_object_get(e, "content_text") : p->content_text;
		const json_t *mode = e ? json_object_get(e, "mode") : p->mode;
		uint32_t mode_bits = 0;
		bool mode_set = false;
		struct paths_plan *plan = NULL;
		enum paths_reason reason;
		const char *why = NULL;
		uint8_t *data = NULL;
		size_t len = 0;
		struct rpc_result *r;

		if (e && (!json_is_object(e) || json_object_size(e) != 2 + !!mode || !json_is_string(path) ||
			  (b64 && !json_is_string(b64)) || (text && !json_is_string(text)))) {
			files_req_free(fr);
			return fail_param(call, "files",
					  "each entry is {path, content_b64 | content_text, mode?}, path and content strings");
		}
		if (files_mode(mode, &mode_bits, &mode_set, &why) < 0) {
			files_req_free(fr);
			return fail_param(call, e ? "files" : "mode", why);
		}
		if (files_content(b64, text, &data, &len, &why) < 0) {
			files_req_free(fr);
			return fail_param(call, e ? "files" : "content_b64", why);
		}
		if (len > c->files_max_file_bytes) {
			free(data);
			return files_cap(fr, json_pack("{s:I, s:I}", "limit", (json_int_t)c->files_max_file_bytes,
						       "size", (json_int_t)len),
					 "a file of %llu bytes; the ceiling is %llu", (unsigned long long)len,
					 (unsigned long long)c->files_max_file_bytes);
		}
		fr->total += len;
		if (fr->total > c->files_max_total_bytes) {
			free(data);
			return files_cap(fr, json_pack("{s:I}", "limit", (json_int_t)c->files_max_total_bytes),
					 "over %llu bytes in one call; the ceiling is %llu",
					 (unsigned long long)fr->total, (unsigned long long)c->files_max_total_bytes);
		}
		if (files_plan(PATHS_OP_WRITE, path, p->working_directory, sb, &plan, &reason) < 0) {
			free(data);
			files_req_free(fr);
			r = fail_reason_named(call, reason, PATHS_OP_WRITE, path, p->working_directory, sb);
			return r;
		}
		files_req_add(fr, PATHS_OP_WRITE, plan, path, data, len);
		if (mode_set)
			fileop_set_item_mode(fr->op, i, mode_bits);
	}
	if (files_paths_conflict(fr->op)) {
		files_req_free(fr);
		return fail_param(call, "files", "two entries name the same path, or one lies under another");
	}
	return files_run(fr, sb);
}

struct rpc_result *m_files_read(struct rpc_call *call, const void *params)
{
	const struct m_files_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	const struct msbd_config *c = d->dom.config;
	struct rpc_result *fail;
	const struct sandbox *sb = m_files_sandbox_begin(d, call, p->sandbox, &fail);
	struct files_req *fr;
	uint64_t max;
	size_t n;

	if (!sb)
		return fail;
	if (!!p->paths == !!p->path)
		return fail_param(call, "path", "exactly one of path and paths is needed");
	max = p->max_bytes ? (uint64_t)json_integer_value(p->max_bytes) : c->files_max_file_bytes;
	if (max > c->files_max_file_bytes)
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
				json_pack("{s:s, s:I}", "field", "max_bytes", "limit", (json_int_t)c->files_max_file_bytes),
				"max_bytes is over the per-file ceiling (%zu)", c->files_max_file_bytes);
	n = p->paths ? json_array_size(p->paths) : 1;
	if (n == 0)
		return fail_param(call, "paths", "paths is empty");
	fr = files_req_new(d, call, sb, FILEOP_READ, 0);
	fr->single = !p->paths;
	fileop_set_max_bytes(fr->op, max);
	if (n > (size_t)c->files_max_files)
		return files_cap(fr, json_pack("{s:I, s:I}", "limit", (json_int_t)c->files_max_files, "size", (json_int_t)n),
				 "%zu files in one call; the ceiling is %ld", n, c->files_max_files);
	for (size_t i = 0; i < n; i++) {
		const json_t *path = p->paths ? json_array_get(p->paths, i) : p->path;
		struct paths_plan *plan = NULL;
		enum paths_reason reason;

		if (!json_is_string(path)) {
			files_req_free(fr);
			return fail_param(call, "paths", "paths holds strings only");
		}
		if (files_plan(PATHS_OP_READ, path, p->working_directory, sb, &plan, &reason) < 0) {
			files_req_free(fr);
			return fail_reason_named(call, reason, PATHS_OP_READ, path, p->working_directory, sb);
		}
		files_req_add(fr, PATHS_OP_READ, plan, path, NULL, 0);
	}
	return files_run(fr, sb);
}

/* files.stat and files.list: one path param, one item. A listing on the
 * archive plane is refused before the path is looked at. */

/* A listing refused because the whole daemon serves the archive plane: the
 * key that would serve it (files.plane) and why the plane is archive. */
static void no_listing_name_key(const struct msbd *d, struct msb_error *e)
{
	char *msg;

	if (d->dom.plane_local || !e->data)
		return;
	json_object_set_new(e->data, "config_key", json_string("files.plane"));
	msg = xasprintf("%s: this daemon serves the archive plane (%s); files.plane = auto or local "
			"serves listings where the daemon runs as root on a local engine socket",
			e->message ? e->message : "no listing", d->dom.plane_reason ? d->dom.plane_reason : "not available");
	free(e->message);
	e->message = msg;
}
static struct rpc_result *files_one_path(struct rpc_call *call, const struct m_files_params *p,
					 enum paths_op pop, enum fileop_kind kind)
{
	struct msbd *d = rpc_call_ctx(call);
	struct rpc_result *fail;
	const struct sandbox *sb = m_files_sandbox_begin(d, call, p->sandbox, &fail);
	struct files_req *fr;
	struct paths_plan *plan = NULL;
	enum paths_reason reason;

	if (!sb)
		return fail;
	if (kind == FILEOP_LIST && !fileop_plane_local(&d->dom, sb)) {
		struct msb_error e = { 0 };

		fileop_error_no_listing(&e);
		no_listing_name_key(d, &e);
		fail = rpc_fail_error(call, &e);
		msb_error_clear(&e);
		return fail;
	}
	if (files_plan(pop, p->path, p->working_directory, sb, &plan, &reason) < 0)
		return fail_reason_named(call, reason, pop, p->path, p->working_directory, sb);
	fr = files_req_new(d, call, sb, kind, 0);
	files_req_add(fr, pop, plan, p->path, NULL, 0);
	return files_run(fr, sb);
}

struct rpc_result *m_files_stat(struct rpc_call *call, const void *params)
{
	return files_one_path(call, params, PATHS_OP_STAT, FILEOP_STAT);
}

struct rpc_result *m_files_list(struct rpc_call *call, const void *params)
{
	return files_one_path(call, params, PATHS_OP_LIST, FILEOP_LIST);
}

/* ---- remove / reclaim: rm in the guest, as the guest -------------------- */

static void files_rm_cb(const struct execrun_result *r, void *arg)
{
	struct files_req *fr = arg;
	size_t n = r->err_len < M_FILES_STDERR_MAX ? r->err_len : M_FILES_STDERR_MAX;
	json_t *data;

	switch (r->error) {
	case 0:
		if (r->exit_code == 0) {
			rpc_call_reply(fr->call, json_null());
			break;
		}
		data = json_pack("{s:s, s:i, s:s%}", "path", fr->given, "exit_code", r->exit_code,
				 "stderr", (const char *)r->err, n);
		if (!data) /* stderr not UTF-8 */
			data = json_pack("{s:s, s:i}", "path", fr->given, "exit_code", r->exit_code);
		{
			struct msb_error e = { 0 };

			msb_error_set(&e, MSB_ERR_OS_ERROR, data, "could not %s %s, rm exited %d",
				      fr->timeout_ms ? "reclaim" : "remove", fr->target, r->exit_code);
			files_reply_error(fr, NULL, &e);
			msb_error_clear(&e);
		}
		break;
	case -ETIMEDOUT:
		rpc_call_fail(fr->call, MSB_ERR_TIMEOUT,
			      json_pack("{s:I}", "timeout_ms", (json_int_t)(fr->timeout_ms ? fr->timeout_ms
											  : fr->d->dom.config->files_timeout_ms)),
			      "the removal did not finish in time");
		break;
	case -EFBIG: {
		struct msb_error e = { 0 };

		msb_error_set(&e, MSB_ERR_OS_ERROR, json_pack("{s:s}", "path", fr->given),
			      "rm wrote more output than the daemon keeps; its outcome is unknown");
		files_reply_error(fr, NULL, &e);
		msb_error_clear(&e);
		break;
	}
	default: {
		struct msb_error e = { 0 };

		errmap_execrun(r, "rm", &e);
		rpc_call_fail_error(fr->call, &e);
		msb_error_clear(&e);
		break;
	}
	}
	files_req_free(fr);
}

static void files_rm_start(struct files_req *fr)
{
	const char *argv[] = { "rm", fr->recursive ? "-rf" : "-f", "--", fr->target, NULL };
	const struct sandbox *sb = registry_find_id(fr->d->dom.registry, fr->id);
	char user[IDENTITY_USER_STRING_MAX];
	/* As the sandbox's fixed uid:gid (guest.h), never Config.User by name:
	 * a guest that rewrote its /etc/passwd does not change who removes. */
	struct execrun_spec spec = {
		.argv = argv, .working_dir = "/",
		.user = sb && identity_fixed_user(&sb->guest, user) == 0 ? user : NULL,
		.timeout_ms = fr->timeout_ms ? fr->timeout_ms : fr->d->dom.config->files_timeout_ms,
		.max_output = 64 * 1024,
	};
	int r = execrun_start(fr->d->dom.base, fr->d->dom.engine, fr->d->dom.freezes, fr->id, &spec, files_rm_cb, fr, NULL);

	if (r < 0) {
		rpc_call_fail(fr->call, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
		files_req_free(fr);
	}
}

struct rpc_result *m_files_remove(struct rpc_call *call, const void *params)
{
	const struct m_files_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	struct rpc_result *fail;
	const struct sandbox *sb = m_files_sandbox_begin(d, call, p->sandbox, &fail);
	struct paths_plan *plan = NULL;
	enum paths_reason reason;
	struct files_req *fr;

	if (!sb)
		return fail;
	if (files_plan(PATHS_OP_DELETE, p->path, p->working_directory, sb, &plan, &reason) < 0)
		return fail_reason_named(call, reason, PATHS_OP_DELETE, p->path, p->working_directory, sb);
	fr = files_req_new(d, call, sb, FILEOP_REMOVE, 0);
	fr->target = xstrdup(plan->target.path);
	fr->given = xstrdup(json_string_value(p->path));
	fr->recursive = p->recursive;
	fileop_set_recursive(fr->op, p->recursive);
	/* Local: removed here, as the guest. Archive: the walk classifies (link →
	 * ConfinementError, file → NotADirectoryError); rm as the guest is what
	 * bounds a swap after it. */
	files_req_add(fr, PATHS_OP_DELETE, plan, p->path, NULL, 0);
	return files_run(fr, sb);
}

struct rpc_result *m_files_reclaim(struct rpc_call *call, const void *params)
{
	const struct m_files_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	struct rpc_result *fail;
	const struct sandbox *sb = m_files_sandbox_begin(d, call, p->sandbox, &fail);
	long max_ms = d->dom.config->files_timeout_ms;
	struct paths_plan *plan = NULL;
	enum paths_reason reason;
	struct files_req *fr;
	long timeout_ms = max_ms;

	if (!sb)
		return fail;
	if (p->timeout_seconds) {
		json_int_t s = json_integer_value(p->timeout_seconds);

		if (s < 1 || s > max_ms / 1000)
			return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
					json_pack("{s:s, s:I}", "field", "timeout_seconds", "limit", (json_int_t)(max_ms / 1000)),
					"timeout_seconds must be from 1 to %ld", max_ms / 1000);
		timeout_ms = (long)s * 1000;
	}
	if (files_plan(PATHS_OP_RECLAIM, p->directory, p->working_directory, sb, &plan, &reason) < 0)
		return fail_reason_named(call, reason, PATHS_OP_RECLAIM, p->directory, p->working_directory, sb);
	fr = files_req_new(d, call, sb, FILEOP_RECLAIM, timeout_ms);
	fr->target = xstrdup(plan->target.path);
	fr->given = xstrdup(json_string_value(p->directory));
	fr->recursive = true;
	files_req_add(fr, PATHS_OP_RECLAIM, plan, p->directory, NULL, 0);
	return files_run(fr, sb);
}
