/* check_wire_errors.c — the daemon's methods against the fake engine, for
 * the two promises of issue 17's findings 11 and 12:
 *
 *   - engine text never reaches the wire: every engine failure below carries
 *     a distinctive message (SECRET), and the answer the client gets (error
 *     object or disposal/reap result) holds the code and a stable reason
 *     only, while the daemon's log has the engine's text;
 *   - keys are per owner: an acquire asks the engine for the caller's own
 *     name (root and administrators: the seed's name; anyone else: one with
 *     its uid in the digest), so one user's key never meets another's
 *     container.
 *
 * Calls go through rpc_dispatch with the daemon's own method table, as the
 * server sends them. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "acquire.h"
#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "engine.h"
#include "fake_engine.h"
#include "jsonrpc.h"
#include "log.h"
#include "loop.h"
#include "names.h"
#include "registry.h"
#include "rpc.h"
#include "xmalloc.h"

#define RUN_MAX_MS 3000
#define API        "/v1.41"
#define JSON_TYPE  "Content-Type: application/json\r\n"
#define PING    { .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .repeat = true, \
		  .body = "{\"Version\":\"20.10.24\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\"}" }
/* What an engine might say: a registry, a resolver, an address of the host. */
#define SECRET      "SECRET-ENGINE-TEXT 10.0.0.53"
#define SECRET_BODY "{\"message\":\"" SECRET "\"}"
#define IMAGE       "127.0.0.1:1/msb-unit/missing:1"
#define ID16(c)     c c c c c c c c c c c c c c c c
#define ID(c)       ID16(c) ID16(c) ID16(c) ID16(c)
#define USER_UID    1000

static struct event_base *base;
static struct engine *engine;
static struct msbd d;
static int reachable_count;
static int answered;
static json_t *answer;   /* the last reply frame */

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

static void setup(void)
{
	reachable_count = 0;
	answered = 0;
	answer = NULL;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
	memset(&d, 0, sizeof(d));
	d.base = base;
	d.engine = engine;
	d.config = config_new_defaults();
	d.registry = registry_new();
	d.acquires = acquire_table_new();
	log_set_debug(true);
}

static void teardown(void)
{
	engine = engine_free(engine);      /* cancels what is in flight */
	loop_run_until(base, NULL, 0, 20); /* ops complete from the loop */
	d.acquires = acquire_table_free(d.acquires);
	d.registry = registry_free(d.registry);
	d.config = config_free(d.config);
	json_decref(answer);
	event_base_free(base);
	fake_engine_cleanup();
}

static void done_cb(struct rpc_call *call, json_t *reply, void *arg)
{
	(void)call, (void)arg;
	json_decref(answer);
	answer = reply;
	answered++;
}

static const struct rpc_call_ops ops = { .done = done_cb };

/* Sends method(params) as peer uid (admin: root or sandbox.admin_group)
 * and runs the loop until it is answered. The script must keep the engine
 * reachable (PING, VERSION). */
static void call_as(uid_t uid, bool admin, const char *method, const char *params)
{
	_cleanup_free_ char *frame = xasprintf("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
					      method, params);
	struct rpc_peer peer = { .pid = 1, .uid = uid, .gid = uid, .admin = admin };
	struct jsonrpc_request req;
	json_t *err = NULL;

	ck_assert_int_eq(jsonrpc_request_parse(frame, strlen(frame), &req, &err), 0);
	answered = 0;
	(void)rpc_dispatch(msbd_methods, msbd_n_methods, &req, &peer, &d, &ops, NULL);
	jsonrpc_request_release(&req);
	loop_run_until(base, &answered, 1, RUN_MAX_MS);
	ck_assert_int_eq(answered, 1);
	ck_assert_ptr_nonnull(answer);
}

static void serve(const struct fake_reply *script, size_t n)
{
	loop_engine_start_reachable(base, engine, &reachable_count, script, n, RUN_MAX_MS);
	loop_log_capture_start();
}

/* The answer, whole, holds none of the engine's text; the log does. */
static void assert_engine_text_logged_only(void)
{
	_cleanup_free_ char *wire = json_dumps(answer, JSON_COMPACT);
	bool logged = strstr(loop_logged(), SECRET) != NULL;

	loop_log_capture_stop();
	ck_assert_ptr_nonnull(wire);
	ck_assert_msg(!strstr(wire, "SECRET-ENGINE-TEXT") && !strstr(wire, "10.0.0.53"),
		      "engine text on the wire: %s", wire);
	ck_assert_msg(logged, "the engine's text is not in the log");
}

