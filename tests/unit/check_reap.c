/* check_reap.c — the age-based sweep (reap.h, behaviour-docker §2.13): the
 * pure core (creation times, the cutoff, what counts as ours, grouping and
 * anchors) table by table, then the driver against the fake engine: the
 * requests it makes and their order, revalidation, "unlisted" aborts with
 * no removal, blocked groups, failures one by one, counts, cancellation. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cleanup.h"
#include "daemon.h"
#include "docker.h"
#include "endpoint.h"
#include "engine.h"
#include "fake_engine.h"
#include "loop.h"
#include "names.h"
#include "reap.h"
#include "registry.h"
#include "xmalloc.h"

#define RUN_MAX_MS     2000   /* hang guard: the longest a wait for a callback lasts (stretched) */
#define SETTLE_MS      30
#define TRACE_MAX      1024
#define SCRIPT_MAX     32

/* 2026-09-08T12:00:00Z, and a day. */
#define NOW            1788868800.0
#define NOW_S          1788868800LL
#define DAY_S          86400LL
#define NS             1000000000LL

/* ---- fixtures' vocabulary -------------------------------------------------- */

/* A full ID of one repeated hex digit: ID("a") = 64 × 'a'. */
#define ID16(c)        c c c c c c c c c c c c c c c c
#define ID(c)          ID16(c) ID16(c) ID16(c) ID16(c)
#define NAME1          "maf-sandbox-docker-111111111111"
#define NAME2          "maf-sandbox-docker-222222222222"

#define OLD            "2026-09-06T12:00:00Z"          /* two days before NOW */
#define YOUNG          "2026-09-08T11:00:00Z"          /* an hour before NOW */

#define LABELS_OF(scope) \
	"\"maf-sandbox.scope\":\"" scope "\",\"maf-sandbox.thread\":\"thread\"," \
	"\"maf-sandbox.agent\":\"agent\",\"maf-sandbox.kind\":\"test\""
#define LABELS         "{" LABELS_OF("scope-a") "}"
#define PROXY_LABELS   "{" LABELS_OF("scope-a") ",\"maf-sandbox.role\":\"proxy\"}"

/* Inspect documents: containers carry Config.Labels and a '/' name,
 * networks Labels and a bare name. */
#define C_DOC(id, name, created, labels) \
	"{\"Id\":\"" id "\",\"Name\":\"/" name "\",\"Created\":\"" created "\"," \
	"\"Config\":{\"Labels\":" labels "}}"
#define N_DOC(id, name, created, labels) \
	"{\"Id\":\"" id "\",\"Name\":\"" name "\",\"Created\":\"" created "\",\"Labels\":" labels "}"
#define WORKLOAD(id, name, created)  C_DOC(id, name, created, LABELS)
#define PROXY(id, name, created)     C_DOC(id, name "-proxy", created, PROXY_LABELS)
#define NETWORK(id, name, created)   N_DOC(id, name "-net", created, LABELS)
#define LISTED(id)                   "{\"Id\":\"" id "\"}"

/* ---- time ----------------------------------------------------------------------- */

static const struct {
	const char *s;
	int ok;
	int64_t secs;
	int32_t ns;
} time_rows[] = {
	{ "1970-01-01T00:00:00Z", 1, 0, 0 },
	{ "2026-09-08T12:00:00Z", 1, NOW_S, 0 },
	{ "2026-09-08T12:00:00+00:00", 1, NOW_S, 0 },
	{ "2026-09-08t12:00:00z", 1, NOW_S, 0 },
	{ "2026-09-08T14:00:00+02:00", 1, NOW_S, 0 },
	{ "2026-09-08T07:30:00-04:30", 1, NOW_S, 0 },
	{ "2026-09-07T13:59:59.999999999+02:00", 1, NOW_S - DAY_S - 1, 999999999 },
	{ "2026-09-08T12:00:00.5Z", 1, NOW_S, 500000000 },
	{ "2026-09-08T12:00:00.123456Z", 1, NOW_S, 123456000 },
	{ "2026-09-08T12:00:00.000000001Z", 1, NOW_S, 1 },
	{ "1969-12-31T23:59:59.25Z", 1, -1, 250000000 },
	{ "2024-02-29T00:00:00Z", 1, 1709164800, 0 },
	{ "0001-01-01T00:00:00Z", 1, REAP_TIME_MIN_S, 0 },
	{ "9999-12-31T23:59:59.999999999Z", 1, 253402300799LL, 999999999 },
	/* unreadable */
	{ "bad", 0, 0, 0 },
	{ "", 0, 0, 0 },
	{ "2026-09-01", 0, 0, 0 },
	{ "2026-09-08T12:00:00", 0, 0, 0 },                /* no zone */
	{ "2026-09-08T12:00:00.123", 0, 0, 0 },            /* no zone */
	{ "2026-09-08T12:00Z", 0, 0, 0 },
	{ "2026-09-08 12:00:00Z", 0, 0, 0 },
	{ "2026-09-08T12:00:00.Z", 0, 0, 0 },
	{ "2026-09-08T12:00:00.1234567890Z", 0, 0, 0 },    /* beyond nanoseconds */
	{ "2026-09-08T12:00:00+0200", 0, 0, 0 },
	{ "2026-09-08T12:00:00+02", 0, 0, 0 },
	{ "2026-09-08T12:00:00+02:00:00", 0, 0, 0 },
	{ "2026-09-08T12:00:00+24:00", 0, 0, 0 },
	{ "2026-09-08T12:00:00+02:60", 0, 0, 0 },
	{ "2026-09-08T12:00:00ZZ", 0, 0, 0 },
	{ "2026-09-08T12:00:00Z ", 0, 0, 0 },
	{ "2023-02-29T00:00:00Z", 0, 0, 0 },
	{ "2026-04-31T00:00:00Z", 0, 0, 0 },
	{ "2026-13-01T00:00:00Z", 0, 0, 0 },
	{ "2026-00-01T00:00:00Z", 0, 0, 0 },
	{ "2026-09-00T00:00:00Z", 0, 0, 0 },
	{ "2026-09-08T24:00:00Z", 0, 0, 0 },
	{ "2026-09-08T12:60:00Z", 0, 0, 0 },
	{ "2026-09-08T12:00:60Z", 0, 0, 0 },
	{ "0000-01-01T00:00:00Z", 0, 0, 0 },
	{ "+2026-09-08T12:00:00Z", 0, 0, 0 },
	{ "2026-9-08T12:00:00Z", 0, 0, 0 },
};

START_TEST(test_time_parse)
{
	struct rfc3339_time t = { -7, -7 };
	int r = rfc3339_parse(time_rows[_i].s, &t);

	if (!time_rows[_i].ok) {
		ck_assert_msg(r == -EINVAL, "\"%s\" parsed", time_rows[_i].s);
		ck_assert_msg(t.s == -7 && t.ns == -7, "\"%s\" wrote its result", time_rows[_i].s);
		return;
	}
	ck_assert_msg(r == 0, "\"%s\" refused", time_rows[_i].s);
	ck_assert_msg(t.s == time_rows[_i].secs && t.ns == time_rows[_i].ns, "\"%s\" → %lld.%09d",
		      time_rows[_i].s, (long long)t.s, t.ns);
}
END_TEST

START_TEST(test_time_parse_null)
{
	struct rfc3339_time t;

	ck_assert_int_eq(rfc3339_parse(NULL, &t), -EINVAL);
}
END_TEST

