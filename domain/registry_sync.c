#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "acquire.h"
#include "docker.h"
#include "domain.h"
#include "egress.h"
#include "fileop.h"
#include "freeze.h"
#include "log.h"
#include "registry.h"
#include "registry_sync.h"
#include "xmalloc.h"

struct registry_sync {
	struct domain *d;
	bool journal_replayed;       /* files.journal_dir was replayed (once, at the first listing) */
	size_t orphan_thaws;         /* thaws of a dead daemon's freezes in flight (the replay waits) */
	uint64_t gen;                /* the resync a listing reply belongs to */
	struct event *retry_timer;   /* retries a failed listing */
	long backoff_ms;
};

struct orphan_thaw {
	struct registry_sync *s;
	char *id;
};

struct sync_listing {
	struct registry_sync *s;
	uint64_t gen;
};

static void journal_replay_once(struct registry_sync *s)
{
	if (s->journal_replayed || s->orphan_thaws)
		return;
	s->journal_replayed = true;
	fileop_journal_replay(s->d);
}

static void thaw_done_cb(struct freeze_claim *claim, int error, const struct freeze_failure *f, void *arg)
{
	struct orphan_thaw *ot = arg;
	struct registry_sync *s = ot->s;
	char *id = ot->id;

	free(ot);
	(void)claim;
	if (error == 0)
		log_info("sandbox %.12s: thawed; a previous daemon left it frozen", id);
	else if (error == -EAGAIN)
		/* A live daemon's file call: it thaws the container itself. */
		log_info("sandbox %.12s: left frozen: another maf-sandboxd on this host holds it", id);
	else if (error != -ECANCELED)
		log_warnx("%s", f && f->message ? f->message : strerror(-error));
	free(id);
	if (s->orphan_thaws && --s->orphan_thaws == 0 && error != -ECANCELED)
		journal_replay_once(s);     /* its rm execs never meet a container still paused */
}

/* A container found paused that no claim of ours holds, and no other live
 * maf-sandboxd on this host (its host lock), was frozen by a dead daemon:
 * thaw it, under its lock, so a freeze of ours or theirs is never lifted. */
static void thaw_orphans(struct registry_sync *s)
{
	struct domain *d = s->d;

	/* The loop's own count: a thaw refused at once (thaw_done_cb, below)
	 * must not start the replay while later paused orphans are still to be
	 * counted (their rm would meet them paused); the caller replays after. */
	s->orphan_thaws++;
	for (struct sandbox *sb = registry_first(d->registry); sb; sb = registry_next(sb)) {
		struct orphan_thaw *ot;
		char *id;
		int r;

		if (sb->state != SANDBOX_PAUSED || acquire_in_flight(d->acquires, sb->name) ||
		    freeze_is_held(d->freezes, sb->id))
			continue;
		id = xstrdup(sb->id);
		ot = xmalloc(sizeof(*ot));
		*ot = (struct orphan_thaw){ s, id };
		s->orphan_thaws++;
		r = freeze_table_thaw_orphan(d->freezes, d->engine, id, thaw_done_cb, ot, NULL);
		if (r == -EAGAIN || r == -ENOLCK) {
			thaw_done_cb(NULL, r, NULL, ot);   /* the host lock refused it: say so */
		} else if (r < 0) {
			s->orphan_thaws--;
			free(id);
			free(ot);
		}
	}
	s->orphan_thaws--;
}

static void sync_list(struct registry_sync *s);

static void listed_cb(const struct docker_reply *r, void *arg)
{
	struct sync_listing *l = arg;
	struct registry_sync *s = l->s;
	struct domain *d = s->d;
	bool current = l->gen == s->gen;
	struct timeval tv;

	free(l);
	if (r->error == -ECANCELED || !current)
		return;                 /* shutting down, or a newer resync is under way */
	if (r->error || r->status != 200 || !json_is_array(r->body)) {
		log_warnx("could not list sandboxes to rebuild the registry; retrying in %ld ms", s->backoff_ms);
		tv.tv_sec = s->backoff_ms / 1000;
		tv.tv_usec = (s->backoff_ms % 1000) * 1000;
		evtimer_add(s->retry_timer, &tv);
		s->backoff_ms = s->backoff_ms * 2 > REGISTRY_SYNC_RETRY_MAX_MS ? REGISTRY_SYNC_RETRY_MAX_MS :
			s->backoff_ms * 2;
		return;
	}
	s->backoff_ms = REGISTRY_SYNC_RETRY_MIN_MS;
	registry_replace_all(d->registry, r->body);
	d->registry_synced = true;
	log_info("registry: %zu sandbox(es) with our labels", registry_count(d->registry));
	thaw_orphans(s);
	journal_replay_once(s);
}

static void sync_list(struct registry_sync *s)
{
	json_t *filters = json_pack("{s:{s:b}}", "label", "maf-sandbox.kind", 1);
	struct sync_listing *l = xmalloc(sizeof(*l));

	*l = (struct sync_listing){ .s = s, .gen = s->gen };
	if (docker_containers_list(s->d->engine, filters, listed_cb, l, NULL) < 0) {
		log_debug("engine", "registry listing not started: the engine is not reachable");
		free(l);
	}
	json_decref(filters);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	sync_list(arg);
}

/* Before each (re)connection of the events stream: list again, keeping the
 * events that arrive meanwhile to replay after the listing. */
static void resync_cb(void *arg)
{
	struct registry_sync *s = arg;

	s->d->registry_synced = false;
	s->gen++;
	s->backoff_ms = REGISTRY_SYNC_RETRY_MIN_MS;
	evtimer_del(s->retry_timer);
	registry_begin_resync(s->d->registry);
	sync_list(s);
	egress_resync(s->d->egress);
}

static void event_cb(const json_t *event, void *arg)
{
	struct registry_sync *s = arg;

	registry_apply_event(s->d->registry, event);
}

bool registry_sync_current(const struct domain *d)
{
	return d->registry_synced && docker_events_is_connected(d->events);
}

struct registry_sync *registry_sync_new(struct domain *d)
{
	struct registry_sync *s = xmalloc(sizeof(*s));
	json_t *filters;

	*s = (struct registry_sync){ .d = d, .backoff_ms = REGISTRY_SYNC_RETRY_MIN_MS };
	s->retry_timer = evtimer_new(d->base, retry_cb, s);
	if (!s->retry_timer) {
		free(s);
		return NULL;
	}
	filters = json_pack("{s:{s:b}, s:{s:b}}", "type", "container", 1, "label", "maf-sandbox.kind", 1);
	d->events = docker_events_new(d->base, d->engine, filters, event_cb, resync_cb, s);
	json_decref(filters);
	return s;
}

void registry_sync_start(struct registry_sync *s)
{
	docker_events_start(s->d->events);
}

void registry_sync_stop(struct registry_sync *s)
{
	if (!s)
		return;
	s->d->events = docker_events_free(s->d->events);
	evtimer_del(s->retry_timer);
}

struct registry_sync *registry_sync_free(struct registry_sync *s)
{
	if (!s)
		return NULL;
	registry_sync_stop(s);
	event_free(s->retry_timer);
	free(s);
	return NULL;
}