static const json_t *error_of(void)
{
	const json_t *e = json_object_get(answer, "error");

	ck_assert_msg(e != NULL, "not an error: %s", json_dumps(answer, JSON_COMPACT));
	return e;
}

/* ---- a failed pull ------------------------------------------------------------ */

#define ACQUIRE_PARAMS \
	"{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}," \
	"\"spec\":{\"kind\":\"k\",\"image\":\"" IMAGE "\",\"requires\":[]}}"
#define TO_PULL \
	PING, VERSION, \
	{ .method = "GET", .path = API "/containers/", .status = 404, .body = "{\"message\":\"No such container\"}" }, \
	{ .method = "GET", .path = API "/images/", .status = 404, .body = "{\"message\":\"No such image\"}" }

static const struct pull_row {
	const char *what;
	struct fake_reply pull;
	int code;
	const char *reason;   /* a substring of the stable message */
	int engine_status;    /* data.engine_status; 0: absent */
} pull_rows[] = {
	{ "a 404", { .method = "POST", .path = API "/images/create", .status = 404, .body = SECRET_BODY },
	  1001, "image not found: " IMAGE " (pull it or check the name)", 404 },
	{ "a 500 (the registry unreachable)",
	  { .method = "POST", .path = API "/images/create", .status = 500, .body = SECRET_BODY },
	  1001, "image could not be pulled: " IMAGE, 500 },
	{ "an in-band error", { .method = "POST", .path = API "/images/create", .headers = JSON_TYPE,
	  .body = "{\"status\":\"Pulling\"}\n{\"errorDetail\":{\"message\":\"" SECRET "\"},\"error\":\"" SECRET "\"}\n" },
	  1001, "image could not be pulled: " IMAGE, 200 },
	/* repeat: libcurl retries once on a fresh connection when a reused one dies */
	{ "the connection dropped", { .method = "POST", .path = API "/images/create", .raw = "", .repeat = true },
	  1000, "could not be reached while pulling image " IMAGE, 0 },
};

START_TEST(test_pull_failure)
{
	const struct pull_row *row = &pull_rows[_i];
	const struct fake_reply script[] = { TO_PULL, row->pull };
	const json_t *e, *data;

	serve(script, ELEMENTSOF(script));
	call_as(USER_UID, false, "sandbox.acquire", ACQUIRE_PARAMS);
	e = error_of();
	data = json_object_get(e, "data");
	ck_assert_msg(json_integer_value(json_object_get(e, "code")) == row->code, "%s: %s", row->what,
		      json_dumps(e, JSON_COMPACT));
	ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), row->reason), "%s: %s", row->what,
		      json_string_value(json_object_get(e, "message")));
	ck_assert_str_eq(json_string_value(json_object_get(data, "image")), IMAGE);
	ck_assert_int_eq(json_integer_value(json_object_get(data, "engine_status")), row->engine_status);
	if (row->pull.raw)
		loop_log_capture_stop();   /* nothing came back: no engine text at all */
	else
		assert_engine_text_logged_only();
}
END_TEST

/* ---- key spaces --------------------------------------------------------------- */

/* The name an acquire asked the engine about (its first container inspect). */
static const char *inspected_name(void)
{
	static char name[NAMES_CONTAINER_MAX];
	const char *prefix = API "/containers/";

	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const struct fake_request *r = fake_engine_request(i);

		if (strcmp(r->method, "GET") == 0 && strncmp(r->path, prefix, strlen(prefix)) == 0) {
			snprintf(name, sizeof(name), "%.*s", (int)strcspn(r->path + strlen(prefix), "/"),
				 r->path + strlen(prefix));
			return name;
		}
	}
	ck_abort_msg("no container was inspected");
	return NULL;
}

static const struct space_row {
	uid_t uid;
	bool admin;
	uid_t space;   /* the key space its name must be in */
} space_rows[] = {
	{ 0, true, 0 },                   /* root: the seed's names */
	{ 4242, true, 0 },                /* sandbox.admin_group: acting for root */
	{ USER_UID, false, USER_UID },    /* a user: its own */
	{ USER_UID + 1, false, USER_UID + 1 },
};

