/* egress.c — the allowlist's ensure/teardown state machine (egress.h); its
 * parts: the proxy image (egress_image.c), the subnet pool (egress_pool.c),
 * the decision followers (egress_follow.c). */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>

#include "bridgecheck.h"
#include "cleanup.h"
#include "domain.h"
#include "docker.h"
#include "egress.h"
#include "egress_follow.h"
#include "egress_image.h"
#include "egress_pool.h"
#include "egresslog.h"
#include "endpoint.h"
#include "engine.h"
#include "errmap.h"
#include "log.h"
#include "names.h"
#include "proxyimage.h"
#include "subnet.h"
#include "xmalloc.h"

#define MSB_STR_(x)            #x
#define MSB_STR(x)             MSB_STR_(x)

TAILQ_HEAD(egress_op_list, egress_op);

struct egress {
	struct domain *d;
	struct egress_image *image;
	struct egress_pool *pool;
	struct egress_follow *follow;
	struct egress_op_list ops;
	bool closing;                /* egress_shutdown: start nothing new */
};

/* ---- ensure ops ------------------------------------------------------------ */

enum eop_state {
	EOP_IMAGE_WAIT,
	EOP_NET_INSPECT,
	EOP_NET_LIST,
	EOP_NET_CREATE,
	EOP_NET_VERIFY,
	EOP_PROXY_INSPECT,
	EOP_PROXY_DRAIN,
	EOP_PROXY_REMOVE,
	EOP_PROXY_CREATE,
	EOP_PROXY_CONNECT,
	EOP_PROXY_START,
	EOP_PROXY_READY,
	EOP_ROLLBACK_PROXY,
	EOP_ROLLBACK_NET,
	EOP_DONE,
};

struct egress_op {
	struct egress *eg;
	TAILQ_ENTRY(egress_op) entry;
	enum eop_state state;
	char name[EGRESS_NAME_MAX];
	char net[EGRESS_NAME_MAX];
	char proxy[EGRESS_NAME_MAX];
	char bridge[16];
	json_t *labels;              /* identity labels of network and proxy */
	json_t *key_raw;             /* [scope, thread, agent, call, kind] */
	char *key_v1;
	char *allow;                 /* comma-joined */
	uid_t owner;
	bool fresh;
	bool isolated;               /* gateway_mode isolated, else inhibit_ipv4 */
	struct engine_req *req;
	egress_ensure_cb *cb;
	void *arg;
	struct subnet_block block;
	bool have_block;
	char *net_id;
	bool net_created, net_adopting;
	char *proxy_id;
	bool proxy_created;
	int tries;
	struct msb_error err;
	bool failed;
	struct event *timer;         /* readiness deadline */
	struct event *defer_ev;      /* completes from the loop */
};

static void eop_enter(struct egress_op *op, enum eop_state s);
static void eop_fail(struct egress_op *op);
static void eop_ready_check(struct egress_op *op);

/* ---- small helpers --------------------------------------------------------- */

static struct engine *eg_engine(const struct egress *eg)
{
	return eg->d->engine;
}

/* A proxy binary is configured and installed (executable). */
bool egress_configured(const struct domain *d)
{
	const char *path = d->config->egress_proxy_binary;

	return path && *path && access(path, X_OK) == 0;
}

char *egress_allowlist_off_reason(const struct domain *d)
{
	const char *path = d->config->egress_proxy_binary;
	const struct egress *eg = d->egress;
	const char *error;

	if (!path || !*path)
		return xstrdup("egress.proxy_binary is not set: set it to the path of "
			       "maf-sandbox-egress-proxy (the daemon builds the proxy image from it)");
	if (access(path, X_OK) < 0)
		return xasprintf("egress.proxy_binary %s is not an executable file (%s): install "
				 "maf-sandbox-egress-proxy there, or set egress.proxy_binary to where it is",
				 path, strerror(errno));
	if (!eg)
		return xstrdup("the daemon is starting");
	switch (egress_image_state(eg->image)) {
	case EGRESS_IMAGE_READY:
		return NULL;
	case EGRESS_IMAGE_FAILED:
		error = egress_image_error(eg->image);
		return xasprintf("the egress proxy image could not be made from egress.proxy_binary %s: %s",
				 path, error ? error : "unknown error");
	default:
		return xasprintf("the egress proxy image is being made from egress.proxy_binary %s "
				 "(an allowlist acquire waits for it)", path);
	}
}

bool egress_ready(const struct egress *eg)
{
	return eg && egress_configured(eg->d) && egress_image_state(eg->image) == EGRESS_IMAGE_READY;
}

bool egress_usable(const struct egress *eg)
{
	return eg && egress_configured(eg->d) && egress_image_state(eg->image) != EGRESS_IMAGE_FAILED;
}

uint64_t egress_decisions_published(const struct egress *eg)
{
	return eg ? egress_follow_published(eg->follow) : 0;
}

json_t *egress_status_json(const struct egress *eg)
{
	json_t *o;

	if (!eg || !egress_configured(eg->d))
		return json_pack("{s:b}", "configured", 0);
	o = json_pack("{s:b, s:o}", "configured", 1, "image", egress_image_status_json(eg->image));
	egress_follow_status_add(eg->follow, o);
	return o;
}

