/* cli.c — maf-sandbox, the command-line client of maf-sandboxd.
 *
 *   maf-sandbox [--socket PATH] [--json] [--timeout SECONDS] COMMAND [OPTIONS] [OPERANDS]
 *
 * A thin table of subcommands (cli_cmds[], one row per command): each row
 * names its handler, the command options it takes (long options, -w, -r
 * and -f also short; the global ones are accepted there too), how many operands
 * follow the options and, for the sandbox.* and files.* commands, how to
 * build the params and report the result. Results print in a human form by
 * default, or as the daemon's raw result with --json.
 *
 * Exit codes (stable; scripts rely on them; also in --help):
 *   0  success
 *   1  the daemon answered with an error
 *   2  usage error
 *   3  cannot connect to the daemon (socket missing, refused or not permitted)
 *   4  protocol or I/O error, or timeout
 * except for exec, which exits with the command's own status (0-255), 2 for
 * a usage error, and 125 when the command's result could not be had (the
 * daemon's error, no connection, protocol or I/O error, timeout).
 */
#include "msb-build.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base64.h"
#include "cleanup.h"
#include "errors.h"
#include "msb-limits.h"
#include "msb.h"
#include "types.h"
#include "units.h"
#include "xmalloc.h"


enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_REMOTE = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_CONNECT = 3,
	CLI_EXIT_FAILURE = 4,
	CLI_EXIT_EXEC_FAILED = 125,  /* exec: no result of the command (as docker run) */
};

/* The largest --timeout: its milliseconds must fit an int. */
#define CLI_TIMEOUT_MAX_SECONDS 2000000
/* Uptimes from this many seconds on print as a plain number. */
#define CLI_UPTIME_MAX_SECONDS 1e12
/* A handler's "keep going" answer from parse_options(). */
#define CLI_CONTINUE (-1)
/* The longest --older-than: its seconds fit any integer the daemon takes. */
#define CLI_DURATION_MAX_DAYS 36500
#define CLI_SECONDS_PER_DAY 86400
/* The largest --spec file. */
#define CLI_SPEC_MAX_BYTES MSB_MIB
/* The pull progress line: its most bytes, and the width of a terminal that
 * does not say (a line never reaches the last column, so it never wraps). */
#define CLI_PROGRESS_MAX_BYTES 1024
#define CLI_PROGRESS_DEFAULT_COLUMNS 80
/* Spaces between the columns of a table. */
#define CLI_TABLE_GAP 2
/* put and get move one file of at most the per-file transfer ceiling; put
 * refuses a larger one before it connects. */
#define CLI_FILE_MAX_BYTES MSB_TRANSFER_MAX_FILE_BYTES
/* The first read of a LOCAL that is not a regular file (stdin, a pipe). */
#define CLI_READ_CHUNK_BYTES (64 * MSB_KIB)
/* get writes LOCAL through a temporary file in its directory: its mode
 * (less the umask) and the suffix mkstemp fills. */
#define CLI_GET_FILE_MODE 0644
#define CLI_TEMP_SUFFIX ".XXXXXX"
/* A command whose --timeout also bounds the daemon's side of the call waits
 * this much longer, so the daemon's TimeoutError arrives before the client
 * gives up. */
#define CLI_DAEMON_TIMEOUT_MARGIN_MS 5000
/* exec: the command's deadline when --timeout is 0 or not given, and the
 * most the daemon takes (PROTOCOL.md sandbox.exec timeout_seconds); the most
 * --env options (the daemon's env entry limit). */
#define CLI_EXEC_DEFAULT_TIMEOUT_SECONDS 600
#define CLI_EXEC_MAX_TIMEOUT_SECONDS 86400
#define CLI_EXEC_MAX_ENV 256
#define CLI_MS_PER_SECOND 1000

/* Command options: long (a few also short, cli_short_opts[]), each taken by
 * the commands whose row has its CLI_OPT_BIT. A flag's value is "" when
 * given. */
enum cli_opt {
	CLI_OPT_SCOPE = 0x100,  /* past any character getopt returns */
	CLI_OPT_THREAD,
	CLI_OPT_AGENT,
	CLI_OPT_CALL,
	CLI_OPT_KIND,
	CLI_OPT_IMAGE,
	CLI_OPT_SPEC,
	CLI_OPT_SCOPE_CALL,
	CLI_OPT_SANDBOX,
	CLI_OPT_OLDER_THAN,
	CLI_OPT_WORKDIR,     /* also -w */
	CLI_OPT_RECURSIVE,   /* also -r */
	CLI_OPT_MAX_BYTES,
	CLI_OPT_ENV,         /* repeatable: each goes to cli_opts.env[] */
	CLI_OPT_SH,
	CLI_OPT_FOLLOW,      /* also -f */
	CLI_OPT_ALL,         /* reap: every scope */
	CLI_OPT_DRY_RUN,     /* reap: list, remove nothing */
	CLI_OPT_MODE,        /* put: the file's permission bits, octal */
	CLI_OPT_INTERACTIVE, /* also -i */
	CLI_OPT_NO_STDIN,
	_CLI_OPT_MAX,
};
#define CLI_NOPTS (_CLI_OPT_MAX - CLI_OPT_SCOPE)
#define CLI_OPT_BIT(o) (1u << ((o) - CLI_OPT_SCOPE))
#define CLI_KEY_OPTS (CLI_OPT_BIT(CLI_OPT_SCOPE) | CLI_OPT_BIT(CLI_OPT_THREAD) | CLI_OPT_BIT(CLI_OPT_AGENT))

struct cli_opts {
	const char *socket;  /* NULL = msb_default_socket_path() */
	bool json;
	int timeout_ms;      /* -1 = the command's default */
	const char *arg[CLI_NOPTS];  /* command options by enum cli_opt - CLI_OPT_SCOPE; NULL = absent */
	char **operands;     /* the command's operands (borrowed from argv) */
	int noperands;
	const char *env[CLI_EXEC_MAX_ENV];  /* each --env NAME=VALUE (borrowed from argv) */
	int nenv;
};

struct cli_cmd {
	const char *name;
	const char *usage;    /* the synopsis after the name; NULL = none */
	const char *summary;  /* one line of the top-level help */
	const char *help;     /* the text of `maf-sandbox COMMAND --help` */
	int (*handler)(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv);
	unsigned opts;        /* CLI_OPT_BIT()s of the command options taken */
	unsigned required;    /* ... and of those that must be given */
	int min_operands;     /* operands after the options: at least ... */
	int max_operands;     /* ... and at most (0 and 0: none) */
	/* cmd_query: */
	int (*query)(struct msb_conn *conn, json_t **ret_result);
	void (*print)(const json_t *result);  /* human output */
	/* cmd_method: */
	const char *method;
	/* Sets *ret_params (new reference); returns CLI_CONTINUE or the exit code. */
	int (*params)(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params);
	/* Prints result (borrowed) as opts say; returns the exit code. */
	int (*report)(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *result);
	bool progress;        /* show sandbox.pull_progress on a terminal; no deadline by default */
	bool daemon_timeout;  /* --timeout is sent as timeout_seconds too (see CLI_DAEMON_TIMEOUT_MARGIN_MS) */
};

static const char options_help[] =
	"Options (before or after the command):\n"
	"  -s, --socket PATH      the daemon's socket (default: $MAF_SANDBOX_SOCKET; else\n"
	"                         $XDG_RUNTIME_DIR/maf-sandbox.sock if a non-root user\n"
	"                         runs a daemon there; else " MSB_DEFAULT_SOCKET ")\n"
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
	"  4  protocol or I/O error, or timeout\n"
	"  (exec exits with the command's own status instead: see 'maf-sandbox exec --help')\n";

/* Prints the top-level help (cmd NULL) or a command's help to stdout. */
static void print_help(const struct cli_cmd *cmd);

/* --- errors: plain text, or with --json one JSON object each ------------ */

/* With --json every error goes to stderr as one JSON object on one line,
 * {"code", "type", "message", "data"} (cli_error_json). main() sets it from
 * argv before parsing, so an error met before --json is parsed is JSON too. */
static bool cli_json_errors;
/* exec: a failure other than the command line's exits CLI_EXIT_EXEC_FAILED
 * (exec_failure), so that is the JSON error's code too. */
static bool cli_exec_errors;

/* The error types of the CLI's own errors (the daemon's errors keep the
 * daemon's code and type); their "code" is the exit status they cause. */
#define CLI_ERR_USAGE       "UsageError"        /* the command line: exit 2 */
#define CLI_ERR_INPUT       "InputError"        /* a local file the CLI reads: exit 2 */
#define CLI_ERR_CONNECTION  "ConnectionError"   /* cannot connect: exit 3 */
#define CLI_ERR_CLOSED      "ConnectionClosed"  /* the daemon closed the connection: exit 4 */
#define CLI_ERR_IO          "IOError"           /* a read or write on the socket failed: exit 4 */
#define CLI_ERR_PROTOCOL    "ProtocolError"     /* the daemon's reply is not what was asked for: exit 4 */
#define CLI_ERR_TIMEOUT     "ClientTimeout"     /* --timeout passed without a reply: exit 4 */
#define CLI_ERR_OUTPUT      "OutputError"       /* writing stdout or a LOCAL file failed: exit 4 */
#define CLI_ERR_INTERNAL    "InternalError"     /* a request or result could not be encoded: exit 4 */

/* Prints one error as one JSON object on one line to stderr:
 * {"code": code, "type": type, "message": message, "data": data or null}.
 * data is borrowed. The one printer of every JSON error (exec's partial
 * output rides in data). */
static void cli_error_json(json_int_t code, const char *type, const char *message, const json_t *data)
{
	json_auto_t *o = json_pack("{s:I, s:s?, s:s?, s:O?}", "code", code, "type", type,
				   "message", message, "data", data);
	_cleanup_free_ char *s = NULL;

	if (o && !json_object_get(o, "data"))
		json_object_set_new(o, "data", json_null());
	if (o && !json_object_get(o, "type"))
		json_object_set_new(o, "type", json_null());
	s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	if (s)
		fprintf(stderr, "%s\n", s);
	else
		fprintf(stderr, "{\"code\":%" JSON_INTEGER_FORMAT ",\"type\":\"%s\",\"message\":null,"
			"\"data\":null}\n", code, type ? type : "InternalError");
	fflush(stderr);
}

/* Says one error: "maf-sandbox: MESSAGE" (hint on a line of its own, if
 * any), or with --json cli_error_json(exit, type, MESSAGE, data). data is
 * stolen. Returns exit. */
static int cli_errorv(int exit, const char *type, json_t *data, const char *hint, const char *fmt,
		      va_list ap) __attribute__((format(printf, 5, 0)));

static int cli_errorv(int exit, const char *type, json_t *data, const char *hint, const char *fmt,
		      va_list ap)
{
	_cleanup_free_ char *msg = xvasprintf(fmt, ap);

	if (cli_json_errors)
		cli_error_json(cli_exec_errors && exit != CLI_EXIT_USAGE ? CLI_EXIT_EXEC_FAILED : exit, type, msg,
			       data);
	else
		fprintf(stderr, "maf-sandbox: %s\n%s", msg, hint ? hint : "");
	json_decref(data);
	return exit;
}

