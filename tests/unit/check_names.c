/* check_names.c — container names, label values, workload labels and
 * filters, pinned to behaviour-docker §3 so our containers and seed-made ones
 * agree. A changed digest here strands every existing sandbox. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "sandbox.h"
#include "names.h"

static json_t *parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &e);

	ck_assert_msg(j != NULL, "test JSON %s: %s", s, e.text);
	return j;
}

static void spec_from(const char *text, struct msb_spec *ret)
{
	json_auto_t *j = parse(text);
	_cleanup_free_ char *msg = NULL;
	const char *field = NULL;

	ck_assert_msg(msb_spec_decode(j, ret, &field, &msg) == 0, "spec %s: %s: %s", text, field,
		      msg);
}

static struct msb_key key_of(const char *scope, const char *thread, const char *agent,
			     const char *call)
{
	return (struct msb_key){ (char *)scope, (char *)thread, (char *)agent, (char *)call };
}

static bool json_eq_text(const json_t *v, const char *text)
{
	json_auto_t *want = parse(text);

	return json_equal((json_t *)v, want);
}

/* ---- container names ------------------------------------------------------ */

#define ALLOW_MCR "\"egress\":\"allowlist\",\"egress_allow\":[\"mcr.microsoft.com\",\"*.data.mcr.microsoft.com\"]"

struct name_row {
	const char *scope, *thread, *agent, *call;
	const char *spec;      /* its kind is the fourth part */
	bool proxy;
	const char *name;
};

static const struct name_row name_rows[] = {
	/* The three vectors of §3; the first is pinned upstream. */
	{ "scope-a", "thread-1", "devops-engineer", "", "{\"kind\":\"bicep\"}", false,
	  "maf-sandbox-docker-6f8a8ed7a21c" },
	{ "scope-a", "thread-1", "devops-engineer", "", "{\"kind\":\"bicep\"," ALLOW_MCR "}", true,
	  "maf-sandbox-docker-8677814e213f" },
	{ "scope-a", "thread-1", "devops-engineer", "call-a", "{\"kind\":\"bicep\"}", false,
	  "maf-sandbox-docker-2a24fa179f75" },
	/* The allowlist in another order and spelling collapses to the same name. */
	{ "scope-a", "thread-1", "devops-engineer", "",
	  "{\"kind\":\"bicep\",\"egress\":\"allowlist\",\"egress_allow\":[\"*.data.mcr.microsoft.com\","
	  "{\"host\":\"mcr.microsoft.com\"},\"MCR.microsoft.com\"]}", true,
	  "maf-sandbox-docker-8677814e213f" },
	/* No proxy, or no hosts: egress_id is "" and the historical name is kept. */
	{ "scope-a", "thread-1", "devops-engineer", "", "{\"kind\":\"bicep\"," ALLOW_MCR "}", false,
	  "maf-sandbox-docker-6f8a8ed7a21c" },
	{ "scope-a", "thread-1", "devops-engineer", "",
	  "{\"kind\":\"bicep\",\"egress\":\"allowlist\",\"egress_allow\":[]}", true,
	  "maf-sandbox-docker-6f8a8ed7a21c" },
	/* Length-prefixed, no separator: these two differ. */
	{ "a|b", "c", "x", "", "{\"kind\":\"k\"}", false, "maf-sandbox-docker-635aaf9144f3" },
	{ "a", "b|c", "x", "", "{\"kind\":\"k\"}", false, "maf-sandbox-docker-0064aa0d6c23" },
};

START_TEST(test_container_name)
{
	const struct name_row *row = &name_rows[_i];
	struct msb_key key = key_of(row->scope, row->thread, row->agent, row->call);
	_cleanup_(msb_spec_release) struct msb_spec spec = { 0 };
	_cleanup_free_ char *egress_id = NULL;
	char name[NAMES_CONTAINER_MAX];

	spec_from(row->spec, &spec);
	egress_id = names_egress_id(&spec, row->proxy);
	names_container(&key, spec.kind, egress_id, name);
	ck_assert_str_eq(name, row->name);
	ck_assert(names_is_ours(name, NULL));
	/* NULL egress_id is the same as "". */
	if (!*egress_id) {
		names_container(&key, spec.kind, NULL, name);
		ck_assert_str_eq(name, row->name);
	}
}
END_TEST

