/* bench.h — maf-sandbox-bench: the operations benchmark (doc/BENCH.md).
 *
 * Each operation runs N times at each concurrency level, the ways side by
 * side in one run, interleaved:
 *   daemon  through maf-sandboxd, with the C client library (daemonway.c),
 *           once per file plane (--planes): one maf-sandboxd per plane,
 *           each started with --set files.plane=<plane>, all on the same
 *           containers; every operation goes through each of them;
 *   floor   per plane, what that plane's daemon does for the operation with
 *           no daemon: the same Engine API requests sent directly with
 *           libcurl (floor.c), and on the local plane the daemon's own
 *           plane code called directly (floorlocal.c). What the daemon
 *           costs is daemon/floor, plane by plane;
 *   seed    the way maf-sandbox-docker 0.22 does it: one docker CLI process
 *           per step (seedway.c).
 * A way is (impl, plane). Per iteration of an operation every way runs one
 * round (every client calls once, released together), the ways in an order
 * shuffled each iteration (Fisher-Yates, from --order-seed). The engine
 * requests of every round are counted (the daemon's engine.call_requests,
 * read from every daemon at the iteration's start and end, before and after
 * all the ways' rounds: a daemon's round is its only user in an iteration;
 * the floor's own count): at one client the requests per operation of the
 * daemon and of the floor of a plane must be equal (retries of the engine's
 * late pause state aside: the least count over the rounds is compared; a
 * round whose count is unknown is a failure), else the run fails. Every call
 * has a deadline; one past it is a hang. A failure outside the timed rounds
 * (a file a round needs, an untimed lifecycle round, a recheck round) is a
 * setup error, and fails the run too. Results: stats.c.
 *
 * All the ways work on the same containers (each client has its own, made
 * by the daemon), one round after another, so each sees the same guest
 * state. Threads: one per client and round; a client owns its connections,
 * its curl handle, its local-plane pin and its CLI processes, and touches no
 * other client's state.
 *
 * Ownership: struct bench lives for the whole run (main); struct client for
 * one level; struct bench_result rows are appended to the bench and freed
 * with it. */
#ifndef MSB_BENCH_H
#define MSB_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <spawn.h>
#include <sys/types.h>
#include <jansson.h>

#define BENCH_KIB ((size_t)1024)
#define BENCH_MIB (1024 * BENCH_KIB)

/* The guest paths every way uses (the daemon's default storage base). */
#define BENCH_WORK_DIR     "/maf-sandbox/work"
#define BENCH_KIND         "bench"
#define BENCH_AGENT        "bench"
/* The spec label every sandbox carries: container label
 * maf-sandbox.label.msb-bench-run=<pid>; what the exit cleanup removes. */
#define BENCH_RUN_LABEL    "msb-bench-run"
#define BENCH_RUN_LABEL_FULL "maf-sandbox.label." BENCH_RUN_LABEL
/* The exec with output: exactly this many bytes of text on stdout. */
#define BENCH_EXEC_OUTPUT_BYTES BENCH_MIB
#define BENCH_EXEC_OUTPUT_CMD "head -c 1048576 /dev/zero | tr '\\0' a"

/* The daemon config key that picks a daemon's file plane; --planes sets it. */
#define BENCH_PLANE_KEY    "files.plane"
/* Defaults: -n, the levels, the planes (the first is the main one), and the --quick run. */
#define BENCH_DEFAULT_PLANES     "local,archive"

#define BENCH_DEFAULT_N          12
#define BENCH_QUICK_N            1
#define BENCH_MAX_LEVELS         8
#define BENCH_MAX_CLIENTS        256
#define BENCH_MAX_SET            16      /* --set KEY=VALUE for the daemon */
/* The daemon's socket must accept within this. */
#define BENCH_DAEMON_START_MS    20000
#define BENCH_DAEMON_STOP_MS     20000
/* Untimed setup and cleanup calls. */
#define BENCH_SETUP_TIMEOUT_MS   180000
/* Longest error text kept per (op, way). */
#define BENCH_ERROR_TEXT         240

enum bench_op {
	OP_ACQUIRE_WARM,
	OP_EXEC_TRUE,
	OP_EXEC_1M,
	OP_WRITE_4K,
	OP_WRITE_1M,
	OP_WRITE_32M,
	OP_STAT,
	OP_READ_4K,
	OP_READ_1M,
	OP_READ_32M,
	OP_REMOVE,
	OP_ACQUIRE_COLD,
	OP_DISPOSE,
	_OP_MAX,
};

enum bench_impl {
	IMPL_DAEMON,
	IMPL_FLOOR,
	IMPL_SEED,
	_IMPL_MAX,
};

