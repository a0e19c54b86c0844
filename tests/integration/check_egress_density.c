/* check_egress_density.c — 200 allowlisted sandboxes (a network, a proxy and
 * a workload each) acquired at once by 20 clients, each its own connection,
 * with no address-pool failure and a block of its own for each; then all
 * disposed at once, leaving no container and no network of the run. The
 * elapsed times of both phases go to stderr; nothing asserts on them.
 *
 * The proxies' outbound leg is a bridge network main() makes (a /22 picked
 * here); nothing is sent through it. main() removes what carries the run's
 * labels, containers first, whatever failed. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"

#define ENGINE_WAIT_MS 15000   /* hang guard */
#define RUN_LABEL "msb-it-run"
#define RUN_LABEL_KEY "maf-sandbox.label." RUN_LABEL
#define FIXTURE_LABEL "msb-it-egress-fixture"
#define CLIENTS 20
#define PER_CLIENT 10
#define SANDBOXES (CLIENTS * PER_CLIENT)
/* Generous: 600 engine objects on a small machine; still under meson's
 * 900 s, so that main() is left the time to clean up whatever happened. */
#define TEST_TIMEOUT_S 780   /* hang guard */
/* One call; a client whose call timed out reconnects for its next key. */
#define CLIENT_TIMEOUT_MS (180 * 1000)   /* hang guard */
#define PROXY_READY_MS 120000   /* hang guard */
#define POLL_MS 200
#define EXIT_SKIP 77
#define OUT_NET_FMT "10.216.%d"
#define DENSITY_POOL "10.212.0.0/16"
#define OUT_TRIES 16
#define FAILURES_SHOWN 5

static char run_id[32];
static char image[64];
static const char *proxy_binary;
static char out_net[64];

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* One client: its own connection, PER_CLIENT keys, one after another. */
struct client {
	pthread_t thread;
	int index;
	const char *sock;
	pthread_barrier_t *start;
	bool disposing;
	/* Per key: the sandbox's name and proxy address, or the error. */
	char name[PER_CLIENT][64];
	char proxy_address[PER_CLIENT][20];
	char error[PER_CLIENT][256];
};

static json_t *key_json(int client, int j)
{
	char scope[64], thread[16], agent[16];

	snprintf(scope, sizeof(scope), "%s-density", run_id);
	snprintf(thread, sizeof(thread), "t%d", client);
	snprintf(agent, sizeof(agent), "a%d", j);
	return json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", thread, "agent_dir", agent);
}

static json_t *spec_json(void)
{
	/* requires nothing of the guest: what is measured is the topology */
	return json_pack("{s:s, s:s, s:{s:s}, s:s, s:[s], s:[]}", "kind", "k", "image", image, "labels", RUN_LABEL,
			 run_id, "egress", "allowlist", "egress_allow", "allowed.test", "requires");
}

static void record_error(struct client *c, int j, struct msb_conn *conn, int r)
{
	snprintf(c->error[j], sizeof(c->error[j]), "%s: %s",
		 r == MSB_E_REMOTE && msb_last_error_type(conn) ? msb_last_error_type(conn) : msb_strerror(r),
		 r == MSB_E_REMOTE && msb_last_error_message(conn) ? msb_last_error_message(conn) : "");
}

/* Returns msb_call's result. */
static int client_acquire(struct client *c, struct msb_conn *conn, int j)
{
	json_t *r = NULL;
	int rc = msb_call(conn, "sandbox.acquire",
			  json_pack("{s:o, s:o}", "key", key_json(c->index, j), "spec", spec_json()), &r);
	const char *name, *addr;

	if (rc != MSB_OK) {
		record_error(c, j, conn, rc);
		return rc;
	}
	name = json_string_value(json_object_get(r, "name"));
	addr = json_string_value(json_object_get(json_object_get(r, "egress"), "proxy_address"));
	if (!name || !addr)
		snprintf(c->error[j], sizeof(c->error[j]), "the result lacks name or egress.proxy_address");
	else {
		snprintf(c->name[j], sizeof(c->name[j]), "%s", name);
		snprintf(c->proxy_address[j], sizeof(c->proxy_address[j]), "%s", addr);
	}
	json_decref(r);
	return rc;
}

static int client_dispose(struct client *c, struct msb_conn *conn, int j)
{
	json_t *r = NULL;
	int rc = msb_call(conn, "sandbox.dispose", json_pack("{s:o}", "key", key_json(c->index, j)), &r);

	if (rc != MSB_OK)
		record_error(c, j, conn, rc);
	else if (r && !json_is_null(r))
		snprintf(c->error[j], sizeof(c->error[j]), "dispose: %s",
			 json_string_value(json_object_get(r, "detail")) ? json_string_value(json_object_get(r, "detail"))
									 : "a failure");
	json_decref(r);
	return rc;
}

