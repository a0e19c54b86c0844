/* check_files.c — the file plane against the real engine: files.write,
 * files.read, files.stat, files.remove, files.reclaim, and the work dir that
 * sandbox.acquire prepares (proto/PROTOCOL.md "The file plane: files.*";
 * behaviour-core §4 and §7.1, 7.2, 7.4, 7.5, 7.8; behaviour-docker §2.3–2.8).
 *
 * The test is the trusted observer: it plants the hostile layout with
 * `docker exec` and checks what landed with `docker exec test/cat/stat`,
 * never through the daemon it is testing. The engine is asked directly
 * (GET /containers/ID/json) that no container is left paused after any test.
 *
 * Hostile layout (W = the working directory, /maf-sandbox/work):
 *   W-outside/secret.txt, W-outside/sub/leaf.txt   "the guest must not reach this\n"
 *   W/real/inside.txt                              "a legitimate output\n" (20 bytes)
 *   W/plain.txt                                    a regular file
 *   W/link-dir  -> W-outside
 *   W/link-file -> W-outside/secret.txt
 *
 * Images: Debian's static busybox imported in main() (no registry), as root,
 * as USER 1000:1000, as a named user from /etc/passwd, and as a user the
 * daemon cannot resolve. Every container carries the spec label
 * msb-it-run=<run>; main() removes them and the images whatever failed. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "../../domain/hostlock.h"
#include "msb.h"

#define ENGINE_WAIT_MS 15000      /* hang guard: the engine reachable */
#define RUN_LABEL "msb-it-run"
#define CALL_TIMEOUT_MS 120000    /* hang guard: one call's reply */
/* hang guard: a freeze seen by the engine after the call was sent (the
 * call's own copy outlasts it: seen, or the test fails) */
#define FREEZE_SEEN_MS 30000

#define BASE "/maf-sandbox"
#define W BASE "/work"
#define OUT W "-outside"
#define SECRET "the guest must not reach this\n"
#define INSIDE "a legitimate output\n"

/* Sandboxes one test may acquire (each is checked unpaused at its end). */
#define MAX_SANDBOXES 8
/* The race: calls of each kind while the guest swaps a directory for a link. */
#define RACE_CALLS 300
/* Back-to-back short calls on a busy guest. */
#define QUICK_CALLS 300
/* Deep parents: directory levels created by one write. */
#define DEEP_LEVELS 40
/* The per-call file count ceiling (PROTOCOL.md, Limits). */
#define MAX_FILES 256
/* hang guard: a container thawed after its client left (polled, never slept). */
#define THAW_WAIT_MS 30000
/* Client-leaves-mid-call: content sizes (well inside the ceilings). */
#define LEAVE_WRITE_BYTES (24u * 1024 * 1024)
#define LEAVE_READ_MIB 48
/* Lowered ceilings for the configured-limits test. */
#define LOW_FILE_BYTES 1024
#define LOW_TOTAL_BYTES 3000
#define LOW_FILES 4

static char run_id[32];
static char img_root[96], img_u1000[96], img_app[96], img_ghost[96];

/* ---- base64 (the test's own: the daemon's is what is under test) --------- */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";


static int b64_value(char c)
{
	const char *p = c ? strchr(b64_alphabet, c) : NULL;

	return p ? (int)(p - b64_alphabet) : -1;
}

/* Strict enough for a reply: padded, standard alphabet. NULL if malformed. */
static uint8_t *b64_decode(const char *s, size_t *ret_len)
{
	size_t n = strlen(s), len = 0;
	uint8_t *out;

	if (n % 4)
		return NULL;
	out = malloc(n / 4 * 3 + 1);
	ck_assert_ptr_nonnull(out);
	for (size_t i = 0; i < n; i += 4) {
		int a = b64_value(s[i]), b = b64_value(s[i + 1]);
		int c = s[i + 2] == '=' ? 0 : b64_value(s[i + 2]);
		int d = s[i + 3] == '=' ? 0 : b64_value(s[i + 3]);

		if (a < 0 || b < 0 || c < 0 || d < 0 || (s[i + 2] == '=' && s[i + 3] != '=')) {
			free(out);
			return NULL;
		}
		out[len++] = (uint8_t)(a << 2 | b >> 4);
		if (s[i + 2] != '=')
			out[len++] = (uint8_t)(b << 4 | c >> 2);
		if (s[i + 3] != '=')
			out[len++] = (uint8_t)(c << 6 | d);
	}
	*ret_len = len;
	return out;
}

/* ---- host shell and guest exec -------------------------------------------- */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static char *read_fd(int fd, size_t *ret_len)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	ck_assert_ptr_nonnull(buf);
	while ((n = read(fd, buf + len, cap - len - 1)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_int_gt(n, 0);
		len += (size_t)n;
		if (cap - len < 2) {
			buf = realloc(buf, cap *= 2);
			ck_assert_ptr_nonnull(buf);
		}
	}
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return buf;
}

/* The last guest command, for failure messages. */
static char last_guest_cmd[1024];

enum guest_flags {
	GUEST_ROOT = 1,       /* -u 0 (else the image's user) */
	GUEST_DETACH = 2,     /* -d */
};

/* docker exec [-u 0] [-d] ID sh -c CMD; returns the exit status and, if
 * wanted, stdout (malloc'd, NUL-terminated) and its length. */
static int guest_v(const char *id, int flags, char **ret_out, size_t *ret_len, const char *fmt, va_list ap)
{
	const char *argv[12];
	size_t n = 0;
	int out[2], status;
	char *o;
	pid_t pid;

	vsnprintf(last_guest_cmd, sizeof(last_guest_cmd), fmt, ap);
	argv[n++] = "docker";
	argv[n++] = "exec";
	if (flags & GUEST_ROOT) {
		argv[n++] = "-u";
		argv[n++] = "0";
	}
	if (flags & GUEST_DETACH)
		argv[n++] = "-d";
	argv[n++] = id;
	argv[n++] = "sh";
	argv[n++] = "-c";
	argv[n++] = last_guest_cmd;
	argv[n] = NULL;
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		execvp("docker", (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	o = read_fd(out[0], ret_len);
	close(out[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (ret_out)
		*ret_out = o;
	else
		free(o);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int guest(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int guest_user(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *guest_out(const char *id, size_t *ret_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* As root in the guest (the fixtures' planter and observer). */
static int guest(const char *id, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = guest_v(id, GUEST_ROOT, NULL, NULL, fmt, ap);
	va_end(ap);
	return rc;
}

/* As the image's user: what the guest program itself may do. */
static int guest_user(const char *id, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = guest_v(id, 0, NULL, NULL, fmt, ap);
	va_end(ap);
	return rc;
}

/* Starts a root command in the guest and returns at once (docker exec -d). */
static int guest_detach(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int guest_detach(const char *id, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = guest_v(id, GUEST_ROOT | GUEST_DETACH, NULL, NULL, fmt, ap);
	va_end(ap);
	return rc;
}

/* stdout of a root command in the guest, which must exit 0. */
static char *guest_out(const char *id, size_t *ret_len, const char *fmt, ...)
{
	va_list ap;
	char *out;
	int rc;

	va_start(ap, fmt);
	rc = guest_v(id, GUEST_ROOT, &out, ret_len, fmt, ap);
	va_end(ap);
	ck_assert_msg(rc == 0, "in the guest: `%s` exited %d", last_guest_cmd, rc);
	return out;
}

#define GUEST_OK(id, ...) do { \
	int rc_ = guest(id, __VA_ARGS__); \
	ck_assert_msg(rc_ == 0, "in the guest: `%s` exited %d", last_guest_cmd, rc_); \
} while (0)

/* `test` says false with 1; 2 and above is a harness error, not absence. */
#define GUEST_FALSE(id, ...) do { \
	int rc_ = guest(id, __VA_ARGS__); \
	ck_assert_msg(rc_ == 1, "in the guest: `%s` exited %d (want 1: false)", last_guest_cmd, rc_); \
} while (0)

/* A guest path's "uid:gid mode" (stat -c, never following). */
static char *owner_mode(const char *id, const char *path)
{
	char *s = guest_out(id, NULL, "stat -c '%%u:%%g %%a' '%s'", path);

	s[strcspn(s, "\n")] = '\0';
	return s;
}

#define ASSERT_OWNER_MODE(id, path, want) do { \
	char *om_ = owner_mode(id, path); \
	ck_assert_msg(strcmp(om_, want) == 0, "%s is %s, want %s", path, om_, want); \
	free(om_); \
} while (0)

#define ASSERT_GUEST_FILE(id, path, want) do { \
	size_t gl_; \
	char *g_ = guest_out(id, &gl_, "cat '%s'", path); \
	ck_assert_msg(gl_ == strlen(want) && memcmp(g_, want, gl_) == 0, "%s holds \"%s\", want \"%s\"", \
		      path, g_, want); \
	free(g_); \
} while (0)

/* ---- the daemon, the connection, the calls -------------------------------- */

struct fx {
	struct msbd_proc d;
	struct msb_conn *c;
	char scope[96];
	char id[80];                          /* the test's root sandbox, when there is one */
	char ids[MAX_SANDBOXES][80];          /* every sandbox acquired */
	size_t n_ids;
};

static struct fx fx;

/* The last call and its reply, for failure messages. */
static char last_call[640];
static char last_reply[640];
static int last_code;
static char last_message[1024];
static size_t last_message_len;     /* the whole message's, before the copy's cut */
static char last_type[64];
static json_t *last_data;

static void dump_into(char *buf, size_t size, json_t *j)
{
	size_t n = j ? json_dumpb(j, buf, size - 1, JSON_COMPACT | JSON_ENCODE_ANY) : 0;

	if (!j)
		snprintf(buf, size, "(nothing)");
	else if (n >= size - 1)
		snprintf(buf + size - 5, 5, "...");
	else
		buf[n] = '\0';
}

/* One call on the test's connection; params stolen. Returns the result
 * (new ref; json null for a null result) or NULL on an error reply, which
 * last_code / last_type / last_data / last_reply then describe. */
static json_t *rpc(const char *method, json_t *params)
{
	char p[512];
	json_t *res = NULL, *err;
	int r;

	dump_into(p, sizeof(p), params);
	snprintf(last_call, sizeof(last_call), "%s %s", method, p);
	json_decref(last_data);
	last_data = NULL;
	last_code = 0;
	last_type[0] = '\0';
	r = msb_call(fx.c, method, params, &res);
	ck_assert_msg(r == MSB_OK || r == MSB_E_REMOTE, "%s: %s", last_call, msb_strerror(r));
	if (r == MSB_OK) {
		dump_into(last_reply, sizeof(last_reply), res);
		return res;
	}
	last_code = msb_last_error_code(fx.c);
	snprintf(last_message, sizeof(last_message), "%s",
		 msb_last_error_message(fx.c) ? msb_last_error_message(fx.c) : "");
	last_message_len = msb_last_error_message(fx.c) ? strlen(msb_last_error_message(fx.c)) : 0;
	snprintf(last_type, sizeof(last_type), "%s", msb_last_error_type(fx.c) ? msb_last_error_type(fx.c) : "");
	last_data = json_deep_copy(msb_last_error_data(fx.c));
	err = json_pack("{s:i, s:s?, s:O?}", "code", last_code, "message", msb_last_error_message(fx.c),
			"data", last_data);
	dump_into(last_reply, sizeof(last_reply), err);
	json_decref(err);
	return NULL;
}

struct error_kind {
	const char *type;
	int code;
};

static const struct error_kind error_kinds[] = {
	{ "ParseError", -32700 },
	{ "InvalidParams", -32602 },
	{ "SandboxCapabilityNotSupported", 1100 },
	{ "ConfinementError", 1200 },
	{ "NotADirectoryError", 1201 },
	{ "FileNotFoundError", 1202 },
	{ "OSError", 1203 },
	{ "SandboxTransferCapExceeded", 1204 },
	{ "TimeoutError", 1205 },
	{ "SandboxNotFound", 1206 },
	{ "SandboxFreezeFailed", 1207 },
	{ "SandboxConflict", 1106 },
};

static int code_of(const char *type)
{
	for (size_t i = 0; i < sizeof(error_kinds) / sizeof(error_kinds[0]); i++)
		if (strcmp(error_kinds[i].type, type) == 0)
			return error_kinds[i].code;
	ck_abort_msg("no code for %s", type);
	return 0;
}

#define EXPECT_OK(res) ck_assert_msg((res) != NULL, "%s\n  answered %s", last_call, last_reply)

#define EXPECT_ERR(res, type) do { \
	json_t *r_ = (res); \
	ck_assert_msg(!r_ && strcmp(last_type, type) == 0 && last_code == code_of(type), \
		      "%s\n  want %s (%d), answered %s", last_call, type, code_of(type), last_reply); \
} while (0)

/* The error's data.path names the path as the caller gave it. */
#define EXPECT_ERR_PATH(res, type, want_path) do { \
	const char *p_; \
	EXPECT_ERR(res, type); \
	p_ = json_string_value(json_object_get(last_data, "path")); \
	ck_assert_msg(p_ && strcmp(p_, want_path) == 0, "%s\n  want data.path \"%s\", answered %s", last_call, \
		      want_path, last_reply); \
} while (0)

/* Checks whose failure must not hide the checks after them: collected,
 * then asserted at the end of the test (ASSERT_NOTHING_LATER). */
static char later[4096];

static void later_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void later_add(const char *fmt, ...)
{
	size_t n = strlen(later);
	va_list ap;

	if (n + 8 >= sizeof(later))
		return;
	n += (size_t)snprintf(later + n, sizeof(later) - n, "\n  - ");
	va_start(ap, fmt);
	vsnprintf(later + n, sizeof(later) - n, fmt, ap);
	va_end(ap);
}

/* Like EXPECT_ERR (EXPECT_ERR_PATH when want_path), but deferred. */
static void expect_err_later(json_t *res, const char *type, const char *want_path)
{
	const char *p = json_string_value(json_object_get(last_data, "path"));

	if (res || strcmp(last_type, type) || (want_path && (!p || strcmp(p, want_path))))
		later_add("%s\n    want %s%s%s%s, answered %s", last_call, type, want_path ? " with data.path \"" : "",
			  want_path ? want_path : "", want_path ? "\"" : "", last_reply);
	json_decref(res);
}

#define ASSERT_NOTHING_LATER() ck_assert_msg(!later[0], "failed along the way:%s", later)

static json_t *key_for(const char *agent, const char *call_id)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "scope", fx.scope, "thread_id", "t", "agent_dir", agent,
			 "call_id", call_id ? call_id : "");
}

/* A spec that requires the whole file plane. */
static json_t *files_spec(const char *img)
{
	return json_pack("{s:s, s:s, s:{s:s}, s:[ssss]}", "kind", "files", "image", img, "labels", RUN_LABEL,
			 run_id, "requires", "exec", "files_in", "files_out", "files_delete");
}

/* The default spec: requires exec and files_in. */
static json_t *default_spec(const char *img)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "kind", "files", "image", img, "labels", RUN_LABEL, run_id);
}

static void track(const char *id)
{
	for (size_t i = 0; i < fx.n_ids; i++)
		if (strcmp(fx.ids[i], id) == 0)
			return;
	ck_assert_uint_lt(fx.n_ids, MAX_SANDBOXES);
	snprintf(fx.ids[fx.n_ids++], sizeof(fx.ids[0]), "%s", id);
}

/* sandbox.acquire; key and spec stolen. A success is tracked. */
static json_t *acquire(json_t *key, json_t *spec)
{
	json_t *r = rpc("sandbox.acquire", json_pack("{s:o, s:o}", "key", key, "spec", spec));

	if (r && jstr(r, "sandbox"))
		track(jstr(r, "sandbox"));
	return r;
}

/* Acquires, must succeed; the id is copied to out. */
static void acquire_ok(json_t *key, json_t *spec, char *out, size_t size)
{
	json_t *r = acquire(key, spec);

	EXPECT_OK(r);
	ck_assert_uint_eq(strlen(jstr(r, "sandbox")), 64);
	snprintf(out, size, "%s", jstr(r, "sandbox"));
	json_decref(r);
}

static void daemon_up(const char *const *args)
{
	memset(&fx, 0, sizeof(fx));
	snprintf(fx.scope, sizeof(fx.scope), "%s-%d", run_id, (int)getpid());
	msbd_start(&fx.d, args);
	json_decref(wait_engine_state(fx.d.sock, "reachable", ENGINE_WAIT_MS));
	ck_assert_int_eq(msb_connect(fx.d.sock, &fx.c), MSB_OK);
	msb_set_timeout(fx.c, CALL_TIMEOUT_MS);
	/* sandbox.list answers once the registry is synchronised. */
	for (long end = now_ms() + ENGINE_WAIT_MS; now_ms() < end;) {   /* hang guard */
		json_t *r = rpc("sandbox.list", NULL);

		if (r) {
			json_decref(r);
			return;
		}
		usleep(50 * 1000);
	}
	ck_abort_msg("the registry never synchronised");
}

/* The engine's inspect of a container (NULL when absent or unreadable). */
static json_t *engine_inspect(const char *id)
{
	char path[160], *body;
	json_t *j;

	snprintf(path, sizeof(path), "/containers/%s/json", id);
	body = engine_get(path, NULL, NULL);
	j = json_loads(body, 0, NULL);
	free(body);
	return j;
}

/* True if the engine says the container is paused (absent: false). */
static bool engine_paused(const char *id)
{
	json_t *j = engine_inspect(id);
	bool paused = json_is_true(jget(j, "State.Paused"));

	json_decref(j);
	return paused;
}

/* The daemons of this run serve files on the local plane (MSB_FILE_PLANE=local). */
static bool plane_local(void)
{
	const char *p = harness_file_plane();

	return p && strcmp(p, "local") == 0;
}

/* Local plane: method(params) runs to a result while the guest is never
 * paused, sampled all along. */
static void assert_never_paused_during(const char *method, json_t *params)
{
	json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", 1, "method", method, "params",
				params);
	char *frame = json_dumps(req, JSON_COMPACT);
	int fd = raw_connect(fx.d.sock), samples = 0;
	json_t *rep = NULL;

	ck_assert_int_ge(fd, 0);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	for (long end = now_ms() + CALL_TIMEOUT_MS; !rep && now_ms() < end; samples++) {   /* hang guard */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		ck_assert_msg(!engine_paused(fx.id), "the local plane paused the guest during %s", method);
		if (poll(&pfd, 1, 5) > 0)
			rep = raw_recv(fd, 30000);
	}
	ck_assert_msg(rep && json_object_get(rep, "result"), "%s did not succeed", method);
	fprintf(stderr, "local plane: %s ran with the guest running (%d samples)\n", method, samples);
	json_decref(rep);
	close(fd);
	free(frame);
	json_decref(req);
}

