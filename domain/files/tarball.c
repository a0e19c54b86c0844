/* tarball.c — the archive plane's tars: built with libarchive, the first
 * entry of a GET archive stream parsed by hand.
 *
 * Why the reader is our own and not libarchive's: libarchive's read side
 * pulls. Its read callback must hand over bytes or report EOF, so it cannot
 * be fed from libcurl's write callback as bytes arrive without buffering the
 * whole response or running a thread. Its limits are its own, too (it takes
 * PAX and GNU long-name bodies far beyond 64 KiB and cannot be told less),
 * and it bids on compression filters we never want to run on hostile bytes.
 * We need only the first entry's header, so a small push parser with every
 * limit explicit is both bounded and exhaustively testable (and fuzzable). */
#include <archive.h>
#include <archive_entry.h>
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tarball.h"
#include "xmalloc.h"

_Static_assert(TARBALL_META_MAX_BYTES == 64 * 1024, "the error text says 64 KiB");
_Static_assert(TARBALL_META_MAX_HEADERS == 32, "the error text says 32 headers");

#define BUF_MIN_ALLOC (16 * 1024)       /* first allocation of a tarball_buf */

/* ustar header layout (POSIX.1-1988 plus the GNU magic). */
#define H_NAME      0
#define H_NAME_LEN  100
#define H_MODE      100
#define H_UID       108
#define H_GID       116
#define H_ID_LEN    8
#define H_SIZE      124
#define H_SIZE_LEN  12
#define H_CHKSUM    148
#define H_CHKSUM_LEN 8
#define H_TYPE      156
#define H_LINK      157
#define H_LINK_LEN  100
#define H_MAGIC     257
#define H_PREFIX    345
#define H_PREFIX_LEN 155

#define MAGIC_POSIX "ustar\0"           /* 6 bytes, then a 2-byte version */
#define MAGIC_GNU   "ustar  \0"         /* 8 bytes; no prefix field */
#define PAX_SPARSE_PREFIX "GNU.sparse."

static size_t padded(size_t n)
{
	return (n + TARBALL_BLOCK - 1) / TARBALL_BLOCK * TARBALL_BLOCK;
}

/* ---- names ---------------------------------------------------------------- */

bool tarball_name_is_valid(const char *name)
{
	size_t len = strnlen(name, TARBALL_NAME_MAX + 1);

	if (len == 0 || len > TARBALL_NAME_MAX || name[0] == '/')
		return false;
	for (const char *c = name;;) {
		const char *end = strchrnul(c, '/');
		size_t n = (size_t)(end - c);

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!*end)
			return true;
		c = end + 1;
	}
}

static bool name_is_ascii(const char *name)
{
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		if (*c >= 0x80)
			return false;
	return true;
}

static size_t count_slashes(const char *name)
{
	size_t n = 0;

	for (; *name; name++)
		n += *name == '/';
	return n;
}

static bool owner_is_valid(mode_t mode, uid_t uid, gid_t gid)
{
	return (mode & ~(mode_t)TARBALL_PERM_MASK) == 0 && (uint64_t)uid <= TARBALL_ID_MAX &&
	       (uint64_t)gid <= TARBALL_ID_MAX;
}

/* ---- building with libarchive ---------------------------------------------- */

struct tarball_writer {
	struct archive *a;          /* NULL once finished or failed */
	tarball_write_cb *cb;
	void *arg;
	int sink_error;             /* cb's -errno; libarchive only says "fatal" */
	bool abandoned;             /* failed: nothing more reaches cb */
	bool finished;              /* the end-of-archive blocks are out */
	int error;                  /* sticky: the first failure, else 0 */
};

static la_ssize_t writer_write_cb(struct archive *a, void *client, const void *buf, size_t len)
{
	struct tarball_writer *w = client;
	int r;

	if (w->abandoned) {
		archive_set_error(a, ECANCELED, "tar abandoned");
		return -1;
	}
	r = w->cb(buf, len, w->arg);
	if (r < 0) {
		w->sink_error = r;
		archive_set_error(a, -r, "tar sink failed");
		return -1;
	}
	return (la_ssize_t)len;
}

static int writer_error(const struct tarball_writer *w)
{
	return w->sink_error < 0 ? w->sink_error : -EIO;
}

/* pax_restricted: plain ustar headers, with a PAX header only for what ustar
 * cannot hold (long names, big ids). No filter: the tar leaves uncompressed
 * (CVE-2026-41567). hdrcharset=BINARY keeps non-ASCII names byte for byte;
 * otherwise libarchive translates them through the process locale and fails
 * in the C locale. It is an archive-wide option (refused once the archive
 * is open) and costs every entry a PAX header, so the one-shot builders set
 * it only when a name needs it. The last block is not padded past the
 * end-of-archive. */
