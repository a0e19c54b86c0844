/* check_tarball.c — the archive plane's tars. Built tars are checked twice:
 * by our own reader and by libarchive's (an independent oracle for names,
 * types, modes, owners and bytes). Hostile tars are made by hand, one raw
 * 512-byte ustar header at a time with a correct checksum, where libarchive
 * would never write them. */
#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "msb-limits.h"
#include "tarball.h"
#include "xmalloc.h"

#define BLK TARBALL_BLOCK

/* ---- bytes ---------------------------------------------------------------- */

struct bytes {
	uint8_t *p;
	size_t len, cap;
};

/* Room for n more bytes, growing geometrically: the reader hands bodies
 * over a byte at a time in the chunked tests. */
static void reserve(struct bytes *b, size_t n)
{
	if (b->len + n + 1 <= b->cap)
		return;
	b->cap = b->len + n + 1 > 2 * b->cap ? b->len + n + 1 : 2 * b->cap;
	b->p = xrealloc(b->p, b->cap);
}

static void put(struct bytes *b, const void *d, size_t n)
{
	reserve(b, n);
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void put_zero(struct bytes *b, size_t n)
{
	reserve(b, n);
	memset(b->p + b->len, 0, n);
	b->len += n;
}

static void put_padded(struct bytes *b, const void *d, size_t n)
{
	put(b, d, n);
	put_zero(b, (BLK - n % BLK) % BLK);
}

static void bytes_free(struct bytes *b)
{
	free(b->p);
	*b = (struct bytes){ 0 };
}

/* Deterministic noise (an LCG), so failures reproduce. */
static void noise(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* ---- raw ustar headers ------------------------------------------------------ */

struct hdr {
	const char *name;
	char type;
	uint64_t size;
	unsigned mode, uid, gid;
	const char *link;
	const char *prefix;
	bool gnu;                   /* GNU magic "ustar  \0" instead of POSIX */
};

/* n-1 octal digits and a NUL, as tar writers fill numeric fields. */
static void octal(uint8_t *f, size_t n, uint64_t v)
{
	f[n - 1] = '\0';
	for (size_t i = n - 1; i-- > 0; v >>= 3)
		f[i] = (uint8_t)('0' + (v & 7));
}

static void hdr_block(const struct hdr *h, uint8_t blk[BLK])
{
	memset(blk, 0, BLK);
	memcpy(blk, h->name, strnlen(h->name, 100));
	octal(blk + 100, 8, h->mode ? h->mode : 0644);
	octal(blk + 108, 8, h->uid);
	octal(blk + 116, 8, h->gid);
	octal(blk + 124, 12, h->size);
	octal(blk + 136, 12, 0);
	blk[156] = (uint8_t)h->type;
	if (h->link)
		memcpy(blk + 157, h->link, strnlen(h->link, 100));
	memcpy(blk + 257, h->gnu ? "ustar  \0" : "ustar\0" "00", 8);
	if (h->prefix)
		memcpy(blk + 345, h->prefix, strnlen(h->prefix, 155));
}

/* The checksum over the block with its own field as spaces (unsigned bytes,
 * or signed chars like historic tars). */
static void seal_with(uint8_t blk[BLK], bool signed_sum)
{
	long sum = 0;

	memset(blk + 148, ' ', 8);
	for (size_t i = 0; i < BLK; i++)
		sum += signed_sum ? (signed char)blk[i] : blk[i];
	octal(blk + 148, 7, (uint64_t)sum);         /* 6 digits, NUL, then a space */
}

static void seal(uint8_t blk[BLK])
{
	seal_with(blk, false);
}

static void put_header(struct bytes *b, const struct hdr *h)
{
	uint8_t blk[BLK];

	hdr_block(h, blk);
	seal(blk);
	put(b, blk, BLK);
}

/* A regular file entry with its padded body. */
static void put_file(struct bytes *b, const char *name, const void *data, size_t n)
{
	put_header(b, &(struct hdr){ .name = name, .type = '0', .size = n });
	put_padded(b, data, n);
}

/* "<len> key=value\n", len counting itself. */
static void pax_record(struct bytes *b, const char *key, const void *val, size_t vlen)
{
	size_t body = 1 + strlen(key) + 1 + vlen + 1, len = body;
	char num[32];

	for (int i = 0; i < 3; i++)
		len = body + (size_t)snprintf(num, sizeof(num), "%zu", len);
	snprintf(num, sizeof(num), "%zu ", len);
	put(b, num, strlen(num));
	put(b, key, strlen(key));
	put(b, "=", 1);
	put(b, val, vlen);
	put(b, "\n", 1);
}

static void pax_text(struct bytes *b, const char *key, const char *val)
{
	pax_record(b, key, val, strlen(val));
}

/* A metadata header of type t ('x', 'g', 'L', 'K') and its padded body. */
static void put_meta(struct bytes *b, char t, const void *data, size_t n)
{
	put_header(b, &(struct hdr){ .name = "././@meta", .type = t, .size = n });
	put_padded(b, data, n);
}

static void put_pax(struct bytes *b, char t, const struct bytes *records)
{
	put_meta(b, t, records->p, records->len);
}

static void put_end(struct bytes *b)
{
	put_zero(b, 2 * BLK);
}

/* ---- running the reader ----------------------------------------------------- */

struct parsed {
	int rc;                     /* the last feed, or finish when it wanted more */
	enum tarball_error error;
	bool have_entry;
	struct tarball_entry e;     /* names copied */
	struct bytes body;
	unsigned body_calls;
	uint64_t body_bytes;
	size_t fed;                 /* bytes fed before the reader stopped asking */
};

static int collect_cb(const void *buf, size_t len, void *arg)
{
	struct parsed *p = arg;

	ck_assert_uint_gt(len, 0);
	put(&p->body, buf, len);
	p->body_calls++;
	return 0;
}

static void parsed_free(struct parsed *p)
{
	free(p->e.name);
	free(p->e.link_target);
	bytes_free(&p->body);
}

/* Feeds data in chunks of chunk bytes (0: all at once), then finish() if
 * the reader still wants more. Checks the result is sticky. */
static void parse_with(const void *data, size_t len, size_t chunk, uint64_t max, bool header_only,
		       struct parsed *out)
{
	struct tarball_reader *r;
	const struct tarball_entry *e;
	const uint8_t *d = data;
	size_t off = 0;
	int rc = TARBALL_MORE;

	*out = (struct parsed){ 0 };
	r = tarball_reader_new(max, header_only ? NULL : collect_cb, out);
	chunk = chunk ? chunk : (len ? len : 1);
	while (off < len && rc == TARBALL_MORE) {
		size_t n = len - off < chunk ? len - off : chunk;

		rc = tarball_reader_feed(r, d + off, n);
		off += n;
	}
	out->fed = off;
	if (rc == TARBALL_MORE)
		rc = tarball_reader_finish(r);
	ck_assert_int_eq(tarball_reader_finish(r), rc);
	ck_assert_int_eq(tarball_reader_feed(r, "x", 1), rc);
	out->rc = rc;
	out->error = tarball_reader_error(r);
	out->body_bytes = tarball_reader_body_bytes(r);
	e = tarball_reader_entry(r);
	out->have_entry = e != NULL;
	if (e) {
		out->e = *e;
		out->e.name = xstrdup(e->name);
		out->e.link_target = e->link_target ? xstrdup(e->link_target) : NULL;
	}
	tarball_reader_free(r);
}

static void parse(const struct bytes *b, uint64_t max, struct parsed *out)
{
	parse_with(b->p, b->len, 0, max, false, out);
}

/* ---- libarchive as the oracle ------------------------------------------------ */

struct oracle_entry {
	char *name;
	mode_t type, perm;
	int64_t uid, gid, size, mtime;
	struct bytes data;
};

struct oracle {
	struct oracle_entry e[16];
	size_t n;
	int filter;                 /* archive_filter_code of the outermost filter */
};

static void oracle_read(const struct tarball_buf *b, struct oracle *o)
{
	struct archive *a = archive_read_new();
	struct archive_entry *ent;
	int r;

	*o = (struct oracle){ 0 };
	ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_support_filter_all(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_open_memory(a, b->data, b->len), ARCHIVE_OK);
	while ((r = archive_read_next_header(a, &ent)) == ARCHIVE_OK) {
		struct oracle_entry *x;
		uint8_t buf[8192];
		la_ssize_t n;

		ck_assert_uint_lt(o->n, ELEMENTSOF(o->e));
		x = &o->e[o->n++];
		x->name = xstrdup(archive_entry_pathname(ent));
		x->type = archive_entry_filetype(ent);
		x->perm = archive_entry_perm(ent);
		x->uid = archive_entry_uid(ent);
		x->gid = archive_entry_gid(ent);
		x->size = archive_entry_size(ent);
		x->mtime = archive_entry_mtime(ent);
		while ((n = archive_read_data(a, buf, sizeof(buf))) > 0)
			put(&x->data, buf, (size_t)n);
		ck_assert_int_eq(n, 0);
	}
	ck_assert_msg(r == ARCHIVE_EOF, "libarchive: %s", archive_error_string(a));
	o->filter = archive_filter_code(a, 0);
	archive_read_free(a);
}

static void oracle_free(struct oracle *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free(o->e[i].name);
		bytes_free(&o->e[i].data);
	}
}

/* Plain tar: blocks, ustar magic in the first header, no filter, and the
 * two zero blocks at the end with no padding past them. */
static void assert_plain_tar(const struct tarball_buf *b)
{
	ck_assert_uint_ge(b->len, 3 * BLK);
	ck_assert_uint_eq(b->len % BLK, 0);
	ck_assert(memcmp(b->data + 257, "ustar", 5) == 0);
	for (size_t i = b->len - 2 * BLK; i < b->len; i++)
		ck_assert_uint_eq(b->data[i], 0);
}

/* ---- build: files round trip -------------------------------------------------- */

enum content { C_EMPTY, C_ALL_BYTES, C_NULS, C_BAD_UTF8, C_511, C_512, C_513, C_NOISE };

struct file_row {
	const char *what;
	const char *name;
	enum content content;
	size_t size;
	mode_t mode;
	uid_t uid;
	gid_t gid;
};

static const struct file_row file_rows[] = {
	{ "empty file", "f", C_EMPTY, 0, 0644, 1000, 1000 },
	{ "all 256 byte values", "bytes.bin", C_ALL_BYTES, 256 * 4, 0644, 1000, 1000 },
	{ "NUL bytes only", "nul", C_NULS, 1000, 0600, 0, 0 },
	{ "invalid UTF-8", "bad.txt", C_BAD_UTF8, 7, 0644, 65534, 65534 },
	{ "one block short", "work/a", C_511, 511, 0755, 1, 2 },
	{ "one block", "work/a", C_512, 512, 0700, 3, 4 },
	{ "one block over", "work/a", C_513, 513, 04755, 5, 6 },
	{ "200 KiB of noise", "maf-sandbox/work/out.bin", C_NOISE, 200 * 1024, 0640, 1000, 100 },
	{ "uid past ustar (PAX uid)", "f", C_511, 511, 0644, 3000000, 1000 },
	{ "largest ids", "f", C_ALL_BYTES, 256, 0644, (uid_t)TARBALL_ID_MAX, (gid_t)TARBALL_ID_MAX },
	{ "name past ustar (PAX path)",
	  "a-rather-long-directory-name-that-keeps-going-and-going-well-past-one-hundred-bytes/"
	  "and-then-a-file-name-that-is-also-long-enough-to-overflow-the-prefix-field-of-ustar-"
	  "headers-which-holds-one-hundred-and-fifty-five-bytes.txt", C_NULS, 10, 0644, 1, 1 },
	{ "UTF-8 name", "caf\xc3\xa9/\xc3\xbc.txt", C_BAD_UTF8, 7, 0644, 1000, 1000 },
	{ "non-UTF-8 name", "a\xff\xfe" "b", C_ALL_BYTES, 256, 0644, 1000, 1000 },
};

static uint8_t *content_make(enum content c, size_t size)
{
	static const uint8_t bad_utf8[] = { 0xc3, 0x28, 0xff, 0xfe, 0xed, 0xa0, 0x80 };
	uint8_t *p = xmalloc(size + 1);

	for (size_t i = 0; i < size; i++) {
		switch (c) {
		case C_ALL_BYTES:
			p[i] = (uint8_t)i;
			break;
		case C_BAD_UTF8:
			p[i] = bad_utf8[i % sizeof(bad_utf8)];
			break;
		case C_NULS:
			p[i] = 0;
			break;
		default:
			p[i] = (uint8_t)('a' + i % 26);
		}
	}
	if (c == C_NOISE)
		noise(p, size, 42);
	return p;
}

START_TEST(test_build_file_round_trip)
{
	const struct file_row *row = &file_rows[_i];
	uint8_t *content = content_make(row->content, row->size);
	struct tarball_file f = { .name = row->name, .data = content, .size = row->size,
				  .mode = row->mode, .uid = row->uid, .gid = row->gid };
	struct tarball_buf b = TARBALL_BUF_INIT(4 * MSB_MIB);
	struct parsed p;
	struct oracle o;

	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), 0);
	assert_plain_tar(&b);

	parse_with(b.data, b.len, 0, row->size, false, &p);
	ck_assert_msg(p.rc == TARBALL_DONE, "%s: rc %d (%s)", row->what, p.rc,
		      tarball_error_to_string(p.error));
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_FILE);
	ck_assert_str_eq(p.e.name, row->name);
	ck_assert_ptr_null(p.e.link_target);
	ck_assert_uint_eq(p.e.size, row->size);
	ck_assert_uint_eq(p.e.mode, row->mode);
	ck_assert_uint_eq(p.e.uid, row->uid);
	ck_assert_uint_eq(p.e.gid, row->gid);
	ck_assert_uint_eq(p.body.len, row->size);
	ck_assert_uint_eq(p.body_bytes, row->size);
	ck_assert(row->size == 0 || memcmp(p.body.p, content, row->size) == 0);

	oracle_read(&b, &o);
	ck_assert_int_eq(o.filter, ARCHIVE_FILTER_NONE);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_str_eq(o.e[0].name, row->name);
	ck_assert_uint_eq(o.e[0].type, AE_IFREG);
	ck_assert_uint_eq(o.e[0].perm, row->mode);
	ck_assert_int_eq(o.e[0].uid, row->uid);
	ck_assert_int_eq(o.e[0].gid, row->gid);
	ck_assert_uint_eq(o.e[0].data.len, row->size);
	ck_assert(row->size == 0 || memcmp(o.e[0].data.p, content, row->size) == 0);

	oracle_free(&o);
	parsed_free(&p);
	tarball_buf_clear(&b);
	free(content);
}
END_TEST

