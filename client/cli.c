/* cli.c — maf-sandbox, the command-line client of maf-sandboxd.
 *
 *   maf-sandbox [--socket PATH] [--json] [--timeout SECONDS] COMMAND [OPTIONS]
 *
 * A thin table of subcommands (cli_cmds[], one row per command): each row
 * names its handler, which parses its own options after the command name
 * (the global options are accepted there too). Results print in a human form
 * by default, or as the daemon's raw result with --json.
 *
 * Exit codes (stable; scripts rely on them; also in --help):
 *   0  success
 *   1  the daemon answered with an error
 *   2  usage error
 *   3  cannot connect to the daemon (socket missing, refused or not permitted)
 *   4  protocol or I/O error, or timeout
 */
#include "msb-build.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cleanup.h"
#include "msb-limits.h"
#include "msb.h"

enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_REMOTE = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_CONNECT = 3,
	CLI_EXIT_FAILURE = 4,
};

/* The largest --timeout: its milliseconds must fit an int. */
#define CLI_TIMEOUT_MAX_SECONDS 2000000
/* Uptimes from this many seconds on print as a plain number. */
#define CLI_UPTIME_MAX_SECONDS 1e12
/* A handler's "keep going" answer from parse_options(). */
#define CLI_CONTINUE (-1)

struct cli_opts {
	const char *socket;  /* NULL = msb_default_socket_path() */
	bool json;
	int timeout_ms;      /* -1 = the library's default */
};

struct cli_cmd {
	const char *name;
	const char *summary;  /* one line of the top-level help */
	const char *help;     /* the text of `maf-sandbox COMMAND --help` */
	int (*handler)(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv);
	int (*query)(struct msb_conn *conn, json_t **ret_result);  /* for cmd_query */
	void (*print)(const json_t *result);                        /* human output */
};

static const char options_help[] =
	"Options (before or after the command):\n"
	"  -s, --socket PATH      the daemon's socket (default: $MAF_SANDBOX_SOCKET; else\n"
	"                         " MSB_DEFAULT_SOCKET " as root; else\n"
	"                         $XDG_RUNTIME_DIR/maf-sandbox.sock)\n"
	"  -j, --json             print the daemon's result as JSON\n"
	"  -t, --timeout SECONDS  give up on a call after SECONDS (default 120; 0 = never)\n"
	"  -h, --help             show this help and exit\n"
	"  -V, --version          show the version and exit\n"
	"\n"
	"Exit status:\n"
	"  0  success\n"
	"  1  the daemon answered with an error\n"
	"  2  usage error\n"
	"  3  cannot connect to the daemon (socket missing, refused or not permitted)\n"
	"  4  protocol or I/O error, or timeout\n";

/* Prints the top-level help (cmd NULL) or a command's help to stdout. */
static void print_help(const struct cli_cmd *cmd);

static int usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("maf-sandbox: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'maf-sandbox %s%s--help'.\n", cmd ? cmd->name : "", cmd ? " " : "");
	return CLI_EXIT_USAGE;
}

/* SECONDS (decimal, fractions allowed) to ms; 0 stays 0 (no timeout). */
static int parse_timeout(const char *s, int *ret_ms)
{
	char *end;
	double secs, ms;

	errno = 0;
	secs = strtod(s, &end);
	if (errno || end == s || *end || !(secs >= 0 && secs <= CLI_TIMEOUT_MAX_SECONDS))
		return -EINVAL;
	ms = secs * 1000.0;
	*ret_ms = secs > 0 && ms < 1 ? 1 : (int)ms;
	return 0;
}

static const struct option cli_options[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, 'j' },
	{ "timeout", required_argument, NULL, 't' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ 0 },
};

/* Parses options up to the first operand (argv[0] is the program or the
 * command). Returns CLI_CONTINUE, or the exit code when done (help, version,
 * usage error). Leaves optind at the first operand. */
