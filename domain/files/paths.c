/* paths.c — guest path rules (behaviour-core §4) and the engine's path stat
 * header (engine-api §2.1). Pure: no I/O, no logging. */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "base64.h"
#include "cleanup.h"
#include "errors.h"
#include "paths.h"
#include "rfc3339.h"
#include "xmalloc.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- names and the reason table ------------------------------------------ */

static const char *const kind_names[_PATHS_KIND_MAX] = {
	[PATHS_KIND_FILE] = "file",
	[PATHS_KIND_DIRECTORY] = "directory",
	[PATHS_KIND_SYMLINK] = "symlink",
	[PATHS_KIND_OTHER] = "other",
};

static const char *const op_names[_PATHS_OP_MAX] = {
	[PATHS_OP_WRITE] = "write",
	[PATHS_OP_READ] = "read",
	[PATHS_OP_STAT] = "stat",
	[PATHS_OP_LIST] = "list",
	[PATHS_OP_DELETE] = "delete",
	[PATHS_OP_RECLAIM] = "reclaim",
};

static const char *const outcome_names[_PATHS_OUTCOME_MAX] = {
	[PATHS_OUTCOME_CONFINEMENT] = "ConfinementError",
	[PATHS_OUTCOME_NOT_A_DIRECTORY] = "NotADirectoryError",
	[PATHS_OUTCOME_FILE_NOT_FOUND] = "FileNotFoundError",
	[PATHS_OUTCOME_OS_ERROR] = "OSError",
	[PATHS_OUTCOME_INVALID_PARAMS] = "InvalidParams",
	[PATHS_OUTCOME_ENGINE] = "EngineError",
	[PATHS_OUTCOME_INTERNAL] = "InternalError",
};

struct reason_info {
	int errnum;
	enum paths_outcome outcome;
	const char *message;
};

#define STAT_HDR "the engine's path stat "

static const struct reason_info reasons[_PATHS_R_MAX] = {
	[PATHS_R_BACKSLASH] = { EINVAL, PATHS_OUTCOME_CONFINEMENT,
				"the path contains a backslash, which is never a separator" },
	[PATHS_R_NUL] = { EINVAL, PATHS_OUTCOME_CONFINEMENT, "the path contains a NUL byte" },
	[PATHS_R_OUTSIDE] = { EPERM, PATHS_OUTCOME_CONFINEMENT,
			      "the path resolves outside working directory" },
	[PATHS_R_WD_OUTSIDE_BASE] = { EPERM, PATHS_OUTCOME_CONFINEMENT,
				      "the working directory resolves outside the storage base" },
	[PATHS_R_WORKING_DIRECTORY] = { EPERM, PATHS_OUTCOME_CONFINEMENT,
					"the path is the working directory itself" },
	[PATHS_R_NEAR_ROOT] = { EPERM, PATHS_OUTCOME_CONFINEMENT,
				"the directory is too close to the root to reclaim" },
	[PATHS_R_SYMLINK_ANCESTOR] = { ELOOP, PATHS_OUTCOME_CONFINEMENT,
				       "a component of the path is a link rather than a real directory" },
	[PATHS_R_SYMLINK_LEAF] = { ELOOP, PATHS_OUTCOME_CONFINEMENT,
				   "the path is a link; a write would land wherever it points" },
	[PATHS_R_NOT_A_DIRECTORY] = { ENOTDIR, PATHS_OUTCOME_NOT_A_DIRECTORY,
				      "a component of the path is not a directory" },
	[PATHS_R_NOT_FOUND] = { ENOENT, PATHS_OUTCOME_FILE_NOT_FOUND, "no such file or directory" },
	[PATHS_R_NOT_REGULAR] = { EINVAL, PATHS_OUTCOME_OS_ERROR,
				  "the path is not a regular file and is refused" },
	[PATHS_R_IS_DIRECTORY] = { EISDIR, PATHS_OUTCOME_OS_ERROR, "the path is a directory" },
	[PATHS_R_TOO_LONG] = { ENAMETOOLONG, PATHS_OUTCOME_INVALID_PARAMS,
			       "the path is longer than " STR(PATHS_MAX_BYTES) " bytes" },
	[PATHS_R_NAME_TOO_LONG] = { ENAMETOOLONG, PATHS_OUTCOME_INVALID_PARAMS,
				    "a component of the path is longer than "
				    STR(PATHS_NAME_MAX_BYTES) " bytes" },
	[PATHS_R_TOO_MANY_COMPONENTS] = { E2BIG, PATHS_OUTCOME_INVALID_PARAMS,
					  "the path has more than " STR(PATHS_MAX_COMPONENTS)
					  " components" },
	[PATHS_R_BASE_INVALID] = { EINVAL, PATHS_OUTCOME_INTERNAL,
				   "the storage base is not an absolute path" },
	[PATHS_R_STAT_TOO_LONG] = { EMSGSIZE, PATHS_OUTCOME_ENGINE, STAT_HDR "header is too long" },
	[PATHS_R_STAT_BASE64] = { EPROTO, PATHS_OUTCOME_ENGINE,
				  STAT_HDR "header is not padded standard base64" },
	[PATHS_R_STAT_JSON] = { EPROTO, PATHS_OUTCOME_ENGINE, STAT_HDR "is not a JSON object" },
	[PATHS_R_STAT_FIELD] = { EPROTO, PATHS_OUTCOME_ENGINE,
				 STAT_HDR "lacks a member or has one of the wrong type" },
	[PATHS_R_STAT_SIZE] = { EPROTO, PATHS_OUTCOME_ENGINE, STAT_HDR "has a negative size" },
	[PATHS_R_STAT_MODE] = { EPROTO, PATHS_OUTCOME_ENGINE, STAT_HDR "has an invalid mode" },
	[PATHS_R_STAT_MTIME] = { EPROTO, PATHS_OUTCOME_ENGINE, STAT_HDR "has an invalid mtime" },
};

