/* gsbench.c — the guest CPU and scale benches' shared parts (gsbench.h). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "gsbench.h"
#include "xmalloc.h"

#define GS_MAX_ARGV (16 + 2 * GS_MAX_SETS)
#define GS_LINE_MAX 8192
#define GS_REGISTRY_LINE "registry: "

volatile sig_atomic_t gs_interrupted;

static void on_signal(int sig)
{
	(void)sig;
	gs_interrupted = 1;
}

void gs_signals_install(void)
{
	struct sigaction sa = { .sa_handler = on_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

double gs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void gs_sleep_ms(double ms)
{
	double end = gs_now_ms() + ms;

	while (!gs_interrupted) {
		double left = end - gs_now_ms();
		struct timespec ts;

		if (left <= 0)
			return;
		ts.tv_sec = (time_t)(left / 1000.0);
		ts.tv_nsec = (long)((left - (double)ts.tv_sec * 1000.0) * 1e6);
		nanosleep(&ts, NULL);
	}
}

/* ---- the daemon ------------------------------------------------------ */

const char *gs_daemon_path(const char *path)
{
	const char *env = getenv("MSB_DAEMON");

	if (path && *path)
		return path;
	if (env && *env)
		return env;
	return GS_DEFAULT_DAEMON;
}

int gs_daemon_prepare(struct gs_daemon *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/msb-gsbench-XXXXXX");
	if (!mkdtemp(d->dir)) {
		int r = -errno;

		fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
		d->dir[0] = '\0';
		return r;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/msb.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
	pthread_mutex_init(&d->lock, NULL);
	d->registry_line_ms = -1;
	d->registry_line_count = -1;
	return 0;
}

struct reader_arg {
	struct gs_daemon *d;
	int fd;
};

/* "registry: N sandbox(es) with our labels": the first one after start. */
static void reader_note(struct gs_daemon *d, const char *line, double at)
{
	const char *p = strstr(line, GS_REGISTRY_LINE);

	pthread_mutex_lock(&d->lock);
	d->lines++;
	if (p && d->registry_line_ms < 0) {
		d->registry_line_ms = at;
		d->registry_line_count = strtol(p + strlen(GS_REGISTRY_LINE), NULL, 10);
	}
	pthread_mutex_unlock(&d->lock);
}

/* The daemon's stderr, line by line, stamped with the time (ms since the
 * fork) it was read, into d->log. Ends at EOF (the daemon exited). */
static void *reader_main(void *arg)
{
	struct reader_arg *ra = arg;
	struct gs_daemon *d = ra->d;
	FILE *in = fdopen(ra->fd, "r");
	_cleanup_fclose_ FILE *out = fopen(d->log, "a");
	char line[GS_LINE_MAX];
	sigset_t mask;

	free(ra);
	/* SIGINT and SIGTERM are the main thread's: here they would end fgets. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	if (!in)
		return NULL;
	while (fgets(line, sizeof(line), in)) {
		double at = gs_now_ms() - d->start_ms;

		reader_note(d, line, at);
		if (out) {
			fprintf(out, "[%+10.3f ms] %s", at, line);
			fflush(out);
		}
	}
	fclose(in);
	return NULL;
}

static size_t daemon_argv(const char **argv, const struct gs_daemon *d, const char *daemon,
			  char *lock_opt, char *const *sets, size_t n_sets)
{
	size_t n = 0;

	argv[n++] = daemon;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--set";
	argv[n++] = "egress.proxy_binary=";
	argv[n++] = "--set";
	argv[n++] = lock_opt;
	for (size_t i = 0; i < n_sets && n + 3 < GS_MAX_ARGV; i++) {
		argv[n++] = "--set";
		argv[n++] = sets[i];
	}
	argv[n] = NULL;
	return n;
}

static void daemon_child(const char **argv, int out_fd)
{
	int null = open("/dev/null", O_RDONLY);

	/* Its own process group: a ^C at the terminal reaches only the bench,
	 * which then stops the daemon itself. */
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	signal(SIGPIPE, SIG_DFL);   /* as any daemon is started: not our SIG_IGN */
	if (null >= 0)
		dup2(null, STDIN_FILENO);
	dup2(out_fd, STDOUT_FILENO);
	dup2(out_fd, STDERR_FILENO);
	execv(argv[0], (char *const *)argv);
	fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

int gs_daemon_start(struct gs_daemon *d, const char *daemon, const char *lock_file,
		    char *const *sets, size_t n_sets)
{
	const char *argv[GS_MAX_ARGV + 1];
	_cleanup_free_ char *lock_opt = NULL;
	struct reader_arg *ra;
	int fds[2];

	if (lock_file)
		lock_opt = xasprintf("freeze.lock_file=%s", lock_file);
	else
		lock_opt = xasprintf("freeze.lock_file=%s/freeze.lock", d->dir);
	daemon_argv(argv, d, daemon, lock_opt, sets, n_sets);
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	d->registry_line_ms = -1;
	d->start_ms = gs_now_ms();
	d->pid = fork();
	if (d->pid < 0) {
		int r = -errno;

		close(fds[0]);
		close(fds[1]);
		d->pid = 0;
		return r;
	}
	if (d->pid == 0)
		daemon_child(argv, fds[1]);
	close(fds[1]);
	ra = xmalloc(sizeof(*ra));
	*ra = (struct reader_arg){ .d = d, .fd = fds[0] };
	if (pthread_create(&d->reader, NULL, reader_main, ra) != 0) {
		free(ra);
		close(fds[0]);
		return 0;    /* the daemon runs on; its log is lost (stderr pipe closed) */
	}
	d->reader_on = true;
	return 0;
}

static bool socket_accepts(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	return connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0;
}

int gs_daemon_wait_listening(struct gs_daemon *d, int timeout_ms)
{
	double deadline = gs_now_ms() + timeout_ms;
	int status;

	while (!socket_accepts(d->sock)) {
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr, "maf-sandboxd exited at start (status %d)\n", status);
			if (d->reader_on) {
				pthread_join(d->reader, NULL);
				d->reader_on = false;
			}
			gs_daemon_dump_log(d);
			return -ECHILD;
		}
		if (gs_now_ms() > deadline || gs_interrupted)
			return -ETIMEDOUT;
		gs_sleep_ms(GS_POLL_MS);
	}
	return 0;
}

