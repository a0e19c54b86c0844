/* check_base64.c — the strict RFC 4648 codec (proto/base64.[ch]).
 *
 * The encoder always pads; the decoder takes exactly the encoder's output:
 * standard alphabet, padding required, canonical bits, no whitespace, no NUL. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "cleanup.h"

#define ALPHABET "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
/* Lengths 0..LEN_MAX are round-tripped one by one. */
#define LEN_MAX 10
/* Sentinels: a refused decode must not write its out-parameters. */
#define SENTINEL_LEN ((size_t)0x5a5a)
static uint8_t sentinel_byte;

struct bytes {
	const char *p;
	size_t n;
};
#define B(lit) { lit, sizeof(lit) - 1 }

/* Decodes and checks the result equals want. */
static void assert_decodes(struct bytes in, struct bytes want)
{
	_cleanup_free_ uint8_t *out = NULL;
	size_t n = SENTINEL_LEN;
	int rc = msb_base64_decode(in.p, in.n, &out, &n);

	ck_assert_msg(rc == 0, "decode of \"%.*s\" failed: %d", (int)in.n, in.p, rc);
	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(n, want.n);
	ck_assert_uint_le(n, msb_base64_decoded_max(in.n));
	ck_assert(memcmp(out, want.p, n) == 0);
}

/* Decodes and checks it is refused with -EINVAL, outputs untouched. */
static void assert_refused(struct bytes in)
{
	uint8_t *out = &sentinel_byte;
	size_t n = SENTINEL_LEN;
	int rc = msb_base64_decode(in.p, in.n, &out, &n);

	ck_assert_msg(rc == -EINVAL, "decode of %zu bytes \"%.*s\" gave %d, want -EINVAL",
		      in.n, (int)in.n, in.p, rc);
	ck_assert_ptr_eq(out, &sentinel_byte);
	ck_assert_uint_eq(n, SENTINEL_LEN);
}

/* Encodes and checks the result, its length and the NUL. */
static void assert_encodes(struct bytes in, const char *want)
{
	size_t n = SENTINEL_LEN;
	_cleanup_free_ char *out = msb_base64_encode(in.p, in.n, &n);

	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, want);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_uint_eq(msb_base64_encoded_len(in.n), strlen(want));
}

/* ---- RFC 4648 §10 vectors, both ways ------------------------------------- */

struct vector_row {
	struct bytes raw;
	const char *b64;
};

static const struct vector_row vector_rows[] = {
	{ B(""), "" },
	{ B("f"), "Zg==" },
	{ B("fo"), "Zm8=" },
	{ B("foo"), "Zm9v" },
	{ B("foob"), "Zm9vYg==" },
	{ B("fooba"), "Zm9vYmE=" },
	{ B("foobar"), "Zm9vYmFy" },
	/* The two characters past the letters and digits: '+' is 62, '/' is 63. */
	{ B("\xfb\xef\xff"), "++//" },
	{ B("\xff"), "/w==" },
	{ B("\xfb\xf0"), "+/A=" },
	{ B("\0"), "AA==" },
	{ B("\0\0\0"), "AAAA" },
	{ B("\x00\x10\x83\x10\x51\x87\x20\x92\x8b\x30\xd3\x8f\x41\x14\x93\x51\x55\x97"
	    "\x61\x96\x9b\x71\xd7\x9f\x82\x18\xa3\x92\x59\xa7\xa2\x9a\xab\xb2\xdb\xaf"
	    "\xc3\x1c\xb3\xd3\x5d\xb7\xe3\x9e\xbb\xf3\xdf\xbf"), ALPHABET },
};

START_TEST(test_vector_encode)
{
	assert_encodes(vector_rows[_i].raw, vector_rows[_i].b64);
}
END_TEST

START_TEST(test_vector_decode)
{
	const char *s = vector_rows[_i].b64;

	assert_decodes((struct bytes){ s, strlen(s) }, vector_rows[_i].raw);
}
END_TEST

START_TEST(test_encode_ret_len_optional)
{
	_cleanup_free_ char *out = msb_base64_encode("foob", 4, NULL);

	ck_assert_str_eq(out, "Zm9vYg==");
}
END_TEST

START_TEST(test_encode_empty_null_data)
{
	size_t n = SENTINEL_LEN;
	_cleanup_free_ char *out = msb_base64_encode(NULL, 0, &n);

	ck_assert_ptr_nonnull(out);
	ck_assert_str_eq(out, "");
	ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_decode_empty)
{
	uint8_t *out = NULL;
	size_t n = SENTINEL_LEN;

	ck_assert_int_eq(msb_base64_decode("", 0, &out, &n), 0);
	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(n, 0);
	free(out);
}
END_TEST

