/* endpoint.c — resolve the Docker engine endpoint the way the docker CLI
 * does (see endpoint.h for the order). Pure apart from reading the
 * environment and a few small files; never contacts the engine.
 *
 * Host URLs accepted: unix:///absolute/path (empty path = the default
 * socket) and tcp://host[:port] (port 2375 plain, 2376 with TLS by default;
 * "[v6]" literals allowed). User information ("user:pw@") is refused, and
 * every message quoting a host shows it with the user information cut out,
 * so a secret never reaches the log or a status reply. A host without a
 * scheme is refused too (the CLI would read it as tcp://). */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "cleanup.h"
#include "msb-build.h"
#include "endpoint.h"
#include "sha256.h"
#include "xmalloc.h"

/* config.json and meta.json are small; anything larger is refused. */
#define ENDPOINT_MAX_JSON_BYTES   (1024 * 1024)
/* sun_path holds 108 bytes on Linux, the NUL included. */
#define ENDPOINT_MAX_UNIX_PATH    (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define ENDPOINT_MAX_HOST_LEN     4096
#define ENDPOINT_TCP_PORT         2375
#define ENDPOINT_TLS_PORT         2376
#define ENDPOINT_UNIX_BASE_URL    "http://api.moby.localhost"
#define ENDPOINT_DEFAULT_CONTEXT  "default"

const char *engine_endpoint_kind_to_string(enum engine_endpoint_kind k)
{
	static const char *const names[_ENGINE_ENDPOINT_KIND_MAX] = {
		[ENGINE_ENDPOINT_UNIX] = "unix",
		[ENGINE_ENDPOINT_TCP] = "tcp",
	};

	if ((unsigned)k >= _ENGINE_ENDPOINT_KIND_MAX)
		return "invalid";
	return names[k];
}

struct engine_endpoint *engine_endpoint_free(struct engine_endpoint *ep)
{
	if (!ep)
		return NULL;
	free(ep->host);
	free(ep->unix_path);
	free(ep->base_url);
	free(ep->ca_file);
	free(ep->cert_file);
	free(ep->key_file);
	free(ep->source);
	free(ep);
	return NULL;
}

static void engine_endpoint_freep(struct engine_endpoint **ep)
{
	*ep = engine_endpoint_free(*ep);
}

static char *strdup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

struct engine_endpoint *engine_endpoint_dup(const struct engine_endpoint *ep)
{
	struct engine_endpoint *c;

	if (!ep)
		return NULL;
	c = xcalloc(1, sizeof(*c));
	c->kind = ep->kind;
	c->host = strdup_or_null(ep->host);
	c->unix_path = strdup_or_null(ep->unix_path);
	c->base_url = strdup_or_null(ep->base_url);
	c->tls = ep->tls;
	c->tls_verify = ep->tls_verify;
	c->ca_file = strdup_or_null(ep->ca_file);
	c->cert_file = strdup_or_null(ep->cert_file);
	c->key_file = strdup_or_null(ep->key_file);
	c->source = strdup_or_null(ep->source);
	return c;
}

static int fail(char **reterr_message, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char **reterr_message, int error, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	*reterr_message = xvasprintf(fmt, ap);
	va_end(ap);
	return error;
}

/* The host with any "user[:password]@" of its authority cut out, for messages. */
static char *host_redacted(const char *host)
{
	const char *auth = strstr(host, "://");
	const char *end, *at;

	auth = auth ? auth + 3 : host;
	end = auth + strcspn(auth, "/?#");
	at = memrchr(auth, '@', (size_t)(end - auth));
	if (!at)
		return xstrdup(host);
	return xasprintf("%.*s%s", (int)(auth - host), host, at + 1);
}

/* ---- host URL parsing ---------------------------------------------------- */

static int parse_unix(const char *host, const char *rest, const char *source,
		      struct engine_endpoint *ep, char **reterr_message)
{
	const char *path = *rest ? rest : MSB_DEFAULT_DOCKER_SOCKET;

