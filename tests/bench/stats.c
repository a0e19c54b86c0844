/* stats.c — percentiles, the tables and the JSON report.
 *
 * Percentiles are nearest-rank over every sample of a batch (all clients
 * together, every round of the way). ops/s is those samples over the sum of
 * the rounds' wall times, each from its first call's start to its last
 * call's end.
 * The goals compare medians: daemon <= 1.1 x floor + 1 ms, plane by plane
 * (each plane's floor is that plane's work: its request sequence, and on
 * the local plane the daemon's plane code), seed/daemon at least the op's
 * own factor on each plane, and seed/local at least the op's local goal.
 * They are reported, never held; --check holds wider bounds (op_info
 * check_factor) at one client. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cleanup.h"

#define FLOOR_GOAL_FACTOR 1.1
#define FLOOR_GOAL_SLACK_MS 1.0

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least p% of them at or below it. */
static double percentile(const double *sorted, size_t n, double p)
{
	size_t rank;

	if (n == 0)
		return NAN;
	rank = (size_t)ceil(p / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	return sorted[rank - 1];
}

void stats_row(struct bench_result *row, double *lat_ms, size_t n, double wall_ms)
{
	qsort(lat_ms, n, sizeof(*lat_ms), cmp_double);
	row->n = n;
	row->p50 = percentile(lat_ms, n, 50);
	row->p95 = percentile(lat_ms, n, 95);
	row->p99 = percentile(lat_ms, n, 99);
	row->ops_per_s = wall_ms > 0 && n ? (double)n * 1000.0 / wall_ms : NAN;
}

static const struct bench_result *find_row(const struct bench *b, enum bench_op op, unsigned level,
					   enum bench_impl impl, enum bench_plane plane)
{
	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];

		if (r->op == op && r->level == level && r->impl == impl && r->plane == plane)
			return r;
	}
	return NULL;
}

/* A usable median: some samples, not all of them failures. */
static bool row_usable(const struct bench_result *r)
{
	return r && r->n > 0 && r->errors + r->hangs < r->n && !isnan(r->p50);
}

/* Was the op run through the daemon at this level (on any plane)? */
static bool op_ran(const struct bench *b, enum bench_op op, unsigned level)
{
	for (int p = 0; p < _PLANE_MAX; p++)
		if (find_row(b, op, level, IMPL_DAEMON, (enum bench_plane)p))
			return true;
	return false;
}

/* The ratios of one op at one level; NAN where a side is missing. */
struct ratio {
	double daemon_over_floor[_PLANE_MAX];   /* each plane's daemon over that plane's floor */
	bool floor_met[_PLANE_MAX];
	double seed_over[_PLANE_MAX];   /* seed / the daemon of each plane */
	double archive_over_local;
	double seed_goal;               /* 0: none */
	bool seed_met[_PLANE_MAX];
	double local_goal;              /* 0: none */
	bool local_met;
};

static double over(const struct bench_result *a, const struct bench_result *b)
{
	return row_usable(a) && row_usable(b) && b->p50 > 0 ? a->p50 / b->p50 : NAN;
}

static struct ratio ratio_of(const struct bench *b, enum bench_op op, unsigned level)
{
	const struct bench_result *s = find_row(b, op, level, IMPL_SEED, PLANE_NONE);
	const struct bench_result *pl[_PLANE_MAX];
	struct ratio r = { .seed_goal = op_info(op)->seed_goal, .local_goal = op_info(op)->local_goal };

	for (int p = 0; p < _PLANE_MAX; p++) {
		const struct bench_result *f = find_row(b, op, level, IMPL_FLOOR, (enum bench_plane)p);

		pl[p] = find_row(b, op, level, IMPL_DAEMON, (enum bench_plane)p);
		r.seed_over[p] = over(s, pl[p]);
		r.seed_met[p] = !isnan(r.seed_over[p]) && r.seed_over[p] >= r.seed_goal;
		r.daemon_over_floor[p] = over(pl[p], f);
		r.floor_met[p] = !isnan(r.daemon_over_floor[p]) &&
				 pl[p]->p50 <= FLOOR_GOAL_FACTOR * f->p50 + FLOOR_GOAL_SLACK_MS &&
				 pl[p]->errors == 0 && pl[p]->hangs == 0;
	}
	r.archive_over_local = over(pl[PLANE_ARCHIVE], pl[PLANE_LOCAL]);
	r.local_met = !isnan(r.seed_over[PLANE_LOCAL]) && r.seed_over[PLANE_LOCAL] >= r.local_goal &&
		      pl[PLANE_LOCAL]->errors == 0 && pl[PLANE_LOCAL]->hangs == 0;
	return r;
}

