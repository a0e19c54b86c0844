/* execend.c — ending what a command started (execend.h): from the host
 * (inspects, freeze, execkill.h), else by the mark from inside. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "execend.h"
#include "execkill.h"
#include "execrun.h"
#include "freeze.h"
#include "log.h"
#include "plane_local.h"
#include "registry.h"
#include "xmalloc.h"

/* The killer: every process (but itself) whose environment holds the mark
 * gets SIGKILL; a few rounds catch children forked meanwhile. Needs sh, tr
 * and grep in the guest. */
#define EXEC_KILL_SCRIPT \
	"t=\"" EXEC_MARK_NAME "=$1\"; me=$$; n=0\n" \
	"while [ $n -lt 5 ]; do\n" \
	"  found=\n" \
	"  for d in /proc/[0-9]*; do\n" \
	"    p=${d#/proc/}\n" \
	"    [ \"$p\" = \"$me\" ] && continue\n" \
	"    if tr '\\000' '\\n' < \"$d/environ\" 2>/dev/null | grep -qxF -- \"$t\"; then\n" \
	"      kill -9 \"$p\" 2>/dev/null && found=1\n" \
	"    fi\n" \
	"  done\n" \
	"  [ -z \"$found\" ] && exit 0\n" \
	"  n=$((n + 1))\n" \
	"done\n" \
	"exit 1\n"
#define EXEC_KILL_TIMEOUT_MS 5000
/* Who runs the killer (execend_mark_kill). */
#define EXEC_KILL_USER "0:0"

struct execend {
	struct domain *d;
	execend_done_cb *done;
	void *arg;
	char id[REGISTRY_ID_LEN + 1];
	char token[EXEC_TOKEN_HEX + 1];
	char *exec_id;              /* the engine's; NULL: unknown */
	unsigned long long since;   /* the run's start, clock ticks since boot */
	uint64_t start_seq;         /* its place in the sandbox's exec_starts */
	pid_t init;                 /* the container's init */
	pid_t root;                 /* the exec's process; 0: unknown */
	unsigned long long root_by; /* the tick the engine reported root at */
	struct engine_req *req;     /* an inspect in flight */
	struct freeze_claim *claim; /* the container frozen for the scan (freeze.h) */
	struct event *claim_ev;     /* bounds the wait for that freeze */
	bool claim_timed_out;       /* the wait ran out: freeze_cancel was ours */
	bool freeing;               /* execend_free runs: a callback is a no-op */
	/* execend_start has not returned yet: an end reached meanwhile is
	 * its return value, not a done callback. */
	bool starting;
	bool over;
};

static void execend_free(struct execend *e)
{
	if (e->claim_ev)
		event_free(e->claim_ev);
	if (e->claim) {
		struct freeze_claim *c = TAKE_PTR(e->claim);

		e->freeing = true;
		freeze_cancel(c);   /* a granted callback owed fires now: a no-op */
	}
	free(e->exec_id);
	free(e);
}

/* Over: the caller is told, unless execend_start is still on the stack
 * (then its return says so). */
static void execend_over(struct execend *e)
{
	if (e->starting) {
		e->over = true;
		return;
	}
	if (e->done)
		e->done(e->arg);
	execend_free(e);
}

static void execend_killed_cb(const struct execrun_result *r, void *arg)
{
	struct execend *e = arg;

	if (r->error || r->exit_code != 0)
		log_warnx("exec in %.12s: could not verify the command's processes are gone (%s, exit %d)",
			  e->id, r->error ? strerror(-r->error) : "ran", r->error ? -1 : r->exit_code);
	execend_over(e);
}