static int writer_open(struct tarball_writer *w, bool binary_names)
{
	w->a = archive_write_new();
	if (!w->a)
		return -ENOMEM;
	if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(w->a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(w->a, 1) != ARCHIVE_OK)
		return -EIO;
	if (binary_names &&
	    archive_write_set_format_option(w->a, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK)
		return -EIO;
	if (archive_write_open(w->a, w, NULL, writer_write_cb, NULL) != ARCHIVE_OK)
		return writer_error(w);
	return 0;
}

/* Finishes the archive when r >= 0, else abandons it: cb sees nothing more,
 * not even the trailer. Closing also after a failure is what frees the
 * client's block buffer: libarchive 3.6's free() skips the close of a
 * failed (FATAL) archive and leaks it. Returns the outcome. */
static int writer_close(struct tarball_writer *w, int r)
{
	if (!w->a)
		return r;
	w->abandoned = r < 0;
	if (archive_write_close(w->a) != ARCHIVE_OK && r >= 0)
		r = writer_error(w);
	archive_write_free(w->a);
	w->a = NULL;
	return r;
}

/* Records the first failure and abandons the archive. Returns it. */
static int writer_fail(struct tarball_writer *w, int r)
{
	assert(r < 0 && w->error == 0);
	w->error = r;
	return writer_close(w, r);
}

static void writer_init(struct tarball_writer *w, tarball_write_cb *cb, void *arg,
			bool binary_names)
{
	int r;

	*w = (struct tarball_writer){ .cb = cb, .arg = arg };
	r = writer_open(w, binary_names);
	if (r < 0)
		writer_fail(w, r);
}

/* Whether another entry may be written: the sticky error, or -EINVAL once
 * the archive is finished (which changes nothing). */
static int writer_state(const struct tarball_writer *w)
{
	if (w->error < 0)
		return w->error;
	return w->finished ? -EINVAL : 0;
}

struct entry_spec {
	const char *name;
	mode_t type;                /* AE_IFREG or AE_IFDIR */
	mode_t perm;
	uid_t uid;
	gid_t gid;
	time_t mtime;
	const uint8_t *data;
	size_t size;
};

static int writer_data(struct tarball_writer *w, const uint8_t *data, size_t size)
{
	for (size_t off = 0; off < size;) {
		la_ssize_t n = archive_write_data(w->a, data + off, size - off);

		if (n <= 0)
			return writer_error(w);
		off += (size_t)n;
	}
	return 0;
}

static int writer_entry(struct tarball_writer *w, const struct entry_spec *s)
{
	struct archive_entry *e = archive_entry_new();
	int r;

	if (!e)
		return -ENOMEM;
	archive_entry_copy_pathname(e, s->name);
	archive_entry_set_filetype(e, s->type);
	archive_entry_set_perm(e, s->perm);
	archive_entry_set_uid(e, s->uid);
	archive_entry_set_gid(e, s->gid);
	archive_entry_set_mtime(e, s->mtime, 0);
	archive_entry_set_size(e, (la_int64_t)s->size);
	r = archive_write_header(w->a, e);
	archive_entry_free(e);
	if (r != ARCHIVE_OK)
		return writer_error(w);
	return writer_data(w, s->data, s->size);
}

static int dir_validate(const struct tarball_dir *d)
{
	if (!tarball_name_is_valid(d->name) || !owner_is_valid(d->mode, d->uid, d->gid))
		return -EINVAL;
	return 0;
}

static int file_validate(const struct tarball_file *f)
{
	if (!tarball_name_is_valid(f->name) || !owner_is_valid(f->mode, f->uid, f->gid))
		return -EINVAL;
	if (f->new_parents > count_slashes(f->name) || (f->size > 0 && !f->data))
		return -EINVAL;
	return 0;
}

static int write_dir(struct tarball_writer *w, const struct tarball_dir *d)
{
	return writer_entry(w, &(struct entry_spec){ .name = d->name, .type = AE_IFDIR,
			    .perm = d->mode, .uid = d->uid, .gid = d->gid, .mtime = d->mtime });
}

/* The f->new_parents nearest ancestors of f->name, outermost first. */
static int file_write_parents(struct tarball_writer *w, const struct tarball_file *f)
{
	char dir[TARBALL_NAME_MAX + 1];
	size_t skip = count_slashes(f->name) - f->new_parents;

	for (const char *c = strchr(f->name, '/'); c; c = strchr(c + 1, '/')) {
		size_t len = (size_t)(c - f->name);
		int r;

		if (skip > 0) {
			skip--;
			continue;
		}
		memcpy(dir, f->name, len);
		dir[len] = '\0';
		r = write_dir(w, &(struct tarball_dir){ .name = dir, .mode = TARBALL_DIR_MODE,
			      .uid = f->uid, .gid = f->gid, .mtime = f->mtime });
		if (r < 0)
			return r;
	}
	return 0;
}

static int write_file(struct tarball_writer *w, const struct tarball_file *f)
{
	int r = file_write_parents(w, f);

	if (r < 0)
		return r;
	return writer_entry(w, &(struct entry_spec){ .name = f->name, .type = AE_IFREG,
			    .perm = f->mode, .uid = f->uid, .gid = f->gid, .mtime = f->mtime,
			    .data = f->data, .size = f->size });
}

struct tarball_writer *tarball_writer_new(tarball_write_cb *cb, void *arg)
{
	struct tarball_writer *w = xmalloc(sizeof(*w));

	writer_init(w, cb, arg, true);
	return w;
}

int tarball_writer_add_dir(struct tarball_writer *w, const struct tarball_dir *d)
{
	int r = writer_state(w);

	if (r < 0)
		return r;
	r = dir_validate(d);
	if (r >= 0)
		r = write_dir(w, d);
	return r < 0 ? writer_fail(w, r) : r;
}

int tarball_writer_add_file(struct tarball_writer *w, const struct tarball_file *f)
{
	int r = writer_state(w);

	if (r < 0)
		return r;
	r = file_validate(f);
	if (r >= 0)
		r = write_file(w, f);
	return r < 0 ? writer_fail(w, r) : r;
}

int tarball_writer_add_hardlink(struct tarball_writer *w, const struct tarball_link *l)
{
	struct archive_entry *e;
	int r = writer_state(w);

	if (r < 0)
		return r;
	if (!tarball_name_is_valid(l->name) || !tarball_name_is_valid(l->target) ||
	    !owner_is_valid(l->mode, l->uid, l->gid))
		return writer_fail(w, -EINVAL);
	e = archive_entry_new();
	if (!e)
		return writer_fail(w, -ENOMEM);
	archive_entry_copy_pathname(e, l->name);
	archive_entry_copy_hardlink(e, l->target);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, l->mode);
	archive_entry_set_uid(e, l->uid);
	archive_entry_set_gid(e, l->gid);
	archive_entry_set_mtime(e, l->mtime, 0);
	archive_entry_set_size(e, 0);
	r = archive_write_header(w->a, e);
	archive_entry_free(e);
	if (r != ARCHIVE_OK)
		return writer_fail(w, writer_error(w));
	return 0;
}

