/* bench.c — maf-sandbox-bench's main: options, the daemons it starts, the
 * levels, the interleaved rounds, cleanup (also on SIGINT/SIGTERM).
 *
 * A run: a private dir (mkdtemp) with the daemons' sockets and logs, their
 * shared freeze lock file (so each sees the other's freezes), their egress
 * state and write journals, and the local floor's journal; a test image
 * (busybox, tests/integration/testimage.sh) unless --image names one; one
 * maf-sandboxd per file plane of --planes, started with --set
 * files.plane=<plane>, each on its own socket, the main one (the first
 * named) first. Then, per level L: L clients (threads), each with its own
 * sandbox (key thread_id "c<i>", made by the main daemon, then acquired
 * through every other daemon too: the same container, which each daemon
 * must say it serves on its own plane), and the local floor's pin of it.
 * Per operation, max(1, ceil(N / divisor / L)) iterations (under --check
 * at least BENCH_CHECK_MIN_ITERS at one client for a checked op); in each,
 * one round per way (the daemon of each plane, the floor of each plane, the
 * seed's way), the ways in an order shuffled each iteration (Fisher-Yates,
 * splitmix64 from --order-seed, printed): in a round every client calls
 * once after a common start. A way's rounds make one row. What a round
 * needs is made untimed first, through the main daemon (the files a read or
 * stat reads; before an iteration of remove, one file per way); a way's
 * dispose disposes of the sandboxes its own cold acquires made; a failure
 * there is a setup error and fails the run. At the start and the end of an
 * iteration (after what it needs is made, before and after every way's
 * round) the bench reads every daemon's engine.call_requests (daemon.status
 * makes no engine request); the difference is its way's round's count, that
 * round being the daemon's only user in the iteration. At one client the
 * least requests per op over the rounds must be the floor's of that plane
 * (requests_compare), and a round whose count could not be read is a
 * failure, else the run fails.
 * Every sandbox and container carries the run label
 * maf-sandbox.label.msb-bench-run=<pid>; at exit (and on SIGINT or SIGTERM)
 * the daemons are stopped, and every container with the label is removed,
 * and the image if the bench built it. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bench.h"
#include "cleanup.h"
#include "msb.h"
#include "xmalloc.h"

#ifndef BENCH_DEFAULT_DAEMON
#define BENCH_DEFAULT_DAEMON "maf-sandboxd"
#endif
#ifndef BENCH_DEFAULT_TESTIMAGE
#define BENCH_DEFAULT_TESTIMAGE "tests/integration/testimage.sh"
#endif
#define BENCH_DEFAULT_ENGINE_SOCK "/var/run/docker.sock"
#define BENCH_IMAGE_REPO "maf-sandbox-bench"
/* The deadlines: small calls, 1 MiB calls, 32 MiB calls and lifecycles.
 * Generous: at 64 clients on 2 cores a 32 MiB write queues behind 63 others. */
#define DEADLINE_SMALL_MS  60000
#define DEADLINE_BIG_MS    300000

extern char **environ;

/* The local plane's goal (issue 9): at least this many times the seed's
 * way for a stat, a 4 KiB read and a 4 KiB write. */
#define LOCAL_GOAL_FACTOR 100

/* --check's factor for the small calls CI holds: daemon <= 3 x floor + 2 ms. */
#define CHECK_FACTOR BENCH_CHECK_FACTOR

/* name, divisor, deadline, bytes, file, seed goal (issue 8), file op, local goal, check factor */
static const struct op_info op_table[_OP_MAX] = {
	[OP_ACQUIRE_WARM] = { "acquire_warm", 1, DEADLINE_SMALL_MS, 0, NULL, 100, false, 0, CHECK_FACTOR },
	[OP_EXEC_TRUE]    = { "exec_true", 1, DEADLINE_SMALL_MS, 0, NULL, 1.2, false, 0, CHECK_FACTOR },
	[OP_EXEC_1M]      = { "exec_1m", 1, DEADLINE_SMALL_MS, 0, NULL, 1.2, false, 0, 0 },
	[OP_WRITE_4K]     = { "write_4k", 1, DEADLINE_SMALL_MS, 4 * BENCH_KIB, "f4k", 3, true, LOCAL_GOAL_FACTOR, CHECK_FACTOR },
	[OP_WRITE_1M]     = { "write_1m", 1, DEADLINE_SMALL_MS, BENCH_MIB, "f1m", 3, true, 0, 0 },
	[OP_WRITE_32M]    = { "write_32m", 4, DEADLINE_BIG_MS, 32 * BENCH_MIB, "f32m", 3, true, 0, 0 },
	[OP_STAT]         = { "stat", 1, DEADLINE_SMALL_MS, 4 * BENCH_KIB, "f4k", 5, true, LOCAL_GOAL_FACTOR, CHECK_FACTOR },
	[OP_READ_4K]      = { "read_4k", 1, DEADLINE_SMALL_MS, 4 * BENCH_KIB, "f4k", 5, true, LOCAL_GOAL_FACTOR, CHECK_FACTOR },
	[OP_READ_1M]      = { "read_1m", 1, DEADLINE_SMALL_MS, BENCH_MIB, "f1m", 5, true, 0, 0 },
	[OP_READ_32M]     = { "read_32m", 4, DEADLINE_BIG_MS, 32 * BENCH_MIB, "f32m", 5, true, 0, 0 },
	[OP_REMOVE]       = { "remove", 1, DEADLINE_SMALL_MS, 0, NULL, 0, true, 0, 0 },
	[OP_ACQUIRE_COLD] = { "acquire_cold", 4, DEADLINE_BIG_MS, 0, NULL, 1.5, false, 0, 0 },
	[OP_DISPOSE]      = { "dispose", 4, DEADLINE_BIG_MS, 0, NULL, 0, false, 0, 0 },
};

static const char *const impl_names[_IMPL_MAX] = {
	[IMPL_DAEMON] = "daemon", [IMPL_FLOOR] = "floor", [IMPL_SEED] = "seed",
};

static const char *const plane_names[_PLANE_MAX] = {
	[PLANE_ARCHIVE] = "archive", [PLANE_LOCAL] = "local",
};

const struct op_info *op_info(enum bench_op op)
{
	return &op_table[op];
}

const char *impl_to_string(enum bench_impl impl)
{
	return (unsigned)impl < _IMPL_MAX ? impl_names[impl] : "?";
}

const char *plane_to_string(enum bench_plane plane)
{
	return plane >= 0 && plane < _PLANE_MAX ? plane_names[plane] : "-";
}

enum bench_plane plane_from_string(const char *s)
{
	for (int i = 0; i < _PLANE_MAX; i++)
		if (!strcmp(s, plane_names[i]))
			return (enum bench_plane)i;
	return PLANE_NONE;
}

int op_from_string(const char *s)
{
	for (int i = 0; i < _OP_MAX; i++)
		if (!strcmp(s, op_table[i].name))
			return i;
	return -1;
}

double bench_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void client_fail(struct client *c, const char *fmt, ...)
{
	va_list ap;

	if (c->error[0])
		return;
	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
}

const char *bench_guest_path(const char *file, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", BENCH_WORK_DIR, file);
	return buf;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	return h;
}

void bench_box_cold(const struct client *c, enum bench_impl impl, enum bench_plane plane, unsigned iter,
		    struct bench_box *ret)
{
	char seed[128];

	memset(ret, 0, sizeof(*ret));
	snprintf(ret->thread, sizeof(ret->thread), "cold-%c%c-%u-%u-%u", impl_names[impl][0],
		 plane == PLANE_NONE ? 'x' : plane_names[plane][0], c->level, c->idx, iter);
	snprintf(seed, sizeof(seed), "%s|%s", c->b->scope, ret->thread);
	/* The daemon's cold boxes get their name from its answer. */
	if (impl != IMPL_DAEMON)
		snprintf(ret->name, sizeof(ret->name), "maf-sandbox-docker-%012llx",
			 (unsigned long long)(fnv1a(seed) & 0xffffffffffffULL));
}

void bench_exec_mark(char out[64])
{
	uint8_t raw[16];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		memset(raw, 0x5a, sizeof(raw));
	memcpy(out, "MSB_EXEC_ID=", 12);
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 12 + 2 * i, 3, "%02x", raw[i]);
}

