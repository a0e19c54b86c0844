/* seedway.c — the seed's way: maf-sandbox-docker 0.22 drives the engine
 * through the docker CLI, one process per step (its README; the steps are
 * behaviour-docker.md §2.1–2.12). The bench runs the same steps as that
 * package would, each a docker process, with its output read as the seed
 * reads it. What this file chose, per operation (NAME the container, WD
 * /maf-sandbox/work, "cp-stat P" = `docker cp NAME:P -` read until the tar's
 * first header, then the process killed — the seed reads a bounded prefix
 * of the stream, and a directory would stream its whole subtree):
 *
 * The walks are the seed's (its README, "Every path component is checked";
 * behaviour-docker.md §2.3–2.7; behaviour-core.md §4.2–4.4: its
 * guest_path_and_ancestors starts below "/", and every bundle walks with
 * it, confine_resolve_guest_write_path included; ensure_guest_work_dir
 * lists the base's directories "excluding the filesystem root"): stat,
 * read, write and the work dir's preparation stat from /maf-sandbox down;
 * only a removal stats "/" first, on its own (§2.7 step 2: its owner and
 * mode for the reach rule). The "/" that behaviour-docker.md §6 adds for
 * writes is the docker CLI's own HEAD of the destination inside
 * `docker cp - NAME:/`, not a process of its own.
 *
 *   acquire_warm  (§2.1, a running container, facts and probes cached)
 *                 inspect {{json .Config.Labels}} NAME (storage-base guard),
 *                 inspect {{.State.Running}} {{.State.Paused}} (frozen-orphan
 *                 check), inspect {{.Id}}, inspect {{json .Config.Labels}} ID
 *                 (strict guard); prepare_work_dir under one freeze: pause,
 *                 cp-stat /maf-sandbox, WD, unpause — 8 processes
 *   acquire_cold  inspect labels (absent), inspect state (absent),
 *                 version {{.Server.Os}}, image inspect, run -d (the seed's
 *                 flags: no-new-privileges, pids-limit 512, network none, its
 *                 labels, sleep infinity), inspect {{.Id}}, inspect labels ID;
 *                 reach facts: cp-stat /, /maf-sandbox (absent); identity:
 *                 inspect {{.Config.User}}; inspect {{.HostConfig.CapDrop}};
 *                 the sh probe: exec -w / NAME sh -c 'exit 0'; prepare: pause,
 *                 cp-stat /maf-sandbox (absent), cp - NAME:/ (the two
 *                 directories), unpause — 16 processes
 *   exec_*        exec -w WD NAME sh -c CMD (stdout read whole)
 *   write_*       pause, cp-stat /maf-sandbox, WD, WD/FILE, cp - NAME:/
 *                 (one file entry on stdin), unpause — 6
 *   stat          pause, cp-stat /maf-sandbox, WD, WD/FILE, unpause — 5
 *   read_*        pause, cp-stat /maf-sandbox, WD, then cp NAME:WD/FILE -
 *                 read whole (stat and content from one stream), unpause — 5
 *   remove        (§2.7, not frozen) cp-stat /, /maf-sandbox, WD (the walk,
 *                 recording uid and mode: all root-owned, so root is used),
 *                 exec --user 0 -w WD NAME rm -f -- WD/FILE — 4
 *   dispose       (§2.10/2.12) ps -a --format {{.Names}} --filter label=…
 *                 (scope, thread, agent, kind), rm -f NAME, rm -f NAME-proxy,
 *                 network rm NAME-net (both absent: silent) — 4
 * A pause refused is an error (the seed does not retry it); an unpause
 * answered "is not paused" counts as thawed (§2.6). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cleanup.h"
#include "xmalloc.h"

#define SEED_MAX_ARGS     48
#define SEED_KEEP_MAX     (2 * BENCH_MIB)   /* stdout kept (exec output, inspect lines) */
#define SEED_ERR_MAX      512
#define SEED_READ_CHUNK   (64 * BENCH_KIB)

extern char **environ;

