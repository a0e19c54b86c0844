/* plane_local.h — the local file plane (ARCHITECTURE decision 6): when the
 * engine runs on this host, a container's files are reached beneath
 * /proc/<init pid>/root, and every path is resolved by the kernel with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS):
 * each component atomically, no link followed anywhere on the way, never
 * outside the container's root. No freeze, no tar, no engine round trip.
 *
 * The same refusals as the archive plane (paths.h reasons), so one
 * conformance suite holds for both:
 *   a link on the way      ELOOP   → ConfinementError (PATHS_R_SYMLINK_ANCESTOR)
 *   a non-directory on it  ENOTDIR → NotADirectoryError
 *   absent                 ENOENT  → no entry / FileNotFoundError / success,
 *                                     as each method's bundle says
 *
 * Authority (behaviour-core §4.5, the reach rule): every call that acts for
 * the guest runs with the guest's credentials — plocal_cred_enter() sets
 * the thread's supplementary groups to none, its fsgid and fsuid to the
 * guest's and clears its effective capability set, so the kernel's own
 * permission checks (search, write, sticky directories, unlink) are the
 * guest's, exactly. plocal_cred_leave() puts back what was there, and a
 * failure to put it back is fatal: the daemon never goes on with the
 * guest's credentials. These are per-thread credentials (raw syscalls, not
 * glibc's process-wide setgroups), and the daemon is single-threaded: the
 * switch brackets a run of synchronous syscalls on the loop thread, with
 * no callback, no allocation failure path and no other request in
 * between, so nothing else ever runs with them. A root guest is uid 0
 * without capabilities, as a sandbox is under sandbox.cap_drop_all (the
 * default): it owns what root owns, and nothing more. Directories a write
 * must make are the guest's, above the working directory too (the archive
 * plane's engine makes those root's). Only the work directory's
 * preparation at acquire (plocal_prepare) acts with the daemon's own
 * authority, as the archive plane does: the chain above the storage base
 * is root's, the base itself is given to the guest.
 *
 * Mount points: a file call never replaces or removes a mount (a bind-
 * mounted /etc/resolv.conf, a tmpfs): a write over one, a removal of one,
 * a removal that meets one are refused (OSError, errno EBUSY, data.mount):
 * seen from the daemon's mount namespace, an unlink or a rename over
 * another namespace's mount point succeeds and detaches it.
 *
 * Reads open an O_PATH handle without following the final component,
 * check it is a regular file with one link on an ordinary filesystem (not
 * proc, sys, cgroup...), and reopen that very inode through
 * /proc/self/fd — a FIFO or a device is never opened. Writes go to a
 * temporary name made O_CREAT|O_EXCL|O_NOFOLLOW in the final directory,
 * renamed over the final name with renameat (a link there is replaced,
 * never followed). Removals go through O_DIRECTORY|O_NOFOLLOW handles and
 * unlinkat, never following a link and never crossing a mount point, a
 * slice at a time (the caller yields to the loop between slices).
 *
 * Pid pinning: a container's init is held with a pidfd; the root is opened
 * through /proc/<pid>/root and then the pidfd is asked whether that process
 * still lives — if it does, the pid was never recycled in between, so the
 * root is the container's. A pin is made only after /proc/<pid>/cgroup is
 * seen to name the container id (a recycled pid, or a daemon in another
 * pid namespace, fails here) and the process's user namespace maps ids
 * one to one (a remapped engine is left to the archive plane).
 *
 * The syscalls return msb_errors the RPC layer sends as they are, and log
 * nothing. The driver (plane.h: file_plane_local) serves a fileop with
 * them: the pin (an inspect for State.Pid, when no live pin is kept), then
 * the syscalls (a removal a slice at a time, yielding to the loop between
 * slices, within its share of files.removal_fd_budget). The pins are the
 * local plane's own, kept by container id (plocal_pins_*) and dropped when
 * the registry says the init went (a start, a restart, a death) or the
 * entry did. */
#ifndef MSB_PLANE_LOCAL_H
#define MSB_PLANE_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "errors.h"
#include "paths.h"

/* Directory levels a recursive removal descends below its target; deeper
 * trees are refused (OSError). */
#define PLOCAL_MAX_DEPTH          256
/* Descriptors one removal in progress holds at most, whatever the tree's
 * depth: the target's parent, the directory being emptied, and one more
 * for a moment while it steps down or back up (ancestors are reopened
 * through "..", checked to be the very directory it stepped down from).
 * Removals share files.removal_fd_budget in these units. */
