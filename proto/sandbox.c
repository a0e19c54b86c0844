/* sandbox.c — decode and validate the sandbox key and spec (behaviour-core
 * §1.1, §1.2). Every refusal names the top-level member it is about and says
 * what is wrong in one sentence; client text in a message is cut to
 * MSB_ECHO_MAX_BYTES. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "egress_rule.h"
#include "errors.h"
#include "sandbox.h"
#include "xmalloc.h"

/* An egress_allow refusal names at most this many of the hosts. */
#define SPEC_ERR_HOSTS_SHOWN 8

/* What went wrong while decoding: the member and a malloc'd sentence. */
struct dec {
	const char *field;
	char *message;
};

static int bad(struct dec *d, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(struct dec *d, const char *field, const char *fmt, ...)
{
	va_list ap;

	d->field = field;
	va_start(ap, fmt);
	d->message = xvasprintf(fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int dec_finish(struct dec *d, int r, const char **reterr_field, char **reterr_message)
{
	if (r >= 0)
		return r;
	*reterr_field = d->field;
	*reterr_message = TAKE_PTR(d->message);
	return r;
}

/* A JSON string without NUL bytes, at most max bytes, non-empty if asked.
 * what names it in messages, field is the member reported. */
static int get_string(struct dec *d, const char *field, const char *what, const json_t *v,
		      size_t max, bool nonempty, const char **ret)
{
	size_t len;

	if (!json_is_string(v))
		return bad(d, field, "%s must be a string", what);
	len = json_string_length(v);
	if (strlen(json_string_value(v)) != len)
		return bad(d, field, "%s must not contain a NUL byte", what);
	if (len > max)
		return bad(d, field, "%s is %zu bytes long, longer than the limit of %zu", what, len,
			   max);
	if (nonempty && len == 0)
		return bad(d, field, "%s must not be empty", what);
	*ret = json_string_value(v);
	return 0;
}

/* ---- key ------------------------------------------------------------------ */

static bool name_in(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return false;
}

static int no_unknown_members(struct dec *d, const json_t *j, const char *const *names, size_t n,
			      const char *where)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)j, key, v) {
		if (!name_in(key, names, n))
			return bad(d, key, "unknown member \"%.*s\" in the %s", msb_echo_len(key), key,
				   where);
	}
	return 0;
}

static int key_field(struct dec *d, const json_t *j, const char *name, bool required,
		     const char **ret)
{
	const json_t *v = json_object_get(j, name);
	char what[64];

	if (!v) {
		if (required)
			return bad(d, name, "\"%s\" is required in the key", name);
		return 0;
	}
	snprintf(what, sizeof(what), "\"%s\"", name);
	return get_string(d, name, what, v, MSB_KEY_FIELD_MAX_BYTES, required, ret);
}

/* agent_dir, or its 0.42+ name agent_id; both may be sent only if they agree. */
static int key_agent(struct dec *d, const json_t *j, const char **ret)
{
	const char *dir = NULL, *id = NULL;
	int r;

	r = key_field(d, j, "agent_dir", false, &dir);
	if (r < 0)
		return r;
	r = key_field(d, j, "agent_id", false, &id);
	if (r < 0)
		return r;
	if (dir && id && strcmp(dir, id) != 0)
		return bad(d, "agent_id",
			   "\"agent_dir\" and its alias \"agent_id\" disagree; send one of them");
	if (!dir && !id)
		return bad(d, "agent_dir", "\"agent_dir\" is required in the key");
	if (!*(dir ? dir : id))
		return bad(d, dir ? "agent_dir" : "agent_id", "\"%s\" must not be empty",
			   dir ? "agent_dir" : "agent_id");
	*ret = dir ? dir : id;
	return 0;
}

static int key_decode(struct dec *d, const json_t *j, struct msb_key *ret)
{
	static const char *const members[] = { "scope", "thread_id", "agent_dir", "agent_id",
					       "call_id" };
	const char *scope = NULL, *thread = NULL, *agent = NULL, *call = "";
	int r;

	if (!json_is_object(j))
		return bad(d, "", "the sandbox key must be a JSON object");
	r = no_unknown_members(d, j, members, ELEMENTSOF(members), "sandbox key");
	if (r < 0)
		return r;
	r = key_field(d, j, "scope", true, &scope);
	if (r < 0)
		return r;
	r = key_field(d, j, "thread_id", true, &thread);
	if (r < 0)
		return r;
	r = key_agent(d, j, &agent);
	if (r < 0)
		return r;
	r = key_field(d, j, "call_id", false, &call);
	if (r < 0)
		return r;
	*ret = (struct msb_key){
		.scope = xstrdup(scope),
		.thread_id = xstrdup(thread),
		.agent_dir = xstrdup(agent),
		.call_id = xstrdup(call),
	};
	return 0;
}