enum seed_out {
	SEED_OUT_KEEP,      /* keep stdout (up to SEED_KEEP_MAX) */
	SEED_OUT_STAT,      /* a tar: stop at its first header */
	SEED_OUT_READ,      /* a tar: its first entry whole */
};

struct cli {
	const char *argv[SEED_MAX_ARGS];
	size_t argc;
	const void *in;          /* stdin (NULL: /dev/null) */
	size_t in_len;
	enum seed_out mode;
	/* results */
	int status;              /* exit status; -1 when killed or not waited */
	bool cut;                /* we stopped reading and killed it */
	bool reaped;             /* waited for */
	struct tar_buf out;      /* SEED_OUT_KEEP */
	struct tar_reader tar;   /* SEED_OUT_STAT, SEED_OUT_READ */
	char err[SEED_ERR_MAX];
	size_t err_len;
};

static void cli_arg(struct cli *x, const char *a)
{
	if (x->argc + 1 < SEED_MAX_ARGS)
		x->argv[x->argc++] = a;
	x->argv[x->argc] = NULL;
}

static void cli_release(struct cli *x)
{
	tar_buf_release(&x->out);
	tar_reader_release(&x->tar);
}

static int spawn(struct client *c, struct cli *x, int fd_in, int fd_out, int fd_err, pid_t *ret_pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int r;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd_in, STDIN_FILENO);
	posix_spawn_file_actions_adddup2(&fa, fd_out, STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, fd_err, STDERR_FILENO);
	child_spawnattr(&attr);
	r = posix_spawnp(ret_pid, x->argv[0], &fa, &attr, (char *const *)x->argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0)
		client_fail(c, "spawn %s: %s", x->argv[0], strerror(r));
	return r == 0 ? 0 : -1;
}

/* Takes what stdout has for us; false once we want no more of it. */
static bool take_out(struct cli *x, const uint8_t *buf, size_t n)
{
	switch (x->mode) {
	case SEED_OUT_KEEP:
		if (x->out.len + n <= SEED_KEEP_MAX) {
			if (x->out.len + n + 1 > x->out.cap) {
				x->out.cap = (x->out.len + n + 1) * 2;
				x->out.data = xrealloc(x->out.data, x->out.cap);
			}
			memcpy(x->out.data + x->out.len, buf, n);
			x->out.len += n;
			x->out.data[x->out.len] = '\0';
		}
		return true;
	case SEED_OUT_STAT:
		return tar_reader_feed(&x->tar, buf, n) && !tar_reader_done(&x->tar);
	case SEED_OUT_READ:
		tar_reader_feed(&x->tar, buf, n);
		return true;   /* read to the end: the process exits when the stream does */
	default:
		return true;
	}
}

static void close_fd(int *fd)
{
	close(*fd);
	*fd = -1;
}

/* Moves bytes until both outputs end (or stdout is cut) and the process
 * exits, or the deadline passes. Closes each fd it finishes (set to -1). */
