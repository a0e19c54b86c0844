/* check_exec.c — sandbox.exec through a real maf-sandboxd against the real
 * engine (behaviour-core §7.3 and PROTOCOL.md sandbox.exec): argv and
 * string commands, exit codes, quoting, the working directory, separate
 * streams, byte fidelity, timeouts and output limits that leave no process
 * behind, env, concurrency; and the CLI's exec verb.
 *
 * Test image: Debian's static busybox imported in main() (no registry).
 * Every container carries the spec label msb-it-run=<run>, and main()
 * removes all of them and the image at the end, whatever failed. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base64.h"
#include "harness.h"
#include "msb.h"

#define ENGINE_WAIT_MS 15000         /* hang guard: the engine reachable */
#define RUN_LABEL "msb-it-run"
/* The guest's storage base (spec work_dir null): the default working directory. */
#define GUEST_BASE "/maf-sandbox/work"
#define TEST_TIMEOUT_S 180            /* hang guard: Check's per-test timeout */
/* An exec's deadline in the tests that do not probe it, and the client's
 * wait for a reply (past any deadline sent): hang guards. */
#define EXEC_TIMEOUT_S 30             /* hang guard */
#define CLIENT_TIMEOUT_MS 60000       /* hang guard */
/* §7.3 a-timeout-raises-timeout-error: timeout 1 → TimeoutError, never
 * before the deadline (its end is the TimeoutError itself and the process
 * gone, not a time window). */
#define PROBE_TIMEOUT_S 1
/* The kill follows the answer (PROTOCOL.md: answered at the deadline, then
 * killed): the killed processes are waited for to leave the guest's process
 * table, up to this long. A hang guard, not a measure. */
#define KILL_GRACE_MS 30000
#define POLL_MS 100
/* The output-limit probe: a 64 KiB cap, 1 MiB printed. */
#define OUTPUT_CAP_BYTES (64 * 1024)
#define OUTPUT_PRINTED_BYTES (1024 * 1024)
/* The concurrency probe: execs at once, each its own connection and lines. */
#define CONCURRENT_EXECS 32
#define CONCURRENT_LINES 200
/* The same across sandboxes: one daemon, this many keys, the execs spread evenly. */
#define MULTI_SANDBOXES 8
#define MULTI_EXECS_PER_SANDBOX (CONCURRENT_EXECS / MULTI_SANDBOXES)
#define HOSTNAME_MAX 64
/* The default cap (exec.max_output_bytes) and a command printing more. */
#define DEFAULT_CAP_BYTES (8 * 1024 * 1024)
#define BIG_PRINTED_BYTES (10 * 1024 * 1024)
/* How far the daemon's peak resident set (VmHWM) may grow past the cap while
 * it refuses BIG_PRINTED_BYTES: see the test. */
#define HWM_SLACK_BYTES (24 * 1024 * 1024)
#define PROC_LINE_MAX 256
/* stream: true — the command prints, then waits for the test to open
 * STREAM_GATE (which the test does only once the first chunk reached it),
 * then prints again: the first chunk came while the command ran. */
#define STREAM_GATE "/tmp/msb-stream-gate"
#define STREAM_REQ_ID 41
/* The freeze probe: a files.write this large holds the freeze long enough to
 * be seen; the engine is polled every PAUSE_POLL_US, PAUSE_POLL_ROUNDS times
 * (a hang guard: the poll stops once the pause is seen). */
#define FREEZE_WRITE_BYTES (24 * 1024 * 1024)
#define FREEZE_REQ_ID 51
#define PAUSE_POLL_US 2000
#define PAUSE_POLL_ROUNDS 1500
/* The start race: rounds of a files.write, a sandbox.exec and a files.stat
 * sent at once on one sandbox, each on its own connection. */
#define RACE_ROUNDS 30
#define RACE_CALLS 3
/* Other suites' daemons on this host may hold the host freeze lock of this
 * sandbox for a moment (an orphan thaw of what they saw paused): a file
 * call then fails "held elsewhere", which PROTOCOL.md says to retry: every
 * RACE_HELD_RETRY_US, for as long as RACE_HELD_RETRY_MS (a hang guard; how
 * long the other holds it is not this test's). */
#define RACE_HELD_RETRY_MS 30000      /* hang guard */
#define RACE_HELD_RETRY_US (50 * 1000)
#define ERR_FREEZE_FAILED 1207
#define CLI_MAX_ARGS 24

#define ERR_INVALID_PARAMS (-32602)
#define ERR_NOT_A_DIRECTORY 1201
#define ERR_FILE_NOT_FOUND 1202
#define ERR_CANCELLED 1209
#define ERR_TRANSFER_CAP 1204
#define ERR_TIMEOUT 1205
#define ERR_OUTPUT_LIMIT 1208
#define ERR_SANDBOX_NOT_FOUND 1206
/* Exit statuses of the CLI's exec beside the command's own. */
#define CLI_EXEC_USAGE 2
#define CLI_EXEC_FAILED 125

static char run_id[32];
static char image[64];

/* ---- helpers ------------------------------------------------------------ */

struct env {
	struct msbd_proc d;
	char sandbox[80];
};

/* A daemon on e->d (args: more of its arguments, or NULL), its engine
 * reachable and its registry synchronised. */
static void daemon_up_with(struct env *e, const char *const *args)
{
	json_t *r = NULL;

	msbd_start(&e->d, args);
	json_decref(wait_engine_state(e->d.sock, "reachable", ENGINE_WAIT_MS));
	/* sandbox.list answers once the registry is synchronised (hang guard: 200 polls). */
	for (int i = 0; i < 200 && !r; i++) {
		r = call(e->d.sock, "sandbox.list", NULL, NULL, NULL);
		if (!r)
			usleep(50 * 1000);
	}
	ck_assert_msg(r, "the registry never synchronised");
	json_decref(r);
}

static void daemon_up(struct env *e)
{
	daemon_up_with(e, NULL);
}

/* The file plane this run's daemons serve (MSB_FILE_PLANE, tests/meson.build:
 * each suite runs on both): where the planes rightly differ (the archive
 * plane freezes the guest for a file call, the local plane never does), a
 * test asserts what its plane must do. */
static bool plane_local(void)
{
	const char *p = harness_file_plane();

	return p && strcmp(p, "local") == 0;
}

/* Acquires the sandbox of key {run_id-test, thread} into e->sandbox; the
 * sandbox is served by the plane the run asked for (a run meant for one
 * plane never passes on the other). */
static void env_acquire(struct env *e, const char *test, const char *thread)
{
	char scope[96];
	json_t *r;
	int code = 0;

	snprintf(scope, sizeof(scope), "%s-%s", run_id, test);
	r = call(e->d.sock, "sandbox.acquire",
		 json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:s, s:{s:s}}}",
			   "key", "scope", scope, "thread_id", thread, "agent_dir", "a",
			   "spec", "kind", "k", "image", image, "labels", RUN_LABEL, run_id),
		 &code, NULL);
	if (!r)
		msbd_dump_log(&e->d);
	ck_assert_msg(r, "sandbox.acquire failed: %d", code);
	if (harness_file_plane())
		ck_assert_msg(jstr(r, "file_plane") && strcmp(jstr(r, "file_plane"), harness_file_plane()) == 0,
			      "the sandbox is on the %s plane, the run asked for %s", jstr(r, "file_plane"),
			      harness_file_plane());
	snprintf(e->sandbox, sizeof(e->sandbox), "%s", jstr(r, "sandbox"));
	json_decref(r);
}

static void env_start(struct env *e, const char *test)
{
	daemon_up(e);
	env_acquire(e, test, "t");
}

static void env_stop(struct env *e)
{
	ck_assert_int_eq(msbd_stop(&e->d), 0);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* One call's outcome: the result, or the daemon's error (code, type,
 * data), or a client failure (code: a negative MSB_E_*). */
struct reply {
	json_t *result;
	int code;
	char type[64];
	json_t *data;
	long elapsed_ms;
	char *text;        /* the reply for messages (malloc'd) */
};

static void reply_clear(struct reply *rep)
{
	json_decref(rep->result);
	json_decref(rep->data);
	free(rep->text);
	memset(rep, 0, sizeof(*rep));
}

/* Calls method on its own connection; no Check assertion inside (threads use it). */
static void rpc(const char *sock, const char *method, json_t *params, struct reply *rep)
{
	struct msb_conn *c = NULL;
	long t0 = now_ms();
	int r;

	memset(rep, 0, sizeof(*rep));
	r = msb_connect(sock, &c);
	if (r != MSB_OK) {
		json_decref(params);
		rep->code = r;
		rep->text = strdup("cannot connect");
		return;
	}
	msb_set_timeout(c, CLIENT_TIMEOUT_MS);
	r = msb_call(c, method, params, &rep->result);
	rep->elapsed_ms = now_ms() - t0;
	if (r == MSB_E_REMOTE) {
		json_t *err;

		rep->code = msb_last_error_code(c);
		snprintf(rep->type, sizeof(rep->type), "%s",
			 msb_last_error_type(c) ? msb_last_error_type(c) : "");
		rep->data = json_incref(msb_last_error_data(c));
		err = json_pack("{s:i, s:s, s:s?, s:O?}", "code", rep->code, "type", rep->type,
				"message", msb_last_error_message(c), "data", rep->data);
		rep->text = json_dumps(err, JSON_COMPACT);
		json_decref(err);
	} else if (r != MSB_OK) {
		rep->code = r;
		rep->text = strdup(msb_strerror(r));
	} else {
		rep->text = json_dumps(rep->result, JSON_COMPACT | JSON_ENCODE_ANY);
	}
	msb_conn_free(c);
}

/* sandbox.exec with {sandbox} added to params (stolen); timeout_seconds
 * EXEC_TIMEOUT_S unless params names one; text: true (the text views, which
 * these tests read beside the bytes) unless params names it
 * (the_text_views_come_only_when_asked checks the default). */
static void exec_rpc(const struct env *e, json_t *params, struct reply *rep)
{
	if (!json_object_get(params, "text"))
		json_object_set_new(params, "text", json_true());
	json_object_set_new(params, "sandbox", json_string(e->sandbox));
	if (!json_object_get(params, "timeout_seconds"))
		json_object_set_new(params, "timeout_seconds", json_integer(EXEC_TIMEOUT_S));
	rpc(e->d.sock, "sandbox.exec", params, rep);
}

/* Runs command (stolen) and asserts a result, which it returns in rep. */
static void exec_ok(const struct env *e, json_t *command, struct reply *rep)
{
	exec_rpc(e, json_pack("{s:o}", "command", command), rep);
	ck_assert_msg(rep->result && rep->code == 0, "sandbox.exec failed: %s", rep->text);
}

#define ARGV(fmt, ...) json_pack("[" fmt "]", __VA_ARGS__)

/* The decoded bytes of the base64 member key (malloc'd, NUL added). */
static uint8_t *b64_get(json_t *r, const char *key, size_t *ret_len)
{
	json_t *v = json_object_get(r, key);
	uint8_t *raw = NULL, *buf;
	size_t len = 0;

	ck_assert_msg(json_is_string(v), "%s is not a string", key);
	ck_assert_msg(msb_base64_decode(json_string_value(v), json_string_length(v), &raw, &len) == 0,
		      "%s is not base64", key);
	buf = malloc(len + 1);
	memcpy(buf, raw, len);
	buf[len] = '\0';
	free(raw);
	*ret_len = len;
	return buf;
}

/* Asserts the result's stdout (or stderr) is want, in both views. */
static void assert_stream(json_t *r, const char *stream, const char *want)
{
	char b64_key[32], text_key[32];
	size_t len;
	uint8_t *got;

	snprintf(b64_key, sizeof(b64_key), "%s_b64", stream);
	snprintf(text_key, sizeof(text_key), "%s_text", stream);
	got = b64_get(r, b64_key, &len);
	ck_assert_msg(len == strlen(want) && memcmp(got, want, len) == 0, "%s is '%s', want '%s'",
		      b64_key, (char *)got, want);
	free(got);
	ck_assert_msg(jstr(r, text_key), "%s is not a string", text_key);
	ck_assert_str_eq(jstr(r, text_key), want);
}

/* The lines of the guest's `ps` that end with suffix (e.g. " sleep 30"). */
static int guest_procs(const struct env *e, const char *suffix)
{
	struct reply rep;
	size_t slen = strlen(suffix), len;
	char *out, *line, *save = NULL;
	int n = 0;

	exec_ok(e, ARGV("s", "ps"), &rep);
	out = (char *)b64_get(rep.result, "stdout_b64", &len);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t l = strlen(line);

		while (l > 0 && line[l - 1] == ' ')
			l--;
		n += l >= slen && memcmp(line + l - slen, suffix, slen) == 0;
	}
	free(out);
	reply_clear(&rep);
	return n;
}

