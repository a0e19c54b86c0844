/* check_daemon.c — maf-sandboxd on a private socket against the real engine:
 * describe/status through the C client and the CLI, socket activation, bad
 * input on a raw socket, every wire limit, engine loss and recovery, signals. */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_engine.h"
#include "harness.h"

#define ENGINE_WAIT_MS 15000      /* hang guard */
#define RECV_MS 10000             /* hang guard */
/* A log line or a status counter awaited (polled). */
#define STATE_WAIT_MS 30000       /* hang guard */

/* Our highest API version (engine/engine.h MSB_ENGINE_API_MAX). */
#define OUR_API_MAX "1.51"

static int api_cmp(const char *a, const char *b)
{
	int amaj = 0, amin = 0, bmaj = 0, bmin = 0;

	sscanf(a, "%d.%d", &amaj, &amin);
	sscanf(b, "%d.%d", &bmaj, &bmin);
	return amaj != bmaj ? amaj - bmaj : amin - bmin;
}

static const char *error_type(json_t *reply)
{
	return jstr(reply, "error.data.type");
}

static json_int_t error_code(json_t *reply)
{
	return jint(reply, "error.code");
}

/* ---- describe and status against the real engine ---------------------- */

START_TEST(describe_declares_the_docker_backend)
{
	struct msbd_proc d = { 0 };
	json_t *st, *desc, *fam;

	msbd_start(&d, NULL);
	st = wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS);
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_str_eq(jstr(desc, "isolation"), "container");
	ck_assert_str_eq(jstr(desc, "backend"), "docker");
	ck_assert_str_eq(jstr(desc, "protocol_version"), "1");
	fam = jget(desc, "os_families");
	ck_assert_uint_eq(json_array_size(fam), 1);
	ck_assert_str_eq(json_string_value(json_array_get(fam, 0)), "posix");
	ck_assert_str_eq(jstr(st, "engine.os"), "linux");
	ck_assert_uint_eq(json_array_size(jget(desc, "egress_modes")), 1);
	ck_assert_str_eq(json_string_value(json_array_get(jget(desc, "egress_modes"), 0)), "closed");
	ck_assert_uint_eq(json_array_size(jget(desc, "isolation_scopes")), 2);
	ck_assert_int_eq(jint(desc, "limits.files_in.max_bytes_per_file"), 64 << 20);
	ck_assert_int_eq(jint(desc, "limits.files_in.max_total_bytes"), 256 << 20);
	ck_assert_int_eq(jint(desc, "limits.files_out.max_files"), 256);
	ck_assert_int_eq(jint(desc, "exec.max_output_bytes"), 8 << 20);   /* exec.max_output_bytes */
	json_decref(st);
	json_decref(desc);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(status_reports_the_negotiated_engine)
{
	struct msbd_proc d = { 0 };
	char *engine_api = NULL, *body;
	json_t *st, *version, *eng;
	const char *expect;

	msbd_start(&d, NULL);
	st = wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS);
	/* Ask the engine ourselves, bypassing the daemon. */
	free(engine_get("/_ping", "Api-Version", &engine_api));
	body = engine_get("/version", NULL, NULL);
	version = json_loads(body, 0, NULL);
	free(body);
	expect = api_cmp(engine_api, OUR_API_MAX) < 0 ? engine_api : OUR_API_MAX;
	ck_assert_str_eq(jstr(st, "engine.api_version"), expect);
	ck_assert_str_eq(jstr(st, "engine.engine_api_version"), engine_api);
	ck_assert_str_eq(jstr(st, "engine.version"), jstr(version, "Version"));
	ck_assert(json_is_true(jget(st, "engine.reachable")));
	ck_assert_ptr_nonnull(strstr(jstr(st, "engine.endpoint"), "unix://"));
	ck_assert_str_eq(jstr(st, "daemon.socket"), d.sock);
	ck_assert_int_ge(jint(st, "engine.requests"), 2);     /* /_ping and /version */
	ck_assert_int_eq(jint(st, "connections.current"), 1);
	/* daemon.engine asks the engine now and agrees. */
	eng = call(d.sock, "daemon.engine", NULL, NULL, NULL);
	ck_assert_str_eq(jstr(eng, "version"), jstr(version, "Version"));
	ck_assert_str_eq(jstr(eng, "os"), "linux");
	ck_assert_str_eq(jstr(eng, "api_version"), expect);
	json_decref(eng);
	json_decref(st);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_int_ge(jint(st, "engine.call_requests"), 1);
	free(engine_api);
	json_decref(version);
	json_decref(st);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- the CLI ---------------------------------------------------------- */

START_TEST(cli_describe_json_and_status)
{
	struct msbd_proc d = { 0 };
	char *out = NULL, *err = NULL;
	json_t *desc, *st;

	msbd_start(&d, NULL);
	st = wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "describe", "--json", NULL }, &out, &err), 0);
	desc = json_loads(out, 0, NULL);
	ck_assert_msg(desc, "describe --json printed no JSON: %s", out);
	ck_assert_str_eq(json_string_value(json_array_get(jget(desc, "os_families"), 0)), "posix");
	json_decref(desc);
	free(out), free(err);
	ck_assert_int_eq(run_cli((const char *[]){ "--json", "--socket", d.sock, "status", NULL }, &out, NULL), 0);
	desc = json_loads(out, 0, NULL);
	ck_assert_msg(desc, "status --json printed no JSON: %s", out);
	ck_assert_str_eq(jstr(desc, "engine.state"), "reachable");
	json_decref(desc);
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "status", NULL }, &out, NULL), 0);
	ck_assert_msg(strstr(out, "reachable") && strstr(out, jstr(st, "engine.version")) &&
		      strstr(out, jstr(st, "engine.api_version")),
		      "status output lacks the engine: %s", out);
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "describe", NULL }, &out, NULL), 0);
	ck_assert_msg(strstr(out, "container") && strstr(out, "posix"), "describe output: %s", out);
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "engine", NULL }, &out, NULL), 0);
	ck_assert_msg(strstr(out, jstr(st, "engine.version")), "engine output: %s", out);
	free(out);
	json_decref(st);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(cli_exit_codes)
{
	char *out = NULL, *err = NULL;

	ck_assert_int_eq(run_cli((const char *[]){ "--socket", "/nonexistent/msb.sock", "status", NULL }, NULL, &err), 3);
	ck_assert_msg(strstr(err, "/nonexistent/msb.sock"), "message does not name the socket: %s", err);
	free(err);
	ck_assert_int_eq(run_cli((const char *[]){ "no-such-command", NULL }, NULL, NULL), 2);
	ck_assert_int_eq(run_cli((const char *[]){ "--bogus-flag", "status", NULL }, NULL, NULL), 2);
	ck_assert_int_eq(run_cli((const char *[]){ NULL }, NULL, NULL), 2);
	ck_assert_int_eq(run_cli((const char *[]){ "--help", NULL }, &out, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "describe"));
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "status", "--help", NULL }, &out, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "status"));
	free(out);
}
END_TEST

/* ---- bad input on a raw socket --------------------------------------- */

static struct msbd_proc bad;

static void bad_setup(void)
{
	msbd_start(&bad, (const char *[]){ "--set", "limits.max_frame_bytes=65536",
					   "--set", "limits.frame_timeout_ms=400",
					   "--set", "limits.max_connections=4", NULL });
}

static void bad_teardown(void)
{
	ck_assert_int_eq(msbd_stop(&bad), 0);
}

/* The connection still serves: a describe gets its reply with id "alive". */
static void assert_alive(int fd)
{
	json_t *r;

	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":\"alive\",\"method\":\"daemon.describe\"}\n");
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "connection closed or silent after an error it should survive");
	ck_assert_str_eq(jstr(r, "id"), "alive");
	ck_assert_str_eq(jstr(r, "result.isolation"), "container");
	json_decref(r);
}

/* The daemon's log holds text: polled up to STATE_WAIT_MS. */
static bool log_says(const struct msbd_proc *d, const char *text)
{
	for (int waited = 0;; waited += 20) {
		char cmd[512], *out;
		bool found;

		snprintf(cmd, sizeof(cmd), "grep -cF '%s' %s", text, d->log);
		out = sh_out("%s", cmd);
		found = atoi(out) > 0;
		free(out);
		if (found || waited >= STATE_WAIT_MS)     /* hang guard */
			return found;
		usleep(20 * 1000);
	}
}

/* memory.buffered_bytes of the daemon's status, asked on a connection of its own. */
static json_int_t buffered_bytes(const char *sock)
{
	json_t *st = call(sock, "daemon.status", NULL, NULL, NULL);
	json_int_t n;

	ck_assert_ptr_nonnull(st);
	n = jint(st, "memory.buffered_bytes");
	json_decref(st);
	return n;
}

/* Nothing to read on fd (no reply, no end) once the daemon has answered two
 * round trips on another connection after what was sent on fd: it took its
 * turns, and left fd's bytes unread. An ordering, no time window. */
