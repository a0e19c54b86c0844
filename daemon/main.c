/* maf-sandboxd — gives AI agents isolated Docker sandboxes over JSON-RPC. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "acquire.h"
#include "engine.h"
#include "fileop.h"
#include "egress.h"
#include "execrun.h"
#include "freeze.h"
#include "hostlock.h"
#include "reap.h"
#include "registry.h"
#include "registry_sync.h"
#include "log.h"
#include "plane_local.h"
#include "msb-build.h"
#include "msb-limits.h"
#include "sd.h"
#include "startup.h"
#include "server.h"
#include "xmalloc.h"

struct msbd_main {
	struct msbd d;
	struct msbd_cmdline cmdline;
	struct event *sig_term, *sig_int, *sig_hup;
	struct event *drain_timer;
	struct event *flush_timer;
	struct event *thaw_timer;        /* at the drain deadline: waits for file calls' thaws */
	int thaw_waited_ms;
	struct event *reap_timer;
	bool reap_running;
	bool stopping;
	struct hostlock *hostlock;      /* freeze.lock_file: outlives the freeze table */
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: maf-sandboxd [OPTIONS]\n"
		"Serve maf-sandbox's JSON-RPC protocol on a Unix socket, driving a Docker engine.\n\n"
		"  -f, --config FILE       configuration file (default %s if it exists)\n"
		"  -s, --socket PATH       listen on PATH (same as --set socket.path=PATH);\n"
		"                          ignored under systemd socket activation\n"
		"  -e, --engine-host URL   Docker endpoint, unix:///path or tcp://host:port\n"
		"                          (same as --set engine.host=URL)\n"
		"      --set KEY=VALUE     set any configuration key (repeatable)\n"
		"  -d, --debug             debug logging (same as --set log.debug=true)\n"
		"  -n, --check-config      check the configuration as start-up does (the\n"
		"                          file, the freeze lock file, the Docker endpoint,\n"
		"                          files.plane), print it, and exit (1 if refused)\n"
		"  -h, --help              this help\n"
		"  -V, --version           print the version\n\n"
		"Signals: TERM/INT drain requests in flight, then exit 0; HUP reloads the\n"
		"configuration (kept as it was if the new one is invalid).\n",
		MSB_DEFAULT_CONFIG_FILE);
}

static void cmdline_add(struct msbd_cmdline *c, char *set)
{
	c->sets = xrealloc(c->sets, (c->n_sets + 2) * sizeof(*c->sets));
	c->sets[c->n_sets++] = set;
	c->sets[c->n_sets] = NULL;
}

static void cmdline_free(struct msbd_cmdline *c)
{
	for (size_t i = 0; i < c->n_sets; i++)
		free(c->sets[i]);
	free(c->sets);
}

