/* check_identity.c — the guest's uid:gid (behaviour-docker §2.1 step 13):
 * Config.User split and refused, the numeric facts it gives, passwd and group
 * lookups, `id` output, the final gid-0 rule, and the whole resolution as the
 * acquire path drives it (the identity facts table of behaviour-docker). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "identity.h"
#include "xmalloc.h"

#define OK 0
#define NOT_KNOWN (-1L)     /* an id the resolution must not know */

/* ---- Config.User ------------------------------------------------------------- */

/* One half as a row wants it: NULL name and numeric false → absent. */
struct half_want {
	bool present, numeric;
	unsigned long id;
	const char *name;
};

#define ABSENT { false, false, 0, NULL }
#define NUM(n) { true, true, (n), NULL }
#define NAME(s) { true, false, 0, (s) }

struct user_row {
	const char *in;
	int rc;
	struct half_want user, group;
};

static const struct user_row user_rows[] = {
	{ "", OK, ABSENT, ABSENT },
	{ "0:0", OK, NUM(0), NUM(0) },
	{ ":20001", OK, ABSENT, NUM(20001) },
	{ ":", OK, ABSENT, ABSENT },
	{ "1000", OK, NUM(1000), ABSENT },
	{ "1000:", OK, NUM(1000), ABSENT },
	{ "1000:1000", OK, NUM(1000), NUM(1000) },
	{ "1000:0", OK, NUM(1000), NUM(0) },
	{ "007", OK, NUM(7), ABSENT },
	{ "app", OK, NAME("app"), ABSENT },
	{ "app:", OK, NAME("app"), ABSENT },
	{ "app:staff", OK, NAME("app"), NAME("staff") },
	{ "app:100", OK, NAME("app"), NUM(100) },
	{ "1000:staff", OK, NUM(1000), NAME("staff") },
	{ ":staff", OK, ABSENT, NAME("staff") },
	/* Not all digits: a name, looked up as such. */
	{ "-1", OK, NAME("-1"), ABSENT },
	{ "+5", OK, NAME("+5"), ABSENT },
	{ "1000a", OK, NAME("1000a"), ABSENT },
	{ " 1000", OK, NAME(" 1000"), ABSENT },
	{ "caf\xc3\xa9:d\xff", OK, NAME("caf\xc3\xa9"), NAME("d\xff") },
	/* Ids at and over IDENTITY_ID_MAX (4294967294; 4294967295 is "no id"). */
	{ "4294967294", OK, NUM(4294967294UL), ABSENT },
	{ "4294967294:4294967294", OK, NUM(4294967294UL), NUM(4294967294UL) },
	{ "4294967295", -ERANGE, ABSENT, ABSENT },
	{ "0:4294967295", -ERANGE, ABSENT, ABSENT },
	{ ":4294967295", -ERANGE, ABSENT, ABSENT },
	{ "4294967296", -ERANGE, ABSENT, ABSENT },
	{ "99999999999999999999999999", -ERANGE, ABSENT, ABSENT },
	{ "00000000000000000000000001", OK, NUM(1), ABSENT },
	/* Bytes no passwd or group name holds. */
	{ "app\n", -EINVAL, ABSENT, ABSENT },
	{ "a\nb:c", -EINVAL, ABSENT, ABSENT },
	{ "a/b", -EINVAL, ABSENT, ABSENT },
	{ "app:st/aff", -EINVAL, ABSENT, ABSENT },
	{ "app:st\naff", -EINVAL, ABSENT, ABSENT },
	{ "app:staff:x", -EINVAL, ABSENT, ABSENT },
	{ "::", -EINVAL, ABSENT, ABSENT },
	{ "1000:0:0", -EINVAL, ABSENT, ABSENT },
};

static void assert_half(const char *in, const char *which, const struct identity_half *h,
			const struct half_want *w)
{
	ck_assert_msg(h->present == w->present, "'%s' %s: present %d", in, which, h->present);
	if (!w->present)
		return;
	ck_assert_msg(h->numeric == w->numeric, "'%s' %s: numeric %d", in, which, h->numeric);
	if (w->numeric)
		ck_assert_msg(h->id == w->id, "'%s' %s: id %lu", in, which, h->id);
	else
		ck_assert_str_eq(h->name, w->name);
}