static void assert_unread_after_turns(int fd, int other, const char *what)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	for (int i = 0; i < 2; i++) {
		json_t *r;

		raw_send_str(other, "{\"jsonrpc\":\"2.0\",\"id\":\"turn\",\"method\":\"daemon.describe\"}\n");
		r = raw_recv(other, RECV_MS);
		ck_assert_msg(r, "the other connection was not answered");
		json_decref(r);
	}
	ck_assert_msg(poll(&pfd, 1, 0) == 0, "%s", what);
}

struct bad_row {
	const char *frame;         /* sent as is (each ends in LF) */
	int code;
	const char *type;
	const char *id;            /* expected id as JSON text */
	const char *data_member;   /* "key=value" expected in error.data, or NULL */
};

static const struct bad_row bad_rows[] = {
	{ "{not json\n", -32700, "ParseError", "null", NULL },
	{ "\x01\x02\xff\xfe garbage\n", -32700, "ParseError", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"} trailing\n", -32700, "ParseError", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"daemon.describe\"}\n", -32700, "ParseError", "null", NULL },
	{ "[]\n", -32600, "InvalidRequest", "null", NULL },
	{ "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"}]\n", -32600, "InvalidRequest", "null", NULL },
	{ "42\n", -32600, "InvalidRequest", "null", NULL },
	{ "\"a string\"\n", -32600, "InvalidRequest", "null", NULL },
	{ "null\n", -32600, "InvalidRequest", "null", NULL },
	{ "{\"id\":5,\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "5", NULL },
	{ "{\"jsonrpc\":\"1.0\",\"id\":\"v\",\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "\"v\"", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":6}\n", -32600, "InvalidRequest", "6", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":42}\n", -32600, "InvalidRequest", "7", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"daemon.describe\"}\n", -32600, "InvalidRequest", "null", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"daemon.describe\",\"extra\":1}\n", -32600, "InvalidRequest", "8", "member=extra" },
	{ "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"no.such.method\"}\n", -32601, "MethodNotFound", "9", "method=no.such.method" },
	{ "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"daemon.status\",\"params\":[1]}\n", -32602, "InvalidParams", "10", NULL },
	{ "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"daemon.status\",\"params\":{\"verbose\":true}}\n", -32602, "InvalidParams", "11", "field=verbose" },
	{ "{\"jsonrpc\":\"2.0\",\"id\":\"\",\"method\":\"daemon.describe\",\"params\":null}\n", -32602, "InvalidParams", "\"\"", NULL },
};

START_TEST(bad_input_gets_an_error_and_the_connection_stays)
{
	const struct bad_row *row = &bad_rows[_i];
	int fd = raw_connect(bad.sock);
	json_t *r, *want_id;

	ck_assert_int_ge(fd, 0);
	raw_send_str(fd, row->frame);
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "no reply to %s", row->frame);
	ck_assert_int_eq(error_code(r), row->code);
	ck_assert_str_eq(error_type(r), row->type);
	ck_assert_str_eq(jstr(r, "jsonrpc"), "2.0");
	want_id = json_loads(row->id, JSON_DECODE_ANY, NULL);
	ck_assert_msg(json_equal(json_object_get(r, "id"), want_id), "reply id is wrong for %s", row->frame);
	json_decref(want_id);
	if (row->data_member) {
		char key[64];
		const char *eq = strchr(row->data_member, '=');

		snprintf(key, sizeof(key), "error.data.%.*s", (int)(eq - row->data_member), row->data_member);
		ck_assert_str_eq(jstr(r, key), eq + 1);
	}
	json_decref(r);
	assert_alive(fd);
	close(fd);
}
END_TEST

START_TEST(every_id_type_is_echoed)
{
	static const char *const ids[] = { "0", "-1", "9007199254740991", "\"x\"", "\"\"", "null" };
	int fd = raw_connect(bad.sock);

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		char frame[256];
		json_t *r, *want = json_loads(ids[i], JSON_DECODE_ANY, NULL);

		snprintf(frame, sizeof(frame), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"daemon.describe\"}\n", ids[i]);
		raw_send_str(fd, frame);
		r = raw_recv(fd, RECV_MS);
		ck_assert_ptr_nonnull(r);
		ck_assert_msg(json_equal(json_object_get(r, "id"), want), "id %s not echoed", ids[i]);
		ck_assert_ptr_nonnull(jget(r, "result"));
		json_decref(r);
		json_decref(want);
	}
	close(fd);
}
END_TEST

START_TEST(notifications_and_blank_lines_get_no_reply)
{
	int fd = raw_connect(bad.sock);
	json_t *r;

	raw_send_str(fd, "\n\r\n   \n{\"jsonrpc\":\"2.0\",\"method\":\"daemon.describe\"}\n"
			 "{\"jsonrpc\":\"2.0\",\"method\":\"no.such\"}\n"
			 "{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"daemon.status\"}\r\n");
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(jstr(r, "id"), "after");
	json_decref(r);
	close(fd);
}
END_TEST

START_TEST(split_and_pipelined_frames)
{
	const char *frame = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"}\n";
	int fd = raw_connect(bad.sock);
	char many[4096] = "";
	json_t *r;

	for (const char *p = frame; *p; p++) {     /* one byte at a time */
		raw_send(fd, p, 1);
		usleep(1000);
	}
	r = raw_recv(fd, RECV_MS);
	ck_assert_int_eq(jint(r, "id"), 1);
	json_decref(r);
	for (int i = 0; i < 40; i++) {             /* more than max_inflight, in one write */
		char one[128];

		snprintf(one, sizeof(one), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.status\"}\n", i);
		strcat(many, one);
	}
	raw_send_str(fd, many);
	for (int i = 0; i < 40; i++) {
		r = raw_recv(fd, RECV_MS);
		ck_assert_msg(r, "reply %d missing", i);
		ck_assert_int_eq(jint(r, "id"), i);
		json_decref(r);
	}
	close(fd);
}
END_TEST

START_TEST(oversize_frame_is_refused_and_closed)
{
	size_t n = 65536 + 100;
	char *big = malloc(n + 1);
	int fd = raw_connect(bad.sock);
	json_t *r;

	ck_assert_ptr_nonnull(big);
	memset(big, 'x', n);
	big[n] = '\0';
	raw_send(fd, big, n);                      /* no LF: refused while it arrives */
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "no FrameTooLarge reply");
	ck_assert_int_eq(error_code(r), 1301);
	ck_assert_str_eq(error_type(r), "FrameTooLarge");
	ck_assert(json_is_null(json_object_get(r, "id")));
	ck_assert_int_eq(jint(r, "error.data.limit"), 65536);
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
	free(big);
}
END_TEST

START_TEST(oversize_frame_with_its_lf_in_one_write)
{
	size_t n = 65536 + 1;
	char *big = malloc(n + 2);
	int fd = raw_connect(bad.sock);
	json_t *r;

	ck_assert_ptr_nonnull(big);
	memset(big, ' ', n);
	big[n] = '\n';
	raw_send(fd, big, n + 1);
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(error_type(r), "FrameTooLarge");
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
	free(big);
}
END_TEST

START_TEST(frame_at_the_limit_is_served)
{
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"pad\":\"";
	const char *tail = "\"}}";
	size_t n = 65536, pad = n - strlen(head) - strlen(tail);
	char *frame = malloc(n + 2);
	int fd = raw_connect(bad.sock);
	json_t *r;

	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'p', pad);
	strcpy(frame + strlen(head) + pad, tail);
	strcat(frame, "\n");
	ck_assert_uint_eq(strlen(frame), n + 1);
	raw_send_str(fd, frame);
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	/* Admitted whole: the answer is about its params, not its size. */
	ck_assert_str_eq(error_type(r), "InvalidParams");
	ck_assert_str_eq(jstr(r, "error.data.field"), "pad");
	json_decref(r);
	assert_alive(fd);
	close(fd);
	free(frame);
}
END_TEST

START_TEST(stalled_frame_times_out)
{
	int fd = raw_connect(bad.sock);
	json_t *r;

	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,");
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "no FrameTimeout reply");
	ck_assert_int_eq(error_code(r), 1304);
	ck_assert_str_eq(error_type(r), "FrameTimeout");
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
}
END_TEST

