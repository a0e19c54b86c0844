/* check_fileop.c — the frozen section of the archive file plane (fileop.h,
 * behaviour-docker §2.3–2.6) against the fake engine. Each test pins the
 * exact sequence of requests the engine saw (pause, the HEADs of the walk
 * outermost first, the leaf, the confirming inspect, the PUT or GETs, the
 * unpause) and the wire error (code and data.type). The PUT's tar is read
 * back with libarchive, independently of the writer that made it. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <event2/event.h>

#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "docker.h"
#include "engine.h"
#include "errors.h"
#include "fake_engine.h"
#include "fileop.h"
#include "plane_local.h"
#include "freeze.h"
#include "log.h"
#include "loop.h"
#include "paths.h"
#include "tarball.h"
#include "xmalloc.h"

#define RUN_MAX_MS   3000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define SETTLE_MS    40
#define SLOW_MS      2000         /* a reply held back this long never comes in time */
#define NEVER_MS     60000        /* a reply held back for good: the fake ends the wait when
				   * the client closes the request (counted as abandoned) */
#define SHORT_MS     300          /* files_timeout_ms of the deadline tests */
#define THAW_SLOW_MS 150          /* an unpause held back this long */
#define API          "/v1.45"
#define ID           "0f1e2d3c4b5a69780f1e2d3c4b5a69780f1e2d3c4b5a69780f1e2d3c4b5a6978"
#define CPATH        API "/containers/" ID
#define WD           "/maf-sandbox/work"
#define GUEST_UID    1000
#define GUEST_GID    1001
#define SCRIPT_MAX   48
#define OWNED_MAX    (2 * SCRIPT_MAX)
#define TRACE_MAX    8192
#define TEXT_MAX     512
#define ITEMS_MAX    8
#define MTIME        "2024-05-01T10:34:56Z"

#define GO_DIR      (PATHS_GO_MODE_DIR | 0755u)
#define GO_SYMLINK  (PATHS_GO_MODE_SYMLINK | 0777u)
#define GO_FILE     0644u

#define VERSION_BODY \
	"{\"Version\":\"26.1.0\",\"ApiVersion\":\"1.45\",\"Os\":\"linux\",\"Arch\":\"amd64\"," \
	"\"KernelVersion\":\"6.1.0\"}"
#define INSPECT_BODY "{\"Id\":\"" ID "\",\"State\":{\"Running\":true,\"Paused\":true}}"

static struct event_base *base;
static struct engine *engine;
static struct domain daemon_ctx;
static int reachable_count;

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

/* ---- the script: built per test, kept until teardown ------------------------------- */

static struct fake_reply script[SCRIPT_MAX];
static size_t n_script;
static void *owned[OWNED_MAX];
static size_t n_owned;

/* Keeps p (malloc'd) alive until teardown; returns it. */
static void *keep(void *p)
{
	ck_assert_uint_lt(n_owned, OWNED_MAX);
	owned[n_owned++] = p;
	return p;
}

static struct fake_reply *sc_add(struct fake_reply r)
{
	ck_assert_uint_lt(n_script, SCRIPT_MAX);
	script[n_script] = r;
	return &script[n_script++];
}

/* The request path of an archive call on guest path p. */
static const char *archive_path(const char *p)
{
	_cleanup_free_ char *e = docker_escape(p);

	return keep(xasprintf(CPATH "/archive?path=%s", e));
}

/* Standard padded base64, written independently of the decoder in paths.c. */
static char *b64(const char *in)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(in), o = 0;
	char *out = xmalloc((n + 2) / 3 * 4 + 1);
	const unsigned char *s = (const unsigned char *)in;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		out[o++] = abc[v >> 18];
		out[o++] = abc[(v >> 12) & 63];
		out[o++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? abc[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

static const char *basename_of(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

/* HEAD p → 200 with a stat header of this mode and size. */
static void sc_stat(const char *p, uint32_t mode, uint64_t size, const char *link)
{
	_cleanup_free_ char *json = xasprintf("{\"name\":\"%s\",\"size\":%llu,\"mode\":%u,\"mtime\":\"" MTIME
					      "\",\"linkTarget\":\"%s\"}", basename_of(p),
					      (unsigned long long)size, (unsigned)mode, link);
	_cleanup_free_ char *v = b64(json);

	sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path(p), .repeat = true,
				    .headers = keep(xasprintf(DOCKER_ARCHIVE_STAT_HEADER ": %s\r\n", v)) });
}

static void sc_dir(const char *p)
{
	sc_stat(p, GO_DIR, 4096, "");
}

static void sc_file(const char *p, uint64_t size)
{
	sc_stat(p, GO_FILE, size, "");
}

static void sc_link(const char *p)
{
	sc_stat(p, GO_SYMLINK, 11, "/etc/passwd");
}

static void sc_absent(const char *p)
{
	sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path(p), .status = 404, .repeat = true });
}

static void sc_pause(int status, const char *body)
{
	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/pause", .status = status, .body = body,
				    .headers = body ? "Content-Type: application/json\r\n" : NULL });
}

static void sc_unpause(int delay_ms)
{
	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/unpause", .status = 204,
				    .delay_ms = delay_ms, .repeat = true });
}

static void sc_inspect(int status)
{
	sc_add((struct fake_reply){ .method = "GET", .path = CPATH "/json", .status = status,
				    .headers = "Content-Type: application/json\r\n",
				    .body = status == 200 ? INSPECT_BODY : "{\"message\":\"No such container: " ID "\"}",
				    .repeat = true });
}

/* The tar the engine sends for a GET of a file named name. */
static struct fake_reply *sc_get_tar(const char *p, const char *name, const void *data, size_t size)
{
	struct tarball_buf b = TARBALL_BUF_INIT(16 * 1024 * 1024);
	struct tarball_file f = { .name = name, .data = data, .size = size, .mode = 0644 };

	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), 0);
	keep(b.data);
	return sc_add((struct fake_reply){ .method = "GET", .path = archive_path(p), .body = (char *)b.data,
					   .body_len = b.len, .headers = "Content-Type: application/x-tar\r\n" });
}

/* A GET answered with the tar of a directory. */
static void sc_get_dir(const char *p, const char *name)
{
	struct tarball_buf b = TARBALL_BUF_INIT(1024 * 1024);
	struct tarball_dir dir = { .name = name, .mode = 0755 };

	ck_assert_int_eq(tarball_build_dirs(&dir, 1, tarball_buf_write_cb, &b), 0);
	keep(b.data);
	sc_add((struct fake_reply){ .method = "GET", .path = archive_path(p), .body = (char *)b.data,
				    .body_len = b.len });
}

static void sc_put(int status, const char *body)
{
	sc_add((struct fake_reply){ .method = "PUT", .path = CPATH "/archive?path=%2F", .status = status,
				    .body = body, .headers = body ? "Content-Type: application/json\r\n" : NULL });
}

/* Longest path first (stable), so a prefix match is the exact one. */
static void script_sort(void)
{
	for (size_t i = 1; i < n_script; i++) {
		struct fake_reply r = script[i];
		size_t len = r.path ? strlen(r.path) : 0, j = i;

		while (j > 0 && (script[j - 1].path ? strlen(script[j - 1].path) : 0) < len) {
			script[j] = script[j - 1];
			j--;
		}
		script[j] = r;
	}
}

/* Serves the script (with the probes) and waits for the engine. */
static void start(void)
{
	sc_add((struct fake_reply){ .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .body = "OK",
				    .repeat = true });
	sc_add((struct fake_reply){ .path = API "/version", .body = VERSION_BODY, .repeat = true });
	script_sort();
	loop_engine_start_reachable(base, engine, &reachable_count, script, n_script, RUN_MAX_MS);
}

/* ---- what the engine saw ------------------------------------------------------------ */

/* %XX decoded, malloc'd. */
static char *unescape(const char *s)
{
	char *out = xmalloc(strlen(s) + 1), *o = out;

	while (*s) {
		unsigned v;

		if (s[0] == '%' && s[1] && s[2] && sscanf(s + 1, "%2x", &v) == 1) {
			*o++ = (char)v;
			s += 3;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return out;
}

/* The container requests in order: "pause;HEAD /maf-sandbox;...;PUT /&noOverwriteDirNonDir=1;
 * inspect;unpause;" (archive paths decoded). Static buffer. */
static const char *trace(void)
{
	static char buf[TRACE_MAX];
	const char *prefix = CPATH "/";
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const struct fake_request *q = fake_engine_request(i);
		const char *rest;
		_cleanup_free_ char *dec = NULL;

		if (strncmp(q->path, prefix, strlen(prefix)) != 0)
			continue;
		rest = q->path + strlen(prefix);
		if (strncmp(rest, "archive?path=", 13) == 0) {
			dec = unescape(rest + 13);
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s %s;", q->method, dec);
		} else if (strcmp(rest, "json") == 0) {
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "inspect;");
		} else {
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s;", rest);
		}
		ck_assert_uint_lt(off, sizeof(buf));
	}
	return buf;
}

/* The first request with this method, or NULL. */
static const struct fake_request *request_with(const char *method)
{
	for (size_t i = 0; i < fake_engine_request_count(); i++)
		if (strcmp(fake_engine_request(i)->method, method) == 0)
			return fake_engine_request(i);
	return NULL;
}

/* Whether name is dir/<a write's temporary> with dir the directory of final. */
static bool is_temp_beside(const char *name, const char *final)
{
	const char *ns = strrchr(name, '/'), *fs = strrchr(final, '/');
	size_t nd = ns ? (size_t)(ns - name) : 0, fd = fs ? (size_t)(fs - final) : 0;

	return nd == fd && strncmp(name, final, nd) == 0 && plocal_name_is_temp(ns ? ns + 1 : name);
}

/* A tar read back with libarchive (tar only, no decompression filter: a
 * compressed body fails), one line per entry: "d NAME MODE UID:GID" or
 * "f NAME MODE UID:GID CONTENT", joined with ";". A write's file is sent as
 * its content under a temporary name in the final directory, then a hard
 * link entry putting it at the final name: that pair is checked (the link
 * right after the temporary, naming it, same mode and owner) and listed as
 * the one "f FINAL ..." line; a temporary left without its link, or any
 * other link, is listed as "? NAME". malloc'd. */
