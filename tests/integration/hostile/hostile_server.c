/* hostile_server.c — see hostile.h.
 *
 * Finding 1 (reply memory), the mem_ tests: clients pipeline calls whose
 * replies are large and never read them. The daemon must admit those calls
 * against its reply budgets (limits.conn_reply_budget_bytes,
 * limits.reply_budget_bytes) before they run and park the rest, so its
 * peak RSS stays under the formula of PROTOCOL.md "Memory" evaluated with
 * the test's limits; every reply must still arrive whole once the client
 * reads; and the memory must go back once it is idle. State is observed
 * (daemon.status memory, /proc/PID/status), never timed: the waits are
 * hang guards. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"

#define MIB (1024L * 1024)
#define MEM_ENGINE_WAIT_MS 15000
#define MEM_STATE_WAIT_MS  120000   /* hang guard: a state the daemon must reach */
#define MEM_READ_WAIT_MS   300000   /* hang guard: every reply read */
#define MEM_IDLE_WAIT_MS   30000    /* hang guard: the memory given back */
#define MEM_CONNS          3
/* What daemon.status is charged (it is in flight while it reports): its
 * bound and its request. */
#define MEM_STATUS_CHARGE  (128 * 1024)

static long mem_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One line of /proc/PID/status (VmRSS, VmHWM), in bytes; -1 if absent. */
static long mem_proc_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10) * 1024;
			break;
		}
	fclose(f);
	return v;
}

/* The limits a test runs its daemon with. */
struct mem_limits {
	long file_bytes;        /* files.max_file_bytes and files.max_total_bytes */
	long frame_bytes;       /* limits.max_frame_bytes = limits.buffer_budget_bytes */
	long conn_budget;       /* limits.conn_reply_budget_bytes */
	long budget;            /* limits.reply_budget_bytes */
	long exec_output;       /* exec.max_output_bytes */
	long max_reply;         /* the largest reply bound under them (replybound_max) */
};

/* PROTOCOL.md "Memory": base + buffer_budget + k × max_frame_bytes (k = 2:
 * a frame of one large string parsed; this test sends no other) +
 * reply_budget + 2 × the largest reply (the one being encoded) + what
 * max_connections × 128 KiB of small idle calls may add (none here). The
 * allocator's own slack and the sanitizer's quarantine are bounded by
 * MEM_SLACK. */
#define MEM_SLACK (48 * MIB)
/* What an idle daemon may keep over its base after the burst (the
 * sanitizer's 4 MiB quarantine, the allocator's free lists). Measured: back
 * to base within 0.3 MiB without sanitizers. */
#define MEM_IDLE_SLACK (24 * MIB)

static long mem_formula(const struct mem_limits *l, long base)
{
	return base + l->frame_bytes + 2 * l->frame_bytes + l->budget + 2 * l->max_reply + MEM_SLACK;
}

/* A daemon on plane with the limits, engine reachable. The sanitizer's
 * quarantine (which keeps freed memory mapped, 256 MiB by default) is made
 * small: the test measures the daemon, not ASan. */
static void mem_daemon_up(struct msbd_proc *p, const char *plane, const struct mem_limits *l)
{
	static char args[8][64];
	const char *asan = getenv("ASAN_OPTIONS");
	char opts[512];
	const char *argv[32];
	size_t n = 0, k = 0;

	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=4", asan ? asan : "", asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
	setenv("MSB_FILE_PLANE", plane, 1);
#define SET(fmt, v) (snprintf(args[k], sizeof(args[k]), fmt, v), argv[n++] = "--set", argv[n++] = args[k++])
	SET("files.max_file_bytes=%ld", l->file_bytes);
	SET("files.max_total_bytes=%ld", l->file_bytes);
	SET("files.max_files=%d", 4);
	SET("limits.max_frame_bytes=%ld", l->frame_bytes);
	SET("limits.buffer_budget_bytes=%ld", l->frame_bytes);
	SET("limits.conn_reply_budget_bytes=%ld", l->conn_budget);
	SET("limits.reply_budget_bytes=%ld", l->budget);
	SET("exec.max_output_bytes=%ld", l->exec_output);
#undef SET
	argv[n] = NULL;
	msbd_start(p, argv);
	json_decref(wait_engine_state(p->sock, "reachable", MEM_ENGINE_WAIT_MS));
}

static json_t *mem_status(const struct msbd_proc *p)
{
	int code = 0;
	json_t *st = call(p->sock, "daemon.status", NULL, &code, NULL);

	ck_assert_msg(st && code == 0, "daemon.status failed (%d)", code);
	return st;
}

