/* hostlock.h — the host-wide half of the freeze lock (freeze.h).
 *
 * The freeze table keeps this daemon's own freezes apart; this keeps them
 * apart from every other maf-sandboxd on the host. All of them open one lock
 * file (freeze.lock_file), and a daemon that may hold a container frozen
 * holds a one-byte open-file-description lock (fcntl F_OFD_SETLK, F_WRLCK)
 * at that container's offset in it: from before its pause until its unpause
 * has been answered, and for an orphan thaw from before its unpause until
 * the answer. The kernel drops the locks when the daemon dies (the open file
 * description goes), so a lock another process holds is a live daemon's
 * freeze, which an orphan thaw must leave alone; a container still paused
 * with no lock held was left frozen by a dead daemon (or an operator).
 *
 * Offsets: a 64-hex container id maps to the value of its first 15 hex
 * digits (60 bits); any other string to a hash of it cut to the same 60
 * bits. Callers pass the full id the engine gives, so that every daemon
 * computes the same offset. Two containers on one offset (a collision of
 * 60 bits) only make one daemon refuse or wait while the other holds its
 * freeze: a collision can defer a thaw, never lift a freeze.
 *
 * Within this process the locks are counted per offset (an OFD lock never
 * conflicts with its own open file description): two ids on one offset share
 * it, and it is unlocked when the last of them is released.
 *
 * Pure of logging: callers say what a failure means. Not thread-safe (the
 * daemon's one loop). Ownership: hostlock_open() → hostlock_free(). */
#ifndef MSB_HOSTLOCK_H
#define MSB_HOSTLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Offsets are below 1 << HOSTLOCK_OFFSET_BITS. */
#define HOSTLOCK_OFFSET_BITS 60
/* The hex digits of a container id that make its offset (4 bits each). */
#define HOSTLOCK_ID_DIGITS   (HOSTLOCK_OFFSET_BITS / 4)
/* The length of a full container id. */
#define HOSTLOCK_FULL_ID_LEN 64
/* The lock file's mode when it is created, and its directory's. */
#define HOSTLOCK_FILE_MODE   0600
#define HOSTLOCK_DIR_MODE    0755

struct hostlock;

/* Opens (creating it, HOSTLOCK_FILE_MODE, and its directory,
 * HOSTLOCK_DIR_MODE, if missing; never through a link) the lock file at the
 * absolute path, and checks that it takes OFD locks. 0 and *ret (owned), or
 * -errno and *reterr_message (malloc'd: what failed, with the path):
 * -EINVAL (not an absolute path, or not a regular file), the errno of
 * mkdir, open or fcntl. */
int hostlock_open(const char *path, struct hostlock **ret, char **reterr_message);
/* Closes the file, which drops every lock held. NULL-safe; returns NULL. */
struct hostlock *hostlock_free(struct hostlock *h);

/* Takes id's lock without waiting. 0 (also when this process holds its
 * offset already: counted), -EAGAIN when another process holds it, -EINVAL
 * for a NULL or empty id, or the errno of fcntl (-ENOLCK, ...). NULL h: no
 * host lock, every try succeeds. */
int hostlock_try(struct hostlock *h, const char *id);
/* Gives back one hostlock_try of id that returned 0: the byte is unlocked
 * with the last. A release of what is not held, and NULL h, do nothing. */
void hostlock_release(struct hostlock *h, const char *id);

/* The offset of id's byte (see above); 0 for NULL. */
uint64_t hostlock_offset(const char *id);
/* Offsets this process holds (for tests and status). NULL-safe. */
size_t hostlock_held(const struct hostlock *h);
/* The path given to hostlock_open (borrowed). */
const char *hostlock_path(const struct hostlock *h);

#endif
