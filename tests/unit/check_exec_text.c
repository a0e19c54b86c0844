/* check_exec_text.c — sandbox.exec's pure parts: the UTF-8 text views. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "m_exec.h"

struct text_row {
	const char *in;
	size_t in_len;
	const char *want;      /* UTF-8, NUL-terminated */
};

#define R(in, want) { in, sizeof(in) - 1, want }
#define FFFD "\xef\xbf\xbd"

static const struct text_row text_rows[] = {
	R("", ""),
	R("plain ascii\n", "plain ascii\n"),
	R("na\xc3\xafve", "na\xc3\xafve"),                         /* 2-byte */
	R("\xe2\x86\x92", "\xe2\x86\x92"),                          /* 3-byte */
	R("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"),                  /* 4-byte */
	R("\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"),                  /* U+10FFFF */
	R("a\0b", "a" FFFD "b"),                                    /* NUL never in a text view */
	R("\xff\xfe", FFFD FFFD),                                   /* never valid */
	R("\xc0\xaf", FFFD FFFD),                                   /* overlong '/' */
	R("\xe0\x80\xaf", FFFD FFFD FFFD),                          /* overlong, 3 bytes */
	R("\xed\xa0\x80", FFFD FFFD FFFD),                          /* a surrogate */
	R("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD),                 /* over U+10FFFF */
	R("\xe2\x86", FFFD FFFD),                                   /* cut short at the end */
	R("\xe2x\x86", FFFD "x" FFFD),                              /* cut short inside */
	R("ok\x80", "ok" FFFD),                                     /* a lone continuation */
};

START_TEST(test_text_view)
{
	const struct text_row *row = &text_rows[_i];
	json_t *j = m_exec_text_view((const uint8_t *)row->in, row->in_len);

	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(json_string_length(j), strlen(row->want));
	ck_assert_mem_eq(json_string_value(j), row->want, strlen(row->want));
	json_decref(j);
}
END_TEST

/* Every byte value: the view is valid UTF-8 JSON text with no NUL. */
START_TEST(test_text_view_all_bytes)
{
	uint8_t all[256];
	json_t *j;
	char *dumped;

	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	j = m_exec_text_view(all, sizeof(all));
	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(strlen(json_string_value(j)), json_string_length(j));
	dumped = json_dumps(j, JSON_ENCODE_ANY);
	ck_assert_ptr_nonnull(dumped);
	ck_assert_ptr_null(strstr(dumped, "\\u0000"));
	free(dumped);
	json_decref(j);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("exec");
	TCase *tc = tcase_create("text_view");
	SRunner *sr;
	int failed;

	tcase_add_loop_test(tc, test_text_view, 0, (int)(sizeof(text_rows) / sizeof(text_rows[0])));
	tcase_add_test(tc, test_text_view_all_bytes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
