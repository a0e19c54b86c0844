/* egress_image.c — the proxy image: inspect, load from proxyimage.c's
 * archive, inspect again (egress_image.h). */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "docker.h"
#include "domain.h"
#include "egress_image.h"
#include "engine.h"
#include "errmap.h"
#include "log.h"
#include "msb-build.h"
#include "proxyimage.h"
#include "xmalloc.h"

#define EGRESS_IMAGE_REPO PROXYIMAGE_REPO

struct egress_image {
	struct domain *d;
	egress_image_cb *cb;
	void *arg;
	enum egress_image_state state;
	bool verifying;              /* the inspect after a load */
	char *id;                    /* "sha256:..." once READY */
	char want_id[PROXYIMAGE_DIGEST_BYTES]; /* the image ID the installed binary makes */
	void *archive;               /* its archive, from the check until loaded or found current */
	size_t archive_len;
	char *error;
	struct engine_req *req;
};

static const char *image_tag(void)
{
	return PACKAGE_VERSION;
}

/* Tells the owner: code 0, ready; else the error of the ops waiting for it
 * (message NULL: the code's own). */
static void image_tell(struct egress_image *img, int code, const char *message)
{
	struct msb_error err = { 0 };

	if (code == 0) {
		img->cb(NULL, img->arg);
		return;
	}
	if (message)
		msb_error_set(&err, code, NULL, "%s", message);
	else
		msb_error_set(&err, code, NULL, NULL);
	img->cb(&err, img->arg);
	msb_error_clear(&err);
}

/* The request was cancelled (the daemon stops): checked again later. */
static void image_cancelled(struct egress_image *img)
{
	img->state = EGRESS_IMAGE_IDLE;
	image_tell(img, MSB_ERR_SHUTTING_DOWN, NULL);
}

static void image_settle(struct egress_image *img, enum egress_image_state s, char *error)
{
	img->state = s;
	free(img->error);
	img->error = error;
	if (s == EGRESS_IMAGE_READY) {
		log_info("egress: proxy image %s:%s is ready (%.19s); allowlist is enforced", EGRESS_IMAGE_REPO,
			 image_tag(), img->id);
		image_tell(img, 0, NULL);
	} else if (s == EGRESS_IMAGE_FAILED) {
		_cleanup_free_ char *message = xasprintf("the egress proxy image could not be made: %s", error);

		log_warnx("egress: no proxy image, allowlist is not offered: %s", error);
		image_tell(img, MSB_ERR_EGRESS_NOT_ENFORCED, message);
	}
}

/* The engine gave no answer (errmap's code: EngineUnavailable, or
 * EngineTimeout): the image is not known to be unmakeable, so it is checked
 * again at the next acquire or resync; the ops waiting for it fail with
 * the code, and a message of the daemon's own. */
static void image_unanswered(struct egress_image *img, const char *step, int code)
{
	_cleanup_free_ char *message = xasprintf(
		"%s the egress proxy image %s:%s: %s", step, EGRESS_IMAGE_REPO, image_tag(),
		code == MSB_ERR_ENGINE_TIMEOUT ? "the engine did not answer in time; retry the acquire" :
		"the engine could not be reached; the daemon reconnects by itself: retry the acquire once the "
		"engine is back");

	img->state = EGRESS_IMAGE_IDLE;
	img->verifying = false;
	free(TAKE_PTR(img->archive));
	free(TAKE_PTR(img->error));   /* an earlier failure's, no longer the state's */
	image_tell(img, code, message);
}

/* A failed load's stable reason, by docker_image_load's error alone. */
static const char *image_load_reason(int error)
{
	switch (error) {
	case -EIO:
		return "the engine refused it";
	case -ETIMEDOUT:
		return "the engine did not finish within sandbox.pull_timeout_ms";
	case -EPROTO:
	case -EMSGSIZE:
		return "the engine's reply was unusable";
	case -ECONNABORTED:
		return "the engine's connection broke during the load";
	default:
		return "the engine could not be reached";
	}
}