static int cli_error(int exit, const char *type, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int cli_error(int exit, const char *type, json_t *data, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = cli_errorv(exit, type, data, NULL, fmt, ap);
	va_end(ap);
	return r;
}

static int usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
{
	_cleanup_free_ char *hint = xasprintf("Try 'maf-sandbox %s%s--help'.\n", cmd ? cmd->name : "",
					      cmd ? " " : "");
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = cli_errorv(CLI_EXIT_USAGE, CLI_ERR_USAGE, cmd ? json_pack("{s:s}", "command", cmd->name) : NULL,
		       hint, fmt, ap);
	va_end(ap);
	return r;
}

/* Whether argv asks for --json (-j), up to "--": errors met before the
 * option itself is parsed are JSON too. */
static bool argv_wants_json(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j"))
			return true;
	return false;
}

/* SECONDS (decimal, fractions allowed), or a duration with a unit (units.h:
 * 500ms, 1.5s, 2m), to whole ms; 0 stays 0 (no timeout). */
static int parse_timeout(const char *s, int *ret_ms)
{
	uint64_t ms;
	int r = msb_duration_parse(s, MSB_TIME_S, MSB_TIME_MS, &ms);

	if (r < 0)
		return r;
	if (ms > (uint64_t)CLI_TIMEOUT_MAX_SECONDS * 1000)
		return -ERANGE;
	*ret_ms = (int)ms;
	return 0;
}

/* "90", "90s", "15m", "1.5h", "7d" (units.h): a whole number of seconds
 * from 1 s to CLI_DURATION_MAX_DAYS. Returns 0, -EINVAL (not a duration, or
 * zero), -EDOM (not whole seconds) or -ERANGE (too long). */
static int parse_duration(const char *s, long long *ret_secs)
{
	const uint64_t max = (uint64_t)CLI_DURATION_MAX_DAYS * CLI_SECONDS_PER_DAY;
	uint64_t secs;
	int r = msb_duration_parse(s, MSB_TIME_S, MSB_TIME_S, &secs);

	if (r < 0)
		return r;
	if (secs == 0)
		return -EINVAL;
	if (secs > max)
		return -ERANGE;
	*ret_secs = (long long)secs;
	return 0;
}

static const struct option cli_options[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, 'j' },
	{ "timeout", required_argument, NULL, 't' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "scope", required_argument, NULL, CLI_OPT_SCOPE },
	{ "thread", required_argument, NULL, CLI_OPT_THREAD },
	{ "agent", required_argument, NULL, CLI_OPT_AGENT },
	{ "call", required_argument, NULL, CLI_OPT_CALL },
	{ "kind", required_argument, NULL, CLI_OPT_KIND },
	{ "image", required_argument, NULL, CLI_OPT_IMAGE },
	{ "spec", required_argument, NULL, CLI_OPT_SPEC },
	{ "scope-call", no_argument, NULL, CLI_OPT_SCOPE_CALL },
	{ "sandbox", required_argument, NULL, CLI_OPT_SANDBOX },
	{ "older-than", required_argument, NULL, CLI_OPT_OLDER_THAN },
	{ "working-directory", required_argument, NULL, CLI_OPT_WORKDIR },
	{ "cwd", required_argument, NULL, CLI_OPT_WORKDIR },   /* the same, docker-style */
	{ "recursive", no_argument, NULL, CLI_OPT_RECURSIVE },
	{ "max-bytes", required_argument, NULL, CLI_OPT_MAX_BYTES },
	{ "env", required_argument, NULL, CLI_OPT_ENV },
	{ "sh", required_argument, NULL, CLI_OPT_SH },
	{ "follow", no_argument, NULL, CLI_OPT_FOLLOW },
	{ "all", no_argument, NULL, CLI_OPT_ALL },
	{ "dry-run", no_argument, NULL, CLI_OPT_DRY_RUN },
	{ "mode", required_argument, NULL, CLI_OPT_MODE },
	{ "interactive", no_argument, NULL, CLI_OPT_INTERACTIVE },
	{ "no-stdin", no_argument, NULL, CLI_OPT_NO_STDIN },
	{ 0 },
};

/* Command options that have a short form too. */
static const struct {
	int c;
	enum cli_opt opt;
} cli_short_opts[] = {
	{ 'w', CLI_OPT_WORKDIR },
	{ 'r', CLI_OPT_RECURSIVE },
	{ 'f', CLI_OPT_FOLLOW },
	{ 'i', CLI_OPT_INTERACTIVE },
};

/* The command option a short option letter stands for, or c itself. */
static int short_cmd_opt(int c)
{
	for (size_t i = 0; i < ELEMENTSOF(cli_short_opts); i++)
		if (cli_short_opts[i].c == c)
			return cli_short_opts[i].opt;
	return c;
}

/* The long name of option val. */
static const char *opt_name(int val)
{
	for (const struct option *o = cli_options; o->name; o++)
		if (o->val == val)
			return o->name;
	return "?";
}

/* The value of command option o, or NULL when it was not given. */
static const char *opt_arg(const struct cli_opts *opts, enum cli_opt o)
{
	return opts->arg[o - CLI_OPT_SCOPE];
}

static bool is_utf8(const char *s)
{
	json_t *v = json_string(s);

	json_decref(v);
	return v != NULL;
}

/* Takes command option c with its value (optarg: NULL for a flag). */
static int set_cmd_option(int c, const char *value, struct cli_opts *opts, const struct cli_cmd *cmd)
{
	if (!cmd)
		return usage_error(NULL, "option '--%s' goes after the command", opt_name(c));
	if (!(cmd->opts & CLI_OPT_BIT(c)))
		return usage_error(cmd, "'%s' takes no option '--%s'", cmd->name, opt_name(c));
	if (value && !is_utf8(value))
		return usage_error(cmd, "the value of '--%s' is not valid UTF-8", opt_name(c));
	if (c == CLI_OPT_ENV) {
		if (opts->nenv == CLI_EXEC_MAX_ENV)
			return usage_error(cmd, "at most %d '--env' options", CLI_EXEC_MAX_ENV);
		opts->env[opts->nenv++] = value;
	}
	opts->arg[c - CLI_OPT_SCOPE] = value ? value : "";
	return CLI_CONTINUE;
}

/* Parses options up to the first operand (argv[0] is the program or the
 * command). Returns CLI_CONTINUE, or the exit code when done (help, version,
 * usage error). Leaves optind at the first operand. */
static int parse_options(int argc, char **argv, struct cli_opts *opts, const struct cli_cmd *cmd)
{
	int c, r;

	optind = 0;  /* glibc: start over, from argv[1] */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:s:jt:hVw:rfi", cli_options, NULL)) != -1) {
		switch (c) {
		case 's':
			opts->socket = optarg;
			break;
		case 'j':
			opts->json = true;
			cli_json_errors = true;
			break;
		case 't':
			if (parse_timeout(optarg, &opts->timeout_ms) < 0)
				return usage_error(cmd, "invalid --timeout '%s': want seconds from 0 to %d, "
						   "in whole milliseconds (%s)", optarg, CLI_TIMEOUT_MAX_SECONDS,
						   MSB_DURATION_FORMS_S);
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
			c = short_cmd_opt(c);
			if (c >= CLI_OPT_SCOPE && c < _CLI_OPT_MAX) {
				r = set_cmd_option(c, optarg, opts, cmd);
				if (r != CLI_CONTINUE)
					return r;
				break;
			}
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

	if (!path)
		path = dflt = msb_default_socket_path();
	r = msb_connect(path, ret_conn);
	if (r == MSB_E_INVAL)
		return usage_error(NULL, "invalid socket path '%s' (empty or too long)", path);
	if (r < 0) {
		int err = errno;

		return cli_error(CLI_EXIT_CONNECT, CLI_ERR_CONNECTION,
				 json_pack("{s:s, s:s?}", "socket", path, "errno", strerrorname_np(err)),
				 "cannot connect to %s: %s%s", path, strerror(err), connect_hint(err));
	}
	if (opts->timeout_ms >= 0)
		msb_set_timeout(*ret_conn, opts->timeout_ms);
	return 0;
}

/* The CLI's error type for a failed call's MSB_E_* (not MSB_E_REMOTE). */
static const char *local_error_type(int r)
{
	switch (r) {
	case MSB_E_INVAL: return CLI_ERR_USAGE;
	case MSB_E_CONNECT: return CLI_ERR_CONNECTION;
	case MSB_E_IO: return CLI_ERR_IO;
	case MSB_E_PROTO: return CLI_ERR_PROTOCOL;
	case MSB_E_TIMEOUT: return CLI_ERR_TIMEOUT;
	case MSB_E_CLOSED: return CLI_ERR_CLOSED;
	default: return CLI_ERR_INTERNAL;
	}
}

/* Says why a call failed, as "maf-sandbox: <type or code>: <message>" for the
 * daemon's errors (with --json: the daemon's code, type, message and data).
 * Returns the exit code. */
static int report_failure(const struct cli_cmd *cmd, const struct msb_conn *conn, int r)
{
	int err = errno;
	int exit = r == MSB_E_INVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAILURE;

	if (r == MSB_E_REMOTE) {
		const char *type = msb_last_error_type(conn);
		const char *msg = msb_last_error_message(conn);

		if (cli_json_errors)
			cli_error_json(msb_last_error_code(conn), type, msg ? msg : "",
				       msb_last_error_data(conn));
		else if (type)
			fprintf(stderr, "maf-sandbox: %s: %s\n", type, msg ? msg : "");
		else
			fprintf(stderr, "maf-sandbox: %d: %s\n", msb_last_error_code(conn),
				msg ? msg : "");
		return CLI_EXIT_REMOTE;
	}
	if (r == MSB_E_IO)
		return cli_error(exit, local_error_type(r), json_pack("{s:s?}", "errno", strerrorname_np(err)),
				 "%s: %s: %s", cmd->name, msb_strerror(r), strerror(err));
	return cli_error(exit, local_error_type(r), NULL, "%s: %s", cmd->name, msb_strerror(r));
}

static int print_json(const json_t *result)
{
	_cleanup_free_ char *s = json_dumps(result, JSON_INDENT(2) | JSON_ENCODE_ANY);

	if (!s) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_INTERNAL, NULL, "cannot encode the result as JSON");
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
	l = (struct line){ "exec: ", ", ", 0 };
	if (get_int(json_object_get(r, "exec"), "max_output_bytes", &n))
		line_add_bytes(&l, " of output per command", n);
	line_end(&l);
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

/* "file plane: local", or "file plane: archive (WHY)" when the daemon says why. */
static void print_file_plane(const json_t *r)
{
	const char *plane = get_str(r, "file_plane"), *why = get_str(r, "file_plane_reason");

	if (!plane)
		return;
	printf("file plane: %s", plane);
	if (why && *why)
		printf(" (%s)", why);
	putchar('\n');
}

static void put_clean(FILE *f, const char *s, size_t width);

/* "egress: closed, allowlist (proxy PATH)", or "egress: closed; allowlist
 * off: WHY" from status's "egress". */
static void print_status_egress(const json_t *e)
{
	const char *bin = get_str(e, "proxy_binary"), *why = get_str(e, "allowlist_off_reason");
	struct line l = { "egress: ", ", ", 0 };

	if (!json_is_object(e))
		return;
	line_add_list(&l, json_object_get(e, "modes"));
	if (l.n == 0)
		line_add(&l, "none");
	if (why) {
		fputs("; allowlist off: ", stdout);
		put_clean(stdout, why, 0);
	} else if (bin) {
		fputs(" (proxy ", stdout);
		put_clean(stdout, bin, 0);
		putchar(')');
	}
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
	print_file_plane(r);
	print_status_egress(json_object_get(r, "egress"));
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

/* --- text from the daemon, made safe for a terminal ---------------------- */

/* The byte length of the character at s (not at its end), and whether it
 * prints: control characters (C0, DEL, C1) and bytes that are not UTF-8 do
 * not, and each of those counts one byte. */
static size_t utf8_char(const char *s, bool *ret_printable)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = u[0] < 0x80 ? 1 : u[0] >= 0xc2 && u[0] <= 0xdf ? 2 :
		   u[0] >= 0xe0 && u[0] <= 0xef ? 3 : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : 0;

	for (size_t i = 1; i < n; i++)
		if ((u[i] & 0xc0) != 0x80)
			n = 0;
	if (n == 0) {
		*ret_printable = false;
		return 1;
	}
	*ret_printable = n == 1 ? u[0] >= 0x20 && u[0] != 0x7f : !(u[0] == 0xc2 && u[1] < 0xa0);
	return n;
}

/* A line built within a byte and a column budget; full once a character did
 * not fit, so a later part never lands after a cut one. */
struct text {
	char *buf;
	size_t size;      /* bytes of buf, NUL included */
	size_t len;
	size_t cols;
	size_t max_cols;
	bool full;
};

/* Appends s one character at a time, each that does not print as '?'. */
static void text_add(struct text *t, const char *s)
{
	while (*s && !t->full) {
		bool printable;
		size_t n = utf8_char(s, &printable), out = printable ? n : 1;

		if (t->cols + 1 > t->max_cols || t->len + out + 1 > t->size) {
			t->full = true;
			break;
		}
		if (printable)
			memcpy(t->buf + t->len, s, n);
		else
			t->buf[t->len] = '?';
		t->len += out;
		t->cols++;
		t->buf[t->len] = '\0';
		s += n;
	}
}

/* Columns s takes once cleaned. */
static size_t text_width(const char *s)
{
	size_t cols = 0;
	bool printable;

	for (; *s; cols++)
		s += utf8_char(s, &printable);
	return cols;
}

/* Prints s cleaned (as text_add) to f, padded with spaces to width columns. */
static void put_clean(FILE *f, const char *s, size_t width)
{
	size_t cols = 0;
	bool printable;

	for (; *s; cols++) {
		size_t n = utf8_char(s, &printable);

		if (printable)
			fwrite(s, 1, n, f);
		else
			fputc('?', f);
		s += n;
	}
	for (; cols < width; cols++)
		fputc(' ', f);
}

/* "512 B", "1.5 KiB", "3.2 MiB", "1.1 GiB". */
static void format_bytes(json_int_t n, char *buf, size_t size)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	size_t i;

	if (n < 1024) {
		snprintf(buf, size, "%" JSON_INTEGER_FORMAT " B", n);
		return;
	}
	for (i = 0, v /= 1024; i + 1 < ELEMENTSOF(units) && v >= 1024; i++)
		v /= 1024;
	snprintf(buf, size, "%.1f %s", v, units[i]);
}