/* A daemon's file plane (files.plane). */
enum bench_plane {
	PLANE_ARCHIVE,
	PLANE_LOCAL,
	_PLANE_MAX,
	PLANE_NONE = -1,     /* a row of the floor or the seed's way */
};

enum bench_outcome {
	OUT_OK,
	OUT_ERROR,   /* the call answered, with a failure (or a wrong result) */
	OUT_HANG,    /* no answer within the call's deadline */
};

struct op_info {
	const char *name;
	unsigned divisor;      /* iterations = N / divisor (at least one per client) */
	long deadline_ms;      /* one call */
	size_t bytes;          /* write/read: the file's size */
	const char *file;      /* write/read/stat: the guest file, relative to the work dir */
	double seed_goal;      /* seed/daemon must be at least this (each plane); 0 = no goal */
	bool file_op;          /* a file-plane operation */
	double local_goal;     /* seed/daemon on the local plane must be at least this; 0 = none */
	double check_factor;   /* --check: daemon <= this x floor + BENCH_CHECK_SLACK_MS (each plane); 0 = none */
};

/* --check: the ratios CI holds (wide margins: a 2-core machine shared with
 * other work; doc/BENCH.md's goals are reported, not held). */
#define BENCH_CHECK_SLACK_MS 2.0
/* The factor of the small calls --check holds (op_info check_factor). */
#define BENCH_CHECK_FACTOR 3
/* Rounds more through a daemon whose every round made more engine requests
 * than its floor (bench.c requests_recheck). */
#define BENCH_RECHECKS 3
/* --check: at least this many rounds at one client of each checked op (a
 * median of one call would hold whatever the engine did to that call). */
#define BENCH_CHECK_MIN_ITERS 7
/* The most ways an op runs: daemon and floor per plane, and the seed's. */
#define BENCH_MAX_WAYS (2 * _PLANE_MAX + 1)

const struct op_info *op_info(enum bench_op op);
const char *impl_to_string(enum bench_impl impl);
/* "archive", "local"; "-" for PLANE_NONE. */
const char *plane_to_string(enum bench_plane plane);
/* The plane named s, or PLANE_NONE. */
enum bench_plane plane_from_string(const char *s);
/* The op named s, or -1. */
int op_from_string(const char *s);

/* A container one client works on, made by one of the ways. */
struct bench_box {
	char id[65];           /* 64 hex */
	char name[72];
	char thread[64];       /* its key's thread_id */
};

struct client {
	struct bench *b;
	unsigned idx;
	unsigned level;
	struct bench_box box;           /* the client's own sandbox (made by the daemon) */
	/* the sandboxes of the acquire_cold batch, for the dispose batch */
	struct bench_box *cold;         /* the current round's way's (one of cold_way) */
	struct bench_box *cold_way[BENCH_MAX_WAYS];
	unsigned n_cold;
	/* per way */
	enum bench_plane plane;         /* daemonway: the daemon the current batch talks to */
	struct msb_conn *conn[_PLANE_MAX];  /* daemonway: this client's connection to each daemon */
	struct floor_conn *floor;       /* floor: this client's curl handle */
	struct floorlocal *flocal;      /* floor, local plane: the pin of the client's sandbox */
	unsigned guest_uid, guest_gid;  /* floor, archive plane: the guest's ids (floor_guest_setup) */
	/* one batch's samples */
	double *lat_ms;
	size_t n_lat;
	unsigned errors;
	unsigned hangs;
	uint64_t requests;              /* seed: CLI processes */
	double t_start, t_end;          /* the round's first call's start, last call's end (bench_now_ms) */
	char error[BENCH_ERROR_TEXT];   /* the first failure of the batch */
};

/* One (op, level, way) row. */
struct bench_result {
	enum bench_op op;
	unsigned level;
	enum bench_impl impl;
	enum bench_plane plane;         /* the daemon's or the floor's plane; PLANE_NONE for the seed */
	size_t n;
	double p50, p95, p99;           /* ms */
	double ops_per_s;
	unsigned errors;
	unsigned hangs;
	double requests_per_op;         /* engine requests (daemon, floor) or CLI processes (seed); <0 unknown */
	double requests_min;            /* level 1: the least per op over the rounds (the floor's without
					 * its retries); <0 unknown */
	int requests_match;             /* daemon rows at level 1: 1 equal to the floor's, 0 not, -1 unchecked */
	/* level 1: the median --check holds, over the rounds that made no more
	 * requests than the floor's sequence (NAN: none), and how many were left out */
	double p50_check;
	size_t n_check;
	unsigned retry_rounds;
	char error[BENCH_ERROR_TEXT];
};