static void plant_layout(const char *id)
{
	GUEST_OK(id, "set -e; mkdir -p %s/real %s/sub; printf '%s' > %s/secret.txt; cp %s/secret.txt %s/sub/leaf.txt; "
		 "printf '%s' > %s/real/inside.txt; printf 'plain\\n' > %s/plain.txt; "
		 "ln -s %s %s/link-dir; ln -s %s/secret.txt %s/link-file",
		 W, OUT, "the guest must not reach this\\n", OUT, OUT, OUT, "a legitimate output\\n", W, W,
		 OUT, W, OUT, W);
}

/* What W-outside holds: names, kinds and contents. */
static char *outside_snapshot(const char *id)
{
	return guest_out(id, NULL, "cd %s && find . | sort && ls -lnR . | grep -v '^total' | "
			 "sed 's/ [A-Z][a-z][a-z] .*:[0-9][0-9] / /' && cat secret.txt sub/leaf.txt", OUT);
}

/* ---- fixtures ------------------------------------------------------------- */

/* A daemon, no sandbox yet. */
static void fx_daemon_setup(void)
{
	daemon_up(NULL);
}

/* A daemon, a root sandbox requiring the whole file plane, the hostile layout. */
static void fx_layout_setup(void)
{
	daemon_up(NULL);
	acquire_ok(key_for("agent", NULL), files_spec(img_root), fx.id, sizeof(fx.id));
	plant_layout(fx.id);
}

/* After every test: nothing left paused, then everything of the test goes. */
static void fx_teardown(void)
{
	for (size_t i = 0; i < fx.n_ids; i++)
		ck_assert_msg(!engine_paused(fx.ids[i]), "container %s was left paused", fx.ids[i]);
	if (fx.c) {
		json_decref(rpc("sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", fx.scope, "thread_id", "t")));
		fx.c = msb_conn_free(fx.c);
	}
	json_decref(last_data);
	last_data = NULL;
	ck_assert_int_eq(msbd_stop(&fx.d), 0);
}

/* ---- file calls ------------------------------------------------------------ */

static json_t *fparams(const char *sb, const char *wd, const char *path)
{
	json_t *p = json_pack("{s:s, s:s}", "sandbox", sb, "path", path);

	if (wd)
		json_object_set_new(p, "working_directory", json_string(wd));
	return p;
}

static json_t *f_stat(const char *sb, const char *wd, const char *path)
{
	return rpc("files.stat", fparams(sb, wd, path));
}

static json_t *f_read(const char *sb, const char *wd, const char *path)
{
	return rpc("files.read", fparams(sb, wd, path));
}

static json_t *f_read_max(const char *sb, const char *path, json_int_t max_bytes)
{
	json_t *p = fparams(sb, NULL, path);

	json_object_set_new(p, "max_bytes", json_integer(max_bytes));
	return rpc("files.read", p);
}

static json_t *f_write(const char *sb, const char *wd, const char *path, const char *text)
{
	json_t *p = fparams(sb, wd, path);

	json_object_set_new(p, "content_text", json_string(text));
	return rpc("files.write", p);
}

static json_t *f_write_bytes(const char *sb, const char *wd, const char *path, const void *buf, size_t len)
{
	json_t *p = fparams(sb, wd, path);
	char *b = harness_b64_encode(buf, len);

	json_object_set_new(p, "content_b64", json_string(b));
	free(b);
	return rpc("files.write", p);
}

static json_t *f_remove(const char *sb, const char *wd, const char *path, bool recursive)
{
	json_t *p = fparams(sb, wd, path);

	json_object_set_new(p, "recursive", json_boolean(recursive));
	return rpc("files.remove", p);
}

static json_t *f_reclaim(const char *sb, const char *wd, const char *dir)
{
	json_t *p = json_pack("{s:s, s:s}", "sandbox", sb, "directory", dir);

	if (wd)
		json_object_set_new(p, "working_directory", json_string(wd));
	return rpc("files.reclaim", p);
}

/* The decoded content of a files.read result (or one entry of a multi-read). */
static uint8_t *content_of(json_t *r, size_t *ret_len)
{
	const char *b = jstr(r, "content_b64");
	uint8_t *buf;

	ck_assert_msg(b, "no content_b64 in %s", last_reply);
	buf = b64_decode(b, ret_len);
	ck_assert_msg(buf, "content_b64 is not base64: %.80s", b);
	ck_assert_int_eq(jint(r, "size"), (json_int_t)*ret_len);
	return buf;
}

#define ASSERT_READ(r, want, want_len) do { \
	size_t rl_; \
	uint8_t *rb_ = content_of(r, &rl_); \
	ck_assert_msg(rl_ == (want_len) && memcmp(rb_, want, rl_) == 0, "%s read %zu bytes, not the %zu expected", \
		      last_call, rl_, (size_t)(want_len)); \
	free(rb_); \
} while (0)

/* kind and size (-1: null) of a files.stat result. */
#define ASSERT_STAT(r, want_path, want_kind, want_size) do { \
	json_t *s_ = (r); \
	EXPECT_OK(s_); \
	ck_assert_msg(json_is_object(s_), "%s answered %s, not an entry", last_call, last_reply); \
	ck_assert_str_eq(jstr(s_, "path"), want_path); \
	ck_assert_str_eq(jstr(s_, "kind"), want_kind); \
	if ((want_size) < 0) \
		ck_assert_msg(json_is_null(jget(s_, "size")), "%s: size is not null: %s", last_call, last_reply); \
	else \
		ck_assert_int_eq(jint(s_, "size"), want_size); \
	json_decref(s_); \
} while (0)

#define ASSERT_NULL_RESULT(r) do { \
	json_t *n_ = (r); \
	EXPECT_OK(n_); \
	ck_assert_msg(json_is_null(n_), "%s answered %s, want null", last_call, last_reply); \
	json_decref(n_); \
} while (0)

/* ---- 7.1 reading out (no listing) ----------------------------------------- */

