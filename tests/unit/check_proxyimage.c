/* check_proxyimage.c — the egress proxy's rootfs tar: byte-identical for the
 * same binary (its digest is the layer DiffID the engine reports), exactly
 * the four entries with their modes and owners (read back with libarchive,
 * an independent oracle), and every refusal of the binary. Files live in a
 * mkdtemp directory removed after each test. */
#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "cleanup.h"
#include "proxyimage.h"
#include "sha256.h"
#include "xmalloc.h"

#define PASSWD "root:x:0:0:root:/:/nonexistent\nmsb-proxy:x:65532:65532:egress proxy:/:/nonexistent\n"
#define GROUP  "root:x:0:\nmsb-proxy:x:65532:\n"
#define TAR_BLOCK 512

static char tmpdir[] = "/tmp/check_proxyimage.XXXXXX";

static void setup(void)
{
	strcpy(tmpdir + strlen(tmpdir) - 6, "XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void teardown(void)
{
	nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *path_of(const char *name)
{
	return xasprintf("%s/%s", tmpdir, name);
}

/* A file of len bytes of data (repeated), with mode. */
static char *file_make(const char *name, const char *data, size_t len, mode_t mode)
{
	char *path = path_of(name);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t dlen = strlen(data);

	ck_assert_int_ge(fd, 0);
	for (size_t off = 0; off < len;) {
		size_t n = len - off < dlen ? len - off : dlen;

		ck_assert_int_eq(write(fd, data, n), (ssize_t)n);
		off += n;
	}
	ck_assert_int_eq(fchmod(fd, mode), 0);
	return path;
}

/* A sparse file of size bytes: cheap however big. */
static char *file_sparse(const char *name, off_t size)
{
	char *path = path_of(name);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	return path;
}

struct image {
	void *tar;
	size_t len;
	char digest[PROXYIMAGE_DIGEST_BYTES];
};

static void image_build(const char *path, struct image *img)
{
	_cleanup_free_ char *err = NULL;
	int r = proxyimage_build(path, &img->tar, &img->len, img->digest, &err);

	ck_assert_msg(r == 0, "build %s: %d %s", path, r, err);
	ck_assert_ptr_null(err);
}

/* ---- determinism ------------------------------------------------------------------ */

START_TEST(test_deterministic)
{
	_cleanup_free_ char *path = file_make("proxy", "\x7f" "ELF fake proxy bytes ", 5000, 0755);
	struct timeval later[2] = { { 1700000000, 0 }, { 1700000000, 0 } };
	struct image a, b;
	char hex[SHA256_HEX_BYTES];

	image_build(path, &a);
	/* Another mtime and mode on the file change nothing in the tar. */
	ck_assert_int_eq(utimes(path, later), 0);
	ck_assert_int_eq(chmod(path, 0700), 0);
	image_build(path, &b);
	ck_assert_uint_eq(a.len, b.len);
	ck_assert_int_eq(memcmp(a.tar, b.tar, a.len), 0);
	ck_assert_str_eq(a.digest, b.digest);
	/* The digest is SHA-256 of exactly the tar's bytes. */
	sha256_hex(a.tar, a.len, hex);
	ck_assert_int_eq(strncmp(a.digest, "sha256:", 7), 0);
	ck_assert_str_eq(a.digest + 7, hex);
	ck_assert_uint_eq(strlen(a.digest), PROXYIMAGE_DIGEST_BYTES - 1);
	ck_assert_uint_eq(a.len % TAR_BLOCK, 0);
	free(a.tar);
	free(b.tar);
}
END_TEST

START_TEST(test_other_binary_other_digest)
{
	_cleanup_free_ char *p1 = file_make("one", "proxy one", 9, 0755);
	_cleanup_free_ char *p2 = file_make("two", "proxy two", 9, 0755);
	struct image a, b;

	image_build(p1, &a);
	image_build(p2, &b);
	ck_assert_uint_eq(a.len, b.len);
	ck_assert_str_ne(a.digest, b.digest);
	free(a.tar);
	free(b.tar);
}
END_TEST

/* ---- the entries, read back with libarchive ------------------------------------------ */

struct want_entry {
	const char *name;
	mode_t type;
	mode_t perm;
	const char *data;       /* NULL: the binary */
};

static const struct want_entry want_entries[] = {
	{ "etc/", AE_IFDIR, 0755, "" },
	{ "etc/passwd", AE_IFREG, 0644, PASSWD },
	{ "etc/group", AE_IFREG, 0644, GROUP },
	{ "maf-sandbox-egress-proxy", AE_IFREG, 0555, NULL },
};

static void entry_check(struct archive *a, struct archive_entry *e, const struct want_entry *w,
			const char *binary, size_t binary_len)
{
	const char *data = w->data ? w->data : binary;
	size_t len = w->data ? strlen(w->data) : binary_len;
	_cleanup_free_ char *got = xmalloc(len + 1);

	ck_assert_str_eq(archive_entry_pathname(e), w->name);
	ck_assert_int_eq(archive_entry_filetype(e), w->type);
	ck_assert_int_eq(archive_entry_perm(e), w->perm);
	ck_assert_int_eq(archive_entry_uid(e), 0);
	ck_assert_int_eq(archive_entry_gid(e), 0);
	ck_assert_msg(!archive_entry_uname(e) || !*archive_entry_uname(e), "uname set");
	ck_assert_msg(!archive_entry_gname(e) || !*archive_entry_gname(e), "gname set");
	ck_assert_int_eq(archive_entry_mtime(e), 0);
	ck_assert_int_eq(archive_entry_mtime_nsec(e), 0);
	ck_assert(!archive_entry_atime_is_set(e));
	ck_assert(!archive_entry_ctime_is_set(e));
	ck_assert(!archive_entry_birthtime_is_set(e));
	ck_assert_int_eq(archive_entry_xattr_count(e), 0);
	ck_assert_int_eq(archive_entry_size(e), (la_int64_t)len);
	ck_assert_int_eq(archive_read_data(a, got, len + 1), (la_ssize_t)len);
	ck_assert_int_eq(memcmp(got, data, len), 0);
}

START_TEST(test_entries)
{
	static const char bin[] = "#!fake\nthe proxy's bytes\n";
	_cleanup_free_ char *path = file_make("proxy", bin, sizeof(bin) - 1, 0711);
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	struct image img;

	image_build(path, &img);
	ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_open_memory(a, img.tar, img.len), ARCHIVE_OK);
	for (size_t i = 0; i < ELEMENTSOF(want_entries); i++) {
		ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_OK);
		entry_check(a, e, &want_entries[i], bin, sizeof(bin) - 1);
		/* Plain ustar: no PAX or GNU extension anywhere. */
		ck_assert_int_eq(archive_format(a), ARCHIVE_FORMAT_TAR_USTAR);
	}
	ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_EOF);
	ck_assert_int_eq(archive_filter_code(a, 0), ARCHIVE_FILTER_NONE);
	archive_read_free(a);
	free(img.tar);
}
END_TEST