static void mem_acquire(const struct msbd_proc *p, const char *agent, char *out, size_t size)
{
	int code = 0;
	json_t *key = json_pack("{s:s, s:s, s:s}", "scope", hostile_run_id, "thread_id", "mem", "agent_dir", agent);
	json_t *r = call(p->sock, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key, "spec", hostile_spec()),
			 &code, NULL);

	ck_assert_msg(r && code == 0, "sandbox.acquire failed (%d)", code);
	snprintf(out, size, "%s", jstr(r, "sandbox"));
	json_decref(r);
}

static void mem_dispose(const struct msbd_proc *p, const char *agent)
{
	int code = 0;
	json_t *key = json_pack("{s:s, s:s, s:s}", "scope", hostile_run_id, "thread_id", "mem", "agent_dir", agent);

	json_decref(call(p->sock, "sandbox.dispose", json_pack("{s:o}", "key", key), &code, NULL));
	ck_assert_int_eq(code, 0);
}

/* ---- a buffered frame reader for large replies (raw_recv reads a byte at a time) ---- */

struct mem_reader {
	int fd;
	char *buf;
	size_t len, cap;
	int replies;
	bool eof;
};

/* A frame handler: the frame (LF excluded) as received. */
typedef void mem_frame_fn(struct mem_reader *r, const char *frame, size_t len, void *arg);

/* Reads what is there (fd readable) and hands each complete frame to fn. */
static void mem_reader_pump(struct mem_reader *r, mem_frame_fn *fn, void *arg)
{
	char *lf;

	if (r->cap - r->len < 1024 * 1024) {
		r->cap = r->cap ? r->cap * 2 : 4 * MIB;
		r->buf = realloc(r->buf, r->cap);
		ck_assert_ptr_nonnull(r->buf);
	}
	{
		ssize_t n = recv(r->fd, r->buf + r->len, r->cap - r->len, MSG_DONTWAIT);

		if (n == 0)
			r->eof = true;
		if (n <= 0)
			return;
		r->len += (size_t)n;
	}
	while ((lf = memchr(r->buf, '\n', r->len))) {
		size_t flen = (size_t)(lf - r->buf);

		fn(r, r->buf, flen, arg);
		memmove(r->buf, lf + 1, r->len - flen - 1);
		r->len -= flen + 1;
	}
}

/* Reads from every connection until each has `want` replies (or the guard). */
static void mem_read_all(struct mem_reader *rs, int n, int want, mem_frame_fn *fn, void *arg)
{
	long deadline = mem_now_ms() + MEM_READ_WAIT_MS;

	for (;;) {
		struct pollfd pfd[MEM_CONNS];
		int done = 0;

		for (int i = 0; i < n; i++) {
			pfd[i] = (struct pollfd){ .fd = rs[i].fd, .events = POLLIN };
			done += rs[i].replies >= want;
			ck_assert_msg(!rs[i].eof, "connection %d closed after %d replies", i, rs[i].replies);
		}
		if (done == n)
			return;
		ck_assert_msg(mem_now_ms() < deadline, "replies still missing after %d ms", MEM_READ_WAIT_MS);
		if (poll(pfd, (nfds_t)n, 1000) <= 0)
			continue;
		for (int i = 0; i < n; i++)
			if (pfd[i].revents)
				mem_reader_pump(&rs[i], fn, arg);
	}
}

/* Connects with a 4 KiB receive buffer, like the attack run. */
static int mem_connect(const struct msbd_proc *p)
{
	int fd = raw_connect(p->sock), sz = 4096;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz)), 0);
	return fd;
}

/* Sends `count` requests (ids 1..count) in one write. params borrowed. */
static void mem_pipeline(int fd, int count, const char *method, json_t *params)
{
	size_t cap = 0, len = 0;
	char *all = NULL;

	for (int i = 1; i <= count; i++) {
		json_t *req = json_pack("{s:s, s:I, s:s, s:O}", "jsonrpc", "2.0", "id", (json_int_t)i, "method", method,
					"params", params);
		char *s = json_dumps(req, JSON_COMPACT);
		size_t sl = strlen(s);

		if (len + sl + 2 > cap) {
			cap = (len + sl + 2) * 2;
			all = realloc(all, cap);
		}
		memcpy(all + len, s, sl);
		len += sl;
		all[len++] = '\n';
		free(s);
		json_decref(req);
	}
	raw_send(fd, all, len);
	free(all);
}