bool egress_proxy_ok(const struct egress *eg, const char *name, struct egress_info *info)
{
	return eg && egress_follow_proxy_ok(eg->follow, name, info);
}

int egress_drain(struct egress *eg, const char *proxy_id, egress_drain_cb *cb, void *arg)
{
	return eg ? egress_follow_drain(eg->follow, proxy_id, cb, arg) : -EINVAL;
}

void egress_proxy_removed(struct egress *eg, const char *proxy_id)
{
	if (eg)
		egress_follow_removed(eg->follow, proxy_id);
}

/* Engine major version ("28.0.1" → 28), 0 if unknown. */
static int engine_major(const struct egress *eg)
{
	const struct engine_info *info = engine_get_info(eg_engine(eg));

	return info && info->version ? atoi(info->version) : 0;
}

static bool engine_is_local(const struct egress *eg)
{
	const struct engine_endpoint *ep = engine_get_endpoint(eg_engine(eg));

	return ep && ep->kind == ENGINE_ENDPOINT_UNIX;
}

static bool api_below(const struct egress *eg, const char *v)
{
	const struct engine_info *info = engine_get_info(eg_engine(eg));

	return !info || !info->api_version || engine_api_version_cmp(info->api_version, v) < 0;
}

/* ---- what the parts tell ------------------------------------------------------ */

/* Every op in state fails with err (copied), or goes on to next when err is NULL. */
static void ops_in_state(struct egress *eg, enum eop_state state, const struct msb_error *err,
			 enum eop_state next_state)
{
	struct egress_op *op, *next;

	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state != state)
			continue;
		if (!err) {
			eop_enter(op, next_state);
			continue;
		}
		msb_error_copy(&op->err, err);
		eop_fail(op);
	}
}

/* The image check ended: the ops waiting for it go on, or fail with why
 * (the image's error, and which sandbox's acquire waited for it). */
static void image_checked(const struct msb_error *err, void *arg)
{
	struct egress *eg = arg;
	struct egress_op *op, *next;

	if (!err || !err->message) {
		ops_in_state(eg, EOP_IMAGE_WAIT, err, EOP_NET_INSPECT);
		return;
	}
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state != EOP_IMAGE_WAIT)
			continue;
		msb_error_set(&op->err, err->code, err->data ? json_deep_copy(err->data) : NULL, "egress for %s: %s",
			      op->name, err->message);
		eop_fail(op);
	}
}

/* A listing rebuilt the pool: the blocks ops hold stay marked. */
static void pool_held(struct egress_pool *pool, void *arg)
{
	struct egress *eg = arg;
	struct egress_op *op;

	TAILQ_FOREACH(op, &eg->ops, entry)
		if (op->have_block)
			egress_pool_mark(pool, op->block.subnet);
}

static void eop_fail_engine(struct egress_op *op, const struct docker_reply *r);

/* The networks were listed (or not): the ops waiting for it go on, or fail. */
static void pool_listed(const struct docker_reply *r, void *arg)
{
	struct egress *eg = arg;
	struct egress_op *op, *next;

	if (r->error == 0 && r->status == 200 && json_is_array(r->body)) {
		ops_in_state(eg, EOP_NET_LIST, NULL, EOP_NET_CREATE);
		return;
	}
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state == EOP_NET_LIST)
			eop_fail_engine(op, r);
	}
}

/* A proxy said it is listening: the ops waiting for it are done. */
static void proxy_ready(const char *proxy_id, void *arg)
{
	struct egress *eg = arg;
	struct egress_op *op, *next;

	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (op->state == EOP_PROXY_READY && op->proxy_id && strcmp(op->proxy_id, proxy_id) == 0)
			eop_ready_check(op);
	}
}

void egress_shutdown(struct egress *eg)
{
	struct egress_op *op, *next;

	if (!eg)
		return;
	eg->closing = true;
	egress_follow_close(eg->follow);
	/* Ops waiting on a timer, the image, a listing or a drain get no
	 * cancelled request of their own: end them now (ShuttingDown). */
	for (op = TAILQ_FIRST(&eg->ops); op; op = next) {
		next = TAILQ_NEXT(op, entry);
		if (!op->req && op->state != EOP_DONE) {
			msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
			eop_fail(op);
		}
	}
}

void egress_resync(struct egress *eg)
{
	if (!eg || !egress_configured(eg->d) || eg->closing)
		return;
	egress_image_retry(eg->image);
	egress_image_check(eg->image);
	if (!egress_pool_synced(eg->pool))
		(void)egress_pool_list(eg->pool);
	egress_follow_recover(eg->follow);
}

/* ---- ensure: the state machine -------------------------------------------- */

static void eop_docker_cb(const struct docker_reply *r, void *arg);
static void eop_drained_cb(int error, void *arg);

static void eop_free(struct egress_op *op)
{
	TAILQ_REMOVE(&op->eg->ops, op, entry);
	json_decref(op->labels);
	json_decref(op->key_raw);
	free(op->key_v1);
	free(op->allow);
	free(op->net_id);
	free(op->proxy_id);
	msb_error_clear(&op->err);
	if (op->timer)
		event_free(op->timer);
	event_free(op->defer_ev);
	free(op);
}