static char *tar_list(const void *buf, size_t len)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	char *out = xstrdup("");
	char *pending = NULL;      /* the last temporary's name, its line not yet added */
	char *pending_line = NULL; /* its line after the name: " MODE UID:GID CONTENT" */
	int r;

	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_open_memory(a, buf, len), ARCHIVE_OK);
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		_cleanup_free_ char *name = xstrdup(archive_entry_pathname(e));
		_cleanup_free_ char *content = NULL;
		size_t n = strlen(name);
		char *line, *joined;
		char type;

		if (n > 1 && name[n - 1] == '/')
			name[n - 1] = '\0';
		if (archive_entry_hardlink(e)) {
			const char *target = archive_entry_hardlink(e);

			if (pending && strcmp(target, pending) == 0 && is_temp_beside(pending, name)) {
				line = xasprintf("f %s%s", name, pending_line);
			} else {
				line = xasprintf("? %s", name);
			}
			free(pending);
			free(pending_line);
			pending = pending_line = NULL;
			joined = xasprintf("%s%s%s", out, *out ? ";" : "", line);
			free(line);
			free(out);
			out = joined;
			continue;
		}
		if (pending) {
			joined = xasprintf("%s%s? %s", out, *out ? ";" : "", pending);
			free(out);
			out = joined;
			free(pending);
			free(pending_line);
			pending = pending_line = NULL;
		}
		switch (archive_entry_filetype(e)) {
		case AE_IFDIR: type = 'd'; break;
		case AE_IFREG: type = 'f'; break;
		default: type = '?'; break;
		}
		if (type == 'f') {
			size_t size = (size_t)archive_entry_size(e);

			content = xmalloc(size + 1);
			ck_assert_int_eq(archive_read_data(a, content, size), (la_ssize_t)size);
			content[size] = '\0';
		}
		if (type == 'f' && strrchr(name, '/') && plocal_name_is_temp(strrchr(name, '/') + 1)) {
			/* The content under its temporary name: the link must follow. */
			pending = xstrdup(name);
			pending_line = xasprintf(" %04o %ld:%ld %s", (unsigned)archive_entry_perm(e),
						 (long)archive_entry_uid(e), (long)archive_entry_gid(e), content);
			continue;
		}
		line = xasprintf("%c %s %04o %ld:%ld%s%s", type, name, (unsigned)archive_entry_perm(e),
				 (long)archive_entry_uid(e), (long)archive_entry_gid(e), content ? " " : "",
				 content ? content : "");
		joined = xasprintf("%s%s%s", out, *out ? ";" : "", line);
		free(line);
		free(out);
		out = joined;
	}
	ck_assert_int_eq(r, ARCHIVE_EOF);
	if (pending) {
		char *joined = xasprintf("%s%s? %s", out, *out ? ";" : "", pending);

		free(out);
		out = joined;
		free(pending);
		free(pending_line);
	}
	ck_assert_int_eq(archive_filter_code(a, 0), ARCHIVE_FILTER_NONE);
	ck_assert_int_eq(archive_format(a) & ARCHIVE_FORMAT_BASE_MASK, ARCHIVE_FORMAT_TAR);
	archive_read_free(a);
	return out;
}

/* The PUT's body, listed; asserts it is an uncompressed tar sent as such. */
static char *put_listing(void)
{
	const struct fake_request *q = request_with("PUT");
	char ctype[128];

	ck_assert_ptr_nonnull(q);
	ck_assert_str_eq(q->path, CPATH "/archive?path=%2F&noOverwriteDirNonDir=1");
	ck_assert(fake_request_header(q, "Content-Type", ctype, sizeof(ctype)));
	ck_assert_str_eq(ctype, "application/x-tar");
	ck_assert(!fake_request_header(q, "Content-Encoding", ctype, sizeof(ctype)));
	ck_assert_uint_ge(q->body_len, 2 * TARBALL_BLOCK);
	ck_assert_uint_eq(q->body_len % TARBALL_BLOCK, 0);
	return tar_list(q->body, q->body_len);
}

/* ---- the operation's result ---------------------------------------------------------- */

struct item_rec {
	bool found;
	enum paths_kind kind;
	uint64_t size;
	char *out;                   /* NUL-terminated copy; NULL when never read */
	size_t out_len;
	int err;
	char err_type[64];
};

struct res {
	int calls;
	int code;                    /* 0: success */
	char type[64];               /* data.type on the wire */
	char message[TEXT_MAX];
	json_t *data;                /* the error's data object, as sent */
	char trace_at_cb[TRACE_MAX]; /* what the engine had seen when the callback fired */
	size_t claims_at_cb;         /* freeze claims alive then */
	bool local;                  /* fileop_served_locally */
	long ms;                     /* since the op started */
	size_t n_items;
	struct item_rec items[ITEMS_MAX];
};

static struct res res;
static long started_ms;
static int held_calls;           /* claims made directly by a test, told */

static void res_forget(void)
{
	json_decref(res.data);
	for (size_t i = 0; i < ITEMS_MAX; i++)
		free(res.items[i].out);
	memset(&res, 0, sizeof(res));
}

/* The wire form of e: its data.type into type, its data object (new ref). */
static json_t *wire_data(const struct msb_error *e, char *type, size_t typelen)
{
	json_t *o = msb_error_to_json(e);
	json_t *data = json_object_get(o, "data");

	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "code")), e->code);
	snprintf(type, typelen, "%s", json_string_value(json_object_get(data, "type")));
	json_incref(data);
	json_decref(o);
	return data;
}

static void op_cb(struct fileop *op, const struct msb_error *err, void *arg)
{
	(void)arg;
	res.calls++;
	res.ms = loop_now_ms() - started_ms;
	snprintf(res.trace_at_cb, sizeof(res.trace_at_cb), "%s", trace());
	res.claims_at_cb = freeze_table_count(daemon_ctx.freezes);
	res.local = fileop_served_locally(op);
	if (err) {
		ck_assert_int_ne(err->code, 0);
		res.code = err->code;
		snprintf(res.message, sizeof(res.message), "%s", err->message ? err->message : "");
		res.data = wire_data(err, res.type, sizeof(res.type));
	}
	res.n_items = fileop_count(op);
	ck_assert_uint_le(res.n_items, ITEMS_MAX);
	for (size_t i = 0; i < res.n_items; i++) {
		const struct fileop_item *it = fileop_item(op, i);
		struct item_rec *r = &res.items[i];

		r->found = it->found;
		r->kind = it->st.kind;
		r->size = it->st.size;
		if (it->out) {
			r->out = xmalloc(it->out_len + 1);
			memcpy(r->out, it->out, it->out_len);
			r->out[it->out_len] = '\0';
			r->out_len = it->out_len;
		}
		r->err = it->err.code;
		if (it->err.code) {
			json_t *d = wire_data(&it->err, r->err_type, sizeof(r->err_type));

			json_decref(d);
		}
	}
	ck_assert_ptr_null(fileop_item(op, res.n_items));
}

/* ---- building and running operations ------------------------------------------------ */

static struct fileop *op_new(enum fileop_kind kind)
{
	const struct msbd_config *c = daemon_ctx.config;
	const struct fileop_params p = {
		.kind = kind, .id = ID, .max_bytes = c->files_max_file_bytes,
		.max_total = c->files_max_total_bytes, .timeout_ms = c->files_timeout_ms,
	};

	return fileop_new(&daemon_ctx, &p);
}

static struct paths_plan *plan_in(enum paths_op pop, const char *path, const char *wd)
{
	struct paths_plan *plan = NULL;
	enum paths_reason why;

	ck_assert_int_eq(paths_plan_new(pop, path, SIZE_MAX, wd, SIZE_MAX, NULL, &plan, &why), 0);
	return plan;
}

/* Adds an item under the default working directory. */
static size_t op_add(struct fileop *op, enum paths_op pop, const char *path, const char *content)
{
	size_t len = content ? strlen(content) : 0;
	uint8_t *data = NULL;

	if (len) {
		data = xmalloc(len);
		memcpy(data, content, len);
	}

	return fileop_add(op, plan_in(pop, path, NULL), data, len);
}

static void op_run(struct fileop *op)
{
	started_ms = loop_now_ms();
	fileop_start(op, op_cb, NULL);
	ck_assert_int_eq(res.calls, 0);         /* never from inside fileop_start */
	loop_run_until(base, &res.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(res.calls, 1);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(res.calls, 1);         /* exactly once */
}

/* Runs the loop until the fake has seen a client abandon a request (at
 * most RUN_MAX_MS, stretched: a hang guard). */
static void loop_run_while_abandoned(void)
{
	/* hang guard */
	LOOP_RUN_WHILE(base, fake_engine_abandoned_count() < 1, RUN_MAX_MS);
}

/* The op failed with code (and its data.type), having seen trace want. */
static void assert_failed(int code, const char *want)
{
	ck_assert_msg(res.code == code, "code %d (%s: %s), want %d", res.code, res.type, res.message, code);
	ck_assert_str_eq(res.type, msb_error_name(code));
	ck_assert_str_eq(trace(), want);
}

static void assert_ok(const char *want)
{
	ck_assert_msg(res.code == 0, "failed %d (%s: %s)", res.code, res.type, res.message);
	ck_assert_str_eq(trace(), want);
}

/* The callback came after the unpause was answered: the engine had seen
 * the whole trace and no claim was left. */
static void assert_thawed_before_cb(void)
{
	ck_assert_str_eq(res.trace_at_cb, trace());
	ck_assert_uint_eq(res.claims_at_cb, 0);
	ck_assert(!freeze_is_held(daemon_ctx.freezes, ID));
}

/* ---- fixture ------------------------------------------------------------------------- */

static char journal_dir[64];

/* Removes a directory tree (the test's journal); returns NULL. */
static char *sh_rm_rf(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")))
				unlinkat(dirfd(d), de->d_name, 0);
		closedir(d);
	}
	rmdir(dir);
	return NULL;
}

/* The names in the journal, ";"-joined (static). */
static const char *journal_names(void)
{
	static char buf[1024];
	DIR *d = opendir(journal_dir);
	struct dirent *de;
	size_t off = 0;

	buf[0] = '\0';
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s", off ? ";" : "", de->d_name);
	closedir(d);
	return buf;
}

