/* check_jsonrpc.c — the JSON-RPC 2.0 envelope: request validation (server
 * side), reply builders, request builder and reply parsing (client side).
 * Run under ASan: every json_t handed out must be released, leaks fail. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "errors.h"
#include "frame.h"
#include "jsonrpc.h"
#include "msb-limits.h"

struct bytes {
	const char *p;
	size_t n;
};
#define B(lit) { lit, sizeof(lit) - 1 }

static json_t *parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &e);

	ck_assert_msg(j != NULL, "test JSON %s: %s", s, e.text);
	return j;
}

static bool json_eq_text(const json_t *v, const char *text)
{
	json_auto_t *want = parse(text);

	return json_equal((json_t *)v, want);
}

/* Checks an error reply's shape: exactly jsonrpc/id/error, error exactly
 * code/message/data, data.type the table's name for code. Returns data. */
static json_t *check_error_reply(const json_t *reply, int code, const char *id)
{
	json_t *err, *data;
	_cleanup_free_ char *dump = json_dumps(reply, JSON_COMPACT);

	ck_assert_msg(json_is_object(reply), "reply is not an object");
	ck_assert_uint_eq(json_object_size(reply), 3);
	ck_assert_str_eq(json_string_value(json_object_get(reply, "jsonrpc")), "2.0");
	ck_assert_msg(json_object_get(reply, "id") != NULL, "reply without id: %s", dump);
	ck_assert_msg(json_eq_text(json_object_get(reply, "id"), id),
		      "reply %s: id is not %s", dump, id);
	err = json_object_get(reply, "error");
	ck_assert_msg(json_is_object(err), "reply %s: no error object", dump);
	ck_assert_uint_eq(json_object_size(err), 3);
	ck_assert_msg(json_is_integer(json_object_get(err, "code")), "%s: code", dump);
	ck_assert_int_eq(json_integer_value(json_object_get(err, "code")), code);
	ck_assert_msg(json_is_string(json_object_get(err, "message")), "%s: message", dump);
	ck_assert_str_ne(json_string_value(json_object_get(err, "message")), "");
	data = json_object_get(err, "data");
	ck_assert_msg(json_is_object(data), "%s: data", dump);
	ck_assert_str_eq(json_string_value(json_object_get(data, "type")), msb_error_name(code));
	return data;
}

/* ---- requests refused --------------------------------------------------- */

struct reject_row {
	const char *name;
	struct bytes in;
	int code;              /* the return value, and error.code */
	const char *id;        /* the reply's id, as JSON text */
	const char *type;      /* data.type */
	const char *member;    /* data.member, or NULL when there must be none */
	bool detail;           /* data.detail is a non-empty string */
	const char *msg_has;   /* a word error.message must hold, or NULL */
};

#define PARSE_ROW(name, lit) \
	{ name, B(lit), MSB_ERR_PARSE, "null", "ParseError", NULL, true, NULL }
#define INVALID_ROW(name, lit, id, msg) \
	{ name, B(lit), MSB_ERR_INVALID_REQUEST, id, "InvalidRequest", NULL, false, msg }
#define MEMBER_ROW(name, lit, id, member) \
	{ name, B(lit), MSB_ERR_INVALID_REQUEST, id, "InvalidRequest", member, false, member }

/* A string of 256 bytes: MSB_ID_MAX_BYTES. */
#define S16 "abcdefghijklmnop"
#define S256 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16 S16

