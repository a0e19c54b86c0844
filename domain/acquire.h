/* acquire.h — sandbox.acquire as a state machine driven by engine
 * completions (ARCHITECTURE decision 5, STYLE G7):
 *
 *   INSPECT ─ absent ──────────────→ OS_CHECK → IMAGE_INSPECT ─ absent → PULL ─┐
 *     │                                              │ present                 │
 *     │                                              └──────────→ CREATE ←─────┘
 *     ├ running ───────────────────→ DONE               │ 409 → INSPECT (adopt, once)
 *     ├ paused → UNPAUSE ──────────→ DONE               ↓
 *     └ stopped → OS_CHECK → START ─ fails → REMOVE_STALE → (create path)
 *                              ↓ ok
 *                       INSPECT_FINAL → DONE
 *   Any failure after this op created the container → ROLLBACK_REMOVE → FAILED.
 *
 *   Every path to DONE first prepares (a warm acquire starts here):
 *   → IDENTITY (unless known) → WORKDIR_STAT ─ a directory ─→ PROBES → DONE
 *                                     └ absent, a link, … → WORKDIR_MAKE → PROBES → DONE
 *   only for specs that need them (any FILES_* or EXEC; behaviour-core §4.7).
 *   A failure here keeps the container (a retry of the key works on it).
 *
 * Concurrent acquires of one container name join the op in flight; all get
 * its outcome. Each caller is a waiter: who it is (struct acquire_caller)
 * and how it is answered (struct acquire_waiter_ops, the handler's: a
 * pending call). An op always completes from the loop (a deferred event),
 * never inside acquire_start, so a waiter is never answered before its
 * handler returns. Ownership: the table owns its ops; an op frees itself
 * when it completes. */
#ifndef MSB_ACQUIRE_H
#define MSB_ACQUIRE_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "errors.h"
#include "names.h"
#include "sandbox.h"

/* Ours, beside the seed's labels and LABEL_KEY_JSON (names.h): what the
 * container was made from, for the spec-conflict check and the listings: the image reference as the spec asked for it (image_id
 * if given, else image), and the spec's labels as a JSON object (raw: the
 * maf-sandbox.label.* labels may be digests). */
#define LABEL_IMAGE "maf-sandbox.image"
#define LABEL_LABELS_JSON "maf-sandbox.labels"
/* The most bytes of maf-sandbox.labels: longer spec labels are not
 * recorded raw (every engine event carries every label, and an event
 * longer than DOCKER_MAX_STREAM_LINE breaks the events stream for
 * everyone); the listing then shows the maf-sandbox.label.* values. A
 * label read back is taken only up to this size, and only as an object of
 * strings (anyone with the engine can write it). Also the most bytes of
 * keys and values a listing's labels carry (the rest left out). */
#define ACQUIRE_LABELS_JSON_MAX 8192
/* Keep a container alive whatever the image's own command does: the
 * entrypoint is kept (as the seed does) and the command becomes this. */
#define ACQUIRE_KEEPALIVE_CMD { "sleep", "infinity" }

struct domain;
struct acquire_table;
struct sandbox;

enum acq_state {
	ACQ_INSPECT,
	ACQ_UNPAUSE,
	ACQ_OS_CHECK,
	ACQ_IMAGE_INSPECT,
	ACQ_PULL,
	ACQ_CREATE,
	ACQ_START,
	ACQ_REMOVE_STALE,
	ACQ_INSPECT_FINAL,
	ACQ_ROLLBACK_REMOVE,
	ACQ_IDENTITY,        /* the guest's uid:gid (guest.h), once per instance */
	ACQ_WORKDIR_STAT,    /* HEAD of the work dir: a directory there → done */
	ACQ_WORKDIR_MAKE,    /* frozen walk from "/" and one tar of what is missing */
	ACQ_PROBES,          /* the spec's guest commands run (sh, rm, host tools), once per instance */
	ACQ_EGRESS,          /* allowlist: the network and proxy (egress.h), before create/start */
	ACQ_DONE,
	ACQ_FAILED,
	_ACQ_STATE_MAX,
};

const char *acq_state_to_string(enum acq_state s);

struct acquire_table *acquire_table_new(void);
/* Every op must have completed (engine_free cancels their requests first). */
struct acquire_table *acquire_table_free(struct acquire_table *t);
/* Ops in flight. */
size_t acquire_table_count(const struct acquire_table *t);
/* True if an acquire of this container name is in flight. */
bool acquire_in_flight(const struct acquire_table *t, const char *name);

/* Calls fn for each acquire in flight, with the labels its container has or
 * will have (borrowed for the call). */
typedef void acquire_visit_fn(const char *name, const json_t *labels, void *arg);
void acquire_foreach(const struct acquire_table *t, acquire_visit_fn *fn, void *arg);