START_TEST(test_parse_user)
{
	const struct user_row *row = &user_rows[_i];
	struct identity_user u, before;
	int r;

	memset(&u, 0xa5, sizeof(u));
	memcpy(&before, &u, sizeof(u));
	r = identity_parse_user(row->in, &u);
	ck_assert_msg(r == row->rc, "'%s': %d, want %d", row->in, r, row->rc);
	if (r < 0) {
		ck_assert_msg(memcmp(&u, &before, sizeof(u)) == 0, "'%s': ret written", row->in);
		return;
	}
	assert_half(row->in, "user", &u.user, &row->user);
	assert_half(row->in, "group", &u.group, &row->group);
}
END_TEST

/* IDENTITY_USER_MAX_BYTES is a Config.User; one byte more is not, whatever
 * its shape. */
START_TEST(test_parse_user_length)
{
	char *s = xmalloc(IDENTITY_USER_MAX_BYTES + 2);
	struct identity_user u;

	memset(s, 'a', IDENTITY_USER_MAX_BYTES + 1);
	s[IDENTITY_USER_MAX_BYTES] = '\0';
	ck_assert_int_eq(identity_parse_user(s, &u), 0);
	ck_assert_uint_eq(strlen(u.user.name), IDENTITY_USER_MAX_BYTES);
	ck_assert(!u.group.present);

	s[0] = ':';                                 /* the longest group name */
	ck_assert_int_eq(identity_parse_user(s, &u), 0);
	ck_assert(!u.user.present);
	ck_assert_uint_eq(strlen(u.group.name), IDENTITY_USER_MAX_BYTES - 1);

	s[0] = 'a';
	s[IDENTITY_USER_MAX_BYTES] = 'a';
	s[IDENTITY_USER_MAX_BYTES + 1] = '\0';
	ck_assert_int_eq(identity_parse_user(s, &u), -E2BIG);
	memset(s, '0', IDENTITY_USER_MAX_BYTES + 1); /* digits, value 0: still too long */
	ck_assert_int_eq(identity_parse_user(s, &u), -E2BIG);
	s[IDENTITY_USER_MAX_BYTES] = '\0';
	ck_assert_int_eq(identity_parse_user(s, &u), 0);
	ck_assert(u.user.numeric);
	ck_assert_uint_eq(u.user.id, 0);
	free(s);
}
END_TEST

/* ---- the numeric facts ------------------------------------------------------- */

struct facts_row {
	const char *in;
	long uid, gid;              /* NOT_KNOWN or the id */
	bool more, passwd, group;   /* from_user's answer, the two predicates */
};

static const struct facts_row facts_rows[] = {
	{ "", 0, 0, false, false, false },
	{ ":", 0, 0, false, false, false },
	{ "0:0", 0, 0, false, false, false },
	{ ":20001", 0, 20001, false, false, false },
	{ ":staff", 0, NOT_KNOWN, true, false, true },
	{ "0", 0, NOT_KNOWN, true, true, false },
	{ "1000", 1000, NOT_KNOWN, true, true, false },
	{ "10001:", 10001, NOT_KNOWN, true, true, false },
	{ "1000:1000", 1000, 1000, false, false, false },
	{ "1000:0", 1000, 0, false, false, false },
	{ "1000:staff", 1000, NOT_KNOWN, true, false, true },
	{ "app", NOT_KNOWN, NOT_KNOWN, true, true, false },
	{ "app:", NOT_KNOWN, NOT_KNOWN, true, true, false },
	{ "app:100", NOT_KNOWN, 100, true, true, false },
	{ "app:staff", NOT_KNOWN, NOT_KNOWN, true, true, true },
};

static void assert_id(const char *in, const struct identity *id, long uid, long gid)
{
	ck_assert_msg(id->uid_known == (uid != NOT_KNOWN), "'%s': uid_known %d", in, id->uid_known);
	if (uid != NOT_KNOWN)
		ck_assert_msg(id->uid == (uid_t)uid, "'%s': uid %u, want %ld", in, id->uid, uid);
	ck_assert_msg(id->gid_known == (gid != NOT_KNOWN), "'%s': gid_known %d", in, id->gid_known);
	if (gid != NOT_KNOWN)
		ck_assert_msg(id->gid == (gid_t)gid, "'%s': gid %u, want %ld", in, id->gid, gid);
}

static void user_of(const char *in, struct identity_user *u)
{
	ck_assert_msg(identity_parse_user(in, u) == 0, "'%s' does not parse", in);
}

