/* hostile_wire.c — see hostile.h. Finding 4 (JSON amplification) and the
 * exec reply's size (finding 1, its exec part), in miniature:
 *  - frames of adversarial JSON shapes (a flat array of zeros, small
 *    strings, object keys, deep nesting, whitespace, one long key) in an
 *    unknown param of daemon.status: each is refused ParseError naming its
 *    limit before it is parsed, the connection stays usable, and the
 *    daemon's peak RSS grows by less than a few times the frame (the attack
 *    run: 20 times for zeros); a frame of one long string is parsed and
 *    refused for its unknown param;
 *  - daemon.status is answered on another connection while a client sends
 *    such frames back to back (the daemon's request count moves between two
 *    answers: the flood runs meanwhile), every other one a frame the
 *    pre-scan admits (long strings) but with trailing garbage: refused with
 *    jansson's own error without jansson lexing the frame's strings;
 *  - exec of 1 MiB of 0xff: the raw reply frame is at most 4/3 of it plus a
 *    small envelope (each byte once, in base64); with text: true the text
 *    views come too; with stream: true the notifications carry each byte
 *    once and a command writing a byte at a time gets one notification a
 *    flush period, not one a byte. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "msb-limits.h"

/* One adversarial frame's size: big enough that jansson would take
 * hundreds of MiB for it (20 times, for zeros), small for the machine. */
#define WIRE_FRAME_BYTES (20 * 1000 * 1000)
/* What the daemon's peak RSS may grow by over all the frames of a test
 * (one at a time on the connection): the frame buffer (doubling, so up to
 * twice the frame), a long string's copy, and slack for the sanitizer's
 * allocator and the loop's buffers. */
#define WIRE_RSS_SLACK_KIB (24 * 1024)
#define WIRE_RSS_BOUND_KIB (3 * (WIRE_FRAME_BYTES / 1024) + WIRE_RSS_SLACK_KIB)
/* Hang guards, never timing assertions. */
#define WIRE_REPLY_MS 60000   /* hang guard */
#define WIRE_STATUS_MS 20000   /* hang guard */
#define ENGINE_WAIT_MS 30000   /* hang guard */
/* The flood: frames sent back to back by a child (at most), and the
 * daemon.status answers wanted while it runs. */
#define FLOOD_FRAMES_MAX 1000
#define FLOOD_FRAME_BYTES (8 * 1000 * 1000)
#define FLOOD_STATUS_WANTED 3
/* Flood frames taken at least (by turns zeros and garbage: the second
 * garbage frame taken means the first one's answer was checked). */
#define FLOOD_FRAMES_WANTED 4
/* The garbage frames' strings: long enough for jsonfast to splice. */
#define FLOOD_STRING_BYTES 1400
/* The exec's output: 1 MiB of 0xff. */
#define EXEC_OUT_BYTES (1024 * 1024)
/* A reply's envelope besides its base64: ids, member names, exit code,
 * duration. */
#define EXEC_ENVELOPE_BYTES 512
/* exec.output's flush period (daemon/m_exec.h EXEC_STREAM_FLUSH_MS). */
#define STREAM_FLUSH_MS 20
#define TRICKLE_BYTES 2000

/* ---- helpers ------------------------------------------------------------ */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The peak RSS (VmHWM) of pid in KiB, or -1. */
static long vm_hwm_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* The sanitizer's quarantine keeps freed memory resident (256 MiB by
 * default): kept small for these daemons, so their peak RSS is what they
 * hold, not what they freed. A no-op in a build without ASan. */
static void asan_small_quarantine(void)
{
	const char *old = getenv("ASAN_OPTIONS");
	char opts[512];

	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=4", old ? old : "", old && *old ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
}

static void daemon_up(struct msbd_proc *d, const char *const *args)
{
	asan_small_quarantine();
	msbd_start(d, args);
	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
}

/* A frame reader that reads in big chunks and keeps what follows the LF. */
struct reader {
	int fd;
	char *buf;
	size_t len, cap;
};

/* The next frame (LF excluded) as a malloc'd NUL-terminated string and its
 * length, or NULL on EOF or after timeout_ms. */
