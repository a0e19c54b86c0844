/* dispose.c — the removal run and the disposals (see dispose.h;
 * behaviour-docker §2.10–2.13). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acquire.h"
#include "cleanup.h"
#include "dispose.h"
#include "docker.h"
#include "domain.h"
#include "egress.h"
#include "fileop.h"
#include "log.h"
#include "names.h"
#include "registry.h"
#include "xmalloc.h"

/* ---- the removal run ------------------------------------------------------ */

struct dispose_run {
	struct domain *d;
	const struct dispose_run_ops *ops;
	void *arg;
	char *why;
	struct dispose_step cur;       /* the step in flight */
};

static void run_free(struct dispose_run *run)
{
	free(run->why);
	free(run);
}

/* Ends the run (only ever from the loop: dispose_run_start has returned). */
static void run_end(struct dispose_run *run)
{
	const struct dispose_run_ops *ops = run->ops;
	void *arg = run->arg;

	run_free(run);
	ops->done(arg);
}

/* What is gone from the engine leaves the domain's tables. */
static void run_forget(struct dispose_run *run, const struct dispose_outcome *o)
{
	const struct dispose_step *st = &run->cur;
	struct sandbox *sb;

	if (!o->removed && !o->absent)
		return;
	if (st->kind == DISPOSE_PROXY)
		egress_proxy_removed(run->d->egress, st->ref);
	if (st->kind == DISPOSE_NETWORK)
		return;
	/* the registry may have let it go already: its destroy event comes first */
	sb = run->d->registry ? registry_find_id(run->d->registry, st->ref) : NULL;
	if (st->kind == DISPOSE_WORKLOAD && o->removed)
		log_info("sandbox %s disposed: %s", st->name ? st->name : sb ? sb->name : st->ref, run->why);
	if (sb)
		registry_remove(run->d->registry, sb);
	if (st->kind == DISPOSE_WORKLOAD)
		fileop_journal_forget(run->d, st->ref);
}

static void run_next(struct dispose_run *run);

static void run_removed_cb(const struct docker_reply *r, void *arg)
{
	struct dispose_run *run = arg;
	struct dispose_outcome o = {
		.error = r->error, .started = true, .status = r->status, .message = r->message,
		.removed = r->error == 0 && r->status >= 200 && r->status < 300,
		.absent = r->error == 0 && r->status == 404,
	};

	run_forget(run, &o);
	run->ops->outcome(run->arg, &run->cur, &o);
	if (r->error == -ECANCELED) {       /* the daemon is stopping: start nothing new */
		run_end(run);
		return;
	}
	run_next(run);
}

/* Starts the removal of the current step; false when it could not start
 * (its outcome reported). */
static bool run_remove(struct dispose_run *run)
{
	const struct dispose_step *st = &run->cur;
	int r = st->kind == DISPOSE_NETWORK
		? docker_network_remove(run->d->engine, st->ref, run_removed_cb, run, NULL)
		: docker_container_remove(run->d->engine, st->ref, true, run_removed_cb, run, NULL);

	if (r >= 0)
		return true;
	run->ops->outcome(run->arg, st, &(struct dispose_outcome){ .error = r });
	return false;
}

/* An unreadable log is logged by the drain; the removal goes on. */
static void run_drained_cb(int error, void *arg)
{
	struct dispose_run *run = arg;

	if (error == -ECANCELED) {
		run->ops->outcome(run->arg, &run->cur,
				  &(struct dispose_outcome){ .error = error, .started = true });
		run_end(run);
		return;
	}
	if (!run_remove(run))
		run_next(run);
}

/* Starts the next step's request: true when one is in flight, false when
 * no step is left. Steps that cannot start are reported here, without
 * recursion. */
static bool run_start_next(struct dispose_run *run)
{
	while (run->ops->next(run->arg, &run->cur))
		if ((run->cur.kind == DISPOSE_PROXY &&
		     egress_drain(run->d->egress, run->cur.ref, run_drained_cb, run) == 0) || run_remove(run))
			return true;
	return false;
}

static void run_next(struct dispose_run *run)
{
	if (!run_start_next(run))
		run_end(run);
}

int dispose_run_start(struct domain *d, const struct dispose_run_ops *ops, const char *why, void *arg)
{
	struct dispose_run *run = xcalloc(1, sizeof(*run));

	run->d = d;
	run->ops = ops;
	run->arg = arg;
	run->why = xstrdup(why ? why : "disposal");
	if (run_start_next(run))
		return 1;
	run_free(run);
	return 0;
}

