/* check_rpc.c — central params validation, the reply/fail/pending contract,
 * notifications, detached calls, and the daemon's own method table. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "jsonrpc.h"
#include "owner.h"
#include "registry.h"
#include "rpc.h"

struct test_params {
	const char *name;
	int64_t count;
	bool flag;
	json_t *obj;
	json_t *list;
	json_t *any;
};

static int check_not_empty(const json_t *v, char **reterr_message)
{
	if (json_string_length(v) == 0) {
		*reterr_message = strdup("param \"name\" must not be empty");
		return -EINVAL;
	}
	return 0;
}

static const struct rpc_param test_params_spec[] = {
	{ "name", RPC_PARAM_STRING, true, offsetof(struct test_params, name), check_not_empty },
	{ "count", RPC_PARAM_INT, false, offsetof(struct test_params, count), NULL },
	{ "flag", RPC_PARAM_BOOL, false, offsetof(struct test_params, flag), NULL },
	{ "obj", RPC_PARAM_OBJECT, false, offsetof(struct test_params, obj), NULL },
	{ "list", RPC_PARAM_ARRAY, false, offsetof(struct test_params, list), NULL },
	{ "any", RPC_PARAM_JSON, false, offsetof(struct test_params, any), NULL },
	{ NULL },
};

static struct test_params seen;
static bool seen_obj, seen_list, seen_any_null;
static int handler_calls;
static struct rpc_call *pending_call;

static struct rpc_result *t_echo(struct rpc_call *call, const void *params)
{
	const struct test_params *p = params;

	handler_calls++;
	seen = *p;
	/* Borrowed from the request: valid only until the call finishes. */
	seen_obj = json_is_object(p->obj);
	seen_list = json_is_array(p->list);
	seen_any_null = json_is_null(p->any);
	seen.obj = seen.list = seen.any = NULL;
	seen.name = NULL;
	return rpc_reply(call, json_pack("{s:s, s:I, s:b}", "name", p->name, "count",
					 (json_int_t)p->count, "flag", p->flag));
}

static struct rpc_result *t_fail(struct rpc_call *call, const void *params)
{
	(void)params;
	handler_calls++;
	return rpc_fail(call, MSB_ERR_ENGINE_UNAVAILABLE, json_pack("{s:s}", "extra", "x"),
			"engine %s", "down");
}

static struct rpc_result *t_pending(struct rpc_call *call, const void *params)
{
	(void)params;
	handler_calls++;
	pending_call = call;
	return rpc_pending(call);
}

static const struct rpc_method test_methods[] = {
	{ "test.echo", t_echo, test_params_spec, sizeof(struct test_params), NULL },
	{ "test.fail", t_fail, NULL, 0, NULL },
	{ "test.pending", t_pending, NULL, 0, NULL },
};

static int done_calls;
static json_t *last_reply;

static void done_cb(struct rpc_call *call, json_t *reply, void *arg)
{
	(void)call;
	ck_assert_ptr_eq(arg, &done_calls);
	done_calls++;
	json_decref(last_reply);
	last_reply = reply;
}

static int notify_calls;

static void notify_cb(struct rpc_call *call, json_t *notification, void *arg)
{
	(void)call;
	ck_assert_ptr_eq(arg, &done_calls);
	ck_assert_str_eq(json_string_value(json_object_get(notification, "method")), "test.progress");
	ck_assert_str_eq(json_string_value(json_object_get(notification, "jsonrpc")), "2.0");
	ck_assert_ptr_null(json_object_get(notification, "id"));
	notify_calls++;
	json_decref(notification);
}

static const struct rpc_call_ops test_ops = { .done = done_cb, .notify = notify_cb };

static void reset(void)
{
	memset(&seen, 0, sizeof(seen));
	seen_obj = seen_list = seen_any_null = false;
	handler_calls = done_calls = notify_calls = 0;
	json_decref(last_reply);
	last_reply = NULL;
	pending_call = NULL;
}