static const struct reject_row reject_rows[] = {
	PARSE_ROW("not JSON", "hello"),
	PARSE_ROW("empty", ""),
	PARSE_ROW("whitespace", "   "),
	PARSE_ROW("truncated object", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1"),
	PARSE_ROW("trailing garbage", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1} x"),
	PARSE_ROW("two objects", "{\"jsonrpc\":\"2.0\",\"method\":\"m\"}{\"jsonrpc\":\"2.0\",\"method\":\"m\"}"),
	PARSE_ROW("trailing comma", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,}"),
	PARSE_ROW("duplicate method", "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"method\":\"b\",\"id\":1}"),
	PARSE_ROW("duplicate id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"id\":2}"),
	PARSE_ROW("duplicate inside params",
		  "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"params\":{\"a\":1,\"a\":1}}"),
	PARSE_ROW("NUL byte", "{\"jsonrpc\":\"2.0\",\0\"method\":\"m\",\"id\":1}"),
	PARSE_ROW("invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"method\":\"\xff\xfe\",\"id\":1}"),
	PARSE_ROW("lone surrogate", "{\"jsonrpc\":\"2.0\",\"method\":\"\\ud800\",\"id\":1}"),
	PARSE_ROW("integer id too big", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":99999999999999999999}"),

	INVALID_ROW("empty batch", "[]", "null", "batch"),
	INVALID_ROW("batch", "[{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}]", "null", "batch"),
	INVALID_ROW("string", "\"{}\"", "null", "object"),
	INVALID_ROW("number", "42", "null", "object"),
	INVALID_ROW("real", "1.5", "null", "object"),
	INVALID_ROW("true", "true", "null", "object"),
	INVALID_ROW("null", "null", "null", "object"),

	INVALID_ROW("jsonrpc missing", "{\"method\":\"m\",\"id\":7}", "7", "jsonrpc"),
	INVALID_ROW("jsonrpc 1.0", "{\"jsonrpc\":\"1.0\",\"method\":\"m\",\"id\":\"abc\"}", "\"abc\"", "jsonrpc"),
	INVALID_ROW("jsonrpc number", "{\"jsonrpc\":2.0,\"method\":\"m\",\"id\":3}", "3", "jsonrpc"),
	INVALID_ROW("jsonrpc null", "{\"jsonrpc\":null,\"method\":\"m\",\"id\":null}", "null", "jsonrpc"),
	INVALID_ROW("jsonrpc padded", "{\"jsonrpc\":\"2.0 \",\"method\":\"m\",\"id\":-4}", "-4", "jsonrpc"),
	INVALID_ROW("jsonrpc missing, notification", "{\"method\":\"m\"}", "null", "jsonrpc"),
	INVALID_ROW("jsonrpc missing, bad id", "{\"method\":\"m\",\"id\":1.5}", "null", "id"),

	INVALID_ROW("method missing", "{\"jsonrpc\":\"2.0\",\"id\":5}", "5", "method"),
	INVALID_ROW("method number", "{\"jsonrpc\":\"2.0\",\"method\":42,\"id\":\"x\"}", "\"x\"", "method"),
	INVALID_ROW("method null", "{\"jsonrpc\":\"2.0\",\"method\":null,\"id\":0}", "0", "method"),
	INVALID_ROW("method array", "{\"jsonrpc\":\"2.0\",\"method\":[\"m\"],\"id\":1}", "1", "method"),

	INVALID_ROW("id real", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1.5}", "null", "id"),
	INVALID_ROW("id integral real", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1.0}", "null", "id"),
	INVALID_ROW("id exponent", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1e3}", "null", "id"),
	INVALID_ROW("id true", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":true}", "null", "id"),
	INVALID_ROW("id false", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":false}", "null", "id"),
	INVALID_ROW("id object", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":{\"a\":1}}", "null", "id"),
	INVALID_ROW("id array", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":[1]}", "null", "id"),
	INVALID_ROW("id empty array", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":[]}", "null", "id"),
	INVALID_ROW("id bad, method missing", "{\"jsonrpc\":\"2.0\",\"id\":{}}", "null", "id"),
	INVALID_ROW("id over 256 bytes", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"x" S256 "\"}", "null",
		    "256"),

	MEMBER_ROW("unknown member", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":9,\"foo\":1}", "9", "foo"),
	MEMBER_ROW("unknown member first",
		   "{\"extra\":null,\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"s\"}", "\"s\"", "extra"),
	MEMBER_ROW("unknown member, notification", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"x\":{}}", "null", "x"),
	MEMBER_ROW("result in a request", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"result\":1}", "1", "result"),
	MEMBER_ROW("members are case-sensitive", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"ID\":1}", "null", "ID"),
	MEMBER_ROW("Params", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":2,\"Params\":{}}", "2", "Params"),
};

START_TEST(test_reject)
{
	const struct reject_row *row = &reject_rows[_i];
	struct jsonrpc_request req = { .root = (json_t *)0x1, .method = "untouched" };
	json_t *reply = NULL, *data, *member, *detail;
	const char *msg;
	int r;

	r = jsonrpc_request_parse(row->in.p, row->in.n, &req, &reply);
	ck_assert_msg(r == row->code, "%s: returned %d, want %d", row->name, r, row->code);
	ck_assert_msg(reply != NULL, "%s: no error reply", row->name);
	/* ret is written only on success. */
	ck_assert_ptr_eq(req.root, (json_t *)0x1);
	ck_assert_str_eq(req.method, "untouched");

	data = check_error_reply(reply, row->code, row->id);
	ck_assert_str_eq(json_string_value(json_object_get(data, "type")), row->type);
	member = json_object_get(data, "member");
	if (row->member)
		ck_assert_msg(json_is_string(member) && !strcmp(json_string_value(member), row->member),
			      "%s: data.member is not \"%s\"", row->name, row->member);
	else
		ck_assert_msg(member == NULL, "%s: unexpected data.member", row->name);
	detail = json_object_get(data, "detail");
	if (row->detail)
		ck_assert_msg(json_is_string(detail) && json_string_length(detail) > 0,
			      "%s: no data.detail", row->name);
	msg = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
	if (row->msg_has)
		ck_assert_msg(strstr(msg, row->msg_has), "%s: message \"%s\" does not mention %s",
			      row->name, msg, row->msg_has);
	/* The reply goes on the wire: it must encode as one frame. */
	{
		size_t len;
		_cleanup_free_ char *frame = frame_encode(reply, &len);

		ck_assert_ptr_nonnull(frame);
	}
	json_decref(reply);
}
END_TEST

/* ---- requests accepted -------------------------------------------------- */

struct accept_row {
	const char *name;
	const char *in;
	const char *id;      /* req.id as JSON text; NULL: a notification */
	const char *method;
	const char *params;  /* req.params as JSON text; NULL: absent */
};

static const struct accept_row accept_rows[] = {
	{ "string id", "{\"jsonrpc\":\"2.0\",\"method\":\"sandbox.create\",\"id\":\"abc\",\"params\":{\"a\":1}}",
	  "\"abc\"", "sandbox.create", "{\"a\":1}" },
	{ "empty string id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"\"}", "\"\"", "m", NULL },
	{ "integer id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":42}", "42", "m", NULL },
	{ "negative id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":-7}", "-7", "m", NULL },
	{ "zero id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":0}", "0", "m", NULL },
	{ "id of 256 bytes", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"" S256 "\"}", "\"" S256 "\"", "m", NULL },
	{ "large id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":9007199254740993}", "9007199254740993", "m", NULL },
	{ "null id", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":null}", "null", "m", NULL },
	{ "notification", "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\"}", NULL, "daemon.status", NULL },
	{ "notification with params", "{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{}}", NULL, "n", "{}" },
	{ "member order free", "{\"params\":{\"x\":[1]},\"id\":1,\"method\":\"m\",\"jsonrpc\":\"2.0\"}",
	  "1", "m", "{\"x\":[1]}" },
	{ "whitespace around", "  \t{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}\r\n ", "1", "m", NULL },
	{ "empty method", "{\"jsonrpc\":\"2.0\",\"method\":\"\",\"id\":1}", "1", "", NULL },
	{ "unicode method", "{\"jsonrpc\":\"2.0\",\"method\":\"\\u00e9t\\u00e9\",\"id\":1}", "1", "\u00e9t\u00e9", NULL },
	/* params shape is the dispatcher's business, not the envelope's. */
	{ "params array", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"params\":[1,2]}", "1", "m", "[1,2]" },
	{ "params string", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"params\":\"s\"}", "1", "m", "\"s\"" },
	{ "params null", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"params\":null}", "1", "m", "null" },
	{ "params number", "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1,\"params\":3}", "1", "m", "3" },
};

START_TEST(test_accept)
{
	const struct accept_row *row = &accept_rows[_i];
	struct jsonrpc_request req = { 0 };
	json_t *reply = (json_t *)0x1;

	ck_assert_msg(jsonrpc_request_parse(row->in, strlen(row->in), &req, &reply) == 0,
		      "%s: refused", row->name);
	/* reterr_reply is written only on failure. */
	ck_assert_ptr_eq(reply, (json_t *)0x1);
	ck_assert_ptr_nonnull(req.root);
	if (row->id) {
		ck_assert_msg(req.id != NULL, "%s: id is NULL", row->name);
		ck_assert_msg(json_eq_text(req.id, row->id), "%s: id is not %s", row->name, row->id);
		ck_assert(jsonrpc_id_is_valid(req.id));
	} else {
		ck_assert_msg(req.id == NULL, "%s: a notification has an id", row->name);
	}
	ck_assert_str_eq(req.method, row->method);
	if (row->params) {
		ck_assert_msg(req.params != NULL, "%s: params lost", row->name);
		ck_assert_msg(json_eq_text(req.params, row->params), "%s: params not %s", row->name, row->params);
	} else {
		ck_assert_msg(req.params == NULL, "%s: params not NULL", row->name);
	}
	/* Borrowed from root. */
	if (req.id)
		ck_assert_ptr_eq(req.id, json_object_get(req.root, "id"));
	if (req.params)
		ck_assert_ptr_eq(req.params, json_object_get(req.root, "params"));
	jsonrpc_request_release(&req);
	ck_assert_ptr_null(req.root);
	ck_assert_ptr_null(req.id);
	ck_assert_ptr_null(req.method);
	ck_assert_ptr_null(req.params);
	/* Releasing twice is harmless. */
	jsonrpc_request_release(&req);
}
END_TEST

/* A null id is a request with id null, not a notification. */
START_TEST(test_null_id_is_request)
{
	static const char in[] = "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":null}";
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL;

	ck_assert_int_eq(jsonrpc_request_parse(in, strlen(in), &req, &reply), 0);
	ck_assert_ptr_nonnull(req.id);
	ck_assert(json_is_null(req.id));
	jsonrpc_request_release(&req);
}
END_TEST

