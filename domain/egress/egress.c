/* egress.c — the allowlist: proxy image, per-sandbox topology, decision
 * followers and events (see egress.h for the state machines). */
#include <assert.h>
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

#include "acquire.h"
#include "bridgecheck.h"
#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "egress.h"
#include "egresslog.h"
#include "endpoint.h"
#include "engine.h"
#include "log.h"
#include "msb-build.h"
#include "names.h"
#include "proxyimage.h"
#include "rfc3339.h"
#include "subnet.h"
#include "xmalloc.h"

#define EGRESS_IMAGE_REPO      PROXYIMAGE_REPO
#define MSB_STR_(x)            #x
#define MSB_STR(x)             MSB_STR_(x)
#define EGRESS_CURSOR_DIR      "egress"
#define EGRESS_TS_MAX          40
/* NAME-proxy, NAME-net and a NUL, with room to spare. */
#define EGRESS_NAME_MAX        (NAMES_CONTAINER_MAX + 16)

/* ---- the image ----------------------------------------------------------- */

enum image_state {
	IMAGE_IDLE,        /* not checked yet, or to be checked again */
	IMAGE_INSPECT,
	IMAGE_LOAD,
	IMAGE_READY,
	IMAGE_FAILED,      /* retried at the next resync or allowlisted acquire */
};

struct follower;
struct drain_op;

TAILQ_HEAD(follower_list, follower);
TAILQ_HEAD(egress_op_list, egress_op);

struct egress {
	struct domain *d;
	enum image_state image;
	bool image_verifying;        /* the inspect after a load */
	char *image_id;              /* "sha256:..." once READY */
	char want_id[PROXYIMAGE_DIGEST_BYTES]; /* the image ID the installed binary makes */
	void *archive;               /* its archive, from the check until loaded or found current */
	size_t archive_len;
	char *image_error;
	struct engine_req *image_req;
	struct subnet_pool *pool;
	bool pool_synced;            /* networks listed since start */
	bool pool_listing;
	struct engine_req *list_req, *proxies_req;
	struct follower_list followers;
	struct egress_op_list ops;
	uint64_t published;          /* decisions published (an event of count n: n) */
	uint64_t seen;               /* decisions read, each once */
	uint64_t coalesced;          /* of the published, those in events of count > 1 */
	uint64_t events;             /* events published */
	uint64_t pauses;             /* follow streams paused at EGRESS_BYTES_PER_TURN */
	uint64_t not_logged;         /* decisions over EGRESS_LOG_PER_SECOND: counted, not logged */
	char *cursor_dir;
	bool closing;                /* egress_shutdown: start nothing new */
};

/* ---- followers: one per proxy container ----------------------------------- */

struct drain_waiter {
	egress_drain_cb *cb;
	void *arg;
};

