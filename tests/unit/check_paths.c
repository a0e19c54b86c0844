/* check_paths.c — guest path rules (behaviour-core §4): lexical confinement,
 * the ancestor walk, the verdicts, the per-method bundles, and the engine's
 * path stat header (engine-api §2.1). Each refusal is pinned to its reason,
 * its errno and its wire type, because "attack" (ConfinementError) and
 * "guest tripped" (NotADirectoryError) must stay apart. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "paths.h"
#include "xmalloc.h"

#define OK (-1)   /* a row that must succeed */

/* The list joined with ",", malloc'd ("" for an empty list). */
static char *join(char *const *list)
{
	size_t len = 1;
	char *s, *p;

	for (char *const *l = list; *l; l++)
		len += strlen(*l) + 1;
	p = s = xmalloc(len);
	*p = '\0';
	for (char *const *l = list; *l; l++) {
		if (l != list)
			*p++ = ',';
		p = stpcpy(p, *l);
	}
	return s;
}

/* Standard padded base64, written independently of the decoder under test. */
static char *b64(const char *in)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(in), o = 0;
	char *out = xmalloc((n + 2) / 3 * 4 + 1);
	const unsigned char *s = (const unsigned char *)in;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		out[o++] = abc[v >> 18];
		out[o++] = abc[(v >> 12) & 63];
		out[o++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? abc[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

/* An absolute path of exactly len bytes made of components of at most comp bytes. */
static char *long_path(size_t len, size_t comp)
{
	char *s = xmalloc(len + 1);
	size_t i = 0;

	while (i < len) {
		size_t n = len - i - 1 < comp ? len - i - 1 : comp;

		s[i++] = '/';
		/* never leave a lone trailing '/' */
		if (n == 0) {
			s[i - 1] = 'x';
			continue;
		}
		memset(s + i, 'a', n);
		i += n;
	}
	s[len] = '\0';
	return s;
}

/* The errno each reason must come with (the -errno contract). */
static const int reason_errno[_PATHS_R_MAX] = {
	[PATHS_R_BACKSLASH] = EINVAL,         [PATHS_R_NUL] = EINVAL,
	[PATHS_R_OUTSIDE] = EPERM,            [PATHS_R_WD_OUTSIDE_BASE] = EPERM,
	[PATHS_R_WORKING_DIRECTORY] = EPERM,  [PATHS_R_NEAR_ROOT] = EPERM,
	[PATHS_R_SYMLINK_ANCESTOR] = ELOOP,   [PATHS_R_SYMLINK_LEAF] = ELOOP,
	[PATHS_R_NOT_A_DIRECTORY] = ENOTDIR,  [PATHS_R_NOT_FOUND] = ENOENT,
	[PATHS_R_NOT_REGULAR] = EINVAL,       [PATHS_R_IS_DIRECTORY] = EISDIR,
	[PATHS_R_TOO_LONG] = ENAMETOOLONG,    [PATHS_R_NAME_TOO_LONG] = ENAMETOOLONG,
	[PATHS_R_TOO_MANY_COMPONENTS] = E2BIG, [PATHS_R_BASE_INVALID] = EINVAL,
	[PATHS_R_STAT_TOO_LONG] = EMSGSIZE,   [PATHS_R_STAT_BASE64] = EPROTO,
	[PATHS_R_STAT_JSON] = EPROTO,         [PATHS_R_STAT_FIELD] = EPROTO,
	[PATHS_R_STAT_SIZE] = EPROTO,         [PATHS_R_STAT_MODE] = EPROTO,
	[PATHS_R_STAT_MTIME] = EPROTO,
};

static void assert_refused(int rc, enum paths_reason got, int want, const char *what)
{
	ck_assert_msg(rc < 0, "%s: accepted, want %s", what, paths_reason_to_string(want));
	ck_assert_msg((int)got == want, "%s: reason \"%s\", want \"%s\"", what,
		      paths_reason_to_string(got), paths_reason_to_string(want));
	ck_assert_int_eq(rc, -reason_errno[want]);
}

/* ---- lexical confinement ---------------------------------------------------- */

struct confine_row {
	const char *path;
	const char *wd;     /* NULL = the base */
	const char *base;   /* NULL = /maf-sandbox/work */
	int reason;         /* OK or an enum paths_reason */
	const char *want;   /* the resolved path */
	const char *rel;
};

#define B "/maf-sandbox/work"

static const struct confine_row confine_rows[] = {
	/* relative, inside */
	{ "a.txt", "/w", NULL, OK, "/w/a.txt", "a.txt" },
	{ "sub/x", "/w", NULL, OK, "/w/sub/x", "sub/x" },
	{ "sub/", "/w", NULL, OK, "/w/sub", "sub" },
	{ "a/../b", "/w", NULL, OK, "/w/b", "b" },
	{ "...", "/w", NULL, OK, "/w/...", "..." },
	{ ".hidden/..x", "/w", NULL, OK, "/w/.hidden/..x", ".hidden/..x" },
	{ "link-dir/sub", "/w", NULL, OK, "/w/link-dir/sub", "link-dir/sub" },
	/* absolute, inside and outside */
	{ "/w/sub/x", "/w", NULL, OK, "/w/sub/x", "sub/x" },
	{ "/etc/passwd", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "/../w/a", "/w", NULL, OK, "/w/a", "a" },
	{ "/..", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	/* the working directory itself */
	{ "", "/w", NULL, OK, "/w", "" },
	{ ".", "/w", NULL, OK, "/w", "" },
	{ "./", "/w", NULL, OK, "/w", "" },
	{ "/w", "/w", NULL, OK, "/w", "" },
	{ "/w/", "/w", NULL, OK, "/w", "" },
	{ "a/..", "/w", NULL, OK, "/w", "" },
	/* traversal */
	{ "..", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "../x", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "a/../../x", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "../w/x", "/w", NULL, OK, "/w/x", "x" },    /* out and back in: lexically inside */
	/* the sibling sharing the working directory's prefix */
	{ "../w-outside/planted.txt", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "/w-outside", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "/w-outside/x", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	{ "/wx", "/w", NULL, PATHS_R_OUTSIDE, NULL, NULL },
	/* double slashes, dots */
	{ "a//b", "/w", NULL, OK, "/w/a/b", "a/b" },
	{ "a/./b/", "/w", NULL, OK, "/w/a/b", "a/b" },
	{ "//w//a", "/w", NULL, OK, "/w/a", "a" },
	{ "a", "//maf-sandbox//work/", NULL, OK, B "/a", "a" },
	/* backslashes: refused wherever they are, before any other rule */
	{ "a\\b", "/w", NULL, PATHS_R_BACKSLASH, NULL, NULL },
	{ "\\", "/w", NULL, PATHS_R_BACKSLASH, NULL, NULL },
	{ "..\\x", "/w", NULL, PATHS_R_BACKSLASH, NULL, NULL },
	{ "../x\\", "/w", NULL, PATHS_R_BACKSLASH, NULL, NULL },
	{ "a", "/w\\x", NULL, PATHS_R_BACKSLASH, NULL, NULL },
	{ "a", ".", "/srv\\base", PATHS_R_BACKSLASH, NULL, NULL },
	/* the working directory relative to the storage base; "." names the base */
	{ "a", ".", NULL, OK, B "/a", "a" },
	{ "a", "", NULL, OK, B "/a", "a" },
	{ "a", NULL, NULL, OK, B "/a", "a" },
	{ ".", ".", NULL, OK, B, "" },
	{ "x", "workspace", NULL, OK, B "/workspace/x", "x" },
	{ "a", "sub/deeper", "/srv/base", OK, "/srv/base/sub/deeper/a", "a" },
	{ "a", ".", "/srv/base/", OK, "/srv/base/a", "a" },
	{ "a", ".", "//srv//base/.", OK, "/srv/base/a", "a" },
	{ "a", "..", NULL, PATHS_R_WD_OUTSIDE_BASE, NULL, NULL },
	{ "a", "sub/../..", NULL, PATHS_R_WD_OUTSIDE_BASE, NULL, NULL },
	{ "a", "../work-outside", NULL, PATHS_R_WD_OUTSIDE_BASE, NULL, NULL },
	{ "a", ".", "relative", PATHS_R_BASE_INVALID, NULL, NULL },
	{ "a", ".", "", PATHS_R_BASE_INVALID, NULL, NULL },
	/* an absolute working directory ignores the base */
	{ "a", "/abs", NULL, OK, "/abs/a", "a" },
	{ "a", "/w/..", NULL, OK, "/a", "a" },
	/* the root as working directory */
	{ "x", "/", NULL, OK, "/x", "x" },
	{ "/etc/passwd", "/", NULL, OK, "/etc/passwd", "etc/passwd" },
	{ "tmp/run-1/note", "/", NULL, OK, "/tmp/run-1/note", "tmp/run-1/note" },
	{ "..", "/", NULL, OK, "/", "" },
	{ "", "/", NULL, OK, "/", "" },
};

START_TEST(test_confine)
{
	const struct confine_row *row = &confine_rows[_i];
	struct paths_resolved r = { 0 };
	enum paths_reason why = _PATHS_R_MAX;
	int rc;

	rc = paths_confine_resolve(row->path, SIZE_MAX, row->wd, SIZE_MAX, row->base, &r, &why);
	if (row->reason != OK) {
		assert_refused(rc, why, row->reason, row->path);
		ck_assert_ptr_null(r.path);     /* written on success only */
		return;
	}
	ck_assert_msg(rc == 0, "\"%s\" in \"%s\": %s", row->path, row->wd,
		      paths_reason_to_string(why));
	ck_assert_str_eq(r.path, row->want);
	ck_assert_str_eq(r.rel, row->rel);
	ck_assert_int_eq(r.is_wd, row->rel[0] == '\0');
	ck_assert_ptr_eq(paths_relative_to(r.path, r.wd), r.rel);
	paths_resolved_release(&r);
	ck_assert_ptr_null(r.path);
}
END_TEST

/* An explicit length sees an embedded NUL; SIZE_MAX means strlen. */
START_TEST(test_confine_nul)
{
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	int rc;

	rc = paths_confine_resolve("a\0b", 3, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NUL, "NUL in path");
	rc = paths_confine_resolve("\0", 1, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NUL, "lone NUL");
	rc = paths_confine_resolve("a", 1, "/w\0/x", 5, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NUL, "NUL in working directory");
	rc = paths_confine_resolve("a", 1, "\0/etc", 5, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NUL, "working directory starting with NUL");
	/* NULL names the base whatever length is passed with it. */
	ck_assert_int_eq(paths_confine_resolve("a", 1, NULL, 7, NULL, &r, &why), 0);
	ck_assert_str_eq(r.path, B "/a");
	paths_resolved_release(&r);
	/* A NUL beats a backslash: it is found first. */
	rc = paths_confine_resolve("\\\0", 2, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NUL, "NUL and backslash");

	ck_assert_int_eq(paths_confine_resolve("a\0b", SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why), 0);
	ck_assert_str_eq(r.path, "/w/a");
	paths_resolved_release(&r);
	/* A length shorter than the string is honoured. */
	ck_assert_int_eq(paths_confine_resolve("abc/../../x", 3, "/w/xyz", 2, NULL, &r, &why), 0);
	ck_assert_str_eq(r.path, "/w/abc");
	paths_resolved_release(&r);
}
END_TEST

/* PATHS_MAX_BYTES: at the limit accepted, one over refused, for the input
 * and for what it resolves to. */
START_TEST(test_confine_length)
{
	_cleanup_free_ char *at = long_path(PATHS_MAX_BYTES, 200);
	_cleanup_free_ char *over = long_path(PATHS_MAX_BYTES + 1, 200);
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	int rc;

	ck_assert_uint_eq(strlen(at), PATHS_MAX_BYTES);
	rc = paths_confine_resolve(at, SIZE_MAX, "/", SIZE_MAX, NULL, &r, &why);
	ck_assert_msg(rc == 0, "%s", paths_reason_to_string(why));
	ck_assert_str_eq(r.path, at);
	paths_resolved_release(&r);

	rc = paths_confine_resolve(over, SIZE_MAX, "/", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_LONG, "input over the limit");
	/* Relative: the input fits, the resolved path (/w + it) does not. */
	rc = paths_confine_resolve(at + 1, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_LONG, "resolved over the limit");
	/* A working directory over the limit. */
	rc = paths_confine_resolve("a", SIZE_MAX, over, SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_LONG, "working directory over the limit");
	/* A base over the limit. */
	rc = paths_confine_resolve("a", SIZE_MAX, ".", SIZE_MAX, over, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_LONG, "base over the limit");
}
END_TEST

/* An input over the limit is refused even when it would normalise short. */
START_TEST(test_confine_length_before_normalising)
{
	size_t n = (PATHS_MAX_BYTES + 1) / 2 + 1;
	_cleanup_free_ char *dots = xmalloc(2 * n + 1);
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	int rc;

	for (size_t i = 0; i < n; i++)
		memcpy(dots + 2 * i, "./", 2);
	dots[2 * n] = '\0';
	rc = paths_confine_resolve(dots, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_LONG, "./ repeated");
	/* The same dots within the limit are the working directory. */
	ck_assert_int_eq(paths_confine_resolve(dots, PATHS_MAX_BYTES - 1, "/w", SIZE_MAX, NULL, &r,
					       &why), 0);
	ck_assert(r.is_wd);
	paths_resolved_release(&r);
}
END_TEST

START_TEST(test_confine_name_length)
{
	char name[PATHS_NAME_MAX_BYTES + 2];
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	int rc;

	memset(name, 'n', sizeof(name) - 1);
	name[PATHS_NAME_MAX_BYTES] = '\0';
	ck_assert_int_eq(paths_confine_resolve(name, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why), 0);
	paths_resolved_release(&r);
	name[PATHS_NAME_MAX_BYTES] = 'n';
	name[PATHS_NAME_MAX_BYTES + 1] = '\0';
	rc = paths_confine_resolve(name, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_NAME_TOO_LONG, "component of 256 bytes");
	/* A long name that ".." removes again is fine: the result is what counts. */
	{
		_cleanup_free_ char *p = xasprintf("%s/../ok", name);

		ck_assert_int_eq(paths_confine_resolve(p, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why), 0);
		ck_assert_str_eq(r.path, "/w/ok");
		paths_resolved_release(&r);
	}
}
END_TEST

START_TEST(test_confine_components)
{
	_cleanup_free_ char *at = xmalloc(2 * PATHS_MAX_COMPONENTS + 1);
	_cleanup_free_ char *over = xmalloc(2 * (PATHS_MAX_COMPONENTS + 1) + 1);
	struct paths_resolved r = { 0 };
	enum paths_reason why;
	int rc;

	for (size_t i = 0; i < PATHS_MAX_COMPONENTS; i++)
		memcpy(at + 2 * i, "/c", 2);
	at[2 * PATHS_MAX_COMPONENTS] = '\0';
	for (size_t i = 0; i <= PATHS_MAX_COMPONENTS; i++)
		memcpy(over + 2 * i, "/c", 2);
	over[2 * (PATHS_MAX_COMPONENTS + 1)] = '\0';

	ck_assert_int_eq(paths_confine_resolve(at, SIZE_MAX, "/", SIZE_MAX, NULL, &r, &why), 0);
	paths_resolved_release(&r);
	rc = paths_confine_resolve(over, SIZE_MAX, "/", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_MANY_COMPONENTS, "129 components");
	/* Relative to a working directory, its components count too. */
	rc = paths_confine_resolve(at + 1, SIZE_MAX, "/w", SIZE_MAX, NULL, &r, &why);
	assert_refused(rc, why, PATHS_R_TOO_MANY_COMPONENTS, "/w + 128 components");
}
END_TEST

/* ---- relative_to (§4.1 guest_path_relative_to) ------------------------------ */

struct rel_row {
	const char *path, *base, *rel;   /* rel NULL = not beneath */
};

static const struct rel_row rel_rows[] = {
	{ "/w", "/w", "" },
	{ "/w/x", "/w", "x" },
	{ "/w/sub2", "/w/sub", NULL },
	{ "/w-outside", "/w", NULL },
	{ "/w", "/w/x", NULL },
	{ "/", "/", "" },
	{ "/x/y", "/", "x/y" },
	{ "/", "/w", NULL },
};

START_TEST(test_relative_to)
{
	const struct rel_row *row = &rel_rows[_i];
	const char *got = paths_relative_to(row->path, row->base);

	if (!row->rel)
		ck_assert_ptr_null(got);
	else
		ck_assert_str_eq(got, row->rel);
}
END_TEST

/* ---- the ancestor walk ------------------------------------------------------- */

struct walk_row {
	const char *path;
	bool include_self;
	const char *walk;
};

static const struct walk_row walk_rows[] = {
	{ B "/a/b.txt", false, "/maf-sandbox," B "," B "/a" },
	{ B "/a/b.txt", true, "/maf-sandbox," B "," B "/a," B "/a/b.txt" },
	{ B, false, "/maf-sandbox" },
	{ B, true, "/maf-sandbox," B },
	{ "/", false, "" },
	{ "/", true, "" },
	{ "/x", false, "" },
	{ "/x", true, "/x" },
	{ "/a/b", false, "/a" },
	{ "/tmp/run-1/note", false, "/tmp,/tmp/run-1" },
};

START_TEST(test_ancestors)
{
	const struct walk_row *row = &walk_rows[_i];
	size_t n = 99;
	char **list = paths_ancestors(row->path, row->include_self, &n);
	_cleanup_free_ char *got = join(list);
	size_t want_n = row->walk[0] ? 1 : 0;

	for (const char *c = row->walk; *c; c++)
		want_n += *c == ',';
	ck_assert_str_eq(got, row->walk);
	ck_assert_uint_eq(n, want_n);
	ck_assert_ptr_null(list[n]);
	ck_assert_ptr_null(paths_strv_free(list));
	ck_assert_ptr_null(paths_strv_free(NULL));
}
END_TEST

/* ---- verdicts ----------------------------------------------------------------- */

#define ABSENT _PATHS_KIND_MAX   /* a row's "the engine said: not there" */

struct verdict_row {
	int kind;        /* enum paths_kind or ABSENT */
	int rc;
	int reason;      /* OK or an enum paths_reason */
};

static const struct verdict_row walk_verdict_rows[] = {
	{ ABSENT, 0, OK },
	{ PATHS_KIND_DIRECTORY, 1, OK },
	{ PATHS_KIND_SYMLINK, -ELOOP, PATHS_R_SYMLINK_ANCESTOR },
	{ PATHS_KIND_FILE, -ENOTDIR, PATHS_R_NOT_A_DIRECTORY },
	{ PATHS_KIND_OTHER, -ENOTDIR, PATHS_R_NOT_A_DIRECTORY },
};

START_TEST(test_walk_verdict)
{
	const struct verdict_row *row = &walk_verdict_rows[_i];
	struct paths_stat st = { .kind = row->kind == ABSENT ? PATHS_KIND_FILE : row->kind };
	enum paths_reason why = _PATHS_R_MAX;
	int rc = paths_walk_verdict(row->kind == ABSENT ? NULL : &st, &why);

	ck_assert_int_eq(rc, row->rc);
	if (row->reason == OK)
		ck_assert_int_eq(why, _PATHS_R_MAX);   /* untouched */
	else
		assert_refused(rc, why, row->reason, paths_kind_to_string(row->kind));
}
END_TEST

/* Every op against every kind of leaf: {absent, file, directory, symlink, other}. */
struct leaf_row {
	enum paths_op op;
	int reason[5];   /* OK or the refusal */
};

static const struct leaf_row leaf_rows[] = {
	{ PATHS_OP_WRITE, { OK, OK, PATHS_R_IS_DIRECTORY, PATHS_R_SYMLINK_LEAF, OK } },
	{ PATHS_OP_READ, { PATHS_R_NOT_FOUND, OK, PATHS_R_NOT_REGULAR, PATHS_R_NOT_REGULAR,
			   PATHS_R_NOT_REGULAR } },
	{ PATHS_OP_STAT, { OK, OK, OK, OK, OK } },
	{ PATHS_OP_LIST, { PATHS_R_NOT_FOUND, PATHS_R_NOT_A_DIRECTORY, OK, PATHS_R_SYMLINK_ANCESTOR,
			   PATHS_R_NOT_A_DIRECTORY } },
	{ PATHS_OP_DELETE, { OK, OK, OK, OK, OK } },
	{ PATHS_OP_RECLAIM, { OK, OK, OK, OK, OK } },
};

static const int leaf_kinds[5] = { ABSENT, PATHS_KIND_FILE, PATHS_KIND_DIRECTORY,
				   PATHS_KIND_SYMLINK, PATHS_KIND_OTHER };

START_TEST(test_leaf_verdict)
{
	const struct leaf_row *row = &leaf_rows[_i];

	for (int k = 0; k < 5; k++) {
		struct paths_stat st = { .kind = leaf_kinds[k] == ABSENT ? 0 : leaf_kinds[k] };
		enum paths_reason why = _PATHS_R_MAX;
		int rc = paths_leaf_verdict(row->op, leaf_kinds[k] == ABSENT ? NULL : &st, &why);
		char what[64];

		snprintf(what, sizeof(what), "%s of %s", paths_op_to_string(row->op),
			 leaf_kinds[k] == ABSENT ? "absent" : paths_kind_to_string(leaf_kinds[k]));
		if (row->reason[k] == OK)
			ck_assert_msg(rc == 0, "%s: %s", what, paths_reason_to_string(why));
		else
			assert_refused(rc, why, row->reason[k], what);
	}
}
END_TEST

/* ---- the bundles ----------------------------------------------------------------- */

struct plan_row {
	enum paths_op op;
	const char *path, *wd;
	int reason;
	const char *target;
	const char *walk;
	size_t owned_from;
	bool stat_leaf;
};

#define REFUSED(op, path, wd, reason) { op, path, wd, reason, NULL, NULL, 0, false }

static const struct plan_row plan_rows[] = {
	{ PATHS_OP_WRITE, "a/b/c.txt", "/w", OK, "/w/a/b/c.txt", "/w,/w/a,/w/a/b", 0, true },
	{ PATHS_OP_WRITE, "note", B, OK, B "/note", "/maf-sandbox," B, 1, true },
	{ PATHS_OP_WRITE, "tmp/run-1/note", "/", OK, "/tmp/run-1/note", "/tmp,/tmp/run-1", 0, true },
	REFUSED(PATHS_OP_WRITE, ".", "/w", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_WRITE, "", "/w", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_WRITE, "/w/", "/w", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_WRITE, "../w-outside/planted.txt", "/w", PATHS_R_OUTSIDE),
	REFUSED(PATHS_OP_WRITE, "sub\\file.txt", "/w", PATHS_R_BACKSLASH),
	{ PATHS_OP_READ, "x.txt", B, OK, B "/x.txt", "/maf-sandbox," B, 1, true },
	/* The working directory itself is walked too (a linked one is refused). */
	{ PATHS_OP_READ, ".", "/w", OK, "/w", "/w", 0, true },
	{ PATHS_OP_STAT, ".", B, OK, B, "/maf-sandbox," B, 1, true },
	{ PATHS_OP_STAT, "link-file", "/w", OK, "/w/link-file", "/w", 0, true },
	REFUSED(PATHS_OP_STAT, "..", "/w", PATHS_R_OUTSIDE),
	{ PATHS_OP_LIST, ".", B, OK, B, "/maf-sandbox," B, 1, false },
	{ PATHS_OP_LIST, "link-dir/sub", "/w", OK, "/w/link-dir/sub", "/w,/w/link-dir,/w/link-dir/sub",
	  0, false },
	{ PATHS_OP_DELETE, "doomed.txt", "/w", OK, "/w/doomed.txt", "/w", 0, false },
	{ PATHS_OP_DELETE, "dir/link", "/w", OK, "/w/dir/link", "/w,/w/dir", 0, false },
	REFUSED(PATHS_OP_DELETE, ".", "/w", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_DELETE, "a/..", "/w", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_DELETE, "../w-outside/target.txt", "/w", PATHS_R_OUTSIDE),
	/* reclaim: no walk; absolute only normalised; relative confined; >= 2 components */
	{ PATHS_OP_RECLAIM, B "/0123456789ab", B, OK, B "/0123456789ab", "", 0, false },
	{ PATHS_OP_RECLAIM, "/srv/x", "/w", OK, "/srv/x", "", 0, false },
	{ PATHS_OP_RECLAIM, "call-1", "/w", OK, "/w/call-1", "", 0, false },
	REFUSED(PATHS_OP_RECLAIM, "/", "/w", PATHS_R_NEAR_ROOT),
	REFUSED(PATHS_OP_RECLAIM, "/etc", "/w", PATHS_R_NEAR_ROOT),
	REFUSED(PATHS_OP_RECLAIM, "//tmp", "/w", PATHS_R_NEAR_ROOT),
	REFUSED(PATHS_OP_RECLAIM, "/a/..", "/w", PATHS_R_NEAR_ROOT),
	REFUSED(PATHS_OP_RECLAIM, "x", "/", PATHS_R_NEAR_ROOT),
	REFUSED(PATHS_OP_RECLAIM, ".", "/w/sub", PATHS_R_WORKING_DIRECTORY),
	REFUSED(PATHS_OP_RECLAIM, "../x", "/w/sub", PATHS_R_OUTSIDE),
	REFUSED(PATHS_OP_RECLAIM, "/a\\b/c", "/w", PATHS_R_BACKSLASH),
};

/* With the sandbox's storage base: a write makes the guest's directories
 * from the wd down and from below the base down (a kind's call directory,
 * written from its "work" child, is the guest's to reclaim); above both,
 * root's. */
START_TEST(test_plan_owned_below_the_base)
{
	static const struct {
		const char *path, *wd, *walk;
		size_t owned_from;
	} rows[] = {
		{ "in.txt", B "/call-1/work", "/maf-sandbox," B "," B "/call-1," B "/call-1/work", 2 },
		{ "deep/in.txt", B "/c/work", "/maf-sandbox," B "," B "/c," B "/c/work," B "/c/work/deep", 2 },
		{ "x", B, "/maf-sandbox," B, 1 },
		{ "x", "/srv/run/work", "/srv,/srv/run,/srv/run/work", 2 },
		{ "a/x", "/", "/a", 0 },
	};
	/* The base as a label may spell it: compared normalised. A base "/"
	 * is no base of the guest's: the working directory's rule alone. */
	static const struct {
		const char *base, *wd;
		size_t owned_from;
	} bases[] = {
		{ "//maf-sandbox/work/", B "/c/work", 2 },
		{ "/maf-sandbox//work", B "/c/work", 2 },
		{ "/", "/srv/run/work", 2 },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		struct paths_plan *plan = NULL;
		enum paths_reason why = _PATHS_R_MAX;
		_cleanup_free_ char *walk = NULL;

		ck_assert_int_eq(paths_plan_new(PATHS_OP_WRITE, rows[i].path, SIZE_MAX, rows[i].wd, SIZE_MAX, B, &plan,
						&why), 0);
		walk = join(plan->walk);
		ck_assert_str_eq(walk, rows[i].walk);
		ck_assert_msg(plan->walk_owned_from == rows[i].owned_from, "%s from %s: owned from %zu, not %zu",
			      rows[i].path, rows[i].wd, plan->walk_owned_from, rows[i].owned_from);
		paths_plan_free(plan);
	}
	for (size_t i = 0; i < ELEMENTSOF(bases); i++) {
		struct paths_plan *plan = NULL;
		enum paths_reason why = _PATHS_R_MAX;

		ck_assert_int_eq(paths_plan_new(PATHS_OP_WRITE, "x", SIZE_MAX, bases[i].wd, SIZE_MAX, bases[i].base,
						&plan, &why), 0);
		ck_assert_msg(plan->walk_owned_from == bases[i].owned_from, "base %s, wd %s: owned from %zu, not %zu",
			      bases[i].base, bases[i].wd, plan->walk_owned_from, bases[i].owned_from);
		paths_plan_free(plan);
	}
}
END_TEST

START_TEST(test_plan)
{
	const struct plan_row *row = &plan_rows[_i];
	struct paths_plan *plan = NULL;
	enum paths_reason why = _PATHS_R_MAX;
	_cleanup_free_ char *walk = NULL;
	int rc = paths_plan_new(row->op, row->path, SIZE_MAX, row->wd, SIZE_MAX, NULL, &plan, &why);

	if (row->reason != OK) {
		assert_refused(rc, why, row->reason, row->path);
		ck_assert_ptr_null(plan);
		return;
	}
	ck_assert_msg(rc == 0, "%s \"%s\": %s", paths_op_to_string(row->op), row->path,
		      paths_reason_to_string(why));
	ck_assert_int_eq(plan->op, row->op);
	ck_assert_str_eq(plan->target.path, row->target);
	walk = join(plan->walk);
	ck_assert_str_eq(walk, row->walk);
	ck_assert_uint_eq(plan->walk_owned_from, row->walk[0] ? row->owned_from : plan->n_walk);
	ck_assert_int_eq(plan->stat_leaf, row->stat_leaf);
	ck_assert_ptr_null(paths_plan_free(plan));
}
END_TEST

START_TEST(test_plan_free_null)
{
	ck_assert_ptr_null(paths_plan_free(NULL));
	paths_resolved_release(NULL);
	paths_stat_release(NULL);
}
END_TEST

/* ---- the bundles driven against a hostile layout (behaviour-core §7.1/7.2/7.4) ---- */

struct node {
	const char *path;
	enum paths_kind kind;
};

/* W = /w; outside = /w-outside. Everything not listed is absent. */
static const struct node layout[] = {
	{ "/w", PATHS_KIND_DIRECTORY },
	{ "/w/real", PATHS_KIND_DIRECTORY },
	{ "/w/real/inside.txt", PATHS_KIND_FILE },
	{ "/w/plain.txt", PATHS_KIND_FILE },
	{ "/w/fifo", PATHS_KIND_OTHER },
	{ "/w/link-dir", PATHS_KIND_SYMLINK },
	{ "/w/link-file", PATHS_KIND_SYMLINK },
	{ "/w/dir", PATHS_KIND_DIRECTORY },
	{ "/w-outside", PATHS_KIND_DIRECTORY },
	{ "/w-outside/secret.txt", PATHS_KIND_FILE },
	{ "/m", PATHS_KIND_SYMLINK },          /* a linked ancestor of a work dir /m/work */
};

static const struct node *lookup(const char *path)
{
	for (size_t i = 0; i < ELEMENTSOF(layout); i++)
		if (strcmp(layout[i].path, path) == 0)
			return &layout[i];
	return NULL;
}

/* What a file method does with the plan; returns 0 or the refusal. *ret_end
 * is where the walk stopped (n_walk if it ran through). */
static int drive(const struct paths_plan *plan, size_t *ret_end, enum paths_reason *why)
{
	const struct node *leaf = NULL;
	struct paths_stat st = { 0 };
	size_t i;

	for (i = 0; i < plan->n_walk; i++) {
		const struct node *n = lookup(plan->walk[i]);
		int r;

		st.kind = n ? n->kind : PATHS_KIND_FILE;
		r = paths_walk_verdict(n ? &st : NULL, why);
		if (r < 0)
			return r;
		if (r == 0)
			break;
	}
	*ret_end = i;
	if (i == plan->n_walk && plan->stat_leaf)
		leaf = lookup(plan->target.path);
	if (leaf)
		st.kind = leaf->kind;
	if (!plan->stat_leaf && plan->op == PATHS_OP_LIST && i == plan->n_walk)
		return 0;   /* the walk included the target and found a directory */
	return paths_leaf_verdict(plan->op, leaf ? &st : NULL, why);
}

struct drive_row {
	enum paths_op op;
	const char *path, *wd;
	int reason;
	size_t end;      /* for OK rows: where the walk stopped */
};

static const struct drive_row drive_rows[] = {
	{ PATHS_OP_READ, "real/inside.txt", "/w", OK, 2 },
	{ PATHS_OP_STAT, "link-file", "/w", OK, 1 },
	{ PATHS_OP_READ, "link-file", "/w", PATHS_R_NOT_REGULAR, 0 },
	{ PATHS_OP_READ, "fifo", "/w", PATHS_R_NOT_REGULAR, 0 },
	{ PATHS_OP_READ, "dir", "/w", PATHS_R_NOT_REGULAR, 0 },
	{ PATHS_OP_STAT, "link-dir/secret.txt", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_READ, "link-dir/secret.txt", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_READ, "secret.txt", "/w/link-dir", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_STAT, "leaf.txt", "/w/link-dir/sub", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_READ, "x", "/m/work", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_STAT, "plain.txt/deeper.txt", "/w", PATHS_R_NOT_A_DIRECTORY, 0 },
	{ PATHS_OP_WRITE, "fifo/x", "/w", PATHS_R_NOT_A_DIRECTORY, 0 },
	{ PATHS_OP_LIST, "link-dir", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_LIST, "link-dir/sub", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_LIST, ".", "/w/link-dir/sub", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_LIST, "plain.txt", "/w", PATHS_R_NOT_A_DIRECTORY, 0 },
	{ PATHS_OP_LIST, "nothing", "/w", PATHS_R_NOT_FOUND, 0 },
	{ PATHS_OP_LIST, ".", "/w", OK, 1 },
	{ PATHS_OP_WRITE, "link-file", "/w", PATHS_R_SYMLINK_LEAF, 0 },
	{ PATHS_OP_WRITE, "link-dir/landed.txt", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_WRITE, "landed.txt", "/w/link-dir", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_WRITE, "dir", "/w", PATHS_R_IS_DIRECTORY, 0 },
	{ PATHS_OP_WRITE, "real/written.txt", "/w", OK, 2 },
	{ PATHS_OP_WRITE, "deep/er/est/leaf.txt", "/w", OK, 1 },   /* /w/deep is missing */
	{ PATHS_OP_READ, "missing/x.txt", "/w", PATHS_R_NOT_FOUND, 0 },
	{ PATHS_OP_READ, "missing.txt", "/w", PATHS_R_NOT_FOUND, 0 },
	{ PATHS_OP_STAT, "missing/x.txt", "/w", OK, 1 },
	{ PATHS_OP_DELETE, "link-dir/target.txt", "/w", PATHS_R_SYMLINK_ANCESTOR, 0 },
	{ PATHS_OP_DELETE, "link-file", "/w", OK, 1 },
	{ PATHS_OP_DELETE, "link-dir", "/w", OK, 1 },
};

START_TEST(test_drive)
{
	const struct drive_row *row = &drive_rows[_i];
	struct paths_plan *plan = NULL;
	enum paths_reason why = _PATHS_R_MAX;
	size_t end = SIZE_MAX;
	int rc;

	ck_assert_int_eq(paths_plan_new(row->op, row->path, SIZE_MAX, row->wd, SIZE_MAX, NULL,
					&plan, &why), 0);
	rc = drive(plan, &end, &why);
	if (row->reason == OK) {
		ck_assert_msg(rc == 0, "%s \"%s\" in %s: %s", paths_op_to_string(row->op), row->path,
			      row->wd, paths_reason_to_string(why));
		ck_assert_uint_eq(end, row->end);
	} else {
		assert_refused(rc, why, row->reason, row->path);
	}
	paths_plan_free(plan);
}
END_TEST

/* ---- Go FileMode ---------------------------------------------------------------------- */

struct mode_row {
	uint32_t mode;
	int kind;          /* enum paths_kind, or -1 refused */
	uint32_t perm;
};

static const struct mode_row mode_rows[] = {
	{ 0644, PATHS_KIND_FILE, 0644 },
	{ 0, PATHS_KIND_FILE, 0 },
	{ 0777, PATHS_KIND_FILE, 0777 },
	{ PATHS_GO_MODE_DIR | 0755, PATHS_KIND_DIRECTORY, 0755 },
	{ PATHS_GO_MODE_SYMLINK | 0777, PATHS_KIND_SYMLINK, 0777 },
	{ PATHS_GO_MODE_NAMED_PIPE | 0644, PATHS_KIND_OTHER, 0644 },
	{ PATHS_GO_MODE_SOCKET | 0755, PATHS_KIND_OTHER, 0755 },
	{ PATHS_GO_MODE_DEVICE | 0660, PATHS_KIND_OTHER, 0660 },                 /* block */
	{ PATHS_GO_MODE_DEVICE | PATHS_GO_MODE_CHAR_DEVICE | 0666, PATHS_KIND_OTHER, 0666 },
	{ PATHS_GO_MODE_CHAR_DEVICE | 0600, PATHS_KIND_OTHER, 0600 },
	{ PATHS_GO_MODE_IRREGULAR | 0400, PATHS_KIND_OTHER, 0400 },
	{ PATHS_GO_MODE_NAMED_PIPE | PATHS_GO_MODE_SOCKET, PATHS_KIND_OTHER, 0 },
	/* permission flags */
	{ PATHS_GO_MODE_SETUID | 0755, PATHS_KIND_FILE, 04755 },
	{ PATHS_GO_MODE_SETGID | PATHS_GO_MODE_DIR | 0775, PATHS_KIND_DIRECTORY, 02775 },
	{ PATHS_GO_MODE_STICKY | PATHS_GO_MODE_DIR | 0777, PATHS_KIND_DIRECTORY, 01777 },
	{ PATHS_GO_MODE_SETUID | PATHS_GO_MODE_SETGID | PATHS_GO_MODE_STICKY | 0777,
	  PATHS_KIND_FILE, 07777 },
	{ PATHS_GO_MODE_SYMLINK | PATHS_GO_MODE_SETUID | 0777, PATHS_KIND_SYMLINK, 04777 },
	/* the Plan 9 flags are not types */
	{ PATHS_GO_MODE_APPEND | 0644, PATHS_KIND_FILE, 0644 },
	{ PATHS_GO_MODE_EXCLUSIVE | PATHS_GO_MODE_DIR | 0700, PATHS_KIND_DIRECTORY, 0700 },
	{ PATHS_GO_MODE_TEMPORARY | 0600, PATHS_KIND_FILE, 0600 },
	/* contradictory types */
	{ PATHS_GO_MODE_DIR | PATHS_GO_MODE_SYMLINK | 0777, -1, 0 },
	{ PATHS_GO_MODE_DIR | PATHS_GO_MODE_NAMED_PIPE, -1, 0 },
	{ PATHS_GO_MODE_SYMLINK | PATHS_GO_MODE_DEVICE, -1, 0 },
	{ PATHS_GO_MODE_DIR | PATHS_GO_MODE_IRREGULAR, -1, 0 },
	/* bits Go does not define: POSIX S_ISVTX is not Go's sticky bit */
	{ 01644, -1, 0 },
	{ 04755, -1, 0 },
	{ UINT32_C(1) << 18, -1, 0 },
	{ UINT32_MAX, -1, 0 },
};

START_TEST(test_go_mode)
{
	const struct mode_row *row = &mode_rows[_i];
	enum paths_kind kind = _PATHS_KIND_MAX;
	uint32_t perm = 0xdead;
	enum paths_reason why = _PATHS_R_MAX;
	int rc = paths_go_mode_decode(row->mode, &kind, &perm, &why);

	if (row->kind < 0) {
		assert_refused(rc, why, PATHS_R_STAT_MODE, "mode");
		ck_assert_int_eq(kind, _PATHS_KIND_MAX);
		ck_assert_uint_eq(perm, 0xdead);
		return;
	}
	ck_assert_msg(rc == 0, "mode %#x refused", (unsigned)row->mode);
	ck_assert_int_eq(kind, row->kind);
	ck_assert_uint_eq(perm, row->perm);
}
END_TEST

START_TEST(test_go_mode_bits)
{
	/* The constants are Go's (io/fs FileMode), pinned. */
	ck_assert_uint_eq(PATHS_GO_MODE_DIR, 0x80000000u);
	ck_assert_uint_eq(PATHS_GO_MODE_SYMLINK, 0x08000000u);
	ck_assert_uint_eq(PATHS_GO_MODE_IRREGULAR, 0x00080000u);
	ck_assert_uint_eq(PATHS_GO_MODE_TYPE, 0x8f280000u);
	ck_assert_uint_eq(PATHS_GO_MODE_KNOWN, 0xfff801ffu);
}
END_TEST

struct st_mode_row {
	mode_t mode;
	enum paths_kind kind;
};

static const struct st_mode_row st_mode_rows[] = {
	{ S_IFREG | 0644, PATHS_KIND_FILE }, { S_IFDIR | 0755, PATHS_KIND_DIRECTORY },
	{ S_IFLNK | 0777, PATHS_KIND_SYMLINK }, { S_IFIFO | 0644, PATHS_KIND_OTHER },
	{ S_IFSOCK | 0755, PATHS_KIND_OTHER }, { S_IFCHR | 0666, PATHS_KIND_OTHER },
	{ S_IFBLK | 0660, PATHS_KIND_OTHER },
};

START_TEST(test_kind_from_st_mode)
{
	ck_assert_int_eq(paths_kind_from_st_mode(st_mode_rows[_i].mode), st_mode_rows[_i].kind);
}
END_TEST

/* ---- the stat header --------------------------------------------------------------------- */

/* What Python's base64 makes of a seed-shaped stat (an independent encoder). */
#define GOLDEN_FILE \
	"eyJuYW1lIjoiaW5zaWRlLnR4dCIsInNpemUiOjIwLCJtb2RlIjo0MjAsIm10aW1lIjoiMjAyNC0wNS0wMVQxMjoz" \
	"NDo1Ni4xMjM0NTY3ODkrMDI6MDAiLCJsaW5rVGFyZ2V0IjoiIn0="
#define GOLDEN_LINK \
	"eyJuYW1lIjoibGluay1kaXIiLCJzaXplIjoxMCwibW9kZSI6MTM0MjE4MjM5LCJtdGltZSI6IjIwMjQtMDUtMDFU" \
	"MTA6MDA6MDAuNVoiLCJsaW5rVGFyZ2V0IjoiL3ctb3V0c2lkZSJ9"

START_TEST(test_stat_golden)
{
	struct paths_stat st = { 0 };
	enum paths_reason why;

	ck_assert_int_eq(paths_stat_decode_header(GOLDEN_FILE, &st, &why), 0);
	ck_assert_str_eq(st.name, "inside.txt");
	ck_assert_uint_eq(st.size, 20);
	ck_assert_uint_eq(st.mode, 0644);
	ck_assert_int_eq(st.kind, PATHS_KIND_FILE);
	ck_assert_uint_eq(st.perm, 0644);
	ck_assert_int_eq(st.mtime_sec, 1714559696);    /* 2024-05-01T10:34:56Z */
	ck_assert_uint_eq(st.mtime_nsec, 123456789);
	ck_assert_str_eq(st.link_target, "");
	paths_stat_release(&st);
	ck_assert_ptr_null(st.name);

	ck_assert_int_eq(paths_stat_decode_header(GOLDEN_LINK, &st, &why), 0);
	ck_assert_str_eq(st.name, "link-dir");
	ck_assert_int_eq(st.kind, PATHS_KIND_SYMLINK);
	ck_assert_uint_eq(st.perm, 0777);
	ck_assert_str_eq(st.link_target, "/w-outside");
	ck_assert_int_eq(st.mtime_sec, 1714557600);
	ck_assert_uint_eq(st.mtime_nsec, 500000000);
	paths_stat_release(&st);
}
END_TEST

#define STAT_JSON(name, size, mode, mtime, link) \
	"{\"name\":" name ",\"size\":" size ",\"mode\":" mode ",\"mtime\":" mtime \
	",\"linkTarget\":" link "}"
#define GOOD_TIME "\"2024-05-01T10:34:56Z\""

struct stat_row {
	const char *json;
	int reason;                /* OK or the refusal */
	int kind;
	uint64_t size;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
};

static const struct stat_row stat_rows[] = {
	/* valid */
	{ STAT_JSON("\"work\"", "4096", "2147484141", GOOD_TIME, "\"\""), OK, PATHS_KIND_DIRECTORY,
	  4096, 1714559696, 0 },
	{ STAT_JSON("\"big\"", "9223372036854775807", "420", GOOD_TIME, "\"\""), OK, PATHS_KIND_FILE,
	  INT64_MAX, 1714559696, 0 },
	{ STAT_JSON("\"empty\"", "0", "420", "\"0001-01-01T00:00:00Z\"", "\"\""), OK,
	  PATHS_KIND_FILE, 0, -62135596800LL, 0 },
	{ STAT_JSON("\"leap\"", "1", "420", "\"2024-02-29T00:00:00-00:30\"", "\"\""), OK,
	  PATHS_KIND_FILE, 1, 1709164800 + 1800, 0 },
	{ STAT_JSON("\"pre\"", "1", "420", "\"1969-12-31T23:59:59.000000001Z\"", "\"\""), OK,
	  PATHS_KIND_FILE, 1, -1, 1 },
	{ STAT_JSON("\"f\\u00e9\"", "1", "420", "\"2024-05-01T12:34:56.1+02:00\"", "\"\""), OK,
	  PATHS_KIND_FILE, 1, 1714559696, 100000000 },
	{ "{\"name\":\"x\",\"size\":1,\"mode\":420,\"mtime\":" GOOD_TIME ",\"linkTarget\":\"\","
	  "\"future\":[1,2]}", OK, PATHS_KIND_FILE, 1, 1714559696, 0 },     /* unknown member */
	{ STAT_JSON("\"fifo\"", "0", "33554852", GOOD_TIME, "\"\""), OK, PATHS_KIND_OTHER, 0,
	  1714559696, 0 },
	/* not an object */
	{ "not json", PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	{ "[1]", PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	{ "\"name\"", PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	{ "{\"name\":\"a\",\"name\":\"b\",\"size\":1,\"mode\":420,\"mtime\":" GOOD_TIME
	  ",\"linkTarget\":\"\"}", PATHS_R_STAT_JSON, 0, 0, 0, 0 },                  /* duplicate member */
	{ STAT_JSON("\"a\\u0000b\"", "1", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", GOOD_TIME, "\"\"") " {}", PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	/* each member missing */
	{ "{\"size\":1,\"mode\":420,\"mtime\":" GOOD_TIME ",\"linkTarget\":\"\"}", PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ "{\"name\":\"a\",\"mode\":420,\"mtime\":" GOOD_TIME ",\"linkTarget\":\"\"}",
	  PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ "{\"name\":\"a\",\"size\":1,\"mtime\":" GOOD_TIME ",\"linkTarget\":\"\"}",
	  PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ "{\"name\":\"a\",\"size\":1,\"mode\":420,\"linkTarget\":\"\"}", PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ "{\"name\":\"a\",\"size\":1,\"mode\":420,\"mtime\":" GOOD_TIME "}", PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ "{}", PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	/* wrong types */
	{ STAT_JSON("1", "1", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("null", "1", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "\"20\"", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1.5", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1e3", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "\"420\"", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "null", GOOD_TIME, "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "0", "\"\""), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", GOOD_TIME, "null"), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", GOOD_TIME, "false"), PATHS_R_STAT_FIELD, 0, 0, 0, 0 },
	/* size */
	{ STAT_JSON("\"a\"", "-1", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_SIZE, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "-9223372036854775808", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_SIZE, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "9223372036854775808", "420", GOOD_TIME, "\"\""), PATHS_R_STAT_JSON, 0, 0, 0, 0 },
	/* mode */
	{ STAT_JSON("\"a\"", "1", "-1", GOOD_TIME, "\"\""), PATHS_R_STAT_MODE, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "4294967296", GOOD_TIME, "\"\""), PATHS_R_STAT_MODE, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "2281701376", GOOD_TIME, "\"\""), PATHS_R_STAT_MODE, 0, 0, 0, 0 }, /* dir|link */
	{ STAT_JSON("\"a\"", "1", "262144", GOOD_TIME, "\"\""), PATHS_R_STAT_MODE, 0, 0, 0, 0 },     /* 1<<18 */
	/* mtime */
	{ STAT_JSON("\"a\"", "1", "420", "\"\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01 10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56Q\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-13-01T10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-00-01T10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-02-30T10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2023-02-29T10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T24:00:00Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:60:00Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:60Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56.Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56.1234567890Z\"", "\"\""),
	  PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56+24:00\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56+0200\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"2024-05-01T10:34:56Zx\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
	{ STAT_JSON("\"a\"", "1", "420", "\"24-05-01T10:34:56Z\"", "\"\""), PATHS_R_STAT_MTIME, 0, 0, 0, 0 },
};

START_TEST(test_stat_header)
{
	const struct stat_row *row = &stat_rows[_i];
	_cleanup_free_ char *hdr = b64(row->json);
	struct paths_stat st = { .name = (char *)"sentinel" };
	enum paths_reason why = _PATHS_R_MAX;
	int rc = paths_stat_decode_header(hdr, &st, &why);

	if (row->reason != OK) {
		assert_refused(rc, why, row->reason, row->json);
		ck_assert_str_eq(st.name, "sentinel");   /* written on success only */
		return;
	}
	ck_assert_msg(rc == 0, "%s: %s", row->json, paths_reason_to_string(why));
	ck_assert_int_eq(st.kind, row->kind);
	ck_assert_uint_eq(st.size, row->size);
	ck_assert_int_eq(st.mtime_sec, row->mtime_sec);
	ck_assert_uint_eq(st.mtime_nsec, row->mtime_nsec);
	paths_stat_release(&st);
}
END_TEST

/* The base64 layer: standard alphabet, padded, canonical, nothing else. */
struct b64_row {
	const char *value;
};

static const struct b64_row b64_bad_rows[] = {
	{ "" }, { "e30" }, { "e3=" }, { "e30=e30=" }, { "ab!=" }, { " e30=" }, { "e30= " },
	{ "e30=\n" }, { "YR==" },    /* 'a' is YQ==: non-zero padding bits */
	{ "e31=" },                  /* "{}" is e30=: non-zero padding bits */
	{ "Y===" }, { "====" }, { "=e30" }, { "e3=0" },
	{ "eyJu-W1l" }, { "eyJu_W1l" },  /* base64url */
};

START_TEST(test_stat_header_base64)
{
	struct paths_stat st = { 0 };
	enum paths_reason why = _PATHS_R_MAX;
	int rc = paths_stat_decode_header(b64_bad_rows[_i].value, &st, &why);

	assert_refused(rc, why, PATHS_R_STAT_BASE64, b64_bad_rows[_i].value);
	ck_assert_ptr_null(st.name);
}
END_TEST

START_TEST(test_stat_header_limits)
{
	_cleanup_free_ char *at = xmalloc(PATHS_STAT_HEADER_MAX_BYTES + 1);
	_cleanup_free_ char *over = xmalloc(PATHS_STAT_HEADER_MAX_BYTES + 5);
	struct paths_stat st = { 0 };
	enum paths_reason why;
	int rc;

	rc = paths_stat_decode_header(NULL, &st, &why);
	assert_refused(rc, why, PATHS_R_STAT_BASE64, "NULL");
	/* At the limit the length is fine (the zeros it decodes to are not JSON). */
	memset(at, 'A', PATHS_STAT_HEADER_MAX_BYTES);
	at[PATHS_STAT_HEADER_MAX_BYTES] = '\0';
	rc = paths_stat_decode_header(at, &st, &why);
	assert_refused(rc, why, PATHS_R_STAT_JSON, "header at the limit");
	memset(over, 'A', PATHS_STAT_HEADER_MAX_BYTES + 4);
	over[PATHS_STAT_HEADER_MAX_BYTES + 4] = '\0';
	rc = paths_stat_decode_header(over, &st, &why);
	assert_refused(rc, why, PATHS_R_STAT_TOO_LONG, "header over the limit");
	ck_assert_ptr_null(st.name);
}
END_TEST

/* ---- SandboxEntry ---------------------------------------------------------------------- */

struct entry_row {
	const char *rel;
	enum paths_kind kind;
	uint64_t size;
	const char *json;
};

static const struct entry_row entry_rows[] = {
	{ "real/inside.txt", PATHS_KIND_FILE, 20,
	  "{\"path\":\"real/inside.txt\",\"kind\":\"file\",\"size\":20}" },
	{ "empty", PATHS_KIND_FILE, 0, "{\"path\":\"empty\",\"kind\":\"file\",\"size\":0}" },
	{ "sub", PATHS_KIND_DIRECTORY, 4096,
	  "{\"path\":\"sub\",\"kind\":\"directory\",\"size\":null}" },
	{ "link-file", PATHS_KIND_SYMLINK, 18,
	  "{\"path\":\"link-file\",\"kind\":\"symlink\",\"size\":null}" },
	{ "fifo", PATHS_KIND_OTHER, 0, "{\"path\":\"fifo\",\"kind\":\"other\",\"size\":null}" },
	{ "", PATHS_KIND_DIRECTORY, 4096, "{\"path\":\".\",\"kind\":\"directory\",\"size\":null}" },
	{ "huge", PATHS_KIND_FILE, UINT64_MAX,
	  "{\"path\":\"huge\",\"kind\":\"file\",\"size\":null}" },
};

START_TEST(test_entry)
{
	const struct entry_row *row = &entry_rows[_i];
	struct paths_stat st = { .kind = row->kind, .size = row->size };
	json_auto_t *got = paths_entry_encode(row->rel, &st);
	_cleanup_free_ char *text = NULL;

	ck_assert_ptr_nonnull(got);
	text = json_dumps(got, JSON_COMPACT | JSON_PRESERVE_ORDER);
	ck_assert_str_eq(text, row->json);
}
END_TEST

START_TEST(test_entry_bad_utf8)
{
	struct paths_stat st = { .kind = PATHS_KIND_FILE, .size = 1 };

	ck_assert_ptr_null(paths_entry_encode("bad\xff", &st));
}
END_TEST

/* ---- names -------------------------------------------------------------------------------- */

START_TEST(test_strings)
{
	ck_assert_str_eq(paths_kind_to_string(PATHS_KIND_FILE), "file");
	ck_assert_str_eq(paths_kind_to_string(PATHS_KIND_DIRECTORY), "directory");
	ck_assert_str_eq(paths_kind_to_string(PATHS_KIND_SYMLINK), "symlink");
	ck_assert_str_eq(paths_kind_to_string(PATHS_KIND_OTHER), "other");
	ck_assert_ptr_null(paths_kind_to_string(_PATHS_KIND_MAX));
	for (int i = 0; i < _PATHS_OP_MAX; i++)
		ck_assert_ptr_nonnull(paths_op_to_string(i));
	ck_assert_ptr_null(paths_op_to_string(_PATHS_OP_MAX));
	ck_assert_str_eq(paths_outcome_to_string(PATHS_OUTCOME_CONFINEMENT), "ConfinementError");
	ck_assert_str_eq(paths_outcome_to_string(PATHS_OUTCOME_NOT_A_DIRECTORY),
			 "NotADirectoryError");
	ck_assert_str_eq(paths_outcome_to_string(PATHS_OUTCOME_FILE_NOT_FOUND), "FileNotFoundError");
	ck_assert_str_eq(paths_outcome_to_string(PATHS_OUTCOME_OS_ERROR), "OSError");
	for (int i = 0; i < _PATHS_OUTCOME_MAX; i++)
		ck_assert_ptr_nonnull(paths_outcome_to_string(i));
	ck_assert_ptr_null(paths_outcome_to_string(_PATHS_OUTCOME_MAX));
	for (int i = 0; i < _PATHS_R_MAX; i++) {
		ck_assert_ptr_nonnull(paths_reason_to_string(i));
		ck_assert_int_ne(reason_errno[i], 0);
	}
	ck_assert_ptr_null(paths_reason_to_string(_PATHS_R_MAX));
	ck_assert_ptr_null(paths_reason_to_string(-1));
	ck_assert_int_eq(paths_reason_outcome(_PATHS_R_MAX), PATHS_OUTCOME_INTERNAL);
}
END_TEST

/* The phrases behaviour-docker §5 matches, and each reason's wire type. */
struct reason_row {
	enum paths_reason reason;
	enum paths_outcome outcome;
	const char *phrase;
};

static const struct reason_row reason_rows[] = {
	{ PATHS_R_BACKSLASH, PATHS_OUTCOME_CONFINEMENT, "backslash" },
	{ PATHS_R_NUL, PATHS_OUTCOME_CONFINEMENT, "NUL" },
	{ PATHS_R_OUTSIDE, PATHS_OUTCOME_CONFINEMENT, "outside working directory" },
	{ PATHS_R_WD_OUTSIDE_BASE, PATHS_OUTCOME_CONFINEMENT, "storage base" },
	{ PATHS_R_WORKING_DIRECTORY, PATHS_OUTCOME_CONFINEMENT, "working directory itself" },
	{ PATHS_R_NEAR_ROOT, PATHS_OUTCOME_CONFINEMENT, "close to the root" },
	{ PATHS_R_SYMLINK_ANCESTOR, PATHS_OUTCOME_CONFINEMENT, "real directory" },
	{ PATHS_R_SYMLINK_LEAF, PATHS_OUTCOME_CONFINEMENT, "link" },
	{ PATHS_R_NOT_A_DIRECTORY, PATHS_OUTCOME_NOT_A_DIRECTORY, "not a directory" },
	{ PATHS_R_NOT_FOUND, PATHS_OUTCOME_FILE_NOT_FOUND, "no such file" },
	{ PATHS_R_NOT_REGULAR, PATHS_OUTCOME_OS_ERROR, "not a regular file" },
	{ PATHS_R_IS_DIRECTORY, PATHS_OUTCOME_OS_ERROR, "is a directory" },
	{ PATHS_R_TOO_LONG, PATHS_OUTCOME_INVALID_PARAMS, "longer than 4095 bytes" },
	{ PATHS_R_NAME_TOO_LONG, PATHS_OUTCOME_INVALID_PARAMS, "longer than 255 bytes" },
	{ PATHS_R_TOO_MANY_COMPONENTS, PATHS_OUTCOME_INVALID_PARAMS, "more than 128 components" },
	{ PATHS_R_BASE_INVALID, PATHS_OUTCOME_INTERNAL, "storage base" },
	{ PATHS_R_STAT_TOO_LONG, PATHS_OUTCOME_ENGINE, "too long" },
	{ PATHS_R_STAT_BASE64, PATHS_OUTCOME_ENGINE, "base64" },
	{ PATHS_R_STAT_JSON, PATHS_OUTCOME_ENGINE, "JSON" },
	{ PATHS_R_STAT_FIELD, PATHS_OUTCOME_ENGINE, "member" },
	{ PATHS_R_STAT_SIZE, PATHS_OUTCOME_ENGINE, "size" },
	{ PATHS_R_STAT_MODE, PATHS_OUTCOME_ENGINE, "mode" },
	{ PATHS_R_STAT_MTIME, PATHS_OUTCOME_ENGINE, "mtime" },
};

START_TEST(test_reason)
{
	const struct reason_row *row = &reason_rows[_i];

	ck_assert_int_eq(paths_reason_outcome(row->reason), row->outcome);
	ck_assert_msg(strstr(paths_reason_to_string(row->reason), row->phrase),
		      "\"%s\" lacks \"%s\"", paths_reason_to_string(row->reason), row->phrase);
}
END_TEST

START_TEST(test_reason_rows_complete)
{
	ck_assert_uint_eq(ELEMENTSOF(reason_rows), _PATHS_R_MAX);
	for (size_t i = 0; i < ELEMENTSOF(reason_rows); i++)
		ck_assert_int_eq(reason_rows[i].reason, (int)i);
}
END_TEST

/* ---- exec working directories under a pseudo filesystem ---------------- */

static const struct {
	const char *path;
	const char *root;     /* NULL: not refused */
} pseudo_rows[] = {
	{ "/proc", "/proc" },
	{ "/proc/self/cwd", "/proc" },
	{ "/proc/self/fd/3", "/proc" },
	{ "/sys", "/sys" },
	{ "/sys/fs/cgroup", "/sys" },
	{ "/dev", "/dev" },
	{ "/dev/shm", "/dev" },
	{ "/", NULL },
	{ "/processes", NULL },
	{ "/system", NULL },
	{ "/devices/x", NULL },
	{ "/home/proc", NULL },
	{ "/maf-sandbox/dev", NULL },
};

START_TEST(test_pseudo_fs_root)
{
	const char *got = paths_pseudo_fs_root(pseudo_rows[_i].path);

	if (!pseudo_rows[_i].root)
		ck_assert_msg(got == NULL, "%s: refused under %s", pseudo_rows[_i].path, got);
	else
		ck_assert_msg(got && strcmp(got, pseudo_rows[_i].root) == 0, "%s: %s", pseudo_rows[_i].path,
			      got ? got : "(not refused)");
}
END_TEST

static Suite *paths_suite(void)
{
	Suite *s = suite_create("paths");
	TCase *tc;

	tc = tcase_create("confine");
	tcase_add_loop_test(tc, test_confine, 0, ELEMENTSOF(confine_rows));
	tcase_add_test(tc, test_confine_nul);
	tcase_add_test(tc, test_confine_length);
	tcase_add_test(tc, test_confine_length_before_normalising);
	tcase_add_test(tc, test_confine_name_length);
	tcase_add_test(tc, test_confine_components);
	tcase_add_loop_test(tc, test_relative_to, 0, ELEMENTSOF(rel_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("walk");
	tcase_add_loop_test(tc, test_ancestors, 0, ELEMENTSOF(walk_rows));
	tcase_add_loop_test(tc, test_walk_verdict, 0, ELEMENTSOF(walk_verdict_rows));
	tcase_add_loop_test(tc, test_leaf_verdict, 0, ELEMENTSOF(leaf_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("bundles");
	tcase_add_loop_test(tc, test_plan, 0, ELEMENTSOF(plan_rows));
	tcase_add_test(tc, test_plan_owned_below_the_base);
	tcase_add_test(tc, test_plan_free_null);
	tcase_add_loop_test(tc, test_drive, 0, ELEMENTSOF(drive_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("go_mode");
	tcase_add_loop_test(tc, test_go_mode, 0, ELEMENTSOF(mode_rows));
	tcase_add_test(tc, test_go_mode_bits);
	tcase_add_loop_test(tc, test_kind_from_st_mode, 0, ELEMENTSOF(st_mode_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("stat_header");
	tcase_add_test(tc, test_stat_golden);
	tcase_add_loop_test(tc, test_stat_header, 0, ELEMENTSOF(stat_rows));
	tcase_add_loop_test(tc, test_stat_header_base64, 0, ELEMENTSOF(b64_bad_rows));
	tcase_add_test(tc, test_stat_header_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("entry");
	tcase_add_loop_test(tc, test_entry, 0, ELEMENTSOF(entry_rows));
	tcase_add_test(tc, test_entry_bad_utf8);
	suite_add_tcase(s, tc);

	tc = tcase_create("reasons");
	tcase_add_test(tc, test_strings);
	tcase_add_loop_test(tc, test_reason, 0, ELEMENTSOF(reason_rows));
	tcase_add_test(tc, test_reason_rows_complete);
	suite_add_tcase(s, tc);

	tc = tcase_create("exec_working_directory");
	tcase_add_loop_test(tc, test_pseudo_fs_root, 0, ELEMENTSOF(pseudo_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(paths_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