/* Waits until daemon.status shows that at least `parked` calls were
 * parked, none is in flight but itself, nothing reserved but itself, and
 * at least `queued` bytes of replies are queued: every admitted reply is
 * queued, the rest waits (parked, or, once a reply is queued on its
 * connection, held by the queued-output pause). Returns that status. */
static json_t *mem_wait_parked(const struct msbd_proc *p, json_int_t parked, long queued)
{
	long deadline = mem_now_ms() + MEM_STATE_WAIT_MS;

	for (;;) {
		json_t *st = mem_status(p);

		/* daemon.status is itself in flight, charged its bound. */
		if (jint(st, "memory.parked_total") >= parked && jint(st, "requests.in_flight") == 1 &&
		    jint(st, "memory.reply_reserved_bytes") < MEM_STATUS_CHARGE &&
		    jint(st, "memory.reply_queued_bytes") >= queued)
			return st;
		if (mem_now_ms() > deadline) {
			char *s = json_dumps(jget(st, "memory"), JSON_COMPACT);

			msbd_dump_log(p);
			ck_abort_msg("the daemon did not settle with %lld calls parked: %s", (long long)parked, s);
		}
		json_decref(st);
		usleep(100 * 1000);
	}
}

/* After the burst: nothing charged, the daemon has trimmed its heap, and
 * the RSS is back under base + slack. */
static void mem_wait_idle(const struct msbd_proc *p, long base)
{
	long deadline = mem_now_ms() + MEM_IDLE_WAIT_MS, rss;
	json_t *st;

	for (;;) {
		st = mem_status(p);
		rss = mem_proc_kb(p->pid, "VmRSS");
		if (jint(st, "memory.reply_reserved_bytes") < MEM_STATUS_CHARGE && jint(st, "memory.reply_queued_bytes") == 0 &&
		    jint(st, "memory.parked_calls") == 0 && jint(st, "memory.malloc_trims") >= 1 &&
		    rss <= base + MEM_IDLE_SLACK)
			break;
		ck_assert_msg(mem_now_ms() < deadline, "idle memory not given back: VmRSS %ld MiB, base %ld MiB "
			      "(memory %s)", rss / MIB, base / MIB, json_dumps(jget(st, "memory"), JSON_COMPACT));
		json_decref(st);
		usleep(200 * 1000);
	}
	fprintf(stderr, "idle: VmRSS %ld KiB (base %ld KiB)\n", rss / 1024, base / 1024);
	ck_assert_int_eq(jint(st, "memory.replies_over_bound"), 0);
	json_decref(st);
}

/* A large result frame checked without parsing it (a JSON parse of 96
 * frames of 22 MB is most of the test's time under the sanitizers):
 * {"jsonrpc":"2.0","id":N,"result":{…"<member>":"<b64>"…,"<size_member>":<size>…}}
 * with the member's string exactly b64. Small frames (errors) are parsed
 * and shown. Returns the id. */
static json_int_t mem_check_frame(const char *frame, size_t len, const char *member, const char *b64,
				  const char *size_member, long size, const char *what)
{
	char key[64], sz[64];
	const char *id, *v;
	size_t n = strlen(b64);

	if (len < 1024 * 1024) {
		json_t *j = json_loadb(frame, len, 0, NULL);

		ck_abort_msg("%s: a small frame where a large result was due: %s", what,
			     j ? json_dumps(j, JSON_COMPACT) : "(not JSON)");
	}
	ck_assert_msg(frame[0] == '{' && frame[len - 1] == '}', "%s: the frame is not whole", what);
	ck_assert_msg(strncmp(frame, "{\"jsonrpc\":\"2.0\",", 17) == 0, "%s: not a JSON-RPC reply", what);
	id = memmem(frame, 64, "\"id\":", 5);
	ck_assert_msg(id, "%s: no id", what);
	ck_assert_msg(memmem(frame, 128, "\"result\":{", 10), "%s: not a result", what);
	snprintf(key, sizeof(key), "\"%s\":\"", member);
	v = memmem(frame, len, key, strlen(key));
	ck_assert_msg(v, "%s: no %s", what, member);
	v += strlen(key);
	ck_assert_msg((size_t)(frame + len - v) > n && memcmp(v, b64, n) == 0 && v[n] == '"',
		      "%s: %s differs from what was written", what, member);
	if (size_member) {
		snprintf(sz, sizeof(sz), "\"%s\":%ld", size_member, size);
		ck_assert_msg(memmem(frame, len, sz, strlen(sz)), "%s: no %s", what, sz);
	}
	return strtoll(id + 5, NULL, 10);
}

/* ---- files.read: the attack in miniature ---- */

