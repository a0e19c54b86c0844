#include <assert.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "acquire.h"
#include "backend.h"
#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "errmap.h"
#include "fileop.h"
#include "egress.h"
#include "execrun.h"
#include "freeze.h"
#include "guest.h"
#include "log.h"
#include "names.h"
#include "registry.h"
#include "xmalloc.h"

struct acquire_op {
	struct domain *d;
	struct acquire_table *table;
	TAILQ_ENTRY(acquire_op) entry;
	char name[NAMES_CONTAINER_MAX];
	json_t *key_json, *spec_json;
	struct msb_key key;
	struct msb_spec spec;
	uid_t owner;
	struct acquire_caller caller;  /* the first waiter's */
	enum acq_state state;
	struct engine_req *req;
	char *id;                    /* the container, once known */
	bool created;                /* this op created it: a failure removes it */
	bool adopting;               /* re-inspecting after a 409 (once) */
	struct msb_error err;        /* the failure to report */
	uint64_t inspect_seq;        /* registry event clock when the last inspect was sent */
	json_t *last_inspect;        /* the last inspect of the container */
	struct acq_waiter *waiters;
	size_t n_waiters;
	struct event *finish_ev;     /* completes the op from the loop */
	/* preparing (ACQ_IDENTITY, ACQ_WORKDIR_*) */
	bool preparing;              /* a failure from here keeps the container */
	struct guest_req *guest;
	struct fileop *fop;
	bool ident_known;            /* ident holds the answer */
	struct guest_identity ident;
	uint32_t probes_todo;        /* MSB_BIT(cap) of the probes still to run */
	uint32_t probes_failed;      /* and of those that failed: their waiters are refused */
	char *probe_failure;         /* the first failure, for the message */
	/* allowlist (ACQ_EGRESS): the sandbox's network and proxy */
	struct egress_op *eop;
	bool egress_known;           /* einfo holds them */
	bool egress_fresh;           /* made for a workload this op creates */
	bool egress_then_prepare;    /* where to go on: prepare, or start/create */
	struct egress_info einfo;
};

/* Each caller joined to the op, with what it asked for: the container is
 * checked against every waiter's own owner and work dir at the end. */
struct acq_waiter {
	struct acquire_caller caller;
	const struct acquire_waiter_ops *ops;
	void *arg;
	json_t *spec_json;
	struct msb_spec spec;
};

/* Every capability that touches the guest's files or runs in its work dir. */
#define ACQ_NEEDS_WORKDIR (MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_FILES_IN) | MSB_BIT(MSB_CAP_FILES_OUT) | \
			   MSB_BIT(MSB_CAP_FILES_LIST) | MSB_BIT(MSB_CAP_FILES_DELETE) | \
			   MSB_BIT(MSB_CAP_HOST_TOOLS))
/* A paused container another maf-sandboxd on this host holds frozen (its
 * host lock: a file call of its own, which ends within its copy) is waited
 * for this long, asking every FREEZE_HOST_RETRY_MS, before the acquire is
 * refused SandboxFreezeFailed "held elsewhere" (a retry may then succeed). */
#define ACQ_HELD_ELSEWHERE_WAIT_MS 10000
/* Refused when the guest's uid cannot be resolved (behaviour-docker §2.1 step 14). */
#define ACQ_NEEDS_IDENTITY (MSB_BIT(MSB_CAP_FILES_OUT) | MSB_BIT(MSB_CAP_HOST_TOOLS))

struct acquire_table {
	TAILQ_HEAD(, acquire_op) ops;
	size_t count;
};

static const char *const acq_state_names[_ACQ_STATE_MAX] = {
	[ACQ_INSPECT] = "inspect",
	[ACQ_UNPAUSE] = "unpause",
	[ACQ_OS_CHECK] = "os-check",
	[ACQ_IMAGE_INSPECT] = "image-inspect",
	[ACQ_PULL] = "pull",
	[ACQ_CREATE] = "create",
	[ACQ_START] = "start",
	[ACQ_REMOVE_STALE] = "remove-stale",
	[ACQ_INSPECT_FINAL] = "inspect-final",
	[ACQ_ROLLBACK_REMOVE] = "rollback-remove",
	[ACQ_IDENTITY] = "identity",
	[ACQ_WORKDIR_STAT] = "workdir-stat",
	[ACQ_WORKDIR_MAKE] = "workdir-make",
	[ACQ_PROBES] = "probes",
	[ACQ_EGRESS] = "egress",
	[ACQ_DONE] = "done",
	[ACQ_FAILED] = "failed",
};

const char *acq_state_to_string(enum acq_state s)
{
	return s < _ACQ_STATE_MAX ? acq_state_names[s] : NULL;
}

struct acquire_table *acquire_table_new(void)
{
	struct acquire_table *t = xcalloc(1, sizeof(*t));

	TAILQ_INIT(&t->ops);
	return t;
}

struct acquire_table *acquire_table_free(struct acquire_table *t)
{
	if (!t)
		return NULL;
	assert(TAILQ_EMPTY(&t->ops));
	free(t);
	return NULL;
}

size_t acquire_table_count(const struct acquire_table *t)
{
	return t->count;
}

static struct acquire_op *acquire_find(const struct acquire_table *t, const char *name)
{
	struct acquire_op *op;

	TAILQ_FOREACH(op, &t->ops, entry)
		if (strcmp(op->name, name) == 0)
			return op;
	return NULL;
}

bool acquire_in_flight(const struct acquire_table *t, const char *name)
{
	return acquire_find(t, name) != NULL;
}

void acquire_foreach(const struct acquire_table *t, acquire_visit_fn *fn, void *arg)
{
	struct acquire_op *op;

	TAILQ_FOREACH(op, &t->ops, entry) {
		json_t *labels = names_workload_labels(&op->key, &op->spec, op->owner);

		fn(op->name, labels, arg);
		json_decref(labels);
	}
}

const char *acquire_file_plane(const struct domain *d, const struct sandbox *sb)
{
	return fileop_plane_local(d, sb) ? "local" : "archive";
}

json_t *acquire_result(const struct domain *d, const struct sandbox *sb, const char *work_dir, bool created,
		       const struct egress_info *egress)
{
	const char *image = sandbox_label(sb, LABEL_IMAGE);

	return json_pack("{s:s, s:s, s:s?, s:s, s:b, s:s, s:s, s:o*, s:s*, s:s*}", "sandbox", sb->id, "name", sb->name,
			 "kind", sandbox_label(sb, LABEL_KIND), "work_dir", work_dir,
			 "created", created, "state", sandbox_state_to_string(sb->state),
			 "file_plane", acquire_file_plane(d, sb),
			 "egress", egress ? egress_info_json(egress) : NULL,
			 "image", image ? image : sb->image, "image_id", sb->image_id);
}

static void acq_enter(struct acquire_op *op, enum acq_state state);

/* ---- completion ------------------------------------------------------- */

static void acq_free(struct acquire_op *op)
{
	TAILQ_REMOVE(&op->table->ops, op, entry);
	op->table->count--;
	egress_op_cancel(op->eop);
	event_free(op->finish_ev);
	msb_key_release(&op->key);
	msb_spec_release(&op->spec);
	json_decref(op->key_json);
	json_decref(op->spec_json);
	msb_error_clear(&op->err);
	json_decref(op->last_inspect);
	free(op->probe_failure);
	free(op->id);
	for (size_t i = 0; i < op->n_waiters; i++) {
		msb_spec_release(&op->waiters[i].spec);
		json_decref(op->waiters[i].spec_json);
	}
	free(op->waiters);
	free(op);
}

