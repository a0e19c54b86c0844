#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "engine.h"
#include "errmap.h"
#include "execrun.h"
#include "fileop.h"
#include "freeze.h"
#include "log.h"
#include "plane_local.h"
#include "registry.h"
#include "sha256.h"
#include "tarball.h"
#include "xmalloc.h"

enum fop_state {
	FOP_NEW,
	FOP_FREEZE,       /* waiting for (or issuing) the pause */
	FOP_WALK,         /* HEAD of a walk directory */
	FOP_LEAF,         /* HEAD of an item's own path */
	FOP_CONFIRM,      /* inspect: an absence must not be a gone container */
	FOP_PUT,          /* the one archive PUT */
	FOP_GET,          /* one archive GET per read item */
	FOP_THAW,         /* the unpause */
	FOP_PIN,          /* local plane: inspect for the init's pid */
	FOP_LOCAL,        /* local plane: between the slices of a removal */
	FOP_FDWAIT,       /* local plane: a removal waiting for its share of the fd budget */
	FOP_CLEAN,        /* archive plane: rm of a write's temporaries, after the thaw */
	FOP_DONE,
};

/* The walk cache: one answer per directory, shared by the items. */
#define CACHE_DIR     1
#define CACHE_ABSENT  0
/* a refusal is stored as -1 - reason */

struct fileop {
	struct domain *d;
	struct fileop_params p;
	char *id;
	struct fileop_item *items;
	size_t n_items;
	enum fop_state state;
	struct freeze_claim *claim;
	bool held;                   /* the claim was granted and not yet released */
	struct engine_req *req;
	size_t cur;                  /* the item being worked on */
	json_t *cache;               /* path → CACHE_* */
	bool absence_seen;           /* an answer depends on an absence (READ, STAT) */
	struct tarball_reader *reader;
	bool read_done;
	struct msb_error err;        /* the first failure */
	struct msb_error pending;    /* a "not found" held until CONFIRM says the container is there */
	bool timed_out;
	bool clean_as_root;          /* the guest's rm of the temporaries failed: root's turn */
	struct event *deadline;
	struct event *finish_ev;
	fileop_cb *cb;
	void *arg;
	bool started;
	/* the local plane */
	bool local;                  /* served by it */
	int lookups;                 /* inspects for the init's pid (at most 2) */
	int root;                    /* the container's root, while serving */
	struct plocal_pin own_pin;   /* a pin no registry entry holds */
	struct plocal_rm *rm;        /* a removal in progress */
	struct event *slice_ev;      /* its next slice */
	TAILQ_ENTRY(fileop) entry;   /* in d->fileops, while started */
	struct fileop_table *table;
	/* the removal fd budget (files.removal_fd_budget) */
	bool fd_held;                /* FOP_RM_FDS of it are this op's */
	bool fd_waiting;             /* queued in table->fd_waiters */
	TAILQ_ENTRY(fileop) fd_entry;
	/* the journal of temporaries: each item's entry lock (archive write) */
	int *jfds;                   /* n_tmps entries, -1 once ended */
	char (*tmps)[PLOCAL_TEMP_NAME_MAX + PATHS_MAX_BYTES + 2];  /* the temporaries' guest paths */
	size_t n_tmps;
	struct execrun *clean;       /* the rm of the archive write's temporaries */
};

/* Descriptors one local removal holds: the container's root and the
 * removal's own (PLOCAL_RM_FDS). */
#define FOP_RM_FDS (PLOCAL_RM_FDS + 1)

struct fileop_table {
	TAILQ_HEAD(, fileop) ops;
	size_t count;
	size_t fd_in_use;            /* of the removal fd budget */
	TAILQ_HEAD(, fileop) fd_waiters;   /* FIFO */
	int journal_fd;              /* files.journal_dir, once opened (-1: not yet, or none) */
	bool journal_tried;
	struct fop_replayer *replayer;   /* the journal's replay in progress, or NULL */
};

static const char *const kind_names[_FILEOP_KIND_MAX] = {
	[FILEOP_WRITE] = "write",
	[FILEOP_READ] = "read",
	[FILEOP_STAT] = "stat",
	[FILEOP_PREPARE] = "prepare",
	[FILEOP_CHECK] = "check",
	[FILEOP_LIST] = "list",
	[FILEOP_REMOVE] = "remove",
	[FILEOP_RECLAIM] = "reclaim",
};

const char *fileop_kind_to_string(enum fileop_kind k)
{
	return (unsigned)k < _FILEOP_KIND_MAX ? kind_names[k] : NULL;
}

void fileop_error_from_reason(enum paths_reason reason, const char *path, struct msb_error *reterr)
{
	static const int codes[_PATHS_OUTCOME_MAX] = {
		[PATHS_OUTCOME_CONFINEMENT] = MSB_ERR_CONFINEMENT,
		[PATHS_OUTCOME_NOT_A_DIRECTORY] = MSB_ERR_NOT_A_DIRECTORY,
		[PATHS_OUTCOME_FILE_NOT_FOUND] = MSB_ERR_FILE_NOT_FOUND,
		[PATHS_OUTCOME_OS_ERROR] = MSB_ERR_OS_ERROR,
		[PATHS_OUTCOME_INVALID_PARAMS] = MSB_ERR_INVALID_PARAMS,
		[PATHS_OUTCOME_ENGINE] = MSB_ERR_ENGINE_ERROR,
		[PATHS_OUTCOME_INTERNAL] = MSB_ERR_INTERNAL,
	};
	enum paths_outcome o = paths_reason_outcome(reason);
	const char *msg = paths_reason_to_string(reason);

	msb_error_set(reterr, codes[o],
		      path && o != PATHS_OUTCOME_ENGINE && o != PATHS_OUTCOME_INTERNAL
		      ? json_pack("{s:s}", "path", path[0] ? path : ".") : NULL,
		      "%s", msg ? msg : "the path is refused");
}

/* ---- life cycle --------------------------------------------------------- */

static void fop_finish_cb(evutil_socket_t fd, short what, void *arg);
static void fop_deadline_cb(evutil_socket_t fd, short what, void *arg);
static void fop_fd_release(struct fileop *op);
static void fop_tmps_forget(struct fileop *op, bool removed);
static void fop_slice_cb(evutil_socket_t fd, short what, void *arg);

struct fileop *fileop_new(struct domain *d, const struct fileop_params *p)
{
	struct fileop *op = xcalloc(1, sizeof(*op));

	assert(p->timeout_ms > 0 && p->kind < _FILEOP_KIND_MAX);
	op->d = d;
	op->p = *p;
	op->id = xstrdup(p->id);
	op->p.id = op->id;
	op->cache = json_object();
	if (!op->cache)
		fatalx("%s: out of memory", __func__);
	op->finish_ev = event_new(d->base, -1, 0, fop_finish_cb, op);
	op->deadline = event_new(d->base, -1, 0, fop_deadline_cb, op);
	op->slice_ev = event_new(d->base, -1, 0, fop_slice_cb, op);
	op->root = -1;
	op->own_pin = (struct plocal_pin)PLOCAL_PIN_INIT;

	if (!op->finish_ev || !op->deadline || !op->slice_ev)
		fatalx("%s: cannot create an event", __func__);
	return op;
}

size_t fileop_add(struct fileop *op, struct paths_plan *plan, uint8_t *data, size_t size)
{
	struct fileop_item *it;

	assert(!op->started);
	op->items = xrealloc(op->items, (op->n_items + 1) * sizeof(*op->items));
	it = &op->items[op->n_items];
	*it = (struct fileop_item){ .plan = plan, .data = data, .size = size,
				    .walk_absent_from = plan->n_walk };
	return op->n_items++;
}

void fileop_set_item_mode(struct fileop *op, size_t i, uint32_t mode)
{
	assert(!op->started && i < op->n_items && !(mode & ~FILEOP_WRITE_MODE_MASK));
	op->items[i].mode = mode;
	op->items[i].mode_set = true;
}

uint32_t fileop_item_mode(const struct fileop_item *it)
{
	return it->mode_set ? it->mode : FILEOP_WRITE_MODE_DEFAULT;
}

void fileop_set_owner(struct fileop *op, uid_t uid, gid_t gid)
{
	assert(!op->started);
	op->p.uid = uid;
	op->p.gid = gid;
}

void fileop_set_max_bytes(struct fileop *op, uint64_t max_bytes)
{
	assert(!op->started);
	op->p.max_bytes = max_bytes;
}

void fileop_set_recursive(struct fileop *op, bool recursive)
{
	assert(!op->started);
	op->p.recursive = recursive;
}

size_t fileop_count(const struct fileop *op)
{
	return op->n_items;
}

struct fileop_item *fileop_item(struct fileop *op, size_t i)
{
	return i < op->n_items ? &op->items[i] : NULL;
}

