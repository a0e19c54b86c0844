/* check_errors.c — the wire error table and its rendering.
 *
 * Codes and names are a stable contract: the pinned table below must be
 * changed on purpose, never by a renumbering. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "errors.h"

/* Every code the wire knows, with its value spelled out. */
struct pin {
	int value;         /* the enum constant */
	int code;          /* the number clients see */
	const char *name;  /* data.type */
};

static const struct pin pins[] = {
	{ MSB_ERR_PARSE, -32700, "ParseError" },
	{ MSB_ERR_INVALID_REQUEST, -32600, "InvalidRequest" },
	{ MSB_ERR_METHOD_NOT_FOUND, -32601, "MethodNotFound" },
	{ MSB_ERR_INVALID_PARAMS, -32602, "InvalidParams" },
	{ MSB_ERR_INTERNAL, -32603, "InternalError" },

	{ MSB_ERR_ENGINE_UNAVAILABLE, 1000, "EngineUnavailable" },
	{ MSB_ERR_ENGINE_ERROR, 1001, "EngineError" },
	{ MSB_ERR_ENGINE_TIMEOUT, 1002, "EngineTimeout" },
	{ MSB_ERR_ENGINE_VERSION, 1003, "EngineVersionNotSupported" },

	{ MSB_ERR_CAPABILITY_NOT_SUPPORTED, 1100, "SandboxCapabilityNotSupported" },
	{ MSB_ERR_EGRESS_NOT_ENFORCED, 1101, "SandboxEgressNotEnforced" },
	{ MSB_ERR_OS_FAMILY_NOT_SUPPORTED, 1102, "SandboxOsFamilyNotSupported" },
	{ MSB_ERR_TRANSFER_LIMITS_NOT_PERMITTED, 1103, "SandboxTransferLimitsNotPermitted" },
	{ MSB_ERR_SCOPE_NOT_ENFORCED, 1104, "SandboxScopeNotEnforced" },
	{ MSB_ERR_BACKEND_NOT_PERMITTED, 1105, "SandboxBackendNotPermitted" },
	{ MSB_ERR_SANDBOX_CONFLICT, 1106, "SandboxConflict" },

	{ MSB_ERR_CONFINEMENT, 1200, "ConfinementError" },
	{ MSB_ERR_NOT_A_DIRECTORY, 1201, "NotADirectoryError" },
	{ MSB_ERR_FILE_NOT_FOUND, 1202, "FileNotFoundError" },
	{ MSB_ERR_OS_ERROR, 1203, "OSError" },
	{ MSB_ERR_TRANSFER_CAP_EXCEEDED, 1204, "SandboxTransferCapExceeded" },
	{ MSB_ERR_TIMEOUT, 1205, "TimeoutError" },
	{ MSB_ERR_SANDBOX_NOT_FOUND, 1206, "SandboxNotFound" },
	{ MSB_ERR_FREEZE_FAILED, 1207, "SandboxFreezeFailed" },
	{ MSB_ERR_EXEC_OUTPUT_LIMIT, 1208, "SandboxExecOutputLimitExceeded" },
	{ MSB_ERR_CANCELLED, 1209, "Cancelled" },

	{ MSB_ERR_PERMISSION_DENIED, 1300, "PermissionDenied" },
	{ MSB_ERR_FRAME_TOO_LARGE, 1301, "FrameTooLarge" },
	{ MSB_ERR_TOO_MANY_CONNECTIONS, 1302, "TooManyConnections" },
	{ MSB_ERR_SHUTTING_DOWN, 1303, "ShuttingDown" },
	{ MSB_ERR_FRAME_TIMEOUT, 1304, "FrameTimeout" },
};

/* The blocks of errors.h; every application code lies in one. */
struct block {
	int lo, hi;
	const char *what;
};

static const struct block blocks[] = {
	{ 1000, 1099, "engine" },
	{ 1100, 1199, "sandbox" },
	{ 1200, 1299, "surface" },
	{ 1300, 1399, "daemon" },
};

static const int standard_codes[] = { -32700, -32600, -32601, -32602, -32603 };

/* Codes the table does not hold. */
static const int unknown_codes[] = { 0, 1, -1, 999, 1004, 1107, 1210, 1305, -32000, -32604, 4242 };

