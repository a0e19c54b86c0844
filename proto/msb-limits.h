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

/* One request frame, counted by a linear pre-scan before it is parsed
 * (jsonfast_scan; not config): JSON values, object keys included; nesting
 * of arrays and objects; structure bytes, all but those of string values
 * (punctuation, whitespace, numbers, literals, object keys: what jansson
 * lexes byte by byte). The largest requests the protocol defines are far
 * inside all three: files.write of 256 files, about 1,300 values;
 * sandbox.exec with 4096 arguments and 256 env entries, about 4,620 values
 * and under 100 KiB of structure; an acquire with 64 labels of 4 KiB keys,
 * 260 KiB. A frame over one is refused ParseError (-32700, data.limit)
 * before jansson allocates anything for it, so parsing an admitted frame
 * costs about its own size again (its strings' copies) plus a few MiB
 * (MSB_JSON_MAX_VALUES small allocations, keys lexed by jansson), plus
 * the largest escaped string value once more (jsonfast's decoded copy
 * until jansson has its own: one huge escaped string costs twice its
 * size). An admitted frame that is not valid JSON costs at most one long
 * string lexed by jansson (jsonfast.h), never the frame. */
#define MSB_JSON_MAX_VALUES          65536
#define MSB_JSON_MAX_DEPTH           64
#define MSB_JSON_MAX_STRUCTURE_BYTES (2 * MSB_MIB)

/* A request's string id, in bytes (not config): the daemon echoes it in
 * the reply and in every notification of the call (exec.output), so it is
 * kept short. Longer → InvalidRequest (-32600, id null, data.limit). */
#define MSB_ID_MAX_BYTES             256

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
/* Fairness between users (uids); admins are exempt from the per-uid caps: */
#define MSB_MAX_CONNECTIONS_PER_UID  64           /* limits.max_connections_per_uid */
#define MSB_ADMIN_RESERVED_CONNECTIONS 8          /* limits.admin_reserved_connections */
#define MSB_MAX_INFLIGHT_PER_UID     128          /* limits.max_inflight_per_uid */
#define MSB_IDLE_TIMEOUT_MS          600000       /* limits.idle_timeout_ms: nothing under way */
/* The shortest idle timeout a configuration may set (other than 0, never). */
#define MSB_IDLE_TIMEOUT_MIN_MS      1000
#define MSB_IDLE_EVICT_MS            30000        /* limits.idle_evict_ms: idle this long, evictable */
/* After the drain deadline cancels what is left, replies get this long to be written. */
#define MSB_FINAL_FLUSH_MS           2000
/* At the drain deadline, file calls cut short unpause their guests: the
 * daemon waits this long for those thaws (polling), then cancels the rest. */
#define MSB_THAW_WAIT_MS             3000
#define MSB_THAW_POLL_MS             20

#endif
