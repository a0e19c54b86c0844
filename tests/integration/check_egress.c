/* check_egress.c — the egress allowlist through a real maf-sandboxd against
 * the real engine (behaviour-docker §2.9, §4; issue 6): the topology an
 * allowlisted acquire builds and its teardown (dispose, dispose_scope, reap:
 * proxy, workload, network), the proxy's answer to every kind of request,
 * what the sandbox cannot reach (the upstream directly, the host, another
 * sandbox, any resolver), egress.decision events exactly once and in order —
 * live, replayed, and across a SIGKILLed daemon — the refusal of an engine
 * that ignores an isolated gateway, malformed entries, describe, and the
 * CLI's events verb.
 *
 * The world the proxy reaches is made by main(), never the internet: an
 * outbound bridge network with a subnet picked here (10.214.R.0/24), an
 * upstream container on it answering as allowed.test and denied.test (plain
 * TCP on 443 and 80: a banner, then an echo), a second one as private.test in
 * the half of the subnet outside egress.private_allow, and a container whose
 * network namespace holds a UDP listener the test watches (the "resolver").
 * Nothing here sends a packet off this machine: every name the proxy is asked
 * to resolve is a network alias the engine answers itself.
 *
 * Cleanup does not depend on the tests: the sandboxes, proxies and networks
 * carry the spec label msb-it-run=<run>, the fixtures msb-it-egress-fixture=
 * <run>, and main() removes both (containers first) and the test image. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"

#define ENGINE_WAIT_MS 15000   /* hang guard: the engine reachable, the registry read */
#define RUN_LABEL "msb-it-run"
#define RUN_LABEL_KEY "maf-sandbox.label." RUN_LABEL
#define FIXTURE_LABEL "msb-it-egress-fixture"
#define TEST_TIMEOUT_S 240   /* hang guard */
/* hang guard: the proxy image is built from the binary when the daemon starts. */
#define PROXY_READY_MS 120000   /* hang guard */
#define POLL_MS 200
#define CLIENT_TIMEOUT_MS 120000   /* hang guard: one reply */
#define EXEC_TIMEOUT_S 60          /* hang guard: one guest command */
/* hang guard: a decision reaching a subscriber, an engine event seen. No
 * silence is ever taken to mean "no more come": what was published is
 * checked in the daemon's kept events (a replay), see expect_no_more(). */
#define EVENT_WAIT_MS 30000
/* Exit status meson reads as "skipped". */
#define EXIT_SKIP 77

/* The outbound network: 10.214.R.0/24, R picked from the pid (retried on
 * overlap); fixed addresses in the lower /25 (the proxy's private_allow),
 * private.test in the upper one, the engine's own picks in .64/26. */
#define OUT_NET_FMT "10.214.%d"
#define OUT_TRIES 16
#define HOST_UPSTREAM 10
#define HOST_RESOLVER 53
#define HOST_PRIVATE 200
#define PROXY_PORT 3128
/* The /28 the daemon cuts for each sandbox: .1 gateway (on no interface),
 * .2 the proxy, the workload in the upper /29. */
#define BLOCK_SIZE 16
#define BLOCK_PROXY 2
#define BLOCK_WORKLOAD_MIN 8
#define POOL_PREFIX "10.213."
/* The proxy container's limits (PROTOCOL.md). */
#define PROXY_PIDS 64
#define PROXY_MEMORY (128 * 1024 * 1024)
/* A listener the peer sandbox opens for the isolation probe. */
#define PEER_PORT 9000
#define MAX_HOST_ADDRS 12
#define MAX_WATCHERS 4
/* Held (flock) from the watchers' opening to their closing, so two egress
 * runs on one host never share the host's :53 between them. */
#define DNS_WATCH_LOCK "/run/msb-test-dns.lock"
/* hang guard: another egress run holding DNS_WATCH_LOCK through its isolation test */
#define DNS_WATCH_LOCK_MS 600000
#define PROBE_LINE_MAX 512

#define ERR_EGRESS_NOT_ENFORCED 1101
#define ERR_INVALID_PARAMS (-32602)

static char run_id[32];
static char image[64];
static const char *proxy_binary;

/* What main() built for the proxy to reach. */
static struct {
	char net[64];
	char prefix[16];         /* "10.214.R" */
	char gateway[20];
	char private_allow[24];
	char upstream[64], private_srv[64], resolver[64];
	char upstream_ip[20], private_ip[20], resolver_ip[20];
} fx;

/* ---- shell snippets run in the sandbox ---------------------------------- */

/* $1: a request head (printf escapes), $2: bytes sent once it is answered.
 * Talks to the proxy the workload's HTTPS_PROXY names, so the environment is
 * what is tested. No single quote inside: it is also run through `docker exec`. */
#define PROBE_SCRIPT                                                                    \
	"p=${HTTPS_PROXY#http://}; p=${p%/}; "                                          \
	"(printf \"$1\"; sleep 1; printf \"$2\"; sleep 1) | timeout 50 nc ${p%:*} ${p##*:}"   /* hang guard */
#define CONNECT_HEAD(target) "CONNECT " target " HTTP/1.1\\r\\nHost: " target "\\r\\n\\r\\n"

/* ---- helpers ------------------------------------------------------------ */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A file's content (malloc'd; empty if absent). */
static char *file_text(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t cap = 4096, len = 0, n;
	char *buf = calloc(1, cap);

	ck_assert_ptr_nonnull(buf);
	if (!f)
		return buf;
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (cap - len < 2) {
			buf = realloc(buf, cap *= 2);
			ck_assert_ptr_nonnull(buf);
		}
	}
	buf[len] = '\0';
	fclose(f);
	return buf;
}

/* Complete lines (LF-terminated). */
static size_t count_lines(const char *text)
{
	size_t n = 0;

	for (; *text; text++)
		n += *text == '\n';
	return n;
}

/* A unique scope per test. */
static void scope_of(const char *test, char out[96])
{
	snprintf(out, 96, "%s-%s", run_id, test);
}

/* One call on its own connection, with the error's message kept. */
struct reply {
	json_t *result;
	int code;
	char type[64];
	char *message;
};

static void reply_clear(struct reply *rep)
{
	json_decref(rep->result);
	free(rep->message);
	memset(rep, 0, sizeof(*rep));
}

/* params stolen. */
static void rpc(const char *sock, const char *method, json_t *params, struct reply *rep)
{
	struct msb_conn *c = NULL;
	int r;

	memset(rep, 0, sizeof(*rep));
	r = msb_connect(sock, &c);
	ck_assert_msg(r == MSB_OK, "connect %s: %s", sock, msb_strerror(r));
	msb_set_timeout(c, CLIENT_TIMEOUT_MS);
	r = msb_call(c, method, params, &rep->result);
	if (r == MSB_E_REMOTE) {
		rep->code = msb_last_error_code(c);
		snprintf(rep->type, sizeof(rep->type), "%s", msb_last_error_type(c) ? msb_last_error_type(c) : "");
		rep->message = strdup(msb_last_error_message(c) ? msb_last_error_message(c) : "");
	} else if (r != MSB_OK) {
		rep->code = r;
		rep->message = strdup(msb_strerror(r));
	}
	msb_conn_free(c);
}

static void state_dir_make(char out[128])
{
	const char *base = getenv("MSB_IT_RUN_DIR");

	snprintf(out, 128, "%s/egress-state-XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(out));
}

static void wait_registry(const char *sock)
{
	for (long end = now_ms() + ENGINE_WAIT_MS; now_ms() < end;) {   /* hang guard */
		json_t *r = call(sock, "sandbox.list", NULL, NULL, NULL);

		if (r) {
			json_decref(r);
			return;
		}
		usleep(50 * 1000);
	}
	ck_abort_msg("the registry never synchronised");
}

static bool describe_observes(const char *sock, bool *ret_allowlist)
{
	json_t *r = call(sock, "daemon.describe", NULL, NULL, NULL);
	json_t *modes = jget(r, "egress_modes"), *m;
	bool observes = json_is_true(jget(r, "observes_egress"));
	size_t i;

	ck_assert_msg(json_is_array(modes), "describe has no egress_modes");
	*ret_allowlist = false;
	json_array_foreach(modes, i, m)
		if (json_is_string(m) && !strcmp(json_string_value(m), "allowlist"))
			*ret_allowlist = true;
	json_decref(r);
	return observes;
}

static void wait_proxy_ready(const struct msbd_proc *d)
{
	long deadline = now_ms() + PROXY_READY_MS;   /* hang guard */
	bool allowlist;

	while (!describe_observes(d->sock, &allowlist) || !allowlist) {
		if (now_ms() > deadline) {
			msbd_dump_log(d);
			ck_abort_msg("describe never declared allowlist and observes_egress within %d ms",
				     PROXY_READY_MS);
		}
		usleep(POLL_MS * 1000);
	}
}

/* Starts a daemon configured for this fixture. state_dir: its event
 * cursors. extra: more args (NULL-terminated, may be NULL). Returns once the
 * socket accepts; daemon_ready() waits for the rest. */
static void daemon_start(struct msbd_proc *d, const char *state_dir, const char *const *extra)
{
	char bin[300], out[128], allow[96], state[160];
	const char *args[32] = { "--set", bin, "--set", out, "--set", allow, "--set", state };
	size_t n = 8;

	snprintf(bin, sizeof(bin), "egress.proxy_binary=%s", proxy_binary);
	snprintf(out, sizeof(out), "egress.outbound_network=%s", fx.net);
	snprintf(allow, sizeof(allow), "egress.private_allow=%s", fx.private_allow);
	snprintf(state, sizeof(state), "egress.state_dir=%s", state_dir);
	for (; extra && *extra && n < 31; extra++)
		args[n++] = *extra;
	args[n] = NULL;
	msbd_start(d, args);
}

static void daemon_ready(struct msbd_proc *d, bool with_proxy)
{
	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
	wait_registry(d->sock);
	if (with_proxy)
		wait_proxy_ready(d);
}

static void daemon_up(struct msbd_proc *d, char state_dir[128])
{
	state_dir_make(state_dir);
	daemon_start(d, state_dir, NULL);
	daemon_ready(d, true);
}

/* An allowlisted sandbox as acquire returned it. */
struct sbx {
	char id[80], name[64];
	char net[80], proxy[80], proxy_address[20], proxy_url[64];
	char scope[96], thread[32], agent[32];
};

static const char *const default_allow[] = { "allowed.test", "private.test", "allowed.test:444", NULL };

static json_t *allow_spec(const char *const *allow)
{
	json_t *list = json_array();

	for (; *allow; allow++)
		json_array_append_new(list, json_string(*allow));
	return json_pack("{s:s, s:s, s:{s:s}, s:s, s:o}", "kind", "k", "image", image, "labels", RUN_LABEL,
			 run_id, "egress", "allowlist", "egress_allow", list);
}

static json_t *key_of(const struct sbx *sb)
{
	return json_pack("{s:s, s:s, s:s}", "scope", sb->scope, "thread_id", sb->thread, "agent_dir", sb->agent);
}

static void acquire_allow_rep(const char *sock, struct sbx *sb, const char *const *allow, struct reply *rep)
{
	rpc(sock, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_of(sb), "spec", allow_spec(allow)), rep);
}