/* The registry entry of a finished op; re-added from the op's last inspect
 * if a resync dropped it meanwhile (never over a newer event). */
static struct sandbox *acq_result_entry(struct acquire_op *op)
{
	struct sandbox *sb = registry_find_name(op->d->registry, op->name);

	if (!sb && op->last_inspect)
		sb = registry_update_from_inspect(op->d->registry, op->last_inspect, op->inspect_seq);
	return sb;
}

/* Why a waiter is not served sb (true, *err set), or false. */
static bool acq_refused(struct acquire_op *op, const struct acq_waiter *w, const struct sandbox *sb,
			struct msb_error *err)
{
	if (!sb) {
		msb_error_copy(err, &op->err);
		return true;
	}
	if (acquire_check(op->d, op->name, &op->key, &w->spec, &w->caller, sb->labels, sb->image, sb->image_id,
			  err) < 0)
		return true;
	if (w->spec.requires & op->probes_failed) {
		msb_error_set(err, MSB_ERR_CAPABILITY_NOT_SUPPORTED,
			      json_pack("{s:o}", "missing", msb_capability_set_encode(w->spec.requires & op->probes_failed)),
			      "image %s cannot serve this spec: %s", msb_spec_image_ref(&w->spec),
			      op->probe_failure ? op->probe_failure : "a command probe failed");
		return true;
	}
	if ((w->spec.requires & ACQ_NEEDS_IDENTITY) && (!sb->guest.known || !sb->guest.resolved)) {
		msb_error_set(err, MSB_ERR_CAPABILITY_NOT_SUPPORTED,
			      json_pack("{s:[ss]}", "missing", "files_out", "host_tools"),
			      "the image's user could not be resolved, which files_out, host_tools need. "
			      "Give the image a numeric uid:gid in Config.User, a readable /etc/passwd, or an "
			      "`id` it can run. One left unresolved by a passing failure (a timeout, the "
			      "engine) is resolved again by the next acquire; one the image cannot give "
			      "is kept for the container's life: dispose it once the image is fixed.");
		return true;
	}
	if ((w->spec.requires & MSB_BIT(MSB_CAP_FILES_LIST)) && !fileop_plane_local(op->d, sb)) {
		msb_error_set(err, MSB_ERR_CAPABILITY_NOT_SUPPORTED,
			      json_pack("{s:[s], s:s}", "missing", "files_list", "file_plane", "archive"),
			      "this sandbox is served by the archive file plane (its init cannot be pinned from "
			      "this daemon), which cannot list directories");
		return true;
	}
	return false;
}

/* Answers one waiter; true when it was served the sandbox. `created` is
 * what it is told of the container's making. */
static bool acq_answer(struct acquire_op *op, struct acq_waiter *w, const struct sandbox *sb, bool created)
{
	struct msb_error err = { 0 };

	if (acq_refused(op, w, sb, &err)) {
		w->ops->done(NULL, &err, w->arg);
		msb_error_clear(&err);
		return false;
	}
	w->ops->done(acquire_result(op->d, sb, msb_spec_work_dir(&w->spec), created,
				    op->egress_known ? &op->einfo : NULL), NULL, w->arg);
	return true;
}

/* Client text for the log: at most MSB_ECHO_MAX_BYTES, control characters
 * as '?' (a key cannot forge a log line). malloc'd. */
static char *log_text(const char *s)
{
	char *out = xstrndup(s ? s : "", (size_t)msb_echo_len(s ? s : ""));

	for (char *p = out; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	return out;
}

/* Answers every waiter and frees the op (from the loop, via finish_ev). */
static void acq_finish_cb(evutil_socket_t fd, short what, void *arg)
{
	struct acquire_op *op = arg;
	struct sandbox *sb = op->state == ACQ_DONE ? acq_result_entry(op) : NULL;
	bool told = false;

	(void)fd, (void)what;
	if (op->state == ACQ_DONE && !sb)
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
			      "the sandbox %s vanished as it was acquired", op->name);
	/* `created` goes to one caller only, when the op made the container: the
	 * one that started it (the first waiter), or, when it is gone or was
	 * refused, the first other still connected that is served. The others
	 * joined: for them it is a container someone else may already have
	 * written into. */
	for (size_t i = 0; i < op->n_waiters; i++) {
		struct acq_waiter *w = &op->waiters[i];
		bool first = op->created && !told && !w->ops->detached(w->arg);

		if (acq_answer(op, w, sb, first) && first)
			told = true;
	}
	if (sb) {
		_cleanup_free_ char *kind = log_text(op->spec.kind), *image = log_text(msb_spec_image_ref(&op->spec));
		_cleanup_free_ char *scope = log_text(op->key.scope), *thread = log_text(op->key.thread_id);
		_cleanup_free_ char *call = log_text(op->key.call_id);

		log_info("sandbox %s: container=%s kind=%s image=%s owner=%u scope=%s thread=%s%s%s",
			 op->created ? "created" : "ready", op->name, kind, image,
			 (unsigned)(sb->has_owner ? sb->owner : op->owner), scope, thread, *call ? " call=" : "", call);
	}
	else
		log_info("sandbox %s: acquire failed: %s", op->name,
			 op->err.message ? op->err.message : msb_error_name(op->err.code));
	acq_free(op);
}

static void acq_complete(struct acquire_op *op, enum acq_state final)
{
	op->state = final;
	op->req = NULL;
	event_active(op->finish_ev, EV_TIMEOUT, 0);
}

/* A failure: roll back what this op created, then report. */
static void acq_fail(struct acquire_op *op)
{
	if (op->created && op->id && !op->preparing && op->state != ACQ_ROLLBACK_REMOVE &&
	    op->err.code != MSB_ERR_SHUTTING_DOWN) {
		acq_enter(op, ACQ_ROLLBACK_REMOVE);
		return;
	}
	if (op->egress_fresh && op->egress_known && !op->created && op->err.code != MSB_ERR_SHUTTING_DOWN) {
		/* the network and proxy made for a workload that never came */
		egress_teardown(op->d->egress, op->name);
		op->egress_fresh = false;
	}
	acq_complete(op, ACQ_FAILED);
}

/* The first failure is the one reported; a failed rollback is only logged. */
static void acq_fail_engine(struct acquire_op *op, const struct docker_reply *r, const char *what)
{
	if (!op->err.code)
		errmap_docker(r, what, &op->err);
	else
		log_warnx("sandbox %s: %s failed too (%s), the container may remain", op->name, what,
			  r->error ? strerror(-r->error) : r->message ? r->message : "engine refused");
	acq_fail(op);
}

/* ---- facts read from a container ------------------------------------- */

/* The identity labels must be the key's: a container under our name that
 * is not this key's (a foreign look-alike, a hash collision) is refused. */
/* ---- preparing: identity and work dir ----------------------------------- */

uid_t acquire_key_space(const struct domain *d, const struct acquire_caller *caller)
{
	return caller->admin ? NAMES_SEED_UID : caller->uid;
}

bool acquire_spec_needs_prepare(const struct msb_spec *spec)
{
	return (spec->requires & ACQ_NEEDS_WORKDIR) != 0;
}

/* What the op's waiters need, together. */
static uint32_t acq_requires(const struct acquire_op *op)
{
	uint32_t r = op->spec.requires;

	for (size_t i = 0; i < op->n_waiters; i++)
		r |= op->waiters[i].spec.requires;
	return r;
}