/* --- pull progress on a terminal ----------------------------------------- */

/* One sandbox.pull_progress as one line of at most max_cols columns:
 * "pulling IMAGE: ID: STATUS PROGRESS", where PROGRESS is the engine's bar,
 * or CURRENT/TOTAL when it sent none; each part only when present. */
static void progress_format(const json_t *params, size_t max_cols, char *buf, size_t size)
{
	struct text t = { buf, size, 0, 0, max_cols, false };
	const char *image = get_str(params, "image"), *id = get_str(params, "id");
	const char *status = get_str(params, "status"), *bar = get_str(params, "progress");
	json_int_t cur, total;
	char a[32], b[32];

	buf[0] = '\0';
	text_add(&t, "pulling ");
	text_add(&t, image ? image : "image");
	if (id && *id) {
		text_add(&t, ": ");
		text_add(&t, id);
	}
	if (status && *status) {
		text_add(&t, ": ");
		text_add(&t, status);
	}
	if (bar && *bar) {
		text_add(&t, " ");
		text_add(&t, bar);
	} else if (get_int(params, "current", &cur) && cur >= 0) {
		format_bytes(cur, a, sizeof(a));
		text_add(&t, " ");
		text_add(&t, a);
		if (get_int(params, "total", &total) && total > 0) {
			format_bytes(total, b, sizeof(b));
			text_add(&t, "/");
			text_add(&t, b);
		}
	}
}

struct progress {
	bool tty;    /* stderr is a terminal: show progress */
	bool shown;  /* a progress line is on it */
};

static size_t terminal_columns(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_col == 0)
		return CLI_PROGRESS_DEFAULT_COLUMNS;
	return ws.ws_col;
}

/* msb_notify_fn: redraws the progress line (stderr is a terminal). */
static void progress_cb(const char *method, json_t *params, void *arg)
{
	struct progress *p = arg;
	char line[CLI_PROGRESS_MAX_BYTES];

	if (strcmp(method, MSB_NOTIFY_PULL_PROGRESS) || !json_is_object(params))
		return;
	progress_format(params, terminal_columns() - 1, line, sizeof(line));
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	p->shown = true;
}

/* Clears the progress line, if any, so what follows starts a clean line. */
static void progress_clear(struct progress *p)
{
	if (!p->shown)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	p->shown = false;
}

/* --- sandbox.list as a table --------------------------------------------- */

struct ls_col {
	const char *title;
	const char *member;
	bool in_key;  /* a member of the entry's "key" */
	int cut;      /* show at most this many bytes (0: all) */
};

/* The short id ls shows: as many hex digits as the daemon takes for a
 * prefix (PROTOCOL.md "Naming a sandbox"). */
#define CLI_LS_ID_CHARS 12
/* The LABELS cell, at most (the rest is "..."). */
#define CLI_LS_LABELS_MAX 256

static const struct ls_col ls_cols[] = {
	{ "NAME", "name", false, 0 },
	{ "ID", "sandbox", false, CLI_LS_ID_CHARS },
	{ "STATE", "state", false, 0 },
	{ "KIND", "kind", false, 0 },
	{ "SCOPE", "scope", true, 0 },
	{ "THREAD", "thread_id", true, 0 },
	{ "AGENT", "agent_dir", true, 0 },
	{ "CALL", "call_id", true, 0 },
	{ "CREATED", "created", false, 0 },
	{ "LABELS", "labels", false, 0 },
};
#define LS_NCOLS ELEMENTSOF(ls_cols)

/* "K=V,K=V" of an object of strings (its keys in order), into buf. */
static const char *ls_labels(const json_t *labels, char *buf, size_t size)
{
	const char *k;
	json_t *v;
	size_t n = 0;

	buf[0] = '\0';
	json_object_foreach((json_t *)labels, k, v) {
		int w = snprintf(buf + n, size - n, "%s%s=%s", n ? "," : "", k,
				 json_is_string(v) ? json_string_value(v) : "?");

		if (w < 0 || (size_t)w >= size - n) {
			snprintf(buf + size - 4, 4, "...");
			break;
		}
		n += (size_t)w;
	}
	return buf;
}

/* A cell: the string, or "-" when absent, empty or not a string. */
static const char *ls_cell(const json_t *entry, const struct ls_col *c, char *buf, size_t size)
{
	const json_t *from = c->in_key ? json_object_get(entry, "key") : entry;
	const char *s;

	if (json_is_object(json_object_get(from, c->member)))
		s = ls_labels(json_object_get(from, c->member), buf, size);
	else
		s = get_str(from, c->member);
	if (s && *s && c->cut > 0 && strlen(s) > (size_t)c->cut) {
		snprintf(buf, size, "%.*s", c->cut, s);
		s = buf;
	}
	return s && *s ? s : "-";
}

static void ls_row(const json_t *entry, const size_t width[LS_NCOLS])
{
	char buf[CLI_LS_LABELS_MAX];

	for (size_t c = 0; c < LS_NCOLS; c++) {
		const char *s = entry ? ls_cell(entry, &ls_cols[c], buf, sizeof(buf)) : ls_cols[c].title;

		put_clean(stdout, s, c + 1 < LS_NCOLS ? width[c] + CLI_TABLE_GAP : 0);
	}
	putchar('\n');
}

/* One line per sandbox under a header line, columns as wide as their
 * widest cell. Entries that are not objects are skipped. */
static void print_ls(const json_t *list)
{
	size_t width[LS_NCOLS], i;
	json_t *e;

	for (size_t c = 0; c < LS_NCOLS; c++)
		width[c] = text_width(ls_cols[c].title);
	json_array_foreach(list, i, e) {
		if (!json_is_object(e))
			continue;
		for (size_t c = 0; c < LS_NCOLS; c++) {
			char buf[CLI_LS_LABELS_MAX];
			size_t w = text_width(ls_cell(e, &ls_cols[c], buf, sizeof(buf)));

			if (w > width[c])
				width[c] = w;
		}
	}
	ls_row(NULL, width);
	json_array_foreach(list, i, e)
		if (json_is_object(e))
			ls_row(e, width);
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

/* Parses a command's options, then checks its operands and every required
 * option. Returns CLI_CONTINUE or the exit code. */
static int parse_cmd_options(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv)
{
	int r = parse_options(argc, argv, opts, cmd);

	if (r != CLI_CONTINUE)
		return r;
	opts->operands = argv + optind;
	opts->noperands = argc - optind;
	if (cmd->max_operands == 0 && opts->noperands > 0)
		return usage_error(cmd, "'%s' takes no arguments", cmd->name);
	if (opts->noperands < cmd->min_operands)
		return usage_error(cmd, "'%s' is missing arguments (usage: maf-sandbox %s)", cmd->name,
				   cmd->usage);
	if (opts->noperands > cmd->max_operands)
		return usage_error(cmd, "'%s' takes at most %d arguments (usage: maf-sandbox %s)",
				   cmd->name, cmd->max_operands, cmd->usage);
	for (int o = CLI_OPT_SCOPE; o < _CLI_OPT_MAX; o++)
		if ((cmd->required & CLI_OPT_BIT(o)) && !opt_arg(opts, (enum cli_opt)o))
			return usage_error(cmd, "'%s' needs --%s", cmd->name, opt_name(o));
	return CLI_CONTINUE;
}

/* Calls cmd->method with params (stolen) and reports its result. */
static int call_and_report(const struct cli_cmd *cmd, struct cli_opts *opts, json_t *params)
{
	struct progress progress = { .tty = cmd->progress && isatty(STDERR_FILENO) };
	struct msb_conn *conn = NULL;
	json_auto_t *result = NULL;
	int r;

	if (cmd->progress && opts->timeout_ms < 0)
		opts->timeout_ms = 0;  /* the daemon bounds each step, the pull included */
	if (cmd->daemon_timeout && opts->timeout_ms > 0)
		opts->timeout_ms += CLI_DAEMON_TIMEOUT_MARGIN_MS;
	r = cli_connect(opts, &conn);
	if (r != 0) {
		json_decref(params);
		return r;
	}
	if (progress.tty)
		msb_set_notify(conn, progress_cb, &progress);
	r = msb_call(conn, cmd->method, params, &result);
	progress_clear(&progress);
	if (r < 0)
		r = report_failure(cmd, conn, r);
	else
		r = cmd->report(cmd, opts, result);
	msb_conn_free(conn);
	return r;
}

/* A command that builds params from its options and calls one method. */
static int cmd_method(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv)
{
	json_t *params = NULL;
	int r;

	r = parse_cmd_options(cmd, opts, argc, argv);
	if (r != CLI_CONTINUE)
		return r;
	r = cmd->params(cmd, opts, &params);
	if (r != CLI_CONTINUE)
		return r;
	return call_and_report(cmd, opts, params);
}

/* Bad input other than the command line itself (a file): exit status 2. */
static int input_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int input_error(const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = cli_errorv(CLI_EXIT_USAGE, CLI_ERR_INPUT, NULL, NULL, fmt, ap);
	va_end(ap);
	return r;
}

/* --- params -------------------------------------------------------------- */

/* {scope, thread_id, agent_dir[, call_id]} from the options. New reference. */
static json_t *key_new(const struct cli_opts *opts)
{
	return json_pack("{s:s, s:s, s:s, s:s*}", "scope", opt_arg(opts, CLI_OPT_SCOPE),
			 "thread_id", opt_arg(opts, CLI_OPT_THREAD),
			 "agent_dir", opt_arg(opts, CLI_OPT_AGENT), "call_id", opt_arg(opts, CLI_OPT_CALL));
}

struct spec_reader {
	FILE *f;
	size_t total;
};

/* json_load_callback_t: reads at most CLI_SPEC_MAX_BYTES + 1 bytes in all. */
static size_t spec_read_cb(void *buf, size_t len, void *arg)
{
	struct spec_reader *rd = arg;
	size_t left = CLI_SPEC_MAX_BYTES + 1 - rd->total, n;

	if (left == 0)
		return (size_t)-1;
	n = fread(buf, 1, len < left ? len : left, rd->f);
	if (n == 0 && ferror(rd->f))
		return (size_t)-1;
	rd->total += n;
	return n;
}

/* Reads the JSON object in path ("-" = stdin) into *ret_spec (new
 * reference). Returns CLI_CONTINUE or the exit code. */
static int spec_load(const char *path, json_t **ret_spec)
{
	_cleanup_fclose_ FILE *f = NULL;
	struct spec_reader rd = { stdin, 0 };
	json_error_t jerr;
	json_t *spec;

	if (strcmp(path, "-")) {
		rd.f = f = fopen(path, "re");
		if (!f)
			return input_error("cannot read the spec %s: %s", path, strerror(errno));
	}
	spec = json_load_callback(spec_read_cb, &rd, JSON_REJECT_DUPLICATES, &jerr);
	if (rd.total > CLI_SPEC_MAX_BYTES) {
		json_decref(spec);
		return input_error("the spec %s is larger than %zu bytes", path, CLI_SPEC_MAX_BYTES);
	}
	if (!spec && ferror(rd.f))
		return input_error("cannot read the spec %s: %s", path, strerror(errno));
	if (!spec)
		return input_error("the spec %s is not valid JSON: line %d: %s", path, jerr.line,
				   jerr.text);
	if (!json_is_object(spec)) {
		json_decref(spec);
		return input_error("the spec %s is not a JSON object", path);
	}
	*ret_spec = spec;
	return CLI_CONTINUE;
}

/* sandbox.acquire: {key, spec}, the spec from --spec with --kind, --image
 * and --scope-call laid over it. */
static int acquire_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	const char *path = opt_arg(opts, CLI_OPT_SPEC), *image = opt_arg(opts, CLI_OPT_IMAGE);
	json_t *spec = NULL;
	int r;

	if (!image && !path)
		return usage_error(cmd, "'%s' needs --image or --spec", cmd->name);
	if (path) {
		r = spec_load(path, &spec);
		if (r != CLI_CONTINUE)
			return r;
	} else {
		spec = json_object();
	}
	json_object_set_new(spec, "kind", json_string(opt_arg(opts, CLI_OPT_KIND)));
	if (image) {
		json_object_set_new(spec, "image", json_string(image));
		json_object_del(spec, "image_id");
	}
	if (opt_arg(opts, CLI_OPT_SCOPE_CALL))
		json_object_set_new(spec, "isolation_scope", json_string("call"));
	*ret_params = json_pack("{s:o, s:o}", "key", key_new(opts), "spec", spec);
	return CLI_CONTINUE;
}