static struct rpc_call *run_table(const struct rpc_method *table, size_t n, const char *line)
{
	struct jsonrpc_request req;
	json_t *err = NULL;
	struct rpc_peer peer = { .pid = 1, .uid = 1000, .gid = 1000 };
	struct rpc_call *call;

	ck_assert_msg(jsonrpc_request_parse(line, strlen(line), &req, &err) == 0, "bad test line %s", line);
	call = rpc_dispatch(table, n, &req, &peer, NULL, &test_ops, &done_calls);
	jsonrpc_request_release(&req);
	return call;
}

static struct rpc_call *run(const char *line)
{
	return run_table(test_methods, 3, line);
}

static int reply_code(void)
{
	return (int)json_integer_value(json_object_get(json_object_get(last_reply, "error"), "code"));
}

static const char *reply_field(void)
{
	return json_string_value(json_object_get(
		json_object_get(json_object_get(last_reply, "error"), "data"), "field"));
}

static const char *reply_message(void)
{
	return json_string_value(json_object_get(json_object_get(last_reply, "error"), "message"));
}

START_TEST(valid_params_reach_the_handler)
{
	reset();
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"test.echo\",\"params\":"
			       "{\"name\":\"n\",\"count\":-3,\"flag\":true,\"obj\":{},\"list\":[1],\"any\":null}}"));
	ck_assert_int_eq(handler_calls, 1);
	ck_assert_int_eq(done_calls, 1);
	ck_assert_int_eq(seen.count, -3);
	ck_assert(seen.flag);
	ck_assert(seen_obj);
	ck_assert(seen_list);
	ck_assert(seen_any_null);
	ck_assert_int_eq(json_integer_value(json_object_get(last_reply, "id")), 7);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(last_reply, "result"), "name")), "n");
	reset();
}
END_TEST

struct bad_params_row {
	const char *params;
	const char *field;     /* NULL: no field */
	const char *message;   /* a part of the message */
};

static const struct bad_params_row bad_params_rows[] = {
	{ "[1,2]", NULL, "params must be an object" },
	{ "\"x\"", NULL, "params must be an object" },
	{ "null", NULL, "params must be an object" },
	{ "{}", "name", "missing param \"name\"" },
	{ "{\"count\":1}", "name", "missing param \"name\"" },
	{ "{\"name\":1}", "name", "must be a string" },
	{ "{\"name\":\"\"}", "name", "must not be empty" },
	{ "{\"name\":\"a\",\"count\":\"1\"}", "count", "must be an integer" },
	{ "{\"name\":\"a\",\"count\":1.5}", "count", "must be an integer" },
	{ "{\"name\":\"a\",\"flag\":1}", "flag", "must be a boolean" },
	{ "{\"name\":\"a\",\"obj\":[]}", "obj", "must be an object" },
	{ "{\"name\":\"a\",\"list\":{}}", "list", "must be an array" },
	{ "{\"name\":\"a\",\"bogus\":1}", "bogus", "unknown param \"bogus\" for test.echo" },
};

START_TEST(bad_params_name_the_field)
{
	const struct bad_params_row *row = &bad_params_rows[_i];
	char line[512];

	reset();
	snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"test.echo\",\"params\":%s}",
		 row->params);
	ck_assert_ptr_null(run(line));
	ck_assert_int_eq(handler_calls, 0);
	ck_assert_int_eq(done_calls, 1);
	ck_assert_int_eq(reply_code(), -32602);
	ck_assert_str_eq(json_string_value(json_object_get(last_reply, "id")), "s");
	if (row->field)
		ck_assert_str_eq(reply_field(), row->field);
	else
		ck_assert_ptr_null(reply_field());
	ck_assert_msg(strstr(reply_message(), row->message), "\"%s\" lacks \"%s\"", reply_message(),
		      row->message);
	reset();
}
END_TEST