/* "a/b/c/f" with 0..3 new parents: each an explicit 0755 directory entry
 * with the file's owner, outermost first, and nothing above them. */
START_TEST(test_build_file_parents)
{
	static const char *const dirs[] = { "a/", "a/b/", "a/b/c/" };
	static const char *const first[] = { "a", "a/b", "a/b/c" };
	size_t parents = (size_t)_i;
	struct tarball_file f = { .name = "a/b/c/f", .data = "hello", .size = 5, .mode = 0600,
				  .uid = 1234, .gid = 5678, .new_parents = parents };
	struct tarball_buf b = TARBALL_BUF_INIT(MSB_MIB);
	struct parsed p;
	struct oracle o;

	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), 0);
	oracle_read(&b, &o);
	ck_assert_uint_eq(o.n, parents + 1);
	for (size_t i = 0; i < parents; i++) {
		ck_assert_str_eq(o.e[i].name, dirs[3 - parents + i]);
		ck_assert_uint_eq(o.e[i].type, AE_IFDIR);
		ck_assert_uint_eq(o.e[i].perm, TARBALL_DIR_MODE);
		ck_assert_int_eq(o.e[i].uid, 1234);
		ck_assert_int_eq(o.e[i].gid, 5678);
		ck_assert_int_eq(o.e[i].size, 0);
	}
	ck_assert_str_eq(o.e[parents].name, "a/b/c/f");
	ck_assert_uint_eq(o.e[parents].type, AE_IFREG);
	ck_assert_uint_eq(o.e[parents].perm, 0600);
	ck_assert_uint_eq(o.e[parents].data.len, 5);
	ck_assert(memcmp(o.e[parents].data.p, "hello", 5) == 0);

	/* Our reader sees the first entry only: the outermost new parent. */
	parse_with(b.data, b.len, 0, 100, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_int_eq(p.e.kind, parents ? TARBALL_KIND_DIR : TARBALL_KIND_FILE);
	ck_assert_str_eq(p.e.name, parents ? first[3 - parents] : "a/b/c/f");
	parsed_free(&p);
	oracle_free(&o);
	tarball_buf_clear(&b);
}
END_TEST

START_TEST(test_build_dirs)
{
	const struct tarball_dir chain[] = {
		{ "maf-sandbox", 0755, 0, 0, 0 },
		{ "maf-sandbox/work", 0700, 1000, 1001, 0 },
		{ "maf-sandbox/work/caf\xc3\xa9", 0750, 2000, 2001, 0 },
	};
	struct tarball_buf b = TARBALL_BUF_INIT(MSB_MIB);
	struct parsed p;
	struct oracle o;

	ck_assert_int_eq(tarball_build_dirs(chain, 3, tarball_buf_write_cb, &b), 0);
	assert_plain_tar(&b);
	oracle_read(&b, &o);
	ck_assert_int_eq(o.filter, ARCHIVE_FILTER_NONE);
	ck_assert_uint_eq(o.n, 3);
	for (size_t i = 0; i < 3; i++) {
		_cleanup_free_ char *want = xasprintf("%s/", chain[i].name);

		ck_assert_str_eq(o.e[i].name, want);
		ck_assert_uint_eq(o.e[i].type, AE_IFDIR);
		ck_assert_uint_eq(o.e[i].perm, chain[i].mode);
		ck_assert_int_eq(o.e[i].uid, chain[i].uid);
		ck_assert_int_eq(o.e[i].gid, chain[i].gid);
	}
	parse_with(b.data, b.len, 0, 0, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_DIR);
	ck_assert_str_eq(p.e.name, "maf-sandbox");
	ck_assert_uint_eq(p.e.mode, 0755);
	ck_assert_uint_eq(p.body_calls, 0);
	parsed_free(&p);
	oracle_free(&o);
	tarball_buf_clear(&b);

	/* No entries: just the end-of-archive blocks, which the reader refuses. */
	ck_assert_int_eq(tarball_build_dirs(NULL, 0, tarball_buf_write_cb, &b), 0);
	ck_assert_uint_eq(b.len, 2 * BLK);
	parse_with(b.data, b.len, 0, 0, false, &p);
	ck_assert_int_eq(p.error, TARBALL_ERR_NO_ENTRY);
	parsed_free(&p);
	tarball_buf_clear(&b);
}
END_TEST

/* ---- build: refusals ------------------------------------------------------------ */

struct name_row {
	const char *name;
	bool valid;
};

static const struct name_row name_rows[] = {
	{ "f", true }, { "a/b/c", true }, { "..a", true }, { "a..", true }, { ".hidden", true },
	{ "a\\b", true }, { "caf\xc3\xa9", true }, { "a\xff", true },
	{ "", false }, { "/abs", false }, { "/", false }, { "..", false }, { "../x", false },
	{ "a/../b", false }, { "a/..", false }, { ".", false }, { "./a", false }, { "a/./b", false },
	{ "a//b", false }, { "a/", false }, { "//a", false },
};

static int counting_cb(const void *buf, size_t len, void *arg)
{
	(*(unsigned *)arg)++;
	return 0;
}

START_TEST(test_build_name_rules)
{
	const struct name_row *row = &name_rows[_i];
	struct tarball_file f = { .name = row->name, .data = "x", .size = 1, .mode = 0644 };
	struct tarball_dir d = { .name = row->name, .mode = 0755 };
	unsigned calls = 0;

	ck_assert_msg(tarball_name_is_valid(row->name) == row->valid, "'%s'", row->name);
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), row->valid ? 0 : -EINVAL);
	ck_assert_int_eq(tarball_build_dirs(&d, 1, counting_cb, &calls), row->valid ? 0 : -EINVAL);
	/* A refusal writes nothing at all. */
	ck_assert(row->valid ? calls > 0 : calls == 0);
}
END_TEST

/* TARBALL_NAME_MAX bytes is a name; one more is not. */
START_TEST(test_build_name_length_edge)
{
	char *name = xmalloc(TARBALL_NAME_MAX + 2);
	struct tarball_buf b = TARBALL_BUF_INIT(MSB_MIB);
	struct tarball_file f = { .name = name, .data = "x", .size = 1, .mode = 0644 };
	struct parsed p;

	memset(name, 'n', TARBALL_NAME_MAX + 1);
	for (size_t i = 200; i < TARBALL_NAME_MAX; i += 200)
		name[i] = '/';
	name[TARBALL_NAME_MAX] = '\0';
	ck_assert(tarball_name_is_valid(name));
	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), 0);
	parse_with(b.data, b.len, 0, 1, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_str_eq(p.e.name, name);
	parsed_free(&p);
	tarball_buf_clear(&b);

	name[TARBALL_NAME_MAX] = 'n';
	name[TARBALL_NAME_MAX + 1] = '\0';
	ck_assert(!tarball_name_is_valid(name));
	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), -EINVAL);
	ck_assert_uint_eq(b.len, 0);
	free(name);
}
END_TEST