/* The fallback: every guest process carrying e's mark, killed from inside. */
static void execend_mark_kill(struct execend *e)
{
	const char *argv[] = { "sh", "-c", EXEC_KILL_SCRIPT, "sh", e->token, NULL };
	/* As root in the container (0:0, numeric), not Config.User by name: it
	 * reads every process's /proc/<pid>/environ and signals them, whatever
	 * uid the command became (a setuid binary, a guest that rewrote its
	 * /etc/passwd), which only root there can; and no name the guest can
	 * redefine is looked up. The container's own confinement (its
	 * capabilities, user namespace) bounds it as it bounds the guest. */
	struct execrun_spec spec = { .argv = argv, .working_dir = "/", .user = EXEC_KILL_USER,
				     .timeout_ms = EXEC_KILL_TIMEOUT_MS, .max_output = 4096 };

	if (execrun_start(e->d->base, e->d->engine, e->d->freezes, e->id, &spec, execend_killed_cb, e, NULL) < 0) {
		log_warnx("exec in %.12s: cannot run the killer; the command may live on", e->id);
		execend_over(e);
	}
}

/* ---- the kill from the host (execkill.h) --------------------------------- */

/* The start of the first exec of ours in e's sandbox after e's (0: none
 * known): e's orphans started before it. When e's own start has left the
 * ring, the ring's earliest is still no later than that first one. */
static unsigned long long execend_next_start(const struct execend *e)
{
	const struct sandbox *sb = registry_find_id(e->d->registry, e->id);
	unsigned long long until = 0;

	if (!sb || e->start_seq == 0)
		return 0;
	for (size_t i = 0; i < SANDBOX_EXEC_STARTS; i++) {
		const struct sandbox_exec_start *s = &sb->exec_starts[i];

		if (s->seq > e->start_seq && (until == 0 || s->tick < until))
			until = s->tick;
	}
	return until;
}

/* Scans and kills (frozen: while the container is paused by us). The
 * exec's own tree is found by its mark too when its process is unknown. */
static void execend_host_scan(struct execend *e, bool frozen)
{
	struct execkill_target t = { .init = e->init, .root = e->root, .since = e->since,
				     .until = execend_next_start(e), .root_by = e->root_by, .id = e->id };
	size_t killed = 0;
	int r = execkill_run("/proc", "/sys/fs/cgroup", &t, &killed);

	if (r < 0)
		log_warnx("exec in %.12s: the kill from the host %s (%zu killed%s); killing by the mark", e->id,
			  r == -EAGAIN ? "ran out of rounds" : strerror(-r), killed, frozen ? "" : ", not frozen");
	else
		log_debug("op", "exec in %.12s: %zu processes killed from the host%s", e->id, killed,
			  frozen ? " (frozen)" : " (not frozen)");
	if (e->claim) {
		/* The kills are pending in the frozen guest: they take effect on
		 * the thaw. */
		freeze_release(TAKE_PTR(e->claim));
	}
	if (r < 0 || e->root <= 0) {
		execend_mark_kill(e);
		return;
	}
	execend_over(e);
}

static void execend_frozen_cb(struct freeze_claim *claim, int error, const struct freeze_failure *failure,
			      void *arg)
{
	struct execend *e = arg;

	(void)claim;
	if (e->freeing)
		return;
	if (e->claim_ev)
		event_del(e->claim_ev);
	if (error == 0) {
		execend_host_scan(e, true);
		return;
	}
	e->claim = NULL;   /* a failed claim is the table's */
	if (error == -ECANCELED && !e->claim_timed_out) {
		execend_over(e);   /* the engine goes away: the daemon stops */
		return;
	}
	/* Paused by someone else, held by another daemon, the engine's
	 * refusal, or the wait ran out (exec starts keep deferring it): the
	 * scan goes on unfrozen, round after round. */
	log_info("exec in %.12s: the container could not be frozen for the kill (%s); scanning it running",
		 e->id, e->claim_timed_out ? "waited too long" : failure ? freeze_reason_to_string(failure->reason)
								    : strerror(-error));
	execend_host_scan(e, false);
}

static void execend_freeze_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct execend *e = arg;

	(void)fd;
	(void)what;
	if (!e->claim)
		return;
	e->claim_timed_out = true;
	freeze_cancel(e->claim);   /* granted fires now with -ECANCELED: scanned unfrozen */
}

