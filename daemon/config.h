/* config.h — the daemon's configuration: defaults → file → flags.
 *
 * The file holds `key = value` lines; `#` starts a comment (at the start of a
 * line or after whitespace); blank lines are ignored; values may be quoted
 * with "". Keys are dotted (socket.path, limits.max_frame_bytes, ...), the
 * same names `--set key=value` takes. An unknown key or a bad value is an
 * error naming the file, the line and the key. The whole result is
 * validated before use and read-only afterwards; SIGHUP builds a new one. */
#ifndef MSB_CONFIG_H
#define MSB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

struct msbd_config {
	char *socket_path;          /* socket.path */
	char *socket_group;         /* socket.group: NULL = the daemon's own group */
	unsigned socket_mode;       /* socket.mode (octal) */
	char *engine_host;          /* engine.host: NULL = DOCKER_HOST/context/default */
	long engine_timeout_ms;     /* engine.timeout_ms */
	long engine_reconnect_min_ms;
	long engine_reconnect_max_ms;
	size_t max_frame_bytes;     /* limits.max_frame_bytes */
	long max_connections;       /* limits.max_connections */
	long max_inflight;          /* limits.max_inflight */
	size_t buffer_budget_bytes; /* limits.buffer_budget_bytes */
	long frame_timeout_ms;      /* limits.frame_timeout_ms */
	long write_timeout_ms;      /* limits.write_timeout_ms */
	/* Fairness between users (uids); admins are exempt from the per-uid caps. */
	long max_connections_per_uid;   /* limits.max_connections_per_uid */
	long admin_reserved_connections; /* limits.admin_reserved_connections: of max_connections,
					  * at most max_connections - 1 (one stays open to all) */
	long max_inflight_per_uid;      /* limits.max_inflight_per_uid: over all its connections */
	long idle_timeout_ms;           /* limits.idle_timeout_ms: 0 = never close idle connections */
	long idle_evict_ms;             /* limits.idle_evict_ms: 0 = never evict, refuse */
	size_t uid_buffer_bytes;        /* limits.uid_buffer_bytes: 0 = auto (config_uid_buffer_bytes) */
	long drain_ms;              /* shutdown.drain_ms */
	long pids_limit;            /* sandbox.pids_limit */
	size_t memory_bytes;        /* sandbox.memory: 0 = no limit */
	double cpus;                /* sandbox.cpus: 0 = no limit */
	bool init;                  /* sandbox.init: docker-init as PID 1 */
	bool cap_drop_all;          /* sandbox.cap_drop_all */
	long pull_timeout_ms;       /* sandbox.pull_timeout_ms */
	char *admin_group;          /* sandbox.admin_group: NULL = only root is admin */
	size_t files_max_file_bytes;  /* files.max_file_bytes: per file, per call and direction */
	size_t files_max_total_bytes; /* files.max_total_bytes: all files of one call */
	long files_max_files;         /* files.max_files: files in one call */
	long files_timeout_ms;        /* files.timeout_ms: one file call, freeze included */
	char *files_plane;            /* files.plane: "auto", "local" or "archive" */
	long files_list_max_entries;  /* files.list_max_entries: children one files.list returns */
	long files_removal_fd_budget; /* files.removal_fd_budget: descriptors all removals share (0: a quarter of RLIMIT_NOFILE) */
	char *files_journal_dir;      /* files.journal_dir: temporaries of writes in progress */
	size_t exec_max_output_bytes; /* exec.max_output_bytes: stdout + stderr of one command */
	char *exec_on_timeout;        /* exec.on_timeout as given: "kill" or "dispose" */
	char *egress_proxy_binary;  /* egress.proxy_binary: NULL = no allowlist */
	char *egress_subnet_pool;   /* egress.subnet_pool: IPv4 CIDR cut into blocks */
	long egress_block_prefix;   /* egress.block_prefix: each allowlisted sandbox's subnet */
	char *egress_outbound_network; /* egress.outbound_network: the proxy's way out */
	char *egress_private_allow; /* egress.private_allow: CIDRs, comma-separated; NULL = none */
	char *egress_gateway_mode;  /* egress.gateway_mode: auto, isolated or inhibit */
	long egress_ready_timeout_ms; /* egress.ready_timeout_ms: the proxy's readiness line */
	char *egress_state_dir;     /* egress.state_dir: event cursors */
	size_t events_max_backlog_bytes; /* events.max_backlog_bytes: unread events per subscriber */
	long reap_max_age_s;        /* reap.max_age_s: 0 = no timed sweep */
	long reap_interval_s;       /* reap.interval_s */
	char *freeze_lock_file;     /* freeze.lock_file: the host-wide freeze lock (hostlock.h) */
	size_t reply_budget_bytes;  /* limits.reply_budget_bytes: replies charged, daemon-wide */
	size_t conn_reply_budget_bytes; /* limits.conn_reply_budget_bytes: replies charged, one connection */
	size_t uid_reply_budget_bytes; /* limits.uid_reply_budget_bytes: 0 = auto (config_uid_reply_budget_bytes) */
	bool debug;                 /* log.debug */
	char *file;                 /* the file read, or NULL */
};