static const struct {
	double now;
	int64_t older_than_s;
	bool ok;
	int64_t secs;
	int32_t ns;
} cutoff_rows[] = {
	{ NOW, DAY_S, true, NOW_S - DAY_S, 0 },
	{ NOW, 1, true, NOW_S - 1, 0 },
	{ NOW + 0.25, DAY_S, true, NOW_S - DAY_S, 250000000 },
	{ -0.5, 1, true, -2, 500000000 },
	{ NOW, 0, false, 0, 0 },
	{ NOW, -1, false, 0, 0 },
	/* exactly the first instant, then past it (overflow: nothing expires) */
	{ NOW, NOW_S - REAP_TIME_MIN_S, true, REAP_TIME_MIN_S, 0 },
	{ NOW, NOW_S - REAP_TIME_MIN_S + 1, false, 0, 0 },
	{ NOW, INT64_MAX, false, 0, 0 },
	{ NAN, DAY_S, false, 0, 0 },
	{ INFINITY, DAY_S, false, 0, 0 },
	{ -INFINITY, DAY_S, false, 0, 0 },
	{ 1e300, DAY_S, false, 0, 0 },
};

START_TEST(test_cutoff)
{
	struct rfc3339_time c = { -7, -7 };
	bool ok = reap_cutoff(cutoff_rows[_i].now, cutoff_rows[_i].older_than_s, &c);

	ck_assert_int_eq(ok, cutoff_rows[_i].ok);
	if (!ok) {
		ck_assert(c.s == -7 && c.ns == -7);
		return;
	}
	ck_assert_msg(c.s == cutoff_rows[_i].secs && c.ns == cutoff_rows[_i].ns, "row %d: %lld.%09d", _i,
		      (long long)c.s, c.ns);
}
END_TEST

/* ---- eligibility: what one inspect document makes ---------------------------------- */

enum verdict { BAD = -1, SKIP = 0, OURS = 1 };

static const struct {
	const char *what;
	enum reap_listing l;
	const char *listed;        /* NULL: ID("a") */
	const char *doc;
	const char *scope_value;
	enum verdict want;
	enum reap_kind kind;
	const char *group;
} item_rows[] = {
	/* ours */
	{ "workload", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1, OLD), NULL, OURS, REAP_WORKLOAD, NAME1 },
	{ "proxy", REAP_LISTING_CONTAINERS, NULL, PROXY(ID("a"), NAME1, OLD), NULL, OURS, REAP_PROXY, NAME1 },
	{ "network", REAP_LISTING_NETWORKS, NULL, NETWORK(ID("a"), NAME1, OLD), NULL, OURS, REAP_NETWORK, NAME1 },
	{ "container name without its '/'", REAP_LISTING_CONTAINERS, NULL,
	  "{\"Id\":\"" ID("a") "\",\"Name\":\"" NAME1 "\",\"Created\":\"" OLD "\",\"Config\":{\"Labels\":" LABELS "}}",
	  NULL, OURS, REAP_WORKLOAD, NAME1 },
	{ "the scope asked for", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1, OLD), "scope-a", OURS,
	  REAP_WORKLOAD, NAME1 },
	{ "the scope asked for, network", REAP_LISTING_NETWORKS, NULL, NETWORK(ID("a"), NAME1, OLD), "scope-a",
	  OURS, REAP_NETWORK, NAME1 },
	/* foreign look-alikes: skipped */
	{ "wslc name", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), "maf-sandbox-wslc-123456789abc", OLD), NULL, SKIP, 0, NULL },
	{ "upper-case hex", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), "maf-sandbox-docker-ABCDEF123456", OLD),
	  NULL, SKIP, 0, NULL },
	{ "11 hex", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), "maf-sandbox-docker-11111111111", OLD), NULL, SKIP, 0, NULL },
	{ "13 hex", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1 "1", OLD), NULL, SKIP, 0, NULL },
	{ "a suffix of its own", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1 "-x", OLD), NULL, SKIP, 0, NULL },
	{ "a prefix", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), "x" NAME1, OLD), NULL, SKIP, 0, NULL },
	{ "container named -net", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1 "-net", OLD), NULL, SKIP, 0, NULL },
	{ "network without -net", REAP_LISTING_NETWORKS, NULL, N_DOC(ID("a"), NAME1, OLD, LABELS), NULL, SKIP, 0, NULL },
	{ "network named -proxy", REAP_LISTING_NETWORKS, NULL, N_DOC(ID("a"), NAME1 "-proxy", OLD, LABELS), NULL, SKIP, 0, NULL },
	{ "network named /…-net", REAP_LISTING_NETWORKS, NULL, N_DOC(ID("a"), "/" NAME1 "-net", OLD, LABELS), NULL, SKIP, 0, NULL },
	{ "agent label missing", REAP_LISTING_CONTAINERS, NULL,
	  C_DOC(ID("a"), NAME1, OLD, "{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\",\"maf-sandbox.kind\":\"k\"}"),
	  NULL, SKIP, 0, NULL },
	{ "thread label empty", REAP_LISTING_CONTAINERS, NULL,
	  C_DOC(ID("a"), NAME1, OLD, "{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"\",\"maf-sandbox.agent\":\"a\","
		"\"maf-sandbox.kind\":\"k\"}"), NULL, SKIP, 0, NULL },
	{ "kind label not a string", REAP_LISTING_NETWORKS, NULL,
	  N_DOC(ID("a"), NAME1 "-net", OLD, "{\"maf-sandbox.scope\":\"s\",\"maf-sandbox.thread\":\"t\",\"maf-sandbox.agent\":\"a\","
		"\"maf-sandbox.kind\":7}"), NULL, SKIP, 0, NULL },
	{ "no labels", REAP_LISTING_CONTAINERS, NULL, C_DOC(ID("a"), NAME1, OLD, "null"), NULL, SKIP, 0, NULL },
	{ "container labels at the top", REAP_LISTING_CONTAINERS, NULL,
	  "{\"Id\":\"" ID("a") "\",\"Name\":\"/" NAME1 "\",\"Created\":\"" OLD "\",\"Labels\":" LABELS "}", NULL, SKIP, 0, NULL },
	{ "network labels under Config", REAP_LISTING_NETWORKS, NULL,
	  "{\"Id\":\"" ID("a") "\",\"Name\":\"" NAME1 "-net\",\"Created\":\"" OLD "\",\"Config\":{\"Labels\":" LABELS "}}",
	  NULL, SKIP, 0, NULL },
	{ "workload with the proxy role", REAP_LISTING_CONTAINERS, NULL, C_DOC(ID("a"), NAME1, OLD, PROXY_LABELS), NULL, SKIP, 0, NULL },
	{ "workload with another role", REAP_LISTING_CONTAINERS, NULL,
	  C_DOC(ID("a"), NAME1, OLD, "{" LABELS_OF("scope-a") ",\"maf-sandbox.role\":\"sidecar\"}"), NULL, SKIP, 0, NULL },
	{ "proxy without its role", REAP_LISTING_CONTAINERS, NULL, C_DOC(ID("a"), NAME1 "-proxy", OLD, LABELS), NULL, SKIP, 0, NULL },
	{ "proxy with another role", REAP_LISTING_CONTAINERS, NULL,
	  C_DOC(ID("a"), NAME1 "-proxy", OLD, "{" LABELS_OF("scope-a") ",\"maf-sandbox.role\":\"Proxy\"}"), NULL, SKIP, 0, NULL },
	{ "another scope", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1, OLD), "scope-b", SKIP, 0, NULL },
	{ "another scope, network", REAP_LISTING_NETWORKS, NULL, NETWORK(ID("a"), NAME1, OLD), "scope-b", SKIP, 0, NULL },
	{ "foreign with a bad Created", REAP_LISTING_CONTAINERS, NULL,
	  WORKLOAD(ID("a"), "maf-sandbox-wslc-123456789abc", "bad"), NULL, SKIP, 0, NULL },
	/* unreadable: the sweep stops */
	{ "Id of another", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("b"), NAME1, OLD), NULL, BAD, 0, NULL },
	{ "Id short", REAP_LISTING_CONTAINERS, NULL, WORKLOAD("aaaaaaaaaaaa", NAME1, OLD), NULL, BAD, 0, NULL },
	{ "Id missing", REAP_LISTING_NETWORKS, NULL,
	  "{\"Name\":\"" NAME1 "-net\",\"Created\":\"" OLD "\",\"Labels\":" LABELS "}", NULL, BAD, 0, NULL },
	{ "Id missing on a foreign one", REAP_LISTING_CONTAINERS, NULL,
	  "{\"Name\":\"/maf-sandbox-wslc-123456789abc\",\"Created\":\"" OLD "\",\"Config\":{\"Labels\":" LABELS "}}",
	  NULL, BAD, 0, NULL },
	{ "listed ID upper case", REAP_LISTING_CONTAINERS, ID("A"), WORKLOAD(ID("A"), NAME1, OLD), NULL, BAD, 0, NULL },
	{ "listed ID short", REAP_LISTING_CONTAINERS, "aaaaaaaaaaaa", WORKLOAD("aaaaaaaaaaaa", NAME1, OLD), NULL, BAD, 0, NULL },
	{ "Name missing", REAP_LISTING_CONTAINERS, NULL,
	  "{\"Id\":\"" ID("a") "\",\"Created\":\"" OLD "\",\"Config\":{\"Labels\":" LABELS "}}", NULL, BAD, 0, NULL },
	{ "Created unreadable", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1, "bad"), NULL, BAD, 0, NULL },
	{ "Created a date", REAP_LISTING_CONTAINERS, NULL, WORKLOAD(ID("a"), NAME1, "2026-09-01"), NULL, BAD, 0, NULL },
	{ "Created without a zone", REAP_LISTING_NETWORKS, NULL, NETWORK(ID("a"), NAME1, "2026-09-06T12:00:00.5"),
	  NULL, BAD, 0, NULL },
	{ "Created missing", REAP_LISTING_CONTAINERS, NULL,
	  "{\"Id\":\"" ID("a") "\",\"Name\":\"/" NAME1 "\",\"Config\":{\"Labels\":" LABELS "}}", NULL, BAD, 0, NULL },
	{ "not an object", REAP_LISTING_CONTAINERS, NULL, "[]", NULL, BAD, 0, NULL },
};

