/* freeze.h — the per-container freeze (pause) lock of behaviour-docker §2.6:
 * the file plane keeps a guest paused from the start of its path check
 * until its copy completes, and two calls on one container never overlap
 * their freezes — neither two of ours, nor ours and another maf-sandboxd's
 * on the same host (the host lock, below).
 *
 * One lock per container id, made on first use and freed when idle. Claims
 * queue on it in FIFO order; only the head is active:
 *
 *   WAITING ──(its turn, no exec of ours starting: host lock)──→ PAUSING ── 2xx ──→ HELD ──(release / cancel)──→ THAWING → DONE
 *      │                                 │                                                ↑
 *      │                                 ├ refused (409, 404, 5xx) → DONE (no unpause)    │
 *      │                                 └ outcome unknown (timeout, reset) ──────────────┘
 *      └ host lock held elsewhere → DONE (HELD_ELSEWHERE: no request)
 *
 * An orphan thaw (freeze_table_thaw_orphan) queues on the same lock and goes
 * WAITING → THAWING → DONE; held elsewhere, it fails at once the same way,
 * or with a wait budget (freeze_table_thaw_orphan_wait) goes WAITING →
 * BLOCKED → THAWING → DONE, or BLOCKED → DONE (HELD_ELSEWHERE) once the
 * budget is spent. When a claim is DONE the next one starts. We
 * never pause a container twice: a second claim waits for the first's
 * unpause. A pause refused because the container is already paused (frozen
 * by someone else: a dead daemon, an operator) fails the claim and is never
 * undone by us (§2.6 step 3); the orphan thaw is how acquire lifts it.
 *
 * The host lock (hostlock.h; freeze_table_set_hostlock): every maf-sandboxd
 * on the host locks a container's byte in one lock file while it may hold
 * that container frozen, and the kernel drops it when the daemon dies. A
 * hold takes it when it becomes the head, before its pause; an orphan thaw
 * before its unpause. Another process holding it fails the claim at once
 * (or blocks an orphan thaw with a budget) with FREEZE_REASON_HELD_ELSEWHERE
 * and no engine request: a live daemon's freeze is never lifted by a
 * starting one's orphan thaw. It is given back when the claim is DONE,
 * whatever the outcome (the unpause answered or failed, the pause refused,
 * cancelled, the engine gone, the table freed).
 *
 * Thaw results (§2.6): 2xx, 404 (absent) and "is not paused" (500, or 409 on
 * some engines) count as thawed. Any other failure of a claim's unpause is
 * logged as a warning ("… still frozen …; the next acquire lifts it") and
 * the lock moves on; the claim's own outcome is the caller's.
 *
 * Callbacks: a claim's granted callback fires exactly once — 0 once paused,
 * or an error (a failed pause, freeze_cancel, the engine going away) — from
 * the loop, from engine_free, synchronously from freeze_cancel of that
 * claim, or from the freeze_release*() / freeze_cancel() that moved the
 * lock on when the engine refused to start its request (-ENOTCONN: every
 * waiter then fails) or the host lock refused the next claim. Never from
 * inside the freeze_acquire that made it;
 * if that returns < 0 it never fires. A claim is never freed inside one of
 * its own callbacks. The failure passed to a callback is lent to it.
 *
 * Engine shutdown: engine_free cancels the pause or unpause in flight. The
 * claim fails (-ECANCELED), and so does every claim waiting behind it,
 * without any request being started. A holder always has work of its own
 * on the engine (the copy), so engine_free reaches it too: release or
 * cancel the claim from that callback (the unpause is then refused with
 * -ENOTCONN, and the lock's waiters fail the same way). Only the ordinary
 * teardown order is assumed: the engine is freed before the table.
 *
 * Ownership: freeze_table_new() → freeze_table_free(). The table owns its
 * locks and claims; a claim pointer stays valid for its owner until the
 * granted callback reports a failure, or until freeze_release*() /
 * freeze_cancel() returns. The host lock is borrowed: free it after the
 * table. */
#ifndef MSB_FREEZE_H
#define MSB_FREEZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* A container id or name: 64 hex, or a name of at most this many bytes. */
#define FREEZE_ID_MAX 255
/* Claims queued on one container; more → freeze_acquire returns -EBUSY. */
#define FREEZE_MAX_CLAIMS_PER_CONTAINER 256

