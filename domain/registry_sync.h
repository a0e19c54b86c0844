/* registry_sync.h — keeps the registry what the backend has (ARCHITECTURE
 * decision 3): a listing of the workloads with our labels at start and
 * before every (re)connection of the watch (the engine's /events), the
 * watch's events in between (kept while a listing is under way and
 * replayed after it: registry_begin_resync), a failed listing retried after
 * a backoff between REGISTRY_SYNC_RETRY_MIN_MS and _MAX_MS. After the first
 * listing it thaws what a dead daemon left frozen (no claim of ours, no
 * other live maf-sandboxd's host lock), and once those thaws end it replays
 * the file journal, once (fileop.h).
 *
 * It writes d->registry_synced (a listing has been read since the last
 * resync) and d->events (the watch); egress is told of each resync
 * (egress_resync). Ownership: the daemon makes it after the domain's
 * tables and frees it before them. */
#ifndef MSB_REGISTRY_SYNC_H
#define MSB_REGISTRY_SYNC_H

#include <stdbool.h>

struct domain;
struct registry_sync;

#define REGISTRY_SYNC_RETRY_MIN_MS 250
#define REGISTRY_SYNC_RETRY_MAX_MS 10000

/* Does the registry say what the engine has, now: listed since the last
 * resync and the watch connected? A warm acquire and sandbox.list trust it
 * only then. */
bool registry_sync_current(const struct domain *d);

/* NULL when the loop cannot give it a timer. d must outlive it. */
struct registry_sync *registry_sync_new(struct domain *d);
/* Starts the watch (its first connection lists). */
void registry_sync_start(struct registry_sync *s);
/* No more listing, no more watching (the drain): frees the watch and stops
 * the retry timer. Thaws in flight end with the engine's requests. */
void registry_sync_stop(struct registry_sync *s);
/* NULL-safe; returns NULL. Stops it first. */
struct registry_sync *registry_sync_free(struct registry_sync *s);

#endif
