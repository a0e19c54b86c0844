/* check_freeze.c — the per-container freeze lock (freeze.h, behaviour-docker
 * §2.6) against the fake engine: FIFO order, exactly one pause and one
 * unpause per hold and never a second pause while held, how each refusal
 * is classified and who goes next, the thaw results that warn and those
 * that do not, cancellation in every state, the engine freed at every
 * point of a hold, and the orphan thaw under the same lock. Every callback
 * is counted: each must fire exactly once. With a host lock (hostlock.h)
 * held by another process, nothing is asked of the engine, and ours is
 * given back on every way a claim ends. An exec of ours starting on the
 * container (an exec mark) defers a hold's pause until the mark ends. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "cleanup.h"
#include "docker.h"
#include "endpoint.h"
#include "engine.h"
#include "fake_engine.h"
#include "freeze.h"
#include "hostlock.h"
#include "log.h"
#include "loop.h"
#include "slow.h"
#include "xmalloc.h"

#define RUN_MAX_MS  2000         /* hang guard: the longest a wait for a callback lasts */
#define SETTLE_MS   40
#define SLOW_MS     300          /* a reply held back this long is "in flight" */
#define NEVER_MS    60000        /* a reply held back for good: the fake ends the wait when
				  * the client closes the request */
#define API         "/v1.45"
#define MAX_RECS    (FREEZE_MAX_CLAIMS_PER_CONTAINER + 8)
#define TEXT_MAX    512
#define TRACE_MAX   4096

#define VERSION_BODY \
	"{\"Version\":\"26.1.0\",\"ApiVersion\":\"1.45\",\"Os\":\"linux\",\"Arch\":\"amd64\"," \
	"\"KernelVersion\":\"6.1.0\"}"
#define PING    { .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .body = VERSION_BODY, .repeat = true }

#define C1           "c1"
#define PAUSE_PATH   API "/containers/" C1 "/pause"
#define UNPAUSE_PATH API "/containers/" C1 "/unpause"
/* A reply with this status to the pause / unpause of c1. */
#define PAUSE_R(st, ...)   { .method = "POST", .path = PAUSE_PATH, .status = st, __VA_ARGS__ }
#define UNPAUSE_R(st, ...) { .method = "POST", .path = UNPAUSE_PATH, .status = st, __VA_ARGS__ }
#define PAUSE(...)         PAUSE_R(204, __VA_ARGS__)
#define UNPAUSE(...)       UNPAUSE_R(204, __VA_ARGS__)
#define PAUSES       PAUSE(.repeat = true)
#define UNPAUSES     UNPAUSE(.repeat = true)
#define NOT_PAUSED_500 \
	UNPAUSE_R(500, .body = "{\"message\":\"Container c1 is not paused\"}")

static struct event_base *base;
static struct engine *engine;
static struct freeze_table *table;
static int reachable_count;

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

static void run_until(const int *counter, int want, int max_ms)
{
	loop_run_until(base, counter, want, max_ms);
}

static void run_for(int ms)
{
	run_until(NULL, 0, ms);
}

/* ---- fixture ------------------------------------------------------------------------- */

static void setup(void)
{
	reachable_count = 0;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
	table = freeze_table_new();
	ck_assert_ptr_nonnull(table);
	loop_log_capture_start();
	log_set_debug(true);   /* the debug lines are formatted too (UBSan sees them) */
}

static struct rec *copy_holder;

static void records_forget(void);

static void teardown(void)
{
	engine = engine_free(engine);
	table = freeze_table_free(table);
	event_base_free(base);
	fake_engine_cleanup();
	loop_log_capture_stop();
	records_forget();   /* so a claim left unfreed is a leak to LeakSanitizer */
}

static void start_reachable(const struct fake_reply *script, size_t n)
{
	loop_engine_start_reachable(base, engine, &reachable_count, script, n, RUN_MAX_MS);
}

/* The container requests the fake saw, in order: "c1/pause;c1/unpause;". */
static const char *trace(void)
{
	static char buf[TRACE_MAX];
	const char *prefix = API "/containers/";
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const char *p = fake_engine_request(i)->path;

		if (strncmp(p, prefix, strlen(prefix)) == 0)
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s;", p + strlen(prefix));
	}
	return buf;
}

static size_t requests_ending(const char *suffix)
{
	size_t n = 0;

	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const char *p = fake_engine_request(i)->path;
		size_t lp = strlen(p), ls = strlen(suffix);

		n += lp >= ls && strcmp(p + lp - ls, suffix) == 0;
	}
	return n;
}

/* ---- recording callbacks ---------------------------------------------------------------- */

enum action {
	ACT_NONE,
	ACT_RELEASE,         /* freeze_release from inside the callback */
	ACT_CANCEL,          /* freeze_cancel from inside the callback */
};

struct rec {
	struct freeze_claim *claim;   /* as freeze_acquire returned it */
	int calls;
	int error;
	bool failure_null;
	enum freeze_reason reason;
	long status;
	char message[TEXT_MAX];
	int seq;                      /* this callback's place among all that fired */
	size_t pauses, unpauses;      /* requests the fake had seen when it fired */
	enum action action;
};

static struct rec recs[MAX_RECS];
static int n_recs;
static int fired;                /* callbacks so far, all records */

static void records_forget(void)
{
	memset(recs, 0, sizeof(recs));
	n_recs = 0;
	copy_holder = NULL;
}

static struct rec *rec_new(enum action action)
{
	struct rec *r;

	ck_assert_int_lt(n_recs, MAX_RECS);
	r = &recs[n_recs++];
	*r = (struct rec){ .action = action };
	return r;
}

static void rec_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct rec *r = arg;

	if (r->claim)
		ck_assert_ptr_eq(claim, r->claim);
	r->calls++;
	r->seq = ++fired;
	r->error = error;
	r->failure_null = f == NULL;
	ck_assert_msg((error == 0) == (f == NULL), "error %d with failure %p", error, (const void *)f);
	if (f) {
		r->reason = f->reason;
		r->status = f->status;
		ck_assert_ptr_nonnull(f->message);
		snprintf(r->message, sizeof(r->message), "%s", f->message);
	}
	r->pauses = requests_ending("/pause");
	r->unpauses = requests_ending("/unpause");
	if (r->action == ACT_RELEASE && error == 0)
		freeze_release(claim);
	if (r->action == ACT_CANCEL)
		freeze_cancel(claim);
}

/* Queues a hold on id; its record. */
static struct rec *hold_on(const char *id, enum action action)
{
	struct rec *r = rec_new(action);

	ck_assert_int_eq(freeze_acquire(table, engine, id, rec_cb, r, &r->claim), 0);
	ck_assert_ptr_nonnull(r->claim);
	ck_assert_int_eq(r->calls, 0);   /* never inside freeze_acquire */
	return r;
}

static struct rec *hold(void)
{
	return hold_on(C1, ACT_NONE);
}

static void wait_calls(struct rec *r, int want)
{
	run_until(&r->calls, want, RUN_MAX_MS);
	ck_assert_int_eq(r->calls, want);
}

/* Releases a granted hold and waits for the thaw; the thawed record. */
static struct rec *release_and_wait(struct rec *h)
{
	struct rec *t = rec_new(ACT_NONE);

	ck_assert_int_eq(h->calls, 1);
	ck_assert_int_eq(h->error, 0);
	ck_assert_int_eq(freeze_release_then(h->claim, rec_cb, t), 0);
	ck_assert_int_eq(t->calls, 0);
	wait_calls(t, 1);
	return t;
}

/* Nothing more fires, and every record fired at most once. */
static void settle(void)
{
	int before = fired;

	run_for(SETTLE_MS);
	ck_assert_int_eq(fired, before);
	for (int i = 0; i < n_recs; i++)
		ck_assert_int_le(recs[i].calls, 1);
}

static void assert_idle(void)
{
	ck_assert_uint_eq(freeze_table_count(table), 0);
	ck_assert_uint_eq(freeze_table_locks(table), 0);
	ck_assert(!freeze_is_held(table, C1));
}

/* ---- names ---------------------------------------------------------------------------- */

