/* check_spec.c — the sandbox key and spec on the wire (behaviour-core §1.1,
 * §1.2): what is accepted and decoded to what, what is refused and with which
 * field and message, the construction rules in order, and every limit at its
 * edge. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "egress_rule.h"
#include "sandbox.h"

static json_t *parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &e);

	ck_assert_msg(j != NULL, "test JSON %s: %s", s, e.text);
	return j;
}

/* A string of n copies of c. Caller frees. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void spec_ok(const json_t *j, struct msb_spec *ret)
{
	_cleanup_free_ char *msg = NULL, *dump = json_dumps(j, JSON_COMPACT);
	const char *field = "untouched";

	ck_assert_msg(msb_spec_decode(j, ret, &field, &msg) == 0, "spec %.200s refused: %s: %s",
		      dump, field, msg);
	/* reterr_ are written only on failure. */
	ck_assert_str_eq(field, "untouched");
	ck_assert_ptr_null(msg);
}

static void spec_ok_text(const char *text, struct msb_spec *ret)
{
	json_auto_t *j = parse(text);

	spec_ok(j, ret);
}

/* Refused with -EINVAL, naming field, with each fragment (NULL = none) in
 * the message, and ret left as it was. */
static void spec_refused(const json_t *j, const char *field, const char *frag, const char *frag2)
{
	_cleanup_free_ char *msg = NULL, *dump = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	struct msb_spec spec, before;
	const char *got = NULL;

	memset(&spec, 0x5a, sizeof(spec));
	before = spec;
	ck_assert_int_eq(msb_spec_decode(j, &spec, &got, &msg), -EINVAL);
	ck_assert_msg(got && strcmp(got, field) == 0, "%.200s: field \"%s\", want \"%s\"", dump,
		      got ? got : "(null)", field);
	ck_assert_msg(msg != NULL && *msg, "%.200s: no message", dump);
	if (*field)
		ck_assert_msg(strstr(msg, field), "%.200s: message \"%s\" does not name %s", dump, msg,
			      field);
	if (frag)
		ck_assert_msg(strstr(msg, frag), "%.200s: message \"%s\" lacks \"%s\"", dump, msg, frag);
	if (frag2)
		ck_assert_msg(strstr(msg, frag2), "%.200s: message \"%s\" lacks \"%s\"", dump, msg,
			      frag2);
	ck_assert_msg(memcmp(&spec, &before, sizeof(spec)) == 0, "%.200s: ret written on failure",
		      dump);
}

static void key_refused(const json_t *j, const char *field, const char *frag,
			const char *frag2);

/* ---- refused: one row per rule --------------------------------------------------- */

struct refuse_row {
	const char *json;
	const char *field;
	const char *frag, *frag2;
};

#define K "\"kind\":\"k\""