START_TEST(test_name_parts_matter)
{
	struct msb_key base = key_of("s", "t", "a", "");
	struct msb_key other[] = {
		key_of("S", "t", "a", ""), key_of("s", "T", "a", ""), key_of("s", "t", "A", ""),
		key_of("s", "t", "a", "c"), key_of("st", "", "a", ""), key_of("s", "ta", "", ""),
	};
	char want[NAMES_CONTAINER_MAX], got[NAMES_CONTAINER_MAX];

	names_container(&base, "k", "", want);
	for (size_t i = 0; i < ELEMENTSOF(other); i++) {
		names_container(&other[i], "k", "", got);
		ck_assert_str_ne(got, want);
	}
	names_container(&base, "K", "", got);
	ck_assert_str_ne(got, want);
	/* An egress_id and a call_id are different parts. */
	names_container(&base, "k", "allow:x", got);
	ck_assert_str_ne(got, want);
}
END_TEST

/* ---- key spaces: one per owner, root's the seed's ----------------------------- */

struct ns_row {
	const char *call;
	const char *spec;
	bool proxy;
	uid_t ns;
	const char *name;
};

/* Computed (python hashlib over the §3 stream plus "uid:" + the uid), pinned
 * here: a change strands every non-root user's sandboxes. */
static const struct ns_row ns_rows[] = {
	{ "", "{\"kind\":\"bicep\"}", false, 0, "maf-sandbox-docker-6f8a8ed7a21c" },
	{ "", "{\"kind\":\"bicep\"}", false, 1000, "maf-sandbox-docker-dfe4b1d085ca" },
	{ "call-a", "{\"kind\":\"bicep\"}", false, 1000, "maf-sandbox-docker-215d33bdbe3c" },
	{ "", "{\"kind\":\"bicep\"," ALLOW_MCR "}", true, 1000, "maf-sandbox-docker-e494045dbe9b" },
};

START_TEST(test_container_name_ns)
{
	const struct ns_row *row = &ns_rows[_i];
	struct msb_key key = key_of("scope-a", "thread-1", "devops-engineer", row->call);
	_cleanup_(msb_spec_release) struct msb_spec spec = { 0 };
	_cleanup_free_ char *egress_id = NULL;
	char name[NAMES_CONTAINER_MAX], seed[NAMES_CONTAINER_MAX];

	spec_from(row->spec, &spec);
	egress_id = names_egress_id(&spec, row->proxy);
	names_container_ns(&key, spec.kind, egress_id, row->ns, name);
	ck_assert_str_eq(name, row->name);
	ck_assert(names_is_ours(name, NULL));   /* same form: reap, sweeps and proxies still know it */
	names_container(&key, spec.kind, egress_id, seed);
	if (row->ns == NAMES_SEED_UID)
		ck_assert_str_eq(name, seed);       /* root: exactly the seed's name, adopted */
	else
		ck_assert_str_ne(name, seed);       /* a user: never the seed's, never root's */
}
END_TEST

/* Two users' acquires of one key name two containers; neither is root's;
 * the uid part is tagged, so it cannot pass for a call_id or an egress_id
 * (which always starts "allow:"). */
START_TEST(test_key_spaces_are_disjoint)
{
	struct msb_key key = key_of("s", "t", "a", "");
	struct msb_key called = key_of("s", "t", "a", "1000");
	char root[NAMES_CONTAINER_MAX], a[NAMES_CONTAINER_MAX], b[NAMES_CONTAINER_MAX], got[NAMES_CONTAINER_MAX];

	names_container_ns(&key, "k", "", 0, root);
	names_container_ns(&key, "k", "", 1000, a);
	names_container_ns(&key, "k", "", 1001, b);
	ck_assert_str_ne(a, b);
	ck_assert_str_ne(a, root);
	ck_assert_str_ne(b, root);
	names_container_ns(&called, "k", "", 0, got);
	ck_assert_str_ne(got, a);
	names_container_ns(&key, "k", "allow:1000", 0, got);
	ck_assert_str_ne(got, a);
	/* Stable: the same owner's key always names the same container. */
	names_container_ns(&key, "k", NULL, 1000, got);
	ck_assert_str_eq(got, a);
}
END_TEST

