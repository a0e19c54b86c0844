/* frame.h — line framing: one compact JSON object per LF-terminated line.
 *
 * struct frame_buf accumulates bytes as they arrive and hands out complete
 * frames. The limit is enforced while bytes arrive: as soon as the frame
 * under way (bytes with no LF yet) exceeds `max`, append fails, so a peer
 * can never make us hold more than max (+ one read) bytes of one frame.
 * A trailing CR before the LF is dropped; blank lines are skipped.
 * No I/O, no logging. */
#ifndef MSB_FRAME_H
#define MSB_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

struct frame_buf {
	char *data;
	size_t len;      /* bytes held */
	size_t cap;
	size_t start;    /* first byte of the frame under way */
	size_t scanned;  /* bytes from start known to hold no LF */
	size_t tail;     /* bytes after the last LF held */
	size_t max;      /* frame limit, LF excluded */
};

/* An emptied buffer bigger than this gives its memory back, so an idle
 * connection does not keep the largest frame it ever received; one that
 * still holds a few bytes after a large frame shrinks to 4 × them (at
 * least this), so its capacity follows what is counted as pending. */
#define MSB_FRAME_BUF_KEEP_BYTES (64 * 1024)

void frame_buf_init(struct frame_buf *fb, size_t max);
/* Frees the buffer; the struct may be reused after frame_buf_init. */
void frame_buf_release(struct frame_buf *fb);

/* Appends bytes. Returns 0, or -EMSGSIZE when the frame under way is now
 * longer than max (the buffer is then unusable: close the stream). */
int frame_buf_append(struct frame_buf *fb, const void *p, size_t n);

/* Takes the next complete frame. Returns 1 and points *ret_line and *ret_len at
 * it (borrowed, NUL-terminated, valid until the next append or next call),
 * 0 when no complete frame is held, -EMSGSIZE when one is over the limit. */
int frame_buf_next(struct frame_buf *fb, const char **ret_line, size_t *ret_len);

/* Discards the bytes after the last LF (part of a frame that will never be
 * finished, e.g. at EOF); complete frames not yet taken stay. */
void frame_buf_drop_partial(struct frame_buf *fb);

/* Bytes held that belong to frames not yet handed out. */
size_t frame_buf_pending(const struct frame_buf *fb);
/* True when part of a frame (bytes after the last LF) is held; complete
 * frames not yet taken do not count. */
bool frame_buf_in_frame(const struct frame_buf *fb);

/* Encodes one JSON value as a frame (compact, LF-terminated). Returns a
 * malloc'd string and its length, or NULL if jansson fails. */
char *frame_encode(const json_t *v, size_t *ret_len);

#endif