START_TEST(test_names)
{
	for (int i = 0; i < _FREEZE_CLAIM_STATE_MAX; i++) {
		ck_assert_str_ne(freeze_claim_state_to_string((enum freeze_claim_state)i), "invalid");
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(freeze_claim_state_to_string((enum freeze_claim_state)i),
					 freeze_claim_state_to_string((enum freeze_claim_state)j));
	}
	for (int i = 0; i < _FREEZE_REASON_MAX; i++) {
		ck_assert_str_ne(freeze_reason_to_string((enum freeze_reason)i), "invalid");
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(freeze_reason_to_string((enum freeze_reason)i),
					 freeze_reason_to_string((enum freeze_reason)j));
	}
	ck_assert_str_eq(freeze_claim_state_to_string(_FREEZE_CLAIM_STATE_MAX), "invalid");
	ck_assert_str_eq(freeze_reason_to_string(_FREEZE_REASON_MAX), "invalid");
	ck_assert_str_eq(freeze_claim_state_to_string(FREEZE_CLAIM_HELD), "held");
	ck_assert_str_eq(freeze_reason_to_string(FREEZE_REASON_ALREADY_PAUSED), "already-paused");
}
END_TEST

/* ---- the engine's stale pause state (Docker 20.10) ------------------------------------------ */

#define ALREADY_PAUSED_409 \
	PAUSE_R(409, .body = "{\"message\":\"container c1 is already paused\"}")

/* With an event base, "already paused" right after our own unpause is
 * asked again, and the hold is granted once the engine catches up. */
START_TEST(test_stale_already_paused_is_asked_again)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSE(), UNPAUSE(), ALREADY_PAUSED_409,
						    ALREADY_PAUSED_409, PAUSES, UNPAUSES };
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;c1/pause;c1/pause;");
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
}
END_TEST

/* No thaw of ours just before: "already paused" is someone else's pause,
 * refused at once and never undone. */
START_TEST(test_already_paused_without_our_thaw_is_refused_at_once)
{
	static const struct fake_reply script[] = { PING, VERSION, ALREADY_PAUSED_409, PAUSES, UNPAUSES };
	struct rec *a;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, -EBUSY);
	run_for(FREEZE_STALE_RETRY_MS * 4);
	ck_assert_str_eq(trace(), "c1/pause;");
}
END_TEST

/* "is not paused" back from the unpause of our own pause is asked again:
 * the guest may well be frozen; thawed only when the engine says so. */
START_TEST(test_stale_not_paused_is_asked_again)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, NOT_PAUSED_500, UNPAUSES };
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/unpause;");
}
END_TEST

/* runc gave up freezing a busy guest (500 "unable to freeze"; it thawed
 * it again): asked again, granted once it works. */
START_TEST(test_unable_to_freeze_is_asked_again)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		PAUSE_R(500, .body = "{\"message\":\"Cannot pause container c1: OCI runtime pause failed: "
				     "unable to freeze: unknown\"}"),
		PAUSES, UNPAUSES,
	};
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/pause;");
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
}
END_TEST

/* Our thaw was recent, but the pause is really someone else's: after the
 * budget the refusal stands, and nothing of theirs is unpaused. */
START_TEST(test_stale_budget_then_refused)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(), UNPAUSE(),
		PAUSE_R(409, .body = "{\"message\":\"container c1 is already paused\"}", .repeat = true),
	};
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	a = hold();
	run_until(&a->calls, 1, FREEZE_STALE_BUDGET_MS + RUN_MAX_MS);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(a->error, -EBUSY);
	ck_assert(strncmp(trace(), "c1/pause;c1/unpause;c1/pause;c1/pause;", 38) == 0);
	ck_assert(strstr(trace() + 20, "unpause") == NULL);
	ck_assert_uint_eq(freeze_table_count(table), 0);
}
END_TEST

/* The engine is going away while a claim waits to ask again: it fails
 * now, like a request in flight, and nothing more is sent. */
START_TEST(test_stale_retry_cancelled)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSE(), UNPAUSE(), ALREADY_PAUSED_409,
						    PAUSES, UNPAUSES };
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	/* The retry waits long enough that it cannot fire before it is seen
	 * waiting, however slow the machine (valgrind included). */
	freeze_table_set_stale_retry_ms(table, 60000);
	a = hold();
	/* Until the 409 is in and the claim waits to ask again (observed, not
	 * timed). Nothing runs between the check and the cancel. */
	/* hang guard */
	LOOP_RUN_WHILE(base, freeze_table_retries_pending(table) == 0, RUN_MAX_MS);
	ck_assert_uint_eq(freeze_table_retries_pending(table), 1);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
	freeze_table_cancel_retries(table);
	ck_assert_uint_eq(freeze_table_retries_pending(table), 0);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(a->error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
}
END_TEST

/* ---- order --------------------------------------------------------------------------------- */

/* One hold: exactly one pause, then one unpause, each callback once. */
START_TEST(test_one_hold)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *t;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_PAUSING);
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert(a->failure_null);
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_HELD);
	ck_assert_str_eq(trace(), "c1/pause;");
	run_for(SETTLE_MS);
	ck_assert_str_eq(trace(), "c1/pause;");           /* held: nothing more is sent */
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;");
	settle();
	assert_idle();
	ck_assert_ptr_null(strstr(loop_logged(), "warning"));
}
END_TEST

/* Three claims on one container are granted in the order they were made,
 * each only after the previous one's unpause. */
START_TEST(test_fifo_three_waiters)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *h[3];

	start_reachable(script, ELEMENTSOF(script));
	for (int i = 0; i < 3; i++)
		h[i] = hold();
	ck_assert_uint_eq(freeze_table_count(table), 3);
	ck_assert_uint_eq(freeze_table_locks(table), 1);
	for (int i = 0; i < 3; i++) {
		wait_calls(h[i], 1);
		ck_assert_int_eq(h[i]->error, 0);
		run_for(SETTLE_MS);
		for (int j = i + 1; j < 3; j++) {
			ck_assert_int_eq(h[j]->calls, 0);
			ck_assert_int_eq(freeze_claim_get_state(h[j]->claim), FREEZE_CLAIM_WAITING);
		}
		ck_assert_uint_eq(requests_ending("/pause"), (size_t)i + 1);
		release_and_wait(h[i]);
	}
	ck_assert_int_lt(h[0]->seq, h[1]->seq);
	ck_assert_int_lt(h[1]->seq, h[2]->seq);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;c1/unpause;c1/pause;c1/unpause;");
	settle();
	assert_idle();
}
END_TEST

/* Many claims released from inside their granted callback: at every grant
 * the engine has seen exactly one more pause than unpauses, so no pause
 * is ever sent while we hold the container. */
START_TEST(test_never_paused_twice)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	enum { N = 6 };
	struct rec *h[N];

	start_reachable(script, ELEMENTSOF(script));
	for (int i = 0; i < N; i++)
		h[i] = hold_on(C1, ACT_RELEASE);
	wait_calls(h[N - 1], 1);
	run_until(NULL, 0, SETTLE_MS);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(h[i]->calls, 1);
		ck_assert_int_eq(h[i]->error, 0);
		ck_assert_uint_eq(h[i]->pauses, (size_t)i + 1);
		ck_assert_uint_eq(h[i]->unpauses, (size_t)i);
		if (i > 0)
			ck_assert_int_lt(h[i - 1]->seq, h[i]->seq);
	}
	ck_assert_uint_eq(requests_ending("/pause"), N);
	ck_assert_uint_eq(requests_ending("/unpause"), N);
	settle();
	assert_idle();
}
END_TEST