struct fileop *fileop_free(struct fileop *op)
{
	if (!op)
		return NULL;
	for (size_t i = 0; i < op->n_items; i++) {
		struct fileop_item *it = &op->items[i];

		paths_plan_free(it->plan);
		free(it->data);
		free(it->out);
		paths_stat_release(&it->st);
		json_decref(it->entries);
		msb_error_clear(&it->err);
	}
	free(op->items);
	fop_fd_release(op);
	fop_tmps_forget(op, false);
	plocal_rm_free(op->rm);
	if (op->root >= 0)
		close(op->root);
	plocal_pin_close(&op->own_pin);
	if (op->slice_ev)
		event_free(op->slice_ev);
	if (op->table) {
		TAILQ_REMOVE(&op->table->ops, op, entry);
		op->table->count--;
	}
	tarball_reader_free(op->reader);
	json_decref(op->cache);
	msb_error_clear(&op->err);
	msb_error_clear(&op->pending);
	if (op->finish_ev)
		event_free(op->finish_ev);
	if (op->deadline)
		event_free(op->deadline);
	free(op->id);
	free(op);
	return NULL;
}

void fileop_abandon(struct fileop *op)
{
	op->cb = NULL;
}

bool fileop_served_locally(const struct fileop *op)
{
	return op->local;
}

static void fop_finish_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fileop *op = arg;

	(void)fd, (void)what;
	log_debug("op", "file %s on %.12s: %s", fileop_kind_to_string(op->p.kind), op->id,
		  op->err.code ? (op->err.message ? op->err.message : msb_error_name(op->err.code))
			       : "done");
	if (op->cb)
		op->cb(op, op->err.code ? &op->err : NULL, op->arg);
	fileop_free(op);
}

static void fop_done(struct fileop *op)
{
	fop_fd_release(op);
	op->state = FOP_DONE;
	op->req = NULL;
	event_del(op->deadline);
	event_active(op->finish_ev, EV_TIMEOUT, 0);
}

static void fop_clean_start(struct fileop *op);

/* After the thaw: an archive write's temporaries are removed (by rm in
 * the guest, which needs it thawed), then the op is done. */
static void fop_after_thaw(struct fileop *op)
{
	if (op->n_tmps && !op->timed_out) {
		fop_clean_start(op);
		return;
	}
	fop_done(op);
}

static void fop_thawed_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct fileop *op = arg;

	(void)claim, (void)error, (void)f;
	/* A failed thaw is the freeze table's warning; the call's outcome stands. */
	fop_after_thaw(op);
}

/* Every path out of a granted freeze comes through here. */
static void fop_thaw(struct fileop *op)
{
	op->req = NULL;
	if (!op->held) {
		fop_after_thaw(op);
		return;
	}
	op->held = false;
	op->state = FOP_THAW;
	if (freeze_release_then(op->claim, fop_thawed_cb, op) < 0)
		fop_after_thaw(op);
}

/* The first failure wins; later ones are only logged. */
static void fop_fail(struct fileop *op, int code, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fop_fail(struct fileop *op, int code, json_t *data, const char *fmt, ...)
{
	va_list ap;
	_cleanup_free_ char *msg = NULL;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	if (!op->err.code)
		msb_error_set(&op->err, code, data, "%s", msg ? msg : "file call failed");
	else
		json_decref(data);
	fop_thaw(op);
}

static void fop_fail_error(struct fileop *op, struct msb_error *e)
{
	if (!op->err.code) {
		op->err = *e;
		*e = (struct msb_error){ 0 };
	} else {
		msb_error_clear(e);
	}
	fop_thaw(op);
}

/* A failed engine request. -ECANCELED after our deadline is the timeout. */
static void fop_fail_engine(struct fileop *op, int error, long status, const char *message, const char *what)
{
	struct msb_error e = { 0 };
	struct docker_reply r = { .error = error, .status = status, .message = message };

	if (op->timed_out || op->err.code) {
		fop_thaw(op);
		return;
	}
	if (error == 0 && status == 404 && message && strstr(message, "No such container")) {
		msb_error_set(&e, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		fop_fail_error(op, &e);
		return;
	}
	errmap_docker(&r, what, &e);
	fop_fail_error(op, &e);
}

/* Ends op early (its deadline, or the daemon stopping): the request in
 * flight is cancelled, and the guest thawed before the callback. */
static void fop_abort(struct fileop *op)
{
	if (op->state == FOP_FDWAIT) {
		/* Still waiting for its share of the fd budget: nothing began. */
		fop_done(op);
		return;
	}
	if (op->state == FOP_CLEAN && op->clean) {
		/* Its callback runs now with -ECANCELED and finishes the op. */
		execrun_cancel(op->clean);
		return;
	}
	if (op->state == FOP_LOCAL) {
		/* Between two slices of a removal: it stops here. */
		event_del(op->slice_ev);
		op->rm = plocal_rm_free(op->rm);
		fop_done(op);
		return;
	}
	if (op->req) {
		/* Its callback runs now with -ECANCELED and thaws. */
		engine_req_cancel(op->req);
		return;
	}
	if (op->state == FOP_FREEZE && op->claim &&
	    freeze_claim_get_state(op->claim) == FREEZE_CLAIM_WAITING) {
		/* Still queued: withdrawn, nothing was paused. */
		struct freeze_claim *c = op->claim;

		op->claim = NULL;
		freeze_cancel(c);
		return;
	}
	if (op->state == FOP_FREEZE && op->claim) {
		/* The pause is in flight: its answer comes (under the engine's own
		 * deadline), then the thaw, then the callback — never before. */
		return;
	}
	if (op->state == FOP_FREEZE)
		fop_done(op);
}

static void fop_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fileop *op = arg;

	(void)fd, (void)what;
	if (op->state == FOP_THAW || op->state == FOP_DONE || op->timed_out)
		return;
	if (op->state == FOP_CLEAN && op->clean) {
		/* The write landed; only the rm of its temporary is cut short
		 * (its journal entry stays for the next start). */
		execrun_cancel(op->clean);
		return;
	}
	op->timed_out = true;
	msb_error_set(&op->err, MSB_ERR_TIMEOUT, json_pack("{s:I}", "timeout_ms", (json_int_t)op->p.timeout_ms),
		      "the file call did not finish within %ld ms", op->p.timeout_ms);
	log_warnx("file %s on %.12s: deadline passed in state %d", fileop_kind_to_string(op->p.kind),
		  op->id, op->state);
	fop_abort(op);
}

struct fileop_table *fileop_table_new(void)
{
	struct fileop_table *t = xcalloc(1, sizeof(*t));

	TAILQ_INIT(&t->ops);
	TAILQ_INIT(&t->fd_waiters);
	t->journal_fd = -1;
	return t;
}

struct fileop_table *fileop_table_free(struct fileop_table *t)
{
	if (!t)
		return NULL;
	assert(TAILQ_EMPTY(&t->ops));
	if (t->journal_fd >= 0)
		close(t->journal_fd);
	free(t);
	return NULL;
}

size_t fileop_table_count(const struct fileop_table *t)
{
	return t ? t->count : 0;
}

void fileop_table_cancel_all(struct fileop_table *t)
{
	struct fileop *op, *next;

	if (!t)
		return;
	for (op = TAILQ_FIRST(&t->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state == FOP_THAW || op->state == FOP_DONE || op->timed_out)
			continue;
		if (op->state == FOP_CLEAN && op->clean) {
			execrun_cancel(op->clean);     /* the write landed: its outcome stands */
			continue;
		}
		op->timed_out = true;
		if (!op->err.code)
			msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		fop_abort(op);
	}
}

/* ---- the removal fd budget ------------------------------------------------ */

static size_t fop_fd_budget(const struct domain *d)
{
	long b = d->config ? d->config->files_removal_fd_budget : 0;
	struct rlimit rl;

	if (b <= 0) {
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
			b = 4096;
		else
			b = (long)(rl.rlim_cur / 4);
	}
	return b < FOP_RM_FDS ? FOP_RM_FDS : (size_t)b;
}

/* Takes op's share, or queues it (FIFO): true when granted now. */
static bool fop_fd_take(struct fileop *op)
{
	struct fileop_table *t = op->table;

	if (!t || op->fd_held)
		return true;
	if (TAILQ_EMPTY(&t->fd_waiters) && t->fd_in_use + FOP_RM_FDS <= fop_fd_budget(op->d)) {
		t->fd_in_use += FOP_RM_FDS;
		op->fd_held = true;
		return true;
	}
	TAILQ_INSERT_TAIL(&t->fd_waiters, op, fd_entry);
	op->fd_waiting = true;
	return false;
}

/* Gives op's share back (or leaves the queue), and wakes the ops first in
 * line that now fit. */
static void fop_fd_release(struct fileop *op)
{
	struct fileop_table *t = op->table;
	struct fileop *w;

	if (!t)
		return;
	if (op->fd_waiting) {
		TAILQ_REMOVE(&t->fd_waiters, op, fd_entry);
		op->fd_waiting = false;
	}
	if (!op->fd_held)
		return;
	op->fd_held = false;
	t->fd_in_use -= FOP_RM_FDS;
	while ((w = TAILQ_FIRST(&t->fd_waiters)) && t->fd_in_use + FOP_RM_FDS <= fop_fd_budget(w->d)) {
		TAILQ_REMOVE(&t->fd_waiters, w, fd_entry);
		w->fd_waiting = false;
		w->fd_held = true;
		t->fd_in_use += FOP_RM_FDS;
		event_active(w->slice_ev, EV_TIMEOUT, 0);
	}
}

size_t fileop_table_fds_in_use(const struct fileop_table *t)
{
	return t ? t->fd_in_use : 0;
}

/* ---- the journal of temporaries --------------------------------------------- */

/* files.journal_dir, made (0700) and opened once; -1 when there is none. */
static int fop_journal_fd(struct fileop_table *t, const struct msbd_config *c)
{
	_cleanup_free_ char *parent = NULL;
	struct stat sb;
	char *slash;
	int fd;

	if (!t || t->journal_tried)
		return t ? t->journal_fd : -1;
	t->journal_tried = true;
	if (!c || !c->files_journal_dir || c->files_journal_dir[0] != '/') {
		log_warnx("files.journal_dir is not set: a daemon killed mid-write leaves its temporary file");
		return -1;
	}
	parent = xstrdup(c->files_journal_dir);
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (mkdir(parent, 0755) < 0 && errno != EEXIST)
			log_debug("files", "mkdir %s: %s", parent, strerror(errno));
	}
	if (mkdir(c->files_journal_dir, 0700) < 0 && errno != EEXIST) {
		log_warnx("files.journal_dir %s cannot be made: %s", c->files_journal_dir, strerror(errno));
		return -1;
	}
	fd = open(c->files_journal_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0 || sb.st_uid != geteuid() || (sb.st_mode & 022)) {
		log_warnx("files.journal_dir %s is not a directory of this daemon's user, writable by it alone",
			  c->files_journal_dir);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	t->journal_fd = fd;
	return fd;
}

/* This daemon's engine, as journal entries name it (sha256 hex of its
 * endpoint): daemons sharing files.journal_dir on other engines never take
 * each other's entries. NULL when the endpoint is not known. */
static const char *fop_engine_ident(const struct domain *d, char buf[SHA256_HEX_BYTES])
{
	const struct engine_endpoint *ep = d && d->engine ? engine_get_endpoint(d->engine) : NULL;

	if (!ep || !ep->host)
		return NULL;
	sha256_hex(ep->host, strlen(ep->host), buf);
	return buf;
}

/* Ends the journal entries of op's archive temporaries: removed (the
 * temporaries are gone) or only unlocked (left for the next start). */
static void fop_tmps_forget(struct fileop *op, bool removed)
{
	int jfd = op->table ? op->table->journal_fd : -1;

	for (size_t i = 0; i < op->n_tmps; i++) {
		if (op->jfds[i] < 0)
			continue;
		if (removed && jfd >= 0) {
			const struct plocal_journal j = { jfd, op->id, NULL };

			plocal_journal_end(&j, strrchr(op->tmps[i], '/') + 1, op->jfds[i]);
		} else {
			close(op->jfds[i]);
		}
		op->jfds[i] = -1;
	}
	free(op->jfds);
	free(op->tmps);
	op->jfds = NULL;
	op->tmps = NULL;
	op->n_tmps = 0;
}

/* A stream of the journal's entries from the start, on a descriptor of its
 * own (jfd stays open); NULL when there is no journal or it cannot be read. */
static DIR *fop_journal_opendir(int jfd)
{
	DIR *dir;
	int dfd;

	if (jfd < 0 || (dfd = dup(jfd)) < 0)
		return NULL;
	dir = fdopendir(dfd);
	if (!dir) {
		close(dfd);
		return NULL;
	}
	rewinddir(dir);
	return dir;
}

/* Entries of container id in the journal no live writer holds. */
static size_t fop_journal_count(int jfd, const char *id)
{
	struct dirent *de;
	size_t n = 0;
	DIR *dir = fop_journal_opendir(jfd);

	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		struct plocal_journal_entry e = { .lock_fd = -1 };

		if (!plocal_name_is_temp(de->d_name) || plocal_journal_take(jfd, de->d_name, &e) < 0)
			continue;
		n += strcmp(e.id, id) == 0;
		plocal_journal_entry_release(&e);
	}
	closedir(dir);
	return n;
}