START_TEST(test_item_from_inspect)
{
	const char *listed = item_rows[_i].listed ? item_rows[_i].listed : ID("a");
	json_auto_t *doc = json_loads(item_rows[_i].doc, JSON_DECODE_ANY, NULL);
	_cleanup_free_ char *detail = NULL;
	struct reap_item item = { .kind = _REAP_KIND_MAX, .name = "untouched" };
	int r;

	ck_assert_msg(doc != NULL, "%s: the row's document is not JSON", item_rows[_i].what);
	r = reap_item_from_inspect(item_rows[_i].l, listed, doc, item_rows[_i].scope_value, &item, &detail);
	switch (item_rows[_i].want) {
	case BAD:
		ck_assert_msg(r == -EBADMSG, "%s: %d", item_rows[_i].what, r);
		ck_assert_msg(detail && *detail, "%s: no detail", item_rows[_i].what);
		ck_assert_str_eq(item.name, "untouched");
		break;
	case SKIP:
		ck_assert_msg(r == 0, "%s: %d (%s)", item_rows[_i].what, r, detail ? detail : "");
		ck_assert_ptr_null(detail);
		ck_assert_str_eq(item.name, "untouched");
		break;
	case OURS:
		ck_assert_msg(r == 1, "%s: %d (%s)", item_rows[_i].what, r, detail ? detail : "");
		ck_assert_ptr_null(detail);
		ck_assert_int_eq(item.kind, item_rows[_i].kind);
		ck_assert_str_eq(item.id, listed);
		ck_assert_str_eq(item.group, item_rows[_i].group);
		ck_assert_int_eq(item.created.s, NOW_S - 2 * DAY_S);
		ck_assert_int_eq(item.created.ns, 0);
		ck_assert(!item.anchor && !item.expired && !item.held);
		break;
	}
}
END_TEST

/* The kept name is the resource's own (no '/'), the group its workload's. */
START_TEST(test_item_names)
{
	json_auto_t *proxy = json_loads(PROXY(ID("b"), NAME1, "2026-09-07T13:59:59.999999999+02:00"), 0, NULL);
	json_auto_t *net = json_loads(NETWORK(ID("c"), NAME2, OLD), 0, NULL);
	struct reap_item item;
	char *detail = NULL;

	ck_assert_int_eq(reap_item_from_inspect(REAP_LISTING_CONTAINERS, ID("b"), proxy, NULL, &item, &detail), 1);
	ck_assert_str_eq(item.name, NAME1 "-proxy");
	ck_assert_str_eq(item.group, NAME1);
	ck_assert_int_eq(item.created.s, NOW_S - DAY_S - 1);
	ck_assert_int_eq(item.created.ns, 999999999);
	ck_assert_int_eq(reap_item_from_inspect(REAP_LISTING_NETWORKS, ID("c"), net, NULL, &item, &detail), 1);
	ck_assert_str_eq(item.name, NAME2 "-net");
	ck_assert_str_eq(item.group, NAME2);
	ck_assert_ptr_null(detail);
}
END_TEST

/* A scope label longer than the item keeps (the daemon never writes one,
 * anyone with the engine may) is kept as its label_value, never cut inside
 * a UTF-8 sequence: the dry run lists the workload like any other. */
START_TEST(test_item_long_scope_label)
{
	_cleanup_free_ char *scope = NULL, *doc_text = NULL;
	json_auto_t *doc = NULL;
	struct reap_result result = { 0 };
	struct reap_item item;
	char *detail = NULL;
	size_t n = 0;

	scope = xcalloc(1, 2 * 50 + 1);
	for (int i = 0; i < 50; i++)
		n += (size_t)sprintf(scope + n, "\xc3\xa9");         /* é: 2 bytes, 100 in all */
	doc_text = xasprintf(C_DOC(ID("a"), NAME1, OLD, "{" LABELS_OF("%s") "}"), scope);
	doc = json_loads(doc_text, 0, NULL);
	ck_assert_ptr_nonnull(doc);
	ck_assert_int_eq(reap_item_from_inspect(REAP_LISTING_CONTAINERS, ID("a"), doc, NULL, &item, &detail), 1);
	ck_assert_int_eq(strncmp(item.scope, "sha256-", 7), 0);
	item.expired = true;
	reap_dry_result(&item, 1, &result);
	ck_assert_uint_eq(result.would_dispose_count, 1);
	ck_assert_int_eq(json_array_size(result.would_dispose), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(result.would_dispose, 0), "scope")),
			 item.scope);
	json_decref(result.would_dispose);
}
END_TEST

/* However many workloads would go, the dry run's reply keeps within the
 * 64 KiB bound of a method without its own (REPLYBOUND_DEFAULT_BYTES): at
 * most REAP_DRY_RUN_LISTED_MAX listed, each at most
 * REAP_DRY_RUN_ENTRY_MAX_BYTES, every one counted. */
