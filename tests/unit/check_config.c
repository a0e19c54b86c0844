/* check_config.c — defaults → file → flags, the file format, validation. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "plane_local.h"
#include "msb-limits.h"
#include "replybound.h"

static char tmpdir[] = "/tmp/check-config-XXXXXX";

static void setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static char *write_file(const char *text)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/maf-sandboxd.conf", tmpdir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Loads the given file text, then the sets. */
static int load(const char *text, char **sets, size_t n, struct msbd_config **ret, char **err)
{
	struct msbd_cmdline c = { .config_file = write_file(text), .sets = sets, .n_sets = n };

	return config_load(&c, ret, err);
}

START_TEST(defaults_are_the_named_limits)
{
	struct msbd_config *cfg = config_new_defaults();

	ck_assert_uint_eq(cfg->max_frame_bytes, MSB_FRAME_MAX_BYTES);
	ck_assert_int_eq(cfg->max_connections, MSB_MAX_CONNECTIONS);
	ck_assert_int_eq(cfg->max_inflight, MSB_MAX_INFLIGHT);
	ck_assert_uint_eq(cfg->buffer_budget_bytes, MSB_BUFFER_BUDGET_BYTES);
	ck_assert_int_eq(cfg->frame_timeout_ms, MSB_FRAME_TIMEOUT_MS);
	ck_assert_int_eq(cfg->drain_ms, MSB_DRAIN_TIMEOUT_MS);
	ck_assert_uint_eq(cfg->socket_mode, 0660);
	ck_assert_str_eq(cfg->files_plane, "auto");
	ck_assert_int_eq(cfg->files_list_max_entries, PLOCAL_LIST_MAX_ENTRIES);
	ck_assert_ptr_null(cfg->engine_host);
	/* The frame limit admits a 64 MiB file in base64 plus an envelope. */
	ck_assert_uint_gt(cfg->max_frame_bytes, (MSB_TRANSFER_MAX_FILE_BYTES + 2) / 3 * 4 + 4096);
	config_free(cfg);
}
END_TEST

START_TEST(default_socket_path_follows_the_user)
{
	struct msbd_config *cfg;

	if (geteuid() == 0) {
		cfg = config_new_defaults();
		ck_assert_str_eq(cfg->socket_path, "/run/maf-sandbox.sock");
		config_free(cfg);
		return;
	}
	setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
	cfg = config_new_defaults();
	ck_assert_str_eq(cfg->socket_path, "/run/user/1234/maf-sandbox.sock");
	config_free(cfg);
}
END_TEST

START_TEST(file_with_comments_quotes_and_blank_lines)
{
	struct msbd_config *cfg = NULL;
	char *err = NULL;
	int r = load("# maf-sandboxd.conf\n"
		     "\n"
		     "   # indented comment\n"
		     "socket.path = /tmp/x.sock   # trailing comment\n"
		     "engine.host=\"unix:///var/run/my docker.sock\"  # quoted, with a space\n"
		     "limits.max_frame_bytes = 8M\n"
		     "limits.buffer_budget_bytes = 1GiB\n"
		     "limits.max_inflight = 7\r\n"
		     "socket.mode = 0600\n"
		     "log.debug = yes\n"
		     "engine.timeout_ms = 1500\n",
		     NULL, 0, &cfg, &err);

	ck_assert_msg(r == 0, "load failed: %s", err);
	ck_assert_str_eq(cfg->socket_path, "/tmp/x.sock");
	ck_assert_str_eq(cfg->engine_host, "unix:///var/run/my docker.sock");
	ck_assert_uint_eq(cfg->max_frame_bytes, 8u << 20);
	ck_assert_uint_eq(cfg->buffer_budget_bytes, 1u << 30);
	ck_assert_int_eq(cfg->max_inflight, 7);
	ck_assert_uint_eq(cfg->socket_mode, 0600);
	ck_assert(cfg->debug);
	ck_assert_int_eq(cfg->engine_timeout_ms, 1500);
	ck_assert_ptr_nonnull(cfg->file);
	config_free(cfg);
}
END_TEST