/* The command probes of behaviour-docker §2.1 step 15: which capability,
 * what runs, what must come back. */
static const struct acq_probe {
	enum msb_capability cap;
	const char *name;
	const char *script;
} acq_probes[] = {
	{ MSB_CAP_HOST_TOOLS, "host-tools",
	  "mkdir -p / || exit 11; t=/.maf-command-probe-$$; mv -f \"$t\" \"$t-to\" 2>/dev/null; "
	  "[ $? -eq 1 ] || exit 12; nohup sh -c 'exit 0' >/dev/null 2>&1 || exit 13; exit 0" },
	{ MSB_CAP_EXEC, "sh", "exit 0" },
	{ MSB_CAP_FILES_DELETE, "rm", "rm -rf -- || exit 14; exit 0" },
};

static void acq_probe_next(struct acquire_op *op);

/* Why a probe could not run, in words of ours (the wire gets these; the
 * engine's text and strerror go to the log). */
static const char *acq_probe_why(int error)
{
	switch (error) {
	case -ENOENT:
		return "the sandbox is gone";
	case -ESRCH:
		return "the sandbox is not running";
	case -EIO:
		return "the Docker engine refused to run it";
	case -ETIME:
	case -ETIMEDOUT:
		return "it did not finish in time";
	case -EFBIG:
		return "it wrote too much";
	default:
		return "the Docker engine could not be reached";
	}
}

static void acq_probe_cb(const struct execrun_result *r, void *arg)
{
	struct acquire_op *op = arg;
	const struct acq_probe *p = NULL;
	struct sandbox *sb;

	for (size_t i = 0; i < ELEMENTSOF(acq_probes) && !p; i++)
		if (op->probes_todo & MSB_BIT(acq_probes[i].cap))
			p = &acq_probes[i];
	op->probes_todo &= ~MSB_BIT(p->cap);
	if (r->error == -ECANCELED) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		acq_complete(op, ACQ_FAILED);
		return;
	}
	if (r->error == 0 && r->exit_code == 0) {
		sb = registry_find_id(op->d->registry, op->id);
		if (sb)
			sb->probes_passed |= MSB_BIT(p->cap);
		if (p->cap == MSB_CAP_HOST_TOOLS && sb)
			sb->probes_passed |= MSB_BIT(MSB_CAP_EXEC);   /* it ran sh */
	} else {
		log_warnx("sandbox %s: the %s probe failed (%s, exit %d)", op->name, p->name,
			  r->error ? strerror(-r->error) : "ran", r->error ? -1 : r->exit_code);
		op->probes_failed |= MSB_BIT(p->cap);
		if (p->cap == MSB_CAP_HOST_TOOLS)
			op->probes_failed |= MSB_BIT(MSB_CAP_EXEC);
		if (!op->probe_failure)
			op->probe_failure = r->error ? xasprintf("the %s probe could not run (%s)", p->name,
								 acq_probe_why(r->error))
						     : xasprintf("the %s probe exited %d", p->name, r->exit_code);
	}
	acq_probe_next(op);
}

/* Runs the next probe still to do, or completes. */
static void acq_probe_next(struct acquire_op *op)
{
	for (size_t i = 0; i < ELEMENTSOF(acq_probes); i++) {
		const char *argv[] = { "sh", "-c", acq_probes[i].script, NULL };
		struct execrun_spec spec = { .argv = argv, .working_dir = "/",
					     .timeout_ms = op->d->config->files_timeout_ms, .max_output = 4096 };
		struct execrun_result fr = { 0 };

		if (!(op->probes_todo & MSB_BIT(acq_probes[i].cap)))
			continue;
		op->state = ACQ_PROBES;
		fr.error = execrun_start(op->d->base, op->d->engine, op->d->freezes, op->id, &spec, acq_probe_cb, op,
					 NULL);
		if (fr.error < 0) {
			fr.out = fr.err = (const uint8_t *)"";
			acq_probe_cb(&fr, op);
		}
		return;
	}
	acq_complete(op, ACQ_DONE);
}

/* Identity and work dir done: the command probes the waiters' specs need,
 * each once per instance (only passes are remembered: a failure is tried
 * again on the next acquire). */
static void acq_prepared(struct acquire_op *op)
{
	const struct sandbox *sb = registry_find_id(op->d->registry, op->id);
	uint32_t want = acq_requires(op);
	uint32_t passed = sb ? sb->probes_passed : 0;

	op->probes_todo = 0;
	if (want & MSB_BIT(MSB_CAP_HOST_TOOLS))
		op->probes_todo |= MSB_BIT(MSB_CAP_HOST_TOOLS);
	else if (want & MSB_BIT(MSB_CAP_EXEC))
		op->probes_todo |= MSB_BIT(MSB_CAP_EXEC);
	if (want & MSB_BIT(MSB_CAP_FILES_DELETE))
		op->probes_todo |= MSB_BIT(MSB_CAP_FILES_DELETE);
	op->probes_todo &= ~passed;
	acq_probe_next(op);
}

static void acq_workdir_make_done(struct fileop *fop, const struct msb_error *err, void *arg)
{
	struct acquire_op *op = arg;

	(void)fop;
	op->fop = NULL;
	if (err) {
		msb_error_set(&op->err, err->code, err->data ? json_deep_copy(err->data) : NULL,
			      "could not create the working directory %s: %s", msb_spec_work_dir(&op->spec),
			      err->message ? err->message : msb_error_name(err->code));
		acq_fail(op);
		return;
	}
	acq_prepared(op);
}

static void acq_workdir_make(struct acquire_op *op)
{
	const char *wd = msb_spec_work_dir(&op->spec);
	struct fileop_params p = {
		.kind = FILEOP_PREPARE, .id = op->id, .timeout_ms = op->d->config->files_timeout_ms,
		.uid = op->ident.uid, .gid = op->ident.gid,   /* 0:0 when unresolved (guest.h) */
	};
	struct paths_plan *plan = NULL;
	enum paths_reason reason;

	op->state = ACQ_WORKDIR_MAKE;
	if (paths_plan_new(PATHS_OP_LIST, ".", 1, wd, SIZE_MAX, wd, &plan, &reason) < 0) {
		fileop_error_from_reason(reason, wd, &op->err);
		acq_fail(op);
		return;
	}
	op->fop = fileop_new(op->d, &p);
	fileop_add(op->fop, plan, NULL, 0);
	fileop_start(op->fop, acq_workdir_make_done, op);
}

static void acq_workdir_check_done(struct fileop *fop, const struct msb_error *err, void *arg)
{
	struct acquire_op *op = arg;
	const struct fileop_item *it = fileop_item(fop, 0);

	op->fop = NULL;
	if (err) {
		/* A link or a non-directory on the way: the guest's doing; refused. */
		msb_error_copy(&op->err, err);
		acq_fail(op);
		return;
	}
	if (!it->walk_ended) {
		/* Every component from "/" down is a real directory: nothing to make. */
		acq_prepared(op);
		return;
	}
	/* Something is missing: the frozen walk decides, and makes it. */
	acq_workdir_make(op);
}

