/* check_sandbox.c — the sandbox lifecycle against the real engine: acquire
 * (cold, warm with no engine request, concurrent, stopped, paused, removed
 * behind our back), a daemon restart, a freeze another daemon holds (the
 * host lock: never lifted), call scope, dispose, dispose_scope, list,
 * ownership across uids, and every refusal.
 *
 * Test image: Debian's static busybox imported in main() (no registry).
 * Every container carries the spec label msb-it-run=<run>, and main()
 * removes all of them at the end, whatever failed. */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"
/* The daemon's own host lock module (linked in: tests/meson.build), so the
 * test holds a container's byte exactly as another maf-sandboxd would. */
#include "../../domain/hostlock.h"

#define ENGINE_WAIT_MS 15000         /* hang guard: the engine reachable */
#define RUN_LABEL "msb-it-run"

static char run_id[32];
static char image[64];

/* ---- helpers ------------------------------------------------------------ */

static json_t *spec_for(const char *kind, const char *img)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "kind", kind, "image", img, "labels", RUN_LABEL, run_id);
}

static json_t *key_for(const char *scope, const char *thread, const char *agent, const char *call_id)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "scope", scope, "thread_id", thread, "agent_dir", agent,
			 "call_id", call_id ? call_id : "");
}

/* sandbox.acquire; params stolen. Returns the result or NULL (*ret_code set). */
static json_t *acquire(const char *sock, json_t *key, json_t *spec, int *ret_code, char **ret_type)
{
	return call(sock, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key, "spec", spec),
		    ret_code, ret_type);
}

static json_int_t call_requests(const char *sock)
{
	json_t *st = call(sock, "daemon.status", NULL, NULL, NULL);
	json_int_t n = jint(st, "engine.call_requests");

	json_decref(st);
	return n;
}

static char *docker_state(const char *id)
{
	return sh_out("docker inspect -f '{{.State.Status}}' %s 2>/dev/null", id);
}

static int count_run_containers(const char *extra_filter)
{
	char *out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s %s | wc -l", RUN_LABEL,
			   run_id, extra_filter ? extra_filter : "");
	int n = atoi(out);

	free(out);
	return n;
}

/* Starts a daemon and waits until the registry has been read. The daemon
 * serves the plane the run asked for (MSB_FILE_PLANE; a run meant for one
 * plane never passes on the other). */
static void start_daemon(struct msbd_proc *d, const char *const *args)
{
	json_t *r, *st;

	msbd_start(d, args);
	st = wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS);
	if (harness_file_plane())
		ck_assert_msg(jstr(st, "file_plane") && strcmp(jstr(st, "file_plane"), harness_file_plane()) == 0,
			      "the daemon serves the %s plane, the run asked for %s", jstr(st, "file_plane"),
			      harness_file_plane());
	json_decref(st);
	/* sandbox.list answers once the registry is synchronised (hang guard: 200 polls). */
	for (int i = 0; i < 200; i++) {
		int code;

		r = call(d->sock, "sandbox.list", NULL, &code, NULL);
		if (r) {
			json_decref(r);
			return;
		}
		usleep(50 * 1000);
	}
	ck_abort_msg("the registry never synchronised");
}

/* The state the registry gives sandbox id (sandbox.list: no engine request),
 * "" when it lists no such sandbox (malloc'd). */
static char *listed_state(const char *sock, const char *id)
{
	json_t *list = call(sock, "sandbox.list", NULL, NULL, NULL), *s;
	char *state = NULL;
	size_t i;

	ck_assert_msg(json_is_array(list), "sandbox.list failed");
	json_array_foreach(list, i, s)
		if (jstr(s, "sandbox") && strcmp(jstr(s, "sandbox"), id) == 0)
			state = strdup(jstr(s, "state") ? jstr(s, "state") : "?");
	json_decref(list);
	return state ? state : strdup("");
}

/* Waits until the registry gives id the state want ("" for none): the
 * engine's event about it has reached the registry. */
#define LISTED_WAIT_MS 30000      /* hang guard */
static void await_listed_state(const char *sock, const char *id, const char *want)
{
	char *state = NULL;

	for (int waited = 0;; waited += 50) {
		free(state);
		state = listed_state(sock, id);
		if (strcmp(state, want) == 0)
			break;
		ck_assert_msg(waited < LISTED_WAIT_MS, "the registry says '%s' of %.12s, not '%s'", state, id, want);
		usleep(50 * 1000);
	}
	free(state);
}

static char *daemon_lock_file(void);

/* The host lock (freeze.lock_file, shared by every daemon on this host) as
 * the test holds it while it pauses a guest itself: as another live
 * daemon's freeze, which no daemon starting meanwhile (another suite's)
 * thaws as an orphan. Opened once. */
static struct hostlock *test_hostlock(void)
{
	static struct hostlock *h;

	if (!h) {
		char *path = daemon_lock_file(), *err = NULL;

		ck_assert_msg(hostlock_open(path, &h, &err) == 0, "%s", err ? err : "");
		free(path);
	}
	return h;
}

/* docker pause id, under the host lock (taken here; the caller releases it
 * with hostlock_release(test_hostlock(), id)). */
static void pause_under_hostlock(const char *id)
{
	char *out;

	ck_assert_int_eq(hostlock_try(test_hostlock(), id), 0);
	out = sh_out("docker pause %s >/dev/null 2>&1; echo $?", id);
	ck_assert_str_eq(out, "0");
	free(out);
}

/* Every engine event about id so far has reached the registry: the engine
 * sends them in order, so once the registry shows the pause made now, it
 * has applied those before it (the create and start of an acquire). The
 * pause is held under the host lock until the unpause. */
static void events_barrier(const char *sock, const char *id)
{
	char *out;

	pause_under_hostlock(id);
	await_listed_state(sock, id, "paused");
	out = sh_out("docker unpause %s >/dev/null 2>&1; echo $?", id);
	ck_assert_str_eq(out, "0");
	free(out);
	hostlock_release(test_hostlock(), id);
	await_listed_state(sock, id, "running");
}

/* A unique scope per test. */
static const char *scope_of(const char *test)
{
	static char s[96];

	snprintf(s, sizeof(s), "%s-%s", run_id, test);
	return s;
}

/* ---- acquire ------------------------------------------------------------ */

/* The daemons serve files on the local plane (MSB_FILE_PLANE=local). */
static bool plane_local(void)
{
	const char *p = harness_file_plane();

	return p && strcmp(p, "local") == 0;
}

/* Engine requests a warm acquire makes to see the work dir is there: a
 * stat of /maf-sandbox and of /maf-sandbox/work, or none (the local plane
 * opens it beneath the pinned root). */
