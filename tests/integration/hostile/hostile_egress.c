/* hostile_egress.c — finding 3: a guest's egress flood and the event loop.
 *
 * An allowlisted sandbox whose guest makes EGRESS_FLOOD_ATTEMPTS CONNECTs,
 * from EGRESS_FLOOD_LOOPS loops at once, to a host its proxy refuses
 * (denied.invalid:1, allowed is only allowed.invalid:443): the proxy answers
 * 403 DENY before it resolves or dials anything, so no packet leaves the
 * sandbox's own internal network. Two daemons follow the proxy: A, which
 * made the sandbox, and B, started on the same engine with its own cursors.
 *
 * While the flood runs, daemon.status of both is asked again and again on
 * fresh connections, each answer awaited at most STATUS_GUARD_MS (a hang
 * guard, not a timing assertion): the test holds only when answers came
 * while the daemons' egress.decisions_seen was still rising (the flood
 * observed running and the daemon answering at once). Afterwards, each
 * daemon's subscriber's events add up — the sum of their `count`s — to
 * exactly the proxy's own count of its decisions (its log, read through the
 * engine again until docker has collected all of it), fewer events than decisions (coalesced), and A's counters agree
 * (decisions_published = decisions_seen - decisions_held); both daemons
 * exit 0 (a sanitizer report at shutdown fails). */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"

#define EGRESS_FLOOD_ATTEMPTS 12000        /* in all, split between the loops */
#define EGRESS_FLOOD_LOOPS 4
#define EGRESS_FLOOD_EXEC_S 150            /* hang guard: the guest's own deadline for the flood */
#define ENGINE_WAIT_MS 15000               /* hang guard: the engine reachable */
#define PROXY_READY_MS 120000              /* hang guard: the proxy image ready */
#define STATUS_GUARD_MS 15000              /* hang guard for one daemon.status (ASan, a loaded CI host) */
#define STATUS_GAP_MS 100
/* Answers to collect while the flood is seen rising, per daemon. */
#define STATUS_WHILE_RISING 5
#define SETTLE_MS 120000                   /* hang guard: after the flood, the counts meet */
#define POLL_MS 200
#define SETTLE_READ_MS 2000                /* between two reads of the proxy's count (a pace, no bound) */
#define SUB_BUF_MAX (1024 * 1024)

#define DENIED_TARGET "denied.invalid:1"

/* ---- small helpers ---------------------------------------------------------- */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The slowest answer seen (reported, never asserted: the guard is the bound). */
static long status_slowest_ms;

/* daemon.status on a fresh connection, answered within STATUS_GUARD_MS or
 * the test fails (new reference: the result). */
static json_t *status_guarded(const struct msbd_proc *d)
{
	int fd = raw_connect(d->sock);
	long t0 = now_ms();
	json_t *rep, *res;

	ck_assert_int_ge(fd, 0);
	raw_request_send(fd, 1, "daemon.status", json_object());
	rep = raw_recv(fd, STATUS_GUARD_MS);
	close(fd);
	if (now_ms() - t0 > status_slowest_ms)
		status_slowest_ms = now_ms() - t0;
	if (!rep)
		msbd_dump_log(d);
	ck_assert_msg(rep, "daemon.status of %s was not answered within %d ms (asked %ld ms ago)", d->sock,
		      STATUS_GUARD_MS, now_ms() - t0);
	res = json_incref(jget(rep, "result"));
	ck_assert_msg(json_is_object(res), "daemon.status failed");
	json_decref(rep);
	return res;
}

static json_int_t status_seen(const struct msbd_proc *d)
{
	json_t *st = status_guarded(d);
	json_int_t n = jint(st, "egress.decisions_seen");

	json_decref(st);
	return n;
}

/* ---- a subscriber that reads in bulk --------------------------------------- */

struct flood_sub {
	int fd;
	char *buf;
	size_t len;
	long long events, decisions;    /* events received, sum of their counts */
	long long bad;                  /* events not of the flood's shape */
};

static void sub_open(struct flood_sub *s, const struct msbd_proc *d, const char *scope)
{
	json_t *rep;

	memset(s, 0, sizeof(*s));
	s->buf = malloc(SUB_BUF_MAX);
	ck_assert_ptr_nonnull(s->buf);
	s->fd = raw_connect(d->sock);
	ck_assert_int_ge(s->fd, 0);
	raw_request_send(s->fd, 1, "events.subscribe",
			 json_pack("{s:[s], s:s}", "types", "egress.decision", "scope", scope));
	rep = raw_recv(s->fd, 30000);
	ck_assert_msg(rep && json_is_object(jget(rep, "result")), "events.subscribe failed");
	json_decref(rep);
}

