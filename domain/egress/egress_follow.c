/* egress_follow.c — the proxies' log followers: cursors, coalescing,
 * publishing, draining (egress_follow.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "egress_follow.h"
#include "egresslog.h"
#include "engine.h"
#include "log.h"
#include "names.h"
#include "rfc3339.h"
#include "subnet.h"
#include "xmalloc.h"

#define EGRESS_CURSOR_DIR      "egress"
#define EGRESS_TS_MAX          40

struct follower;

TAILQ_HEAD(follower_list, follower);

struct egress_follow {
	struct domain *d;
	egress_follow_ready_fn *ready;
	void *ready_arg;
	struct follower_list followers;
	struct engine_req *list_req;     /* the proxies' listing (egress_follow_recover) */
	uint64_t published;          /* decisions published (an event of count n: n) */
	uint64_t seen;               /* decisions read, each once */
	uint64_t coalesced;          /* of the published, those in events of count > 1 */
	uint64_t events;             /* events published */
	uint64_t pauses;             /* follow streams paused at EGRESS_BYTES_PER_TURN */
	uint64_t not_logged;         /* decisions over EGRESS_LOG_PER_SECOND: counted, not logged */
	char *cursor_dir;
	bool closing;                /* egress_follow_close: start nothing new */
};

/* ---- followers: one per proxy container ----------------------------------- */

struct drain_waiter {
	egress_drain_cb *cb;
	void *arg;
};

struct follower {
	struct egress_follow *fl;
	TAILQ_ENTRY(follower) entry;
	char id[NAMES_ID_HEX + 1];
	char proxy[EGRESS_NAME_MAX];
	char workload[NAMES_CONTAINER_MAX];
	bool key_known;
	struct msb_key key;
	char *kind;
	uid_t owner;                 /* (uid_t)-1: unknown (admins only) */
	struct egress_info info;
	bool info_known;
	/* the stream */
	struct engine_req *req;
	bool streaming;              /* a follow stream is open */
	bool ready;                  /* "listening" seen (or decisions already made) */
	bool gone;                   /* the proxy stopped or was removed */
	struct event *retry_ev;
	struct event *ready_ev;      /* tells waiting ops, from the loop */
	/* demultiplexing */
	unsigned char hdr[8];
	size_t hdr_have, frame_left;
	int frame_stream;
	char line[EGRESS_LINE_MAX];
	size_t line_len;
	bool line_overflow;
	/* the cursor: the last published decision's time and its rank there */
	struct rfc3339_time cur;
	unsigned long cur_n;
	bool cursor_dirty;
	struct rfc3339_time read;       /* this stream's current timestamp and count */
	unsigned long read_n;
	/* held decisions (egresslog.h's coalescing): the cursor moves past them
	 * only once they are published */
	struct egress_coalesce co;
	struct rfc3339_time held_cur;
	unsigned long held_cur_n;
	struct event *flush_ev;      /* the window's end */
	/* the work of one loop turn: EGRESS_BYTES_PER_TURN of the log, then the
	 * stream pauses until the next turn (turn_ev, a zero timer: it runs after
	 * the loop has polled, so clients are served in between) */
	size_t turn_bytes;
	bool paused;
	struct event *turn_ev;
	/* the daemon's log: at most EGRESS_LOG_PER_SECOND decision lines a second */
	time_t log_second;
	unsigned log_count;
	unsigned long log_suppressed;
	unsigned long log_suppressed_allow;   /* of those, ALLOW */
	/* draining */
	bool draining;
	struct drain_waiter *drains;
	size_t n_drains;
	int drain_error;
};


static void follower_start(struct follower *f);
static void follower_free(struct follower *f);

