/* base64.c — strict RFC 4648 §4 base64 (see base64.h). */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>

#include "base64.h"
#include "cleanup.h"
#include "xmalloc.h"

static const char b64_alphabet[64] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t msb_base64_encoded_len(size_t n)
{
	assert(n <= MSB_BASE64_ENCODE_MAX);
	return (n + 2) / 3 * 4;
}

size_t msb_base64_decoded_max(size_t len)
{
	return len / 4 * 3 + (len % 4 ? 3 : 0);
}

/* Encodes 1..3 bytes as one padded quantum. */
static void encode_quantum(const uint8_t *in, size_t n, char *out)
{
	uint32_t bits = (uint32_t)in[0] << 16;

	if (n > 1)
		bits |= (uint32_t)in[1] << 8;
	if (n > 2)
		bits |= in[2];
	out[0] = b64_alphabet[bits >> 18];
	out[1] = b64_alphabet[(bits >> 12) & 0x3f];
	out[2] = n > 1 ? b64_alphabet[(bits >> 6) & 0x3f] : '=';
	out[3] = n > 2 ? b64_alphabet[bits & 0x3f] : '=';
}

char *msb_base64_encode(const void *data, size_t len, size_t *ret_len)
{
	const uint8_t *in = data;
	size_t n = msb_base64_encoded_len(len), o = 0;
	char *out = xmalloc(n + 1);

	size_t i = 0;

	for (; i + 3 <= len; i += 3, o += 4) {
		uint32_t bits = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

		out[o] = b64_alphabet[bits >> 18];
		out[o + 1] = b64_alphabet[(bits >> 12) & 0x3f];
		out[o + 2] = b64_alphabet[(bits >> 6) & 0x3f];
		out[o + 3] = b64_alphabet[bits & 0x3f];
	}
	if (i < len) {
		encode_quantum(in + i, len - i, out + o);
		o += 4;
	}
	assert(o == n);
	out[n] = '\0';
	if (ret_len)
		*ret_len = n;
	return out;
}

/* Each byte's value in the alphabet, -1 outside it. */
static const int8_t b64_values[256] = {
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1, -1, 63,
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
	-1,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
	15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
	-1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
	41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

static int b64_value(unsigned char c)
{
	return b64_values[c];
}

/* One 4-character quantum; last says padding is allowed ("xx==" or "xxx=").
 * Returns the bytes written (1..3) or -EINVAL. */
static int decode_quantum(const char *q, bool last, uint8_t *out)
{
	uint32_t bits = 0;
	int pad = 0, v;

	for (int i = 0; i < 4; i++) {
		if (q[i] == '=' && last && i >= 2) {
			pad++;
			continue;
		}
		if (pad)
			return -EINVAL;   /* a character after '=' */
		v = b64_value((unsigned char)q[i]);
		if (v < 0)
			return -EINVAL;   /* outside the alphabet: whitespace, NUL, '-', '_' ... */
		bits |= (uint32_t)v << (18 - 6 * i);
	}
	/* Canonical: the bits the padding leaves over must be zero. */
	if ((pad == 1 && (bits & 0xff)) || (pad == 2 && (bits & 0xffff)))
		return -EINVAL;
	out[0] = bits >> 16;
	out[1] = (bits >> 8) & 0xff;
	out[2] = bits & 0xff;
	return 3 - pad;
}

int msb_base64_decode(const char *s, size_t len, uint8_t **ret, size_t *ret_len)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t n = 0;

	if (len % 4)
		return -EINVAL;
	buf = xmalloc(msb_base64_decoded_max(len));
	/* Every quantum but the last has no padding: four table lookups, the
	 * sign bit of their OR says whether one was outside the alphabet. */
	for (size_t i = 0; i + 4 < len; i += 4, n += 3) {
		const unsigned char *q = (const unsigned char *)s + i;
		int32_t a = b64_values[q[0]], b = b64_values[q[1]], c = b64_values[q[2]], d = b64_values[q[3]];
		uint32_t bits;

		if ((a | b | c | d) < 0)
			return -EINVAL;   /* outside the alphabet, '=' included */
		bits = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
		buf[n] = bits >> 16;
		buf[n + 1] = (bits >> 8) & 0xff;
		buf[n + 2] = bits & 0xff;
	}
	if (len > 0) {
		int k = decode_quantum(s + len - 4, true, buf + n);

		if (k < 0)
			return k;
		n += (size_t)k;
	}
	*ret = TAKE_PTR(buf);
	*ret_len = n;
	return 0;
}

json_t *msb_base64_json(const void *data, size_t len)
{
	size_t n;
	char *s = msb_base64_encode(data, len, &n);
	json_t *j = json_stringn_nocheck(s, n);

	free(s);
	return j;
}
