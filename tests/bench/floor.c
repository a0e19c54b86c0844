/* floor.c — the floor: for each operation, the Engine API requests
 * maf-sandboxd issues for it on the plane being measured (c->plane), in the
 * same order with the same bodies, sent directly with libcurl — no daemon,
 * no protocol, no event loop. One curl handle per client (keep-alive on the
 * engine socket), reset between requests as the daemon makes a new easy
 * handle per request on one shared connection cache. JSON replies are
 * parsed and stat headers decoded, as the daemon does; nothing else. On the
 * local plane a file call asks the engine nothing: floorlocal.c does its
 * kernel work with the daemon's own code.
 *
 * The sequences (read from domain/{acquire,freeze}.c, domain/files/fileop.c, domain/exec/execrun.c
 * and daemon/m_{files,exec,sandbox}.c, confirmed against the daemon's
 * `engine: req` debug log, `maf-sandboxd -d`, and held by the bench itself:
 * at one client it compares its requests per op with the daemon's
 * engine.call_requests and fails on a difference). WD is /maf-sandbox/work,
 * ID the container id, all under /v<api>:
 *   acquire_warm  archive: HEAD archive?path=/maf-sandbox, HEAD
 *                 …/maf-sandbox/work (the work dir's walk, unfrozen;
 *                 identity and command probes are known from the first
 *                 acquire). local: none (plocal_check of the same chain)
 *   acquire_cold  GET /containers/NAME/json (404), GET /version (the OS
 *                 re-check), GET /images/REF/json, POST
 *                 /containers/create?name=NAME, POST start, GET
 *                 /containers/ID/json; then archive: HEAD /maf-sandbox
 *                 (404: the walk ends); POST pause, HEAD /maf-sandbox
 *                 (404), PUT archive ?path=/&noOverwriteDirNonDir=1
 *                 (maf-sandbox/ root-owned, maf-sandbox/work/ the guest's),
 *                 POST unpause; local: GET /containers/ID/json (the init's
 *                 pid, pinned), plocal_check, plocal_prepare; then the sh
 *                 probe: POST /containers/ID/exec {sh -c 'exit 0',
 *                 WorkingDir /}, POST /exec/EID/start, GET /exec/EID/json
 *   exec_*        (both planes) POST /containers/ID/exec {sh -c CMD, Env
 *                 MSB_EXEC_ID=…, WorkingDir WD}, POST /exec/EID/start (the
 *                 stream, read to its end and demultiplexed), GET
 *                 /exec/EID/json
 *   write_*       archive: POST pause, HEAD /maf-sandbox, HEAD WD, HEAD
 *                 WD/FILE, PUT archive ?path=/&noOverwriteDirNonDir=1 (the
 *                 content under a temporary name in WD, journalled, then
 *                 WD/FILE a hard link to it), POST unpause, then the
 *                 temporary's removal as an exec: POST /containers/ID/exec
 *                 {/bin/rm -f -- WD/TMP, User uid:gid (the guest's, its
 *                 init's credentials: floor_guest_setup; the tar's entries
 *                 are the guest's too), WorkingDir /}, POST
 *                 /exec/EID/start, GET /exec/EID/json
 *   stat          archive: POST pause, HEAD /maf-sandbox, HEAD WD, HEAD
 *                 WD/FILE, POST unpause
 *   read_*        archive: POST pause, HEAD /maf-sandbox, HEAD WD, HEAD
 *                 WD/FILE, GET archive?path=WD/FILE (the tar, read whole),
 *                 POST unpause
 *   remove        archive: HEAD /maf-sandbox, HEAD WD (unfrozen), then rm as
 *                 an exec: POST /containers/ID/exec {rm -f -- WD/FILE,
 *                 WorkingDir /}, POST /exec/EID/start, GET /exec/EID/json
 *   dispose       (both planes) GET /containers/json?all=1&filters=
 *                 {"label":{scope, thread, agent, kind}}, DELETE
 *                 /containers/ID?force=1 per match
 * A pause refused as "already paused" (or runc's "unable to freeze") is
 * asked again every 20 ms for up to 1 s, an unpause answered "is not
 * paused" for up to 5 s, as freeze.c does for Docker 20.10's late pause
 * state (freeze.h FREEZE_STALE_*); an exec
 * inspected while still Running is inspected again. Those requests are
 * counted as retries too (floor_conn_retries). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base64.h"
#include "bench.h"
#include "cleanup.h"
#include "identity.h"
#include "plane_local.h"
#include "xmalloc.h"

#define FLOOR_BASE_URL        "http://api.moby.localhost"
#define FLOOR_CONNECT_MS      10000
#define FLOOR_KEEP_MAX        (4 * BENCH_MIB)   /* a JSON or error body */
#define FLOOR_STAT_MAX        4096
#define FLOOR_STALE_RETRY_MS  20
#define FLOOR_STALE_BUDGET_MS 1000
/* "is not paused" answering the unpause of our own pause: asked again for
 * up to this long (freeze.h FREEZE_STALE_THAW_BUDGET_MS). */
#define FLOOR_STALE_THAW_BUDGET_MS 5000
#define FLOOR_INSPECT_RETRY_MS 20
#define FLOOR_INSPECT_RETRIES 5
#define FLOOR_EXEC_START_BODY "{\"Detach\":false,\"Tty\":false}"
#define FLOOR_CT_JSON         "application/json"
#define FLOOR_CT_TAR          "application/x-tar"

