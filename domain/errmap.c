#include <errno.h>
#include <string.h>

#include "docker.h"
#include "errmap.h"
#include "execrun.h"
#include "log.h"

/* Docker's error body is {"message": "..."}; anything else is shown raw. */
static const char *engine_message(const struct engine_reply *reply, json_t **ret_root)
{
	json_t *root = reply->body_len ? json_loadb(reply->body, reply->body_len, 0, NULL) : NULL;
	const char *m = json_string_value(json_object_get(root, "message"));

	*ret_root = root;
	return m ? m : reply->body;
}

void errmap_engine(int error, const struct engine_reply *reply, const char *what,
		   struct msb_error *reterr)
{
	json_t *root = NULL;

	switch (error) {
	case 0:
		log_warnx("%s: the engine answered %ld: %.512s", what, reply->status,
			  engine_message(reply, &root));
		json_decref(root);
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR,
			      json_pack("{s:i}", "engine_status", (int)reply->status),
			      "the Docker engine refused %s (HTTP %ld)", what, reply->status);
		return;
	case -ETIMEDOUT:
		log_warnx("%s: the engine did not answer in time", what);
		msb_error_set(reterr, MSB_ERR_ENGINE_TIMEOUT, NULL,
			      "the Docker engine did not answer in time while %s", what);
		return;
	case -ECANCELED:
		msb_error_set(reterr, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		return;
	case -EMSGSIZE:
	case -EPROTO:
		log_warnx("%s: unusable reply from the engine: %s", what, strerror(-error));
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR, NULL,
			      "the Docker engine sent an unusable reply while %s", what);
		return;
	default:
		log_debug("engine", "%s: %s", what, strerror(-error));
		msb_error_set(reterr, MSB_ERR_ENGINE_UNAVAILABLE, NULL,
			      "the Docker engine is not reachable");
		return;
	}
}

void errmap_docker(const struct docker_reply *r, const char *what, struct msb_error *reterr)
{
	struct engine_reply er = { .status = r->status, .body = "", .body_len = 0 };

	if (r->error == 0 && r->message) {
		log_warnx("%s: the engine answered %ld: %.512s", what, r->status, r->message);
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR,
			      json_pack("{s:i}", "engine_status", (int)r->status),
			      "the Docker engine refused %s (HTTP %ld)", what, r->status);
		return;
	}
	errmap_engine(r->error, &er, what, reterr);
}

void errmap_execrun(const struct execrun_result *r, const char *what, struct msb_error *reterr)
{
	switch (r->error) {
	case -ENOENT:
		msb_error_set(reterr, MSB_ERR_SANDBOX_NOT_FOUND, NULL, "the sandbox is gone");
		return;
	case -ESRCH:
		msb_error_set(reterr, MSB_ERR_OS_ERROR, NULL, "the sandbox is not running");
		return;
	case -EBUSY:
		msb_error_set(reterr, MSB_ERR_FREEZE_FAILED, json_pack("{s:s}", "reason", "already paused"),
			      "the sandbox stayed paused for the whole call (something else paused it, or file "
			      "calls kept it frozen); the next acquire thaws a stray pause");
		return;
	case -ECANCELED:
		msb_error_set(reterr, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		return;
	case -ETIME:
		msb_error_set(reterr, MSB_ERR_ENGINE_TIMEOUT, NULL, "the Docker engine did not answer in time");
		return;
	case -EIO:
		log_warnx("%s: the engine refused: %s", what, r->message ? r->message : "(no message)");
		msb_error_set(reterr, MSB_ERR_ENGINE_ERROR, json_pack("{s:i}", "engine_status", (int)r->status),
			      "the Docker engine refused to run %s", what);
		return;
	default:
		msb_error_set(reterr, MSB_ERR_ENGINE_UNAVAILABLE, NULL, NULL);
		return;
	}
}
