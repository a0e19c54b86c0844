/* execrun.c — one command run to completion (see execrun.h).
 *
 *   CREATING   ── 201 ──→ STARTING;  409 "is paused" under our freeze → PAUSED
 *   STARTING   ── 200, the stream ended between frames ──→ INSPECTING;
 *                 409 "is paused" under our freeze → PAUSED
 *   PAUSED     ── EXECRUN_PAUSED_RETRY_MS ──→ the refused step again
 *   INSPECTING ── ExitCode ──→ DONE;  still Running → SETTLING
 *   SETTLING   ── EXECRUN_INSPECT_RETRY_MS ──→ INSPECTING
 *
 * No create or start is sent while a freeze of ours is on the container
 * (freeze_exec_must_wait): the step waits in PAUSED, asking again every
 * EXECRUN_FREEZE_POLL_MS. From sending the start until the engine confirms
 * the process runs, the run holds an exec mark on the container
 * (x->mark), which keeps a freeze of ours from pausing it meanwhile: a
 * pause then makes the runtime fail the exec with text on the exec's own
 * stdout, which can never be told from the guest's. The mark ends, once,
 * in execrun_unmark(): when a probe (GET /exec/{eid}/json, x->probe, run
 * beside the stream) shows a Pid or an ExitCode, when the start's request
 * ends (the process then ran, or never will), and in execrun_finish (the
 * engine gone; a cancel or deadline before the start was sent) — never on
 * a count, and never while a start the engine was sent is unsettled: a run
 * ended then (cancel, deadline) hands its mark to a linger that asks on
 * until the engine settles the start (below). A freeze paused
 * into a start the runtime has not finished catches runc's init joining a
 * frozen cgroup, which stays frozen and hangs the engine on the container.
 * Probes are sent only once a freeze waits on the mark (the table makes
 * x->timer active), every EXECRUN_START_PROBE_MS for EXECRUN_START_PROBES,
 * then every EXECRUN_START_PROBE_SLOW_MS: an exec with no freeze behind it
 * costs no request.
 *
 * Every other outcome, the deadline and execrun_cancel end in
 * execrun_finish(), the one place the callback fires: it disarms the
 * timers, cancels the request in flight (whose completion then finds the
 * run DONE and does nothing), tells the owner and frees the run. Each
 * completion clears x->req first: that request is over.
 *
 * The start's body is split by execrun_demux_feed(), a pure parser: 8-byte
 * headers [stream, 0, 0, 0, length u32 big-endian], each followed by its
 * payload; a header may be split across chunks. It runs inside libcurl
 * (http.h's on_data rules), so a failure there — an unknown stream, the
 * output cap, an engine error frame — aborts the transfer by returning a
 * negative value, and the start's completion ends the run. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <jansson.h>

#include "cleanup.h"
#include "docker.h"
#include "engine.h"
#include "errors.h"
#include "execrun.h"
#include "freeze.h"
#include "hijack.h"
#include "log.h"
#include "xmalloc.h"

/* The first allocation of an output buffer (then doubled, up to the cap). */
#define EXECRUN_BUF_MIN          4096

enum execrun_state {
	EXECRUN_CREATING,         /* POST /containers/{id}/exec in flight */
	EXECRUN_STARTING,         /* POST /exec/{eid}/start in flight: the output streams */
	EXECRUN_INSPECTING,       /* GET /exec/{eid}/json in flight */
	EXECRUN_PAUSED,           /* refused under our own freeze: the retry timer is armed */
	EXECRUN_SETTLING,         /* the exec still said Running: the re-inspect timer is armed */
	EXECRUN_DONE,             /* the callback fired; freed right after */
	_EXECRUN_STATE_MAX,
};

/* ---- demultiplexing (pure) -------------------------------------------------------- */

bool execrun_demux_is_between_frames(const struct execrun_demux *d)
{
	return d->hdr_len == 0 && d->left == 0;
}

/* A complete header: the frame's stream and length; -EPROTO for a stream
 * that does not exist. */
static int demux_header(struct execrun_demux *d)
{
	d->stream = d->hdr[0];
	d->left = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 | (uint32_t)d->hdr[6] << 8 |
		  (uint32_t)d->hdr[7];
	d->hdr_len = 0;
	return d->stream < _EXECRUN_STREAM_MAX ? 0 : -EPROTO;
}

int execrun_demux_feed(struct execrun_demux *d, const uint8_t *p, size_t n, execrun_demux_sink *sink,
		       void *arg)
{
	while (n > 0) {
		size_t k;
		int r;

		if (d->left == 0) {
			k = EXECRUN_FRAME_HEADER_LEN - d->hdr_len;
			k = n < k ? n : k;
			memcpy(d->hdr + d->hdr_len, p, k);
			d->hdr_len += k;
			p += k;
			n -= k;
			if (d->hdr_len < EXECRUN_FRAME_HEADER_LEN)
				return 0;
			r = demux_header(d);
			if (r == 0 && d->left == 0)
				r = sink(d->stream, p, 0, true, arg);
			if (r < 0)
				return r;
			continue;
		}
		k = n < d->left ? n : d->left;
		d->left -= (uint32_t)k;
		r = sink(d->stream, p, k, d->left == 0, arg);
		if (r < 0)
			return r;
		p += k;
		n -= k;
	}
	return 0;
}