/* The guest's words for the log: at most out_size - 1 bytes, the trailing
 * newline dropped, every other control byte and every non-ASCII byte a '?'
 * (a guest's stderr never starts a log record of its own). */
static void fop_log_text(char *out, size_t out_size, const uint8_t *in, size_t len)
{
	size_t n = 0;

	while (len && (in[len - 1] == '\n' || in[len - 1] == '\r'))
		len--;
	for (size_t i = 0; i < len && n + 1 < out_size; i++)
		out[n++] = in[i] >= 0x20 && in[i] < 0x7f ? (char)in[i] : '?';
	out[n] = '\0';
}

static void fop_clean_cb(const struct execrun_result *r, void *arg)
{
	struct fileop *op = arg;
	bool ok = r->error == 0 && r->exit_code == 0;
	char words[201] = "";

	op->clean = NULL;
	/* The guest's rm first (the temporaries lie in the directories it owns
	 * where the guest's writes go, and a sandbox's root has no
	 * CAP_DAC_OVERRIDE to enter them), then root's for what is left (a
	 * temporary in a root-owned directory a non-root guest cannot enter). */
	if (!ok && r->error == 0 && !op->clean_as_root && (op->p.uid != 0 || op->p.gid != 0)) {
		op->clean_as_root = true;
		fop_clean_start(op);
		return;
	}
	if (!ok && op->table && op->table->journal_fd >= 0) {
		size_t waiting = fop_journal_count(op->table->journal_fd, op->id);

		if (waiting >= FILEOP_JOURNAL_MAX_PER_SANDBOX) {
			/* The sandbox's share of the journal is full: these temporaries
			 * stay, unjournalled (logged), never a journal without end. */
			log_warnx("file write on %.12s: %zu temporaries of this sandbox already wait in the "
				  "journal (%d at most): the ones of this write are not journalled", op->id,
				  waiting, FILEOP_JOURNAL_MAX_PER_SANDBOX);
			fop_tmps_forget(op, true);
		}
	}
	if (!ok && r->error == 0)
		fop_log_text(words, sizeof(words), r->err, r->err_len);
	if (!ok)
		log_warnx("file write on %.12s: the write's temporary file could not be removed (%s%s%s); the "
			  "next start of the daemon tries again%s", op->id,
			  r->error ? strerror(-r->error)
				   : op->p.uid || op->p.gid ? "rm failed as the guest and as root" : "rm failed",
			  words[0] ? ": " : "", words,
			  r->error == 0 && (r->exit_code == 126 || r->exit_code == 127)
				  ? " (the image has no usable " FILEOP_CLEAN_RM ": give it one)" : "");
	fop_tmps_forget(op, ok);
	fop_done(op);
}

/* rm -f of the temporaries, in the guest, by an absolute path (the guest's
 * PATH never chooses the binary): first as the guest (op->p), then, if that
 * failed, as FILEOP_CLEAN_USER (the engine's archive API writes as root,
 * whoever the guest is, so a temporary may lie in a root-owned directory;
 * and root in a sandbox has no CAP_DAC_OVERRIDE for the guest's). */
static void fop_clean_start(struct fileop *op)
{
	_cleanup_free_ const char **argv = xcalloc(op->n_tmps + 4, sizeof(*argv));
	char guest[32];
	struct execrun_spec spec = {
		.working_dir = "/", .user = FILEOP_CLEAN_USER, .timeout_ms = op->d->config->files_timeout_ms,
		.max_output = 4096,
	};
	int r;

	snprintf(guest, sizeof(guest), "%u:%u", (unsigned)op->p.uid, (unsigned)op->p.gid);
	if (!op->clean_as_root)
		spec.user = guest;

	argv[0] = FILEOP_CLEAN_RM;
	argv[1] = "-f";
	argv[2] = "--";
	for (size_t i = 0; i < op->n_tmps; i++)
		argv[3 + i] = op->tmps[i];
	spec.argv = argv;
	op->state = FOP_CLEAN;
	r = execrun_start(op->d->base, op->d->engine, op->d->freezes, op->id, &spec, fop_clean_cb, op, &op->clean);
	if (r < 0) {
		log_warnx("file write on %.12s: cannot remove the write's temporary file: %s", op->id, strerror(-r));
		fop_tmps_forget(op, false);
		fop_done(op);
	}
}

/* ---- mounts on the archive plane -------------------------------------------- */

/* The mounts of a sandbox's container (no volume, no bind of the host: the
 * daemon makes them so): the runtime's own at /proc, /sys and /dev (with
 * what lies below them), and the engine's bind-mounted files. */
