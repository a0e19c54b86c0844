/* egress_image.h — the proxy image (egress.h's first state machine). Built
 * by the daemon from the installed static proxy binary (proxyimage.h: a
 * deterministic `docker save` archive, config included) and loaded through
 * the engine as maf-sandbox-egress-proxy:<version>. The same binary always
 * gives the same image ID, so an image already there is current when its ID
 * is the one we compute.
 *
 *   IDLE → INSPECT ─ current ─────────→ READY
 *             └ absent/stale → LOAD → INSPECT → READY | FAILED
 *   (FAILED and IDLE are retried at the next resync or allowlisted acquire)
 *
 * Every end of a check is told to the owner (egress.c), whose ops waiting
 * for the image go on or fail with the error given. */
#ifndef MSB_EGRESS_IMAGE_H
#define MSB_EGRESS_IMAGE_H

#include <jansson.h>

#include "errors.h"

enum egress_image_state {
	EGRESS_IMAGE_IDLE,        /* not checked yet, or to be checked again */
	EGRESS_IMAGE_INSPECT,
	EGRESS_IMAGE_LOAD,
	EGRESS_IMAGE_READY,
	EGRESS_IMAGE_FAILED,      /* retried at the next resync or allowlisted acquire */
};

struct domain;
struct egress_image;

/* A check ended: err NULL when the image is ready, else why an acquire
 * waiting for it fails (SandboxEgressNotEnforced: it could not be made;
 * EngineUnavailable: the check could not be asked; ShuttingDown). */
typedef void egress_image_cb(const struct msb_error *err, void *arg);

struct egress_image *egress_image_new(struct domain *d, egress_image_cb *cb, void *arg);
/* Cancels its request (no callback). NULL-safe; returns NULL. */
struct egress_image *egress_image_free(struct egress_image *img);
/* Starts a check unless one is under way or it is ready. The caller has
 * checked that a proxy binary is configured. The callback may fire inside. */
void egress_image_check(struct egress_image *img);
/* A FAILED image is checked again at the next egress_image_check. */
void egress_image_retry(struct egress_image *img);
/* The READY image was removed behind our back: checked (and loaded) again
 * at the next egress_image_check. */
void egress_image_forget(struct egress_image *img);

enum egress_image_state egress_image_state(const struct egress_image *img);
/* "sha256:..." of the image last found READY (kept through a forget), else NULL. */
const char *egress_image_id(const struct egress_image *img);
/* Why it FAILED (the daemon's words, no engine text), else NULL. */
const char *egress_image_error(const struct egress_image *img);
/* daemon.status's "egress"."image": {"ref", "state", "id", "error"}. New reference. */
json_t *egress_image_status_json(const struct egress_image *img);

#endif