static void image_load_done_cb(int error, const char *message, void *arg)
{
	struct egress_image *img = arg;

	img->req = NULL;
	if (error == -ECANCELED) {
		image_cancelled(img);
		return;
	}
	if (error < 0) {
		log_warnx("egress: loading %s:%s: %s", EGRESS_IMAGE_REPO, image_tag(),
			  message ? message : strerror(-error));
		if (error != -EIO && error != -ETIMEDOUT && error != -EPROTO && error != -EMSGSIZE &&
		    error != -ECONNABORTED) {
			/* docker_image_load's "no answer" */
			image_unanswered(img, "could not load", MSB_ERR_ENGINE_UNAVAILABLE);
			return;
		}
		image_settle(img, EGRESS_IMAGE_FAILED, xasprintf("loading %s:%s failed: %s (the daemon's log "
								  "has why)", EGRESS_IMAGE_REPO, image_tag(),
								  image_load_reason(error)));
		return;
	}
	img->verifying = true;
	img->state = EGRESS_IMAGE_IDLE;
	egress_image_check(img);
}

/* The image archive of the installed binary for this engine's architecture
 * (proxyimage_archive); fills img->want_id. */
static int image_archive(struct egress_image *img, void **tar, size_t *len, char **err)
{
	const struct engine_info *info = engine_get_info(img->d->engine);
	_cleanup_free_ char *tag = xasprintf("%s:%s", EGRESS_IMAGE_REPO, image_tag());

	const char *arch = info && info->arch && *info->arch ? info->arch : "amd64";

	return proxyimage_archive(img->d->config->egress_proxy_binary, arch, tag, tar, len, img->want_id, err);
}

static void image_inspect_cb(const struct docker_reply *r, void *arg)
{
	struct egress_image *img = arg;
	const char *id = json_string_value(json_object_get(r->body, "Id"));
	_cleanup_free_ void *tar = TAKE_PTR(img->archive);
	size_t len = img->archive_len;
	int ret;

	img->req = NULL;
	if (r->error == -ECANCELED) {
		image_cancelled(img);
		return;
	}
	if (r->error || (r->status != 200 && r->status != 404)) {
		struct msb_error err = { 0 };

		log_warnx("egress: inspecting %s:%s: %s", EGRESS_IMAGE_REPO, image_tag(),
			  r->message ? r->message : r->error ? strerror(-r->error) : "engine refused");
		errmap_docker(r, "inspecting the egress proxy image", &err);
		if (err.code == MSB_ERR_ENGINE_UNAVAILABLE || err.code == MSB_ERR_ENGINE_TIMEOUT) {
			image_unanswered(img, "could not check", err.code);
			msb_error_clear(&err);
			return;
		}
		msb_error_clear(&err);
		image_settle(img, EGRESS_IMAGE_FAILED, r->error ?
			     xasprintf("inspecting %s:%s failed: the engine could not be reached", EGRESS_IMAGE_REPO,
				       image_tag()) :
			     xasprintf("inspecting %s:%s failed: the engine answered HTTP %ld", EGRESS_IMAGE_REPO,
				       image_tag(), r->status));
		return;
	}
	if (r->status == 200 && id && strcmp(id, img->want_id) == 0) {
		free(img->id);
		img->id = xstrdup(id);
		img->verifying = false;
		image_settle(img, EGRESS_IMAGE_READY, NULL);
		return;
	}
	if (img->verifying) {
		img->verifying = false;
		image_settle(img, EGRESS_IMAGE_FAILED, xasprintf("the loaded %s:%s is %s, not %s", EGRESS_IMAGE_REPO,
								  image_tag(), id ? id : "absent", img->want_id));
		return;
	}
	/* Absent or another binary's: load ours (the tag moves to it). */
	assert(tar);
	log_info("egress: loading the proxy image %s:%s (%.19s)", EGRESS_IMAGE_REPO, image_tag(), img->want_id);
	img->state = EGRESS_IMAGE_LOAD;
	ret = docker_image_load(img->d->engine, tar, len, img->d->config->pull_timeout_ms, NULL,
				image_load_done_cb, img, &img->req);
	if (ret == -ENOTCONN) {   /* not sent: nothing says the image cannot be made */
		log_warnx("egress: loading %s:%s: the engine is not reachable", EGRESS_IMAGE_REPO, image_tag());
		image_unanswered(img, "could not load", MSB_ERR_ENGINE_UNAVAILABLE);
	} else if (ret < 0) {    /* the request cannot be made (the archive's size): for good */
		image_settle(img, EGRESS_IMAGE_FAILED, xasprintf("cannot load the proxy image: the request "
								  "could not be made (%s)", strerror(-ret)));
	}
}

