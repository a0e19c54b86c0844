/* settings.h — the configuration's values, as data: daemon/config.c reads
 * them (defaults → file → flags, validated) and replaces the whole struct on
 * SIGHUP; the domain only reads the one its environment points at
 * (domain.h). Each field names its key; maf-sandboxd.conf(5) says what it
 * does. */
#ifndef MSB_SETTINGS_H
#define MSB_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
