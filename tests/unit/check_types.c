/* check_types.c — the shared wire vocabulary: enum <-> string tables, set
 * encoding, transfer limits. The wire strings are pinned: changing one
 * breaks every client and must fail here. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "msb-limits.h"
#include "types.h"

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

/* ---- enums -------------------------------------------------------------- */

/* One enum's functions, called through int so one table serves them all. */
struct enum_ops {
	const char *name;
	int max;
	const char *(*to_string)(int v);
	int (*from_string)(const char *s);
	json_t *(*set_encode)(uint32_t mask);
	const char *const *wire;       /* pinned, in enum order, max of them */
	const char *const *not_wire;   /* strings that must not parse; ends at NULL */
};

#define WRAP_TO_STRING(name) \
	static const char *name##_to_string(int v) { return msb_##name##_to_string(v); }
WRAP_TO_STRING(isolation)
WRAP_TO_STRING(capability)
WRAP_TO_STRING(egress)
WRAP_TO_STRING(scope)
WRAP_TO_STRING(os_family)

static const char *const isolation_wire[] = {
	[MSB_ISOLATION_NONE] = "none",
	[MSB_ISOLATION_RUNTIME] = "runtime",
	[MSB_ISOLATION_OS_PROCESS] = "os_process",
	[MSB_ISOLATION_CONTAINER] = "container",
	[MSB_ISOLATION_HARDENED_CONTAINER] = "hardened_container",
	[MSB_ISOLATION_MICROVM] = "microvm",
	[MSB_ISOLATION_VM] = "vm",
};
static const char *const isolation_not_wire[] = {
	"process", "os-process", "OS_PROCESS", "Container", "hardened-container", "micro_vm",
	"", " vm", "vm ", "none\n", NULL,
};

static const char *const capability_wire[] = {
	[MSB_CAP_EXEC] = "exec",
	[MSB_CAP_RUN_CODE] = "run_code",
	[MSB_CAP_HOST_TOOLS] = "host_tools",
	[MSB_CAP_FILES_IN] = "files_in",
	[MSB_CAP_FILES_OUT] = "files_out",
	[MSB_CAP_FILES_LIST] = "files_list",
	[MSB_CAP_FILES_DELETE] = "files_delete",
	[MSB_CAP_SNAPSHOT] = "snapshot",
	[MSB_CAP_ATTACHED_IDENTITY] = "attached_identity",
	[MSB_CAP_RECLAIM] = "reclaim",
	[MSB_CAP_EGRESS_METHODS] = "egress_methods",
};
static const char *const capability_not_wire[] = {
	"EXEC", "run-code", "files", "files_in ", "egress", "", NULL,
};

static const char *const egress_wire[] = {
	[MSB_EGRESS_UNRESTRICTED] = "unrestricted",
	[MSB_EGRESS_ALLOWLIST] = "allowlist",
	[MSB_EGRESS_CLOSED] = "closed",
};
static const char *const egress_not_wire[] = {
	"allow_list", "none", "open", "Closed", "", NULL,
};

static const char *const scope_wire[] = {
	[MSB_SCOPE_CONVERSATION] = "conversation",
	[MSB_SCOPE_CALL] = "call",
};
static const char *const scope_not_wire[] = {
	"conv", "CALL", "calls", "", NULL,
};

static const char *const os_family_wire[] = {
	[MSB_OS_POSIX] = "posix",
	[MSB_OS_WINDOWS] = "windows",
};
static const char *const os_family_not_wire[] = {
	"linux", "Windows", "POSIX", "win", "", NULL,
};

