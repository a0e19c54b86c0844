/* reap.c — the age-based sweep (see reap.h; behaviour-docker §2.13). */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "dispose.h"
#include "domain.h"
#include "docker.h"
#include "errors.h"
#include "log.h"
#include "names.h"
#include "reap.h"
#include "xmalloc.h"

#define REAP_NAME_FILTER   "^" NAMES_PREFIX
#define REAP_SUFFIX_PROXY  "-proxy"
#define REAP_SUFFIX_NET    "-net"
#define REAP_SHORT_ID      12           /* hex characters of an ID in messages */
#define REAP_SECONDS_PER_DAY 86400
/* The log line of each workload removed ends with it. */
#define REAP_WHY           "reaped (created before the cutoff; sandbox.reap or reap.max_age_s)"
/* now must lie in [REAP_TIME_MIN_S, this]: any clock for ten thousand years. */
#define REAP_NOW_MAX_S     (1LL << 40)

bool reap_cutoff(double now, int64_t older_than_s, struct rfc3339_time *ret_cutoff)
{
	int64_t now_s, ns;

	if (older_than_s <= 0 || !isfinite(now) || now < (double)REAP_TIME_MIN_S ||
	    now > (double)REAP_NOW_MAX_S)
		return false;
	now_s = (int64_t)now;              /* toward zero: floor it */
	if ((double)now_s > now)
		now_s--;
	ns = (int64_t)((now - (double)now_s) * REAP_NSEC_PER_S + 0.5);
	if (ns >= REAP_NSEC_PER_S) {
		now_s++;
		ns -= REAP_NSEC_PER_S;
	}
	if (older_than_s > now_s - REAP_TIME_MIN_S)
		return false;           /* before the first instant: nothing is older */
	ret_cutoff->s = now_s - older_than_s;
	ret_cutoff->ns = (int32_t)ns;
	return true;
}

/* ---- validation ------------------------------------------------------------------------- */

bool reap_id_is_valid(const char *id)
{
	return names_id_is_full(id);
}

static const char *const listing_names[_REAP_LISTING_MAX] = {
	[REAP_LISTING_CONTAINERS] = "container",
	[REAP_LISTING_NETWORKS] = "network",
};

const char *reap_listing_to_string(enum reap_listing l)
{
	return l < _REAP_LISTING_MAX ? listing_names[l] : NULL;
}

static const char *const kind_names[_REAP_KIND_MAX] = {
	[REAP_WORKLOAD] = "workload",
	[REAP_PROXY] = "proxy",
	[REAP_NETWORK] = "network",
};

const char *reap_kind_to_string(enum reap_kind k)
{
	return k < _REAP_KIND_MAX ? kind_names[k] : NULL;
}

static const char *const identity_labels[] = { LABEL_SCOPE, LABEL_THREAD, LABEL_AGENT, LABEL_KIND };

json_t *reap_list_filters(const char *scope_value)
{
	json_t *labels = json_object();

	for (size_t i = 0; i < ELEMENTSOF(identity_labels); i++)
		json_object_set_new(labels, identity_labels[i], json_true());
	if (scope_value) {
		_cleanup_free_ char *cond = xasprintf("%s=%s", LABEL_SCOPE, scope_value);

		json_object_set_new(labels, cond, json_true());
	}
	return json_pack("{s:{s:b}, s:o}", "name", REAP_NAME_FILTER, 1, "label", labels);
}

