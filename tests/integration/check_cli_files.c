/* check_cli_files.c — the CLI's file verbs (put, get, stat, rm, reclaim)
 * through a real maf-sandboxd against the real engine: byte-exact round
 * trips, get's all-or-nothing LOCAL, stat's three answers, rm and rm -r,
 * reclaim, the client-side ceiling, and usage errors.
 *
 * Test image: Debian's static busybox imported in main() (no registry).
 * Every container carries the spec label msb-it-run=<run>, and main()
 * removes all of them and the image at the end, whatever failed. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "msb.h"

#define ENGINE_WAIT_MS 15000         /* hang guard */
#define RUN_LABEL "msb-it-run"
/* The guest's storage base (spec work_dir null). */
#define GUEST_BASE "/maf-sandbox/work"
/* The per-file ceiling the CLI enforces before sending (PROTOCOL.md Limits). */
#define CEILING_BYTES (64 * 1024 * 1024)
#define TEST_TIMEOUT_S 120            /* hang guard: Check's per-test timeout */
#define CLI_MAX_ARGS 24

static char run_id[32];
static char image[64];

/* ---- helpers ------------------------------------------------------------ */

/* A daemon whose registry has been read, and one sandbox acquired in it. */
struct env {
	struct msbd_proc d;
	char sandbox[80];
	char local[128];     /* a private local directory for the test's files */
};

static void env_start(struct env *e, const char *test)
{
	char scope[96];
	json_t *r = NULL;
	int code = 0;

	msbd_start(&e->d, NULL);
	json_decref(wait_engine_state(e->d.sock, "reachable", ENGINE_WAIT_MS));
	/* sandbox.list answers once the registry is synchronised (hang guard: 200 polls). */
	for (int i = 0; i < 200 && !r; i++) {
		r = call(e->d.sock, "sandbox.list", NULL, NULL, NULL);
		if (!r)
			usleep(50 * 1000);
	}
	ck_assert_msg(r, "the registry never synchronised");
	json_decref(r);
	snprintf(scope, sizeof(scope), "%s-%s", run_id, test);
	r = call(e->d.sock, "sandbox.acquire",
		 json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:s, s:{s:s}}}",
			   "key", "scope", scope, "thread_id", "t", "agent_dir", "a",
			   "spec", "kind", "k", "image", image, "labels", RUN_LABEL, run_id),
		 &code, NULL);
	if (!r)
		msbd_dump_log(&e->d);
	ck_assert_msg(r, "sandbox.acquire failed: %d", code);
	/* Served by the plane the run asked for (MSB_FILE_PLANE; the suite runs
	 * on both): a run meant for one plane never passes on the other. */
	if (harness_file_plane())
		ck_assert_msg(jstr(r, "file_plane") && strcmp(jstr(r, "file_plane"), harness_file_plane()) == 0,
			      "the sandbox is on the %s plane, the run asked for %s", jstr(r, "file_plane"),
			      harness_file_plane());
	snprintf(e->sandbox, sizeof(e->sandbox), "%s", jstr(r, "sandbox"));
	json_decref(r);
	snprintf(e->local, sizeof(e->local), "%s/local", e->d.dir);
	ck_assert_int_eq(mkdir(e->local, 0755), 0);
}

static void env_stop(struct env *e)
{
	ck_assert_int_eq(msbd_stop(&e->d), 0);
}

/* e->local/name, in a static buffer of its own per slot. */
static const char *lpath(const struct env *e, int slot, const char *name)
{
	static char buf[4][192];

	snprintf(buf[slot], sizeof(buf[slot]), "%s/%s", e->local, name);
	return buf[slot];
}

