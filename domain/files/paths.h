/* paths.h — the guest path rules of behaviour-core §4, for both file planes:
 * lexical confinement (§4.1), the ancestor walk (§4.2), the verdict on each
 * stat of the walk (§4.3), the per-method bundles (§4.4), the working
 * directory beneath the storage base (§4.7), and the engine's path stat
 * header (engine-api §2.1) read into a SandboxEntry (§1.4).
 *
 * Pure: no I/O, no logging, no engine. The caller stats each step of a walk
 * (engine-side, unconfined, no-follow) and feeds the answers back in.
 *
 * How a file method uses it (archive plane):
 *   paths_plan_new(op, ...)            lexical refusals, before any freeze
 *   for each plan->walk[i]:            HEAD archive?path=walk[i]
 *       paths_stat_decode_header(...)  (404 naming this exact path → absent)
 *       paths_walk_verdict(st|NULL)    1: go on, 0: absent, stop; <0: refuse
 *   if plan->stat_leaf and the walk did not stop: stat plan->path
 *   paths_leaf_verdict(op, st|NULL)    (NULL when the leaf or a parent is absent)
 *
 * Errors: every failing function returns -errno and writes *reterr_reason.
 * The reason is the identity: paths_reason_outcome() names the wire type the
 * RPC layer maps it to, paths_reason_to_string() is the message (it holds the
 * seed's phrases: "backslash", "outside working directory", "real
 * directory", "not a regular file"). No wire codes here.
 *
 * Ownership: paths_plan_new → paths_plan_free; paths_confine_resolve and
 * paths_stat_decode_header fill a caller-owned struct on success only, released
 * with paths_resolved_release / paths_stat_release (both accept a zeroed
 * struct). paths_ancestors returns a NULL-terminated list freed with
 * paths_strv_free. */
#ifndef MSB_PATHS_H
#define MSB_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox.h"

/* The storage base when the caller names none (spec work_dir null). */
#define PATHS_DEFAULT_BASE        MSB_DEFAULT_WORK_DIR
/* Longest path (input path, working directory, base, or a resolved path), in
 * bytes without the NUL: Linux PATH_MAX less its NUL. */
#define PATHS_MAX_BYTES           4095
/* Longest component of a resolved path (Linux NAME_MAX). */
#define PATHS_NAME_MAX_BYTES      255
/* Most components of a resolved path. Each is one engine stat in a walk. */
#define PATHS_MAX_COMPONENTS      128
/* reclaim refuses a directory with fewer components than this ("/", "/etc"). */
#define PATHS_RECLAIM_MIN_COMPONENTS 2
/* Longest X-Docker-Container-Path-Stat value accepted (the engine's whole
 * header block is capped at ENGINE_HTTP_MAX_HEADER_BYTES anyway). */
#define PATHS_STAT_HEADER_MAX_BYTES (64 * 1024)
#define PATHS_STAT_HEADER         "X-Docker-Container-Path-Stat"

/* Go os.FileMode bits, as the stat header's "mode" carries them. */
#define PATHS_GO_MODE_DIR         (UINT32_C(1) << 31)
#define PATHS_GO_MODE_APPEND      (UINT32_C(1) << 30)
#define PATHS_GO_MODE_EXCLUSIVE   (UINT32_C(1) << 29)
#define PATHS_GO_MODE_TEMPORARY   (UINT32_C(1) << 28)
#define PATHS_GO_MODE_SYMLINK     (UINT32_C(1) << 27)
#define PATHS_GO_MODE_DEVICE      (UINT32_C(1) << 26)
#define PATHS_GO_MODE_NAMED_PIPE  (UINT32_C(1) << 25)
#define PATHS_GO_MODE_SOCKET      (UINT32_C(1) << 24)
#define PATHS_GO_MODE_SETUID      (UINT32_C(1) << 23)
#define PATHS_GO_MODE_SETGID      (UINT32_C(1) << 22)
#define PATHS_GO_MODE_CHAR_DEVICE (UINT32_C(1) << 21)
#define PATHS_GO_MODE_STICKY      (UINT32_C(1) << 20)
#define PATHS_GO_MODE_IRREGULAR   (UINT32_C(1) << 19)
#define PATHS_GO_MODE_PERM        UINT32_C(0777)
/* Go's ModeType: the bits that say what kind of file it is. */
#define PATHS_GO_MODE_TYPE (PATHS_GO_MODE_DIR | PATHS_GO_MODE_SYMLINK | PATHS_GO_MODE_NAMED_PIPE | \
			    PATHS_GO_MODE_SOCKET | PATHS_GO_MODE_DEVICE | PATHS_GO_MODE_CHAR_DEVICE | \
			    PATHS_GO_MODE_IRREGULAR)
