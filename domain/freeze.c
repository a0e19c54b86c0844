/* freeze.c — the per-container freeze lock (see freeze.h).
 *
 * Each entry point — a public call or an engine completion — brackets the
 * claims it touches with claim_enter()/claim_leave() (which also hold the
 * lock): a claim that finishes is freed by the last leave, and an idle lock
 * by its last leave, so neither is ever freed inside a callback of its own.
 * A claim is taken off its queue before its owner is told, so an owner that
 * acquires again from its callback queues behind whoever is still waiting.
 *
 * The owed callback lives in claim->cb (granted; then thawed or the orphan
 * thaw's done) and is cleared as it fires: it fires at most once.
 *
 * The host lock is taken in claim_start (and by a blocked orphan thaw's
 * retries) and given back in claim_finish / claim_drop, the only ways a
 * claim ends: claim->host_held says it is ours to give back.
 *
 * Exec marks (freeze_exec_starting_*) live on the same per-container lock,
 * which stays while it has one. A hold whose turn comes while its lock has
 * marks is deferred: it stays WAITING at the head (claim->deferred), its
 * retry_ev armed for what is left of FREEZE_EXEC_WAIT_MS (then again every
 * FREEZE_EXEC_WAIT_MS, a warning logged once), and the last mark's end
 * fires that timer at once. lock_advance skips a deferred head; the timer
 * clears the flag and advances the lock again, which defers it again while
 * marks remain. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/event.h>
#include <jansson.h>

#include "cleanup.h"
#include "docker.h"
#include "errors.h"
#include "freeze.h"
#include "hostlock.h"
#include "log.h"
#include "xmalloc.h"

enum freeze_kind {
	FREEZE_KIND_HOLD,          /* pause, hold, unpause: a file call */
	FREEZE_KIND_THAW,          /* unpause only: a frozen orphan */
	_FREEZE_KIND_MAX,
};

struct freeze_claim {
	struct freeze_lock *lock;
	TAILQ_ENTRY(freeze_claim) entry;
	struct engine *e;              /* borrowed */
	enum freeze_kind kind;
	enum freeze_claim_state state;
	freeze_cb *cb;                 /* the callback still owed; NULL once it fired */
	void *arg;
	struct engine_req *req;        /* the pause or unpause in flight */
	bool withdrawn;                /* cancelled while pausing: a pause that lands is undone */
	unsigned busy;
	struct event *retry_ev;        /* a stale-state answer is asked again (FREEZE_STALE_*) */
	bool stale;                    /* stale_since is set */
	struct timespec stale_since;   /* CLOCK_MONOTONIC: the first stale answer */
	long paused_at_ms;             /* CLOCK_MONOTONIC ms when our pause was confirmed */
	bool host_held;                /* we hold the host lock of the container */
	int host_error;                /* < 0: the host lock refused this claim */
	long host_wait_ms;             /* an orphan thaw's budget for a host lock held elsewhere */
	struct timespec blocked_since; /* CLOCK_MONOTONIC: when it first found it held */
	bool deferred;                 /* WAITING at the head: an exec of ours is starting */
	bool exec_waited;              /* exec_wait_since is set */
	bool exec_warned;              /* "not confirmed started" was logged */
	struct timespec exec_wait_since; /* CLOCK_MONOTONIC: its first deferral */
};

struct freeze_exec_mark {
	struct freeze_lock *lock;
	TAILQ_ENTRY(freeze_exec_mark) entry;
	struct event *wake;            /* borrowed; NULL: none */
};

struct freeze_lock {
	struct freeze_table *table;
	TAILQ_ENTRY(freeze_lock) entry;
	TAILQ_HEAD(, freeze_claim) claims;   /* FIFO; the head is the active one */
	size_t n_claims;
	unsigned busy;
	bool advancing;                /* lock_advance is on the stack */
	int refusing;                  /* < 0 while its waiters are failed: new claims get it */
	uint64_t confirmed_gen;        /* non-zero while our pause is confirmed */
	TAILQ_HEAD(, freeze_exec_mark) marks;   /* execs of ours starting on it */
	size_t n_marks;
	char id[];
};

struct freeze_table {
	TAILQ_HEAD(, freeze_lock) locks;
	size_t n_locks;
	size_t n_claims;
	uint64_t generation;           /* the last confirmed hold's tick */
	bool dead;                     /* freeze_table_free is running */
	struct event_base *base;       /* for retries; NULL: none */
	struct hostlock *host;         /* borrowed; NULL: no host lock */
	long stale_retry_ms;           /* FREEZE_STALE_RETRY_MS (tests set another) */
	json_t *unpaused_at;           /* id → CLOCK_MONOTONIC ms of our last thaw of a hold */
};

static const char *const claim_state_names[_FREEZE_CLAIM_STATE_MAX] = {
	[FREEZE_CLAIM_WAITING] = "waiting",
	[FREEZE_CLAIM_PAUSING] = "pausing",
	[FREEZE_CLAIM_HELD] = "held",
	[FREEZE_CLAIM_THAWING] = "thawing",
	[FREEZE_CLAIM_BLOCKED] = "blocked",
	[FREEZE_CLAIM_DONE] = "done",
};

static const char *const reason_names[_FREEZE_REASON_MAX] = {
	[FREEZE_REASON_NOT_RUNNING] = "not-running",
	[FREEZE_REASON_ALREADY_PAUSED] = "already-paused",
	[FREEZE_REASON_ABSENT] = "absent",
	[FREEZE_REASON_ENGINE_ERROR] = "engine-error",
	[FREEZE_REASON_TIMEOUT] = "timeout",
	[FREEZE_REASON_UNREACHABLE] = "unreachable",
	[FREEZE_REASON_CANCELLED] = "cancelled",
	[FREEZE_REASON_HELD_ELSEWHERE] = "held-elsewhere",
	[FREEZE_REASON_HOST_LOCK] = "host-lock",
};

