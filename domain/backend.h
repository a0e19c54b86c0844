/* backend.h — the backend seam (doc/ARCHITECTURE.md "The backend seam").
 *
 * What the domain asks of a sandbox backend, and which module gives it for
 * Docker, the one backend today:
 *   declarations (capabilities, egress modes, scopes, OS families)  here
 *   create, start (the image, the pull)                   acquire.c's engine steps
 *   get (inspect), list and watch by our labels            registry_sync.c, registry.c
 *   stop, remove (workload, proxy, network)                dispose.c
 *   exec with a deadline, an output cap, stdin             exec/execrun.c
 *   kill what an exec left (its init, its pid, a freeze)   exec/execend.c
 *   freeze (pause/unpause), which the archive plane needs  freeze.c, hostlock.c
 *   the file planes it offers                              files/plane_archive.c, files/plane_local.c
 *   the egress enforcement it offers                       egress/ (networks, the proxy, its log)
 * Each of those modules talks to engine/docker.h and nothing else does:
 * the rest of the domain (the file front end, paths, tarball, names,
 * identity, the reap plan) and the daemon see only the modules' own
 * interfaces. A second backend (Kubernetes, a later issue) replaces those
 * modules behind the same interfaces; the mapping is in the document.
 *
 * The declarations, which a spec is matched against before anything is
 * made (behaviour-docker §1; PROTOCOL.md daemon.describe): */
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