START_TEST(unknown_method)
{
	reset();
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"no.such\"}"));
	ck_assert_int_eq(reply_code(), -32601);
	ck_assert(json_is_null(json_object_get(last_reply, "id")));
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(last_reply,
		"error"), "data"), "method")), "no.such");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(last_reply,
		"error"), "data"), "type")), "MethodNotFound");
	reset();
}
END_TEST

START_TEST(echoed_names_are_bounded)
{
	size_t n = 100000;
	char *line = malloc(n + 256), *name = malloc(n + 1);
	json_t *err;

	memset(name, 'm', n);
	name[n] = '\0';
	reset();
	snprintf(line, n + 256, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\"}", name);
	ck_assert_ptr_null(run(line));
	err = json_object_get(last_reply, "error");
	ck_assert_uint_eq(strlen(json_string_value(json_object_get(json_object_get(err, "data"), "method"))),
			  MSB_ECHO_MAX_BYTES);
	ck_assert_uint_lt(strlen(reply_message()), MSB_ECHO_MAX_BYTES + 64);
	reset();
	snprintf(line, n + 256, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\","
		 "\"params\":{\"name\":\"a\",\"%s\":1}}", name);
	ck_assert_ptr_null(run(line));
	ck_assert_uint_eq(strlen(reply_field()), MSB_ECHO_MAX_BYTES);
	ck_assert_uint_lt(strlen(reply_message()), MSB_ECHO_MAX_BYTES + 64);
	reset();
	free(line);
	free(name);
}
END_TEST

START_TEST(handler_failure_renders_the_table)
{
	reset();
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.fail\"}"));
	ck_assert_int_eq(reply_code(), 1000);
	ck_assert_str_eq(reply_message(), "engine down");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(last_reply,
		"error"), "data"), "type")), "EngineUnavailable");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(last_reply,
		"error"), "data"), "extra")), "x");
	reset();
}
END_TEST

START_TEST(notifications_get_no_reply)
{
	reset();
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\",\"params\":{\"name\":\"n\"}}"));
	ck_assert_int_eq(handler_calls, 1);
	ck_assert_int_eq(done_calls, 1);
	ck_assert_ptr_null(last_reply);
	/* Not even for errors. */
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"method\":\"no.such\"}"));
	ck_assert_int_eq(done_calls, 2);
	ck_assert_ptr_null(last_reply);
	ck_assert_ptr_null(run("{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\",\"params\":{}}"));
	ck_assert_int_eq(done_calls, 3);
	ck_assert_ptr_null(last_reply);
	reset();
}
END_TEST

START_TEST(pending_call_replies_once_later)
{
	struct rpc_call *call;

	reset();
	call = run("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"test.pending\"}");
	ck_assert_ptr_nonnull(call);
	ck_assert_ptr_eq(call, pending_call);
	ck_assert_int_eq(done_calls, 0);
	ck_assert_str_eq(rpc_call_method(call), "test.pending");
	ck_assert_int_eq(rpc_call_peer(call)->uid, 1000);
	ck_assert(!rpc_call_is_detached(call));
	rpc_call_reply(call, json_string("late"));
	ck_assert_int_eq(done_calls, 1);
	ck_assert_str_eq(json_string_value(json_object_get(last_reply, "result")), "late");
	ck_assert_str_eq(json_string_value(json_object_get(last_reply, "id")), "p");
	reset();
}
END_TEST

START_TEST(pending_call_fails_later)
{
	struct rpc_call *call;

	reset();
	call = run("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.pending\"}");
	rpc_call_fail(call, MSB_ERR_ENGINE_TIMEOUT, NULL, NULL);
	ck_assert_int_eq(done_calls, 1);
	ck_assert_int_eq(reply_code(), 1002);
	reset();
}
END_TEST