	if (path[0] != '/')
		return fail(reterr_message, -EINVAL,
			    "%s: unix socket path \"%s\" is not absolute (use unix:///path)", source, path);
	if (strlen(path) > ENDPOINT_MAX_UNIX_PATH)
		return fail(reterr_message, -ENAMETOOLONG,
			    "%s: unix socket path \"%s\" is %zu bytes long; at most %zu fit in a socket address",
			    source, path, strlen(path), ENDPOINT_MAX_UNIX_PATH);
	ep->kind = ENGINE_ENDPOINT_UNIX;
	ep->unix_path = xstrdup(path);
	ep->host = xasprintf("unix://%s", path);
	ep->base_url = xstrdup(ENDPOINT_UNIX_BASE_URL);
	return 0;
}

static bool is_host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '-' || c == '_';
}

/* Splits "name", "name:port", "[v6]" or "[v6]:port" into ret_name (malloc'd,
 * brackets kept) and ret_port (0 when absent). */
static int split_host_port(const char *auth, char **ret_name, long *ret_port)
{
	const char *p = auth, *name_end;
	char *end;
	long port = 0;

	if (*p == '[') {
		p += strspn(p + 1, "0123456789abcdefABCDEF:.") + 1;
		if (*p != ']' || p == auth + 1)
			return -EINVAL;
		name_end = ++p;
	} else {
		while (is_host_char(*p))
			p++;
		name_end = p;
	}
	if (*p == ':') {
		errno = 0;
		port = strtol(p + 1, &end, 10);
		if (p[1] < '0' || p[1] > '9' || errno || port < 1 || port > 65535)
			return -EINVAL;
		p = end;
	}
	if (*p != '\0')
		return -EINVAL;
	*ret_name = xstrndup(auth, (size_t)(name_end - auth));
	*ret_port = port;
	return 0;
}

static int parse_tcp(const char *rest, bool tls, const char *source, struct engine_endpoint *ep,
		     char **reterr_message)
{
	_cleanup_free_ char *auth = NULL, *name = NULL;
	size_t auth_len = strcspn(rest, "/?#");
	long port;

	if (memchr(rest, '@', auth_len))
		return fail(reterr_message, -EINVAL,
			    "%s: tcp:// endpoints must not carry user information (\"user@\"); "
			    "it is refused so that it never shows in logs", source);
	if (rest[auth_len] != '\0' && strcmp(rest + auth_len, "/") != 0)
		return fail(reterr_message, -EINVAL,
			    "%s: tcp:// endpoint \"tcp://%s\" has a path, query or fragment; use tcp://host:port",
			    source, rest);
	auth = xstrndup(rest, auth_len);
	if (split_host_port(auth, &name, &port) < 0)
		return fail(reterr_message, -EINVAL,
			    "%s: \"tcp://%s\" is not a valid host[:port] (port 1-65535)", source, auth);
	if (!*name)
		name = (free(name), xstrdup("localhost"));
	if (port == 0)
		port = tls ? ENDPOINT_TLS_PORT : ENDPOINT_TCP_PORT;
	ep->kind = ENGINE_ENDPOINT_TCP;
	ep->tls = tls;
	ep->tls_verify = false;
	ep->host = xasprintf("tcp://%s:%ld", name, port);
	ep->base_url = xasprintf("%s://%s:%ld", tls ? "https" : "http", name, port);
	return 0;
}

/* Schemes we know and refuse, each with the reason. */
static const struct {
	const char *scheme;
	const char *why;
} refused_schemes[] = {
	{ "ssh", "ssh:// endpoints are not supported; use a unix:// or tcp:// endpoint "
		 "(e.g. forward the socket)" },
	{ "fd", "fd:// endpoints are not supported (they name an inherited socket); "
		"use a unix:// or tcp:// endpoint" },
	{ "npipe", "npipe:// endpoints are Windows named pipes and not supported; "
		   "use a unix:// or tcp:// endpoint" },
};