/* A buffer not NUL-terminated: only len bytes are read. */
START_TEST(test_parse_uses_len)
{
	static const char in[] = "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}GARBAGE";
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL;

	ck_assert_int_eq(jsonrpc_request_parse(in, strlen(in) - 7, &req, &reply), 0);
	ck_assert_ptr_null(reply);
	ck_assert_str_eq(req.method, "m");
	jsonrpc_request_release(&req);
	ck_assert_int_eq(jsonrpc_request_parse(in, strlen(in), &req, &reply), MSB_ERR_PARSE);
	json_decref(reply);
}
END_TEST

struct id_row {
	const char *json;  /* NULL: a NULL pointer */
	bool valid;
};

static const struct id_row id_rows[] = {
	{ "\"a\"", true }, { "\"\"", true }, { "0", true }, { "-1", true },
	{ "9223372036854775807", true }, { "null", true },
	{ "1.5", false }, { "1.0", false }, { "true", false }, { "false", false },
	{ "{}", false }, { "[]", false }, { NULL, false },
};

START_TEST(test_id_is_valid)
{
	const struct id_row *row = &id_rows[_i];
	json_auto_t *id = row->json ? parse(row->json) : NULL;

	ck_assert_msg(jsonrpc_id_is_valid(id) == row->valid, "id %s", row->json ? row->json : "NULL");
}
END_TEST

/* ---- reply builders ----------------------------------------------------- */