static enum bench_outcome pump(struct cli *x, pid_t pid, int pfd, int *in_w, int *out_r, int *err_r,
			       double deadline)
{
	uint8_t buf[SEED_READ_CHUNK];
	size_t in_off = 0;
	bool exited = false;

	while (*out_r >= 0 || *err_r >= 0 || *in_w >= 0 || !exited) {
		struct pollfd p[4] = {
			{ .fd = *out_r, .events = POLLIN }, { .fd = *err_r, .events = POLLIN },
			{ .fd = *in_w, .events = POLLOUT }, { .fd = exited ? -1 : pfd, .events = POLLIN },
		};
		double left = deadline - bench_now_ms();
		ssize_t n;

		if (left <= 0)
			return OUT_HANG;
		if (poll(p, 4, (int)left + 1) < 0 && errno != EINTR)
			return OUT_ERROR;
		if (p[0].revents) {
			n = read(*out_r, buf, sizeof(buf));
			if (n <= 0 || !take_out(x, buf, (size_t)n)) {
				if (n > 0 && !exited) {
					x->cut = true;
					kill(pid, SIGKILL);
				}
				close_fd(out_r);
			}
		}
		if (p[1].revents) {
			n = read(*err_r, buf, sizeof(buf));
			if (n <= 0)
				close_fd(err_r);
			else if (x->err_len + 1 < sizeof(x->err)) {
				size_t k = (size_t)n < sizeof(x->err) - 1 - x->err_len ? (size_t)n
										 : sizeof(x->err) - 1 - x->err_len;

				memcpy(x->err + x->err_len, buf, k);
				x->err_len += k;
				x->err[x->err_len] = '\0';
			}
		}
		if (p[2].revents) {
			n = write(*in_w, (const uint8_t *)x->in + in_off, x->in_len - in_off);
			if (n > 0)
				in_off += (size_t)n;
			if ((n < 0 && errno != EAGAIN) || in_off == x->in_len)
				close_fd(in_w);
		}
		if (p[3].revents) {
			int st;

			if (waitpid(pid, &st, 0) == pid) {
				exited = x->reaped = true;
				x->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			}
			/* Its outputs may still hold bytes: read on; a grandchild
			 * holding them open is not waited for past the deadline. */
		}
	}
	return OUT_OK;
}

/* Runs x within deadline: OUT_OK when it ran (x->status, x->err), OUT_HANG
 * when killed at the deadline, OUT_ERROR when it could not be started. */
static enum bench_outcome cli_run(struct client *c, struct cli *x, double deadline)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
	int pfd = -1;
	pid_t pid = -1;
	enum bench_outcome o = OUT_ERROR;

	x->status = -1;
	c->requests++;
	if ((x->in ? pipe2(in, O_CLOEXEC) : ((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 ? -1 : 0)) < 0 ||
	    pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		client_fail(c, "pipe: %s", strerror(errno));
		goto out;
	}
	if (spawn(c, x, in[0], out[1], err[1], &pid) < 0)
		goto out;
	close(in[0]), close(out[1]), close(err[1]);
	in[0] = out[1] = err[1] = -1;
	pfd = pidfd_open(pid, 0);
	if (pfd < 0) {
		client_fail(c, "pidfd_open: %s", strerror(errno));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out;
	}
	if (in[1] >= 0)
		fcntl(in[1], F_SETFL, O_NONBLOCK);
	o = pump(x, pid, pfd, &in[1], &out[0], &err[0], deadline);
	if (o != OUT_OK && !x->reaped) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	if (o == OUT_HANG) {
		client_fail(c, "%s %s: killed at its deadline", x->argv[1], x->argc > 2 ? x->argv[2] : "");
	}
out:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	if (pfd >= 0)
		close(pfd);
	return o;
}

/* ---- steps ----------------------------------------------------------------------- */

struct seed {
	struct client *c;
	double deadline;
	const char *name;     /* the container */
};

static void cli_init(struct seed *s, struct cli *x, enum seed_out mode)
{
	memset(x, 0, sizeof(*x));
	x->mode = mode;
	cli_arg(x, s->c->b->docker);
}

/* Runs x; it must exit 0. */
static enum bench_outcome step(struct seed *s, struct cli *x)
{
	enum bench_outcome o = cli_run(s->c, x, s->deadline);

	if (o == OUT_OK && x->status != 0 && !x->cut) {
		client_fail(s->c, "docker %s %s: exit %d: %.160s", x->argv[1], x->argc > 2 ? x->argv[2] : "",
			    x->status, x->err);
		o = OUT_ERROR;
	}
	return o;
}

/* docker ARGS... (NULL-terminated), exit 0 wanted, output dropped. */
static enum bench_outcome stepv(struct seed *s, const char *first, ...) __attribute__((sentinel));
static enum bench_outcome stepv(struct seed *s, const char *first, ...)
{
	struct cli x;
	enum bench_outcome o;
	va_list ap;

	cli_init(s, &x, SEED_OUT_KEEP);
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *))
		cli_arg(&x, a);
	va_end(ap);
	o = step(s, &x);
	cli_release(&x);
	return o;
}

