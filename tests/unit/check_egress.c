/* check_egress.c — the daemon's egress module (egress.h) against the fake
 * engine: decisions drained from a proxy's log are published once, a
 * second daemon with the same cursor publishes only what is new (equal
 * timestamps included); a network that fails its verification is removed
 * and the acquire refused with why; a subnet someone else holds is
 * skipped; an absent proxy image is imported and then checked; an
 * administrator's acquire of root's allowlisted sandbox uses root's
 * topology (the workload's owner), not one of its own. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "acquire.h"
#include "bridgecheck.h"
#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "egress.h"
#include "egresslog.h"
#include "engine.h"
#include "fake_engine.h"
#include "jsonrpc.h"
#include "log.h"
#include "msb-build.h"
#include "loop.h"
#include "names.h"
#include "proxyimage.h"
#include "registry.h"
#include "rpc.h"
#include "sandbox.h"
#include "xmalloc.h"

#define RUN_MAX_MS 3000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define API        "/v1.41"
#define PROXY_ID   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define NAME       "maf-sandbox-docker-0123456789ab"
#define JSON_TYPE  "Content-Type: application/json\r\n"
#define PING    { .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .repeat = true, \
		  .body = "{\"Version\":\"20.10.24\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\"}" }
/* key.v1 of ("s","t","a","") and its selectors */
#define KEY_V1     "WyJzIiwgInQiLCAiYSIsICIiXQ=="
#define PROXY_LABELS \
	"\"maf-sandbox.role\":\"proxy\",\"maf-sandbox.key.v1\":\"" KEY_V1 "\"," \
	"\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\",\"maf-sandbox.agent\":\"a\"," \
	"\"maf-sandbox.kind\":\"k\",\"maf-sandbox.owner\":\"0\""
#define PROXY_INSPECT { .method = "GET", .path = API "/containers/" PROXY_ID "/json", .headers = JSON_TYPE, \
	.body = "{\"Id\":\"" PROXY_ID "\",\"Name\":\"/" NAME "-proxy\",\"Config\":{\"Labels\":{" PROXY_LABELS "}}}" }
#define PROXY_STOP { .method = "POST", .path = API "/containers/" PROXY_ID "/stop", .status = 204 }

static struct event_base *base;
static struct engine *engine;
static struct domain d;
static int reachable_count;
static char state_dir[64];

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

static void setup(void)
{
	reachable_count = 0;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
	snprintf(state_dir, sizeof(state_dir), "%s/egress-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(state_dir));
	memset(&d, 0, sizeof(d));
	d.base = base;
	d.engine = engine;
	d.config = config_new_defaults();
	free(d.config->egress_state_dir);
	d.config->egress_state_dir = xstrdup(state_dir);
	free(d.config->egress_proxy_binary);
	d.config->egress_proxy_binary = xstrdup("/bin/true");   /* only its digest is read */
	log_set_debug(true);
}

static void teardown(void)
{
	d.egress = egress_free(d.egress);
	engine = engine_free(engine);
	d.config = config_free(d.config);
	event_base_free(base);
	fake_engine_cleanup();
}

/* One multiplexed stdout frame holding text. */
static size_t mux(char *out, const char *text)
{
	size_t n = strlen(text);

	out[0] = 1;
	out[1] = out[2] = out[3] = 0;
	out[4] = (char)(n >> 24);
	out[5] = (char)(n >> 16);
	out[6] = (char)(n >> 8);
	out[7] = (char)n;
	memcpy(out + 8, text, n);
	return n + 8;
}

static int drained;
static const char *drain_body;   /* NULL: drain_with_log's own */
static size_t drain_body_len;
static int drain_error;

static void drain_cb(int error, void *arg)
{
	(void)arg;
	drain_error = error;
	drained++;
}

/* Drains PROXY_ID with a fresh egress (a new daemon) whose logs reply is log. */
static uint64_t drain_with_log(const char *log)
{
	static char body[4096];
	size_t n = drain_body ? 0 : mux(body, log);
	/* static: the fake serves from it after this returns (borrowed for the run) */
	static struct fake_reply script[5];
	const struct fake_reply fill[] = {
		PING, VERSION, PROXY_INSPECT, PROXY_STOP,
		{ .method = "GET", .path = API "/containers/" PROXY_ID "/logs", .body = drain_body ? drain_body : body,
		  .body_len = drain_body ? drain_body_len : n },
	};
	uint64_t published;

	memcpy(script, fill, sizeof(script));

	d.egress = egress_free(d.egress);
	d.egress = egress_new(&d);
	if (engine_get_state(engine) == ENGINE_REACHABLE) {
		fake_engine_stop();
		fake_engine_start(script, ELEMENTSOF(script));   /* the engine stays reachable */
	} else {
		loop_engine_start_reachable(base, engine, &reachable_count, script, ELEMENTSOF(script),
					    RUN_MAX_MS);
	}
	drained = 0;
	ck_assert_int_eq(egress_drain(d.egress, PROXY_ID, drain_cb, NULL), 0);
	loop_run_until(base, &drained, 1, RUN_MAX_MS);
	ck_assert_int_eq(drained, 1);
	ck_assert_int_eq(drain_error, 0);
	published = egress_decisions_published(d.egress);
	return published;
}

#define T1 "2026-11-29T14:00:00.100000000Z "
#define T2 "2026-11-29T14:00:01.000000001Z "

START_TEST(drain_publishes_once_across_restarts)
{
	const char *log1 = T1 "listening on 3128; allowing: a.test\n"
			   T1 "DENY b.test:443\n"
			   T1 "DENY c.test:443\n";
	const char *log2 = T1 "listening on 3128; allowing: a.test\n"
			   T1 "DENY b.test:443\n"
			   T1 "DENY c.test:443\n"
			   T1 "DENY d.test:443\n"           /* the same timestamp, a third one: new */
			   T2 "ALLOW a.test:443\n"
			   "garbage without a timestamp\n"
			   T2 "not a decision\n";
	_cleanup_free_ char *cursor = xasprintf("%s/egress/%s", state_dir, PROXY_ID);
	char buf[128] = "";
	long long s;
	long ns;
	unsigned long n;
	FILE *fp;

	ck_assert_uint_eq(drain_with_log(log1), 2);
	fp = fopen(cursor, "re");
	ck_assert_ptr_nonnull(fp);
	ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), fp));
	fclose(fp);
	/* one fixed-width record, written in place */
	ck_assert_uint_eq(strlen(buf), 20 + 1 + 9 + 1 + 20 + 1);
	ck_assert_int_eq(sscanf(buf, "%lld %ld %lu", &s, &ns, &n), 3);
	ck_assert_int_eq(s, 1795960800);
	ck_assert_int_eq(ns, 100000000);
	ck_assert_uint_eq(n, 2);
	/* A new daemon, the same log plus two: only those two. */
	ck_assert_uint_eq(drain_with_log(log2), 2);
	/* And once more: nothing. */
	ck_assert_uint_eq(drain_with_log(log2), 0);
	/* The proxy removed: the cursor goes with it. */
	egress_proxy_removed(d.egress, PROXY_ID);
	ck_assert_int_eq(access(cursor, F_OK), -1);
}
END_TEST