/* ---- the image archive (docker save format) ---------------------------------------- */

/* Reads every entry of an archive into names[i] / data[i] (malloc'd). */
static size_t archive_slurp(const void *buf, size_t len, char *names[4], char *data[4], size_t sizes[4])
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	size_t n = 0;

	ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	ck_assert_int_eq(archive_read_open_memory(a, buf, len), ARCHIVE_OK);
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		ck_assert_uint_lt(n, 4);
		names[n] = xstrdup(archive_entry_pathname(e));
		sizes[n] = (size_t)archive_entry_size(e);
		data[n] = xmalloc(sizes[n] + 1);
		ck_assert_int_eq(archive_read_data(a, data[n], sizes[n]), (la_ssize_t)sizes[n]);
		data[n][sizes[n]] = '\0';
		ck_assert_int_eq(archive_entry_uid(e), 0);
		ck_assert_int_eq(archive_entry_mtime(e), 0);
		n++;
	}
	archive_read_free(a);
	return n;
}

START_TEST(test_archive)
{
	_cleanup_free_ char *path = file_make("proxy", "\x7f" "ELF proxy bytes", 3000, 0755);
	_cleanup_free_ char *err = NULL;
	void *a1, *a2, *rootfs;
	size_t l1, l2, rootfs_len, sizes[4];
	char id1[PROXYIMAGE_DIGEST_BYTES], id2[PROXYIMAGE_DIGEST_BYTES], id3[PROXYIMAGE_DIGEST_BYTES];
	char layer[PROXYIMAGE_DIGEST_BYTES], hex[SHA256_HEX_BYTES], *names[4], *data[4];
	json_t *config, *manifest;
	size_t n;

	ck_assert_int_eq(proxyimage_archive(path, "amd64", "maf-sandbox-egress-proxy:1.0", &a1, &l1, id1, &err), 0);
	ck_assert_int_eq(proxyimage_archive(path, "amd64", "maf-sandbox-egress-proxy:1.0", &a2, &l2, id2, &err), 0);
	/* The same binary: the same bytes, the same image ID. */
	ck_assert_uint_eq(l1, l2);
	ck_assert_int_eq(memcmp(a1, a2, l1), 0);
	ck_assert_str_eq(id1, id2);
	n = archive_slurp(a1, l1, names, data, sizes);
	ck_assert_uint_eq(n, 3);
	/* The ID is the SHA-256 of the config entry, which is named by it. */
	sha256_hex(data[0], sizes[0], hex);
	ck_assert_str_eq(id1 + strlen(PROXYIMAGE_DIGEST_PREFIX), hex);
	ck_assert_int_eq(strncmp(names[0], hex, SHA256_HEX_BYTES - 1), 0);
	ck_assert_str_eq(names[0] + SHA256_HEX_BYTES - 1, ".json");
	config = json_loads(data[0], 0, NULL);
	ck_assert_ptr_nonnull(config);
	ck_assert_str_eq(json_string_value(json_object_get(config, "architecture")), "amd64");
	ck_assert_str_eq(json_string_value(json_object_get(config, "created")), "1970-01-01T00:00:00Z");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(config, "config"),
				"Entrypoint"), 0)), PROXYIMAGE_ENTRYPOINT);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(config, "config"), "User")),
			 "65532:65532");
	/* The layer is the rootfs tar, and the config names its digest. */
	ck_assert_str_eq(names[1], PROXYIMAGE_LAYER_NAME);
	ck_assert_int_eq(proxyimage_build(path, &rootfs, &rootfs_len, layer, &err), 0);
	ck_assert_uint_eq(sizes[1], rootfs_len);
	ck_assert_int_eq(memcmp(data[1], rootfs, rootfs_len), 0);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(config, "rootfs"),
				"diff_ids"), 0)), layer);
	ck_assert_str_eq(names[2], "manifest.json");
	manifest = json_loads(data[2], 0, NULL);
	ck_assert_ptr_nonnull(manifest);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(manifest, 0), "Config")), names[0]);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_array_get(manifest, 0),
				"RepoTags"), 0)), "maf-sandbox-egress-proxy:1.0");
	/* Another architecture is another image. */
	free(a2);
	ck_assert_int_eq(proxyimage_archive(path, "arm64", "maf-sandbox-egress-proxy:1.0", &a2, &l2, id3, &err), 0);
	ck_assert_str_ne(id1, id3);
	free(a2);
	/* Refusals. */
	ck_assert_int_eq(proxyimage_archive(path, "AMD64\"", "r:1", &a2, &l2, id3, &err), -EINVAL);
	free(err);
	err = NULL;
	ck_assert_int_eq(proxyimage_archive(path, "amd64", "r:1\"]", &a2, &l2, id3, &err), -EINVAL);
	json_decref(config);
	json_decref(manifest);
	for (size_t i = 0; i < n; i++) {
		free(names[i]);
		free(data[i]);
	}
	free(rootfs);
	free(a1);
}
END_TEST