static const char *freeze_kind_to_string(enum freeze_kind k)
{
	static const char *const names[_FREEZE_KIND_MAX] = {
		[FREEZE_KIND_HOLD] = "hold",
		[FREEZE_KIND_THAW] = "orphan thaw",
	};

	if ((unsigned)k >= _FREEZE_KIND_MAX)
		return "invalid";
	return names[k];
}

const char *freeze_claim_state_to_string(enum freeze_claim_state s)
{
	if ((unsigned)s >= _FREEZE_CLAIM_STATE_MAX)
		return "invalid";
	return claim_state_names[s];
}

const char *freeze_reason_to_string(enum freeze_reason r)
{
	if ((unsigned)r >= _FREEZE_REASON_MAX)
		return "invalid";
	return reason_names[r];
}

static void lock_advance(struct freeze_lock *l);
static void lock_fail_waiters(struct freeze_lock *l, int error);

/* ---- the table and its locks -------------------------------------------------- */

struct freeze_table *freeze_table_new(void)
{
	struct freeze_table *t = xcalloc(1, sizeof(*t));

	TAILQ_INIT(&t->locks);
	t->stale_retry_ms = FREEZE_STALE_RETRY_MS;
	t->unpaused_at = json_object();
	if (!t->unpaused_at)
		fatalx("%s: out of memory", __func__);
	return t;
}

size_t freeze_table_count(const struct freeze_table *t)
{
	return t ? t->n_claims : 0;
}

size_t freeze_table_locks(const struct freeze_table *t)
{
	return t ? t->n_locks : 0;
}

static bool id_is_valid(const char *id)
{
	return id && *id && strnlen(id, FREEZE_ID_MAX + 1) <= FREEZE_ID_MAX;
}

static struct freeze_lock *lock_find(const struct freeze_table *t, const char *id)
{
	struct freeze_lock *l;

	if (!t || !id)
		return NULL;
	TAILQ_FOREACH(l, &t->locks, entry)
		if (strcmp(l->id, id) == 0)
			return l;
	return NULL;
}

static struct freeze_lock *lock_new(struct freeze_table *t, const char *id)
{
	size_t n = strlen(id) + 1;
	struct freeze_lock *l = xcalloc(1, sizeof(*l) + n);

	l->table = t;
	TAILQ_INIT(&l->claims);
	TAILQ_INIT(&l->marks);
	memcpy(l->id, id, n);
	TAILQ_INSERT_TAIL(&t->locks, l, entry);
	t->n_locks++;
	return l;
}

static void lock_enter(struct freeze_lock *l)
{
	l->busy++;
}

/* The last leave of an idle lock (no claim, no exec mark) frees it. gcc 12
 * at -O2 and above inlines nested enter/leave pairs (lock_advance around
 * lock_fail_waiters) and cannot see that the inner leave never frees while
 * the outer holds busy: its -Wuse-after-free there is a false positive. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif
static void lock_leave(struct freeze_lock *l)
{
	struct freeze_table *t = l->table;

	assert(l->busy > 0);
	if (--l->busy > 0 || !TAILQ_EMPTY(&l->claims) || !TAILQ_EMPTY(&l->marks))
		return;
	TAILQ_REMOVE(&t->locks, l, entry);
	t->n_locks--;
	free(l);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif

/* ---- claims ------------------------------------------------------------------- */

static void claim_enter(struct freeze_claim *c)
{
	c->busy++;
	lock_enter(c->lock);
}

/* The last leave of a finished claim frees it. */
static void claim_free(struct freeze_claim *c)
{
	if (c->retry_ev)
		event_free(c->retry_ev);
	free(c);
}

static void claim_leave(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;

	assert(c->busy > 0);
	if (--c->busy == 0 && c->state == FREEZE_CLAIM_DONE)
		claim_free(c);
	lock_leave(l);
}

static void claim_set_state(struct freeze_claim *c, enum freeze_claim_state s)
{
	assert((unsigned)s < _FREEZE_CLAIM_STATE_MAX);
	if (c->state == s)
		return;
	log_debug("op", "freeze %.64s: %s: %s -> %s", c->lock->id, freeze_kind_to_string(c->kind),
		  freeze_claim_state_to_string(c->state), freeze_claim_state_to_string(s));
	c->state = s;
}

/* Gives the host lock back, if this claim holds it. */
static void claim_release_host(struct freeze_claim *c)
{
	if (!c->host_held)
		return;
	c->host_held = false;
	hostlock_release(c->lock->table->host, c->lock->id);
}

/* Off the queue, the host lock given back; freed by the last claim_leave. */
static void claim_finish(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;

	assert(c->state != FREEZE_CLAIM_DONE && !c->req);
	claim_release_host(c);
	TAILQ_REMOVE(&l->claims, c, entry);
	l->n_claims--;
	l->table->n_claims--;
	claim_set_state(c, FREEZE_CLAIM_DONE);
}

/* Fires the owed callback, if any, once. */
static void claim_notify(struct freeze_claim *c, int error, const struct freeze_failure *f)
{
	freeze_cb *cb = c->cb;

	if (!cb)
		return;
	c->cb = NULL;
	claim_enter(c);
	cb(c, error, f, c->arg);
	claim_leave(c);
}

/* ---- outcomes ----------------------------------------------------------------- */

static bool reply_is_2xx(const struct docker_reply *r)
{
	return r->error == 0 && r->status >= 200 && r->status < 300;
}

static bool reply_says(const struct docker_reply *r, const char *text)
{
	return r->error == 0 && r->message && strstr(r->message, text);
}

