/* check_sha256.c — SHA-256 against the FIPS 180-2 / NIST vectors, one shot,
 * incremental in uneven pieces, and the lowercase hex form. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"

#define MILLION 1000000

struct vector {
	const char *name;
	const char *input;      /* NULL: a million 'a' */
	const char *hex;
};

static const struct vector vectors[] = {
	{ "empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
	{ "abc", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
	{ "448 bits", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
	{ "896 bits",
	  "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
	  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
	{ "million a", NULL, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
	/* Padding edges: 55, 56 and 64 bytes. */
	{ "55 bytes", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
	{ "56 bytes", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
	{ "64 bytes", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
};

static char *vector_input(const struct vector *v, size_t *ret_len)
{
	char *p;

	if (v->input) {
		*ret_len = strlen(v->input);
		return strdup(v->input);
	}
	p = malloc(MILLION);
	ck_assert_ptr_nonnull(p);
	memset(p, 'a', MILLION);
	*ret_len = MILLION;
	return p;
}

static void to_hex(const uint8_t d[SHA256_DIGEST_BYTES], char out[SHA256_HEX_BYTES])
{
	for (unsigned i = 0; i < SHA256_DIGEST_BYTES; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

START_TEST(test_one_shot_hex)
{
	const struct vector *v = &vectors[_i];
	char hex[SHA256_HEX_BYTES];
	size_t len;
	char *in = vector_input(v, &len);

	memset(hex, 'X', sizeof(hex));
	sha256_hex(in, len, hex);
	ck_assert_msg(strcmp(hex, v->hex) == 0, "%s: got %s", v->name, hex);
	ck_assert_uint_eq(strlen(hex), 64);
	free(in);
}
END_TEST

START_TEST(test_one_shot_binary)
{
	const struct vector *v = &vectors[_i];
	uint8_t d[SHA256_DIGEST_BYTES];
	char hex[SHA256_HEX_BYTES];
	size_t len;
	char *in = vector_input(v, &len);

	sha256(in, len, d);
	to_hex(d, hex);
	ck_assert_msg(strcmp(hex, v->hex) == 0, "%s: got %s", v->name, hex);
	free(in);
}
END_TEST

/* Fed in pieces of 1, 3, 63, 64, 65 and 1000 bytes: same digest. */
START_TEST(test_incremental)
{
	static const size_t steps[] = { 1, 3, 63, 64, 65, 1000 };
	const struct vector *v = &vectors[_i];
	size_t len;
	char *in = vector_input(v, &len);

	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		struct sha256_ctx ctx;
		uint8_t d[SHA256_DIGEST_BYTES];
		char hex[SHA256_HEX_BYTES];

		sha256_init(&ctx);
		for (size_t off = 0; off < len; off += steps[s])
			sha256_update(&ctx, in + off, len - off < steps[s] ? len - off : steps[s]);
		sha256_final(&ctx, d);
		to_hex(d, hex);
		ck_assert_msg(strcmp(hex, v->hex) == 0, "%s step %zu: got %s", v->name, steps[s], hex);
	}
	free(in);
}
END_TEST

START_TEST(test_null_empty)
{
	char hex[SHA256_HEX_BYTES];

	sha256_hex(NULL, 0, hex);
	ck_assert_str_eq(hex, vectors[0].hex);
}
END_TEST

/* The digest Docker uses for a context directory is sha256-hex of the name. */
START_TEST(test_context_name)
{
	char hex[SHA256_HEX_BYTES];

	sha256_hex("default", 7, hex);
	ck_assert_str_eq(hex, "37a8eec1ce19687d132fe29051dca629d164e2c4958ba141d5f4133a33f0688f");
}
END_TEST

static Suite *sha256_suite(void)
{
	Suite *s = suite_create("sha256");
	TCase *tc = tcase_create("fips_vectors");
	int n = (int)(sizeof(vectors) / sizeof(vectors[0]));

	tcase_add_loop_test(tc, test_one_shot_hex, 0, n);
	tcase_add_loop_test(tc, test_one_shot_binary, 0, n);
	tcase_add_loop_test(tc, test_incremental, 0, n);
	suite_add_tcase(s, tc);
	tc = tcase_create("edges");
	tcase_add_test(tc, test_null_empty);
	tcase_add_test(tc, test_context_name);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sha256_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
