/* fuzz_exec_demux.c — libFuzzer target for the exec output demultiplexer
 * (domain/exec/execrun.c, execrun_demux_feed): Docker's stream of 8-byte
 * headers [stream, 0, 0, 0, length u32 BE] each followed by its payload.
 * The input is the stream. A reference walk over the whole input says which
 * frames it holds; the demuxer is fed the input in small chunks (cut points
 * from the input) and must:
 *   - deliver, per stream, exactly the reference's bytes in order (count and
 *     hash), the byte count equal to the sum of the frame lengths (the last
 *     frame's delivered part when cut short);
 *   - end a frame (frame_end) exactly once per complete frame, and only when
 *     the frame's length is used up; pass a zero-length chunk only as an
 *     empty frame's end;
 *   - refuse the first header of an unknown stream with -EPROTO, naming it,
 *     and nothing after it; say "between frames" exactly when the stream
 *     may end there;
 *   - when the sink refuses (a cap of the input's choosing, as the output
 *     cap does), return the sink's error and never call it again.
 * A broken invariant aborts. Built by tests/fuzz/run.sh with clang, and by
 * meson with replay_main.c as the unit test 'fuzz_exec_demux'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "execrun.h"
#include "fuzz.h"

struct tally {
	uint64_t bytes[_EXECRUN_STREAM_MAX];
	uint64_t hash[_EXECRUN_STREAM_MAX];
	uint64_t frames_ended;
};

struct reference {
	struct tally t;
	bool bad_stream;          /* a header names an unknown stream */
	unsigned stream;          /* that stream */
	bool between;             /* the input ends between frames */
};

struct run {
	struct execrun_demux *d;
	struct tally t;
	uint64_t total;
	uint64_t cap;             /* the sink refuses once total would pass it */
	uint64_t frame_len;       /* the current frame's length (from its header) */
	uint64_t frame_got;       /* its bytes delivered */
	bool stopped;             /* the sink returned an error */
};

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void reference_walk(const uint8_t *data, size_t size, struct reference *ref)
{
	size_t pos = 0;

	*ref = (struct reference){ .between = true };
	for (unsigned s = 0; s < _EXECRUN_STREAM_MAX; s++)
		ref->t.hash[s] = FUZZ_HASH_INIT;
	while (pos < size) {
		unsigned stream;
		uint32_t len;
		size_t k;

		if (size - pos < EXECRUN_FRAME_HEADER_LEN) {
			ref->between = false;
			return;
		}
		stream = data[pos];
		len = be32(data + pos + 4);
		pos += EXECRUN_FRAME_HEADER_LEN;
		if (stream >= _EXECRUN_STREAM_MAX) {
			ref->bad_stream = true;
			ref->stream = stream;
			return;
		}
		k = size - pos < len ? size - pos : len;
		ref->t.bytes[stream] += k;
		ref->t.hash[stream] = fuzz_hash(ref->t.hash[stream], data + pos, k);
		pos += k;
		if (k < len) {
			ref->between = false;
			return;
		}
		ref->t.frames_ended++;
	}
}

static int sink(unsigned stream, const uint8_t *p, size_t n, bool frame_end, void *arg)
{
	struct run *r = arg;

	require(!r->stopped, "the sink called after it refused");
	require(stream < _EXECRUN_STREAM_MAX, "an unknown stream delivered");
	require(stream == r->d->stream, "a chunk of another stream than the frame's");
	require(n > 0 || frame_end, "an empty chunk that ends no frame");
	if (r->frame_got == 0 && r->frame_len == 0)
		r->frame_len = (uint64_t)n + r->d->left;     /* the frame's first chunk */
	r->frame_got += n;
	require(r->frame_got + r->d->left == r->frame_len, "a frame's bytes do not add up");
	require(frame_end == (r->d->left == 0), "frame_end before or after the frame's end");
	if (r->total + n > r->cap) {
		r->stopped = true;
		return -EFBIG;
	}
	r->total += n;
	r->t.bytes[stream] += n;
	r->t.hash[stream] = fuzz_hash(r->t.hash[stream], p, n);
	if (frame_end) {
		r->t.frames_ended++;
		r->frame_len = r->frame_got = 0;
	}
	return 0;
}

static void fuzz_chunked(const uint8_t *data, size_t size, const struct reference *ref, uint64_t cap,
			 uint32_t seed)
{
	struct execrun_demux d = { 0 };
	struct run r = { .d = &d, .cap = cap };
	struct fuzz_chunker ch;
	size_t off = 0;
	int rc = 0;
	uint64_t ref_total = 0;

	for (unsigned s = 0; s < _EXECRUN_STREAM_MAX; s++) {
		r.t.hash[s] = FUZZ_HASH_INIT;
		ref_total += ref->t.bytes[s];
	}
	fuzz_chunker_init(&ch, seed);
	while (off < size && rc == 0) {
		size_t n = fuzz_chunk_next(&ch, size - off);

		rc = execrun_demux_feed(&d, data + off, n, sink, &r);
		off += n;
	}
	if (r.stopped) {
		require(rc == -EFBIG, "the sink's error was not returned");
		require(ref_total > cap, "the sink refused under its cap");
		return;
	}
	require(ref_total <= cap, "the sink was not given every byte");
	if (ref->bad_stream) {
		require(rc == -EPROTO && d.stream == ref->stream, "an unknown stream not refused");
		require(off == size || rc < 0, "fed on after the refusal");
	} else {
		require(rc == 0, "a well-formed stream refused");
		require(execrun_demux_is_between_frames(&d) == ref->between, "between frames is wrong");
	}
	for (unsigned s = 0; s < _EXECRUN_STREAM_MAX; s++)
		require(r.t.bytes[s] == ref->t.bytes[s] && r.t.hash[s] == ref->t.hash[s],
			"a stream's bytes differ from the frames'");
	require(r.t.frames_ended == ref->t.frames_ended, "frames ended a different number of times");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reference ref;
	uint32_t seed = (uint32_t)size;

	if (size > 0)
		seed ^= (uint32_t)data[size - 1] << 16 | (uint32_t)data[0] << 8;
	reference_walk(data, size, &ref);
	fuzz_chunked(data, size, &ref, UINT64_MAX, seed);
	/* Again with a cap of the input's choosing: the output cap's path. */
	fuzz_chunked(data, size, &ref, size ? data[size / 2] * 4u : 0, seed + 1);
	return 0;
}
