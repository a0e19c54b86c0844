/* errmap.h — layer 3 of STYLE G10: an engine request's outcome (-errno or an
 * HTTP status with Docker's {"message"}) becomes a struct msb_error. The
 * engine's own text goes to the log, never into the wire message. */
#ifndef MSB_ERRMAP_H
#define MSB_ERRMAP_H

#include "engine.h"
#include "errors.h"

/* what: a short phrase for the log ("reading the engine version").
 * Fills *reterr for a failed request: error < 0, or error 0 with
 * reply->status >= 400. */
void errmap_engine(int error, const struct engine_reply *reply, const char *what,
		   struct msb_error *reterr);

/* The same for a docker.h reply (Docker's message is already extracted). */
struct docker_reply;
void errmap_docker(const struct docker_reply *r, const char *what, struct msb_error *reterr);

/* The failure of a command run in the guest (execrun.h: error < 0 other
 * than the caller's own -ETIMEDOUT and -EFBIG, and the -ECANCELED of its
 * own execrun_cancel (sandbox.exec's cancel: MSB_ERR_CANCELLED, with the
 * partial output), which each caller answers its way; a -ECANCELED here is
 * the engine going away: ShuttingDown). what: the command, for messages
 * ("rm"). */
struct execrun_result;
void errmap_execrun(const struct execrun_result *r, const char *what, struct msb_error *reterr);

#endif