#define ENUM_OPS(n, m)                                                              \
	{ #n, m, n##_to_string, msb_##n##_from_string, msb_##n##_set_encode,         \
	  n##_wire, n##_not_wire }

static const struct enum_ops enums[] = {
	ENUM_OPS(isolation, _MSB_ISOLATION_MAX),
	ENUM_OPS(capability, _MSB_CAP_MAX),
	ENUM_OPS(egress, _MSB_EGRESS_MAX),
	ENUM_OPS(scope, _MSB_SCOPE_MAX),
	ENUM_OPS(os_family, _MSB_OS_MAX),
};

/* The pinned tables have exactly one string per value. */
_Static_assert(ELEMENTSOF(isolation_wire) == _MSB_ISOLATION_MAX, "isolation pins");
_Static_assert(ELEMENTSOF(capability_wire) == _MSB_CAP_MAX, "capability pins");
_Static_assert(ELEMENTSOF(egress_wire) == _MSB_EGRESS_MAX, "egress pins");
_Static_assert(ELEMENTSOF(scope_wire) == _MSB_SCOPE_MAX, "scope pins");
_Static_assert(ELEMENTSOF(os_family_wire) == _MSB_OS_MAX, "os_family pins");

START_TEST(test_enum_wire_strings)
{
	const struct enum_ops *e = &enums[_i];

	for (int v = 0; v < e->max; v++) {
		const char *s = e->to_string(v);

		ck_assert_msg(s != NULL, "%s %d has no string", e->name, v);
		ck_assert_str_eq(s, e->wire[v]);
		ck_assert_msg(e->from_string(e->wire[v]) == v, "%s: \"%s\" does not parse to %d",
			      e->name, e->wire[v], v);
		/* Round trip. */
		ck_assert_int_eq(e->from_string(e->to_string(v)), v);
	}
}
END_TEST

START_TEST(test_enum_out_of_range)
{
	const struct enum_ops *e = &enums[_i];
	static const int bad[] = { -1, -1000, INT32_MIN };

	ck_assert_ptr_null(e->to_string(e->max));
	ck_assert_ptr_null(e->to_string(e->max + 1));
	ck_assert_ptr_null(e->to_string(1000));
	for (size_t k = 0; k < ELEMENTSOF(bad); k++)
		ck_assert_ptr_null(e->to_string(bad[k]));
}
END_TEST

START_TEST(test_enum_not_wire)
{
	const struct enum_ops *e = &enums[_i];

	for (size_t k = 0; e->not_wire[k]; k++)
		ck_assert_msg(e->from_string(e->not_wire[k]) == -EINVAL, "%s: \"%s\" parsed",
			      e->name, e->not_wire[k]);
	ck_assert_int_eq(e->from_string(NULL), -EINVAL);
	/* A neighbour's word is no word here. */
	for (size_t o = 0; o < ELEMENTSOF(enums); o++) {
		if (o == (size_t)_i)
			continue;
		for (int v = 0; v < enums[o].max; v++) {
			bool shared = false;

			for (int w = 0; w < e->max; w++)
				shared = shared || !strcmp(e->wire[w], enums[o].wire[v]);
			if (!shared)
				ck_assert_int_eq(e->from_string(enums[o].wire[v]), -EINVAL);
		}
	}
}
END_TEST

/* "process" must not pass for any isolation (it is "os_process"). */
START_TEST(test_isolation_process)
{
	ck_assert_int_eq(msb_isolation_from_string("process"), -EINVAL);
	ck_assert_int_eq(msb_isolation_from_string("os_process"), MSB_ISOLATION_OS_PROCESS);
	ck_assert_str_eq(msb_isolation_to_string(MSB_ISOLATION_OS_PROCESS), "os_process");
}
END_TEST

/* ---- sets --------------------------------------------------------------- */

static json_t *expected_set(const struct enum_ops *e, uint32_t mask)
{
	json_t *a = json_array();

	for (int v = 0; v < e->max; v++)
		if (mask & MSB_BIT(v))
			json_array_append_new(a, json_string(e->wire[v]));
	return a;
}

START_TEST(test_set_encode)
{
	const struct enum_ops *e = &enums[_i];
	uint32_t all = (uint32_t)(MSB_BIT(e->max) - 1);
	const uint32_t masks[] = { 0, 1, MSB_BIT(e->max - 1), all, all & 0x55555555u,
				   all & 0xaaaaaaaau, MSB_BIT(0) | MSB_BIT(e->max - 1) };

	for (size_t k = 0; k < ELEMENTSOF(masks); k++) {
		json_auto_t *got = e->set_encode(masks[k]);
		json_auto_t *want = expected_set(e, masks[k]);

		ck_assert_msg(json_is_array(got), "%s %#x: not an array", e->name, masks[k]);
		ck_assert_msg(json_equal(got, want), "%s %#x: wrong set or order", e->name, masks[k]);
	}
}
END_TEST

/* Bits past the last value name nothing and are left out. */
START_TEST(test_set_encode_ignores_unknown_bits)
{
	const struct enum_ops *e = &enums[_i];
	json_auto_t *none = e->set_encode(~(uint32_t)(MSB_BIT(e->max) - 1));
	json_auto_t *one = e->set_encode(MSB_BIT(0) | MSB_BIT(31) | MSB_BIT(e->max));

	ck_assert_uint_eq(json_array_size(none), 0);
	ck_assert_uint_eq(json_array_size(one), 1);
	ck_assert_str_eq(json_string_value(json_array_get(one, 0)), e->wire[0]);
}
END_TEST

/* Order and content, spelled out for two sets the daemon declares. */
START_TEST(test_set_encode_pinned)
{
	json_auto_t *iso = msb_isolation_set_encode(MSB_BIT(MSB_ISOLATION_VM) |
						    MSB_BIT(MSB_ISOLATION_OS_PROCESS) |
						    MSB_BIT(MSB_ISOLATION_CONTAINER));
	json_auto_t *caps = msb_capability_set_encode(MSB_BIT(MSB_CAP_RECLAIM) | MSB_BIT(MSB_CAP_EXEC) |
						      MSB_BIT(MSB_CAP_FILES_OUT) | MSB_BIT(MSB_CAP_FILES_IN));
	json_auto_t *egress = msb_egress_set_encode(MSB_BIT(MSB_EGRESS_CLOSED) |
						    MSB_BIT(MSB_EGRESS_UNRESTRICTED));

	ck_assert(json_eq_text(iso, "[\"os_process\",\"container\",\"vm\"]"));
	ck_assert(json_eq_text(caps, "[\"exec\",\"files_in\",\"files_out\",\"reclaim\"]"));
	ck_assert(json_eq_text(egress, "[\"unrestricted\",\"closed\"]"));
}
END_TEST

START_TEST(test_contract_names)
{
	ck_assert_str_eq(MSB_PROTOCOL_VERSION, "1");
	ck_assert_str_eq(MSB_METHOD_DAEMON_DESCRIBE, "daemon.describe");
	ck_assert_str_eq(MSB_METHOD_DAEMON_STATUS, "daemon.status");
	ck_assert_str_eq(MSB_METHOD_DAEMON_ENGINE, "daemon.engine");
	ck_assert_str_eq(MSB_METHOD_SANDBOX_EXEC, "sandbox.exec");
	ck_assert_str_eq(MSB_METHOD_FILES_WRITE, "files.write");
	ck_assert_str_eq(MSB_METHOD_FILES_READ, "files.read");
	ck_assert_str_eq(MSB_METHOD_FILES_STAT, "files.stat");
	ck_assert_str_eq(MSB_METHOD_FILES_REMOVE, "files.remove");
	ck_assert_str_eq(MSB_METHOD_FILES_RECLAIM, "files.reclaim");
}
END_TEST

/* ---- transfer limits ---------------------------------------------------- */

static const struct msb_transfer_limits limits_rows[] = {
	{ 0, 0, 0 },
	{ 1, 2, 3 },
	{ MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES },
	{ INT64_MAX, INT64_MAX, INT64_MAX },
	{ (uint64_t)1 << 40, 7, 0 },
};

START_TEST(test_limits_roundtrip)
{
	const struct msb_transfer_limits *l = &limits_rows[_i];
	struct msb_transfer_limits back = { 9, 9, 9 };
	const char *field = "untouched";
	json_auto_t *j = msb_transfer_limits_encode(l);

	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(json_object_size(j), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "max_bytes_per_file")),
			 (json_int_t)l->max_bytes_per_file);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "max_total_bytes")),
			 (json_int_t)l->max_total_bytes);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "max_files")), (json_int_t)l->max_files);
	ck_assert_int_eq(msb_transfer_limits_decode(j, &back, &field), 0);
	/* reterr_field is written only on failure. */
	ck_assert_str_eq(field, "untouched");
	ck_assert_uint_eq(back.max_bytes_per_file, l->max_bytes_per_file);
	ck_assert_uint_eq(back.max_total_bytes, l->max_total_bytes);
	ck_assert_uint_eq(back.max_files, l->max_files);
}
END_TEST