/* Asserts that no guest process ends with suffix: waits for the kill that
 * follows the answer, polling the guest's process table. */
static void assert_no_survivor(const struct env *e, const char *suffix)
{
	long deadline = now_ms() + KILL_GRACE_MS;     /* hang guard */
	int n;

	while ((n = guest_procs(e, suffix)) > 0 && now_ms() < deadline)
		usleep(POLL_MS * 1000);
	ck_assert_msg(n == 0, "%d guest process(es) '...%s' survived the kill (after %d ms)", n,
		      suffix, KILL_GRACE_MS);
}

/* ---- §7.3 through the RPC ------------------------------------------------ */

START_TEST(an_argv_sequence_runs)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "argv");
	exec_ok(&e, ARGV("s, s", "printf", "ok-ran"), &rep);
	ck_assert_int_eq(jint(rep.result, "exit_code"), 0);
	assert_stream(rep.result, "stdout", "ok-ran");
	assert_stream(rep.result, "stderr", "");
	ck_assert_int_ge(jint(rep.result, "duration_ms"), 0);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(exit_code_fidelity)
{
	static const struct { const char *sh; int code; } rows[] = {
		{ "exit 7", 7 }, { "exit 0", 0 }, { "exit 255", 255 }, { "false", 1 },
		{ "no-such-binary-msb", 127 },      /* sh's own "not found": kept */
		{ "kill -9 $$", 137 },
	};
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "exitcode");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		exec_ok(&e, json_string(rows[i].sh), &rep);
		ck_assert_msg(jint(rep.result, "exit_code") == rows[i].code, "'%s': %s, want exit %d",
			      rows[i].sh, rep.text, rows[i].code);
		reply_clear(&rep);
	}
	/* An argv whose binary is not there: the runtime's 126 or 127, as a result. */
	exec_ok(&e, ARGV("s", "no-such-binary-msb"), &rep);
	ck_assert_msg(jint(rep.result, "exit_code") == 126 || jint(rep.result, "exit_code") == 127,
		      "missing binary: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(argv_is_quoted)
{
	static const char hostile[] = "a b$(echo injected)c";
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "quoted");
	exec_ok(&e, ARGV("s, s, s, s, s", "sh", "-c", "printf '%s' \"$1\"", "probe", hostile), &rep);
	ck_assert_int_eq(jint(rep.result, "exit_code"), 0);
	assert_stream(rep.result, "stdout", hostile);
	reply_clear(&rep);
	/* Nor is a lone argument split, globbed or expanded. */
	exec_ok(&e, ARGV("s, s, s", "printf", "%s", "'*' \"x\"  ; $HOME"), &rep);
	assert_stream(rep.result, "stdout", "'*' \"x\"  ; $HOME");
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(working_directory_is_honoured)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "wd");
	exec_ok(&e, ARGV("s", "pwd"), &rep);
	assert_stream(rep.result, "stdout", GUEST_BASE "\n");
	reply_clear(&rep);
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "."), &rep);
	ck_assert_msg(rep.result, "wd '.': %s", rep.text);
	assert_stream(rep.result, "stdout", GUEST_BASE "\n");
	reply_clear(&rep);
	/* A relative one, made by files.write first. */
	rpc(e.d.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", e.sandbox, "path",
					       "sub/.keep", "content_b64", ""), &rep);
	ck_assert_msg(rep.code == 0, "files.write: %s", rep.text);
	reply_clear(&rep);
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "sub"), &rep);
	ck_assert_msg(rep.result, "wd 'sub': %s", rep.text);
	assert_stream(rep.result, "stdout", GUEST_BASE "/sub\n");
	reply_clear(&rep);
	/* An absolute one. */
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "/tmp"), &rep);
	ck_assert_msg(rep.result, "wd '/tmp': %s", rep.text);
	assert_stream(rep.result, "stdout", "/tmp\n");
	reply_clear(&rep);
	/* Climbing out of the work dir is refused. */
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "../.."), &rep);
	ck_assert_msg(!rep.result && !strcmp(rep.type, "ConfinementError"), "wd '../..': %s", rep.text);
	reply_clear(&rep);
	/* One that is not there: FileNotFoundError naming it, not the runtime's exit 126. */
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "no-such-dir"),
		 &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_FILE_NOT_FOUND && !strcmp(rep.type, "FileNotFoundError"),
		      "wd 'no-such-dir': %s", rep.text);
	ck_assert_str_eq(json_string_value(json_object_get(rep.data, "path")), GUEST_BASE "/no-such-dir");
	ck_assert_str_eq(json_string_value(json_object_get(rep.data, "field")), "working_directory");
	ck_assert_msg(strstr(rep.text, GUEST_BASE "/no-such-dir"), "the message names no path: %s", rep.text);
	reply_clear(&rep);
	/* A file where the directory should be: NotADirectoryError. */
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "pwd", "working_directory", "sub/.keep"), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_NOT_A_DIRECTORY && !strcmp(rep.type, "NotADirectoryError"),
		      "wd 'sub/.keep': %s", rep.text);
	ck_assert_str_eq(json_string_value(json_object_get(rep.data, "path")), GUEST_BASE "/sub/.keep");
	reply_clear(&rep);
	/* A guest that prints the runtime's text itself and exits 126 in a
	 * directory that is there: its own result, kept. */
	exec_rpc(&e, json_pack("{s:s}", "command",
			       "echo 'OCI runtime exec failed: exec failed: unable to start container process: "
			       "chdir to cwd (\"/x\") set in config.json failed: no such file or directory: unknown'; "
			       "exit 126"), &rep);
	ck_assert_msg(rep.result && jint(rep.result, "exit_code") == 126, "the guest's own 126: %s", rep.text);
	ck_assert_msg(strstr(jstr(rep.result, "stdout_text"), "chdir to cwd"), "its stdout: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(streams_stay_separate)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "streams");
	exec_ok(&e, json_string("printf out; printf err >&2; printf more; printf ERR >&2"), &rep);
	ck_assert_int_eq(jint(rep.result, "exit_code"), 0);
	assert_stream(rep.result, "stdout", "outmore");
	assert_stream(rep.result, "stderr", "errERR");
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(exec_byte_fidelity)
{
	static const uint8_t want[] = { 0xff, 0xfe, 0x00, 'x' };
	/* Each invalid byte → U+FFFD, and the NUL too: the daemon keeps \u0000
	 * out of the text views (m_exec.c: JSON parsers commonly refuse it). */
	static const char want_text[] = "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx";
	struct env e = { 0 };
	struct reply rep;
	uint8_t *got;
	size_t len;
	json_t *text;

	env_start(&e, "bytes");
	exec_ok(&e, json_string("printf '\\377\\376\\000x'; printf '\\377e' >&2"), &rep);
	got = b64_get(rep.result, "stdout_b64", &len);
	ck_assert_msg(len == sizeof(want) && memcmp(got, want, len) == 0, "stdout_b64: %s", rep.text);
	free(got);
	got = b64_get(rep.result, "stderr_b64", &len);
	ck_assert_msg(len == 2 && got[0] == 0xff && got[1] == 'e', "stderr_b64: %s", rep.text);
	free(got);
	text = json_object_get(rep.result, "stdout_text");
	ck_assert_msg(json_is_string(text) && json_string_length(text) == sizeof(want_text) - 1 &&
		      memcmp(json_string_value(text), want_text, sizeof(want_text) - 1) == 0,
		      "stdout_text: %s", rep.text);
	ck_assert_str_eq(jstr(rep.result, "stderr_text"), "\xef\xbf\xbd" "e");
	reply_clear(&rep);
	/* Every byte value, in order. */
	exec_ok(&e, json_string("i=0; while [ $i -lt 256 ]; do printf \"\\\\$(printf %o $i)\"; "
				"i=$((i+1)); done"), &rep);
	got = b64_get(rep.result, "stdout_b64", &len);
	ck_assert_msg(len == 256, "256 bytes: %s", rep.text);
	for (size_t i = 0; i < 256; i++)
		ck_assert_msg(got[i] == i, "byte %zu is %u", i, got[i]);
	free(got);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(a_timeout_raises_timeout_error)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "timeout");
	exec_rpc(&e, json_pack("{s:[s, s], s:i}", "command", "sleep", "30", "timeout_seconds",
			       PROBE_TIMEOUT_S), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_TIMEOUT && !strcmp(rep.type, "TimeoutError"),
		      "sleep 30 with timeout 1: %s", rep.text);
	/* not early: the deadline is not fired before it (the client's clock
	 * starts before the daemon's: the elapsed time is at least the deadline). */
	ck_assert_msg(rep.elapsed_ms >= PROBE_TIMEOUT_S * 1000L, "TimeoutError after %ld ms, before the %d s deadline",
		      rep.elapsed_ms, PROBE_TIMEOUT_S);
	reply_clear(&rep);
	/* The sandbox stays: the next exec works, and nothing of the first is left. */
	exec_ok(&e, ARGV("s, s", "printf", "after"), &rep);
	assert_stream(rep.result, "stdout", "after");
	reply_clear(&rep);
	assert_no_survivor(&e, " sleep 30");
	/* Control: a process started beside the daemon (by the engine) is seen. */
	free(sh_out("docker exec -d %s sleep 29", e.sandbox));
	ck_assert_int_eq(guest_procs(&e, " sleep 29"), 1);
	env_stop(&e);
}
END_TEST

