/* identity.c — the guest's uid and gid from Config.User, /etc/passwd,
 * /etc/group and `id` output (behaviour-docker §2.1 step 13). Pure: the
 * bodies are handed in; nothing here reads, allocates or logs.
 *
 * Account lines: fields split at ':'; the first ones are required (passwd:
 * name, password, uid, gid; group: name, password, gid) and anything after
 * them is ignored, as glibc's files backend does, but the ids must be plain
 * decimal (no sign, no spaces). A line that does not fit is skipped, never
 * an error: a guest's odd line must not hide the lines after it. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "identity.h"

#define PASSWD_IDS 2            /* name:pw:uid:gid[:gecos:home:shell] */
#define GROUP_IDS  1            /* name:pw:gid[:members] */
#define DB_MAX_IDS 2

/* ---- numbers and names ---------------------------------------------------- */

static bool is_digits(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Plain decimal (at least one digit, nothing else) up to IDENTITY_ID_MAX. */
static bool parse_id(const char *s, size_t n, unsigned long *ret)
{
	unsigned long v = 0;

	if (!is_digits(s, n))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned long d = (unsigned long)(s[i] - '0');

		if (v > (IDENTITY_ID_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*ret = v;
	return true;
}

/* A byte that cannot stand in a passwd or group name. */
static bool is_bad_name_byte(char c)
{
	return c == ':' || c == '\n' || c == '\0' || c == '/';
}

/* One half of Config.User, s[0..n). */
static int parse_half(const char *s, size_t n, struct identity_half *ret)
{
	*ret = (struct identity_half){ .present = n > 0 };
	if (n == 0)
		return 0;
	if (is_digits(s, n)) {
		if (!parse_id(s, n, &ret->id))
			return -ERANGE;
		ret->numeric = true;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (is_bad_name_byte(s[i]))
			return -EINVAL;
	memcpy(ret->name, s, n);
	ret->name[n] = '\0';
	return 0;
}

int identity_parse_user(const char *config_user, struct identity_user *ret)
{
	size_t len = strnlen(config_user, IDENTITY_USER_MAX_BYTES + 1);
	const char *colon;
	struct identity_user u;
	int r;

	if (len > IDENTITY_USER_MAX_BYTES)
		return -E2BIG;
	colon = memchr(config_user, ':', len);
	r = parse_half(config_user, colon ? (size_t)(colon - config_user) : len, &u.user);
	if (r >= 0)
		r = colon ? parse_half(colon + 1, len - (size_t)(colon + 1 - config_user), &u.group)
			  : parse_half("", 0, &u.group);
	if (r < 0)
		return r;
	*ret = u;
	return 0;
}

/* ---- what is known, what is needed --------------------------------------- */

bool identity_from_user(const struct identity_user *u, struct identity *id)
{
	*id = (struct identity){ 0 };
	if (!u->user.present) {
		id->uid_known = true;                   /* root, as the engine runs it */
		id->gid_known = !u->group.present;      /* "" and ":" are 0:0 */
	} else if (u->user.numeric) {
		id->uid_known = true;
		id->uid = (uid_t)u->user.id;
	}
	if (u->group.present && u->group.numeric) {
		id->gid_known = true;
		id->gid = (gid_t)u->group.id;
	}
	return identity_needs_passwd(u, id) || identity_needs_group(u, id);
}

bool identity_needs_passwd(const struct identity_user *u, const struct identity *id)
{
	return u->user.present && (!id->uid_known || (!u->group.present && !id->gid_known));
}

bool identity_needs_group(const struct identity_user *u, const struct identity *id)
{
	return u->group.present && !u->group.numeric && !id->gid_known;
}

/* ---- account databases ---------------------------------------------------- */

/* One usable line: its name and the ids after name and password (passwd:
 * uid, gid; group: gid). */
struct db_entry {
	const char *name;
	size_t name_len;
	unsigned long id[DB_MAX_IDS];
};

/* The next line of buf[*off..len): its bytes without the '\n' and one
 * trailing '\r'. False at the end of the body. */
static bool next_line(const char *buf, size_t len, size_t *off, const char **ret, size_t *ret_len)
{
	const char *start = buf + *off, *nl;
	size_t n;

	if (*off >= len)
		return false;
	nl = memchr(start, '\n', len - *off);
	n = nl ? (size_t)(nl - start) : len - *off;
	*off += n + (nl ? 1 : 0);
	if (n > 0 && start[n - 1] == '\r')
		n--;
	*ret = start;
	*ret_len = n;
	return true;
}

/* line[0..n) as "name:pw:id…[:rest]" with nids decimal ids: false when the
 * name is empty or an id is not plain decimal. A missing field reads as
 * empty, which no id is, so a line with too few fields is refused too. */
static bool db_parse(const char *line, size_t n, size_t nids, struct db_entry *ret)
{
	const char *end = line + n, *c = line;

	assert(nids <= DB_MAX_IDS);
	for (size_t field = 0; field < 2 + nids; field++) {
		const char *colon = memchr(c, ':', (size_t)(end - c));
		const char *stop = colon ? colon : end;

		if (field == 0) {
			ret->name = c;
			ret->name_len = (size_t)(stop - c);
		} else if (field >= 2 && !parse_id(c, (size_t)(stop - c), &ret->id[field - 2])) {
			return false;
		}
		c = colon ? colon + 1 : end;
	}
	return ret->name_len > 0;
}

/* A numeric key matches the first id (passwd's uid), a name the name. */
static bool db_matches(const struct db_entry *e, const struct identity_half *key)
{
	if (key->numeric)
		return e->id[0] == key->id;
	return e->name_len == strlen(key->name) && memcmp(e->name, key->name, e->name_len) == 0;
}

/* The first usable line of buf that matches key. */
static bool db_find(const char *buf, size_t len, size_t nids, const struct identity_half *key,
		    struct db_entry *ret)
{
	const char *line;
	size_t off = 0, n;

	while (next_line(buf, len, &off, &line, &n))
		if (db_parse(line, n, nids, ret) && db_matches(ret, key))
			return true;
	return false;
}

int identity_apply_passwd(const struct identity_user *u, const char *buf, size_t len,
			  struct identity *id)
{
	struct db_entry e = { 0 };

	if (len > IDENTITY_DB_MAX_BYTES)
		return -E2BIG;
	if (!identity_needs_passwd(u, id) || !db_find(buf, len, PASSWD_IDS, &u->user, &e))
		return 0;
	if (!id->uid_known) {
		id->uid_known = true;
		id->uid = (uid_t)e.id[0];
	}
	if (!u->group.present && !id->gid_known) {
		id->gid_known = true;
		id->gid = (gid_t)e.id[1];
	}
	return 0;
}

int identity_apply_group(const struct identity_user *u, const char *buf, size_t len,
			 struct identity *id)
{
	struct db_entry e = { 0 };

	if (len > IDENTITY_DB_MAX_BYTES)
		return -E2BIG;
	if (!identity_needs_group(u, id) || !db_find(buf, len, GROUP_IDS, &u->group, &e))
		return 0;
	id->gid_known = true;
	id->gid = (gid_t)e.id[0];
	return 0;
}

/* ---- id output and the last rule ------------------------------------------ */

int identity_parse_id_output(const char *buf, size_t len, unsigned long *ret)
{
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	return parse_id(buf, len, ret) ? 0 : -EINVAL;
}

/* The first field after "key:" on a line of a status body. */
static bool status_field(const char *buf, size_t len, const char *key, unsigned long *ret)
{
	size_t k = strlen(key);
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;

		if ((size_t)(le - p) > k && memcmp(p, key, k) == 0) {
			const char *f = p + k, *fe;

			while (f < le && (*f == '\t' || *f == ' '))
				f++;
			for (fe = f; fe < le && *fe != '\t' && *fe != ' '; fe++)
				;
			return parse_id(f, (size_t)(fe - f), ret);
		}
		p = nl ? nl + 1 : end;
	}
	return false;
}

int identity_parse_proc_status(const char *buf, size_t len, uid_t *ret_uid, gid_t *ret_gid)
{
	unsigned long u, g;

	if (!status_field(buf, len, "Uid:", &u) || !status_field(buf, len, "Gid:", &g))
		return -EINVAL;
	*ret_uid = (uid_t)u;
	*ret_gid = (gid_t)g;
	return 0;
}

bool identity_finish(struct identity *id)
{
	if (id->uid_known && !id->gid_known) {
		id->gid_known = true;
		id->gid = 0;
	}
	return id->uid_known;
}

/* ---- the identity fixed for a sandbox ------------------------------------- */

bool identity_fixed_set(struct identity_fixed *f, bool resolved, uid_t uid, gid_t gid)
{
	if (f->known)
		return false;
	*f = (struct identity_fixed){
		.known = true, .resolved = resolved, .uid = resolved ? uid : 0, .gid = resolved ? gid : 0,
	};
	return true;
}

int identity_fixed_user(const struct identity_fixed *f, char buf[IDENTITY_USER_STRING_MAX])
{
	if (!f->known || !f->resolved)
		return -ENOENT;
	snprintf(buf, IDENTITY_USER_STRING_MAX, "%u:%u", (unsigned)f->uid, (unsigned)f->gid);
	return 0;
}