const char *paths_kind_to_string(enum paths_kind kind)
{
	return (unsigned)kind < _PATHS_KIND_MAX ? kind_names[kind] : NULL;
}

const char *paths_op_to_string(enum paths_op op)
{
	return (unsigned)op < _PATHS_OP_MAX ? op_names[op] : NULL;
}

const char *paths_outcome_to_string(enum paths_outcome o)
{
	return (unsigned)o < _PATHS_OUTCOME_MAX ? outcome_names[o] : NULL;
}

const char *paths_reason_to_string(enum paths_reason r)
{
	return (unsigned)r < _PATHS_R_MAX ? reasons[r].message : NULL;
}

enum paths_outcome paths_reason_outcome(enum paths_reason r)
{
	return (unsigned)r < _PATHS_R_MAX ? reasons[r].outcome : PATHS_OUTCOME_INTERNAL;
}

/* Writes the reason and returns its -errno. */
static int refuse(enum paths_reason r, enum paths_reason *reterr_reason)
{
	assert((unsigned)r < _PATHS_R_MAX);
	*reterr_reason = r;
	return -reasons[r].errnum;
}

/* ---- lexical normalisation ------------------------------------------------ */

/* A path being normalised: always "/" or "/a/b" (no trailing slash), NUL-terminated. */
struct npath {
	char *s;
	size_t len;
};

/* ".." : drop the last component; "/" stays "/". */
static void npath_up(struct npath *p)
{
	while (p->len > 1 && p->s[p->len - 1] != '/')
		p->len--;
	if (p->len > 1)
		p->len--;      /* the separator */
	p->s[p->len] = '\0';
}

static void npath_push(struct npath *p, const char *comp, size_t n)
{
	if (p->len > 1)
		p->s[p->len++] = '/';
	memcpy(p->s + p->len, comp, n);
	p->len += n;
	p->s[p->len] = '\0';
}

/* Appends s (len bytes) the way posixpath join + normpath does: an absolute
 * s starts again from "/". */
