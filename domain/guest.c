#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "errmap.h"
#include "execrun.h"
#include "fileop.h"
#include "guest.h"
#include "identity.h"
#include "log.h"
#include "plane_local.h"
#include "registry.h"
#include "xmalloc.h"

/* /proc/<pid>/status is read up to this much (its Uid and Gid lines come
 * early). */
#define GUEST_STATUS_MAX 8192

enum guest_state {
	GUEST_INSPECT,
	GUEST_DB,
	GUEST_ID_U,
	GUEST_ID_G,
	GUEST_DONE,
};

struct guest_req {
	struct domain *d;
	char *id;
	enum guest_state state;
	struct identity_user user;
	struct identity ident;
	bool user_ok;               /* Config.User parsed */
	bool transient;             /* a lookup failed for a passing reason (a timeout, the
				     * engine): an unresolved result is then not fixed */
	struct engine_req *req;
	struct fileop *fop;
	struct execrun *exec;
	struct msb_error err;
	struct event *finish_ev;
	guest_cb *cb;
	void *arg;
};

static void guest_free(struct guest_req *g)
{
	msb_error_clear(&g->err);
	event_free(g->finish_ev);
	free(g->id);
	free(g);
}

/* The one writer of a sandbox's identity (registry.h): the first
 * resolution is stored and kept; a later one (a concurrent call's, or one
 * made after the guest rewrote its /etc/passwd) gives way to it, and *id
 * becomes the stored one. */
static void guest_fix(struct guest_req *g, struct guest_identity *id)
{
	struct sandbox *sb = g->d->registry ? registry_find_id(g->d->registry, g->id) : NULL;

	if (guest_identity_fixed(sb, id))
		return;
	if (!id->resolved && g->transient) {
		log_warnx("the guest user of %.12s could not be resolved for now (a lookup timed out or the "
			  "engine failed); not fixed: the next call tries again", g->id);
		return;
	}
	if (sb && !identity_fixed_set(&sb->guest, id->resolved, id->uid, id->gid)) {
		guest_identity_fixed(sb, id);
		return;
	}
	if (id->resolved)
		log_debug("op", "guest of %.12s is %u:%u, fixed", g->id, (unsigned)id->uid, (unsigned)id->gid);
	else
		log_warnx("the guest user of %.12s could not be resolved; FILES_OUT and HOST_TOOLS "
			  "workloads are refused, inputs land root-owned, execs are refused", g->id);
}

bool guest_identity_fixed(const struct sandbox *sb, struct guest_identity *ret)
{
	if (!sb || !sb->guest.known)
		return false;
	/* identity_fixed_set stores an unresolved one as 0:0 */
	*ret = (struct guest_identity){ sb->guest.resolved, sb->guest.uid, sb->guest.gid };
	return true;
}

static void guest_finish_cb(evutil_socket_t fd, short what, void *arg)
{
	struct guest_req *g = arg;
	struct guest_identity id = { 0 };

	(void)fd, (void)what;
	if (!g->err.code) {
		id.resolved = identity_finish(&g->ident);
		/* Unresolved is 0:0, stored or not (a half found is not used). */
		id.uid = id.resolved ? g->ident.uid : 0;
		id.gid = id.resolved ? g->ident.gid : 0;
		guest_fix(g, &id);
	}
	if (g->cb)
		g->cb(g->err.code ? &g->err : NULL, &id, g->arg);
	guest_free(g);
}

static void guest_done(struct guest_req *g)
{
	g->state = GUEST_DONE;
	event_active(g->finish_ev, EV_TIMEOUT, 0);
}

static void guest_exec_cb(const struct execrun_result *r, void *arg);

/* Asks `id -u` or `id -g` for a half still unknown, or finishes. */
static void guest_next_exec(struct guest_req *g)
{
	static const char *const argv_u[] = { "id", "-u", NULL };
	static const char *const argv_g[] = { "id", "-g", NULL };
	struct execrun_spec spec = { .working_dir = "/", .timeout_ms = g->d->config->files_timeout_ms,
				     .max_output = 4096 };
	int r;

	if (!g->ident.uid_known && g->state < GUEST_ID_U) {
		g->state = GUEST_ID_U;
		spec.argv = argv_u;
	} else if (g->ident.uid_known && !g->ident.gid_known && g->state < GUEST_ID_G) {
		g->state = GUEST_ID_G;
		spec.argv = argv_g;
	} else {
		guest_done(g);
		return;
	}
	r = execrun_start(g->d->base, g->d->engine, g->d->freezes, g->id, &spec, guest_exec_cb, g, &g->exec);
	if (r < 0) {
		g->transient = true;
		log_warnx("guest %.12s: cannot run `id`: %s", g->id, strerror(-r));
		guest_done(g);
	}
}