void egress_image_check(struct egress_image *img)
{
	_cleanup_free_ char *err = NULL, *ref = NULL;
	int r;

	if (img->state == EGRESS_IMAGE_INSPECT || img->state == EGRESS_IMAGE_LOAD ||
	    img->state == EGRESS_IMAGE_READY)
		return;
	if (!img->verifying) {
		/* The ID of what the installed binary makes now (the archive is
		 * kept for the load, should the engine not have it). */
		free(TAKE_PTR(img->archive));
		if (image_archive(img, &img->archive, &img->archive_len, &err) < 0) {
			image_settle(img, EGRESS_IMAGE_FAILED, TAKE_PTR(err));
			return;
		}
	}
	ref = xasprintf("%s:%s", EGRESS_IMAGE_REPO, image_tag());
	img->state = EGRESS_IMAGE_INSPECT;
	r = docker_image_inspect(img->d->engine, ref, image_inspect_cb, img, &img->req);
	if (r < 0) {
		img->state = EGRESS_IMAGE_IDLE;
		img->req = NULL;
		img->verifying = false;
		free(TAKE_PTR(img->archive));
		free(TAKE_PTR(img->error));   /* an earlier failure's, no longer the state's */
		image_tell(img, MSB_ERR_ENGINE_UNAVAILABLE, "the engine is not reachable to check the egress proxy image");
	}
}

void egress_image_retry(struct egress_image *img)
{
	if (img->state == EGRESS_IMAGE_FAILED)
		img->state = EGRESS_IMAGE_IDLE;
}

void egress_image_forget(struct egress_image *img)
{
	if (img->state != EGRESS_IMAGE_READY)
		return;
	log_warnx("egress: the proxy image %.19s is gone; it is made again at the next acquire", img->id);
	img->state = EGRESS_IMAGE_IDLE;
}

enum egress_image_state egress_image_state(const struct egress_image *img)
{
	return img->state;
}

const char *egress_image_id(const struct egress_image *img)
{
	return img->id;
}

const char *egress_image_error(const struct egress_image *img)
{
	return img->error;
}

json_t *egress_image_status_json(const struct egress_image *img)
{
	static const char *const states[] = {
		[EGRESS_IMAGE_IDLE] = "unchecked", [EGRESS_IMAGE_INSPECT] = "checking",
		[EGRESS_IMAGE_LOAD] = "loading", [EGRESS_IMAGE_READY] = "ready", [EGRESS_IMAGE_FAILED] = "failed",
	};
	char ref[96];

	snprintf(ref, sizeof(ref), "%s:%s", EGRESS_IMAGE_REPO, image_tag());
	return json_pack("{s:s, s:s, s:s?, s:s?}", "ref", ref, "state", states[img->state], "id", img->id,
			 "error", img->error);
}

struct egress_image *egress_image_new(struct domain *d, egress_image_cb *cb, void *arg)
{
	struct egress_image *img = xcalloc(1, sizeof(*img));

	img->d = d;
	img->cb = cb;
	img->arg = arg;
	return img;
}

struct egress_image *egress_image_free(struct egress_image *img)
{
	if (!img)
		return NULL;
	if (img->req)
		engine_req_cancel(img->req);
	free(img->id);
	free(img->error);
	free(img->archive);
	free(img);
	return NULL;
}