START_TEST(test_acquire_names_its_callers_key_space)
{
	const struct space_row *row = &space_rows[_i];
	const struct fake_reply script[] = {
		TO_PULL, { .method = "POST", .path = API "/images/create", .status = 404, .body = SECRET_BODY },
	};
	struct msb_key key = { .scope = "s", .thread_id = "t", .agent_dir = "a", .call_id = "" };
	char want[NAMES_CONTAINER_MAX], seed[NAMES_CONTAINER_MAX];

	serve(script, ELEMENTSOF(script));
	call_as(row->uid, row->admin, "sandbox.acquire", ACQUIRE_PARAMS);
	loop_log_capture_stop();
	names_container_ns(&key, "k", "", row->space, want);
	names_container(&key, "k", "", seed);
	ck_assert_str_eq(inspected_name(), want);
	if (row->space == 0)
		ck_assert_str_eq(inspected_name(), seed);
	else
		ck_assert_str_ne(inspected_name(), seed);
}
END_TEST

/* ---- disposals and reap ------------------------------------------------------- */

#define OWNER_LABELS \
	"\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\",\"maf-sandbox.agent\":\"a\"," \
	"\"maf-sandbox.kind\":\"k\",\"maf-sandbox.owner\":\"1000\""

START_TEST(test_dispose_refused)
{
	const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/containers/json", .headers = JSON_TYPE,
		  .body = "[{\"Id\":\"" ID("a") "\",\"Names\":[\"/maf-sandbox-docker-aaaaaaaaaaaa\"],"
			  "\"Labels\":{" OWNER_LABELS "}}]" },
		{ .method = "DELETE", .path = API "/containers/" ID("a"), .status = 500, .body = SECRET_BODY },
	};
	const json_t *res;

	serve(script, ELEMENTSOF(script));
	call_as(USER_UID, false, "sandbox.dispose", "{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}}");
	res = json_object_get(answer, "result");
	ck_assert_str_eq(json_string_value(json_object_get(res, "code")), "refused");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(res, "detail")), "HTTP 500"));
	assert_engine_text_logged_only();
}
END_TEST

START_TEST(test_dispose_instance_refused)
{
	const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/containers/" ID("b") "/json", .headers = JSON_TYPE,
		  .body = "{\"Id\":\"" ID("b") "\",\"Name\":\"/maf-sandbox-docker-bbbbbbbbbbbb\","
			  "\"Config\":{\"Labels\":{" OWNER_LABELS "}}}" },
		{ .method = "DELETE", .path = API "/containers/" ID("b"), .status = 500, .body = SECRET_BODY },
	};
	const json_t *res;

	serve(script, ELEMENTSOF(script));
	call_as(USER_UID, false, "sandbox.dispose",
		"{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"},\"sandbox\":\"" ID("b") "\"}");
	res = json_object_get(answer, "result");
	ck_assert_str_eq(json_string_value(json_object_get(res, "code")), "refused");
	assert_engine_text_logged_only();
}
END_TEST

START_TEST(test_reap_unlisted)
{
	const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/containers/json", .status = 500, .body = SECRET_BODY },
	};
	const json_t *failure;

	serve(script, ELEMENTSOF(script));
	call_as(0, true, "sandbox.reap", "{\"older_than_seconds\":60}");
	failure = json_array_get(json_object_get(json_object_get(answer, "result"), "failures"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(failure, "code")), "unlisted");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(failure, "detail")), "HTTP 500"));
	assert_engine_text_logged_only();
}
END_TEST

static Suite *wire_errors_suite(void)
{
	Suite *s = suite_create("wire_errors");
	TCase *tc = tcase_create("engine_text");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_pull_failure, 0, ELEMENTSOF(pull_rows));
	tcase_add_test(tc, test_dispose_refused);
	tcase_add_test(tc, test_dispose_instance_refused);
	tcase_add_test(tc, test_reap_unlisted);
	suite_add_tcase(s, tc);
	tc = tcase_create("key_spaces");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_acquire_names_its_callers_key_space, 0, ELEMENTSOF(space_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	fake_run_dir_create("check_wire_errors");
	sr = srunner_create(wire_errors_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
