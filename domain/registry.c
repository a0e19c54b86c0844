#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "registry.h"
#include "xmalloc.h"

struct registry {
	TAILQ_HEAD(, sandbox) list;
	size_t count;
	uint64_t event_seq;
	char (*tombstones)[REGISTRY_ID_LEN + 1];   /* ring of destroyed ids */
	size_t n_tombstones, next_tombstone;
	bool resyncing;
	json_t *held;                              /* events seen during a resync */
	registry_init_gone_fn *init_gone;          /* the watcher (the local plane's pins) */
	void *init_gone_arg;
};

static const char *const state_names[_SANDBOX_STATE_MAX] = {
	[SANDBOX_CREATED] = "created",
	[SANDBOX_RUNNING] = "running",
	[SANDBOX_PAUSED] = "paused",
	[SANDBOX_EXITED] = "exited",
	[SANDBOX_OTHER] = "other",
};

const char *sandbox_state_to_string(enum sandbox_state s)
{
	return s < _SANDBOX_STATE_MAX ? state_names[s] : NULL;
}

enum sandbox_state sandbox_state_from_docker(const char *s)
{
	for (int i = 0; i < SANDBOX_OTHER; i++)
		if (s && strcmp(s, state_names[i]) == 0)
			return (enum sandbox_state)i;
	return SANDBOX_OTHER;
}

struct registry *registry_new(void)
{
	struct registry *r = xcalloc(1, sizeof(*r));

	TAILQ_INIT(&r->list);
	r->tombstones = xcalloc(REGISTRY_TOMBSTONES, sizeof(*r->tombstones));
	r->held = json_array();
	return r;
}

uint64_t registry_event_seq(const struct registry *r)
{
	return r->event_seq;
}

static bool registry_is_tombstoned(const struct registry *r, const char *id)
{
	for (size_t i = 0; i < r->n_tombstones; i++)
		if (strcmp(r->tombstones[i], id) == 0)
			return true;
	return false;
}

static void registry_tombstone(struct registry *r, const char *id)
{
	if (strlen(id) != REGISTRY_ID_LEN || registry_is_tombstoned(r, id))
		return;
	memcpy(r->tombstones[r->next_tombstone], id, REGISTRY_ID_LEN + 1);
	r->next_tombstone = (r->next_tombstone + 1) % REGISTRY_TOMBSTONES;
	if (r->n_tombstones < REGISTRY_TOMBSTONES)
		r->n_tombstones++;
}

void registry_begin_resync(struct registry *r)
{
	json_array_clear(r->held);
	r->resyncing = true;
}

void registry_watch_inits(struct registry *r, registry_init_gone_fn *fn, void *arg)
{
	r->init_gone = fn;
	r->init_gone_arg = arg;
}

static void registry_init_gone(struct registry *r, const struct sandbox *sb)
{
	if (r->init_gone)
		r->init_gone(r->init_gone_arg, sb->id);
}

static void sandbox_free(struct registry *r, struct sandbox *sb)
{
	registry_init_gone(r, sb);
	free(sb->id);
	free(sb->name);
	free(sb->image);
	free(sb->image_id);
	json_decref(sb->labels);
	free(sb);
}

void registry_remove(struct registry *r, struct sandbox *sb)
{
	TAILQ_REMOVE(&r->list, sb, entry);
	r->count--;
	sandbox_free(r, sb);
}

struct registry *registry_free(struct registry *r)
{
	struct sandbox *sb;

	if (!r)
		return NULL;
	while ((sb = TAILQ_FIRST(&r->list)))
		registry_remove(r, sb);
	if (r->init_gone)
		r->init_gone(r->init_gone_arg, NULL);   /* the watcher forgets r */
	free(r->tombstones);
	json_decref(r->held);
	free(r);
	return NULL;
}

struct sandbox *registry_find_name(const struct registry *r, const char *name)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &r->list, entry)
		if (strcmp(sb->name, name) == 0)
			return sb;
	return NULL;
}

struct sandbox *registry_find_id(const struct registry *r, const char *id)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &r->list, entry)
		if (strcmp(sb->id, id) == 0)
			return sb;
	return NULL;
}

struct sandbox *registry_first(const struct registry *r)
{
	return TAILQ_FIRST(&r->list);
}

struct sandbox *registry_next(const struct sandbox *sb)
{
	return TAILQ_NEXT(sb, entry);
}

size_t registry_count(const struct registry *r)
{
	return r->count;
}

const char *sandbox_label(const struct sandbox *sb, const char *key)
{
	return json_string_value(json_object_get(sb->labels, key));
}

/* Ours, and a workload: our name, the four identity labels, no proxy role. */
static bool labels_are_workload(const char *name, const json_t *labels)
{
	static const char *const required[] = { LABEL_SCOPE, LABEL_THREAD, LABEL_AGENT, LABEL_KIND };

	if (!json_is_object(labels) || !names_is_ours(name, NULL) || json_object_get(labels, LABEL_ROLE))
		return false;
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
		if (json_string_length(json_object_get(labels, required[i])) == 0)
			return false;
	return true;
}