static void npath_append(struct npath *p, const char *s, size_t len)
{
	size_t i = 0;

	if (len > 0 && s[0] == '/') {
		p->s[0] = '/';
		p->len = 1;
		p->s[1] = '\0';
	}
	while (i < len) {
		size_t j = i;

		while (j < len && s[j] != '/')
			j++;
		if (j - i == 2 && s[i] == '.' && s[i + 1] == '.')
			npath_up(p);
		else if (j > i && !(j - i == 1 && s[i] == '.'))
			npath_push(p, s + i, j - i);
		i = j + 1;
	}
}

/* normpath(join(prefix, s)): prefix is already normalised (or NULL when s is
 * absolute). malloc'd. */
static char *normalise(const char *prefix, const char *s, size_t len)
{
	size_t plen = prefix ? strlen(prefix) : 0;
	struct npath p = { .s = xmalloc(plen + len + 3), .len = plen };

	if (prefix)
		memcpy(p.s, prefix, plen + 1);
	else
		p.s[0] = '\0';
	npath_append(&p, s, len);
	return p.s;
}

/* Length and component limits of a normalised absolute path. */
static int check_limits(const char *p, enum paths_reason *reterr_reason)
{
	size_t ncomp = 0, len = strlen(p);

	if (len > PATHS_MAX_BYTES)
		return refuse(PATHS_R_TOO_LONG, reterr_reason);
	for (const char *c = p; *c; ) {
		size_t n;

		c += *c == '/';
		n = strcspn(c, "/");
		if (n == 0)
			break;
		if (n > PATHS_NAME_MAX_BYTES)
			return refuse(PATHS_R_NAME_TOO_LONG, reterr_reason);
		if (++ncomp > PATHS_MAX_COMPONENTS)
			return refuse(PATHS_R_TOO_MANY_COMPONENTS, reterr_reason);
		c += n;
	}
	return 0;
}

/* NUL, backslash, then length: the string checks of one input. */
static int check_input(const char *s, size_t len, enum paths_reason *reterr_reason)
{
	if (memchr(s, '\0', len))
		return refuse(PATHS_R_NUL, reterr_reason);
	if (memchr(s, '\\', len))
		return refuse(PATHS_R_BACKSLASH, reterr_reason);
	if (len > PATHS_MAX_BYTES)
		return refuse(PATHS_R_TOO_LONG, reterr_reason);
	return 0;
}

const char *paths_relative_to(const char *path, const char *base)
{
	size_t blen = strlen(base);

	if (strcmp(path, base) == 0)
		return path + strlen(path);
	if (strcmp(base, "/") == 0)
		return path[0] == '/' ? path + 1 : NULL;
	if (strncmp(path, base, blen) == 0 && path[blen] == '/')
		return path + blen + 1;
	return NULL;
}

/* The working directory: absolute, or beneath the normalised base. */
static int resolve_wd(const char *wd, size_t wd_len, const char *base, char **ret_wd,
		      enum paths_reason *reterr_reason)
{
	_cleanup_free_ char *base_n = NULL, *wd_n = NULL;
	int r;

	r = check_input(wd, wd_len, reterr_reason);
	if (r < 0)
		return r;
	r = check_input(base, strlen(base), reterr_reason);
	if (r < 0)
		return r;
	if (base[0] != '/')
		return refuse(PATHS_R_BASE_INVALID, reterr_reason);
	base_n = normalise(NULL, base, strlen(base));
	wd_n = normalise(base_n, wd, wd_len);
	if (!(wd_len > 0 && wd[0] == '/') && !paths_relative_to(wd_n, base_n))
		return refuse(PATHS_R_WD_OUTSIDE_BASE, reterr_reason);
	r = check_limits(wd_n, reterr_reason);
	if (r < 0)
		return r;
	*ret_wd = TAKE_PTR(wd_n);
	return 0;
}

/* Fills *ret; inside = false accepts a path outside the wd (reclaim of an
 * absolute directory), whose rel is then NULL. */
static int resolve(const char *path, size_t path_len, const char *wd, size_t wd_len,
		   const char *base, bool inside, struct paths_resolved *ret,
		   enum paths_reason *reterr_reason)
{
	_cleanup_free_ char *wd_n = NULL, *path_n = NULL;
	const char *rel;
	int r;