int gs_daemon_stop(struct gs_daemon *d)
{
	double deadline = gs_now_ms() + GS_STOP_TIMEOUT_MS;
	int status = 0, rc = 0;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		for (;;) {
			pid_t w = waitpid(d->pid, &status, WNOHANG);

			if (w == d->pid || (w < 0 && errno != EINTR))
				break;
			if (gs_now_ms() > deadline) {
				fprintf(stderr, "maf-sandboxd did not stop within %d ms: SIGKILL\n",
					GS_STOP_TIMEOUT_MS);
				kill(d->pid, SIGKILL);
				waitpid(d->pid, &status, 0);
				break;
			}
			usleep(GS_POLL_MS * 1000);
		}
		rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		d->pid = 0;
	}
	if (d->reader_on) {
		pthread_join(d->reader, NULL);
		d->reader_on = false;
	}
	return rc;
}

void gs_daemon_cleanup(struct gs_daemon *d, const char *keep_log_as)
{
	_cleanup_free_ char *cmd = NULL;

	if (!d->dir[0])
		return;
	if (keep_log_as && rename(d->log, keep_log_as) == 0)
		fprintf(stderr, "daemon log kept: %s\n", keep_log_as);
	cmd = xasprintf("rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", d->dir);
	d->dir[0] = '\0';
	pthread_mutex_destroy(&d->lock);
}