START_TEST(test_dry_result_bounded)
{
	const size_t n = 3 * REAP_DRY_RUN_LISTED_MAX + 1;
	_cleanup_free_ struct reap_item *items = xcalloc(n, sizeof(*items));
	struct reap_result result = { .failures = json_array() };
	_cleanup_free_ char *s = NULL;
	json_t *j, *w;
	size_t i;

	for (i = 0; i < n; i++) {
		struct reap_item *it = &items[i];

		it->kind = i % 3 == 0 ? REAP_WORKLOAD : i % 3 == 1 ? REAP_PROXY : REAP_WORKLOAD;
		snprintf(it->id, sizeof(it->id), "%064zx", i);
		memset(it->name, 'n', sizeof(it->name) - 1);
		memset(it->scope, '\x01', sizeof(it->scope) - 1);     /* each escaped: \u0001 */
		it->created = (struct rfc3339_time){ .s = 253402300799, .ns = 999999999 };   /* 9999-12-31 */
		it->expired = true;
	}
	items[n - 1].held = true;                                   /* kept: not counted */
	reap_dry_result(items, n, &result);
	ck_assert_uint_eq(result.would_dispose_count, 2 * REAP_DRY_RUN_LISTED_MAX);
	ck_assert_uint_eq(result.would_remove_proxies, REAP_DRY_RUN_LISTED_MAX);
	ck_assert_int_eq(json_array_size(result.would_dispose), REAP_DRY_RUN_LISTED_MAX);
	json_array_foreach(result.would_dispose, i, w) {
		_cleanup_free_ char *e = json_dumps(w, JSON_COMPACT | JSON_ENCODE_ANY);

		ck_assert_uint_le(strlen(e) + 1, REAP_DRY_RUN_ENTRY_MAX_BYTES);
	}
	result.dry_run = true;
	j = reap_result_to_json(&result);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "would_dispose_count")), 2 * REAP_DRY_RUN_LISTED_MAX);
	s = json_dumps(j, JSON_COMPACT);
	ck_assert_uint_le(strlen(s) + 256, 64 * 1024);
	json_decref(j);
	json_decref(result.would_dispose);
	json_decref(result.failures);
}
END_TEST

START_TEST(test_ids)
{
	ck_assert(reap_id_is_valid(ID("0")));
	ck_assert(reap_id_is_valid(ID("f")));
	ck_assert(!reap_id_is_valid(ID("A")));
	ck_assert(!reap_id_is_valid(ID("g")));
	ck_assert(!reap_id_is_valid(ID("a") "a"));
	ck_assert(!reap_id_is_valid("aaaaaaaaaaaa"));
	ck_assert(!reap_id_is_valid(""));
	ck_assert(!reap_id_is_valid(NULL));
}
END_TEST

/* The filters of both listings: our name prefix, the four labels present,
 * and the scope (as label_value) when asked. */
START_TEST(test_list_filters)
{
	json_auto_t *all = reap_list_filters(NULL);
	json_auto_t *one = reap_list_filters("sha256-0123");
	json_auto_t *want_all = json_loads(
		"{\"name\":{\"^maf-sandbox-docker-\":true},\"label\":{\"maf-sandbox.scope\":true,"
		"\"maf-sandbox.thread\":true,\"maf-sandbox.agent\":true,\"maf-sandbox.kind\":true}}", 0, NULL);

	ck_assert(json_equal(all, want_all));
	ck_assert(json_is_true(json_object_get(json_object_get(one, "label"), "maf-sandbox.scope=sha256-0123")));
	ck_assert_int_eq(json_object_size(json_object_get(one, "label")), 5);
}
END_TEST

/* ---- grouping, anchors and the cutoff ------------------------------------------------ */

#define CUT_S  (NOW_S - DAY_S)

struct plan_item {
	enum reap_kind kind;
	int group;                 /* 1 or 2 */
	int64_t off_ns;            /* created relative to the cutoff */
	bool expired, anchor;      /* expected */
};

static const struct {
	const char *what;
	bool no_cutoff;
	size_t n;
	struct plan_item items[4];
} plan_rows[] = {
	{ "old topology", false, 3, {
		{ REAP_NETWORK, 1, -DAY_S * NS, true, false },
		{ REAP_PROXY, 1, -DAY_S * NS, true, false },
		{ REAP_WORKLOAD, 1, -DAY_S * NS, true, true } } },
	{ "a workload exactly at the cutoff keeps it all", false, 3, {
		{ REAP_WORKLOAD, 1, 0, false, true },
		{ REAP_PROXY, 1, -DAY_S * NS, false, false },
		{ REAP_NETWORK, 1, -DAY_S * NS, false, false } } },
	{ "a nanosecond before the cutoff", false, 1, { { REAP_WORKLOAD, 1, -1, true, true } } },
	{ "a nanosecond after the cutoff", false, 1, { { REAP_WORKLOAD, 1, 1, false, true } } },
	{ "a workload from the future", false, 2, {
		{ REAP_WORKLOAD, 1, 2 * DAY_S * NS, false, true },
		{ REAP_NETWORK, 1, -DAY_S * NS, false, false } } },
	{ "a rebuilt proxy and network do not extend an old workload", false, 3, {
		{ REAP_PROXY, 1, DAY_S * NS - 1, true, false },
		{ REAP_WORKLOAD, 1, -1, true, true },
		{ REAP_NETWORK, 1, DAY_S * NS - 1, true, false } } },
	{ "a young orphan proxy keeps its older network", false, 2, {
		{ REAP_NETWORK, 1, -DAY_S * NS, false, false },
		{ REAP_PROXY, 1, 1, false, true } } },
	{ "an old orphan proxy takes its young network", false, 2, {
		{ REAP_NETWORK, 1, 1, true, false },
		{ REAP_PROXY, 1, -1, true, true } } },
	{ "a lone old network", false, 1, { { REAP_NETWORK, 1, -1, true, true } } },
	{ "a lone network at the cutoff", false, 1, { { REAP_NETWORK, 1, 0, false, true } } },
	{ "a lone old proxy", false, 1, { { REAP_PROXY, 1, -1, true, true } } },
	{ "groups are apart", false, 4, {
		{ REAP_NETWORK, 2, -DAY_S * NS, false, false },
		{ REAP_WORKLOAD, 1, -1, true, true },
		{ REAP_WORKLOAD, 2, 1, false, true },
		{ REAP_NETWORK, 1, 1, true, false } } },
	{ "two networks of one name: the younger anchors", false, 2, {
		{ REAP_NETWORK, 1, -DAY_S * NS, false, false },
		{ REAP_NETWORK, 1, 1, false, true } } },
	{ "no cutoff (overflow): nothing expires", true, 3, {
		{ REAP_WORKLOAD, 1, -DAY_S * NS, false, true },
		{ REAP_PROXY, 1, -DAY_S * NS, false, false },
		{ REAP_NETWORK, 2, -DAY_S * NS, false, true } } },
};

static struct rfc3339_time time_at(int64_t off_ns)
{
	int64_t s = CUT_S + off_ns / NS, ns = off_ns % NS;

	if (ns < 0) {
		s--;
		ns += NS;
	}
	return (struct rfc3339_time){ .s = s, .ns = (int32_t)ns };
}