static void acq_workdir(struct acquire_op *op)
{
	const char *wd = msb_spec_work_dir(&op->spec);
	struct fileop_params p = { .kind = FILEOP_CHECK, .id = op->id, .timeout_ms = op->d->config->files_timeout_ms };
	struct paths_plan *plan = NULL;
	enum paths_reason reason;

	if (!(acq_requires(op) & ACQ_NEEDS_WORKDIR) || strcmp(wd, "/") == 0) {
		acq_prepared(op);
		return;
	}
	/* Unfrozen: one stat per component, from "/" down (a guest could link
	 * /maf-sandbox to / and make the work dir itself look fine). */
	op->state = ACQ_WORKDIR_STAT;
	if (paths_plan_new(PATHS_OP_LIST, ".", 1, wd, SIZE_MAX, wd, &plan, &reason) < 0) {
		fileop_error_from_reason(reason, wd, &op->err);
		acq_fail(op);
		return;
	}
	op->fop = fileop_new(op->d, &p);
	fileop_add(op->fop, plan, NULL, 0);
	fileop_start(op->fop, acq_workdir_check_done, op);
}

static void acq_identity_cb(const struct msb_error *err, const struct guest_identity *id, void *arg)
{
	struct acquire_op *op = arg;

	op->guest = NULL;
	if (err) {
		msb_error_copy(&op->err, err);
		acq_fail(op);
		return;
	}
	/* Fixed in the registry entry by guest.c (the first resolution wins). */
	op->ident = *id;
	op->ident_known = true;
	acq_workdir(op);
}

static void acq_egress(struct acquire_op *op, bool fresh, bool then_prepare);

/* The container runs: learn who its guest is and make its work dir. */
static void acq_prepare(struct acquire_op *op)
{
	const struct sandbox *sb = registry_find_id(op->d->registry, op->id);
	int r;

	if (egress_spec_needs_proxy(&op->spec) && !op->egress_known) {
		acq_egress(op, false, true);
		return;
	}
	op->preparing = true;
	op->req = NULL;
	if (!(acq_requires(op) & ACQ_NEEDS_WORKDIR)) {
		acq_prepared(op);
		return;
	}
	if (guest_identity_fixed(sb, &op->ident)) {
		op->ident_known = true;
		acq_workdir(op);
		return;
	}
	op->state = ACQ_IDENTITY;
	r = guest_identity_start(op->d, op->id, op->last_inspect, acq_identity_cb, op, &op->guest);
	if (r < 0) {
		struct docker_reply dr = { .error = r };

		acq_fail_engine(op, &dr, "resolving the guest's user");
	}
}

static bool labels_match_key(const struct msb_key *key, const char *kind, const json_t *labels)
{
	const struct {
		const char *label;
		const char *value;
	} want[] = {
		{ LABEL_SCOPE, key->scope }, { LABEL_THREAD, key->thread_id },
		{ LABEL_AGENT, key->agent_dir }, { LABEL_KIND, kind },
	};
	const char *call = json_string_value(json_object_get(labels, LABEL_CALL));

	for (size_t i = 0; i < ELEMENTSOF(want); i++) {
		_cleanup_free_ char *v = names_label_value(want[i].value);
		const char *have = json_string_value(json_object_get(labels, want[i].label));

		if (!have || strcmp(have, v))
			return false;
	}
	if (!key->call_id[0])
		return call == NULL;
	{
		_cleanup_free_ char *v = names_label_value(key->call_id);

		return call && strcmp(call, v) == 0;
	}
}

/* The owner label as a uid: decimal, no sign, no excess. */
static bool owner_label_parse(const char *s, uid_t *ret_uid)
{
	unsigned long long v = 0;

	if (!s || !*s || strlen(s) > 10)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v >= (uid_t)-1)
		return false;
	*ret_uid = (uid_t)v;
	return true;
}

/* In root's key space (the seed's names), whose container may root or an
 * administrator be served? The seed's (no owner label), root's, the
 * caller's own, or a current administrator's: root's space is shared by
 * those. Not a user's: one made before keys were per owner, or by a member
 * since removed from sandbox.admin_group, who still reaches it by id. */
static bool root_space_owner_ok(const struct domain *d, const struct acquire_caller *caller, const char *owner,
				uid_t *ret_owner)
{
	uid_t o;

	if (!owner)
		return true;
	if (!owner_label_parse(owner, &o))
		return false;
	*ret_owner = o;
	/* the user database only for a container another uid made (rare) */
	return o == 0 || o == caller->uid || (d->is_admin && d->is_admin(d->out_arg, o, (gid_t)-1));
}

/* ---- spec conflicts ---------------------------------------------------- */

/* Image ids compare without their "sha256:". */
static const char *image_id_bare(const char *id)
{
	return id && strncmp(id, "sha256:", 7) == 0 ? id + 7 : id;
}

static bool image_ids_equal(const char *a, const char *b)
{
	return a && b && *image_id_bare(a) && strcmp(image_id_bare(a), image_id_bare(b)) == 0;
}

/* The image difference, or NULL: see acquire_spec_differences. */
static json_t *image_difference(const struct msb_spec *spec, const json_t *labels, const char *image,
				const char *image_id)
{
	const char *want = msb_spec_image_ref(spec);
	const char *made = json_string_value(json_object_get(labels, LABEL_IMAGE));
	const char *existing;

	if (!made && image && strncmp(image, "sha256:", 7) != 0)
		made = image;            /* the seed's or an older daemon's: Config.Image */
	if (!want || (made && strcmp(want, made) == 0) || image_ids_equal(spec->image_id, image_id))
		return NULL;
	if (!made && !(spec->image_id && image_id))
		return NULL;             /* nothing to compare with: served */
	existing = made ? made : image_id;
	return json_pack("{s:s, s:s, s:s}", "field", spec->image_id ? "image_id" : "image", "requested", want,
			 "existing", existing);
}

/* Is v an object of strings? */
static bool is_object_of_strings(const json_t *v)
{
	const char *k;
	json_t *s;

	if (!json_is_object(v))
		return false;
	json_object_foreach((json_t *)v, k, s)
		if (!json_is_string(s))
			return false;
	return true;
}

json_t *acquire_user_labels(const json_t *labels)
{
	const char *raw = json_string_value(json_object_get(labels, LABEL_LABELS_JSON));
	json_t *out = raw && strlen(raw) <= ACQUIRE_LABELS_JSON_MAX ? json_loads(raw, JSON_REJECT_DUPLICATES, NULL)
								     : NULL;
	size_t plen = strlen(LABEL_USER_PREFIX), bytes = 0;
	const char *k;
	json_t *v;

	if (is_object_of_strings(out))
		return out;
	json_decref(out);
	out = json_object();
	json_object_foreach((json_t *)labels, k, v) {
		if (strncmp(k, LABEL_USER_PREFIX, plen) != 0 || !json_is_string(v))
			continue;
		bytes += strlen(k + plen) + json_string_length(v);
		if (bytes > ACQUIRE_LABELS_JSON_MAX)
			break;
		json_object_set(out, k + plen, v);
	}
	return out;
}

/* Do the container's maf-sandbox.label.* hold exactly the spec's labels? */
static bool user_labels_match(const json_t *want, const json_t *labels)
{
	size_t have = 0, plen = strlen(LABEL_USER_PREFIX);
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)labels, k, v)
		if (strncmp(k, LABEL_USER_PREFIX, plen) == 0)
			have++;
	if (have != json_object_size(want))
		return false;
	json_object_foreach((json_t *)want, k, v) {
		_cleanup_free_ char *name = xasprintf("%s%s", LABEL_USER_PREFIX, k);
		_cleanup_free_ char *lv = names_label_value(json_string_value(v));
		const char *got = json_string_value(json_object_get(labels, name));

		if (!got || strcmp(got, lv))
			return false;
	}
	return true;
}

