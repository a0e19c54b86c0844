/* fuzz_hijack_head.c — libFuzzer target for the hijacked start's response
 * head parser (engine/hijack.c, engine_hijack_parse_head): the
 * engine's bytes up to the blank line. The input is those bytes. The
 * parser must:
 *   - answer only 0 (incomplete), 1 (parsed), -EPROTO or -EMSGSIZE;
 *   - say incomplete exactly when no CRLF CRLF is in the input and it is
 *     under ENGINE_HIJACK_MAX_HEAD_BYTES; -EMSGSIZE exactly when none is
 *     within the bound and the input reaches it;
 *   - when parsed: the head ends at the first CRLF CRLF, within the bound;
 *     a status of 100..999 the status line spells; upgraded exactly for
 *     101 and 200; content_length -1 or at most 2^50-ish;
 *   - judge the same bytes the same way whatever follows them: the head
 *     alone parses to the same result, and one byte less is incomplete.
 * A broken invariant aborts. Built by tests/fuzz/run.sh with clang, and by
 * meson with replay_main.c as the unit test 'fuzz_hijack_head'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "hijack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct engine_hijack_head h, h2;
	size_t lim = size < ENGINE_HIJACK_MAX_HEAD_BYTES ? size : ENGINE_HIJACK_MAX_HEAD_BYTES;
	const uint8_t *blank = lim >= 4 ? memmem(data, lim, "\r\n\r\n", 4) : NULL;
	int r = engine_hijack_parse_head(data, size, &h);

	require(r == 0 || r == 1 || r == -EPROTO || r == -EMSGSIZE, "an unexpected return");
	if (!blank) {
		require(r == (size >= ENGINE_HIJACK_MAX_HEAD_BYTES ? -EMSGSIZE : 0),
			"no blank line: not incomplete / too large");
		return 0;
	}
	require(r == 1 || r == -EPROTO, "a whole head neither parsed nor refused");
	/* The same bytes alone, and one byte less. */
	{
		size_t end = (size_t)(blank - data) + 4;

		require(engine_hijack_parse_head(data, end, &h2) == r, "the head alone judged otherwise");
		require(engine_hijack_parse_head(data, end - 1, &h2) == 0, "one byte short is not incomplete");
		if (r != 1)
			return 0;
		require(h.len == end, "the head does not end at the first blank line");
	}
	require(h.status >= 100 && h.status <= 999, "a status out of range");
	require(memcmp(data, "HTTP/1.", 7) == 0 && data[9] - '0' == h.status / 100 &&
		data[10] - '0' == h.status / 10 % 10 && data[11] - '0' == h.status % 10,
		"the status is not the status line's");
	require(h.upgraded == (h.status == 101 || h.status == 200), "upgraded is wrong");
	require(h.content_length >= -1 && h.content_length < (1LL << 54), "a content length out of range");
	return 0;
}