/* Engine text for a message: bounded, control characters replaced. malloc'd. */
static char *snippet(const char *s)
{
	char *out = xstrndup(s, (size_t)msb_echo_len(s));

	for (char *p = out; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
	return out;
}

/* The kind its name gives a resource of listing l, or -1 when the name is
 * not fully one of ours. */
static int kind_of_name(enum reap_listing l, const char *name)
{
	if (l == REAP_LISTING_NETWORKS)
		return names_is_ours(name, REAP_SUFFIX_NET) ? REAP_NETWORK : -1;
	if (names_is_ours(name, NULL))
		return REAP_WORKLOAD;
	return names_is_ours(name, REAP_SUFFIX_PROXY) ? REAP_PROXY : -1;
}

/* The identity labels all there and non-empty, the scope (if given) the
 * one asked for, and the role telling a proxy from a workload. */
static bool labels_are_ours(enum reap_kind kind, const json_t *labels, const char *scope_value)
{
	const json_t *role = json_object_get(labels, LABEL_ROLE);

	if (!json_is_object(labels))
		return false;
	for (size_t i = 0; i < ELEMENTSOF(identity_labels); i++)
		if (json_string_length(json_object_get(labels, identity_labels[i])) == 0)
			return false;
	if (scope_value && strcmp(json_string_value(json_object_get(labels, LABEL_SCOPE)), scope_value) != 0)
		return false;
	if (kind == REAP_PROXY)
		return json_is_string(role) && strcmp(json_string_value(role), "proxy") == 0;
	if (kind == REAP_WORKLOAD)
		return role == NULL;
	return true;
}

static void item_fill(struct reap_item *item, enum reap_kind kind, const char *id, const char *name,
		      const struct rfc3339_time *created)
{
	size_t group_len = strlen(NAMES_PREFIX) + NAMES_HASH_CHARS;

	*item = (struct reap_item){ .kind = kind, .created = *created };
	snprintf(item->id, sizeof(item->id), "%s", id);
	snprintf(item->name, sizeof(item->name), "%s", name);
	snprintf(item->group, sizeof(item->group), "%.*s", (int)group_len, name);
}

int reap_item_from_inspect(enum reap_listing l, const char *listed_id, const json_t *inspect,
			   const char *scope_value, struct reap_item *ret_item, char **reterr_detail)
{
	const char *what = reap_listing_to_string(l);
	const char *id = json_string_value(json_object_get(inspect, "Id"));
	const char *name = json_string_value(json_object_get(inspect, "Name"));
	const char *created = json_string_value(json_object_get(inspect, "Created"));
	const char *scope;
	const json_t *labels = l == REAP_LISTING_NETWORKS ? json_object_get(inspect, "Labels")
		: json_object_get(json_object_get(inspect, "Config"), "Labels");
	struct rfc3339_time t;
	int kind;

	assert(what);
	if (!reap_id_is_valid(listed_id) || !json_is_object(inspect) || !id || strcmp(id, listed_id) != 0) {
		_cleanup_free_ char *s = snippet(id ? id : "(none)");

		*reterr_detail = xasprintf("the %s listed as %.*s was inspected with the Id \"%s\"", what,
					   REAP_SHORT_ID, listed_id ? listed_id : "(none)", s);
		return -EBADMSG;
	}
	if (!name) {
		*reterr_detail = xasprintf("the %s %.*s was inspected without a Name", what, REAP_SHORT_ID, id);
		return -EBADMSG;
	}
	if (l == REAP_LISTING_CONTAINERS && name[0] == '/')
		name++;
	kind = kind_of_name(l, name);
	if (kind < 0 || !labels_are_ours((enum reap_kind)kind, labels, scope_value))
		return 0;
	if (rfc3339_parse(created, &t) < 0) {
		_cleanup_free_ char *s = snippet(created ? created : "(none)");

		*reterr_detail = xasprintf("the %s %s (%.*s) has an unreadable creation time \"%s\"", what,
					   name, REAP_SHORT_ID, id, s);
		return -EBADMSG;
	}
	item_fill(ret_item, (enum reap_kind)kind, id, name, &t);
	scope = json_string_value(json_object_get(labels, LABEL_SCOPE));
	if (strlen(scope) < sizeof(ret_item->scope)) {
		snprintf(ret_item->scope, sizeof(ret_item->scope), "%s", scope);
	} else {
		/* Cut, it could end inside a UTF-8 sequence (and fail to encode). */
		_cleanup_free_ char *lv = names_label_value(scope);

		snprintf(ret_item->scope, sizeof(ret_item->scope), "%s", lv);
	}
	return 1;
}

/* ---- planning ------------------------------------------------------------------------------ */

/* Group, then kind, then the youngest first. */
static int item_order_cmp(const void *a, const void *b)
{
	const struct reap_item *x = a, *y = b;
	int c = strcmp(x->group, y->group);

	if (c != 0)
		return c;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	c = rfc3339_cmp(&y->created, &x->created);
	return c != 0 ? c : strcmp(x->id, y->id);
}

/* The index just past the group that starts at first. */
static size_t group_end(const struct reap_item *items, size_t n, size_t first)
{
	size_t i = first + 1;

	while (i < n && strcmp(items[i].group, items[first].group) == 0)
		i++;
	return i;
}

void reap_plan(struct reap_item *items, size_t n, const struct rfc3339_time *cutoff)
{
	if (n > 1)
		qsort(items, n, sizeof(*items), item_order_cmp);
	for (size_t first = 0, end; first < n; first = end) {
		bool expired = cutoff && rfc3339_cmp(&items[first].created, cutoff) < 0;

		end = group_end(items, n, first);
		for (size_t i = first; i < end; i++) {
			items[i].anchor = i == first;
			items[i].expired = expired;
			items[i].held = false;
		}
	}
}

/* ---- the driver ------------------------------------------------------------------------------ */

enum reap_state {
	REAP_LIST_CONTAINERS,
	REAP_INSPECT_CONTAINERS,
	REAP_LIST_NETWORKS,
	REAP_INSPECT_NETWORKS,
	REAP_REVALIDATE,
	REAP_REMOVE_PROXIES,
	REAP_REMOVE_WORKLOADS,
	REAP_REMOVE_NETWORKS,
	REAP_DONE,
	_REAP_STATE_MAX,
};

static const char *const state_names[_REAP_STATE_MAX] = {
	[REAP_LIST_CONTAINERS] = "list-containers",
	[REAP_INSPECT_CONTAINERS] = "inspect-containers",
	[REAP_LIST_NETWORKS] = "list-networks",
	[REAP_INSPECT_NETWORKS] = "inspect-networks",
	[REAP_REVALIDATE] = "revalidate",
	[REAP_REMOVE_PROXIES] = "remove-proxies",
	[REAP_REMOVE_WORKLOADS] = "remove-workloads",
	[REAP_REMOVE_NETWORKS] = "remove-networks",
	[REAP_DONE] = "done",
};

static const char *reap_state_to_string(enum reap_state s)
{
	return s < _REAP_STATE_MAX ? state_names[s] : NULL;
}

struct reap {
	struct domain *d;
	enum reap_state state;
	char *scope_value;                  /* label_value(scope), or NULL */
	json_t *filters;                    /* for both listings */
	bool has_cutoff;                    /* false: nothing expires (overflow) */
	struct rfc3339_time cutoff;
	char (*ids)[REAP_ID_HEX + 1];       /* the listing being inspected */
	size_t n_ids;
	size_t next;                        /* the cursor of the current state */
	struct reap_item *items;            /* the inventory */
	size_t n_items, cap_items;
	struct reap_result result;
	bool dry_run;                       /* select only: nothing is removed */
	reap_done_cb *done;
	void *arg;
};

static void reap_run(struct reap *rp);

static void reap_free(struct reap *rp)
{
	free(rp->scope_value);
	json_decref(rp->filters);
	free(rp->ids);
	free(rp->items);
	json_decref(rp->result.failures);
	json_decref(rp->result.would_dispose);
	free(rp);
}

static void reap_enter(struct reap *rp, enum reap_state state)
{
	log_debug("op", "reap: %s → %s", reap_state_to_string(rp->state), reap_state_to_string(state));
	rp->state = state;
	rp->next = 0;
}

static void reap_add_failure(struct reap *rp, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void reap_add_failure(struct reap *rp, const char *code, const char *fmt, ...)
{
	_cleanup_free_ char *detail = NULL;
	va_list ap;

	va_start(ap, fmt);
	detail = xvasprintf(fmt, ap);
	va_end(ap);
	log_warnx("reap: %s: %s", code, detail);
	json_array_append_new(rp->result.failures, json_pack("{s:s, s:s}", "code", code, "detail", detail));
}

/* The inventory cannot be trusted: report it alone and remove nothing. */
static void reap_abort_unlisted(struct reap *rp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void reap_abort_unlisted(struct reap *rp, const char *fmt, ...)
{
	_cleanup_free_ char *detail = NULL;
	va_list ap;

	va_start(ap, fmt);
	detail = xvasprintf(fmt, ap);
	va_end(ap);
	assert(rp->result.disposed + rp->result.proxies_removed + rp->result.networks_removed == 0);
	json_array_clear(rp->result.failures);
	reap_add_failure(rp, REAP_CODE_UNLISTED, "%s, so nothing was reaped", detail);
	reap_enter(rp, REAP_DONE);
}

/* Why a request failed, for a failure's detail: a stable reason of ours
 * (the detail goes on the wire). The engine's own text and the transport's
 * go to the log only. malloc'd. */
static char *reply_why_of(int error, long status, const char *message)
{
	if (error) {
		log_warnx("reap: an engine request failed: %s", strerror(-error));
		return xstrdup(error == -ETIMEDOUT ? "the engine did not answer in time"
						   : "the engine could not be reached");
	}
	if (message) {
		_cleanup_free_ char *m = snippet(message);

		log_warnx("reap: the engine answered HTTP %ld: %s", status, m);
	}
	return xasprintf("the engine answered HTTP %ld", status);
}

static char *reply_why(const struct docker_reply *r)
{
	return reply_why_of(r->error, r->status, r->message);
}

/* Why a request could not be sent or completed (-errno), in stable words. */
static const char *start_why(int error)
{
	switch (error) {
	case -ENOTCONN:
	case -ECONNREFUSED:
		return "the engine is not reachable";
	case -ETIMEDOUT:
		return "the engine did not answer in time";
	case -ECONNRESET:
	case -EPIPE:
		return "the connection to the engine broke";
	default:
		return "the request could not be made";
	}
}

static void reap_finish(struct reap *rp)
{
	size_t n_failures = json_array_size(rp->result.failures);

	if (rp->dry_run)
		log_info("reap (dry run): would remove %zu sandbox(es), %zu prox(ies), %zu network(s); "
			 "%zu failure(s)", rp->result.would_dispose_count, rp->result.would_remove_proxies,
			 rp->result.would_remove_networks, n_failures);
	else
		log_info("reap: removed %zu sandbox(es), %zu prox(ies), %zu network(s); %zu failure(s)",
			 rp->result.disposed, rp->result.proxies_removed, rp->result.networks_removed, n_failures);
	rp->done(&rp->result, rp->arg);
	reap_free(rp);
}

/* ---- inventory ---- */

static enum reap_listing listing_of_state(enum reap_state s)
{
	return s == REAP_LIST_NETWORKS || s == REAP_INSPECT_NETWORKS ? REAP_LISTING_NETWORKS
		: REAP_LISTING_CONTAINERS;
}

/* Keeps the IDs of a listing reply; false (and the sweep aborted) if any is
 * not a full ID. */
static bool reap_take_ids(struct reap *rp, const json_t *list)
{
	const char *what = reap_listing_to_string(listing_of_state(rp->state));
	size_t n = json_array_size(list);

	if (n > REAP_MAX_RESOURCES) {
		reap_abort_unlisted(rp, "the engine listed %zu %ss, more than the %d one sweep takes", n, what,
				    REAP_MAX_RESOURCES);
		return false;
	}
	free(rp->ids);
	rp->ids = n ? xcalloc(n, sizeof(*rp->ids)) : NULL;
	rp->n_ids = n;
	for (size_t i = 0; i < n; i++) {
		const char *id = json_string_value(json_object_get(json_array_get(list, i), "Id"));

		if (!reap_id_is_valid(id)) {
			_cleanup_free_ char *s = snippet(id ? id : "(none)");

			reap_abort_unlisted(rp, "the engine listed a %s with the ID \"%s\"", what, s);
			return false;
		}
		memcpy(rp->ids[i], id, REAP_ID_HEX + 1);
	}
	return true;
}

static void reap_listed_cb(const struct docker_reply *r, void *arg)
{
	struct reap *rp = arg;
	const char *what = reap_listing_to_string(listing_of_state(rp->state));

	if (r->error || r->status != 200 || !json_is_array(r->body)) {
		_cleanup_free_ char *why = r->error || r->status != 200 ? reply_why(r)
			: xstrdup("the reply is not a list");

		reap_abort_unlisted(rp, "could not list %ss (%s)", what, why);
	} else if (reap_take_ids(rp, r->body)) {
		reap_enter(rp, (enum reap_state)(rp->state + 1));
	}
	reap_run(rp);
}

static int reap_list(struct reap *rp)
{
	int r = rp->state == REAP_LIST_CONTAINERS
		? docker_containers_list(rp->d->engine, rp->filters, reap_listed_cb, rp, NULL)
		: docker_networks_list(rp->d->engine, rp->filters, reap_listed_cb, rp, NULL);

	if (r < 0)
		reap_abort_unlisted(rp, "could not list %ss (%s)",
				    reap_listing_to_string(listing_of_state(rp->state)), start_why(r));
	return r < 0 ? 0 : 1;
}

static void reap_add_item(struct reap *rp, const struct reap_item *item)
{
	if (rp->n_items == rp->cap_items) {
		rp->cap_items = rp->cap_items ? 2 * rp->cap_items : 16;
		rp->items = xrealloc(rp->items, rp->cap_items * sizeof(*rp->items));
	}
	rp->items[rp->n_items++] = *item;
}

static void reap_inspected_cb(const struct docker_reply *r, void *arg)
{
	struct reap *rp = arg;
	enum reap_listing l = listing_of_state(rp->state);
	const char *id = rp->ids[rp->next];
	_cleanup_free_ char *detail = NULL;
	struct reap_item item;
	int k;

	if (r->error || (r->status != 200 && r->status != 404)) {
		_cleanup_free_ char *why = reply_why(r);

		reap_abort_unlisted(rp, "could not inspect the %s %.*s (%s)", reap_listing_to_string(l),
				    REAP_SHORT_ID, id, why);
	} else if (r->status == 200) {
		k = reap_item_from_inspect(l, id, r->body, rp->scope_value, &item, &detail);
		if (k < 0)
			reap_abort_unlisted(rp, "%s", detail);
		else if (k > 0)
			reap_add_item(rp, &item);
		else
			log_debug("op", "reap: %s %.*s is not ours, skipped", reap_listing_to_string(l),
				  REAP_SHORT_ID, id);
	}
	rp->next++;                 /* 404: gone since the listing, nothing to reap */
	reap_run(rp);
}

/* Inspects the next listed ID, or moves on when none is left. */
static int reap_inspect_next(struct reap *rp)
{
	enum reap_listing l = listing_of_state(rp->state);
	int r;

	if (rp->next == rp->n_ids) {
		if (rp->state == REAP_INSPECT_CONTAINERS) {
			reap_enter(rp, REAP_LIST_NETWORKS);
		} else {
			reap_plan(rp->items, rp->n_items, rp->has_cutoff ? &rp->cutoff : NULL);
			reap_enter(rp, REAP_REVALIDATE);
		}
		return 0;
	}
	r = l == REAP_LISTING_CONTAINERS
		? docker_container_inspect(rp->d->engine, rp->ids[rp->next], reap_inspected_cb, rp, NULL)
		: docker_network_inspect(rp->d->engine, rp->ids[rp->next], reap_inspected_cb, rp, NULL);
	if (r < 0)
		reap_abort_unlisted(rp, "could not inspect the %s %.*s (%s)", reap_listing_to_string(l),
				    REAP_SHORT_ID, rp->ids[rp->next], start_why(r));
	return r < 0 ? 0 : 1;
}

/* ---- revalidation ---- */

/* Marks item i's group as kept (its items are contiguous after reap_plan). */
static void reap_hold_group(struct reap *rp, size_t i)
{
	size_t first = i;

	while (first > 0 && strcmp(rp->items[first - 1].group, rp->items[i].group) == 0)
		first--;
	for (size_t j = first, end = group_end(rp->items, rp->n_items, first); j < end; j++)
		rp->items[j].held = true;
}

static void reap_revalidated_cb(const struct docker_reply *r, void *arg)
{
	struct reap *rp = arg;
	const struct reap_item *anchor = &rp->items[rp->next];
	const char *id = json_string_value(json_object_get(r->body, "Id"));

	if (r->error == 0 && r->status == 404) {
		/* Gone: a replacement must not inherit the stale age. */
		log_debug("op", "reap: %s %s vanished before removal, its group is kept",
			  reap_kind_to_string(anchor->kind), anchor->name);
		reap_hold_group(rp, rp->next);
	} else if (r->error || r->status != 200) {
		_cleanup_free_ char *why = reply_why(r);

		reap_abort_unlisted(rp, "could not revalidate the %s %s (%s)", reap_kind_to_string(anchor->kind),
				    anchor->name, why);
	} else if (!id || strcmp(id, anchor->id) != 0) {
		_cleanup_free_ char *s = snippet(id ? id : "(none)");

		reap_abort_unlisted(rp, "the %s %s (%.*s) revalidated as \"%s\"", reap_kind_to_string(anchor->kind),
				    anchor->name, REAP_SHORT_ID, anchor->id, s);
	}
	rp->next++;
	reap_run(rp);
}

/* Re-reads the ID of the next expired anchor, or moves on to removal. */
static int reap_revalidate_next(struct reap *rp)
{
	const struct reap_item *it;
	int r;

	while (rp->next < rp->n_items && !(rp->items[rp->next].anchor && rp->items[rp->next].expired))
		rp->next++;
	if (rp->next == rp->n_items) {
		reap_enter(rp, REAP_REMOVE_PROXIES);
		return 0;
	}
	it = &rp->items[rp->next];
	r = it->kind == REAP_NETWORK
		? docker_network_inspect(rp->d->engine, it->id, reap_revalidated_cb, rp, NULL)
		: docker_container_inspect(rp->d->engine, it->id, reap_revalidated_cb, rp, NULL);
	if (r < 0)
		reap_abort_unlisted(rp, "could not revalidate the %s %s (%s)", reap_kind_to_string(it->kind),
				    it->name, start_why(r));
	return r < 0 ? 0 : 1;
}

/* ---- removal ---- */

static enum reap_kind kind_of_state(enum reap_state s)
{
	switch (s) {
	case REAP_REMOVE_PROXIES:
		return REAP_PROXY;
	case REAP_REMOVE_WORKLOADS:
		return REAP_WORKLOAD;
	case REAP_REMOVE_NETWORKS:
		return REAP_NETWORK;
	default:
		assert(!"unreachable");
		return _REAP_KIND_MAX;
	}
}

/* Why a removal failed, as a failure of its own. */
static void reap_removal_failed(struct reap *rp, const struct reap_item *it, int error, const char *why)
{
	const char *kind = reap_kind_to_string(it->kind);

	if (error == -ETIMEDOUT)
		reap_add_failure(rp, REAP_CODE_TIMEOUT, "removing the %s %s (%.*s) timed out; it may remain",
				 kind, it->name, REAP_SHORT_ID, it->id);
	else if (error)
		reap_add_failure(rp, REAP_CODE_UNREACHABLE, "could not reach the engine to remove the %s %s (%.*s): %s",
				 kind, it->name, REAP_SHORT_ID, it->id, start_why(error));
	else
		reap_add_failure(rp, REAP_CODE_REFUSED, "the engine refused to remove the %s %s (%.*s): %s",
				 kind, it->name, REAP_SHORT_ID, it->id, why);
}

static void reap_count(struct reap *rp, enum reap_kind kind)
{
	if (kind == REAP_WORKLOAD)
		rp->result.disposed++;
	else if (kind == REAP_PROXY)
		rp->result.proxies_removed++;
	else
		rp->result.networks_removed++;
}

/* The one selection of the removal, the dry run's too: expired, and its
 * group not held. */
static bool reap_item_goes(const struct reap_item *it)
{
	return it->expired && !it->held;
}

void reap_dry_result(const struct reap_item *items, size_t n, struct reap_result *result)
{
	if (!result->would_dispose)
		result->would_dispose = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct reap_item *it = &items[i];
		char created[64];

		if (!reap_item_goes(it))
			continue;
		if (it->kind == REAP_PROXY) {
			result->would_remove_proxies++;
		} else if (it->kind == REAP_NETWORK) {
			result->would_remove_networks++;
		} else {
			result->would_dispose_count++;
			if (json_array_size(result->would_dispose) >= REAP_DRY_RUN_LISTED_MAX)
				continue;
			rfc3339_format(&it->created, created, sizeof(created));
			json_array_append_new(result->would_dispose,
					      json_pack("{s:s, s:s, s:s, s:s}", "sandbox", it->id, "name", it->name,
							"scope", it->scope, "created", created));
		}
	}
}

/* The dry run, at the point removal would start: what it would remove, by
 * the same selection (reap_item_goes), and nothing removed. */
static void reap_dry_select(struct reap *rp)
{
	reap_dry_result(rp->items, rp->n_items, &rp->result);
	reap_enter(rp, REAP_DONE);
}

static const enum dispose_kind dispose_kinds[_REAP_KIND_MAX] = {
	[REAP_WORKLOAD] = DISPOSE_WORKLOAD,
	[REAP_PROXY] = DISPOSE_PROXY,
	[REAP_NETWORK] = DISPOSE_NETWORK,
};

/* The removal run's next step: the next resource of this state's kind that
 * goes, moving through the states; false when the sweep is done. */
static bool reap_step(void *arg, struct dispose_step *ret_step)
{
	struct reap *rp = arg;
	const struct reap_item *it;

	for (;;) {
		enum reap_kind kind;

		if (rp->state == REAP_DONE)
			return false;
		kind = kind_of_state(rp->state);
		while (rp->next < rp->n_items &&
		       !(rp->items[rp->next].kind == kind && reap_item_goes(&rp->items[rp->next])))
			rp->next++;
		if (rp->next < rp->n_items)
			break;
		reap_enter(rp, (enum reap_state)(rp->state + 1));
	}
	it = &rp->items[rp->next];
	*ret_step = (struct dispose_step){ .kind = dispose_kinds[it->kind], .ref = it->id, .name = it->name };
	return true;
}

/* A removal's outcome: counted, or a failure of its own; a container not
 * removed keeps the rest of its group for a retry. */
static void reap_outcome(void *arg, const struct dispose_step *step, const struct dispose_outcome *o)
{
	struct reap *rp = arg;
	size_t i = rp->next;
	const struct reap_item *it = &rp->items[i];

	(void)step;
	if (o->started && o->error == -ECANCELED) {       /* the daemon is stopping: start nothing new */
		reap_add_failure(rp, REAP_CODE_UNKNOWN, "the daemon stopped before the %s %s (%.*s) was removed",
				 reap_kind_to_string(it->kind), it->name, REAP_SHORT_ID, it->id);
		reap_enter(rp, REAP_DONE);
		return;
	}
	if (o->removed)
		reap_count(rp, it->kind);
	if (!o->started) {
		reap_removal_failed(rp, it, o->error, NULL);
	} else if (!o->removed && !o->absent) {
		_cleanup_free_ char *why = reply_why_of(o->error, o->status, o->message);

		reap_removal_failed(rp, it, o->error, why);
	}
	if (it->kind != REAP_NETWORK && !o->removed)   /* failed or already gone */
		reap_hold_group(rp, i);
	rp->next++;
}

static void reap_removal_done(void *arg)
{
	reap_run(arg);
}

/* Proxies, then workloads, then networks: one removal run (dispose.h). */
static const struct dispose_run_ops reap_run_ops = {
	.next = reap_step,
	.outcome = reap_outcome,
	.done = reap_removal_done,
};

/* Starts the next request, moving through the states, until one is in
 * flight or the sweep is done. Requests that cannot start are handled here
 * without recursion. */
static void reap_run(struct reap *rp)
{
	for (;;) {
		int r;

		switch (rp->state) {
		case REAP_LIST_CONTAINERS:
		case REAP_LIST_NETWORKS:
			r = reap_list(rp);
			break;
		case REAP_INSPECT_CONTAINERS:
		case REAP_INSPECT_NETWORKS:
			r = reap_inspect_next(rp);
			break;
		case REAP_REVALIDATE:
			r = reap_revalidate_next(rp);
			break;
		case REAP_REMOVE_PROXIES:
		case REAP_REMOVE_WORKLOADS:
		case REAP_REMOVE_NETWORKS:
			if (rp->dry_run) {
				reap_dry_select(rp);
				r = 0;
				break;
			}
			r = dispose_run_start(rp->d, &reap_run_ops, REAP_WHY, rp);
			break;
		case REAP_DONE:
			reap_finish(rp);
			return;
		default:
			assert(!"unreachable");
			return;
		}
		if (r > 0)
			return;
	}
}

int reap_start(struct domain *d, int64_t older_than_s, const char *scope, double now, reap_done_cb *done,
	       void *arg)
{
	return reap_start_dry(d, older_than_s, scope, now, false, done, arg);
}

int reap_start_dry(struct domain *d, int64_t older_than_s, const char *scope, double now, bool dry_run,
		   reap_done_cb *done, void *arg)
{
	struct reap *rp;
	int r;

	if (!d || !done || older_than_s <= 0 || !isfinite(now))
		return -EINVAL;
	rp = xcalloc(1, sizeof(*rp));
	rp->d = d;
	rp->done = done;
	rp->arg = arg;
	rp->state = REAP_LIST_CONTAINERS;
	rp->scope_value = scope ? names_label_value(scope) : NULL;
	rp->filters = reap_list_filters(rp->scope_value);
	rp->has_cutoff = reap_cutoff(now, older_than_s, &rp->cutoff);
	rp->result.failures = json_array();
	rp->dry_run = dry_run;
	rp->result.dry_run = dry_run;
	rp->result.would_dispose = dry_run ? json_array() : NULL;
	/* The first request is started here so that "unreachable" is the
	 * caller's answer, with done never called. */
	r = docker_containers_list(d->engine, rp->filters, reap_listed_cb, rp, NULL);
	if (r < 0) {
		reap_free(rp);
		return r;
	}
	return 0;
}

json_t *reap_result_to_json(const struct reap_result *result)
{
	json_t *j = json_pack("{s:I, s:I, s:I, s:O}", "disposed", (json_int_t)result->disposed,
			      "proxies_removed", (json_int_t)result->proxies_removed, "networks_removed",
			      (json_int_t)result->networks_removed, "failures", result->failures);

	if (j && result->dry_run) {
		json_object_set_new(j, "dry_run", json_true());
		json_object_set(j, "would_dispose", result->would_dispose);
		json_object_set_new(j, "would_dispose_count", json_integer((json_int_t)result->would_dispose_count));
		json_object_set_new(j, "would_remove_proxies", json_integer((json_int_t)result->would_remove_proxies));
		json_object_set_new(j, "would_remove_networks",
				    json_integer((json_int_t)result->would_remove_networks));
	}
	return j;
}
