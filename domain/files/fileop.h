/* fileop.h — file operations: one operation over one or more paths of
 * one container. The front end (fileop.c) owns the op, its deadline and
 * its outcome, and chooses the plane serving it; the planes sit behind one
 * interface (plane.h): the archive plane (plane_archive.c) and the local
 * plane (plane_local.c). The journal's replay is journal.c's.
 *
 * The archive plane is the frozen section (behaviour-docker §2.3–2.6,
 * §2.1 step 16): the operation runs entirely under one freeze of it.
 *
 *   FREEZE ──granted──→ WALK (HEAD each directory of each item's plan,
 *      │                      outermost first; a cache shares answers
 *      │                      between items; the first absent one ends an
 *      │                      item's walk)
 *      │                 → LEAF (HEAD the item's own path, if its plan says)
 *      │                 → CONFIRM (an absence the answer depends on: the
 *      │                      container is inspected, so "absent" is never
 *      │                      a gone container)
 *      │                 → ACT (WRITE/PREPARE: one PUT of one tar at "/";
 *      │                      READ: one GET per item, streamed and capped)
 *      └─ refused ─→ DONE       → THAW (always, whatever happened)
 *                                  → CLEAN (WRITE: /bin/rm -f of its temporaries
 *                                     in the guest, as the guest, then, if that
 *                                     failed, as root: the engine wrote them as
 *                                     root) → DONE
 *
 * A WRITE's tar holds each file's content under a temporary name in its
 * final directory, then a hard link entry putting it at the final name (the
 * engine removes what was there first): a tar cut short leaves at most the
 * temporary, never a short file. Each temporary is journalled in
 * files.journal_dir before the PUT and forgotten once removed; the next
 * start of a daemon removes what a killed one left (fileop_journal_replay).
 * Writes over, and removals of, the container's mount points, and archive
 * writes beneath /proc, /sys and /dev, are refused before any engine
 * request (fileop_archive_mount_check).
 *
 * Local removals (REMOVE, RECLAIM) hold descriptors across slices: each
 * takes its share of files.removal_fd_budget before it opens anything, and
 * waits its turn (FIFO, within its deadline) when the budget is spent.
 *
 * A deadline covers the whole operation, the wait for the freeze included:
 * on expiry the request in flight is cancelled, the freeze released (or
 * withdrawn) and the operation fails with MSB_ERR_TIMEOUT once the guest is
 * thawed. The callback fires exactly once, from the loop, after the thaw
 * has been answered (or could not be sent), so a caller that replies from
 * it never replies while the guest is still frozen by this operation.
 *
 * The local plane (plane_local.h) serves the same operations when the
 * daemon's plane is local and the sandbox's init can be pinned: no freeze,
 * no walk of engine stats, the kernel resolves each path beneath the
 * container's root with the guest's credentials.
 *
 *   PIN (inspect: State.Pid; only when no live pin is held) → LOCAL (the
 *      syscalls; a removal a slice at a time, yielding to the loop between
 *      slices) → DONE
 *
 * A pin that cannot be made (another pid namespace, a remapped user
 * namespace, no /proc/<pid>/root) sends the sandbox to the archive plane
 * for good under files.plane=auto, and fails the call under local.
 *
 * Ownership: fileop_new → the caller adds items → fileop_start; the
 * operation frees itself after its callback returns. Before fileop_start,
 * fileop_free discards it. */
#ifndef MSB_FILEOP_H
#define MSB_FILEOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "errors.h"
#include "paths.h"

struct domain;
struct fileop;

enum fileop_kind {
	FILEOP_WRITE,     /* items are PATHS_OP_WRITE plans with content */
	FILEOP_READ,      /* items are PATHS_OP_READ plans */
	FILEOP_STAT,      /* items are PATHS_OP_STAT plans */
	FILEOP_PREPARE,   /* one PATHS_OP_LIST plan of the work dir: make what is missing */
	FILEOP_CHECK,     /* the walk only, NOT frozen: does the work dir's chain exist
			   * (a LIST plan)? The daemon's authority. */
	FILEOP_LIST,      /* one PATHS_OP_LIST plan: its children (local plane only;
			   * the archive plane refuses it, SandboxCapabilityNotSupported) */
	FILEOP_REMOVE,    /* one PATHS_OP_DELETE plan. Local: removed here, as the
			   * guest. Archive: the walk only, NOT frozen — it classifies
			   * the path and the caller runs rm in the guest */
	FILEOP_RECLAIM,   /* one PATHS_OP_RECLAIM plan, recursive. Local: removed here,
			   * as the guest. Archive: nothing (the caller runs rm) */
	_FILEOP_KIND_MAX,
};