struct follower {
	struct egress *eg;
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

/* ---- ensure ops ------------------------------------------------------------ */

enum eop_state {
	EOP_IMAGE_WAIT,
	EOP_NET_INSPECT,
	EOP_NET_LIST,
	EOP_NET_CREATE,
	EOP_NET_VERIFY,
	EOP_PROXY_INSPECT,
	EOP_PROXY_DRAIN,
	EOP_PROXY_REMOVE,
	EOP_PROXY_CREATE,
	EOP_PROXY_CONNECT,
	EOP_PROXY_START,
	EOP_PROXY_READY,
	EOP_ROLLBACK_PROXY,
	EOP_ROLLBACK_NET,
	EOP_DONE,
};

struct egress_op {
	struct egress *eg;
	TAILQ_ENTRY(egress_op) entry;
	enum eop_state state;
	char name[EGRESS_NAME_MAX];
	char net[EGRESS_NAME_MAX];
	char proxy[EGRESS_NAME_MAX];
	char bridge[16];
	json_t *labels;              /* identity labels of network and proxy */
	json_t *key_raw;             /* [scope, thread, agent, call, kind] */
	char *key_v1;
	char *allow;                 /* comma-joined */
	uid_t owner;
	bool fresh;
	bool isolated;               /* gateway_mode isolated, else inhibit_ipv4 */
	struct engine_req *req;
	egress_ensure_cb *cb;
	void *arg;
	struct subnet_block block;
	bool have_block;
	char *net_id;
	bool net_created, net_adopting;
	char *proxy_id;
	bool proxy_created;
	int tries;
	struct msb_error err;
	bool failed;
	struct event *timer;         /* readiness deadline */
	struct event *defer_ev;      /* completes from the loop */
};

static void eop_enter(struct egress_op *op, enum eop_state s);
static void eop_fail(struct egress_op *op);
static void follower_start(struct follower *f);
static void follower_free(struct follower *f);
static void eop_ready_check(struct egress_op *op);

/* ---- small helpers --------------------------------------------------------- */

static struct engine *eg_engine(const struct egress *eg)
{
	return eg->d->engine;
}

/* A proxy binary is configured and installed (executable). */
bool egress_configured(const struct domain *d)
{
	const char *path = d->config->egress_proxy_binary;

	return path && *path && access(path, X_OK) == 0;
}

char *egress_allowlist_off_reason(const struct domain *d)
{
	const char *path = d->config->egress_proxy_binary;
	const struct egress *eg = d->egress;

	if (!path || !*path)
		return xstrdup("egress.proxy_binary is not set: set it to the path of "
			       "maf-sandbox-egress-proxy (the daemon builds the proxy image from it)");
	if (access(path, X_OK) < 0)
		return xasprintf("egress.proxy_binary %s is not an executable file (%s): install "
				 "maf-sandbox-egress-proxy there, or set egress.proxy_binary to where it is",
				 path, strerror(errno));
	if (!eg)
		return xstrdup("the daemon is starting");
	switch (eg->image) {
	case IMAGE_READY:
		return NULL;
	case IMAGE_FAILED:
		return xasprintf("the egress proxy image could not be made from egress.proxy_binary %s: %s",
				 path, eg->image_error ? eg->image_error : "unknown error");
	default:
		return xasprintf("the egress proxy image is being made from egress.proxy_binary %s "
				 "(an allowlist acquire waits for it)", path);
	}
}

bool egress_ready(const struct egress *eg)
{
	return eg && egress_configured(eg->d) && eg->image == IMAGE_READY;
}

bool egress_usable(const struct egress *eg)
{
	return eg && egress_configured(eg->d) && eg->image != IMAGE_FAILED;
}

uint64_t egress_decisions_published(const struct egress *eg)
{
	return eg ? eg->published : 0;
}

/* Decisions held now, by every follower, until their window ends. */
static uint64_t decisions_held(const struct egress *eg)
{
	const struct follower *f;
	uint64_t n = 0;

	TAILQ_FOREACH(f, &eg->followers, entry)
		n += f->co.held_total;
	return n;
}

/* The counters of coalescing, added to daemon.status's "egress". */
static void status_add_coalescing(const struct egress *eg, json_t *o)
{
	json_object_set_new(o, "decisions_seen", json_integer((json_int_t)eg->seen));
	json_object_set_new(o, "decisions_held", json_integer((json_int_t)decisions_held(eg)));
	json_object_set_new(o, "decisions_coalesced", json_integer((json_int_t)eg->coalesced));
	json_object_set_new(o, "events_published", json_integer((json_int_t)eg->events));
	json_object_set_new(o, "stream_pauses", json_integer((json_int_t)eg->pauses));
	json_object_set_new(o, "decisions_not_logged", json_integer((json_int_t)eg->not_logged));
}

json_t *egress_status_json(const struct egress *eg)
{
	static const char *const states[] = {
		[IMAGE_IDLE] = "unchecked", [IMAGE_INSPECT] = "checking", [IMAGE_LOAD] = "loading",
		[IMAGE_READY] = "ready", [IMAGE_FAILED] = "failed",
	};
	const struct follower *f;
	size_t followed = 0;
	char ref[96];
	json_t *o;

	if (!eg || !egress_configured(eg->d))
		return json_pack("{s:b}", "configured", 0);
	TAILQ_FOREACH(f, &eg->followers, entry)
		followed += f->streaming;
	snprintf(ref, sizeof(ref), "%s:%s", EGRESS_IMAGE_REPO, PACKAGE_VERSION);
	o = json_pack("{s:b, s:{s:s, s:s, s:s?, s:s?}, s:I, s:I}", "configured", 1,
		      "image", "ref", ref, "state", states[eg->image], "id", eg->image_id,
		      "error", eg->image_error, "proxies_followed", (json_int_t)followed,
		      "decisions_published", (json_int_t)eg->published);
	status_add_coalescing(eg, o);
	return o;
}

static const char *image_tag(void)
{
	return PACKAGE_VERSION;
}

json_t *egress_info_json(const struct egress_info *info)
{
	char url[96];

	snprintf(url, sizeof(url), "http://%s:%d", info->proxy_address, EGRESS_PROXY_PORT);
	return json_pack("{s:s, s:s, s:s, s:s}", "network", info->network, "proxy", info->proxy,
			 "proxy_address", info->proxy_address, "proxy_url", url);
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

static void info_fill(struct egress_info *info, const char *workload, const char *proxy_address,
		      const struct subnet_block *b)
{
	info->network_new = false;
	snprintf(info->network, sizeof(info->network), "%s%s", workload, EGRESS_NET_SUFFIX);
	snprintf(info->proxy, sizeof(info->proxy), "%s%s", workload, EGRESS_PROXY_SUFFIX);
	snprintf(info->proxy_address, sizeof(info->proxy_address), "%s", proxy_address);
	snprintf(info->dns, sizeof(info->dns), "%s", b ? b->gateway : "");
	snprintf(info->subnet, sizeof(info->subnet), "%s", b ? b->subnet : "");
}

/* Engine major version ("28.0.1" → 28), 0 if unknown. */
static int engine_major(const struct egress *eg)
{
	const struct engine_info *info = engine_get_info(eg_engine(eg));

	return info && info->version ? atoi(info->version) : 0;
}

static bool engine_is_local(const struct egress *eg)
{
	const struct engine_endpoint *ep = engine_get_endpoint(eg_engine(eg));

	return ep && ep->kind == ENGINE_ENDPOINT_UNIX;
}

static bool api_below(const struct egress *eg, const char *v)
{
	const struct engine_info *info = engine_get_info(eg_engine(eg));

	return !info || !info->api_version || engine_api_version_cmp(info->api_version, v) < 0;
}

/* ---- cursors -------------------------------------------------------------- */

static char *cursor_path(const struct follower *f)
{
	return xasprintf("%s/%s", f->eg->cursor_dir, f->id);
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

static void cursor_remove(struct egress *eg, const char *id)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", eg->cursor_dir, id);

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
 * rest counted (eg->not_logged) and said once a second. */
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
	f->eg->not_logged++;
}

/* One event for count decisions (first_ts: the first one's time when
 * count > 1; ts: the last one's). */
static void publish(struct follower *f, const struct egress_decision *dec, uint64_t count, const char *first_ts,
		    const char *ts)
{
	struct egress *eg = f->eg;
	json_t *params;

	eg->published += count;
	if (count > 1)
		eg->coalesced += count;
	if (!f->key_known || !eg->d->publish)
		return;   /* unattributable: logged only (behaviour-docker §4.5) */
	eg->events++;
	params = json_pack("{s:s, s:o, s:s?, s:s, s:s, s:s, s:i, s:s, s:I}", "type", "egress.decision",
			   "key", msb_key_encode(&f->key), "kind", f->kind, "sandbox", f->workload,
			   "decision", egress_verdict_to_string(dec->verdict), "host", dec->host,
			   "port", (int)dec->port, "time", ts, "count", (json_int_t)count);
	if (count > 1)
		json_object_set_new(params, "first_time", json_string(first_ts));
	if (egress_reason_to_string(dec->reason))
		json_object_set_new(params, "reason", json_string(egress_reason_to_string(dec->reason)));
	eg->d->publish(eg->d->out_arg, DOMAIN_EVENT_EGRESS_DECISION, f->owner, f->key.scope, "events.event",
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
	if (f->co.held_total == 0 || (f->eg->closing && !f->eg->d->publish))
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

	f->eg->seen++;
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
		f->eg->pauses++;
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
		if (error == -ECANCELED && f->n_drains > 0 && !f->gone && !f->eg->closing) {
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
		cursor_remove(f->eg, f->id);
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

	if (f->eg->closing) {
		if (f->draining)
			drain_finish(f, -ECANCELED);
		return;
	}
	if (f->req)
		return;   /* one request at a time: a second stream would interleave in the demultiplexer */
	follower_reset_stream(f);
	if (f->cur.s > 0)
		snprintf(since, sizeof(since), "%lld.%09ld", (long long)f->cur.s, (long)f->cur.ns);
	r = docker_container_logs(eg_engine(f->eg), f->id, !f->draining, f->cur.s > 0 ? since : NULL,
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
		if (f->draining && f->n_drains > 0 && !f->eg->closing)
			follower_start(f);
		return;
	}
	if (f->draining) {
		/* a drain began while this look was under way: the drain reads the log */
		return;
	}
	if (r->error == 0 && r->status == 404) {
		cursor_remove(f->eg, f->id);
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
	if (docker_container_inspect(eg_engine(f->eg), f->id, follower_inspect_cb, f, &f->req) < 0)
		f->req = NULL;
}

static void follower_ready_cb(evutil_socket_t fd, short what, void *arg)
{
	struct follower *f = arg;
	struct egress_op *op, *next;

	(void)fd, (void)what;
	for (op = TAILQ_FIRST(&f->eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state == EOP_PROXY_READY && op->proxy_id && strcmp(op->proxy_id, f->id) == 0)
			eop_ready_check(op);
	}
}

static struct follower *follower_find_id(const struct egress *eg, const char *id)
{
	struct follower *f;

	TAILQ_FOREACH(f, &eg->followers, entry)
		if (strcmp(f->id, id) == 0)
			return f;
	return NULL;
}

/* By id, or by proxy name. */
static struct follower *follower_find_ref(const struct egress *eg, const char *ref)
{
	struct follower *f;

	TAILQ_FOREACH(f, &eg->followers, entry)
		if (strcmp(f->id, ref) == 0 || strcmp(f->proxy, ref) == 0)
			return f;
	return NULL;
}

static struct follower *follower_find_workload(const struct egress *eg, const char *name)
{
	struct follower *f;

	TAILQ_FOREACH(f, &eg->followers, entry)
		if (strcmp(f->workload, name) == 0 && !f->gone)
			return f;
	return NULL;
}

/* A follower for the proxy container with this id, name and labels. */
static struct follower *follower_new(struct egress *eg, const char *id, const char *name, const json_t *labels)
{
	struct follower *f = xcalloc(1, sizeof(*f));
	const char *owner = json_string_value(json_object_get(labels, LABEL_OWNER));
	const json_t *raw = NULL;
	_cleanup_(json_decrefp) json_t *raw_key = NULL;

	f->eg = eg;
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
	f->retry_ev = evtimer_new(eg->d->base, follower_retry_cb, f);
	f->ready_ev = event_new(eg->d->base, -1, 0, follower_ready_cb, f);
	f->flush_ev = evtimer_new(eg->d->base, follower_flush_cb, f);
	f->turn_ev = evtimer_new(eg->d->base, follower_turn_cb, f);
	if (!f->retry_ev || !f->ready_ev || !f->flush_ev || !f->turn_ev)
		fatalx("%s: cannot create an event", __func__);
	cursor_load(f);
	if (f->cur.s > 0)
		f->ready = true;   /* it has made decisions, so it was listening */
	TAILQ_INSERT_TAIL(&eg->followers, f, entry);
	return f;
}

static void follower_free(struct follower *f)
{
	if (!f)
		return;
	TAILQ_REMOVE(&f->eg->followers, f, entry);
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
	struct egress *eg;
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
	struct follower *f = follower_find_id(dop->eg, dop->id);

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
	    names_id_is_full(dop->id) && !follower_find_id(dop->eg, dop->id))
		follower_new(dop->eg, dop->id, json_string_value(json_object_get(r->body, "Name")), labels);
	if (r->error == -ECANCELED || !follower_find_id(dop->eg, dop->id)) {
		/* absent, unreadable or not a proxy: nothing to publish */
		dop->cb(r->error == -ECANCELED ? -ECANCELED : 0, dop->arg);
		free(dop);
		return;
	}
	if (docker_container_stop(eg_engine(dop->eg), dop->id, EGRESS_PROXY_STOP_GRACE_S, drain_stopped_cb, dop,
				  NULL) < 0) {
		dop->cb(-ENOTCONN, dop->arg);
		free(dop);
	}
}

int egress_drain(struct egress *eg, const char *proxy_id, egress_drain_cb *cb, void *arg)
{
	struct drain_op *dop;
	int r;

	if (!eg || !proxy_id || !*proxy_id || strlen(proxy_id) > NAMES_ID_HEX || !cb)
		return -EINVAL;
	dop = xcalloc(1, sizeof(*dop));
	dop->eg = eg;
	snprintf(dop->id, sizeof(dop->id), "%s", proxy_id);
	dop->cb = cb;
	dop->arg = arg;
	if (follower_find_id(eg, proxy_id) && names_id_is_full(proxy_id))
		r = docker_container_stop(eg_engine(eg), proxy_id, EGRESS_PROXY_STOP_GRACE_S, drain_stopped_cb,
					  dop, NULL);
	else
		r = docker_container_inspect(eg_engine(eg), proxy_id, drain_inspected_cb, dop, NULL);
	if (r < 0)
		free(dop);
	return r;
}

void egress_proxy_removed(struct egress *eg, const char *proxy_id)
{
	struct follower *f;

	if (!eg || !proxy_id)
		return;
	f = follower_find_ref(eg, proxy_id);
	if (f && f->n_drains > 0)
		return;   /* a drain still reads it; it is forgotten when its stream ends */
	if (f) {
		char id[sizeof(f->id)];

		/* the follower first: cancelling its stream publishes what it
		 * holds and saves its cursor; the cursor goes after that */
		snprintf(id, sizeof(id), "%s", f->id);
		follower_free(f);
		cursor_remove(eg, id);
	} else if (names_id_is_full(proxy_id)) {
		cursor_remove(eg, proxy_id);
	}
}

bool egress_proxy_ok(const struct egress *eg, const char *name, struct egress_info *info)
{
	struct follower *f = eg ? follower_find_workload(eg, name) : NULL;

	if (!f || !f->streaming || !f->ready || !f->info_known || f->draining)
		return false;
	*info = f->info;
	return true;
}

/* ---- the image ----------------------------------------------------------- */

static void image_check(struct egress *eg);

/* The daemon stops: ops waiting on a shared request end with ShuttingDown. */
static void fail_waiting(struct egress *eg, enum eop_state state)
{
	struct egress_op *op, *next;

	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state == state) {
			msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
			eop_fail(op);
		}
	}
}

static void image_settle(struct egress *eg, enum image_state s, char *error)
{
	struct egress_op *op, *next;

	eg->image = s;
	free(eg->image_error);
	eg->image_error = error;
	if (s == IMAGE_READY)
		log_info("egress: proxy image %s:%s is ready (%.19s); allowlist is enforced", EGRESS_IMAGE_REPO,
			 image_tag(), eg->image_id);
	else if (s == IMAGE_FAILED)
		log_warnx("egress: no proxy image, allowlist is not offered: %s", error);
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state != EOP_IMAGE_WAIT)
			continue;
		if (s == IMAGE_READY) {
			eop_enter(op, EOP_NET_INSPECT);
		} else {
			msb_error_set(&op->err, MSB_ERR_EGRESS_NOT_ENFORCED, NULL,
				      "the egress proxy image could not be made: %s", error);
			eop_fail(op);
		}
	}
}