START_TEST(a_legitimate_read_still_works)
{
	json_t *r;

	ASSERT_STAT(f_stat(fx.id, NULL, "real/inside.txt"), "real/inside.txt", "file", 20);
	r = f_read(fx.id, NULL, "real/inside.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, INSIDE, strlen(INSIDE));
	json_decref(r);
	/* The same file by every spelling of the same place. */
	r = f_read(fx.id, "real", "inside.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, INSIDE, strlen(INSIDE));
	json_decref(r);
	r = f_read(fx.id, W "/real", "inside.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, INSIDE, strlen(INSIDE));
	json_decref(r);
	r = f_read(fx.id, ".", W "/real/inside.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, INSIDE, strlen(INSIDE));
	json_decref(r);
}
END_TEST

START_TEST(a_link_is_named_a_link)
{
	ASSERT_STAT(f_stat(fx.id, NULL, "link-file"), "link-file", "symlink", -1);
	ASSERT_STAT(f_stat(fx.id, NULL, "link-dir"), "link-dir", "symlink", -1);
}
END_TEST

START_TEST(a_link_is_never_read)
{
	EXPECT_ERR(f_read(fx.id, NULL, "link-file"), "OSError");
	EXPECT_ERR(f_read(fx.id, NULL, "link-dir"), "OSError");
}
END_TEST

START_TEST(stat_and_read_through_a_linked_parent_are_refused)
{
	EXPECT_ERR_PATH(f_stat(fx.id, NULL, "link-dir/secret.txt"), "ConfinementError", "link-dir/secret.txt");
	EXPECT_ERR_PATH(f_read(fx.id, NULL, "link-dir/secret.txt"), "ConfinementError", "link-dir/secret.txt");
	EXPECT_ERR(f_stat(fx.id, NULL, "link-dir/sub/leaf.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, NULL, "link-dir/sub/leaf.txt"), "ConfinementError");
}
END_TEST

START_TEST(a_linked_working_directory_is_refused_for_reading)
{
	EXPECT_ERR(f_stat(fx.id, W "/link-dir", "secret.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, W "/link-dir", "secret.txt"), "ConfinementError");
	EXPECT_ERR(f_stat(fx.id, "link-dir", "secret.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, "link-dir", "secret.txt"), "ConfinementError");
	/* The working directory itself, when it is a link. */
	expect_err_later(f_stat(fx.id, W "/link-dir", "."), "ConfinementError", NULL);
	expect_err_later(f_stat(fx.id, "link-dir", "."), "ConfinementError", NULL);
	ASSERT_NOTHING_LATER();
}
END_TEST

START_TEST(a_linked_ancestor_of_the_working_directory_is_refused_for_reading)
{
	EXPECT_ERR(f_stat(fx.id, W "/link-dir/sub", "leaf.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, W "/link-dir/sub", "leaf.txt"), "ConfinementError");
	EXPECT_ERR(f_stat(fx.id, "link-dir/sub", "leaf.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, "link-dir/sub", "leaf.txt"), "ConfinementError");
}
END_TEST

START_TEST(a_plain_parent_is_not_an_escape)
{
	EXPECT_ERR_PATH(f_stat(fx.id, NULL, "plain.txt/deeper.txt"), "NotADirectoryError", "plain.txt/deeper.txt");
	EXPECT_ERR(f_read(fx.id, NULL, "plain.txt/deeper.txt"), "NotADirectoryError");
	/* A fifo in the way is the guest's own business too. */
	GUEST_OK(fx.id, "mkfifo %s/fifo", W);
	EXPECT_ERR(f_stat(fx.id, NULL, "fifo/deeper.txt"), "NotADirectoryError");
}
END_TEST

START_TEST(stat_describes_each_kind_without_following)
{
	GUEST_OK(fx.id, "mkfifo %s/fifo && mkdir %s/empty && : > %s/zero.txt", W, W, W);
	ASSERT_STAT(f_stat(fx.id, NULL, "plain.txt"), "plain.txt", "file", 6);
	ASSERT_STAT(f_stat(fx.id, NULL, "zero.txt"), "zero.txt", "file", 0);
	ASSERT_STAT(f_stat(fx.id, NULL, "real"), "real", "directory", -1);
	ASSERT_STAT(f_stat(fx.id, NULL, "fifo"), "fifo", "other", -1);
	ASSERT_STAT(f_stat(fx.id, NULL, "."), ".", "directory", -1);
	ASSERT_STAT(f_stat(fx.id, NULL, "real/../plain.txt"), "plain.txt", "file", 6);
	ASSERT_STAT(f_stat(fx.id, "real", "inside.txt"), "inside.txt", "file", 20);
	/* Absent, or under an absent parent: null, never an error. */
	ASSERT_NULL_RESULT(f_stat(fx.id, NULL, "absent.txt"));
	ASSERT_NULL_RESULT(f_stat(fx.id, NULL, "absent/deeper/x.txt"));
	/* The working directory may be absent as a whole. */
	ASSERT_NULL_RESULT(f_stat(fx.id, W "/never-made", "x.txt"));
}
END_TEST

START_TEST(read_serves_only_regular_files)
{
	GUEST_OK(fx.id, "mkfifo %s/fifo", W);
	EXPECT_ERR_PATH(f_read(fx.id, NULL, "real"), "OSError", "real");
	EXPECT_ERR(f_read(fx.id, NULL, "fifo"), "OSError");
	EXPECT_ERR(f_read(fx.id, NULL, "."), "OSError");
	EXPECT_ERR_PATH(f_read(fx.id, NULL, "absent.txt"), "FileNotFoundError", "absent.txt");
	EXPECT_ERR(f_read(fx.id, NULL, "absent/x.txt"), "FileNotFoundError");
}
END_TEST

START_TEST(read_many_in_one_call_keeps_the_order)
{
	json_t *p = json_pack("{s:s, s:[sss]}", "sandbox", fx.id, "paths", "plain.txt", "real/inside.txt",
			      "plain.txt");
	json_t *r = rpc("files.read", p), *files;

	EXPECT_OK(r);
	files = jget(r, "files");
	ck_assert_uint_eq(json_array_size(files), 3);
	ck_assert_str_eq(jstr(json_array_get(files, 0), "path"), "plain.txt");
	ASSERT_READ(json_array_get(files, 0), "plain\n", 6);
	ck_assert_str_eq(jstr(json_array_get(files, 1), "path"), "real/inside.txt");
	ASSERT_READ(json_array_get(files, 1), INSIDE, 20);
	ASSERT_READ(json_array_get(files, 2), "plain\n", 6);
	json_decref(r);
	/* One link among them refuses the call. */
	p = json_pack("{s:s, s:[ss]}", "sandbox", fx.id, "paths", "plain.txt", "link-dir/secret.txt");
	EXPECT_ERR(rpc("files.read", p), "ConfinementError");
}
END_TEST

/* ---- paths refused before the engine ---------------------------------------- */

START_TEST(escapes_and_backslashes_are_confinement_errors)
{
	EXPECT_ERR(f_read(fx.id, NULL, "../work-outside/secret.txt"), "ConfinementError");
	EXPECT_ERR(f_stat(fx.id, NULL, "../work-outside/secret.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, NULL, OUT "/secret.txt"), "ConfinementError");   /* shares W's prefix */
	EXPECT_ERR(f_read(fx.id, NULL, "real/../../work-outside/secret.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, NULL, "/etc/passwd"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, NULL, "real\\inside.txt"), "ConfinementError");
	EXPECT_ERR(f_read(fx.id, "re\\al", "inside.txt"), "ConfinementError");
}
END_TEST

/* A NUL never reaches a path: the frame parser refuses \u0000 in any
 * string (PROTOCOL.md), so "nul\0.txt" can never be cut short to "nul". */
START_TEST(a_nul_in_a_path_is_refused_by_the_parser)
{
	json_t *p = fparams(fx.id, NULL, "x");

	json_object_set_new(p, "path", json_stringn("real/inside.txt\0x", 17));
	EXPECT_ERR(rpc("files.read", p), "ParseError");
	p = fparams(fx.id, NULL, "x");
	json_object_set_new(p, "path", json_stringn("nul\0.txt", 8));
	json_object_set_new(p, "content_text", json_string("x"));
	EXPECT_ERR(rpc("files.write", p), "ParseError");
	GUEST_FALSE(fx.id, "test -e %s/nul", W);
}
END_TEST

START_TEST(paths_over_the_limits_are_invalid_params)
{
	char *path = malloc(8192);
	size_t n = 0;

	/* 129 components. */
	for (int i = 0; i < 129; i++)
		n += (size_t)sprintf(path + n, "%sd", i ? "/" : "");
	EXPECT_ERR(f_stat(fx.id, NULL, path), "InvalidParams");
	/* A component of 256 bytes. */
	memset(path, 'c', 256);
	path[256] = '\0';
	EXPECT_ERR(f_stat(fx.id, NULL, path), "InvalidParams");
	/* 4096 bytes in all, each component short. */
	for (n = 0; n < 4096; n += 8)
		memcpy(path + n, "abcdefg/", 8);
	path[4095] = 'x';
	path[4096] = '\0';
	EXPECT_ERR(f_stat(fx.id, NULL, path), "InvalidParams");
	free(path);
}
END_TEST

START_TEST(an_unknown_or_gone_sandbox_is_not_found)
{
	const char *nobody = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char other[80];

	EXPECT_ERR(f_stat(nobody, NULL, "x"), "SandboxNotFound");
	EXPECT_ERR(f_write(nobody, NULL, "x", "y"), "SandboxNotFound");
	acquire_ok(key_for("gone", NULL), files_spec(img_root), other, sizeof(other));
	ck_assert(json_is_null(rpc("sandbox.dispose", json_pack("{s:o}", "key", key_for("gone", NULL)))));
	EXPECT_ERR(f_stat(other, NULL, "x"), "SandboxNotFound");
	EXPECT_ERR(f_read(other, NULL, "x"), "SandboxNotFound");
	EXPECT_ERR(f_write(other, NULL, "x", "y"), "SandboxNotFound");
	EXPECT_ERR(f_remove(other, NULL, "x", false), "SandboxNotFound");
	EXPECT_ERR(f_reclaim(other, NULL, W "/x"), "SandboxNotFound");
}
END_TEST

/* ---- 7.2 writing in ------------------------------------------------------- */

START_TEST(a_write_lands_and_reads_back)
{
	json_t *r = f_write(fx.id, NULL, "real/written.txt", "written");

	EXPECT_OK(r);
	ck_assert_int_eq(jint(r, "files"), 1);
	ck_assert_int_eq(jint(r, "bytes"), 7);
	json_decref(r);
	GUEST_OK(fx.id, "test -f %s/real/written.txt", W);
	ASSERT_GUEST_FILE(fx.id, W "/real/written.txt", "written");
	ASSERT_OWNER_MODE(fx.id, W "/real/written.txt", "0:0 644");
	r = f_read(fx.id, NULL, "real/written.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, "written", 7);
	json_decref(r);
}
END_TEST

START_TEST(bytes_survive_the_round_trip)
{
	uint8_t buf[256 + 64];
	size_t n = 0, glen;
	const char *uni = "\xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9\xe2\x86\x92payload";
	char *got;
	json_t *r;

	memcpy(buf, uni, strlen(uni));
	n = strlen(uni);
	for (int b = 1; b <= 127; b++)
		buf[n++] = (uint8_t)b;
	EXPECT_OK(r = f_write_bytes(fx.id, NULL, "bytes.bin", buf, n));
	json_decref(r);
	got = guest_out(fx.id, &glen, "cat %s/bytes.bin", W);
	ck_assert_msg(glen == n && memcmp(got, buf, n) == 0, "the guest holds %zu bytes, not the %zu written", glen, n);
	free(got);
	r = f_read(fx.id, NULL, "bytes.bin");
	EXPECT_OK(r);
	ASSERT_READ(r, buf, n);
	json_decref(r);
}
END_TEST

START_TEST(all_256_byte_values_nul_and_invalid_utf8_survive)
{
	uint8_t all[256];
	const uint8_t odd[] = { 0x00, 0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xed, 0xa0, 0x80, 0x00, 0x0a, 0x0d, 0x00 };
	size_t glen;
	char *got;
	json_t *r;

	for (int b = 0; b < 256; b++)
		all[b] = (uint8_t)b;
	EXPECT_OK(r = f_write_bytes(fx.id, NULL, "all.bin", all, sizeof(all)));
	ck_assert_int_eq(jint(r, "bytes"), 256);
	json_decref(r);
	EXPECT_OK(r = f_write_bytes(fx.id, NULL, "odd.bin", odd, sizeof(odd)));
	json_decref(r);
	got = guest_out(fx.id, &glen, "cat %s/all.bin", W);
	ck_assert_msg(glen == 256 && memcmp(got, all, 256) == 0, "all.bin: the guest holds %zu bytes", glen);
	free(got);
	got = guest_out(fx.id, &glen, "cat %s/odd.bin", W);
	ck_assert_msg(glen == sizeof(odd) && memcmp(got, odd, glen) == 0, "odd.bin: the guest holds %zu bytes", glen);
	free(got);
	/* And back out, planted by the guest. */
	GUEST_OK(fx.id, "cp %s/all.bin %s/all-planted.bin", W, W);
	r = f_read(fx.id, NULL, "all-planted.bin");
	EXPECT_OK(r);
	ASSERT_READ(r, all, 256);
	json_decref(r);
	r = f_read(fx.id, NULL, "odd.bin");
	EXPECT_OK(r);
	ASSERT_READ(r, odd, sizeof(odd));
	json_decref(r);
}
END_TEST

START_TEST(str_content_is_utf8)
{
	json_t *r;

	EXPECT_OK(r = f_write(fx.id, NULL, "naive.txt", "na\xc3\xafve"));
	ck_assert_int_eq(jint(r, "bytes"), 6);
	json_decref(r);
	ASSERT_GUEST_FILE(fx.id, W "/naive.txt", "na\xc3\xafve");
}
END_TEST

START_TEST(a_second_write_replaces)
{
	json_t *r;

	EXPECT_OK(r = f_write(fx.id, NULL, "twice.txt", "first, and longer"));
	json_decref(r);
	EXPECT_OK(r = f_write(fx.id, NULL, "twice.txt", "second"));
	json_decref(r);
	ASSERT_GUEST_FILE(fx.id, W "/twice.txt", "second");
	/* A file the guest made is replaced too, never appended to. */
	GUEST_OK(fx.id, "printf 'the guest wrote this' > %s/guests.txt", W);
	EXPECT_OK(r = f_write(fx.id, NULL, "guests.txt", "host"));
	json_decref(r);
	ASSERT_GUEST_FILE(fx.id, W "/guests.txt", "host");
}
END_TEST

START_TEST(parents_are_created)
{
	json_t *r;

	EXPECT_OK(r = f_write(fx.id, NULL, "deep/er/est/leaf.txt", "leaf"));
	json_decref(r);
	GUEST_OK(fx.id, "test -f %s/deep/er/est/leaf.txt", W);
	ASSERT_OWNER_MODE(fx.id, W "/deep", "0:0 755");
	ASSERT_OWNER_MODE(fx.id, W "/deep/er/est", "0:0 755");
	/* An existing directory keeps its mode. */
	GUEST_OK(fx.id, "mkdir -m 0700 %s/private", W);
	EXPECT_OK(r = f_write(fx.id, NULL, "private/x.txt", "x"));
	json_decref(r);
	ASSERT_OWNER_MODE(fx.id, W "/private", "0:0 700");
}
END_TEST

START_TEST(deep_parents_are_created)
{
	char path[DEEP_LEVELS * 5 + 16];
	size_t n = 0;
	json_t *r;

	for (int i = 0; i < DEEP_LEVELS; i++)
		n += (size_t)sprintf(path + n, "d%02d/", i);
	snprintf(path + n, sizeof(path) - n, "leaf.txt");
	EXPECT_OK(r = f_write(fx.id, NULL, path, "deep"));
	json_decref(r);
	GUEST_OK(fx.id, "test -f '%s/%s'", W, path);
	ASSERT_STAT(f_stat(fx.id, NULL, path), path, "file", 4);
	r = f_read(fx.id, NULL, path);
	EXPECT_OK(r);
	ASSERT_READ(r, "deep", 4);
	json_decref(r);
}
END_TEST

START_TEST(a_path_outside_is_refused)
{
	EXPECT_ERR(f_write(fx.id, NULL, "../work-outside/planted.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, OUT "/planted.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, "/tmp/planted.txt", "x"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/planted.txt", OUT);
	GUEST_FALSE(fx.id, "test -e /tmp/planted.txt");
}
END_TEST

START_TEST(a_path_through_a_linked_parent_is_refused)
{
	char *before = outside_snapshot(fx.id), *after;

	EXPECT_ERR(f_write(fx.id, NULL, "link-dir/landed.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, "link-dir/sub/landed.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, "link-dir/secret.txt", "overwritten"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/landed.txt", OUT);
	after = outside_snapshot(fx.id);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
}
END_TEST

START_TEST(a_linked_destination_is_refused_not_followed)
{
	json_t *r;

	GUEST_OK(fx.id, "printf known > %s/target.txt && ln -s %s/target.txt %s/to-target", OUT, OUT, W);
	EXPECT_ERR(f_write(fx.id, NULL, "to-target", "overwritten"), "ConfinementError");
	ASSERT_GUEST_FILE(fx.id, OUT "/target.txt", "known");
	GUEST_OK(fx.id, "test -L %s/to-target", W);
	EXPECT_ERR(f_write(fx.id, NULL, "link-file", "overwritten"), "ConfinementError");
	ASSERT_GUEST_FILE(fx.id, OUT "/secret.txt", SECRET);
	/* Even a link to a place inside is never followed. */
	GUEST_OK(fx.id, "ln -s %s/real/inside.txt %s/inner-link", W, W);
	EXPECT_ERR(f_write(fx.id, NULL, "inner-link", "overwritten"), "ConfinementError");
	ASSERT_GUEST_FILE(fx.id, W "/real/inside.txt", INSIDE);
	/* A dangling link is a link too. */
	GUEST_OK(fx.id, "ln -s %s/not-yet.txt %s/dangling", OUT, W);
	EXPECT_ERR(f_write(fx.id, NULL, "dangling", "x"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/not-yet.txt", OUT);
	/* In a multi-file write, one linked destination refuses the whole call. */
	r = rpc("files.write", json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:s}]}", "sandbox", fx.id, "files",
					 "path", "fine.txt", "content_text", "fine", "path", "to-target",
					 "content_text", "overwritten"));
	EXPECT_ERR(r, "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/fine.txt", W);
	ASSERT_GUEST_FILE(fx.id, OUT "/target.txt", "known");
}
END_TEST

START_TEST(the_working_directory_is_refused)
{
	GUEST_OK(fx.id, "printf control > %s/control.txt", W);
	EXPECT_ERR(f_write(fx.id, NULL, ".", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, W, "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, NULL, "real/..", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, "real", ".", "x"), "ConfinementError");
	GUEST_OK(fx.id, "test -d %s && test -d %s/real", W, W);
	ASSERT_GUEST_FILE(fx.id, W "/control.txt", "control");
}
END_TEST

START_TEST(a_backslash_is_refused)
{
	EXPECT_ERR(f_write(fx.id, NULL, "sub\\file.txt", "x"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e '%s/sub\\file.txt'", W);
	GUEST_FALSE(fx.id, "test -e %s/sub", W);
}
END_TEST

START_TEST(a_linked_working_directory_is_refused_for_writing)
{
	char *before = outside_snapshot(fx.id), *after;

	EXPECT_ERR(f_write(fx.id, W "/link-dir", "landed.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, "link-dir", "landed.txt", "x"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/landed.txt", OUT);
	after = outside_snapshot(fx.id);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
}
END_TEST

START_TEST(a_linked_ancestor_of_the_working_directory_is_refused_for_writing)
{
	char *before = outside_snapshot(fx.id), *after;

	EXPECT_ERR(f_write(fx.id, W "/link-dir/sub", "landed.txt", "x"), "ConfinementError");
	EXPECT_ERR(f_write(fx.id, W "/link-dir/sub/new", "landed.txt", "x"), "ConfinementError");
	GUEST_FALSE(fx.id, "test -e %s/sub/landed.txt", OUT);
	GUEST_FALSE(fx.id, "test -e %s/sub/new", OUT);
	after = outside_snapshot(fx.id);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
}
END_TEST

START_TEST(what_is_in_the_way_is_classified)
{
	GUEST_OK(fx.id, "mkdir -p %s/adir/inner", W);
	EXPECT_ERR(f_write(fx.id, NULL, "plain.txt/deeper.txt", "x"), "NotADirectoryError");
	EXPECT_ERR(f_write(fx.id, NULL, "adir", "x"), "OSError");
	EXPECT_ERR(f_write(fx.id, NULL, "real", "x"), "OSError");
	GUEST_OK(fx.id, "test -d %s/adir/inner && test -f %s/plain.txt", W, W);
	ASSERT_GUEST_FILE(fx.id, W "/plain.txt", "plain\n");
}
END_TEST

START_TEST(a_malformed_write_is_invalid_params)
{
	json_t *p;

	/* Two entries naming one path. */
	p = json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:s}]}", "sandbox", fx.id, "files", "path", "dup.txt",
		      "content_text", "a", "path", "dup.txt", "content_text", "b");
	EXPECT_ERR(rpc("files.write", p), "InvalidParams");
	/* Both contents, or none. */
	p = fparams(fx.id, NULL, "both.txt");
	json_object_set_new(p, "content_text", json_string("a"));
	json_object_set_new(p, "content_b64", json_string("YQ=="));
	EXPECT_ERR(rpc("files.write", p), "InvalidParams");
	EXPECT_ERR(rpc("files.write", fparams(fx.id, NULL, "none.txt")), "InvalidParams");
	/* Not base64. */
	p = fparams(fx.id, NULL, "bad.txt");
	json_object_set_new(p, "content_b64", json_string("not base64!"));
	EXPECT_ERR(rpc("files.write", p), "InvalidParams");
	GUEST_FALSE(fx.id, "test -e %s/dup.txt || test -e %s/both.txt || test -e %s/none.txt || test -e %s/bad.txt",
		    W, W, W, W);
}
END_TEST

/* ---- transfer ceilings and byte counts -------------------------------------- */

START_TEST(an_empty_file_is_a_file)
{
	json_t *r;

	EXPECT_OK(r = f_write_bytes(fx.id, NULL, "empty.bin", "", 0));
	ck_assert_int_eq(jint(r, "bytes"), 0);
	json_decref(r);
	EXPECT_OK(r = f_write(fx.id, NULL, "empty.txt", ""));
	json_decref(r);
	GUEST_OK(fx.id, "test -f %s/empty.bin && test ! -s %s/empty.bin && test -f %s/empty.txt && test ! -s %s/empty.txt",
		 W, W, W, W);
	ASSERT_STAT(f_stat(fx.id, NULL, "empty.bin"), "empty.bin", "file", 0);
	r = f_read(fx.id, NULL, "empty.bin");
	EXPECT_OK(r);
	ASSERT_READ(r, "", 0);
	json_decref(r);
	r = f_read_max(fx.id, "empty.bin", 0);
	EXPECT_OK(r);
	ASSERT_READ(r, "", 0);
	json_decref(r);
}
END_TEST

START_TEST(max_bytes_refuses_never_truncates)
{
	json_t *r;

	GUEST_OK(fx.id, "head -c 1000 /dev/zero | tr '\\0' 'z' > %s/k.txt", W);
	r = f_read_max(fx.id, "k.txt", 1000);
	EXPECT_OK(r);
	ck_assert_int_eq(jint(r, "size"), 1000);
	json_decref(r);
	r = f_read_max(fx.id, "k.txt", 999);
	EXPECT_ERR(r, "SandboxTransferCapExceeded");
	ck_assert_msg(json_integer_value(json_object_get(last_data, "size")) == 1000, "data.size: %s", last_reply);
	ck_assert_msg(json_integer_value(json_object_get(last_data, "limit")) == 999, "data.limit: %s", last_reply);
	ck_assert_ptr_null(json_object_get(last_data, "content_b64"));
	r = f_read_max(fx.id, "real/inside.txt", 19);
	EXPECT_ERR(r, "SandboxTransferCapExceeded");
	/* Per file in a multi-read. */
	r = rpc("files.read", json_pack("{s:s, s:[ss], s:i}", "sandbox", fx.id, "paths", "plain.txt", "k.txt",
					"max_bytes", 999));
	EXPECT_ERR(r, "SandboxTransferCapExceeded");
}
END_TEST

static json_t *many_files(const char *dir, int n)
{
	json_t *files = json_array();

	for (int i = 0; i < n; i++) {
		char path[64], text[32];

		snprintf(path, sizeof(path), "%s/f%03d.txt", dir, i);
		snprintf(text, sizeof(text), "file %d\n", i);
		json_array_append_new(files, json_pack("{s:s, s:s}", "path", path, "content_text", text));
	}
	return files;
}

START_TEST(the_file_count_ceiling_is_whole_call)
{
	json_t *r, *paths;
	char *count;

	r = rpc("files.write", json_pack("{s:s, s:o}", "sandbox", fx.id, "files", many_files("many", MAX_FILES)));
	EXPECT_OK(r);
	ck_assert_int_eq(jint(r, "files"), MAX_FILES);
	json_decref(r);
	count = guest_out(fx.id, NULL, "ls %s/many | wc -l", W);
	ck_assert_int_eq(atoi(count), MAX_FILES);
	free(count);
	ASSERT_GUEST_FILE(fx.id, W "/many/f255.txt", "file 255\n");
	r = rpc("files.write", json_pack("{s:s, s:o}", "sandbox", fx.id, "files", many_files("toomany", MAX_FILES + 1)));
	EXPECT_ERR(r, "SandboxTransferCapExceeded");
	GUEST_FALSE(fx.id, "test -e %s/toomany", W);
	/* Reads: 257 paths are refused before the engine. (256 would serve, but
	 * each is one archive GET of ~100 ms in the engine: 30 s of suite.) */
	paths = json_array();
	for (int i = 0; i <= MAX_FILES; i++) {
		char p[64];

		snprintf(p, sizeof(p), "many/f%03d.txt", i % MAX_FILES);
		json_array_append_new(paths, json_string(p));
	}
	EXPECT_ERR(rpc("files.read", json_pack("{s:s, s:o}", "sandbox", fx.id, "paths", paths)),
		   "SandboxTransferCapExceeded");
}
END_TEST

/* ---- the freeze: nothing left paused -------------------------------------- */

/* Waits until the engine says id is not paused; false after timeout_ms (a
 * hang guard). */
static bool wait_unpaused(const char *id, int timeout_ms)
{
	for (long end = now_ms() + timeout_ms; now_ms() < end;) {   /* hang guard */
		if (!engine_paused(id))
			return true;
		usleep(20 * 1000);
	}
	return !engine_paused(id);
}

/* daemon.status asked on sfd (new reference); fails the test if no reply
 * came (hang guard: CALL_TIMEOUT_MS). */
static json_t *status_on(int sfd)
{
	static const char frame[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\"}\n";
	json_t *rep, *res;

	raw_send(sfd, frame, strlen(frame));
	rep = raw_recv(sfd, CALL_TIMEOUT_MS);
	res = json_incref(json_object_get(rep, "result"));
	ck_assert_msg(res, "daemon.status did not answer");
	json_decref(rep);
	return res;
}

static long status_in_flight(int sfd)
{
	json_t *st = status_on(sfd);
	long n = (long)json_integer_value(json_object_get(json_object_get(st, "requests"), "in_flight"));

	json_decref(st);
	return n;
}

/* Sends one request frame on a fresh connection and closes the connection
 * with the call under way. Archive plane: once the engine shows the
 * container frozen by the call's copy. Local plane: a call is served
 * within one pass of the daemon's loop (plane_local.h: no freeze, no engine
 * round trip), so no other connection can see it running; what a client
 * can leave in the middle of is its reply. With reply_queued (files.read):
 * once daemon.status on a second connection shows reply bytes queued and
 * unsent (memory.reply_queued_bytes: the status calls' own replies are read
 * before the next is asked) — the client leaves mid-reply. Without (a
 * write, whose reply is small): once daemon.status counts the call taken
 * (requests.total past the status calls' own) — the client leaves with its
 * reply unread. Both waits are bounded by FREEZE_SEEN_MS, a hang guard.
 * Returns whether that was seen before the client left; the tests assert it. */
static bool send_and_leave(const char *id, const char *method, json_t *params, bool reply_queued)
{
	json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", 1, "method", method, "params", params);
	char *frame = json_dumps(req, JSON_COMPACT);
	int fd = raw_connect(fx.d.sock), sfd = plane_local() ? raw_connect(fx.d.sock) : -1;
	json_int_t base = 0, asked = 0;
	bool seen = false;

	ck_assert_int_ge(fd, 0);
	if (plane_local()) {
		json_t *st;

		ck_assert_int_ge(sfd, 0);
		st = status_on(sfd);
		base = json_integer_value(json_object_get(json_object_get(st, "requests"), "total"));
		json_decref(st);
	}
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	for (long end = now_ms() + FREEZE_SEEN_MS; !seen && now_ms() < end;) {   /* hang guard */
		if (plane_local()) {
			json_t *st = status_on(sfd);
			json_int_t total = json_integer_value(json_object_get(json_object_get(st, "requests"), "total"));
			json_int_t queued = json_integer_value(json_object_get(json_object_get(st, "memory"),
									      "reply_queued_bytes"));

			asked++;
			seen = reply_queued ? queued > 0 : total - base - asked >= 1;
			json_decref(st);
		} else {
			seen = engine_paused(id);
		}
		if (!seen)
			usleep(2000);
	}
	close(fd);
	if (sfd >= 0)
		close(sfd);
	free(frame);
	json_decref(req);
	return seen;
}

/* Waits until daemon.status counts no call in flight but its own (the
 * orphaned call ended); false after THAW_WAIT_MS, a hang guard. */
static bool wait_no_call_in_flight(void)
{
	int sfd = raw_connect(fx.d.sock);
	long n = -1;

	ck_assert_int_ge(sfd, 0);
	for (long end = now_ms() + THAW_WAIT_MS; now_ms() < end;) {   /* hang guard */
		n = status_in_flight(sfd);
		if (n == 1)
			break;
		usleep(5000);
	}
	close(sfd);
	return n == 1;
}

START_TEST(a_client_leaving_mid_write_leaves_the_guest_running)
{
	char *content = malloc(LEAVE_WRITE_BYTES), *b;
	json_t *p, *r;
	bool seen;

	for (size_t i = 0; i < LEAVE_WRITE_BYTES; i++)
		content[i] = (char)('a' + i % 26);
	b = harness_b64_encode(content, LEAVE_WRITE_BYTES);
	free(content);
	p = fparams(fx.id, NULL, "big.bin");
	json_object_set_new(p, "content_b64", json_string(b));
	free(b);
	seen = send_and_leave(fx.id, "files.write", p, false);
	ck_assert_msg(seen, "leaving mid-write: %s before the client left",
		      plane_local() ? "daemon.status did not count the call" : "the engine showed no freeze");
	ck_assert_msg(wait_no_call_in_flight(), "the write of a client that left is still in flight");
	ck_assert_msg(wait_unpaused(fx.id, THAW_WAIT_MS), "the guest is still paused %d ms after its client left",
		      THAW_WAIT_MS);
	/* The daemon still serves the container: its queue was not wedged. */
	r = f_stat(fx.id, NULL, "big.bin");
	EXPECT_OK(r);
	/* The file is whole or absent, never a part. */
	ck_assert_msg(json_is_null(r) || (json_is_object(r) && jint(r, "size") == LEAVE_WRITE_BYTES),
		      "leaving mid-write: big.bin is %lld bytes of %u", json_is_object(r) ? (long long)jint(r, "size") : -1LL,
		      LEAVE_WRITE_BYTES);
	if (json_is_object(r))
		GUEST_OK(fx.id, "test \"$(head -c 26 %s/big.bin)\" = abcdefghijklmnopqrstuvwxyz", W);
	json_decref(r);
	ck_assert(!engine_paused(fx.id));
	GUEST_OK(fx.id, "true");      /* the guest runs */
}
END_TEST

START_TEST(a_client_leaving_mid_read_leaves_the_guest_running)
{
	json_t *r;
	bool seen;

	GUEST_OK(fx.id, "dd if=/dev/zero of=%s/big.bin bs=1048576 count=%d 2>/dev/null", W, LEAVE_READ_MIB);
	seen = send_and_leave(fx.id, "files.read", fparams(fx.id, NULL, "big.bin"), true);
	ck_assert_msg(seen, "leaving mid-read: %s before the client left",
		      plane_local() ? "daemon.status showed no reply queued" : "the engine showed no freeze");
	/* The daemon is fine afterwards: the orphaned read ended, calls are served. */
	ck_assert_msg(wait_no_call_in_flight(), "the read of a client that left is still in flight");
	ck_assert_msg(wait_unpaused(fx.id, THAW_WAIT_MS), "the guest is still paused %d ms after its client left",
		      THAW_WAIT_MS);
	ASSERT_STAT(f_stat(fx.id, NULL, "big.bin"), "big.bin", "file", (json_int_t)LEAVE_READ_MIB * 1048576);
	r = f_read(fx.id, NULL, "plain.txt");
	EXPECT_OK(r);
	json_decref(r);
	GUEST_OK(fx.id, "true");
}
END_TEST

/* The daemon is stopped in the middle of a frozen copy, with no time to
 * drain (shutdown.drain_ms=0): the call is cut short, and the guest is
 * thawed before the daemon exits, not left to the next start. A second
 * daemon serves the fixture's sandbox for this (the same user owns it). */
/* A second daemon on this engine, its registry read (it serves the
 * fixture's sandbox: the same user owns it). */
static void second_daemon_up(struct msbd_proc *d2, const char *const *args)
{
	msbd_start(d2, args);
	json_decref(wait_engine_state(d2->sock, "reachable", ENGINE_WAIT_MS));
	for (long end = now_ms() + ENGINE_WAIT_MS; now_ms() < end;) {   /* hang guard */
		json_t *r = call(d2->sock, "sandbox.list", NULL, NULL, NULL);

		if (r) {
			json_decref(r);
			return;
		}
		usleep(20 * 1000);
	}
	ck_abort_msg("the second daemon never read its registry");
}

/* Sends method(params) on a raw connection of d2 (kept open: returned) and
 * waits (FREEZE_SEEN_MS, a hang guard) until the engine shows the guest paused. */
static int send_until_frozen(const struct msbd_proc *d2, const char *method, json_t *params)
{
	json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", 1, "method", method, "params",
				params);
	char *frame = json_dumps(req, JSON_COMPACT);
	int fd = raw_connect(d2->sock);
	bool seen = false;

	ck_assert_int_ge(fd, 0);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	for (long end = now_ms() + FREEZE_SEEN_MS; !seen && now_ms() < end;) {   /* hang guard */
		seen = engine_paused(fx.id);
		if (!seen)
			usleep(2000);
	}
	free(frame);
	json_decref(req);
	ck_assert_msg(seen, "the %s never froze the guest", method);
	return fd;
}

START_TEST(a_daemon_stopping_mid_copy_thaws_the_guest_first)
{
	static const char *const args[] = { "--set", "shutdown.drain_ms=0", NULL };
	struct msbd_proc d2 = { 0 };
	int fd, status;

	GUEST_OK(fx.id, "dd if=/dev/zero of=%s/big.bin bs=1048576 count=%d 2>/dev/null", W, LEAVE_READ_MIB);
	if (plane_local()) {
		/* Nothing to thaw: the local plane never freezes. (A write: the
		 * raw reader takes a big reply a byte at a time.) */
		json_t *p = fparams(fx.id, NULL, "copy.bin");
		char *content = calloc(1, LEAVE_WRITE_BYTES), *b = harness_b64_encode(content, LEAVE_WRITE_BYTES);

		json_object_set_new(p, "content_b64", json_string(b));
		free(b);
		free(content);
		assert_never_paused_during("files.write", p);
		GUEST_OK(fx.id, "test $(wc -c < %s/copy.bin) -eq %u", W, LEAVE_WRITE_BYTES);
		return;
	}
	second_daemon_up(&d2, args);
	fd = send_until_frozen(&d2, "files.read", fparams(fx.id, NULL, "big.bin"));
	msbd_signal(&d2, SIGTERM);
	status = msbd_wait(&d2, 20000);   /* hang guard */
	if (status != 0)
		msbd_dump_log(&d2);
	ck_assert_int_eq(status, 0);
	/* Exited: whatever it owed is done. No waiting here. */
	ck_assert_msg(!engine_paused(fx.id), "the daemon exited and left the guest paused");
	close(fd);
	msbd_stop(&d2);   /* already reaped: removes its dir */
	GUEST_OK(fx.id, "true");
}
END_TEST

/* SIGKILL in the middle of a frozen write: nothing runs to thaw the guest.
 * The next daemon to start thaws it (a pause no live claim of its own
 * holds), and the next write works. */
START_TEST(a_daemon_killed_mid_write_is_thawed_by_the_next_start)
{
	struct msbd_proc d2 = { 0 }, d3 = { 0 };
	char *content = malloc(LEAVE_WRITE_BYTES), *b;
	json_t *p, *r;
	int fd;

	for (size_t i = 0; i < LEAVE_WRITE_BYTES; i++)
		content[i] = (char)('a' + i % 26);
	b = harness_b64_encode(content, LEAVE_WRITE_BYTES);
	free(content);
	p = fparams(fx.id, NULL, "killed.bin");
	json_object_set_new(p, "content_b64", json_string(b));
	free(b);
	if (plane_local()) {
		/* Nothing to thaw: the local plane never freezes. */
		assert_never_paused_during("files.write", p);
		GUEST_OK(fx.id, "test $(wc -c < %s/killed.bin) -eq %u", W, LEAVE_WRITE_BYTES);
		return;
	}
	second_daemon_up(&d2, NULL);
	fd = send_until_frozen(&d2, "files.write", p);
	msbd_signal(&d2, SIGKILL);
	ck_assert_int_eq(msbd_wait(&d2, 20000), 128 + SIGKILL);   /* hang guard */
	close(fd);
	ck_assert_msg(engine_paused(fx.id), "the write ended before the kill: nothing to test (raise the size)");
	second_daemon_up(&d3, NULL);
	ck_assert_msg(wait_unpaused(fx.id, THAW_WAIT_MS), "the next daemon did not thaw the guest in %d ms",
		      THAW_WAIT_MS);
	EXPECT_OK(r = f_write(fx.id, NULL, "after-the-kill.txt", "written after"));
	json_decref(r);
	ASSERT_GUEST_FILE(fx.id, W "/after-the-kill.txt", "written after");
	ck_assert_int_eq(msbd_stop(&d3), 0);
	msbd_stop(&d2);   /* already reaped (SIGKILL): removes its dir */
}
END_TEST

/* The daemon's freeze.lock_file, the host lock every maf-sandboxd shares. */
static char *daemon_lock_file(void)
{
	char *out = sh_out("'%s' --check-config 2>/dev/null | sed -n 's/^freeze.lock_file = //p'",
			   getenv("MSB_DAEMON"));

	ck_assert_msg(out[0] == '/', "the daemon has no freeze.lock_file: \"%s\"", out);
	return out;
}

START_TEST(a_container_paused_by_someone_else_is_refused_and_left_so)
{
	char *lock_file = daemon_lock_file(), *err = NULL, *out;
	struct hostlock *h = NULL;
	json_t *r;

	/* The test is someone else's live freeze: it holds the container's host
	 * lock (hostlock.h) and pauses it, as another maf-sandboxd does. Every
	 * maf-sandboxd on this shared engine leaves a locked pause alone (a
	 * daemon starting thaws only the paused containers nobody locks), so
	 * the engine's state below is this test's daemon's doing alone. */
	ck_assert_msg(hostlock_open(lock_file, &h, &err) == 0, "%s", err ? err : "");
	ck_assert_int_eq(hostlock_try(h, fx.id), 0);
	out = sh_out("docker pause %s >/dev/null 2>&1; echo $?", fx.id);
	ck_assert_str_eq(out, "0");
	free(out);
	if (plane_local()) {
		/* The local plane needs no freeze: a paused guest is served, and left paused. */
		EXPECT_OK(r = f_stat(fx.id, NULL, "real/inside.txt"));
		json_decref(r);
		EXPECT_OK(r = f_write(fx.id, NULL, "while-paused.txt", "x"));
		json_decref(r);
		ck_assert_msg(engine_paused(fx.id), "the daemon lifted a pause it did not make");
	} else {
		EXPECT_ERR(f_stat(fx.id, NULL, "real/inside.txt"), "SandboxFreezeFailed");
		EXPECT_ERR(f_write(fx.id, NULL, "while-paused.txt", "x"), "SandboxFreezeFailed");
		ck_assert_msg(engine_paused(fx.id), "the daemon lifted a pause it did not make");
	}
	out = sh_out("docker unpause %s >/dev/null 2>&1; echo $?", fx.id);
	ck_assert_str_eq(out, "0");
	free(out);
	hostlock_release(h, fx.id);
	hostlock_free(h);
	free(lock_file);
	if (plane_local()) {
		ASSERT_GUEST_FILE(fx.id, W "/while-paused.txt", "x");
		return;
	}
	GUEST_FALSE(fx.id, "test -e %s/while-paused.txt", W);
	r = f_read(fx.id, NULL, "real/inside.txt");
	EXPECT_OK(r);
	json_decref(r);
}
END_TEST

/* Short file calls, back to back, on a busy guest: the engine reports
 * pause and unpause state from containerd's events, a little late, so a
 * pause right after an unpause (or the reverse) can meet the old state. No
 * call may fail for it, and none may leave the guest paused.
 *
 * One refusal is not this daemon's: every maf-sandboxd on the host (other
 * test runs on this engine, another lane) thaws, when it starts, the
 * containers of its user it finds paused, holding their host lock for the
 * unpause; a freeze of ours meeting it is refused SandboxFreezeFailed,
 * reason "held elsewhere" (documented: try again). That one is retried
 * every QUICK_ELSEWHERE_PAUSE_MS for at most QUICK_ELSEWHERE_MS per call (a
 * hang guard), and only while another maf-sandboxd process than this
 * test's daemon runs on the host (/proc); with none, the refusal fails the
 * test. At most QUICK_ELSEWHERE_MAX refusals in the whole test. */
/* hang guard: one call's retries while another daemon holds the lock */
#define QUICK_ELSEWHERE_MS 30000
#define QUICK_ELSEWHERE_PAUSE_MS 50
#define QUICK_ELSEWHERE_MAX 2000

/* Whether a maf-sandboxd process other than this test's daemon (pid
 * mine) runs on the host: the /proc/<pid>/comm of every process. */
static bool another_daemon_runs(pid_t mine)
{
	DIR *dir = opendir("/proc");
	struct dirent *de;
	bool found = false;

	ck_assert_ptr_nonnull(dir);
	while (!found && (de = readdir(dir))) {
		char path[300], comm[64] = "";
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		FILE *f;

		if (*end || pid <= 0 || pid == (long)mine)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		if (!(f = fopen(path, "r")))
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		/* comm is cut to 15 bytes: "maf-sandboxd" fits whole. */
		found = strcmp(comm, "maf-sandboxd") == 0;
	}
	closedir(dir);
	return found;
}

static bool held_elsewhere(json_t *r)
{
	return !r && strcmp(last_type, "SandboxFreezeFailed") == 0 &&
	       json_is_string(json_object_get(last_data, "reason")) &&
	       strcmp(json_string_value(json_object_get(last_data, "reason")), "held elsewhere") == 0;
}

START_TEST(quick_calls_back_to_back_never_leave_the_guest_paused)
{
	int elsewhere = 0;

	GUEST_OK(fx.id, "ln -s /tmp /quick");
	ck_assert_int_eq(guest_detach(fx.id, "cd /tmp && while [ ! -e stop-busy ]; do rm -rf busy; mkdir busy; "
				      "printf busy > busy/x; rm -rf busy; ln -s /tmp busy; done"), 0);
	for (int i = 0; i < QUICK_CALLS; i++) {
		json_t *r;

		/* One engine stat under the freeze: /quick is a link. */
		for (long end = now_ms() + QUICK_ELSEWHERE_MS;                    /* hang guard */
		     held_elsewhere(r = f_stat(fx.id, "/quick", "x"));) {
			ck_assert_msg(another_daemon_runs(fx.d.pid), "call %d refused \"held elsewhere\", and no other "
				      "maf-sandboxd runs on this host", i);
			ck_assert_msg(++elsewhere <= QUICK_ELSEWHERE_MAX, "%d refusals \"held elsewhere\" in one test",
				      elsewhere);
			ck_assert_msg(now_ms() < end, "call %d refused \"held elsewhere\" for %d ms", i,
				      QUICK_ELSEWHERE_MS);
			usleep(QUICK_ELSEWHERE_PAUSE_MS * 1000);
		}
		EXPECT_ERR(r, "ConfinementError");
		/* The engine's own state may lag the daemon's thaw: polled until it
		 * says running (hang guard: THAW_WAIT_MS). */
		ck_assert_msg(wait_unpaused(fx.id, THAW_WAIT_MS), "call %d (%s) answered, and the guest stayed paused",
			      i, last_call);
	}
	if (elsewhere)
		fprintf(stderr, "quick calls: %d refused as held by another daemon on the host, retried\n", elsewhere);
	GUEST_OK(fx.id, "touch /tmp/stop-busy");
}
END_TEST

/* ---- the race --------------------------------------------------------------- */

enum { RACE_OK, RACE_CONFINED, RACE_NOT_FOUND, RACE_OUTCOMES };

static int race_outcome(json_t *r, bool reading, int i)
{
	if (r)
		return RACE_OK;
	if (strcmp(last_type, "ConfinementError") == 0)
		return RACE_CONFINED;
	if (strcmp(last_type, "FileNotFoundError") == 0)
		return RACE_NOT_FOUND;
	{
		char *state = sh_out("docker inspect -f '{{json .State}}' %s 2>&1", fx.id);

		msbd_dump_log(&fx.d);
		ck_abort_msg("%s %d during the race: %s answered %s\n  the container: %s", reading ? "read" : "write",
			     i, last_call, last_reply, state);
	}
	return -1;
}


#define RACE_WRITTEN "from the host\n"

START_TEST(a_guest_swapping_a_directory_for_a_link_never_gets_through)
{
	int writes[RACE_OUTCOMES] = { 0 }, reads[RACE_OUTCOMES] = { 0 };
	char *before, *after;
	long t0;

	GUEST_OK(fx.id, "printf 'OUTSIDE\\n' > %s/x", OUT);
	before = outside_snapshot(fx.id);
	/* As fast as it can: a real directory race/, then a link race -> W-outside. */
	ck_assert_int_eq(guest_detach(fx.id, "cd %s && while [ ! -e /tmp/stop-race ]; do rm -rf race; mkdir race; "
				      "printf inside > race/x; rm -rf race; ln -s %s race; done; touch /tmp/race-stopped",
				      W, OUT), 0);
	t0 = now_ms();
	for (int i = 0; i < RACE_CALLS; i++) {
		json_t *r = f_write(fx.id, NULL, "race/x", RACE_WRITTEN);

		/* The local plane races the guest running: never frozen. */
		if (plane_local() && i % 25 == 0)
			ck_assert_msg(!engine_paused(fx.id), "the guest was paused during the race");
		writes[race_outcome(r, false, i)]++;
		json_decref(r);
		r = f_read(fx.id, NULL, "race/x");
		reads[race_outcome(r, true, i)]++;
		if (r) {
			size_t len;
			uint8_t *got = content_of(r, &len);

			/* The guest's own file (maybe caught half-written) or ours. */
			ck_assert_msg((len <= 6 && memcmp(got, "inside", len) == 0) ||
				      (len == strlen(RACE_WRITTEN) && memcmp(got, RACE_WRITTEN, len) == 0),
				      "read %d returned %zu bytes from somewhere else: %.*s", i, len, (int)len, got);
			free(got);
		}
		json_decref(r);
	}
	/* The guest's loop ended (it says so), then its last entry goes. */
	GUEST_OK(fx.id, "touch /tmp/stop-race && until [ -e /tmp/race-stopped ]; do sleep 0.05; done && rm -rf %s/race",
		 W);
	fprintf(stderr, "race: writes %d ok, %d confined, %d not found; reads %d ok, %d confined, %d not found; "
		"%ld ms\n", writes[RACE_OK], writes[RACE_CONFINED], writes[RACE_NOT_FOUND], reads[RACE_OK],
		reads[RACE_CONFINED], reads[RACE_NOT_FOUND], now_ms() - t0);
	after = outside_snapshot(fx.id);
	ck_assert_msg(strcmp(before, after) == 0, "W-outside changed during the race:\n%s\n---- now ----\n%s",
		      before, after);
	ASSERT_GUEST_FILE(fx.id, OUT "/x", "OUTSIDE\n");
	/* Both states were met, or the race proved nothing. */
	ck_assert_msg(writes[RACE_OK] + reads[RACE_OK] > 0, "no call ever met the real directory");
	ck_assert_msg(writes[RACE_CONFINED] + reads[RACE_CONFINED] > 0, "no call ever met the link");
	free(before);
	free(after);
}
END_TEST

/* ---- 7.4 removing ----------------------------------------------------------- */

START_TEST(a_removal_removes)
{
	GUEST_OK(fx.id, "printf d > %s/doomed.txt && printf b > %s/bystander.txt", W, W);
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "doomed.txt", false));
	GUEST_FALSE(fx.id, "test -e %s/doomed.txt", W);
	GUEST_OK(fx.id, "test -f %s/bystander.txt", W);
}
END_TEST

START_TEST(a_missing_path_is_success)
{
	GUEST_OK(fx.id, "printf d > %s/once.txt", W);
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "once.txt", false));
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "once.txt", false));
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "once.txt", true));
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "never/there.txt", false));
}
END_TEST

START_TEST(a_link_is_removed_never_followed)
{
	for (int recursive = 0; recursive <= 1; recursive++) {
		GUEST_OK(fx.id, "printf t > %s/target.txt && ln -sfn %s/target.txt %s/a-link && ln -sfn %s %s/a-dir-link",
			 OUT, OUT, W, OUT, W);
		ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "a-link", recursive));
		ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "a-dir-link", recursive));
		GUEST_FALSE(fx.id, "test -L %s/a-link || test -L %s/a-dir-link", W, W);
		GUEST_OK(fx.id, "test -f %s/target.txt && test -f %s/secret.txt && test -f %s/sub/leaf.txt", OUT, OUT, OUT);
	}
}
END_TEST

START_TEST(a_removal_through_a_linked_parent_is_refused)
{
	GUEST_OK(fx.id, "printf t > %s/target.txt", OUT);
	for (int recursive = 0; recursive <= 1; recursive++) {
		EXPECT_ERR(f_remove(fx.id, NULL, "link-dir/target.txt", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, NULL, "link-dir/sub", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, W "/link-dir", "target.txt", recursive), "ConfinementError");
	}
	GUEST_OK(fx.id, "test -f %s/target.txt && test -f %s/sub/leaf.txt", OUT, OUT);
}
END_TEST

START_TEST(a_directory_needs_recursive)
{
	GUEST_OK(fx.id, "mkdir -p %s/dir %s/empty && printf k > %s/dir/keeps.txt", W, W, W);
	EXPECT_ERR(f_remove(fx.id, NULL, "dir", false), "OSError");
	GUEST_OK(fx.id, "test -f %s/dir/keeps.txt", W);
	EXPECT_ERR(f_remove(fx.id, NULL, "empty", false), "OSError");
	GUEST_OK(fx.id, "test -d %s/empty", W);
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "empty", true));
	GUEST_FALSE(fx.id, "test -e %s/empty", W);
}
END_TEST

START_TEST(recursive_removes_the_tree)
{
	GUEST_OK(fx.id, "mkdir -p %s/tree/a/b && printf l > %s/tree/leaf.txt && printf l > %s/tree/a/b/deep.txt && "
		 "printf n > %s/next-to-tree.txt", W, W, W, W);
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "tree", true));
	GUEST_FALSE(fx.id, "test -e %s/tree", W);
	GUEST_OK(fx.id, "test -f %s/next-to-tree.txt", W);
}
END_TEST

START_TEST(a_link_inside_a_recursive_removal_is_unlinked_not_followed)
{
	GUEST_OK(fx.id, "printf i > %s/interior-target.txt && mkdir -p %s/linked-tree && "
		 "ln -s %s/interior-target.txt %s/linked-tree/inside-link && ln -s %s %s/linked-tree/dir-link",
		 OUT, W, OUT, W, OUT, W);
	ASSERT_NULL_RESULT(f_remove(fx.id, NULL, "linked-tree", true));
	GUEST_FALSE(fx.id, "test -e %s/linked-tree", W);
	GUEST_OK(fx.id, "test -f %s/interior-target.txt && test -f %s/secret.txt && test -f %s/sub/leaf.txt",
		 OUT, OUT, OUT);
}
END_TEST

START_TEST(removing_the_working_directory_is_refused)
{
	GUEST_OK(fx.id, "printf g > %s/ground.txt", W);
	for (int recursive = 0; recursive <= 1; recursive++) {
		EXPECT_ERR(f_remove(fx.id, NULL, ".", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, NULL, W, recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, "real", ".", recursive), "ConfinementError");
	}
	GUEST_OK(fx.id, "test -f %s/ground.txt && test -f %s/real/inside.txt", W, W);
}
END_TEST

START_TEST(removing_a_path_outside_is_refused)
{
	GUEST_OK(fx.id, "printf t > %s/target.txt", OUT);
	for (int recursive = 0; recursive <= 1; recursive++) {
		EXPECT_ERR(f_remove(fx.id, NULL, "../work-outside/target.txt", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, NULL, OUT "/target.txt", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, NULL, "..", recursive), "ConfinementError");
		EXPECT_ERR(f_remove(fx.id, NULL, "sub\\x", recursive), "ConfinementError");
	}
	GUEST_OK(fx.id, "test -f %s/target.txt", OUT);
}
END_TEST

START_TEST(a_file_in_the_way_of_a_removal_is_not_a_directory)
{
	EXPECT_ERR(f_remove(fx.id, NULL, "plain.txt/x", false), "NotADirectoryError");
	GUEST_OK(fx.id, "test -f %s/plain.txt", W);
}
END_TEST

/* ---- 7.5 reclaiming ----------------------------------------------------------- */

START_TEST(a_created_directory_is_gone)
{
	GUEST_OK(fx.id, "mkdir -p %s/reclaim-me %s/reclaim-rel && printf x > %s/reclaim-me/f && printf x > %s/reclaim-rel/f "
		 "&& printf b > %s/reclaim-bystander.txt", W, W, W, W, W);
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, W "/reclaim-me"));
	GUEST_FALSE(fx.id, "test -e %s/reclaim-me", W);
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, "reclaim-rel"));
	GUEST_FALSE(fx.id, "test -e %s/reclaim-rel", W);
	GUEST_OK(fx.id, "test -f %s/reclaim-bystander.txt", W);
}
END_TEST