const char *fileop_kind_to_string(enum fileop_kind k);

struct fileop_params {
	enum fileop_kind kind;
	const char *id;          /* the container (64 hex); copied */
	uid_t uid;               /* WRITE, PREPARE: the owner stamped on what is made */
	gid_t gid;
	uint64_t max_bytes;      /* READ: per file */
	uint64_t max_total;      /* READ: all files together */
	long timeout_ms;         /* the whole operation; > 0 */
	/* READ only: an item's own refusal (absent, not a regular file, over
	 * max_bytes, a path refusal) is kept in its err and the others go on,
	 * instead of failing the operation. For reads of guest databases. */
	bool per_item_errors;
	bool recursive;          /* REMOVE */
	size_t max_entries;      /* LIST: more children are refused (0: PLOCAL_LIST_MAX_ENTRIES) */
};

struct fileop_item {
	struct paths_plan *plan;     /* owned */
	/* WRITE */
	uint8_t *data;               /* owned; NULL when size is 0 */
	size_t size;
	uint32_t mode;               /* permission bits (fileop_set_item_mode) */
	bool mode_set;               /* else FILEOP_WRITE_MODE_DEFAULT */
	/* STAT, READ results */
	bool found;                  /* the leaf is there (st filled) */
	struct paths_stat st;
	uint8_t *out;                /* READ: the file's bytes (owned; non-NULL once read) */
	size_t out_len;
	size_t out_cap;              /* bytes allocated at out */
	json_t *entries;             /* LIST: the children (owned) */
	/* per_item_errors: this item's refusal (code 0 when none) */
	struct msb_error err;
	/* internal */
	size_t walk_next;            /* next walk index to stat */
	bool walk_ended;             /* an absent directory ended the walk */
	size_t walk_absent_from;     /* the first absent walk index (n_walk when none) */
};

/* err is NULL on success, else the failure (lent). The items stay readable
 * for the callback's duration (fileop_item). */
typedef void fileop_cb(struct fileop *op, const struct msb_error *err, void *arg);

struct fileop *fileop_new(struct domain *d, const struct fileop_params *p);
/* Adds an item; takes plan and data (both freed with the op, also on
 * failure). WRITE items need data (size bytes); others pass NULL, 0.
 * Returns the item's index. */
size_t fileop_add(struct fileop *op, struct paths_plan *plan, uint8_t *data, size_t size);
size_t fileop_count(const struct fileop *op);
/* Before fileop_start: the owner stamped (WRITE, PREPARE), the per-file cap (READ). */
void fileop_set_owner(struct fileop *op, uid_t uid, gid_t gid);
void fileop_set_max_bytes(struct fileop *op, uint64_t max_bytes);
/* Before fileop_start: a WRITE item's permission bits (0..0777; setuid,
 * setgid and sticky are the caller's to refuse). Both planes apply them
 * with the content, never after it lands: the tar entry's mode (archive),
 * the temporary's before its rename (local). Default 0644. */
#define FILEOP_WRITE_MODE_MASK    0777u
#define FILEOP_WRITE_MODE_DEFAULT 0644u
void fileop_set_item_mode(struct fileop *op, size_t i, uint32_t mode);
/* The mode an item is written with. */
uint32_t fileop_item_mode(const struct fileop_item *it);
/* Before fileop_start: REMOVE of a directory with what it holds. */
void fileop_set_recursive(struct fileop *op, bool recursive);
struct fileop_item *fileop_item(struct fileop *op, size_t i);

/* Starts: the callback fires exactly once, from the loop (never from inside
 * this call). The op belongs to itself from here on. */
void fileop_start(struct fileop *op, fileop_cb *cb, void *arg);
/* Discards an op that was never started. NULL-safe; returns NULL. */
struct fileop *fileop_free(struct fileop *op);
/* The operation's result is no longer wanted (the caller is going away):
 * the callback will not fire, but the operation still runs to its end —
 * the guest is thawed exactly as it would have been. */