/* A failed load's stable reason, by docker_image_load's error alone. */
static const char *image_load_reason(int error)
{
	switch (error) {
	case -EIO:
		return "the engine refused it";
	case -ETIMEDOUT:
		return "the engine did not finish within sandbox.pull_timeout_ms";
	case -EPROTO:
	case -EMSGSIZE:
		return "the engine's reply was unusable";
	case -ECONNABORTED:
		return "the engine's connection broke during the load";
	default:
		return "the engine could not be reached";
	}
}

static void image_load_done_cb(int error, const char *message, void *arg)
{
	struct egress *eg = arg;

	eg->image_req = NULL;
	if (error == -ECANCELED) {
		eg->image = IMAGE_IDLE;
		fail_waiting(eg, EOP_IMAGE_WAIT);
		return;
	}
	if (error < 0) {
		log_warnx("egress: loading %s:%s: %s", EGRESS_IMAGE_REPO, image_tag(),
			  message ? message : strerror(-error));
		image_settle(eg, IMAGE_FAILED, xasprintf("loading %s:%s failed: %s (the daemon's log "
							  "has why)", EGRESS_IMAGE_REPO, image_tag(),
							  image_load_reason(error)));
		return;
	}
	eg->image_verifying = true;
	eg->image = IMAGE_IDLE;
	image_check(eg);
}

/* The image archive of the installed binary for this engine's architecture
 * (proxyimage_archive); fills eg->want_id. */
static int image_archive(struct egress *eg, void **tar, size_t *len, char **err)
{
	const struct engine_info *info = engine_get_info(eg_engine(eg));
	_cleanup_free_ char *tag = xasprintf("%s:%s", EGRESS_IMAGE_REPO, image_tag());

	const char *arch = info && info->arch && *info->arch ? info->arch : "amd64";

	return proxyimage_archive(eg->d->config->egress_proxy_binary, arch, tag, tar, len, eg->want_id, err);
}

static void image_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct egress *eg = arg;
	const char *id = json_string_value(json_object_get(r->body, "Id"));
	_cleanup_free_ void *tar = TAKE_PTR(eg->archive);
	size_t len = eg->archive_len;
	int ret;

	eg->image_req = NULL;
	if (r->error == -ECANCELED) {
		eg->image = IMAGE_IDLE;
		fail_waiting(eg, EOP_IMAGE_WAIT);
		return;
	}
	if (r->error || (r->status != 200 && r->status != 404)) {
		log_warnx("egress: inspecting %s:%s: %s", EGRESS_IMAGE_REPO, image_tag(),
			  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
		image_settle(eg, IMAGE_FAILED, r->error ?
			     xasprintf("inspecting %s:%s failed: the engine could not be reached", EGRESS_IMAGE_REPO,
				       image_tag()) :
			     xasprintf("inspecting %s:%s failed: the engine answered HTTP %ld", EGRESS_IMAGE_REPO,
				       image_tag(), r->status));
		return;
	}
	if (r->status == 200 && id && strcmp(id, eg->want_id) == 0) {
		free(eg->image_id);
		eg->image_id = xstrdup(id);
		eg->image_verifying = false;
		image_settle(eg, IMAGE_READY, NULL);
		return;
	}
	if (eg->image_verifying) {
		eg->image_verifying = false;
		image_settle(eg, IMAGE_FAILED, xasprintf("the loaded %s:%s is %s, not %s", EGRESS_IMAGE_REPO,
							  image_tag(), id ? id : "absent", eg->want_id));
		return;
	}
	/* Absent or another binary's: load ours (the tag moves to it). */
	assert(tar);
	log_info("egress: loading the proxy image %s:%s (%.19s)", EGRESS_IMAGE_REPO, image_tag(), eg->want_id);
	eg->image = IMAGE_LOAD;
	ret = docker_image_load(eg_engine(eg), tar, len, eg->d->config->pull_timeout_ms, NULL, image_load_done_cb,
				eg, &eg->image_req);
	if (ret < 0)
		image_settle(eg, IMAGE_FAILED, xasprintf("cannot load the proxy image: %s",
							  ret == -ENOTCONN ? "the engine is not reachable"
									   : "the request could not be made"));
}