static int workdir_stat_requests(void)
{
	return plane_local() ? 0 : 2;
}

START_TEST(cold_acquire_creates_the_named_labelled_container)
{
	struct msbd_proc d = { 0 };
	json_t *r, *labels;
	char *out;

	start_daemon(&d, NULL);
	r = acquire(d.sock, key_for("scope-a", "thread-1", "devops-engineer", NULL),
		    spec_for("bicep", image), NULL, NULL);
	ck_assert_msg(r, "acquire failed");
	ck_assert_str_eq(jstr(r, "name"), "maf-sandbox-docker-6f8a8ed7a21c");   /* golden */
	ck_assert(json_is_true(jget(r, "created")));
	ck_assert_str_eq(jstr(r, "state"), "running");
	ck_assert_str_eq(jstr(r, "work_dir"), "/maf-sandbox/work");
	ck_assert_uint_eq(strlen(jstr(r, "sandbox")), 64);
	out = sh_out("docker inspect -f '{{json .Config.Labels}}' %s", jstr(r, "sandbox"));
	labels = json_loads(out, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.scope")), "scope-a");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.thread")), "thread-1");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.agent")), "devops-engineer");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.kind")), "bicep");
	ck_assert_ptr_null(json_object_get(labels, "maf-sandbox.call"));
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.work-dir.v1")), "/maf-sandbox/work");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "maf-sandbox.owner")), "0");
	json_decref(labels);
	free(out);
	/* Hardened: no network, no new privileges, capabilities dropped, pids capped. */
	out = sh_out("docker inspect -f '{{.HostConfig.NetworkMode}} {{.HostConfig.SecurityOpt}} "
		     "{{.HostConfig.CapDrop}} {{.HostConfig.PidsLimit}} {{len .Mounts}}' %s",
		     jstr(r, "sandbox"));
	ck_assert_str_eq(out, "none [no-new-privileges] [ALL] 512 0");
	free(out);
	ck_assert_int_eq(count_run_containers("--filter label=maf-sandbox.scope=scope-a"), 1);
	json_decref(call(d.sock, "sandbox.dispose", json_pack("{s:o}", "key",
		key_for("scope-a", "thread-1", "devops-engineer", NULL)), NULL, NULL));
	json_decref(r);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* A spec with this "requires" list (JSON). */
static json_t *spec_requiring(const char *kind, const char *img, const char *requires)
{
	json_t *spec = spec_for(kind, img);

	json_object_set_new(spec, "requires", json_loads(requires, 0, NULL));
	return spec;
}

START_TEST(warm_acquire_makes_no_engine_request)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("warm");
	json_t *a, *b, *c;
	json_int_t before;

	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	events_barrier(d.sock, jstr(a, "sandbox"));      /* the create and start events are in */
	/* A start event applied after the acquire pinned the guest (local
	 * plane) closed that pin: one warm acquire pins again (an inspect), so
	 * the counted ones below find the pin. */
	json_decref(acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL));
	/* A runtime-only spec needs nothing of the guest: no engine request. */
	before = call_requests(d.sock);
	b = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_requiring("k", image, "[]"), NULL, NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(jstr(a, "sandbox"), jstr(b, "sandbox"));
	ck_assert(json_is_false(jget(b, "created")));
	ck_assert_int_eq(call_requests(d.sock), before);       /* zero engine requests */
	/* The default spec (exec, files_in) needs the work dir: one stat per
	 * component of /maf-sandbox/work says it is there (the local plane
	 * looks itself, beneath the pinned root: no engine request). */
	before = call_requests(d.sock);
	c = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(c);
	ck_assert_str_eq(jstr(a, "sandbox"), jstr(c, "sandbox"));
	ck_assert_int_eq(call_requests(d.sock), before + workdir_stat_requests());
	json_decref(a);
	json_decref(b);
	json_decref(c);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* The command probes (behaviour-docker §2.1 step 15): an image that cannot
 * run what the spec needs is refused naming the probe, the container stays
 * for a spec that needs nothing of it, and a passed probe is not run again. */
