#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "cleanup.h"
#include "config.h"
#include "msb-limits.h"
#include "msb-build.h"
#include "plane_local.h"
#include "replybound.h"
#include "subnet.h"
#include "units.h"
#include "xmalloc.h"

enum config_type {
	CONFIG_STRING,   /* char *, "" means unset (NULL) where nullable */
	CONFIG_LONG,     /* long within [min, max]; a *_ms or *_s key is a duration (units.h) */
	CONFIG_SIZE,     /* size_t within [min, max], a size as units.h reads it */
	CONFIG_MODE,     /* unsigned, octal, within [0, 0777] */
	CONFIG_BOOL,     /* true/false/yes/no/on/off/1/0 */
	CONFIG_DOUBLE,   /* double within [min, max] */
	_CONFIG_TYPE_MAX,
};

struct config_key {
	const char *name;
	enum config_type type;
	size_t offset;
	long long min, max;
	bool restart;    /* a change takes effect only after a restart */
	const char *help;
};

#define K(name, type, field, min, max, restart, help) \
	{ name, type, offsetof(struct msbd_config, field), min, max, restart, help }

static const struct config_key config_keys[] = {
	K("socket.path", CONFIG_STRING, socket_path, 0, 0, true, "the listening socket (unless socket-activated)"),
	K("socket.group", CONFIG_STRING, socket_group, 0, 0, true, "group owning the socket"),
	K("socket.mode", CONFIG_MODE, socket_mode, 0, 0777, true, "socket file mode, octal"),
	K("engine.host", CONFIG_STRING, engine_host, 0, 0, true, "Docker endpoint (unix:// or tcp://)"),
	K("engine.timeout_ms", CONFIG_LONG, engine_timeout_ms, 100, 3600000, false, "deadline of one engine request"),
	K("engine.reconnect_min_ms", CONFIG_LONG, engine_reconnect_min_ms, 10, 600000, false, "first retry after the engine is lost"),
	K("engine.reconnect_max_ms", CONFIG_LONG, engine_reconnect_max_ms, 10, 600000, false, "longest retry interval"),
	K("limits.max_frame_bytes", CONFIG_SIZE, max_frame_bytes, MSB_FRAME_MIN_BYTES, 1LL << 30, false, "largest request frame"),
	K("limits.max_connections", CONFIG_LONG, max_connections, 1, 65536, false, "client connections at once"),
	K("limits.max_inflight", CONFIG_LONG, max_inflight, 1, 4096, false, "requests in flight per connection"),
	K("limits.buffer_budget_bytes", CONFIG_SIZE, buffer_budget_bytes, MSB_FRAME_MIN_BYTES, 1LL << 40, false, "bytes buffered from all clients"),
	K("limits.frame_timeout_ms", CONFIG_LONG, frame_timeout_ms, 100, 3600000, false, "time for one frame to arrive whole"),
	K("limits.write_timeout_ms", CONFIG_LONG, write_timeout_ms, 100, 3600000, false, "time a client may leave its replies unread"),
	K("limits.reply_budget_bytes", CONFIG_SIZE, reply_budget_bytes, 64 * 1024, 1LL << 40, false, "reply bytes charged to calls in flight and queued unread, all clients together"),
	K("limits.conn_reply_budget_bytes", CONFIG_SIZE, conn_reply_budget_bytes, 64 * 1024, 1LL << 40, false, "reply bytes charged to calls in flight and queued unread, one connection"),
	K("limits.max_connections_per_uid", CONFIG_LONG, max_connections_per_uid, 1, 65536, false, "client connections of one uid at once (admins exempt)"),
	K("limits.admin_reserved_connections", CONFIG_LONG, admin_reserved_connections, 0, 65535, false, "of limits.max_connections, kept for admins"),
	K("limits.max_inflight_per_uid", CONFIG_LONG, max_inflight_per_uid, 1, 1048576, false, "requests in flight of one uid over all its connections (admins exempt)"),
	K("limits.idle_timeout_ms", CONFIG_LONG, idle_timeout_ms, 0, 86400000, false, "close a connection with nothing under way after this long (0: never)"),
	K("limits.idle_evict_ms", CONFIG_LONG, idle_evict_ms, 0, 86400000, false, "at a connection limit, close the longest-idle connection idle this long instead of refusing (0: refuse)"),
	K("limits.uid_reply_budget_bytes", CONFIG_SIZE, uid_reply_budget_bytes, 0, 1LL << 40, false, "reply bytes charged to one uid's connections together (0: half the reply budget, at least the largest reply)"),
	K("limits.uid_buffer_bytes", CONFIG_SIZE, uid_buffer_bytes, 0, 1LL << 40, false, "bytes buffered from one uid's connections (0: half the buffer budget, at least one frame)"),
	K("shutdown.drain_ms", CONFIG_LONG, drain_ms, 0, 3600000, false, "time given to requests in flight on SIGTERM"),
	K("log.debug", CONFIG_BOOL, debug, 0, 1, false, "debug logging"),
	K("sandbox.pids_limit", CONFIG_LONG, pids_limit, 1, 4194304, false, "processes one sandbox may run"),
	K("sandbox.memory", CONFIG_SIZE, memory_bytes, 0, 1LL << 50, false, "memory of one sandbox (0: no limit)"),
	K("sandbox.cpus", CONFIG_DOUBLE, cpus, 0, 1024, false, "CPUs of one sandbox (0: no limit)"),
	K("sandbox.init", CONFIG_BOOL, init, 0, 1, false, "run docker-init as PID 1 in each sandbox"),
	K("sandbox.cap_drop_all", CONFIG_BOOL, cap_drop_all, 0, 1, false, "drop every Linux capability"),
	K("sandbox.pull_timeout_ms", CONFIG_LONG, pull_timeout_ms, 1000, 86400000, false, "deadline of one image pull"),
	K("sandbox.admin_group", CONFIG_STRING, admin_group, 0, 0, false, "members may reap and see every sandbox"),
	K("files.max_file_bytes", CONFIG_SIZE, files_max_file_bytes, 1, MSB_TRANSFER_MAX_FILE_BYTES, false, "largest file one file call moves"),
	K("files.max_total_bytes", CONFIG_SIZE, files_max_total_bytes, 1, MSB_TRANSFER_MAX_TOTAL_BYTES, false, "bytes one file call moves in all"),
	K("files.max_files", CONFIG_LONG, files_max_files, 1, MSB_TRANSFER_MAX_FILES, false, "files one file call moves"),
	K("files.timeout_ms", CONFIG_LONG, files_timeout_ms, 100, 3600000, false, "deadline of one file call, freeze included"),
	K("files.plane", CONFIG_STRING, files_plane, 0, 0, true, "auto, local (openat2 beneath the container's root, no freeze) or archive (the engine's archive API under a freeze)"),
	K("files.list_max_entries", CONFIG_LONG, files_list_max_entries, 1, 10000000, false, "entries one files.list returns at most (more is refused, never truncated)"),
	K("files.removal_fd_budget", CONFIG_LONG, files_removal_fd_budget, 0, 1048576, false, "descriptors the removals in progress share (0: a quarter of RLIMIT_NOFILE); a removal past it waits its turn"),
	K("files.journal_dir", CONFIG_STRING, files_journal_dir, 0, 0, true, "directory journalling the temporaries of writes in progress, so a restarted daemon removes what a killed one left"),
	K("exec.max_output_bytes", CONFIG_SIZE, exec_max_output_bytes, 1, 64LL * 1024 * 1024, false, "stdout and stderr of one command, together"),
	K("exec.on_timeout", CONFIG_STRING, exec_on_timeout, 0, 0, false, "kill: kill what the command started, keep the sandbox; dispose: remove the sandbox"),
	K("egress.proxy_binary", CONFIG_STRING, egress_proxy_binary, 0, 0, true, "the static egress proxy the proxy image is built from (empty: no allowlist)"),
	K("egress.subnet_pool", CONFIG_STRING, egress_subnet_pool, 0, 0, true, "IPv4 CIDR the allowlisted sandboxes' networks are cut from"),
	K("egress.block_prefix", CONFIG_LONG, egress_block_prefix, 8, 29, true, "prefix length of each allowlisted sandbox's network"),
	K("egress.outbound_network", CONFIG_STRING, egress_outbound_network, 0, 0, false, "network giving the egress proxy its way out"),
	K("egress.private_allow", CONFIG_STRING, egress_private_allow, 0, 0, false, "CIDRs the proxy may reach although not globally routable, comma-separated"),
	K("egress.gateway_mode", CONFIG_STRING, egress_gateway_mode, 0, 0, false, "auto, isolated (Engine >= 28) or inhibit (Engine 20.10-27): how the bridge is kept unaddressed"),
	K("egress.ready_timeout_ms", CONFIG_LONG, egress_ready_timeout_ms, 100, 600000, false, "time for a new proxy to report listening"),
	K("egress.state_dir", CONFIG_STRING, egress_state_dir, 0, 0, true, "directory for the egress event cursors"),
	K("events.max_backlog_bytes", CONFIG_SIZE, events_max_backlog_bytes, 4096, 1LL << 30, false, "events a subscriber may leave unread before it is dropped"),
	K("reap.max_age_s", CONFIG_LONG, reap_max_age_s, 0, 315360000, false, "timed sweep: remove sandboxes older than this (0: off)"),
	K("reap.interval_s", CONFIG_LONG, reap_interval_s, 1, 86400000, false, "timed sweep: how often"),
	K("freeze.lock_file", CONFIG_STRING, freeze_lock_file, 0, 0, true, "host-wide lock file every maf-sandboxd on the host shares, so none thaws a container another holds frozen"),
};

