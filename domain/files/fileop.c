/* fileop.c — the file-operation front end (fileop.h): the op, its items,
 * its deadline, its state and its outcome, the table of ops in flight, and
 * the choice of the plane that serves each (plane.h): the local plane
 * (plane_local.c) when the daemon's plane is local and the sandbox's init
 * can be pinned, else the archive plane (plane_archive.c). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "engine.h"
#include "errmap.h"
#include "fileop.h"
#include "log.h"
#include "plane.h"
#include "registry.h"
#include "sha256.h"
#include "xmalloc.h"

struct fileop {
	struct domain *d;
	struct fileop_params p;
	char *id;
	struct fileop_item *items;
	size_t n_items;
	enum fop_state state;
	const struct file_plane *plane;   /* the plane serving it, once started */
	void *plane_data;                 /* the plane's own state of it */
	struct msb_error err;        /* the first failure */
	bool timed_out;
	struct event *deadline;
	struct event *finish_ev;
	fileop_cb *cb;
	void *arg;
	bool started;
	bool local;                  /* served by the local plane */
	TAILQ_ENTRY(fileop) entry;   /* in d->fileops, while started */
	struct fileop_table *table;
};

struct fileop_table {
	TAILQ_HEAD(, fileop) ops;
	size_t count;
	struct plocal_shared *local;     /* the local plane's pins and removal fd budget */
	int journal_fd;              /* files.journal_dir, once opened (-1: not yet, or none) */
	bool journal_tried;
	void *replayer;              /* the journal's replay in progress (journal.c), or NULL */
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

static const char *const state_names[_FOP_STATE_MAX] = {
	[FOP_NEW] = "new", [FOP_FREEZE] = "freeze", [FOP_WALK] = "walk", [FOP_LEAF] = "leaf",
	[FOP_CONFIRM] = "confirm", [FOP_PUT] = "put", [FOP_GET] = "get", [FOP_THAW] = "thaw",
	[FOP_PIN] = "pin", [FOP_LOCAL] = "local", [FOP_FDWAIT] = "fdwait", [FOP_CLEAN] = "clean",
	[FOP_DONE] = "done",
};

const char *fop_state_to_string(enum fop_state s)
{
	return (unsigned)s < _FOP_STATE_MAX ? state_names[s] : "?";
}

void fileop_error_from_reason(enum paths_reason reason, const char *path, struct msb_error *reterr)
{
	paths_error_from_reason(reason, path, reterr);
}

/* ---- what the planes see ------------------------------------------------- */

void fileop_enter(struct fileop *op, enum fop_state state)
{
	log_debug("op", "fileop %s %.12s: %s -> %s", fileop_kind_to_string(op->p.kind), op->id,
		  fop_state_to_string(op->state), fop_state_to_string(state));
	op->state = state;
}

struct fileop_view fileop_view(struct fileop *op)
{
	return (struct fileop_view){ .fop = op, .d = op->d, .p = &op->p, .id = op->id, .items = op->items,
				     .n_items = op->n_items };
}

struct fileop_table *fileop_table_of(const struct fileop *op)
{
	return op->table;
}

enum fop_state fileop_state(const struct fileop *op)
{
	return op->state;
}

bool fileop_timed_out(const struct fileop *op)
{
	return op->timed_out;
}

struct msb_error *fileop_error(struct fileop *op)
{
	return &op->err;
}

void *fileop_plane_data(const struct fileop *op)
{
	return op->plane_data;
}

void fileop_set_plane_data(struct fileop *op, void *data)
{
	op->plane_data = data;
}

void fileop_set_served_locally(struct fileop *op)
{
	op->local = true;
}

bool fileop_init_on(const struct fileop *op)
{
	return op->d->config && op->d->config->init;
}

/* ---- life cycle --------------------------------------------------------- */

static void fop_finish_cb(evutil_socket_t fd, short what, void *arg);
static void fop_deadline_cb(evutil_socket_t fd, short what, void *arg);

struct fileop *fileop_new(struct domain *d, const struct fileop_params *p)
{
	struct fileop *op = xcalloc(1, sizeof(*op));

