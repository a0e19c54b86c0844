/* jsonrpc.h — the JSON-RPC 2.0 envelope: parse and validate requests
 * (server side), build replies, build requests and parse replies (client
 * side). No I/O, no logging.
 *
 * Policy (documented in PROTOCOL.md):
 *  - a frame must hold one JSON object; a batch (array) is refused with
 *    -32600 and id null, as is any other non-object value;
 *  - members allowed: jsonrpc ("2.0", required), method (string, required),
 *    id (string, integer or null; absent = notification), params (object,
 *    optional); any other member → -32600 naming it;
 *  - an error detected before the id is validated is reported with id null;
 *  - before it is parsed, a frame is counted (jsonfast_scan): more than
 *    MSB_JSON_MAX_VALUES values, nesting deeper than MSB_JSON_MAX_DEPTH or
 *    more than MSB_JSON_MAX_STRUCTURE_BYTES bytes outside string values
 *    (keys, numbers, punctuation, whitespace) → -32700 with data.limit and
 *    data.position (where the token that passed it starts), id null, and
 *    jansson allocates nothing for it. Replies (jsonrpc_response_parse,
 *    the client side) are not counted;
 *  - a frame holding a raw NUL byte → -32700 with data.position (its
 *    offset), before it is parsed (jansson would drop one after a number).
 */
#ifndef MSB_JSONRPC_H
#define MSB_JSONRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

struct jsonrpc_request {
	json_t *root;        /* owned */
	json_t *id;          /* borrowed from root; NULL for a notification */
	const char *method;  /* borrowed from root */
	json_t *params;      /* borrowed from root; NULL when absent */
};

/* Parses one frame. Returns 0 and fills *ret (release it with
 * jsonrpc_request_release), or a negative JSON-RPC code (MSB_ERR_PARSE,
 * MSB_ERR_INVALID_REQUEST) and sets *reterr_reply to the error reply to send
 * (new reference). */
int jsonrpc_request_parse(const char *buf, size_t len, struct jsonrpc_request *ret,
			  json_t **reterr_reply);
void jsonrpc_request_release(struct jsonrpc_request *req);

/* True when id is a valid request id: a string, an integer or null. */
bool jsonrpc_id_is_valid(const json_t *id);

/* {"jsonrpc":"2.0","id":id,"result":result}. id borrowed (NULL → null),
 * result stolen (NULL → null). New reference. */
json_t *jsonrpc_reply_result(json_t *id, json_t *result);
/* {"jsonrpc":"2.0","id":id,"error":error}. id borrowed, error stolen. */
json_t *jsonrpc_reply_error(json_t *id, json_t *error);

/* Client side: {"jsonrpc":"2.0","id":id,"method":m[,"params":p]}; params
 * stolen, may be NULL. New reference. */
json_t *jsonrpc_request_new(json_int_t id, const char *method, json_t *params);

struct jsonrpc_response {
	json_t *root;        /* owned */
	json_t *id;          /* borrowed */
	json_t *result;      /* borrowed; NULL when an error */
	json_t *error;       /* borrowed; NULL when a result */
	int error_code;
	const char *error_message;
	const char *error_type;  /* data.type, or NULL */
};

/* Parses a reply frame. Returns 0, or -EPROTO when it is not a well-formed
 * JSON-RPC 2.0 response (exactly one of result/error, error with an integer
 * code an int holds and a string message). */
int jsonrpc_response_parse(const char *buf, size_t len, struct jsonrpc_response *ret);
void jsonrpc_response_release(struct jsonrpc_response *resp);

#endif
