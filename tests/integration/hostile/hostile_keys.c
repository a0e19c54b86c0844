/* hostile_keys.c — findings 11 and 12 of issue 17 (see hostile.h).
 *
 * 11. Key squatting: a user who acquires another user's key first must not
 *     block it nor learn whether it is held. Two unprivileged users (forked
 *     children that setuid to two uids no account has; the daemon's socket
 *     is given to their group, nogroup) acquire one key: each gets its own
 *     sandbox, neither answer says anything of the other, and one's
 *     disposal leaves the other's running. Root, acting for the seed, gets a
 *     third (the seed's name).
 *     A user's container under root's names (made while she was a member
 *     of sandbox.admin_group, as before per-owner keys) is not root's to
 *     serve once she has left: root's acquire is refused SandboxConflict
 *     naming her uid, she still reaches it, and once root disposes of it by
 *     id root's next acquire makes root's own.
 * 12. Engine text on the wire: acquiring an image that cannot be pulled
 *     (a registry on 127.0.0.1:1, where nothing listens: the engine's pull
 *     fails at once and touches no network but loopback) answers with the
 *     code and a stable reason; the engine's own message — read with a
 *     direct engine call — is in the daemon's log, not in the answer. */
#include <check.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "msb.h"

/* Two uids no account has, both in group nogroup (65534), which gets the
 * socket: nothing is created on the system. */
#define USER_A_UID 65534
#define USER_B_UID 65533
#define USERS_GID  65534
/* A registry address where nothing listens: the pull fails on loopback. */
#define MISSING_REPO "127.0.0.1:1/msb-it-missing/x"
#define MISSING_TAG  "1"
#define MISSING_REF  MISSING_REPO ":" MISSING_TAG
#define ENGINE_WAIT_MS 15000   /* hang guard */

static json_t *key_of(const char *scope)
{
	return json_pack("{s:s, s:s, s:s}", "scope", scope, "thread_id", "t", "agent_dir", "agent");
}

/* What a user's child reports: its acquire's answer and what it then saw. */
struct user_answer {
	int failed_check;        /* 0, or the number of the check that failed */
	char id[80], name[64];
	bool created;
	int listed;              /* its sandbox.list's length after the acquire */
};

/* As uid (gid USERS_GID, no supplementary groups): acquires key_of(scope);
 * with dispose, then disposes it by key and checks its list is empty.
 * Runs in a forked child; writes the answer to fd. */
static void as_user(uid_t uid, const char *sock, const char *scope, bool dispose, int fd)
{
	struct user_answer a = { 0 };
	struct msb_conn *c = NULL;
	json_t *r = NULL;

	if (setgroups(0, NULL) < 0 || setgid(USERS_GID) < 0 || setuid(uid) < 0) {
		a.failed_check = 1;
		goto out;
	}
	if (msb_connect(sock, &c) != MSB_OK) {
		a.failed_check = 2;
		goto out;
	}
	if (msb_call(c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_of(scope), "spec", hostile_spec()),
		     &r) != MSB_OK) {
		fprintf(stderr, "uid %u: acquire: %d %s: %s\n", (unsigned)uid, msb_last_error_code(c),
			msb_last_error_type(c), msb_last_error_message(c));
		a.failed_check = 3;
		goto out;
	}
	snprintf(a.id, sizeof(a.id), "%s", json_string_value(json_object_get(r, "sandbox")));
	snprintf(a.name, sizeof(a.name), "%s", json_string_value(json_object_get(r, "name")));
	a.created = json_is_true(json_object_get(r, "created"));
	json_decref(r);
	if (msb_call(c, "sandbox.list", NULL, &r) != MSB_OK) {
		a.failed_check = 4;
		goto out;
	}
	a.listed = (int)json_array_size(r);
	json_decref(r);
	if (dispose) {
		if (msb_call(c, "sandbox.dispose", json_pack("{s:o}", "key", key_of(scope)), &r) != MSB_OK ||
		    !json_is_null(r)) {
			a.failed_check = 5;
			goto out;
		}
		if (msb_call(c, "sandbox.list", NULL, &r) != MSB_OK || json_array_size(r) != 0) {
			a.failed_check = 6;
			goto out;
		}
		json_decref(r);
	}
out:
	msb_conn_free(c);
	if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
		_exit(99);
	_exit(0);
}

/* Runs as_user in a child and returns its answer. */
static struct user_answer run_as_user(uid_t uid, const char *sock, const char *scope, bool dispose)
{
	struct user_answer a = { .failed_check = -1 };
	int fds[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		as_user(uid, sock, scope, dispose, fds[1]);   /* never returns (_exit: no atexit of ours) */
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &a, sizeof(a)), (ssize_t)sizeof(a));
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_msg(a.failed_check == 0, "as uid %u, check %d failed", (unsigned)uid, a.failed_check);
	return a;
}