int tarball_writer_finish(struct tarball_writer *w)
{
	int r;

	if (w->error < 0 || w->finished)
		return w->error;
	r = writer_close(w, 0);
	if (r < 0)
		w->error = r;
	w->finished = r >= 0;
	return r;
}

struct tarball_writer *tarball_writer_free(struct tarball_writer *w)
{
	if (!w)
		return NULL;
	writer_close(w, -ECANCELED);
	free(w);
	return NULL;
}

int tarball_build_file(const struct tarball_file *f, tarball_write_cb *cb, void *arg)
{
	struct tarball_writer w;
	int r = file_validate(f);

	if (r < 0)
		return r;           /* before libarchive is even set up */
	writer_init(&w, cb, arg, !name_is_ascii(f->name));
	r = tarball_writer_add_file(&w, f);
	if (r >= 0)
		r = tarball_writer_finish(&w);
	return writer_close(&w, r);
}

int tarball_build_dirs(const struct tarball_dir *dirs, size_t n, tarball_write_cb *cb, void *arg)
{
	struct tarball_writer w;
	bool ascii = true;
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		if (dir_validate(&dirs[i]) < 0)
			return -EINVAL;
		ascii = ascii && name_is_ascii(dirs[i].name);
	}
	writer_init(&w, cb, arg, !ascii);
	for (size_t i = 0; i < n && r >= 0; i++)
		r = tarball_writer_add_dir(&w, &dirs[i]);
	if (r >= 0)
		r = tarball_writer_finish(&w);
	return writer_close(&w, r);
}

/* ---- the memory sink ------------------------------------------------------ */