enum sink {
	SINK_KEEP,    /* keep the body (JSON, an error message) */
	SINK_TAR,     /* feed a 200's body to a tar reader */
	SINK_EXEC,    /* demultiplex a 200's body, keep stdout */
};

struct floor_conn {
	const struct bench *b;
	CURL *e;
	char sock[108];
	char api[16];
	uint64_t requests;
	uint64_t retries;           /* of requests, asked again */
	int jfd;                    /* the floor's journal directory (archive writes' temporaries), -1 */
	double deadline;            /* of the current operation (bench_now_ms) */
	/* the reply of the last request */
	long status;
	enum sink sink;
	struct tar_buf body;        /* SINK_KEEP: the body (a tar_buf is just a byte buffer) */
	char stat[FLOOR_STAT_MAX];  /* X-Docker-Container-Path-Stat, "" when absent */
	struct tar_reader *tar;     /* SINK_TAR */
	/* SINK_EXEC: the multiplexed stream */
	uint8_t fhdr[8];
	size_t fhdr_len;
	size_t frame_left;
	unsigned frame_stream;
	struct tar_buf out;         /* stdout */
	size_t err_len;
	char errbuf[CURL_ERROR_SIZE];
};

struct floor_conn *floor_conn_new(const struct bench *b)
{
	struct floor_conn *f = xcalloc(1, sizeof(*f));

	f->b = b;
	f->e = curl_easy_init();
	if (!f->e) {
		free(f);
		return NULL;
	}
	snprintf(f->sock, sizeof(f->sock), "%s", b->engine_sock);
	snprintf(f->api, sizeof(f->api), "%s", b->api[0] ? b->api : "1.41");
	f->jfd = b->floor_journal[0] ? open(b->floor_journal, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	return f;
}

struct floor_conn *floor_conn_free(struct floor_conn *f)
{
	if (!f)
		return NULL;
	curl_easy_cleanup(f->e);
	if (f->jfd >= 0)
		close(f->jfd);
	tar_buf_release(&f->body);
	tar_buf_release(&f->out);
	free(f);
	return NULL;
}

uint64_t floor_conn_requests(const struct floor_conn *f)
{
	return f ? f->requests : 0;
}

uint64_t floor_conn_retries(const struct floor_conn *f)
{
	return f ? f->retries : 0;
}

/* ---- one request ------------------------------------------------------------- */

static void buf_append(struct tar_buf *t, const void *data, size_t len)
{
	if (t->len + len + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;

		while (cap < t->len + len + 1)
			cap *= 2;
		t->data = xrealloc(t->data, cap);
		t->cap = cap;
	}
	memcpy(t->data + t->len, data, len);
	t->len += len;
	t->data[t->len] = '\0';
}

/* The exec stream: 8-byte headers [stream, 0, 0, 0, length (big-endian)]. */
static void demux(struct floor_conn *f, const uint8_t *p, size_t len)
{
	while (len) {
		size_t n;

		if (f->frame_left == 0) {
			n = sizeof(f->fhdr) - f->fhdr_len < len ? sizeof(f->fhdr) - f->fhdr_len : len;
			memcpy(f->fhdr + f->fhdr_len, p, n);
			f->fhdr_len += n;
			if (f->fhdr_len == sizeof(f->fhdr)) {
				f->frame_stream = f->fhdr[0];
				f->frame_left = (size_t)f->fhdr[4] << 24 | (size_t)f->fhdr[5] << 16 |
						(size_t)f->fhdr[6] << 8 | f->fhdr[7];
				f->fhdr_len = 0;
			}
		} else {
			n = f->frame_left < len ? f->frame_left : len;
			if (f->frame_stream == 1)
				buf_append(&f->out, p, n);
			else
				f->err_len += n;
			f->frame_left -= n;
		}
		p += n;
		len -= n;
	}
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *arg)
{
	struct floor_conn *f = arg;
	size_t len = size * nmemb;
	long status = 0;

	curl_easy_getinfo(f->e, CURLINFO_RESPONSE_CODE, &status);
	if (f->sink == SINK_TAR && status == 200 && f->tar) {
		if (!tar_reader_feed(f->tar, data, len))
			return 0;   /* aborts the transfer */
	} else if (f->sink == SINK_EXEC && status == 200) {
		demux(f, (const uint8_t *)data, len);
	} else if (f->body.len + len <= FLOOR_KEEP_MAX) {
		buf_append(&f->body, data, len);
	}
	return len;
}

static size_t header_cb(char *data, size_t size, size_t nmemb, void *arg)
{
	static const char name[] = "X-Docker-Container-Path-Stat:";
	struct floor_conn *f = arg;
	size_t len = size * nmemb, n;
	const char *v;

	if (len <= sizeof(name) - 1 || strncasecmp(data, name, sizeof(name) - 1) != 0)
		return len;
	v = data + sizeof(name) - 1;
	n = len - (sizeof(name) - 1);
	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n < sizeof(f->stat)) {
		memcpy(f->stat, v, n);
		f->stat[n] = '\0';
	}
	return len;
}

struct freq {
	const char *method;
	const char *path;            /* below /v<api> */
	const void *body;
	size_t body_len;
	const char *ctype;           /* NULL: a bare "Content-Type:" */
	enum sink sink;
	struct tar_reader *tar;      /* SINK_TAR */
};