static void file_put(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* The whole of a local file (malloc'd, NUL added) and its length; NULL when absent. */
static char *file_get(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t n = 0, cap = 0, k;

	if (!f)
		return NULL;
	do {
		if (cap - n < 4096)
			buf = realloc(buf, cap = cap * 2 + 4096);
		k = fread(buf + n, 1, cap - n - 1, f);
		n += k;
	} while (k > 0);
	fclose(f);
	buf[n] = '\0';
	if (ret_len)
		*ret_len = n;
	return buf;
}

/* Entries of dir other than "." and "..". */
static int dir_count(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* Runs the CLI with stdin from in_path (NULL: /dev/null) and stdout into
 * out_path (NULL: discarded); returns its exit status and its stderr. */
static int run_cli_io(const char *const *args, const char *in_path, const char *out_path,
		      char **ret_err)
{
	const char *cli = getenv("MSB_CLI"), *tmp = getenv("TMPDIR"), *argv[CLI_MAX_ARGS + 2];
	char err_path[160];
	int err_fd, status;
	size_t n = 0;
	pid_t pid;

	ck_assert_msg(cli, "MSB_CLI is not set");
	snprintf(err_path, sizeof(err_path), "%s/cli-err-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	argv[n++] = cli;
	for (; *args; args++) {
		ck_assert_uint_lt(n, CLI_MAX_ARGS + 1);
		argv[n++] = *args;
	}
	argv[n] = NULL;
	err_fd = mkstemp(err_path);
	ck_assert_int_ge(err_fd, 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
		int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (in < 0 || out < 0)
			_exit(126);
		dup2(in, STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(err_fd, STDERR_FILENO);
		execv(cli, (char *const *)argv);
		_exit(127);
	}
	close(err_fd);
	waitpid(pid, &status, 0);
	if (ret_err)
		*ret_err = file_get(err_path, NULL);
	unlink(err_path);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs the CLI on e's socket and sandbox: maf-sandbox --socket S VERB
 * [pre...] SANDBOX [post...]; returns the exit status, stdout and stderr. */
static int cli(const struct env *e, const char *verb, const char *const *pre,
	       const char *const *post, char **ret_out, char **ret_err)
{
	const char *args[CLI_MAX_ARGS + 1];
	size_t n = 0;

	args[n++] = "--socket";
	args[n++] = e->d.sock;
	args[n++] = verb;
	for (; pre && *pre; pre++)
		args[n++] = *pre;
	args[n++] = e->sandbox;
	for (; post && *post; post++)
		args[n++] = *post;
	args[n] = NULL;
	ck_assert_uint_le(n, CLI_MAX_ARGS);
	return run_cli(args, ret_out, ret_err);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Asserts the CLI exited with rc, printing its stderr if not. */
#define assert_cli(rc_expr, want, err) do {                                         \
		int rc_ = (rc_expr);                                                \
		ck_assert_msg(rc_ == (want), "exit status %d, want %d; stderr: %s", \
			      rc_, (want), (err) ? (err) : "");                     \
	} while (0)

/* The guest file's bytes, read by the engine (not by the daemon under test). */
static bool guest_equals_local(const struct env *e, const char *guest_abs, const char *local)
{
	char *out = sh_out("docker exec %s cat '%s' | cmp -s - '%s' && echo same", e->sandbox,
			   guest_abs, local);
	bool same = strcmp(out, "same") == 0;

	free(out);
	return same;
}

static void all_bytes(uint8_t buf[256])
{
	for (int i = 0; i < 256; i++)
		buf[i] = (uint8_t)i;
}

/* ---- reap: --all, --dry-run ---------------------------------------------- */

/* How long a dry run is retried until the sandbox is older than the
 * minimum age (1 s): a hang guard, not a measure. */
#define REAP_AGE_WAIT_MS 30000
#define REAP_POLL_MS 200

/* reap without --scope or --all is refused by the CLI (exit 2, nothing
 * sent); --dry-run lists the sandbox by the sweep's selection and removes
 * nothing (the engine still runs it); the real sweep of the scope then
 * removes what the dry run listed. */
START_TEST(reap_needs_a_scope_and_dry_run_removes_nothing)
{
	struct env e = { 0 };
	char scope[96], *out = NULL, *err = NULL, *state;
	json_t *r;
	int rc = -1;

	env_start(&e, "reap");
	snprintf(scope, sizeof(scope), "%s-reap", run_id);
	rc = run_cli(ARGS("--socket", e.d.sock, "reap", "--older-than", "1"), &out, &err);
	assert_cli(rc, 2, err);
	ck_assert_msg(strstr(err, "--all") && strstr(err, "--scope"), "stderr: %s", err);
	free(out), free(err);
	/* The dry run, until the sandbox is old enough to be listed. */
	for (int waited = 0; ; waited += REAP_POLL_MS) {
		rc = run_cli(ARGS("--socket", e.d.sock, "reap", "--older-than", "1", "--scope", scope, "--dry-run"),
			     &out, &err);
		assert_cli(rc, 0, err);
		free(err);
		if (strstr(out, e.sandbox))
			break;
		ck_assert_msg(waited < REAP_AGE_WAIT_MS, "the dry run never listed %s: %s", e.sandbox, out);
		free(out);
		usleep(REAP_POLL_MS * 1000);
	}
	ck_assert_msg(!strncmp(out, "would remove: 1 sandbox(es), 0 proxy container(s), 0 network(s)\n", 64) &&
		      strstr(out, scope), "dry run output: %s", out);
	free(out);
	state = sh_out("docker inspect -f '{{.State.Running}}' %s 2>&1", e.sandbox);
	ck_assert_msg(!strcmp(state, "true"), "the dry run touched the sandbox: %s", state);
	free(state);
	/* --json: the daemon's result, would_dispose with the sandbox. */
	rc = run_cli(ARGS("--socket", e.d.sock, "--json", "reap", "--older-than", "1", "--scope", scope,
			  "--dry-run"), &out, &err);
	assert_cli(rc, 0, err);
	r = json_loads(out, 0, NULL);
	ck_assert_msg(r && json_is_true(json_object_get(r, "dry_run")), "dry run --json: %s", out);
	{
		size_t i;
		json_t *w;
		bool found = false;

		json_array_foreach(json_object_get(r, "would_dispose"), i, w)
			found |= jstr(w, "sandbox") && !strcmp(jstr(w, "sandbox"), e.sandbox) &&
				 jstr(w, "scope") && !strcmp(jstr(w, "scope"), scope);
		ck_assert_msg(found, "would_dispose lacks %s: %s", e.sandbox, out);
	}
	ck_assert_int_eq(jint(r, "disposed"), 0);
	json_decref(r);
	free(out), free(err);
	/* The sweep itself removes what the dry run listed. */
	rc = run_cli(ARGS("--socket", e.d.sock, "reap", "--older-than", "1", "--scope", scope), &out, &err);
	assert_cli(rc, 0, err);
	ck_assert_msg(!strcmp(out, "removed: 1 sandbox(es), 0 proxy container(s), 0 network(s)\n"), "reap: %s", out);
	free(out), free(err);
	state = sh_out("docker inspect -f '{{.State.Running}}' %s 2>&1", e.sandbox);
	ck_assert_msg(strstr(state, "No such"), "the sweep left the sandbox: %s", state);
	free(state);
	env_stop(&e);
}
END_TEST

/* ---- put and get -------------------------------------------------------- */

START_TEST(put_get_round_trip_all_byte_values)
{
	struct env e = { 0 };
	uint8_t bytes[256];
	char *err = NULL, *got;
	struct stat st;
	size_t len;

	env_start(&e, "roundtrip");
	all_bytes(bytes);
	file_put(lpath(&e, 0, "all.bin"), bytes, sizeof(bytes));
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "all.bin"), "data/all.bin"), NULL, &err), 0, err);
	free(err);
	ck_assert(guest_equals_local(&e, GUEST_BASE "/data/all.bin", lpath(&e, 0, "all.bin")));
	umask(022);
	assert_cli(cli(&e, "get", NULL, ARGS("data/all.bin", lpath(&e, 1, "back.bin")), NULL, &err), 0, err);
	free(err);
	got = file_get(lpath(&e, 1, "back.bin"), &len);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(len, sizeof(bytes));
	ck_assert(memcmp(got, bytes, sizeof(bytes)) == 0);
	free(got);
	ck_assert_int_eq(stat(lpath(&e, 1, "back.bin"), &st), 0);
	ck_assert_int_eq(st.st_mode & 07777, 0644);
	/* A second get replaces LOCAL whole. */
	file_put(lpath(&e, 1, "back.bin"), "something longer than nothing at all, and then some more", 56);
	file_put(lpath(&e, 0, "empty"), "", 0);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "empty"), "data/empty"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "get", NULL, ARGS("data/empty", lpath(&e, 1, "back.bin")), NULL, &err), 0, err);
	free(err);
	got = file_get(lpath(&e, 1, "back.bin"), &len);
	ck_assert_uint_eq(len, 0);
	free(got);
	ck_assert_int_eq(dir_count(e.local), 3);       /* all.bin, empty, back.bin: no temporary left */
	env_stop(&e);
}
END_TEST