START_TEST(test_build_bad_fields)
{
	const struct tarball_file good = { .name = "a/b/f", .data = "x", .size = 1, .mode = 0644,
					   .new_parents = 2 };
	struct tarball_file f;
	struct tarball_dir d = { .name = "d", .mode = 0755 };
	unsigned calls = 0;

	f = good;
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), 0);
	calls = 0;
	f = good, f.mode = 0100644;                  /* a type bit */
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), -EINVAL);
	f = good, f.uid = (uid_t)-1;
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), -EINVAL);
	f = good, f.gid = (gid_t)-1;
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), -EINVAL);
	f = good, f.new_parents = 3;                 /* "a/b/f" has two ancestors */
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), -EINVAL);
	f = good, f.data = NULL;
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), -EINVAL);
	d.mode = 040755;
	ck_assert_int_eq(tarball_build_dirs(&d, 1, counting_cb, &calls), -EINVAL);
	d.mode = 0755, d.uid = (uid_t)-1;
	ck_assert_int_eq(tarball_build_dirs(&d, 1, counting_cb, &calls), -EINVAL);
	ck_assert_uint_eq(calls, 0);

	/* A 0-byte file needs no data pointer. */
	f = good, f.data = NULL, f.size = 0;
	ck_assert_int_eq(tarball_build_file(&f, counting_cb, &calls), 0);
}
END_TEST

/* tarball_build_dirs validates the whole list first: a bad last entry
 * after more valid ones than libarchive buffers still writes nothing. */
START_TEST(test_build_dirs_validates_all)
{
	struct tarball_dir dirs[40];
	char names[40][8];
	unsigned calls = 0;

	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		snprintf(names[i], sizeof(names[i]), "d%zu", i);
		dirs[i] = (struct tarball_dir){ .name = names[i], .mode = 0755 };
	}
	ck_assert_int_eq(tarball_build_dirs(dirs, ELEMENTSOF(dirs), counting_cb, &calls), 0);
	ck_assert_uint_gt(calls, 1);                /* more than one buffer's worth */
	calls = 0;
	dirs[ELEMENTSOF(dirs) - 1].uid = (uid_t)-1;
	ck_assert_int_eq(tarball_build_dirs(dirs, ELEMENTSOF(dirs), counting_cb, &calls), -EINVAL);
	ck_assert_uint_eq(calls, 0);
}
END_TEST

/* The sink's own error comes back, wherever in the tar it happens. */
struct failing_sink {
	unsigned calls, fail_at;
	size_t bytes;
};

static int failing_cb(const void *buf, size_t len, void *arg)
{
	struct failing_sink *s = arg;

	if (++s->calls == s->fail_at)
		return -ENOSPC;
	s->bytes += len;
	return 0;
}

START_TEST(test_build_sink_errors)
{
	const size_t size = 100 * 1024;
	uint8_t *data = content_make(C_NOISE, size);
	struct tarball_file f = { .name = "f", .data = data, .size = size, .mode = 0644 };
	struct tarball_buf b;

	for (unsigned at = 1; at <= 3; at++) {
		struct failing_sink s = { .fail_at = at };

		ck_assert_int_eq(tarball_build_file(&f, failing_cb, &s), -ENOSPC);
		ck_assert_uint_eq(s.calls, at);     /* nothing written after the failure */
	}

	/* The memory sink refuses past its max and keeps what fit. */
	b = TARBALL_BUF_INIT(size);
	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), -EFBIG);
	ck_assert_uint_le(b.len, size);
	tarball_buf_clear(&b);
	ck_assert_ptr_null(b.data);
	ck_assert_uint_eq(b.max, size);
	free(data);
}
END_TEST

START_TEST(test_buf_sink_edges)
{
	struct tarball_buf b = TARBALL_BUF_INIT(10);

	ck_assert_int_eq(tarball_buf_write_cb("", 0, &b), 0);
	ck_assert_ptr_null(b.data);
	ck_assert_int_eq(tarball_buf_write_cb("0123456789", 10, &b), 0);
	ck_assert_uint_eq(b.len, 10);
	ck_assert_int_eq(tarball_buf_write_cb("x", 1, &b), -EFBIG);
	ck_assert_uint_eq(b.len, 10);
	ck_assert(memcmp(b.data, "0123456789", 10) == 0);
	tarball_buf_clear(&b);
	ck_assert_uint_eq(b.len, 0);
}
END_TEST

/* ---- build: the multi-entry writer ---------------------------------------------- */

/* A sink that keeps every byte and counts its calls; it fails call fail_at
 * (0: never) with -ENOSPC and keeps nothing of it. */
struct rec_sink {
	struct bytes b;
	unsigned calls, fail_at;
};

static int rec_cb(const void *buf, size_t len, void *arg)
{
	struct rec_sink *s = arg;

	if (++s->calls == s->fail_at)
		return -ENOSPC;
	put(&s->b, buf, len);
	return 0;
}

static struct tarball_buf rec_view(const struct rec_sink *s)
{
	return (struct tarball_buf){ .data = s->b.p, .len = s->b.len, .max = s->b.len };
}

/* One expected entry of a writer's archive, as libarchive reads it back. */
struct want_entry {
	const char *name;           /* a directory's with its trailing '/' */
	mode_t type, perm;
	int64_t uid, gid, mtime;
	const uint8_t *data;
	size_t size;
};

static void assert_entries(const struct oracle *o, const struct want_entry *w, size_t n)
{
	ck_assert_uint_eq(o->filter, ARCHIVE_FILTER_NONE);
	ck_assert_uint_eq(o->n, n);
	for (size_t i = 0; i < n; i++) {
		const struct oracle_entry *x = &o->e[i];

		ck_assert_msg(strcmp(x->name, w[i].name) == 0, "entry %zu: '%s', want '%s'", i,
			      x->name, w[i].name);
		ck_assert_uint_eq(x->type, w[i].type);
		ck_assert_uint_eq(x->perm, w[i].perm);
		ck_assert_int_eq(x->uid, w[i].uid);
		ck_assert_int_eq(x->gid, w[i].gid);
		ck_assert_int_eq(x->mtime, w[i].mtime);
		ck_assert_int_eq(x->size, (int64_t)w[i].size);
		ck_assert_uint_eq(x->data.len, w[i].size);
		ck_assert(w[i].size == 0 || memcmp(x->data.p, w[i].data, w[i].size) == 0);
	}
}

#define LONG_DIR "a-rather-long-directory-name-that-keeps-going-and-going-well-past-one-hundred-bytes"
#define LONG_NAME LONG_DIR "/and-then-a-file-name-long-enough-to-overflow-the-prefix-field-of-ustar-" \
	"headers-which-holds-one-hundred-and-fifty-five-bytes.bin"

/* Dirs and files mixed in one archive: every name, mode, owner, time and
 * body comes back exactly, in the order added. */
START_TEST(test_writer_round_trip)
{
	uint8_t *all = content_make(C_ALL_BYTES, 256 * 3);
	uint8_t *big = content_make(C_NOISE, 30 * 1024);   /* past libarchive's 10 KiB block */
	const struct tarball_dir d_top = { "top", 0750, 1, 2, 1700000000 };
	const struct tarball_dir d_z = { "top/z", 0700, 3000000, (gid_t)TARBALL_ID_MAX, 5 };
	const struct tarball_file files[] = {
		{ .name = "top/a/b/all", .data = all, .size = 256 * 3, .mode = 0640, .uid = 1000,
		  .gid = 1001, .new_parents = 2, .mtime = 42 },
		{ .name = "top/a/b/empty", .data = NULL, .size = 0, .mode = 0600, .uid = 1000,
		  .gid = 1001 },
		{ .name = "caf\xc3\xa9/\xff\xfe", .data = big, .size = 30 * 1024, .mode = 04755,
		  .uid = 65534, .gid = 0, .new_parents = 1 },
		{ .name = LONG_NAME, .data = all, .size = 7, .mode = 0644, .new_parents = 1 },
	};
	const struct want_entry want[] = {
		{ "top/", AE_IFDIR, 0750, 1, 2, 1700000000, NULL, 0 },
		{ "top/a/", AE_IFDIR, TARBALL_DIR_MODE, 1000, 1001, 42, NULL, 0 },
		{ "top/a/b/", AE_IFDIR, TARBALL_DIR_MODE, 1000, 1001, 42, NULL, 0 },
		{ "top/a/b/all", AE_IFREG, 0640, 1000, 1001, 42, all, 256 * 3 },
		{ "top/a/b/empty", AE_IFREG, 0600, 1000, 1001, 0, NULL, 0 },
		{ "top/z/", AE_IFDIR, 0700, 3000000, TARBALL_ID_MAX, 5, NULL, 0 },
		{ "caf\xc3\xa9/", AE_IFDIR, TARBALL_DIR_MODE, 65534, 0, 0, NULL, 0 },
		{ "caf\xc3\xa9/\xff\xfe", AE_IFREG, 04755, 65534, 0, 0, big, 30 * 1024 },
		{ LONG_DIR "/", AE_IFDIR, TARBALL_DIR_MODE, 0, 0, 0, NULL, 0 },
		{ LONG_NAME, AE_IFREG, 0644, 0, 0, 0, all, 7 },
	};
	struct rec_sink s = { 0 };
	struct tarball_writer *w = tarball_writer_new(rec_cb, &s);
	struct tarball_buf view;
	struct oracle o;
	struct parsed p;

	ck_assert_ptr_nonnull(w);
	ck_assert_uint_eq(s.calls, 0);
	ck_assert_int_eq(tarball_writer_add_dir(w, &d_top), 0);
	ck_assert_int_eq(tarball_writer_add_file(w, &files[0]), 0);
	ck_assert_int_eq(tarball_writer_add_file(w, &files[1]), 0);
	ck_assert_int_eq(tarball_writer_add_dir(w, &d_z), 0);
	ck_assert_int_eq(tarball_writer_add_file(w, &files[2]), 0);
	ck_assert_int_eq(tarball_writer_add_file(w, &files[3]), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	ck_assert_ptr_null(tarball_writer_free(w));

	view = rec_view(&s);
	assert_plain_tar(&view);
	oracle_read(&view, &o);
	assert_entries(&o, want, ELEMENTSOF(want));
	oracle_free(&o);

	/* Our own reader agrees on the first entry. */
	parse_with(s.b.p, s.b.len, 0, 0, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_DIR);
	ck_assert_str_eq(p.e.name, "top");
	ck_assert_uint_eq(p.e.mode, 0750);
	ck_assert_uint_eq(p.e.uid, 1);
	ck_assert_uint_eq(p.e.gid, 2);
	parsed_free(&p);
	bytes_free(&s.b);
	free(big);
	free(all);
}
END_TEST

/* A hard link entry names an earlier entry: read back as such, size 0. */
START_TEST(test_writer_hardlink)
{
	static const char body[] = "new content";
	const struct tarball_file tmp = { .name = "w/.maf-sandbox-00000000000000aa.tmp", .data = body,
					  .size = sizeof(body) - 1, .mode = 0644, .uid = 7, .gid = 8 };
	const struct tarball_link l = { .name = "w/final", .target = tmp.name, .mode = 0644, .uid = 7, .gid = 8 };
	const struct tarball_link bad = { .name = "w/x", .target = "../escape", .mode = 0644 };
	struct rec_sink s = { 0 };
	struct tarball_writer *w = tarball_writer_new(rec_cb, &s);
	struct tarball_buf view;
	struct archive *a;
	struct archive_entry *e;

	ck_assert_int_eq(tarball_writer_add_file(w, &tmp), 0);
	ck_assert_int_eq(tarball_writer_add_hardlink(w, &l), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	ck_assert_ptr_null(tarball_writer_free(w));
	view = rec_view(&s);
	a = archive_read_new();
	ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_open_memory(a, view.data, view.len), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_OK);
	ck_assert_str_eq(archive_entry_pathname(e), tmp.name);
	ck_assert_ptr_null(archive_entry_hardlink(e));
	ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_OK);
	ck_assert_str_eq(archive_entry_pathname(e), "w/final");
	ck_assert_str_eq(archive_entry_hardlink(e), tmp.name);
	ck_assert_int_eq(archive_entry_size(e), 0);
	ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_EOF);
	archive_read_free(a);
	bytes_free(&s.b);
	/* A bad name or target is refused, and sticks. */
	s = (struct rec_sink){ 0 };
	w = tarball_writer_new(rec_cb, &s);
	ck_assert_int_eq(tarball_writer_add_hardlink(w, &bad), -EINVAL);
	ck_assert_int_eq(tarball_writer_finish(w), -EINVAL);
	tarball_writer_free(w);
	bytes_free(&s.b);
}
END_TEST

