/* identity.h — the guest's uid and gid (behaviour-docker §2.1 step 13):
 * the numbers a write stamps on what it lands, so the guest program owns
 * it. Pure: parsing only. The daemon reads Config.User from an inspect,
 * /etc/passwd and /etc/group through the archive plane (under the freeze),
 * and as a last resort runs `id -u` / `id -g` (execrun.h).
 *
 * Rules, in order:
 *   ""  or "0:0"          → 0:0, resolved
 *   ":G"                  → uid 0, group half G
 *   numeric halves        → taken as given ("1000:1000", "1000:0")
 *   a named user          → its passwd line (uid, and gid unless a group half is given)
 *   a bare numeric uid    → its gid from the passwd line whose uid matches (first one);
 *                           none → gid still unknown
 *   a named group half    → /etc/group
 *   still unknown         → `id -u` and/or `id -g`, each only for the missing half
 *   uid known, gid not    → gid 0
 *   uid unknown           → unresolved */
#ifndef MSB_IDENTITY_H
#define MSB_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Config.User longer than this is refused (-E2BIG). */
#define IDENTITY_USER_MAX_BYTES 256
/* /etc/passwd and /etc/group bodies read at most this much. */
#define IDENTITY_DB_MAX_BYTES   (64 * 1024)
/* Ids above this are refused as unusable (-ERANGE): (uid_t)-1 means "none". */
#define IDENTITY_ID_MAX         ((unsigned long)UINT32_MAX - 1)

/* One half of Config.User. */
struct identity_half {
	bool present;      /* the half was given (non-empty) */
	bool numeric;      /* all digits: id holds it */
	unsigned long id;
	char name[IDENTITY_USER_MAX_BYTES + 1];   /* when present and not numeric */
};

struct identity_user {
	struct identity_half user;
	struct identity_half group;
};

/* Splits Config.User ("user", "user:group", ":group", "") at the first ':'.
 * An empty half is absent; an all-digits half is numeric. A numeric half
 * over IDENTITY_ID_MAX → -ERANGE; a name with a byte that cannot be in a
 * passwd name (':', '\n', NUL, '/') → -EINVAL (so a second ':' is refused);
 * over IDENTITY_USER_MAX_BYTES → -E2BIG. *ret is written only on success. */
int identity_parse_user(const char *config_user, struct identity_user *ret);

/* The state of a resolution in progress. */
struct identity {
	bool uid_known, gid_known;
	uid_t uid;
	gid_t gid;
};

/* Starts id afresh and applies the numeric facts of u: "" (and ":") → 0:0;
 * an absent user half → uid 0; numeric halves. Returns what is still missing:
 * true when /etc/passwd or /etc/group could help (a named half, or a bare
 * uid without gid). */
bool identity_from_user(const struct identity_user *u, struct identity *id);
/* True when /etc/passwd is needed: a named user, or a numeric uid with no
 * group half (its gid comes from its passwd line). */
bool identity_needs_passwd(const struct identity_user *u, const struct identity *id);
/* True when /etc/group is needed: a named group half still unknown. */
bool identity_needs_group(const struct identity_user *u, const struct identity *id);

/* Looks u's user half up in a passwd body (buf[0..len), not NUL-terminated,
 * lines "name:pw:uid:gid:gecos:home:shell" ending in LF or CRLF, the last
 * one maybe without; a line is used when it has a non-empty name and decimal
 * uid and gid (at most IDENTITY_ID_MAX), other lines are skipped; a name
 * matches exactly; the first matching line wins, so a numeric uid takes the
 * first line with that uid). Does nothing unless identity_needs_passwd().
 * Fills what it finds that id does not know yet (the gid only when u has no
 * group half). 0 whether or not found; -E2BIG (nothing applied) when len is
 * over IDENTITY_DB_MAX_BYTES. */
int identity_apply_passwd(const struct identity_user *u, const char *buf, size_t len,
			  struct identity *id);
/* Looks a named group half up in a group body ("name:pw:gid:members"; the
 * same line rules, a decimal gid required). Does nothing unless
 * identity_needs_group(). 0 whether or not found; -E2BIG as above. */
int identity_apply_group(const struct identity_user *u, const char *buf, size_t len,
			 struct identity *id);
/* The output of `id -u` / `id -g`: digits, optional trailing newline or
 * spaces; anything else or over IDENTITY_ID_MAX → -EINVAL. */
int identity_parse_id_output(const char *buf, size_t len, unsigned long *ret);

/* The real uid and gid of a process from its /proc/<pid>/status body
 * (buf[0..len)): the first field of its "Uid:" and "Gid:" lines (tab or
 * space separated, decimal, at most IDENTITY_ID_MAX). 0, or -EINVAL when
 * either line is missing or malformed. */
int identity_parse_proc_status(const char *buf, size_t len, uid_t *ret_uid, gid_t *ret_gid);

/* Final rule: uid known and gid not → gid 0. Returns true when resolved
 * (uid known). */
bool identity_finish(struct identity *id);

/* ---- the identity fixed for a sandbox ------------------------------------- */

/* Who the guest is, fixed once for a sandbox (issue 17, finding 7): the
 * first resolution stored wins and is never replaced, so a guest that
 * rewrites its /etc/passwd later changes nothing. Every exec passes the
 * numbers to the engine as User "uid:gid", and the local plane acts with
 * the same numbers. */
struct identity_fixed {
	bool known;        /* a resolution was stored */
	bool resolved;     /* false: known to be unresolvable (uid, gid 0) */
	uid_t uid;
	gid_t gid;
};

/* "4294967294:4294967294" and its NUL. */
#define IDENTITY_USER_STRING_MAX 22

/* Stores a resolution into f unless one is already there. An unresolved
 * one is stored as 0:0. Returns true when f was written. */
bool identity_fixed_set(struct identity_fixed *f, bool resolved, uid_t uid, gid_t gid);
/* The engine's User for an exec, "uid:gid", into buf[IDENTITY_USER_STRING_MAX]:
 * 0, or -ENOENT when f is not known or not resolved (then the image's
 * Config.User is left to the engine). */
int identity_fixed_user(const struct identity_fixed *f, char buf[IDENTITY_USER_STRING_MAX]);

#endif
