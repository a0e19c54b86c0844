/* scale.c — maf-sandbox-bench-scale: the daemon's memory and its registry
 * at scale.
 *
 *  1. idle:     a fresh daemon's VmRSS / VmHWM once its registry is current;
 *  2. create:   --sandboxes N workload containers made directly through the
 *               Engine API (created, never started), named and labelled with
 *               the daemon's own names.c, so they are exactly what the daemon
 *               takes for its own (it also sees them arrive on /events);
 *  3. rebuild:  the daemon restarted; the time from its fork until
 *               sandbox.list reports all N (and until it logs
 *               "registry: M sandbox(es)"); its RSS with N registered;
 *               sandbox.list latency with N registered;
 *  4. requests: --requests R calls in a weighted mix (daemon.status,
 *               sandbox.list with a scope+thread filter, files.stat and
 *               sandbox.exec `true` on one real started sandbox), after a
 *               warm-up, with the RSS read every SC_CHECKPOINT_EVERY calls;
 *               growth over SC_RSS_GROWTH_FLAG_KIB is flagged.
 * Every container carries maf-sandbox.label.msb-scale-run=<pid> and all of
 * them are removed at the end, also on failure and on SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "gsbench.h"
#include "acquire.h"     /* LABEL_KEY_JSON */
#include "names.h"
#include "sandbox.h"
#include "xmalloc.h"

#define SC_DEFAULT_SANDBOXES   1000
#define SC_MAX_SANDBOXES       20000
#define SC_DEFAULT_REQUESTS    10000
#define SC_MAX_REQUESTS        10000000
#define SC_WARMUP_REQUESTS     1000      /* before the "before" RSS of the request phase */
#define SC_CHECKPOINT_EVERY    1000      /* requests between two RSS readings */
#define SC_RSS_GROWTH_FLAG_KIB 1024      /* growth over the requests that is flagged */
#define SC_SETTLE_MS           1000      /* quiet time before an RSS reading */
#define SC_LIST_SAMPLES        200       /* sandbox.list calls per list measurement */
#define SC_ADOPT_TIMEOUT_MS    120000    /* events or a rebuild bring all N */
#define SC_EXEC_TIMEOUT_S      20
#define SC_ACQUIRE_TIMEOUT_MS  120000
#define SC_DEFAULT_IMAGE       "maf-sandbox-bench:local"
#define SC_KIND                "scale"
#define SC_LIVE_KIND           "scale-live"
#define SC_PROBE_FILE          "probe.txt"
#define SC_KEEPALIVE_CMD       { "sleep", "infinity" }   /* acquire.h ACQUIRE_KEEPALIVE_CMD */
#define SC_PIDS_LIMIT          512                       /* the daemon's sandbox.pids_limit */
#define SC_MAX_LOG_NOTES       8
#define SC_PROGRESS_EVERY      100       /* containers between two progress lines */
/* The daemon's own registry listing (main.c registry_list):
 * GET /containers/json?all=1&filters={"label":{"maf-sandbox.kind":true}}. */
#define SC_REGISTRY_LISTING \
	"/containers/json?all=1&filters=%7B%22label%22%3A%7B%22maf-sandbox.kind%22%3Atrue%7D%7D"
#define SC_LISTING_SAMPLES     5         /* timings of that listing, straight from the engine */

enum sc_method { SC_STATUS, SC_LIST, SC_STAT, SC_EXEC, _SC_METHOD_MAX };

static const char *const sc_method_names[_SC_METHOD_MAX] = {
	[SC_STATUS] = "daemon.status",
	[SC_LIST] = "sandbox.list",
	[SC_STAT] = "files.stat",
	[SC_EXEC] = "sandbox.exec",
};

static const char *sc_method_to_string(enum sc_method m)
{
	return m < _SC_METHOD_MAX ? sc_method_names[m] : "?";
}

struct sc_options {
	long sandboxes;
	long requests;
	long mix[_SC_METHOD_MAX];
	const char *json_path;
	const char *image;
	const char *daemon;
	const char *lock_file;
	char *sets[GS_MAX_SETS];
	size_t n_sets;
};

struct sc_method_stats {
	struct gs_samples ms;
	long errors;
	json_t *error_types;        /* error type (or client error) → count */
};

struct sc_mem {
	long rss_kib, hwm_kib;
};