/* Locks are per container: a hold on c2 does not wait for c1's. */
START_TEST(test_containers_independent)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSES, UNPAUSES,
		{ .method = "POST", .path = API "/containers/c2/pause", .status = 204, .repeat = true },
		{ .method = "POST", .path = API "/containers/c2/unpause", .status = 204, .repeat = true },
	};
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold_on(C1, ACT_NONE);
	b = hold_on("c2", ACT_NONE);
	wait_calls(a, 1);
	wait_calls(b, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert_int_eq(b->error, 0);
	ck_assert_uint_eq(freeze_table_locks(table), 2);
	ck_assert(freeze_is_held(table, C1));
	ck_assert(freeze_is_held(table, "c2"));
	ck_assert(!freeze_is_held(table, "c3"));
	ck_assert_uint_ne(freeze_confirmed_generation(table, C1), freeze_confirmed_generation(table, "c2"));
	release_and_wait(a);
	ck_assert(!freeze_is_held(table, C1));
	ck_assert(freeze_is_held(table, "c2"));
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* The claim record (is_held) covers pausing, held and thawing; the
 * confirmed generation only the confirmed hold, and is new for each. */
START_TEST(test_held_and_generation)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(.delay_ms = 100), UNPAUSE(.delay_ms = 100), PAUSES, UNPAUSES,
	};
	struct rec *a, *b, *t = rec_new(ACT_NONE);
	uint64_t g1;

	start_reachable(script, ELEMENTSOF(script));
	ck_assert(!freeze_is_held(table, C1));
	ck_assert_uint_eq(freeze_confirmed_generation(table, C1), 0);
	a = hold();
	ck_assert(freeze_is_held(table, C1));                       /* pausing */
	ck_assert_uint_eq(freeze_confirmed_generation(table, C1), 0);
	wait_calls(a, 1);
	g1 = freeze_confirmed_generation(table, C1);
	ck_assert_uint_ne(g1, 0);
	ck_assert_int_eq(freeze_release_then(a->claim, rec_cb, t), 0);
	ck_assert(freeze_is_held(table, C1));                       /* thawing */
	ck_assert_uint_eq(freeze_confirmed_generation(table, C1), 0);
	wait_calls(t, 1);
	ck_assert(!freeze_is_held(table, C1));
	b = hold();
	wait_calls(b, 1);
	ck_assert_uint_ne(freeze_confirmed_generation(table, C1), 0);
	ck_assert_uint_ne(freeze_confirmed_generation(table, C1), g1);
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* ---- refusals --------------------------------------------------------------------------------- */

START_TEST(test_not_reachable_refused)
{
	struct rec *r = rec_new(ACT_NONE);

	ck_assert_int_eq(freeze_acquire(table, engine, C1, rec_cb, r, &r->claim), -ENOTCONN);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, r, &r->claim), -ENOTCONN);
	ck_assert_ptr_null(r->claim);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r->calls, 0);
	ck_assert_uint_eq(engine_requests_made(engine), 0);
	assert_idle();
}
END_TEST

START_TEST(test_bad_arguments)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	char long_id[FREEZE_ID_MAX + 2];
	struct rec *r = rec_new(ACT_NONE);

	memset(long_id, 'a', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_acquire(NULL, engine, C1, rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_acquire(table, NULL, C1, rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_acquire(table, engine, NULL, rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_acquire(table, engine, "", rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_acquire(table, engine, long_id, rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_acquire(table, engine, C1, NULL, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, "", rec_cb, r, NULL), -EINVAL);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, NULL, r, NULL), -EINVAL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r->calls, 0);
	ck_assert_str_eq(trace(), "");
	assert_idle();
	ck_assert(!freeze_is_held(NULL, C1));
	ck_assert(!freeze_is_held(table, NULL));
	ck_assert_uint_eq(freeze_table_count(NULL), 0);
	long_id[FREEZE_ID_MAX] = '\0';           /* exactly the limit is fine */
	r = hold_on(long_id, ACT_RELEASE);
	wait_calls(r, 1);
	ck_assert_int_eq(r->error, -ENOENT);     /* the fake has no such container */
}
END_TEST

/* Over FREEZE_MAX_CLAIMS_PER_CONTAINER queued → -EBUSY, nothing fires for
 * it; the engine freed then fails every queued claim once. */
START_TEST(test_claim_cap)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSE(.delay_ms = 3000) };
	struct rec *over = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	for (int i = 0; i < FREEZE_MAX_CLAIMS_PER_CONTAINER; i++)
		hold();
	ck_assert_int_eq(freeze_acquire(table, engine, C1, rec_cb, over, NULL), -EBUSY);
	ck_assert_uint_eq(freeze_table_count(table), FREEZE_MAX_CLAIMS_PER_CONTAINER);
	run_for(SETTLE_MS);
	engine = engine_free(engine);
	for (int i = 1; i <= FREEZE_MAX_CLAIMS_PER_CONTAINER; i++) {
		ck_assert_int_eq(recs[i].calls, 1);
		ck_assert_int_eq(recs[i].error, -ECANCELED);
		ck_assert_int_eq(recs[i].seq, i);           /* in FIFO order */
	}
	ck_assert_int_eq(over->calls, 0);
	settle();
	assert_idle();
}
END_TEST

/* ---- a refused pause --------------------------------------------------------------------------- */

static const struct {
	int status;
	const char *body;
	enum freeze_reason reason;
	int error;
	const char *text;            /* the engine's words in the message */
} pause_refusal_rows[] = {
	{ 409, "{\"message\":\"container c1 is not running\"}", FREEZE_REASON_NOT_RUNNING, -ESRCH,
	  "is not running" },
	{ 409, "{\"message\":\"container c1 is already paused\"}", FREEZE_REASON_ALREADY_PAUSED, -EBUSY,
	  "already paused" },
	{ 404, "{\"message\":\"No such container: c1\"}", FREEZE_REASON_ABSENT, -ENOENT, "No such container" },
	{ 409, "{\"message\":\"Container c1 is restarting, wait until the container is running\"}",
	  FREEZE_REASON_ENGINE_ERROR, -EIO, "is restarting" },
	{ 500, "{\"message\":\"cannot pause: freezer not supported\"}", FREEZE_REASON_ENGINE_ERROR, -EIO,
	  "freezer not supported" },
	{ 500, "oops", FREEZE_REASON_ENGINE_ERROR, -EIO, "HTTP 500" },
	/* only a 409 is classified: the same words in a 500 are an engine error */
	{ 500, "{\"message\":\"container c1 is already paused\"}", FREEZE_REASON_ENGINE_ERROR, -EIO,
	  "already paused" },
};

/* A refused pause fails its claim with the reason, is never undone (no
 * unpause: something else may hold it), and the next claim goes. */
START_TEST(test_pause_refused)
{
	struct fake_reply script[] = {
		PING, VERSION,
		PAUSE_R(pause_refusal_rows[_i].status, .body = pause_refusal_rows[_i].body),
		PAUSES, UNPAUSES,
	};
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, pause_refusal_rows[_i].error);
	ck_assert_int_eq(a->reason, pause_refusal_rows[_i].reason);
	ck_assert_int_eq(a->status, pause_refusal_rows[_i].status);
	ck_assert_msg(strstr(a->message, "docker could not freeze c1 for a file call: "), "%s", a->message);
	ck_assert_msg(strstr(a->message, pause_refusal_rows[_i].text), "%s", a->message);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/pause;");   /* no unpause for a */
	release_and_wait(b);
	ck_assert_str_eq(trace(), "c1/pause;c1/pause;c1/unpause;");
	settle();
	assert_idle();
	fake_engine_stop();   /* the script lives on this stack */
}
END_TEST

/* A pause whose answer never came may have landed: the claim fails, the
 * pause is undone ("is not paused" is then no warning), then the next goes. */
START_TEST(test_pause_timeout_undone)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(.delay_ms = NEVER_MS), NOT_PAUSED_500, PAUSES, UNPAUSES,
	};
	/* Short enough that the pause nobody answers times out soon; long
	 * enough (stretched under valgrind) that the undo's prompt answer is
	 * read before it: the undo is sent under these options too. */
	const struct engine_options short_opts = { .timeout_ms = 100L * test_slow_factor(), .reconnect_min_ms = 20,
						   .reconnect_max_ms = 80 };
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	engine_set_options(engine, &short_opts);
	a = hold();
	b = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, -ETIMEDOUT);
	ck_assert_int_eq(a->reason, FREEZE_REASON_TIMEOUT);
	ck_assert(strstr(a->message, "could not freeze c1"));
	ck_assert(freeze_is_held(table, C1));         /* the undo is still owed */
	engine_set_options(engine, &test_opts);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
	ck_assert_ptr_null(strstr(loop_logged(), "still frozen"));
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* The engine gone (connection refused): the claim fails "unreachable" and
 * is not undone; the waiter behind it fails the same way without a
 * request (the engine refuses -ENOTCONN); a new claim is refused at once. */
