/* hostlock.c — the host-wide freeze lock (see hostlock.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "hostlock.h"
#include "xmalloc.h"

#define HOSTLOCK_OFFSET_MASK ((UINT64_C(1) << HOSTLOCK_OFFSET_BITS) - 1)
/* FNV-1a, 64 bits. */
#define FNV_OFFSET_BASIS UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME        UINT64_C(0x100000001b3)

/* One offset this process holds, with how many ids hold it. */
struct hostlock_slot {
	uint64_t offset;
	unsigned count;
};

struct hostlock {
	int fd;
	char *path;
	struct hostlock_slot *slots;
	size_t n_slots;
};

/* ---- offsets ---------------------------------------------------------------- */

static bool id_is_full(const char *id)
{
	size_t i;

	for (i = 0; i < HOSTLOCK_FULL_ID_LEN; i++)
		if (!isxdigit((unsigned char)id[i]))
			return false;
	return id[i] == '\0';
}

static unsigned hex_value(char c)
{
	c = (char)tolower((unsigned char)c);
	return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

uint64_t hostlock_offset(const char *id)
{
	uint64_t v;

	if (!id)
		return 0;
	if (id_is_full(id)) {
		v = 0;
		for (size_t i = 0; i < HOSTLOCK_ID_DIGITS; i++)
			v = v << 4 | hex_value(id[i]);
		return v;
	}
	v = FNV_OFFSET_BASIS;
	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		v = (v ^ *p) * FNV_PRIME;
	return v & HOSTLOCK_OFFSET_MASK;
}

/* ---- the file --------------------------------------------------------------- */

/* Makes the directory of path if it is missing (only the last level). */
static int make_parent(const char *path, char **reterr_message)
{
	_cleanup_free_ char *dir = xstrdup(path);
	char *slash = strrchr(dir, '/');

	if (slash == dir)
		return 0;   /* in "/" */
	*slash = '\0';
	if (mkdir(dir, HOSTLOCK_DIR_MODE) < 0 && errno != EEXIST) {
		int r = -errno;

		*reterr_message = xasprintf("cannot create the directory %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

static int lock_byte(int fd, short type, uint64_t offset, int cmd)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)offset, .l_len = 1,
	};

	return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

int hostlock_open(const char *path, struct hostlock **ret, char **reterr_message)
{
	_cleanup_close_ int fd = -1;
	struct hostlock *h;
	struct stat st;
	int r;

	if (!path || path[0] != '/' || path[strlen(path) - 1] == '/') {
		*reterr_message = xasprintf("the freeze lock file must be an absolute file path, not \"%s\"",
					    path ? path : "");
		return -EINVAL;
	}
	r = make_parent(path, reterr_message);
	if (r < 0)
		return r;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, HOSTLOCK_FILE_MODE);
	if (fd < 0) {
		r = -errno;
		*reterr_message = xasprintf("cannot open %s: %s", path,
					    r == -ELOOP ? "it is a symbolic link" : strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		*reterr_message = xasprintf("%s is not a regular file", path);
		return -EINVAL;
	}
	/* A kernel or file system without OFD locks says so here, not at the
	 * first freeze. */
	{
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };

		if (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
			r = -errno;
			*reterr_message = xasprintf("%s does not take open-file-description locks "
						    "(F_OFD_GETLK): %s", path, strerror(-r));
			return r;
		}
	}
	h = xcalloc(1, sizeof(*h));
	h->fd = TAKE_FD(fd);
	h->path = xstrdup(path);
	*ret = h;
	return 0;
}

struct hostlock *hostlock_free(struct hostlock *h)
{
	if (!h)
		return NULL;
	if (h->fd >= 0)
		close(h->fd);
	free(h->slots);
	free(h->path);
	free(h);
	return NULL;
}

const char *hostlock_path(const struct hostlock *h)
{
	return h ? h->path : NULL;
}

size_t hostlock_held(const struct hostlock *h)
{
	return h ? h->n_slots : 0;
}

/* ---- locks ------------------------------------------------------------------ */

static struct hostlock_slot *slot_find(struct hostlock *h, uint64_t offset)
{
	for (size_t i = 0; i < h->n_slots; i++)
		if (h->slots[i].offset == offset)
			return &h->slots[i];
	return NULL;
}

int hostlock_try(struct hostlock *h, const char *id)
{
	struct hostlock_slot *s;
	uint64_t offset;
	int r;

	if (!id || !*id)
		return -EINVAL;
	if (!h)
		return 0;
	offset = hostlock_offset(id);
	s = slot_find(h, offset);
	if (s) {
		s->count++;
		return 0;
	}
	r = lock_byte(h->fd, F_WRLCK, offset, F_OFD_SETLK);
	if (r == -EACCES)
		r = -EAGAIN;    /* POSIX allows either for "held by another" */
	if (r < 0)
		return r;
	h->slots = xrealloc(h->slots, (h->n_slots + 1) * sizeof(*h->slots));
	h->slots[h->n_slots++] = (struct hostlock_slot){ .offset = offset, .count = 1 };
	return 0;
}

void hostlock_release(struct hostlock *h, const char *id)
{
	struct hostlock_slot *s;

	if (!h || !id)
		return;
	s = slot_find(h, hostlock_offset(id));
	if (!s || --s->count > 0)
		return;
	/* Cannot fail on a byte we hold (and closing the file drops it anyway). */
	(void)lock_byte(h->fd, F_UNLCK, s->offset, F_OFD_SETLK);
	*s = h->slots[--h->n_slots];
}
