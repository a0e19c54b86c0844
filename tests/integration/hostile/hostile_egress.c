/* hostile_egress.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_egress_tcase(void)
{
	TCase *tc = tcase_create("egress");

	tcase_set_timeout(tc, 300);
	return tc;
}