static struct engine *fl_engine(const struct egress_follow *fl)
{
	return fl->d->engine;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "NAME-proxy" → "NAME" in out. */
static void workload_of(const char *proxy, char *out, size_t n)
{
	size_t len = strlen(proxy) - (ends_with(proxy, EGRESS_PROXY_SUFFIX) ? strlen(EGRESS_PROXY_SUFFIX) : 0);

	snprintf(out, n, "%.*s", (int)len, proxy);
}

/* ---- cursors -------------------------------------------------------------- */

static char *cursor_path(const struct follower *f)
{
	return xasprintf("%s/%s", f->fl->cursor_dir, f->id);
}

static void cursor_load(struct follower *f)
{
	_cleanup_free_ char *path = cursor_path(f);
	FILE *fp = fopen(path, "re");
	long long s;
	long ns;
	unsigned long n;

	if (!fp)
		return;
	if (fscanf(fp, "%lld %ld %lu", &s, &ns, &n) == 3 && ns >= 0 && ns < 1000000000L) {
		f->cur = (struct rfc3339_time){ .s = s, .ns = (int32_t)ns };
		f->cur_n = n;
	} else {
		log_warnx("egress: cursor %s is unreadable; publishing the proxy's log from its start", path);
	}
	fclose(fp);
}

/* One fixed-width record, written in place by one pwrite() at offset 0: it
 * always covers the record before it (any earlier, shorter format too), so
 * a kill never leaves half a cursor, and no file is made or renamed per save
 * (a create and a rename per chunk of a busy proxy's log cost the loop disk
 * waits: finding 3 of issue 17). Saved once per chunk of the log stream. */
#define CURSOR_RECORD_FMT "%020lld %09ld %020lu\n"
#define CURSOR_RECORD_LEN (20 + 1 + 9 + 1 + 20 + 1)

static void cursor_save(struct follower *f)
{
	_cleanup_free_ char *path = NULL;
	char rec[CURSOR_RECORD_LEN + 1];
	int fd, n;

	if (!f->cursor_dirty)
		return;
	f->cursor_dirty = false;
	path = cursor_path(f);
	n = snprintf(rec, sizeof(rec), CURSOR_RECORD_FMT, (long long)f->cur.s, (long)f->cur.ns, f->cur_n);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		log_warn("egress: cannot write cursor %s", path);
		return;
	}
	if (n != CURSOR_RECORD_LEN || pwrite(fd, rec, CURSOR_RECORD_LEN, 0) != CURSOR_RECORD_LEN)
		log_warn("egress: cannot write cursor %s", path);
	close(fd);
}

static void cursor_remove(struct egress_follow *fl, const char *id)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", fl->cursor_dir, id);

	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("egress: cannot remove cursor %s", path);
}

/* ---- publishing ----------------------------------------------------------- */

/* Says how many decisions of f's last second were not logged, if any. */
static void log_suppressed_say(struct follower *f)
{
	if (f->log_suppressed)
		log_info("egress: %lu more decisions of sandbox %s (%lu of them ALLOW) were not logged (over %d a "
			 "second); their events were published", f->log_suppressed, f->workload,
			 f->log_suppressed_allow, EGRESS_LOG_PER_SECOND);
	f->log_suppressed = 0;
	f->log_suppressed_allow = 0;
}

/* The daemon's log: at most EGRESS_LOG_PER_SECOND decision lines a second
 * per proxy, whatever their verdict (a guest can make ALLOW decisions as
 * fast as DENY ones, and each line is a blocking write on the loop), the
 * rest counted (fl->not_logged) and said once a second. */
static void log_decision(struct follower *f, const struct egress_decision *dec)
{
	time_t now = time(NULL);

	if (now != f->log_second) {
		log_suppressed_say(f);
		f->log_second = now;
		f->log_count = 0;
	}
	if (f->log_count < EGRESS_LOG_PER_SECOND) {
		f->log_count++;
		log_info("egress: %s %s:%u%s%s (sandbox %s)", egress_verdict_to_string(dec->verdict), dec->host,
			 dec->port, dec->reason ? " " : "", dec->reason ? egress_reason_to_log(dec->reason) : "",
			 f->workload);
		return;
	}
	f->log_suppressed++;
	f->log_suppressed_allow += dec->verdict == EGRESS_ALLOW;
	f->fl->not_logged++;
}

/* One event for count decisions (first_ts: the first one's time when
 * count > 1; ts: the last one's). */