START_TEST(test_egress_id)
{
	_cleanup_(msb_spec_release) struct msb_spec allow = { 0 }, empty = { 0 }, closed = { 0 };
	_cleanup_free_ char *with = NULL, *no_proxy = NULL, *none = NULL, *shut = NULL;

	spec_from("{\"kind\":\"bicep\"," ALLOW_MCR "}", &allow);
	spec_from("{\"kind\":\"bicep\",\"egress\":\"allowlist\"}", &empty);
	spec_from("{\"kind\":\"bicep\"}", &closed);
	with = names_egress_id(&allow, true);
	ck_assert_str_eq(with, "allow:*.data.mcr.microsoft.com,mcr.microsoft.com");
	no_proxy = names_egress_id(&allow, false);
	ck_assert_str_eq(no_proxy, "");
	none = names_egress_id(&empty, true);
	ck_assert_str_eq(none, "");
	shut = names_egress_id(&closed, true);
	ck_assert_str_eq(shut, "");
}
END_TEST

/* names_egress_id sorts whatever it is handed, not only decoded specs. */
START_TEST(test_egress_id_sorts)
{
	char *hosts[] = { "z.example", "B.example", "a.example" };
	struct msb_spec spec = { .egress = MSB_EGRESS_ALLOWLIST, .egress_allow = hosts,
				 .n_egress_allow = ELEMENTSOF(hosts) };
	_cleanup_free_ char *id = names_egress_id(&spec, true);

	ck_assert_str_eq(id, "allow:B.example,a.example,z.example");
	/* The spec's own order is left alone. */
	ck_assert_str_eq(hosts[0], "z.example");
}
END_TEST

/* ---- label values ---------------------------------------------------------- */

#define HEX48 "0123456789abcdef0123456789abcdef0123456789abcdef"
#define X63 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

struct label_row {
	const char *in;
	const char *out;
};

static const struct label_row label_rows[] = {
	{ "", "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c" },
	{ "a=b", "sha256-42144f3939c3ffbbf0bf8b1f12affb5c23a4c5bd41e0ff67" },
	{ "devops-engineer", "devops-engineer" },
	{ "A.b_c-9", "A.b_c-9" },
	{ X63, X63 },
	{ X63 "x", "sha256-7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d" },
	/* Looks like a digest: digested, so no value passes as another's digest. */
	{ "sha256-" HEX48, "sha256-f16c95c653938e74dc5274bfa4316c246c85167abb6f4932" },
	/* Not quite a digest: passes through. */
	{ "sha256-0123456789abcdef0123456789abcdef0123456789abcde",
	  "sha256-0123456789abcdef0123456789abcdef0123456789abcde" },
	{ "sha256-0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
	  "sha256-0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF" },
	{ "sha256-" HEX48 "0", "sha256-" HEX48 "0" },
	/* Outside [A-Za-z0-9._-]. */
	{ "h\xc3\xa9llo", "sha256-3c48591d8d098a4538f5e013dfcf406e948eac4d3277b10b" },
	{ "a b", "sha256-c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c203" },
	{ "a/b", "sha256-c14cddc033f64b9dea80ea675cf280a015e672516090a562" },
};

START_TEST(test_label_value)
{
	const struct label_row *row = &label_rows[_i];
	_cleanup_free_ char *got = names_label_value(row->in);

	ck_assert_str_eq(got, row->out);
	if (strcmp(row->in, row->out) != 0)
		ck_assert_uint_eq(strlen(got), strlen("sha256-") + NAMES_LABEL_DIGEST_HEX);
}
END_TEST