void fileop_abandon(struct fileop *op);
/* From the callback: true when the local plane served the operation
 * (REMOVE and RECLAIM are then done; the archive plane leaves them to the
 * caller's rm). */
bool fileop_served_locally(const struct fileop *op);

/* Every operation in flight, so a stopping daemon can end them cleanly. */
struct fileop_table;
struct fileop_table *fileop_table_new(void);
/* Every op must have completed. NULL-safe; returns NULL. */
struct fileop_table *fileop_table_free(struct fileop_table *t);
size_t fileop_table_count(const struct fileop_table *t);
/* The daemon stops (drain deadline): each started op ends as at its own
 * deadline, but with MSB_ERR_SHUTTING_DOWN — its request is cancelled and
 * the guest thawed while the engine is still there. */
void fileop_table_cancel_all(struct fileop_table *t);

/* Whether the local plane serves sb's file calls (or would try to: an
 * undecided sandbox gets the daemon's plane). sb may be NULL. */
struct sandbox;
bool fileop_plane_local(const struct domain *d, const struct sandbox *sb);
/* The refusal of files.list on the archive plane (SandboxCapabilityNotSupported). */
void fileop_error_no_listing(struct msb_error *reterr);

/* The archive plane's mount rule (files.write, files.remove,
 * files.reclaim), before any engine request: a write at or beneath /proc,
 * /sys or /dev (the engine's archive API writes into the image's directory
 * beneath those mounts, hidden from the guest) → OSError errno EXDEV; a
 * write over, or a removal of, a mount point of the container (those, and
 * /dev/shm, /dev/pts, /dev/mqueue, /sys/fs/cgroup, /etc/resolv.conf,
 * /etc/hostname, /etc/hosts), or a removal of a directory holding one →
 * OSError errno EBUSY. data.mount names the mount. path: absolute,
 * normalised; rel as the caller sees it. 0 or -errno with *reterr. The
 * local plane applies it to removals too (the kernel's own answer covers
 * its writes and any other mount a removal meets). */
int fileop_archive_mount_check(enum fileop_kind kind, const char *path, const char *rel,
			       struct msb_error *reterr);

/* fileop_archive_mount_check, and the engine's bind of /sbin/docker-init
 * (a mount point when init: sandbox.init, HostConfig.Init). */
int fileop_archive_mount_check_init(enum fileop_kind kind, const char *path, const char *rel, bool init,
				    struct msb_error *reterr);

/* The archive plane's removal of a write's temporaries (after the write,
 * and in the journal's replay): this binary, as this user (the authority
 * the engine's archive API wrote them with, whoever the guest is). An
 * image without it keeps the temporaries (the log says so). */
#define FILEOP_CLEAN_RM   "/bin/rm"
#define FILEOP_CLEAN_USER "0:0"

/* Descriptors of files.removal_fd_budget the removals in progress hold. */
size_t fileop_table_fds_in_use(const struct fileop_table *t);

/* Once the registry is known (daemon start): every journal entry of
 * files.journal_dir no live daemon holds is a temporary a killed daemon
 * left; each is removed (local plane: unlinked beneath the pinned root,
 * with the daemon's authority and the guest's resolution rules; archive
 * plane: rm in the guest), then its entry. */
void fileop_journal_replay(struct domain *d);
/* Entries one sandbox may leave in the journal (its writes' temporaries
 * that could not be removed); past it a write's are not journalled. */
#define FILEOP_JOURNAL_MAX_PER_SANDBOX 64
/* Journal entries the replay has in flight at once (an inspect, then an rm). */
#define FILEOP_REPLAY_BATCH 4
/* A sandbox's container is gone (disposed): its journal entries no live
 * daemon holds, of this engine (or of no named engine), are dropped. */
void fileop_journal_forget(struct domain *d, const char *id);

/* A paths refusal as the wire error (ConfinementError, NotADirectoryError,
 * FileNotFoundError, OSError, -32602, EngineError, InternalError). */
void fileop_error_from_reason(enum paths_reason reason, const char *path, struct msb_error *reterr);

#endif