START_TEST(test_reply_result)
{
	json_auto_t *id = json_integer(5);
	json_t *reply;

	reply = jsonrpc_reply_result(id, json_pack("{s:b}", "ok", 1));
	ck_assert(json_eq_text(reply, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"ok\":true}}"));
	/* id borrowed: the reply holds its own reference. */
	ck_assert_int_eq(id->refcount, 2);
	ck_assert_ptr_eq(json_object_get(reply, "id"), id);
	json_decref(reply);
	ck_assert_int_eq(id->refcount, 1);

	reply = jsonrpc_reply_result(NULL, NULL);
	ck_assert(json_eq_text(reply, "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":null}"));
	json_decref(reply);

	reply = jsonrpc_reply_result(json_null(), json_string("s"));
	ck_assert(json_eq_text(reply, "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":\"s\"}"));
	json_decref(reply);
}
END_TEST

START_TEST(test_reply_error)
{
	json_auto_t *id = json_string("req-1");
	json_t *err = msb_error_object(MSB_ERR_METHOD_NOT_FOUND, "no such method: x", NULL);
	json_t *reply;

	/* error stolen: keep one extra reference to watch it. */
	json_incref(err);
	reply = jsonrpc_reply_error(id, err);
	ck_assert_int_eq(err->refcount, 2);
	ck_assert_int_eq(id->refcount, 2);
	check_error_reply(reply, MSB_ERR_METHOD_NOT_FOUND, "\"req-1\"");
	ck_assert_str_eq(json_string_value(json_object_get(err, "message")), "no such method: x");
	json_decref(reply);
	ck_assert_int_eq(err->refcount, 1);
	ck_assert_int_eq(id->refcount, 1);
	json_decref(err);

	reply = jsonrpc_reply_error(NULL, msb_error_object(MSB_ERR_PARSE, NULL, NULL));
	check_error_reply(reply, MSB_ERR_PARSE, "null");
	ck_assert_ptr_null(json_object_get(reply, "result"));
	json_decref(reply);
}
END_TEST

/* ---- client side -------------------------------------------------------- */

START_TEST(test_request_new)
{
	json_t *req, *params = json_pack("{s:s}", "image", "debian");
	struct jsonrpc_request back = { 0 };
	json_t *reply = NULL;
	_cleanup_free_ char *frame = NULL;
	size_t len;

	json_incref(params);
	req = jsonrpc_request_new(17, "sandbox.create", params);
	ck_assert(json_eq_text(req, "{\"jsonrpc\":\"2.0\",\"id\":17,\"method\":\"sandbox.create\","
				    "\"params\":{\"image\":\"debian\"}}"));
	ck_assert_ptr_eq(json_object_get(req, "params"), params);
	ck_assert_int_eq(params->refcount, 2);

	/* What the client builds the server accepts. */
	frame = frame_encode(req, &len);
	ck_assert_ptr_nonnull(frame);
	ck_assert_int_eq(jsonrpc_request_parse(frame, len - 1, &back, &reply), 0);
	ck_assert_str_eq(back.method, "sandbox.create");
	ck_assert_int_eq(json_integer_value(back.id), 17);
	ck_assert(json_equal(back.params, params));
	jsonrpc_request_release(&back);
	json_decref(req);
	ck_assert_int_eq(params->refcount, 1);
	json_decref(params);

	req = jsonrpc_request_new(-3, "daemon.describe", NULL);
	ck_assert(json_eq_text(req, "{\"jsonrpc\":\"2.0\",\"id\":-3,\"method\":\"daemon.describe\"}"));
	ck_assert_ptr_null(json_object_get(req, "params"));
	json_decref(req);
}
END_TEST

struct response_row {
	const char *name;
	const char *in;
	int ret;              /* 0 or -EPROTO */
	const char *id;       /* JSON text of resp.id when ret == 0 */
	const char *result;   /* JSON text of resp.result; NULL: an error reply */
	int code;             /* error_code for an error reply */
	const char *message;
	const char *type;     /* error_type, or NULL */
};

#define RESP_BAD(name, in) { name, in, -EPROTO, NULL, NULL, 0, NULL, NULL }

static const struct response_row response_rows[] = {
	{ "result", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":1}}", 0, "1", "{\"a\":1}", 0, NULL, NULL },
	{ "result null", "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"result\":null}", 0, "\"s\"", "null", 0, NULL, NULL },
	{ "result false", "{\"id\":2,\"result\":false,\"jsonrpc\":\"2.0\"}", 0, "2", "false", 0, NULL, NULL },
	{ "error with type",
	  "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1101,\"message\":\"no egress\","
	  "\"data\":{\"type\":\"SandboxEgressNotEnforced\",\"mode\":\"closed\"}}}",
	  0, "1", NULL, 1101, "no egress", "SandboxEgressNotEnforced" },
	{ "error, id null", "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"invalid JSON\","
	  "\"data\":{\"type\":\"ParseError\"}}}", 0, "null", NULL, -32700, "invalid JSON", "ParseError" },
	{ "error without data", "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"m\"}}",
	  0, "3", NULL, -32601, "m", NULL },
	{ "error, data not an object", "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":1,\"message\":\"m\",\"data\":[1]}}",
	  0, "3", NULL, 1, "m", NULL },
	{ "error, code INT_MIN", "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-2147483648,\"message\":\"m\"}}",
	  0, "3", NULL, INT_MIN, "m", NULL },
	{ "error, data.type not a string",
	  "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":1,\"message\":\"m\",\"data\":{\"type\":5}}}",
	  0, "3", NULL, 1, "m", NULL },

	RESP_BAD("both", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{\"code\":1,\"message\":\"m\"}}"),
	RESP_BAD("neither", "{\"jsonrpc\":\"2.0\",\"id\":1}"),
	RESP_BAD("error null", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":null}"),
	RESP_BAD("error string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"bad\"}"),
	RESP_BAD("error without code", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"m\"}}"),
	RESP_BAD("error code real", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1.5,\"message\":\"m\"}}"),
	RESP_BAD("error code string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"1\",\"message\":\"m\"}}"),
	/* fuzz_frame: a code past int wrapped onto a known one (2^32 - 32600 read as -32600). */
	RESP_BAD("error code past int", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":4294934696,\"message\":\"m\"}}"),
	RESP_BAD("error code below int", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-2147483649,\"message\":\"m\"}}"),
	RESP_BAD("error without message", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}"),
	RESP_BAD("error message not string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":2}}"),
	RESP_BAD("version missing", "{\"id\":1,\"result\":1}"),
	RESP_BAD("version 1.0", "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":1}"),
	RESP_BAD("version number", "{\"jsonrpc\":2,\"id\":1,\"result\":1}"),
	RESP_BAD("id missing", "{\"jsonrpc\":\"2.0\",\"result\":1}"),
	RESP_BAD("id real", "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":1}"),
	RESP_BAD("id bool", "{\"jsonrpc\":\"2.0\",\"id\":true,\"result\":1}"),
	RESP_BAD("id object", "{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":1}"),
	RESP_BAD("not JSON", "nope"),
	RESP_BAD("empty", ""),
	RESP_BAD("trailing garbage", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}}"),
	RESP_BAD("array", "[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}]"),
	RESP_BAD("string", "\"x\""),
	RESP_BAD("null", "null"),
};

