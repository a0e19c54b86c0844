/* journal.c — the journal of temporaries (files.journal_dir, fileop.h):
 * replayed at the daemon's start (each temporary a killed daemon left is
 * removed through the plane that serves its sandbox), forgotten with a
 * disposed sandbox, counted per sandbox. The entries themselves are
 * plane_local.h's (plocal_journal_*). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "execrun.h"
#include "fileop.h"
#include "identity.h"
#include "journal.h"
#include "log.h"
#include "plane.h"
#include "plane_local.h"
#include "registry.h"
#include "xmalloc.h"

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
size_t journal_count(int jfd, const char *id)
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
	int jfd = fileop_journal_fd_opened(rp->d->fileops);
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
	int jfd = fileop_journal_fd_opened(d->fileops);
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
		if (d->fileops && *fileop_table_replayer(d->fileops) == rr)
			*fileop_table_replayer(d->fileops) = NULL;
		free(rr);
	}
}

void fileop_journal_replay(struct domain *d)
{
	int jfd = fileop_journal_fd(d->fileops, d->config);
	struct fop_replayer *rr;
	DIR *dir;

	if (jfd < 0 || *fileop_table_replayer(d->fileops) || !(dir = fop_journal_opendir(jfd)))
		return;
	rr = xcalloc(1, sizeof(*rr));
	rr->d = d;
	rr->dir = dir;
	rr->has_ours = fileop_engine_ident(d, rr->ours) != NULL;
	*fileop_table_replayer(d->fileops) = rr;
	fop_replay_next(rr);
}

void fileop_journal_forget(struct domain *d, const char *id)
{
	int jfd = d ? fileop_journal_fd_opened(d->fileops) : -1;
	char ours[SHA256_HEX_BYTES];
	bool has_ours = fileop_engine_ident(d, ours) != NULL;
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