static void publish(struct follower *f, const struct egress_decision *dec, uint64_t count, const char *first_ts,
		    const char *ts)
{
	struct egress_follow *fl = f->fl;
	json_t *params;

	fl->published += count;
	if (count > 1)
		fl->coalesced += count;
	if (!f->key_known || !fl->d->publish)
		return;   /* unattributable: logged only (behaviour-docker §4.5) */
	fl->events++;
	params = json_pack("{s:s, s:o, s:s?, s:s, s:s, s:s, s:i, s:s, s:I}", "type", "egress.decision",
			   "key", msb_key_encode(&f->key), "kind", f->kind, "sandbox", f->workload,
			   "decision", egress_verdict_to_string(dec->verdict), "host", dec->host,
			   "port", (int)dec->port, "time", ts, "count", (json_int_t)count);
	if (count > 1)
		json_object_set_new(params, "first_time", json_string(first_ts));
	if (egress_reason_to_string(dec->reason))
		json_object_set_new(params, "reason", json_string(egress_reason_to_string(dec->reason)));
	fl->d->publish(fl->d->out_arg, DOMAIN_EVENT_EGRESS_DECISION, f->owner, f->key.scope, "events.event",
		       params);
	json_decref(params);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void publish_held_cb(const struct egress_held *h, void *arg)
{
	publish(arg, &h->dec, h->count, h->first_ts, h->last_ts);
}

/* Publishes what f holds; the cursor then moves past it. In the daemon's
 * last teardown (closing, the server gone) it stays held: the cursor stays
 * before it and a later daemon publishes it. */
static void follower_flush(struct follower *f)
{
	if (f->co.held_total == 0 || (f->fl->closing && !f->fl->d->publish))
		return;
	egress_coalesce_flush(&f->co, publish_held_cb, f);
	f->cur = f->held_cur;
	f->cur_n = f->held_cur_n;
	f->cursor_dirty = true;
	evtimer_del(f->flush_ev);
}

static void follower_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct follower *f = arg;

	(void)fd, (void)what;
	follower_flush(f);
	cursor_save(f);
}

/* Something is held: publish it when its window ends. */
static void follower_arm_flush(struct follower *f)
{
	int64_t left = egress_coalesce_deadline(&f->co) - mono_ms();
	struct timeval tv;

	if (evtimer_pending(f->flush_ev, NULL))
		return;
	if (left < 0)
		left = 0;
	tv = (struct timeval){ (time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000 };
	evtimer_add(f->flush_ev, &tv);
}

/* A decision read for the first time, at position (t, n) of the log. */
static void decide(struct follower *f, const struct egress_decision *dec, const char *ts,
		   const struct rfc3339_time *t, unsigned long n)
{
	int64_t now = mono_ms();

	f->fl->seen++;
	log_decision(f, dec);
	if (egress_coalesce_due(&f->co, now))
		follower_flush(f);
	if (egress_coalesce_add(&f->co, dec, ts, now) == EGRESS_COALESCE_HELD) {
		f->held_cur = *t;
		f->held_cur_n = n;
		follower_arm_flush(f);
		return;
	}
	f->cur = *t;
	f->cur_n = n;
	f->cursor_dirty = true;
	publish(f, dec, 1, ts, ts);
}

/* One complete log line "TIMESTAMP TEXT". */
static void follower_line(struct follower *f, const char *line, size_t len)
{
	const char *sp = memchr(line, ' ', len);
	struct egress_decision dec;
	char ts[EGRESS_TS_MAX];
	struct rfc3339_time t;

	if (!sp || (size_t)(sp - line) >= sizeof(ts))
		return;
	snprintf(ts, sizeof(ts), "%.*s", (int)(sp - line), line);
	if (rfc3339_parse(ts, &t) < 0)
		return;
	sp++;
	len -= (size_t)(sp - line);
	if (egresslog_is_ready(sp, len)) {
		if (!f->ready) {
			f->ready = true;
			event_active(f->ready_ev, EV_TIMEOUT, 0);
		}
		return;
	}
	if (egresslog_parse(sp, len, &dec) != 1)
		return;
	if (rfc3339_cmp(&t, &f->read) != 0) {
		f->read = t;
		f->read_n = 0;
	}
	f->read_n++;
	if (rfc3339_cmp(&t, &f->cur) < 0 || (rfc3339_cmp(&t, &f->cur) == 0 && f->read_n <= f->cur_n))
		return;   /* published before */
	if (f->co.held_total > 0 &&
	    (rfc3339_cmp(&t, &f->held_cur) < 0 ||
	     (rfc3339_cmp(&t, &f->held_cur) == 0 && f->read_n <= f->held_cur_n)))
		return;   /* held already (a stream read again while it holds) */
	decide(f, &dec, ts, &t, f->read_n);
}

static void follower_bytes(struct follower *f, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			if (!f->line_overflow)
				follower_line(f, f->line, f->line_len);
			f->line_len = 0;
			f->line_overflow = false;
		} else if (f->line_len < sizeof(f->line)) {
			f->line[f->line_len++] = p[i];
		} else {
			f->line_overflow = true;
		}
	}
}