static const char *const archive_mount_trees[] = { "/proc", "/sys", "/dev" };
static const char *const archive_mount_points[] = {
	"/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys/fs/cgroup",
	"/etc/resolv.conf", "/etc/hostname", "/etc/hosts",
};

static bool path_is_at_or_under(const char *path, const char *top)
{
	size_t n = strlen(top);

	return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int fileop_archive_mount_check(enum fileop_kind kind, const char *path, const char *rel,
			       struct msb_error *reterr)
{
	const char *shown = rel && *rel ? rel : ".";

	if (kind != FILEOP_WRITE && kind != FILEOP_REMOVE && kind != FILEOP_RECLAIM)
		return 0;
	for (size_t i = 0; i < sizeof(archive_mount_points) / sizeof(archive_mount_points[0]); i++) {
		const char *m = archive_mount_points[i];

		/* The mount point itself; for a removal, also a directory holding one. */
		if (strcmp(path, m) == 0 || (kind != FILEOP_WRITE && path_is_at_or_under(m, path))) {
			msb_error_set(reterr, MSB_ERR_OS_ERROR,
				      json_pack("{s:s, s:s, s:s}", "path", shown, "errno", "EBUSY", "mount", m),
				      "%s is a mount point: file calls never replace or remove a mount", m);
			return -EBUSY;
		}
	}
	if (kind != FILEOP_WRITE)
		return 0;
	for (size_t i = 0; i < sizeof(archive_mount_trees) / sizeof(archive_mount_trees[0]); i++) {
		const char *m = archive_mount_trees[i];

		if (path_is_at_or_under(path, m)) {
			msb_error_set(reterr, MSB_ERR_OS_ERROR,
				      json_pack("{s:s, s:s, s:s}", "path", shown, "errno", "EXDEV", "mount", m),
				      "%s lies under the mount at %s, which the engine's archive API does not "
				      "write into (the write would land hidden beneath it)", shown, m);
			return -EXDEV;
		}
	}
	return 0;
}

static bool fop_init_on(const struct fileop *op)
{
	return op->d->config && op->d->config->init;
}

/* The engine's bind of docker-init (HostConfig.Init, read-only): a mount of
 * the daemon's sandboxes when sandbox.init is on. */
#define ARCHIVE_INIT_MOUNT "/sbin/docker-init"

int fileop_archive_mount_check_init(enum fileop_kind kind, const char *path, const char *rel, bool init,
				    struct msb_error *reterr)
{
	const char *shown = rel && *rel ? rel : ".";

	if (init && (kind == FILEOP_WRITE || kind == FILEOP_REMOVE || kind == FILEOP_RECLAIM) &&
	    (strcmp(path, ARCHIVE_INIT_MOUNT) == 0 ||
	     (kind != FILEOP_WRITE && path_is_at_or_under(ARCHIVE_INIT_MOUNT, path)))) {
		msb_error_set(reterr, MSB_ERR_OS_ERROR,
			      json_pack("{s:s, s:s, s:s}", "path", shown, "errno", "EBUSY", "mount", ARCHIVE_INIT_MOUNT),
			      "%s is a mount point: file calls never replace or remove a mount", ARCHIVE_INIT_MOUNT);
		return -EBUSY;
	}
	return fileop_archive_mount_check(kind, path, rel, reterr);
}

/* ---- walking ------------------------------------------------------------ */

static void fop_next(struct fileop *op);
static void fop_act(struct fileop *op);

/* An item's own refusal: the op's failure, or (per_item_errors) the item's. */
static void fop_item_refuse(struct fileop *op, struct fileop_item *it, enum paths_reason reason)
{
	if (op->p.per_item_errors && paths_reason_outcome(reason) != PATHS_OUTCOME_ENGINE) {
		fileop_error_from_reason(reason, it->plan->target.rel, &it->err);
		op->cur++;
		fop_next(op);
		return;
	}
	if (reason == PATHS_R_NOT_FOUND && op->absence_seen) {
		/* "Not found" only once the container is known to be there. */
		fileop_error_from_reason(reason, it->plan->target.rel, &op->pending);
		op->cur = op->n_items;
		fop_next(op);
		return;
	}
	{
		struct msb_error e = { 0 };

		fileop_error_from_reason(reason, it->plan->target.rel, &e);
		fop_fail_error(op, &e);
	}
}

static void fop_stat_cb(int error, long status, const char *stat, void *arg);

static void fop_head(struct fileop *op, const char *path, enum fop_state state)
{
	int r;

	op->state = state;
	r = docker_archive_stat(op->d->engine, op->id, path, fop_stat_cb, op, &op->req);
	if (r < 0)
		fop_fail_engine(op, r, 0, NULL, "examining a path");
}

/* Applies a walk verdict (1 dir, 0 absent, < 0 refusal reason) to the current item. */
static void fop_walk_apply(struct fileop *op, int verdict)
{
	struct fileop_item *it = &op->items[op->cur];

	if (verdict == CACHE_DIR) {
		it->walk_next++;
	} else if (verdict == CACHE_ABSENT) {
		it->walk_ended = true;
		it->walk_absent_from = it->walk_next;
		it->walk_next = it->plan->n_walk;
		if (op->p.kind == FILEOP_READ || op->p.kind == FILEOP_STAT)
			op->absence_seen = true;
	} else {
		fop_item_refuse(op, it, (enum paths_reason)(-1 - verdict));
		return;
	}
	fop_next(op);
}

/* The leaf answer for the current item (st NULL: absent). */
static void fop_leaf_apply(struct fileop *op, struct paths_stat *st)
{
	struct fileop_item *it = &op->items[op->cur];
	enum paths_reason reason;
	int r;

	if (st) {
		it->found = true;
		it->st = *st;
		*st = (struct paths_stat){ 0 };
	} else if (op->p.kind == FILEOP_READ || op->p.kind == FILEOP_STAT) {
		op->absence_seen = true;
	}
	r = paths_leaf_verdict(it->plan->op, it->found ? &it->st : NULL, &reason);
	if (r < 0) {
		fop_item_refuse(op, it, reason);
		return;
	}
	if (op->p.kind == FILEOP_READ && it->st.size > op->p.max_bytes) {
		if (op->p.per_item_errors) {
			msb_error_set(&it->err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:I, s:I}", "limit", (json_int_t)op->p.max_bytes,
						"size", (json_int_t)it->st.size),
				      "the file is %llu bytes and the caller allowed %llu",
				      (unsigned long long)it->st.size, (unsigned long long)op->p.max_bytes);
		} else {
			fop_fail(op, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:s, s:I, s:I}", "path", it->plan->target.rel,
					   "limit", (json_int_t)op->p.max_bytes, "size", (json_int_t)it->st.size),
				 "'%s' is %llu bytes and the caller allowed %llu", it->plan->target.rel,
				 (unsigned long long)it->st.size, (unsigned long long)op->p.max_bytes);
			return;
		}
	}
	op->cur++;
	fop_next(op);
}

static void fop_stat_cb(int error, long status, const char *stat, void *arg)
{
	struct fileop *op = arg;
	struct fileop_item *it = &op->items[op->cur];
	struct paths_stat st = { 0 };
	enum paths_reason reason;
	const char *path;
	int verdict;

	op->req = NULL;
	if (error < 0 || (status != 200 && status != 404)) {
		fop_fail_engine(op, error, status, NULL, "examining a path");
		return;
	}
	if (status == 200 && !stat) {
		fop_fail(op, MSB_ERR_ENGINE_ERROR, NULL, "the Docker engine sent a path stat without its header");
		return;
	}
	if (status == 200 && paths_stat_decode_header(stat, &st, &reason) < 0) {
		struct msb_error e = { 0 };

		log_warnx("file %s on %.12s: %s", fileop_kind_to_string(op->p.kind), op->id,
			  paths_reason_to_string(reason));
		fileop_error_from_reason(reason, NULL, &e);
		fop_fail_error(op, &e);
		return;
	}
	if (op->state == FOP_LEAF) {
		fop_leaf_apply(op, status == 200 ? &st : NULL);
		paths_stat_release(&st);
		return;
	}
	path = it->plan->walk[it->walk_next];
	if (status == 404)
		verdict = CACHE_ABSENT;
	else if (paths_walk_verdict(&st, &reason) > 0)
		verdict = CACHE_DIR;
	else
		verdict = -1 - (int)reason;
	paths_stat_release(&st);
	json_object_set_new(op->cache, path, json_integer(verdict));
	fop_walk_apply(op, verdict);
}

static void fop_confirm_cb(const struct docker_reply *r, void *arg);