static bool says_absent(const struct cli *x)
{
	return strstr(x->err, "No such container:path") || strstr(x->err, "Could not find the file") ||
	       strstr(x->err, "No such container") || strstr(x->err, "No such object");
}

/* docker ARGS... that must fail as absent (the container or path is not there). */
static enum bench_outcome step_absent(struct seed *s, const char *first, ...) __attribute__((sentinel));
static enum bench_outcome step_absent(struct seed *s, const char *first, ...)
{
	struct cli x;
	enum bench_outcome o;
	va_list ap;

	cli_init(s, &x, SEED_OUT_KEEP);
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *))
		cli_arg(&x, a);
	va_end(ap);
	o = cli_run(s->c, &x, s->deadline);
	if (o == OUT_OK && (x.status == 0 || !says_absent(&x))) {
		client_fail(s->c, "docker %s: expected absent, exit %d: %.160s", first, x.status, x.err);
		o = OUT_ERROR;
	}
	cli_release(&x);
	return o;
}

/* cp-stat: the first header of `docker cp NAME:P -`. 1 present (its type
 * and size), 0 absent, <0 a failure (the outcome, negated). */
static int cp_stat(struct seed *s, const char *name, const char *path, struct tar_entry *ret)
{
	_cleanup_free_ char *src = xasprintf("%s:%s", name, path);
	struct cli x;
	enum bench_outcome o;
	int r;

	cli_init(s, &x, SEED_OUT_STAT);
	cli_arg(&x, "cp");
	cli_arg(&x, src);
	cli_arg(&x, "-");
	o = cli_run(s->c, &x, s->deadline);
	if (o != OUT_OK)
		r = -(int)o;
	else if (x.tar.ent.have)
		r = 1, *ret = x.tar.ent;
	else if (x.status != 0 && says_absent(&x))
		r = 0;
	else
		r = (client_fail(s->c, "docker cp %s: exit %d, no tar header: %.160s", src, x.status, x.err),
		     -(int)OUT_ERROR);
	cli_release(&x);
	return r;
}

/* The walk: every directory from "/" down to dir_end (WD, or the
 * /maf-sandbox of a cold acquire); stops at the first absent one.
 * *ret_absent (may be NULL) says whether one was. */
static enum bench_outcome walk(struct seed *s, const char *const *dirs, size_t n, bool *ret_absent)
{
	for (size_t i = 0; i < n; i++) {
		struct tar_entry e = { 0 };
		int r = cp_stat(s, s->name, dirs[i], &e);

		if (r < 0)
			return (enum bench_outcome)-r;
		if (r == 0) {
			if (ret_absent)
				*ret_absent = true;
			return OUT_OK;
		}
		if (e.type != '5') {
			client_fail(s->c, "%s is not a real directory", dirs[i]);
			return OUT_ERROR;
		}
	}
	if (ret_absent)
		*ret_absent = false;
	return OUT_OK;
}

/* From the base's first directory down (stat, read, write, the work dir's
 * preparation), and from "/" (remove). */
static const char *const wd_walk[] = { "/maf-sandbox", BENCH_WORK_DIR };
static const char *const wd_walk_root[] = { "/", "/maf-sandbox", BENCH_WORK_DIR };

static enum bench_outcome seed_unpause(struct seed *s)
{
	struct cli x;
	enum bench_outcome o;

	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "unpause");
	cli_arg(&x, s->name);
	o = cli_run(s->c, &x, s->deadline);
	if (o == OUT_OK && x.status != 0 && !strstr(x.err, "is not paused")) {
		client_fail(s->c, "docker unpause: exit %d: %.160s", x.status, x.err);
		o = OUT_ERROR;
	}
	cli_release(&x);
	return o;
}

/* `docker cp - NAME:/` with tar on stdin. */
static enum bench_outcome cp_in(struct seed *s, const struct tar_buf *t)
{
	_cleanup_free_ char *dst = xasprintf("%s:/", s->name);
	struct cli x;
	enum bench_outcome o;

	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "cp");
	cli_arg(&x, "-");
	cli_arg(&x, dst);
	x.in = t->data;
	x.in_len = t->len;
	o = step(s, &x);
	cli_release(&x);
	return o;
}