static const struct timeval zero_tv = { 0, 0 };

/* A new loop turn: the budget is whole again, and a paused stream goes on. */
static void follower_turn_cb(evutil_socket_t fd, short what, void *arg)
{
	struct follower *f = arg;

	(void)fd, (void)what;
	f->turn_bytes = 0;
	if (f->paused) {
		f->paused = false;
		/* may hand the kept chunk now, and if that ends the stream (a
		 * bad frame: -EPROTO) follower_done_cb runs inside: f may be
		 * gone after this, and nothing here touches it again */
		if (f->req)
			engine_req_resume(f->req);
	}
}

/* Inside the transfer: demultiplexes the 8-byte-headed frames. A chunk is
 * taken whole or not at all: once this turn's budget is spent it is left
 * with libcurl until the next turn. */
static int follower_data_cb(const void *data, size_t len, void *arg)
{
	struct follower *f = arg;
	const unsigned char *p = data;

	if (f->turn_bytes >= EGRESS_BYTES_PER_TURN) {
		f->paused = true;
		f->fl->pauses++;
		return ENGINE_DATA_PAUSE;
	}
	f->turn_bytes += len;
	if (!evtimer_pending(f->turn_ev, NULL))
		evtimer_add(f->turn_ev, &zero_tv);
	while (len > 0) {
		if (f->frame_left == 0) {
			size_t take = sizeof(f->hdr) - f->hdr_have;

			if (take > len)
				take = len;
			memcpy(f->hdr + f->hdr_have, p, take);
			f->hdr_have += take;
			p += take;
			len -= take;
			if (f->hdr_have < sizeof(f->hdr))
				break;
			f->hdr_have = 0;
			f->frame_stream = f->hdr[0];
			f->frame_left = (size_t)f->hdr[4] << 24 | (size_t)f->hdr[5] << 16 |
					(size_t)f->hdr[6] << 8 | f->hdr[7];
			if (f->frame_stream > 2)
				return -EPROTO;
			continue;
		}
		{
			size_t take = f->frame_left < len ? f->frame_left : len;

			if (f->frame_stream == 1)
				follower_bytes(f, (const char *)p, take);
			p += take;
			len -= take;
			f->frame_left -= take;
		}
	}
	cursor_save(f);
	return 0;
}

static void follower_reset_stream(struct follower *f)
{
	f->paused = false;
	f->hdr_have = f->frame_left = 0;
	f->line_len = 0;
	f->line_overflow = false;
	f->read = (struct rfc3339_time){ 0 };
	f->read_n = 0;
}

static void drain_finish(struct follower *f, int error)
{
	struct drain_waiter *w = f->drains;
	size_t n = f->n_drains;

	f->drains = NULL;
	f->n_drains = 0;
	f->draining = false;
	for (size_t i = 0; i < n; i++)
		w[i].cb(error, w[i].arg);
	free(w);
}

static void follower_done_cb(int error, long status, const char *message, void *arg)
{
	struct follower *f = arg;
	struct timeval tv = { EGRESS_FOLLOW_RETRY_MS / 1000, (EGRESS_FOLLOW_RETRY_MS % 1000) * 1000 };

	f->req = NULL;
	f->streaming = false;
	/* What is left in the line buffer without its LF is not a whole line.
	 * What is held is published now: a drain's waiter (a dispose) sees it. */
	follower_flush(f);
	cursor_save(f);
	if (f->draining) {
		if (error == -ECANCELED && f->n_drains > 0 && !f->gone && !f->fl->closing) {
			/* the live stream was cancelled to read what is left: do that */
			follower_start(f);
			return;
		}
		if (error < 0 || status != 200)
			log_warnx("egress: the log of proxy %s could not be read whole: %s", f->proxy,
				  message ? message : error < 0 ? strerror(-error) : "engine refused");
		drain_finish(f, error < 0 ? error : status == 200 ? 0 : -EIO);
		return;
	}
	if (error == -ECANCELED)
		return;
	if (status == 404) {
		/* removed behind our back (or by a drain that is done): forget it */
		cursor_remove(f->fl, f->id);
		follower_free(f);
		return;
	}
	/* The stream ended: the proxy stopped, or the engine went away. Look again soon. */
	evtimer_add(f->retry_ev, &tv);
}

