/* check_docker.c — the typed Engine API calls, the archive endpoints, the
 * pull progress stream and the /events follower (docker.h) against the
 * fake engine: the exact request each call sends, reply decoding, failures,
 * exactly-once completions, and the follower's resync/reconnect cycle. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cleanup.h"
#include "docker.h"
#include "endpoint.h"
#include "engine.h"
#include "fake_engine.h"
#include "log.h"
#include "loop.h"
#include "slow.h"
#include "xmalloc.h"

#define RUN_MAX_MS  2000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define SETTLE_MS   30
#define API         "/v1.45"
#define MAX_SEEN    32
#define TEXT_MAX    512

#define VERSION_BODY \
	"{\"Version\":\"26.1.0\",\"ApiVersion\":\"1.45\",\"Os\":\"linux\",\"Arch\":\"amd64\"," \
	"\"KernelVersion\":\"6.1.0\"}"
#define PING { .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .body = VERSION_BODY, .repeat = true }
/* The requests the probe makes before any call: /_ping and /version. */
#define PROBE_REQUESTS 2

static struct event_base *base;
static struct engine *engine;
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

/* ---- fixture ----------------------------------------------------------------- */

static struct docker_events *follower;

static void setup(void)
{
	reachable_count = 0;
	follower = NULL;
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
}

static void teardown(void)
{
	follower = docker_events_free(follower);
	engine = engine_free(engine);
	event_base_free(base);
	fake_engine_cleanup();
}

/* Serves script and waits until the engine is reachable on API 1.45. */
static void start_reachable(const struct fake_reply *script, size_t n)
{
	loop_engine_start_reachable(base, engine, &reachable_count, script, n, RUN_MAX_MS);
}

/* The first request recorded after the probe. */
static const struct fake_request *call_request(void)
{
	ck_assert_uint_gt(fake_engine_request_count(), PROBE_REQUESTS);
	return fake_engine_request(PROBE_REQUESTS);
}

static size_t requests_to(const char *prefix)
{
	size_t n = 0;

	for (size_t i = 0; i < fake_engine_request_count(); i++)
		n += strncmp(fake_engine_request(i)->path, prefix, strlen(prefix)) == 0;
	return n;
}

static void copy_text(char *dst, const char *src)
{
	snprintf(dst, TEXT_MAX, "%s", src ? src : "(null)");
}

/* ---- buffered calls: recording replies ------------------------------------------------ */

struct reply_rec {
	int calls;
	int error;
	long status;
	bool body_null;
	bool message_null;
	char body[TEXT_MAX];      /* the body re-encoded compactly */
	char message[TEXT_MAX];
};

static void reply_cb(const struct docker_reply *r, void *arg)
{
	struct reply_rec *rec = arg;
	_cleanup_free_ char *dump = r->body ? json_dumps(r->body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	rec->calls++;
	rec->error = r->error;
	rec->status = r->status;
	rec->body_null = r->body == NULL;
	rec->message_null = r->message == NULL;
	copy_text(rec->body, dump);
	copy_text(rec->message, r->message);
}

/* Waits for the reply, then makes sure no second one follows. */
static void wait_reply(struct reply_rec *rec)
{
	ck_assert_int_eq(rec->calls, 0);   /* never inside the start call */
	run_until(&rec->calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec->calls, 1);
}

/* ---- escaping --------------------------------------------------------------------------- */

static const struct {
	const char *in, *out;
} escape_rows[] = {
	{ "", "" },
	{ "AZaz09-._~", "AZaz09-._~" },
	{ "my box", "my%20box" },
	{ "a/b", "a%2Fb" },
	{ "100%", "100%25" },
	{ "\xc3\xa9t\xc3\xa9", "%C3%A9t%C3%A9" },          /* "été" */
	{ "x:y@z?&=#+,;", "x%3Ay%40z%3F%26%3D%23%2B%2C%3B" },
	{ "{\"k\":1}", "%7B%22k%22%3A1%7D" },
	{ "\x01\x7f\xff", "%01%7F%FF" },
};

START_TEST(test_escape)
{
	_cleanup_free_ char *s = docker_escape(escape_rows[_i].in);

	ck_assert_str_eq(s, escape_rows[_i].out);
}
END_TEST

START_TEST(test_escape_null)
{
	ck_assert_ptr_null(docker_escape(NULL));
}
END_TEST

/* ---- each wrapper's request line ---------------------------------------------------------- */

enum wrapper {
	W_CONTAINERS_LIST,
	W_CONTAINERS_LIST_FILTERED,
	W_CONTAINER_INSPECT,
	W_CONTAINER_CREATE,
	W_CONTAINER_CREATE_UNNAMED,
	W_CONTAINER_START,
	W_CONTAINER_PAUSE,
	W_CONTAINER_UNPAUSE,
	W_CONTAINER_REMOVE,
	W_CONTAINER_REMOVE_FORCE,
	W_IMAGE_INSPECT,
	W_NETWORKS_LIST,
	W_NETWORKS_LIST_FILTERED,
	W_NETWORK_INSPECT,
	W_NETWORK_REMOVE,
	W_VERSION,
	W_CALL_WITH_BODY,
};

#define FILTERS_ESCAPED "%7B%22label%22%3A%7B%22maf-sandbox.kind%3Dws%22%3Atrue%7D%7D"
#define CONFIG_JSON     "{\"Image\":\"busybox\",\"Cmd\":[\"true\"]}"

static const struct {
	enum wrapper w;
	const char *method;
	const char *path;      /* after the /v1.45 prefix */
	const char *body;      /* NULL: none and no Content-Type */
} wrapper_rows[] = {
	{ W_CONTAINERS_LIST, "GET", "/containers/json?all=1", NULL },
	{ W_CONTAINERS_LIST_FILTERED, "GET", "/containers/json?all=1&filters=" FILTERS_ESCAPED, NULL },
	{ W_CONTAINER_INSPECT, "GET", "/containers/sbx-1/json", NULL },
	{ W_CONTAINER_CREATE, "POST", "/containers/create?name=sbx-1", CONFIG_JSON },
	{ W_CONTAINER_CREATE_UNNAMED, "POST", "/containers/create", CONFIG_JSON },
	{ W_CONTAINER_START, "POST", "/containers/c0ffee/start", NULL },
	{ W_CONTAINER_PAUSE, "POST", "/containers/c0ffee/pause", NULL },
	{ W_CONTAINER_UNPAUSE, "POST", "/containers/c0ffee/unpause", NULL },
	{ W_CONTAINER_REMOVE, "DELETE", "/containers/c0ffee", NULL },
	{ W_CONTAINER_REMOVE_FORCE, "DELETE", "/containers/c0ffee?force=1", NULL },
	{ W_IMAGE_INSPECT, "GET", "/images/localhost%3A5000%2Fx%3A2/json", NULL },
	{ W_NETWORKS_LIST, "GET", "/networks", NULL },
	{ W_NETWORKS_LIST_FILTERED, "GET", "/networks?filters=" FILTERS_ESCAPED, NULL },
	{ W_NETWORK_INSPECT, "GET", "/networks/net-1", NULL },
	{ W_NETWORK_REMOVE, "DELETE", "/networks/net-1", NULL },
	{ W_VERSION, "GET", "/version", NULL },
	{ W_CALL_WITH_BODY, "PUT", "/things/x?y=1", "{\"a\":[1,2],\"b\":{\"c\":null}}" },
};

static int wrapper_start(enum wrapper w, docker_cb *cb, void *arg)
{
	json_auto_t *filters = json_pack("{s:{s:b}}", "label", "maf-sandbox.kind=ws", 1);
	json_auto_t *config = json_loads(CONFIG_JSON, 0, NULL);
	json_auto_t *body = json_pack("{s:[i,i],s:{s:n}}", "a", 1, 2, "b", "c");

	switch (w) {
	case W_CONTAINERS_LIST: return docker_containers_list(engine, NULL, cb, arg, NULL);
	case W_CONTAINERS_LIST_FILTERED: return docker_containers_list(engine, filters, cb, arg, NULL);
	case W_CONTAINER_INSPECT: return docker_container_inspect(engine, "sbx-1", cb, arg, NULL);
	case W_CONTAINER_CREATE: return docker_container_create(engine, "sbx-1", config, cb, arg, NULL);
	case W_CONTAINER_CREATE_UNNAMED: return docker_container_create(engine, NULL, config, cb, arg, NULL);
	case W_CONTAINER_START: return docker_container_start(engine, "c0ffee", cb, arg, NULL);
	case W_CONTAINER_PAUSE: return docker_container_pause(engine, "c0ffee", cb, arg, NULL);
	case W_CONTAINER_UNPAUSE: return docker_container_unpause(engine, "c0ffee", cb, arg, NULL);
	case W_CONTAINER_REMOVE: return docker_container_remove(engine, "c0ffee", false, cb, arg, NULL);
	case W_CONTAINER_REMOVE_FORCE: return docker_container_remove(engine, "c0ffee", true, cb, arg, NULL);
	case W_IMAGE_INSPECT: return docker_image_inspect(engine, "localhost:5000/x:2", cb, arg, NULL);
	case W_NETWORKS_LIST: return docker_networks_list(engine, NULL, cb, arg, NULL);
	case W_NETWORKS_LIST_FILTERED: return docker_networks_list(engine, filters, cb, arg, NULL);
	case W_NETWORK_INSPECT: return docker_network_inspect(engine, "net-1", cb, arg, NULL);
	case W_NETWORK_REMOVE: return docker_network_remove(engine, "net-1", cb, arg, NULL);
	case W_VERSION: return docker_version(engine, cb, arg, NULL);
	case W_CALL_WITH_BODY: return docker_call(engine, "PUT", "/things/x?y=1", body, 0, cb, arg, NULL);
	}
	ck_abort_msg("unknown wrapper %d", (int)w);
	return -EINVAL;
}

START_TEST(test_wrapper_request)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .path = API "/", .body = "{}", .repeat = true },
	};
	_cleanup_free_ char *want = xasprintf(API "%s", wrapper_rows[_i].path);
	struct reply_rec rec = { 0 };
	const struct fake_request *q;
	char ct[128];

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(wrapper_start(wrapper_rows[_i].w, reply_cb, &rec), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.status, 200);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS + 1);
	q = call_request();
	ck_assert_str_eq(q->method, wrapper_rows[_i].method);
	ck_assert_str_eq(q->path, want);
	if (wrapper_rows[_i].body) {
		ck_assert(fake_request_header(q, "Content-Type", ct, sizeof(ct)));
		ck_assert_str_eq(ct, "application/json");
		ck_assert_str_eq(q->body, wrapper_rows[_i].body);
	} else {
		ck_assert_msg(!fake_request_header(q, "Content-Type", ct, sizeof(ct)), "Content-Type: %s", ct);
		ck_assert_uint_eq(q->body_len, 0);
	}
}
END_TEST

