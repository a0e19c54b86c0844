/* hostile.h — the hostile-tenant suite (integration 'hostile'): each
 * finding of the attack run, reproduced in miniature against a real daemon
 * and the real engine, and held. One file a group of findings; each adds
 * its test case to the suite through one constructor below.
 *
 * Shared by every file: the run's id (labels every sandbox of the run:
 * maf-sandbox.label.msb-it-run=<run_id>) and its busybox test image. Each
 * test starts its own daemon(s) on private sockets and stops them, and
 * main() removes every container of the run whatever failed. */
#ifndef MSB_HOSTILE_H
#define MSB_HOSTILE_H

#include <check.h>
#include <jansson.h>

#define HOSTILE_RUN_LABEL "msb-it-run"

extern char hostile_run_id[32];
extern char hostile_image[96];

/* A spec {kind: "k", image: hostile_image, labels: {msb-it-run: run_id}} (new ref). */
json_t *hostile_spec(void);

/* Findings 1, 2, 13: reply memory, per-uid fairness, frame stalls. */
TCase *hostile_server_tcase(void);
/* Finding 4 and the exec reply's size: JSON amplification, each output byte once. */
TCase *hostile_wire_tcase(void);
/* Finding 3: a guest's egress flood and the event loop. */
TCase *hostile_egress_tcase(void);
/* Findings 5, 7, 14 (working_directory): the exec kill, the guest's identity. */
TCase *hostile_exec_tcase(void);
/* Findings 6, 8, 9, 10, 14 (files): mounts, whole writes, temporaries, fd budget. */
TCase *hostile_files_tcase(void);
/* Findings 11, 12: keys per owner, no engine text on the wire. */
TCase *hostile_keys_tcase(void);

#endif
