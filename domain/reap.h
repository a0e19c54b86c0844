/* reap.h — the operator's age-based sweep (behaviour-docker §2.13): remove
 * every sandbox topology (workload, egress proxy, internal network) whose
 * age anchor is older than a cutoff, by engine ID, from an inventory read
 * from the engine alone (labels are the durable record), never from memory.
 *
 *   LIST containers → INSPECT each → LIST networks → INSPECT each   (inventory)
 *     → plan (group by workload name, anchor, strict cutoff)
 *     → REVALIDATE each expired anchor by ID
 *     → REMOVE proxies → workloads → networks, by ID                 (removal)
 *
 * The removal is the disposals' removal run (dispose.h): each proxy drained
 * first, what is gone leaving the domain's tables.
 *
 * Any inventory or revalidation failure → one "unlisted" failure and no
 * removal at all. A removal failure is reported on its own and the sweep
 * goes on. Requests are made one at a time (bounded memory, no storm).
 *
 * The pure core (time parsing, the cutoff, item validation, planning) is
 * exposed for the unit tests; it does no I/O. */
#ifndef MSB_REAP_H
#define MSB_REAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "names.h"
#include "rfc3339.h"

#define REAP_ID_HEX        NAMES_ID_HEX    /* a full engine ID: 64 lowercase hex */
#define REAP_NAME_MAX      NAMES_CONTAINER_MAX   /* fits NAME, NAME-proxy, NAME-net and a NUL */
/* A label value (names_label_value: at most 63 bytes) and a NUL. */
#define REAP_SCOPE_LABEL_MAX 64
/* A dry run lists at most this many workloads in would_dispose (the first
 * by name, reap_plan's order; would_dispose_count counts every one), so that its
 * reply keeps within the bound of a method without its own
 * (REPLYBOUND_DEFAULT_BYTES, 64 KiB): one entry takes at most
 * REAP_DRY_RUN_ENTRY_MAX_BYTES on the wire (a 63-byte scope label escaped). */
#define REAP_DRY_RUN_LISTED_MAX      64
#define REAP_DRY_RUN_ENTRY_MAX_BYTES 640
/* More IDs than this in one listing → "unlisted" (the sweep is refused). */
#define REAP_MAX_RESOURCES 65536
/* 0001-01-01T00:00:00Z, the earliest time there is (Python's datetime.min):
 * a cutoff before it has overflowed, and nothing expires. */
#define REAP_TIME_MIN_S    (-62135596800LL)
#define REAP_NSEC_PER_S    1000000000

/* Failure codes (behaviour-docker §2.13). */
#define REAP_CODE_UNLISTED    "unlisted"     /* inventory or revalidation unreadable */
#define REAP_CODE_REFUSED     "refused"      /* the engine answered, the resource remains */
#define REAP_CODE_UNREACHABLE "unreachable"  /* the request itself failed */
#define REAP_CODE_TIMEOUT     "timeout"      /* the removal's outcome is unknown */
#define REAP_CODE_UNKNOWN     "unknown"      /* the daemon stopped before it was done */

/* ---- the driver ----------------------------------------------------------- */

struct domain;

/* The result: counts of successful removals and the failures. */
struct reap_result {
	size_t disposed;            /* workload containers removed */
	size_t proxies_removed;
	size_t networks_removed;
	json_t *failures;           /* [{"code", "detail"}], in the order they happened */
	/* A dry run (reap_start_dry): nothing removed, the counts above 0. */
	bool dry_run;
	json_t *would_dispose;      /* [{"sandbox", "name", "scope", "created"}]: the workloads,
	                             * at most REAP_DRY_RUN_LISTED_MAX of them */
	size_t would_dispose_count; /* every workload that would go, listed or not */
	size_t would_remove_proxies;
	size_t would_remove_networks;
};
typedef void reap_done_cb(const struct reap_result *result, void *arg);   /* result borrowed */

/* Starts a sweep of everything older than older_than_s seconds (strictly),
 * optionally only one scope (scope raw, label_value applied; NULL = every
 * scope). now is the clock (seconds since the epoch, fractional) — a seam
 * for tests. Returns 0 (done fires once, from the loop) or a negative errno
 * (-EINVAL for older_than_s <= 0 or a non-finite now, with no engine call;
 * -ENOTCONN when the engine is unreachable) and then done never fires.
 * Removed workloads leave d->registry. When the engine is freed mid-sweep
 * (cancelled requests), the sweep stops starting requests and done fires
 * with what it did and an "unlisted" or "unknown" failure. */