/* ---- the operations ------------------------------------------------------------- */

static enum bench_outcome op_warm(struct seed *s)
{
	enum bench_outcome o, thaw;

	if ((o = stepv(s, "inspect", "--format", "{{json .Config.Labels}}", s->name, NULL)) != OUT_OK ||
	    (o = stepv(s, "inspect", "-f", "{{.State.Running}} {{.State.Paused}}", s->name, NULL)) != OUT_OK ||
	    (o = stepv(s, "inspect", "-f", "{{.Id}}", s->name, NULL)) != OUT_OK ||
	    (o = stepv(s, "inspect", "--format", "{{json .Config.Labels}}", s->c->box.id, NULL)) != OUT_OK)
		return o;
	if ((o = stepv(s, "pause", s->name, NULL)) != OUT_OK)
		return o;
	o = walk(s, wd_walk, ELEMENTSOF(wd_walk), NULL);
	thaw = seed_unpause(s);
	return o != OUT_OK ? o : thaw;
}

static enum bench_outcome op_exec(struct seed *s, const char *cmd, size_t want_out)
{
	struct cli x;
	enum bench_outcome o;

	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "exec");
	cli_arg(&x, "-w");
	cli_arg(&x, BENCH_WORK_DIR);
	cli_arg(&x, s->name);
	cli_arg(&x, "sh");
	cli_arg(&x, "-c");
	cli_arg(&x, cmd);
	o = step(s, &x);
	if (o == OUT_OK && x.out.len != want_out) {
		client_fail(s->c, "docker exec: %zu bytes of stdout, expected %zu", x.out.len, want_out);
		o = OUT_ERROR;
	}
	cli_release(&x);
	return o;
}

static bool is_write(enum bench_op op)
{
	return op == OP_WRITE_4K || op == OP_WRITE_1M || op == OP_WRITE_32M;
}

/* write, stat, read: one freeze around the walk and the copy. */
static enum bench_outcome op_file(struct seed *s, enum bench_op op)
{
	const struct op_info *oi = op_info(op);
	char gpath[128];
	struct tar_entry e = { 0 };
	enum bench_outcome o, thaw;
	int r = 1;

	bench_guest_path(oi->file, gpath, sizeof(gpath));
	if ((o = stepv(s, "pause", s->name, NULL)) != OUT_OK)
		return o;
	o = walk(s, wd_walk, ELEMENTSOF(wd_walk), NULL);
	if (o == OUT_OK && (is_write(op) || op == OP_STAT)) {
		r = cp_stat(s, s->name, gpath, &e);
		if (r < 0)
			o = (enum bench_outcome)-r;
		else if (op == OP_STAT && (r == 0 || e.size != oi->bytes))
			o = (client_fail(s->c, "stat %s: not a file of %zu bytes", gpath, oi->bytes), OUT_ERROR);
	}
	if (o == OUT_OK && is_write(op)) {
		struct tar_buf t = { 0 };

		tar_add_file(&t, gpath + 1, s->c->b->payload, oi->bytes, 0644, 0, 0);
		tar_finish(&t);
		o = cp_in(s, &t);
		tar_buf_release(&t);
	} else if (o == OUT_OK && op != OP_STAT) {
		_cleanup_free_ char *src = xasprintf("%s:%s", s->name, gpath);
		struct cli x;

		cli_init(s, &x, SEED_OUT_READ);
		x.tar.want_body = true;
		cli_arg(&x, "cp");
		cli_arg(&x, src);
		cli_arg(&x, "-");
		o = step(s, &x);
		if (o == OUT_OK && (!tar_reader_done(&x.tar) || x.tar.out_len != oi->bytes))
			o = (client_fail(s->c, "read %s: %zu bytes, expected %zu", gpath, x.tar.out_len, oi->bytes),
			     OUT_ERROR);
		cli_release(&x);
	}
	thaw = seed_unpause(s);
	return o != OUT_OK ? o : thaw;
}

