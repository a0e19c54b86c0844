/* plane.h — between the file-operation front end (fileop.c) and the two
 * planes that serve its operations: the archive plane (plane_archive.c:
 * the freeze, the engine's stat walk, one archive PUT or GETs, the thaw)
 * and the local plane (plane_local.c: openat2 beneath the pinned init's
 * root). The front end owns the op (its items, its deadline, its
 * outcome, its state) and chooses the plane; the plane drives the op
 * from start to fileop_done, keeping its own fields behind
 * fileop_plane_data.
 *
 * Every change of an op's state goes through fileop_enter (logged at
 * debug level). A plane ends an op once: fileop_done, or a failure
 * (fileop_fail*: the first failure is kept, then the plane's wind_up
 * brings it to fileop_done — the archive plane thaws first).
 *
 * The front end's header (fileop.h) is not included here: fileop.c
 * includes this one, the planes include both. */
#ifndef MSB_FILE_PLANE_H
#define MSB_FILE_PLANE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "errors.h"
#include "sha256.h"

struct domain;
struct fileop;
struct fileop_params;
struct fileop_table;
struct msbd_config;

enum fop_state {
	FOP_NEW,
	FOP_FREEZE,       /* waiting for (or issuing) the pause; every op starts here */
	FOP_WALK,         /* archive: HEAD of a walk directory */
	FOP_LEAF,         /* archive: HEAD of an item's own path */
	FOP_CONFIRM,      /* archive: inspect: an absence must not be a gone container */
	FOP_PUT,          /* archive: the one archive PUT */
	FOP_GET,          /* archive: one archive GET per read item */
	FOP_THAW,         /* archive: the unpause */
	FOP_PIN,          /* local: inspect for the init's pid */
	FOP_LOCAL,        /* local: between the slices of a removal */
	FOP_FDWAIT,       /* local: a removal waiting for its share of the fd budget */
	FOP_CLEAN,        /* archive: rm of a write's temporaries, after the thaw */
	FOP_DONE,
	_FOP_STATE_MAX,
};

const char *fop_state_to_string(enum fop_state s);

/* A plane: what the front end calls. */
struct file_plane {
	const char *name;
	/* Serves the started op (in FOP_FREEZE, its deadline running). */
	void (*start)(struct fileop *op);
	/* A failure is recorded: the plane's way to fileop_done (the archive
	 * plane thaws a granted freeze first). */
	void (*wind_up)(struct fileop *op);
	/* The deadline passed, or the daemon stops, and the outcome already
	 * stands (an archive write landed): what is left is cut short, true.
	 * false: the op is to be aborted. */
	bool (*settled)(struct fileop *op);
	/* Ends the op early (its error set): the request in flight is
	 * cancelled, the guest thawed before the callback. */
	void (*abort)(struct fileop *op);
	/* Frees what the plane holds for op (fileop_free; a fall-back); the
	 * front end forgets its plane data then. */
	void (*release)(struct fileop *op);
};

extern const struct file_plane file_plane_archive;
extern const struct file_plane file_plane_local;

/* ---- the front end, for the planes ---------------------------------------- */

/* What a plane's state of an op begins with: the op and what it reads of
 * it (the items are fixed once the op is started). */
struct fileop_view {
	struct fileop *fop;
	struct domain *d;
	const struct fileop_params *p;
	const char *id;
	struct fileop_item *items;
	size_t n_items;
};
struct fileop_view fileop_view(struct fileop *op);

struct fileop_table *fileop_table_of(const struct fileop *op);   /* NULL: the daemon keeps no table */
enum fop_state fileop_state(const struct fileop *op);
/* The one way an op changes state (logged at debug level). */
void fileop_enter(struct fileop *op, enum fop_state state);
/* The deadline passed (or the daemon stops): op->err is set. */
bool fileop_timed_out(const struct fileop *op);
/* The op's outcome (the first failure; code 0 while none). */
struct msb_error *fileop_error(struct fileop *op);
/* The plane's own state of op. */
void *fileop_plane_data(const struct fileop *op);
void fileop_set_plane_data(struct fileop *op, void *data);
/* The local plane serves it (fileop_served_locally). */
void fileop_set_served_locally(struct fileop *op);
/* sandbox.init: the engine's docker-init is bound in the container. */
bool fileop_init_on(const struct fileop *op);

/* The end: the deadline stopped, the callback queued. */
void fileop_done(struct fileop *op);
/* The first failure wins (later ones are only logged), then wind_up. */
void fileop_fail(struct fileop *op, int code, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void fileop_fail_error(struct fileop *op, struct msb_error *e);
/* A failed engine request. -ECANCELED after the deadline is the timeout. */
void fileop_fail_engine(struct fileop *op, int error, long status, const char *message, const char *what);
/* The local plane cannot pin this sandbox's init (files.plane = auto):
 * the archive plane serves the op, from its start. */
void fileop_fall_back(struct fileop *op);

/* files.journal_dir, made (0700) and opened once per table; -1 when there
 * is none (t NULL, or no journal_dir). */
int fileop_journal_fd(struct fileop_table *t, const struct msbd_config *c);
/* The descriptor once opened, else -1 (never opens). */
int fileop_journal_fd_opened(const struct fileop_table *t);
/* The journal's replay in progress (journal.c), kept by the table. */
void **fileop_table_replayer(struct fileop_table *t);
/* This daemon's engine, as journal entries name it (sha256 hex of its
 * endpoint): daemons sharing files.journal_dir on other engines never
 * take each other's entries. NULL when the endpoint is not known. */
const char *fileop_engine_ident(const struct domain *d, char buf[SHA256_HEX_BYTES]);

/* ---- the local plane's state, shared by its ops (plane_local.c) ------------ */

/* The pins of the sandboxes' inits and the removal fd budget; the front
 * end's table holds it. */
struct plocal_shared;
struct plocal_shared *plocal_shared_new(void);
struct plocal_shared *plocal_shared_free(struct plocal_shared *s);   /* NULL-safe; returns NULL */
struct plocal_shared *fileop_table_local(const struct fileop_table *t);
size_t plocal_shared_fds_in_use(const struct plocal_shared *s);

#endif