/* ---- the failures ----------------------------------------------------------- */

/* Precedence, most actionable first (behaviour-core §1.3). */
static const char *const disposal_codes[] = { "unreachable", "timeout", "refused", "unlisted", "unknown" };

json_t *dispose_fold_failures(const json_t *failures)
{
	size_t n = json_array_size(failures), i;
	json_t *f;
	char *detail = NULL;
	const char *code = "unknown";

	if (n == 0)
		return NULL;
	if (n == 1)
		return json_incref(json_array_get(failures, 0));
	for (size_t c = ELEMENTSOF(disposal_codes); c-- > 0;)
		json_array_foreach(failures, i, f)
			if (strcmp(json_string_value(json_object_get(f, "code")), disposal_codes[c]) == 0)
				code = disposal_codes[c];
	json_array_foreach(failures, i, f) {
		char *grown = xasprintf("%s%s%s", detail ? detail : "", detail ? "; " : "",
					json_string_value(json_object_get(f, "detail")));

		free(detail);
		detail = grown;
	}
	f = json_pack("{s:s, s:s}", "code", code, "detail", detail);
	free(detail);
	return f;
}

static void add_failure(json_t *failures, const char *code, const char *detail)
{
	json_array_append_new(failures, json_pack("{s:s, s:s}", "code", code, "detail", detail));
}

/* ---- by selection: the sweep (behaviour-docker §2.10–2.12) ------------------ */

/* What a sweep removes, in dispose_kind's order: proxies (each drained
 * first), then workloads, then a leftover proxy of an allowlisted workload
 * by name, then the networks. Only workloads count, and only their
 * failures are reported. */
struct sweep_item {
	enum dispose_kind kind;
	char *ref;                /* id, or name for *_BY_NAME and networks */
	char *name;               /* a workload's name, for the log (NULL: not known) */
};

struct sweep_op {
	struct domain *d;
	json_t *filters;          /* label filter for the listing */
	struct sweep_item *items; /* to remove, in order */
	size_t n_items, next;
	struct dispose_result result;
	char *why;                /* for the log: the method and the caller */
	dispose_done_cb *done;
	void *arg;
};

