/* guestcpu.c — maf-sandbox-bench-guestcpu: how much CPU a guest keeps
 * while the host stats a file in it every 0.2 s.
 *
 * A CPU-bound busybox sh loop runs in the guest (in the background, with
 * no terminal: the test image's busybox has no nohup) and measures its own
 * progress: every GC_SAMPLE_EVERY iterations it writes its count and the
 * kernel's uptime (its own clock) to a file. The program reads that file
 * (sandbox.exec cat) at the edges of two phases of --seconds each:
 *   baseline  nothing else happens;
 *   polling   the host calls files.stat through the daemon every
 *             --interval-ms (on the archive plane each one freezes the
 *             guest; on the local plane none does).
 * kept share = iterations per second while polling / baseline. The guest's
 * cgroup CPU time per phase is reported beside it when the cgroup is
 * readable from here. The report names the plane that served the sandbox
 * (sandbox.acquire's file_plane; pick it with --set files.plane=local or
 * =archive); on the local plane, at the default interval, it says whether
 * the goal (the guest keeps at least GC_LOCAL_GOAL_SHARE) was met.
 *
 * The daemon is our own, on a socket in a private directory, stopped at the
 * end; the sandbox carries maf-sandbox.label.msb-scale-run=<pid> and is
 * removed at the end, also on failure and on SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "cleanup.h"
#include "gsbench.h"
#include "xmalloc.h"

#define GC_DEFAULT_SECONDS     30
#define GC_MAX_SECONDS         3600
#define GC_DEFAULT_INTERVAL_MS 200
#define GC_MIN_INTERVAL_MS     1
#define GC_MAX_INTERVAL_MS     60000
#define GC_DEFAULT_CPUS        "1"       /* daemon sandbox.cpus for the guest */
#define GC_DEFAULT_IMAGE       "maf-sandbox-bench:local"
#define GC_WARMUP_MS           2000      /* the loop runs this long before the baseline */
#define GC_SAMPLE_EVERY        2000      /* loop iterations between two writes of the count */
#define GC_COUNT_FILE          "/tmp/msb-guestcpu.count"
#define GC_PROBE_FILE          "probe.txt"
#define GC_EXEC_TIMEOUT_S      20
#define GC_SAMPLE_TRIES        5         /* a read may meet the file being rewritten */
#define GC_ACQUIRE_TIMEOUT_MS  120000
#define GC_KIND                "guestcpu"
/* The local plane's goal (issue 9): the guest keeps at least this share of
 * its progress under files.stat every GC_DEFAULT_INTERVAL_MS. */
#define GC_LOCAL_GOAL_SHARE    0.90
#define GC_PLANE_MAX           16        /* "archive", "local" */

struct gc_options {
	long seconds;
	long interval_ms;
	const char *json_path;
	const char *image;          /* NULL: build GC_DEFAULT_IMAGE */
	const char *daemon;
	const char *cpus;           /* daemon sandbox.cpus; "0" = none */
	const char *cpuset;         /* engine CpusetCpus after acquire; NULL = none */
	const char *lock_file;
	char *sets[GS_MAX_SETS];
	size_t n_sets;
};

/* The loop's own reading: iterations done at a moment of its clock. */
struct gc_sample {
	long count;
	double uptime_s;
	double cpu_ns;              /* the guest cgroup's CPU time; -1 unknown */
};

struct gc_phase {
	struct gc_sample a, b;
	double wall_ms;
};

