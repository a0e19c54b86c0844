/* owner.h — the one owner rule every handler applies: a caller reaches the
 * sandboxes it owns (their owner label, sandbox.has_owner), an
 * administrator (root, or a member of sandbox.admin_group: rpc_peer.admin)
 * every one. Selections by label narrow to the owner the same rule gives;
 * a sandbox named by the `sandbox` param resolves among those reached. */
#ifndef MSB_OWNER_H
#define MSB_OWNER_H

#include <stdbool.h>
#include <sys/types.h>

#include "rpc.h"

struct msbd;
struct sandbox;

/* The owner a caller's selection is narrowed to (names_label_filter's
 * owner): its uid, or (uid_t)-1 (every owner) for an administrator. */
uid_t owner_selector(const struct rpc_peer *peer);

/* May peer reach what owner owns (a sandbox, its events)? */
bool owner_admits(const struct rpc_peer *peer, uid_t owner);

/* May peer reach sb? */
bool owner_may_reach(const struct rpc_peer *peer, const struct sandbox *sb);

/* The caller's sandbox named as the `sandbox` param names one (PROTOCOL.md
 * "Naming a sandbox": its full id, a unique id prefix of at least 12 hex
 * digits, or its name; registry_resolve), or NULL with *ret_fail set:
 * InvalidParams (too few hex digits; an ambiguous prefix, with
 * data.candidates and data.matches), EngineUnavailable (the registry is not
 * read yet), SandboxNotFound (nothing the caller may reach: absent, or
 * another user's; data.sandbox is what was given). */
const struct sandbox *owner_sandbox_begin(struct msbd *d, struct rpc_call *call, const char *given,
					  struct rpc_result **ret_fail);

/* The same resolution, for callers that treat "nothing" their own way
 * (sandbox.dispose: null): 0 and *ret_sb; -ENOENT nothing matched (no
 * failure made); any other <0 with *reterr_fail set as above. */
int owner_sandbox_resolve(struct msbd *d, struct rpc_call *call, const char *given,
			  const struct sandbox **ret_sb, struct rpc_result **reterr_fail);

#endif