struct sc_run {
	struct sc_options opt;
	char run_id[32];
	char scope[64];
	char live_scope[72];
	struct gs_daemon d;             /* the running daemon (A, then B) */
	struct gs_client c;
	char **names;                   /* the N containers' names */
	size_t n_created;
	long create_failures;
	struct gs_samples create_ms;
	double create_s;
	long others_idle;               /* sandboxes of others on the engine at start */
	struct sc_mem idle, after_events, registered, req_before, req_after;
	double events_ms;               /* create → A lists all N; -1 if never */
	double listening_ms, rebuilt_ms, log_line_ms;
	long log_line_count;
	long adopted, mismatched;
	struct gs_samples engine_listing_ms;   /* the registry listing, asked of the engine by us */
	long engine_listing_entries;
	struct gs_samples list_scope_ms, list_thread_ms, list_all_ms;
	long list_all_entries;
	char live[80];                  /* the started sandbox */
	struct sc_method_stats by_method[_SC_METHOD_MAX];
	long requests_done;
	json_t *checkpoints;            /* [{requests, rss_kib}] */
	long removed;
	double remove_s;
	json_t *log_notes;              /* warnings and errors the daemons logged */
	json_t *host_start, *host_end;  /* the host (its load average) at start and end */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: maf-sandbox-bench-scale [OPTIONS]\n"
		"The daemon's RSS idle, with N registered sandboxes (and how long rebuilding its\n"
		"registry from them takes), and across R requests.\n\n"
		"  --sandboxes N      containers to create and register (default %d)\n"
		"  --requests R       requests in the mix after a warm-up of %d (default %d)\n"
		"  --mix S,L,F,E      weights of daemon.status, sandbox.list (filtered),\n"
		"                     files.stat, sandbox.exec `true` (default 1,1,1,1)\n"
		"  --json FILE        also write the results as JSON\n"
		"  --image REF        image (default: build %s with testimage.sh)\n"
		"  --daemon PATH      maf-sandboxd (default $MSB_DAEMON, else the built one)\n"
		"  --lock-file PATH   daemon freeze.lock_file (default: in the private dir)\n"
		"  --set KEY=VALUE    forwarded to the daemon as --set (repeatable); a sandbox.admin_group\n"
		"                     given here that holds the caller puts its containers in root's key space\n",
		SC_DEFAULT_SANDBOXES, SC_WARMUP_REQUESTS, SC_DEFAULT_REQUESTS, SC_DEFAULT_IMAGE);
}

static int parse_mix(const char *s, long mix[_SC_METHOD_MAX])
{
	long sum = 0;
	int n = 0;

	if (sscanf(s, "%ld,%ld,%ld,%ld%n", &mix[0], &mix[1], &mix[2], &mix[3], &n) != 4 || s[n]) {
		fprintf(stderr, "--mix wants four weights S,L,F,E, not %s\n", s);
		return -EINVAL;
	}
	for (int i = 0; i < _SC_METHOD_MAX; i++) {
		if (mix[i] < 0 || mix[i] > 1000) {
			fprintf(stderr, "--mix weights are from 0 to 1000\n");
			return -EINVAL;
		}
		sum += mix[i];
	}
	if (sum == 0) {
		fprintf(stderr, "--mix needs at least one weight above 0\n");
		return -EINVAL;
	}
	return 0;
}