static void setup(void)
{
	reachable_count = 0;
	held_calls = 0;
	n_script = 0;
	n_owned = 0;
	res_forget();
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	engine = loop_engine_new(base, &test_opts, &reachable_count);
	daemon_ctx = (struct domain){ .base = base, .engine = engine };
	daemon_ctx.config = config_new_defaults();
	ck_assert_ptr_nonnull(daemon_ctx.config);
	daemon_ctx.config->files_timeout_ms = RUN_MAX_MS - 1000;
	daemon_ctx.config->engine_timeout_ms = 2000;
	daemon_ctx.freezes = freeze_table_new();
	ck_assert_ptr_nonnull(daemon_ctx.freezes);
	daemon_ctx.fileops = fileop_table_new();
	/* The journal of temporaries: a directory of this test's own. */
	snprintf(journal_dir, sizeof(journal_dir), "/tmp/check-fileop-journal-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(journal_dir));
	free(daemon_ctx.config->files_journal_dir);
	daemon_ctx.config->files_journal_dir = xstrdup(journal_dir);
	loop_log_capture_start();
	log_set_debug(true);   /* the debug lines are formatted too (UBSan sees them) */
}

static void teardown(void)
{
	engine = engine_free(engine);
	daemon_ctx.fileops = fileop_table_free(daemon_ctx.fileops);
	free(sh_rm_rf(journal_dir));
	daemon_ctx.freezes = freeze_table_free(daemon_ctx.freezes);
	daemon_ctx.config = config_free(daemon_ctx.config);
	event_base_free(base);
	fake_engine_cleanup();
	loop_log_capture_stop();
	res_forget();
	for (size_t i = 0; i < n_owned; i++)
		free(owned[i]);
	n_owned = 0;
}

/* The walk of the default working directory, found. */
static void sc_wd(void)
{
	sc_dir("/maf-sandbox");
	sc_dir(WD);
}

/* ---- names ------------------------------------------------------------------------------- */

START_TEST(test_kind_names)
{
	static const char *const want[_FILEOP_KIND_MAX] = { "write", "read", "stat", "prepare", "check", "list", "remove", "reclaim" };

	for (int k = 0; k < _FILEOP_KIND_MAX; k++)
		ck_assert_str_eq(fileop_kind_to_string((enum fileop_kind)k), want[k]);
	ck_assert_ptr_null(fileop_kind_to_string(_FILEOP_KIND_MAX));
}
END_TEST

static const struct {
	enum paths_reason reason;
	int code;
	bool has_path;
} reason_rows[] = {
	{ PATHS_R_SYMLINK_ANCESTOR, MSB_ERR_CONFINEMENT, true },
	{ PATHS_R_SYMLINK_LEAF, MSB_ERR_CONFINEMENT, true },
	{ PATHS_R_NOT_A_DIRECTORY, MSB_ERR_NOT_A_DIRECTORY, true },
	{ PATHS_R_NOT_FOUND, MSB_ERR_FILE_NOT_FOUND, true },
	{ PATHS_R_IS_DIRECTORY, MSB_ERR_OS_ERROR, true },
	{ PATHS_R_NOT_REGULAR, MSB_ERR_OS_ERROR, true },
	{ PATHS_R_TOO_LONG, MSB_ERR_INVALID_PARAMS, true },
	{ PATHS_R_STAT_BASE64, MSB_ERR_ENGINE_ERROR, false },   /* the engine's fault: no path echoed */
	{ PATHS_R_BASE_INVALID, MSB_ERR_INTERNAL, false },
};

START_TEST(test_error_from_reason)
{
	struct msb_error e = { 0 };

	fileop_error_from_reason(reason_rows[_i].reason, "sub/a.txt", &e);
	ck_assert_int_eq(e.code, reason_rows[_i].code);
	ck_assert_str_eq(e.message, paths_reason_to_string(reason_rows[_i].reason));
	if (reason_rows[_i].has_path)
		ck_assert_str_eq(json_string_value(json_object_get(e.data, "path")), "sub/a.txt");
	else
		ck_assert_ptr_null(json_object_get(e.data, "path"));
	msb_error_clear(&e);
}
END_TEST

/* ---- write ------------------------------------------------------------------------------- */

/* The engine's side of one frozen write of "a.txt" into the existing
 * working directory: pause, the walk, the PUT, the unpause. */
static void sc_write_a_txt(void)
{
	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/a.txt");
	sc_put(200, NULL);
	sc_unpause(0);
}

/* The whole frozen sequence of one write into an existing working directory. */
START_TEST(test_write_sequence)
{
	struct fileop *op;
	_cleanup_free_ char *tar = NULL;

	sc_write_a_txt();
	start();
	op = op_new(FILEOP_WRITE);
	ck_assert_uint_eq(op_add(op, PATHS_OP_WRITE, "a.txt", "hello"), 0);
	ck_assert_uint_eq(fileop_count(op), 1);
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;"
		  "PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	assert_thawed_before_cb();
	tar = put_listing();
	ck_assert_str_eq(tar, "f maf-sandbox/work/a.txt 0644 1000:1001 hello");
	/* After the thaw, the temporary is removed by /bin/rm in the guest, as
	 * the guest first (root in a sandbox has no CAP_DAC_OVERRIDE for the
	 * guest's directories; this fake engine refuses the exec: logged, the
	 * write stands, and no second try is made for a refusal). */
	{
		const struct fake_request *q = NULL;
		json_auto_t *body = NULL;
		const json_t *cmd;
		const char *tmp;

		for (size_t i = 0; i < fake_engine_request_count(); i++)
			if (strstr(fake_engine_request(i)->path, CPATH "/exec"))
				q = fake_engine_request(i);
		ck_assert_ptr_nonnull(q);
		body = json_loadb((const char *)q->body, q->body_len, 0, NULL);
		ck_assert_ptr_nonnull(body);
		cmd = json_object_get(body, "Cmd");
		ck_assert_uint_eq(json_array_size(cmd), 4);
		ck_assert_str_eq(json_string_value(json_array_get(cmd, 0)), "/bin/rm");
		ck_assert_str_eq(json_string_value(json_array_get(cmd, 1)), "-f");
		ck_assert_str_eq(json_string_value(json_array_get(cmd, 2)), "--");
		tmp = json_string_value(json_array_get(cmd, 3));
		ck_assert_int_eq(strncmp(tmp, WD "/", strlen(WD) + 1), 0);
		ck_assert(plocal_name_is_temp(tmp + strlen(WD) + 1));
		ck_assert_str_eq(json_string_value(json_object_get(body, "User")), "1000:1001");   /* the guest's */
	}
	ck_assert_ptr_nonnull(strstr(loop_logged(), "temporary file could not be removed"));
	/* Its journal entry stays, unlocked, for the next start to finish. */
	{
		const char *names = journal_names();
		struct plocal_journal_entry je;
		int dfd = open(journal_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		ck_assert(plocal_name_is_temp(names));
		ck_assert_int_eq(plocal_journal_take(dfd, names, &je), 0);
		ck_assert_str_eq(je.id, ID);
		ck_assert_str_eq(je.parent, WD);
		ck_assert_str_eq(je.tmp, names);
		plocal_journal_entry_release(&je);
		close(dfd);
	}
}
END_TEST

/* An exec of the cleanup rm, answered: created as eN, an empty output
 * stream, then its exit code. */
static void sc_exec(const char *eid, int exit_code)
{
	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/exec", .status = 201,
				    .headers = "Content-Type: application/json\r\n",
				    .body = keep(xasprintf("{\"Id\":\"%s\"}", eid)) });
	sc_add((struct fake_reply){ .method = "POST", .path = keep(xasprintf(API "/exec/%s/start", eid)),
				    .headers = "Content-Type: application/vnd.docker.multiplexed-stream\r\n",
				    .body = "" });
	sc_add((struct fake_reply){ .method = "GET", .path = keep(xasprintf(API "/exec/%s/json", eid)),
				    .headers = "Content-Type: application/json\r\n",
				    .body = keep(xasprintf("{\"ID\":\"%s\",\"Running\":false,\"ExitCode\":%d}",
							   eid, exit_code)) });
}

/* The User of the n-th cleanup exec's create request (NULL: none). */
static const char *exec_user(size_t n)
{
	static char user[64];

	for (size_t i = 0; i < fake_engine_request_count(); i++) {
		const struct fake_request *q = fake_engine_request(i);
		json_auto_t *body = NULL;

		if (strcmp(q->path, CPATH "/exec") != 0 || n-- > 0)
			continue;
		body = json_loadb((const char *)q->body, q->body_len, 0, NULL);
		snprintf(user, sizeof(user), "%s", json_string_value(json_object_get(body, "User")));
		return user;
	}
	return NULL;
}

/* The guest's rm of the temporary fails (a root-owned directory a non-root
 * guest cannot enter): root's rm goes next, and once it succeeds the
 * journal entry is gone. Both failing keeps the entry for the next start. */
START_TEST(test_write_cleanup_guest_then_root)
{
	const int both_fail = _i;

	{
		struct fileop *op;

		sc_pause(204, NULL);
		sc_wd();
		sc_absent(WD "/a.txt");
		sc_put(200, NULL);
		sc_unpause(0);
		sc_exec("e1", 1);                 /* the guest's: Permission denied */
		sc_exec("e2", both_fail ? 1 : 0); /* root's */
		start();
		op = op_new(FILEOP_WRITE);
		ck_assert_uint_eq(op_add(op, PATHS_OP_WRITE, "a.txt", "hello"), 0);
		fileop_set_owner(op, GUEST_UID, GUEST_GID);
		op_run(op);
		ck_assert_str_eq(exec_user(0), "1000:1001");
		ck_assert_str_eq(exec_user(1), "0:0");
		ck_assert_ptr_null(exec_user(2));
		if (both_fail) {
			ck_assert_ptr_nonnull(strstr(loop_logged(), "temporary file could not be removed"));
			ck_assert(plocal_name_is_temp(journal_names()));
		} else {
			ck_assert_ptr_null(strstr(loop_logged(), "temporary file could not be removed"));
			ck_assert_str_eq(journal_names(), "");
		}
	}
}
END_TEST

/* A root guest's rm is root's: one exec, no second try. */
START_TEST(test_write_cleanup_root_guest_once)
{
	struct fileop *op;

	sc_write_a_txt();
	sc_exec("e1", 1);
	start();
	op = op_new(FILEOP_WRITE);
	ck_assert_uint_eq(op_add(op, PATHS_OP_WRITE, "a.txt", "hello"), 0);
	fileop_set_owner(op, 0, 0);
	op_run(op);
	ck_assert_str_eq(exec_user(0), "0:0");
	ck_assert_ptr_null(exec_user(1));
	ck_assert_ptr_nonnull(strstr(loop_logged(), "temporary file could not be removed"));
}
END_TEST

/* A sandbox's share of the journal is capped: with
 * FILEOP_JOURNAL_MAX_PER_SANDBOX entries of it waiting, a write whose
 * cleanup fails leaves no new entry. */
