/* check_endpoint.c — engine endpoint resolution (docker CLI order) and host
 * URL parsing. Every test runs forked with a private temporary HOME and
 * the DOCKER_* variables cleared, so setenv/unsetenv stay in the child. */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "endpoint.h"
#include "msb-build.h"
#include "sha256.h"
#include "xmalloc.h"

static char home[256];
static char config_dir[300];   /* $HOME/.docker */
static char run_dir[] = "/tmp/check-endpoint-XXXXXX";

static const char *const docker_env[] = {
	"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_TLS",
	"DOCKER_CERT_PATH",
};

static void mkdir_p(const char *path)
{
	_cleanup_free_ char *p = xstrdup(path);

	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		mkdir(p, 0700);
		*s = '/';
	}
	mkdir(p, 0700);
}

static void write_file(const char *path, const char *content)
{
	_cleanup_free_ char *dir = xstrdup(path);
	FILE *f;

	*strrchr(dir, '/') = '\0';
	mkdir_p(dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(content, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* Writes $cfg/contexts/meta/<sha256(name)>/meta.json. */
static char *write_context(const char *cfg, const char *name, const char *host, const char *extra)
{
	char hash[SHA256_HEX_BYTES];
	char *path;
	_cleanup_free_ char *json = NULL;

	sha256_hex(name, strlen(name), hash);
	path = xasprintf("%s/contexts/meta/%s/meta.json", cfg, hash);
	json = xasprintf("{\"Name\":\"%s\",\"Metadata\":{},\"Endpoints\":{\"docker\":{\"Host\":\"%s\"%s}}}",
			 name, host, extra ? extra : "");
	write_file(path, json);
	return path;
}

/* Writes the named TLS files of a context (list of "ca", "cert", "key"). */
static char *write_context_tls(const char *cfg, const char *name, const char *const files[], size_t n)
{
	char hash[SHA256_HEX_BYTES];
	char *dir;

	sha256_hex(name, strlen(name), hash);
	dir = xasprintf("%s/contexts/tls/%s/docker", cfg, hash);
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s.pem", dir, files[i]);

		write_file(p, "-----BEGIN DUMMY-----\n");
	}
	return dir;
}

static void setup(void)
{
	snprintf(home, sizeof(home), "%s/home-XXXXXX", getenv("TMPDIR"));
	ck_assert_ptr_nonnull(mkdtemp(home));
	snprintf(config_dir, sizeof(config_dir), "%s/.docker", home);
	setenv("HOME", home, 1);
	for (size_t i = 0; i < ELEMENTSOF(docker_env); i++)
		unsetenv(docker_env[i]);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void teardown(void)
{
	if (home[0])
		nftw(home, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	home[0] = '\0';
}

/* Resolves; asserts success and returns the endpoint. */
static struct engine_endpoint *resolve_ok(const char *configured)
{
	struct engine_endpoint *ep = NULL;
	char *err = NULL;
	int r = engine_endpoint_resolve(configured, &ep, &err);

	ck_assert_msg(r == 0, "resolve failed: %d %s", r, err ? err : "(no message)");
	ck_assert_ptr_null(err);
	ck_assert_ptr_nonnull(ep);
	return ep;
}

/* Resolves; asserts the error and that the message contains each needle. */
static void resolve_fails(const char *configured, int error, const char *const needles[], size_t n)
{
	struct engine_endpoint *ep = NULL;
	_cleanup_free_ char *err = NULL;
	int r = engine_endpoint_resolve(configured, &ep, &err);

	ck_assert_msg(r == error, "resolve gave %d, wanted %d (%s)", r, error, err ? err : "");
	ck_assert_ptr_null(ep);
	ck_assert_ptr_nonnull(err);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strstr(err, needles[i]), "message \"%s\" lacks \"%s\"", err, needles[i]);
}

static void assert_unix(const struct engine_endpoint *ep, const char *path, const char *source)
{
	_cleanup_free_ char *host = xasprintf("unix://%s", path);

	ck_assert_int_eq(ep->kind, ENGINE_ENDPOINT_UNIX);
	ck_assert_str_eq(ep->unix_path, path);
	ck_assert_str_eq(ep->host, host);
	ck_assert_str_eq(ep->base_url, "http://api.moby.localhost");
	ck_assert_str_eq(ep->source, source);
	ck_assert(!ep->tls);
	ck_assert_ptr_null(ep->ca_file);
}

/* ---- the resolution order ---------------------------------------------- */

START_TEST(test_default_when_nothing_set)
{
	struct engine_endpoint *ep = resolve_ok(NULL);

	assert_unix(ep, MSB_DEFAULT_DOCKER_SOCKET, "default");
	engine_endpoint_free(ep);
}
END_TEST

START_TEST(test_configured_host_wins)
{
	struct engine_endpoint *ep;

	setenv("DOCKER_HOST", "unix:///tmp/from-env.sock", 1);
	setenv("DOCKER_CONTEXT", "missing", 1);
	ep = resolve_ok("unix:///tmp/configured.sock");
	assert_unix(ep, "/tmp/configured.sock", "engine.host");
	engine_endpoint_free(ep);
}
END_TEST

START_TEST(test_empty_configured_host_is_unset)
{
	struct engine_endpoint *ep;

	setenv("DOCKER_HOST", "unix:///tmp/from-env.sock", 1);
	ep = resolve_ok("");
	assert_unix(ep, "/tmp/from-env.sock", "DOCKER_HOST");
	engine_endpoint_free(ep);
}
END_TEST

/* DOCKER_HOST beats DOCKER_CONTEXT, even one whose meta.json is missing. */
START_TEST(test_docker_host_beats_context)
{
	struct engine_endpoint *ep;

	setenv("DOCKER_HOST", "unix:///tmp/from-env.sock", 1);
	setenv("DOCKER_CONTEXT", "missing", 1);
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/from-env.sock", "DOCKER_HOST");
	engine_endpoint_free(ep);
}
END_TEST

START_TEST(test_docker_context_beats_current_context)
{
	struct engine_endpoint *ep;
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);

	free(write_context(config_dir, "envctx", "unix:///tmp/envctx.sock", NULL));
	free(write_context(config_dir, "filectx", "unix:///tmp/filectx.sock", NULL));
	write_file(cfg, "{\"currentContext\":\"filectx\"}");
	setenv("DOCKER_CONTEXT", "envctx", 1);
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/envctx.sock", "context envctx");
	engine_endpoint_free(ep);
}
END_TEST

START_TEST(test_current_context_from_config)
{
	struct engine_endpoint *ep;
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);

	free(write_context(config_dir, "filectx", "unix:///tmp/filectx.sock", NULL));
	write_file(cfg, "{\"auths\":{},\"currentContext\":\"filectx\"}");
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/filectx.sock", "context filectx");
	engine_endpoint_free(ep);
}
END_TEST

/* $DOCKER_CONFIG replaces $HOME/.docker for config.json and contexts. */
START_TEST(test_docker_config_dir)
{
	struct engine_endpoint *ep;
	_cleanup_free_ char *alt = xasprintf("%s/alt", home);
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", alt);
	_cleanup_free_ char *home_cfg = xasprintf("%s/config.json", config_dir);

	write_file(home_cfg, "{\"currentContext\":\"missing\"}");
	free(write_context(alt, "altctx", "unix:///tmp/alt.sock", NULL));
	write_file(cfg, "{\"currentContext\":\"altctx\"}");
	setenv("DOCKER_CONFIG", alt, 1);
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/alt.sock", "context altctx");
	engine_endpoint_free(ep);
}
END_TEST

/* "default" (from either place) and an empty currentContext mean step 4. */
START_TEST(test_context_default)
{
	static const struct {
		const char *env;
		const char *config;
	} rows[] = {
		{ "default", NULL },
		{ NULL, "{\"currentContext\":\"default\"}" },
		{ NULL, "{\"currentContext\":\"\"}" },
		{ NULL, "{\"currentContext\":null}" },
		{ NULL, "{}" },
	};
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		struct engine_endpoint *ep;

		unsetenv("DOCKER_CONTEXT");
		unlink(cfg);
		if (rows[i].env)
			setenv("DOCKER_CONTEXT", rows[i].env, 1);
		if (rows[i].config)
			write_file(cfg, rows[i].config);
		ep = resolve_ok(NULL);
		assert_unix(ep, MSB_DEFAULT_DOCKER_SOCKET, "default");
		engine_endpoint_free(ep);
	}
}
END_TEST