static int parse_options(int argc, char **argv, struct sc_options *o)
{
	enum { O_SANDBOXES = 256, O_REQUESTS, O_MIX, O_JSON, O_IMAGE, O_DAEMON, O_LOCK, O_SET };
	static const struct option longopts[] = {
		{ "sandboxes", required_argument, NULL, O_SANDBOXES },
		{ "requests", required_argument, NULL, O_REQUESTS },
		{ "mix", required_argument, NULL, O_MIX },
		{ "json", required_argument, NULL, O_JSON },
		{ "image", required_argument, NULL, O_IMAGE },
		{ "daemon", required_argument, NULL, O_DAEMON },
		{ "lock-file", required_argument, NULL, O_LOCK },
		{ "set", required_argument, NULL, O_SET },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int ch;

	*o = (struct sc_options){ .sandboxes = SC_DEFAULT_SANDBOXES, .requests = SC_DEFAULT_REQUESTS,
				  .mix = { 1, 1, 1, 1 } };
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int r = 0;

		switch (ch) {
		case O_SANDBOXES: r = gs_parse_long(optarg, 1, SC_MAX_SANDBOXES, &o->sandboxes); break;
		case O_REQUESTS: r = gs_parse_long(optarg, 0, SC_MAX_REQUESTS, &o->requests); break;
		case O_MIX: r = parse_mix(optarg, o->mix); break;
		case O_JSON: o->json_path = optarg; break;
		case O_IMAGE: o->image = optarg; break;
		case O_DAEMON: o->daemon = optarg; break;
		case O_LOCK: o->lock_file = optarg; break;
		case O_SET: r = gs_add_set(o->sets, &o->n_sets, optarg); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
		if (r < 0)
			return r;
	}
	if (optind < argc) {
		fprintf(stderr, "unexpected argument: %s\n", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* ---- the daemon ----------------------------------------------------------- */

static int read_mem(const struct sc_run *s, struct sc_mem *m)
{
	int r = gs_proc_mem(s->d.pid, &m->rss_kib, &m->hwm_kib);

	if (r < 0)
		fprintf(stderr, "cannot read /proc/%d/status: %s\n", (int)s->d.pid, strerror(-r));
	return r;
}

/* Starts a daemon in a new private dir and waits until it listens. */
static int daemon_up(struct sc_run *s)
{
	int r = gs_daemon_prepare(&s->d);

	if (r < 0)
		return r;
	r = gs_daemon_start(&s->d, gs_daemon_path(s->opt.daemon), s->opt.lock_file, s->opt.sets,
			    s->opt.n_sets);
	if (r < 0)
		return r;
	r = gs_daemon_wait_listening(&s->d, GS_LISTEN_TIMEOUT_MS);
	s->listening_ms = gs_now_ms() - s->d.start_ms;
	gs_client_init(&s->c, s->d.sock, GS_CALL_TIMEOUT_MS);
	return r;
}

/* Keeps the daemon's warnings and errors (at most SC_MAX_LOG_NOTES). */
static void collect_log_notes(struct sc_run *s)
{
	_cleanup_fclose_ FILE *f = fopen(s->d.log, "r");
	char line[1024];

	while (f && fgets(line, sizeof(line), f)) {
		if (!strstr(line, ": warning: ") && !strstr(line, ": error: ") && !strstr(line, ": fatal: "))
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (json_array_size(s->log_notes) < SC_MAX_LOG_NOTES)
			json_array_append_new(s->log_notes, json_string(line));
	}
}

static int daemon_down(struct sc_run *s, bool keep_log)
{
	_cleanup_free_ char *keep = NULL;
	int rc;

	gs_client_close(&s->c);
	rc = gs_daemon_stop(&s->d);
	if (rc != 0)
		fprintf(stderr, "maf-sandboxd exited with status %d\n", rc);
	collect_log_notes(s);
	if (keep_log || rc != 0)
		keep = xasprintf("/tmp/maf-sandbox-bench-scale-%d-daemon-%d.log", (int)getpid(), (int)s->d.start_ms);
	gs_daemon_cleanup(&s->d, keep);
	return rc == 0 ? 0 : -EIO;
}

/* sandbox.list with params (steals); the entries (new reference) or NULL. */
static json_t *list(struct sc_run *s, json_t *params)
{
	json_t *res = NULL;

	if (gs_call(&s->c, "sandbox.list", params, &res) != MSB_OK)
		return NULL;
	return res;
}

static json_t *scope_filter(const struct sc_run *s)
{
	return json_pack("{s:s}", "scope", s->scope);
}

/* Polls sandbox.list {scope} until it answers with want entries. Returns
 * the ms from since until then, or -1 on timeout or interruption. */
static double wait_listed(struct sc_run *s, size_t want, double since)
{
	double deadline = gs_now_ms() + SC_ADOPT_TIMEOUT_MS;

	while (!gs_interrupted && gs_now_ms() < deadline) {
		json_t *l = list(s, scope_filter(s));
		size_t n = json_array_size(l);

		json_decref(l);
		if (l && n == want)
			return gs_now_ms() - since;
		gs_sleep_ms(GS_POLL_MS);
	}
	fprintf(stderr, "sandbox.list never showed %zu sandboxes of scope %s (last: %s)\n", want, s->scope,
		s->c.last_error[0] ? s->c.last_error : "fewer");
	return -1;
}

/* ---- 1. idle --------------------------------------------------------------- */

static int phase_idle(struct sc_run *s)
{
	json_t *all;
	int r = daemon_up(s);

	if (r < 0 || wait_listed(s, 0, gs_now_ms()) < 0)
		return r < 0 ? r : -ETIMEDOUT;
	all = list(s, json_object());
	s->others_idle = (long)json_array_size(all);
	json_decref(all);
	gs_sleep_ms(SC_SETTLE_MS);
	return read_mem(s, &s->idle);
}

/* ---- 2. create --------------------------------------------------------------- */

/* The container a cold acquire of (key, spec) would create, as the daemon
 * builds it (acquire.c acq_create_config with the default configuration and
 * no egress proxy): name and labels from names.c. */
/* The key space the daemon names this caller's acquires in (acquire.h):
 * root's (the seed's, NAMES_SEED_UID) for root and the members of
 * sandbox.admin_group, as given to the daemon with --set (the last wins;
 * a group set only in the daemon's config file is not seen: pass it with
 * --set), looked up as the daemon does (primary group or the user
 * database's list); else the caller's own uid. */
static uid_t sc_key_space(const struct sc_run *s)
{
	static const char key[] = "sandbox.admin_group=";
	const char *group = NULL;
	const struct group *gr;
	const struct passwd *pw;
	gid_t groups[256];
	int n = 256;

	if (getuid() == 0)
		return NAMES_SEED_UID;
	for (size_t i = 0; i < s->opt.n_sets; i++)
		if (strncmp(s->opt.sets[i], key, strlen(key)) == 0)
			group = s->opt.sets[i] + strlen(key);
	if (!group || !*group || !(gr = getgrnam(group)))
		return getuid();
	if (getgid() == gr->gr_gid)
		return NAMES_SEED_UID;
	pw = getpwuid(getuid());
	if (pw && getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) >= 0)
		for (int i = 0; i < n; i++)
			if (groups[i] == gr->gr_gid)
				return NAMES_SEED_UID;
	return getuid();
}

static json_t *workload_config(const struct sc_run *s, size_t i, char *ret_name)
{
	_cleanup_free_ char *thread = xasprintf("t-%05zu", i);
	json_t *kj = json_pack("{s:s, s:s, s:s}", "scope", s->scope, "thread_id", thread, "agent_dir", "bench");
	json_t *sj = json_pack("{s:s, s:s, s:{s:s}}", "kind", SC_KIND, "image", s->opt.image, "labels",
			       GS_RUN_LABEL, s->run_id);
	struct msb_key key = { 0 };
	struct msb_spec spec = { 0 };
	const char *field = NULL, *keepalive[] = SC_KEEPALIVE_CMD;
	_cleanup_free_ char *err = NULL, *err2 = NULL, *egress_id = NULL, *raw = NULL;
	json_t *labels, *raw_key, *config = NULL;

	if (msb_key_decode(kj, &key, &field, &err) < 0 || msb_spec_decode(sj, &spec, &field, &err2) < 0) {
		fprintf(stderr, "bad key or spec (%s)\n", field ? field : "?");
		goto out;
	}
	egress_id = names_egress_id(&spec, false);
	names_container_ns(&key, spec.kind, egress_id, sc_key_space(s), ret_name);
	labels = names_workload_labels(&key, &spec, getuid());
	raw_key = json_pack("[s, s, s, s, s]", key.scope, key.thread_id, key.agent_dir, key.call_id, spec.kind);
	raw = json_dumps(raw_key, JSON_COMPACT);
	json_decref(raw_key);
	json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
	config = json_pack("{s:s, s:[s, s], s:o, s:b, s:b, s:{s:s, s:[s], s:i, s:b, s:[s]}}", "Image",
			   msb_spec_image_ref(&spec), "Cmd", keepalive[0], keepalive[1], "Labels", labels, "Tty", 0,
			   "OpenStdin", 0, "HostConfig", "NetworkMode", "none", "SecurityOpt",
			   "no-new-privileges", "PidsLimit", SC_PIDS_LIMIT, "Init", 1, "CapDrop", "ALL");
out:
	msb_key_release(&key);
	msb_spec_release(&spec);
	json_decref(kj);
	json_decref(sj);
	return config;
}

static int create_one(struct sc_run *s, size_t i)
{
	char name[NAMES_CONTAINER_MAX];
	json_t *config = workload_config(s, i, name);
	_cleanup_free_ char *path = NULL;
	double t0 = gs_now_ms();
	long status = 0;
	int r;

	if (!config)
		return -EINVAL;
	path = xasprintf("/containers/create?name=%s", name);
	r = gs_engine("POST", path, config, &status, NULL);
	json_decref(config);
	gs_samples_add(&s->create_ms, gs_now_ms() - t0);
	if (r < 0 || status != 201) {
		fprintf(stderr, "create %s: status %ld\n", name, status);
		s->create_failures++;
		return -EIO;
	}
	s->names[s->n_created++] = xstrdup(name);
	return 0;
}

/* Creates the N containers; then waits until the running daemon (A) lists
 * them all, from its /events stream alone. */
static int phase_create(struct sc_run *s)
{
	double t0 = gs_now_ms();

	s->names = xcalloc((size_t)s->opt.sandboxes, sizeof(*s->names));
	for (size_t i = 0; i < (size_t)s->opt.sandboxes && !gs_interrupted; i++)
		if (create_one(s, i) < 0)
			return -EIO;
		else if ((i + 1) % SC_PROGRESS_EVERY == 0)
			fprintf(stderr, "  ... %zu of %ld containers created\n", i + 1, s->opt.sandboxes);
	if (gs_interrupted)
		return -EINTR;
	s->create_s = (gs_now_ms() - t0) / 1000.0;
	s->events_ms = wait_listed(s, s->n_created, t0 + s->create_s * 1000.0);
	gs_sleep_ms(SC_SETTLE_MS);
	return read_mem(s, &s->after_events);
}

/* ---- 3. rebuild ------------------------------------------------------------------ */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each listed entry is one of ours, created and never started, of our kind. */
static void check_adopted(struct sc_run *s)
{
	json_t *l = list(s, scope_filter(s)), *e;
	size_t i;

	qsort(s->names, s->n_created, sizeof(*s->names), name_cmp);
	s->adopted = s->mismatched = 0;
	json_array_foreach(l, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *kind = json_string_value(json_object_get(e, "kind"));
		const char *state = json_string_value(json_object_get(e, "state"));

		if (name && bsearch(&name, s->names, s->n_created, sizeof(*s->names), name_cmp) && kind &&
		    strcmp(kind, SC_KIND) == 0 && state && strcmp(state, "created") == 0)
			s->adopted++;
		else
			s->mismatched++;
	}
	json_decref(l);
}

/* How much of a rebuild is the engine's: its answer to the same listing. */
static void time_engine_listing(struct sc_run *s)
{
	for (int i = 0; i < SC_LISTING_SAMPLES && !gs_interrupted; i++) {
		json_t *l = NULL;
		long status = 0;
		double t0 = gs_now_ms();

		if (gs_engine("GET", SC_REGISTRY_LISTING, NULL, &status, &l) == 0 && status == 200) {
			gs_samples_add(&s->engine_listing_ms, gs_now_ms() - t0);
			s->engine_listing_entries = (long)json_array_size(l);
		}
		json_decref(l);
	}
}

static int phase_rebuild(struct sc_run *s)
{
	int r;

	if ((r = daemon_down(s, false)) < 0)
		return r;
	if ((r = daemon_up(s)) < 0)
		return r;
	s->rebuilt_ms = wait_listed(s, s->n_created, s->d.start_ms);
	if (s->rebuilt_ms < 0)
		return -ETIMEDOUT;
	pthread_mutex_lock(&s->d.lock);
	s->log_line_ms = s->d.registry_line_ms;
	s->log_line_count = s->d.registry_line_count;
	pthread_mutex_unlock(&s->d.lock);
	check_adopted(s);
	gs_sleep_ms(SC_SETTLE_MS);
	r = read_mem(s, &s->registered);
	time_engine_listing(s);
	return r;
}

static void time_lists(struct sc_run *s, struct gs_samples *out, const char *thread)
{
	for (int i = 0; i < SC_LIST_SAMPLES && !gs_interrupted; i++) {
		json_t *p = thread ? json_pack("{s:s, s:s}", "scope", s->scope, "thread_id", thread) :
			    json_object();
		json_t *l = list(s, p);

		gs_samples_add(out, s->c.last_ms);
		if (!thread)
			s->list_all_entries = (long)json_array_size(l);
		json_decref(l);
	}
}

static int phase_list_latency(struct sc_run *s)
{
	for (int i = 0; i < SC_LIST_SAMPLES && !gs_interrupted; i++) {
		json_t *l = list(s, scope_filter(s));

		gs_samples_add(&s->list_scope_ms, s->c.last_ms);
		json_decref(l);
	}
	time_lists(s, &s->list_thread_ms, "t-00000");
	time_lists(s, &s->list_all_ms, NULL);
	return gs_interrupted ? -EINTR : 0;
}

/* ---- 4. requests ---------------------------------------------------------------- */

static int acquire_live(struct sc_run *s)
{
	json_t *key = json_pack("{s:s, s:s, s:s}", "scope", s->live_scope, "thread_id", "t", "agent_dir", "bench");
	json_t *spec = json_pack("{s:s, s:s, s:{s:s}}", "kind", SC_LIVE_KIND, "image", s->opt.image, "labels",
				 GS_RUN_LABEL, s->run_id);
	json_t *res = NULL;
	int r;

	s->c.timeout_ms = SC_ACQUIRE_TIMEOUT_MS;
	r = gs_call(&s->c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key, "spec", spec), &res);
	s->c.timeout_ms = GS_CALL_TIMEOUT_MS;
	if (r != MSB_OK) {
		fprintf(stderr, "sandbox.acquire: %s\n", s->c.last_error);
		return -EIO;
	}
	snprintf(s->live, sizeof(s->live), "%s", json_string_value(json_object_get(res, "sandbox")));
	json_decref(res);
	r = gs_call(&s->c, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", s->live, "path",
						    SC_PROBE_FILE, "content_text", "probe\n"), NULL);
	if (r != MSB_OK) {
		fprintf(stderr, "files.write: %s\n", s->c.last_error);
		return -EIO;
	}
	return 0;
}

static json_t *request_params(const struct sc_run *s, enum sc_method m)
{
	switch (m) {
	case SC_STATUS: return NULL;
	case SC_LIST: return json_pack("{s:s, s:s}", "scope", s->scope, "thread_id", "t-00001");
	case SC_STAT: return json_pack("{s:s, s:s}", "sandbox", s->live, "path", SC_PROBE_FILE);
	case SC_EXEC:
		return json_pack("{s:s, s:[s], s:i}", "sandbox", s->live, "command", "true", "timeout_seconds",
				 SC_EXEC_TIMEOUT_S);
	default: break;
	}
	abort();   /* unreachable */
}

/* Does the answer say what it should? */
static bool request_ok(enum sc_method m, const json_t *res)
{
	switch (m) {
	case SC_STATUS: return json_is_object(res);
	case SC_LIST: return json_array_size(res) == 1;
	case SC_STAT: return json_is_object(res);
	case SC_EXEC: return json_integer_value(json_object_get(res, "exit_code")) == 0 &&
			     json_is_integer(json_object_get(res, "exit_code"));
	default: break;
	}
	abort();   /* unreachable */
}

/* The n-th request's method: weighted round robin over the mix. */
static enum sc_method pick(const struct sc_run *s, long n)
{
	long sum = 0, k;

	for (int i = 0; i < _SC_METHOD_MAX; i++)
		sum += s->opt.mix[i];
	k = n % sum;
	for (int i = 0; i < _SC_METHOD_MAX; i++) {
		if (k < s->opt.mix[i])
			return (enum sc_method)i;
		k -= s->opt.mix[i];
	}
	abort();   /* unreachable: k < sum */
}

static void count_error(struct sc_method_stats *ms, const char *type)
{
	json_t *n;

	ms->errors++;
	if (!ms->error_types)
		ms->error_types = json_object();
	n = json_object_get(ms->error_types, type);
	json_object_set_new(ms->error_types, type, json_integer(json_integer_value(n) + 1));
}

static void one_request(struct sc_run *s, long n, bool record)
{
	enum sc_method m = pick(s, n);
	json_t *res = NULL;
	int r = gs_call(&s->c, sc_method_to_string(m), request_params(s, m), &res);
	bool ok = r == MSB_OK && request_ok(m, res);

	if (record) {
		gs_samples_add(&s->by_method[m].ms, s->c.last_ms);
		if (!ok)
			count_error(&s->by_method[m], r == MSB_OK ? "unexpected answer" :
				    r == MSB_E_REMOTE ? gs_client_error_type(&s->c) : msb_strerror(r));
	}
	if (!ok && s->by_method[m].errors <= 3)
		fprintf(stderr, "%s: %s\n", sc_method_to_string(m), r == MSB_OK ? "unexpected answer" :
			s->c.last_error);
	json_decref(res);
}

static int checkpoint(struct sc_run *s, long done)
{
	struct sc_mem m;
	int r = read_mem(s, &m);

	if (r == 0)
		fprintf(stderr, "  ... %ld of %ld requests, RSS %ld KiB\n", done, s->opt.requests, m.rss_kib);
	if (r == 0)
		json_array_append_new(s->checkpoints, json_pack("{s:I, s:I, s:I}", "requests", (json_int_t)done,
								"rss_kib", (json_int_t)m.rss_kib, "hwm_kib",
								(json_int_t)m.hwm_kib));
	return r;
}

static int phase_requests(struct sc_run *s)
{
	int r = acquire_live(s);

	if (r < 0)
		return r;
	for (long n = 0; n < SC_WARMUP_REQUESTS && !gs_interrupted; n++)
		one_request(s, n, false);
	gs_sleep_ms(SC_SETTLE_MS);
	if ((r = read_mem(s, &s->req_before)) < 0)
		return r;
	checkpoint(s, 0);
	for (long n = 0; n < s->opt.requests && !gs_interrupted; n++) {
		one_request(s, n, true);
		s->requests_done++;
		if (s->requests_done % SC_CHECKPOINT_EVERY == 0)
			checkpoint(s, s->requests_done);
	}
	if (gs_interrupted)
		return -EINTR;
	gs_sleep_ms(SC_SETTLE_MS);
	return read_mem(s, &s->req_after);
}

/* ---- the report ---------------------------------------------------------------- */

static json_t *mem_json(const struct sc_mem *m)
{
	return json_pack("{s:I, s:I}", "rss_kib", (json_int_t)m->rss_kib, "hwm_kib", (json_int_t)m->hwm_kib);
}

static json_t *requests_json(const struct sc_run *s)
{
	json_t *per = json_object();
	long growth = s->req_after.rss_kib - s->req_before.rss_kib;

	for (int i = 0; i < _SC_METHOD_MAX; i++) {
		json_t *j = gs_samples_json(&s->by_method[i].ms);

		json_object_set_new(j, "errors", json_integer(s->by_method[i].errors));
		json_object_set_new(j, "error_types", s->by_method[i].error_types ?
				    json_incref(s->by_method[i].error_types) : json_object());
		json_object_set_new(j, "weight", json_integer(s->opt.mix[i]));
		json_object_set_new(per, sc_method_to_string((enum sc_method)i), j);
	}
	return json_pack("{s:I, s:I, s:o, s:I, s:o, s:o, s:I, s:I, s:b, s:O}", "warmup",
			 (json_int_t)SC_WARMUP_REQUESTS, "done", (json_int_t)s->requests_done, "per_method", per,
			 "hangs", (json_int_t)s->c.hangs, "rss_before", mem_json(&s->req_before), "rss_after",
			 mem_json(&s->req_after), "growth_kib", (json_int_t)growth, "flag_threshold_kib",
			 (json_int_t)SC_RSS_GROWTH_FLAG_KIB, "growth_flagged", growth > SC_RSS_GROWTH_FLAG_KIB,
			 "checkpoints", s->checkpoints);
}

static json_t *report_json(const struct sc_run *s)
{
	json_t *rep = json_pack("{s:s, s:I, s:s, s:O, s:O, s:{s:o, s:I}}", "bench", "scale", "sandboxes",
				(json_int_t)s->n_created, "image", s->opt.image, "host", s->host_start, "host_end",
				s->host_end ? s->host_end : json_null(), "idle",
				"mem", mem_json(&s->idle), "others_sandboxes_on_engine", (json_int_t)s->others_idle);

	json_object_set_new(rep, "create", json_pack("{s:f, s:I, s:o, s:f, s:o}", "seconds", s->create_s,
						     "failures", (json_int_t)s->create_failures, "latency",
						     gs_samples_json(&s->create_ms), "listed_via_events_ms",
						     s->events_ms, "mem_after_events", mem_json(&s->after_events)));
	json_object_set_new(rep, "rebuild", json_pack("{s:f, s:f, s:f, s:I, s:I, s:I, s:o, s:o, s:I}",
						      "listening_ms", s->listening_ms, "all_listed_ms", s->rebuilt_ms,
						      "log_line_ms", s->log_line_ms, "log_line_count",
						      (json_int_t)s->log_line_count, "adopted", (json_int_t)s->adopted,
						      "mismatched", (json_int_t)s->mismatched, "mem",
						      mem_json(&s->registered), "engine_listing",
						      gs_samples_json(&s->engine_listing_ms), "engine_listing_entries",
						      (json_int_t)s->engine_listing_entries));
	json_object_set_new(rep, "list_latency", json_pack("{s:o, s:o, s:o, s:I}", "scope_all_n",
							   gs_samples_json(&s->list_scope_ms), "scope_thread_one",
							   gs_samples_json(&s->list_thread_ms), "unfiltered",
							   gs_samples_json(&s->list_all_ms), "unfiltered_entries",
							   (json_int_t)s->list_all_entries));
	json_object_set_new(rep, "requests", requests_json(s));
	json_object_set_new(rep, "cleanup", json_pack("{s:I, s:f}", "removed", (json_int_t)s->removed, "seconds",
						      s->remove_s));
	json_object_set(rep, "daemon_log_warnings", s->log_notes);
	return rep;
}

static void print_samples(const char *what, const struct gs_samples *v)
{
	printf("  %-34s n %-5zu p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", what, v->n, gs_percentile(v, 50),
	       gs_percentile(v, 99), gs_max(v));
}

static void print_error_types(const json_t *types)
{
	const char *type;
	json_t *n;

	json_object_foreach((json_t *)types, type, n)
		printf("  %36s %lld × %s\n", "", (long long)json_integer_value(n), type);
}

static void print_report(const struct sc_run *s)
{
	long growth = s->req_after.rss_kib - s->req_before.rss_kib;

	printf("maf-sandbox-bench-scale: %zu sandboxes, %ld requests (mix S,L,F,E = %ld,%ld,%ld,%ld)\n",
	       s->n_created, s->requests_done, s->opt.mix[0], s->opt.mix[1], s->opt.mix[2], s->opt.mix[3]);
	printf("host:      %lld CPUs, load average %.2f at start, %.2f at the end\n",
	       (long long)json_integer_value(json_object_get(s->host_start, "cpus_online")),
	       json_real_value(json_array_get(json_object_get(s->host_start, "loadavg"), 0)),
	       json_real_value(json_array_get(json_object_get(s->host_end, "loadavg"), 0)));
	printf("idle:      RSS %ld KiB (HWM %ld KiB); %ld other sandboxes on the engine\n", s->idle.rss_kib,
	       s->idle.hwm_kib, s->others_idle);
	printf("create:    %zu containers in %.1f s (%ld failures); the running daemon listed them all "
	       "%.0f ms after the last; RSS then %ld KiB\n", s->n_created, s->create_s, s->create_failures,
	       s->events_ms, s->after_events.rss_kib);
	print_samples("POST /containers/create", &s->create_ms);
	printf("rebuild:   restart → listening %.0f ms; sandbox.list shows all %zu at %.0f ms; log line "
	       "\"registry: %ld sandbox(es)\" at %.0f ms\n", s->listening_ms, s->n_created, s->rebuilt_ms,
	       s->log_line_count, s->log_line_ms);
	printf("           adopted %ld, mismatched %ld; RSS %ld KiB (HWM %ld KiB) with them registered "
	       "(+%ld KiB over idle)\n", s->adopted, s->mismatched, s->registered.rss_kib, s->registered.hwm_kib,
	       s->registered.rss_kib - s->idle.rss_kib);
	printf("           the same listing asked of the engine directly (%ld entries):\n",
	       s->engine_listing_entries);
	print_samples("GET /containers/json (registry's)", &s->engine_listing_ms);
	printf("sandbox.list with %zu registered:\n", s->n_created);
	print_samples("{scope} (all N entries)", &s->list_scope_ms);
	print_samples("{scope, thread_id} (one entry)", &s->list_thread_ms);
	printf("  %-34s (%ld entries)\n", "unfiltered (administrator: all)", s->list_all_entries);
	print_samples("", &s->list_all_ms);
	printf("requests:  %ld after a %d-request warm-up; %ld hangs\n", s->requests_done, SC_WARMUP_REQUESTS,
	       s->c.hangs);
	for (int i = 0; i < _SC_METHOD_MAX; i++) {
		char what[64];

		snprintf(what, sizeof(what), "%s (%ld errors)", sc_method_to_string((enum sc_method)i),
			 s->by_method[i].errors);
		print_samples(what, &s->by_method[i].ms);
		print_error_types(s->by_method[i].error_types);
	}
	printf("           RSS %ld → %ld KiB: growth %+ld KiB (flagged above %d KiB: %s)\n", s->req_before.rss_kib,
	       s->req_after.rss_kib, growth, SC_RSS_GROWTH_FLAG_KIB,
	       growth > SC_RSS_GROWTH_FLAG_KIB ? "FLAGGED" : "no");
}

/* ---- main --------------------------------------------------------------------- */

static int measure(struct sc_run *s)
{
	int r;

	if ((r = phase_idle(s)) < 0 || (r = phase_create(s)) < 0 || (r = phase_rebuild(s)) < 0 ||
	    (r = phase_list_latency(s)) < 0 || (r = phase_requests(s)) < 0)
		return gs_interrupted ? -EINTR : r;
	return gs_interrupted ? -EINTR : 0;
}

/* Stops the daemon, then removes every container of the run label. */
static void teardown(struct sc_run *s, bool failed)
{
	double t0;

	long errors = s->c.hangs;

	for (int i = 0; i < _SC_METHOD_MAX; i++)
		errors += s->by_method[i].errors;
	/* A failed run, or one whose requests failed: its daemon's log is kept. */
	if (s->d.dir[0])
		daemon_down(s, failed || errors > 0);
	t0 = gs_now_ms();
	s->removed = gs_engine_remove_labelled(GS_RUN_LABEL_FULL, s->run_id);
	s->remove_s = (gs_now_ms() - t0) / 1000.0;
	if (s->removed < 0) {
		fprintf(stderr, "could not remove the containers labelled %s=%s: remove them by hand\n",
			GS_RUN_LABEL_FULL, s->run_id);
		return;
	}
	printf("cleanup:   removed %ld containers labelled %s=%s in %.1f s\n", s->removed, GS_RUN_LABEL_FULL,
	       s->run_id, s->remove_s);
}

static void run_free(struct sc_run *s)
{
	for (size_t i = 0; i < s->n_created; i++)
		free(s->names[i]);
	free(s->names);
	gs_samples_free(&s->create_ms);
	gs_samples_free(&s->engine_listing_ms);
	gs_samples_free(&s->list_scope_ms);
	gs_samples_free(&s->list_thread_ms);
	gs_samples_free(&s->list_all_ms);
	for (int i = 0; i < _SC_METHOD_MAX; i++) {
		gs_samples_free(&s->by_method[i].ms);
		json_decref(s->by_method[i].error_types);
	}
	json_decref(s->checkpoints);
	json_decref(s->log_notes);
	json_decref(s->host_start);
	json_decref(s->host_end);
}

int main(int argc, char **argv)
{
	static struct sc_run s;
	int r;

	if (parse_options(argc, argv, &s.opt) < 0)
		return 2;
	gs_signals_install();
	snprintf(s.run_id, sizeof(s.run_id), "%d", (int)getpid());
	snprintf(s.scope, sizeof(s.scope), "msb-scale-%d", (int)getpid());
	snprintf(s.live_scope, sizeof(s.live_scope), "%s-live", s.scope);
	s.checkpoints = json_array();
	s.log_notes = json_array();
	s.events_ms = s.rebuilt_ms = s.log_line_ms = -1;
	if (gs_engine_init() < 0)
		return 1;
	if (!s.opt.image) {
		s.opt.image = SC_DEFAULT_IMAGE;
		if (gs_test_image(s.opt.image) < 0) {
			gs_engine_cleanup();
			return 1;
		}
	}
	s.host_start = gs_host_json();
	r = measure(&s);
	s.host_end = gs_host_json();
	if (r < 0)
		fprintf(stderr, "maf-sandbox-bench-scale: %s\n", r == -EINTR ? "interrupted" : "failed; see above");
	else
		print_report(&s);
	teardown(&s, r < 0);
	if (r == 0 && s.opt.json_path) {
		json_t *rep = report_json(&s);

		r = gs_json_write(s.opt.json_path, rep);
		json_decref(rep);
	}
	run_free(&s);
	gs_engine_cleanup();
	return r < 0 ? 1 : 0;
}