START_TEST(connection_limit)
{
	int fds[4], extra;
	json_t *r, *st;

	/* Wait until the harness's readiness probes are gone: ours is the only one. */
	fds[0] = raw_connect(bad.sock);
	for (int i = 0;; i++) {
		raw_send_str(fds[0], "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"daemon.status\"}\n");
		st = raw_recv(fds[0], RECV_MS);
		ck_assert_ptr_nonnull(st);
		if (jint(st, "result.connections.current") == 1) {
			json_decref(st);
			break;
		}
		json_decref(st);
		/* hang guard */
		ck_assert_msg(i < STATE_WAIT_MS / 10, "the readiness probes' connections never went away");
		usleep(10 * 1000);
	}
	for (int i = 1; i < 4; i++) {
		fds[i] = raw_connect(bad.sock);
		ck_assert_int_ge(fds[i], 0);
	}
	assert_alive(fds[3]);                      /* all four are accepted */
	extra = raw_connect(bad.sock);
	r = raw_recv(extra, RECV_MS);
	ck_assert_msg(r, "the fifth connection got no error");
	ck_assert_str_eq(error_type(r), "TooManyConnections");
	ck_assert_int_eq(jint(r, "error.data.limit"), 4);
	json_decref(r);
	ck_assert(raw_is_closed(extra, RECV_MS));
	close(extra);
	close(fds[0]);
	/* The close seen (polled: hang guard STATE_WAIT_MS). */
	for (int waited = 0;; waited += 20) {
		raw_send_str(fds[1], "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"}\n");
		st = raw_recv(fds[1], RECV_MS);
		ck_assert_ptr_nonnull(st);
		if (jint(st, "result.connections.current") == 3 || waited >= STATE_WAIT_MS)
			break;
		json_decref(st);
		usleep(20 * 1000);
	}
	ck_assert_int_eq(jint(st, "result.connections.rejected"), 1);
	ck_assert_int_eq(jint(st, "result.connections.current"), 3);
	json_decref(st);
	for (int i = 1; i < 4; i++)
		close(fds[i]);
}
END_TEST

START_TEST(replies_survive_a_half_close)
{
	int fd = raw_connect(bad.sock);
	json_t *r;

	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"}\n"
			 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"daemon.status\"}\n{\"unterminated");
	shutdown(fd, SHUT_WR);
	r = raw_recv(fd, RECV_MS);
	ck_assert_int_eq(jint(r, "id"), 1);
	json_decref(r);
	r = raw_recv(fd, RECV_MS);
	ck_assert_int_eq(jint(r, "id"), 2);
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
}
END_TEST

START_TEST(a_64_mib_file_frame_is_admitted_by_default)
{
	/* 64 MiB in base64 is 89,478,488 bytes: the default frame limit must take it. */
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"content_b64\":\"";
	size_t b64 = ((size_t)64 << 20) / 3 * 4 + 4;
	size_t n = strlen(head) + b64 + 4;
	char *frame = malloc(n + 1);
	int fd;
	json_t *r;

	msbd_start(&d, NULL);
	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'A', b64);
	strcpy(frame + strlen(head) + b64, "\"}}\n");
	fd = raw_connect(d.sock);
	raw_send(fd, frame, strlen(frame));
	r = raw_recv(fd, 60000);     /* hang guard */
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(error_type(r), "InvalidParams");
	ck_assert_str_eq(jstr(r, "error.data.field"), "content_b64");
	json_decref(r);
	close(fd);
	free(frame);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(spent_buffer_budget_pauses_reading)
{
	struct msbd_proc d = { 0 };
	char *part = malloc(40001);
	int a, b, c;
	json_t *r;

	msbd_start(&d, (const char *[]){ "--set", "limits.max_frame_bytes=65536",
					 "--set", "limits.buffer_budget_bytes=65536",
					 "--set", "limits.frame_timeout_ms=60000", NULL });
	ck_assert_ptr_nonnull(part);
	memset(part, ' ', 40000);
	part[40000] = '\0';
	a = raw_connect(d.sock);
	b = raw_connect(d.sock);
	c = raw_connect(d.sock);
	raw_send_str(a, part);                     /* 40000 + 40000 > 65536: spent */
	raw_send_str(b, part);
	ck_assert_msg(log_says(&d, "buffer budget of 65536 bytes spent"), "the buffer budget was never spent");
	raw_send_str(c, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"method\":\"daemon.describe\"}\n");
	/* A connection holding nothing is read all the same (issue 17: a
	 * fresh daemon.status is always answered). */
	r = raw_recv(c, RECV_MS);
	ck_assert_msg(r, "a connection holding nothing was not read while the buffer budget was spent");
	ck_assert_str_eq(jstr(r, "id"), "c");
	json_decref(r);
	/* b's partial frame is held, unread, until a's bytes are freed. */
	raw_send_str(b, "\n{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"daemon.describe\"}\n");
	assert_unread_after_turns(b, c, "a request was read while the buffer budget was spent");
	close(a);                                  /* frees its bytes: reading resumes */
	r = raw_recv(b, RECV_MS);
	ck_assert_msg(r, "reading did not resume once the budget was available");
	ck_assert_str_eq(jstr(r, "id"), "b");
	json_decref(r);
	close(b);
	close(c);
	free(part);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(held_frames_are_served_while_the_budget_is_spent)
{
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"daemon.describe\",\"params\":{\"pad\":\"";
	char *part = malloc(60001), *frame = malloc(8000);
	int a, b;
	json_t *r;

	msbd_start(&d, (const char *[]){ "--set", "limits.max_frame_bytes=65536",
					 "--set", "limits.buffer_budget_bytes=65536",
					 "--set", "limits.frame_timeout_ms=60000", NULL });
	ck_assert_ptr_nonnull(part);
	memset(part, ' ', 60000);
	part[60000] = '\0';
	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'p', 6000);
	strcpy(frame + strlen(head) + 6000, "\"}}\n");
	a = raw_connect(d.sock);
	b = raw_connect(d.sock);
	raw_send_str(a, part);                     /* 60000 held, half a frame */
	/* a's bytes read first (a is the oldest partial frame); polled, hang guard STATE_WAIT_MS. */
	for (int waited = 0; buffered_bytes(d.sock) < 60000; waited += 20) {
		ck_assert_msg(waited < STATE_WAIT_MS, "the daemon never read a's 60000 bytes");
		usleep(20 * 1000);
	}
	raw_send_str(b, frame);                    /* + ~6 KB complete: the budget is spent */
	/* Dispatching b's complete frame is what frees the budget: it must not
	 * wait for a's frame deadline (60 s). */
	r = raw_recv(b, RECV_MS);
	ck_assert_msg(r, "a complete frame was held while the budget was spent");
	ck_assert_str_eq(jstr(r, "id"), "b");
	json_decref(r);
	assert_alive(b);
	close(a);
	close(b);
	free(part);
	free(frame);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* A connection to sock made by uid (group nogroup), handed back: the daemon
 * knows its peer as uid (SO_PEERCRED is taken at connect). */
static int connect_as(const char *sock, uid_t uid)
{
	char byte = 0, cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int sp[2], status, fd = -1;
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int c;

		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(uid) < 0 || (c = raw_connect(sock)) < 0)
			_exit(1);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &c, sizeof(int));
		_exit(sendmsg(sp[1], &mh, 0) == 1 ? 0 : 2);
	}
	close(sp[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "cannot connect as uid %u", (unsigned)uid);
	ck_assert_int_eq(recvmsg(sp[0], &mh, 0), 1);
	cm = CMSG_FIRSTHDR(&mh);
	ck_assert_ptr_nonnull(cm);
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	close(sp[0]);
	return fd;
}

/* The frame deadline of budget_wait_is_not_on_the_frame_clock: the waiting
 * frame is finished past its own would-be deadline (not early), and before
 * the fresh one it gets when the stalled frame is cut: the test has about
 * this long to send its end once it saw that cut (a hang guard). */
#define BUDGET_FRAME_TIMEOUT_MS 4000      /* hang guard: the time to send after the cut */
#define BUDGET_NOT_EARLY_SLACK_MS 200     /* not early */

static long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A frame the daemon does not read because the budget went to an older
 * frame is not on the clock: when the stalled older one is cut, the waiting
 * one gets a fresh deadline and is served. The waiting frame's uid holds
 * less than its share of the budget (limits.uid_buffer_bytes): a uid over
 * its share keeps its deadlines (hostile: fair_frame_share). */