/* Each file's new_parents, and nothing else: shared parents once, in order. */
START_TEST(test_writer_parents_once)
{
	const struct tarball_file files[] = {
		{ .name = "w/s/a", .data = "A", .size = 1, .mode = 0644, .uid = 7, .gid = 8,
		  .new_parents = 2 },
		{ .name = "w/s/b", .data = "BB", .size = 2, .mode = 0644, .uid = 7, .gid = 8 },
		{ .name = "w/t/c", .data = "CCC", .size = 3, .mode = 0644, .uid = 7, .gid = 8,
		  .new_parents = 1 },
		{ .name = "d", .data = "D", .size = 1, .mode = 0644, .uid = 7, .gid = 8 },
	};
	const struct want_entry want[] = {
		{ "w/", AE_IFDIR, TARBALL_DIR_MODE, 7, 8, 0, NULL, 0 },
		{ "w/s/", AE_IFDIR, TARBALL_DIR_MODE, 7, 8, 0, NULL, 0 },
		{ "w/s/a", AE_IFREG, 0644, 7, 8, 0, (const uint8_t *)"A", 1 },
		{ "w/s/b", AE_IFREG, 0644, 7, 8, 0, (const uint8_t *)"BB", 2 },
		{ "w/t/", AE_IFDIR, TARBALL_DIR_MODE, 7, 8, 0, NULL, 0 },
		{ "w/t/c", AE_IFREG, 0644, 7, 8, 0, (const uint8_t *)"CCC", 3 },
		{ "d", AE_IFREG, 0644, 7, 8, 0, (const uint8_t *)"D", 1 },
	};
	struct rec_sink s = { 0 };
	_cleanup_(tarball_writer_freep) struct tarball_writer *w = tarball_writer_new(rec_cb, &s);
	struct tarball_buf view;
	struct oracle o;

	for (size_t i = 0; i < ELEMENTSOF(files); i++)
		ck_assert_int_eq(tarball_writer_add_file(w, &files[i]), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	view = rec_view(&s);
	oracle_read(&view, &o);
	assert_entries(&o, want, ELEMENTSOF(want));
	oracle_free(&o);
	bytes_free(&s.b);
}
END_TEST

/* The same file and dirs through the writer and through the one-shot
 * builders hold the same entries. */
START_TEST(test_writer_matches_builders)
{
	const struct tarball_file f = { .name = "x/y/f", .data = "hello", .size = 5, .mode = 0600,
					.uid = 1234, .gid = 5678, .new_parents = 2, .mtime = 9 };
	const struct tarball_dir dirs[] = { { "m", 0755, 0, 0, 0 }, { "m/w", 0700, 10, 11, 12 } };
	struct tarball_buf one = TARBALL_BUF_INIT(MSB_MIB), many = TARBALL_BUF_INIT(MSB_MIB);
	struct tarball_writer *w;
	struct oracle a, b;

	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &one), 0);
	/* The builders know every name is ASCII: plain ustar headers, no PAX. */
	ck_assert_uint_eq(one.len, (3 + 1 + 2) * BLK);
	w = tarball_writer_new(tarball_buf_write_cb, &many);
	ck_assert_int_eq(tarball_writer_add_file(w, &f), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	w = tarball_writer_free(w);
	oracle_read(&one, &a);
	oracle_read(&many, &b);
	ck_assert_uint_eq(a.n, 3);
	ck_assert_uint_eq(b.n, a.n);
	for (size_t i = 0; i < a.n; i++) {
		ck_assert_str_eq(b.e[i].name, a.e[i].name);
		ck_assert_uint_eq(b.e[i].type, a.e[i].type);
		ck_assert_uint_eq(b.e[i].perm, a.e[i].perm);
		ck_assert_int_eq(b.e[i].uid, a.e[i].uid);
		ck_assert_int_eq(b.e[i].gid, a.e[i].gid);
		ck_assert_int_eq(b.e[i].mtime, a.e[i].mtime);
	}
	oracle_free(&a);
	oracle_free(&b);
	tarball_buf_clear(&one);
	tarball_buf_clear(&many);

	ck_assert_int_eq(tarball_build_dirs(dirs, 2, tarball_buf_write_cb, &one), 0);
	ck_assert_uint_eq(one.len, (2 + 2) * BLK);
	w = tarball_writer_new(tarball_buf_write_cb, &many);
	ck_assert_int_eq(tarball_writer_add_dir(w, &dirs[0]), 0);
	ck_assert_int_eq(tarball_writer_add_dir(w, &dirs[1]), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	w = tarball_writer_free(w);
	oracle_read(&one, &a);
	oracle_read(&many, &b);
	ck_assert_uint_eq(a.n, 2);
	ck_assert_uint_eq(b.n, 2);
	for (size_t i = 0; i < 2; i++) {
		ck_assert_str_eq(b.e[i].name, a.e[i].name);
		ck_assert_uint_eq(b.e[i].perm, a.e[i].perm);
		ck_assert_int_eq(b.e[i].uid, a.e[i].uid);
		ck_assert_int_eq(b.e[i].mtime, a.e[i].mtime);
	}
	oracle_free(&a);
	oracle_free(&b);
	tarball_buf_clear(&one);
	tarball_buf_clear(&many);
}
END_TEST

/* Every refusal of the builders, one per row, as the writer's second entry. */
struct bad_row {
	const char *what;
	bool is_dir;
	struct tarball_file f;
	struct tarball_dir d;
};

static const struct bad_row bad_rows[] = {
	{ "file: bad name", false, { .name = "a/../b", .data = "x", .size = 1, .mode = 0644 }, { 0 } },
	{ "file: absolute name", false, { .name = "/f", .data = "x", .size = 1, .mode = 0644 }, { 0 } },
	{ "file: type bits in mode", false, { .name = "f", .data = "x", .size = 1, .mode = 0100644 },
	  { 0 } },
	{ "file: uid -1", false, { .name = "f", .data = "x", .size = 1, .mode = 0644,
	  .uid = (uid_t)-1 }, { 0 } },
	{ "file: gid -1", false, { .name = "f", .data = "x", .size = 1, .mode = 0644,
	  .gid = (gid_t)-1 }, { 0 } },
	{ "file: new_parents past its slashes", false, { .name = "a/f", .data = "x", .size = 1,
	  .mode = 0644, .new_parents = 2 }, { 0 } },
	{ "file: no data", false, { .name = "f", .data = NULL, .size = 1, .mode = 0644 }, { 0 } },
	{ "dir: bad name", true, { 0 }, { .name = "d/", .mode = 0755 } },
	{ "dir: empty name", true, { 0 }, { .name = "", .mode = 0755 } },
	{ "dir: type bits in mode", true, { 0 }, { .name = "d", .mode = 040755 } },
	{ "dir: uid -1", true, { 0 }, { .name = "d", .mode = 0755, .uid = (uid_t)-1 } },
	{ "dir: gid -1", true, { 0 }, { .name = "d", .mode = 0755, .gid = (gid_t)-1 } },
};

static int add_bad(struct tarball_writer *w, const struct bad_row *row)
{
	return row->is_dir ? tarball_writer_add_dir(w, &row->d) : tarball_writer_add_file(w, &row->f);
}

/* An invalid entry writes nothing of itself, and the writer stays failed:
 * every later call says -EINVAL and the sink hears nothing more — no later
 * entry, no end-of-archive blocks. What it heard before is the valid
 * entries' tar, cut short. */
START_TEST(test_writer_invalid_entry)
{
	const struct bad_row *row = &bad_rows[_i];
	const size_t size = 25 * 1024;              /* two of libarchive's blocks go out */
	uint8_t *data = content_make(C_NOISE, size);
	const struct tarball_file good = { .name = "g/f", .data = data, .size = size,
					   .mode = 0644, .new_parents = 1 };
	const struct tarball_dir gd = { .name = "gd", .mode = 0755 };
	struct rec_sink ref = { 0 }, s = { 0 }, first = { 0 };
	struct tarball_writer *w;
	unsigned calls;

	w = tarball_writer_new(rec_cb, &ref);
	ck_assert_int_eq(tarball_writer_add_file(w, &good), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	w = tarball_writer_free(w);

	w = tarball_writer_new(rec_cb, &s);
	ck_assert_int_eq(tarball_writer_add_file(w, &good), 0);
	calls = s.calls;
	ck_assert_uint_gt(calls, 0);
	ck_assert_msg(add_bad(w, row) == -EINVAL, "%s", row->what);
	ck_assert_int_eq(tarball_writer_add_file(w, &good), -EINVAL);
	ck_assert_int_eq(tarball_writer_add_dir(w, &gd), -EINVAL);
	ck_assert_int_eq(tarball_writer_finish(w), -EINVAL);
	ck_assert_int_eq(tarball_writer_finish(w), -EINVAL);
	w = tarball_writer_free(w);
	ck_assert_uint_eq(s.calls, calls);
	ck_assert_uint_lt(s.b.len, ref.b.len - 2 * BLK);
	ck_assert(memcmp(s.b.p, ref.b.p, s.b.len) == 0);

	/* As the first entry: the sink is never called at all. */
	w = tarball_writer_new(rec_cb, &first);
	ck_assert_int_eq(add_bad(w, row), -EINVAL);
	ck_assert_int_eq(tarball_writer_add_dir(w, &gd), -EINVAL);
	ck_assert_int_eq(tarball_writer_finish(w), -EINVAL);
	w = tarball_writer_free(w);
	ck_assert_uint_eq(first.calls, 0);

	bytes_free(&ref.b);
	bytes_free(&s.b);
	free(data);
}
END_TEST

/* The sink's error stops the writer wherever it happens (in an add or in
 * finish): it is returned from then on and the sink is never called again. */
START_TEST(test_writer_sink_failure)
{
	const size_t size = 30 * 1024;
	uint8_t *data = content_make(C_NOISE, size);
	const struct tarball_file f = { .name = "f", .data = data, .size = size, .mode = 0644 };
	const struct tarball_dir d = { .name = "d", .mode = 0755 };
	struct rec_sink ok = { 0 };
	struct tarball_writer *w;

	/* How many calls a whole run makes. */
	w = tarball_writer_new(rec_cb, &ok);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tarball_writer_add_file(w, &f), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	w = tarball_writer_free(w);
	ck_assert_uint_ge(ok.calls, 3);

	for (unsigned at = 1; at <= ok.calls; at++) {
		struct rec_sink s = { .fail_at = at };
		int r = 0, added = 0;

		w = tarball_writer_new(rec_cb, &s);
		while (added < 3 && (r = tarball_writer_add_file(w, &f)) == 0)
			added++;
		if (r == 0)
			r = tarball_writer_finish(w);
		ck_assert_msg(r == -ENOSPC, "fail at %u: %d", at, r);
		ck_assert_uint_eq(s.calls, at);
		ck_assert_int_eq(tarball_writer_add_file(w, &f), -ENOSPC);
		ck_assert_int_eq(tarball_writer_add_dir(w, &d), -ENOSPC);
		ck_assert_int_eq(tarball_writer_finish(w), -ENOSPC);
		w = tarball_writer_free(w);
		ck_assert_uint_eq(s.calls, at);     /* nothing after the failure, free included */
		if (at == ok.calls)
			ck_assert_int_eq(added, 3);     /* the last call is finish's */
		bytes_free(&s.b);
	}
	bytes_free(&ok.b);
	free(data);
}
END_TEST

/* finish writes the end-of-archive blocks once: again it is 0 and writes
 * nothing; an entry after it is refused and writes nothing. */
START_TEST(test_writer_finish_twice)
{
	const struct tarball_file f = { .name = "f", .data = "abc", .size = 3, .mode = 0644 };
	const struct tarball_dir d = { .name = "d", .mode = 0755 };
	struct rec_sink s = { 0 }, empty = { 0 };
	_cleanup_(tarball_writer_freep) struct tarball_writer *w = tarball_writer_new(rec_cb, &s);
	struct tarball_writer *e;
	struct tarball_buf view;
	struct oracle o;
	unsigned calls;
	size_t len;

	ck_assert_int_eq(tarball_writer_add_file(w, &f), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	calls = s.calls;
	len = s.b.len;
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	ck_assert_int_eq(tarball_writer_add_file(w, &f), -EINVAL);
	ck_assert_int_eq(tarball_writer_add_dir(w, &d), -EINVAL);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	ck_assert_uint_eq(s.calls, calls);
	ck_assert_uint_eq(s.b.len, len);
	view = rec_view(&s);
	assert_plain_tar(&view);
	oracle_read(&view, &o);
	ck_assert_uint_eq(o.n, 1);
	oracle_free(&o);
	bytes_free(&s.b);

	/* No entries: the end-of-archive blocks alone. */
	e = tarball_writer_new(rec_cb, &empty);
	ck_assert_int_eq(tarball_writer_finish(e), 0);
	ck_assert_int_eq(tarball_writer_finish(e), 0);
	e = tarball_writer_free(e);
	ck_assert_uint_eq(empty.b.len, 2 * BLK);
	for (size_t i = 0; i < empty.b.len; i++)
		ck_assert_uint_eq(empty.b.p[i], 0);
	bytes_free(&empty.b);
}
END_TEST

/* free never finishes: what the sink heard is the archive cut short, with
 * no end-of-archive blocks, and free itself calls nothing. */
START_TEST(test_writer_free_unfinished)
{
	const size_t size = 25 * 1024;
	uint8_t *data = content_make(C_NOISE, size);
	const struct tarball_file f = { .name = "f", .data = data, .size = size, .mode = 0644 };
	struct rec_sink s = { 0 }, ref = { 0 };
	struct tarball_writer *w;
	unsigned calls;

	w = tarball_writer_new(rec_cb, &ref);
	ck_assert_int_eq(tarball_writer_add_file(w, &f), 0);
	ck_assert_int_eq(tarball_writer_finish(w), 0);
	w = tarball_writer_free(w);

	w = tarball_writer_new(rec_cb, &s);
	ck_assert_int_eq(tarball_writer_add_file(w, &f), 0);
	calls = s.calls;
	ck_assert_ptr_null(tarball_writer_free(w));
	ck_assert_uint_eq(s.calls, calls);
	ck_assert_uint_lt(s.b.len, ref.b.len - 2 * BLK);
	ck_assert(memcmp(s.b.p, ref.b.p, s.b.len) == 0);

	ck_assert_ptr_null(tarball_writer_free(NULL));
	bytes_free(&s.b);
	bytes_free(&ref.b);
	free(data);
}
END_TEST

/* ---- parse: hostile and odd streams, table-driven ------------------------------- */

/* Each maker appends one stream. */
typedef void stream_fn(struct bytes *b);

static void s_garbage(struct bytes *b)
{
	uint8_t blk[BLK];

	noise(blk, BLK, 7);
	put(b, blk, BLK);
	put_end(b);
}

static void s_bad_checksum(struct bytes *b)
{
	put_file(b, "f", "abc", 3);
	b->p[0] = 'g';
	put_end(b);
}

static void s_bad_magic(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memcpy(blk + 257, "ustaR\0" "00", 8);
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_v7_no_magic(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memset(blk + 257, 0, 8);
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_octal_garbage(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memcpy(blk + 124, "0000000001x", 12);
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_mode_garbage(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memcpy(blk + 100, "06-4\0\0\0", 8);
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_negative_size(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memset(blk + 124, 0xff, 12);                /* base-256 -1 */
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

/* -1 in base-256 fits 64 bits once the sign is ignored: only the sign
 * check refuses it. */
static void s_negative_mode(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memset(blk + 100, 0xff, 8);
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_huge_uid(struct bytes *b)
{
	uint8_t blk[BLK];

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memset(blk + 108, 0, 8);
	blk[108] = 0x80;
	blk[111] = 0x01;                            /* base-256 2^32 */
	seal(blk);
	put(b, blk, BLK);
	put_end(b);
}

static void s_sparse_type(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "f", .type = 'S', .size = 0 });
	put_end(b);
}

static void pax_then_file(struct bytes *b, char t, const char *key, const void *val, size_t vlen)
{
	struct bytes rec = { 0 };

	pax_record(&rec, key, val, vlen);
	put_pax(b, t, &rec);
	put_file(b, "f", "abc", 3);
	put_end(b);
	bytes_free(&rec);
}

static void s_pax_sparse(struct bytes *b)
{
	pax_then_file(b, 'x', "GNU.sparse.major", "1", 1);
}

static void s_pax_sparse_global(struct bytes *b)
{
	pax_then_file(b, 'g', "GNU.sparse.size", "100", 3);
}

static void raw_pax_then_file(struct bytes *b, const char *records)
{
	put_meta(b, 'x', records, strlen(records));
	put_file(b, "f", "abc", 3);
	put_end(b);
}

static void s_pax_len_long(struct bytes *b) { raw_pax_then_file(b, "50 path=x\n"); }
static void s_pax_len_short(struct bytes *b) { raw_pax_then_file(b, "9 path=xy\n"); }
static void s_pax_len_tiny(struct bytes *b) { raw_pax_then_file(b, "2 path=xy\n"); }
static void s_pax_len_zero(struct bytes *b) { raw_pax_then_file(b, "0 a=b\n"); }
static void s_pax_len_alpha(struct bytes *b) { raw_pax_then_file(b, "x path=xy\n"); }
static void s_pax_no_space(struct bytes *b) { raw_pax_then_file(b, "10path=xy\n"); }
static void s_pax_no_eq(struct bytes *b) { raw_pax_then_file(b, "11 pathxyz\n"); }
static void s_pax_no_nl(struct bytes *b) { raw_pax_then_file(b, "11 path=xyz"); }
static void s_pax_empty_key(struct bytes *b) { raw_pax_then_file(b, "6 =ab\n"); }
static void s_pax_trailing(struct bytes *b) { raw_pax_then_file(b, "11 path=xy\n7"); }
static void s_pax_len_huge(struct bytes *b)
{
	raw_pax_then_file(b, "99999999999999999999999 a=b\n");
}
/* 2^64 + 26: wraps to the record's true length, 26 bytes. */
static void s_pax_len_wraps(struct bytes *b)
{
	raw_pax_then_file(b, "18446744073709551642 ab=c\n");
}

static void s_pax_size_alpha(struct bytes *b) { pax_then_file(b, 'x', "size", "12a", 3); }
static void s_pax_size_empty(struct bytes *b) { pax_then_file(b, 'x', "size", "", 0); }
static void s_pax_size_neg(struct bytes *b) { pax_then_file(b, 'x', "size", "-1", 2); }
static void s_pax_size_huge(struct bytes *b)
{
	pax_then_file(b, 'x', "size", "18446744073709551616", 20);
}
static void s_pax_uid_neg(struct bytes *b) { pax_then_file(b, 'x', "uid", "-1", 2); }
static void s_pax_uid_max(struct bytes *b) { pax_then_file(b, 'x', "uid", "4294967295", 10); }
static void s_pax_gid_alpha(struct bytes *b) { pax_then_file(b, 'g', "gid", "1e3", 3); }
static void s_pax_path_nul(struct bytes *b) { pax_then_file(b, 'x', "path", "a\0b", 3); }
static void s_pax_link_nul(struct bytes *b) { pax_then_file(b, 'x', "linkpath", "\0", 1); }

static void s_pax_path_long(struct bytes *b)
{
	char *v = xmalloc(TARBALL_NAME_MAX + 1);

	memset(v, 'p', TARBALL_NAME_MAX + 1);
	pax_then_file(b, 'x', "path", v, TARBALL_NAME_MAX + 1);
	free(v);
}

/* A PAX header declaring more than the whole metadata budget: refused from
 * its header, before any of its body is read (none follows here). */
static void s_pax_declares_64k(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "PaxHeader/f", .type = 'x',
				     .size = TARBALL_META_MAX_BYTES });
}

/* Records of exactly n bytes (n >= 20): one path record and a comment. */
static void pax_records_of(struct bytes *rec, size_t n)
{
	size_t fill;
	char *v;

	pax_text(rec, "path", "big");
	/* "<len> comment=<fill>\n" with a 5-digit length */
	fill = n - rec->len - strlen("00000 comment=\n");
	v = xmalloc(fill);
	memset(v, 'c', fill);
	pax_record(rec, "comment", v, fill);
	free(v);
	ck_assert_uint_eq(rec->len, n);
}

/* Metadata one byte past the budget: header + 64513 (→ 65024 padded) + the
 * entry's header = 66048 > 65536. */
static void s_pax_over_64k(struct bytes *b)
{
	struct bytes rec = { 0 };

	pax_records_of(&rec, TARBALL_META_MAX_BYTES - 2 * BLK + 1);
	put_pax(b, 'x', &rec);
	put_file(b, "f", "abc", 3);
	put_end(b);
	bytes_free(&rec);
}

/* Exactly the budget: header + 64512 + entry header = 65536. */
static void s_pax_at_64k(struct bytes *b)
{
	struct bytes rec = { 0 };

	pax_records_of(&rec, TARBALL_META_MAX_BYTES - 2 * BLK);
	put_pax(b, 'x', &rec);
	put_file(b, "f", "abc", 3);
	put_end(b);
	bytes_free(&rec);
}

static void n_headers(struct bytes *b, unsigned n)
{
	struct bytes rec = { 0 };

	pax_text(&rec, "uid", "7");
	for (unsigned i = 0; i + 1 < n; i++)
		put_pax(b, i % 2 ? 'g' : 'x', &rec);
	put_file(b, "f", "abc", 3);
	put_end(b);
	bytes_free(&rec);
}

static void s_32_headers(struct bytes *b) { n_headers(b, TARBALL_META_MAX_HEADERS); }
static void s_33_headers(struct bytes *b) { n_headers(b, TARBALL_META_MAX_HEADERS + 1); }

static void long_name_then_file(struct bytes *b, char t, size_t n, bool nul_inside)
{
	char *v = xmalloc(n + 1);

	memset(v, 'L', n);
	v[n] = '\0';
	if (nul_inside)
		v[n / 2] = '\0';
	put_meta(b, t, v, n + 1);                   /* GNU writes the NUL */
	put_file(b, "f", "abc", 3);
	put_end(b);
	free(v);
}

static void s_longname_at_max(struct bytes *b)
{
	long_name_then_file(b, 'L', TARBALL_NAME_MAX, false);
}

static void s_longname_over(struct bytes *b)
{
	long_name_then_file(b, 'L', TARBALL_NAME_MAX + 1, false);
}

static void s_longlink_over(struct bytes *b)
{
	long_name_then_file(b, 'K', TARBALL_NAME_MAX + 1, false);
}

static void s_longname_nul(struct bytes *b) { long_name_then_file(b, 'L', 50, true); }
static void s_longname_70k(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "././@LongLink", .type = 'L', .size = 70 * 1024 });
}
static void s_longname_empty(struct bytes *b) { long_name_then_file(b, 'L', 0, false); }

static void s_longlink_empty(struct bytes *b)
{
	put_meta(b, 'K', "\0", 1);
	put_header(b, &(struct hdr){ .name = "ln", .type = '2', .link = "t" });
	put_end(b);
}

static void s_longlink_5000(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "././@LongLink", .type = 'K', .size = 5000 });
}

static void s_empty_name(struct bytes *b)
{
	put_file(b, "", "abc", 3);
	put_end(b);
}

static void s_slash_name(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "/", .type = '5' });
	put_end(b);
}