int msb_key_decode(const json_t *j, struct msb_key *ret, const char **reterr_field,
		   char **reterr_message)
{
	struct dec d = { 0 };

	return dec_finish(&d, key_decode(&d, j, ret), reterr_field, reterr_message);
}

void msb_key_release(struct msb_key *key)
{
	if (!key)
		return;
	free(key->scope);
	free(key->thread_id);
	free(key->agent_dir);
	free(key->call_id);
	*key = (struct msb_key){ 0 };
}

json_t *msb_key_encode(const struct msb_key *key)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "scope", key->scope, "thread_id", key->thread_id,
			 "agent_dir", key->agent_dir, "call_id", key->call_id ? key->call_id : "");
}

/* ---- spec members ----------------------------------------------------------- */

/* The spec being built, and what the construction rules need beyond it. */
struct spec_build {
	struct msb_spec s;
	bool has_host_tools;
};

static void spec_buildp(struct spec_build *b)
{
	msb_spec_release(&b->s);
}

typedef int spec_member_decode(struct dec *d, const char *name, const json_t *v,
			       struct spec_build *b);

static void quote(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "\"%s\"", name);
}

/* A wire enum: the value the string names, or a refusal listing them all. */
static int get_enum(struct dec *d, const char *name, const json_t *v, int (*from)(const char *),
		    const char *const *names, size_t n, int *ret)
{
	char list[256] = "";
	int r;

	if (json_is_string(v)) {
		r = from(json_string_value(v));
		if (r >= 0) {
			*ret = r;
			return 0;
		}
	}
	for (size_t i = 0; i < n; i++) {
		size_t used = strlen(list);

		snprintf(list + used, sizeof(list) - used, "%s\"%s\"", i ? ", " : "", names[i]);
	}
	if (json_is_string(v))
		return bad(d, name, "\"%s\" is \"%.*s\"; it must be one of %s", name,
			   msb_echo_len(json_string_value(v)), json_string_value(v), list);
	return bad(d, name, "\"%s\" must be a string, one of %s", name, list);
}

static int dec_kind(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	const char *s;
	char what[32];
	int r;

	quote(what, sizeof(what), name);
	r = get_string(d, name, what, v, MSB_KEY_FIELD_MAX_BYTES, true, &s);
	if (r < 0)
		return r;
	b->s.kind = xstrdup(s);
	return 0;
}

/* image, image_id: a string or null. "" counts as absent, as upstream's
 * `spec.image_id or spec.image` reads it. */
static int dec_image_string(struct dec *d, const char *name, const json_t *v, char **slot)
{
	const char *s;
	char what[32];
	int r;

	if (json_is_null(v))
		return 0;
	quote(what, sizeof(what), name);
	r = get_string(d, name, what, v, MSB_SPEC_STRING_MAX_BYTES, false, &s);
	if (r < 0)
		return r;
	if (*s)
		*slot = xstrdup(s);
	return 0;
}

static int dec_image(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	return dec_image_string(d, name, v, &b->s.image);
}

static int dec_image_id(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	return dec_image_string(d, name, v, &b->s.image_id);
}

/* One egress_allow entry: a host string, or an EgressRule {host, methods}
 * with methods absent or null (which is the bare host). Docker's CONNECT
 * proxy cannot see request methods, so this daemon never declares
 * egress_methods and refuses a rule that names methods. The host must be an
 * allow rule as egress_rule.h defines it (host or "*.domain", optional ":port"). */