struct mem_read_check {
	const char *b64;        /* the file's content, base64 */
	long size;
	unsigned char seen[MEM_CONNS][64];
	struct mem_reader *rs;
	const char *sandbox;
	const struct msbd_proc *d;
};

static void mem_read_reply(struct mem_reader *r, const char *frame, size_t len, void *arg)
{
	struct mem_read_check *ck = arg;
	int conn = (int)(r - ck->rs);
	json_int_t id;
	char what[64];

	snprintf(what, sizeof(what), "reply %d on connection %d", r->replies + 1, conn);
	if (len < 1024 * 1024) {
		/* An error: say what became of the sandbox (the engine is shared). */
		char *state = sh_out("docker inspect -f '{{.State.Status}}' %s 2>&1", ck->sandbox);

		msbd_dump_log(ck->d);
		ck_abort_msg("%s is not a result: %.*s (the sandbox: %s)", what, (int)len, frame, state);
	}
	id = mem_check_frame(frame, len, "content_b64", ck->b64, "size", ck->size, what);
	ck_assert(id >= 1 && id < 64 && !ck->seen[conn][id]);
	ck->seen[conn][id] = 1;
	r->replies++;
}

/* n connections each pipeline `calls` files.read of one file of
 * l->file_bytes and never read; the daemon settles with `parked` calls
 * parked; then every reply is read and checked, and the memory goes back. */
static void mem_reads(const char *plane, const struct mem_limits *l, int calls, json_int_t parked)
{
	struct msbd_proc d = { 0 };
	struct mem_reader rs[MEM_CONNS] = { 0 };
	struct mem_read_check ck = { .size = l->file_bytes, .rs = rs };
	char sb[96];
	unsigned char *content = malloc((size_t)l->file_bytes);
	char *b64;
	json_t *params, *st, *r;
	long base, hwm, bound;
	int code = 0;

	for (long i = 0; i < l->file_bytes; i++)
		content[i] = (unsigned char)(i * 131 + (i >> 12));
	b64 = harness_b64_encode(content, (size_t)l->file_bytes);
	ck.b64 = b64;
	mem_daemon_up(&d, plane, l);
	mem_acquire(&d, "reads", sb, sizeof(sb));
	ck.sandbox = sb;
	ck.d = &d;
	st = mem_status(&d);
	ck_assert_str_eq(jstr(st, "file_plane"), plane);
	json_decref(st);
	base = mem_proc_kb(d.pid, "VmRSS");
	ck_assert_int_gt(base, 0);

	/* The file, written through the daemon in one frame. */
	r = call(d.sock, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", sb, "path", "big.bin",
						  "content_b64", b64), &code, NULL);
	ck_assert_msg(r && code == 0, "files.write failed (%d)", code);
	json_decref(r);

	params = json_pack("{s:s, s:s}", "sandbox", sb, "path", "big.bin");
	for (int i = 0; i < MEM_CONNS; i++) {
		rs[i].fd = mem_connect(&d);
		mem_pipeline(rs[i].fd, calls, "files.read", params);
	}
	json_decref(params);

	/* The budget spent (at least 3 replies queued; 4 fit), and held. */
	st = mem_wait_parked(&d, parked, 3 * (l->file_bytes / 3 * 4) - 2 * MIB);
	ck_assert_int_le(jint(st, "memory.reply_queued_bytes"), l->budget);
	json_decref(st);
	hwm = mem_proc_kb(d.pid, "VmHWM");
	bound = mem_formula(l, base);
	fprintf(stderr, "mem_reads %s: base %ld MiB, peak %ld MiB, formula %ld MiB\n", plane, base / MIB,
		hwm / MIB, bound / MIB);
	ck_assert_msg(hwm <= bound, "peak RSS %ld MiB over the formula's %ld MiB", hwm / MIB, bound / MIB);

	/* Nothing lost: every reply, whole. */
	mem_read_all(rs, MEM_CONNS, calls, mem_read_reply, &ck);
	hwm = mem_proc_kb(d.pid, "VmHWM");
	ck_assert_msg(hwm <= bound, "peak RSS %ld MiB over the formula's %ld MiB", hwm / MIB, bound / MIB);
	mem_wait_idle(&d, base);

	for (int i = 0; i < MEM_CONNS; i++) {
		close(rs[i].fd);
		free(rs[i].buf);
	}
	mem_dispose(&d, "reads");
	free(b64);
	free(content);
	ck_assert_int_eq(msbd_stop(&d), 0);
}