/* A flood in the log: FLOOD_LINES decisions, one frame each (as the engine
 * sends them). The drain reads them EGRESS_BYTES_PER_TURN a turn (the
 * stream pauses in between), publishes every one exactly once — the first
 * EGRESS_EVENTS_PER_WINDOW alone, the rest coalesced — and moves the cursor
 * past the last; a drain again publishes nothing. */
#define FLOOD_LINES 6000
START_TEST(drain_of_a_flood_is_coalesced_and_paced)
{
	const char *line = T1 "DENY denied.test:1\n";
	size_t one = strlen(line) + 8, len = 0;
	_cleanup_free_ char *body = xmalloc(one * FLOOD_LINES + 64);
	json_t *st;

	ck_assert_uint_gt(one * FLOOD_LINES, 4 * EGRESS_BYTES_PER_TURN);
	for (size_t i = 0; i < FLOOD_LINES; i++)
		len += mux(body + len, line);
	drain_body = body;
	drain_body_len = len;
	ck_assert_uint_eq(drain_with_log(NULL), FLOOD_LINES);
	st = egress_status_json(d.egress);
	ck_assert_int_eq(json_integer_value(json_object_get(st, "decisions_seen")), FLOOD_LINES);
	ck_assert_int_eq(json_integer_value(json_object_get(st, "decisions_held")), 0);
	ck_assert_int_gt(json_integer_value(json_object_get(st, "decisions_coalesced")), 0);
	ck_assert_int_le(json_integer_value(json_object_get(st, "decisions_coalesced")),
			 FLOOD_LINES - EGRESS_EVENTS_PER_WINDOW);
	/* paced: the stream paused at least once per EGRESS_BYTES_PER_TURN read */
	ck_assert_int_ge(json_integer_value(json_object_get(st, "stream_pauses")),
			 (json_int_t)(len / (EGRESS_BYTES_PER_TURN + 16 * 1024)));
	json_decref(st);
	/* A new daemon: nothing again. */
	ck_assert_uint_eq(drain_with_log(NULL), 0);
	drain_body = NULL;
	egress_proxy_removed(d.egress, PROXY_ID);
}
END_TEST

/* A proxy followed live holds decisions (more than a window takes one by
 * one) when it is removed behind our back: its held decisions are
 * published as its stream is cancelled, and its cursor goes and stays
 * gone (it was written again by that cancel, never to be swept). */
START_TEST(removed_while_holding_leaves_no_cursor)
{
	static char body[8192];
	static struct fake_reply script[4];
	const int lines = EGRESS_EVENTS_PER_WINDOW + 10;
	const struct fake_reply fill[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/containers/json", .headers = JSON_TYPE, .repeat = true,
		  .body = "[{\"Id\":\"" PROXY_ID "\",\"Names\":[\"/" NAME "-proxy\"],\"State\":\"running\","
			  "\"Labels\":{" PROXY_LABELS "}}]" },
		{ .method = "GET", .path = API "/containers/" PROXY_ID "/logs", .body = body, .stall = true },
	};
	_cleanup_free_ char *cursor = xasprintf("%s/egress/%s", state_dir, PROXY_ID);
	size_t len = 0;
	json_int_t held = 0;
	json_t *st;

	for (int i = 0; i < lines; i++)
		len += mux(body + len, T1 "DENY b.test:443\n");
	ck_assert_uint_lt(len, sizeof(body));
	memcpy(script, fill, sizeof(fill));
	script[3].body_len = len;
	d.egress = egress_new(&d);
	loop_engine_start_reachable(base, engine, &reachable_count, script, ELEMENTSOF(script), RUN_MAX_MS);
	egress_resync(d.egress);
	/* hang guard: 150 × 20 ms */
	for (int i = 0; i < 150 && held == 0; i++) {
		loop_run_until(base, NULL, 0, 20);
		st = egress_status_json(d.egress);
		held = json_integer_value(json_object_get(st, "decisions_held"));
		json_decref(st);
	}
	/* (the reply stalls one byte short: its last line is not whole) */
	ck_assert_int_gt(held, 0);
	ck_assert_uint_eq(egress_decisions_published(d.egress), EGRESS_EVENTS_PER_WINDOW);
	ck_assert_int_eq(access(cursor, F_OK), 0);
	egress_proxy_removed(d.egress, PROXY_ID);
	ck_assert_uint_eq(egress_decisions_published(d.egress), EGRESS_EVENTS_PER_WINDOW + (uint64_t)held);
	ck_assert_msg(access(cursor, F_OK) == -1 && errno == ENOENT, "the removed proxy's cursor %s is there",
		      cursor);
	/* nothing writes it later either */
	loop_run_until(base, NULL, 0, 50);
	ck_assert_int_eq(access(cursor, F_OK), -1);
	st = egress_status_json(d.egress);
	ck_assert_int_eq(json_integer_value(json_object_get(st, "decisions_held")), 0);
	json_decref(st);
	fake_engine_stop();
}
END_TEST

