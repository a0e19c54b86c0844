/* plane_archive.c — the archive file plane (fileop.h, plane.h): an
 * operation run under one freeze of the container, through the engine's
 * archive API: the freeze, the HEAD walk of each item's plan (a cache
 * shares answers between items), the confirmation that an absence is not
 * a gone container, one PUT of one tar at "/" (WRITE, PREPARE) or one GET
 * per item (READ), the thaw, then the rm of a write's temporaries. CHECK,
 * REMOVE and RECLAIM only walk, unfrozen. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "engine.h"
#include "execrun.h"
#include "fileop.h"
#include "freeze.h"
#include "journal.h"
#include "log.h"
#include "plane.h"
#include "plane_local.h"
#include "tarball.h"
#include "xmalloc.h"

/* The walk cache: one answer per directory, shared by the items. */
#define CACHE_DIR     1
#define CACHE_ABSENT  0
/* a refusal is stored as -1 - reason */

/* The archive plane's state of one operation. */
struct fop_archive {
	struct fileop_view v;
	struct freeze_claim *claim;
	bool held;                   /* the claim was granted and not yet released */
	struct engine_req *req;
	size_t cur;                  /* the item being worked on */
	json_t *cache;               /* path → CACHE_* */
	bool absence_seen;           /* an answer depends on an absence (READ, STAT) */
	struct tarball_reader *reader;
	bool read_done;
	struct msb_error pending;    /* a "not found" held until CONFIRM says the container is there */
	bool clean_as_root;          /* the guest's rm of the temporaries failed: root's turn */
	/* the journal of temporaries: each item's entry lock */
	int *jfds;                   /* n_tmps entries, -1 once ended */
	char (*tmps)[PLOCAL_TEMP_NAME_MAX + PATHS_MAX_BYTES + 2];  /* the temporaries' guest paths */
	size_t n_tmps;
	struct execrun *clean;       /* the rm of the write's temporaries */
};

static struct fop_archive *ar_of(const struct fileop *fop)
{
	return fileop_plane_data(fop);
}

static void ar_done(struct fop_archive *op)
{
	op->req = NULL;
	fileop_done(op->v.fop);
}

static void fop_clean_start(struct fop_archive *op);

/* After the thaw: an archive write's temporaries are removed (by rm in
 * the guest, which needs it thawed), then the op is done. */
static void fop_after_thaw(struct fop_archive *op)
{
	if (op->n_tmps && !fileop_timed_out(op->v.fop)) {
		fop_clean_start(op);
		return;
	}
	ar_done(op);
}

static void fop_thawed_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct fop_archive *op = arg;

	(void)claim, (void)error, (void)f;
	/* A failed thaw is the freeze table's warning; the call's outcome stands. */
	fop_after_thaw(op);
}

/* Every path out of a granted freeze comes through here. */
static void fop_thaw(struct fop_archive *op)
{
	op->req = NULL;
	if (!op->held) {
		fop_after_thaw(op);
		return;
	}
	op->held = false;
	fileop_enter(op->v.fop, FOP_THAW);
	if (freeze_release_then(op->claim, fop_thawed_cb, op) < 0)
		fop_after_thaw(op);
}

/* Ends op early (its deadline, or the daemon stopping): the request in
 * flight is cancelled, and the guest thawed before the callback. */
static void ar_abort(struct fop_archive *op)
{
	if (fileop_state(op->v.fop) == FOP_CLEAN && op->clean) {
		/* Its callback runs now with -ECANCELED and finishes the op. */
		execrun_cancel(op->clean);
		return;
	}
	if (op->req) {
		/* Its callback runs now with -ECANCELED and thaws. */
		engine_req_cancel(op->req);
		return;
	}
	if (fileop_state(op->v.fop) == FOP_FREEZE && op->claim &&
	    freeze_claim_get_state(op->claim) == FREEZE_CLAIM_WAITING) {
		/* Still queued: withdrawn, nothing was paused. */
		struct freeze_claim *c = op->claim;

		op->claim = NULL;
		freeze_cancel(c);
		return;
	}
	if (fileop_state(op->v.fop) == FOP_FREEZE && op->claim) {
		/* The pause is in flight: its answer comes (under the engine's own
		 * deadline), then the thaw, then the callback — never before. */
		return;
	}
	if (fileop_state(op->v.fop) == FOP_FREEZE)
		ar_done(op);
}