START_TEST(test_from_user)
{
	const struct facts_row *row = &facts_rows[_i];
	struct identity_user u;
	/* Stale facts from an earlier resolution must not survive. */
	struct identity id = { .uid_known = true, .gid_known = true, .uid = 77, .gid = 88 };

	user_of(row->in, &u);
	ck_assert_msg(identity_from_user(&u, &id) == row->more, "'%s': more", row->in);
	assert_id(row->in, &id, row->uid, row->gid);
	ck_assert_msg(identity_needs_passwd(&u, &id) == row->passwd, "'%s': passwd", row->in);
	ck_assert_msg(identity_needs_group(&u, &id) == row->group, "'%s': group", row->in);
}
END_TEST

/* The predicates follow what is known, not only what Config.User says. */
START_TEST(test_needs_follow_state)
{
	struct identity_user u;
	struct identity id;

	user_of("app", &u);
	identity_from_user(&u, &id);
	id.uid_known = true;
	ck_assert(identity_needs_passwd(&u, &id));  /* still its gid */
	id.gid_known = true;
	ck_assert(!identity_needs_passwd(&u, &id));

	user_of("app:staff", &u);
	identity_from_user(&u, &id);
	id.uid_known = true;
	ck_assert(!identity_needs_passwd(&u, &id)); /* the gid comes from /etc/group */
	ck_assert(identity_needs_group(&u, &id));
	id.gid_known = true;
	ck_assert(!identity_needs_group(&u, &id));

	/* A numeric group half is never a name to look up. */
	user_of("1000:100", &u);
	identity_from_user(&u, &id);
	id.gid_known = false;
	ck_assert(!identity_needs_group(&u, &id));
}
END_TEST

/* ---- /etc/passwd -------------------------------------------------------------- */

struct db_row {
	const char *what;
	const char *user;           /* Config.User */
	const char *body;
	size_t len;                 /* 0: strlen(body) */
	long uid, gid;              /* afterwards */
};

static const struct db_row passwd_rows[] = {
	{ "exact name, not a prefix", "app",
	  "apple:x:1:1\nap:x:2:2\nApp:x:3:3\napp:x:1000:1001:App:/home/app:/bin/sh\n", 0,
	  1000, 1001 },
	{ "a shorter name does not match", "ap", "app:x:1000:1000::/:/bin/sh\n", 0,
	  NOT_KNOWN, NOT_KNOWN },
	{ "a longer name does not match", "apple", "app:x:1000:1000::/:/bin/sh\n", 0,
	  NOT_KNOWN, NOT_KNOWN },
	{ "not found", "app", "root:x:0:0:root:/root:/bin/sh\n", 0, NOT_KNOWN, NOT_KNOWN },
	{ "first line of a name", "app", "app:x:1:2::/:/bin/sh\napp:x:3:4::/:/bin/sh\n", 0, 1, 2 },
	{ "numeric uid, first line with it", "1000",
	  "a:x:999:9\nb:x:1000:10::/:/bin/sh\nc:x:1000:20::/:/bin/sh\n", 0, 1000, 10 },
	{ "numeric uid, no line", "1000", "a:x:999:9\n", 0, 1000, NOT_KNOWN },
	{ "numeric uid matches the uid field, not a name", "1000", "1000:x:5:6\n", 0,
	  1000, NOT_KNOWN },
	{ "uid 0 from root's line", "0", "root:x:0:0:root:/root:/bin/sh\n", 0, 0, 0 },
	{ "four fields suffice", "app", "app:x:5:6", 0, 5, 6 },
	{ "too few fields", "app", "app:x:1000\napp\napp:x:7:8\n", 0, 7, 8 },
	{ "too few fields (numeric)", "1000", "a:x:1000\nb:x:1000:9\n", 0, 1000, 9 },
	{ "non-numeric uid", "app", "app:x:abc:5\napp:x:7:8\n", 0, 7, 8 },
	{ "signed or spaced uid", "app", "app:x:+7:8\napp:x: 7:8\napp:x:7 :8\napp:x:9:10\n", 0,
	  9, 10 },
	{ "empty uid", "app", "app:x::5\napp:x:1:2\n", 0, 1, 2 },
	{ "non-numeric gid", "app", "app:x:7:g\napp:x:7:\napp:x:9:10\n", 0, 9, 10 },
	{ "uid over IDENTITY_ID_MAX", "app", "app:x:4294967295:1\napp:x:3:4\n", 0, 3, 4 },
	{ "gid over IDENTITY_ID_MAX", "app", "app:x:3:4294967295\napp:x:3:4294967294\n", 0,
	  3, 4294967294L },
	{ "empty name skipped (numeric)", "1000", ":x:1000:5\nz:x:1000:6\n", 0, 1000, 6 },
	{ "CRLF lines", "app", "root:x:0:0:root:/root:/bin/sh\r\napp:x:1000:1001\r\n", 0,
	  1000, 1001 },
	{ "CRLF lines (numeric)", "1000", "app:x:1000:1001\r\n", 0, 1000, 1001 },
	{ "last line without newline", "app", "root:x:0:0::/:/bin/sh\napp:x:1000:1001", 0,
	  1000, 1001 },
	{ "blank lines and comments", "app", "\n\r\n# app:x:1:1\n#app:x:1:1\napp:x:2:3\n", 0,
	  2, 3 },
	{ "a NUL in a line", "app", "app\0:x:1:1\napp:x:1\0:1\napp:x:2:3", 31, 2, 3 },
	{ "group half given: gid kept", "app:100", "app:x:1000:1000\n", 0, 1000, 100 },
	{ "named group half: gid left to /etc/group", "app:staff", "app:x:1000:1000\n", 0,
	  1000, NOT_KNOWN },
	{ "both halves numeric: not read", "1000:1000", "a:x:1000:5\n", 0, 1000, 1000 },
	{ "absent user: not read", ":staff", "root:x:0:7\n:x:0:7\n", 0, 0, NOT_KNOWN },
	{ "empty body", "app", "", 0, NOT_KNOWN, NOT_KNOWN },
};