/* ---- context failures ---------------------------------------------------- */

START_TEST(test_context_missing_meta_from_env)
{
	char hash[SHA256_HEX_BYTES];
	_cleanup_free_ char *path = NULL;

	sha256_hex("foo", 3, hash);
	path = xasprintf("%s/contexts/meta/%s/meta.json does not exist", config_dir, hash);
	setenv("DOCKER_CONTEXT", "foo", 1);
	resolve_fails(NULL, -ENOENT,
		      (const char *const[]){ "DOCKER_CONTEXT names context \"foo\" but ", path }, 2);
}
END_TEST

START_TEST(test_context_missing_meta_from_config)
{
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);
	_cleanup_free_ char *what = xasprintf("currentContext in %s names context \"gone\"", cfg);

	write_file(cfg, "{\"currentContext\":\"gone\"}");
	resolve_fails(NULL, -ENOENT, (const char *const[]){ what, "does not exist" }, 2);
}
END_TEST

START_TEST(test_context_bad_meta)
{
	static const struct {
		const char *content;
		const char *needle;
	} rows[] = {
		{ "{not json", "is not valid JSON" },
		{ "{\"Endpoints\":{}}", "has no Endpoints.docker.Host" },
		{ "{\"Endpoints\":{\"docker\":{\"Host\":\"\"}}}", "has no Endpoints.docker.Host" },
		{ "{\"Endpoints\":{\"docker\":{\"Host\":\"unix:///x\",\"SkipTLSVerify\":\"yes\"}}}",
		  "SkipTLSVerify is not a boolean" },
	};
	char hash[SHA256_HEX_BYTES];
	_cleanup_free_ char *path = NULL;

	sha256_hex("bad", 3, hash);
	path = xasprintf("%s/contexts/meta/%s/meta.json", config_dir, hash);
	setenv("DOCKER_CONTEXT", "bad", 1);
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		write_file(path, rows[i].content);
		resolve_fails(NULL, -EINVAL, (const char *const[]){ "DOCKER_CONTEXT", path, rows[i].needle }, 3);
	}
}
END_TEST