/* Names, ids and refs are percent-encoded wherever they go. */
static const struct {
	const char *name;
	const char *path;
} escape_wire_rows[] = {
	{ "my box", API "/containers/my%20box/json" },
	{ "../../version", API "/containers/..%2F..%2Fversion/json" },
	{ "50%/x?y#z", API "/containers/50%25%2Fx%3Fy%23z/json" },
	{ "\xc3\xbc\xe2\x82\xac", API "/containers/%C3%BC%E2%82%AC/json" },   /* "ü€" */
};

START_TEST(test_escape_on_the_wire)
{
	static const struct fake_reply script[] = { PING, VERSION, { .path = API "/", .body = "{}", .repeat = true } };
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_container_inspect(engine, escape_wire_rows[_i].name, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_str_eq(call_request()->path, escape_wire_rows[_i].path);
}
END_TEST

START_TEST(test_create_name_escaped)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .method = "POST", .path = API "/containers/create", .status = 201,
				 .body = "{\"Id\":\"abc\",\"Warnings\":[]}" },
	};
	json_auto_t *config = json_pack("{s:s}", "Image", "busybox");
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_container_create(engine, "a b&c=d", config, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.status, 201);
	ck_assert_str_eq(rec.body, "{\"Id\":\"abc\",\"Warnings\":[]}");
	ck_assert_str_eq(call_request()->path, API "/containers/create?name=a%20b%26c%3Dd");
	ck_assert_str_eq(call_request()->body, "{\"Image\":\"busybox\"}");
}
END_TEST

/* ---- replies ------------------------------------------------------------------------------- */

static const struct {
	int status;
	const char *body;
	const char *want_body;      /* NULL: body NULL */
	const char *want_message;   /* NULL: message NULL */
} reply_rows[] = {
	{ 200, "{\"Id\":\"abc\",\"State\":{\"Running\":true}}", "{\"Id\":\"abc\",\"State\":{\"Running\":true}}", NULL },
	{ 200, "[{\"Id\":\"a\"},{\"Id\":\"b\"}]", "[{\"Id\":\"a\"},{\"Id\":\"b\"}]", NULL },
	{ 200, "OK", NULL, NULL },                                     /* not JSON: body NULL */
	{ 200, "{\"Id\":\"abc\"} trailing", NULL, NULL },
	{ 200, NULL, NULL, NULL },                                     /* empty */
	{ 204, NULL, NULL, NULL },
	{ 200, "{\"message\":\"not an error\"}", "{\"message\":\"not an error\"}", NULL },
	{ 404, "{\"message\":\"No such container: nope\"}", "{\"message\":\"No such container: nope\"}",
	  "No such container: nope" },
	{ 409, "{\"message\":\"Conflict. The container name \\\"/x\\\" is already in use\"}",
	  "{\"message\":\"Conflict. The container name \\\"/x\\\" is already in use\"}",
	  "Conflict. The container name \"/x\" is already in use" },
	{ 500, "boom", NULL, NULL },                                   /* status kept, no message */
	{ 500, "{\"message\":7}", "{\"message\":7}", NULL },
};

START_TEST(test_reply_decoding)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/containers/abc/json", .status = reply_rows[_i].status, .body = reply_rows[_i].body },
	};
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_container_inspect(engine, "abc", reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.status, reply_rows[_i].status);
	if (reply_rows[_i].want_body)
		ck_assert_str_eq(rec.body, reply_rows[_i].want_body);
	else
		ck_assert_msg(rec.body_null, "body %s", rec.body);
	if (reply_rows[_i].want_message)
		ck_assert_str_eq(rec.message, reply_rows[_i].want_message);
	else
		ck_assert_msg(rec.message_null, "message %s", rec.message);
	fake_engine_stop();   /* the script lives on this stack */
}
END_TEST

/* A JSON reply over DOCKER_MAX_JSON_REPLY fails -EMSGSIZE. */
START_TEST(test_reply_too_big)
{
	size_t len = DOCKER_MAX_JSON_REPLY + 1;
	_cleanup_free_ char *big = xmalloc(len + 1);
	struct fake_reply script[] = { PING, VERSION, { .path = API "/containers/json", .body = big, .body_len = len } };
	struct reply_rec rec = { 0 };

	memset(big, ' ', len);
	big[0] = '[';
	big[len - 1] = ']';
	big[len] = '\0';
	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_containers_list(engine, NULL, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, -EMSGSIZE);
	ck_assert(rec.body_null);
	ck_assert(rec.message_null);
	fake_engine_stop();
}
END_TEST

/* A transport failure is passed through: error set, no status, body or message. */
START_TEST(test_transport_error)
{
	static const struct fake_reply script[] = { PING, VERSION };
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	fake_engine_stop();
	ck_assert_int_eq(docker_version(engine, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, -ECONNREFUSED);
	ck_assert_int_eq(rec.status, 0);
	ck_assert(rec.body_null);
	ck_assert(rec.message_null);
}
END_TEST

START_TEST(test_call_timeout)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .path = API "/slow", .body = "{}", .delay_ms = 3000 },
	};
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_call(engine, "GET", "/slow", NULL, 100, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, -ETIMEDOUT);   /* the reply, 3 s away, would be 200 */
}
END_TEST

START_TEST(test_call_cancel)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .path = API "/slow", .body = "{}", .delay_ms = 3000 },
	};
	struct reply_rec rec = { 0 };
	struct engine_req *req = NULL;

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_call(engine, "GET", "/slow", NULL, 0, reply_cb, &rec, &req), 0);
	ck_assert_ptr_nonnull(req);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 0);
	engine_req_cancel(req);
	ck_assert_int_eq(rec.calls, 1);   /* synchronously */
	ck_assert_int_eq(rec.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 1);
}
END_TEST

/* Not reachable: every start refuses with -ENOTCONN and nothing fires. */
static void pull_done_never_cb(int error, long status, const char *message, void *arg)
{
	(*(int *)arg)++;
}

START_TEST(test_not_reachable_refused)
{
	json_auto_t *config = json_pack("{s:s}", "Image", "busybox");
	struct reply_rec rec = { 0 };
	int pulls = 0;

	ck_assert_int_eq(docker_version(engine, reply_cb, &rec, NULL), -ENOTCONN);
	ck_assert_int_eq(docker_container_create(engine, "x", config, reply_cb, &rec, NULL), -ENOTCONN);
	ck_assert_int_eq(docker_call(engine, "GET", "/info", NULL, 0, reply_cb, &rec, NULL), -ENOTCONN);
	ck_assert_int_eq(docker_image_pull(engine, "busybox", 0, 0, NULL, pull_done_never_cb, &pulls, NULL),
			 -ENOTCONN);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_int_eq(pulls, 0);
	ck_assert_uint_eq(engine_requests_made(engine), 0);
}
END_TEST