static void eop_complete_cb(evutil_socket_t fd, short what, void *arg)
{
	struct egress_op *op = arg;
	struct egress_info info;

	(void)fd, (void)what;
	if (op->failed) {
		op->cb(&op->err, NULL, op->arg);
	} else {
		egress_info_fill(&info, op->name, op->block.proxy, &op->block);
		info.network_new = op->net_created;
		op->cb(NULL, &info, op->arg);
	}
	eop_free(op);
}

static void eop_complete(struct egress_op *op)
{
	op->state = EOP_DONE;
	event_active(op->defer_ev, EV_TIMEOUT, 0);
}

/* After a failure: remove what this op made (proxy first), then report. */
static void eop_fail(struct egress_op *op)
{
	op->failed = true;
	if (op->timer)
		evtimer_del(op->timer);
	if (op->eg->closing) {
		eop_complete(op);   /* what it made stays: dispose or reap removes it */
		return;
	}
	if (op->proxy_created && op->proxy_id) {
		eop_enter(op, EOP_ROLLBACK_PROXY);
		return;
	}
	if (op->net_id && (op->net_created || op->fresh)) {
		/* made by this op (nothing is on it yet), or a fresh sandbox's */
		eop_enter(op, EOP_ROLLBACK_NET);
		return;
	}
	eop_complete(op);
}

/* What the op was doing in state s, for messages. */
static const char *eop_step(const struct egress_op *op, enum eop_state s, char *buf, size_t n)
{
	switch (s) {
	case EOP_NET_INSPECT:
		return "inspecting its network";
	case EOP_NET_LIST:
		return "could not list the engine's networks to pick a subnet";
	case EOP_NET_CREATE:
		return "creating its network";
	case EOP_NET_VERIFY:
		return "reading its new network back";
	case EOP_PROXY_INSPECT:
		return "inspecting its proxy";
	case EOP_PROXY_DRAIN:
		return "draining its old proxy";
	case EOP_PROXY_REMOVE:
		return "removing its old proxy";
	case EOP_PROXY_CREATE:
		return "creating its egress proxy";
	case EOP_PROXY_CONNECT:
		snprintf(buf, n, "could not give the egress proxy %s its outbound leg on network '%s'", op->proxy,
			 op->eg->d->config->egress_outbound_network);
		return buf;
	case EOP_PROXY_START:
		return "starting its egress proxy";
	default:
		return "asking the engine";
	}
}

/* The outcome of a failed request in the daemon's words (errmap's code and
 * engine_status, never the engine's text), and what to do about it. */
static const char *eop_outcome(const struct msb_error *e, char *buf, size_t n)
{
	json_t *status = json_object_get(e->data, "engine_status");

	switch (e->code) {
	case MSB_ERR_ENGINE_TIMEOUT:
		return "the engine did not answer in time. Retry the acquire (engine.timeout_ms bounds each request)";
	case MSB_ERR_ENGINE_UNAVAILABLE:
		return "the engine could not be reached. The daemon reconnects by itself: retry the acquire once "
		       "the engine is back";
	default:
		if (!status)
			return "the engine's reply was unusable. Retry the acquire; the daemon's log has the reply's fault";
		snprintf(buf, n, "%s (HTTP %" JSON_INTEGER_FORMAT "). The daemon's log has the engine's reason; "
			 "retry the acquire, or dispose the sandbox and acquire it anew",
			 json_integer_value(status) < 300 ? "the engine's reply was unusable" : "the engine refused",
			 json_integer_value(status));
		return buf;
	}
}

/* The request of the op's state failed (r: its reply, or .error, the
 * -errno of a request that could not be made): errmap gives the code and
 * logs the engine's text; the wire gets the step, the sandbox, the
 * outcome and the fix. */
static void eop_fail_engine(struct egress_op *op, const struct docker_reply *r)
{
	char step_buf[256], out_buf[256];
	const char *step = eop_step(op, op->state, step_buf, sizeof(step_buf));
	_cleanup_free_ char *what = xasprintf("egress for %s: %s", op->name, step);
	const char *outcome;
	json_t *data;

	if (r->error < 0 && r->error != -ECANCELED)
		log_warnx("%s: %s", what, r->message ? r->message : strerror(-r->error));
	errmap_docker(r, what, &op->err);
	if (op->err.code != MSB_ERR_SHUTTING_DOWN) {
		/* Read while op->err still holds engine_status: taking the data
		 * below leaves nothing to read it from. */
		outcome = eop_outcome(&op->err, out_buf, sizeof(out_buf));
		data = TAKE_PTR(op->err.data);
		msb_error_set(&op->err, op->err.code, data, "egress for %s: %s: %s%s", op->name, step, outcome,
			      op->state == EOP_PROXY_CONNECT ? "; check that network exists (egress.outbound_network)"
							     : "");
	}
	eop_fail(op);
}