/* ---- the run's resources, and cleanup ------------------------------------------- */

static pthread_mutex_t cleanup_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cleaned;
/* Set by the signal thread: batches still running print nothing more. */
static bool stopping;
/* When the run started (bench_now_ms), for the progress lines. */
static double run_t0;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void daemon_log_tail(const struct bench_daemon *d);

static void daemon_stop(struct bench *b, struct bench_daemon *d)
{
	double end;
	int st = 0;

	if (d->pid <= 0)
		return;
	kill(d->pid, SIGTERM);
	end = bench_now_ms() + BENCH_DAEMON_STOP_MS;
	while (waitpid(d->pid, &st, WNOHANG) == 0) {
		if (bench_now_ms() > end) {
			fprintf(stderr, "bench: maf-sandboxd (%s plane) did not stop within %d ms of SIGTERM; killed\n",
				plane_to_string(d->plane), BENCH_DAEMON_STOP_MS);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
			break;
		}
		usleep(20 * 1000);
	}
	d->pid = 0;
	/* Under sanitizers a leak or an error shows here. */
	d->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (d->status != 0) {
		fprintf(stderr, "bench: maf-sandboxd (%s plane) exited with status %d\n", plane_to_string(d->plane),
			d->status);
		daemon_log_tail(d);
		if (b->daemon_status == 0)
			b->daemon_status = d->status;
	}
}

/* Once: the daemon stopped, our containers (and image) removed, the dir gone. */
static void cleanup_all(struct bench *b)
{
	int n;

	pthread_mutex_lock(&cleanup_lock);
	if (cleaned) {
		pthread_mutex_unlock(&cleanup_lock);
		return;
	}
	cleaned = true;
	for (int p = 0; p < _PLANE_MAX; p++)
		daemon_stop(b, &b->daemons[p]);
	n = floor_cleanup(b);
	if (n > 0 && b->verbose)
		fprintf(stderr, "bench: removed %d container(s) of run %s\n", n, b->run_id);
	if (n < 0)
		fprintf(stderr, "bench: could not list the run's containers; look for label %s=%s\n",
			BENCH_RUN_LABEL_FULL, b->run_id);
	if (b->dir[0])
		nftw(b->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	pthread_mutex_unlock(&cleanup_lock);
}

static void *signal_thread(void *arg)
{
	struct bench *b = arg;
	sigset_t set;
	int sig = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	if (sigwait(&set, &sig) != 0)
		return NULL;
	__atomic_store_n(&stopping, true, __ATOMIC_SEQ_CST);
	fprintf(stderr, "\nbench: %s: stopping the daemon and removing the run's containers\n", strsignal(sig));
	cleanup_all(b);
	_exit(128 + sig);
}

/* A child starts with what the bench changed undone: the signals main
 * blocks (else the daemon would never see its SIGTERM) and SIGPIPE. */
void child_signals_reset(void)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
}

void child_spawnattr(posix_spawnattr_t *attr)
{
	sigset_t none, pipe;

	sigemptyset(&none);
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	posix_spawnattr_init(attr);
	posix_spawnattr_setsigmask(attr, &none);
	posix_spawnattr_setsigdefault(attr, &pipe);
	posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

/* Runs argv (NULL-terminated) to its end; its exit status, or -1. */
static int run_wait(const char *const *argv)
{
	posix_spawnattr_t attr;
	pid_t pid;
	int st, r;

	child_spawnattr(&attr);
	r = posix_spawnp(&pid, argv[0], NULL, &attr, (char *const *)argv, environ);
	posix_spawnattr_destroy(&attr);
	if (r != 0)
		return -1;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int image_build(struct bench *b)
{
	const char *argv[] = { "sh", b->testimage_script, b->image_ref, NULL };

	snprintf(b->image_ref, sizeof(b->image_ref), "%s:run-%s", BENCH_IMAGE_REPO, b->run_id);
	argv[2] = b->image_ref;
	b->image_built = true;   /* a half-made one is removed too */
	if (run_wait(argv) != 0) {
		fprintf(stderr, "bench: could not build the test image with %s\n", b->testimage_script);
		return -1;
	}
	return 0;
}

static bool socket_accepts(const char *path)
{
	struct msb_conn *conn = NULL;

	if (msb_connect(path, &conn) < 0)
		return false;
	msb_conn_free(conn);
	return true;
}

static void daemon_child(const struct bench *b, const struct bench_daemon *d)
{
	const char *argv[64];
	char *sets[8];
	size_t n = 0, k = 0;
	int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	child_signals_reset();
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	/* One lock file for every daemon: each sees the others' freezes. */
	sets[k++] = xasprintf("freeze.lock_file=%s/freeze.lock", b->dir);
	sets[k++] = xasprintf("egress.state_dir=%s/egress-%s", b->dir, plane_to_string(d->plane));
	sets[k++] = xasprintf("%s=%s", BENCH_PLANE_KEY, plane_to_string(d->plane));
	sets[k++] = xasprintf("files.journal_dir=%s/journal-%s", b->dir, plane_to_string(d->plane));
	argv[n++] = b->daemon_path;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--set";
	argv[n++] = "egress.proxy_binary=";
	for (size_t i = 0; i < k; i++) {
		argv[n++] = "--set";
		argv[n++] = sets[i];
	}
	for (unsigned i = 0; i < b->n_set && n + 3 < ELEMENTSOF(argv); i++) {
		argv[n++] = "--set";
		argv[n++] = b->set[i];
	}
	argv[n] = NULL;
	execv(argv[0], (char *const *)argv);
	fprintf(stderr, "bench: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static void daemon_log_tail(const struct bench_daemon *d)
{
	const char *argv[] = { "tail", "-n", "30", d->log, NULL };

	fprintf(stderr, "bench: the %s-plane daemon's log (%s), last lines:\n", plane_to_string(d->plane), d->log);
	run_wait(argv);
}

/* Starts d's daemon and waits until its socket accepts. */
static int daemon_listen(struct bench *b, struct bench_daemon *d, double end)
{
	int st;

	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0)
		daemon_child(b, d);
	while (!socket_accepts(d->sock)) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			d->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			fprintf(stderr, "bench: maf-sandboxd (%s plane) exited at start\n", plane_to_string(d->plane));
			daemon_log_tail(d);
			return -1;
		}
		if (bench_now_ms() > end) {
			fprintf(stderr, "bench: maf-sandboxd (%s plane) did not listen within %d ms\n",
				plane_to_string(d->plane), BENCH_DAEMON_START_MS);
			daemon_log_tail(d);
			return -1;
		}
		usleep(20 * 1000);
	}
	return 0;
}

static void conn_freep(struct msb_conn **conn)
{
	msb_conn_free(*conn);
}

/* One daemon.status: 1 when the engine is reachable (its API version into
 * api), 0 not yet, -1 when the daemon will not serve d's plane. */
static int daemon_ready(struct bench_daemon *d, char *api, size_t n)
{
	json_auto_t *res = NULL;
	_cleanup_(conn_freep) struct msb_conn *conn = NULL;
	const char *state, *version, *plane;

	if (msb_connect(d->sock, &conn) != MSB_OK || msb_status(conn, &res) != MSB_OK)
		return 0;
	plane = json_string_value(json_object_get(res, "file_plane"));
	if (json_is_string(json_object_get(res, "file_plane_reason")))
		snprintf(d->reason, sizeof(d->reason), "%s",
			 json_string_value(json_object_get(res, "file_plane_reason")));
	if (!plane || strcmp(plane, plane_to_string(d->plane))) {
		fprintf(stderr, "bench: the daemon started with %s=%s serves the %s plane%s%s%s\n", BENCH_PLANE_KEY,
			plane_to_string(d->plane), plane ? plane : "(unnamed: no file_plane in daemon.status)",
			d->reason[0] ? " (" : "", d->reason, d->reason[0] ? ")" : "");
		return -1;
	}
	state = json_string_value(json_object_get(json_object_get(res, "engine"), "state"));
	version = json_string_value(json_object_get(json_object_get(res, "engine"), "api_version"));
	if (!state || strcmp(state, "reachable") || !version)
		return 0;
	snprintf(api, n, "%s", version);
	return 1;
}

/* Starts d's daemon and waits until it serves its plane with the engine
 * reachable. The main daemon's API version is the floor's too. */
static int daemon_start(struct bench *b, struct bench_daemon *d)
{
	double end = bench_now_ms() + BENCH_DAEMON_START_MS;
	char api[sizeof(b->api)] = "";
	int r;

	if (daemon_listen(b, d, end) < 0)
		return -1;
	while ((r = daemon_ready(d, api, sizeof(api))) == 0) {
		if (bench_now_ms() > end) {
			fprintf(stderr, "bench: the %s-plane daemon does not reach the engine\n", plane_to_string(d->plane));
			daemon_log_tail(d);
			return -1;
		}
		usleep(50 * 1000);
	}
	if (r < 0) {
		daemon_log_tail(d);
		return -1;
	}
	if (d->plane == b->main_plane)
		snprintf(b->api, sizeof(b->api), "%s", api);
	return 0;
}

/* The first three fields of /proc/loadavg: how busy the machine was. */
void loadavg(char *buf, size_t n)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/loadavg", "re");
	double a = 0, b5 = 0, c = 0;

	if (f && fscanf(f, "%lf %lf %lf", &a, &b5, &c) == 3)
		snprintf(buf, n, "%.2f %.2f %.2f", a, b5, c);
	else
		snprintf(buf, n, "?");
}