/* ---- the run ---------------------------------------------------------------------- */

struct execrun_buf {
	uint8_t *data;
	size_t len, cap;
};

struct execrun {
	struct engine *e;                      /* borrowed */
	struct freeze_table *freezes;          /* borrowed; may be NULL */
	char *id;
	json_t *config;                        /* the exec create body */
	execrun_cb *cb;
	void *arg;
	enum execrun_state state;
	enum execrun_state resume;             /* PAUSED: the step to issue again */
	bool refused;                          /* the last create or start met our freeze */
	struct engine_req *req;                /* the request in flight */
	struct freeze_exec_mark *mark;         /* STARTING, until the process is confirmed */
	struct engine_req *probe;              /* STARTING: the inspect confirming it */
	unsigned probes;                       /* probes sent for this start */
	struct event *deadline;
	struct event *timer;                   /* PAUSED and SETTLING; STARTING: the mark's
						* wake and the next probe */
	char *exec_id;
	struct execrun_demux dm;
	struct execrun_buf out, err;
	size_t max_output;
	size_t total;                          /* stdout + stderr bytes so far */
	execrun_output_cb *on_output;          /* NULL: none */
	void *output_arg;
	char syserr[EXECRUN_MAX_SYSERR_BYTES + 1];
	size_t syserr_len;
	int abort;                             /* what start_data_cb aborted with (0: none) */
	unsigned inspects;                     /* inspects issued */
	int exit_code;
	long status;                           /* the failure's (or last refusal's) HTTP status */
	char *message;                         /* and its text */
	/* stdin (spec.attach_stdin): the start is hijacked (docker_exec_start_
	 * attached) and the caller's one write at a time is handed to it once
	 * it runs; a write the engine never took (a refused start retried)
	 * stays here for the next start. */
	bool attach_stdin;
	struct engine_hijack *hijack;          /* STARTING, attached */
	const uint8_t *in_p;
	size_t in_n;
	bool in_eof, in_active, in_submitted;
	execrun_stdin_cb *in_cb;
	void *in_arg;
};

static const char *execrun_state_to_string(enum execrun_state s)
{
	static const char *const names[_EXECRUN_STATE_MAX] = {
		[EXECRUN_CREATING] = "creating",
		[EXECRUN_STARTING] = "starting",
		[EXECRUN_INSPECTING] = "inspecting",
		[EXECRUN_PAUSED] = "paused",
		[EXECRUN_SETTLING] = "settling",
		[EXECRUN_DONE] = "done",
	};

	if ((unsigned)s >= _EXECRUN_STATE_MAX)
		return "invalid";
	return names[s];
}

static void execrun_set_state(struct execrun *x, enum execrun_state s)
{
	assert((unsigned)s < _EXECRUN_STATE_MAX);
	assert(x->state != EXECRUN_DONE);
	log_debug("op", "exec in %.64s: %s -> %s", x->id, execrun_state_to_string(x->state),
		  execrun_state_to_string(s));
	x->state = s;
}

static void execrun_free(struct execrun *x)
{
	if (!x)
		return;
	if (x->deadline)
		event_free(x->deadline);
	if (x->timer)
		event_free(x->timer);
	json_decref(x->config);
	free(x->out.data);
	free(x->err.data);
	free(x->exec_id);
	free(x->message);
	free(x->id);
	free(x);
}

/* Records why the run fails: status and message (copied; NULL: none). */
static void execrun_set_failure(struct execrun *x, long status, const char *message)
{
	x->status = status;
	free(x->message);
	x->message = message ? xstrdup(message) : NULL;
}

/* The exec mark ends (once; no-op without one): the probe in flight is
 * cancelled (its completion finds no mark), the timer disarmed. */
static void execrun_unmark(struct execrun *x)
{
	struct engine_req *probe = TAKE_PTR(x->probe);

	if (x->mark) {
		freeze_exec_starting_end(TAKE_PTR(x->mark));
		evtimer_del(x->timer);
	}
	if (probe)
		engine_req_cancel(probe);
}

/* The caller's stdin write ends (its callback, cleared first). */
static void execrun_in_end(struct execrun *x, int error, size_t written)
{
	if (!x->in_active)
		return;
	x->in_active = false;
	x->in_submitted = false;
	x->in_cb(error, written, x->in_arg);
}

static void execrun_in_done_cb(int error, size_t written, void *arg)
{
	struct execrun *x = arg;

	if (error == -EAGAIN) {
		x->in_submitted = false;   /* the start was refused: nothing went */
		return;
	}
	execrun_in_end(x, error, written);
}

