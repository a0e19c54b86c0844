/* cleanup.h — function-local ownership helpers (GNU C cleanup attribute).
 *
 * _cleanup_free_ frees with free(); _cleanup_close_ closes an fd >= 0;
 * _cleanup_(foo_freep) calls foo_freep(&var). TAKE_PTR hands ownership out.
 * Never put any of these on a borrowed pointer. */
#ifndef MSB_CLEANUP_H
#define MSB_CLEANUP_H

#include <stdlib.h>
#include <unistd.h>
#include <errno.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void freep(void *p)
{
	free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		(void)close(*fd);
		errno = saved;
	}
}
#define _cleanup_close_ _cleanup_(closep)

#include <stdio.h>
static inline void fclosep(FILE **f)
{
	if (*f)
		(void)fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Returns the pointer and sets the variable to NULL, so its cleanup does nothing. */
#define TAKE_PTR(p) __extension__ ({                          \
		__typeof__(p) _taken_ = (p);    \
		(p) = NULL;                     \
		_taken_;                        \
	})

#define TAKE_FD(fd) __extension__ ({                          \
		int _taken_fd_ = (fd);          \
		(fd) = -1;                      \
		_taken_fd_;                     \
	})

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

#endif