static int dispose_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	*ret_params = json_pack("{s:o, s:s*, s:s*}", "key", key_new(opts),
				"kind", opt_arg(opts, CLI_OPT_KIND), "sandbox", opt_arg(opts, CLI_OPT_SANDBOX));
	return CLI_CONTINUE;
}

/* sandbox.dispose_scope and sandbox.list: {scope, thread_id}, each if given. */
static int scope_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	*ret_params = json_pack("{s:s*, s:s*}", "scope", opt_arg(opts, CLI_OPT_SCOPE),
				"thread_id", opt_arg(opts, CLI_OPT_THREAD));
	return CLI_CONTINUE;
}

static int reap_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	const char *s = opt_arg(opts, CLI_OPT_OLDER_THAN);
	long long secs;

	bool all = opt_arg(opts, CLI_OPT_ALL) != NULL, dry = opt_arg(opts, CLI_OPT_DRY_RUN) != NULL;

	if (parse_duration(s, &secs) < 0)
		return usage_error(cmd, "invalid --older-than '%s': want a duration like 90s, 15m, "
				   "1.5h or 7d (plain: seconds), whole seconds from 1s to %dd", s,
				   CLI_DURATION_MAX_DAYS);
	if (all && opt_arg(opts, CLI_OPT_SCOPE))
		return usage_error(cmd, "'%s' takes --scope S or --all, not both", cmd->name);
	if (!all && !dry && !opt_arg(opts, CLI_OPT_SCOPE))
		return usage_error(cmd, "'%s' without --scope disposes of every sandbox on this host older "
				   "than %s, whoever owns it: give --all to mean that, or --scope S for one "
				   "scope (--dry-run lists what would go)", cmd->name, s);
	*ret_params = json_pack("{s:I, s:s*}", "older_than_seconds", (json_int_t)secs,
				"scope", opt_arg(opts, CLI_OPT_SCOPE));
	if (*ret_params && dry)
		json_object_set_new(*ret_params, "dry_run", json_true());
	return CLI_CONTINUE;
}

/* --- reports ------------------------------------------------------------- */

/* "maf-sandbox: LABEL: CODE: DETAIL" for a {code, detail} failure. */
static void print_disposal_failure(const char *label, const json_t *f)
{
	const char *code = get_str(f, "code"), *detail = get_str(f, "detail");

	if (cli_json_errors)
		cli_error_json(CLI_EXIT_REMOTE, strcmp(label, "not reaped") ? "DisposalIncomplete" : "NotReaped",
			       label, f);
	else
		fprintf(stderr, "maf-sandbox: %s: %s: %s\n", label, code ? code : "unknown",
			detail ? detail : "");
}

static int report_acquire(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	const char *id = get_str(r, "sandbox");

	if (opts->json)
		return print_json(r);
	if (!id) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_PROTOCOL, NULL,
				 "%s: the daemon's result names no sandbox", cmd->name);
	}
	puts(id);
	return CLI_EXIT_OK;
}

static int report_ls(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	if (opts->json || !json_is_array(r))
		return print_json(r);
	print_ls(r);
	return CLI_EXIT_OK;
}

/* null: done; {code, detail}: not done, exit status 1. */
static int report_dispose(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	int ret = opts->json ? print_json(r) : CLI_EXIT_OK;

	if (json_is_null(r))
		return ret;
	print_disposal_failure("disposal incomplete", r);
	return CLI_EXIT_REMOTE;
}

static int report_dispose_scope(const struct cli_cmd *cmd, const struct cli_opts *opts,
				const json_t *r)
{
	const json_t *undisposed = json_object_get(r, "undisposed");
	int ret = CLI_EXIT_OK;
	json_int_t n;

	if (opts->json)
		ret = print_json(r);
	else if (get_int(r, "disposed", &n))
		printf("disposed %" JSON_INTEGER_FORMAT " sandbox(es)\n", n);
	if (undisposed && !json_is_null(undisposed)) {
		print_disposal_failure("disposal incomplete", undisposed);
		ret = CLI_EXIT_REMOTE;
	}
	return ret;
}

/* A dry run's result: "would remove: ..." and one line per sandbox,
 * "NAME SCOPE CREATED ID", cleaned for a terminal. */
static void print_reap_dry_run(const json_t *r)
{
	static const char *const keys[][2] = {
		{ "would_remove_proxies", "proxy container(s)" }, { "would_remove_networks", "network(s)" },
	};
	const json_t *would = json_object_get(r, "would_dispose");
	struct line l = { "would remove: ", ", ", 0 };
	json_int_t n, count = (json_int_t)json_array_size(would);
	size_t i;
	json_t *w;

	/* The daemon lists the first ones and counts them all. */
	(void)get_int(r, "would_dispose_count", &count);
	line_add(&l, "%" JSON_INTEGER_FORMAT " sandbox(es)", count);
	for (i = 0; i < ELEMENTSOF(keys); i++)
		if (get_int(r, keys[i][0], &n))
			line_add(&l, "%" JSON_INTEGER_FORMAT " %s", n, keys[i][1]);
	line_end(&l);
	json_array_foreach(would, i, w) {
		const char *cols[] = { get_str(w, "name"), get_str(w, "scope"), get_str(w, "created"),
				       get_str(w, "sandbox") };

		for (size_t c = 0; c < ELEMENTSOF(cols); c++) {
			fputs(c ? " " : "  ", stdout);
			put_clean(stdout, cols[c] ? cols[c] : "-", 0);
		}
		putchar('\n');
	}
	if (count > (json_int_t)json_array_size(would))
		printf("  ... and %" JSON_INTEGER_FORMAT " more, not listed\n",
		       count - (json_int_t)json_array_size(would));
}

static int report_reap(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	static const char *const keys[][2] = {
		{ "disposed", "sandbox(es)" }, { "proxies_removed", "proxy container(s)" },
		{ "networks_removed", "network(s)" },
	};
	const json_t *failures = json_object_get(r, "failures");
	int ret = CLI_EXIT_OK;
	size_t i;
	json_t *f;

	if (opts->json)
		ret = print_json(r);
	else if (json_is_true(json_object_get(r, "dry_run")))
		print_reap_dry_run(r);
	else
		print_counters("removed: ", r, keys, ELEMENTSOF(keys));
	json_array_foreach(failures, i, f) {
		print_disposal_failure("not reaped", f);
		ret = CLI_EXIT_REMOTE;
	}
	return ret;
}

/* --- the file plane ------------------------------------------------------ */

/* {sandbox, KEY: GUEST, working_directory?} from the first operand, guest
 * (borrowed: an operand) and -w. Returns CLI_CONTINUE with *ret_params (new
 * reference), or the exit code. */
static int file_params_new(const struct cli_cmd *cmd, const struct cli_opts *opts, const char *key,
			   const char *guest, json_t **ret_params)
{
	const char *sandbox = opts->operands[0];
	json_t *params;

	if (!is_utf8(sandbox))
		return usage_error(cmd, "the SANDBOX '%s' is not valid UTF-8", sandbox);
	if (!is_utf8(guest))
		return usage_error(cmd, "the guest path is not valid UTF-8");
	params = json_pack("{s:s, s:s, s:s*}", "sandbox", sandbox, key, guest, "working_directory",
			   opt_arg(opts, CLI_OPT_WORKDIR));
	if (!params) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_INTERNAL, NULL, "%s: cannot build the request",
				 cmd->name);
	}
	*ret_params = params;
	return CLI_CONTINUE;
}

/* size: as fstat says, or -1 when not known (a stream, a file that grew). */
static int too_large(const char *name, intmax_t size)
{
	if (size >= 0)
		return input_error("%s is %jd bytes, over the per-file ceiling of %zu bytes (%zu MiB); "
				   "nothing was sent", name, size, CLI_FILE_MAX_BYTES,
				   CLI_FILE_MAX_BYTES / MSB_MIB);
	return input_error("%s is over the per-file ceiling of %zu bytes (%zu MiB); nothing was sent",
			   name, CLI_FILE_MAX_BYTES, CLI_FILE_MAX_BYTES / MSB_MIB);
}

/* Reads all of fd into buf (cap bytes at *ret_buf, grown as needed), at most
 * CLI_FILE_MAX_BYTES + 1 bytes. Returns the count, or -errno. */
static ssize_t read_bounded(int fd, uint8_t **buf, size_t cap)
{
	size_t len = 0;

	for (;;) {
		ssize_t n;

		if (len == cap) {
			if (cap > CLI_FILE_MAX_BYTES)
				return (ssize_t)len;      /* one byte over: enough to refuse */
			cap = cap * 2 < CLI_FILE_MAX_BYTES + 1 ? cap * 2 : CLI_FILE_MAX_BYTES + 1;
			*buf = xrealloc(*buf, cap);
		}
		n = read(fd, *buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return (ssize_t)len;
		len += (size_t)n;
	}
}

/* Reads LOCAL ("-" = stdin) whole into *ret_data (malloc'd) and *ret_len.
 * One over CLI_FILE_MAX_BYTES is refused: a regular file by its size, before
 * reading it. Returns CLI_CONTINUE or the exit code. */
static int local_read(const char *path, uint8_t **ret_data, size_t *ret_len)
{
	const char *name = strcmp(path, "-") ? path : "the standard input";
	_cleanup_close_ int fd = -1;
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat st;
	ssize_t n;
	size_t cap;
	int in = STDIN_FILENO;

	if (strcmp(path, "-")) {
		in = fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			return input_error("cannot read %s: %s", name, strerror(errno));
	}
	if (fstat(in, &st) < 0)
		return input_error("cannot read %s: %s", name, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return input_error("cannot read %s: %s", name, strerror(EISDIR));
	if (S_ISREG(st.st_mode) && st.st_size > (off_t)CLI_FILE_MAX_BYTES)
		return too_large(name, (intmax_t)st.st_size);
	cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : CLI_READ_CHUNK_BYTES;
	buf = xmalloc(cap);
	n = read_bounded(in, &buf, cap);
	if (n < 0)
		return input_error("cannot read %s: %s", name, strerror((int)-n));
	if ((size_t)n > CLI_FILE_MAX_BYTES)
		return too_large(name, -1);
	*ret_data = TAKE_PTR(buf);
	*ret_len = (size_t)n;
	return CLI_CONTINUE;
}

/* put --mode: octal permission bits, 0 to CLI_PUT_MODE_MAX ("755", "0755",
 * "0o755"). Setuid, setgid and sticky are refused (the daemon would). */
#define CLI_PUT_MODE_MAX 0777
static int parse_mode(const char *s, json_int_t *ret)
{
	json_int_t n = 0;
	const char *p = s;

	if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
		p += 2;
	if (!*p || strlen(p) > 4)
		return -EINVAL;
	for (; *p; p++) {
		if (*p < '0' || *p > '7')
			return -EINVAL;
		n = n * 8 + (*p - '0');
	}
	if (n > CLI_PUT_MODE_MAX)
		return -ERANGE;
	*ret = n;
	return 0;
}

/* files.write {sandbox, path: GUEST, working_directory?, content_b64, mode?}
 * with the content of LOCAL. */
static int put_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	_cleanup_free_ uint8_t *data = NULL;
	_cleanup_free_ char *b64 = NULL;
	json_t *params = NULL, *content;
	const char *mode = opt_arg(opts, CLI_OPT_MODE);
	json_int_t mode_bits = 0;
	size_t len = 0, b64_len;
	int r;

	if (mode && parse_mode(mode, &mode_bits) < 0)
		return usage_error(cmd, "invalid --mode '%s': want permission bits in octal, 0 to 777 (e.g. 755); "
				   "setuid, setgid and sticky are refused", mode);
	r = file_params_new(cmd, opts, "path", opts->operands[2], &params);
	if (r != CLI_CONTINUE)
		return r;
	r = local_read(opts->operands[1], &data, &len);
	if (r != CLI_CONTINUE) {
		json_decref(params);
		return r;
	}
	b64 = msb_base64_encode(data, len, &b64_len);
	free(TAKE_PTR(data));           /* up to 64 MiB: do not hold it twice over */
	content = json_stringn_nocheck(b64, b64_len);   /* base64 is ASCII */
	if (mode)
		json_object_set_new(params, "mode", json_integer(mode_bits));
	if (!content || json_object_set_new(params, "content_b64", content) < 0) {
		json_decref(params);
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_INTERNAL, NULL, "%s: cannot build the request",
				 cmd->name);
	}
	*ret_params = params;
	return CLI_CONTINUE;
}