static enum bench_outcome op_remove(struct seed *s, unsigned iter)
{
	char file[32], gpath[128];
	enum bench_outcome o;

	snprintf(file, sizeof(file), "rm-%u", iter);
	bench_guest_path(file, gpath, sizeof(gpath));
	if ((o = walk(s, wd_walk_root, ELEMENTSOF(wd_walk_root), NULL)) != OUT_OK)
		return o;
	return stepv(s, "exec", "--user", "0", "-w", BENCH_WORK_DIR, s->name, "rm", "-f", "--", gpath, NULL);
}

static enum bench_outcome op_cold(struct seed *s, struct bench_box *box)
{
	const struct bench *b = s->c->b;
	static const char *const reach[] = { "/", "/maf-sandbox" };
	_cleanup_free_ char *l_scope = xasprintf("maf-sandbox.scope=%s", b->scope);
	_cleanup_free_ char *l_thread = xasprintf("maf-sandbox.thread=%s", box->thread);
	_cleanup_free_ char *l_run = xasprintf("%s=%s", BENCH_RUN_LABEL_FULL, b->run_id);
	struct tar_buf t = { 0 };
	struct cli x;
	enum bench_outcome o, thaw;
	bool absent = false;
	const char *id;

	if ((o = step_absent(s, "inspect", "--format", "{{json .Config.Labels}}", box->name, NULL)) != OUT_OK ||
	    (o = step_absent(s, "inspect", "-f", "{{.State.Running}} {{.State.Paused}}", box->name, NULL)) != OUT_OK ||
	    (o = stepv(s, "version", "--format", "{{.Server.Os}}", NULL)) != OUT_OK ||
	    (o = stepv(s, "image", "inspect", "--format", "{{.Id}}", b->image_ref, NULL)) != OUT_OK ||
	    (o = stepv(s, "run", "-d", "--name", box->name, "--security-opt", "no-new-privileges",
		       "--pids-limit", "512", "--network", "none", "--label", l_scope, "--label", l_thread,
		       "--label", "maf-sandbox.agent=" BENCH_AGENT, "--label", "maf-sandbox.kind=" BENCH_KIND,
		       "--label", l_run, "--label", "maf-sandbox.work-dir.v1=" BENCH_WORK_DIR, b->image_ref,
		       "sleep", "infinity", NULL)) != OUT_OK)
		return o;
	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "inspect");
	cli_arg(&x, "-f");
	cli_arg(&x, "{{.Id}}");
	cli_arg(&x, box->name);
	o = step(s, &x);
	id = o == OUT_OK && x.out.len >= 64 ? (const char *)x.out.data : NULL;
	if (id)
		snprintf(box->id, sizeof(box->id), "%.64s", id);
	cli_release(&x);
	if (o != OUT_OK || !id)
		return o != OUT_OK ? o : (client_fail(s->c, "inspect {{.Id}}: no id"), OUT_ERROR);
	s->name = box->name;
	if ((o = stepv(s, "inspect", "--format", "{{json .Config.Labels}}", box->id, NULL)) != OUT_OK ||
	    (o = walk(s, reach, ELEMENTSOF(reach), &absent)) != OUT_OK ||
	    (o = stepv(s, "inspect", "-f", "{{.Config.User}}", box->id, NULL)) != OUT_OK ||
	    (o = stepv(s, "inspect", "-f", "{{.HostConfig.CapDrop}}", box->id, NULL)) != OUT_OK ||
	    (o = stepv(s, "exec", "-w", "/", box->id, "sh", "-c", "exit 0", NULL)) != OUT_OK ||
	    (o = stepv(s, "pause", box->name, NULL)) != OUT_OK)
		return o;
	o = walk(s, reach + 1, ELEMENTSOF(reach) - 1, &absent);
	if (o == OUT_OK) {
		tar_add_dir(&t, "maf-sandbox", 0755, 0, 0);
		tar_add_dir(&t, "maf-sandbox/work", 0755, 0, 0);
		tar_finish(&t);
		o = cp_in(s, &t);
		tar_buf_release(&t);
	}
	thaw = seed_unpause(s);
	return o != OUT_OK ? o : thaw;
}