START_TEST(test_write_journal_capped)
{
	struct fileop *op;
	int dfd = open(journal_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int n = 0;
	DIR *d;
	struct dirent *de;

	ck_assert_int_ge(dfd, 0);
	for (int i = 0; i < FILEOP_JOURNAL_MAX_PER_SANDBOX; i++) {
		char name[64], text[256];
		int fd;

		snprintf(name, sizeof(name), ".maf-sandbox-%016x.tmp", (unsigned)i);
		snprintf(text, sizeof(text), "%s\n%s\n%s\n", ID, WD, name);
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
		close(fd);
	}
	close(dfd);
	sc_write_a_txt();
	start();
	op = op_new(FILEOP_WRITE);
	ck_assert_uint_eq(op_add(op, PATHS_OP_WRITE, "a.txt", "hello"), 0);
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	ck_assert_ptr_nonnull(strstr(loop_logged(), "temporary file could not be removed"));
	d = opendir(journal_dir);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	ck_assert_int_eq(n, FILEOP_JOURNAL_MAX_PER_SANDBOX);
}
END_TEST

/* The archive plane's mount rule: lexical, before any engine request. */
static const struct {
	enum fileop_kind kind;
	const char *path;
	const char *want_errno;      /* NULL: allowed */
	const char *mount;
} mount_rows[] = {
	{ FILEOP_WRITE, "/etc/resolv.conf", "EBUSY", "/etc/resolv.conf" },
	{ FILEOP_WRITE, "/etc/hostname", "EBUSY", "/etc/hostname" },
	{ FILEOP_WRITE, "/etc/hosts", "EBUSY", "/etc/hosts" },
	{ FILEOP_WRITE, "/etc/hosts.allow", NULL, NULL },
	{ FILEOP_WRITE, "/etc/resolv.conf.d/x", NULL, NULL },
	{ FILEOP_WRITE, "/proc/x", "EXDEV", "/proc" },
	{ FILEOP_WRITE, "/proc/sys/kernel/x", "EXDEV", "/proc" },
	{ FILEOP_WRITE, "/sys/x", "EXDEV", "/sys" },
	{ FILEOP_WRITE, "/dev/shm/x", "EXDEV", "/dev" },
	{ FILEOP_WRITE, "/dev/shm", "EBUSY", "/dev/shm" },
	{ FILEOP_WRITE, "/devices/x", NULL, NULL },
	{ FILEOP_WRITE, "/processes", NULL, NULL },
	{ FILEOP_WRITE, "/maf-sandbox/work/a.txt", NULL, NULL },
	{ FILEOP_REMOVE, "/etc/hosts", "EBUSY", "/etc/hosts" },
	{ FILEOP_REMOVE, "/etc", "EBUSY", "/etc/resolv.conf" },
	{ FILEOP_RECLAIM, "/dev/shm", "EBUSY", "/dev/shm" },
	{ FILEOP_RECLAIM, "/sys/fs", "EBUSY", "/sys/fs/cgroup" },
	{ FILEOP_REMOVE, "/dev/shm/x", NULL, NULL },
	{ FILEOP_REMOVE, "/etc/passwd", NULL, NULL },
	{ FILEOP_READ, "/etc/hosts", NULL, NULL },
	{ FILEOP_STAT, "/proc/x", NULL, NULL },
};

START_TEST(test_archive_mount_rule)
{
	struct msb_error e = { 0 };
	int r = fileop_archive_mount_check(mount_rows[_i].kind, mount_rows[_i].path, "given", &e);
	char type[64];
	json_t *data;

	if (!mount_rows[_i].want_errno) {
		ck_assert_int_eq(r, 0);
		ck_assert_int_eq(e.code, 0);
		return;
	}
	ck_assert_int_lt(r, 0);
	data = wire_data(&e, type, sizeof(type));
	ck_assert_str_eq(type, "OSError");
	ck_assert_str_eq(json_string_value(json_object_get(data, "errno")), mount_rows[_i].want_errno);
	ck_assert_str_eq(json_string_value(json_object_get(data, "mount")), mount_rows[_i].mount);
	ck_assert_str_eq(json_string_value(json_object_get(data, "path")), "given");
	json_decref(data);
	msb_error_clear(&e);
}
END_TEST

/* /sbin/docker-init: the engine's read-only bind when sandbox.init is on. */
START_TEST(test_archive_mount_rule_init)
{
	struct msb_error e = { 0 };
	json_t *data;
	char type[64];

	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_WRITE, "/sbin/docker-init", "given", false, &e), 0);
	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_WRITE, "/sbin/x", "given", true, &e), 0);
	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_READ, "/sbin/docker-init", "given", true, &e), 0);
	ck_assert_int_eq(e.code, 0);
	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_WRITE, "/sbin/docker-init", "given", true, &e),
			 -EBUSY);
	data = wire_data(&e, type, sizeof(type));
	ck_assert_str_eq(type, "OSError");
	ck_assert_str_eq(json_string_value(json_object_get(data, "mount")), "/sbin/docker-init");
	json_decref(data);
	msb_error_clear(&e);
	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_RECLAIM, "/sbin", "given", true, &e), -EBUSY);
	msb_error_clear(&e);
	/* The static list still applies. */
	ck_assert_int_eq(fileop_archive_mount_check_init(FILEOP_WRITE, "/etc/hosts", "given", true, &e), -EBUSY);
	msb_error_clear(&e);
}
END_TEST

/* A write over a mount point on the archive plane: refused with no engine
 * request at all (no freeze, no walk). */
START_TEST(test_archive_write_over_mount_asks_nothing)
{
	struct fileop *op;

	start();
	op = op_new(FILEOP_WRITE);
	fileop_add(op, plan_in(PATHS_OP_WRITE, "etc/resolv.conf", "/"), (uint8_t *)xstrdup("x"), 1);
	op_run(op);
	assert_failed(MSB_ERR_OS_ERROR, "");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "errno")), "EBUSY");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "mount")), "/etc/resolv.conf");
}
END_TEST

/* Missing directories at and below the working directory get entries
 * (guest-owned 0755, outermost first); those above it get none. */
static const struct {
	const char *wd;              /* NULL: the default */
	const char *path;
	const char *present[4];      /* walk directories found */
	const char *absent;          /* the first one missing */
	const char *trace;
	const char *tar;
} mkdir_rows[] = {
	{ NULL, "sub/deep/a.txt", { "/maf-sandbox", WD }, WD "/sub",
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;PUT /&noOverwriteDirNonDir=1;unpause;exec;",
	  "d maf-sandbox/work/sub 0755 1000:1001;d maf-sandbox/work/sub/deep 0755 1000:1001;"
	  "f maf-sandbox/work/sub/deep/a.txt 0644 1000:1001 x" },
	/* the working directory itself missing: it is made, guest-owned */
	{ NULL, "a.txt", { "/maf-sandbox" }, WD,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";PUT /&noOverwriteDirNonDir=1;unpause;exec;",
	  "d maf-sandbox/work 0755 1000:1001;f maf-sandbox/work/a.txt 0644 1000:1001 x" },
	/* above it missing too: docker makes those (root), no entry */
	{ NULL, "a.txt", { NULL }, "/maf-sandbox",
	  "pause;HEAD /maf-sandbox;PUT /&noOverwriteDirNonDir=1;unpause;exec;",
	  "d maf-sandbox/work 0755 1000:1001;f maf-sandbox/work/a.txt 0644 1000:1001 x" },
	/* working_directory "/" (behaviour-docker §2.3) */
	{ "/", "tmp/run-1/note", { NULL }, "/tmp",
	  "pause;HEAD /tmp;PUT /&noOverwriteDirNonDir=1;unpause;exec;",
	  "d tmp 0755 1000:1001;d tmp/run-1 0755 1000:1001;f tmp/run-1/note 0644 1000:1001 x" },
	/* a relative working directory beneath the base */
	{ "proj", "a.txt", { "/maf-sandbox", WD }, WD "/proj",
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/proj;PUT /&noOverwriteDirNonDir=1;unpause;exec;",
	  "d maf-sandbox/work/proj 0755 1000:1001;f maf-sandbox/work/proj/a.txt 0644 1000:1001 x" },
};

START_TEST(test_write_makes_missing_dirs)
{
	struct fileop *op;
	_cleanup_free_ char *tar = NULL;

	sc_pause(204, NULL);
	for (size_t i = 0; i < ELEMENTSOF(mkdir_rows[_i].present) && mkdir_rows[_i].present[i]; i++)
		sc_dir(mkdir_rows[_i].present[i]);
	sc_absent(mkdir_rows[_i].absent);
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	fileop_add(op, plan_in(PATHS_OP_WRITE, mkdir_rows[_i].path, mkdir_rows[_i].wd), (uint8_t *)xstrdup("x"), 1);
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	assert_ok(mkdir_rows[_i].trace);
	assert_thawed_before_cb();
	tar = put_listing();
	ck_assert_str_eq(tar, mkdir_rows[_i].tar);
}
END_TEST

/* An empty file is written (no data). */
START_TEST(test_write_empty)
{
	struct fileop *op;
	_cleanup_free_ char *tar = NULL;

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/empty");
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "empty", NULL);
	fileop_set_owner(op, 0, 0);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/empty;PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	tar = put_listing();
	ck_assert_str_eq(tar, "f maf-sandbox/work/empty 0644 0:0 ");
}
END_TEST

/* The walk cache: two items under one directory HEAD it (and every
 * ancestor) once; an existing leaf is overwritten in place. */
START_TEST(test_walk_cache_shared)
{
	struct fileop *op;
	_cleanup_free_ char *tar = NULL;

	sc_pause(204, NULL);
	sc_wd();
	sc_dir(WD "/d");
	sc_absent(WD "/d/a.txt");
	sc_file(WD "/d/b.txt", 3);
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "d/a.txt", "A");
	op_add(op, PATHS_OP_WRITE, "d/b.txt", "B");
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/d;HEAD " WD "/d/a.txt;HEAD " WD "/d/b.txt;"
		  "PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	tar = put_listing();
	ck_assert_str_eq(tar, "f maf-sandbox/work/d/a.txt 0644 1000:1001 A;f maf-sandbox/work/d/b.txt 0644 1000:1001 B");
}
END_TEST

/* An absent directory is cached too: the second item's walk ends there
 * without a request, and the directory gets one entry for both. */
START_TEST(test_walk_cache_absent)
{
	struct fileop *op;
	_cleanup_free_ char *tar = NULL;

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/d");
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "d/a.txt", "A");
	op_add(op, PATHS_OP_WRITE, "d/b.txt", "B");
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/d;PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	tar = put_listing();
	ck_assert_str_eq(tar, "d maf-sandbox/work/d 0755 1000:1001;f maf-sandbox/work/d/a.txt 0644 1000:1001 A;"
			      "f maf-sandbox/work/d/b.txt 0644 1000:1001 B");
}
END_TEST

/* ---- refusals found by the walk ---------------------------------------------------------- */

enum what { W_DIR, W_FILE, W_LINK, W_ABSENT, W_FAIL };

