/* m_exec.c — sandbox.exec (PROTOCOL.md): one command in the guest, as the
 * sandbox's fixed identity (numeric uid:gid, guest.h; resolved first when
 * the daemon serves the sandbox for the first time), over execrun.h.
 *
 * On a deadline or an output overflow the call is answered at once, and
 * then the domain ends what the command started (execend.h: from the host
 * when it can, else every guest process carrying the call's mark in its
 * environment, MSB_EXEC_ID, is killed from inside). The sandbox stays
 * (exec.on_timeout = dispose removes it instead). The exec_req outlives
 * its call until that is over.
 *
 * A cancel (call.cancel naming the call, or its client gone: the rpc
 * cancel hook, rpc.h) takes the same path: the hook only marks the call
 * and wakes cancel_ev; from the loop the run is cancelled (execrun_cancel),
 * and the answer is Cancelled with the output so far, then the kill. A
 * deadline's TimeoutError carries that output too.
 *
 * stdin (stdin_b64, or stdin_stream fed by exec.stdin requests of the
 * same connection, which find the exec through the hook's arg): chunks
 * queue here (at most EXEC_STDIN_MAX_BUFFERED_BYTES) and go to the run
 * one at a time (execrun_stdin_write: the hijacked start); each
 * exec.stdin is answered {written} when its bytes were handed to the
 * engine, so the client's pace is the command's. Chunks left when the
 * command stops reading, or ends, are answered with what of them went.
 *
 * A working directory that is not there: the runtime's exit 126 with its
 * text is checked by looking at the directory (exec_wd_check) and becomes
 * FileNotFoundError / NotADirectoryError. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base64.h"
#include "cleanup.h"
#include "daemon.h"
#include "dispose.h"
#include "errmap.h"
#include "execend.h"
#include "execkill.h"
#include "execrun.h"
#include "fileop.h"
#include "guest.h"
#include "log.h"
#include "m_exec.h"
#include "m_files.h"
#include "owner.h"
#include "paths.h"
#include "replybound.h"
#include "registry.h"
#include "xmalloc.h"

static int check_timeout(const json_t *v, char **reterr_message)
{
	double s = json_number_value(v);

	if (json_is_number(v) && s > 0 && s <= EXEC_MAX_TIMEOUT_S)
		return 0;
	*reterr_message = xasprintf("must be a number of seconds > 0 and at most %d", EXEC_MAX_TIMEOUT_S);
	return -EINVAL;
}

static int check_command(const json_t *v, char **reterr_message)
{
	size_t i;
	json_t *a;

	if (json_is_string(v))
		return 0;
	if (json_is_array(v) && json_array_size(v) > 0) {
		json_array_foreach(v, i, a)
			if (!json_is_string(a))
				break;
		if (i == json_array_size(v))
			return 0;
	}
	*reterr_message = xstrdup("must be a string (run by sh -c) or a non-empty array of strings (argv)");
	return -EINVAL;
}

static int check_count(const json_t *v, char **reterr_message)
{
	if (json_is_integer(v) && json_integer_value(v) > 0)
		return 0;
	*reterr_message = xstrdup("must be an integer > 0");
	return -EINVAL;
}

#define P(name, type, req, member, check) \
	{ name, type, req, offsetof(struct m_exec_params, member), check }

const struct rpc_param m_exec_spec[] = {
	P("sandbox", RPC_PARAM_STRING, true, sandbox, NULL),
	P("command", RPC_PARAM_JSON, true, command, check_command),
	P("working_directory", RPC_PARAM_JSON, false, working_directory, rpc_check_string),
	P("timeout_seconds", RPC_PARAM_JSON, true, timeout_seconds, check_timeout),
	P("env", RPC_PARAM_OBJECT, false, env, NULL),
	P("max_output_bytes", RPC_PARAM_JSON, false, max_output_bytes, check_count),
	P("stream", RPC_PARAM_BOOL, false, stream, NULL),
	P("text", RPC_PARAM_BOOL, false, text, NULL),
	P("stdin_b64", RPC_PARAM_JSON, false, stdin_b64, rpc_check_string),
	P("stdin_stream", RPC_PARAM_BOOL, false, stdin_stream, NULL),
	{ NULL },
};

/* exec.stdin: one chunk of a streamed stdin. */
struct stdin_chunk {
	struct stdin_chunk *next;
	struct rpc_call *call;   /* the exec.stdin call to answer; NULL: stdin_b64 */
	uint8_t *data;
	size_t len;
	size_t written;          /* handed to the engine so far */
	bool eof;
};