static void copy_str(char *dst, size_t cap, json_t *root, const char *path)
{
	const char *v = jstr(root, path);

	ck_assert_msg(v, "the acquire result has no string %s", path);
	snprintf(dst, cap, "%s", v);
}

/* Acquires {scope, thread, agent} allowlisted into sb. */
static void acquire_allow(const struct msbd_proc *d, const char *scope, const char *thread, const char *agent,
			  const char *const *allow, struct sbx *sb)
{
	struct reply rep;

	memset(sb, 0, sizeof(*sb));
	snprintf(sb->scope, sizeof(sb->scope), "%s", scope);
	snprintf(sb->thread, sizeof(sb->thread), "%s", thread);
	snprintf(sb->agent, sizeof(sb->agent), "%s", agent);
	acquire_allow_rep(d->sock, sb, allow ? allow : default_allow, &rep);
	if (!rep.result)
		msbd_dump_log(d);
	ck_assert_msg(rep.result, "allowlisted acquire failed: %d %s %s", rep.code, rep.type, rep.message);
	copy_str(sb->id, sizeof(sb->id), rep.result, "sandbox");
	copy_str(sb->name, sizeof(sb->name), rep.result, "name");
	copy_str(sb->net, sizeof(sb->net), rep.result, "egress.network");
	copy_str(sb->proxy, sizeof(sb->proxy), rep.result, "egress.proxy");
	copy_str(sb->proxy_address, sizeof(sb->proxy_address), rep.result, "egress.proxy_address");
	copy_str(sb->proxy_url, sizeof(sb->proxy_url), rep.result, "egress.proxy_url");
	reply_clear(&rep);
}

static void dispose(const struct msbd_proc *d, const struct sbx *sb)
{
	struct reply rep;

	rpc(d->sock, "sandbox.dispose", json_pack("{s:o}", "key", key_of(sb)), &rep);
	ck_assert_msg(rep.code == 0, "dispose failed: %d %s", rep.code, rep.message);
	ck_assert_msg(!rep.result || json_is_null(rep.result), "dispose reported a failure: %s",
		      jstr(rep.result, "detail") ? jstr(rep.result, "detail") : "?");
	reply_clear(&rep);
}

static bool container_exists(const char *name)
{
	char *out = sh_out("docker inspect -f '{{.Id}}' '%s' >/dev/null 2>&1 && echo yes", name);
	bool yes = !strcmp(out, "yes");

	free(out);
	return yes;
}

static bool network_exists(const char *name)
{
	char *out = sh_out("docker network inspect -f '{{.Id}}' '%s' >/dev/null 2>&1 && echo yes", name);
	bool yes = !strcmp(out, "yes");

	free(out);
	return yes;
}

/* Neither the workload name, nor its proxy, nor its network is left. */
static void assert_gone(const char *name)
{
	char proxy[96], net[96];

	snprintf(proxy, sizeof(proxy), "%s-proxy", name);
	snprintf(net, sizeof(net), "%s-net", name);
	ck_assert_msg(!container_exists(name), "the workload %s is still there", name);
	ck_assert_msg(!container_exists(proxy), "the proxy %s is still there", proxy);
	ck_assert_msg(!network_exists(net), "the network %s is still there", net);
}

/* Runs argv (stolen) in the sandbox through the daemon; returns stdout (malloc'd). */
static char *sb_exec(const char *sock, const char *id, json_t *argv, int *ret_exit)
{
	struct reply rep;
	char *out;

	rpc(sock, "sandbox.exec",
	    json_pack("{s:s, s:o, s:i, s:b}", "sandbox", id, "command", argv, "timeout_seconds", EXEC_TIMEOUT_S,
		      "text", 1), &rep);
	ck_assert_msg(rep.result, "sandbox.exec failed: %d %s %s", rep.code, rep.type, rep.message);
	/* The exact bytes (stdout_text is only there with text: true). */
	out = harness_b64_field(rep.result, "stdout_b64");
	ck_assert_msg(out, "sandbox.exec gave no stdout_b64 (exit %lld)", (long long)jint(rep.result, "exit_code"));
	if (ret_exit)
		*ret_exit = (int)jint(rep.result, "exit_code");
	reply_clear(&rep);
	return out;
}

/* One request to the sandbox's proxy from inside it (PROBE_SCRIPT). */
static char *probe(const char *sock, const struct sbx *sb, const char *head, const char *payload)
{
	return sb_exec(sock, sb->id,
		       json_pack("[s, s, s, s, s, s]", "sh", "-c", PROBE_SCRIPT, "sh", head, payload ? payload : ""),
		       NULL);
}

/* The same with no daemon: straight through the engine (`docker exec`). */
static char *probe_engine(const struct sbx *sb, const char *head)
{
	return sh_out("docker exec '%s' sh -c '%s' sh '%s' '' 2>&1", sb->name, PROBE_SCRIPT, head);
}

/* The reply's status line is HTTP/1.x <status>. */
static void assert_status(const char *what, const char *out, const char *status)
{
	char want[32];

	snprintf(want, sizeof(want), " %s", status);
	ck_assert_msg(!strncmp(out, "HTTP/1.", 7) && !strncmp(out + 8, want, strlen(want)),
		      "%s: want status %s, got: %.200s", what, status, out);
}

/* ---- events ------------------------------------------------------------- */

/* A raw connection subscribed to egress.decision, and what it received
 * before the reply (the kept events a replay sends first). */
struct sub {
	int fd;
	json_t *early;     /* notifications that came before the reply */
	size_t next;
};

/* scope NULL: every scope. replay: the kept events first. */
static void subscribe(const char *sock, const char *scope, bool replay, struct sub *sub)
{
	json_t *params = json_pack("{s:[s]}", "types", "egress.decision"), *rep, *types;

	memset(sub, 0, sizeof(*sub));
	sub->fd = raw_connect(sock);
	sub->early = json_array();
	ck_assert_int_ge(sub->fd, 0);
	if (scope)
		json_object_set_new(params, "scope", json_string(scope));
	if (replay)
		json_object_set_new(params, "replay", json_true());
	raw_request_send(sub->fd, 1, "events.subscribe", params);
	while ((rep = raw_recv(sub->fd, CLIENT_TIMEOUT_MS)) && !jget(rep, "id"))
		json_array_append_new(sub->early, rep);
	ck_assert_msg(rep, "no reply to events.subscribe");
	ck_assert_msg(json_is_object(jget(rep, "result")), "events.subscribe failed: %s",
		      jstr(rep, "error.message") ? jstr(rep, "error.message") : "(no result)");
	ck_assert_int_eq(jint(rep, "id"), 1);
	types = jget(rep, "result.types");
	ck_assert_msg(json_is_array(types) && json_array_size(types) == 1 &&
		      !strcmp(json_string_value(json_array_get(types, 0)), "egress.decision"),
		      "the subscription's types are not [egress.decision]");
	if (scope)
		ck_assert_str_eq(jstr(rep, "result.scope"), scope);
	else
		ck_assert_msg(json_is_null(jget(rep, "result.scope")) || !jget(rep, "result.scope"),
			      "an unscoped subscription has a scope");
	ck_assert_msg(replay || json_array_size(sub->early) == 0,
		      "a subscription without replay got events before its reply");
	json_decref(rep);
}

static void sub_close(struct sub *sub)
{
	close(sub->fd);
	json_decref(sub->early);
	sub->fd = -1;
	sub->early = NULL;
}

/* The next event (new reference), or NULL after timeout_ms. */
static json_t *sub_next(struct sub *sub, int timeout_ms)
{
	if (sub->next < json_array_size(sub->early))
		return json_incref(json_array_get(sub->early, sub->next++));
	return raw_recv(sub->fd, timeout_ms);
}

struct decision {
	const char *decision;
	const char *host;
	int port;
	const char *reason;   /* the event's "reason", or NULL: none */
};