static void sandbox_set_owner(struct sandbox *sb)
{
	const char *o = sandbox_label(sb, LABEL_OWNER);
	char *end;
	unsigned long v;

	sb->has_owner = false;
	if (!o || !*o)
		return;
	errno = 0;
	v = strtoul(o, &end, 10);
	if (errno || *end || v > (unsigned long)(uid_t)-2)
		return;
	sb->has_owner = true;
	sb->owner = (uid_t)v;
}

/* Adds or updates the entry for (id, name) with the given facts. */
static struct sandbox *registry_put(struct registry *r, const char *id, const char *name,
				    const json_t *labels, const char *image, const char *image_id,
				    time_t created, enum sandbox_state state)
{
	struct sandbox *sb;

	if (!names_id_is_full(id) || !name || !labels_are_workload(name, labels) ||
	    registry_is_tombstoned(r, id))
		return NULL;
	sb = registry_find_id(r, id);
	if (!sb) {
		/* A name belongs to one container at a time: a new id replaces. */
		struct sandbox *old = registry_find_name(r, name);

		if (old)
			registry_remove(r, old);
		sb = xcalloc(1, sizeof(*sb));
		sb->id = xstrdup(id);
		sb->name = xstrdup(name);
		TAILQ_INSERT_TAIL(&r->list, sb, entry);
		r->count++;
	}
	json_decref(sb->labels);
	sb->labels = json_deep_copy(labels);
	free(sb->image);
	sb->image = image ? xstrdup(image) : NULL;
	if (image_id) {   /* an event does not say: what was known stays */
		free(sb->image_id);
		sb->image_id = xstrdup(image_id);
	}
	if (created)
		sb->created = created;
	sb->state = state;
	sb->seen = true;
	sandbox_set_owner(sb);
	return sb;
}

struct sandbox *registry_update_from_summary(struct registry *r, const json_t *item)
{
	const char *name = json_string_value(json_array_get(json_object_get(item, "Names"), 0));

	if (name && name[0] == '/')
		name++;
	return registry_put(r, json_string_value(json_object_get(item, "Id")), name,
			    json_object_get(item, "Labels"),
			    json_string_value(json_object_get(item, "Image")),
			    json_string_value(json_object_get(item, "ImageID")),
			    (time_t)json_integer_value(json_object_get(item, "Created")),
			    sandbox_state_from_docker(json_string_value(json_object_get(item, "State"))));
}