START_TEST(test_pause_unreachable)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *b, *c = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	fake_engine_stop();
	a = hold();
	b = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, -ECONNREFUSED);
	ck_assert_int_eq(a->reason, FREEZE_REASON_UNREACHABLE);
	ck_assert_int_eq(a->status, 0);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, -ENOTCONN);
	ck_assert_int_eq(b->reason, FREEZE_REASON_UNREACHABLE);
	ck_assert_msg(strstr(b->message, "not reachable"), "%s", b->message);
	ck_assert_int_eq(freeze_acquire(table, engine, C1, rec_cb, c, NULL), -ENOTCONN);
	settle();
	ck_assert_int_eq(c->calls, 0);
	ck_assert_uint_eq(requests_ending("/unpause"), 0);
	assert_idle();
}
END_TEST

/* ---- the thaw ---------------------------------------------------------------------------------- */

static const struct {
	struct fake_reply unpause;
	int error;                    /* the thawed callback's */
	enum freeze_reason reason;
	bool warns;                   /* "still frozen" logged */
} unpause_rows[] = {
	{ UNPAUSE(), 0, 0, false },
	{ NOT_PAUSED_500, 0, 0, false },
	{ UNPAUSE_R(409, .body = "{\"message\":\"Container c1 is not paused\"}"), 0, 0, false },
	{ UNPAUSE_R(404, .body = "{\"message\":\"No such container: c1\"}"), 0, 0, false },
	{ UNPAUSE_R(500, .body = "{\"message\":\"freezer: device or resource busy\"}"), -EIO,
	  FREEZE_REASON_ENGINE_ERROR, true },
	{ UNPAUSE_R(409, .body = "{\"message\":\"container c1 is restarting\"}"), -EIO,
	  FREEZE_REASON_ENGINE_ERROR, true },
	{ UNPAUSE(.raw = "garbage\r\n\r\n"), -EPROTO, FREEZE_REASON_ENGINE_ERROR, true },
};

/* Whatever the unpause answers, the lock moves on; only a real failure
 * warns "still frozen", and the holder's thawed callback sees it. */
START_TEST(test_unpause_result)
{
	struct fake_reply script[] = { PING, VERSION, PAUSES, unpause_rows[_i].unpause, UNPAUSES };
	struct rec *a, *b, *t;
	const char *log;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, unpause_rows[_i].error);
	if (t->error) {
		ck_assert_int_eq(t->reason, unpause_rows[_i].reason);
		ck_assert_msg(strstr(t->message, "docker could not thaw c1 after a file call"), "%s", t->message);
		ck_assert_msg(strstr(t->message, "still frozen"), "%s", t->message);
	}
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	log = loop_logged();
	if (unpause_rows[_i].warns) {
		ck_assert_msg(strstr(log, "warning") && strstr(log, "still frozen"), "log: %s", log);
	} else {
		ck_assert_msg(!strstr(log, "still frozen"), "log: %s", log);
		ck_assert_msg(!strstr(log, "warning"), "log: %s", log);
	}
	release_and_wait(b);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;c1/unpause;");
	settle();
	assert_idle();
	fake_engine_stop();
}
END_TEST

/* Released from inside its own granted callback: thawed with no callback
 * owed, and the next claim goes. */
START_TEST(test_release_in_granted_cb)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold_on(C1, ACT_RELEASE);
	b = hold();
	wait_calls(a, 1);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_uint_eq(b->unpauses, 1);
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* ---- cancellation --------------------------------------------------------------------------- */

/* A waiter cancelled: its callback fires once, at once, with -ECANCELED;
 * it never pauses; the one behind it goes next. */
START_TEST(test_cancel_waiter)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *b, *c;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	c = hold();
	wait_calls(a, 1);
	freeze_cancel(b->claim);
	ck_assert_int_eq(b->calls, 1);
	ck_assert_int_eq(b->error, -ECANCELED);
	ck_assert_int_eq(b->reason, FREEZE_REASON_CANCELLED);
	ck_assert_uint_eq(freeze_table_count(table), 2);
	release_and_wait(a);
	wait_calls(c, 1);
	ck_assert_int_eq(c->error, 0);
	release_and_wait(c);
	ck_assert_int_eq(b->calls, 1);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;c1/unpause;");
	settle();
	assert_idle();
}
END_TEST

/* The holder cancelled: unpaused (no second callback), then the next goes. */
START_TEST(test_cancel_holder)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	freeze_cancel(a->claim);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* Cancelled while its pause is in flight: the callback fires at once with
 * -ECANCELED; the pause, once it lands, is undone before the next goes. */
START_TEST(test_cancel_while_pausing)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(.delay_ms = SLOW_MS), PAUSES, UNPAUSES,
	};
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_PAUSING);
	freeze_cancel(a->claim);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(a->error, -ECANCELED);
	ck_assert(freeze_is_held(table, C1));
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_uint_eq(b->unpauses, 1);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* Cancelled while thawing: the thawed callback fires at once with
 * -ECANCELED, the unpause still completes, then the next goes. */
START_TEST(test_cancel_while_thawing)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSES, UNPAUSE(.delay_ms = SLOW_MS), UNPAUSES,
	};
	struct rec *a, *b, *t = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(freeze_release_then(a->claim, rec_cb, t), 0);
	freeze_cancel(a->claim);
	ck_assert_int_eq(t->calls, 1);
	ck_assert_int_eq(t->error, -ECANCELED);
	ck_assert_int_eq(b->calls, 0);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	ck_assert_uint_eq(b->unpauses, 1);
	release_and_wait(b);
	settle();
	assert_idle();
}
END_TEST

/* Cancelling a claim from inside its own failure callback does nothing. */
START_TEST(test_cancel_in_own_failure_cb)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE_R(409, .body = "{\"message\":\"container c1 is not running\"}"),
	};
	struct rec *a;

	start_reachable(script, ELEMENTSOF(script));
	a = hold_on(C1, ACT_CANCEL);
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, -ESRCH);
	settle();
	assert_idle();
}
END_TEST

/* ---- the engine freed ---------------------------------------------------------------------- */

/* While the pause is in flight: it and every waiter fail once with
 * -ECANCELED, inside engine_free; nothing is started; nothing after. */
START_TEST(test_engine_freed_while_pausing)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSE(.delay_ms = 3000) };
	struct rec *h[3];

	start_reachable(script, ELEMENTSOF(script));
	for (int i = 0; i < 3; i++)
		h[i] = hold();
	run_for(SETTLE_MS);
	engine = engine_free(engine);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(h[i]->calls, 1);
		ck_assert_int_eq(h[i]->error, -ECANCELED);
		ck_assert_int_eq(h[i]->reason, FREEZE_REASON_CANCELLED);
		ck_assert_int_eq(h[i]->seq, i + 1);
	}
	assert_idle();
	settle();
	ck_assert_str_eq(trace(), "c1/pause;");
	ck_assert(strstr(loop_logged(), "may be left frozen"));
}
END_TEST

/* While the unpause is in flight: "still frozen" is logged, the thawed
 * callback and the waiter fail once with -ECANCELED. */
START_TEST(test_engine_freed_while_thawing)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSE(.delay_ms = 3000) };
	struct rec *a, *b, *t = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(freeze_release_then(a->claim, rec_cb, t), 0);
	run_for(SETTLE_MS);
	engine = engine_free(engine);
	ck_assert_int_eq(t->calls, 1);
	ck_assert_int_eq(t->error, -ECANCELED);
	ck_assert_int_eq(b->calls, 1);
	ck_assert_int_eq(b->error, -ECANCELED);
	assert_idle();
	settle();
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;");
	ck_assert(strstr(loop_logged(), "still frozen"));
}
END_TEST

/* Mid-hold, the holder's own work on the engine (the copy) is cancelled
 * and it releases from that callback: the unpause is refused (-ENOTCONN,
 * "still frozen" logged), the waiter fails "unreachable" inside
 * engine_free, and nothing fires afterwards. */
static int copy_calls, copy_release;

static void copy_done_cb(const struct docker_reply *r, void *arg)
{
	copy_calls++;
	ck_assert_int_eq(r->error, -ECANCELED);
	copy_release = freeze_release_then(copy_holder->claim, rec_cb, arg);
}