START_TEST(test_passwd)
{
	const struct db_row *row = &passwd_rows[_i];
	size_t len = row->len ? row->len : strlen(row->body);
	struct identity_user u;
	struct identity id;

	user_of(row->user, &u);
	identity_from_user(&u, &id);
	ck_assert_msg(identity_apply_passwd(&u, row->body, len, &id) == 0, "%s", row->what);
	assert_id(row->what, &id, row->uid, row->gid);
}
END_TEST

/* What id already knows stays: a passwd or group line fills only the gaps. */
START_TEST(test_fills_gaps_only)
{
	static const char body[] = "app:x:1000:1001\n", group[] = "staff:x:50:\n";
	struct identity_user u;
	struct identity id;

	user_of("app", &u);
	identity_from_user(&u, &id);
	id.uid_known = true, id.uid = 5;            /* say, from `id -u` */
	ck_assert_int_eq(identity_apply_passwd(&u, body, strlen(body), &id), 0);
	assert_id("uid known", &id, 5, 1001);

	identity_from_user(&u, &id);
	id.gid_known = true, id.gid = 6;
	ck_assert_int_eq(identity_apply_passwd(&u, body, strlen(body), &id), 0);
	assert_id("gid known", &id, 1000, 6);

	user_of("app:staff", &u);
	identity_from_user(&u, &id);
	id.gid_known = true, id.gid = 6;            /* say, from `id -g` */
	ck_assert_int_eq(identity_apply_group(&u, group, strlen(group), &id), 0);
	assert_id("group: gid known", &id, NOT_KNOWN, 6);
}
END_TEST

/* ---- /etc/group --------------------------------------------------------------- */

static const struct db_row group_rows[] = {
	{ "exact name, not a prefix", "app:staff", "staffers:x:1:\nstaf:x:2:\nstaff:x:50:app,bob\n",
	  0, NOT_KNOWN, 50 },
	{ "a shorter name does not match", "app:sta", "staff:x:50:\n", 0, NOT_KNOWN, NOT_KNOWN },
	{ "first line of a name", "1000:staff", "staff:x:50:\nstaff:x:60:\n", 0, 1000, 50 },
	{ "three fields suffice, no newline", "1000:staff", "staff:x:50", 0, 1000, 50 },
	{ "too few fields", "1000:staff", "staff:x\nstaff\nstaff:x:51:\n", 0, 1000, 51 },
	{ "non-numeric gid", "1000:staff", "staff:x:abc:\nstaff:x::\nstaff:x:52:\n", 0, 1000, 52 },
	{ "gid over IDENTITY_ID_MAX", "1000:staff", "staff:x:4294967295:\nstaff:x:53:\n", 0,
	  1000, 53 },
	{ "CRLF lines", "1000:staff", "root:x:0:\r\nstaff:x:55\r\n", 0, 1000, 55 },
	{ "members do not count", "1000:app", "staff:x:50:app\n", 0, 1000, NOT_KNOWN },
	{ "the gid field, not a name", "1000:50", "50:x:7:\n", 0, 1000, 50 },
	{ "absent user stays root", ":staff", "staff:x:50:\n", 0, 0, 50 },
	{ "no group half: not read", "1000", "root:x:0:\n", 0, 1000, NOT_KNOWN },
	{ "last line without newline", "1000:staff", "root:x:0:\nstaff:x:56:a,b", 0, 1000, 56 },
};