/* The spec's labels for a difference: as given when their JSON is at most
 * ACQUIRE_LABELS_JSON_MAX bytes, else as the container's labels hold them
 * (values digested like maf-sandbox.label.*), at most that many bytes of
 * keys and values: the error stays within its reply bound. */
static json_t *requested_labels(const json_t *want)
{
	char *raw = json_dumps(want, JSON_COMPACT);
	size_t bytes = 0;
	json_t *out, *v;
	const char *k;

	if (raw && strlen(raw) <= ACQUIRE_LABELS_JSON_MAX) {
		free(raw);
		return json_deep_copy(want);
	}
	free(raw);
	out = json_object();
	json_object_foreach((json_t *)want, k, v) {
		_cleanup_free_ char *lv = names_label_value(json_string_value(v));

		bytes += strlen(k) + strlen(lv);
		if (bytes > ACQUIRE_LABELS_JSON_MAX)
			break;
		json_object_set_new(out, k, json_string(lv));
	}
	return out;
}

json_t *acquire_spec_differences(const struct msb_spec *spec, const json_t *labels, const char *image,
				 const char *image_id)
{
	const char *wd = json_string_value(json_object_get(labels, LABEL_WORK_DIR));
	json_t *diffs = json_array(), *img = image_difference(spec, labels, image, image_id);

	if (!wd || strcmp(wd, msb_spec_work_dir(spec)))
		json_array_append_new(diffs, json_pack("{s:s, s:s, s:s?}", "field", "work_dir", "requested",
						       msb_spec_work_dir(spec), "existing", wd));
	if (img)
		json_array_append_new(diffs, img);
	if (!user_labels_match(spec->labels, labels))
		json_array_append_new(diffs, json_pack("{s:s, s:o, s:o}", "field", "labels", "requested",
						       requested_labels(spec->labels),
						       "existing", acquire_user_labels(labels)));
	return diffs;
}

/* The spec must be the one the container was made with: each difference
 * is named, with the fix. data.work_dir stays for clients of before. */
static int acq_check_spec(const char *name, const struct msb_spec *spec, const json_t *labels,
			  const char *image, const char *image_id, const char *wd, struct msb_error *reterr)
{
	json_t *diffs = acquire_spec_differences(spec, labels, image, image_id), *d, *data;
	char *fields = xstrdup("");
	bool work_dir_differs = false;
	size_t i;

	if (json_array_size(diffs) == 0) {
		json_decref(diffs);
		free(fields);
		return 0;
	}
	json_array_foreach(diffs, i, d) {
		const char *field = json_string_value(json_object_get(d, "field"));
		char *grown = xasprintf("%s%s%s", fields, i ? ", " : "", field);

		work_dir_differs |= strcmp(field, "work_dir") == 0;
		free(fields);
		fields = grown;
	}
	data = json_pack("{s:o}", "differences", diffs);
	if (work_dir_differs)
		json_object_set_new(data, "work_dir", wd ? json_string(wd) : json_null());
	msb_error_set(reterr, MSB_ERR_SANDBOX_CONFLICT, data,
		      "sandbox %s exists with another %s than this spec asks for (data.differences has both); it is "
		      "not served as another: dispose of it first (maf-sandbox dispose, sandbox.dispose), or "
		      "use another kind", name, fields);
	free(fields);
	return -EEXIST;
}

int acquire_check(const struct domain *d, const char *name, const struct msb_key *key,
		  const struct msb_spec *spec, const struct acquire_caller *caller, const json_t *labels,
		  const char *image, const char *image_id, struct msb_error *reterr)
{
	const char *wd = json_string_value(json_object_get(labels, LABEL_WORK_DIR));
	const char *owner = json_string_value(json_object_get(labels, LABEL_OWNER));
	char uid[32];

	if (!labels_match_key(key, spec->kind, labels)) {
		msb_error_set(reterr, MSB_ERR_SANDBOX_CONFLICT, NULL,
			      "a container named %s exists but is not this key's sandbox; refusing it",
			      name);
		return -EEXIST;
	}
	snprintf(uid, sizeof(uid), "%u", (unsigned)caller->uid);
	if (caller->admin) {
		uid_t o = (uid_t)-1;

		if (!root_space_owner_ok(d, caller, owner, &o)) {
			/* root and administrators may see every owner: the uid is told */
			if (o != (uid_t)-1)
				msb_error_set(reterr, MSB_ERR_SANDBOX_CONFLICT, json_pack("{s:I}", "owner", (json_int_t)o),
					      "the container under this key's name (%s) was made by uid %u before keys "
					      "were per owner (or by a former member of sandbox.admin_group); it is not "
					      "root's to serve. Dispose of it (maf-sandbox dispose --sandbox ID; "
					      "maf-sandbox ls shows it) or reap it", name, (unsigned)o);
			else
				msb_error_set(reterr, MSB_ERR_SANDBOX_CONFLICT, NULL,
					      "the container under this key's name (%s) has an unreadable owner label; "
					      "it is not root's to serve. Dispose of it (maf-sandbox dispose --sandbox "
					      "ID) or reap it", name);
			return -EEXIST;
		}
	} else if (!owner || strcmp(owner, uid)) {
		msb_error_set(reterr, MSB_ERR_PERMISSION_DENIED, NULL,
			      "this sandbox key is not available to the caller");
		return -EPERM;
	}
	return acq_check_spec(name, spec, labels, image, image_id, wd, reterr);
}

static bool acq_may_serve(struct acquire_op *op, const json_t *inspect)
{
	const json_t *config = json_object_get(inspect, "Config");

	return acquire_check(op->d, op->name, &op->key, &op->spec, &op->caller, json_object_get(config, "Labels"),
			     json_string_value(json_object_get(config, "Image")),
			     json_string_value(json_object_get(inspect, "Image")), &op->err) == 0;
}

/* ---- the state machine ----------------------------------------------- */

static void acq_docker_cb(const struct docker_reply *r, void *arg);