/* A command that ignores SIGTERM and leaves a grandchild in the background. */
START_TEST(a_timeout_kills_what_ignores_term_and_its_children)
{
	struct env e = { 0 };
	struct reply rep;

	char *order;

	daemon_up_with(&e, (const char *const[]){ "--debug", NULL });     /* the kill's line is a debug one */
	env_acquire(&e, "trap", "t");
	exec_rpc(&e, json_pack("{s:[s, s, s], s:i}", "command", "sh", "-c",
			       "trap '' TERM; sleep 300 & sleep 300", "timeout_seconds", PROBE_TIMEOUT_S),
		 &rep);
	/* Answered, without waiting for the command (it would sleep 300 s,
	 * past the client's CLIENT_TIMEOUT_MS: a hang guard). */
	ck_assert_msg(!rep.result && rep.code == ERR_TIMEOUT, "trap TERM with timeout 1: %s", rep.text);
	reply_clear(&rep);
	/* Answered at the deadline, then killed: the daemon's lines say so in
	 * that order (the timeout's, written as the TimeoutError is sent, then
	 * the kill's, with what it killed). The kill's line awaited (hang guard:
	 * CLIENT_TIMEOUT_MS). */
	for (long t0 = now_ms();; usleep(50 * 1000)) {
		order = sh_out("grep -o -e 'exec in sandbox %.12s timed out after' -e 'exec in %.12s: [0-9]* processes killed "
			       "from the host' %s | sed -e 's/.*timed out after/timed out/' -e 's/.*: \\([0-9]*\\) "
			       "processes killed.*/killed \\1/' | tr '\\n' ' '", e.sandbox, e.sandbox, e.d.log);
		if (strstr(order, "killed "))
			break;
		/* hang guard */
		ck_assert_msg(now_ms() - t0 < CLIENT_TIMEOUT_MS, "the daemon never logged the kill: %s", order);
		free(order);
	}
	ck_assert_msg(strncmp(order, "timed out killed ", 17) == 0 && atoi(order + 17) >= 1,
		      "the daemon's lines: not the timeout, then a kill of the command: %s", order);
	free(order);
	/* Both sleeps and the sh (its argv ends "sleep 300" too). */
	assert_no_survivor(&e, "sleep 300");
	env_stop(&e);
}
END_TEST

START_TEST(output_over_the_cap_is_refused_and_killed)
{
	char cmd[128];
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "outcap");
	snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero; sleep 300", OUTPUT_PRINTED_BYTES);
	exec_rpc(&e, json_pack("{s:s, s:i, s:i}", "command", cmd, "max_output_bytes", OUTPUT_CAP_BYTES,
			       "timeout_seconds", EXEC_TIMEOUT_S), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_OUTPUT_LIMIT &&
		      !strcmp(rep.type, "SandboxExecOutputLimitExceeded"), "1 MiB over a 64 KiB cap: %s",
		      rep.text);
	ck_assert_msg(json_integer_value(json_object_get(rep.data, "limit")) == OUTPUT_CAP_BYTES,
		      "data.limit: %s", rep.text);
	reply_clear(&rep);
	assert_no_survivor(&e, "sleep 300");
	/* Stderr counts too; at the cap exactly is a result. */
	snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero >&2", OUTPUT_CAP_BYTES + 1);
	exec_rpc(&e, json_pack("{s:s, s:i}", "command", cmd, "max_output_bytes", OUTPUT_CAP_BYTES), &rep);
	ck_assert_msg(rep.code == ERR_OUTPUT_LIMIT, "cap + 1 on stderr: %s", rep.text);
	reply_clear(&rep);
	snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero; head -c %d /dev/zero >&2",
		 OUTPUT_CAP_BYTES / 2, OUTPUT_CAP_BYTES / 2);
	exec_rpc(&e, json_pack("{s:s, s:i}", "command", cmd, "max_output_bytes", OUTPUT_CAP_BYTES), &rep);
	ck_assert_msg(rep.result && jint(rep.result, "exit_code") == 0, "at the cap: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

/* Each output byte is in the reply once: in base64. The text views come
 * only with text: true; text: false is the default; text must be a bool. */
START_TEST(the_text_views_come_only_when_asked)
{
	static const char *const want_keys[] = { "exit_code", "stdout_b64", "stderr_b64", "duration_ms" };
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "textopt");
	for (int asked = 0; asked < 2; asked++) {
		json_t *params = json_pack("{s:s, s:s, s:i}", "sandbox", e.sandbox, "command",
					   "printf 'ok\\377'; printf e >&2", "timeout_seconds", EXEC_TIMEOUT_S);

		/* asked 0: no text member (by hand: exec_rpc would add one); 1: text: false. */
		if (asked)
			json_object_set_new(params, "text", json_false());
		rpc(e.d.sock, "sandbox.exec", params, &rep);
		ck_assert_msg(rep.result && rep.code == 0, "sandbox.exec failed: %s", rep.text);
		ck_assert_msg(json_object_size(rep.result) == 4, "text %s: not exactly 4 members: %s",
			      asked ? "false" : "absent", rep.text);
		for (size_t i = 0; i < sizeof(want_keys) / sizeof(want_keys[0]); i++)
			ck_assert_msg(json_object_get(rep.result, want_keys[i]), "no %s: %s", want_keys[i], rep.text);
		ck_assert_str_eq(jstr(rep.result, "stdout_b64"), "b2v/");
		ck_assert_str_eq(jstr(rep.result, "stderr_b64"), "ZQ==");
		reply_clear(&rep);
	}
	exec_rpc(&e, json_pack("{s:s, s:b}", "command", "printf 'ok\\377'", "text", 1), &rep);
	ck_assert_msg(rep.result, "text true: %s", rep.text);
	ck_assert_str_eq(jstr(rep.result, "stdout_text"), "ok\xef\xbf\xbd");
	ck_assert_str_eq(jstr(rep.result, "stderr_text"), "");
	reply_clear(&rep);
	exec_rpc(&e, json_pack("{s:s, s:s}", "command", "true", "text", "yes"), &rep);
	ck_assert_msg(!rep.result && rep.code == -32602, "text \"yes\": %s", rep.text);
	ck_assert_str_eq(jstr(rep.data, "field"), "text");
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(env_is_visible)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "env");
	exec_rpc(&e, json_pack("{s:[s, s, s], s:{s:s, s:s}}", "command", "sh", "-c",
			       "printf '%s|%s' \"$FOO\" \"$_B2\"", "env", "FOO", "bar", "_B2", "x y=$z"),
		 &rep);
	ck_assert_msg(rep.result, "env: %s", rep.text);
	assert_stream(rep.result, "stdout", "bar|x y=$z");
	reply_clear(&rep);
	/* The call's mark is there, the daemon's own. */
	exec_ok(&e, json_string("printf %s \"$MSB_EXEC_ID\""), &rep);
	ck_assert_msg(strlen(jstr(rep.result, "stdout_text")) > 0, "no MSB_EXEC_ID: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

/* Params the daemon refuses with InvalidParams, before running anything. */
START_TEST(invalid_params_are_refused)
{
	static const char *const rows[] = {
		"{\"command\": \"true\", \"env\": {\"1BAD\": \"x\"}}",
		"{\"command\": \"true\", \"env\": {\"A-B\": \"x\"}}",
		"{\"command\": \"true\", \"env\": {\"\": \"x\"}}",
		"{\"command\": \"true\", \"env\": {\"A=B\": \"x\"}}",
		"{\"command\": \"true\", \"env\": {\"FOO\": 1}}",
		"{\"command\": \"true\", \"env\": [\"FOO=bar\"]}",
		"{\"command\": []}",
		"{\"command\": [\"true\", 1]}",
		"{\"command\": 5}",
		"{\"command\": \"true\", \"timeout_seconds\": 0}",
		"{\"command\": \"true\", \"timeout_seconds\": -1}",
		"{\"command\": \"true\", \"timeout_seconds\": 86401}",
		"{\"command\": \"true\", \"timeout_seconds\": \"5\"}",
		"{\"command\": \"true\", \"max_output_bytes\": -1}",
		"{\"command\": \"true\", \"working_directory\": 7}",
	};
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "invalid");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		json_t *params = json_loads(rows[i], 0, NULL);

		ck_assert_ptr_nonnull(params);
		exec_rpc(&e, params, &rep);
		ck_assert_msg(rep.code == ERR_INVALID_PARAMS, "%s: %s", rows[i], rep.text);
		reply_clear(&rep);
	}
	/* No timeout_seconds at all (exec_rpc would add one). */
	rpc(e.d.sock, "sandbox.exec", json_pack("{s:s, s:s}", "sandbox", e.sandbox, "command", "true"),
	    &rep);
	ck_assert_msg(rep.code == ERR_INVALID_PARAMS, "no timeout_seconds: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

/* A sandbox id that names nothing, and one that is no id; the daemon lives on. */
START_TEST(unknown_sandbox_is_refused)
{
	struct env e = { 0 };
	struct reply rep;

	env_start(&e, "nosandbox");
	rpc(e.d.sock, "sandbox.exec", json_pack("{s:s, s:[s], s:i, s:s}", "sandbox",
						"0000000000000000000000000000000000000000000000000000000000000000",
						"command", "true", "timeout_seconds", EXEC_TIMEOUT_S,
						"working_directory", "sub"), &rep);
	ck_assert_msg(rep.code == ERR_SANDBOX_NOT_FOUND, "unknown sandbox: %s", rep.text);
	reply_clear(&rep);
	rpc(e.d.sock, "sandbox.exec", json_pack("{s:s, s:[s], s:i}", "sandbox", "abc", "command", "true",
						"timeout_seconds", EXEC_TIMEOUT_S), &rep);
	ck_assert_msg(rep.code == ERR_INVALID_PARAMS, "sandbox 'abc': %s", rep.text);
	reply_clear(&rep);
	exec_ok(&e, ARGV("s, s", "printf", "alive"), &rep);
	assert_stream(rep.result, "stdout", "alive");
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

struct worker {
	const struct env *e;
	int n;
	struct reply rep;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	char tag[8], lines[16];

	snprintf(tag, sizeof(tag), "%02d", w->n);
	snprintf(lines, sizeof(lines), "%d", CONCURRENT_LINES);
	exec_rpc(w->e, json_pack("{s:[s, s, s, s, s, s]}", "command", "sh", "-c",
				 "i=0; while [ $i -lt $2 ]; do printf 'T%s-line-%03d\\n' \"$1\" $i; "
				 "i=$((i+1)); done; printf 'E%s' \"$1\" >&2", "probe", tag, lines),
		 &w->rep);
	return NULL;
}

/* Asserts w's reply holds its own CONCURRENT_LINES lines and want_err. */
static void assert_worker_output(struct worker *w, const char *want_err)
{
	static char want[CONCURRENT_LINES * 32];
	char line[32];

	ck_assert_msg(w->rep.result, "exec %d: %s", w->n, w->rep.text);
	ck_assert_int_eq(jint(w->rep.result, "exit_code"), 0);
	want[0] = '\0';
	for (int k = 0; k < CONCURRENT_LINES; k++) {
		snprintf(line, sizeof(line), "T%02d-line-%03d\n", w->n, k);
		strcat(want, line);
	}
	assert_stream(w->rep.result, "stdout", want);
	assert_stream(w->rep.result, "stderr", want_err);
}

START_TEST(concurrent_execs_keep_their_own_output)
{
	static struct worker w[CONCURRENT_EXECS];
	struct env e = { 0 };
	pthread_t th[CONCURRENT_EXECS];
	char err[8];

	env_start(&e, "concurrent");
	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		w[i] = (struct worker){ .e = &e, .n = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
	}
	for (int i = 0; i < CONCURRENT_EXECS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		snprintf(err, sizeof(err), "E%02d", i);
		assert_worker_output(&w[i], err);
		reply_clear(&w[i].rep);
	}
	env_stop(&e);
}
END_TEST

/* ---- across sandboxes, big output, streaming, the freeze ------------------ */

/* The guest's hostname of e's sandbox (its own per container). */
static void guest_hostname(const struct env *e, char out[HOSTNAME_MAX])
{
	struct reply rep;
	const char *h;

	exec_ok(e, ARGV("s", "hostname"), &rep);
	h = jstr(rep.result, "stdout_text");
	ck_assert_msg(h && *h, "hostname: %s", rep.text);
	snprintf(out, HOSTNAME_MAX, "%.*s", (int)strcspn(h, "\n"), h);
	reply_clear(&rep);
}

/* Like worker_run, and its stderr names the guest it ran in. */
static void *multi_worker_run(void *arg)
{
	struct worker *w = arg;
	char tag[8], lines[16];

	snprintf(tag, sizeof(tag), "%02d", w->n);
	snprintf(lines, sizeof(lines), "%d", CONCURRENT_LINES);
	exec_rpc(w->e, json_pack("{s:[s, s, s, s, s, s]}", "command", "sh", "-c",
				 "i=0; while [ $i -lt $2 ]; do printf 'T%s-line-%03d\\n' \"$1\" $i; "
				 "i=$((i+1)); done; printf 'E%s@%s' \"$1\" \"$(hostname)\" >&2", "probe", tag,
				 lines),
		 &w->rep);
	return NULL;
}

START_TEST(concurrent_execs_across_eight_sandboxes)
{
	static struct worker w[CONCURRENT_EXECS];
	struct env e[MULTI_SANDBOXES] = { 0 };
	char host[MULTI_SANDBOXES][HOSTNAME_MAX], thread[16], err[8 + HOSTNAME_MAX];
	pthread_t th[CONCURRENT_EXECS];

	daemon_up(&e[0]);
	for (int s = 0; s < MULTI_SANDBOXES; s++) {
		/* One daemon, eight keys: the same scope, a thread id each. */
		e[s].d = e[0].d;
		snprintf(thread, sizeof(thread), "t%d", s);
		env_acquire(&e[s], "multi", thread);
		guest_hostname(&e[s], host[s]);
		for (int k = 0; k < s; k++) {
			ck_assert_str_ne(e[k].sandbox, e[s].sandbox);
			ck_assert_str_ne(host[k], host[s]);
		}
	}
	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		w[i] = (struct worker){ .e = &e[i % MULTI_SANDBOXES], .n = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, multi_worker_run, &w[i]), 0);
	}
	for (int i = 0; i < CONCURRENT_EXECS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < CONCURRENT_EXECS; i++) {
		snprintf(err, sizeof(err), "E%02d@%s", i, host[i % MULTI_SANDBOXES]);
		assert_worker_output(&w[i], err);
		reply_clear(&w[i].rep);
	}
	env_stop(&e[0]);
}
END_TEST