static void machine_info(struct bench *b)
{
	struct bench_machine *m = &b->machine;
	struct utsname u;
	_cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
	char line[256];

	if (uname(&u) == 0)
		snprintf(m->kernel, sizeof(m->kernel), "%s", u.release);
	m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &m->mem_total_kib) == 1)
			break;
	floor_engine_version(b, m);
	seedway_cli_version(b, m->docker_cli, sizeof(m->docker_cli));
	loadavg(m->load_start, sizeof(m->load_start));
}

/* The content every write sends (a prefix of it for the smaller ones). */
static void payload_make(struct bench *b)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	b->payload_len = 32 * BENCH_MIB;
	b->payload = xmalloc(b->payload_len);
	for (size_t i = 0; i < b->payload_len; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		b->payload[i] = (uint8_t)x;
	}
}

/* ---- batches --------------------------------------------------------------------- */

enum job {
	JOB_TIMED,        /* the op, timed */
	JOB_UNTIMED,      /* the op, for what a later round needs (or cleans) */
	JOB_BOX,          /* the client's own sandbox, through the batch's daemon */
	JOB_RM_FILE,      /* the file the remove of iteration `first` removes, through the daemon */
	JOB_WRITE_FILE,   /* the file of op (a read's, stat's), through the daemon */
};

/* A way: who runs the op, and on which plane (PLANE_NONE: the seed's). */
struct way {
	enum bench_impl impl;
	enum bench_plane plane;
};

/* One round of a way: its calls, and (once known) its engine requests. */
struct round_rec {
	double lat;               /* the call's latency when clean */
	double ops;               /* calls made */
	double req, base;         /* requests; of those, not the floor's retries */
	bool clean;               /* one client, one call, answered */
	bool counted;             /* its count is known */
};

/* What the rounds of one way at one level gather, made a row at the end. */
struct acc {
	double *lat;
	size_t n_lat, cap;
	unsigned errors, hangs;
	char error[BENCH_ERROR_TEXT];
	double wall_ms;
	double requests;          /* summed over the counted rounds */
	double ops;
	double req_min;           /* level 1: the least per op over the rounds; <0 none */
	struct round_rec *rounds;
	size_t n_rounds, cap_rounds;
	/* level 1: --check's median (acc_check), over the rounds not over the floor's count */
	double p50_check;
	size_t n_check;
	unsigned retry_rounds;
};

struct batch {
	struct bench *b;
	struct client *clients;
	unsigned n;
	enum bench_op op;
	enum bench_impl impl;
	enum bench_plane plane;   /* the daemon's or the floor's */
	unsigned first, iters;    /* the iterations each client runs: first .. first + iters - 1 */
	enum job job;
	pthread_barrier_t bar;
};

struct worker {
	struct batch *batch;
	struct client *c;
};

static enum bench_outcome run_one(struct client *c, enum bench_impl impl, enum bench_op op, unsigned iter)
{
	switch (impl) {
	case IMPL_DAEMON:
		return daemonway_run(c, op, iter);
	case IMPL_FLOOR:
		return floor_run(c, op, iter);
	case IMPL_SEED:
		return seedway_run(c, op, iter);
	default:
		return OUT_ERROR;
	}
}

static void count(struct client *c, enum bench_outcome o)
{
	if (o == OUT_ERROR)
		c->errors++;
	else if (o == OUT_HANG)
		c->hangs++;
}

static void worker_ops(struct batch *bt, struct client *c)
{
	for (unsigned i = bt->first; i < bt->first + bt->iters; i++) {
		double t0, t1;
		enum bench_outcome o;

		if (bt->op == OP_ACQUIRE_COLD)
			bench_box_cold(c, bt->impl, bt->plane, i, &c->cold[i]);
		if (bt->op == OP_DISPOSE && !c->cold[i].id[0])
			continue;   /* its acquire failed: nothing to dispose of */
		t0 = bench_now_ms();
		o = run_one(c, bt->impl, bt->op, i);
		t1 = bench_now_ms();
		if (c->t_start == 0)
			c->t_start = t0;
		c->t_end = t1;
		count(c, o);
		if (o == OUT_OK && bt->job == JOB_TIMED)
			c->lat_ms[c->n_lat++] = t1 - t0;
		if (bt->op == OP_ACQUIRE_COLD && o != OUT_OK && bt->impl != IMPL_DAEMON)
			c->cold[i].id[0] = '\0';   /* the exit cleanup finds what is left by its label */
		if (bt->op == OP_DISPOSE)
			c->cold[i].id[0] = '\0';
	}
}

/* The client's sandbox through c->plane's daemon: made by the first one
 * asked, the same container from every other. */
static int box_acquire(struct client *c)
{
	struct bench_box box = c->box;

	snprintf(box.thread, sizeof(box.thread), "c%u", c->idx);
	if (daemonway_acquire_box(c, &box) < 0)
		return -1;
	if (c->box.id[0] && strcmp(c->box.id, box.id)) {
		client_fail(c, "the %s-plane daemon gave sandbox %.12s for key c%u, the first daemon %.12s",
			    plane_to_string(c->plane), box.id, c->idx, c->box.id);
		return -1;
	}
	c->box = box;
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct batch *bt = w->batch;
	struct client *c = w->c;
	char file[32];

	pthread_barrier_wait(&bt->bar);
	switch (bt->job) {
	case JOB_TIMED:
	case JOB_UNTIMED:
		worker_ops(bt, c);
		break;
	case JOB_BOX:
		if (box_acquire(c) < 0)
			c->errors++;
		break;
	case JOB_RM_FILE:
		snprintf(file, sizeof(file), "rm-%u", bt->first);
		if (daemonway_write_file(c, file, 0) < 0)
			c->errors++;
		break;
	case JOB_WRITE_FILE:
		if (daemonway_write_file(c, op_info(bt->op)->file, op_info(bt->op)->bytes) < 0)
			c->errors++;
		break;
	}
	return NULL;
}

static void batch_reset_clients(struct batch *bt)
{
	for (unsigned i = 0; i < bt->n; i++) {
		struct client *c = &bt->clients[i];

		c->plane = bt->plane != PLANE_NONE ? bt->plane : bt->b->main_plane;
		c->n_lat = 0;
		c->t_start = c->t_end = 0;
		c->errors = c->hangs = 0;
		c->requests = 0;
		c->error[0] = '\0';
		free(c->lat_ms);
		c->lat_ms = xcalloc(bt->iters ? bt->iters : 1, sizeof(*c->lat_ms));
	}
}

/* The engine requests the batch's floor made, and of those the retries. */
static void floor_counts(const struct batch *bt, uint64_t *ret_req, uint64_t *ret_retries)
{
	*ret_req = *ret_retries = 0;
	for (unsigned i = 0; i < bt->n; i++) {
		*ret_req += floor_conn_requests(bt->clients[i].floor);
		*ret_retries += floor_conn_retries(bt->clients[i].floor);
	}
}

/* The round's samples into acc; the index of its record (its count comes
 * later: acc_count). */
