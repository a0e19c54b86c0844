#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "jsonfast.h"
#include "jsonrpc.h"
#include "msb-limits.h"
#include "xmalloc.h"

bool jsonrpc_id_is_valid(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id) || json_is_null(id);
}

/* Sets *out to the error reply for code; returns code. data stolen. */
static int fail(json_t **out, int code, json_t *id, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int fail(json_t **out, int code, json_t *id, json_t *data, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		msg = xvasprintf(fmt, ap);
		va_end(ap);
	}
	*out = jsonrpc_reply_error(id, msb_error_object(code, msg, data));
	free(msg);
	return code;
}

static int validate_members(json_t *root, json_t *id, json_t **out)
{
	const char *key;
	json_t *v;

	json_object_foreach(root, key, v) {
		if (strcmp(key, "jsonrpc") && strcmp(key, "id") && strcmp(key, "method") &&
		    strcmp(key, "params"))
			return fail(out, MSB_ERR_INVALID_REQUEST, id,
				    json_pack("{s:s%}", "member", key, (size_t)msb_echo_len(key)),
				    "unknown member \"%.*s\" in the request", msb_echo_len(key), key);
	}
	return 0;
}

static int validate_envelope(json_t *root, struct jsonrpc_request *req, json_t **out)
{
	json_t *version = json_object_get(root, "jsonrpc");
	json_t *id = json_object_get(root, "id");
	json_t *method = json_object_get(root, "method");
	int r;

	if (id && !jsonrpc_id_is_valid(id))
		return fail(out, MSB_ERR_INVALID_REQUEST, NULL, NULL,
			    "\"id\" must be a string, an integer or null");
	if (json_string_length(id) > MSB_ID_MAX_BYTES)
		return fail(out, MSB_ERR_INVALID_REQUEST, NULL, json_pack("{s:I}", "limit", (json_int_t)MSB_ID_MAX_BYTES),
			    "\"id\" is longer than %zu bytes", (size_t)MSB_ID_MAX_BYTES);
	if (!json_is_string(version) || strcmp(json_string_value(version), "2.0"))
		return fail(out, MSB_ERR_INVALID_REQUEST, id, NULL, "\"jsonrpc\" must be \"2.0\"");
	if (!json_is_string(method))
		return fail(out, MSB_ERR_INVALID_REQUEST, id, NULL, "\"method\" must be a string");
	r = validate_members(root, id, out);
	if (r < 0)
		return r;
	req->id = id;
	req->method = json_string_value(method);
	req->params = json_object_get(root, "params");
	return 0;
}

/* Refuses, before jansson allocates anything, a frame with more values,
 * deeper nesting or more structure than a request ever needs: jansson
 * spends tens of bytes on a value (a flat array of zeros, two bytes a
 * value, costs ~20 times its size) and tens of ns on a structure byte.
 * Returns 0, or MSB_ERR_PARSE with *reterr_reply set. */
static int refuse_shape(const char *buf, size_t len, json_t **reterr_reply)
{
	static const struct jsonfast_limits lim = {
		.values = MSB_JSON_MAX_VALUES,
		.depth = MSB_JSON_MAX_DEPTH,
		.structure_bytes = MSB_JSON_MAX_STRUCTURE_BYTES,
	};
	struct jsonfast_shape shape;
	const char *detail;
	char msg[192];
	size_t limit;

	if (jsonfast_scan(buf, len, &lim, &shape) == 0)
		return 0;
	if (shape.depth > lim.depth) {
		limit = lim.depth;
		detail = "arrays and objects nested too deep";
		snprintf(msg, sizeof(msg), "nests arrays and objects more than %zu deep; a request never needs that",
			 limit);
	} else if (shape.values > lim.values) {
		limit = lim.values;
		detail = "too many JSON values";
		snprintf(msg, sizeof(msg), "holds more than %zu JSON values (object keys included); split the call",
			 limit);
	} else {
		limit = lim.structure_bytes;
		detail = "too many bytes outside string values";
		snprintf(msg, sizeof(msg), "holds more than %zu bytes outside its string values (keys, numbers, "
			 "punctuation, whitespace); send compact JSON and split the call", limit);
	}
	return fail(reterr_reply, MSB_ERR_PARSE, NULL,
		    json_pack("{s:s, s:I, s:I}", "detail", detail, "position", (json_int_t)shape.position,
			      "limit", (json_int_t)limit),
		    "the frame %s", msg);
}

/* Refuses a frame holding a NUL byte: JSON has none outside strings, and
 * inside one it must be written \\u0000. jansson reads one as a character
 * or, after a number, drops it (so "1\\0" is 1 to it): either way its
 * positions past it are not byte offsets, so the parse's fast path could
 * not map its errors and would have jansson lex the whole frame. Returns 0,
 * or MSB_ERR_PARSE with *reterr_reply set. */