/* Returns -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, struct msbd_cmdline *c, bool *ret_check)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'f' },
		{ "socket", required_argument, NULL, 's' },
		{ "engine-host", required_argument, NULL, 'e' },
		{ "set", required_argument, NULL, 'S' },
		{ "debug", no_argument, NULL, 'd' },
		{ "check-config", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	int ch;

	opterr = 0;     /* said here, labelled error: */
	while ((ch = getopt_long(argc, argv, ":f:s:e:dnhV", opts, NULL)) != -1) {
		switch (ch) {
		case 'f': c->config_file = optarg; break;
		case 's': cmdline_add(c, xasprintf("socket.path=%s", optarg)); break;
		case 'e': cmdline_add(c, xasprintf("engine.host=%s", optarg)); break;
		case 'S': cmdline_add(c, xstrdup(optarg)); break;
		case 'd': cmdline_add(c, xstrdup("log.debug=true")); break;
		case 'n': *ret_check = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("maf-sandboxd %s\n", PACKAGE_VERSION); return 0;
		case ':':
			fprintf(stderr, "maf-sandboxd: error: option '%s' needs an argument\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		default:
			if (optopt)
				fprintf(stderr, "maf-sandboxd: error: unknown option '-%c'\n", optopt);
			else
				fprintf(stderr, "maf-sandboxd: error: unknown option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "maf-sandboxd: error: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	return -1;
}

/* Every followed egress proxy holds an engine connection, beside the
 * clients' connections: take the hard limit on descriptors (systemd's soft
 * default is 1024). */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the descriptor limit");
	}
}

static struct engine_options engine_options_from(const struct msbd_config *cfg)
{
	return (struct engine_options){
		.timeout_ms = cfg->engine_timeout_ms,
		.reconnect_min_ms = cfg->engine_reconnect_min_ms,
		.reconnect_max_ms = cfg->engine_reconnect_max_ms,
	};
}

static void engine_state_changed_cb(struct engine *e, enum engine_state old_state,
				    enum engine_state new_state, void *arg)
{
	const struct engine_info *info = engine_get_info(e);
	_cleanup_free_ char *status = NULL;

	(void)old_state, (void)arg;
	if (new_state == ENGINE_REACHABLE && info)
		status = xasprintf("serving; engine reachable: Docker %s, API %s", info->version,
				   info->api_version);
	else
		status = xasprintf("serving; engine %s%s%s", engine_state_to_string(new_state),
				   engine_get_last_error(e) ? ": " : "",
				   engine_get_last_error(e) ? engine_get_last_error(e) : "");
	sd_notify_status(status);
}

/* ---- the timed sweep (reap.max_age_s, off by default) ---------------- */

static void reap_timer_arm(struct msbd_main *m)
{
	struct timeval tv = { m->d.dom.config->reap_interval_s, 0 };

	if (m->d.dom.config->reap_max_age_s > 0 && !m->stopping)
		evtimer_add(m->reap_timer, &tv);
	else
		evtimer_del(m->reap_timer);
}

static void timed_reap_done_cb(const struct reap_result *r, void *arg)
{
	struct msbd_main *m = arg;

	m->reap_running = false;
	log_info("timed sweep: removed %zu sandbox(es), %zu proxy container(s), %zu network(s); "
		 "%zu failure(s)", r->disposed, r->proxies_removed, r->networks_removed,
		 json_array_size(r->failures));
}

static void reap_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct msbd_main *m = arg;
	struct timespec now;
	int r;

	(void)fd, (void)what;
	reap_timer_arm(m);
	if (m->reap_running)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	r = reap_start(&m->d.dom, m->d.dom.config->reap_max_age_s, NULL, (double)now.tv_sec + now.tv_nsec / 1e9,
		       timed_reap_done_cb, m);
	if (r < 0)
		log_warnx("timed sweep not started: %s", strerror(-r));
	else
		m->reap_running = true;
}

/* A new configuration that the next start would refuse is refused now,
 * by the same checks (startup.h). */
static int reload_startup_check(const struct msbd_config *cfg, char **reterr_message)
{
	struct msbd_startup su = { 0 };
	int r = msbd_startup_check(cfg, &su, reterr_message);

	msbd_startup_clear(&su);
	return r;
}

static void reload(struct msbd_main *m)
{
	struct msbd_config *cfg = NULL;
	_cleanup_free_ char *err = NULL, *restart = NULL;
	struct engine_options eo;

	sd_notify_reloading();
	if (config_load(&m->cmdline, &cfg, &err) < 0 || reload_startup_check(cfg, &err) < 0) {
		log_warnx("reload: %s; keeping the old configuration", err);
		sd_notify_ready("serving; reload failed, old configuration kept");
		config_free(cfg);
		return;
	}
	restart = config_restart_keys_changed(m->d.dom.config, cfg);
	if (restart)
		log_warnx("reload: %s changed; that takes effect after a restart", restart);
	config_free(m->d.dom.config);
	m->d.dom.config = cfg;
	log_set_debug(cfg->debug);
	eo = engine_options_from(cfg);
	engine_set_options(m->d.dom.engine, &eo);
	server_config_changed(m->d.server);
	reap_timer_arm(m);
	log_info("configuration reloaded%s%s", cfg->file ? " from " : "", cfg->file ? cfg->file : "");
	sd_notify_ready("serving; configuration reloaded");
}

static void drained_cb(void *arg)
{
	struct msbd_main *m = arg;

	log_info("requests drained, exiting");
	event_base_loopexit(m->d.dom.base, NULL);
}

static void final_flush_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct msbd_main *m = arg;

	(void)fd, (void)what;
	log_warnx("replies still unwritten after %d ms, exiting", MSB_FINAL_FLUSH_MS);
	event_base_loopexit(m->d.dom.base, NULL);
}

/* Cancels every engine request (their callers get ShuttingDown), then
 * gives the replies a moment to be written. */