#define PLOCAL_RM_FDS             3
/* Directory entries a removal takes per slice before it yields to the loop. */
#define PLOCAL_REMOVE_SLICE       1024
/* Default ceiling of entries one listing returns (files.list_max_entries). */
#define PLOCAL_LIST_MAX_ENTRIES   10000
/* Entries a listing reads beyond its ceiling (the daemon's temporaries,
 * which it never lists): past max_entries + this, the listing is refused
 * like one over its ceiling (a guest's flood of temporary-looking names is
 * never scanned whole). */
#define PLOCAL_LIST_SCAN_SLACK    1024
/* Times a resolution is retried when the kernel answers EAGAIN (a rename
 * or mount raced a lookup). */
#define PLOCAL_EAGAIN_RETRIES     8
/* Longest link target reported by a stat. */
#define PLOCAL_LINK_MAX_BYTES     4095

/* Whether this daemon can serve the local plane at all: it runs as root
 * (it opens other processes' roots), openat2 and pidfds exist, and it may
 * take a guest's credentials (setfsuid, setfsgid, setgroups, capset: a
 * service manager's bounding set or syscall filter can forbid them; each
 * is tried and undone). 0, or -errno with *reterr_why (static). */
int plocal_available(const char **reterr_why);

/* ---- who acts ----------------------------------------------------------- */

struct plocal_cred {
	uid_t uid;
	gid_t gid;
};

struct plocal_saved {
	uid_t fsuid;
	gid_t fsgid;
	gid_t *groups;
	int n_groups;
	uint32_t cap_eff[2];
	bool entered;
};

/* Takes the guest's credentials (see above). Fatal on failure. */
void plocal_cred_enter(const struct plocal_cred *c, struct plocal_saved *s);
/* Puts the daemon's back. Fatal on failure. NULL-safe on a saved that was
 * never entered. */
void plocal_cred_leave(struct plocal_saved *s);

/* ---- pinning -------------------------------------------------------------- */

struct plocal_pin {
	pid_t pid;
	int pidfd;        /* -1: not pinned */
};

#define PLOCAL_PIN_INIT { 0, -1 }

/* Pins pid as the init of container id (64 hex): -ESRCH the process is
 * gone, -ENOENT its cgroup does not name the container (a recycled pid, or
 * another pid namespace), -EOPNOTSUPP its user namespace remaps ids,
 * -errno otherwise. */
int plocal_pin_open(pid_t pid, const char *id, struct plocal_pin *ret);
void plocal_pin_close(struct plocal_pin *pin);
bool plocal_pin_valid(const struct plocal_pin *pin);
/* The pins the local plane keeps, one per container id (64 hex), in its
 * state shared by its operations (plane.h, struct plocal_shared). */
#define PLOCAL_ID_LEN 64
struct plocal_shared;
struct registry;
/* id's pin, or NULL. */
const struct plocal_pin *plocal_pins_find(const struct plocal_shared *s, const char *id);
/* Keeps pin (taken; one already kept for id is closed) and returns where
 * it is kept. r (or NULL): the registry whose entry for id holds the init;
 * the pin is dropped when it tells the init or the entry went
 * (registry_watch_inits). */
const struct plocal_pin *plocal_pins_set(struct plocal_shared *s, struct registry *r, const char *id,
					 struct plocal_pin pin);
/* Closes and forgets id's pin (none: nothing). */
void plocal_pins_drop(struct plocal_shared *s, const char *id);

/* Opens the pinned process's root (O_PATH|O_DIRECTORY). -ESRCH when the
 * pinned process has exited (the pin is stale: re-pin), -errno otherwise. */
int plocal_root_open(const struct plocal_pin *pin, int *ret_fd);

/* ---- operations --------------------------------------------------------- */
/* root: a directory fd standing for the container's "/"; plan: the method's
 * bundle (paths_plan_new). Each returns 0, or -errno with *reterr set. */

/* STAT: *ret_found false = nothing there; else *ret_st (release with
 * paths_stat_release). */
int plocal_stat(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool *ret_found,
		struct paths_stat *ret_st, struct msb_error *reterr);
/* READ: the bytes of a regular file with one link; over max_bytes →
 * TransferCapExceeded, never truncated. *ret_data malloc'd (non-NULL). */
int plocal_read(int root, const struct paths_plan *plan, const struct plocal_cred *c, uint64_t max_bytes,
		uint8_t **ret_data, size_t *ret_len, struct paths_stat *ret_st, struct msb_error *reterr);
/* The temporary a write makes in the final directory:
 * ".maf-sandbox-<16 hex>.tmp". files.list never shows such a name. */
#define PLOCAL_TEMP_PREFIX        ".maf-sandbox-"
#define PLOCAL_TEMP_SUFFIX        ".tmp"
#define PLOCAL_TEMP_NAME_MAX      64
/* Bytes of one journal entry (id, parent path, temporary name, engine). */
#define PLOCAL_JOURNAL_ENTRY_MAX  (4096 + 256 + 128)
void plocal_temp_name(char *buf, size_t size);
bool plocal_name_is_temp(const char *name);