START_TEST(test_engine_freed_mid_hold)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSES, UNPAUSES, { .path = API "/containers/c1/archive", .delay_ms = 3000 },
	};
	struct rec *b, *t = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	copy_holder = hold();
	b = hold();
	wait_calls(copy_holder, 1);
	ck_assert_int_eq(docker_call(engine, "GET", "/containers/c1/archive?path=%2F", NULL, 0, copy_done_cb,
				     t, NULL), 0);
	run_for(SETTLE_MS);
	engine = engine_free(engine);
	ck_assert_int_eq(copy_calls, 1);
	ck_assert_int_eq(copy_release, -ENOTCONN);
	ck_assert_int_eq(t->calls, 0);               /* not started: thawed never fires */
	ck_assert_int_eq(b->calls, 1);
	ck_assert_int_eq(b->error, -ENOTCONN);
	ck_assert_int_eq(b->reason, FREEZE_REASON_UNREACHABLE);
	ck_assert_int_eq(copy_holder->calls, 1);
	assert_idle();
	settle();
	ck_assert_str_eq(trace(), "c1/pause;c1/archive?path=%2F;");
	ck_assert(strstr(loop_logged(), "still frozen"));
}
END_TEST

/* A holder never released when the table goes (its owner leaked it): the
 * table frees it without a second callback; a waiter is told once. */
START_TEST(test_table_freed_with_holder)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *b;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	b = hold();
	wait_calls(a, 1);
	engine = engine_free(engine);
	ck_assert_int_eq(b->calls, 0);
	table = freeze_table_free(table);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(b->calls, 1);
	ck_assert_int_eq(b->error, -ECANCELED);
	settle();
	ck_assert(strstr(loop_logged(), "still frozen"));
}
END_TEST

/* The table freed with a pause in flight and the engine alive: the request
 * is cancelled, the claim told once, nothing else is sent. */
START_TEST(test_table_freed_while_pausing)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSE(.delay_ms = 3000) };
	struct rec *a;

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	run_for(SETTLE_MS);
	table = freeze_table_free(table);
	ck_assert_int_eq(a->calls, 1);
	ck_assert_int_eq(a->error, -ECANCELED);
	settle();
	ck_assert_str_eq(trace(), "c1/pause;");
}
END_TEST

/* ---- the orphan thaw ---------------------------------------------------------------------------- */

static const struct {
	struct fake_reply unpause;
	int error;
	enum freeze_reason reason;
} orphan_rows[] = {
	{ UNPAUSE(), 0, 0 },
	{ NOT_PAUSED_500, 0, 0 },
	{ UNPAUSE_R(404, .body = "{\"message\":\"No such container: c1\"}"), 0, 0 },
	/* The engine's late Paused flag after our own thaw; the runtime knows better. */
	{ UNPAUSE_R(500, .body = "{\"message\":\"Cannot unpause container c1: cannot resume a running "
				 "process: unknown\"}"), 0, 0 },
	{ UNPAUSE_R(500, .body = "{\"message\":\"freezer: device or resource busy\"}"), -EIO,
	  FREEZE_REASON_ENGINE_ERROR },
};

START_TEST(test_thaw_orphan)
{
	struct fake_reply script[] = { PING, VERSION, orphan_rows[_i].unpause };
	struct rec *r = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, r, &r->claim), 0);
	ck_assert(!freeze_is_held(table, C1));      /* not a hold of ours */
	wait_calls(r, 1);
	ck_assert_int_eq(r->error, orphan_rows[_i].error);
	if (r->error) {
		ck_assert_int_eq(r->reason, orphan_rows[_i].reason);
		ck_assert_msg(strstr(r->message, "docker could not thaw c1, which a host left frozen; "
					"refusing to serve a container whose guest cannot run: "), "%s", r->message);
	}
	ck_assert_str_eq(trace(), "c1/unpause;");
	ck_assert_ptr_null(strstr(loop_logged(), "warning"));   /* the caller decides what to say */
	settle();
	assert_idle();
	fake_engine_stop();
}
END_TEST

/* Our own live freeze is never lifted by an orphan thaw: it waits for the
 * hold's unpause, and its own then finds nothing paused. */
START_TEST(test_thaw_orphan_waits_for_our_hold)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSE(), NOT_PAUSED_500 };
	struct rec *a, *o = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, o, &o->claim), 0);
	run_for(SETTLE_MS);
	ck_assert_int_eq(o->calls, 0);
	ck_assert_str_eq(trace(), "c1/pause;");
	release_and_wait(a);
	wait_calls(o, 1);
	ck_assert_int_eq(o->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/unpause;");
	settle();
	assert_idle();
}
END_TEST

START_TEST(test_thaw_orphan_cancelled)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *a, *o = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, o, &o->claim), 0);
	freeze_cancel(o->claim);
	ck_assert_int_eq(o->calls, 1);
	ck_assert_int_eq(o->error, -ECANCELED);
	release_and_wait(a);
	settle();
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;");
	assert_idle();
}
END_TEST

/* ---- the host lock ------------------------------------------------------------------------ */

/* Another maf-sandboxd is a child process with its own open of the lock
 * file. The fake engine runs threads, so the children make raw system
 * calls only (no malloc after fork). */
#define HOST_WAIT_MS 300

static char host_dir[128];
static char host_path[192];
static struct hostlock *host;

static void host_setup(void)
{
	const char *tmp = getenv("TMPDIR");
	char *err = NULL;

	setup();
	snprintf(host_dir, sizeof(host_dir), "%s/host-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(host_dir));
	snprintf(host_path, sizeof(host_path), "%s/freeze.lock", host_dir);
	ck_assert_msg(hostlock_open(host_path, &host, &err) == 0, "%s", err ? err : "");
	freeze_table_set_hostlock(table, host);
}

static void host_teardown(void)
{
	teardown();                    /* the table first: it borrows the host lock */
	host = hostlock_free(host);
	unlink(host_path);
	rmdir(host_dir);
}

/* In a child: 0 once it holds id's byte, 1 if another holds it, 2 on error. */
static int child_lock(uint64_t offset)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)offset, .l_len = 1 };
	int fd = open(host_path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return 2;
	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	return errno == EAGAIN || errno == EACCES ? 1 : 2;
}

/* Can another process take id's host lock now? (It drops it as it exits.)
 * The child's answer comes through a pipe, not its exit status: under
 * valgrind a forked child's exit runs the leak check, and a block only the
 * fake engine's thread pointed to (that thread is not in the child) makes it
 * exit 99 whatever it answered. */
static bool other_can_take(const char *id)
{
	uint64_t offset = hostlock_offset(id);
	int fds[2];
	char answer = 2;
	pid_t pid;
	int status;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char c = (char)child_lock(offset);

		_exit(write(fds[1], &c, 1) == 1 ? 0 : 3);
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &answer, 1), 1);
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_lt(answer, 2);
	return answer == 0;
}

/* Another process takes id's host lock and keeps it until killed. */
static pid_t other_hold(const char *id)
{
	uint64_t offset = hostlock_offset(id);
	int fds[2];
	pid_t pid;
	char c = 0;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (child_lock(offset) != 0 || write(fds[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	close(fds[0]);
	return pid;
}

/* Its death is what frees the lock: no release of its own. */
static void other_kill(pid_t pid)
{
	int status;

	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}

/* Held elsewhere, with the lock free here: a hold and an orphan thaw are
 * refused at once (-EAGAIN, no callback), and the engine is asked nothing. */
START_TEST(test_host_held_elsewhere_refused_at_once)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *r = rec_new(ACT_NONE);
	pid_t other;

	start_reachable(script, ELEMENTSOF(script));
	other = other_hold(C1);
	ck_assert_int_eq(freeze_acquire(table, engine, C1, rec_cb, r, &r->claim), -EAGAIN);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, r, &r->claim), -EAGAIN);
	/* no event base: a budget cannot be waited, it is refused the same way */
	ck_assert_int_eq(freeze_table_thaw_orphan_wait(table, engine, C1, 5000, rec_cb, r, &r->claim), -EAGAIN);
	ck_assert_ptr_null(r->claim);
	run_for(SETTLE_MS);
	ck_assert_int_eq(r->calls, 0);
	ck_assert_str_eq(trace(), "");
	ck_assert_uint_eq(hostlock_held(host), 0);
	assert_idle();
	/* another container is not held */
	r = hold_on("c2", ACT_NONE);
	wait_calls(r, 1);
	ck_assert_int_eq(r->error, -ENOENT);          /* the fake has no c2: it was asked */
	ck_assert_str_eq(trace(), "c2/pause;");
	other_kill(other);
	/* its death freed it: c1 goes */
	r = hold();
	wait_calls(r, 1);
	ck_assert_int_eq(r->error, 0);
	ck_assert(!other_can_take(C1));
	release_and_wait(r);
	ck_assert(other_can_take(C1));
	settle();
	assert_idle();
}
END_TEST