static bool setup_easy(struct floor_conn *f, const struct freq *q, struct curl_slist *hdrs, long timeout_ms)
{
	CURL *e = f->e;
	bool has_body = !strcmp(q->method, "POST") || !strcmp(q->method, "PUT");
	_cleanup_free_ char *url = xasprintf(FLOOR_BASE_URL "/v%s%s", f->api, q->path);
	bool bad = false;

	curl_easy_reset(e);
	bad |= curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, f->sock) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->errbuf) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, f) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, f) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)FLOOR_CONNECT_MS) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK;
	if (!strcmp(q->method, "HEAD"))
		bad |= curl_easy_setopt(e, CURLOPT_NOBODY, 1L) != CURLE_OK;
	else if (!strcmp(q->method, "GET"))
		bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
	if (has_body) {
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body ? q->body : "") != CURLE_OK;
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len) != CURLE_OK;
	}
	if (strcmp(q->method, "POST") && strcmp(q->method, "GET") && strcmp(q->method, "HEAD"))
		bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, q->method) != CURLE_OK;
	return !bad;
}

/* Sends q within the operation's deadline. OUT_OK: the engine answered
 * (f->status, f->body, f->stat); OUT_HANG: the deadline passed; OUT_ERROR:
 * the transfer failed (noted on c). */
static enum bench_outcome freq_run(struct client *c, const struct freq *q)
{
	struct floor_conn *f = c->floor;
	double left = f->deadline - bench_now_ms();
	_cleanup_free_ char *ct = q->ctype ? xasprintf("Content-Type: %s", q->ctype) : xstrdup("Content-Type:");
	struct curl_slist *hdrs = NULL, *h;
	CURLcode rc;

	if (left < 1) {
		client_fail(c, "%s %s: the deadline passed", q->method, q->path);
		return OUT_HANG;
	}
	h = curl_slist_append(NULL, "Expect:");
	hdrs = h ? curl_slist_append(h, ct) : NULL;
	if (!hdrs) {
		curl_slist_free_all(h);
		client_fail(c, "out of memory");
		return OUT_ERROR;
	}
	f->status = 0;
	f->body.len = 0;
	f->stat[0] = '\0';
	f->sink = q->sink;
	f->tar = q->tar;
	f->fhdr_len = f->frame_left = f->err_len = 0;
	f->out.len = 0;
	f->errbuf[0] = '\0';
	if (!setup_easy(f, q, hdrs, (long)left)) {
		curl_slist_free_all(hdrs);
		client_fail(c, "curl setup failed");
		return OUT_ERROR;
	}
	f->requests++;
	rc = curl_easy_perform(f->e);
	curl_slist_free_all(hdrs);
	curl_easy_getinfo(f->e, CURLINFO_RESPONSE_CODE, &f->status);
	if (rc == CURLE_OPERATION_TIMEDOUT) {
		client_fail(c, "%s %s: no answer in time (%s)", q->method, q->path, f->errbuf);
		return OUT_HANG;
	}
	if (rc != CURLE_OK) {
		client_fail(c, "%s %s: %s", q->method, q->path, f->errbuf[0] ? f->errbuf : curl_easy_strerror(rc));
		return OUT_ERROR;
	}
	return OUT_OK;
}

static bool body_says(const struct floor_conn *f, const char *text)
{
	return f->body.data && f->body.len && strstr((const char *)f->body.data, text);
}

/* q's answer must be want; json (may be NULL) gets the parsed body. */
static enum bench_outcome freq_expect(struct client *c, const struct freq *q, long want, json_t **json)
{
	struct floor_conn *f = c->floor;
	enum bench_outcome o = freq_run(c, q);

	if (o != OUT_OK)
		return o;
	if (f->status != want) {
		client_fail(c, "%s %s: HTTP %ld, expected %ld: %.160s", q->method, q->path, f->status, want,
			    f->body.data ? (const char *)f->body.data : "");
		return OUT_ERROR;
	}
	if (json) {
		*json = json_loadb((const char *)f->body.data, f->body.len, 0, NULL);
		if (!*json) {
			client_fail(c, "%s %s: the reply is not JSON", q->method, q->path);
			return OUT_ERROR;
		}
	}
	return OUT_OK;
}

/* ---- building blocks --------------------------------------------------------- */

static char *archive_path(const char *id, const char *guest_path)
{
	_cleanup_free_ char *esc = curl_easy_escape(NULL, guest_path, 0);

	return xasprintf("/containers/%s/archive?path=%s", id, esc ? esc : "");
}

static enum bench_outcome floor_pause(struct client *c, const char *id)
{
	_cleanup_free_ char *path = xasprintf("/containers/%s/pause", id);
	const struct freq q = { "POST", path, NULL, 0, NULL, SINK_KEEP, NULL };
	double start = bench_now_ms();

	for (;;) {
		enum bench_outcome o = freq_run(c, &q);

		if (o != OUT_OK)
			return o;
		if (c->floor->status / 100 == 2)
			return OUT_OK;
		if (c->floor->status == 409 && (body_says(c->floor, "already paused") ||
						body_says(c->floor, "unable to freeze")) &&
		    bench_now_ms() - start < FLOOR_STALE_BUDGET_MS) {
			usleep(FLOOR_STALE_RETRY_MS * 1000);
			c->floor->retries++;
			continue;
		}
		client_fail(c, "pause: HTTP %ld: %.160s", c->floor->status,
			    c->floor->body.data ? (const char *)c->floor->body.data : "");
		return OUT_ERROR;
	}
}

static enum bench_outcome floor_unpause(struct client *c, const char *id)
{
	_cleanup_free_ char *path = xasprintf("/containers/%s/unpause", id);
	const struct freq q = { "POST", path, NULL, 0, NULL, SINK_KEEP, NULL };
	double start = bench_now_ms();