static size_t acc_add(struct acc *acc, const struct batch *bt, double wall_ms)
{
	struct round_rec *r;
	double ops = 0;

	for (unsigned i = 0; i < bt->n; i++) {
		const struct client *c = &bt->clients[i];

		if (acc->n_lat + c->n_lat > acc->cap) {
			acc->cap = (acc->n_lat + c->n_lat) * 2;
			acc->lat = xrealloc(acc->lat, acc->cap * sizeof(*acc->lat));
		}
		memcpy(acc->lat + acc->n_lat, c->lat_ms, c->n_lat * sizeof(*acc->lat));
		acc->n_lat += c->n_lat;
		acc->errors += c->errors;
		acc->hangs += c->hangs;
		ops += c->n_lat + c->errors + c->hangs;
		if (!acc->error[0] && c->error[0])
			snprintf(acc->error, sizeof(acc->error), "%s", c->error);
	}
	acc->wall_ms += wall_ms;
	if (acc->n_rounds == acc->cap_rounds) {
		acc->cap_rounds = acc->cap_rounds ? 2 * acc->cap_rounds : 8;
		acc->rounds = xrealloc(acc->rounds, acc->cap_rounds * sizeof(*acc->rounds));
	}
	r = &acc->rounds[acc->n_rounds];
	/* One client, one call, all of it answered: the round's count is the op's. */
	*r = (struct round_rec){ .ops = ops, .clean = bt->n == 1 && ops == 1 && bt->clients[0].n_lat == 1 &&
							bt->clients[0].errors + bt->clients[0].hangs == 0 };
	if (r->clean)
		r->lat = bt->clients[0].lat_ms[0];
	return acc->n_rounds++;
}

/* Round idx's engine requests. An unknown count drops the round from the
 * counts; at one client it is a failure (the comparison cannot be made). */
static void acc_count(struct bench *b, struct acc *acc, size_t idx, enum bench_op op, unsigned level, struct way w,
		      double requests, double base, bool known)
{
	struct round_rec *r = &acc->rounds[idx];

	if (!known) {
		fprintf(stderr, "  %s L=%u %s %s: a round's engine requests could not be read; the round is left out "
			"of the counts%s\n", op_info(op)->name, level, impl_to_string(w.impl), plane_to_string(w.plane),
			level == 1 ? " (a failure: its count cannot be compared)" : "");
		if (level == 1)
			b->request_mismatches++;
		return;
	}
	r->req = requests;
	r->base = base;
	r->counted = true;
	acc->requests += requests;
	acc->ops += r->ops;
	if (r->clean && (acc->req_min < 0 || base < acc->req_min))
		acc->req_min = base;
}

/* --check's median of a level-1 way: over its clean, counted rounds that
 * made no more requests than max_req (the daemon: its floor's least count;
 * the floor: its own sequence, no retry). The others are retry rounds. */
static void acc_check(struct acc *acc, double max_req, bool is_floor)
{
	_cleanup_free_ double *v = xcalloc(acc->n_rounds + 1, sizeof(*v));
	size_t n = 0;

	acc->retry_rounds = 0;
	for (size_t i = 0; i < acc->n_rounds; i++) {
		const struct round_rec *r = &acc->rounds[i];

		if (!r->clean || !r->counted)
			continue;
		if (is_floor ? r->req > r->base : max_req >= 0 && r->base > max_req) {
			acc->retry_rounds++;
			continue;
		}
		v[n++] = r->lat;
	}
	acc->n_check = n;
	acc->p50_check = NAN;
	if (n) {
		struct bench_result tmp;

		stats_row(&tmp, v, n, 0);
		acc->p50_check = tmp.p50;
	}
}

/* Runs one batch: every client in its own thread, released together. For
 * a timed one, its samples go to acc, and its engine requests too, but for
 * a daemon's: those the caller reads around the iteration and gives
 * acc_count for the round *ret_round (may be NULL otherwise). Returns the
 * number of failures (errors + hangs). */
static unsigned batch_run(struct bench *b, struct client *clients, unsigned n, enum bench_op op,
			  struct way w, unsigned first, unsigned iters, enum job job, struct acc *acc, size_t *ret_round)
{
	struct batch bt = { .b = b, .clients = clients, .n = n, .op = op, .impl = w.impl, .plane = w.plane,
			    .first = first, .iters = iters, .job = job };
	_cleanup_free_ pthread_t *tids = xcalloc(n, sizeof(*tids));
	_cleanup_free_ struct worker *ws = xcalloc(n, sizeof(*ws));
	uint64_t f_req0 = 0, f_ret0 = 0, f_req1 = 0, f_ret1 = 0;
	double t0, t1;
	unsigned started = 0, fails = 0;

	batch_reset_clients(&bt);
	floor_counts(&bt, &f_req0, &f_ret0);
	pthread_barrier_init(&bt.bar, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		ws[i] = (struct worker){ &bt, &clients[i] };
		if (pthread_create(&tids[i], NULL, worker_main, &ws[i]) != 0) {
			fprintf(stderr, "bench: cannot start a client thread\n");
			abort();   /* the barrier cannot be released: nothing sane is left to do */
		}
		started++;
	}
	pthread_barrier_wait(&bt.bar);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	/* The round's wall time: from the first call's start to the last
	 * one's end (the clients' own clocks: a call of microseconds may end
	 * before this thread runs again). */
	t0 = t1 = 0;
	for (unsigned i = 0; i < n; i++) {
		if (clients[i].t_start > 0 && (t0 == 0 || clients[i].t_start < t0))
			t0 = clients[i].t_start;
		if (clients[i].t_end > t1)
			t1 = clients[i].t_end;
	}
	pthread_barrier_destroy(&bt.bar);
	floor_counts(&bt, &f_req1, &f_ret1);
	for (unsigned i = 0; i < n; i++)
		fails += clients[i].errors + clients[i].hangs;
	if (job == JOB_TIMED && acc) {
		size_t idx = acc_add(acc, &bt, t1 - t0);
		double req = 0, base = 0;

		if (ret_round)
			*ret_round = idx;
		if (w.impl == IMPL_FLOOR) {
			req = (double)(f_req1 - f_req0);
			base = req - (double)(f_ret1 - f_ret0);
			acc_count(b, acc, idx, op, n, w, req, base, true);
		} else if (w.impl == IMPL_SEED) {
			for (unsigned i = 0; i < n; i++)
				req += (double)clients[i].requests;
			acc_count(b, acc, idx, op, n, w, req, req, true);
		}
	} else if (fails) {
		for (unsigned i = 0; i < n; i++)
			if (clients[i].error[0]) {
				fprintf(stderr, "  (setup %s %s L=%u: %s)\n", op_info(op)->name, impl_to_string(w.impl), n,
					clients[i].error);
				break;
			}
	}
	return fails;
}

/* The row of one way's rounds. */
static void acc_record(struct bench *b, enum bench_op op, unsigned level, struct way w, struct acc *acc)
{
	struct bench_result *row;

	b->results = xrealloc(b->results, (b->n_results + 1) * sizeof(*b->results));
	row = &b->results[b->n_results++];
	*row = (struct bench_result){ .op = op, .level = level, .impl = w.impl, .plane = w.plane,
				      .errors = acc->errors, .hangs = acc->hangs,
				      .requests_per_op = acc->ops > 0 ? acc->requests / acc->ops : -1,
				      .requests_min = acc->req_min, .requests_match = -1,
				      .p50_check = level == 1 ? acc->p50_check : NAN, .n_check = acc->n_check,
				      .retry_rounds = acc->retry_rounds };
	snprintf(row->error, sizeof(row->error), "%s", acc->error);
	stats_row(row, acc->lat ? acc->lat : (double[1]){ 0 }, acc->n_lat, acc->wall_ms);
	free(acc->lat);
	acc->lat = NULL;
	free(acc->rounds);
	acc->rounds = NULL;
	if (__atomic_load_n(&stopping, __ATOMIC_SEQ_CST))
		return;
	fprintf(stderr, "  %-13s L=%-3u %-6s %-7s n=%-4zu p50 %9.2f ms  p99 %9.2f ms  %8.1f ops/s  req/op %5.1f  err %u hang %u%s%s\n",
		op_info(row->op)->name, row->level, impl_to_string(row->impl), plane_to_string(row->plane), row->n,
		row->p50, row->p99, row->ops_per_s, row->requests_per_op, row->errors, row->hangs,
		row->error[0] ? "  " : "", row->error);
}