static int parse_options(int argc, char **argv, struct cli_opts *opts, const struct cli_cmd *cmd)
{
	int c;

	optind = 0;  /* glibc: start over, from argv[1] */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:s:jt:hV", cli_options, NULL)) != -1) {
		switch (c) {
		case 's':
			opts->socket = optarg;
			break;
		case 'j':
			opts->json = true;
			break;
		case 't':
			if (parse_timeout(optarg, &opts->timeout_ms) < 0)
				return usage_error(cmd, "invalid --timeout '%s': want seconds from 0 to %d",
						   optarg, CLI_TIMEOUT_MAX_SECONDS);
			break;
		case 'h':
			print_help(cmd);
			return CLI_EXIT_OK;
		case 'V':
			printf("maf-sandbox %s\n", PACKAGE_VERSION);
			return CLI_EXIT_OK;
		case ':':
			return usage_error(cmd, "option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return usage_error(cmd, "unknown option '-%c'", optopt);
			return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
		}
	}
	return CLI_CONTINUE;
}

static const char *connect_hint(int err)
{
	switch (err) {
	case ENOENT:
	case ECONNREFUSED:
		return " (is maf-sandboxd running?)";
	case EACCES:
	case EPERM:
		return " (is this user in the maf-sandbox group?)";
	default:
		return "";
	}
}

/* Connects as opts say. Returns 0, or the exit code after saying why. */
static int cli_connect(const struct cli_opts *opts, struct msb_conn **ret_conn)
{
	_cleanup_free_ char *dflt = NULL;
	const char *path = opts->socket;
	int r;

	if (!path) {
		path = dflt = msb_default_socket_path();
		if (!path) {
			fprintf(stderr, "maf-sandbox: no socket to connect to: set MAF_SANDBOX_SOCKET "
				"or XDG_RUNTIME_DIR, or use --socket\n");
			return CLI_EXIT_CONNECT;
		}
	}
	r = msb_connect(path, ret_conn);
	if (r == MSB_E_INVAL)
		return usage_error(NULL, "invalid socket path '%s' (empty or too long)", path);
	if (r < 0) {
		int err = errno;

		fprintf(stderr, "maf-sandbox: cannot connect to %s: %s%s\n", path, strerror(err),
			connect_hint(err));
		return CLI_EXIT_CONNECT;
	}
	if (opts->timeout_ms >= 0)
		msb_set_timeout(*ret_conn, opts->timeout_ms);
	return 0;
}

/* Says why a call failed, as "maf-sandbox: <type or code>: <message>" for the
 * daemon's errors. Returns the exit code. */
static int report_failure(const struct cli_cmd *cmd, const struct msb_conn *conn, int r)
{
	int err = errno;

	if (r == MSB_E_REMOTE) {
		const char *type = msb_last_error_type(conn);
		const char *msg = msb_last_error_message(conn);

		if (type)
			fprintf(stderr, "maf-sandbox: %s: %s\n", type, msg ? msg : "");
		else
			fprintf(stderr, "maf-sandbox: %d: %s\n", msb_last_error_code(conn),
				msg ? msg : "");
		return CLI_EXIT_REMOTE;
	}
	if (r == MSB_E_IO)
		fprintf(stderr, "maf-sandbox: %s: %s: %s\n", cmd->name, msb_strerror(r), strerror(err));
	else
		fprintf(stderr, "maf-sandbox: %s: %s\n", cmd->name, msb_strerror(r));
	return r == MSB_E_INVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;
}

static int print_json(const json_t *result)
{
	_cleanup_free_ char *s = json_dumps(result, JSON_INDENT(2) | JSON_ENCODE_ANY);

	if (!s) {
		fprintf(stderr, "maf-sandbox: cannot encode the result as JSON\n");
		return CLI_EXIT_FAILURE;
	}
	puts(s);
	return CLI_EXIT_OK;
}

/* --- human output: print what is there, skip what is not --------------- */

/* One output line, printed lazily: `first` before the first item, `sep`
 * between items; nothing at all when no item is added. */
struct line {
	const char *first;
	const char *sep;
	int n;
};