struct exec_req {
	struct msbd *d;
	struct rpc_call *call;   /* NULL once answered (the kill may go on) */
	char id[REGISTRY_ID_LEN + 1];
	char token[EXEC_TOKEN_HEX + 1];
	struct timespec started;
	long timeout_ms;
	size_t max_output;
	bool text;            /* text: true — the reply's _text views too */
	/* stream: true — output not yet notified, per stream (stdout, stderr),
	 * and the timer that sends it (exec_stream_flush). */
	struct exec_pending {
		uint8_t *data;    /* exec_stream_cap(), once output came */
		size_t len;
	} pending[2];
	struct event *flush_ev;
	/* Of the bound's envelope allowance (replybound_exec), what is left,
	 * and the output seen: a timed flush spends one only while the full
	 * chunks still to come and the last flush keep theirs. */
	size_t env_left;
	size_t out_seen;
	int failure;          /* the error answered with, before the kill */
	/* What to run, kept while the guest's identity is resolved. */
	json_t *command;      /* the command param (a new reference) */
	char **env;           /* "NAME=VALUE", the mark last; NULL-terminated; owned */
	char *working_dir;
	bool stream;
	/* What the end of the command (execend.h) needs to find what it started. */
	unsigned long long since;   /* the run's start, clock ticks since boot */
	uint64_t start_seq;         /* its place in the sandbox's exec_starts */
	char *exec_id;              /* the engine's, once known */
	/* Cancel (call.cancel, a closed connection): the hook takes it, the
	 * run is cancelled from the loop (cancel_ev), then the kill as on a
	 * deadline. */
	struct execrun *run;        /* the run in flight, else NULL */
	struct event *cancel_ev;
	bool cancelled;
	const char *cancel_why;       /* static text, for the log */
	char *user;                 /* the run's "uid:gid" (the directory check) */
	bool checking_wd;           /* the command ended; its directory is being checked */
	/* The output that arrived before a deadline or a cancel (the error's
	 * data). */
	uint8_t *part_out, *part_err;
	size_t part_out_len, part_err_len;
	/* stdin (stdin_b64, or stdin_stream with exec.stdin chunks): the
	 * chunks not yet handed to the engine, the head in flight. */
	bool stdin_attach;
	bool stdin_stream;
	bool stdin_closed;          /* a chunk with eof was queued */
	bool stdin_broken;          /* the engine took no more: later chunks go nowhere */
	bool stdin_writing;         /* the head is with execrun_stdin_write */
	struct stdin_chunk *stdin_head, **stdin_tail;
	size_t stdin_queued;        /* bytes queued, not yet handed */
};

