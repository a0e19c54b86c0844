/* m_files.h — the files.* methods (PROTOCOL.md "The file plane"). */
#ifndef MSB_M_FILES_H
#define MSB_M_FILES_H

#include <stdbool.h>
#include <stdint.h>

#include "rpc.h"

/* One params struct for the five methods; each method's table names the
 * members it takes (any other is refused). Strings that are paths come as
 * JSON (borrowed) so an embedded NUL is seen and refused. */
struct m_files_params {
	const char *sandbox;
	json_t *working_directory;
	json_t *path;
	json_t *content_b64;
	json_t *content_text;
	json_t *files;
	json_t *paths;
	json_t *max_bytes;
	bool recursive;
	json_t *directory;
	json_t *timeout_seconds;
	json_t *mode;             /* files.write: permission bits */
};

/* Most bytes of a guest rm's stderr carried in an OSError. */
#define M_FILES_STDERR_MAX 4096

struct sandbox;
/* The sandbox's storage base (its work-dir label), or the default. */
const char *m_files_sandbox_base(const struct sandbox *sb);

extern const struct rpc_param m_files_write_spec[];
extern const struct rpc_param m_files_read_spec[];
extern const struct rpc_param m_files_stat_spec[];
extern const struct rpc_param m_files_list_spec[];
extern const struct rpc_param m_files_remove_spec[];
extern const struct rpc_param m_files_reclaim_spec[];

struct rpc_result *m_files_write(struct rpc_call *call, const void *params);
struct rpc_result *m_files_read(struct rpc_call *call, const void *params);
struct rpc_result *m_files_stat(struct rpc_call *call, const void *params);
struct rpc_result *m_files_list(struct rpc_call *call, const void *params);
struct rpc_result *m_files_remove(struct rpc_call *call, const void *params);
struct rpc_result *m_files_reclaim(struct rpc_call *call, const void *params);

#endif
