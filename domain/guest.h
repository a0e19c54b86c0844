/* guest.h — who the guest program is, for one container (behaviour-docker
 * §2.1 step 13): its uid:gid, resolved from Config.User (identity.h), then
 * /etc/passwd and /etc/group read through the archive plane under the
 * freeze (fileop.h), then `id -u` / `id -g` run in the guest (execrun.h).
 *
 *   INSPECT (unless the caller has one) → DB (frozen read, if a name must be
 *   looked up) → ID_U / ID_G (only for a half still unknown) → DONE
 *
 * The first resolution of a sandbox is fixed: stored in its registry entry
 * (registry.h, identity_fixed_set; this module is its one writer) and never
 * replaced; a later resolution hands its callback the stored identity.
 * Callers look at sb->guest first and resolve only when it is not known.
 *
 * On a local engine (d->exec_host_kill) the ids come first from the
 * container's init instead: the real Uid and Gid of /proc/<State.Pid>/status,
 * the pid pinned as the container's (plane_local.h) and alive after the
 * read — what the runtime resolved before any guest code ran; only when
 * that cannot be read is Config.User resolved as above.
 *
 * Failures of the lookups are not errors: they leave the identity
 * unresolved (logged). An unresolved result is fixed only when no lookup
 * failed for a passing reason (a timeout, the engine's failure, a refused
 * freeze): else nothing is stored and the next call resolves again. Only a gone container, an unreachable engine or the
 * daemon stopping fail the resolution. The callback fires exactly once,
 * from the loop; guest_identity_abandon() stops it from firing (the work
 * in flight still ends cleanly: a freeze is always released). */
#ifndef MSB_GUEST_H
#define MSB_GUEST_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "errors.h"

struct domain;
struct guest_req;

struct guest_identity {
	bool resolved;
	uid_t uid;
	gid_t gid;
};

/* err NULL on success (resolved or not: see id->resolved; unresolved is
 * 0:0, as guest_identity_fixed gives it). Both lent. */
typedef void guest_cb(const struct msb_error *err, const struct guest_identity *id, void *arg);

/* inspect: the container's inspect (borrowed; only Config.User is read), or
 * NULL to inspect it first. Returns 0, or -ENOTCONN when the engine is not
 * reachable (then cb never fires). */
int guest_identity_start(struct domain *d, const char *id, const json_t *inspect, guest_cb *cb, void *arg,
			 struct guest_req **ret);
void guest_identity_abandon(struct guest_req *g);

struct sandbox;
/* The identity fixed for sb (registry.h, sb->guest), the one way it is
 * read: true when one is stored, *ret set; an unresolved one is 0:0 (the
 * uid:gid every caller then acts with: root's). false leaves *ret. */
bool guest_identity_fixed(const struct sandbox *sb, struct guest_identity *ret);

#endif
