/* proxyimage.h — the egress proxy's image (behaviour-docker §4.1): a
 * one-layer rootfs the daemon imports with POST /images/create?fromSrc=-
 * (engine-api §2.6), built here from the proxy binary.
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

#endif