void gs_daemon_dump_log(const struct gs_daemon *d)
{
	_cleanup_fclose_ FILE *f = fopen(d->log, "r");
	char buf[4096];
	size_t n;

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", d->log);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end ----\n");
}

int gs_proc_mem(pid_t pid, long *ret_rss_kib, long *ret_hwm_kib)
{
	char path[64], line[256];
	_cleanup_fclose_ FILE *f = NULL;
	long rss = -1, hwm = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "VmRSS:", 6) == 0)
			rss = strtol(line + 6, NULL, 10);
		else if (strncmp(line, "VmHWM:", 6) == 0)
			hwm = strtol(line + 6, NULL, 10);
	}
	if (rss < 0 || hwm < 0)
		return -ENODATA;
	*ret_rss_kib = rss;
	*ret_hwm_kib = hwm;
	return 0;
}

/* ---- client calls with a deadline ------------------------------------- */

void gs_client_init(struct gs_client *c, const char *sock, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->sock = sock;
	c->timeout_ms = timeout_ms;
}

void gs_client_close(struct gs_client *c)
{
	c->conn = msb_conn_free(c->conn);
}

static void client_note_failure(struct gs_client *c, const char *method, int r)
{
	c->errors++;
	if (r == MSB_E_REMOTE) {
		snprintf(c->last_error, sizeof(c->last_error), "%s: %s",
			 msb_last_error_type(c->conn) ? msb_last_error_type(c->conn) : "?",
			 msb_last_error_message(c->conn) ? msb_last_error_message(c->conn) : "");
		return;
	}
	snprintf(c->last_error, sizeof(c->last_error), "%s", msb_strerror(r));
	if (r == MSB_E_TIMEOUT) {
		c->hangs++;
		fprintf(stderr, "HANG: %s had no reply within %d ms\n", method, c->timeout_ms);
	} else {
		fprintf(stderr, "%s: %s\n", method, msb_strerror(r));
	}
	/* Unusable now: the next call connects again. */
	c->conn = msb_conn_free(c->conn);
}

int gs_call(struct gs_client *c, const char *method, json_t *params, json_t **ret_result)
{
	double t0 = gs_now_ms();
	int r;

	c->calls++;
	c->last_error[0] = '\0';
	if (!c->conn) {
		r = msb_connect(c->sock, &c->conn);
		if (r != MSB_OK) {
			json_decref(params);
			c->errors++;
			c->last_ms = gs_now_ms() - t0;
			snprintf(c->last_error, sizeof(c->last_error), "%s", msb_strerror(r));
			return r;
		}
		msb_set_timeout(c->conn, c->timeout_ms);
	}
	r = msb_call(c->conn, method, params, ret_result);
	c->last_ms = gs_now_ms() - t0;
	if (r != MSB_OK)
		client_note_failure(c, method, r);
	return r;
}

const char *gs_client_error_type(const struct gs_client *c)
{
	const char *t = c->conn ? msb_last_error_type(c->conn) : NULL;

	return t ? t : "";
}

/* ---- the engine, directly ----------------------------------------------- */

static CURL *engine_curl;

struct gs_buf {
	char *p;
	size_t len;
};

static size_t engine_write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct gs_buf *b = arg;
	size_t n = size * nmemb;

	b->p = xrealloc(b->p, b->len + n + 1);
	memcpy(b->p + b->len, ptr, n);
	b->len += n;
	b->p[b->len] = '\0';
	return n;
}

static const char *engine_socket(void)
{
	const char *h = getenv("DOCKER_HOST");

	if (h && strncmp(h, "unix://", 7) == 0)
		return h + 7;
	return "/var/run/docker.sock";
}

int gs_engine_init(void)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO;
	engine_curl = curl_easy_init();
	return engine_curl ? 0 : -ENOMEM;
}

void gs_engine_cleanup(void)
{
	if (engine_curl)
		curl_easy_cleanup(engine_curl);
	engine_curl = NULL;
	curl_global_cleanup();
}

