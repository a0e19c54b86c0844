/* names.h — container names, labels and label digests, exactly as the seed
 * derives them (behaviour-docker §3), so our daemon and seed-made containers
 * agree. Pure: no I/O. */
#ifndef MSB_NAMES_H
#define MSB_NAMES_H

#include <stdbool.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox.h"

#define NAMES_PREFIX          "maf-sandbox-docker-"
#define NAMES_HASH_CHARS      12            /* hex characters of the name digest */
#define NAMES_CONTAINER_MAX   (sizeof(NAMES_PREFIX) + NAMES_HASH_CHARS + sizeof("-proxy"))
#define NAMES_LABEL_PLAIN_MAX 63            /* longer values are digested */
#define NAMES_LABEL_DIGEST_HEX 48

#define LABEL_SCOPE    "maf-sandbox.scope"
#define LABEL_THREAD   "maf-sandbox.thread"
#define LABEL_AGENT    "maf-sandbox.agent"
#define LABEL_KIND     "maf-sandbox.kind"
#define LABEL_CALL     "maf-sandbox.call"
#define LABEL_USER_PREFIX "maf-sandbox.label."
#define LABEL_WORK_DIR "maf-sandbox.work-dir.v1"
#define LABEL_ROLE     "maf-sandbox.role"
/* Ours, not the seed's: the uid of the connection that created it. */
#define LABEL_OWNER    "maf-sandbox.owner"
/* Ours too: the raw key and kind as a JSON array [scope, thread_id,
 * agent_dir, call_id, kind], so listings (and the egress followers) can
 * show them even where the identity labels are digests. */
#define LABEL_KEY_JSON "maf-sandbox.key"

/* egress_id: "allow:" + ",".join(sorted hosts) when a proxy is configured and
 * the allowlist is non-empty, else "". Returns a malloc'd string. */
char *names_egress_id(const struct msb_spec *spec, bool proxy_configured);

/* NAMES_PREFIX + the first 12 hex of SHA-256 over the length-prefixed parts
 * scope, thread_id, agent_dir, kind, [egress_id if non-empty],
 * ["call:" + call_id if non-empty]. out must hold NAMES_CONTAINER_MAX. */
void names_container(const struct msb_key *key, const char *kind, const char *egress_id, char *out);

/* The uid whose keys are named exactly as the seed names them (§3): root,
 * whose world the seed is (it drives the engine directly). */
#define NAMES_SEED_UID ((uid_t)0)

/* The name of key's sandbox in the key space of uid ns: for NAMES_SEED_UID
 * exactly names_container's (so the seed's containers are adopted); for any
 * other uid the digest stream gains one last part, "uid:" + the decimal uid,
 * so one user's key never names another's container (no blocking, no
 * probing). Same format either way: names_is_ours holds for both. */
void names_container_ns(const struct msb_key *key, const char *kind, const char *egress_id, uid_t ns,
			char *out);

/* label_value(v): v itself if it is at most 63 bytes of [A-Za-z0-9._-] and
 * does not look like sha256-<48 hex>; else "sha256-" + 48 hex of SHA-256(v).
 * malloc'd. */
char *names_label_value(const char *v);

/* The labels of a workload: identity labels (call only when non-empty), the
 * spec's own labels under maf-sandbox.label.<k>, the work dir (raw), and the
 * owner uid. New reference: an object of strings. */
json_t *names_workload_labels(const struct msb_key *key, const struct msb_spec *spec, uid_t owner);

/* Engine filter for GET /containers/json: {"label": {"K=label_value(V)": true, ...}}
 * with the given parts only (NULL = not filtered; call_id "" = not filtered;
 * owner (uid_t)-1 = not filtered). New reference. */
json_t *names_label_filter(const char *scope, const char *thread_id, const char *agent_dir,
			   const char *call_id, const char *kind, uid_t owner);

/* Do labels (an object of strings; borrowed) satisfy every "K=V" of such a
 * filter? (the registry's selection where the engine's listing is not
 * there: a disposal's fallback, sandbox.list, acquires in flight) */
bool names_labels_match(const json_t *filters, const json_t *labels);

/* Hex characters of a full engine id. */
#define NAMES_ID_HEX 64

/* True when id is a full engine id: exactly 64 lowercase hex characters. */
bool names_id_is_full(const char *id);

/* True when name fully matches maf-sandbox-docker-[0-9a-f]{12}, optionally
 * followed by suffix ("-proxy", "-net"; NULL = none). */
bool names_is_ours(const char *name, const char *suffix);

#endif
