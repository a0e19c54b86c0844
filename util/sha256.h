/* sha256.h — a small self-contained SHA-256 (FIPS 180-4). Used for Docker
 * context directories (sha256-hex of the context name), container names and
 * label digests. No allocation, no I/O. */
#ifndef MSB_SHA256_H
#define MSB_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_BYTES 32
#define SHA256_HEX_BYTES    65  /* 64 lowercase hex digits and a NUL */

/* Incremental form: init, update any number of times, final. */
struct sha256_ctx {
	uint32_t h[8];
	uint64_t total;             /* bytes hashed so far */
	uint8_t block[64];
	size_t used;                /* bytes pending in block */
};

void sha256_init(struct sha256_ctx *ctx);
void sha256_update(struct sha256_ctx *ctx, const void *data, size_t len);
void sha256_final(struct sha256_ctx *ctx, uint8_t out[SHA256_DIGEST_BYTES]);

/* One shot: the digest of data[0..len). data may be NULL when len is 0. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_BYTES]);
/* The same digest as 64 lowercase hex digits, NUL-terminated. */
void sha256_hex(const void *data, size_t len, char out[SHA256_HEX_BYTES]);

#endif