/* §2.6: thawed, not paused and absent all count as thawed. */
/* Thawed: done, the container gone, or not paused. "cannot resume a
 * running process" is the runtime's own answer (the engine's Paused flag,
 * which lags, said paused): the guest runs. */
static bool thaw_is_success(const struct docker_reply *r)
{
	return reply_is_2xx(r) || (r->error == 0 && r->status == 404) || reply_says(r, "is not paused") ||
	       reply_says(r, "cannot resume a running process");
}

/* A pause that may have landed although we saw no answer: it is undone. A
 * request refused before it reached the engine, or an answer, is not. */
static bool pause_outcome_is_unknown(int error)
{
	switch (error) {
	case 0:
	case -ECANCELED:
	case -ECONNREFUSED:
	case -EACCES:
	case -ENOTCONN:
		return false;
	default:
		return true;
	}
}

/* -errno and *ret_reason for a failed request. */
static int classify(const struct docker_reply *r, bool thaw, enum freeze_reason *ret_reason)
{
	if (r->error == 0) {
		if (r->status == 404) {
			*ret_reason = FREEZE_REASON_ABSENT;
			return -ENOENT;
		}
		if (!thaw && r->status == 409 && reply_says(r, "already paused")) {
			*ret_reason = FREEZE_REASON_ALREADY_PAUSED;
			return -EBUSY;
		}
		if (!thaw && r->status == 409 && reply_says(r, "is not running")) {
			*ret_reason = FREEZE_REASON_NOT_RUNNING;
			return -ESRCH;
		}
		*ret_reason = FREEZE_REASON_ENGINE_ERROR;
		return -EIO;
	}
	switch (r->error) {
	case -ETIMEDOUT:
		*ret_reason = FREEZE_REASON_TIMEOUT;
		break;
	case -ECANCELED:
		*ret_reason = FREEZE_REASON_CANCELLED;
		break;
	case -EMSGSIZE:
	case -EPROTO:
		*ret_reason = FREEZE_REASON_ENGINE_ERROR;
		break;
	default:
		*ret_reason = FREEZE_REASON_UNREACHABLE;
		break;
	}
	return r->error;
}

/* What the engine said, bounded and printable; else what went wrong. malloc'd. */
static char *reply_detail(const struct docker_reply *r)
{
	char *s;

	if (r->error == -ENOTCONN)
		return xstrdup("the Docker engine is not reachable");
	if (r->error < 0)
		return xstrdup(strerror(-r->error));
	if (!r->message)
		return xasprintf("the engine answered HTTP %ld", r->status);
	s = xstrndup(r->message, (size_t)msb_echo_len(r->message));
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	return s;
}

/* The message for a failed pause (thaw false) or unpause. malloc'd. */
static char *failure_message(const struct freeze_claim *c, bool thaw, const char *detail)
{
	const char *id = c->lock->id;

	if (!thaw)
		return xasprintf("docker could not freeze %s for a file call: %s", id, detail);
	if (c->kind == FREEZE_KIND_HOLD)
		return xasprintf("docker could not thaw %s after a file call: %s; it is still frozen; "
				 "the next acquire lifts it", id, detail);
	return xasprintf("docker could not thaw %s, which a host left frozen; refusing to serve a "
			 "container whose guest cannot run: %s", id, detail);
}

/* Reports the failed request r of c (a pause, or an unpause if thaw) to its
 * owner. A held claim's thaw failure is also logged: nobody else will. */
static void claim_fail(struct freeze_claim *c, const struct docker_reply *r, bool thaw)
{
	struct freeze_failure f = { .status = r->error == 0 ? r->status : 0 };
	_cleanup_free_ char *detail = reply_detail(r);
	_cleanup_free_ char *msg = failure_message(c, thaw, detail);
	int error = classify(r, thaw, &f.reason);

	if (thaw && c->kind == FREEZE_KIND_HOLD)
		log_warnx("%s: %s", __func__, msg);
	else
		log_debug("op", "%s", msg);
	f.message = msg;
	claim_notify(c, error, &f);
}

/* Tells the owner the host lock refused c (c->host_error): held by
 * another maf-sandboxd on this host, or not to be had. Nothing was asked
 * of the engine. */
static void claim_fail_host(struct freeze_claim *c)
{
	struct freeze_table *t = c->lock->table;
	const char *id = c->lock->id;
	struct freeze_failure f = { 0 };
	_cleanup_free_ char *msg = NULL;

	assert(c->host_error < 0);
	if (c->host_error == -EAGAIN) {
		f.reason = FREEZE_REASON_HELD_ELSEWHERE;
		msg = c->kind == FREEZE_KIND_HOLD ?
			xasprintf("could not freeze %s for a file call: another maf-sandboxd on this host "
				  "holds it frozen", id) :
			xasprintf("left %s frozen: another maf-sandboxd on this host holds it frozen", id);
	} else {
		f.reason = FREEZE_REASON_HOST_LOCK;
		msg = xasprintf("could not %s %s: the host freeze lock %s cannot be taken",
				c->kind == FREEZE_KIND_HOLD ? "freeze" : "thaw", id,
				hostlock_path(t->host) ? hostlock_path(t->host) : "");
	}
	log_debug("op", "%s", msg);
	f.message = msg;
	claim_notify(c, c->host_error, &f);
}

/* Tells the owner a claim was cancelled (freeze_cancel). */
static void claim_notify_cancelled(struct freeze_claim *c)
{
	_cleanup_free_ char *msg = NULL;
	struct freeze_failure f = { .reason = FREEZE_REASON_CANCELLED };

	if (!c->cb)
		return;
	msg = xasprintf("the %s of %s was cancelled", c->kind == FREEZE_KIND_HOLD ? "freeze" : "thaw",
			c->lock->id);
	f.message = msg;
	claim_notify(c, -ECANCELED, &f);
}