static unsigned iterations(const struct bench *b, enum bench_op op, unsigned level)
{
	unsigned total = b->n / op_info(op)->divisor;
	unsigned per = (total + level - 1) / level;

	return per ? per : 1;
}

static bool is_read_of(enum bench_op op, enum bench_op write)
{
	return (write == OP_WRITE_4K && (op == OP_READ_4K || op == OP_STAT)) ||
	       (write == OP_WRITE_1M && op == OP_READ_1M) || (write == OP_WRITE_32M && op == OP_READ_32M);
}

static struct way main_daemon(const struct bench *b)
{
	return (struct way){ IMPL_DAEMON, b->main_plane };
}

/* The file a selected read or stat needs, when its write is not run. */
static void prepare_files(struct bench *b, struct client *clients, unsigned n)
{
	static const enum bench_op writes[] = { OP_WRITE_4K, OP_WRITE_1M, OP_WRITE_32M };

	for (size_t w = 0; w < ELEMENTSOF(writes); w++) {
		bool needed = false;

		if (b->ops[writes[w]])
			continue;
		for (int op = 0; op < _OP_MAX; op++)
			needed |= b->ops[op] && is_read_of(op, writes[w]);
		if (needed)
			b->setup_errors += batch_run(b, clients, n, writes[w], main_daemon(b), 0, 1, JOB_WRITE_FILE, NULL, NULL);
	}
}

/* The ways every op runs: the daemon and the floor of each plane (the
 * main one first), then the seed's. */
static size_t ways_of(const struct bench *b, struct way *ways)
{
	size_t n = 0;

	for (int k = 0; k < _PLANE_MAX; k++) {
		enum bench_plane p = (enum bench_plane)(((int)b->main_plane + k) % _PLANE_MAX);

		if (!b->planes[p])
			continue;
		if (b->impls[IMPL_DAEMON])
			ways[n++] = (struct way){ IMPL_DAEMON, p };
		if (b->impls[IMPL_FLOOR])
			ways[n++] = (struct way){ IMPL_FLOOR, p };
	}
	if (b->impls[IMPL_SEED])
		ways[n++] = (struct way){ IMPL_SEED, PLANE_NONE };
	return n;
}

/* At one client, the daemon's requests per op must be the floor's, plane
 * by plane (the least over the rounds: a retry of the engine's late pause
 * state adds to a round). Marks the daemon rows; counts the differences. */
static void requests_compare(struct bench *b, enum bench_op op, unsigned level, size_t first_row)
{
	if (level != 1)
		return;
	for (size_t i = first_row; i < b->n_results; i++) {
		struct bench_result *d = &b->results[i];

		if (d->op != op || d->impl != IMPL_DAEMON)
			continue;
		for (size_t k = first_row; k < b->n_results; k++) {
			const struct bench_result *f = &b->results[k];

			if (f->op != op || f->impl != IMPL_FLOOR || f->plane != d->plane)
				continue;
			if (d->requests_min < 0 || f->requests_min < 0)
				break;   /* nothing to compare (every round failed) */
			d->requests_match = d->requests_min == f->requests_min;
			/* The least count hides a daemon that adds requests only
			 * sometimes: its rounds above the floor's are named. */
			if (d->retry_rounds)
				fprintf(stderr, "  %s, %s plane: %u of the daemon's rounds made more engine requests than its "
					"floor's %.0f (the engine's late pause state retried, or requests only sometimes "
					"sent); left out of --check's median\n", op_info(op)->name, plane_to_string(d->plane),
					d->retry_rounds, f->requests_min);
			if (!d->requests_match) {
				b->request_mismatches++;
				fprintf(stderr, "  %s, %s plane: the daemon makes %.0f engine request(s) per op, its floor "
					"%.0f: the floor does not replay the daemon's sequence\n", op_info(op)->name,
					plane_to_string(d->plane), d->requests_min, f->requests_min);
			}
		}
	}
}

/* The remove of iteration i by the way in slot k: each way removes a file of
 * its own, so the files of an iteration are all made before its rounds. */
static unsigned rm_slot(unsigned i, size_t k)
{
	return i * BENCH_MAX_WAYS + (unsigned)k;
}

/* engine.call_requests of every daemon the ways use, into req (-1: not
 * read). daemon.status makes no engine request. */
static void counters_read(struct bench *b, struct client *c, long long req[_PLANE_MAX])
{
	enum bench_plane saved = c->plane;

	for (int p = 0; p < _PLANE_MAX; p++) {
		req[p] = -1;
		if (!b->planes[p] || !b->impls[IMPL_DAEMON])
			continue;
		c->plane = (enum bench_plane)p;
		req[p] = daemonway_call_requests(c);
	}
	c->plane = saved;
}

/* A seed for the ways' order when --order-seed is not given. */
static uint64_t order_seed_random(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	return v;
}