unsigned stats_check_failures(const struct bench *b)
{
	unsigned n = 0;

	for (int op = 0; op < _OP_MAX; op++) {
		double k = op_info((enum bench_op)op)->check_factor;

		if (k <= 0)
			continue;
		for (int p = 0; p < _PLANE_MAX; p++) {
			const struct bench_result *d = find_row(b, (enum bench_op)op, 1, IMPL_DAEMON, (enum bench_plane)p);
			const struct bench_result *f = find_row(b, (enum bench_op)op, 1, IMPL_FLOOR, (enum bench_plane)p);

			if (d && f && !isnan(d->p50_check) && !isnan(f->p50_check) &&
			    d->p50_check > k * f->p50_check + BENCH_CHECK_SLACK_MS)
				n++;
		}
	}
	return n;
}

static void print_checks(const struct bench *b, FILE *out)
{
	fprintf(out, "\nChecked ratios (--check%s; one client: daemon <= %g x floor + %g ms, each plane; medians "
		"over the rounds that made no more engine requests than the floor's sequence: a retry round is left "
		"out):\n", b->check ? "" : b->check_dropped ? " dropped under MSB_TEST_SLOW: reported only" :
		" not given: reported only", (double)BENCH_CHECK_FACTOR, BENCH_CHECK_SLACK_MS);
	for (int op = 0; op < _OP_MAX; op++) {
		double k = op_info((enum bench_op)op)->check_factor;

		if (k <= 0 || !b->ops[op])
			continue;
		for (int p = 0; p < _PLANE_MAX; p++) {
			const struct bench_result *d = find_row(b, (enum bench_op)op, 1, IMPL_DAEMON, (enum bench_plane)p);
			const struct bench_result *f = find_row(b, (enum bench_op)op, 1, IMPL_FLOOR, (enum bench_plane)p);
			char retries[80];

			if (!d || !f || isnan(d->p50_check) || isnan(f->p50_check))
				continue;
			retries[0] = '\0';
			if (d->retry_rounds + f->retry_rounds)
				snprintf(retries, sizeof(retries), "  (retry rounds left out: daemon %u, floor %u)",
					 d->retry_rounds, f->retry_rounds);
			fprintf(out, "  %-13s %-7s daemon %9.3f ms (%zu) floor %9.3f ms (%zu)  bound %9.3f ms  %s%s\n",
				op_info((enum bench_op)op)->name, plane_to_string((enum bench_plane)p), d->p50_check,
				d->n_check, f->p50_check, f->n_check, k * f->p50_check + BENCH_CHECK_SLACK_MS,
				d->p50_check <= k * f->p50_check + BENCH_CHECK_SLACK_MS ? "held" : "FAILED", retries);
		}
	}
}

static void fmt_num(char *buf, size_t n, double v, int prec)
{
	if (isnan(v))
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%.*f", prec, v);
}

static void print_results(const struct bench *b, FILE *out)
{
	fprintf(out, "%-13s %5s %-6s %-7s %6s %10s %10s %10s %9s %8s %7s %6s %5s\n", "op", "level", "way", "plane",
		"n", "p50 ms", "p95 ms", "p99 ms", "ops/s", "req/op", "req min", "errors", "hangs");
	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];
		char p50[24], p95[24], p99[24], ops[24], req[24], rmin[24];

		fmt_num(p50, sizeof(p50), r->p50, 2);
		fmt_num(p95, sizeof(p95), r->p95, 2);
		fmt_num(p99, sizeof(p99), r->p99, 2);
		fmt_num(ops, sizeof(ops), r->ops_per_s, 1);
		fmt_num(req, sizeof(req), r->requests_per_op < 0 ? NAN : r->requests_per_op, 1);
		fmt_num(rmin, sizeof(rmin), r->requests_min < 0 ? NAN : r->requests_min, 0);
		if (r->requests_match == 0)
			snprintf(rmin + strlen(rmin), sizeof(rmin) - strlen(rmin), "!");
		fprintf(out, "%-13s %5u %-6s %-7s %6zu %10s %10s %10s %9s %8s %7s %6u %5u\n", op_info(r->op)->name,
			r->level, impl_to_string(r->impl), plane_to_string(r->plane), r->n, p50, p95, p99, ops, req,
			rmin, r->errors, r->hangs);
	}
}