static long mono_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Our hold of id was just thawed: a pause refused as "already paused" in
 * the next FREEZE_STALE_BUDGET_MS may be the engine's late view of it. */
static void note_unpaused(struct freeze_table *t, const char *id)
{
	long now = mono_ms();
	const char *key;
	json_t *v, *tmp;

	json_object_foreach_safe(t->unpaused_at, tmp, key, v)
		if (now - json_integer_value(v) >= FREEZE_STALE_BUDGET_MS)
			json_object_del(t->unpaused_at, key);
	json_object_set_new(t->unpaused_at, id, json_integer(now));
}

/* Did we thaw a hold of id within FREEZE_STALE_BUDGET_MS? */
static bool recently_unpaused(const struct freeze_table *t, const char *id)
{
	json_t *v = json_object_get(t->unpaused_at, id);

	return v && mono_ms() - json_integer_value(v) < FREEZE_STALE_BUDGET_MS;
}

/* ---- requests ------------------------------------------------------------------- */

static void pause_done_cb(const struct docker_reply *r, void *arg);
static void unpause_done_cb(const struct docker_reply *r, void *arg);

/* A thaw ended with r (the claim is THAWING, its unpause done or refused). */
static void thaw_finished(struct freeze_claim *c, const struct docker_reply *r)
{
	struct freeze_lock *l = c->lock;

	claim_finish(c);
	if (c->kind == FREEZE_KIND_HOLD && reply_is_2xx(r))
		note_unpaused(l->table, l->id);
	if (thaw_is_success(r)) {
		log_debug("op", "freeze %.64s: thawed (HTTP %ld)", l->id, r->status);
		claim_notify(c, 0, NULL);
	} else {
		claim_fail(c, r, true);
	}
	if (r->error == -ECANCELED)
		lock_fail_waiters(l, -ECANCELED);
	else
		lock_advance(l);
}

/* POST unpause for c; the confirmed hold ends before it is issued. A
 * refusal to start finishes the thaw at once; its result is returned. */
static int claim_thaw(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;
	int r;

	l->confirmed_gen = 0;
	claim_set_state(c, FREEZE_CLAIM_THAWING);
	r = docker_container_unpause(c->e, l->id, unpause_done_cb, c, &c->req);
	if (r < 0) {
		struct docker_reply fr = { .error = r };

		c->req = NULL;
		thaw_finished(c, &fr);
	}
	return r;
}

/* Takes the host lock for c: 0, or c->host_error: -EAGAIN (another
 * process holds it) or -ENOLCK (any other failure, logged). */
static int claim_take_host(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;
	int r;

	assert(!c->host_held);
	r = hostlock_try(l->table->host, l->id);
	if (r < 0 && r != -EAGAIN) {
		log_warnx("%s: cannot take the host freeze lock of %s in %s: %s", __func__, l->id,
			  hostlock_path(l->table->host), strerror(-r));
		r = -ENOLCK;
	}
	c->host_error = r < 0 ? r : 0;
	c->host_held = r == 0;
	return r;
}

static bool claim_block(struct freeze_claim *c);
static void claim_retry_cb(evutil_socket_t fd, short what, void *arg);
static long elapsed_ms(const struct timespec *since);

/* Arms c's retry timer (made on first use) to fire in ms. False: no event
 * base, or no timer could be made. */
static bool claim_arm(struct freeze_claim *c, long ms)
{
	struct freeze_table *t = c->lock->table;
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (!t->base)
		return false;
	if (!c->retry_ev) {
		c->retry_ev = evtimer_new(t->base, claim_retry_cb, c);
		if (!c->retry_ev)
			return false;
	}
	evtimer_add(c->retry_ev, &tv);
	return true;
}

/* A hold whose turn comes while an exec of ours is starting on its
 * container waits for the last mark's end (deferred: WAITING at the head,
 * its timer armed for what is left of FREEZE_EXEC_WAIT_MS since its first
 * deferral), and wakes the marks' execs the first time. True: deferred. */
static bool claim_defer(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;
	struct freeze_exec_mark *m;
	bool first = false;
	long left;

	if (c->kind != FREEZE_KIND_HOLD || TAILQ_EMPTY(&l->marks) || !l->table->base)
		return false;
	if (!c->exec_waited) {
		c->exec_waited = first = true;
		clock_gettime(CLOCK_MONOTONIC, &c->exec_wait_since);
	}
	/* Never paused into an exec start, however long it takes: runc's init
	 * caught joining a frozen cgroup stays frozen, and the engine hangs
	 * every later call on the container (its exec start, inspect,
	 * unpause, rm -f). The owner's own deadline bounds the wait. */
	left = FREEZE_EXEC_WAIT_MS - elapsed_ms(&c->exec_wait_since);
	if (left <= 0) {
		if (!c->exec_warned)
			log_warnx("%s: %zu exec(s) in %s not confirmed started after %d ms; the freeze waits for "
				  "them", __func__, l->n_marks, l->id, FREEZE_EXEC_WAIT_MS);
		c->exec_warned = true;
		left = FREEZE_EXEC_WAIT_MS;
	}
	if (!claim_arm(c, left))
		return false;
	c->deferred = true;
	log_debug("op", "freeze %.64s: %zu exec(s) of ours starting; the pause waits", l->id, l->n_marks);
	if (first)
		TAILQ_FOREACH(m, &l->marks, entry)
			if (m->wake)
				event_active(m->wake, EV_TIMEOUT, 1);
	return true;
}

/* Its turn: a hold waits for the execs starting there, then the host lock,
 * then a hold pauses, an orphan thaw unpauses. < 0: not started
 * (c->host_error < 0 if the host lock refused it); 0 with c BLOCKED: an
 * orphan thaw waits for the host lock; 0 with c WAITING: deferred. */
