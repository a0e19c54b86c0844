/* stats.c — percentiles, the two tables and the JSON report.
 *
 * Percentiles are nearest-rank over every sample of a batch (all clients
 * together). ops/s is the batch's samples over its wall time, from the
 * moment every client was released to the moment the last one finished.
 * The goals compare medians: daemon <= 1.1 x floor + 1 ms, and seed/daemon
 * at least the op's own factor. */
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
					   enum bench_impl impl)
{
	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];

		if (r->op == op && r->level == level && r->impl == impl)
			return r;
	}
	return NULL;
}

/* A usable median: some samples, not all of them failures. */
static bool row_usable(const struct bench_result *r)
{
	return r && r->n > 0 && r->errors + r->hangs < r->n && !isnan(r->p50);
}

struct ratio {
	bool have_floor, have_seed;
	double daemon_over_floor;
	double seed_over_daemon;
	bool floor_met, seed_met;
	double seed_goal;
};

static struct ratio ratio_of(const struct bench *b, enum bench_op op, unsigned level)
{
	const struct bench_result *d = find_row(b, op, level, IMPL_DAEMON);
	const struct bench_result *f = find_row(b, op, level, IMPL_FLOOR);
	const struct bench_result *s = find_row(b, op, level, IMPL_SEED);
	struct ratio r = { .seed_goal = op_info(op)->seed_goal };

	if (row_usable(d) && row_usable(f) && f->p50 > 0) {
		r.have_floor = true;
		r.daemon_over_floor = d->p50 / f->p50;
		r.floor_met = d->p50 <= FLOOR_GOAL_FACTOR * f->p50 + FLOOR_GOAL_SLACK_MS &&
			      d->errors == 0 && d->hangs == 0;
	}
	if (row_usable(d) && row_usable(s) && d->p50 > 0) {
		r.have_seed = true;
		r.seed_over_daemon = s->p50 / d->p50;
		r.seed_met = r.seed_goal <= 0 || r.seed_over_daemon >= r.seed_goal;
	}
	return r;
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
	fprintf(out, "%-13s %5s %-6s %6s %10s %10s %10s %9s %8s %6s %5s\n", "op", "level", "way", "n",
		"p50 ms", "p95 ms", "p99 ms", "ops/s", "req/op", "errors", "hangs");
	for (size_t i = 0; i < b->n_results; i++) {
		const struct bench_result *r = &b->results[i];
		char p50[24], p95[24], p99[24], ops[24], req[24];

		fmt_num(p50, sizeof(p50), r->p50, 2);
		fmt_num(p95, sizeof(p95), r->p95, 2);
		fmt_num(p99, sizeof(p99), r->p99, 2);
		fmt_num(ops, sizeof(ops), r->ops_per_s, 1);
		fmt_num(req, sizeof(req), r->requests_per_op < 0 ? NAN : r->requests_per_op, 1);
		fprintf(out, "%-13s %5u %-6s %6zu %10s %10s %10s %9s %8s %6u %5u\n", op_info(r->op)->name,
			r->level, impl_to_string(r->impl), r->n, p50, p95, p99, ops, req, r->errors, r->hangs);
	}
}

static void print_ratios(const struct bench *b, FILE *out)
{
	fprintf(out, "%-13s %5s %12s %-8s %12s %6s %-8s\n", "op", "level", "daemon/floor", "<=1.1x+1",
		"seed/daemon", "goal", "met");
	for (unsigned l = 0; l < b->n_levels; l++)
		for (int op = 0; op < _OP_MAX; op++) {
			struct ratio r;
			char df[24], sd[24], goal[24];

			if (!b->ops[op] || !find_row(b, op, b->levels[l], IMPL_DAEMON))
				continue;
			r = ratio_of(b, op, b->levels[l]);
			fmt_num(df, sizeof(df), r.have_floor ? r.daemon_over_floor : NAN, 2);
			fmt_num(sd, sizeof(sd), r.have_seed ? r.seed_over_daemon : NAN, 1);
			if (r.seed_goal > 0)
				snprintf(goal, sizeof(goal), ">=%g", r.seed_goal);
			else
				snprintf(goal, sizeof(goal), "-");
			fprintf(out, "%-13s %5u %12s %-8s %12s %6s %-8s\n", op_info(op)->name, b->levels[l], df,
				r.have_floor ? (r.floor_met ? "yes" : "NO") : "-", sd, goal,
				!r.have_seed || r.seed_goal <= 0 ? "-" : r.seed_met ? "yes" : "NO");
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
		fprintf(out, "  %s level %u %s: %u error(s), %u hang(s): %s\n", op_info(r->op)->name, r->level,
			impl_to_string(r->impl), r->errors, r->hangs, r->error[0] ? r->error : "?");
	}
}