int gs_engine(const char *method, const char *path, const json_t *body, long *ret_status,
	      json_t **ret_body)
{
	_cleanup_free_ char *url = xasprintf("http://docker" GS_ENGINE_API "%s", path);
	_cleanup_free_ char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *headers = NULL;
	struct gs_buf b = { 0 };
	CURLcode cc;

	if (!engine_curl)
		return -EIO;
	curl_easy_reset(engine_curl);
	curl_easy_setopt(engine_curl, CURLOPT_UNIX_SOCKET_PATH, engine_socket());
	curl_easy_setopt(engine_curl, CURLOPT_URL, url);
	curl_easy_setopt(engine_curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(engine_curl, CURLOPT_TIMEOUT_MS, (long)GS_ENGINE_TIMEOUT_MS);
	curl_easy_setopt(engine_curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(engine_curl, CURLOPT_WRITEFUNCTION, engine_write_cb);
	curl_easy_setopt(engine_curl, CURLOPT_WRITEDATA, &b);
	if (payload) {
		headers = curl_slist_append(headers, "Content-Type: application/json");
		curl_easy_setopt(engine_curl, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(engine_curl, CURLOPT_POSTFIELDS, payload);
	}
	cc = curl_easy_perform(engine_curl);
	curl_slist_free_all(headers);
	if (cc != CURLE_OK) {
		fprintf(stderr, "engine %s %s: %s\n", method, path, curl_easy_strerror(cc));
		free(b.p);
		return -EIO;
	}
	curl_easy_getinfo(engine_curl, CURLINFO_RESPONSE_CODE, ret_status);
	if (ret_body)
		*ret_body = b.len ? json_loadb(b.p, b.len, 0, NULL) : NULL;
	free(b.p);
	return 0;
}

/* "?all=1&filters={"label":["key=value"]}", URL-escaped. */
static char *label_query(const char *key, const char *value)
{
	json_t *f = json_pack("{s:[s++]}", "label", key, "=", value);
	_cleanup_free_ char *text = json_dumps(f, JSON_COMPACT);
	char *esc = curl_easy_escape(engine_curl, text, 0);
	char *q = xasprintf("/containers/json?all=1&filters=%s", esc);

	curl_free(esc);
	json_decref(f);
	return q;
}

/* The containers labelled key=value (new reference), or NULL when the
 * engine cannot list them within GS_CLEANUP_WAIT_MS (it may be restarting:
 * the engine is shared). Not cut short by SIGINT: this is the cleanup. */
static json_t *list_labelled(const char *key, const char *value)
{
	_cleanup_free_ char *path = label_query(key, value);
	double deadline = gs_now_ms() + GS_CLEANUP_WAIT_MS;
	long status = 0;

	for (;;) {
		json_t *list = NULL;

		if (gs_engine("GET", path, NULL, &status, &list) == 0 && status == 200 && json_is_array(list))
			return list;
		json_decref(list);
		if (gs_now_ms() > deadline)
			break;
		usleep(GS_CLEANUP_RETRY_MS * 1000);
	}
	fprintf(stderr, "cannot list containers labelled %s=%s (status %ld)\n", key, value, status);
	return NULL;
}

long gs_engine_remove_labelled(const char *key, const char *value)
{
	json_t *list, *item;
	long status = 0, removed = 0;
	size_t i;

	if (!engine_curl || !(list = list_labelled(key, value)))
		return -EIO;
	json_array_foreach(list, i, item) {
		const char *id = json_string_value(json_object_get(item, "Id"));
		_cleanup_free_ char *del = NULL;

		if (!id)
			continue;
		del = xasprintf("/containers/%s?force=1&v=1", id);
		if (gs_engine("DELETE", del, NULL, &status, NULL) == 0 && (status == 204 || status == 404))
			removed++;
		else
			fprintf(stderr, "cannot remove container %.12s (status %ld)\n", id, status);
	}
	json_decref(list);
	return removed;
}

char *gs_engine_version(void)
{
	json_t *v = NULL;
	long status = 0;
	char *out;

	if (gs_engine("GET", "/version", NULL, &status, &v) < 0 || status != 200) {
		json_decref(v);
		return xstrdup("?");
	}
	out = json_string_value(json_object_get(v, "Version")) ?
	      xstrdup(json_string_value(json_object_get(v, "Version"))) : xstrdup("?");
	json_decref(v);
	return out;
}

/* ---- the test image ---------------------------------------------------- */

int gs_test_image(const char *ref)
{
	const char *script = getenv("MSB_TESTIMAGE");
	int status;
	pid_t pid;

	if (!script || !*script)
		script = GS_TESTIMAGE_SCRIPT;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execl("/bin/sh", "sh", script, ref, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "cannot build the test image %s with %s\n", ref, script);
		return -EIO;
	}
	return 0;
}

/* ---- numbers ------------------------------------------------------------ */

void gs_samples_add(struct gs_samples *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = v;
}

void gs_samples_free(struct gs_samples *s)
{
	free(s->v);
	*s = (struct gs_samples){ 0 };
}

static int double_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double gs_percentile(const struct gs_samples *s, double p)
{
	_cleanup_free_ double *sorted = NULL;
	size_t rank;

	if (s->n == 0)
		return 0;
	sorted = xmalloc(s->n * sizeof(*sorted));
	memcpy(sorted, s->v, s->n * sizeof(*sorted));
	qsort(sorted, s->n, sizeof(*sorted), double_cmp);
	rank = (size_t)ceil(p / 100.0 * (double)s->n);
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return sorted[rank - 1];
}

double gs_max(const struct gs_samples *s)
{
	double m = 0;

	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] > m)
			m = s->v[i];
	return m;
}