static int claim_start(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;
	int r;

	assert(c->state == FREEZE_CLAIM_WAITING && TAILQ_FIRST(&l->claims) == c);
	if (claim_defer(c))
		return 0;
	r = claim_take_host(c);
	if (r == -EAGAIN && claim_block(c))
		return 0;
	if (r < 0)
		return r;
	if (c->kind == FREEZE_KIND_HOLD) {
		claim_set_state(c, FREEZE_CLAIM_PAUSING);
		r = docker_container_pause(c->e, l->id, pause_done_cb, c, &c->req);
	} else {
		claim_set_state(c, FREEZE_CLAIM_THAWING);
		r = docker_container_unpause(c->e, l->id, unpause_done_cb, c, &c->req);
	}
	if (r < 0)
		c->req = NULL;
	return r;
}

/* The waiters at the head go in turn; a start the engine refuses (it is not
 * reachable) fails that claim and every claim waiting behind it. */
static void lock_advance(struct freeze_lock *l)
{
	struct freeze_claim *c;

	if (l->advancing || l->refusing)
		return;
	lock_enter(l);
	l->advancing = true;
	while ((c = TAILQ_FIRST(&l->claims)) && c->state == FREEZE_CLAIM_WAITING && !c->deferred) {
		struct docker_reply fr = { 0 };
		bool host_refused;

		claim_enter(c);
		fr.error = claim_start(c);
		host_refused = c->host_error < 0;
		if (fr.error < 0) {
			claim_finish(c);
			if (host_refused)
				claim_fail_host(c);
			else
				claim_fail(c, &fr, c->kind == FREEZE_KIND_THAW);
		}
		claim_leave(c);
		if (fr.error < 0 && !host_refused) {
			/* the engine refuses: so it would for every waiter */
			lock_fail_waiters(l, fr.error);
			break;
		}
		/* the host lock refused only that claim: the next asks for itself */
	}
	l->advancing = false;
	lock_leave(l);
}

static struct freeze_claim *lock_first_waiting(const struct freeze_lock *l)
{
	struct freeze_claim *c;

	TAILQ_FOREACH(c, &l->claims, entry)
		if (c->state == FREEZE_CLAIM_WAITING)
			return c;
	return NULL;
}

/* Fails every waiting claim with error, starting nothing (the engine went
 * away, or refuses). Claims asked for meanwhile are refused with it. */
static void lock_fail_waiters(struct freeze_lock *l, int error)
{
	struct docker_reply fr = { .error = error };
	int saved = l->refusing;
	struct freeze_claim *c;

	assert(error < 0);
	lock_enter(l);
	l->refusing = error;
	while ((c = lock_first_waiting(l))) {
		claim_enter(c);
		claim_finish(c);
		claim_fail(c, &fr, c->kind == FREEZE_KIND_THAW);
		claim_leave(c);
	}
	l->refusing = saved;
	lock_leave(l);
}

/* ---- completions -------------------------------------------------------------------- */

static void pause_confirmed(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;

	if (c->withdrawn) {
		log_debug("op", "freeze %.64s: cancelled while pausing; thawing", l->id);
		claim_thaw(c);
		return;
	}
	l->confirmed_gen = ++l->table->generation;
	c->stale = false;   /* the unpause gets a budget of its own */
	c->paused_at_ms = mono_ms();
	claim_set_state(c, FREEZE_CLAIM_HELD);
	claim_notify(c, 0, NULL);
}

/* engine_free: nothing more can be asked of the engine, for this claim or
 * any waiting behind it. */
static void pause_cancelled_by_engine(struct freeze_claim *c, const struct docker_reply *r)
{
	struct freeze_lock *l = c->lock;

	log_warnx("%s: the engine went away while freezing %s; it may be left frozen; the next acquire "
		  "lifts it", __func__, l->id);
	claim_finish(c);
	claim_fail(c, r, false);
	lock_fail_waiters(l, -ECANCELED);
}

static bool claim_retry_stale(struct freeze_claim *c, long budget_ms);
static void claim_retry_cb(evutil_socket_t fd, short what, void *arg);

/* What a pause's answer means for c (PAUSING, no request in flight). */
static void pause_outcome(struct freeze_claim *c, const struct docker_reply *r)
{
	if (reply_is_2xx(r)) {
		pause_confirmed(c);
	} else if (r->error == -ECANCELED) {
		pause_cancelled_by_engine(c, r);
	} else if (pause_outcome_is_unknown(r->error)) {
		/* It may have landed: fail the claim, then undo it (§2.6: a
		 * cancellation inside pause still unpauses). */
		claim_fail(c, r, false);
		claim_thaw(c);
	} else if (r->status == 409 && reply_says(r, "already paused") && !c->withdrawn &&
		   (c->stale || recently_unpaused(c->lock->table, c->lock->id)) &&
		   claim_retry_stale(c, FREEZE_STALE_BUDGET_MS)) {
		/* Perhaps only the engine's late view of our own last unpause. */
	} else if (r->error == 0 && r->status >= 500 && reply_says(r, "unable to freeze") && !c->withdrawn &&
		   claim_retry_stale(c, FREEZE_STALE_BUDGET_MS)) {
		/* runc gave up on a guest that forks as fast as it can freeze it,
		 * and thawed it again: a moment later it usually works. */
	} else if (c->withdrawn && r->error == 0 && (r->status == 409 || r->status >= 500)) {
		/* Withdrawn while waiting to ask again: nothing was paused by us. */
		claim_finish(c);
		lock_advance(c->lock);
	} else {
		/* Refused: something else may hold it; never unpause (§2.6 step 3). */
		claim_finish(c);
		claim_fail(c, r, false);
		lock_advance(c->lock);
	}
}