static const struct refuse_row refuse_rows[] = {
	/* not an object */
	{ "[]", "", "object", NULL },
	{ "null", "", "object", NULL },
	{ "\"k\"", "", "object", NULL },
	{ "42", "", "object", NULL },
	/* unknown members, whatever else is wrong */
	{ "{" K ",\"bogus\":1}", "bogus", "unknown", NULL },
	{ "{\"agent_dir\":\"a\"}", "agent_dir", "unknown", NULL },
	{ "{" K ",\"identities\":[]}", "identities", "unknown", NULL },
	{ "{" K ",\"egress_methods\":true}", "egress_methods", "unknown", NULL },
	/* kind */
	{ "{}", "kind", "required", NULL },
	{ "{\"image\":\"alpine\"}", "kind", "required", NULL },
	{ "{\"kind\":\"\"}", "kind", "empty", NULL },
	{ "{\"kind\":null}", "kind", "string", NULL },
	{ "{\"kind\":7}", "kind", "string", NULL },
	{ "{\"kind\":[\"k\"]}", "kind", "string", NULL },
	/* image, image_id */
	{ "{" K ",\"image\":5}", "image", "string", NULL },
	{ "{" K ",\"image\":{}}", "image", "string", NULL },
	{ "{" K ",\"image_id\":[]}", "image_id", "string", NULL },
	{ "{" K ",\"image_id\":true}", "image_id", "string", NULL },
	/* egress: rule 1, unknown strings refused */
	{ "{" K ",\"egress\":\"open\"}", "egress", "open", "allowlist" },
	{ "{" K ",\"egress\":\"Closed\"}", "egress", "one of", NULL },
	{ "{" K ",\"egress\":\"\"}", "egress", "one of", NULL },
	{ "{" K ",\"egress\":null}", "egress", "one of", NULL },
	{ "{" K ",\"egress\":2}", "egress", "string", NULL },
	/* egress_allow without allowlist: rule 2, naming the hosts */
	{ "{" K ",\"egress_allow\":[\"a.example\",\"b.example\"]}", "egress_allow", "a.example",
	  "b.example" },
	{ "{" K ",\"egress\":\"closed\",\"egress_allow\":[\"a.example\"]}", "egress_allow",
	  "a.example", "\"closed\"" },
	{ "{" K ",\"egress\":\"unrestricted\",\"egress_allow\":[{\"host\":\"x.example\"}]}",
	  "egress_allow", "x.example", "\"unrestricted\"" },
	/* egress_allow entries */
	{ "{" K ",\"egress_allow\":\"a.example\"}", "egress_allow", "array", NULL },
	{ "{" K ",\"egress_allow\":{}}", "egress_allow", "array", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[1]}", "egress_allow", "[0]", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a\",null]}", "egress_allow", "[1]", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"\"]}", "egress_allow", "empty", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a,b\"]}", "egress_allow", "comma", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a b\"]}", "egress_allow", "space", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a\\nb\"]}", "egress_allow", "control", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":\"a\",\"methods\":[\"GET\"]}]}",
	  "egress_allow", "egress method rules are not supported", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":\"a\",\"methods\":[]}]}",
	  "egress_allow", "egress method rules are not supported", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":\"a\",\"methods\":\"GET\"}]}",
	  "egress_allow", "egress method rules are not supported", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"methods\":null}]}", "egress_allow",
	  "\"host\"", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":7}]}", "egress_allow",
	  "string", NULL },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":\"a\",\"port\":443}]}",
	  "egress_allow", "port", NULL },
	/* egress_allow entries must be allow rules (proto/egress.h) */
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"*\"]}", "egress_allow",
	  "egress_allow[0] \"*\" is not a valid egress rule", "bare '*'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a.example\",\"https://b.example\"]}",
	  "egress_allow", "egress_allow[1] \"https://b.example\"", "scheme" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a.example/x\"]}", "egress_allow",
	  "egress_allow[0]", "path" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"?.example\"]}", "egress_allow",
	  "egress_allow[0]", "'?'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a.*.example\"]}", "egress_allow",
	  "egress_allow[0]", "'*'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"*example.com\"]}", "egress_allow",
	  "egress_allow[0]", "'*'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"[a].example\"]}", "egress_allow",
	  "egress_allow[0]", "PORT" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a.example:0\"]}", "egress_allow",
	  "egress_allow[0]", "port 0" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[{\"host\":\"a.example:65536\"}]}",
	  "egress_allow", "egress_allow[0]", "1..65535" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"a.example:https\"]}", "egress_allow",
	  "egress_allow[0]", "digits" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"2001:db8::1\"]}", "egress_allow",
	  "egress_allow[0]", "brackets" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"[2001:db8::1\"]}", "egress_allow",
	  "egress_allow[0]", "']'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"example.com.\"]}", "egress_allow",
	  "egress_allow[0]", "empty label" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"-a.example\"]}", "egress_allow",
	  "egress_allow[0]", "'-'" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"127.1\"]}", "egress_allow",
	  "egress_allow[0]", "IPv4" },
	{ "{" K ",\"egress\":\"allowlist\",\"egress_allow\":[\"*.10.0.0.1\"]}", "egress_allow",
	  "egress_allow[0]", "address" },
	/* work_dir */
	{ "{" K ",\"work_dir\":\"\"}", "work_dir", "absolute", NULL },
	{ "{" K ",\"work_dir\":\"work\"}", "work_dir", "absolute", NULL },
	{ "{" K ",\"work_dir\":\"C:\\\\work\"}", "work_dir", "absolute", NULL },
	{ "{" K ",\"work_dir\":\"/a\\\\b\"}", "work_dir", "backslash", NULL },
	{ "{" K ",\"work_dir\":\"/a/../b\"}", "work_dir", "..", NULL },
	{ "{" K ",\"work_dir\":\"/a/..\"}", "work_dir", "..", NULL },
	{ "{" K ",\"work_dir\":\"/..\"}", "work_dir", "..", NULL },
	{ "{" K ",\"work_dir\":3}", "work_dir", "string", NULL },
	{ "{" K ",\"work_dir\":[\"/a\"]}", "work_dir", "string", NULL },
	/* labels */
	{ "{" K ",\"labels\":[]}", "labels", "object", NULL },
	{ "{" K ",\"labels\":\"a=b\"}", "labels", "object", NULL },
	{ "{" K ",\"labels\":null}", "labels", "object", NULL },
	{ "{" K ",\"labels\":{\"a\":1}}", "labels", "string", "\"a\"" },
	{ "{" K ",\"labels\":{\"a\":\"x\",\"b\":null}}", "labels", "string", "\"b\"" },
	/* requires: unknown capabilities, rule 4 */
	{ "{" K ",\"requires\":\"exec\"}", "requires", "array", NULL },
	{ "{" K ",\"requires\":null}", "requires", "array", NULL },
	{ "{" K ",\"requires\":[\"exec\",\"fly\"]}", "requires", "fly", NULL },
	{ "{" K ",\"requires\":[\"EXEC\"]}", "requires", "EXEC", NULL },
	{ "{" K ",\"requires\":[1]}", "requires", "[0]", NULL },
	{ "{" K ",\"requires\":[\"exec\",\"reclaim\"]}", "requires",
	  "reclaim is a backend declaration, never a requirement", NULL },
	{ "{" K ",\"requires\":[\"reclaim\"]}", "requires",
	  "reclaim is a backend declaration, never a requirement", NULL },
	/* min_isolation */
	{ "{" K ",\"min_isolation\":\"process\"}", "min_isolation", "\"process\"", "os_process" },
	{ "{" K ",\"min_isolation\":\"strong\"}", "min_isolation", "strong", "microvm" },
	{ "{" K ",\"min_isolation\":\"VM\"}", "min_isolation", "one of", NULL },
	{ "{" K ",\"min_isolation\":3}", "min_isolation", "string", NULL },
	/* isolation_scope */
	{ "{" K ",\"isolation_scope\":\"thread\"}", "isolation_scope", "thread", "conversation" },
	{ "{" K ",\"isolation_scope\":null}", "isolation_scope", "one of", NULL },
	{ "{" K ",\"isolation_scope\":1}", "isolation_scope", "string", NULL },
	/* requires_os_family */
	{ "{" K ",\"requires_os_family\":\"linux\"}", "requires_os_family", "linux", "posix" },
	{ "{" K ",\"requires_os_family\":[\"posix\"]}", "requires_os_family", "string", NULL },
	/* transfer limits: shape, sign, members */
	{ "{" K ",\"files_in\":\"8M\"}", "files_in", "object", NULL },
	{ "{" K ",\"files_in\":null}", "files_in", "object", NULL },
	{ "{" K ",\"files_in\":{\"max_bytes_per_file\":-1,\"max_total_bytes\":1,\"max_files\":1}}",
	  "files_in", "files_in.max_bytes_per_file", "non-negative" },
	{ "{" K ",\"files_in\":{\"max_bytes_per_file\":1,\"max_total_bytes\":1}}", "files_in",
	  "files_in.max_files", "required" },
	{ "{" K ",\"files_in\":{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":1,"
	  "\"max_dirs\":1}}", "files_in", "max_dirs", "unknown" },
	{ "{" K ",\"files_out\":{\"max_bytes_per_file\":1,\"max_total_bytes\":1.5,\"max_files\":1}}",
	  "files_out", "files_out.max_total_bytes", "integer" },
	{ "{" K ",\"files_out\":{\"max_bytes_per_file\":1,\"max_total_bytes\":1,\"max_files\":-64}}",
	  "files_out", "files_out.max_files", "non-negative" },
	{ "{" K ",\"files_out\":{\"max_bytes_per_file\":\"1\",\"max_total_bytes\":1,\"max_files\":1}}",
	  "files_out", "files_out.max_bytes_per_file", NULL },
	{ "{" K ",\"files_out\":[]}", "files_out", "object", NULL },
	/* accepted but not acted on: type only */
	{ "{" K ",\"declared_outputs\":{}}", "declared_outputs", "array", NULL },
	{ "{" K ",\"declared_outputs\":null}", "declared_outputs", "array", NULL },
	{ "{" K ",\"outputs_named_at_call_time\":\"yes\"}", "outputs_named_at_call_time", "true or false", NULL },
	{ "{" K ",\"outputs_named_at_call_time\":1}", "outputs_named_at_call_time", "true or false", NULL },
	{ "{" K ",\"confined_to_guest_call_path\":null}", "confined_to_guest_call_path", "true or false", NULL },
	{ "{" K ",\"host_tools\":[]}", "host_tools", "object", NULL },
	{ "{" K ",\"host_tools\":true}", "host_tools", "object", NULL },
	{ "{" K ",\"min_cleanup\":\"destroy\"}", "min_cleanup", "destroy", "dispose" },
	{ "{" K ",\"min_cleanup\":\"RESET\"}", "min_cleanup", "one of", NULL },
	{ "{" K ",\"min_cleanup\":2}", "min_cleanup", "string", NULL },
	/* host_tools without the capability: rule 5 */
	{ "{" K ",\"host_tools\":{}}", "host_tools", "requires", NULL },
	{ "{" K ",\"host_tools\":{\"names\":[\"t\"]},\"requires\":[\"exec\"]}", "host_tools",
	  "requires", NULL },
	/* The rules run in §1.2's order: 2 before 4 before 5. */
	{ "{" K ",\"egress_allow\":[\"a.example\"],\"requires\":[\"reclaim\"],\"host_tools\":{}}",
	  "egress_allow", "a.example", NULL },
	{ "{" K ",\"requires\":[\"reclaim\"],\"host_tools\":{}}", "requires", "reclaim", NULL },
	/* A type error is reported before any rule. */
	{ "{" K ",\"egress_allow\":[\"a.example\"],\"labels\":[]}", "labels", "object", NULL },
};