static json_t *parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, 0, &e);

	ck_assert_msg(j != NULL, "test JSON %s: %s", s, e.text);
	return j;
}

static bool json_eq_text(const json_t *v, const char *text)
{
	json_auto_t *want = parse(text);

	return json_equal((json_t *)v, want);
}

/* Checks {"code","message","data":{"type",...}} and returns data. */
static json_t *check_shape(const json_t *err, int code, const char *name)
{
	json_t *data;

	ck_assert(json_is_object(err));
	ck_assert_uint_eq(json_object_size(err), 3);
	ck_assert(json_is_integer(json_object_get(err, "code")));
	ck_assert_int_eq(json_integer_value(json_object_get(err, "code")), code);
	ck_assert(json_is_string(json_object_get(err, "message")));
	ck_assert_str_ne(json_string_value(json_object_get(err, "message")), "");
	data = json_object_get(err, "data");
	ck_assert(json_is_object(data));
	ck_assert_str_eq(json_string_value(json_object_get(data, "type")), name);
	return data;
}

static const char *message_of(const json_t *err)
{
	return json_string_value(json_object_get(err, "message"));
}

/* ---- the table ---------------------------------------------------------- */

START_TEST(test_table_unique)
{
	size_t n;
	const struct msb_error_info *t = msb_error_table(&n);

	ck_assert_uint_gt(n, 0);
	for (size_t i = 0; i < n; i++) {
		json_auto_t *msg = NULL;

		ck_assert_msg(t[i].name && t[i].name[0], "code %d: empty name", t[i].code);
		ck_assert_msg(t[i].message && t[i].message[0], "code %d: empty message", t[i].code);
		msg = json_string(t[i].message);
		ck_assert_msg(msg != NULL, "code %d: message not UTF-8", t[i].code);
		for (size_t k = i + 1; k < n; k++) {
			ck_assert_msg(t[i].code != t[k].code, "code %d twice", t[i].code);
			ck_assert_msg(strcmp(t[i].name, t[k].name) != 0, "name %s twice", t[i].name);
		}
	}
}
END_TEST

START_TEST(test_table_lookup)
{
	size_t n;
	const struct msb_error_info *t = msb_error_table(&n);

	for (size_t i = 0; i < n; i++) {
		ck_assert_ptr_eq(msb_error_lookup(t[i].code), &t[i]);
		ck_assert_str_eq(msb_error_name(t[i].code), t[i].name);
	}
}
END_TEST

START_TEST(test_pinned)
{
	const struct pin *p = &pins[_i];
	const struct msb_error_info *info;

	ck_assert_msg(p->value == p->code, "%s: enum value %d, wire code %d", p->name, p->value, p->code);
	info = msb_error_lookup(p->code);
	ck_assert_msg(info != NULL, "code %d not in the table", p->code);
	ck_assert_str_eq(info->name, p->name);
	ck_assert_str_eq(msb_error_name(p->code), p->name);
}
END_TEST

/* Every table entry is pinned: a new code needs a pin too. */
START_TEST(test_pinned_cover_table)
{
	size_t n;
	const struct msb_error_info *t = msb_error_table(&n);

	ck_assert_uint_eq(n, ELEMENTSOF(pins));
	for (size_t i = 0; i < n; i++) {
		bool found = false;

		for (size_t k = 0; k < ELEMENTSOF(pins); k++)
			found = found || (pins[k].code == t[i].code && !strcmp(pins[k].name, t[i].name));
		ck_assert_msg(found, "code %d (%s) is not pinned", t[i].code, t[i].name);
	}
}
END_TEST

START_TEST(test_blocks)
{
	size_t n;
	const struct msb_error_info *t = msb_error_table(&n);

	for (size_t i = 0; i < n; i++) {
		bool ok = false;

		for (size_t k = 0; k < ELEMENTSOF(standard_codes); k++)
			ok = ok || t[i].code == standard_codes[k];
		for (size_t k = 0; k < ELEMENTSOF(blocks); k++)
			ok = ok || (t[i].code >= blocks[k].lo && t[i].code <= blocks[k].hi);
		ck_assert_msg(ok, "code %d (%s) is in no block of errors.h", t[i].code, t[i].name);
	}
	/* And every standard code is there. */
	for (size_t k = 0; k < ELEMENTSOF(standard_codes); k++)
		ck_assert_ptr_nonnull(msb_error_lookup(standard_codes[k]));
}
END_TEST