/* The daemon's peak resident set so far (VmHWM), in bytes. */
static long vm_hwm_bytes(pid_t pid)
{
	char path[64], line[PROC_LINE_MAX];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	ck_assert_msg(f, "open %s: %s", path, strerror(errno));
	while (kib < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) != 1)
			kib = -1;
	fclose(f);
	ck_assert_msg(kib >= 0, "%s has no VmHWM", path);
	return kib * 1024;
}

/* No max_output_bytes: the daemon's default cap holds, and so does its
 * memory. Its peak may grow by the cap (the output it holds, never more)
 * plus HWM_SLACK_BYTES: room for a second copy of the cap while a growing
 * buffer is reallocated (8 MiB), for the base64 of the cap (4/3 of it,
 * ~11 MiB) should any path encode what it held, and for the HTTP stream's
 * buffers in flight (a few MiB) — with the allocator keeping what it freed.
 * A daemon that read all 10 MiB and encoded it (10 + 13.3 + copies) goes
 * past it. */
START_TEST(ten_mib_over_the_default_cap_is_refused_with_bounded_memory)
{
	char cmd[64], suffix[64];
	struct env e = { 0 };
	struct reply rep;
	long before, after;

	env_start(&e, "bigout");
	exec_ok(&e, ARGV("s", "true"), &rep);      /* the exec path warmed up */
	reply_clear(&rep);
	before = vm_hwm_bytes(e.d.pid);
	snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero", BIG_PRINTED_BYTES);
	exec_rpc(&e, json_pack("{s:s}", "command", cmd), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_OUTPUT_LIMIT &&
		      !strcmp(rep.type, "SandboxExecOutputLimitExceeded"), "10 MiB, default cap: %s", rep.text);
	ck_assert_msg(json_integer_value(json_object_get(rep.data, "limit")) == DEFAULT_CAP_BYTES,
		      "data.limit: %s", rep.text);
	reply_clear(&rep);
	after = vm_hwm_bytes(e.d.pid);
	fprintf(stderr, "10 MiB over the default cap: VmHWM %ld -> %ld KiB (+%ld KiB)\n", before / 1024,
		after / 1024, (after - before) / 1024);
	ck_assert_msg(after - before < DEFAULT_CAP_BYTES + HWM_SLACK_BYTES,
		      "VmHWM grew by %ld KiB, want under %d KiB", (after - before) / 1024,
		      (DEFAULT_CAP_BYTES + HWM_SLACK_BYTES) / 1024);
	exec_ok(&e, ARGV("s, s", "printf", "after"), &rep);
	assert_stream(rep.result, "stdout", "after");
	reply_clear(&rep);
	snprintf(suffix, sizeof(suffix), "head -c %d /dev/zero", BIG_PRINTED_BYTES);
	assert_no_survivor(&e, suffix);
	env_stop(&e);
}
END_TEST

/* Sends one request frame (params stolen) on a raw connection. */
static void raw_request(int fd, json_int_t id, const char *method, json_t *params)
{
	json_t *req = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method", method,
				"params", params);
	char *frame = json_dumps(req, JSON_COMPACT);

	ck_assert_ptr_nonnull(frame);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	free(frame);
	json_decref(req);
}

/* Appends the decoded data_b64 of an exec.output notification to buf. */
static void stream_append(json_t *n, char *buf, size_t cap, size_t *len)
{
	uint8_t *raw;
	size_t n_raw;

	raw = b64_get(jget(n, "params"), "data_b64", &n_raw);
	ck_assert_msg(*len + n_raw < cap, "more streamed than printed");
	memcpy(buf + *len, raw, n_raw);
	*len += n_raw;
	buf[*len] = '\0';
	free(raw);
}

/* The first chunk reaches the client while the command still runs: the
 * command prints, then waits until STREAM_GATE exists, which the test makes
 * (by another exec) only once the chunk has reached it; only then does the
 * command print again and end. A daemon that held the output until the end
 * sends nothing before the reply, which then is the deadline's TimeoutError. */
START_TEST(streaming_delivers_output_before_the_command_ends)
{
	struct env e = { 0 };
	char streamed[64] = "", first[64] = "";
	size_t len = 0;
	int chunks_before_gate = -1, chunks = 0;
	json_t *j, *reply = NULL;
	struct reply rep;
	int fd;

	env_start(&e, "stream");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	/* The exec's deadline (EXEC_TIMEOUT_S) is the hang guard of the wait. */
	raw_request(fd, STREAM_REQ_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i, s:b, s:b}", "sandbox", e.sandbox, "command",
			      "rm -f " STREAM_GATE "; printf first; while [ ! -e " STREAM_GATE " ]; do sleep 0.05; done; "
			      "printf second", "timeout_seconds", EXEC_TIMEOUT_S, "stream", 1, "text", 1));
	while (!reply && (j = raw_recv(fd, CLIENT_TIMEOUT_MS))) {
		char *text = json_dumps(j, JSON_COMPACT);

		if (!json_object_get(j, "method")) {
			reply = j;
			free(text);
			break;
		}
		ck_assert_msg(!strcmp(jstr(j, "method"), "exec.output"), "not exec.output: %s", text);
		ck_assert_msg(jint(j, "params.id") == STREAM_REQ_ID, "another id: %s", text);
		ck_assert_msg(!strcmp(jstr(j, "params.stream"), "stdout"), "not stdout: %s", text);
		stream_append(j, streamed, sizeof(streamed), &len);
		chunks++;
		if (chunks_before_gate < 0) {
			/* The command is still waiting: it is let go only now. */
			snprintf(first, sizeof(first), "%s", streamed);
			chunks_before_gate = chunks;
			exec_ok(&e, json_string("touch " STREAM_GATE), &rep);
			reply_clear(&rep);
		}
		free(text);
		json_decref(j);
	}
	close(fd);
	ck_assert_msg(reply, "no reply within %d ms", CLIENT_TIMEOUT_MS);
	{
		char *text = json_dumps(reply, JSON_COMPACT);

		ck_assert_msg(chunks_before_gate > 0, "no exec.output before the reply: the output was held until the "
			      "command's end (%s)", text);
		ck_assert_msg(jint(reply, "id") == STREAM_REQ_ID && json_is_object(jget(reply, "result")),
			      "the reply is not a result for id %d: %s", STREAM_REQ_ID, text);
		free(text);
	}
	ck_assert_str_eq(first, "first");
	ck_assert_str_eq(streamed, "firstsecond");
	ck_assert_int_eq(jint(reply, "result.exit_code"), 0);
	assert_stream(jget(reply, "result"), "stdout", "firstsecond");
	assert_stream(jget(reply, "result"), "stderr", "");
	json_decref(reply);
	env_stop(&e);
}
END_TEST