/* splitmix64: the ways' order only, not security. */
static uint64_t order_next(struct bench *b)
{
	uint64_t z = (b->order_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* order[0..nw): a permutation of the ways (Fisher-Yates). */
static void order_shuffle(struct bench *b, size_t *order, size_t nw)
{
	for (size_t k = 0; k < nw; k++)
		order[k] = k;
	for (size_t k = nw; k > 1; k--) {
		size_t j = (size_t)(order_next(b) % k), t = order[k - 1];

		order[k - 1] = order[j];
		order[j] = t;
	}
}

/* One iteration of op: a round of every way, in a shuffled order. What the
 * rounds need is made first (a remove's files), then every daemon's
 * counter is read, then the rounds run, then the counters again: the only
 * user of a daemon in between is its own way's round, so the difference is
 * that round's count, and no way's round follows a counter read on its own
 * daemon more than another's. A timed round's samples go to its way's acc;
 * an untimed round's failures (job JOB_UNTIMED) are setup errors. */
static void iteration_run(struct bench *b, struct client *clients, unsigned level, enum bench_op op,
			  const struct way *ways, size_t nw, unsigned i, enum job job, struct acc *accs)
{
	size_t order[BENCH_MAX_WAYS], round_of[BENCH_MAX_WAYS];
	long long before[_PLANE_MAX], after[_PLANE_MAX];

	order_shuffle(b, order, nw);
	if (op == OP_REMOVE)
		for (size_t k = 0; k < nw; k++)
			b->setup_errors += batch_run(b, clients, level, op, main_daemon(b), rm_slot(i, k), 1, JOB_RM_FILE,
						     NULL, NULL);
	counters_read(b, &clients[0], before);
	for (size_t k = 0; k < nw; k++) {
		size_t w = order[k];
		unsigned fails;

		if (op == OP_ACQUIRE_COLD || op == OP_DISPOSE)
			for (unsigned c = 0; c < level; c++)
				clients[c].cold = clients[c].cold_way[w];
		fails = batch_run(b, clients, level, op, ways[w], op == OP_REMOVE ? rm_slot(i, w) : i, 1, job,
				  job == JOB_TIMED ? &accs[w] : NULL, &round_of[w]);
		if (job != JOB_TIMED)
			b->setup_errors += fails;
	}
	counters_read(b, &clients[0], after);
	if (job != JOB_TIMED)
		return;
	for (size_t w = 0; w < nw; w++) {
		enum bench_plane p = ways[w].plane;

		if (ways[w].impl != IMPL_DAEMON)
			continue;
		acc_count(b, &accs[w], round_of[w], op, level, ways[w], (double)(after[p] - before[p]),
			  (double)(after[p] - before[p]), before[p] >= 0 && after[p] >= before[p]);
	}
}

/* At one client, a daemon whose every round made more requests than its
 * floor's sequence may have met the engine's late pause state each time (a
 * pause or unpause asked again): up to BENCH_RECHECKS more rounds through
 * it, counted (its counter read around each) and not timed, before the
 * counts are compared. Their failures are setup errors. */
static void requests_recheck(struct bench *b, struct client *clients, unsigned level, enum bench_op op,
			     const struct way *ways, size_t nw, struct acc *accs, unsigned iters)
{
	if (level != 1 || op == OP_DISPOSE)
		return;   /* a dispose freezes nothing (and would need sandboxes of its own) */
	for (size_t d = 0; d < nw; d++) {
		if (ways[d].impl != IMPL_DAEMON)
			continue;
		if (op == OP_ACQUIRE_COLD)   /* its sandboxes past the rounds' (the exit cleanup removes them) */
			for (unsigned c = 0; c < level; c++)
				clients[c].cold = clients[c].cold_way[d];
		for (size_t f = 0; f < nw; f++) {
			if (ways[f].impl != IMPL_FLOOR || ways[f].plane != ways[d].plane)
				continue;
			for (unsigned r = 0; r < BENCH_RECHECKS && accs[f].req_min >= 0 &&
					     accs[d].req_min > accs[f].req_min; r++) {
				struct acc scratch = { .req_min = -1 };
				unsigned first = op == OP_REMOVE ? rm_slot(iters + r, d) : iters + r;
				long long before[_PLANE_MAX], after[_PLANE_MAX];
				enum bench_plane p = ways[d].plane;
				size_t idx = 0;

				if (op == OP_REMOVE)
					b->setup_errors += batch_run(b, clients, level, op, main_daemon(b), first, 1,
								     JOB_RM_FILE, NULL, NULL);
				counters_read(b, &clients[0], before);
				batch_run(b, clients, level, op, ways[d], first, 1, JOB_TIMED, &scratch, &idx);
				counters_read(b, &clients[0], after);
				acc_count(b, &scratch, idx, op, level, ways[d], (double)(after[p] - before[p]),
					  (double)(after[p] - before[p]), before[p] >= 0 && after[p] >= before[p]);
				b->setup_errors += scratch.errors + scratch.hangs;
				if (scratch.req_min >= 0 && scratch.req_min < accs[d].req_min)
					accs[d].req_min = scratch.req_min;
				free(scratch.lat);
				free(scratch.rounds);
			}
		}
	}
}

/* Level 1: each way's --check median, leaving out its retry rounds (the
 * daemon's: more requests than its floor's least; the floor's: a retry). */
static void accs_check(struct bench *b, unsigned level, const struct way *ways, size_t nw, struct acc *accs)
{
	(void)b;
	if (level != 1)
		return;
	for (size_t w = 0; w < nw; w++) {
		double max_req = -1;

		if (ways[w].impl == IMPL_DAEMON)
			for (size_t f = 0; f < nw; f++)
				if (ways[f].impl == IMPL_FLOOR && ways[f].plane == ways[w].plane)
					max_req = accs[f].req_min;
		acc_check(&accs[w], max_req, ways[w].impl == IMPL_FLOOR);
	}
}

/* The rounds one op runs at a level: N spread over the clients; under
 * --check at least BENCH_CHECK_MIN_ITERS at one client for a checked op. */
static unsigned op_iterations(const struct bench *b, enum bench_op op, unsigned level)
{
	unsigned n = iterations(b, op, level);

	if (b->check && level == 1 && op_info(op)->check_factor > 0 && n < BENCH_CHECK_MIN_ITERS)
		n = BENCH_CHECK_MIN_ITERS;
	return n;
}

/* One op at one level: per iteration a round of every way, the ways in an
 * order shuffled each iteration. */
static void run_op(struct bench *b, struct client *clients, unsigned level, enum bench_op op)
{
	struct way ways[BENCH_MAX_WAYS];
	struct acc accs[BENCH_MAX_WAYS];
	size_t nw = ways_of(b, ways), first_row = b->n_results;
	unsigned iters = op_iterations(b, op, level);

	for (size_t k = 0; k < nw; k++)
		accs[k] = (struct acc){ .req_min = -1, .p50_check = NAN };
	for (unsigned i = 0; i < iters && !__atomic_load_n(&stopping, __ATOMIC_SEQ_CST); i++)
		iteration_run(b, clients, level, op, ways, nw, i, JOB_TIMED, accs);
	requests_recheck(b, clients, level, op, ways, nw, accs, iters);
	accs_check(b, level, ways, nw, accs);
	for (size_t k = 0; k < nw; k++)
		acc_record(b, op, level, ways[k], &accs[k]);
	requests_compare(b, op, level, first_row);
}

/* acquire_cold then dispose, interleaved as run_op does: each timed when
 * chosen, untimed when only the other is (dispose needs the sandboxes;
 * cold ones are removed). Each way disposes of the sandboxes it made. */
static void run_lifecycle(struct bench *b, struct client *clients, unsigned n)
{
	static const enum bench_op ops[] = { OP_ACQUIRE_COLD, OP_DISPOSE };
	struct way ways[BENCH_MAX_WAYS];
	size_t nw = ways_of(b, ways);
	unsigned iters = iterations(b, OP_ACQUIRE_COLD, n);

	if (iterations(b, OP_DISPOSE, n) > iters)
		iters = iterations(b, OP_DISPOSE, n);
	for (unsigned i = 0; i < n; i++) {
		clients[i].n_cold = iters + BENCH_RECHECKS;
		for (size_t k = 0; k < nw; k++) {
			free(clients[i].cold_way[k]);
			clients[i].cold_way[k] = xcalloc(iters + BENCH_RECHECKS, sizeof(*clients[i].cold_way[k]));
		}
	}
	for (size_t o = 0; o < ELEMENTSOF(ops); o++) {
		enum bench_op op = ops[o];
		enum job job = b->ops[op] ? JOB_TIMED : JOB_UNTIMED;
		struct acc accs[BENCH_MAX_WAYS];
		size_t first_row = b->n_results;

		for (size_t k = 0; k < nw; k++)
			accs[k] = (struct acc){ .req_min = -1, .p50_check = NAN };
		for (unsigned i = 0; i < iters && !__atomic_load_n(&stopping, __ATOMIC_SEQ_CST); i++)
			iteration_run(b, clients, n, op, ways, nw, i, job, accs);
		if (job == JOB_TIMED) {
			requests_recheck(b, clients, n, op, ways, nw, accs, iters);
			accs_check(b, n, ways, nw, accs);
			for (size_t k = 0; k < nw; k++)
				acc_record(b, op, n, ways[k], &accs[k]);
			requests_compare(b, op, n, first_row);
		} else {
			for (size_t k = 0; k < nw; k++) {
				free(accs[k].lat);
				free(accs[k].rounds);
			}
		}
	}
}

/* A level whose sandboxes could not be made: one failed row says why. */
static void record_box_failure(struct bench *b, const struct client *clients, unsigned level,
			       enum bench_plane plane)
{
	struct bench_result *row;

	fprintf(stderr, "bench: level %u: the clients' sandboxes could not be had from the %s-plane daemon; "
		"skipped\n", level, plane_to_string(plane));
	b->results = xrealloc(b->results, (b->n_results + 1) * sizeof(*b->results));
	row = &b->results[b->n_results++];
	*row = (struct bench_result){ .op = OP_ACQUIRE_WARM, .level = level, .impl = IMPL_DAEMON, .plane = plane,
				      .errors = 1, .p50 = NAN, .p95 = NAN, .p99 = NAN, .ops_per_s = NAN,
				      .requests_per_op = -1, .requests_min = -1, .requests_match = -1 };
	for (unsigned i = 0; i < level; i++)
		if (clients[i].error[0]) {
			snprintf(row->error, BENCH_ERROR_TEXT, "%s", clients[i].error);
			break;
		}
}

/* Each client's sandbox, made through the main daemon, then acquired
 * through every other (the same container); the local floor's pins. False
 * when one failed. */
static bool boxes_make(struct bench *b, struct client *clients, unsigned level)
{
	if (batch_run(b, clients, level, OP_ACQUIRE_WARM, main_daemon(b), 0, 1, JOB_BOX, NULL, NULL) != 0) {
		record_box_failure(b, clients, level, b->main_plane);
		return false;
	}
	for (int p = 0; p < _PLANE_MAX; p++) {
		if (!b->planes[p] || p == (int)b->main_plane)
			continue;
		if (batch_run(b, clients, level, OP_ACQUIRE_WARM, (struct way){ IMPL_DAEMON, (enum bench_plane)p }, 0, 1,
			      JOB_BOX, NULL, NULL) != 0) {
			record_box_failure(b, clients, level, (enum bench_plane)p);
			return false;
		}
	}
	if (b->planes[PLANE_ARCHIVE] && b->impls[IMPL_FLOOR])
		for (unsigned i = 0; i < level; i++)
			if (floor_guest_setup(&clients[i]) < 0) {
				record_box_failure(b, clients, level, PLANE_ARCHIVE);
				return false;
			}
	if (b->planes[PLANE_LOCAL] && b->impls[IMPL_FLOOR])
		for (unsigned i = 0; i < level; i++)
			if (floor_local_setup(&clients[i]) < 0) {
				record_box_failure(b, clients, level, PLANE_LOCAL);
				return false;
			}
	return true;
}

static void run_level(struct bench *b, unsigned level)
{
	struct client *clients = xcalloc(level, sizeof(*clients));

	fprintf(stderr, "level %u: %u client(s) (at %.1f s)\n", level, level, (bench_now_ms() - run_t0) / 1000);
	for (unsigned i = 0; i < level; i++)
		clients[i] = (struct client){ .b = b, .idx = i, .level = level };
	if (boxes_make(b, clients, level)) {
		prepare_files(b, clients, level);
		for (int op = 0; op < _OP_MAX; op++)
			if (b->ops[op] && op != OP_ACQUIRE_COLD && op != OP_DISPOSE)
				run_op(b, clients, level, (enum bench_op)op);
		if (b->ops[OP_ACQUIRE_COLD] || b->ops[OP_DISPOSE])
			run_lifecycle(b, clients, level);
	}
	for (unsigned i = 0; i < level; i++) {
		daemonway_client_close(&clients[i]);
		floor_conn_free(clients[i].floor);
		floorlocal_free(clients[i].flocal);
		free(clients[i].lat_ms);
		for (size_t k = 0; k < BENCH_MAX_WAYS; k++)
			free(clients[i].cold_way[k]);
	}
	free(clients);
}

/* ---- options --------------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: maf-sandbox-bench [OPTIONS]\n\n"
		"Runs each maf-sandboxd operation N times at each concurrency level, the ways interleaved\n"
		"(a round of each per iteration, in an order shuffled each iteration): through the daemon\n"
		"of each file plane, as that plane's floor (the daemon's Engine API requests sent directly;\n"
		"on the local plane the daemon's own plane code called directly) and the seed's way (one\n"
		"docker CLI process per step); prints p50/p95/p99, ops/s and engine requests per op, and\n"
		"the ratios daemon/floor and seed/daemon per plane. Starts its own maf-sandboxd per file\n"
		"plane, each on a private socket. At one client the daemon's requests per op must be its\n"
		"floor's, plane by plane.\n\n"
		"Options:\n"
		"  -n, --iterations N   samples per op and level, spread over the clients (default %u;\n"
		"                       32 MiB ops and lifecycles take N/4; at least one per client)\n"
		"  -l, --levels LIST    concurrent clients, comma-separated (default 1,16,64)\n"
		"  -o, --ops LIST       ops to run, comma-separated (default all):\n"
		"                       ", BENCH_DEFAULT_N);
	for (int i = 0; i < _OP_MAX; i++)
		fprintf(out, "%s%s", op_table[i].name, i + 1 < _OP_MAX ? "," : "\n");
	fprintf(out,
		"  -j, --json FILE      also write the results as JSON\n"
		"  -q, --quick          a smoke run: N=%u, levels 1,2, no 32 MiB ops unless --ops names them\n"
		"  -c, --check          also fail when, at one client, the daemon's median is over\n"
		"                       %g x its floor's + %g ms for acquire_warm, exec_true, stat,\n"
		"                       read_4k or write_4k, on a plane (doc/BENCH.md's goals are\n"
		"                       reported, never held); those ops run at least %d rounds at\n"
		"                       one client, and a retry round (more engine requests than\n"
		"                       the floor's sequence) is left out of the checked medians;\n"
		"                       dropped when MSB_TEST_SLOW is set (valgrind: timing says nothing)\n"
		"      --order-seed S   seed the shuffle of the ways' order (default random; printed)\n"
		"  -p, --planes LIST    the daemons' file planes (%s=...), comma-separated; the first\n"
		"                       makes the sandboxes and the files reads need (default %s)\n"
		"      --no-seed        leave out the seed's way\n"
		"      --no-floor       leave out the floor\n"
		"      --daemon PATH    maf-sandboxd to start (default $MSB_DAEMON, else the build's)\n"
		"      --image REF      the image (default: a busybox image built with $MSB_TESTIMAGE)\n"
		"      --docker PATH    the docker CLI of the seed's way (default docker)\n"
		"      --set KEY=VALUE  a daemon config override, for every daemon (repeatable; not %s)\n"
		"      --daemon-log F   keep the daemons' logs in F.<plane>\n"
		"  -v, --verbose        say more\n"
		"  -h, --help           this help\n\n"
		"Exit status: 0 when no call failed or hung (the calls that make what a round needs too),\n"
		"the daemon's engine requests per op were its floor's on every plane and (--check) every\n"
		"ratio held; 1 otherwise; 2 on a setup failure.\n",
		BENCH_QUICK_N, (double)CHECK_FACTOR, BENCH_CHECK_SLACK_MS, BENCH_CHECK_MIN_ITERS, BENCH_PLANE_KEY, BENCH_DEFAULT_PLANES, BENCH_PLANE_KEY);
}

static int parse_levels(struct bench *b, const char *s)
{
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;

	b->n_levels = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(t, &end, 10);

		if (*end || v < 1 || v > BENCH_MAX_CLIENTS || b->n_levels == BENCH_MAX_LEVELS) {
			fprintf(stderr, "bench: bad level '%s' (1 to %d, at most %d levels)\n", t, BENCH_MAX_CLIENTS,
				BENCH_MAX_LEVELS);
			return -1;
		}
		b->levels[b->n_levels++] = (unsigned)v;
	}
	return b->n_levels ? 0 : -1;
}

/* The planes, in order: the first is the main one. */
static int parse_planes(struct bench *b, const char *s)
{
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;
	bool first = true;

	memset(b->planes, 0, sizeof(b->planes));
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		enum bench_plane p = plane_from_string(t);

		if (p == PLANE_NONE || b->planes[p]) {
			fprintf(stderr, "bench: bad plane '%s' (archive or local, each once)\n", t);
			return -1;
		}
		b->planes[p] = true;
		if (first)
			b->main_plane = p;
		first = false;
	}
	if (first) {
		fprintf(stderr, "bench: --planes names no plane\n");
		return -1;
	}
	return 0;
}

static int parse_ops(struct bench *b, const char *s)
{
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;

	memset(b->ops, 0, sizeof(b->ops));
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int op = op_from_string(t);

		if (!strcmp(t, "all")) {
			for (int i = 0; i < _OP_MAX; i++)
				b->ops[i] = true;
			continue;
		}
		if (op < 0) {
			fprintf(stderr, "bench: no op '%s' (see --help)\n", t);
			return -1;
		}
		b->ops[op] = true;
	}
	return 0;
}