/* ---- rendering ---------------------------------------------------------- */

START_TEST(test_render_every_code)
{
	size_t n;
	const struct msb_error_info *t = msb_error_table(&n);

	for (size_t i = 0; i < n; i++) {
		json_auto_t *err = msb_error_object(t[i].code, NULL, NULL);
		json_auto_t *custom = msb_error_object(t[i].code, "custom text", NULL);
		json_t *data = check_shape(err, t[i].code, t[i].name);

		ck_assert_uint_eq(json_object_size(data), 1);
		ck_assert_str_eq(message_of(err), t[i].message);
		check_shape(custom, t[i].code, t[i].name);
		ck_assert_str_eq(message_of(custom), "custom text");
	}
}
END_TEST

START_TEST(test_render_data_merged)
{
	json_t *data = json_pack("{s:i, s:s}", "engine_status", 404, "engine_message", "no such container");
	json_auto_t *err = NULL;

	/* Stolen: keep a reference of our own to watch it. */
	json_incref(data);
	err = msb_error_object(MSB_ERR_ENGINE_ERROR, "gone", data);
	ck_assert_int_eq(data->refcount, 1);
	json_decref(data);
	ck_assert(json_eq_text(err, "{\"code\":1001,\"message\":\"gone\",\"data\":{\"type\":\"EngineError\","
				    "\"engine_status\":404,\"engine_message\":\"no such container\"}}"));
}
END_TEST

START_TEST(test_render_type_not_overridden)
{
	json_auto_t *err = msb_error_object(MSB_ERR_FRAME_TOO_LARGE, NULL,
					    json_pack("{s:s, s:I}", "type", "Forged", "limit", (json_int_t)4096));
	json_t *data = check_shape(err, MSB_ERR_FRAME_TOO_LARGE, "FrameTooLarge");

	ck_assert_int_eq(json_integer_value(json_object_get(data, "limit")), 4096);
	ck_assert_uint_eq(json_object_size(data), 2);

	/* Not even for an unknown code. */
	json_decref(err);
	err = msb_error_object(4242, NULL, json_pack("{s:s}", "type", "Forged"));
	check_shape(err, 4242, "UnknownError");
}
END_TEST

/* data that is not an object is dropped (and still released). */
START_TEST(test_render_data_not_object)
{
	json_t *values[] = { json_pack("[i]", 1), json_string("s"), json_integer(3), json_null() };

	for (size_t i = 0; i < ELEMENTSOF(values); i++) {
		json_auto_t *err = NULL;
		json_t *data;

		json_incref(values[i]);
		err = msb_error_object(MSB_ERR_INTERNAL, NULL, values[i]);
		data = check_shape(err, MSB_ERR_INTERNAL, "InternalError");
		ck_assert_uint_eq(json_object_size(data), 1);
		/* json_null() is a singleton with no real count. */
		if (!json_is_null(values[i]))
			ck_assert_int_eq(values[i]->refcount, 1);
		json_decref(values[i]);
	}
}
END_TEST

START_TEST(test_render_message_not_utf8)
{
	static const char *const bad[] = { "\xff", "ok\xc3", "\xed\xa0\x80", "a\x80z" };

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		json_auto_t *err = msb_error_object(MSB_ERR_ENGINE_ERROR, bad[i], NULL);

		check_shape(err, MSB_ERR_ENGINE_ERROR, "EngineError");
		ck_assert_str_eq(message_of(err), msb_error_lookup(MSB_ERR_ENGINE_ERROR)->message);
	}
}
END_TEST

START_TEST(test_render_unknown)
{
	int code = unknown_codes[_i];
	json_auto_t *err = msb_error_object(code, NULL, NULL);
	json_auto_t *custom = msb_error_object(code, "said so", json_pack("{s:b}", "x", 1));
	json_auto_t *bad = msb_error_object(code, "\xff", NULL);
	json_t *data;

	ck_assert_ptr_null(msb_error_lookup(code));
	ck_assert_str_eq(msb_error_name(code), "UnknownError");
	check_shape(err, code, "UnknownError");
	data = check_shape(custom, code, "UnknownError");
	ck_assert_str_eq(message_of(custom), "said so");
	ck_assert(json_is_true(json_object_get(data, "x")));
	check_shape(bad, code, "UnknownError");
}
END_TEST

