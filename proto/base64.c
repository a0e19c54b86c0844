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

	for (size_t i = 0; i < len; i += 3, o += 4)
		encode_quantum(in + i, len - i < 3 ? len - i : 3, out + o);
	assert(o == n);
	out[n] = '\0';
	if (ret_len)
		*ret_len = n;
	return out;
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
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
	for (size_t i = 0; i < len; i += 4) {
		int k = decode_quantum(s + i, i + 4 == len, buf + n);

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