static int parse_host(const char *host, bool tls, const char *source, struct engine_endpoint *ep,
		      char **reterr_message)
{
	_cleanup_free_ char *shown = host_redacted(host);
	const char *sep = strstr(host, "://");
	size_t slen;

	if (strlen(host) > ENDPOINT_MAX_HOST_LEN)
		return fail(reterr_message, -EINVAL, "%s: host is longer than %d bytes", source,
			    ENDPOINT_MAX_HOST_LEN);
	for (const char *p = host; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return fail(reterr_message, -EINVAL,
				    "%s: host \"%s\" contains a space or control character", source, shown);
	if (!sep)
		return fail(reterr_message, -EINVAL,
			    "%s: host \"%s\" has no scheme; use unix:///path or tcp://host:port", source, shown);
	slen = (size_t)(sep - host);
	if (slen == 4 && strncmp(host, "unix", 4) == 0)
		return parse_unix(host, sep + 3, source, ep, reterr_message);
	if (slen == 3 && strncmp(host, "tcp", 3) == 0)
		return parse_tcp(sep + 3, tls, source, ep, reterr_message);
	for (size_t i = 0; i < ELEMENTSOF(refused_schemes); i++)
		if (strlen(refused_schemes[i].scheme) == slen &&
		    strncmp(host, refused_schemes[i].scheme, slen) == 0)
			return fail(reterr_message, -EPROTONOSUPPORT, "%s: %s", source, refused_schemes[i].why);
	return fail(reterr_message, -EPROTONOSUPPORT,
		    "%s: host \"%s\" has an unsupported scheme \"%.*s\"; use unix:// or tcp://",
		    source, shown, (int)slen, host);
}

static int endpoint_parse(const char *host, bool tls, const char *source,
			  struct engine_endpoint **ret_endpoint, char **reterr_message)
{
	_cleanup_(engine_endpoint_freep) struct engine_endpoint *ep = NULL;
	int r;

	if (!host || !source)
		return fail(reterr_message, -EINVAL, "%s: no host given", source ? source : "endpoint");
	ep = xcalloc(1, sizeof(*ep));
	r = parse_host(host, tls, source, ep, reterr_message);
	if (r < 0)
		return r;
	ep->source = xstrdup(source);
	*ret_endpoint = TAKE_PTR(ep);
	return 0;
}

int engine_endpoint_from_host(const char *host, const char *source, struct engine_endpoint **ret_endpoint,
			      char **reterr_message)
{
	return endpoint_parse(host, false, source, ret_endpoint, reterr_message);
}

/* ---- files ----------------------------------------------------------------- */

static bool file_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *file_if_present(const char *dir, const char *name)
{
	char *path = xasprintf("%s/%s", dir, name);

	if (file_exists(path))
		return path;
	free(path);
	return NULL;
}

/* Reads a JSON file of at most ENDPOINT_MAX_JSON_BYTES. -ENOENT if it does
 * not exist; other failures set *reterr_message. */
static int read_json_file(const char *path, const char *what, json_t **ret_json, char **reterr_message)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	_cleanup_free_ char *buf = NULL;
	json_error_t jerr;
	size_t n;

	if (!f) {
		if (errno == ENOENT)
			return -ENOENT;
		return fail(reterr_message, -errno, "%s: cannot open %s: %s", what, path, strerror(errno));
	}
	buf = xmalloc(ENDPOINT_MAX_JSON_BYTES + 1);
	n = fread(buf, 1, ENDPOINT_MAX_JSON_BYTES + 1, f);
	if (ferror(f))
		return fail(reterr_message, -EIO, "%s: cannot read %s", what, path);
	if (n > ENDPOINT_MAX_JSON_BYTES)
		return fail(reterr_message, -EFBIG, "%s: %s is larger than %d bytes", what, path,
			    ENDPOINT_MAX_JSON_BYTES);
	*ret_json = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!*ret_json)
		return fail(reterr_message, -EINVAL, "%s: %s is not valid JSON: line %d: %s", what, path,
			    jerr.line, jerr.text);
	return 0;
}

