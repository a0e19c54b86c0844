/* xmalloc.h — small allocations that abort on OOM (the tmux/smtpd choice;
 * safe under systemd Restart=). Large or client-sized buffers must not use
 * these: they go through a checked path with an explicit limit. */
#ifndef MSB_XMALLOC_H
#define MSB_XMALLOC_H

#include <stddef.h>
#include <stdarg.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