START_TEST(test_bad_config_json)
{
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);

	write_file(cfg, "{\"currentContext\":");
	resolve_fails(NULL, -EINVAL, (const char *const[]){ cfg, "is not valid JSON" }, 2);
	write_file(cfg, "{\"currentContext\":42}");
	resolve_fails(NULL, -EINVAL, (const char *const[]){ cfg, "currentContext is not a string" }, 2);
	write_file(cfg, "[]");
	resolve_fails(NULL, -EINVAL, (const char *const[]){ cfg, "not a JSON object" }, 2);
}
END_TEST

/* A config.json over the size cap is refused before parsing. */
START_TEST(test_config_json_too_big)
{
	_cleanup_free_ char *cfg = xasprintf("%s/config.json", config_dir);
	size_t n = 1024 * 1024 + 16;
	char *big = xmalloc(n + 1);

	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	write_file(cfg, big);
	free(big);
	resolve_fails(NULL, -EFBIG, (const char *const[]){ cfg, "is larger than" }, 2);
}
END_TEST

/* A context's ssh:// host is refused with the message saying so. */
START_TEST(test_context_ssh_refused)
{
	free(write_context(config_dir, "remote", "ssh://me@build-host", NULL));
	setenv("DOCKER_CONTEXT", "remote", 1);
	resolve_fails(NULL, -EPROTONOSUPPORT,
		      (const char *const[]){ "context remote: ssh:// endpoints are not supported; use a unix:// "
					     "or tcp:// endpoint (e.g. forward the socket)" }, 1);
}
END_TEST

/* ---- context TLS --------------------------------------------------------------- */