static char *reader_next(struct reader *r, int timeout_ms, size_t *ret_len)
{
	long deadline = now_ms() + timeout_ms;
	size_t scanned = 0;

	for (;;) {
		char *lf = r->len > scanned ? memchr(r->buf + scanned, '\n', r->len - scanned) : NULL;
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		long left;
		ssize_t n;

		if (lf) {
			size_t k = (size_t)(lf - r->buf);
			char *line = malloc(k + 1);

			ck_assert_ptr_nonnull(line);
			memcpy(line, r->buf, k);
			line[k] = '\0';
			memmove(r->buf, lf + 1, r->len - k - 1);
			r->len -= k + 1;
			*ret_len = k;
			return line;
		}
		scanned = r->len;
		left = deadline - now_ms();
		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
			return NULL;
		if (r->cap - r->len < 65536) {
			r->cap = r->cap ? r->cap * 2 : 1 << 20;
			r->buf = realloc(r->buf, r->cap);
			ck_assert_ptr_nonnull(r->buf);
		}
		n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n <= 0)
			return NULL;
		r->len += (size_t)n;
	}
}

/* The next frame, parsed (asserted JSON); its raw length in *ret_len. */
static json_t *reader_json(struct reader *r, int timeout_ms, size_t *ret_len)
{
	size_t len = 0;
	char *line = reader_next(r, timeout_ms, &len);
	json_t *j;

	if (!line)
		return NULL;
	j = json_loadb(line, len, 0, NULL);
	ck_assert_msg(j, "the daemon sent a frame that is not JSON: %.200s", line);
	free(line);
	if (ret_len)
		*ret_len = len;
	return j;
}

static void reader_release(struct reader *r)
{
	free(r->buf);
	r->buf = NULL;
	r->len = r->cap = 0;
}

enum shape {
	SHAPE_ZEROS,     /* [0,0,...] */
	SHAPE_STRINGS,   /* ["","",...] */
	SHAPE_KEYS,      /* {"k0":0,"k1":0,...} */
	SHAPE_NESTED,    /* [[[[... (2 MB of them; a frame need not be valid JSON) */
	SHAPE_SPACES,    /* 0 and spaces */
	SHAPE_LONG_KEY,  /* {"kkkk...":0} */
	SHAPE_STRING,    /* "aaaa...": admitted, then an unknown param */
	_SHAPE_MAX,
};

static const char *const shape_names[] = {
	"flat zeros", "small strings", "object keys", "nested arrays", "whitespace", "one long key",
	"one long string",
};

/* daemon.status {junk: <shape of about bytes>} with id, LF-terminated. */
static char *frame_of(enum shape shape, size_t bytes, int id, size_t *ret_len)
{
	char *b = malloc(bytes + 256);
	size_t n;

	ck_assert_ptr_nonnull(b);
	n = (size_t)sprintf(b, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.status\",\"params\":{\"junk\":",
			    id);
	switch (shape) {
	case SHAPE_ZEROS:
	case SHAPE_STRINGS:
		b[n++] = '[';
		while (n < bytes) {
			memcpy(b + n, shape == SHAPE_ZEROS ? "0," : "\"\",", shape == SHAPE_ZEROS ? 2 : 3);
			n += shape == SHAPE_ZEROS ? 2 : 3;
		}
		b[n - 1] = ']';
		break;
	case SHAPE_KEYS:
		b[n++] = '{';
		for (size_t i = 0; n < bytes; i++)
			n += (size_t)sprintf(b + n, "\"k%zu\":0,", i);
		b[n - 1] = '}';
		break;
	case SHAPE_NESTED:
		memset(b + n, '[', bytes / 10);
		n += bytes / 10;
		break;
	case SHAPE_SPACES:
		b[n++] = '0';
		memset(b + n, ' ', bytes - n);
		n = bytes;
		break;
	case SHAPE_LONG_KEY:
	case SHAPE_STRING:
		if (shape == SHAPE_LONG_KEY)
			b[n++] = '{';
		b[n++] = '"';
		memset(b + n, 'a', bytes - n);
		n = bytes;
		b[n++] = '"';
		if (shape == SHAPE_LONG_KEY) {
			memcpy(b + n, ":0}", 3);
			n += 3;
		}
		break;
	default:
		ck_abort();
	}
	memcpy(b + n, "}}\n", 3);
	n += 3;
	*ret_len = n;
	return b;
}