START_TEST(budget_wait_is_not_on_the_frame_clock)
{
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"daemon.describe\",\"params\":{\"pad\":\"";
	char *pad = malloc(60001), timeout_set[64];
	long a_began;
	int a, b;
	json_t *r;

	snprintf(timeout_set, sizeof(timeout_set), "limits.frame_timeout_ms=%d", BUDGET_FRAME_TIMEOUT_MS);
	msbd_start(&d, (const char *[]){ "--set", "limits.max_frame_bytes=131072",
					 "--set", "limits.buffer_budget_bytes=131072",
					 "--set", timeout_set,
					 "--set", "socket.group=nogroup", NULL });
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_ptr_nonnull(pad);
	memset(pad, 'p', 60000);
	pad[60000] = '\0';
	b = raw_connect(d.sock);
	a = connect_as(d.sock, 61001);
	raw_send_str(b, pad);                      /* b's frame began first: b is read */
	/* b's bytes read (polled, hang guard STATE_WAIT_MS): b is the older frame. */
	for (int waited = 0; buffered_bytes(d.sock) < 60000; waited += 20) {
		ck_assert_msg(waited < STATE_WAIT_MS, "the daemon never read b's 60000 bytes");
		usleep(20 * 1000);
	}
	raw_send_str(a, head);                     /* a's frame begins */
	/* a's clock starts when the daemon reads a's first bytes: a_began is
	 * taken once they are seen counted (polled, hang guard STATE_WAIT_MS),
	 * so it is no earlier than the daemon's start of a's frame. */
	for (int waited = 0; buffered_bytes(d.sock) < 60000 + (json_int_t)strlen(head); waited += 20) {
		/* hang guard */
		ck_assert_msg(waited < STATE_WAIT_MS, "the daemon never read a's first bytes");
		usleep(20 * 1000);
	}
	a_began = mono_ms();
	raw_send_str(a, pad);
	raw_send_str(a, pad);                      /* 180 KB held: spent; a waits for b */
	/* b stalls and is cut at its deadline: seen (RECV_MS + its deadline: hang guard). */
	r = raw_recv(b, BUDGET_FRAME_TIMEOUT_MS + RECV_MS);
	ck_assert_msg(r, "the stalled frame got no FrameTimeout");
	ck_assert_str_eq(error_type(r), "FrameTimeout");
	json_decref(r);
	/* not early: a's end comes past a's own would-be deadline, so a frame
	 * on the clock while it waited would be cut; the fresh deadline a got
	 * at b's cut is BUDGET_FRAME_TIMEOUT_MS away (hang guard). */
	while (mono_ms() < a_began + BUDGET_FRAME_TIMEOUT_MS + BUDGET_NOT_EARLY_SLACK_MS)
		usleep(10 * 1000);
	raw_send_str(a, "\"}}\n");
	r = raw_recv(a, RECV_MS);
	ck_assert_msg(r, "the frame that waited for the budget got no reply");
	ck_assert_msg(jget(r, "id") && json_is_string(jget(r, "id")), "the waiting frame was cut: %s",
		      jstr(r, "error.data.type"));
	ck_assert_str_eq(jstr(r, "id"), "a");      /* answered (describe takes no "pad") */
	json_decref(r);
	close(a);
	close(b);
	free(pad);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- the engine goes away and comes back ----------------------------- */

START_TEST(engine_down_at_start_then_recovers)
{
	struct msbd_proc d = { 0 };
	char host[160], link[100], *type = NULL, *out = NULL, *err = NULL;
	json_t *st, *desc, *eng;
	int code;

	msbd_prepare(&d);
	snprintf(link, sizeof(link), "%s/docker.sock", d.dir);
	snprintf(host, sizeof(host), "unix://%s", link);
	/* As a stopped engine leaves it: a socket file nobody listens on. */
	{
		struct sockaddr_un sun = { .sun_family = AF_UNIX };
		int dead = socket(AF_UNIX, SOCK_STREAM, 0);

		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", link);
		ck_assert_int_eq(bind(dead, (struct sockaddr *)&sun, sizeof(sun)), 0);
		close(dead);
	}
	msbd_start(&d, (const char *[]){ "--engine-host", host,
					 "--set", "engine.reconnect_min_ms=50",
					 "--set", "engine.reconnect_max_ms=200", NULL });
	st = wait_engine_state(d.sock, "unreachable", ENGINE_WAIT_MS);
	ck_assert(json_is_false(jget(st, "engine.reachable")));
	ck_assert_str_eq(jstr(st, "engine.endpoint"), host);
	ck_assert_str_eq(jstr(st, "engine.endpoint_source"), "engine.host");
	ck_assert_ptr_nonnull(jstr(st, "engine.last_error"));
	ck_assert(json_is_null(jget(st, "engine.version")));
	json_decref(st);
	/* Nothing was read, so nothing is claimed. */
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_uint_eq(json_array_size(jget(desc, "os_families")), 0);
	json_decref(desc);
	/* Calls that need the engine fail with EngineUnavailable. */
	eng = call(d.sock, "daemon.engine", NULL, &code, &type);
	ck_assert_ptr_null(eng);
	ck_assert_int_eq(code, 1000);
	ck_assert_str_eq(type, "EngineUnavailable");
	free(type);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "engine", NULL }, &out, &err), 1);
	ck_assert_msg(strstr(err, "EngineUnavailable"), "CLI error: %s", err);
	free(out), free(err);
	/* The engine appears at that path: the daemon recovers without a restart. */
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(symlink(engine_socket_path(), link), 0);
	st = wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS);
	ck_assert_str_eq(jstr(st, "engine.os"), "linux");
	json_decref(st);
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_str_eq(json_string_value(json_array_get(jget(desc, "os_families"), 0)), "posix");
	json_decref(desc);
	eng = call(d.sock, "daemon.engine", NULL, &code, NULL);
	ck_assert_int_eq(code, 0);
	ck_assert_str_eq(jstr(eng, "os"), "linux");
	json_decref(eng);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- the socket ------------------------------------------------------- */