START_TEST(test_group)
{
	const struct db_row *row = &group_rows[_i];
	struct identity_user u;
	struct identity id;

	user_of(row->user, &u);
	identity_from_user(&u, &id);
	ck_assert_msg(identity_apply_group(&u, row->body, strlen(row->body), &id) == 0, "%s",
		      row->what);
	assert_id(row->what, &id, row->uid, row->gid);
}
END_TEST

/* ---- the body cap --------------------------------------------------------------- */

/* A body of exactly len bytes: filler lines, then last (no newline) at the
 * very end. */
static char *body_ending_in(size_t len, const char *last)
{
	static const char filler[] = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
	size_t tail = strlen(last), off = 0;
	char *b = xmalloc(len);

	ck_assert_uint_ge(len, tail + 1);
	while (len - tail - off > 0) {
		size_t n = len - tail - off;

		n = n < strlen(filler) ? n : strlen(filler);
		memcpy(b + off, filler, n);
		off += n;
		b[off - 1] = '\n';
	}
	memcpy(b + off, last, tail);
	return b;
}

START_TEST(test_db_max_bytes)
{
	struct identity_user u;
	struct identity id;
	char *b;

	b = body_ending_in(IDENTITY_DB_MAX_BYTES, "app:x:1000:1001");
	user_of("app", &u);
	identity_from_user(&u, &id);
	ck_assert_int_eq(identity_apply_passwd(&u, b, IDENTITY_DB_MAX_BYTES, &id), 0);
	assert_id("passwd at the cap", &id, 1000, 1001);
	free(b);

	b = body_ending_in(IDENTITY_DB_MAX_BYTES + 1, "app:x:1000:1001");
	identity_from_user(&u, &id);
	ck_assert_int_eq(identity_apply_passwd(&u, b, IDENTITY_DB_MAX_BYTES + 1, &id), -E2BIG);
	assert_id("passwd over the cap", &id, NOT_KNOWN, NOT_KNOWN);
	free(b);

	b = body_ending_in(IDENTITY_DB_MAX_BYTES, "staff:x:50:");
	user_of("1000:staff", &u);
	identity_from_user(&u, &id);
	ck_assert_int_eq(identity_apply_group(&u, b, IDENTITY_DB_MAX_BYTES, &id), 0);
	assert_id("group at the cap", &id, 1000, 50);
	free(b);

	b = body_ending_in(IDENTITY_DB_MAX_BYTES + 1, "staff:x:50:");
	identity_from_user(&u, &id);
	ck_assert_int_eq(identity_apply_group(&u, b, IDENTITY_DB_MAX_BYTES + 1, &id), -E2BIG);
	assert_id("group over the cap", &id, 1000, NOT_KNOWN);
	free(b);
}
END_TEST

/* ---- `id -u` / `id -g` ------------------------------------------------------------ */

struct id_row {
	const char *out;
	size_t len;                 /* 0: strlen(out) */
	int rc;
	unsigned long id;
};

static const struct id_row id_rows[] = {
	{ "1000\n", 0, OK, 1000 },
	{ "1000", 0, OK, 1000 },
	{ "0\n", 0, OK, 0 },
	{ "1000 ", 0, OK, 1000 },
	{ "1000 \n\n", 0, OK, 1000 },
	{ "4294967294\n", 0, OK, 4294967294UL },
	{ " 1000", 0, -EINVAL, 0 },
	{ "\n1000", 0, -EINVAL, 0 },
	{ "abc", 0, -EINVAL, 0 },
	{ "1000abc\n", 0, -EINVAL, 0 },
	{ "", 0, -EINVAL, 0 },
	{ "\n", 0, -EINVAL, 0 },
	{ "  ", 0, -EINVAL, 0 },
	{ "-1\n", 0, -EINVAL, 0 },
	{ "+1\n", 0, -EINVAL, 0 },
	{ "10 00", 0, -EINVAL, 0 },
	{ "1000\n2000\n", 0, -EINVAL, 0 },
	{ "1000\t", 0, -EINVAL, 0 },
	{ "1000\r\n", 0, -EINVAL, 0 },
	{ "1000\0", 5, -EINVAL, 0 },
	{ "4294967295\n", 0, -EINVAL, 0 },
	{ "99999999999", 0, -EINVAL, 0 },
	{ "99999999999999999999999999", 0, -EINVAL, 0 },
};

