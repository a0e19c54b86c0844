#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "log.h"

static const char *log_progname = "maf-sandboxd";
static bool log_debug_on;
static bool log_journal;

void log_init(const char *progname, bool debug)
{
	if (progname)
		log_progname = progname;
	log_debug_on = debug;
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_debug(bool debug)
{
	log_debug_on = debug;
}

bool log_is_debug(void)
{
	return log_debug_on;
}

static const char *level_name(int prio)
{
	switch (prio) {
	case LOG_CRIT: return "error";      /* fatal(): the daemon exits */
	case LOG_ERR: return "error";
	case LOG_WARNING: return "warning";
	case LOG_NOTICE: return "notice";
	case LOG_INFO: return "info";
	case LOG_DEBUG: return "debug";
	default: return "log";
	}
}

static void vlog(int prio, const char *topic, const char *errstr, const char *fmt, va_list ap)
{
	char msg[4096];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* One write per line so concurrent writers do not interleave. */
	if (log_journal)
		fprintf(stderr, "<%d>%s%s%s%s%s\n", prio, topic ? topic : "", topic ? ": " : "",
			msg, errstr ? ": " : "", errstr ? errstr : "");
	else
		fprintf(stderr, "%s: %s: %s%s%s%s%s\n", log_progname, level_name(prio),
			topic ? topic : "", topic ? ": " : "", msg, errstr ? ": " : "",
			errstr ? errstr : "");
	fflush(stderr);
}

#define LOG_BODY(prio, topic, errstr)                 \
	do {                                          \
		va_list ap;                           \
		va_start(ap, fmt);                    \
		vlog(prio, topic, errstr, fmt, ap);   \
		va_end(ap);                           \
	} while (0)

void log_warn(const char *fmt, ...)
{
	const char *e = strerror(errno);

	LOG_BODY(LOG_WARNING, NULL, e);
}

void log_warnx(const char *fmt, ...)
{
	LOG_BODY(LOG_WARNING, NULL, NULL);
}

void log_error(const char *fmt, ...)
{
	const char *e = strerror(errno);

	LOG_BODY(LOG_ERR, NULL, e);
}

void log_errorx(const char *fmt, ...)
{
	LOG_BODY(LOG_ERR, NULL, NULL);
}

void log_info(const char *fmt, ...)
{
	LOG_BODY(LOG_INFO, NULL, NULL);
}

void log_notice(const char *fmt, ...)
{
	LOG_BODY(LOG_NOTICE, NULL, NULL);
}

void log_debug(const char *topic, const char *fmt, ...)
{
	if (!log_debug_on)
		return;
	LOG_BODY(LOG_DEBUG, topic, NULL);
}

void fatal(const char *fmt, ...)
{
	const char *e = strerror(errno);

	LOG_BODY(LOG_CRIT, NULL, e);
	exit(1);
}

void fatalx(const char *fmt, ...)
{
	LOG_BODY(LOG_CRIT, NULL, NULL);
	exit(1);
}