/* Drives the walk of the current item, then its leaf, then the next item. */
static void fop_next(struct fileop *op)
{
	while (op->cur < op->n_items) {
		struct fileop_item *it = &op->items[op->cur];

		if (it->walk_next < it->plan->n_walk) {
			const char *path = it->plan->walk[it->walk_next];
			json_t *cached = json_object_get(op->cache, path);

			if (cached) {
				fop_walk_apply(op, (int)json_integer_value(cached));
				return;
			}
			fop_head(op, path, FOP_WALK);
			return;
		}
		if (it->plan->stat_leaf && !it->walk_ended) {
			fop_head(op, it->plan->target.path, FOP_LEAF);
			return;
		}
		if (it->plan->stat_leaf && it->walk_ended) {
			/* A parent is absent: so is the leaf. */
			fop_leaf_apply(op, NULL);
			return;
		}
		op->cur++;
	}
	if (op->absence_seen) {
		int r;

		op->absence_seen = false;
		op->state = FOP_CONFIRM;
		r = docker_container_inspect(op->d->engine, op->id, fop_confirm_cb, op, &op->req);
		if (r < 0)
			fop_fail_engine(op, r, 0, NULL, "inspecting the sandbox");
		return;
	}
	fop_act(op);
}

static void fop_confirm_cb(const struct docker_reply *r, void *arg)
{
	struct fileop *op = arg;

	op->req = NULL;
	if (r->error == 0 && r->status == 404) {
		fop_fail(op, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		return;
	}
	if (r->error || r->status != 200) {
		fop_fail_engine(op, r->error, r->status, r->message, "inspecting the sandbox");
		return;
	}
	if (op->pending.code) {
		fop_fail_error(op, &op->pending);
		return;
	}
	fop_act(op);
}

/* ---- acting: PUT ------------------------------------------------------- */

static void fop_put_cb(const struct docker_reply *r, void *arg);

/* Adds a directory entry once per op (made: the set of names added). */
static int fop_tar_dir(struct tarball_writer *w, json_t *made, const char *abs, uid_t uid, gid_t gid)
{
	const struct tarball_dir dir = { .name = abs + 1, .mode = TARBALL_DIR_MODE, .uid = uid, .gid = gid,
					 .mtime = time(NULL) };

	if (json_object_get(made, abs))
		return 0;
	json_object_set_new(made, abs, json_true());
	return tarball_writer_add_dir(w, &dir);
}

/* Names each WRITE item's temporary in its final directory, journalled
 * (files.journal_dir) before the archive that makes it is sent. */
static void fop_tmps_name(struct fileop *op)
{
	int jfd = fop_journal_fd(op->table, op->d->config);

	op->tmps = xcalloc(op->n_items, sizeof(*op->tmps));
	op->jfds = xcalloc(op->n_items, sizeof(*op->jfds));
	op->n_tmps = op->n_items;
	for (size_t i = 0; i < op->n_items; i++) {
		const char *path = op->items[i].plan->target.path;
		size_t plen = (size_t)(strrchr(path, '/') - path);
		char tmp[PLOCAL_TEMP_NAME_MAX];

		plocal_temp_name(tmp, sizeof(tmp));
		snprintf(op->tmps[i], sizeof(op->tmps[i]), "%.*s/%s", (int)plen, path, tmp);
		op->jfds[i] = -1;
		if (jfd >= 0) {
			char eng[SHA256_HEX_BYTES];
			const struct plocal_journal j = { jfd, op->id, fop_engine_ident(op->d, eng) };
			_cleanup_free_ char *parent = plen ? xstrndup(path, plen) : xstrdup("/");

			op->jfds[i] = plocal_journal_begin(&j, parent, tmp);
			if (op->jfds[i] < 0)
				log_warnx("file write on %.12s: cannot journal its temporary file: %s", op->id,
					  strerror(-op->jfds[i]));
			op->jfds[i] = op->jfds[i] < 0 ? -1 : op->jfds[i];
		}
	}
}

/* The tar of a WRITE: for each item, the directories its walk found
 * missing at or below the working directory (guest-owned), then the file. */
static int fop_build_write(struct fileop *op, struct tarball_writer *w, json_t *made)
{
	for (size_t i = 0; i < op->n_items; i++) {
		struct fileop_item *it = &op->items[i];
		const struct paths_plan *pl = it->plan;
		size_t from = it->walk_absent_from > pl->walk_owned_from ? it->walk_absent_from
									  : pl->walk_owned_from;
		/* The content under the temporary name, then the final name made a
		 * link to it (the engine removes what was there first): a tar cut
		 * short leaves at most the temporary, never a short file. */
		struct tarball_file f = {
			.name = op->tmps[i] + 1, .data = it->data, .size = it->size,
			.mode = fileop_item_mode(it), .uid = op->p.uid, .gid = op->p.gid, .mtime = time(NULL),
		};
		struct tarball_link l = {
			.name = pl->target.path + 1, .target = op->tmps[i] + 1,
			.mode = fileop_item_mode(it), .uid = op->p.uid, .gid = op->p.gid, .mtime = f.mtime,
		};
		int r;

		for (size_t j = from; it->walk_ended && j < pl->n_walk; j++) {
			r = fop_tar_dir(w, made, pl->walk[j], op->p.uid, op->p.gid);
			if (r < 0)
				return r;
		}
		r = tarball_writer_add_file(w, &f);
		if (r >= 0)
			r = tarball_writer_add_hardlink(w, &l);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The tar of a PREPARE: the missing tail of the work dir's chain; its
 * ancestors root-owned, the base itself the guest's. */
static int fop_build_prepare(struct fileop *op, struct tarball_writer *w, json_t *made, size_t *ret_n)
{
	const struct fileop_item *it = &op->items[0];
	const struct paths_plan *pl = it->plan;

	*ret_n = 0;
	if (!it->walk_ended)
		return 0;
	for (size_t j = it->walk_absent_from; j < pl->n_walk; j++) {
		bool base = j + 1 == pl->n_walk;
		int r = fop_tar_dir(w, made, pl->walk[j], base ? op->p.uid : 0, base ? op->p.gid : 0);

		if (r < 0)
			return r;
		(*ret_n)++;
	}
	return 0;
}

static void fop_put(struct fileop *op)
{
	struct tarball_buf buf = TARBALL_BUF_INIT(DOCKER_MAX_ARCHIVE_PUT);
	struct tarball_writer *w = tarball_writer_new(tarball_buf_write_cb, &buf);
	json_t *made = json_object();
	size_t n = 1;
	int r;

	if (!made)
		fatalx("%s: out of memory", __func__);
	if (op->p.kind == FILEOP_WRITE)
		fop_tmps_name(op);
	if (op->p.kind == FILEOP_WRITE)
		r = fop_build_write(op, w, made);
	else
		r = fop_build_prepare(op, w, made, &n);
	if (r >= 0)
		r = tarball_writer_finish(w);
	tarball_writer_free(w);
	json_decref(made);
	if (r < 0) {
		tarball_buf_clear(&buf);
		fop_tmps_forget(op, true);
		if (r == -EFBIG)
			fop_fail(op, MSB_ERR_TRANSFER_CAP_EXCEEDED, NULL,
				 "the archive would exceed %u bytes", DOCKER_MAX_ARCHIVE_PUT);
		else
			fop_fail(op, MSB_ERR_INTERNAL, NULL, "building the archive failed: %s", strerror(-r));
		return;
	}
	if (n == 0) {
		/* PREPARE: nothing missing. */
		tarball_buf_clear(&buf);
		fop_thaw(op);
		return;
	}
	op->state = FOP_PUT;
	r = docker_archive_put(op->d->engine, op->id, "/", buf.data, buf.len, fop_put_cb, op, &op->req);
	tarball_buf_clear(&buf);
	if (r < 0) {
		fop_tmps_forget(op, true);     /* nothing reached the engine */
		fop_fail_engine(op, r, 0, NULL, "writing into the sandbox");
	}
}

static void fop_put_cb(const struct docker_reply *r, void *arg)
{
	struct fileop *op = arg;

	op->req = NULL;
	if (r->error == 0 && r->status == 200) {
		fop_thaw(op);
		return;
	}
	if (r->error == 0 && r->status == 400 && r->message) {
		/* Read-only root, a directory in the way: the guest's filesystem refused. */
		log_warnx("file %s on %.12s: the engine refused the archive: %.512s",
			  fileop_kind_to_string(op->p.kind), op->id, r->message);
		fop_fail(op, MSB_ERR_OS_ERROR, json_pack("{s:i}", "engine_status", (int)r->status),
			 op->p.kind == FILEOP_PREPARE ? "docker could not create the working directory"
						     : "the sandbox's filesystem refused the write");
		return;
	}
	fop_fail_engine(op, r->error, r->status, r->message,
			op->p.kind == FILEOP_PREPARE ? "creating the working directory" : "writing into the sandbox");
}

/* ---- acting: GET ------------------------------------------------------- */

static int fop_body_cb(const void *buf, size_t len, void *arg)
{
	struct fileop_item *it = arg;

	if (len > it->out_cap - it->out_len) {
		/* More than the stat said: grow (the reader still caps at max_bytes). */
		it->out_cap = it->out_len + len;
		it->out = xrealloc(it->out, it->out_cap);
	}
	memcpy(it->out + it->out_len, buf, len);
	it->out_len += len;
	return 0;
}

static int fop_get_data_cb(const void *data, size_t len, void *arg)
{
	struct fileop *op = arg;
	int r;

	if (op->read_done)
		return 0;
	r = tarball_reader_feed(op->reader, data, len);
	if (r == TARBALL_DONE)
		op->read_done = true;
	return r < 0 ? r : 0;
}

static void fop_get_next(struct fileop *op);

static void fop_get_done_cb(int error, long status, const char *message, const char *stat, void *arg)
{
	struct fileop *op = arg;
	struct fileop_item *it = &op->items[op->cur];
	const struct tarball_entry *ent;
	enum tarball_error te;
	int r;

	(void)stat;
	op->req = NULL;
	te = tarball_reader_error(op->reader);
	if (error == 0 && status == 200) {
		r = op->read_done ? TARBALL_DONE : tarball_reader_finish(op->reader);
		te = tarball_reader_error(op->reader);
	} else {
		r = error;
	}
	if (error < 0 && te == TARBALL_OK) {
		fop_fail_engine(op, error, 0, NULL, "reading from the sandbox");
		return;
	}
	if (error == 0 && status != 200) {
		fop_fail_engine(op, 0, status, message, "reading from the sandbox");
		return;
	}
	if (r != TARBALL_DONE) {
		log_warnx("file read on %.12s: %s", op->id, tarball_error_to_string(te));
		if (te == TARBALL_ERR_OVER_CAP)
			fop_fail(op, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:I}", "limit", (json_int_t)op->p.max_bytes),
				 "'%s' is larger than the caller allowed", it->plan->target.rel);
		else
			fop_fail(op, MSB_ERR_ENGINE_ERROR, NULL, "docker returned an unusable archive: %s",
				 tarball_error_to_string(te));
		return;
	}
	ent = tarball_reader_entry(op->reader);
	if (!ent || ent->kind != TARBALL_KIND_FILE) {
		fop_fail(op, MSB_ERR_OS_ERROR, json_pack("{s:s}", "path", it->plan->target.rel),
			 "the path is not a regular file and is refused");
		return;
	}
	if (!it->out)
		it->out = xmalloc(1);
	op->reader = tarball_reader_free(op->reader);
	op->cur++;
	fop_get_next(op);
}

static void fop_get_next(struct fileop *op)
{
	while (op->cur < op->n_items) {
		struct fileop_item *it = &op->items[op->cur];
		int r;

		if (it->err.code || !it->found) {
			op->cur++;
			continue;
		}
		op->state = FOP_GET;
		op->read_done = false;
		it->out_cap = it->st.size ? it->st.size : 1;
		it->out = xmalloc(it->out_cap);
		it->out_len = 0;
		op->reader = tarball_reader_new(op->p.max_bytes, fop_body_cb, it);
		r = docker_archive_get(op->d->engine, op->id, it->plan->target.path,
				       op->d->config->engine_timeout_ms, fop_get_data_cb, fop_get_done_cb, op,
				       &op->req);
		if (r < 0)
			fop_fail_engine(op, r, 0, NULL, "reading from the sandbox");
		return;
	}
	fop_thaw(op);
}

static void fop_act(struct fileop *op)
{
	uint64_t total = 0;

	switch (op->p.kind) {
	case FILEOP_WRITE:
	case FILEOP_PREPARE:
		fop_put(op);
		return;
	case FILEOP_STAT:
	case FILEOP_CHECK:
	case FILEOP_REMOVE:
	case FILEOP_RECLAIM:
		fop_thaw(op);
		return;
	case FILEOP_READ:
		for (size_t i = 0; i < op->n_items; i++)
			if (!op->items[i].err.code && op->items[i].found)
				total += op->items[i].st.size;
		if (total > op->p.max_total) {
			fop_fail(op, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:I, s:I}", "limit", (json_int_t)op->p.max_total, "size", (json_int_t)total),
				 "the files are %llu bytes in all and the ceiling is %llu",
				 (unsigned long long)total, (unsigned long long)op->p.max_total);
			return;
		}
		op->cur = 0;
		fop_get_next(op);
		return;
	default:
		assert(!"unreachable");
	}
}

/* ---- the freeze ---------------------------------------------------------- */

static void fop_granted_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct fileop *op = arg;

	if (error == 0 && op->timed_out) {
		op->held = true;
		op->claim = claim;
		fop_thaw(op);
		return;
	}
	if (error == 0) {
		op->held = true;
		op->claim = claim;
		op->state = FOP_WALK;
		op->cur = 0;
		fop_next(op);
		return;
	}
	op->claim = NULL;
	if (op->timed_out) {
		fop_done(op);
		return;
	}
	switch (error) {
	case -ENOENT:
		msb_error_set(&op->err, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		break;
	case -ESRCH:
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			      "the sandbox is not running, so it cannot be frozen for a file call");
		break;
	case -EBUSY:
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "already paused"),
			      "something else has paused the sandbox; the next acquire thaws it");
		break;
	case -EAGAIN:
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "held elsewhere"),
			      "another maf-sandboxd on this host holds the sandbox frozen for a file call of "
			      "its own; try again");
		break;
	case -ENOLCK:
		msb_error_set(&op->err, MSB_ERR_INTERNAL, NULL,
			      "the daemon could not take its host freeze lock (freeze.lock_file)");
		break;
	case -EIO:
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED,
			      json_pack("{s:s, s:i}", "reason", "refused", "engine_status", (int)(f ? f->status : 0)),
			      "the Docker engine cannot pause this sandbox, and file calls need the freeze");
		break;
	case -ETIMEDOUT:
		msb_error_set(&op->err, MSB_ERR_ENGINE_TIMEOUT, NULL, "the Docker engine did not answer the pause in time");
		break;
	case -ECANCELED:
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		break;
	default:
		msb_error_set(&op->err, MSB_ERR_ENGINE_UNAVAILABLE, NULL, "the Docker engine is not reachable");
		break;
	}
	if (f && f->message)
		log_warnx("file %s on %.12s: %s", fileop_kind_to_string(op->p.kind), op->id, f->message);
	fop_done(op);
}

