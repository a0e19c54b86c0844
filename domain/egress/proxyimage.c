/* proxyimage.c — the egress proxy's rootfs tar, built with libarchive,
 * byte for byte the same for the same binary. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "proxyimage.h"
#include "sha256.h"
#include "tarball.h"
#include "xmalloc.h"

#define STR(x)  #x
#define XSTR(x) STR(x)

#define BINARY_NAME  (PROXYIMAGE_ENTRYPOINT + 1)    /* relative: no leading '/' */
#define DIR_MODE     0755
#define TEXT_MODE    0644
#define BINARY_MODE  0555
#define EXEC_BITS    0111

_Static_assert(PROXYIMAGE_DIGEST_BYTES == sizeof(PROXYIMAGE_DIGEST_PREFIX) - 1 + SHA256_HEX_BYTES,
	       "the digest is the prefix and the hex");

static const char passwd_text[] =
	"root:x:0:0:root:/:/nonexistent\n"
	PROXYIMAGE_USER ":x:" XSTR(PROXYIMAGE_UID) ":" XSTR(PROXYIMAGE_GID)
	":egress proxy:/:/nonexistent\n";
static const char group_text[] =
	"root:x:0:\n"
	PROXYIMAGE_USER ":x:" XSTR(PROXYIMAGE_GID) ":\n";

/* ---- reading the binary -------------------------------------------------------- */

struct binary {
	uint8_t *data;
	size_t size;
};

static int binary_check(const char *path, const struct stat *st, char **reterr)
{
	if (!S_ISREG(st->st_mode)) {
		*reterr = xasprintf("egress proxy binary %s is not a regular file", path);
		return -EINVAL;
	}
	if ((uint64_t)st->st_size > PROXYIMAGE_MAX_BINARY) {
		*reterr = xasprintf("egress proxy binary %s is %jd bytes, over the %u-byte limit",
				    path, (intmax_t)st->st_size, PROXYIMAGE_MAX_BINARY);
		return -EFBIG;
	}
	if (!(st->st_mode & EXEC_BITS)) {
		*reterr = xasprintf("egress proxy binary %s is not executable", path);
		return -EACCES;
	}
	return 0;
}

/* Reads exactly size bytes and then the end of the file. */
static int binary_read(int fd, const char *path, struct binary *b, char **reterr)
{
	size_t off = 0;
	uint8_t extra;
	ssize_t n;

	while (off < b->size) {
		n = read(fd, b->data + off, b->size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;

			*reterr = xasprintf("cannot read egress proxy binary %s: %s", path, strerror(-r));
			return r;
		}
		if (n == 0)
			break;
		off += (size_t)n;
	}
	do
		n = read(fd, &extra, 1);
	while (n < 0 && errno == EINTR);
	if (off != b->size || n != 0) {
		*reterr = xasprintf("egress proxy binary %s changed while it was read", path);
		return -EIO;
	}
	return 0;
}

/* O_NONBLOCK: a FIFO put there must be refused, not waited on. */
static int binary_load(const char *path, struct binary *ret, char **reterr)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	struct binary b;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		*reterr = xasprintf("cannot open egress proxy binary %s: %s", path, strerror(-r));
		return r;
	}
	r = binary_check(path, &st, reterr);
	if (r < 0)
		return r;
	b.size = (size_t)st.st_size;
	b.data = malloc(b.size ? b.size : 1);
	if (!b.data) {
		*reterr = xasprintf("no memory for egress proxy binary %s", path);
		return -ENOMEM;
	}
	r = binary_read(fd, path, &b, reterr);
	if (r < 0) {
		free(b.data);
		return r;
	}
	*ret = b;
	return 0;
}

/* ---- the tar --------------------------------------------------------------------- */

struct sink {
	struct tarball_buf buf;
	int error;                  /* the buffer's -errno; libarchive only says "fatal" */
};

static la_ssize_t sink_write_cb(struct archive *a, void *client, const void *buf, size_t len)
{
	struct sink *s = client;
	int r = tarball_buf_write_cb(buf, len, &s->buf);

	if (r < 0) {
		s->error = r;
		archive_set_error(a, -r, "tar buffer failed");
		return -1;
	}
	return (la_ssize_t)len;
}