START_TEST(test_refused)
{
	const struct refuse_row *row = &refuse_rows[_i];
	json_auto_t *j = parse(row->json);

	spec_refused(j, row->field, row->frag, row->frag2);
}
END_TEST

/* Rule 2 names at most eight hosts, then says how many more. */
START_TEST(test_refused_many_hosts)
{
	json_auto_t *j = parse("{" K ",\"egress_allow\":[\"h0\",\"h1\",\"h2\",\"h3\",\"h4\",\"h5\","
			       "\"h6\",\"h7\",\"h8\",\"h9\"]}");
	_cleanup_free_ char *msg = NULL;
	const char *field = NULL;
	struct msb_spec spec;

	spec_refused(j, "egress_allow", "h0, h1, h2, h3, h4, h5, h6, h7", "and 2 more");
	ck_assert_int_eq(msb_spec_decode(j, &spec, &field, &msg), -EINVAL);
	ck_assert_ptr_null(strstr(msg, "h8"));
}
END_TEST

/* ---- accepted --------------------------------------------------------------------- */

START_TEST(test_defaults)
{
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };

	spec_ok_text("{\"kind\":\"bicep\"}", &s);
	ck_assert_str_eq(s.kind, "bicep");
	ck_assert_ptr_null(s.image);
	ck_assert_ptr_null(s.image_id);
	ck_assert_ptr_null(msb_spec_image_ref(&s));
	ck_assert_int_eq(s.egress, MSB_EGRESS_CLOSED);
	ck_assert_uint_eq(s.n_egress_allow, 0);
	ck_assert_ptr_null(s.work_dir);
	ck_assert_str_eq(msb_spec_work_dir(&s), MSB_DEFAULT_WORK_DIR);
	ck_assert_str_eq(msb_spec_work_dir(&s), "/maf-sandbox/work");
	ck_assert(json_is_object(s.labels));
	ck_assert_uint_eq(json_object_size(s.labels), 0);
	ck_assert_uint_eq(s.requires, MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_FILES_IN));
	ck_assert_int_eq(s.min_isolation, -1);
	ck_assert_int_eq(s.isolation_scope, MSB_SCOPE_CONVERSATION);
	ck_assert_int_eq(s.requires_os_family, -1);
	ck_assert_uint_eq(s.files_in.max_bytes_per_file, 8u * 1024 * 1024);
	ck_assert_uint_eq(s.files_in.max_total_bytes, 32u * 1024 * 1024);
	ck_assert_uint_eq(s.files_in.max_files, 64);
	ck_assert_uint_eq(s.files_out.max_bytes_per_file, MSB_DEFAULT_FILE_BYTES);
	ck_assert_uint_eq(s.files_out.max_total_bytes, MSB_DEFAULT_TOTAL_BYTES);
	ck_assert_uint_eq(s.files_out.max_files, MSB_DEFAULT_FILES);
}
END_TEST