START_TEST(flags_override_the_file)
{
	struct msbd_config *cfg = NULL;
	char *err = NULL;
	char *sets[] = { "limits.max_inflight=3", "socket.path=/tmp/flag.sock" };
	int r = load("limits.max_inflight = 9\nsocket.path = /tmp/file.sock\n", sets, 2, &cfg, &err);

	ck_assert_msg(r == 0, "load failed: %s", err);
	ck_assert_int_eq(cfg->max_inflight, 3);
	ck_assert_str_eq(cfg->socket_path, "/tmp/flag.sock");
	config_free(cfg);
}
END_TEST

struct bad_row {
	const char *file;
	const char *expect;   /* a part of the message */
};

static const struct bad_row bad_rows[] = {
	{ "no.such.key = 1\n", "conf:1: unknown setting \"no.such.key\"" },
	{ "\nlimits.max_inflight = many\n", "conf:2: limits.max_inflight" },
	{ "limits.max_inflight = 0\n", "from 1 to" },
	{ "limits.max_inflight = 12x\n", "limits.max_inflight" },
	{ "limits.max_frame_bytes = 1K\n", "limits.max_frame_bytes" },   /* below the minimum */
	{ "limits.max_frame_bytes = 5Q\n", "limits.max_frame_bytes" },
	{ "limits.max_frame_bytes = -5\n", "limits.max_frame_bytes" },
	{ "socket.mode = 999\n", "octal" },
	{ "log.debug = maybe\n", "boolean" },
	{ "just some words\n", "expected \"key = value\"" },
	{ "= 5\n", "expected \"key = value\"" },
	{ "engine.host = \"unterminated\n", "expected \"key = value\"" },
	{ "socket.path = relative.sock\n", "absolute" },
	{ "socket.group = no-such-group-xyz\n", "no group named" },
	{ "limits.max_frame_bytes = 64M\nlimits.buffer_budget_bytes = 32M\n", "buffer_budget_bytes" },
	{ "engine.reconnect_min_ms = 5000\nengine.reconnect_max_ms = 100\n", "reconnect_min_ms" },
	{ "exec.on_timeout = later\n", "exec.on_timeout must be kill or dispose" },
	{ "files.plane = fast\n", "files.plane must be auto, local or archive" },
	{ "files.list_max_entries = 0\n", "files.list_max_entries" },
	{ "files.max_file_bytes = 65M\n", "files.max_file_bytes" },     /* over the 64 MiB ceiling */
	{ "files.max_files = 257\n", "files.max_files" },
	{ "exec.max_output_bytes = 0\n", "exec.max_output_bytes" },
	{ "limits.max_connections_per_uid = 0\n", "limits.max_connections_per_uid" },
	{ "limits.max_inflight_per_uid = 0\n", "limits.max_inflight_per_uid" },
	{ "limits.admin_reserved_connections = -1\n", "limits.admin_reserved_connections" },
	{ "limits.idle_timeout_ms = 999\n", "limits.idle_timeout_ms" },    /* 0 or >= 1000 */
	{ "limits.idle_timeout_ms = -1\n", "limits.idle_timeout_ms" },
	{ "limits.idle_evict_ms = -1\n", "limits.idle_evict_ms" },
	{ "limits.max_frame_bytes = 1M\nlimits.uid_buffer_bytes = 512K\n", "limits.uid_buffer_bytes" },
	{ "limits.max_frame_bytes = 1M\nlimits.buffer_budget_bytes = 8M\nlimits.uid_buffer_bytes = 9M\n", "limits.uid_buffer_bytes" },
};

START_TEST(bad_files_are_refused_with_a_message)
{
	const struct bad_row *row = &bad_rows[_i];
	struct msbd_config *cfg = NULL;
	char *err = NULL;
	int r = load(row->file, NULL, 0, &cfg, &err);

	ck_assert_int_lt(r, 0);
	ck_assert_ptr_null(cfg);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, row->expect), "message \"%s\" lacks \"%s\"", err, row->expect);
	free(err);
}
END_TEST