/* Every bit Go defines; any other bit is refused. */
#define PATHS_GO_MODE_KNOWN (PATHS_GO_MODE_TYPE | PATHS_GO_MODE_APPEND | PATHS_GO_MODE_EXCLUSIVE | \
			     PATHS_GO_MODE_TEMPORARY | PATHS_GO_MODE_SETUID | PATHS_GO_MODE_SETGID | \
			     PATHS_GO_MODE_STICKY | PATHS_GO_MODE_PERM)

/* EntryKind (behaviour-core §1.3); the strings are the wire's. */
enum paths_kind {
	PATHS_KIND_FILE,
	PATHS_KIND_DIRECTORY,
	PATHS_KIND_SYMLINK,
	PATHS_KIND_OTHER,        /* fifo, socket, device, irregular */
	_PATHS_KIND_MAX,
};

/* The file methods; each has its bundle (§4.4, behaviour-docker §2.8). */
enum paths_op {
	PATHS_OP_WRITE,          /* write_file */
	PATHS_OP_READ,           /* read_file */
	PATHS_OP_STAT,           /* stat_file */
	PATHS_OP_LIST,           /* list_dir */
	PATHS_OP_DELETE,         /* remove */
	PATHS_OP_RECLAIM,        /* reclaim */
	_PATHS_OP_MAX,
};

/* The wire type a refusal maps to (the seed's exception names; ValueError
 * upstream is ConfinementError here). */
enum paths_outcome {
	PATHS_OUTCOME_CONFINEMENT,        /* "ConfinementError" */
	PATHS_OUTCOME_NOT_A_DIRECTORY,    /* "NotADirectoryError" */
	PATHS_OUTCOME_FILE_NOT_FOUND,     /* "FileNotFoundError" */
	PATHS_OUTCOME_OS_ERROR,           /* "OSError" */
	PATHS_OUTCOME_INVALID_PARAMS,     /* "InvalidParams": over a path limit */
	PATHS_OUTCOME_ENGINE,             /* "EngineError": the engine's answer is malformed */
	PATHS_OUTCOME_INTERNAL,           /* "InternalError": a caller's bug (bad base) */
	_PATHS_OUTCOME_MAX,
};