/* Null is "no opinion" for the optional members, and "" an absent image. */
START_TEST(test_nulls_are_defaults)
{
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };

	spec_ok_text("{\"kind\":\"k\",\"image\":null,\"image_id\":\"\",\"work_dir\":null,"
		     "\"min_isolation\":null,\"requires_os_family\":null,\"host_tools\":null,"
		     "\"min_cleanup\":null}", &s);
	ck_assert_ptr_null(s.image);
	ck_assert_ptr_null(s.image_id);
	ck_assert_ptr_null(s.work_dir);
	ck_assert_int_eq(s.min_isolation, -1);
	ck_assert_int_eq(s.requires_os_family, -1);
}
END_TEST

START_TEST(test_every_member)
{
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };

	spec_ok_text("{\"kind\":\"bicep\",\"image\":\"alpine:3\",\"image_id\":\"sha256:abc\","
		     "\"egress\":\"allowlist\",\"egress_allow\":[\"mcr.microsoft.com\"],"
		     "\"work_dir\":\"/srv/my work\",\"labels\":{\"team\":\"infra\",\"note\":\"a=b\"},"
		     "\"requires\":[\"exec\",\"files_out\",\"host_tools\",\"files_delete\"],"
		     "\"min_isolation\":\"microvm\",\"declared_outputs\":[{\"path\":\"out.txt\"}],"
		     "\"files_in\":{\"max_bytes_per_file\":1,\"max_total_bytes\":2,\"max_files\":3},"
		     "\"files_out\":{\"max_bytes_per_file\":4,\"max_total_bytes\":5,\"max_files\":6},"
		     "\"outputs_named_at_call_time\":true,\"requires_os_family\":\"posix\","
		     "\"host_tools\":{\"names\":[\"az\"]},\"isolation_scope\":\"call\","
		     "\"confined_to_guest_call_path\":false,\"min_cleanup\":\"reset\"}", &s);
	ck_assert_str_eq(s.kind, "bicep");
	ck_assert_str_eq(s.image, "alpine:3");
	ck_assert_str_eq(s.image_id, "sha256:abc");
	ck_assert_str_eq(msb_spec_image_ref(&s), "sha256:abc");
	ck_assert_int_eq(s.egress, MSB_EGRESS_ALLOWLIST);
	ck_assert_uint_eq(s.n_egress_allow, 1);
	ck_assert_str_eq(s.egress_allow[0], "mcr.microsoft.com");
	ck_assert_str_eq(s.work_dir, "/srv/my work");
	ck_assert_str_eq(msb_spec_work_dir(&s), "/srv/my work");
	ck_assert_uint_eq(json_object_size(s.labels), 2);
	ck_assert_str_eq(json_string_value(json_object_get(s.labels, "team")), "infra");
	ck_assert_str_eq(json_string_value(json_object_get(s.labels, "note")), "a=b");
	ck_assert_uint_eq(s.requires, MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_FILES_OUT) |
				      MSB_BIT(MSB_CAP_HOST_TOOLS) | MSB_BIT(MSB_CAP_FILES_DELETE));
	ck_assert_int_eq(s.min_isolation, MSB_ISOLATION_MICROVM);
	ck_assert_int_eq(s.isolation_scope, MSB_SCOPE_CALL);
	ck_assert_int_eq(s.requires_os_family, MSB_OS_POSIX);
	ck_assert_uint_eq(s.files_in.max_bytes_per_file, 1);
	ck_assert_uint_eq(s.files_in.max_total_bytes, 2);
	ck_assert_uint_eq(s.files_in.max_files, 3);
	ck_assert_uint_eq(s.files_out.max_bytes_per_file, 4);
	ck_assert_uint_eq(s.files_out.max_total_bytes, 5);
	ck_assert_uint_eq(s.files_out.max_files, 6);
}
END_TEST

/* The spec owns its labels: changing the input afterwards changes nothing. */
START_TEST(test_labels_copied)
{
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
	json_auto_t *j = parse("{\"kind\":\"k\",\"labels\":{\"a\":\"1\"}}");

	spec_ok(j, &s);
	json_object_set_new(json_object_get(j, "labels"), "a", json_string("2"));
	json_object_set_new(json_object_get(j, "labels"), "b", json_string("3"));
	ck_assert_uint_eq(json_object_size(s.labels), 1);
	ck_assert_str_eq(json_string_value(json_object_get(s.labels, "a")), "1");
}
END_TEST

START_TEST(test_image_ref)
{
	_cleanup_(msb_spec_release) struct msb_spec a = { 0 }, b = { 0 };

	spec_ok_text("{\"kind\":\"k\",\"image\":\"alpine\"}", &a);
	ck_assert_str_eq(msb_spec_image_ref(&a), "alpine");
	spec_ok_text("{\"kind\":\"k\",\"image\":\"alpine\",\"image_id\":\"\"}", &b);
	ck_assert_str_eq(msb_spec_image_ref(&b), "alpine");
}
END_TEST

struct allow_row {
	const char *allow;         /* the egress_allow array */
	const char *const want[8]; /* normalised, NULL-terminated */
};