START_TEST(nested_content_goes_with_it)
{
	GUEST_OK(fx.id, "mkdir -p %s/reclaim-tree/deep/nested && printf l > %s/reclaim-tree/deep/nested/leaf.txt && "
		 "printf t > %s/reclaim-tree/top.txt", W, W, W);
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, W "/reclaim-tree"));
	GUEST_FALSE(fx.id, "test -e %s/reclaim-tree", W);
}
END_TEST

START_TEST(a_link_inside_a_reclaim_is_unlinked_not_followed)
{
	GUEST_OK(fx.id, "printf r > %s/reclaim-target.txt && mkdir -p %s/reclaim-links && "
		 "ln -s %s/reclaim-target.txt %s/reclaim-links/to-file && ln -s %s %s/reclaim-links/to-dir",
		 OUT, W, OUT, W, OUT, W);
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, W "/reclaim-links"));
	GUEST_FALSE(fx.id, "test -e %s/reclaim-links", W);
	GUEST_OK(fx.id, "test -f %s/reclaim-target.txt && test -f %s/secret.txt && test -f %s/sub/leaf.txt",
		 OUT, OUT, OUT);
}
END_TEST

START_TEST(a_missing_directory_is_success)
{
	GUEST_OK(fx.id, "mkdir -p %s/twice", W);
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, W "/twice"));
	ASSERT_NULL_RESULT(f_reclaim(fx.id, NULL, W "/twice"));
	GUEST_FALSE(fx.id, "test -e %s/twice", W);
}
END_TEST