/* The journal of temporaries in progress (files.journal_dir): dirfd, the
 * directory (the daemon's, 0700); id, the container's. */
struct plocal_journal {
	int dirfd;
	const char *id;
	const char *engine;   /* the engine's identity (no newline), or NULL */
};

/* WRITE: missing parents made (mode 0755), the file (mode 0644) replaced
 * whole by a rename; all as c. A leaf that is a mount point is refused
 * (OSError, errno EBUSY, data.mount), a directory on a pseudo filesystem
 * too (OSError, errno EXDEV). j (or NULL): the temporary is journalled
 * there, with the daemon's authority, before it is made, and forgotten
 * after the rename (or its removal). */
int plocal_write(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		 const struct plocal_journal *j, const uint8_t *data, size_t len, struct msb_error *reterr);
/* plocal_write with the file's permission bits (mode & 0777; the
 * caller refuses setuid, setgid and sticky): the temporary is created
 * with no bit beyond them (and 0644) and set to them before the rename,
 * as c (the guest owns what it made). */
#define PLOCAL_WRITE_MODE_MASK 0777
int plocal_write_mode(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		      const struct plocal_journal *j, const uint8_t *data, size_t len, mode_t mode,
		      struct msb_error *reterr);

/* Journal entries, one file per temporary named after it. begin → an fd
 * holding the entry's lock (pass it to end), or -errno; end removes the
 * entry and closes fd. An entry is published whole and locked (written
 * unnamed, O_TMPFILE, then linked at its name): a taker never sees it
 * empty nor unlocked while its writer lives. */
int plocal_journal_begin(const struct plocal_journal *j, const char *parent, const char *tmp);
void plocal_journal_end(const struct plocal_journal *j, const char *tmp, int fd);
/* A dead writer's entry name in dirfd, read and locked: -EBUSY while a live
 * daemon holds it, -EINVAL not an entry's name, -EBADMSG malformed. Release
 * with plocal_journal_entry_release (its lock goes with it). */
struct plocal_journal_entry {
	char *id;
	char *parent;      /* the temporary's directory, absolute in the guest */
	char *tmp;
	char *engine;      /* the writer's engine identity; NULL in an entry of an older daemon */
	int lock_fd;
};
int plocal_journal_take(int dirfd, const char *name, struct plocal_journal_entry *ret);
void plocal_journal_entry_release(struct plocal_journal_entry *e);
/* Removes a leftover temporary tmp in the guest directory parent beneath
 * root, with the daemon's authority and the guest resolution rules (no
 * link, never outside root): only a regular file named as a temporary,
 * never a mount point. 0 also when absent, -errno. */
int plocal_temp_remove(int root, const char *parent, const char *tmp);
/* What a write would meet, without writing: a refusal of the path (a link
 * or a file on the way, a link or a directory at the leaf). A multi-file
 * write checks every entry before it writes any. */
int plocal_write_check(int root, const struct paths_plan *plan, const struct plocal_cred *c,
		       struct msb_error *reterr);
/* CHECK of a LIST-shaped plan (the work dir and its chain; for any other
 * plan, the target's parent): *ret_missing when some directory of it is
 * absent. c NULL: with the daemon's own authority (acquire's check). */
int plocal_check(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool *ret_missing,
		 struct msb_error *reterr);
/* PREPARE: makes what is missing of the work dir's chain with the daemon's
 * authority — root-owned ancestors, the base itself owner's (mode 0755). */
int plocal_prepare(int root, const struct paths_plan *plan, const struct plocal_cred *owner,
		   struct msb_error *reterr);
/* LIST: the direct children of the plan's directory as SandboxEntries
 * {path (relative to the wd), kind, size}, sorted by name; a link is
 * named a link. Over max_entries → TransferCapExceeded. */
int plocal_list(int root, const struct paths_plan *plan, const struct plocal_cred *c, size_t max_entries,
		json_t **ret_entries, struct msb_error *reterr);

/* DELETE / RECLAIM, a slice at a time:
 *   plocal_rm_begin  → 1 done (missing, or a non-directory unlinked),
 *                      0 a tree to remove (*ret_rm set), <0 refused
 *   plocal_rm_step   → 1 done, 0 more to do, <0 failed
 * Credentials are taken and put back inside each call. */
struct plocal_rm;
int plocal_rm_begin(int root, const struct paths_plan *plan, const struct plocal_cred *c, bool recursive,
		    struct plocal_rm **ret_rm, struct msb_error *reterr);
int plocal_rm_step(struct plocal_rm *rm, size_t budget, struct msb_error *reterr);
/* NULL-safe; returns NULL. */
struct plocal_rm *plocal_rm_free(struct plocal_rm *rm);

#endif