bool fileop_plane_local(const struct domain *d, const struct sandbox *sb)
{
	return d->plane_local && (!sb || sb->plane != SANDBOX_PLANE_ARCHIVE);
}

void fileop_error_no_listing(struct msb_error *reterr)
{
	msb_error_set(reterr, MSB_ERR_CAPABILITY_NOT_SUPPORTED,
		      json_pack("{s:s, s:s}", "capability", "files_list", "file_plane", "archive"),
		      "this sandbox is served by the archive file plane, which cannot list directories");
}

/* The archive plane: the walk (unfrozen for CHECK, REMOVE, RECLAIM), or
 * the freeze first. */
static void fop_archive_begin(struct fileop *op)
{
	int r;

	if (op->p.kind == FILEOP_LIST) {
		fileop_error_no_listing(&op->err);
		fop_done(op);
		return;
	}
	for (size_t i = 0; i < op->n_items; i++) {
		const struct paths_plan *pl = op->items[i].plan;

		if (fileop_archive_mount_check_init(op->p.kind, pl->target.path, pl->target.rel, fop_init_on(op),
						    &op->err) < 0) {
			fop_done(op);
			return;
		}
	}
	if (op->p.kind == FILEOP_CHECK || op->p.kind == FILEOP_REMOVE || op->p.kind == FILEOP_RECLAIM) {
		op->state = FOP_WALK;
		fop_next(op);
		return;
	}
	op->state = FOP_FREEZE;
	r = freeze_acquire(op->d->freezes, op->d->engine, op->id, fop_granted_cb, op, &op->claim);
	if (r == -EBUSY) {
		op->claim = NULL;
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "queue full"),
			      "too many file calls are queued on this sandbox (%d)", FREEZE_MAX_CLAIMS_PER_CONTAINER);
		fop_done(op);
	} else if (r < 0) {
		op->claim = NULL;
		fop_granted_cb(NULL, r, NULL, op);
	}
}

/* ---- the local plane ------------------------------------------------------ */

static void fop_local_fail(struct fileop *op, struct msb_error *e)
{
	if (op->root >= 0)
		close(op->root);
	op->root = -1;
	op->rm = plocal_rm_free(op->rm);
	fop_fail_error(op, e);
}

static void fop_local_finish(struct fileop *op)
{
	if (op->root >= 0)
		close(op->root);
	op->root = -1;
	op->rm = plocal_rm_free(op->rm);
	fop_done(op);
}

/* READ: each item, the total bounded; per_item_errors keeps an item's own
 * refusal. */
static int fop_local_read(struct fileop *op, const struct plocal_cred *c, struct msb_error *e)
{
	uint64_t total = 0;

	for (size_t i = 0; i < op->n_items; i++) {
		struct fileop_item *it = &op->items[i];
		int r = plocal_read(op->root, it->plan, c, op->p.max_bytes, &it->out, &it->out_len, &it->st, e);

		if (r < 0 && op->p.per_item_errors) {
			it->err = *e;
			*e = (struct msb_error){ 0 };
			continue;
		}
		if (r < 0)
			return r;
		it->found = true;
		it->out_cap = it->out_len;
		total += it->out_len;
		if (total > op->p.max_total) {
			msb_error_set(e, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:I}", "limit", (json_int_t)op->p.max_total),
				      "the files are over %llu bytes in all, the ceiling",
				      (unsigned long long)op->p.max_total);
			return -EFBIG;
		}
	}
	return 0;
}

