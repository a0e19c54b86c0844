/* registry.h — the daemon's view of the sandboxes (workload containers with
 * our labels), kept in memory. Labels are the durable record (ARCHITECTURE
 * decision 3): the registry is rebuilt from a listing at start and after a
 * lost /events stream, and kept current by events, so a warm acquire costs
 * no engine request. Proxies (maf-sandbox.role=proxy) are not entries.
 *
 * Ownership: the registry owns its entries; a pointer to an entry is valid
 * until the next registry call that can remove (replace_all, apply_event,
 * remove, free). Pure: no I/O; a watcher (registry_watch_inits) hears when
 * an entry's init goes. */
#ifndef MSB_REGISTRY_H
#define MSB_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>

#include "identity.h"

#define REGISTRY_ID_LEN 64

/* Which file plane serves a sandbox (fileop.h): decided at its first file
 * call (or its acquire), kept while its init lives. */
enum sandbox_plane {
	SANDBOX_PLANE_UNKNOWN,
	SANDBOX_PLANE_LOCAL,
	SANDBOX_PLANE_ARCHIVE,
};

enum sandbox_state {
	SANDBOX_CREATED,
	SANDBOX_RUNNING,
	SANDBOX_PAUSED,
	SANDBOX_EXITED,
	SANDBOX_OTHER,      /* restarting, removing, dead, or unknown */
	_SANDBOX_STATE_MAX,
};

const char *sandbox_state_to_string(enum sandbox_state s);
/* Docker's State.Status / list "State" string → state. */
enum sandbox_state sandbox_state_from_docker(const char *s);

/* Exec starts remembered per sandbox (the ring below). */
#define SANDBOX_EXEC_STARTS 64

struct sandbox {
	char *id;              /* 64 hex */
	char *name;            /* without a leading '/' */
	json_t *labels;        /* the container's labels (owned) */
	char *image;           /* Config.Image (the list's Image): the reference as the engine keeps it */
	char *image_id;        /* the image's id ("sha256:..."), NULL when not known */
	time_t created;        /* unix seconds; 0 if unknown */
	enum sandbox_state state;
	bool has_owner;
	uid_t owner;
	bool seen;             /* scratch for replace_all */
	uint64_t event_seq;    /* the registry's event count when an event last changed it */
	/* The guest's uid:gid (guest.h), fixed when the daemon first serves
	 * the sandbox; kept while the entry lives (a resync keeps entries it
	 * still lists). Written only by guest.c (guest_fix, through
	 * identity_fixed_set); its uid:gid read as guest_identity_fixed gives
	 * it (unresolved: 0:0). */
	struct identity_fixed guest;
	uint32_t probes_passed; /* MSB_BIT(capability) whose command probe passed (acquire.c) */
	/* Reset at every start, restart and death (a new init is looked up
	 * and pinned again by the local plane, plane_local.h). */
	enum sandbox_plane plane;
	/* The starts of this daemon's latest sandbox.exec runs in it (m_exec.c
	 * records them, execend.c reads them: a timed-out exec's orphans are only those started before the next
	 * exec's start, execkill.h until): a ring, by sequence (0: unused). */
	struct sandbox_exec_start {
		uint64_t seq;
		unsigned long long tick;   /* clock ticks since boot (execkill_now_ticks) */
	} exec_starts[SANDBOX_EXEC_STARTS];
	uint64_t exec_start_seq;   /* the last sequence given */
	TAILQ_ENTRY(sandbox) entry;
};

struct registry;

struct registry *registry_new(void);
/* NULL-safe; returns NULL. */
struct registry *registry_free(struct registry *r);

struct sandbox *registry_find_name(const struct registry *r, const char *name);
struct sandbox *registry_find_id(const struct registry *r, const char *id);
struct sandbox *registry_first(const struct registry *r);
struct sandbox *registry_next(const struct sandbox *sb);
size_t registry_count(const struct registry *r);

/* From one item of GET /containers/json (Id, Names, Labels, State, Created,
 * Image) or one GET /containers/{id}/json (Id, Name, Config.Labels,
 * State.Status / State.Paused, Created, Config.Image). Adds or updates;
 * returns the entry, or NULL if the object is not one of our workloads. */
struct sandbox *registry_update_from_summary(struct registry *r, const json_t *item);
/* since: registry_event_seq() taken when the inspect was sent. An inspect
 * never overrides an event that arrived after it was sent, and never brings
 * back a destroyed id. */
struct sandbox *registry_update_from_inspect(struct registry *r, const json_t *inspect, uint64_t since);
/* Events applied so far (a clock for the rule above). */
uint64_t registry_event_seq(const struct registry *r);

/* Resynchronisation: between begin and replace_all, events are applied and
 * also kept; replace_all installs the listing, then replays them in order,
 * so a listing taken before an event can never undo it. */
void registry_begin_resync(struct registry *r);
/* A container listing (array of summaries) replaces the whole view. */
void registry_replace_all(struct registry *r, const json_t *list);
/* One /events object: create/start/die/stop/kill/pause/unpause/destroy of a
 * container with our labels. Unknown events are ignored. A destroyed id is
 * remembered (the last REGISTRY_TOMBSTONES) and never re-added. */
#define REGISTRY_TOMBSTONES 4096
/* Events kept during one resync; past this the resync is started again. */
#define REGISTRY_RESYNC_EVENTS_MAX 65536
void registry_apply_event(struct registry *r, const json_t *event);
void registry_remove(struct registry *r, struct sandbox *sb);

/* The watcher told when an entry's init goes: at every start, restart and
 * death of its container, and when the entry goes (removed, destroyed,
 * replaced, the registry freed). The local plane's pins go then
 * (plane_local.h). Last, when the registry itself is freed, id NULL: the
 * watcher must forget it. One watcher; fn NULL: none. */
typedef void registry_init_gone_fn(void *arg, const char *id);
void registry_watch_inits(struct registry *r, registry_init_gone_fn *fn, void *arg);

/* Naming a sandbox (PROTOCOL.md "Naming a sandbox"): a client names one
 * by its full id, a unique prefix of its id of at least
 * REGISTRY_PREFIX_MIN hex digits (either case), or its name (with or
 * without docker's leading '/'). Tried in that order, among the entries
 * reach(sb, arg) admits only (another user's are never matched, counted
 * or listed). Returns 0 and *ret_sb; -ENOENT nothing matched; -EINVAL
 * hex digits too few to be a prefix (and so no name: every name is
 * maf-sandbox-docker-<hex>); -ENOTUNIQ a prefix of several ids: the
 * first max_candidates of them in *reterr_candidates (borrowed, as for
 * any entry pointer; the array is scratch on the other outcomes) and how
 * many in all in *reterr_matches. */
#define REGISTRY_PREFIX_MIN 12
/* Candidates an ambiguity error lists (the count says how many in all). */
#define REGISTRY_CANDIDATES_MAX 16
typedef bool registry_reach_fn(const struct sandbox *sb, void *arg);
int registry_resolve(const struct registry *r, const char *given, registry_reach_fn *reach, void *arg,
		     struct sandbox **ret_sb, struct sandbox **reterr_candidates, size_t max_candidates,
		     size_t *reterr_matches);

/* The value of label key, or NULL. */
const char *sandbox_label(const struct sandbox *sb, const char *key);

#endif
