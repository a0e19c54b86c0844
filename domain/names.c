/* names.c — container names, labels and label digests (behaviour-docker §3),
 * and the per-owner key spaces of names_container_ns. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "names.h"
#include "sha256.h"
#include "xmalloc.h"

#define DIGEST_PREFIX "sha256-"

static const char hex_digits[] = "0123456789abcdef";

/* The first nchars lowercase hex digits of a digest, NUL-terminated. */
static void digest_hex(const uint8_t d[SHA256_DIGEST_BYTES], size_t nchars, char *out)
{
	for (size_t i = 0; i < nchars; i++)
		out[i] = hex_digits[i % 2 ? d[i / 2] & 0xf : d[i / 2] >> 4];
	out[nchars] = '\0';
}

static int host_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *names_egress_id(const struct msb_spec *spec, bool proxy_configured)
{
	_cleanup_free_ const char **sorted = NULL;
	size_t n = spec->n_egress_allow, len = sizeof("allow:");
	char *id, *p;

	if (!proxy_configured || n == 0)
		return xstrdup("");
	/* The spec keeps them sorted already; sorting here keeps §3 true for any spec. */
	sorted = xcalloc(n, sizeof(*sorted));
	for (size_t i = 0; i < n; i++) {
		sorted[i] = spec->egress_allow[i];
		len += strlen(sorted[i]) + 1;
	}
	qsort(sorted, n, sizeof(*sorted), host_cmp);
	id = xmalloc(len);
	p = stpcpy(id, "allow:");
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		p = stpcpy(p, sorted[i]);
	}
	return id;
}

/* One part of the name stream: "<byte length>:" then the bytes. tag is fed
 * before s inside the same part ("call:" + call_id). */
static void feed_part(struct sha256_ctx *c, const char *tag, const char *s)
{
	size_t taglen = strlen(tag), len = strlen(s);
	char prefix[32];
	int n = snprintf(prefix, sizeof(prefix), "%zu:", taglen + len);

	sha256_update(c, prefix, (size_t)n);
	sha256_update(c, tag, taglen);
	sha256_update(c, s, len);
}

void names_container(const struct msb_key *key, const char *kind, const char *egress_id, char *out)
{
	names_container_ns(key, kind, egress_id, NAMES_SEED_UID, out);
}

void names_container_ns(const struct msb_key *key, const char *kind, const char *egress_id, uid_t ns,
			char *out)
{
	uint8_t digest[SHA256_DIGEST_BYTES];
	char hex[NAMES_HASH_CHARS + 1];
	struct sha256_ctx c;

	sha256_init(&c);
	feed_part(&c, "", key->scope);
	feed_part(&c, "", key->thread_id);
	feed_part(&c, "", key->agent_dir);
	feed_part(&c, "", kind);
	if (egress_id && *egress_id)
		feed_part(&c, "", egress_id);
	if (key->call_id && *key->call_id)
		feed_part(&c, "call:", key->call_id);
	if (ns != NAMES_SEED_UID) {
		/* Tagged like call: no other part starts "uid:" ("allow:", "call:"). */
		char uid[24];

		snprintf(uid, sizeof(uid), "%" PRIuMAX, (uintmax_t)ns);
		feed_part(&c, "uid:", uid);
	}
	sha256_final(&c, digest);
	digest_hex(digest, NAMES_HASH_CHARS, hex);
	snprintf(out, NAMES_CONTAINER_MAX, "%s%s", NAMES_PREFIX, hex);
}

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(hex_digits, s[i]))
			return false;
	return true;
}

/* sha256-[0-9a-f]{48}, the whole string: what a digested value looks like. */
static bool looks_like_digest(const char *v, size_t len)
{
	size_t plen = strlen(DIGEST_PREFIX);

	return len == plen + NAMES_LABEL_DIGEST_HEX && strncmp(v, DIGEST_PREFIX, plen) == 0 &&
	       is_lower_hex(v + plen, NAMES_LABEL_DIGEST_HEX);
}