/* Hands the pending write to the running start. */
static int execrun_in_submit(struct execrun *x)
{
	int r;

	if (!x->in_active || x->in_submitted || !x->hijack)
		return 0;
	r = engine_hijack_write(x->hijack, x->in_p, x->in_n, x->in_eof, execrun_in_done_cb, x);
	if (r < 0)
		return r;
	x->in_submitted = true;
	return 0;
}

/* ---- a mark outliving its run ----------------------------------------------------------
 *
 * A run cancelled (or past its deadline) after it sent its start, before the
 * engine confirmed the process, leaves a start the engine still carries out:
 * closing our request does not stop the runtime. Its mark must not end
 * then, or a freeze of ours (the kill's scan among them) could pause into
 * runc's init joining the cgroup, which wedges the container and the
 * engine's calls on it for good. The mark passes to a linger that asks the
 * engine (GET /exec/{eid}/json) until the exec has a Pid or an ExitCode, or
 * is gone, and then ends it. Lingers are the module's own (a list), and
 * execrun_lingers_end() ends every one before the engine is freed. */
static bool probe_is_started(const json_t *body);

/* Not Running, no ExitCode: the engine has not begun the start (it sets
 * Running first thing, before the runtime is asked). Forever so when our
 * request was closed before the engine read it; for a moment when the
 * engine has the start but answers the inspect before it begins it. */
static bool probe_is_unbegun(const json_t *body)
{
	return !json_is_true(json_object_get(body, "Running")) &&
	       !json_is_integer(json_object_get(body, "ExitCode")) && !probe_is_started(body);
}

struct execrun_linger {
	LIST_ENTRY(execrun_linger) entry;
	struct engine *e;                      /* borrowed */
	struct freeze_exec_mark *mark;
	struct engine_req *probe;
	struct event *timer;                   /* the next probe, and the mark's wake */
	char *id, *exec_id;
	unsigned probes;
	unsigned unbegun;                      /* answers in a row: never begun */
};

static LIST_HEAD(, execrun_linger) execrun_lingers = LIST_HEAD_INITIALIZER(execrun_lingers);

static void linger_end(struct execrun_linger *l)
{
	struct engine_req *probe = TAKE_PTR(l->probe);

	if (probe)
		engine_req_cancel(probe);   /* linger_probe_cb: no probe held, returns */
	freeze_exec_starting_end(TAKE_PTR(l->mark));
	LIST_REMOVE(l, entry);
	event_free(l->timer);
	free(l->exec_id);
	free(l->id);
	free(l);
}

static void linger_probe_cb(const struct docker_reply *r, void *arg);

static void linger_probe(struct execrun_linger *l)
{
	if (l->probe)
		return;
	l->probes++;
	if (docker_exec_inspect(l->e, l->exec_id, linger_probe_cb, l, &l->probe) < 0) {
		l->probe = NULL;
		log_warnx("exec %.12s in %.12s: cannot ask whether its cancelled start ran; its mark ends",
			  l->exec_id, l->id);
		linger_end(l);
	}
}

static void linger_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	linger_probe(arg);
}

static void linger_probe_cb(const struct docker_reply *r, void *arg)
{
	struct execrun_linger *l = arg;
	long ms;
	struct timeval tv;

	if (!l->probe)
		return;   /* linger_end cancelled it */
	l->probe = NULL;
	if (r->error == -ECANCELED || (r->error == 0 && r->status == 404) ||
	    (r->error == 0 && r->status == 200 && json_is_object(r->body) && probe_is_started(r->body))) {
		log_debug("op", "exec %.12s in %.64s: its cancelled start is settled", l->exec_id, l->id);
		linger_end(l);
		return;
	}
	/* Never begun, EXECRUN_START_PROBES answers in a row (at least
	 * EXECRUN_START_PROBES * EXECRUN_START_PROBE_MS): the engine never got
	 * the start, and would keep the mark, and every freeze of the sandbox,
	 * waiting for good. */
	if (r->error == 0 && r->status == 200 && json_is_object(r->body) && probe_is_unbegun(r->body))
		l->unbegun++;
	else
		l->unbegun = 0;
	if (l->unbegun >= EXECRUN_START_PROBES) {
		log_info("exec %.12s in %.12s: its cancelled start never reached the engine (not begun after %u "
			 "inspects); its mark ends", l->exec_id, l->id, l->unbegun);
		linger_end(l);
		return;
	}
	if (l->probes == EXECRUN_START_PROBES)
		log_warnx("exec %.12s in %.12s: a cancelled start not confirmed after %u inspects; freezes "
			  "of the sandbox keep waiting for it (asked every %d ms now)", l->exec_id, l->id,
			  l->probes, EXECRUN_START_PROBE_SLOW_MS);
	ms = l->probes < EXECRUN_START_PROBES ? EXECRUN_START_PROBE_MS : EXECRUN_START_PROBE_SLOW_MS;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(l->timer, &tv);
}

