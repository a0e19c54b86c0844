/* jsonfast.h — jansson's compact dump and buffer load, fast on long strings.
 *
 * Big frames (files.write's base64 content, files.read's reply, exec's
 * stdout_b64 and stdout_text) are a few long strings in a small document.
 * jansson walks every byte of them through a per-byte callback (dump) and
 * a per-byte lexer with a growing buffer (load); these two do the long
 * strings with memcpy-sized runs and leave everything else to jansson.
 *
 * Both give exactly jansson's outcome:
 *  - jsonfast_dump's text is byte for byte json_dumps(v, JSON_COMPACT |
 *    JSON_ENCODE_ANY) (jansson 2.14: keys in insertion order, UTF-8 raw,
 *    the same escapes, the same failures);
 *  - jsonfast_loadb returns what json_loadb(buf, len, flags, error) returns
 *    for every input: an equal value, or NULL and the same error (code,
 *    text, line, column, position).
 * An invalid big text is never lexed whole by jansson: its error comes from
 * the text with its long string values replaced (see jsonfast.c), so what
 * an invalid frame costs is at most one long literal lexed by jansson, not
 * the frame. Its texts and decoded strings go through jansson's allocator
 * (json_set_alloc_funcs); an escaped string's decoded copy lives until
 * jansson has its own, so a frame of escaped strings costs its size about
 * once more, at most (one huge escaped string: twice its size).
 * No I/O, no logging; thread-safe (the test hook aside). */
#ifndef MSB_JSONFAST_H
#define MSB_JSONFAST_H

#include <stddef.h>
#include <jansson.h>

/* Inputs shorter than this go straight to json_loadb: the fast path's extra
 * pass only pays for itself on big frames. */
#define JSONFAST_LOAD_MIN_BYTES (64 * 1024)
/* A string value literal at least this long (quotes excluded) is decoded by
 * jsonfast itself and spliced into jansson's result: jansson lexes a
 * string at tens of ns a byte, jsonfast at memchr's speed, and a
 * placeholder is under 48 bytes. Low, so that a frame of many mid-sized
 * strings costs no more loop time than one long string. */
#define JSONFAST_SPLICE_MIN_BYTES 64
/* Containers nested deeper than this are dumped by json_dumps itself (which
 * also detects reference cycles). */
#define JSONFAST_DUMP_MAX_DEPTH 2048

/* The compact text of v (borrowed): json_dumps(v, JSON_COMPACT |
 * JSON_ENCODE_ANY), byte for byte. Returns a malloc'd buffer holding the
 * text, its length in *ret_len, then a NUL; the buffer has room for `extra`
 * more bytes and a NUL after the text (frame_encode adds its LF in place).
 * Returns NULL, *ret_len untouched, where json_dumps returns NULL (a string
 * that is not valid UTF-8, a reference cycle) or on OOM. */
char *jsonfast_dump(const json_t *v, size_t extra, size_t *ret_len);

/* json_loadb(buf, len, flags, error), the same outcome for every input:
 * a new reference to an equal value (and *error as jansson leaves it on
 * success), or NULL with jansson's own error text, line, column and
 * position (error may be NULL). buf is borrowed and need not be
 * NUL-terminated. */
json_t *jsonfast_loadb(const char *buf, size_t len, size_t flags, json_error_t *error);

/* What jsonfast_scan refuses past (SIZE_MAX: no limit). */
struct jsonfast_limits {
	size_t values;           /* JSON values, object keys included */
	size_t depth;            /* nesting of arrays and objects */
	size_t structure_bytes;  /* bytes outside string values (below) */
};

/* What jsonfast_scan found, as far as it read. */
struct jsonfast_shape {
	size_t values;           /* JSON values, object keys included */
	size_t depth;            /* deepest container nesting (a scalar alone: 0) */
	size_t structure_bytes;  /* bytes not inside a string value's literal */
	size_t position;         /* len, or where the token that passed a limit starts */
};

/* A linear pre-scan of a JSON text, made before anything is allocated for
 * it: counts its values (each string, number, literal and container, and
 * each object key), its deepest nesting, and its structure bytes: every
 * byte but those of string values' literals (quotes included), so
 * punctuation, whitespace, numbers, literals and object keys (a string
 * followed by ':'), all of which jansson lexes byte by byte, where long
 * string values are jsonfast's memchr. Strings are skipped with memchr.
 * Returns 0 and *ret (all of the text read), or -E2BIG as soon as a count
 * passes its limit (*ret then says where the token that passed it starts,
 * and what it counted so far, that token included). Text jansson would refuse is
 * counted as best it can (never an error for that): for text json_loadb
 * accepts, values and depth are exactly those of the value it returns
 * (values: with JSON_REJECT_DUPLICATES; without, a duplicate key counts
 * each time it is written). No allocation; lim and ret may not be NULL. */
int jsonfast_scan(const char *buf, size_t len, const struct jsonfast_limits *lim,
		  struct jsonfast_shape *ret);

/* TEST ONLY (fuzzing, unit tests): replaces JSONFAST_LOAD_MIN_BYTES and
 * JSONFAST_SPLICE_MIN_BYTES process-wide, so the fast path is reached with
 * small inputs. Not thread-safe; never called by the daemon or clients.
 * Under 21 bytes of splice threshold, an error's text may lack jansson's
 * " near '<token>'" context where jansson quotes a short string value
 * (jsonfast stopped at its placeholder); all else is the same. */
void jsonfast_set_thresholds(size_t load_min, size_t splice_min);
/* TEST ONLY: how many jsonfast_loadb calls so far (process-wide) returned a
 * value built by the fast path, so tests can see it was taken. */
size_t jsonfast_test_spliced(void);

#endif