static json_t *eop_network_body(const struct egress_op *op)
{
	json_t *opts = json_object(), *ipam_cfg;

	json_object_set_new(opts, "com.docker.network.bridge.name", json_string(op->bridge));
	json_object_set_new(opts, "com.docker.network.bridge.enable_ip_masquerade", json_string("false"));
	if (op->isolated) {
		json_object_set_new(opts, "com.docker.network.bridge.gateway_mode_ipv4", json_string("isolated"));
		json_object_set_new(opts, "com.docker.network.bridge.gateway_mode_ipv6", json_string("isolated"));
		ipam_cfg = json_pack("{s:s, s:s}", "Subnet", op->block.subnet, "IPRange", op->block.ip_range);
	} else {
		json_object_set_new(opts, "com.docker.network.bridge.inhibit_ipv4", json_string("true"));
		ipam_cfg = json_pack("{s:s, s:s, s:s}", "Subnet", op->block.subnet, "IPRange", op->block.ip_range,
				     "Gateway", op->block.gateway);
	}
	return json_pack("{s:s, s:s, s:b, s:b, s:b, s:{s:s, s:[o]}, s:o, s:O}", "Name", op->net,
			 "Driver", "bridge", "Internal", 1, "EnableIPv6", 0,
			 "CheckDuplicate", api_below(op->eg, "1.44"),
			 "IPAM", "Driver", "default", "Config", ipam_cfg, "Options", opts, "Labels", op->labels);
}

static json_t *eop_proxy_config(const struct egress_op *op)
{
	const struct msbd_config *cfg = op->eg->d->config;
	json_t *env = json_array(), *labels = json_deep_copy(op->labels);
	char *raw = json_dumps(op->key_raw, JSON_COMPACT);
	json_t *host, *netcfg;

	json_array_append_new(env, json_sprintf("MAF_SANDBOX_ALLOW=%s", op->allow));
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PROXY_PORT=%d", EGRESS_PROXY_PORT));
	/* only its own sandbox's network: not docker0, not the host */
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PROXY_LISTEN=%s", op->block.proxy));
	json_array_append_new(env, json_sprintf("MAF_SANDBOX_PRIVATE_ALLOW=%s",
						cfg->egress_private_allow ? cfg->egress_private_allow : ""));
	json_object_set_new(labels, LABEL_ROLE, json_string("proxy"));
	json_object_set_new(labels, LABEL_KEY_V1, json_string(op->key_v1));
	json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
	free(raw);
	host = json_pack("{s:s, s:b, s:[s], s:[s], s:i, s:I, s:b, s:{s:s, s:{s:s, s:s}}, s:{s:s, s:s}}",
			 "NetworkMode", op->net, "ReadonlyRootfs", 1, "CapDrop", "ALL",
			 "SecurityOpt", "no-new-privileges", "PidsLimit", EGRESS_PROXY_PIDS_LIMIT,
			 "Memory", (json_int_t)EGRESS_PROXY_MEMORY_BYTES, "Init", 0,
			 "LogConfig", "Type", "json-file", "Config", "max-size", EGRESS_PROXY_LOG_MAX_SIZE,
			 "max-file", EGRESS_PROXY_LOG_MAX_FILES,
			 /* a proxy is an endpoint, never a router between its two legs */
			 "Sysctls", "net.ipv4.ip_forward", "0", "net.ipv6.conf.all.forwarding", "0");
	netcfg = json_pack("{s:{s:{s:{s:s}, s:[s]}}}", "EndpointsConfig", op->net, "IPAMConfig",
			   "IPv4Address", op->block.proxy, "Aliases", op->proxy);
	return json_pack("{s:s, s:o, s:s, s:o, s:b, s:b, s:o, s:o}", "Image", egress_image_id(op->eg->image), "Env", env,
			 "User", MSB_STR(PROXYIMAGE_UID) ":" MSB_STR(PROXYIMAGE_GID), "Labels", labels, "Tty", 0, "OpenStdin", 0,
			 "HostConfig", host, "NetworkingConfig", netcfg);
}

static void eop_ready_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct egress_op *op = arg;

	(void)fd, (void)what;
	msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
		      "egress proxy %s never reported listening within %ld ms", op->proxy,
		      op->eg->d->config->egress_ready_timeout_ms);
	eop_fail(op);
}

static void eop_ready_check(struct egress_op *op)
{
	struct egress_info info;

	egress_info_fill(&info, op->name, op->block.proxy, &op->block);
	if (!egress_follow_ready_set(op->eg->follow, op->proxy_id, &info))
		return;
	evtimer_del(op->timer);
	eop_complete(op);
}

