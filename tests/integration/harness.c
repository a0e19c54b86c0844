#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"
#include "base64.h"

#define MAX_PROCS 8
#define START_TIMEOUT_MS 10000   /* hang guard */
#define STOP_TIMEOUT_MS 20000   /* hang guard */
#define RAW_LINE_MAX (128 * 1024 * 1024)

static struct msbd_proc *procs[MAX_PROCS];
static bool atexit_armed;

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void rm_rf(const char *dir)
{
	char cmd[256];

	if (!dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "harness: cannot remove %s\n", dir);
}

/* Runs at exit of the forked test, pass or fail. */
static void cleanup_at_exit(void)
{
	for (int i = 0; i < MAX_PROCS; i++) {
		struct msbd_proc *p = procs[i];

		if (!p)
			continue;
		if (p->pid > 0) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, NULL, 0);
		}
		rm_rf(p->dir);
		procs[i] = NULL;
	}
}

static void track(struct msbd_proc *p)
{
	if (!atexit_armed) {
		atexit(cleanup_at_exit);
		atexit_armed = true;
	}
	for (int i = 0; i < MAX_PROCS; i++)
		if (!procs[i] || procs[i] == p) {
			procs[i] = p;
			return;
		}
	ck_abort_msg("harness: too many daemons in one test");
}

static void untrack(struct msbd_proc *p)
{
	for (int i = 0; i < MAX_PROCS; i++)
		if (procs[i] == p)
			procs[i] = NULL;
}

static char run_dir[32];

bool harness_last_line_is(const char *out, const char *line)
{
	const char *nl = strrchr(out, '\n');

	return strcmp(nl ? nl + 1 : out, line) == 0;
}

bool harness_test_image(const char *ref)
{
	const char *script = getenv("MSB_TESTIMAGE");
	char *out = sh_out("sh '%s' '%s' 2>&1 && echo ok", script ? script : "tests/integration/testimage.sh",
			   ref);
	bool ok = harness_last_line_is(out, "ok");

	if (!ok)
		fprintf(stderr, "cannot build the test image: %s\n", out);
	free(out);
	return ok;
}

void harness_run_dir_create(void)
{
	snprintf(run_dir, sizeof(run_dir), "/tmp/msb-run-XXXXXX");
	if (!mkdtemp(run_dir)) {
		run_dir[0] = '\0';
		return;
	}
	/* Traversable (not listable) by the uid the ownership test runs as. */
	chmod(run_dir, 0711);
	setenv("MSB_IT_RUN_DIR", run_dir, 1);
	setenv("TMPDIR", run_dir, 1);       /* the fake engine's sockets too */
}

void harness_run_dir_remove(void)
{
	rm_rf(run_dir);
	run_dir[0] = '\0';
}