/* The decoder reads s[0..len) only: what follows is not looked at. */
START_TEST(test_decode_honours_len)
{
	assert_decodes((struct bytes){ "Zm9vYmFy", 4 }, (struct bytes)B("foo"));
	assert_decodes((struct bytes){ "Zm9v!!!!", 4 }, (struct bytes)B("foo"));
}
END_TEST

/* ---- round trips ----------------------------------------------------------- */

/* The JSON string form is the same encoding, NUL bytes of the data included. */
START_TEST(test_json_form)
{
	static const uint8_t data[] = { 'a', 0, 0xff, 'b' };
	json_t *j = msb_base64_json(data, sizeof(data));

	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(j), "YQD/Yg==");
	json_decref(j);
	j = msb_base64_json(data, 0);
	ck_assert_str_eq(json_string_value(j), "");
	json_decref(j);
}
END_TEST

START_TEST(test_roundtrip_all_bytes)
{
	uint8_t raw[256];
	_cleanup_free_ char *enc = NULL;
	_cleanup_free_ uint8_t *dec = NULL;
	size_t enc_len, dec_len;

	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)i;
	enc = msb_base64_encode(raw, sizeof(raw), &enc_len);
	ck_assert_uint_eq(enc_len, msb_base64_encoded_len(sizeof(raw)));
	ck_assert_uint_eq(enc_len, 344);    /* ceil(256 / 3) * 4 */
	ck_assert_uint_eq(strspn(enc, ALPHABET), 342);
	ck_assert_str_eq(enc + 342, "==");  /* 256 = 85 * 3 + 1 */
	ck_assert_int_eq(msb_base64_decode(enc, enc_len, &dec, &dec_len), 0);
	ck_assert_uint_eq(dec_len, sizeof(raw));
	ck_assert(memcmp(dec, raw, sizeof(raw)) == 0);
}
END_TEST

/* Each byte value alone, and at each position of a 3-byte group. */
START_TEST(test_roundtrip_each_byte)
{
	for (size_t len = 1; len <= 3; len++)
		for (size_t pos = 0; pos < len; pos++) {
			uint8_t raw[3] = { 0x55, 0xaa, 0x33 };
			_cleanup_free_ char *enc = NULL;
			size_t enc_len;

			raw[pos] = (uint8_t)_i;
			enc = msb_base64_encode(raw, len, &enc_len);
			assert_decodes((struct bytes){ enc, enc_len },
				       (struct bytes){ (const char *)raw, len });
		}
}
END_TEST

START_TEST(test_roundtrip_lengths)
{
	uint8_t raw[LEN_MAX];
	size_t len = (size_t)_i, enc_len;
	_cleanup_free_ char *enc = NULL;

	for (size_t i = 0; i < len; i++)
		raw[i] = (uint8_t)(0xf7 * (i + 1) + len);
	enc = msb_base64_encode(raw, len, &enc_len);
	ck_assert_uint_eq(enc_len, (len + 2) / 3 * 4);
	ck_assert_uint_eq(strlen(enc), enc_len);
	ck_assert_uint_eq(enc_len % 4, 0);
	ck_assert_uint_eq(strspn(enc, ALPHABET), enc_len - (3 - len % 3) % 3);
	ck_assert_uint_ge(msb_base64_decoded_max(enc_len), len);
	assert_decodes((struct bytes){ enc, enc_len }, (struct bytes){ (const char *)raw, len });
}
END_TEST

struct size_row {
	size_t n;
	size_t encoded;   /* msb_base64_encoded_len(n) */
	size_t max;       /* msb_base64_decoded_max(n) */
};

static const struct size_row size_rows[] = {
	{ 0, 0, 0 }, { 1, 4, 3 }, { 2, 4, 3 }, { 3, 4, 3 }, { 4, 8, 3 }, { 5, 8, 6 },
	{ 6, 8, 6 }, { 7, 12, 6 }, { 8, 12, 6 }, { 9, 12, 9 }, { 10, 16, 9 },
	{ 64 * 1024 * 1024, 89478488, 50331648 },
};

