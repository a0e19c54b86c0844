/* msb-limits.h — every limit of the wire, as a named constant. The daemon lets
 * the configuration override the ones marked (config key); the others are
 * part of the contract and documented in PROTOCOL.md. */
#ifndef MSB_MSB_LIMITS_H
#define MSB_MSB_LIMITS_H

#define MSB_KIB ((size_t)1024)
#define MSB_MIB (1024 * MSB_KIB)

/* Transfer ceilings declared in daemon.describe, each direction (not config). */
#define MSB_TRANSFER_MAX_FILE_BYTES  (64 * MSB_MIB)
#define MSB_TRANSFER_MAX_TOTAL_BYTES (256 * MSB_MIB)
#define MSB_TRANSFER_MAX_FILES       256

/* One frame: one JSON object and its LF (limits.max_frame_bytes). It must
 * admit a 64 MiB file in base64 (89,478,488 bytes) plus its envelope. */
#define MSB_FRAME_MAX_BYTES          (96 * MSB_MIB)
/* The smallest frame limit a configuration may set. */
#define MSB_FRAME_MIN_BYTES          (4 * MSB_KIB)

/* Daemon side, all overridable in the configuration: */
#define MSB_MAX_CONNECTIONS          256          /* limits.max_connections */
#define MSB_MAX_INFLIGHT             32           /* limits.max_inflight, per connection */
#define MSB_BUFFER_BUDGET_BYTES      (512 * MSB_MIB) /* limits.buffer_budget_bytes, daemon-wide */
/* Reply budgets (issue 17): bytes of replies a call may produce, charged
 * before it runs and released as they are written. Both admit the largest
 * single charge under the default caps: a files.read of 256 MiB (341.3 MiB
 * of base64, 6.3 MiB of entries) plus its request (up to a 96 MiB frame). */
#define MSB_REPLY_BUDGET_BYTES       (1024 * MSB_MIB) /* limits.reply_budget_bytes, daemon-wide */
#define MSB_CONN_REPLY_BUDGET_BYTES  (512 * MSB_MIB)  /* limits.conn_reply_budget_bytes */
#define MSB_FRAME_TIMEOUT_MS         30000        /* limits.frame_timeout_ms: one frame, first byte to LF */
#define MSB_WRITE_TIMEOUT_MS         60000        /* limits.write_timeout_ms: replies queued, none read */
#define MSB_DRAIN_TIMEOUT_MS         10000        /* shutdown.drain_ms */
/* After the drain deadline cancels what is left, replies get this long to be written. */
#define MSB_FINAL_FLUSH_MS           2000
/* At the drain deadline, file calls cut short unpause their guests: the
 * daemon waits this long for those thaws (polling), then cancels the rest. */
#define MSB_THAW_WAIT_MS             3000
#define MSB_THAW_POLL_MS             20

#endif