/* Hands x's mark to a linger (x has sent its start; the process is not
 * confirmed). The first probe goes now. */
static void execrun_linger(struct execrun *x)
{
	struct execrun_linger *l = xcalloc(1, sizeof(*l));

	l->e = x->e;
	l->mark = TAKE_PTR(x->mark);
	l->id = xstrdup(x->id);
	l->exec_id = xstrdup(x->exec_id);
	l->timer = evtimer_new(event_get_base(x->timer), linger_timer_cb, l);
	if (!l->timer)
		abort();
	freeze_exec_mark_set_wake(l->mark, l->timer);
	LIST_INSERT_HEAD(&execrun_lingers, l, entry);
	log_debug("op", "exec %.12s in %.64s: cancelled while starting; its mark stays until the engine "
		  "settles the start", l->exec_id, l->id);
	linger_probe(l);
}

void execrun_lingers_end(void)
{
	while (!LIST_EMPTY(&execrun_lingers))
		linger_end(LIST_FIRST(&execrun_lingers));
}

size_t execrun_lingers_count(void)
{
	struct execrun_linger *l;
	size_t n = 0;

	LIST_FOREACH(l, &execrun_lingers, entry)
		n++;
	return n;
}

/* The one place the callback fires; frees x. */
static void execrun_finish(struct execrun *x, int error)
{
	static const uint8_t empty[1];
	struct engine_req *req = TAKE_PTR(x->req);
	struct engine_hijack *hijack = TAKE_PTR(x->hijack);
	struct execrun_result r = {
		.error = error,
		.status = error < 0 ? x->status : 0,
		.message = error < 0 ? x->message : NULL,
		.exit_code = error < 0 ? 0 : x->exit_code,
		.out = x->out.data ? x->out.data : empty,
		.out_len = x->out.len,
		.err = x->err.data ? x->err.data : empty,
		.err_len = x->err.len,
		.exec_id = x->exec_id,
	};

	/* Ended before the engine confirmed a start it was sent: the start
	 * goes on without us, so the mark outlives the run (a linger). */
	if (x->mark && x->exec_id && (req || hijack) && x->state == EXECRUN_STARTING)
		execrun_linger(x);
	execrun_set_state(x, EXECRUN_DONE);
	evtimer_del(x->deadline);
	evtimer_del(x->timer);
	execrun_unmark(x);
	if (req)
		engine_req_cancel(req);   /* its completion finds the run DONE */
	if (hijack)
		engine_hijack_cancel(hijack);   /* a write's end, then its done: the run is DONE */
	execrun_in_end(x, -ECANCELED, 0);
	log_debug("op", "exec in %.64s: error %d, exit code %d", x->id, error, r.exit_code);
	x->cb(&r, x->arg);
	execrun_free(x);
}

/* Fails the run with status and a message (copied; NULL: none). */
/* A request's own timeout (engine.timeout_ms) is the engine's failure, not
 * the caller's deadline: -ETIMEDOUT is kept for that one. */
static int transport_error(int error)
{
	return error == -ETIMEDOUT ? -ETIME : error;
}

static void execrun_fail(struct execrun *x, int error, long status, const char *message)
{
	execrun_set_failure(x, status, message);
	execrun_finish(x, error);
}

static void execrun_arm(struct execrun *x, struct event *ev, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (evtimer_add(ev, &tv) < 0)
		log_warnx("%s: exec in %.64s: cannot arm a timer, ignoring", __func__, x->id);
}

/* ---- the output --------------------------------------------------------------------- */