static void drain_cancel_engine(struct msbd_main *m)
{
	struct timeval tv = { MSB_FINAL_FLUSH_MS / 1000, (MSB_FINAL_FLUSH_MS % 1000) * 1000 };

	evtimer_add(m->flush_timer, &tv);
	registry_sync_stop(m->d.sync);
	freeze_table_cancel_retries(m->d.dom.freezes);
	egress_shutdown(m->d.dom.egress);
	execrun_lingers_end();
	m->d.dom.engine = engine_free(m->d.dom.engine);
}

/* File calls cut short at the drain deadline unpause their guests while the
 * engine is still there: wait for that (bounded), then cancel the rest. */
static void thaw_wait_cb(evutil_socket_t fd, short what, void *arg)
{
	struct msbd_main *m = arg;
	struct timeval tv = { 0, MSB_THAW_POLL_MS * 1000 };

	(void)fd, (void)what;
	if (freeze_table_count(m->d.dom.freezes) > 0 && m->thaw_waited_ms < MSB_THAW_WAIT_MS) {
		m->thaw_waited_ms += MSB_THAW_POLL_MS;
		evtimer_add(m->thaw_timer, &tv);
		return;
	}
	if (freeze_table_count(m->d.dom.freezes) > 0)
		log_warnx("%zu freeze(s) still on after %d ms; the next start thaws what stays paused",
			  freeze_table_count(m->d.dom.freezes), MSB_THAW_WAIT_MS);
	drain_cancel_engine(m);
}

/* The drain deadline: end what is still in flight (its callers get
 * ShuttingDown), file calls first so their guests are thawed. */
static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct msbd_main *m = arg;

	(void)fd, (void)what;
	log_warnx("%u request(s) still in flight after %ld ms, cancelling them",
		  server_get_stats(m->d.server)->requests_in_flight, m->d.dom.config->drain_ms);
	fileop_table_cancel_all(m->d.dom.fileops);
	m->thaw_waited_ms = 0;
	thaw_wait_cb(-1, 0, m);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct msbd_main *m = arg;
	struct timeval tv;

	(void)what;
	if (sig == SIGHUP) {
		if (m->stopping)
			log_info("SIGHUP while stopping, ignoring");
		else
			reload(m);
		return;
	}
	if (m->stopping)
		return;
	m->stopping = true;
	log_info("%s received, draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	sd_notify_stopping();
	evtimer_del(m->reap_timer);
	tv.tv_sec = m->d.dom.config->drain_ms / 1000;
	tv.tv_usec = (m->d.dom.config->drain_ms % 1000) * 1000;
	evtimer_add(m->drain_timer, &tv);
	server_drain(m->d.server, drained_cb, m);
}

static int setup_signals(struct msbd_main *m)
{
	struct event_base *b = m->d.dom.base;

	signal(SIGPIPE, SIG_IGN);
	m->sig_term = evsignal_new(b, SIGTERM, signal_cb, m);
	m->sig_int = evsignal_new(b, SIGINT, signal_cb, m);
	m->sig_hup = evsignal_new(b, SIGHUP, signal_cb, m);
	m->drain_timer = evtimer_new(b, drain_timeout_cb, m);
	m->flush_timer = evtimer_new(b, final_flush_timeout_cb, m);
	m->thaw_timer = evtimer_new(b, thaw_wait_cb, m);
	m->reap_timer = evtimer_new(b, reap_timer_cb, m);
	if (!m->sig_term || !m->sig_int || !m->sig_hup || !m->drain_timer || !m->flush_timer || !m->thaw_timer ||
	    !m->reap_timer ||
	    evsignal_add(m->sig_term, NULL) < 0 || evsignal_add(m->sig_int, NULL) < 0 ||
	    evsignal_add(m->sig_hup, NULL) < 0)
		return -EIO;
	return 0;
}

/* files.plane, as msbd_startup_check() decided it. */
static void log_plane(struct msbd *d, const struct msbd_startup *su)
{
	d->dom.plane_local = su->plane_local;
	d->dom.plane_reason = su->plane_reason;
	if (d->dom.plane_local)
		log_info("file plane: local (openat2 beneath each container's root, no freeze)");
	else
		log_info("file plane: archive (%s)", d->dom.plane_reason);
}

/* The exec kill from the host (execkill.h, m_exec.c): the engine's
 * processes are this host's, the daemon is root, pidfds exist. */