	for (;;) {
		enum bench_outcome o = freq_run(c, &q);

		if (o != OUT_OK)
			return o;
		if (c->floor->status / 100 == 2 || c->floor->status == 404)
			return OUT_OK;
		if (body_says(c->floor, "is not paused")) {
			if (bench_now_ms() - start >= FLOOR_STALE_THAW_BUDGET_MS)
				return OUT_OK;   /* thawed after all */
			usleep(FLOOR_STALE_RETRY_MS * 1000);
			c->floor->retries++;
			continue;
		}
		client_fail(c, "unpause: HTTP %ld", c->floor->status);
		return OUT_ERROR;
	}
}

/* The Go FileMode's directory bit, from a decoded stat header. */
#define GO_MODE_DIR     (1ULL << 31)
#define GO_MODE_SYMLINK (1ULL << 27)

/* The stat header as the daemon reads it: base64, then a JSON object. */
static bool stat_decode(struct client *c, json_int_t *ret_mode, json_int_t *ret_size)
{
	struct floor_conn *f = c->floor;
	_cleanup_free_ uint8_t *raw = NULL;
	json_auto_t *st = NULL;
	size_t len;

	if (!f->stat[0] || msb_base64_decode(f->stat, strlen(f->stat), &raw, &len) < 0)
		return false;
	st = json_loadb((const char *)raw, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(st) || !json_is_integer(json_object_get(st, "mode")))
		return false;
	*ret_mode = json_integer_value(json_object_get(st, "mode"));
	*ret_size = json_integer_value(json_object_get(st, "size"));
	return true;
}

/* HEAD of one guest path: 1 present (mode, size), 0 absent, <0 failure (outcome negated). */
static int floor_stat(struct client *c, const char *id, const char *guest_path, json_int_t *ret_mode,
		      json_int_t *ret_size)
{
	_cleanup_free_ char *path = archive_path(id, guest_path);
	const struct freq q = { "HEAD", path, NULL, 0, NULL, SINK_KEEP, NULL };
	enum bench_outcome o = freq_run(c, &q);

	if (o != OUT_OK)
		return -(int)o;
	if (c->floor->status == 404)
		return 0;
	if (c->floor->status != 200 || !stat_decode(c, ret_mode, ret_size)) {
		client_fail(c, "HEAD %s: HTTP %ld, or no usable stat header", guest_path, c->floor->status);
		return -(int)OUT_ERROR;
	}
	return 1;
}

/* The walk of the work dir (/maf-sandbox, WD): each a real directory. */
static enum bench_outcome floor_walk(struct client *c, const char *id)
{
	static const char *const walk[] = { "/maf-sandbox", BENCH_WORK_DIR };

	for (size_t i = 0; i < ELEMENTSOF(walk); i++) {
		json_int_t mode = 0, size = 0;
		int r = floor_stat(c, id, walk[i], &mode, &size);

		if (r < 0)
			return (enum bench_outcome)-r;
		if (r == 0 || !(mode & (json_int_t)GO_MODE_DIR) || (mode & (json_int_t)GO_MODE_SYMLINK)) {
			client_fail(c, "%s is not a real directory", walk[i]);
			return OUT_ERROR;
		}
	}
	return OUT_OK;
}

/* One exec run: create, start (stream read whole), inspect (again while Running). */
static enum bench_outcome floor_exec(struct client *c, const char *id, json_t *cmd, bool mark,
				     const char *wd, const char *user, size_t want_out)
{
	struct floor_conn *f = c->floor;
	_cleanup_free_ char *cpath = xasprintf("/containers/%s/exec", id), *body = NULL;
	_cleanup_free_ char *spath = NULL, *ipath = NULL;
	json_auto_t *cfg = json_pack("{s:b, s:b, s:b, s:b, s:o}", "AttachStdin", 0, "AttachStdout", 1,
				     "AttachStderr", 1, "Tty", 0, "Cmd", cmd);
	json_auto_t *created = NULL;
	enum bench_outcome o;
	const char *eid;

	if (mark) {
		char m[64];

		bench_exec_mark(m);
		json_object_set_new(cfg, "Env", json_pack("[s]", m));
	}
	json_object_set_new(cfg, "WorkingDir", json_string(wd));
	if (user)
		json_object_set_new(cfg, "User", json_string(user));
	body = json_dumps(cfg, JSON_COMPACT);
	{
		const struct freq q = { "POST", cpath, body, strlen(body), FLOOR_CT_JSON, SINK_KEEP, NULL };

		if ((o = freq_expect(c, &q, 201, &created)) != OUT_OK)
			return o;
	}
	eid = json_string_value(json_object_get(created, "Id"));
	if (!eid) {
		client_fail(c, "exec create: no Id");
		return OUT_ERROR;
	}
	spath = xasprintf("/exec/%s/start", eid);
	{
		const struct freq q = { "POST", spath, FLOOR_EXEC_START_BODY, strlen(FLOOR_EXEC_START_BODY),
					FLOOR_CT_JSON, SINK_EXEC, NULL };

		if ((o = freq_expect(c, &q, 200, NULL)) != OUT_OK)
			return o;
	}
	if (f->out.len != want_out) {
		client_fail(c, "exec: %zu bytes of stdout, expected %zu", f->out.len, want_out);
		return OUT_ERROR;
	}
	ipath = xasprintf("/exec/%s/json", eid);
	for (unsigned i = 0;; i++) {
		const struct freq q = { "GET", ipath, NULL, 0, NULL, SINK_KEEP, NULL };
		json_auto_t *ins = NULL;

		if ((o = freq_expect(c, &q, 200, &ins)) != OUT_OK)
			return o;
		if (json_is_true(json_object_get(ins, "Running")) && i < FLOOR_INSPECT_RETRIES) {
			usleep(FLOOR_INSPECT_RETRY_MS * 1000);
			f->retries++;
			continue;
		}
		if (json_integer_value(json_object_get(ins, "ExitCode")) != 0) {
			client_fail(c, "exec: exit %lld", (long long)json_integer_value(json_object_get(ins, "ExitCode")));
			return OUT_ERROR;
		}
		return OUT_OK;
	}
}