START_TEST(pending_call_notifies_its_client)
{
	struct rpc_call *call;

	reset();
	call = run("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"test.pending\"}");
	rpc_call_notify(call, "test.progress", json_pack("{s:i}", "done", 1));
	rpc_call_notify(call, "test.progress", NULL);
	ck_assert_int_eq(notify_calls, 2);
	ck_assert_int_eq(done_calls, 0);
	rpc_call_detach(call);
	rpc_call_notify(call, "test.progress", json_object());   /* dropped */
	ck_assert_int_eq(notify_calls, 2);
	rpc_call_reply(call, NULL);
	reset();
}
END_TEST

START_TEST(detached_call_drops_its_reply)
{
	struct rpc_call *call;

	reset();
	call = run("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.pending\"}");
	rpc_call_detach(call);
	ck_assert(rpc_call_is_detached(call));
	rpc_call_reply(call, json_string("nobody listens"));   /* freed, not sent (ASan checks) */
	ck_assert_int_eq(done_calls, 0);
	ck_assert_ptr_null(last_reply);
	reset();
}
END_TEST

START_TEST(daemon_methods_take_no_params)
{
	static const char *const methods[] = { "daemon.describe", "daemon.status", "daemon.engine" };

	for (size_t i = 0; i < 3; i++) {
		char line[256];

		reset();
		snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\","
			 "\"params\":{\"bogus\":true}}", methods[i]);
		ck_assert_ptr_null(run_table(msbd_methods, msbd_n_methods, line));
		ck_assert_int_eq(reply_code(), -32602);
		ck_assert_str_eq(reply_field(), "bogus");
	}
	reset();
}
END_TEST

START_TEST(call_numbers_increase)
{
	struct rpc_call *a, *b;

	reset();
	a = run("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.pending\"}");
	b = run("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.pending\"}");
	ck_assert_uint_gt(rpc_call_seq(b), rpc_call_seq(a));
	rpc_call_reply(a, NULL);
	rpc_call_reply(b, NULL);
	ck_assert_int_eq(done_calls, 2);
	ck_assert(json_is_null(json_object_get(last_reply, "result")));
	reset();
}
END_TEST

static int cancel_calls;
static const char *cancel_why;

static bool cancel_hook(struct rpc_call *call, const char *why, void *arg)
{
	(void)call;
	cancel_calls++;
	cancel_why = why;
	return arg != NULL;   /* "taken" when given an arg */
}

static struct rpc_call *sibling_of;
static struct rpc_call *sibling;

static struct rpc_call *find_cb(const struct rpc_call *call, const json_t *id, void *arg)
{
	(void)arg;
	ck_assert_ptr_eq(call, sibling_of);
	return json_integer_value(id) == 7 ? sibling : NULL;
}

static const struct rpc_call_ops find_ops = { .done = done_cb, .notify = notify_cb, .find = find_cb };

/* The cancel hook (call.cancel, a closed connection) and the lookup of a
 * sibling call by its id (exec.stdin, call.cancel). */