static void eop_enter(struct egress_op *op, enum eop_state s)
{
	struct engine *e = eg_engine(op->eg);
	json_t *body = NULL;
	int r = 0;

	log_debug("egress", "%s: state %d -> %d", op->name, op->state, s);
	op->state = s;
	switch (s) {
	case EOP_IMAGE_WAIT:
		if (egress_image_state(op->eg->image) == EGRESS_IMAGE_READY) {
			eop_enter(op, EOP_NET_INSPECT);
			return;
		}
		/* a check that ends now (fails, or cannot be asked) tells this
		 * op too, through image_checked */
		egress_image_retry(op->eg->image);
		egress_image_check(op->eg->image);
		return;
	case EOP_NET_INSPECT:
		r = docker_network_inspect(e, op->net, eop_docker_cb, op, &op->req);
		break;
	case EOP_NET_LIST:
		if (egress_pool_synced(op->eg->pool)) {
			eop_enter(op, EOP_NET_CREATE);
			return;
		}
		r = egress_pool_list(op->eg->pool);
		break;
	case EOP_NET_CREATE:
		if (!op->have_block) {
			r = egress_pool_take(op->eg->pool, &op->block);
			if (r == -ENOSPC && op->tries == 0) {
				/* stale marks: re-read what the engine really holds, once */
				egress_pool_unsync(op->eg->pool);
				op->tries++;
				eop_enter(op, EOP_NET_LIST);
				return;
			}
			if (r < 0) {
				msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, NULL,
					      "egress for %s: no free subnet left in egress.subnet_pool %s",
					      op->name, op->eg->d->config->egress_subnet_pool);
				eop_fail(op);
				return;
			}
			op->have_block = true;
		}
		body = eop_network_body(op);
		r = docker_network_create(e, body, eop_docker_cb, op, &op->req);
		break;
	case EOP_NET_VERIFY:
		r = docker_network_inspect(e, op->net_id, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_INSPECT:
		r = docker_container_inspect(e, op->proxy, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_REMOVE:
	case EOP_ROLLBACK_PROXY:
		r = docker_container_remove(e, op->proxy_id, true, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_CREATE:
		body = eop_proxy_config(op);
		r = docker_container_create(e, op->proxy, body, eop_docker_cb, op, &op->req);
		break;
	case EOP_PROXY_CONNECT:
		body = json_pack("{s:s}", "Container", op->proxy_id);
		r = docker_network_connect(e, op->eg->d->config->egress_outbound_network, body, eop_docker_cb, op,
					   &op->req);
		break;
	case EOP_PROXY_START:
		r = docker_container_start(e, op->proxy_id, eop_docker_cb, op, &op->req);
		break;
	case EOP_ROLLBACK_NET:
		r = docker_network_remove(e, op->net_id, eop_docker_cb, op, &op->req);
		break;
	default:
		assert(!"unreachable");
		return;
	}
	json_decref(body);
	if (r < 0) {
		struct docker_reply dr = { .error = r };

		op->req = NULL;
		if (s == EOP_ROLLBACK_PROXY || s == EOP_ROLLBACK_NET) {
			log_warnx("egress for %s: rollback could not reach the engine; %s may remain", op->name,
				  s == EOP_ROLLBACK_NET ? op->net : op->proxy);
			eop_complete(op);
			return;
		}
		eop_fail_engine(op, &dr);
	}
}

/* Is an inspected network one we can put a sandbox on? NULL if so, else why. */
static char *net_unusable(struct egress_op *op, const json_t *net)
{
	const json_t *cfgs = json_object_get(json_object_get(net, "IPAM"), "Config");
	const json_t *labels = json_object_get(net, "Labels");
	const char *driver = json_string_value(json_object_get(net, "Driver"));
	const char *subnet = json_string_value(json_object_get(json_array_get(cfgs, 0), "Subnet"));
	const char *gateway = json_string_value(json_object_get(json_array_get(cfgs, 0), "Gateway"));
	const char *bridge = json_string_value(json_object_get(json_object_get(net, "Options"),
								 "com.docker.network.bridge.name"));
	const char *owner = json_string_value(json_object_get(labels, LABEL_OWNER));
	const char *want_owner = json_string_value(json_object_get(op->labels, LABEL_OWNER));
	char *reason = NULL;

	if (!driver || strcmp(driver, "bridge") || !json_is_true(json_object_get(net, "Internal")))
		return xstrdup("it is not an internal bridge");
	if (!owner || !want_owner || strcmp(owner, want_owner))
		return xstrdup("it is not this sandbox's (its owner label differs)");
	if (json_array_size(cfgs) != 1 || !subnet || subnet_block_from_cidr(subnet,
	    (unsigned)op->eg->d->config->egress_block_prefix, &op->block) < 0)
		return xstrdup("its subnet is not one block of egress.subnet_pool");
	op->have_block = true;
	if (op->isolated && gateway && *gateway)
		return xasprintf("its IPAM holds the gateway %s", gateway);
	if (!engine_is_local(op->eg)) {
		if (!op->isolated)
			return xstrdup("the engine is not on this host, so its bridge cannot be checked for a "
				       "host address; use Engine >= 28 with egress.gateway_mode isolated");
		return NULL;
	}
	if (!bridge || strcmp(bridge, op->bridge))
		return xasprintf("its bridge is not %s", op->bridge);
	switch (bridgecheck_unaddressed(bridge, &reason)) {
	case 0:
		break;
	case -ENODEV:
		free(reason);
		if (op->isolated)
			break;   /* not visible here (rootless, a VM): the IPAM check above is what we have */
		return xasprintf("its bridge %s is not visible from the daemon's network namespace, so it "
				 "cannot be checked for a host address (a rootless or VM engine?); use Engine "
				 ">= 28 with egress.gateway_mode isolated", bridge);
	default:
		return reason ? reason : xasprintf("bridge %s could not be checked", bridge);
	}
	return NULL;
}

static void eop_net_inspected(struct egress_op *op, const struct docker_reply *r)
{
	_cleanup_free_ char *why = NULL;

	if (r->error == 0 && r->status == 404 && !op->net_adopting) {
		eop_enter(op, EOP_NET_LIST);
		return;
	}
	if (r->error || r->status != 200 || !json_is_object(r->body)) {
		eop_fail_engine(op, r);
		return;
	}
	free(op->net_id);
	op->net_id = xstrdup(json_string_value(json_object_get(r->body, "Id")) ?
			     json_string_value(json_object_get(r->body, "Id")) : op->net);
	why = net_unusable(op, r->body);
	if (why) {
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR, json_pack("{s:s}", "network", op->net),
			      "network %s already exists and cannot be used: %s. Dispose the sandbox (or "
			      "remove the network) and retry", op->net, why);
		op->net_id = (free(op->net_id), NULL);   /* not ours to remove */
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_INSPECT);
}

static void eop_net_created(struct egress_op *op, const struct docker_reply *r)
{
	const char *m = r->message ? r->message : "";

	if (r->error == 0 && r->status == 201 && json_string_value(json_object_get(r->body, "Id"))) {
		op->net_id = xstrdup(json_string_value(json_object_get(r->body, "Id")));
		op->net_created = true;
		egress_pool_mark(op->eg->pool, op->block.subnet);
		eop_enter(op, EOP_NET_VERIFY);
		return;
	}
	if (r->error == 0 && r->status == 409 && !op->net_adopting) {
		op->net_adopting = true;
		op->have_block = false;
		eop_enter(op, EOP_NET_INSPECT);
		return;
	}
	if (r->error == 0 && (strstr(m, "overlap") || strstr(m, "Pool overlaps")) &&
	    ++op->tries < EGRESS_NET_CREATE_TRIES) {
		/* someone holds that block: mark it and take another */
		egress_pool_mark(op->eg->pool, op->block.subnet);
		op->have_block = false;
		eop_enter(op, EOP_NET_CREATE);
		return;
	}
	if (r->error == 0 && r->status != 201)
		egress_pool_release(op->eg->pool, &op->block);
	if (r->error == 0 && strstr(m, "gateway")) {
		_cleanup_free_ char *what = xasprintf("egress for %s: creating network %s", op->name, op->net);
		json_t *data;

		errmap_docker(r, what, &op->err);   /* the code, engine_status, the engine's text in the log */
		data = TAKE_PTR(op->err.data);
		msb_error_set(&op->err, op->err.code, data,
			      "could not create network %s: the engine refused its gateway option — "
			      "gateway_mode isolated needs Docker Engine "
			      "28.0.0 or later; set egress.gateway_mode auto, or use egress closed or an "
			      "empty allowlist", op->net);
		eop_fail(op);
		return;
	}
	eop_fail_engine(op, r);
}

static void eop_net_verified(struct egress_op *op, const struct docker_reply *r)
{
	_cleanup_free_ char *why = NULL;

	if (r->error || r->status != 200 || !json_is_object(r->body)) {
		eop_fail_engine(op, r);
		return;
	}
	why = net_unusable(op, r->body);
	if (why) {
		msb_error_set(&op->err, MSB_ERR_ENGINE_ERROR,
			      json_pack("{s:s, s:s}", "network", op->net, "gateway_mode",
					op->isolated ? "isolated" : "inhibit"),
			      "network %s was created but %s: the sandbox could reach the host around the "
			      "proxy. It has been removed.%s", op->net, why,
			      op->isolated && engine_major(op->eg) < 28 ?
			      " This engine ignores gateway_mode isolated (it needs Engine 28.0.0); use "
			      "egress.gateway_mode auto or inhibit" : "");
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_INSPECT);
}

static void eop_proxy_inspected(struct egress_op *op, const struct docker_reply *r)
{
	const json_t *state = json_object_get(r->body, "State");
	const char *image = json_string_value(json_object_get(r->body, "Image"));
	const char *id = json_string_value(json_object_get(r->body, "Id"));
	const char *addr, *current;

	if (r->error == 0 && r->status == 404) {
		eop_enter(op, EOP_PROXY_CREATE);
		return;
	}
	if (r->error || r->status != 200 || !id) {
		eop_fail_engine(op, r);
		return;
	}
	free(op->proxy_id);
	op->proxy_id = xstrdup(id);
	addr = egress_proxy_address_of(r->body, op->net);
	current = egress_image_id(op->eg->image);
	if (json_is_true(json_object_get(state, "Running")) && image && current && strcmp(image, current) == 0 &&
	    addr && strcmp(addr, op->block.proxy) == 0) {
		/* running and current: keep it, follow it if nobody does */
		egress_follow_watch(op->eg->follow, id, op->proxy,
				    json_object_get(json_object_get(r->body, "Config"), "Labels"));
		op->state = EOP_PROXY_READY;
		eop_ready_check(op);
		if (op->state == EOP_PROXY_READY) {
			struct timeval tv = { op->eg->d->config->egress_ready_timeout_ms / 1000,
					      (op->eg->d->config->egress_ready_timeout_ms % 1000) * 1000 };

			evtimer_add(op->timer, &tv);
		}
		return;
	}
	/* stopped, stale or elsewhere: publish what it decided, then replace it */
	op->state = EOP_PROXY_DRAIN;
	if (egress_drain(op->eg, id, eop_drained_cb, op) < 0) {
		struct docker_reply dr = { .error = -ENOTCONN };

		eop_fail_engine(op, &dr);
	}
}

static void eop_drained_cb(int error, void *arg)
{
	struct egress_op *op = arg;

	if (error == -ECANCELED) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		eop_fail(op);
		return;
	}
	eop_enter(op, EOP_PROXY_REMOVE);
}

