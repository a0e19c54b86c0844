/* log.h — relayd-style logging. Under journald (JOURNAL_STREAM set) lines go
 * to stderr with <N> priority prefixes; otherwise plain "maf-sandboxd: level:
 * message" lines on stderr. Debug lines are printed only when enabled, each
 * with a topic (rpc, engine, op, conn). log_warn appends strerror(errno).
 * Levels: a problem the daemon lives with is a warning (log_warn[x]); one
 * that stops it (start-up refused, a fatal() exit) is an error
 * (log_error[x], fatal[x]: both print "error:"), never a warning. */
#ifndef MSB_LOG_H
#define MSB_LOG_H

#include <stdbool.h>

void log_init(const char *progname, bool debug);
void log_set_debug(bool debug);
bool log_is_debug(void);

void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_errorx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *topic, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