static void fop_local_slice(struct fileop *op)
{
	struct msb_error e = { 0 };
	int r = plocal_rm_step(op->rm, PLOCAL_REMOVE_SLICE, &e);

	if (r < 0) {
		fop_local_fail(op, &e);
		return;
	}
	if (r == 1) {
		fop_local_finish(op);
		return;
	}
	op->state = FOP_LOCAL;
	/* The next slice on the next pass of the loop, after its I/O (an
	 * event_active would run it within this pass, and every slice after
	 * it, starving the other clients until the removal ends). */
	{
		static const struct timeval now = { 0, 0 };

		evtimer_add(op->slice_ev, &now);
	}
}

static void fop_local_begin(struct fileop *op, struct sandbox *sb);

static void fop_slice_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fileop *op = arg;

	(void)fd, (void)what;
	if (op->state == FOP_FDWAIT && op->fd_held) {
		fop_local_begin(op, op->d->registry ? registry_find_id(op->d->registry, op->id) : NULL);
		return;
	}
	if (op->state == FOP_LOCAL && op->rm)
		fop_local_slice(op);
}

/* Serves the whole operation beneath op->root, synchronously (a removal
 * goes on in slices). */
static void fop_local_run(struct fileop *op)
{
	const struct plocal_cred cred = { op->p.uid, op->p.gid };
	struct msb_error e = { 0 };
	int r = 0;

	op->local = true;
	switch (op->p.kind) {
	case FILEOP_STAT:
		for (size_t i = 0; r == 0 && i < op->n_items; i++)
			r = plocal_stat(op->root, op->items[i].plan, &cred, &op->items[i].found, &op->items[i].st, &e);
		break;
	case FILEOP_READ:
		r = fop_local_read(op, &cred, &e);
		break;
	case FILEOP_WRITE:
		/* Every entry is checked before any is written: one refusal refuses the call. */
		for (size_t i = 0; r == 0 && op->n_items > 1 && i < op->n_items; i++)
			r = plocal_write_check(op->root, op->items[i].plan, &cred, &e);
		for (size_t i = 0; r == 0 && i < op->n_items; i++) {
			int jfd = fop_journal_fd(op->table, op->d->config);
			char eng[SHA256_HEX_BYTES];
			const struct plocal_journal j = { jfd, op->id, fop_engine_ident(op->d, eng) };

			r = plocal_write_mode(op->root, op->items[i].plan, &cred, jfd >= 0 ? &j : NULL, op->items[i].data,
					      op->items[i].size, fileop_item_mode(&op->items[i]), &e);
		}
		break;
	case FILEOP_CHECK:
		for (size_t i = 0; r == 0 && i < op->n_items; i++)
			r = plocal_check(op->root, op->items[i].plan, NULL, &op->items[i].walk_ended, &e);
		break;
	case FILEOP_PREPARE:
		r = plocal_prepare(op->root, op->items[0].plan, &cred, &e);
		break;
	case FILEOP_LIST:
		r = plocal_list(op->root, op->items[0].plan, &cred,
				op->p.max_entries ? op->p.max_entries : PLOCAL_LIST_MAX_ENTRIES,
				&op->items[0].entries, &e);
		break;
	case FILEOP_REMOVE:
	case FILEOP_RECLAIM:
		/* The container's known mount points, and directories holding one:
		 * refused before anything is removed (a removal that meets any
		 * other mount is refused where it meets it). */
		r = fileop_archive_mount_check_init(op->p.kind, op->items[0].plan->target.path,
						    op->items[0].plan->target.rel, fop_init_on(op), &e);
		if (r < 0)
			break;
		r = plocal_rm_begin(op->root, op->items[0].plan, &cred,
				    op->p.kind == FILEOP_RECLAIM || op->p.recursive, &op->rm, &e);
		if (r == 0 && op->rm) {
			fop_local_slice(op);
			return;
		}
		if (r > 0)
			r = 0;
		break;
	default:
		assert(!"unreachable");
	}
	if (r < 0) {
		fop_local_fail(op, &e);
		return;
	}
	fop_local_finish(op);
}

static void fop_pin_lookup(struct fileop *op);