static void eop_proxy_created(struct egress_op *op, const struct docker_reply *r)
{
	const char *id = json_string_value(json_object_get(r->body, "Id"));

	if (r->error || r->status != 201 || !id) {
		if (r->error == 0 && r->status == 404)
			/* the image was removed behind our back: check (and load) it again next time */
			egress_image_forget(op->eg->image);
		eop_fail_engine(op, r);
		return;
	}
	free(op->proxy_id);
	op->proxy_id = xstrdup(id);
	op->proxy_created = true;
	eop_enter(op, EOP_PROXY_CONNECT);
}

static void eop_proxy_started(struct egress_op *op)
{
	json_t *labels = json_deep_copy(op->labels);
	struct timeval tv = { op->eg->d->config->egress_ready_timeout_ms / 1000,
			      (op->eg->d->config->egress_ready_timeout_ms % 1000) * 1000 };

	json_object_set_new(labels, LABEL_KEY_V1, json_string(op->key_v1));
	{
		char *raw = json_dumps(op->key_raw, JSON_COMPACT);

		json_object_set_new(labels, LABEL_KEY_JSON, json_string(raw));
		free(raw);
	}
	egress_follow_watch(op->eg->follow, op->proxy_id, op->proxy, labels);
	json_decref(labels);
	op->state = EOP_PROXY_READY;
	evtimer_add(op->timer, &tv);
	eop_ready_check(op);
}