void msbd_prepare(struct msbd_proc *p)
{
	const char *base = getenv("MSB_IT_RUN_DIR");

	memset(p, 0, sizeof(*p));
	snprintf(p->dir, sizeof(p->dir), "%s/d-XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(p->dir));
	snprintf(p->sock, sizeof(p->sock), "%s/msb.sock", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/daemon.log", p->dir);
	track(p);
}

static bool socket_accepts(const char *path)
{
	int fd = raw_connect(path);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void exec_child(const struct msbd_proc *p, const char *const *argv)
{
	int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		dup2(fd, STDOUT_FILENO);
	}
	execv(argv[0], (char *const *)argv);
	execvp(argv[0], (char *const *)argv);
	fprintf(stderr, "harness: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

void msbd_start_with(struct msbd_proc *p, const char *const *prefix, const char *const *args,
		     bool wait_for_socket)
{
	const char *argv[64];
	const char *daemon = getenv("MSB_DAEMON");
	size_t n = 0;
	long deadline;

	ck_assert_msg(daemon, "MSB_DAEMON is not set");
	if (!p->dir[0])
		msbd_prepare(p);
	for (; prefix && *prefix; prefix++)
		argv[n++] = *prefix;
	argv[n++] = daemon;
	if (!prefix) {
		argv[n++] = "--socket";
		argv[n++] = p->sock;
	}
	/* The run's own journal of temporaries (every daemon of this run shares
	 * it, so the one started after a killed one replays what it left), never
	 * the host's default that every other daemon on the machine uses: a
	 * foreign entry's replay waits on a container someone else paused. Before
	 * the caller's arguments, so a test naming its own wins (the last --set
	 * of a key does). */
	if (getenv("MSB_IT_RUN_DIR")) {
		static char journal_arg[PATH_MAX];

		snprintf(journal_arg, sizeof(journal_arg), "files.journal_dir=%s/journal", getenv("MSB_IT_RUN_DIR"));
		argv[n++] = "--set";
		argv[n++] = journal_arg;
	}
	/* The lane's plane ($MSB_FILE_PLANE), before the caller's arguments too:
	 * a test that names its own plane gets it. */
	if (harness_file_plane()) {
		static char plane_arg[64];

		snprintf(plane_arg, sizeof(plane_arg), "files.plane=%s", harness_file_plane());
		argv[n++] = "--set";
		argv[n++] = plane_arg;
	}
	for (; args && *args && n < 60; args++)
		argv[n++] = *args;
	ck_assert_msg(!args || !*args, "more daemon arguments than the harness passes");
	argv[n] = NULL;
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0)
		exec_child(p, argv);
	if (!wait_for_socket)
		return;
	deadline = now_ms() + START_TIMEOUT_MS;
	while (!socket_accepts(p->sock)) {
		int status;

		if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
			p->pid = 0;
			msbd_dump_log(p);
			ck_abort_msg("maf-sandboxd exited at start (status %d)", status);
		}
		if (now_ms() > deadline) {
			msbd_dump_log(p);
			ck_abort_msg("maf-sandboxd did not listen on %s within %d ms", p->sock,
				     START_TIMEOUT_MS);
		}
		usleep(20 * 1000);
	}
}

const char *harness_file_plane(void)
{
	const char *v = getenv("MSB_FILE_PLANE");

	return v && *v ? v : NULL;
}

void msbd_start(struct msbd_proc *p, const char *const *args)
{
	msbd_start_with(p, NULL, args, true);
}

void msbd_signal(struct msbd_proc *p, int sig)
{
	ck_assert_int_gt(p->pid, 0);
	ck_assert_int_eq(kill(p->pid, sig), 0);
}

static int stop_process(struct msbd_proc *p);

int msbd_wait(struct msbd_proc *p, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	int status, rc;

	ck_assert_int_gt(p->pid, 0);
	while (waitpid(p->pid, &status, WNOHANG) == 0) {
		if (now_ms() > deadline)
			return -1;
		usleep(10 * 1000);
	}
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	p->pid = 0;
	return rc;
}

int msbd_stop_keep_dir(struct msbd_proc *p)
{
	return stop_process(p);
}

int msbd_stop(struct msbd_proc *p)
{
	int rc = stop_process(p);

	rm_rf(p->dir);
	p->dir[0] = '\0';
	untrack(p);
	return rc;
}

static int stop_process(struct msbd_proc *p)
{
	long deadline = now_ms() + STOP_TIMEOUT_MS;
	int status = 0, rc = -1;

	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		while (waitpid(p->pid, &status, WNOHANG) == 0) {
			if (now_ms() > deadline) {
				kill(p->pid, SIGKILL);
				waitpid(p->pid, &status, 0);
				break;
			}
			usleep(10 * 1000);
		}
		rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (rc != 0)
			msbd_dump_log(p);
		p->pid = 0;
	}
	return rc;
}

void msbd_dump_log(const struct msbd_proc *p)
{
	char buf[4096];
	FILE *f = fopen(p->log, "r");
	size_t n;

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", p->log);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end ----\n");
	fclose(f);
}