static const struct {
	const char *name;
	enum fileop_kind kind;
	const char *path;
	struct { const char *p; enum what w; } stats[4];
	int code;
	const char *trace;
} refusal_rows[] = {
	{ "symlink ancestor", FILEOP_WRITE, "sub/a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/sub", W_LINK } }, MSB_ERR_CONFINEMENT,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;unpause;" },
	{ "symlink above the wd", FILEOP_WRITE, "a.txt",
	  { { "/maf-sandbox", W_LINK } }, MSB_ERR_CONFINEMENT,
	  "pause;HEAD /maf-sandbox;unpause;" },
	{ "file ancestor", FILEOP_WRITE, "sub/a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/sub", W_FILE } }, MSB_ERR_NOT_A_DIRECTORY,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;unpause;" },
	{ "symlink leaf", FILEOP_WRITE, "a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/a.txt", W_LINK } }, MSB_ERR_CONFINEMENT,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;" },
	{ "directory leaf", FILEOP_WRITE, "a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/a.txt", W_DIR } }, MSB_ERR_OS_ERROR,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;" },
	{ "read: symlink ancestor", FILEOP_READ, "sub/a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/sub", W_LINK } }, MSB_ERR_CONFINEMENT,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;unpause;" },
	{ "read: a link is not a regular file", FILEOP_READ, "a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/a.txt", W_LINK } }, MSB_ERR_OS_ERROR,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;" },
	{ "read: a directory is not a regular file", FILEOP_READ, "a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/a.txt", W_DIR } }, MSB_ERR_OS_ERROR,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;" },
	{ "the engine fails a HEAD", FILEOP_WRITE, "sub/a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_FAIL } }, MSB_ERR_ENGINE_ERROR,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";unpause;" },
	{ "stat: file ancestor", FILEOP_STAT, "f/a.txt",
	  { { "/maf-sandbox", W_DIR }, { WD, W_DIR }, { WD "/f", W_FILE } }, MSB_ERR_NOT_A_DIRECTORY,
	  "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/f;unpause;" },
};

static const enum paths_op kind_pop[_FILEOP_KIND_MAX] = {
	[FILEOP_WRITE] = PATHS_OP_WRITE, [FILEOP_READ] = PATHS_OP_READ, [FILEOP_STAT] = PATHS_OP_STAT,
	[FILEOP_PREPARE] = PATHS_OP_LIST, [FILEOP_CHECK] = PATHS_OP_DELETE,
};

static void sc_what(const char *p, enum what w)
{
	switch (w) {
	case W_DIR: sc_dir(p); break;
	case W_FILE: sc_file(p, 7); break;
	case W_LINK: sc_link(p); break;
	case W_ABSENT: sc_absent(p); break;
	case W_FAIL:
		sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path(p), .status = 500, .repeat = true });
		break;
	}
}

/* A refusal: its wire type, no PUT or GET, and the unpause still sent
 * (before the callback). */
START_TEST(test_walk_refusal)
{
	struct fileop *op;
	enum fileop_kind kind = refusal_rows[_i].kind;

	sc_pause(204, NULL);
	for (size_t i = 0; i < ELEMENTSOF(refusal_rows[_i].stats) && refusal_rows[_i].stats[i].p; i++)
		sc_what(refusal_rows[_i].stats[i].p, refusal_rows[_i].stats[i].w);
	sc_put(200, NULL);
	sc_inspect(200);
	sc_unpause(0);
	start();
	op = op_new(kind);
	op_add(op, kind_pop[kind], refusal_rows[_i].path, kind == FILEOP_WRITE ? "x" : NULL);
	op_run(op);
	ck_assert_msg(res.code == refusal_rows[_i].code, "%s: code %d (%s)", refusal_rows[_i].name, res.code,
		      res.message);
	assert_failed(refusal_rows[_i].code, refusal_rows[_i].trace);
	if (refusal_rows[_i].code == MSB_ERR_ENGINE_ERROR)
		ck_assert_int_eq(json_integer_value(json_object_get(res.data, "engine_status")), 500);
	else
		ck_assert_str_eq(json_string_value(json_object_get(res.data, "path")), refusal_rows[_i].path);
	assert_thawed_before_cb();
}
END_TEST

/* A stat header the engine mangled: EngineError, the guest thawed. */
START_TEST(test_bad_stat_header)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path("/maf-sandbox"), .repeat = true,
				    .headers = DOCKER_ARCHIVE_STAT_HEADER ": not base64!\r\n" });
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "a.txt", NULL);
	op_run(op);
	assert_failed(MSB_ERR_ENGINE_ERROR, "pause;HEAD /maf-sandbox;unpause;");
	assert_thawed_before_cb();
}
END_TEST

/* ---- read ---------------------------------------------------------------------------------- */

#define READ_SIZE 3000

static char *pattern(size_t n)
{
	char *s = xmalloc(n + 1);

	for (size_t i = 0; i < n; i++)
		s[i] = (char)('a' + (i * 7 + i / 26) % 26);
	s[n] = '\0';
	return s;
}

/* The GET is streamed (small chunks, apart in time) through the tar reader. */
START_TEST(test_read_streams)
{
	_cleanup_free_ char *data = pattern(READ_SIZE);
	struct fake_reply *get;
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/f.txt", READ_SIZE);
	get = sc_get_tar(WD "/f.txt", "f.txt", data, READ_SIZE);
	get->chunked = true;
	get->chunk_size = 700;
	get->chunk_delay_ms = 2;
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "f.txt", NULL);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/f.txt;GET " WD "/f.txt;unpause;");
	assert_thawed_before_cb();
	ck_assert(res.items[0].found);
	ck_assert_int_eq(res.items[0].kind, PATHS_KIND_FILE);
	ck_assert_uint_eq(res.items[0].size, READ_SIZE);
	ck_assert_uint_eq(res.items[0].out_len, READ_SIZE);
	ck_assert_str_eq(res.items[0].out, data);
}
END_TEST

/* An empty file reads as zero bytes, non-NULL. */
START_TEST(test_read_empty)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/e", 0);
	sc_get_tar(WD "/e", "e", NULL, 0);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "e", NULL);
	fileop_set_max_bytes(op, 0);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/e;GET " WD "/e;unpause;");
	ck_assert_ptr_nonnull(res.items[0].out);
	ck_assert_uint_eq(res.items[0].out_len, 0);
}
END_TEST

/* A size over max_bytes, known from the HEAD: refused before any GET. */
START_TEST(test_read_over_max_bytes)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/big", 2000);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "big", NULL);
	fileop_set_max_bytes(op, 1000);
	op_run(op);
	assert_failed(MSB_ERR_TRANSFER_CAP_EXCEEDED, "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/big;unpause;");
	ck_assert_int_eq(json_integer_value(json_object_get(res.data, "limit")), 1000);
	ck_assert_int_eq(json_integer_value(json_object_get(res.data, "size")), 2000);
	assert_thawed_before_cb();
}
END_TEST

/* All the files together over max_total: refused before any GET. */
START_TEST(test_read_over_max_total)
{
	struct fileop *op;
	const struct fileop_params p = {
		.kind = FILEOP_READ, .id = ID, .max_bytes = 1000, .max_total = 1000, .timeout_ms = 2000,
	};

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/a", 600);
	sc_file(WD "/b", 600);
	sc_unpause(0);
	start();
	op = fileop_new(&daemon_ctx, &p);
	op_add(op, PATHS_OP_READ, "a", NULL);
	op_add(op, PATHS_OP_READ, "b", NULL);
	op_run(op);
	assert_failed(MSB_ERR_TRANSFER_CAP_EXCEEDED,
		      "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a;HEAD " WD "/b;unpause;");
	ck_assert_int_eq(json_integer_value(json_object_get(res.data, "limit")), 1000);
	ck_assert_int_eq(json_integer_value(json_object_get(res.data, "size")), 1200);
	assert_thawed_before_cb();
}
END_TEST

/* The tar's entry is bigger than max_bytes although the HEAD said less:
 * the reader refuses it (a refusal, never a truncation). */
START_TEST(test_read_over_cap_in_stream)
{
	_cleanup_free_ char *data = pattern(2000);
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/grew", 10);
	sc_get_tar(WD "/grew", "grew", data, 2000);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "grew", NULL);
	fileop_set_max_bytes(op, 1000);
	op_run(op);
	assert_failed(MSB_ERR_TRANSFER_CAP_EXCEEDED,
		      "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/grew;GET " WD "/grew;unpause;");
	assert_thawed_before_cb();
}
END_TEST

/* The tar's entry is bigger than the HEAD said (but within max_bytes) and
 * arrives in several chunks: the bytes are kept whole, never written past
 * the buffer (ASan watches). */
START_TEST(test_read_more_than_stat_said)
{
	_cleanup_free_ char *data = pattern(READ_SIZE);
	struct fake_reply *get;
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/grew", 100);
	get = sc_get_tar(WD "/grew", "grew", data, READ_SIZE);
	get->chunked = true;
	get->chunk_size = 512;
	get->chunk_delay_ms = 2;
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "grew", NULL);
	op_run(op);
	ck_assert_str_eq(trace(), "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/grew;GET " WD "/grew;unpause;");
	if (res.code == 0) {
		ck_assert_uint_eq(res.items[0].out_len, READ_SIZE);
		ck_assert_str_eq(res.items[0].out, data);
	} else {
		/* or refused as the engine's inconsistency, never a crash */
		assert_failed(MSB_ERR_ENGINE_ERROR, trace());
	}
	assert_thawed_before_cb();
}
END_TEST

/* The engine answers the GET with a directory: refused, not a regular file. */
START_TEST(test_read_tar_not_a_file)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/x", 5);
	sc_get_dir(WD "/x", "x");
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "x", NULL);
	op_run(op);
	assert_failed(MSB_ERR_OS_ERROR, "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/x;GET " WD "/x;unpause;");
	assert_thawed_before_cb();
}
END_TEST

/* Absent: the container is inspected before the answer (an absence is
 * never a gone container), and it is FileNotFoundError. */
START_TEST(test_read_absent_confirmed)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/nope");
	sc_inspect(200);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "nope", NULL);
	op_run(op);
	assert_failed(MSB_ERR_FILE_NOT_FOUND,
		      "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/nope;inspect;unpause;");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "path")), "nope");
	assert_thawed_before_cb();
}
END_TEST

/* The container went away: the HEAD of "/maf-sandbox" says 404, and the
 * inspect that confirms it says so too → SandboxNotFound, not
 * FileNotFoundError. */
START_TEST(test_read_container_gone)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_absent("/maf-sandbox");
	sc_inspect(404);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "a.txt", NULL);
	op_run(op);
	assert_failed(MSB_ERR_SANDBOX_NOT_FOUND, "pause;HEAD /maf-sandbox;inspect;unpause;");
	assert_thawed_before_cb();
}
END_TEST

/* per_item_errors: one item absent, one there: the op succeeds, the absent
 * one's err is FileNotFoundError, the other's bytes are read. */