int tarball_buf_write_cb(const void *buf, size_t len, void *arg)
{
	struct tarball_buf *b = arg;
	size_t need, cap;
	uint8_t *p;

	assert(b->len <= b->max);
	if (len == 0)
		return 0;
	if (len > b->max - b->len)
		return -EFBIG;
	need = b->len + len;
	if (need > b->cap) {
		cap = b->cap > b->max / 2 ? b->max : b->cap * 2;
		cap = cap < BUF_MIN_ALLOC ? BUF_MIN_ALLOC : cap;
		cap = cap < need ? need : cap;
		cap = cap > b->max ? b->max : cap;
		p = realloc(b->data, cap);
		if (!p)
			return -ENOMEM;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, buf, len);
	b->len = need;
	return 0;
}

void tarball_buf_clear(struct tarball_buf *b)
{
	free(b->data);
	*b = TARBALL_BUF_INIT(b->max);
}

/* ---- the reader: names of things ------------------------------------------ */

static const char *const kind_names[_TARBALL_KIND_MAX] = {
	[TARBALL_KIND_FILE] = "file",
	[TARBALL_KIND_DIR] = "directory",
	[TARBALL_KIND_SYMLINK] = "symlink",
	[TARBALL_KIND_HARDLINK] = "hardlink",
	[TARBALL_KIND_OTHER] = "other",
};

const char *tarball_kind_to_string(enum tarball_kind k)
{
	return k < _TARBALL_KIND_MAX ? kind_names[k] : NULL;
}

static const struct {
	const char *text;
	int errnum;                 /* positive; TARBALL_ERR_SINK carries the callback's */
} errors[_TARBALL_ERR_MAX] = {
	[TARBALL_OK] = { "no error", 0 },
	[TARBALL_ERR_NO_HEADER] = { "no tar header", EPROTO },
	[TARBALL_ERR_NO_ENTRY] = { "an empty tar archive", EPROTO },
	[TARBALL_ERR_BAD_HEADER] = { "a malformed tar header", EBADMSG },
	[TARBALL_ERR_META_TRUNCATED] = { "incomplete tar metadata", EPROTO },
	[TARBALL_ERR_META_TOO_LARGE] = { "tar metadata over the 64 KiB metadata limit", E2BIG },
	[TARBALL_ERR_TOO_MANY_HEADERS] = { "tar headers over the 32-header limit", E2BIG },
	[TARBALL_ERR_PAX_MALFORMED] = { "a malformed PAX record", EBADMSG },
	[TARBALL_ERR_PAX_VALUE] = { "an invalid PAX size or owner", EBADMSG },
	[TARBALL_ERR_SPARSE] = { "a sparse tar entry (unsupported)", EOPNOTSUPP },
	[TARBALL_ERR_BAD_NAME] = { "an invalid tar entry name", EBADMSG },
	[TARBALL_ERR_OVER_CAP] = { "a file over the caller's byte cap", EFBIG },
	[TARBALL_ERR_BODY_TRUNCATED] = { "an incomplete tar body", EPROTO },
	[TARBALL_ERR_SINK] = { "the body sink failed", EIO },
};

const char *tarball_error_to_string(enum tarball_error e)
{
	return e < _TARBALL_ERR_MAX ? errors[e].text : NULL;
}

/* ---- the reader: state ---------------------------------------------------- */

enum reader_state {
	RS_HEADER,                  /* collecting a 512-byte header block */
	RS_META,                    /* collecting a PAX or long-name body */
	RS_PAD,                     /* skipping the padding after it */
	RS_BODY,                    /* passing the file's body through */
	RS_DONE,
	RS_FAILED,
};

/* What PAX records set; global ('g') and per-entry ('x') sets are kept apart. */
struct pax_fields {
	char *path;
	char *linkpath;
	uint64_t size, uid, gid;
	bool has_size, has_uid, has_gid;
};

struct tarball_reader {
	enum reader_state state;
	uint64_t max_bytes;
	tarball_body_cb *cb;
	void *arg;

	uint8_t block[TARBALL_BLOCK];
	size_t block_len;

	unsigned headers;           /* header blocks seen */
	size_t meta_bytes;          /* bytes before the first body, padding included */
	char meta_type;
	uint8_t *meta;              /* the body being collected, meta_size bytes */
	size_t meta_len, meta_size;
	size_t skip;

	struct pax_fields global, local;
	char *longname, *longlink;

	bool have_entry;
	struct tarball_entry entry;
	uint64_t body_left, body_done;

	enum tarball_error error;
	int err;                    /* -errno returned while failed */
};