START_TEST(an_absent_working_directory_still_succeeds)
{
	ASSERT_NULL_RESULT(f_reclaim(fx.id, W "/absent-work", W "/absent-work/call-a1b2c3"));
	ASSERT_NULL_RESULT(f_reclaim(fx.id, W "/absent-work", "call-a1b2c3"));
	GUEST_FALSE(fx.id, "test -e %s/absent-work", W);
}
END_TEST

/* Reclaim targets refused: too close to the root, the working directory, an escape. */
static const char *const reclaim_refusals[] = {
	"/", "/etc", "//tmp", "/a/..", "/tmp/..", ".", "", "..", "../work-outside", "real/../..", "x\\y",
};

START_TEST(reclaim_refuses_the_root_the_working_directory_and_escapes)
{
	for (size_t i = 0; i < sizeof(reclaim_refusals) / sizeof(reclaim_refusals[0]); i++)
		EXPECT_ERR(f_reclaim(fx.id, NULL, reclaim_refusals[i]), "ConfinementError");
	GUEST_OK(fx.id, "test -f /etc/passwd && test -d /tmp && test -f %s/real/inside.txt && test -f %s/secret.txt",
		 W, OUT);
}
END_TEST

/* ---- 7.8 call scope ------------------------------------------------------------ */

static json_t *call_spec(void)
{
	json_t *spec = files_spec(img_root);

	json_object_set_new(spec, "isolation_scope", json_string("call"));
	return spec;
}

START_TEST(the_other_calls_file_is_not_here)
{
	char a[80], b[80];
	json_t *r;

	acquire_ok(key_for("agent", "call-a"), call_spec(), a, sizeof(a));
	acquire_ok(key_for("agent", "call-b"), call_spec(), b, sizeof(b));
	ck_assert_str_ne(a, b);
	EXPECT_OK(r = f_write(a, NULL, "planted.txt", "planted in call a"));
	json_decref(r);
	/* Positive control: it landed in the planter. */
	ASSERT_STAT(f_stat(a, NULL, "planted.txt"), "planted.txt", "file", 17);
	GUEST_OK(a, "test -f %s/planted.txt", W);
	ASSERT_NULL_RESULT(f_stat(b, NULL, "planted.txt"));
	EXPECT_ERR(f_read(b, NULL, "planted.txt"), "FileNotFoundError");
	GUEST_FALSE(b, "test -e %s/planted.txt", W);
}
END_TEST

START_TEST(the_same_name_holds_this_calls_bytes)
{
	char a[80], b[80];
	json_t *r;

	acquire_ok(key_for("agent", "call-a"), call_spec(), a, sizeof(a));
	acquire_ok(key_for("agent", "call-b"), call_spec(), b, sizeof(b));
	EXPECT_OK(r = f_write(a, NULL, "same.txt", "bytes of call a"));
	json_decref(r);
	EXPECT_OK(r = f_write(b, NULL, "same.txt", "call b's own bytes"));
	json_decref(r);
	r = f_read(a, NULL, "same.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, "bytes of call a", 15);
	json_decref(r);
	r = f_read(b, NULL, "same.txt");
	EXPECT_OK(r);
	ASSERT_READ(r, "call b's own bytes", 18);
	json_decref(r);
}
END_TEST

/* ---- the work dir that acquire prepares ------------------------------------------ */

START_TEST(acquire_prepares_the_work_dir_cold_and_warm)
{
	char id[80];
	json_t *r;

	acquire_ok(key_for("agent", NULL), default_spec(img_root), id, sizeof(id));
	GUEST_OK(id, "test -d %s && test ! -L %s && test -d %s && test ! -L %s", BASE, BASE, W, W);
	ASSERT_OWNER_MODE(id, W, "0:0 755");
	ASSERT_OWNER_MODE(id, BASE, "0:0 755");
	GUEST_OK(id, "rm -rf %s", BASE);
	r = acquire(key_for("agent", NULL), default_spec(img_root));
	EXPECT_OK(r);
	ck_assert_str_eq(jstr(r, "sandbox"), id);
	ck_assert(json_is_false(jget(r, "created")));
	json_decref(r);
	GUEST_OK(id, "test -d %s && test ! -L %s", W, W);
	ASSERT_OWNER_MODE(id, W, "0:0 755");
}
END_TEST

/* What the guest puts where the work dir goes, and what acquire says. */
struct obstruction_row {
	const char *name;
	const char *plant;     /* guest shell; W and BASE are fixed paths */
	const char *type;
	const char *intact;    /* guest shell: the target is untouched */
	const char *unplant;
};

static const struct obstruction_row obstruction_rows[] = {
	{ "a linked work dir", "rm -rf " W " && mkdir -p /tmp/elsewhere && ln -s /tmp/elsewhere " W,
	  "ConfinementError", "test -z \"$(ls -A /tmp/elsewhere)\"", "rm -f " W },
	{ "a linked ancestor", "rm -rf " BASE " && mkdir -p /tmp/base && ln -s /tmp/base " BASE,
	  "ConfinementError", "test -z \"$(ls -A /tmp/base)\"", "rm -f " BASE },
	{ "an ancestor linked to /", "rm -rf " BASE " && mkdir -p /work && ln -s / " BASE,
	  "ConfinementError", "test -z \"$(ls -A /work)\"", "rm -f " BASE },
	{ "a file at the work dir", "rm -rf " W " && printf f > " W,
	  "NotADirectoryError", "test -f " W, "rm -f " W },
	{ "a file at an ancestor", "rm -rf " BASE " && printf f > " BASE,
	  "NotADirectoryError", "test -f " BASE, "rm -f " BASE },
};

START_TEST(an_obstructed_work_dir_refuses_acquire)
{
	const struct obstruction_row *row = &obstruction_rows[_i];
	char id[80];

	acquire_ok(key_for("agent", NULL), default_spec(img_root), id, sizeof(id));
	GUEST_OK(id, "%s", row->plant);
	expect_err_later(acquire(key_for("agent", NULL), default_spec(img_root)), row->type, NULL);
	/* The file plane says the same. */
	expect_err_later(f_write(id, NULL, "landed.txt", "x"), row->type, "landed.txt");
	expect_err_later(f_stat(id, NULL, "."), row->type, ".");
	GUEST_OK(id, "%s", row->intact);
	/* Once the guest clears it, a retry on the same key works. */
	GUEST_OK(id, "%s", row->unplant);
	acquire_ok(key_for("agent", NULL), default_spec(img_root), id, sizeof(id));
	GUEST_OK(id, "test -d %s && test ! -L %s && test ! -L %s", W, W, BASE);
	ck_assert_msg(!later[0], "%s:%s", row->name, later);
}
END_TEST

START_TEST(an_existing_work_dir_keeps_its_contents_mode_and_owner)
{
	char id[80], *out;
	json_t *r;

	acquire_ok(key_for("agent", NULL), files_spec(img_root), id, sizeof(id));
	GUEST_OK(id, "rm -rf %s", W);
	/* Planted with an owner and mode the daemon would never stamp. */
	out = sh_out("d=$(mktemp -d) && mkdir $d/work && printf 'keep\\n' > $d/work/keep.txt && chmod 0705 $d/work && "
		     "tar -C $d --owner=4242 --group=4243 --numeric-owner -c work | docker cp -a - %s:%s/ && "
		     "rm -rf $d && echo ok", id, BASE);
	ck_assert_str_eq(out, "ok");
	free(out);
	ASSERT_OWNER_MODE(id, W, "4242:4243 705");
	r = acquire(key_for("agent", NULL), files_spec(img_root));
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(id, W, "4242:4243 705");
	ASSERT_GUEST_FILE(id, W "/keep.txt", "keep\n");
	/* A write into it keeps it as it is too. */
	if (plane_local()) {
		/* The local plane writes with the guest's own authority: root
		 * without capabilities (sandbox.cap_drop_all) cannot write into
		 * a 0705 directory of uid 4242, so neither can the daemon. */
		EXPECT_ERR(f_write(id, NULL, "new.txt", "new"), "OSError");
		ck_assert_str_eq(json_string_value(json_object_get(last_data, "errno")), "EACCES");
		GUEST_FALSE(id, "test -e %s/new.txt", W);
	} else {
		EXPECT_OK(r = f_write(id, NULL, "new.txt", "new"));
		json_decref(r);
		ASSERT_OWNER_MODE(id, W "/new.txt", "0:0 644");
	}
	ASSERT_OWNER_MODE(id, W, "4242:4243 705");
	/* And the guest's own changes above it survive a warm acquire. */
	GUEST_OK(id, "chmod 0711 %s", BASE);
	r = acquire(key_for("agent", NULL), files_spec(img_root));
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(id, BASE, "0:0 711");
	ASSERT_OWNER_MODE(id, W, "4242:4243 705");
	ASSERT_GUEST_FILE(id, W "/keep.txt", "keep\n");
}
END_TEST

START_TEST(an_explicit_work_dir_is_the_storage_base)
{
	json_t *spec = files_spec(img_root), *r;
	char id[80];

	json_object_set_new(spec, "work_dir", json_string("/srv/explicit/base"));
	r = acquire(key_for("agent", NULL), spec);
	EXPECT_OK(r);
	ck_assert_str_eq(jstr(r, "work_dir"), "/srv/explicit/base");
	snprintf(id, sizeof(id), "%s", jstr(r, "sandbox"));
	json_decref(r);
	GUEST_OK(id, "test -d /srv/explicit/base");
	GUEST_FALSE(id, "test -e %s", W);
	EXPECT_OK(r = f_write(id, NULL, "a.txt", "a"));
	json_decref(r);
	EXPECT_OK(r = f_write(id, "sub", "b.txt", "b"));
	json_decref(r);
	ASSERT_GUEST_FILE(id, "/srv/explicit/base/a.txt", "a");
	ASSERT_GUEST_FILE(id, "/srv/explicit/base/sub/b.txt", "b");
	ASSERT_STAT(f_stat(id, NULL, "."), ".", "directory", -1);
	EXPECT_ERR(f_write(id, NULL, "../escape.txt", "x"), "ConfinementError");
	GUEST_FALSE(id, "test -e /srv/explicit/escape.txt");
}
END_TEST

/* ---- the guest's identity -------------------------------------------------------- */

struct identity_row {
	const char *name;
	const char *image;     /* one of the img_* buffers */
	const char *owner;     /* uid:gid what is written must carry */
};

static const struct identity_row identity_rows[] = {
	{ "USER 1000:1000", img_u1000, "1000:1000" },
	{ "USER app (app:x:1001:1002 in /etc/passwd)", img_app, "1001:1002" },
};

START_TEST(what_a_write_lands_belongs_to_the_guest)
{
	const struct identity_row *row = &identity_rows[_i];
	char id[80], want[64];
	json_t *r;

	acquire_ok(key_for("agent", NULL), files_spec(row->image), id, sizeof(id));
	snprintf(want, sizeof(want), "%s 755", row->owner);
	ASSERT_OWNER_MODE(id, W, want);
	ASSERT_OWNER_MODE(id, BASE, "0:0 755");
	EXPECT_OK(r = f_write(id, NULL, "sub/dir/f.txt", "written"));
	json_decref(r);
	ASSERT_OWNER_MODE(id, W "/sub", want);
	ASSERT_OWNER_MODE(id, W "/sub/dir", want);
	snprintf(want, sizeof(want), "%s 644", row->owner);
	ASSERT_OWNER_MODE(id, W "/sub/dir/f.txt", want);
	/* The guest program changes and removes what was written. */
	ck_assert_int_eq(guest_user(id, "printf ' and changed' >> %s/sub/dir/f.txt && rm -rf %s/sub && test ! -e %s/sub "
				    "&& printf mine > %s/guests.txt", W, W, W, W), 0);
	/* files.remove and files.reclaim act as the guest. */
	EXPECT_OK(r = f_write(id, NULL, "gone/f.txt", "x"));
	json_decref(r);
	ASSERT_NULL_RESULT(f_remove(id, NULL, "gone", true));
	EXPECT_OK(r = f_write(id, NULL, "call-x/f.txt", "x"));
	json_decref(r);
	ASSERT_NULL_RESULT(f_reclaim(id, NULL, W "/call-x"));
	GUEST_FALSE(id, "test -e %s/gone || test -e %s/call-x", W, W);
	(void)row->name;
}
END_TEST

START_TEST(a_removal_takes_nothing_beyond_the_guest)
{
	char id[80], *out;
	json_t *r;

	acquire_ok(key_for("agent", NULL), files_spec(img_u1000), id, sizeof(id));
	/* A root-owned directory the guest (uid 1000) cannot empty: docker cp
	 * without -a lands it root-owned (-a would look "1000:1000" up by name). */
	out = sh_out("d=$(mktemp -d) && mkdir $d/rootdir && printf r > $d/rootdir/root.txt && "
		     "tar -C $d -c rootdir | docker cp - %s:%s/ && "
		     "rm -rf $d && echo ok", id, W);
	ck_assert_str_eq(out, "ok");
	free(out);
	ASSERT_OWNER_MODE(id, W "/rootdir", "0:0 755");
	ck_assert_int_ne(guest_user(id, "rm -f %s/rootdir/root.txt 2>/dev/null", W), 0);   /* the guest cannot */
	r = f_remove(id, NULL, "rootdir/root.txt", false);
	EXPECT_ERR(r, "OSError");
	if (plane_local()) {
		/* Refused by the kernel, to the daemon acting as the guest. */
		ck_assert_msg(json_is_string(json_object_get(last_data, "errno")) &&
			      strcmp(json_string_value(json_object_get(last_data, "errno")), "EACCES") == 0,
			      "errno: %s", last_reply);
	} else {
		ck_assert_msg(json_integer_value(json_object_get(last_data, "exit_code")) != 0, "exit_code: %s",
			      last_reply);
		ck_assert_msg(json_is_string(json_object_get(last_data, "stderr")), "stderr: %s", last_reply);
	}
	expect_err_later(f_remove(id, NULL, "rootdir/root.txt", false), "OSError", "rootdir/root.txt");
	EXPECT_ERR(f_remove(id, NULL, "rootdir", true), "OSError");
	EXPECT_ERR(f_reclaim(id, NULL, W "/rootdir"), "OSError");
	GUEST_OK(id, "test -f %s/rootdir/root.txt", W);
	ASSERT_NOTHING_LATER();
}
END_TEST

START_TEST(an_unresolvable_user_refuses_files_out)
{
	json_t *spec, *r;
	char id[80];

	/* USER ghost: its passwd line sits past what the daemon reads (64 KiB)
	 * and the image has no `id`; runc still finds it, so the container runs.
	 * By name the daemon cannot resolve it — but on an engine on this host
	 * (these tests' own, the daemon root) it takes the uid:gid runc gave
	 * the container's init (PROTOCOL.md, "The identity is fixed"): the
	 * user is known, files_out is served and inputs land 1003:1003. On a
	 * remote engine the name stays unresolved and files_out is refused. */
	spec = json_pack("{s:s, s:s, s:{s:s}, s:[sss]}", "kind", "files", "image", img_ghost, "labels", RUN_LABEL,
			 run_id, "requires", "exec", "files_in", "files_out");
	r = acquire(key_for("needs-out", NULL), spec);
	ck_assert_msg(r, "the ghost's files_out acquire was refused: %s", last_reply);
	json_decref(r);
	acquire_ok(key_for("input-only", NULL), default_spec(img_ghost), id, sizeof(id));
	ASSERT_OWNER_MODE(id, W, "1003:1003 755");
	EXPECT_OK(r = f_write(id, NULL, "in.txt", "in"));
	json_decref(r);
	ASSERT_OWNER_MODE(id, W "/in.txt", "1003:1003 644");
}
END_TEST

/* ---- configured ceilings ----------------------------------------------------- */

static void fx_low_ceilings_setup(void)
{
	char file[32], total[32], files[32];
	json_t *spec;

	snprintf(file, sizeof(file), "files.max_file_bytes=%d", LOW_FILE_BYTES);
	snprintf(total, sizeof(total), "files.max_total_bytes=%d", LOW_TOTAL_BYTES);
	snprintf(files, sizeof(files), "files.max_files=%d", LOW_FILES);
	daemon_up((const char *[]){ "--set", file, "--set", total, "--set", files, NULL });
	spec = files_spec(img_root);
	json_object_set_new(spec, "files_in", json_pack("{s:i, s:i, s:i}", "max_bytes_per_file", LOW_FILE_BYTES,
							"max_total_bytes", LOW_TOTAL_BYTES, "max_files", LOW_FILES));
	json_object_set(spec, "files_out", json_object_get(spec, "files_in"));
	acquire_ok(key_for("agent", NULL), spec, fx.id, sizeof(fx.id));
	plant_layout(fx.id);
}

START_TEST(configured_ceilings_refuse_whole_calls)
{
	char buf[LOW_FILE_BYTES + 1];
	json_t *r, *files;

	memset(buf, 'c', sizeof(buf));
	EXPECT_ERR(f_write_bytes(fx.id, NULL, "over.bin", buf, LOW_FILE_BYTES + 1), "SandboxTransferCapExceeded");
	GUEST_FALSE(fx.id, "test -e %s/over.bin", W);
	EXPECT_OK(r = f_write_bytes(fx.id, NULL, "at.bin", buf, LOW_FILE_BYTES));
	json_decref(r);
	/* Over the file count. */
	EXPECT_ERR(rpc("files.write", json_pack("{s:s, s:o}", "sandbox", fx.id, "files", many_files("five", LOW_FILES + 1))),
		   "SandboxTransferCapExceeded");
	GUEST_FALSE(fx.id, "test -e %s/five", W);
	/* Over the total: three files each under the per-file ceiling. */
	files = json_array();
	for (int i = 0; i < 3; i++) {
		char path[32], *b = harness_b64_encode(buf, LOW_FILE_BYTES);

		snprintf(path, sizeof(path), "total/%d.bin", i);
		json_array_append_new(files, json_pack("{s:s, s:s}", "path", path, "content_b64", b));
		free(b);
	}
	EXPECT_ERR(rpc("files.write", json_pack("{s:s, s:o}", "sandbox", fx.id, "files", files)),
		   "SandboxTransferCapExceeded");
	GUEST_FALSE(fx.id, "test -e %s/total", W);
	/* Reads: a planted file over the ceiling, and a multi-read over the total. */
	GUEST_OK(fx.id, "head -c %d /dev/zero > %s/big.bin && cp %s/at.bin %s/at2.bin && cp %s/at.bin %s/at3.bin",
		 LOW_FILE_BYTES + 1, W, W, W, W, W);
	EXPECT_ERR(f_read(fx.id, NULL, "big.bin"), "SandboxTransferCapExceeded");
	ck_assert_msg(json_integer_value(json_object_get(last_data, "size")) == LOW_FILE_BYTES + 1, "%s", last_reply);
	r = f_read(fx.id, NULL, "at.bin");
	EXPECT_OK(r);
	ASSERT_READ(r, buf, LOW_FILE_BYTES);
	json_decref(r);
	EXPECT_ERR(rpc("files.read", json_pack("{s:s, s:[sss]}", "sandbox", fx.id, "paths", "at.bin", "at2.bin",
					       "at3.bin")), "SandboxTransferCapExceeded");
}
END_TEST

/* ---- a new init: pinning (local plane), the same answers (archive) -------------- */

/* The container's init pid as the engine reports it (0: not running). */
static long engine_pid(const char *id)
{
	json_t *j = engine_inspect(id);
	long pid = json_is_true(jget(j, "State.Running")) ? (long)json_integer_value(jget(j, "State.Pid")) : 0;

	json_decref(j);
	return pid;
}

/* Forks a sleeping child that gets pid want (the kernel hands out
 * ns_last_pid + 1), trying a few times: 0 when another process took it. */
static pid_t impostor_with_pid(long want)
{
	for (int i = 0; i < 50; i++) {
		FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
		pid_t pid;

		if (!f)
			return 0;
		fprintf(f, "%ld", want - 1);
		fclose(f);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			execlp("sleep", "sleep", "30", (char *)NULL);
			_exit(127);
		}
		if (pid == want)
			return pid;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	return 0;
}

START_TEST(a_new_init_between_calls_never_redirects_a_call)
{
	char host_only[96], *out;
	long before, after;
	pid_t impostor;
	json_t *r;
	int fd;

	/* A file only the host has: found only if a call reached the host's root. */
	snprintf(host_only, sizeof(host_only), "/tmp/msb-host-only-%d.txt", (int)getpid());
	fd = open(host_only, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "host\n", 5), 5);
	close(fd);
	EXPECT_OK(r = f_write(fx.id, NULL, "before.txt", "before the restart"));
	json_decref(r);
	ASSERT_NULL_RESULT(f_stat(fx.id, "/", host_only));
	before = engine_pid(fx.id);
	ck_assert_int_gt(before, 0);
	/* A restart: a new init, the same filesystem. */
	out = sh_out("docker restart -t 0 %s >/dev/null 2>&1; echo $?", fx.id);
	ck_assert_str_eq(out, "0");
	free(out);
	after = engine_pid(fx.id);
	ck_assert_msg(after > 0 && after != before, "the restart kept pid %ld (now %ld)", before, after);
	/* Calls after it work, on the new root. */
	r = f_read(fx.id, NULL, "before.txt");
	EXPECT_OK(r);
	json_decref(r);
	EXPECT_OK(r = f_write(fx.id, NULL, "after.txt", "after the restart"));
	json_decref(r);
	ASSERT_GUEST_FILE(fx.id, W "/after.txt", "after the restart");
	ASSERT_NULL_RESULT(f_stat(fx.id, "/", host_only));
	/* The init dies and its pid goes to a process of the host: no call may
	 * reach that process's root (the host's). */
	out = sh_out("docker kill %s >/dev/null 2>&1; echo $?", fx.id);
	ck_assert_str_eq(out, "0");
	free(out);
	impostor = impostor_with_pid(after);
	fprintf(stderr, "new init: pid %ld then %ld; an impostor %s pid %ld\n", before, after,
		impostor ? "holds" : "could not take", after);
	EXPECT_ERR(f_stat(fx.id, "/", host_only), "SandboxFreezeFailed");
	ck_assert_str_eq(json_string_value(json_object_get(last_data, "reason")), "not running");
	EXPECT_ERR(f_read(fx.id, "/", host_only), "SandboxFreezeFailed");
	if (impostor) {
		kill(impostor, SIGKILL);
		waitpid(impostor, NULL, 0);
	}
	/* Started again: served again. */
	out = sh_out("docker start %s >/dev/null 2>&1; echo $?", fx.id);
	ck_assert_str_eq(out, "0");
	free(out);
	r = f_read(fx.id, NULL, "after.txt");
	EXPECT_OK(r);
	json_decref(r);
	unlink(host_only);
}
END_TEST