/* Never truncated: a shared long prefix does not make two values one. */
START_TEST(test_label_value_long_prefix)
{
	char a[102], b[102];
	_cleanup_free_ char *la = NULL, *lb = NULL;

	memset(a, 'x', 100);
	memcpy(b, a, 100);
	strcpy(a + 100, "a");
	strcpy(b + 100, "b");
	la = names_label_value(a);
	lb = names_label_value(b);
	ck_assert_str_eq(la, "sha256-9006ee61ca30ddb087f1beb1d2cfb135bcfb048b0a8bf501");
	ck_assert_str_eq(lb, "sha256-b310f85a8097749d98ce79258d0b79d21e161be6fd85d714");
}
END_TEST

/* ---- workload labels --------------------------------------------------------- */

#define IDENTITY \
	"\"maf-sandbox.scope\":\"scope-a\",\"maf-sandbox.thread\":\"thread-1\"," \
	"\"maf-sandbox.agent\":\"devops-engineer\",\"maf-sandbox.kind\":\"bicep\""

struct workload_row {
	const char *call;
	const char *spec;
	uid_t owner;
	const char *labels;
};

static const struct workload_row workload_rows[] = {
	/* Conversation scope: no call label; the default work dir. */
	{ "", "{\"kind\":\"bicep\"}", 1000,
	  "{" IDENTITY ",\"maf-sandbox.work-dir.v1\":\"/maf-sandbox/work\","
	  "\"maf-sandbox.owner\":\"1000\"}" },
	/* Call scope: the call label, written at create. */
	{ "call-a", "{\"kind\":\"bicep\"}", 0,
	  "{" IDENTITY ",\"maf-sandbox.call\":\"call-a\","
	  "\"maf-sandbox.work-dir.v1\":\"/maf-sandbox/work\",\"maf-sandbox.owner\":\"0\"}" },
	/* The spec's labels: the key raw, the value through label_value; the work
	 * dir raw (a space is fine). */
	{ "", "{\"kind\":\"bicep\",\"work_dir\":\"/srv/my work\",\"labels\":{\"team\":\"infra\","
	      "\"note\":\"a=b\",\"Odd Key=1\":\"v\"}}", 4294967294u,
	  "{" IDENTITY ",\"maf-sandbox.label.team\":\"infra\","
	  "\"maf-sandbox.label.note\":\"sha256-42144f3939c3ffbbf0bf8b1f12affb5c23a4c5bd41e0ff67\","
	  "\"maf-sandbox.label.Odd Key=1\":\"v\",\"maf-sandbox.work-dir.v1\":\"/srv/my work\","
	  "\"maf-sandbox.owner\":\"4294967294\"}" },
};

START_TEST(test_workload_labels)
{
	const struct workload_row *row = &workload_rows[_i];
	struct msb_key key = key_of("scope-a", "thread-1", "devops-engineer", row->call);
	_cleanup_(msb_spec_release) struct msb_spec spec = { 0 };
	json_auto_t *labels = NULL;
	_cleanup_free_ char *dump = NULL;

	spec_from(row->spec, &spec);
	labels = names_workload_labels(&key, &spec, row->owner);
	dump = json_dumps(labels, JSON_SORT_KEYS);
	ck_assert_msg(json_eq_text(labels, row->labels), "got %s", dump);
}
END_TEST

/* Identity values go through label_value; role and key.v1 are the proxy's only. */
START_TEST(test_workload_labels_digested)
{
	struct msb_key key = key_of(X63 "x", "a b", "agent", "a=b");
	_cleanup_(msb_spec_release) struct msb_spec spec = { 0 };
	json_auto_t *labels = NULL;

	spec_from("{\"kind\":\"sha256-" HEX48 "\"}", &spec);
	labels = names_workload_labels(&key, &spec, 1);
	ck_assert_str_eq(json_string_value(json_object_get(labels, LABEL_SCOPE)),
			 "sha256-7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d");
	ck_assert_str_eq(json_string_value(json_object_get(labels, LABEL_THREAD)),
			 "sha256-c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c203");
	ck_assert_str_eq(json_string_value(json_object_get(labels, LABEL_AGENT)), "agent");
	ck_assert_str_eq(json_string_value(json_object_get(labels, LABEL_CALL)),
			 "sha256-42144f3939c3ffbbf0bf8b1f12affb5c23a4c5bd41e0ff67");
	ck_assert_str_eq(json_string_value(json_object_get(labels, LABEL_KIND)),
			 "sha256-f16c95c653938e74dc5274bfa4316c246c85167abb6f4932");
	ck_assert_ptr_null(json_object_get(labels, LABEL_ROLE));
	ck_assert_ptr_null(json_object_get(labels, "maf-sandbox.key.v1"));
}
END_TEST