/* Starts a check of the image unless one is under way or it is ready. */
static void image_check(struct egress *eg)
{
	_cleanup_free_ char *err = NULL, *ref = NULL;
	int r;

	if (!egress_configured(eg->d) || eg->image == IMAGE_INSPECT || eg->image == IMAGE_LOAD ||
	    eg->image == IMAGE_READY)
		return;
	if (!eg->image_verifying) {
		/* The ID of what the installed binary makes now (the archive is
		 * kept for the load, should the engine not have it). */
		free(TAKE_PTR(eg->archive));
		if (image_archive(eg, &eg->archive, &eg->archive_len, &err) < 0) {
			image_settle(eg, IMAGE_FAILED, TAKE_PTR(err));
			return;
		}
	}
	ref = xasprintf("%s:%s", EGRESS_IMAGE_REPO, image_tag());
	eg->image = IMAGE_INSPECT;
	r = docker_image_inspect(eg_engine(eg), ref, image_inspect_cb, eg, &eg->image_req);
	if (r < 0) {
		struct egress_op *op, *next;

		eg->image = IMAGE_IDLE;
		eg->image_req = NULL;
		eg->image_verifying = false;
		free(TAKE_PTR(eg->archive));
		for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
			next = TAILQ_NEXT(op, entry);
			if (op->state == EOP_IMAGE_WAIT) {
				msb_error_set(&op->err, MSB_ERR_ENGINE_UNAVAILABLE, NULL,
					      "the engine is not reachable to check the egress proxy image");
				eop_fail(op);
			}
		}
	}
}

/* ---- the pool and the proxies, recovered from the engine ------------------- */

static void pool_mark_listing(struct egress *eg, const json_t *list)
{
	size_t i, k;
	json_t *net, *cfg;

	json_array_foreach(list, i, net)
		json_array_foreach(json_object_get(json_object_get(net, "IPAM"), "Config"), k, cfg) {
			const char *subnet = json_string_value(json_object_get(cfg, "Subnet"));

			if (subnet)
				subnet_pool_mark(eg->pool, subnet);
		}
}

/* The pool anew from a listing (blocks of removed networks come back), plus
 * the blocks ops in flight hold but the listing may not show yet. */
static void pool_rebuild(struct egress *eg, const json_t *list)
{
	_cleanup_free_ char *err = NULL;
	struct subnet_pool *pool = subnet_pool_new(eg->d->config->egress_subnet_pool,
						   (unsigned)eg->d->config->egress_block_prefix, &err);
	struct egress_op *op;

	if (!pool) {
		log_warnx("egress: cannot make the subnet pool: %s", err);
		pool_mark_listing(eg, list);
		return;
	}
	subnet_pool_free(eg->pool);
	eg->pool = pool;
	pool_mark_listing(eg, list);
	TAILQ_FOREACH(op, &eg->ops, entry)
		if (op->have_block)
			subnet_pool_mark(eg->pool, op->block.subnet);
}

static void networks_listed_cb(const struct docker_reply *r, void *arg)
{
	struct egress *eg = arg;
	struct egress_op *op, *next;
	bool ok = r->error == 0 && r->status == 200 && json_is_array(r->body);

	eg->list_req = NULL;
	eg->pool_listing = false;
	if (r->error == -ECANCELED) {
		fail_waiting(eg, EOP_NET_LIST);
		return;
	}
	if (ok) {
		pool_rebuild(eg, r->body);
		eg->pool_synced = true;
		log_debug("egress", "subnet pool: %zu of %zu blocks in use", subnet_pool_used(eg->pool),
			  subnet_pool_size(eg->pool));
	}
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state != EOP_NET_LIST)
			continue;
		if (ok) {
			eop_enter(op, EOP_NET_CREATE);
		} else {
			log_warnx("egress for %s: listing the networks: %s", op->name,
				  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
			msb_error_set(&op->err, r->error ? MSB_ERR_ENGINE_UNAVAILABLE : MSB_ERR_ENGINE_ERROR,
				      r->error ? NULL : json_pack("{s:i}", "engine_status", (int)r->status),
				      "could not list the engine's networks to pick a subnet (%s)",
				      r->error ? "the engine could not be reached" : "the engine refused");
			eop_fail(op);
		}
	}
}

static int pool_list(struct egress *eg)
{
	int r;

	if (eg->pool_listing)
		return 0;
	r = docker_networks_list(eg_engine(eg), NULL, networks_listed_cb, eg, &eg->list_req);
	if (r < 0) {
		eg->list_req = NULL;
		return r;
	}
	eg->pool_listing = true;
	return 0;
}

/* The proxy's address on its NAME-net, from a listing item or an inspect. */
static const char *proxy_address_of(const json_t *obj, const char *net)
{
	const json_t *nets = json_object_get(json_object_get(obj, "NetworkSettings"), "Networks");

	return json_string_value(json_object_get(json_object_get(nets, net), "IPAddress"));
}

static void follower_set_info(struct egress *eg, struct follower *f, const json_t *obj)
{
	char net[EGRESS_NAME_MAX];
	const char *addr;
	_cleanup_free_ char *cidr = NULL;
	struct subnet_block b;

	snprintf(net, sizeof(net), "%s%s", f->workload, EGRESS_NET_SUFFIX);
	addr = proxy_address_of(obj, net);
	if (!addr || !*addr)
		return;
	cidr = xasprintf("%s/%ld", addr, eg->d->config->egress_block_prefix);
	if (subnet_block_from_cidr(cidr, (unsigned)eg->d->config->egress_block_prefix, &b) < 0)
		return;
	info_fill(&f->info, f->workload, addr, &b);
	f->info_known = true;
}

static void proxies_listed_cb(const struct docker_reply *r, void *arg)
{
	struct egress *eg = arg;
	size_t i;
	json_t *item;

	eg->proxies_req = NULL;
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
		f = follower_find_id(eg, id);
		if (!f)
			f = follower_new(eg, id, name, json_object_get(item, "Labels"));
		follower_set_info(eg, f, item);
		if (state && strcmp(state, "running") == 0 && !f->req && !f->draining)
			follower_start(f);
	}
}

void egress_shutdown(struct egress *eg)
{
	struct egress_op *op, *next;

	if (!eg)
		return;
	eg->closing = true;
	/* Ops waiting on a timer, the image, a listing or a drain get no
	 * cancelled request of their own: end them now (ShuttingDown). */
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (!op->req && op->state != EOP_DONE) {
			msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
			eop_fail(op);
		}
	}
}

void egress_resync(struct egress *eg)
{
	json_t *filters;

	if (!eg || !egress_configured(eg->d) || eg->closing)
		return;
	if (eg->image == IMAGE_FAILED)
		eg->image = IMAGE_IDLE;
	image_check(eg);
	if (!eg->pool_synced)
		(void)pool_list(eg);
	if (eg->proxies_req)
		return;
	filters = json_pack("{s:{s:b}}", "label", LABEL_ROLE "=proxy", 1);
	if (docker_containers_list(eg_engine(eg), filters, proxies_listed_cb, eg, &eg->proxies_req) < 0)
		eg->proxies_req = NULL;
	json_decref(filters);
}

