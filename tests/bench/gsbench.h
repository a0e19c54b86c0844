/* gsbench.h — what maf-sandbox-bench-guestcpu and maf-sandbox-bench-scale
 * share: a private maf-sandboxd (its stderr read by a thread that stamps
 * each line with the time it arrived), client calls with a deadline (a
 * missed one is reported as a hang), the Docker Engine API through libcurl,
 * /proc readings and small statistics.
 *
 * These are measurement programs, not tests: nothing here asserts. Errors
 * are -errno (or the client's MSB_E_* codes) and a message on stderr. */
#ifndef MSB_GSBENCH_H
#define MSB_GSBENCH_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

#include "msb.h"

/* Deadlines. */
#define GS_CALL_TIMEOUT_MS     30000   /* one daemon call (sandbox.exec: its own + this) */
#define GS_LISTEN_TIMEOUT_MS   15000   /* a started daemon accepts on its socket */
#define GS_STOP_TIMEOUT_MS     20000   /* SIGTERM → exit, then SIGKILL */
#define GS_ENGINE_TIMEOUT_MS   60000   /* one Engine API request */
#define GS_SYNC_TIMEOUT_MS     120000  /* the registry becomes current */
#define GS_POLL_MS             10      /* polling step while waiting for the daemon */
#define GS_CLEANUP_WAIT_MS     60000   /* the engine comes back for the cleanup */
#define GS_CLEANUP_RETRY_MS    1000

/* The engine API version the programs speak (the daemon's floor). */
#define GS_ENGINE_API "/v1.41"
/* Extra --set KEY=VALUE options one program forwards to its daemon. */
#define GS_MAX_SETS 32
/* The run label's key (spec "labels"); the container carries
 * maf-sandbox.label.<this>=<pid>. */
#define GS_RUN_LABEL "msb-scale-run"
#define GS_RUN_LABEL_FULL "maf-sandbox.label." GS_RUN_LABEL

/* Set by SIGINT/SIGTERM (gs_signals_install); long loops stop on it and the
 * programs clean up as on failure. */
extern volatile sig_atomic_t gs_interrupted;
void gs_signals_install(void);

/* CLOCK_MONOTONIC in ms. */
double gs_now_ms(void);
/* Sleeps ms, or less when interrupted. */
void gs_sleep_ms(double ms);

/* ---- the daemon ------------------------------------------------------ */

struct gs_daemon {
	pid_t pid;                /* 0: not running */
	char dir[64];             /* private mkdtemp dir */
	char sock[100];           /* dir/msb.sock; fits sun_path */
	char log[128];            /* dir/daemon.log: stderr, each line stamped */
	double start_ms;          /* gs_now_ms() just before fork */
	/* Written by the reader thread, under lock. */
	pthread_mutex_t lock;
	pthread_t reader;
	bool reader_on;
	double registry_line_ms;  /* when "registry: N sandbox(es)" first came; -1 */
	long registry_line_count; /* its N */
	long lines;
};

/* The daemon to run: path (borrowed) if non-NULL, else $MSB_DAEMON, else
 * the one built beside this program. Never NULL. */
const char *gs_daemon_path(const char *path);
/* Makes d's private dir. 0 or -errno. */
int gs_daemon_prepare(struct gs_daemon *d);
/* Starts daemon with --socket d->sock, --set egress.proxy_binary=,
 * --set freeze.lock_file=lock_file (NULL: d->dir/freeze.lock), then each
 * of sets[0..n_sets) as --set. Does not wait. 0 or -errno. */
int gs_daemon_start(struct gs_daemon *d, const char *daemon, const char *lock_file,
		    char *const *sets, size_t n_sets);
/* Waits until the socket accepts. 0; -ETIMEDOUT; -ECHILD if it exited
 * (the log is printed). */
int gs_daemon_wait_listening(struct gs_daemon *d, int timeout_ms);
/* SIGTERM, wait GS_STOP_TIMEOUT_MS, then SIGKILL. Returns the exit status
 * (128 + signal when killed); 0 when not running. Joins the reader. */