static long since_ms(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* ---- text views ---------------------------------------------------------- */

/* The length of a valid UTF-8 sequence at s (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), or 0. NUL is refused too: JSON parsers
 * commonly refuse \u0000, so the text views never carry it. */
static size_t utf8_valid_len(const uint8_t *s, size_t n)
{
	uint8_t c = s[0];
	size_t len;
	uint32_t cp;

	if (c == 0)
		return 0;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* bytes as UTF-8 text, each invalid byte (and NUL) replaced by U+FFFD. */
json_t *m_exec_text_view(const uint8_t *b, size_t n)
{
	_cleanup_free_ char *out = xmalloc(n * 3 + 1);
	size_t o = 0;
	json_t *j;

	for (size_t i = 0; i < n;) {
		size_t l = utf8_valid_len(b + i, n - i);

		if (l) {
			memcpy(out + o, b + i, l);
			o += l;
			i += l;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn(out, o);
	return j ? j : json_string("");
}

/* ---- the run ------------------------------------------------------------- */

/* stream: true — output goes out as exec.output notifications, each byte
 * once, in base64. Chunks are merged per stream for up to
 * EXEC_STREAM_FLUSH_MS or EXEC_STREAM_FLUSH_BYTES, so a guest writing a
 * byte at a time costs one notification envelope (~100 bytes and the id) a
 * period, not one a byte. */
/* What one exec.output notification costs besides its data's base64:
 * its frame, its id escaped, and its chunk's padding. */
static size_t exec_envelope_bytes(const struct exec_req *x)
{
	return EXEC_STREAM_ENVELOPE_BYTES + (x->call ? replybound_id(rpc_call_id(x->call)) : 24) + 4;
}

static size_t exec_stream_cap(const struct exec_req *x);

static void exec_stream_flush(struct exec_req *x)
{
	static const char *const names[] = { "stdout", "stderr" };

	if (x->flush_ev)
		evtimer_del(x->flush_ev);
	for (int i = 0; i < 2; i++) {
		struct exec_pending *p = &x->pending[i];
		size_t env = exec_envelope_bytes(x);

		if (p->len == 0)
			continue;
		x->env_left -= env < x->env_left ? env : x->env_left;
		rpc_call_notify(x->call, EXEC_OUTPUT_NOTIFICATION,
				json_pack("{s:O, s:s, s:o}", "id", rpc_call_id(x->call), "stream", names[i],
					  "data_b64", msb_base64_json(p->data, p->len)));
		p->len = 0;
	}
}

/* A timed flush of partial chunks, while the allowance keeps room for
 * the full chunks the rest of max_output may make and one last flush a
 * stream; past that, output goes out only in full chunks and at the end. */
static void exec_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_req *x = arg;
	size_t env = exec_envelope_bytes(x), cap = exec_stream_cap(x);
	size_t rest = x->max_output > x->out_seen ? x->max_output - x->out_seen : 0;
	size_t keep = (rest / cap + 1 + 2) * env;

	(void)fd;
	(void)what;
	if (x->env_left < keep + 2 * env)
		return;
	exec_stream_flush(x);
}

/* A stream's pending buffer: EXEC_STREAM_FLUSH_BYTES, or the call's
 * max_output_bytes when that is smaller (never more output than that). */
static size_t exec_stream_cap(const struct exec_req *x)
{
	size_t cap = EXEC_STREAM_FLUSH_BYTES;

	if (x->max_output < cap)
		cap = x->max_output;
	return cap ? cap : 1;
}

static void exec_output_cb(unsigned stream, const uint8_t *data, size_t len, void *arg)
{
	struct exec_req *x = arg;
	struct exec_pending *p = &x->pending[stream == 1 ? 0 : 1];
	struct timeval tv = { 0, EXEC_STREAM_FLUSH_MS * 1000 };
	size_t cap = exec_stream_cap(x);

	x->out_seen += len;
	while (len > 0) {
		size_t k = cap - p->len;

		if (k > len)
			k = len;
		if (!p->data)
			p->data = xmalloc(cap);
		memcpy(p->data + p->len, data, k);
		p->len += k;
		data += k;
		len -= k;
		if (p->len == cap)
			exec_stream_flush(x);
	}
	if (!x->pending[0].len && !x->pending[1].len)
		return;
	/* Without its timer (out of memory), each chunk goes out at once. */
	if (!x->flush_ev || (!evtimer_pending(x->flush_ev, NULL) && evtimer_add(x->flush_ev, &tv) < 0))
		exec_stream_flush(x);
}

static void exec_stdin_drop_all(struct exec_req *x);

static void exec_req_free(struct exec_req *x)
{
	exec_stdin_drop_all(x);
	if (x->cancel_ev)
		event_free(x->cancel_ev);
	free(x->user);
	free(x->part_out);
	free(x->part_err);
	if (x->flush_ev)
		event_free(x->flush_ev);
	free(x->pending[0].data);
	free(x->pending[1].data);
	json_decref(x->command);
	for (size_t i = 0; x->env && x->env[i]; i++)
		free(x->env[i]);
	free(x->env);
	free(x->working_dir);
	free(x->exec_id);
	free(x);
}

/* The output that arrived before a deadline or a cancel, as the error's
 * data: the bytes in base64, and the text views when the call asked them
 * (the reply bound covers them as it covers a result). */
static json_t *exec_partial_data(const struct exec_req *x, json_t *data)
{
	static const uint8_t empty[1];
	const uint8_t *out = x->part_out ? x->part_out : empty, *err = x->part_err ? x->part_err : empty;

	json_object_set_new(data, "stdout_b64", msb_base64_json(out, x->part_out_len));
	json_object_set_new(data, "stderr_b64", msb_base64_json(err, x->part_err_len));
	if (x->text) {
		json_object_set_new(data, "stdout_text", m_exec_text_view(out, x->part_out_len));
		json_object_set_new(data, "stderr_text", m_exec_text_view(err, x->part_err_len));
	}
	return data;
}

static uint8_t *memdup_n(const uint8_t *p, size_t n)
{
	uint8_t *c = xmalloc(n ? n : 1);

	memcpy(c, p, n);
	return c;
}

/* Keeps what arrived (r's buffers are lent to the callback only). */
static void exec_keep_partial(struct exec_req *x, const struct execrun_result *r)
{
	free(x->part_out);
	free(x->part_err);
	x->part_out = r->out_len ? memdup_n(r->out, r->out_len) : NULL;
	x->part_out_len = r->out_len;
	x->part_err = r->err_len ? memdup_n(r->err, r->err_len) : NULL;
	x->part_err_len = r->err_len;
}

/* Answers the deadline, the cancel or the overflow (x->failure); the kill
 * follows. */
static void exec_fail_final(struct exec_req *x)
{
	if (!x->call)
		return;
	if (x->failure == -ETIMEDOUT)
		rpc_call_fail(x->call, MSB_ERR_TIMEOUT,
			      exec_partial_data(x, json_pack("{s:I}", "timeout_ms", (json_int_t)x->timeout_ms)),
			      "the command did not finish within %ld ms; what it started is killed",
			      x->timeout_ms);
	else if (x->failure == -ECANCELED)
		rpc_call_fail(x->call, MSB_ERR_CANCELLED, exec_partial_data(x, json_object()),
			      "the command was cancelled; what it started is killed");
	else
		rpc_call_fail(x->call, MSB_ERR_EXEC_OUTPUT_LIMIT,
			      json_pack("{s:I}", "limit", (json_int_t)x->max_output),
			      "the command wrote more than %zu bytes (stdout and stderr together); it is killed",
			      x->max_output);
	x->call = NULL;
}

/* The end of what the command started is over (execend.h). */
static void exec_ended_cb(void *arg)
{
	exec_req_free(arg);
}

/* Answers the call, then ends what the command started; x is freed when
 * that is over. */
static void exec_answer_then_end(struct exec_req *x)
{
	struct execend_target end = { .id = x->id, .exec_id = x->exec_id, .token = x->token,
				      .since = x->since, .start_seq = x->start_seq };

	exec_fail_final(x);
	if (execend_start(&x->d->dom, &end, exec_ended_cb, x) == 0)
		exec_req_free(x);
}

static void exec_disposed_cb(const struct dispose_result *r, void *arg)
{
	struct exec_req *x = arg;
	json_t *f = json_array_get(r->failures, 0);

	if (r->disposed == 0 && f) {
		/* The sandbox stays: what the command started is killed instead. */
		log_warnx("exec in %.12s: exec.on_timeout=dispose could not remove the sandbox (%s); killing "
			  "what the command started instead", x->id, json_string_value(json_object_get(f, "detail")));
		exec_answer_then_end(x);
		return;
	}
	if (r->disposed == 0)
		log_info("sandbox %.12s was gone already when its command %s (exec.on_timeout=dispose)", x->id,
			 x->failure == -ETIMEDOUT ? "timed out" : x->failure == -ECANCELED ? "was cancelled" :
			 "overflowed");
	else
		log_info("sandbox %.12s removed after its command %s (exec.on_timeout=dispose)", x->id,
			 x->failure == -ETIMEDOUT ? "timed out" : x->failure == -ECANCELED ? "was cancelled" :
			 "overflowed");
	exec_fail_final(x);
	exec_req_free(x);
}

/* Answers at once (nothing the guest holds open delays it), then ends
 * what the command started (execend.h). With exec.on_timeout = dispose the whole
 * sandbox is disposed first (dispose.h), as the seed does, and the answer
 * follows the removal (a next acquire makes a new one: the engine's removal does not
 * wait on the guest). x is freed when that is over. */
static void exec_kill_then_fail(struct exec_req *x, int failure)
{
	x->failure = failure;
	if (strcmp(x->d->dom.config->exec_on_timeout, "dispose") == 0) {
		/* The one removal sequence (dispose.h): an allowlisted sandbox's
		 * proxy and network go with it. Any of ours (the call was owned).
		 * Not started (the engine unreachable): kill what it can instead. */
		if (dispose_instance_start(&x->d->dom, x->id, json_pack("{s:{}}", "label"),
					   "exec.on_timeout=dispose", exec_disposed_cb, x) < 0)
			exec_answer_then_end(x);
		return;
	}
	exec_answer_then_end(x);
}

/* The result (new reference). Each output byte is on the wire once, in
 * base64 (4/3 of it), unless the caller asked text: true: then also in the
 * text views (up to 6 bytes a byte: \u00XX for a control byte). */
static json_t *exec_result(const struct exec_req *x, const struct execrun_result *r)
{
	json_int_t ms = (json_int_t)since_ms(&x->started);

	if (!x->text)
		return json_pack("{s:i, s:o, s:o, s:I}", "exit_code", r->exit_code,
				 "stdout_b64", msb_base64_json(r->out, r->out_len),
				 "stderr_b64", msb_base64_json(r->err, r->err_len), "duration_ms", ms);
	return json_pack("{s:i, s:o, s:o, s:o, s:o, s:I}", "exit_code", r->exit_code,
			 "stdout_b64", msb_base64_json(r->out, r->out_len),
			 "stderr_b64", msb_base64_json(r->err, r->err_len),
			 "stdout_text", m_exec_text_view(r->out, r->out_len),
			 "stderr_text", m_exec_text_view(r->err, r->err_len), "duration_ms", ms);
}

/* ---- a working directory the runtime could not enter -------------------- */

/* The runtime fails a command whose working directory is missing with exit
 * 126 and its own text on the exec's stdout. The text alone proves
 * nothing (a guest may print it): the directory is looked at, by a
 * second exec as the same user from "/", and only a directory that is
 * not there (or not a directory) makes the typed error. */
#define EXEC_WD_CHECK_SCRIPT \
	"if [ -d \"$1\" ]; then exit 0; elif [ -e \"$1\" ]; then exit 2; else exit 3; fi"
#define EXEC_WD_CHECK_TIMEOUT_MS 5000
#define EXEC_WD_RUNTIME_TEXT "chdir to cwd"

static bool exec_wd_suspect(const struct execrun_result *r)
{
	return r->exit_code == 126 && r->out_len >= strlen(EXEC_WD_RUNTIME_TEXT) &&
	       memmem(r->out, r->out_len, EXEC_WD_RUNTIME_TEXT, strlen(EXEC_WD_RUNTIME_TEXT)) != NULL;
}

static void exec_reply_kept(struct exec_req *x)
{
	static const uint8_t empty[1];
	struct execrun_result r = {
		.exit_code = 126,
		.out = x->part_out ? x->part_out : empty, .out_len = x->part_out_len,
		.err = x->part_err ? x->part_err : empty, .err_len = x->part_err_len,
	};

	rpc_call_reply(x->call, exec_result(x, &r));
	x->call = NULL;
}

static void exec_wd_checked_cb(const struct execrun_result *r, void *arg)
{
	struct exec_req *x = arg;

	x->run = NULL;
	if (r->error == 0 && (r->exit_code == 2 || r->exit_code == 3)) {
		bool missing = r->exit_code == 3;

		rpc_call_fail(x->call, missing ? MSB_ERR_FILE_NOT_FOUND : MSB_ERR_NOT_A_DIRECTORY,
			      json_pack("{s:s, s:s}", "field", "working_directory", "path", x->working_dir),
			      "the working directory %.*s %s in the sandbox; create it first (files.write of a "
			      "file beneath it makes it) or choose another",
			      msb_echo_len(x->working_dir), x->working_dir,
			      missing ? "does not exist" : "is not a directory");
		x->call = NULL;
	} else {
		exec_reply_kept(x);
	}
	exec_req_free(x);
}

/* Exit 126 with the runtime's text: is the directory there? */
static void exec_wd_check(struct exec_req *x, const struct execrun_result *r)
{
	const char *argv[] = { "sh", "-c", EXEC_WD_CHECK_SCRIPT, "sh", x->working_dir, NULL };
	struct execrun_spec spec = { .argv = argv, .working_dir = "/", .user = x->user,
				     .timeout_ms = EXEC_WD_CHECK_TIMEOUT_MS, .max_output = 4096 };

	exec_keep_partial(x, r);
	x->checking_wd = true;
	if (execrun_start(x->d->dom.base, x->d->dom.engine, x->d->dom.freezes, x->id, &spec, exec_wd_checked_cb, x,
			  &x->run) < 0) {
		x->run = NULL;
		exec_reply_kept(x);
		exec_req_free(x);
	}
}

static void exec_log_end(const struct exec_req *x, const char *what)
{
	log_info("exec in sandbox %.12s %s after %ld ms (timeout %ld ms%s%s); what it started is killed", x->id,
		 what, since_ms(&x->started), x->timeout_ms, x->cancelled ? ", cancelled by " : "",
		 x->cancelled && x->cancel_why ? x->cancel_why : "");
}

static void exec_done_cb(const struct execrun_result *r, void *arg)
{
	struct exec_req *x = arg;

	x->run = NULL;
	x->stdin_broken = true;
	exec_stdin_drop_all(x);
	/* What was streamed comes before the reply (or the error). */
	exec_stream_flush(x);

	if (r->error == -ECANCELED && x->cancelled) {
		if (!r->exec_id) {
			/* Cancelled before the engine made the exec (waiting for a
			 * freeze of ours, or its create in flight): nothing ran,
			 * nothing is killed, and exec.on_timeout = dispose does not
			 * remove the sandbox for it — as a deadline spent waiting
			 * for the freeze does not. */
			exec_log_end(x, "was cancelled before it started");
			x->failure = -ECANCELED;
			exec_fail_final(x);
			exec_req_free(x);
			return;
		}
		exec_log_end(x, "was cancelled");
		exec_keep_partial(x, r);
		x->exec_id = r->exec_id ? xstrdup(r->exec_id) : NULL;
		exec_kill_then_fail(x, -ECANCELED);
		return;
	}
	switch (r->error) {
	case 0:
		if (exec_wd_suspect(r)) {
			exec_wd_check(x, r);
			return;
		}
		rpc_call_reply(x->call, exec_result(x, r));
		break;
	case -ETIMEDOUT:
	case -EFBIG:
		if (r->error == -ETIMEDOUT)
			exec_log_end(x, "timed out");
		exec_keep_partial(x, r);
		x->exec_id = r->exec_id ? xstrdup(r->exec_id) : NULL;
		exec_kill_then_fail(x, r->error);
		return;
	default: {
		struct msb_error e = { 0 };

		errmap_execrun(r, "the command", &e);
		rpc_call_fail_error(x->call, &e);
		msb_error_clear(&e);
		break;
	}
	}
	exec_req_free(x);
}

/* ---- cancel --------------------------------------------------------------- */

/* The hook (rpc.h): taken once, while the call is not yet answered; the
 * run is cancelled from the loop (exec_cancel_cb), never from inside
 * whatever closed the connection. */
static bool exec_cancel_hook(struct rpc_call *call, const char *why, void *arg)
{
	struct exec_req *x = arg;

	(void)call;
	x->cancel_why = why;
	/* Already answering: a deadline or an overflow (failure), or the
	 * command ended and its directory is being checked. */
	if (!x->call || x->cancelled || !x->cancel_ev || x->failure || x->checking_wd)
		return false;
	x->cancelled = true;
	event_active(x->cancel_ev, EV_TIMEOUT, 0);
	return true;
}

static void exec_cancel_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exec_req *x = arg;

	(void)fd;
	(void)what;
	/* Without a run (the identity still resolves) exec_guest_cb answers.
	 * A command that ended in the turn the cancel was taken may already be
	 * having its directory checked: that run is the daemon's own, short,
	 * and decides the answer, so it is left to finish. */
	if (x->run && !x->checking_wd)
		execrun_cancel(x->run);   /* exec_done_cb runs now, with -ECANCELED */
}

/* ---- stdin ---------------------------------------------------------------- */

static void stdin_chunk_answer(struct stdin_chunk *c)
{
	if (c->call)
		rpc_call_reply(c->call, json_pack("{s:I}", "written", (json_int_t)c->written));
	free(c->data);
	free(c);
}

static struct stdin_chunk *exec_stdin_pop(struct exec_req *x)
{
	struct stdin_chunk *c = x->stdin_head;

	if (!c)
		return NULL;
	x->stdin_head = c->next;
	if (!x->stdin_head)
		x->stdin_tail = &x->stdin_head;
	x->stdin_queued -= c->len;
	return c;
}

/* The command reads no more (it ended, or the engine closed its side):
 * every chunk left is answered with what of it went (0 for those not
 * begun). */
static void exec_stdin_drop_all(struct exec_req *x)
{
	struct stdin_chunk *c;

	x->stdin_writing = false;
	while ((c = exec_stdin_pop(x)))
		stdin_chunk_answer(c);
}

static void exec_stdin_pump(struct exec_req *x);

static void exec_stdin_written_cb(int error, size_t written, void *arg)
{
	struct exec_req *x = arg;
	struct stdin_chunk *c;

	if (!x->stdin_writing)
		return;
	x->stdin_writing = false;
	c = exec_stdin_pop(x);
	c->written = written;
	stdin_chunk_answer(c);
	if (error < 0) {
		log_debug("op", "exec in %.12s: its stdin is closed (%s)", x->id, strerror(-error));
		x->stdin_broken = true;
		exec_stdin_drop_all(x);
		return;
	}
	exec_stdin_pump(x);
}

/* Hands the head chunk to the run (one at a time: the daemon holds at most
 * EXEC_STDIN_MAX_BUFFERED_BYTES of stdin an exec). */
static void exec_stdin_pump(struct exec_req *x)
{
	struct stdin_chunk *c = x->stdin_head;

	if (!x->run || x->stdin_writing || !c)
		return;
	if (execrun_stdin_write(x->run, c->data, c->len, c->eof, exec_stdin_written_cb, x) < 0) {
		x->stdin_broken = true;
		exec_stdin_drop_all(x);
		return;
	}
	x->stdin_writing = true;
}

static void exec_stdin_queue(struct exec_req *x, struct rpc_call *call, uint8_t *data, size_t len, bool eof)
{
	struct stdin_chunk *c = xcalloc(1, sizeof(*c));

	c->call = call;
	c->data = data;
	c->len = len;
	c->eof = eof;
	if (!x->stdin_tail)
		x->stdin_tail = &x->stdin_head;
	*x->stdin_tail = c;
	x->stdin_tail = &c->next;
	x->stdin_queued += len;
	if (eof)
		x->stdin_closed = true;
	exec_stdin_pump(x);
}

/* ---- the handler ---------------------------------------------------------- */

static bool env_name_ok(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9'))
		return false;
	for (const char *p = k; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	return strcmp(k, EXEC_MARK_NAME) != 0;
}

static struct rpc_result *fail_field(struct rpc_call *call, const char *field, const char *msg)
{
	return rpc_fail(call, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", field), "%s", msg);
}

static void token_new(char out[EXEC_TOKEN_HEX + 1])
{
	uint8_t raw[EXEC_TOKEN_HEX / 2];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		fatal("%s: getrandom", __func__);
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

/* The refusal of a run execrun_start would not take. */
static void exec_start_error(int r, struct msb_error *e)
{
	if (r == -E2BIG)
		msb_error_set(e, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "command"),
			      "the command (with env and working directory) is over 4096 arguments or 256 KiB");
	else if (r == -EINVAL)
		msb_error_set(e, MSB_ERR_INVALID_PARAMS, json_pack("{s:s}", "field", "command"),
			      "the command is not valid");
	else if (r == -ENOENT)
		msb_error_set(e, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
	else if (r == -EPROTONOSUPPORT)
		msb_error_set(e, MSB_ERR_CAPABILITY_NOT_SUPPORTED,
			      json_pack("{s:s, s:s}", "capability", "exec.stdin", "field", "stdin"),
			      "stdin for a command needs the engine's raw exec stream, which this daemon drives "
			      "only over a unix socket or plain tcp (engine.host), not over TLS; run the command "
			      "without stdin_b64/stdin_stream");
	else if (r == -ENOKEY)
		msb_error_set(e, MSB_ERR_CAPABILITY_NOT_SUPPORTED, json_pack("{s:s}", "capability", "exec"),
			      "the sandbox's user (the image's Config.User) could not be resolved to a uid:gid, "
			      "and a command is never run as a name the guest could redefine; try again (a "
			      "passing failure is not kept), or use an image whose user is numeric");
	else
		msb_error_set(e, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
}

/* Starts the run, as the sandbox's fixed identity: User "uid:gid". None
 * resolved → -ENOKEY: never the image's Config.User by name (the guest's
 * /etc/passwd says what that name means). */
static int exec_begin(struct exec_req *x)
{
	struct sandbox *sb = registry_find_id(x->d->dom.registry, x->id);
	char user[IDENTITY_USER_STRING_MAX];
	_cleanup_free_ const char **argv = NULL;
	struct execrun_spec spec;
	size_t i;
	json_t *v;
	int r;

	if (!sb || identity_fixed_user(&sb->guest, user) < 0)
		return sb ? -ENOKEY : -ENOENT;

	if (json_is_string(x->command)) {
		argv = xcalloc(4, sizeof(*argv));
		argv[0] = "sh";
		argv[1] = "-c";
		argv[2] = json_string_value(x->command);
	} else {
		argv = xcalloc(json_array_size(x->command) + 1, sizeof(*argv));
		json_array_foreach(x->command, i, v)
			argv[i] = json_string_value(v);
	}
	spec = (struct execrun_spec){
		.argv = argv, .working_dir = x->working_dir, .env = (const char *const *)x->env,
		.user = user,
		.timeout_ms = x->timeout_ms, .max_output = x->max_output,
		.on_output = x->stream ? exec_output_cb : NULL, .output_arg = x,
		.attach_stdin = x->stdin_attach,
	};
	free(x->user);
	x->user = xstrdup(user);
	clock_gettime(CLOCK_MONOTONIC, &x->started);
	x->since = execkill_now_ticks();
	if (sb) {
		x->start_seq = ++sb->exec_start_seq;
		sb->exec_starts[x->start_seq % SANDBOX_EXEC_STARTS] =
			(struct sandbox_exec_start){ x->start_seq, x->since };
	}
	r = execrun_start(x->d->dom.base, x->d->dom.engine, x->d->dom.freezes, x->id, &spec, exec_done_cb, x, &x->run);
	if (r < 0) {
		x->run = NULL;
		return r;
	}
	exec_stdin_pump(x);
	return 0;
}

/* The sandbox's identity, fixed now (its first call since this daemon
 * serves it): run. */
static void exec_guest_cb(const struct msb_error *err, const struct guest_identity *id, void *arg)
{
	struct exec_req *x = arg;
	struct msb_error e = { 0 };
	int r;

	(void)id;   /* fixed in the registry entry: exec_begin reads it there */
	if (x->cancelled) {
		exec_log_end(x, "cancelled before it started");
		x->failure = -ECANCELED;
		exec_fail_final(x);
		exec_req_free(x);
		return;
	}
	if (err) {
		rpc_call_fail_error(x->call, err);
		exec_req_free(x);
		return;
	}
	r = exec_begin(x);
	if (r < 0) {
		exec_start_error(r, &e);
		rpc_call_fail_error(x->call, &e);
		msb_error_clear(&e);
		exec_req_free(x);
	}
}

/* A working directory under a pseudo filesystem (PATHS_PSEUDO_FS_ROOTS):
 * the runtime would start the command in the kernel's view of a process
 * (/proc/self/cwd, /proc/self/fd/N: its own descriptors), not in the
 * container's files. NULL when fine. */
static struct rpc_result *check_wd_pseudo(struct rpc_call *call, const char *path)
{
	const char *root = paths_pseudo_fs_root(path);

	if (!root)
		return NULL;
	return rpc_fail(call, MSB_ERR_CONFINEMENT, json_pack("{s:s, s:s, s:s}", "field", "working_directory",
							      "path", path, "filesystem", root),
			"the working directory %.*s is under %s, a pseudo filesystem, not the container's "
			"files; choose a directory of the container's own filesystem",
			msb_echo_len(path), path, root);
}

struct rpc_result *m_exec(struct rpc_call *call, const void *params)
{
	const struct m_exec_params *p = params;
	struct msbd *d = rpc_call_ctx(call);
	struct rpc_result *fail;
	/* A refusal here finishes the call and frees p: p is read only after. */
	const struct sandbox *sb = owner_sandbox_begin(d, call, p->sandbox, &fail);
	const json_t *wd;
	_cleanup_free_ char **env = NULL;
	struct paths_resolved res = { 0 };
	enum paths_reason reason;
	size_t n_env = 0, env_bytes = 0, i;
	struct exec_req *x;
	const char *key;
	json_t *v;
	int r;

	if (!sb)
		return fail;
	wd = p->working_directory;
	/* The working directory, confined to the base when relative. */
	if (paths_confine_resolve(".", 1, wd ? json_string_value(wd) : NULL, wd ? json_string_length(wd) : 0,
				  m_files_sandbox_base(sb), &res, &reason) < 0) {
		struct msb_error e = { 0 };

		fileop_error_from_reason(reason, wd ? json_string_value(wd) : ".", &e);
		fail = rpc_fail_error(call, &e);
		msb_error_clear(&e);
		return fail;
	}
	fail = check_wd_pseudo(call, res.path);
	if (fail) {
		paths_resolved_release(&res);
		return fail;
	}
	if (p->env) {
		if (json_object_size(p->env) > EXEC_MAX_ENV) {
			paths_resolved_release(&res);
			return fail_field(call, "env", "too many variables");
		}
		env = xcalloc(json_object_size(p->env) + 2, sizeof(*env));
		json_object_foreach(p->env, key, v) {
			if (!env_name_ok(key) || !json_is_string(v)) {
				for (i = 0; i < n_env; i++)
					free(env[i]);
				paths_resolved_release(&res);
				return fail_field(call, "env", "each entry is NAME: \"value\", NAME made of letters, "
						  "digits and _ (not first a digit), not " EXEC_MARK_NAME);
			}
			env[n_env] = xasprintf("%s=%s", key, json_string_value(v));
			env_bytes += strlen(env[n_env++]);
		}
		if (env_bytes > EXEC_MAX_ENV_BYTES) {
			for (i = 0; i < n_env; i++)
				free(env[i]);
			paths_resolved_release(&res);
			return fail_field(call, "env", "the variables are too long together");
		}
	} else {
		env = xcalloc(2, sizeof(*env));
	}
	x = xcalloc(1, sizeof(*x));
	x->d = d;
	x->call = call;
	snprintf(x->id, sizeof(x->id), "%s", sb->id);
	token_new(x->token);
	x->timeout_ms = (long)(json_number_value(p->timeout_seconds) * 1000);
	if (x->timeout_ms < 1)
		x->timeout_ms = 1;
	x->max_output = d->dom.config->exec_max_output_bytes;
	x->text = p->text;
	if (p->stream)
		x->flush_ev = evtimer_new(d->dom.base, exec_flush_cb, x);
	env[n_env] = xasprintf(EXEC_MARK_NAME "=%s", x->token);
	x->env = TAKE_PTR(env);
	x->command = json_incref(p->command);
	x->working_dir = xstrdup(res.path);
	x->stream = p->stream;
	paths_resolved_release(&res);
	if (p->max_output_bytes) {
		json_int_t m = json_integer_value(p->max_output_bytes);

		if ((uint64_t)m > d->dom.config->exec_max_output_bytes) {
			exec_req_free(x);
			return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
					json_pack("{s:s, s:I}", "field", "max_output_bytes", "limit",
						  (json_int_t)d->dom.config->exec_max_output_bytes),
					"max_output_bytes is over exec.max_output_bytes (%zu)",
					d->dom.config->exec_max_output_bytes);
		}
		x->max_output = (size_t)m;
	}
	/* stdin: the bytes given (then closed), or held open for exec.stdin. */
	if (p->stdin_b64 && p->stdin_stream) {
		exec_req_free(x);
		return fail_field(call, "stdin_stream", "give stdin_b64 (the whole input) or stdin_stream: true "
				  "(exec.stdin requests), not both");
	}
	if (p->stdin_b64) {
		uint8_t *data = NULL;
		size_t len = 0;

		if (msb_base64_decode(json_string_value(p->stdin_b64), json_string_length(p->stdin_b64), &data,
				      &len) < 0) {
			exec_req_free(x);
			return fail_field(call, "stdin_b64", "stdin_b64 is not valid base64");
		}
		x->stdin_attach = true;
		exec_stdin_queue(x, NULL, data, len, true);
	} else if (p->stdin_stream) {
		x->stdin_attach = true;
		x->stdin_stream = true;
	}
	x->cancel_ev = event_new(d->dom.base, -1, 0, exec_cancel_cb, x);
	rpc_call_set_cancel(call, exec_cancel_hook, x);
	/* The notifications' envelopes get what replybound_exec allows them. */
	x->env_left = REPLYBOUND_BASE64(x->max_output) + 4;
	if (x->env_left < REPLYBOUND_DEFAULT_BYTES)
		x->env_left = REPLYBOUND_DEFAULT_BYTES;
	/* The identity is fixed when the daemon first serves the sandbox. */
	r = sb->guest.known ? exec_begin(x) : guest_identity_start(&x->d->dom, x->id, NULL, exec_guest_cb, x, NULL);
	if (r < 0) {
		struct msb_error e = { 0 };

		if (sb->guest.known || r == -ENOKEY)
			exec_start_error(r, &e);
		else
			msb_error_set(&e, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
		exec_req_free(x);
		fail = rpc_fail_error(call, &e);
		msb_error_clear(&e);
		return fail;
	}
	return rpc_pending(call);
}

/* ---- exec.stdin ------------------------------------------------------------ */

const struct rpc_param m_exec_stdin_spec[] = {
	{ "call", RPC_PARAM_JSON, true, offsetof(struct m_exec_stdin_params, call), NULL },
	{ "data_b64", RPC_PARAM_JSON, false, offsetof(struct m_exec_stdin_params, data_b64), rpc_check_string },
	{ "eof", RPC_PARAM_BOOL, false, offsetof(struct m_exec_stdin_params, eof), NULL },
	{ NULL },
};

struct rpc_result *m_exec_stdin(struct rpc_call *call, const void *params)
{
	const struct m_exec_stdin_params *p = params;
	struct rpc_call *target = rpc_call_find_sibling(call, p->call);
	struct exec_req *x = target ? rpc_call_cancel_arg(target, exec_cancel_hook) : NULL;
	uint8_t *data = NULL;
	size_t len = 0;

	if (!x || !x->stdin_stream)
		return fail_field(call, "call", "call names no sandbox.exec with stdin_stream: true running on "
				  "this connection (its request id, as sent)");
	if (x->stdin_closed)
		return fail_field(call, "call", "that exec's stdin is already closed (eof was sent)");
	if (p->data_b64 && msb_base64_decode(json_string_value(p->data_b64), json_string_length(p->data_b64),
					     &data, &len) < 0)
		return fail_field(call, "data_b64", "data_b64 is not valid base64");
	if (len > EXEC_STDIN_MAX_CHUNK_BYTES) {
		free(data);
		return rpc_fail(call, MSB_ERR_INVALID_PARAMS,
				json_pack("{s:s, s:I}", "field", "data_b64", "limit", (json_int_t)EXEC_STDIN_MAX_CHUNK_BYTES),
				"one exec.stdin carries at most %u bytes; send the rest in further requests",
				EXEC_STDIN_MAX_CHUNK_BYTES);
	}
	if (x->stdin_queued + len > EXEC_STDIN_MAX_BUFFERED_BYTES) {
		free(data);
		return rpc_fail(call, MSB_ERR_TRANSFER_CAP_EXCEEDED,
				json_pack("{s:s, s:I}", "field", "data_b64", "limit",
					  (json_int_t)EXEC_STDIN_MAX_BUFFERED_BYTES),
				"more than %u bytes of stdin would wait for this command; wait for the answers "
				"({written}) of earlier exec.stdin requests before sending more",
				EXEC_STDIN_MAX_BUFFERED_BYTES);
	}
	if (x->stdin_broken) {
		/* The command's stdin is gone (it ended or closed it): nothing goes. */
		free(data);
		return rpc_reply(call, json_pack("{s:i}", "written", 0));
	}
	exec_stdin_queue(x, call, data, len, p->eof);
	return rpc_pending(call);
}

/* ---- call.cancel ------------------------------------------------------------ */

const struct rpc_param m_call_cancel_spec[] = {
	{ "id", RPC_PARAM_JSON, true, offsetof(struct m_call_cancel_params, id), NULL },
	{ NULL },
};

struct rpc_result *m_call_cancel(struct rpc_call *call, const void *params)
{
	const struct m_call_cancel_params *p = params;
	struct rpc_call *target = rpc_call_find_sibling(call, p->id);
	bool taken = target && rpc_call_cancel(target, "call.cancel");

	log_debug("op", "call.cancel: %s", taken ? "taken" : target ? "not cancellable now" : "no such call");
	return rpc_reply(call, json_pack("{s:b}", "cancelled", taken));
}