/* Opens the log stream from the cursor: a follow stream, or while draining
 * a read of what is there. */
static void follower_start(struct follower *f)
{
	char since[48];
	int r;

	if (f->fl->closing) {
		if (f->draining)
			drain_finish(f, -ECANCELED);
		return;
	}
	if (f->req)
		return;   /* one request at a time: a second stream would interleave in the demultiplexer */
	follower_reset_stream(f);
	if (f->cur.s > 0)
		snprintf(since, sizeof(since), "%lld.%09ld", (long long)f->cur.s, (long)f->cur.ns);
	r = docker_container_logs(fl_engine(f->fl), f->id, !f->draining, f->cur.s > 0 ? since : NULL,
				  f->draining ? EGRESS_DRAIN_IDLE_MS : 0, follower_data_cb, follower_done_cb, f,
				  &f->req);
	if (r < 0) {
		f->req = NULL;
		if (f->draining) {
			drain_finish(f, r);
			return;
		}
		return;   /* the engine is away: the next resync follows it again */
	}
	f->streaming = !f->draining;
}

static void follower_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct follower *f = arg;
	const json_t *state = json_object_get(r->body, "State");

	f->req = NULL;
	if (r->error == -ECANCELED) {
		/* a drain cancelled this look to read the log itself: do that */
		if (f->draining && f->n_drains > 0 && !f->fl->closing)
			follower_start(f);
		return;
	}
	if (f->draining) {
		/* a drain began while this look was under way: the drain reads the log */
		return;
	}
	if (r->error == 0 && r->status == 404) {
		cursor_remove(f->fl, f->id);
		follower_free(f);
		return;
	}
	if (r->error == 0 && r->status == 200 && json_is_true(json_object_get(state, "Running")))
		follower_start(f);
	/* stopped: its decisions are read by the drain before it is removed */
}

static void follower_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct follower *f = arg;

	(void)fd, (void)what;
	if (f->req || f->draining)
		return;
	if (docker_container_inspect(fl_engine(f->fl), f->id, follower_inspect_cb, f, &f->req) < 0)
		f->req = NULL;
}

static void follower_ready_cb(evutil_socket_t fd, short what, void *arg)
{
	struct follower *f = arg;

	(void)fd, (void)what;
	f->fl->ready(f->id, f->fl->ready_arg);
}

static struct follower *follower_find_id(const struct egress_follow *fl, const char *id)
{
	struct follower *f;

	TAILQ_FOREACH(f, &fl->followers, entry)
		if (strcmp(f->id, id) == 0)
			return f;
	return NULL;
}

/* By id, or by proxy name. */
static struct follower *follower_find_ref(const struct egress_follow *fl, const char *ref)
{
	struct follower *f;

	TAILQ_FOREACH(f, &fl->followers, entry)
		if (strcmp(f->id, ref) == 0 || strcmp(f->proxy, ref) == 0)
			return f;
	return NULL;
}

static struct follower *follower_find_workload(const struct egress_follow *fl, const char *name)
{
	struct follower *f;

	TAILQ_FOREACH(f, &fl->followers, entry)
		if (strcmp(f->workload, name) == 0 && !f->gone)
			return f;
	return NULL;
}

/* A follower for the proxy container with this id, name and labels. */
static struct follower *follower_new(struct egress_follow *fl, const char *id, const char *name, const json_t *labels)
{
	struct follower *f = xcalloc(1, sizeof(*f));
	const char *owner = json_string_value(json_object_get(labels, LABEL_OWNER));
	const json_t *raw = NULL;
	_cleanup_(json_decrefp) json_t *raw_key = NULL;