/* root's path, or name in $XDG_RUNTIME_DIR; NULL without it. malloc'd. */
static char *default_runtime_path(const char *root_path, const char *name)
{
	const char *xdg;

	if (geteuid() == 0)
		return xstrdup(root_path);
	xdg = getenv("XDG_RUNTIME_DIR");
	if (!xdg || !*xdg)
		return NULL;
	return xasprintf("%s/%s", xdg, name);
}

struct msbd_config *config_new_defaults(void)
{
	struct msbd_config *cfg = xcalloc(1, sizeof(*cfg));

	cfg->socket_path = default_runtime_path(MSB_DEFAULT_SOCKET, "maf-sandbox.sock");
	cfg->freeze_lock_file = default_runtime_path(MSB_DEFAULT_FREEZE_LOCK_FILE, MSB_FREEZE_LOCK_USER_NAME);
	cfg->files_journal_dir = default_runtime_path(MSB_DEFAULT_FILES_JOURNAL_DIR, MSB_FILES_JOURNAL_USER_NAME);
	cfg->socket_mode = MSB_SOCKET_MODE;
	cfg->engine_timeout_ms = MSB_ENGINE_TIMEOUT_MS;
	cfg->engine_reconnect_min_ms = MSB_ENGINE_RECONNECT_MIN_MS;
	cfg->engine_reconnect_max_ms = MSB_ENGINE_RECONNECT_MAX_MS;
	cfg->max_frame_bytes = MSB_FRAME_MAX_BYTES;
	cfg->max_connections = MSB_MAX_CONNECTIONS;
	cfg->max_inflight = MSB_MAX_INFLIGHT;
	cfg->buffer_budget_bytes = MSB_BUFFER_BUDGET_BYTES;
	cfg->frame_timeout_ms = MSB_FRAME_TIMEOUT_MS;
	cfg->write_timeout_ms = MSB_WRITE_TIMEOUT_MS;
	cfg->reply_budget_bytes = MSB_REPLY_BUDGET_BYTES;
	cfg->conn_reply_budget_bytes = MSB_CONN_REPLY_BUDGET_BYTES;
	cfg->drain_ms = MSB_DRAIN_TIMEOUT_MS;
	cfg->max_connections_per_uid = MSB_MAX_CONNECTIONS_PER_UID;
	cfg->admin_reserved_connections = MSB_ADMIN_RESERVED_CONNECTIONS;
	cfg->max_inflight_per_uid = MSB_MAX_INFLIGHT_PER_UID;
	cfg->idle_timeout_ms = MSB_IDLE_TIMEOUT_MS;
	cfg->idle_evict_ms = MSB_IDLE_EVICT_MS;
	cfg->pids_limit = MSB_PIDS_LIMIT;
	cfg->init = true;
	cfg->cap_drop_all = true;
	cfg->pull_timeout_ms = MSB_PULL_TIMEOUT_MS;
	cfg->reap_interval_s = MSB_REAP_INTERVAL_S;
	cfg->files_max_file_bytes = MSB_TRANSFER_MAX_FILE_BYTES;
	cfg->files_max_total_bytes = MSB_TRANSFER_MAX_TOTAL_BYTES;
	cfg->files_max_files = MSB_TRANSFER_MAX_FILES;
	cfg->files_timeout_ms = MSB_FILES_TIMEOUT_MS;
	cfg->exec_max_output_bytes = MSB_EXEC_MAX_OUTPUT_BYTES;
	cfg->exec_on_timeout = xstrdup("kill");
	cfg->files_plane = xstrdup("auto");
	cfg->files_list_max_entries = PLOCAL_LIST_MAX_ENTRIES;
	cfg->egress_proxy_binary = xstrdup(MSB_DEFAULT_PROXY_BINARY);
	cfg->egress_subnet_pool = xstrdup(MSB_EGRESS_SUBNET_POOL);
	cfg->egress_block_prefix = MSB_EGRESS_BLOCK_PREFIX;
	cfg->egress_outbound_network = xstrdup(MSB_EGRESS_OUTBOUND_NETWORK);
	cfg->egress_gateway_mode = xstrdup("auto");
	cfg->egress_ready_timeout_ms = MSB_EGRESS_READY_TIMEOUT_MS;
	cfg->egress_state_dir = xstrdup(MSB_EGRESS_STATE_DIR);
	cfg->events_max_backlog_bytes = MSB_EVENTS_MAX_BACKLOG_BYTES;
	return cfg;
}