static void eop_docker_cb(const struct docker_reply *r, void *arg)
{
	struct egress_op *op = arg;
	bool gone = r->error == 0 && r->status == 404;
	bool ok2xx = r->error == 0 && r->status >= 200 && r->status < 300;

	op->req = NULL;
	if (r->error == -ECANCELED && op->state != EOP_ROLLBACK_PROXY && op->state != EOP_ROLLBACK_NET) {
		msb_error_set(&op->err, MSB_ERR_SHUTTING_DOWN, NULL, NULL);
		op->failed = true;
		eop_complete(op);
		return;
	}
	switch (op->state) {
	case EOP_NET_INSPECT:
		eop_net_inspected(op, r);
		break;
	case EOP_NET_CREATE:
		eop_net_created(op, r);
		break;
	case EOP_NET_VERIFY:
		eop_net_verified(op, r);
		break;
	case EOP_PROXY_INSPECT:
		eop_proxy_inspected(op, r);
		break;
	case EOP_PROXY_REMOVE:
		if (!ok2xx && !gone) {
			eop_fail_engine(op, r);
			break;
		}
		egress_proxy_removed(op->eg, op->proxy_id);
		eop_enter(op, EOP_PROXY_CREATE);
		break;
	case EOP_PROXY_CREATE:
		eop_proxy_created(op, r);
		break;
	case EOP_PROXY_CONNECT:
		if (!ok2xx) {
			eop_fail_engine(op, r);
			break;
		}
		eop_enter(op, EOP_PROXY_START);
		break;
	case EOP_PROXY_START:
		if (!ok2xx) {
			eop_fail_engine(op, r);
			break;
		}
		eop_proxy_started(op);
		break;
	case EOP_ROLLBACK_PROXY:
		if (!ok2xx && !gone)
			log_warnx("egress for %s: rollback could not remove %s; it may remain", op->name, op->proxy);
		else
			egress_proxy_removed(op->eg, op->proxy_id);
		op->proxy_created = false;
		if (op->net_id && (op->net_created || op->fresh)) {
			eop_enter(op, EOP_ROLLBACK_NET);
			break;
		}
		eop_complete(op);
		break;
	case EOP_ROLLBACK_NET:
		if (!ok2xx && !gone)
			log_warnx("egress for %s: rollback could not remove %s; it may remain", op->name, op->net);
		else if (op->have_block)
			egress_pool_release(op->eg->pool, &op->block);
		eop_complete(op);
		break;
	default:
		assert(!"unreachable");
	}
}