	if (path_len == SIZE_MAX)
		path_len = strlen(path);
	if (!wd) {
		wd = "";
		wd_len = 0;
	} else if (wd_len == SIZE_MAX) {
		wd_len = strlen(wd);
	}
	r = check_input(path, path_len, reterr_reason);
	if (r < 0)
		return r;
	r = resolve_wd(wd, wd_len, base ? base : PATHS_DEFAULT_BASE, &wd_n, reterr_reason);
	if (r < 0)
		return r;
	path_n = normalise(wd_n, path, path_len);
	rel = paths_relative_to(path_n, wd_n);
	if (!rel && inside)
		return refuse(PATHS_R_OUTSIDE, reterr_reason);
	r = check_limits(path_n, reterr_reason);
	if (r < 0)
		return r;
	ret->is_wd = rel && !*rel;
	ret->rel = rel;
	ret->path = TAKE_PTR(path_n);
	ret->wd = TAKE_PTR(wd_n);
	return 0;
}

int paths_confine_resolve(const char *path, size_t path_len, const char *working_directory,
			  size_t wd_len, const char *base, struct paths_resolved *ret,
			  enum paths_reason *reterr_reason)
{
	return resolve(path, path_len, working_directory, wd_len, base, true, ret, reterr_reason);
}

void paths_resolved_release(struct paths_resolved *r)
{
	if (!r)
		return;
	free(r->path);
	free(r->wd);
	*r = (struct paths_resolved){ 0 };
}

/* ---- the ancestor walk ----------------------------------------------------- */

char **paths_ancestors(const char *guest_path, bool include_self, size_t *ret_n)
{
	size_t len = strlen(guest_path), n = 0;
	char **list;

	assert(guest_path[0] == '/');
	if (!include_self) {
		while (len > 0 && guest_path[len - 1] != '/')
			len--;
		if (len > 1)
			len--;         /* dirname("/a/b") = "/a"; dirname("/a") = "/" */
	}
	for (size_t i = 1; i < len; i++)
		n += guest_path[i] == '/';
	if (len > 1)
		n++;
	list = xcalloc(n + 1, sizeof(*list));
	n = 0;
	for (size_t i = 1; i <= len && len > 1; i++)
		if (i == len || guest_path[i] == '/')
			list[n++] = xstrndup(guest_path, i);
	if (ret_n)
		*ret_n = n;
	return list;
}

char **paths_strv_free(char **strv)
{
	if (!strv)
		return NULL;
	for (char **s = strv; *s; s++)
		free(*s);
	free(strv);
	return NULL;
}

/* ---- Go FileMode ----------------------------------------------------------- */

int paths_go_mode_decode(uint32_t mode, enum paths_kind *ret_kind, uint32_t *ret_perm,
			 enum paths_reason *reterr_reason)
{
	uint32_t type = mode & PATHS_GO_MODE_TYPE;
	uint32_t perm = mode & PATHS_GO_MODE_PERM;
	enum paths_kind kind;

	if (mode & ~PATHS_GO_MODE_KNOWN)
		return refuse(PATHS_R_STAT_MODE, reterr_reason);
	if (type == 0)
		kind = PATHS_KIND_FILE;
	else if (type == PATHS_GO_MODE_DIR)
		kind = PATHS_KIND_DIRECTORY;
	else if (type == PATHS_GO_MODE_SYMLINK)
		kind = PATHS_KIND_SYMLINK;
	else if (type & (PATHS_GO_MODE_DIR | PATHS_GO_MODE_SYMLINK))
		return refuse(PATHS_R_STAT_MODE, reterr_reason);   /* contradictory */
	else
		kind = PATHS_KIND_OTHER;
	if (mode & PATHS_GO_MODE_SETUID)
		perm |= S_ISUID;
	if (mode & PATHS_GO_MODE_SETGID)
		perm |= S_ISGID;
	if (mode & PATHS_GO_MODE_STICKY)
		perm |= S_ISVTX;
	*ret_kind = kind;
	*ret_perm = perm;
	return 0;
}