static int sink_error(const struct sink *s)
{
	return s->error < 0 ? s->error : -EIO;
}

/* Plain ustar: no PAX records, so no atime, ctime or xattrs can appear;
 * every name here fits. Uncompressed; the last block is not padded past
 * the end-of-archive blocks. */
static int tar_open(struct archive *a, struct sink *s)
{
	if (archive_write_set_format_ustar(a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK)
		return -EIO;
	if (archive_write_open(a, s, NULL, sink_write_cb, NULL) != ARCHIVE_OK)
		return sink_error(s);
	return 0;
}

/* One entry, root-owned, no user or group name, mtime 0. */
static int tar_entry(struct archive *a, struct sink *s, const char *name, mode_t type,
		     mode_t perm, const void *data, size_t size)
{
	struct archive_entry *e = archive_entry_new();
	int r;

	if (!e)
		return -ENOMEM;
	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	archive_entry_set_mtime(e, 0, 0);
	archive_entry_set_size(e, (la_int64_t)size);
	r = archive_write_header(a, e);
	archive_entry_free(e);
	if (r != ARCHIVE_OK)
		return sink_error(s);
	for (size_t off = 0; off < size;) {
		la_ssize_t n = archive_write_data(a, (const uint8_t *)data + off, size - off);

		if (n <= 0)
			return sink_error(s);
		off += (size_t)n;
	}
	return 0;
}

static int tar_entries(struct archive *a, struct sink *s, const struct binary *b)
{
	int r = tar_entry(a, s, "etc/", AE_IFDIR, DIR_MODE, NULL, 0);

	if (r >= 0)
		r = tar_entry(a, s, "etc/passwd", AE_IFREG, TEXT_MODE, passwd_text,
			      sizeof(passwd_text) - 1);
	if (r >= 0)
		r = tar_entry(a, s, "etc/group", AE_IFREG, TEXT_MODE, group_text,
			      sizeof(group_text) - 1);
	if (r >= 0)
		r = tar_entry(a, s, BINARY_NAME, AE_IFREG, BINARY_MODE, b->data, b->size);
	return r;
}

/* The whole tar into s->buf. The archive is closed also after a failure:
 * libarchive 3.6's free() skips the close of a failed (FATAL) archive and
 * leaks the client's block buffer (as in tarball.c). */
static int tar_build(struct sink *s, const struct binary *b)
{
	struct archive *a = archive_write_new();
	int r;

	if (!a)
		return -ENOMEM;
	r = tar_open(a, s);
	if (r >= 0)
		r = tar_entries(a, s, b);
	if (archive_write_close(a) != ARCHIVE_OK && r >= 0)
		r = sink_error(s);
	archive_write_free(a);
	return r;
}

static void digest_format(const void *data, size_t len, char out[PROXYIMAGE_DIGEST_BYTES])
{
	char hex[SHA256_HEX_BYTES];

	sha256_hex(data, len, hex);
	snprintf(out, PROXYIMAGE_DIGEST_BYTES, "%s%s", PROXYIMAGE_DIGEST_PREFIX, hex);
}

int proxyimage_build(const char *binary_path, void **rettar, size_t *retlen,
		     char retdigest[PROXYIMAGE_DIGEST_BYTES], char **reterr)
{
	struct sink s = { .buf = TARBALL_BUF_INIT(PROXYIMAGE_MAX_TAR) };
	struct binary b = { 0 };
	int r = binary_load(binary_path, &b, reterr);

	if (r < 0)
		return r;
	r = tar_build(&s, &b);
	free(b.data);
	if (r < 0) {
		tarball_buf_clear(&s.buf);
		*reterr = xasprintf("cannot build the egress proxy image of %s: %s", binary_path,
				    strerror(-r));
		return r;
	}
	digest_format(s.buf.data, s.buf.len, retdigest);
	*rettar = s.buf.data;
	*retlen = s.buf.len;
	return 0;
}

/* ---- the image archive (docker save format) ---------------------------------------- */

/* The image config, written by hand so that its bytes (and so its SHA-256,
 * the image ID) never depend on a JSON library's choices. */
static char *image_config(const char *arch, const char *layer_digest)
{
	return xasprintf("{\"architecture\":\"%s\",\"config\":{\"Entrypoint\":[\"%s\"],"
			 "\"Env\":[\"PATH=/\"],\"ExposedPorts\":{\"%d/tcp\":{}},"
			 "\"User\":\"%d:%d\",\"WorkingDir\":\"/\"},"
			 "\"created\":\"1970-01-01T00:00:00Z\","
			 "\"history\":[{\"created\":\"1970-01-01T00:00:00Z\","
			 "\"created_by\":\"maf-sandboxd (the installed egress proxy)\"}],"
			 "\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}",
			 arch, PROXYIMAGE_ENTRYPOINT, PROXYIMAGE_PORT, PROXYIMAGE_UID, PROXYIMAGE_GID,
			 layer_digest);
}

static bool arch_ok(const char *arch)
{
	if (!arch || !*arch || strlen(arch) > PROXYIMAGE_ARCH_MAX)
		return false;
	for (const char *p = arch; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	return true;
}

static bool repo_tag_ok(const char *t)
{
	if (!t || !*t || strlen(t) > PROXYIMAGE_REPO_TAG_MAX)
		return false;
	for (const char *p = t; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("._-:/+", *p)))
			return false;
	return true;
}

static int archive_entries(struct archive *a, struct sink *s, const char *config, const char *config_name,
			   const char *manifest, const void *rootfs, size_t rootfs_len)
{
	int r = tar_entry(a, s, config_name, AE_IFREG, TEXT_MODE, config, strlen(config));

	if (r >= 0)
		r = tar_entry(a, s, PROXYIMAGE_LAYER_NAME, AE_IFREG, TEXT_MODE, rootfs, rootfs_len);
	if (r >= 0)
		r = tar_entry(a, s, "manifest.json", AE_IFREG, TEXT_MODE, manifest, strlen(manifest));
	return r;
}

int proxyimage_archive(const char *binary_path, const char *arch, const char *repo_tag, void **retarchive,
		       size_t *retlen, char retid[PROXYIMAGE_DIGEST_BYTES], char **reterr)
{
	struct sink s = { .buf = TARBALL_BUF_INIT(PROXYIMAGE_MAX_ARCHIVE) };
	_cleanup_free_ void *rootfs = NULL;
	_cleanup_free_ char *config = NULL, *config_name = NULL, *manifest = NULL;
	char layer[PROXYIMAGE_DIGEST_BYTES], hex[SHA256_HEX_BYTES];
	struct archive *a;
	size_t rootfs_len;
	int r;

	if (!arch_ok(arch) || !repo_tag_ok(repo_tag)) {
		*reterr = xasprintf("cannot name the egress proxy image: bad architecture \"%s\" or tag \"%s\"",
				    arch ? arch : "", repo_tag ? repo_tag : "");
		return -EINVAL;
	}
	r = proxyimage_build(binary_path, &rootfs, &rootfs_len, layer, reterr);
	if (r < 0)
		return r;
	config = image_config(arch, layer);
	sha256_hex(config, strlen(config), hex);
	config_name = xasprintf("%s.json", hex);
	manifest = xasprintf("[{\"Config\":\"%s\",\"RepoTags\":[\"%s\"],\"Layers\":[\"%s\"]}]", config_name,
			     repo_tag, PROXYIMAGE_LAYER_NAME);
	a = archive_write_new();
	if (!a)
		return -ENOMEM;
	r = tar_open(a, &s);
	if (r >= 0)
		r = archive_entries(a, &s, config, config_name, manifest, rootfs, rootfs_len);
	if (archive_write_close(a) != ARCHIVE_OK && r >= 0)
		r = sink_error(&s);
	archive_write_free(a);
	if (r < 0) {
		tarball_buf_clear(&s.buf);
		*reterr = xasprintf("cannot build the egress proxy image archive of %s: %s", binary_path,
				    strerror(-r));
		return r;
	}
	snprintf(retid, PROXYIMAGE_DIGEST_BYTES, "%s%s", PROXYIMAGE_DIGEST_PREFIX, hex);
	*retarchive = s.buf.data;
	*retlen = s.buf.len;
	return 0;
}