START_TEST(socket_activation_serves_describe)
{
	struct msbd_proc d = { 0 };
	json_t *desc, *st;
	struct stat sb;

	msbd_prepare(&d);
	msbd_start_with(&d, (const char *[]){ "/usr/bin/systemd-socket-activate", "-l", d.sock, NULL },
			(const char *[]){ "--set", "socket.path=/nonexistent/ignored.sock", NULL }, false);
	/* systemd-socket-activate binds d.sock; the daemon starts on the first connection. */
	for (int i = 0; i < STATE_WAIT_MS / 20 && stat(d.sock, &sb) < 0; i++)     /* hang guard */
		usleep(20 * 1000);
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_str_eq(jstr(desc, "isolation"), "container");
	json_decref(desc);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_str_eq(jstr(st, "daemon.socket"), d.sock);
	json_decref(st);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* Runs a command through sh and returns its stdout+stderr and "exit=N". */
static char *sh(const char *cmd)
{
	char full[1024], *out = calloc(1, 8192);
	FILE *p;

	snprintf(full, sizeof(full), "%s 2>&1; echo \"exit=$?\"", cmd);
	p = popen(full, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_gt(fread(out, 1, 8191, p), 0);
	pclose(p);
	return out;
}

START_TEST(stale_socket_is_replaced_live_one_refused)
{
	struct msbd_proc d = { 0 };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct stat sb;
	char cmd[512], *out;
	json_t *st;

	msbd_prepare(&d);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", d.sock);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	close(fd);                                 /* a stale socket file stays behind */
	msbd_start(&d, NULL);
	ck_assert_int_eq(stat(d.sock, &sb), 0);
	ck_assert(S_ISSOCK(sb.st_mode));
	ck_assert_int_eq(sb.st_mode & 0777, 0660);
	/* A second daemon on the live socket refuses to start, and leaves it alone. */
	snprintf(cmd, sizeof(cmd), "%s --socket %s", getenv("MSB_DAEMON"), d.sock);
	out = sh(cmd);
	ck_assert_msg(strstr(out, "another running process") && strstr(out, "exit=1"),
		      "second daemon said: %s", out);
	free(out);
	st = call(d.sock, "daemon.status", NULL, NULL, NULL);
	ck_assert_ptr_nonnull(st);
	json_decref(st);
	/* A regular file where the socket should be is not replaced. */
	snprintf(cmd, sizeof(cmd), "touch %s/file.sock && %s --socket %s/file.sock", d.dir,
		 getenv("MSB_DAEMON"), d.dir);
	out = sh(cmd);
	ck_assert_msg(strstr(out, "not a socket") && strstr(out, "exit=1"), "daemon said: %s", out);
	free(out);
	/* Stopped, the daemon removes the socket it bound. */
	ck_assert_int_eq(msbd_stop_keep_dir(&d), 0);
	ck_assert_int_lt(stat(d.sock, &sb), 0);
	msbd_stop(&d);
}
END_TEST

START_TEST(socket_group_and_journal_log_prefixes)
{
	struct msbd_proc d = { 0 };
	struct group *gr = getgrnam("nogroup");
	struct stat sb;
	char cmd[256], *log;

	ck_assert_msg(gr, "this test needs the group nogroup");
	msbd_prepare(&d);
	ck_assert_int_eq(setenv("JOURNAL_STREAM", "8:12345", 1), 0);
	msbd_start(&d, (const char *[]){ "--set", "socket.group=nogroup", NULL });
	unsetenv("JOURNAL_STREAM");
	ck_assert_int_eq(stat(d.sock, &sb), 0);
	ck_assert_int_eq(sb.st_gid, gr->gr_gid);
	ck_assert_int_eq(sb.st_mode & 0777, 0660);
	ck_assert_int_eq(msbd_stop_keep_dir(&d), 0);
	snprintf(cmd, sizeof(cmd), "cat %s", d.log);
	log = sh(cmd);
	/* Under journald every line carries its priority: <6> info. */
	ck_assert_msg(strncmp(log, "<6>", 3) == 0 && strstr(log, "\n<6>listening on"), "log: %s", log);
	free(log);
	msbd_stop(&d);
}
END_TEST

START_TEST(check_config_prints_and_refuses)
{
	char cmd[512], *out;
	char dir[] = "/tmp/msb-conf-XXXXXX";
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "%s/good.conf", dir);
	f = fopen(cmd, "w");
	fputs("# test\nlimits.max_inflight = 5  # five\nsocket.path = /tmp/x.sock\n", f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s --check-config -f %s/good.conf", getenv("MSB_DAEMON"), dir);
	out = sh(cmd);
	ck_assert_msg(strstr(out, "limits.max_inflight = 5\n") && strstr(out, "exit=0"), "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "printf 'limits.max_inflight = lots\\n' > %s/bad.conf; "
		 "%s --check-config -f %s/bad.conf", dir, getenv("MSB_DAEMON"), dir);
	out = sh(cmd);
	ck_assert_msg(strstr(out, "bad.conf:1: limits.max_inflight") && strstr(out, "exit=1"), "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "%s --check-config --set no.such=1", getenv("MSB_DAEMON"));
	out = sh(cmd);
	ck_assert_msg(strstr(out, "unknown setting \"no.such\"") && strstr(out, "exit=1"), "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(unresolvable_endpoint_refuses_to_start)
{
	char cmd[512], *out;

	snprintf(cmd, sizeof(cmd), "%s --socket /tmp/msb-never.sock --engine-host ssh://user@host",
		 getenv("MSB_DAEMON"));
	out = sh(cmd);
	ck_assert_msg(strstr(out, "ssh://") && strstr(out, "exit=1"), "%s", out);
	free(out);
	snprintf(cmd, sizeof(cmd), "env -u DOCKER_HOST DOCKER_CONTEXT=no-such-context-xyz "
		 "HOME=/nonexistent %s --socket /tmp/msb-never.sock", getenv("MSB_DAEMON"));
	out = sh(cmd);
	ck_assert_msg(strstr(out, "no-such-context-xyz") && strstr(out, "exit=1"), "%s", out);
	free(out);
	ck_assert_int_ne(access("/tmp/msb-never.sock", F_OK), 0);
}
END_TEST

/* Every refusal start-up makes of a configuration, --check-config makes too
 * (startup.h), with the same message, labelled "error:" (never
 * "warning:"), exit status 1. Each row's daemon is refused before it
 * listens (timeout: a hang guard should one start serving). */
static const struct {
	const char *env;      /* prefix of the command: environment */
	const char *args;
	const char *expect;   /* in both messages */
} startup_refusals[] = {
	{ "", "--engine-host ssh://user@host", "ssh://" },
	{ "", "--set engine.host=fd://", "fd://" },
	{ "", "--set engine.host=npipe:////./pipe/docker_engine", "npipe://" },
	{ "", "--set engine.host=http://127.0.0.1:2375", "engine.host" },
	{ "env -u DOCKER_HOST DOCKER_CONTEXT=no-such-context-xyz HOME=/nonexistent ", "", "no-such-context-xyz" },
	{ "env DOCKER_HOST=ssh://a@b ", "", "DOCKER_HOST" },
	{ "", "--set engine.host=tcp://127.0.0.1:1 --set files.plane=local", "files.plane is local, but" },
	{ "", "--set freeze.lock_file=/etc/passwd/freeze.lock", "freeze.lock_file" },
	{ "", "--set sandbox.memory=1.5X", "sandbox.memory" },
	{ "", "--set reap.max_age_s=1500ms", "reap.max_age_s" },
};

START_TEST(check_config_refuses_what_start_up_refuses)
{
	char cmd[1024], *checked, *started;
	const char *msg;

	snprintf(cmd, sizeof(cmd), "%stimeout 60 %s --check-config --socket /tmp/msb-never.sock %s",
		 startup_refusals[_i].env, getenv("MSB_DAEMON"), startup_refusals[_i].args);
	checked = sh(cmd);
	snprintf(cmd, sizeof(cmd), "%stimeout 60 %s --socket /tmp/msb-never.sock %s",
		 startup_refusals[_i].env, getenv("MSB_DAEMON"), startup_refusals[_i].args);
	started = sh(cmd);
	ck_assert_msg(strstr(started, "exit=1") && strstr(started, startup_refusals[_i].expect),
		      "start-up with %s: %.300s", startup_refusals[_i].args, started);
	ck_assert_msg(strstr(checked, "exit=1") && strstr(checked, startup_refusals[_i].expect),
		      "--check-config with %s accepted what start-up refuses: %.300s",
		      startup_refusals[_i].args, checked);
	ck_assert_msg(strstr(started, "maf-sandboxd: error: ") && !strstr(started, "warning:"),
		      "start-up's refusal is not labelled error: %.300s", started);
	ck_assert_msg(strstr(checked, "maf-sandboxd: error: ") && !strstr(checked, "warning:"),
		      "--check-config's refusal is not labelled error: %.300s", checked);
	/* The same message, word for word. */
	msg = strstr(started, "error: ");
	ck_assert_msg(strncmp(strstr(checked, "error: "), msg, strcspn(msg, "\n")) == 0,
		      "messages differ:\n%.300s\n%.300s", checked, started);
	ck_assert_int_ne(access("/tmp/msb-never.sock", F_OK), 0);
	free(checked);
	free(started);
}
END_TEST

/* Capability refusals name the key that would lift them (issue 19), and
 * the CLI's --json prints them as one JSON object on stderr with the
 * daemon's code, type and data: an allowlist without egress.proxy_binary,
 * files_list on a daemon whose files.plane is archive. Both are refused
 * before anything is made. */
static const struct {
	const char *spec;
	int code;
	const char *type;
	const char *key;
} capability_refusals[] = {
	{ "{\"egress\":\"allowlist\",\"egress_allow\":[\"a.test\"]}", 1101, "SandboxEgressNotEnforced",
	  "egress.proxy_binary" },
	{ "{\"requires\":[\"files_list\"]}", 1100, "SandboxCapabilityNotSupported", "files.plane" },
};

START_TEST(capability_refusals_name_the_key)
{
	struct msbd_proc d = { 0 };
	char spec_path[256], *out = NULL, *err = NULL;
	json_t *e;
	FILE *f;

	/* This daemon serves the archive plane whatever plane the run is for
	 * (its own --set comes after the harness's; unset as well, so it holds
	 * whatever order the harness uses; Check runs each test in its own
	 * process). */
	unsetenv("MSB_FILE_PLANE");
	msbd_start(&d, (const char *[]){ "--set", "egress.proxy_binary=", "--set", "files.plane=archive", NULL });
	json_decref(wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS));
	snprintf(spec_path, sizeof(spec_path), "%s/spec.json", d.dir);
	f = fopen(spec_path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(capability_refusals[_i].spec, f);
	fclose(f);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "--json", "acquire", "--scope", "s",
						   "--thread", "t", "--agent", "a", "--kind", "k", "--image",
						   "msb-none:0", "--spec", spec_path, NULL }, &out, &err), 1);
	ck_assert_str_eq(out, "");
	e = json_loads(err, 0, NULL);
	ck_assert_msg(e, "stderr is not one JSON object: %s", err);
	ck_assert_int_eq(jint(e, "code"), capability_refusals[_i].code);
	ck_assert_str_eq(jstr(e, "type"), capability_refusals[_i].type);
	ck_assert_str_eq(jstr(e, "data.config_key"), capability_refusals[_i].key);
	ck_assert_msg(strstr(jstr(e, "message"), capability_refusals[_i].key), "the message does not name %s: %s",
		      capability_refusals[_i].key, jstr(e, "message"));
	json_decref(e);
	free(out), free(err);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- signals ---------------------------------------------------------- */

START_TEST(sighup_reloads_and_keeps_a_good_config)
{
	struct msbd_proc d = { 0 };
	char path[160], arg[200];
	json_t *desc;
	FILE *f;

	msbd_prepare(&d);
	snprintf(path, sizeof(path), "%s/maf.conf", d.dir);
	f = fopen(path, "w");
	fputs("limits.max_inflight = 4\n", f);
	fclose(f);
	snprintf(arg, sizeof(arg), "%s", path);
	msbd_start(&d, (const char *[]){ "-f", arg, NULL });
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_int_eq(jint(desc, "wire.max_inflight"), 4);
	json_decref(desc);
	f = fopen(path, "w");
	fputs("limits.max_inflight = 6\n", f);
	fclose(f);
	msbd_signal(&d, SIGHUP);
	for (int i = 0; i < STATE_WAIT_MS / 50; i++) {     /* hang guard */
		desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
		if (jint(desc, "wire.max_inflight") == 6)
			break;
		json_decref(desc);
		desc = NULL;
		usleep(50 * 1000);
	}
	ck_assert_msg(desc, "SIGHUP did not reload the configuration");
	json_decref(desc);
	f = fopen(path, "w");
	fputs("limits.max_inflight = not-a-number\n", f);
	fclose(f);
	msbd_signal(&d, SIGHUP);
	ck_assert_msg(log_says(&d, "keeping the old configuration"), "the bad configuration's reload was not refused");
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_int_eq(jint(desc, "wire.max_inflight"), 6);   /* the old one is kept */
	json_decref(desc);
	/* A configuration the next start would refuse (startup.h) is refused
	 * now: the log says so (watched, a hang guard), the old one is kept. */
	f = fopen(path, "w");
	fputs("limits.max_inflight = 8\nengine.host = ssh://user@host\n", f);
	fclose(f);
	msbd_signal(&d, SIGHUP);
	{
		char cmd[256], *log = NULL;
		bool said = false;

		snprintf(cmd, sizeof(cmd), "grep -c 'reload: cannot resolve the Docker endpoint: engine.host: ssh://' %s", d.log);
		for (int i = 0; i < STATE_WAIT_MS / 50 && !said; i++) {     /* hang guard */
			free(log);
			log = sh(cmd);
			said = strncmp(log, "1\n", 2) == 0;
			if (!said)
				usleep(50 * 1000);
		}
		ck_assert_msg(said, "the reload of an ssh:// engine.host was not refused: %s", log);
		free(log);
	}
	desc = call(d.sock, "daemon.describe", NULL, NULL, NULL);
	ck_assert_int_eq(jint(desc, "wire.max_inflight"), 6);
	json_decref(desc);
	ck_assert_int_eq(msbd_stop_keep_dir(&d), 0);
	{
		char cmd[256], *log;

		snprintf(cmd, sizeof(cmd), "cat %s", d.log);
		log = sh(cmd);
		ck_assert_msg(strstr(log, "keeping the old configuration"), "log: %s", log);
		free(log);
	}
	msbd_stop(&d);
}
END_TEST

START_TEST(sigterm_drains_and_exits_zero)
{
	struct msbd_proc d = { 0 };
	int fd;
	json_t *r;

	msbd_start(&d, NULL);
	json_decref(wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS));
	fd = raw_connect(d.sock);
	/* A request sent as SIGTERM lands gets an answer either way: its result
	 * if the daemon had started it, else ShuttingDown — never silence. */
	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.engine\"}\n");
	msbd_signal(&d, SIGTERM);
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "no reply to a request sent as SIGTERM landed");
	ck_assert_int_eq(jint(r, "id"), 1);
	ck_assert_msg(json_object_get(r, "result") || error_code(r) == 1303,
		      "neither a result nor ShuttingDown: %s", json_dumps(r, JSON_COMPACT));
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
	/* It exits by itself, with status 0, and removes its socket. */
	ck_assert_int_eq(msbd_wait(&d, 20000), 0);     /* hang guard */
	ck_assert_int_ne(access(d.sock, F_OK), 0);
	msbd_stop(&d);
}
END_TEST