/* ---- ensure: the state machine -------------------------------------------- */

static void eop_docker_cb(const struct docker_reply *r, void *arg);
static void eop_drained_cb(int error, void *arg);

static void eop_free(struct egress_op *op)
{
	TAILQ_REMOVE(&op->eg->ops, op, entry);
	json_decref(op->labels);
	json_decref(op->key_raw);
	free(op->key_v1);
	free(op->allow);
	free(op->net_id);
	free(op->proxy_id);
	msb_error_clear(&op->err);
	if (op->timer)
		event_free(op->timer);
	event_free(op->defer_ev);
	free(op);
}

static void eop_complete_cb(evutil_socket_t fd, short what, void *arg)
{
	struct egress_op *op = arg;
	struct egress_info info;

	(void)fd, (void)what;
	if (op->failed) {
		op->cb(&op->err, NULL, op->arg);
	} else {
		info_fill(&info, op->name, op->block.proxy, &op->block);
		info.network_new = op->net_created;
		op->cb(NULL, &info, op->arg);
	}
	eop_free(op);
}

static void eop_complete(struct egress_op *op)
{
	op->state = EOP_DONE;
	event_active(op->defer_ev, EV_TIMEOUT, 0);
}

/* After a failure: remove what this op made (proxy first), then report. */
static void eop_fail(struct egress_op *op)
{
	op->failed = true;
	if (op->timer)
		evtimer_del(op->timer);
	if (op->eg->closing) {
		eop_complete(op);   /* what it made stays: dispose or reap removes it */
		return;
	}
	if (op->proxy_created && op->proxy_id) {
		eop_enter(op, EOP_ROLLBACK_PROXY);
		return;
	}
	if (op->net_id && (op->net_created || op->fresh)) {
		/* made by this op (nothing is on it yet), or a fresh sandbox's */
		eop_enter(op, EOP_ROLLBACK_NET);
		return;
	}
	eop_complete(op);
}

static void eop_fail_engine(struct egress_op *op, const struct docker_reply *r, const char *what)
{
	const char *m = r->message ? r->message : r->error ? strerror(-r->error) : "engine refused";

	/* The engine's text is for the log; the wire gets the code and a reason. */
	if (r->error != -ECANCELED)
		log_warnx("egress for %s: %s: %s", op->name, what, m);
	if (r->error == -ECANCELED)
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
	else if (r->error == -ETIMEDOUT)
		msb_error_set(&op->err, MSB_ERR_ENGINE_TIMEOUT, NULL, "egress for %s: %s: the engine did not answer "
			      "in time", op->name, what);
	else if (r->error)
		msb_error_set(&op->err, MSB_ERR_ENGINE_UNAVAILABLE, NULL, "egress for %s: %s: the engine could "
			      "not be reached", op->name, what);
	else
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, json_pack("{s:i}", "engine_status", (int)r->status),
			      "egress for %s: %s: %s (HTTP %ld)", op->name, what,
			      r->status < 300 ? "the engine's reply was unusable" : "the engine refused", r->status);
	eop_fail(op);
}

static json_t *eop_network_body(const struct egress_op *op)
{
	json_t *opts = json_object(), *ipam_cfg;

	json_object_set_new(opts, "com.docker.network.bridge.name", json_string(op->bridge));
	json_object_set_new(opts, "com.docker.network.bridge.enable_ip_masquerade", json_string("false"));
	if (op->isolated) {
		json_object_set_new(opts, "com.docker.network.bridge.gateway_mode_ipv4", json_string("isolated"));
		json_object_set_new(opts, "com.docker.network.bridge.gateway_mode_ipv6", json_string("isolated"));
		ipam_cfg = json_pack("{s:s, s:s}", "Subnet", op->block.subnet, "IPRange", op->block.ip_range);
	} else {
		json_object_set_new(opts, "com.docker.network.bridge.inhibit_ipv4", json_string("true"));
		ipam_cfg = json_pack("{s:s, s:s, s:s}", "Subnet", op->block.subnet, "IPRange", op->block.ip_range,
				     "Gateway", op->block.gateway);
	}
	return json_pack("{s:s, s:s, s:b, s:b, s:b, s:{s:s, s:[o]}, s:o, s:O}", "Name", op->net,
			 "Driver", "bridge", "Internal", 1, "EnableIPv6", 0,
			 "CheckDuplicate", api_below(op->eg, "1.44"),
			 "IPAM", "Driver", "default", "Config", ipam_cfg, "Options", opts, "Labels", op->labels);
}

static json_t *eop_proxy_config(const struct egress_op *op)
{
	const struct msbd_config *cfg = op->eg->d->config;
	json_t *env = json_array(), *labels = json_deep_copy(op->labels);
	char *raw = json_dumps(op->key_raw, JSON_COMPACT);
	json_t *host, *netcfg;

	json_array_append_new(env, json_sprintf("MAF_SANDBOX_ALLOW=%s", op->allow));
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PROXY_PORT=%d", EGRESS_PROXY_PORT));
	/* only its own sandbox's network: not docker0, not the host */
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PROXY_LISTEN=%s", op->block.proxy));
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PRIVATE_ALLOW=%s",
						cfg->egress_private_allow ? cfg->egress_private_allow : ""));
	json_object_set_new(labels, LABEL_ROLE, json_string("proxy"));
	json_object_set_new(labels, LABEL_KEY_V1, json_string(op->key_v1));
	json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
	free(raw);
	host = json_pack("{s:s, s:b, s:[s], s:[s], s:i, s:I, s:b, s:{s:s, s:{s:s, s:s}}, s:{s:s, s:s}}",
			 "NetworkMode", op->net, "ReadonlyRootfs", 1, "CapDrop", "ALL",
			 "SecurityOpt", "no-new-privileges", "PidsLimit", EGRESS_PROXY_PIDS_LIMIT,
			 "Memory", (json_int_t)EGRESS_PROXY_MEMORY_BYTES, "Init", 0,
			 "LogConfig", "Type", "json-file", "Config", "max-size", EGRESS_PROXY_LOG_MAX_SIZE,
			 "max-file", EGRESS_PROXY_LOG_MAX_FILES,
			 /* a proxy is an endpoint, never a router between its two legs */
			 "Sysctls", "net.ipv4.ip_forward", "0", "net.ipv6.conf.all.forwarding", "0");
	netcfg = json_pack("{s:{s:{s:{s:s}, s:[s]}}}", "EndpointsConfig", op->net, "IPAMConfig",
			   "IPv4Address", op->block.proxy, "Aliases", op->proxy);
	return json_pack("{s:s, s:o, s:s, s:o, s:b, s:b, s:o, s:o}", "Image", op->eg->image_id, "Env", env,
			 "User", MSB_STR(PROXYIMAGE_UID) ":" MSB_STR(PROXYIMAGE_GID), "Labels", labels, "Tty", 0, "OpenStdin", 0,
			 "HostConfig", host, "NetworkingConfig", netcfg);
}

static void eop_ready_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct egress_op *op = arg;

	(void)fd, (void)what;
	msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
		      "egress proxy %s never reported listening within %ld ms", op->proxy,
		      op->eg->d->config->egress_ready_timeout_ms);
	eop_fail(op);
}

static void eop_ready_check(struct egress_op *op)
{
	struct follower *f = follower_find_id(op->eg, op->proxy_id);

	if (!f || !f->ready)
		return;
	evtimer_del(op->timer);
	f->info_known = true;
	info_fill(&f->info, op->name, op->block.proxy, &op->block);
	eop_complete(op);
}