/* A flood of ALLOW decisions reaches the daemon's log at most
 * EGRESS_LOG_PER_SECOND lines a second, like any other verdict: the rest
 * are counted (daemon.status's decisions_not_logged) and said in summary
 * lines whose counts add up to it. The log is stderr, read back from a file. */
#define ALLOW_FLOOD_LINES 3000
START_TEST(allow_flood_is_not_logged_line_by_line)
{
	const char *line = T1 "ALLOW a.test:443\n";
	size_t one = strlen(line) + 8, len = 0;
	_cleanup_free_ char *body = xmalloc(one * ALLOW_FLOOD_LINES + 64);
	_cleanup_free_ char *log_path = xasprintf("%s/stderr.log", state_dir);
	unsigned long allow_lines = 0, said = 0, said_allow = 0, n, a;
	json_int_t not_logged;
	char buf[512];
	int saved, fd;
	time_t t0, t1;
	json_t *st;
	FILE *fp;

	for (size_t i = 0; i < ALLOW_FLOOD_LINES; i++)
		len += mux(body + len, line);
	drain_body = body;
	drain_body_len = len;
	fflush(stderr);
	saved = dup(2);
	fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, 2), 2);
	close(fd);
	t0 = time(NULL);
	ck_assert_uint_eq(drain_with_log(NULL), ALLOW_FLOOD_LINES);
	t1 = time(NULL);
	st = egress_status_json(d.egress);
	not_logged = json_integer_value(json_object_get(st, "decisions_not_logged"));
	json_decref(st);
	egress_proxy_removed(d.egress, PROXY_ID);   /* says what is left to say */
	fflush(stderr);
	ck_assert_int_eq(dup2(saved, 2), 2);
	close(saved);
	drain_body = NULL;
	fp = fopen(log_path, "re");
	ck_assert_ptr_nonnull(fp);
	while (fgets(buf, sizeof(buf), fp)) {
		const char *p;

		if (strstr(buf, "egress: ALLOW a.test:443 (sandbox "))
			allow_lines++;
		if ((p = strstr(buf, "egress: ")) && sscanf(p, "egress: %lu more decisions of sandbox %*s (%lu of them ALLOW)",
							      &n, &a) == 2) {
			said += n;
			said_allow += a;
		}
	}
	fclose(fp);
	ck_assert_uint_gt(allow_lines, 0);
	/* not early: no more lines than the rate allows in the seconds the
	 * drain took (a slow machine only loosens the bound) */
	ck_assert_uint_le(allow_lines, (unsigned long)EGRESS_LOG_PER_SECOND * (unsigned long)(t1 - t0 + 1));
	ck_assert_int_eq(not_logged, ALLOW_FLOOD_LINES - (json_int_t)allow_lines);
	ck_assert_uint_eq(said, (unsigned long)not_logged);
	ck_assert_uint_eq(said_allow, said);
}
END_TEST

START_TEST(drain_of_an_absent_proxy_publishes_nothing)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/containers/" PROXY_ID "/json", .status = 404,
		  .body = "{\"message\":\"No such container\"}" },
	};

	d.egress = egress_new(&d);
	loop_engine_start_reachable(base, engine, &reachable_count, script, ELEMENTSOF(script), RUN_MAX_MS);
	drained = 0;
	ck_assert_int_eq(egress_drain(d.egress, PROXY_ID, drain_cb, NULL), 0);
	loop_run_until(base, &drained, 1, RUN_MAX_MS);
	ck_assert_int_eq(drained, 1);
	ck_assert_int_eq(drain_error, 0);
	ck_assert_uint_eq(egress_decisions_published(d.egress), 0);
	ck_assert_int_eq(egress_drain(d.egress, "", drain_cb, NULL), -EINVAL);
	fake_engine_stop();
}
END_TEST

/* ---- ensure ---------------------------------------------------------------- */

static int ensured;
static struct msb_error ensure_err;
static struct egress_info ensure_info;

static void ensure_cb(const struct msb_error *err, const struct egress_info *info, void *arg)
{
	(void)arg;
	if (err)
		msb_error_copy(&ensure_err, err);
	if (info)
		ensure_info = *info;
	ensured++;
}

static char image_body[512];

/* The image reply of what /bin/true makes (its ID is fixed by the binary). */
static const char *image_current(void)
{
	_cleanup_free_ void *tar = NULL;
	_cleanup_free_ char *err = NULL;
	char id[PROXYIMAGE_DIGEST_BYTES];
	size_t len;

	ck_assert_int_eq(proxyimage_archive("/bin/true", "amd64", PROXYIMAGE_REPO ":" PACKAGE_VERSION, &tar, &len, id,
					    &err), 0);
	snprintf(image_body, sizeof(image_body), "{\"Id\":\"%s\"}", id);
	return image_body;
}

static void ensure_run(const struct fake_reply *script, size_t n, const char *mode)
{
	struct msb_key key = { .scope = "s", .thread_id = "t", .agent_dir = "a", .call_id = "" };
	char *allow[] = { "a.test" };
	struct msb_spec spec = { .kind = "k", .egress = MSB_EGRESS_ALLOWLIST, .egress_allow = allow,
				 .n_egress_allow = 1 };

	spec.labels = json_object();
	free(d.config->egress_gateway_mode);
	d.config->egress_gateway_mode = xstrdup(mode);
	d.egress = egress_new(&d);
	loop_engine_start_reachable(base, engine, &reachable_count, script, n, RUN_MAX_MS);
	ensured = 0;
	memset(&ensure_err, 0, sizeof(ensure_err));
	ck_assert_int_eq(egress_ensure(d.egress, NAME, &key, &spec, 0, true, ensure_cb, NULL, NULL), 0);
	loop_run_until(base, &ensured, 1, RUN_MAX_MS);
	ck_assert_int_eq(ensured, 1);
	json_decref(spec.labels);
	fake_engine_stop();   /* script is the caller's: stop serving it (the records stay) */
}

/* A distinctive engine message: it may reach the log, never the wire. */
#define SECRET "SECRET-ENGINE-TEXT 10.0.0.53"