/* ---- a slow engine: the real daemon against the fake engine ----------- */

#define SLOW_MS 3000

static const struct fake_reply slow_script[] = {
	{ .method = "GET", .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK",
	  .repeat = true },
	/* The daemon's probe gets its answer at once, every call after waits. */
	{ .method = "GET", .path = "/v1.41/version",
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\",\"Arch\":\"amd64\"}" },
	{ .method = "GET", .path = "/v1.41/version", .delay_ms = SLOW_MS, .repeat = true,
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\",\"Arch\":\"amd64\"}" },
};

/* Starts the daemon against the slow fake engine, with extra settings. */
static void start_slow(struct msbd_proc *d, const char *const *sets)
{
	char host[160];
	const char *args[24] = { "--engine-host", host };
	size_t n = 2;
	json_t *st;

	snprintf(host, sizeof(host), "unix://%s", fake_engine_start(slow_script, 3));
	for (; sets && *sets && n < 22; sets++) {
		args[n++] = "--set";
		args[n++] = *sets;
	}
	args[n] = NULL;
	msbd_start(d, args);
	st = wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS);
	ck_assert_str_eq(jstr(st, "engine.version"), "99.0.0-fake");
	json_decref(st);
}

static void stop_slow(struct msbd_proc *d)
{
	ck_assert_int_eq(msbd_stop(d), 0);
	fake_engine_cleanup();
}

static const char *const engine_call = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.engine\"}\n";

START_TEST(in_flight_back_pressure_is_not_a_frame_timeout)
{
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"daemon.status\",\"params\":{\"pad\":\"";
	size_t pad = 200000;
	char *frame = malloc(strlen(head) + pad + 8);
	int fd;
	json_t *r;

	start_slow(&d, (const char *[]){ "limits.max_inflight=1", "limits.frame_timeout_ms=500", NULL });
	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'p', pad);
	strcpy(frame + strlen(head) + pad, "\"}}\n");
	fd = raw_connect(d.sock);
	raw_send_str(fd, engine_call);
	raw_send_str(fd, frame);       /* held back while the slow call is in flight */
	r = raw_recv(fd, SLOW_MS + RECV_MS);
	ck_assert_msg(r && json_object_get(r, "result"), "no result for the slow call");
	ck_assert_int_eq(jint(r, "id"), 1);
	json_decref(r);
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(jint(r, "id"), 2);
	ck_assert_str_eq(error_type(r), "InvalidParams");   /* served, not timed out */
	json_decref(r);
	close(fd);
	free(frame);
	stop_slow(&d);
}
END_TEST

START_TEST(half_close_with_a_fragment_keeps_the_reply)
{
	struct msbd_proc d = { 0 };
	int fd;
	json_t *r;

	start_slow(&d, (const char *[]){ "limits.frame_timeout_ms=500", NULL });
	fd = raw_connect(d.sock);
	raw_send_str(fd, engine_call);
	raw_send_str(fd, "{\"jsonrpc\"");
	shutdown(fd, SHUT_WR);
	r = raw_recv(fd, SLOW_MS + RECV_MS);
	ck_assert_msg(r, "no reply after a half-close with a trailing fragment");
	ck_assert_int_eq(jint(r, "id"), 1);
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
	stop_slow(&d);
}
END_TEST

START_TEST(drain_deadline_answers_shutting_down)
{
	struct msbd_proc d = { 0 };
	int fd;
	json_t *r;

	start_slow(&d, (const char *[]){ "shutdown.drain_ms=300", "limits.max_inflight=1", NULL });
	fd = raw_connect(d.sock);
	raw_send_str(fd, engine_call);
	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"daemon.status\"}\n");
	/* The slow call is in flight (with our status: 2), polled (hang guard STATE_WAIT_MS). */
	for (int waited = 0;; waited += 20) {
		json_t *st = call(d.sock, "daemon.status", NULL, NULL, NULL);
		bool in = jint(st, "requests.in_flight") >= 2;

		json_decref(st);
		if (in)
			break;
		ck_assert_msg(waited < STATE_WAIT_MS, "the slow call never went in flight");
		usleep(20 * 1000);
	}
	msbd_signal(&d, SIGTERM);
	/* The request held back unread is refused at once... */
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(jint(r, "id"), 2);
	ck_assert_str_eq(error_type(r), "ShuttingDown");
	json_decref(r);
	/* ...and the call still in flight at the deadline is cancelled, with an
	 * answer (ShuttingDown, not the engine's late result: the code says it). */
	r = raw_recv(fd, RECV_MS);
	ck_assert_msg(r, "no answer for the call cancelled at the drain deadline");
	ck_assert_int_eq(jint(r, "id"), 1);
	ck_assert_int_eq(error_code(r), 1303);
	json_decref(r);
	ck_assert(raw_is_closed(fd, RECV_MS));
	close(fd);
	ck_assert_int_eq(msbd_wait(&d, 20000), 0);     /* hang guard */
	msbd_stop(&d);
	fake_engine_cleanup();
}
END_TEST

/* The engine reports linux at the probe, then windows: a cold acquire
 * re-reads the OS and refuses before it creates anything. */