static void sub_event(struct flood_sub *s, const char *line, size_t len)
{
	json_t *n = json_loadb(line, len, 0, NULL);
	json_t *count;

	ck_assert_msg(n, "an event that is not JSON: %.*s", (int)(len > 200 ? 200 : len), line);
	s->events++;
	count = jget(n, "params.count");
	if (!jstr(n, "params.decision") || strcmp(jstr(n, "params.decision"), "DENY") ||
	    !jstr(n, "params.host") || strcmp(jstr(n, "params.host"), "denied.invalid") ||
	    jint(n, "params.port") != 1)
		s->bad++;
	ck_assert_msg(json_is_integer(count) && json_integer_value(count) >= 1,
		      "an event's count is not a positive integer: %.*s", (int)len, line);
	ck_assert_msg(json_integer_value(count) == 1 || jstr(n, "params.first_time"),
		      "an event of count > 1 has no first_time: %.*s", (int)len, line);
	s->decisions += json_integer_value(count);
	json_decref(n);
}

/* Reads what is there (waiting at most wait_ms for the first byte). */
static void sub_pump(struct flood_sub *s, int wait_ms)
{
	for (;;) {
		struct pollfd pfd = { .fd = s->fd, .events = POLLIN };
		ssize_t n;
		char *nl;
		size_t off = 0;

		if (poll(&pfd, 1, wait_ms) <= 0)
			return;
		wait_ms = 0;
		n = read(s->fd, s->buf + s->len, SUB_BUF_MAX - s->len);
		ck_assert_msg(n > 0, "the subscriber's connection closed (dropped for its backlog?)");
		s->len += (size_t)n;
		while ((nl = memchr(s->buf + off, '\n', s->len - off))) {
			sub_event(s, s->buf + off, (size_t)(nl - (s->buf + off)));
			off = (size_t)(nl - s->buf) + 1;
		}
		memmove(s->buf, s->buf + off, s->len - off);
		s->len -= off;
		ck_assert_msg(s->len < SUB_BUF_MAX, "an event line over %d bytes", SUB_BUF_MAX);
	}
}

static void sub_close(struct flood_sub *s)
{
	close(s->fd);
	free(s->buf);
	s->fd = -1;
	s->buf = NULL;
}

/* ---- the daemons -------------------------------------------------------------- */

static void daemon_up(struct msbd_proc *d, const char *state_dir)
{
	char bin[300], state[200];
	const char *proxy = getenv("MSB_PROXY");
	const char *args[] = { "--set", bin, "--set", state, NULL };
	long deadline;
	json_t *st;

	snprintf(bin, sizeof(bin), "egress.proxy_binary=%s", proxy);
	snprintf(state, sizeof(state), "egress.state_dir=%s", state_dir);
	msbd_start(d, args);
	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
	deadline = now_ms() + PROXY_READY_MS;
	for (;;) {
		st = call(d->sock, "daemon.describe", NULL, NULL, NULL);
		if (json_is_true(jget(st, "observes_egress")))
			break;
		json_decref(st);
		if (now_ms() > deadline) {
			msbd_dump_log(d);
			ck_abort_msg("the proxy image was never ready");
		}
		sleep_ms(POLL_MS);
	}
	json_decref(st);
}

static void state_dir_make(char out[160], const char *tag)
{
	const char *base = getenv("MSB_IT_RUN_DIR");

	snprintf(out, 160, "%s/egress-%s-XXXXXX", base && *base ? base : "/tmp", tag);
	ck_assert_ptr_nonnull(mkdtemp(out));
}

/* The proxy's own count of its flood decisions: lines of its log. */
static long long proxy_count(const char *proxy)
{
	char *out = sh_out("docker logs '%s' 2>/dev/null | grep -c '^DENY " DENIED_TARGET "$'", proxy);
	long long n = atoll(out);

	free(out);
	return n;
}

/* Reads both subscribers for ms. */
static void subs_pump_for(struct flood_sub *a, struct flood_sub *b, long ms)
{
	long end = now_ms() + ms;

	do {
		sub_pump(a, POLL_MS);
		sub_pump(b, POLL_MS);
	} while (now_ms() < end);
}