static const struct allow_row allow_rows[] = {
	{ "[]", { NULL } },
	{ "[\"mcr.microsoft.com\",\"*.data.mcr.microsoft.com\"]",
	  { "*.data.mcr.microsoft.com", "mcr.microsoft.com", NULL } },
	/* Keyed by lower-case host; the first spelling wins; sorted by code point
	 * (upper case first), as the name digest sorts. */
	{ "[\"b.example\",\"B.Example\",\"a.example\",\"B.EXAMPLE\"]", { "a.example", "b.example", NULL } },
	{ "[\"B.example\",\"a.example\",\"b.EXAMPLE\",{\"host\":\"c.example\"},"
	  "{\"host\":\"A.example\",\"methods\":null}]", { "B.example", "a.example", "c.example", NULL } },
	{ "[{\"host\":\"x.example\"},\"x.example\",\"X.EXAMPLE\"]", { "x.example", NULL } },
	/* Every form of allow rule (proto/egress.h); a port makes another entry. */
	{ "[\"a.example:8443\",\"*.b.example\",\"[2001:db8::1]:443\",\"10.0.0.1\",\"a.example\","
	  "\"_x-1.example:1\"]",
	  { "*.b.example", "10.0.0.1", "[2001:db8::1]:443", "_x-1.example:1", "a.example",
	    "a.example:8443" } },
};

START_TEST(test_egress_allow_normalised)
{
	const struct allow_row *row = &allow_rows[_i];
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
	_cleanup_free_ char *text = NULL;
	size_t n = 0;

	ck_assert_int_ge(asprintf(&text, "{\"kind\":\"k\",\"egress\":\"allowlist\",\"egress_allow\":%s}",
				  row->allow), 0);
	spec_ok_text(text, &s);
	while (row->want[n])
		n++;
	ck_assert_uint_eq(s.n_egress_allow, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(s.egress_allow[i], row->want[i]);
}
END_TEST

START_TEST(test_requires_sets)
{
	_cleanup_(msb_spec_release) struct msb_spec none = { 0 }, dup = { 0 }, all = { 0 };

	spec_ok_text("{\"kind\":\"k\",\"requires\":[]}", &none);
	ck_assert_uint_eq(none.requires, 0);
	spec_ok_text("{\"kind\":\"k\",\"requires\":[\"exec\",\"exec\",\"snapshot\"]}", &dup);
	ck_assert_uint_eq(dup.requires, MSB_BIT(MSB_CAP_EXEC) | MSB_BIT(MSB_CAP_SNAPSHOT));
	spec_ok_text("{\"kind\":\"k\",\"requires\":[\"exec\",\"run_code\",\"host_tools\",\"files_in\","
		     "\"files_out\",\"files_list\",\"files_delete\",\"snapshot\","
		     "\"attached_identity\",\"egress_methods\"]}", &all);
	ck_assert_uint_eq(all.requires, (MSB_BIT(_MSB_CAP_MAX) - 1) & ~MSB_BIT(MSB_CAP_RECLAIM));
}
END_TEST

/* Every wire string of the enums the spec carries decodes to its value. */
START_TEST(test_enum_members)
{
	for (int v = 0; v < _MSB_ISOLATION_MAX; v++) {
		_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
		json_auto_t *j = json_pack("{s:s, s:s}", "kind", "k", "min_isolation",
					   msb_isolation_to_string(v));

		spec_ok(j, &s);
		ck_assert_int_eq(s.min_isolation, v);
	}
	for (int v = 0; v < _MSB_SCOPE_MAX; v++) {
		_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
		json_auto_t *j = json_pack("{s:s, s:s}", "kind", "k", "isolation_scope",
					   msb_scope_to_string(v));

		spec_ok(j, &s);
		ck_assert_int_eq(s.isolation_scope, v);
	}
	for (int v = 0; v < _MSB_OS_MAX; v++) {
		_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
		json_auto_t *j = json_pack("{s:s, s:s}", "kind", "k", "requires_os_family",
					   msb_os_family_to_string(v));

		spec_ok(j, &s);
		ck_assert_int_eq(s.requires_os_family, v);
	}
	for (int v = 0; v < _MSB_EGRESS_MAX; v++) {
		_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
		json_auto_t *j = json_pack("{s:s, s:s}", "kind", "k", "egress", msb_egress_to_string(v));

		spec_ok(j, &s);
		ck_assert_int_eq(s.egress, v);
	}
}
END_TEST

/* Members the daemon does not act on are accepted in every legal shape. */
static const char *const ignored_ok[] = {
	"{" K ",\"declared_outputs\":[]}",
	"{" K ",\"declared_outputs\":[{\"path\":\"a\",\"disposition\":\"land\"},1]}",
	"{" K ",\"outputs_named_at_call_time\":false}",
	"{" K ",\"confined_to_guest_call_path\":true}",
	"{" K ",\"min_cleanup\":\"reclaim\"}",
	"{" K ",\"min_cleanup\":\"reset\"}",
	"{" K ",\"min_cleanup\":\"dispose\"}",
	"{" K ",\"host_tools\":{},\"requires\":[\"host_tools\"]}",
	"{" K ",\"host_tools\":null,\"requires\":[]}",
	/* Allowlist with no hosts is legal (it runs closed). */
	"{" K ",\"egress\":\"allowlist\"}",
	"{" K ",\"egress\":\"unrestricted\",\"egress_allow\":[]}",
	/* Work dirs: ".." only as a whole component is refused. */
	"{" K ",\"work_dir\":\"/\"}",
	"{" K ",\"work_dir\":\"/a/..b/c..\"}",
	"{" K ",\"work_dir\":\"/a/./b//c/\"}",
	/* Label keys and values of any text. */
	"{" K ",\"labels\":{\"\":\"\",\"k=v\":\"h\\u00e9\"}}",
};

START_TEST(test_ignored_members)
{
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };

	spec_ok_text(ignored_ok[_i], &s);
}
END_TEST

/* Transfer limits are the workload's own; comparing them with the backend's
 * ceilings is the router's refusal (1103), not a decode error. */