/* Ends the journal entries of op's archive temporaries: removed (the
 * temporaries are gone) or only unlocked (left for the next start). */
static void fop_tmps_forget(struct fop_archive *op, bool removed)
{
	int jfd = fileop_journal_fd_opened(fileop_table_of(op->v.fop));

	for (size_t i = 0; i < op->n_tmps; i++) {
		if (op->jfds[i] < 0)
			continue;
		if (removed && jfd >= 0) {
			const struct plocal_journal j = { jfd, op->v.id, NULL };

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
	struct fop_archive *op = arg;
	bool ok = r->error == 0 && r->exit_code == 0;
	char words[201] = "";

	op->clean = NULL;
	/* The guest's rm first (the temporaries lie in the directories it owns
	 * where the guest's writes go, and a sandbox's root has no
	 * CAP_DAC_OVERRIDE to enter them), then root's for what is left (a
	 * temporary in a root-owned directory a non-root guest cannot enter). */
	if (!ok && r->error == 0 && !op->clean_as_root && (op->v.p->uid != 0 || op->v.p->gid != 0)) {
		op->clean_as_root = true;
		fop_clean_start(op);
		return;
	}
	if (!ok && fileop_journal_fd_opened(fileop_table_of(op->v.fop)) >= 0) {
		size_t waiting = journal_count(fileop_journal_fd_opened(fileop_table_of(op->v.fop)), op->v.id);

		if (waiting >= FILEOP_JOURNAL_MAX_PER_SANDBOX) {
			/* The sandbox's share of the journal is full: these temporaries
			 * stay, unjournalled (logged), never a journal without end. */
			log_warnx("file write on %.12s: %zu temporaries of this sandbox already wait in the "
				  "journal (%d at most): the ones of this write are not journalled", op->v.id,
				  waiting, FILEOP_JOURNAL_MAX_PER_SANDBOX);
			fop_tmps_forget(op, true);
		}
	}
	if (!ok && r->error == 0)
		fop_log_text(words, sizeof(words), r->err, r->err_len);
	if (!ok)
		log_warnx("file write on %.12s: the write's temporary file could not be removed (%s%s%s); the "
			  "next start of the daemon tries again%s", op->v.id,
			  r->error ? strerror(-r->error)
				   : op->v.p->uid || op->v.p->gid ? "rm failed as the guest and as root" : "rm failed",
			  words[0] ? ": " : "", words,
			  r->error == 0 && (r->exit_code == 126 || r->exit_code == 127)
				  ? " (the image has no usable " FILEOP_CLEAN_RM ": give it one)" : "");
	fop_tmps_forget(op, ok);
	ar_done(op);
}

/* rm -f of the temporaries, in the guest, by an absolute path (the guest's
 * PATH never chooses the binary): first as the guest (op->v.p), then, if that
 * failed, as FILEOP_CLEAN_USER (the engine's archive API writes as root,
 * whoever the guest is, so a temporary may lie in a root-owned directory;
 * and root in a sandbox has no CAP_DAC_OVERRIDE for the guest's). */
static void fop_clean_start(struct fop_archive *op)
{
	_cleanup_free_ const char **argv = xcalloc(op->n_tmps + 4, sizeof(*argv));
	char guest[32];
	struct execrun_spec spec = {
		.working_dir = "/", .user = FILEOP_CLEAN_USER, .timeout_ms = op->v.d->config->files_timeout_ms,
		.max_output = 4096,
	};
	int r;

	snprintf(guest, sizeof(guest), "%u:%u", (unsigned)op->v.p->uid, (unsigned)op->v.p->gid);
	if (!op->clean_as_root)
		spec.user = guest;

	argv[0] = FILEOP_CLEAN_RM;
	argv[1] = "-f";
	argv[2] = "--";
	for (size_t i = 0; i < op->n_tmps; i++)
		argv[3 + i] = op->tmps[i];
	spec.argv = argv;
	fileop_enter(op->v.fop, FOP_CLEAN);
	r = execrun_start(op->v.d->base, op->v.d->engine, op->v.d->freezes, op->v.id, &spec, fop_clean_cb, op, &op->clean);
	if (r < 0) {
		log_warnx("file write on %.12s: cannot remove the write's temporary file: %s", op->v.id, strerror(-r));
		fop_tmps_forget(op, false);
		ar_done(op);
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

static void fop_next(struct fop_archive *op);
static void fop_act(struct fop_archive *op);

/* An item's own refusal: the op's failure, or (per_item_errors) the item's. */
static void fop_item_refuse(struct fop_archive *op, struct fileop_item *it, enum paths_reason reason)
{
	if (op->v.p->per_item_errors && paths_reason_outcome(reason) != PATHS_OUTCOME_ENGINE) {
		fileop_error_from_reason(reason, it->plan->target.rel, &it->err);
		op->cur++;
		fop_next(op);
		return;
	}
	if (reason == PATHS_R_NOT_FOUND && op->absence_seen) {
		/* "Not found" only once the container is known to be there. */
		fileop_error_from_reason(reason, it->plan->target.rel, &op->pending);
		op->cur = op->v.n_items;
		fop_next(op);
		return;
	}
	{
		struct msb_error e = { 0 };

		fileop_error_from_reason(reason, it->plan->target.rel, &e);
		fileop_fail_error(op->v.fop, &e);
	}
}

static void fop_stat_cb(int error, long status, const char *stat, void *arg);

static void fop_head(struct fop_archive *op, const char *path, enum fop_state state)
{
	int r;

	fileop_enter(op->v.fop, state);
	r = docker_archive_stat(op->v.d->engine, op->v.id, path, fop_stat_cb, op, &op->req);
	if (r < 0)
		fileop_fail_engine(op->v.fop, r, 0, NULL, "examining a path");
}

/* Applies a walk verdict (1 dir, 0 absent, < 0 refusal reason) to the current item. */
static void fop_walk_apply(struct fop_archive *op, int verdict)
{
	struct fileop_item *it = &op->v.items[op->cur];

	if (verdict == CACHE_DIR) {
		it->walk_next++;
	} else if (verdict == CACHE_ABSENT) {
		it->walk_ended = true;
		it->walk_absent_from = it->walk_next;
		it->walk_next = it->plan->n_walk;
		if (op->v.p->kind == FILEOP_READ || op->v.p->kind == FILEOP_STAT)
			op->absence_seen = true;
	} else {
		fop_item_refuse(op, it, (enum paths_reason)(-1 - verdict));
		return;
	}
	fop_next(op);
}

/* The leaf answer for the current item (st NULL: absent). */
static void fop_leaf_apply(struct fop_archive *op, struct paths_stat *st)
{
	struct fileop_item *it = &op->v.items[op->cur];
	enum paths_reason reason;
	int r;

	if (st) {
		it->found = true;
		it->st = *st;
		*st = (struct paths_stat){ 0 };
	} else if (op->v.p->kind == FILEOP_READ || op->v.p->kind == FILEOP_STAT) {
		op->absence_seen = true;
	}
	r = paths_leaf_verdict(it->plan->op, it->found ? &it->st : NULL, &reason);
	if (r < 0) {
		fop_item_refuse(op, it, reason);
		return;
	}
	if (op->v.p->kind == FILEOP_READ && it->st.size > op->v.p->max_bytes) {
		if (op->v.p->per_item_errors) {
			msb_error_set(&it->err, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				      json_pack("{s:I, s:I}", "limit", (json_int_t)op->v.p->max_bytes,
						"size", (json_int_t)it->st.size),
				      "the file is %llu bytes and the caller allowed %llu",
				      (unsigned long long)it->st.size, (unsigned long long)op->v.p->max_bytes);
		} else {
			fileop_fail(op->v.fop, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:s, s:I, s:I}", "path", it->plan->target.rel,
					   "limit", (json_int_t)op->v.p->max_bytes, "size", (json_int_t)it->st.size),
				 "'%s' is %llu bytes and the caller allowed %llu", it->plan->target.rel,
				 (unsigned long long)it->st.size, (unsigned long long)op->v.p->max_bytes);
			return;
		}
	}
	op->cur++;
	fop_next(op);
}

static void fop_stat_cb(int error, long status, const char *stat, void *arg)
{
	struct fop_archive *op = arg;
	struct fileop_item *it = &op->v.items[op->cur];
	struct paths_stat st = { 0 };
	enum paths_reason reason;
	const char *path;
	int verdict;

	op->req = NULL;
	if (error < 0 || (status != 200 && status != 404)) {
		fileop_fail_engine(op->v.fop, error, status, NULL, "examining a path");
		return;
	}
	if (status == 200 && !stat) {
		fileop_fail(op->v.fop, MSB_ERR_ENGINE_ERROR, NULL, "the Docker engine sent a path stat without its header");
		return;
	}
	if (status == 200 && paths_stat_decode_header(stat, &st, &reason) < 0) {
		struct msb_error e = { 0 };

		log_warnx("file %s on %.12s: %s", fileop_kind_to_string(op->v.p->kind), op->v.id,
			  paths_reason_to_string(reason));
		fileop_error_from_reason(reason, NULL, &e);
		fileop_fail_error(op->v.fop, &e);
		return;
	}
	if (fileop_state(op->v.fop) == FOP_LEAF) {
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
static void fop_next(struct fop_archive *op)
{
	while (op->cur < op->v.n_items) {
		struct fileop_item *it = &op->v.items[op->cur];

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
		fileop_enter(op->v.fop, FOP_CONFIRM);
		r = docker_container_inspect(op->v.d->engine, op->v.id, fop_confirm_cb, op, &op->req);
		if (r < 0)
			fileop_fail_engine(op->v.fop, r, 0, NULL, "inspecting the sandbox");
		return;
	}
	fop_act(op);
}

static void fop_confirm_cb(const struct docker_reply *r, void *arg)
{
	struct fop_archive *op = arg;

	op->req = NULL;
	if (r->error == 0 && r->status == 404) {
		fileop_fail(op->v.fop, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		return;
	}
	if (r->error || r->status != 200) {
		fileop_fail_engine(op->v.fop, r->error, r->status, r->message, "inspecting the sandbox");
		return;
	}
	if (op->pending.code) {
		fileop_fail_error(op->v.fop, &op->pending);
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
static void fop_tmps_name(struct fop_archive *op)
{
	int jfd = fileop_journal_fd(fileop_table_of(op->v.fop), op->v.d->config);

	op->tmps = xcalloc(op->v.n_items, sizeof(*op->tmps));
	op->jfds = xcalloc(op->v.n_items, sizeof(*op->jfds));
	op->n_tmps = op->v.n_items;
	for (size_t i = 0; i < op->v.n_items; i++) {
		const char *path = op->v.items[i].plan->target.path;
		size_t plen = (size_t)(strrchr(path, '/') - path);
		char tmp[PLOCAL_TEMP_NAME_MAX];

		plocal_temp_name(tmp, sizeof(tmp));
		snprintf(op->tmps[i], sizeof(op->tmps[i]), "%.*s/%s", (int)plen, path, tmp);
		op->jfds[i] = -1;
		if (jfd >= 0) {
			char eng[SHA256_HEX_BYTES];
			const struct plocal_journal j = { jfd, op->v.id, fileop_engine_ident(op->v.d, eng) };
			_cleanup_free_ char *parent = plen ? xstrndup(path, plen) : xstrdup("/");

			op->jfds[i] = plocal_journal_begin(&j, parent, tmp);
			if (op->jfds[i] < 0)
				log_warnx("file write on %.12s: cannot journal its temporary file: %s", op->v.id,
					  strerror(-op->jfds[i]));
			op->jfds[i] = op->jfds[i] < 0 ? -1 : op->jfds[i];
		}
	}
}

/* The tar of a WRITE: for each item, the directories its walk found
 * missing at or below the working directory (guest-owned), then the file. */
static int fop_build_write(struct fop_archive *op, struct tarball_writer *w, json_t *made)
{
	for (size_t i = 0; i < op->v.n_items; i++) {
		struct fileop_item *it = &op->v.items[i];
		const struct paths_plan *pl = it->plan;
		size_t from = it->walk_absent_from > pl->walk_owned_from ? it->walk_absent_from
									  : pl->walk_owned_from;
		/* The content under the temporary name, then the final name made a
		 * link to it (the engine removes what was there first): a tar cut
		 * short leaves at most the temporary, never a short file. */
		struct tarball_file f = {
			.name = op->tmps[i] + 1, .data = it->data, .size = it->size,
			.mode = fileop_item_mode(it), .uid = op->v.p->uid, .gid = op->v.p->gid, .mtime = time(NULL),
		};
		struct tarball_link l = {
			.name = pl->target.path + 1, .target = op->tmps[i] + 1,
			.mode = fileop_item_mode(it), .uid = op->v.p->uid, .gid = op->v.p->gid, .mtime = f.mtime,
		};
		int r;

		for (size_t j = from; it->walk_ended && j < pl->n_walk; j++) {
			r = fop_tar_dir(w, made, pl->walk[j], op->v.p->uid, op->v.p->gid);
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
static int fop_build_prepare(struct fop_archive *op, struct tarball_writer *w, json_t *made, size_t *ret_n)
{
	const struct fileop_item *it = &op->v.items[0];
	const struct paths_plan *pl = it->plan;

	*ret_n = 0;
	if (!it->walk_ended)
		return 0;
	for (size_t j = it->walk_absent_from; j < pl->n_walk; j++) {
		bool base = j + 1 == pl->n_walk;
		int r = fop_tar_dir(w, made, pl->walk[j], base ? op->v.p->uid : 0, base ? op->v.p->gid : 0);

		if (r < 0)
			return r;
		(*ret_n)++;
	}
	return 0;
}

static void fop_put(struct fop_archive *op)
{
	struct tarball_buf buf = TARBALL_BUF_INIT(DOCKER_MAX_ARCHIVE_PUT);
	struct tarball_writer *w = tarball_writer_new(tarball_buf_write_cb, &buf);
	json_t *made = json_object();
	size_t n = 1;
	int r;

	if (!made)
		fatalx("%s: out of memory", __func__);
	if (op->v.p->kind == FILEOP_WRITE)
		fop_tmps_name(op);
	if (op->v.p->kind == FILEOP_WRITE)
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
			fileop_fail(op->v.fop, MSB_ERR_TRANSFER_CAP_EXCEEDED, NULL,
				 "the archive would exceed %u bytes", DOCKER_MAX_ARCHIVE_PUT);
		else
			fileop_fail(op->v.fop, MSB_ERR_INTERNAL, NULL, "building the archive failed: %s", strerror(-r));
		return;
	}
	if (n == 0) {
		/* PREPARE: nothing missing. */
		tarball_buf_clear(&buf);
		fop_thaw(op);
		return;
	}
	fileop_enter(op->v.fop, FOP_PUT);
	r = docker_archive_put(op->v.d->engine, op->v.id, "/", buf.data, buf.len, fop_put_cb, op, &op->req);
	tarball_buf_clear(&buf);
	if (r < 0) {
		fop_tmps_forget(op, true);     /* nothing reached the engine */
		fileop_fail_engine(op->v.fop, r, 0, NULL, "writing into the sandbox");
	}
}

static void fop_put_cb(const struct docker_reply *r, void *arg)
{
	struct fop_archive *op = arg;

	op->req = NULL;
	if (r->error == 0 && r->status == 200) {
		fop_thaw(op);
		return;
	}
	if (r->error == 0 && r->status == 400 && r->message) {
		/* Read-only root, a directory in the way: the guest's filesystem refused. */
		log_warnx("file %s on %.12s: the engine refused the archive: %.512s",
			  fileop_kind_to_string(op->v.p->kind), op->v.id, r->message);
		fileop_fail(op->v.fop, MSB_ERR_OS_ERROR, json_pack("{s:i}", "engine_status", (int)r->status),
			 op->v.p->kind == FILEOP_PREPARE ? "docker could not create the working directory"
						     : "the sandbox's filesystem refused the write");
		return;
	}
	fileop_fail_engine(op->v.fop, r->error, r->status, r->message,
			op->v.p->kind == FILEOP_PREPARE ? "creating the working directory" : "writing into the sandbox");
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
	struct fop_archive *op = arg;
	int r;

	if (op->read_done)
		return 0;
	r = tarball_reader_feed(op->reader, data, len);
	if (r == TARBALL_DONE)
		op->read_done = true;
	return r < 0 ? r : 0;
}

static void fop_get_next(struct fop_archive *op);

static void fop_get_done_cb(int error, long status, const char *message, const char *stat, void *arg)
{
	struct fop_archive *op = arg;
	struct fileop_item *it = &op->v.items[op->cur];
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
		fileop_fail_engine(op->v.fop, error, 0, NULL, "reading from the sandbox");
		return;
	}
	if (error == 0 && status != 200) {
		fileop_fail_engine(op->v.fop, 0, status, message, "reading from the sandbox");
		return;
	}
	if (r != TARBALL_DONE) {
		log_warnx("file read on %.12s: %s", op->v.id, tarball_error_to_string(te));
		if (te == TARBALL_ERR_OVER_CAP)
			fileop_fail(op->v.fop, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:I}", "limit", (json_int_t)op->v.p->max_bytes),
				 "'%s' is larger than the caller allowed", it->plan->target.rel);
		else
			fileop_fail(op->v.fop, MSB_ERR_ENGINE_ERROR, NULL, "docker returned an unusable archive: %s",
				 tarball_error_to_string(te));
		return;
	}
	ent = tarball_reader_entry(op->reader);
	if (!ent || ent->kind != TARBALL_KIND_FILE) {
		fileop_fail(op->v.fop, MSB_ERR_OS_ERROR, json_pack("{s:s}", "path", it->plan->target.rel),
			 "the path is not a regular file and is refused");
		return;
	}
	if (!it->out)
		it->out = xmalloc(1);
	op->reader = tarball_reader_free(op->reader);
	op->cur++;
	fop_get_next(op);
}

static void fop_get_next(struct fop_archive *op)
{
	while (op->cur < op->v.n_items) {
		struct fileop_item *it = &op->v.items[op->cur];
		int r;

		if (it->err.code || !it->found) {
			op->cur++;
			continue;
		}
		fileop_enter(op->v.fop, FOP_GET);
		op->read_done = false;
		it->out_cap = it->st.size ? it->st.size : 1;
		it->out = xmalloc(it->out_cap);
		it->out_len = 0;
		op->reader = tarball_reader_new(op->v.p->max_bytes, fop_body_cb, it);
		r = docker_archive_get(op->v.d->engine, op->v.id, it->plan->target.path,
				       op->v.d->config->engine_timeout_ms, fop_get_data_cb, fop_get_done_cb, op,
				       &op->req);
		if (r < 0)
			fileop_fail_engine(op->v.fop, r, 0, NULL, "reading from the sandbox");
		return;
	}
	fop_thaw(op);
}

static void fop_act(struct fop_archive *op)
{
	uint64_t total = 0;

	switch (op->v.p->kind) {
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
		for (size_t i = 0; i < op->v.n_items; i++)
			if (!op->v.items[i].err.code && op->v.items[i].found)
				total += op->v.items[i].st.size;
		if (total > op->v.p->max_total) {
			fileop_fail(op->v.fop, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				 json_pack("{s:I, s:I}", "limit", (json_int_t)op->v.p->max_total, "size", (json_int_t)total),
				 "the files are %llu bytes in all and the ceiling is %llu",
				 (unsigned long long)total, (unsigned long long)op->v.p->max_total);
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
	struct fop_archive *op = arg;

	if (error == 0 && fileop_timed_out(op->v.fop)) {
		op->held = true;
		op->claim = claim;
		fop_thaw(op);
		return;
	}
	if (error == 0) {
		op->held = true;
		op->claim = claim;
		fileop_enter(op->v.fop, FOP_WALK);
		op->cur = 0;
		fop_next(op);
		return;
	}
	op->claim = NULL;
	if (fileop_timed_out(op->v.fop)) {
		ar_done(op);
		return;
	}
	switch (error) {
	case -ENOENT:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		break;
	case -ESRCH:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "not running"),
			      "the sandbox is not running, so it cannot be frozen for a file call");
		break;
	case -EBUSY:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "already paused"),
			      "something else has paused the sandbox; the next acquire thaws it");
		break;
	case -EAGAIN:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "held elsewhere"),
			      "another maf-sandboxd on this host holds the sandbox frozen for a file call of "
			      "its own; try again");
		break;
	case -ENOLCK:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_INTERNAL, NULL,
			      "the daemon could not take its host freeze lock (freeze.lock_file)");
		break;
	case -EIO:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_FREEZE_FAILED,
			      json_pack("{s:s, s:i}", "reason", "refused", "engine_status", (int)(f ? f->status : 0)),
			      "the Docker engine cannot pause this sandbox, and file calls need the freeze");
		break;
	case -ETIMEDOUT:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_ENGINE_TIMEOUT, NULL, "the Docker engine did not answer the pause in time");
		break;
	case -ECANCELED:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		break;
	default:
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_ENGINE_UNAVAILABLE, NULL, "the Docker engine is not reachable");
		break;
	}
	if (f && f->message)
		log_warnx("file %s on %.12s: %s", fileop_kind_to_string(op->v.p->kind), op->v.id, f->message);
	ar_done(op);
}

