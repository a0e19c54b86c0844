/* startup.c — the start-up checks --check-config shares (startup.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "hostlock.h"
#include "plane_local.h"
#include "startup.h"
#include "xmalloc.h"

/* files.plane: local when the kernel and the endpoint allow it (each
 * sandbox must still let its init be pinned, fileop.h), else archive;
 * "local" that cannot be served is refused. */
static int startup_plane(const struct msbd_config *cfg, struct msbd_startup *s, char **reterr_message)
{
	const char *want = cfg->files_plane, *why = NULL;

	s->plane_local = false;
	if (strcmp(want, "archive") == 0) {
		s->plane_reason = "files.plane is archive";
		return 0;
	}
	if (s->endpoint->kind != ENGINE_ENDPOINT_UNIX)
		why = "the engine is not on a local unix socket";
	else if (plocal_available(&why) == 0) {
		s->plane_local = true;
		s->plane_reason = NULL;
		return 0;
	}
	if (strcmp(want, "local") == 0) {
		*reterr_message = xasprintf("files.plane is local, but %s (set files.plane = auto or archive)",
					    why);
		return -EINVAL;
	}
	s->plane_reason = why;
	return 0;
}

int msbd_startup_check(const struct msbd_config *cfg, struct msbd_startup *ret, char **reterr_message)
{
	struct msbd_startup s = { 0 };
	char *err = NULL;
	int r;

	/* Without it a freeze of ours could be lifted by another daemon's start,
	 * and ours could lift theirs: a daemon that cannot keep its freezes
	 * apart does not run. */
	r = hostlock_open(cfg->freeze_lock_file, &s.hostlock, &err);
	if (r < 0) {
		*reterr_message = xasprintf("cannot open the freeze lock file (freeze.lock_file): %s", err);
		free(err);
		return r;
	}
	r = engine_endpoint_resolve(cfg->engine_host, &s.endpoint, &err);
	if (r < 0) {
		*reterr_message = xasprintf("cannot resolve the Docker endpoint: %s", err);
		free(err);
		msbd_startup_clear(&s);
		return r;
	}
	r = startup_plane(cfg, &s, reterr_message);
	if (r < 0) {
		msbd_startup_clear(&s);
		return r;
	}
	*ret = s;
	return 0;
}

void msbd_startup_clear(struct msbd_startup *s)
{
	s->endpoint = engine_endpoint_free(s->endpoint);
	s->hostlock = hostlock_free(s->hostlock);
	s->plane_local = false;
	s->plane_reason = NULL;
}