/* Appends within the cap the caller checked; grows by doubling, never past max. */
static void buf_append(struct execrun_buf *b, const uint8_t *p, size_t n, size_t max)
{
	size_t need = b->len + n;

	if (n == 0)
		return;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : EXECRUN_BUF_MIN;

		while (cap < need && cap <= SIZE_MAX / 2)
			cap *= 2;
		if (cap > max || cap < need)
			cap = max;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

static int output_add(struct execrun *x, struct execrun_buf *b, const uint8_t *p, size_t n)
{
	if (n > x->max_output - x->total) {
		_cleanup_free_ char *m = xasprintf("the command wrote more than %zu bytes", x->max_output);

		execrun_set_failure(x, 0, m);
		return -EFBIG;
	}
	x->total += n;
	buf_append(b, p, n, x->max_output);
	if (x->on_output && n)
		x->on_output(b == &x->out ? EXECRUN_STREAM_STDOUT : EXECRUN_STREAM_STDERR, p, n, x->output_arg);
	return 0;
}

/* A system-error frame: its text (cut) ends the run once the frame is whole. */
static int syserr_add(struct execrun *x, const uint8_t *p, size_t n, bool frame_end)
{
	size_t k = EXECRUN_MAX_SYSERR_BYTES - x->syserr_len;
	_cleanup_free_ char *m = NULL;

	k = n < k ? n : k;
	memcpy(x->syserr + x->syserr_len, p, k);
	x->syserr_len += k;
	if (!frame_end)
		return 0;
	x->syserr[x->syserr_len] = '\0';
	for (char *c = x->syserr; *c; c++)
		if ((unsigned char)*c < ' ' || *c == 0x7f)
			*c = '?';
	m = xasprintf("the engine reported an error in the exec output: %.*s", msb_echo_len(x->syserr),
		      x->syserr);
	execrun_set_failure(x, 0, m);
	return -EIO;
}

static int execrun_sink(unsigned stream, const uint8_t *p, size_t n, bool frame_end, void *arg)
{
	struct execrun *x = arg;

	switch ((enum execrun_stream)stream) {
	case EXECRUN_STREAM_STDIN:
		return 0;   /* the engine never sends it; ignored */
	case EXECRUN_STREAM_STDOUT:
		return output_add(x, &x->out, p, n);
	case EXECRUN_STREAM_STDERR:
		return output_add(x, &x->err, p, n);
	case EXECRUN_STREAM_SYSERR:
		return syserr_add(x, p, n, frame_end);
	case _EXECRUN_STREAM_MAX:
	default:
		assert(!"unreachable");
		return -EPROTO;
	}
}

/* Inside libcurl: a negative return aborts the start with that value. */
static int start_data_cb(const void *data, size_t len, void *arg)
{
	struct execrun *x = arg;
	int r = execrun_demux_feed(&x->dm, data, len, execrun_sink, x);

	if (r == -EPROTO) {
		_cleanup_free_ char *m = xasprintf("the exec output has a frame of unknown stream %u",
						   x->dm.stream);

		execrun_set_failure(x, 0, m);
		r = -EIO;
	}
	if (r < 0)
		x->abort = r;   /* its message is recorded */
	return r;
}

/* ---- the steps ------------------------------------------------------------------------ */

static void create_done_cb(const struct docker_reply *r, void *arg);
static void start_done_cb(int error, long status, const char *message, void *arg);
static void inspect_done_cb(const struct docker_reply *r, void *arg);

static int step_create(struct execrun *x)
{
	return docker_exec_create(x->e, x->id, x->config, create_done_cb, x, &x->req);
}

/* The mark first: from here until the process is confirmed, no freeze of
 * ours pauses the container. A table that refuses it (an id it cannot
 * hold a freeze on, or shutting down) cannot pause it either. */
static int step_start(struct execrun *x)
{
	x->dm = (struct execrun_demux){ 0 };
	x->abort = 0;
	x->probes = 0;
	if (x->freezes && freeze_exec_starting_begin(x->freezes, x->id, x->timer, &x->mark) < 0)
		x->mark = NULL;
	if (x->attach_stdin) {
		int r = docker_exec_start_attached(x->e, x->exec_id, start_data_cb, start_done_cb, x, &x->hijack);

		if (r < 0) {
			x->hijack = NULL;
			return r;
		}
		return execrun_in_submit(x);
	}
	return docker_exec_start(x->e, x->exec_id, 0, start_data_cb, start_done_cb, x, &x->req);
}

static int step_inspect(struct execrun *x)
{
	x->inspects++;
	return docker_exec_inspect(x->e, x->exec_id, inspect_done_cb, x, &x->req);
}

/* A create or start while a freeze of ours is on the container: it waits
 * in PAUSED (no request), within the deadline. The deadline then returns
 * -EBUSY: the command never ran. */
static void execrun_wait_freeze(struct execrun *x, enum execrun_state s)
{
	if (x->status == 0 && !x->message)
		execrun_set_failure(x, 0, "a file call of this daemon kept the container frozen");
	if (x->state != EXECRUN_PAUSED)
		log_debug("op", "exec in %.64s: a freeze of ours is on; waiting", x->id);
	x->resume = s;
	if (x->state != EXECRUN_PAUSED)
		execrun_set_state(x, EXECRUN_PAUSED);
	execrun_arm(x, x->timer, EXECRUN_FREEZE_POLL_MS);
}

/* Issues the request of step s (from the loop); a refusal ends the run. */
static void execrun_enter(struct execrun *x, enum execrun_state s)
{
	int r;

	if ((s == EXECRUN_CREATING || s == EXECRUN_STARTING) && x->freezes &&
	    freeze_exec_must_wait(x->freezes, x->id)) {
		execrun_wait_freeze(x, s);
		return;
	}
	execrun_set_state(x, s);
	switch (s) {
	case EXECRUN_CREATING:
		r = step_create(x);
		break;
	case EXECRUN_STARTING:
		r = step_start(x);
		break;
	case EXECRUN_INSPECTING:
		r = step_inspect(x);
		break;
	case EXECRUN_PAUSED:
	case EXECRUN_SETTLING:
	case EXECRUN_DONE:
	case _EXECRUN_STATE_MAX:
	default:
		assert(!"unreachable");
		r = -EINVAL;
	}
	if (r < 0)
		execrun_fail(x, r, 0, NULL);
}

/* A 409 "is paused": retried later while a freeze of ours holds the
 * container, or within FREEZE_STALE_BUDGET_MS of our own thaw of it (the
 * engine's Paused flag lags its unpause's answer: an exec create 2 ms after
 * our unpause can still be refused), else the refusal is the result. */
static void execrun_paused(struct execrun *x)
{
	if (!x->freezes ||
	    (!freeze_is_held(x->freezes, x->id) && !freeze_recently_unpaused(x->freezes, x->id))) {
		execrun_finish(x, -EBUSY);
		return;
	}
	log_debug("op", "exec in %.64s: paused by our own freeze; again in %d ms", x->id,
		  EXECRUN_PAUSED_RETRY_MS);
	x->refused = true;
	x->resume = x->state;
	execrun_set_state(x, EXECRUN_PAUSED);
	execrun_arm(x, x->timer, EXECRUN_PAUSED_RETRY_MS);
}

/* A create or start answered with a status other than success. */
static void execrun_refused(struct execrun *x, long status, const char *message)
{
	_cleanup_free_ char *fallback = message ? NULL : xasprintf("the engine answered HTTP %ld", status);

	execrun_set_failure(x, status, message ? message : fallback);
	if (status == 404)
		execrun_finish(x, -ENOENT);
	else if (status == 409 && message && strcasestr(message, "is paused"))
		execrun_paused(x);
	else if (status == 409 && message && strcasestr(message, "not running"))
		execrun_finish(x, -ESRCH);
	else
		execrun_finish(x, -EIO);
}

static void create_done_cb(const struct docker_reply *r, void *arg)
{
	struct execrun *x = arg;
	const char *eid;

	x->req = NULL;
	if (x->state == EXECRUN_DONE)
		return;   /* cancelled by execrun_finish */
	if (r->error < 0) {
		execrun_fail(x, transport_error(r->error), 0, NULL);
		return;
	}
	if (r->status != 201 && r->status != 200) {
		execrun_refused(x, r->status, r->message);
		return;
	}
	eid = json_string_value(json_object_get(r->body, "Id"));   /* borrows */
	if (!eid || !*eid) {
		execrun_fail(x, -EIO, r->status, "the engine's exec create reply has no Id");
		return;
	}
	x->refused = false;
	x->exec_id = xstrdup(eid);
	execrun_enter(x, EXECRUN_STARTING);
}

static void start_done_cb(int error, long status, const char *message, void *arg)
{
	struct execrun *x = arg;

	x->req = NULL;
	x->hijack = NULL;
	if (x->state == EXECRUN_DONE)
		return;   /* cancelled by execrun_finish */
	/* The process ran, or never will: a freeze may go on. */
	execrun_unmark(x);
	if (error < 0) {
		if (error != x->abort)
			execrun_set_failure(x, 0, NULL);
		execrun_finish(x, error);
		return;
	}
	if (status != 200) {
		execrun_refused(x, status, message);
		return;
	}
	if (!execrun_demux_is_between_frames(&x->dm)) {
		execrun_fail(x, -EIO, 0, "the exec output ended inside a frame");
		return;
	}
	x->refused = false;
	execrun_enter(x, EXECRUN_INSPECTING);
}

/* ExitCode of an exec that is no longer running, or the failure. */
static void inspect_result(struct execrun *x, const json_t *body)
{
	const json_t *code = json_object_get(body, "ExitCode");   /* borrows */
	json_int_t v;

	if (json_is_true(json_object_get(body, "Running"))) {
		if (x->inspects > EXECRUN_INSPECT_RETRIES) {
			execrun_fail(x, -EIO, 0, "the exec still runs after its output ended");
			return;
		}
		execrun_set_state(x, EXECRUN_SETTLING);
		execrun_arm(x, x->timer, EXECRUN_INSPECT_RETRY_MS);
		return;
	}
	if (!json_is_integer(code)) {
		execrun_fail(x, -EIO, 0, "the engine's exec inspect has no ExitCode");
		return;
	}
	v = json_integer_value(code);
	if (v < INT_MIN || v > INT_MAX) {
		execrun_fail(x, -EIO, 0, "the engine's exec inspect has an ExitCode out of range");
		return;
	}
	x->exit_code = (int)v;
	execrun_finish(x, 0);
}

static void inspect_done_cb(const struct docker_reply *r, void *arg)
{
	struct execrun *x = arg;

	x->req = NULL;
	if (x->state == EXECRUN_DONE)
		return;   /* cancelled by execrun_finish */
	if (r->error < 0) {
		execrun_fail(x, transport_error(r->error), 0, NULL);
		return;
	}
	if (r->status == 404) {
		execrun_fail(x, -ENOENT, r->status, r->message);
		return;
	}
	if (r->status != 200 || !json_is_object(r->body)) {
		_cleanup_free_ char *m = r->message ? NULL : xasprintf("the engine answered HTTP %ld", r->status);

		execrun_fail(x, -EIO, r->status, r->message ? r->message : m);
		return;
	}
	inspect_result(x, r->body);
}

/* ---- confirming the start ---------------------------------------------------------------- */

static void probe_done_cb(const struct docker_reply *r, void *arg);

/* Asks whether the process runs (marked, no probe in flight). */
static void execrun_probe(struct execrun *x)
{
	int r;

	if (!x->mark || x->probe)
		return;
	if (x->probes == EXECRUN_START_PROBES)
		log_warnx("%s: exec %.64s in %.64s: not confirmed started after %u inspects; the freeze "
			  "waiting on it keeps waiting (asked every %d ms now)", __func__, x->exec_id, x->id,
			  x->probes, EXECRUN_START_PROBE_SLOW_MS);
	x->probes++;
	r = docker_exec_inspect(x->e, x->exec_id, probe_done_cb, x, &x->probe);
	if (r < 0) {
		/* the engine is going away: the start's own end follows */
		x->probe = NULL;
		log_debug("op", "exec in %.64s: cannot ask whether it started: %s", x->id, strerror(-r));
	}
}

/* Started: the engine gave the process a Pid (set once the runtime has
 * started it; "Running" is set before, so it proves nothing), or it has
 * an ExitCode (it ran, or the runtime failed it). */
static bool probe_is_started(const json_t *body)
{
	const json_t *pid = json_object_get(body, "Pid");   /* borrows */

	return (json_is_integer(pid) && json_integer_value(pid) > 0) ||
	       json_is_integer(json_object_get(body, "ExitCode"));
}

static void probe_done_cb(const struct docker_reply *r, void *arg)
{
	struct execrun *x = arg;

	x->probe = NULL;
	if (x->state == EXECRUN_DONE || !x->mark || r->error == -ECANCELED)
		return;   /* unmarked, or the engine goes away (the start ends too) */
	if (r->error == 0 && r->status == 200 && json_is_object(r->body) && probe_is_started(r->body)) {
		log_debug("op", "exec in %.64s: confirmed started", x->id);
		execrun_unmark(x);
		return;
	}
	execrun_arm(x, x->timer,
		    x->probes < EXECRUN_START_PROBES ? EXECRUN_START_PROBE_MS : EXECRUN_START_PROBE_SLOW_MS);
}

/* The retry timer (PAUSED), the re-inspect timer (SETTLING), and the
 * mark's wake and next probe (STARTING). */
static void execrun_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct execrun *x = arg;

	switch (x->state) {
	case EXECRUN_PAUSED:
		execrun_enter(x, x->resume);
		break;
	case EXECRUN_SETTLING:
		execrun_enter(x, EXECRUN_INSPECTING);
		break;
	case EXECRUN_STARTING:
		execrun_probe(x);
		break;
	case EXECRUN_CREATING:
	case EXECRUN_INSPECTING:
	case EXECRUN_DONE:
	case _EXECRUN_STATE_MAX:
	default:
		assert(!"unreachable");
	}
}