enum freeze_claim_state {
	FREEZE_CLAIM_WAITING,    /* queued behind the lock's head */
	FREEZE_CLAIM_PAUSING,    /* head: POST pause in flight */
	FREEZE_CLAIM_HELD,       /* head: paused by us; granted(claim, 0) has fired */
	FREEZE_CLAIM_THAWING,    /* head: POST unpause in flight */
	FREEZE_CLAIM_BLOCKED,    /* head: an orphan thaw waiting for another daemon's host lock */
	FREEZE_CLAIM_DONE,       /* off the queue; freed once no callback of it runs */
	_FREEZE_CLAIM_STATE_MAX,
};

const char *freeze_claim_state_to_string(enum freeze_claim_state s);

/* Why a claim failed, or a thaw did not happen. */
enum freeze_reason {
	FREEZE_REASON_NOT_RUNNING,     /* pause: 409 "is not running" (stopped) */
	FREEZE_REASON_ALREADY_PAUSED,  /* pause: 409 "already paused": someone else froze it */
	FREEZE_REASON_ABSENT,          /* pause: 404, the container is gone */
	FREEZE_REASON_ENGINE_ERROR,    /* any other refusal, or an unusable reply */
	FREEZE_REASON_TIMEOUT,         /* the engine did not answer in time */
	FREEZE_REASON_UNREACHABLE,     /* the request failed in transport, or was refused -ENOTCONN */
	FREEZE_REASON_CANCELLED,       /* freeze_cancel, or the engine went away (-ECANCELED) */
	FREEZE_REASON_HELD_ELSEWHERE,  /* another maf-sandboxd on this host holds the container
					* frozen (its host lock); no request was made (-EAGAIN) */
	FREEZE_REASON_HOST_LOCK,       /* the host lock could not be taken (-ENOLCK); no request */
	_FREEZE_REASON_MAX,
};

const char *freeze_reason_to_string(enum freeze_reason r);

struct freeze_failure {
	enum freeze_reason reason;
	long status;           /* the engine's HTTP status; 0 when it did not answer */
	const char *message;   /* for the caller's error: "docker could not freeze ID for a
				* file call: …" (the engine's text cut to MSB_ECHO_MAX_BYTES),
				* or "could not freeze ID for a file call: another
				* maf-sandboxd on this host holds it frozen" */
};

struct freeze_table;
struct freeze_claim;

/* error: 0, or -errno with failure set (NULL when error is 0):
 *   -ESRCH not running, -EBUSY already paused, -ENOENT absent, -EIO engine
 *   error, -ETIMEDOUT, the transport's errno (-ECONNREFUSED, -ENOTCONN, …)
 *   when unreachable, -ECANCELED cancelled, -EAGAIN held elsewhere, -ENOLCK
 *   host lock error. */
typedef void freeze_cb(struct freeze_claim *claim, int error, const struct freeze_failure *failure,
		       void *arg);

struct freeze_table *freeze_table_new(void);

/* Docker 20.10 records pause state from containerd's events, a little
 * late: right after our unpause a pause can meet "already paused", and
 * right after our pause an unpause can meet "is not paused" while the guest
 * is frozen. With an event base, a hold asks again every
 * FREEZE_STALE_RETRY_MS from the first such answer (then the answer
 * stands: refused, or thawed, with a warning) — for "already paused" for up
 * to FREEZE_STALE_BUDGET_MS, and only within FREEZE_STALE_BUDGET_MS of our
 * own thaw of that container; for "is not paused" for up to
 * FREEZE_STALE_THAW_BUDGET_MS, whenever it answers the unpause of our own
 * confirmed pause, however long the hold lasted (the engine's events wait
 * behind the container's lock, which the copy holds: under load the late
 * view comes seconds after the pause). A pause someone else made is
 * refused at once, as before. A pause runc gave up on ("unable to freeze":
 * a guest forking faster than the freezer settles; runc thaws it again) is
 * asked again within the same budget. Without an event base, the first
 * answer stands. */
#define FREEZE_STALE_RETRY_MS  20
#define FREEZE_STALE_BUDGET_MS 1000
/* The budget of "is not paused" answering the unpause of our own pause: a
 * guest taken as thawed while frozen would hang the next exec into it, and
 * waiting costs only when someone else unpaused our freeze meanwhile. */
#define FREEZE_STALE_THAW_BUDGET_MS 5000
struct event_base;
void freeze_table_set_base(struct freeze_table *t, struct event_base *base);
/* The host lock (borrowed; it must outlive the table). NULL, the default:
 * none, every claim goes on as if the host lock were free. */
