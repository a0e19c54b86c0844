/* base64.h — RFC 4648 §4 base64, standard alphabet, strict.
 *
 * Shared by the daemon (files.* content_b64, the engine's path stat header)
 * and the clients. The encoder always pads; the decoder accepts exactly what
 * the encoder produces and nothing else: the standard alphabet "A-Za-z0-9+/",
 * '=' padding required (length a multiple of 4; at most two '=' and only at
 * the very end), canonical (the bits the padding leaves over are zero), no
 * whitespace, no NUL, no base64url. Pure: no I/O, no logging.
 *
 * Ownership: msb_base64_encode and msb_base64_decode return malloc'd buffers
 * the caller frees with free(). Allocation aborts on OOM (xmalloc): callers
 * bound the sizes (frame limit, file ceiling) before calling. */
#ifndef MSB_BASE64_H
#define MSB_BASE64_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* Encoded length of n bytes (padded), without the NUL. n must be at most
 * MSB_BASE64_ENCODE_MAX (a caller's bug otherwise). */
#define MSB_BASE64_ENCODE_MAX (SIZE_MAX / 4 * 3 - 3)
size_t msb_base64_encoded_len(size_t n);

/* Encodes data[0..len) (data may be NULL when len is 0). Returns a malloc'd,
 * NUL-terminated string, never NULL; *ret_len (may be NULL) gets its length
 * without the NUL. */
char *msb_base64_encode(const void *data, size_t len, size_t *ret_len);

/* Most bytes len characters can decode to (len / 4 * 3, rounded up). */
size_t msb_base64_decoded_max(size_t len);

/* Strict decode of s[0..len) (see the top of this file). On success returns 0
 * and sets *ret (malloc'd, non-NULL even when empty; not NUL-terminated) and
 * *ret_len. On failure returns -EINVAL and leaves both untouched. */
int msb_base64_decode(const char *s, size_t len, uint8_t **ret, size_t *ret_len);

/* The encoding of data as a JSON string (new reference; base64 is ASCII, so
 * no second UTF-8 check is made). */
json_t *msb_base64_json(const void *data, size_t len);

#endif