/* ---- the operations ------------------------------------------------------------ */

static enum bench_outcome op_file(struct client *c, enum bench_op op)
{
	const struct op_info *oi = op_info(op);
	const char *id = c->box.id;
	char gpath[128];
	json_int_t mode = 0, size = 0;
	enum bench_outcome o, thaw;
	char tmp_path[128] = "";
	int r, jfd = -1;

	bench_guest_path(oi->file, gpath, sizeof(gpath));
	if ((o = floor_pause(c, id)) != OUT_OK)
		return o;
	o = floor_walk(c, id);
	if (o == OUT_OK) {
		r = floor_stat(c, id, gpath, &mode, &size);
		if (r < 0)
			o = (enum bench_outcome)-r;
		else if (op != OP_WRITE_4K && op != OP_WRITE_1M && op != OP_WRITE_32M &&
			 (r == 0 || (size_t)size != oi->bytes))
			o = (client_fail(c, "%s: not a file of %zu bytes", gpath, oi->bytes), OUT_ERROR);
	}
	if (o == OUT_OK && (op == OP_WRITE_4K || op == OP_WRITE_1M || op == OP_WRITE_32M)) {
		struct tar_buf t = { 0 };
		_cleanup_free_ char *path = xasprintf("/containers/%s/archive?path=%%2F&noOverwriteDirNonDir=1", id);
		const struct plocal_journal j = { c->floor->jfd, id, NULL };
		char tmp[PLOCAL_TEMP_NAME_MAX];

		/* The content under a temporary name (journalled first), the
		 * final name a hard link to it, as fop_build_write makes it. */
		plocal_temp_name(tmp, sizeof(tmp));
		snprintf(tmp_path, sizeof(tmp_path), "%s/%s", BENCH_WORK_DIR, tmp);
		jfd = j.dirfd >= 0 ? plocal_journal_begin(&j, BENCH_WORK_DIR, tmp) : -1;
		tar_add_file(&t, tmp_path + 1, c->b->payload, oi->bytes, 0644, c->guest_uid, c->guest_gid);
		tar_add_hardlink(&t, gpath + 1, tmp_path + 1, 0644, c->guest_uid, c->guest_gid);
		tar_finish(&t);
		{
			const struct freq q = { "PUT", path, t.data, t.len, FLOOR_CT_TAR, SINK_KEEP, NULL };

			o = freq_expect(c, &q, 200, NULL);
		}
		tar_buf_release(&t);
	} else if (o == OUT_OK && (op == OP_READ_4K || op == OP_READ_1M || op == OP_READ_32M)) {
		_cleanup_free_ char *path = archive_path(id, gpath);
		struct tar_reader tr = { .want_body = true };
		const struct freq q = { "GET", path, NULL, 0, NULL, SINK_TAR, &tr };

		o = freq_expect(c, &q, 200, NULL);
		if (o == OUT_OK && (!tar_reader_done(&tr) || tr.out_len != oi->bytes))
			o = (client_fail(c, "read %s: %zu bytes, expected %zu", gpath, tr.out_len, oi->bytes), OUT_ERROR);
		tar_reader_release(&tr);
	}
	thaw = floor_unpause(c, id);
	if (o == OUT_OK)
		o = thaw;
	if (tmp_path[0] && o == OUT_OK) {
		/* The temporary's removal, as the guest (its uid:gid: floor_guest_setup), after the thaw. */
		char guest[32];

		snprintf(guest, sizeof(guest), "%u:%u", c->guest_uid, c->guest_gid);
		o = floor_exec(c, id, json_pack("[s, s, s, s]", "/bin/rm", "-f", "--", tmp_path), false, "/", guest, 0);
	}
	if (jfd >= 0) {
		const struct plocal_journal j = { c->floor->jfd, id, NULL };

		plocal_journal_end(&j, strrchr(tmp_path, '/') + 1, jfd);
	}
	return o;
}

static json_t *box_labels(const struct client *c, const struct bench_box *box)
{
	const struct bench *b = c->b;
	char raw[256];

	snprintf(raw, sizeof(raw), "[\"%s\",\"%s\",\"%s\",\"\",\"%s\"]", b->scope, box->thread, BENCH_AGENT, BENCH_KIND);
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "maf-sandbox.scope", b->scope,
			 "maf-sandbox.thread", box->thread, "maf-sandbox.agent", BENCH_AGENT,
			 "maf-sandbox.kind", BENCH_KIND, BENCH_RUN_LABEL_FULL, b->run_id,
			 "maf-sandbox.work-dir.v1", BENCH_WORK_DIR, "maf-sandbox.owner", "0",
			 "maf-sandbox.key", raw);
}