START_TEST(test_sizes)
{
	ck_assert_uint_eq(msb_base64_encoded_len(size_rows[_i].n), size_rows[_i].encoded);
	ck_assert_uint_eq(msb_base64_decoded_max(size_rows[_i].n), size_rows[_i].max);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------- */

/* Every byte value as the first character of an otherwise valid quantum:
 * accepted exactly when it is in the standard alphabet. */
START_TEST(test_alphabet_each_byte)
{
	char q[4] = { (char)_i, 'A', 'A', 'A' };
	const char *at = _i ? memchr(ALPHABET, _i, 64) : NULL;

	if (at) {
		uint8_t want[3] = { (uint8_t)((at - ALPHABET) << 2), 0, 0 };

		assert_decodes((struct bytes){ q, 4 }, (struct bytes){ (const char *)want, 3 });
	} else {
		assert_refused((struct bytes){ q, 4 });
	}
}
END_TEST

static const struct bytes bad_rows[] = {
	/* outside the alphabet (base64url, punctuation, high bytes) */
	B("Zm9-"), B("Zm9_"), B("Zm9v-_-_"), B("Zm9!"), B("Zm\x80v"), B("Zm.v"),
	/* missing padding */
	B("Z"), B("Zg"), B("Zg="), B("Zm8"), B("Zm9vYg"), B("Zm9vYmE"), B("Zm9vY"),
	/* ... also when valid characters follow (the decoder must not read past len) */
	{ "Zm9vYmFy", 6 }, { "Zm9vYmFy", 5 }, { "Zm9vYmFy", 7 }, { "Zg==", 2 }, { "Zm8=", 3 },
	/* extra or misplaced padding */
	B("Zg==="), B("Zg===="), B("Zm8=="), B("Zm9v===="), B("Zm9v="), B("Z==="),
	B("===="), B("=Zg="), B("Zg=a"), B("Z=g="), B("Zg==Zg=="), B("Zm8=Zm9v"),
	B("Zm9v=AAA"),
	/* non-canonical: the bits after the last byte are not zero */
	B("Zh=="), B("Zv=="), B("Zm9="), B("Zm9vYh=="), B("Zm9vYmF="),
	/* whitespace anywhere */
	B(" Zg="), B("Zg== "), B("Zm9v\nZg=="), B("Zm9v\r\nZg=="), B("\tZm9"), B("Zm 9"),
	B("Zm9vYmFy\n"), B("Zm9v Zm9v"),
	/* embedded NUL */
	B("Zm9v\0\0\0\0"), B("Z\0=="), B("Zg=\0"), B("\0\0\0\0"), B("Zm\0v"),
};

START_TEST(test_refused)
{
	assert_refused(bad_rows[_i]);
}
END_TEST

/* One byte "xx==": of the second character's 6 bits only the top 2 carry
 * data, so 16 characters fit each first character and 48 do not. Two bytes
 * "xxx=": the third character's low 2 bits must be zero. */
START_TEST(test_non_canonical_exhaustive)
{
	char one[5] = "AA==", two[5] = "AAA=";
	int v = (int)_i;

	one[1] = ALPHABET[v];
	two[2] = ALPHABET[v];
	if (v & 0x0f)
		assert_refused((struct bytes){ one, 4 });
	else
		assert_decodes((struct bytes){ one, 4 }, (struct bytes){ (const char[]){ (char)(v >> 4) }, 1 });
	if (v & 0x03)
		assert_refused((struct bytes){ two, 4 });
	else
		assert_decodes((struct bytes){ two, 4 },
			       (struct bytes){ (const char[]){ 0, (char)(v >> 2) }, 2 });
}
END_TEST

static Suite *base64_suite(void)
{
	Suite *s = suite_create("base64");
	TCase *tc;

	tc = tcase_create("rfc4648 vectors");
	tcase_add_loop_test(tc, test_vector_encode, 0, ELEMENTSOF(vector_rows));
	tcase_add_loop_test(tc, test_vector_decode, 0, ELEMENTSOF(vector_rows));
	tcase_add_test(tc, test_encode_ret_len_optional);
	tcase_add_test(tc, test_encode_empty_null_data);
	tcase_add_test(tc, test_decode_empty);
	tcase_add_test(tc, test_decode_honours_len);
	suite_add_tcase(s, tc);

	tc = tcase_create("round trip");
	tcase_add_test(tc, test_roundtrip_all_bytes);
	tcase_add_test(tc, test_json_form);
	tcase_add_loop_test(tc, test_roundtrip_each_byte, 0, 256);
	tcase_add_loop_test(tc, test_roundtrip_lengths, 0, LEN_MAX + 1);
	tcase_add_loop_test(tc, test_sizes, 0, ELEMENTSOF(size_rows));
	suite_add_tcase(s, tc);

	tc = tcase_create("strict decode");
	tcase_add_loop_test(tc, test_alphabet_each_byte, 0, 256);
	tcase_add_loop_test(tc, test_refused, 0, ELEMENTSOF(bad_rows));
	tcase_add_loop_test(tc, test_non_canonical_exhaustive, 0, 64);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(base64_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