/* $DOCKER_CONFIG, else $HOME/.docker, else the passwd home's .docker; NULL if none. */
static char *docker_config_dir(void)
{
	const char *d = getenv("DOCKER_CONFIG");
	const struct passwd *pw;

	if (d && *d)
		return xstrdup(d);
	d = getenv("HOME");
	if (d && *d)
		return xasprintf("%s/.docker", d);
	pw = getpwuid(getuid());
	if (pw && pw->pw_dir && *pw->pw_dir)
		return xasprintf("%s/.docker", pw->pw_dir);
	return NULL;
}

/* ---- TLS material ----------------------------------------------------------- */

struct tls_files {
	char *ca, *cert, *key;
};

static void tls_files_load(struct tls_files *t, const char *dir)
{
	t->ca = file_if_present(dir, "ca.pem");
	t->cert = file_if_present(dir, "cert.pem");
	t->key = file_if_present(dir, "key.pem");
}

static bool tls_files_any(const struct tls_files *t)
{
	return t->ca || t->cert || t->key;
}

static void tls_files_release(struct tls_files *t)
{
	free(t->ca);
	free(t->cert);
	free(t->key);
	*t = (struct tls_files){ 0 };
}

/* Hands the files to a tcp endpoint (a unix endpoint ignores TLS). */
static void tls_files_apply(struct tls_files *t, bool tls, bool verify, struct engine_endpoint *ep)
{
	if (ep->kind != ENGINE_ENDPOINT_TCP || !tls) {
		tls_files_release(t);
		return;
	}
	ep->tls = true;
	ep->tls_verify = verify;
	ep->ca_file = TAKE_PTR(t->ca);
	ep->cert_file = TAKE_PTR(t->cert);
	ep->key_file = TAKE_PTR(t->key);
}

/* ---- contexts -------------------------------------------------------------- */

/* Reads Endpoints.docker.{Host,SkipTLSVerify} out of a parsed meta.json. */
static int context_meta_host(json_t *meta, const char *what, const char *path, const char **ret_host,
			     bool *ret_skip, char **reterr_message)
{
	json_t *docker = json_object_get(json_object_get(meta, "Endpoints"), "docker");  /* borrows */
	json_t *host = json_object_get(docker, "Host");
	json_t *skip = json_object_get(docker, "SkipTLSVerify");

	if (!json_is_string(host) || json_string_length(host) == 0)
		return fail(reterr_message, -EINVAL, "%s: %s has no Endpoints.docker.Host string", what, path);
	if (skip && !json_is_boolean(skip))
		return fail(reterr_message, -EINVAL, "%s: %s: Endpoints.docker.SkipTLSVerify is not a boolean",
			    what, path);
	*ret_host = json_string_value(host);
	*ret_skip = json_is_true(skip);
	return 0;
}

/* Loads the named (non-default) context; what names the setting that chose
 * it. TLS is on when the context has TLS material or skips verification. */
static int context_load(const char *config_dir, const char *name, const char *what,
			struct engine_endpoint **ret_endpoint, char **reterr_message)
{
	_cleanup_free_ char *path = NULL, *source = NULL, *tls_dir = NULL;
	struct tls_files t = { 0 };
	json_auto_t *meta = NULL;
	char hash[SHA256_HEX_BYTES];
	const char *host = NULL;
	bool skip = false, tls;
	int r;

	sha256_hex(name, strlen(name), hash);
	path = xasprintf("%s/contexts/meta/%s/meta.json", config_dir, hash);
	r = read_json_file(path, what, &meta, reterr_message);
	if (r == -ENOENT)
		return fail(reterr_message, r, "%s names context \"%s\" but %s does not exist",
			    what, name, path);
	if (r < 0)
		return r;
	r = context_meta_host(meta, what, path, &host, &skip, reterr_message);
	if (r < 0)
		return r;
	tls_dir = xasprintf("%s/contexts/tls/%s/docker", config_dir, hash);
	tls_files_load(&t, tls_dir);
	tls = skip || tls_files_any(&t);
	source = xasprintf("context %s", name);
	r = endpoint_parse(host, tls, source, ret_endpoint, reterr_message);
	if (r < 0) {
		tls_files_release(&t);
		return r;
	}
	tls_files_apply(&t, tls, !skip, *ret_endpoint);
	return 0;
}