static void pause_done_cb(const struct docker_reply *r, void *arg)
{
	struct freeze_claim *c = arg;

	c->req = NULL;
	if (c->lock->table->dead)
		return;   /* freeze_table_free cancelled it */
	assert(c->state == FREEZE_CLAIM_PAUSING);
	claim_enter(c);
	pause_outcome(c, r);
	claim_leave(c);
}

static void unpause_done_cb(const struct docker_reply *r, void *arg)
{
	struct freeze_claim *c = arg;

	c->req = NULL;
	if (c->lock->table->dead)
		return;
	assert(c->state == FREEZE_CLAIM_THAWING);
	claim_enter(c);
	/* The unpause of our own confirmed pause said "not paused": the
	 * engine's late view of an earlier unpause (its Paused flag follows
	 * containerd's events, which wait behind the container's lock, held
	 * by the copy: seconds under load), while the guest is frozen. Ask
	 * again, however long the hold lasted: the budget runs from the first
	 * such answer. Taken as thawed only when it is spent, with a warning:
	 * an exec into a guest left frozen would hang the engine. */
	if (c->kind == FREEZE_KIND_HOLD && c->paused_at_ms && reply_says(r, "is not paused")) {
		if (claim_retry_stale(c, FREEZE_STALE_THAW_BUDGET_MS)) {
			claim_leave(c);
			return;
		}
		if (c->stale)
			log_warnx("%s: the engine still says %s is not paused %d ms after its first such answer "
				  "to the unpause of our own pause; taking it as thawed (if it is still frozen, "
				  "the next acquire lifts it)", __func__, c->lock->id, FREEZE_STALE_THAW_BUDGET_MS);
	}
	thaw_finished(c, r);
	claim_leave(c);
}

/* ---- stale state ------------------------------------------------------------------- */

static long elapsed_ms(const struct timespec *since)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - since->tv_sec) * 1000 + (now.tv_nsec - since->tv_nsec) / 1000000;
}

/* A blocked orphan thaw asks for the host lock again: got it → the unpause;
 * still held elsewhere and within its budget → later; else it fails. */
static void claim_retry_host(struct freeze_claim *c)
{
	struct freeze_lock *l = c->lock;
	struct docker_reply fr = { 0 };
	int r = claim_take_host(c);

	if (r == -EAGAIN && elapsed_ms(&c->blocked_since) < c->host_wait_ms &&
	    claim_arm(c, FREEZE_HOST_RETRY_MS))
		return;
	if (r < 0) {
		claim_finish(c);
		claim_fail_host(c);
		lock_advance(l);
		return;
	}
	log_debug("op", "freeze %.64s: the host lock is free again; thawing", l->id);
	claim_set_state(c, FREEZE_CLAIM_THAWING);
	fr.error = docker_container_unpause(c->e, l->id, unpause_done_cb, c, &c->req);
	if (fr.error < 0) {
		c->req = NULL;
		thaw_finished(c, &fr);
	}
}

/* An orphan thaw with a budget, its host lock held elsewhere: BLOCKED, to
 * ask again every FREEZE_HOST_RETRY_MS. False: it cannot wait (no budget,
 * no event base). */
static bool claim_block(struct freeze_claim *c)
{
	if (c->kind != FREEZE_KIND_THAW || c->host_wait_ms <= 0 || !claim_arm(c, FREEZE_HOST_RETRY_MS))
		return false;
	log_debug("op", "freeze %.64s: another maf-sandboxd on this host holds it frozen; waiting up to "
		  "%ld ms to thaw it", c->lock->id, c->host_wait_ms);
	clock_gettime(CLOCK_MONOTONIC, &c->blocked_since);
	claim_set_state(c, FREEZE_CLAIM_BLOCKED);
	return true;
}

static void claim_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct freeze_claim *c = arg;
	struct freeze_lock *l = c->lock;
	struct docker_reply fr = { 0 };

	(void)fd, (void)what;
	claim_enter(c);
	if (c->state == FREEZE_CLAIM_PAUSING) {
		if (c->withdrawn) {
			claim_finish(c);
			lock_advance(l);
		} else if ((fr.error = docker_container_pause(c->e, l->id, pause_done_cb, c, &c->req)) < 0) {
			c->req = NULL;
			pause_outcome(c, &fr);
		}
	} else if (c->state == FREEZE_CLAIM_THAWING) {
		if ((fr.error = docker_container_unpause(c->e, l->id, unpause_done_cb, c, &c->req)) < 0) {
			c->req = NULL;
			thaw_finished(c, &fr);
		}
	} else if (c->state == FREEZE_CLAIM_BLOCKED) {
		claim_retry_host(c);
	} else if (c->state == FREEZE_CLAIM_WAITING && c->deferred) {
		/* the last exec mark ended, or the wait is over */
		c->deferred = false;
		lock_advance(l);
	}
	claim_leave(c);
}

/* Schedules c's request again if the stale-state budget allows. */
static bool claim_retry_stale(struct freeze_claim *c, long budget_ms)
{
	if (!c->lock->table->base)
		return false;
	if (!c->stale) {
		c->stale = true;
		clock_gettime(CLOCK_MONOTONIC, &c->stale_since);
	}
	if (elapsed_ms(&c->stale_since) >= budget_ms || !claim_arm(c, c->lock->table->stale_retry_ms))
		return false;
	log_debug("op", "freeze %.64s: the engine's pause state looks stale; asking again", c->lock->id);
	return true;
}

void freeze_table_set_base(struct freeze_table *t, struct event_base *base)
{
	t->base = base;
}

void freeze_table_set_hostlock(struct freeze_table *t, struct hostlock *h)
{
	t->host = h;
}

/* The engine goes away while c is deferred: it fails -ECANCELED, as its
 * pause would have, and so does every claim behind it. */
