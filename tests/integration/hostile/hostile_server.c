/* hostile_server.c — see hostile.h. */
#include <check.h>

#include "harness.h"
#include "hostile.h"

TCase *hostile_server_tcase(void)
{
	TCase *tc = tcase_create("server");

	tcase_set_timeout(tc, 300);
	return tc;
}