START_TEST(an_explicit_missing_file_is_an_error)
{
	struct msbd_cmdline c = { .config_file = "/nonexistent/maf.conf" };
	struct msbd_config *cfg = NULL;
	char *err = NULL;

	ck_assert_int_lt(config_load(&c, &cfg, &err), 0);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/maf.conf"));
	free(err);
}
END_TEST

START_TEST(set_without_equals_is_an_error)
{
	char *sets[] = { "limits.max_inflight" };
	struct msbd_cmdline c = { .config_file = write_file(""), .sets = sets, .n_sets = 1 };
	struct msbd_config *cfg = NULL;
	char *err = NULL;

	ck_assert_int_lt(config_load(&c, &cfg, &err), 0);
	ck_assert_ptr_nonnull(strstr(err, "key=value"));
	free(err);
}
END_TEST

START_TEST(limit_edges)
{
	struct msbd_config *cfg = config_new_defaults();
	char *err = NULL;

	ck_assert_int_eq(config_set(cfg, "limits.max_connections", "1", &err), 0);
	ck_assert_int_eq(config_set(cfg, "limits.max_connections", "65536", &err), 0);
	ck_assert_int_lt(config_set(cfg, "limits.max_connections", "65537", &err), 0);
	free(err), err = NULL;
	ck_assert_int_eq(config_set(cfg, "limits.max_frame_bytes", "4096", &err), 0);
	ck_assert_uint_eq(cfg->max_frame_bytes, MSB_FRAME_MIN_BYTES);
	ck_assert_int_lt(config_set(cfg, "limits.max_frame_bytes", "4095", &err), 0);
	free(err), err = NULL;
	ck_assert_int_lt(config_set(cfg, "limits.max_frame_bytes", "99999999999999999999999", &err), 0);
	free(err);
	config_free(cfg);
}
END_TEST

/* The reply budgets (issue 17): defaults that admit the largest reply of
 * the default caps, each budget checked against the caps, the
 * per-connection one within the daemon-wide one, and the message names the
 * key and the fix. */
START_TEST(reply_budgets_admit_the_largest_reply)
{
	struct msbd_config *cfg = config_new_defaults();
	char *err = NULL;

	free(cfg->socket_path);
	cfg->socket_path = strdup("/run/x.sock");
	free(cfg->freeze_lock_file);
	cfg->freeze_lock_file = strdup("/run/x.lock");
	ck_assert_uint_eq(cfg->reply_budget_bytes, MSB_REPLY_BUDGET_BYTES);
	ck_assert_uint_eq(cfg->conn_reply_budget_bytes, MSB_CONN_REPLY_BUDGET_BYTES);
	/* The largest reply of the defaults: 256 MiB read, 341.3 MiB of base64 + entries. */
	ck_assert_uint_gt(replybound_max(cfg), 256 * MSB_MIB / 3 * 4);
	ck_assert_uint_lt(replybound_max(cfg), 360 * MSB_MIB);
	/* ...and room for its request, a frame. */
	ck_assert_uint_ge(cfg->conn_reply_budget_bytes, replybound_max(cfg) + cfg->max_frame_bytes);
	ck_assert_int_eq(config_validate(cfg, &err), 0);

	/* files.list's bound counts: 10000 long names under a long path. */
	ck_assert_uint_ge(replybound_max(cfg), replybound_files_list(NULL, cfg));
	/* Below the largest call (its reply, the longest id, a frame): refused,
	 * naming the key and the fix. */
	cfg->conn_reply_budget_bytes = replybound_max(cfg) + REPLYBOUND_MAX_ID_BYTES + cfg->max_frame_bytes - 1;
	ck_assert_int_eq(config_validate(cfg, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "limits.conn_reply_budget_bytes"));
	ck_assert_ptr_nonnull(strstr(err, "lower those caps"));
	free(err), err = NULL;
	cfg->conn_reply_budget_bytes++;
	ck_assert_int_eq(config_validate(cfg, &err), 0);
	/* Lower caps make the same budget valid... */
	cfg->conn_reply_budget_bytes = 48 * MSB_MIB;
	cfg->reply_budget_bytes = 40 * MSB_MIB;
	ck_assert_int_eq(config_set(cfg, "limits.max_frame_bytes", "4M", &err), 0);
	ck_assert_int_eq(config_set(cfg, "files.list_max_entries", "1000", &err), 0);
	ck_assert_int_eq(config_set(cfg, "files.max_total_bytes", "16M", &err), 0);
	ck_assert_int_eq(config_set(cfg, "files.max_file_bytes", "16M", &err), 0);
	ck_assert_int_eq(config_set(cfg, "files.max_files", "4", &err), 0);
	ck_assert_int_eq(config_set(cfg, "exec.max_output_bytes", "8M", &err), 0);
	/* ...but exec's text views of 8 MiB (6 bytes a byte) do not fit. */
	ck_assert_int_eq(config_validate(cfg, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "exec.max_output_bytes"));
	free(err), err = NULL;
	ck_assert_int_eq(config_set(cfg, "exec.max_output_bytes", "1M", &err), 0);
	/* The per-connection budget above the daemon's: refused. */
	ck_assert_int_eq(config_validate(cfg, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "is above limits.reply_budget_bytes"));
	free(err), err = NULL;
	ck_assert_int_eq(config_set(cfg, "limits.reply_budget_bytes", "96M", &err), 0);
	ck_assert_int_eq(config_validate(cfg, &err), 0);
	ck_assert_int_lt(config_set(cfg, "limits.reply_budget_bytes", "65535", &err), 0);
	free(err), err = NULL;
	config_free(cfg);
}
END_TEST