START_TEST(test_limits_encode_pinned)
{
	struct msb_transfer_limits l = { MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES,
					 MSB_TRANSFER_MAX_FILES };
	json_auto_t *j = msb_transfer_limits_encode(&l);

	ck_assert(json_eq_text(j, "{\"max_bytes_per_file\":67108864,\"max_total_bytes\":268435456,"
				  "\"max_files\":256}"));
}
END_TEST

struct decode_bad_row {
	const char *json;
	const char *field;  /* what *reterr_field names; "" for the value itself */
};

static const struct decode_bad_row decode_bad_rows[] = {
	/* missing */
	{ "{\"max_total_bytes\":1,\"max_files\":1}", "max_bytes_per_file" },
	{ "{\"max_bytes_per_file\":1,\"max_files\":1}", "max_total_bytes" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1}", "max_files" },
	{ "{}", "max_bytes_per_file" },
	/* negative */
	{ "{\"max_bytes_per_file\":-1,\"max_total_bytes\":1,\"max_files\":1}", "max_bytes_per_file" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":-5,\"max_files\":1}", "max_total_bytes" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":-9223372036854775807}", "max_files" },
	/* not an integer */
	{ "{\"max_bytes_per_file\":1.5,\"max_total_bytes\":1,\"max_files\":1}", "max_bytes_per_file" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1.0,\"max_files\":1}", "max_total_bytes" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":\"1\"}", "max_files" },
	{ "{\"max_bytes_per_file\":null,\"max_total_bytes\":1,\"max_files\":1}", "max_bytes_per_file" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":true,\"max_files\":1}", "max_total_bytes" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":[1]}", "max_files" },
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":{}}", "max_files" },
	/* unknown member */
	{ "{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":1,\"max_dirs\":1}", "max_dirs" },
	{ "{\"max_bytes\":1,\"max_total_bytes\":1,\"max_files\":1}", "max_bytes" },
	{ "{\"Max_files\":1,\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":1}", "Max_files" },
	/* not an object */
	{ "[1,2,3]", "" },
	{ "\"limits\"", "" },
	{ "42", "" },
	{ "null", "" },
};

