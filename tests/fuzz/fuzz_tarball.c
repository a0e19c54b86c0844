/* fuzz_tarball.c — libFuzzer target for the GET-archive tar reader
 * (domain/files/tarball.c, tarball_reader_*), and through it the builder.
 * The input is the response body. It is read:
 *   1. whole, with no cap: the reference;
 *   2. in small chunks (cut points from the input), no cap: the same
 *      outcome, entry, error and body (count and hash) as the reference;
 *   3. in chunks with a small cap: the first file's size, less one when the
 *      input's length is odd — over it nothing is delivered and the refusal
 *      is OVER_CAP, at it the body comes whole;
 *   4. in chunks with a sink that fails half way: the sink's error, sticky;
 *   5. header only (no sink, as files.stat reads): the entry as the
 *      reference describes it, or the reference's failure before it.
 * Each read checks: a body never exceeds max_bytes; a finished file's body
 * is its size; an entry's name is non-empty, NUL-free, within
 * TARBALL_NAME_MAX, without a trailing '/'; mode within 07777; a link
 * target exactly for links; an error sticks and a finished reader stays
 * finished. A file entry read whole is built again with tarball_build_file
 * (when its name is one the builder takes) and read back: same name,
 * owner, mode and bytes. A broken invariant aborts. Built by
 * tests/fuzz/run.sh with clang, and by meson with replay_main.c as the unit
 * test 'fuzz_tarball'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "tarball.h"

/* The rebuilt tar may be at most this big (the input is smaller still). */
#define FUZZ_REBUILD_MAX (1024 * 1024)

struct body {
	uint64_t bytes;
	uint64_t hash;
	uint64_t fail_after;       /* the sink fails once this many bytes are in */
	uint8_t *keep;             /* a copy of the body, when asked */
	size_t keep_len, keep_cap;
};

struct outcome {
	int rc;                    /* the final feed/finish result */
	enum tarball_error error;
	bool have_entry;
	struct tarball_entry entry;   /* name and link_target copied */
	struct body body;
};

static int body_cb(const void *buf, size_t len, void *arg)
{
	struct body *b = arg;

	require(len > 0, "an empty body chunk");
	if (b->bytes + len > b->fail_after)
		return -EIO;
	b->bytes += len;
	b->hash = fuzz_hash(b->hash, buf, len);
	if (b->keep_cap) {
		require(b->keep_len + len <= b->keep_cap, "a body past its size");
		memcpy(b->keep + b->keep_len, buf, len);
		b->keep_len += len;
	}
	return 0;
}

static void check_entry(const struct tarball_entry *e)
{
	size_t len = strlen(e->name);

	require(len > 0 && len <= TARBALL_NAME_MAX, "an entry name's length");
	require(e->name[len - 1] != '/', "an entry name with a trailing slash");
	require((e->mode & ~(mode_t)TARBALL_PERM_MASK) == 0, "mode bits past 07777");
	require(e->size <= INT64_MAX, "a size past INT64_MAX");
	require(e->kind < _TARBALL_KIND_MAX && tarball_kind_to_string(e->kind), "an unknown kind");
	require((e->link_target != NULL) ==
		(e->kind == TARBALL_KIND_SYMLINK || e->kind == TARBALL_KIND_HARDLINK),
		"a link target on a non-link, or a link without one");
	if (e->link_target)
		require(strlen(e->link_target) <= TARBALL_NAME_MAX, "a link target's length");
}

static void outcome_clear(struct outcome *o)
{
	free(o->entry.name);
	free(o->entry.link_target);
	free(o->body.keep);
	*o = (struct outcome){ 0 };
}

/* Reads data (whole when chunked is false) with max_bytes and a sink (or
 * none), checking the reader's contract on the way. */
static void read_tar(const uint8_t *data, size_t size, bool chunked, uint32_t seed, uint64_t max,
		     bool with_sink, uint64_t fail_after, size_t keep, struct outcome *o)
{
	struct tarball_reader *r;
	struct fuzz_chunker ch;
	const struct tarball_entry *e;
	size_t off = 0;
	int rc = TARBALL_MORE;

	*o = (struct outcome){ .body = { .hash = FUZZ_HASH_INIT, .fail_after = fail_after } };
	if (keep) {
		o->body.keep = malloc(keep);
		o->body.keep_cap = keep;
	}
	r = tarball_reader_new(max, with_sink ? body_cb : NULL, &o->body);
	fuzz_chunker_init(&ch, seed);
	while (off < size && rc == TARBALL_MORE) {
		size_t n = chunked ? fuzz_chunk_next(&ch, size - off) : size - off;

		rc = tarball_reader_feed(r, data + off, n);
		off += n;
		require(rc == TARBALL_MORE || rc == TARBALL_DONE || rc < 0, "a feed result");
		require(o->body.bytes <= max, "a body past max_bytes");
	}
	if (rc == TARBALL_MORE)
		rc = tarball_reader_finish(r);
	else
		require(tarball_reader_finish(r) == rc, "finish disagrees with the last feed");
	require(rc == TARBALL_DONE || rc < 0, "finish left the reader wanting more");
	/* Sticky: feeding on changes nothing. */
	require(tarball_reader_feed(r, data, size) == rc, "a result that does not stick");
	require(tarball_reader_finish(r) == rc, "a result that does not stick");
	o->rc = rc;
	o->error = tarball_reader_error(r);
	require((rc < 0) == (o->error != TARBALL_OK), "the error and the result disagree");
	require(o->error < _TARBALL_ERR_MAX && tarball_error_to_string(o->error), "an unknown error");
	require(o->body.bytes == tarball_reader_body_bytes(r), "body bytes miscounted");
	e = tarball_reader_entry(r);
	if (rc == TARBALL_DONE)
		require(e != NULL, "done without an entry");
	if (o->error == TARBALL_ERR_OVER_CAP)
		require(e && e->size > max && o->body.bytes == 0, "over the cap, yet delivered");
	if (e) {
		check_entry(e);
		o->have_entry = true;
		o->entry = *e;
		o->entry.name = strdup(e->name);
		o->entry.link_target = e->link_target ? strdup(e->link_target) : NULL;
		if (rc == TARBALL_DONE && with_sink && e->kind == TARBALL_KIND_FILE)
			require(o->body.bytes == e->size, "a finished file's body is not its size");
	}
	tarball_reader_free(r);
}