json_t *call(const char *sock, const char *method, json_t *params, int *ret_code, char **ret_type)
{
	struct msb_conn *c = NULL;
	json_t *result = NULL;
	int r;

	r = msb_connect(sock, &c);
	ck_assert_msg(r == MSB_OK, "connect %s: %s", sock, msb_strerror(r));
	msb_set_timeout(c, 30000);
	r = msb_call(c, method, params, &result);
	if (ret_code)
		*ret_code = r == MSB_OK ? 0 : r == MSB_E_REMOTE ? msb_last_error_code(c) : r;
	if (ret_type)
		*ret_type = r == MSB_E_REMOTE && msb_last_error_type(c) ? strdup(msb_last_error_type(c)) : NULL;
	ck_assert_msg(r == MSB_OK || r == MSB_E_REMOTE, "%s: %s", method, msb_strerror(r));
	msb_conn_free(c);
	return result;
}

json_t *wait_engine_state(const char *sock, const char *state, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	json_t *st = NULL;

	for (;;) {
		json_decref(st);
		st = call(sock, "daemon.status", NULL, NULL, NULL);
		ck_assert_ptr_nonnull(st);
		if (strcmp(jstr(st, "engine.state"), state) == 0)
			return st;
		if (now_ms() > deadline)
			ck_abort_msg("engine state is %s, not %s, after %d ms (last error: %s)",
				     jstr(st, "engine.state"), state, timeout_ms,
				     jstr(st, "engine.last_error") ? jstr(st, "engine.last_error") : "none");
		usleep(50 * 1000);
	}
}

static char *read_all(int fd)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (cap - len < 2)
			buf = realloc(buf, cap *= 2);
	}
	buf[len] = '\0';
	return buf;
}

int run_cli(const char *const *args, char **ret_out, char **ret_err)
{
	const char *argv[32];
	const char *cli = getenv("MSB_CLI");
	int out[2], err[2], status;
	size_t n = 0;
	pid_t pid;
	char *o, *e;

	ck_assert_msg(cli, "MSB_CLI is not set");
	argv[n++] = cli;
	for (; args && *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		execv(cli, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	/* Outputs here are small; read stdout then stderr. */
	o = read_all(out[0]);
	e = read_all(err[0]);
	close(out[0]);
	close(err[0]);
	waitpid(pid, &status, 0);
	if (ret_out)
		*ret_out = o;
	else
		free(o);
	if (ret_err)
		*ret_err = e;
	else
		free(e);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int raw_connect(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

void raw_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

void raw_send_str(int fd, const char *s)
{
	raw_send(fd, s, strlen(s));
}

/* Reads byte by byte up to LF: slow but exact (no over-read past a frame). */
json_t *raw_recv(int fd, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	json_t *j;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		long left = deadline - now_ms();
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
			free(buf);
			return NULL;
		}
		n = read(fd, buf + len, 1);
		if (n <= 0) {
			free(buf);
			return NULL;
		}
		if (buf[len] == '\n')
			break;
		if (++len == cap) {
			ck_assert_uint_lt(cap, RAW_LINE_MAX);
			buf = realloc(buf, cap *= 2);
		}
	}
	j = json_loadb(buf, len, 0, NULL);
	ck_assert_msg(j, "daemon sent a frame that is not JSON: %.*s", (int)len, buf);
	free(buf);
	return j;
}

bool raw_is_closed(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return false;
	return read(fd, &c, 1) == 0;
}

const char *engine_socket_path(void)
{
	const char *h = getenv("DOCKER_HOST");

	if (h && strncmp(h, "unix://", 7) == 0)
		return h + 7;
	return "/var/run/docker.sock";
}

char *engine_get(const char *path, const char *header, char **ret_header_value)
{
	int fd = raw_connect(engine_socket_path());
	char req[512], *resp, *body, *h;

	ck_assert_msg(fd >= 0, "cannot reach the engine at %s", engine_socket_path());
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: docker\r\n\r\n", path);
	raw_send_str(fd, req);
	resp = read_all(fd);
	close(fd);
	body = strstr(resp, "\r\n\r\n");
	ck_assert_ptr_nonnull(body);
	*body = '\0';
	if (header && ret_header_value) {
		char key[128];

		snprintf(key, sizeof(key), "\r\n%s: ", header);
		h = strcasestr(resp, key);
		ck_assert_msg(h, "engine reply has no %s header", header);
		h += strlen(key);
		*ret_header_value = strndup(h, strcspn(h, "\r\n"));
	}
	body = strdup(body + 4);
	free(resp);
	return body;
}

json_t *jget(json_t *root, const char *path)
{
	char buf[256], *save = NULL, *tok;
	json_t *cur = root;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save))
		cur = json_object_get(cur, tok);
	return cur;
}