START_TEST(command_probes_refuse_what_the_image_cannot_run)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("probes");
	char img[96], *out;
	json_t *r;
	int code = 0;
	char *type = NULL;
	json_int_t before;

	/* busybox's sleep and nothing else: no sh. */
	snprintf(img, sizeof(img), "msb-it-nosh:%s", run_id);
	out = sh_out("d=$(mktemp -d) && mkdir -p $d/bin && cp /bin/busybox $d/bin/ && ln -s busybox $d/bin/sleep && "
		     "tar -C $d -c . | docker import -c 'ENV PATH=/bin' - %s >/dev/null && rm -rf $d && echo ok", img);
	ck_assert_str_eq(out, "ok");
	free(out);
	start_daemon(&d, NULL);
	r = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_requiring("k", img, "[\"exec\"]"), &code, &type);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(code, 1100);
	ck_assert_str_eq(type, "SandboxCapabilityNotSupported");
	free(type);
	type = NULL;
	/* Needing nothing of the guest, the same container is served. */
	r = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_requiring("k", img, "[]"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	/* Debian's busybox has no nohup: host_tools is refused on the usual image... */
	r = acquire(d.sock, key_for(scope, "t2", "agent", NULL), spec_requiring("k", image, "[\"host_tools\"]"),
		    &code, &type);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(code, 1100);
	free(type);
	/* ...while exec and files_delete pass, once: a warm acquire runs no probe again. */
	r = acquire(d.sock, key_for(scope, "t3", "agent", NULL),
		    spec_requiring("k", image, "[\"exec\", \"files_delete\"]"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	/* The create and start events are in; a start event applied after the
	 * acquire pinned the guest (local plane) closed that pin: the next call
	 * pins again (an inspect). One warm acquire settles it; the next is
	 * counted. */
	events_barrier(d.sock, jstr(r, "sandbox"));
	json_decref(r);
	r = acquire(d.sock, key_for(scope, "t3", "agent", NULL),
		    spec_requiring("k", image, "[\"exec\", \"files_delete\"]"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	before = call_requests(d.sock);
	r = acquire(d.sock, key_for(scope, "t3", "agent", NULL),
		    spec_requiring("k", image, "[\"exec\", \"files_delete\"]"), NULL, NULL);
	ck_assert_ptr_nonnull(r);
	json_decref(r);
	ck_assert_int_eq(call_requests(d.sock), before + workdir_stat_requests());   /* the work dir's stats only */
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

struct concurrent {
	const char *sock;
	const char *scope;
	char id[80];
	bool created;
	int code;
	char *type;
};

static void *acquire_thread(void *arg)
{
	struct concurrent *c = arg;
	json_t *r = acquire(c->sock, key_for(c->scope, "t", "agent", NULL), spec_for("k", image), &c->code,
			    &c->type);

	if (r) {
		snprintf(c->id, sizeof(c->id), "%s", jstr(r, "sandbox"));
		c->created = json_is_true(jget(r, "created"));
	}
	json_decref(r);
	return NULL;
}

START_TEST(concurrent_acquires_make_one_container)
{
	struct msbd_proc d = { 0 };
	struct concurrent c[20];
	pthread_t th[20];
	char filter[160];
	int made = 0;

	start_daemon(&d, NULL);
	for (int i = 0; i < 20; i++) {
		c[i] = (struct concurrent){ .sock = d.sock, .scope = scope_of("concurrent") };
		ck_assert_int_eq(pthread_create(&th[i], NULL, acquire_thread, &c[i]), 0);
	}
	for (int i = 0; i < 20; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 20; i++) {
		if (!c[i].id[0])
			msbd_dump_log(&d);
		ck_assert_msg(c[i].id[0], "acquire %d failed: %d %s", i, c[i].code, c[i].type ? c[i].type : "");
		ck_assert_str_eq(c[i].id, c[0].id);
		made += c[i].created;
	}
	/* One made it; the others joined (or came after): created false. */
	ck_assert_int_eq(made, 1);
	snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s", scope_of("concurrent"));
	ck_assert_int_eq(count_run_containers(filter), 1);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

struct joiner {
	const char *sock;
	const char *scope;
	const char *work_dir;
	int code;
};

static void *joiner_thread(void *arg)
{
	struct joiner *j = arg;
	json_t *spec = spec_for("k", image);
	json_t *r;

	if (j->work_dir)
		json_object_set_new(spec, "work_dir", json_string(j->work_dir));
	r = acquire(j->sock, key_for(j->scope, "t", "agent", NULL), spec, &j->code, NULL);
	json_decref(r);
	return NULL;
}

/* Acquires of one sandbox at once with different storage bases: the one
 * that started it gets it, the other is refused whether it joined the
 * acquire in flight or came after it. */
START_TEST(concurrent_acquire_with_another_work_dir_is_refused)
{
	struct msbd_proc d = { 0 };
	struct joiner j[2];
	pthread_t th[2];

	start_daemon(&d, NULL);
	j[0] = (struct joiner){ .sock = d.sock, .scope = scope_of("joinwd") };
	j[1] = (struct joiner){ .sock = d.sock, .scope = scope_of("joinwd"), .work_dir = "/elsewhere" };
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, joiner_thread, &j[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	/* Whichever started the container got it; the other is refused. */
	ck_assert_msg((j[0].code == 0 && j[1].code == 1106) || (j[0].code == 1106 && j[1].code == 0),
		      "codes %d and %d", j[0].code, j[1].code);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* Each row: what is done to the container behind the daemon's back, and
 * whether the same container comes back. */
struct behind_row {
	const char *name;
	const char *docker;    /* docker subcommand run on the id */
	const char *listed;    /* the registry's state once its event is in ("": gone) */
	bool same_id;
};

static const struct behind_row behind_rows[] = {
	{ "stopped", "stop -t 0", "exited", true },
	{ "paused", "pause", "paused", true },
	{ "removed", "rm -f", "", false },
};

START_TEST(acquire_recovers_what_was_done_behind_its_back)
{
	const struct behind_row *row = &behind_rows[_i];
	struct msbd_proc d = { 0 };
	const char *scope = scope_of(row->name);
	json_t *a, *b;
	char *out, *state;

	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	if (strcmp(row->docker, "pause") == 0) {
		/* Paused under the host lock until the event is in: a daemon
		 * starting meanwhile (another suite's) leaves it paused. */
		pause_under_hostlock(jstr(a, "sandbox"));
		await_listed_state(d.sock, jstr(a, "sandbox"), row->listed);
		hostlock_release(test_hostlock(), jstr(a, "sandbox"));
	} else {
		out = sh_out("docker %s %s >/dev/null 2>&1; echo $?", row->docker, jstr(a, "sandbox"));
		ck_assert_str_eq(out, "0");
		free(out);
		await_listed_state(d.sock, jstr(a, "sandbox"), row->listed);     /* the event reached the registry */
	}
	b = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_msg(b, "acquire after '%s' failed", row->docker);
	ck_assert_str_eq(jstr(b, "state"), "running");
	if (row->same_id)
		ck_assert_str_eq(jstr(a, "sandbox"), jstr(b, "sandbox"));
	else
		ck_assert_str_ne(jstr(a, "sandbox"), jstr(b, "sandbox"));
	state = docker_state(jstr(b, "sandbox"));
	ck_assert_str_eq(state, "running");
	free(state);
	json_decref(a);
	json_decref(b);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(restart_rebuilds_the_registry_from_labels)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("restart");
	json_t *a, *b, *list;
	json_int_t before;

	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(msbd_stop(&d), 0);
	/* As a daemon that died holding a freeze would leave it. */
	free(sh_out("docker pause %s", jstr(a, "sandbox")));
	memset(&d, 0, sizeof(d));
	start_daemon(&d, NULL);       /* a new daemon: nothing in memory */
	{
		char *state = NULL;

		for (int i = 0; i < 600; i++) {       /* hang guard: 30 s */
			free(state);
			state = docker_state(jstr(a, "sandbox"));
			if (strcmp(state, "running") == 0)
				break;
			usleep(50 * 1000);
		}
		ck_assert_msg(strcmp(state, "running") == 0, "a frozen orphan was not thawed at start: %s", state);
		free(state);
	}
	list = call(d.sock, "sandbox.list", json_pack("{s:s}", "scope", scope), NULL, NULL);
	ck_assert_uint_eq(json_array_size(list), 1);
	ck_assert_str_eq(jstr(json_array_get(list, 0), "sandbox"), jstr(a, "sandbox"));
	ck_assert_str_eq(jstr(json_array_get(list, 0), "key.scope"), scope);
	ck_assert_str_eq(jstr(json_array_get(list, 0), "kind"), "k");
	ck_assert_str_eq(jstr(json_array_get(list, 0), "state"), "running");
	before = call_requests(d.sock);
	b = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_requiring("k", image, "[]"), NULL, NULL);
	ck_assert_str_eq(jstr(a, "sandbox"), jstr(b, "sandbox"));
	ck_assert_int_eq(call_requests(d.sock), before);     /* warm from the rebuilt registry */
	json_decref(list);
	json_decref(a);
	json_decref(b);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- a freeze another daemon holds (the host lock) ------------------------ */

#define LOG_WAIT_MS 30000         /* hang guard: a log line awaited */
#define THAW_WAIT_MS 30000        /* hang guard: a thaw awaited */

/* freeze.lock_file as the daemon would open it: the host's shared default
 * (the same for every daemon of every suite on this machine, so their
 * daemons leave this test's freeze alone too). */
static char *daemon_lock_file(void)
{
	char *out = sh_out("'%s' --check-config 2>/dev/null | sed -n 's/^freeze.lock_file = //p'",
			   getenv("MSB_DAEMON"));

	ck_assert_msg(out[0] == '/', "the daemon has no freeze.lock_file: \"%s\"", out);
	return out;
}

/* Does the daemon's log hold text, within timeout_ms? */
static bool log_has(const struct msbd_proc *d, const char *text, int timeout_ms)
{
	for (int waited = 0;; waited += 50) {
		char *out = sh_out("grep -cF '%s' %s", text, d->log);
		bool found = atoi(out) > 0;

		free(out);
		if (found || waited >= timeout_ms)
			return found;
		usleep(50 * 1000);
	}
}

/* How many lines of the daemon's log hold text. */
static int log_count(const struct msbd_proc *d, const char *text)
{
	char *out = sh_out("grep -cF '%s' %s", text, d->log);
	int n = atoi(out);

	free(out);
	return n;
}

/* Does the daemon's log hold text in n lines at least, within timeout_ms
 * (a hang guard)? */
static bool log_count_reaches(const struct msbd_proc *d, const char *text, int n, int timeout_ms)
{
	for (int waited = 0;; waited += 50) {
		if (log_count(d, text) >= n)
			return true;
		if (waited >= timeout_ms)
			return false;
		usleep(50 * 1000);
	}
}

static bool state_becomes(const char *id, const char *want, int timeout_ms)
{
	for (int waited = 0;; waited += 50) {
		char *state = docker_state(id);
		bool ok = strcmp(state, want) == 0;

		free(state);
		if (ok || waited >= timeout_ms)
			return ok;
		usleep(50 * 1000);
	}
}

/* The test plays another live maf-sandboxd holding the container frozen
 * for a file call: it holds the container's host lock and pauses it. */
static void freeze_as_another_daemon(struct hostlock *h, const char *id)
{
	char *out;

	ck_assert_int_eq(hostlock_try(h, id), 0);
	out = sh_out("docker pause %s >/dev/null 2>&1; echo $?", id);
	ck_assert_str_eq(out, "0");
	free(out);
}

/* A daemon starting (or relisting) beside a live daemon's freeze leaves it
 * alone; once that daemon lets go, the next listing thaws it; an acquire
 * under such a freeze waits for it instead of thawing, then thaws. */
START_TEST(a_freeze_another_daemon_holds_is_never_lifted)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("hostlock");
	char *lock_file = daemon_lock_file();
	struct hostlock *h = NULL;
	char *err = NULL, *id;
	json_t *a, *r;
	int fd, waits;

	ck_assert_msg(hostlock_open(lock_file, &h, &err) == 0, "%s", err ? err : "");
	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	id = strdup(jstr(a, "sandbox"));
	ck_assert_int_eq(msbd_stop(&d), 0);

	/* Frozen by a live daemon: a daemon starting lists it, and leaves it. */
	freeze_as_another_daemon(h, id);
	memset(&d, 0, sizeof(d));
	start_daemon(&d, NULL);       /* the registry is listed: the thaw was decided */
	ck_assert_msg(log_has(&d, "left frozen: another maf-sandboxd on this host holds it", LOG_WAIT_MS),
		      "the daemon did not report the freeze it left alone");
	ck_assert_msg(state_becomes(id, "paused", 0), "a live daemon's freeze was lifted at start");
	ck_assert(!log_has(&d, "thawed; a previous daemon left it frozen", 0));
	ck_assert_int_eq(msbd_stop(&d), 0);

	/* That daemon gone (its lock released): the next start thaws it. */
	hostlock_release(h, id);
	memset(&d, 0, sizeof(d));
	start_daemon(&d, (const char *const[]){ "--debug", NULL });     /* its freeze waits are logged */
	ck_assert_msg(state_becomes(id, "running", THAW_WAIT_MS), "a frozen orphan was not thawed at start");

	/* An acquire under a live freeze waits, never thawing it, and goes on
	 * (thawing) once that daemon lets go. */
	await_listed_state(d.sock, id, "running");     /* the unpause event reached the registry */
	freeze_as_another_daemon(h, id);
	await_listed_state(d.sock, id, "paused");      /* the pause event reached the registry */
	waits = log_count(&d, "another maf-sandboxd on this host holds it frozen; waiting");
	fd = raw_connect(d.sock);
	raw_request_send(fd, 1, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for(scope, "t", "agent", NULL),
							     "spec", spec_for("k", image)));
	/* The acquire's thaw found the host lock held and waits (the daemon
	 * says so, in a line more than before it was sent): it has not
	 * answered, and the guest stays paused. */
	ck_assert_msg(log_count_reaches(&d, "another maf-sandboxd on this host holds it frozen; waiting", waits + 1,
					LOG_WAIT_MS),
		      "the acquire's thaw never waited for the other daemon's freeze");
	{
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		ck_assert_msg(poll(&pfd, 1, 0) == 0, "the acquire answered under another daemon's freeze");
	}
	ck_assert_msg(state_becomes(id, "paused", 0), "the acquire lifted another daemon's freeze");
	hostlock_release(h, id);
	r = raw_recv(fd, THAW_WAIT_MS);
	ck_assert_msg(r && json_object_get(r, "result"), "the acquire failed: %s",
		      r ? json_dumps(r, JSON_COMPACT) : "no answer");
	ck_assert_str_eq(jstr(r, "result.sandbox"), id);
	ck_assert_str_eq(jstr(r, "result.state"), "running");
	ck_assert(state_becomes(id, "running", 0));
	json_decref(r);
	close(fd);

	hostlock_free(h);
	free(lock_file);
	free(id);
	json_decref(a);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* freeze.lock_file: made where it is missing (directory 0755, file 0600);
 * a daemon that cannot open it does not start, and says why. */
START_TEST(the_freeze_lock_file_is_made_or_the_daemon_refuses_to_start)
{
	struct msbd_proc d = { 0 };
	char set[200], path[160];
	struct stat st;
	int rc;

	msbd_prepare(&d);
	snprintf(path, sizeof(path), "%s/run/freeze.lock", d.dir);
	snprintf(set, sizeof(set), "freeze.lock_file=%s", path);
	msbd_start(&d, (const char *const[]){ "--set", set, NULL });
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	snprintf(path, sizeof(path), "%s/run", d.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0755);
	ck_assert_int_eq(msbd_stop_keep_dir(&d), 0);
	/* A directory where the file should be. */
	snprintf(path, sizeof(path), "%s/dir.lock", d.dir);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(set, sizeof(set), "freeze.lock_file=%s", path);
	msbd_start_with(&d, NULL, (const char *const[]){ "--set", set, NULL }, false);
	rc = msbd_wait(&d, 10000);     /* hang guard */
	ck_assert_int_eq(rc, 1);
	ck_assert(log_has(&d, "cannot open the freeze lock file (freeze.lock_file)", 0));
	ck_assert(log_has(&d, path, 0));
	/* Not absolute: refused with the configuration. */
	msbd_start_with(&d, NULL, (const char *const[]){ "--set", "freeze.lock_file=rel.lock", NULL }, false);
	rc = msbd_wait(&d, 10000);     /* hang guard */
	ck_assert_int_eq(rc, 1);
	ck_assert(log_has(&d, "freeze.lock_file must be an absolute path", 0));
	msbd_stop(&d);
}
END_TEST

START_TEST(call_scoped_keys_get_their_own_containers)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("call");
	json_t *conv, *c1, *c2, *spec;
	int code;

	start_daemon(&d, NULL);
	conv = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	spec = spec_for("k", image);
	json_object_set_new(spec, "isolation_scope", json_string("call"));
	c1 = acquire(d.sock, key_for(scope, "t", "agent", "call-a"), json_deep_copy(spec), NULL, NULL);
	c2 = acquire(d.sock, key_for(scope, "t", "agent", "call-b"), json_deep_copy(spec), NULL, NULL);
	ck_assert_ptr_nonnull(conv);
	ck_assert_ptr_nonnull(c1);
	ck_assert_ptr_nonnull(c2);
	ck_assert_str_ne(jstr(conv, "sandbox"), jstr(c1, "sandbox"));
	ck_assert_str_ne(jstr(c1, "sandbox"), jstr(c2, "sandbox"));
	/* Scope consistency: call scope needs a call_id, conversation refuses one. */
	ck_assert_ptr_null(acquire(d.sock, key_for(scope, "t", "agent", NULL), json_deep_copy(spec), &code, NULL));
	ck_assert_int_eq(code, -32602);
	ck_assert_ptr_null(acquire(d.sock, key_for(scope, "t", "agent", "call-c"), spec_for("k", image), &code, NULL));
	ck_assert_int_eq(code, -32602);
	/* Disposing one call's key leaves the others. */
	ck_assert(json_is_null(call(d.sock, "sandbox.dispose", json_pack("{s:o}", "key",
		key_for(scope, "t", "agent", "call-a")), NULL, NULL)));
	{
		char *s1 = docker_state(jstr(c1, "sandbox")), *s2 = docker_state(jstr(c2, "sandbox"));

		ck_assert_str_eq(s1, "");
		ck_assert_str_eq(s2, "running");
		free(s1);
		free(s2);
	}
	json_decref(spec);
	json_decref(conv);
	json_decref(c1);
	json_decref(c2);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(dispose_and_dispose_scope_after_a_restart)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("dispose");
	char filter[160];
	json_t *a, *r;

	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t1", "agent", NULL), spec_for("k1", image), NULL, NULL);
	json_decref(acquire(d.sock, key_for(scope, "t1", "agent", NULL), spec_for("k2", image), NULL, NULL));
	json_decref(acquire(d.sock, key_for(scope, "t1", "other", NULL), spec_for("k1", image), NULL, NULL));
	json_decref(acquire(d.sock, key_for(scope, "t2", "agent", NULL), spec_for("k1", image), NULL, NULL));
	snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s", scope);
	ck_assert_int_eq(count_run_containers(filter), 4);
	/* dispose with a kind: that workload only. */
	r = call(d.sock, "sandbox.dispose", json_pack("{s:o, s:s}", "key",
		 key_for(scope, "t1", "agent", NULL), "kind", "k2"), NULL, NULL);
	ck_assert(json_is_null(r));
	ck_assert_int_eq(count_run_containers(filter), 3);
	/* dispose by instance id: only that container; a stale id is a no-op. */
	r = call(d.sock, "sandbox.dispose", json_pack("{s:o, s:s}", "key",
		 key_for(scope, "t1", "agent", NULL), "sandbox", jstr(a, "sandbox")), NULL, NULL);
	ck_assert(json_is_null(r));
	ck_assert_int_eq(count_run_containers(filter), 2);
	r = call(d.sock, "sandbox.dispose", json_pack("{s:o, s:s}", "key",
		 key_for(scope, "t1", "agent", NULL), "sandbox", jstr(a, "sandbox")), NULL, NULL);
	ck_assert(json_is_null(r));
	/* dispose_scope after a restart: selected from the engine's labels. */
	ck_assert_int_eq(msbd_stop(&d), 0);
	memset(&d, 0, sizeof(d));
	start_daemon(&d, NULL);
	r = call(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t1"),
		 NULL, NULL);
	ck_assert_int_eq(jint(r, "disposed"), 1);
	ck_assert(json_is_null(jget(r, "undisposed")));
	json_decref(r);
	ck_assert_int_eq(count_run_containers(filter), 1);       /* t2 stays */
	r = call(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t2"),
		 NULL, NULL);
	ck_assert_int_eq(jint(r, "disposed"), 1);
	json_decref(r);
	ck_assert_int_eq(count_run_containers(filter), 0);
	json_decref(a);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- ownership ---------------------------------------------------------- */

/* As uid/gid 65534 (nobody/nogroup): returns 0, or the number of the first
 * check that failed. */
static int as_nobody(const char *sock, const char *scope, const char *root_id)
{
	struct msb_conn *c = NULL;
	json_t *r = NULL;
	int rc;

	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		return 1;
	if (msb_connect(sock, &c) != MSB_OK)
		return 2;
	/* It cannot see root's sandbox... */
	if (msb_call(c, "sandbox.list", NULL, &r) != MSB_OK || json_array_size(r) != 0)
		return 3;
	json_decref(r);
	/* ...nor dispose it, by key, by id, or by scope (nothing of its own there)... */
	if (msb_call(c, "sandbox.dispose", json_pack("{s:o}", "key", key_for(scope, "t", "agent", NULL)), &r) != MSB_OK ||
	    !json_is_null(r))
		return 4;
	if (msb_call(c, "sandbox.dispose", json_pack("{s:o, s:s}", "key", key_for(scope, "t", "agent", NULL),
						     "sandbox", root_id), &r) != MSB_OK || !json_is_null(r))
		return 5;
	if (msb_call(c, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t"), &r) != MSB_OK ||
	    json_integer_value(json_object_get(r, "disposed")) != 0)
		return 6;
	json_decref(r);
	/* ...nor take it over, nor learn it is there: root's key names another
	 * container for this user (keys are per owner), made for it. */
	rc = msb_call(c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for(scope, "t", "agent", NULL),
						      "spec", spec_for("k", image)), &r);
	if (rc != MSB_OK || !json_is_true(json_object_get(r, "created")) ||
	    strcmp(json_string_value(json_object_get(r, "sandbox")), root_id) == 0)
		return 7;
	json_decref(r);
	/* Its disposal of that key removes its own only (root's is checked after). */
	if (msb_call(c, "sandbox.dispose", json_pack("{s:o}", "key", key_for(scope, "t", "agent", NULL)), &r) != MSB_OK ||
	    !json_is_null(r))
		return 8;
	/* Reaping is for administrators. */
	rc = msb_call(c, "sandbox.reap", json_pack("{s:i}", "older_than_seconds", 1), &r);
	if (rc != MSB_E_REMOTE || (msb_last_error_code(c) != 1300 && msb_last_error_code(c) != -32601))
		return 9;
	/* Its own sandbox works, and is its own. */
	if (msb_call(c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for(scope, "t", "nobody", NULL),
						     "spec", spec_for("k", image)), &r) != MSB_OK)
		return 10;
	json_decref(r);
	if (msb_call(c, "sandbox.list", NULL, &r) != MSB_OK || json_array_size(r) != 1 ||
	    strcmp(json_string_value(json_object_get(json_array_get(r, 0), "owner")), "65534"))
		return 11;
	json_decref(r);
	msb_conn_free(c);
	return 0;
}

START_TEST(another_uid_can_neither_see_nor_dispose)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("owner");
	json_t *a, *list;
	int status;
	pid_t pid;
	char *state;

	start_daemon(&d, (const char *[]){ "--set", "socket.group=nogroup", NULL });
	a = acquire(d.sock, key_for(scope, "t", "agent", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);      /* nobody must reach the socket's directory */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(as_nobody(d.sock, scope, jstr(a, "sandbox")));
	waitpid(pid, &status, 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "as uid 65534, check %d failed",
		      WEXITSTATUS(status));
	state = docker_state(jstr(a, "sandbox"));
	ck_assert_str_eq(state, "running");              /* root's is untouched */
	free(state);
	/* root, the administrator, sees both. */
	list = call(d.sock, "sandbox.list", json_pack("{s:s}", "scope", scope), NULL, NULL);
	ck_assert_uint_eq(json_array_size(list), 2);
	json_decref(list);
	json_decref(a);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

struct refusal_row {
	const char *spec_extra;    /* JSON members merged into the spec */
	int code;
	const char *type;
	const char *field;         /* data.field for -32602, or NULL */
};

static const struct refusal_row refusal_rows[] = {
	{ "{\"requires\":[\"exec\",\"files_list\"]}", 1100, "SandboxCapabilityNotSupported", NULL },
	{ "{\"requires\":[\"run_code\"]}", 1100, "SandboxCapabilityNotSupported", NULL },
	{ "{\"egress\":\"allowlist\"}", 1101, "SandboxEgressNotEnforced", NULL },
	{ "{\"egress\":\"unrestricted\"}", 1101, "SandboxEgressNotEnforced", NULL },
	{ "{\"requires_os_family\":\"windows\"}", 1102, "SandboxOsFamilyNotSupported", NULL },
	{ "{\"files_in\":{\"max_bytes_per_file\":67108865,\"max_total_bytes\":1,\"max_files\":1}}",
	  1103, "SandboxTransferLimitsNotPermitted", NULL },
	{ "{\"files_out\":{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":257}}",
	  1103, "SandboxTransferLimitsNotPermitted", NULL },
	{ "{\"min_isolation\":\"microvm\"}", 1105, "SandboxBackendNotPermitted", NULL },
	{ "{\"egress_allow\":[\"example.org\"]}", -32602, "InvalidParams", "spec.egress_allow" },
	{ "{\"requires\":[\"exec\",\"reclaim\"]}", -32602, "InvalidParams", "spec.requires" },
	{ "{\"egress\":\"open\"}", -32602, "InvalidParams", "spec.egress" },
	{ "{\"isolation_scope\":\"galaxy\"}", -32602, "InvalidParams", "spec.isolation_scope" },
	{ "{\"min_isolation\":\"process\"}", -32602, "InvalidParams", "spec.min_isolation" },
	{ "{\"image\":null}", -32602, "InvalidParams", "spec" },
};

START_TEST(crafted_specs_are_refused_before_anything_is_created)
{
	const struct refusal_row *row = &refusal_rows[_i];
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("refuse");
	json_t *spec, *extra, *err;
	struct msb_conn *c;
	char filter[160];
	int rc;

	spec = spec_for("k", image);
	extra = json_loads(row->spec_extra, 0, NULL);
	start_daemon(&d, NULL);
	json_object_update(spec, extra);
	json_decref(extra);
	if (strstr(row->spec_extra, "files_list") && plane_local()) {
		/* Declared where the local plane serves: the acquire is served,
		 * on the local plane (check_files.c tests files.list on both). */
		json_t *a = acquire(d.sock, key_for(scope, "t", "a", NULL), spec, NULL, NULL);

		ck_assert_msg(a, "an acquire requiring files_list was refused on the local plane");
		ck_assert_str_eq(jstr(a, "file_plane"), "local");
		json_decref(a);
		ck_assert(json_is_null(call(d.sock, "sandbox.dispose", json_pack("{s:o}", "key",
			key_for(scope, "t", "a", NULL)), NULL, NULL)));
		ck_assert_int_eq(msbd_stop(&d), 0);
		return;
	}
	ck_assert_int_eq(msb_connect(d.sock, &c), MSB_OK);
	rc = msb_call(c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_for(scope, "t", "a", NULL),
						      "spec", spec), NULL);
	ck_assert_int_eq(rc, MSB_E_REMOTE);
	ck_assert_int_eq(msb_last_error_code(c), row->code);
	ck_assert_str_eq(msb_last_error_type(c), row->type);
	err = msb_last_error_data(c);
	if (row->field)
		ck_assert_str_eq(json_string_value(json_object_get(err, "field")), row->field);
	if (strstr(row->spec_extra, "example.org"))
		ck_assert_ptr_nonnull(strstr(msb_last_error_message(c), "example.org"));
	msb_conn_free(c);
	snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s", scope);
	ck_assert_int_eq(count_run_containers(filter), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(an_image_no_registry_serves_fails_clearly)
{
	struct msbd_proc d = { 0 };
	char *type = NULL, img[96];
	int code;

	start_daemon(&d, NULL);
	/* A registry on loopback port 1, where nothing listens: the pull fails at
	 * once and nothing leaves this machine. */
	snprintf(img, sizeof(img), "127.0.0.1:1/msb-no-such-image:%s", run_id);
	ck_assert_ptr_null(acquire(d.sock, key_for(scope_of("pull"), "t", "a", NULL), spec_for("k", img),
				   &code, &type));
	ck_assert_int_eq(code, 1001);
	ck_assert_str_eq(type, "EngineError");
	free(type);
	{
		char filter[160];

		snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s", scope_of("pull"));
		ck_assert_int_eq(count_run_containers(filter), 0);
	}
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(a_foreign_container_under_our_name_is_refused)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("foreign");
	char *out, *type = NULL;
	json_t *a;
	int code;

	start_daemon(&d, NULL);
	a = acquire(d.sock, key_for(scope, "t", "a", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert(json_is_null(call(d.sock, "sandbox.dispose", json_pack("{s:o}", "key",
		key_for(scope, "t", "a", NULL)), NULL, NULL)));
	/* Someone else takes the name, without our labels. */
	out = sh_out("docker run -d --network none --name %s --label maf-sandbox.label.%s=%s %s sleep infinity",
		     jstr(a, "name"), RUN_LABEL, run_id, image);
	ck_assert_uint_eq(strlen(out), 64);
	ck_assert_ptr_null(acquire(d.sock, key_for(scope, "t", "a", NULL), spec_for("k", image), &code, &type));
	ck_assert_int_eq(code, 1106);
	ck_assert_str_eq(type, "SandboxConflict");
	free(type);
	free(out);
	out = sh_out("docker inspect -f '{{.State.Status}}' %s", jstr(a, "name"));
	ck_assert_str_eq(out, "running");                  /* refused, and left alone */
	free(out);
	json_decref(a);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(a_failure_half_way_rolls_back)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("rollback");
	char nosleep[96], *out, *type = NULL, filter[160];
	int code;

	/* An image with no sleep: with docker-init off, runc refuses the start
	 * itself, after this acquire created the container. */
	snprintf(nosleep, sizeof(nosleep), "msb-it-nosleep:%s", run_id);
	out = sh_out("d=$(mktemp -d) && mkdir -p $d/bin && cp /bin/busybox $d/bin/ && ln -s busybox $d/bin/sh && "
		     "tar -C $d -c . | docker import -c 'ENV PATH=/bin' - %s >/dev/null && rm -rf $d && echo ok",
		     nosleep);
	ck_assert_str_eq(out, "ok");
	free(out);
	start_daemon(&d, (const char *[]){ "--set", "sandbox.init=false", NULL });
	ck_assert_ptr_null(acquire(d.sock, key_for(scope, "t", "a", NULL), spec_for("k", nosleep), &code, &type));
	ck_assert_int_eq(code, 1001);
	free(type);
	snprintf(filter, sizeof(filter), "--filter label=maf-sandbox.scope=%s", scope);
	ck_assert_int_eq(count_run_containers(filter), 0);   /* what it created is gone */
	free(sh_out("docker rmi -f %s", nosleep));
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* ---- reap --------------------------------------------------------------- */

/* The old sandbox is made this long before the young one (not early: the
 * gap between their ages is the behaviour the sweep's threshold splits). */
#define REAP_GAP_S 5              /* not early */
/* The threshold is the young one's age as read just before the sweep plus
 * this: the sweep call must come within it (a hang guard; under the gap). */
#define REAP_READ_SLACK_S 3

/* How long ago the engine created container id, in milliseconds. */
static long created_ms_ago(const char *id)
{
	char *out = sh_out("c=$(docker inspect -f '{{.Created}}' %s) && echo $(( ($(date +%%s%%N) - $(date -d \"$c\" "
			   "+%%s%%N)) / 1000000 ))", id);
	long ms = atol(out);

	ck_assert_msg(out[0] && ms >= 0, "the age of %.12s: '%s'", id, out);
	free(out);
	return ms;
}

START_TEST(reap_removes_only_what_is_old_enough)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("reap");
	char *out, *state;
	json_t *old, *young, *r;
	int code;

	start_daemon(&d, NULL);
	old = acquire(d.sock, key_for(scope, "t", "old", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(old);
	/* A look-alike with every label but a foreign name is never reaped. */
	out = sh_out("docker run -d --network none --name maf-sandbox-wslc-%s --label maf-sandbox.scope=%s "
		     "--label maf-sandbox.thread=t --label maf-sandbox.agent=x --label maf-sandbox.kind=k "
		     "--label maf-sandbox.label.%s=%s %s sleep infinity", run_id, scope, RUN_LABEL, run_id, image);
	ck_assert_uint_eq(strlen(out), 64);
	free(out);
	sleep(REAP_GAP_S);      /* not early: the old one is older by the gap */
	young = acquire(d.sock, key_for(scope, "t", "young", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(young);
	ck_assert_ptr_null(call(d.sock, "sandbox.reap", json_pack("{s:i}", "older_than_seconds", 0), &code, NULL));
	ck_assert_int_eq(code, -32602);
	{
		/* Between the two ages: over the young one's (by the slack, a hang
		 * guard on the sweep call), under the old one's (older by the gap). */
		long young_ms = created_ms_ago(jstr(young, "sandbox")), old_ms = created_ms_ago(jstr(old, "sandbox"));
		long threshold_s = (young_ms + 999) / 1000 + REAP_READ_SLACK_S;

		ck_assert_msg(old_ms / 1000 > threshold_s, "the old sandbox is %ld ms old, the young %ld ms: no gap",
			      old_ms, young_ms);
		r = call(d.sock, "sandbox.reap", json_pack("{s:I, s:s}", "older_than_seconds", (json_int_t)threshold_s,
							   "scope", scope), NULL, NULL);
	}
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(jint(r, "disposed"), 1);
	ck_assert_int_eq(jint(r, "proxies_removed"), 0);
	ck_assert_int_eq(jint(r, "networks_removed"), 0);
	ck_assert_uint_eq(json_array_size(jget(r, "failures")), 0);
	json_decref(r);
	state = docker_state(jstr(old, "sandbox"));
	ck_assert_str_eq(state, "");                       /* the old one is gone */
	free(state);
	state = docker_state(jstr(young, "sandbox"));
	ck_assert_str_eq(state, "running");                /* the young one stays */
	free(state);
	out = sh_out("docker inspect -f '{{.State.Status}}' maf-sandbox-wslc-%s", run_id);
	ck_assert_str_eq(out, "running");                  /* the look-alike stays */
	free(out);
	json_decref(old);
	json_decref(young);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(timed_sweep_reaps_by_itself)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("timed");
	json_t *a;
	char *state = NULL;

	start_daemon(&d, (const char *[]){ "--set", "reap.max_age_s=1", "--set", "reap.interval_s=1", NULL });
	a = acquire(d.sock, key_for(scope, "t", "a", NULL), spec_for("k", image), NULL, NULL);
	ck_assert_ptr_nonnull(a);
	for (int i = 0; i < 300; i++) {       /* hang guard: 30 s */
		free(state);
		state = docker_state(jstr(a, "sandbox"));
		if (!*state)
			break;
		usleep(100 * 1000);
	}
	ck_assert_msg(!*state, "the timed sweep did not remove a sandbox older than reap.max_age_s");
	free(state);
	json_decref(a);
	ck_assert_int_eq(msbd_stop_keep_dir(&d), 0);
	state = sh_out("grep -c 'timed sweep: removed' %s", d.log);
	ck_assert_int_ge(atoi(state), 1);
	free(state);
	msbd_stop(&d);
}
END_TEST

/* ---- the CLI ------------------------------------------------------------ */

START_TEST(cli_acquire_ls_dispose)
{
	struct msbd_proc d = { 0 };
	const char *scope = scope_of("cli");
	char spec_path[160], *out = NULL, *err = NULL, *id;
	FILE *f;

	start_daemon(&d, NULL);
	snprintf(spec_path, sizeof(spec_path), "%s/spec.json", d.dir);
	f = fopen(spec_path, "w");
	fprintf(f, "{\"labels\":{\"%s\":\"%s\"}}", RUN_LABEL, run_id);
	fclose(f);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "acquire", "--scope", scope, "--thread", "t",
		"--agent", "a", "--kind", "k", "--image", image, "--spec", spec_path, NULL }, &out, &err), 0);
	id = strndup(out, strcspn(out, "\n"));
	ck_assert_msg(strlen(id) == 64, "acquire printed %s (stderr %s)", out, err);
	free(out), free(err);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "ls", "--scope", scope, NULL }, &out, NULL), 0);
	ck_assert_msg(strstr(out, "running") && strstr(out, scope), "ls: %s", out);
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "dispose", "--scope", scope, "--thread", "t",
		"--agent", "a", NULL }, &out, NULL), 0);
	free(out);
	out = docker_state(id);
	ck_assert_str_eq(out, "");                       /* gone */
	free(out);
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "dispose-scope", "--scope", scope,
		"--thread", "t", NULL }, &out, NULL), 0);
	ck_assert_msg(strstr(out, "disposed 0"), "dispose-scope: %s", out);
	free(out);
	/* A refusal reaches the user as the error's type, with exit status 1. */
	ck_assert_int_eq(run_cli((const char *[]){ "--socket", d.sock, "acquire", "--scope", scope, "--thread", "t",
		"--agent", "a", "--kind", "k", "--image", image, "--scope-call", NULL }, &out, &err), 1);
	ck_assert_msg(strstr(err, "InvalidParams"), "stderr: %s", err);
	free(out), free(err);
	free(id);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

static Suite *sandbox_suite(void)
{
	Suite *s = suite_create("sandbox");
	TCase *acq = tcase_create("acquire");
	TCase *disp = tcase_create("dispose");
	TCase *own = tcase_create("ownership");
	TCase *ref = tcase_create("refusals");

	tcase_set_timeout(acq, 120);
	tcase_add_test(acq, cold_acquire_creates_the_named_labelled_container);
	tcase_add_test(acq, warm_acquire_makes_no_engine_request);
	tcase_add_test(acq, command_probes_refuse_what_the_image_cannot_run);
	tcase_add_test(acq, concurrent_acquires_make_one_container);
	tcase_add_test(acq, concurrent_acquire_with_another_work_dir_is_refused);
	tcase_add_loop_test(acq, acquire_recovers_what_was_done_behind_its_back, 0,
			    sizeof(behind_rows) / sizeof(behind_rows[0]));
	tcase_add_test(acq, restart_rebuilds_the_registry_from_labels);
	tcase_add_test(acq, a_freeze_another_daemon_holds_is_never_lifted);
	tcase_add_test(acq, the_freeze_lock_file_is_made_or_the_daemon_refuses_to_start);
	tcase_add_test(acq, call_scoped_keys_get_their_own_containers);
	tcase_add_test(acq, an_image_no_registry_serves_fails_clearly);
	tcase_add_test(acq, cli_acquire_ls_dispose);
	tcase_add_test(acq, a_foreign_container_under_our_name_is_refused);
	tcase_add_test(acq, a_failure_half_way_rolls_back);
	tcase_set_timeout(disp, 120);
	tcase_add_test(disp, dispose_and_dispose_scope_after_a_restart);
	tcase_add_test(disp, reap_removes_only_what_is_old_enough);
	tcase_add_test(disp, timed_sweep_reaps_by_itself);
	tcase_set_timeout(own, 120);
	tcase_add_test(own, another_uid_can_neither_see_nor_dispose);
	tcase_set_timeout(ref, 60);
	tcase_add_loop_test(ref, crafted_specs_are_refused_before_anything_is_created, 0,
			    sizeof(refusal_rows) / sizeof(refusal_rows[0]));
	suite_add_tcase(s, acq);
	suite_add_tcase(s, disp);
	suite_add_tcase(s, own);
	suite_add_tcase(s, ref);
	return s;
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed;

	snprintf(run_id, sizeof(run_id), "it%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-busybox:%s", run_id);
	if (!harness_test_image(image))
		return EXIT_FAILURE;
	harness_run_dir_create();
	sr = srunner_create(sandbox_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_run_dir_remove();
	/* Whatever failed: nothing of this run stays. */
	out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s | xargs -r docker rm -f >/dev/null 2>&1; "
		     "docker rmi -f %s msb-it-nosleep:%s msb-it-nosh:%s >/dev/null 2>&1; echo done", RUN_LABEL, run_id,
		     image, run_id, run_id);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