static void claim_defer_cancelled(struct freeze_claim *c)
{
	struct docker_reply fr = { .error = -ECANCELED };
	struct freeze_lock *l = c->lock;

	c->deferred = false;
	claim_finish(c);
	claim_fail(c, &fr, false);
	lock_fail_waiters(l, -ECANCELED);
}

void freeze_table_set_stale_retry_ms(struct freeze_table *t, long ms)
{
	t->stale_retry_ms = ms > 0 ? ms : FREEZE_STALE_RETRY_MS;
}

size_t freeze_table_retries_pending(const struct freeze_table *t)
{
	const struct freeze_lock *l;
	const struct freeze_claim *c;
	size_t n = 0;

	TAILQ_FOREACH(l, &t->locks, entry)
		TAILQ_FOREACH(c, &l->claims, entry)
			if (c->retry_ev && evtimer_pending(c->retry_ev, NULL))
				n++;
	return n;
}

void freeze_table_cancel_retries(struct freeze_table *t)
{
	struct freeze_lock *l, *next_l;
	struct freeze_claim *c;
	bool again = true;

	while (again) {
		again = false;
		for (l = TAILQ_FIRST(&t->locks); l && !again; l = next_l) {
			next_l = TAILQ_NEXT(l, entry);
			TAILQ_FOREACH(c, &l->claims, entry) {
				struct docker_reply fr = { .error = -ECANCELED };

				if (!c->retry_ev || !evtimer_pending(c->retry_ev, NULL))
					continue;
				evtimer_del(c->retry_ev);
				claim_enter(c);
				if (c->state == FREEZE_CLAIM_PAUSING)
					pause_outcome(c, &fr);
				else if (c->state == FREEZE_CLAIM_WAITING)
					claim_defer_cancelled(c);
				else
					thaw_finished(c, &fr);
				claim_leave(c);
				again = true;   /* the lists changed: start over */
				break;
			}
		}
	}
}

/* ---- the public calls ----------------------------------------------------------------- */

static int claim_new(struct freeze_table *t, struct engine *e, const char *id, enum freeze_kind kind,
		     long wait_ms, freeze_cb *cb, void *arg, struct freeze_claim **ret_claim)
{
	struct freeze_lock *l;
	struct freeze_claim *c;
	int r = 0;

	if (!t || !e || !cb || !id_is_valid(id))
		return -EINVAL;
	if (t->dead)
		return -ESHUTDOWN;
	l = lock_find(t, id);
	if (l && l->refusing)
		return l->refusing;
	if (l && l->n_claims >= FREEZE_MAX_CLAIMS_PER_CONTAINER)
		return -EBUSY;
	if (!l)
		l = lock_new(t, id);
	c = xcalloc(1, sizeof(*c));
	*c = (struct freeze_claim){ .lock = l, .e = e, .kind = kind, .state = FREEZE_CLAIM_WAITING,
				    .host_wait_ms = wait_ms };
	TAILQ_INSERT_TAIL(&l->claims, c, entry);
	l->n_claims++;
	t->n_claims++;
	claim_enter(c);
	if (TAILQ_FIRST(&l->claims) == c) {
		r = claim_start(c);
		if (r < 0)
			claim_finish(c);   /* nothing owed: cb is not set yet */
	} else {
		log_debug("op", "freeze %.64s: queued behind %zu claim(s)", l->id, l->n_claims - 1);
	}
	if (r == 0) {
		c->cb = cb;
		c->arg = arg;
		if (ret_claim)
			*ret_claim = c;
	}
	claim_leave(c);
	return r;
}

int freeze_acquire(struct freeze_table *t, struct engine *e, const char *id, freeze_cb *granted,
		   void *arg, struct freeze_claim **ret_claim)
{
	return claim_new(t, e, id, FREEZE_KIND_HOLD, 0, granted, arg, ret_claim);
}

int freeze_table_thaw_orphan(struct freeze_table *t, struct engine *e, const char *id, freeze_cb *done,
			     void *arg, struct freeze_claim **ret_claim)
{
	return claim_new(t, e, id, FREEZE_KIND_THAW, 0, done, arg, ret_claim);
}

int freeze_table_thaw_orphan_wait(struct freeze_table *t, struct engine *e, const char *id, long wait_ms,
				  freeze_cb *done, void *arg, struct freeze_claim **ret_claim)
{
	return claim_new(t, e, id, FREEZE_KIND_THAW, wait_ms, done, arg, ret_claim);
}

int freeze_release_then(struct freeze_claim *c, freeze_cb *thawed, void *arg)
{
	int r;

	assert(c);
	if (c->lock->table->dead)
		return -ESHUTDOWN;
	assert(c->kind == FREEZE_KIND_HOLD && c->state == FREEZE_CLAIM_HELD && !c->cb);
	claim_enter(c);
	r = claim_thaw(c);
	if (r == 0) {
		c->cb = thawed;
		c->arg = arg;
	}
	claim_leave(c);
	return r;
}

void freeze_release(struct freeze_claim *c)
{
	(void)freeze_release_then(c, NULL, NULL);
}

void freeze_cancel(struct freeze_claim *c)
{
	struct freeze_lock *l;

	if (!c || c->lock->table->dead)
		return;
	l = c->lock;
	claim_enter(c);
	switch (c->state) {
	case FREEZE_CLAIM_WAITING:
		if (c->deferred) {
			evtimer_del(c->retry_ev);
			c->deferred = false;
		}
		claim_finish(c);
		claim_notify_cancelled(c);
		lock_advance(l);
		break;
	case FREEZE_CLAIM_PAUSING:
		c->withdrawn = true;
		claim_notify_cancelled(c);
		break;
	case FREEZE_CLAIM_HELD:
		assert(!c->cb);
		claim_thaw(c);
		break;
	case FREEZE_CLAIM_THAWING:
		claim_notify_cancelled(c);
		break;
	case FREEZE_CLAIM_BLOCKED:
		evtimer_del(c->retry_ev);
		claim_finish(c);
		claim_notify_cancelled(c);
		lock_advance(l);
		break;
	case FREEZE_CLAIM_DONE:
		break;
	default:
		assert(!"unreachable");
	}
	claim_leave(c);
}