START_TEST(test_limits_extremes)
{
	_cleanup_(msb_spec_release) struct msb_spec lo = { 0 }, hi = { 0 };

	spec_ok_text("{" K ",\"files_in\":{\"max_bytes_per_file\":0,\"max_total_bytes\":0,"
		     "\"max_files\":0}}", &lo);
	ck_assert_uint_eq(lo.files_in.max_bytes_per_file, 0);
	ck_assert_uint_eq(lo.files_in.max_files, 0);
	ck_assert_uint_eq(lo.files_out.max_files, MSB_DEFAULT_FILES);
	spec_ok_text("{" K ",\"files_out\":{\"max_bytes_per_file\":9223372036854775807,"
		     "\"max_total_bytes\":9223372036854775807,\"max_files\":9223372036854775807}}",
		     &hi);
	ck_assert_uint_eq(hi.files_out.max_total_bytes, INT64_MAX);
	ck_assert_uint_eq(hi.files_in.max_total_bytes, MSB_DEFAULT_TOTAL_BYTES);
}
END_TEST

/* ---- limits at their edges ----------------------------------------------------------- */

/* {"kind":"k", member: value} with value stolen. */
static json_t *spec_with(const char *member, json_t *value)
{
	json_t *j = json_pack("{s:s}", "kind", "k");

	json_object_set_new(j, member, value);
	return j;
}

START_TEST(test_kind_length)
{
	_cleanup_free_ char *ok = repeat('k', MSB_KEY_FIELD_MAX_BYTES);
	_cleanup_free_ char *over = repeat('k', MSB_KEY_FIELD_MAX_BYTES + 1);
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
	json_auto_t *a = json_pack("{s:s}", "kind", ok);
	json_auto_t *b = json_pack("{s:s}", "kind", over);

	spec_ok(a, &s);
	ck_assert_uint_eq(strlen(s.kind), MSB_KEY_FIELD_MAX_BYTES);
	spec_refused(b, "kind", "1025", "1024");
}
END_TEST

/* The string members limited to MSB_SPEC_STRING_MAX_BYTES. */
START_TEST(test_string_lengths)
{
	static const char *const members[] = { "image", "image_id", "work_dir" };
	const char *member = members[_i];
	_cleanup_free_ char *ok = repeat('/', MSB_SPEC_STRING_MAX_BYTES);
	_cleanup_free_ char *over = repeat('/', MSB_SPEC_STRING_MAX_BYTES + 1);
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 };
	json_auto_t *a = spec_with(member, json_string(ok));
	json_auto_t *b = spec_with(member, json_string(over));

	spec_ok(a, &s);
	spec_refused(b, member, "4097", "4096");
}
END_TEST

START_TEST(test_label_limits)
{
	_cleanup_free_ char *ok = repeat('v', MSB_SPEC_STRING_MAX_BYTES);
	_cleanup_free_ char *over = repeat('v', MSB_SPEC_STRING_MAX_BYTES + 1);
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 }, s2 = { 0 };
	json_auto_t *many = json_object(), *too_many = json_object();
	json_auto_t *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;

	for (int i = 0; i < MSB_SPEC_MAX_LABELS; i++) {
		char k[16];

		snprintf(k, sizeof(k), "l%d", i);
		json_object_set_new(many, k, json_string("v"));
		json_object_set_new(too_many, k, json_string("v"));
	}
	json_object_set_new(too_many, "one-more", json_string("v"));
	a = spec_with("labels", json_incref(many));
	spec_ok(a, &s);
	ck_assert_uint_eq(json_object_size(s.labels), MSB_SPEC_MAX_LABELS);
	b = spec_with("labels", json_incref(too_many));
	spec_refused(b, "labels", "65", "64");
	c = spec_with("labels", json_pack("{s:s}", ok, ok));
	spec_ok(c, &s2);
	d = spec_with("labels", json_pack("{s:s}", "k", over));
	spec_refused(d, "labels", "4097", "\"k\"");
	e = spec_with("labels", json_pack("{s:s}", over, "v"));
	spec_refused(e, "labels", "4097", NULL);
}
END_TEST

START_TEST(test_egress_allow_limits)
{
	_cleanup_free_ char *l63 = repeat('l', 63), *host_ok = NULL;
	_cleanup_free_ char *host_long = repeat('h', MSB_SPEC_STRING_MAX_BYTES);
	_cleanup_free_ char *host_over = repeat('h', MSB_SPEC_STRING_MAX_BYTES + 1);
	_cleanup_(msb_spec_release) struct msb_spec s = { 0 }, s2 = { 0 };
	json_auto_t *hosts = json_array(), *dups = json_array();
	json_auto_t *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;

	/* The longest allow rule: a 253-byte host and a five-digit port. */
	ck_assert_int_ge(asprintf(&host_ok, "%s.%s.%s.%.61s:65535", l63, l63, l63, l63), 0);
	ck_assert_uint_eq(strlen(host_ok), MSB_EGRESS_ENTRY_MAX);

	for (int i = 0; i < MSB_SPEC_MAX_EGRESS_ALLOW; i++) {
		char h[32];

		snprintf(h, sizeof(h), "h%03d.example", i);
		json_array_append_new(hosts, json_string(h));
		json_array_append_new(dups, json_string("same.example"));
	}
	a = json_pack("{s:s, s:s, s:O}", "kind", "k", "egress", "allowlist", "egress_allow", hosts);
	spec_ok(a, &s);
	ck_assert_uint_eq(s.n_egress_allow, MSB_SPEC_MAX_EGRESS_ALLOW);
	ck_assert_str_eq(s.egress_allow[0], "h000.example");
	ck_assert_str_eq(s.egress_allow[MSB_SPEC_MAX_EGRESS_ALLOW - 1], "h255.example");
	json_array_append_new(hosts, json_string("one-more.example"));
	b = json_pack("{s:s, s:s, s:O}", "kind", "k", "egress", "allowlist", "egress_allow", hosts);
	spec_refused(b, "egress_allow", "257", "256");
	/* The bound is on what is sent, before duplicates collapse. */
	json_array_append_new(dups, json_string("same.example"));
	c = json_pack("{s:s, s:s, s:O}", "kind", "k", "egress", "allowlist", "egress_allow", dups);
	spec_refused(c, "egress_allow", "257", NULL);
	d = json_pack("{s:s, s:s, s:[s]}", "kind", "k", "egress", "allowlist", "egress_allow",
		      host_ok);
	spec_ok(d, &s2);
	ck_assert_str_eq(s2.egress_allow[0], host_ok);
	e = json_pack("{s:s, s:s, s:[{s:s}]}", "kind", "k", "egress", "allowlist", "egress_allow",
		      "host", host_over);
	spec_refused(e, "egress_allow", "4097", NULL);
	/* Within the string limit but no allow rule. */
	f = json_pack("{s:s, s:s, s:[s]}", "kind", "k", "egress", "allowlist", "egress_allow",
		      host_long);
	spec_refused(f, "egress_allow", "not a valid egress rule", "259");
}
END_TEST