START_TEST(test_id_output)
{
	const struct id_row *row = &id_rows[_i];
	size_t len = row->len ? row->len : strlen(row->out);
	unsigned long v = 12345;
	int r = identity_parse_id_output(row->out, len, &v);

	ck_assert_msg(r == row->rc, "'%s': %d, want %d", row->out, r, row->rc);
	ck_assert_uint_eq(v, r == 0 ? row->id : 12345);
}
END_TEST

/* ---- the last rule ------------------------------------------------------------------ */

struct finish_row {
	struct identity in;
	bool resolved;
	struct identity out;
};

static const struct finish_row finish_rows[] = {
	{ { true, false, 1000, 77 }, true, { true, true, 1000, 0 } },
	{ { true, true, 1000, 5 }, true, { true, true, 1000, 5 } },
	{ { true, true, 0, 0 }, true, { true, true, 0, 0 } },
	{ { false, true, 0, 5 }, false, { false, true, 0, 5 } },
	{ { false, false, 0, 0 }, false, { false, false, 0, 0 } },
};

START_TEST(test_finish)
{
	const struct finish_row *row = &finish_rows[_i];
	struct identity id = row->in;

	ck_assert_int_eq(identity_finish(&id), row->resolved);
	ck_assert_int_eq(id.uid_known, row->out.uid_known);
	ck_assert_int_eq(id.gid_known, row->out.gid_known);
	ck_assert_uint_eq(id.uid, row->out.uid);
	ck_assert_uint_eq(id.gid, row->out.gid);
}
END_TEST

/* ---- a whole resolution ------------------------------------------------------------- */

/* The acquire path's order: Config.User, /etc/passwd, /etc/group, then
 * `id -u` / `id -g` each only for a missing half, then the last rule. NULL
 * account data is a file or exec that gave nothing. */
struct resolve_row {
	const char *what, *user;
	const char *passwd, *group, *id_u, *id_g;
	bool resolved;
	long uid, gid;
	bool read_passwd, read_group, ran_id_u, ran_id_g;
};

static const char *const PW = "root:x:0:0:root:/root:/bin/sh\n"
			      "app:x:1000:1000::/home/app:/bin/sh\n"
			      "svc:x:10001:10002::/:/sbin/nologin\n";
static const char *const GR = "root:x:0:\ndevs:x:3000:app\n";

static const struct resolve_row resolve_rows[] = {
	{ "unset", "", PW, GR, "9", "9", true, 0, 0, false, false, false, false },
	{ "0 with id -g answering", "0", NULL, NULL, "9", "20001\n", true, 0, 20001,
	  true, false, false, true },
	{ "bare uid, nothing answers", "4242", PW, NULL, NULL, NULL, true, 4242, 0,
	  true, false, false, true },
	{ "10001: gid from passwd", "10001", PW, NULL, NULL, NULL, true, 10001, 10002,
	  true, false, false, false },
	{ "app:20001: id -g never run", "app:20001", PW, NULL, "9", "9", true, 1000, 20001,
	  true, false, false, false },
	{ "named user from passwd, no exec", "app", PW, NULL, "9", "9", true, 1000, 1000,
	  true, false, false, false },
	{ "named user, passwd missing: id answers", "app", NULL, NULL, "1001\n", "1002\n", true,
	  1001, 1002, true, false, true, true },
	{ "10001:devs: passwd never read", "10001:devs", PW, GR, "9", "9", true, 10001, 3000,
	  false, true, false, false },
	{ "app:devs: each half from its file", "app:devs", PW, GR, "9", "9", true, 1000, 3000,
	  true, true, false, false },
	{ ":20001", ":20001", PW, GR, "9", "9", true, 0, 20001, false, false, false, false },
	{ ":", ":", PW, GR, "9", "9", true, 0, 0, false, false, false, false },
	{ "10001:", "10001:", PW, GR, "9", "9", true, 10001, 10002, true, false, false, false },
	{ "half-answering id (uid)", "nobody", PW, GR, "1000\n", "oops", true, 1000, 0,
	  true, false, true, true },
	{ "half-answering id (gid)", "nobody", PW, GR, "", "5\n", false, NOT_KNOWN, 5,
	  true, false, true, true },
	{ "group unknown: id -g only", "app:nogroup", PW, GR, "9", "7\n", true, 1000, 7,
	  true, true, false, true },
	{ "unresolved", "nobody", NULL, NULL, NULL, NULL, false, NOT_KNOWN, NOT_KNOWN,
	  true, false, true, true },
};