/* ---- listing (behaviour-core §7.1, last four; §7.8) ------------------------------ */

static json_t *f_list(const char *sb, const char *wd, const char *path)
{
	return rpc("files.list", fparams(sb, wd, path));
}

/* A listing refusal: type on the local plane; on the archive plane every
 * listing is refused SandboxCapabilityNotSupported, naming files_list. */
#define EXPECT_LIST_ERR(res, type) do { \
	if (plane_local()) { \
		EXPECT_ERR(res, type); \
	} else { \
		EXPECT_ERR(res, "SandboxCapabilityNotSupported"); \
		ck_assert_str_eq(json_string_value(json_object_get(last_data, "capability")), "files_list"); \
	} \
} while (0)

/* The entry named path in a listing, or NULL. */
static json_t *list_entry(json_t *list, const char *path)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(list, "entries"), i, e)
		if (strcmp(json_string_value(json_object_get(e, "path")), path) == 0)
			return e;
	return NULL;
}

static void assert_entry(json_t *list, const char *path, const char *kind, json_int_t size)
{
	json_t *e = list_entry(list, path);

	ck_assert_msg(e, "%s is not in the listing %s", path, last_reply);
	ck_assert_str_eq(json_string_value(json_object_get(e, "kind")), kind);
	if (size < 0)
		ck_assert_msg(json_is_null(json_object_get(e, "size")), "%s: size not null", path);
	else
		ck_assert_int_eq(json_integer_value(json_object_get(e, "size")), size);
}

START_TEST(listing_a_linked_directory)
{
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "link-dir"), "ConfinementError");
}
END_TEST

START_TEST(listing_through_a_linked_parent)
{
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "link-dir/sub"), "ConfinementError");
}
END_TEST

START_TEST(listing_under_a_linked_ancestor)
{
	EXPECT_LIST_ERR(f_list(fx.id, W "/link-dir/sub", "."), "ConfinementError");
	EXPECT_LIST_ERR(f_list(fx.id, W "/link-dir", "."), "ConfinementError");
}
END_TEST

START_TEST(a_listing_names_its_links)
{
	json_t *r = f_list(fx.id, NULL, ".");
	size_t i, n;
	json_t *e;
	const char *prev = "";

	if (!plane_local()) {
		EXPECT_LIST_ERR(r, "-");
		return;
	}
	EXPECT_OK(r);
	assert_entry(r, "link-file", "symlink", -1);
	assert_entry(r, "link-dir", "symlink", -1);
	assert_entry(r, "real", "directory", -1);
	assert_entry(r, "plain.txt", "file", 6);
	/* Direct children only, sorted, never what a link points at. */
	n = json_array_size(json_object_get(r, "entries"));
	json_array_foreach(json_object_get(r, "entries"), i, e) {
		const char *path = json_string_value(json_object_get(e, "path"));

		ck_assert_msg(!strchr(path, '/'), "not a direct child: %s", path);
		ck_assert_msg(strcmp(prev, path) < 0, "not sorted: %s before %s", prev, path);
		ck_assert_msg(strcmp(path, "secret.txt") != 0, "the listing followed a link");
		prev = path;
	}
	ck_assert_uint_eq(n, 4);
	json_decref(r);
	/* A subdirectory: paths relative to the working directory. */
	EXPECT_OK(r = f_list(fx.id, NULL, "real"));
	assert_entry(r, "real/inside.txt", "file", 20);
	ck_assert_uint_eq(json_array_size(json_object_get(r, "entries")), 1);
	json_decref(r);
}
END_TEST

START_TEST(listing_what_is_not_a_directory)
{
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "plain.txt"), "NotADirectoryError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "plain.txt/deeper"), "NotADirectoryError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "absent"), "FileNotFoundError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "link-file"), "ConfinementError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "../work-outside"), "ConfinementError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, OUT), "ConfinementError");
	EXPECT_LIST_ERR(f_list(fx.id, NULL, "sub\\x"), "ConfinementError");
}
END_TEST

START_TEST(the_listing_holds_only_this_calls_files)
{
	char a[80], b[80];
	json_t *r;

	acquire_ok(key_for("agent", "call-a"), call_spec(), a, sizeof(a));
	acquire_ok(key_for("agent", "call-b"), call_spec(), b, sizeof(b));
	EXPECT_OK(r = f_write(a, NULL, "only-in-a.txt", "a"));
	json_decref(r);
	EXPECT_OK(r = f_write(b, NULL, "only-in-b.txt", "bb"));
	json_decref(r);
	r = f_list(a, NULL, ".");
	if (!plane_local()) {
		EXPECT_LIST_ERR(r, "-");
		return;
	}
	EXPECT_OK(r);
	assert_entry(r, "only-in-a.txt", "file", 1);
	ck_assert_msg(!list_entry(r, "only-in-b.txt"), "call a lists call b's file: %s", last_reply);
	json_decref(r);
	EXPECT_OK(r = f_list(b, NULL, "."));
	assert_entry(r, "only-in-b.txt", "file", 2);
	ck_assert_msg(!list_entry(r, "only-in-a.txt"), "call b lists call a's file: %s", last_reply);
	json_decref(r);
}
END_TEST

/* What the daemon declares and reports follows the plane that serves. */
START_TEST(the_plane_is_declared_and_reported)
{
	json_t *d = rpc("daemon.describe", NULL), *st = rpc("daemon.status", NULL), *spec, *r;
	const char *want = plane_local() ? "local" : "archive";
	bool listed = false;
	size_t i;
	json_t *c;
	char id[80];

	EXPECT_OK(d);
	EXPECT_OK(st);
	json_array_foreach(json_object_get(d, "capabilities"), i, c)
		listed |= strcmp(json_string_value(c), "files_list") == 0;
	ck_assert_msg(listed == plane_local(), "describe: %s", json_dumps(d, JSON_COMPACT));
	ck_assert_str_eq(jstr(st, "file_plane"), want);
	ck_assert_msg(plane_local() == json_is_null(json_object_get(st, "file_plane_reason")) ||
		      plane_local() == !json_object_get(st, "file_plane_reason"), "file_plane_reason");
	json_decref(d);
	json_decref(st);
	r = acquire(key_for("agent", NULL), files_spec(img_root));
	EXPECT_OK(r);
	ck_assert_str_eq(jstr(r, "file_plane"), want);
	json_decref(r);
	/* A spec that requires listing: served where the local plane is. */
	spec = files_spec(img_root);
	json_array_append_new(json_object_get(spec, "requires"), json_string("files_list"));
	r = acquire(key_for("lister", NULL), spec);
	if (plane_local()) {
		EXPECT_OK(r);
		snprintf(id, sizeof(id), "%s", jstr(r, "sandbox"));
		json_decref(r);
		EXPECT_OK(r = f_list(id, NULL, "."));
		json_decref(r);
	} else {
		EXPECT_ERR(r, "SandboxCapabilityNotSupported");
	}
}
END_TEST

/* ---- naming a sandbox (PROTOCOL.md "Naming a sandbox") ----------------------- */

static json_t *exec_echo(const char *sb, const char *word)
{
	return rpc("sandbox.exec", json_pack("{s:s, s:[ss], s:i}", "sandbox", sb, "command", "echo", word,
					     "timeout_seconds", 30));
}

/* Every form of a sandbox's name reaches it: the full id (either case), 12
 * hex digits of it (either case), its name, with and without the '/'. */