/* The passwd and group lines agree with the exported ids. */
START_TEST(test_constants)
{
	_cleanup_free_ char *pw = xasprintf("msb-proxy:x:%d:%d:", PROXYIMAGE_UID, PROXYIMAGE_GID);
	_cleanup_free_ char *gr = xasprintf("msb-proxy:x:%d:", PROXYIMAGE_GID);

	ck_assert_ptr_nonnull(strstr(PASSWD, pw));
	ck_assert_ptr_nonnull(strstr(GROUP, gr));
	ck_assert_str_eq(PROXYIMAGE_ENTRYPOINT, "/maf-sandbox-egress-proxy");
	ck_assert_str_eq(PROXYIMAGE_REPO, "maf-sandbox-egress-proxy");
	ck_assert_uint_eq(PROXYIMAGE_MAX_BINARY, 16u * 1024 * 1024);
}
END_TEST

/* The limit is inclusive. */
START_TEST(test_largest_binary)
{
	_cleanup_free_ char *path = file_sparse("big", PROXYIMAGE_MAX_BINARY);
	struct image img;

	image_build(path, &img);
	ck_assert_uint_gt(img.len, PROXYIMAGE_MAX_BINARY);
	ck_assert_uint_le(img.len, PROXYIMAGE_MAX_TAR);
	free(img.tar);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------ */

static void refused(const char *path, int want, const char *err_part)
{
	_cleanup_free_ char *err = NULL;
	void *tar = (void *)"untouched";
	size_t len = 7;
	char digest[PROXYIMAGE_DIGEST_BYTES] = "untouched";
	int r = proxyimage_build(path, &tar, &len, digest, &err);

	ck_assert_msg(r == want, "%s: %d, want %d (%s)", path, r, want, err);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, path) && strstr(err, err_part), "'%s' lacks the path or '%s'",
		      err, err_part);
	ck_assert_str_eq(tar, "untouched");
	ck_assert_uint_eq(len, 7);
	ck_assert_str_eq(digest, "untouched");
}