static void assert_no_engine_text(const struct msb_error *e)
{
	json_auto_t *wire = msb_error_to_json(e);
	_cleanup_free_ char *text = json_dumps(wire, JSON_COMPACT);

	ck_assert_ptr_nonnull(text);
	ck_assert_msg(!strstr(text, "SECRET-ENGINE-TEXT") && !strstr(text, "10.0.0.53"), "engine text on the wire: %s",
		      text);
}

static const struct fake_request *find_request(const char *method, const char *path_prefix, size_t nth)
{
	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const struct fake_request *r = fake_engine_request(i);

		if (strcmp(r->method, method) == 0 && strncmp(r->path, path_prefix, strlen(path_prefix)) == 0 &&
		    nth-- == 0)
			return r;
	}
	return NULL;
}

/* The engine is on this host (a unix socket) but the bridge it says it made
 * does not exist here: unverifiable in inhibit mode → removed, refused. */
START_TEST(unverifiable_network_is_removed_and_refused)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = image_current() },
		{ .method = "GET", .path = API "/networks/" NAME "-net", .status = 404, .body = "{\"message\":\"no\"}" },
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
		{ .method = "POST", .path = API "/networks/create", .status = 201, .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\"}" },
		{ .method = "GET", .path = API "/networks/n1", .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\",\"Driver\":\"bridge\",\"Internal\":true,\"Labels\":{\"maf-sandbox.owner\":\"0\"},"
			  "\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/28\",\"Gateway\":\"10.213.0.1\"}]},"
			  "\"Options\":{\"com.docker.network.bridge.name\":\"msb0123456789ab\"}}" },
		{ .method = "DELETE", .path = API "/networks/n1", .status = 204 },
	};
	const struct fake_request *create;
	json_auto_t *body = NULL;

	ensure_run(script, ELEMENTSOF(script), "inhibit");
	ck_assert_int_eq(ensure_err.code, MSB_ERR_ENGINE_ERROR);
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "not visible"));
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "has been removed"));
	ck_assert_ptr_nonnull(find_request("DELETE", API "/networks/n1", 0));
	create = find_request("POST", API "/networks/create", 0);
	ck_assert_ptr_nonnull(create);
	body = json_loads(create->body, 0, NULL);
	ck_assert_ptr_nonnull(body);
	ck_assert(json_is_true(json_object_get(body, "Internal")));
	ck_assert(json_is_true(json_object_get(body, "CheckDuplicate")));   /* API 1.41 < 1.44 */
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "Options"),
				"com.docker.network.bridge.inhibit_ipv4")), "true");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "Options"),
				"com.docker.network.bridge.name")), "msb0123456789ab");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(
				json_object_get(body, "IPAM"), "Config"), 0), "Subnet")), "10.213.0.0/28");
	msb_error_clear(&ensure_err);
}
END_TEST

/* isolated: an IPAM gateway in the read-back is an addressed bridge. */
START_TEST(isolated_with_a_gateway_is_refused)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = image_current() },
		{ .method = "GET", .path = API "/networks/" NAME "-net", .status = 404, .body = "{\"message\":\"no\"}" },
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
		{ .method = "POST", .path = API "/networks/create", .status = 201, .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\"}" },
		{ .method = "GET", .path = API "/networks/n1", .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\",\"Driver\":\"bridge\",\"Internal\":true,\"Labels\":{\"maf-sandbox.owner\":\"0\"},"
			  "\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/28\",\"Gateway\":\"10.213.0.8\"}]}}" },
		{ .method = "DELETE", .path = API "/networks/n1", .status = 204 },
	};
	const struct fake_request *create;
	json_auto_t *body = NULL;

	ensure_run(script, ELEMENTSOF(script), "isolated");
	ck_assert_int_eq(ensure_err.code, MSB_ERR_ENGINE_ERROR);
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "gateway 10.213.0.8"));
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "28.0.0"));
	ck_assert_ptr_nonnull(find_request("DELETE", API "/networks/n1", 0));
	create = find_request("POST", API "/networks/create", 0);
	body = json_loads(create->body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "Options"),
				"com.docker.network.bridge.gateway_mode_ipv4")), "isolated");
	ck_assert_ptr_null(json_object_get(json_array_get(json_object_get(json_object_get(body, "IPAM"),
				"Config"), 0), "Gateway"));
	msb_error_clear(&ensure_err);
}
END_TEST

/* A block the listing did not show but the engine holds: marked, the next taken. */
START_TEST(overlapping_subnet_takes_the_next_block)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = image_current() },
		{ .method = "GET", .path = API "/networks/" NAME "-net", .status = 404, .body = "{\"message\":\"no\"}" },
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE,
		  .body = "[{\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/27\"}]}}]" },
		{ .method = "POST", .path = API "/networks/create", .status = 403, .headers = JSON_TYPE,
		  .body = "{\"message\":\"Pool overlaps with other one on this address space\"}" },
		{ .method = "POST", .path = API "/networks/create", .status = 500, .headers = JSON_TYPE,
		  .body = "{\"message\":\"something else broke: " SECRET "\"}" },
	};
	const struct fake_request *c1, *c2;
	json_auto_t *b1 = NULL, *b2 = NULL;

	ensure_run(script, ELEMENTSOF(script), "inhibit");
	c1 = find_request("POST", API "/networks/create", 0);
	c2 = find_request("POST", API "/networks/create", 1);
	ck_assert_ptr_nonnull(c1);
	ck_assert_ptr_nonnull(c2);
	b1 = json_loads(c1->body, 0, NULL);
	b2 = json_loads(c2->body, 0, NULL);
	/* the listing's /27 holds the first two blocks */
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(
				json_object_get(b1, "IPAM"), "Config"), 0), "Subnet")), "10.213.0.32/28");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(
				json_object_get(b2, "IPAM"), "Config"), 0), "Subnet")), "10.213.0.48/28");
	ck_assert_int_eq(ensure_err.code, MSB_ERR_ENGINE_ERROR);
	/* The engine's text stays in the log: the wire gets the step and the status. */
	assert_no_engine_text(&ensure_err);
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "creating its network"));
	ck_assert_int_eq(json_integer_value(json_object_get(ensure_err.data, "engine_status")), 500);
	ck_assert_ptr_null(strstr(ensure_err.message, "28.0.0"));   /* unrelated: no engine advice */
	msb_error_clear(&ensure_err);
}
END_TEST