enum freeze_claim_state freeze_claim_get_state(const struct freeze_claim *c)
{
	return c->state;
}

bool freeze_recently_unpaused(const struct freeze_table *t, const char *id)
{
	return t && id && recently_unpaused(t, id);
}

bool freeze_is_held(const struct freeze_table *t, const char *id)
{
	const struct freeze_lock *l = lock_find(t, id);
	const struct freeze_claim *head = l ? TAILQ_FIRST(&l->claims) : NULL;

	return head && head->kind == FREEZE_KIND_HOLD && head->state != FREEZE_CLAIM_WAITING;
}

uint64_t freeze_confirmed_generation(const struct freeze_table *t, const char *id)
{
	const struct freeze_lock *l = lock_find(t, id);

	return l ? l->confirmed_gen : 0;
}

/* ---- exec starts ---------------------------------------------------------------------- */

bool freeze_exec_must_wait(const struct freeze_table *t, const char *id)
{
	const struct freeze_lock *l = lock_find(t, id);
	const struct freeze_claim *head = l ? TAILQ_FIRST(&l->claims) : NULL;

	return head && head->kind == FREEZE_KIND_HOLD;
}

int freeze_exec_starting_begin(struct freeze_table *t, const char *id, struct event *wake,
			       struct freeze_exec_mark **ret_mark)
{
	struct freeze_lock *l;
	struct freeze_exec_mark *m;

	if (!t || !ret_mark || !id_is_valid(id))
		return -EINVAL;
	if (t->dead)
		return -ESHUTDOWN;
	l = lock_find(t, id);
	if (!l)
		l = lock_new(t, id);
	m = xcalloc(1, sizeof(*m));
	m->lock = l;
	m->wake = wake;
	TAILQ_INSERT_TAIL(&l->marks, m, entry);
	l->n_marks++;
	log_debug("op", "freeze %.64s: an exec of ours starts (%zu)", l->id, l->n_marks);
	*ret_mark = m;
	return 0;
}

void freeze_exec_starting_end(struct freeze_exec_mark *m)
{
	struct freeze_lock *l;
	struct freeze_claim *head;

	if (!m)
		return;
	l = m->lock;
	assert(!l->table->dead);
	lock_enter(l);
	TAILQ_REMOVE(&l->marks, m, entry);
	l->n_marks--;
	free(m);
	log_debug("op", "freeze %.64s: an exec of ours is started (%zu left)", l->id, l->n_marks);
	head = TAILQ_FIRST(&l->claims);
	if (TAILQ_EMPTY(&l->marks) && head && head->deferred) {
		static const struct timeval now = { 0, 0 };

		/* the deferred hold goes on from the loop, never from inside this call */
		evtimer_del(head->retry_ev);
		evtimer_add(head->retry_ev, &now);
	}
	lock_leave(l);
}

void freeze_exec_mark_set_wake(struct freeze_exec_mark *m, struct event *ev)
{
	if (m)
		m->wake = ev;
}

size_t freeze_exec_starting_count(const struct freeze_table *t, const char *id)
{
	const struct freeze_lock *l = lock_find(t, id);

	return l ? l->n_marks : 0;
}

/* ---- teardown ------------------------------------------------------------------------- */

/* Teardown of one claim: its request cancelled (its callback sees the
 * table dead), a callback still owed told -ECANCELED, then freed. Every
 * public call is a no-op on a dead table, so that callback cannot reenter. */
static void claim_drop(struct freeze_claim *c)
{
	struct engine_req *req = TAKE_PTR(c->req);
	_cleanup_free_ char *msg = NULL;
	freeze_cb *cb;

	if (c->kind == FREEZE_KIND_HOLD && c->state != FREEZE_CLAIM_WAITING)
		log_warnx("%s: the daemon stops with a freeze of %s on; it may be still frozen; the next "
			  "acquire lifts it", __func__, c->lock->id);
	if (req)
		engine_req_cancel(req);
	claim_release_host(c);
	TAILQ_REMOVE(&c->lock->claims, c, entry);
	cb = TAKE_PTR(c->cb);
	if (cb) {
		struct freeze_failure f = { .reason = FREEZE_REASON_CANCELLED };

		msg = xasprintf("the %s of %s was cancelled: the daemon is stopping",
				c->kind == FREEZE_KIND_HOLD ? "freeze" : "thaw", c->lock->id);
		f.message = msg;
		cb(c, -ECANCELED, &f, c->arg);
	}
	claim_free(c);
}

struct freeze_table *freeze_table_free(struct freeze_table *t)
{
	struct freeze_lock *l;
	struct freeze_claim *c;
	struct freeze_exec_mark *m;

	if (!t)
		return NULL;
	assert(!t->dead);
	t->dead = true;
	while ((l = TAILQ_FIRST(&t->locks))) {
		assert(l->busy == 0);   /* never from inside one of its callbacks */
		while ((c = TAILQ_FIRST(&l->claims)))
			claim_drop(c);
		while ((m = TAILQ_FIRST(&l->marks))) {
			log_warnx("%s: an exec mark on %s outlives the table, ignoring", __func__, l->id);
			TAILQ_REMOVE(&l->marks, m, entry);
			free(m);
		}
		TAILQ_REMOVE(&t->locks, l, entry);
		free(l);
	}
	json_decref(t->unpaused_at);
	free(t);
	return NULL;
}