/* Why a path was refused. Each reason has one errno, one outcome, one message. */
enum paths_reason {
	PATHS_R_BACKSLASH,           /* -EINVAL   Confinement */
	PATHS_R_NUL,                 /* -EINVAL   Confinement */
	PATHS_R_OUTSIDE,             /* -EPERM    Confinement: escapes the working directory */
	PATHS_R_WD_OUTSIDE_BASE,     /* -EPERM    Confinement: a relative wd escapes the base */
	PATHS_R_WORKING_DIRECTORY,   /* -EPERM    Confinement: write/remove/reclaim of the wd itself */
	PATHS_R_NEAR_ROOT,           /* -EPERM    Confinement: reclaim "close to the root" */
	PATHS_R_SYMLINK_ANCESTOR,    /* -ELOOP    Confinement: "real directory" */
	PATHS_R_SYMLINK_LEAF,        /* -ELOOP    Confinement: a write would land where it points */
	PATHS_R_NOT_A_DIRECTORY,     /* -ENOTDIR  NotADirectory */
	PATHS_R_NOT_FOUND,           /* -ENOENT   FileNotFound */
	PATHS_R_NOT_REGULAR,         /* -EINVAL   OSError: "not a regular file" */
	PATHS_R_IS_DIRECTORY,        /* -EISDIR   OSError: a write over a directory */
	PATHS_R_TOO_LONG,            /* -ENAMETOOLONG InvalidParams: over PATHS_MAX_BYTES */
	PATHS_R_NAME_TOO_LONG,       /* -ENAMETOOLONG InvalidParams: a component over 255 */
	PATHS_R_TOO_MANY_COMPONENTS, /* -E2BIG    InvalidParams: over PATHS_MAX_COMPONENTS */
	PATHS_R_BASE_INVALID,        /* -EINVAL   Internal: the base is not absolute */
	PATHS_R_STAT_TOO_LONG,       /* -EMSGSIZE Engine: header over PATHS_STAT_HEADER_MAX_BYTES */
	PATHS_R_STAT_BASE64,         /* -EPROTO   Engine: not standard padded base64 */
	PATHS_R_STAT_JSON,           /* -EPROTO   Engine: not a JSON object */
	PATHS_R_STAT_FIELD,          /* -EPROTO   Engine: a member missing or of the wrong type */
	PATHS_R_STAT_SIZE,           /* -EPROTO   Engine: size negative */
	PATHS_R_STAT_MODE,           /* -EPROTO   Engine: mode out of range, unknown or contradictory bits */
	PATHS_R_STAT_MTIME,          /* -EPROTO   Engine: mtime not RFC 3339 */
	_PATHS_R_MAX,
};

/* Each returns a static string, or NULL for a value out of range. */
const char *paths_kind_to_string(enum paths_kind kind);      /* "file", "directory", ... */
const char *paths_op_to_string(enum paths_op op);            /* "write", "read", ... */
const char *paths_outcome_to_string(enum paths_outcome o);   /* "ConfinementError", ... */
const char *paths_reason_to_string(enum paths_reason r);     /* the message */
/* The wire type of a reason (PATHS_OUTCOME_INTERNAL for one out of range). */
enum paths_outcome paths_reason_outcome(enum paths_reason r);
/* A refusal as the wire error (ConfinementError, NotADirectoryError,
 * FileNotFoundError, OSError, -32602, EngineError, InternalError); path
 * (or NULL) goes in its data, "" as ".". Both file planes and the front
 * end (fileop_error_from_reason) map through it. */
struct msb_error;
void paths_error_from_reason(enum paths_reason reason, const char *path, struct msb_error *reterr);

/* ---- lexical confinement (§4.1, §4.7) ----------------------------------- */

struct paths_resolved {
	char *path;      /* absolute, normalised guest path (one leading slash) */
	char *wd;        /* the working directory, absolute and normalised */
	const char *rel; /* path relative to wd, "" for wd itself; points into path.
			  * NULL only for an absolute reclaim target outside the wd */
	bool is_wd;      /* path is the working directory itself */
};

/* Resolves path against working_directory, which is absolute or relative to
 * base ("" and "." name the base; NULL = the base). base NULL = the default.
 * Lengths: SIZE_MAX means strlen(); an explicit length lets an embedded NUL be
 * seen and refused. POSIX rules, purely lexical: "." and "" are the working
 * directory, ".." climbs, "//" is "/", an absolute path replaces the working
 * directory before normalising, and containment compares with the separator
 * (/w-outside is not inside /w). The working directory itself is accepted
 * here; is_wd tells (the write/remove bundles refuse it).
 * Refusals: PATHS_R_NUL, PATHS_R_BACKSLASH (anywhere in path, working
 * directory or base), PATHS_R_TOO_LONG (any input or result over
 * PATHS_MAX_BYTES), PATHS_R_BASE_INVALID (base relative),
 * PATHS_R_WD_OUTSIDE_BASE, PATHS_R_OUTSIDE, PATHS_R_NAME_TOO_LONG,
 * PATHS_R_TOO_MANY_COMPONENTS. Fills *ret on success only. */