int gs_daemon_stop(struct gs_daemon *d);
/* Removes the private dir (after stop). keep_log: print where the log was
 * copied (/tmp/<program>-<pid>-daemon<N>.log) instead of losing it. */
void gs_daemon_cleanup(struct gs_daemon *d, const char *keep_log_as);
/* Prints the log to stderr. */
void gs_daemon_dump_log(const struct gs_daemon *d);

/* VmRSS and VmHWM of pid, in KiB. 0 or -errno. */
int gs_proc_mem(pid_t pid, long *ret_rss_kib, long *ret_hwm_kib);

/* ---- client calls with a deadline ------------------------------------- */

struct gs_client {
	const char *sock;         /* borrowed */
	struct msb_conn *conn;    /* NULL: connect at the next call */
	int timeout_ms;
	long calls, errors, hangs;
	double last_ms;           /* latency of the last call */
	char last_error[256];     /* type and message of the last failure */
};

void gs_client_init(struct gs_client *c, const char *sock, int timeout_ms);
void gs_client_close(struct gs_client *c);
/* Calls method with params (steals, may be NULL). MSB_OK with *ret_result
 * (new reference; ret_result may be NULL); MSB_E_REMOTE with the daemon's
 * error in c->last_error; MSB_E_TIMEOUT is a hang: said on stderr,
 * counted, and the connection is made again at the next call. c->last_ms
 * is the call's latency either way. */
int gs_call(struct gs_client *c, const char *method, json_t *params, json_t **ret_result);
/* The daemon error type of the last MSB_E_REMOTE ("" if none). */
const char *gs_client_error_type(const struct gs_client *c);

/* ---- the engine, directly ----------------------------------------------- */

/* One process-wide keep-alive connection. */
int gs_engine_init(void);
void gs_engine_cleanup(void);
/* method path (below GS_ENGINE_API) with body (borrowed, NULL = none).
 * 0 with *ret_status and *ret_body (new reference, or NULL when the body
 * is empty or not JSON; ret_body may be NULL); -EIO when the request
 * failed (said on stderr). */
int gs_engine(const char *method, const char *path, const json_t *body, long *ret_status,
	      json_t **ret_body);
/* Removes (force) every container labelled key=value. Returns how many
 * were removed, or -EIO when they could not be listed (the engine is asked
 * again for up to GS_CLEANUP_WAIT_MS). */
long gs_engine_remove_labelled(const char *key, const char *value);
/* The engine's version string ("?" if unreadable); malloc'd. */
char *gs_engine_version(void);

/* ---- the test image ---------------------------------------------------- */

/* Imports the busybox test image as ref with $MSB_TESTIMAGE (default: the
 * source tree's tests/integration/testimage.sh). 0 or -EIO. */
int gs_test_image(const char *ref);

/* ---- numbers ------------------------------------------------------------ */

struct gs_samples {
	double *v;
	size_t n, cap;
};

void gs_samples_add(struct gs_samples *s, double v);
void gs_samples_free(struct gs_samples *s);
/* Nearest-rank percentile p (0..100) of the samples; 0 when empty. */
double gs_percentile(const struct gs_samples *s, double p);
double gs_max(const struct gs_samples *s);
double gs_mean(const struct gs_samples *s);
/* {"n", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms"}. New reference. */
json_t *gs_samples_json(const struct gs_samples *s);

/* {"cpus_online", "cpu_model", "loadavg", "kernel"}. New reference. */
json_t *gs_host_json(void);
/* Writes j (borrowed) to path, indented. 0 or -errno. */
int gs_json_write(const char *path, const json_t *j);
/* Parses "KEY=VALUE" into sets[*n] (borrowed argv). 0 or -EINVAL / -E2BIG. */
int gs_add_set(char **sets, size_t *n, char *arg);
/* A positive long from text, within [min, max]. 0 or -EINVAL. */
int gs_parse_long(const char *s, long min, long max, long *ret);

#endif