const char *jstr(json_t *root, const char *path)
{
	return json_string_value(jget(root, path));
}

json_int_t jint(json_t *root, const char *path)
{
	json_t *v = jget(root, path);

	ck_assert_msg(json_is_integer(v), "%s is not an integer", path);
	return json_integer_value(v);
}

char *sh_out(const char *fmt, ...)
{
	char cmd[4096], *out = calloc(1, 65536);
	va_list ap;
	FILE *p;
	size_t n;

	if (!out)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	p = popen(cmd, "r");
	if (!p)
		return out;
	n = fread(out, 1, 65535, p);
	pclose(p);
	while (n > 0 && out[n - 1] == '\n')
		out[--n] = '\0';
	return out;
}

/* ---- additions for the egress suites (check_egress*.c) ------------------ */

#define PURGE_NETWORK_TRIES 60
#define STRINGIFY_PURGE_(x) #x
#define STRINGIFY_PURGE(x) STRINGIFY_PURGE_(x)

void engine_purge_label(const char *key, const char *value)
{
	/* A network whose last endpoints are still being released refuses a
	 * while ("active endpoints": after 200 disposals the daemon's proxies
	 * go for seconds more): tries for up to PURGE_NETWORK_TRIES seconds. */
	char *out = sh_out("docker ps -aq --filter label=%s=%s | xargs -r docker rm -f >/dev/null 2>&1; "
			   "for i in $(seq " STRINGIFY_PURGE(PURGE_NETWORK_TRIES) "); do "
			   "ids=$(docker network ls -q --filter label=%s=%s); "
			   "[ -z \"$ids\" ] && break; docker network rm $ids >/dev/null 2>&1; sleep 1; done; "
			   "docker network ls --format '{{.Name}}' --filter label=%s=%s",
			   key, value, key, value, key, value);

	if (*out)
		fprintf(stderr, "harness: networks labelled %s=%s could not be removed: %s\n", key, value, out);
	free(out);
}

int engine_count_containers(const char *key, const char *value, const char *extra)
{
	char *out = sh_out("docker ps -aq --filter label=%s=%s %s | wc -l", key, value, extra ? extra : "");
	int n = atoi(out);

	free(out);
	return n;
}

int engine_count_networks(const char *key, const char *value, const char *extra)
{
	char *out = sh_out("docker network ls -q --filter label=%s=%s %s | wc -l", key, value,
			   extra ? extra : "");
	int n = atoi(out);

	free(out);
	return n;
}

void raw_request_send(int fd, json_int_t id, const char *method, json_t *params)
{
	json_t *req = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method", method,
				"params", params);
	char *frame = json_dumps(req, JSON_COMPACT);

	ck_assert_ptr_nonnull(frame);
	raw_send(fd, frame, strlen(frame));
	raw_send(fd, "\n", 1);
	free(frame);
	json_decref(req);
}

