/* check_hostile.c — main of the hostile-tenant suite (see hostile.h). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"

#define CLEANUP_TIMEOUT_S 120   /* hang guard */

char hostile_run_id[32];
char hostile_image[96];

json_t *hostile_spec(void)
{
	return json_pack("{s:s, s:s, s:{s:s}}", "kind", "k", "image", hostile_image, "labels",
			 HOSTILE_RUN_LABEL, hostile_run_id);
}

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile");

	suite_add_tcase(s, hostile_server_tcase());
	suite_add_tcase(s, hostile_wire_tcase());
	suite_add_tcase(s, hostile_egress_tcase());
	suite_add_tcase(s, hostile_exec_tcase());
	suite_add_tcase(s, hostile_files_tcase());
	suite_add_tcase(s, hostile_keys_tcase());
	return s;
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed = 1;

	snprintf(hostile_run_id, sizeof(hostile_run_id), "ith%d", (int)getpid());
	snprintf(hostile_image, sizeof(hostile_image), "msb-it-hostile:%s", hostile_run_id);
	if (harness_test_image(hostile_image)) {
		harness_run_dir_create();
		sr = srunner_create(hostile_suite());
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
		harness_run_dir_remove();
	}
	/* Whatever failed, nothing of this run stays (bounded: a hung engine must not hang CI). */
	engine_purge_label("maf-sandbox.label." HOSTILE_RUN_LABEL, hostile_run_id);
	out = sh_out("timeout %d docker rmi -f %s >/dev/null 2>&1; echo done", CLEANUP_TIMEOUT_S, hostile_image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
