#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "errors.h"
#include "xmalloc.h"

static const struct msb_error_info error_table[] = {
	{ MSB_ERR_PARSE, "ParseError", "invalid JSON" },
	{ MSB_ERR_INVALID_REQUEST, "InvalidRequest", "not a valid JSON-RPC 2.0 request" },
	{ MSB_ERR_METHOD_NOT_FOUND, "MethodNotFound", "no such method" },
	{ MSB_ERR_INVALID_PARAMS, "InvalidParams", "invalid params" },
	{ MSB_ERR_INTERNAL, "InternalError", "internal error" },

	{ MSB_ERR_ENGINE_UNAVAILABLE, "EngineUnavailable", "the Docker engine is not reachable" },
	{ MSB_ERR_ENGINE_ERROR, "EngineError", "the Docker engine refused the request" },
	{ MSB_ERR_ENGINE_TIMEOUT, "EngineTimeout", "the Docker engine did not answer in time" },
	{ MSB_ERR_ENGINE_VERSION, "EngineVersionNotSupported",
	  "the Docker engine's API version is older than this daemon supports" },

	{ MSB_ERR_CAPABILITY_NOT_SUPPORTED, "SandboxCapabilityNotSupported",
	  "the backend does not declare a capability the spec requires" },
	{ MSB_ERR_EGRESS_NOT_ENFORCED, "SandboxEgressNotEnforced",
	  "the backend cannot enforce the spec's egress mode" },
	{ MSB_ERR_OS_FAMILY_NOT_SUPPORTED, "SandboxOsFamilyNotSupported",
	  "the backend does not serve the spec's OS family" },
	{ MSB_ERR_TRANSFER_LIMITS_NOT_PERMITTED, "SandboxTransferLimitsNotPermitted",
	  "the spec's transfer limits exceed the backend's" },
	{ MSB_ERR_SCOPE_NOT_ENFORCED, "SandboxScopeNotEnforced",
	  "the backend does not enforce the spec's isolation scope" },
	{ MSB_ERR_BACKEND_NOT_PERMITTED, "SandboxBackendNotPermitted",
	  "the backend's isolation is below the spec's floor" },
	{ MSB_ERR_SANDBOX_CONFLICT, "SandboxConflict",
	  "the container under this sandbox's name cannot be served as asked" },

	{ MSB_ERR_CONFINEMENT, "ConfinementError", "the path is not confined to the working directory" },
	{ MSB_ERR_NOT_A_DIRECTORY, "NotADirectoryError", "a component of the path is not a directory" },
	{ MSB_ERR_FILE_NOT_FOUND, "FileNotFoundError", "no such file" },
	{ MSB_ERR_OS_ERROR, "OSError", "the guest refused the operation" },
	{ MSB_ERR_TRANSFER_CAP_EXCEEDED, "SandboxTransferCapExceeded", "the transfer exceeds its cap" },
	{ MSB_ERR_TIMEOUT, "TimeoutError", "the call's deadline passed" },
	{ MSB_ERR_SANDBOX_NOT_FOUND, "SandboxNotFound", "no such sandbox" },
	{ MSB_ERR_FREEZE_FAILED, "SandboxFreezeFailed", "the sandbox could not be frozen for a file call" },
	{ MSB_ERR_EXEC_OUTPUT_LIMIT, "SandboxExecOutputLimitExceeded", "the command's output exceeded its limit" },
	{ MSB_ERR_CANCELLED, "Cancelled", "the call was cancelled" },

	{ MSB_ERR_PERMISSION_DENIED, "PermissionDenied", "permission denied" },
	{ MSB_ERR_FRAME_TOO_LARGE, "FrameTooLarge", "frame exceeds the size limit" },
	{ MSB_ERR_TOO_MANY_CONNECTIONS, "TooManyConnections", "too many connections" },
	{ MSB_ERR_SHUTTING_DOWN, "ShuttingDown", "the daemon is shutting down" },
	{ MSB_ERR_FRAME_TIMEOUT, "FrameTimeout", "a frame did not arrive whole in time" },
};

const struct msb_error_info *msb_error_table(size_t *ret_n)
{
	*ret_n = ELEMENTSOF(error_table);
	return error_table;
}

const struct msb_error_info *msb_error_lookup(int code)
{
	for (size_t i = 0; i < ELEMENTSOF(error_table); i++)
		if (error_table[i].code == code)
			return &error_table[i];
	return NULL;
}

const char *msb_error_name(int code)
{
	const struct msb_error_info *info = msb_error_lookup(code);

	return info ? info->name : "UnknownError";
}

int msb_echo_len(const char *s)
{
	size_t n = strnlen(s, MSB_ECHO_MAX_BYTES + 1);

	if (n <= MSB_ECHO_MAX_BYTES)
		return (int)n;
	n = MSB_ECHO_MAX_BYTES;
	/* Back off over continuation bytes (10xxxxxx) to a lead byte, and drop it. */
	while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	return (int)n;
}

json_t *msb_error_object(int code, const char *message, json_t *data)
{
	const struct msb_error_info *info = msb_error_lookup(code);
	const char *fallback = info ? info->message : "error";
	json_t *d = json_object(), *err = json_object(), *msg;

	if (data && json_is_object(data))
		json_object_update(d, data);
	json_decref(data);
	json_object_set_new(d, "type", json_string(msb_error_name(code)));
	/* json_string refuses text that is not UTF-8 (engine text may not be). */
	msg = message ? json_string(message) : NULL;
	if (!msg)
		msg = json_string(fallback);
	json_object_set_new(err, "code", json_integer(code));
	json_object_set_new(err, "message", msg);
	json_object_set_new(err, "data", d);
	return err;
}

void msb_error_set(struct msb_error *e, int code, json_t *data, const char *fmt, ...)
{
	char *message = NULL;
	va_list ap;

	/* Format before clearing: the arguments may point into e->message
	 * (wrapping the previous error's text). */
	if (fmt) {
		va_start(ap, fmt);
		message = xvasprintf(fmt, ap);
		va_end(ap);
	}
	msb_error_clear(e);
	e->code = code;
	e->data = data;
	e->message = message;
}

void msb_error_copy(struct msb_error *dst, const struct msb_error *src)
{
	char *message = src->message ? xstrdup(src->message) : NULL;
	json_t *data = src->data ? json_deep_copy(src->data) : NULL;

	msb_error_clear(dst);
	dst->code = src->code;
	dst->message = message;
	dst->data = data;
}

void msb_error_clear(struct msb_error *e)
{
	free(e->message);
	json_decref(e->data);
	*e = (struct msb_error){ 0 };
}

json_t *msb_error_to_json(const struct msb_error *e)
{
	return msb_error_object(e->code, e->message, e->data ? json_incref(e->data) : NULL);
}