/* The fairness limits: defaults, what validation lets through, the share's default. */
START_TEST(fairness_limits)
{
	char *ok[] = { "limits.idle_timeout_ms=0", "limits.idle_evict_ms=0", "limits.max_connections=1",
		       "limits.admin_reserved_connections=8", "limits.max_frame_bytes=1M",
		       "limits.buffer_budget_bytes=8M", "limits.uid_buffer_bytes=1M" };
	struct msbd_config *cfg = config_new_defaults();
	char *err = NULL;

	ck_assert_int_eq(cfg->max_connections_per_uid, MSB_MAX_CONNECTIONS_PER_UID);
	ck_assert_int_eq(cfg->admin_reserved_connections, MSB_ADMIN_RESERVED_CONNECTIONS);
	ck_assert_int_eq(cfg->max_inflight_per_uid, MSB_MAX_INFLIGHT_PER_UID);
	ck_assert_int_eq(cfg->idle_timeout_ms, MSB_IDLE_TIMEOUT_MS);
	ck_assert_int_eq(cfg->idle_evict_ms, MSB_IDLE_EVICT_MS);
	ck_assert_uint_eq(cfg->uid_buffer_bytes, 0);
	/* 0: half the budget, but never under one frame. */
	ck_assert_uint_eq(config_uid_buffer_bytes(cfg), MSB_BUFFER_BUDGET_BYTES / 2);
	/* The default share lets one uid stall only itself: share + frame < budget. */
	ck_assert_uint_lt(config_uid_buffer_bytes(cfg) + cfg->max_frame_bytes, cfg->buffer_budget_bytes);
	cfg->max_frame_bytes = cfg->buffer_budget_bytes;
	ck_assert_uint_eq(config_uid_buffer_bytes(cfg), cfg->buffer_budget_bytes);
	cfg->uid_buffer_bytes = 12345678;
	ck_assert_uint_eq(config_uid_buffer_bytes(cfg), 12345678);
	config_free(cfg);
	cfg = NULL;
	/* Edges that pass: 0 turns the idle limits off; a reserve as large as
	 * max_connections is accepted (one connection stays open to everyone). */
	ck_assert_int_eq(load("", ok, sizeof(ok) / sizeof(ok[0]), &cfg, &err), 0);
	ck_assert_int_eq(cfg->idle_timeout_ms, 0);
	ck_assert_uint_eq(config_uid_buffer_bytes(cfg), 1024 * 1024);
	config_free(cfg);
}
END_TEST