static void assert_event(json_t *n, const struct sbx *sb, const struct decision *want, size_t i)
{
	char *text = json_dumps(n, JSON_COMPACT);
	const char *time_s = jstr(n, "params.time");

	ck_assert_msg(jstr(n, "method") && !strcmp(jstr(n, "method"), "events.event") && !jget(n, "id"),
		      "event %zu is not an events.event notification: %s", i, text);
	ck_assert_msg(jstr(n, "params.type") && !strcmp(jstr(n, "params.type"), "egress.decision"),
		      "event %zu: type: %s", i, text);
	ck_assert_msg(jstr(n, "params.decision") && !strcmp(jstr(n, "params.decision"), want->decision) &&
		      jstr(n, "params.host") && !strcmp(jstr(n, "params.host"), want->host) &&
		      json_integer_value(jget(n, "params.port")) == want->port,
		      "event %zu: want %s %s:%d, got %s", i, want->decision, want->host, want->port, text);
	ck_assert_msg(want->reason ? jstr(n, "params.reason") && !strcmp(jstr(n, "params.reason"), want->reason)
			       : !jget(n, "params.reason"),
		      "event %zu: want reason %s: %s", i, want->reason ? want->reason : "(none)", text);
	ck_assert_msg(jstr(n, "params.sandbox") && !strcmp(jstr(n, "params.sandbox"), sb->name),
		      "event %zu: sandbox is not %s: %s", i, sb->name, text);
	ck_assert_msg(jstr(n, "params.kind") && !strcmp(jstr(n, "params.kind"), "k"), "event %zu: kind: %s", i, text);
	ck_assert_msg(jstr(n, "params.key.scope") && !strcmp(jstr(n, "params.key.scope"), sb->scope) &&
		      jstr(n, "params.key.thread_id") && !strcmp(jstr(n, "params.key.thread_id"), sb->thread) &&
		      jstr(n, "params.key.agent_dir") && !strcmp(jstr(n, "params.key.agent_dir"), sb->agent) &&
		      jstr(n, "params.key.call_id") && !strcmp(jstr(n, "params.key.call_id"), ""),
		      "event %zu: key: %s", i, text);
	/* RFC 3339, UTC: 2025-01-02T03:04:05.123456789Z */
	ck_assert_msg(time_s && strlen(time_s) >= 20 && time_s[4] == '-' && time_s[10] == 'T' &&
		      time_s[strlen(time_s) - 1] == 'Z',
		      "event %zu: time is not RFC 3339 UTC: %s", i, text);
	free(text);
}

/* The next n events are want[0..n), in order, each within EVENT_WAIT_MS. */
static void expect_events(struct sub *sub, const struct sbx *sb, const struct decision *want, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		json_t *ev = sub_next(sub, EVENT_WAIT_MS);

		ck_assert_msg(ev, "event %zu (%s %s:%d) did not arrive within %d ms", i, want[i].decision,
			      want[i].host, want[i].port, EVENT_WAIT_MS);
		assert_event(ev, sb, &want[i], i);
		json_decref(ev);
	}
}

/* Nothing has arrived on sub beyond what was read: looked at without
 * waiting. Called after a subscription's reply on another connection (see
 * expect_no_more), when every event published before it was already
 * written to sub's socket. */
static void expect_nothing_pending(struct sub *sub, const char *when)
{
	json_t *ev = sub_next(sub, 0);
	char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;

	ck_assert_msg(!ev, "an event arrived %s: %s", when, text);
}

/* What the daemon published for sb's scope is want[0..n) exactly, in
 * order, nothing twice: a fresh subscription with replay gets every event
 * the daemon keeps (the last 4096: all of this test's) before its reply.
 * Then live (may be NULL) holds nothing pending: the daemon writes an event
 * to every subscriber as it publishes it, so one published before that
 * reply is already in live's socket. State, not a quiet window. */
static void expect_no_more(const char *sock, const struct sbx *sb, const struct decision *want, size_t n,
			   struct sub *live, const char *when)
{
	struct sub kept;

	subscribe(sock, sb->scope, true, &kept);
	ck_assert_msg(json_array_size(kept.early) == n, "%s: the daemon published %zu events for the scope, want %zu",
		      when, json_array_size(kept.early), n);
	expect_events(&kept, sb, want, n);
	sub_close(&kept);
	if (live)
		expect_nothing_pending(live, when);
}

/* ---- describe ----------------------------------------------------------- */

