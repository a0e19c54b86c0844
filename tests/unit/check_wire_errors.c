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

#define RUN_MAX_MS 3000   /* hang guard: the longest a wait for a callback lasts (stretched) */
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
	d.dom.base = base;
	d.dom.engine = engine;
	d.dom.config = config_new_defaults();
	d.dom.registry = registry_new();
	d.dom.acquires = acquire_table_new();
	msbd_wire_domain(&d);
	log_set_debug(true);
}

static void teardown(void)
{
	engine = engine_free(engine);      /* cancels what is in flight */
	loop_run_until(base, NULL, 0, 20); /* ops complete from the loop */
	d.dom.acquires = acquire_table_free(d.dom.acquires);
	d.dom.registry = registry_free(d.dom.registry);
	d.dom.config = config_free(d.dom.config);
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
	const char *transport_text;   /* libc's or libcurl's text: in the log, not on the wire */
} pull_rows[] = {
	{ "a 404", { .method = "POST", .path = API "/images/create", .status = 404, .body = SECRET_BODY },
	  1001, "image not found: " IMAGE " (pull it or check the name)", 404, NULL },
	{ "a 500 (the registry unreachable)",
	  { .method = "POST", .path = API "/images/create", .status = 500, .body = SECRET_BODY },
	  1001, "image could not be pulled: " IMAGE, 500, NULL },
	{ "an in-band error", { .method = "POST", .path = API "/images/create", .headers = JSON_TYPE,
	  .body = "{\"status\":\"Pulling\"}\n{\"errorDetail\":{\"message\":\"" SECRET "\"},\"error\":\"" SECRET "\"}\n" },
	  1001, "image could not be pulled: " IMAGE, 200, NULL },
	/* repeat: libcurl retries once on a fresh connection when a reused one dies */
	{ "the connection dropped", { .method = "POST", .path = API "/images/create", .raw = "", .repeat = true },
	  1000, "could not be reached while pulling image " IMAGE, 0, "Empty reply from server" },
	/* the engine answered 200, then the stream broke: not an engine never reached */
	{ "the stream cut after its 200", { .method = "POST", .path = API "/images/create", .headers = JSON_TYPE,
	  .chunked = true, .chunk_size = 16, .close_after_bytes = 150,
	  .body = "{\"status\":\"Pulling fs layer\",\"id\":\"a1\"}\n{\"status\":\"Downloading\",\"id\":\"a1\"}\n"
		  "{\"status\":\"Download complete\",\"id\":\"a1\"}\n{\"status\":\"Pull complete\",\"id\":\"a1\"}\n" },
	  1001, "image could not be pulled: " IMAGE " (the pull was cut short", 0, "transfer closed" },
};

/* Text libc or libcurl gives for a broken transfer: never on the wire. */
static const char *const transport_texts[] = {
	"Connection reset", "reset by peer", "Empty reply", "transfer closed", "Recv failure",
	"Connection refused", "connection abort", "Server returned nothing",
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
	if (row->engine_status)
		ck_assert_int_eq(json_integer_value(json_object_get(data, "engine_status")), row->engine_status);
	else
		ck_assert_msg(!json_object_get(data, "engine_status"), "%s: %s", row->what, json_dumps(e, JSON_COMPACT));
	if (row->transport_text) {
		/* nothing the engine said came back: libc's and libcurl's text instead */
		_cleanup_free_ char *wire = json_dumps(answer, JSON_COMPACT);

		ck_assert_msg(strstr(loop_logged(), row->transport_text), "%s: not logged: %s", row->what,
			      loop_logged());
		loop_log_capture_stop();
		for (size_t i = 0; i < ELEMENTSOF(transport_texts); i++)
			ck_assert_msg(!strstr(wire, transport_texts[i]), "%s: transport text on the wire: %s", row->what,
				      wire);
	} else {
		assert_engine_text_logged_only();
	}
	fake_engine_stop();   /* the script lives on this stack */
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
	fake_engine_stop();   /* the script lives on this stack */
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
	fake_engine_stop();   /* the script lives on this stack */
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
	fake_engine_stop();   /* the script lives on this stack */
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
	fake_engine_stop();   /* the script lives on this stack */
}
END_TEST