/* The create body acquire.c sends (closed egress, the default config). */
static char *create_body(const struct client *c, const struct bench_box *box)
{
	json_auto_t *cfg = json_pack("{s:s, s:[s, s], s:o, s:b, s:b, s:{s:s, s:[s], s:i, s:b, s:[s]}}",
		"Image", c->b->image_ref, "Cmd", "sleep", "infinity", "Labels", box_labels(c, box),
		"Tty", 0, "OpenStdin", 0, "HostConfig", "NetworkMode", "none", "SecurityOpt",
		"no-new-privileges", "PidsLimit", 512, "Init", 1, "CapDrop", "ALL");

	return json_dumps(cfg, JSON_COMPACT);
}

/* The frozen half of a cold acquire's work dir: the walk finds
 * /maf-sandbox absent, one tar makes it and WD. */
static enum bench_outcome floor_make_workdir(struct client *c, const char *id)
{
	_cleanup_free_ char *path = xasprintf("/containers/%s/archive?path=%%2F&noOverwriteDirNonDir=1", id);
	struct tar_buf t = { 0 };
	json_int_t mode, size;
	enum bench_outcome o, thaw;
	int r;

	if ((o = floor_pause(c, id)) != OUT_OK)
		return o;
	r = floor_stat(c, id, "/maf-sandbox", &mode, &size);
	o = r < 0 ? (enum bench_outcome)-r : OUT_OK;
	if (o == OUT_OK) {
		struct freq q = { "PUT", path, NULL, 0, FLOOR_CT_TAR, SINK_KEEP, NULL };

		tar_add_dir(&t, "maf-sandbox", 0755, 0, 0);
		tar_add_dir(&t, "maf-sandbox/work", 0755, 0, 0);
		tar_finish(&t);
		q.body = t.data;
		q.body_len = t.len;
		o = freq_expect(c, &q, 200, NULL);
		tar_buf_release(&t);
	}
	thaw = floor_unpause(c, id);
	return o != OUT_OK ? o : thaw;
}

/* Inspect by name (absent), the OS re-check, the image, create, start,
 * inspect: the container's id into box. */
static enum bench_outcome floor_create(struct client *c, struct bench_box *box)
{
	_cleanup_free_ char *p_inspect = xasprintf("/containers/%s/json", box->name);
	_cleanup_free_ char *esc = curl_easy_escape(NULL, c->b->image_ref, 0);
	_cleanup_free_ char *p_image = xasprintf("/images/%s/json", esc);
	_cleanup_free_ char *p_create = xasprintf("/containers/create?name=%s", box->name);
	_cleanup_free_ char *body = create_body(c, box), *p_start = NULL, *p_final = NULL;
	json_auto_t *v = NULL, *img = NULL, *created = NULL, *final = NULL;
	const struct freq q1 = { "GET", p_inspect, NULL, 0, NULL, SINK_KEEP, NULL };
	const struct freq q2 = { "GET", "/version", NULL, 0, NULL, SINK_KEEP, NULL };
	const struct freq q3 = { "GET", p_image, NULL, 0, NULL, SINK_KEEP, NULL };
	const struct freq q4 = { "POST", p_create, body, strlen(body), FLOOR_CT_JSON, SINK_KEEP, NULL };
	enum bench_outcome o;
	const char *id;

	if ((o = freq_expect(c, &q1, 404, NULL)) != OUT_OK || (o = freq_expect(c, &q2, 200, &v)) != OUT_OK ||
	    (o = freq_expect(c, &q3, 200, &img)) != OUT_OK || (o = freq_expect(c, &q4, 201, &created)) != OUT_OK)
		return o;
	id = json_string_value(json_object_get(created, "Id"));
	if (!id || strlen(id) != 64)
		return (client_fail(c, "create: no Id"), OUT_ERROR);
	snprintf(box->id, sizeof(box->id), "%s", id);
	p_start = xasprintf("/containers/%s/start", box->id);
	p_final = xasprintf("/containers/%s/json", box->id);
	{
		const struct freq q5 = { "POST", p_start, NULL, 0, NULL, SINK_KEEP, NULL };
		const struct freq q6 = { "GET", p_final, NULL, 0, NULL, SINK_KEEP, NULL };

		if ((o = freq_expect(c, &q5, 204, NULL)) != OUT_OK)
			return o;
		return freq_expect(c, &q6, 200, &final);
	}
}

/* GET /containers/ID/json: the init's pid and Config.User (user, n bytes). */
static enum bench_outcome floor_inspect_init(struct client *c, const char *id, pid_t *ret_pid, char *user, size_t n)
{
	_cleanup_free_ char *path = xasprintf("/containers/%s/json", id);
	const struct freq q = { "GET", path, NULL, 0, NULL, SINK_KEEP, NULL };
	json_auto_t *ins = NULL;
	enum bench_outcome o = freq_expect(c, &q, 200, &ins);
	const char *u;
	json_int_t pid;

	if (o != OUT_OK)
		return o;
	pid = json_integer_value(json_object_get(json_object_get(ins, "State"), "Pid"));
	if (pid <= 0)
		return (client_fail(c, "%.12s: no running init", id), OUT_ERROR);
	*ret_pid = (pid_t)pid;
	u = json_string_value(json_object_get(json_object_get(ins, "Config"), "User"));
	snprintf(user, n, "%s", u ? u : "");
	return OUT_OK;
}

/* The local plane's half of a cold acquire: the new container's init
 * looked up and pinned, the work dir checked (missing), then made. */