static void choose_exec_kill(struct msbd *d, const struct engine_endpoint *ep)
{
	int fd;

	d->dom.exec_host_kill = false;
	if (ep->kind != ENGINE_ENDPOINT_UNIX || geteuid() != 0) {
		log_info("exec kill: by the mark only (%s)", ep->kind != ENGINE_ENDPOINT_UNIX
			 ? "the engine is not on a local unix socket" : "the daemon does not run as root");
		return;
	}
	fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (fd < 0) {
		log_info("exec kill: by the mark only (no pidfd_open)");
		return;
	}
	close(fd);
	d->dom.exec_host_kill = true;
	log_info("exec kill: from the host (the container's cgroup), the mark as fallback");
}


static int start(struct msbd_main *m)
{
	struct msbd_startup su = { 0 };
	_cleanup_free_ char *err = NULL;
	struct engine_options eo = engine_options_from(m->d.dom.config);

	/* The same checks --check-config makes (startup.h). */
	if (msbd_startup_check(m->d.dom.config, &su, &err) < 0) {
		log_errorx("%s", err);
		return -EINVAL;
	}
	m->hostlock = TAKE_PTR(su.hostlock);
	log_debug("op", "freeze lock file %s", m->d.dom.config->freeze_lock_file);
	log_info("Docker endpoint %s (from %s)", su.endpoint->host, su.endpoint->source);
	log_plane(&m->d, &su);
	choose_exec_kill(&m->d, su.endpoint);
	m->d.dom.engine = engine_new(m->d.dom.base, TAKE_PTR(su.endpoint), &eo, engine_state_changed_cb, m);
	msbd_startup_clear(&su);
	if (!m->d.dom.engine) {
		log_errorx("cannot set up the engine client");
		return -EIO;
	}
	m->d.dom.registry = registry_new();
	m->d.dom.acquires = acquire_table_new();
	m->d.dom.freezes = freeze_table_new();
	freeze_table_set_base(m->d.dom.freezes, m->d.dom.base);
	freeze_table_set_hostlock(m->d.dom.freezes, m->hostlock);
	m->d.dom.fileops = fileop_table_new();
	m->d.dom.egress = egress_new(&m->d.dom);
	m->d.sync = registry_sync_new(&m->d.dom);
	if (!m->d.sync)
		return -EIO;
	{
		struct server_env env;

		msbd_server_env(&m->d, &env);
		m->d.server = server_new(&env);
	}
	msbd_wire_domain(&m->d);
	/* The signals before the socket: a TERM sent as soon as the socket is
	 * there (systemctl stop right after start, a test) drains, never
	 * kills the daemon by the default action. */
	if (setup_signals(m) < 0) {
		log_errorx("cannot set up signal handling");
		return -EIO;
	}
	if (server_listen(m->d.server, &err) < 0) {
		log_errorx("cannot listen: %s", err);
		return -EIO;
	}
	engine_start(m->d.dom.engine);
	registry_sync_start(m->d.sync);
	reap_timer_arm(m);
	return 0;
}

static void stop(struct msbd_main *m)
{
	/* Past the loop a second TERM must not kill us half-way through teardown
	 * (freeing the signal events restores the default action). */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	m->d.dom.publish = NULL;   /* nobody to tell from here on */
	m->d.server = server_free(m->d.server);
	/* No timer may start engine work from here on, nor run on what is freed
	 * below when the loop turns (thaw_wait_cb reads the freeze table). */
	registry_sync_stop(m->d.sync);
	if (m->reap_timer)
		evtimer_del(m->reap_timer);
	if (m->thaw_timer)
		evtimer_del(m->thaw_timer);
	if (m->drain_timer)
		evtimer_del(m->drain_timer);
	if (m->flush_timer)
		evtimer_del(m->flush_timer);
	/* Cancels every engine request: operations complete (with ShuttingDown,
	 * to clients already gone) at the next turn of the loop. */
	if (m->d.dom.freezes)
		freeze_table_cancel_retries(m->d.dom.freezes);
	egress_shutdown(m->d.dom.egress);
	execrun_lingers_end();
	m->d.dom.engine = engine_free(m->d.dom.engine);
	/* After the engine: claims still queued are failed (-ECANCELED). Then
	 * the host lock they borrowed (the kernel would drop it at exit anyway). */
	m->d.dom.freezes = freeze_table_free(m->d.dom.freezes);
	m->hostlock = hostlock_free(m->hostlock);
	/* Callbacks made active while the pass runs (an egress op's end, then
	 * its acquire's) run in the same pass. */
	if (m->d.dom.base)
		event_base_loop(m->d.dom.base, EVLOOP_NONBLOCK);
	m->d.dom.egress = egress_free(m->d.dom.egress);
	m->d.dom.acquires = acquire_table_free(m->d.dom.acquires);
	m->d.dom.fileops = fileop_table_free(m->d.dom.fileops);
	m->d.dom.registry = registry_free(m->d.dom.registry);
	m->d.sync = registry_sync_free(m->d.sync);
	if (m->sig_term)
		event_free(m->sig_term);
	if (m->sig_int)
		event_free(m->sig_int);
	if (m->sig_hup)
		event_free(m->sig_hup);
	if (m->drain_timer)
		event_free(m->drain_timer);
	if (m->flush_timer)
		event_free(m->flush_timer);
	if (m->thaw_timer)
		event_free(m->thaw_timer);
	if (m->reap_timer)
		event_free(m->reap_timer);
	m->d.dom.config = config_free(m->d.dom.config);
	if (m->d.dom.base)
		event_base_free(m->d.dom.base);
	cmdline_free(&m->cmdline);
}

