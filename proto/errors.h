/* errors.h — the one table of wire error codes. Codes and names are stable
 * API: clients branch on `code` or `data.type`, never on message text.
 *
 *   -32700..-32600  JSON-RPC 2.0 standard codes
 *   1000s           the Docker engine
 *   1100s           sandbox refusals (router vocabulary of maf-sandbox)
 *   1200s           the sandbox surface: files and (later) exec
 *   1300s           authorisation and daemon limits
 */
#ifndef MSB_ERRORS_H
#define MSB_ERRORS_H

#include <stdarg.h>
#include <stddef.h>
#include <jansson.h>

enum msb_errcode {
	MSB_ERR_PARSE                       = -32700,
	MSB_ERR_INVALID_REQUEST             = -32600,
	MSB_ERR_METHOD_NOT_FOUND            = -32601,
	MSB_ERR_INVALID_PARAMS              = -32602,
	MSB_ERR_INTERNAL                    = -32603,

	MSB_ERR_ENGINE_UNAVAILABLE          = 1000,
	MSB_ERR_ENGINE_ERROR                = 1001,
	MSB_ERR_ENGINE_TIMEOUT              = 1002,
	MSB_ERR_ENGINE_VERSION              = 1003,

	MSB_ERR_CAPABILITY_NOT_SUPPORTED    = 1100,
	MSB_ERR_EGRESS_NOT_ENFORCED         = 1101,
	MSB_ERR_OS_FAMILY_NOT_SUPPORTED     = 1102,
	MSB_ERR_TRANSFER_LIMITS_NOT_PERMITTED = 1103,
	MSB_ERR_SCOPE_NOT_ENFORCED          = 1104,
	MSB_ERR_BACKEND_NOT_PERMITTED       = 1105,
	MSB_ERR_SANDBOX_CONFLICT            = 1106,

	MSB_ERR_CONFINEMENT                 = 1200,
	MSB_ERR_NOT_A_DIRECTORY             = 1201,
	MSB_ERR_FILE_NOT_FOUND              = 1202,
	MSB_ERR_OS_ERROR                    = 1203,
	MSB_ERR_TRANSFER_CAP_EXCEEDED       = 1204,
	MSB_ERR_TIMEOUT                     = 1205,
	MSB_ERR_SANDBOX_NOT_FOUND           = 1206,
	MSB_ERR_FREEZE_FAILED               = 1207,
	MSB_ERR_EXEC_OUTPUT_LIMIT           = 1208,
	MSB_ERR_CANCELLED                   = 1209,

	MSB_ERR_PERMISSION_DENIED           = 1300,
	MSB_ERR_FRAME_TOO_LARGE             = 1301,
	MSB_ERR_TOO_MANY_CONNECTIONS        = 1302,
	MSB_ERR_SHUTTING_DOWN               = 1303,
	MSB_ERR_FRAME_TIMEOUT               = 1304,
};

struct msb_error_info {
	int code;
	const char *name;     /* data.type on the wire */
	const char *message;  /* default message */
};

/* The whole table (for tests and docs). */
const struct msb_error_info *msb_error_table(size_t *ret_n);
/* The entry for code, or NULL when the code is not in the table. */
const struct msb_error_info *msb_error_lookup(int code);
/* data.type for code; "UnknownError" for a code not in the table. */
const char *msb_error_name(int code);

/* Client text echoed in an error (a method, member or param name) is cut to
 * this many bytes, at a UTF-8 character boundary, so an error never costs
 * more than the request that caused it. */
#define MSB_ECHO_MAX_BYTES 128

/* The length of s's longest prefix of at most MSB_ECHO_MAX_BYTES bytes that
 * ends on a UTF-8 character boundary. */
int msb_echo_len(const char *s);

/* Builds a JSON-RPC error object {"code","message","data":{"type",...}}.
 * message NULL → the table's default. data (steals; NULL or an object) is
 * merged into "data" beside "type". Returns a new reference. */
json_t *msb_error_object(int code, const char *message, json_t *data);

/* An operation's failure, filled through reterr_ parameters. */
struct msb_error {
	int code;
	char *message;  /* owned; NULL → the table's default */
	json_t *data;   /* owned; NULL or an object */
};

/* Sets code, message (printf) and data (steals). Replaces what was there. */
void msb_error_set(struct msb_error *e, int code, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void msb_error_clear(struct msb_error *e);
/* Replaces dst with a deep copy of src (code, message, data). */
void msb_error_copy(struct msb_error *dst, const struct msb_error *src);
/* Renders e as a JSON-RPC error object (new reference); e is left as is. */
json_t *msb_error_to_json(const struct msb_error *e);

#endif