/* Bad arguments: -EINVAL, nothing sent, nothing fires. */
START_TEST(test_bad_arguments)
{
	static const struct fake_reply script[] = { PING, VERSION };
	json_auto_t *config = json_pack("{s:s}", "Image", "busybox");
	json_auto_t *not_object = json_pack("[s]", "label");
	struct reply_rec rec = { 0 };
	int pulls = 0;

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_version(NULL, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_version(engine, NULL, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, NULL, "/x", NULL, 0, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, "GET", NULL, NULL, 0, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, "GET", "x", NULL, 0, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, "GET", "/x", NULL, -1, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, "BREW", "/x", NULL, 0, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_call(engine, "GET", "/x", config, 0, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_inspect(engine, NULL, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_inspect(engine, "", reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_start(engine, "", reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_remove(engine, NULL, true, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_create(engine, "x", NULL, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_container_create(engine, "", config, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_containers_list(engine, not_object, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_networks_list(engine, not_object, reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_image_inspect(engine, "", reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_network_remove(engine, "", reply_cb, &rec, NULL), -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, "", 0, 0, NULL, pull_done_never_cb, &pulls, NULL), -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, NULL, 0, 0, NULL, pull_done_never_cb, &pulls, NULL), -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, "busybox:", 0, 0, NULL, pull_done_never_cb, &pulls, NULL),
			 -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, ":1.36", 0, 0, NULL, pull_done_never_cb, &pulls, NULL),
			 -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, "busybox", -1, 0, NULL, pull_done_never_cb, &pulls, NULL),
			 -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, "busybox", 0, -1, NULL, pull_done_never_cb, &pulls, NULL),
			 -EINVAL);
	ck_assert_int_eq(docker_image_pull(engine, "busybox", 0, 0, NULL, NULL, &pulls, NULL), -EINVAL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec.calls, 0);
	ck_assert_int_eq(pulls, 0);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS);
}
END_TEST

/* ---- the pull ------------------------------------------------------------------------------- */

struct pull_rec {
	int progress;
	char lines[MAX_SEEN][TEXT_MAX];   /* each progress object re-encoded */
	int done;
	int progress_after_done;
	int error;
	long status;
	bool message_null;
	char message[TEXT_MAX];
};

static struct pull_rec pr;

static void pull_progress_cb(const json_t *line, void *arg)
{
	_cleanup_free_ char *dump = json_dumps(line, JSON_COMPACT);

	ck_assert_ptr_eq(arg, &pr);
	if (pr.done)
		pr.progress_after_done++;
	if (pr.progress < MAX_SEEN)
		copy_text(pr.lines[pr.progress], dump);
	pr.progress++;
}

static void pull_done_cb(int error, long status, const char *message, void *arg)
{
	ck_assert_ptr_eq(arg, &pr);
	pr.done++;
	pr.error = error;
	pr.status = status;
	pr.message_null = message == NULL;
	copy_text(pr.message, message);
}

static void pull_start(const char *ref, long timeout_ms, long idle_ms, struct engine_req **ret_req)
{
	memset(&pr, 0, sizeof(pr));
	ck_assert_int_eq(docker_image_pull(engine, ref, timeout_ms, idle_ms, pull_progress_cb, pull_done_cb, &pr,
					   ret_req), 0);
	ck_assert_int_eq(pr.done, 0);   /* never inside the start call */
}

static void pull_wait(void)
{
	run_until(&pr.done, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(pr.done, 1);
	ck_assert_int_eq(pr.progress_after_done, 0);
}

/* The ref is split as docker splits it; the values are escaped. */
static const struct {
	const char *ref;
	const char *query;
} pull_ref_rows[] = {
	{ "busybox", "fromImage=busybox&tag=latest" },
	{ "busybox:1.36", "fromImage=busybox&tag=1.36" },
	{ "localhost:5000/x", "fromImage=localhost%3A5000%2Fx&tag=latest" },     /* localhost:5000/x, latest */
	{ "localhost:5000/x:2", "fromImage=localhost%3A5000%2Fx&tag=2" },
	{ "x@sha256:abc", "fromImage=x%40sha256%3Aabc" },                       /* no tag */
	{ "x:1@sha256:abc", "fromImage=x%3A1%40sha256%3Aabc" },
	{ "library/busybox:1.36-musl", "fromImage=library%2Fbusybox&tag=1.36-musl" },
	{ "ghcr.io/o/r", "fromImage=ghcr.io%2Fo%2Fr&tag=latest" },
};

START_TEST(test_pull_ref_split)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .method = "POST", .path = API "/images/create", .body = "", .repeat = true },
	};
	_cleanup_free_ char *want = xasprintf(API "/images/create?%s", pull_ref_rows[_i].query);
	char ct[64];

	start_reachable(script, ELEMENTSOF(script));
	pull_start(pull_ref_rows[_i].ref, 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, 0);
	ck_assert(pr.message_null);
	ck_assert_int_eq(pr.progress, 0);
	ck_assert_str_eq(call_request()->method, "POST");
	ck_assert_str_eq(call_request()->path, want);
	ck_assert(!fake_request_header(call_request(), "Content-Type", ct, sizeof(ct)));
}
END_TEST

#define PULL_LINES \
	"{\"status\":\"Pulling from library/busybox\",\"id\":\"1.36\"}\r\n" \
	"{\"status\":\"Downloading\",\"progressDetail\":{\"current\":1024,\"total\":2048},\"id\":\"a1\"}\r\n" \
	"\r\n" \
	"{\"status\":\"Status: Downloaded newer image for busybox:1.36\"}\r\n"

static void assert_pull_lines(void)
{
	ck_assert_int_eq(pr.progress, 3);
	ck_assert_str_eq(pr.lines[0], "{\"status\":\"Pulling from library/busybox\",\"id\":\"1.36\"}");
	ck_assert_str_eq(pr.lines[1],
			 "{\"status\":\"Downloading\",\"progressDetail\":{\"current\":1024,\"total\":2048},\"id\":\"a1\"}");
	ck_assert_str_eq(pr.lines[2], "{\"status\":\"Status: Downloaded newer image for busybox:1.36\"}");
}

/* The same lines whatever the chunking: lines split across chunks are joined. */
static const struct {
	bool chunked;
	size_t chunk_size;
	int chunk_delay_ms;
} chunk_rows[] = {
	{ false, 0, 0 },
	{ true, 1, 0 },
	{ true, 3, 1 },
	{ true, 17, 2 },
	{ true, 4096, 0 },
};

START_TEST(test_pull_progress_in_order)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "POST", .path = API "/images/create", .body = PULL_LINES, .chunked = chunk_rows[_i].chunked,
		  .chunk_size = chunk_rows[_i].chunk_size, .chunk_delay_ms = chunk_rows[_i].chunk_delay_ms },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox:1.36", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, 0);
	ck_assert(pr.message_null);
	assert_pull_lines();
	fake_engine_stop();
}
END_TEST

/* The last line may come without its LF. */
START_TEST(test_pull_last_line_unterminated)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/images/create", .body = "{\"status\":\"a\"}\n{\"status\":\"b\"}", .chunked = true,
		  .chunk_size = 5 },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, 0);
	ck_assert_int_eq(pr.progress, 2);
	ck_assert_str_eq(pr.lines[1], "{\"status\":\"b\"}");
}
END_TEST

/* An in-band error inside the 200 ends the pull -EIO with its message;
 * nothing after it is delivered, whether the lines after it come in the
 * same read or later ones. Rows × {small chunks, one Content-Length body}. */
static const struct {
	const char *line;
	const char *message;
} inband_rows[] = {
	{ "{\"errorDetail\":{\"message\":\"manifest for x:9 not found\"},\"error\":\"manifest for x:9 not found\"}",
	  "manifest for x:9 not found" },
	{ "{\"errorDetail\":{\"message\":\"detail wins\"},\"error\":\"short\"}", "detail wins" },
	{ "{\"error\":\"only error\"}", "only error" },
	{ "{\"errorDetail\":{\"message\":\"only detail\"}}", "only detail" },
	{ "{\"error\":null}", "the engine reported a pull error without a message" },
	{ "{\"errorDetail\":{}}", "the engine reported a pull error without a message" },
};

START_TEST(test_pull_inband_error)
{
	size_t row = (size_t)_i % ELEMENTSOF(inband_rows);
	bool chunked = (size_t)_i < ELEMENTSOF(inband_rows);
	_cleanup_free_ char *body = xasprintf("{\"status\":\"Pulling fs layer\",\"id\":\"a1\"}\r\n%s\r\n"
					      "{\"status\":\"never delivered\"}\r\n", inband_rows[row].line);
	struct fake_reply script[] = {
		PING, VERSION, { .path = API "/images/create", .body = body, .chunked = chunked, .chunk_size = 9 },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("x:9", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, -EIO);
	ck_assert_int_eq(pr.status, 200);   /* in band: after the 200 */
	ck_assert_str_eq(pr.message, inband_rows[row].message);
	ck_assert_int_eq(pr.progress, 1);
	ck_assert_str_eq(pr.lines[0], "{\"status\":\"Pulling fs layer\",\"id\":\"a1\"}");
	fake_engine_stop();
}
END_TEST

/* A non-200 reply ends the pull -EIO with Docker's message (or the body's start). */
static const struct {
	int status;
	const char *body;
	const char *message;    /* exact, or with a leading '~': a substring */
} pull_status_rows[] = {
	{ 404, "{\"message\":\"pull access denied for nope, repository does not exist\"}\n",
	  "pull access denied for nope, repository does not exist" },
	{ 500, "{\"message\":\"Get \\\"https://registry-1.docker.io/v2/\\\": dial tcp: i/o timeout\"}",
	  "Get \"https://registry-1.docker.io/v2/\": dial tcp: i/o timeout" },
	{ 500, "boom\x01", "~HTTP 500: boom?" },
	{ 400, NULL, "~HTTP 400" },
	{ 201, "{\"status\":\"not a pull reply\"}\n", "~HTTP 201" },
};

START_TEST(test_pull_status)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/images/create", .status = pull_status_rows[_i].status, .body = pull_status_rows[_i].body },
	};
	const char *want = pull_status_rows[_i].message;

	start_reachable(script, ELEMENTSOF(script));
	pull_start("nope", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, -EIO);
	ck_assert_int_eq(pr.progress, 0);
	ck_assert_int_eq(pr.status, pull_status_rows[_i].status);   /* for the caller's engine_status */
	if (want[0] == '~')
		ck_assert_msg(strstr(pr.message, want + 1), "message %s", pr.message);
	else
		ck_assert_str_eq(pr.message, want);
	fake_engine_stop();
}
END_TEST

static const char *const malformed_rows[] = {
	"not json",
	"[1,2]",
	"\"a string\"",
	"{\"status\":\"cut",
};