/* Init and (when known) the exec's process found: freeze the container
 * (freeze.h: queued behind file calls, never into an exec start of ours,
 * the host lock), then scan and kill in one consistent snapshot — a guest
 * whose processes fork and exit faster than a scan reads /proc cannot
 * slip between the list and the reads (execkill.h). The wait for the
 * freeze is bounded by EXECEND_FREEZE_WAIT_MS. */
static void execend_host_kill(struct execend *e)
{
	struct timeval tv = { EXECEND_FREEZE_WAIT_MS / 1000, (EXECEND_FREEZE_WAIT_MS % 1000) * 1000 };

	if (!e->d->freezes ||
	    freeze_acquire(e->d->freezes, e->d->engine, e->id, execend_frozen_cb, e, &e->claim) < 0) {
		e->claim = NULL;
		execend_host_scan(e, false);
		return;
	}
	e->claim_ev = evtimer_new(e->d->base, execend_freeze_timeout_cb, e);
	evtimer_add(e->claim_ev, &tv);
}

static void execend_root_cb(const struct docker_reply *r, void *arg)
{
	struct execend *e = arg;
	const json_t *pid = json_object_get(r->body, "Pid");   /* borrows */

	e->req = NULL;
	if (r->error == -ECANCELED) {
		execend_over(e);   /* the engine goes away: the daemon stops */
		return;
	}
	if (r->error == 0 && r->status == 200 && json_is_integer(pid) && json_integer_value(pid) > 0 &&
	    json_integer_value(pid) <= INT32_MAX)
		e->root = (pid_t)json_integer_value(pid);
	/* The exec's process started before the engine reported it: a
	 * process under that pid that started later is a recycled pid. */
	e->root_by = execkill_now_ticks();
	execend_host_kill(e);
}

static void execend_init_cb(const struct docker_reply *r, void *arg)
{
	struct execend *e = arg;
	const json_t *pid = json_object_get(json_object_get(r->body, "State"), "Pid");   /* borrows */
	struct plocal_pin pin = PLOCAL_PIN_INIT;
	int err;

	e->req = NULL;
	if (r->error == -ECANCELED) {
		execend_over(e);
		return;
	}
	if (r->error || r->status != 200 || !json_is_integer(pid) || json_integer_value(pid) <= 0 ||
	    json_integer_value(pid) > INT32_MAX) {
		log_warnx("exec in %.12s: no init to scan from; killing by the mark", e->id);
		execend_mark_kill(e);
		return;
	}
	/* The pid is this container's init (its cgroup names the container),
	 * seen from this daemon's pid namespace. */
	err = plocal_pin_open((pid_t)json_integer_value(pid), e->id, &pin);
	plocal_pin_close(&pin);
	if (err < 0) {
		log_warnx("exec in %.12s: its init cannot be seen from here (%s); killing by the mark", e->id,
			  strerror(-err));
		execend_mark_kill(e);
		return;
	}
	e->init = (pid_t)json_integer_value(pid);
	if (!e->exec_id || docker_exec_inspect(e->d->engine, e->exec_id, execend_root_cb, e, &e->req) < 0)
		execend_host_kill(e);
}

int execend_start(struct domain *d, const struct execend_target *t, execend_done_cb *done, void *arg)
{
	struct execend *e = xcalloc(1, sizeof(*e));

	e->d = d;
	e->done = done;
	e->arg = arg;
	snprintf(e->id, sizeof(e->id), "%s", t->id);
	snprintf(e->token, sizeof(e->token), "%s", t->token);
	e->exec_id = t->exec_id ? xstrdup(t->exec_id) : NULL;
	e->since = t->since;
	e->start_seq = t->start_seq;
	e->starting = true;
	if (!d->exec_host_kill || docker_container_inspect(d->engine, e->id, execend_init_cb, e, &e->req) < 0)
		execend_mark_kill(e);
	e->starting = false;
	if (e->over) {
		execend_free(e);
		return 0;
	}
	return 1;
}
