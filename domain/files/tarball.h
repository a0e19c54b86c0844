/* tarball.h — the tars of the archive file plane (engine-api §2.1,
 * behaviour-docker §2.3–2.5). Pure: no sockets, no engine, no logging.
 *
 * Build (PUT archive): an UNCOMPRESSED ustar/pax tar, written with libarchive
 * through a write callback, so the caller picks the sink (tarball_buf below
 * for memory; a bounded pipe to the upload later). Names are relative to the
 * extraction directory the PUT names; ownership and modes are stamped on
 * every entry, since the engine takes them from the headers.
 *
 * Parse (GET archive): a push reader fed the response body in chunks as they
 * arrive. It reads the first entry's header under strict caps (metadata
 * bytes, header count, name length), refuses sparse entries and malformed
 * PAX records, hands a regular file's body to a callback as it passes
 * through (never buffered) and stops after that body. A file larger than
 * the caller's cap is refused before a byte of it is delivered. */
#ifndef MSB_TARBALL_H
#define MSB_TARBALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TARBALL_BLOCK              512         /* a tar block: headers and padding */
/* Header, PAX and long-name bytes (padding included) before the first body. */
#define TARBALL_META_MAX_BYTES     (64 * 1024)
#define TARBALL_META_MAX_HEADERS   32          /* headers before and including the first entry's */
#define TARBALL_NAME_MAX           4096        /* bytes of a name or link target (PATH_MAX) */
#define TARBALL_ID_MAX             ((uint64_t)UINT32_MAX - 1)  /* uid/gid; (uid_t)-1 is "no id" */
#define TARBALL_DIR_MODE           0755        /* parents write_file creates */
#define TARBALL_PERM_MASK          07777       /* the mode bits a header carries */

/* A sink for tar bytes. buf is borrowed for the call. Returns 0 or -errno;
 * an error stops the build and is what the build returns. */
typedef int tarball_write_cb(const void *buf, size_t len, void *arg);

/* ---- building -------------------------------------------------------------- */

/* One regular file. name is relative to the extraction directory ("work/sub/f"),
 * see tarball_name_is_valid(). The new_parents nearest ancestors of name
 * (those the ancestor walk found missing) get directory entries first,
 * outermost first, each TARBALL_DIR_MODE with this uid/gid: with
 * "work/sub/f" and 2, entries "work/", "work/sub/", then "work/sub/f". */
struct tarball_file {
	const char *name;
	const void *data;           /* size bytes, any values; borrowed; NULL when size is 0 */
	size_t size;
	mode_t mode;                /* permission bits only (TARBALL_PERM_MASK) */
	uid_t uid;
	gid_t gid;
	size_t new_parents;         /* at most the number of '/' in name */
	time_t mtime;               /* 0 (the seed leaves it at the epoch) unless set */
};

/* One directory entry of a dirs-only tar. */
struct tarball_dir {
	const char *name;           /* see tarball_name_is_valid() */
	mode_t mode;                /* permission bits only */
	uid_t uid;
	gid_t gid;
	time_t mtime;
};

/* True when name can name a tar entry: 1..TARBALL_NAME_MAX bytes, relative
 * (no leading '/'), no empty, "." or ".." component, no trailing '/'. A C
 * string cannot hold a NUL; callers taking lengths (JSON) refuse NUL first. */
bool tarball_name_is_valid(const char *name);

/* Writes the tar of f (parents, file, end-of-archive blocks) to cb. Everything
 * is validated before the first byte is written: -EINVAL for a bad name,
 * mode, id or new_parents, and cb is never called. Then -EIO when libarchive
 * fails, or cb's own error. On failure cb may have seen part of a tar, but
 * never the end-of-archive blocks, and is not called again. */
int tarball_build_file(const struct tarball_file *f, tarball_write_cb *cb, void *arg);

/* Writes a tar of n directory entries, in the given order (a work dir chain:
 * root-owned ancestors, then the guest-owned base). n may be 0 (an empty
 * archive). Same errors as tarball_build_file(). */
int tarball_build_dirs(const struct tarball_dir *dirs, size_t n, tarball_write_cb *cb, void *arg);