START_TEST(test_pull_malformed_line)
{
	_cleanup_free_ char *body = xasprintf("{\"status\":\"a\"}\n%s\n{\"status\":\"never\"}\n", malformed_rows[_i]);
	struct fake_reply script[] = {
		PING, VERSION, { .path = API "/images/create", .body = body, .chunked = true, .chunk_size = 4 },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, -EPROTO);
	ck_assert_int_eq(pr.progress, 1);
	ck_assert_msg(strstr(pr.message, "malformed") && strstr(pr.message, malformed_rows[_i]), "%s", pr.message);
	fake_engine_stop();
}
END_TEST

/* A line of exactly DOCKER_MAX_STREAM_LINE bytes passes; one more byte
 * fails -EMSGSIZE, terminated or not. */
static char *line_of(size_t len)
{
	static const char head[] = "{\"status\":\"";
	char *s = xmalloc(len + 1);

	memcpy(s, head, strlen(head));
	memset(s + strlen(head), 'x', len - strlen(head) - 2);
	memcpy(s + len - 2, "\"}", 2);
	s[len] = '\0';
	return s;
}

START_TEST(test_pull_line_cap)
{
	static const struct {
		size_t extra;
		bool lf;
		int error;
	} rows[] = { { 0, true, 0 }, { 1, true, -EMSGSIZE }, { 1, false, -EMSGSIZE }, { 4096, false, -EMSGSIZE } };
	_cleanup_free_ char *line = line_of(DOCKER_MAX_STREAM_LINE + rows[_i].extra);
	_cleanup_free_ char *body = xasprintf("{\"status\":\"first\"}\n%s%s", line, rows[_i].lf ? "\n" : "");
	struct fake_reply script[] = {
		PING, VERSION, { .path = API "/images/create", .body = body, .chunked = true, .chunk_size = 8192 },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, rows[_i].error);
	ck_assert_int_eq(pr.progress, rows[_i].error ? 1 : 2);
	if (rows[_i].error)
		ck_assert_msg(strstr(pr.message, "longer than"), "%s", pr.message);
	fake_engine_stop();
}
END_TEST

START_TEST(test_pull_cancel)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/images/create", .body = "{\"status\":\"a\"}\n", .chunked = true, .chunk_size = 64,
		  .stall = true },
	};
	struct engine_req *req = NULL;

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox", 0, 0, &req);
	ck_assert_ptr_nonnull(req);
	run_until(&pr.progress, 1, RUN_MAX_MS);
	ck_assert_int_eq(pr.progress, 1);
	engine_req_cancel(req);
	ck_assert_int_eq(pr.done, 1);    /* synchronously */
	ck_assert_int_eq(pr.error, -ECANCELED);
	ck_assert(!pr.message_null);
	run_for(SETTLE_MS);
	ck_assert_int_eq(pr.done, 1);
	ck_assert_int_eq(pr.progress, 1);
}
END_TEST

/* The idle deadline bounds the wait for each line. */
START_TEST(test_pull_idle_timeout)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/images/create", .body = "{\"status\":\"a\"}\n", .chunked = true, .chunk_size = 64,
		  .stall = true },
	};

	start_reachable(script, ELEMENTSOF(script));
	/* hang guard margin: the first line comes before the idle deadline */
	pull_start("busybox", 0, 100L * test_slow_factor(), NULL);
	pull_wait();   /* the stall never ends: only the idle deadline ends the pull */
	ck_assert_int_eq(pr.error, -ETIMEDOUT);
	ck_assert_int_eq(pr.progress, 1);
	/* hang guard: the fake's thread notices the close */
	LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
	ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
}
END_TEST

/* The engine goes away mid-stream, after its 200: -ECONNABORTED (a pull
 * cut short, not an engine never reached), the status read, a message. */
START_TEST(test_pull_connection_lost)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/images/create", .body = PULL_LINES, .chunked = true, .chunk_size = 16,
		  .close_after_bytes = 150 },
	};

	start_reachable(script, ELEMENTSOF(script));
	pull_start("busybox", 0, 0, NULL);
	pull_wait();
	ck_assert_int_eq(pr.error, -ECONNABORTED);
	ck_assert_int_eq(pr.status, 200);
	ck_assert(!pr.message_null);
	ck_assert_int_lt(pr.progress, 3);
}
END_TEST

/* ---- the /events follower ------------------------------------------------------------------- */

#define MAX_RESYNCS 16

static struct {
	int events;
	char actions[MAX_SEEN][64];
	int resyncs;
	long long resync_wall_ns[MAX_RESYNCS];
	size_t requests_at_resync[MAX_RESYNCS];
	int events_at_resync[MAX_RESYNCS];
	bool connected_at_resync[MAX_RESYNCS];
	bool free_in_event;
	bool free_in_resync;
	int after_free;
} er;

static long long wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void event_cb(const json_t *event, void *arg)
{
	const char *action = json_string_value(json_object_get(event, "Action"));

	ck_assert_ptr_eq(arg, &er);
	if (!follower)
		er.after_free++;
	if (er.events < MAX_SEEN)
		snprintf(er.actions[er.events], sizeof(er.actions[0]), "%s", action ? action : "?");
	er.events++;
	if (er.free_in_event)
		follower = docker_events_free(follower);
}

static void resync_cb(void *arg)
{
	ck_assert_ptr_eq(arg, &er);
	if (!follower)
		er.after_free++;
	if (er.resyncs < MAX_RESYNCS) {
		er.resync_wall_ns[er.resyncs] = wall_ns();
		er.requests_at_resync[er.resyncs] = fake_engine_request_count();
		er.events_at_resync[er.resyncs] = er.events;
		er.connected_at_resync[er.resyncs] = docker_events_is_connected(follower);
	}
	er.resyncs++;
	if (er.free_in_resync)
		follower = docker_events_free(follower);
}

static void follow(const json_t *filters)
{
	memset(&er, 0, sizeof(er));
	follower = docker_events_new(base, engine, filters, event_cb, resync_cb, &er);
	ck_assert_ptr_nonnull(follower);
	ck_assert(!docker_events_is_connected(follower));
	docker_events_start(follower);
	ck_assert_int_eq(er.resyncs, 0);   /* from the loop, never inside start */
}

/* Index of the n-th (0-based) recorded request to /events. */
static size_t events_request_index(unsigned n)
{
	for (size_t i = 0; i < fake_engine_request_count(); i++)
		if (strncmp(fake_engine_request(i)->path, API "/events", strlen(API "/events")) == 0 && n-- == 0)
			return i;
	ck_abort_msg("no /events request #%u", n);
	return 0;
}

/* since=SECONDS.NANOSECONDS (nine digits) → nanoseconds. */
static long long since_ns(const struct fake_request *q)
{
	const char *s = strstr(q->path, "?since=");
	long long sec;
	char frac[16];
	int used = 0;

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(sscanf(s, "?since=%lld.%15[0-9]%n", &sec, frac, &used), 2);
	ck_assert_uint_eq(strlen(frac), 9);
	ck_assert_msg(s[used] == '\0' || s[used] == '&', "%s", q->path);
	return sec * 1000000000LL + atoll(frac);
}

#define EVENT(action) "{\"Type\":\"container\",\"Action\":\"" action "\",\"Actor\":{\"ID\":\"c0ffee\"}}\n"
#define EVENTS_REPLY(body_, repeat_) \
	{ .method = "GET", .path = API "/events", .body = body_, .chunked = true, .chunk_size = 16, \
	  .stall = true, .repeat = repeat_ }

START_TEST(test_events_delivered)
{
	static const struct fake_reply script[] = {
		PING, VERSION, EVENTS_REPLY(EVENT("create") EVENT("start") EVENT("die"), false),
	};
	json_auto_t *filters = json_pack("{s:{s:b},s:{s:b}}", "type", "container", 1, "label", "maf-sandbox.kind", 1);
	const struct fake_request *q;
	long long before;
	size_t idx;

	start_reachable(script, ELEMENTSOF(script));
	before = wall_ns();
	follow(filters);
	json_decref(TAKE_PTR(filters));   /* copied */
	run_until(&er.events, 3, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 3);
	ck_assert_str_eq(er.actions[0], "create");
	ck_assert_str_eq(er.actions[1], "start");
	ck_assert_str_eq(er.actions[2], "die");
	ck_assert_int_eq(er.resyncs, 1);
	ck_assert(!er.connected_at_resync[0]);
	ck_assert(docker_events_is_connected(follower));
	/* resync ran before the stream was requested, since= taken just before it */
	idx = events_request_index(0);
	ck_assert_uint_ge(idx, er.requests_at_resync[0]);
	q = fake_engine_request(idx);
	ck_assert_str_eq(q->method, "GET");
	ck_assert_msg(strstr(q->path, "&filters=%7B%22type%22%3A%7B%22container%22%3Atrue%7D%2C%22label%22%3A%7B%22"
				      "maf-sandbox.kind%22%3Atrue%7D%7D") != NULL, "%s", q->path);
	ck_assert_int_ge(since_ns(q), before);
	ck_assert_int_le(since_ns(q), er.resync_wall_ns[0]);
	run_for(SETTLE_MS);
	ck_assert_int_eq(er.events, 3);
	ck_assert_int_eq(er.resyncs, 1);
	ck_assert_uint_eq(requests_to(API "/events"), 1);
}
END_TEST

START_TEST(test_events_no_filters)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), false) };

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 1, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 1);
	ck_assert_ptr_null(strstr(fake_engine_request(events_request_index(0))->path, "filters"));
}
END_TEST