/* Client text echoed in a message is bounded. */
START_TEST(test_echo_bounded)
{
	_cleanup_free_ char *member = repeat('m', 5000);
	_cleanup_free_ char *msg = NULL;
	json_auto_t *j = spec_with(member, json_true());
	const char *field = NULL;
	struct msb_spec s;

	ck_assert_int_eq(msb_spec_decode(j, &s, &field, &msg), -EINVAL);
	ck_assert_str_eq(field, member);
	ck_assert_uint_lt(strlen(msg), 256);
}
END_TEST

/* A NUL inside a string would cut it short in C: refused, never truncated. */
START_TEST(test_nul_refused)
{
	json_auto_t *kind = json_pack("{s:o}", "kind", json_stringn("a\0b", 3));
	json_auto_t *image = spec_with("image", json_stringn("alpine\0x", 8));
	json_auto_t *label = spec_with("labels", json_pack("{s:o}", "a", json_stringn("v\0", 2)));
	json_auto_t *host = json_pack("{s:s, s:s, s:[o]}", "kind", "k", "egress", "allowlist",
				      "egress_allow", json_stringn("a.example\0b", 11));
	json_auto_t *key = json_pack("{s:s, s:s, s:o}", "scope", "s", "thread_id", "t",
				     "agent_dir", json_stringn("a\0", 2));

	spec_refused(kind, "kind", "NUL", NULL);
	spec_refused(image, "image", "NUL", NULL);
	spec_refused(label, "labels", "NUL", "\"a\"");
	spec_refused(host, "egress_allow", "NUL", NULL);
	key_refused(key, "agent_dir", "NUL", NULL);
}
END_TEST

/* ---- key -------------------------------------------------------------------------- */

struct key_ok_row {
	const char *json;
	const char *scope, *thread, *agent, *call;
};

static const struct key_ok_row key_ok_rows[] = {
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}", "s", "t", "a", "" },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"call_id\":\"\"}", "s", "t", "a", "" },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"call_id\":\"c\"}", "s", "t", "a", "c" },
	/* The 0.42+ name, alone or agreeing. */
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_id\":\"a\"}", "s", "t", "a", "" },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_id\":\"a\",\"agent_dir\":\"a\"}", "s", "t", "a", "" },
	{ "{\"call_id\":\"x\",\"agent_dir\":\"h\\u00e9\",\"thread_id\":\"a b\",\"scope\":\"=\"}", "=",
	  "a b", "h\xc3\xa9", "x" },
};

START_TEST(test_key_ok)
{
	const struct key_ok_row *row = &key_ok_rows[_i];
	json_auto_t *j = parse(row->json), *back = NULL;
	_cleanup_(msb_key_release) struct msb_key k = { 0 };
	_cleanup_free_ char *msg = NULL;
	const char *field = "untouched";

	ck_assert_int_eq(msb_key_decode(j, &k, &field, &msg), 0);
	ck_assert_str_eq(field, "untouched");
	ck_assert_ptr_null(msg);
	ck_assert_str_eq(k.scope, row->scope);
	ck_assert_str_eq(k.thread_id, row->thread);
	ck_assert_str_eq(k.agent_dir, row->agent);
	ck_assert_str_eq(k.call_id, row->call);
	/* Encoded under the canonical names, and decodes to the same key. */
	back = msb_key_encode(&k);
	ck_assert_uint_eq(json_object_size(back), 4);
	ck_assert_str_eq(json_string_value(json_object_get(back, "scope")), row->scope);
	ck_assert_str_eq(json_string_value(json_object_get(back, "thread_id")), row->thread);
	ck_assert_str_eq(json_string_value(json_object_get(back, "agent_dir")), row->agent);
	ck_assert_str_eq(json_string_value(json_object_get(back, "call_id")), row->call);
}
END_TEST