double gs_mean(const struct gs_samples *s)
{
	double sum = 0;

	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return s->n ? sum / (double)s->n : 0;
}

json_t *gs_samples_json(const struct gs_samples *s)
{
	return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)s->n,
			 "p50_ms", gs_percentile(s, 50), "p90_ms", gs_percentile(s, 90),
			 "p99_ms", gs_percentile(s, 99), "max_ms", gs_max(s), "mean_ms", gs_mean(s));
}

static char *cpu_model(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			line[strcspn(line, "\n")] = '\0';
			return xstrdup(colon + 2);
		}
	}
	return xstrdup("?");
}

json_t *gs_host_json(void)
{
	_cleanup_free_ char *model = cpu_model();
	double load[3] = { 0 };
	struct utsname u;

	if (getloadavg(load, 3) < 0)
		load[0] = load[1] = load[2] = -1;
	if (uname(&u) < 0)
		snprintf(u.release, sizeof(u.release), "?");
	return json_pack("{s:I, s:s, s:[f,f,f], s:s}", "cpus_online", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
			 "cpu_model", model, "loadavg", load[0], load[1], load[2], "kernel", u.release);
}

int gs_json_write(const char *path, const json_t *j)
{
	if (!j) {
		fprintf(stderr, "the JSON report could not be built (a bug in the bench)\n");
		return -EINVAL;
	}
	if (json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS) < 0) {
		fprintf(stderr, "cannot write %s\n", path);
		return -EIO;
	}
	return 0;
}

int gs_add_set(char **sets, size_t *n, char *arg)
{
	if (!strchr(arg, '=') || arg[0] == '=') {
		fprintf(stderr, "--set wants KEY=VALUE, not %s\n", arg);
		return -EINVAL;
	}
	if (*n >= GS_MAX_SETS) {
		fprintf(stderr, "at most %d --set options\n", GS_MAX_SETS);
		return -E2BIG;
	}
	sets[(*n)++] = arg;
	return 0;
}

int gs_parse_long(const char *s, long min, long max, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "not a number from %ld to %ld: %s\n", min, max, s);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}