enum paths_kind paths_kind_from_st_mode(mode_t st_mode)
{
	if (S_ISREG(st_mode))
		return PATHS_KIND_FILE;
	if (S_ISDIR(st_mode))
		return PATHS_KIND_DIRECTORY;
	if (S_ISLNK(st_mode))
		return PATHS_KIND_SYMLINK;
	return PATHS_KIND_OTHER;
}

/* ---- the stat header -------------------------------------------------------- */

static int stat_from_json(const json_t *o, struct paths_stat *ret, enum paths_reason *reterr_reason)
{
	const json_t *name = json_object_get(o, "name"), *size = json_object_get(o, "size");
	const json_t *mode = json_object_get(o, "mode"), *mtime = json_object_get(o, "mtime");
	const json_t *link = json_object_get(o, "linkTarget");
	struct paths_stat st = { 0 };
	struct rfc3339_time t;
	json_int_t m;
	int r;

	if (!json_is_string(name) || !json_is_integer(size) || !json_is_integer(mode) ||
	    !json_is_string(mtime) || !json_is_string(link))
		return refuse(PATHS_R_STAT_FIELD, reterr_reason);
	if (json_integer_value(size) < 0)
		return refuse(PATHS_R_STAT_SIZE, reterr_reason);
	m = json_integer_value(mode);
	if (m < 0 || m > UINT32_MAX)
		return refuse(PATHS_R_STAT_MODE, reterr_reason);
	st.mode = (uint32_t)m;
	r = paths_go_mode_decode(st.mode, &st.kind, &st.perm, reterr_reason);
	if (r < 0)
		return r;
	/* Go's time.Time in JSON is RFC 3339 with nanoseconds: reap's parser reads it. */
	if (rfc3339_parse(json_string_value(mtime), &t) < 0)
		return refuse(PATHS_R_STAT_MTIME, reterr_reason);
	st.mtime_sec = t.s;
	st.mtime_nsec = (uint32_t)t.ns;
	st.size = (uint64_t)json_integer_value(size);
	st.name = xstrdup(json_string_value(name));
	st.link_target = xstrdup(json_string_value(link));
	*ret = st;
	return 0;
}

int paths_stat_decode_header(const char *value, struct paths_stat *ret,
			     enum paths_reason *reterr_reason)
{
	_cleanup_free_ uint8_t *raw = NULL;
	json_auto_t *o = NULL;
	size_t len, n;

	if (!value)
		return refuse(PATHS_R_STAT_BASE64, reterr_reason);
	len = strnlen(value, PATHS_STAT_HEADER_MAX_BYTES + 1);
	if (len > PATHS_STAT_HEADER_MAX_BYTES)
		return refuse(PATHS_R_STAT_TOO_LONG, reterr_reason);
	/* An empty header is no base64 here (the codec itself accepts "" as zero bytes). */
	if (len == 0 || msb_base64_decode(value, len, &raw, &n) < 0)
		return refuse(PATHS_R_STAT_BASE64, reterr_reason);
	o = json_loadb((const char *)raw, n, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o))
		return refuse(PATHS_R_STAT_JSON, reterr_reason);
	return stat_from_json(o, ret, reterr_reason);
}

void paths_stat_release(struct paths_stat *st)
{
	if (!st)
		return;
	free(st->name);
	free(st->link_target);
	*st = (struct paths_stat){ 0 };
}

json_t *paths_entry_encode(const char *rel, const struct paths_stat *st)
{
	json_auto_t *e = json_object();
	json_t *size;

	if (!e || json_object_set_new(e, "path", json_string(*rel ? rel : ".")) < 0 ||
	    json_object_set_new(e, "kind", json_string(paths_kind_to_string(st->kind))) < 0)
		return NULL;
	/* Only a file has a size; one we cannot carry is unknown (null fails closed). */
	if (st->kind == PATHS_KIND_FILE && st->size <= (uint64_t)INT64_MAX)
		size = json_integer((json_int_t)st->size);
	else
		size = json_null();
	if (json_object_set_new(e, "size", size) < 0)
		return NULL;
	return json_incref(e);
}

/* ---- verdicts ---------------------------------------------------------------- */