/* The deadline: a budget spent on refusals of our own freeze returns the
 * last refusal (the command never ran); otherwise -ETIMEDOUT. */
static void execrun_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct execrun *x = arg;

	log_debug("op", "exec in %.64s: the deadline passed while %s", x->id, execrun_state_to_string(x->state));
	if (x->state == EXECRUN_PAUSED || (x->state == EXECRUN_CREATING && x->refused)) {
		execrun_finish(x, -EBUSY);
		return;
	}
	execrun_fail(x, -ETIMEDOUT, 0, NULL);
}

/* ---- starting ----------------------------------------------------------------------------- */

/* Counts argv against the limits: -EINVAL, -E2BIG or 0. */
static int spec_check(const struct execrun_spec *spec)
{
	size_t bytes = 0, n;

	if (!spec->argv || !spec->argv[0] || spec->timeout_ms < 0)
		return -EINVAL;
	if (spec->working_dir && spec->working_dir[0] != '/')
		return -EINVAL;
	if (spec->user && !*spec->user)
		return -EINVAL;
	for (n = 0; spec->argv[n]; n++) {
		if (n == EXECRUN_MAX_ARGS)
			return -E2BIG;
		bytes += strnlen(spec->argv[n], EXECRUN_MAX_ARGV_BYTES + 1);
		if (bytes > EXECRUN_MAX_ARGV_BYTES)
			return -E2BIG;
	}
	for (size_t i = 0; spec->env && spec->env[i]; i++) {
		if (n + i >= EXECRUN_MAX_ARGS || !strchr(spec->env[i], '=') || spec->env[i][0] == '=')
			return n + i >= EXECRUN_MAX_ARGS ? -E2BIG : -EINVAL;
		bytes += strnlen(spec->env[i], EXECRUN_MAX_ARGV_BYTES + 1);
		if (bytes > EXECRUN_MAX_ARGV_BYTES)
			return -E2BIG;
	}
	bytes += spec->working_dir ? strnlen(spec->working_dir, EXECRUN_MAX_ARGV_BYTES + 1) : 0;
	bytes += spec->user ? strnlen(spec->user, EXECRUN_MAX_ARGV_BYTES + 1) : 0;
	return bytes > EXECRUN_MAX_ARGV_BYTES ? -E2BIG : 0;
}