struct bench_machine {
	char kernel[128];
	long nproc;
	unsigned long long mem_total_kib;
	char engine_version[64];
	char engine_api[16];
	char docker_cli[64];
	char load_start[48];            /* /proc/loadavg at the start and the end */
	char load_end[48];
};

/* One maf-sandboxd, serving one file plane. */
struct bench_daemon {
	enum bench_plane plane;
	pid_t pid;                      /* 0: not running */
	int status;                     /* its exit status once stopped (128+signal when killed) */
	char sock[128];
	char log[160];
	char reason[160];               /* daemon.status file_plane_reason, when it gave one */
};

struct bench {
	/* configuration */
	const char *daemon_path;
	const char *image;              /* NULL: build one */
	const char *testimage_script;
	const char *json_path;
	const char *daemon_log_path;    /* NULL: in the private dir */
	const char *docker;             /* the docker CLI */
	const char *engine_sock;
	const char *set[BENCH_MAX_SET];
	unsigned n_set;
	unsigned n;
	unsigned levels[BENCH_MAX_LEVELS];
	unsigned n_levels;
	bool ops[_OP_MAX];
	bool impls[_IMPL_MAX];
	bool planes[_PLANE_MAX];        /* a daemon per plane */
	enum bench_plane main_plane;    /* the first named: non-file ops and setup */
	bool quick;
	bool check;                     /* --check: hold the ratios of op_info check_factor */
	bool check_dropped;             /* --check given but MSB_TEST_SLOW set: not held */
	uint64_t order_seed;            /* --order-seed: the ways' shuffle */
	uint64_t order_state;
	bool verbose;
	/* the run */
	pid_t pid;
	char run_id[32];                /* the run label's value */
	char scope[48];                 /* every key's scope */
	char dir[64];                   /* private mkdtemp dir */
	char floor_journal[96];         /* the local floor's journal directory, in dir */
	struct bench_daemon daemons[_PLANE_MAX];
	int daemon_status;              /* the first non-zero exit status of the daemons, else 0 */
	char image_ref[96];             /* the image in use */
	bool image_built;
	char api[16];                   /* the engine API version the (main) daemon speaks */
	struct bench_machine machine;
	uint8_t *payload;               /* the largest write's content; smaller ones are its prefix */
	size_t payload_len;
	struct bench_result *results;
	size_t n_results;
	unsigned request_mismatches;    /* ops whose daemon and floor differ in requests per op, and
					 * level-1 rounds whose count could not be had */
	unsigned setup_errors;          /* failures outside the timed rounds (errors and hangs) */
};

/* ---- bench.c -------------------------------------------------------------- */