static void s_nothing(struct bytes *b) { (void)b; }
static void s_short(struct bytes *b) { put_zero(b, 100); b->p[0] = 'f'; }
static void s_zero_first(struct bytes *b) { put_end(b); }

static void s_pax_then_end(struct bytes *b)
{
	struct bytes rec = { 0 };

	pax_text(&rec, "path", "x");
	put_pax(b, 'x', &rec);
	put_end(b);
	bytes_free(&rec);
}

static void s_pax_header_only(struct bytes *b)
{
	put_header(b, &(struct hdr){ .name = "PaxHeader/f", .type = 'x', .size = 100 });
}

static void s_pax_half_body(struct bytes *b)
{
	struct bytes rec = { 0 };

	pax_text(&rec, "path", "a-name-long-enough-to-cut");
	put_header(b, &(struct hdr){ .name = "PaxHeader/f", .type = 'x', .size = rec.len });
	put(b, rec.p, rec.len / 2);
	bytes_free(&rec);
}

static void s_pax_in_padding(struct bytes *b)
{
	struct bytes rec = { 0 };

	pax_text(&rec, "path", "x");
	put_header(b, &(struct hdr){ .name = "PaxHeader/f", .type = 'x', .size = rec.len });
	put(b, rec.p, rec.len);
	put_zero(b, 10);                            /* the padding stops short */
	bytes_free(&rec);
}