static void guest_exec_cb(const struct execrun_result *r, void *arg)
{
	struct guest_req *g = arg;
	unsigned long v;

	g->exec = NULL;
	if (r->error == -ECANCELED) {
		msb_error_set(&g->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		guest_done(g);
		return;
	}
	if (r->error == -ENOENT) {
		msb_error_set(&g->err, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		guest_done(g);
		return;
	}
	if (r->error == 0 && r->exit_code == 0 &&
	    identity_parse_id_output((const char *)r->out, r->out_len, &v) == 0) {
		if (g->state == GUEST_ID_U) {
			g->ident.uid_known = true;
			g->ident.uid = (uid_t)v;
		} else {
			g->ident.gid_known = true;
			g->ident.gid = (gid_t)v;
		}
	} else {
		if (r->error)
			g->transient = true;   /* it did not run to its end: not an answer */
		log_warnx("guest %.12s: `id %s` failed (%s, exit %d)", g->id, g->state == GUEST_ID_U ? "-u" : "-g",
			  r->error ? strerror(-r->error) : "ran", r->error ? -1 : r->exit_code);
		if (g->state == GUEST_ID_U) {
			/* No uid: nothing more to learn. */
			guest_done(g);
			return;
		}
	}
	guest_next_exec(g);
}

static void guest_db_cb(struct fileop *op, const struct msb_error *err, void *arg)
{
	struct guest_req *g = arg;

	g->fop = NULL;
	if (err && (err->code == MSB_ERR_SHUTTING_DOWN || err->code == MSB_ERR_SANDBOX_NOT_FOUND ||
		    err->code == MSB_ERR_ENGINE_UNAVAILABLE)) {
		msb_error_copy(&g->err, err);
		guest_done(g);
		return;
	}
	if (err) {
		if (err->code == MSB_ERR_TIMEOUT || err->code == MSB_ERR_ENGINE_TIMEOUT ||
		    err->code == MSB_ERR_ENGINE_ERROR || err->code == MSB_ERR_FREEZE_FAILED)
			g->transient = true;
		log_warnx("guest %.12s: cannot read its user database: %s", g->id,
			  err->message ? err->message : msb_error_name(err->code));
	} else {
		for (size_t i = 0; i < fileop_count(op); i++) {
			struct fileop_item *it = fileop_item(op, i);

			if (it->err.code || !it->out)
				continue;
			if (strcmp(it->plan->target.path, "/etc/passwd") == 0)
				identity_apply_passwd(&g->user, (const char *)it->out, it->out_len, &g->ident);
			else
				identity_apply_group(&g->user, (const char *)it->out, it->out_len, &g->ident);
		}
	}
	guest_next_exec(g);
}

static void guest_add_db(struct fileop *op, const char *path)
{
	struct paths_plan *plan = NULL;
	enum paths_reason reason;

	if (paths_plan_new(PATHS_OP_READ, path, SIZE_MAX, "/", SIZE_MAX, "/", &plan, &reason) < 0)
		assert(!"guest_add_db: a constant path was refused");
	fileop_add(op, plan, NULL, 0);
}

/* Config.User known: numbers first, then the databases, then `id`. */
static void guest_from_user(struct guest_req *g, const char *config_user)
{
	struct fileop_params p = {
		.kind = FILEOP_READ, .id = g->id, .max_bytes = IDENTITY_DB_MAX_BYTES,
		.max_total = 2 * IDENTITY_DB_MAX_BYTES, .timeout_ms = g->d->config->files_timeout_ms,
		.per_item_errors = true,
	};
	bool passwd, group;
	int r;

	r = identity_parse_user(config_user ? config_user : "", &g->user);
	if (r < 0) {
		log_warnx("guest %.12s: Config.User is unusable: %s", g->id, strerror(-r));
		guest_done(g);
		return;
	}
	identity_from_user(&g->user, &g->ident);
	passwd = identity_needs_passwd(&g->user, &g->ident);
	group = identity_needs_group(&g->user, &g->ident);
	if (!passwd && !group) {
		guest_next_exec(g);
		return;
	}
	g->state = GUEST_DB;
	g->fop = fileop_new(g->d, &p);
	if (passwd)
		guest_add_db(g->fop, "/etc/passwd");
	if (group)
		guest_add_db(g->fop, "/etc/group");
	fileop_start(g->fop, guest_db_cb, g);
}

/* The container's init (State.Pid of inspect), when it can be read from
 * here: 0 and *ret_pid, else -ESRCH. */
static int guest_init_pid(const json_t *inspect, pid_t *ret_pid)
{
	const json_t *pid = json_object_get(json_object_get(inspect, "State"), "Pid");   /* borrows */

	if (!json_is_integer(pid) || json_integer_value(pid) <= 0 || json_integer_value(pid) > INT32_MAX)
		return -ESRCH;
	*ret_pid = (pid_t)json_integer_value(pid);
	return 0;
}

/* On a local engine (d->exec_host_kill: the engine's processes are this
 * host's, the daemon is root): the real uid and gid the runtime gave the
 * container's init. The runtime resolved Config.User against the image's
 * /etc/passwd before any guest code ran, so an ENTRYPOINT that rewrites
 * the file, or a rewrite before a daemon restart, changes nothing. The pid
 * is pinned as this container's (plane_local.h: its cgroup names the
 * container; a user namespace that remaps ids is refused, -EOPNOTSUPP) and
 * still alive after the read, so the status read was the init's. 0, or
 * -errno: then the ids are resolved by name as on a remote engine. */
static int guest_ids_of_init(const char *id, pid_t pid, uid_t *ret_uid, gid_t *ret_gid)
{
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	char path[64], buf[GUEST_STATUS_MAX];
	size_t len = 0;
	struct pollfd pfd;
	int fd, r;

	r = plocal_pin_open(pid, id, &pin);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		plocal_pin_close(&pin);
		return r;
	}
	while (len < sizeof(buf)) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	r = identity_parse_proc_status(buf, len, ret_uid, ret_gid);
	/* A pidfd polls readable once its process has exited: alive after the
	 * read, the pid named the pinned init all along. */
	pfd = (struct pollfd){ .fd = pin.pidfd, .events = POLLIN };
	if (r == 0 && poll(&pfd, 1, 0) != 0)
		r = -ESRCH;
	plocal_pin_close(&pin);
	return r;
}

/* From the container's inspect: the init's ids on a local engine, else
 * Config.User resolved. */
static void guest_from_inspect(struct guest_req *g, const json_t *inspect)
{
	const json_t *user = json_object_get(json_object_get(inspect, "Config"), "User");
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int r;

	if (g->d->exec_host_kill && guest_init_pid(inspect, &pid) == 0) {
		r = guest_ids_of_init(g->id, pid, &uid, &gid);
		if (r == 0) {
			g->ident.uid_known = g->ident.gid_known = true;
			g->ident.uid = uid;
			g->ident.gid = gid;
			log_debug("op", "guest of %.12s: %u:%u from its init's credentials", g->id, (unsigned)uid,
				  (unsigned)gid);
			guest_done(g);
			return;
		}
		log_info("guest %.12s: its init's credentials cannot be read (%s); resolving Config.User", g->id,
			 strerror(-r));
	}
	guest_from_user(g, json_string_value(user));
}

static void guest_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct guest_req *g = arg;

	g->req = NULL;
	if (r->error == 0 && r->status == 404) {
		msb_error_set(&g->err, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		guest_done(g);
		return;
	}
	if (r->error || r->status != 200) {
		errmap_docker(r, "inspecting the sandbox", &g->err);
		guest_done(g);
		return;
	}
	guest_from_inspect(g, r->body);
}

int guest_identity_start(struct domain *d, const char *id, const json_t *inspect, guest_cb *cb, void *arg,
			 struct guest_req **ret)
{
	struct guest_req *g = xcalloc(1, sizeof(*g));
	pid_t pid;
	int r;

	g->d = d;
	g->id = xstrdup(id);
	g->cb = cb;
	g->arg = arg;
	g->finish_ev = event_new(d->base, -1, 0, guest_finish_cb, g);
	if (!g->finish_ev)
		fatalx("%s: cannot create an event", __func__);
	/* The caller's inspect serves unless the init's ids are wanted and it
	 * has no init (taken before the start): then a fresh one. */
	if (inspect && (!d->exec_host_kill || guest_init_pid(inspect, &pid) == 0)) {
		guest_from_inspect(g, inspect);
	} else {
		g->state = GUEST_INSPECT;
		r = docker_container_inspect(d->engine, id, guest_inspect_cb, g, &g->req);
		if (r < 0) {
			guest_free(g);
			return r;
		}
	}
	if (ret)
		*ret = g;
	return 0;
}

void guest_identity_abandon(struct guest_req *g)
{
	g->cb = NULL;
}
