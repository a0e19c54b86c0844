/* harness.h — integration test harness: a real maf-sandboxd on a private
 * socket in a private temp dir, the CLI, and raw socket helpers.
 *
 * Cleanup does not depend on the test passing: every daemon gets
 * PR_SET_PDEATHSIG, and an atexit handler (run when Check's forked test
 * exits, pass or fail) kills what is left and removes the temp dirs. */
#ifndef MSB_HARNESS_H
#define MSB_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

struct msbd_proc {
	pid_t pid;
	char dir[64];      /* private temp dir */
	char sock[100];    /* dir/msb.sock; fits sun_path */
	char log[128];     /* dir/daemon.log: the daemon's stderr */
};

/* For main(), around srunner_run_all: every private dir of this run goes
 * under one run directory, which the second call removes — also what a
 * failed test left (Check ends it with _exit, skipping atexit). */
void harness_run_dir_create(void);
void harness_run_dir_remove(void);

/* For main(): imports the busybox test image as ref with $MSB_TESTIMAGE
 * (default tests/integration/testimage.sh). False, having said why on
 * stderr, when it could not be built. */
bool harness_test_image(const char *ref);

/* True when the last line of out (sh_out's: trailing newlines cut) is
 * exactly line: for `cmd && echo ok`, where the command's own output may
 * contain the marker's letters. */
bool harness_last_line_is(const char *out, const char *line);

/* Makes the private dir (p->dir, p->sock, p->log) without starting anything. */
void msbd_prepare(struct msbd_proc *p);
/* $MSB_FILE_PLANE (auto, local, archive), or NULL when unset: every daemon
 * the harness starts gets --set files.plane=<it> before the test's own
 * arguments (a test's own files.plane wins), and --set
 * files.journal_dir=$MSB_IT_RUN_DIR/journal (the run's own journal). */
const char *harness_file_plane(void);
/* Starts maf-sandboxd --socket p->sock plus args (NULL-terminated) and waits
 * until the socket accepts. prefix (NULL-terminated, may be NULL) is a
 * command put before the daemon (e.g. systemd-socket-activate ...); then the
 * daemon is not given --socket. */
void msbd_start(struct msbd_proc *p, const char *const *args);
void msbd_start_with(struct msbd_proc *p, const char *const *prefix, const char *const *args,
		     bool wait_for_socket);
/* SIGTERM, wait up to 20 s (then SIGKILL); returns the exit status, 128+sig
 * if killed by a signal. Removes the private dir. */
int msbd_stop(struct msbd_proc *p);
/* Like msbd_stop but keeps the private dir (msbd_stop removes it later). */
int msbd_stop_keep_dir(struct msbd_proc *p);
/* Waits up to timeout_ms for the daemon to exit by itself; returns its
 * status as msbd_stop does, or -1 if it is still running. */
int msbd_wait(struct msbd_proc *p, int timeout_ms);
/* Sends a signal. */
void msbd_signal(struct msbd_proc *p, int sig);
/* Prints the daemon's log to stderr (for a failing test). */
void msbd_dump_log(const struct msbd_proc *p);

/* One call through the C client; returns the result (new ref) or NULL and
 * fills *ret_code with the error code (0 on success). */
json_t *call(const char *sock, const char *method, json_t *params, int *ret_code, char **ret_type);
/* Polls daemon.status until engine.state == state, up to timeout_ms. Returns the last status. */
json_t *wait_engine_state(const char *sock, const char *state, int timeout_ms);

/* Runs the CLI with args (NULL-terminated); returns its exit status and,
 * if wanted, its stdout and stderr (malloc'd). */
int run_cli(const char *const *args, char **ret_out, char **ret_err);

/* Raw socket helpers for bad-input tests. */
int raw_connect(const char *path);
void raw_send(int fd, const void *buf, size_t len);
void raw_send_str(int fd, const char *s);
/* Reads one frame and parses it; NULL on EOF or timeout. */
json_t *raw_recv(int fd, int timeout_ms);
/* True if the peer closed the connection within timeout_ms (no more frames). */
bool raw_is_closed(int fd, int timeout_ms);

/* The engine socket the real engine listens on (from DOCKER_HOST if unix://,
 * else /var/run/docker.sock). */
const char *engine_socket_path(void);
/* GET path on the real engine, bypassing the daemon; returns the body and,
 * if wanted, the value of header (malloc'd). */
char *engine_get(const char *path, const char *header, char **ret_header_value);

/* Runs a host shell command (popen); returns its stdout, trailing newlines
 * cut, at most 64 KiB (malloc'd; empty if it could not run). No Check
 * assertion inside: main() may use it outside any test. */
char *sh_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Standard padded base64 of data (malloc'd): the tests' own, independent
 * of proto/base64.c, which they check. */
char *harness_b64_encode(const void *data, size_t len);
/* The bytes of o's base64 member key (sandbox.exec's stdout_b64), decoded
 * (proto/base64.c, strict) and NUL-terminated (malloc'd), or NULL when
 * absent, not a string or not base64. No Check assertion inside (threads
 * may call it). sandbox.exec gives stdout_text only with text: true. */
char *harness_b64_field(const json_t *o, const char *key);

/* Helpers on results. */
const char *jstr(json_t *root, const char *path);   /* "a.b.c" */
json_int_t jint(json_t *root, const char *path);
json_t *jget(json_t *root, const char *path);

/* ---- additions for the egress suites (check_egress*.c) ------------------ */

/* Removes (force) every container, then every network, labelled key=value.
 * No Check assertion inside: main() uses it outside any test. */
void engine_purge_label(const char *key, const char *value);
/* How many containers (all states) and networks carry label key=value
 * (extra: more `docker ... ls` filters, may be NULL). */
int engine_count_containers(const char *key, const char *value, const char *extra);
int engine_count_networks(const char *key, const char *value, const char *extra);
/* Sends one request frame {jsonrpc, id, method, params (stolen)} on a raw connection. */
void raw_request_send(int fd, json_int_t id, const char *method, json_t *params);
/* Starts the CLI with args (NULL-terminated), stdin /dev/null, stdout and
 * stderr to the files out_path and err_path; returns its pid (the caller
 * kills and reaps it). */
pid_t spawn_cli(const char *const *args, const char *out_path, const char *err_path);
/* The process id of a running container's first process, or 0. */
pid_t container_pid(const char *container);
/* A socket of (domain, type) made inside the network namespace of process
 * pid (0: the host's) and bound to addr; SOCK_NONBLOCK and SOCK_CLOEXEC are
 * added. Returns the fd or -errno. */
int netns_bound_socket(pid_t pid, int domain, int type, const void *addr, size_t addr_len);

/* ---- additions for the fault suite (check_faults.c) --------------------- */

/* What a process holds open (/proc/PID/fd), by kind. */
struct fd_census {
	int files;        /* anything but a socket: files, pipes, eventfd, ... */
	int on_sock;      /* Unix sockets listening at, or accepted on, the path sock */
	int other_sock;   /* every other socket (for maf-sandboxd: its engine connections) */
};
/* Counts pid's descriptors into *c (sock: the Unix socket path it serves).
 * False if /proc/PID/fd cannot be read (the process is gone). No Check
 * assertion inside. */
bool fd_census_take(pid_t pid, const char *sock, struct fd_census *c);

#endif
