/* types.h — shared wire types: the declaration vocabulary (isolation,
 * capabilities, egress modes, scopes, OS families) and transfer limits,
 * with encode/decode/validate. No I/O, no logging. */
#ifndef MSB_TYPES_H
#define MSB_TYPES_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#define MSB_PROTOCOL_VERSION "1"

/* Method names are a contract. */
#define MSB_METHOD_DAEMON_DESCRIBE "daemon.describe"
#define MSB_METHOD_DAEMON_STATUS   "daemon.status"
#define MSB_METHOD_DAEMON_ENGINE   "daemon.engine"
#define MSB_METHOD_SANDBOX_ACQUIRE       "sandbox.acquire"
#define MSB_METHOD_SANDBOX_DISPOSE       "sandbox.dispose"
#define MSB_METHOD_SANDBOX_DISPOSE_SCOPE "sandbox.dispose_scope"
#define MSB_METHOD_SANDBOX_LIST          "sandbox.list"
#define MSB_METHOD_SANDBOX_REAP          "sandbox.reap"
#define MSB_METHOD_SANDBOX_EXEC          "sandbox.exec"
#define MSB_METHOD_EXEC_STDIN            "exec.stdin"
#define MSB_METHOD_CALL_CANCEL           "call.cancel"
#define MSB_METHOD_FILES_WRITE           "files.write"
#define MSB_METHOD_FILES_READ            "files.read"
#define MSB_METHOD_FILES_STAT            "files.stat"
#define MSB_METHOD_FILES_LIST            "files.list"
#define MSB_METHOD_FILES_REMOVE          "files.remove"
#define MSB_METHOD_FILES_RECLAIM         "files.reclaim"
#define MSB_METHOD_EVENTS_SUBSCRIBE      "events.subscribe"
/* Notifications the daemon sends during a call. */
#define MSB_NOTIFY_PULL_PROGRESS         "sandbox.pull_progress"
#define MSB_NOTIFY_EVENT                 "events.event"
#define MSB_EVENT_EGRESS_DECISION        "egress.decision"

enum msb_isolation {
	MSB_ISOLATION_NONE,
	MSB_ISOLATION_RUNTIME,
	MSB_ISOLATION_OS_PROCESS,
	MSB_ISOLATION_CONTAINER,
	MSB_ISOLATION_HARDENED_CONTAINER,
	MSB_ISOLATION_MICROVM,
	MSB_ISOLATION_VM,
	_MSB_ISOLATION_MAX,
};

enum msb_capability {
	MSB_CAP_EXEC,
	MSB_CAP_RUN_CODE,
	MSB_CAP_HOST_TOOLS,
	MSB_CAP_FILES_IN,
	MSB_CAP_FILES_OUT,
	MSB_CAP_FILES_LIST,
	MSB_CAP_FILES_DELETE,
	MSB_CAP_SNAPSHOT,
	MSB_CAP_ATTACHED_IDENTITY,
	MSB_CAP_RECLAIM,
	MSB_CAP_EGRESS_METHODS,
	_MSB_CAP_MAX,
};

enum msb_egress {
	MSB_EGRESS_UNRESTRICTED,
	MSB_EGRESS_ALLOWLIST,
	MSB_EGRESS_CLOSED,
	_MSB_EGRESS_MAX,
};

enum msb_scope {
	MSB_SCOPE_CONVERSATION,
	MSB_SCOPE_CALL,
	_MSB_SCOPE_MAX,
};

enum msb_os_family {
	MSB_OS_POSIX,
	MSB_OS_WINDOWS,
	_MSB_OS_MAX,
};

/* Each returns the wire string, or NULL for a value out of range. */
const char *msb_isolation_to_string(enum msb_isolation v);
const char *msb_capability_to_string(enum msb_capability v);
const char *msb_egress_to_string(enum msb_egress v);
const char *msb_scope_to_string(enum msb_scope v);
const char *msb_os_family_to_string(enum msb_os_family v);
/* Each returns the value, or -EINVAL for a string that names none. */
int msb_isolation_from_string(const char *s);
int msb_capability_from_string(const char *s);
int msb_egress_from_string(const char *s);
int msb_scope_from_string(const char *s);
int msb_os_family_from_string(const char *s);

/* A set of values as a bit mask (1 << value), encoded as a JSON array of
 * strings in enum order. New references. */
json_t *msb_isolation_set_encode(uint32_t mask);
json_t *msb_capability_set_encode(uint32_t mask);
json_t *msb_egress_set_encode(uint32_t mask);
json_t *msb_scope_set_encode(uint32_t mask);
json_t *msb_os_family_set_encode(uint32_t mask);
#define MSB_BIT(v) (UINT32_C(1) << (v))

struct msb_transfer_limits {
	uint64_t max_bytes_per_file;
	uint64_t max_total_bytes;
	uint64_t max_files;
};

json_t *msb_transfer_limits_encode(const struct msb_transfer_limits *l);
/* Returns 0, or -EINVAL with *reterr_field naming the bad member. */
int msb_transfer_limits_decode(const json_t *j, struct msb_transfer_limits *ret,
			       const char **reterr_field);
/* a.within(b): every field of a <= the same field of b. */
bool msb_transfer_limits_within(const struct msb_transfer_limits *a,
				const struct msb_transfer_limits *b);

#endif