static const struct fake_reply moved_script[] = {
	{ .method = "GET", .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK", .repeat = true },
	{ .method = "GET", .path = "/v1.41/version",
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\",\"Arch\":\"amd64\"}" },
	{ .method = "GET", .path = "/v1.41/containers/json", .body = "[]", .repeat = true },
	{ .method = "GET", .path = "/v1.41/events", .chunked = true, .stall = true, .body = "", .repeat = true },
	{ .method = "GET", .path = "/v1.41/containers/maf-sandbox-docker-", .status = 404,
	  .body = "{\"message\":\"No such container\"}", .repeat = true },
	{ .method = "GET", .path = "/v1.41/version", .repeat = true,
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"windows\",\"Arch\":\"amd64\"}" },
};

START_TEST(an_engine_that_moved_is_refused_on_a_cold_acquire)
{
	struct msbd_proc d = { 0 };
	char host[160], *type = NULL;
	json_t *st, *r;
	int code;

	snprintf(host, sizeof(host), "unix://%s", fake_engine_start(moved_script, 6));
	msbd_start(&d, (const char *[]){ "--engine-host", host, NULL });
	st = wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS);
	ck_assert_str_eq(jstr(st, "engine.os"), "linux");
	json_decref(st);
	r = call(d.sock, "sandbox.acquire", json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:s}}",
		 "key", "scope", "s", "thread_id", "t", "agent_dir", "a", "spec", "kind", "k", "image", "img"),
		 &code, &type);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(code, 1102);
	ck_assert_str_eq(type, "SandboxOsFamilyNotSupported");
	free(type);
	for (size_t i = 0; i < fake_engine_request_count(); i++)
		ck_assert_str_ne(fake_engine_request(i)->method, "POST");   /* nothing created */
	ck_assert_int_eq(msbd_stop(&d), 0);
	fake_engine_cleanup();
}
END_TEST

/* One failed listing of the registry is retried (not left until the events
 * stream happens to reconnect). */
static const struct fake_reply relist_script[] = {
	{ .method = "GET", .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK", .repeat = true },
	{ .method = "GET", .path = "/v1.41/version", .repeat = true,
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\"}" },
	{ .method = "GET", .path = "/v1.41/containers/json", .status = 500, .body = "{\"message\":\"busy\"}" },
	{ .method = "GET", .path = "/v1.41/containers/json", .body = "[]", .repeat = true },
	{ .method = "GET", .path = "/v1.41/events", .chunked = true, .stall = true, .body = "", .repeat = true },
};

START_TEST(a_failed_registry_listing_is_retried)
{
	struct msbd_proc d = { 0 };
	char host[160];
	json_t *r = NULL;
	int code = 0;

	snprintf(host, sizeof(host), "unix://%s", fake_engine_start(relist_script, 5));
	msbd_start(&d, (const char *[]){ "--engine-host", host, NULL });
	json_decref(wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS));
	for (int i = 0; i < STATE_WAIT_MS / 50 && !r; i++) {     /* hang guard */
		r = call(d.sock, "sandbox.list", NULL, &code, NULL);
		if (!r)
			usleep(50 * 1000);
	}
	ck_assert_msg(r, "the registry never synchronised after one failed listing (last error %d)", code);
	ck_assert_uint_eq(json_array_size(r), 0);
	json_decref(r);
	ck_assert_int_eq(msbd_stop(&d), 0);
	fake_engine_cleanup();
}
END_TEST

#define RACE_INSPECT_DELAY_MS 20000    /* hang guard (under the engine.timeout_ms default, 60 s) */
#define PROXY_ID "1111111111111111111111111111111111111111111111111111111111111111"

/* A disposal while an acquire of the same conversation is in flight: the
 * acquire may create after the sweep, so the sweep says "unknown"; a proxy
 * it removes is not counted as a sandbox. */
static const struct fake_reply race_script[] = {
	{ .method = "GET", .path = "/_ping", .headers = "Api-Version: 1.41\r\n", .body = "OK", .repeat = true },
	{ .method = "GET", .path = "/v1.41/version", .repeat = true,
	  .body = "{\"Version\":\"99.0.0-fake\",\"ApiVersion\":\"1.41\",\"Os\":\"linux\"}" },
	{ .method = "GET", .path = "/v1.41/containers/json", .repeat = true,
	  .body = "[{\"Id\":\"" PROXY_ID "\",\"Names\":[\"/maf-sandbox-docker-000000000000-proxy\"],"
		  "\"Labels\":{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\","
		  "\"maf-sandbox.agent\":\"a\",\"maf-sandbox.kind\":\"k\",\"maf-sandbox.role\":\"proxy\"},"
		  "\"State\":\"running\"}]" },
	{ .method = "GET", .path = "/v1.41/events", .chunked = true, .stall = true, .body = "", .repeat = true },
	{ .method = "DELETE", .path = "/v1.41/containers/" PROXY_ID, .status = 204, .repeat = true },
	/* hang guard: the acquire's inspect is held RACE_INSPECT_DELAY_MS, the
	 * window the dispose lands in (by observed order: the dispose is sent
	 * once the inspect is seen asked, and answered long before it ends). */
	{ .method = "GET", .path = "/v1.41/containers/maf-sandbox-docker-", .status = 404,
	  .delay_ms = RACE_INSPECT_DELAY_MS, .body = "{\"message\":\"No such container\"}", .repeat = true },
};

START_TEST(a_disposal_racing_an_acquire_says_unknown)
{
	struct msbd_proc d = { 0 };
	char host[160];
	json_t *r;
	int fd;

	snprintf(host, sizeof(host), "unix://%s", fake_engine_start(race_script, 6));
	msbd_start(&d, (const char *[]){ "--engine-host", host, NULL });
	json_decref(wait_engine_state(d.sock, "reachable", ENGINE_WAIT_MS));
	fd = raw_connect(d.sock);
	raw_send_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sandbox.acquire\",\"params\":"
		     "{\"key\":{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"},"
		     "\"spec\":{\"kind\":\"k\",\"image\":\"img\"}}}\n");
	/* The acquire is waiting on its slow inspect (the fake engine got it;
	 * polled, hang guard STATE_WAIT_MS). The dispose below lands while the
	 * inspect is held (RACE_INSPECT_DELAY_MS): the acquire's answer is read
	 * only after the dispose's, and must come after it. */
	for (int waited = 0;; waited += 10) {
		bool asked = false;

		for (size_t i = 0; i < fake_engine_request_count(); i++)
			asked |= strncmp(fake_engine_request(i)->path, "/v1.41/containers/maf-sandbox-docker-", 37) == 0;
		if (asked)
			break;
		ck_assert_msg(waited < STATE_WAIT_MS, "the acquire never inspected its container");
		usleep(10 * 1000);
	}
	r = call(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", "s", "thread_id", "t"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(jint(r, "disposed"), 0);            /* the proxy went, uncounted */
	ck_assert_str_eq(jstr(r, "undisposed.code"), "unknown");
	ck_assert_ptr_nonnull(strstr(jstr(r, "undisposed.detail"), "in flight"));
	json_decref(r);
	{
		bool deleted = false;

		for (size_t i = 0; i < fake_engine_request_count(); i++)
			if (strcmp(fake_engine_request(i)->method, "DELETE") == 0)
				deleted = true;
		ck_assert_msg(deleted, "the listed proxy was not removed");
	}
	/* The acquire's own answer, whatever it is, after the inspect's delay
	 * (hang guard). */
	json_decref(raw_recv(fd, RECV_MS + RACE_INSPECT_DELAY_MS));
	close(fd);
	ck_assert_int_eq(msbd_stop(&d), 0);
	fake_engine_cleanup();
}
END_TEST

/* ---- more limits -------------------------------------------------------- */