/* A reap that cannot start is the engine's failure, never a params error
 * with strerror text (here: the engine never reached, -ENOTCONN). Other
 * start failures (a request libcurl cannot set up) take the same errmap
 * path; nothing on the wire can provoke them. */
START_TEST(test_reap_cannot_start)
{
	const json_t *e;
	_cleanup_free_ char *wire = NULL;

	call_as(0, true, "sandbox.reap", "{\"older_than_seconds\":60}");
	e = error_of();
	wire = json_dumps(answer, JSON_COMPACT);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 1000);
	ck_assert_ptr_null(json_object_get(json_object_get(e, "data"), "field"));
	ck_assert_msg(!strstr(wire, "older_than_seconds") && !strstr(wire, "not connected"), "%s", wire);
}
END_TEST

/* ---- root's key space: whose container root and administrators are served ------ */

/* A container under the seed's name for the key, running, owned by owner
 * (NULL: no label, as the seed makes them). */
static const struct root_space_row {
	const char *what;
	uid_t uid;
	const char *admin_group;   /* sandbox.admin_group, or NULL */
	const char *owner;         /* the container's owner label */
	bool served;
} root_space_rows[] = {
	{ "root, a user's from before per-owner keys", 0, NULL, "1000", false },
	{ "an administrator, a user's", 4242, NULL, "1000", false },
	{ "root, a former administrator's (left sandbox.admin_group)", 0, NULL, "1", false },
	{ "root, an unreadable owner", 0, NULL, "1000x", false },
	{ "root, the seed's (no owner)", 0, NULL, NULL, true },
	{ "an administrator, root's", 4242, NULL, "0", true },
	{ "an administrator, its own", 4242, NULL, "4242", true },
	{ "root, a current administrator's (uid 1 in group daemon)", 0, "daemon", "1", true },
};

START_TEST(test_root_space_serves_only_roots)
{
	const struct root_space_row *row = &root_space_rows[_i];
	struct msb_key key = { .scope = "s", .thread_id = "t", .agent_dir = "a", .call_id = "" };
	char seed[NAMES_CONTAINER_MAX], path[128], body[1024], owner[64] = "";
	struct fake_reply script[3] = { PING, VERSION };
	const json_t *e;

	if (row->admin_group)
		d.dom.config->admin_group = xstrdup(row->admin_group);
	names_container(&key, "k", "", seed);
	if (row->owner)
		snprintf(owner, sizeof(owner), ",\"maf-sandbox.owner\":\"%s\"", row->owner);
	snprintf(path, sizeof(path), API "/containers/%s/json", seed);
	snprintf(body, sizeof(body),
		 "{\"Id\":\"" ID("c") "\",\"Name\":\"/%s\",\"State\":{\"Status\":\"running\",\"Running\":true},"
		 "\"Config\":{\"Image\":\"" IMAGE "\",\"Labels\":{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\","
		 "\"maf-sandbox.agent\":\"a\",\"maf-sandbox.kind\":\"k\"%s,"
		 "\"maf-sandbox.work-dir.v1\":\"/maf-sandbox/work\"}}}", seed, owner);
	script[2] = (struct fake_reply){ .method = "GET", .path = path, .headers = JSON_TYPE, .body = body };
	serve(script, ELEMENTSOF(script));
	call_as(row->uid, true, "sandbox.acquire", ACQUIRE_PARAMS);
	loop_log_capture_stop();
	ck_assert_str_eq(inspected_name(), seed);
	fake_engine_stop();   /* the script lives on this stack */
	if (row->served) {
		const json_t *res = json_object_get(answer, "result");

		ck_assert_msg(res, "%s: not served: %s", row->what, json_dumps(answer, JSON_COMPACT));
		ck_assert_str_eq(json_string_value(json_object_get(res, "sandbox")), ID("c"));
		return;
	}
	ck_assert_msg(!json_object_get(answer, "result"), "%s: served: %s", row->what,
		      json_dumps(answer, JSON_COMPACT));
	e = error_of();
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 1106);
	ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), "dispose"), "%s",
		      json_string_value(json_object_get(e, "message")));
	if (strcmp(row->owner, "1000x") == 0) {
		ck_assert_ptr_null(json_object_get(json_object_get(e, "data"), "owner"));
	} else {
		ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(e, "data"), "owner")),
				 strtol(row->owner, NULL, 10));
		ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(e, "message")), row->owner));
	}
}
END_TEST