static bool is_label_safe(const char *v, size_t len)
{
	if (len == 0 || len > NAMES_LABEL_PLAIN_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = v[i];

		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

char *names_label_value(const char *v)
{
	size_t len = strlen(v);
	char hex[SHA256_HEX_BYTES];

	if (is_label_safe(v, len) && !looks_like_digest(v, len))
		return xstrdup(v);
	sha256_hex(v, len, hex);
	return xasprintf("%s%.*s", DIGEST_PREFIX, NAMES_LABEL_DIGEST_HEX, hex);
}

/* labels[k] = label_value(v). */
static void set_digested(json_t *labels, const char *k, const char *v)
{
	_cleanup_free_ char *lv = names_label_value(v);

	json_object_set_new(labels, k, json_string(lv));
}

static char *uid_string(uid_t uid)
{
	return xasprintf("%" PRIuMAX, (uintmax_t)uid);
}

json_t *names_workload_labels(const struct msb_key *key, const struct msb_spec *spec, uid_t owner)
{
	json_t *labels = json_object();
	_cleanup_free_ char *uid = uid_string(owner);
	const char *k;
	json_t *v;

	set_digested(labels, LABEL_SCOPE, key->scope);
	set_digested(labels, LABEL_THREAD, key->thread_id);
	set_digested(labels, LABEL_AGENT, key->agent_dir);
	set_digested(labels, LABEL_KIND, spec->kind);
	/* Only when non-empty, so conversation containers made before call scope match. */
	if (key->call_id && *key->call_id)
		set_digested(labels, LABEL_CALL, key->call_id);
	/* The key part stays raw: §3 digests only the value. */
	json_object_foreach(spec->labels, k, v) {
		_cleanup_free_ char *name = xasprintf("%s%s", LABEL_USER_PREFIX, k);

		set_digested(labels, name, json_string_value(v));
	}
	json_object_set_new(labels, LABEL_WORK_DIR, json_string(msb_spec_work_dir(spec)));
	set_digested(labels, LABEL_OWNER, uid);
	return labels;
}

/* filter["K=label_value(v)"] = true. */
static void filter_add(json_t *filter, const char *k, const char *v)
{
	_cleanup_free_ char *lv = names_label_value(v);
	_cleanup_free_ char *kv = xasprintf("%s=%s", k, lv);

	json_object_set_new(filter, kv, json_true());
}

json_t *names_label_filter(const char *scope, const char *thread_id, const char *agent_dir,
			   const char *call_id, const char *kind, uid_t owner)
{
	json_t *filter = json_object();

	if (scope)
		filter_add(filter, LABEL_SCOPE, scope);
	if (thread_id)
		filter_add(filter, LABEL_THREAD, thread_id);
	if (agent_dir)
		filter_add(filter, LABEL_AGENT, agent_dir);
	if (call_id && *call_id)
		filter_add(filter, LABEL_CALL, call_id);
	if (kind)
		filter_add(filter, LABEL_KIND, kind);
	if (owner != (uid_t)-1) {
		_cleanup_free_ char *uid = uid_string(owner);

		filter_add(filter, LABEL_OWNER, uid);
	}
	return json_pack("{s:o}", "label", filter);
}

bool names_labels_match(const json_t *filters, const json_t *labels)
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

bool names_is_ours(const char *name, const char *suffix)
{
	size_t plen = strlen(NAMES_PREFIX);

	if (!name || strncmp(name, NAMES_PREFIX, plen) != 0)
		return false;
	if (!is_lower_hex(name + plen, NAMES_HASH_CHARS))
		return false;
	return strcmp(name + plen + NAMES_HASH_CHARS, suffix ? suffix : "") == 0;
}

bool names_id_is_full(const char *id)
{
	return id && strlen(id) == NAMES_ID_HEX && strspn(id, "0123456789abcdef") == NAMES_ID_HEX;
}