static void pax_fields_clear(struct pax_fields *p)
{
	free(p->path);
	free(p->linkpath);
	*p = (struct pax_fields){ 0 };
}

struct tarball_reader *tarball_reader_new(uint64_t max_bytes, tarball_body_cb *cb, void *arg)
{
	struct tarball_reader *r = xcalloc(1, sizeof(*r));

	r->max_bytes = max_bytes;
	r->cb = cb;
	r->arg = arg;
	return r;
}

struct tarball_reader *tarball_reader_free(struct tarball_reader *r)
{
	if (!r)
		return NULL;
	free(r->meta);
	pax_fields_clear(&r->global);
	pax_fields_clear(&r->local);
	free(r->longname);
	free(r->longlink);
	free(r->entry.name);
	free(r->entry.link_target);
	free(r);
	return NULL;
}

static void reader_fail(struct tarball_reader *r, enum tarball_error e)
{
	assert(e != TARBALL_OK && e < _TARBALL_ERR_MAX);
	r->state = RS_FAILED;
	r->error = e;
	r->err = -errors[e].errnum;
}

static void reader_check(struct tarball_reader *r, enum tarball_error e)
{
	if (e != TARBALL_OK)
		reader_fail(r, e);
}

/* ---- the reader: fields --------------------------------------------------- */

/* A numeric header field: octal digits between optional leading spaces and
 * trailing spaces/NULs, or GNU base-256 (high bit set; the next bit is the
 * sign, and negative numbers are refused). */
static bool parse_number(const uint8_t *f, size_t n, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] & 0x40)
			return false;
		v = f[0] & 0x3f;
		for (i = 1; i < n; i++) {
			if (v > (UINT64_MAX >> 8))
				return false;
			v = v << 8 | f[i];
		}
		*ret = v;
		return true;
	}
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(f[i] - '0');     /* 12 digits at most: no overflow */
	for (; i < n; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return false;
	*ret = v;
	return true;
}

/* The checksum counts the checksum field as spaces; historic tars summed
 * signed chars, so either sum is accepted. */
static bool checksum_is_valid(const uint8_t *b)
{
	uint64_t stored;
	long usum = 0, ssum = 0;

	if (!parse_number(b + H_CHKSUM, H_CHKSUM_LEN, &stored))
		return false;
	for (size_t i = 0; i < TARBALL_BLOCK; i++) {
		bool in_field = i >= H_CHKSUM && i < H_CHKSUM + H_CHKSUM_LEN;

		usum += in_field ? ' ' : b[i];
		ssum += in_field ? ' ' : (signed char)b[i];
	}
	return stored == (uint64_t)usum || stored == (uint64_t)ssum;
}