/* ---- naming a sandbox (PROTOCOL.md "Naming a sandbox") -------------------------- */

/* Three sandboxes whose ids share their first 12 hex digits: two of
 * USER_UID, one of another uid (never matched, counted or listed for
 * USER_UID). Ids are the engine's random ones in life: crafted here, so an
 * ambiguous prefix is deterministic. */
#define SHARED      "abcdef012345"
#define NM_ID1      SHARED "1111111111111111111111111111111111111111111111111111"
#define NM_ID2      SHARED "2222222222222222222222222222222222222222222222222222"
#define NM_THEIRS   SHARED "3333333333333333333333333333333333333333333333333333"
#define NM_NAME1    "maf-sandbox-docker-111111111111"
#define NM_NAME2    "maf-sandbox-docker-222222222222"
#define NM_NAME_THEIRS "maf-sandbox-docker-333333333333"
#define NM_KEY      "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}"

static void naming_registry(void)
{
	static const char *const rows[][3] = {
		{ NM_ID1, NM_NAME1, "1000" }, { NM_THEIRS, NM_NAME_THEIRS, "2000" }, { NM_ID2, NM_NAME2, "1000" },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		json_t *item = json_pack("{s:s, s:[s+], s:{s:s, s:s, s:s, s:s, s:s}, s:s}", "Id", rows[i][0],
					 "Names", "/", rows[i][1], "Labels", "maf-sandbox.scope", "s",
					 "maf-sandbox.thread", "t", "maf-sandbox.agent", "a", "maf-sandbox.kind", "k",
					 "maf-sandbox.owner", rows[i][2], "State", "running");

		ck_assert_ptr_nonnull(registry_update_from_summary(d.dom.registry, item));
		json_decref(item);
	}
	d.dom.registry_synced = true;
}

/* The params of each method that names a sandbox, around SANDBOX. */
static const char *const naming_calls[][2] = {
	{ "files.stat", "{\"sandbox\":\"%s\",\"path\":\"x\"}" },
	{ "files.read", "{\"sandbox\":\"%s\",\"path\":\"x\"}" },
	{ "files.remove", "{\"sandbox\":\"%s\",\"path\":\"x\"}" },
	{ "sandbox.exec", "{\"sandbox\":\"%s\",\"command\":\"true\",\"timeout_seconds\":5}" },
	{ "sandbox.dispose", "{\"key\":" NM_KEY ",\"sandbox\":\"%s\"}" },
};

static void call_naming(size_t which, const char *sandbox)
{
	const char *tpl = naming_calls[which][1], *at = strstr(tpl, "%s");
	_cleanup_free_ char *params = xasprintf("%.*s%s%s", (int)(at - tpl), tpl, sandbox, at + 2);

	call_as(USER_UID, false, naming_calls[which][0], params);
}

/* An ambiguous prefix: InvalidParams naming the field, listing the
 * caller's candidates (never another's) and how many. */