static int egress_host(struct dec *d, const char *name, size_t i, const json_t *v,
		       const char **ret)
{
	static const char *const rule_members[] = { "host", "methods" };
	const json_t *host = v;
	const char *key, *s = NULL, *why = NULL;
	char what[64];
	json_t *m;
	int r;

	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, key, m) {
			if (!name_in(key, rule_members, ELEMENTSOF(rule_members)))
				return bad(d, name, "unknown member \"%.*s\" in %s[%zu]",
					   msb_echo_len(key), key, name, i);
		}
		m = json_object_get(v, "methods");
		if (m && !json_is_null(m))
			return bad(d, name, "%s[%zu]: egress method rules are not supported (the "
				   "egress proxy cannot see request methods); give the bare host",
				   name, i);
		host = json_object_get(v, "host");
		if (!host)
			return bad(d, name, "%s[%zu] has no \"host\"", name, i);
	} else if (!json_is_string(v)) {
		return bad(d, name, "%s[%zu] must be a host string or an object {\"host\": ...}",
			   name, i);
	}
	snprintf(what, sizeof(what), "%s[%zu]", name, i);
	r = get_string(d, name, what, host, MSB_SPEC_STRING_MAX_BYTES, true, &s);
	if (r < 0)
		return r;
	/* The allowlist travels comma-joined (egress_id, the proxy's list). */
	for (const char *c = s; *c; c++)
		if (*c == ',' || (unsigned char)*c <= ' ' || *c == 0x7f)
			return bad(d, name, "%s[%zu] \"%.*s\" must not contain a comma, a space or "
				   "a control character", name, i, msb_echo_len(s), s);
	/* The proxy parses the same grammar (egress_rule.h); refuse here what it would. */
	if (msb_egress_rule_check(s, &why) < 0)
		return bad(d, name, "%s[%zu] \"%.*s\" is not a valid egress rule: %s (an entry "
			   "is a host or \"*.\" and a domain, optionally \":PORT\")", name, i,
			   msb_echo_len(s), s, why);
	*ret = s;
	return 0;
}

static int dec_egress_allow(struct dec *d, const char *name, const json_t *v,
			    struct spec_build *b)
{
	size_t n = json_array_size(v);
	const char *host = NULL;
	int r;

	if (!json_is_array(v))
		return bad(d, name, "\"%s\" must be an array of hosts", name);
	if (n > MSB_SPEC_MAX_EGRESS_ALLOW)
		return bad(d, name, "\"%s\" has %zu entries, more than the limit of %d", name, n,
			   MSB_SPEC_MAX_EGRESS_ALLOW);
	b->s.egress_allow = xcalloc(n ? n : 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		r = egress_host(d, name, i, json_array_get(v, i), &host);
		if (r < 0)
			return r;
		b->s.egress_allow[b->s.n_egress_allow++] = xstrdup(host);
	}
	return 0;
}

static bool path_has_dotdot(const char *p)
{
	for (const char *c = p; (c = strstr(c, "..")); c++)
		if ((c == p || c[-1] == '/') && (c[2] == '/' || c[2] == '\0'))
			return true;
	return false;
}

static int dec_work_dir(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	const char *s;
	char what[32];
	int r;

	if (json_is_null(v))
		return 0;
	quote(what, sizeof(what), name);
	r = get_string(d, name, what, v, MSB_SPEC_STRING_MAX_BYTES, false, &s);
	if (r < 0)
		return r;
	if (s[0] != '/')
		return bad(d, name, "\"%s\" must be an absolute POSIX path (starting with /)", name);
	if (strchr(s, '\\'))
		return bad(d, name, "\"%s\" must not contain a backslash", name);
	if (path_has_dotdot(s))
		return bad(d, name, "\"%s\" must not contain a \"..\" component", name);
	b->s.work_dir = xstrdup(s);
	return 0;
}

static int dec_labels(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	const char *key, *s;
	char what[MSB_ECHO_MAX_BYTES + 32];
	json_t *val;
	int r;

	if (!json_is_object(v))
		return bad(d, name, "\"%s\" must be an object of strings", name);
	if (json_object_size(v) > MSB_SPEC_MAX_LABELS)
		return bad(d, name, "\"%s\" has %zu labels, more than the limit of %d", name,
			   json_object_size(v), MSB_SPEC_MAX_LABELS);
	json_object_foreach((json_t *)v, key, val) {
		snprintf(what, sizeof(what), "%s[\"%.*s\"]", name, msb_echo_len(key), key);
		if (strlen(key) > MSB_SPEC_STRING_MAX_BYTES)
			return bad(d, name, "a key in \"%s\" is %zu bytes long, longer than the "
				   "limit of %d", name, strlen(key), MSB_SPEC_STRING_MAX_BYTES);
		r = get_string(d, name, what, val, MSB_SPEC_STRING_MAX_BYTES, false, &s);
		if (r < 0)
			return r;
		if (json_object_set_new(b->s.labels, key, json_stringn(s, strlen(s))) < 0)
			return bad(d, name, "out of memory copying \"%s\"", name);
	}
	return 0;
}

