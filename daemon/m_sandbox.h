/* m_sandbox.h — the sandbox.* methods. */
#ifndef MSB_M_SANDBOX_H
#define MSB_M_SANDBOX_H

#include <stdint.h>

#include "rpc.h"

struct m_sandbox_acquire_params {
	json_t *key;
	json_t *spec;
};

struct m_sandbox_dispose_params {
	json_t *key;
	const char *kind;
	const char *sandbox;
};

struct m_sandbox_scope_params {
	const char *scope;
	const char *thread_id;
};

struct m_sandbox_reap_params {
	int64_t older_than_seconds;
	const char *scope;
	bool dry_run;               /* list what would go, remove nothing */
};

extern const struct rpc_param m_sandbox_acquire_spec[];
extern const struct rpc_param m_sandbox_dispose_spec[];
extern const struct rpc_param m_sandbox_dispose_scope_spec[];
extern const struct rpc_param m_sandbox_list_spec[];
extern const struct rpc_param m_sandbox_reap_spec[];

struct rpc_result *m_sandbox_acquire(struct rpc_call *call, const void *params);
struct rpc_result *m_sandbox_dispose(struct rpc_call *call, const void *params);
struct rpc_result *m_sandbox_dispose_scope(struct rpc_call *call, const void *params);
struct rpc_result *m_sandbox_list(struct rpc_call *call, const void *params);
/* sandbox.list's reply bound, its id aside (msbd_reply_bound): the listing
 * of every sandbox in the registry as it stands, at least
 * REPLYBOUND_DEFAULT_BYTES and at most replybound_max (the largest reply
 * the budgets are sure to hold; a larger listing is counted over bound). */
struct msbd;
size_t m_sandbox_list_reply_bound(const struct msbd *d);
struct rpc_result *m_sandbox_reap(struct rpc_call *call, const void *params);

#endif