struct gc_run {
	struct gc_options opt;
	struct gs_daemon d;
	struct gs_client c;
	char scope[64];
	char run_id[32];
	char sandbox[80];
	char plane[GC_PLANE_MAX];   /* the file plane serving it (acquire's file_plane); "" unknown */
	char cgroup_path[512];      /* cpuacct.usage (ns) or cpu.stat (usage_usec); "" = none */
	bool cgroup_v2;
	json_t *placement;          /* what the guest ran on */
	json_t *host_end;           /* the host after the phases (its load average) */
	struct gc_phase base, poll;
	struct gs_samples stat_ms;
	long stats, stat_errors, late_ticks;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: maf-sandbox-bench-guestcpu [OPTIONS]\n"
		"A CPU-bound loop in a sandbox measures its progress with no file calls, then\n"
		"while the host calls files.stat every --interval-ms; prints the share it kept.\n\n"
		"  --seconds S        length of each phase (default %d)\n"
		"  --interval-ms MS   files.stat period while polling (default %d)\n"
		"  --json FILE        also write the results as JSON\n"
		"  --image REF        guest image (default: build %s with testimage.sh)\n"
		"  --daemon PATH      maf-sandboxd (default $MSB_DAEMON, else the built one)\n"
		"  --cpus N           daemon sandbox.cpus for the guest (default %s; 0 = none)\n"
		"  --cpuset LIST      pin the guest's container to these CPUs (engine update)\n"
		"  --lock-file PATH   daemon freeze.lock_file (default: in the private dir)\n"
		"  --set KEY=VALUE    forwarded to the daemon as --set (repeatable), e.g.\n"
		"                     files.plane=local or files.plane=archive (default: auto)\n",
		GC_DEFAULT_SECONDS, GC_DEFAULT_INTERVAL_MS, GC_DEFAULT_IMAGE, GC_DEFAULT_CPUS);
}

