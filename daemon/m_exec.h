/* m_exec.h — sandbox.exec (PROTOCOL.md). */
#ifndef MSB_M_EXEC_H
#define MSB_M_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "rpc.h"

#define EXEC_MAX_TIMEOUT_S   86400          /* timeout_seconds at most (a day) */
#define EXEC_MAX_ENV         256            /* env entries */
#define EXEC_MAX_ENV_BYTES   (64 * 1024)    /* env "NAME=VALUE" bytes together */

struct m_exec_params {
	const char *sandbox;
	json_t *command;            /* string or array of strings (borrowed) */
	json_t *working_directory;  /* string or NULL */
	json_t *timeout_seconds;    /* number */
	json_t *env;                /* object or NULL */
	json_t *max_output_bytes;   /* integer or NULL */
	bool stream;                /* exec.output notifications as output arrives */
	bool text;                  /* the reply also carries stdout_text/stderr_text */
	json_t *stdin_b64;          /* string or NULL: the whole stdin, then closed */
	bool stdin_stream;          /* stdin stays open for exec.stdin requests */
};

/* exec.stdin: a chunk carries at most EXEC_STDIN_MAX_CHUNK_BYTES; at most
 * EXEC_STDIN_MAX_BUFFERED_BYTES of one exec's stdin wait in the daemon (a
 * chunk is answered {written} once handed to the engine: a client that
 * waits for its answers never meets the bound). */
#define EXEC_STDIN_MAX_CHUNK_BYTES    (1024u * 1024)
#define EXEC_STDIN_MAX_BUFFERED_BYTES (4u * 1024 * 1024)

struct m_exec_stdin_params {
	json_t *call;               /* the sandbox.exec request's id */
	json_t *data_b64;           /* string or NULL */
	bool eof;
};

struct m_call_cancel_params {
	json_t *id;
};

/* Sent with stream: true: output merged per stream for up to this long or
 * this many bytes (the call's max_output_bytes when smaller: the buffer a
 * stream holds is never bigger), then one notification a stream. */
#define EXEC_OUTPUT_NOTIFICATION "exec.output"
#define EXEC_STREAM_FLUSH_MS     20
#define EXEC_STREAM_FLUSH_BYTES  (64 * 1024)
/* One exec.output notification's frame besides its id and data: its
 * envelope is charged from the bound's allowance; once the allowance left
 * only covers the full chunks still possible and a last flush a stream,
 * partial chunks wait (for a full chunk, or the end). */
#define EXEC_STREAM_ENVELOPE_BYTES 128

extern const struct rpc_param m_exec_spec[];
struct rpc_result *m_exec(struct rpc_call *call, const void *params);
extern const struct rpc_param m_exec_stdin_spec[];
struct rpc_result *m_exec_stdin(struct rpc_call *call, const void *params);
extern const struct rpc_param m_call_cancel_spec[];
struct rpc_result *m_call_cancel(struct rpc_call *call, const void *params);

/* bytes as a JSON string of UTF-8 text: each byte that does not begin a
 * valid sequence (RFC 3629), and each NUL, becomes U+FFFD. New reference. */
json_t *m_exec_text_view(const uint8_t *b, size_t n);

#endif