/* An orphan thaw with a budget waits (BLOCKED, nothing asked); spent, it
 * fails HELD_ELSEWHERE, and the hold queued behind it is refused the same
 * way by the host lock (from the loop), again with no request. */
START_TEST(test_host_blocked_thaw_spends_its_budget)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *o = rec_new(ACT_NONE), *b;
	pid_t other;
	long t0;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	other = other_hold(C1);
	t0 = loop_now_ms();
	ck_assert_int_eq(freeze_table_thaw_orphan_wait(table, engine, C1, HOST_WAIT_MS, rec_cb, o, &o->claim), 0);
	ck_assert_int_eq(freeze_claim_get_state(o->claim), FREEZE_CLAIM_BLOCKED);
	ck_assert(!freeze_is_held(table, C1));
	b = hold();
	wait_calls(o, 1);
	/* not early: the budget is spent before it fails (less the timer clock's slack) */
	ck_assert_int_ge(loop_now_ms() - t0, HOST_WAIT_MS - TEST_TIMER_SLACK_MS);
	ck_assert_int_eq(o->error, -EAGAIN);
	ck_assert_int_eq(o->reason, FREEZE_REASON_HELD_ELSEWHERE);
	ck_assert_int_eq(o->status, 0);
	ck_assert_msg(strstr(o->message, "left c1 frozen: another maf-sandboxd on this host holds it frozen"),
		      "%s", o->message);
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, -EAGAIN);
	ck_assert_int_eq(b->reason, FREEZE_REASON_HELD_ELSEWHERE);
	ck_assert_msg(strstr(b->message, "could not freeze c1 for a file call: another maf-sandboxd on this "
				"host holds it frozen"), "%s", b->message);
	ck_assert_str_eq(trace(), "");
	ck_assert_uint_eq(hostlock_held(host), 0);
	settle();
	assert_idle();
	other_kill(other);
}
END_TEST

/* A blocked orphan thaw goes as soon as the other daemon is gone, and gives
 * the lock back when done. */
START_TEST(test_host_blocked_thaw_goes_when_freed)
{
	static const struct fake_reply script[] = { PING, VERSION, UNPAUSES };
	struct rec *o = rec_new(ACT_NONE);
	pid_t other;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	other = other_hold(C1);
	ck_assert_int_eq(freeze_table_thaw_orphan_wait(table, engine, C1, 5000, rec_cb, o, &o->claim), 0);
	run_for(3 * FREEZE_HOST_RETRY_MS);
	ck_assert_int_eq(o->calls, 0);
	ck_assert_str_eq(trace(), "");
	ck_assert_uint_eq(freeze_table_count(table), 1);
	other_kill(other);
	wait_calls(o, 1);
	ck_assert_int_eq(o->error, 0);
	ck_assert_str_eq(trace(), "c1/unpause;");
	ck_assert(other_can_take(C1));
	settle();
	assert_idle();
}
END_TEST

/* A blocked orphan thaw cancelled, cancelled by the engine going, or
 * dropped with the table: told once (-ECANCELED), nothing asked. */
enum blocked_end { BLOCKED_CANCEL, BLOCKED_ENGINE_GOING, BLOCKED_TABLE_FREED, _BLOCKED_END_MAX };

START_TEST(test_host_blocked_thaw_ended)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct rec *o = rec_new(ACT_NONE), *b;
	pid_t other;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	other = other_hold(C1);
	ck_assert_int_eq(freeze_table_thaw_orphan_wait(table, engine, C1, 5000, rec_cb, o, &o->claim), 0);
	b = hold();
	run_for(SETTLE_MS);
	switch ((enum blocked_end)_i) {
	case BLOCKED_CANCEL:
		freeze_cancel(o->claim);
		ck_assert_int_eq(o->calls, 1);
		ck_assert_int_eq(o->reason, FREEZE_REASON_CANCELLED);
		wait_calls(b, 1);                  /* the next goes: refused by the host lock */
		ck_assert_int_eq(b->error, -EAGAIN);
		break;
	case BLOCKED_ENGINE_GOING:
		freeze_table_cancel_retries(table);
		ck_assert_int_eq(o->calls, 1);
		ck_assert_int_eq(o->reason, FREEZE_REASON_CANCELLED);
		ck_assert_int_eq(b->calls, 1);     /* the waiters fail with it */
		ck_assert_int_eq(b->error, -ECANCELED);
		break;
	case BLOCKED_TABLE_FREED:
		engine = engine_free(engine);
		table = freeze_table_free(table);
		ck_assert_int_eq(o->calls, 1);
		ck_assert_int_eq(b->calls, 1);
		ck_assert_int_eq(b->error, -ECANCELED);
		break;
	default:
		ck_abort_msg("unreachable");
	}
	ck_assert_int_eq(o->error, -ECANCELED);
	settle();
	ck_assert_str_eq(trace(), "");
	ck_assert_uint_eq(hostlock_held(host), 0);
	if (table)
		assert_idle();
	other_kill(other);
}
END_TEST

/* Ours from before the pause to after the unpause's answer: another process
 * cannot take it meanwhile, and can as soon as the claim is done. */
START_TEST(test_host_held_through_a_hold)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(.delay_ms = SLOW_MS), UNPAUSE(.delay_ms = SLOW_MS),
	};
	struct rec *a, *t = rec_new(ACT_NONE);

	start_reachable(script, ELEMENTSOF(script));
	ck_assert(other_can_take(C1));
	a = hold();
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_PAUSING);
	ck_assert(!other_can_take(C1));              /* taken before the pause */
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert(!other_can_take(C1));
	ck_assert_int_eq(freeze_release_then(a->claim, rec_cb, t), 0);
	run_for(SETTLE_MS);
	ck_assert_int_eq(t->calls, 0);
	ck_assert(!other_can_take(C1));              /* until the unpause is answered */
	wait_calls(t, 1);
	ck_assert(other_can_take(C1));
	ck_assert_uint_eq(hostlock_held(host), 0);
	settle();
	assert_idle();
}
END_TEST

/* Every other way a claim ends gives the host lock back. */
enum host_end {
	END_PAUSE_REFUSED,        /* 409 already paused: no unpause */
	END_PAUSE_TIMEOUT,        /* no answer: undone, then done */
	END_UNPAUSE_FAILED,       /* "still frozen" */
	END_CANCEL_PAUSING,       /* withdrawn; the landed pause undone */
	END_CANCEL_HELD,
	END_ENGINE_FREED_PAUSING,
	END_ENGINE_FREED_HELD,    /* the release (from the copy's callback) refused -ENOTCONN */
	END_TABLE_FREED_HELD,
	END_ORPHAN_THAWED,
	END_ORPHAN_FAILED,
	_HOST_END_MAX,
};

