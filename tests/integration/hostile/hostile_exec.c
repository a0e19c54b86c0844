/* hostile_exec.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_exec_tcase(void)
{
	TCase *tc = tcase_create("exec");

	tcase_set_timeout(tc, 300);
	return tc;
}