struct msbd_config *config_free(struct msbd_config *cfg)
{
	if (!cfg)
		return NULL;
	free(cfg->socket_path);
	free(cfg->socket_group);
	free(cfg->engine_host);
	free(cfg->admin_group);
	free(cfg->exec_on_timeout);
	free(cfg->files_plane);
	free(cfg->egress_proxy_binary);
	free(cfg->egress_subnet_pool);
	free(cfg->egress_outbound_network);
	free(cfg->egress_private_allow);
	free(cfg->egress_gateway_mode);
	free(cfg->egress_state_dir);
	free(cfg->freeze_lock_file);
	free(cfg->files_journal_dir);
	free(cfg->file);
	free(cfg);
	return NULL;
}

static const struct config_key *config_key_find(const char *name)
{
	for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
		if (strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}

static int parse_integer(const char *s, int base, long long *ret)
{
	char *end;
	long long v;

	if (!*s || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, base);
	if (errno || end == s)
		return -EINVAL;
	*ret = v;
	return (int)(end - s);
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };

	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return *ret = true, 0;
		if (strcasecmp(s, no[i]) == 0)
			return *ret = false, 0;
	}
	return -EINVAL;
}

static int set_double(struct msbd_config *cfg, const struct config_key *k, const char *value,
		      char **reterr_message)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(value, &end);
	if (errno || end == value || *end || !(v >= (double)k->min && v <= (double)k->max)) {
		*reterr_message = xasprintf("%s: \"%s\" is not a number from %lld to %lld", k->name,
					    value, k->min, k->max);
		return -EINVAL;
	}
	*(double *)((char *)cfg + k->offset) = v;
	return 0;
}

