/* egress_follow.h — the proxies' decisions, followed live and published as
 * events (egress.h's "Decisions").
 *
 * Each running proxy has a follower: GET logs?follow=1 with timestamps,
 * demultiplexed, split in lines, parsed (egresslog.h), at most
 * EGRESS_BYTES_PER_TURN a loop turn (then the stream pauses until the next
 * turn). Every decision is published once, through the domain's publish
 * callback, coalesced per proxy (egresslog.h: at most
 * EGRESS_EVENTS_PER_WINDOW one by one a window, the rest as counted events
 * at its end, or earlier when the log stream ends): a cursor per proxy (the
 * timestamp of the last published decision and how many shared it; one
 * fixed-width record written in place), kept in egress.state_dir, skips
 * what was already published, also by an earlier daemon; it moves past a
 * held decision only once that is published. Draining (before a proxy is
 * removed) stops the proxy, then reads what is left and publishes what is
 * held. */
#ifndef MSB_EGRESS_FOLLOW_H
#define MSB_EGRESS_FOLLOW_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "egress_topo.h"

struct domain;
struct egress_follow;

/* The proxy with this id said it is listening (called from the loop). */
typedef void egress_follow_ready_fn(const char *proxy_id, void *arg);

/* configured: a proxy binary is configured (the cursors' folder is made). */
struct egress_follow *egress_follow_new(struct domain *d, bool configured, egress_follow_ready_fn *ready,
					void *arg);
/* Cancels every stream (what is held is published unless closing). NULL-safe; returns NULL. */
struct egress_follow *egress_follow_free(struct egress_follow *fl);
/* The daemon stops: nothing new is started (what is held stays held); drains in flight end
 * when their streams are cancelled, with the engine's requests. */
void egress_follow_close(struct egress_follow *fl);

/* Lists the proxy containers and follows the running ones (after the
 * engine came back). */
void egress_follow_recover(struct egress_follow *fl);
/* Follows the proxy container id (its name and labels as the engine has
 * them) unless it is followed or drained already. */
void egress_follow_watch(struct egress_follow *fl, const char *id, const char *name, const json_t *labels);
/* Has proxy id said it is listening? If so its topology is info (copied). */
bool egress_follow_ready_set(struct egress_follow *fl, const char *id, const struct egress_info *info);
/* The id of the proxy of workload name that is followed (not gone), or NULL. */
const char *egress_follow_proxy_of(const struct egress_follow *fl, const char *name);

/* egress.h's egress_proxy_ok, egress_drain and egress_proxy_removed. */
bool egress_follow_proxy_ok(const struct egress_follow *fl, const char *name, struct egress_info *info);
int egress_follow_drain(struct egress_follow *fl, const char *proxy_id, egress_drain_cb *cb, void *arg);
void egress_follow_removed(struct egress_follow *fl, const char *proxy_id);

/* Decisions published since start. */
uint64_t egress_follow_published(const struct egress_follow *fl);
/* Adds daemon.status's "proxies_followed", "decisions_published",
 * "decisions_seen", "decisions_held", "decisions_coalesced",
 * "events_published", "stream_pauses", "decisions_not_logged" to o. */
void egress_follow_status_add(const struct egress_follow *fl, json_t *o);

#endif
