/* check_replybound.c — each method's reply bound (replybound.h): never
 * below what the reply can be, taken from the params as sent (before they
 * are validated) and the caps. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "config.h"
#include "frame.h"
#include "m_exec.h"
#include "daemon.h"
#include "jsonrpc.h"
#include "msb-limits.h"
#include "paths.h"
#include "replybound.h"
#include "rpc.h"

#define B64(n) ((((size_t)(n) + 2) / 3) * 4)

static struct msbd_config *cfg;

static void setup(void)
{
	cfg = config_new_defaults();
}

static void teardown(void)
{
	cfg = config_free(cfg);
}

static size_t read_bound(const char *params_json)
{
	json_t *p = json_loads(params_json, 0, NULL);
	size_t b;

	ck_assert_ptr_nonnull(p);
	b = replybound_files_read(p, cfg);
	json_decref(p);
	return b;
}

static size_t exec_bound(const char *params_json)
{
	json_t *p = json_loads(params_json, 0, NULL);
	size_t b;

	ck_assert_ptr_nonnull(p);
	b = replybound_exec(p, cfg);
	json_decref(p);
	return b;
}

START_TEST(files_read_one_file_is_its_cap_in_base64)
{
	size_t b = read_bound("{\"sandbox\":\"x\",\"path\":\"a\"}");

	/* The whole per-file cap, in base64, plus a small envelope. */
	ck_assert_uint_ge(b, B64(MSB_TRANSFER_MAX_FILE_BYTES));
	ck_assert_uint_le(b, B64(MSB_TRANSFER_MAX_FILE_BYTES) + 1024);
	/* max_bytes lowers it; never below the default (an error reply). */
	b = read_bound("{\"sandbox\":\"x\",\"path\":\"a\",\"max_bytes\":3000000}");
	ck_assert_uint_ge(b, B64(3000000));
	ck_assert_uint_le(b, B64(3000000) + 1024);
	ck_assert_uint_eq(read_bound("{\"path\":\"a\",\"max_bytes\":0}"), REPLYBOUND_DEFAULT_BYTES);
	/* max_bytes over the cap (refused) or not a count: the cap. */
	ck_assert_uint_eq(read_bound("{\"path\":\"a\",\"max_bytes\":1e30}"), read_bound("{\"path\":\"a\"}"));
	ck_assert_uint_eq(read_bound("{\"path\":\"a\",\"max_bytes\":-1}"), read_bound("{\"path\":\"a\"}"));
	ck_assert_uint_eq(read_bound("{\"path\":\"a\",\"max_bytes\":99999999999}"), read_bound("{\"path\":\"a\"}"));
}
END_TEST

START_TEST(files_read_many_is_held_to_the_total)
{
	/* 4 × 64 MiB = the 256 MiB total: its base64, plus 4 entries with paths. */
	size_t b = read_bound("{\"paths\":[\"a\",\"b\",\"c\",\"d\"]}");

	ck_assert_uint_ge(b, B64(MSB_TRANSFER_MAX_TOTAL_BYTES) + 4 * REPLYBOUND_ESCAPED(PATHS_MAX_BYTES));
	ck_assert_uint_le(b, B64(MSB_TRANSFER_MAX_TOTAL_BYTES) + 4 * (REPLYBOUND_ESCAPED(PATHS_MAX_BYTES) + 256) + 1024);
	/* 8 × 64 MiB is still the total. */
	ck_assert_uint_lt(read_bound("{\"paths\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]}"),
			  B64(MSB_TRANSFER_MAX_TOTAL_BYTES) + 8 * (REPLYBOUND_ESCAPED(PATHS_MAX_BYTES) + 256) + 1024);
	/* 2 files of at most 1000 bytes. */
	b = read_bound("{\"paths\":[\"a\",\"b\"],\"max_bytes\":1000}");
	ck_assert_uint_eq(b, REPLYBOUND_DEFAULT_BYTES);
	/* Empty, or more than files.max_files: an error. */
	ck_assert_uint_eq(read_bound("{\"paths\":[]}"), REPLYBOUND_DEFAULT_BYTES);
	cfg->files_max_files = 2;
	ck_assert_uint_eq(read_bound("{\"paths\":[\"a\",\"b\",\"c\"]}"), REPLYBOUND_DEFAULT_BYTES);
	/* The caps of the configuration, not the wire's. */
	cfg->files_max_file_bytes = 16 * MSB_MIB;
	cfg->files_max_total_bytes = 20 * MSB_MIB;
	b = read_bound("{\"paths\":[\"a\",\"b\"]}");
	ck_assert_uint_ge(b, B64(20 * MSB_MIB));
	ck_assert_uint_lt(b, B64(20 * MSB_MIB) + 2 * (REPLYBOUND_ESCAPED(PATHS_MAX_BYTES) + 256) + 1024);
	/* Params that are not an object (refused later): still a bound. */
	ck_assert_uint_ge(read_bound("[1,2]"), B64(16 * MSB_MIB));
}
END_TEST