static const struct refuse_row key_refuse_rows[] = {
	{ "[]", "", "object", NULL },
	{ "\"s/t/a\"", "", "object", NULL },
	{ "{\"thread_id\":\"t\",\"agent_dir\":\"a\"}", "scope", "required", NULL },
	{ "{\"scope\":\"s\",\"agent_dir\":\"a\"}", "thread_id", "required", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\"}", "agent_dir", "required", NULL },
	{ "{\"scope\":\"\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}", "scope", "empty", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"\",\"agent_dir\":\"a\"}", "thread_id", "empty", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"\"}", "agent_dir", "empty", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_id\":\"\"}", "agent_id", "empty", NULL },
	{ "{\"scope\":1,\"thread_id\":\"t\",\"agent_dir\":\"a\"}", "scope", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":null,\"agent_dir\":\"a\"}", "thread_id", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":[\"a\"]}", "agent_dir", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_id\":{}}", "agent_id", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"call_id\":null}", "call_id", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"call_id\":5}", "call_id", "string", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"agent_id\":\"b\"}", "agent_id",
	  "agent_dir", "disagree" },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"\",\"agent_id\":\"b\"}", "agent_id",
	  "disagree", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"kind\":\"k\"}", "kind", "unknown", NULL },
	{ "{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\",\"thread\":\"t\"}", "thread", "unknown", NULL },
};

static void key_refused(const json_t *j, const char *field, const char *frag, const char *frag2)
{
	_cleanup_free_ char *msg = NULL, *dump = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	struct msb_key k, before;
	const char *got = NULL;

	memset(&k, 0x5a, sizeof(k));
	before = k;
	ck_assert_int_eq(msb_key_decode(j, &k, &got, &msg), -EINVAL);
	ck_assert_msg(got && strcmp(got, field) == 0, "%.200s: field \"%s\", want \"%s\"", dump,
		      got ? got : "(null)", field);
	ck_assert_msg(msg != NULL && *msg, "%.200s: no message", dump);
	if (*field)
		ck_assert_msg(strstr(msg, field), "%.200s: \"%s\" does not name %s", dump, msg, field);
	if (frag)
		ck_assert_msg(strstr(msg, frag), "%.200s: \"%s\" lacks \"%s\"", dump, msg, frag);
	if (frag2)
		ck_assert_msg(strstr(msg, frag2), "%.200s: \"%s\" lacks \"%s\"", dump, msg, frag2);
	ck_assert_msg(memcmp(&k, &before, sizeof(k)) == 0, "%.200s: ret written on failure", dump);
}

START_TEST(test_key_refused)
{
	const struct refuse_row *row = &key_refuse_rows[_i];
	json_auto_t *j = parse(row->json);

	key_refused(j, row->field, row->frag, row->frag2);
}
END_TEST

/* Each of the four fields: MSB_KEY_FIELD_MAX_BYTES accepted, one more refused. */
START_TEST(test_key_field_length)
{
	static const char *const fields[] = { "scope", "thread_id", "agent_dir", "agent_id",
					      "call_id" };
	const char *f = fields[_i];
	_cleanup_free_ char *ok = repeat('x', MSB_KEY_FIELD_MAX_BYTES);
	_cleanup_free_ char *over = repeat('x', MSB_KEY_FIELD_MAX_BYTES + 1);
	_cleanup_(msb_key_release) struct msb_key k = { 0 };
	_cleanup_free_ char *msg = NULL;
	const char *field = NULL;
	json_auto_t *a = json_pack("{s:s, s:s}", "scope", "s", "thread_id", "t");
	json_auto_t *b = NULL;

	if (strcmp(f, "agent_id") != 0)
		json_object_set_new(a, "agent_dir", json_string("a"));
	b = json_deep_copy(a);
	json_object_set_new(a, f, json_string(ok));
	json_object_set_new(b, f, json_string(over));
	ck_assert_int_eq(msb_key_decode(a, &k, &field, &msg), 0);
	key_refused(b, f, "1025", "1024");
}
END_TEST

START_TEST(test_key_release_twice)
{
	json_auto_t *j = parse("{\"scope\":\"s\",\"thread_id\":\"t\",\"agent_dir\":\"a\"}");
	_cleanup_free_ char *msg = NULL;
	const char *field = NULL;
	struct msb_key k;
	struct msb_spec s;

	ck_assert_int_eq(msb_key_decode(j, &k, &field, &msg), 0);
	msb_key_release(&k);
	msb_key_release(&k);
	msb_key_release(NULL);
	spec_ok_text("{\"kind\":\"k\",\"egress\":\"allowlist\",\"egress_allow\":[\"a\"]}", &s);
	msb_spec_release(&s);
	msb_spec_release(&s);
	msb_spec_release(NULL);
}
END_TEST

static Suite *spec_suite(void)
{
	Suite *s = suite_create("spec");
	TCase *tc;

	tc = tcase_create("refused");
	tcase_add_loop_test(tc, test_refused, 0, ELEMENTSOF(refuse_rows));
	tcase_add_test(tc, test_refused_many_hosts);
	tcase_add_test(tc, test_echo_bounded);
	tcase_add_test(tc, test_nul_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("accepted");
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_nulls_are_defaults);
	tcase_add_test(tc, test_every_member);
	tcase_add_test(tc, test_labels_copied);
	tcase_add_test(tc, test_image_ref);
	tcase_add_loop_test(tc, test_egress_allow_normalised, 0, ELEMENTSOF(allow_rows));
	tcase_add_test(tc, test_requires_sets);
	tcase_add_test(tc, test_enum_members);
	tcase_add_loop_test(tc, test_ignored_members, 0, ELEMENTSOF(ignored_ok));
	tcase_add_test(tc, test_limits_extremes);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_add_test(tc, test_kind_length);
	tcase_add_loop_test(tc, test_string_lengths, 0, 3);
	tcase_add_test(tc, test_label_limits);
	tcase_add_test(tc, test_egress_allow_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("key");
	tcase_add_loop_test(tc, test_key_ok, 0, ELEMENTSOF(key_ok_rows));
	tcase_add_loop_test(tc, test_key_refused, 0, ELEMENTSOF(key_refuse_rows));
	tcase_add_loop_test(tc, test_key_field_length, 0, 5);
	tcase_add_test(tc, test_key_release_twice);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spec_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