START_TEST(test_an_ambiguous_prefix_lists_the_candidates)
{
	const struct fake_reply script[] = { PING, VERSION };
	const json_t *e, *data, *cands;
	_cleanup_free_ char *wire = NULL;
	const char *msg;

	naming_registry();
	serve(script, ELEMENTSOF(script));
	call_naming((size_t)_i, SHARED);
	loop_log_capture_stop();
	fake_engine_stop();
	e = error_of();
	data = json_object_get(e, "data");
	msg = json_string_value(json_object_get(e, "message"));
	wire = json_dumps(answer, JSON_COMPACT);
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), -32602);
	ck_assert_str_eq(json_string_value(json_object_get(data, "field")), "sandbox");
	ck_assert_int_eq(json_integer_value(json_object_get(data, "matches")), 2);
	cands = json_object_get(data, "candidates");
	ck_assert_uint_eq(json_array_size(cands), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cands, 0), "sandbox")), NM_ID1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cands, 0), "name")), NM_NAME1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cands, 1), "sandbox")), NM_ID2);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cands, 1), "name")), NM_NAME2);
	ck_assert_msg(strstr(msg, NM_NAME1) && strstr(msg, NM_NAME2) && strstr(msg, "give more digits or the name"),
		      "%s", msg);
	ck_assert_msg(!strstr(wire, NM_THEIRS) && !strstr(wire, NM_NAME_THEIRS), "another's sandbox told: %s", wire);
}
END_TEST

/* Nothing the caller may reach: SandboxNotFound naming what was given
 * and how to list; another user's name, id or unique prefix answer
 * exactly as a name nobody has. sandbox.dispose: null (idempotent). */
static const char *const not_found_rows[] = {
	"maf-sandbox-docker-999999999999", NM_NAME_THEIRS, "/" NM_NAME_THEIRS, NM_THEIRS, SHARED "3",
};

START_TEST(test_nothing_reachable_is_not_found)
{
	const struct fake_reply script[] = { PING, VERSION };
	const char *given = not_found_rows[_i];

	naming_registry();
	serve(script, ELEMENTSOF(script));
	for (size_t m = 0; m < ELEMENTSOF(naming_calls); m++) {
		const json_t *e, *data;
		const char *msg;

		call_naming(m, given);
		if (strcmp(naming_calls[m][0], "sandbox.dispose") == 0) {
			ck_assert_msg(json_is_null(json_object_get(answer, "result")), "dispose %s: %s", given,
				      json_dumps(answer, JSON_COMPACT));
			continue;
		}
		e = error_of();
		data = json_object_get(e, "data");
		msg = json_string_value(json_object_get(e, "message"));
		ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 1206);
		ck_assert_str_eq(json_string_value(json_object_get(data, "sandbox")), given);
		ck_assert_msg(strstr(msg, given) && strstr(msg, "maf-sandbox ls"), "%s", msg);
		/* the same words for another's as for nobody's */
		ck_assert_uint_eq(json_object_size(data), 2);   /* type, sandbox */
	}
	loop_log_capture_stop();
	fake_engine_stop();
}
END_TEST

/* Too few hex digits to be a prefix: InvalidParams naming the rule. */
START_TEST(test_too_few_digits_name_the_rule)
{
	const struct fake_reply script[] = { PING, VERSION };
	static const char *const given[] = { "abc", "bcdef012345", "" };

	naming_registry();
	serve(script, ELEMENTSOF(script));
	for (size_t g = 0; g < ELEMENTSOF(given); g++)
		for (size_t m = 0; m < ELEMENTSOF(naming_calls); m++) {
			const json_t *e;

			call_naming(m, given[g]);
			e = error_of();
			ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), -32602);
			ck_assert_str_eq(json_string_value(json_object_get(json_object_get(e, "data"), "field")), "sandbox");
			ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), "12 hex digits"), "%s",
				      json_string_value(json_object_get(e, "message")));
		}
	loop_log_capture_stop();
	fake_engine_stop();
}
END_TEST