int paths_confine_resolve(const char *path, size_t path_len, const char *working_directory,
			  size_t wd_len, const char *base, struct paths_resolved *ret,
			  enum paths_reason *reterr_reason);
void paths_resolved_release(struct paths_resolved *r);

/* The remainder of path below base ("" when equal), or NULL when path is not
 * base or beneath it. Both absolute and normalised; base "/" holds every
 * absolute path. Points into path. */
const char *paths_relative_to(const char *path, const char *base);

/* ---- the ancestor walk (§4.2) -------------------------------------------- */

/* Every directory from the root down to guest_path (include_self) or to its
 * parent (not), outermost first; "/" itself is never listed, so "/" and (not
 * include_self) "/x" give an empty list. guest_path must be absolute and
 * normalised (a paths_resolved path). Stores the count in *ret_n (may be
 * NULL). Returns a NULL-terminated list, never NULL. */
char **paths_ancestors(const char *guest_path, bool include_self, size_t *ret_n);
/* Frees a NULL-terminated list and its strings. NULL-safe; returns NULL. */
char **paths_strv_free(char **strv);

/* ---- the engine's stat (engine-api §2.1) --------------------------------- */

struct paths_stat {
	char *name;           /* the final component, as the engine names it */
	uint64_t size;        /* as reported; meaningful for files only */
	uint32_t mode;        /* the Go FileMode as sent */
	enum paths_kind kind;
	uint32_t perm;        /* POSIX 07777: rwx bits plus setuid/setgid/sticky */
	int64_t mtime_sec;    /* seconds since the epoch, UTC */
	uint32_t mtime_nsec;
	char *link_target;    /* "" unless the final component is a symlink */
};

/* Go FileMode → kind and POSIX permission bits. No type bit = FILE; DIR =
 * DIRECTORY; SYMLINK = SYMLINK; any other type bit (named pipe, socket,
 * device, char device, irregular) = OTHER. DIR or SYMLINK together with any
 * other type bit, or a bit Go does not define, is refused (-EPROTO,
 * PATHS_R_STAT_MODE). The Plan 9 bits (append, exclusive, temporary) are
 * accepted and ignored. */
int paths_go_mode_decode(uint32_t mode, enum paths_kind *ret_kind, uint32_t *ret_perm,
			 enum paths_reason *reterr_reason);
/* POSIX st_mode → kind (for a plane that stats locally). */
enum paths_kind paths_kind_from_st_mode(mode_t st_mode);

/* Decodes an X-Docker-Container-Path-Stat value (NUL-terminated, as the
 * HTTP layer hands it): standard padded base64, no whitespace, canonical
 * padding bits → a JSON object (duplicate members refused) with "name"
 * (string), "size" (integer >= 0), "mode" (integer, a uint32 Go FileMode,
 * see paths_go_mode_decode), "mtime" (RFC 3339 string, Go's time format) and
 * "linkTarget" (string). Unknown members are ignored. Refusals:
 * PATHS_R_STAT_TOO_LONG, _BASE64, _JSON, _FIELD, _SIZE, _MODE, _MTIME. Fills
 * *ret on success only. */
int paths_stat_decode_header(const char *value, struct paths_stat *ret,
			     enum paths_reason *reterr_reason);
void paths_stat_release(struct paths_stat *st);

/* A SandboxEntry (§1.4): {"path": rel ("" becomes "."), "kind": ...,
 * "size": size for a FILE, null for every other kind}. New reference. */
json_t *paths_entry_encode(const char *rel, const struct paths_stat *st);