static void sweep_add_failure(struct sweep_op *op, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void sweep_add_failure(struct sweep_op *op, const char *code, const char *fmt, ...)
{
	va_list ap;
	char *detail;

	va_start(ap, fmt);
	detail = xvasprintf(fmt, ap);
	va_end(ap);
	log_warnx("disposal: %s: %s", code, detail);
	add_failure(op->result.failures, code, detail);
	free(detail);
}

static struct sweep_op *sweep_new(struct domain *d, json_t *filters, const char *why, dispose_done_cb *done,
				  void *arg)
{
	struct sweep_op *op = xcalloc(1, sizeof(*op));

	op->d = d;
	op->filters = filters;
	op->result.failures = json_array();
	op->why = xstrdup(why);
	op->done = done;
	op->arg = arg;
	return op;
}

static void sweep_free(struct sweep_op *op)
{
	for (size_t i = 0; i < op->n_items; i++) {
		free(op->items[i].ref);
		free(op->items[i].name);
	}
	free(op->items);
	json_decref(op->filters);
	json_decref(op->result.failures);
	free(op->why);
	free(op);
}

static void sweep_finish(struct sweep_op *op)
{
	op->done(&op->result, op->arg);
	sweep_free(op);
}

static void sweep_add(struct sweep_op *op, enum dispose_kind kind, const char *ref)
{
	for (size_t i = 0; i < op->n_items; i++)
		if (op->items[i].kind == kind && strcmp(op->items[i].ref, ref) == 0)
			return;
	op->items = xrealloc(op->items, (op->n_items + 1) * sizeof(*op->items));
	op->items[op->n_items++] = (struct sweep_item){ .kind = kind, .ref = xstrdup(ref) };
}

/* Names the workload ref for the log (the registry may have let it go by
 * the time its removal is answered: its destroy event comes first). */
static void sweep_name(struct sweep_op *op, const char *ref, const char *name)
{
	for (size_t i = 0; i < op->n_items; i++)
		if (op->items[i].kind == DISPOSE_WORKLOAD && strcmp(op->items[i].ref, ref) == 0 && !op->items[i].name &&
		    name)
			op->items[i].name = xstrdup(name[0] == '/' ? name + 1 : name);
}

/* Stable: proxies, workloads, proxies by name, networks. */
static int sweep_item_cmp(const void *a, const void *b)
{
	const struct sweep_item *x = a, *y = b;

	return (int)x->kind - (int)y->kind;
}

static void sweep_order(struct sweep_op *op)
{
	/* insertion sort keeps the listing's order within a kind */
	for (size_t i = 1; i < op->n_items; i++)
		for (size_t j = i; j > 0 && sweep_item_cmp(&op->items[j - 1], &op->items[j]) > 0; j--) {
			struct sweep_item t = op->items[j];

			op->items[j] = op->items[j - 1];
			op->items[j - 1] = t;
		}
}

/* An allowlisted workload (or its proxy): its proxy by name and its network
 * go too, whatever the daemon's configuration now is. */
static void sweep_add_topology(struct sweep_op *op, const char *workload)
{
	_cleanup_free_ char *proxy = xasprintf("%s%s", workload, EGRESS_PROXY_SUFFIX);
	_cleanup_free_ char *net = xasprintf("%s%s", workload, EGRESS_NET_SUFFIX);

	sweep_add(op, DISPOSE_PROXY_BY_NAME, proxy);
	sweep_add(op, DISPOSE_NETWORK, net);
}

static bool sweep_step(void *arg, struct dispose_step *ret_step)
{
	struct sweep_op *op = arg;
	const struct sweep_item *it = op->next < op->n_items ? &op->items[op->next] : NULL;

	if (!it)
		return false;
	*ret_step = (struct dispose_step){ .kind = it->kind, .ref = it->ref, .name = it->name };
	return true;
}

static void sweep_outcome(void *arg, const struct dispose_step *st, const struct dispose_outcome *o)
{
	struct sweep_op *op = arg;
	const char *ref = st->ref;

	op->next++;
	if (!o->started) {
		if (st->kind == DISPOSE_WORKLOAD)
			sweep_add_failure(op, "unreachable", "could not reach the engine to remove %.12s", ref);
		return;
	}
	if (o->error == -ECANCELED) {
		sweep_add_failure(op, "unknown", "the daemon stopped before %.12s was removed", ref);
		return;
	}
	if (st->kind != DISPOSE_WORKLOAD) {
		/* proxies and networks: only logged (behaviour-docker §2.12) */
		if (!o->removed && !o->absent)
			log_warnx("disposal: could not remove %s: %s", ref,
				  o->message ? o->message : o->error ? strerror(-o->error) : "engine refused");
		return;
	}
	if (o->removed) {
		op->result.disposed++;
	} else if (o->absent) {
		/* silently absent: not counted */
	} else if (o->error == -ETIMEDOUT) {
		sweep_add_failure(op, "timeout", "removing %.12s timed out; it may remain", ref);
	} else if (o->error) {
		sweep_add_failure(op, "unreachable", "could not reach the engine to remove %.12s", ref);
	} else {
		/* The engine's text is for the log; the detail goes on the wire. */
		log_warnx("disposal: the engine refused to remove %.12s (HTTP %ld): %s", ref, o->status,
			  o->message ? o->message : "");
		sweep_add_failure(op, "refused", "the engine refused to remove %.12s (HTTP %ld)", ref, o->status);
	}
}

static void sweep_run_done(void *arg)
{
	sweep_finish(arg);
}

static const struct dispose_run_ops sweep_run_ops = {
	.next = sweep_step,
	.outcome = sweep_outcome,
	.done = sweep_run_done,
};

/* One at a time, force, never stop (a proxy is stopped by its drain). */
static void sweep_remove(struct sweep_op *op)
{
	if (dispose_run_start(op->d, &sweep_run_ops, op->why, op) == 0)
		sweep_finish(op);
}

static bool sweep_matches(const struct sweep_op *op, const struct sandbox *sb)
{
	return names_labels_match(op->filters, sb->labels);
}

/* An acquire in flight may create a sandbox this sweep selects just after
 * it: say so, as a disposal another operation has not reported on. */
static void sweep_note_acquire_cb(const char *name, const json_t *labels, void *arg)
{
	struct sweep_op *op = arg;

	if (names_labels_match(op->filters, labels))
		sweep_add_failure(op, "unknown", "an acquire of %s is in flight; it may create that "
				  "sandbox after this disposal", name);
}

static void sweep_listed_cb(const struct docker_reply *r, void *arg)
{
	struct sweep_op *op = arg;
	size_t i;
	json_t *item;
	struct sandbox *sb;

	if (r->error == -ECANCELED) {
		sweep_add_failure(op, "unknown", "the daemon stopped before the sweep ran");
		sweep_finish(op);
		return;
	}
	if (r->error || r->status != 200 || !json_is_array(r->body)) {
		sweep_add_failure(op, "unlisted", "could not list containers, so the sweep may be partial");
	} else {
		json_array_foreach(r->body, i, item) {
			const json_t *labels = json_object_get(item, "Labels");
			const char *role = json_string_value(json_object_get(labels, LABEL_ROLE));
			const char *egress = json_string_value(json_object_get(labels, LABEL_EGRESS));
			const char *id = json_string_value(json_object_get(item, "Id"));
			const char *name = json_string_value(json_array_get(json_object_get(item, "Names"), 0));
			bool proxy = role && strcmp(role, "proxy") == 0;

			if (!id)
				continue;
			sweep_add(op, proxy ? DISPOSE_PROXY : DISPOSE_WORKLOAD, id);
			sweep_name(op, id, name);
			if (name && name[0] == '/')
				name++;
			if (name && (proxy || (egress && strcmp(egress, "allowlist") == 0))) {
				char workload[NAMES_CONTAINER_MAX];
				size_t len = strlen(name);

				if (proxy && len > strlen(EGRESS_PROXY_SUFFIX))
					len -= strlen(EGRESS_PROXY_SUFFIX);
				snprintf(workload, sizeof(workload), "%.*s", (int)len, name);
				if (names_is_ours(workload, NULL))
					sweep_add_topology(op, workload);
			}
		}
	}
	for (sb = registry_first(op->d->registry); sb; sb = registry_next(sb))
		if (sweep_matches(op, sb)) {
			const char *egress = sandbox_label(sb, LABEL_EGRESS);

			sweep_add(op, DISPOSE_WORKLOAD, sb->id);
			sweep_name(op, sb->id, sb->name);
			if (egress && strcmp(egress, "allowlist") == 0)
				sweep_add_topology(op, sb->name);
		}
	acquire_foreach(op->d->acquires, sweep_note_acquire_cb, op);
	sweep_order(op);
	sweep_remove(op);
}

int dispose_start(struct domain *d, json_t *filters, const char *why, dispose_done_cb *done, void *arg)
{
	struct sweep_op *op = sweep_new(d, filters, why, done, arg);

	if (docker_containers_list(d->engine, filters, sweep_listed_cb, op, NULL) < 0) {
		/* The engine is away: nothing can be removed; the caller answers now. */
		sweep_free(op);
		return -ENOTCONN;
	}
	return 0;
}

/* ---- by id ------------------------------------------------------------------ */

struct instance_op {
	struct domain *d;
	json_t *filters;          /* the selection a disposal by key makes */
	char *id;
	char *name;               /* from its inspect, for the log */
	char *why;
	bool removing;
	struct dispose_result result;
	dispose_done_cb *done;
	void *arg;
};

static void instance_free(struct instance_op *op)
{
	json_decref(op->filters);
	json_decref(op->result.failures);
	free(op->id);
	free(op->name);
	free(op->why);
	free(op);
}

static void instance_finish(struct instance_op *op)
{
	op->done(&op->result, op->arg);
	instance_free(op);
}

static void instance_failure(struct instance_op *op, const char *code, const char *detail)
{
	log_warnx("disposal of %.12s: %s: %s", op->id, code, detail);
	add_failure(op->result.failures, code, detail);
}

/* The instance must be this key's (and kind's) and the caller's; anything
 * else is treated as absent, so no one learns of another's sandbox. */
static bool instance_is_callers(const struct instance_op *op, const json_t *inspect)
{
	const json_t *labels = json_object_get(json_object_get(inspect, "Config"), "Labels");
	const char *name = json_string_value(json_object_get(inspect, "Name"));
	const char *id = json_string_value(json_object_get(inspect, "Id"));

	if (!name || !names_is_ours(name[0] == '/' ? name + 1 : name, NULL) || !id || strcmp(id, op->id))
		return false;
	return names_labels_match(op->filters, labels);
}

static bool instance_is_allowlisted(const json_t *inspect)
{
	const json_t *labels = json_object_get(json_object_get(inspect, "Config"), "Labels");
	const char *egress = json_string_value(json_object_get(labels, LABEL_EGRESS));

	return egress && strcmp(egress, "allowlist") == 0 && json_string_value(json_object_get(inspect, "Name"));
}

/* The failure code and detail of a request that failed, or NULL. */
static const char *instance_request_failure(int error, const char **ret_detail)
{
	if (error == -ECANCELED)
		return *ret_detail = "the daemon stopped before the disposal ran", "unknown";
	if (error == -ETIMEDOUT)
		return *ret_detail = "the engine did not answer in time", "timeout";
	if (error)
		return *ret_detail = "could not reach the engine", "unreachable";
	return NULL;
}

static bool instance_step(void *arg, struct dispose_step *ret_step)
{
	struct instance_op *op = arg;

	if (op->removing)
		return false;
	op->removing = true;
	*ret_step = (struct dispose_step){ .kind = DISPOSE_WORKLOAD, .ref = op->id, .name = op->name };
	return true;
}

static void instance_outcome(void *arg, const struct dispose_step *st, const struct dispose_outcome *o)
{
	struct instance_op *op = arg;
	const char *detail = NULL, *code;

	(void)st;
	if (!o->started) {
		instance_failure(op, "unreachable", "could not reach the engine");
		return;
	}
	code = instance_request_failure(o->error, &detail);
	if (!code && !o->removed && !o->absent) {
		log_warnx("disposal of %.12s: the engine answered HTTP %ld: %s", op->id, o->status,
			  o->message ? o->message : "");
		code = "refused";
		detail = "the engine refused to remove it";
	}
	if (code)
		instance_failure(op, code, detail);
	else if (o->removed)
		op->result.disposed++;
}

static void instance_run_done(void *arg)
{
	instance_finish(arg);
}

static const struct dispose_run_ops instance_run_ops = {
	.next = instance_step,
	.outcome = instance_outcome,
	.done = instance_run_done,
};

/* An allowlisted workload: its proxy first (drained), then it, then its
 * network — a sweep of its own topology. */
static void instance_sweep(struct instance_op *op, const char *name)
{
	struct sweep_op *sw = sweep_new(op->d, NULL, op->why, op->done, op->arg);
	_cleanup_free_ char *proxy = xasprintf("%s%s", name, EGRESS_PROXY_SUFFIX);
	_cleanup_free_ char *net = xasprintf("%s%s", name, EGRESS_NET_SUFFIX);

	sweep_add(sw, DISPOSE_PROXY, proxy);
	sweep_add(sw, DISPOSE_WORKLOAD, op->id);
	sweep_name(sw, op->id, name);
	sweep_add(sw, DISPOSE_NETWORK, net);
	instance_free(op);
	sweep_remove(sw);
}

static void instance_inspected_cb(const struct docker_reply *r, void *arg)
{
	struct instance_op *op = arg;
	const char *detail = NULL;
	const char *code = instance_request_failure(r->error, &detail);
	const char *name;

	if (!code && r->status != 200 && r->status != 404) {
		code = "unlisted";
		detail = "could not inspect the sandbox";
	}
	if (code) {
		instance_failure(op, code, detail);
		instance_finish(op);
		return;
	}
	if (r->status == 404 || !instance_is_callers(op, r->body)) {
		instance_finish(op);      /* absent, or not the caller's */
		return;
	}
	name = json_string_value(json_object_get(r->body, "Name"));
	if (instance_is_allowlisted(r->body)) {
		instance_sweep(op, name[0] == '/' ? name + 1 : name);
		return;
	}
	op->name = name ? xstrdup(name[0] == '/' ? name + 1 : name) : NULL;
	if (dispose_run_start(op->d, &instance_run_ops, op->why, op) == 0)
		instance_finish(op);
}

int dispose_instance_start(struct domain *d, const char *id, json_t *filters, const char *why,
			   dispose_done_cb *done, void *arg)
{
	struct instance_op *op = xcalloc(1, sizeof(*op));

	op->d = d;
	op->filters = filters;
	op->id = xstrdup(id);
	op->why = xstrdup(why);
	op->result.failures = json_array();
	op->done = done;
	op->arg = arg;
	if (docker_container_inspect(d->engine, id, instance_inspected_cb, op, NULL) < 0) {
		instance_free(op);
		return -ENOTCONN;
	}
	return 0;
}