START_TEST(test_limits_decode_bad)
{
	const struct decode_bad_row *row = &decode_bad_rows[_i];
	json_auto_t *j = parse(row->json);
	struct msb_transfer_limits l = { 7, 8, 9 };
	const char *field = NULL;

	ck_assert_int_eq(msb_transfer_limits_decode(j, &l, &field), -EINVAL);
	ck_assert_msg(field != NULL, "%s: no field named", row->json);
	ck_assert_msg(!strcmp(field, row->field), "%s: names \"%s\", want \"%s\"", row->json, field, row->field);
	/* ret is written only on success. */
	ck_assert_uint_eq(l.max_bytes_per_file, 7);
	ck_assert_uint_eq(l.max_total_bytes, 8);
	ck_assert_uint_eq(l.max_files, 9);
}
END_TEST

START_TEST(test_limits_decode_null_pointer)
{
	struct msb_transfer_limits l = { 7, 8, 9 };
	const char *field = NULL;

	ck_assert_int_eq(msb_transfer_limits_decode(NULL, &l, &field), -EINVAL);
	ck_assert_ptr_nonnull(field);
	ck_assert_uint_eq(l.max_files, 9);
}
END_TEST

struct within_row {
	struct msb_transfer_limits a, b;
	bool within;
};

#define LIM(x, y, z) { (x), (y), (z) }
static const struct within_row within_rows[] = {
	{ LIM(1, 2, 3), LIM(1, 2, 3), true },
	{ LIM(0, 0, 0), LIM(0, 0, 0), true },
	{ LIM(0, 0, 0), LIM(1, 2, 3), true },
	{ LIM(0, 2, 3), LIM(1, 2, 3), true },
	{ LIM(1, 1, 3), LIM(1, 2, 3), true },
	{ LIM(1, 2, 2), LIM(1, 2, 3), true },
	{ LIM(2, 2, 3), LIM(1, 2, 3), false },
	{ LIM(1, 3, 3), LIM(1, 2, 3), false },
	{ LIM(1, 2, 4), LIM(1, 2, 3), false },
	{ LIM(0, 0, 4), LIM(9, 9, 3), false },
	{ LIM(UINT64_MAX, 0, 0), LIM(UINT64_MAX - 1, 0, 0), false },
	{ LIM(MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES),
	  LIM(MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES), true },
	{ LIM(MSB_TRANSFER_MAX_FILE_BYTES + 1, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES),
	  LIM(MSB_TRANSFER_MAX_FILE_BYTES, MSB_TRANSFER_MAX_TOTAL_BYTES, MSB_TRANSFER_MAX_FILES), false },
};

START_TEST(test_limits_within)
{
	const struct within_row *row = &within_rows[_i];

	ck_assert_msg(msb_transfer_limits_within(&row->a, &row->b) == row->within, "row %d", _i);
}
END_TEST

static Suite *types_suite(void)
{
	Suite *s = suite_create("types");
	TCase *tc;

	tc = tcase_create("enum strings");
	tcase_add_loop_test(tc, test_enum_wire_strings, 0, ELEMENTSOF(enums));
	tcase_add_loop_test(tc, test_enum_out_of_range, 0, ELEMENTSOF(enums));
	tcase_add_loop_test(tc, test_enum_not_wire, 0, ELEMENTSOF(enums));
	tcase_add_test(tc, test_isolation_process);
	tcase_add_test(tc, test_contract_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("enum sets");
	tcase_add_loop_test(tc, test_set_encode, 0, ELEMENTSOF(enums));
	tcase_add_loop_test(tc, test_set_encode_ignores_unknown_bits, 0, ELEMENTSOF(enums));
	tcase_add_test(tc, test_set_encode_pinned);
	suite_add_tcase(s, tc);

	tc = tcase_create("transfer limits");
	tcase_add_loop_test(tc, test_limits_roundtrip, 0, ELEMENTSOF(limits_rows));
	tcase_add_test(tc, test_limits_encode_pinned);
	tcase_add_loop_test(tc, test_limits_decode_bad, 0, ELEMENTSOF(decode_bad_rows));
	tcase_add_test(tc, test_limits_decode_null_pointer);
	tcase_add_loop_test(tc, test_limits_within, 0, ELEMENTSOF(within_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(types_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