/* A size (units.h: 4096, 64K, 1.5M) from 0 to CLI_FILE_MAX_BYTES. */
static int parse_bytes(const char *s, json_int_t *ret)
{
	uint64_t n;
	int r = msb_size_parse(s, &n);

	if (r < 0)
		return r;
	if (n > CLI_FILE_MAX_BYTES)
		return -ERANGE;
	*ret = (json_int_t)n;
	return 0;
}

/* get's LOCAL operand: "-" (stdout) when omitted. */
static const char *get_local(const struct cli_opts *opts)
{
	return opts->noperands > 2 ? opts->operands[2] : "-";
}

/* files.read {sandbox, path: GUEST, working_directory?, max_bytes?}. */
static int get_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	const char *max = opt_arg(opts, CLI_OPT_MAX_BYTES);
	json_int_t n = 0;
	int r;

	if (opts->json && strcmp(get_local(opts), "-"))
		return usage_error(cmd, "'%s --json' prints the daemon's result: it takes no LOCAL file",
				   cmd->name);
	if (max && parse_bytes(max, &n) < 0)
		return usage_error(cmd, "invalid --max-bytes '%s': want a size from 0 to %zu bytes (%s)",
				   max, CLI_FILE_MAX_BYTES, MSB_SIZE_FORMS);
	r = file_params_new(cmd, opts, "path", opts->operands[1], ret_params);
	if (r == CLI_CONTINUE && max)
		json_object_set_new(*ret_params, "max_bytes", json_integer(n));
	return r;
}

/* files.stat / files.remove {sandbox, path: GUEST, working_directory?[, recursive]}. */
static int path_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	int r = file_params_new(cmd, opts, "path", opts->operands[1], ret_params);

	if (r == CLI_CONTINUE && opt_arg(opts, CLI_OPT_RECURSIVE))
		json_object_set_new(*ret_params, "recursive", json_true());
	return r;
}

/* dir's DIR operand: "." (the working directory) when omitted. */
static const char *dir_operand(const struct cli_opts *opts)
{
	return opts->noperands > 1 ? opts->operands[1] : ".";
}

/* files.list {sandbox, path: DIR, working_directory?}. */
static int dir_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	return file_params_new(cmd, opts, "path", dir_operand(opts), ret_params);
}

/* files.reclaim {sandbox, directory: DIR, working_directory?, timeout_seconds?}:
 * --timeout (when not 0) bounds the daemon's side too, in whole seconds
 * (a fraction rounds up). */
static int reclaim_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	int ms = opts->timeout_ms, r;

	r = file_params_new(cmd, opts, "directory", opts->operands[1], ret_params);
	if (r != CLI_CONTINUE || ms <= 0)
		return r;
	json_object_set_new(*ret_params, "timeout_seconds", json_integer((ms + 999) / 1000));
	return r;
}

/* Nothing to say on success; --json prints the result. */
static int report_quiet(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	return opts->json ? print_json(r) : CLI_EXIT_OK;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Sets the mode of the temporary file fd, writes data and closes it (always). */
static int temp_fill(int fd, const uint8_t *data, size_t len, mode_t mode)
{
	int r = 0;

	if (fchmod(fd, mode) < 0)
		r = -errno;
	if (r == 0)
		r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

/* "DIR/.NAME.XXXXXX", beside path: a rename within one file system. */
static char *temp_path_for(const char *path)
{
	const char *slash = strrchr(path, '/');
	int dir_len = slash ? (int)(slash - path) + 1 : 0;

	return xasprintf("%.*s.%s" CLI_TEMP_SUFFIX, dir_len, path, path + dir_len);
}

/* Writes data to a new file beside path, then renames it over path: path
 * is either as it was or holds all of data, mode CLI_GET_FILE_MODE less the
 * umask. The signals that end the CLI wait meanwhile, so an interrupt cannot
 * leave the temporary file behind. Returns the exit code. */
static int local_write_atomic(const char *path, const uint8_t *data, size_t len)
{
	static const int held[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	_cleanup_free_ char *tmp = temp_path_for(path);
	sigset_t block, old;
	mode_t mask = umask(0);
	int fd, r;

	umask(mask);
	sigemptyset(&block);
	for (size_t i = 0; i < ELEMENTSOF(held); i++)
		sigaddset(&block, held[i]);
	sigprocmask(SIG_BLOCK, &block, &old);
	fd = mkostemp(tmp, O_CLOEXEC);
	r = fd < 0 ? -errno : temp_fill(fd, data, len, CLI_GET_FILE_MODE & ~mask);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0 && fd >= 0)
		(void)unlink(tmp);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_OUTPUT,
				 json_pack("{s:s, s:s?}", "path", path, "errno", strerrorname_np(-r)),
				 "cannot write %s: %s", path, strerror(-r));
	}
	return CLI_EXIT_OK;
}

/* {content_b64, size}: the content, decoded, to LOCAL or stdout. Nothing is
 * written unless the whole result is sound. */
static int report_get(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	const json_t *b64 = json_object_get(r, "content_b64");
	_cleanup_free_ uint8_t *data = NULL;
	const char *local = get_local(opts);
	json_int_t size;
	size_t len;

	if (opts->json)
		return print_json(r);
	if (!json_is_string(b64) || !get_int(r, "size", &size) ||
	    msb_base64_decode(json_string_value(b64), json_string_length(b64), &data, &len) < 0 ||
	    size < 0 || (uint64_t)size != len) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_PROTOCOL, NULL,
				 "%s: the daemon's result is not a file's content", cmd->name);
	}
	if (strcmp(local, "-"))
		return local_write_atomic(local, data, len);
	if (fwrite(data, 1, len, stdout) != len)
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_OUTPUT, NULL, "cannot write the output: %s",
				 strerror(errno));
	return CLI_EXIT_OK;
}

/* One SandboxEntry {path, kind, size} as "KIND SIZE PATH": SIZE "-" unless
 * a file; PATH dflt when the entry has none. Cleaned for a terminal. */
static void print_entry(const json_t *e, const char *dflt)
{
	const char *kind = get_str(e, "kind"), *path = get_str(e, "path");
	json_int_t size;

	put_clean(stdout, kind ? kind : "-", 0);
	if (kind && !strcmp(kind, "file") && get_int(e, "size", &size))
		printf(" %" JSON_INTEGER_FORMAT " ", size);
	else
		fputs(" - ", stdout);
	put_clean(stdout, path ? path : dflt, 0);
	putchar('\n');
}

/* null: nothing there (exit status 1); else "KIND SIZE PATH". */
static int report_stat(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	if (json_is_null(r)) {
		if (opts->json) {
			print_json(r);
			return cli_error(CLI_EXIT_REMOTE, "FileNotFoundError",
					 json_pack("{s:s}", "path", opts->operands[1]),
					 "%s: no such file", opts->operands[1]);
		}
		fputs("maf-sandbox: ", stderr);
		put_clean(stderr, opts->operands[1], 0);
		fputs(": no such file\n", stderr);
		return CLI_EXIT_REMOTE;
	}
	if (opts->json || !json_is_object(r))
		return print_json(r);
	print_entry(r, opts->operands[1]);
	return CLI_EXIT_OK;
}

/* {entries: [SandboxEntry...]}: one "KIND SIZE PATH" line per entry, in the
 * daemon's order (sorted by path); nothing for an empty directory. */
static int report_dir(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	const json_t *entries = json_object_get(r, "entries");
	size_t i;
	json_t *e;

	if (opts->json)
		return print_json(r);
	if (!json_is_array(entries)) {
		return cli_error(CLI_EXIT_FAILURE, CLI_ERR_PROTOCOL, NULL,
				 "%s: the daemon's result is not a listing", cmd->name);
	}
	json_array_foreach(entries, i, e)
		if (json_is_object(e))
			print_entry(e, "-");
	return CLI_EXIT_OK;
}

/* --- exec ---------------------------------------------------------------- */

/* The highest exit status a command can have. */
#define CLI_EXEC_MAX_EXIT_CODE 255
/* A signal that cancelled the exec: 128 + its number (130 SIGINT, 143 SIGTERM). */
#define CLI_EXEC_SIGNAL_BASE 128

/* exec's status when the command's result could not be had: usage errors
 * stay 2, everything else is CLI_EXIT_EXEC_FAILED. */
static int exec_failure(int r)
{
	return r == CLI_EXIT_USAGE ? r : CLI_EXIT_EXEC_FAILED;
}

/* The command's deadline in ms: --timeout, or the default when it is 0 or
 * not given. Returns CLI_CONTINUE or the exit code. */
static int exec_deadline_ms(const struct cli_cmd *cmd, const struct cli_opts *opts, int *ret_ms)
{
	if (opts->timeout_ms > CLI_EXEC_MAX_TIMEOUT_SECONDS * CLI_MS_PER_SECOND)
		return usage_error(cmd, "'%s' takes a --timeout of at most %d seconds", cmd->name,
				   CLI_EXEC_MAX_TIMEOUT_SECONDS);
	*ret_ms = opts->timeout_ms > 0 ? opts->timeout_ms :
		  CLI_EXEC_DEFAULT_TIMEOUT_SECONDS * CLI_MS_PER_SECOND;
	return CLI_CONTINUE;
}