/* True if the engine says the container is paused (absent: false). */
static bool engine_paused(const char *id)
{
	char path[160], *body;
	json_t *j;
	bool paused;

	snprintf(path, sizeof(path), "/containers/%s/json", id);
	body = engine_get(path, NULL, NULL);
	j = json_loads(body, 0, NULL);
	paused = json_is_true(jget(j, "State.Paused"));
	json_decref(j);
	free(body);
	return paused;
}

/* files.write of FREEZE_WRITE_BYTES as a request on fd (its reply left to read). */
static void send_big_write(const struct env *e, int fd)
{
	char *content = malloc(FREEZE_WRITE_BYTES), *b64;
	size_t b64_len;

	ck_assert_ptr_nonnull(content);
	for (size_t i = 0; i < FREEZE_WRITE_BYTES; i++)
		content[i] = (char)('a' + i % 26);
	b64 = msb_base64_encode(content, FREEZE_WRITE_BYTES, &b64_len);
	free(content);
	raw_request(fd, FREEZE_REQ_ID, "files.write",
		    json_pack("{s:s, s:s, s:s%}", "sandbox", e->sandbox, "path", "big.bin", "content_b64",
			      b64, b64_len));
	free(b64);
}

/* The reply to send_big_write on fd: a result (asserted). */
static void assert_big_write_answered(int fd)
{
	json_t *w = raw_recv(fd, CLIENT_TIMEOUT_MS);
	char *text;

	ck_assert_msg(w, "no files.write reply");
	text = json_dumps(w, JSON_COMPACT);
	ck_assert_msg(jint(w, "id") == FREEZE_REQ_ID && json_is_object(jget(w, "result")), "files.write: %s", text);
	free(text);
	json_decref(w);
}

/* The archive plane: a files.write holds the guest frozen (the engine says
 * paused), and an exec sent meanwhile waits for it, then runs. The local
 * plane: a files.write never freezes the guest — the engine records no
 * pause event of it between the write's send and its reply, and never
 * shows it paused meanwhile — and an exec beside it runs. */
START_TEST(an_exec_waits_while_a_file_call_holds_the_freeze)
{
	char want_size[32];
	struct env e = { 0 };
	struct reply rep;
	bool seen = false;
	int fd;

	env_start(&e, "freeze");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	if (plane_local()) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char *since = sh_out("date +%%s.%%N"), *until, *pauses;
		int polls = 0;

		send_big_write(&e, fd);
		/* Watched until its reply is there to read (hang guard: CLIENT_TIMEOUT_MS). */
		for (long deadline = now_ms() + CLIENT_TIMEOUT_MS; poll(&pfd, 1, 0) == 0 && now_ms() < deadline; polls++)
			ck_assert_msg(!engine_paused(e.sandbox), "the local plane's files.write paused the guest");
		assert_big_write_answered(fd);
		/* No pause at all between the write's send and its reply: the
		 * engine's own record (its events), not a sample of its state. */
		until = sh_out("date +%%s.%%N");
		pauses = sh_out("docker events --since %s --until %s --filter container=%s --filter event=pause "
				"--format '{{.Action}}'", since, until, e.sandbox);
		ck_assert_msg(pauses[0] == '\0', "the local plane's files.write paused the guest: %s", pauses);
		free(since);
		free(until);
		free(pauses);
		fprintf(stderr, "local plane: the guest was seen running %d time(s) during the write\n", polls);
		/* An exec beside a write in flight runs (nothing to wait for). */
		send_big_write(&e, fd);
		exec_rpc(&e, json_pack("{s:[s], s:i}", "command", "true", "timeout_seconds", EXEC_TIMEOUT_S), &rep);
		ck_assert_msg(rep.result && jint(rep.result, "exit_code") == 0, "exec beside a files.write: %s", rep.text);
		reply_clear(&rep);
		assert_big_write_answered(fd);
	} else {
		send_big_write(&e, fd);
		/* Polled until the freeze is seen (hang guard: PAUSE_POLL_ROUNDS). */
		for (int i = 0; i < PAUSE_POLL_ROUNDS && !seen; i++) {
			seen = engine_paused(e.sandbox);
			if (!seen)
				usleep(PAUSE_POLL_US);
		}
		ck_assert_msg(seen, "the files.write never showed the container paused");
		exec_rpc(&e, json_pack("{s:[s], s:i}", "command", "true", "timeout_seconds", EXEC_TIMEOUT_S), &rep);
		ck_assert_msg(rep.result && jint(rep.result, "exit_code") == 0,
			      "exec under a files.write's freeze: %s", rep.text);
		reply_clear(&rep);
		assert_big_write_answered(fd);
	}
	close(fd);
	ck_assert(!engine_paused(e.sandbox));
	exec_ok(&e, json_string("wc -c < big.bin"), &rep);
	snprintf(want_size, sizeof(want_size), "%d\n", FREEZE_WRITE_BYTES);
	assert_stream(rep.result, "stdout", want_size);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

/* An exec started beside file calls never meets their freeze half-way: a
 * start that reached the runtime while the container was frozen came back
 * as a "result" (exit 126, "cannot exec in a paused state" on stdout). */
struct race_call {
	const struct env *e;
	int kind;                     /* 0 files.write, 1 sandbox.exec, 2 files.stat */
	int round;
	pthread_barrier_t *go;
	struct reply rep;
};

static void *race_call_run(void *arg)
{
	struct race_call *c = arg;
	char path[32], text[32];
	const char *reason;

	snprintf(path, sizeof(path), "race-%d.txt", c->round);
	snprintf(text, sizeof(text), "round %d\n", c->round);
	pthread_barrier_wait(c->go);
	if (c->kind == 1) {
		exec_rpc(c->e, json_pack("{s:s}", "command", "echo ok"), &c->rep);
		return NULL;
	}
	for (long attempt = 0, deadline = now_ms() + RACE_HELD_RETRY_MS; now_ms() < deadline; attempt++) {
		if (attempt > 0) {
			reply_clear(&c->rep);
			usleep(RACE_HELD_RETRY_US);
		}
		if (c->kind == 0)
			rpc(c->e->d.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", c->e->sandbox,
								  "path", path, "content_text", text), &c->rep);
		else
			rpc(c->e->d.sock, "files.stat", json_pack("{s:s, s:s}", "sandbox", c->e->sandbox, "path",
								 "."), &c->rep);
		reason = json_string_value(json_object_get(c->rep.data, "reason"));
		if (c->rep.code != ERR_FREEZE_FAILED || !reason || strcmp(reason, "held elsewhere") != 0)
			break;
	}
	return NULL;
}

START_TEST(an_exec_beside_file_calls_never_starts_into_their_freeze)
{
	struct env e = { 0 };

	env_start(&e, "race");
	for (int round = 0; round < RACE_ROUNDS; round++) {
		struct race_call c[RACE_CALLS];
		pthread_t th[RACE_CALLS];
		pthread_barrier_t go;

		ck_assert_int_eq(pthread_barrier_init(&go, NULL, RACE_CALLS), 0);
		for (int k = 0; k < RACE_CALLS; k++) {
			c[k] = (struct race_call){ .e = &e, .kind = k, .round = round, .go = &go };
			ck_assert_int_eq(pthread_create(&th[k], NULL, race_call_run, &c[k]), 0);
		}
		for (int k = 0; k < RACE_CALLS; k++)
			pthread_join(th[k], NULL);
		pthread_barrier_destroy(&go);
		ck_assert_msg(c[0].rep.result && c[0].rep.code == 0, "round %d: files.write: %s", round,
			      c[0].rep.text);
		ck_assert_msg(c[2].rep.result && c[2].rep.code == 0, "round %d: files.stat: %s", round,
			      c[2].rep.text);
		ck_assert_msg(c[1].rep.result && c[1].rep.code == 0, "round %d: sandbox.exec: %s", round,
			      c[1].rep.text);
		ck_assert_msg(jint(c[1].rep.result, "exit_code") == 0, "round %d: sandbox.exec: %s", round,
			      c[1].rep.text);
		assert_stream(c[1].rep.result, "stdout", "ok\n");
		for (int k = 0; k < RACE_CALLS; k++)
			reply_clear(&c[k].rep);
	}
	env_stop(&e);
}
END_TEST

/* ---- the CLI ------------------------------------------------------------- */

/* The whole of a local file (malloc'd, NUL added) and its length. */
static char *file_get(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t n = 0, cap = 0, k;

	ck_assert_msg(f, "open %s: %s", path, strerror(errno));
	do {
		if (cap - n < 4096)
			buf = realloc(buf, cap = cap * 2 + 4096);
		k = fread(buf + n, 1, cap - n - 1, f);
		n += k;
	} while (k > 0);
	fclose(f);
	buf[n] = '\0';
	*ret_len = n;
	return buf;
}

struct cli_out {
	int status;
	char *out, *err;     /* NUL added */
	size_t out_len, err_len;
};

static void cli_out_clear(struct cli_out *o)
{
	free(o->out);
	free(o->err);
	memset(o, 0, sizeof(*o));
}

/* Runs maf-sandbox --socket S args... with stdout and stderr into files
 * (byte-exact, any size). */