START_TEST(test_plan)
{
	const struct rfc3339_time cutoff = { CUT_S, 0 };
	struct reap_item items[4];
	size_t n = plan_rows[_i].n;

	for (size_t k = 0; k < n; k++) {
		const struct plan_item *p = &plan_rows[_i].items[k];
		const char *group = p->group == 1 ? NAME1 : NAME2;

		items[k] = (struct reap_item){ .kind = p->kind, .created = time_at(p->off_ns), .held = true };
		snprintf(items[k].id, sizeof(items[k].id), "%zu", k);      /* the row's index */
		snprintf(items[k].group, sizeof(items[k].group), "%s", group);
	}
	reap_plan(items, n, plan_rows[_i].no_cutoff ? NULL : &cutoff);
	for (size_t k = 0; k < n; k++) {
		const struct plan_item *p = &plan_rows[_i].items[atoi(items[k].id)];

		ck_assert_msg(items[k].expired == p->expired && items[k].anchor == p->anchor,
			      "%s: item %s (%s): expired %d anchor %d", plan_rows[_i].what, items[k].id,
			      reap_kind_to_string(items[k].kind), items[k].expired, items[k].anchor);
		ck_assert(!items[k].held);
		/* Sorted: by group, then workload, proxy, network. */
		if (k > 0) {
			int c = strcmp(items[k - 1].group, items[k].group);

			ck_assert(c < 0 || (c == 0 && items[k - 1].kind <= items[k].kind));
		}
	}
}
END_TEST

/* ---- the driver against the fake engine ------------------------------------------------ */

#define API  "/v1.45"
#define PING { .path = "/_ping", .headers = "Api-Version: 1.45\r\n", .body = "OK", .repeat = true }
#define VERSION { .path = API "/version", .body = "{\"Version\":\"26.1.0\",\"ApiVersion\":\"1.45\",\"Os\":\"linux\"}", \
		  .repeat = true }
#define PROBE_REQUESTS 2

/* Script entries. An inspect marked repeat answers both the inventory and
 * the revalidation. */
#define LIST_C(items)      { .method = "GET", .path = API "/containers/json?", .body = "[" items "]" }
#define LIST_N(items)      { .method = "GET", .path = API "/networks?", .body = "[" items "]" }
#define INSPECT_C(id, doc) { .method = "GET", .path = API "/containers/" id "/json", .body = doc, .repeat = true }
#define INSPECT_N(id, doc) { .method = "GET", .path = API "/networks/" id, .body = doc, .repeat = true }
#define RM_C(id, st)       { .method = "DELETE", .path = API "/containers/" id "?", .status = st }
#define RM_N(id, st)       { .method = "DELETE", .path = API "/networks/" id, .status = st }
#define GONE               "{\"message\":\"No such resource\"}"
/* The connection drops in the middle of the reply's body (a transport
 * failure; before any byte, libcurl would retry on a fresh connection). */
#define HANG_UP            .body = "{\"message\":\"" ID("x") ID("x") ID("x") ID("x") "\"}", .close_after_bytes = 150

static struct event_base *base;
static struct domain d;
static int reachable;
static struct fake_reply script[SCRIPT_MAX];
static struct {
	int calls;
	json_t *result;            /* reap_result_to_json of the result */
} done;

static const struct engine_options test_opts = {
	.timeout_ms = 2000, .reconnect_min_ms = 20, .reconnect_max_ms = 80,
};

static void setup(void)
{
	reachable = 0;
	memset(&done, 0, sizeof(done));
	memset(script, 0, sizeof(script));
	base = event_base_new();
	ck_assert_ptr_nonnull(base);
	d = (struct domain){ .base = base, .registry = registry_new() };
	d.engine = loop_engine_new(base, &test_opts, &reachable);
}

static void teardown(void)
{
	d.engine = engine_free(d.engine);
	d.registry = registry_free(d.registry);
	json_decref(done.result);
	event_base_free(base);
	fake_engine_cleanup();
}

static void done_cb(const struct reap_result *result, void *arg)
{
	ck_assert_ptr_eq(arg, &done);
	done.calls++;
	json_decref(done.result);
	done.result = reap_result_to_json(result);
	ck_assert_ptr_nonnull(done.result);
}

/* Serves PING, VERSION, then entries[0..n), and waits until reachable. */
static void serve(const struct fake_reply *entries, size_t n)
{
	ck_assert_uint_le(n + 2, SCRIPT_MAX);
	script[0] = (struct fake_reply)PING;
	script[1] = (struct fake_reply)VERSION;
	memcpy(script + 2, entries, n * sizeof(*entries));
	loop_engine_start_reachable(base, d.engine, &reachable, script, n + 2, RUN_MAX_MS);
}

/* Reaps everything older than a day at NOW, and waits for done. */
static void reap(const char *scope, int64_t older_than_s)
{
	ck_assert_int_eq(reap_start(&d, older_than_s, scope, NOW, done_cb, &done), 0);
	ck_assert_int_eq(done.calls, 0);           /* from the loop, never inside reap_start */
	loop_run_until(base, &done.calls, 1, RUN_MAX_MS);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(done.calls, 1);
}

static void assert_counts(size_t disposed, size_t proxies, size_t networks, size_t failures)
{
	ck_assert_int_eq(json_integer_value(json_object_get(done.result, "disposed")), disposed);
	ck_assert_int_eq(json_integer_value(json_object_get(done.result, "proxies_removed")), proxies);
	ck_assert_int_eq(json_integer_value(json_object_get(done.result, "networks_removed")), networks);
	ck_assert_int_eq(json_array_size(json_object_get(done.result, "failures")), failures);
}

static const char *failure_code(size_t i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(done.result, "failures"), i),
						 "code"));
}

static const char *failure_detail(size_t i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(done.result, "failures"), i),
						 "detail"));
}

/* The requests after the first probe, one token each: LC/LN (list),
 * IC:x/IN:x (inspect), DC:x/DN:x (remove), x the ID's digit; a container
 * removal without force reads DC-nf:x, a network removal with a query
 * DN?:x. Probes (unversioned paths) are left out. */
static const char *trace(void)
{
	static char out[TRACE_MAX];
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = PROBE_REQUESTS; i < fake_engine_request_count(); i++) {
		const struct fake_request *rq = fake_engine_request(i);
		const char *p = rq->path + strlen(API);
		bool get = strcmp(rq->method, "GET") == 0;
		char tok[32];

		if (strncmp(rq->path, API "/", strlen(API "/")) != 0 || strcmp(p, "/version") == 0)
			continue;
		if (strncmp(p, "/containers/json?", 17) == 0)
			snprintf(tok, sizeof(tok), "LC");
		else if (strncmp(p, "/networks?", 10) == 0)
			snprintf(tok, sizeof(tok), "LN");
		else if (strncmp(p, "/containers/", 12) == 0)
			snprintf(tok, sizeof(tok), "%s%s:%c", get ? "IC" : "DC",
				 get || strstr(p, "?force=1") ? "" : "-nf", p[12]);
		else if (strncmp(p, "/networks/", 10) == 0)
			snprintf(tok, sizeof(tok), "%s%s:%c", get ? "IN" : "DN", !get && strchr(p, '?') ? "?" : "",
				 p[10]);
		else
			snprintf(tok, sizeof(tok), "?%s", rq->method);
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", len ? " " : "", tok);
		ck_assert_uint_lt(len, sizeof(out));
	}
	return out;
}

/* Only the removals of trace(). */
static const char *removals(void)
{
	static char out[TRACE_MAX];
	const char *t = trace();
	size_t len = 0;

	out[0] = '\0';
	for (const char *p = t; *p; p += strspn(p, " ")) {
		size_t n = strcspn(p, " ");

		if (*p == 'D')
			len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%.*s", len ? " " : "", (int)n, p);
		p += n;
	}
	return out;
}

