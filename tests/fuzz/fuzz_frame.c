/* fuzz_frame.c — libFuzzer target for the wire's framing and envelope
 * (proto/frame.c, proto/jsonrpc.c). The input is a byte stream as a peer
 * would send it:
 *   - a reference splitter (LF-terminated lines, one CR dropped, blank
 *     lines skipped, a line or an unterminated tail over the limit is an
 *     error) says what the stream holds;
 *   - struct frame_buf is fed the stream in small chunks (cut points from
 *     the input), draining frames after each append: it must hand out the
 *     reference's frames in order, each NUL-terminated, LF-free and within
 *     the limit, fail exactly when the reference does, and account for the
 *     tail (pending, in_frame, drop_partial);
 *   - each frame goes through jsonrpc_request_parse (the daemon) and
 *     jsonrpc_response_parse (the clients): a request's method is a
 *     NUL-free string and its id valid; its reply, and the error reply of a
 *     refused request, encode as one frame that the client's parser reads
 *     back (same id, same code); no frame is both a request and a response;
 *     a response re-encoded parses the same.
 * The limit is picked by the first byte: 32, 256, 4096 or the wire's
 * MSB_FRAME_MAX_BYTES. A broken invariant aborts. Built by tests/fuzz/run.sh
 * with clang, and by meson with replay_main.c as the unit test 'fuzz_frame'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "errors.h"
#include "frame.h"
#include "fuzz.h"
#include "jsonrpc.h"
#include "msb-limits.h"

/* Frames the reference splitter keeps track of, at most. */
#define FUZZ_FRAMES_MAX 4096
/* Frames of one input that go through the envelope parsers (each costs a
 * few allocations and encodings): an input of many tiny lines stays fast. */
#define FUZZ_PARSED_FRAMES_MAX 16

static const size_t frame_limits[] = { 32, 256, 4096, MSB_FRAME_MAX_BYTES };

struct ref_frame {
	size_t off, len;
};

struct reference {
	struct ref_frame frames[FUZZ_FRAMES_MAX];
	size_t n;
	bool error;        /* a line, or the unterminated tail, is over the limit */
	size_t tail;       /* bytes after the last LF (no error) */
};