/* yes / NO, or - when there is no goal or nothing to compare. */
static const char *met_word(double goal, double ratio, bool met)
{
	return goal <= 0 || isnan(ratio) ? "-" : met ? "yes" : "NO";
}

static void print_ratio_row(const struct bench *b, FILE *out, enum bench_op op, unsigned level)
{
	struct ratio r = ratio_of(b, op, level);
	char dl[24], da[24], sa[24], sl[24], al[24], goal[24];

	fmt_num(dl, sizeof(dl), r.daemon_over_floor[PLANE_LOCAL], 2);
	fmt_num(da, sizeof(da), r.daemon_over_floor[PLANE_ARCHIVE], 2);
	fmt_num(sa, sizeof(sa), r.seed_over[PLANE_ARCHIVE], 1);
	fmt_num(sl, sizeof(sl), r.seed_over[PLANE_LOCAL], 1);
	fmt_num(al, sizeof(al), r.archive_over_local, 1);
	if (r.seed_goal > 0)
		snprintf(goal, sizeof(goal), ">=%g", r.seed_goal);
	else
		snprintf(goal, sizeof(goal), "-");
	fprintf(out, "%-13s %5u %10s %-4s %12s %-4s %10s %12s %13s %6s %-5s %-7s\n", op_info(op)->name, level, dl,
		isnan(r.daemon_over_floor[PLANE_LOCAL]) ? "-" : r.floor_met[PLANE_LOCAL] ? "yes" : "NO", da,
		isnan(r.daemon_over_floor[PLANE_ARCHIVE]) ? "-" : r.floor_met[PLANE_ARCHIVE] ? "yes" : "NO", sl, sa, al,
		goal, met_word(r.seed_goal, r.seed_over[PLANE_LOCAL], r.seed_met[PLANE_LOCAL]),
		met_word(r.seed_goal, r.seed_over[PLANE_ARCHIVE], r.seed_met[PLANE_ARCHIVE]));
}

static void print_ratios(const struct bench *b, FILE *out)
{
	fprintf(out, "%-13s %5s %10s %-4s %12s %-4s %10s %12s %13s %6s %-5s %-7s\n", "op", "level", "d/f local",
		"goal", "d/f archive", "goal", "seed/local", "seed/archive", "archive/local", "goal", "local", "archive");
	for (unsigned l = 0; l < b->n_levels; l++)
		for (int op = 0; op < _OP_MAX; op++)
			if (b->ops[op] && op_ran(b, (enum bench_op)op, b->levels[l]))
				print_ratio_row(b, out, (enum bench_op)op, b->levels[l]);
}

/* The local plane's own goal, one marker per op and level: "goal met" or
 * "goal missed" (also when the op failed on that plane or was not run). */
static void print_local_goals(const struct bench *b, FILE *out)
{
	if (!b->planes[PLANE_LOCAL] || !b->impls[IMPL_SEED])
		return;
	fprintf(out, "\nThe local plane against the seed's way (seed/local at least the goal):\n");
	for (unsigned l = 0; l < b->n_levels; l++)
		for (int op = 0; op < _OP_MAX; op++) {
			struct ratio r;
			char sl[24];

			if (!b->ops[op] || op_info((enum bench_op)op)->local_goal <= 0)
				continue;
			r = ratio_of(b, (enum bench_op)op, b->levels[l]);
			fmt_num(sl, sizeof(sl), r.seed_over[PLANE_LOCAL], 1);
			fprintf(out, "  %-13s L=%-3u seed/local %8s  (>= %g)  goal %s\n", op_info((enum bench_op)op)->name,
				b->levels[l], sl, r.local_goal, r.local_met ? "met" : "missed");
		}
}

static void print_failures(const struct bench *b, FILE *out)
{
	bool any = false;

	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];

		if (!r->errors && !r->hangs)
			continue;
		if (!any)
			fprintf(out, "\nFailures (the first of each row):\n");
		any = true;
		fprintf(out, "  %s level %u %s%s%s: %u error(s), %u hang(s): %s\n", op_info(r->op)->name, r->level,
			impl_to_string(r->impl), r->plane != PLANE_NONE ? " " : "",
			r->plane != PLANE_NONE ? plane_to_string(r->plane) : "", r->errors, r->hangs,
			r->error[0] ? r->error : "?");
	}
}