/* The container's state on the engine ("running"), or "absent". malloc'd. */
static char *engine_state(const char *id)
{
	char path[160], *body, *out;
	json_t *j, *status;

	snprintf(path, sizeof(path), "/containers/%s/json", id);
	body = engine_get(path, NULL, NULL);
	j = json_loads(body ? body : "", 0, NULL);
	free(body);
	status = json_object_get(json_object_get(j, "State"), "Status");
	out = strdup(json_is_string(status) ? json_string_value(status) : "absent");
	json_decref(j);
	return out;
}

/* Starts a daemon and waits until its engine is reachable and its registry
 * current (sandbox.list answers). */
static void start_daemon(struct msbd_proc *d, const char *const *args)
{
	int code = -1;

	msbd_start(d, args);
	json_decref(wait_engine_state(d->sock, "reachable", ENGINE_WAIT_MS));
	for (int i = 0; i < 300 && code != 0; i++) {
		json_decref(call(d->sock, "sandbox.list", NULL, &code, NULL));
		if (code != 0)
			usleep(50 * 1000);
	}
	ck_assert_int_eq(code, 0);
}

START_TEST(keys_are_per_owner)
{
	struct msbd_proc d = { 0 };
	char scope[64];
	struct user_answer a, b, b_again;
	json_t *root, *r;
	char *st;

	snprintf(scope, sizeof(scope), "keys-%s", hostile_run_id);
	start_daemon(&d, (const char *[]){ "--set", "socket.group=nogroup", NULL });
	ck_assert_int_eq(chmod(d.dir, 0755), 0);      /* the users must reach the socket's directory */

	/* B takes the key first; A then acquires the same key: her own sandbox. */
	b = run_as_user(USER_B_UID, d.sock, scope, false);
	ck_assert(b.created);
	ck_assert_int_eq(b.listed, 1);
	a = run_as_user(USER_A_UID, d.sock, scope, false);
	ck_assert(a.created);                          /* not B's: hers, made for her */
	ck_assert_str_ne(a.id, b.id);
	ck_assert_str_ne(a.name, b.name);
	ck_assert_int_eq(a.listed, 1);                 /* she sees hers only */
	/* B asks again: his own, warm, the same answer as if A did not exist. */
	b_again = run_as_user(USER_B_UID, d.sock, scope, false);
	ck_assert_str_eq(b_again.id, b.id);
	ck_assert(!b_again.created);
	ck_assert_int_eq(b_again.listed, 1);
	/* Root's (the seed's names) is a third. */
	root = call(d.sock, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_of(scope), "spec", hostile_spec()),
		    NULL, NULL);
	ck_assert_ptr_nonnull(root);
	ck_assert_str_ne(jstr(root, "sandbox"), a.id);
	ck_assert_str_ne(jstr(root, "sandbox"), b.id);
	ck_assert(json_is_true(jget(root, "created")));

	/* A disposes hers (by key): only hers goes. */
	a = run_as_user(USER_A_UID, d.sock, scope, true);
	st = engine_state(a.id);
	ck_assert_str_eq(st, "absent");
	free(st);
	st = engine_state(b.id);
	ck_assert_str_eq(st, "running");
	free(st);
	st = engine_state(jstr(root, "sandbox"));
	ck_assert_str_eq(st, "running");
	free(st);

	/* Root, the administrator, clears the conversation across owners. */
	r = call(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t"), NULL,
		 NULL);
	ck_assert_int_eq(jint(r, "disposed"), 2);
	json_decref(r);
	json_decref(root);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

