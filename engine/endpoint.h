/* endpoint.h — where the Docker engine is, resolved once at start
 * (ARCHITECTURE decision 2) the way the docker CLI resolves it:
 *
 *   1. the configured engine.host (source "engine.host");
 *   2. DOCKER_HOST (source "DOCKER_HOST");
 *   3. DOCKER_CONTEXT, else currentContext in $DOCKER_CONFIG/config.json
 *      ($DOCKER_CONFIG defaults to $HOME/.docker): the context "default"
 *      means step 4; any other name is read from
 *      $DOCKER_CONFIG/contexts/meta/<sha256-hex(name)>/meta.json
 *      (Endpoints.docker.Host, SkipTLSVerify) with TLS material from
 *      $DOCKER_CONFIG/contexts/tls/<sha256-hex(name)>/docker/{ca,cert,key}.pem
 *      (source "context NAME");
 *   4. unix://MSB_DEFAULT_DOCKER_SOCKET (source "default").
 *
 * For tcp:// hosts from engine.host or DOCKER_HOST: DOCKER_TLS_VERIFY non-empty
 * (even "0") → TLS with verification; else DOCKER_TLS non-empty → TLS without
 * verification; certificates from DOCKER_CERT_PATH (default $DOCKER_CONFIG),
 * files ca.pem, cert.pem, key.pem, each used only if present.
 * ssh:// (and fd://, npipe://) are refused with a message that says so.
 * A context named but missing is an error; nothing falls back. */
#ifndef MSB_ENGINE_ENDPOINT_H
#define MSB_ENGINE_ENDPOINT_H

#include <stdbool.h>

enum engine_endpoint_kind {
	ENGINE_ENDPOINT_UNIX,
	ENGINE_ENDPOINT_TCP,
	_ENGINE_ENDPOINT_KIND_MAX,
};

struct engine_endpoint {
	enum engine_endpoint_kind kind;
	char *host;        /* as resolved, e.g. "unix:///var/run/docker.sock", "tcp://h:2376" */
	char *unix_path;   /* ENGINE_ENDPOINT_UNIX: the socket path; else NULL */
	char *base_url;    /* "http://api.moby.localhost" (unix), "http[s]://h:p" (tcp) */
	bool tls;          /* tcp only */
	bool tls_verify;   /* verify the peer (tcp+tls only) */
	char *ca_file;     /* NULL when absent */
	char *cert_file;   /* NULL when absent */
	char *key_file;    /* NULL when absent */
	char *source;      /* which setting decided: "engine.host", "DOCKER_HOST", "context NAME", "default" */
};

const char *engine_endpoint_kind_to_string(enum engine_endpoint_kind k);

/* Resolves the endpoint. configured_host may be NULL (not configured).
 * Returns 0 and *ret_endpoint (owned by the caller), or -EINVAL/-ENOENT/...
 * and *reterr_message (malloc'd) saying which setting failed and why. */
int engine_endpoint_resolve(const char *configured_host, struct engine_endpoint **ret_endpoint,
			    char **reterr_message);

/* Parses one host URL (unix:///path, tcp://host[:port]) into an endpoint
 * without TLS (resolve adds TLS from the environment or the context);
 * source is copied. Used by resolve and tests. */
int engine_endpoint_from_host(const char *host, const char *source, struct engine_endpoint **ret_endpoint,
			      char **reterr_message);

/* NULL-safe; returns NULL. */
struct engine_endpoint *engine_endpoint_free(struct engine_endpoint *ep);
struct engine_endpoint *engine_endpoint_dup(const struct engine_endpoint *ep);

#endif