/* A full pool is read again from the engine, and the blocks of networks
 * removed since (by anyone) come back. */
START_TEST(full_pool_is_read_again)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = image_current() },
		{ .method = "GET", .path = API "/networks/" NAME "-net", .status = 404, .body = "{\"message\":\"no\"}" },
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE,
		  .body = "[{\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/27\"}]}}]" },
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
		{ .method = "POST", .path = API "/networks/create", .status = 500, .headers = JSON_TYPE,
		  .body = "{\"message\":\"stop here " SECRET "\"}" },
	};
	const struct fake_request *c;
	json_auto_t *b = NULL;

	free(d.config->egress_subnet_pool);
	d.config->egress_subnet_pool = xstrdup("10.213.0.0/27");   /* two /28 blocks */
	ensure_run(script, ELEMENTSOF(script), "inhibit");
	ck_assert_ptr_nonnull(find_request("GET", API "/networks", 2));   /* inspected, then listed twice */
	c = find_request("POST", API "/networks/create", 0);
	ck_assert_ptr_nonnull(c);
	b = json_loads(c->body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(
				json_object_get(b, "IPAM"), "Config"), 0), "Subnet")), "10.213.0.0/28");
	ck_assert_int_eq(ensure_err.code, MSB_ERR_ENGINE_ERROR);
	assert_no_engine_text(&ensure_err);
	msb_error_clear(&ensure_err);
}
END_TEST

/* No image: loaded from the binary, then checked; another ID fails it. */
START_TEST(absent_image_is_loaded_and_checked)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"no such image\"}" },
		{ .method = "POST", .path = API "/images/load", .headers = JSON_TYPE,
		  .body = "{\"stream\":\"Loaded image: x\"}\n" },
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = "{\"Id\":\"sha256:1\"}" },
	};
	const struct fake_request *imp;

	ensure_run(script, ELEMENTSOF(script), "inhibit");
	ck_assert_int_eq(ensure_err.code, MSB_ERR_EGRESS_NOT_ENFORCED);
	ck_assert_ptr_nonnull(strstr(ensure_err.message, "is sha256:1, not sha256:"));
	ck_assert(!egress_ready(d.egress));
	imp = find_request("POST", API "/images/load?quiet=1", 0);
	ck_assert_ptr_nonnull(imp);
	ck_assert_ptr_nonnull(strstr(imp->headers, "application/x-tar"));
	ck_assert_uint_gt(imp->body_len, 1024);   /* the image archive */
	msb_error_clear(&ensure_err);
}
END_TEST

/* ---- engine text never on the wire ------------------------------------------ */

#define SECRET_BODY "{\"message\":\"" SECRET "\"}"
#define NET_ABSENT { .method = "GET", .path = API "/networks/" NAME "-net", .status = 404, .body = "{\"message\":\"no\"}" }

/* Each engine failure the egress module turns into an acquire's error, with
 * a distinctive engine message: the code and a stable reason reach the
 * wire, the engine's text does not. */
static const struct engine_text_row {
	const char *what;
	const char *mode;
	struct fake_reply script[12];
	int code;
	const char *reason;   /* a substring of the stable message */
} engine_text_rows[] = {
	{ "the network listing", "inhibit", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = NULL /* image_current */ },
		NET_ABSENT,
		{ .method = "GET", .path = API "/networks", .status = 500, .body = SECRET_BODY },
	  }, MSB_ERR_ENGINE_ERROR, "could not list the engine's networks" },
	{ "a gateway option refused", "isolated", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = NULL },
		NET_ABSENT,
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
		{ .method = "POST", .path = API "/networks/create", .status = 400,
		  .body = "{\"message\":\"invalid gateway mode " SECRET "\"}" },
	  }, MSB_ERR_ENGINE_ERROR, "28.0.0" },
	{ "the proxy's outbound leg", "isolated", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = NULL },
		NET_ABSENT,
		{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
		{ .method = "POST", .path = API "/networks/create", .status = 201, .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\"}" },
		{ .method = "GET", .path = API "/networks/n1", .headers = JSON_TYPE,
		  .body = "{\"Id\":\"n1\",\"Driver\":\"bridge\",\"Internal\":true,\"Labels\":{\"maf-sandbox.owner\":\"0\"},"
			  "\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/28\"}]},"
			  "\"Options\":{\"com.docker.network.bridge.name\":\"msb0123456789ab\"}}" },
		{ .method = "GET", .path = API "/containers/" NAME "-proxy/json", .status = 404, .body = "{\"message\":\"no\"}" },
		{ .method = "POST", .path = API "/containers/create", .status = 201, .headers = JSON_TYPE,
		  .body = "{\"Id\":\"p1\"}" },
		{ .method = "POST", .path = API "/networks/bridge/connect", .status = 500, .body = SECRET_BODY },
		{ .method = "DELETE", .path = API "/containers/p1", .status = 204 },
		{ .method = "DELETE", .path = API "/networks/n1", .status = 204 },
	  }, MSB_ERR_ENGINE_ERROR, "outbound leg" },
	{ "the proxy image's inspect", "inhibit", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .status = 500, .body = SECRET_BODY },
	  }, MSB_ERR_EGRESS_NOT_ENFORCED, "HTTP 500" },
	{ "the proxy image's load", "inhibit", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"no such image\"}" },
		{ .method = "POST", .path = API "/images/load", .headers = JSON_TYPE,
		  .body = "{\"errorDetail\":{\"message\":\"" SECRET "\"},\"error\":\"" SECRET "\"}\n" },
	  }, MSB_ERR_EGRESS_NOT_ENFORCED, "refused it" },
	/* docker_image_load's other failures, each its own stable reason */
	{ "the proxy image's load: a malformed reply", "inhibit", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"no such image\"}" },
		{ .method = "POST", .path = API "/images/load", .headers = JSON_TYPE, .body = SECRET " not JSON\n" },
	  }, MSB_ERR_EGRESS_NOT_ENFORCED, "the engine's reply was unusable" },
	{ "the proxy image's load: cut after its 200", "inhibit", {
		PING, VERSION,
		{ .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"no such image\"}" },
		{ .method = "POST", .path = API "/images/load", .headers = JSON_TYPE, .chunked = true, .chunk_size = 16,
		  .close_after_bytes = 150,
		  .body = "{\"stream\":\"Loading layer 1/3\"}\n{\"stream\":\"Loading layer 2/3\"}\n"
			  "{\"stream\":\"Loading layer 3/3\"}\n{\"stream\":\"Loaded image\"}\n" },
	  }, MSB_ERR_EGRESS_NOT_ENFORCED, "connection broke during the load" },
};

