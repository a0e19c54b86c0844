/* execrun.h — one command run to completion in a container over the Engine
 * API (engine-api.md §2.3): POST /containers/{id}/exec, POST
 * /exec/{eid}/start (the multiplexed stdout/stderr stream, read until the
 * engine closes it), GET /exec/{eid}/json for the exit code.
 *
 * Used by the file plane for removals and reclaims (rm as the guest,
 * behaviour-docker §2.7–2.8) and by identity resolution (`id -u`); the exec
 * methods (issue 5) build on it.
 *
 * Contract (libuv's, as docker.h): execrun_start() < 0 → the callback never
 * fires; otherwise it fires exactly once, from the loop, never from inside
 * execrun_start(), or synchronously from execrun_cancel().
 *
 * Ownership: a run is owned by this module. Its pointer stays valid for the
 * caller until the callback fires, and the run is freed right after the
 * callback returns (so it must not be cancelled from its own callback).
 * The base, engine and freeze table are borrowed: they must outlive the
 * run (an exec mark it holds is ended in the table when it finishes). engine_free reaches a run only while one of its requests is in
 * flight (it then ends with -ECANCELED): cancel runs before freeing the
 * engine. The callback may start runs, cancel others and free the
 * engine. */
#ifndef MSB_EXECRUN_H
#define MSB_EXECRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct engine;
struct freeze_table;

/* Most argv entries, and most bytes of argv, working dir and user together. */
#define EXECRUN_MAX_ARGS        4096
#define EXECRUN_MAX_ARGV_BYTES  (256u * 1024)
/* stdout + stderr kept when the caller names no cap. */
#define EXECRUN_DEFAULT_MAX_OUTPUT (1u * 1024 * 1024)
/* While the container is paused by one of our own freezes, exec create (or
 * start) is refused (409 "is paused"); it is re-issued this often, within
 * the deadline (behaviour-docker §2.2). */
#define EXECRUN_PAUSED_RETRY_MS 50
/* While a freeze of ours is on the container (freeze_exec_must_wait), no
 * create or start is sent: the run asks the table again this often. */
#define EXECRUN_FREEZE_POLL_MS 10
/* From its start until the engine confirms the process (a Pid, or an
 * ExitCode), a run holds an exec mark on the container, so no freeze of
 * ours pauses it meanwhile (a pause then makes the runtime fail the exec,
 * with its text on the exec's own stdout). Once a freeze waits on the
 * mark, the run asks GET /exec/{eid}/json every EXECRUN_START_PROBE_MS,
 * EXECRUN_START_PROBES times, then (with a warning) every
 * EXECRUN_START_PROBE_SLOW_MS. The mark is never given up on a count: a
 * pause into an unfinished start can freeze runc's init for good. The run's
 * own deadline, and the waiting file call's, bound the wait. */
#define EXECRUN_START_PROBE_MS      10
#define EXECRUN_START_PROBES        150
#define EXECRUN_START_PROBE_SLOW_MS 100
/* The engine marks an exec exited before it closes its stream, so the first
 * inspect after the end sees the code; should it still say Running, it is
 * asked again this often, at most this many more times (then -EIO). */
#define EXECRUN_INSPECT_RETRY_MS 20
#define EXECRUN_INSPECT_RETRIES  5
/* The text of a "system error" frame (stream 3) kept for the message. */
#define EXECRUN_MAX_SYSERR_BYTES 1024

/* A chunk of the command's output as it arrives (stream 1 stdout, 2
 * stderr), after the cap check. Runs inside the transfer (http.h's on_data
 * rules: no cancel, no free, no request started). */
typedef void execrun_output_cb(unsigned stream, const uint8_t *data, size_t len, void *arg);

struct execrun_spec {
	const char *const *argv;     /* NULL-terminated, at least one entry, each valid
				      * UTF-8 (JSON strings); borrowed (copied) */
	const char *working_dir;     /* absolute; NULL = the image's */
	const char *user;            /* NULL = the image's user ("" is refused) */
	const char *const *env;      /* NULL-terminated "NAME=VALUE" added to the image's
				      * environment (Env); NULL = none; counted in the limits */
	long timeout_ms;             /* the whole run, retries included; 0 = none */
	size_t max_output;           /* stdout + stderr bytes; 0 = EXECRUN_DEFAULT_MAX_OUTPUT */
	execrun_output_cb *on_output; /* NULL: none */
	void *output_arg;
	bool attach_stdin;           /* the command's stdin is ours (execrun_stdin_write);
				      * else it is closed. Over a TLS engine: -EPROTONOSUPPORT */
};

struct execrun_result {
	/* 0: the command ran and exited (exit_code holds its status).
	 * -ETIMEDOUT   the deadline passed (the command may still run in the guest);
	 * -ETIME       a request to the engine timed out (engine.timeout_ms), before
	 *              the deadline: the engine's failure, never the caller's bound;
	 * -EFBIG       stdout + stderr exceeded max_output (the stream was cut);
	 * -ENOENT      the container (or the exec) is gone: 404 at any step;
	 * -EBUSY       the container is paused, and not by one of our freezes;
	 *              also when the deadline passed while waiting for a
	 *              freeze of ours, or to retry a refusal of one (the last
	 *              refusal is returned, if any: the command never ran);
	 * -ESRCH       the container is not running (409);
	 * -EIO         the engine refused otherwise (status, message set), the
	 *              stream was malformed or carried an engine error, or the
	 *              inspect made no sense (message says which);
	 * -ECANCELED   execrun_cancel, or the engine went away;
	 * a transport errno (-ECONNREFUSED, -ECONNRESET, -ENOTCONN, …). */
	int error;
	long status;                 /* the failing call's HTTP status, else 0 */
	const char *message;         /* the engine's message, or what was wrong; else NULL */
	int exit_code;               /* when error == 0 */
	/* What arrived (also on failure, then possibly partial). Borrowed for
	 * the callback; never NULL. */
	const uint8_t *out;          /* stdout */
	size_t out_len;
	const uint8_t *err;          /* stderr */
	size_t err_len;
	/* The engine's exec id once created (for GET /exec/{eid}/json: the
	 * process's Pid after a deadline), else NULL. Borrowed for the
	 * callback. */
	const char *exec_id;
};