int egress_ensure(struct egress *eg, const char *name, const struct msb_key *key, const struct msb_spec *spec,
		  uid_t owner, bool fresh, egress_ensure_cb *cb, void *arg, struct egress_op **ret_op)
{
	struct egress_op *op;
	const char *mode = eg->d->config->egress_gateway_mode;
	size_t len = 1;

	if (!eg || !egress_configured(eg->d) || !spec->n_egress_allow || !cb)
		return -EINVAL;
	op = xcalloc(1, sizeof(*op));
	op->eg = eg;
	snprintf(op->name, sizeof(op->name), "%s", name);
	snprintf(op->net, sizeof(op->net), "%s%s", name, EGRESS_NET_SUFFIX);
	snprintf(op->proxy, sizeof(op->proxy), "%s%s", name, EGRESS_PROXY_SUFFIX);
	bridgecheck_name(name, op->bridge);
	op->labels = names_workload_labels(key, spec, owner);
	json_object_del(op->labels, LABEL_WORK_DIR);
	op->key_raw = json_pack("[s, s, s, s, s]", key->scope, key->thread_id, key->agent_dir, key->call_id,
				spec->kind);
	op->key_v1 = egresslog_key_encode(key);
	if (!*op->key_v1)
		log_warnx("egress for %s: the encoded key exceeds the %d-byte attribution limit; its "
			  "decisions are logged, not published", name, EGRESSLOG_KEY_MAX);
	for (size_t i = 0; i < spec->n_egress_allow; i++)
		len += strlen(spec->egress_allow[i]) + 1;
	op->allow = xcalloc(1, len);
	for (size_t i = 0; i < spec->n_egress_allow; i++) {
		if (i)
			strcat(op->allow, ",");
		strcat(op->allow, spec->egress_allow[i]);
	}
	op->owner = owner;
	op->fresh = fresh;
	op->isolated = strcmp(mode, "isolated") == 0 || (strcmp(mode, "auto") == 0 && engine_major(eg) >= 28);
	op->cb = cb;
	op->arg = arg;
	op->timer = evtimer_new(eg->d->base, eop_ready_timeout_cb, op);
	op->defer_ev = event_new(eg->d->base, -1, 0, eop_complete_cb, op);
	if (!op->timer || !op->defer_ev)
		fatalx("%s: cannot create an event", __func__);
	TAILQ_INSERT_TAIL(&eg->ops, op, entry);
	if (ret_op)
		*ret_op = op;
	op->state = EOP_IMAGE_WAIT;
	eop_enter(op, EOP_IMAGE_WAIT);
	return 0;
}

void egress_op_cancel(struct egress_op *op)
{
	if (!op)
		return;
	if (op->req) {
		struct engine_req *req = op->req;

		op->req = NULL;
		op->cb = NULL;
		engine_req_cancel(req);
	}
	eop_free(op);
}

/* ---- teardown after a failed acquire ---------------------------------------- */

struct teardown {
	struct egress *eg;
	char proxy[EGRESS_NAME_MAX];
	char net[EGRESS_NAME_MAX];
	char *proxy_id;
};

static void teardown_net_cb(const struct docker_reply *r, void *arg)
{
	struct teardown *t = arg;

	if (r->error == 0 && r->status != 204 && r->status != 404)
		log_warnx("egress: could not remove %s: %s", t->net, r->message ? r->message : "engine refused");
	free(t->proxy_id);
	free(t);
}

static void teardown_proxy_cb(const struct docker_reply *r, void *arg)
{
	struct teardown *t = arg;

	if (r->error == 0 && (r->status == 204 || r->status == 404) && t->proxy_id)
		egress_proxy_removed(t->eg, t->proxy_id);
	if (r->error == -ECANCELED || t->eg->closing ||
	    docker_network_remove(eg_engine(t->eg), t->net, teardown_net_cb, t, NULL) < 0) {
		free(t->proxy_id);
		free(t);
	}
}

static void teardown_drained_cb(int error, void *arg)
{
	struct teardown *t = arg;

	(void)error;
	if (t->eg->closing ||
	    docker_container_remove(eg_engine(t->eg), t->proxy, true, teardown_proxy_cb, t, NULL) < 0) {
		free(t->proxy_id);
		free(t);
	}
}

void egress_teardown(struct egress *eg, const char *name)
{
	struct teardown *t;
	const char *proxy_id;

	if (!eg)
		return;
	t = xcalloc(1, sizeof(*t));
	t->eg = eg;
	snprintf(t->proxy, sizeof(t->proxy), "%s%s", name, EGRESS_PROXY_SUFFIX);
	snprintf(t->net, sizeof(t->net), "%s%s", name, EGRESS_NET_SUFFIX);
	proxy_id = egress_follow_proxy_of(eg->follow, name);
	if (proxy_id) {
		t->proxy_id = xstrdup(proxy_id);
		if (egress_drain(eg, t->proxy_id, teardown_drained_cb, t) == 0)
			return;
	}
	teardown_drained_cb(0, t);
}

/* ---- lifetime ----------------------------------------------------------------- */

struct egress *egress_new(struct domain *d)
{
	struct egress *eg = xcalloc(1, sizeof(*eg));

	eg->d = d;
	TAILQ_INIT(&eg->ops);
	eg->image = egress_image_new(d, image_checked, eg);
	eg->pool = egress_pool_new(d, pool_held, pool_listed, eg);
	eg->follow = egress_follow_new(d, egress_configured(d), proxy_ready, eg);
	return eg;
}

struct egress *egress_free(struct egress *eg)
{
	struct egress_op *op;

	if (!eg)
		return NULL;
	while ((op = TAILQ_FIRST(&eg->ops)))
		egress_op_cancel(op);
	eg->follow = egress_follow_free(eg->follow);
	eg->image = egress_image_free(eg->image);
	eg->pool = egress_pool_free(eg->pool);
	free(eg);
	return NULL;
}
