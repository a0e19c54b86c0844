#include <errno.h>
#include <string.h>

#include "frame.h"
#include "jsonfast.h"
#include "xmalloc.h"

void frame_buf_init(struct frame_buf *fb, size_t max)
{
	*fb = (struct frame_buf){ .max = max };
}

void frame_buf_release(struct frame_buf *fb)
{
	free(fb->data);
	*fb = (struct frame_buf){ .max = fb->max };
}

static void frame_buf_compact(struct frame_buf *fb)
{
	if (fb->start == 0)
		return;
	memmove(fb->data, fb->data + fb->start, fb->len - fb->start);
	fb->len -= fb->start;
	fb->start = 0;
}

int frame_buf_append(struct frame_buf *fb, const void *p, size_t n)
{
	size_t need;

	if (n == 0)
		return 0;
	frame_buf_compact(fb);
	need = fb->len + n + 1;
	if (need > fb->cap) {
		size_t cap = fb->cap ? fb->cap : 4096;

		while (cap < need)
			cap *= 2;
		fb->data = xrealloc(fb->data, cap);
		fb->cap = cap;
	}
	memcpy(fb->data + fb->len, p, n);
	fb->len += n;
	fb->data[fb->len] = '\0';
	/* Enforce the limit on the unterminated tail while bytes arrive. */
	{
		const char *lf = memrchr(p, '\n', n);

		fb->tail = lf ? n - (size_t)(lf - (const char *)p) - 1 : fb->tail + n;
	}
	if (fb->tail > fb->max)
		return -EMSGSIZE;
	return 0;
}

static bool line_is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

/* After a large frame was taken, the few bytes that follow it (the start of
 * the next frame) move to a buffer sized for them: the capacity is never
 * more than 4 × what is pending (or MSB_FRAME_BUF_KEEP_BYTES) once a frame
 * has left, so a connection is never charged less than it holds. The last
 * frame handed out is invalidated here, as documented (the next call). */
static void frame_buf_shrink(struct frame_buf *fb)
{
	size_t pending = fb->len - fb->start, cap = 4096;

	if (fb->cap <= MSB_FRAME_BUF_KEEP_BYTES || pending == 0 || pending >= fb->cap / 4)
		return;
	while (cap < 2 * (pending + 1))
		cap *= 2;
	if (cap < MSB_FRAME_BUF_KEEP_BYTES)
		cap = MSB_FRAME_BUF_KEEP_BYTES;
	if (cap >= fb->cap)
		return;
	frame_buf_compact(fb);
	fb->data = xrealloc(fb->data, cap);
	fb->cap = cap;
}

int frame_buf_next(struct frame_buf *fb, const char **ret_line, size_t *ret_len)
{
	frame_buf_shrink(fb);
	for (;;) {
		size_t avail = fb->len - fb->start;
		char *base, *lf;
		size_t n;

		/* Before forming base: data is NULL until the first append. */
		if (avail == 0) {
			fb->start = fb->len = fb->scanned = fb->tail = 0;
			if (fb->cap > MSB_FRAME_BUF_KEEP_BYTES) {
				free(fb->data);
				fb->data = NULL;
				fb->cap = 0;
			}
			return 0;
		}
		base = fb->data + fb->start;
		lf = memchr(base + fb->scanned, '\n', avail - fb->scanned);
		if (!lf) {
			fb->scanned = avail;
			return avail > fb->max ? -EMSGSIZE : 0;
		}
		n = (size_t)(lf - base);
		if (n > fb->max)
			return -EMSGSIZE;
		fb->start += n + 1;
		fb->scanned = 0;
		if (n > 0 && base[n - 1] == '\r')
			n--;
		if (line_is_blank(base, n))
			continue;
		base[n] = '\0';
		*ret_line = base;
		*ret_len = n;
		return 1;
	}
}

void frame_buf_drop_partial(struct frame_buf *fb)
{
	fb->len -= fb->tail;
	fb->tail = 0;
	if (fb->scanned > fb->len - fb->start)
		fb->scanned = fb->len - fb->start;
	if (fb->data)
		fb->data[fb->len] = '\0';
}

size_t frame_buf_pending(const struct frame_buf *fb)
{
	return fb->len - fb->start;
}

bool frame_buf_in_frame(const struct frame_buf *fb)
{
	return fb->tail > 0;
}

char *frame_encode(const json_t *v, size_t *ret_len)
{
	size_t n;
	/* json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY), with room for the LF. */
	char *s = jsonfast_dump(v, 1, &n);

	if (!s)
		return NULL;
	s[n] = '\n';
	s[n + 1] = '\0';
	*ret_len = n + 1;
	return s;
}