int paths_walk_verdict(const struct paths_stat *st, enum paths_reason *reterr_reason)
{
	if (!st)
		return 0;
	if (st->kind == PATHS_KIND_DIRECTORY)
		return 1;
	if (st->kind == PATHS_KIND_SYMLINK)
		return refuse(PATHS_R_SYMLINK_ANCESTOR, reterr_reason);
	return refuse(PATHS_R_NOT_A_DIRECTORY, reterr_reason);
}

static int leaf_write(const struct paths_stat *st, enum paths_reason *reterr_reason)
{
	if (st && st->kind == PATHS_KIND_SYMLINK)
		return refuse(PATHS_R_SYMLINK_LEAF, reterr_reason);
	if (st && st->kind == PATHS_KIND_DIRECTORY)
		return refuse(PATHS_R_IS_DIRECTORY, reterr_reason);
	return 0;
}

static int leaf_read(const struct paths_stat *st, enum paths_reason *reterr_reason)
{
	if (!st)
		return refuse(PATHS_R_NOT_FOUND, reterr_reason);
	if (st->kind != PATHS_KIND_FILE)
		return refuse(PATHS_R_NOT_REGULAR, reterr_reason);
	return 0;
}

static int leaf_list(const struct paths_stat *st, enum paths_reason *reterr_reason)
{
	int r;

	if (!st)
		return refuse(PATHS_R_NOT_FOUND, reterr_reason);
	r = paths_walk_verdict(st, reterr_reason);
	return r < 0 ? r : 0;
}

int paths_leaf_verdict(enum paths_op op, const struct paths_stat *st,
		       enum paths_reason *reterr_reason)
{
	switch (op) {
	case PATHS_OP_WRITE:
		return leaf_write(st, reterr_reason);
	case PATHS_OP_READ:
		return leaf_read(st, reterr_reason);
	case PATHS_OP_LIST:
		return leaf_list(st, reterr_reason);
	case PATHS_OP_STAT:
	case PATHS_OP_DELETE:
	case PATHS_OP_RECLAIM:
		return 0;
	default:
		assert(!"unreachable");
		return -EINVAL;
	}
}

/* ---- the bundles --------------------------------------------------------------- */

struct bundle {
	bool refuse_wd;
	bool walk;
	bool include_self;
	bool stat_leaf;
};

static const struct bundle bundles[_PATHS_OP_MAX] = {
	[PATHS_OP_WRITE] = { .refuse_wd = true, .walk = true, .stat_leaf = true },
	[PATHS_OP_READ] = { .walk = true, .stat_leaf = true },
	[PATHS_OP_STAT] = { .walk = true, .stat_leaf = true },
	[PATHS_OP_LIST] = { .walk = true, .include_self = true },
	[PATHS_OP_DELETE] = { .refuse_wd = true, .walk = true },
	[PATHS_OP_RECLAIM] = { .refuse_wd = true },
};

static size_t count_components(const char *p)
{
	size_t n = 0;

	for (; *p; p++)
		n += *p == '/' && p[1];
	return n;
}

/* A relative reclaim target is confined; an absolute one is only normalised. */
static int plan_resolve(enum paths_op op, const char *path, size_t path_len, const char *wd,
			size_t wd_len, const char *base, struct paths_resolved *ret,
			enum paths_reason *reterr_reason)
{
	bool inside = op != PATHS_OP_RECLAIM || path_len == 0 || path[0] != '/';
	int r;

	r = resolve(path, path_len, wd, wd_len, base, inside, ret, reterr_reason);
	if (r < 0)
		return r;
	if (bundles[op].refuse_wd && inside && ret->is_wd) {
		paths_resolved_release(ret);
		return refuse(PATHS_R_WORKING_DIRECTORY, reterr_reason);
	}
	if (op == PATHS_OP_RECLAIM &&
	    count_components(ret->path) < PATHS_RECLAIM_MIN_COMPONENTS) {
		paths_resolved_release(ret);
		return refuse(PATHS_R_NEAR_ROOT, reterr_reason);
	}
	return 0;
}

int paths_plan_new(enum paths_op op, const char *path, size_t path_len,
		   const char *working_directory, size_t wd_len, const char *base,
		   struct paths_plan **ret_plan, enum paths_reason *reterr_reason)
{
	_cleanup_free_ char *base_n = NULL;
	struct paths_plan *plan;
	struct paths_resolved t;
	int r;