static bool block_is_zero(const uint8_t *b)
{
	for (size_t i = 0; i < TARBALL_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

static bool magic_is_gnu(const uint8_t *b)
{
	return memcmp(b + H_MAGIC, MAGIC_GNU, sizeof(MAGIC_GNU) - 1) == 0;
}

static bool magic_is_valid(const uint8_t *b)
{
	return magic_is_gnu(b) || memcmp(b + H_MAGIC, MAGIC_POSIX, sizeof(MAGIC_POSIX) - 1) == 0;
}

/* A decimal PAX value: at least one digit, nothing else, at most max. */
static bool parse_decimal(const char *s, size_t n, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (v > (max - (uint64_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* ---- the reader: PAX records and long names ------------------------------- */

static bool key_is(const char *key, size_t klen, const char *want)
{
	return klen == strlen(want) && memcmp(key, want, klen) == 0;
}

/* A path-like value replaces *slot; empty unsets it (POSIX: the header's
 * field applies again). */
static enum tarball_error pax_set_name(char **slot, const char *v, size_t vlen)
{
	if (vlen > TARBALL_NAME_MAX || memchr(v, '\0', vlen))
		return TARBALL_ERR_BAD_NAME;
	free(*slot);
	*slot = vlen ? xstrndup(v, vlen) : NULL;
	return TARBALL_OK;
}

static enum tarball_error pax_set_number(uint64_t *slot, bool *has, const char *v, size_t vlen,
					 uint64_t max)
{
	if (!parse_decimal(v, vlen, max, slot))
		return TARBALL_ERR_PAX_VALUE;
	*has = true;
	return TARBALL_OK;
}

static enum tarball_error pax_apply(struct pax_fields *p, const char *key, size_t klen,
				    const char *v, size_t vlen)
{
	if (klen >= strlen(PAX_SPARSE_PREFIX) &&
	    memcmp(key, PAX_SPARSE_PREFIX, strlen(PAX_SPARSE_PREFIX)) == 0)
		return TARBALL_ERR_SPARSE;
	if (key_is(key, klen, "path"))
		return pax_set_name(&p->path, v, vlen);
	if (key_is(key, klen, "linkpath"))
		return pax_set_name(&p->linkpath, v, vlen);
	if (key_is(key, klen, "size"))
		return pax_set_number(&p->size, &p->has_size, v, vlen, INT64_MAX);
	if (key_is(key, klen, "uid"))
		return pax_set_number(&p->uid, &p->has_uid, v, vlen, TARBALL_ID_MAX);
	if (key_is(key, klen, "gid"))
		return pax_set_number(&p->gid, &p->has_gid, v, vlen, TARBALL_ID_MAX);
	return TARBALL_OK;          /* mtime, uname, SCHILY.*, …: not ours to read */
}

/* Records are "<len> <key>=<value>\n", len counting the whole record in
 * decimal. Anything else is malformed. */
static enum tarball_error pax_parse(struct pax_fields *p, const char *data, size_t size)
{
	const char *c = data, *end = data + size;

	while (c < end) {
		const char *q = c, *rec_end, *key, *eq;
		uint64_t len = 0;
		enum tarball_error e;

		for (; q < end && *q >= '0' && *q <= '9'; q++) {
			len = len * 10 + (uint64_t)(*q - '0');
			if (len > size)
				return TARBALL_ERR_PAX_MALFORMED;
		}
		if (q == c || q == end || *q != ' ' || len > (uint64_t)(end - c))
			return TARBALL_ERR_PAX_MALFORMED;
		rec_end = c + len;
		if (rec_end <= q + 1 || rec_end[-1] != '\n')
			return TARBALL_ERR_PAX_MALFORMED;
		key = q + 1;
		eq = memchr(key, '=', (size_t)(rec_end - 1 - key));
		if (!eq || eq == key)
			return TARBALL_ERR_PAX_MALFORMED;
		e = pax_apply(p, key, (size_t)(eq - key), eq + 1, (size_t)(rec_end - 1 - (eq + 1)));
		if (e != TARBALL_OK)
			return e;
		c = rec_end;
	}
	return TARBALL_OK;
}

/* A GNU 'L'/'K' body: the name, NUL-terminated (trailing NULs dropped). */
static enum tarball_error long_name_set(char **slot, const uint8_t *data, size_t size)
{
	while (size > 0 && data[size - 1] == '\0')
		size--;
	if (size == 0 || size > TARBALL_NAME_MAX || memchr(data, '\0', size))
		return TARBALL_ERR_BAD_NAME;
	free(*slot);
	*slot = xstrndup((const char *)data, size);
	return TARBALL_OK;
}

/* ---- the reader: headers -------------------------------------------------- */

static enum tarball_error meta_end(struct tarball_reader *r)
{
	enum tarball_error e;

	switch (r->meta_type) {
	case 'x':
	case 'X':
		e = pax_parse(&r->local, (const char *)r->meta, r->meta_size);
		break;
	case 'g':
		e = pax_parse(&r->global, (const char *)r->meta, r->meta_size);
		break;
	case 'L':
		e = long_name_set(&r->longname, r->meta, r->meta_size);
		break;
	case 'K':
		e = long_name_set(&r->longlink, r->meta, r->meta_size);
		break;
	default:
		assert(!"unreachable");
		e = TARBALL_ERR_BAD_HEADER;
	}
	free(r->meta);
	r->meta = NULL;
	r->state = r->skip ? RS_PAD : RS_HEADER;
	return e;
}

static enum tarball_error meta_begin(struct tarball_reader *r, char type, uint64_t size)
{
	size_t need;

	if (r->headers >= TARBALL_META_MAX_HEADERS)  /* the entry's own would be one more */
		return TARBALL_ERR_TOO_MANY_HEADERS;
	if (size > TARBALL_META_MAX_BYTES)
		return TARBALL_ERR_META_TOO_LARGE;
	need = padded((size_t)size);
	if (r->meta_bytes + need + TARBALL_BLOCK > TARBALL_META_MAX_BYTES)
		return TARBALL_ERR_META_TOO_LARGE;
	if ((type == 'L' || type == 'K') && size > TARBALL_NAME_MAX + 1)
		return TARBALL_ERR_BAD_NAME;
	r->meta_bytes += need;
	r->meta_type = type;
	r->meta_size = (size_t)size;
	r->meta_len = 0;
	r->skip = need - r->meta_size;
	r->meta = xmalloc(r->meta_size ? r->meta_size : 1);
	r->state = RS_META;
	return r->meta_size ? TARBALL_OK : meta_end(r);
}

/* A ustar text field: up to n bytes, NUL-terminated when shorter. */
static size_t field_len(const uint8_t *f, size_t n)
{
	const uint8_t *nul = memchr(f, '\0', n);

	return nul ? (size_t)(nul - f) : n;
}

/* prefix "/" name (the prefix only in POSIX ustar; GNU keeps times there). */
static char *ustar_name(const uint8_t *b)
{
	size_t nlen = field_len(b + H_NAME, H_NAME_LEN);
	size_t plen = magic_is_gnu(b) ? 0 : field_len(b + H_PREFIX, H_PREFIX_LEN);

	if (plen == 0)
		return xstrndup((const char *)b + H_NAME, nlen);
	return xasprintf("%.*s/%.*s", (int)plen, (const char *)b + H_PREFIX, (int)nlen,
			 (const char *)b + H_NAME);
}

static const char *pick_name(const char *local, const char *gnu, const char *global)
{
	return local ? local : gnu ? gnu : global;
}

static enum tarball_kind kind_of(char type, const char *raw_name)
{
	size_t len = strlen(raw_name);

	switch (type) {
	case '0':
	case '7':
		return TARBALL_KIND_FILE;
	case '\0':
		return len && raw_name[len - 1] == '/' ? TARBALL_KIND_DIR : TARBALL_KIND_FILE;
	case '1':
		return TARBALL_KIND_HARDLINK;
	case '2':
		return TARBALL_KIND_SYMLINK;
	case '5':
		return TARBALL_KIND_DIR;
	default:
		return TARBALL_KIND_OTHER;
	}
}

/* Fills entry's name and link target; TARBALL_OK or BAD_NAME. */
static enum tarball_error entry_names(struct tarball_reader *r, struct tarball_entry *e)
{
	const char *p = pick_name(r->local.path, r->longname, r->global.path);
	const char *l = pick_name(r->local.linkpath, r->longlink, r->global.linkpath);
	size_t len;

	e->name = p ? xstrdup(p) : ustar_name(r->block);
	e->kind = kind_of(e->typeflag, e->name);
	len = strlen(e->name);
	while (len > 0 && e->name[len - 1] == '/')
		e->name[--len] = '\0';
	if (len == 0 || len > TARBALL_NAME_MAX)
		return TARBALL_ERR_BAD_NAME;
	if (e->kind == TARBALL_KIND_SYMLINK || e->kind == TARBALL_KIND_HARDLINK)
		e->link_target = l ? xstrdup(l) : xstrndup((const char *)r->block + H_LINK,
							   field_len(r->block + H_LINK, H_LINK_LEN));
	return TARBALL_OK;
}

/* Mode, ids and size from the header, overridden by PAX (local over global). */
static enum tarball_error entry_numbers(struct tarball_reader *r, struct tarball_entry *e)
{
	const struct pax_fields *g = &r->global, *x = &r->local;
	uint64_t mode, uid, gid, size;

	if (!parse_number(r->block + H_MODE, H_ID_LEN, &mode) ||
	    !parse_number(r->block + H_UID, H_ID_LEN, &uid) ||
	    !parse_number(r->block + H_GID, H_ID_LEN, &gid) ||
	    !parse_number(r->block + H_SIZE, H_SIZE_LEN, &size))
		return TARBALL_ERR_BAD_HEADER;
	uid = x->has_uid ? x->uid : g->has_uid ? g->uid : uid;
	gid = x->has_gid ? x->gid : g->has_gid ? g->gid : gid;
	size = x->has_size ? x->size : g->has_size ? g->size : size;
	if (uid > TARBALL_ID_MAX || gid > TARBALL_ID_MAX || size > INT64_MAX)
		return TARBALL_ERR_BAD_HEADER;
	e->mode = (mode_t)(mode & TARBALL_PERM_MASK);
	e->uid = (uid_t)uid;
	e->gid = (gid_t)gid;
	e->size = size;
	return TARBALL_OK;
}

static enum tarball_error entry_begin(struct tarball_reader *r)
{
	struct tarball_entry *e = &r->entry;
	enum tarball_error err;

	e->typeflag = (char)r->block[H_TYPE];
	err = entry_numbers(r, e);
	if (err == TARBALL_OK)
		err = entry_names(r, e);
	if (err != TARBALL_OK)
		return err;
	r->have_entry = true;
	if (e->kind != TARBALL_KIND_FILE || !r->cb || e->size == 0) {
		r->state = RS_DONE;
		return TARBALL_OK;
	}
	if (e->size > r->max_bytes)
		return TARBALL_ERR_OVER_CAP;
	r->body_left = e->size;
	r->state = RS_BODY;
	return TARBALL_OK;
}

static enum tarball_error header_end(struct tarball_reader *r)
{
	const uint8_t *b = r->block;
	uint64_t size;

	if (block_is_zero(b))
		return r->headers ? TARBALL_ERR_META_TRUNCATED : TARBALL_ERR_NO_ENTRY;
	r->headers++;
	r->meta_bytes += TARBALL_BLOCK;
	if (!checksum_is_valid(b) || !magic_is_valid(b) ||
	    !parse_number(b + H_SIZE, H_SIZE_LEN, &size))
		return TARBALL_ERR_BAD_HEADER;
	switch (b[H_TYPE]) {
	case 'x':
	case 'X':
	case 'g':
	case 'L':
	case 'K':
		return meta_begin(r, (char)b[H_TYPE], size);
	case 'S':
		return TARBALL_ERR_SPARSE;
	default:
		return entry_begin(r);
	}
}

/* ---- the reader: feeding -------------------------------------------------- */

static size_t min_size(size_t a, uint64_t b)
{
	return b < a ? (size_t)b : a;
}

static size_t step_header(struct tarball_reader *r, const uint8_t *p, size_t len)
{
	size_t n = min_size(len, TARBALL_BLOCK - r->block_len);

	memcpy(r->block + r->block_len, p, n);
	r->block_len += n;
	if (r->block_len == TARBALL_BLOCK) {
		r->block_len = 0;
		reader_check(r, header_end(r));
	}
	return n;
}

static size_t step_meta(struct tarball_reader *r, const uint8_t *p, size_t len)
{
	size_t n = min_size(len, r->meta_size - r->meta_len);

	memcpy(r->meta + r->meta_len, p, n);
	r->meta_len += n;
	if (r->meta_len == r->meta_size)
		reader_check(r, meta_end(r));
	return n;
}

static size_t step_pad(struct tarball_reader *r, size_t len)
{
	size_t n = min_size(len, r->skip);

	r->skip -= n;
	if (r->skip == 0)
		r->state = RS_HEADER;
	return n;
}

static size_t step_body(struct tarball_reader *r, const uint8_t *p, size_t len)
{
	size_t n = min_size(len, r->body_left);
	int k = r->cb(p, n, r->arg);

	if (k < 0) {
		reader_fail(r, TARBALL_ERR_SINK);
		r->err = k;
		return n;
	}
	r->body_left -= n;
	r->body_done += n;
	if (r->body_left == 0)
		r->state = RS_DONE;
	return n;
}

static int reader_status(const struct tarball_reader *r)
{
	if (r->state == RS_FAILED)
		return r->err;
	return r->state == RS_DONE ? TARBALL_DONE : TARBALL_MORE;
}

int tarball_reader_feed(struct tarball_reader *r, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0 && r->state != RS_DONE && r->state != RS_FAILED) {
		size_t n;

		switch (r->state) {
		case RS_HEADER:
			n = step_header(r, p, len);
			break;
		case RS_META:
			n = step_meta(r, p, len);
			break;
		case RS_PAD:
			n = step_pad(r, len);
			break;
		case RS_BODY:
			n = step_body(r, p, len);
			break;
		default:
			assert(!"unreachable");
			return -EINVAL;
		}
		p += n;
		len -= n;
	}
	return reader_status(r);
}

int tarball_reader_finish(struct tarball_reader *r)
{
	switch (r->state) {
	case RS_DONE:
	case RS_FAILED:
		break;
	case RS_HEADER:
		reader_fail(r, r->headers ? TARBALL_ERR_META_TRUNCATED : TARBALL_ERR_NO_HEADER);
		break;
	case RS_META:
	case RS_PAD:
		reader_fail(r, TARBALL_ERR_META_TRUNCATED);
		break;
	case RS_BODY:
		reader_fail(r, TARBALL_ERR_BODY_TRUNCATED);
		break;
	default:
		assert(!"unreachable");
	}
	return reader_status(r);
}

const struct tarball_entry *tarball_reader_entry(const struct tarball_reader *r)
{
	return r->have_entry ? &r->entry : NULL;
}

enum tarball_error tarball_reader_error(const struct tarball_reader *r)
{
	return r->error;
}

uint64_t tarball_reader_body_bytes(const struct tarball_reader *r)
{
	return r->body_done;
}