START_TEST(put_from_stdin_and_get_to_stdout)
{
	const char *put_args[] = { "--socket", NULL, "put", NULL, "-", "in/stdin.bin", NULL };
	const char *get_args[] = { "--socket", NULL, "get", NULL, "in/stdin.bin", "-", NULL };
	struct env e = { 0 };
	uint8_t bytes[256];
	char *err = NULL, *got;
	size_t len;

	env_start(&e, "stdio");
	all_bytes(bytes);
	file_put(lpath(&e, 0, "src"), bytes, sizeof(bytes));
	put_args[1] = get_args[1] = e.d.sock;
	put_args[3] = get_args[3] = e.sandbox;
	assert_cli(run_cli_io(put_args, lpath(&e, 0, "src"), NULL, &err), 0, err);
	free(err);
	ck_assert(guest_equals_local(&e, GUEST_BASE "/in/stdin.bin", lpath(&e, 0, "src")));
	/* "-" and no LOCAL at all both mean stdout. */
	for (int omit = 0; omit < 2; omit++) {
		get_args[5] = omit ? NULL : "-";
		assert_cli(run_cli_io(get_args, NULL, lpath(&e, 1, "out"), &err), 0, err);
		free(err);
		got = file_get(lpath(&e, 1, "out"), &len);
		ck_assert_uint_eq(len, sizeof(bytes));
		ck_assert(memcmp(got, bytes, sizeof(bytes)) == 0);
		free(got);
	}
	env_stop(&e);
}
END_TEST

/* -w names the working directory: relative to the storage base, or absolute. */
START_TEST(working_directory_option)
{
	struct env e = { 0 };
	char *out = NULL, *err = NULL;

	env_start(&e, "wd");
	file_put(lpath(&e, 0, "f"), "hello\n", 6);
	assert_cli(cli(&e, "put", ARGS("-w", "sub"), ARGS(lpath(&e, 0, "f"), "f.txt"), NULL, &err), 0, err);
	free(err);
	ck_assert(guest_equals_local(&e, GUEST_BASE "/sub/f.txt", lpath(&e, 0, "f")));
	assert_cli(cli(&e, "stat", ARGS("--working-directory", GUEST_BASE "/sub"), ARGS("f.txt"), &out, &err),
		   0, err);
	ck_assert_str_eq(out, "file 6 f.txt\n");
	free(out), free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("sub/f.txt"), &out, &err), 0, err);
	ck_assert_str_eq(out, "file 6 sub/f.txt\n");
	free(out), free(err);
	env_stop(&e);
}
END_TEST