void stats_print_tables(const struct bench *b, FILE *out)
{
	const struct bench_machine *m = &b->machine;

	fprintf(out, "\nMachine: kernel %s, %ld CPU(s), MemTotal %llu kB, Docker %s (API %s), docker CLI %s\n",
		m->kernel, m->nproc, m->mem_total_kib, m->engine_version[0] ? m->engine_version : "?",
		m->engine_api[0] ? m->engine_api : "?", m->docker_cli[0] ? m->docker_cli : "?");
	fprintf(out, "Load average: %s at the start, %s at the end\n", m->load_start, m->load_end);
	fprintf(out, "Run: N=%u, image %s, the ways interleaved (order shuffled each iteration, seed %llu); req/op: engine requests "
		"(daemon: its engine.call_requests; floor: sent, retries included), CLI processes (seed); req min: "
		"at one client, the least per op over the rounds (the floor's without its retries), '!' where the "
		"daemon's is not its floor's\n", b->n, b->image_ref, (unsigned long long)b->order_seed);
	fprintf(out, "Daemons: one per file plane (%s=...):", BENCH_PLANE_KEY);
	for (int p = 0; p < _PLANE_MAX; p++)
		if (b->planes[p])
			fprintf(out, " %s%s", plane_to_string((enum bench_plane)p), p == (int)b->main_plane ? " (main)" : "");
	fprintf(out, "; every op through each, and through each plane's floor\n\n");
	print_results(b, out);
	fprintf(out, "\nRatios of medians (goals: daemon <= 1.1 x floor + 1 ms on each plane; "
		"seed/daemon at least the goal, on each plane):\n");
	print_ratios(b, out);
	print_local_goals(b, out);
	print_checks(b, out);
	print_failures(b, out);
	fprintf(out, "\nTotal: %u error(s), %u hang(s), %u setup error(s) (outside the timed rounds), %u op(s) or "
		"round(s) whose daemon's engine requests are not (or could not be compared with) the floor's, "
		"%u checked ratio(s) over their bound%s; maf-sandboxd exited with status %d\n",
		stats_total_errors(b), stats_total_hangs(b), b->setup_errors, b->request_mismatches,
		stats_check_failures(b), b->check ? "" : " (not held: no --check)", b->daemon_status);
}

unsigned stats_total_errors(const struct bench *b)
{
	unsigned n = 0;

	for (size_t i = 0; i < b->n_results; i++)
		n += b->results[i].errors;
	return n;
}

unsigned stats_total_hangs(const struct bench *b)
{
	unsigned n = 0;

	for (size_t i = 0; i < b->n_results; i++)
		n += b->results[i].hangs;
	return n;
}

/* A number, or null when there is none. */
static json_t *json_num(double v)
{
	return isnan(v) || isinf(v) ? json_null() : json_real(v);
}

static json_t *json_results(const struct bench *b)
{
	json_t *a = json_array();

	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];

		json_array_append_new(a, json_pack("{s:s, s:I, s:s, s:s?, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:s?, s:o, s:I, s:I}",
			"op", op_info(r->op)->name, "level", (json_int_t)r->level, "impl", impl_to_string(r->impl),
			"plane", r->plane != PLANE_NONE ? plane_to_string(r->plane) : NULL,
			"n", (json_int_t)r->n, "p50_ms", json_num(r->p50), "p95_ms", json_num(r->p95),
			"p99_ms", json_num(r->p99), "ops_per_s", json_num(r->ops_per_s),
			"requests_per_op", json_num(r->requests_per_op < 0 ? NAN : r->requests_per_op),
			"requests_min", json_num(r->requests_min < 0 ? NAN : r->requests_min),
			"requests_match", r->requests_match < 0 ? json_null() : json_boolean(r->requests_match),
			"errors", (json_int_t)r->errors, "hangs", (json_int_t)r->hangs,
			"first_error", r->error[0] ? r->error : NULL, "p50_check_ms", json_num(r->p50_check),
			"n_check", (json_int_t)r->n_check, "retry_rounds", (json_int_t)r->retry_rounds));
	}
	return a;
}

/* A ratio's goal verdict: null when there is no goal or nothing to compare. */
static json_t *json_met(double goal, double ratio, bool met)
{
	return goal <= 0 || isnan(ratio) ? json_null() : json_boolean(met);
}