START_TEST(test_context_tls_files)
{
	static const char *const files[] = { "ca", "cert", "key" };
	struct engine_endpoint *ep;
	_cleanup_free_ char *dir = NULL, *ca = NULL, *cert = NULL, *key = NULL;

	free(write_context(config_dir, "secure", "tcp://engine.example:2376", NULL));
	dir = write_context_tls(config_dir, "secure", files, 3);
	ca = xasprintf("%s/ca.pem", dir);
	cert = xasprintf("%s/cert.pem", dir);
	key = xasprintf("%s/key.pem", dir);
	setenv("DOCKER_CONTEXT", "secure", 1);
	setenv("DOCKER_TLS_VERIFY", "", 1);   /* the environment does not matter for contexts */
	ep = resolve_ok(NULL);
	ck_assert_int_eq(ep->kind, ENGINE_ENDPOINT_TCP);
	ck_assert_str_eq(ep->host, "tcp://engine.example:2376");
	ck_assert_str_eq(ep->base_url, "https://engine.example:2376");
	ck_assert(ep->tls);
	ck_assert(ep->tls_verify);
	ck_assert_str_eq(ep->ca_file, ca);
	ck_assert_str_eq(ep->cert_file, cert);
	ck_assert_str_eq(ep->key_file, key);
	ck_assert_str_eq(ep->source, "context secure");
	ck_assert_ptr_null(ep->unix_path);
	engine_endpoint_free(ep);
}
END_TEST

/* Rows: TLS files present, SkipTLSVerify → tls, verify, scheme and default port. */
START_TEST(test_context_tls_table)
{
	static const char *const ca_only[] = { "ca" };
	static const struct {
		bool ca;
		const char *extra;
		bool tls, verify;
		const char *base_url;
	} rows[] = {
		{ false, NULL, false, false, "http://h:2375" },
		{ true, NULL, true, true, "https://h:2376" },
		{ false, ",\"SkipTLSVerify\":true", true, false, "https://h:2376" },
		{ true, ",\"SkipTLSVerify\":true", true, false, "https://h:2376" },
		{ false, ",\"SkipTLSVerify\":false", false, false, "http://h:2375" },
	};

	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		_cleanup_free_ char *name = xasprintf("ctx%zu", i);
		struct engine_endpoint *ep;

		free(write_context(config_dir, name, "tcp://h", rows[i].extra));
		if (rows[i].ca)
			free(write_context_tls(config_dir, name, ca_only, 1));
		setenv("DOCKER_CONTEXT", name, 1);
		ep = resolve_ok(NULL);
		ck_assert_msg(ep->tls == rows[i].tls && ep->tls_verify == rows[i].verify, "row %zu", i);
		ck_assert_str_eq(ep->base_url, rows[i].base_url);
		ck_assert(rows[i].ca == (ep->ca_file != NULL));
		ck_assert_ptr_null(ep->cert_file);
		engine_endpoint_free(ep);
	}
}
END_TEST

/* TLS material is ignored for a unix:// context. */
START_TEST(test_context_unix_ignores_tls)
{
	static const char *const files[] = { "ca", "cert", "key" };
	struct engine_endpoint *ep;

	free(write_context(config_dir, "local", "unix:///tmp/local.sock", ",\"SkipTLSVerify\":true"));
	free(write_context_tls(config_dir, "local", files, 3));
	setenv("DOCKER_CONTEXT", "local", 1);
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/local.sock", "context local");
	ck_assert_ptr_null(ep->cert_file);
	ck_assert_ptr_null(ep->key_file);
	engine_endpoint_free(ep);
}
END_TEST

/* ---- tcp:// with TLS from the environment ---------------------------------------- */

START_TEST(test_env_tls_table)
{
	static const struct {
		const char *verify, *tls;     /* NULL: unset */
		bool want_tls, want_verify;
		const char *base_url;
	} rows[] = {
		{ NULL, NULL, false, false, "http://h:2375" },
		{ "1", NULL, true, true, "https://h:2376" },
		{ "0", NULL, true, true, "https://h:2376" },      /* even "0" */
		{ "", NULL, false, false, "http://h:2375" },       /* empty is unset */
		{ NULL, "1", true, false, "https://h:2376" },
		{ "", "1", true, false, "https://h:2376" },
		{ "1", "1", true, true, "https://h:2376" },
	};

	setenv("DOCKER_HOST", "tcp://h", 1);
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		struct engine_endpoint *ep;

		unsetenv("DOCKER_TLS_VERIFY");
		unsetenv("DOCKER_TLS");
		if (rows[i].verify)
			setenv("DOCKER_TLS_VERIFY", rows[i].verify, 1);
		if (rows[i].tls)
			setenv("DOCKER_TLS", rows[i].tls, 1);
		ep = resolve_ok(NULL);
		ck_assert_msg(ep->tls == rows[i].want_tls && ep->tls_verify == rows[i].want_verify,
			      "row %zu: tls %d verify %d", i, ep->tls, ep->tls_verify);
		ck_assert_str_eq(ep->base_url, rows[i].base_url);
		ck_assert_str_eq(ep->source, "DOCKER_HOST");
		engine_endpoint_free(ep);
	}
}
END_TEST