START_TEST(a_sandbox_is_named_by_id_prefix_or_name)
{
	char id[80], name[80], upper[80], forms[6][96];
	json_t *r = acquire(key_for("named", NULL), files_spec(img_root));

	EXPECT_OK(r);
	snprintf(id, sizeof(id), "%s", jstr(r, "sandbox"));
	snprintf(name, sizeof(name), "%s", jstr(r, "name"));
	json_decref(r);
	for (size_t i = 0; i <= strlen(id); i++)
		upper[i] = (char)(id[i] >= 'a' && id[i] <= 'f' ? id[i] - 'a' + 'A' : id[i]);
	snprintf(forms[0], sizeof(forms[0]), "%s", id);
	snprintf(forms[1], sizeof(forms[1]), "%s", upper);
	snprintf(forms[2], sizeof(forms[2]), "%.12s", id);
	snprintf(forms[3], sizeof(forms[3]), "%.12s", upper);
	snprintf(forms[4], sizeof(forms[4]), "%s", name);
	snprintf(forms[5], sizeof(forms[5]), "/%s", name);
	for (int i = 0; i < 6; i++) {
		char *text;

		r = f_write(forms[i], NULL, "named.txt", forms[i]);
		EXPECT_OK(r);
		json_decref(r);
		ASSERT_GUEST_FILE(id, W "/named.txt", forms[i]);
		r = f_read(forms[i], NULL, "named.txt");
		EXPECT_OK(r);
		json_decref(r);
		r = exec_echo(forms[i], forms[i]);
		EXPECT_OK(r);
		text = harness_b64_field(r, "stdout_b64");
		ck_assert_msg(text && strncmp(text, forms[i], strlen(forms[i])) == 0, "exec by %s: %s", forms[i], text);
		free(text);
		json_decref(r);
	}
	/* Nothing by that name: not found, saying what was given and how to list. */
	EXPECT_ERR(f_stat("maf-sandbox-docker-000000000000", NULL, "x"), "SandboxNotFound");
	ck_assert_str_eq(json_string_value(json_object_get(last_data, "sandbox")), "maf-sandbox-docker-000000000000");
	ck_assert_msg(strstr(last_reply, "maf-sandbox ls"), "%s", last_reply);
	/* 11 hex digits: the rule. */
	forms[2][11] = '\0';
	EXPECT_ERR(exec_echo(forms[2], "x"), "InvalidParams");
	ck_assert_str_eq(json_string_value(json_object_get(last_data, "field")), "sandbox");
	/* dispose by another key's sandbox name: nothing (null), it stays... */
	r = rpc("sandbox.dispose", json_pack("{s:o, s:s}", "key", key_for("other", NULL), "sandbox", name));
	ck_assert_msg(r && json_is_null(r), "%s", last_reply);
	json_decref(r);
	EXPECT_OK(r = f_stat(name, NULL, "named.txt"));
	json_decref(r);
	/* ...by its key and a prefix: gone; then nothing is null again. */
	snprintf(forms[2], sizeof(forms[2]), "%.12s", id);
	r = rpc("sandbox.dispose", json_pack("{s:o, s:s}", "key", key_for("named", NULL), "sandbox", forms[2]));
	ck_assert_msg(r && json_is_null(r), "%s", last_reply);
	json_decref(r);
	EXPECT_ERR(f_stat(id, NULL, "x"), "SandboxNotFound");
	r = rpc("sandbox.dispose", json_pack("{s:o, s:s}", "key", key_for("named", NULL), "sandbox", name));
	ck_assert_msg(r && json_is_null(r), "%s", last_reply);
	json_decref(r);
}
END_TEST

/* As uid/gid 65534: returns 0, or the number of the first check that
 * failed. root's sandbox, by name, with '/', by 12 hex digits or its full
 * id, answers exactly as a sandbox nobody has: SandboxNotFound with only
 * what was given; a disposal of it is null. */
static int nobody_names(const char *sock, const char *name, const char *id, json_t *key)
{
	char slash[96], prefix[13];
	const char *forms[] = { name, slash, prefix, id };
	struct msb_conn *c = NULL;
	json_t *r = NULL;

	snprintf(slash, sizeof(slash), "/%s", name);
	snprintf(prefix, sizeof(prefix), "%.12s", id);
	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		return 1;
	if (msb_connect(sock, &c) != MSB_OK)
		return 2;
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		const json_t *data;

		if (msb_call(c, "files.stat", json_pack("{s:s, s:s}", "sandbox", forms[i], "path", "x"), &r) !=
			    MSB_E_REMOTE || msb_last_error_code(c) != 1206)
			return 10 + (int)i;
		data = msb_last_error_data(c);
		if (json_object_size(data) != 2 || strcmp(json_string_value(json_object_get(data, "sandbox")), forms[i]))
			return 20 + (int)i;
		if (msb_call(c, "sandbox.exec", json_pack("{s:s, s:s, s:i}", "sandbox", forms[i], "command", "true",
							  "timeout_seconds", 5), &r) != MSB_E_REMOTE ||
		    msb_last_error_code(c) != 1206)
			return 30 + (int)i;
		if (msb_call(c, "sandbox.dispose", json_pack("{s:O, s:s}", "key", key, "sandbox", forms[i]), &r) !=
			    MSB_OK || !json_is_null(r))
			return 40 + (int)i;
	}
	msb_conn_free(c);
	return 0;
}

static void fx_nogroup_setup(void)
{
	daemon_up((const char *[]){ "--set", "socket.group=nogroup", NULL });
	ck_assert_int_eq(chmod(fx.d.dir, 0755), 0);   /* nobody must reach the socket's directory */
}

START_TEST(another_users_sandbox_is_not_found_by_name_or_prefix)
{
	char id[80], name[80];
	json_t *r = acquire(key_for("roots", NULL), files_spec(img_root)), *key = key_for("roots", NULL);
	int status;
	pid_t pid;

	EXPECT_OK(r);
	snprintf(id, sizeof(id), "%s", jstr(r, "sandbox"));
	snprintf(name, sizeof(name), "%s", jstr(r, "name"));
	json_decref(r);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(nobody_names(fx.d.sock, name, id, key));
	waitpid(pid, &status, 0);
	json_decref(key);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "as uid 65534, check %d failed",
		      WEXITSTATUS(status));
	/* root's is untouched, and still root's by name */
	EXPECT_OK(r = exec_echo(name, "still"));
	json_decref(r);
}
END_TEST

/* ---- spec conflicts (PROTOCOL.md "Spec conflicts") -------------------------- */

static const json_t *difference(const char *field)
{
	size_t i;
	json_t *d;

	json_array_foreach(json_object_get(last_data, "differences"), i, d)
		if (strcmp(json_string_value(json_object_get(d, "field")), field) == 0)
			return d;
	return NULL;
}

/* The daemon's log holds needle. */
static bool logged(const char *needle)
{
	size_t len;
	char *log;
	bool found;
	FILE *f = fopen(fx.d.log, "re");

	ck_assert_ptr_nonnull(f);
	log = malloc(1 << 20);
	ck_assert_ptr_nonnull(log);
	len = fread(log, 1, (1 << 20) - 1, f);
	log[len] = '\0';
	fclose(f);
	found = strstr(log, needle) != NULL;
	free(log);
	return found;
}

/* The same key with another image or other labels is refused, naming the
 * differences, warm (running) and cold (stopped); the same spec is served;
 * acquires of one new key at once with two images: one is served, the
 * other refused. */
START_TEST(a_spec_conflict_is_refused_and_the_same_spec_served)
{
	char id[80], name[80], needle[512];
	const json_t *d;
	json_t *r = acquire(key_for("conflict", NULL), files_spec(img_root)), *spec, *list;

	EXPECT_OK(r);
	snprintf(id, sizeof(id), "%s", jstr(r, "sandbox"));
	snprintf(name, sizeof(name), "%s", jstr(r, "name"));
	ck_assert_str_eq(jstr(r, "image"), img_root);
	ck_assert_msg(jstr(r, "image_id") && strncmp(jstr(r, "image_id"), "sha256:", 7) == 0, "%s", last_reply);
	json_decref(r);
	snprintf(needle, sizeof(needle), "sandbox created: container=%s kind=files image=%s owner=0 scope=%s thread=t",
		 name, img_root, fx.scope);
	ck_assert_msg(logged(needle), "not logged: %s", needle);
	/* another image, warm */
	EXPECT_ERR(acquire(key_for("conflict", NULL), files_spec(img_u1000)), "SandboxConflict");
	ck_assert_msg((d = difference("image")) != NULL, "%s", last_reply);
	ck_assert_str_eq(json_string_value(json_object_get(d, "requested")), img_u1000);
	ck_assert_str_eq(json_string_value(json_object_get(d, "existing")), img_root);
	ck_assert_uint_eq(json_array_size(json_object_get(last_data, "differences")), 1);
	ck_assert_msg(strstr(last_reply, "dispose") && strstr(last_reply, "another kind"), "%s", last_reply);
	/* other labels */
	spec = files_spec(img_root);
	json_object_set_new(json_object_get(spec, "labels"), "team", json_string("blue"));
	EXPECT_ERR(acquire(key_for("conflict", NULL), spec), "SandboxConflict");
	ck_assert_msg((d = difference("labels")) != NULL, "%s", last_reply);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(d, "requested"), "team")), "blue");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(d, "existing"), RUN_LABEL)), run_id);
	/* the same spec: served, the same container */
	r = acquire(key_for("conflict", NULL), files_spec(img_root));
	EXPECT_OK(r);
	ck_assert_str_eq(jstr(r, "sandbox"), id);
	ck_assert(!json_is_true(jget(r, "created")));
	json_decref(r);
	/* cold: stopped, the engine is asked; another image is still refused */
	free(sh_out("docker stop -t 0 %s >/dev/null 2>&1", id));
	EXPECT_ERR(acquire(key_for("conflict", NULL), files_spec(img_u1000)), "SandboxConflict");
	ck_assert_msg(difference("image") != NULL, "%s", last_reply);
	r = acquire(key_for("conflict", NULL), files_spec(img_root));
	EXPECT_OK(r);
	ck_assert_str_eq(jstr(r, "sandbox"), id);
	json_decref(r);
	/* the list shows the labels given, and the image */
	list = rpc("sandbox.list", json_pack("{s:s}", "scope", fx.scope));
	EXPECT_OK(list);
	ck_assert_uint_eq(json_array_size(list), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(list, 0), "labels"), RUN_LABEL)),
			 run_id);
	ck_assert_uint_eq(json_object_size(json_object_get(json_array_get(list, 0), "labels")), 1);
	ck_assert_str_eq(jstr(json_array_get(list, 0), "image"), img_root);
	json_decref(list);
	/* its disposal is logged with why */
	r = rpc("sandbox.dispose", json_pack("{s:o}", "key", key_for("conflict", NULL)));
	ck_assert_msg(r && json_is_null(r), "%s", last_reply);
	json_decref(r);
	snprintf(needle, sizeof(needle), "sandbox %s disposed: sandbox.dispose of its key by uid 0", name);
	ck_assert_msg(logged(needle), "not logged: %s", needle);
}
END_TEST

/* Two acquires of one new key at once, with two images (one connection,
 * pipelined): whichever comes second, joining or warm, is refused. */
START_TEST(joiners_with_another_image_are_refused)
{
	int fd = raw_connect(fx.d.sock), served = 0, refused = 0;

	ck_assert_int_ge(fd, 0);
	raw_request_send(fd, 1, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for("joined", NULL),
							     "spec", files_spec(img_root)));
	raw_request_send(fd, 2, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for("joined", NULL),
							     "spec", files_spec(img_u1000)));
	for (int i = 0; i < 2; i++) {
		json_t *rep = raw_recv(fd, CALL_TIMEOUT_MS);

		ck_assert_ptr_nonnull(rep);
		if (json_object_get(rep, "result")) {
			served++;
			track(jstr(rep, "result.sandbox"));
		} else {
			ck_assert_int_eq(jint(rep, "error.code"), 1106);
			refused++;
		}
		json_decref(rep);
	}
	close(fd);
	ck_assert_int_eq(served, 1);
	ck_assert_int_eq(refused, 1);
}
END_TEST

/* Labels at the spec's limits (64, values of 4096 bytes) make no label
 * longer than the engine's events may carry (DOCKER_MAX_STREAM_LINE): the
 * raw labels are recorded only up to ACQUIRE_LABELS_JSON_MAX bytes, and the
 * registry stays current for everyone (a file call by name, the list); the
 * list then shows the maf-sandbox.label.* values (long ones digested). */
START_TEST(labels_at_the_limits_keep_the_registry_current)
{
	char name[80], k[16], *v = malloc(4097);
	json_t *spec = files_spec(img_root), *r, *list;

	ck_assert_ptr_nonnull(v);
	memset(v, 'v', 4096);
	v[4096] = '\0';
	for (int i = 0; i < 63; i++) {
		snprintf(k, sizeof(k), "l%02d", i);
		json_object_set_new(json_object_get(spec, "labels"), k, json_string(v));
	}
	free(v);
	r = acquire(key_for("long_labels", NULL), spec);
	EXPECT_OK(r);
	snprintf(name, sizeof(name), "%s", jstr(r, "name"));
	json_decref(r);
	r = f_write(name, NULL, "long.txt", "x");
	EXPECT_OK(r);
	json_decref(r);
	list = rpc("sandbox.list", json_pack("{s:s}", "scope", fx.scope));
	EXPECT_OK(list);
	ck_assert_uint_eq(json_array_size(list), 1);
	r = json_object_get(json_array_get(list, 0), "labels");
	ck_assert_uint_eq(json_object_size(r), 64);
	ck_assert_str_eq(json_string_value(json_object_get(r, RUN_LABEL)), run_id);
	ck_assert_msg(strncmp(json_string_value(json_object_get(r, "l00")), "sha256-", 7) == 0, "%s", last_reply);
	json_decref(list);
}
END_TEST

/* ---- errors name the path, the working directory and the fix ---------------- */

/* The last error's message holds each of the NULL-terminated strings. */
static void expect_message_holds(const char *first, ...)
{
	va_list ap;

	va_start(ap, first);
	for (const char *want = first; want; want = va_arg(ap, const char *))
		ck_assert_msg(strstr(last_message, want), "%s\n  message lacks \"%s\": %s", last_call, want, last_reply);
	va_end(ap);
}

static void expect_message_lacks(const char *unwanted)
{
	ck_assert_msg(!strstr(last_message, unwanted), "%s\n  message holds \"%s\": %s", last_call, unwanted,
		      last_reply);
}

/* data.working_directory names the resolved base. */
static void expect_wd(const char *want)
{
	const char *wd = json_string_value(json_object_get(last_data, "working_directory"));

	ck_assert_msg(wd && strcmp(wd, want) == 0, "%s\n  want data.working_directory \"%s\", answered %s", last_call,
		      want, last_reply);
}

START_TEST(a_missing_file_names_its_path_and_working_directory)
{
	EXPECT_ERR_PATH(f_read(fx.id, NULL, "nothere.txt"), "FileNotFoundError", "nothere.txt");
	expect_message_holds("no such file or directory: nothere.txt (resolved in " W ")", NULL);
	expect_wd(W);
	/* A relative working directory: resolved against the storage base. */
	EXPECT_ERR_PATH(f_read(fx.id, "real", "gone/nothere.txt"), "FileNotFoundError", "gone/nothere.txt");
	expect_message_holds("gone/nothere.txt (resolved in " W "/real)", NULL);
	expect_wd(W "/real");
	/* A multi-path read names the one that is missing. */
	EXPECT_ERR(rpc("files.read", json_pack("{s:s, s:[ss]}", "sandbox", fx.id, "paths", "real/inside.txt",
					       "missing.txt")), "FileNotFoundError");
	expect_message_holds("missing.txt (resolved in " W ")", NULL);
	expect_message_lacks("inside.txt");
	/* A file in the way of a parent. */
	EXPECT_ERR(f_write(fx.id, NULL, "plain.txt/deeper.txt", "x"), "NotADirectoryError");
	expect_message_holds("plain.txt/deeper.txt (resolved in " W ")", NULL);
	expect_wd(W);
	EXPECT_ERR(f_remove(fx.id, NULL, "plain.txt/x", false), "NotADirectoryError");
	expect_message_holds("plain.txt/x (resolved in " W ")", NULL);
	/* Not a regular file. */
	EXPECT_ERR(f_read(fx.id, NULL, "real"), "OSError");
	expect_message_holds(": real (resolved in " W ")", NULL);
	expect_wd(W);
	/* A directory without recursive. */
	GUEST_OK(fx.id, "mkdir -p %s/keepdir && printf k > %s/keepdir/k.txt", W, W);
	EXPECT_ERR(f_remove(fx.id, NULL, "keepdir", false), "OSError");
	expect_message_holds("keepdir (resolved in " W ")", NULL);
	expect_wd(W);
}
END_TEST

START_TEST(an_escape_says_how_to_widen_the_working_directory)
{
	json_t *r;

	EXPECT_ERR_PATH(f_read(fx.id, NULL, "/etc/passwd"), "ConfinementError", "/etc/passwd");
	expect_message_holds("/etc/passwd (resolved in " W ")", "working_directory \"/\"", "-w /", NULL);
	expect_wd(W);
	/* The hint is true: with working_directory "/" the same path is read. */
	r = f_read(fx.id, "/", "/etc/passwd");
	EXPECT_OK(r);
	json_decref(r);
	/* A relative escape names where it leads, as an absolute path. */
	EXPECT_ERR_PATH(f_stat(fx.id, NULL, "../../etc/passwd"), "ConfinementError", "../../etc/passwd");
	expect_message_holds("../../etc/passwd (resolved in " W ")", "it names /etc/passwd", "-w /",
			     "the path /etc/passwd", NULL);
	EXPECT_ERR(f_write(fx.id, NULL, "../work-outside/planted.txt", "x"), "ConfinementError");
	expect_message_holds("it names " OUT "/planted.txt", "-w /", NULL);
	EXPECT_ERR(f_remove(fx.id, NULL, OUT "/secret.txt", false), "ConfinementError");
	expect_message_holds(OUT "/secret.txt (resolved in " W ")", "-w /", NULL);
	expect_wd(W);
	/* A reclaim takes an absolute directory as is: that is its fix. */
	EXPECT_ERR(f_reclaim(fx.id, NULL, "../work-outside/sub"), "ConfinementError");
	expect_message_holds("give that absolute path", OUT "/sub", NULL);
	/* A link is never followed: no working directory helps, none is offered. */
	EXPECT_ERR(f_read(fx.id, NULL, "link-dir/secret.txt"), "ConfinementError");
	expect_message_holds("link-dir/secret.txt (resolved in " W ")", "never followed", NULL);
	expect_message_lacks("-w /");
	expect_wd(W);
	EXPECT_ERR(f_write(fx.id, NULL, "link-file", "x"), "ConfinementError");
	expect_message_holds("link-file (resolved in " W ")", "never followed", NULL);
	expect_message_lacks("-w /");
	/* The working directory itself. */
	EXPECT_ERR(f_write(fx.id, NULL, ".", "x"), "ConfinementError");
	expect_message_holds(". (resolved in " W ")", "name a path inside it", NULL);
	expect_message_lacks("-w /");
	/* A backslash is no escape to widen. */
	EXPECT_ERR(f_write(fx.id, NULL, "sub\\x", "x"), "ConfinementError");
	expect_message_holds("sub\\x (resolved in " W ")", NULL);
	expect_message_lacks("-w /");
}
END_TEST

START_TEST(a_write_over_a_directory_says_to_remove_it_first)
{
	GUEST_OK(fx.id, "mkdir -p %s/adir/inner", W);
	EXPECT_ERR_PATH(f_write(fx.id, NULL, "adir", "x"), "OSError", "adir");
	expect_message_holds("adir (resolved in " W ")", "a directory cannot be replaced by a file",
			     "remove it first", "write to a path inside it", NULL);
	expect_wd(W);
	GUEST_OK(fx.id, "test -d %s/adir/inner", W);
}
END_TEST

/* memory.replies_over_bound of daemon.status. */
static json_int_t replies_over_bound(void)
{
	json_t *st = rpc("daemon.status", NULL);
	json_int_t n;

	EXPECT_OK(st);
	n = json_integer_value(json_object_get(json_object_get(st, "memory"), "replies_over_bound"));
	json_decref(st);
	return n;
}