static int dec_requires(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	uint32_t mask = 0;
	size_t i;
	json_t *e;
	int c;

	if (!json_is_array(v))
		return bad(d, name, "\"%s\" must be an array of capability names", name);
	json_array_foreach(v, i, e) {
		const char *s = json_string_value(e);

		if (!s)
			return bad(d, name, "\"%s\"[%zu] must be a capability name (a string)", name, i);
		c = msb_capability_from_string(s);
		if (c < 0)
			return bad(d, name, "\"%s\"[%zu] \"%.*s\" is not a capability", name, i,
				   msb_echo_len(s), s);
		mask |= MSB_BIT(c);
	}
	b->s.requires = mask;
	return 0;
}

static int isolation_from(const char *s)
{
	return msb_isolation_from_string(s);
}

static int dec_min_isolation(struct dec *d, const char *name, const json_t *v,
			     struct spec_build *b)
{
	const char *names[_MSB_ISOLATION_MAX];

	if (json_is_null(v))
		return 0;
	/* "process" meant none before 0.14; it is refused forever (§1.3). */
	if (json_is_string(v) && strcmp(json_string_value(v), "process") == 0)
		return bad(d, name, "\"%s\": \"process\" is not an isolation level; say "
			   "\"os_process\" (or \"none\")", name);
	for (int i = 0; i < _MSB_ISOLATION_MAX; i++)
		names[i] = msb_isolation_to_string(i);
	return get_enum(d, name, v, isolation_from, names, ELEMENTSOF(names), &b->s.min_isolation);
}

static int dec_limits(struct dec *d, const char *name, const json_t *v,
		      struct msb_transfer_limits *slot)
{
	static const char *const members[] = { "max_bytes_per_file", "max_total_bytes",
					       "max_files" };
	const char *sub = NULL;

	if (msb_transfer_limits_decode(v, slot, &sub) == 0)
		return 0;
	if (!json_is_object(v))
		return bad(d, name, "\"%s\" must be an object {max_bytes_per_file, "
			   "max_total_bytes, max_files}", name);
	if (!name_in(sub, members, ELEMENTSOF(members)))
		return bad(d, name, "unknown member \"%.*s\" in \"%s\"", msb_echo_len(sub), sub, name);
	if (!json_object_get(v, sub))
		return bad(d, name, "\"%s.%s\" is required", name, sub);
	return bad(d, name, "\"%s.%s\" must be a non-negative integer", name, sub);
}

static int dec_files_in(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	return dec_limits(d, name, v, &b->s.files_in);
}

static int dec_files_out(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	return dec_limits(d, name, v, &b->s.files_out);
}

static int egress_from(const char *s)
{
	return msb_egress_from_string(s);
}

static int dec_egress(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	const char *names[_MSB_EGRESS_MAX];
	int e = 0;
	int r;

	for (int i = 0; i < _MSB_EGRESS_MAX; i++)
		names[i] = msb_egress_to_string(i);
	r = get_enum(d, name, v, egress_from, names, ELEMENTSOF(names), &e);
	if (r < 0)
		return r;
	b->s.egress = e;
	return 0;
}

static int os_family_from(const char *s)
{
	return msb_os_family_from_string(s);
}

static int dec_os_family(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	const char *names[_MSB_OS_MAX];

	if (json_is_null(v))
		return 0;
	for (int i = 0; i < _MSB_OS_MAX; i++)
		names[i] = msb_os_family_to_string(i);
	return get_enum(d, name, v, os_family_from, names, ELEMENTSOF(names),
			&b->s.requires_os_family);
}

static int scope_from(const char *s)
{
	return msb_scope_from_string(s);
}

static int dec_isolation_scope(struct dec *d, const char *name, const json_t *v,
			       struct spec_build *b)
{
	const char *names[_MSB_SCOPE_MAX];
	int sc;
	int r;

