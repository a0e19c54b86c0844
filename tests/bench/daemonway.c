/* daemonway.c — each operation through maf-sandboxd, with libmaf-sandbox:
 * one connection per client and daemon (one daemon per file plane; the
 * batch sets which, c->plane), one call per operation. What a client has to
 * do with the protocol is inside the timed call: base64 of the content on
 * the way in, its decoding (and a size check) on the way out. */
#include <string.h>

#include "base64.h"
#include "bench.h"
#include "cleanup.h"
#include "msb.h"
#include "xmalloc.h"

static json_t *box_key(const struct client *c, const struct bench_box *box)
{
	return json_pack("{s:s, s:s, s:s}", "scope", c->b->scope, "thread_id", box->thread, "agent_dir",
			 BENCH_AGENT);
}

static json_t *box_spec(const struct client *c)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "kind", BENCH_KIND, "image", c->b->image_ref, "labels",
			 BENCH_RUN_LABEL, c->b->run_id);
}

int daemonway_client_open(struct client *c)
{
	const char *sock = c->b->daemons[c->plane].sock;
	int r;

	c->conn[c->plane] = msb_conn_free(c->conn[c->plane]);
	r = msb_connect(sock, &c->conn[c->plane]);
	if (r < 0) {
		client_fail(c, "connect %s: %s", sock, msb_strerror(r));
		return -1;
	}
	return 0;
}

void daemonway_client_close(struct client *c)
{
	for (int p = 0; p < _PLANE_MAX; p++)
		c->conn[p] = msb_conn_free(c->conn[p]);
}

/* The errors after which the daemon closes the connection (PROTOCOL.md:
 * FrameTooLarge, TooManyConnections, FrameTimeout). */
static bool conn_ending(int code)
{
	return code == 1301 || code == 1302 || code == 1304;
}

/* One call within timeout_ms. MSB_E_TIMEOUT is a hang; any other failure
 * an error (noted on c). A connection left unusable is opened again. */
static enum bench_outcome call(struct client *c, long timeout_ms, const char *method, json_t *params,
			       json_t **ret)
{
	struct msb_conn *conn;
	int r;

	if (!c->conn[c->plane] && daemonway_client_open(c) < 0) {
		json_decref(params);
		return OUT_ERROR;
	}
	conn = c->conn[c->plane];
	msb_set_timeout(conn, (int)timeout_ms);
	r = msb_call(conn, method, params, ret);
	if (r == MSB_OK)
		return OUT_OK;
	if (r == MSB_E_REMOTE)
		client_fail(c, "%s: %s (%d %s)", method, msb_last_error_message(conn), msb_last_error_code(conn),
			    msb_last_error_type(conn) ? msb_last_error_type(conn) : "");
	else
		client_fail(c, "%s: %s", method, msb_strerror(r));
	if ((r != MSB_E_REMOTE && r != MSB_E_INVAL && r != MSB_E_NOMEM) ||
	    (r == MSB_E_REMOTE && conn_ending(msb_last_error_code(conn))))
		c->conn[c->plane] = msb_conn_free(conn);   /* reopened by the next call */
	return r == MSB_E_TIMEOUT ? OUT_HANG : OUT_ERROR;
}

static enum bench_outcome acquire(struct client *c, struct bench_box *box, long timeout_ms, int want_created)
{
	json_auto_t *res = NULL;
	enum bench_outcome o = call(c, timeout_ms, "sandbox.acquire",
				    json_pack("{s:o, s:o}", "key", box_key(c, box), "spec", box_spec(c)), &res);
	const char *id, *name, *plane;

	if (o != OUT_OK)
		return o;
	id = json_string_value(json_object_get(res, "sandbox"));
	name = json_string_value(json_object_get(res, "name"));
	plane = json_string_value(json_object_get(res, "file_plane"));
	if (!id || strlen(id) != 64 || !name) {
		client_fail(c, "sandbox.acquire: no sandbox id in the result");
		return OUT_ERROR;
	}
	/* A row is labelled with its plane: it must be the one that served it. */
	if (!plane || strcmp(plane, plane_to_string(c->plane))) {
		client_fail(c, "sandbox.acquire: the sandbox is served by the %s plane, not the %s plane",
			    plane ? plane : "(unnamed: no file_plane in the result)", plane_to_string(c->plane));
		return OUT_ERROR;
	}
	if (want_created >= 0 && json_is_true(json_object_get(res, "created")) != (want_created > 0)) {
		client_fail(c, "sandbox.acquire: created is %s, expected %s",
			    want_created ? "false" : "true", want_created ? "true" : "false");
		return OUT_ERROR;
	}
	snprintf(box->id, sizeof(box->id), "%s", id);
	snprintf(box->name, sizeof(box->name), "%s", name);
	return OUT_OK;
}

int daemonway_acquire_box(struct client *c, struct bench_box *box)
{
	return acquire(c, box, BENCH_SETUP_TIMEOUT_MS, -1) == OUT_OK ? 0 : -1;
}

static enum bench_outcome write_file(struct client *c, const char *file, size_t bytes, long timeout_ms)
{
	json_auto_t *res = NULL;
	enum bench_outcome o;

	o = call(c, timeout_ms, "files.write",
		 json_pack("{s:s, s:s, s:o}", "sandbox", c->box.id, "path", file, "content_b64",
			   msb_base64_json(c->b->payload, bytes)), &res);
	if (o == OUT_OK && json_integer_value(json_object_get(res, "bytes")) != (json_int_t)bytes) {
		client_fail(c, "files.write: %lld bytes written, expected %zu",
			    (long long)json_integer_value(json_object_get(res, "bytes")), bytes);
		return OUT_ERROR;
	}
	return o;
}