/* What was given is echoed cut at 128 bytes and escaped. */
START_TEST(test_what_was_given_is_cut_and_escaped)
{
	const struct fake_reply script[] = { PING, VERSION };
	char long_name[300];
	const json_t *e;
	const char *msg;

	naming_registry();
	serve(script, ELEMENTSOF(script));
	memset(long_name, 'z', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	call_naming(0, long_name);
	e = error_of();
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 1206);
	ck_assert_uint_eq(strlen(json_string_value(json_object_get(json_object_get(e, "data"), "sandbox"))), 128);
	call_naming(0, "a\\u0007b");
	e = error_of();
	msg = json_string_value(json_object_get(e, "message"));
	ck_assert_msg(strstr(msg, "\"a\\u0007b\"") && !strchr(msg, '\a'), "%s", msg);
	loop_log_capture_stop();
	fake_engine_stop();
}
END_TEST

/* The registry not read yet: EngineUnavailable, as before names. */
START_TEST(test_an_unread_registry_is_engine_unavailable)
{
	const struct fake_reply script[] = { PING, VERSION };

	naming_registry();
	d.dom.registry_synced = false;
	serve(script, ELEMENTSOF(script));
	call_naming(0, NM_NAME1);
	ck_assert_int_eq(json_integer_value(json_object_get(error_of(), "code")), 1000);
	call_naming(0, SHARED "1");
	ck_assert_int_eq(json_integer_value(json_object_get(error_of(), "code")), 1000);
	loop_log_capture_stop();
	fake_engine_stop();
}
END_TEST

/* ---- spec conflicts (PROTOCOL.md "Spec conflicts") ----------------------------- */

/* The container under the key's name was made from ... (labels and
 * Config.Image as the engine's inspect gives them); the acquire asks for
 * IMAGE, no labels, the default work dir. */
static const struct conflict_row {
	const char *what;
	const char *extra_labels;   /* more labels, JSON members */
	const char *config_image;   /* Config.Image */
	const char *want_fields;    /* the differences' fields, comma-joined; NULL: served */
} conflict_rows[] = {
	{ "the same spec (labelled)", ",\"maf-sandbox.image\":\"" IMAGE "\",\"maf-sandbox.labels\":\"{}\"", IMAGE, NULL },
	{ "another image (labelled)", ",\"maf-sandbox.image\":\"other:1\"", "other:1", "image" },
	{ "another image, the tag since moved (labelled)", ",\"maf-sandbox.image\":\"other:1\"", "sha256:0123", "image" },
	{ "the seed's, the same image", "", IMAGE, NULL },
	{ "the seed's, another image", "", "other:1", "image" },
	{ "the seed's, the engine shows an id only: served", "", "sha256:0123", NULL },
	{ "labels given then, none now", ",\"maf-sandbox.label.team\":\"blue\"", IMAGE, "labels" },
	{ "another image and labels", ",\"maf-sandbox.label.team\":\"blue\"", "other:1", "image,labels" },
};

