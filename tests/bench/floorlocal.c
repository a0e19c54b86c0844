/* floorlocal.c — the floor of the local file plane: what maf-sandboxd does
 * for a call on that plane, with the daemon's own code (plane_local.c,
 * paths.c, linked in) and no daemon: no protocol, no JSON, no base64, no
 * event loop. The local plane asks the engine nothing for a file call, so
 * its floor is the kernel work the daemon does beneath the container's
 * root, done by the same functions in the same order (read from
 * domain/files/fileop.c fop_local_run and domain/acquire.c
 * acq_workdir):
 *   every call   plocal_root_open through the container's pinned init
 *                (/proc/<pid>/root, the pidfd asked whether it still
 *                lives), then the method's bundle (paths_plan_new, the
 *                base /maf-sandbox/work), then:
 *   acquire_warm plocal_check of the work dir's chain, the daemon's own
 *                authority (no engine request: the registry is current)
 *   stat         plocal_stat as the guest
 *   read_*       plocal_read as the guest (max_bytes: files.max_file_bytes)
 *   write_*      plocal_write_mode as the guest (mode 0644), its temporary
 *                journalled in a journal directory of the floor's own, as
 *                the daemon journals in files.journal_dir
 *   remove       the mount check (fileop_archive_mount_check_init), then
 *                plocal_rm_begin (a file: one unlinkat) as the guest
 * The pin is made once per client, untimed (the daemon makes it at the
 * sandbox's first local call and keeps it in its registry): one GET
 * /containers/ID/json for the init's pid, then plocal_pin_open. A cold
 * acquire's local half (floor.c) makes its own pin, timed, as the daemon
 * looks its new container's init up. The guest's identity is Config.User
 * (empty: root), as the daemon resolves it for the bench's image. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "fileop.h"
#include "msb-limits.h"
#include "paths.h"
#include "plane_local.h"

struct floorlocal {
	struct plocal_pin pin;
	struct plocal_cred cred;
	char id[65];
	int jfd;                 /* the floor's journal directory, -1 none */
	char engine_ident[72];
};