int daemonway_write_file(struct client *c, const char *file, size_t bytes)
{
	return write_file(c, file, bytes, BENCH_SETUP_TIMEOUT_MS) == OUT_OK ? 0 : -1;
}

/* A base64 member of res decodes to exactly want bytes. */
static enum bench_outcome check_b64(struct client *c, const json_t *res, const char *member, size_t want)
{
	const json_t *v = json_object_get(res, member);
	_cleanup_free_ uint8_t *data = NULL;
	size_t len = 0;

	if (!json_is_string(v) ||
	    msb_base64_decode(json_string_value(v), json_string_length(v), &data, &len) < 0) {
		client_fail(c, "%s is not base64", member);
		return OUT_ERROR;
	}
	if (len != want) {
		client_fail(c, "%s holds %zu bytes, expected %zu", member, len, want);
		return OUT_ERROR;
	}
	return OUT_OK;
}

static enum bench_outcome exec(struct client *c, const char *cmd, size_t want_out, long timeout_ms)
{
	json_auto_t *res = NULL;
	enum bench_outcome o;

	o = call(c, timeout_ms, "sandbox.exec",
		 json_pack("{s:s, s:s, s:I}", "sandbox", c->box.id, "command", cmd, "timeout_seconds",
			   (json_int_t)(timeout_ms / 1000)), &res);
	if (o != OUT_OK)
		return o;
	if (json_integer_value(json_object_get(res, "exit_code")) != 0) {
		client_fail(c, "sandbox.exec: exit %lld", (long long)json_integer_value(json_object_get(res, "exit_code")));
		return OUT_ERROR;
	}
	return check_b64(c, res, "stdout_b64", want_out);
}

static enum bench_outcome stat_file(struct client *c, const char *file, size_t want, long timeout_ms)
{
	json_auto_t *res = NULL;
	enum bench_outcome o;

	o = call(c, timeout_ms, "files.stat", json_pack("{s:s, s:s}", "sandbox", c->box.id, "path", file), &res);
	if (o != OUT_OK)
		return o;
	if (json_integer_value(json_object_get(res, "size")) != (json_int_t)want) {
		client_fail(c, "files.stat: not a file of %zu bytes", want);
		return OUT_ERROR;
	}
	return OUT_OK;
}

static enum bench_outcome read_file(struct client *c, const char *file, size_t want, long timeout_ms)
{
	json_auto_t *res = NULL;
	enum bench_outcome o;

	o = call(c, timeout_ms, "files.read", json_pack("{s:s, s:s}", "sandbox", c->box.id, "path", file), &res);
	if (o != OUT_OK)
		return o;
	return check_b64(c, res, "content_b64", want);
}

static enum bench_outcome dispose(struct client *c, const struct bench_box *box, long timeout_ms)
{
	json_auto_t *res = NULL;
	enum bench_outcome o;

	o = call(c, timeout_ms, "sandbox.dispose",
		 json_pack("{s:o, s:s}", "key", box_key(c, box), "kind", BENCH_KIND), &res);
	if (o == OUT_OK && !json_is_null(res)) {
		client_fail(c, "sandbox.dispose: %s", json_string_value(json_object_get(res, "detail")));
		return OUT_ERROR;
	}
	return o;
}

enum bench_outcome daemonway_run(struct client *c, enum bench_op op, unsigned iter)
{
	const struct op_info *oi = op_info(op);
	char file[64];

	switch (op) {
	case OP_ACQUIRE_WARM:
		return acquire(c, &c->box, oi->deadline_ms, 0);
	case OP_ACQUIRE_COLD:
		return acquire(c, &c->cold[iter], oi->deadline_ms, 1);
	case OP_DISPOSE:
		return dispose(c, &c->cold[iter], oi->deadline_ms);
	case OP_EXEC_TRUE:
		return exec(c, "true", 0, oi->deadline_ms);
	case OP_EXEC_1M:
		return exec(c, BENCH_EXEC_OUTPUT_CMD, BENCH_EXEC_OUTPUT_BYTES, oi->deadline_ms);
	case OP_WRITE_4K:
	case OP_WRITE_1M:
	case OP_WRITE_32M:
		return write_file(c, oi->file, oi->bytes, oi->deadline_ms);
	case OP_STAT:
		return stat_file(c, oi->file, oi->bytes, oi->deadline_ms);
	case OP_READ_4K:
	case OP_READ_1M:
	case OP_READ_32M:
		return read_file(c, oi->file, oi->bytes, oi->deadline_ms);
	case OP_REMOVE: {
		json_auto_t *res = NULL;

		snprintf(file, sizeof(file), "rm-%u", iter);
		return call(c, oi->deadline_ms, "files.remove",
			    json_pack("{s:s, s:s}", "sandbox", c->box.id, "path", file), &res);
	}
	default:
		client_fail(c, "no such op");
		return OUT_ERROR;
	}
}

long long daemonway_call_requests(struct client *c)
{
	json_auto_t *res = NULL;
	json_t *v;

	if (call(c, BENCH_SETUP_TIMEOUT_MS, "daemon.status", NULL, &res) != OUT_OK)
		return -1;
	v = json_object_get(json_object_get(res, "engine"), "call_requests");
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}