static void run_exec_cli(const struct env *e, const char *const *args, struct cli_out *o)
{
	const char *cli = getenv("MSB_CLI"), *argv[CLI_MAX_ARGS + 4];
	char out_path[160], err_path[160];
	size_t n = 0;
	int status;
	pid_t pid;

	ck_assert_msg(cli, "MSB_CLI is not set");
	snprintf(out_path, sizeof(out_path), "%s/cli.out", e->d.dir);
	snprintf(err_path, sizeof(err_path), "%s/cli.err", e->d.dir);
	argv[n++] = cli;
	argv[n++] = "--socket";
	argv[n++] = e->d.sock;
	for (; *args; args++) {
		ck_assert_uint_lt(n, CLI_MAX_ARGS + 3);
		argv[n++] = *args;
	}
	argv[n] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (in < 0 || out < 0 || err < 0)
			_exit(99);
		dup2(in, STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(err, STDERR_FILENO);
		execv(cli, (char *const *)argv);
		_exit(98);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	memset(o, 0, sizeof(*o));
	o->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	o->out = file_get(out_path, &o->out_len);
	o->err = file_get(err_path, &o->err_len);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

#define assert_cli_status(o, want) \
	ck_assert_msg((o)->status == (want), "exit status %d, want %d; stderr: %s", (o)->status, \
		      (want), (o)->err)

START_TEST(cli_exit_status_is_the_commands)
{
	static const struct { const char *sh; int status; } rows[] = {
		{ "true", 0 }, { "exit 1", 1 }, { "exit 3", 3 }, { "exit 7", 7 }, { "exit 125", 125 },
		{ "exit 255", 255 }, { "no-such-binary-msb", 127 },
	};
	struct env e = { 0 };
	struct cli_out o;

	env_start(&e, "cliexit");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		run_exec_cli(&e, ARGS("exec", "--sh", rows[i].sh, e.sandbox), &o);
		ck_assert_msg(o.status == rows[i].status, "'%s': exit status %d, want %d; stderr: %s",
			      rows[i].sh, o.status, rows[i].status, o.err);
		cli_out_clear(&o);
	}
	run_exec_cli(&e, ARGS("exec", e.sandbox, "--", "sh", "-c", "exit \"$1\"", "probe", "42"), &o);
	assert_cli_status(&o, 42);
	ck_assert_uint_eq(o.out_len + o.err_len, 0);
	cli_out_clear(&o);
	env_stop(&e);
}
END_TEST

START_TEST(cli_writes_the_exact_bytes_to_each_stream)
{
	static const char want_out[] = "o\377\000u\n";
	static const char want_err[] = "e\376r";
	struct env e = { 0 };
	struct cli_out o;

	env_start(&e, "clibytes");
	run_exec_cli(&e, ARGS("exec", e.sandbox, "--", "sh", "-c",
			      "printf 'o\\377\\000u\\n'; printf 'e\\376r' >&2; exit 5"), &o);
	assert_cli_status(&o, 5);
	ck_assert_msg(o.out_len == sizeof(want_out) - 1 && !memcmp(o.out, want_out, o.out_len),
		      "stdout: %zu bytes", o.out_len);
	ck_assert_msg(o.err_len == sizeof(want_err) - 1 && !memcmp(o.err, want_err, o.err_len),
		      "stderr: %zu bytes", o.err_len);
	cli_out_clear(&o);
	/* An argv is not re-quoted; options after '--' are the command's. */
	run_exec_cli(&e, ARGS("exec", e.sandbox, "--", "printf", "%s|%s", "a b$(x)", "--json"), &o);
	assert_cli_status(&o, 0);
	ck_assert_str_eq(o.out, "a b$(x)|--json");
	cli_out_clear(&o);
	env_stop(&e);
}
END_TEST

START_TEST(cli_sh_env_and_working_directory)
{
	struct env e = { 0 };
	struct cli_out o;

	env_start(&e, "clish");
	run_exec_cli(&e, ARGS("exec", "--env", "FOO=b a=r", "--env", "BAR=1", "--env", "BAR=2", "--sh",
			      "printf '%s|%s|' \"$FOO\" \"$BAR\"; pwd", e.sandbox), &o);
	assert_cli_status(&o, 0);
	ck_assert_str_eq(o.out, "b a=r|2|" GUEST_BASE "\n");
	cli_out_clear(&o);
	run_exec_cli(&e, ARGS("exec", "-w", "/tmp", e.sandbox, "--", "pwd"), &o);
	assert_cli_status(&o, 0);
	ck_assert_str_eq(o.out, "/tmp\n");
	cli_out_clear(&o);
	/* --json: the daemon's result, and still the command's status. */
	run_exec_cli(&e, ARGS("--json", "exec", "--sh", "printf hi; exit 4", e.sandbox), &o);
	assert_cli_status(&o, 4);
	{
		json_t *j = json_loads(o.out, 0, NULL);

		ck_assert_msg(j, "not JSON: %s", o.out);
		ck_assert_int_eq(jint(j, "exit_code"), 4);
		ck_assert_str_eq(jstr(j, "stdout_text"), "hi");
		ck_assert_str_eq(jstr(j, "stdout_b64"), "aGk=");
		json_decref(j);
	}
	cli_out_clear(&o);
	env_stop(&e);
}
END_TEST

/* The daemon's errors exit 125 with the error's type; a client-side
 * timeout never comes first (the client waits past the daemon's deadline). */
START_TEST(cli_failures_exit_125)
{
	static const char no_such[] =
		"0000000000000000000000000000000000000000000000000000000000000000";
	struct env e = { 0 };
	struct cli_out o;

	env_start(&e, "clifail");
	run_exec_cli(&e, ARGS("--timeout", "1", "exec", e.sandbox, "--", "sleep", "30"), &o);
	assert_cli_status(&o, CLI_EXEC_FAILED);
	ck_assert_msg(strstr(o.err, "TimeoutError"), "stderr: %s", o.err);
	ck_assert_uint_eq(o.out_len, 0);
	cli_out_clear(&o);
	run_exec_cli(&e, ARGS("exec", "--timeout", "0.5", e.sandbox, "--", "sleep", "30"), &o);
	assert_cli_status(&o, CLI_EXEC_FAILED);
	ck_assert_msg(strstr(o.err, "TimeoutError"), "--timeout 0.5: stderr: %s", o.err);
	cli_out_clear(&o);
	run_exec_cli(&e, ARGS("exec", no_such, "--", "true"), &o);
	assert_cli_status(&o, CLI_EXEC_FAILED);
	ck_assert_msg(strstr(o.err, "maf-sandbox: "), "stderr: %s", o.err);
	cli_out_clear(&o);
	run_exec_cli(&e, ARGS("--socket", "/nonexistent/msb.sock", "exec", e.sandbox, "--", "true"), &o);
	assert_cli_status(&o, CLI_EXEC_FAILED);
	cli_out_clear(&o);
	env_stop(&e);
}
END_TEST

struct usage_row {
	const char *args[10];
	const char *needle;      /* in stderr */
};

static const struct usage_row usage_rows[] = {
	{ { "exec", NULL }, "missing arguments" },
	{ { "exec", "SB", NULL }, "'--'" },
	{ { "exec", "SB", "true", NULL }, "'--'" },
	{ { "exec", "SB", "--", NULL }, "missing the command" },
	{ { "exec", "--sh", "true", "SB", "--", "x", NULL }, "no ARGV" },
	{ { "exec", "--sh", NULL }, "needs an argument" },
	{ { "exec", "--env", "1A=b", "SB", "--", "true", NULL }, "--env" },
	{ { "exec", "--env", "NOEQUALS", "SB", "--", "true", NULL }, "--env" },
	{ { "exec", "--env", "=v", "SB", "--", "true", NULL }, "--env" },
	{ { "exec", "--timeout", "86401", "SB", "--", "true", NULL }, "86400" },
	{ { "exec", "--timeout", "x", "SB", "--", "true", NULL }, "--timeout" },
	{ { "exec", "-r", "SB", "--", "true", NULL }, "--recursive" },
	{ { "exec", "SB", "--", "\xff", NULL }, "UTF-8" },
	{ { "exec", "--sh", "\xff", "SB", NULL }, "UTF-8" },
	{ { "get", "--sh", "x", "SB", "g", NULL }, "--sh" },
	{ { "exec", "-i", "--no-stdin", "SB", "--", "true", NULL }, "not both" },
	{ { "get", "-i", "SB", "g", NULL }, "--interactive" },
};

START_TEST(cli_usage_errors_exit_2)
{
	const struct usage_row *row = &usage_rows[_i];
	const char *args[14] = { "--socket", "/nonexistent/msb.sock" };
	char *err = NULL;
	size_t n = 2;
	int rc;

	for (const char *const *a = row->args; *a; a++)
		args[n++] = *a;
	args[n] = NULL;
	rc = run_cli(args, NULL, &err);
	ck_assert_msg(rc == CLI_EXEC_USAGE, "row %d: exit status %d; stderr: %s", _i, rc, err);
	ck_assert_msg(strstr(err, row->needle), "row %d: stderr lacks '%s': %s", _i, row->needle, err);
	free(err);
}
END_TEST


/* ---- stdin and cancel (issue 19) ------------------------------------------ */

/* The 32 MiB streamed through exec.stdin in chunks of this many bytes. */
#define STDIN_BIG_BYTES (32 * 1024 * 1024)
#define STDIN_CHUNK_BYTES (1024 * 1024)
/* How far the daemon's peak resident set may grow while it passes them on:
 * far below the input (it holds one chunk, its base64 and its frame). */
#define STDIN_HWM_SLACK_BYTES (16 * 1024 * 1024)
#define STDIN_EXEC_ID 61
#define CANCEL_EXEC_ID 71

/* Reads frames on fd until the reply to id (notifications skipped, any
 * other reply fails the test). New reference. */
static json_t *raw_reply_to(int fd, json_int_t id)
{
	json_t *j;

	while ((j = raw_recv(fd, CLIENT_TIMEOUT_MS))) {
		if (json_object_get(j, "method")) {
			json_decref(j);
			continue;
		}
		if (jint(j, "id") == id)
			return j;
		{
			char *t = json_dumps(j, JSON_COMPACT);

			ck_abort_msg("a reply to another id than %lld: %s", (long long)id, t);
		}
	}
	ck_abort_msg("no reply to %lld within %d ms", (long long)id, CLIENT_TIMEOUT_MS);
	return NULL;
}

static uint8_t *json_b64(json_t *j, const char *path, size_t *len)
{
	json_t *v = jget(j, path);
	uint8_t *raw = NULL;

	ck_assert_msg(json_is_string(v), "%s is not a string", path);
	ck_assert_int_eq(msb_base64_decode(json_string_value(v), json_string_length(v), &raw, len), 0);
	return raw;
}

START_TEST(stdin_bytes_reach_the_command)
{
	static const uint8_t bin[] = { 'a', 0, 'b', 0xff, '\n', 0, 0, 'z', 0x80 };
	struct env e = { 0 };
	struct reply rep;
	char *b64 = harness_b64_encode(bin, sizeof(bin));
	uint8_t *got;
	size_t len;

	env_start(&e, "stdin");
	/* stdin_b64: the whole input, NULs and all, then closed. */
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "cat", "stdin_b64", b64), &rep);
	ck_assert_msg(rep.result && jint(rep.result, "exit_code") == 0, "cat with stdin_b64: %s", rep.text);
	got = b64_get(rep.result, "stdout_b64", &len);
	ck_assert_msg(len == sizeof(bin) && memcmp(got, bin, len) == 0, "cat echoed %zu bytes: %s", len, rep.text);
	free(got);
	reply_clear(&rep);
	/* Without stdin, as before: closed (cat ends at once, empty). */
	exec_ok(&e, ARGV("s", "cat"), &rep);
	assert_stream(rep.result, "stdout", "");
	reply_clear(&rep);
	/* Not both; not base64. */
	exec_rpc(&e, json_pack("{s:[s], s:s, s:b}", "command", "cat", "stdin_b64", b64, "stdin_stream", 1), &rep);
	ck_assert_msg(rep.code == ERR_INVALID_PARAMS && !strcmp(jstr(rep.data, "field"), "stdin_stream"),
		      "both: %s", rep.text);
	reply_clear(&rep);
	exec_rpc(&e, json_pack("{s:[s], s:s}", "command", "cat", "stdin_b64", "!!"), &rep);
	ck_assert_msg(rep.code == ERR_INVALID_PARAMS && !strcmp(jstr(rep.data, "field"), "stdin_b64"),
		      "bad base64: %s", rep.text);
	reply_clear(&rep);
	/* exec.stdin naming no exec of this connection. */
	rpc(e.d.sock, "exec.stdin", json_pack("{s:i, s:s}", "call", 12345, "data_b64", b64), &rep);
	ck_assert_msg(rep.code == ERR_INVALID_PARAMS && !strcmp(jstr(rep.data, "field"), "call"),
		      "exec.stdin of no exec: %s", rep.text);
	reply_clear(&rep);
	free(b64);
	env_stop(&e);
}
END_TEST