	f->fl = fl;
	snprintf(f->id, sizeof(f->id), "%s", id);
	snprintf(f->proxy, sizeof(f->proxy), "%s", name[0] == '/' ? name + 1 : name);
	workload_of(f->proxy, f->workload, sizeof(f->workload));
	f->owner = (uid_t)-1;
	if (owner && *owner) {
		char *end;
		unsigned long u = strtoul(owner, &end, 10);

		if (!*end && u < (unsigned long)(uid_t)-1)
			f->owner = (uid_t)u;
	}
	f->key_known = egresslog_key_decode(json_string_value(json_object_get(labels, LABEL_KEY_V1)), labels,
					    &f->key) == 0;
	if (json_string_value(json_object_get(labels, LABEL_KEY_JSON)))
		raw_key = json_loads(json_string_value(json_object_get(labels, LABEL_KEY_JSON)), 0, NULL);
	raw = json_array_get(raw_key, 4);
	f->kind = xstrdup(json_is_string(raw) ? json_string_value(raw) :
			  json_string_value(json_object_get(labels, LABEL_KIND)) ?
			  json_string_value(json_object_get(labels, LABEL_KIND)) : "");
	f->retry_ev = evtimer_new(fl->d->base, follower_retry_cb, f);
	f->ready_ev = event_new(fl->d->base, -1, 0, follower_ready_cb, f);
	f->flush_ev = evtimer_new(fl->d->base, follower_flush_cb, f);
	f->turn_ev = evtimer_new(fl->d->base, follower_turn_cb, f);
	if (!f->retry_ev || !f->ready_ev || !f->flush_ev || !f->turn_ev)
		fatalx("%s: cannot create an event", __func__);
	cursor_load(f);
	if (f->cur.s > 0)
		f->ready = true;   /* it has made decisions, so it was listening */
	TAILQ_INSERT_TAIL(&fl->followers, f, entry);
	return f;
}

static void follower_free(struct follower *f)
{
	if (!f)
		return;
	TAILQ_REMOVE(&f->fl->followers, f, entry);
	log_suppressed_say(f);
	if (f->req) {
		struct engine_req *req = f->req;

		f->draining = false;
		f->n_drains = 0;
		f->gone = true;
		f->req = NULL;
		engine_req_cancel(req);
	}
	free(f->drains);
	event_free(f->retry_ev);
	event_free(f->ready_ev);
	event_free(f->flush_ev);
	event_free(f->turn_ev);
	if (f->key_known)
		msb_key_release(&f->key);
	free(f->kind);
	free(f);
}

/* ---- draining --------------------------------------------------------------- */

struct drain_op {
	struct egress_follow *fl;
	char id[NAMES_ID_HEX + 1];
	egress_drain_cb *cb;
	void *arg;
	struct engine_req *req;
};

static void drain_add(struct follower *f, egress_drain_cb *cb, void *arg)
{
	f->drains = xrealloc(f->drains, (f->n_drains + 1) * sizeof(*f->drains));
	f->drains[f->n_drains++] = (struct drain_waiter){ .cb = cb, .arg = arg };
}

/* The proxy is stopped (or gone): read what is left of its log. */
static void drain_read(struct follower *f)
{
	evtimer_del(f->retry_ev);
	if (f->req) {
		/* cancel what is in flight (the live stream, or a look at the
		 * container before following it again); its callback starts the read */
		struct engine_req *req = f->req;

		engine_req_cancel(req);
		return;
	}
	follower_start(f);
}