/* The pin (op's own, or the registry entry's) opens the root, or is stale. */
static void fop_local_with_pin(struct fileop *op, const struct plocal_pin *pin)
{
	int r = plocal_root_open(pin, &op->root);

	if (r == 0) {
		fop_local_run(op);
		return;
	}
	if (r == -ESRCH && op->lookups < 2) {
		/* The init is gone (a restart, a death): look (again). */
		fop_pin_lookup(op);
		return;
	}
	if (r == -ESRCH) {
		fop_fail(op, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	fop_fail(op, MSB_ERR_INTERNAL, NULL, "the sandbox's root cannot be opened: %s", strerror(-r));
}

static void fop_pin_cb(const struct docker_reply *r, void *arg)
{
	struct fileop *op = arg;
	const json_t *state = json_object_get(r->body, "State");
	json_int_t pid = json_integer_value(json_object_get(state, "Pid"));
	struct sandbox *sb;
	struct plocal_pin pin;
	int rc;

	op->req = NULL;
	if (op->timed_out) {
		fop_thaw(op);
		return;
	}
	if (r->error == 0 && r->status == 404) {
		fop_fail(op, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		return;
	}
	if (r->error || r->status != 200) {
		fop_fail_engine(op, r->error, r->status, r->message, "inspecting the sandbox");
		return;
	}
	if (!json_is_true(json_object_get(state, "Running")) || pid <= 0 || pid > INT32_MAX) {
		fop_fail(op, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	rc = plocal_pin_open((pid_t)pid, op->id, &pin);
	if (rc == -ESRCH && op->lookups < 2) {
		fop_pin_lookup(op);
		return;
	}
	if (rc == -ESRCH) {
		fop_fail(op, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			 "the sandbox is not running");
		return;
	}
	sb = op->d->registry ? registry_find_id(op->d->registry, op->id) : NULL;
	if (rc < 0 && strcmp(op->d->config->files_plane, "local") == 0) {
		fop_fail(op, MSB_ERR_INTERNAL, json_pack("{s:s}", "file_plane", "local"),
			 "files.plane is local, but this sandbox's root cannot be reached: %s",
			 rc == -ENOENT ? "its init is not in this daemon's pid namespace"
				       : rc == -EOPNOTSUPP ? "its user namespace remaps ids" : strerror(-rc));
		return;
	}
	if (rc < 0) {
		log_info("sandbox %.12s: the archive file plane serves it (no pin of its init: %s)", op->id,
			 strerror(-rc));
		if (sb)
			sb->plane = SANDBOX_PLANE_ARCHIVE;
		fop_fd_release(op);      /* the archive plane holds no descriptor of it */
		fop_archive_begin(op);
		return;
	}
	if (sb) {
		plocal_pin_close(&sb->pin);
		sb->pin = pin;
		sb->plane = SANDBOX_PLANE_LOCAL;
		fop_local_with_pin(op, &sb->pin);
		return;
	}
	plocal_pin_close(&op->own_pin);
	op->own_pin = pin;
	fop_local_with_pin(op, &op->own_pin);
}

static void fop_pin_lookup(struct fileop *op)
{
	int r;

	op->lookups++;
	op->state = FOP_PIN;
	r = docker_container_inspect(op->d->engine, op->id, fop_pin_cb, op, &op->req);
	if (r < 0)
		fop_fail_engine(op, r, 0, NULL, "inspecting the sandbox");
}

/* sb: the op's registry entry, or NULL. */
static void fop_local_begin(struct fileop *op, struct sandbox *sb)
{
	/* A removal holds descriptors across slices: it waits for its share
	 * of files.removal_fd_budget (FIFO, within its deadline) before it
	 * opens anything. */
	if ((op->p.kind == FILEOP_REMOVE || op->p.kind == FILEOP_RECLAIM) && !fop_fd_take(op)) {
		op->state = FOP_FDWAIT;
		return;
	}
	if (sb && plocal_pin_valid(&sb->pin)) {
		op->state = FOP_PIN;
		fop_local_with_pin(op, &sb->pin);
		return;
	}
	fop_pin_lookup(op);
}

void fileop_start(struct fileop *op, fileop_cb *cb, void *arg)
{
	struct timeval tv = { op->p.timeout_ms / 1000, (op->p.timeout_ms % 1000) * 1000 };
	struct sandbox *sb;

	assert(!op->started);
	op->started = true;
	op->cb = cb;
	op->arg = arg;
	if (op->d->fileops) {
		op->table = op->d->fileops;
		TAILQ_INSERT_TAIL(&op->table->ops, op, entry);
		op->table->count++;
	}
	op->state = FOP_FREEZE;
	event_add(op->deadline, &tv);
	sb = op->d->registry ? registry_find_id(op->d->registry, op->id) : NULL;
	if (fileop_plane_local(op->d, sb)) {
		fop_local_begin(op, sb);
		return;
	}
	fop_archive_begin(op);
}

/* ---- the journal, replayed at start ------------------------------------------ */

/* The replay: entries read a few at a time (FILEOP_REPLAY_BATCH in flight),
 * the next read as one ends, so a large journal never floods the engine. */
struct fop_replayer {
	struct domain *d;
	DIR *dir;
	size_t inflight;
	bool stopped;                /* the daemon is stopping (a request cancelled): start nothing new */
	char ours[SHA256_HEX_BYTES];
	bool has_ours;
};

struct fop_replay {
	struct domain *d;
	struct fop_replayer *rr;
	struct plocal_journal_entry e;
	char user[IDENTITY_USER_STRING_MAX];   /* the guest's uid:gid, "" when unknown */
	bool as_root;                /* the guest's rm failed (or there is no guest): root's */
};

static void fop_replay_next(struct fop_replayer *rr);
static void fop_replay_free(struct fop_replay *rp, bool done);
static void fop_replay_rm_cb(const struct execrun_result *r, void *arg);

/* The archive plane's rm of the entry's temporary in the guest, by an
 * absolute path: as the guest first, then as root (as a live write's
 * cleanup: fop_clean_start). */
static void fop_replay_rm_start(struct fop_replay *rp)
{
	struct domain *d = rp->d;
	_cleanup_free_ char *path = xasprintf("%s/%s", strcmp(rp->e.parent, "/") ? rp->e.parent : "", rp->e.tmp);
	const char *argv[] = { FILEOP_CLEAN_RM, "-f", "--", path, NULL };
	struct execrun_spec spec = { .argv = argv, .working_dir = "/",
				     .user = rp->as_root ? FILEOP_CLEAN_USER : rp->user,
				     .timeout_ms = d->config->files_timeout_ms, .max_output = 4096 };

	if (execrun_start(d->base, d->engine, d->freezes, rp->e.id, &spec, fop_replay_rm_cb, rp, NULL) < 0)
		fop_replay_free(rp, false);
}

static void fop_replay_free(struct fop_replay *rp, bool done)
{
	int jfd = rp->d->fileops ? rp->d->fileops->journal_fd : -1;
	struct fop_replayer *rr = rp->rr;

	if (done && jfd >= 0 && unlinkat(jfd, rp->e.tmp, 0) < 0 && errno != ENOENT)
		log_warnx("files: cannot remove the journal entry %s: %s", rp->e.tmp, strerror(errno));
	plocal_journal_entry_release(&rp->e);
	free(rp);
	if (rr) {
		rr->inflight--;
		fop_replay_next(rr);
	}
}

static void fop_replay_rm_cb(const struct execrun_result *r, void *arg)
{
	struct fop_replay *rp = arg;
	bool ok = r->error == 0 && r->exit_code == 0;

	if (r->error == -ECANCELED && rp->rr)
		rp->rr->stopped = true;
	if (!ok && r->error == 0 && !rp->as_root) {
		rp->as_root = true;
		fop_replay_rm_start(rp);
		return;
	}
	if (!ok)
		log_warnx("sandbox %.12s: a temporary a killed daemon left (%s/%s) could not be removed",
			  rp->e.id, rp->e.parent, rp->e.tmp);
	fop_replay_free(rp, ok || r->error == -ENOENT);
}

static void fop_replay_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct fop_replay *rp = arg;
	struct domain *d = rp->d;
	const json_t *state = json_object_get(r->body, "State");
	json_int_t pid = json_integer_value(json_object_get(state, "Pid"));
	struct sandbox *sb = d->registry ? registry_find_id(d->registry, rp->e.id) : NULL;
	struct plocal_pin pin;
	int root = -1, rc;

	if (r->error == -ECANCELED && rp->rr)
		rp->rr->stopped = true;
	if (r->error == 0 && r->status == 404) {
		fop_replay_free(rp, true);       /* gone, and its temporary with it */
		return;
	}
	if (r->error || r->status != 200 || !json_is_true(json_object_get(state, "Running")) || pid <= 0 ||
	    pid > INT32_MAX) {
		fop_replay_free(rp, false);      /* the next start tries again */
		return;
	}
	if (d->plane_local && (!sb || sb->plane != SANDBOX_PLANE_ARCHIVE) &&
	    plocal_pin_open((pid_t)pid, rp->e.id, &pin) == 0) {
		rc = plocal_root_open(&pin, &root);
		if (rc == 0) {
			rc = plocal_temp_remove(root, rp->e.parent, rp->e.tmp);
			close(root);
		}
		plocal_pin_close(&pin);
		if (rc < 0)
			log_warnx("sandbox %.12s: a temporary a killed daemon left (%s/%s) could not be removed: %s",
				  rp->e.id, rp->e.parent, rp->e.tmp, strerror(-rc));
		else
			log_info("sandbox %.12s: removed %s/%s, the temporary of a write a killed daemon left",
				 rp->e.id, strcmp(rp->e.parent, "/") ? rp->e.parent : "", rp->e.tmp);
		fop_replay_free(rp, rc == 0);
		return;
	}
	/* The archive plane: rm in the guest, as the guest (its identity fixed
	 * at acquire, when the registry has the sandbox), then as root. */
	rp->as_root = !sb || identity_fixed_user(&sb->guest, rp->user) < 0 || strcmp(rp->user, "0:0") == 0;
	fop_replay_rm_start(rp);
}

static void fop_replay_next(struct fop_replayer *rr)
{
	struct domain *d = rr->d;
	int jfd = d->fileops ? d->fileops->journal_fd : -1;
	struct dirent *de = NULL;

	while (jfd >= 0 && !rr->stopped && rr->inflight < FILEOP_REPLAY_BATCH && (de = readdir(rr->dir))) {
		struct plocal_journal_entry e = { .lock_fd = -1 };
		struct fop_replay *rp;
		int r;

		if (!plocal_name_is_temp(de->d_name))
			continue;
		r = plocal_journal_take(jfd, de->d_name, &e);
		if (r == -EBUSY)
			continue;                    /* a live daemon's write in progress */
		if (r < 0) {
			if (r == -EBADMSG)
				unlinkat(jfd, de->d_name, 0);   /* cut short before the temporary existed */
			continue;
		}
		if (e.engine && (!rr->has_ours || strcmp(e.engine, rr->ours) != 0)) {
			/* Another engine's (a daemon sharing the journal): its daemon's to replay. */
			plocal_journal_entry_release(&e);
			continue;
		}
		/* Dropped only on this engine's own word (an inspect's 404), never
		 * for not being in this daemon's registry. */
		rp = xcalloc(1, sizeof(*rp));
		rp->d = d;
		rp->e = e;
		rp->rr = rr;
		rr->inflight++;
		if (docker_container_inspect(d->engine, e.id, fop_replay_inspect_cb, rp, NULL) < 0) {
			plocal_journal_entry_release(&rp->e);
			free(rp);
			rr->inflight--;
		}
	}
	if (rr->inflight == 0 && (jfd < 0 || !de || rr->stopped)) {
		closedir(rr->dir);
		if (d->fileops && d->fileops->replayer == rr)
			d->fileops->replayer = NULL;
		free(rr);
	}
}

void fileop_journal_replay(struct domain *d)
{
	int jfd = fop_journal_fd(d->fileops, d->config);
	struct fop_replayer *rr;
	DIR *dir;

	if (jfd < 0 || d->fileops->replayer || !(dir = fop_journal_opendir(jfd)))
		return;
	rr = xcalloc(1, sizeof(*rr));
	rr->d = d;
	rr->dir = dir;
	rr->has_ours = fop_engine_ident(d, rr->ours) != NULL;
	d->fileops->replayer = rr;
	fop_replay_next(rr);
}

void fileop_journal_forget(struct domain *d, const char *id)
{
	int jfd = d && d->fileops ? d->fileops->journal_fd : -1;
	char ours[SHA256_HEX_BYTES];
	bool has_ours = fop_engine_ident(d, ours) != NULL;
	struct dirent *de;
	DIR *dir;

	if (!id || !(dir = fop_journal_opendir(jfd)))
		return;
	while ((de = readdir(dir))) {
		struct plocal_journal_entry e = { .lock_fd = -1 };

		if (!plocal_name_is_temp(de->d_name) || plocal_journal_take(jfd, de->d_name, &e) < 0)
			continue;
		if (strcmp(e.id, id) == 0 && (!e.engine || (has_ours && strcmp(e.engine, ours) == 0)))
			unlinkat(jfd, de->d_name, 0);    /* its container gone, its temporary with it */
		plocal_journal_entry_release(&e);
	}
	closedir(dir);
}