/* The engine ends the stream: resync again, then follow again from a later since. */
START_TEST(test_events_reconnect_on_eof)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/events", .body = EVENT("create"), .chunked = true },
		EVENTS_REPLY(EVENT("start"), false),
	};
	long long since0, since1;

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 2, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 2);
	ck_assert_str_eq(er.actions[0], "create");
	ck_assert_str_eq(er.actions[1], "start");
	ck_assert_int_eq(er.resyncs, 2);
	/* The second resync came after the first stream and its event. */
	ck_assert_int_eq(er.events_at_resync[1], 1);
	ck_assert_uint_gt(er.requests_at_resync[1], events_request_index(0));
	ck_assert_uint_ge(events_request_index(1), er.requests_at_resync[1]);
	/* not early: not before the first backoff step (less the timer clock's slack) */
	ck_assert_int_ge(er.resync_wall_ns[1] - er.resync_wall_ns[0], (DOCKER_EVENTS_RETRY_MIN_MS - TEST_TIMER_SLACK_MS) * 1000000LL);
	since0 = since_ns(fake_engine_request(events_request_index(0)));
	since1 = since_ns(fake_engine_request(events_request_index(1)));
	ck_assert_int_gt(since1, since0);
	ck_assert_int_le(since1, er.resync_wall_ns[1]);
	ck_assert(docker_events_is_connected(follower));
}
END_TEST

/* The retries' delays, as the log names them ("events: next connection in
 * N ms"), must be want[0..n); and each /events request after the first came
 * at least half the delay named before it after the answer to the one before
 * went out (not early: the timer waits. Half, not all: libevent's timers
 * run on CLOCK_MONOTONIC_COARSE, which a tickless kernel can leave several
 * ms stale when the loop wakes; seen 10 ms early on a 100 ms delay). */
static void check_events_retries(const char *logged, const long *want, int n)
{
	const char *p = logged;

	for (int i = 0; i < n; i++) {
		char line[64];
		long long gap_us = fake_engine_request(events_request_index((unsigned)i + 1))->at_us -
				   fake_engine_request(events_request_index((unsigned)i))->replied_us;

		snprintf(line, sizeof(line), "events: next connection in %ld ms\n", want[i]);
		p = strstr(p, "events: next connection in ");
		ck_assert_msg(p && strncmp(p, line, strlen(line)) == 0, "retry %d: want \"%.*s\" in: %s", i,
			      (int)strlen(line) - 1, line, logged);
		p += strlen(line);
		/* not early */
		ck_assert_msg(gap_us >= want[i] * 500, "try %d: %lld us after the last", i + 1, gap_us);
	}
}

/* Streams that fail at once back off: 100, 200, 400 ms (a flat 100 would
 * repeat 100; the log names each delay). */
START_TEST(test_events_backoff)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/events", .status = 500, .body = "{\"message\":\"events broken\"}", .repeat = true },
	};
	static const long want[] = { 100, 200, 400 };
	const char *logged;

	start_reachable(script, ELEMENTSOF(script));
	log_set_debug(true);
	loop_log_capture_start();
	follow(NULL);
	/* hang guard: four tries take 100 + 200 + 400 ms */
	LOOP_RUN_WHILE(base, requests_to(API "/events") < 4, RUN_MAX_MS);
	logged = loop_logged();
	loop_log_capture_stop();
	log_set_debug(false);
	ck_assert_uint_ge(requests_to(API "/events"), 4);
	check_events_retries(logged, want, 3);
	ck_assert_int_eq(er.resyncs, (int)requests_to(API "/events"));
	ck_assert_int_eq(er.events, 0);
	ck_assert_int_eq(engine_get_state(engine), ENGINE_REACHABLE);
}
END_TEST

/* A stream that brought an event resets the backoff: after two quick
 * failures (next wait 400 ms) it comes back after DOCKER_EVENTS_RETRY_MIN_MS. */
START_TEST(test_events_backoff_reset)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .path = API "/events", .status = 500, .body = "{\"message\":\"not yet\"}" },
		{ .path = API "/events", .status = 500, .body = "{\"message\":\"not yet\"}" },
		{ .method = "GET", .path = API "/events", .body = EVENT("create"), .chunked = true },
		EVENTS_REPLY(EVENT("start"), false),
	};
	static const long want[] = { DOCKER_EVENTS_RETRY_MIN_MS, 2 * DOCKER_EVENTS_RETRY_MIN_MS,
				     DOCKER_EVENTS_RETRY_MIN_MS };
	const char *logged;

	start_reachable(script, ELEMENTSOF(script));
	log_set_debug(true);
	loop_log_capture_start();
	follow(NULL);
	run_until(&er.events, 2, RUN_MAX_MS);
	logged = loop_logged();
	loop_log_capture_stop();
	log_set_debug(false);
	ck_assert_int_eq(er.events, 2);
	ck_assert_int_eq(er.resyncs, 4);
	check_events_retries(logged, want, 3);
}
END_TEST

/* A malformed or oversized line drops the stream: resync and follow again. */
START_TEST(test_events_bad_line_reconnects)
{
	_cleanup_free_ char *big = line_of(DOCKER_MAX_STREAM_LINE + 1);
	_cleanup_free_ char *body = xasprintf(EVENT("create") "%s\n" EVENT("never"), _i == 0 ? "not json" : big);
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = API "/events", .body = body, .chunked = true, .chunk_size = 4096, .stall = true },
		EVENTS_REPLY(EVENT("start"), false),
	};

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 2, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(er.events, 2);
	ck_assert_str_eq(er.actions[0], "create");
	ck_assert_str_eq(er.actions[1], "start");
	ck_assert_int_eq(er.resyncs, 2);
	ck_assert_uint_eq(requests_to(API "/events"), 2);
	fake_engine_stop();
}
END_TEST

/* The engine goes away. A stream cut after the engine answered is not by
 * itself a lost engine (engine.c); the follower's retry, refused, is. No
 * resync while it is known down; once it is back the follower resyncs and
 * follows again. */
START_TEST(test_events_engine_down_then_up)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), true) };
	int resyncs_down;

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 1, RUN_MAX_MS);
	ck_assert(docker_events_is_connected(follower));
	fake_engine_stop();
	/* hang guard */
	LOOP_RUN_WHILE(base, engine_get_state(engine) == ENGINE_REACHABLE, RUN_MAX_MS);
	ck_assert(!docker_events_is_connected(follower));
	ck_assert_int_ne(engine_get_state(engine), ENGINE_REACHABLE);
	/* The first retry may have resynced before its connect was refused. */
	resyncs_down = er.resyncs;
	ck_assert(resyncs_down == 1 || resyncs_down == 2);
	run_for(300);
	ck_assert_int_eq(er.resyncs, resyncs_down);   /* none while down */
	fake_engine_start(script, ELEMENTSOF(script));
	run_until(&er.events, 2, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 2);
	ck_assert_int_eq(er.resyncs, resyncs_down + 1);
	ck_assert(docker_events_is_connected(follower));
}
END_TEST

/* Not reachable at start: it waits for the engine. */
START_TEST(test_events_start_before_reachable)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), false) };

	follow(NULL);
	run_for(150);
	ck_assert_int_eq(er.resyncs, 0);
	ck_assert(!docker_events_is_connected(follower));
	start_reachable(script, ELEMENTSOF(script));
	run_until(&er.events, 1, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 1);
	ck_assert_int_eq(er.resyncs, 1);
}
END_TEST

START_TEST(test_events_free_in_event_cb)
{
	static const struct fake_reply script[] = {
		PING, VERSION, EVENTS_REPLY(EVENT("create") EVENT("start") EVENT("die"), true),
	};

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	er.free_in_event = true;
	run_until(&er.events, 1, RUN_MAX_MS);
	ck_assert_ptr_null(follower);
	run_for(300);
	ck_assert_int_eq(er.events, 1);
	ck_assert_int_eq(er.resyncs, 1);
	ck_assert_int_eq(er.after_free, 0);
	ck_assert_uint_eq(requests_to(API "/events"), 1);
}
END_TEST

START_TEST(test_events_free_in_resync_cb)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), true) };

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	er.free_in_resync = true;
	run_until(&er.resyncs, 1, RUN_MAX_MS);
	ck_assert_ptr_null(follower);
	run_for(200);
	ck_assert_int_eq(er.resyncs, 1);
	ck_assert_int_eq(er.events, 0);
	ck_assert_int_eq(er.after_free, 0);
	ck_assert_uint_eq(requests_to(API "/events"), 0);
}
END_TEST

/* Freed while streaming, while waiting to retry, before starting, and NULL. */
START_TEST(test_events_free_states)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), true) };

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 1, RUN_MAX_MS);
	follower = docker_events_free(follower);
	ck_assert_ptr_null(follower);
	run_for(200);
	ck_assert_int_eq(er.events, 1);
	ck_assert_int_eq(er.resyncs, 1);

	follow(NULL);                      /* waiting for its first connection */
	follower = docker_events_free(follower);
	run_for(200);
	ck_assert_int_eq(er.resyncs, 0);

	follower = docker_events_new(base, engine, NULL, event_cb, resync_cb, &er);
	ck_assert_ptr_nonnull(follower);
	follower = docker_events_free(follower);   /* never started */
	ck_assert_ptr_null(docker_events_free(NULL));
	ck_assert(!docker_events_is_connected(NULL));
}
END_TEST

/* Events received just before the stream drops are delivered before the
 * next resync; several in one read arrive in order. */