static enum bench_outcome cold_local_workdir(struct client *c, const struct bench_box *box)
{
	char user[64], err[BENCH_ERROR_TEXT];
	struct floorlocal *l;
	bool missing = false;
	pid_t pid = 0;
	enum bench_outcome o = floor_inspect_init(c, box->id, &pid, user, sizeof(user));
	int r;

	if (o != OUT_OK)
		return o;
	l = floorlocal_new(c->b, box->id, pid, user, err, sizeof(err));
	if (!l)
		return (client_fail(c, "%s", err), OUT_ERROR);
	r = floorlocal_workdir(c, floorlocal_pin(l), NULL, false, &missing);
	if (r == 0 && !missing)
		r = (client_fail(c, "%s exists already", BENCH_WORK_DIR), -1);
	if (r == 0)
		r = floorlocal_workdir(c, floorlocal_pin(l), floorlocal_cred(l), true, NULL);
	floorlocal_free(l);
	return r == 0 ? OUT_OK : OUT_ERROR;
}

int floor_local_setup(struct client *c)
{
	char user[64], err[BENCH_ERROR_TEXT];
	pid_t pid = 0;

	if (!c->floor && !(c->floor = floor_conn_new(c->b)))
		return (client_fail(c, "curl_easy_init failed"), -1);
	c->floor->deadline = bench_now_ms() + BENCH_SETUP_TIMEOUT_MS;
	c->flocal = floorlocal_free(c->flocal);
	if (floor_inspect_init(c, c->box.id, &pid, user, sizeof(user)) != OUT_OK)
		return -1;
	c->flocal = floorlocal_new(c->b, c->box.id, pid, user, err, sizeof(err));
	if (!c->flocal)
		return (client_fail(c, "%s", err), -1);
	return 0;
}

/* The guest's uid:gid, as the daemon has it on a local engine (guest.c:
 * its init's credentials, /proc/<pid>/status): the owner of what a write
 * puts and the user of its temporary's removal. Untimed. */
int floor_guest_setup(struct client *c)
{
	_cleanup_free_ char *status = NULL;
	char user[64], buf[8192];
	pid_t pid = 0;
	uid_t uid;
	gid_t gid;
	ssize_t n;
	int fd;

	if (!c->floor && !(c->floor = floor_conn_new(c->b)))
		return (client_fail(c, "curl_easy_init failed"), -1);
	c->floor->deadline = bench_now_ms() + BENCH_SETUP_TIMEOUT_MS;
	if (floor_inspect_init(c, c->box.id, &pid, user, sizeof(user)) != OUT_OK)
		return -1;
	status = xasprintf("/proc/%ld/status", (long)pid);
	fd = open(status, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return (client_fail(c, "the floor: %s: %s", status, strerror(errno)), -1);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0 || identity_parse_proc_status(buf, (size_t)n, &uid, &gid) < 0)
		return (client_fail(c, "the floor: no Uid/Gid in %s", status), -1);
	c->guest_uid = (unsigned)uid;
	c->guest_gid = (unsigned)gid;
	return 0;
}

static enum bench_outcome op_cold(struct client *c, struct bench_box *box)
{
	json_int_t mode, size;
	enum bench_outcome o;
	int r;

	if ((o = floor_create(c, box)) != OUT_OK)
		return o;
	if (c->plane == PLANE_LOCAL) {
		if ((o = cold_local_workdir(c, box)) != OUT_OK)
			return o;
		return floor_exec(c, box->id, json_pack("[s, s, s]", "sh", "-c", "exit 0"), false, "/", NULL, 0);
	}
	/* The unfrozen walk finds /maf-sandbox absent; the frozen one makes it. */
	if ((r = floor_stat(c, box->id, "/maf-sandbox", &mode, &size)) != 0)
		return r < 0 ? (enum bench_outcome)-r : (client_fail(c, "/maf-sandbox exists already"), OUT_ERROR);
	if ((o = floor_make_workdir(c, box->id)) != OUT_OK)
		return o;
	/* The sh probe (EXEC is in the default requires). */
	return floor_exec(c, box->id, json_pack("[s, s, s]", "sh", "-c", "exit 0"), false, "/", NULL, 0);
}

static enum bench_outcome op_dispose(struct client *c, const struct bench_box *box)
{
	const struct bench *b = c->b;
	json_auto_t *filters = json_object();
	_cleanup_free_ char *f_scope = xasprintf("maf-sandbox.scope=%s", b->scope);
	_cleanup_free_ char *f_thread = xasprintf("maf-sandbox.thread=%s", box->thread);
	_cleanup_free_ char *f_agent = xasprintf("maf-sandbox.agent=%s", BENCH_AGENT);
	_cleanup_free_ char *f_kind = xasprintf("maf-sandbox.kind=%s", BENCH_KIND);
	_cleanup_free_ char *fj = NULL, *esc = NULL, *path = NULL;
	json_auto_t *list = NULL;
	json_t *label = json_object(), *item;
	enum bench_outcome o;
	size_t i;