/* A duration key's unit by its name: *_ms in milliseconds, *_s in seconds;
 * _MSB_TIME_UNIT_MAX for a key that is not a duration. */
static enum msb_time_unit config_key_time_unit(const struct config_key *k)
{
	size_t n = strlen(k->name);

	if (k->type != CONFIG_LONG)
		return _MSB_TIME_UNIT_MAX;
	if (n > 3 && strcmp(k->name + n - 3, "_ms") == 0)
		return MSB_TIME_MS;
	if (n > 2 && strcmp(k->name + n - 2, "_s") == 0)
		return MSB_TIME_S;
	return _MSB_TIME_UNIT_MAX;
}

/* A size or duration key: the shared parser (units.h), then the key's range. */
static int set_units(struct msbd_config *cfg, const struct config_key *k, const char *value,
		     char **reterr_message)
{
	enum msb_time_unit unit = config_key_time_unit(k);
	uint64_t v;
	int r;

	if (k->type == CONFIG_SIZE)
		r = msb_size_parse(value, &v);
	else
		r = msb_duration_parse(value, unit, unit, &v);
	if (r < 0 || v < (uint64_t)k->min || v > (uint64_t)k->max) {
		if (k->type == CONFIG_SIZE)
			*reterr_message = xasprintf("%s: \"%s\" is not a size from %lld to %lld bytes (%s)",
						    k->name, value, k->min, k->max, MSB_SIZE_FORMS);
		else
			*reterr_message = xasprintf("%s: \"%s\" is not a duration from %lld to %lld %s%s%s (%s)",
						    k->name, value, k->min, k->max, msb_time_unit_to_string(unit),
						    r == -EDOM ? ", in whole " : "",
						    r == -EDOM ? msb_time_unit_to_string(unit) : "",
						    unit == MSB_TIME_MS ? MSB_DURATION_FORMS_MS : MSB_DURATION_FORMS_S);
		return -EINVAL;
	}
	if (k->type == CONFIG_SIZE)
		*(size_t *)((char *)cfg + k->offset) = (size_t)v;
	else
		*(long *)((char *)cfg + k->offset) = (long)v;
	return 0;
}

static int set_number(struct msbd_config *cfg, const struct config_key *k, const char *value,
		      char **reterr_message)
{
	long long v;
	int r;

	if (k->type == CONFIG_SIZE || config_key_time_unit(k) != _MSB_TIME_UNIT_MAX)
		return set_units(cfg, k, value, reterr_message);
	r = parse_integer(value, k->type == CONFIG_MODE ? 8 : 10, &v);
	r = r < 0 ? r : value[r] ? -EINVAL : 0;
	if (r < 0 || v < k->min || v > k->max) {
		*reterr_message = xasprintf("%s: \"%s\" is not %s from %lld to %lld", k->name, value,
					    k->type == CONFIG_MODE ? "an octal mode" : "a number",
					    k->min, k->max);
		return -EINVAL;
	}
	if (k->type == CONFIG_LONG)
		*(long *)((char *)cfg + k->offset) = (long)v;
	else
		*(unsigned *)((char *)cfg + k->offset) = (unsigned)v;
	return 0;
}