/* A get that fails leaves no file, and an existing LOCAL as it was. */
START_TEST(failed_get_leaves_local_alone)
{
	struct env e = { 0 };
	uint8_t bytes[256];
	char *err = NULL, *got;

	env_start(&e, "atomic");
	all_bytes(bytes);
	file_put(lpath(&e, 0, "all.bin"), bytes, sizeof(bytes));
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "all.bin"), "all.bin"), NULL, &err), 0, err);
	free(err);
	file_put(lpath(&e, 1, "keep"), "keep me\n", 8);
	/* Absent in the guest. */
	assert_cli(cli(&e, "get", NULL, ARGS("missing.bin", lpath(&e, 1, "keep")), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "FileNotFoundError"), "stderr: %s", err);
	free(err);
	assert_cli(cli(&e, "get", NULL, ARGS("missing.bin", lpath(&e, 2, "new")), NULL, &err), 1, err);
	free(err);
	/* Over --max-bytes: refused whole, never truncated. */
	assert_cli(cli(&e, "get", ARGS("--max-bytes", "255"), ARGS("all.bin", lpath(&e, 1, "keep")), NULL,
		       &err), 1, err);
	ck_assert_msg(strstr(err, "SandboxTransferCapExceeded"), "stderr: %s", err);
	free(err);
	assert_cli(cli(&e, "get", ARGS("--max-bytes", "255"), ARGS("all.bin", lpath(&e, 2, "new")), NULL,
		       &err), 1, err);
	free(err);
	/* Not a regular file. */
	assert_cli(cli(&e, "get", NULL, ARGS(".", lpath(&e, 1, "keep")), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "OSError"), "stderr: %s", err);
	free(err);
	/* The local side fails: a directory that is not there; a directory in
	 * the way (the rename fails after the temporary file was written). */
	assert_cli(cli(&e, "get", NULL, ARGS("all.bin", lpath(&e, 2, "nodir/new")), NULL, &err), 4, err);
	free(err);
	ck_assert_int_eq(mkdir(lpath(&e, 3, "adir"), 0755), 0);
	assert_cli(cli(&e, "get", NULL, ARGS("all.bin", lpath(&e, 3, "adir")), NULL, &err), 4, err);
	ck_assert_msg(strstr(err, "adir"), "stderr: %s", err);
	free(err);
	got = file_get(lpath(&e, 1, "keep"), NULL);
	ck_assert_str_eq(got, "keep me\n");
	free(got);
	ck_assert_ptr_null(file_get(lpath(&e, 2, "new"), NULL));
	ck_assert_int_eq(dir_count(e.local), 3);         /* all.bin, keep, adir: no temporary left */
	ck_assert_int_eq(dir_count(lpath(&e, 3, "adir")), 0);
	/* And the same get with room enough succeeds (the refusals were the
	 * limits'): 0.25K is 256 bytes (units.h). */
	assert_cli(cli(&e, "get", ARGS("--max-bytes", "0.25K"), ARGS("all.bin", lpath(&e, 2, "new")), NULL,
		       &err), 0, err);
	free(err);
	env_stop(&e);
}
END_TEST

/* The client refuses a LOCAL over the per-file ceiling before it even
 * connects; one at the ceiling gets as far as connecting. Sparse files:
 * nothing of 64 MiB is allocated on disk. */
START_TEST(put_over_the_ceiling_is_refused_client_side)
{
	struct env e = { 0 };
	char *out = NULL, *err = NULL, nosock[160];
	int fd;

	env_start(&e, "ceiling");
	snprintf(nosock, sizeof(nosock), "%s/no.sock", e.d.dir);
	fd = open(lpath(&e, 0, "over"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)CEILING_BYTES + 1), 0);
	close(fd);
	fd = open(lpath(&e, 1, "at"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)CEILING_BYTES), 0);
	close(fd);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "over"), "over.bin"), NULL, &err), 2, err);
	ck_assert_msg(strstr(err, "ceiling") && strstr(err, "67108865"), "stderr: %s", err);
	free(err);
	assert_cli(run_cli(ARGS("--socket", nosock, "put", e.sandbox, lpath(&e, 0, "over"), "over.bin"),
			   NULL, &err), 2, err);
	free(err);
	assert_cli(run_cli(ARGS("--socket", nosock, "put", e.sandbox, lpath(&e, 1, "at"), "at.bin"),
			   NULL, &err), 3, err);    /* past the check, then no daemon there */
	free(err);
	/* Nothing reached the guest. */
	assert_cli(cli(&e, "stat", NULL, ARGS("over.bin"), &out, &err), 1, err);
	free(out), free(err);
	env_stop(&e);
}
END_TEST

/* ---- stat, rm, reclaim -------------------------------------------------- */