/* files.read caps 16 MiB: a reply is 22.4 MB of base64, so a connection
 * takes 2 (48 MiB) and the daemon 4 (96 MiB). The first connection's 32
 * frames arrive in one read and are taken in one pass: its third is
 * parked whatever the order of the others (which may instead be held by
 * the queued-output pause once their first reply is queued). */
START_TEST(mem_local_reads_held_to_the_budget)
{
	const struct mem_limits l = {
		.file_bytes = 16 * MIB, .frame_bytes = 24 * MIB, .conn_budget = 48 * MIB, .budget = 96 * MIB,
		.exec_output = 1 * MIB, .max_reply = 22 * MIB,
	};

	mem_reads("local", &l, 32, 1);
}
END_TEST

START_TEST(mem_archive_reads_held_to_the_budget)
{
	const struct mem_limits l = {
		.file_bytes = 8 * MIB, .frame_bytes = 12 * MIB, .conn_budget = 24 * MIB, .budget = 48 * MIB,
		.exec_output = 1 * MIB, .max_reply = 11 * MIB,
	};

	mem_reads("archive", &l, 12, 1);
}
END_TEST

/* ---- sandbox.exec: 32 pipelined commands writing their cap of 0xff ---- */

struct mem_exec_check {
	const char *b64;
	unsigned char seen[64];
};

static void mem_exec_reply(struct mem_reader *r, const char *frame, size_t len, void *arg)
{
	struct mem_exec_check *ck = arg;
	json_int_t id;

	id = mem_check_frame(frame, len, "stdout_b64", ck->b64, "exit_code", 0, "an exec reply");
	ck_assert(id >= 1 && id < 64 && !ck->seen[id]);
	ck->seen[id] = 1;
	r->replies++;
}

/* exec.max_output_bytes 1 MiB of 0xff: a reply is 1.4 MB of base64 plus,
 * while the text views are sent, 3 MB of U+FFFD; its bound counts the
 * views at their worst (6 bytes a byte: 7.7 MB), so a 24 MiB connection
 * budget takes 3 at a time and parks the fourth of the first pass. */
START_TEST(mem_exec_replies_held_to_the_budget)
{
	const struct mem_limits l = {
		.file_bytes = 1 * MIB, .frame_bytes = 4 * MIB, .conn_budget = 24 * MIB, .budget = 48 * MIB,
		.exec_output = 1 * MIB, .max_reply = 8 * MIB,
	};
	struct msbd_proc d = { 0 };
	struct mem_reader rs[1] = { 0 };
	struct mem_exec_check ck = { 0 };
	unsigned char *ff = malloc((size_t)l.exec_output);
	char sb[96], cmd[128];
	json_t *params, *st;
	long base, hwm, bound;
	char *b64;

	memset(ff, 0xff, (size_t)l.exec_output);
	b64 = harness_b64_encode(ff, (size_t)l.exec_output);
	ck.b64 = b64;
	mem_daemon_up(&d, "local", &l);
	mem_acquire(&d, "execs", sb, sizeof(sb));
	base = mem_proc_kb(d.pid, "VmRSS");
	snprintf(cmd, sizeof(cmd), "head -c %ld /dev/zero | tr '\\000' '\\377'", l.exec_output);
	params = json_pack("{s:s, s:s, s:i}", "sandbox", sb, "command", cmd, "timeout_seconds", 120);
	rs[0].fd = mem_connect(&d);
	mem_pipeline(rs[0].fd, 32, "sandbox.exec", params);
	json_decref(params);

	st = mem_wait_parked(&d, 1, 3 * (l.exec_output / 3 * 4));
	ck_assert_int_le(jint(st, "memory.reply_queued_bytes"), l.conn_budget);
	json_decref(st);
	hwm = mem_proc_kb(d.pid, "VmHWM");
	bound = mem_formula(&l, base);
	fprintf(stderr, "mem_exec: base %ld MiB, peak %ld MiB, formula %ld MiB\n", base / MIB, hwm / MIB, bound / MIB);
	ck_assert_msg(hwm <= bound, "peak RSS %ld MiB over the formula's %ld MiB", hwm / MIB, bound / MIB);

	mem_read_all(rs, 1, 32, mem_exec_reply, &ck);
	mem_wait_idle(&d, base);
	close(rs[0].fd);
	free(rs[0].buf);
	mem_dispose(&d, "execs");
	free(b64);
	free(ff);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

TCase *hostile_server_tcase(void)
{
	TCase *tc = tcase_create("server");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, mem_local_reads_held_to_the_budget);
	tcase_add_test(tc, mem_archive_reads_held_to_the_budget);
	tcase_add_test(tc, mem_exec_replies_held_to_the_budget);
	return tc;
}
