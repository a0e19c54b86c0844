/* egress.h — the allowlist (ARCHITECTURE decision 8): the proxy image, each
 * allowlisted sandbox's network and proxy, the proxies' decisions followed
 * live and published as events.
 *
 * The parts, each its own file: the proxy image (egress_image.h: made from
 * the installed proxy binary, loaded through the engine; allowlist is
 * declared (egress_ready) once it is current), the subnet pool
 * (egress_pool.h, recovered from the engine's networks), the decision
 * followers (egress_follow.h: each proxy's log followed, its decisions
 * published once, coalesced, cursors in egress.state_dir, drained before
 * a proxy is removed), and what they share (egress_topo.h). This file's
 * own is the state machine:
 *
 * One sandbox's topology (egress_ensure), under the acquire op of its name:
 *
 *   IMAGE (wait) → NET_INSPECT ─ usable ─────────────────────────┐
 *                      └ absent → [NET_LIST once] → NET_CREATE → NET_VERIFY
 *                                                                │
 *   PROXY_INSPECT ─ running, current, followed & ready ─→ DONE ←─┘
 *        └ else → [drain + PROXY_REMOVE] → PROXY_CREATE → PROXY_CONNECT
 *                   → PROXY_START → PROXY_READY (its "listening" line) → DONE
 *   A failure removes what this op created: the proxy first, then the
 *   network (a fresh sandbox only: a network with a workload on it stays).
 */
#ifndef MSB_EGRESS_H
#define MSB_EGRESS_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "egress_topo.h"
#include "errors.h"
#include "sandbox.h"

struct domain;
struct egress;
struct egress_op;

struct egress *egress_new(struct domain *d);
/* Cancels what is in flight (no callbacks). NULL-safe; returns NULL. */
struct egress *egress_free(struct egress *eg);
/* The daemon stops: before engine_free, so the cancelled requests' callbacks
 * start nothing new (drains in flight end with -ECANCELED). */
void egress_shutdown(struct egress *eg);
/* The engine is (again) reachable: checks the image, recovers the pool,
 * follows the running proxies. */
void egress_resync(struct egress *eg);
/* A proxy binary is configured and installed (executable): names get their
 * allow: part, and an allowlist spec is considered. */
bool egress_configured(const struct domain *d);
/* Why allowlist is not declared now, naming what would change it (the
 * egress.proxy_binary key, or the image's failure), or NULL when it is
 * (egress_ready). malloc'd. */
char *egress_allowlist_off_reason(const struct domain *d);
/* ... and its image is current: allowlist is declared, observes_egress. */
bool egress_ready(const struct egress *eg);
/* Configured, and its image not known to be unmakeable: an allowlisted
 * acquire is taken (it waits for the image if need be). */
bool egress_usable(const struct egress *eg);

/* Does spec get a network and a proxy? (ALLOWLIST with hosts; an empty
 * allowlist is CLOSED: --network none.) */
static inline bool egress_spec_needs_proxy(const struct msb_spec *spec)
{
	return spec->egress == MSB_EGRESS_ALLOWLIST && spec->n_egress_allow > 0;
}

/* The proxy of workload name is running, followed and ready: fills info
 * (a warm acquire needs no engine request). */
bool egress_proxy_ok(const struct egress *eg, const char *name, struct egress_info *info);

/* err NULL on success (info filled), else why (info NULL). */
typedef void egress_ensure_cb(const struct msb_error *err, const struct egress_info *info, void *arg);
/* Makes sure workload name's network and proxy exist and run. fresh: no
 * workload exists (a failure then removes the network too). owner labels
 * the topology. Returns 0 (cb fires once, from the loop) or -errno. */
int egress_ensure(struct egress *eg, const char *name, const struct msb_key *key, const struct msb_spec *spec,
		  uid_t owner, bool fresh, egress_ensure_cb *cb, void *arg, struct egress_op **ret_op);
/* Stops the op; its callback never fires. What it created may remain
 * (dispose or reap removes it). */
void egress_op_cancel(struct egress_op *op);

/* Drain: stop the proxy, publish every decision of it not yet published.
 * cb fires once, from the loop; error < 0 if its log could not be read
 * (the removal may still go on: the cursor stays for a later try).
 * Returns 0 or -errno (then cb never fires). */
int egress_drain(struct egress *eg, const char *proxy_id, egress_drain_cb *cb, void *arg);
/* The proxy was removed: forget its follower and cursor. */
void egress_proxy_removed(struct egress *eg, const char *proxy_id);

/* Removes proxy then network of workload name (acquire's rollback after
 * it created the workload; best effort, logged). */
void egress_teardown(struct egress *eg, const char *name);

/* Decisions published since start. */
uint64_t egress_decisions_published(const struct egress *eg);
/* daemon.status's "egress": {"configured", "image": {"ref", "state", "id",
 * "error"}, "proxies_followed", "decisions_published", "decisions_seen",
 * "decisions_held", "decisions_coalesced", "events_published",
 * "stream_pauses", "decisions_not_logged"}. New reference. */
json_t *egress_status_json(const struct egress *eg);

#endif