START_TEST(test_read_per_item_errors)
{
	struct fileop *op;
	const struct fileop_params p = {
		.kind = FILEOP_READ, .id = ID, .max_bytes = 1000, .max_total = 1000, .timeout_ms = 2000,
		.per_item_errors = true,
	};

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/missing.db");
	sc_file(WD "/here.db", 5);
	sc_get_tar(WD "/here.db", "here.db", "hello", 5);
	sc_inspect(200);
	sc_unpause(0);
	start();
	op = fileop_new(&daemon_ctx, &p);
	op_add(op, PATHS_OP_READ, "missing.db", NULL);
	op_add(op, PATHS_OP_READ, "here.db", NULL);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/missing.db;HEAD " WD "/here.db;inspect;"
		  "GET " WD "/here.db;unpause;");
	assert_thawed_before_cb();
	ck_assert(!res.items[0].found);
	ck_assert_int_eq(res.items[0].err, MSB_ERR_FILE_NOT_FOUND);
	ck_assert_str_eq(res.items[0].err_type, "FileNotFoundError");
	ck_assert_ptr_null(res.items[0].out);
	ck_assert(res.items[1].found);
	ck_assert_int_eq(res.items[1].err, 0);
	ck_assert_str_eq(res.items[1].out, "hello");
}
END_TEST

/* per_item_errors: a file over max_bytes is that item's refusal. */
START_TEST(test_read_per_item_over_cap)
{
	struct fileop *op;
	const struct fileop_params p = {
		.kind = FILEOP_READ, .id = ID, .max_bytes = 100, .max_total = 1000, .timeout_ms = 2000,
		.per_item_errors = true,
	};

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/big", 500);
	sc_file(WD "/small", 2);
	sc_get_tar(WD "/small", "small", "hi", 2);
	sc_unpause(0);
	start();
	op = fileop_new(&daemon_ctx, &p);
	op_add(op, PATHS_OP_READ, "big", NULL);
	op_add(op, PATHS_OP_READ, "small", NULL);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/big;HEAD " WD "/small;GET " WD "/small;unpause;");
	ck_assert_int_eq(res.items[0].err, MSB_ERR_TRANSFER_CAP_EXCEEDED);
	ck_assert_ptr_null(res.items[0].out);
	ck_assert_str_eq(res.items[1].out, "hi");
}
END_TEST

/* ---- stat ------------------------------------------------------------------------------------ */

START_TEST(test_stat_found)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/a.txt", 42);
	sc_inspect(200);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "a.txt", NULL);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;");   /* no inspect */
	assert_thawed_before_cb();
	ck_assert(res.items[0].found);
	ck_assert_int_eq(res.items[0].kind, PATHS_KIND_FILE);
	ck_assert_uint_eq(res.items[0].size, 42);
	ck_assert_ptr_null(res.items[0].out);
}
END_TEST

/* A symlink leaf is described, not refused. */
START_TEST(test_stat_symlink_described)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_link(WD "/ln");
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "ln", NULL);
	op_run(op);
	assert_ok("pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/ln;unpause;");
	ck_assert(res.items[0].found);
	ck_assert_int_eq(res.items[0].kind, PATHS_KIND_SYMLINK);
}
END_TEST

/* Absent → found false (null on the wire), after the confirming inspect;
 * absent below an absent parent, the same without the leaf's HEAD. */
static const struct {
	const char *path;
	const char *absent;
	const char *trace;
} stat_absent_rows[] = {
	{ "nope", WD "/nope", "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/nope;inspect;unpause;" },
	{ "d/nope", WD "/d", "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/d;inspect;unpause;" },
};

START_TEST(test_stat_absent)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(stat_absent_rows[_i].absent);
	sc_inspect(200);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, stat_absent_rows[_i].path, NULL);
	op_run(op);
	assert_ok(stat_absent_rows[_i].trace);
	assert_thawed_before_cb();
	ck_assert(!res.items[0].found);
	ck_assert_int_eq(res.items[0].err, 0);
}
END_TEST

START_TEST(test_stat_container_gone)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_absent("/maf-sandbox");
	sc_inspect(404);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "a.txt", NULL);
	op_run(op);
	assert_failed(MSB_ERR_SANDBOX_NOT_FOUND, "pause;HEAD /maf-sandbox;inspect;unpause;");
	assert_thawed_before_cb();
}
END_TEST

/* ---- the engine failing mid-copy ----------------------------------------------------------------- */

static const struct {
	int status;
	const char *body;
	int code;
} put_fail_rows[] = {
	{ 500, "{\"message\":\"boom\"}", MSB_ERR_ENGINE_ERROR },
	{ 400, "{\"message\":\"container rootfs is marked read-only\"}", MSB_ERR_OS_ERROR },
	{ 404, "{\"message\":\"No such container: " ID "\"}", MSB_ERR_SANDBOX_NOT_FOUND },
};

/* The PUT refused: the wire error, and the unpause sent before the callback. */
START_TEST(test_put_fails)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_absent(WD "/a.txt");
	sc_put(put_fail_rows[_i].status, put_fail_rows[_i].body);
	sc_unpause(THAW_SLOW_MS);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	assert_failed(put_fail_rows[_i].code, "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;"
			  "PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	assert_thawed_before_cb();
}
END_TEST

/* The GET's connection closes mid-body: an error, and the guest is still
 * thawed before the callback fires. */
START_TEST(test_get_closes_mid_body)
{
	_cleanup_free_ char *data = pattern(READ_SIZE);
	struct fake_reply *get;
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/f", READ_SIZE);
	get = sc_get_tar(WD "/f", "f", data, READ_SIZE);
	get->close_after_bytes = 1500;
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "f", NULL);
	op_run(op);
	loop_run_until(base, NULL, 0, 300);   /* an unpause sent late would show up now */
	ck_assert_msg(res.code != 0, "a truncated GET succeeded");
	ck_assert_msg(res.code == MSB_ERR_ENGINE_UNAVAILABLE || res.code == MSB_ERR_ENGINE_ERROR,
		      "code %d (%s)", res.code, res.message);
	ck_assert_str_eq(res.type, msb_error_name(res.code));
	ck_assert_str_eq(trace(), "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/f;GET " WD "/f;unpause;");
	assert_thawed_before_cb();
	ck_assert_ptr_null(strstr(loop_logged(), "still frozen"));
}
END_TEST

/* ---- the deadline --------------------------------------------------------------------------------- */

/* No engine request timeout: only the op's deadline can end a request held
 * back for good (else the engine's 2 s would, after the deadline). */
static void deadline_only(void)
{
	static const struct engine_options no_timeout = { .reconnect_min_ms = 20, .reconnect_max_ms = 80 };

	engine_set_options(engine, &no_timeout);
	daemon_ctx.config->engine_timeout_ms = 0;
}

/* A HEAD that never answers: TimeoutError; the HEAD cancelled (the fake
 * sees it abandoned); the unpause sent, and the callback only after it was
 * answered. */
START_TEST(test_deadline_stalled_head)
{
	struct fileop *op;

	deadline_only();
	daemon_ctx.config->files_timeout_ms = SHORT_MS;
	sc_pause(204, NULL);
	sc_dir("/maf-sandbox");
	sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path(WD), .delay_ms = NEVER_MS });
	sc_unpause(THAW_SLOW_MS);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	assert_failed(MSB_ERR_TIMEOUT, "pause;HEAD /maf-sandbox;HEAD " WD ";unpause;");
	ck_assert_int_eq(json_integer_value(json_object_get(res.data, "timeout_ms")), SHORT_MS);
	/* not early: the deadline, then the unpause's answer (held back) */
	ck_assert_int_ge(res.ms, SHORT_MS + THAW_SLOW_MS - TEST_TIMER_SLACK_MS);
	/* hang guard: the fake's thread notices the close */
	loop_run_while_abandoned();
	ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	assert_thawed_before_cb();
}
END_TEST

/* A GET whose body stalls: the same. */
START_TEST(test_deadline_stalled_get)
{
	struct fake_reply *get;
	struct fileop *op;

	deadline_only();
	daemon_ctx.config->files_timeout_ms = SHORT_MS;
	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/f", 5);
	get = sc_get_tar(WD "/f", "f", "hello", 5);
	get->stall = true;
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "f", NULL);
	op_run(op);
	assert_failed(MSB_ERR_TIMEOUT, "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/f;GET " WD "/f;unpause;");
	ck_assert_int_ge(res.ms, SHORT_MS - TEST_TIMER_SLACK_MS);   /* not early */
	/* hang guard: the fake's thread notices the close */
	loop_run_while_abandoned();
	ck_assert_uint_eq(fake_engine_abandoned_count(), 1);
	assert_thawed_before_cb();
}
END_TEST

/* The deadline passes while the pause is in flight: TimeoutError; the
 * pause, once it lands, is undone; the callback (fileop.h) comes only once
 * the guest is thawed. */
START_TEST(test_deadline_during_pause)
{
	struct fileop *op;

	daemon_ctx.config->files_timeout_ms = SHORT_MS;
	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/pause", .status = 204,
				    .delay_ms = SHORT_MS + 200 });
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	assert_failed(MSB_ERR_TIMEOUT, "pause;unpause;");
	/* not early: the callback waits for the pause to land and be undone */
	ck_assert_int_ge(res.ms, SHORT_MS + 200 - TEST_TIMER_SLACK_MS);
	ck_assert_uint_eq(freeze_table_count(daemon_ctx.freezes), 0);
	assert_thawed_before_cb();
}
END_TEST

/* ---- the pause refused --------------------------------------------------------------------------- */

static const struct {
	int status;
	const char *body;
	int code;
	const char *reason;          /* data.reason, or NULL */
} pause_rows[] = {
	{ 409, "{\"message\":\"Container " ID " is not running\"}", MSB_ERR_FREEZE_FAILED, "not running" },
	{ 409, "{\"message\":\"Container " ID " is already paused\"}", MSB_ERR_FREEZE_FAILED, "already paused" },
	{ 404, "{\"message\":\"No such container: " ID "\"}", MSB_ERR_SANDBOX_NOT_FOUND, NULL },
	{ 500, "{\"message\":\"cannot pause: freezer not supported\"}", MSB_ERR_FREEZE_FAILED, "refused" },
};

/* No walk, no unpause (something else may hold the freeze). */
START_TEST(test_pause_refused)
{
	struct fileop *op;

	sc_pause(pause_rows[_i].status, pause_rows[_i].body);
	sc_wd();
	sc_unpause(0);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	assert_failed(pause_rows[_i].code, "pause;");
	if (pause_rows[_i].reason)
		ck_assert_str_eq(json_string_value(json_object_get(res.data, "reason")), pause_rows[_i].reason);
	ck_assert_uint_eq(res.claims_at_cb, 0);
}
END_TEST

static void held_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	(void)claim, (void)error, (void)f, (void)arg;
	held_calls++;
}

