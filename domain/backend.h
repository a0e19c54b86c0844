/* backend.h — what this backend declares (behaviour-docker §1; PROTOCOL.md
 * daemon.describe): the capabilities, egress modes, isolation scopes and OS
 * families a spec is matched against before anything is made. Docker is
 * the one backend (doc/ARCHITECTURE.md "The backend seam" says what a
 * second one, Kubernetes, would declare and how it would map). */
#ifndef MSB_BACKEND_H
#define MSB_BACKEND_H

#include <stdint.h>

struct domain;

/* Never run_code or snapshot; files_list only where the local file plane
 * serves (the archive API cannot list a directory safely or cheaply).
 * d may be NULL: the capabilities of no particular daemon. */
uint32_t backend_capabilities(const struct domain *d);
/* closed always; allowlist once the egress module is ready (egress.h). */
uint32_t backend_egress_modes(const struct domain *d);
uint32_t backend_scopes(void);
/* posix iff the engine reported Os linux (any case) at its last probe;
 * nothing read → none. */
uint32_t backend_os_families(const struct domain *d);

#endif