/* Letters, digits and '_', not starting with a digit (s[0..len), len > 0). */
static bool env_name_ok(const char *s, size_t len)
{
	if (len == 0 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z')))
			return false;
	return true;
}

/* {NAME: VALUE, ...} from the --env options, a later NAME over an earlier
 * one. Returns CLI_CONTINUE with *ret_env (new reference; NULL when there
 * is none), or the exit code. */
static int exec_env_new(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_env)
{
	json_t *env;

	*ret_env = NULL;
	if (opts->nenv == 0)
		return CLI_CONTINUE;
	env = json_object();
	for (int i = 0; i < opts->nenv; i++) {
		const char *eq = strchr(opts->env[i], '=');

		if (!eq || !env_name_ok(opts->env[i], (size_t)(eq - opts->env[i]))) {
			json_decref(env);
			return usage_error(cmd, "invalid --env '%s': want NAME=VALUE, NAME of letters, "
					   "digits and '_', not starting with a digit", opts->env[i]);
		}
		json_object_setn_new(env, opts->env[i], (size_t)(eq - opts->env[i]), json_string(eq + 1));
	}
	*ret_env = env;
	return CLI_CONTINUE;
}

/* The command: --sh's STRING, or the operands after "SANDBOX --" as an
 * array. Returns CLI_CONTINUE with *ret_command (new reference), or the
 * exit code. */
static int exec_command_new(const struct cli_cmd *cmd, const struct cli_opts *opts,
			    json_t **ret_command)
{
	const char *sh = opt_arg(opts, CLI_OPT_SH);
	json_t *argv;

	if (sh) {
		if (opts->noperands > 1)
			return usage_error(cmd, "'%s --sh' takes SANDBOX only, no ARGV", cmd->name);
		*ret_command = json_string(sh);
		return CLI_CONTINUE;
	}
	if (opts->noperands < 2 || strcmp(opts->operands[1], "--"))
		return usage_error(cmd, "'%s' wants '--' and the command after SANDBOX, or --sh STRING",
				   cmd->name);
	if (opts->noperands < 3)
		return usage_error(cmd, "'%s' is missing the command after '--'", cmd->name);
	argv = json_array();
	for (int i = 2; i < opts->noperands; i++) {
		json_t *a = json_string(opts->operands[i]);

		if (!a) {
			json_decref(argv);
			return usage_error(cmd, "argument %d of the command is not valid UTF-8", i - 1);
		}
		json_array_append_new(argv, a);
	}
	*ret_command = argv;
	return CLI_CONTINUE;
}

/* sandbox.exec {sandbox, command, timeout_seconds, working_directory?, env?}:
 * timeout_seconds whole when it is, else with its fraction. */
static int exec_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	const char *sandbox = opts->operands[0];
	json_t *command = NULL, *env = NULL, *timeout;
	int ms = 0, r;

	if (!is_utf8(sandbox))
		return usage_error(cmd, "the SANDBOX '%s' is not valid UTF-8", sandbox);
	r = exec_deadline_ms(cmd, opts, &ms);
	if (r == CLI_CONTINUE)
		r = exec_command_new(cmd, opts, &command);
	if (r == CLI_CONTINUE)
		r = exec_env_new(cmd, opts, &env);
	if (r != CLI_CONTINUE) {
		json_decref(command);
		return r;
	}
	timeout = ms % CLI_MS_PER_SECOND ? json_real((double)ms / CLI_MS_PER_SECOND) :
		  json_integer(ms / CLI_MS_PER_SECOND);
	*ret_params = json_pack("{s:s, s:o, s:o, s:s*, s:o*}", "sandbox", sandbox, "command", command,
				"timeout_seconds", timeout, "working_directory",
				opt_arg(opts, CLI_OPT_WORKDIR), "env", env);
	if (!*ret_params) {
		return cli_error(CLI_EXIT_EXEC_FAILED, CLI_ERR_INTERNAL, NULL, "%s: cannot build the request",
				 cmd->name);
	}
	return CLI_CONTINUE;
}

/* The bytes of the base64 string member key of r (malloc'd). */
static int b64_member(const json_t *r, const char *key, uint8_t **ret, size_t *ret_len)
{
	const json_t *v = json_object_get(r, key);

	if (!json_is_string(v))
		return -EINVAL;
	return msb_base64_decode(json_string_value(v), json_string_length(v), ret, ret_len);
}

/* Output already written live from exec.output notifications (stream:
 * true), per stream, so the result's bytes are not written twice. The CLI
 * runs one exec per process. */
static struct {
	size_t out, err;        /* bytes written so far */
	bool failed;            /* a write failed: the rest is not attempted */
} exec_streamed;

static void exec_notify_cb(const char *method, json_t *params, void *arg)
{
	const char *stream = json_string_value(json_object_get(params, "stream"));
	_cleanup_free_ uint8_t *data = NULL;
	size_t len = 0;
	bool is_out;
	FILE *f;

	(void)arg;
	if (strcmp(method, "exec.output") || !stream || exec_streamed.failed ||
	    b64_member(params, "data_b64", &data, &len) < 0)
		return;
	is_out = strcmp(stream, "stdout") == 0;
	if (!is_out && strcmp(stream, "stderr"))
		return;
	f = is_out ? stdout : stderr;
	if (fwrite(data, 1, len, f) != len || fflush(f) != 0) {
		exec_streamed.failed = true;
		return;
	}
	*(is_out ? &exec_streamed.out : &exec_streamed.err) += len;
}

/* {exit_code, stdout_b64, stderr_b64, ...}: the bytes to stdout and stderr,
 * exactly (what the live stream has not written yet); exits with
 * exit_code. With --json: the result as it is, and the same status. */
static int report_exec(const struct cli_cmd *cmd, const struct cli_opts *opts, const json_t *r)
{
	_cleanup_free_ uint8_t *out = NULL, *err = NULL;
	size_t out_len = 0, err_len = 0;
	json_int_t code;
	bool ok;

	ok = get_int(r, "exit_code", &code) && code >= 0 && code <= CLI_EXEC_MAX_EXIT_CODE;
	if (opts->json) {
		if (print_json(r) != CLI_EXIT_OK || fflush(stdout) != 0)
			return CLI_EXIT_EXEC_FAILED;
	} else {
		ok = ok && b64_member(r, "stdout_b64", &out, &out_len) == 0 &&
		     b64_member(r, "stderr_b64", &err, &err_len) == 0;
	}
	if (!ok) {
		return cli_error(CLI_EXIT_EXEC_FAILED, CLI_ERR_PROTOCOL, NULL,
				 "%s: the daemon's result is not a command's result", cmd->name);
	}
	if (opts->json)
		return (int)code;
	if (exec_streamed.failed || exec_streamed.out > out_len || exec_streamed.err > err_len ||
	    fwrite(out + exec_streamed.out, 1, out_len - exec_streamed.out, stdout) != out_len - exec_streamed.out ||
	    fflush(stdout) != 0 ||
	    fwrite(err + exec_streamed.err, 1, err_len - exec_streamed.err, stderr) != err_len - exec_streamed.err ||
	    fflush(stderr) != 0) {
		return cli_error(CLI_EXIT_EXEC_FAILED, CLI_ERR_OUTPUT, NULL, "cannot write the output: %s",
				 strerror(errno));
	}
	return (int)code;
}

/* exec: SIGINT or SIGTERM while the command runs cancels it (call.cancel:
 * the daemon kills what it started) and exits 128 + the signal. */
static volatile sig_atomic_t exec_cancel;

static void exec_signal_cb(int sig)
{
	exec_cancel = sig;
}