/* currentContext from config.json: 0 and *ret_name (NULL when unset), or an error. */
static int config_current_context(const char *config_dir, char **ret_name, char **reterr_message)
{
	_cleanup_free_ char *path = xasprintf("%s/config.json", config_dir);
	json_auto_t *cfg = NULL;
	json_t *cur;
	int r;

	*ret_name = NULL;
	r = read_json_file(path, "docker CLI configuration", &cfg, reterr_message);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (!json_is_object(cfg))
		return fail(reterr_message, -EINVAL, "docker CLI configuration: %s is not a JSON object", path);
	cur = json_object_get(cfg, "currentContext");  /* borrows */
	if (!cur || json_is_null(cur))
		return 0;
	if (!json_is_string(cur))
		return fail(reterr_message, -EINVAL, "%s: currentContext is not a string", path);
	if (json_string_length(cur) > 0)
		*ret_name = xstrdup(json_string_value(cur));
	return 0;
}

/* ---- resolution ------------------------------------------------------------ */

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* engine.host or DOCKER_HOST, with TLS settings from the environment. */
static int resolve_host_setting(const char *host, const char *source, const char *config_dir,
				struct engine_endpoint **ret_endpoint, char **reterr_message)
{
	bool verify = env_nonempty("DOCKER_TLS_VERIFY") != NULL;
	bool tls = verify || env_nonempty("DOCKER_TLS") != NULL;
	const char *cert_dir = env_nonempty("DOCKER_CERT_PATH");
	struct tls_files t = { 0 };
	int r;

	if (!cert_dir)
		cert_dir = config_dir;
	if (tls && cert_dir)
		tls_files_load(&t, cert_dir);
	r = endpoint_parse(host, tls, source, ret_endpoint, reterr_message);
	if (r < 0) {
		tls_files_release(&t);
		return r;
	}
	tls_files_apply(&t, tls, verify, *ret_endpoint);
	return 0;
}

static int resolve_default(struct engine_endpoint **ret_endpoint, char **reterr_message)
{
	return endpoint_parse("unix://" MSB_DEFAULT_DOCKER_SOCKET, false, "default", ret_endpoint,
			      reterr_message);
}

/* Step 3: DOCKER_CONTEXT, else currentContext; *ret_endpoint stays NULL
 * when neither names a context other than "default". */
static int resolve_context(const char *config_dir, struct engine_endpoint **ret_endpoint,
			   char **reterr_message)
{
	_cleanup_free_ char *current = NULL, *what = NULL;
	const char *name = env_nonempty("DOCKER_CONTEXT");
	int r;

	if (name) {
		what = xstrdup("DOCKER_CONTEXT");
	} else if (config_dir) {
		r = config_current_context(config_dir, &current, reterr_message);
		if (r < 0)
			return r;
		name = current;
		what = xasprintf("currentContext in %s/config.json", config_dir);
	}
	if (!name || strcmp(name, ENDPOINT_DEFAULT_CONTEXT) == 0)
		return 0;
	if (!config_dir)
		return fail(reterr_message, -ENOENT,
			    "%s names context \"%s\" but neither DOCKER_CONFIG nor HOME is set", what, name);
	return context_load(config_dir, name, what, ret_endpoint, reterr_message);
}

int engine_endpoint_resolve(const char *configured_host, struct engine_endpoint **ret_endpoint,
			    char **reterr_message)
{
	_cleanup_free_ char *config_dir = docker_config_dir();
	struct engine_endpoint *ep = NULL;
	const char *docker_host = env_nonempty("DOCKER_HOST");
	int r;

	if (configured_host && *configured_host)
		return resolve_host_setting(configured_host, "engine.host", config_dir, ret_endpoint,
					    reterr_message);
	if (docker_host)
		return resolve_host_setting(docker_host, "DOCKER_HOST", config_dir, ret_endpoint,
					    reterr_message);
	r = resolve_context(config_dir, &ep, reterr_message);
	if (r < 0)
		return r;
	if (ep) {
		*ret_endpoint = ep;
		return 0;
	}
	return resolve_default(ret_endpoint, reterr_message);
}