/* Too many claims queued on the container: refused at once (from the
 * loop), nothing sent for it. */
START_TEST(test_freeze_queue_full)
{
	struct fileop *op;

	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/pause", .status = 204, .delay_ms = SLOW_MS });
	start();
	for (int i = 0; i < FREEZE_MAX_CLAIMS_PER_CONTAINER; i++)
		ck_assert_int_eq(freeze_acquire(daemon_ctx.freezes, engine, ID, held_cb, NULL, NULL), 0);
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	assert_failed(MSB_ERR_FREEZE_FAILED, "pause;");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "reason")), "queue full");
	ck_assert_int_eq(held_calls, 0);
	engine = engine_free(engine);                 /* fails every claim once */
	ck_assert_int_eq(held_calls, FREEZE_MAX_CLAIMS_PER_CONTAINER);
}
END_TEST

/* The engine not reachable: the pause cannot be sent; EngineUnavailable,
 * from the loop, nothing sent. */
START_TEST(test_engine_unreachable)
{
	struct fileop *op;

	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	op_run(op);
	ck_assert_int_eq(res.code, MSB_ERR_ENGINE_UNAVAILABLE);
	ck_assert_str_eq(res.type, "EngineUnavailable");
	ck_assert_uint_eq(engine_requests_made(engine), 0);
	ck_assert_uint_eq(res.claims_at_cb, 0);
}
END_TEST

/* ---- abandon ---------------------------------------------------------------------------------------- */

/* The callback never fires; the op runs to its end and still unpauses. */
START_TEST(test_abandon)
{
	struct fileop *op;

	sc_write_a_txt();
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "x");
	fileop_start(op, op_cb, NULL);
	fileop_abandon(op);
	/* hang guard: until the op ran to its end (the exec after the unpause) */
	LOOP_RUN_WHILE(base, !strstr(trace(), "exec;"), RUN_MAX_MS);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(res.calls, 0);
	ck_assert_str_eq(trace(), "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;"
			 "PUT /&noOverwriteDirNonDir=1;unpause;exec;");
	ck_assert_uint_eq(freeze_table_count(daemon_ctx.freezes), 0);
}
END_TEST

/* Abandoned mid-walk, then failing at its deadline: no callback, thawed. */
START_TEST(test_abandon_then_timeout)
{
	struct fileop *op;

	daemon_ctx.config->files_timeout_ms = SHORT_MS;
	sc_pause(204, NULL);
	sc_add((struct fake_reply){ .method = "HEAD", .path = archive_path("/maf-sandbox"), .delay_ms = SLOW_MS });
	sc_unpause(0);
	start();
	op = op_new(FILEOP_READ);
	op_add(op, PATHS_OP_READ, "a.txt", NULL);
	fileop_start(op, op_cb, NULL);
	loop_run_until(base, NULL, 0, SHORT_MS / 3);
	fileop_abandon(op);
	/* hang guard: until its deadline passed and it thawed */
	LOOP_RUN_WHILE(base, !strstr(trace(), "unpause;") || freeze_table_count(daemon_ctx.freezes) > 0,
		       RUN_MAX_MS);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(res.calls, 0);
	ck_assert_str_eq(trace(), "pause;HEAD /maf-sandbox;unpause;");
	ck_assert_uint_eq(freeze_table_count(daemon_ctx.freezes), 0);
}
END_TEST

/* ---- check ---------------------------------------------------------------------------------------- */

/* FILEOP_CHECK walks without freezing: no pause, no unpause. */
START_TEST(test_check_never_pauses)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_dir(WD "/sub");
	sc_unpause(0);
	start();
	op = op_new(FILEOP_CHECK);
	op_add(op, PATHS_OP_DELETE, "sub/x", NULL);
	op_run(op);
	assert_ok("HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;");
	ck_assert_uint_eq(res.claims_at_cb, 0);
}
END_TEST

START_TEST(test_check_refuses_without_pause)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_link(WD "/sub");
	sc_unpause(0);
	start();
	op = op_new(FILEOP_CHECK);
	op_add(op, PATHS_OP_DELETE, "sub/x", NULL);
	op_run(op);
	assert_failed(MSB_ERR_CONFINEMENT, "HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;");
}
END_TEST

/* ---- the planes: archive serves remove/reclaim as a walk, refuses a listing -------- */

START_TEST(test_archive_remove_walks_unfrozen)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_wd();
	sc_dir(WD "/sub");
	sc_unpause(0);
	start();
	op = op_new(FILEOP_REMOVE);
	op_add(op, PATHS_OP_DELETE, "sub/x", NULL);
	fileop_set_recursive(op, true);
	op_run(op);
	/* The walk classifies; the caller's rm in the guest does the removal. */
	assert_ok("HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/sub;");
	ck_assert(!res.local);
	ck_assert_uint_eq(res.claims_at_cb, 0);
}
END_TEST

START_TEST(test_archive_reclaim_asks_nothing)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_RECLAIM);
	fileop_add(op, plan_in(PATHS_OP_RECLAIM, WD "/reclaim-me", NULL), NULL, 0);
	op_run(op);
	assert_ok("");
	ck_assert(!res.local);
}
END_TEST

START_TEST(test_archive_refuses_a_listing)
{
	struct fileop *op;

	sc_pause(204, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_LIST);
	op_add(op, PATHS_OP_LIST, ".", NULL);
	op_run(op);
	assert_failed(MSB_ERR_CAPABILITY_NOT_SUPPORTED, "");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "capability")), "files_list");
	ck_assert(!res.local);
}
END_TEST

/* The daemon's plane is local, but this init cannot be pinned (pid 1: its
 * cgroup does not name the container): auto falls back to the archive
 * plane for the call, local fails it. */
static const struct {
	const char *plane;
	int code;
	const char *trace;
} unpinnable_rows[] = {
	{ "auto", 0, "inspect;pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a.txt;unpause;" },
	{ "local", MSB_ERR_INTERNAL, "inspect;" },
};

START_TEST(test_an_unpinnable_init)
{
	struct fileop *op;

	free(daemon_ctx.config->files_plane);
	daemon_ctx.config->files_plane = xstrdup(unpinnable_rows[_i].plane);
	daemon_ctx.plane_local = true;
	sc_add((struct fake_reply){ .method = "GET", .path = CPATH "/json",
				    .body = "{\"Id\":\"" ID "\",\"State\":{\"Running\":true,\"Pid\":1}}",
				    .headers = "Content-Type: application/json\r\n" });
	sc_pause(204, NULL);
	sc_wd();
	sc_file(WD "/a.txt", 7);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "a.txt", NULL);
	op_run(op);
	if (unpinnable_rows[_i].code)
		assert_failed(unpinnable_rows[_i].code, unpinnable_rows[_i].trace);
	else
		assert_ok(unpinnable_rows[_i].trace);
	ck_assert(!res.local);
	daemon_ctx.plane_local = false;
}
END_TEST

/* An init that is not running is refused as the archive plane refuses it. */
START_TEST(test_a_stopped_sandbox_on_the_local_plane)
{
	struct fileop *op;

	daemon_ctx.plane_local = true;
	sc_add((struct fake_reply){ .method = "GET", .path = CPATH "/json",
				    .body = "{\"Id\":\"" ID "\",\"State\":{\"Running\":false,\"Pid\":0}}",
				    .headers = "Content-Type: application/json\r\n" });
	start();
	op = op_new(FILEOP_STAT);
	op_add(op, PATHS_OP_STAT, "a.txt", NULL);
	op_run(op);
	assert_failed(MSB_ERR_FREEZE_FAILED, "inspect;");
	ck_assert_str_eq(json_string_value(json_object_get(res.data, "reason")), "not running");
	daemon_ctx.plane_local = false;
}
END_TEST

/* ---- prepare ---------------------------------------------------------------------------------------- */

static const struct {
	const char *wd;
	const char *present[4];
	const char *absent;          /* NULL: nothing missing */
	const char *trace;
	const char *tar;             /* NULL: no PUT */
} prepare_rows[] = {
	{ WD, { NULL }, "/maf-sandbox", "pause;HEAD /maf-sandbox;PUT /&noOverwriteDirNonDir=1;unpause;",
	  "d maf-sandbox 0755 0:0;d maf-sandbox/work 0755 1000:1001" },
	{ WD, { "/maf-sandbox" }, WD, "pause;HEAD /maf-sandbox;HEAD " WD ";PUT /&noOverwriteDirNonDir=1;unpause;",
	  "d maf-sandbox/work 0755 1000:1001" },
	{ "/srv/a/b/c", { "/srv" }, "/srv/a",
	  "pause;HEAD /srv;HEAD /srv/a;PUT /&noOverwriteDirNonDir=1;unpause;",
	  "d srv/a 0755 0:0;d srv/a/b 0755 0:0;d srv/a/b/c 0755 1000:1001" },
	{ WD, { "/maf-sandbox", WD }, NULL, "pause;HEAD /maf-sandbox;HEAD " WD ";unpause;", NULL },
};

/* Ancestors root-owned 0755, the base the guest's; nothing missing, no PUT. */
START_TEST(test_prepare)
{
	struct fileop *op;
	struct paths_plan *plan = NULL;
	enum paths_reason why;

	sc_pause(204, NULL);
	for (size_t i = 0; i < ELEMENTSOF(prepare_rows[_i].present) && prepare_rows[_i].present[i]; i++)
		sc_dir(prepare_rows[_i].present[i]);
	if (prepare_rows[_i].absent)
		sc_absent(prepare_rows[_i].absent);
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_PREPARE);
	ck_assert_int_eq(paths_plan_new(PATHS_OP_LIST, ".", 1, prepare_rows[_i].wd, SIZE_MAX, prepare_rows[_i].wd,
					&plan, &why), 0);
	fileop_add(op, plan, NULL, 0);
	fileop_set_owner(op, GUEST_UID, GUEST_GID);
	op_run(op);
	assert_ok(prepare_rows[_i].trace);
	assert_thawed_before_cb();
	if (prepare_rows[_i].tar) {
		_cleanup_free_ char *tar = put_listing();

		ck_assert_str_eq(tar, prepare_rows[_i].tar);
	} else {
		ck_assert_ptr_null(request_with("PUT"));
	}
}
END_TEST

/* The working directory is a link: refused, never created through it. */
START_TEST(test_prepare_link_refused)
{
	struct fileop *op;
	struct paths_plan *plan = NULL;
	enum paths_reason why;

	sc_pause(204, NULL);
	sc_dir("/maf-sandbox");
	sc_link(WD);
	sc_put(200, NULL);
	sc_unpause(0);
	start();
	op = op_new(FILEOP_PREPARE);
	ck_assert_int_eq(paths_plan_new(PATHS_OP_LIST, ".", 1, WD, SIZE_MAX, WD, &plan, &why), 0);
	fileop_add(op, plan, NULL, 0);
	op_run(op);
	assert_failed(MSB_ERR_CONFINEMENT, "pause;HEAD /maf-sandbox;HEAD " WD ";unpause;");
}
END_TEST