START_TEST(stat_file_directory_missing)
{
	struct env e = { 0 };
	char *out = NULL, *err = NULL;

	env_start(&e, "stat");
	file_put(lpath(&e, 0, "f"), "0123456789", 10);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "f"), "d/f"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("d/f"), &out, &err), 0, err);
	ck_assert_str_eq(out, "file 10 d/f\n");
	free(out), free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("d"), &out, &err), 0, err);
	ck_assert_str_eq(out, "directory - d\n");
	free(out), free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("."), &out, &err), 0, err);
	ck_assert_str_eq(out, "directory - .\n");
	free(out), free(err);
	/* Missing: the path, or a parent of it. */
	assert_cli(cli(&e, "stat", NULL, ARGS("d/nope"), &out, &err), 1, err);
	ck_assert_str_eq(out, "");
	ck_assert_msg(strstr(err, "d/nope: no such file"), "stderr: %s", err);
	free(out), free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("nope/deeper"), &out, &err), 1, err);
	free(out), free(err);
	/* --json: the daemon's result as it is. */
	assert_cli(cli(&e, "stat", ARGS("--json"), ARGS("d/nope"), &out, &err), 1, err);
	ck_assert_str_eq(out, "null\n");
	free(out), free(err);
	assert_cli(cli(&e, "stat", ARGS("--json"), ARGS("d/f"), &out, &err), 0, err);
	{
		json_t *j = json_loads(out, 0, NULL);

		ck_assert_ptr_nonnull(j);
		ck_assert_str_eq(jstr(j, "kind"), "file");
		ck_assert_int_eq(jint(j, "size"), 10);
		ck_assert_str_eq(jstr(j, "path"), "d/f");
		json_decref(j);
	}
	free(out), free(err);
	/* A link is described, not followed. */
	free(sh_out("docker exec %s ln -s /etc " GUEST_BASE "/d/link", e.sandbox));
	assert_cli(cli(&e, "stat", NULL, ARGS("d/link"), &out, &err), 0, err);
	ck_assert_str_eq(out, "symlink - d/link\n");
	free(out), free(err);
	env_stop(&e);
}
END_TEST

START_TEST(rm_and_rm_recursive)
{
	struct env e = { 0 };
	char *out = NULL, *err = NULL;

	env_start(&e, "rm");
	file_put(lpath(&e, 0, "f"), "x", 1);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "f"), "top.txt"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "f"), "tree/a/b.txt"), NULL, &err), 0, err);
	free(err);
	/* A file. */
	assert_cli(cli(&e, "rm", NULL, ARGS("top.txt"), &out, &err), 0, err);
	ck_assert_str_eq(out, "");
	free(out), free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("top.txt"), NULL, &err), 1, err);
	free(err);
	/* Absent is success. */
	assert_cli(cli(&e, "rm", NULL, ARGS("top.txt"), NULL, &err), 0, err);
	free(err);
	/* A directory needs -r. */
	assert_cli(cli(&e, "rm", NULL, ARGS("tree"), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "OSError"), "stderr: %s", err);
	free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("tree/a/b.txt"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "rm", ARGS("-r"), ARGS("tree"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("tree"), NULL, &err), 1, err);
	free(err);
	/* The working directory itself is refused, with the daemon's type. */
	assert_cli(cli(&e, "rm", ARGS("--recursive"), ARGS("."), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "ConfinementError"), "stderr: %s", err);
	free(err);
	env_stop(&e);
}
END_TEST

START_TEST(reclaim_a_call_directory)
{
	struct env e = { 0 };
	char *err = NULL;

	env_start(&e, "reclaim");
	file_put(lpath(&e, 0, "f"), "x", 1);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "f"), "call-1/out/r.txt"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "f"), "call-2/r.txt"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "reclaim", NULL, ARGS("call-1"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("call-1"), NULL, &err), 1, err);
	free(err);
	/* Absolute, and bounded by --timeout (sent as timeout_seconds). */
	assert_cli(cli(&e, "reclaim", ARGS("--timeout", "20"), ARGS(GUEST_BASE "/call-2"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "stat", NULL, ARGS("call-2"), NULL, &err), 1, err);
	free(err);
	/* Absent is success; too close to the root is refused. */
	assert_cli(cli(&e, "reclaim", NULL, ARGS("call-1"), NULL, &err), 0, err);
	free(err);
	assert_cli(cli(&e, "reclaim", NULL, ARGS("/tmp"), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "ConfinementError"), "stderr: %s", err);
	free(err);
	env_stop(&e);
}
END_TEST

/* put --mode: the file lands with its permission bits, and runs. */
START_TEST(put_mode_makes_an_executable)
{
	struct env e = { 0 };
	char *err = NULL, *out;

	env_start(&e, "mode");
	file_put(lpath(&e, 0, "run.sh"), "#!/bin/sh\necho ran\n", 19);
	assert_cli(cli(&e, "put", ARGS("--mode", "755"), ARGS(lpath(&e, 0, "run.sh"), "run.sh"), NULL, &err), 0,
		   err);
	free(err);
	out = sh_out("docker exec %s sh -c 'cd %s && stat -c %%a run.sh && ./run.sh'", e.sandbox, GUEST_BASE);
	ck_assert_str_eq(out, "755\nran");
	free(out);
	assert_cli(cli(&e, "put", ARGS("--mode", "0o700"), ARGS(lpath(&e, 0, "run.sh"), "run.sh"), NULL, &err), 0,
		   err);
	free(err);
	out = sh_out("docker exec %s stat -c %%a %s/run.sh", e.sandbox, GUEST_BASE);
	ck_assert_str_eq(out, "700");
	free(out);
	/* Without --mode: the default again. */
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "run.sh"), "run.sh"), NULL, &err), 0, err);
	free(err);
	out = sh_out("docker exec %s stat -c %%a %s/run.sh", e.sandbox, GUEST_BASE);
	ck_assert_str_eq(out, "644");
	free(out);
	env_stop(&e);
}
END_TEST

/* The daemon's file errors reach the user whole: the path, the working
 * directory, the fix. */