START_TEST(test_resolve)
{
	const struct resolve_row *row = &resolve_rows[_i];
	struct identity_user u;
	struct identity id;
	bool read_passwd = false, read_group = false, ran_u = false, ran_g = false;
	unsigned long v;

	user_of(row->user, &u);
	if (identity_from_user(&u, &id)) {
		if (identity_needs_passwd(&u, &id)) {
			read_passwd = true;
			if (row->passwd)
				ck_assert_int_eq(identity_apply_passwd(&u, row->passwd,
								       strlen(row->passwd), &id), 0);
		}
		if (identity_needs_group(&u, &id)) {
			read_group = true;
			if (row->group)
				ck_assert_int_eq(identity_apply_group(&u, row->group,
								      strlen(row->group), &id), 0);
		}
	}
	if (!id.uid_known) {
		ran_u = true;
		if (row->id_u && identity_parse_id_output(row->id_u, strlen(row->id_u), &v) == 0)
			id.uid_known = true, id.uid = (uid_t)v;
	}
	if (!id.gid_known) {
		ran_g = true;
		if (row->id_g && identity_parse_id_output(row->id_g, strlen(row->id_g), &v) == 0)
			id.gid_known = true, id.gid = (gid_t)v;
	}
	ck_assert_msg(identity_finish(&id) == row->resolved, "%s: resolved", row->what);
	assert_id(row->what, &id, row->uid, row->gid);
	ck_assert_msg(read_passwd == row->read_passwd, "%s: passwd read %d", row->what, read_passwd);
	ck_assert_msg(read_group == row->read_group, "%s: group read %d", row->what, read_group);
	ck_assert_msg(ran_u == row->ran_id_u, "%s: id -u run %d", row->what, ran_u);
	ck_assert_msg(ran_g == row->ran_id_g, "%s: id -g run %d", row->what, ran_g);
}
END_TEST

/* ---- the identity fixed for a sandbox (issue 17, finding 7) --------------- */

/* The first resolution is kept: a later one, made after the guest rewrote
 * its /etc/passwd to make its user uid 0, changes nothing; the exec's User
 * is the fixed numbers. */
START_TEST(test_fixed_first_wins)
{
	struct identity_fixed f = { 0 };
	char user[IDENTITY_USER_STRING_MAX];
	const char passwd_then[] = "root:x:0:0::/root:/bin/sh\ntester:x:1000:1000::/home/t:/bin/sh\n";
	const char passwd_later[] = "root:x:0:0::/root:/bin/sh\ntester:x:0:0::/home/t:/bin/sh\n";
	struct identity_user u;
	struct identity id;

	ck_assert_int_eq(identity_fixed_user(&f, user), -ENOENT);
	ck_assert_int_eq(identity_parse_user("tester", &u), 0);
	identity_from_user(&u, &id);
	identity_apply_passwd(&u, passwd_then, strlen(passwd_then), &id);
	ck_assert(identity_finish(&id));
	ck_assert(identity_fixed_set(&f, true, id.uid, id.gid));
	ck_assert_int_eq(identity_fixed_user(&f, user), 0);
	ck_assert_str_eq(user, "1000:1000");

	identity_from_user(&u, &id);
	identity_apply_passwd(&u, passwd_later, strlen(passwd_later), &id);
	ck_assert(identity_finish(&id));
	ck_assert_uint_eq(id.uid, 0);
	ck_assert(!identity_fixed_set(&f, true, id.uid, id.gid));
	ck_assert(!identity_fixed_set(&f, false, 0, 0));
	ck_assert(f.known && f.resolved);
	ck_assert_uint_eq(f.uid, 1000);
	ck_assert_uint_eq(f.gid, 1000);
	ck_assert_int_eq(identity_fixed_user(&f, user), 0);
	ck_assert_str_eq(user, "1000:1000");
}
END_TEST

/* An unresolved identity is fixed too (0:0, no User: the engine runs the
 * image's); a resolution after it does not replace it. */