START_TEST(test_events_many_in_order)
{
	static char body[64 * 48];
	struct fake_reply script[] = {
		PING, VERSION, { .method = "GET", .path = API "/events", .body = body, .chunked = true, .chunk_size = 1000 },
		EVENTS_REPLY(EVENT("last"), false),
	};
	size_t off = 0;

	for (int i = 0; i < 30; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off, "{\"Action\":\"a%d\"}\n", i);
	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 31, RUN_MAX_MS);
	ck_assert_int_eq(er.events, 31);
	for (int i = 0; i < 30; i++) {
		char want[16];

		snprintf(want, sizeof(want), "a%d", i);
		ck_assert_str_eq(er.actions[i], want);
	}
	ck_assert_str_eq(er.actions[30], "last");
	ck_assert_int_eq(er.events_at_resync[1], 30);
	fake_engine_stop();
}
END_TEST

/* engine_free cancels the stream: the follower stops, and frees cleanly later. */
START_TEST(test_events_engine_freed)
{
	static const struct fake_reply script[] = { PING, VERSION, EVENTS_REPLY(EVENT("start"), true) };

	start_reachable(script, ELEMENTSOF(script));
	follow(NULL);
	run_until(&er.events, 1, RUN_MAX_MS);
	engine = engine_free(engine);
	ck_assert(!docker_events_is_connected(follower));
	run_for(300);
	ck_assert_int_eq(er.resyncs, 1);
	follower = docker_events_free(follower);
}
END_TEST

START_TEST(test_events_new_refusals)
{
	json_auto_t *not_object = json_pack("[s]", "type");

	ck_assert_ptr_null(docker_events_new(NULL, engine, NULL, event_cb, resync_cb, &er));
	ck_assert_ptr_null(docker_events_new(base, NULL, NULL, event_cb, resync_cb, &er));
	ck_assert_ptr_null(docker_events_new(base, engine, NULL, NULL, resync_cb, &er));
	ck_assert_ptr_null(docker_events_new(base, engine, not_object, event_cb, resync_cb, &er));
}
END_TEST

/* ---- the archive endpoints ---------------------------------------------------------------------- */

/* A stat header as Docker sends it: base64 of the PathStat JSON. */
#define STAT_B64 \
	"eyJuYW1lIjoiYS50eHQiLCJzaXplIjozLCJtb2RlIjo0MjAsIm10aW1lIjoiMjAyNC0wMS0wMVQwMDowMDowMFoiLCJsaW5rVGFyZ2V0IjoiIn0="
#define STAT_HEADER DOCKER_ARCHIVE_STAT_HEADER ": " STAT_B64 "\r\n"
#define ARCHIVE     API "/containers/c0ffee/archive"
/* A tar-like body with NULs and high bytes in it. */
static const char tar_bytes[] = "ustar\0\x01\xff\x80 a b/\xc3\xbc%.txt\0\0end";
#define TAR_LEN (sizeof(tar_bytes) - 1)

struct stat_rec {
	int calls;
	int error;
	long status;
	bool stat_null;
	char stat[TEXT_MAX];
};

static void stat_cb(int error, long status, const char *stat, void *arg)
{
	struct stat_rec *rec = arg;

	rec->calls++;
	rec->error = error;
	rec->status = status;
	rec->stat_null = stat == NULL;
	copy_text(rec->stat, stat);
}

static void wait_stat(struct stat_rec *rec)
{
	ck_assert_int_eq(rec->calls, 0);   /* never inside the start call */
	run_until(&rec->calls, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec->calls, 1);
}

#define GET_MAX_BYTES (4 * TEXT_MAX)

struct get_rec {
	int data_calls;
	int data_after_done;
	char got[GET_MAX_BYTES];
	size_t got_len;
	int abort_at;          /* > 0: the data call with this number returns abort_error */
	int abort_error;
	int done;
	int error;
	long status;
	bool message_null;
	char message[TEXT_MAX];
	bool stat_null;
	char stat[TEXT_MAX];
};

static int get_data_cb(const void *data, size_t len, void *arg)
{
	struct get_rec *rec = arg;

	if (rec->done)
		rec->data_after_done++;
	rec->data_calls++;
	ck_assert_uint_le(len, GET_MAX_BYTES - rec->got_len);
	memcpy(rec->got + rec->got_len, data, len);
	rec->got_len += len;
	return rec->data_calls == rec->abort_at ? rec->abort_error : 0;
}

static void get_done_cb(int error, long status, const char *message, const char *stat, void *arg)
{
	struct get_rec *rec = arg;

	rec->done++;
	rec->error = error;
	rec->status = status;
	rec->message_null = message == NULL;
	copy_text(rec->message, message);
	rec->stat_null = stat == NULL;
	copy_text(rec->stat, stat);
}

static void get_start(struct get_rec *rec, const char *id, const char *path, long idle_ms,
		      struct engine_req **ret_req)
{
	ck_assert_int_eq(docker_archive_get(engine, id, path, idle_ms, get_data_cb, get_done_cb, rec, ret_req), 0);
	ck_assert_int_eq(rec->done, 0);   /* never inside the start call */
}

static void wait_get(struct get_rec *rec)
{
	run_until(&rec->done, 1, RUN_MAX_MS);
	run_for(SETTLE_MS);
	ck_assert_int_eq(rec->done, 1);
	ck_assert_int_eq(rec->data_after_done, 0);
}

enum archive_kind { A_STAT, A_GET, A_PUT };

static const char *archive_kind_method(enum archive_kind k)
{
	return k == A_STAT ? "HEAD" : k == A_GET ? "GET" : "PUT";
}

/* Starts one archive call of kind k; its completion bumps *calls. */
static int archive_start(enum archive_kind k, const char *id, const char *path, struct stat_rec *sr,
			 struct get_rec *gr, struct reply_rec *pr_)
{
	switch (k) {
	case A_STAT: return docker_archive_stat(engine, id, path, stat_cb, sr, NULL);
	case A_GET: return docker_archive_get(engine, id, path, 0, get_data_cb, get_done_cb, gr, NULL);
	case A_PUT: return docker_archive_put(engine, id, path, tar_bytes, TAR_LEN, reply_cb, pr_, NULL);
	}
	ck_abort_msg("unknown kind %d", (int)k);
	return -EINVAL;
}

static int archive_calls(enum archive_kind k, const struct stat_rec *sr, const struct get_rec *gr,
			 const struct reply_rec *pr_)
{
	return k == A_STAT ? sr->calls : k == A_GET ? gr->done : pr_->calls;
}

static void archive_wait(enum archive_kind k, struct stat_rec *sr, struct get_rec *gr, struct reply_rec *pr_)
{
	switch (k) {
	case A_STAT: wait_stat(sr); break;
	case A_GET: wait_get(gr); break;
	case A_PUT: wait_reply(pr_); break;
	}
}

/* The exact request each call sends: method, escaped id and path, query,
 * Content-Type, body; never Accept-Encoding. */
static const struct {
	enum archive_kind kind;
	const char *id;
	const char *path;
	const char *method;
	const char *want;   /* after /v1.45 */
} archive_request_rows[] = {
	{ A_STAT, "c0ffee", "/etc/hosts", "HEAD", "/containers/c0ffee/archive?path=%2Fetc%2Fhosts" },
	{ A_STAT, "c0ffee", "a b/\xc3\xbc%.txt", "HEAD", "/containers/c0ffee/archive?path=a%20b%2F%C3%BC%25.txt" },
	{ A_STAT, "my box/../x?", "x&y=1#", "HEAD", "/containers/my%20box%2F..%2Fx%3F/archive?path=x%26y%3D1%23" },
	{ A_GET, "c0ffee", "/work", "GET", "/containers/c0ffee/archive?path=%2Fwork" },
	{ A_GET, "c0ffee", "a b/\xc3\xbc%.txt", "GET", "/containers/c0ffee/archive?path=a%20b%2F%C3%BC%25.txt" },
	{ A_GET, "../version", "/", "GET", "/containers/..%2Fversion/archive?path=%2F" },
	{ A_PUT, "c0ffee", "/work", "PUT", "/containers/c0ffee/archive?path=%2Fwork&noOverwriteDirNonDir=1" },
	{ A_PUT, "c0ffee", "a b/\xc3\xbc%.txt", "PUT",
	  "/containers/c0ffee/archive?path=a%20b%2F%C3%BC%25.txt&noOverwriteDirNonDir=1" },
	{ A_PUT, "sbx 1", "/w&noOverwriteDirNonDir=0", "PUT",
	  "/containers/sbx%201/archive?path=%2Fw%26noOverwriteDirNonDir%3D0&noOverwriteDirNonDir=1" },
};

START_TEST(test_archive_request)
{
	static const struct fake_reply script[] = { PING, VERSION, { .path = API "/containers/", .repeat = true } };
	_cleanup_free_ char *want = xasprintf(API "%s", archive_request_rows[_i].want);
	enum archive_kind k = archive_request_rows[_i].kind;
	struct stat_rec sr = { 0 };
	struct get_rec gr = { 0 };
	struct reply_rec prr = { 0 };
	const struct fake_request *q;
	char hv[128];

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(archive_start(k, archive_request_rows[_i].id, archive_request_rows[_i].path, &sr, &gr,
				       &prr), 0);
	archive_wait(k, &sr, &gr, &prr);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS + 1);
	q = call_request();
	ck_assert_str_eq(q->method, archive_request_rows[_i].method);
	ck_assert_str_eq(q->path, want);
	ck_assert_msg(!fake_request_header(q, "Accept-Encoding", hv, sizeof(hv)), "Accept-Encoding: %s", hv);
	if (k == A_PUT) {
		ck_assert(fake_request_header(q, "Content-Type", hv, sizeof(hv)));
		ck_assert_str_eq(hv, "application/x-tar");
		ck_assert_uint_eq(q->body_len, TAR_LEN);
		ck_assert(memcmp(q->body, tar_bytes, TAR_LEN) == 0);
		ck_assert_int_eq(prr.error, 0);
		ck_assert_int_eq(prr.status, 200);
		ck_assert(prr.message_null);
	} else {
		ck_assert_msg(!fake_request_header(q, "Content-Type", hv, sizeof(hv)), "Content-Type: %s", hv);
		ck_assert_uint_eq(q->body_len, 0);
	}
}
END_TEST