static void line_add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line_add(struct line *l, const char *fmt, ...)
{
	va_list ap;

	fputs(l->n++ ? l->sep : l->first, stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

static void line_end(const struct line *l)
{
	if (l->n)
		putchar('\n');
}

static const char *get_str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static bool get_int(const json_t *o, const char *key, json_int_t *ret)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		return false;
	*ret = json_integer_value(v);
	return true;
}

static void line_add_list(struct line *l, const json_t *arr)
{
	size_t i;
	json_t *v;

	json_array_foreach(arr, i, v)
		if (json_is_string(v))
			line_add(l, "%s", json_string_value(v));
}

/* "label: a, b, c", "label: none" for an empty list, nothing when absent. */
static void print_list(const char *label, const json_t *arr)
{
	struct line l = { label, ", ", 0 };

	if (!json_is_array(arr))
		return;
	line_add_list(&l, arr);
	if (l.n == 0)
		printf("%snone", label);
	putchar('\n');
}

static void print_field(const char *label, const char *value)
{
	if (value)
		printf("%s%s\n", label, value);
}

static void line_add_bytes(struct line *l, const char *fmt_tail, json_int_t n)
{
	if (n >= (json_int_t)MSB_MIB && n % (json_int_t)MSB_MIB == 0)
		line_add(l, "%" JSON_INTEGER_FORMAT " MiB%s", n / (json_int_t)MSB_MIB, fmt_tail);
	else if (n >= (json_int_t)MSB_MIB)
		line_add(l, "%.1f MiB%s", (double)n / (double)MSB_MIB, fmt_tail);
	else
		line_add(l, "%" JSON_INTEGER_FORMAT " bytes%s", n, fmt_tail);
}

static void print_transfer_limits(const char *label, const json_t *lim)
{
	struct line l = { label, ", ", 0 };
	json_int_t n;

	if (get_int(lim, "max_bytes_per_file", &n))
		line_add_bytes(&l, " per file", n);
	if (get_int(lim, "max_total_bytes", &n))
		line_add_bytes(&l, " in total", n);
	if (get_int(lim, "max_files", &n))
		line_add(&l, "%" JSON_INTEGER_FORMAT " files", n);
	line_end(&l);
}

static void print_describe(const json_t *r)
{
	const json_t *daemon = json_object_get(r, "daemon");
	const json_t *limits = json_object_get(r, "limits");
	const json_t *wire = json_object_get(r, "wire");
	const char *name = get_str(daemon, "name"), *version = get_str(daemon, "version");
	struct line l = { "daemon: ", ", ", 0 };
	json_t *observes = json_object_get(r, "observes_egress");
	json_int_t n;

	if (name || version)
		line_add(&l, "%s%s%s", name ? name : "", name && version ? " " : "",
			 version ? version : "");
	if (get_str(r, "protocol_version"))
		line_add(&l, "protocol %s", get_str(r, "protocol_version"));
	line_end(&l);
	print_field("backend: ", get_str(r, "backend"));
	print_field("isolation: ", get_str(r, "isolation"));
	print_list("capabilities: ", json_object_get(r, "capabilities"));
	print_list("egress modes: ", json_object_get(r, "egress_modes"));
	if (json_is_boolean(observes))
		printf("observes egress: %s\n", json_is_true(observes) ? "yes" : "no");
	print_list("isolation scopes: ", json_object_get(r, "isolation_scopes"));
	print_list("os families: ", json_object_get(r, "os_families"));
	print_transfer_limits("files in: ", json_object_get(limits, "files_in"));
	print_transfer_limits("files out: ", json_object_get(limits, "files_out"));
	l = (struct line){ "wire: ", ", ", 0 };
	if (get_int(wire, "max_frame_bytes", &n))
		line_add_bytes(&l, " per frame", n);
	if (get_int(wire, "max_inflight", &n))
		line_add(&l, "%" JSON_INTEGER_FORMAT " calls in flight per connection", n);
	line_end(&l);
}

/* "Docker V", "API A negotiated (engine max M)" from an engine object. */
static void line_add_engine_versions(struct line *l, const json_t *e)
{
	const char *version = get_str(e, "version");
	const char *api = get_str(e, "api_version");
	const char *max = get_str(e, "engine_api_version");

	if (version)
		line_add(l, "Docker %s", version);
	if (api && max)
		line_add(l, "API %s negotiated (engine max %s)", api, max);
	else if (api)
		line_add(l, "API %s negotiated", api);
	else if (max)
		line_add(l, "engine API max %s", max);
}

static void print_status_engine(const json_t *e)
{
	const char *state = get_str(e, "state");
	const char *endpoint = get_str(e, "endpoint");
	const char *source = get_str(e, "endpoint_source");
	json_t *reachable = json_object_get(e, "reachable");
	struct line l = { "engine: ", ", ", 0 };
	json_int_t n;

	if (!state && json_is_boolean(reachable))
		state = json_is_true(reachable) ? "reachable" : "unreachable";
	if (state) {
		printf("engine: %s", state);
		l.first = " — ";
	}
	line_add_engine_versions(&l, e);
	if (endpoint && source)
		line_add(&l, "endpoint %s (%s)", endpoint, source);
	else if (endpoint)
		line_add(&l, "endpoint %s", endpoint);
	if (state && l.n == 0)
		putchar('\n');
	line_end(&l);
	l = (struct line){ "engine requests: ", ", ", 0 };
	if (get_int(e, "requests", &n))
		line_add(&l, "%" JSON_INTEGER_FORMAT " total", n);
	if (get_int(e, "call_requests", &n))
		line_add(&l, "%" JSON_INTEGER_FORMAT " for calls", n);
	line_end(&l);
	print_field("engine last error: ", get_str(e, "last_error"));
}

static void line_add_uptime(struct line *l, double secs)
{
	long long s, d, h, m;

	if (!(secs < CLI_UPTIME_MAX_SECONDS)) {  /* also NaN: never cast what does not fit */
		line_add(l, "up %gs", secs);
		return;
	}
	s = (long long)secs;
	d = s / 86400;
	h = s / 3600 % 24;
	m = s / 60 % 60;
	if (d)
		line_add(l, "up %lldd %lldh %lldm", d, h, m);
	else if (h)
		line_add(l, "up %lldh %lldm %llds", h, m, s % 60);
	else if (m)
		line_add(l, "up %lldm %llds", m, s % 60);
	else
		line_add(l, "up %.1fs", secs);
}

static void print_status_daemon(const json_t *d)
{
	struct line l = { "daemon: ", ", ", 0 };
	json_t *uptime = json_object_get(d, "uptime_seconds");
	json_int_t n;

	if (get_str(d, "version"))
		line_add(&l, "version %s", get_str(d, "version"));
	if (get_int(d, "pid", &n))
		line_add(&l, "pid %" JSON_INTEGER_FORMAT, n);
	if (json_is_number(uptime) && json_number_value(uptime) >= 0)
		line_add_uptime(&l, json_number_value(uptime));
	if (get_str(d, "socket"))
		line_add(&l, "socket %s", get_str(d, "socket"));
	line_end(&l);
}

/* "label: N name, N name, ..." for each (key, name) present in o. */
static void print_counters(const char *label, const json_t *o, const char *const keys[][2],
			   size_t nkeys)
{
	struct line l = { label, ", ", 0 };
	json_int_t n;

	for (size_t i = 0; i < nkeys; i++)
		if (get_int(o, keys[i][0], &n))
			line_add(&l, "%" JSON_INTEGER_FORMAT " %s", n, keys[i][1]);
	line_end(&l);
}

static void print_status(const json_t *r)
{
	static const char *const conn_keys[][2] = {
		{ "current", "current" }, { "accepted", "accepted" }, { "rejected", "rejected" },
	};
	static const char *const req_keys[][2] = {
		{ "total", "total" }, { "in_flight", "in flight" }, { "errors", "errors" },
	};

	print_status_daemon(json_object_get(r, "daemon"));
	print_status_engine(json_object_get(r, "engine"));
	print_counters("connections: ", json_object_get(r, "connections"), conn_keys,
		       ELEMENTSOF(conn_keys));
	print_counters("requests: ", json_object_get(r, "requests"), req_keys, ELEMENTSOF(req_keys));
}

static void print_engine(const json_t *r)
{
	const char *os = get_str(r, "os"), *arch = get_str(r, "arch");
	struct line l = { "engine: ", ", ", 0 };

	line_add_engine_versions(&l, r);
	line_end(&l);
	l = (struct line){ "platform: ", ", ", 0 };
	if (os || arch)
		line_add(&l, "%s%s%s", os ? os : "", os && arch ? "/" : "", arch ? arch : "");
	if (get_str(r, "kernel_version"))
		line_add(&l, "kernel %s", get_str(r, "kernel_version"));
	line_end(&l);
}

/* --- commands ------------------------------------------------------------ */

/* A command that calls one method without params and prints its result. */
static int cmd_query(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv)
{
	struct msb_conn *conn = NULL;
	json_auto_t *result = NULL;
	int r;

	r = parse_options(argc, argv, opts, cmd);
	if (r != CLI_CONTINUE)
		return r;
	if (optind < argc)
		return usage_error(cmd, "'%s' takes no arguments", cmd->name);
	r = cli_connect(opts, &conn);
	if (r != 0)
		return r;
	r = cmd->query(conn, &result);
	if (r < 0)
		r = report_failure(cmd, conn, r);
	else if (opts->json || !json_is_object(result))
		r = print_json(result);
	else
		cmd->print(result);
	msb_conn_free(conn);
	return r;
}

static const struct cli_cmd cli_cmds[] = {
	{
		.name = "describe",
		.summary = "what the daemon serves: isolation, capabilities, scopes, limits",
		.help = "Show what the daemon declares it serves (daemon.describe): backend,\n"
			"isolation, capabilities, egress modes, isolation scopes, OS families and\n"
			"transfer limits.",
		.handler = cmd_query, .query = msb_describe, .print = print_describe,
	},
	{
		.name = "status",
		.summary = "the daemon's and the engine's state, with counters",
		.help = "Show the daemon's state (daemon.status): version, pid and uptime, whether\n"
			"the Docker engine is reachable and at which API version, and the\n"
			"connection and request counters.",
		.handler = cmd_query, .query = msb_status, .print = print_status,
	},
	{
		.name = "engine",
		.summary = "version details asked fresh of the Docker engine",
		.help = "Ask the Docker engine for its version now (daemon.engine): engine and API\n"
			"versions, OS, architecture and kernel. Fails with EngineUnavailable (exit\n"
			"status 1) when the engine cannot be reached.",
		.handler = cmd_query, .query = msb_engine, .print = print_engine,
	},
};
static const size_t cli_ncmds = ELEMENTSOF(cli_cmds);

static void print_help(const struct cli_cmd *cmd)
{
	if (cmd) {
		printf("Usage: maf-sandbox [OPTIONS] %s\n\n%s\n\n%s", cmd->name, cmd->help,
		       options_help);
		return;
	}
	printf("Usage: maf-sandbox [--socket PATH] [--json] [--timeout SECONDS] COMMAND\n\n"
	       "Talk to maf-sandboxd over its Unix socket.\n\nCommands:\n");
	for (size_t i = 0; i < cli_ncmds; i++)
		printf("  %-10s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
	printf("\nRun 'maf-sandbox COMMAND --help' for a command's help.\n\n%s", options_help);
}

static const struct cli_cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < cli_ncmds; i++)
		if (!strcmp(cli_cmds[i].name, name))
			return &cli_cmds[i];
	return NULL;
}

/* Flushes stdout; a failed write (a full disk, a closed pipe) is an I/O error. */
static int close_stdout(int r)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "maf-sandbox: cannot write the output: %s\n", strerror(errno));
		return r == CLI_EXIT_OK ? CLI_EXIT_FAILURE : r;
	}
	return r;
}

int main(int argc, char **argv)
{
	struct cli_opts opts = { .timeout_ms = -1 };
	const struct cli_cmd *cmd;
	int r;

	r = parse_options(argc, argv, &opts, NULL);
	if (r != CLI_CONTINUE)
		return close_stdout(r);
	if (optind >= argc)
		return usage_error(NULL, "no command given");
	cmd = cmd_find(argv[optind]);
	if (!cmd)
		return usage_error(NULL, "unknown command '%s'", argv[optind]);
	r = cmd->handler(cmd, &opts, argc - optind, argv + optind);
	return close_stdout(r);
}