/* The proxy's count once docker has collected all of its log (it does so
 * asynchronously: a read right after the flood may be short), while the
 * subscribers read on: read again until it equals both subscribers'
 * counts, or SETTLE_MS has passed (hang guard). No "nothing moved for a
 * while" exit: a log docker collects late is waited for, not taken for
 * the end. The caller asserts they are equal. */
static long long proxy_count_settled(const char *proxy, struct flood_sub *a, struct flood_sub *b)
{
	long deadline = now_ms() + SETTLE_MS;   /* hang guard */
	long long n = proxy_count(proxy), again;

	for (;;) {
		subs_pump_for(a, b, SETTLE_READ_MS);
		again = proxy_count(proxy);
		if (again == n && a->decisions == n && b->decisions == n)
			break;
		n = again;
		if (now_ms() > deadline)
			break;
	}
	return again;
}

#define XSTR(x) STR(x)
#define STR(x) #x
/* The guest: EGRESS_FLOOD_LOOPS loops of CONNECTs through the proxy its
 * HTTPS_PROXY names; prints flood-done at the end. $1: attempts per loop. */
#define FLOOD_SCRIPT                                                                          \
	"p=${HTTPS_PROXY#http://}; p=${p%/}; h=${p%:*}; o=${p##*:}; "                        \
	"for j in $(seq " XSTR(EGRESS_FLOOD_LOOPS) "); do ( i=0; while [ $i -lt $1 ]; do "   \
	"printf 'CONNECT " DENIED_TARGET " HTTP/1.1\\r\\n\\r\\n' | nc $h $o >/dev/null 2>&1; " \
	"i=$((i+1)); done ) & done; wait; echo flood-done"