/* The stat header is handed on raw, on HEAD and on GET; absent → NULL. */
START_TEST(test_archive_stat_header)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "HEAD", .path = ARCHIVE "?path=a", .headers = STAT_HEADER },
		{ .method = "HEAD", .path = ARCHIVE "?path=b" },
	};
	struct stat_rec a = { 0 }, b = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_archive_stat(engine, "c0ffee", "a", stat_cb, &a, NULL), 0);
	wait_stat(&a);
	ck_assert_int_eq(a.error, 0);
	ck_assert_int_eq(a.status, 200);
	ck_assert_str_eq(a.stat, STAT_B64);
	ck_assert_int_eq(docker_archive_stat(engine, "c0ffee", "b", stat_cb, &b, NULL), 0);
	wait_stat(&b);
	ck_assert_int_eq(b.error, 0);
	ck_assert_int_eq(b.status, 200);
	ck_assert(b.stat_null);
}
END_TEST

/* A 404 reaches each caller as a status, with the message where there is a body. */
START_TEST(test_archive_404)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "HEAD", .path = ARCHIVE, .status = 404 },
		{ .method = "GET", .path = ARCHIVE, .status = 404,
		  .body = "{\"message\":\"Could not find the file /nope in container c0ffee\"}\n" },
		{ .method = "PUT", .path = ARCHIVE, .status = 404, .body = "{\"message\":\"No such container: c0ffee\"}" },
	};
	enum archive_kind k = (enum archive_kind)_i;
	struct stat_rec sr = { 0 };
	struct get_rec gr = { 0 };
	struct reply_rec prr = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(archive_start(k, "c0ffee", "/nope", &sr, &gr, &prr), 0);
	archive_wait(k, &sr, &gr, &prr);
	ck_assert_int_eq(archive_calls(k, &sr, &gr, &prr), 1);
	switch (k) {
	case A_STAT:
		ck_assert_int_eq(sr.error, 0);
		ck_assert_int_eq(sr.status, 404);
		ck_assert(sr.stat_null);
		break;
	case A_GET:
		ck_assert_int_eq(gr.error, 0);
		ck_assert_int_eq(gr.status, 404);
		ck_assert_str_eq(gr.message, "Could not find the file /nope in container c0ffee");
		ck_assert(gr.stat_null);
		ck_assert_int_eq(gr.data_calls, 0);
		break;
	case A_PUT:
		ck_assert_int_eq(prr.error, 0);
		ck_assert_int_eq(prr.status, 404);
		ck_assert_str_eq(prr.message, "No such container: c0ffee");
		break;
	}
	ck_assert_str_eq(call_request()->method, archive_kind_method(k));
}
END_TEST

/* The tar reaches data whole and in order whatever the chunking; done
 * follows once with the stat header. */
START_TEST(test_archive_get_stream)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = ARCHIVE, .headers = STAT_HEADER "Content-Type: application/x-tar\r\n",
		  .body = tar_bytes, .body_len = TAR_LEN, .chunked = chunk_rows[_i].chunked,
		  .chunk_size = chunk_rows[_i].chunk_size, .chunk_delay_ms = chunk_rows[_i].chunk_delay_ms },
	};
	struct get_rec gr = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	get_start(&gr, "c0ffee", "/work/a.txt", 0, NULL);
	wait_get(&gr);
	ck_assert_int_eq(gr.error, 0);
	ck_assert_int_eq(gr.status, 200);
	ck_assert(gr.message_null);
	ck_assert_str_eq(gr.stat, STAT_B64);
	ck_assert_uint_eq(gr.got_len, TAR_LEN);
	ck_assert(memcmp(gr.got, tar_bytes, TAR_LEN) == 0);
	if (chunk_rows[_i].chunked && chunk_rows[_i].chunk_delay_ms > 0)
		ck_assert_int_gt(gr.data_calls, 1);
	fake_engine_stop();
}
END_TEST

/* A failed GET: Docker's message when the body is JSON within the cap, else NULL; data never runs. */
static const struct {
	int status;
	const char *body;
	const char *message;   /* NULL: none */
	bool chunked;
} get_error_rows[] = {
	{ 404, "{\"message\":\"No such container: c0ffee\"}\n", "No such container: c0ffee", false },
	{ 404, "{\"message\":\"Could not find the file /x in container c0ffee\"}",
	  "Could not find the file /x in container c0ffee", true },
	{ 400, "{\"message\":\"bad parameter\"}", "bad parameter", true },
	{ 500, "boom", NULL, false },
	{ 500, "{\"message\":7}", NULL, false },
	{ 404, NULL, NULL, false },
};

START_TEST(test_archive_get_error_body)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = ARCHIVE, .status = get_error_rows[_i].status, .body = get_error_rows[_i].body,
		  .chunked = get_error_rows[_i].chunked, .chunk_size = 5 },
	};
	struct get_rec gr = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	get_start(&gr, "c0ffee", "/x", 0, NULL);
	wait_get(&gr);
	ck_assert_int_eq(gr.error, 0);
	ck_assert_int_eq(gr.status, get_error_rows[_i].status);
	if (get_error_rows[_i].message)
		ck_assert_str_eq(gr.message, get_error_rows[_i].message);
	else
		ck_assert_msg(gr.message_null, "message %s", gr.message);
	ck_assert_int_eq(gr.data_calls, 0);
	fake_engine_stop();
}
END_TEST

/* An error body over DOCKER_MAX_ERROR_BODY is not kept: no message, still one done. */
START_TEST(test_archive_get_error_body_cap)
{
	size_t fill = DOCKER_MAX_ERROR_BODY;
	_cleanup_free_ char *pad = xmalloc(fill + 1);
	_cleanup_free_ char *body = NULL;
	struct fake_reply script[] = { PING, VERSION, { .method = "GET", .path = ARCHIVE, .status = 404 } };
	struct get_rec gr = { 0 };

	memset(pad, 'x', fill);
	pad[fill] = '\0';
	body = xasprintf("{\"message\":\"%s\"}", pad);
	script[2].body = body;
	start_reachable(script, ELEMENTSOF(script));
	get_start(&gr, "c0ffee", "/x", 0, NULL);
	wait_get(&gr);
	ck_assert_int_eq(gr.error, 0);
	ck_assert_int_eq(gr.status, 404);
	ck_assert(gr.message_null);
	ck_assert_int_eq(gr.data_calls, 0);
	fake_engine_stop();
}
END_TEST

/* data's negative return aborts the transfer: done gets that error once, no data after. */
START_TEST(test_archive_get_data_abort)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = ARCHIVE, .headers = STAT_HEADER, .body = tar_bytes, .body_len = TAR_LEN,
		  .chunked = true, .chunk_size = 4, .chunk_delay_ms = 2 },
	};
	struct get_rec gr = { .abort_at = 2, .abort_error = -ENOSPC };

	start_reachable(script, ELEMENTSOF(script));
	get_start(&gr, "c0ffee", "/x", 0, NULL);
	wait_get(&gr);
	ck_assert_int_eq(gr.error, -ENOSPC);
	ck_assert_int_eq(gr.data_calls, 2);
	ck_assert_int_eq(gr.status, 0);
	ck_assert(gr.message_null);
	ck_assert(gr.stat_null);
}
END_TEST

/* No whole-request deadline on a GET: a body slower than the engine's
 * timeout completes; the idle deadline still bounds a stall. */
START_TEST(test_archive_get_deadlines)
{
	static const struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "GET", .path = ARCHIVE "?path=slow", .body = "0123456789", .chunked = true, .chunk_size = 2,
		  .chunk_delay_ms = 60 },
		{ .method = "GET", .path = ARCHIVE "?path=stall", .body = "abc", .chunked = true, .stall = true },
	};
	static const struct engine_options short_opts = {
		.timeout_ms = 100, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
	};
	struct get_rec slow = { 0 }, stall = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	engine_set_options(engine, &short_opts);
	get_start(&slow, "c0ffee", "slow", 0, NULL);
	wait_get(&slow);
	ck_assert_int_eq(slow.error, 0);
	ck_assert_uint_eq(slow.got_len, 10);
	get_start(&stall, "c0ffee", "stall", 100, NULL);
	wait_get(&stall);   /* the stall never ends: only the idle deadline ends the GET */
	ck_assert_int_eq(stall.error, -ETIMEDOUT);
	ck_assert_uint_eq(stall.got_len, 3);
}
END_TEST

START_TEST(test_archive_get_cancel)
{
	static const struct fake_reply script[] = {
		PING, VERSION, { .method = "GET", .path = ARCHIVE, .body = "abc", .chunked = true, .stall = true },
	};
	struct get_rec gr = { 0 };
	struct engine_req *req = NULL;

	start_reachable(script, ELEMENTSOF(script));
	get_start(&gr, "c0ffee", "/x", 0, &req);
	ck_assert_ptr_nonnull(req);
	run_until(&gr.data_calls, 1, RUN_MAX_MS);
	engine_req_cancel(req);
	ck_assert_int_eq(gr.done, 1);   /* synchronously */
	ck_assert_int_eq(gr.error, -ECANCELED);
	run_for(SETTLE_MS);
	ck_assert_int_eq(gr.done, 1);
	ck_assert_int_eq(gr.data_after_done, 0);
}
END_TEST

