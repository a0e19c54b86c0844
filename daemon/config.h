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

#include "settings.h"


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