/* ---- struct msb_error --------------------------------------------------- */

START_TEST(test_error_set_to_json)
{
	struct msb_error e = { 0 };
	json_t *data = json_pack("{s:i}", "engine_status", 409);
	json_auto_t *a = NULL, *b = NULL;

	msb_error_set(&e, MSB_ERR_ENGINE_ERROR, data, "conflict on %s (%d)", "box", 7);
	ck_assert_int_eq(e.code, MSB_ERR_ENGINE_ERROR);
	ck_assert_str_eq(e.message, "conflict on box (7)");
	ck_assert_ptr_eq(e.data, data);
	ck_assert_int_eq(data->refcount, 1);

	a = msb_error_to_json(&e);
	ck_assert(json_eq_text(a, "{\"code\":1001,\"message\":\"conflict on box (7)\","
				  "\"data\":{\"type\":\"EngineError\",\"engine_status\":409}}"));
	/* e is left as is: same data, same count, renders again the same. */
	ck_assert_ptr_eq(e.data, data);
	ck_assert_int_eq(data->refcount, 1);
	ck_assert_uint_eq(json_object_size(data), 1);
	ck_assert_str_eq(e.message, "conflict on box (7)");
	b = msb_error_to_json(&e);
	ck_assert(json_equal(a, b));
	msb_error_clear(&e);
}
END_TEST

START_TEST(test_error_set_replaces)
{
	struct msb_error e = { 0 };
	json_auto_t *j = NULL;

	msb_error_set(&e, MSB_ERR_ENGINE_ERROR, json_pack("{s:i}", "a", 1), "first");
	/* No message, no data: the table's default. Old ones released (ASan). */
	msb_error_set(&e, MSB_ERR_ENGINE_TIMEOUT, NULL, NULL);
	ck_assert_int_eq(e.code, MSB_ERR_ENGINE_TIMEOUT);
	ck_assert_ptr_null(e.message);
	ck_assert_ptr_null(e.data);
	j = msb_error_to_json(&e);
	ck_assert(json_eq_text(j, "{\"code\":1002,\"message\":\"the Docker engine did not answer in time\","
				  "\"data\":{\"type\":\"EngineTimeout\"}}"));
	msb_error_clear(&e);
}
END_TEST

/* Wrapping the previous message: the arguments are read before it goes. */
START_TEST(test_error_set_wraps_own_message)
{
	struct msb_error e = { 0 };

	msb_error_set(&e, MSB_ERR_ENGINE_ERROR, NULL, "inner %d", 1);
	msb_error_set(&e, MSB_ERR_INTERNAL, NULL, "outer: %s", e.message);
	ck_assert_str_eq(e.message, "outer: inner 1");
	ck_assert_int_eq(e.code, MSB_ERR_INTERNAL);
	msb_error_clear(&e);
}
END_TEST

/* A copy owns its own message and data: the source can go. */
START_TEST(test_error_copy)
{
	struct msb_error src = { 0 }, dst = { 0 };

	msb_error_set(&dst, MSB_ERR_INTERNAL, json_pack("{s:i}", "old", 1), "old");
	msb_error_set(&src, MSB_ERR_CONFINEMENT, json_pack("{s:s}", "path", "a/b"), "message %d", 7);
	msb_error_copy(&dst, &src);
	msb_error_clear(&src);
	ck_assert_int_eq(dst.code, MSB_ERR_CONFINEMENT);
	ck_assert_str_eq(dst.message, "message 7");
	ck_assert_str_eq(json_string_value(json_object_get(dst.data, "path")), "a/b");
	ck_assert_ptr_null(json_object_get(dst.data, "old"));
	msb_error_copy(&src, &(struct msb_error){ .code = MSB_ERR_TIMEOUT });
	ck_assert_int_eq(src.code, MSB_ERR_TIMEOUT);
	ck_assert_ptr_null(src.message);
	ck_assert_ptr_null(src.data);
	msb_error_clear(&dst);
	msb_error_clear(&src);
}
END_TEST