void stats_print_tables(const struct bench *b, FILE *out)
{
	const struct bench_machine *m = &b->machine;

	fprintf(out, "\nMachine: kernel %s, %ld CPU(s), MemTotal %llu kB, Docker %s (API %s), docker CLI %s\n",
		m->kernel, m->nproc, m->mem_total_kib, m->engine_version[0] ? m->engine_version : "?",
		m->engine_api[0] ? m->engine_api : "?", m->docker_cli[0] ? m->docker_cli : "?");
	fprintf(out, "Load average: %s at the start, %s at the end\n", m->load_start, m->load_end);
	fprintf(out, "Run: N=%u, image %s; req/op: engine requests (daemon: its call_requests counter, "
		"level 1 only; floor: sent), CLI processes (seed)\n\n", b->n, b->image_ref);
	print_results(b, out);
	fprintf(out, "\nRatios of medians (daemon <= 1.1 x floor + 1 ms; seed/daemon at least the goal):\n");
	print_ratios(b, out);
	print_failures(b, out);
	fprintf(out, "\nTotal: %u error(s), %u hang(s); maf-sandboxd exited with status %d\n",
		stats_total_errors(b), stats_total_hangs(b), b->daemon_status);
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

		json_array_append_new(a, json_pack("{s:s, s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:s?}",
			"op", op_info(r->op)->name, "level", (json_int_t)r->level, "impl", impl_to_string(r->impl),
			"n", (json_int_t)r->n, "p50_ms", json_num(r->p50), "p95_ms", json_num(r->p95),
			"p99_ms", json_num(r->p99), "ops_per_s", json_num(r->ops_per_s),
			"requests_per_op", json_num(r->requests_per_op < 0 ? NAN : r->requests_per_op),
			"errors", (json_int_t)r->errors, "hangs", (json_int_t)r->hangs,
			"first_error", r->error[0] ? r->error : NULL));
	}
	return a;
}

static json_t *json_ratios(const struct bench *b)
{
	json_t *a = json_array();

	for (unsigned l = 0; l < b->n_levels; l++)
		for (int op = 0; op < _OP_MAX; op++) {
			struct ratio r;

			if (!b->ops[op] || !find_row(b, op, b->levels[l], IMPL_DAEMON))
				continue;
			r = ratio_of(b, op, b->levels[l]);
			json_array_append_new(a, json_pack("{s:s, s:I, s:o, s:o, s:o, s:o, s:o}",
				"op", op_info(op)->name, "level", (json_int_t)b->levels[l],
				"daemon_over_floor", r.have_floor ? json_real(r.daemon_over_floor) : json_null(),
				"floor_goal_met", r.have_floor ? json_boolean(r.floor_met) : json_null(),
				"seed_over_daemon", r.have_seed ? json_real(r.seed_over_daemon) : json_null(),
				"seed_goal", r.seed_goal > 0 ? json_real(r.seed_goal) : json_null(),
				"seed_goal_met", r.have_seed && r.seed_goal > 0 ? json_boolean(r.seed_met) : json_null()));
		}
	return a;
}

int stats_write_json(const struct bench *b, const char *path)
{
	const struct bench_machine *m = &b->machine;
	json_t *levels = json_array();
	json_auto_t *doc = NULL;

	for (unsigned l = 0; l < b->n_levels; l++)
		json_array_append_new(levels, json_integer(b->levels[l]));
	doc = json_pack("{s:{s:s, s:I, s:I, s:s, s:s, s:s, s:s, s:s}, s:{s:I, s:o, s:s, s:b}, s:o, s:o, s:I, s:I, s:I}",
		"machine", "kernel", m->kernel, "nproc", (json_int_t)m->nproc,
		"mem_total_kib", (json_int_t)m->mem_total_kib, "engine_version", m->engine_version,
		"engine_api_version", m->engine_api, "docker_cli", m->docker_cli,
		"loadavg_start", m->load_start, "loadavg_end", m->load_end,
		"config", "n", (json_int_t)b->n, "levels", levels, "image", b->image_ref, "quick", b->quick,
		"results", json_results(b), "ratios", json_ratios(b),
		"errors", (json_int_t)stats_total_errors(b), "hangs", (json_int_t)stats_total_hangs(b),
		"daemon_exit_status", (json_int_t)b->daemon_status);
	if (!doc)
		return -1;
	return json_dump_file(doc, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 ? 0 : -1;
}
