/* fuzz_stat_header.c — libFuzzer target for the engine's path stat header
 * (X-Docker-Container-Path-Stat: base64 of a JSON object), decoded by
 * paths_stat_decode_header (domain/files/paths.c) with proto/base64.c and
 * rfc3339_parse. The input is used twice:
 *   - as the header value itself (NUL-terminated copy), which mostly probes
 *     the strict base64 decoder: what it accepts must encode back to the
 *     very same text;
 *   - base64-encoded, so the JSON and its members are explored directly.
 * A decoded stat must hold: name and link target present, the kind and
 * permission bits paths_go_mode_decode gives for its mode (perm within
 * 07777), nanoseconds under a second; it encodes as a SandboxEntry (size
 * only for a file); and its fields, written back as the engine would
 * (mtime as RFC 3339 UTC), decode to the same stat. A refusal names a
 * reason with a message and the EngineError outcome. A broken invariant
 * aborts. Built by tests/fuzz/run.sh with clang, and by meson with
 * replay_main.c as the unit test 'fuzz_stat_header'. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "base64.h"
#include "fuzz.h"
#include "paths.h"

/* RFC 3339 years rfc3339_parse reads. */
#define FUZZ_YEAR_MIN 1
#define FUZZ_YEAR_MAX 9999

static void check_refusal(int r, enum paths_reason reason)
{
	require(r < 0, "a refusal with a non-negative result");
	require(reason < _PATHS_R_MAX && paths_reason_to_string(reason) != NULL,
		"a refusal without a reason");
	require(paths_reason_outcome(reason) == PATHS_OUTCOME_ENGINE,
		"a header refusal that is not the engine's fault");
}

static void check_stat(const struct paths_stat *st)
{
	enum paths_reason reason;
	enum paths_kind kind;
	uint32_t perm;
	json_t *e;

	require(st->name && st->link_target, "a stat without name or link target");
	require(paths_go_mode_decode(st->mode, &kind, &perm, &reason) == 0, "a mode decoded twice differs");
	require(kind == st->kind && perm == st->perm, "kind or perm not the mode's");
	require((st->perm & ~07777u) == 0, "perm past 07777");
	require(st->mtime_nsec < 1000000000u, "nanoseconds past a second");
	require(st->size <= (uint64_t)INT64_MAX, "a size past INT64_MAX");
	e = paths_entry_encode("f", st);
	require(json_is_object(e), "a stat does not encode");
	require(json_is_integer(json_object_get(e, "size")) == (st->kind == PATHS_KIND_FILE),
		"size given for a non-file, or missing for a file");
	json_decref(e);
}

/* The stat written back as the engine would send it, then read again. */
static void check_round_trip(const struct paths_stat *st)
{
	struct paths_stat again;
	enum paths_reason reason;
	char mtime[64];
	struct tm tm;
	time_t t = (time_t)st->mtime_sec;
	json_t *o;
	char *json, *b64;
	int r;

	if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < FUZZ_YEAR_MIN ||
	    tm.tm_year + 1900 > FUZZ_YEAR_MAX)
		return;
	snprintf(mtime, sizeof(mtime), "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRIu32 "Z",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 st->mtime_nsec);
	o = json_pack("{s:s, s:I, s:I, s:s, s:s}", "name", st->name, "size", (json_int_t)st->size,
		      "mode", (json_int_t)st->mode, "mtime", mtime, "linkTarget", st->link_target);
	require(o != NULL, "a stat does not pack");
	json = json_dumps(o, JSON_COMPACT);
	require(json != NULL, "a stat does not dump");
	b64 = msb_base64_encode(json, strlen(json), NULL);
	if (strlen(b64) <= PATHS_STAT_HEADER_MAX_BYTES) {
		r = paths_stat_decode_header(b64, &again, &reason);
		require(r == 0, "a stat written back is refused");
		require(strcmp(again.name, st->name) == 0 && strcmp(again.link_target, st->link_target) == 0 &&
			again.size == st->size && again.mode == st->mode && again.kind == st->kind &&
			again.perm == st->perm && again.mtime_sec == st->mtime_sec &&
			again.mtime_nsec == st->mtime_nsec, "a stat written back decodes different");
		paths_stat_release(&again);
	}
	free(b64);
	free(json);
	json_decref(o);
}

static void fuzz_value(const char *value)
{
	struct paths_stat st;
	enum paths_reason reason = _PATHS_R_MAX;
	int r = paths_stat_decode_header(value, &st, &reason);

	if (r < 0) {
		check_refusal(r, reason);
		return;
	}
	require(r == 0, "a positive result");
	check_stat(&st);
	check_round_trip(&st);
	paths_stat_release(&st);
}

/* What the strict decoder accepts encodes back to the same text. */
static void fuzz_base64(const char *s, size_t len)
{
	uint8_t *raw = NULL;
	size_t n = 0;
	char *back;
	size_t blen = 0;

	if (msb_base64_decode(s, len, &raw, &n) < 0)
		return;
	require(n <= msb_base64_decoded_max(len), "decoded past decoded_max");
	back = msb_base64_encode(raw, n, &blen);
	require(blen == len && memcmp(back, s, len) == 0, "base64 that is not canonical accepted");
	free(back);
	free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *value = malloc(size + 1);
	char *b64;

	fuzz_json_seed();
	require(value != NULL, "out of memory");
	memcpy(value, data, size);
	value[size] = '\0';
	fuzz_value(value);
	fuzz_base64(value, strlen(value));
	free(value);
	b64 = msb_base64_encode(data, size, NULL);
	fuzz_value(b64);
	free(b64);
	return 0;
}