	assert((unsigned)op < _PATHS_OP_MAX);
	if (path_len == SIZE_MAX)
		path_len = strlen(path);
	r = plan_resolve(op, path, path_len, working_directory, wd_len, base, &t, reterr_reason);
	if (r < 0)
		return r;
	plan = xcalloc(1, sizeof(*plan));
	plan->op = op;
	plan->target = t;
	plan->stat_leaf = bundles[op].stat_leaf;
	/* The working directory itself, stat'ed or read, is walked too: a
	 * linked working directory is refused, never described as a link. */
	if (bundles[op].walk)
		plan->walk = paths_ancestors(t.path, bundles[op].include_self ||
					     (t.is_wd && (op == PATHS_OP_READ || op == PATHS_OP_STAT)),
					     &plan->n_walk);
	else
		plan->walk = xcalloc(1, sizeof(*plan->walk));
	/* The guest's from the working directory down, and from below the
	 * storage base down: the base is the guest's (acquire makes it so) and
	 * the guest could make those itself (a kind's call directory, written
	 * from its own "work" child, stays the guest's to reclaim). Above both:
	 * root's. A base of "/" is no base of the guest's: the rule is the
	 * working directory's alone there. The base is compared normalised (the
	 * label may be spelt "//maf-sandbox/work/"). */
	if (base && base[0] == '/')
		base_n = normalise(NULL, base, strlen(base));
	if (base_n && strcmp(base_n, "/") == 0) {
		free(base_n);
		base_n = NULL;
	}
	plan->walk_owned_from = plan->n_walk;
	for (size_t i = 0; i < plan->n_walk; i++) {
		const char *below = base_n ? paths_relative_to(plan->walk[i], base_n) : NULL;

		if (paths_relative_to(plan->walk[i], t.wd) || (below && *below)) {
			plan->walk_owned_from = i;
			break;
		}
	}
	*ret_plan = plan;
	return 0;
}

struct paths_plan *paths_plan_free(struct paths_plan *plan)
{
	if (!plan)
		return NULL;
	paths_resolved_release(&plan->target);
	paths_strv_free(plan->walk);
	free(plan);
	return NULL;
}

/* ---- exec working directories -------------------------------------------- */

const char *paths_pseudo_fs_root(const char *abs_path)
{
	static const char *const roots[] = PATHS_PSEUDO_FS_ROOTS;

	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		size_t n = strlen(roots[i]);

		if (strncmp(abs_path, roots[i], n) == 0 && (abs_path[n] == '\0' || abs_path[n] == '/'))
			return roots[i];
	}
	return NULL;
}

void paths_error_from_reason(enum paths_reason reason, const char *path, struct msb_error *reterr)
{
	static const int codes[_PATHS_OUTCOME_MAX] = {
		[PATHS_OUTCOME_CONFINEMENT] = MSB_ERR_CONFINEMENT,
		[PATHS_OUTCOME_NOT_A_DIRECTORY] = MSB_ERR_NOT_A_DIRECTORY,
		[PATHS_OUTCOME_FILE_NOT_FOUND] = MSB_ERR_FILE_NOT_FOUND,
		[PATHS_OUTCOME_OS_ERROR] = MSB_ERR_OS_ERROR,
		[PATHS_OUTCOME_INVALID_PARAMS] = MSB_ERR_INVALID_PARAMS,
		[PATHS_OUTCOME_ENGINE] = MSB_ERR_ENGINE_ERROR,
		[PATHS_OUTCOME_INTERNAL] = MSB_ERR_INTERNAL,
	};
	enum paths_outcome o = paths_reason_outcome(reason);
	const char *msg = paths_reason_to_string(reason);

	msb_error_set(reterr, codes[o],
		      path && o != PATHS_OUTCOME_ENGINE && o != PATHS_OUTCOME_INTERNAL
		      ? json_pack("{s:s}", "path", path[0] ? path : ".") : NULL,
		      "%s", msg ? msg : "the path is refused");
}