START_TEST(file_errors_name_the_path_and_the_fix)
{
	struct env e = { 0 };
	char *err = NULL, *out = NULL;

	env_start(&e, "errmsg");
	assert_cli(cli(&e, "get", NULL, ARGS("nothere.txt"), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "FileNotFoundError") && strstr(err, "nothere.txt (resolved in " GUEST_BASE ")"),
		      "stderr: %s", err);
	free(err);
	assert_cli(cli(&e, "get", NULL, ARGS("/etc/passwd"), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "ConfinementError") && strstr(err, "/etc/passwd") && strstr(err, "-w /"),
		      "stderr: %s", err);
	free(err);
	/* The hint works as written. */
	assert_cli(cli(&e, "get", ARGS("-w", "/"), ARGS("/etc/passwd", "-"), &out, &err), 0, err);
	ck_assert_msg(strstr(out, "root:"), "stdout: %s", out);
	free(out), free(err);
	out = sh_out("docker exec %s mkdir -p %s/adir && echo ok", e.sandbox, GUEST_BASE);
	ck_assert_str_eq(out, "ok");
	free(out);
	file_put(lpath(&e, 0, "x"), "x", 1);
	assert_cli(cli(&e, "put", NULL, ARGS(lpath(&e, 0, "x"), "adir"), NULL, &err), 1, err);
	ck_assert_msg(strstr(err, "adir (resolved in " GUEST_BASE ")") &&
		      strstr(err, "a directory cannot be replaced by a file"), "stderr: %s", err);
	free(err);
	env_stop(&e);
}
END_TEST

/* ---- usage errors: exit status 2, before connecting ----------------------- */

struct usage_row {
	const char *args[8];
	const char *needle;      /* in stderr */
};

static const struct usage_row usage_rows[] = {
	{ { "put", NULL }, "missing arguments" },
	{ { "put", "SB", "local", NULL }, "missing arguments" },
	{ { "put", "SB", "local", "guest", "extra", NULL }, "at most 3" },
	{ { "get", "SB", NULL }, "missing arguments" },
	{ { "get", "SB", "guest", "local", "extra", NULL }, "at most 3" },
	{ { "get", "--max-bytes", "67108865", "SB", "guest", NULL }, "--max-bytes" },
	{ { "get", "--max-bytes", "12q", "SB", "guest", NULL }, "--max-bytes" },
	{ { "get", "--max-bytes", "64.5M", "SB", "guest", NULL }, "--max-bytes" },
	{ { "get", "--max-bytes", "-1K", "SB", "guest", NULL }, "1.5G" },
	{ { "get", "--json", "SB", "guest", "local", NULL }, "LOCAL" },
	{ { "stat", "SB", NULL }, "missing arguments" },
	{ { "stat", "-r", "SB", "guest", NULL }, "--recursive" },
	{ { "rm", "SB", "a", "b", NULL }, "at most 2" },
	{ { "rm", "-x", "SB", "guest", NULL }, "unknown option" },
	{ { "rm", "-w", NULL }, "needs an argument" },
	{ { "reclaim", "SB", NULL }, "missing arguments" },
	{ { "reclaim", "--max-bytes", "1", "SB", "dir", NULL }, "--max-bytes" },
	{ { "status", "-w", "wd", NULL }, "--working-directory" },
	{ { "put", "SB", "/nonexistent/msb-local-file", "guest", NULL }, "cannot read" },
	{ { "stat", "SB", "\xff", NULL }, "UTF-8" },
	{ { "put", "--mode", "4755", "SB", "local", "guest", NULL }, "setuid" },
	{ { "put", "--mode", "1777", "SB", "local", "guest", NULL }, "--mode" },
	{ { "put", "--mode", "9", "SB", "local", "guest", NULL }, "--mode" },
	{ { "put", "--mode", "rwx", "SB", "local", "guest", NULL }, "--mode" },
	{ { "put", "--mode", "", "SB", "local", "guest", NULL }, "--mode" },
	{ { "get", "--mode", "755", "SB", "guest", NULL }, "--mode" },
};

START_TEST(usage_errors_exit_2)
{
	const struct usage_row *row = &usage_rows[_i];
	const char *args[12] = { "--socket", "/nonexistent/msb.sock" };
	char *err = NULL;
	size_t n = 2;

	for (const char *const *a = row->args; *a; a++)
		args[n++] = *a;
	args[n] = NULL;
	assert_cli(run_cli(args, NULL, &err), 2, err);
	ck_assert_msg(strstr(err, row->needle), "row %d: stderr lacks '%s': %s", _i, row->needle, err);
	free(err);
}
END_TEST

/* ---- naming a sandbox ---------------------------------------------------- */

/* The sandbox's line of `ls` (malloc'd), its columns split at blanks. */
static char *ls_line_of(const struct env *e, const char *name)
{
	char *out = NULL, *err = NULL, *line, *save = NULL, *found = NULL;
	char scope[96];
	int rc;

	snprintf(scope, sizeof(scope), "%s-names", run_id);
	rc = run_cli(ARGS("--socket", e->d.sock, "ls", "--scope", scope), &out, &err);

	assert_cli(rc, 0, err);
	ck_assert_msg(strncmp(out, "NAME", 4) == 0 && strstr(out, " ID ") && strstr(out, "LABELS"),
		      "ls header: %s", out);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strncmp(line, name, strlen(name)) == 0 && line[strlen(name)] == ' ')
			found = strdup(line);
	ck_assert_msg(found, "%s is not listed: %s", name, out);
	free(out);
	free(err);
	return found;
}