START_TEST(engine_text_stays_in_the_log)
{
	const struct engine_text_row *row = &engine_text_rows[_i];
	struct fake_reply script[ELEMENTSOF(row->script)];
	size_t n = 0;

	for (; n < ELEMENTSOF(row->script) && row->script[n].path; n++) {
		script[n] = row->script[n];
		if (strcmp(script[n].path, API "/images/") == 0 && script[n].status == 0)
			script[n].body = image_current();
	}
	ensure_run(script, n, row->mode);
	ck_assert_msg(ensure_err.code == row->code, "%s: code %d: %s", row->what, ensure_err.code,
		      ensure_err.message);
	ck_assert_msg(strstr(ensure_err.message, row->reason), "%s: %s", row->what, ensure_err.message);
	assert_no_engine_text(&ensure_err);
	msb_error_clear(&ensure_err);
}
END_TEST

/* ---- every engine request of the ensure path, failing each way --------------- */

#define IMG_OK        { .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = NULL /* image_current */ }
#define IMG_ABSENT    { .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"no such image\"}" }
#define NET_LISTED    { .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" }
#define NET_CREATED   { .method = "POST", .path = API "/networks/create", .status = 201, .headers = JSON_TYPE, \
			.body = "{\"Id\":\"n1\"}" }
#define NET_VERIFIED  { .method = "GET", .path = API "/networks/n1", .headers = JSON_TYPE, \
	.body = "{\"Id\":\"n1\",\"Driver\":\"bridge\",\"Internal\":true,\"Labels\":{\"maf-sandbox.owner\":\"0\"}," \
		"\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/28\"}]}," \
		"\"Options\":{\"com.docker.network.bridge.name\":\"msb0123456789ab\"}}" }
#define PROXY_ABSENT  { .method = "GET", .path = API "/containers/" NAME "-proxy/json", .status = 404, \
			.body = "{\"message\":\"no\"}" }
#define PROXY_CREATED { .method = "POST", .path = API "/containers/create", .status = 201, .headers = JSON_TYPE, \
			.body = "{\"Id\":\"p1\"}" }
#define PROXY_CONNECTED { .method = "POST", .path = API "/networks/bridge/connect", .status = 200 }
/* a stopped proxy of another image: drained, then removed */
#define PROXY_STALE   { .method = "GET", .path = API "/containers/" NAME "-proxy/json", .headers = JSON_TYPE, \
	.body = "{\"Id\":\"" PROXY_ID "\",\"Name\":\"/" NAME "-proxy\",\"Image\":\"sha256:old\"," \
		"\"State\":{\"Running\":false},\"Config\":{\"Labels\":{" PROXY_LABELS "}}}" }
#define PROXY_LOGS    { .method = "GET", .path = API "/containers/" PROXY_ID "/logs", .body = "" }

/* The requests of egress_ensure, in order: each row reaches one with the
 * replies before it, and that one fails. */
static const struct ensure_step_row {
	const char *step;          /* a substring of the wire message */
	const char *method, *path; /* the request that fails */
	int code_refused;          /* its code when the engine refuses (HTTP 500) */
	int code_unusable;         /* ... when its reply is unusable (not HTTP) */
	struct fake_reply before[12];
} ensure_step_rows[] = {
	{ "proxy image", "GET", API "/images/", MSB_ERR_EGRESS_NOT_ENFORCED, MSB_ERR_EGRESS_NOT_ENFORCED,
	  { PING, VERSION } },
	{ "proxy image", "POST", API "/images/load", MSB_ERR_EGRESS_NOT_ENFORCED, MSB_ERR_EGRESS_NOT_ENFORCED,
	  { PING, VERSION, IMG_ABSENT } },
	{ "inspecting its network", "GET", API "/networks/" NAME "-net", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK } },
	{ "list the engine's networks", "GET", API "/networks", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT } },
	{ "creating its network", "POST", API "/networks/create", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED } },
	{ "reading its new network back", "GET", API "/networks/n1", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED } },
	{ "inspecting its proxy", "GET", API "/containers/" NAME "-proxy/json", MSB_ERR_ENGINE_ERROR,
	  MSB_ERR_ENGINE_ERROR, { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED, NET_VERIFIED } },
	{ "removing its old proxy", "DELETE", API "/containers/" PROXY_ID, MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED, NET_VERIFIED, PROXY_STALE, PROXY_INSPECT,
	    PROXY_STOP, PROXY_LOGS } },
	{ "creating its egress proxy", "POST", API "/containers/create", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED, NET_VERIFIED, PROXY_ABSENT } },
	{ "outbound leg", "POST", API "/networks/bridge/connect", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED, NET_VERIFIED, PROXY_ABSENT,
	    PROXY_CREATED } },
	{ "starting its egress proxy", "POST", API "/containers/p1/start", MSB_ERR_ENGINE_ERROR, MSB_ERR_ENGINE_ERROR,
	  { PING, VERSION, IMG_OK, NET_ABSENT, NET_LISTED, NET_CREATED, NET_VERIFIED, PROXY_ABSENT,
	    PROXY_CREATED, PROXY_CONNECTED } },
};

enum ensure_failure {
	FAIL_REFUSED,     /* HTTP 500 with Docker's {"message"}: EngineError (errmap) */
	FAIL_NO_ANSWER,   /* the connection closed with no reply: EngineUnavailable */
	FAIL_UNUSABLE,    /* not HTTP at all: an unusable reply, EngineError (errmap) */
	_FAIL_MAX,
};