/* Who asks for a sandbox: whose key space names it (acquire_key_space),
 * whose containers it may be served (acquire_check), and the owner of a
 * container its acquire makes (uid). */
struct acquire_caller {
	uid_t uid;
	gid_t gid;
	bool admin;        /* root or a member of sandbox.admin_group */
};

/* How an acquire answers one waiter: the starter's or joiner's (the
 * handler's, around its pending call), called with its arg. */
struct acquire_waiter_ops {
	/* The outcome, exactly once, from the loop: result (stolen) when the
	 * waiter is served, else err (lent). arg is not used after. */
	void (*done)(json_t *result, const struct msb_error *err, void *arg);
	/* Has the waiter left (its answer will be dropped)? One that has is
	 * never the one told "created". */
	bool (*detached)(void *arg);
	/* A progress notification while it waits (params stolen). */
	void (*notify)(const char *method, json_t *params, void *arg);
};

/* Starts, or joins, the cold acquire of name for caller, answered through
 * ops with arg. key_json and spec_json are the call's params (borrowed;
 * the op keeps references). The caller has validated them and matched the
 * declarations. Owner and work dir are checked per waiter when the op
 * completes; the answer always comes later, from the loop. */
void acquire_start(struct domain *d, const struct acquire_caller *caller, const struct acquire_waiter_ops *ops,
		   void *arg, const char *name, json_t *key_json, json_t *spec_json);

/* Starts, or joins, the preparation of a running, registered container
 * (sb) for a warm acquire whose spec needs a work dir or the guest's
 * identity. Same contract as acquire_start. */
void acquire_start_warm(struct domain *d, const struct acquire_caller *caller,
			const struct acquire_waiter_ops *ops, void *arg, const struct sandbox *sb,
			json_t *key_json, json_t *spec_json);
/* The key space caller's acquires are named in (names_container_ns):
 * NAMES_SEED_UID for root and the members of sandbox.admin_group (acting
 * for root: the seed's own names, so its containers are adopted); every
 * other caller's own uid, so no user's key ever names another's container. */
uid_t acquire_key_space(const struct domain *d, const struct acquire_caller *caller);

/* Does an acquire with this spec prepare anything (work dir, identity)? */
bool acquire_spec_needs_prepare(const struct msb_spec *spec);

/* May the container with these labels be served as name for key/spec to
 * caller? 0, or -EEXIST (not this key's; or made from another spec:
 * SandboxConflict with data.differences [{field, requested, existing}] for
 * work_dir, image / image_id and labels — see acquire_spec_differences) /
 * -EPERM (another owner's: PermissionDenied) with *reterr filled. image
 * and image_id: the container's Config.Image and image id as the engine
 * says (NULL: not known). Root and administrators (root's key space) are served a
 * container whose owner label is absent (the seed's), 0, their own uid or a
 * current administrator's (the environment's is_admin: may block, asked only then);
 * any other owner's (a user's from before per-owner keys, a former
 * administrator's) is -EEXIST SandboxConflict with data.owner. */
int acquire_check(const struct domain *d, const char *name, const struct msb_key *key,
		  const struct msb_spec *spec, const struct acquire_caller *caller, const json_t *labels,
		  const char *image, const char *image_id, struct msb_error *reterr);

/* The spec fields that shaped the container (PROTOCOL.md "Spec
 * conflicts") and differ from what it was made with: an array of {field,
 * requested, existing}, empty when none (new reference). The image is
 * compared with the maf-sandbox.image label; without it (the seed's, an
 * older daemon's) with Config.Image (image), unless the engine shows an
 * image id there; a requested image_id also matches the container's image
 * id. Without either, the image is not compared (served). Labels: the
 * spec's against the container's maf-sandbox.label.* (digested alike). */
json_t *acquire_spec_differences(const struct msb_spec *spec, const json_t *labels, const char *image,
				 const char *image_id);

/* The caller's labels of a container (the spec's at acquire): the raw
 * object of maf-sandbox.labels, else the maf-sandbox.label.* labels
 * without their prefix (values may be digests). New reference. */
json_t *acquire_user_labels(const json_t *labels);

/* The reply of a successful acquire, from a registry entry. New reference. */
struct sandbox;
struct egress_info;
/* egress: the allowlisted sandbox's network and proxy, or NULL. */
json_t *acquire_result(const struct domain *d, const struct sandbox *sb, const char *work_dir, bool created,
		       const struct egress_info *egress);
/* "local" or "archive": the plane serving sb's file calls (an undecided
 * sandbox gets the daemon's). */
const char *acquire_file_plane(const struct domain *d, const struct sandbox *sb);

#endif