static void host_end_run(enum host_end end)
{
	const struct engine_options short_opts = { .timeout_ms = 100, .reconnect_min_ms = 20,
						   .reconnect_max_ms = 80 };
	struct rec *a, *t = rec_new(ACT_NONE);

	switch (end) {
	case END_PAUSE_REFUSED:
		a = hold();
		wait_calls(a, 1);
		ck_assert_int_eq(a->error, -EBUSY);
		break;
	case END_PAUSE_TIMEOUT:
		engine_set_options(engine, &short_opts);
		a = hold();
		wait_calls(a, 1);
		ck_assert_int_eq(a->error, -ETIMEDOUT);
		ck_assert(!other_can_take(C1));          /* the undo is still owed */
		engine_set_options(engine, &test_opts);
		/* hang guard: until the undo is answered */
		LOOP_RUN_WHILE(base, hostlock_held(host) > 0, RUN_MAX_MS);
		break;
	case END_UNPAUSE_FAILED:
		a = hold();
		wait_calls(a, 1);
		t = release_and_wait(a);
		ck_assert_int_eq(t->error, -EIO);
		break;
	case END_CANCEL_PAUSING:
		a = hold();
		freeze_cancel(a->claim);
		ck_assert(!other_can_take(C1));
		/* hang guard: until the pause lands and is undone */
		LOOP_RUN_WHILE(base, hostlock_held(host) > 0, RUN_MAX_MS);
		break;
	case END_CANCEL_HELD:
		a = hold();
		wait_calls(a, 1);
		freeze_cancel(a->claim);
		run_for(SETTLE_MS);
		break;
	case END_ENGINE_FREED_PAUSING:
		a = hold();
		run_for(SETTLE_MS);
		engine = engine_free(engine);
		ck_assert_int_eq(a->error, -ECANCELED);
		break;
	case END_ENGINE_FREED_HELD:
		/* released from its copy's callback, as engine_free cancels it */
		copy_holder = a = hold();
		wait_calls(a, 1);
		ck_assert_int_eq(docker_call(engine, "GET", "/containers/c1/archive?path=%2F", NULL, 0,
					     copy_done_cb, t, NULL), 0);
		run_for(SETTLE_MS);
		engine = engine_free(engine);
		ck_assert_int_eq(copy_release, -ENOTCONN);
		break;
	case END_TABLE_FREED_HELD:
		a = hold();
		wait_calls(a, 1);
		engine = engine_free(engine);
		table = freeze_table_free(table);
		break;
	case END_ORPHAN_THAWED:
	case END_ORPHAN_FAILED:
		ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, t, &t->claim), 0);
		ck_assert(!other_can_take(C1));
		wait_calls(t, 1);
		ck_assert_int_eq(t->error, end == END_ORPHAN_THAWED ? 0 : -EIO);
		break;
	default:
		ck_abort_msg("unreachable");
	}
}

START_TEST(test_host_given_back_on_every_end)
{
	static const struct fake_reply scripts[_HOST_END_MAX][3] = {
		[END_PAUSE_REFUSED] = { ALREADY_PAUSED_409 },
		[END_PAUSE_TIMEOUT] = { PAUSE(.delay_ms = NEVER_MS), NOT_PAUSED_500 },
		[END_UNPAUSE_FAILED] = { PAUSE(), UNPAUSE_R(500, .body = "{\"message\":\"freezer: busy\"}") },
		[END_CANCEL_PAUSING] = { PAUSE(.delay_ms = SLOW_MS), UNPAUSE() },
		[END_CANCEL_HELD] = { PAUSE(), UNPAUSE() },
		[END_ENGINE_FREED_PAUSING] = { PAUSE(.delay_ms = 3000) },
		[END_ENGINE_FREED_HELD] = { PAUSE(), { .path = API "/containers/c1/archive", .delay_ms = 3000 } },
		[END_TABLE_FREED_HELD] = { PAUSE(), UNPAUSE() },
		[END_ORPHAN_THAWED] = { UNPAUSE() },
		[END_ORPHAN_FAILED] = { UNPAUSE_R(500, .body = "{\"message\":\"freezer: busy\"}") },
	};
	struct fake_reply script[5] = { PING, VERSION };
	size_t n = 2;

	for (size_t i = 0; i < 3 && scripts[_i][i].path; i++)
		script[n++] = scripts[_i][i];
	start_reachable(script, n);
	ck_assert(other_can_take(C1));
	host_end_run((enum host_end)_i);
	ck_assert_msg(other_can_take(C1), "the host lock was kept after end %d", _i);
	ck_assert_uint_eq(hostlock_held(host), 0);
	settle();
	if (table)
		assert_idle();
	fake_engine_stop();   /* the script lives on this stack */
}
END_TEST

/* ---- exec starts --------------------------------------------------------------------------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	int *woken = arg;

	(void)fd, (void)what;
	(*woken)++;
}

/* A hold at the head of its lock makes execs wait, pausing, held and
 * thawing, until its unpause is answered; an orphan thaw does not. */
START_TEST(test_exec_must_wait)
{
	static const struct fake_reply script[] = {
		PING, VERSION, PAUSE(.delay_ms = SETTLE_MS), UNPAUSE(.delay_ms = SETTLE_MS), UNPAUSES,
	};
	struct rec *a, *t, *o;

	start_reachable(script, ELEMENTSOF(script));
	ck_assert(!freeze_exec_must_wait(table, C1));
	ck_assert(!freeze_exec_must_wait(NULL, C1));
	a = hold();
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_PAUSING);
	ck_assert(freeze_exec_must_wait(table, C1));
	ck_assert(!freeze_exec_must_wait(table, "c2"));
	wait_calls(a, 1);
	ck_assert(freeze_exec_must_wait(table, C1));
	t = rec_new(ACT_NONE);
	ck_assert_int_eq(freeze_release_then(a->claim, rec_cb, t), 0);
	ck_assert(freeze_exec_must_wait(table, C1));   /* thawing */
	wait_calls(t, 1);
	ck_assert(!freeze_exec_must_wait(table, C1));
	o = rec_new(ACT_NONE);
	ck_assert_int_eq(freeze_table_thaw_orphan(table, engine, C1, rec_cb, o, &o->claim), 0);
	ck_assert(!freeze_exec_must_wait(table, C1));
	wait_calls(o, 1);
	settle();
	assert_idle();
}
END_TEST

/* A hold whose turn comes while an exec of ours is starting sends no pause
 * and wakes the exec once; the mark's end lets it go, from the loop. A
 * mark on another container changes nothing. */
START_TEST(test_exec_mark_defers_pause)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct freeze_exec_mark *m = NULL, *other = NULL;
	struct event *wake;
	int woken = 0;
	struct rec *a, *b;

	freeze_table_set_base(table, base);
	wake = evtimer_new(base, wake_cb, &woken);
	ck_assert_ptr_nonnull(wake);
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_exec_starting_begin(table, "c2", NULL, &other), 0);
	b = hold();   /* c1: nothing starts there */
	wait_calls(b, 1);
	ck_assert_int_eq(b->error, 0);
	release_and_wait(b);
	ck_assert_int_eq(freeze_exec_starting_begin(table, C1, wake, &m), 0);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 1);
	ck_assert_uint_eq(freeze_table_locks(table), 2);
	ck_assert(!freeze_exec_must_wait(table, C1));   /* a mark alone blocks no exec */
	a = hold();
	run_for(SETTLE_MS * 2);
	ck_assert_int_eq(a->calls, 0);
	ck_assert_int_eq(freeze_claim_get_state(a->claim), FREEZE_CLAIM_WAITING);
	ck_assert(!freeze_is_held(table, C1));
	ck_assert(freeze_exec_must_wait(table, C1));    /* the deferred hold is the head */
	ck_assert_int_eq(woken, 1);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;");
	freeze_exec_starting_end(m);
	ck_assert_int_eq(a->calls, 0);                 /* never from inside the end */
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/pause;");
	ck_assert_int_eq(woken, 1);
	release_and_wait(a);
	freeze_exec_starting_end(other);
	freeze_exec_starting_end(NULL);
	settle();
	assert_idle();
	event_free(wake);
}
END_TEST

/* Without an event base a hold never waits: it pauses at once. */
START_TEST(test_exec_mark_without_base)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct freeze_exec_mark *m = NULL;
	struct rec *a;

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_exec_starting_begin(table, C1, NULL, &m), 0);
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	release_and_wait(a);
	freeze_exec_starting_end(m);
	settle();
	assert_idle();
}
END_TEST

enum deferred_end { DEFERRED_CANCEL, DEFERRED_ENGINE_GONE, DEFERRED_TABLE_FREED, _DEFERRED_END_MAX };

/* A deferred hold ended each way: told once (-ECANCELED), no pause sent,
 * the waiter behind it told too when the engine goes; the mark still ends
 * cleanly afterwards (or is dropped with the table, with a warning). */