/* ---- verdicts (§4.3, §4.4) ----------------------------------------------- */

/* One stat of the walk (st NULL = the engine said this exact path is not
 * there). Returns 1 for a real directory (walk on), 0 for absent (the walk
 * ends: nothing below exists), -ELOOP for a symlink (PATHS_R_SYMLINK_ANCESTOR)
 * and -ENOTDIR for anything else (PATHS_R_NOT_A_DIRECTORY). */
int paths_walk_verdict(const struct paths_stat *st, enum paths_reason *reterr_reason);

/* The leaf after a clean walk (st NULL = the leaf or one of its parents is
 * absent). Returns 0 to go on or -errno:
 *   WRITE   absent fine; SYMLINK → PATHS_R_SYMLINK_LEAF; DIRECTORY → PATHS_R_IS_DIRECTORY
 *   READ    absent → PATHS_R_NOT_FOUND; not FILE → PATHS_R_NOT_REGULAR
 *   STAT    always 0 (absent means "no entry"; a link is described, not refused)
 *   LIST    absent → PATHS_R_NOT_FOUND; SYMLINK → PATHS_R_SYMLINK_ANCESTOR;
 *           not DIRECTORY → PATHS_R_NOT_A_DIRECTORY
 *   DELETE, RECLAIM  always 0 (the target is never resolved) */
int paths_leaf_verdict(enum paths_op op, const struct paths_stat *st,
		       enum paths_reason *reterr_reason);

/* ---- the bundles (§4.4) --------------------------------------------------- */

struct paths_plan {
	enum paths_op op;
	struct paths_resolved target;
	char **walk;             /* stat each, outermost first; NULL-terminated, never NULL */
	size_t n_walk;
	size_t walk_owned_from;  /* first walk index at or below the wd, or strictly
				  * below the storage base (n_walk if none): a write
				  * creates missing directories from here down, the
				  * guest's (the archive plane; the local plane makes
				  * every directory with the guest's own credentials) */
	bool stat_leaf;          /* after the walk, stat target.path (WRITE, READ, STAT) */
};

/* Lexical confinement (paths_confine_resolve) and the bundle of op:
 *   WRITE   refuse the wd itself; walk excludes the target; stat the leaf
 *   READ    walk excludes the target; stat the leaf
 *   STAT    walk excludes the target; stat the leaf
 *   LIST    walk includes the target (listing through a link is an escape)
 *   DELETE  refuse the wd itself; walk excludes the target, never resolved
 *   RECLAIM no walk. An absolute path is only normalised; a relative one
 *           must be inside the wd and not the wd itself. Then fewer than
 *           PATHS_RECLAIM_MIN_COMPONENTS components → PATHS_R_NEAR_ROOT.
 * Arguments as paths_confine_resolve. On success *ret_plan is set. */
int paths_plan_new(enum paths_op op, const char *path, size_t path_len,
		   const char *working_directory, size_t wd_len, const char *base,
		   struct paths_plan **ret_plan, enum paths_reason *reterr_reason);
/* NULL-safe; returns NULL. */
struct paths_plan *paths_plan_free(struct paths_plan *plan);

/* ---- exec working directories (issue 17, finding 14) ---------------------- */

/* The pseudo filesystems an exec's working directory may not be under:
 * what is there is the kernel's view of some process (/proc/self/cwd,
 * /proc/self/fd/N name the runtime's own descriptors while it starts the
 * command), not the container's files. */
#define PATHS_PSEUDO_FS_ROOTS { "/proc", "/sys", "/dev" }

/* The root of PATHS_PSEUDO_FS_ROOTS that the normalised absolute path
 * (paths_confine_resolve's) is, or is beneath ("/proc", "/proc/self/cwd";
 * not "/processes"), or NULL. Lexical only: a link elsewhere that points
 * there is left to the runtime's own check. */
const char *paths_pseudo_fs_root(const char *abs_path);

#endif
