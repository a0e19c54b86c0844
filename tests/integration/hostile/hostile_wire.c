/* hostile_wire.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_wire_tcase(void)
{
	TCase *tc = tcase_create("wire");

	tcase_set_timeout(tc, 300);
	return tc;
}