/* Certificates from DOCKER_CERT_PATH, each only if present. */
START_TEST(test_env_cert_path)
{
	_cleanup_free_ char *dir = xasprintf("%s/certs", home);
	_cleanup_free_ char *ca = xasprintf("%s/ca.pem", dir), *cert = xasprintf("%s/cert.pem", dir);
	struct engine_endpoint *ep;

	write_file(ca, "x");
	write_file(cert, "x");
	setenv("DOCKER_CERT_PATH", dir, 1);
	setenv("DOCKER_TLS_VERIFY", "1", 1);
	ep = resolve_ok("tcp://engine:9999");
	ck_assert_str_eq(ep->source, "engine.host");
	ck_assert_str_eq(ep->base_url, "https://engine:9999");
	ck_assert_str_eq(ep->ca_file, ca);
	ck_assert_str_eq(ep->cert_file, cert);
	ck_assert_ptr_null(ep->key_file);
	engine_endpoint_free(ep);
}
END_TEST

/* Without DOCKER_CERT_PATH the files come from the config dir. */
START_TEST(test_env_cert_path_default)
{
	_cleanup_free_ char *key = xasprintf("%s/key.pem", config_dir);
	struct engine_endpoint *ep;

	write_file(key, "x");
	setenv("DOCKER_TLS", "1", 1);
	setenv("DOCKER_HOST", "tcp://engine:2376", 1);
	ep = resolve_ok(NULL);
	ck_assert(ep->tls && !ep->tls_verify);
	ck_assert_ptr_null(ep->ca_file);
	ck_assert_ptr_null(ep->cert_file);
	ck_assert_str_eq(ep->key_file, key);
	engine_endpoint_free(ep);
}
END_TEST

/* TLS settings are ignored for unix:// hosts. */
START_TEST(test_env_tls_ignored_for_unix)
{
	_cleanup_free_ char *ca = xasprintf("%s/ca.pem", config_dir);
	struct engine_endpoint *ep;

	write_file(ca, "x");
	setenv("DOCKER_TLS_VERIFY", "1", 1);
	setenv("DOCKER_HOST", "unix:///tmp/e.sock", 1);
	ep = resolve_ok(NULL);
	assert_unix(ep, "/tmp/e.sock", "DOCKER_HOST");
	engine_endpoint_free(ep);
}
END_TEST

/* ---- host URL parsing ---------------------------------------------------------- */

struct host_row {
	const char *host;
	int error;
	const char *want_host;      /* success: ep->host */
	const char *want_base;      /* success: ep->base_url */
	const char *needle;         /* failure: in the message */
};