/* %XX → the byte; malloc'd. */
static char *url_decode(const char *s)
{
	char *out = xmalloc(strlen(s) + 1), *o = out;

	for (; *s; s++) {
		unsigned v;

		if (*s == '%' && sscanf(s + 1, "%2x", &v) == 1) {
			*o++ = (char)v;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
	return out;
}

/* The filters= of recorded request i, parsed. */
static json_t *request_filters(size_t i)
{
	const char *q = strstr(fake_engine_request(i)->path, "filters=");
	_cleanup_free_ char *json = NULL;

	ck_assert_ptr_nonnull(q);
	json = url_decode(q + strlen("filters="));
	return json_loads(json, 0, NULL);
}

/* One old topology (workload a, proxy b, network c) and an old lone
 * workload d: proxies, then workloads, then networks, by ID; containers
 * with force, the network without; listings filtered; one request at a
 * time; the registry forgets the removed workload. */
START_TEST(test_reaps_in_order)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("b")) "," LISTED(ID("d"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("b"), PROXY(ID("b"), NAME1, YOUNG)),
		INSPECT_C(ID("d"), WORKLOAD(ID("d"), NAME2, OLD)),
		LIST_N(LISTED(ID("c"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
		RM_C(ID("b"), 204), RM_C(ID("a"), 204), RM_C(ID("d"), 204), RM_N(ID("c"), 204),
	};
	json_auto_t *doc = json_loads(WORKLOAD(ID("a"), NAME1, OLD), 0, NULL);
	json_auto_t *want = reap_list_filters(NULL);
	json_auto_t *fc = NULL, *fn = NULL;

	ck_assert_ptr_nonnull(registry_update_from_inspect(d.registry, doc, 0));
	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	assert_counts(2, 1, 1, 0);
	ck_assert_str_eq(trace(), "LC IC:a IC:b IC:d LN IN:c IC:a IC:d DC:b DC:a DC:d DN:c");
	fc = request_filters(PROBE_REQUESTS);
	fn = request_filters(PROBE_REQUESTS + 4);
	ck_assert(json_equal(fc, want));
	ck_assert(json_equal(fn, want));
	ck_assert_uint_eq(fake_engine_connection_count(), 1);      /* sequential: one connection */
	ck_assert_uint_eq(registry_count(d.registry), 0);
}
END_TEST

/* The dry run: the same inventory, plan and revalidation as the sweep of
 * test_reaps_in_order, then no removal at all; the result lists the
 * workloads that would go (ID, name, scope label, creation time) and counts
 * the proxies and networks; the registry keeps its sandbox. */
START_TEST(test_dry_run_removes_nothing)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("b")) "," LISTED(ID("d"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("b"), PROXY(ID("b"), NAME1, YOUNG)),
		INSPECT_C(ID("d"), WORKLOAD(ID("d"), NAME2, YOUNG)),
		LIST_N(LISTED(ID("c"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
	};
	json_auto_t *doc = json_loads(WORKLOAD(ID("a"), NAME1, OLD), 0, NULL);
	const json_t *would, *w;

	ck_assert_ptr_nonnull(registry_update_from_inspect(d.registry, doc, 0));
	serve(entries, ELEMENTSOF(entries));
	ck_assert_int_eq(reap_start_dry(&d, DAY_S, NULL, NOW, true, done_cb, &done), 0);
	loop_run_until(base, &done.calls, 1, RUN_MAX_MS);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(done.calls, 1);
	assert_counts(0, 0, 0, 0);
	ck_assert_str_eq(trace(), "LC IC:a IC:b IC:d LN IN:c IC:a");
	ck_assert_str_eq(removals(), "");
	ck_assert(json_is_true(json_object_get(done.result, "dry_run")));
	would = json_object_get(done.result, "would_dispose");
	ck_assert_int_eq(json_array_size(would), 1);
	w = json_array_get(would, 0);
	ck_assert_str_eq(json_string_value(json_object_get(w, "sandbox")), ID("a"));
	ck_assert_str_eq(json_string_value(json_object_get(w, "name")), NAME1);
	ck_assert_str_eq(json_string_value(json_object_get(w, "scope")), "scope-a");
	ck_assert_str_eq(json_string_value(json_object_get(w, "created")), OLD);
	ck_assert_int_eq(json_integer_value(json_object_get(done.result, "would_remove_proxies")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(done.result, "would_remove_networks")), 1);
	ck_assert_uint_eq(registry_count(d.registry), 1);
}
END_TEST

/* A real sweep's result has no dry-run members. */
START_TEST(test_sweep_result_has_no_dry_run_members)
{
	static const struct fake_reply entries[] = { LIST_C(""), LIST_N("") };

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	ck_assert_ptr_null(json_object_get(done.result, "dry_run"));
	ck_assert_ptr_null(json_object_get(done.result, "would_dispose"));
}
END_TEST

/* A lone proxy or network is reachable; within a day, nothing is. */
START_TEST(test_lone_and_young)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("b")) "," LISTED(ID("e"))),
		INSPECT_C(ID("b"), PROXY(ID("b"), NAME1, OLD)),
		INSPECT_C(ID("e"), PROXY(ID("e"), NAME2, YOUNG)),
		LIST_N(LISTED(ID("c")) "," LISTED(ID("f"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME2, OLD)),           /* kept by e */
		INSPECT_N(ID("f"), N_DOC(ID("f"), "maf-sandbox-docker-333333333333-net", OLD, LABELS)),
		RM_C(ID("b"), 204), RM_N(ID("f"), 204),
	};

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	assert_counts(0, 1, 1, 0);
	ck_assert_str_eq(removals(), "DC:b DN:f");
}
END_TEST

/* An overflowing age lists but removes nothing. */
START_TEST(test_overflow_keeps_everything)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, "0001-01-01T00:00:00Z")),
		LIST_N(""),
	};

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, INT64_MAX);
	assert_counts(0, 0, 0, 0);
	ck_assert_str_eq(trace(), "LC IC:a LN");
}
END_TEST