START_TEST(exec_counts_base64_text_views_and_stream)
{
	size_t out = MSB_EXEC_MAX_OUTPUT_BYTES;
	size_t plain = exec_bound("{\"text\":false}");
	size_t text = exec_bound("{\"text\":true}");
	size_t stream = exec_bound("{\"text\":false,\"stream\":true}");

	ck_assert_uint_ge(plain, B64(out));
	ck_assert_uint_le(plain, B64(out) + 1024);
	/* The two text views: at most 6 bytes (a \u00XX escape) a byte. */
	ck_assert_uint_ge(text, plain + 6 * out);
	ck_assert_uint_le(text, plain + 6 * out + 64);
	/* Notifications: the output again in base64, and as much for envelopes. */
	ck_assert_uint_ge(stream, plain + 2 * B64(out));
	/* The default of text (this branch: the views are always sent). */
	ck_assert_uint_eq(exec_bound("{}"), REPLYBOUND_EXEC_TEXT_DEFAULT ? text : plain);
	/* max_output_bytes lowers it; over the cap (refused): an error. */
	ck_assert_uint_le(exec_bound("{\"text\":false,\"max_output_bytes\":1000}"), REPLYBOUND_DEFAULT_BYTES);
	ck_assert_uint_eq(exec_bound("{\"text\":true,\"max_output_bytes\":100000000}"), REPLYBOUND_DEFAULT_BYTES);
	ck_assert_uint_ge(exec_bound("{\"text\":true,\"max_output_bytes\":1048576}"), 7 * 1048576);
}
END_TEST

START_TEST(max_covers_every_method_bound)
{
	size_t max = replybound_max(cfg);

	ck_assert_uint_ge(max, read_bound("{\"paths\":[\"a\",\"b\",\"c\",\"d\"]}"));
	ck_assert_uint_ge(max, exec_bound("{\"text\":true,\"stream\":true}"));
	ck_assert_uint_ge(max, REPLYBOUND_DEFAULT_BYTES);
}
END_TEST

/* rpc_reply_bound: the method's hook, the default for others and unknown
 * methods, plus the id escaped. */
START_TEST(rpc_bound_adds_the_id_and_defaults)
{
	json_t *err = NULL;
	struct jsonrpc_request req;
	const char *read = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"files.read\",\"params\":{\"sandbox\":\"x\",\"path\":\"a\"}}";
	const char *status = "{\"jsonrpc\":\"2.0\",\"id\":\"abcdefgh\",\"method\":\"daemon.status\"}";
	const char *unknown = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"no.such\",\"params\":{\"paths\":[1]}}";

	ck_assert_int_eq(jsonrpc_request_parse(read, strlen(read), &req, &err), 0);
	ck_assert_uint_eq(rpc_reply_bound(msbd_methods, msbd_n_methods, &req, cfg),
			  replybound_files_read(req.params, cfg) + replybound_id(req.id));
	jsonrpc_request_release(&req);
	ck_assert_int_eq(jsonrpc_request_parse(status, strlen(status), &req, &err), 0);
	ck_assert_uint_eq(rpc_reply_bound(msbd_methods, msbd_n_methods, &req, cfg),
			  REPLYBOUND_DEFAULT_BYTES + REPLYBOUND_ESCAPED(8));
	jsonrpc_request_release(&req);
	ck_assert_int_eq(jsonrpc_request_parse(unknown, strlen(unknown), &req, &err), 0);
	ck_assert_uint_eq(rpc_reply_bound(msbd_methods, msbd_n_methods, &req, cfg), REPLYBOUND_DEFAULT_BYTES + 24);
	jsonrpc_request_release(&req);
}
END_TEST