struct execrun;
typedef void execrun_cb(const struct execrun_result *r, void *arg);

/* ---- the start's output stream (pure) ------------------------------------ */

/* The multiplexed stream of POST /exec/{eid}/start (moby api/pkg/stdcopy):
 * frames of an 8-byte header [stream, 0, 0, 0, length u32 big-endian] and
 * length payload bytes. Exposed for the unit tests and the fuzz target. */
#define EXECRUN_FRAME_HEADER_LEN 8

/* Byte 0 of a frame header. */
enum execrun_stream {
	EXECRUN_STREAM_STDIN,
	EXECRUN_STREAM_STDOUT,
	EXECRUN_STREAM_STDERR,
	EXECRUN_STREAM_SYSERR,    /* the engine's own error text */
	_EXECRUN_STREAM_MAX,
};

/* The parser's state; zero it to start a stream. */
struct execrun_demux {
	uint8_t hdr[EXECRUN_FRAME_HEADER_LEN];
	size_t hdr_len;           /* header bytes held */
	unsigned stream;          /* the current frame's stream */
	uint32_t left;            /* its payload bytes still to come */
};

/* n payload bytes of stream (n is 0 only for an empty frame, with
 * frame_end); frame_end when they end the frame. p is borrowed for the
 * call. Returns 0, or < 0 to stop the feed. */
typedef int execrun_demux_sink(unsigned stream, const uint8_t *p, size_t n, bool frame_end,
			       void *arg);

/* Feeds p[0..n) through, in chunks of any size (a header may be split
 * across them): payloads go to sink in order. Returns 0, -EPROTO (a header
 * names a stream >= _EXECRUN_STREAM_MAX; d->stream holds it), or the sink's
 * negative value. After an error the state is not meant to be fed again. */
int execrun_demux_feed(struct execrun_demux *d, const uint8_t *p, size_t n, execrun_demux_sink *sink,
		       void *arg);
/* True when no header or payload bytes are pending: the stream may end here. */
bool execrun_demux_is_between_frames(const struct execrun_demux *d);

/* Runs spec in container id (copied) on engine e, its timers on base.
 * freezes (may be NULL: none of the rules below) orders the run with our
 * freezes (freeze.h, "Exec starts"): no create or start is sent while
 * freeze_exec_must_wait(freezes, id) (the run waits, within its deadline;
 * spent → -EBUSY, the command never ran), and from the start until the
 * process is confirmed, an exec mark keeps our freezes from pausing it. A
 * 409 "is paused" at create or start is retried every
 * EXECRUN_PAUSED_RETRY_MS while freeze_is_held(freezes, id) or
 * freeze_recently_unpaused(freezes, id), else it is
 * -EBUSY. Returns 0 (and *ret if
 * ret), or -EINVAL (a missing argument, an empty id, no argv, a relative
 * working dir, an empty user, non-UTF-8 text, a negative timeout), -E2BIG
 * (over EXECRUN_MAX_ARGS or EXECRUN_MAX_ARGV_BYTES: nothing sent),
 * -ENOTCONN (engine not reachable), -ENOMEM. */
int execrun_start(struct event_base *base, struct engine *e, struct freeze_table *freezes,
		  const char *id, const struct execrun_spec *spec, execrun_cb *cb, void *arg,
		  struct execrun **ret);
/* The callback fires now with -ECANCELED; a request in flight is cancelled
 * (the command may run on in the guest). NULL-safe. */
void execrun_cancel(struct execrun *x);

/* A run ended (cancelled, or its deadline passed) after it sent its start and
 * before the engine confirmed the process keeps its exec mark beyond its
 * end, in a linger that asks the engine until the start is settled (a Pid,
 * an ExitCode, the exec gone, or EXECRUN_START_PROBES answers in a row
 * that the engine never began it: our request closed unsent), so no
 * freeze of ours pauses into a start the runtime is still carrying out. Ends every linger now (their marks
 * too): call it before the engine or the freeze table is freed. */
void execrun_lingers_end(void);
/* Lingers alive: for tests. */
size_t execrun_lingers_count(void);

/* stdin (spec.attach_stdin): the start is hijacked (hijack.h) and
 * p[0..n) (borrowed until cb) goes to the command's stdin, then, if eof,
 * the stdin is closed. One write at a time (-EBUSY); it waits for the
 * start (a start refused and retried keeps it). cb fires from the loop
 * once every byte was handed to the engine (error 0), or with -EPIPE (the
 * engine closed its side: the command ended or closed its stdin) or
 * -ECANCELED (the run ends: it fires before the run's callback), written
 * the bytes that went. Returns 0, -EINVAL (no attach_stdin), -EPIPE (the
 * run is over, or eof was sent). */
typedef void execrun_stdin_cb(int error, size_t written, void *arg);
int execrun_stdin_write(struct execrun *x, const uint8_t *p, size_t n, bool eof, execrun_stdin_cb *cb, void *arg);

#endif
