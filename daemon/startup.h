/* startup.h — the checks of a configuration that start-up makes beyond
 * config_validate(), in one place, so `maf-sandboxd --check-config` refuses
 * exactly what start-up refuses (issue 19):
 *
 *   - freeze.lock_file opens (created with its directory as start-up does)
 *     and takes open-file-description locks;
 *   - the Docker endpoint resolves (engine.host, DOCKER_HOST, the docker
 *     context; ssh://, fd://, npipe:// are refused: endpoint.h);
 *   - files.plane = local is servable (a local unix socket, root, openat2).
 *
 * What is left to start-up proper is taking resources (the listening
 * socket, the signal events), not judging the configuration. */
#ifndef MSB_STARTUP_H
#define MSB_STARTUP_H

#include <stdbool.h>

#include "config.h"

struct engine_endpoint;
struct hostlock;

struct msbd_startup {
	struct engine_endpoint *endpoint;   /* owned */
	struct hostlock *hostlock;          /* owned */
	bool plane_local;                   /* files.plane decided: local */
	const char *plane_reason;           /* static text: why archive, else NULL */
};

/* Runs every check on cfg (already config_validate()d). Returns 0 and fills
 * *ret (free with msbd_startup_clear), or a negative errno and
 * *reterr_message (malloc'd) naming the key and the problem; *ret is left
 * cleared then. */
int msbd_startup_check(const struct msbd_config *cfg, struct msbd_startup *ret, char **reterr_message);

/* Frees what s owns; NULL-safe members. */
void msbd_startup_clear(struct msbd_startup *s);

#endif