START_TEST(test_exec_mark_deferred_ended)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	enum deferred_end how = (enum deferred_end)_i;
	struct freeze_exec_mark *m = NULL;
	struct rec *a, *b;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_exec_starting_begin(table, C1, NULL, &m), 0);
	a = hold();
	b = hold();
	run_for(SETTLE_MS);
	ck_assert_int_eq(a->calls + b->calls, 0);
	switch (how) {
	case DEFERRED_CANCEL:
		freeze_cancel(a->claim);
		ck_assert_int_eq(a->calls, 1);
		ck_assert_int_eq(a->error, -ECANCELED);
		run_for(SETTLE_MS);
		ck_assert_int_eq(b->calls, 0);         /* now the deferred head */
		ck_assert(freeze_exec_must_wait(table, C1));
		freeze_exec_starting_end(m);
		wait_calls(b, 1);
		ck_assert_int_eq(b->error, 0);
		release_and_wait(b);
		ck_assert_str_eq(trace(), "c1/pause;c1/unpause;");
		break;
	case DEFERRED_ENGINE_GONE:
		freeze_table_cancel_retries(table);
		ck_assert_int_eq(a->calls, 1);
		ck_assert_int_eq(a->error, -ECANCELED);
		ck_assert_int_eq(b->calls, 1);
		ck_assert_int_eq(b->error, -ECANCELED);
		engine = engine_free(engine);
		freeze_exec_starting_end(m);
		ck_assert_str_eq(trace(), "");
		break;
	case DEFERRED_TABLE_FREED:
		engine = engine_free(engine);
		table = freeze_table_free(table);
		ck_assert_int_eq(a->calls, 1);
		ck_assert_int_eq(a->error, -ECANCELED);
		ck_assert_int_eq(b->calls, 1);
		ck_assert(strstr(loop_logged(), "outlives the table"));
		ck_assert_str_eq(trace(), "");
		break;
	case _DEFERRED_END_MAX:
	default:
		ck_abort();
	}
	settle();
	if (table)
		assert_idle();
}
END_TEST

START_TEST(test_exec_mark_bad_arguments)
{
	struct freeze_exec_mark *m = NULL;
	char long_id[FREEZE_ID_MAX + 2];

	memset(long_id, 'a', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	ck_assert_int_eq(freeze_exec_starting_begin(NULL, C1, NULL, &m), -EINVAL);
	ck_assert_int_eq(freeze_exec_starting_begin(table, NULL, NULL, &m), -EINVAL);
	ck_assert_int_eq(freeze_exec_starting_begin(table, "", NULL, &m), -EINVAL);
	ck_assert_int_eq(freeze_exec_starting_begin(table, long_id, NULL, &m), -EINVAL);
	ck_assert_int_eq(freeze_exec_starting_begin(table, C1, NULL, NULL), -EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_uint_eq(freeze_exec_starting_count(table, C1), 0);
	ck_assert_uint_eq(freeze_exec_starting_count(NULL, C1), 0);
	freeze_exec_starting_end(NULL);
	assert_idle();
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------------- */

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static TCase *host_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, host_setup, host_teardown);
	return tc;
}


/* "is not paused" answering the unpause of our own pause after a hold longer
 * than FREEZE_STALE_BUDGET_MS (a long copy) is still the engine's late view:
 * asked again, never taken as thawed at once. */
START_TEST(test_not_paused_after_a_long_hold)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, NOT_PAUSED_500, UNPAUSES };
	struct rec *a, *t;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	a = hold();
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	run_for(FREEZE_STALE_BUDGET_MS + 200);     /* a long copy */
	t = release_and_wait(a);
	ck_assert_int_eq(t->error, 0);
	ck_assert_str_eq(trace(), "c1/pause;c1/unpause;c1/unpause;");
}
END_TEST

/* An exec mark that outlives FREEZE_EXEC_WAIT_MS still keeps the pause back
 * (runc's init caught joining a frozen cgroup would hang the engine): the
 * hold waits, with a warning, until the mark ends. */
START_TEST(test_exec_mark_never_paused_into)
{
	static const struct fake_reply script[] = { PING, VERSION, PAUSES, UNPAUSES };
	struct freeze_exec_mark *m = NULL;
	struct rec *a;

	freeze_table_set_base(table, base);
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(freeze_exec_starting_begin(table, C1, NULL, &m), 0);
	a = hold();
	run_for(FREEZE_EXEC_WAIT_MS + 500);
	ck_assert_int_eq(a->calls, 0);
	ck_assert_str_eq(trace(), "");
	ck_assert_msg(strstr(loop_logged(), "the freeze waits"), "%s", loop_logged());
	freeze_exec_starting_end(m);
	wait_calls(a, 1);
	ck_assert_int_eq(a->error, 0);
	release_and_wait(a);
	settle();
	assert_idle();
}
END_TEST
static Suite *freeze_suite(void)
{
	Suite *s = suite_create("freeze");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("long_holds");
	tcase_add_test(tc, test_not_paused_after_a_long_hold);
	tcase_add_test(tc, test_exec_mark_never_paused_into);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("stale_state");
	tcase_add_test(tc, test_stale_already_paused_is_asked_again);
	tcase_add_test(tc, test_already_paused_without_our_thaw_is_refused_at_once);
	tcase_add_test(tc, test_unable_to_freeze_is_asked_again);
	tcase_add_test(tc, test_stale_not_paused_is_asked_again);
	tcase_add_test(tc, test_stale_budget_then_refused);
	tcase_add_test(tc, test_stale_retry_cancelled);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("order");
	tcase_add_test(tc, test_one_hold);
	tcase_add_test(tc, test_fifo_three_waiters);
	tcase_add_test(tc, test_never_paused_twice);
	tcase_add_test(tc, test_containers_independent);
	tcase_add_test(tc, test_held_and_generation);
	tcase_add_test(tc, test_release_in_granted_cb);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("refusals");
	tcase_add_test(tc, test_not_reachable_refused);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_claim_cap);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("pause_failures");
	tcase_add_loop_test(tc, test_pause_refused, 0, (int)ELEMENTSOF(pause_refusal_rows));
	tcase_add_test(tc, test_pause_timeout_undone);
	tcase_add_test(tc, test_pause_unreachable);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("thaw_results");
	tcase_add_loop_test(tc, test_unpause_result, 0, (int)ELEMENTSOF(unpause_rows));
	suite_add_tcase(s, tc);

	tc = fixture_tcase("cancel");
	tcase_add_test(tc, test_cancel_waiter);
	tcase_add_test(tc, test_cancel_holder);
	tcase_add_test(tc, test_cancel_while_pausing);
	tcase_add_test(tc, test_cancel_while_thawing);
	tcase_add_test(tc, test_cancel_in_own_failure_cb);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("engine_freed");
	tcase_add_test(tc, test_engine_freed_while_pausing);
	tcase_add_test(tc, test_engine_freed_while_thawing);
	tcase_add_test(tc, test_engine_freed_mid_hold);
	tcase_add_test(tc, test_table_freed_with_holder);
	tcase_add_test(tc, test_table_freed_while_pausing);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("orphan_thaw");
	tcase_add_loop_test(tc, test_thaw_orphan, 0, (int)ELEMENTSOF(orphan_rows));
	tcase_add_test(tc, test_thaw_orphan_waits_for_our_hold);
	tcase_add_test(tc, test_thaw_orphan_cancelled);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("exec_starts");
	tcase_add_test(tc, test_exec_must_wait);
	tcase_add_test(tc, test_exec_mark_defers_pause);
	tcase_add_test(tc, test_exec_mark_without_base);
	tcase_add_loop_test(tc, test_exec_mark_deferred_ended, 0, _DEFERRED_END_MAX);
	tcase_add_test(tc, test_exec_mark_bad_arguments);
	suite_add_tcase(s, tc);

	tc = host_tcase("host_lock");
	tcase_add_test(tc, test_host_held_elsewhere_refused_at_once);
	tcase_add_test(tc, test_host_blocked_thaw_spends_its_budget);
	tcase_add_test(tc, test_host_blocked_thaw_goes_when_freed);
	tcase_add_loop_test(tc, test_host_blocked_thaw_ended, 0, _BLOCKED_END_MAX);
	tcase_add_test(tc, test_host_held_through_a_hold);
	tcase_add_loop_test(tc, test_host_given_back_on_every_end, 0, _HOST_END_MAX);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(freeze_suite());
	int failed;

	fake_run_dir_create("check-freeze");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