static int client_connect(const struct client *c, struct msb_conn **ret_conn)
{
	int r = msb_connect(c->sock, ret_conn);

	if (r == MSB_OK)
		msb_set_timeout(*ret_conn, CLIENT_TIMEOUT_MS);
	return r;
}

/* No Check assertion in a thread: errors are recorded per key. */
static void *client_run(void *arg)
{
	struct client *c = arg;
	struct msb_conn *conn = NULL;
	int r = client_connect(c, &conn);

	pthread_barrier_wait(c->start);
	for (int j = 0; j < PER_CLIENT; j++) {
		int rc;

		c->error[j][0] = '\0';
		if (r != MSB_OK) {
			snprintf(c->error[j], sizeof(c->error[j]), "connect: %s", msb_strerror(r));
			continue;
		}
		rc = c->disposing ? client_dispose(c, conn, j) : client_acquire(c, conn, j);
		/* These close the connection: the next key gets a new one. */
		if (rc == MSB_E_TIMEOUT || rc == MSB_E_IO || rc == MSB_E_PROTO || rc == MSB_E_CLOSED) {
			conn = msb_conn_free(conn);
			r = client_connect(c, &conn);
		}
	}
	msb_conn_free(conn);
	return NULL;
}

/* Runs every client once; returns the elapsed ms. */
static long run_clients(struct client *cl, const char *sock, bool disposing)
{
	pthread_barrier_t start;
	long t0;

	ck_assert_int_eq(pthread_barrier_init(&start, NULL, CLIENTS + 1), 0);
	for (int i = 0; i < CLIENTS; i++) {
		cl[i].index = i;
		cl[i].sock = sock;
		cl[i].start = &start;
		cl[i].disposing = disposing;
		ck_assert_int_eq(pthread_create(&cl[i].thread, NULL, client_run, &cl[i]), 0);
	}
	pthread_barrier_wait(&start);
	t0 = now_ms();
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(cl[i].thread, NULL);
	pthread_barrier_destroy(&start);
	return now_ms() - t0;
}