/* What the daemon answers the shape with: the limit a ParseError names, or
 * 0 for an admitted frame (InvalidParams, the unknown param "junk"). */
static long shape_limit(enum shape shape)
{
	switch (shape) {
	case SHAPE_ZEROS:
	case SHAPE_STRINGS:
	case SHAPE_KEYS:
		return MSB_JSON_MAX_VALUES;
	case SHAPE_NESTED:
		return MSB_JSON_MAX_DEPTH;
	case SHAPE_SPACES:
	case SHAPE_LONG_KEY:
		return (long)MSB_JSON_MAX_STRUCTURE_BYTES;
	default:
		return 0;
	}
}

/* Sends the whole frame on fd (blocking; the daemon reads as it comes). */
static void send_frame(int fd, const char *frame, size_t len)
{
	raw_send(fd, frame, len);
}

/* daemon.status on a connection of its own, answered (asserted); returns
 * its requests.total. */
static json_int_t status_total(const char *sock)
{
	int code = 0;
	json_t *r = call(sock, "daemon.status", NULL, &code, NULL);
	json_int_t total;

	ck_assert_msg(r, "daemon.status failed: %d", code);
	total = jint(r, "requests.total");
	json_decref(r);
	return total;
}

/* ---- finding 4: JSON amplification ------------------------------------ */

