/* hostile_keys.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_keys_tcase(void)
{
	TCase *tc = tcase_create("keys");

	tcase_set_timeout(tc, 300);
	return tc;
}
