#include <assert.h>
#include <errno.h>
#include <string.h>

#include <event2/event.h>

#include "cleanup.h"
#include "daemon.h"
#include "docker.h"
#include "errmap.h"
#include "execrun.h"
#include "fileop.h"
#include "guest.h"
#include "identity.h"
#include "log.h"
#include "registry.h"
#include "xmalloc.h"

enum guest_state {
	GUEST_INSPECT,
	GUEST_DB,
	GUEST_ID_U,
	GUEST_ID_G,
	GUEST_DONE,
};

struct guest_req {
	struct msbd *d;
	char *id;
	enum guest_state state;
	struct identity_user user;
	struct identity ident;
	bool user_ok;               /* Config.User parsed */
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

	if (sb && !identity_fixed_set(&sb->guest, id->resolved, id->uid, id->gid)) {
		*id = (struct guest_identity){ sb->guest.resolved, sb->guest.uid, sb->guest.gid };
		return;
	}
	if (id->resolved)
		log_debug("op", "guest of %.12s is %u:%u, fixed", g->id, (unsigned)id->uid, (unsigned)id->gid);
	else
		log_warnx("the guest user of %.12s could not be resolved; FILES_OUT and HOST_TOOLS "
			  "workloads are refused, inputs land root-owned, execs run as the image's user", g->id);
}

static void guest_finish_cb(evutil_socket_t fd, short what, void *arg)
{
	struct guest_req *g = arg;
	struct guest_identity id = { 0 };

	(void)fd, (void)what;
	if (!g->err.code) {
		id.resolved = identity_finish(&g->ident);
		id.uid = g->ident.uid;
		id.gid = g->ident.gid;
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

static void guest_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct guest_req *g = arg;
	const json_t *user;

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
	user = json_object_get(json_object_get(r->body, "Config"), "User");
	guest_from_user(g, json_string_value(user));
}

int guest_identity_start(struct msbd *d, const char *id, const json_t *inspect, guest_cb *cb, void *arg,
			 struct guest_req **ret)
{
	struct guest_req *g = xcalloc(1, sizeof(*g));
	int r;

	g->d = d;
	g->id = xstrdup(id);
	g->cb = cb;
	g->arg = arg;
	g->finish_ev = event_new(d->base, -1, 0, guest_finish_cb, g);
	if (!g->finish_ev)
		fatalx("%s: cannot create an event", __func__);
	if (inspect) {
		const json_t *user = json_object_get(json_object_get(inspect, "Config"), "User");

		guest_from_user(g, json_string_value(user));
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