static void eop_enter(struct egress_op *op, enum eop_state s)
{
	struct engine *e = eg_engine(op->eg);
	json_t *body = NULL;
	int r = 0;

	log_debug("egress", "%s: state %d -> %d", op->name, op->state, s);
	op->state = s;
	switch (s) {
	case EOP_IMAGE_WAIT:
		if (op->eg->image == IMAGE_READY) {
			eop_enter(op, EOP_NET_INSPECT);
			return;
		}
		if (op->eg->image == IMAGE_FAILED)
			op->eg->image = IMAGE_IDLE;
		image_check(op->eg);
		if (op->eg->image == IMAGE_FAILED) {
			msb_error_set(&op->err, MSB_ERR_EGRESS_NOT_ENFORCED, NULL,
				      "the egress proxy image could not be made: %s", op->eg->image_error);
			eop_fail(op);
		} else if (op->eg->image == IMAGE_IDLE) {
			msb_error_set(&op->err, MSB_ERR_ENGINE_UNAVAILABLE, NULL,
				      "the engine is not reachable to check the egress proxy image");
			eop_fail(op);
		}
		return;
	case EOP_NET_INSPECT:
		r = docker_network_inspect(e, op->net, eop_docker_cb, op, &op->req);
		break;
	case EOP_NET_LIST:
		if (op->eg->pool_synced) {
			eop_enter(op, EOP_NET_CREATE);
			return;
		}
		r = pool_list(op->eg);
		break;
	case EOP_NET_CREATE:
		if (!op->have_block) {
			r = subnet_pool_take(op->eg->pool, &op->block);
			if (r == -ENOSPC && op->tries == 0) {
				/* stale marks: re-read what the engine really holds, once */
				op->eg->pool_synced = false;
				op->tries++;
				eop_enter(op, EOP_NET_LIST);
				return;
			}
			if (r < 0) {
				msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
					      "egress for %s: no free subnet left in egress.subnet_pool %s",
					      op->name, op->eg->d->config->egress_subnet_pool);
				eop_fail(op);
				return;
			}
			op->have_block = true;
		}
		body = eop_network_body(op);
		r = docker_network_create(e, body, eop_docker_cb, op, &op->req);
		break;
	case EOP_NET_VERIFY:
		r = docker_network_inspect(e, op->net_id, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_INSPECT:
		r = docker_container_inspect(e, op->proxy, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_REMOVE:
	case EOP_ROLLBACK_PROXY:
		r = docker_container_remove(e, op->proxy_id, true, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_CREATE:
		body = eop_proxy_config(op);
		r = docker_container_create(e, op->proxy, body, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_CONNECT:
		body = json_pack("{s:s}", "Container", op->proxy_id);
		r = docker_network_connect(e, op->eg->d->config->egress_outbound_network, body, eop_docker_cb, op,
					   &op->req);
		break;
	case EOP_PROXY_START:
		r = docker_container_start(e, op->proxy_id, eop_docker_cb, op, &op->req);
		break;
	case EOP_ROLLBACK_NET:
		r = docker_network_remove(e, op->net_id, eop_docker_cb, op, &op->req);
		break;
	default:
		assert(!"unreachable");
		return;
	}
	json_decref(body);
	if (r < 0) {
		struct docker_reply dr = { .error = r };

		op->req = NULL;
		if (s == EOP_ROLLBACK_PROXY || s == EOP_ROLLBACK_NET) {
			log_warnx("egress for %s: rollback could not reach the engine; %s may remain", op->name,
				  s == EOP_ROLLBACK_NET ? op->net : op->proxy);
			eop_complete(op);
			return;
		}
		eop_fail_engine(op, &dr, "the engine is not reachable");
	}
}

/* Is an inspected network one we can put a sandbox on? NULL if so, else why. */
static char *net_unusable(struct egress_op *op, const json_t *net)
{
	const json_t *cfgs = json_object_get(json_object_get(net, "IPAM"), "Config");
	const json_t *labels = json_object_get(net, "Labels");
	const char *driver = json_string_value(json_object_get(net, "Driver"));
	const char *subnet = json_string_value(json_object_get(json_array_get(cfgs, 0), "Subnet"));
	const char *gateway = json_string_value(json_object_get(json_array_get(cfgs, 0), "Gateway"));
	const char *bridge = json_string_value(json_object_get(json_object_get(net, "Options"),
								 "com.docker.network.bridge.name"));
	const char *owner = json_string_value(json_object_get(labels, LABEL_OWNER));
	const char *want_owner = json_string_value(json_object_get(op->labels, LABEL_OWNER));
	char *reason = NULL;

	if (!driver || strcmp(driver, "bridge") || !json_is_true(json_object_get(net, "Internal")))
		return xstrdup("it is not an internal bridge");
	if (!owner || !want_owner || strcmp(owner, want_owner))
		return xstrdup("it is not this sandbox's (its owner label differs)");
	if (json_array_size(cfgs) != 1 || !subnet || subnet_block_from_cidr(subnet,
	    (unsigned)op->eg->d->config->egress_block_prefix, &op->block) < 0)
		return xstrdup("its subnet is not one block of egress.subnet_pool");
	op->have_block = true;
	if (op->isolated && gateway && *gateway)
		return xasprintf("its IPAM holds the gateway %s", gateway);
	if (!engine_is_local(op->eg)) {
		if (!op->isolated)
			return xstrdup("the engine is not on this host, so its bridge cannot be checked for a "
				       "host address; use Engine >= 28 with egress.gateway_mode isolated");
		return NULL;
	}
	if (!bridge || strcmp(bridge, op->bridge))
		return xasprintf("its bridge is not %s", op->bridge);
	switch (bridgecheck_unaddressed(bridge, &reason)) {
	case 0:
		break;
	case -ENODEV:
		free(reason);
		if (op->isolated)
			break;   /* not visible here (rootless, a VM): the IPAM check above is what we have */
		return xasprintf("its bridge %s is not visible from the daemon's network namespace, so it "
				 "cannot be checked for a host address (a rootless or VM engine?); use Engine "
				 ">= 28 with egress.gateway_mode isolated", bridge);
	default:
		return reason ? reason : xasprintf("bridge %s could not be checked", bridge);
	}
	return NULL;
}

static void eop_net_inspected(struct egress_op *op, const struct docker_reply *r)
{
	_cleanup_free_ char *why = NULL;

	if (r->error == 0 && r->status == 404 && !op->net_adopting) {
		eop_enter(op, EOP_NET_LIST);
		return;
	}
	if (r->error || r->status != 200 || !json_is_object(r->body)) {
		eop_fail_engine(op, r, "inspecting its network");
		return;
	}
	free(op->net_id);
	op->net_id = xstrdup(json_string_value(json_object_get(r->body, "Id")) ?
			     json_string_value(json_object_get(r->body, "Id")) : op->net);
	why = net_unusable(op, r->body);
	if (why) {
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, json_pack("{s:s}", "network", op->net),
			      "network %s already exists and cannot be used: %s. Dispose the sandbox (or "
			      "remove the network) and retry", op->net, why);
		op->net_id = (free(op->net_id), NULL);   /* not ours to remove */
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_INSPECT);
}

static void eop_net_created(struct egress_op *op, const struct docker_reply *r)
{
	const char *m = r->message ? r->message : "";

	if (r->error == 0 && r->status == 201 && json_string_value(json_object_get(r->body, "Id"))) {
		op->net_id = xstrdup(json_string_value(json_object_get(r->body, "Id")));
		op->net_created = true;
		subnet_pool_mark(op->eg->pool, op->block.subnet);
		eop_enter(op, EOP_NET_VERIFY);
		return;
	}
	if (r->error == 0 && r->status == 409 && !op->net_adopting) {
		op->net_adopting = true;
		op->have_block = false;
		eop_enter(op, EOP_NET_INSPECT);
		return;
	}
	if (r->error == 0 && (strstr(m, "overlap") || strstr(m, "Pool overlaps")) &&
	    ++op->tries < EGRESS_NET_CREATE_TRIES) {
		/* someone holds that block: mark it and take another */
		subnet_pool_mark(op->eg->pool, op->block.subnet);
		op->have_block = false;
		eop_enter(op, EOP_NET_CREATE);
		return;
	}
	if (r->error == 0 && r->status != 201)
		subnet_pool_release(op->eg->pool, &op->block);
	if (r->error == 0 && strstr(m, "gateway")) {
		log_warnx("egress for %s: creating network %s: %s", op->name, op->net, m);
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, json_pack("{s:i}", "engine_status", (int)r->status),
			      "could not create network %s: the engine refused its gateway option — "
			      "gateway_mode isolated needs Docker Engine "
			      "28.0.0 or later; set egress.gateway_mode auto, or use egress closed or an "
			      "empty allowlist", op->net);
		eop_fail(op);
		return;
	}
	eop_fail_engine(op, r, "creating its network");
}

static void eop_net_verified(struct egress_op *op, const struct docker_reply *r)
{
	_cleanup_free_ char *why = NULL;

	if (r->error || r->status != 200 || !json_is_object(r->body)) {
		eop_fail_engine(op, r, "reading its new network back");
		return;
	}
	why = net_unusable(op, r->body);
	if (why) {
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR,
			      json_pack("{s:s, s:s}", "network", op->net, "gateway_mode",
					op->isolated ? "isolated" : "inhibit"),
			      "network %s was created but %s: the sandbox could reach the host around the "
			      "proxy. It has been removed.%s", op->net, why,
			      op->isolated && engine_major(op->eg) < 28 ?
			      " This engine ignores gateway_mode isolated (it needs Engine 28.0.0); use "
			      "egress.gateway_mode auto or inhibit" : "");
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_INSPECT);
}