static json_t *acq_create_config(const struct acquire_op *op)
{
	const struct msbd_config *cfg = op->d->config;
	const char *keepalive[] = ACQUIRE_KEEPALIVE_CMD;
	json_t *labels = names_workload_labels(&op->key, &op->spec, op->owner);
	json_t *host = json_object(), *cmd = json_array();
	json_t *raw_key = json_pack("[s, s, s, s, s]", op->key.scope, op->key.thread_id,
				    op->key.agent_dir, op->key.call_id, op->spec.kind);
	json_t *extra = NULL, *config;
	char *raw = json_dumps(raw_key, JSON_COMPACT);

	json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
	free(raw);
	/* What it is made from, for the spec-conflict check and the listings. */
	json_object_set_new(labels, LABEL_IMAGE, json_string(msb_spec_image_ref(&op->spec)));
	raw = json_dumps(op->spec.labels, JSON_COMPACT | JSON_SORT_KEYS);
	if (raw && strlen(raw) <= ACQUIRE_LABELS_JSON_MAX)
		json_object_set_new(labels, LABEL_LABELS_JSON, json_string(raw));
	free(raw);
	json_decref(raw_key);
	for (size_t i = 0; i < ELEMENTSOF(keepalive); i++)
		json_array_append_new(cmd, json_string(keepalive[i]));
	/* No binds, no mounts, no host paths, never the engine socket. */
	if (op->egress_known) {
		/* Only on its internal network. The proxy variables say where the
		 * proxy is (an address: no name to resolve); the resolver is an
		 * address nothing serves, so no lookup leaves (CVE-2024-29018). */
		const struct egress_info *ei = &op->einfo;
		char url[96];
		json_t *env = json_array();
		static const char *const vars[] = { "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy" };

		snprintf(url, sizeof(url), "http://%s:%d", ei->proxy_address, EGRESS_PROXY_PORT);
		for (size_t i = 0; i < ELEMENTSOF(vars); i++)
			json_array_append_new(env, json_sprintf("%s=%s", vars[i], url));
		json_object_set_new(host, "NetworkMode", json_string(ei->network));
		json_object_set_new(host, "Dns", json_pack("[s]", ei->dns));
		json_object_set_new(host, "ExtraHosts", json_pack("[s++]", ei->proxy, ":", ei->proxy_address));
		/* IPv4 only: no link-local way to the bridge's host side */
		json_object_set_new(host, "Sysctls", json_pack("{s:s, s:s}", "net.ipv6.conf.all.disable_ipv6", "1",
							     "net.ipv6.conf.default.disable_ipv6", "1"));
		json_object_set_new(labels, LABEL_EGRESS, json_string("allowlist"));
		extra = json_pack("{s:o, s:{s:{}}}", "Env", env, "EndpointsConfig", ei->network);
	} else {
		json_object_set_new(host, "NetworkMode", json_string("none"));
	}
	json_object_set_new(host, "SecurityOpt", json_pack("[s]", "no-new-privileges"));
	json_object_set_new(host, "PidsLimit", json_integer(cfg->pids_limit));
	json_object_set_new(host, "Init", json_boolean(cfg->init));
	if (cfg->cap_drop_all)
		json_object_set_new(host, "CapDrop", json_pack("[s]", "ALL"));
	if (cfg->memory_bytes)
		json_object_set_new(host, "Memory", json_integer((json_int_t)cfg->memory_bytes));
	if (cfg->cpus > 0)
		json_object_set_new(host, "NanoCpus", json_integer((json_int_t)(cfg->cpus * 1e9 + 0.5)));
	config = json_pack("{s:s, s:o, s:o, s:b, s:b, s:o}", "Image", msb_spec_image_ref(&op->spec),
			   "Cmd", cmd, "Labels", labels, "Tty", 0, "OpenStdin", 0, "HostConfig", host);
	if (extra) {
		json_object_set(config, "Env", json_object_get(extra, "Env"));
		json_object_set_new(config, "NetworkingConfig",
				    json_pack("{s:O}", "EndpointsConfig", json_object_get(extra, "EndpointsConfig")));
		json_decref(extra);
	}
	return config;
}

static void acq_pull_progress_cb(const json_t *line, void *arg)
{
	struct acquire_op *op = arg;

	for (size_t i = 0; i < op->n_waiters; i++) {
		json_t *p = json_pack("{s:s, s:s}", "name", op->name, "image", msb_spec_image_ref(&op->spec));

		static const char *const keep[] = { "status", "id", "progress" };
		json_t *detail = json_object_get(line, "progressDetail");

		for (size_t k = 0; k < ELEMENTSOF(keep); k++) {
			json_t *v = json_object_get(line, keep[k]);

			if (json_is_string(v))
				json_object_set(p, keep[k], v);
		}
		if (json_is_integer(json_object_get(detail, "current")))
			json_object_set(p, "current", json_object_get(detail, "current"));
		if (json_is_integer(json_object_get(detail, "total")))
			json_object_set(p, "total", json_object_get(detail, "total"));
		op->waiters[i].ops->notify(MSB_NOTIFY_PULL_PROGRESS, p, op->waiters[i].arg);
	}
}

/* A failed pull, as the wire gets it: the code and a stable reason naming
 * the image and the fix, never the engine's text (its message names
 * registries, resolvers, addresses of the host: the log has it). */
/* By the error alone (docker.h's pull contract); status only fills
 * engine_status for a refusal. */
static void acq_pull_error(const char *ref, int error, long status, struct msb_error *reterr)
{
	switch (error) {
	case -ECANCELED:
		msb_error_set(reterr, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		return;
	case -ETIMEDOUT:
		msb_error_set(reterr, MSB_ERR_ENGINE_TIMEOUT, json_pack("{s:s}", "image", ref),
			      "pulling image %s did not finish within sandbox.pull_timeout_ms (pull it into the "
			      "engine beforehand, or raise the timeout)", ref);
		return;
	case -EIO:
		/* The engine answered: it, or the registry behind it, refused. */
		if (status == 404)
			msb_error_set(reterr, MSB_ERR_ENGINE_ERROR,
				      json_pack("{s:s, s:i}", "image", ref, "engine_status", (int)status),
				      "image not found: %s (pull it or check the name)", ref);
		else
			msb_error_set(reterr, MSB_ERR_ENGINE_ERROR,
				      json_pack("{s:s, s:i}", "image", ref, "engine_status", (int)status),
				      "image could not be pulled: %s (the engine or its registry refused it; pull "
				      "it or check the name; the daemon's log has the engine's reason)", ref);
		return;
	case -EPROTO:
	case -EMSGSIZE:
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR, json_pack("{s:s}", "image", ref),
			      "image could not be pulled: %s (the engine's progress stream was unusable)", ref);
		return;
	case -ECONNABORTED:
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR, json_pack("{s:s}", "image", ref),
			      "image could not be pulled: %s (the pull was cut short: the engine's connection broke "
			      "after it answered; try again)", ref);
		return;
	default:
		/* The engine could not be reached, or dropped the connection unanswered. */
		msb_error_set(reterr, MSB_ERR_ENGINE_UNAVAILABLE, json_pack("{s:s}", "image", ref),
			      "the Docker engine could not be reached while pulling image %s", ref);
		return;
	}
}

static void acq_pull_done_cb(int error, long status, const char *message, void *arg)
{
	struct acquire_op *op = arg;
	const char *ref = msb_spec_image_ref(&op->spec);

	op->req = NULL;
	if (error < 0) {
		log_warnx("sandbox %s: could not pull image %s (HTTP %ld): %s", op->name, ref, status,
			  message ? message : strerror(-error));
		acq_pull_error(ref, error, status, &op->err);
		acq_fail(op);
		return;
	}
	acq_enter(op, ACQ_CREATE);
}

static void acq_thaw_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f,
			void *arg)
{
	struct acquire_op *op = arg;

	(void)claim;
	if (error == -ECANCELED) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		acq_complete(op, ACQ_FAILED);
		return;
	}
	if (error == -EAGAIN) {
		/* Never thawed under another live daemon's file call. */
		msb_error_set(&op->err, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "held elsewhere"),
			      "sandbox %s is held frozen by another maf-sandboxd on this host, still after "
			      "%d ms; it was left frozen; try again", op->name, ACQ_HELD_ELSEWHERE_WAIT_MS);
		acq_fail(op);
		return;
	}
	if (error < 0) {
		log_warnx("%s", f && f->message ? f->message : strerror(-error));
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
			      "sandbox %s was left frozen and could not be thawed; refusing to serve a "
			      "container whose guest cannot run", op->name);
		acq_fail(op);
		return;
	}
	acq_enter(op, ACQ_INSPECT_FINAL);
}