/* ---- filters ------------------------------------------------------------------ */

struct filter_row {
	const char *scope, *thread, *agent, *call, *kind;
	uid_t owner;
	const char *filter;
};

static const struct filter_row filter_rows[] = {
	{ "scope-a", "thread-1", "devops-engineer", "call-a", "bicep", 1000,
	  "{\"label\":{\"maf-sandbox.scope=scope-a\":true,\"maf-sandbox.thread=thread-1\":true,"
	  "\"maf-sandbox.agent=devops-engineer\":true,\"maf-sandbox.call=call-a\":true,"
	  "\"maf-sandbox.kind=bicep\":true,\"maf-sandbox.owner=1000\":true}}" },
	/* dispose_scope: scope and thread only; an empty call is not filtered. */
	{ "scope-a", "thread-1", NULL, "", NULL, (uid_t)-1,
	  "{\"label\":{\"maf-sandbox.scope=scope-a\":true,\"maf-sandbox.thread=thread-1\":true}}" },
	{ "scope-a", NULL, NULL, NULL, NULL, 0,
	  "{\"label\":{\"maf-sandbox.scope=scope-a\":true,\"maf-sandbox.owner=0\":true}}" },
	/* Values go through label_value, as on write. */
	{ "a=b", NULL, NULL, NULL, "", (uid_t)-1,
	  "{\"label\":{\"maf-sandbox.scope=sha256-42144f3939c3ffbbf0bf8b1f12affb5c23a4c5bd41e0ff67\":true,"
	  "\"maf-sandbox.kind=sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c\":true}}" },
	{ NULL, NULL, NULL, NULL, NULL, (uid_t)-1, "{\"label\":{}}" },
};

START_TEST(test_label_filter)
{
	const struct filter_row *row = &filter_rows[_i];
	json_auto_t *f = names_label_filter(row->scope, row->thread, row->agent, row->call,
					    row->kind, row->owner);
	_cleanup_free_ char *dump = json_dumps(f, JSON_SORT_KEYS);

	ck_assert_msg(json_eq_text(f, row->filter), "got %s", dump);
}
END_TEST

/* Create and purge use the same mapping: every filter term is a label written. */
START_TEST(test_filter_matches_labels)
{
	struct msb_key key = key_of(X63 "xx", "thread/1", "devops-engineer", "call a");
	_cleanup_(msb_spec_release) struct msb_spec spec = { 0 };
	json_auto_t *labels = NULL, *f = NULL;
	const char *term;
	json_t *v;

	spec_from("{\"kind\":\"unsafe=kind\"}", &spec);
	labels = names_workload_labels(&key, &spec, 501);
	f = names_label_filter(key.scope, key.thread_id, key.agent_dir, key.call_id, spec.kind, 501);
	ck_assert_uint_eq(json_object_size(json_object_get(f, "label")), 6);
	json_object_foreach(json_object_get(f, "label"), term, v) {
		const char *eq = strchr(term, '=');
		_cleanup_free_ char *k = NULL;

		ck_assert_ptr_nonnull(eq);
		k = strndup(term, (size_t)(eq - term));
		ck_assert_msg(json_is_string(json_object_get(labels, k)), "no label %s", k);
		ck_assert_str_eq(json_string_value(json_object_get(labels, k)), eq + 1);
	}
}
END_TEST

/* ---- names_is_ours -------------------------------------------------------------- */

struct ours_row {
	const char *name;
	const char *suffix;
	bool ours;
};