enum { OPT_NO_SEED = 256, OPT_NO_FLOOR, OPT_DAEMON, OPT_IMAGE, OPT_DOCKER, OPT_SET, OPT_DAEMON_LOG, OPT_ORDER_SEED };

/* 0 go on, 1 exit 0 (help), -1 exit 2. */
static int parse_args(struct bench *b, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "iterations", required_argument, NULL, 'n' }, { "levels", required_argument, NULL, 'l' },
		{ "ops", required_argument, NULL, 'o' }, { "json", required_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' }, { "verbose", no_argument, NULL, 'v' },
		{ "check", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' }, { "no-seed", no_argument, NULL, OPT_NO_SEED },
		{ "no-floor", no_argument, NULL, OPT_NO_FLOOR }, { "daemon", required_argument, NULL, OPT_DAEMON },
		{ "image", required_argument, NULL, OPT_IMAGE }, { "docker", required_argument, NULL, OPT_DOCKER },
		{ "set", required_argument, NULL, OPT_SET }, { "daemon-log", required_argument, NULL, OPT_DAEMON_LOG },
		{ "planes", required_argument, NULL, 'p' }, { "order-seed", required_argument, NULL, OPT_ORDER_SEED },
		{ NULL, 0, NULL, 0 },
	};
	const char *levels = NULL;
	bool n_given = false, ops_given = false, seed_given = false;
	const char *slow;
	int ch;

	while ((ch = getopt_long(argc, argv, "n:l:o:j:p:qcvh", opts, NULL)) != -1) {
		char *end;

		switch (ch) {
		case 'n':
			b->n = (unsigned)strtoul(optarg, &end, 10);
			if (*end || b->n < 1 || b->n > 100000) {
				fprintf(stderr, "bench: -n wants 1 to 100000\n");
				return -1;
			}
			n_given = true;
			break;
		case 'l': levels = optarg; break;
		case 'o':
			if (parse_ops(b, optarg) < 0)
				return -1;
			ops_given = true;
			break;
		case 'j': b->json_path = optarg; break;
		case 'p':
			if (parse_planes(b, optarg) < 0)
				return -1;
			break;
		case 'q': b->quick = true; break;
		case 'c': b->check = true; break;
		case 'v': b->verbose = true; break;
		case 'h': usage(stdout); return 1;
		case OPT_NO_SEED: b->impls[IMPL_SEED] = false; break;
		case OPT_NO_FLOOR: b->impls[IMPL_FLOOR] = false; break;
		case OPT_DAEMON: b->daemon_path = optarg; break;
		case OPT_IMAGE: b->image = optarg; break;
		case OPT_DOCKER: b->docker = optarg; break;
		case OPT_DAEMON_LOG: b->daemon_log_path = optarg; break;
		case OPT_ORDER_SEED:
			errno = 0;
			b->order_seed = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end) {
				fprintf(stderr, "bench: --order-seed wants an unsigned 64-bit number\n");
				return -1;
			}
			seed_given = true;
			break;
		case OPT_SET:
			if (b->n_set == BENCH_MAX_SET || !strchr(optarg, '=')) {
				fprintf(stderr, "bench: --set KEY=VALUE, at most %d\n", BENCH_MAX_SET);
				return -1;
			}
			if (!strncmp(optarg, BENCH_PLANE_KEY "=", strlen(BENCH_PLANE_KEY) + 1)) {
				fprintf(stderr, "bench: the daemons' %s is --planes's\n", BENCH_PLANE_KEY);
				return -1;
			}
			b->set[b->n_set++] = optarg;
			break;
		default: usage(stderr); return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "bench: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (!seed_given)
		b->order_seed = order_seed_random();
	b->order_state = b->order_seed;
	/* Under valgrind (MSB_TEST_SLOW) a ratio of medians says nothing. */
	slow = getenv("MSB_TEST_SLOW");
	if (b->check && slow && *slow && strcmp(slow, "0")) {
		fprintf(stderr, "bench: MSB_TEST_SLOW is set: --check dropped (the ratios are reported, not held)\n");
		b->check = false;
		b->check_dropped = true;
	}
	if (b->quick && !n_given)
		b->n = BENCH_QUICK_N;
	/* A smoke run leaves out the 32 MiB ops unless they are asked for:
	 * through the daemon they take seconds each (JSON and base64). */
	if (b->quick && !ops_given)
		b->ops[OP_WRITE_32M] = b->ops[OP_READ_32M] = false;
	return parse_levels(b, levels ? levels : b->quick ? "1,2" : "1,16,64");
}

static void defaults(struct bench *b)
{
	const char *host = getenv("DOCKER_HOST");
	const char *env;

	b->n = BENCH_DEFAULT_N;
	for (int i = 0; i < _OP_MAX; i++)
		b->ops[i] = true;
	for (int i = 0; i < _IMPL_MAX; i++)
		b->impls[i] = true;
	parse_planes(b, BENCH_DEFAULT_PLANES);
	env = getenv("MSB_DAEMON");
	b->daemon_path = env && *env ? env : BENCH_DEFAULT_DAEMON;
	env = getenv("MSB_TESTIMAGE");
	b->testimage_script = env && *env ? env : BENCH_DEFAULT_TESTIMAGE;
	b->docker = "docker";
	b->engine_sock = host && !strncmp(host, "unix://", 7) ? host + 7 : BENCH_DEFAULT_ENGINE_SOCK;
	b->pid = getpid();
	snprintf(b->run_id, sizeof(b->run_id), "%ld", (long)b->pid);
	snprintf(b->scope, sizeof(b->scope), "msb-bench-%s", b->run_id);
}

static int setup(struct bench *b)
{
	snprintf(b->dir, sizeof(b->dir), "/tmp/msb-bench-XXXXXX");
	if (!mkdtemp(b->dir)) {
		fprintf(stderr, "bench: mkdtemp: %s\n", strerror(errno));
		b->dir[0] = '\0';
		return -1;
	}
	snprintf(b->floor_journal, sizeof(b->floor_journal), "%s/journal-floor", b->dir);
	if (mkdir(b->floor_journal, 0700) < 0) {
		fprintf(stderr, "bench: mkdir %s: %s\n", b->floor_journal, strerror(errno));
		return -1;
	}
	for (int p = 0; p < _PLANE_MAX; p++) {
		struct bench_daemon *d = &b->daemons[p];

		d->plane = (enum bench_plane)p;
		snprintf(d->sock, sizeof(d->sock), "%s/%s.sock", b->dir, plane_to_string(d->plane));
		if (b->daemon_log_path)
			snprintf(d->log, sizeof(d->log), "%s.%s", b->daemon_log_path, plane_to_string(d->plane));
		else
			snprintf(d->log, sizeof(d->log), "%s/daemon-%s.log", b->dir, plane_to_string(d->plane));
	}
	if (b->image)
		snprintf(b->image_ref, sizeof(b->image_ref), "%s", b->image);
	else if (image_build(b) < 0)
		return -1;
	/* The main daemon first: the API version the floor speaks is its. */
	if (daemon_start(b, &b->daemons[b->main_plane]) < 0)
		return -1;
	for (int p = 0; p < _PLANE_MAX; p++)
		if (b->planes[p] && p != (int)b->main_plane && daemon_start(b, &b->daemons[p]) < 0)
			return -1;
	machine_info(b);
	payload_make(b);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench *b = xcalloc(1, sizeof(*b));
	pthread_t sig_tid;
	sigset_t set;
	int r, rc;

	run_t0 = bench_now_ms();
	defaults(b);
	r = parse_args(b, argc, argv);
	if (r != 0) {
		free(b);
		return r > 0 ? 0 : 2;
	}
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (pthread_create(&sig_tid, NULL, signal_thread, b) != 0)
		return 2;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return 2;
	if (setup(b) < 0) {
		cleanup_all(b);
		return 2;
	}
	fprintf(stderr, "bench: run %s, engine API %s, image %s, N=%u (set up in %.1f s)\n", b->run_id, b->api,
		b->image_ref, b->n, (bench_now_ms() - run_t0) / 1000);
	fprintf(stderr, "bench: the ways' order is shuffled each iteration (Fisher-Yates), seed %llu "
		"(--order-seed %llu repeats it)\n", (unsigned long long)b->order_seed, (unsigned long long)b->order_seed);
	for (int p = 0; p < _PLANE_MAX; p++)
		if (b->planes[p])
			fprintf(stderr, "bench: %s-plane daemon pid %ld on %s%s\n", plane_to_string((enum bench_plane)p),
				(long)b->daemons[p].pid, b->daemons[p].sock, p == (int)b->main_plane ? " (main)" : "");
	for (unsigned l = 0; l < b->n_levels; l++)
		run_level(b, b->levels[l]);
	loadavg(b->machine.load_end, sizeof(b->machine.load_end));
	fprintf(stderr, "cleaning up (at %.1f s)\n", (bench_now_ms() - run_t0) / 1000);
	cleanup_all(b);
	fprintf(stderr, "done in %.1f s\n", (bench_now_ms() - run_t0) / 1000);
	stats_print_tables(b, stdout);
	if (b->json_path && stats_write_json(b, b->json_path) < 0)
		fprintf(stderr, "bench: could not write %s\n", b->json_path);
	rc = stats_total_errors(b) || stats_total_hangs(b) || b->daemon_status != 0 || b->request_mismatches ||
	     b->setup_errors ||
	     (b->check && stats_check_failures(b)) ? 1 : 0;
	pthread_cancel(sig_tid);
	pthread_join(sig_tid, NULL);
	curl_global_cleanup();
	free(b->payload);
	free(b->results);
	free(b);
	return rc;
}