static void s_header_cut(struct bytes *b)
{
	put_file(b, "f", "abc", 3);
	b->len = BLK - 1;
}

static void s_body_cut(struct bytes *b)
{
	uint8_t data[1000];

	noise(data, sizeof(data), 3);
	put_file(b, "f", data, sizeof(data));
	b->len = BLK + 600;
}

struct stream_row {
	const char *what;
	stream_fn *make;
	enum tarball_error error;
	int rc;                     /* TARBALL_DONE or -errno */
};

static const struct stream_row stream_rows[] = {
	{ "garbage", s_garbage, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "bad checksum", s_bad_checksum, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "bad magic", s_bad_magic, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "v7 header (no magic)", s_v7_no_magic, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "octal garbage in size", s_octal_garbage, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "garbage in mode", s_mode_garbage, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "negative base-256 size", s_negative_size, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "negative base-256 mode", s_negative_mode, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "uid past 32 bits", s_huge_uid, TARBALL_ERR_BAD_HEADER, -EBADMSG },
	{ "GNU sparse type", s_sparse_type, TARBALL_ERR_SPARSE, -EOPNOTSUPP },
	{ "PAX GNU.sparse.*", s_pax_sparse, TARBALL_ERR_SPARSE, -EOPNOTSUPP },
	{ "global PAX GNU.sparse.*", s_pax_sparse_global, TARBALL_ERR_SPARSE, -EOPNOTSUPP },
	{ "PAX length past the data", s_pax_len_long, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length short of the newline", s_pax_len_short, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length inside its prefix", s_pax_len_tiny, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length zero", s_pax_len_zero, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length not a number", s_pax_len_alpha, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length without a space", s_pax_no_space, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX record without '='", s_pax_no_eq, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX record without newline", s_pax_no_nl, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX empty key", s_pax_empty_key, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX trailing partial record", s_pax_trailing, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length overflowing", s_pax_len_huge, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX length wrapping 64 bits", s_pax_len_wraps, TARBALL_ERR_PAX_MALFORMED, -EBADMSG },
	{ "PAX size not digits", s_pax_size_alpha, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX size empty", s_pax_size_empty, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX size negative", s_pax_size_neg, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX size past 64 bits", s_pax_size_huge, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX uid negative", s_pax_uid_neg, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX uid (uid_t)-1", s_pax_uid_max, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "global PAX gid not digits", s_pax_gid_alpha, TARBALL_ERR_PAX_VALUE, -EBADMSG },
	{ "PAX path with NUL", s_pax_path_nul, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "PAX linkpath with NUL", s_pax_link_nul, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "PAX path over the name limit", s_pax_path_long, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "PAX declaring 64 KiB", s_pax_declares_64k, TARBALL_ERR_META_TOO_LARGE, -E2BIG },
	{ "PAX one byte over the budget", s_pax_over_64k, TARBALL_ERR_META_TOO_LARGE, -E2BIG },
	{ "PAX exactly at the budget", s_pax_at_64k, TARBALL_OK, TARBALL_DONE },
	{ "32 headers", s_32_headers, TARBALL_OK, TARBALL_DONE },
	{ "33 headers", s_33_headers, TARBALL_ERR_TOO_MANY_HEADERS, -E2BIG },
	{ "long name at the limit", s_longname_at_max, TARBALL_OK, TARBALL_DONE },
	{ "long name over the limit", s_longname_over, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "long link over the limit", s_longlink_over, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "long name with NUL inside", s_longname_nul, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "long name of 70 KiB", s_longname_70k, TARBALL_ERR_META_TOO_LARGE, -E2BIG },
	{ "long name empty", s_longname_empty, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "long link empty", s_longlink_empty, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "long link declaring 5000 bytes", s_longlink_5000, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "empty name", s_empty_name, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "name of only '/'", s_slash_name, TARBALL_ERR_BAD_NAME, -EBADMSG },
	{ "empty stream", s_nothing, TARBALL_ERR_NO_HEADER, -EPROTO },
	{ "100 bytes", s_short, TARBALL_ERR_NO_HEADER, -EPROTO },
	{ "header cut short", s_header_cut, TARBALL_ERR_NO_HEADER, -EPROTO },
	{ "end-of-archive first", s_zero_first, TARBALL_ERR_NO_ENTRY, -EPROTO },
	{ "PAX then end-of-archive", s_pax_then_end, TARBALL_ERR_META_TRUNCATED, -EPROTO },
	{ "PAX header alone", s_pax_header_only, TARBALL_ERR_META_TRUNCATED, -EPROTO },
	{ "PAX body cut", s_pax_half_body, TARBALL_ERR_META_TRUNCATED, -EPROTO },
	{ "PAX padding cut", s_pax_in_padding, TARBALL_ERR_META_TRUNCATED, -EPROTO },
	{ "body cut", s_body_cut, TARBALL_ERR_BODY_TRUNCATED, -EPROTO },
};

static const size_t stream_chunks[] = { 0, 1, 3, 511, 512, 513, 4096 };

START_TEST(test_parse_streams)
{
	const struct stream_row *row = &stream_rows[_i];
	struct bytes b = { 0 };

	row->make(&b);
	for (size_t c = 0; c < ELEMENTSOF(stream_chunks); c++) {
		struct parsed p;

		parse_with(b.p, b.len, stream_chunks[c], MSB_MIB, false, &p);
		ck_assert_msg(p.error == row->error && p.rc == row->rc,
			      "%s, chunk %zu: got %s (%d), want %s (%d)", row->what, stream_chunks[c],
			      tarball_error_to_string(p.error), p.rc,
			      tarball_error_to_string(row->error), row->rc);
		if (row->rc == TARBALL_DONE) {
			ck_assert(p.have_entry);
			ck_assert_uint_eq(p.body.len, 3);
		}
		parsed_free(&p);
	}
	bytes_free(&b);
}
END_TEST

/* The budget refusals come from the headers alone: fed one byte at a time,
 * the reader fails on the last byte of the header that declares too much,
 * with nothing of the declared body buffered. */
START_TEST(test_parse_refuses_before_reading)
{
	static const struct {
		stream_fn *make;
		int rc;
	} rows[] = {
		{ s_pax_declares_64k, -E2BIG },
		{ s_longname_70k, -E2BIG },
		{ s_longlink_5000, -EBADMSG },
	};

	for (size_t m = 0; m < ELEMENTSOF(rows); m++) {
		struct bytes b = { 0 };
		struct parsed p;

		rows[m].make(&b);
		ck_assert_uint_eq(b.len, BLK);
		parse_with(b.p, b.len, 1, MSB_MIB, false, &p);
		ck_assert_int_eq(p.rc, rows[m].rc);
		ck_assert_uint_eq(p.fed, BLK);
		parsed_free(&p);
		bytes_free(&b);
	}
}
END_TEST

START_TEST(test_parse_meta_budget_entry_name)
{
	struct bytes b = { 0 };
	struct parsed p;

	s_pax_at_64k(&b);
	parse(&b, 3, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_str_eq(p.e.name, "big");
	parsed_free(&p);
	bytes_free(&b);

	s_32_headers(&b);
	parse(&b, 3, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_uint_eq(p.e.uid, 7);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

/* ---- parse: what the headers say ------------------------------------------------ */

/* Per-entry PAX beats the GNU long name, which beats global PAX, which beats
 * the ustar fields; a PAX size overrides the header's. */
START_TEST(test_parse_precedence)
{
	struct bytes b = { 0 }, g = { 0 }, x = { 0 };
	struct parsed p;

	pax_text(&g, "path", "global-name");
	pax_text(&g, "uid", "11");
	pax_text(&g, "gid", "12");
	pax_text(&x, "uid", "21");
	pax_text(&x, "size", "5");
	pax_text(&x, "mtime", "1700000000.5");       /* ignored, and no error */
	pax_text(&x, "SCHILY.xattr.user.k", "v");
	put_pax(&b, 'g', &g);
	put_pax(&b, 'x', &x);
	put_header(&b, &(struct hdr){ .name = "ustar-name", .type = '0', .size = 0, .uid = 1,
				      .gid = 2 });
	put_padded(&b, "12345", 5);
	put_end(&b);
	parse(&b, 5, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_str_eq(p.e.name, "global-name");
	ck_assert_uint_eq(p.e.uid, 21);
	ck_assert_uint_eq(p.e.gid, 12);
	ck_assert_uint_eq(p.e.size, 5);
	ck_assert(p.body.len == 5 && memcmp(p.body.p, "12345", 5) == 0);
	parsed_free(&p);
	bytes_free(&b);

	/* Add a GNU long name: it beats the global path; a local path beats both. */
	put_pax(&b, 'g', &g);
	put_meta(&b, 'L', "gnu-name\0", 9);
	put_file(&b, "ustar-name", "abc", 3);
	put_end(&b);
	parse(&b, 3, &p);
	ck_assert_str_eq(p.e.name, "gnu-name");
	parsed_free(&p);
	bytes_free(&b);

	bytes_free(&x);
	pax_text(&x, "path", "local-name");
	put_pax(&b, 'g', &g);
	put_meta(&b, 'L', "gnu-name\0", 9);
	put_pax(&b, 'x', &x);
	put_file(&b, "ustar-name", "abc", 3);
	put_end(&b);
	parse(&b, 3, &p);
	ck_assert_str_eq(p.e.name, "local-name");
	parsed_free(&p);
	bytes_free(&b);

	/* An empty path record unsets: the header's name applies again. */
	bytes_free(&x);
	pax_text(&x, "path", "local-name");
	pax_text(&x, "path", "");
	put_pax(&b, 'x', &x);
	put_file(&b, "ustar-name", "abc", 3);
	put_end(&b);
	parse(&b, 3, &p);
	ck_assert_str_eq(p.e.name, "ustar-name");
	parsed_free(&p);
	bytes_free(&b);

	bytes_free(&g);
	bytes_free(&x);
}
END_TEST

struct kind_row {
	const char *what;
	struct hdr h;
	enum tarball_kind kind;
	const char *name;
	const char *link;
};

static const struct kind_row kind_rows[] = {
	{ "regular '0'", { .name = "f", .type = '0' }, TARBALL_KIND_FILE, "f", NULL },
	{ "old regular NUL", { .name = "f", .type = '\0' }, TARBALL_KIND_FILE, "f", NULL },
	{ "contiguous '7'", { .name = "f", .type = '7' }, TARBALL_KIND_FILE, "f", NULL },
	{ "old dir (NUL, trailing '/')", { .name = "d/", .type = '\0' }, TARBALL_KIND_DIR, "d", NULL },
	{ "directory", { .name = "dir/", .type = '5', .mode = 0750 }, TARBALL_KIND_DIR, "dir", NULL },
	{ "symlink", { .name = "ln", .type = '2', .link = "../target" }, TARBALL_KIND_SYMLINK, "ln",
	  "../target" },
	{ "hard link", { .name = "hl", .type = '1', .link = "other" }, TARBALL_KIND_HARDLINK, "hl",
	  "other" },
	{ "char device", { .name = "c", .type = '3' }, TARBALL_KIND_OTHER, "c", NULL },
	{ "block device", { .name = "b", .type = '4' }, TARBALL_KIND_OTHER, "b", NULL },
	{ "fifo", { .name = "p", .type = '6' }, TARBALL_KIND_OTHER, "p", NULL },
	{ "unknown type", { .name = "z", .type = 'Z' }, TARBALL_KIND_OTHER, "z", NULL },
	{ "ustar prefix", { .name = "file", .type = '0', .prefix = "dir/sub" }, TARBALL_KIND_FILE,
	  "dir/sub/file", NULL },
	{ "GNU magic ignores the prefix", { .name = "file", .type = '0', .prefix = "junk", .gnu = true },
	  TARBALL_KIND_FILE, "file", NULL },
};

/* The first entry is described; only a regular file has a body delivered. */
START_TEST(test_parse_kinds)
{
	const struct kind_row *row = &kind_rows[_i];
	struct bytes b = { 0 };
	struct parsed p;

	put_header(&b, &row->h);
	put_file(&b, "next", "zzz", 3);
	put_end(&b);
	parse_with(b.p, b.len, 1, 10, false, &p);
	ck_assert_msg(p.rc == TARBALL_DONE, "%s: %s", row->what, tarball_error_to_string(p.error));
	ck_assert_int_eq(p.e.kind, row->kind);
	ck_assert_int_eq(p.e.typeflag, row->h.type);
	ck_assert_str_eq(p.e.name, row->name);
	ck_assert_uint_eq(p.e.mode, row->h.mode ? row->h.mode : 0644);
	if (row->link)
		ck_assert_str_eq(p.e.link_target, row->link);
	else
		ck_assert_ptr_null(p.e.link_target);
	/* Done at the first header (a file here is empty): "zzz" is never read. */
	ck_assert_uint_eq(p.body_calls, 0);
	ck_assert_uint_eq(p.fed, BLK);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

START_TEST(test_parse_long_link_targets)
{
	struct bytes b = { 0 }, x = { 0 };
	char target[300];
	struct parsed p;

	memset(target, 't', sizeof(target) - 1);
	target[sizeof(target) - 1] = '\0';
	pax_text(&x, "linkpath", target);
	put_pax(&b, 'x', &x);
	put_header(&b, &(struct hdr){ .name = "ln", .type = '2', .link = "short" });
	put_end(&b);
	parse(&b, 0, &p);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_SYMLINK);
	ck_assert_str_eq(p.e.link_target, target);
	parsed_free(&p);
	bytes_free(&b);

	put_meta(&b, 'K', target, strlen(target) + 1);
	put_meta(&b, 'L', "a-long-link-name\0", 17);
	put_header(&b, &(struct hdr){ .name = "ln", .type = '1', .link = "short", .gnu = true });
	put_end(&b);
	parse(&b, 0, &p);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_HARDLINK);
	ck_assert_str_eq(p.e.name, "a-long-link-name");
	ck_assert_str_eq(p.e.link_target, target);
	parsed_free(&p);
	bytes_free(&b);
	bytes_free(&x);
}
END_TEST

/* Base-256 numbers (GNU), signed checksums (historic tars). */
START_TEST(test_parse_number_forms)
{
	struct bytes b = { 0 };
	uint8_t blk[BLK];
	struct parsed p;

	hdr_block(&(struct hdr){ .name = "f", .type = '0' }, blk);
	memset(blk + 124, 0, 12);
	blk[124] = 0x80;
	blk[135] = 10;                              /* size 10 */
	memset(blk + 108, 0, 8);
	blk[108] = 0x80;
	blk[113] = 0x2d;
	blk[114] = 0xc6;
	blk[115] = 0xc0;                            /* uid 3000000 */
	seal(blk);
	put(&b, blk, BLK);
	put_padded(&b, "0123456789", 10);
	put_end(&b);
	parse(&b, 10, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_uint_eq(p.e.size, 10);
	ck_assert_uint_eq(p.e.uid, 3000000);
	ck_assert(p.body.len == 10 && memcmp(p.body.p, "0123456789", 10) == 0);
	parsed_free(&p);
	bytes_free(&b);

	hdr_block(&(struct hdr){ .name = "\xe9t\xe9", .type = '0', .size = 1 }, blk);
	seal_with(blk, true);
	put(&b, blk, BLK);
	put_padded(&b, "x", 1);
	put_end(&b);
	parse(&b, 1, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_str_eq(p.e.name, "\xe9t\xe9");
	parsed_free(&p);
	bytes_free(&b);

	/* Leading spaces and a space terminator in octal fields are fine; type
	 * bits some writers put in the mode are dropped. */
	hdr_block(&(struct hdr){ .name = "f", .type = '0', .mode = 0104755 }, blk);
	memcpy(blk + 124, "         12 ", 12);   /* octal 12 = 10 */
	seal(blk);
	put(&b, blk, BLK);
	put_padded(&b, "0123456789", 10);
	put_end(&b);
	parse(&b, 10, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_uint_eq(p.body.len, 10);
	ck_assert_uint_eq(p.e.mode, 04755);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

/* ---- parse: only the first entry -------------------------------------------------- */

START_TEST(test_first_entry_only)
{
	struct bytes b = { 0 };
	uint8_t junk[3000];
	struct parsed p;
	size_t first_end;

	put_file(&b, "first", "one", 3);
	first_end = BLK + 3;
	put_file(&b, "second", "two-two", 7);
	put_end(&b);
	parse(&b, 100, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_str_eq(p.e.name, "first");
	ck_assert(p.body.len == 3 && memcmp(p.body.p, "one", 3) == 0);
	parsed_free(&p);

	/* Fed byte by byte, the reader is done on the first body's last byte. */
	parse_with(b.p, b.len, 1, 100, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_uint_eq(p.fed, first_end);
	ck_assert_uint_eq(p.body_calls, 3);
	parsed_free(&p);
	bytes_free(&b);

	/* What follows the body is never looked at, garbage included. */
	noise(junk, sizeof(junk), 9);
	put_file(&b, "first", "one", 3);
	b.len = first_end;
	put(&b, junk, sizeof(junk));
	parse(&b, 3, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_uint_eq(p.body.len, 3);
	parsed_free(&p);
	bytes_free(&b);

	/* A directory first: described, nothing delivered from what follows. */
	put_header(&b, &(struct hdr){ .name = "d/", .type = '5' });
	put_file(&b, "d/f", "abc", 3);
	put_end(&b);
	parse_with(b.p, b.len, 1, 100, false, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_DIR);
	ck_assert_uint_eq(p.fed, BLK);
	ck_assert_uint_eq(p.body_calls, 0);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

/* ---- parse: the byte cap ----------------------------------------------------------- */

struct cap_row {
	uint64_t size, max;
	bool over;
};

static const struct cap_row cap_rows[] = {
	{ 0, 0, false }, { 1, 0, true }, { 1, 1, false }, { 511, 511, false }, { 512, 511, true },
	{ 4096, 4096, false }, { 4097, 4096, true }, { 100000, 99999, true }, { 100000, 100000, false },
};

START_TEST(test_cap)
{
	const struct cap_row *row = &cap_rows[_i];
	uint8_t *data = content_make(C_NOISE, row->size);
	struct bytes b = { 0 };
	struct parsed p;

	put_file(&b, "f", data, row->size);
	put_end(&b);
	for (size_t c = 0; c < ELEMENTSOF(stream_chunks); c++) {
		parse_with(b.p, b.len, stream_chunks[c], row->max, false, &p);
		ck_assert(p.have_entry);
		ck_assert_uint_eq(p.e.size, row->size);
		if (row->over) {
			/* Refused, not truncated: not one byte of the body delivered. */
			ck_assert_int_eq(p.rc, -EFBIG);
			ck_assert_int_eq(p.error, TARBALL_ERR_OVER_CAP);
			ck_assert_uint_eq(p.body_calls, 0);
			ck_assert_uint_eq(p.body_bytes, 0);
			if (stream_chunks[c])
				ck_assert_uint_lt(p.fed, BLK + stream_chunks[c]);
		} else {
			ck_assert_int_eq(p.rc, TARBALL_DONE);
			ck_assert_uint_eq(p.body.len, row->size);
			ck_assert(row->size == 0 || memcmp(p.body.p, data, row->size) == 0);
		}
		parsed_free(&p);
	}
	bytes_free(&b);
	free(data);
}
END_TEST

/* A header announcing one byte past the 64 MiB transfer ceiling is refused
 * from the header alone; header-only reading (stat) has no cap. */
START_TEST(test_cap_transfer_ceiling)
{
	struct bytes b = { 0 };
	struct parsed p;

	put_header(&b, &(struct hdr){ .name = "big", .type = '0',
				      .size = MSB_TRANSFER_MAX_FILE_BYTES + 1 });
	parse_with(b.p, b.len, 0, MSB_TRANSFER_MAX_FILE_BYTES, false, &p);
	ck_assert_int_eq(p.rc, -EFBIG);
	ck_assert_uint_eq(p.e.size, MSB_TRANSFER_MAX_FILE_BYTES + 1);
	parsed_free(&p);

	parse_with(b.p, b.len, 0, 0, true, &p);
	ck_assert_int_eq(p.rc, TARBALL_DONE);
	ck_assert_int_eq(p.e.kind, TARBALL_KIND_FILE);
	ck_assert_uint_eq(p.e.size, MSB_TRANSFER_MAX_FILE_BYTES + 1);
	parsed_free(&p);

	/* Exactly the ceiling is allowed: the reader then wants the body. */
	bytes_free(&b);
	put_header(&b, &(struct hdr){ .name = "big", .type = '0',
				      .size = MSB_TRANSFER_MAX_FILE_BYTES });
	parse_with(b.p, b.len, 0, MSB_TRANSFER_MAX_FILE_BYTES, false, &p);
	ck_assert_int_eq(p.rc, -EPROTO);
	ck_assert_int_eq(p.error, TARBALL_ERR_BODY_TRUNCATED);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

/* ---- parse: chunked feeding --------------------------------------------------------- */

static const size_t chunk_sizes[] = { 1, 2, 7, 511, 512, 513, 4096, 65536, 0 };

START_TEST(test_chunked_feeding)
{
	const size_t size = 100 * 1024 + 17;
	uint8_t *data = content_make(C_NOISE, size);
	struct tarball_file f = { .name = "a-name-long-enough-for-a-pax-header-to-be-written-by-"
					  "libarchive-because-it-is-over-one-hundred-bytes-long.bin",
				  .data = data, .size = size, .mode = 0640, .uid = 3000000, .gid = 7 };
	struct tarball_buf b = TARBALL_BUF_INIT(MSB_MIB);

	ck_assert_int_eq(tarball_build_file(&f, tarball_buf_write_cb, &b), 0);
	for (size_t c = 0; c < ELEMENTSOF(chunk_sizes); c++) {
		struct parsed p;

		parse_with(b.data, b.len, chunk_sizes[c], size, false, &p);
		ck_assert_msg(p.rc == TARBALL_DONE, "chunk %zu: %s", chunk_sizes[c],
			      tarball_error_to_string(p.error));
		ck_assert_str_eq(p.e.name, f.name);
		ck_assert_uint_eq(p.e.uid, 3000000);
		ck_assert_uint_eq(p.e.gid, 7);
		ck_assert_uint_eq(p.e.mode, 0640);
		ck_assert_uint_eq(p.body.len, size);
		ck_assert(memcmp(p.body.p, data, size) == 0);
		/* The body passes through: never more calls than chunks. */
		if (chunk_sizes[c])
			ck_assert_uint_le(p.body_calls, size / chunk_sizes[c] + 2);
		parsed_free(&p);
	}
	tarball_buf_clear(&b);
	free(data);
}
END_TEST

/* ---- parse: the body sink ----------------------------------------------------------- */

static int refusing_cb(const void *buf, size_t len, void *arg)
{
	(*(unsigned *)arg)++;
	return -ENOSPC;             /* its own errno comes back, not a generic one */
}

START_TEST(test_body_sink_error)
{
	struct bytes b = { 0 };
	struct tarball_reader *r;
	unsigned calls = 0;

	put_file(&b, "f", "abcdef", 6);
	put_end(&b);
	r = tarball_reader_new(6, refusing_cb, &calls);
	ck_assert_int_eq(tarball_reader_feed(r, b.p, BLK + 2), -ENOSPC);
	ck_assert_int_eq(tarball_reader_error(r), TARBALL_ERR_SINK);
	ck_assert_int_eq(tarball_reader_feed(r, b.p + BLK + 2, 4), -ENOSPC);
	ck_assert_int_eq(tarball_reader_finish(r), -ENOSPC);
	ck_assert_uint_eq(calls, 1);
	ck_assert_uint_eq(tarball_reader_body_bytes(r), 0);
	tarball_reader_free(r);
	bytes_free(&b);
}
END_TEST

START_TEST(test_body_truncated_counts)
{
	struct bytes b = { 0 };
	struct parsed p;

	s_body_cut(&b);
	parse(&b, 1000, &p);
	ck_assert_int_eq(p.error, TARBALL_ERR_BODY_TRUNCATED);
	ck_assert_uint_eq(p.e.size, 1000);
	ck_assert_uint_eq(p.body_bytes, 600);
	parsed_free(&p);
	bytes_free(&b);
}
END_TEST

/* ---- strings ------------------------------------------------------------------------- */

START_TEST(test_strings)
{
	for (int i = 0; i < _TARBALL_KIND_MAX; i++) {
		ck_assert_ptr_nonnull(tarball_kind_to_string(i));
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(tarball_kind_to_string(i), tarball_kind_to_string(j));
	}
	ck_assert_ptr_null(tarball_kind_to_string(_TARBALL_KIND_MAX));
	for (int i = 0; i < _TARBALL_ERR_MAX; i++) {
		ck_assert_ptr_nonnull(tarball_error_to_string(i));
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(tarball_error_to_string(i), tarball_error_to_string(j));
	}
	ck_assert_ptr_null(tarball_error_to_string(_TARBALL_ERR_MAX));
	ck_assert_ptr_nonnull(strstr(tarball_error_to_string(TARBALL_ERR_META_TOO_LARGE), "64 KiB"));
	ck_assert_ptr_nonnull(strstr(tarball_error_to_string(TARBALL_ERR_TOO_MANY_HEADERS), "32"));
}
END_TEST

static Suite *tarball_suite(void)
{
	Suite *s = suite_create("tarball");
	TCase *tc;

	tc = tcase_create("build round trip");
	tcase_add_loop_test(tc, test_build_file_round_trip, 0, ELEMENTSOF(file_rows));
	tcase_add_loop_test(tc, test_build_file_parents, 0, 4);
	tcase_add_test(tc, test_build_dirs);
	suite_add_tcase(s, tc);

	tc = tcase_create("build refusals");
	tcase_add_loop_test(tc, test_build_name_rules, 0, ELEMENTSOF(name_rows));
	tcase_add_test(tc, test_build_name_length_edge);
	tcase_add_test(tc, test_build_bad_fields);
	tcase_add_test(tc, test_build_dirs_validates_all);
	tcase_add_test(tc, test_build_sink_errors);
	tcase_add_test(tc, test_buf_sink_edges);
	suite_add_tcase(s, tc);

	tc = tcase_create("writer: several entries");
	tcase_add_test(tc, test_writer_round_trip);
	tcase_add_test(tc, test_writer_hardlink);
	tcase_add_test(tc, test_writer_parents_once);
	tcase_add_test(tc, test_writer_matches_builders);
	suite_add_tcase(s, tc);

	tc = tcase_create("writer: refusals and sticky errors");
	tcase_add_loop_test(tc, test_writer_invalid_entry, 0, ELEMENTSOF(bad_rows));
	tcase_add_test(tc, test_writer_sink_failure);
	tcase_add_test(tc, test_writer_finish_twice);
	tcase_add_test(tc, test_writer_free_unfinished);
	suite_add_tcase(s, tc);

	tc = tcase_create("parse hostile streams");
	tcase_add_loop_test(tc, test_parse_streams, 0, ELEMENTSOF(stream_rows));
	tcase_add_test(tc, test_parse_refuses_before_reading);
	tcase_add_test(tc, test_parse_meta_budget_entry_name);
	suite_add_tcase(s, tc);

	tc = tcase_create("parse entry description");
	tcase_add_test(tc, test_parse_precedence);
	tcase_add_loop_test(tc, test_parse_kinds, 0, ELEMENTSOF(kind_rows));
	tcase_add_test(tc, test_parse_long_link_targets);
	tcase_add_test(tc, test_parse_number_forms);
	suite_add_tcase(s, tc);

	tc = tcase_create("first entry only");
	tcase_add_test(tc, test_first_entry_only);
	suite_add_tcase(s, tc);

	tc = tcase_create("byte cap");
	tcase_add_loop_test(tc, test_cap, 0, ELEMENTSOF(cap_rows));
	tcase_add_test(tc, test_cap_transfer_ceiling);
	suite_add_tcase(s, tc);

	tc = tcase_create("chunked feeding and sinks");
	tcase_add_test(tc, test_chunked_feeding);
	tcase_add_test(tc, test_body_sink_error);
	tcase_add_test(tc, test_body_truncated_counts);
	suite_add_tcase(s, tc);

	tc = tcase_create("strings");
	tcase_add_test(tc, test_strings);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tarball_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
