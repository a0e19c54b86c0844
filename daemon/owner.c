/* owner.c — the one owner rule and the resolution of a named sandbox
 * within it (see owner.h). */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "daemon.h"
#include "owner.h"
#include "registry.h"
#include "xmalloc.h"

uid_t owner_selector(const struct rpc_peer *peer)
{
	return peer->admin ? (uid_t)-1 : peer->uid;
}

/* Decided by peer->admin, never by owner_selector's (uid_t)-1: a peer
 * whose credentials could not be read has uid (uid_t)-1 (server.c), and
 * must pass no check. */
bool owner_admits(const struct rpc_peer *peer, uid_t owner)
{
	return peer->admin || peer->uid == owner;
}

bool owner_may_reach(const struct rpc_peer *peer, const struct sandbox *sb)
{
	/* one made without an owner label (the seed's): administrators only */
	return peer->admin || (sb->has_owner && sb->owner == peer->uid);
}

/* registry_resolve's filter: the caller's reach. */
static bool call_may_reach(const struct sandbox *sb, void *arg)
{
	return owner_may_reach(rpc_call_peer(arg), sb);
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

int owner_sandbox_resolve(struct msbd *d, struct rpc_call *call, const char *given,
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
	r = registry_resolve(d->dom.registry, given, call_may_reach, call, &sb, cands, REGISTRY_CANDIDATES_MAX,
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

const struct sandbox *owner_sandbox_begin(struct msbd *d, struct rpc_call *call, const char *given,
					  struct rpc_result **ret_fail)
{
	const struct sandbox *sb = NULL;
	int r;

	*ret_fail = NULL;
	r = owner_sandbox_resolve(d, call, given, &sb, ret_fail);
	if (r == -ENOENT) {
		_cleanup_free_ char *q = given_quoted(given);

		*ret_fail = rpc_fail(call, MSB_ERR_SANDBOX_NOT_FOUND,
				     json_pack("{s:s%}", "sandbox", given, (size_t)msb_echo_len(given)),
				     "no sandbox %s that you may reach (absent, gone, or not yours); list them with "
				     "maf-sandbox ls (sandbox.list)", q);
	}
	return r == 0 ? sb : NULL;
}