/* Sets key to the string s (NULL: left out): -EINVAL if s is not UTF-8. */
static int config_set_string(json_t *o, const char *key, const char *s)
{
	if (!s)
		return 0;
	return json_object_set_new(o, key, json_string(s)) < 0 ? -EINVAL : 0;
}

/* The exec create body of engine-api.md §2.3 for a checked spec. */
static int config_new(const struct execrun_spec *spec, json_t **ret)
{
	json_auto_t *cfg = json_pack("{sbsbsbsb}", "AttachStdin", spec->attach_stdin, "AttachStdout", 1,
				     "AttachStderr", 1, "Tty", 0);
	json_t *cmd = json_array();
	int r;

	if (!cfg || !cmd || json_object_set_new(cfg, "Cmd", cmd) < 0)
		return -ENOMEM;
	for (size_t i = 0; spec->argv[i]; i++)
		if (json_array_append_new(cmd, json_string(spec->argv[i])) < 0)
			return -EINVAL;   /* not UTF-8 */
	if (spec->env) {
		json_t *env = json_array();

		if (!env || json_object_set_new(cfg, "Env", env) < 0)
			return -ENOMEM;
		for (size_t i = 0; spec->env[i]; i++)
			if (json_array_append_new(env, json_string(spec->env[i])) < 0)
				return -EINVAL;   /* not UTF-8 */
	}
	r = config_set_string(cfg, "WorkingDir", spec->working_dir);
	if (r >= 0)
		r = config_set_string(cfg, "User", spec->user);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(cfg);
	return 0;
}