/* The archive plane: the walk (unfrozen for CHECK, REMOVE, RECLAIM), or
 * the freeze first. */
static void fop_archive_begin(struct fop_archive *op)
{
	int r;

	if (op->v.p->kind == FILEOP_LIST) {
		fileop_error_no_listing(fileop_error(op->v.fop));
		ar_done(op);
		return;
	}
	for (size_t i = 0; i < op->v.n_items; i++) {
		const struct paths_plan *pl = op->v.items[i].plan;

		if (fileop_archive_mount_check_init(op->v.p->kind, pl->target.path, pl->target.rel, fileop_init_on(op->v.fop),
						    fileop_error(op->v.fop)) < 0) {
			ar_done(op);
			return;
		}
	}
	if (op->v.p->kind == FILEOP_CHECK || op->v.p->kind == FILEOP_REMOVE || op->v.p->kind == FILEOP_RECLAIM) {
		fileop_enter(op->v.fop, FOP_WALK);
		fop_next(op);
		return;
	}
	fileop_enter(op->v.fop, FOP_FREEZE);
	r = freeze_acquire(op->v.d->freezes, op->v.d->engine, op->v.id, fop_granted_cb, op, &op->claim);
	if (r == -EBUSY) {
		op->claim = NULL;
		msb_error_set(fileop_error(op->v.fop), MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "queue full"),
			      "too many file calls are queued on this sandbox (%d)", FREEZE_MAX_CLAIMS_PER_CONTAINER);
		ar_done(op);
	} else if (r < 0) {
		op->claim = NULL;
		fop_granted_cb(NULL, r, NULL, op);
	}
}