static void exec_catch_signals(void)
{
	struct sigaction sa = { .sa_handler = exec_signal_cb };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* exec's stdin goes to the command when it is not a terminal, or with -i;
 * never with --no-stdin. */
static bool exec_forwards_stdin(const struct cli_cmd *cmd, const struct cli_opts *opts, int *ret)
{
	bool force = opt_arg(opts, CLI_OPT_INTERACTIVE) != NULL, off = opt_arg(opts, CLI_OPT_NO_STDIN) != NULL;

	*ret = CLI_CONTINUE;
	if (force && off) {
		*ret = usage_error(cmd, "'%s' takes -i or --no-stdin, not both", cmd->name);
		return false;
	}
	if (off)
		return false;
	return force || !isatty(STDIN_FILENO);
}

/* The daemon refused the exec's stdin (SandboxCapabilityNotSupported for
 * capability exec.stdin): nothing ran. */
static bool exec_stdin_refused(const struct msb_conn *conn, int r)
{
	const json_t *data = msb_last_error_data(conn);

	return r == MSB_E_REMOTE && msb_last_error_code(conn) == MSB_ERR_CAPABILITY_NOT_SUPPORTED &&
	       json_is_string(json_object_get(data, "capability")) &&
	       strcmp(json_string_value(json_object_get(data, "capability")), "exec.stdin") == 0;
}

/* --json of an exec that timed out or was cancelled: the error, with the
 * output that came before it (data.stdout_b64, stderr_b64 and their text
 * views), on stdout as a result would be. */
static void exec_print_partial(const struct msb_conn *conn)
{
	int code = msb_last_error_code(conn);
	json_auto_t *j = NULL;

	if (code != MSB_ERR_TIMEOUT && code != MSB_ERR_CANCELLED)
		return;
	j = json_pack("{s:i, s:s?, s:s?, s:O?}", "code", code, "type", msb_last_error_type(conn), "message",
		      msb_last_error_message(conn), "data", msb_last_error_data(conn));
	if (j) {
		print_json(j);
		fflush(stdout);
	}
}

/* exec: as cmd_method, but every failure to get the command's result exits
 * CLI_EXIT_EXEC_FAILED (the other statuses are the command's), and the
 * client waits CLI_DAEMON_TIMEOUT_MARGIN_MS past the command's deadline, so
 * the daemon's TimeoutError comes first. */
static int cmd_exec(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv)
{
	struct msb_conn *conn = NULL;
	json_auto_t *result = NULL;
	json_t *params = NULL;
	bool with_stdin = false;
	int r, ms = 0;

	r = parse_cmd_options(cmd, opts, argc, argv);
	if (r == CLI_CONTINUE)
		with_stdin = exec_forwards_stdin(cmd, opts, &r);
	if (r == CLI_CONTINUE)
		r = cmd->params(cmd, opts, &params);
	if (r != CLI_CONTINUE)
		return r;
	(void)exec_deadline_ms(cmd, opts, &ms);     /* checked by cmd->params */
	opts->timeout_ms = ms + CLI_DAEMON_TIMEOUT_MARGIN_MS;
	cli_exec_errors = true;
	r = cli_connect(opts, &conn);
	if (r != 0) {
		json_decref(params);
		return exec_failure(r);
	}
	if (!opts->json) {
		/* Output as it comes, not only at the end. */
		json_object_set_new(params, "stream", json_true());
		msb_set_notify(conn, exec_notify_cb, NULL);
	} else {
		/* --json prints the result with its text views, which the
		 * daemon adds only when asked. */
		json_object_set_new(params, "text", json_true());
	}
	exec_catch_signals();
	msb_set_cancel_flag(conn, &exec_cancel);
	if (with_stdin) {
		json_t *again = opt_arg(opts, CLI_OPT_INTERACTIVE) ? NULL : json_deep_copy(params);

		r = msb_call_stdin(conn, cmd->method, params, STDIN_FILENO, &result);
		/* A daemon that cannot pass stdin (its engine over TLS) refused
		 * before anything ran: without -i, the command runs without it. */
		if (again && exec_stdin_refused(conn, r)) {
			fprintf(stderr, "maf-sandbox: %s: stdin not sent: %s\n", cmd->name,
				msb_last_error_message(conn) ? msb_last_error_message(conn) : "not supported");
			r = msb_call(conn, cmd->method, TAKE_PTR(again), &result);
		}
		json_decref(again);
	} else {
		r = msb_call(conn, cmd->method, params, &result);
	}
	if (r == MSB_E_REMOTE && opts->json)
		exec_print_partial(conn);
	if (r < 0)
		r = exec_failure(report_failure(cmd, conn, r));
	else
		r = cmd->report(cmd, opts, result);
	msb_conn_free(conn);
	if (exec_cancel)
		return CLI_EXEC_SIGNAL_BASE + exec_cancel;
	return r;
}

/* --- events -------------------------------------------------------------- */

/* events --follow: the longest one wait for a live event lasts before the
 * signal flag is looked at again. A signal caught during a wait ends it at
 * once; this bounds how late one that came just before a wait is seen. */
#define CLI_EVENTS_WAIT_MS 500

/* Set by SIGINT or SIGTERM during events --follow. */
static volatile sig_atomic_t events_stop;

static void events_signal_cb(int sig)
{
	(void)sig;
	events_stop = 1;
}

/* SIGINT and SIGTERM set events_stop, and end a wait in msb_wait_notify()
 * (no SA_RESTART). */
static void events_catch_signals(void)
{
	struct sigaction sa = { .sa_handler = events_signal_cb };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* The notification hook's state. */
struct events_out {
	bool json;
	bool failed;      /* a write failed: nothing more is printed */
	int write_errno;  /* ... and why */
};

/* A "label=VALUE" part of an event's human line. */
struct event_field {
	const char *label;
	const char *member;
	bool in_key;    /* a member of the event's "key" */
	bool optional;  /* left out when absent or empty (else "-") */
};

static const struct event_field event_fields[] = {
	{ "sandbox", "sandbox", false, false },
	{ "scope", "scope", true, false },
	{ "thread", "thread_id", true, false },
	{ "agent", "agent_dir", true, false },
	{ "call", "call_id", true, true },
	{ "kind", "kind", false, false },
};

/* s cleaned for a terminal, or "-" when absent or empty. */
static void put_value(const char *s)
{
	put_clean(stdout, s && *s ? s : "-", 0);
}

/* "DECISION HOST:PORT" of an egress.decision ("[HOST]:PORT" when HOST has a
 * ':', an IPv6 address); the event's type for any other. */
static void print_event_what(const json_t *ev)
{
	const char *type = get_str(ev, "type"), *host = get_str(ev, "host");
	bool v6 = host && strchr(host, ':');
	json_int_t port;

	if (!type || strcmp(type, MSB_EVENT_EGRESS_DECISION)) {
		put_value(type);
		return;
	}
	put_value(get_str(ev, "decision"));
	fputs(v6 ? " [" : " ", stdout);
	put_value(host);
	if (v6)
		putchar(']');
	if (get_int(ev, "port", &port))
		printf(":%" JSON_INTEGER_FORMAT, port);
}

/* One event as one line: "TIME DECISION HOST:PORT sandbox=NAME scope=S
 * thread=T agent=A [call=C] kind=K [count=N first=FIRST_TIME] [reason=R]"
 * (count and first when it stands for more than one decision; reason when
 * the decision has one, e.g. not_connect). */
static void print_event(const json_t *ev)
{
	const json_t *key = json_object_get(ev, "key");
	json_int_t count;

	put_value(get_str(ev, "time"));
	putchar(' ');
	print_event_what(ev);
	for (size_t i = 0; i < ELEMENTSOF(event_fields); i++) {
		const struct event_field *f = &event_fields[i];
		const char *v = get_str(f->in_key ? key : ev, f->member);

		if (f->optional && !(v && *v))
			continue;
		printf(" %s=", f->label);
		put_value(v);
	}
	if (get_int(ev, "count", &count) && count > 1) {
		printf(" count=%" JSON_INTEGER_FORMAT " first=", count);
		put_value(get_str(ev, "first_time"));
	}
	if (get_str(ev, "reason")) {
		fputs(" reason=", stdout);
		put_value(get_str(ev, "reason"));
	}
	putchar('\n');
}

/* msb_notify_fn: prints each events.event (its params) as it comes, one
 * line flushed at once; skips any other notification. */
static void events_notify_cb(const char *method, json_t *params, void *arg)
{
	struct events_out *out = arg;

	if (out->failed || strcmp(method, MSB_NOTIFY_EVENT) || !json_is_object(params))
		return;
	if (out->json) {
		_cleanup_free_ char *s = json_dumps(params, JSON_COMPACT);

		if (!s) {
			fprintf(stderr, "maf-sandbox: cannot encode an event as JSON, skipping it\n");
			return;
		}
		puts(s);
	} else {
		print_event(params);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		out->failed = true;
		out->write_errno = errno;
	}
}

/* events.subscribe {types: [egress.decision], scope?, replay: true}. */
static int events_params(const struct cli_cmd *cmd, const struct cli_opts *opts, json_t **ret_params)
{
	*ret_params = json_pack("{s:[s], s:s*, s:b}", "types", MSB_EVENT_EGRESS_DECISION,
				"scope", opt_arg(opts, CLI_OPT_SCOPE), "replay", 1);
	return CLI_CONTINUE;
}

/* Prints live events until a signal (CLI_EXIT_OK), a failed write, or the
 * connection is lost (its exit code, said why). */
static int events_follow(const struct cli_cmd *cmd, struct msb_conn *conn, const struct events_out *out)
{
	while (!events_stop && !out->failed) {
		int r = msb_wait_notify(conn, CLI_EVENTS_WAIT_MS);

		if (r < 0)
			return report_failure(cmd, conn, r);
	}
	return CLI_EXIT_OK;
}

/* events: subscribes with replay, so the events the daemon kept come (and
 * print) before its reply; without --follow that is all, with it the live
 * ones follow until SIGINT or SIGTERM. */
static int cmd_events(const struct cli_cmd *cmd, struct cli_opts *opts, int argc, char **argv)
{
	struct events_out out = { 0 };
	struct msb_conn *conn = NULL;
	json_t *params = NULL;
	bool follow;
	int r;

	r = parse_cmd_options(cmd, opts, argc, argv);
	if (r == CLI_CONTINUE)
		r = cmd->params(cmd, opts, &params);
	if (r != CLI_CONTINUE)
		return r;
	out.json = opts->json;
	follow = opt_arg(opts, CLI_OPT_FOLLOW) != NULL;
	if (follow)
		events_catch_signals();  /* one during the replay ends it after the replay */
	r = cli_connect(opts, &conn);
	if (r != 0) {
		json_decref(params);
		return r;
	}
	msb_set_notify(conn, events_notify_cb, &out);
	r = msb_call(conn, cmd->method, params, NULL);
	if (r < 0)
		r = report_failure(cmd, conn, r);
	else
		r = follow ? events_follow(cmd, conn, &out) : CLI_EXIT_OK;
	if (r == CLI_EXIT_OK && out.failed)
		r = cli_error(CLI_EXIT_FAILURE, CLI_ERR_OUTPUT, NULL, "cannot write the output: %s",
			      strerror(out.write_errno));
	msb_conn_free(conn);
	return r;
}

#define CLI_HELP_SANDBOX \
	"  SANDBOX                     the sandbox: its name or ID as ls shows them (an\n" \
	"                              ID prefix of 12 or more hex digits that only it\n" \
	"                              has), or the full id acquire printed\n"
#define CLI_HELP_WORKDIR \
	"  -w, --working-directory WD  the working directory (also --cwd): absolute, or\n" \
	"                              relative to the sandbox's work_dir (default: it)"

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
			"the Docker engine is reachable and at which API version, the file plane\n"
			"new sandboxes get (and, for the archive plane, why), the egress modes\n"
			"served (with the proxy binary, or why allowlist is off and which\n"
			"setting turns it on), and the connection and request counters.",
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
	{
		.name = "acquire",
		.usage = "acquire --scope S --thread T --agent A\n"
			 "         [--call C] --kind K (--image IMG | --spec FILE.json) [--scope-call]",
		.summary = "get the sandbox of a key, creating it if need be; prints its id",
		.help = "Acquire the sandbox of a key (sandbox.acquire): the warm one the key names,\n"
			"or a new one, its image pulled first if the engine lacks it. Prints the\n"
			"sandbox's id (with --json: the whole result).\n"
			"\n"
			"  --scope S         the key's scope\n"
			"  --thread T        the key's thread id\n"
			"  --agent A         the key's agent directory\n"
			"  --call C          the key's call id (a call-scoped sandbox)\n"
			"  --kind K          the sandbox's kind\n"
			"  --image IMG       the image to run (replaces the spec's image and image_id)\n"
			"  --spec FILE.json  spec members as a JSON object ('-' reads stdin);\n"
			"                    --kind, --image and --scope-call are laid over it\n"
			"  --scope-call      isolation scope \"call\" (the key needs --call)\n"
			"\n"
			"While an image is pulled, its progress shows on stderr if that is a\n"
			"terminal. Unless --timeout is given, waits as long as the daemon works on\n"
			"the call (the daemon bounds a pull by sandbox.pull_timeout_ms).",
		.handler = cmd_method,
		.opts = CLI_KEY_OPTS | CLI_OPT_BIT(CLI_OPT_CALL) | CLI_OPT_BIT(CLI_OPT_KIND) |
			CLI_OPT_BIT(CLI_OPT_IMAGE) | CLI_OPT_BIT(CLI_OPT_SPEC) | CLI_OPT_BIT(CLI_OPT_SCOPE_CALL),
		.required = CLI_KEY_OPTS | CLI_OPT_BIT(CLI_OPT_KIND),
		.method = MSB_METHOD_SANDBOX_ACQUIRE, .params = acquire_params, .report = report_acquire,
		.progress = true,
	},
	{
		.name = "ls",
		.usage = "ls [--scope S] [--thread T]",
		.summary = "list sandboxes, all or those of a scope and thread",
		.help = "List the sandboxes the daemon knows (sandbox.list), as a table of NAME,\n"
			"ID (the first 12 hex digits of the id), STATE, KIND, the key (SCOPE,\n"
			"THREAD, AGENT, CALL), CREATED and the LABELS given at acquire; \"-\" stands\n"
			"for a value not there. NAME or ID names the sandbox to every command that\n"
			"takes a SANDBOX. With --json: the daemon's list, which also has each\n"
			"sandbox's full id, image and owner. Non-admin users see their own only.\n"
			"\n"
			"  --scope S   only sandboxes of this scope\n"
			"  --thread T  only sandboxes of this thread id",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_SCOPE) | CLI_OPT_BIT(CLI_OPT_THREAD),
		.method = MSB_METHOD_SANDBOX_LIST, .params = scope_params, .report = report_ls,
	},
	{
		.name = "dispose",
		.usage = "dispose --scope S --thread T --agent A\n"
			 "         [--call C] [--kind K] [--sandbox ID]",
		.summary = "dispose of the sandbox of a key",
		.help = "Dispose of the sandbox of a key (sandbox.dispose): stop and remove it.\n"
			"Prints nothing when done. When the daemon could not finish, says why on\n"
			"stderr (\"disposal incomplete: CODE: DETAIL\") and exits with status 1.\n"
			"\n"
			"What goes: every sandbox of the key (every kind unless --kind), and\n"
			"without --call that includes the key's call-scoped sandboxes, those of\n"
			"every call; with --call C, only the sandboxes of call C. --sandbox ID\n"
			"narrows it to that one container.\n"
			"\n"
			"  --scope S     the key's scope\n"
			"  --thread T    the key's thread id\n"
			"  --agent A     the key's agent directory\n"
			"  --call C      the key's call id: only call C's sandboxes (without it:\n"
			"                the key's own and every call's)\n"
			"  --kind K      the sandbox's kind\n"
			"  --sandbox ID  only this sandbox of the key: its name, full id or a unique\n"
			"                ID prefix (12+ hex digits), as ls shows them",
		.handler = cmd_method,
		.opts = CLI_KEY_OPTS | CLI_OPT_BIT(CLI_OPT_CALL) | CLI_OPT_BIT(CLI_OPT_KIND) |
			CLI_OPT_BIT(CLI_OPT_SANDBOX),
		.required = CLI_KEY_OPTS,
		.method = MSB_METHOD_SANDBOX_DISPOSE, .params = dispose_params, .report = report_dispose,
	},
	{
		.name = "dispose-scope",
		.usage = "dispose-scope --scope S --thread T",
		.summary = "dispose of every sandbox of a scope and thread",
		.help = "Dispose of every sandbox of a scope and thread (sandbox.dispose_scope).\n"
			"Prints how many were disposed of. When some could not be, says why on\n"
			"stderr and exits with status 1.\n"
			"\n"
			"  --scope S   the scope\n"
			"  --thread T  the thread id",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_SCOPE) | CLI_OPT_BIT(CLI_OPT_THREAD),
		.required = CLI_OPT_BIT(CLI_OPT_SCOPE) | CLI_OPT_BIT(CLI_OPT_THREAD),
		.method = MSB_METHOD_SANDBOX_DISPOSE_SCOPE, .params = scope_params,
		.report = report_dispose_scope,
	},
	{
		.name = "reap",
		.usage = "reap --older-than DURATION (--scope S | --all) [--dry-run]",
		.summary = "dispose of sandboxes older than a duration (admin only)",
		.help = "Dispose of the sandboxes created longer ago than DURATION, and remove the\n"
			"egress proxies and networks left unused (sandbox.reap; admin only): those\n"
			"of one scope, or with --all every one on this host, whoever owns it.\n"
			"Prints how many of each were removed, then each failure on stderr; exits\n"
			"with status 1 if there was any. With --dry-run nothing is removed: prints\n"
			"what would be (the same selection), one sandbox per line as\n"
			"\"NAME SCOPE CREATED ID\".\n"
			"\n"
			"  --older-than DURATION  90s, 15m, 1.5h, 7d, or plain seconds\n"
			"  --scope S              only sandboxes of this scope\n"
			"  --all                  every scope (needed without --scope, unless --dry-run)\n"
			"  --dry-run              list what would be removed; remove nothing",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_OLDER_THAN) | CLI_OPT_BIT(CLI_OPT_SCOPE) | CLI_OPT_BIT(CLI_OPT_ALL) |
			CLI_OPT_BIT(CLI_OPT_DRY_RUN),
		.required = CLI_OPT_BIT(CLI_OPT_OLDER_THAN),
		.method = MSB_METHOD_SANDBOX_REAP, .params = reap_params, .report = report_reap,
	},
	{
		.name = "put",
		.usage = "put [-w WD] [--mode MODE] SANDBOX LOCAL GUEST",
		.summary = "copy a local file (or stdin) into a sandbox",
		.help = "Write the local file LOCAL ('-' reads stdin) to GUEST in the sandbox\n"
			"(files.write). GUEST is relative to the working directory; missing\n"
			"directories below it are created, and a file already there is replaced.\n"
			"At most 64 MiB, the per-file ceiling: a larger LOCAL is refused before\n"
			"anything is sent (exit status 2). Prints nothing (with --json: the\n"
			"daemon's result).\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR "\n"
			"  --mode MODE                 the file's permission bits in octal, 0 to 777\n"
			"                              (default 644; 755 makes it executable)",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR) | CLI_OPT_BIT(CLI_OPT_MODE),
		.min_operands = 3, .max_operands = 3,
		.method = MSB_METHOD_FILES_WRITE, .params = put_params, .report = report_quiet,
	},
	{
		.name = "get",
		.usage = "get [-w WD] [--max-bytes N] SANDBOX GUEST [LOCAL|-]",
		.summary = "copy a file out of a sandbox to a local file or stdout",
		.help = "Read the regular file GUEST of the sandbox (files.read) and write it to\n"
			"LOCAL, or to stdout when LOCAL is '-' or not given. LOCAL is replaced\n"
			"whole or not at all: the content goes to a temporary file in its\n"
			"directory, renamed over LOCAL once complete (mode 0644 less the umask).\n"
			"A file larger than the limit is refused, never truncated. With --json:\n"
			"the daemon's result (content in base64) on stdout, and no LOCAL.\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR "\n"
			"  --max-bytes N               refuse a file over N bytes, e.g. 4096, 64K,\n"
			"                              1.5M (default and most: 64 MiB, the per-file\n"
			"                              ceiling)",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR) | CLI_OPT_BIT(CLI_OPT_MAX_BYTES),
		.min_operands = 2, .max_operands = 3,
		.method = MSB_METHOD_FILES_READ, .params = get_params, .report = report_get,
	},
	{
		.name = "stat",
		.usage = "stat [-w WD] SANDBOX GUEST",
		.summary = "describe a path in a sandbox: kind, size",
		.help = "Describe GUEST in the sandbox without following a link (files.stat):\n"
			"prints \"KIND SIZE PATH\", KIND one of file, directory, symlink, other;\n"
			"SIZE in bytes for a file, else \"-\"; PATH relative to the working\n"
			"directory. When nothing is there, says so on stderr and exits with\n"
			"status 1 (with --json: prints null, and the same).\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR,
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR),
		.min_operands = 2, .max_operands = 2,
		.method = MSB_METHOD_FILES_STAT, .params = path_params, .report = report_stat,
	},
	{
		.name = "dir",
		.usage = "dir [-w WD] SANDBOX [DIR]",
		.summary = "list a directory in a sandbox: kind, size, path of each entry",
		.help = "List the directory DIR in the sandbox (files.list; default: the working\n"
			"directory itself): one line \"KIND SIZE PATH\" per entry, as stat prints\n"
			"one, sorted by path. Links are named, never followed. Only its direct\n"
			"children; an empty directory prints nothing. Served on the daemon's local\n"
			"file plane only: a sandbox on the archive plane is refused\n"
			"(SandboxCapabilityNotSupported, exit status 1). A directory with more\n"
			"entries than the daemon's files.list_max_entries is refused\n"
			"(SandboxTransferCapExceeded), never cut short. With --json: the\n"
			"daemon's result, {\"entries\": [...]}.\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR,
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR),
		.min_operands = 1, .max_operands = 2,
		.method = MSB_METHOD_FILES_LIST, .params = dir_params, .report = report_dir,
	},
	{
		.name = "rm",
		.usage = "rm [-w WD] [-r] SANDBOX GUEST",
		.summary = "remove a file, or with -r a directory, in a sandbox",
		.help = "Remove GUEST in the sandbox as the guest's own user (files.remove). A\n"
			"link is removed, never followed. Nothing there is success. A directory,\n"
			"even an empty one, needs -r. Prints nothing.\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR "\n"
			"  -r, --recursive             remove a directory and all it holds",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR) | CLI_OPT_BIT(CLI_OPT_RECURSIVE),
		.min_operands = 2, .max_operands = 2,
		.method = MSB_METHOD_FILES_REMOVE, .params = path_params, .report = report_quiet,
	},
	{
		.name = "reclaim",
		.usage = "reclaim [-w WD] [--timeout S] SANDBOX DIR",
		.summary = "remove a call's own directory in a sandbox",
		.help = "Remove the directory DIR in the sandbox, and all it holds, as the guest's\n"
			"own user (files.reclaim). An absolute DIR is taken as is (it needs at\n"
			"least two components); a relative one must be below the working\n"
			"directory. Nothing there is success. Prints nothing.\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR "\n"
			"  -t, --timeout S             bound the removal itself to S seconds too, a\n"
			"                              fraction rounded up (default and most: the\n"
			"                              daemon's files.timeout_ms)",
		.handler = cmd_method,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR),
		.min_operands = 2, .max_operands = 2,
		.method = MSB_METHOD_FILES_RECLAIM, .params = reclaim_params, .report = report_quiet,
		.daemon_timeout = true,
	},
	{
		.name = "exec",
		.usage = "exec [-i|--no-stdin] [-w WD] [--timeout S] [--env NAME=VALUE]... SANDBOX -- ARGV...\n"
			 "   or: maf-sandbox [OPTIONS] exec [-i|--no-stdin] [-w WD] [--timeout S]\n"
			 "         [--env NAME=VALUE]... --sh STRING SANDBOX",
		.summary = "run a command in a sandbox; its output and exit status are this one's",
		.help = "Run a command in the sandbox as the image's user and wait for it\n"
			"(sandbox.exec): ARGV is the command's argv itself (no shell; nothing is\n"
			"joined or re-quoted), or with --sh, STRING runs under sh -c. Its stdout\n"
			"and stderr are written to this one's as they arrive, byte for byte; more\n"
			"than 8 MiB of them together is an error (what came before it has been\n"
			"written). With --json: only at the end, the daemon's result (exit_code,\n"
			"stdout_b64, stderr_b64, stdout_text, stderr_text, duration_ms) on stdout\n"
			"instead, and the same exit status.\n"
			"\n"
			CLI_HELP_SANDBOX
			CLI_HELP_WORKDIR "\n"
			"                              (it must exist in the guest)\n"
			"  --sh STRING                 run STRING with sh -c, instead of an ARGV\n"
			"  --env NAME=VALUE            add NAME to the command's environment; again\n"
			"                              for more (NAME: letters, digits and '_', not\n"
			"                              starting with a digit)\n"
			"  -t, --timeout S             the command's deadline in seconds, fractions\n"
			"                              allowed (default 600, also for 0; at most\n"
			"                              86400): past it, the command and every\n"
			"                              process it started are killed (TimeoutError)\n"
			"  -i, --interactive           send this one's stdin to the command even when\n"
			"                              it is a terminal (by default it is sent when it\n"
			"                              is not one: a pipe or a file; the command sees\n"
			"                              its end as the end of its stdin)\n"
			"  --no-stdin                  never send stdin: the command's is closed (use\n"
			"                              it in a loop that reads its own stdin)\n"
			"\n"
			"SIGINT or SIGTERM while the command runs cancels it: the daemon kills it and\n"
			"every process it started (as past the deadline), and exec exits 130 or 143.\n"
			"With --json, a command that timed out or was cancelled prints the error\n"
			"with the output that came before it (code, type, message, data with\n"
			"stdout_b64, stderr_b64, stdout_text, stderr_text) on stdout.\n"
			"\n"
			"Exit status of exec, in place of the list below: the command's own\n"
			"(0-255; 126 or 127 when the guest could not run it); 125 when there is no\n"
			"result of the command: the daemon refused or failed (its error type on\n"
			"stderr, e.g. TimeoutError, SandboxExecOutputLimitExceeded,\n"
			"SandboxNotFound), or no connection, a protocol or I/O error, the client's\n"
			"own timeout; 2 for a usage error (nothing was sent).",
		.handler = cmd_exec,
		.opts = CLI_OPT_BIT(CLI_OPT_WORKDIR) | CLI_OPT_BIT(CLI_OPT_ENV) | CLI_OPT_BIT(CLI_OPT_SH) |
			CLI_OPT_BIT(CLI_OPT_INTERACTIVE) | CLI_OPT_BIT(CLI_OPT_NO_STDIN),
		.min_operands = 1, .max_operands = INT_MAX,
		.method = MSB_METHOD_SANDBOX_EXEC, .params = exec_params, .report = report_exec,
	},
	{
		.name = "events",
		.usage = "events [-f] [--scope S]",
		.summary = "print the egress decisions the daemon kept; with -f, new ones too",
		.help = "Print the events the daemon publishes (events.subscribe): the egress\n"
			"decisions of the sandboxes this user may see (an admin: every one).\n"
			"Prints those the daemon still keeps (up to the last 4096 it published),\n"
			"oldest first, and exits. With --follow, goes on to print each new one as\n"
			"it happens, until SIGINT or SIGTERM (exit status 0) or until the\n"
			"connection to the daemon is lost (exit status 4). One line per event,\n"
			"written at once:\n"
			"\n"
			"  TIME DECISION HOST:PORT sandbox=NAME scope=S thread=T agent=A [call=C] kind=K\n"
			"      [count=N first=TIME] [reason=R]      (all on one line)\n"
			"\n"
			"DECISION is ALLOW, DENY, DENY-NONGLOBAL or UNREACHABLE; an IPv6 HOST is in\n"
			"brackets; call= is there only for a call-scoped key; count= and first= for\n"
			"an event standing for several decisions; reason= for a decision that has\n"
			"one (not_connect: a plain-HTTP request, refused); \"-\" stands for a\n"
			"value not there. With --json: each event as one compact JSON object per\n"
			"line, as the daemon sent it.\n"
			"\n"
			"  -f, --follow  after those kept, print new events until interrupted\n"
			"  --scope S     only events of sandboxes of this scope\n"
			"\n"
			"--timeout bounds the subscription (the kept events included); --follow\n"
			"then waits for new events without a limit.",
		.handler = cmd_events,
		.opts = CLI_OPT_BIT(CLI_OPT_FOLLOW) | CLI_OPT_BIT(CLI_OPT_SCOPE),
		.method = MSB_METHOD_EVENTS_SUBSCRIBE, .params = events_params,
	},
};
static const size_t cli_ncmds = ELEMENTSOF(cli_cmds);

static void print_help(const struct cli_cmd *cmd)
{
	if (cmd) {
		printf("Usage: maf-sandbox [OPTIONS] %s\n\n%s\n\n%s", cmd->usage ? cmd->usage : cmd->name,
		       cmd->help, options_help);
		return;
	}
	printf("Usage: maf-sandbox [--socket PATH] [--json] [--timeout SECONDS] COMMAND [OPTIONS]\n\n"
	       "Talk to maf-sandboxd over its Unix socket.\n\nCommands:\n");
	for (size_t i = 0; i < cli_ncmds; i++)
		printf("  %-13s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
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
		int e = errno;

		cli_error(CLI_EXIT_FAILURE, CLI_ERR_OUTPUT, NULL, "cannot write the output: %s", strerror(e));
		return r == CLI_EXIT_OK ? CLI_EXIT_FAILURE : r;
	}
	return r;
}

int main(int argc, char **argv)
{
	struct cli_opts opts = { .timeout_ms = -1 };
	const struct cli_cmd *cmd;
	int r;

	cli_json_errors = argv_wants_json(argc, argv);
	cli_exec_errors = false;
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
