/* fuzz.h — what the libFuzzer targets share: the entry point's prototype,
 * the invariant check, a chunker that cuts an input into small pieces the
 * same way on every run, and jansson's hash seed pinned so a run replays
 * exactly. Header-only: each target is one .c file plus the code under test. */
#ifndef MSB_FUZZ_H
#define MSB_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: say which, and abort (libFuzzer keeps the input). */
#define require(ok, what)                                                                     \
	do {                                                                                  \
		if (!(ok)) {                                                                  \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, what); \
			abort();                                                              \
		}                                                                             \
	} while (0)

/* jansson seeds its hash from /dev/urandom on first use; a fixed seed keeps
 * a run reproducible. Call before any jansson object is made. */
static inline void fuzz_json_seed(void)
{
	static bool seeded;

	if (!seeded) {
		json_object_seed(0x6d736221);
		seeded = true;
	}
}

/* Cuts a stream into chunks: sizes come from xorshift32 seeded by the
 * caller (so the fuzzer's mutations move the cut points), mostly 1..16
 * bytes, now and then up to 1 KiB. */
struct fuzz_chunker {
	uint32_t state;
};

static inline void fuzz_chunker_init(struct fuzz_chunker *c, uint32_t seed)
{
	c->state = seed * 2654435761u + 0x9e3779b9u;
	if (c->state == 0)
		c->state = 1;
}

static inline size_t fuzz_chunk_next(struct fuzz_chunker *c, size_t left)
{
	uint32_t x = c->state;
	size_t n;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	c->state = x;
	n = (x & 0xf0) == 0xf0 ? (size_t)(x >> 8) % 1024 + 1 : (size_t)(x & 0xf) + 1;
	return n < left ? n : left;
}

/* FNV-1a over bytes, to compare streams cheaply. */
static inline uint64_t fuzz_hash(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}
#define FUZZ_HASH_INIT 0xcbf29ce484222325ull

#endif