/* ---- life cycle -------------------------------------------------------------------------------- */

/* An op never started is discarded with its items. */
START_TEST(test_free_unstarted)
{
	struct fileop *op;

	sc_pause(204, NULL);
	start();
	op = op_new(FILEOP_WRITE);
	op_add(op, PATHS_OP_WRITE, "a.txt", "abc");
	op_add(op, PATHS_OP_WRITE, "b.txt", "def");
	ck_assert_ptr_nonnull(fileop_item(op, 1));
	ck_assert_ptr_null(fileop_item(op, 2));
	ck_assert_ptr_null(fileop_free(op));
	ck_assert_ptr_null(fileop_free(NULL));
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_str_eq(trace(), "");
}
END_TEST

/* Two ops on one container: the second's freeze waits for the first's thaw. */
START_TEST(test_two_ops_serialised)
{
	struct fileop *a, *b;

	sc_add((struct fake_reply){ .method = "POST", .path = CPATH "/pause", .status = 204, .repeat = true });
	sc_wd();
	sc_file(WD "/a", 1);
	sc_file(WD "/b", 1);
	sc_unpause(0);
	start();
	a = op_new(FILEOP_STAT);
	op_add(a, PATHS_OP_STAT, "a", NULL);
	b = op_new(FILEOP_STAT);
	op_add(b, PATHS_OP_STAT, "b", NULL);
	fileop_start(a, op_cb, NULL);
	fileop_start(b, op_cb, NULL);
	loop_run_until(base, &res.calls, 2, RUN_MAX_MS);
	ck_assert_int_eq(res.calls, 2);
	ck_assert_str_eq(trace(), "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/a;unpause;"
			 "pause;HEAD /maf-sandbox;HEAD " WD ";HEAD " WD "/b;unpause;");
}
END_TEST

/* ---- the removal fd budget ------------------------------------------------------------------ */

static int budget_calls;
static char budget_trace[3][TRACE_MAX];
static intptr_t budget_order[3];     /* which op (its cb arg) ended n-th */

static void budget_cb(struct fileop *op, const struct msb_error *err, void *arg)
{
	(void)op, (void)err, (void)arg;
	ck_assert_int_lt(budget_calls, 3);
	budget_order[budget_calls] = (intptr_t)arg;
	snprintf(budget_trace[budget_calls++], TRACE_MAX, "%s", trace());
}

/* Local removals take their share (4 descriptors) before they open
 * anything; with a budget of one share the second and third wait, first
 * come first served, and each runs once the one before it is done. */
START_TEST(test_removals_wait_for_fds)
{
	struct fileop *ops[3];

	daemon_ctx.plane_local = true;
	daemon_ctx.config->files_removal_fd_budget = 4;
	sc_add((struct fake_reply){ .method = "GET", .path = CPATH "/json",
				    .body = "{\"Id\":\"" ID "\",\"State\":{\"Running\":false,\"Pid\":0}}",
				    .headers = "Content-Type: application/json\r\n", .repeat = true });
	start();
	budget_calls = 0;
	for (int i = 0; i < 3; i++) {
		ops[i] = op_new(FILEOP_RECLAIM);
		fileop_add(ops[i], plan_in(PATHS_OP_RECLAIM, WD "/tree", NULL), NULL, 0);
		fileop_start(ops[i], budget_cb, (void *)(intptr_t)(i + 1));
	}
	/* One holds its share; two wait, having asked nothing. */
	ck_assert_uint_eq(fileop_table_fds_in_use(daemon_ctx.fileops), 4);
	loop_run_until(base, &budget_calls, 3, RUN_MAX_MS);
	ck_assert_int_eq(budget_calls, 3);
	ck_assert_str_eq(budget_trace[0], "inspect;");
	ck_assert_str_eq(budget_trace[1], "inspect;inspect;");
	ck_assert_str_eq(budget_trace[2], "inspect;inspect;inspect;");
	/* First come, first served: the ops end in the order they started. */
	ck_assert_int_eq(budget_order[0], 1);
	ck_assert_int_eq(budget_order[1], 2);
	ck_assert_int_eq(budget_order[2], 3);
	ck_assert_uint_eq(fileop_table_fds_in_use(daemon_ctx.fileops), 0);
	daemon_ctx.plane_local = false;
}
END_TEST

/* A removal still waiting at its deadline: TimeoutError, its place given up. */
START_TEST(test_removal_waiting_times_out)
{
	struct fileop *holder, *waiter;

	daemon_ctx.plane_local = true;
	daemon_ctx.config->files_removal_fd_budget = 4;
	/* The holder's inspect is slow: it holds the only share past the waiter's deadline. */
	sc_add((struct fake_reply){ .method = "GET", .path = CPATH "/json", .delay_ms = 1500,
				    .body = "{\"Id\":\"" ID "\",\"State\":{\"Running\":false,\"Pid\":0}}",
				    .headers = "Content-Type: application/json\r\n", .repeat = true });
	start();
	budget_calls = 0;
	holder = op_new(FILEOP_RECLAIM);
	fileop_add(holder, plan_in(PATHS_OP_RECLAIM, WD "/a", NULL), NULL, 0);
	fileop_start(holder, budget_cb, NULL);
	{
		const struct fileop_params p = { .kind = FILEOP_RECLAIM, .id = ID, .timeout_ms = 300 };

		waiter = fileop_new(&daemon_ctx, &p);
	}
	fileop_add(waiter, plan_in(PATHS_OP_RECLAIM, WD "/b", NULL), NULL, 0);
	started_ms = loop_now_ms();
	fileop_start(waiter, op_cb, NULL);
	loop_run_until(base, &res.calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(res.calls, 1);
	ck_assert_int_eq(res.code, MSB_ERR_TIMEOUT);
	ck_assert_int_eq(budget_calls, 0);            /* the holder is still at it */
	ck_assert_str_eq(res.trace_at_cb, "inspect;");  /* the waiter asked nothing */
	loop_run_until(base, &budget_calls, 1, RUN_MAX_MS);
	ck_assert_int_eq(budget_calls, 1);
	ck_assert_uint_eq(fileop_table_fds_in_use(daemon_ctx.fileops), 0);
	daemon_ctx.plane_local = false;
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------------- */

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *fileop_suite(void)
{
	Suite *s = suite_create("fileop");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_test(tc, test_kind_names);
	tcase_add_loop_test(tc, test_error_from_reason, 0, (int)ELEMENTSOF(reason_rows));
	suite_add_tcase(s, tc);

	tc = fixture_tcase("write");
	tcase_add_test(tc, test_write_sequence);
	tcase_add_loop_test(tc, test_write_cleanup_guest_then_root, 0, 2);
	tcase_add_test(tc, test_write_cleanup_root_guest_once);
	tcase_add_loop_test(tc, test_write_makes_missing_dirs, 0, (int)ELEMENTSOF(mkdir_rows));
	tcase_add_test(tc, test_write_empty);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("walk_cache");
	tcase_add_test(tc, test_walk_cache_shared);
	tcase_add_test(tc, test_walk_cache_absent);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("walk_refusals");
	tcase_add_loop_test(tc, test_walk_refusal, 0, (int)ELEMENTSOF(refusal_rows));
	tcase_add_test(tc, test_bad_stat_header);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("read");
	tcase_add_test(tc, test_read_streams);
	tcase_add_test(tc, test_read_empty);
	tcase_add_test(tc, test_read_over_max_bytes);
	tcase_add_test(tc, test_read_over_max_total);
	tcase_add_test(tc, test_read_over_cap_in_stream);
	tcase_add_test(tc, test_read_more_than_stat_said);
	tcase_add_test(tc, test_read_tar_not_a_file);
	tcase_add_test(tc, test_read_absent_confirmed);
	tcase_add_test(tc, test_read_container_gone);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("per_item_errors");
	tcase_add_test(tc, test_read_per_item_errors);
	tcase_add_test(tc, test_read_per_item_over_cap);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("stat");
	tcase_add_test(tc, test_stat_found);
	tcase_add_test(tc, test_stat_symlink_described);
	tcase_add_loop_test(tc, test_stat_absent, 0, (int)ELEMENTSOF(stat_absent_rows));
	tcase_add_test(tc, test_stat_container_gone);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("engine_fails");
	tcase_add_loop_test(tc, test_put_fails, 0, (int)ELEMENTSOF(put_fail_rows));
	tcase_add_test(tc, test_get_closes_mid_body);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("deadline");
	tcase_add_test(tc, test_deadline_stalled_head);
	tcase_add_test(tc, test_deadline_stalled_get);
	tcase_add_test(tc, test_deadline_during_pause);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("pause_refused");
	tcase_add_loop_test(tc, test_pause_refused, 0, (int)ELEMENTSOF(pause_rows));
	tcase_add_test(tc, test_freeze_queue_full);
	tcase_add_test(tc, test_engine_unreachable);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("abandon");
	tcase_add_test(tc, test_abandon);
	tcase_add_test(tc, test_abandon_then_timeout);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("check");
	tcase_add_test(tc, test_check_never_pauses);
	tcase_add_test(tc, test_check_refuses_without_pause);
	tcase_add_test(tc, test_archive_remove_walks_unfrozen);
	tcase_add_test(tc, test_archive_reclaim_asks_nothing);
	tcase_add_test(tc, test_archive_refuses_a_listing);
	tcase_add_loop_test(tc, test_an_unpinnable_init, 0, (int)(sizeof(unpinnable_rows) / sizeof(unpinnable_rows[0])));
	tcase_add_test(tc, test_a_stopped_sandbox_on_the_local_plane);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("mounts");
	tcase_add_loop_test(tc, test_archive_mount_rule, 0, (int)ELEMENTSOF(mount_rows));
	tcase_add_test(tc, test_archive_mount_rule_init);
	tcase_add_test(tc, test_write_journal_capped);
	tcase_add_test(tc, test_archive_write_over_mount_asks_nothing);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("fd_budget");
	tcase_add_test(tc, test_removals_wait_for_fds);
	tcase_add_test(tc, test_removal_waiting_times_out);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("prepare");
	tcase_add_loop_test(tc, test_prepare, 0, (int)ELEMENTSOF(prepare_rows));
	tcase_add_test(tc, test_prepare_link_refused);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("life_cycle");
	tcase_add_test(tc, test_free_unstarted);
	tcase_add_test(tc, test_two_ops_serialised);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fileop_suite());
	int failed;

	fake_run_dir_create("check-fileop");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