int config_set(struct msbd_config *cfg, const char *key, const char *value, char **reterr_message)
{
	const struct config_key *k = config_key_find(key);
	char **slot;
	bool b;

	if (!k) {
		*reterr_message = xasprintf("unknown setting \"%s\"", key);
		return -ENOENT;
	}
	switch (k->type) {
	case CONFIG_STRING:
		slot = (char **)((char *)cfg + k->offset);
		free(*slot);
		*slot = *value ? xstrdup(value) : NULL;
		return 0;
	case CONFIG_BOOL:
		if (parse_bool(value, &b) < 0) {
			*reterr_message = xasprintf("%s: \"%s\" is not a boolean (true or false)",
						    key, value);
			return -EINVAL;
		}
		*(bool *)((char *)cfg + k->offset) = b;
		return 0;
	case CONFIG_LONG:
	case CONFIG_SIZE:
	case CONFIG_MODE:
		return set_number(cfg, k, value, reterr_message);
	case CONFIG_DOUBLE:
		return set_double(cfg, k, value, reterr_message);
	default:
		assert(!"unreachable");
		return -EINVAL;
	}
}

/* One "addr/len", IPv4 or IPv6, host bits allowed; 0 or -EINVAL. */
static int config_cidr_check(const char *cidr, bool v4_only)
{
	_cleanup_free_ char *a = xstrdup(cidr);
	char *slash = strchr(a, '/'), *end;
	unsigned char buf[16];
	long len;
	bool v6;

	if (!slash || slash == a || !slash[1])
		return -EINVAL;
	*slash = '\0';
	v6 = strchr(a, ':') != NULL;
	if ((v6 && v4_only) || inet_pton(v6 ? AF_INET6 : AF_INET, a, buf) != 1)
		return -EINVAL;
	errno = 0;
	len = strtol(slash + 1, &end, 10);
	if (errno || *end || !isdigit((unsigned char)slash[1]) || len < 0 || len > (v6 ? 128 : 32))
		return -EINVAL;
	return 0;
}

