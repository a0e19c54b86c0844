#include <stdint.h>

#include "settings.h"
#include "paths.h"
#include "replybound.h"

static size_t max_size(size_t a, size_t b)
{
	return a > b ? a : b;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

size_t replybound_id(const json_t *id)
{
	if (json_is_string(id))
		return REPLYBOUND_ESCAPED(json_string_length(id));
	return 24;      /* an int64, or null */
}

/* A count param as the method reads it: a non-negative integer, else def. */
static size_t param_count(const json_t *params, const char *name, size_t def)
{
	const json_t *v = json_object_get(params, name);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return def;
	return (uint64_t)json_integer_value(v) > SIZE_MAX ? SIZE_MAX : (size_t)json_integer_value(v);
}

size_t replybound_files_read(const json_t *params, const struct msbd_config *cfg)
{
	const json_t *paths = json_object_get(params, "paths");
	size_t n = json_is_array(paths) ? json_array_size(paths) : 1;
	size_t per = min_size(param_count(params, "max_bytes", cfg->files_max_file_bytes), cfg->files_max_file_bytes);
	size_t total, bytes;

	/* Refused calls (no file, too many) get an error. */
	if (n == 0 || n > (size_t)cfg->files_max_files)
		return REPLYBOUND_DEFAULT_BYTES;
	total = per > cfg->files_max_total_bytes / n ? cfg->files_max_total_bytes :
						     min_size(n * per, cfg->files_max_total_bytes);
	/* Each file its own base64 (padding each), and with `paths` its entry
	 * and its path (relative, at most PATHS_MAX_BYTES) escaped. */
	bytes = REPLYBOUND_ENVELOPE_BYTES + REPLYBOUND_BASE64(total) + 4 * n +
		n * (REPLYBOUND_ENTRY_BYTES + (json_is_array(paths) ? REPLYBOUND_ESCAPED(PATHS_MAX_BYTES) : 0));
	/* An error names a path at most. */
	return max_size(bytes, REPLYBOUND_DEFAULT_BYTES);
}

size_t replybound_files_list(const json_t *params, const struct msbd_config *cfg)
{
	const json_t *path = json_object_get(params, "path");
	size_t prefix = json_is_string(path) ? min_size(json_string_length(path), PATHS_MAX_BYTES) : PATHS_MAX_BYTES;
	/* Each entry: the listed path, '/', a name (NAME_MAX), escaped. */
	size_t entry = REPLYBOUND_ENTRY_BYTES + REPLYBOUND_ESCAPED(prefix + 1 + PATHS_NAME_MAX_BYTES);

	return max_size(REPLYBOUND_ENVELOPE_BYTES + (size_t)cfg->files_list_max_entries * entry,
			REPLYBOUND_DEFAULT_BYTES);
}

/* What sandbox.exec sends for output of at most out bytes: the two base64
 * strings (each padded), the two text views if wanted, and with stream the
 * exec.output notifications: the same base64 again, cut in chunks, plus as
 * much again for their envelopes (or 64 KiB). */
static size_t exec_bound(size_t out, bool text, bool stream)
{
	size_t b64 = REPLYBOUND_BASE64(out) + 4;
	size_t bytes = REPLYBOUND_ENVELOPE_BYTES + b64;

	if (text)
		bytes += REPLYBOUND_ESCAPED(out) + 2;
	if (stream)
		bytes += b64 + max_size(b64, REPLYBOUND_DEFAULT_BYTES);
	return max_size(bytes, REPLYBOUND_DEFAULT_BYTES);
}

size_t replybound_exec(const json_t *params, const struct msbd_config *cfg)
{
	const json_t *text = json_object_get(params, "text");
	size_t out = param_count(params, "max_output_bytes", cfg->exec_max_output_bytes);

	/* Over the ceiling (or 0): refused with an error. */
	if (out == 0 || out > cfg->exec_max_output_bytes)
		out = 0;
	return exec_bound(out, json_is_boolean(text) ? json_is_true(text) : REPLYBOUND_EXEC_TEXT_DEFAULT,
			  json_is_true(json_object_get(params, "stream")));
}

size_t replybound_max(const struct msbd_config *cfg)
{
	size_t n = (size_t)cfg->files_max_files;
	size_t per = cfg->files_max_file_bytes;
	size_t total = per > cfg->files_max_total_bytes / n ? cfg->files_max_total_bytes : n * per;
	size_t read = REPLYBOUND_ENVELOPE_BYTES + REPLYBOUND_BASE64(total) + 4 * n +
		      n * (REPLYBOUND_ENTRY_BYTES + REPLYBOUND_ESCAPED(PATHS_MAX_BYTES));

	/* A files.list of a path of PATHS_MAX_BYTES (no path: the bound takes that). */
	size_t list = replybound_files_list(NULL, cfg);

	return max_size(max_size(read, list), exec_bound(cfg->exec_max_output_bytes, true, true));
}