/* The errnos a request without an HTTP reply can end with. */
static const int transport_errnos[] = { ECONNRESET, ECONNREFUSED, EPROTO, ETIMEDOUT, ENOTCONN, EPIPE, EMSGSIZE };

/* Was method path asked: exactly, its query aside (a prefix would take
 * GET /networks/NAME-net for GET /networks), or, for a path ending in '/'
 * (the image's, named by its reference), anything under it? */
static bool step_reached(const char *method, const char *path)
{
	size_t len = strlen(path);

	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const struct fake_request *r = fake_engine_request(i);

		if (strcmp(r->method, method) == 0 && strncmp(r->path, path, len) == 0 &&
		    (r->path[len] == '\0' || r->path[len] == '?' || path[len - 1] == '/'))
			return true;
	}
	return false;
}

/* Each request of the ensure path fails each way, the engine's text (in the
 * refusal's message, or the garbage it sent) distinctive: the wire error's
 * code is errmap's (the image's refusals: SandboxEgressNotEnforced, the
 * image cannot be made), its message names the sandbox and the step, and
 * holds none of the engine's text. */
START_TEST(each_ensure_request_fails_through_errmap)
{
	const struct ensure_step_row *row = &ensure_step_rows[_i / _FAIL_MAX];
	enum ensure_failure how = (enum ensure_failure)(_i % _FAIL_MAX);
	struct fake_reply script[ELEMENTSOF(row->before) + 1];
	struct fake_reply *fail;
	int want;
	size_t n = 0;

	for (; n < ELEMENTSOF(row->before) && row->before[n].path; n++) {
		script[n] = row->before[n];
		if (strcmp(script[n].path, API "/images/") == 0 && script[n].status == 0)
			script[n].body = image_current();
		/* each request on a connection of its own: libcurl sends a request
		 * again, once, when a reused connection closes with no reply */
		script[n].close = how == FAIL_NO_ANSWER;
	}
	fail = &script[n++];
	*fail = (struct fake_reply){ .method = row->method, .path = row->path };
	switch (how) {
	case FAIL_REFUSED:
		fail->status = 500;
		fail->headers = JSON_TYPE;
		fail->body = SECRET_BODY;
		want = row->code_refused;
		break;
	case FAIL_NO_ANSWER:
		fail->raw = "";
		want = MSB_ERR_ENGINE_UNAVAILABLE;
		break;
	default:
		fail->raw = SECRET " is not HTTP\r\n\r\n";
		want = row->code_unusable;
		break;
	}
	ensure_run(script, n, "isolated");
	ck_assert_msg(step_reached(row->method, row->path), "%s: its request was never made", row->step);
	ck_assert_msg(ensure_err.code == want, "%s, failure %d: code %d, not %d: %s", row->step, how, ensure_err.code,
		      want, ensure_err.message);
	ck_assert_ptr_nonnull(ensure_err.message);
	ck_assert_msg(strstr(ensure_err.message, NAME), "%s, failure %d: the sandbox is not named: %s", row->step,
		      how, ensure_err.message);
	ck_assert_msg(strstr(ensure_err.message, row->step), "%s, failure %d: the step is not named: %s", row->step,
		      how, ensure_err.message);
	assert_no_engine_text(&ensure_err);
	/* Nor the transport's words: a failure without an HTTP reply has no
	 * engine message, but its errno's text is not the daemon's either. */
	for (size_t k = 0; k < ELEMENTSOF(transport_errnos); k++)
		ck_assert_msg(!strstr(ensure_err.message, strerror(transport_errnos[k])),
			      "%s, failure %d: a transport error's text on the wire: %s", row->step, how,
			      ensure_err.message);
	/* The outcome, in the daemon's words. */
	if (how == FAIL_REFUSED && want == MSB_ERR_ENGINE_ERROR) {
		ck_assert_int_eq(json_integer_value(json_object_get(ensure_err.data, "engine_status")), 500);
		ck_assert_msg(strstr(ensure_err.message, "the engine refused (HTTP 500)"),
			      "%s: a refusal not said as one: %s", row->step, ensure_err.message);
	}
	if (how == FAIL_UNUSABLE && want == MSB_ERR_ENGINE_ERROR)
		ck_assert_msg(strstr(ensure_err.message, "unusable"), "%s: an unusable reply not said as one: %s",
			      row->step, ensure_err.message);
	msb_error_clear(&ensure_err);
}
END_TEST

/* ---- root's key space shares one topology ----------------------------------- */

static int acquired;
static json_t *acquire_answer;

static void acquire_done_cb(struct rpc_call *call, json_t *reply, void *arg)
{
	(void)call, (void)arg;
	json_decref(acquire_answer);
	acquire_answer = reply;
	acquired++;
}

#define SHARED_ACQUIRE \
	"{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}," \
	"\"spec\":{\"kind\":\"k\",\"image\":\"x:1\",\"requires\":[],\"egress\":\"allowlist\"," \
	"\"egress_allow\":[\"a.test\"]}}"

/* Root's allowlisted sandbox runs; its proxy is not followed (down, or a
 * restarted daemon). An administrator (uid 4242, root's key space)
 * acquires it: the topology is the workload's, owned by root, so the
 * network root made is usable (row 0: it is not refused for its owner
 * label), and one made anew is labelled root's (row 1), not the caller's. */