/* ls shows the short id beside the name, and the labels given at acquire;
 * exec takes the name, get the 12 hex digits ls shows, stat the name with
 * docker's '/'. */
START_TEST(ls_short_id_then_exec_by_name_and_get_by_prefix)
{
	struct env e = { 0 };
	char name[64], id12[13], *line, *out = NULL, *err = NULL, want_labels[96], scope[96];
	json_t *r;

	env_start(&e, "names");
	snprintf(scope, sizeof(scope), "%s-names", run_id);
	r = call(e.d.sock, "sandbox.list", json_pack("{s:s}", "scope", scope), NULL, NULL);
	ck_assert_uint_eq(json_array_size(r), 1);
	snprintf(name, sizeof(name), "%s", json_string_value(json_object_get(json_array_get(r, 0), "name")));
	json_decref(r);
	snprintf(id12, sizeof(id12), "%.12s", e.sandbox);
	line = ls_line_of(&e, name);
	ck_assert_msg(strncmp(line + strspn(line + strlen(name), " ") + strlen(name), id12, 12) == 0 &&
		      line[strlen(name) + strspn(line + strlen(name), " ") + 12] == ' ',
		      "ls: no short id %s beside %s: %s", id12, name, line);
	snprintf(want_labels, sizeof(want_labels), " %s=%s", RUN_LABEL, run_id);
	ck_assert_msg(strstr(line, want_labels), "ls: labels %s missing: %s", want_labels, line);
	free(line);
	/* --json: the labels too. */
	assert_cli(run_cli(ARGS("--socket", e.d.sock, "--json", "ls", "--scope", scope), &out, &err), 0, err);
	r = json_loads(out, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(r, 0), "labels"), RUN_LABEL)),
			 run_id);
	json_decref(r);
	free(out);
	free(err);
	/* exec NAME */
	assert_cli(run_cli(ARGS("--socket", e.d.sock, "exec", name, "--", "sh", "-c", "echo by-name > n.txt; cat n.txt"),
			   &out, &err), 0, err);
	ck_assert_str_eq(out, "by-name\n");
	free(out);
	free(err);
	/* get PREFIX (the 12 digits ls shows, and upper case) */
	assert_cli(run_cli(ARGS("--socket", e.d.sock, "get", id12, "n.txt", "-"), &out, &err), 0, err);
	ck_assert_str_eq(out, "by-name\n");
	free(out);
	free(err);
	for (char *p = id12; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'f' ? *p - 'a' + 'A' : *p);
	assert_cli(run_cli(ARGS("--socket", e.d.sock, "get", id12, "n.txt", "-"), &out, &err), 0, err);
	ck_assert_str_eq(out, "by-name\n");
	free(out);
	free(err);
	/* stat /NAME */
	{
		char slash[80];

		snprintf(slash, sizeof(slash), "/%s", name);
		assert_cli(run_cli(ARGS("--socket", e.d.sock, "stat", slash, "n.txt"), &out, &err), 0, err);
		free(out);
		free(err);
	}
	/* An unknown name: not found, and the message says how to list. */
	ck_assert_int_ne(run_cli(ARGS("--socket", e.d.sock, "exec", "maf-sandbox-docker-000000000000", "--", "true"),
				 &out, &err), 0);
	ck_assert_msg(strstr(err, "SandboxNotFound") && strstr(err, "maf-sandbox-docker-000000000000") &&
		      strstr(err, "maf-sandbox ls"), "stderr: %s", err);
	free(out);
	free(err);
	/* Too few digits: the rule. */
	ck_assert_int_ne(run_cli(ARGS("--socket", e.d.sock, "get", "abcdef", "n.txt", "-"), &out, &err), 0);
	ck_assert_msg(strstr(err, "InvalidParams") && strstr(err, "12 hex digits"), "stderr: %s", err);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

/* ---- exec: stdin, a signal's cancel, --json of a timeout (issue 19) --------- */

/* The kill follows the cancel's answer: its processes are waited for, up
 * to this long (a hang guard, not a measure). */
#define KILL_GRACE_MS 30000
#define POLL_MS 100

/* Guest processes whose command line ends with suffix, seen by the engine. */
static int guest_count(const struct env *e, const char *suffix)
{
	char *out = sh_out("docker exec %s ps -o args | grep -c -- '%s$'", e->sandbox, suffix);
	int n = atoi(out);

	free(out);
	return n;
}

START_TEST(exec_forwards_its_stdin)
{
	struct env e = { 0 };
	const char *cli_path = getenv("MSB_CLI");
	char *out, *err = NULL;
	uint8_t bytes[256];
	size_t len;

	env_start(&e, "execstdin");
	/* echo hi | maf-sandbox exec S -- cat */
	out = sh_out("echo hi | %s --socket %s exec %s -- cat", cli_path, e.d.sock, e.sandbox);
	ck_assert_str_eq(out, "hi");
	free(out);
	/* --no-stdin: the command's stdin is closed, whatever this one's is. */
	out = sh_out("echo hi | %s --socket %s exec --no-stdin %s -- cat; echo \"rc=$?\"", cli_path, e.d.sock,
		     e.sandbox);
	ck_assert_str_eq(out, "rc=0");
	free(out);
	/* Every byte value, from a file, out exactly. */
	all_bytes(bytes);
	file_put(lpath(&e, 0, "in.bin"), bytes, sizeof(bytes));
	assert_cli(run_cli_io(ARGS("--socket", e.d.sock, "exec", e.sandbox, "--", "cat"), lpath(&e, 0, "in.bin"),
			      lpath(&e, 1, "out.bin"), &err), 0, err);
	free(err);
	out = file_get(lpath(&e, 1, "out.bin"), &len);
	ck_assert_uint_eq(len, sizeof(bytes));
	ck_assert(memcmp(out, bytes, sizeof(bytes)) == 0);
	free(out);
	env_stop(&e);
}
END_TEST