static const struct ours_row ours_rows[] = {
	{ "maf-sandbox-docker-6f8a8ed7a21c", NULL, true },
	{ "maf-sandbox-docker-0123456789ab", NULL, true },
	{ "maf-sandbox-docker-6f8a8ed7a21c-proxy", "-proxy", true },
	{ "maf-sandbox-docker-6f8a8ed7a21c-net", "-net", true },
	/* case */
	{ "maf-sandbox-docker-6F8A8ED7A21C", NULL, false },
	{ "MAF-sandbox-docker-6f8a8ed7a21c", NULL, false },
	/* length */
	{ "maf-sandbox-docker-6f8a8ed7a21", NULL, false },
	{ "maf-sandbox-docker-6f8a8ed7a21c0", NULL, false },
	{ "maf-sandbox-docker-", NULL, false },
	{ "", NULL, false },
	/* suffixes */
	{ "maf-sandbox-docker-6f8a8ed7a21c-proxy", NULL, false },
	{ "maf-sandbox-docker-6f8a8ed7a21c", "-proxy", false },
	{ "maf-sandbox-docker-6f8a8ed7a21c-net", "-proxy", false },
	{ "maf-sandbox-docker-6f8a8ed7a21c-proxyx", "-proxy", false },
	{ "maf-sandbox-docker-6f8a8ed7a21c-prox", "-proxy", false },
	/* not hex, foreign look-alikes */
	{ "maf-sandbox-docker-6f8a8ed7a21g", NULL, false },
	{ "maf-sandbox-docker-6f8a8ed7-21c", NULL, false },
	{ "maf-sandbox-wslc-6f8a8ed7a21c", NULL, false },
	{ "/maf-sandbox-docker-6f8a8ed7a21c", NULL, false },
	{ " maf-sandbox-docker-6f8a8ed7a21c", NULL, false },
	{ "xmaf-sandbox-docker-6f8a8ed7a21c", NULL, false },
	{ "maf-sandbox-6f8a8ed7a21c", NULL, false },
};

START_TEST(test_is_ours)
{
	const struct ours_row *row = &ours_rows[_i];

	ck_assert_msg(names_is_ours(row->name, row->suffix) == row->ours, "\"%s\" suffix %s: want %d",
		      row->name, row->suffix ? row->suffix : "NULL", row->ours);
}
END_TEST

START_TEST(test_is_ours_null)
{
	ck_assert(!names_is_ours(NULL, NULL));
	ck_assert(!names_is_ours(NULL, "-proxy"));
}
END_TEST

static Suite *names_suite(void)
{
	Suite *s = suite_create("names");
	TCase *tc;

	tc = tcase_create("container_name");
	tcase_add_loop_test(tc, test_container_name, 0, ELEMENTSOF(name_rows));
	tcase_add_test(tc, test_name_parts_matter);
	tcase_add_loop_test(tc, test_container_name_ns, 0, ELEMENTSOF(ns_rows));
	tcase_add_test(tc, test_key_spaces_are_disjoint);
	tcase_add_test(tc, test_egress_id);
	tcase_add_test(tc, test_egress_id_sorts);
	suite_add_tcase(s, tc);

	tc = tcase_create("label_value");
	tcase_add_loop_test(tc, test_label_value, 0, ELEMENTSOF(label_rows));
	tcase_add_test(tc, test_label_value_long_prefix);
	suite_add_tcase(s, tc);

	tc = tcase_create("workload_labels");
	tcase_add_loop_test(tc, test_workload_labels, 0, ELEMENTSOF(workload_rows));
	tcase_add_test(tc, test_workload_labels_digested);
	suite_add_tcase(s, tc);

	tc = tcase_create("label_filter");
	tcase_add_loop_test(tc, test_label_filter, 0, ELEMENTSOF(filter_rows));
	tcase_add_test(tc, test_filter_matches_labels);
	suite_add_tcase(s, tc);

	tc = tcase_create("is_ours");
	tcase_add_loop_test(tc, test_is_ours, 0, ELEMENTSOF(ours_rows));
	tcase_add_test(tc, test_is_ours_null);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(names_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