START_TEST(test_response_parse)
{
	const struct response_row *row = &response_rows[_i];
	struct jsonrpc_response resp = { .root = (json_t *)0x1, .error_code = 4242 };
	int r;

	r = jsonrpc_response_parse(row->in, strlen(row->in), &resp);
	ck_assert_msg(r == row->ret, "%s: returned %d, want %d", row->name, r, row->ret);
	if (r < 0) {
		/* ret is written only on success. */
		ck_assert_ptr_eq(resp.root, (json_t *)0x1);
		ck_assert_int_eq(resp.error_code, 4242);
		return;
	}
	ck_assert_ptr_nonnull(resp.root);
	ck_assert_msg(resp.id && json_eq_text(resp.id, row->id), "%s: id", row->name);
	if (row->result) {
		ck_assert_msg(resp.result && json_eq_text(resp.result, row->result), "%s: result", row->name);
		ck_assert_ptr_null(resp.error);
		ck_assert_ptr_null(resp.error_message);
		ck_assert_ptr_null(resp.error_type);
	} else {
		ck_assert_ptr_null(resp.result);
		ck_assert_ptr_nonnull(resp.error);
		ck_assert_ptr_eq(resp.error, json_object_get(resp.root, "error"));
		ck_assert_int_eq(resp.error_code, row->code);
		ck_assert_str_eq(resp.error_message, row->message);
		if (row->type)
			ck_assert_str_eq(resp.error_type, row->type);
		else
			ck_assert_ptr_null(resp.error_type);
	}
	jsonrpc_response_release(&resp);
	ck_assert_ptr_null(resp.root);
	ck_assert_ptr_null(resp.result);
	ck_assert_ptr_null(resp.error);
	jsonrpc_response_release(&resp);
}
END_TEST

/* The server's error replies parse on the client with code and type intact. */
START_TEST(test_error_reply_roundtrip)
{
	static const char in[] = "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"q\",\"bogus\":1}";
	struct jsonrpc_request req = { 0 };
	struct jsonrpc_response resp = { 0 };
	json_t *reply = NULL;
	_cleanup_free_ char *frame = NULL;
	size_t len;

	ck_assert_int_eq(jsonrpc_request_parse(in, strlen(in), &req, &reply), MSB_ERR_INVALID_REQUEST);
	frame = frame_encode(reply, &len);
	json_decref(reply);
	ck_assert_ptr_nonnull(frame);
	ck_assert_int_eq(jsonrpc_response_parse(frame, len, &resp), 0);
	ck_assert_int_eq(resp.error_code, MSB_ERR_INVALID_REQUEST);
	ck_assert_str_eq(resp.error_type, "InvalidRequest");
	ck_assert_str_eq(json_string_value(resp.id), "q");
	jsonrpc_response_release(&resp);
}
END_TEST

/* ---- frames refused by their shape, before jansson allocates ----------- */

/* jansson's allocations, counted: bytes live now and at most since reset. */
static size_t alloc_live, alloc_peak;

static void *counting_malloc(size_t n)
{
	size_t *p = malloc(n + sizeof(max_align_t));

	if (!p)
		return NULL;
	*p = n;
	alloc_live += n;
	if (alloc_live > alloc_peak)
		alloc_peak = alloc_live;
	return (char *)p + sizeof(max_align_t);
}

static void counting_free(void *q)
{
	size_t *p;

	if (!q)
		return;
	p = (size_t *)(void *)((char *)q - sizeof(max_align_t));
	alloc_live -= *p;
	free(p);
}

/* A growing text buffer for test frames. */
struct text {
	char *p;
	size_t len, cap;
};