/* Client text echoed in a message is cut (MSB_ECHO_MAX_BYTES, as a method
 * or param name is): a path of 4000 control characters (6 bytes each on
 * the wire) named four times over passed the error's reply bound. data.path
 * keeps the path whole. */
START_TEST(an_echoed_path_is_cut_in_the_message)
{
	char path[4096], wd[4096];
	size_t n = 0;
	json_int_t before = replies_over_bound();

	n += (size_t)snprintf(path, sizeof(path), "../");
	while (n + 252 < 4000) {
		memset(path + n, '\x01', 250);
		path[n + 250] = '/';
		n += 251;
	}
	path[--n] = '\0';     /* no trailing slash: data.path is the path as given */
	EXPECT_ERR_PATH(f_stat(fx.id, NULL, path), "ConfinementError", path);
	ck_assert_msg(last_message_len < 1024, "a message of %zu bytes: %.200s", last_message_len, last_message);
	expect_message_holds("...", "-w /", NULL);
	/* Found missing (after the walk): the same cut. */
	EXPECT_ERR_PATH(f_read(fx.id, NULL, path + 3), "FileNotFoundError", path + 3);
	ck_assert_msg(last_message_len < 1024, "a message of %zu bytes: %.200s", last_message_len, last_message);
	/* A refused working directory of 4000 bytes, echoed cut. */
	memcpy(wd, path, n + 1);
	for (size_t i = 3; i < n; i++)
		wd[i] = wd[i] == '/' ? '/' : '\x02';
	EXPECT_ERR(f_stat(fx.id, wd, "x"), "ConfinementError");
	ck_assert_msg(last_message_len < 1024, "a message of %zu bytes: %.200s", last_message_len, last_message);
	/* A path refused for its length (12000 bytes): data.path cut too. */
	{
		char *longp = malloc(12001);

		ck_assert_ptr_nonnull(longp);
		memset(longp, '\x01', 12000);
		for (size_t i = 200; i < 12000; i += 201)
			longp[i] = '/';
		longp[12000] = '\0';
		EXPECT_ERR(f_stat(fx.id, NULL, longp), "InvalidParams");
		ck_assert_msg(last_message_len < 1024, "a message of %zu bytes", last_message_len);
		ck_assert_uint_lt(strlen(json_string_value(json_object_get(last_data, "path"))), 1024);
		free(longp);
	}
	ck_assert_int_eq(replies_over_bound(), before);
}
END_TEST

/* sandbox.list's reply bound is its listing (the registry as it stands):
 * eight sandboxes whose labels take ~8 KiB each list in ~68 KiB, past the
 * 64 KiB of other methods, and no reply passes its bound. */
START_TEST(a_long_listing_keeps_within_its_bound)
{
	json_int_t before = replies_over_bound();
	char *v = malloc(4001), k[16];
	json_t *list;

	ck_assert_ptr_nonnull(v);
	memset(v, 'v', 4000);
	v[4000] = '\0';
	for (int i = 0; i < 8; i++) {
		json_t *spec = files_spec(img_root), *r;

		json_object_set_new(json_object_get(spec, "labels"), "a", json_string(v));
		json_object_set_new(json_object_get(spec, "labels"), "b", json_string(v));
		snprintf(k, sizeof(k), "list%d", i);
		r = acquire(key_for(k, NULL), spec);
		EXPECT_OK(r);
		json_decref(r);
	}
	free(v);
	list = rpc("sandbox.list", json_pack("{s:s}", "scope", fx.scope));
	EXPECT_OK(list);
	ck_assert_uint_eq(json_array_size(list), 8);
	{
		char *dumped = json_dumps(list, JSON_COMPACT);

		ck_assert_uint_gt(strlen(dumped), 64 * 1024);
		free(dumped);
	}
	json_decref(list);
	ck_assert_int_eq(replies_over_bound(), before);
}
END_TEST

/* ---- write modes ---------------------------------------------------------- */

static json_t *f_write_mode(const char *sb, const char *path, const char *text, json_int_t mode)
{
	json_t *p = fparams(sb, NULL, path);

	json_object_set_new(p, "content_text", json_string(text));
	json_object_set_new(p, "mode", json_integer(mode));
	return rpc("files.write", p);
}

START_TEST(a_written_file_can_be_executable)
{
	json_t *r;
	char *out;

	r = f_write_mode(fx.id, "run.sh", "#!/bin/sh\necho ran\n", 0755);
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(fx.id, W "/run.sh", "0:0 755");
	out = guest_out(fx.id, NULL, "cd %s && ./run.sh", W);
	ck_assert_str_eq(out, "ran\n");
	free(out);
	/* A second write replaces the mode with its own (the default). */
	r = f_write(fx.id, NULL, "run.sh", "#!/bin/sh\necho again\n");
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(fx.id, W "/run.sh", "0:0 644");
	/* Modes below the default, and per file in a multi-file write. */
	r = rpc("files.write", json_pack("{s:s, s:[{s:s, s:s, s:i}, {s:s, s:s}, {s:s, s:s, s:i}]}", "sandbox",
					 fx.id, "files", "path", "bin/tool", "content_text", "#!/bin/sh\necho tool\n",
					 "mode", 0700, "path", "bin/plain.txt", "content_text", "p", "path",
					 "bin/secret", "content_text", "s", "mode", 0600));
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(fx.id, W "/bin/tool", "0:0 700");
	ASSERT_OWNER_MODE(fx.id, W "/bin/plain.txt", "0:0 644");
	ASSERT_OWNER_MODE(fx.id, W "/bin/secret", "0:0 600");
	out = guest_out(fx.id, NULL, "cd %s && ./bin/tool", W);
	ck_assert_str_eq(out, "tool\n");
	free(out);
}
END_TEST

START_TEST(setuid_setgid_and_sticky_are_refused)
{
	static const json_int_t refused[] = { 04755, 02755, 01777, 07777, 01000, -1, 010000 };

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		EXPECT_ERR(f_write_mode(fx.id, "suid", "x", refused[i]), "InvalidParams");
		ck_assert_str_eq(json_string_value(json_object_get(last_data, "field")), "mode");
	}
	GUEST_FALSE(fx.id, "test -e %s/suid", W);
	EXPECT_ERR(rpc("files.write", json_pack("{s:s, s:s, s:s, s:s}", "sandbox", fx.id, "path", "suid",
						"content_text", "x", "mode", "0755")), "InvalidParams");
	EXPECT_ERR(rpc("files.write", json_pack("{s:s, s:[{s:s, s:s, s:i}]}", "sandbox", fx.id, "files", "path",
						"suid", "content_text", "x", "mode", 04755)), "InvalidParams");
	/* With files, a mode goes in each entry. */
	EXPECT_ERR(rpc("files.write", json_pack("{s:s, s:[{s:s, s:s}], s:i}", "sandbox", fx.id, "files", "path",
						"suid", "content_text", "x", "mode", 0755)), "InvalidParams");
	GUEST_FALSE(fx.id, "test -e %s/suid", W);
}
END_TEST

/* As a non-root guest: the mode is the guest's file's, on both planes. */
START_TEST(a_non_root_guests_file_gets_its_mode)
{
	char id[80];
	json_t *r;

	acquire_ok(key_for("u1000", NULL), files_spec(img_u1000), id, sizeof(id));
	r = f_write_mode(id, "run.sh", "#!/bin/sh\necho ran\n", 0750);
	EXPECT_OK(r);
	json_decref(r);
	ASSERT_OWNER_MODE(id, W "/run.sh", "1000:1000 750");
	ck_assert_int_eq(guest_user(id, "cd %s && ./run.sh >/dev/null", W), 0);
}
END_TEST

/* ---- the suite -------------------------------------------------------------------- */

#define ADD(tc, fn) tcase_add_test(tc, fn)
#define NROWS(a) (int)(sizeof(a) / sizeof((a)[0]))

static TCase *layout_tcase(const char *name, int timeout)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, fx_layout_setup, fx_teardown);
	tcase_set_timeout(tc, timeout);
	return tc;
}

static TCase *daemon_tcase(const char *name, int timeout)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, fx_daemon_setup, fx_teardown);
	tcase_set_timeout(tc, timeout);
	return tc;
}

static Suite *files_suite(void)
{
	Suite *s = suite_create("files");
	TCase *out = layout_tcase("reading_out", 60), *paths = layout_tcase("paths", 60);
	TCase *in = layout_tcase("writing_in", 60), *caps = layout_tcase("ceilings", 90);
	TCase *del = layout_tcase("removing", 60), *rec = layout_tcase("reclaiming", 60);
	TCase *frz = layout_tcase("freeze", 90), *race = layout_tcase("race", 240);
	TCase *call = daemon_tcase("call_scope", 60), *wd = daemon_tcase("work_dir", 60);
	TCase *who = daemon_tcase("identity", 60), *low = tcase_create("configured_ceilings");

	ADD(out, a_legitimate_read_still_works);
	ADD(out, a_link_is_named_a_link);
	ADD(out, a_link_is_never_read);
	ADD(out, stat_and_read_through_a_linked_parent_are_refused);
	ADD(out, a_linked_working_directory_is_refused_for_reading);
	ADD(out, a_linked_ancestor_of_the_working_directory_is_refused_for_reading);
	ADD(out, a_plain_parent_is_not_an_escape);
	ADD(out, stat_describes_each_kind_without_following);
	ADD(out, read_serves_only_regular_files);
	ADD(out, read_many_in_one_call_keeps_the_order);
	ADD(paths, escapes_and_backslashes_are_confinement_errors);
	ADD(paths, a_nul_in_a_path_is_refused_by_the_parser);
	ADD(paths, paths_over_the_limits_are_invalid_params);
	ADD(paths, an_unknown_or_gone_sandbox_is_not_found);
	ADD(in, a_write_lands_and_reads_back);
	ADD(in, bytes_survive_the_round_trip);
	ADD(in, all_256_byte_values_nul_and_invalid_utf8_survive);
	ADD(in, str_content_is_utf8);
	ADD(in, a_second_write_replaces);
	ADD(in, parents_are_created);
	ADD(in, deep_parents_are_created);
	ADD(in, a_path_outside_is_refused);
	ADD(in, a_path_through_a_linked_parent_is_refused);
	ADD(in, a_linked_destination_is_refused_not_followed);
	ADD(in, the_working_directory_is_refused);
	ADD(in, a_backslash_is_refused);
	ADD(in, a_linked_working_directory_is_refused_for_writing);
	ADD(in, a_linked_ancestor_of_the_working_directory_is_refused_for_writing);
	ADD(in, what_is_in_the_way_is_classified);
	ADD(in, a_malformed_write_is_invalid_params);
	ADD(caps, an_empty_file_is_a_file);
	ADD(caps, max_bytes_refuses_never_truncates);
	ADD(caps, the_file_count_ceiling_is_whole_call);
	ADD(del, a_removal_removes);
	ADD(del, a_missing_path_is_success);
	ADD(del, a_link_is_removed_never_followed);
	ADD(del, a_removal_through_a_linked_parent_is_refused);
	ADD(del, a_directory_needs_recursive);
	ADD(del, recursive_removes_the_tree);
	ADD(del, a_link_inside_a_recursive_removal_is_unlinked_not_followed);
	ADD(del, removing_the_working_directory_is_refused);
	ADD(del, removing_a_path_outside_is_refused);
	ADD(del, a_file_in_the_way_of_a_removal_is_not_a_directory);
	ADD(rec, a_created_directory_is_gone);
	ADD(rec, nested_content_goes_with_it);
	ADD(rec, a_link_inside_a_reclaim_is_unlinked_not_followed);
	ADD(rec, a_missing_directory_is_success);
	ADD(rec, an_absent_working_directory_still_succeeds);
	ADD(rec, reclaim_refuses_the_root_the_working_directory_and_escapes);
	ADD(frz, a_client_leaving_mid_write_leaves_the_guest_running);
	ADD(frz, a_client_leaving_mid_read_leaves_the_guest_running);
	ADD(frz, a_container_paused_by_someone_else_is_refused_and_left_so);
	ADD(frz, quick_calls_back_to_back_never_leave_the_guest_paused);
	ADD(frz, a_daemon_stopping_mid_copy_thaws_the_guest_first);
	ADD(frz, a_daemon_killed_mid_write_is_thawed_by_the_next_start);
	ADD(race, a_guest_swapping_a_directory_for_a_link_never_gets_through);
	ADD(call, the_other_calls_file_is_not_here);
	ADD(call, the_same_name_holds_this_calls_bytes);
	ADD(wd, acquire_prepares_the_work_dir_cold_and_warm);
	tcase_add_loop_test(wd, an_obstructed_work_dir_refuses_acquire, 0, NROWS(obstruction_rows));
	ADD(wd, an_existing_work_dir_keeps_its_contents_mode_and_owner);
	ADD(wd, an_explicit_work_dir_is_the_storage_base);
	tcase_add_loop_test(who, what_a_write_lands_belongs_to_the_guest, 0, NROWS(identity_rows));
	ADD(who, a_removal_takes_nothing_beyond_the_guest);
	ADD(who, an_unresolvable_user_refuses_files_out);
	tcase_add_checked_fixture(low, fx_low_ceilings_setup, fx_teardown);
	tcase_set_timeout(low, 60);
	ADD(low, configured_ceilings_refuse_whole_calls);
	{
		TCase *ni = layout_tcase("new init", 120);

		ADD(ni, a_new_init_between_calls_never_redirects_a_call);
		suite_add_tcase(s, ni);
	}
	{
		TCase *ls = layout_tcase("listing", 120);

		ADD(ls, listing_a_linked_directory);
		ADD(ls, listing_through_a_linked_parent);
		ADD(ls, listing_under_a_linked_ancestor);
		ADD(ls, a_listing_names_its_links);
		ADD(ls, listing_what_is_not_a_directory);
		suite_add_tcase(s, ls);
	}
	{
		TCase *nm = daemon_tcase("naming", 120), *other = tcase_create("naming_other_user");
		TCase *sc = daemon_tcase("spec_conflicts", 120);

		ADD(nm, a_sandbox_is_named_by_id_prefix_or_name);
		suite_add_tcase(s, nm);
		tcase_add_checked_fixture(other, fx_nogroup_setup, fx_teardown);
		tcase_set_timeout(other, 60);
		ADD(other, another_users_sandbox_is_not_found_by_name_or_prefix);
		suite_add_tcase(s, other);
		ADD(sc, a_spec_conflict_is_refused_and_the_same_spec_served);
		ADD(sc, labels_at_the_limits_keep_the_registry_current);
		ADD(sc, a_long_listing_keeps_within_its_bound);
		ADD(sc, joiners_with_another_image_are_refused);
		suite_add_tcase(s, sc);
	}
	{
		TCase *msg = layout_tcase("messages", 120);

		ADD(msg, a_missing_file_names_its_path_and_working_directory);
		ADD(msg, an_escape_says_how_to_widen_the_working_directory);
		ADD(msg, a_write_over_a_directory_says_to_remove_it_first);
		ADD(msg, an_echoed_path_is_cut_in_the_message);
		ADD(msg, a_written_file_can_be_executable);
		ADD(msg, setuid_setgid_and_sticky_are_refused);
		ADD(msg, a_non_root_guests_file_gets_its_mode);
		suite_add_tcase(s, msg);
	}
	{
		TCase *lc = daemon_tcase("listing calls", 120);

		ADD(lc, the_listing_holds_only_this_calls_files);
		ADD(lc, the_plane_is_declared_and_reported);
		suite_add_tcase(s, lc);
	}
	suite_add_tcase(s, out);
	suite_add_tcase(s, paths);
	suite_add_tcase(s, in);
	suite_add_tcase(s, caps);
	suite_add_tcase(s, del);
	suite_add_tcase(s, rec);
	suite_add_tcase(s, call);
	suite_add_tcase(s, wd);
	suite_add_tcase(s, who);
	suite_add_tcase(s, low);
	suite_add_tcase(s, frz);
	suite_add_tcase(s, race);
	return s;
}

/* ---- images and main ---------------------------------------------------------- */

/* The busybox root of testimage.sh, with USER and a shell step of its own
 * ($d is the root) before the import. */
static bool build_image(const char *ref, const char *user, const char *extra)
{
	char *out = sh_out("set -e; d=$(mktemp -d); trap 'rm -rf \"$d\"' EXIT; "
			   "mkdir -p \"$d/bin\" \"$d/tmp\" \"$d/etc\"; cp /bin/busybox \"$d/bin/busybox\"; "
			   "for a in $(/bin/busybox --list); do [ \"$a\" = busybox ] || ln -s busybox \"$d/bin/$a\"; done; "
			   "echo 'root:x:0:0:root:/root:/bin/sh' > \"$d/etc/passwd\"; echo 'root:x:0:' > \"$d/etc/group\"; "
			   "%s; tar -C \"$d\" -c . | docker import -c 'ENV PATH=/bin' -c 'USER %s' - '%s' >/dev/null; "
			   "echo ok", extra, user, ref);
	bool ok = strcmp(out, "ok") == 0;

	if (!ok)
		fprintf(stderr, "cannot build %s: %s\n", ref, out);
	free(out);
	return ok;
}

static bool build_images(void)
{
	return harness_test_image(img_root) && build_image(img_u1000, "1000:1000", "true") &&
	       build_image(img_app, "app", "echo 'app:x:1001:1002::/:/bin/sh' >> \"$d/etc/passwd\"; "
			   "echo 'app:x:1002:' >> \"$d/etc/group\"") &&
	       /* ghost: its line after 2000 others (over 64 KiB), and no `id`. */
	       build_image(img_ghost, "ghost", "i=0; while [ $i -lt 2000 ]; do "
			   "echo \"padding-user-$i:x:$((20000 + i)):$((20000 + i))::/nonexistent:/bin/false\"; "
			   "i=$((i + 1)); done >> \"$d/etc/passwd\"; "
			   "echo 'ghost:x:1003:1003::/:/bin/sh' >> \"$d/etc/passwd\"; rm \"$d/bin/id\"");
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed = 1;

	snprintf(run_id, sizeof(run_id), "itf%d", (int)getpid());
	snprintf(img_root, sizeof(img_root), "msb-it-files-root:%s", run_id);
	snprintf(img_u1000, sizeof(img_u1000), "msb-it-files-u1000:%s", run_id);
	snprintf(img_app, sizeof(img_app), "msb-it-files-app:%s", run_id);
	snprintf(img_ghost, sizeof(img_ghost), "msb-it-files-ghost:%s", run_id);
	if (build_images()) {
		harness_run_dir_create();
		sr = srunner_create(files_suite());
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
		harness_run_dir_remove();
	}
	/* Whatever failed: nothing of this run stays. */
	out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s | xargs -r docker rm -f >/dev/null 2>&1; "
		     "docker rmi -f %s %s %s %s >/dev/null 2>&1; echo done", RUN_LABEL, run_id, img_root, img_u1000,
		     img_app, img_ghost);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