START_TEST(restart_keys_are_reported)
{
	struct msbd_config *a = config_new_defaults(), *b = config_new_defaults();
	char *err = NULL, *changed;

	ck_assert_ptr_null(config_restart_keys_changed(a, b));
	config_set(b, "limits.max_inflight", "2", &err);        /* live: not listed */
	ck_assert_ptr_null(config_restart_keys_changed(a, b));
	config_set(b, "socket.path", "/tmp/other.sock", &err);
	config_set(b, "engine.host", "tcp://h:2376", &err);
	changed = config_restart_keys_changed(a, b);
	ck_assert_str_eq(changed, "socket.path, engine.host");
	free(changed);
	config_free(a);
	config_free(b);
}
END_TEST

START_TEST(dump_lists_every_key)
{
	struct msbd_config *cfg = config_new_defaults();
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	config_dump(cfg, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(buf, "\nlimits.max_frame_bytes = 100663296\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\nsocket.mode = 0660\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\nshutdown.drain_ms = 10000\n"));
	free(buf);
	config_free(cfg);
}
END_TEST

/* Sizes and durations with units (units.h) on every size and duration
 * key; the key's range still applies; a refusal names the key and the
 * accepted forms. */
static const struct {
	const char *key, *value;
	size_t offset;
	bool is_size;
	long long want;     /* < 0: refused */
	const char *expect; /* a part of the refusal's message */
} unit_rows[] = {
	{ "sandbox.memory", "1.5G", offsetof(struct msbd_config, memory_bytes), true, 3LL << 29, NULL },
	{ "sandbox.memory", "128M", offsetof(struct msbd_config, memory_bytes), true, 128LL << 20, NULL },
	{ "sandbox.memory", "512MiB", offsetof(struct msbd_config, memory_bytes), true, 512LL << 20, NULL },
	{ "limits.max_frame_bytes", "2m", offsetof(struct msbd_config, max_frame_bytes), true, 2LL << 20, NULL },
	{ "limits.buffer_budget_bytes", "1T", offsetof(struct msbd_config, buffer_budget_bytes), true, 1LL << 40, NULL },
	{ "events.max_backlog_bytes", "4096", offsetof(struct msbd_config, events_max_backlog_bytes), true, 4096, NULL },
	{ "engine.timeout_ms", "1.5s", offsetof(struct msbd_config, engine_timeout_ms), false, 1500, NULL },
	{ "engine.timeout_ms", "2m", offsetof(struct msbd_config, engine_timeout_ms), false, 120000, NULL },
	{ "engine.timeout_ms", "250ms", offsetof(struct msbd_config, engine_timeout_ms), false, 250, NULL },
	{ "engine.timeout_ms", "30000", offsetof(struct msbd_config, engine_timeout_ms), false, 30000, NULL },
	{ "sandbox.pull_timeout_ms", "1h", offsetof(struct msbd_config, pull_timeout_ms), false, 3600000, NULL },
	{ "reap.max_age_s", "24h", offsetof(struct msbd_config, reap_max_age_s), false, 86400, NULL },
	{ "reap.max_age_s", "1.5d", offsetof(struct msbd_config, reap_max_age_s), false, 129600, NULL },
	{ "reap.max_age_s", "90", offsetof(struct msbd_config, reap_max_age_s), false, 90, NULL },
	{ "reap.interval_s", "15m", offsetof(struct msbd_config, reap_interval_s), false, 900, NULL },
	{ "limits.idle_timeout_ms", "0", offsetof(struct msbd_config, idle_timeout_ms), false, 0, NULL },
	/* Refused: junk, negative, overflow, out of range, not whole. */
	{ "sandbox.memory", "1.5X", 0, true, -1, "sandbox.memory: \"1.5X\" is not a size" },
	{ "sandbox.memory", "-1G", 0, true, -1, "128M" },
	{ "sandbox.memory", "99999999999999999999999", 0, true, -1, "sandbox.memory" },
	{ "sandbox.memory", "16777216T", 0, true, -1, "sandbox.memory" },
	{ "limits.max_frame_bytes", "2G", 0, true, -1, "from 4096 to 1073741824 bytes" },
	{ "engine.timeout_ms", "2d", 0, false, -1, "engine.timeout_ms: \"2d\" is not a duration from 100 to 3600000 milliseconds" },
	{ "engine.timeout_ms", "1.5", 0, false, -1, "in whole milliseconds" },
	{ "engine.timeout_ms", "-5s", 0, false, -1, "24h" },
	{ "engine.timeout_ms", "5 s", 0, false, -1, "engine.timeout_ms" },
	{ "reap.max_age_s", "1500ms", 0, false, -1, "in whole seconds" },
	{ "reap.max_age_s", "3w", 0, false, -1, "reap.max_age_s" },
	{ "reap.max_age_s", "18446744073709551616", 0, false, -1, "reap.max_age_s" },
	{ "limits.max_inflight", "1k", 0, false, -1, "limits.max_inflight" },   /* a count: no units */
};