START_TEST(egress_flood_keeps_loop_responsive)
{
	struct msbd_proc a = { 0 }, b = { 0 };
	char state_a[160], state_b[160], scope[96], per_loop[16];
	const char *proxy_bin = getenv("MSB_PROXY");
	json_t *acq, *key, *spec, *rep, *st;
	struct flood_sub sub_a, sub_b;
	char *out;
	char proxy[96], sandbox[96];
	int exec_fd, rising_a = 0, rising_b = 0;
	json_int_t last_a = -1, last_b = -1, seen0;
	long long want, deadline;
	bool flood_done = false;

	/* tests/meson.build sets MSB_PROXY whenever the proxy is built, which it
	 * always is in CI: without it finding 3 would pass untested */
	ck_assert_msg(proxy_bin && *proxy_bin && access(proxy_bin, X_OK) == 0,
		      "MSB_PROXY (%s) is not an executable egress proxy, so the flood cannot be tested: build "
		      "egress-proxy (it needs the static libevent .a files) and run the suite with meson test",
		      proxy_bin ? proxy_bin : "unset");
	snprintf(scope, sizeof(scope), "%s-egress-flood", hostile_run_id);
	state_dir_make(state_a, "a");
	state_dir_make(state_b, "b");
	daemon_up(&a, state_a);

	key = json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "a");
	spec = hostile_spec();
	json_object_set_new(spec, "egress", json_string("allowlist"));
	json_object_set_new(spec, "egress_allow", json_pack("[s]", "allowed.invalid"));
	acq = call(a.sock, "sandbox.acquire", json_pack("{s:O, s:o}", "key", key, "spec", spec), NULL, NULL);
	if (!acq)
		msbd_dump_log(&a);
	ck_assert_msg(acq && jstr(acq, "egress.proxy"), "the allowlisted acquire failed");
	snprintf(proxy, sizeof(proxy), "%s", jstr(acq, "egress.proxy"));
	snprintf(sandbox, sizeof(sandbox), "%s", jstr(acq, "sandbox"));
	json_decref(acq);

	/* B follows the same proxy from its own start (it lists the running proxies). */
	daemon_up(&b, state_b);
	sub_open(&sub_a, &a, scope);
	sub_open(&sub_b, &b, scope);
	seen0 = status_seen(&a);

	/* The flood, through A, on a connection of its own: its reply comes at its end. */
	snprintf(per_loop, sizeof(per_loop), "%d", EGRESS_FLOOD_ATTEMPTS / EGRESS_FLOOD_LOOPS);
	exec_fd = raw_connect(a.sock);
	ck_assert_int_ge(exec_fd, 0);
	raw_request_send(exec_fd, 7, "sandbox.exec",
			 json_pack("{s:s, s:[s, s, s, s, s], s:i, s:b}", "sandbox", sandbox, "command", "sh", "-c",
				   FLOOD_SCRIPT, "sh", per_loop, "timeout_seconds", EGRESS_FLOOD_EXEC_S, "text", 1));

	/* While it runs: both daemons answer, and their counts keep rising. */
	deadline = now_ms() + (EGRESS_FLOOD_EXEC_S + 10) * 1000L;   /* hang guard: the guest's own deadline */
	while (!flood_done && now_ms() < deadline) {
		json_int_t seen_a = status_seen(&a), seen_b = status_seen(&b);

		if (last_a >= 0 && seen_a > last_a)
			rising_a++;
		if (last_b >= 0 && seen_b > last_b)
			rising_b++;
		last_a = seen_a;
		last_b = seen_b;
		sub_pump(&sub_a, 0);
		sub_pump(&sub_b, 0);
		if ((rep = raw_recv(exec_fd, STATUS_GAP_MS)) == NULL)
			continue;
		out = harness_b64_field(json_object_get(rep, "result"), "stdout_b64");
		ck_assert_msg(out && strstr(out, "flood-done"), "the flood did not finish: %s",
			      json_dumps(rep, JSON_COMPACT));
		free(out);
		json_decref(rep);
		flood_done = true;
	}
	close(exec_fd);
	ck_assert_msg(flood_done, "the flood did not end within %d s", EGRESS_FLOOD_EXEC_S + 10);
	fprintf(stderr, "hostile egress: status answered %d (A) and %d (B) times while the count rose; "
		"slowest answer %ld ms\n", rising_a, rising_b, status_slowest_ms);
	ck_assert_msg(rising_a >= STATUS_WHILE_RISING && rising_b >= STATUS_WHILE_RISING,
		      "daemon.status answered only %d (A) / %d (B) times while decisions rose (want %d each)",
		      rising_a, rising_b, STATUS_WHILE_RISING);

	/* Afterwards: every decision the proxy made is accounted for, exactly. */
	want = proxy_count_settled(proxy, &sub_a, &sub_b);
	ck_assert_msg(want >= EGRESS_FLOOD_ATTEMPTS / 2, "the proxy made only %lld decisions", want);
	sub_pump(&sub_a, 500);
	sub_pump(&sub_b, 500);
	fprintf(stderr, "hostile egress: proxy %lld decisions; A %lld events for %lld, B %lld events for %lld\n",
		want, sub_a.events, sub_a.decisions, sub_b.events, sub_b.decisions);
	ck_assert_int_eq(sub_a.bad, 0);
	ck_assert_int_eq(sub_b.bad, 0);
	ck_assert_int_eq(sub_a.decisions, want);
	ck_assert_int_eq(sub_b.decisions, want);
	ck_assert_msg(sub_a.events < want && sub_b.events < want,
		      "nothing was coalesced: %lld (A) and %lld (B) events for %lld decisions", sub_a.events,
		      sub_b.events, want);
	/* Other runs' proxies on this engine may add to A's counters; ours are in them. */
	st = status_guarded(&a);
	ck_assert_int_ge(jint(st, "egress.decisions_seen") - seen0, want);
	ck_assert_int_eq(jint(st, "egress.decisions_published"),
			 jint(st, "egress.decisions_seen") - jint(st, "egress.decisions_held"));
	ck_assert_int_le(jint(st, "egress.decisions_coalesced"), jint(st, "egress.decisions_published"));
	ck_assert_int_lt(jint(st, "egress.events_published"), jint(st, "egress.decisions_published"));
	json_decref(st);

	sub_close(&sub_a);
	sub_close(&sub_b);
	{
		int code = -1;

		rep = call(a.sock, "sandbox.dispose", json_pack("{s:o}", "key", key), &code, NULL);
		ck_assert_msg(code == 0 && (!rep || json_is_null(rep)), "the dispose failed (%d)", code);
		json_decref(rep);
	}
	ck_assert_int_eq(msbd_stop(&b), 0);
	ck_assert_int_eq(msbd_stop(&a), 0);
}
END_TEST

TCase *hostile_egress_tcase(void)
{
	TCase *tc = tcase_create("egress");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, egress_flood_keeps_loop_responsive);
	return tc;
}
