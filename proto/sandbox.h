/* sandbox.h — the sandbox key and spec on the wire (behaviour-core §1.1,
 * §1.2): decode, validate by the construction rules, encode. No I/O.
 *
 * Ownership: *_decode fills a caller-owned struct on success only (ret_),
 * which the caller releases with *_release; on failure the struct is left
 * untouched and *reterr_field / *reterr_message say what is wrong (field is
 * a static string or points into the input; message is malloc'd). */
#ifndef MSB_SANDBOX_H
#define MSB_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "types.h"

#define MSB_DEFAULT_WORK_DIR "/maf-sandbox/work"
/* Each of scope, thread_id, agent_dir, call_id, kind: at most this many bytes. */
#define MSB_KEY_FIELD_MAX_BYTES 1024
/* image, image_id, work_dir, each label key and value: at most this many bytes. */
#define MSB_SPEC_STRING_MAX_BYTES 4096
#define MSB_SPEC_MAX_LABELS 64
#define MSB_SPEC_MAX_EGRESS_ALLOW 256
/* The spec's transfer-limit default (DEFAULT_TRANSFER_LIMITS): 8 MiB, 32 MiB, 64 files. */
#define MSB_DEFAULT_FILE_BYTES  (8u * 1024 * 1024)
#define MSB_DEFAULT_TOTAL_BYTES (32u * 1024 * 1024)
#define MSB_DEFAULT_FILES       64u

struct msb_key {
	char *scope;       /* required, non-empty */
	char *thread_id;   /* required, non-empty */
	char *agent_dir;   /* required, non-empty; the wire also accepts "agent_id" */
	char *call_id;     /* "" = conversation scope */
};

struct msb_spec {
	char *kind;                 /* required, non-empty */
	char *image;                /* NULL if absent */
	char *image_id;             /* NULL if absent */
	enum msb_egress egress;     /* default closed */
	char **egress_allow;        /* normalised: lower-case-keyed, de-duplicated, sorted */
	size_t n_egress_allow;
	char *work_dir;             /* NULL = the backend's default (MSB_DEFAULT_WORK_DIR) */
	json_t *labels;             /* object of string → string; never NULL (maybe empty) */
	uint32_t requires;          /* MSB_BIT(capability) set; default exec + files_in */
	int min_isolation;          /* enum msb_isolation, or -1 for no opinion */
	enum msb_scope isolation_scope;  /* default conversation */
	int requires_os_family;     /* enum msb_os_family, or -1 */
	struct msb_transfer_limits files_in;
	struct msb_transfer_limits files_out;
};

/* Members of a spec the wire accepts and the daemon does not act on
 * (declared_outputs, outputs_named_at_call_time, host_tools,
 * confined_to_guest_call_path, min_cleanup) are checked for type only.
 * Any other member is refused. */
int msb_key_decode(const json_t *j, struct msb_key *ret, const char **reterr_field,
		   char **reterr_message);
void msb_key_release(struct msb_key *key);
json_t *msb_key_encode(const struct msb_key *key);

int msb_spec_decode(const json_t *j, struct msb_spec *ret, const char **reterr_field,
		    char **reterr_message);
void msb_spec_release(struct msb_spec *spec);

/* The work dir the spec asks for, or the default. Borrowed. */
const char *msb_spec_work_dir(const struct msb_spec *spec);
/* The image reference to run: image_id if set, else image, else NULL. */
const char *msb_spec_image_ref(const struct msb_spec *spec);

#endif