static void acq_egress_cb(const struct msb_error *err, const struct egress_info *info, void *arg)
{
	struct acquire_op *op = arg;

	op->eop = NULL;
	if (err) {
		msb_error_copy(&op->err, err);
		acq_fail(op);
		return;
	}
	op->einfo = *info;
	op->egress_known = true;
	if (info->network_new && op->id) {
		/* Its network was gone and is made anew: the workload is not on it
		 * (behaviour-docker §2.1 step 4). Replace it. */
		log_warnx("sandbox %s: its network %s was gone; replacing the sandbox on a new one", op->name,
			  info->network);
		op->preparing = false;
		acq_enter(op, ACQ_REMOVE_STALE);
		return;
	}
	if (op->egress_then_prepare)
		acq_prepare(op);
	else
		acq_enter(op, op->id ? ACQ_START : ACQ_IMAGE_INSPECT);
}

/* Whose the sandbox's network and proxy are: an existing workload's owner
 * (its label, from the last inspect or the registry), so root and the
 * administrators sharing root's key space share its topology too; else
 * (a workload to create, or one without an owner label) the caller's. */
static uid_t acq_topology_owner(const struct acquire_op *op)
{
	const struct sandbox *sb = op->id ? registry_find_id(op->d->registry, op->id) : NULL;
	const json_t *labels = op->last_inspect ? json_object_get(json_object_get(op->last_inspect, "Config"), "Labels")
						: sb ? sb->labels : NULL;
	uid_t o;

	if (op->id && owner_label_parse(json_string_value(json_object_get(labels, LABEL_OWNER)), &o))
		return o;
	return op->owner;
}

/* An allowlisted spec: its network and proxy must exist and run before the
 * workload is created or started (fresh: no workload exists yet). A warm
 * proxy the daemon follows costs nothing. */
static void acq_egress(struct acquire_op *op, bool fresh, bool then_prepare)
{
	int r;

	op->egress_then_prepare = then_prepare;
	if (!egress_spec_needs_proxy(&op->spec) ||
	    (!fresh && egress_proxy_ok(op->d->egress, op->name, &op->einfo))) {
		op->egress_known = egress_spec_needs_proxy(&op->spec);
		if (then_prepare)
			acq_prepare(op);
		else
			acq_enter(op, op->id ? ACQ_START : ACQ_IMAGE_INSPECT);
		return;
	}
	op->state = ACQ_EGRESS;
	op->egress_fresh = fresh;
	r = egress_ensure(op->d->egress, op->name, &op->key, &op->spec, fresh ? op->owner : acq_topology_owner(op),
			  fresh, acq_egress_cb, op, &op->eop);
	if (r < 0) {
		_cleanup_free_ char *why = egress_allowlist_off_reason(op->d);

		msb_error_set(&op->err, MSB_ERR_EGRESS_NOT_ENFORCED,
			      json_pack("{s:s}", "config_key", "egress.proxy_binary"),
			      "this daemon does not serve egress allowlist: %s",
			      why ? why : "egress.proxy_binary names no usable proxy");
		acq_fail(op);
	}
}

/* Issues the request of a state. A refusal to start fails the op. */
static void acq_enter(struct acquire_op *op, enum acq_state state)
{
	struct engine *e = op->d->engine;
	const char *ref = msb_spec_image_ref(&op->spec);
	json_t *config = NULL;
	int r;

	log_debug("op", "acquire %s: %s -> %s", op->name, acq_state_to_string(op->state),
		  acq_state_to_string(state));
	op->state = state;
	switch (state) {
	case ACQ_INSPECT:
		op->inspect_seq = registry_event_seq(op->d->registry);
		r = docker_container_inspect(e, op->name, acq_docker_cb, op, &op->req);
		break;
	case ACQ_UNPAUSE:
		/* Under the container's lock: never lifts a freeze of ours; under
		 * its host lock, none of another daemon's (it waits for that). */
		r = freeze_table_thaw_orphan_wait(op->d->freezes, e, op->id, ACQ_HELD_ELSEWHERE_WAIT_MS,
						  acq_thaw_cb, op, NULL);
		if (r == -EAGAIN || r == -ENOLCK) {
			acq_thaw_cb(NULL, r, NULL, op);   /* the host lock refused it at once */
			return;
		}
		break;
	case ACQ_OS_CHECK:
		r = docker_version(e, acq_docker_cb, op, &op->req);
		break;
	case ACQ_IMAGE_INSPECT:
		r = docker_image_inspect(e, ref, acq_docker_cb, op, &op->req);
		break;
	case ACQ_PULL:
		r = docker_image_pull(e, ref, op->d->config->pull_timeout_ms, op->d->config->pull_timeout_ms,
				      acq_pull_progress_cb, acq_pull_done_cb, op, &op->req);
		break;
	case ACQ_CREATE:
		config = acq_create_config(op);
		r = docker_container_create(e, op->name, config, acq_docker_cb, op, &op->req);
		json_decref(config);
		break;
	case ACQ_START:
		r = docker_container_start(e, op->id, acq_docker_cb, op, &op->req);
		break;
	case ACQ_REMOVE_STALE:
	case ACQ_ROLLBACK_REMOVE:
		r = docker_container_remove(e, op->id, true, acq_docker_cb, op, &op->req);
		break;
	case ACQ_INSPECT_FINAL:
		op->inspect_seq = registry_event_seq(op->d->registry);
		r = docker_container_inspect(e, op->id, acq_docker_cb, op, &op->req);
		break;
	default:
		assert(!"unreachable");
		return;
	}
	if (r < 0) {
		struct docker_reply dr = { .error = r };

		acq_fail_engine(op, &dr, acq_state_to_string(state));
	}
}

static void acq_set_id(struct acquire_op *op, const char *id)
{
	free(op->id);
	op->id = id ? xstrdup(id) : NULL;
}

/* INSPECT: what is under our name decides the path. */
static void acq_inspect_done(struct acquire_op *op, const struct docker_reply *r)
{
	const json_t *state = json_object_get(r->body, "State");

	if (r->error == 0 && r->status == 404) {
		if (op->adopting) {
			/* 409 on create, then gone: someone removed it meanwhile. */
			msb_error_set(&op->err, MSB_ERR_SANDBOX_CONFLICT, NULL,
				      "container %s was in use, then gone; try again", op->name);
			acq_fail(op);
			return;
		}
		acq_enter(op, ACQ_OS_CHECK);
		return;
	}
	if (r->error || r->status != 200 || !json_is_object(r->body)) {
		acq_fail_engine(op, r, "inspecting the sandbox");
		return;
	}
	if (!acq_may_serve(op, r->body)) {
		acq_fail(op);
		return;
	}
	acq_set_id(op, json_string_value(json_object_get(r->body, "Id")));
	json_decref(op->last_inspect);
	op->last_inspect = json_incref(r->body);
	registry_update_from_inspect(op->d->registry, r->body, op->inspect_seq);
	if (json_is_true(json_object_get(state, "Paused"))) {
		/* Left frozen by a dead daemon: thaw it before handing it out. */
		acq_enter(op, ACQ_UNPAUSE);
	} else if (json_is_true(json_object_get(state, "Running"))) {
		acq_prepare(op);
	} else {
		acq_enter(op, ACQ_OS_CHECK);
	}
}