static int refuse_nul(const char *buf, size_t len, json_t **reterr_reply)
{
	const char *z = memchr(buf, '\0', len);

	if (!z)
		return 0;
	return fail(reterr_reply, MSB_ERR_PARSE, NULL,
		    json_pack("{s:s, s:I}", "detail", "NUL byte in the frame", "position", (json_int_t)(z - buf)),
		    "the frame holds a NUL byte at position %zu; JSON has none (write \\u0000 inside a string)",
		    (size_t)(z - buf));
}

int jsonrpc_request_parse(const char *buf, size_t len, struct jsonrpc_request *ret,
			  json_t **reterr_reply)
{
	struct jsonrpc_request req = { 0 };
	json_error_t jerr;
	int r;

	r = refuse_shape(buf, len, reterr_reply);
	if (r < 0)
		return r;
	r = refuse_nul(buf, len, reterr_reply);
	if (r < 0)
		return r;
	/* JSON_DECODE_ANY: a scalar frame is valid JSON, so it is an invalid
	 * request (-32600), not a parse error (-32700). */
	req.root = jsonfast_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!req.root) {
		r = fail(reterr_reply, MSB_ERR_PARSE, NULL,
			 json_pack("{s:s, s:i}", "detail", jerr.text, "position", jerr.position),
			 NULL);
		goto err;
	}
	if (json_is_array(req.root)) {
		r = fail(reterr_reply, MSB_ERR_INVALID_REQUEST, NULL, NULL, "batch requests are not supported");
		goto err;
	}
	if (!json_is_object(req.root)) {
		r = fail(reterr_reply, MSB_ERR_INVALID_REQUEST, NULL, NULL, "a request must be a JSON object");
		goto err;
	}
	r = validate_envelope(req.root, &req, reterr_reply);
	if (r < 0)
		goto err;
	*ret = req;
	return 0;
err:
	json_decref(req.root);
	return r;
}

void jsonrpc_request_release(struct jsonrpc_request *req)
{
	json_decref(req->root);
	*req = (struct jsonrpc_request){ 0 };
}

json_t *jsonrpc_reply_result(json_t *id, json_t *result)
{
	json_t *r = json_object();

	json_object_set_new(r, "jsonrpc", json_string("2.0"));
	json_object_set(r, "id", id ? id : json_null());
	json_object_set_new(r, "result", result ? result : json_null());
	return r;
}

json_t *jsonrpc_reply_error(json_t *id, json_t *error)
{
	json_t *r = json_object();

	json_object_set_new(r, "jsonrpc", json_string("2.0"));
	json_object_set(r, "id", id ? id : json_null());
	json_object_set_new(r, "error", error);
	return r;
}

json_t *jsonrpc_request_new(json_int_t id, const char *method, json_t *params)
{
	json_t *r = json_object();

	json_object_set_new(r, "jsonrpc", json_string("2.0"));
	json_object_set_new(r, "id", json_integer(id));
	json_object_set_new(r, "method", json_string(method));
	if (params)
		json_object_set_new(r, "params", params);
	return r;
}

static int response_error(json_t *err, struct jsonrpc_response *resp)
{
	json_t *code = json_object_get(err, "code");
	json_t *msg = json_object_get(err, "message");
	json_t *data = json_object_get(err, "data");

	if (!json_is_object(err) || !json_is_integer(code) || !json_is_string(msg))
		return -EPROTO;
	/* A code an int cannot hold would wrap onto another (2^32 - 32600 → -32600). */
	if (json_integer_value(code) < INT_MIN || json_integer_value(code) > INT_MAX)
		return -EPROTO;
	resp->error = err;
	resp->error_code = (int)json_integer_value(code);
	resp->error_message = json_string_value(msg);
	resp->error_type = json_string_value(json_object_get(data, "type"));
	return 0;
}

int jsonrpc_response_parse(const char *buf, size_t len, struct jsonrpc_response *ret)
{
	struct jsonrpc_response resp = { 0 };
	json_t *version, *result, *err;

	resp.root = jsonfast_loadb(buf, len, 0, NULL);
	if (!json_is_object(resp.root))
		goto proto;
	version = json_object_get(resp.root, "jsonrpc");
	resp.id = json_object_get(resp.root, "id");
	result = json_object_get(resp.root, "result");
	err = json_object_get(resp.root, "error");
	if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") ||
	    !resp.id || !jsonrpc_id_is_valid(resp.id) || !result == !err)
		goto proto;
	if (err && response_error(err, &resp) < 0)
		goto proto;
	resp.result = result;
	*ret = resp;
	return 0;
proto:
	json_decref(resp.root);
	return -EPROTO;
}

void jsonrpc_response_release(struct jsonrpc_response *resp)
{
	json_decref(resp->root);
	*resp = (struct jsonrpc_response){ 0 };
}