START_TEST(test_error_clear)
{
	struct msb_error e = { 0 };
	json_auto_t *j = NULL;

	/* Clearing an empty one, twice. */
	msb_error_clear(&e);
	msb_error_clear(&e);
	msb_error_set(&e, MSB_ERR_SHUTTING_DOWN, json_object(), "bye");
	msb_error_clear(&e);
	ck_assert_int_eq(e.code, 0);
	ck_assert_ptr_null(e.message);
	ck_assert_ptr_null(e.data);
	j = msb_error_to_json(&e);
	check_shape(j, 0, "UnknownError");
}
END_TEST

START_TEST(test_error_message_not_utf8)
{
	struct msb_error e = { 0 };
	json_auto_t *j = NULL;

	msb_error_set(&e, MSB_ERR_ENGINE_ERROR, NULL, "engine said %s", "\xfe\xff");
	j = msb_error_to_json(&e);
	check_shape(j, MSB_ERR_ENGINE_ERROR, "EngineError");
	ck_assert_str_eq(message_of(j), msb_error_lookup(MSB_ERR_ENGINE_ERROR)->message);
	msb_error_clear(&e);
}
END_TEST

START_TEST(test_echo_len_cuts_at_a_character)
{
	char s[MSB_ECHO_MAX_BYTES + 64];
	size_t i;

	ck_assert_int_eq(msb_echo_len(""), 0);
	ck_assert_int_eq(msb_echo_len("daemon.describe"), 15);
	memset(s, 'a', sizeof(s) - 1);
	s[sizeof(s) - 1] = '\0';
	ck_assert_int_eq(msb_echo_len(s), MSB_ECHO_MAX_BYTES);
	s[MSB_ECHO_MAX_BYTES] = '\0';
	ck_assert_int_eq(msb_echo_len(s), MSB_ECHO_MAX_BYTES);      /* exactly at the edge */
	memset(s, 'a', sizeof(s) - 1);
	/* "é" (2 bytes) straddling the edge is dropped whole. */
	s[MSB_ECHO_MAX_BYTES - 1] = (char)0xC3;
	s[MSB_ECHO_MAX_BYTES] = (char)0xA9;
	ck_assert_int_eq(msb_echo_len(s), MSB_ECHO_MAX_BYTES - 1);
	/* A 4-byte character ending exactly at the edge is kept. */
	memset(s, 'a', sizeof(s) - 1);
	for (i = 0; i < 4; i++)
		s[MSB_ECHO_MAX_BYTES - 4 + i] = (char)(i == 0 ? 0xF0 : 0x9F);
	ck_assert_int_eq(msb_echo_len(s), MSB_ECHO_MAX_BYTES);
	/* Every cut is valid UTF-8 for jansson. */
	{
		json_t *j = json_stringn(s, (size_t)msb_echo_len(s));

		ck_assert_ptr_nonnull(j);
		json_decref(j);
	}
}
END_TEST

static Suite *errors_suite(void)
{
	Suite *s = suite_create("errors");
	TCase *tc;

	tc = tcase_create("table");
	tcase_add_test(tc, test_table_unique);
	tcase_add_test(tc, test_table_lookup);
	tcase_add_loop_test(tc, test_pinned, 0, ELEMENTSOF(pins));
	tcase_add_test(tc, test_pinned_cover_table);
	tcase_add_test(tc, test_blocks);
	suite_add_tcase(s, tc);

	tc = tcase_create("render");
	tcase_add_test(tc, test_render_every_code);
	tcase_add_test(tc, test_render_data_merged);
	tcase_add_test(tc, test_render_type_not_overridden);
	tcase_add_test(tc, test_render_data_not_object);
	tcase_add_test(tc, test_render_message_not_utf8);
	tcase_add_loop_test(tc, test_render_unknown, 0, ELEMENTSOF(unknown_codes));
	suite_add_tcase(s, tc);

	tc = tcase_create("msb_error");
	tcase_add_test(tc, test_error_set_to_json);
	tcase_add_test(tc, test_error_set_replaces);
	tcase_add_test(tc, test_error_set_wraps_own_message);
	tcase_add_test(tc, test_error_clear);
	tcase_add_test(tc, test_error_copy);
	tcase_add_test(tc, test_error_message_not_utf8);
	tcase_add_test(tc, test_echo_len_cuts_at_a_character);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(errors_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