	assert(p->timeout_ms > 0 && p->kind < _FILEOP_KIND_MAX);
	op->d = d;
	op->p = *p;
	op->id = xstrdup(p->id);
	op->p.id = op->id;
	op->finish_ev = event_new(d->base, -1, 0, fop_finish_cb, op);
	op->deadline = event_new(d->base, -1, 0, fop_deadline_cb, op);
	if (!op->finish_ev || !op->deadline)
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
	if (op->plane)
		op->plane->release(op);
	op->plane_data = NULL;
	if (op->table) {
		TAILQ_REMOVE(&op->table->ops, op, entry);
		op->table->count--;
	}
	msb_error_clear(&op->err);
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

void fileop_done(struct fileop *op)
{
	fileop_enter(op, FOP_DONE);
	event_del(op->deadline);
	event_active(op->finish_ev, EV_TIMEOUT, 0);
}

void fileop_fail(struct fileop *op, int code, json_t *data, const char *fmt, ...)
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
	op->plane->wind_up(op);
}

void fileop_fail_error(struct fileop *op, struct msb_error *e)
{
	if (!op->err.code) {
		op->err = *e;
		*e = (struct msb_error){ 0 };
	} else {
		msb_error_clear(e);
	}
	op->plane->wind_up(op);
}

void fileop_fail_engine(struct fileop *op, int error, long status, const char *message, const char *what)
{
	struct msb_error e = { 0 };
	struct docker_reply r = { .error = error, .status = status, .message = message };

	if (op->timed_out || op->err.code) {
		op->plane->wind_up(op);
		return;
	}
	if (error == 0 && status == 404 && message && strstr(message, "No such container")) {
		msb_error_set(&e, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		fileop_fail_error(op, &e);
		return;
	}
	errmap_docker(&r, what, &e);
	fileop_fail_error(op, &e);
}

static void fop_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fileop *op = arg;

	(void)fd, (void)what;
	if (op->state == FOP_THAW || op->state == FOP_DONE || op->timed_out)
		return;
	/* An archive write that landed: only the rm of its temporary is cut
	 * short (its journal entry stays for the next start). */
	if (op->plane->settled(op))
		return;
	op->timed_out = true;
	msb_error_set(&op->err, MSB_ERR_TIMEOUT, json_pack("{s:I}", "timeout_ms", (json_int_t)op->p.timeout_ms),
		      "the file call did not finish within %ld ms", op->p.timeout_ms);
	log_warnx("file %s on %.12s: deadline passed in state %d", fileop_kind_to_string(op->p.kind),
		  op->id, op->state);
	op->plane->abort(op);
}

struct fileop_table *fileop_table_new(void)
{
	struct fileop_table *t = xcalloc(1, sizeof(*t));

	TAILQ_INIT(&t->ops);
	t->local = plocal_shared_new();
	t->journal_fd = -1;
	return t;
}

struct fileop_table *fileop_table_free(struct fileop_table *t)
{
	if (!t)
		return NULL;
	assert(TAILQ_EMPTY(&t->ops));
	t->local = plocal_shared_free(t->local);
	if (t->journal_fd >= 0)
		close(t->journal_fd);
	free(t);
	return NULL;
}

size_t fileop_table_count(const struct fileop_table *t)
{
	return t ? t->count : 0;
}

struct plocal_shared *fileop_table_local(const struct fileop_table *t)
{
	return t ? t->local : NULL;
}

size_t fileop_table_fds_in_use(const struct fileop_table *t)
{
	return t ? plocal_shared_fds_in_use(t->local) : 0;
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
		if (op->plane->settled(op))
			continue;     /* the write landed: its outcome stands */
		op->timed_out = true;
		if (!op->err.code)
			msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		op->plane->abort(op);
	}
}

/* ---- the journal of temporaries --------------------------------------------- */

/* files.journal_dir, made (0700) and opened once; -1 when there is none. */
int fileop_journal_fd(struct fileop_table *t, const struct msbd_config *c)
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

int fileop_journal_fd_opened(const struct fileop_table *t)
{
	return t ? t->journal_fd : -1;
}

void **fileop_table_replayer(struct fileop_table *t)
{
	return &t->replayer;
}

const char *fileop_engine_ident(const struct domain *d, char buf[SHA256_HEX_BYTES])
{
	const struct engine_endpoint *ep = d && d->engine ? engine_get_endpoint(d->engine) : NULL;

	if (!ep || !ep->host)
		return NULL;
	sha256_hex(ep->host, strlen(ep->host), buf);
	return buf;
}

/* ---- the choice of plane ------------------------------------------------------ */

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

void fileop_fall_back(struct fileop *op)
{
	op->plane->release(op);
	op->plane_data = NULL;
	op->plane = &file_plane_archive;
	op->plane->start(op);
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
	fileop_enter(op, FOP_FREEZE);
	event_add(op->deadline, &tv);
	sb = op->d->registry ? registry_find_id(op->d->registry, op->id) : NULL;
	op->plane = fileop_plane_local(op->d, sb) ? &file_plane_local : &file_plane_archive;
	op->plane->start(op);
}