static void text_put(struct text *t, const char *s, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		t->cap = (t->len + n + 1) * 2;
		t->p = realloc(t->p, t->cap);
		ck_assert_ptr_nonnull(t->p);
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

static void text_puts(struct text *t, const char *s)
{
	text_put(t, s, strlen(s));
}

/* A daemon.status request whose params hold "junk": <n pieces>. The
 * envelope and params alone hold ENVELOPE_VALUES values: the root, four
 * keys, three scalars, params and the key "junk". */
#define ENVELOPE_VALUES 10

enum shape {
	SHAPE_ZEROS,    /* [0,0,...]: n + 1 values (the array) */
	SHAPE_STRINGS,  /* ["","",...] */
	SHAPE_KEYS,     /* {"k0":0,"k1":0,...}: 2n + 1 values */
	SHAPE_NESTED,   /* [[[...0...]]]: n containers + the zero */
	SHAPE_SPACES,   /* 0 and n spaces: structure bytes */
	_SHAPE_MAX,
};

static const char *const shape_names[] = { "flat zeros", "small strings", "object keys", "nested arrays",
					     "whitespace" };

static void frame_build(struct text *t, enum shape shape, size_t n)
{
	char key[32];

	text_puts(t, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\",\"params\":{\"junk\":");
	switch (shape) {
	case SHAPE_ZEROS:
	case SHAPE_STRINGS:
		text_puts(t, "[");
		for (size_t i = 0; i < n; i++)
			text_puts(t, shape == SHAPE_ZEROS ? (i ? ",0" : "0") : (i ? ",\"\"" : "\"\""));
		text_puts(t, "]");
		break;
	case SHAPE_KEYS:
		text_puts(t, "{");
		for (size_t i = 0; i < n; i++) {
			snprintf(key, sizeof(key), "%s\"k%zu\":0", i ? "," : "", i);
			text_puts(t, key);
		}
		text_puts(t, "}");
		break;
	case SHAPE_NESTED:
		for (size_t i = 0; i < n; i++)
			text_puts(t, "[");
		text_puts(t, "0");
		for (size_t i = 0; i < n; i++)
			text_puts(t, "]");
		break;
	case SHAPE_SPACES:
		text_puts(t, "0");
		for (size_t i = 0; i < n; i++)
			text_puts(t, " ");
		break;
	default:
		ck_abort();
	}
	text_puts(t, "}}");
}

/* Each shape just past its limit is refused ParseError, id null, with
 * data.limit, and jansson allocates no more than the error reply for it;
 * just at the limit it is parsed. */
START_TEST(test_shape_refused)
{
	enum shape shape = (enum shape)_i;
	size_t n_at, limit, peak;
	struct text at = { 0 }, over = { 0 };
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL, *data;

	switch (shape) {
	case SHAPE_ZEROS:
	case SHAPE_STRINGS:
		n_at = MSB_JSON_MAX_VALUES - ENVELOPE_VALUES - 1;
		limit = MSB_JSON_MAX_VALUES;
		break;
	case SHAPE_KEYS:
		n_at = (MSB_JSON_MAX_VALUES - ENVELOPE_VALUES - 1) / 2;
		limit = MSB_JSON_MAX_VALUES;
		break;
	case SHAPE_NESTED:
		/* The root and params are two levels. */
		n_at = MSB_JSON_MAX_DEPTH - 2;
		limit = MSB_JSON_MAX_DEPTH;
		break;
	default:
		/* All is structure but the two string values "2.0" and
		 * "daemon.status" (20 bytes with their quotes). */
		frame_build(&at, shape, 0);
		n_at = MSB_JSON_MAX_STRUCTURE_BYTES - (at.len - 20);
		at.len = 0;
		limit = MSB_JSON_MAX_STRUCTURE_BYTES;
		break;
	}
	frame_build(&at, shape, n_at);
	frame_build(&over, shape, n_at + 1);
	json_set_alloc_funcs(counting_malloc, counting_free);

	ck_assert_msg(jsonrpc_request_parse(at.p, at.len, &req, &reply) == 0, "%s: at the limit, refused",
		      shape_names[shape]);
	jsonrpc_request_release(&req);
	ck_assert_uint_eq(alloc_live, 0);

	alloc_peak = 0;
	ck_assert_int_eq(jsonrpc_request_parse(over.p, over.len, &req, &reply), MSB_ERR_PARSE);
	peak = alloc_peak;
	json_decref(reply);
	ck_assert_uint_eq(alloc_live, 0);
	json_set_alloc_funcs(malloc, free);
	/* The error reply is all jansson built: a few hundred bytes, whatever
	 * the frame's size (hundreds of KiB here). */
	ck_assert_msg(peak < 4096, "%s: %zu bytes allocated by jansson for a refused frame of %zu bytes",
		      shape_names[shape], peak, over.len);

	ck_assert_int_eq(jsonrpc_request_parse(over.p, over.len, &req, &reply), MSB_ERR_PARSE);
	data = check_error_reply(reply, MSB_ERR_PARSE, "null");
	ck_assert_msg(json_integer_value(json_object_get(data, "limit")) == (json_int_t)limit,
		      "%s: data.limit is not %zu", shape_names[shape], limit);
	ck_assert(json_is_integer(json_object_get(data, "position")));
	ck_assert(json_is_string(json_object_get(data, "detail")));
	ck_assert_msg(strstr(json_string_value(json_object_get(json_object_get(reply, "error"), "message")),
			     shape == SHAPE_NESTED ? "64" : shape == SHAPE_SPACES ? "2097152" : "65536"),
		      "%s: the message does not name the limit", shape_names[shape]);
	json_decref(reply);
	free(at.p);
	free(over.p);
}
END_TEST

/* The largest requests the protocol defines fit: sandbox.exec with 4096
 * arguments and 256 env entries; files.write of 256 files; an acquire with
 * 256 egress_allow entries and 64 labels. */
START_TEST(test_shape_largest_requests)
{
	struct text t = { 0 };
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL;
	char piece[64];

	text_puts(&t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.exec\",\"params\":{\"sandbox\":\"s\","
		      "\"timeout_seconds\":5,\"command\":[");
	for (int i = 0; i < 4096; i++)
		text_puts(&t, i ? ",\"a\"" : "\"a\"");
	text_puts(&t, "],\"env\":{");
	for (int i = 0; i < 256; i++) {
		snprintf(piece, sizeof(piece), "%s\"V%d\":\"x\"", i ? "," : "", i);
		text_puts(&t, piece);
	}
	text_puts(&t, "}}}");
	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), 0);
	jsonrpc_request_release(&req);

	t.len = 0;
	text_puts(&t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"files.write\",\"params\":{\"sandbox\":\"s\",\"files\":[");
	for (int i = 0; i < 256; i++) {
		snprintf(piece, sizeof(piece), "%s{\"path\":\"f%d\",\"content_b64\":\"eA==\"}", i ? "," : "", i);
		text_puts(&t, piece);
	}
	text_puts(&t, "]}}");
	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), 0);
	jsonrpc_request_release(&req);

	t.len = 0;
	text_puts(&t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.acquire\",\"params\":{\"key\":{\"scope\":\"s\","
		      "\"thread_id\":\"t\",\"agent_dir\":\"a\"},\"spec\":{\"kind\":\"k\",\"image\":\"i\","
		      "\"egress\":\"allowlist\",\"egress_allow\":[");
	for (int i = 0; i < 256; i++) {
		snprintf(piece, sizeof(piece), "%s\"h%d.example.com:443\"", i ? "," : "", i);
		text_puts(&t, piece);
	}
	text_puts(&t, "],\"labels\":{");
	for (int i = 0; i < 64; i++) {
		snprintf(piece, sizeof(piece), "%s\"l%d\":\"v\"", i ? "," : "", i);
		text_puts(&t, piece);
	}
	text_puts(&t, "}}}}");
	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), 0);
	jsonrpc_request_release(&req);
	free(t.p);
}
END_TEST