START_TEST(stdin_streamed_in_chunks_then_eof)
{
	struct env e = { 0 };
	json_t *j;
	uint8_t *got;
	size_t len;
	int fd;

	env_start(&e, "stdinstream");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	raw_request(fd, STDIN_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:[s], s:i, s:b}", "sandbox", e.sandbox, "command", "cat", "timeout_seconds",
			      EXEC_TIMEOUT_S, "stdin_stream", 1));
	raw_request(fd, 1, "exec.stdin", json_pack("{s:i, s:s}", "call", STDIN_EXEC_ID, "data_b64", "b25lLA=="));
	j = raw_reply_to(fd, 1);
	ck_assert_int_eq(jint(j, "result.written"), 4);
	json_decref(j);
	/* The end, and right behind it (the exec still runs: its stdin is not
	 * even written yet) one more, refused: the stdin is closed. */
	raw_request(fd, 2, "exec.stdin", json_pack("{s:i, s:s, s:b}", "call", STDIN_EXEC_ID, "data_b64", "dHdv",
						   "eof", 1));
	raw_request(fd, 3, "exec.stdin", json_pack("{s:i, s:s}", "call", STDIN_EXEC_ID, "data_b64", "eA=="));
	for (int seen = 0; seen != 7;) {
		j = raw_recv(fd, CLIENT_TIMEOUT_MS);
		ck_assert_ptr_nonnull(j);
		if (json_object_get(j, "method")) {
			json_decref(j);
			continue;
		}
		switch (jint(j, "id")) {
		case 2:
			ck_assert_int_eq(jint(j, "result.written"), 3);
			seen |= 1;
			break;
		case 3:
			ck_assert_int_eq(jint(j, "error.code"), ERR_INVALID_PARAMS);
			ck_assert_str_eq(jstr(j, "error.data.field"), "call");
			seen |= 2;
			break;
		case STDIN_EXEC_ID:
			got = json_b64(j, "result.stdout_b64", &len);
			ck_assert_msg(len == 7 && memcmp(got, "one,two", 7) == 0, "cat echoed '%.*s'", (int)len, got);
			free(got);
			seen |= 4;
			break;
		default:
			ck_abort_msg("a reply to an unknown id");
		}
		json_decref(j);
	}
	close(fd);
	env_stop(&e);
}
END_TEST

START_TEST(a_large_streamed_stdin_arrives_whole_in_bounded_memory)
{
	struct env e = { 0 };
	char path[PATH_MAX], *want, *got_sum;
	uint8_t *data = malloc(STDIN_BIG_BYTES);
	uint32_t seed = 12345;
	long before, after;
	json_t *j;
	FILE *f;
	int fd;

	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < STDIN_BIG_BYTES; i++) {
		seed = seed * 1103515245u + 12345u;
		data[i] = (uint8_t)(seed >> 16);
	}
	snprintf(path, sizeof(path), "/tmp/msb-stdin-%d.bin", (int)getpid());
	f = fopen(path, "we");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fwrite(data, 1, STDIN_BIG_BYTES, f), STDIN_BIG_BYTES);
	fclose(f);
	want = sh_out("sha256sum %s | cut -c1-64", path);
	unlink(path);

	/* Under AddressSanitizer freed memory is held in quarantine (256 MiB),
	 * not reused, so the peak would count every chunk ever decoded: the
	 * daemon of this test keeps a small one, and its peak is what it
	 * holds at once. */
	{
		const char *asan = getenv("ASAN_OPTIONS");
		char opts[512];

		snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=1:thread_local_quarantine_size_kb=64",
			 asan ? asan : "", asan && *asan ? ":" : "");
		setenv("ASAN_OPTIONS", opts, 1);
	}
	env_start(&e, "stdinbig");
	before = vm_hwm_bytes(e.d.pid);
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	raw_request(fd, STDIN_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i, s:b, s:b}", "sandbox", e.sandbox, "command",
			      "sha256sum | cut -c1-64", "timeout_seconds", 120, "stdin_stream", 1, "text", 1));
	for (size_t off = 0, i = 0; off < STDIN_BIG_BYTES; off += STDIN_CHUNK_BYTES, i++) {
		char *b64 = harness_b64_encode(data + off, STDIN_CHUNK_BYTES);

		raw_request(fd, 100 + (json_int_t)i, "exec.stdin",
			    json_pack("{s:i, s:s, s:b}", "call", STDIN_EXEC_ID, "data_b64", b64, "eof",
				      off + STDIN_CHUNK_BYTES >= STDIN_BIG_BYTES));
		free(b64);
		j = raw_reply_to(fd, 100 + (json_int_t)i);
		ck_assert_msg(jint(j, "result.written") == STDIN_CHUNK_BYTES, "chunk %zu: written %lld", i,
			      (long long)jint(j, "result.written"));
		json_decref(j);
	}
	j = raw_reply_to(fd, STDIN_EXEC_ID);
	got_sum = strdup(jstr(j, "result.stdout_text") ? jstr(j, "result.stdout_text") : "");
	json_decref(j);
	close(fd);
	after = vm_hwm_bytes(e.d.pid);
	fprintf(stderr, "32 MiB through exec.stdin: VmHWM %ld -> %ld KiB\n", before / 1024, after / 1024);
	ck_assert_msg(strncmp(got_sum, want, 64) == 0, "the guest's sha256 %s, want %s", got_sum, want);
	ck_assert_msg(after - before < STDIN_HWM_SLACK_BYTES, "VmHWM grew by %ld KiB, want under %d KiB",
		      (after - before) / 1024, STDIN_HWM_SLACK_BYTES / 1024);
	free(got_sum);
	free(want);
	free(data);
	env_stop(&e);
}
END_TEST

/* Waits until the guest runs a process ending with suffix (the exec began). */
static void await_guest_proc(const struct env *e, const char *suffix)
{
	long deadline = now_ms() + CLIENT_TIMEOUT_MS;     /* hang guard */

	while (guest_procs(e, suffix) == 0) {
		ck_assert_msg(now_ms() < deadline, "'...%s' never ran in the guest", suffix);
		usleep(POLL_MS * 1000);
	}
}

/* The command: prints, then leaves a sleep in its own session, its
 * environment emptied (the mark shed: only the host-side kill finds it),
 * and sleeps itself. */
#define CANCEL_CMD "echo before; echo err >&2; setsid env -i sleep 301 & sleep 300"

START_TEST(call_cancel_kills_the_command_and_answers_cancelled)
{
	struct env e = { 0 };
	struct reply rep;
	uint8_t *out;
	size_t len;
	json_t *j;
	int fd;

	env_start(&e, "cancel");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	raw_request(fd, CANCEL_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i}", "sandbox", e.sandbox, "command", CANCEL_CMD, "timeout_seconds",
			      EXEC_TIMEOUT_S));
	await_guest_proc(&e, " sleep 300");
	await_guest_proc(&e, " sleep 301");
	raw_request(fd, 2, "call.cancel", json_pack("{s:i}", "id", CANCEL_EXEC_ID));
	/* The two answers, in either order. */
	for (int k = 0; k < 2; k++) {
		j = raw_recv(fd, CLIENT_TIMEOUT_MS);
		ck_assert_ptr_nonnull(j);
		if (jint(j, "id") == 2) {
			ck_assert_msg(json_is_true(jget(j, "result.cancelled")), "call.cancel not taken");
		} else {
			ck_assert_int_eq(jint(j, "id"), CANCEL_EXEC_ID);
			ck_assert_int_eq(jint(j, "error.code"), ERR_CANCELLED);
			ck_assert_str_eq(jstr(j, "error.data.type"), "Cancelled");
			out = json_b64(j, "error.data.stdout_b64", &len);
			ck_assert_msg(len == 7 && memcmp(out, "before\n", 7) == 0, "partial stdout '%.*s'", (int)len, out);
			free(out);
			out = json_b64(j, "error.data.stderr_b64", &len);
			ck_assert_msg(len == 4 && memcmp(out, "err\n", 4) == 0, "partial stderr '%.*s'", (int)len, out);
			free(out);
		}
		json_decref(j);
	}
	/* Cancelling it again, or an id never sent: false. */
	raw_request(fd, 3, "call.cancel", json_pack("{s:i}", "id", CANCEL_EXEC_ID));
	j = raw_reply_to(fd, 3);
	ck_assert_msg(json_is_false(jget(j, "result.cancelled")), "a finished call was cancelled");
	json_decref(j);
	raw_request(fd, 4, "call.cancel", json_pack("{s:s}", "id", "never-sent"));
	j = raw_reply_to(fd, 4);
	ck_assert_msg(json_is_false(jget(j, "result.cancelled")), "an unknown id was cancelled");
	json_decref(j);
	close(fd);
	assert_no_survivor(&e, " sleep 300");
	assert_no_survivor(&e, " sleep 301");
	/* The sandbox stays. */
	exec_ok(&e, ARGV("s, s", "printf", "after"), &rep);
	assert_stream(rep.result, "stdout", "after");
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

START_TEST(a_closed_connection_cancels_its_exec)
{
	struct env e = { 0 };
	int fd;

	env_start(&e, "cancelclose");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	raw_request(fd, CANCEL_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i}", "sandbox", e.sandbox, "command", CANCEL_CMD, "timeout_seconds",
			      EXEC_TIMEOUT_S));
	await_guest_proc(&e, " sleep 300");
	await_guest_proc(&e, " sleep 301");
	close(fd);
	assert_no_survivor(&e, " sleep 300");
	assert_no_survivor(&e, " sleep 301");
	env_stop(&e);
}
END_TEST

/* True if the engine knows the container. */
static bool engine_has_container(const char *id)
{
	char path[160], *body;
	json_t *j;
	bool there;

	snprintf(path, sizeof(path), "/containers/%s/json", id);
	body = engine_get(path, NULL, NULL);
	j = json_loads(body, 0, NULL);
	there = json_is_string(jget(j, "Id"));
	json_decref(j);
	free(body);
	return there;
}

/* exec.on_timeout = dispose: a command past its deadline takes its sandbox
 * with it, through the one removal sequence (dispose.h); the answer comes
 * after the removal, so the engine no longer has the container then. */