/* A frame as the daemon writes it: {"jsonrpc":"2.0","id":id,"result":result}\n. */
static size_t wire_len(json_t *id, json_t *result)
{
	json_t *reply = jsonrpc_reply_result(id, result);
	size_t len;
	char *f = frame_encode(reply, &len);

	ck_assert_ptr_nonnull(f);
	free(f);
	json_decref(reply);
	return len;
}

/* A string of n bytes of \x01 (each escaped \u0001 on the wire). */
static char *ones(size_t n)
{
	char *s = malloc(n + 1);

	memset(s, 1, n);
	s[n] = '\0';
	return s;
}

/* Real worst replies, encoded, within their bounds: files.read of one
 * file at its cap under a 4095-byte path of \x01 with the longest id of
 * \x01, and sandbox.exec of its cap of \x01 with text: true. */
START_TEST(real_worst_replies_fit_their_bounds)
{
	char *path = ones(PATHS_MAX_BYTES), *idstr = ones(256);
	size_t cap = 1 << 20, bound, len;
	uint8_t *data = malloc(cap);
	json_t *id = json_string(idstr), *params, *result;
	char max[32], *err = NULL;

	memset(data, 1, cap);
	snprintf(max, sizeof(max), "%zu", cap);
	ck_assert_int_eq(config_set(cfg, "files.max_file_bytes", max, &err), 0);
	ck_assert_int_eq(config_set(cfg, "files.max_total_bytes", max, &err), 0);
	ck_assert_int_eq(config_set(cfg, "exec.max_output_bytes", max, &err), 0);

	params = json_pack("{s:s, s:[s]}", "sandbox", "x", "paths", path);
	bound = replybound_files_read(params, cfg) + replybound_id(id);
	result = json_pack("{s:[{s:s, s:o, s:I}]}", "files", "path", path, "content_b64",
			   msb_base64_json(data, cap), "size", (json_int_t)cap);
	len = wire_len(id, result);
	ck_assert_msg(len <= bound, "files.read: %zu bytes over its bound %zu", len, bound);
	json_decref(params);

	params = json_pack("{s:s, s:s, s:b}", "sandbox", "x", "command", "c", "text", 1);
	bound = replybound_exec(params, cfg) + replybound_id(id);
	/* Output is stdout and stderr together: all of it in one, the other empty. */
	result = json_pack("{s:i, s:o, s:o, s:o, s:o, s:I}", "exit_code", -2147483647,
			   "stdout_b64", msb_base64_json(data, cap), "stderr_b64", msb_base64_json(data, 0),
			   "stdout_text", m_exec_text_view(data, cap), "stderr_text", m_exec_text_view(data, 0),
			   "duration_ms", (json_int_t)INT64_MAX);
	len = wire_len(id, result);
	ck_assert_msg(len <= bound, "sandbox.exec text: %zu bytes over its bound %zu", len, bound);
	/* And tight: the bound is not far above the real worst (no 2x slack). */
	ck_assert_uint_le(bound, len + len / 8 + REPLYBOUND_DEFAULT_BYTES);
	json_decref(params);

	json_decref(id);
	free(data);
	free(path);
	free(idstr);
}
END_TEST

static Suite *replybound_suite(void)
{
	Suite *s = suite_create("replybound");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, files_read_one_file_is_its_cap_in_base64);
	tcase_add_test(tc, files_read_many_is_held_to_the_total);
	tcase_add_test(tc, exec_counts_base64_text_views_and_stream);
	tcase_add_test(tc, max_covers_every_method_bound);
	tcase_add_test(tc, rpc_bound_adds_the_id_and_defaults);
	tcase_add_test(tc, real_worst_replies_fit_their_bounds);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(replybound_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