static bool blank(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static void reference_split(const uint8_t *data, size_t size, size_t max, struct reference *ref)
{
	size_t pos = 0;

	ref->n = 0;
	ref->error = false;
	ref->tail = 0;
	while (pos < size) {
		const uint8_t *lf = memchr(data + pos, '\n', size - pos);
		size_t n;

		if (!lf) {
			ref->tail = size - pos;
			ref->error = ref->tail > max;
			return;
		}
		n = (size_t)(lf - (data + pos));
		if (n > max) {
			ref->error = true;
			return;
		}
		if (n > 0 && data[pos + n - 1] == '\r')
			n--;
		if (!blank(data + pos, n) && ref->n < FUZZ_FRAMES_MAX)
			ref->frames[ref->n++] = (struct ref_frame){ pos, n };
		pos = (size_t)(lf - data) + 1;
	}
}

/* A reply as the daemon sends it: one frame the client's parser accepts. */
static void check_reply(json_t *reply, const json_t *want_id, int want_code)
{
	struct jsonrpc_response resp;
	size_t len = 0;
	char *s;

	require(reply != NULL, "no reply");
	s = frame_encode(reply, &len);
	require(s != NULL && len > 1, "a reply does not encode");
	require(s[len - 1] == '\n' && memchr(s, '\n', len - 1) == NULL, "a reply is not one frame");
	require(jsonrpc_response_parse(s, len - 1, &resp) == 0, "the client refuses a reply");
	require(json_equal(resp.id, want_id ? want_id : json_null()), "a reply's id changed");
	if (want_code) {
		require(resp.error && !resp.result, "an error reply without its error");
		require(resp.error_code == want_code, "an error reply's code changed");
		require(resp.error_message != NULL, "an error reply without a message");
	} else {
		require(resp.result && !resp.error, "a result reply without its result");
	}
	jsonrpc_response_release(&resp);
	free(s);
	json_decref(reply);
}

static bool fuzz_request(const char *line, size_t len)
{
	struct jsonrpc_request req;
	json_t *err = NULL;
	const char *key;
	json_t *v;
	int r;

	r = jsonrpc_request_parse(line, len, &req, &err);
	if (r < 0) {
		require(r == MSB_ERR_PARSE || r == MSB_ERR_INVALID_REQUEST, "an unexpected refusal code");
		require(json_is_object(err), "a refusal without its reply");
		check_reply(err, json_object_get(err, "id"), r);
		return false;
	}
	require(err == NULL, "a reply set on success");
	require(json_is_object(req.root), "a request is not an object");
	require(req.method && strlen(req.method) ==
		json_string_length(json_object_get(req.root, "method")), "a method holds a NUL");
	require(req.id == NULL || jsonrpc_id_is_valid(req.id), "an invalid id accepted");
	require(req.id == json_object_get(req.root, "id"), "the id is not the request's");
	require(req.params == json_object_get(req.root, "params"), "params are not the request's");
	json_object_foreach(req.root, key, v)
		require(!strcmp(key, "jsonrpc") || !strcmp(key, "id") || !strcmp(key, "method") ||
			!strcmp(key, "params"), "an unknown member accepted");
	check_reply(jsonrpc_reply_result(req.id, json_true()), req.id, 0);
	jsonrpc_request_release(&req);
	return true;
}

static bool fuzz_response(const char *line, size_t len)
{
	struct jsonrpc_response resp, again;
	json_t *code;
	size_t n = 0;
	char *s;

	if (jsonrpc_response_parse(line, len, &resp) < 0)
		return false;
	require(resp.id && jsonrpc_id_is_valid(resp.id), "a response with an invalid id");
	require(!resp.result != !resp.error, "a response with both or neither of result and error");
	if (resp.error) {
		code = json_object_get(resp.error, "code");
		require(json_is_integer(code) && json_integer_value(code) == resp.error_code,
			"an error code that is not the one sent");
		require(resp.error_message && strlen(resp.error_message) ==
			json_string_length(json_object_get(resp.error, "message")),
			"an error message that is not the one sent");
	}
	s = frame_encode(resp.root, &n);
	require(s && n > 0 && s[n - 1] == '\n', "a response does not re-encode");
	require(jsonrpc_response_parse(s, n - 1, &again) == 0, "a re-encoded response is refused");
	require(json_equal(again.root, resp.root) && again.error_code == resp.error_code,
		"a re-encoded response differs");
	jsonrpc_response_release(&again);
	jsonrpc_response_release(&resp);
	free(s);
	return true;
}

static void fuzz_line(const char *line, size_t len)
{
	bool is_request = fuzz_request(line, len);
	bool is_response = fuzz_response(line, len);

	require(!(is_request && is_response), "a frame is both a request and a response");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct reference ref;
	size_t max = frame_limits[size ? data[0] % (sizeof(frame_limits) / sizeof(frame_limits[0])) : 3];
	struct fuzz_chunker ch;
	struct frame_buf fb;
	size_t off = 0, got = 0;
	bool failed = false;

	fuzz_json_seed();
	reference_split(data, size, max, &ref);
	fuzz_chunker_init(&ch, (uint32_t)size ^ (size ? (uint32_t)data[size - 1] << 8 : 0));
	frame_buf_init(&fb, max);
	while (off < size && !failed) {
		size_t n = fuzz_chunk_next(&ch, size - off);
		const char *line;
		size_t len;
		int r;

		r = frame_buf_append(&fb, data + off, n);
		off += n;
		if (r < 0) {
			require(r == -EMSGSIZE, "append fails with another error");
			failed = true;
			break;
		}
		while ((r = frame_buf_next(&fb, &line, &len)) == 1) {
			require(len <= max, "a frame over the limit");
			require(line[len] == '\0', "a frame not NUL-terminated");
			require(memchr(line, '\n', len) == NULL, "a frame holds an LF");
			require(got < ref.n || ref.n == FUZZ_FRAMES_MAX, "a frame the stream does not hold");
			if (got < ref.n)
				require(ref.frames[got].len == len &&
					memcmp(data + ref.frames[got].off, line, len) == 0,
					"a frame differs from the stream's");
			if (got++ < FUZZ_PARSED_FRAMES_MAX)
				fuzz_line(line, len);
		}
		if (r < 0) {
			require(r == -EMSGSIZE, "next fails with another error");
			failed = true;
		}
	}
	require(failed == ref.error, "the limit is enforced differently");
	if (!failed) {
		require(got == ref.n || ref.n == FUZZ_FRAMES_MAX, "frames went missing");
		require(frame_buf_pending(&fb) == ref.tail, "pending is not the tail");
		require(frame_buf_in_frame(&fb) == (ref.tail > 0), "in_frame is wrong");
		frame_buf_drop_partial(&fb);
		require(frame_buf_pending(&fb) == 0 && !frame_buf_in_frame(&fb),
			"drop_partial left bytes");
		{
			const char *line;
			size_t len;

			require(frame_buf_next(&fb, &line, &len) == 0, "a frame after drop_partial");
		}
	}
	frame_buf_release(&fb);
	return 0;
}