/* Replies are not limited (the client side): a files.list of 10000
 * entries holds more values than a request may. */
START_TEST(test_shape_replies_unlimited)
{
	struct text t = { 0 };
	struct jsonrpc_response resp;

	text_puts(&t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"entries\":[");
	for (int i = 0; i < 20000; i++)
		text_puts(&t, i ? ",{\"name\":\"n\",\"kind\":\"file\"}" : "{\"name\":\"n\",\"kind\":\"file\"}");
	text_puts(&t, "]}}");
	ck_assert_int_eq(jsonrpc_response_parse(t.p, t.len, &resp), 0);
	jsonrpc_response_release(&resp);
	free(t.p);
}
END_TEST


/* ---- large invalid frames: jansson never lexes them whole -------------- */

/* Long string values: each LONG_STRING_BYTES, LONG_STRINGS of them (a frame
 * of about 2.8 MB, over jsonfast's load threshold, far under the limits). */
#define LONG_STRINGS 2000
#define LONG_STRING_BYTES 1400

enum bad_shape {
	BAD_TRAILING,     /* the frame, then "x" */
	BAD_DUPLICATE,    /* a duplicate "id" as the frame's last member */
	BAD_UNCLOSED,     /* a short string left open at the end */
	BAD_NUL,          /* a long last string ending in \u0000 */
	BAD_SURROGATE,    /* a long last string ending in a lone \ud800 */
	BAD_NUL_BYTE,     /* ",1" and a NUL byte after the strings (jansson drops it) */
	_BAD_MAX,
};

static const char *const bad_names[] = { "trailing garbage", "duplicate key at the end", "unclosed string",
					 "\\u0000 in a long string", "lone surrogate in a long string",
					 "NUL byte after a number" };

/* A daemon.status request whose params hold n long strings (escaped: a
 * "\n" every 64 bytes), then what shape wants. */
static void long_frame_build(struct text *t, int shape, size_t n, bool escaped)
{
	char *s = malloc(LONG_STRING_BYTES + 1);

	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < LONG_STRING_BYTES; i++)
		s[i] = (char)('a' + i % 26);
	if (escaped)
		for (size_t i = 62; i + 1 < LONG_STRING_BYTES; i += 64)
			memcpy(s + i, "\\n", 2);
	s[LONG_STRING_BYTES] = '\0';
	text_puts(t, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\",\"params\":{\"junk\":[");
	for (size_t i = 0; i < n; i++) {
		text_puts(t, i ? ",\"" : "\"");
		text_puts(t, s);
		text_puts(t, "\"");
	}
	switch (shape) {
	case BAD_NUL:
		text_puts(t, ",\"");
		text_put(t, s, 100);
		text_puts(t, "\\u0000\"");
		break;
	case BAD_SURROGATE:
		text_puts(t, ",\"");
		text_put(t, s, 100);
		text_puts(t, "\\ud800\"");
		break;
	case BAD_NUL_BYTE:
		text_put(t, ",1\0", 3);
		break;
	default:
		break;
	}
	text_puts(t, "]}");
	switch (shape) {
	case BAD_DUPLICATE:
		text_puts(t, ",\"id\":8}");
		break;
	case BAD_TRAILING:
		text_puts(t, "}x");
		break;
	case BAD_UNCLOSED:
		text_puts(t, ",\"tail\":\"abc");
		break;
	default:
		text_puts(t, "}");
		break;
	}
	free(s);
}