START_TEST(test_a_spec_conflict_is_refused)
{
	const struct conflict_row *row = &conflict_rows[_i];
	struct msb_key key = { .scope = "s", .thread_id = "t", .agent_dir = "a", .call_id = "" };
	char seed[NAMES_CONTAINER_MAX], path[128], body[1536];
	struct fake_reply script[3] = { PING, VERSION };
	const json_t *e, *diffs, *diff;
	char fields[64] = "";
	size_t i;

	names_container(&key, "k", "", seed);
	snprintf(path, sizeof(path), API "/containers/%s/json", seed);
	snprintf(body, sizeof(body),
		 "{\"Id\":\"" ID("c") "\",\"Name\":\"/%s\",\"Image\":\"sha256:0123\","
		 "\"State\":{\"Status\":\"running\",\"Running\":true},"
		 "\"Config\":{\"Image\":\"%s\",\"Labels\":{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\","
		 "\"maf-sandbox.agent\":\"a\",\"maf-sandbox.kind\":\"k\",\"maf-sandbox.owner\":\"0\""
		 "%s,\"maf-sandbox.work-dir.v1\":\"/maf-sandbox/work\"}}}", seed, row->config_image, row->extra_labels);
	script[2] = (struct fake_reply){ .method = "GET", .path = path, .headers = JSON_TYPE, .body = body };
	serve(script, ELEMENTSOF(script));
	call_as(0, true, "sandbox.acquire", ACQUIRE_PARAMS);
	loop_log_capture_stop();
	fake_engine_stop();   /* the script lives on this stack */
	if (!row->want_fields) {
		const json_t *res = json_object_get(answer, "result");

		ck_assert_msg(res, "%s: not served: %s", row->what, json_dumps(answer, JSON_COMPACT));
		ck_assert_str_eq(json_string_value(json_object_get(res, "sandbox")), ID("c"));
		/* the result says the image */
		ck_assert_str_eq(json_string_value(json_object_get(res, "image")), row->config_image[0] == 's' &&
				 !strstr(row->extra_labels, "maf-sandbox.image") ? row->config_image : IMAGE);
		ck_assert_str_eq(json_string_value(json_object_get(res, "image_id")), "sha256:0123");
		return;
	}
	e = error_of();
	ck_assert_msg(json_integer_value(json_object_get(e, "code")) == 1106, "%s: %s", row->what,
		      json_dumps(answer, JSON_COMPACT));
	diffs = json_object_get(json_object_get(e, "data"), "differences");
	json_array_foreach(diffs, i, diff) {
		snprintf(fields + strlen(fields), sizeof(fields) - strlen(fields), "%s%s", i ? "," : "",
			 json_string_value(json_object_get(diff, "field")));
		ck_assert_ptr_nonnull(json_object_get(diff, "requested"));
		ck_assert_ptr_nonnull(json_object_get(diff, "existing"));
		if (strcmp(json_string_value(json_object_get(diff, "field")), "image") == 0) {
			ck_assert_str_eq(json_string_value(json_object_get(diff, "requested")), IMAGE);
			ck_assert_str_eq(json_string_value(json_object_get(diff, "existing")), "other:1");
		}
	}
	ck_assert_msg(strcmp(fields, row->want_fields) == 0, "%s: differences %s, want %s", row->what, fields,
		      row->want_fields);
	ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), "dispose") &&
		      strstr(json_string_value(json_object_get(e, "message")), "another kind"), "%s",
		      json_string_value(json_object_get(e, "message")));
}
END_TEST

/* maf-sandbox.labels is read as hostile (anyone with the engine writes
 * it): only up to ACQUIRE_LABELS_JSON_MAX bytes and only as an object of
 * strings; else the maf-sandbox.label.* values, at most
 * ACQUIRE_LABELS_JSON_MAX bytes of them. */
START_TEST(test_recorded_labels_are_read_as_hostile)
{
	static const char *const forged[] = {
		"{\"a\":{\"nested\":[1,2,3]}}", "[\"a\"]", "{\"a\":1}", "{\"a\":\"x\",\"a\":\"y\"}", "{", "null",
	};
	json_t *labels = json_pack("{s:s}", LABEL_USER_PREFIX "a", "from-label"), *got;
	char *big = xmalloc(ACQUIRE_LABELS_JSON_MAX + 16), *v = xmalloc(4001);
	size_t bytes = 0;
	const char *k;
	json_t *e;

	for (size_t i = 0; i < ELEMENTSOF(forged); i++) {
		json_object_set_new(labels, LABEL_LABELS_JSON, json_string(forged[i]));
		got = acquire_user_labels(labels);
		ck_assert_msg(json_object_size(got) == 1 && json_is_string(json_object_get(got, "a")) &&
			      strcmp(json_string_value(json_object_get(got, "a")), "from-label") == 0, "%s", forged[i]);
		json_decref(got);
	}
	/* a well-formed object longer than the limit is not taken either */
	snprintf(big, ACQUIRE_LABELS_JSON_MAX + 16, "{\"a\":\"%0*d\"}", ACQUIRE_LABELS_JSON_MAX, 0);
	json_object_set_new(labels, LABEL_LABELS_JSON, json_string(big));
	got = acquire_user_labels(labels);
	ck_assert_str_eq(json_string_value(json_object_get(got, "a")), "from-label");
	json_decref(got);
	/* within it, it is */
	json_object_set_new(labels, LABEL_LABELS_JSON, json_string("{\"a\":\"raw\"}"));
	got = acquire_user_labels(labels);
	ck_assert_str_eq(json_string_value(json_object_get(got, "a")), "raw");
	json_decref(got);
	/* the fallback is bounded too: 64 keys of 4000 bytes */
	json_object_del(labels, LABEL_LABELS_JSON);
	memset(v, 'k', 4000);
	v[4000] = '\0';
	for (int i = 0; i < 64; i++) {
		_cleanup_free_ char *name = xasprintf("%s%02d%s", LABEL_USER_PREFIX, i, v);

		json_object_set_new(labels, name, json_string("x"));
	}
	got = acquire_user_labels(labels);
	json_object_foreach(got, k, e)
		bytes += strlen(k) + json_string_length(e);
	ck_assert_uint_le(bytes, ACQUIRE_LABELS_JSON_MAX);
	ck_assert_uint_ge(json_object_size(got), 1);
	json_decref(got);
	json_decref(labels);
	free(big);
	free(v);
}
END_TEST