static bool same_entry(const struct outcome *a, const struct outcome *b)
{
	if (a->have_entry != b->have_entry)
		return false;
	if (!a->have_entry)
		return true;
	return a->entry.kind == b->entry.kind && a->entry.typeflag == b->entry.typeflag &&
	       strcmp(a->entry.name, b->entry.name) == 0 && a->entry.size == b->entry.size &&
	       a->entry.mode == b->entry.mode && a->entry.uid == b->entry.uid &&
	       a->entry.gid == b->entry.gid &&
	       !a->entry.link_target == !b->entry.link_target &&
	       (!a->entry.link_target || strcmp(a->entry.link_target, b->entry.link_target) == 0);
}

/* The reference's file (read whole again, keeping its body), built again
 * with tarball_build_file and read back. */
static void rebuild(const uint8_t *data, size_t size, const struct outcome *ref)
{
	struct tarball_buf buf = TARBALL_BUF_INIT(FUZZ_REBUILD_MAX);
	struct outcome kept, back;
	struct tarball_file f;
	int r;

	if (!tarball_name_is_valid(ref->entry.name) || ref->entry.size > size)
		return;
	read_tar(data, size, false, 0, UINT64_MAX, true, UINT64_MAX, (size_t)ref->entry.size, &kept);
	require(kept.rc == TARBALL_DONE && kept.body.keep_len == ref->entry.size, "a second read differs");
	f = (struct tarball_file){
		.name = kept.entry.name,
		.data = kept.body.keep_len ? kept.body.keep : NULL,
		.size = kept.body.keep_len,
		.mode = kept.entry.mode,
		.uid = kept.entry.uid,
		.gid = kept.entry.gid,
	};
	r = tarball_build_file(&f, tarball_buf_write_cb, &buf);
	require(r == 0, "a valid file entry does not build");
	read_tar(buf.data, buf.len, false, 0, UINT64_MAX, true, UINT64_MAX, 0, &back);
	require(back.rc == TARBALL_DONE && back.have_entry, "a built tar does not read back");
	require(back.entry.kind == TARBALL_KIND_FILE && strcmp(back.entry.name, f.name) == 0 &&
		back.entry.size == f.size && back.entry.mode == f.mode &&
		back.entry.uid == f.uid && back.entry.gid == f.gid, "a built entry reads back different");
	require(back.body.bytes == ref->body.bytes && back.body.hash == ref->body.hash,
		"a built body reads back different");
	outcome_clear(&back);
	outcome_clear(&kept);
	tarball_buf_clear(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct outcome ref, o;
	uint32_t seed = (uint32_t)size ^ (size ? (uint32_t)data[size - 1] << 8 : 0);

	/* 1. the reference */
	read_tar(data, size, false, 0, UINT64_MAX, true, UINT64_MAX, 0, &ref);
	if (ref.rc == TARBALL_DONE && ref.entry.kind == TARBALL_KIND_FILE)
		rebuild(data, size, &ref);
	/* 2. chunked, no cap */
	read_tar(data, size, true, seed, UINT64_MAX, true, UINT64_MAX, 0, &o);
	require(o.rc == ref.rc && o.error == ref.error, "chunked and whole disagree");
	require(same_entry(&o, &ref), "chunked and whole entries differ");
	require(o.body.bytes == ref.body.bytes && o.body.hash == ref.body.hash,
		"chunked and whole bodies differ");
	outcome_clear(&o);
	/* 3. a small cap around the first file's size */
	if (ref.have_entry && ref.entry.kind == TARBALL_KIND_FILE && ref.entry.size > 0) {
		uint64_t max = ref.entry.size - (size & 1);

		read_tar(data, size, true, seed + 1, max, true, UINT64_MAX, 0, &o);
		require(same_entry(&o, &ref), "a cap changed the entry");
		if (max < ref.entry.size)
			require(o.error == TARBALL_ERR_OVER_CAP && o.rc == -EFBIG, "over the cap, not refused");
		else
			require(o.rc == ref.rc && o.body.hash == ref.body.hash, "at the cap, not whole");
		outcome_clear(&o);
	}
	/* 4. a sink that fails half way through the body */
	if (ref.rc == TARBALL_DONE && ref.body.bytes > 1) {
		read_tar(data, size, true, seed + 2, UINT64_MAX, true, ref.body.bytes / 2, 0, &o);
		require(o.rc == -EIO && o.error == TARBALL_ERR_SINK, "a sink failure not returned");
		require(o.body.bytes <= ref.body.bytes / 2, "bytes past a failed sink");
		outcome_clear(&o);
	}
	/* 5. header only */
	read_tar(data, size, true, seed + 3, 0, false, UINT64_MAX, 0, &o);
	if (ref.have_entry)
		require(o.rc == TARBALL_DONE && same_entry(&o, &ref), "the header read differs");
	else
		require(o.rc == ref.rc && o.error == ref.error, "the header read fails differently");
	require(o.body.bytes == 0, "a body without a sink");
	outcome_clear(&o);
	outcome_clear(&ref);
	return 0;
}