START_TEST(test_refuse_missing)
{
	_cleanup_free_ char *path = path_of("absent");

	refused(path, -ENOENT, "cannot open");
}
END_TEST

START_TEST(test_refuse_directory)
{
	_cleanup_free_ char *path = path_of("dir");

	ck_assert_int_eq(mkdir(path, 0755), 0);
	refused(path, -EINVAL, "not a regular file");
}
END_TEST

/* A FIFO is refused, not waited on for a writer that never comes. */
START_TEST(test_refuse_fifo)
{
	_cleanup_free_ char *path = path_of("fifo");

	ck_assert_int_eq(mkfifo(path, 0755), 0);
	refused(path, -EINVAL, "not a regular file");
}
END_TEST

START_TEST(test_refuse_too_big)
{
	_cleanup_free_ char *path = file_sparse("huge", (off_t)PROXYIMAGE_MAX_BINARY + 1);

	refused(path, -EFBIG, "limit");
}
END_TEST

START_TEST(test_refuse_not_executable)
{
	_cleanup_free_ char *path = file_make("noexec", "bytes", 5, 0644);

	refused(path, -EACCES, "not executable");
}
END_TEST

static Suite *proxyimage_suite(void)
{
	Suite *s = suite_create("proxyimage");
	TCase *tc;

	tc = tcase_create("deterministic");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_other_binary_other_digest);
	suite_add_tcase(s, tc);

	tc = tcase_create("entries");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entries);
	tcase_add_test(tc, test_archive);
	tcase_add_test(tc, test_constants);
	tcase_add_test(tc, test_largest_binary);
	suite_add_tcase(s, tc);

	tc = tcase_create("refusals");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_refuse_missing);
	tcase_add_test(tc, test_refuse_directory);
	tcase_add_test(tc, test_refuse_fifo);
	tcase_add_test(tc, test_refuse_too_big);
	tcase_add_test(tc, test_refuse_not_executable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(proxyimage_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