/* OS_CHECK: a cold acquire re-reads the engine's OS (it may have moved). */
static void acq_os_check_done(struct acquire_op *op, const struct docker_reply *r)
{
	const char *os = json_string_value(json_object_get(r->body, "Os"));

	if (r->error == 0 && r->status == 200 && os && strcasecmp(os, "linux") &&
	    backend_os_families(op->d)) {
		msb_error_set(&op->err, MSB_ERR_OS_FAMILY_NOT_SUPPORTED, json_pack("{s:s}", "os", os),
			      "the Docker engine moved under this backend: it now reports Os %s", os);
		acq_fail(op);
		return;
	}
	/* Unreadable: serve, as the seed does. An allowlisted sandbox gets its
	 * network and proxy first (a new workload is created on that network). */
	acq_egress(op, !op->id, false);
}

static void acq_create_done(struct acquire_op *op, const struct docker_reply *r)
{
	if (r->error == 0 && r->status == 409 && !op->adopting) {
		/* Created by someone else meanwhile: adopt it if it is ours. */
		op->adopting = true;
		acq_enter(op, ACQ_INSPECT);
		return;
	}
	if (r->error || r->status != 201 || !json_string_value(json_object_get(r->body, "Id"))) {
		acq_fail_engine(op, r, "creating the container");
		return;
	}
	acq_set_id(op, json_string_value(json_object_get(r->body, "Id")));
	op->created = true;
	acq_enter(op, ACQ_START);
}

static void acq_start_done(struct acquire_op *op, const struct docker_reply *r)
{
	if (r->error == 0 && (r->status == 204 || r->status == 304)) {
		acq_enter(op, ACQ_INSPECT_FINAL);
		return;
	}
	if (!op->created && r->error == 0) {
		/* A stopped container that will not start: replace it. */
		log_warnx("sandbox %s: could not restart (%s), replacing it", op->name,
			  r->message ? r->message : "engine refused");
		acq_enter(op, ACQ_REMOVE_STALE);
		return;
	}
	acq_fail_engine(op, r, "starting the container");
}

static void acq_final_done(struct acquire_op *op, const struct docker_reply *r)
{
	const json_t *state = json_object_get(r->body, "State");

	if (r->error || r->status != 200) {
		acq_fail_engine(op, r, "inspecting the started container");
		return;
	}
	json_decref(op->last_inspect);
	op->last_inspect = json_incref(r->body);
	registry_update_from_inspect(op->d->registry, r->body, op->inspect_seq);
	if (!json_is_true(json_object_get(state, "Running"))) {
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
			      "container %s is not running after start (its image must provide sleep)",
			      op->name);
		acq_fail(op);
		return;
	}
	acq_prepare(op);
}

static void acq_docker_cb(const struct docker_reply *r, void *arg)
{
	struct acquire_op *op = arg;

	op->req = NULL;
	if (r->error == -ECANCELED) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		acq_complete(op, ACQ_FAILED);
		return;
	}
	switch (op->state) {
	case ACQ_INSPECT:
		acq_inspect_done(op, r);
		break;
	case ACQ_OS_CHECK:
		acq_os_check_done(op, r);
		break;
	case ACQ_IMAGE_INSPECT:
		if (r->error == 0 && r->status == 200)
			acq_enter(op, ACQ_CREATE);
		else if (r->error == 0 && r->status == 404)
			acq_enter(op, ACQ_PULL);
		else
			acq_fail_engine(op, r, "inspecting the image");
		break;
	case ACQ_CREATE:
		acq_create_done(op, r);
		break;
	case ACQ_START:
		acq_start_done(op, r);
		break;
	case ACQ_REMOVE_STALE:
		if (r->error || (r->status != 204 && r->status != 404)) {
			acq_fail_engine(op, r, "removing a container that would not start");
			break;
		}
		acq_set_id(op, NULL);
		acq_enter(op, ACQ_IMAGE_INSPECT);
		break;
	case ACQ_INSPECT_FINAL:
		acq_final_done(op, r);
		break;
	case ACQ_ROLLBACK_REMOVE:
		if (r->error || (r->status != 204 && r->status != 404))
			log_warnx("sandbox %s: rollback could not remove %s, it may remain", op->name, op->id);
		else if (op->egress_fresh)
			egress_teardown(op->d->egress, op->name);   /* its proxy, then its network */
		acq_complete(op, ACQ_FAILED);
		break;
	default:
		assert(!"unreachable");
	}
}

/* ---- starting and joining -------------------------------------------- */

/* Joins a waiter to op with its own spec (validated by the caller). */
static void acq_add_waiter(struct acquire_op *op, const struct acquire_caller *caller,
			   const struct acquire_waiter_ops *ops, void *arg, json_t *spec_json)
{
	struct acq_waiter *w;
	const char *field;
	char *msg = NULL;

	op->waiters = xrealloc(op->waiters, (op->n_waiters + 1) * sizeof(*op->waiters));
	w = &op->waiters[op->n_waiters++];
	*w = (struct acq_waiter){ .caller = *caller, .ops = ops, .arg = arg, .spec_json = json_incref(spec_json) };
	if (msb_spec_decode(spec_json, &w->spec, &field, &msg) < 0)
		assert(!"acq_add_waiter: the spec was not validated");
}

/* A new op for name, with its first waiter; in the table. The first
 * caller owns what it makes. */
static struct acquire_op *acq_new(struct domain *d, const struct acquire_caller *caller,
				  const struct acquire_waiter_ops *ops, void *arg, const char *name,
				  json_t *key_json, json_t *spec_json)
{
	struct acquire_op *op = xcalloc(1, sizeof(*op));
	const char *field;
	char *msg = NULL;

	op->d = d;
	op->table = d->acquires;
	snprintf(op->name, sizeof(op->name), "%s", name);
	op->key_json = json_incref(key_json);
	op->spec_json = json_incref(spec_json);
	op->owner = caller->uid;
	op->caller = *caller;
	/* Validated by the caller: these decodes cannot fail. */
	if (msb_key_decode(key_json, &op->key, &field, &msg) < 0 ||
	    msb_spec_decode(spec_json, &op->spec, &field, &msg) < 0)
		assert(!"acquire_start: params were not validated");
	op->finish_ev = event_new(d->base, -1, 0, acq_finish_cb, op);
	if (!op->finish_ev)
		fatalx("%s: cannot create an event", __func__);
	TAILQ_INSERT_TAIL(&d->acquires->ops, op, entry);
	d->acquires->count++;
	acq_add_waiter(op, caller, ops, arg, spec_json);     /* waiters[0]: the one that started it */
	return op;
}

void acquire_start(struct domain *d, const struct acquire_caller *caller, const struct acquire_waiter_ops *ops,
		   void *arg, const char *name, json_t *key_json, json_t *spec_json)
{
	struct acquire_op *op = acquire_find(d->acquires, name);

	if (op) {
		/* Owner and work dir are checked per waiter when it completes. */
		acq_add_waiter(op, caller, ops, arg, spec_json);
		return;
	}
	op = acq_new(d, caller, ops, arg, name, key_json, spec_json);
	acq_enter(op, ACQ_INSPECT);
}

void acquire_start_warm(struct domain *d, const struct acquire_caller *caller,
			const struct acquire_waiter_ops *ops, void *arg, const struct sandbox *sb,
			json_t *key_json, json_t *spec_json)
{
	struct acquire_op *op = acquire_find(d->acquires, sb->name);

	if (op) {
		acq_add_waiter(op, caller, ops, arg, spec_json);
		return;
	}
	op = acq_new(d, caller, ops, arg, sb->name, key_json, spec_json);
	acq_set_id(op, sb->id);
	acq_prepare(op);
}