START_TEST(admin_shares_roots_allowlisted_sandbox)
{
	const bool net_exists = _i == 0;
	struct msb_key key = { .scope = "s", .thread_id = "t", .agent_dir = "a", .call_id = "" };
	const char *frame = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.acquire\",\"params\":"
			    SHARED_ACQUIRE "}";
	_cleanup_free_ char *egress_id = NULL;
	char name[NAMES_CONTAINER_MAX], bridge[IFNAMSIZ], cpath[192], npath[192], cbody[1024], nbody[512];
	struct rpc_peer peer = { .pid = 1, .uid = 4242, .gid = 4242, .admin = true };
	static const struct rpc_call_ops ops = { .done = acquire_done_cb };
	struct msbd md;
	struct jsonrpc_request req;
	struct msb_spec spec;
	json_auto_t *params = NULL;
	json_t *perr = NULL;
	const json_t *e;
	const char *field;
	char *msg = NULL;
	const struct fake_request *create;

	params = json_loads(SHARED_ACQUIRE, 0, NULL);
	ck_assert_ptr_nonnull(params);
	ck_assert_int_eq(msb_spec_decode(json_object_get(params, "spec"), &spec, &field, &msg), 0);
	egress_id = names_egress_id(&spec, true);
	msb_spec_release(&spec);
	names_container_ns(&key, "k", egress_id, NAMES_SEED_UID, name);
	bridgecheck_name(name, bridge);
	snprintf(cpath, sizeof(cpath), API "/containers/%s/json", name);
	snprintf(cbody, sizeof(cbody),
		 "{\"Id\":\"" PROXY_ID "b\",\"Name\":\"/%s\",\"State\":{\"Status\":\"running\",\"Running\":true},"
		 "\"Config\":{\"Image\":\"x:1\",\"Labels\":{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\","
		 "\"maf-sandbox.agent\":\"a\",\"maf-sandbox.kind\":\"k\",\"maf-sandbox.owner\":\"0\","
		 "\"maf-sandbox.egress\":\"allowlist\",\"maf-sandbox.work-dir.v1\":\"/maf-sandbox/work\"}}}", name);
	snprintf(npath, sizeof(npath), API "/networks/%s-net", name);
	snprintf(nbody, sizeof(nbody),
		 "{\"Id\":\"n1\",\"Driver\":\"bridge\",\"Internal\":true,\"Labels\":{\"maf-sandbox.owner\":\"0\"},"
		 "\"IPAM\":{\"Config\":[{\"Subnet\":\"10.213.0.0/28\"}]},"
		 "\"Options\":{\"com.docker.network.bridge.name\":\"%s\"}}", bridge);
	{
		struct fake_reply script[] = {
			PING, VERSION,
			{ .method = "GET", .path = cpath, .headers = JSON_TYPE, .body = cbody },
			{ .method = "GET", .path = API "/images/", .headers = JSON_TYPE, .body = image_current() },
			net_exists ? (struct fake_reply){ .method = "GET", .path = npath, .headers = JSON_TYPE, .body = nbody }
				   : (struct fake_reply){ .method = "GET", .path = npath, .status = 404,
							  .body = "{\"message\":\"no\"}" },
			{ .method = "GET", .path = API "/networks", .headers = JSON_TYPE, .body = "[]" },
			{ .method = "POST", .path = API "/networks/create", .status = 201, .headers = JSON_TYPE,
			  .body = "{\"Id\":\"n1\"}" },
			{ .method = "GET", .path = API "/networks/n1", .headers = JSON_TYPE, .body = nbody },
			{ .method = "DELETE", .path = API "/networks/n1", .status = 204 },
		};

		d.registry = registry_new();
		d.acquires = acquire_table_new();
		d.egress = egress_new(&d);
		loop_engine_start_reachable(base, engine, &reachable_count, script, ELEMENTSOF(script), RUN_MAX_MS);
		/* The handler's context is the daemon, around this domain (its
		 * registry not synced: the cold path). */
		md = (struct msbd){ .dom = d };
		ck_assert_int_eq(jsonrpc_request_parse(frame, strlen(frame), &req, &perr), 0);
		acquired = 0;
		(void)rpc_dispatch(msbd_methods, msbd_n_methods, &req, &peer, &md, &ops, NULL);
		jsonrpc_request_release(&req);
		loop_run_until(base, &acquired, 1, RUN_MAX_MS);
		ck_assert_int_eq(acquired, 1);
		fake_engine_stop();   /* script is on this stack (the records stay) */
	}
	/* The host has no such bridge, so the network fails its check; what
	 * matters is why: never the owner label. */
	e = json_object_get(acquire_answer, "error");
	if (e)
		ck_assert_msg(!strstr(json_string_value(json_object_get(e, "message")), "owner label"), "%s",
			      json_string_value(json_object_get(e, "message")));
	ck_assert_ptr_nonnull(find_request("GET", npath, 0));
	create = find_request("POST", API "/networks/create", 0);
	if (net_exists) {
		ck_assert_ptr_null(create);
	} else {
		json_auto_t *body = NULL;

		ck_assert_ptr_nonnull(create);
		body = json_loads(create->body, 0, NULL);
		ck_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "Labels"), "maf-sandbox.owner")),
				 "0");
	}
	json_decref(acquire_answer);
	acquire_answer = NULL;
	d.egress = egress_free(d.egress);
	engine = engine_free(engine);
	loop_run_until(base, NULL, 0, 20);
	d.acquires = acquire_table_free(d.acquires);
	d.registry = registry_free(d.registry);
}
END_TEST

static Suite *egress_suite(void)
{
	Suite *s = suite_create("egress");
	TCase *tc = tcase_create("decisions");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, drain_publishes_once_across_restarts);
	tcase_add_test(tc, drain_of_an_absent_proxy_publishes_nothing);
	tcase_add_test(tc, drain_of_a_flood_is_coalesced_and_paced);
	tcase_add_test(tc, removed_while_holding_leaves_no_cursor);
	tcase_add_test(tc, allow_flood_is_not_logged_line_by_line);
	suite_add_tcase(s, tc);
	tc = tcase_create("topology");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, unverifiable_network_is_removed_and_refused);
	tcase_add_test(tc, isolated_with_a_gateway_is_refused);
	tcase_add_test(tc, overlapping_subnet_takes_the_next_block);
	tcase_add_test(tc, absent_image_is_loaded_and_checked);
	tcase_add_test(tc, full_pool_is_read_again);
	tcase_add_loop_test(tc, engine_text_stays_in_the_log, 0, ELEMENTSOF(engine_text_rows));
	tcase_add_loop_test(tc, each_ensure_request_fails_through_errmap, 0,
			    (int)(ELEMENTSOF(ensure_step_rows) * _FAIL_MAX));
	tcase_add_loop_test(tc, admin_shares_roots_allowlisted_sandbox, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	fake_run_dir_create("check_egress");
	sr = srunner_create(egress_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
