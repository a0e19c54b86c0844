/* hostile_files.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_files_tcase(void)
{
	TCase *tc = tcase_create("files");

	tcase_set_timeout(tc, 300);
	return tc;
}