static void drain_stopped_cb(const struct docker_reply *r, void *arg)
{
	struct drain_op *dop = arg;
	struct follower *f = follower_find_id(dop->fl, dop->id);

	if (r->error == -ECANCELED || !f) {
		dop->cb(r->error == -ECANCELED ? -ECANCELED : 0, dop->arg);
		free(dop);
		return;
	}
	if (r->error || (r->status != 204 && r->status != 304 && r->status != 404))
		log_warnx("egress: the proxy %s could not be stopped before its log was read: %s", f->proxy,
			  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
	if (r->error == 0 && r->status == 404) {
		dop->cb(0, dop->arg);   /* gone, and its log with it */
		free(dop);
		return;
	}
	drain_add(f, dop->cb, dop->arg);
	free(dop);
	if (f->n_drains == 1) {
		f->draining = true;
		drain_read(f);
	}
}

static void drain_inspected_cb(const struct docker_reply *r, void *arg)
{
	struct drain_op *dop = arg;
	const json_t *labels = json_object_get(json_object_get(r->body, "Config"), "Labels");
	const char *role = json_string_value(json_object_get(labels, LABEL_ROLE));
	const char *id = json_string_value(json_object_get(r->body, "Id"));

	if (r->error == 0 && r->status == 200 && id && names_id_is_full(id))
		snprintf(dop->id, sizeof(dop->id), "%s", id);   /* asked by name: go on by id */
	if (r->error == 0 && r->status == 200 && role && strcmp(role, "proxy") == 0 &&
	    names_id_is_full(dop->id) && !follower_find_id(dop->fl, dop->id))
		follower_new(dop->fl, dop->id, json_string_value(json_object_get(r->body, "Name")), labels);
	if (r->error == -ECANCELED || !follower_find_id(dop->fl, dop->id)) {
		/* absent, unreadable or not a proxy: nothing to publish */
		dop->cb(r->error == -ECANCELED ? -ECANCELED : 0, dop->arg);
		free(dop);
		return;
	}
	if (docker_container_stop(fl_engine(dop->fl), dop->id, EGRESS_PROXY_STOP_GRACE_S, drain_stopped_cb, dop,
				  NULL) < 0) {
		dop->cb(-ENOTCONN, dop->arg);
		free(dop);
	}
}

int egress_follow_drain(struct egress_follow *fl, const char *proxy_id, egress_drain_cb *cb, void *arg)
{
	struct drain_op *dop;
	int r;

	if (!proxy_id || !*proxy_id || strlen(proxy_id) > NAMES_ID_HEX || !cb)
		return -EINVAL;
	dop = xcalloc(1, sizeof(*dop));
	dop->fl = fl;
	snprintf(dop->id, sizeof(dop->id), "%s", proxy_id);
	dop->cb = cb;
	dop->arg = arg;
	if (follower_find_id(fl, proxy_id) && names_id_is_full(proxy_id))
		r = docker_container_stop(fl_engine(fl), proxy_id, EGRESS_PROXY_STOP_GRACE_S, drain_stopped_cb,
					  dop, NULL);
	else
		r = docker_container_inspect(fl_engine(fl), proxy_id, drain_inspected_cb, dop, NULL);
	if (r < 0)
		free(dop);
	return r;
}

void egress_follow_removed(struct egress_follow *fl, const char *proxy_id)
{
	struct follower *f;

	if (!proxy_id)
		return;
	f = follower_find_ref(fl, proxy_id);
	if (f && f->n_drains > 0)
		return;   /* a drain still reads it; it is forgotten when its stream ends */
	if (f) {
		char id[sizeof(f->id)];

		/* the follower first: cancelling its stream publishes what it
		 * holds and saves its cursor; the cursor goes after that */
		snprintf(id, sizeof(id), "%s", f->id);
		follower_free(f);
		cursor_remove(fl, id);
	} else if (names_id_is_full(proxy_id)) {
		cursor_remove(fl, proxy_id);
	}
}

bool egress_follow_proxy_ok(const struct egress_follow *fl, const char *name, struct egress_info *info)
{
	struct follower *f = follower_find_workload(fl, name);

	if (!f || !f->streaming || !f->ready || !f->info_known || f->draining)
		return false;
	*info = f->info;
	return true;
}

static void follower_set_info(struct egress_follow *fl, struct follower *f, const json_t *obj)
{
	char net[EGRESS_NAME_MAX];
	const char *addr;
	_cleanup_free_ char *cidr = NULL;
	struct subnet_block b;

	snprintf(net, sizeof(net), "%s%s", f->workload, EGRESS_NET_SUFFIX);
	addr = egress_proxy_address_of(obj, net);
	if (!addr || !*addr)
		return;
	cidr = xasprintf("%s/%ld", addr, fl->d->config->egress_block_prefix);
	if (subnet_block_from_cidr(cidr, (unsigned)fl->d->config->egress_block_prefix, &b) < 0)
		return;
	egress_info_fill(&f->info, f->workload, addr, &b);
	f->info_known = true;
}

static void proxies_listed_cb(const struct docker_reply *r, void *arg)
{
	struct egress_follow *fl = arg;
	size_t i;
	json_t *item;

	fl->list_req = NULL;
	if (r->error || r->status != 200 || !json_is_array(r->body))
		return;
	json_array_foreach(r->body, i, item) {
		const char *id = json_string_value(json_object_get(item, "Id"));
		const char *name = json_string_value(json_array_get(json_object_get(item, "Names"), 0));
		const char *state = json_string_value(json_object_get(item, "State"));
		struct follower *f;

		if (!id || !name || !names_id_is_full(id))
			continue;
		if (name[0] == '/')
			name++;
		if (!names_is_ours(name, EGRESS_PROXY_SUFFIX))
			continue;
		f = follower_find_id(fl, id);
		if (!f)
			f = follower_new(fl, id, name, json_object_get(item, "Labels"));
		follower_set_info(fl, f, item);
		if (state && strcmp(state, "running") == 0 && !f->req && !f->draining)
			follower_start(f);
	}
}
void egress_follow_recover(struct egress_follow *fl)
{
	json_t *filters;

	if (fl->list_req || fl->closing)
		return;
	filters = json_pack("{s:{s:b}}", "label", LABEL_ROLE "=proxy", 1);
	if (docker_containers_list(fl_engine(fl), filters, proxies_listed_cb, fl, &fl->list_req) < 0)
		fl->list_req = NULL;
	json_decref(filters);
}

void egress_follow_watch(struct egress_follow *fl, const char *id, const char *name, const json_t *labels)
{
	struct follower *f = follower_find_id(fl, id);

	if (!f)
		f = follower_new(fl, id, name, labels);
	if (!f->req && !f->draining)
		follower_start(f);
}

bool egress_follow_ready_set(struct egress_follow *fl, const char *id, const struct egress_info *info)
{
	struct follower *f = follower_find_id(fl, id);

	if (!f || !f->ready)
		return false;
	f->info = *info;
	f->info_known = true;
	return true;
}

const char *egress_follow_proxy_of(const struct egress_follow *fl, const char *name)
{
	const struct follower *f = follower_find_workload(fl, name);

	return f ? f->id : NULL;
}

uint64_t egress_follow_published(const struct egress_follow *fl)
{
	return fl->published;
}

/* Decisions held now, by every follower, until their window ends. */
static uint64_t decisions_held(const struct egress_follow *fl)
{
	const struct follower *f;
	uint64_t n = 0;

	TAILQ_FOREACH(f, &fl->followers, entry)
		n += f->co.held_total;
	return n;
}

void egress_follow_status_add(const struct egress_follow *fl, json_t *o)
{
	const struct follower *f;
	size_t followed = 0;

	TAILQ_FOREACH(f, &fl->followers, entry)
		followed += f->streaming;
	json_object_set_new(o, "proxies_followed", json_integer((json_int_t)followed));
	json_object_set_new(o, "decisions_published", json_integer((json_int_t)fl->published));
	json_object_set_new(o, "decisions_seen", json_integer((json_int_t)fl->seen));
	json_object_set_new(o, "decisions_held", json_integer((json_int_t)decisions_held(fl)));
	json_object_set_new(o, "decisions_coalesced", json_integer((json_int_t)fl->coalesced));
	json_object_set_new(o, "events_published", json_integer((json_int_t)fl->events));
	json_object_set_new(o, "stream_pauses", json_integer((json_int_t)fl->pauses));
	json_object_set_new(o, "decisions_not_logged", json_integer((json_int_t)fl->not_logged));
}

/* ---- lifetime ----------------------------------------------------------------- */

struct egress_follow *egress_follow_new(struct domain *d, bool configured, egress_follow_ready_fn *ready,
					void *arg)
{
	struct egress_follow *fl = xcalloc(1, sizeof(*fl));

	fl->d = d;
	fl->ready = ready;
	fl->ready_arg = arg;
	TAILQ_INIT(&fl->followers);
	fl->cursor_dir = xasprintf("%s/%s", d->config->egress_state_dir, EGRESS_CURSOR_DIR);
	if (configured) {
		if (mkdir(d->config->egress_state_dir, 0700) < 0 && errno != EEXIST)
			log_warn("egress: cannot create %s; decisions published before a restart may be "
				 "published again", d->config->egress_state_dir);
		if (mkdir(fl->cursor_dir, 0700) < 0 && errno != EEXIST)
			log_warn("egress: cannot create %s", fl->cursor_dir);
	}
	return fl;
}

void egress_follow_close(struct egress_follow *fl)
{
	fl->closing = true;
}

struct egress_follow *egress_follow_free(struct egress_follow *fl)
{
	struct follower *f;

	if (!fl)
		return NULL;
	while ((f = TAILQ_FIRST(&fl->followers)))
		follower_free(f);
	if (fl->list_req)
		engine_req_cancel(fl->list_req);
	free(fl->cursor_dir);
	free(fl);
	return NULL;
}
