/* execend.h — ending what a command started, once its call is over (a
 * deadline, an output overflow, a cancel: PROTOCOL.md sandbox.exec, "What a
 * deadline kills"). The exec handler answers the call first; this runs on
 * its own afterwards.
 *
 * From the host when the domain can (domain.h exec_host_kill): the
 * container's inspect gives its init (pinned once, plane_local.h, to prove
 * it is this container's and seen from here), the exec's inspect its
 * process, then the container is frozen (freeze.h, the wait bounded by
 * EXECEND_FREEZE_WAIT_MS; refused or too long: scanned running) and
 * execkill.h selects and kills. Else, and whenever that cannot finish (no
 * init, a scan that fails or runs out of rounds, the exec's process
 * unknown), every guest process carrying the call's mark in its
 * environment (EXEC_MARK_NAME=token, which the run was given) is killed
 * from inside by a script run as root in the container. The sandbox stays.
 *
 * Each step logs as it goes ("exec in ID: …"); nothing is reported back
 * but the end. The daemon stopping (engine_free, freeze_table_free) ends
 * it quietly: its requests and its freeze claim fail -ECANCELED. */
#ifndef MSB_EXECEND_H
#define MSB_EXECEND_H

#include <stdint.h>

struct domain;

/* The mark in a run's environment, and its token's length (hex digits). */
#define EXEC_MARK_NAME  "MSB_EXEC_ID"
#define EXEC_TOKEN_HEX  32
/* The kill from the host waits at most this long for its freeze (file
 * calls ahead of it, exec starts of ours deferring it); then it scans the
 * container running. */
#define EXECEND_FREEZE_WAIT_MS 5000

/* What one run left behind (all borrowed for the call; copied). */
struct execend_target {
	const char *id;               /* the container (registry id) */
	const char *exec_id;          /* the engine's exec; NULL: unknown */
	const char *token;            /* the mark's value (EXEC_TOKEN_HEX hex) */
	unsigned long long since;     /* the run's start, clock ticks since boot (execkill.h) */
	uint64_t start_seq;           /* its place in the sandbox's exec_starts; 0: none */
};

/* The end is over (the kill done, given up, or the daemon stopping). */
typedef void execend_done_cb(void *arg);

/* Starts ending what t's run started. Returns 1: work is in flight, done
 * fires exactly once later (from the loop, or from the engine's and the
 * freeze table's teardown when the daemon stops); or 0: it is over already
 * (nothing could be started; what happened is logged) and done never
 * fires. */
int execend_start(struct domain *d, const struct execend_target *t, execend_done_cb *done, void *arg);

#endif