START_TEST(unread_replies_hit_the_write_timeout)
{
	struct msbd_proc d = { 0 };
	const char *req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\"}\n";
	int fd, other, rcvbuf = 4096;
	size_t sent = 0;
	bool closed = false;
	json_t *st = NULL;

	msbd_start(&d, (const char *[]){ "--set", "limits.write_timeout_ms=500", NULL });
	fd = raw_connect(d.sock);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	/* Ask for far more than the socket buffers hold, and never read: send
	 * until the daemon, which stops reading, closes the connection. */
	for (int i = 0; !closed && i < 100000; i++) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		ssize_t n = send(fd, req, strlen(req), MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		closed = n < 0 && errno != EAGAIN && errno != EINTR;
		/* The daemon stops reading, then closes the connection once a reply
		 * waits limits.write_timeout_ms unsent: send fails (EPIPE or
		 * ECONNRESET) and the loop ends. RECV_MS: a hang guard. */
		ck_assert_msg(closed || poll(&pfd, 1, RECV_MS) > 0, "the daemon neither read nor closed the connection");
	}
	ck_assert_msg(closed, "the daemon never closed the connection of a client that does not read");
	ck_assert_uint_gt(sent, 100000);
	other = raw_connect(d.sock);
	for (int i = 0; i < STATE_WAIT_MS / 100; i++) {     /* hang guard */
		json_decref(st);
		raw_send_str(other, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"daemon.status\"}\n");
		st = raw_recv(other, RECV_MS);
		ck_assert_ptr_nonnull(st);
		if (jint(st, "result.connections.current") == 1)
			break;
		usleep(100 * 1000);
	}
	ck_assert_msg(jint(st, "result.connections.current") == 1,
		      "a client that never reads kept its connection");
	json_decref(st);
	close(fd);
	close(other);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(reload_applies_the_frame_limit_to_open_connections)
{
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.describe\",\"params\":{\"pad\":\"";
	char path[160], *frame = malloc(200000);
	int fd;
	json_t *r;
	FILE *f;

	msbd_prepare(&d);
	snprintf(path, sizeof(path), "%s/maf.conf", d.dir);
	f = fopen(path, "w");
	fputs("limits.max_frame_bytes = 64K\n", f);
	fclose(f);
	msbd_start(&d, (const char *[]){ "-f", path, NULL });
	fd = raw_connect(d.sock);
	assert_alive(fd);
	f = fopen(path, "w");
	fputs("limits.max_frame_bytes = 256K\nlimits.buffer_budget_bytes = 1M\n", f);
	fclose(f);
	msbd_signal(&d, SIGHUP);
	for (int i = 0; i < STATE_WAIT_MS / 20; i++) {     /* hang guard */
		r = call(d.sock, "daemon.describe", NULL, NULL, NULL);
		if (jint(r, "wire.max_frame_bytes") == 256 * 1024) {
			json_decref(r);
			break;
		}
		json_decref(r);
		usleep(20 * 1000);
	}
	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'p', 100000);
	strcpy(frame + strlen(head) + 100000, "\"}}\n");
	raw_send_str(fd, frame);      /* over the old limit, under the new one */
	r = raw_recv(fd, RECV_MS);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(error_type(r), "InvalidParams");
	json_decref(r);
	close(fd);
	free(frame);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(concurrent_frames_over_the_budget_all_complete)
{
	struct msbd_proc d = { 0 };
	const char *head = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.describe\",\"params\":{\"pad\":\"";
	size_t pad = 60000, len, chunk = 4096;
	char *frame = malloc(pad + 256);
	int fds[3];

	msbd_start(&d, (const char *[]){ "--set", "limits.max_frame_bytes=65536",
					 "--set", "limits.buffer_budget_bytes=65536",
					 "--set", "limits.frame_timeout_ms=20000", NULL });
	ck_assert_ptr_nonnull(frame);
	strcpy(frame, head);
	memset(frame + strlen(head), 'p', pad);
	strcpy(frame + strlen(head) + pad, "\"}}\n");
	len = strlen(frame);
	for (int i = 0; i < 3; i++)
		fds[i] = raw_connect(d.sock);
	/* Interleaved: together they are far over the budget. */
	for (size_t off = 0; off < len; off += chunk)
		for (int i = 0; i < 3; i++) {
			raw_send(fds[i], frame + off, off + chunk < len ? chunk : len - off);
			usleep(2000);
		}
	for (int i = 0; i < 3; i++) {
		json_t *r = raw_recv(fds[i], RECV_MS);

		ck_assert_msg(r, "frame %d never completed while the budget was spent", i);
		ck_assert_str_eq(error_type(r), "InvalidParams");
		ck_assert_str_eq(jstr(r, "error.data.field"), "pad");
		json_decref(r);
		close(fds[i]);
	}
	free(frame);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* Collects sd_notify datagrams until one contains want, or timeout_ms (a
 * hang guard: every caller's bound is one). */
static bool notify_wait(int fd, const char *want, int timeout_ms, char *seen, size_t seen_size)
{
	for (int waited = 0; waited < timeout_ms; waited += 50) {
		char buf[4096];
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

		if (n > 0) {
			buf[n] = '\0';
			strncat(seen, buf, seen_size - strlen(seen) - 2);
			strcat(seen, "|");
			if (strstr(buf, want))
				return true;
			waited -= 50;
			continue;
		}
		usleep(50 * 1000);
	}
	return false;
}

START_TEST(sd_notify_ready_status_reloading_stopping)
{
	struct msbd_proc d = { 0 };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char seen[16384] = "";
	int fd;

	msbd_prepare(&d);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/notify", d.dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", sun.sun_path, 1), 0);
	msbd_start(&d, NULL);
	unsetenv("NOTIFY_SOCKET");
	ck_assert_msg(notify_wait(fd, "READY=1", 10000, seen, sizeof(seen)), "no READY=1: %s", seen);
	ck_assert_msg(notify_wait(fd, "STATUS=serving; engine reachable: Docker", 15000, seen, sizeof(seen)),
		      "no STATUS with the engine's state: %s", seen);
	msbd_signal(&d, SIGHUP);
	ck_assert_msg(notify_wait(fd, "RELOADING=1", 10000, seen, sizeof(seen)), "no RELOADING=1: %s", seen);
	ck_assert_msg(notify_wait(fd, "READY=1", 10000, seen, sizeof(seen)), "no READY=1 after reload: %s", seen);
	msbd_signal(&d, SIGTERM);
	ck_assert_msg(notify_wait(fd, "STOPPING=1", 10000, seen, sizeof(seen)), "no STOPPING=1: %s", seen);
	ck_assert_int_eq(msbd_wait(&d, 20000), 0);     /* hang guard */
	close(fd);
	msbd_stop(&d);
}
END_TEST

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *engine = tcase_create("engine");
	TCase *cli = tcase_create("cli");
	TCase *bad_input = tcase_create("bad_input");
	TCase *limits = tcase_create("limits");
	TCase *lifecycle = tcase_create("lifecycle");

	tcase_set_timeout(engine, 90);
	tcase_add_test(engine, describe_declares_the_docker_backend);
	tcase_add_test(engine, status_reports_the_negotiated_engine);
	tcase_add_test(engine, engine_down_at_start_then_recovers);
	tcase_set_timeout(cli, 60);
	tcase_add_test(cli, cli_describe_json_and_status);
	tcase_add_test(cli, cli_exit_codes);
	tcase_set_timeout(bad_input, 60);
	tcase_add_checked_fixture(bad_input, bad_setup, bad_teardown);
	tcase_add_loop_test(bad_input, bad_input_gets_an_error_and_the_connection_stays, 0,
			    sizeof(bad_rows) / sizeof(bad_rows[0]));
	tcase_add_test(bad_input, every_id_type_is_echoed);
	tcase_add_test(bad_input, notifications_and_blank_lines_get_no_reply);
	tcase_add_test(bad_input, split_and_pipelined_frames);
	tcase_add_test(bad_input, oversize_frame_is_refused_and_closed);
	tcase_add_test(bad_input, oversize_frame_with_its_lf_in_one_write);
	tcase_add_test(bad_input, frame_at_the_limit_is_served);
	tcase_add_test(bad_input, stalled_frame_times_out);
	tcase_add_test(bad_input, connection_limit);
	tcase_add_test(bad_input, replies_survive_a_half_close);
	tcase_set_timeout(limits, 180);
	tcase_add_test(limits, a_64_mib_file_frame_is_admitted_by_default);
	tcase_add_test(limits, spent_buffer_budget_pauses_reading);
	tcase_add_test(limits, held_frames_are_served_while_the_budget_is_spent);
	tcase_add_test(limits, budget_wait_is_not_on_the_frame_clock);
	tcase_set_timeout(lifecycle, 60);
	tcase_add_test(lifecycle, socket_activation_serves_describe);
	tcase_add_test(lifecycle, stale_socket_is_replaced_live_one_refused);
	tcase_add_test(lifecycle, check_config_prints_and_refuses);
	tcase_add_loop_test(lifecycle, check_config_refuses_what_start_up_refuses, 0,
			    sizeof(startup_refusals) / sizeof(startup_refusals[0]));
	tcase_add_loop_test(lifecycle, capability_refusals_name_the_key, 0,
			    sizeof(capability_refusals) / sizeof(capability_refusals[0]));
	tcase_add_test(lifecycle, socket_group_and_journal_log_prefixes);
	tcase_add_test(lifecycle, unresolvable_endpoint_refuses_to_start);
	tcase_add_test(lifecycle, sighup_reloads_and_keeps_a_good_config);
	tcase_add_test(lifecycle, sigterm_drains_and_exits_zero);
	tcase_add_test(lifecycle, sd_notify_ready_status_reloading_stopping);
	{
		TCase *slow = tcase_create("slow_engine");

		tcase_set_timeout(slow, 60);
		tcase_add_test(slow, in_flight_back_pressure_is_not_a_frame_timeout);
		tcase_add_test(slow, half_close_with_a_fragment_keeps_the_reply);
		tcase_add_test(slow, drain_deadline_answers_shutting_down);
		tcase_add_test(slow, an_engine_that_moved_is_refused_on_a_cold_acquire);
		tcase_add_test(slow, a_failed_registry_listing_is_retried);
		tcase_add_test(slow, a_disposal_racing_an_acquire_says_unknown);
		suite_add_tcase(s, slow);
	}
	tcase_add_test(limits, unread_replies_hit_the_write_timeout);
	tcase_add_test(limits, reload_applies_the_frame_limit_to_open_connections);
	tcase_add_test(limits, concurrent_frames_over_the_budget_all_complete);
	suite_add_tcase(s, engine);
	suite_add_tcase(s, cli);
	suite_add_tcase(s, bad_input);
	suite_add_tcase(s, limits);
	suite_add_tcase(s, lifecycle);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(daemon_suite());
	int failed;

	harness_run_dir_create();
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
