/* proxyimage.h — the egress proxy's image (behaviour-docker §4.1): a
 * one-layer image the daemon loads with POST /images/load (engine-api §2.6),
 * built here from the proxy binary, config and all, so the same binary
 * always gives the same image ID (proxyimage_archive).
 *
 * The tar is deterministic: the same binary always gives the same bytes, so
 * its SHA-256 is the layer DiffID the engine reports in the image's
 * RootFS.Layers[0] after the import. That is how the daemon tells whether
 * an existing PROXYIMAGE_REPO image is current without importing again.
 *
 * Entries, in this order, all uid/gid 0, no user or group names, mtime 0,
 * no atime/ctime, no xattrs (plain ustar):
 *   etc/                         dir  0755
 *   etc/passwd                   file 0644  root and msb-proxy (PROXYIMAGE_UID)
 *   etc/group                    file 0644  root and msb-proxy (PROXYIMAGE_GID)
 *   maf-sandbox-egress-proxy     file 0555  the binary's bytes
 * The image runs PROXYIMAGE_ENTRYPOINT as PROXYIMAGE_UID:PROXYIMAGE_GID
 * (the caller passes both as import changes).
 *
 * Reads one file; no engine, no logging.
 *
 * Ownership: *rettar is malloc'd (free()), *reterr is malloc'd; ret_* are
 * written only on success, reterr only on failure. */
#ifndef MSB_PROXYIMAGE_H
#define MSB_PROXYIMAGE_H

#include <stddef.h>

#define PROXYIMAGE_REPO        "maf-sandbox-egress-proxy"
#define PROXYIMAGE_ENTRYPOINT  "/maf-sandbox-egress-proxy"
#define PROXYIMAGE_UID         65532
#define PROXYIMAGE_GID         65532
#define PROXYIMAGE_USER        "msb-proxy"
/* The proxy binary: at most this many bytes. */
#define PROXYIMAGE_MAX_BINARY  (16u * 1024 * 1024)
/* The tar: the binary plus headers, the two small files and the trailer. */
#define PROXYIMAGE_MAX_TAR     (PROXYIMAGE_MAX_BINARY + 64u * 1024)
/* "sha256:" + 64 lowercase hex + NUL. */
#define PROXYIMAGE_DIGEST_PREFIX "sha256:"
#define PROXYIMAGE_DIGEST_BYTES  (sizeof(PROXYIMAGE_DIGEST_PREFIX) - 1 + 64 + 1)

/* The rootfs tar of the binary at binary_path (followed if a symlink).
 * On success 0, *rettar and *retlen the tar and retdigest "sha256:<hex>" of
 * its bytes. Otherwise *reterr (naming the path) and:
 *   -errno from open/fstat/read (-ENOENT for a missing file),
 *   -EINVAL  not a regular file (a directory, a FIFO: never blocks),
 *   -EFBIG   over PROXYIMAGE_MAX_BINARY,
 *   -EACCES  no execute bit set,
 *   -EIO     the file changed size while read, or libarchive failed,
 *   -ENOMEM  a buffer could not be allocated. */
int proxyimage_build(const char *binary_path, void **rettar, size_t *retlen,
		     char retdigest[PROXYIMAGE_DIGEST_BYTES], char **reterr);

/* The image as `docker save` writes it, for POST /images/load:
 *   <config sha256>.json  the image config: fixed created time (the epoch),
 *                         Entrypoint PROXYIMAGE_ENTRYPOINT, User
 *                         PROXYIMAGE_UID:GID, ExposedPorts PROXYIMAGE_PORT,
 *                         architecture arch, diff_ids [the rootfs digest]
 *   layer.tar             the rootfs tar above
 *   manifest.json         [{Config, RepoTags [repo_tag], Layers [layer.tar]}]
 * every byte fixed by the binary, arch and repo_tag. retid = "sha256:" + the
 * config's SHA-256: the ID the engine gives the loaded image. arch (the
 * engine's Arch, e.g. "amd64") and repo_tag ("repo:tag") are checked: lower
 * case letters, digits and (for the tag) "._-:/+", bounded; -EINVAL
 * otherwise. Other errors as proxyimage_build. */
#define PROXYIMAGE_PORT          3128
#define PROXYIMAGE_ARCH_MAX      32
#define PROXYIMAGE_REPO_TAG_MAX  128
#define PROXYIMAGE_LAYER_NAME    "layer.tar"
#define PROXYIMAGE_MAX_ARCHIVE   (PROXYIMAGE_MAX_TAR + 64u * 1024)
int proxyimage_archive(const char *binary_path, const char *arch, const char *repo_tag, void **retarchive,
		       size_t *retlen, char retid[PROXYIMAGE_DIGEST_BYTES], char **reterr);

#endif