int execrun_start(struct event_base *base, struct engine *e, struct freeze_table *freezes,
		  const char *id, const struct execrun_spec *spec, execrun_cb *cb, void *arg,
		  struct execrun **ret)
{
	json_t *config = NULL;
	struct execrun *x;
	int r;

	if (!base || !e || !id || !*id || !spec || !cb)
		return -EINVAL;
	if (spec->attach_stdin && engine_get_endpoint(e) && engine_get_endpoint(e)->kind == ENGINE_ENDPOINT_TCP &&
	    engine_get_endpoint(e)->tls)
		return -EPROTONOSUPPORT;
	r = spec_check(spec);
	if (r >= 0)
		r = config_new(spec, &config);
	if (r < 0)
		return r;
	x = xcalloc(1, sizeof(*x));
	x->e = e;
	x->freezes = freezes;
	x->id = xstrdup(id);
	x->config = config;
	x->cb = cb;
	x->arg = arg;
	x->max_output = spec->max_output ? spec->max_output : EXECRUN_DEFAULT_MAX_OUTPUT;
	x->on_output = spec->on_output;
	x->output_arg = spec->output_arg;
	x->attach_stdin = spec->attach_stdin;
	x->state = EXECRUN_CREATING;
	x->deadline = evtimer_new(base, execrun_deadline_cb, x);
	x->timer = evtimer_new(base, execrun_timer_cb, x);
	if (!x->deadline || !x->timer) {
		execrun_free(x);
		return -ENOMEM;
	}
	if (freezes && freeze_exec_must_wait(freezes, x->id)) {
		execrun_wait_freeze(x, EXECRUN_CREATING);
	} else if ((r = step_create(x)) < 0) {
		execrun_free(x);
		return r;
	}
	if (spec->timeout_ms > 0)
		execrun_arm(x, x->deadline, spec->timeout_ms);
	log_debug("op", "exec in %.64s: %.64s", x->id, spec->argv[0]);
	if (ret)
		*ret = x;
	return 0;
}

void execrun_cancel(struct execrun *x)
{
	if (!x)
		return;
	execrun_fail(x, -ECANCELED, 0, NULL);
}

int execrun_stdin_write(struct execrun *x, const uint8_t *p, size_t n, bool eof, execrun_stdin_cb *cb, void *arg)
{
	int r;

	if (!x || !cb || (!p && n) || !x->attach_stdin)
		return -EINVAL;
	if (x->state == EXECRUN_DONE)
		return -EPIPE;
	if (x->in_active)
		return -EBUSY;
	x->in_p = p;
	x->in_n = n;
	x->in_eof = eof;
	x->in_cb = cb;
	x->in_arg = arg;
	x->in_active = true;
	x->in_submitted = false;
	r = execrun_in_submit(x);
	if (r < 0) {
		x->in_active = false;
		return r;
	}
	return 0;
}
