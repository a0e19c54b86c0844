/* dispose.h — taking sandboxes off the engine: the one removal sequence
 * sandbox.dispose, sandbox.dispose_scope and sandbox.reap share
 * (behaviour-docker §2.10–2.13), and the disposals by selection and by id
 * built on it.
 *
 * The removal run: steps one at a time, in the order the caller gives —
 * an egress proxy drained first (its decisions published before it goes),
 * containers removed with force (never stopped first), networks without (an
 * attached container keeps its network). What the engine no longer has
 * leaves the domain's tables: a proxy its egress record, a container the
 * registry, a workload its file journal's temporaries ("sandbox NAME
 * disposed: WHY" logged for each workload removed). The caller maps each
 * step's outcome to its own failures. */
#ifndef MSB_DISPOSE_H
#define MSB_DISPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

struct domain;

/* In the order a disposal removes them (behaviour-docker §2.12). */
enum dispose_kind {
	DISPOSE_PROXY,          /* an egress proxy by id: drained first */
	DISPOSE_WORKLOAD,       /* a workload container by id */
	DISPOSE_PROXY_BY_NAME,  /* a leftover proxy of an allowlisted workload, by name */
	DISPOSE_NETWORK,        /* a network, by id or name */
};

struct dispose_step {
	enum dispose_kind kind;
	const char *ref;        /* id or name; the caller's, kept until the step's outcome */
	const char *name;       /* a workload's name, for the log (NULL: the registry's, else ref) */
};

struct dispose_outcome {
	int error;              /* 0, or the request's -errno; -ECANCELED: the daemon is
	                         * stopping (during the drain or the removal) and the run ends */
	bool started;           /* false: the request could not be made (error says why) */
	long status;            /* the engine's HTTP status (error 0) */
	const char *message;    /* the engine's own text, for the log only (may be NULL) */
	bool removed;           /* 2xx */
	bool absent;            /* 404: already gone */
};

struct dispose_run_ops {
	/* The next step (filled in), or false: the run is over. */
	bool (*next)(void *arg, struct dispose_step *ret_step);
	/* What became of the step next gave last. */
	void (*outcome)(void *arg, const struct dispose_step *step, const struct dispose_outcome *o);
	/* The run is over (no step left, or the daemon stopping); only after
	 * dispose_run_start returned 1. */
	void (*done)(void *arg);
};

/* Runs the steps ops->next gives, one at a time. why ends the log line of
 * each workload removed (copied). Returns 1 (a request in flight: done
 * fires once, from the loop) or 0 (no step needed a request in flight:
 * every outcome reported already, done never fires). */
int dispose_run_start(struct domain *d, const struct dispose_run_ops *ops, const char *why, void *arg);

/* ---- disposals ------------------------------------------------------------ */

/* What a disposal did: the workloads removed (not proxies, not those
 * already absent) and the failures, [{"code", "detail"}] (behaviour-core
 * §1.3 codes), in the order they happened. */
struct dispose_result {
	size_t disposed;
	json_t *failures;
};
typedef void dispose_done_cb(const struct dispose_result *result, void *arg);   /* result borrowed */

/* sandbox.dispose by key and sandbox.dispose_scope: every container the
 * label filter selects (names_label_filter; stolen), as the engine lists
 * them (the registry's too, should the listing fail or miss one), each
 * allowlisted workload with its proxy and network; an acquire in flight it
 * selects is an "unknown" failure. why: for the log ("sandbox NAME
 * disposed: WHY"). Returns 0 (done fires once, from the loop) or -ENOTCONN
 * (the engine is not reachable: nothing was removed, done never fires). */
int dispose_start(struct domain *d, json_t *filters, const char *why, dispose_done_cb *done, void *arg);

/* sandbox.dispose of one instance by its full id (lower case): removed
 * (an allowlisted workload with its proxy and network) when the engine has
 * it under one of our names and filters (stolen; the selection a disposal
 * by key would make, the caller's ownership in it) selects its labels;
 * anything else is treated as absent, so no one learns of another's
 * sandbox. Returns as dispose_start. */
int dispose_instance_start(struct domain *d, const char *id, json_t *filters, const char *why,
			   dispose_done_cb *done, void *arg);

/* A disposal's failures as sandbox.dispose reports them
 * (fold_disposal_failures): none → NULL; one → itself; several → the first
 * code of the precedence present, the details joined with "; ". New
 * reference. */
json_t *dispose_fold_failures(const json_t *failures);

#endif