struct hostlock;
void freeze_table_set_hostlock(struct freeze_table *t, struct hostlock *h);
/* A blocked orphan thaw tries the host lock again every this many ms. */
#define FREEZE_HOST_RETRY_MS 100
/* The engine is about to be freed: a claim waiting to ask again (a stale
 * answer, or a blocked orphan thaw) gets the engine's -ECANCELED now, as a
 * request in flight would. */
void freeze_table_cancel_retries(struct freeze_table *t);
/* How many claims wait to ask the engine again (a stale answer, or a
 * blocked orphan thaw): what freeze_table_cancel_retries would cancel now. */
size_t freeze_table_retries_pending(const struct freeze_table *t);
/* The delay before a stale answer is asked again (FREEZE_STALE_RETRY_MS;
 * <= 0 restores it): for tests that must look at a claim while it waits. */
void freeze_table_set_stale_retry_ms(struct freeze_table *t, long ms);
/* Free after engine_free, never from one of its callbacks. Claims still
 * there (a holder whose owner never released it, its waiters) are dropped:
 * a request in flight is cancelled, a callback still owed fires once with
 * -ECANCELED (inside this call; every freeze_* call is then a no-op,
 * freeze_acquire -ESHUTDOWN), and a hold logs a warning. NULL-safe;
 * returns NULL. */
struct freeze_table *freeze_table_free(struct freeze_table *t);

/* Claims alive (waiting, pausing, held, thawing, blocked): for tests and status. */
size_t freeze_table_count(const struct freeze_table *t);
/* Containers with at least one claim or exec mark. */
size_t freeze_table_locks(const struct freeze_table *t);

/* Queues a claim on container id (copied) of engine e (borrowed: it must
 * outlive the claim's requests; see "Engine shutdown"). When it is this
 * claim's turn, POST /containers/{id}/pause; granted fires once as above.
 * Give the full 64-hex id: the host lock's offset comes from it, and other
 * daemons compute it from the id too.
 * 0 and *ret_claim set (if ret_claim), or: -EINVAL (no table, engine,
 * callback, or an empty id or one over FREEZE_ID_MAX), -EBUSY (over
 * FREEZE_MAX_CLAIMS_PER_CONTAINER queued), when the lock was free the host
 * lock's refusal (-EAGAIN: held elsewhere; -ENOLCK) or the pause's own
 * (-ENOTCONN: the engine is not reachable), or the error the lock's waiters
 * are being failed with when asked from one of their callbacks; then
 * granted never fires. */
int freeze_acquire(struct freeze_table *t, struct engine *e, const char *id, freeze_cb *granted,
		   void *arg, struct freeze_claim **ret_claim);

/* The holder is done (state HELD): POST unpause, then the next claim goes.
 * thawed (may be NULL) fires once, from the loop: 0 when thawed, not paused
 * or absent, else the failure ("… still frozen …", also logged as a
 * warning). Returns 0, or < 0 when the unpause could not be started (the
 * claim is released all the same, the warning logged, and thawed never
 * fires). The claim pointer is the table's from here on. */
int freeze_release_then(struct freeze_claim *claim, freeze_cb *thawed, void *arg);
/* freeze_release_then(claim, NULL, NULL). */
void freeze_release(struct freeze_claim *claim);

/* Withdraws a claim, whatever its state; the unpause it owes still happens:
 *   WAITING  → off the queue; granted fires now with -ECANCELED;
 *   PAUSING  → granted fires now with -ECANCELED; if the pause then
 *              succeeds, it is undone before the next claim goes;
 *   HELD     → as freeze_release (no callback);
 *   THAWING  → a thawed callback still owed fires now with -ECANCELED; the
 *              unpause goes on;
 *   BLOCKED  → off the queue (nothing was asked of the engine); done fires
 *              now with -ECANCELED.
 * The claim pointer is the table's from here on. */
void freeze_cancel(struct freeze_claim *claim);

enum freeze_claim_state freeze_claim_get_state(const struct freeze_claim *claim);

/* True while a claim of ours may have id paused (pausing, held or thawing):
 * the claim record of §2.6 that orphan recovery consults, so the registry
 * and acquire never thaw our own freeze. */
bool freeze_is_held(const struct freeze_table *t, const char *id);
/* True within FREEZE_STALE_BUDGET_MS of our own thaw of id: an engine
 * answer "is paused" may still be its late view of our pause then. */