	json_object_set_new(label, f_scope, json_true());
	json_object_set_new(label, f_thread, json_true());
	json_object_set_new(label, f_agent, json_true());
	json_object_set_new(label, f_kind, json_true());
	json_object_set_new(filters, "label", label);
	fj = json_dumps(filters, JSON_COMPACT);
	esc = curl_easy_escape(NULL, fj, 0);
	path = xasprintf("/containers/json?all=1&filters=%s", esc);
	{
		const struct freq q = { "GET", path, NULL, 0, NULL, SINK_KEEP, NULL };

		if ((o = freq_expect(c, &q, 200, &list)) != OUT_OK)
			return o;
	}
	if (json_array_size(list) != 1)
		return (client_fail(c, "dispose: %zu containers listed, expected 1", json_array_size(list)), OUT_ERROR);
	json_array_foreach(list, i, item) {
		_cleanup_free_ char *dpath = xasprintf("/containers/%s?force=1",
						       json_string_value(json_object_get(item, "Id")));
		const struct freq q = { "DELETE", dpath, NULL, 0, NULL, SINK_KEEP, NULL };

		if ((o = freq_expect(c, &q, 204, NULL)) != OUT_OK)
			return o;
	}
	return OUT_OK;
}

enum bench_outcome floor_run(struct client *c, enum bench_op op, unsigned iter)
{
	const struct op_info *oi = op_info(op);
	char gpath[128];

	if (!c->floor && !(c->floor = floor_conn_new(c->b)))
		return (client_fail(c, "curl_easy_init failed"), OUT_ERROR);
	c->floor->deadline = bench_now_ms() + (double)oi->deadline_ms;
	if (c->plane == PLANE_LOCAL && (op == OP_ACQUIRE_WARM || oi->file_op))
		return floorlocal_run(c, op, iter);
	switch (op) {
	case OP_ACQUIRE_WARM:
		return floor_walk(c, c->box.id);
	case OP_ACQUIRE_COLD:
		return op_cold(c, &c->cold[iter]);
	case OP_DISPOSE:
		return op_dispose(c, &c->cold[iter]);
	case OP_EXEC_TRUE:
		return floor_exec(c, c->box.id, json_pack("[s, s, s]", "sh", "-c", "true"), true, BENCH_WORK_DIR, NULL, 0);
	case OP_EXEC_1M:
		return floor_exec(c, c->box.id, json_pack("[s, s, s]", "sh", "-c", BENCH_EXEC_OUTPUT_CMD), true,
				  BENCH_WORK_DIR, NULL, BENCH_EXEC_OUTPUT_BYTES);
	case OP_REMOVE: {
		char file[32];
		enum bench_outcome o;

		snprintf(file, sizeof(file), "rm-%u", iter);
		bench_guest_path(file, gpath, sizeof(gpath));
		if ((o = floor_walk(c, c->box.id)) != OUT_OK)
			return o;
		return floor_exec(c, c->box.id, json_pack("[s, s, s, s]", "rm", "-f", "--", gpath), false, "/", NULL, 0);
	}
	default:
		return op_file(c, op);
	}
}

/* ---- outside the timed calls ---------------------------------------------------- */

int floor_engine_version(const struct bench *b, struct bench_machine *m)
{
	struct client c = { .b = (struct bench *)b };
	const struct freq q = { "GET", "/version", NULL, 0, NULL, SINK_KEEP, NULL };
	json_auto_t *v = NULL;
	int r = -1;

	c.floor = floor_conn_new(b);
	if (!c.floor)
		return -1;
	c.floor->deadline = bench_now_ms() + BENCH_SETUP_TIMEOUT_MS;
	if (freq_expect(&c, &q, 200, &v) == OUT_OK) {
		snprintf(m->engine_version, sizeof(m->engine_version), "%s",
			 json_string_value(json_object_get(v, "Version")) ? json_string_value(json_object_get(v, "Version")) : "?");
		snprintf(m->engine_api, sizeof(m->engine_api), "%s",
			 json_string_value(json_object_get(v, "ApiVersion")) ? json_string_value(json_object_get(v, "ApiVersion")) : "?");
		r = 0;
	}
	floor_conn_free(c.floor);
	return r;
}

int floor_cleanup(const struct bench *b)
{
	struct client c = { .b = (struct bench *)b };
	_cleanup_free_ char *fj = xasprintf("{\"label\":{\"%s=%s\":true}}", BENCH_RUN_LABEL_FULL, b->run_id);
	_cleanup_free_ char *esc = NULL, *path = NULL;
	json_auto_t *list = NULL;
	json_t *item;
	size_t i;
	int n = 0;

	c.floor = floor_conn_new(b);
	if (!c.floor)
		return -1;
	c.floor->deadline = bench_now_ms() + BENCH_SETUP_TIMEOUT_MS;
	esc = curl_easy_escape(NULL, fj, 0);
	path = xasprintf("/containers/json?all=1&filters=%s", esc);
	{
		const struct freq q = { "GET", path, NULL, 0, NULL, SINK_KEEP, NULL };

		if (freq_expect(&c, &q, 200, &list) != OUT_OK)
			n = -1;
	}
	json_array_foreach(list, i, item) {
		_cleanup_free_ char *dpath = xasprintf("/containers/%s?force=1",
						       json_string_value(json_object_get(item, "Id")));
		const struct freq q = { "DELETE", dpath, NULL, 0, NULL, SINK_KEEP, NULL };

		if (freq_expect(&c, &q, 204, NULL) == OUT_OK)
			n++;
	}
	if (b->image_built) {
		_cleanup_free_ char *iesc = curl_easy_escape(NULL, b->image_ref, 0);
		_cleanup_free_ char *ipath = xasprintf("/images/%s?force=1", iesc);
		const struct freq q = { "DELETE", ipath, NULL, 0, NULL, SINK_KEEP, NULL };

		(void)freq_run(&c, &q);
	}
	floor_conn_free(c.floor);
	return n;
}