pid_t spawn_cli(const char *const *args, const char *out_path, const char *err_path)
{
	const char *argv[32];
	const char *cli = getenv("MSB_CLI");
	size_t n = 0;
	pid_t pid;

	ck_assert_msg(cli, "MSB_CLI is not set");
	argv[n++] = cli;
	for (; args && *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (in < 0 || out < 0 || err < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in, STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(err, STDERR_FILENO);
		execv(cli, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

pid_t container_pid(const char *container)
{
	char *out = sh_out("docker inspect -f '{{.State.Pid}}' '%s' 2>/dev/null", container);
	pid_t pid = (pid_t)atoi(out);

	free(out);
	return pid;
}

/* socket() and bind() in the current namespace; -errno on failure. */
static int bound_socket(int domain, int type, const void *addr, size_t addr_len)
{
	int fd = socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int zero = 0, r;

	if (fd < 0)
		return -errno;
	if (domain == AF_INET6)   /* [::] takes IPv4 too */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, addr, (socklen_t)addr_len) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int netns_bound_socket(pid_t pid, int domain, int type, const void *addr, size_t addr_len)
{
	char path[64];
	int self, ns, fd;

	if (pid <= 0)
		return bound_socket(domain, type, addr, addr_len);
	self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		return -errno;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0) {
		fd = -errno;
		close(self);
		return fd;
	}
	if (setns(ns, CLONE_NEWNET) < 0) {
		fd = -errno;
	} else {
		fd = bound_socket(domain, type, addr, addr_len);
		/* Back home: a thread left in the container would open every later socket there. */
		if (setns(self, CLONE_NEWNET) < 0)
			abort();
	}
	close(ns);
	close(self);
	return fd;
}

/* ---- additions for the fault suite (check_faults.c) ---------------------- */

/* The inodes of the Unix sockets at path, from /proc/net/unix (a listener
 * and every connection accepted on it carry its path). malloc'd; *ret_n set. */
static unsigned long *unix_inodes_at(const char *path, size_t *ret_n)
{
	FILE *f = fopen("/proc/net/unix", "r");
	unsigned long *v = NULL;
	size_t n = 0;
	char line[512];

	*ret_n = 0;
	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		unsigned long inode;
		char p[256];

		/* Num RefCount Protocol Flags Type St Inode [Path] */
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %255s", &inode, p) == 2 && strcmp(p, path) == 0) {
			unsigned long *nv = realloc(v, (n + 1) * sizeof(*v));

			if (!nv)
				break;
			v = nv;
			v[n++] = inode;
		}
	}
	fclose(f);
	*ret_n = n;
	return v;
}

bool fd_census_take(pid_t pid, const char *sock, struct fd_census *c)
{
	char dir[64];
	size_t n_inodes;
	unsigned long *inodes = unix_inodes_at(sock, &n_inodes);
	struct dirent *e;
	DIR *d;

	memset(c, 0, sizeof(*c));
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d) {
		free(inodes);
		return false;
	}
	while ((e = readdir(d))) {
		char path[320], target[128];
		unsigned long inode;
		ssize_t len;
		bool on = false;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue;       /* closed meanwhile */
		target[len] = '\0';
		if (sscanf(target, "socket:[%lu]", &inode) != 1) {
			c->files++;
			continue;
		}
		for (size_t i = 0; i < n_inodes && !on; i++)
			on = inodes[i] == inode;
		if (on)
			c->on_sock++;
		else
			c->other_sock++;
	}
	closedir(d);
	free(inodes);
	return true;
}

char *harness_b64_encode(const void *data, size_t len)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = data;
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;

	ck_assert_ptr_nonnull(out);
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		*o++ = a[v >> 18 & 63];
		*o++ = a[v >> 12 & 63];
		*o++ = i + 1 < len ? a[v >> 6 & 63] : '=';
		*o++ = i + 2 < len ? a[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

char *harness_b64_field(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	uint8_t *bytes = NULL;
	size_t n = 0;
	char *out;

	if (!json_is_string(v) ||
	    msb_base64_decode(json_string_value(v), json_string_length(v), &bytes, &n) < 0)
		return NULL;
	out = malloc(n + 1);
	if (out) {
		memcpy(out, bytes, n);
		out[n] = '\0';
	}
	free(bytes);
	return out;
}