static const struct host_row host_rows[] = {
	{ "unix:///var/run/docker.sock", 0, "unix:///var/run/docker.sock", "http://api.moby.localhost", NULL },
	{ "unix://", 0, "unix://" MSB_DEFAULT_DOCKER_SOCKET, "http://api.moby.localhost", NULL },
	{ "tcp://h:1234", 0, "tcp://h:1234", "http://h:1234", NULL },
	{ "tcp://h", 0, "tcp://h:2375", "http://h:2375", NULL },
	{ "tcp://h/", 0, "tcp://h:2375", "http://h:2375", NULL },
	{ "tcp://", 0, "tcp://localhost:2375", "http://localhost:2375", NULL },
	{ "tcp://10.0.0.1:2375", 0, "tcp://10.0.0.1:2375", "http://10.0.0.1:2375", NULL },
	{ "tcp://[::1]:2376", 0, "tcp://[::1]:2376", "http://[::1]:2376", NULL },
	{ "tcp://[fe80::1]", 0, "tcp://[fe80::1]:2375", "http://[fe80::1]:2375", NULL },
	{ "ssh://me@host", -EPROTONOSUPPORT, NULL, NULL,
	  "test: ssh:// endpoints are not supported; use a unix:// or tcp:// endpoint (e.g. forward the socket)" },
	{ "fd://", -EPROTONOSUPPORT, NULL, NULL, "test: fd:// endpoints are not supported" },
	{ "npipe:////./pipe/docker_engine", -EPROTONOSUPPORT, NULL, NULL, "npipe:// endpoints are Windows" },
	{ "http://h:2375", -EPROTONOSUPPORT, NULL, NULL, "unsupported scheme \"http\"" },
	{ "h:2375", -EINVAL, NULL, NULL, "has no scheme" },
	{ "/var/run/docker.sock", -EINVAL, NULL, NULL, "has no scheme" },
	{ "unix://relative.sock", -EINVAL, NULL, NULL, "is not absolute" },
	{ "unix:///tmp/a b", -EINVAL, NULL, NULL, "space or control character" },
	{ "tcp://h:0", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://h:65536", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://h:abc", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://h:", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://h%41:1", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://[::1", -EINVAL, NULL, NULL, "not a valid host[:port]" },
	{ "tcp://h:2375/v1.41", -EINVAL, NULL, NULL, "has a path, query or fragment" },
	{ "tcp://h:2375?x=1", -EINVAL, NULL, NULL, "has a path, query or fragment" },
};

START_TEST(test_host_parse)
{
	const struct host_row *row = &host_rows[_i];
	struct engine_endpoint *ep = NULL;
	_cleanup_free_ char *err = NULL;
	int r = engine_endpoint_from_host(row->host, "test", &ep, &err);

	ck_assert_msg(r == row->error, "%s: got %d (%s)", row->host, r, err ? err : "");
	if (r < 0) {
		ck_assert_ptr_null(ep);
		ck_assert_ptr_nonnull(err);
		ck_assert_msg(strstr(err, row->needle), "%s: message \"%s\"", row->host, err);
		ck_assert_msg(strncmp(err, "test: ", 6) == 0, "message names no setting: %s", err);
		return;
	}
	ck_assert_ptr_null(err);
	ck_assert_str_eq(ep->host, row->want_host);
	ck_assert_str_eq(ep->base_url, row->want_base);
	ck_assert_str_eq(ep->source, "test");
	ck_assert(!ep->tls);
	engine_endpoint_free(ep);
}
END_TEST

/* sun_path holds 107 bytes and a NUL. */
START_TEST(test_unix_path_length)
{
	char path[200], host[220];
	struct engine_endpoint *ep = NULL;
	char *err = NULL;

	memset(path, 'p', sizeof(path));
	path[0] = '/';
	path[107] = '\0';
	snprintf(host, sizeof(host), "unix://%s", path);
	ck_assert_int_eq(engine_endpoint_from_host(host, "test", &ep, &err), 0);
	ck_assert_uint_eq(strlen(ep->unix_path), 107);
	ep = engine_endpoint_free(ep);
	path[107] = 'p';
	path[108] = '\0';
	snprintf(host, sizeof(host), "unix://%s", path);
	ck_assert_int_eq(engine_endpoint_from_host(host, "test", &ep, &err), -ENAMETOOLONG);
	ck_assert_ptr_null(ep);
	ck_assert_msg(strstr(err, "is 108 bytes long; at most 107 fit"), "%s", err);
	free(err);
}
END_TEST

/* User information is refused, and no message ever shows the password. */
START_TEST(test_userinfo_refused_and_hidden)
{
	static const char *const hosts[] = {
		"tcp://user:s3cret@h:2375", "tcp://s3cret@h", "foo://user:s3cret@h/x", "ssh://u:s3cret@h",
	};

	for (size_t i = 0; i < ELEMENTSOF(hosts); i++) {
		struct engine_endpoint *ep = NULL;
		_cleanup_free_ char *err = NULL;

		ck_assert_int_lt(engine_endpoint_from_host(hosts[i], "DOCKER_HOST", &ep, &err), 0);
		ck_assert_ptr_null(ep);
		ck_assert_msg(!strstr(err, "s3cret"), "secret leaked: %s", err);
		ck_assert_msg(strncmp(err, "DOCKER_HOST: ", 13) == 0, "%s", err);
	}
}
END_TEST

START_TEST(test_docker_host_ssh_message)
{
	setenv("DOCKER_HOST", "ssh://me@remote", 1);
	resolve_fails(NULL, -EPROTONOSUPPORT,
		      (const char *const[]){ "DOCKER_HOST: ssh:// endpoints are not supported; use a unix:// "
					     "or tcp:// endpoint (e.g. forward the socket)" }, 1);
}
END_TEST

START_TEST(test_dup_and_free)
{
	static const char *const files[] = { "ca", "cert", "key" };
	struct engine_endpoint *ep, *c;

	free(write_context(config_dir, "s", "tcp://h:1", NULL));
	free(write_context_tls(config_dir, "s", files, 3));
	setenv("DOCKER_CONTEXT", "s", 1);
	ep = resolve_ok(NULL);
	c = engine_endpoint_dup(ep);
	ck_assert_ptr_ne(c, ep);
	ck_assert_int_eq(c->kind, ep->kind);
	ck_assert_str_eq(c->host, ep->host);
	ck_assert_str_eq(c->base_url, ep->base_url);
	ck_assert_str_eq(c->ca_file, ep->ca_file);
	ck_assert_str_eq(c->cert_file, ep->cert_file);
	ck_assert_str_eq(c->key_file, ep->key_file);
	ck_assert_str_eq(c->source, ep->source);
	ck_assert(c->tls == ep->tls && c->tls_verify == ep->tls_verify);
	ck_assert_ptr_null(engine_endpoint_free(ep));
	ck_assert_ptr_null(engine_endpoint_free(c));
	ck_assert_ptr_null(engine_endpoint_free(NULL));
	ck_assert_ptr_null(engine_endpoint_dup(NULL));
}
END_TEST

START_TEST(test_kind_to_string)
{
	ck_assert_str_eq(engine_endpoint_kind_to_string(ENGINE_ENDPOINT_UNIX), "unix");
	ck_assert_str_eq(engine_endpoint_kind_to_string(ENGINE_ENDPOINT_TCP), "tcp");
	ck_assert_str_eq(engine_endpoint_kind_to_string(_ENGINE_ENDPOINT_KIND_MAX), "invalid");
}
END_TEST

static TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

static Suite *endpoint_suite(void)
{
	Suite *s = suite_create("endpoint");
	TCase *tc;

	tc = fixture_tcase("resolution_order");
	tcase_add_test(tc, test_default_when_nothing_set);
	tcase_add_test(tc, test_configured_host_wins);
	tcase_add_test(tc, test_empty_configured_host_is_unset);
	tcase_add_test(tc, test_docker_host_beats_context);
	tcase_add_test(tc, test_docker_context_beats_current_context);
	tcase_add_test(tc, test_current_context_from_config);
	tcase_add_test(tc, test_docker_config_dir);
	tcase_add_test(tc, test_context_default);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("context_errors");
	tcase_add_test(tc, test_context_missing_meta_from_env);
	tcase_add_test(tc, test_context_missing_meta_from_config);
	tcase_add_test(tc, test_context_bad_meta);
	tcase_add_test(tc, test_bad_config_json);
	tcase_add_test(tc, test_config_json_too_big);
	tcase_add_test(tc, test_context_ssh_refused);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("context_tls");
	tcase_add_test(tc, test_context_tls_files);
	tcase_add_test(tc, test_context_tls_table);
	tcase_add_test(tc, test_context_unix_ignores_tls);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("env_tls");
	tcase_add_test(tc, test_env_tls_table);
	tcase_add_test(tc, test_env_cert_path);
	tcase_add_test(tc, test_env_cert_path_default);
	tcase_add_test(tc, test_env_tls_ignored_for_unix);
	suite_add_tcase(s, tc);

	tc = fixture_tcase("host_parsing");
	tcase_add_loop_test(tc, test_host_parse, 0, (int)ELEMENTSOF(host_rows));
	tcase_add_test(tc, test_unix_path_length);
	tcase_add_test(tc, test_userinfo_refused_and_hidden);
	tcase_add_test(tc, test_docker_host_ssh_message);
	tcase_add_test(tc, test_dup_and_free);
	tcase_add_test(tc, test_kind_to_string);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(endpoint_suite());
	int failed;

	/* Each test's HOME lives here; a failed assertion skips the checked
	 * teardown (Check ends the child with _exit), so remove it all after. */
	if (!mkdtemp(run_dir) || setenv("TMPDIR", run_dir, 1) < 0)
		return EXIT_FAILURE;
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	nftw(run_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