static enum bench_outcome op_dispose(struct seed *s, const struct bench_box *box)
{
	const struct bench *b = s->c->b;
	_cleanup_free_ char *f_scope = xasprintf("label=maf-sandbox.scope=%s", b->scope);
	_cleanup_free_ char *f_thread = xasprintf("label=maf-sandbox.thread=%s", box->thread);
	_cleanup_free_ char *proxy = xasprintf("%s-proxy", box->name);
	_cleanup_free_ char *net = xasprintf("%s-net", box->name);
	struct cli x;
	enum bench_outcome o;

	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "ps");
	cli_arg(&x, "-a");
	cli_arg(&x, "--format");
	cli_arg(&x, "{{.Names}}");
	cli_arg(&x, "--filter");
	cli_arg(&x, f_scope);
	cli_arg(&x, "--filter");
	cli_arg(&x, f_thread);
	cli_arg(&x, "--filter");
	cli_arg(&x, "label=maf-sandbox.agent=" BENCH_AGENT);
	cli_arg(&x, "--filter");
	cli_arg(&x, "label=maf-sandbox.kind=" BENCH_KIND);
	o = step(s, &x);
	if (o == OUT_OK && (!x.out.data || strncmp((const char *)x.out.data, box->name, strlen(box->name)) != 0))
		o = (client_fail(s->c, "docker ps: %s not listed", box->name), OUT_ERROR);
	cli_release(&x);
	if (o != OUT_OK)
		return o;
	if ((o = stepv(s, "rm", "-f", box->name, NULL)) != OUT_OK)
		return o;
	/* The proxy and network of an allowlisted sandbox; absent here, and
	 * absence is silent (their exit status is not looked at). */
	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "rm");
	cli_arg(&x, "-f");
	cli_arg(&x, proxy);
	o = cli_run(s->c, &x, s->deadline);
	cli_release(&x);
	if (o != OUT_OK)
		return o;
	cli_init(s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "network");
	cli_arg(&x, "rm");
	cli_arg(&x, net);
	o = cli_run(s->c, &x, s->deadline);
	cli_release(&x);
	return o;
}

enum bench_outcome seedway_run(struct client *c, enum bench_op op, unsigned iter)
{
	const struct op_info *oi = op_info(op);
	struct seed s = { .c = c, .deadline = bench_now_ms() + (double)oi->deadline_ms, .name = c->box.name };

	switch (op) {
	case OP_ACQUIRE_WARM:
		return op_warm(&s);
	case OP_ACQUIRE_COLD:
		s.name = c->cold[iter].name;
		return op_cold(&s, &c->cold[iter]);
	case OP_DISPOSE:
		s.name = c->cold[iter].name;
		return op_dispose(&s, &c->cold[iter]);
	case OP_EXEC_TRUE:
		return op_exec(&s, "true", 0);
	case OP_EXEC_1M:
		return op_exec(&s, BENCH_EXEC_OUTPUT_CMD, BENCH_EXEC_OUTPUT_BYTES);
	case OP_REMOVE:
		return op_remove(&s, iter);
	default:
		return op_file(&s, op);
	}
}

void seedway_cli_version(const struct bench *b, char *buf, size_t n)
{
	struct client c = { .b = (struct bench *)b };
	struct seed s = { .c = &c, .deadline = bench_now_ms() + BENCH_SETUP_TIMEOUT_MS };
	struct cli x;

	buf[0] = '\0';
	cli_init(&s, &x, SEED_OUT_KEEP);
	cli_arg(&x, "version");
	cli_arg(&x, "--format");
	cli_arg(&x, "{{.Client.Version}}");
	if (cli_run(&c, &x, s.deadline) == OUT_OK && x.out.data)
		snprintf(buf, n, "%.*s", (int)strcspn((const char *)x.out.data, "\r\n"), (const char *)x.out.data);
	cli_release(&x);
}
