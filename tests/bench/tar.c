/* tar.c — the little tar the bench needs: ustar entries for a write (the
 * floor's PUT body, the seed's `docker cp -` stdin), and the first entry of
 * a stream (a stat's header, a read's content). Not a general reader: the
 * entries the engine sends for the bench's short ASCII paths. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xmalloc.h"

#define TAR_NAME_MAX  100
#define TAR_OFF_NAME  0
#define TAR_OFF_MODE  100
#define TAR_OFF_UID   108
#define TAR_OFF_GID   116
#define TAR_OFF_SIZE  124
#define TAR_OFF_MTIME 136
#define TAR_OFF_CHK   148
#define TAR_OFF_TYPE  156
#define TAR_OFF_LINK  157
#define TAR_OFF_MAGIC 257

static void tar_reserve(struct tar_buf *t, size_t more)
{
	size_t cap = t->cap ? t->cap : 4 * TAR_BLOCK;

	if (t->len + more <= t->cap)
		return;
	while (cap < t->len + more)
		cap *= 2;
	t->data = xrealloc(t->data, cap);
	t->cap = cap;
}

static void octal(uint8_t *field, size_t width, uint64_t v)
{
	/* width - 1 digits and a NUL, as GNU tar writes them */
	for (size_t i = width - 1; i-- > 0; v >>= 3)
		field[i] = (uint8_t)('0' + (v & 7));
	field[width - 1] = '\0';
}

static int tar_header_link(struct tar_buf *t, const char *name, char type, unsigned mode, unsigned uid,
			   unsigned gid, uint64_t size, const char *link)
{
	size_t len = strlen(name), llen = link ? strlen(link) : 0;
	uint8_t *h;
	unsigned sum = 0;

	if (len == 0 || len >= TAR_NAME_MAX || llen >= TAR_NAME_MAX)
		return -1;
	tar_reserve(t, TAR_BLOCK);
	h = t->data + t->len;
	memset(h, 0, TAR_BLOCK);
	memcpy(h + TAR_OFF_NAME, name, len);
	octal(h + TAR_OFF_MODE, 8, mode);
	octal(h + TAR_OFF_UID, 8, uid);
	octal(h + TAR_OFF_GID, 8, gid);
	octal(h + TAR_OFF_SIZE, 12, size);
	octal(h + TAR_OFF_MTIME, 12, 0);
	h[TAR_OFF_TYPE] = (uint8_t)type;
	if (llen)
		memcpy(h + TAR_OFF_LINK, link, llen);
	memcpy(h + TAR_OFF_MAGIC, "ustar\0" "00", 8);
	memset(h + TAR_OFF_CHK, ' ', 8);
	for (size_t i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	octal(h + TAR_OFF_CHK, 7, sum);
	h[TAR_OFF_CHK + 7] = ' ';
	t->len += TAR_BLOCK;
	return 0;
}

static int tar_header(struct tar_buf *t, const char *name, char type, unsigned mode, unsigned uid,
		      unsigned gid, uint64_t size)
{
	return tar_header_link(t, name, type, mode, uid, gid, size, NULL);
}

int tar_add_hardlink(struct tar_buf *t, const char *name, const char *target, unsigned mode, unsigned uid,
		     unsigned gid)
{
	return tar_header_link(t, name, '1', mode, uid, gid, 0, target);
}

int tar_add_dir(struct tar_buf *t, const char *name, unsigned mode, unsigned uid, unsigned gid)
{
	char n[TAR_NAME_MAX + 1];
	size_t len = strlen(name);

	if (len + 2 > sizeof(n))
		return -1;
	memcpy(n, name, len + 1);
	if (len && n[len - 1] != '/')
		memcpy(n + len, "/", 2);
	return tar_header(t, n, '5', mode, uid, gid, 0);
}

int tar_add_file(struct tar_buf *t, const char *name, const void *data, size_t len, unsigned mode,
		 unsigned uid, unsigned gid)
{
	size_t padded = (len + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;

	if (tar_header(t, name, '0', mode, uid, gid, len) < 0)
		return -1;
	tar_reserve(t, padded);
	if (len)
		memcpy(t->data + t->len, data, len);
	memset(t->data + t->len + len, 0, padded - len);
	t->len += padded;
	return 0;
}

void tar_finish(struct tar_buf *t)
{
	tar_reserve(t, 2 * TAR_BLOCK);
	memset(t->data + t->len, 0, 2 * TAR_BLOCK);
	t->len += 2 * TAR_BLOCK;
}

void tar_buf_release(struct tar_buf *t)
{
	free(t->data);
	*t = (struct tar_buf){ 0 };
}

/* ---- reading ------------------------------------------------------------------ */

static bool parse_number(const uint8_t *f, size_t width, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		/* GNU base-256 */
		v = f[0] & 0x7f;
		for (i = 1; i < width; i++)
			v = (v << 8) | f[i];
		*ret = v;
		return true;
	}
	while (i < width && f[i] == ' ')
		i++;
	for (; i < width && f[i] >= '0' && f[i] <= '7'; i++)
		v = (v << 3) | (uint64_t)(f[i] - '0');
	if (i < width && f[i] != '\0' && f[i] != ' ')
		return false;
	*ret = v;
	return true;
}

static bool block_is_zero(const uint8_t *b)
{
	for (size_t i = 0; i < TAR_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

static void reader_header(struct tar_reader *r)
{
	uint64_t size;
	char type = (char)r->hdr[TAR_OFF_TYPE];

	r->hdr_len = 0;
	if (block_is_zero(r->hdr) || !parse_number(r->hdr + TAR_OFF_SIZE, 12, &size)) {
		r->bad = true;   /* no entry at all, or a broken header */
		return;
	}
	if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
		r->skip = (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
		return;
	}
	r->ent.type = type ? type : '0';
	r->ent.size = size;
	r->ent.have = true;
	if (r->want_body && r->ent.type == '0') {
		r->body_left = size;
		r->out_cap = size ? size : 1;
		r->out = xmalloc(r->out_cap);
	}
}

bool tar_reader_feed(struct tar_reader *r, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len && !r->bad && !tar_reader_done(r)) {
		size_t n;

		if (r->skip) {
			n = r->skip < len ? (size_t)r->skip : len;
			r->skip -= n;
		} else if (r->ent.have) {
			n = r->body_left < len ? (size_t)r->body_left : len;
			memcpy(r->out + r->out_len, p, n);
			r->out_len += n;
			r->body_left -= n;
		} else {
			n = TAR_BLOCK - r->hdr_len < len ? TAR_BLOCK - r->hdr_len : len;
			memcpy(r->hdr + r->hdr_len, p, n);
			r->hdr_len += n;
			if (r->hdr_len == TAR_BLOCK)
				reader_header(r);
		}
		p += n;
		len -= n;
	}
	return !r->bad;
}

bool tar_reader_done(const struct tar_reader *r)
{
	return r->ent.have && r->body_left == 0;
}

void tar_reader_release(struct tar_reader *r)
{
	free(r->out);
	*r = (struct tar_reader){ 0 };
}