START_TEST(root_space_refuses_a_former_members)
{
	struct msbd_proc d = { 0 };
	char scope[64];
	struct user_answer a, a_own;
	struct msb_conn *c = NULL;
	json_t *root, *r;
	const char *msg;
	char *st;

	snprintf(scope, sizeof(scope), "keys-left-%s", hostile_run_id);
	/* A member of sandbox.admin_group (her gid is nogroup): root's key space. */
	start_daemon(&d, (const char *[]){ "--set", "socket.group=nogroup", "--set", "sandbox.admin_group=nogroup",
					   NULL });
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	a = run_as_user(USER_A_UID, d.sock, scope, false);
	ck_assert(a.created);
	ck_assert_int_eq(msbd_stop(&d), 0);

	/* She has left the group (the daemon has none now). */
	memset(&d, 0, sizeof(d));
	start_daemon(&d, (const char *[]){ "--set", "socket.group=nogroup", NULL });
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_int_eq(msb_connect(d.sock, &c), MSB_OK);
	ck_assert_int_eq(msb_call(c, "sandbox.acquire",
				  json_pack("{s:o, s:o}", "key", key_of(scope), "spec", hostile_spec()), NULL),
			 MSB_E_REMOTE);
	ck_assert_int_eq(msb_last_error_code(c), 1106);
	ck_assert_str_eq(msb_last_error_type(c), "SandboxConflict");
	ck_assert_int_eq(json_integer_value(json_object_get(msb_last_error_data(c), "owner")), USER_A_UID);
	msg = msb_last_error_message(c);
	ck_assert_msg(strstr(msg, a.name) && strstr(msg, "65534") && strstr(msg, "ispose"), "message: %s", msg);
	st = engine_state(a.id);
	ck_assert_str_eq(st, "running");               /* refused, not touched */
	free(st);

	/* She acquires in her own key space now, and still has the old one. */
	a_own = run_as_user(USER_A_UID, d.sock, scope, false);
	ck_assert(a_own.created);
	ck_assert_str_ne(a_own.id, a.id);
	ck_assert_int_eq(a_own.listed, 2);

	/* Root disposes of it by id; its next acquire makes root's own. */
	ck_assert_int_eq(msb_call(c, "sandbox.dispose",
				  json_pack("{s:o, s:s}", "key", key_of(scope), "sandbox", a.id), &r), MSB_OK);
	ck_assert(json_is_null(r));
	json_decref(r);
	ck_assert_int_eq(msb_call(c, "sandbox.acquire",
				  json_pack("{s:o, s:o}", "key", key_of(scope), "spec", hostile_spec()), &root),
			 MSB_OK);
	ck_assert(json_is_true(jget(root, "created")));
	ck_assert_str_eq(jstr(root, "name"), a.name);  /* root's name, root's container */
	ck_assert_str_ne(jstr(root, "sandbox"), a.id);
	json_decref(root);

	r = call(d.sock, "sandbox.dispose_scope", json_pack("{s:s, s:s}", "scope", scope, "thread_id", "t"), NULL,
		 NULL);
	ck_assert_int_eq(jint(r, "disposed"), 2);
	json_decref(r);
	msb_conn_free(c);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

/* The engine's own message for the pull, by a direct engine call. malloc'd. */
static char *engine_pull_message(void)
{
	char *out = sh_out("timeout 60 curl -s --unix-socket %s -X POST "
			   "'http://engine/v1.41/images/create?fromImage=%s&tag=%s'",
			   engine_socket_path(), MISSING_REPO, MISSING_TAG);
	json_t *j = json_loads(out, 0, NULL);
	char *m = NULL;

	if (json_string_value(json_object_get(j, "message")))
		m = strdup(json_string_value(json_object_get(j, "message")));
	json_decref(j);
	free(out);
	return m;
}

static char *file_text(const char *path)
{
	return sh_out("cat '%s'", path);
}

START_TEST(engine_text_stays_off_the_wire)
{
	struct msbd_proc d = { 0 };
	char scope[64];
	json_t *spec = hostile_spec(), *data, *wire;
	struct msb_conn *c = NULL;
	char *engine_msg, *wire_text, *log;
	const char *msg;

	engine_msg = engine_pull_message();
	ck_assert_msg(engine_msg && *engine_msg, "the engine gave no message for the pull of " MISSING_REF);
	snprintf(scope, sizeof(scope), "keys-img-%s", hostile_run_id);
	json_object_set_new(spec, "image", json_string(MISSING_REF));
	start_daemon(&d, NULL);
	ck_assert_int_eq(msb_connect(d.sock, &c), MSB_OK);
	ck_assert_int_eq(msb_call(c, "sandbox.acquire", json_pack("{s:o, s:o}", "key", key_of(scope), "spec", spec),
				  NULL), MSB_E_REMOTE);
	ck_assert_int_eq(msb_last_error_code(c), 1001);
	ck_assert_str_eq(msb_last_error_type(c), "EngineError");
	msg = msb_last_error_message(c);
	ck_assert_msg(strstr(msg, "image could not be pulled: " MISSING_REF), "message: %s", msg);
	data = msb_last_error_data(c);
	ck_assert_str_eq(json_string_value(json_object_get(data, "image")), MISSING_REF);
	ck_assert_int_eq(json_integer_value(json_object_get(data, "engine_status")), 500);
	/* Nothing of the engine's text: not its message, nor a piece of it. */
	wire = json_pack("{s:s, s:O}", "message", msg, "data", data);
	wire_text = json_dumps(wire, JSON_COMPACT);
	ck_assert_msg(!strstr(wire_text, engine_msg), "the engine's message on the wire: %s", wire_text);
	ck_assert_msg(!strstr(wire_text, "dial tcp") && !strstr(wire_text, "/v2/") &&
		      !strstr(wire_text, "connection refused"), "engine text on the wire: %s", wire_text);
	/* The log has it. */
	log = file_text(d.log);
	ck_assert_msg(strstr(log, engine_msg), "the engine's message is not in the daemon's log");
	free(log);
	free(wire_text);
	json_decref(wire);
	free(engine_msg);
	msb_conn_free(c);
	ck_assert_int_eq(msbd_stop(&d), 0);
}
END_TEST

TCase *hostile_keys_tcase(void)
{
	TCase *tc = tcase_create("keys");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, keys_are_per_owner);
	tcase_add_test(tc, root_space_refuses_a_former_members);
	tcase_add_test(tc, engine_text_stays_off_the_wire);
	return tc;
}