/* A labels difference stays within the acquire's reply bound (64 KiB)
 * whatever labels the spec gives (64 of 4096-byte values): past
 * ACQUIRE_LABELS_JSON_MAX, "requested" holds them as the container would
 * (digested), at most that many bytes. */
START_TEST(test_a_labels_difference_is_bounded)
{
	struct msb_spec spec = { .kind = "k", .image = IMAGE, .labels = json_object() };
	json_t *labels = json_pack("{s:s}", "maf-sandbox.work-dir.v1", "/maf-sandbox/work"), *diffs;
	char *v = xmalloc(4097), *dumped;

	memset(v, 'v', 4096);
	v[4096] = '\0';
	for (int i = 0; i < 64; i++) {
		_cleanup_free_ char *k = xasprintf("l%02d", i);

		json_object_set_new(spec.labels, k, json_string(v));
	}
	diffs = acquire_spec_differences(&spec, labels, IMAGE, NULL);
	ck_assert_uint_eq(json_array_size(diffs), 1);
	dumped = json_dumps(diffs, JSON_COMPACT);
	ck_assert_uint_le(strlen(dumped), 2 * ACQUIRE_LABELS_JSON_MAX);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(diffs, 0), "field")), "labels");
	ck_assert_uint_ge(json_object_size(json_object_get(json_array_get(diffs, 0), "requested")), 1);
	free(dumped);
	json_decref(diffs);
	json_decref(labels);
	json_decref(spec.labels);
	free(v);
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
	tcase_add_test(tc, test_reap_cannot_start);
	suite_add_tcase(s, tc);
	tc = tcase_create("key_spaces");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_acquire_names_its_callers_key_space, 0, ELEMENTSOF(space_rows));
	tcase_add_loop_test(tc, test_root_space_serves_only_roots, 0, ELEMENTSOF(root_space_rows));
	suite_add_tcase(s, tc);
	tc = tcase_create("spec_conflicts");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_a_spec_conflict_is_refused, 0, ELEMENTSOF(conflict_rows));
	tcase_add_test(tc, test_recorded_labels_are_read_as_hostile);
	tcase_add_test(tc, test_a_labels_difference_is_bounded);
	suite_add_tcase(s, tc);
	tc = tcase_create("naming");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_an_ambiguous_prefix_lists_the_candidates, 0, ELEMENTSOF(naming_calls));
	tcase_add_loop_test(tc, test_nothing_reachable_is_not_found, 0, ELEMENTSOF(not_found_rows));
	tcase_add_test(tc, test_too_few_digits_name_the_rule);
	tcase_add_test(tc, test_what_was_given_is_cut_and_escaped);
	tcase_add_test(tc, test_an_unread_registry_is_engine_unavailable);
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