START_TEST(sizes_and_durations_take_units)
{
	struct msbd_config *cfg = config_new_defaults();
	char *err = NULL;
	int r = config_set(cfg, unit_rows[_i].key, unit_rows[_i].value, &err);
	const char *base = (const char *)cfg + unit_rows[_i].offset;

	if (unit_rows[_i].want >= 0) {
		ck_assert_msg(r == 0, "%s = %s refused: %s", unit_rows[_i].key, unit_rows[_i].value, err);
		if (unit_rows[_i].is_size)
			ck_assert_uint_eq(*(const size_t *)base, (size_t)unit_rows[_i].want);
		else
			ck_assert_int_eq(*(const long *)base, unit_rows[_i].want);
	} else {
		ck_assert_msg(r < 0, "%s = %s accepted", unit_rows[_i].key, unit_rows[_i].value);
		ck_assert_msg(err && strstr(err, unit_rows[_i].expect), "message \"%s\" lacks \"%s\"",
			      err, unit_rows[_i].expect);
	}
	free(err);
	config_free(cfg);
}
END_TEST

/* A file with suffixed values loads whole. */
START_TEST(file_with_units)
{
	struct msbd_config *cfg = NULL;
	char *err = NULL;

	ck_assert_msg(load("sandbox.memory = 1.5G\nreap.max_age_s = 24h\nlimits.frame_timeout_ms = 30s\n",
			   NULL, 0, &cfg, &err) == 0, "%s", err);
	ck_assert_uint_eq(cfg->memory_bytes, 3ULL << 29);
	ck_assert_int_eq(cfg->reap_max_age_s, 86400);
	ck_assert_int_eq(cfg->frame_timeout_ms, 30000);
	config_free(cfg);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("load");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, defaults_are_the_named_limits);
	tcase_add_test(tc, default_socket_path_follows_the_user);
	tcase_add_test(tc, file_with_comments_quotes_and_blank_lines);
	tcase_add_test(tc, flags_override_the_file);
	tcase_add_loop_test(tc, bad_files_are_refused_with_a_message, 0,
			    sizeof(bad_rows) / sizeof(bad_rows[0]));
	tcase_add_test(tc, an_explicit_missing_file_is_an_error);
	tcase_add_test(tc, set_without_equals_is_an_error);
	tcase_add_test(tc, limit_edges);
	tcase_add_test(tc, fairness_limits);
	tcase_add_test(tc, restart_keys_are_reported);
	tcase_add_test(tc, reply_budgets_admit_the_largest_reply);
	tcase_add_test(tc, dump_lists_every_key);
	tcase_add_loop_test(tc, sizes_and_durations_take_units, 0, sizeof(unit_rows) / sizeof(unit_rows[0]));
	tcase_add_test(tc, file_with_units);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