static int config_check_egress(const struct msbd_config *cfg, char **reterr_message)
{
	static const char *const modes[] = { "auto", "isolated", "inhibit" };
	bool mode_ok = false;

	for (size_t i = 0; i < ELEMENTSOF(modes); i++)
		mode_ok |= cfg->egress_gateway_mode && strcmp(cfg->egress_gateway_mode, modes[i]) == 0;
	if (!mode_ok) {
		*reterr_message = xasprintf("egress.gateway_mode must be auto, isolated or inhibit, not \"%s\"",
					    cfg->egress_gateway_mode ? cfg->egress_gateway_mode : "");
		return -EINVAL;
	}
	if (!cfg->egress_subnet_pool || config_cidr_check(cfg->egress_subnet_pool, true) < 0) {
		*reterr_message = xasprintf("egress.subnet_pool must be an IPv4 CIDR, not \"%s\"",
					    cfg->egress_subnet_pool ? cfg->egress_subnet_pool : "");
		return -EINVAL;
	}
	{
		char *err = NULL;
		struct subnet_pool *pool = subnet_pool_new(cfg->egress_subnet_pool,
							   (unsigned)cfg->egress_block_prefix, &err);

		if (!pool) {
			*reterr_message = xasprintf("egress.subnet_pool %s in blocks of /%ld: %s",
						    cfg->egress_subnet_pool, cfg->egress_block_prefix, err);
			free(err);
			return -EINVAL;
		}
		subnet_pool_free(pool);
	}
	if (!cfg->egress_outbound_network || !*cfg->egress_outbound_network) {
		*reterr_message = xstrdup("egress.outbound_network must name a network");
		return -EINVAL;
	}
	if (cfg->egress_proxy_binary && cfg->egress_proxy_binary[0] != '/') {
		*reterr_message = xstrdup("egress.proxy_binary must be an absolute path");
		return -EINVAL;
	}
	if (!cfg->egress_state_dir || cfg->egress_state_dir[0] != '/') {
		*reterr_message = xstrdup("egress.state_dir must be an absolute path");
		return -EINVAL;
	}
	if (cfg->egress_private_allow) {
		_cleanup_free_ char *list = xstrdup(cfg->egress_private_allow);
		char *save = NULL;

		for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			while (*tok == ' ')
				tok++;
			for (char *t = tok + strlen(tok); t > tok && t[-1] == ' ';)
				*--t = '\0';
			if (config_cidr_check(tok, false) < 0) {
				*reterr_message = xasprintf("egress.private_allow: \"%s\" is not a CIDR "
							    "(address/length)", tok);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* Both reply budgets admit the largest single reply the files.* and exec.*
 * caps allow, and the per-connection one is within the daemon-wide one. */
static int config_check_reply_budgets(const struct msbd_config *cfg, char **reterr_message)
{
	/* A call's charge: its reply bound, its id, its request's bytes. */
	size_t need = replybound_max(cfg) + REPLYBOUND_MAX_ID_BYTES + cfg->max_frame_bytes;

	if (cfg->conn_reply_budget_bytes < need || cfg->reply_budget_bytes < need) {
		*reterr_message = xasprintf("%s (%zu) is below the largest single call the files.*, exec.* "
					    "and limits.max_frame_bytes caps allow (%zu bytes: a files.read of "
					    "files.max_total_bytes in base64, a files.list of files.list_max_entries "
					    "long names, or a sandbox.exec of exec.max_output_bytes with its text "
					    "views and stream, plus a request of limits.max_frame_bytes): raise it, "
					    "or lower those caps",
					    cfg->conn_reply_budget_bytes < need ? "limits.conn_reply_budget_bytes" :
					    "limits.reply_budget_bytes",
					    cfg->conn_reply_budget_bytes < need ? cfg->conn_reply_budget_bytes :
					    cfg->reply_budget_bytes, need);
		return -EINVAL;
	}
	if (cfg->conn_reply_budget_bytes > cfg->reply_budget_bytes) {
		*reterr_message = xasprintf("limits.conn_reply_budget_bytes (%zu) is above "
					    "limits.reply_budget_bytes (%zu): lower it, or raise the daemon-wide one",
					    cfg->conn_reply_budget_bytes, cfg->reply_budget_bytes);
		return -EINVAL;
	}
	return 0;
}

size_t config_uid_buffer_bytes(const struct msbd_config *cfg)
{
	size_t half = cfg->buffer_budget_bytes / 2;

	if (cfg->uid_buffer_bytes)
		return cfg->uid_buffer_bytes;
	return half > cfg->max_frame_bytes ? half : cfg->max_frame_bytes;
}

size_t config_uid_reply_budget_bytes(const struct msbd_config *cfg)
{
	size_t half = cfg->reply_budget_bytes / 2, need = replybound_max(cfg);

	if (cfg->uid_reply_budget_bytes)
		return cfg->uid_reply_budget_bytes;
	if (half < need)
		half = need;
	return half < cfg->reply_budget_bytes ? half : cfg->reply_budget_bytes;
}

/* limits.uid_reply_budget_bytes, unless 0, admits the largest reply and is
 * within the daemon-wide budget. */
static int config_check_uid_reply_budget(const struct msbd_config *cfg, char **reterr_message)
{
	size_t need = replybound_max(cfg);

	if (cfg->uid_reply_budget_bytes &&
	    (cfg->uid_reply_budget_bytes < need || cfg->uid_reply_budget_bytes > cfg->reply_budget_bytes)) {
		*reterr_message = xasprintf("limits.uid_reply_budget_bytes (%zu) must be 0 (auto) or from the "
					    "largest single reply the files.* and exec.* caps allow (%zu) to "
					    "limits.reply_budget_bytes (%zu)",
					    cfg->uid_reply_budget_bytes, need, cfg->reply_budget_bytes);
		return -EINVAL;
	}
	return 0;
}

/* The per-uid limits against the daemon-wide ones. */
static int config_check_fairness(const struct msbd_config *cfg, char **reterr_message)
{
	if (cfg->idle_timeout_ms > 0 && cfg->idle_timeout_ms < MSB_IDLE_TIMEOUT_MIN_MS) {
		*reterr_message = xasprintf("limits.idle_timeout_ms (%ld) must be 0 (never) or at least %d",
					    cfg->idle_timeout_ms, MSB_IDLE_TIMEOUT_MIN_MS);
		return -EINVAL;
	}
	if (cfg->uid_buffer_bytes &&
	    (cfg->uid_buffer_bytes < cfg->max_frame_bytes || cfg->uid_buffer_bytes > cfg->buffer_budget_bytes)) {
		*reterr_message = xasprintf("limits.uid_buffer_bytes (%zu) must be 0 (auto) or from "
					    "limits.max_frame_bytes (%zu) to limits.buffer_budget_bytes (%zu)",
					    cfg->uid_buffer_bytes, cfg->max_frame_bytes, cfg->buffer_budget_bytes);
		return -EINVAL;
	}
	return 0;
}

int config_validate(const struct msbd_config *cfg, char **reterr_message)
{
	if (!cfg->socket_path || cfg->socket_path[0] != '/') {
		*reterr_message = xstrdup(cfg->socket_path ?
			"socket.path must be an absolute path" :
			"socket.path is not set: give --socket PATH (the default needs root, or "
			"XDG_RUNTIME_DIR)");
		return -EINVAL;
	}
	if (strlen(cfg->socket_path) >= 108) {
		*reterr_message = xasprintf("socket.path is longer than a Unix socket path may be "
					    "(107 bytes): %s", cfg->socket_path);
		return -ENAMETOOLONG;
	}
	if (!cfg->freeze_lock_file || cfg->freeze_lock_file[0] != '/') {
		*reterr_message = xstrdup(cfg->freeze_lock_file ?
			"freeze.lock_file must be an absolute path" :
			"freeze.lock_file is not set: give --set freeze.lock_file=PATH, the same for every "
			"maf-sandboxd on this host (the default needs root, or XDG_RUNTIME_DIR)");
		return -EINVAL;
	}
	if (!cfg->exec_on_timeout || (strcmp(cfg->exec_on_timeout, "kill") && strcmp(cfg->exec_on_timeout, "dispose"))) {
		*reterr_message = xasprintf("exec.on_timeout must be kill or dispose, not \"%s\"",
					    cfg->exec_on_timeout ? cfg->exec_on_timeout : "");
		return -EINVAL;
	}
	if (!cfg->files_plane || (strcmp(cfg->files_plane, "auto") && strcmp(cfg->files_plane, "local") &&
				  strcmp(cfg->files_plane, "archive"))) {
		*reterr_message = xasprintf("files.plane must be auto, local or archive, not \"%s\"",
					    cfg->files_plane ? cfg->files_plane : "");
		return -EINVAL;
	}
	if (config_check_egress(cfg, reterr_message) < 0)
		return -EINVAL;
	if (cfg->admin_group && !getgrnam(cfg->admin_group)) {
		*reterr_message = xasprintf("sandbox.admin_group: no group named \"%s\"", cfg->admin_group);
		return -ENOENT;
	}
	if (cfg->socket_group && !getgrnam(cfg->socket_group)) {
		*reterr_message = xasprintf("socket.group: no group named \"%s\"", cfg->socket_group);
		return -ENOENT;
	}
	if (cfg->buffer_budget_bytes < cfg->max_frame_bytes) {
		*reterr_message = xasprintf("limits.buffer_budget_bytes (%zu) must be at least "
					    "limits.max_frame_bytes (%zu)",
					    cfg->buffer_budget_bytes, cfg->max_frame_bytes);
		return -EINVAL;
	}
	if (config_check_reply_budgets(cfg, reterr_message) < 0)
		return -EINVAL;
	if (config_check_fairness(cfg, reterr_message) < 0)
		return -EINVAL;
	if (config_check_uid_reply_budget(cfg, reterr_message) < 0)
		return -EINVAL;
	if (cfg->engine_reconnect_min_ms > cfg->engine_reconnect_max_ms) {
		*reterr_message = xasprintf("engine.reconnect_min_ms (%ld) is above "
					    "engine.reconnect_max_ms (%ld)",
					    cfg->engine_reconnect_min_ms, cfg->engine_reconnect_max_ms);
		return -EINVAL;
	}
	return 0;
}

/* Splits one line into key and value in place. Returns 1 for a setting,
 * 0 for a blank or comment line, -EINVAL for anything else. */
static int config_split_line(char *line, char **ret_key, char **ret_value)
{
	char *p = line, *eq, *end, *v;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '\0' || *p == '#')
		return 0;
	eq = strchr(p, '=');
	if (!eq)
		return -EINVAL;
	for (end = eq; end > p && isspace((unsigned char)end[-1]); end--)
		;
	*end = '\0';
	v = eq + 1;
	while (isspace((unsigned char)*v))
		v++;
	if (*v == '"') {
		end = strchr(v + 1, '"');
		if (!end)
			return -EINVAL;
		*end++ = '\0';
		v++;
		while (isspace((unsigned char)*end))
			end++;
		if (*end && *end != '#')
			return -EINVAL;
	} else {
		char *hash = v;

		while ((hash = strchr(hash, '#')) && hash > v && !isspace((unsigned char)hash[-1]))
			hash++;
		end = hash ? hash : v + strlen(v);
		while (end > v && isspace((unsigned char)end[-1]))
			end--;
		*end = '\0';
	}
	if (*p == '\0')
		return -EINVAL;
	*ret_key = p;
	*ret_value = v;
	return 1;
}

static int config_read_file(struct msbd_config *cfg, const char *path, bool must_exist,
			    char **reterr_message)
{
	_cleanup_(fclosep) FILE *f = fopen(path, "re");
	char line[MSB_CONFIG_LINE_MAX + 2];
	struct stat st;
	unsigned lineno = 0;

	if (!f) {
		if (errno == ENOENT && !must_exist)
			return 0;
		*reterr_message = xasprintf("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MSB_CONFIG_FILE_MAX_BYTES) {
		*reterr_message = xasprintf("%s: not a regular file of at most %d bytes", path,
					    MSB_CONFIG_FILE_MAX_BYTES);
		return -EINVAL;
	}
	while (fgets(line, sizeof(line), f)) {
		char *key, *value, *msg = NULL;
		size_t n = strlen(line);
		int r;

		lineno++;
		if (n > MSB_CONFIG_LINE_MAX) {
			*reterr_message = xasprintf("%s:%u: line too long", path, lineno);
			return -EINVAL;
		}
		line[strcspn(line, "\r\n")] = '\0';
		r = config_split_line(line, &key, &value);
		if (r == 0)
			continue;
		if (r < 0) {
			*reterr_message = xasprintf("%s:%u: expected \"key = value\"", path, lineno);
			return r;
		}
		r = config_set(cfg, key, value, &msg);
		if (r < 0) {
			*reterr_message = xasprintf("%s:%u: %s", path, lineno, msg);
			free(msg);
			return r;
		}
	}
	free(cfg->file);
	cfg->file = xstrdup(path);
	return 0;
}

static int config_apply_set(struct msbd_config *cfg, const char *set, char **reterr_message)
{
	_cleanup_free_ char *copy = xstrdup(set);
	char *eq = strchr(copy, '=');

	if (!eq) {
		*reterr_message = xasprintf("--set %s: expected key=value", set);
		return -EINVAL;
	}
	*eq = '\0';
	return config_set(cfg, copy, eq + 1, reterr_message);
}

int config_load(const struct msbd_cmdline *cmd, struct msbd_config **ret, char **reterr_message)
{
	struct msbd_config *cfg = config_new_defaults();
	const char *file = cmd->config_file ? cmd->config_file : MSB_DEFAULT_CONFIG_FILE;
	int r;

	r = config_read_file(cfg, file, cmd->config_file != NULL, reterr_message);
	for (size_t i = 0; r >= 0 && i < cmd->n_sets; i++)
		r = config_apply_set(cfg, cmd->sets[i], reterr_message);
	if (r >= 0)
		r = config_validate(cfg, reterr_message);
	if (r < 0) {
		config_free(cfg);
		return r;
	}
	*ret = cfg;
	return 0;
}

static void config_format(const struct msbd_config *cfg, const struct config_key *k, char *buf,
			  size_t size)
{
	const char *base = (const char *)cfg + k->offset;
	const char *s;

	switch (k->type) {
	case CONFIG_STRING:
		s = *(char *const *)base;
		snprintf(buf, size, "%s", s ? s : "");
		break;
	case CONFIG_LONG:
		snprintf(buf, size, "%ld", *(const long *)base);
		break;
	case CONFIG_SIZE:
		snprintf(buf, size, "%zu", *(const size_t *)base);
		break;
	case CONFIG_MODE:
		snprintf(buf, size, "%04o", *(const unsigned *)base);
		break;
	case CONFIG_BOOL:
		snprintf(buf, size, "%s", *(const bool *)base ? "true" : "false");
		break;
	case CONFIG_DOUBLE:
		snprintf(buf, size, "%g", *(const double *)base);
		break;
	default:
		assert(!"unreachable");
	}
}

char *config_restart_keys_changed(const struct msbd_config *a, const struct msbd_config *b)
{
	char *list = NULL;

	for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
		char va[PATH_MAX], vb[PATH_MAX];
		char *grown;

		if (!config_keys[i].restart)
			continue;
		config_format(a, &config_keys[i], va, sizeof(va));
		config_format(b, &config_keys[i], vb, sizeof(vb));
		if (strcmp(va, vb) == 0)
			continue;
		grown = xasprintf("%s%s%s", list ? list : "", list ? ", " : "", config_keys[i].name);
		free(list);
		list = grown;
	}
	return list;
}

void config_dump(const struct msbd_config *cfg, FILE *out)
{
	fprintf(out, "# configuration file: %s\n", cfg->file ? cfg->file : "(none)");
	for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
		char v[PATH_MAX];

		config_format(cfg, &config_keys[i], v, sizeof(v));
		fprintf(out, "# %s\n%s = %s\n", config_keys[i].help, config_keys[i].name, v);
	}
}