static void eop_proxy_inspected(struct egress_op *op, const struct docker_reply *r)
{
	const json_t *state = json_object_get(r->body, "State");
	const char *image = json_string_value(json_object_get(r->body, "Image"));
	const char *id = json_string_value(json_object_get(r->body, "Id"));
	const char *addr;
	struct follower *f;

	if (r->error == 0 && r->status == 404) {
		eop_enter(op, EOP_PROXY_CREATE);
		return;
	}
	if (r->error || r->status != 200 || !id) {
		eop_fail_engine(op, r, "inspecting its proxy");
		return;
	}
	free(op->proxy_id);
	op->proxy_id = xstrdup(id);
	addr = proxy_address_of(r->body, op->net);
	f = follower_find_id(op->eg, id);
	if (json_is_true(json_object_get(state, "Running")) && image && op->eg->image_id &&
	    strcmp(image, op->eg->image_id) == 0 && addr && strcmp(addr, op->block.proxy) == 0) {
		/* running and current: keep it, follow it if nobody does */
		if (!f)
			f = follower_new(op->eg, id, op->proxy,
					 json_object_get(json_object_get(r->body, "Config"), "Labels"));
		if (!f->req && !f->draining)
			follower_start(f);
		op->state = EOP_PROXY_READY;
		eop_ready_check(op);
		if (op->state == EOP_PROXY_READY) {
			struct timeval tv = { op->eg->d->config->egress_ready_timeout_ms / 1000,
					      (op->eg->d->config->egress_ready_timeout_ms % 1000) * 1000 };

			evtimer_add(op->timer, &tv);
		}
		return;
	}
	/* stopped, stale or elsewhere: publish what it decided, then replace it */
	op->state = EOP_PROXY_DRAIN;
	if (egress_drain(op->eg, id, eop_drained_cb, op) < 0) {
		struct docker_reply dr = { .error = -ENOTCONN };

		eop_fail_engine(op, &dr, "draining its old proxy");
	}
}

static void eop_drained_cb(int error, void *arg)
{
	struct egress_op *op = arg;

	if (error == -ECANCELED) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_REMOVE);
}

static void eop_proxy_created(struct egress_op *op, const struct docker_reply *r)
{
	const char *id = json_string_value(json_object_get(r->body, "Id"));

	if (r->error || r->status != 201 || !id) {
		if (r->error == 0 && r->status == 404 && op->eg->image == IMAGE_READY) {
			/* the image was removed behind our back: check (and load) it again next time */
			log_warnx("egress: the proxy image %.19s is gone; it is made again at the next acquire",
				  op->eg->image_id);
			op->eg->image = IMAGE_IDLE;
		}
		eop_fail_engine(op, r, "creating its egress proxy");
		return;
	}
	free(op->proxy_id);
	op->proxy_id = xstrdup(id);
	op->proxy_created = true;
	eop_enter(op, EOP_PROXY_CONNECT);
}

static void eop_proxy_started(struct egress_op *op)
{
	struct follower *f = follower_find_id(op->eg, op->proxy_id);
	json_t *labels = json_deep_copy(op->labels);
	struct timeval tv = { op->eg->d->config->egress_ready_timeout_ms / 1000,
			      (op->eg->d->config->egress_ready_timeout_ms % 1000) * 1000 };

	json_object_set_new(labels, LABEL_KEY_V1, json_string(op->key_v1));
	{
		char *raw = json_dumps(op->key_raw, JSON_COMPACT);

		json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
		free(raw);
	}
	if (!f)
		f = follower_new(op->eg, op->proxy_id, op->proxy, labels);
	json_decref(labels);
	follower_start(f);
	op->state = EOP_PROXY_READY;
	evtimer_add(op->timer, &tv);
	eop_ready_check(op);
}

static void eop_docker_cb(const struct docker_reply *r, void *arg)
{
	struct egress_op *op = arg;
	bool gone = r->error == 0 && r->status == 404;
	bool ok2xx = r->error == 0 && r->status >= 200 && r->status < 300;

	op->req = NULL;
	if (r->error == -ECANCELED && op->state != EOP_ROLLBACK_PROXY && op->state != EOP_ROLLBACK_NET) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		op->failed = true;
		eop_complete(op);
		return;
	}
	switch (op->state) {
	case EOP_NET_INSPECT:
		eop_net_inspected(op, r);
		break;
	case EOP_NET_CREATE:
		eop_net_created(op, r);
		break;
	case EOP_NET_VERIFY:
		eop_net_verified(op, r);
		break;
	case EOP_PROXY_INSPECT:
		eop_proxy_inspected(op, r);
		break;
	case EOP_PROXY_REMOVE:
		if (!ok2xx && !gone) {
			eop_fail_engine(op, r, "removing its old proxy");
			break;
		}
		egress_proxy_removed(op->eg, op->proxy_id);
		eop_enter(op, EOP_PROXY_CREATE);
		break;
	case EOP_PROXY_CREATE:
		eop_proxy_created(op, r);
		break;
	case EOP_PROXY_CONNECT:
		if (!ok2xx) {
			log_warnx("egress for %s: connecting %s to %s: %s", op->name, op->proxy,
				  op->eg->d->config->egress_outbound_network,
				  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
			msb_error_set(&op->err, r->error ? MSB_ERR_ENGINE_UNAVAILABLE : MSB_ERR_ENGINE_ERROR,
				      r->error ? NULL : json_pack("{s:i}", "engine_status", (int)r->status),
				      "could not give the egress proxy %s its outbound leg on network '%s' (%s); "
				      "check that network exists (egress.outbound_network)",
				      op->proxy, op->eg->d->config->egress_outbound_network,
				      r->error ? "the engine could not be reached" : "the engine refused");
			eop_fail(op);
			break;
		}
		eop_enter(op, EOP_PROXY_START);
		break;
	case EOP_PROXY_START:
		if (!ok2xx) {
			eop_fail_engine(op, r, "starting its egress proxy");
			break;
		}
		eop_proxy_started(op);
		break;
	case EOP_ROLLBACK_PROXY:
		if (!ok2xx && !gone)
			log_warnx("egress for %s: rollback could not remove %s; it may remain", op->name, op->proxy);
		else
			egress_proxy_removed(op->eg, op->proxy_id);
		op->proxy_created = false;
		if (op->net_id && (op->net_created || op->fresh)) {
			eop_enter(op, EOP_ROLLBACK_NET);
			break;
		}
		eop_complete(op);
		break;
	case EOP_ROLLBACK_NET:
		if (!ok2xx && !gone)
			log_warnx("egress for %s: rollback could not remove %s; it may remain", op->name, op->net);
		else if (op->have_block)
			subnet_pool_release(op->eg->pool, &op->block);
		eop_complete(op);
		break;
	default:
		assert(!"unreachable");
	}
}