double bench_now_ms(void);
/* Notes the first failure of a batch on c (printf-like). */
void client_fail(struct client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The guest path of a work-dir file, BENCH_WORK_DIR "/" file, written into
 * buf (n bytes); returns buf. */
const char *bench_guest_path(const char *file, char *buf, size_t n);
/* A unique container name / thread id for a box made by way (impl, plane) (cold acquire). */
void bench_box_cold(const struct client *c, enum bench_impl impl, enum bench_plane plane, unsigned iter,
		    struct bench_box *ret);
/* For the processes the bench starts: an empty signal mask and SIGPIPE at
 * its default (main blocks the one and ignores the other). child_spawnattr
 * initialises attr; the caller destroys it. */
void child_signals_reset(void);
void child_spawnattr(posix_spawnattr_t *attr);
/* /proc/loadavg's three averages into buf. */
void loadavg(char *buf, size_t n);
/* The exec mark the daemon adds (MSB_EXEC_ID=<32 hex>), random per call. */
void bench_exec_mark(char out[64]);

/* ---- daemonway.c ---------------------------------------------------------- */

/* Connections go to the daemon of c->plane. */
int daemonway_client_open(struct client *c);
/* Closes c's connections to every daemon. */
void daemonway_client_close(struct client *c);
/* One timed call of op on c (iter: the iteration, for per-iteration paths). */
enum bench_outcome daemonway_run(struct client *c, enum bench_op op, unsigned iter);
/* Untimed helpers, through the daemon of c->plane. 0 or -1 (c->error says
 * why). An acquire fails when the sandbox is served by another plane than
 * c->plane (its result's file_plane). */
int daemonway_acquire_box(struct client *c, struct bench_box *box);
int daemonway_write_file(struct client *c, const char *file, size_t bytes);
/* daemon.status engine.call_requests (of c->plane's daemon), or -1. */
long long daemonway_call_requests(struct client *c);

/* ---- floor.c -------------------------------------------------------------- */
/* floor_run follows c->plane: the archive plane's requests, or the local
 * plane's (floorlocal.c for the file calls, its requests for the rest). */

struct floor_conn;
struct floor_conn *floor_conn_new(const struct bench *b);
struct floor_conn *floor_conn_free(struct floor_conn *f);
uint64_t floor_conn_requests(const struct floor_conn *f);
/* Of those, the ones asked again (a late pause state, an exec still running). */
uint64_t floor_conn_retries(const struct floor_conn *f);
/* Untimed: c's local-plane pin of its sandbox (c->flocal). 0 or -1. */
int floor_local_setup(struct client *c);
/* The guest's uid:gid of c->box (its init's), for the archive floor's writes. */
int floor_guest_setup(struct client *c);
enum bench_outcome floor_run(struct client *c, enum bench_op op, unsigned iter);
/* GET /version: fills machine's engine fields. 0 or -1. */
int floor_engine_version(const struct bench *b, struct bench_machine *m);
/* Removes every container with our run label (the exit cleanup), and the
 * image when the bench built it. Returns how many containers were removed. */
int floor_cleanup(const struct bench *b);

/* ---- floorlocal.c --------------------------------------------------------- */

struct floorlocal;
struct plocal_pin;
struct plocal_cred;
/* Pins pid as the init of container id; user: its Config.User. NULL with err set. */
struct floorlocal *floorlocal_new(const struct bench *b, const char *id, pid_t pid, const char *user,
				  char *err, size_t err_len);
struct floorlocal *floorlocal_free(struct floorlocal *l);
const struct plocal_pin *floorlocal_pin(const struct floorlocal *l);
const struct plocal_cred *floorlocal_cred(const struct floorlocal *l);
/* acquire_warm and the file ops, beneath c->flocal's root. */
enum bench_outcome floorlocal_run(struct client *c, enum bench_op op, unsigned iter);
/* The work dir through pin: checked (*ret_missing), or made (owner's). 0 or -1. */
int floorlocal_workdir(struct client *c, const struct plocal_pin *pin, const struct plocal_cred *owner, bool make,
		       bool *ret_missing);

/* ---- seedway.c ------------------------------------------------------------ */

enum bench_outcome seedway_run(struct client *c, enum bench_op op, unsigned iter);
/* `docker version --format {{.Client.Version}}` into buf, or "". */
void seedway_cli_version(const struct bench *b, char *buf, size_t n);

/* ---- tar.c: a minimal ustar writer and first-entry reader ------------------ */

#define TAR_BLOCK 512

struct tar_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

/* Appends a directory entry (name without a leading '/', with or without a
 * trailing '/'), or a regular file entry with its content. Names over 100
 * bytes are refused (-1); the bench never makes one. */
int tar_add_dir(struct tar_buf *t, const char *name, unsigned mode, unsigned uid, unsigned gid);
int tar_add_file(struct tar_buf *t, const char *name, const void *data, size_t len, unsigned mode,
		 unsigned uid, unsigned gid);
/* A hard link entry: name made a link to target (both without a leading '/'). */
int tar_add_hardlink(struct tar_buf *t, const char *name, const char *target, unsigned mode, unsigned uid,
		     unsigned gid);
/* The two zero blocks. */
void tar_finish(struct tar_buf *t);
void tar_buf_release(struct tar_buf *t);

/* Reads a tar stream's first real entry (PAX 'x'/'g' and GNU 'L'/'K' records skipped). */
struct tar_entry {
	char type;             /* '0' file, '5' dir, '2' symlink, ... */
	uint64_t size;
	bool have;             /* the header was read */
};

struct tar_reader {
	uint8_t hdr[TAR_BLOCK];
	size_t hdr_len;
	uint64_t skip;         /* bytes of a metadata record (plus padding) still to skip */
	uint64_t body_left;    /* bytes of the entry's content still to come */
	struct tar_entry ent;
	uint8_t *out;          /* the entry's content, when wanted */
	size_t out_len;
	size_t out_cap;
	bool want_body;
	bool bad;
};

/* Feeds bytes; returns false once the stream is refused (bad). */
bool tar_reader_feed(struct tar_reader *r, const void *data, size_t len);
/* True once the first entry's header and (if wanted) its whole content are in. */
bool tar_reader_done(const struct tar_reader *r);
void tar_reader_release(struct tar_reader *r);

/* ---- stats.c -------------------------------------------------------------- */

/* Fills a row from the batch's samples (sorted in place). */
void stats_row(struct bench_result *row, double *lat_ms, size_t n, double wall_ms);
void stats_print_tables(const struct bench *b, FILE *out);
int stats_write_json(const struct bench *b, const char *path);
/* --check: the ratios over their bound (level 1, op_info check_factor). */
unsigned stats_check_failures(const struct bench *b);
/* Totals over every row. */
unsigned stats_total_errors(const struct bench *b);
unsigned stats_total_hangs(const struct bench *b);

#endif