	for (int i = 0; i < _MSB_SCOPE_MAX; i++)
		names[i] = msb_scope_to_string(i);
	r = get_enum(d, name, v, scope_from, names, ELEMENTSOF(names), &sc);
	if (r < 0)
		return r;
	b->s.isolation_scope = sc;
	return 0;
}

/* ---- accepted, type-checked, not acted on ----------------------------------- */

static int dec_array_only(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	(void)b;
	return json_is_array(v) ? 0 : bad(d, name, "\"%s\" must be an array", name);
}

static int dec_bool_only(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	(void)b;
	return json_is_boolean(v) ? 0 : bad(d, name, "\"%s\" must be true or false", name);
}

static int dec_host_tools(struct dec *d, const char *name, const json_t *v, struct spec_build *b)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return bad(d, name, "\"%s\" must be an object or null", name);
	b->has_host_tools = true;
	return 0;
}

static const char *const cleanup_names[] = { "reclaim", "reset", "dispose" };

static int cleanup_from(const char *s)
{
	for (size_t i = 0; i < ELEMENTSOF(cleanup_names); i++)
		if (strcmp(s, cleanup_names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

static int dec_min_cleanup(struct dec *d, const char *name, const json_t *v,
			   struct spec_build *b)
{
	int ignored;

	(void)b;
	if (json_is_null(v))
		return 0;
	return get_enum(d, name, v, cleanup_from, cleanup_names, ELEMENTSOF(cleanup_names),
			&ignored);
}

/* ---- spec ------------------------------------------------------------------ */

struct spec_member {
	const char *name;
	spec_member_decode *decode;
	bool required;
};

/* In the order of behaviour-core §1.2, so the first bad member is reported. */
static const struct spec_member spec_members[] = {
	{ "kind", dec_kind, true },
	{ "image", dec_image, false },
	{ "image_id", dec_image_id, false },
	{ "egress_allow", dec_egress_allow, false },
	{ "work_dir", dec_work_dir, false },
	{ "labels", dec_labels, false },
	{ "requires", dec_requires, false },
	{ "min_isolation", dec_min_isolation, false },
	{ "declared_outputs", dec_array_only, false },
	{ "files_in", dec_files_in, false },
	{ "files_out", dec_files_out, false },
	{ "outputs_named_at_call_time", dec_bool_only, false },
	{ "egress", dec_egress, false },
	{ "requires_os_family", dec_os_family, false },
	{ "host_tools", dec_host_tools, false },
	{ "isolation_scope", dec_isolation_scope, false },
	{ "confined_to_guest_call_path", dec_bool_only, false },
	{ "min_cleanup", dec_min_cleanup, false },
};

static void spec_defaults(struct msb_spec *s)
{
	static const struct msb_transfer_limits limits = {
		MSB_DEFAULT_FILE_BYTES, MSB_DEFAULT_TOTAL_BYTES, MSB_DEFAULT_FILES
	};

	*s = (struct msb_spec){
		.egress = MSB_EGRESS_CLOSED,
		.labels = json_object(),
		.requires = MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_FILES_IN),
		.min_isolation = -1,
		.isolation_scope = MSB_SCOPE_CONVERSATION,
		.requires_os_family = -1,
		.files_in = limits,
		.files_out = limits,
	};
}

static int spec_members_decode(struct dec *d, const json_t *j, struct spec_build *b)
{
	const char *key;
	json_t *v;
	int r;

	json_object_foreach((json_t *)j, key, v) {
		size_t i;

		for (i = 0; i < ELEMENTSOF(spec_members); i++)
			if (strcmp(key, spec_members[i].name) == 0)
				break;
		if (i == ELEMENTSOF(spec_members))
			return bad(d, key, "unknown member \"%.*s\" in the spec", msb_echo_len(key),
				   key);
	}
	for (size_t i = 0; i < ELEMENTSOF(spec_members); i++) {
		const struct spec_member *m = &spec_members[i];

		v = json_object_get(j, m->name);
		if (!v) {
			if (m->required)
				return bad(d, m->name, "\"%s\" is required in the spec", m->name);
			continue;
		}
		r = m->decode(d, m->name, v, b);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Rule 2's refusal: names the hosts (at most SPEC_ERR_HOSTS_SHOWN of them). */
static int egress_allow_unused(struct dec *d, const struct msb_spec *s)
{
	size_t shown = s->n_egress_allow < SPEC_ERR_HOSTS_SHOWN ? s->n_egress_allow
								 : SPEC_ERR_HOSTS_SHOWN;
	_cleanup_free_ char *list = xstrdup("");
	_cleanup_free_ char *more = NULL;

	for (size_t i = 0; i < shown; i++) {
		char *next = xasprintf("%s%s%.*s", list, i ? ", " : "",
				       msb_echo_len(s->egress_allow[i]), s->egress_allow[i]);

		free(list);
		list = next;
	}
	more = s->n_egress_allow > shown
		? xasprintf(" and %zu more", s->n_egress_allow - shown) : xstrdup("");
	return bad(d, "egress_allow", "\"egress_allow\" lists %s%s, but \"egress\" is \"%s\"; "
		   "listed hosts are only reachable with egress \"allowlist\"", list, more,
		   msb_egress_to_string(s->egress));
}

static int host_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rule 3: keyed by the lower-cased host, the first spelling wins; then
 * sorted, as the name digest joins sorted(str(e)) (behaviour-docker §3).
 * Lower-casing is ASCII: hosts on the wire are expected in IDNA form. */
static void egress_allow_normalise(struct msb_spec *s)
{
	size_t kept = 0;

	for (size_t i = 0; i < s->n_egress_allow; i++) {
		bool dup = false;

		for (size_t k = 0; k < kept && !dup; k++)
			dup = strcasecmp(s->egress_allow[k], s->egress_allow[i]) == 0;
		if (dup)
			free(s->egress_allow[i]);
		else
			s->egress_allow[kept++] = s->egress_allow[i];
	}
	s->n_egress_allow = kept;
	if (kept > 1)
		qsort(s->egress_allow, kept, sizeof(char *), host_cmp);
}

/* The construction rules of §1.2, in order (rule 1 ran in the decoders). */
static int spec_rules(struct dec *d, struct spec_build *b)
{
	struct msb_spec *s = &b->s;

	if (s->n_egress_allow > 0 && s->egress != MSB_EGRESS_ALLOWLIST)
		return egress_allow_unused(d, s);
	egress_allow_normalise(s);
	if (s->requires & MSB_BIT(MSB_CAP_RECLAIM))
		return bad(d, "requires", "\"requires\" names \"reclaim\": reclaim is a backend "
			   "declaration, never a requirement");
	if (b->has_host_tools && !(s->requires & MSB_BIT(MSB_CAP_HOST_TOOLS)))
		return bad(d, "host_tools", "\"host_tools\" is set, so \"requires\" must include "
			   "\"host_tools\"");
	return 0;
}

static int spec_decode(struct dec *d, const json_t *j, struct msb_spec *ret)
{
	_cleanup_(spec_buildp) struct spec_build b = { 0 };
	int r;

	if (!json_is_object(j))
		return bad(d, "", "the sandbox spec must be a JSON object");
	spec_defaults(&b.s);
	if (!b.s.labels)
		return bad(d, "labels", "out of memory allocating \"labels\"");
	r = spec_members_decode(d, j, &b);
	if (r < 0)
		return r;
	r = spec_rules(d, &b);
	if (r < 0)
		return r;
	*ret = b.s;
	b.s = (struct msb_spec){ 0 };
	return 0;
}

int msb_spec_decode(const json_t *j, struct msb_spec *ret, const char **reterr_field,
		    char **reterr_message)
{
	struct dec d = { 0 };

	return dec_finish(&d, spec_decode(&d, j, ret), reterr_field, reterr_message);
}

void msb_spec_release(struct msb_spec *spec)
{
	if (!spec)
		return;
	free(spec->kind);
	free(spec->image);
	free(spec->image_id);
	for (size_t i = 0; i < spec->n_egress_allow; i++)
		free(spec->egress_allow[i]);
	free(spec->egress_allow);
	free(spec->work_dir);
	json_decref(spec->labels);
	*spec = (struct msb_spec){ 0 };
}

const char *msb_spec_work_dir(const struct msb_spec *spec)
{
	return spec->work_dir ? spec->work_dir : MSB_DEFAULT_WORK_DIR;
}

const char *msb_spec_image_ref(const struct msb_spec *spec)
{
	return spec->image_id ? spec->image_id : spec->image;
}