/* What the command line asked for; kept so SIGHUP can re-apply it. */
struct msbd_cmdline {
	const char *config_file;    /* --config; NULL = the default file if present */
	char **sets;                /* "key=value" from --set, --socket, --debug; NULL-terminated */
	size_t n_sets;
};

#define MSB_ENGINE_TIMEOUT_MS        60000
#define MSB_ENGINE_RECONNECT_MIN_MS  250
#define MSB_ENGINE_RECONNECT_MAX_MS  10000
#define MSB_SOCKET_MODE              0660
#define MSB_PIDS_LIMIT               512
#define MSB_PULL_TIMEOUT_MS          600000
#define MSB_REAP_INTERVAL_S          3600
#define MSB_FILES_TIMEOUT_MS         60000
#define MSB_EXEC_MAX_OUTPUT_BYTES    (8u * 1024 * 1024)
#define MSB_EGRESS_SUBNET_POOL      "10.213.0.0/16"
#define MSB_EGRESS_BLOCK_PREFIX     28
#define MSB_EGRESS_OUTBOUND_NETWORK "bridge"
#define MSB_EGRESS_READY_TIMEOUT_MS 10000
#define MSB_EGRESS_STATE_DIR        "/var/lib/maf-sandbox"
#define MSB_EVENTS_MAX_BACKLOG_BYTES (4u * 1024 * 1024)
/* freeze.lock_file when root; otherwise $XDG_RUNTIME_DIR/MSB_FREEZE_LOCK_USER_NAME
 * (unset without XDG_RUNTIME_DIR, like socket.path). Every daemon on the
 * host must name the same file for their freezes to keep apart. */
#define MSB_DEFAULT_FREEZE_LOCK_FILE "/run/maf-sandbox/freeze.lock"
#define MSB_FREEZE_LOCK_USER_NAME    "maf-sandbox-freeze.lock"
/* files.journal_dir when root; otherwise $XDG_RUNTIME_DIR/MSB_FILES_JOURNAL_USER_NAME. */
#define MSB_DEFAULT_FILES_JOURNAL_DIR "/run/maf-sandbox/files-journal"
#define MSB_FILES_JOURNAL_USER_NAME   "maf-sandbox-files-journal"
/* Files larger than this are not configuration files. */
#define MSB_CONFIG_FILE_MAX_BYTES    (64 * 1024)
#define MSB_CONFIG_LINE_MAX          4096

/* The per-uid share of the buffer budget limits.uid_buffer_bytes gives
 * (0: half the budget, at least one frame). */
size_t config_uid_buffer_bytes(const struct msbd_config *cfg);

/* The per-uid share of the reply budget limits.uid_reply_budget_bytes gives
 * (0: half of limits.reply_budget_bytes, at least the largest reply, at
 * most the budget). */
size_t config_uid_reply_budget_bytes(const struct msbd_config *cfg);

/* Builds a configuration: defaults, then the file (the cmdline's, or
 * MSB_DEFAULT_CONFIG_FILE if it exists), then the cmdline's sets, then
 * validates. Returns 0 and *ret (owned), or a negative errno and
 * *reterr_message (malloc'd). */
int config_load(const struct msbd_cmdline *cmd, struct msbd_config **ret, char **reterr_message);
/* Applies one "key=value" to cfg (no validation across keys). */
int config_set(struct msbd_config *cfg, const char *key, const char *value, char **reterr_message);
/* Cross-key validation. */
int config_validate(const struct msbd_config *cfg, char **reterr_message);
struct msbd_config *config_new_defaults(void);
/* NULL-safe; returns NULL. */
struct msbd_config *config_free(struct msbd_config *cfg);
/* The keys whose change needs a restart, differing between a and b, as a
 * malloc'd comma-separated list, or NULL when none differ. */
char *config_restart_keys_changed(const struct msbd_config *a, const struct msbd_config *b);
/* Prints every key = value, one per line (for --check-config). */
void config_dump(const struct msbd_config *cfg, FILE *out);

#endif