static int parse_options(int argc, char **argv, struct gc_options *o)
{
	enum { O_SECONDS = 256, O_INTERVAL, O_JSON, O_IMAGE, O_DAEMON, O_CPUS, O_CPUSET, O_LOCK, O_SET };
	static const struct option longopts[] = {
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "interval-ms", required_argument, NULL, O_INTERVAL },
		{ "json", required_argument, NULL, O_JSON },
		{ "image", required_argument, NULL, O_IMAGE },
		{ "daemon", required_argument, NULL, O_DAEMON },
		{ "cpus", required_argument, NULL, O_CPUS },
		{ "cpuset", required_argument, NULL, O_CPUSET },
		{ "lock-file", required_argument, NULL, O_LOCK },
		{ "set", required_argument, NULL, O_SET },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int ch;

	*o = (struct gc_options){ .seconds = GC_DEFAULT_SECONDS, .interval_ms = GC_DEFAULT_INTERVAL_MS,
				  .cpus = GC_DEFAULT_CPUS };
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int r = 0;

		switch (ch) {
		case O_SECONDS: r = gs_parse_long(optarg, 1, GC_MAX_SECONDS, &o->seconds); break;
		case O_INTERVAL:
			r = gs_parse_long(optarg, GC_MIN_INTERVAL_MS, GC_MAX_INTERVAL_MS, &o->interval_ms);
			break;
		case O_JSON: o->json_path = optarg; break;
		case O_IMAGE: o->image = optarg; break;
		case O_DAEMON: o->daemon = optarg; break;
		case O_CPUS: o->cpus = optarg; break;
		case O_CPUSET: o->cpuset = optarg; break;
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

/* ---- the daemon and the sandbox ---------------------------------------- */

static int wait_engine_reachable(struct gc_run *g)
{
	double deadline = gs_now_ms() + GS_SYNC_TIMEOUT_MS;

	while (!gs_interrupted && gs_now_ms() < deadline) {
		json_t *st = NULL;
		const char *state = NULL;

		if (gs_call(&g->c, "daemon.status", NULL, &st) == MSB_OK)
			state = json_string_value(json_object_get(json_object_get(st, "engine"), "state"));
		if (state && strcmp(state, "reachable") == 0) {
			json_decref(st);
			return 0;
		}
		json_decref(st);
		gs_sleep_ms(50);
	}
	fprintf(stderr, "the daemon did not reach the engine\n");
	return -ETIMEDOUT;
}

static int start_daemon(struct gc_run *g)
{
	char *sets[GS_MAX_SETS + 1];
	_cleanup_free_ char *cpus = xasprintf("sandbox.cpus=%s", g->opt.cpus);
	size_t n = 0;
	int r;

	sets[n++] = cpus;
	for (size_t i = 0; i < g->opt.n_sets; i++)
		sets[n++] = g->opt.sets[i];
	r = gs_daemon_prepare(&g->d);
	if (r < 0)
		return r;
	r = gs_daemon_start(&g->d, gs_daemon_path(g->opt.daemon), g->opt.lock_file, sets, n);
	if (r < 0)
		return r;
	r = gs_daemon_wait_listening(&g->d, GS_LISTEN_TIMEOUT_MS);
	if (r < 0)
		return r;
	gs_client_init(&g->c, g->d.sock, GS_CALL_TIMEOUT_MS);
	return wait_engine_reachable(g);
}

static json_t *sandbox_key(const struct gc_run *g)
{
	return json_pack("{s:s, s:s, s:s}", "scope", g->scope, "thread_id", "t", "agent_dir", "bench");
}

static int acquire(struct gc_run *g)
{
	json_t *spec = json_pack("{s:s, s:s, s:{s:s}}", "kind", GC_KIND, "image", g->opt.image, "labels",
				 GS_RUN_LABEL, g->run_id);
	json_t *res = NULL;
	int r;

	g->c.timeout_ms = GC_ACQUIRE_TIMEOUT_MS;
	r = gs_call(&g->c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", sandbox_key(g), "spec", spec),
		    &res);
	g->c.timeout_ms = GS_CALL_TIMEOUT_MS;
	if (r != MSB_OK) {
		fprintf(stderr, "sandbox.acquire: %s\n", g->c.last_error);
		return -EIO;
	}
	snprintf(g->sandbox, sizeof(g->sandbox), "%s", json_string_value(json_object_get(res, "sandbox")));
	if (json_is_string(json_object_get(res, "file_plane")))
		snprintf(g->plane, sizeof(g->plane), "%s", json_string_value(json_object_get(res, "file_plane")));
	json_decref(res);
	return 0;
}

/* sandbox.exec of a shell command; its stdout text (malloc'd) or NULL. */
static char *guest_sh(struct gc_run *g, const char *command)
{
	json_t *res = NULL, *b64;
	uint8_t *bytes = NULL;
	char *out;
	size_t n = 0;
	int r;

	r = gs_call(&g->c, "sandbox.exec",
		    json_pack("{s:s, s:s, s:i}", "sandbox", g->sandbox, "command", command, "timeout_seconds",
			      GC_EXEC_TIMEOUT_S),
		    &res);
	if (r != MSB_OK) {
		fprintf(stderr, "sandbox.exec %s: %s\n", command, g->c.last_error);
		return NULL;
	}
	if (json_integer_value(json_object_get(res, "exit_code")) != 0)
		fprintf(stderr, "guest command exited %lld: %s\n",
			(long long)json_integer_value(json_object_get(res, "exit_code")), command);
	/* stdout_b64 is the exact bytes (stdout_text needs text: true). */
	b64 = json_object_get(res, "stdout_b64");
	if (!json_is_string(b64) ||
	    msb_base64_decode(json_string_value(b64), json_string_length(b64), &bytes, &n) < 0) {
		fprintf(stderr, "no stdout_b64 from: %s\n", command);
		json_decref(res);
		return NULL;
	}
	out = xmalloc(n + 1);
	memcpy(out, bytes, n);
	out[n] = '\0';
	free(bytes);
	json_decref(res);
	return out;
}

/* ---- where the guest runs ------------------------------------------------ */

/* The cgroup file that counts the guest's CPU time, from /proc/<pid>/cgroup
 * of its first process: v1 cpuacct.usage (ns) or v2 cpu.stat (usage_usec). */
static void find_cgroup(struct gc_run *g, long pid)
{
	char path[64], line[512];
	_cleanup_fclose_ FILE *f = NULL;

	snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;
		char cand[512];

		if (!cg)
			continue;
		*cg++ = '\0';
		ctl++;
		cg[strcspn(cg, "\n")] = '\0';
		if (strstr(ctl, "cpuacct"))
			snprintf(cand, sizeof(cand), "/sys/fs/cgroup/%s%s/cpuacct.usage", ctl, cg);
		else if (!*ctl)
			snprintf(cand, sizeof(cand), "/sys/fs/cgroup%s/cpu.stat", cg);
		else
			continue;
		if (access(cand, R_OK) == 0) {
			snprintf(g->cgroup_path, sizeof(g->cgroup_path), "%s", cand);
			g->cgroup_v2 = !*ctl;
			return;
		}
	}
}

/* CPU ns the guest's cgroup has used; -1 when unknown. */
static double cgroup_cpu_ns(const struct gc_run *g)
{
	_cleanup_fclose_ FILE *f = NULL;
	char line[256];

	if (!g->cgroup_path[0] || !(f = fopen(g->cgroup_path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!g->cgroup_v2)
			return strtod(line, NULL);
		if (strncmp(line, "usage_usec ", 11) == 0)
			return strtod(line + 11, NULL) * 1000.0;
	}
	return -1;
}

/* Pins the container (--cpuset) and reads what it runs under. */
static int place_guest(struct gc_run *g)
{
	_cleanup_free_ char *path = xasprintf("/containers/%s/json", g->sandbox);
	json_t *insp = NULL, *host;
	long status = 0;

	if (g->opt.cpuset) {
		_cleanup_free_ char *up = xasprintf("/containers/%s/update", g->sandbox);
		json_t *body = json_pack("{s:s}", "CpusetCpus", g->opt.cpuset);
		int r = gs_engine("POST", up, body, &status, NULL);

		json_decref(body);
		if (r < 0 || status != 200) {
			fprintf(stderr, "cannot pin the guest to CPUs %s (status %ld)\n", g->opt.cpuset, status);
			return -EIO;
		}
	}
	if (gs_engine("GET", path, NULL, &status, &insp) < 0 || status != 200) {
		json_decref(insp);
		return -EIO;
	}
	host = json_object_get(insp, "HostConfig");
	find_cgroup(g, (long)json_integer_value(json_object_get(json_object_get(insp, "State"), "Pid")));
	g->placement = json_pack("{s:f, s:s, s:s?, s:o}", "nano_cpus_as_cpus",
				 (double)json_integer_value(json_object_get(host, "NanoCpus")) / 1e9,
				 "cpuset", json_string_length(json_object_get(host, "CpusetCpus")) ?
				 json_string_value(json_object_get(host, "CpusetCpus")) : "any",
				 "cgroup_cpu_file", g->cgroup_path[0] ? g->cgroup_path : NULL,
				 "host", gs_host_json());
	json_decref(insp);
	return 0;
}

/* ---- the loop and its samples ------------------------------------------- */

static int start_loop(struct gc_run *g)
{
	_cleanup_free_ char *cmd = xasprintf(
		"sh -c 'i=0; while :; do i=$((i+1)); if [ $((i %% %d)) -eq 0 ]; then "
		"read up rest </proc/uptime; echo \"$i $up\" >%s; fi; done' "
		">/dev/null 2>&1 </dev/null &", GC_SAMPLE_EVERY, GC_COUNT_FILE);
	_cleanup_free_ char *out = guest_sh(g, cmd);

	return out ? 0 : -EIO;
}

static int take_sample(struct gc_run *g, struct gc_sample *s)
{
	for (int i = 0; i < GC_SAMPLE_TRIES && !gs_interrupted; i++) {
		_cleanup_free_ char *out = guest_sh(g, "cat " GC_COUNT_FILE);

		if (!out)
			return -EIO;
		if (sscanf(out, "%ld %lf", &s->count, &s->uptime_s) == 2) {
			s->cpu_ns = cgroup_cpu_ns(g);
			return 0;
		}
	}
	fprintf(stderr, "cannot read the guest loop's count from %s\n", GC_COUNT_FILE);
	return -EIO;
}

static double phase_rate(const struct gc_phase *p)
{
	double dt = p->b.uptime_s - p->a.uptime_s;

	return dt > 0 ? (double)(p->b.count - p->a.count) / dt : 0;
}

/* Guest CPU time over the phase's guest-clock span, as a share of one core; -1 unknown. */
static double phase_cpu_share(const struct gc_phase *p)
{
	double dt = p->b.uptime_s - p->a.uptime_s;

	if (p->a.cpu_ns < 0 || p->b.cpu_ns < 0 || dt <= 0)
		return -1;
	return (p->b.cpu_ns - p->a.cpu_ns) / (dt * 1e9);
}

static int phase_baseline(struct gc_run *g)
{
	double t0;
	int r = take_sample(g, &g->base.a);

	if (r < 0)
		return r;
	t0 = gs_now_ms();
	gs_sleep_ms((double)g->opt.seconds * 1000.0);
	g->base.wall_ms = gs_now_ms() - t0;
	return take_sample(g, &g->base.b);
}

static void one_stat(struct gc_run *g)
{
	json_t *res = NULL;
	int r = gs_call(&g->c, "files.stat", json_pack("{s:s, s:s}", "sandbox", g->sandbox, "path",
							   GC_PROBE_FILE), &res);

	g->stats++;
	gs_samples_add(&g->stat_ms, g->c.last_ms);
	if (r != MSB_OK || !json_is_object(res)) {
		g->stat_errors++;
		fprintf(stderr, "files.stat: %s\n", r == MSB_OK ? "null (not found)" : g->c.last_error);
	}
	json_decref(res);
}

static int phase_polling(struct gc_run *g)
{
	double t0, end, next, period = (double)g->opt.interval_ms;
	int r = take_sample(g, &g->poll.a);

	if (r < 0)
		return r;
	t0 = gs_now_ms();
	end = t0 + (double)g->opt.seconds * 1000.0;
	for (next = t0; !gs_interrupted && gs_now_ms() < end;) {
		one_stat(g);
		next += period;
		if (next < gs_now_ms()) {   /* the call took longer than a period */
			g->late_ticks++;
			next = gs_now_ms();
		}
		gs_sleep_ms(next - gs_now_ms());
	}
	g->poll.wall_ms = gs_now_ms() - t0;
	return take_sample(g, &g->poll.b);
}

/* ---- the report -------------------------------------------------------- */

static json_t *phase_json(const struct gc_phase *p)
{
	return json_pack("{s:I, s:f, s:f, s:f, s:f}", "iterations", (json_int_t)(p->b.count - p->a.count),
			 "guest_seconds", p->b.uptime_s - p->a.uptime_s, "wall_seconds", p->wall_ms / 1000.0,
			 "iterations_per_second", phase_rate(p), "guest_cpu_share_of_one_core",
			 phase_cpu_share(p));
}

/* The local plane's goal is judged at the default interval only. */
static bool goal_applies(const struct gc_run *g)
{
	return strcmp(g->plane, "local") == 0 && g->opt.interval_ms == GC_DEFAULT_INTERVAL_MS;
}

static bool goal_met(const struct gc_run *g)
{
	double rb = phase_rate(&g->base);

	return rb > 0 && phase_rate(&g->poll) / rb >= GC_LOCAL_GOAL_SHARE && g->stat_errors == 0 && g->c.hangs == 0;
}

/* {"kept_share_at_least", "interval_ms", "met"}, or null where it does not apply. New reference. */
static json_t *goal_json(const struct gc_run *g)
{
	if (!goal_applies(g))
		return json_null();
	return json_pack("{s:f, s:I, s:b}", "kept_share_at_least", GC_LOCAL_GOAL_SHARE, "interval_ms",
			 (json_int_t)GC_DEFAULT_INTERVAL_MS, "met", goal_met(g));
}

static json_t *report_json(const struct gc_run *g)
{
	double rb = phase_rate(&g->base), rp = phase_rate(&g->poll);
	double cb = phase_cpu_share(&g->base), cp = phase_cpu_share(&g->poll);

	return json_pack("{s:s, s:I, s:I, s:s, s:s?, s:o, s:O, s:O, s:o, s:o, s:{s:I, s:I, s:I, s:I, s:o}, s:f, s:o?}",
			 "bench", "guestcpu", "seconds", (json_int_t)g->opt.seconds, "interval_ms",
			 (json_int_t)g->opt.interval_ms, "image", g->opt.image, "file_plane",
			 g->plane[0] ? g->plane : NULL, "local_goal", goal_json(g), "placement", g->placement,
			 "host_end", g->host_end,
			 "baseline", phase_json(&g->base), "polling", phase_json(&g->poll), "stats",
			 "done", (json_int_t)g->stats, "errors", (json_int_t)g->stat_errors, "hangs",
			 (json_int_t)g->c.hangs, "late_ticks", (json_int_t)g->late_ticks, "latency",
			 gs_samples_json(&g->stat_ms), "kept_share", rb > 0 ? rp / rb : 0,
			 "kept_share_by_cpu_time", cb > 0 && cp >= 0 ? json_real(cp / cb) : NULL);
}

static void print_phase(const char *name, const struct gc_phase *p)
{
	double share = phase_cpu_share(p);

	printf("%-9s %ld iterations in %.2f s = %.0f it/s", name, p->b.count - p->a.count,
	       p->b.uptime_s - p->a.uptime_s, phase_rate(p));
	if (share >= 0)
		printf("; guest CPU %.1f%% of one core", share * 100.0);
	printf("\n");
}

static void print_report(const struct gc_run *g)
{
	const json_t *h = json_object_get(g->placement, "host");
	double rb = phase_rate(&g->base), rp = phase_rate(&g->poll);
	double cb = phase_cpu_share(&g->base), cp = phase_cpu_share(&g->poll);

	printf("maf-sandbox-bench-guestcpu: %ld s baseline, then %ld s with files.stat every %ld ms\n",
	       g->opt.seconds, g->opt.seconds, g->opt.interval_ms);
	printf("plane:    %s\n", !g->plane[0] ? "unknown (sandbox.acquire named no file_plane)" :
	       strcmp(g->plane, "local") == 0 ? "local (openat2 beneath the container's root, no freeze)" :
	       strcmp(g->plane, "archive") == 0 ? "archive (the engine's archive API, each call under a freeze)" :
	       g->plane);
	printf("guest:    busybox sh loop in %.12s (image %s; cpus limit %.2f, cpuset %s)\n", g->sandbox,
	       g->opt.image, json_real_value(json_object_get(g->placement, "nano_cpus_as_cpus")),
	       json_string_value(json_object_get(g->placement, "cpuset")));
	printf("host:     %lld CPUs (%s), load average %.2f at start, %.2f at the end\n",
	       (long long)json_integer_value(json_object_get(h, "cpus_online")),
	       json_string_value(json_object_get(h, "cpu_model")),
	       json_real_value(json_array_get(json_object_get(h, "loadavg"), 0)),
	       json_real_value(json_array_get(json_object_get(g->host_end, "loadavg"), 0)));
	print_phase("baseline:", &g->base);
	print_phase("polling:", &g->poll);
	printf("stats:    %ld done, %ld errors, %ld hangs, %ld late ticks; latency p50 %.1f ms, p99 %.1f ms, "
	       "max %.1f ms\n", g->stats, g->stat_errors, g->c.hangs, g->late_ticks,
	       gs_percentile(&g->stat_ms, 50), gs_percentile(&g->stat_ms, 99), gs_max(&g->stat_ms));
	printf("kept:     %.1f%% of the baseline's progress", rb > 0 ? 100.0 * rp / rb : 0);
	if (cb > 0 && cp >= 0)
		printf(" (%.1f%% by guest CPU time)", 100.0 * cp / cb);
	printf("\n");
	if (goal_applies(g))
		printf("goal:     the local plane keeps >= %.0f%% under files.stat every %d ms: goal %s\n",
		       100.0 * GC_LOCAL_GOAL_SHARE, GC_DEFAULT_INTERVAL_MS, goal_met(g) ? "met" : "missed");
}

/* ---- main ---------------------------------------------------------------- */

static int measure(struct gc_run *g)
{
	int r;

	if ((r = start_daemon(g)) < 0 || (r = acquire(g)) < 0 || (r = place_guest(g)) < 0)
		return gs_interrupted ? -EINTR : r;
	r = gs_call(&g->c, "files.write", json_pack("{s:s, s:s, s:s}", "sandbox", g->sandbox, "path",
						    GC_PROBE_FILE, "content_text", "probe\n"), NULL);
	if (r != MSB_OK) {
		fprintf(stderr, "files.write: %s\n", g->c.last_error);
		return -EIO;
	}
	if ((r = start_loop(g)) < 0)
		return gs_interrupted ? -EINTR : r;
	gs_sleep_ms(GC_WARMUP_MS);
	if ((r = phase_baseline(g)) < 0 || (r = phase_polling(g)) < 0)
		return gs_interrupted ? -EINTR : r;
	g->host_end = gs_host_json();
	return gs_interrupted ? -EINTR : 0;
}

static void teardown(struct gc_run *g, bool failed)
{
	_cleanup_free_ char *keep = NULL;
	long removed;

	if (g->sandbox[0] && g->d.pid > 0 &&
	    gs_call(&g->c, "sandbox.dispose", json_pack("{s:o}", "key", sandbox_key(g)), NULL) != MSB_OK)
		fprintf(stderr, "sandbox.dispose: %s\n", g->c.last_error);
	gs_client_close(&g->c);
	if (gs_daemon_stop(&g->d) != 0)
		failed = true;
	removed = gs_engine_remove_labelled(GS_RUN_LABEL_FULL, g->run_id);
	if (removed > 0)
		fprintf(stderr, "removed %ld leftover container(s) labelled %s=%s\n", removed,
			GS_RUN_LABEL_FULL, g->run_id);
	else if (removed < 0)
		fprintf(stderr, "could not remove the containers labelled %s=%s: remove them by hand\n",
			GS_RUN_LABEL_FULL, g->run_id);
	if (failed)
		keep = xasprintf("/tmp/maf-sandbox-bench-guestcpu-%d-daemon.log", (int)getpid());
	gs_daemon_cleanup(&g->d, keep);
	gs_samples_free(&g->stat_ms);
	json_decref(g->placement);
	json_decref(g->host_end);
}

int main(int argc, char **argv)
{
	static struct gc_run g;
	int r;

	if (parse_options(argc, argv, &g.opt) < 0)
		return 2;
	gs_signals_install();
	snprintf(g.run_id, sizeof(g.run_id), "%d", (int)getpid());
	snprintf(g.scope, sizeof(g.scope), "msb-guestcpu-%d", (int)getpid());
	if (gs_engine_init() < 0)
		return 1;
	if (!g.opt.image) {
		g.opt.image = GC_DEFAULT_IMAGE;
		if (gs_test_image(g.opt.image) < 0) {
			gs_engine_cleanup();
			return 1;
		}
	}
	r = measure(&g);
	if (r == 0) {
		json_t *rep = report_json(&g);

		print_report(&g);
		if (g.opt.json_path)
			r = gs_json_write(g.opt.json_path, rep);
		json_decref(rep);
	} else {
		fprintf(stderr, "maf-sandbox-bench-guestcpu: %s\n",
			r == -EINTR ? "interrupted" : "failed; see above");
	}
	teardown(&g, r < 0);
	gs_engine_cleanup();
	return r < 0 ? 1 : 0;
}