struct floorlocal *floorlocal_new(const struct bench *b, const char *id, pid_t pid, const char *user,
				  char *err, size_t err_len)
{
	struct floorlocal *l = calloc(1, sizeof(*l));
	unsigned uid = 0, gid = 0;
	int r;

	if (!l) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	l->pin = (struct plocal_pin)PLOCAL_PIN_INIT;
	l->jfd = -1;
	if (user && *user && sscanf(user, "%u:%u", &uid, &gid) != 2) {
		snprintf(err, err_len, "the local floor needs an image whose Config.User is empty or uid:gid, not '%s'",
			 user);
		free(l);
		return NULL;
	}
	l->cred = (struct plocal_cred){ (uid_t)uid, (gid_t)gid };
	snprintf(l->id, sizeof(l->id), "%s", id);
	r = plocal_pin_open(pid, id, &l->pin);
	if (r < 0) {
		snprintf(err, err_len, "pinning the init (pid %ld) of %.12s: %s", (long)pid, id, strerror(-r));
		free(l);
		return NULL;
	}
	l->jfd = open(b->floor_journal, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	snprintf(l->engine_ident, sizeof(l->engine_ident), "bench-floor");
	return l;
}

const struct plocal_pin *floorlocal_pin(const struct floorlocal *l)
{
	return &l->pin;
}

const struct plocal_cred *floorlocal_cred(const struct floorlocal *l)
{
	return &l->cred;
}

struct floorlocal *floorlocal_free(struct floorlocal *l)
{
	if (!l)
		return NULL;
	plocal_pin_close(&l->pin);
	if (l->jfd >= 0)
		close(l->jfd);
	free(l);
	return NULL;
}

static void fail_err(struct client *c, const char *what, int r, struct msb_error *e)
{
	client_fail(c, "local floor %s: %s (%s)", what, e->message ? e->message : "?", strerror(-r));
	msb_error_clear(e);
}

static struct paths_plan *plan_of(struct client *c, enum paths_op op, const char *path)
{
	struct paths_plan *plan = NULL;
	enum paths_reason reason;

	if (paths_plan_new(op, path, strlen(path), NULL, 0, BENCH_WORK_DIR, &plan, &reason) < 0) {
		client_fail(c, "local floor: %s: %s", path, paths_reason_to_string(reason));
		return NULL;
	}
	return plan;
}

/* The work dir's chain, as acquire checks it (and makes what is missing
 * of it when make; owner: the base's owner). */
int floorlocal_workdir(struct client *c, const struct plocal_pin *pin, const struct plocal_cred *owner, bool make,
		       bool *ret_missing)
{
	struct paths_plan *plan = NULL;
	struct msb_error e = { 0 };
	enum paths_reason reason;
	int root = -1, r;

	r = plocal_root_open(pin, &root);
	if (r < 0) {
		client_fail(c, "local floor: the root: %s", strerror(-r));
		return -1;
	}
	if (paths_plan_new(PATHS_OP_LIST, ".", 1, BENCH_WORK_DIR, SIZE_MAX, BENCH_WORK_DIR, &plan, &reason) < 0) {
		close(root);
		client_fail(c, "local floor: the work dir: %s", paths_reason_to_string(reason));
		return -1;
	}
	if (make)
		r = plocal_prepare(root, plan, owner, &e);
	else
		r = plocal_check(root, plan, NULL, ret_missing, &e);
	paths_plan_free(plan);
	close(root);
	if (r < 0) {
		fail_err(c, make ? "prepare" : "check", r, &e);
		return -1;
	}
	return 0;
}

enum bench_outcome floorlocal_run(struct client *c, enum bench_op op, unsigned iter)
{
	struct floorlocal *l = c->flocal;
	const struct op_info *oi = op_info(op);
	struct plocal_journal j = { l ? l->jfd : -1, l ? l->id : NULL, l ? l->engine_ident : NULL };
	struct msb_error e = { 0 };
	struct paths_plan *plan = NULL;
	char file[32];
	int root = -1, r = 0;
	bool ok;

	if (!l)
		return (client_fail(c, "local floor: no pin"), OUT_ERROR);
	if (op == OP_ACQUIRE_WARM) {
		bool missing = false;

		if (floorlocal_workdir(c, &l->pin, NULL, false, &missing) < 0)
			return OUT_ERROR;
		return missing ? (client_fail(c, "local floor: the work dir is missing"), OUT_ERROR) : OUT_OK;
	}
	r = plocal_root_open(&l->pin, &root);
	if (r < 0)
		return (client_fail(c, "local floor: the root: %s", strerror(-r)), OUT_ERROR);
	switch (op) {
	case OP_STAT: {
		struct paths_stat st = { 0 };
		bool found = false;

		if (!(plan = plan_of(c, PATHS_OP_STAT, oi->file)))
			break;
		r = plocal_stat(root, plan, &l->cred, &found, &st, &e);
		if (r == 0 && (!found || st.size != (uint64_t)oi->bytes))
			client_fail(c, "local floor: stat %s: not a file of %zu bytes", oi->file, oi->bytes), r = -EIO;
		else if (r < 0)
			fail_err(c, "stat", r, &e);
		paths_stat_release(&st);
		break;
	}
	case OP_READ_4K:
	case OP_READ_1M:
	case OP_READ_32M: {
		struct paths_stat st = { 0 };
		uint8_t *data = NULL;
		size_t len = 0;

		if (!(plan = plan_of(c, PATHS_OP_READ, oi->file)))
			break;
		r = plocal_read(root, plan, &l->cred, MSB_TRANSFER_MAX_FILE_BYTES, &data, &len, &st, &e);
		if (r == 0 && len != oi->bytes)
			client_fail(c, "local floor: read %s: %zu bytes, expected %zu", oi->file, len, oi->bytes), r = -EIO;
		else if (r < 0)
			fail_err(c, "read", r, &e);
		free(data);
		paths_stat_release(&st);
		break;
	}
	case OP_WRITE_4K:
	case OP_WRITE_1M:
	case OP_WRITE_32M:
		if (!(plan = plan_of(c, PATHS_OP_WRITE, oi->file)))
			break;
		r = plocal_write_mode(root, plan, &l->cred, j.dirfd >= 0 ? &j : NULL, c->b->payload, oi->bytes, 0644, &e);
		if (r < 0)
			fail_err(c, "write", r, &e);
		break;
	case OP_REMOVE: {
		struct plocal_rm *rm = NULL;

		snprintf(file, sizeof(file), "rm-%u", iter);
		if (!(plan = plan_of(c, PATHS_OP_DELETE, file)))
			break;
		r = fileop_archive_mount_check_init(FILEOP_REMOVE, plan->target.path, plan->target.rel, true, &e);
		if (r == 0)
			r = plocal_rm_begin(root, plan, &l->cred, false, &rm, &e);
		while (r == 0 && rm)
			r = plocal_rm_step(rm, PLOCAL_REMOVE_SLICE, &e);   /* 0: more to do */
		if (r > 0)
			r = 0;
		plocal_rm_free(rm);
		if (r < 0)
			fail_err(c, "remove", r, &e);
		break;
	}
	default:
		client_fail(c, "local floor: no such op");
		r = -EINVAL;
	}
	ok = plan && r == 0;
	paths_plan_free(plan);
	close(root);
	return ok ? OUT_OK : OUT_ERROR;
}