static int count_failures(const struct client *cl, const char *phase)
{
	int failures = 0;

	for (int i = 0; i < CLIENTS; i++)
		for (int j = 0; j < PER_CLIENT; j++) {
			if (!cl[i].error[j][0])
				continue;
			if (failures++ < FAILURES_SHOWN)
				fprintf(stderr, "density: %s t%d/a%d: %s\n", phase, i, j, cl[i].error[j]);
		}
	return failures;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Every sandbox has a name and a proxy address of its own. */
static void assert_distinct(const struct client *cl)
{
	static char names[SANDBOXES][64], addrs[SANDBOXES][20];
	int n = 0;

	for (int i = 0; i < CLIENTS; i++)
		for (int j = 0; j < PER_CLIENT; j++, n++) {
			memcpy(names[n], cl[i].name[j], sizeof(names[n]));
			memcpy(addrs[n], cl[i].proxy_address[j], sizeof(addrs[n]));
		}
	qsort(names, SANDBOXES, sizeof(names[0]), cmp_str);
	qsort(addrs, SANDBOXES, sizeof(addrs[0]), cmp_str);
	for (int k = 1; k < SANDBOXES; k++) {
		ck_assert_msg(strcmp(names[k - 1], names[k]), "two keys got the sandbox %s", names[k]);
		ck_assert_msg(strcmp(addrs[k - 1], addrs[k]), "two sandboxes share the proxy address %s", addrs[k]);
	}
}

static void daemon_up(struct msbd_proc *d)
{
	char bin[300], out[128], state[160], dir[128];
	const char *base = getenv("MSB_IT_RUN_DIR");
	long deadline;
	json_t *r = NULL;

	snprintf(dir, sizeof(dir), "%s/egress-state-XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(bin, sizeof(bin), "egress.proxy_binary=%s", proxy_binary);
	snprintf(out, sizeof(out), "egress.outbound_network=%s", out_net);
	snprintf(state, sizeof(state), "egress.state_dir=%s", dir);
	/* A pool of its own: suite 'egress' runs beside this one on the default. */
	msbd_start(d, (const char *[]){ "--set", bin, "--set", out, "--set", state,
				       "--set", "egress.subnet_pool=" DENSITY_POOL, NULL });
	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
	for (int i = 0; i < 200 && !r; i++) {
		r = call(d->sock, "sandbox.list", NULL, NULL, NULL);
		if (!r)
			usleep(50 * 1000);
	}
	ck_assert_msg(r, "the registry never synchronised");
	json_decref(r);
	deadline = now_ms() + PROXY_READY_MS;
	for (;;) {
		r = call(d->sock, "daemon.describe", NULL, NULL, NULL);
		if (json_is_true(json_object_get(r, "observes_egress")))
			break;
		json_decref(r);
		ck_assert_msg(now_ms() < deadline, "the proxy image was never ready");
		usleep(POLL_MS * 1000);
	}
	json_decref(r);
}

START_TEST(two_hundred_allowlisted_sandboxes_at_once)
{
	static struct client cl[CLIENTS];
	struct msbd_proc d = { 0 };
	long acquire_ms, dispose_ms;
	int failures;

	daemon_up(&d);
	acquire_ms = run_clients(cl, d.sock, false);
	fprintf(stderr, "density: %d allowlisted acquires by %d clients: %ld ms\n", SANDBOXES, CLIENTS, acquire_ms);
	failures = count_failures(cl, "acquire");
	if (failures)
		msbd_dump_log(&d);
	ck_assert_msg(failures == 0, "%d of %d acquires failed", failures, SANDBOXES);
	assert_distinct(cl);
	ck_assert_int_eq(engine_count_containers(RUN_LABEL_KEY, run_id, "--filter label=maf-sandbox.role=proxy"),
			 SANDBOXES);
	ck_assert_int_eq(engine_count_containers(RUN_LABEL_KEY, run_id, NULL), 2 * SANDBOXES);
	ck_assert_int_eq(engine_count_networks(RUN_LABEL_KEY, run_id, NULL), SANDBOXES);

	dispose_ms = run_clients(cl, d.sock, true);
	fprintf(stderr, "density: %d disposals by %d clients: %ld ms\n", SANDBOXES, CLIENTS, dispose_ms);
	failures = count_failures(cl, "dispose");
	ck_assert_msg(failures == 0, "%d of %d disposals failed", failures, SANDBOXES);
	ck_assert_int_eq(engine_count_containers(RUN_LABEL_KEY, run_id, NULL), 0);
	ck_assert_int_eq(engine_count_networks(RUN_LABEL_KEY, run_id, NULL), 0);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

static Suite *density_suite(void)
{
	Suite *s = suite_create("egress_density");
	TCase *tc = tcase_create("density");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, two_hundred_allowlisted_sandboxes_at_once);
	suite_add_tcase(s, tc);
	return s;
}

/* The proxies' outbound leg: 10.216.R.0/22, R picked from the pid. */
static bool out_net_create(void)
{
	snprintf(out_net, sizeof(out_net), "msb-it-density-out-%s", run_id);
	for (int i = 0; i < OUT_TRIES; i++) {
		int r = (int)(((getpid() + i * 7) % 63) + 1) * 4;
		char *out = sh_out("docker network create --subnet " OUT_NET_FMT ".0/22 --label %s=%s '%s' 2>&1 && echo ok",
				   r, FIXTURE_LABEL, run_id, out_net);
		bool ok = harness_last_line_is(out, "ok");

		if (!ok)
			fprintf(stderr, "density: " OUT_NET_FMT ".0/22: %s\n", r, out);
		free(out);
		if (ok)
			return true;
	}
	return false;
}

int main(void)
{
	struct stat st;
	SRunner *sr;
	char *out;
	int failed = 1;

	proxy_binary = getenv("MSB_PROXY");
	if (!proxy_binary || !*proxy_binary) {
		fprintf(stderr, "MSB_PROXY is not set (no egress proxy built): skipped\n");
		return EXIT_SKIP;
	}
	if (stat(proxy_binary, &st) < 0) {
		fprintf(stderr, "MSB_PROXY %s: %s\n", proxy_binary, strerror(errno));
		return EXIT_FAILURE;
	}
	snprintf(run_id, sizeof(run_id), "itd%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-busybox:%s", run_id);
	if (!harness_test_image(image))
		return EXIT_FAILURE;
	harness_run_dir_create();
	if (out_net_create()) {
		sr = srunner_create(density_suite());
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
	}
	harness_run_dir_remove();
	/* Whatever failed: nothing of this run stays (containers before networks). */
	engine_purge_label(RUN_LABEL_KEY, run_id);
	engine_purge_label(FIXTURE_LABEL, run_id);
	out = sh_out("docker rmi -f %s >/dev/null 2>&1; echo done", image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