START_TEST(test_fixed_unresolved)
{
	struct identity_fixed f = { 0 };
	char user[IDENTITY_USER_STRING_MAX] = "x";

	ck_assert(identity_fixed_set(&f, false, 77, 88));
	ck_assert(f.known && !f.resolved);
	ck_assert_uint_eq(f.uid, 0);
	ck_assert_uint_eq(f.gid, 0);
	ck_assert_int_eq(identity_fixed_user(&f, user), -ENOENT);
	ck_assert(!identity_fixed_set(&f, true, 1000, 1000));
	ck_assert(!f.resolved);
}
END_TEST

/* The largest ids fit the buffer. */
START_TEST(test_fixed_user_widest)
{
	struct identity_fixed f = { 0 };
	char user[IDENTITY_USER_STRING_MAX];

	ck_assert(identity_fixed_set(&f, true, (uid_t)IDENTITY_ID_MAX, (gid_t)IDENTITY_ID_MAX));
	ck_assert_int_eq(identity_fixed_user(&f, user), 0);
	ck_assert_str_eq(user, "4294967294:4294967294");
}
END_TEST

/* /proc/<pid>/status: the real (first) ids of the Uid and Gid lines. */
static const struct {
	const char *body;
	int want_r;
	uid_t uid;
	gid_t gid;
} status_rows[] = {
	{ "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t1000\t0\t0\t0\n"
	  "Groups:\t1000 27\n", 0, 1000, 1000 },
	{ "Uid: 0 0 0 0\nGid: 5 5 5 5", 0, 0, 5 },
	{ "Name:\tx\nGid:\t1\t1\t1\t1\n", -EINVAL, 0, 0 },                 /* no Uid line */
	{ "Uid:\t-1\t0\t0\t0\nGid:\t0\t0\t0\t0\n", -EINVAL, 0, 0 },        /* not decimal */
	{ "Uid:\t4294967295\t0\t0\t0\nGid:\t0\t0\t0\t0\n", -EINVAL, 0, 0 }, /* over IDENTITY_ID_MAX */
	{ "Uid:\t\nGid:\t0\n", -EINVAL, 0, 0 },                             /* empty field */
	{ "XUid:\t7\nUid:\t8\t8\t8\t8\nGid:\t9\t9\t9\t9\n", 0, 8, 9 },     /* a line's start only */
};

START_TEST(test_proc_status)
{
	uid_t uid = 12345;
	gid_t gid = 12345;
	int r = identity_parse_proc_status(status_rows[_i].body, strlen(status_rows[_i].body), &uid, &gid);

	ck_assert_int_eq(r, status_rows[_i].want_r);
	if (r == 0) {
		ck_assert_uint_eq(uid, status_rows[_i].uid);
		ck_assert_uint_eq(gid, status_rows[_i].gid);
	}
}
END_TEST

static Suite *identity_suite(void)
{
	Suite *s = suite_create("identity");
	TCase *tc;

	tc = tcase_create("Config.User parsing");
	tcase_add_loop_test(tc, test_parse_user, 0, ELEMENTSOF(user_rows));
	tcase_add_test(tc, test_parse_user_length);
	suite_add_tcase(s, tc);

	tc = tcase_create("numeric facts and what is needed");
	tcase_add_loop_test(tc, test_from_user, 0, ELEMENTSOF(facts_rows));
	tcase_add_test(tc, test_needs_follow_state);
	suite_add_tcase(s, tc);

	tc = tcase_create("passwd lookups");
	tcase_add_loop_test(tc, test_passwd, 0, ELEMENTSOF(passwd_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("group lookups");
	tcase_add_loop_test(tc, test_group, 0, ELEMENTSOF(group_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("lookups fill only what is unknown");
	tcase_add_test(tc, test_fills_gaps_only);
	suite_add_tcase(s, tc);

	tc = tcase_create("account body cap");
	tcase_add_test(tc, test_db_max_bytes);
	suite_add_tcase(s, tc);

	tc = tcase_create("id output");
	tcase_add_loop_test(tc, test_id_output, 0, ELEMENTSOF(id_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("finish: gid 0, unresolved without a uid");
	tcase_add_loop_test(tc, test_finish, 0, ELEMENTSOF(finish_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("whole resolution");
	tcase_add_loop_test(tc, test_resolve, 0, ELEMENTSOF(resolve_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("fixed: the first resolution wins");
	tcase_add_test(tc, test_fixed_first_wins);
	tcase_add_test(tc, test_fixed_unresolved);
	tcase_add_test(tc, test_fixed_user_widest);
	suite_add_tcase(s, tc);

	tc = tcase_create("the init's ids from /proc/<pid>/status");
	tcase_add_loop_test(tc, test_proc_status, 0, ELEMENTSOF(status_rows));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(identity_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