/* Each shape of invalid frame that the pre-scan admits: ParseError with
 * jansson's own detail and position for the frame, and jansson (with
 * jsonfast's texts, through the same allocator) holds well under the
 * frame's size at its peak: it never builds the frame's strings. */
START_TEST(test_invalid_large_frame)
{
	int shape = _i;
	struct text t = { 0 };
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL, *data;
	json_error_t want;
	size_t peak;

	long_frame_build(&t, shape, LONG_STRINGS, false);
	if (shape == BAD_NUL_BYTE) {
		/* jansson takes it (it drops a NUL after a number): the frame
		 * is refused for its NUL, where it is. */
		json_t *v = json_loadb(t.p, t.len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &want);

		ck_assert_ptr_nonnull(v);
		json_decref(v);
		want.position = (int)((const char *)memchr(t.p, '\0', t.len) - t.p);
		snprintf(want.text, sizeof(want.text), "NUL byte in the frame");
	} else {
		ck_assert_ptr_null(json_loadb(t.p, t.len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &want));
	}

	json_set_alloc_funcs(counting_malloc, counting_free);
	alloc_peak = 0;
	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), MSB_ERR_PARSE);
	peak = alloc_peak;
	json_decref(reply);
	ck_assert_uint_eq(alloc_live, 0);
	json_set_alloc_funcs(malloc, free);
	ck_assert_msg(peak < t.len / 8, "%s: jansson's peak is %zu bytes for an invalid frame of %zu bytes",
		      bad_names[shape], peak, t.len);

	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), MSB_ERR_PARSE);
	data = check_error_reply(reply, MSB_ERR_PARSE, "null");
	ck_assert_msg(json_integer_value(json_object_get(data, "position")) == want.position,
		      "%s: position %lld, jansson says %d", bad_names[shape],
		      (long long)json_integer_value(json_object_get(data, "position")), want.position);
	ck_assert_str_eq(json_string_value(json_object_get(data, "detail")), want.text);
	json_decref(reply);
	free(t.p);
}
END_TEST

/* A valid frame of long escaped strings: the decoded copies go as jansson
 * takes each, so the peak is the frame once and a string, not twice. */
START_TEST(test_escaped_frame_once)
{
	struct text t = { 0 };
	struct jsonrpc_request req = { 0 };
	json_t *reply = NULL, *junk;
	size_t peak;

	long_frame_build(&t, -1, LONG_STRINGS, true);
	json_set_alloc_funcs(counting_malloc, counting_free);
	alloc_peak = 0;
	ck_assert_int_eq(jsonrpc_request_parse(t.p, t.len, &req, &reply), 0);
	peak = alloc_peak;
	junk = json_object_get(req.params, "junk");
	ck_assert_uint_eq(json_array_size(junk), LONG_STRINGS);
	ck_assert_ptr_nonnull(memchr(json_string_value(json_array_get(junk, 0)), '\n', 64));
	jsonrpc_request_release(&req);
	ck_assert_uint_eq(alloc_live, 0);
	json_set_alloc_funcs(malloc, free);
	ck_assert_msg(peak < t.len + t.len / 4, "jansson's peak is %zu bytes for a frame of %zu bytes of "
		      "escaped strings", peak, t.len);
	free(t.p);
}
END_TEST

static Suite *jsonrpc_suite(void)
{
	Suite *s = suite_create("jsonrpc");
	TCase *tc;

	tc = tcase_create("request refused");
	tcase_add_loop_test(tc, test_reject, 0, ELEMENTSOF(reject_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("request accepted");
	tcase_add_loop_test(tc, test_accept, 0, ELEMENTSOF(accept_rows));
	tcase_add_test(tc, test_null_id_is_request);
	tcase_add_test(tc, test_parse_uses_len);
	tcase_add_loop_test(tc, test_id_is_valid, 0, ELEMENTSOF(id_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("request shape bounded");
	tcase_add_loop_test(tc, test_shape_refused, 0, _SHAPE_MAX);
	tcase_add_test(tc, test_shape_largest_requests);
	tcase_add_test(tc, test_shape_replies_unlimited);
	tcase_add_loop_test(tc, test_invalid_large_frame, 0, _BAD_MAX);
	tcase_add_test(tc, test_escaped_frame_once);
	suite_add_tcase(s, tc);

	tc = tcase_create("replies built");
	tcase_add_test(tc, test_reply_result);
	tcase_add_test(tc, test_reply_error);
	suite_add_tcase(s, tc);

	tc = tcase_create("client side");
	tcase_add_test(tc, test_request_new);
	tcase_add_loop_test(tc, test_response_parse, 0, ELEMENTSOF(response_rows));
	tcase_add_test(tc, test_error_reply_roundtrip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(jsonrpc_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