int egress_ensure(struct egress *eg, const char *name, const struct msb_key *key, const struct msb_spec *spec,
		  uid_t owner, bool fresh, egress_ensure_cb *cb, void *arg, struct egress_op **ret_op)
{
	struct egress_op *op;
	const char *mode = eg->d->config->egress_gateway_mode;
	size_t len = 1;

	if (!eg || !egress_configured(eg->d) || !spec->n_egress_allow || !cb)
		return -EINVAL;
	op = xcalloc(1, sizeof(*op));
	op->eg = eg;
	snprintf(op->name, sizeof(op->name), "%s", name);
	snprintf(op->net, sizeof(op->net), "%s%s", name, EGRESS_NET_SUFFIX);
	snprintf(op->proxy, sizeof(op->proxy), "%s%s", name, EGRESS_PROXY_SUFFIX);
	bridgecheck_name(name, op->bridge);
	op->labels = names_workload_labels(key, spec, owner);
	json_object_del(op->labels, LABEL_WORK_DIR);
	op->key_raw = json_pack("[s, s, s, s, s]", key->scope, key->thread_id, key->agent_dir, key->call_id,
				spec->kind);
	op->key_v1 = egresslog_key_encode(key);
	if (!*op->key_v1)
		log_warnx("egress for %s: the encoded key exceeds the %d-byte attribution limit; its "
			  "decisions are logged, not published", name, EGRESSLOG_KEY_MAX);
	for (size_t i = 0; i < spec->n_egress_allow; i++)
		len += strlen(spec->egress_allow[i]) + 1;
	op->allow = xcalloc(1, len);
	for (size_t i = 0; i < spec->n_egress_allow; i++) {
		if (i)
			strcat(op->allow, ",");
		strcat(op->allow, spec->egress_allow[i]);
	}
	op->owner = owner;
	op->fresh = fresh;
	op->isolated = strcmp(mode, "isolated") == 0 || (strcmp(mode, "auto") == 0 && engine_major(eg) >= 28);
	op->cb = cb;
	op->arg = arg;
	op->timer = evtimer_new(eg->d->base, eop_ready_timeout_cb, op);
	op->defer_ev = event_new(eg->d->base, -1, 0, eop_complete_cb, op);
	if (!op->timer || !op->defer_ev)
		fatalx("%s: cannot create an event", __func__);
	TAILQ_INSERT_TAIL(&eg->ops, op, entry);
	if (ret_op)
		*ret_op = op;
	op->state = EOP_IMAGE_WAIT;
	eop_enter(op, EOP_IMAGE_WAIT);
	return 0;
}

void egress_op_cancel(struct egress_op *op)
{
	if (!op)
		return;
	if (op->req) {
		struct engine_req *req = op->req;

		op->req = NULL;
		op->cb = NULL;
		engine_req_cancel(req);
	}
	eop_free(op);
}

/* ---- teardown after a failed acquire ---------------------------------------- */

struct teardown {
	struct egress *eg;
	char proxy[EGRESS_NAME_MAX];
	char net[EGRESS_NAME_MAX];
	char *proxy_id;
};

static void teardown_net_cb(const struct docker_reply *r, void *arg)
{
	struct teardown *t = arg;

	if (r->error == 0 && r->status != 204 && r->status != 404)
		log_warnx("egress: could not remove %s: %s", t->net, r->message ? r->message : "engine refused");
	free(t->proxy_id);
	free(t);
}

static void teardown_proxy_cb(const struct docker_reply *r, void *arg)
{
	struct teardown *t = arg;

	if (r->error == 0 && (r->status == 204 || r->status == 404) && t->proxy_id)
		egress_proxy_removed(t->eg, t->proxy_id);
	if (r->error == -ECANCELED || t->eg->closing ||
	    docker_network_remove(eg_engine(t->eg), t->net, teardown_net_cb, t, NULL) < 0) {
		free(t->proxy_id);
		free(t);
	}
}

static void teardown_drained_cb(int error, void *arg)
{
	struct teardown *t = arg;

	(void)error;
	if (t->eg->closing ||
	    docker_container_remove(eg_engine(t->eg), t->proxy, true, teardown_proxy_cb, t, NULL) < 0) {
		free(t->proxy_id);
		free(t);
	}
}

void egress_teardown(struct egress *eg, const char *name)
{
	struct teardown *t;
	struct follower *f;

	if (!eg)
		return;
	t = xcalloc(1, sizeof(*t));
	t->eg = eg;
	snprintf(t->proxy, sizeof(t->proxy), "%s%s", name, EGRESS_PROXY_SUFFIX);
	snprintf(t->net, sizeof(t->net), "%s%s", name, EGRESS_NET_SUFFIX);
	f = follower_find_workload(eg, name);
	if (f) {
		t->proxy_id = xstrdup(f->id);
		if (egress_drain(eg, f->id, teardown_drained_cb, t) == 0)
			return;
	}
	teardown_drained_cb(0, t);
}

/* ---- lifetime ----------------------------------------------------------------- */

struct egress *egress_new(struct domain *d)
{
	struct egress *eg = xcalloc(1, sizeof(*eg));
	_cleanup_free_ char *err = NULL;

	eg->d = d;
	TAILQ_INIT(&eg->followers);
	TAILQ_INIT(&eg->ops);
	eg->pool = subnet_pool_new(d->config->egress_subnet_pool, (unsigned)d->config->egress_block_prefix, &err);
	if (!eg->pool)
		fatalx("egress.subnet_pool: %s", err);
	eg->cursor_dir = xasprintf("%s/%s", d->config->egress_state_dir, EGRESS_CURSOR_DIR);
	if (egress_configured(d)) {
		if (mkdir(d->config->egress_state_dir, 0700) < 0 && errno != EEXIST)
			log_warn("egress: cannot create %s; decisions published before a restart may be "
				 "published again", d->config->egress_state_dir);
		if (mkdir(eg->cursor_dir, 0700) < 0 && errno != EEXIST)
			log_warn("egress: cannot create %s", eg->cursor_dir);
	}
	return eg;
}

struct egress *egress_free(struct egress *eg)
{
	struct follower *f;
	struct egress_op *op;

	if (!eg)
		return NULL;
	while ((op = TAILQ_FIRST(&eg->ops)))
		egress_op_cancel(op);
	while ((f = TAILQ_FIRST(&eg->followers)))
		follower_free(f);
	if (eg->image_req)
		engine_req_cancel(eg->image_req);
	if (eg->list_req)
		engine_req_cancel(eg->list_req);
	if (eg->proxies_req)
		engine_req_cancel(eg->proxies_req);
	subnet_pool_free(eg->pool);
	free(eg->image_id);
	free(eg->image_error);
	free(eg->archive);
	free(eg->cursor_dir);
	free(eg);
	return NULL;
}