static json_t *json_ratio(const struct bench *b, enum bench_op op, unsigned level)
{
	struct ratio r = ratio_of(b, op, level);

	return json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
		"op", op_info(op)->name, "level", (json_int_t)level,
		"daemon_over_floor_local", json_num(r.daemon_over_floor[PLANE_LOCAL]),
		"daemon_over_floor_archive", json_num(r.daemon_over_floor[PLANE_ARCHIVE]),
		"floor_goal_met_local", isnan(r.daemon_over_floor[PLANE_LOCAL]) ? json_null() : json_boolean(r.floor_met[PLANE_LOCAL]),
		"floor_goal_met_archive", isnan(r.daemon_over_floor[PLANE_ARCHIVE]) ? json_null() : json_boolean(r.floor_met[PLANE_ARCHIVE]),
		"seed_over_archive", json_num(r.seed_over[PLANE_ARCHIVE]),
		"seed_over_local", json_num(r.seed_over[PLANE_LOCAL]),
		"archive_over_local", json_num(r.archive_over_local),
		"seed_goal", r.seed_goal > 0 ? json_real(r.seed_goal) : json_null(),
		"seed_goal_met_archive", json_met(r.seed_goal, r.seed_over[PLANE_ARCHIVE], r.seed_met[PLANE_ARCHIVE]),
		"seed_goal_met_local", json_met(r.seed_goal, r.seed_over[PLANE_LOCAL], r.seed_met[PLANE_LOCAL]),
		"local_goal", r.local_goal > 0 ? json_real(r.local_goal) : json_null(),
		"local_goal_met", r.local_goal > 0 && b->planes[PLANE_LOCAL] ? json_boolean(r.local_met) : json_null());
}

static json_t *json_ratios(const struct bench *b)
{
	json_t *a = json_array();

	for (unsigned l = 0; l < b->n_levels; l++)
		for (int op = 0; op < _OP_MAX; op++)
			if (b->ops[op] && op_ran(b, (enum bench_op)op, b->levels[l]))
				json_array_append_new(a, json_ratio(b, (enum bench_op)op, b->levels[l]));
	return a;
}

/* {"planes": [...], "main_plane", "daemons": {plane: {exit_status, file_plane_reason?}}} members. */
static json_t *json_planes(const struct bench *b)
{
	json_t *planes = json_array(), *daemons = json_object();

	for (int p = 0; p < _PLANE_MAX; p++) {
		const struct bench_daemon *d = &b->daemons[p];

		if (!b->planes[p])
			continue;
		json_array_append_new(planes, json_string(plane_to_string(d->plane)));
		json_object_set_new(daemons, plane_to_string(d->plane),
				    json_pack("{s:I, s:s?}", "exit_status", (json_int_t)d->status, "file_plane_reason",
					      d->reason[0] ? d->reason : NULL));
	}
	return json_pack("{s:o, s:s, s:o}", "planes", planes, "main_plane", plane_to_string(b->main_plane),
			 "daemons", daemons);
}

int stats_write_json(const struct bench *b, const char *path)
{
	const struct bench_machine *m = &b->machine;
	json_t *levels = json_array();
	json_auto_t *doc = NULL;
	char seed[24];

	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)b->order_seed);
	for (unsigned l = 0; l < b->n_levels; l++)
		json_array_append_new(levels, json_integer(b->levels[l]));
	doc = json_pack("{s:{s:s, s:I, s:I, s:s, s:s, s:s, s:s, s:s}, s:{s:I, s:o, s:s, s:b, s:b}, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:s, s:I, s:I}",
		"machine", "kernel", m->kernel, "nproc", (json_int_t)m->nproc,
		"mem_total_kib", (json_int_t)m->mem_total_kib, "engine_version", m->engine_version,
		"engine_api_version", m->engine_api, "docker_cli", m->docker_cli,
		"loadavg_start", m->load_start, "loadavg_end", m->load_end,
		"config", "n", (json_int_t)b->n, "levels", levels, "image", b->image_ref, "quick", b->quick, "check", b->check,
		"file_planes", json_planes(b), "results", json_results(b), "ratios", json_ratios(b),
		"errors", (json_int_t)stats_total_errors(b), "hangs", (json_int_t)stats_total_hangs(b),
		"request_mismatches", (json_int_t)b->request_mismatches,
		"setup_errors", (json_int_t)b->setup_errors, "order_seed", seed,
		"check_failures", (json_int_t)stats_check_failures(b),
		"daemon_exit_status", (json_int_t)b->daemon_status);
	if (!doc)
		return -1;
	return json_dump_file(doc, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 ? 0 : -1;
}