/* ---- building a tar of several entries -------------------------------------- */

/* A writer streams one tar of any number of directory and file entries, in
 * the order they are added, to cb. Each add validates everything about its
 * entry first (the builders' rules and errors: -EINVAL for a bad name, mode,
 * id or new_parents) and writes none of it when invalid; then -EIO when
 * libarchive fails, -ENOMEM, or cb's own error. Errors are sticky: the
 * first one is returned by every later add and finish, and cb is never
 * called again (it may have seen part of the tar, never all of its
 * end-of-archive blocks). An add after a successful finish is -EINVAL and
 * changes nothing. libarchive buffers up to a block of 10 KiB, so cb sees
 * bytes in batches, the last ones at finish.
 *
 * Unlike the one-shot builders, which know every name up front, a writer
 * marks every entry's names as binary (a small PAX header, hdrcharset=BINARY,
 * on each entry), so any later name passes byte for byte. No dedup: each
 * file's new_parents get their entries, so count a directory an earlier
 * entry created as existing. */
struct tarball_writer;

/* A writer on cb (cb is not called here; a libarchive setup failure is the
 * sticky error of every later call). Never NULL; free with
 * tarball_writer_free(). */
struct tarball_writer *tarball_writer_new(tarball_write_cb *cb, void *arg);
/* One directory entry (d borrowed). 0 or -errno. */
int tarball_writer_add_dir(struct tarball_writer *w, const struct tarball_dir *d);
/* f's new_parents directory entries, then f itself, as tarball_build_file()
 * writes them (f and its data borrowed). 0 or -errno. */
int tarball_writer_add_file(struct tarball_writer *w, const struct tarball_file *f);
/* A hard link entry ('1'): name becomes another name of target, an entry
 * written earlier in the same tar. The engine's extraction removes what is
 * at name first, then links: the archive plane's write lands its content
 * under a temporary name, then this entry puts it at the final name, so a
 * tar cut short never leaves a short file there. Both names relative, see
 * tarball_name_is_valid(). 0 or -errno. */
struct tarball_link {
	const char *name;
	const char *target;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	time_t mtime;
};
int tarball_writer_add_hardlink(struct tarball_writer *w, const struct tarball_link *l);
/* Writes the end-of-archive blocks and flushes. 0, or the sticky error.
 * Again after success: 0, nothing written. */
int tarball_writer_finish(struct tarball_writer *w);
/* NULL-safe; returns NULL. Never writes the end-of-archive blocks: an
 * unfinished archive is abandoned (cb is not called again). */
struct tarball_writer *tarball_writer_free(struct tarball_writer *w);
static inline void tarball_writer_freep(struct tarball_writer **w)
{
	tarball_writer_free(*w);
}

/* A growable memory sink for the builders, bounded by max bytes. The caller
 * owns the struct and frees data with tarball_buf_clear(). */
struct tarball_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	size_t max;
};
#define TARBALL_BUF_INIT(m) ((struct tarball_buf){ .max = (m) })
/* tarball_write_cb for a struct tarball_buf *: appends, -EFBIG past max
 * (nothing appended), -ENOMEM when the allocation fails. */
int tarball_buf_write_cb(const void *buf, size_t len, void *arg);
/* Frees data and empties the buffer; max is kept. */
void tarball_buf_clear(struct tarball_buf *b);

/* ---- parsing the first entry of a GET archive stream ------------------------ */

enum tarball_kind {
	TARBALL_KIND_FILE,          /* '0', '\0', '7' */
	TARBALL_KIND_DIR,           /* '5' (or '\0' with a trailing '/') */
	TARBALL_KIND_SYMLINK,       /* '2' */
	TARBALL_KIND_HARDLINK,      /* '1' */
	TARBALL_KIND_OTHER,         /* fifo, devices, unknown type flags */
	_TARBALL_KIND_MAX
};
const char *tarball_kind_to_string(enum tarball_kind k);