START_TEST(describe_declares_allowlist_only_with_the_proxy)
{
	struct msbd_proc d = { 0 }, bare = { 0 };
	char state[128], scope[96];
	struct reply rep;
	struct sbx sb = { 0 };
	bool allowlist;

	daemon_up(&d, state);
	ck_assert(describe_observes(d.sock, &allowlist) && allowlist);
	{
		char *out = NULL, want[600];

		snprintf(want, sizeof(want), "\negress: allowlist, closed (proxy %s)\n", proxy_binary);
		ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "status", NULL }, &out, NULL), 0);
		ck_assert_msg(strstr(out, want), "status lacks \"%s\": %s", want + 1, out);
		free(out);
	}
	ck_assert_int_eq(msbd_stop(&d), 0);

	/* No proxy binary: neither declared, and an allowlisted acquire is
	 * refused before anything is created. */
	daemon_start(&bare, state, (const char *[]){ "--set", "egress.proxy_binary=", NULL });
	daemon_ready(&bare, false);
	ck_assert(!describe_observes(bare.sock, &allowlist));
	ck_assert(!allowlist);
	scope_of("bare", scope);
	snprintf(sb.scope, sizeof(sb.scope), "%s", scope);
	snprintf(sb.thread, sizeof(sb.thread), "t");
	snprintf(sb.agent, sizeof(sb.agent), "a");
	acquire_allow_rep(bare.sock, &sb, default_allow, &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_EGRESS_NOT_ENFORCED,
		      "want SandboxEgressNotEnforced, got %d %s %s", rep.code, rep.type, rep.message);
	/* The refusal names the key that would serve allowlist (issue 19). */
	ck_assert_msg(rep.message && strstr(rep.message, "egress.proxy_binary") &&
		      strstr(rep.message, "maf-sandbox-egress-proxy"),
		      "the refusal does not name egress.proxy_binary: %s", rep.message);
	reply_clear(&rep);
	/* status says so too: the egress line, and daemon.status's egress. */
	{
		char *out = NULL;
		json_t *st = call(bare.sock, "daemon.status", NULL, NULL, NULL);

		ck_assert_int_eq(run_cli((const char *[]){ "--socket", bare.sock, "status", NULL }, &out, NULL), 0);
		ck_assert_msg(strstr(out, "\negress: closed; allowlist off: egress.proxy_binary is not set"),
			      "status has no egress line naming egress.proxy_binary: %s", out);
		free(out);
		ck_assert_msg(st && jstr(st, "egress.allowlist_off_reason") &&
			      strstr(jstr(st, "egress.allowlist_off_reason"), "egress.proxy_binary") &&
			      json_is_null(jget(st, "egress.proxy_binary")) &&
			      json_array_size(jget(st, "egress.modes")) == 1,
			      "daemon.status egress lacks modes/proxy_binary/allowlist_off_reason");
		json_decref(st);
	}
	ck_assert_int_eq(engine_count_containers("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(engine_count_networks("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(msbd_stop(&bare), 0);
}
END_TEST

/* Entries the daemon must refuse before anything is made (PROTOCOL.md). */
static const char *const bad_entries[] = {
	"*", "*.", "a?.test", "[ab].test", "https://allowed.test", "allowed.test/path", "allowed test",
	"allowed.test:", "allowed.test:http", "allowed.test:70000", "*.*.test",
};

START_TEST(malformed_allowlist_entries_are_refused)
{
	const char *const allow[] = { bad_entries[_i], NULL };
	struct msbd_proc d = { 0 };
	char state[128], scope[96], tag[16];
	struct reply rep;
	struct sbx sb = { 0 };

	state_dir_make(state);
	daemon_start(&d, state, NULL);
	daemon_ready(&d, false);
	snprintf(tag, sizeof(tag), "bad%d", _i);
	scope_of(tag, scope);
	snprintf(sb.scope, sizeof(sb.scope), "%s", scope);
	snprintf(sb.thread, sizeof(sb.thread), "t");
	snprintf(sb.agent, sizeof(sb.agent), "a");
	rpc(d.sock, "sandbox.acquire",
	    json_pack("{s:o, s:o}", "key", key_of(&sb), "spec", allow_spec(allow)), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_INVALID_PARAMS, "entry '%s': want -32602, got %d %s %s",
		      bad_entries[_i], rep.code, rep.type, rep.message ? rep.message : "");
	reply_clear(&rep);
	ck_assert_int_eq(engine_count_containers("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(engine_count_networks("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- topology ----------------------------------------------------------- */

static json_t *inspect(const char *kind, const char *name)
{
	char *out = sh_out("docker %s inspect '%s' 2>/dev/null", kind, name);
	json_t *arr = json_loads(out, 0, NULL), *one;

	ck_assert_msg(json_is_array(arr) && json_array_size(arr) == 1, "cannot inspect %s %s", kind, name);
	one = json_incref(json_array_get(arr, 0));
	json_decref(arr);
	free(out);
	return one;
}

static const char *label(json_t *obj, const char *labels_path, const char *key)
{
	return json_string_value(json_object_get(jget(obj, labels_path), key));
}

/* The first three octets and the last of a dotted quad. */
static void split_quad(const char *ip, char prefix[16], int *ret_last)
{
	const char *dot = strrchr(ip, '.');

	ck_assert_msg(dot && dot - ip < 16, "not an IPv4 address: %s", ip);
	snprintf(prefix, 16, "%.*s", (int)(dot - ip), ip);
	*ret_last = atoi(dot + 1);
}

/* The 12 hex characters of the name maf-sandbox-docker-XXXXXXXXXXXX. */
static const char *name_hex(const char *name)
{
	const char *hex = strrchr(name, '-');

	ck_assert_msg(hex && strlen(hex + 1) == 12, "not a sandbox name: %s", name);
	return hex + 1;
}

/* §3: maf-sandbox-docker- + 12 hex of SHA-256 over "<len>:<part>" for scope,
 * thread, agent, kind, "allow:" + the sorted entries comma-joined. */
static void expected_name(const char *scope, const char *thread, const char *agent, const char *allow_sorted,
			  char out[64])
{
	const char *parts[] = { scope, thread, agent, "k", allow_sorted };
	char stream[1024] = "", *hash;
	size_t len = 0;

	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		len += (size_t)snprintf(stream + len, sizeof(stream) - len, "%zu:%s", strlen(parts[i]), parts[i]);
	hash = sh_out("printf '%%s' '%s' | sha256sum | cut -c1-12", stream);
	snprintf(out, 64, "maf-sandbox-docker-%s", hash);
	free(hash);
}

static bool array_has(json_t *arr, const char *entry)
{
	json_t *v;
	size_t i;

	json_array_foreach(arr, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), entry))
			return true;
	return false;
}

static bool env_has(json_t *c, const char *entry)
{
	return array_has(jget(c, "Config.Env"), entry);
}

/* The network: internal, named bridge, no host address, the block, labels. */
static void check_network(const struct sbx *sb, const char *block_prefix, int base)
{
	json_t *net = inspect("network", sb->net);
	const char *bridge = json_string_value(json_object_get(jget(net, "Options"), "com.docker.network.bridge.name"));
	char want_bridge[32], want_subnet[32], *addr4, *link;

	ck_assert_msg(json_is_true(jget(net, "Internal")), "%s is not internal", sb->net);
	snprintf(want_bridge, sizeof(want_bridge), "msb%s", name_hex(sb->name));
	ck_assert_msg(bridge && !strcmp(bridge, want_bridge), "bridge name %s, want %s", bridge ? bridge : "(none)",
		      want_bridge);
	snprintf(want_subnet, sizeof(want_subnet), "%s.%d/28", block_prefix, base);
	ck_assert_str_eq(jstr(json_array_get(jget(net, "IPAM.Config"), 0), "Subnet"), want_subnet);
	ck_assert_str_eq(label(net, "Labels", RUN_LABEL_KEY), run_id);
	ck_assert_str_eq(label(net, "Labels", "maf-sandbox.scope"), sb->scope);
	link = sh_out("ip -o link show dev '%s' >/dev/null 2>&1 && echo up", want_bridge);
	ck_assert_msg(!strcmp(link, "up"), "no host interface %s", want_bridge);
	addr4 = sh_out("ip -4 -o addr show dev '%s' 2>&1", want_bridge);
	ck_assert_msg(!*addr4, "the bridge %s holds an IPv4 address: %s", want_bridge, addr4);
	free(link);
	free(addr4);
	json_decref(net);
}

/* The proxy: NAME-net at .2 and the outbound network, non-root, read-only. */
static void check_proxy(const struct sbx *sb)
{
	json_t *c = inspect("container", sb->proxy), *nets = jget(c, "NetworkSettings.Networks");
	const char *user = jstr(c, "Config.User");
	char *uids, *save = NULL;

	ck_assert_msg(json_object_size(nets) == 2 && json_object_get(nets, sb->net) && json_object_get(nets, fx.net),
		      "the proxy is not on exactly %s and %s", sb->net, fx.net);
	ck_assert_str_eq(json_string_value(jget(json_object_get(nets, sb->net), "IPAddress")), sb->proxy_address);
	ck_assert_msg(user && *user && strcmp(user, "0") && strncmp(user, "0:", 2) && strcmp(user, "root"),
		      "the proxy runs as '%s'", user ? user : "");
	ck_assert_msg(json_is_true(jget(c, "HostConfig.ReadonlyRootfs")), "the proxy's rootfs is writable");
	ck_assert_msg(json_array_size(jget(c, "HostConfig.CapDrop")) == 1 &&
		      !strcmp(json_string_value(json_array_get(jget(c, "HostConfig.CapDrop"), 0)), "ALL"),
		      "the proxy keeps capabilities");
	ck_assert_msg(array_has(jget(c, "HostConfig.SecurityOpt"), "no-new-privileges"),
		      "the proxy may gain privileges");
	ck_assert_int_eq(jint(c, "HostConfig.PidsLimit"), PROXY_PIDS);
	ck_assert_int_eq(jint(c, "HostConfig.Memory"), PROXY_MEMORY);
	ck_assert_str_eq(jstr(c, "HostConfig.LogConfig.Type"), "json-file");
	ck_assert_str_eq(json_string_value(json_object_get(jget(c, "HostConfig.LogConfig.Config"), "max-size")), "16m");
	ck_assert_str_eq(json_string_value(json_object_get(jget(c, "HostConfig.LogConfig.Config"), "max-file")), "2");
	ck_assert_str_eq(label(c, "Config.Labels", "maf-sandbox.role"), "proxy");
	ck_assert_str_eq(label(c, "Config.Labels", RUN_LABEL_KEY), run_id);
	ck_assert_str_eq(label(c, "Config.Labels", "maf-sandbox.scope"), sb->scope);
	/* Every process of it, as the host sees them. */
	uids = sh_out("docker top '%s' -eo pid,uid | tail -n +2 | awk '{print $2}' | sort -u | tr '\\n' ' '", sb->proxy);
	ck_assert_msg(*uids, "docker top shows no process in the proxy");
	for (char *tok = strtok_r(uids, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
		ck_assert_msg(strcmp(tok, "0"), "a process of the proxy runs as root");
	free(uids);
	json_decref(c);
}

static const char *const proxy_vars[] = { "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy" };

/* The workload: only NAME-net, in the upper /29, DNS at .1, proxy env. */
static void check_workload(const struct sbx *sb, const char *block_prefix, int base)
{
	json_t *c = inspect("container", sb->id), *nets = jget(c, "NetworkSettings.Networks"), *dns;
	char want[128], prefix[16], *hosts;
	const char *ip;
	int last;

	ck_assert_msg(json_object_size(nets) == 1 && json_object_get(nets, sb->net), "the workload is not only on %s",
		      sb->net);
	ip = json_string_value(jget(json_object_get(nets, sb->net), "IPAddress"));
	ck_assert_msg(ip, "the workload has no address");
	split_quad(ip, prefix, &last);
	ck_assert_str_eq(prefix, block_prefix);
	ck_assert_msg(last >= base + BLOCK_WORKLOAD_MIN && last < base + BLOCK_SIZE,
		      "the workload's %s is not in the block's upper /29", ip);
	dns = jget(c, "HostConfig.Dns");
	snprintf(want, sizeof(want), "%s.%d", block_prefix, base + 1);
	ck_assert_msg(json_array_size(dns) == 1 && !strcmp(json_string_value(json_array_get(dns, 0)), want),
		      "the workload's DNS is not only %s", want);
	for (size_t i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++) {
		snprintf(want, sizeof(want), "%s=%s", proxy_vars[i], sb->proxy_url);
		ck_assert_msg(env_has(c, want), "the workload's env lacks %s", want);
	}
	ck_assert_str_eq(label(c, "Config.Labels", "maf-sandbox.egress"), "allowlist");
	ck_assert_str_eq(label(c, "Config.Labels", RUN_LABEL_KEY), run_id);
	/* The proxy's name resolves from /etc/hosts, to its address. */
	hosts = sh_out("docker exec '%s' cat /etc/hosts | awk '$2 == \"%s\" {print $1}'", sb->id, sb->proxy);
	ck_assert_msg(!strcmp(hosts, sb->proxy_address), "/etc/hosts gives %s the address '%s', want %s", sb->proxy,
		      hosts, sb->proxy_address);
	free(hosts);
	json_decref(c);
}

/* The engine's destroy events, watched from before a teardown to after it:
 * `docker events` replays from `since` (the engine keeps only its last few
 * hundred events, which a busy engine may have dropped by the time a
 * one-shot query asks), then streams, into a file. */
struct destroy_watch {
	pid_t pid;
	char path[160];
};

static void destroy_watch_start(struct destroy_watch *w, const char *dir)
{
	char since[32];

	snprintf(w->path, sizeof(w->path), "%s/destroy-events", dir);
	snprintf(since, sizeof(since), "%ld", (long)time(NULL) - 1);
	w->pid = fork();
	ck_assert_int_ge(w->pid, 0);
	if (w->pid == 0) {
		int fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(126);
		execlp("docker", "docker", "events", "--since", since, "--filter", "event=destroy", "--format",
		       "{{.Actor.Attributes.name}}", (char *)NULL);
		_exit(127);
	}
	usleep(500 * 1000);   /* subscribed before the teardown starts (the replay covers a slow start) */
}

/* The proxy, then the workload, then the network were destroyed. */
static void destroy_watch_check(struct destroy_watch *w, const struct sbx *sb)
{
	char proxy[96], net[96], workload[96], *out, *p_at, *w_at, *n_at;
	long deadline = now_ms() + EVENT_WAIT_MS;   /* hang guard */

	snprintf(proxy, sizeof(proxy), "%s-proxy\n", sb->name);
	snprintf(workload, sizeof(workload), "%s\n", sb->name);
	snprintf(net, sizeof(net), "%s-net\n", sb->name);
	for (;;) {
		out = file_text(w->path);
		p_at = strstr(out, proxy);
		w_at = strstr(out, workload);
		n_at = strstr(out, net);
		if ((p_at && w_at && n_at) || now_ms() > deadline)
			break;
		free(out);
		usleep(POLL_MS * 1000);
	}
	kill(w->pid, SIGTERM);
	waitpid(w->pid, NULL, 0);
	ck_assert_msg(p_at && w_at && n_at && p_at < w_at && w_at < n_at,
		      "want the proxy, then the workload, then the network removed; destroy events:\n%s", out);
	free(out);
}

START_TEST(acquire_builds_the_topology_and_teardown_removes_it)
{
	struct msbd_proc d = { 0 };
	char state[128], scope[96], block_prefix[16], want_name[128], prefix2[16];
	struct sbx s1, s2;
	struct reply rep;
	struct destroy_watch watch;
	int last, last2;

	daemon_up(&d, state);
	scope_of("topology", scope);
	acquire_allow(&d, scope, "t1", "a", NULL, &s1);
	acquire_allow(&d, scope, "t2", "a", NULL, &s2);

	expected_name(scope, "t1", "a", "allow:allowed.test,allowed.test:444,private.test", want_name);
	ck_assert_str_eq(s1.name, want_name);
	snprintf(want_name, sizeof(want_name), "%s-net", s1.name);
	ck_assert_str_eq(s1.net, want_name);
	snprintf(want_name, sizeof(want_name), "%s-proxy", s1.name);
	ck_assert_str_eq(s1.proxy, want_name);
	ck_assert_msg(!strncmp(s1.proxy_address, POOL_PREFIX, strlen(POOL_PREFIX)), "proxy_address %s is outside %s0.0/16",
		      s1.proxy_address, POOL_PREFIX);
	split_quad(s1.proxy_address, block_prefix, &last);
	ck_assert_msg(last % BLOCK_SIZE == BLOCK_PROXY, "the proxy's %s is not .2 of a /28", s1.proxy_address);
	snprintf(want_name, sizeof(want_name), "http://%s:%d", s1.proxy_address, PROXY_PORT);
	ck_assert_str_eq(s1.proxy_url, want_name);

	check_network(&s1, block_prefix, last - BLOCK_PROXY);
	check_proxy(&s1);
	check_workload(&s1, block_prefix, last - BLOCK_PROXY);

	/* A second sandbox gets a block of its own. */
	split_quad(s2.proxy_address, prefix2, &last2);
	ck_assert_msg(strcmp(prefix2, block_prefix) || last2 != last, "two sandboxes share %s", s1.proxy_address);
	ck_assert_str_ne(s1.net, s2.net);

	/* dispose_scope: the proxy, then the workload, then the network. */
	destroy_watch_start(&watch, d.dir);
	rpc(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t1"), &rep);
	ck_assert_msg(rep.result, "dispose_scope failed: %d %s", rep.code, rep.message);
	ck_assert_int_eq(jint(rep.result, "disposed"), 1);
	ck_assert_msg(json_is_null(jget(rep.result, "undisposed")), "dispose_scope left something undisposed");
	reply_clear(&rep);
	assert_gone(s1.name);
	destroy_watch_check(&watch, &s1);
	ck_assert_msg(container_exists(s2.proxy) && network_exists(s2.net), "dispose_scope reached another thread");

	/* reap, once old enough (older_than_seconds 1: not early): the same. */
	sleep(2);   /* not early */
	destroy_watch_start(&watch, d.dir);
	rpc(d.sock, "sandbox.reap", json_pack("{s:i, s:s}", "older_than_seconds", 1, "scope", scope), &rep);
	ck_assert_msg(rep.result, "reap failed: %d %s", rep.code, rep.message);
	reply_clear(&rep);
	assert_gone(s2.name);
	destroy_watch_check(&watch, &s2);
	ck_assert_int_eq(engine_count_containers("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(engine_count_networks("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- the proxy's answers and the events --------------------------------- */

static const struct probe_row {
	const char *what;
	const char *head;
	const char *payload;
	const char *status;
	struct decision decision;   /* .decision NULL: the proxy decides nothing */
} probe_rows[] = {
	{ "allowed.test:443", CONNECT_HEAD("allowed.test:443"), "ping\\n", "200", { "ALLOW", "allowed.test", 443, NULL } },
	{ "denied.test:443", CONNECT_HEAD("denied.test:443"), "ping\\n", "403", { "DENY", "denied.test", 443, NULL } },
	{ "allowed.test:80", CONNECT_HEAD("allowed.test:80"), "ping\\n", "403", { "DENY", "allowed.test", 80, NULL } },
	/* Plain HTTP (not CONNECT), to an allowed host too: a DENY whose reason says so;
	 * in origin form it names no target, so no decision. */
	{ "absolute-form GET", "GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n", NULL, "405",
	  { "DENY", "allowed.test", 80, "not_connect" } },
	{ "origin-form GET", "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n", NULL, "405",
	  { NULL, NULL, 0, NULL } },
	{ "malformed", "NOT-A-REQUEST\\r\\n\\r\\n", NULL, "400", { NULL, NULL, 0, NULL } },
	{ "private.test:443", CONNECT_HEAD("private.test:443"), "ping\\n", "403",
	  { "DENY-NONGLOBAL", "private.test", 443, NULL } },
	{ "allowed.test:444 (nothing listens)", CONNECT_HEAD("allowed.test:444"), NULL, "502",
	  { "UNREACHABLE", "allowed.test", 444, NULL } },
};
#define N_PROBES (sizeof(probe_rows) / sizeof(probe_rows[0]))

static void assert_probe(const struct probe_row *row, const char *out)
{
	assert_status(row->what, out, row->status);
	if (!strcmp(row->status, "200")) {
		const char *body = strstr(out, "\r\n\r\n");

		ck_assert_msg(body && !strncmp(body, "\r\n\r\nupstream-443\nping\n", 22),
			      "%s: the tunnel did not carry the upstream's banner and our echo: %.200s", row->what, out);
	} else {
		ck_assert_msg(!strstr(out, "upstream-") && !strstr(out, "private-"),
			      "%s: refused, yet the upstream answered: %.200s", row->what, out);
	}
}

START_TEST(the_proxy_answers_by_the_allowlist_and_each_decision_is_published_once)
{
	struct msbd_proc d = { 0 };
	char state[128], scope[96], other[96];
	struct decision want[N_PROBES];
	size_t n_want = 0;
	struct sub live, other_scope, late, replayed, replayed_all;
	struct sbx sb;
	struct destroy_watch watch;

	daemon_up(&d, state);
	scope_of("answers", scope);
	scope_of("answers-other", other);
	acquire_allow(&d, scope, "t", "a", NULL, &sb);
	subscribe(d.sock, scope, false, &live);
	subscribe(d.sock, other, false, &other_scope);
	for (size_t i = 0; i < N_PROBES; i++) {
		char *out = probe(d.sock, &sb, probe_rows[i].head, probe_rows[i].payload);

		assert_probe(&probe_rows[i], out);
		free(out);
		if (probe_rows[i].decision.decision)
			want[n_want++] = probe_rows[i].decision;
	}
	/* Live: all of them before any disposal drains the proxy, and no more. */
	expect_events(&live, &sb, want, n_want);
	expect_no_more(d.sock, &sb, want, n_want, &live, "after the last decision");
	/* Afterwards: nothing without replay; with it, the kept ones, in order, before the reply. */
	subscribe(d.sock, scope, false, &late);
	subscribe(d.sock, scope, true, &replayed);
	ck_assert_uint_eq(json_array_size(replayed.early), n_want);
	expect_events(&replayed, &sb, want, n_want);
	subscribe(d.sock, NULL, true, &replayed_all);
	/* The drain on dispose publishes nothing twice. */
	destroy_watch_start(&watch, d.dir);
	dispose(&d, &sb);
	assert_gone(sb.name);
	destroy_watch_check(&watch, &sb);
	expect_no_more(d.sock, &sb, want, n_want, &live, "after dispose");
	expect_nothing_pending(&late, "to a late subscriber without replay");
	expect_nothing_pending(&replayed, "after the replay and dispose");
	expect_nothing_pending(&other_scope, "for another scope");
	/* An unscoped admin subscriber sees them too (other sandboxes' among them). */
	for (size_t i = 0, seen = 0; seen < n_want; i++) {
		json_t *ev = sub_next(&replayed_all, 1);

		ck_assert_msg(ev, "the unscoped replay lacks decisions of %s", sb.name);
		if (jstr(ev, "params.sandbox") && !strcmp(jstr(ev, "params.sandbox"), sb.name)) {
			assert_event(ev, &sb, &want[seen], seen);
			seen++;
		}
		json_decref(ev);
	}
	sub_close(&live);
	sub_close(&other_scope);
	sub_close(&late);
	sub_close(&replayed);
	sub_close(&replayed_all);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- isolation ---------------------------------------------------------- */

/* UDP sockets that count every datagram: the resolver container's :53 and
 * the host's :53 ([::], else each gateway address). */
struct watchers {
	int fd[MAX_WATCHERS];
	char what[MAX_WATCHERS][64];
	size_t n;
	/* Addresses skipped as taken (EADDRINUSE): each must be shown to
	 * answer DNS itself (controls_are_seen), or the test fails. */
	char taken[MAX_WATCHERS][INET_ADDRSTRLEN];
	size_t n_taken;
	int lock_fd;       /* DNS_WATCH_LOCK, held */
};

/* Which bind failures of a watcher are not the test's failure. */
enum {
	WATCH_MUST = 0,
	/* EADDRINUSE: the host serves DNS there itself — shown by the control
	 * lookup to it being answered (controls_are_seen), else the test fails.
	 * A guest's lookup there would be answered, and every such probe
	 * asserts it got no answer. */
	WATCH_MAY_BE_TAKEN = 1,
	/* EADDRNOTAVAIL: not an address of the host (no docker0 here), so
	 * nothing of the host listens there to be reached. */
	WATCH_MAY_BE_ABSENT = 2,
};

static void watcher_add(struct watchers *w, pid_t ns_pid, const char *ip, const char *what, int may)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(53) };
	int fd;

	ck_assert_int_eq(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
	fd = netns_bound_socket(ns_pid, AF_INET, SOCK_DGRAM, &sin, sizeof(sin));
	if (fd < 0) {
		ck_assert_msg((fd == -EADDRINUSE && (may & WATCH_MAY_BE_TAKEN)) ||
			      (fd == -EADDRNOTAVAIL && (may & WATCH_MAY_BE_ABSENT)),
			      "cannot watch %s:53 (%s): %s", ip, what, strerror(-fd));
		fprintf(stderr, "egress: no UDP watcher on %s:53 (%s): %s (allowed: %s)\n", ip, what, strerror(-fd),
			fd == -EADDRINUSE ? "the host serves DNS there, checked by the control lookup; the probes "
					    "assert no answer"
					  : "not a host address");
		if (fd == -EADDRINUSE) {
			ck_assert_uint_lt(w->n_taken, MAX_WATCHERS);
			snprintf(w->taken[w->n_taken++], sizeof(w->taken[0]), "%s", ip);
		}
		return;
	}
	ck_assert_uint_lt(w->n, MAX_WATCHERS);
	w->fd[w->n] = fd;
	snprintf(w->what[w->n++], sizeof(w->what[0]), "%s", what);
}

static void watchers_open(struct watchers *w)
{
	struct sockaddr_in6 any6 = { .sin6_family = AF_INET6, .sin6_port = htons(53), .sin6_addr = IN6ADDR_ANY_INIT };
	pid_t resolver = container_pid(fx.resolver);
	int fd;

	memset(w, 0, sizeof(*w));
	w->lock_fd = open(DNS_WATCH_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	ck_assert_msg(w->lock_fd >= 0, "%s: %s", DNS_WATCH_LOCK, strerror(errno));
	for (long end = now_ms() + DNS_WATCH_LOCK_MS; flock(w->lock_fd, LOCK_EX | LOCK_NB) < 0;) {   /* hang guard */
		ck_assert_msg(errno == EWOULDBLOCK, "flock %s: %s", DNS_WATCH_LOCK, strerror(errno));
		ck_assert_msg(now_ms() < end, "another egress run held %s for %d ms", DNS_WATCH_LOCK,
			      DNS_WATCH_LOCK_MS);
		usleep(100 * 1000);
	}
	ck_assert_msg(resolver > 0, "the resolver container is not running");
	watcher_add(w, resolver, "0.0.0.0", "the resolver container", WATCH_MUST);
	ck_assert_msg(w->n == 1, "cannot listen in the resolver container");
	fd = netns_bound_socket(0, AF_INET6, SOCK_DGRAM, &any6, sizeof(any6));
	if (fd >= 0) {
		w->fd[w->n] = fd;
		snprintf(w->what[w->n++], sizeof(w->what[0]), "the host's [::]:53");
		return;
	}
	/* Only because :53 is taken on some host address (a local resolver). */
	ck_assert_msg(fd == -EADDRINUSE, "cannot watch the host's [::]:53: %s", strerror(-fd));
	/* Then at least the addresses a guest would try. */
	watcher_add(w, 0, fx.gateway, "the host's outbound gateway", WATCH_MAY_BE_TAKEN);
	watcher_add(w, 0, "172.17.0.1", "the host's docker0", WATCH_MAY_BE_TAKEN | WATCH_MAY_BE_ABSENT);
}

/* Closes the watchers, then lets another run have the host's :53. */
static void watchers_close(struct watchers *w)
{
	for (size_t i = 0; i < w->n; i++)
		close(w->fd[i]);
	w->n = 0;
	close(w->lock_fd);     /* the flock goes with it */
	w->lock_fd = -1;
}

/* How many datagrams each watcher holds (drained); sources appended to log. */
static size_t watcher_drain(const struct watchers *w, size_t i, char *log, size_t cap)
{
	size_t n = 0;

	for (;;) {
		struct sockaddr_storage from;
		socklen_t len = sizeof(from);
		char buf[1500], host[INET6_ADDRSTRLEN] = "?";

		if (recvfrom(w->fd[i], buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &len) < 0)
			return n;
		if (from.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&from)->sin_addr, host, sizeof(host));
		else
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&from)->sin6_addr, host, sizeof(host));
		snprintf(log + strlen(log), cap - strlen(log), " %s<-%s", w->what[i], host);
		n++;
	}
}

/* A host TCP listener on [::]:<ephemeral> (IPv4 too). */
static int host_listener(int *ret_port)
{
	struct sockaddr_in6 any6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t len = sizeof(any6);
	int fd = netns_bound_socket(0, AF_INET6, SOCK_STREAM, &any6, sizeof(any6));

	ck_assert_msg(fd >= 0, "no host listener: %s", strerror(-fd));
	ck_assert_int_eq(listen(fd, 64), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&any6, &len), 0);
	*ret_port = ntohs(any6.sin6_port);
	return fd;
}

/* Accepts and closes what is pending; returns how many. */
static int listener_drain(int fd)
{
	int n = 0, c;

	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		close(c);
		n++;
	}
	return n;
}

/* From a plain container on the outbound network: the listener and every
 * watcher do see what reaches them, so their silence later means something. */
static void controls_are_seen(int listener, const struct watchers *w, int port)
{
	char *out, log[1024] = "";

	out = sh_out("docker exec '%s' sh -c 'timeout 4 nc -w 2 %s %d </dev/null; "
		     "timeout 2 nslookup control.test %s; timeout 2 nslookup control.test %s; "
		     "timeout 2 nslookup control.test 172.17.0.1' >/dev/null 2>&1; echo done",
		     fx.upstream, fx.gateway, port, fx.resolver_ip, fx.gateway);
	free(out);
	/* The commands ended: what they sent was delivered. Polled all the same
	 * (hang guard: EVENT_WAIT_MS), then asserted. */
	{
		long deadline = now_ms() + EVENT_WAIT_MS;   /* hang guard */
		int conns = 0;
		size_t seen[MAX_WATCHERS] = { 0 }, missing;

		do {
			conns += listener_drain(listener);
			missing = conns ? 0 : 1;
			for (size_t i = 0; i < w->n; i++) {
				seen[i] += watcher_drain(w, i, log, sizeof(log));
				missing += seen[i] ? 0 : 1;
			}
			if (missing)
				usleep(50 * 1000);
		} while (missing && now_ms() < deadline);
		ck_assert_msg(conns >= 1, "the host listener on port %d missed the control connection", port);
		for (size_t i = 0; i < w->n; i++)
			ck_assert_msg(seen[i] >= 1, "%s missed the control lookup", w->what[i]);
	}
	/* An address not watched because its :53 is taken must really answer
	 * DNS there (an answer, or a refusal of the name, from that server). */
	for (size_t i = 0; i < w->n_taken; i++) {
		out = sh_out("docker exec '%s' timeout 4 nslookup control.test %s 2>&1", fx.upstream, w->taken[i]);
		ck_assert_msg(strstr(out, "Server:") &&
			      (strstr(out, "NXDOMAIN") || strstr(out, "Name:") || strstr(out, "SERVFAIL") ||
			       strstr(out, "REFUSED")),
			      "%s:53 is taken on the host, but no DNS server answers there: %s", w->taken[i], out);
		free(out);
	}
}

/* The first IPv4 address of a container on a network. */
static void container_ip(const char *container, const char *net, char out[20])
{
	char *ip = sh_out("docker inspect -f '{{(index .NetworkSettings.Networks \"%s\").IPAddress}}' '%s' 2>/dev/null",
			  net, container);

	ck_assert_msg(*ip && strlen(ip) < 20, "%s has no address on %s", container, net);
	snprintf(out, 20, "%s", ip);
	free(ip);
}

/* Appends a probe to the script: `tag rc=N output` lands in /tmp/probe.tag. */
static void script_add(char *script, size_t cap, const char *tag, const char *cmd)
{
	size_t len = strlen(script);

	snprintf(script + len, cap - len,
		 "(o=$(timeout 9 %s </dev/null 2>&1); echo \"%s rc=$? $(echo $o)\") >/tmp/probe.%s 2>&1 &\n", cmd, tag,
		 tag);
}

/* Every probe must have printed its line, and each line must show failure. */
static void assert_probes_failed(const char *out, const char *const *tags, size_t n_tags)
{
	for (size_t i = 0; i < n_tags; i++) {
		char needle[80], line[PROBE_LINE_MAX];
		const char *at;

		snprintf(needle, sizeof(needle), "%s rc=", tags[i]);
		at = strstr(out, needle);
		ck_assert_msg(at, "probe %s printed nothing; output:\n%s", tags[i], out);
		at += strlen(needle);
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(at, "\n"), at);
		ck_assert_msg(atoi(line) != 0, "probe %s succeeded: rc=%s", tags[i], line);
		ck_assert_msg(!strstr(line, "hit") && !strstr(line, "upstream-") && !strstr(line, "Server:") &&
			      !strstr(line, "NXDOMAIN") && !strstr(line, "HTTP/"),
			      "probe %s got an answer: rc=%s", tags[i], line);
	}
}

struct iso_targets {
	char tags[48][24];
	const char *tag_ptrs[48];
	size_t n;
};

/* tag, then tag_arg appended when not NULL. */
static void iso_add(struct iso_targets *t, char *script, size_t cap, const char *tag, const char *tag_arg,
		    const char *cmd)
{
	ck_assert_uint_lt(t->n, 48);
	snprintf(t->tags[t->n], sizeof(t->tags[0]), "%s%s", tag, tag_arg ? tag_arg : "");
	script_add(script, cap, t->tags[t->n], cmd);
	t->tag_ptrs[t->n] = t->tags[t->n];
	t->n++;
}

/* The host's global IPv4 addresses and the sandbox bridge's link-local IPv6. */
static void host_probes(struct iso_targets *t, char *script, size_t cap, const struct sbx *sb, int port)
{
	char *addrs = sh_out("ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n %d",
			     MAX_HOST_ADDRS);
	char *ll = sh_out("ip -6 -o addr show dev 'msb%s' scope link 2>/dev/null | awk '{print $4}' | cut -d/ -f1",
			  name_hex(sb->name));
	char cmd[160], block_prefix[16], *save = NULL;
	int last;

	split_quad(sb->proxy_address, block_prefix, &last);
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s.%d %d", block_prefix, last - BLOCK_PROXY + 1, port);
	iso_add(t, script, cap, "host-block-gw", NULL, cmd);
	snprintf(cmd, sizeof(cmd), "nslookup outside.test %s.%d", block_prefix, last - BLOCK_PROXY + 1);
	iso_add(t, script, cap, "dns-block-gw", NULL, cmd);
	for (char *a = strtok_r(addrs, "\n", &save); a; a = strtok_r(NULL, "\n", &save)) {
		snprintf(cmd, sizeof(cmd), "nc -w 3 %s %d", a, port);
		iso_add(t, script, cap, "host-", a, cmd);
		snprintf(cmd, sizeof(cmd), "nslookup outside.test %s", a);
		iso_add(t, script, cap, "dns-", a, cmd);
	}
	if (*ll) {
		snprintf(cmd, sizeof(cmd), "nc -w 3 %s%%eth0 %d", ll, port);
		iso_add(t, script, cap, "host-fe80", NULL, cmd);
	}
	free(addrs);
	free(ll);
}

START_TEST(the_sandbox_reaches_nothing_but_its_proxy)
{
	struct msbd_proc d = { 0 };
	char state[128], scope[96], script[12288], cmd[160], peer_ip[20], peer_out[20], own_out[20];
	char log[1024] = "";
	struct iso_targets t = { .n = 0 };
	struct watchers w;
	struct sbx a, b;
	int listener, port;
	char *out;

	listener = host_listener(&port);
	watchers_open(&w);
	controls_are_seen(listener, &w, port);
	daemon_up(&d, state);
	scope_of("isolation", scope);
	acquire_allow(&d, scope, "t", "a", NULL, &a);
	acquire_allow(&d, scope, "t", "b", NULL, &b);

	/* The peer listens, and answers itself: the probe below is not vacuous.
	 * Tried until its listener is up (hang guard: 150 tries, about 30 s). */
	container_ip(b.id, b.net, peer_ip);
	snprintf(script, sizeof(script), "nc -ll -p %d -e /bin/echo hit </dev/null >/dev/null 2>&1 & "
		 "for i in $(seq 150); do o=$(timeout 4 nc -w 2 %s %d </dev/null); "
		 "case $o in *hit*) echo $o; break;; esac; sleep 0.2; done", PEER_PORT, peer_ip, PEER_PORT);
	out = sb_exec(d.sock, b.id, json_pack("[s, s, s]", "sh", "-c", script), NULL);
	ck_assert_msg(strstr(out, "hit"), "the peer's listener does not answer itself: %s", out);
	free(out);
	/* The sandbox's one way out works. */
	out = probe(d.sock, &a, CONNECT_HEAD("allowed.test:443"), "ping\\n");
	assert_status("allowed.test:443 through the proxy", out, "200");
	free(out);

	script[0] = '\0';
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s 443", fx.upstream_ip);
	iso_add(&t, script, sizeof(script), "upstream-direct", NULL, cmd);
	iso_add(&t, script, sizeof(script), "upstream-by-name", NULL, "nc -w 3 allowed.test 443");
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s %d", peer_ip, PEER_PORT);
	iso_add(&t, script, sizeof(script), "peer-workload", NULL, cmd);
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s %d", b.proxy_address, PROXY_PORT);
	iso_add(&t, script, sizeof(script), "peer-proxy", NULL, cmd);
	container_ip(b.proxy, fx.net, peer_out);
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s %d", peer_out, PROXY_PORT);
	iso_add(&t, script, sizeof(script), "peer-proxy-outbound", NULL, cmd);
	container_ip(a.proxy, fx.net, own_out);
	snprintf(cmd, sizeof(cmd), "nc -w 3 %s %d", own_out, PROXY_PORT);
	iso_add(&t, script, sizeof(script), "own-proxy-outbound", NULL, cmd);
	iso_add(&t, script, sizeof(script), "dns-default", NULL, "nslookup outside.test");
	snprintf(cmd, sizeof(cmd), "nslookup outside.test %s", fx.resolver_ip);
	iso_add(&t, script, sizeof(script), "dns-resolver", NULL, cmd);
	snprintf(cmd, sizeof(cmd), "nslookup outside.test %s", fx.upstream_ip);
	iso_add(&t, script, sizeof(script), "dns-upstream", NULL, cmd);
	host_probes(&t, script, sizeof(script), &a, port);
	snprintf(script + strlen(script), sizeof(script) - strlen(script), "wait; cat /tmp/probe.*\n");

	out = sb_exec(d.sock, a.id, json_pack("[s, s, s]", "sh", "-c", script), NULL);
	fprintf(stderr, "egress: from the sandbox:\n%s", out);
	assert_probes_failed(out, t.tag_ptrs, t.n);
	free(out);
	/* No wait: every probe has ended (the script waited for them), and
	 * whatever one sent that could reach us was delivered before it did. */
	ck_assert_msg(listener_drain(listener) == 0, "the host listener on port %d was reached from the sandbox", port);
	for (size_t i = 0; i < w.n; i++)
		ck_assert_msg(watcher_drain(&w, i, log, sizeof(log)) == 0, "a resolver was reached:%s", log);
	dispose(&d, &a);
	dispose(&d, &b);
	assert_gone(a.name);
	assert_gone(b.name);
	close(listener);
	watchers_close(&w);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- events across a SIGKILLed daemon ----------------------------------- */

START_TEST(decisions_made_while_no_daemon_runs_are_published_by_the_next)
{
	static const struct decision d1[] = { { "ALLOW", "allowed.test", 443, NULL }, { "DENY", "denied.test", 1001, NULL } };
	static const struct decision d2[] = { { "DENY", "denied.test", 2001, NULL }, { "DENY", "denied.test", 2002, NULL },
					      { "DENY", "denied.test", 3001, NULL } };
	struct msbd_proc a = { 0 }, b = { 0 };
	char state[128], scope[96];
	struct sub sub;
	struct sbx sb;
	char *out;

	daemon_up(&a, state);
	scope_of("sigkill", scope);
	acquire_allow(&a, scope, "t", "a", NULL, &sb);
	subscribe(a.sock, scope, false, &sub);
	free(probe(a.sock, &sb, CONNECT_HEAD("allowed.test:443"), "ping\\n"));
	free(probe(a.sock, &sb, CONNECT_HEAD("denied.test:1001"), NULL));
	expect_events(&sub, &sb, d1, 2);
	sub_close(&sub);

	msbd_signal(&a, SIGKILL);
	ck_assert_int_eq(msbd_wait(&a, 10000), 128 + SIGKILL);   /* hang guard */
	/* D2, with no daemon: the sandbox and its proxy run on. */
	out = probe_engine(&sb, CONNECT_HEAD("denied.test:2001"));
	assert_status("denied.test:2001 with no daemon", out, "403");
	free(out);
	out = probe_engine(&sb, CONNECT_HEAD("denied.test:2002"));
	assert_status("denied.test:2002 with no daemon", out, "403");
	free(out);

	/* B, same state_dir. Its subscriber asks for the replay, so that D2 is
	 * seen whether B publishes it before or after the subscription. */
	daemon_start(&b, state, NULL);
	subscribe(b.sock, scope, true, &sub);
	daemon_ready(&b, true);
	out = probe(b.sock, &sb, CONNECT_HEAD("denied.test:3001"), NULL);
	assert_status("denied.test:3001", out, "403");
	free(out);
	dispose(&b, &sb);
	assert_gone(sb.name);
	/* D2 then D3, once each; nothing of D1. */
	expect_events(&sub, &sb, d2, 3);
	expect_no_more(b.sock, &sb, d2, 3, &sub, "after D2 and D3");
	sub_close(&sub);
	ck_assert_int_eq(msbd_stop(&b), 0);
	msbd_stop(&a);   /* already reaped: removes its dir */
}
END_TEST

/* ---- verification ------------------------------------------------------- */

/* The network and proxy are made before the workload: when the workload
 * then cannot be made (its image cannot be pulled: a registry on
 * 127.0.0.1:1, so nothing leaves the machine), they go again. */
START_TEST(a_failed_acquire_leaves_no_topology)
{
	struct msbd_proc d = { 0 };
	char state[128], scope[96], name[64];
	struct reply rep;
	json_t *spec = allow_spec((const char *const[]){ "allowed.test", NULL });
	int waited;

	state_dir_make(state);
	daemon_start(&d, state, NULL);
	daemon_ready(&d, true);
	scope_of("nopull", scope);
	json_object_set_new(spec, "image", json_string("127.0.0.1:1/msb-absent:1"));
	rpc(d.sock, "sandbox.acquire", json_pack("{s:{s:s, s:s, s:s}, s:o}", "key", "scope", scope, "thread_id", "t",
						  "agent_dir", "a", "spec", spec), &rep);
	ck_assert_msg(!rep.result, "an acquire of an image that cannot be pulled was served");
	ck_assert_int_eq(rep.code, 1001);
	reply_clear(&rep);
	expected_name(scope, "t", "a", "allow:allowed.test", name);
	/* the teardown runs after the reply: polled (hang guard), then asserted */
	for (waited = 0; waited < 30000 && (engine_count_containers("maf-sandbox.scope", scope, NULL) ||
					      engine_count_networks("maf-sandbox.scope", scope, NULL)); waited += 100)
		usleep(100 * 1000);
	assert_gone(name);
	ck_assert_int_eq(engine_count_containers("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(engine_count_networks("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(an_engine_that_ignores_an_isolated_gateway_is_refused)
{
	static const char *const allow[] = { "allowed.test", NULL };
	struct msbd_proc d = { 0 };
	char state[128], scope[96], name[64];
	struct sbx sb = { 0 };
	struct reply rep;

	state_dir_make(state);
	daemon_start(&d, state, (const char *[]){ "--set", "egress.gateway_mode=isolated", NULL });
	daemon_ready(&d, true);
	scope_of("isolated", scope);
	snprintf(sb.scope, sizeof(sb.scope), "%s", scope);
	snprintf(sb.thread, sizeof(sb.thread), "t");
	snprintf(sb.agent, sizeof(sb.agent), "a");
	acquire_allow_rep(d.sock, &sb, allow, &rep);
	ck_assert_msg(!rep.result, "an acquire on an engine that ignores gateway_mode=isolated was served");
	ck_assert_msg(rep.message && (strcasestr(rep.message, "address") || strcasestr(rep.message, "holds")),
		      "the refusal does not say the bridge holds an address: %d %s %s", rep.code, rep.type,
		      rep.message ? rep.message : "");
	reply_clear(&rep);
	expected_name(scope, "t", "a", "allow:allowed.test", name);
	assert_gone(name);
	ck_assert_int_eq(engine_count_containers("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(engine_count_networks("maf-sandbox.scope", scope, NULL), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- CLI ---------------------------------------------------------------- */

/* Runs the CLI to its end; returns its exit status, stdout in *ret_out. */
static int cli_run(const char *dir, const char *const *args, char **ret_out)
{
	char out_path[160], err_path[160], *err;
	int status;
	pid_t pid;

	snprintf(out_path, sizeof(out_path), "%s/cli.out", dir);
	snprintf(err_path, sizeof(err_path), "%s/cli.err", dir);
	pid = spawn_cli(args, out_path, err_path);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	*ret_out = file_text(out_path);
	err = file_text(err_path);
	if (*err)
		fprintf(stderr, "egress: the CLI's stderr: %s\n", err);
	free(err);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Until the CLI has printed n lines (hang guard: EVENT_WAIT_MS); returns
 * its output (malloc'd). */
static char *cli_lines(const char *out_path, size_t n)
{
	long deadline = now_ms() + EVENT_WAIT_MS;   /* hang guard */
	char *text = NULL;

	do {
		free(text);
		usleep(POLL_MS * 1000);
		text = file_text(out_path);
	} while (count_lines(text) < n && now_ms() < deadline);
	return text;
}

/* `--json events --follow --scope S`: prints each decision as one JSON
 * object, and ends with status 0 on SIGTERM. The CLI subscribes with
 * replay: the first decision reaches it whenever it subscribed; once it
 * printed that, it is subscribed, and the second one comes live. */
static void cli_follow(const struct msbd_proc *d, const struct sbx *sb, const struct decision *want, size_t n)
{
	char out_path[160], err_path[160], *text = NULL, *save = NULL, *line;
	size_t i = 0;
	int status;
	pid_t pid;

	ck_assert_uint_eq(n, 2);
	snprintf(out_path, sizeof(out_path), "%s/follow.out", d->dir);
	snprintf(err_path, sizeof(err_path), "%s/follow.err", d->dir);
	pid = spawn_cli((const char *[]){ "--socket", d->sock, "--json", "events", "--follow", "--scope", sb->scope,
					 NULL },
			out_path, err_path);
	text = probe(d->sock, sb, CONNECT_HEAD("allowed.test:443"), "ping\\n");
	assert_status("allowed.test:443 (events --follow)", text, "200");
	free(text);
	/* The first decision printed: the CLI is subscribed. */
	text = cli_lines(out_path, 1);
	if (count_lines(text) < 1) {
		char *err = file_text(err_path);

		msbd_dump_log(d);
		ck_abort_msg("events --follow printed no decision in %d ms (stderr: %s)", EVENT_WAIT_MS,
			     err ? err : "");
	}
	free(text);
	text = probe(d->sock, sb, CONNECT_HEAD("denied.test:443"), NULL);
	assert_status("denied.test:443 (events --follow)", text, "403");
	free(text);
	text = cli_lines(out_path, n);
	kill(pid, SIGTERM);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "events --follow ended with status %d on SIGTERM",
		      status);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++) {
		json_t *j = json_loads(line, 0, NULL), *ev;

		ck_assert_msg(j, "the CLI printed a line that is not JSON: %s", line);
		ck_assert_msg(i < n, "the CLI printed more than %zu events: %s", n, line);
		/* The line is the event (the notification's params), or the notification itself. */
		ev = json_pack("{s:s, s:O}", "method", "events.event", "params", jget(j, "params") ? jget(j, "params") : j);
		assert_event(ev, sb, &want[i], i);
		json_decref(ev);
		json_decref(j);
	}
	if (i != n) {
		char *err = file_text(err_path);

		msbd_dump_log(d);
		ck_abort_msg("events --follow printed %zu events, want %zu; stderr: %s", i, n, err);
	}
	free(text);
}

START_TEST(cli_events_print_each_decision)
{
	static const struct decision want[] = { { "ALLOW", "allowed.test", 443, NULL }, { "DENY", "denied.test", 443, NULL } };
	struct msbd_proc d = { 0 };
	char state[128], scope[96], other[96], expect[256], *out, *save = NULL, *line;
	struct sbx sb;
	size_t i = 0;

	daemon_up(&d, state);
	scope_of("cli", scope);
	scope_of("cli-other", other);
	acquire_allow(&d, scope, "t", "a", NULL, &sb);
	cli_follow(&d, &sb, want, 2);

	/* Without --follow: the kept ones, oldest first, in text, and it exits 0. */
	ck_assert_int_eq(cli_run(d.dir, (const char *[]){ "--socket", d.sock, "events", "--scope", scope, NULL }, &out),
			 0);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++) {
		ck_assert_msg(i < 2, "events printed more than 2 lines: %s", line);
		/* TIME DECISION HOST:PORT sandbox=NAME scope=S thread=T agent=A kind=K */
		snprintf(expect, sizeof(expect), " %s %s:%d sandbox=%s scope=%s thread=t agent=a kind=k", want[i].decision,
			 want[i].host, want[i].port, sb.name, scope);
		ck_assert_msg(!strncmp(line, "20", 2) && strstr(line, expect) && !strcmp(strstr(line, expect), expect),
			      "line %zu: want TIME%s, got %s", i, expect, line);
	}
	ck_assert_msg(i == 2, "events printed %zu lines, want 2", i);
	free(out);
	/* Another scope: nothing. */
	ck_assert_int_eq(cli_run(d.dir, (const char *[]){ "--socket", d.sock, "events", "--scope", other, NULL }, &out),
			 0);
	ck_assert_msg(!*out, "events --scope %s printed: %s", other, out);
	free(out);
	dispose(&d, &sb);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

static Suite *egress_suite(void)
{
	Suite *s = suite_create("egress");
	TCase *tc;

	tc = tcase_create("describe");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, describe_declares_allowlist_only_with_the_proxy);
	tcase_add_loop_test(tc, malformed_allowlist_entries_are_refused, 0,
			    sizeof(bad_entries) / sizeof(bad_entries[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("topology");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, acquire_builds_the_topology_and_teardown_removes_it);
	tcase_add_test(tc, an_engine_that_ignores_an_isolated_gateway_is_refused);
	tcase_add_test(tc, a_failed_acquire_leaves_no_topology);
	suite_add_tcase(s, tc);

	tc = tcase_create("enforcement");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, the_proxy_answers_by_the_allowlist_and_each_decision_is_published_once);
	tcase_add_test(tc, the_sandbox_reaches_nothing_but_its_proxy);
	suite_add_tcase(s, tc);

	tc = tcase_create("events");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, decisions_made_while_no_daemon_runs_are_published_by_the_next);
	tcase_add_test(tc, cli_events_print_each_decision);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- main: the world the proxy reaches ---------------------------------- */

/* A container on the outbound network at prefix.host serving `nc` on each port:
 * the banner <banner>-<port>, then an echo (cat). */
static bool serve(const char *name, int host, const char *aliases, const char *banner, const char *ports)
{
	char *out = sh_out("docker run -d --name '%s' --label %s=%s --network '%s' --ip %s.%d %s %s "
			   "sh -c 'printf \"#!/bin/sh\\necho %s-\\$1\\nexec cat\\n\" >/tmp/s; chmod +x /tmp/s; "
			   "for p in %s; do nc -ll -p $p -e /tmp/s $p & done; wait' 2>&1 && echo ok",
			   name, FIXTURE_LABEL, run_id, fx.net, fx.prefix, host, aliases, image, banner, ports);
	bool ok = harness_last_line_is(out, "ok");

	if (!ok)
		fprintf(stderr, "egress: cannot start %s: %s\n", name, out);
	free(out);
	return ok;
}

static bool listening(const char *name, const char *port)
{
	char *out = sh_out("docker exec '%s' netstat -ltn 2>/dev/null | grep -c ':%s '", name, port);
	bool yes = atoi(out) > 0;

	free(out);
	return yes;
}

static bool fixture_net_create(void)
{
	for (int i = 0; i < OUT_TRIES; i++) {
		int r = (int)((getpid() + i * 37) % 250) + 1;
		char *out;

		snprintf(fx.prefix, sizeof(fx.prefix), OUT_NET_FMT, r);
		out = sh_out("docker network create --subnet %s.0/24 --ip-range %s.64/26 --gateway %s.1 "
			     "--label %s=%s '%s' 2>&1 && echo ok",
			     fx.prefix, fx.prefix, fx.prefix, FIXTURE_LABEL, run_id, fx.net);
		if (harness_last_line_is(out, "ok")) {
			free(out);
			return true;
		}
		fprintf(stderr, "egress: %s.0/24: %s\n", fx.prefix, out);
		free(out);
	}
	return false;
}

static bool fixture_up(void)
{
	snprintf(fx.net, sizeof(fx.net), "msb-it-egress-out-%s", run_id);
	snprintf(fx.upstream, sizeof(fx.upstream), "msb-it-egress-upstream-%s", run_id);
	snprintf(fx.private_srv, sizeof(fx.private_srv), "msb-it-egress-private-%s", run_id);
	snprintf(fx.resolver, sizeof(fx.resolver), "msb-it-egress-resolver-%s", run_id);
	if (!fixture_net_create())
		return false;
	snprintf(fx.gateway, sizeof(fx.gateway), "%s.1", fx.prefix);
	snprintf(fx.private_allow, sizeof(fx.private_allow), "%s.0/25", fx.prefix);
	snprintf(fx.upstream_ip, sizeof(fx.upstream_ip), "%s.%d", fx.prefix, HOST_UPSTREAM);
	snprintf(fx.private_ip, sizeof(fx.private_ip), "%s.%d", fx.prefix, HOST_PRIVATE);
	snprintf(fx.resolver_ip, sizeof(fx.resolver_ip), "%s.%d", fx.prefix, HOST_RESOLVER);
	if (!serve(fx.upstream, HOST_UPSTREAM, "--network-alias allowed.test --network-alias denied.test", "upstream",
		   "443 80") ||
	    !serve(fx.private_srv, HOST_PRIVATE, "--network-alias private.test", "private", "443") ||
	    !serve(fx.resolver, HOST_RESOLVER, "", "resolver", "7"))
		return false;
	for (int i = 0; i < 50; i++) {
		if (listening(fx.upstream, "443") && listening(fx.upstream, "80") && listening(fx.private_srv, "443"))
			return true;
		usleep(POLL_MS * 1000);
	}
	fprintf(stderr, "egress: the upstream servers never listened\n");
	return false;
}

int main(void)
{
	struct stat st;
	SRunner *sr;
	char *out;
	int failed = 1;

	proxy_binary = getenv("MSB_PROXY");
	if (!proxy_binary || !*proxy_binary) {
		fprintf(stderr, "MSB_PROXY is not set (no egress proxy built): skipped\n");
		return EXIT_SKIP;
	}
	if (stat(proxy_binary, &st) < 0) {
		fprintf(stderr, "MSB_PROXY %s: %s\n", proxy_binary, strerror(errno));
		return EXIT_FAILURE;
	}
	snprintf(run_id, sizeof(run_id), "ite%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-busybox:%s", run_id);
	if (!harness_test_image(image))
		return EXIT_FAILURE;
	harness_run_dir_create();
	if (fixture_up()) {
		sr = srunner_create(egress_suite());
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
	}
	harness_run_dir_remove();
	/* Whatever failed: nothing of this run stays (containers before networks). */
	engine_purge_label(RUN_LABEL_KEY, run_id);
	engine_purge_label(FIXTURE_LABEL, run_id);
	out = sh_out("docker rmi -f %s >/dev/null 2>&1; echo done", image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