int reap_start(struct domain *d, int64_t older_than_s, const char *scope, double now,
	       reap_done_cb *done, void *arg);

/* reap_start, or with dry_run the same inventory, plan and revalidation
 * (the same selection) that stops where removal would start: done's result
 * has dry_run, would_dispose (each workload: its ID, name, scope label and
 * creation time, RFC 3339 UTC) and the proxies' and networks' counts, and
 * nothing is removed. */
int reap_start_dry(struct domain *d, int64_t older_than_s, const char *scope, double now, bool dry_run,
		   reap_done_cb *done, void *arg);

/* The wire form {"disposed", "proxies_removed", "networks_removed",
 * "failures"}, and for a dry run also "dry_run": true, "would_dispose",
 * "would_dispose_count", "would_remove_proxies", "would_remove_networks".
 * New reference. */
json_t *reap_result_to_json(const struct reap_result *result);

/* ---- the pure core ---------------------------------------------------------- */

/* cutoff = now − older_than_s. false when there is none — older_than_s <= 0,
 * now not finite or out of range, or the cutoff falls before REAP_TIME_MIN_S
 * (overflow: nothing expires). */
bool reap_cutoff(double now, int64_t older_than_s, struct rfc3339_time *ret_cutoff);

/* 64 lowercase hex characters, nothing else. */
bool reap_id_is_valid(const char *id);

enum reap_listing {
	REAP_LISTING_CONTAINERS,
	REAP_LISTING_NETWORKS,
	_REAP_LISTING_MAX,
};

const char *reap_listing_to_string(enum reap_listing l);

/* The listing filters: name ^maf-sandbox-docker-, the presence of the four
 * identity labels, and scope=scope_value when scope_value is not NULL
 * (already label_value'd). New reference. */
json_t *reap_list_filters(const char *scope_value);

enum reap_kind {
	REAP_WORKLOAD,
	REAP_PROXY,
	REAP_NETWORK,
	_REAP_KIND_MAX,
};

const char *reap_kind_to_string(enum reap_kind k);

struct reap_item {
	enum reap_kind kind;
	char id[REAP_ID_HEX + 1];
	char name[REAP_NAME_MAX];      /* without a leading '/' */
	char group[REAP_NAME_MAX];     /* the workload's name: name less -proxy / -net */
	char scope[REAP_SCOPE_LABEL_MAX]; /* its scope label (label_value of the scope; a longer
	                                   * label, which the daemon never writes, as label_value of it) */
	struct rfc3339_time created;
	bool anchor;                   /* reap_plan: its group's age anchor */
	bool expired;                  /* reap_plan: its group's anchor is older than the cutoff */
	bool held;                     /* the driver: keep the rest of this group */
};

/* Validates one inspect document (borrowed) of the resource listed as
 * listed_id, in listing l:
 *   - the document, its Id (== listed_id, itself valid), Name (a string) or
 *     Created (RFC 3339 with a zone) unreadable → -EBADMSG, *reterr_detail
 *     (malloc'd) says why: the sweep must stop ("unlisted");
 *   - not ours → 0 (skipped, never removed): a name not fully
 *     maf-sandbox-docker-[0-9a-f]{12} (+ "-proxy" for a container, + "-net"
 *     for a network), one of the four identity labels (Config.Labels for a
 *     container, Labels for a network) missing or empty, scope_value given
 *     (label_value'd) and the scope label different, or for a container
 *     maf-sandbox.role=proxy not present exactly when the name ends in
 *     -proxy (a workload carries no role label);
 *   - ours → 1, *ret_item filled (anchor/expired/held false). */
int reap_item_from_inspect(enum reap_listing l, const char *listed_id, const json_t *inspect,
			   const char *scope_value, struct reap_item *ret_item, char **reterr_detail);

/* Groups items by workload name: sorts them by group, then kind (workload,
 * proxy, network), then youngest first, and marks each group's age anchor —
 * its workload if present, else its proxy, else its network (the youngest
 * of that kind) — and, on every item of the group, expired = anchor created
 * strictly before *cutoff (cutoff NULL: nothing expires). So a rebuilt
 * proxy or network never extends an old workload, and a young orphan proxy
 * keeps its older network. */
void reap_plan(struct reap_item *items, size_t n, const struct rfc3339_time *cutoff);

/* A dry run's selection from planned items (the removal's: expired, its
 * group not held): result's would_dispose (created if NULL; at most
 * REAP_DRY_RUN_LISTED_MAX entries), would_dispose_count and the proxies'
 * and networks' counts. */
void reap_dry_result(const struct reap_item *items, size_t n, struct reap_result *result);

#endif