/* Why a stream was refused. Each maps to one -errno, noted here. */
enum tarball_error {
	TARBALL_OK,
	TARBALL_ERR_NO_HEADER,        /* -EPROTO: the stream ended before its first block */
	TARBALL_ERR_NO_ENTRY,         /* -EPROTO: end-of-archive before any entry */
	TARBALL_ERR_BAD_HEADER,       /* -EBADMSG: checksum, magic or a numeric field */
	TARBALL_ERR_META_TRUNCATED,   /* -EPROTO: the stream ended inside the metadata */
	TARBALL_ERR_META_TOO_LARGE,   /* -E2BIG: over TARBALL_META_MAX_BYTES */
	TARBALL_ERR_TOO_MANY_HEADERS, /* -E2BIG: over TARBALL_META_MAX_HEADERS */
	TARBALL_ERR_PAX_MALFORMED,    /* -EBADMSG: a record's length, '=' or newline */
	TARBALL_ERR_PAX_VALUE,        /* -EBADMSG: a non-digit or out-of-range PAX size, uid or gid */
	TARBALL_ERR_SPARSE,           /* -EOPNOTSUPP: GNU sparse type or GNU.sparse.* records */
	TARBALL_ERR_BAD_NAME,         /* -EBADMSG: empty, a NUL inside, over TARBALL_NAME_MAX */
	TARBALL_ERR_OVER_CAP,         /* -EFBIG: a file larger than max_bytes (nothing delivered) */
	TARBALL_ERR_BODY_TRUNCATED,   /* -EPROTO: the stream ended inside the file's body */
	TARBALL_ERR_SINK,             /* the body callback's own -errno */
	_TARBALL_ERR_MAX
};
/* A sentence fragment for messages ("exceed the 64 KiB metadata limit"). */
const char *tarball_error_to_string(enum tarball_error e);

/* The first entry, as its headers (ustar, then GNU long names, then PAX
 * records, global ones overridden by per-entry ones) describe it. */
struct tarball_entry {
	enum tarball_kind kind;
	char typeflag;              /* the raw ustar type flag */
	char *name;                 /* no NUL inside, trailing '/' removed; owned by the reader */
	char *link_target;          /* symlink or hard link target, else NULL; owned by the reader */
	uint64_t size;              /* body bytes; meaningful for files only */
	mode_t mode;                /* permission bits (TARBALL_PERM_MASK) */
	uid_t uid;
	gid_t gid;
};

/* Receives a regular file's body in order, buf borrowed. 0 or -errno. */
typedef int tarball_body_cb(const void *buf, size_t len, void *arg);

#define TARBALL_MORE 0              /* tarball_reader_feed(): give me more bytes */
#define TARBALL_DONE 1              /* the first entry is complete; stop reading */

struct tarball_reader;

/* A reader that delivers a regular file's body of at most max_bytes to cb.
 * cb NULL: header only (stat) — done once the first entry is described, no
 * cap. Never NULL; free with tarball_reader_free(). */
struct tarball_reader *tarball_reader_new(uint64_t max_bytes, tarball_body_cb *cb, void *arg);
struct tarball_reader *tarball_reader_free(struct tarball_reader *r);
static inline void tarball_reader_freep(struct tarball_reader **r)
{
	tarball_reader_free(*r);
}

/* Feeds the next len bytes (borrowed). Returns TARBALL_MORE, TARBALL_DONE
 * (bytes past the first entry are ignored, then and after) or -errno, which
 * sticks: later calls return it again. Buffers at most one header block and
 * one PAX/long-name body, both inside TARBALL_META_MAX_BYTES. */
int tarball_reader_feed(struct tarball_reader *r, const void *buf, size_t len);

/* The stream has ended. TARBALL_DONE when the first entry is complete, else
 * the truncation error (-EPROTO), or the sticky error. */
int tarball_reader_finish(struct tarball_reader *r);

/* The first entry once its headers are parsed (also after OVER_CAP, to say
 * how big it was), else NULL. Owned by the reader. */
const struct tarball_entry *tarball_reader_entry(const struct tarball_reader *r);
/* Why the reader failed; TARBALL_OK while it has not. */
enum tarball_error tarball_reader_error(const struct tarball_reader *r);
/* Body bytes delivered so far (for "expected N bytes, received K"). */
uint64_t tarball_reader_body_bytes(const struct tarball_reader *r);

#endif