/* ---- the plane -------------------------------------------------------------- */

static void ar_start(struct fileop *fop)
{
	struct fop_archive *op = xcalloc(1, sizeof(*op));

	op->v = fileop_view(fop);
	op->cache = json_object();
	if (!op->cache)
		fatalx("%s: out of memory", __func__);
	fileop_set_plane_data(fop, op);
	fop_archive_begin(op);
}

static void ar_wind_up(struct fileop *fop)
{
	fop_thaw(ar_of(fop));
}

static bool ar_settled(struct fileop *fop)
{
	struct fop_archive *op = ar_of(fop);

	if (fileop_state(fop) == FOP_CLEAN && op->clean) {
		execrun_cancel(op->clean);
		return true;
	}
	return false;
}

static void ar_abort_op(struct fileop *fop)
{
	ar_abort(ar_of(fop));
}

static void ar_release(struct fileop *fop)
{
	struct fop_archive *op = ar_of(fop);

	if (!op)
		return;
	fop_tmps_forget(op, false);
	tarball_reader_free(op->reader);
	json_decref(op->cache);
	msb_error_clear(&op->pending);
	free(op);
}

const struct file_plane file_plane_archive = {
	.name = "archive",
	.start = ar_start,
	.wind_up = ar_wind_up,
	.settled = ar_settled,
	.abort = ar_abort_op,
	.release = ar_release,
};