/* The scope goes into both listings as its label value, and is checked again. */
START_TEST(test_scope)
{
	static const char scope[] = "an operator scope with spaces";
	_cleanup_free_ char *v = names_label_value(scope);
	_cleanup_free_ char *workload = NULL, *cond = xasprintf("maf-sandbox.scope=%s", v);
	json_auto_t *fc = NULL, *fn = NULL;
	struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a"))),
		INSPECT_C(ID("a"), NULL),
		LIST_N(LISTED(ID("c"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),           /* scope-a: not this scope */
		RM_C(ID("a"), 204),
	};

	workload = xasprintf("{\"Id\":\"%s\",\"Name\":\"/%s\",\"Created\":\"%s\",\"Config\":{\"Labels\":"
			     "{\"maf-sandbox.scope\":\"%s\",\"maf-sandbox.thread\":\"t\",\"maf-sandbox.agent\":\"a\","
			     "\"maf-sandbox.kind\":\"k\"}}}", ID("a"), NAME1, OLD, v);
	entries[1].body = workload;
	serve(entries, ELEMENTSOF(entries));
	reap(scope, DAY_S);
	assert_counts(1, 0, 0, 0);
	ck_assert_str_eq(removals(), "DC:a");
	fc = request_filters(PROBE_REQUESTS);
	fn = request_filters(PROBE_REQUESTS + 2);
	ck_assert(json_is_true(json_object_get(json_object_get(fc, "label"), cond)));
	ck_assert(json_is_true(json_object_get(json_object_get(fn, "label"), cond)));
}
END_TEST

/* Any inventory failure: one "unlisted" failure and no removal at all,
 * though another topology was fine. Each row's entry is served first. */
static const struct {
	const char *what;
	struct fake_reply first;
} inventory_rows[] = {
	{ "container listing fails", { .path = API "/containers/json?", .status = 500, .body = "{\"message\":\"down\"}" } },
	{ "container listing not a list", { .path = API "/containers/json?", .body = "{}" } },
	{ "container listing with a bad ID", { .path = API "/containers/json?", .body = "[{\"Id\":\"abc\"}]" } },
	{ "container listing hangs up", { .path = API "/containers/json?", HANG_UP } },
	{ "network listing fails", { .path = API "/networks?", .status = 500 } },
	{ "network listing without an Id", { .path = API "/networks?", .body = "[{}]" } },
	{ "container inspect fails", { .path = API "/containers/" ID("d"), .status = 500 } },
	{ "container inspect with another Id", { .path = API "/containers/" ID("d"), .body = WORKLOAD(ID("e"), NAME2, OLD) } },
	{ "container inspect with a bad Created", { .path = API "/containers/" ID("d"), .body = WORKLOAD(ID("d"), NAME2, "bad") } },
	{ "container inspect with a dateless Created",
	  { .path = API "/containers/" ID("d"), .body = WORKLOAD(ID("d"), NAME2, "2026-09-06T12:00:00") } },
	{ "network inspect fails", { .path = API "/networks/" ID("c"), .status = 503 } },
	{ "network inspect with a bad Created", { .path = API "/networks/" ID("c"), .body = NETWORK(ID("c"), NAME1, "bad") } },
	{ "revalidation fails", { .path = API "/containers/" ID("d"), .body = WORKLOAD(ID("d"), NAME2, OLD), .status = 200 } },
};

START_TEST(test_inventory_failure_deletes_nothing)
{
	const struct fake_reply rest[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("d"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("d"), WORKLOAD(ID("d"), NAME2, OLD)),
		LIST_N(LISTED(ID("c"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
		RM_C(ID("a"), 204), RM_C(ID("d"), 204), RM_N(ID("c"), 204),
	};
	struct fake_reply entries[ELEMENTSOF(rest) + 2];
	size_t n = 0;

	entries[n++] = inventory_rows[_i].first;
	if (_i == ELEMENTSOF(inventory_rows) - 1) {
		/* The inventory reads d (the row's entry), then its revalidation fails. */
		entries[n++] = (struct fake_reply){ .path = API "/containers/" ID("d"), .status = 500 };
	}
	memcpy(entries + n, rest, sizeof(rest));
	n += ELEMENTSOF(rest);
	serve(entries, n);
	reap(NULL, DAY_S);
	assert_counts(0, 0, 0, 1);
	ck_assert_msg(strcmp(failure_code(0), "unlisted") == 0, "%s: %s", inventory_rows[_i].what, failure_code(0));
	ck_assert_str_eq(removals(), "");
}
END_TEST

/* Revalidation: an anchor gone since the inventory skips its group (a
 * replacement must not inherit its age); another ID or an error aborts the
 * whole sweep before any removal. */
static const struct {
	const char *what;
	struct fake_reply again;   /* d's second inspect */
	const char *want_removals;
	size_t failures;
} revalidate_rows[] = {
	{ "gone", { .path = API "/containers/" ID("d"), .status = 404, .body = GONE }, "DC:a DN:c", 0 },
	{ "another Id", { .path = API "/containers/" ID("d"), .body = "{\"Id\":\"" ID("e") "\"}" }, "", 1 },
	{ "no Id", { .path = API "/containers/" ID("d"), .body = "{}" }, "", 1 },
	{ "refused", { .path = API "/containers/" ID("d"), .status = 500 }, "", 1 },
	{ "hangs up", { .path = API "/containers/" ID("d"), HANG_UP }, "", 1 },
};

START_TEST(test_revalidation)
{
	struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("d"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		{ .method = "GET", .path = API "/containers/" ID("d"), .body = WORKLOAD(ID("d"), NAME2, OLD) },
		revalidate_rows[_i].again,
		LIST_N(LISTED(ID("c")) "," LISTED(ID("f"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
		INSPECT_N(ID("f"), NETWORK(ID("f"), NAME2, OLD)),           /* d's network */
		RM_C(ID("a"), 204), RM_C(ID("d"), 204), RM_N(ID("c"), 204), RM_N(ID("f"), 204),
	};

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	ck_assert_msg(strcmp(removals(), revalidate_rows[_i].want_removals) == 0, "%s: %s", revalidate_rows[_i].what,
		      removals());
	ck_assert_str_eq(trace(), strcmp(removals(), "") == 0
			 ? "LC IC:a IC:d LN IN:c IN:f IC:a IC:d"
			 : "LC IC:a IC:d LN IN:c IN:f IC:a IC:d DC:a DN:c");
	if (revalidate_rows[_i].failures) {
		assert_counts(0, 0, 0, 1);
		ck_assert_str_eq(failure_code(0), "unlisted");
	} else {
		assert_counts(1, 0, 1, 0);
	}
}
END_TEST

/* Removal outcomes in one old topology (a, b, c) beside a lone old network
 * f: a container not removed (failed or already gone) holds the rest of
 * its group; a network is never forced, its absence is no failure; every
 * failure is reported on its own and the sweep goes on. */
static const struct {
	const char *what;
	int proxy, workload, network;   /* statuses; 0: not asked */
	const char *want_removals;
	size_t disposed, proxies, networks;
	const char *codes;              /* the failures' codes, in order */
} removal_rows[] = {
	{ "all removed", 204, 204, 204, "DC:b DC:a DN:c DN:f", 1, 1, 2, "" },
	{ "a failed young proxy keeps the workload", 500, 0, 0, "DC:b DN:f", 0, 0, 1, "refused" },
	{ "a proxy already gone keeps the workload", 404, 0, 0, "DC:b DN:f", 0, 0, 1, "" },
	{ "a failed workload keeps its network", 204, 409, 0, "DC:b DC:a DN:f", 0, 1, 1, "refused" },
	{ "a workload already gone keeps its network", 204, 404, 0, "DC:b DC:a DN:f", 0, 1, 1, "" },
	{ "a network in use is refused", 204, 204, 403, "DC:b DC:a DN:c DN:f", 1, 1, 1, "refused" },
	{ "a network already gone", 204, 204, 404, "DC:b DC:a DN:c DN:f", 1, 1, 1, "" },
};

START_TEST(test_removal_outcomes)
{
	struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("b"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("b"), PROXY(ID("b"), NAME1, YOUNG)),
		LIST_N(LISTED(ID("c")) "," LISTED(ID("f"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, YOUNG)),
		INSPECT_N(ID("f"), NETWORK(ID("f"), NAME2, OLD)),
		RM_C(ID("b"), removal_rows[_i].proxy),
		RM_C(ID("a"), removal_rows[_i].workload),
		RM_N(ID("c"), removal_rows[_i].network),
		RM_N(ID("f"), 204),
	};
	const char *codes = removal_rows[_i].codes;
	size_t n_codes = *codes ? 1 : 0;

	for (size_t k = 6; k < 9; k++)
		if (entries[k].status == 404)
			entries[k].body = GONE;
	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	ck_assert_msg(strcmp(removals(), removal_rows[_i].want_removals) == 0, "%s: %s", removal_rows[_i].what,
		      removals());
	assert_counts(removal_rows[_i].disposed, removal_rows[_i].proxies, removal_rows[_i].networks, n_codes);
	if (n_codes) {
		ck_assert_str_eq(failure_code(0), codes);
		ck_assert_ptr_nonnull(strstr(failure_detail(0), NAME1));
	}
}
END_TEST

/* Two failures in two groups: both reported, the rest still removed. */
START_TEST(test_failures_each_reported)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("d"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("d"), WORKLOAD(ID("d"), NAME2, OLD)),
		LIST_N(LISTED(ID("c")) "," LISTED(ID("f"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
		INSPECT_N(ID("f"), NETWORK(ID("f"), NAME2, OLD)),
		RM_C(ID("a"), 500), RM_C(ID("d"), 204),
		{ .method = "DELETE", .path = API "/networks/" ID("f"), .status = 403,
		  .body = "{\"message\":\"error while removing network: network has active endpoints\"}" },
	};

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	ck_assert_str_eq(removals(), "DC:a DC:d DN:f");
	assert_counts(1, 0, 0, 2);
	ck_assert_str_eq(failure_code(0), "refused");
	ck_assert_ptr_nonnull(strstr(failure_detail(0), NAME1));
	ck_assert_str_eq(failure_code(1), "refused");
	ck_assert_ptr_nonnull(strstr(failure_detail(1), NAME2 "-net"));
	/* The status, never the engine's own text (that is for the log). */
	ck_assert_ptr_nonnull(strstr(failure_detail(1), "HTTP 403"));
	ck_assert_ptr_null(strstr(failure_detail(1), "active endpoints"));
}
END_TEST

/* A removal whose connection drops is "unreachable" and holds its group. */
START_TEST(test_removal_unreachable)
{
	static const struct fake_reply entries[] = {
		LIST_C(LISTED(ID("a")) "," LISTED(ID("b"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		INSPECT_C(ID("b"), PROXY(ID("b"), NAME1, OLD)),
		LIST_N(""),
		{ .method = "DELETE", .path = API "/containers/" ID("b"), HANG_UP },
	};

	serve(entries, ELEMENTSOF(entries));
	reap(NULL, DAY_S);
	ck_assert_str_eq(removals(), "DC:b");
	assert_counts(0, 0, 0, 1);
	ck_assert_str_eq(failure_code(0), "unreachable");
}
END_TEST

/* Bad arguments and an unreachable engine: refused at once, no request,
 * done never called. */
START_TEST(test_start_refused)
{
	static const struct fake_reply entries[] = { LIST_C(""), LIST_N("") };

	ck_assert_int_eq(reap_start(&d, DAY_S, NULL, NOW, done_cb, &done), -ENOTCONN);
	serve(entries, ELEMENTSOF(entries));
	ck_assert_int_eq(reap_start(&d, 0, NULL, NOW, done_cb, &done), -EINVAL);
	ck_assert_int_eq(reap_start(&d, -1, NULL, NOW, done_cb, &done), -EINVAL);
	ck_assert_int_eq(reap_start(&d, DAY_S, NULL, NAN, done_cb, &done), -EINVAL);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_uint_eq(fake_engine_request_count(), PROBE_REQUESTS);
	ck_assert_int_eq(done.calls, 0);
}
END_TEST

/* The engine freed mid-sweep: done fires once, and nothing new starts. */
static const struct {
	const char *what;
	struct fake_reply slow;
	const char *code;
} cancel_rows[] = {
	{ "during the inventory", { .path = API "/containers/" ID("a"), .body = WORKLOAD(ID("a"), NAME1, OLD),
				    .delay_ms = 500 }, "unlisted" },
	{ "during a removal", { .method = "DELETE", .path = API "/containers/" ID("a"), .status = 204,
				.delay_ms = 500 }, "unknown" },
};

START_TEST(test_cancelled)
{
	struct fake_reply entries[] = {
		cancel_rows[_i].slow,
		LIST_C(LISTED(ID("a"))),
		INSPECT_C(ID("a"), WORKLOAD(ID("a"), NAME1, OLD)),
		LIST_N(LISTED(ID("c"))),
		INSPECT_N(ID("c"), NETWORK(ID("c"), NAME1, OLD)),
	};
	size_t want_requests = _i == 0 ? 2 : 6;     /* up to the slow one */
	int in_flight = 0;

	serve(entries, ELEMENTSOF(entries));
	ck_assert_int_eq(reap_start(&d, DAY_S, NULL, NOW, done_cb, &done), 0);
	/* hang guard */
	LOOP_RUN_WHILE(base, fake_engine_request_count() != PROBE_REQUESTS + want_requests, RUN_MAX_MS);
	in_flight = fake_engine_request_count() == PROBE_REQUESTS + want_requests;
	ck_assert_msg(in_flight, "%s: %s", cancel_rows[_i].what, trace());
	ck_assert_int_eq(done.calls, 0);
	d.engine = engine_free(d.engine);
	ck_assert_int_eq(done.calls, 1);
	ck_assert_str_eq(failure_code(json_array_size(json_object_get(done.result, "failures")) - 1),
			 cancel_rows[_i].code);
	assert_counts(0, 0, 0, 1);
	loop_run_until(base, NULL, 0, SETTLE_MS);
	ck_assert_int_eq(done.calls, 1);
}
END_TEST

START_TEST(test_result_json)
{
	json_auto_t *failures = json_pack("[{s:s, s:s}]", "code", "refused", "detail", "x");
	struct reap_result r = { .disposed = 3, .proxies_removed = 2, .networks_removed = 1, .failures = failures };
	json_auto_t *j = reap_result_to_json(&r);
	json_auto_t *want = json_pack("{s:i, s:i, s:i, s:O}", "disposed", 3, "proxies_removed", 2,
				      "networks_removed", 1, "failures", failures);

	ck_assert(json_equal(j, want));
}
END_TEST

static Suite *reap_suite(void)
{
	Suite *s = suite_create("reap");
	TCase *tc;

	tc = tcase_create("creation times");
	tcase_add_loop_test(tc, test_time_parse, 0, ELEMENTSOF(time_rows));
	tcase_add_test(tc, test_time_parse_null);
	tcase_add_loop_test(tc, test_cutoff, 0, ELEMENTSOF(cutoff_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("eligibility");
	tcase_add_loop_test(tc, test_item_from_inspect, 0, ELEMENTSOF(item_rows));
	tcase_add_test(tc, test_item_names);
	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_list_filters);
	suite_add_tcase(s, tc);

	tc = tcase_create("grouping and anchors");
	tcase_add_loop_test(tc, test_plan, 0, ELEMENTSOF(plan_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("sweep");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_reaps_in_order);
	tcase_add_test(tc, test_dry_run_removes_nothing);
	tcase_add_test(tc, test_item_long_scope_label);
	tcase_add_test(tc, test_dry_result_bounded);
	tcase_add_test(tc, test_sweep_result_has_no_dry_run_members);
	tcase_add_test(tc, test_lone_and_young);
	tcase_add_test(tc, test_overflow_keeps_everything);
	tcase_add_test(tc, test_scope);
	tcase_add_test(tc, test_start_refused);
	tcase_add_test(tc, test_result_json);
	suite_add_tcase(s, tc);

	tc = tcase_create("inventory failures remove nothing");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_inventory_failure_deletes_nothing, 0, ELEMENTSOF(inventory_rows));
	tcase_add_loop_test(tc, test_revalidation, 0, ELEMENTSOF(revalidate_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("removal");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_removal_outcomes, 0, ELEMENTSOF(removal_rows));
	tcase_add_test(tc, test_failures_each_reported);
	tcase_add_test(tc, test_removal_unreachable);
	tcase_add_loop_test(tc, test_cancelled, 0, ELEMENTSOF(cancel_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reap_suite());
	int failed;

	fake_run_dir_create("check_reap");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fake_run_dir_remove();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