bool freeze_recently_unpaused(const struct freeze_table *t, const char *id);
/* Non-zero while the engine has confirmed our pause of id and the unpause
 * has not been issued: the confirmed set with its generation tick (§2.6),
 * unique per hold, for exec's retry of a "paused" refusal (§2.2). */
uint64_t freeze_confirmed_generation(const struct freeze_table *t, const char *id);

/* Exec starts (behaviour-docker §2.2). Between an exec's POST
 * /exec/{eid}/start and the engine's confirmation that the process runs,
 * a pause makes the runtime fail the exec into the frozen container (exit
 * 126, "cannot exec in a paused state" written to the exec's own stdout,
 * indistinguishable from the guest's output). So the two never overlap:
 *
 *  - an exec sends no create or start while freeze_exec_must_wait();
 *  - it marks the container from its start until confirmed
 *    (freeze_exec_starting_begin/_end), and a hold that becomes the head
 *    meanwhile stays WAITING ("deferred") without its pause. The last
 *    mark's end lets it go on at once, from the loop. It never pauses
 *    while a mark is there, however long: a pause that catches the
 *    runtime's init joining the container's cgroup freezes it there, and
 *    the engine then hangs every call on the container (seen on Docker
 *    20.10, cgroup v1, under load). After FREEZE_EXEC_WAIT_MS a warning is
 *    logged, once; the hold's owner bounds the wait with its own deadline
 *    (freeze_cancel). Deferring needs the event base
 *    (freeze_table_set_base): without one, a hold never waits.
 *
 * A mark also holds the exec's wake event (borrowed; it must stay valid
 * until the mark ends): when a hold is deferred behind the mark, the table
 * makes it active (event_active), once, so the exec asks the engine now
 * whether its process runs. */
#define FREEZE_EXEC_WAIT_MS 2000
struct event;
struct freeze_exec_mark;
/* True while an exec of ours must not send its create or start on id: a
 * hold of ours is at the head of its lock (deferred for an exec start,
 * pausing, held or thawing). */
bool freeze_exec_must_wait(const struct freeze_table *t, const char *id);
/* Marks an exec starting on id (copied); wake may be NULL. 0 and *ret_mark,
 * or -EINVAL (no table or ret_mark, a bad id), -ESHUTDOWN (the table is
 * being freed). */
int freeze_exec_starting_begin(struct freeze_table *t, const char *id, struct event *wake,
			       struct freeze_exec_mark **ret_mark);
/* Ends a mark (exactly once per mark; NULL-safe). The last one on a
 * container lets a deferred hold go on, from the loop. The table must
 * still exist: end every mark before freeze_table_free (which drops what
 * is left with a warning). */
void freeze_exec_starting_end(struct freeze_exec_mark *m);
/* Points the mark's wake at ev (borrowed; NULL: none): its owner changed
 * (a run's mark passing to its linger, execrun.h). NULL-safe. */
void freeze_exec_mark_set_wake(struct freeze_exec_mark *m, struct event *ev);
/* Exec marks alive on id: for tests. */
size_t freeze_exec_starting_count(const struct freeze_table *t, const char *id);

/* Thaws container id, found paused (§2.1 step 5), under its lock: queued
 * behind our own claims, so a live freeze of ours is never lifted (by its
 * turn ours has been undone, and "is not paused" counts as thawed). done
 * fires once like granted: 0 when thawed (2xx, not paused, absent), else a
 * failure whose message is "docker could not thaw ID, which a host left
 * frozen; refusing to serve a container whose guest cannot run: …", or,
 * -EAGAIN (FREEZE_REASON_HELD_ELSEWHERE), "left ID frozen: another
 * maf-sandboxd on this host holds it frozen" without any request. It
 * may be cancelled with freeze_cancel. Returns as freeze_acquire. */
int freeze_table_thaw_orphan(struct freeze_table *t, struct engine *e, const char *id, freeze_cb *done,
			     void *arg, struct freeze_claim **ret_claim);
/* The same, but while another process holds the host lock the claim is
 * BLOCKED and tries again every FREEZE_HOST_RETRY_MS for up to wait_ms
 * (another daemon's freeze lasts one file call) before it fails -EAGAIN.
 * Waiting needs the event base (freeze_table_set_base): without one, or
 * with wait_ms <= 0, it is freeze_table_thaw_orphan. */
int freeze_table_thaw_orphan_wait(struct freeze_table *t, struct engine *e, const char *id, long wait_ms,
				  freeze_cb *done, void *arg, struct freeze_claim **ret_claim);

#endif