/* PUT replies as docker_call: 200 success; 400/404 with Docker's message. */
static const struct {
	int status;
	const char *body;
	const char *message;   /* NULL: none */
} put_reply_rows[] = {
	{ 200, NULL, NULL },
	{ 400, "{\"message\":\"extraction point is not a directory\"}", "extraction point is not a directory" },
	{ 400, "{\"message\":\"container rootfs is marked read-only\"}", "container rootfs is marked read-only" },
	{ 404, "{\"message\":\"Could not find the file /w in container c0ffee\"}",
	  "Could not find the file /w in container c0ffee" },
};

START_TEST(test_archive_put_reply)
{
	struct fake_reply script[] = {
		PING, VERSION,
		{ .method = "PUT", .path = ARCHIVE, .status = put_reply_rows[_i].status, .body = put_reply_rows[_i].body },
	};
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", tar_bytes, TAR_LEN, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.error, 0);
	ck_assert_int_eq(rec.status, put_reply_rows[_i].status);
	if (put_reply_rows[_i].message)
		ck_assert_str_eq(rec.message, put_reply_rows[_i].message);
	else
		ck_assert_msg(rec.message_null, "message %s", rec.message);
	fake_engine_stop();
}
END_TEST

/* Over DOCKER_MAX_ARCHIVE_PUT: -EMSGSIZE, nothing sent, nothing fires
 * (the length is refused before the bytes are read). */
START_TEST(test_archive_put_too_big)
{
	static const struct fake_reply script[] = { PING, VERSION, { .path = API "/containers/", .repeat = true } };
	struct reply_rec rec = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", tar_bytes, (size_t)DOCKER_MAX_ARCHIVE_PUT + 1,
					    reply_cb, &rec, NULL), -EMSGSIZE);
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", tar_bytes, SIZE_MAX, reply_cb, &rec, NULL),
			 -EMSGSIZE);
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", tar_bytes, TAR_LEN, reply_cb, &rec, NULL), 0);
	wait_reply(&rec);
	ck_assert_int_eq(rec.status, 200);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS + 1);
}
END_TEST

/* Not reachable: -ENOTCONN, nothing sent, nothing fires. */
START_TEST(test_archive_not_reachable)
{
	struct stat_rec sr = { 0 };
	struct get_rec gr = { 0 };
	struct reply_rec prr = { 0 };

	for (enum archive_kind k = A_STAT; k <= A_PUT; k++)
		ck_assert_int_eq(archive_start(k, "c0ffee", "/w", &sr, &gr, &prr), -ENOTCONN);
	run_for(SETTLE_MS);
	ck_assert_int_eq(sr.calls, 0);
	ck_assert_int_eq(gr.done, 0);
	ck_assert_int_eq(prr.calls, 0);
	ck_assert_uint_eq(engine_requests_made(engine), 0);
}
END_TEST

/* Bad arguments: -EINVAL, nothing sent, nothing fires. */
START_TEST(test_archive_bad_arguments)
{
	static const struct fake_reply script[] = { PING, VERSION };
	struct stat_rec sr = { 0 };
	struct get_rec gr = { 0 };
	struct reply_rec prr = { 0 };

	start_reachable(script, ELEMENTSOF(script));
	for (enum archive_kind k = A_STAT; k <= A_PUT; k++) {
		ck_assert_int_eq(archive_start(k, "", "/w", &sr, &gr, &prr), -EINVAL);
		ck_assert_int_eq(archive_start(k, NULL, "/w", &sr, &gr, &prr), -EINVAL);
		ck_assert_int_eq(archive_start(k, "c0ffee", "", &sr, &gr, &prr), -EINVAL);
		ck_assert_int_eq(archive_start(k, "c0ffee", NULL, &sr, &gr, &prr), -EINVAL);
	}
	ck_assert_int_eq(docker_archive_stat(NULL, "c0ffee", "/w", stat_cb, &sr, NULL), -EINVAL);
	ck_assert_int_eq(docker_archive_stat(engine, "c0ffee", "/w", NULL, &sr, NULL), -EINVAL);
	ck_assert_int_eq(docker_archive_get(engine, "c0ffee", "/w", 0, NULL, get_done_cb, &gr, NULL), -EINVAL);
	ck_assert_int_eq(docker_archive_get(engine, "c0ffee", "/w", 0, get_data_cb, NULL, &gr, NULL), -EINVAL);
	ck_assert_int_eq(docker_archive_get(engine, "c0ffee", "/w", -1, get_data_cb, get_done_cb, &gr, NULL),
			 -EINVAL);
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", NULL, 1, reply_cb, &prr, NULL), -EINVAL);
	ck_assert_int_eq(docker_archive_put(engine, "c0ffee", "/w", tar_bytes, TAR_LEN, NULL, &prr, NULL), -EINVAL);
	run_for(SETTLE_MS);
	ck_assert_int_eq(sr.calls, 0);
	ck_assert_int_eq(gr.done, 0);
	ck_assert_int_eq(prr.calls, 0);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS);
}
END_TEST

/* ---- the suite ----------------------------------------------------------------------------------- */

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *docker_suite(void)
{
	Suite *s = suite_create("docker");
	TCase *tc;

	tc = tcase_create("escaping");
	tcase_add_loop_test(tc, test_escape, 0, (int)ELEMENTSOF(escape_rows));
	tcase_add_test(tc, test_escape_null);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("requests");
	tcase_add_loop_test(tc, test_wrapper_request, 0, (int)ELEMENTSOF(wrapper_rows));
	tcase_add_loop_test(tc, test_escape_on_the_wire, 0, (int)ELEMENTSOF(escape_wire_rows));
	tcase_add_test(tc, test_create_name_escaped);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("replies_and_failures");
	tcase_add_loop_test(tc, test_reply_decoding, 0, (int)ELEMENTSOF(reply_rows));
	tcase_add_test(tc, test_reply_too_big);
	tcase_add_test(tc, test_transport_error);
	tcase_add_test(tc, test_call_timeout);
	tcase_add_test(tc, test_call_cancel);
	tcase_add_test(tc, test_not_reachable_refused);
	tcase_add_test(tc, test_bad_arguments);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("pull");
	tcase_add_loop_test(tc, test_pull_ref_split, 0, (int)ELEMENTSOF(pull_ref_rows));
	tcase_add_loop_test(tc, test_pull_progress_in_order, 0, (int)ELEMENTSOF(chunk_rows));
	tcase_add_test(tc, test_pull_last_line_unterminated);
	tcase_add_loop_test(tc, test_pull_inband_error, 0, 2 * (int)ELEMENTSOF(inband_rows));
	tcase_add_loop_test(tc, test_pull_status, 0, (int)ELEMENTSOF(pull_status_rows));
	tcase_add_loop_test(tc, test_pull_malformed_line, 0, (int)ELEMENTSOF(malformed_rows));
	tcase_add_loop_test(tc, test_pull_line_cap, 0, 4);
	tcase_add_test(tc, test_pull_cancel);
	tcase_add_test(tc, test_pull_idle_timeout);
	tcase_add_test(tc, test_pull_connection_lost);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("archive");
	tcase_add_loop_test(tc, test_archive_request, 0, (int)ELEMENTSOF(archive_request_rows));
	tcase_add_test(tc, test_archive_stat_header);
	tcase_add_loop_test(tc, test_archive_404, A_STAT, A_PUT + 1);
	tcase_add_loop_test(tc, test_archive_get_stream, 0, (int)ELEMENTSOF(chunk_rows));
	tcase_add_loop_test(tc, test_archive_get_error_body, 0, (int)ELEMENTSOF(get_error_rows));
	tcase_add_test(tc, test_archive_get_error_body_cap);
	tcase_add_test(tc, test_archive_get_data_abort);
	tcase_add_test(tc, test_archive_get_deadlines);
	tcase_add_test(tc, test_archive_get_cancel);
	tcase_add_loop_test(tc, test_archive_put_reply, 0, (int)ELEMENTSOF(put_reply_rows));
	tcase_add_test(tc, test_archive_put_too_big);
	tcase_add_test(tc, test_archive_not_reachable);
	tcase_add_test(tc, test_archive_bad_arguments);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("events");
	tcase_add_test(tc, test_events_delivered);
	tcase_add_test(tc, test_events_no_filters);
	tcase_add_test(tc, test_events_reconnect_on_eof);
	tcase_add_test(tc, test_events_backoff);
	tcase_add_test(tc, test_events_backoff_reset);
	tcase_add_loop_test(tc, test_events_bad_line_reconnects, 0, 2);
	tcase_add_test(tc, test_events_engine_down_then_up);
	tcase_add_test(tc, test_events_start_before_reachable);
	tcase_add_test(tc, test_events_many_in_order);
	tcase_add_test(tc, test_events_engine_freed);
	tcase_add_test(tc, test_events_new_refusals);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("events_teardown");
	tcase_add_test(tc, test_events_free_in_event_cb);
	tcase_add_test(tc, test_events_free_in_resync_cb);
	tcase_add_test(tc, test_events_free_states);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(docker_suite());
	int failed;

	fake_run_dir_create("check-docker");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