START_TEST(json_amplification_is_refused_before_parsing)
{
	struct msbd_proc d = { 0 };
	struct reader rd = { 0 };
	long base_kib, peak_kib;
	json_t *r;

	daemon_up(&d, NULL);
	rd.fd = raw_connect(d.sock);
	ck_assert_int_ge(rd.fd, 0);
	json_decref(call(d.sock, "daemon.status", NULL, NULL, NULL));
	base_kib = vm_hwm_kib(d.pid);
	ck_assert_int_gt(base_kib, 0);

	for (int s = 0; s < _SHAPE_MAX; s++) {
		size_t len;
		char *frame = frame_of((enum shape)s, WIRE_FRAME_BYTES, 100 + s, &len);
		const char *type;

		send_frame(rd.fd, frame, len);
		free(frame);
		r = reader_json(&rd, WIRE_REPLY_MS, NULL);
		if (!r)
			msbd_dump_log(&d);
		ck_assert_msg(r, "%s: no answer", shape_names[s]);
		type = jstr(r, "error.data.type");
		if (shape_limit((enum shape)s)) {
			ck_assert_msg(type && !strcmp(type, "ParseError") && jint(r, "error.code") == -32700,
				      "%s: not a ParseError", shape_names[s]);
			ck_assert_msg(jint(r, "error.data.limit") == shape_limit((enum shape)s),
				      "%s: data.limit %lld, want %ld", shape_names[s],
				      (long long)jint(r, "error.data.limit"), shape_limit((enum shape)s));
			ck_assert_msg(json_is_null(jget(r, "id")), "%s: id not null", shape_names[s]);
		} else {
			/* Parsed (cheaply: one string) and refused for what it is. */
			ck_assert_msg(type && !strcmp(type, "InvalidParams") && jint(r, "id") == 100 + s,
				      "%s: not InvalidParams for its own id", shape_names[s]);
			ck_assert_str_eq(jstr(r, "error.data.field"), "junk");
		}
		json_decref(r);
		/* The connection stays usable. */
		raw_request_send(rd.fd, 200 + s, "daemon.status", json_object());
		r = reader_json(&rd, WIRE_REPLY_MS, NULL);
		ck_assert_msg(r && jint(r, "id") == 200 + s && jget(r, "result.daemon.pid"),
			      "%s: the connection does not answer daemon.status after it", shape_names[s]);
		json_decref(r);
	}
	peak_kib = vm_hwm_kib(d.pid);
	fprintf(stderr, "hostile_wire: %d frames of %d bytes: daemon peak RSS %ld -> %ld KiB (+%ld, bound %d)\n",
		_SHAPE_MAX, WIRE_FRAME_BYTES, base_kib, peak_kib, peak_kib - base_kib, WIRE_RSS_BOUND_KIB);
	ck_assert_msg(peak_kib - base_kib < WIRE_RSS_BOUND_KIB,
		      "the daemon's peak RSS grew by %ld KiB for frames of %d bytes (bound %d KiB)",
		      peak_kib - base_kib, WIRE_FRAME_BYTES, WIRE_RSS_BOUND_KIB);
	close(rd.fd);
	reader_release(&rd);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* A daemon.status request of about bytes whose params hold strings of
 * FLOOD_STRING_BYTES (admitted by the pre-scan: few values, no structure),
 * then an 'x' after the frame's object: invalid JSON only at its end (the
 * frame's LF included in *ret_len). */
static char *garbage_frame_of(size_t bytes, int id, size_t *ret_len)
{
	char *b = malloc(bytes + FLOOD_STRING_BYTES + 256);
	size_t n;

	ck_assert_ptr_nonnull(b);
	n = (size_t)sprintf(b, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.status\",\"params\":{\"junk\":[",
			    id);
	while (n < bytes) {
		b[n++] = '"';
		memset(b + n, 'a', FLOOD_STRING_BYTES);
		n += FLOOD_STRING_BYTES;
		b[n++] = '"';
		b[n++] = ',';
	}
	n--;
	n += (size_t)sprintf(b + n, "]}}x\n");
	*ret_len = n;
	return b;
}

/* A child sends frames back to back (reading each answer), by turns of
 * zeros (over the value limit) and of long strings with trailing garbage
 * (admitted, then invalid at its end), until it is stopped or has sent
 * FLOOD_FRAMES_MAX; it exits 3 as soon as one is not answered ParseError
 * (for the garbage: jansson's "end of file expected"). */
static void flood_child(const char *sock)
{
	struct reader rd = { 0 };
	size_t len, garbage_len;
	char *frame = frame_of(SHAPE_ZEROS, FLOOD_FRAME_BYTES, 1, &len);
	char *garbage = garbage_frame_of(FLOOD_FRAME_BYTES, 2, &garbage_len);

	/* Check's handler would pass a SIGTERM on to the whole test. */
	signal(SIGTERM, SIG_DFL);
	rd.fd = raw_connect(sock);
	if (rd.fd < 0)
		_exit(2);
	for (int i = 0; i < FLOOD_FRAMES_MAX; i++) {
		json_t *r;
		const char *type;

		const char *detail;

		if (i % 2)
			send_frame(rd.fd, garbage, garbage_len);
		else
			send_frame(rd.fd, frame, len);
		r = reader_json(&rd, WIRE_REPLY_MS, NULL);
		type = r ? jstr(r, "error.data.type") : NULL;
		detail = r ? jstr(r, "error.data.detail") : NULL;
		if (!type || strcmp(type, "ParseError")) {
			fprintf(stderr, "hostile_wire: flood frame %d answered %s\n", i,
				r ? json_dumps(r, JSON_COMPACT) : "(nothing)");
			_exit(3);
		}
		if (i % 2 && (!detail || !strstr(detail, "end of file expected") ||
			      jint(r, "error.data.position") != (json_int_t)garbage_len - 1)) {
			fprintf(stderr, "hostile_wire: garbage frame %d answered %s\n", i, json_dumps(r, JSON_COMPACT));
			_exit(4);
		}
		json_decref(r);
	}
	_exit(0);
}

START_TEST(status_is_answered_while_a_client_floods_frames)
{
	struct msbd_proc d = { 0 };
	int answered = 0, status = -1;
	json_int_t before, flood_seen = 0;
	long deadline, base_kib, peak_kib;
	pid_t child;

	daemon_up(&d, NULL);
	before = status_total(d.sock);
	base_kib = vm_hwm_kib(d.pid);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		flood_child(d.sock);
	/* Each answer is a state; the request count between two of them says
	 * the flood's frames were taken meanwhile. */
	deadline = now_ms() + WIRE_REPLY_MS * 2;
	while ((answered < FLOOD_STATUS_WANTED || flood_seen < FLOOD_FRAMES_WANTED) && now_ms() < deadline) {
		json_int_t total = status_total(d.sock);

		if (waitpid(child, &status, WNOHANG) == child)
			break;
		if (total > before + 1) {
			answered++;
			flood_seen += total - before - 1;
		}
		before = total;
	}
	if (status == -1) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	ck_assert_msg((WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
		      (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL),
		      "the flooding client did not get a ParseError for every frame, or jansson's error at the end of a garbage one (status %#x)", status);
	peak_kib = vm_hwm_kib(d.pid);
	fprintf(stderr, "hostile_wire: daemon.status answered %d times while %lld flood frames were taken; "
		"peak RSS +%ld KiB\n", answered, (long long)flood_seen, peak_kib - base_kib);
	ck_assert_msg(flood_seen >= FLOOD_FRAMES_WANTED, "only %lld flood frames were taken (want %d)",
		      (long long)flood_seen, FLOOD_FRAMES_WANTED);
	ck_assert_msg(answered >= FLOOD_STATUS_WANTED,
		      "daemon.status was answered between flood frames only %d times (want %d)", answered,
		      FLOOD_STATUS_WANTED);
	ck_assert_msg(peak_kib - base_kib < 3 * (FLOOD_FRAME_BYTES / 1024) + WIRE_RSS_SLACK_KIB,
		      "the daemon's peak RSS grew by %ld KiB under the flood", peak_kib - base_kib);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- the exec reply: each output byte once -------------------------- */

/* Acquires a sandbox of this run (key scope run_id-wire) into sandbox. */
static void acquire(const char *sock, char *sandbox, size_t size)
{
	char scope[64];
	int code = 0;
	json_t *r;

	snprintf(scope, sizeof(scope), "%s-wire", hostile_run_id);
	r = call(sock, "sandbox.acquire",
		 json_pack("{s:{s:s, s:s, s:s}, s:o}", "key", "scope", scope, "thread_id", "t", "agent_dir",
			   "a", "spec", hostile_spec()),
		 &code, NULL);
	ck_assert_msg(r, "sandbox.acquire failed: %d", code);
	snprintf(sandbox, size, "%s", jstr(r, "sandbox"));
	json_decref(r);
}

/* Sends sandbox.exec {sandbox, command, timeout_seconds, extra...} on rd,
 * and returns its reply (and its raw length); exec.output notifications
 * before it are counted and their bytes appended to *streamed. */
static json_t *exec_raw(struct reader *rd, const char *sandbox, const char *command, json_t *extra,
			size_t *ret_len, size_t *ret_notes, size_t *ret_streamed, size_t *ret_note_bytes)
{
	json_t *params = json_pack("{s:s, s:s, s:i}", "sandbox", sandbox, "command", command,
				   "timeout_seconds", 60);
	json_t *r;
	size_t len = 0;

	if (extra)
		json_object_update(params, extra);
	json_decref(extra);
	raw_request_send(rd->fd, 7, "sandbox.exec", params);
	*ret_notes = *ret_streamed = *ret_note_bytes = 0;
	while ((r = reader_json(rd, WIRE_REPLY_MS, &len)) && json_object_get(r, "method")) {
		const char *b64 = jstr(r, "params.data_b64");

		ck_assert_str_eq(jstr(r, "method"), "exec.output");
		ck_assert_msg(b64, "an exec.output without data_b64");
		/* Each byte once: only id, stream and data_b64. */
		ck_assert_uint_eq(json_object_size(jget(r, "params")), 3);
		(*ret_notes)++;
		*ret_streamed += strlen(b64) / 4 * 3 - (strstr(b64, "==") ? 2 : strchr(b64, '=') ? 1 : 0);
		*ret_note_bytes += len;
		json_decref(r);
	}
	ck_assert_msg(r, "no reply to sandbox.exec");
	ck_assert_msg(jget(r, "result"), "sandbox.exec failed: %s", jstr(r, "error.message"));
	*ret_len = len;
	return r;
}

START_TEST(an_exec_reply_carries_each_byte_once)
{
	static const char command[] = "head -c 1048576 /dev/zero | tr '\\000' '\\377'";
	const size_t b64_bytes = (EXEC_OUT_BYTES + 2) / 3 * 4;
	struct msbd_proc d = { 0 };
	struct reader rd = { 0 };
	char sandbox[80], trickle[128];
	size_t len, notes, streamed, note_bytes;
	json_t *r, *text;

	daemon_up(&d, NULL);
	acquire(d.sock, sandbox, sizeof(sandbox));
	rd.fd = raw_connect(d.sock);
	ck_assert_int_ge(rd.fd, 0);

	/* The default: base64 only, the frame 4/3 of the output and an envelope. */
	r = exec_raw(&rd, sandbox, command, NULL, &len, &notes, &streamed, &note_bytes);
	ck_assert_int_eq(jint(r, "result.exit_code"), 0);
	ck_assert_uint_eq(json_string_length(jget(r, "result.stdout_b64")), b64_bytes);
	/* 1 MiB is not a multiple of 3: the last group is padded. */
	ck_assert_str_eq(jstr(r, "result.stdout_b64") + b64_bytes - 8, "/////w==");
	ck_assert_ptr_null(jget(r, "result.stdout_text"));
	ck_assert_ptr_null(jget(r, "result.stderr_text"));
	fprintf(stderr, "hostile_wire: exec of %d bytes of 0xff: reply frame %zu bytes (bound %zu)\n",
		EXEC_OUT_BYTES, len, b64_bytes + EXEC_ENVELOPE_BYTES);
	ck_assert_msg(len <= b64_bytes + EXEC_ENVELOPE_BYTES, "the reply frame is %zu bytes for %d bytes of output",
		      len, EXEC_OUT_BYTES);
	json_decref(r);

	/* text: true — the views too: 1 MiB of U+FFFD, 3 bytes each. */
	r = exec_raw(&rd, sandbox, command, json_pack("{s:b}", "text", 1), &len, &notes, &streamed, &note_bytes);
	text = jget(r, "result.stdout_text");
	ck_assert_msg(json_is_string(text) && json_string_length(text) == 3 * EXEC_OUT_BYTES,
		      "stdout_text is not 1 MiB of U+FFFD");
	ck_assert_int_eq(memcmp(json_string_value(text), "\xef\xbf\xbd", 3), 0);
	ck_assert_str_eq(jstr(r, "result.stderr_text"), "");
	ck_assert_uint_le(len, b64_bytes + 3 * EXEC_OUT_BYTES + EXEC_ENVELOPE_BYTES);
	json_decref(r);

	/* stream: true — the notifications carry each byte once (base64), no view. */
	r = exec_raw(&rd, sandbox, command, json_pack("{s:b}", "stream", 1), &len, &notes, &streamed, &note_bytes);
	ck_assert_uint_eq(streamed, EXEC_OUT_BYTES);
	ck_assert_ptr_null(jget(r, "result.stdout_text"));
	ck_assert_msg(note_bytes <= b64_bytes + notes * 128, "%zu notifications of %zu bytes in all", notes,
		      note_bytes);
	json_decref(r);

	/* A byte at a time: merged, one notification per flush period and
	 * stream at most, not one per byte. */
	snprintf(trickle, sizeof(trickle), "i=0; while [ $i -lt %d ]; do printf x; i=$((i+1)); done",
		 TRICKLE_BYTES);
	r = exec_raw(&rd, sandbox, trickle, json_pack("{s:b}", "stream", 1), &len, &notes, &streamed, &note_bytes);
	ck_assert_uint_eq(streamed, TRICKLE_BYTES);
	fprintf(stderr, "hostile_wire: %d one-byte writes in %lld ms: %zu notifications\n", TRICKLE_BYTES,
		(long long)jint(r, "result.duration_ms"), notes);
	ck_assert_msg(notes <= 2 * ((size_t)jint(r, "result.duration_ms") / STREAM_FLUSH_MS + 2),
		      "%zu notifications in %lld ms: more than one a stream per %d ms", notes,
		      (long long)jint(r, "result.duration_ms"), STREAM_FLUSH_MS);
	ck_assert_uint_lt(notes, TRICKLE_BYTES);
	json_decref(r);

	close(rd.fd);
	reader_release(&rd);
	snprintf(trickle, sizeof(trickle), "%s-wire", hostile_run_id);
	json_decref(call(d.sock, "sandbox.dispose",
			 json_pack("{s:{s:s, s:s, s:s}}", "key", "scope", trickle, "thread_id", "t", "agent_dir", "a"),
			 NULL, NULL));
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

TCase *hostile_wire_tcase(void)
{
	TCase *tc = tcase_create("wire");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, json_amplification_is_refused_before_parsing);
	tcase_add_test(tc, status_is_answered_while_a_client_floods_frames);
	tcase_add_test(tc, an_exec_reply_carries_each_byte_once);
	return tc;
}