START_TEST(cancel_hooks_and_siblings)
{
	struct jsonrpc_request req;
	struct rpc_peer peer = { .pid = 1 };
	static int token;
	struct rpc_call *call, *other;
	json_t *err = NULL, *id7 = json_integer(7), *id8 = json_integer(8);
	const char *line = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"test.pending\"}";

	reset();
	cancel_calls = 0;
	call = run("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"test.pending\"}");
	/* No hook: not cancellable, nothing found (no find op). */
	ck_assert(!rpc_call_is_cancellable(call));
	ck_assert(!rpc_call_cancel(call, "call.cancel"));
	ck_assert_ptr_null(rpc_call_find_sibling(call, id7));
	rpc_call_set_cancel(call, cancel_hook, &token);
	ck_assert(rpc_call_is_cancellable(call));
	ck_assert_ptr_eq(rpc_call_cancel_arg(call, cancel_hook), &token);
	ck_assert(rpc_call_cancel(call, "call.cancel"));
	ck_assert_int_eq(cancel_calls, 1);
	ck_assert_str_eq(cancel_why, "call.cancel");
	ck_assert_int_eq(done_calls, 0);   /* a hook only arranges the cancel */
	rpc_call_set_cancel(call, cancel_hook, NULL);
	ck_assert(!rpc_call_cancel(call, "the client leaving"));   /* the hook says no */
	ck_assert_ptr_null(rpc_call_cancel_arg(call, cancel_hook));
	rpc_call_reply(call, NULL);
	ck_assert_int_eq(done_calls, 1);

	/* Siblings through the transport's find op; a detached call finds none. */
	ck_assert_int_eq(jsonrpc_request_parse(line, strlen(line), &req, &err), 0);
	other = rpc_dispatch(test_methods, 3, &req, &peer, NULL, &find_ops, &done_calls);
	jsonrpc_request_release(&req);
	ck_assert_int_eq(jsonrpc_request_parse(line, strlen(line), &req, &err), 0);
	call = rpc_dispatch(test_methods, 3, &req, &peer, NULL, &find_ops, &done_calls);
	jsonrpc_request_release(&req);
	sibling = other;
	sibling_of = call;
	ck_assert_ptr_eq(rpc_call_find_sibling(call, id7), other);
	ck_assert_ptr_null(rpc_call_find_sibling(call, id8));
	ck_assert_ptr_null(rpc_call_find_sibling(call, json_null()));
	rpc_call_detach(call);
	ck_assert_ptr_null(rpc_call_find_sibling(call, id7));
	rpc_call_reply(call, NULL);
	rpc_call_reply(other, NULL);
	json_decref(id7);
	json_decref(id8);
	reset();
}
END_TEST

/* The owner rule (owner.h): a peer whose credentials could not be read
 * (server.c: uid (uid_t)-1, never admin) passes no check, as before
 * owner.c: its sandboxes' owner, an unlabelled one, every event. */
START_TEST(unknown_peer_reaches_nothing)
{
	const struct rpc_peer unknown = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	const struct rpc_peer user = { .pid = 1, .uid = 1000, .gid = 1000 };
	const struct rpc_peer admin = { .pid = 1, .uid = 1001, .gid = 1001, .admin = true };
	const struct sandbox owned = { .has_owner = true, .owner = 1000 };
	const struct sandbox unlabelled = { .has_owner = false };

	ck_assert(!owner_admits(&unknown, 1000));
	ck_assert(!owner_may_reach(&unknown, &owned));
	ck_assert(!owner_may_reach(&unknown, &unlabelled));
	ck_assert(owner_admits(&user, 1000));
	ck_assert(!owner_admits(&user, 1001));
	ck_assert(owner_may_reach(&user, &owned));
	ck_assert(!owner_may_reach(&user, &unlabelled));
	ck_assert(owner_admits(&admin, 1000));
	ck_assert(owner_may_reach(&admin, &owned));
	ck_assert(owner_may_reach(&admin, &unlabelled));
}
END_TEST

static Suite *rpc_suite(void)
{
	Suite *s = suite_create("rpc");
	TCase *params = tcase_create("params");
	TCase *contract = tcase_create("contract");

	tcase_add_test(params, valid_params_reach_the_handler);
	tcase_add_loop_test(params, bad_params_name_the_field, 0,
			    sizeof(bad_params_rows) / sizeof(bad_params_rows[0]));
	tcase_add_test(params, unknown_method);
	tcase_add_test(params, echoed_names_are_bounded);
	tcase_add_test(params, daemon_methods_take_no_params);
	tcase_add_test(contract, handler_failure_renders_the_table);
	tcase_add_test(contract, notifications_get_no_reply);
	tcase_add_test(contract, pending_call_replies_once_later);
	tcase_add_test(contract, pending_call_fails_later);
	tcase_add_test(contract, pending_call_notifies_its_client);
	tcase_add_test(contract, detached_call_drops_its_reply);
	tcase_add_test(contract, call_numbers_increase);
	tcase_add_test(contract, cancel_hooks_and_siblings);
	tcase_add_test(contract, unknown_peer_reaches_nothing);
	suite_add_tcase(s, params);
	suite_add_tcase(s, contract);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(rpc_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