/* Freed memory goes back to the system (issue 17): a fixed mmap threshold
 * (fixing it turns off glibc's dynamic one, which after the first freed
 * 40 MB reply would keep every later one on the heap) puts each large
 * frame, reply and file buffer in its own mapping, unmapped when freed; the
 * trim threshold returns the heap's free top; the server trims the rest
 * (malloc_trim) once a burst is over. */
#define MSB_MALLOC_MMAP_THRESHOLD (256 * 1024)
#define MSB_MALLOC_TRIM_THRESHOLD (1024 * 1024)

/* The loop, on the precise monotonic clock: libevent otherwise reads
 * CLOCK_MONOTONIC_COARSE, a jiffy (up to 4 ms) behind, and a deadline armed
 * from it (an exec's timeout_seconds, a file call's files.timeout_ms) can
 * fire that much before it is due. */
static struct event_base *base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *b;

	if (!cfg)
		return NULL;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	b = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return b;
}

static void malloc_tune(void)
{
	if (mallopt(M_MMAP_THRESHOLD, MSB_MALLOC_MMAP_THRESHOLD) != 1 ||
	    mallopt(M_TRIM_THRESHOLD, MSB_MALLOC_TRIM_THRESHOLD) != 1)
		/* Not glibc's allocator (a sanitizer's): it keeps its own ways. */
		log_debug("mem", "mallopt refused the allocator's thresholds; idle memory may stay with the daemon");
}

/* --check-config: the start-up checks too (startup.h), then the dump. */
static int check_config(struct msbd_main *m)
{
	struct msbd_startup su = { 0 };
	_cleanup_free_ char *err = NULL;
	int r = msbd_startup_check(m->d.dom.config, &su, &err);

	msbd_startup_clear(&su);
	if (r < 0)
		log_errorx("%s", err);        /* as start() says it */
	else
		config_dump(m->d.dom.config, stdout);
	stop(m);
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct msbd_main m = { 0 };
	_cleanup_free_ char *err = NULL;
	bool check = false;
	int r;

	log_init("maf-sandboxd", false);
	r = parse_args(argc, argv, &m.cmdline, &check);
	if (r >= 0) {
		cmdline_free(&m.cmdline);
		return r;
	}
	if (config_load(&m.cmdline, &m.d.dom.config, &err) < 0) {
		log_errorx("configuration: %s", err);
		cmdline_free(&m.cmdline);
		return 1;
	}
	if (check)
		return check_config(&m);
	log_set_debug(m.d.dom.config->debug);
	malloc_tune();
	raise_fd_limit();
	m.d.cmdline = &m.cmdline;
	clock_gettime(CLOCK_MONOTONIC, &m.d.started);
	m.d.dom.base = base_new();
	if (!m.d.dom.base)
		fatalx("cannot create the event loop");
	if (start(&m) < 0) {
		stop(&m);
		return 1;
	}
	sd_notify_ready("serving; engine connecting");
	log_info("maf-sandboxd %s serving", PACKAGE_VERSION);
	event_base_dispatch(m.d.dom.base);
	stop(&m);
	log_info("stopped");
	return 0;
}
