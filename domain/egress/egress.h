/* egress.h — the allowlist (ARCHITECTURE decision 8): the proxy image, each
 * allowlisted sandbox's network and proxy, the proxies' decisions followed
 * live and published as events.
 *
 * The image. Built by the daemon from the installed static proxy binary
 * (proxyimage.h: a deterministic `docker save` archive, config included) and
 * loaded through the engine as maf-sandbox-egress-proxy:<version>. The same
 * binary always gives the same image ID, so an image already there is
 * current when its ID is the one we compute. Allowlist is declared
 * (egress_ready) once the image is current.
 *
 *   image:  IDLE → INSPECT ─ current ─────────→ READY
 *                     └ absent/stale → LOAD → INSPECT → READY | FAILED
 *   (FAILED and IDLE are retried at the next resync or allowlisted acquire)
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
 *
 * Decisions. Each running proxy has a follower: GET logs?follow=1 with
 * timestamps, demultiplexed, split in lines, parsed (egresslog.h), at most
 * EGRESS_BYTES_PER_TURN a loop turn (then the stream pauses until the
 * next turn). Every decision is published once, coalesced per proxy
 * (egresslog.h: at most EGRESS_EVENTS_PER_WINDOW one by one a window, the
 * rest as counted events at its end, or earlier when the log stream ends):
 * a cursor per proxy (the timestamp of the last published decision and how
 * many shared it; one fixed-width record written in place), kept in
 * egress.state_dir, skips what was
 * already published, also by an earlier daemon; it moves past a held
 * decision only once that is published. Draining (before a proxy is
 * removed) stops the proxy, then reads what is left and publishes what is
 * held. */
#ifndef MSB_EGRESS_H
#define MSB_EGRESS_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "errors.h"
#include "sandbox.h"

#define EGRESS_PROXY_PORT          3128
#define EGRESS_PROXY_SUFFIX        "-proxy"
#define EGRESS_NET_SUFFIX          "-net"
/* Labels of ours on allowlisted topologies. */
#define LABEL_KEY_V1               "maf-sandbox.key.v1"
#define LABEL_EGRESS               "maf-sandbox.egress"   /* "allowlist" on the workload */
/* The proxy container's limits. */
#define EGRESS_PROXY_PIDS_LIMIT    64
#define EGRESS_PROXY_MEMORY_BYTES  (128u * 1024 * 1024)
#define EGRESS_PROXY_LOG_MAX_SIZE  "16m"      /* json-file rotation: a guest cannot fill the disk */
#define EGRESS_PROXY_LOG_MAX_FILES "2"
#define EGRESS_PROXY_STOP_GRACE_S  2
/* One log line of a proxy; longer lines are dropped (a decision line is short). */
#define EGRESS_LINE_MAX            1024
/* The follow stream is re-opened after this when it ends while the proxy runs. */
#define EGRESS_FOLLOW_RETRY_MS     1000
/* Pool blocks tried for one network before giving up (each overlap marks one). */
#define EGRESS_NET_CREATE_TRIES    8
/* Decision lines one proxy may put in the daemon's log each second (a guest
 * can make decisions as fast as it can connect); the rest are counted. */
#define EGRESS_LOG_PER_SECOND      50
/* Bytes of one proxy's log handled in one turn of the loop (plus at most
 * the chunk that crossed it, a libcurl buffer: 16 KiB); past it the stream
 * pauses until the next turn, after the loop has served what else is ready. */
#define EGRESS_BYTES_PER_TURN      (64u * 1024)
/* A drain gives up on a proxy log that sends nothing for this long. */
#define EGRESS_DRAIN_IDLE_MS       10000

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

struct egress_info {
	char network[80];          /* NAME-net */
	char proxy[80];            /* NAME-proxy */
	char proxy_address[48];    /* the proxy's fixed address on NAME-net */
	char dns[48];              /* the workload's resolver: an address nothing serves */
	char subnet[48];
	bool network_new;          /* egress_ensure made the network now: a workload that
				    * exists is not on it and must be replaced */
};
/* {"network", "proxy", "proxy_address", "proxy_url"}. New reference. */
json_t *egress_info_json(const struct egress_info *info);

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
typedef void egress_drain_cb(int error, void *arg);
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