START_TEST(exec_sigint_cancels_and_kills)
{
	struct env e = { 0 };
	char out_path[192], err_path[192], *out;
	long waited = 0;
	int status, n;
	pid_t pid;

	env_start(&e, "execsigint");
	snprintf(out_path, sizeof(out_path), "%s", lpath(&e, 0, "out"));
	snprintf(err_path, sizeof(err_path), "%s", lpath(&e, 1, "err"));
	pid = spawn_cli(ARGS("--socket", e.d.sock, "exec", "--sh", "echo started; sleep 302", e.sandbox), out_path,
			err_path);
	while (guest_count(&e, "sleep 302") == 0) {
		ck_assert_msg(waited < 60000, "the command never ran");     /* hang guard */
		usleep(POLL_MS * 1000);
		waited += POLL_MS;
	}
	kill(pid, SIGINT);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "exit status %d", status);
	out = file_get(out_path, NULL);
	ck_assert_str_eq(out, "started\n");
	free(out);
	out = file_get(err_path, NULL);
	ck_assert_msg(strstr(out, "Cancelled"), "stderr: %s", out);
	free(out);
	for (waited = 0; (n = guest_count(&e, "sleep 302")) > 0 && waited < KILL_GRACE_MS; waited += POLL_MS)     /* hang guard */
		usleep(POLL_MS * 1000);
	ck_assert_msg(n == 0, "%d process(es) survived the cancel", n);
	env_stop(&e);
}
END_TEST

START_TEST(exec_json_keeps_a_timeouts_partial_output)
{
	struct env e = { 0 };
	char *out = NULL, *err = NULL;
	json_t *j;

	env_start(&e, "execjson");
	assert_cli(cli(&e, "exec", ARGS("--json", "--timeout", "1", "--sh", "echo early; sleep 30"), NULL, &out,
		       &err), 125, err);
	j = json_loads(out, 0, NULL);
	ck_assert_msg(j, "stdout is not JSON: %s", out);
	ck_assert_int_eq(jint(j, "code"), 1205);
	ck_assert_str_eq(jstr(j, "type"), "TimeoutError");
	ck_assert_str_eq(jstr(j, "data.stdout_text"), "early\n");
	ck_assert_str_eq(jstr(j, "data.stdout_b64"), "ZWFybHkK");
	json_decref(j);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

static Suite *cli_files_suite(void)
{
	Suite *s = suite_create("cli_files");
	TCase *tc;

	tc = tcase_create("put_get");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, put_get_round_trip_all_byte_values);
	tcase_add_test(tc, put_from_stdin_and_get_to_stdout);
	tcase_add_test(tc, working_directory_option);
	tcase_add_test(tc, failed_get_leaves_local_alone);
	tcase_add_test(tc, put_over_the_ceiling_is_refused_client_side);
	tcase_add_test(tc, put_mode_makes_an_executable);
	tcase_add_test(tc, file_errors_name_the_path_and_the_fix);
	suite_add_tcase(s, tc);

	tc = tcase_create("stat_rm_reclaim");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, stat_file_directory_missing);
	tcase_add_test(tc, rm_and_rm_recursive);
	tcase_add_test(tc, reclaim_a_call_directory);
	suite_add_tcase(s, tc);

	tc = tcase_create("naming");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, ls_short_id_then_exec_by_name_and_get_by_prefix);
	suite_add_tcase(s, tc);

	tc = tcase_create("exec");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, exec_forwards_its_stdin);
	tcase_add_test(tc, exec_sigint_cancels_and_kills);
	tcase_add_test(tc, exec_json_keeps_a_timeouts_partial_output);
	suite_add_tcase(s, tc);

	tc = tcase_create("reap");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, reap_needs_a_scope_and_dry_run_removes_nothing);
	suite_add_tcase(s, tc);

	tc = tcase_create("usage");
	tcase_add_loop_test(tc, usage_errors_exit_2, 0, sizeof(usage_rows) / sizeof(usage_rows[0]));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	char *out;
	int failed;

	snprintf(run_id, sizeof(run_id), "itf%d", (int)getpid());
	snprintf(image, sizeof(image), "msb-it-busybox:%s", run_id);
	if (!harness_test_image(image))
		return EXIT_FAILURE;
	harness_run_dir_create();
	sr = srunner_create(cli_files_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_run_dir_remove();
	/* Whatever failed: nothing of this run stays. */
	out = sh_out("docker ps -aq --filter label=maf-sandbox.label.%s=%s | xargs -r docker rm -f >/dev/null 2>&1; "
		     "docker rmi -f %s >/dev/null 2>&1; echo done", RUN_LABEL, run_id, image);
	free(out);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