START_TEST(a_timeout_with_on_timeout_dispose_removes_the_sandbox)
{
	static const char *const args[] = { "--set", "exec.on_timeout=dispose", NULL };
	struct env e = { 0 };
	struct reply rep;

	msbd_start(&e.d, args);
	json_decref(wait_engine_state(e.d.sock, "reachable", ENGINE_WAIT_MS));
	env_acquire(&e, "timeoutdispose", "t");
	ck_assert_msg(engine_has_container(e.sandbox), "the sandbox is not on the engine before the exec");
	exec_rpc(&e, json_pack("{s:[s, s], s:i}", "command", "sleep", "30", "timeout_seconds",
			       PROBE_TIMEOUT_S), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_TIMEOUT && !strcmp(rep.type, "TimeoutError"),
		      "sleep 30 with timeout 1: %s", rep.text);
	reply_clear(&rep);
	ck_assert_msg(!engine_has_container(e.sandbox),
		      "exec.on_timeout=dispose answered the timeout but the sandbox is still on the engine");
	/* The registry knows it too: the next exec finds no such sandbox. */
	exec_rpc(&e, json_pack("{s:[s]}", "command", "true"), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_SANDBOX_NOT_FOUND, "an exec after the disposal: %s", rep.text);
	reply_clear(&rep);
	env_stop(&e);
}
END_TEST

/* An exec cancelled before the engine made it never ran: Cancelled,
 * nothing killed, and exec.on_timeout = dispose leaves the sandbox (as a
 * deadline spent waiting does). The archive plane: the exec waits for a
 * file call's freeze, and is cancelled there. The local plane has no
 * freeze to wait for: the exec and its cancel come in one write, so the
 * daemon takes both in one turn, the exec's create still in flight. */
/* On fd: call.cancel (id 2) says it took the cancel, and the exec
 * (CANCEL_EXEC_ID) answers Cancelled. */
static void expect_cancel_taken(int fd)
{
	json_t *j = raw_reply_to(fd, 2);

	ck_assert_msg(json_is_true(jget(j, "result.cancelled")), "call.cancel not taken");
	json_decref(j);
	j = raw_reply_to(fd, CANCEL_EXEC_ID);
	ck_assert_int_eq(jint(j, "error.code"), ERR_CANCELLED);
	json_decref(j);
}

START_TEST(an_exec_cancelled_before_it_started_leaves_the_sandbox)
{
	static const char *const args[] = { "--set", "exec.on_timeout=dispose", NULL };
	struct env e = { 0 };
	struct reply rep;
	bool seen = false;
	json_t *j;
	int fd, fd2;

	msbd_start(&e.d, args);
	json_decref(wait_engine_state(e.d.sock, "reachable", ENGINE_WAIT_MS));
	env_acquire(&e, "cancelwait", "t");
	exec_ok(&e, json_string("true"), &rep);   /* the identity is fixed */
	reply_clear(&rep);
	if (plane_local()) {
		json_t *req = json_pack("{s:s, s:i, s:s, s:{s:s, s:s, s:i}}", "jsonrpc", "2.0", "id", CANCEL_EXEC_ID,
					"method", "sandbox.exec", "params", "sandbox", e.sandbox, "command", "sleep 303",
					"timeout_seconds", EXEC_TIMEOUT_S);
		json_t *cancel = json_pack("{s:s, s:i, s:s, s:{s:i}}", "jsonrpc", "2.0", "id", 2, "method",
					   "call.cancel", "params", "id", CANCEL_EXEC_ID);
		char *a = json_dumps(req, JSON_COMPACT), *b = json_dumps(cancel, JSON_COMPACT), both[1024];

		snprintf(both, sizeof(both), "%s\n%s\n", a, b);
		free(a);
		free(b);
		json_decref(req);
		json_decref(cancel);
		fd2 = raw_connect(e.d.sock);
		ck_assert_int_ge(fd2, 0);
		raw_send(fd2, both, strlen(both));
		expect_cancel_taken(fd2);
		close(fd2);
		ck_assert_msg(engine_has_container(e.sandbox),
			      "an exec cancelled before it started disposed of the sandbox");
		ck_assert_msg(!engine_paused(e.sandbox), "the local plane paused the guest");
		assert_no_survivor(&e, " sleep 303");
		env_stop(&e);
		return;
	}
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	send_big_write(&e, fd);
	for (int i = 0; i < PAUSE_POLL_ROUNDS && !seen; i++) {
		seen = engine_paused(e.sandbox);
		if (!seen)
			usleep(PAUSE_POLL_US);
	}
	ck_assert_msg(seen, "the files.write never showed the container paused");   /* hang guard: PAUSE_POLL_ROUNDS */
	fd2 = raw_connect(e.d.sock);
	ck_assert_int_ge(fd2, 0);
	raw_request(fd2, CANCEL_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i}", "sandbox", e.sandbox, "command", "sleep 303", "timeout_seconds",
			      EXEC_TIMEOUT_S));
	raw_request(fd2, 2, "call.cancel", json_pack("{s:i}", "id", CANCEL_EXEC_ID));
	expect_cancel_taken(fd2);
	/* The exec and its cancel were taken in the same turns while the
	 * container was paused (a 24 MiB files.write): it never reached the
	 * engine. */
	ck_assert_msg(engine_has_container(e.sandbox), "an exec cancelled before it started disposed of the sandbox");
	close(fd2);
	j = raw_recv(fd, CLIENT_TIMEOUT_MS);
	json_decref(j);
	close(fd);
	assert_no_survivor(&e, " sleep 303");
	env_stop(&e);
}
END_TEST

/* A half-close (the client sent everything, and still reads) is no
 * cancel: the exec runs to its end and is answered. */
START_TEST(a_half_closed_connection_still_gets_its_answer)
{
	struct env e = { 0 };
	json_t *j;
	int fd;

	env_start(&e, "halfclose");
	fd = raw_connect(e.d.sock);
	ck_assert_int_ge(fd, 0);
	raw_request(fd, CANCEL_EXEC_ID, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i, s:b}", "sandbox", e.sandbox, "command", "sleep 1; printf done",
			      "timeout_seconds", EXEC_TIMEOUT_S, "text", 1));
	ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
	j = raw_reply_to(fd, CANCEL_EXEC_ID);
	ck_assert_msg(json_is_object(jget(j, "result")), "the half-closed exec was not answered with its result");
	ck_assert_str_eq(jstr(j, "result.stdout_text"), "done");
	json_decref(j);
	close(fd);
	env_stop(&e);
}
END_TEST

START_TEST(a_timeout_carries_the_partial_output)
{
	struct env e = { 0 };
	struct reply rep;
	uint8_t *out;
	size_t len;

	env_start(&e, "timeoutpartial");
	exec_rpc(&e, json_pack("{s:s, s:i}", "command", "echo early; echo warn >&2; sleep 30", "timeout_seconds",
			       PROBE_TIMEOUT_S), &rep);
	ck_assert_msg(!rep.result && rep.code == ERR_TIMEOUT, "timeout: %s", rep.text);
	out = json_b64(rep.data, "stdout_b64", &len);
	ck_assert_msg(len == 6 && memcmp(out, "early\n", 6) == 0, "partial stdout: %s", rep.text);
	free(out);
	out = json_b64(rep.data, "stderr_b64", &len);
	ck_assert_msg(len == 5 && memcmp(out, "warn\n", 5) == 0, "partial stderr: %s", rep.text);
	free(out);
	ck_assert_str_eq(jstr(rep.data, "stdout_text"), "early\n");
	reply_clear(&rep);
	assert_no_survivor(&e, " sleep 30");
	env_stop(&e);
}
END_TEST

static Suite *exec_suite(void)
{
	Suite *s = suite_create("exec");
	TCase *tc;

	tc = tcase_create("core");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, an_argv_sequence_runs);
	tcase_add_test(tc, exit_code_fidelity);
	tcase_add_test(tc, argv_is_quoted);
	tcase_add_test(tc, working_directory_is_honoured);
	tcase_add_test(tc, streams_stay_separate);
	tcase_add_test(tc, exec_byte_fidelity);
	tcase_add_test(tc, env_is_visible);
	tcase_add_test(tc, the_text_views_come_only_when_asked);
	tcase_add_test(tc, invalid_params_are_refused);
	tcase_add_test(tc, unknown_sandbox_is_refused);
	tcase_add_test(tc, concurrent_execs_keep_their_own_output);
	tcase_add_test(tc, streaming_delivers_output_before_the_command_ends);
	suite_add_tcase(s, tc);

	tc = tcase_create("load");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, concurrent_execs_across_eight_sandboxes);
	tcase_add_test(tc, ten_mib_over_the_default_cap_is_refused_with_bounded_memory);
	tcase_add_test(tc, an_exec_waits_while_a_file_call_holds_the_freeze);
	suite_add_tcase(s, tc);

	tc = tcase_create("race");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, an_exec_beside_file_calls_never_starts_into_their_freeze);
	suite_add_tcase(s, tc);

	tc = tcase_create("kill");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, a_timeout_raises_timeout_error);
	tcase_add_test(tc, a_timeout_with_on_timeout_dispose_removes_the_sandbox);
	tcase_add_test(tc, a_timeout_kills_what_ignores_term_and_its_children);
	tcase_add_test(tc, output_over_the_cap_is_refused_and_killed);
	suite_add_tcase(s, tc);

	tc = tcase_create("stdin");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, stdin_bytes_reach_the_command);
	tcase_add_test(tc, stdin_streamed_in_chunks_then_eof);
	tcase_add_test(tc, a_large_streamed_stdin_arrives_whole_in_bounded_memory);
	suite_add_tcase(s, tc);

	tc = tcase_create("cancel");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, call_cancel_kills_the_command_and_answers_cancelled);
	tcase_add_test(tc, a_closed_connection_cancels_its_exec);
	tcase_add_test(tc, an_exec_cancelled_before_it_started_leaves_the_sandbox);
	tcase_add_test(tc, a_half_closed_connection_still_gets_its_answer);
	tcase_add_test(tc, a_timeout_carries_the_partial_output);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, cli_exit_status_is_the_commands);
	tcase_add_test(tc, cli_writes_the_exact_bytes_to_each_stream);
	tcase_add_test(tc, cli_sh_env_and_working_directory);
	tcase_add_test(tc, cli_failures_exit_125);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli_usage");
	tcase_add_loop_test(tc, cli_usage_errors_exit_2, 0, sizeof(usage_rows) / sizeof(usage_rows[0]));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed;

	snprintf(run_id, sizeof(run_id), "itx%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-busybox:%s", run_id);
	if (!harness_test_image(image))
		return EXIT_FAILURE;
	harness_run_dir_create();
	sr = srunner_create(exec_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_run_dir_remove();
	/* Whatever failed: nothing of this run stays. */
	out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s | xargs -r docker rm -f >/dev/null 2>&1; "
		     "docker rmi -f %s >/dev/null 2>&1; echo done", RUN_LABEL, run_id, image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