/* "2026-11-29T08:54:38.123456789Z" → unix seconds (UTC); 0 if unreadable. */
static time_t parse_rfc3339(const char *s)
{
	struct tm tm = { 0 };
	const char *rest;

	if (!s || !(rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
		return 0;
	return timegm(&tm);
}

struct sandbox *registry_update_from_inspect(struct registry *r, const json_t *inspect, uint64_t since)
{
	const char *name = json_string_value(json_object_get(inspect, "Name"));
	const json_t *config = json_object_get(inspect, "Config");
	const json_t *state = json_object_get(inspect, "State");
	enum sandbox_state st = sandbox_state_from_docker(json_string_value(json_object_get(state, "Status")));

	if (name && name[0] == '/')
		name++;
	if (json_is_true(json_object_get(state, "Paused")))
		st = SANDBOX_PAUSED;
	{
		/* An event newer than this inspect wins. */
		const char *id = json_string_value(json_object_get(inspect, "Id"));
		struct sandbox *known = id ? registry_find_id(r, id) : NULL;

		if (known && known->event_seq > since) {
			/* What no event says, and never changes for the container's
			 * life, is still taken: its image id. */
			const char *image_id = json_string_value(json_object_get(inspect, "Image"));

			if (!known->image_id && image_id)
				known->image_id = xstrdup(image_id);
			return known;
		}
	}
	return registry_put(r, json_string_value(json_object_get(inspect, "Id")), name,
			    json_object_get(config, "Labels"),
			    json_string_value(json_object_get(config, "Image")),
			    json_string_value(json_object_get(inspect, "Image")),
			    parse_rfc3339(json_string_value(json_object_get(inspect, "Created"))), st);
}

void registry_replace_all(struct registry *r, const json_t *list)
{
	struct sandbox *sb, *next;
	size_t i;
	json_t *item;

	TAILQ_FOREACH(sb, &r->list, entry)
		sb->seen = false;
	json_array_foreach(list, i, item)
		registry_update_from_summary(r, item);
	for (sb = TAILQ_FIRST(&r->list); sb; sb = next) {
		next = TAILQ_NEXT(sb, entry);
		if (!sb->seen)
			registry_remove(r, sb);
	}
	/* What happened while the listing was under way comes after it. */
	r->resyncing = false;
	json_array_foreach(r->held, i, item)
		registry_apply_event(r, item);
	json_array_clear(r->held);
}

struct event_state {
	const char *action;
	enum sandbox_state state;
};

static const struct event_state event_states[] = {
	{ "start", SANDBOX_RUNNING },
	{ "restart", SANDBOX_RUNNING },
	{ "unpause", SANDBOX_RUNNING },
	{ "pause", SANDBOX_PAUSED },
	{ "die", SANDBOX_EXITED },
	{ "stop", SANDBOX_EXITED },
	{ "kill", SANDBOX_EXITED },
	{ "create", SANDBOX_CREATED },
};

void registry_apply_event(struct registry *r, const json_t *event)
{
	const json_t *actor = json_object_get(event, "Actor");
	const json_t *attrs = json_object_get(actor, "Attributes");
	const char *type = json_string_value(json_object_get(event, "Type"));
	const char *action = json_string_value(json_object_get(event, "Action"));
	const char *id = json_string_value(json_object_get(actor, "ID"));
	struct sandbox *sb;

	if (!type || strcmp(type, "container") || !action || !id)
		return;
	if (r->resyncing && json_array_size(r->held) < REGISTRY_RESYNC_EVENTS_MAX)
		json_array_append(r->held, (json_t *)event);
	r->event_seq++;
	sb = registry_find_id(r, id);
	if (strcmp(action, "destroy") == 0) {
		registry_tombstone(r, id);
		if (sb)
			registry_remove(r, sb);
		return;
	}
	for (size_t i = 0; i < sizeof(event_states) / sizeof(event_states[0]); i++) {
		if (strcmp(action, event_states[i].action))
			continue;
		if (sb) {
			sb->state = event_states[i].state;
			sb->event_seq = r->event_seq;
			/* A new init, or none: the pin (and the plane's choice) go. */
			if (!strcmp(action, "start") || !strcmp(action, "restart") || !strcmp(action, "die")) {
				registry_init_gone(r, sb);
				sb->plane = SANDBOX_PLANE_UNKNOWN;
			}
			return;
		}
		/* Not known yet (created behind our back): the attributes
		 * carry the name, the image and every label. */
		if (json_is_object(attrs)) {
			json_t *labels = json_deep_copy(attrs);

			static const char *const not_labels[] = { "name", "image", "exitCode",
								  "signal", "execDuration" };

			for (size_t k = 0; k < sizeof(not_labels) / sizeof(not_labels[0]); k++)
				json_object_del(labels, not_labels[k]);
			sb = registry_put(r, id, json_string_value(json_object_get(attrs, "name")), labels,
					  json_string_value(json_object_get(attrs, "image")), NULL,
					  (time_t)json_integer_value(json_object_get(event, "time")),
					  event_states[i].state);
			if (sb)
				sb->event_seq = r->event_seq;
			json_decref(labels);
		}
		return;
	}
}

/* ---- naming a sandbox --------------------------------------------------- */

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
			return false;
	return true;
}

static bool prefix_matches(const char *id, const char *given, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = given[i];

		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (id[i] != c)
			return false;
	}
	return true;
}

int registry_resolve(const struct registry *r, const char *given, registry_reach_fn *reach, void *arg,
		     struct sandbox **ret_sb, struct sandbox **reterr_candidates, size_t max_candidates,
		     size_t *reterr_matches)
{
	size_t n = strlen(given), matches = 0;
	bool hex = is_hex(given, n);
	const char *name = given[0] == '/' ? given + 1 : given;
	struct sandbox *sb, *found = NULL;

	if (hex && n == REGISTRY_ID_LEN) {
		TAILQ_FOREACH(sb, &r->list, entry)
			if (prefix_matches(sb->id, given, n) && reach(sb, arg)) {
				*ret_sb = sb;
				return 0;
			}
		return -ENOENT;
	}
	TAILQ_FOREACH(sb, &r->list, entry)
		if (strcmp(sb->name, name) == 0 && reach(sb, arg)) {
			*ret_sb = sb;
			return 0;
		}
	if (!hex)
		return -ENOENT;
	if (n > REGISTRY_ID_LEN)
		return -ENOENT;
	if (n < REGISTRY_PREFIX_MIN)
		return -EINVAL;
	TAILQ_FOREACH(sb, &r->list, entry) {
		if (!prefix_matches(sb->id, given, n) || !reach(sb, arg))
			continue;
		if (matches < max_candidates)
			reterr_candidates[matches] = sb;
		if (matches++ == 0)
			found = sb;
	}
	if (matches == 0)
		return -ENOENT;
	if (matches > 1) {
		*reterr_matches = matches;
		return -ENOTUNIQ;
	}
	*ret_sb = found;
	return 0;
}
