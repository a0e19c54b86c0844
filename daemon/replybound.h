/* replybound.h — how many bytes a call's reply (and the notifications it
 * sends) may take on the wire, computed from its params and the
 * configuration before the call runs (issue 17, finding 1).
 *
 * The server charges each call this bound against the per-connection and
 * the daemon-wide reply budgets (limits.conn_reply_budget_bytes,
 * limits.reply_budget_bytes) before it dispatches the call, and releases it
 * as the reply's bytes leave the connection's output buffer. Pure: no I/O,
 * no state. params is borrowed and may be anything a client sent (the bound
 * is taken before the params are validated): a value the method would
 * refuse gives a bound at least as large as the error reply. */
#ifndef MSB_REPLYBOUND_H
#define MSB_REPLYBOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

struct msbd_config;

/* The bound of a method without its own: an error, a status, a listing of
 * small things. */
#define REPLYBOUND_DEFAULT_BYTES   (64 * 1024)
/* The frame around a result: {"jsonrpc":"2.0","id":…,"result":…}\n, the id
 * counted apart (replybound_id). */
#define REPLYBOUND_ENVELOPE_BYTES  256
/* One entry of files.read's `files` list or files.list's `entries`,
 * besides its content and its escaped path or name. */
#define REPLYBOUND_ENTRY_BYTES     128
/* A JSON string of n bytes as the daemon writes it: each byte at most a
 * \u00XX escape (6 bytes), quotes included. */
#define REPLYBOUND_ESCAPED(n)      (6 * (size_t)(n) + 2)
/* Standard padded base64 of n bytes. */
#define REPLYBOUND_BASE64(n)       ((((size_t)(n) + 2) / 3) * 4)

/* sandbox.exec's `text` param when the call does not give it: whether the
 * reply carries stdout_text/stderr_text besides the base64. */
#define REPLYBOUND_EXEC_TEXT_DEFAULT false

/* The longest id echoed: a string of 256 bytes, each escaped. */
#define REPLYBOUND_MAX_ID_BYTES    REPLYBOUND_ESCAPED(256)

/* The reply's id echoed: its bytes as the daemon writes them. */
size_t replybound_id(const json_t *id);

size_t replybound_files_read(const json_t *params, const struct msbd_config *cfg);
size_t replybound_files_list(const json_t *params, const struct msbd_config *cfg);
size_t replybound_exec(const json_t *params, const struct msbd_config *cfg);

/* The largest bound a files.read, a files.list or a sandbox.exec may have
 * under cfg (its id aside), from the files.* and exec.* caps: what both
 * reply budgets must admit, with a request of limits.max_frame_bytes and
 * the longest id (REPLYBOUND_MAX_ID_BYTES). */
size_t replybound_max(const struct msbd_config *cfg);

#endif
