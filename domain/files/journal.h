/* journal.h — the journal of temporaries, read (journal.c; the public
 * replay and forget are fileop.h's). */
#ifndef MSB_FILE_JOURNAL_H
#define MSB_FILE_JOURNAL_H

#include <stddef.h>

/* Entries of container id in the journal jfd no live writer holds (0 when
 * jfd < 0). */
size_t journal_count(int jfd, const char *id);

#endif
