/* check_registry.c — the registry follows listings and events, and no stale
 * snapshot (a listing or an inspect taken before an event) can undo an
 * event: a destroyed container never comes back, a died one is not
 * "running" again. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plane.h"
#include "plane_local.h"
#include "registry.h"

#define ID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define NAME_A "maf-sandbox-docker-aaaaaaaaaaaa"
#define NAME_B "maf-sandbox-docker-bbbbbbbbbbbb"

static json_t *labels(void)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", "maf-sandbox.scope", "s", "maf-sandbox.thread", "t",
			 "maf-sandbox.agent", "a", "maf-sandbox.kind", "k", "maf-sandbox.owner", "1000");
}

static json_t *summary(const char *id, const char *name, const char *state)
{
	char slash[64];

	snprintf(slash, sizeof(slash), "/%s", name);
	return json_pack("{s:s, s:[s], s:o, s:s, s:i, s:s}", "Id", id, "Names", slash, "Labels", labels(),
			 "State", state, "Created", 1700000000, "Image", "img");
}

static json_t *inspect(const char *id, const char *name, const char *status, bool running)
{
	char slash[64];

	snprintf(slash, sizeof(slash), "/%s", name);
	return json_pack("{s:s, s:s, s:{s:o, s:s}, s:{s:s, s:b, s:b}, s:s}", "Id", id, "Name", slash,
			 "Config", "Labels", labels(), "Image", "img", "State", "Status", status, "Running",
			 running, "Paused", 0, "Created", "2026-11-29T09:00:00.123456789Z");
}

static json_t *event(const char *id, const char *action)
{
	return json_pack("{s:s, s:s, s:{s:s, s:o}, s:i}", "Type", "container", "Action", action, "Actor",
			 "ID", id, "Attributes", json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "name", NAME_A,
			 "image", "img", "maf-sandbox.scope", "s", "maf-sandbox.thread", "t",
			 "maf-sandbox.agent", "a", "maf-sandbox.kind", "k"), "time", 1700000001);
}

static void apply(struct registry *r, json_t *ev)
{
	registry_apply_event(r, ev);
	json_decref(ev);
}

START_TEST(listing_and_events)
{
	struct registry *r = registry_new();
	json_t *list = json_pack("[o, o]", summary(ID_A, NAME_A, "running"), summary(ID_B, NAME_B, "exited"));
	struct sandbox *sb;

	registry_replace_all(r, list);
	ck_assert_uint_eq(registry_count(r), 2);
	sb = registry_find_name(r, NAME_A);
	ck_assert_ptr_nonnull(sb);
	ck_assert_str_eq(sb->id, ID_A);
	ck_assert_int_eq(sb->state, SANDBOX_RUNNING);
	ck_assert(sb->has_owner);
	ck_assert_int_eq(sb->owner, 1000);
	apply(r, event(ID_A, "pause"));
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_PAUSED);
	apply(r, event(ID_A, "unpause"));
	apply(r, event(ID_A, "die"));
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_EXITED);
	apply(r, event(ID_A, "destroy"));
	ck_assert_ptr_null(registry_find_id(r, ID_A));
	ck_assert_uint_eq(registry_count(r), 1);
	json_decref(list);
	registry_free(r);
}
END_TEST

/* An fd number is open. (The pins hold /dev/null: any fd shows it closed;
 * valgrind 3.19 knows no pidfd_open.) */
static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* The local plane's pin of an init (a pidfd, kept by the local plane,
 * plane_local.h) goes with the init: at every start, restart and death,
 * and with the entry; a pause keeps it. The registry tells the plane. */
START_TEST(a_pin_goes_with_its_init)
{
	static const char *const drops[] = { "die", "start", "restart" };
	struct registry *r = registry_new();
	struct plocal_shared *pins = plocal_shared_new();
	json_t *list = json_pack("[o]", summary(ID_A, NAME_A, "running"));
	const struct plocal_pin *pin;
	struct sandbox *sb;
	int fd;

	registry_replace_all(r, list);
	sb = registry_find_id(r, ID_A);
	ck_assert_ptr_null(plocal_pins_find(pins, ID_A));
	ck_assert_int_eq(sb->plane, SANDBOX_PLANE_UNKNOWN);
	for (size_t i = 0; i < sizeof(drops) / sizeof(drops[0]); i++) {
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(fd, 0);
		plocal_pins_set(pins, r, ID_A, (struct plocal_pin){ getpid(), fd });
		sb->plane = SANDBOX_PLANE_LOCAL;
		apply(r, event(ID_A, "pause"));
		apply(r, event(ID_A, "unpause"));
		pin = plocal_pins_find(pins, ID_A);
		ck_assert_ptr_nonnull(pin);
		ck_assert_int_eq(pin->pidfd, fd);
		ck_assert_int_eq(sb->plane, SANDBOX_PLANE_LOCAL);
		apply(r, event(ID_A, drops[i]));
		ck_assert_msg(!plocal_pins_find(pins, ID_A) && !fd_open(fd), "%s kept the pin", drops[i]);
		ck_assert_int_eq(sb->plane, SANDBOX_PLANE_UNKNOWN);
	}
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	plocal_pins_set(pins, r, ID_A, (struct plocal_pin){ getpid(), fd });
	apply(r, event(ID_A, "destroy"));
	ck_assert_msg(!fd_open(fd), "a destroyed entry kept its pin open");
	json_decref(list);
	plocal_shared_free(pins);
	registry_free(r);
}
END_TEST

/* The local plane keeps one pin per container: a new one closes the old;
 * its state freed, every pin it kept is closed and the registry no longer
 * tells it anything. */
START_TEST(the_local_plane_owns_its_pins)
{
	struct registry *r = registry_new();
	struct plocal_shared *pins = plocal_shared_new();
	json_t *list = json_pack("[o, o]", summary(ID_A, NAME_A, "running"), summary(ID_B, NAME_B, "running"));
	int a1 = open("/dev/null", O_RDONLY | O_CLOEXEC), a2 = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int b = open("/dev/null", O_RDONLY | O_CLOEXEC);

	ck_assert(a1 >= 0 && a2 >= 0 && b >= 0);
	registry_replace_all(r, list);
	plocal_pins_set(pins, r, ID_A, (struct plocal_pin){ getpid(), a1 });
	plocal_pins_set(pins, r, ID_B, (struct plocal_pin){ getpid(), b });
	plocal_pins_set(pins, r, ID_A, (struct plocal_pin){ getpid(), a2 });
	ck_assert_msg(!fd_open(a1), "a replaced pin stayed open");
	ck_assert_int_eq(plocal_pins_find(pins, ID_A)->pidfd, a2);
	apply(r, event(ID_A, "die"));
	ck_assert_ptr_null(plocal_pins_find(pins, ID_A));
	ck_assert_int_eq(plocal_pins_find(pins, ID_B)->pidfd, b);
	plocal_shared_free(pins);
	ck_assert_msg(!fd_open(b), "the local plane's state went, its pin stayed open");
	apply(r, event(ID_B, "die"));      /* nobody is told: nothing to use after its free */
	json_decref(list);
	registry_free(r);
}
END_TEST

/* Either may go first: the registry freed before the local plane's state
 * closes the pins and tells the plane to forget it (under ASan, freeing the
 * plane's state would otherwise write into the freed registry). */
START_TEST(the_registry_may_go_before_the_pins)
{
	struct registry *r = registry_new();
	struct plocal_shared *pins = plocal_shared_new();
	json_t *list = json_pack("[o]", summary(ID_A, NAME_A, "running"));
	int a = open("/dev/null", O_RDONLY | O_CLOEXEC);

	ck_assert(a >= 0);
	registry_replace_all(r, list);
	plocal_pins_set(pins, r, ID_A, (struct plocal_pin){ getpid(), a });
	registry_free(r);
	ck_assert_msg(!fd_open(a), "the registry went, the pin of its entry stayed open");
	ck_assert_ptr_null(plocal_pins_find(pins, ID_A));
	plocal_shared_free(pins);
	json_decref(list);
}
END_TEST

START_TEST(a_destroyed_id_never_comes_back)
{
	struct registry *r = registry_new();
	json_t *stale = json_pack("[o]", summary(ID_A, NAME_A, "running"));
	json_t *ins = inspect(ID_A, NAME_A, "running", true);

	apply(r, event(ID_A, "destroy"));          /* before we ever knew it */
	registry_replace_all(r, stale);            /* a listing taken before the destroy */
	ck_assert_ptr_null(registry_find_id(r, ID_A));
	ck_assert_ptr_null(registry_update_from_inspect(r, ins, 0));
	ck_assert_ptr_null(registry_find_name(r, NAME_A));
	json_decref(stale);
	json_decref(ins);
	registry_free(r);
}
END_TEST

START_TEST(events_during_a_resync_are_replayed_after_the_listing)
{
	struct registry *r = registry_new();
	json_t *first = json_pack("[o]", summary(ID_A, NAME_A, "running"));
	json_t *stale = json_pack("[o]", summary(ID_A, NAME_A, "running"));

	registry_replace_all(r, first);
	registry_begin_resync(r);
	apply(r, event(ID_A, "die"));              /* arrives before the slower listing */
	registry_replace_all(r, stale);            /* the listing still says running */
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_EXITED);
	/* After the resync, events are no longer kept. */
	apply(r, event(ID_A, "start"));
	registry_begin_resync(r);
	registry_replace_all(r, first);
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_RUNNING);
	json_decref(first);
	json_decref(stale);
	registry_free(r);
}
END_TEST

START_TEST(an_inspect_never_overrides_a_newer_event)
{
	struct registry *r = registry_new();
	json_t *running = inspect(ID_A, NAME_A, "running", true);
	uint64_t since;

	ck_assert_ptr_nonnull(registry_update_from_inspect(r, running, registry_event_seq(r)));
	since = registry_event_seq(r);             /* an inspect sent now... */
	apply(r, event(ID_A, "die"));              /* ...then the container dies... */
	registry_update_from_inspect(r, running, since);   /* ...and the old answer arrives */
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_EXITED);
	/* An inspect sent after the event is believed. */
	registry_update_from_inspect(r, running, registry_event_seq(r));
	ck_assert_int_eq(registry_find_id(r, ID_A)->state, SANDBOX_RUNNING);
	json_decref(running);
	registry_free(r);
}
END_TEST

/* An entry an event made has no image id (events do not say it); an
 * inspect older than that event still gives it (it never changes for the
 * container's life), and nothing else of it. */
START_TEST(an_older_inspect_still_gives_the_image_id)
{
	struct registry *r = registry_new();
	json_t *running = inspect(ID_A, NAME_A, "running", true);
	uint64_t since = registry_event_seq(r);
	struct sandbox *sb;

	json_object_set_new(running, "Image", json_string("sha256:feed"));
	apply(r, event(ID_A, "create"));
	sb = registry_find_id(r, ID_A);
	ck_assert_ptr_nonnull(sb);
	ck_assert_ptr_null(sb->image_id);
	registry_update_from_inspect(r, running, since);
	ck_assert_str_eq(sb->image_id, "sha256:feed");
	ck_assert_int_eq(sb->state, SANDBOX_CREATED);
	json_decref(running);
	registry_free(r);
}
END_TEST

START_TEST(only_our_workloads_are_entries)
{
	struct registry *r = registry_new();
	json_t *proxy = summary(ID_B, "maf-sandbox-docker-bbbbbbbbbbbb-proxy", "running");
	json_t *foreign = summary(ID_A, "maf-sandbox-wslc-aaaaaaaaaaaa", "running");
	json_t *short_id = summary("abc", NAME_A, "running");
	json_t *role = summary(ID_A, NAME_A, "running");

	json_object_set_new(json_object_get(role, "Labels"), "maf-sandbox.role", json_string("proxy"));
	ck_assert_ptr_null(registry_update_from_summary(r, proxy));
	ck_assert_ptr_null(registry_update_from_summary(r, foreign));
	ck_assert_ptr_null(registry_update_from_summary(r, short_id));
	ck_assert_ptr_null(registry_update_from_summary(r, role));
	ck_assert_uint_eq(registry_count(r), 0);
	json_decref(proxy);
	json_decref(foreign);
	json_decref(short_id);
	json_decref(role);
	registry_free(r);
}
END_TEST

/* ---- naming a sandbox ---------------------------------------------------- */

/* Three sandboxes whose ids share their first 12 hex digits: two of uid
 * 1000 (the caller), one of uid 2000 (never matched, counted or listed). */
#define SHARED "abcdef012345"
#define ID_MINE1 SHARED "1111111111111111111111111111111111111111111111111111"
#define ID_MINE2 SHARED "2222222222222222222222222222222222222222222222222222"
#define ID_THEIRS SHARED "3333333333333333333333333333333333333333333333333333"
#define NAME_MINE1 "maf-sandbox-docker-111111111111"
#define NAME_MINE2 "maf-sandbox-docker-222222222222"
#define NAME_THEIRS "maf-sandbox-docker-333333333333"

static bool reach_uid_1000(const struct sandbox *sb, void *arg)
{
	(void)arg;
	return sb->has_owner && sb->owner == 1000;
}

static struct registry *shared_prefix_registry(void)
{
	struct registry *r = registry_new();
	json_t *theirs = summary(ID_THEIRS, NAME_THEIRS, "running");
	json_t *list;

	json_object_set_new(json_object_get(theirs, "Labels"), "maf-sandbox.owner", json_string("2000"));
	list = json_pack("[o, o, o]", summary(ID_MINE1, NAME_MINE1, "running"), theirs,
			 summary(ID_MINE2, NAME_MINE2, "running"));
	registry_replace_all(r, list);
	json_decref(list);
	ck_assert_uint_eq(registry_count(r), 3);
	return r;
}

struct resolve_row {
	const char *given;
	int want;             /* 0, -ENOENT, -EINVAL, -ENOTUNIQ */
	const char *want_id;  /* for 0 */
};

static const struct resolve_row resolve_rows[] = {
	{ ID_MINE1, 0, ID_MINE1 },                                   /* the full id */
	{ "ABCDEF0123451111111111111111111111111111111111111111111111111111", 0, ID_MINE1 }, /* upper case */
	{ NAME_MINE2, 0, ID_MINE2 },                                 /* the name */
	{ "/" NAME_MINE2, 0, ID_MINE2 },                             /* docker's leading '/' */
	{ SHARED "2", 0, ID_MINE2 },                                 /* a unique prefix (13) */
	{ SHARED "22222222", 0, ID_MINE2 },
	{ SHARED, -ENOTUNIQ, NULL },                                 /* 12 digits, two of mine */
	{ "ABCDEF012345", -ENOTUNIQ, NULL },
	{ SHARED "3", -ENOENT, NULL },                               /* another's unique prefix */
	{ ID_THEIRS, -ENOENT, NULL },                                /* another's full id */
	{ NAME_THEIRS, -ENOENT, NULL },                              /* another's name */
	{ "/" NAME_THEIRS, -ENOENT, NULL },
	{ "abcdef01234", -EINVAL, NULL },                            /* 11 digits */
	{ "abc", -EINVAL, NULL },
	{ "", -EINVAL, NULL },
	{ "000000000000", -ENOENT, NULL },                           /* 12 digits, nothing */
	{ ID_MINE1 "1", -ENOENT, NULL },                             /* longer than an id */
	{ "maf-sandbox-docker-999999999999", -ENOENT, NULL },
	{ "no such thing", -ENOENT, NULL },
	{ "maf-sandbox-docker-11111111111", -ENOENT, NULL },         /* a name is whole, never a prefix */
};

START_TEST(naming_a_sandbox)
{
	const struct resolve_row *row = &resolve_rows[_i];
	struct registry *r = shared_prefix_registry();
	struct sandbox *sb = NULL, *cands[REGISTRY_CANDIDATES_MAX] = { 0 };
	size_t matches = 0;
	int rc = registry_resolve(r, row->given, reach_uid_1000, NULL, &sb, cands, REGISTRY_CANDIDATES_MAX, &matches);

	ck_assert_msg(rc == row->want, "\"%s\": got %d, want %d", row->given, rc, row->want);
	if (rc == 0)
		ck_assert_str_eq(sb->id, row->want_id);
	if (rc == -ENOTUNIQ) {
		/* the caller's two, in registry order; never the other uid's */
		ck_assert_uint_eq(matches, 2);
		ck_assert_str_eq(cands[0]->id, ID_MINE1);
		ck_assert_str_eq(cands[1]->id, ID_MINE2);
	}
	registry_free(r);
}
END_TEST

/* More candidates than are listed: the count says how many in all. */
START_TEST(an_ambiguity_lists_at_most_its_cap)
{
	struct registry *r = registry_new();
	struct sandbox *sb = NULL, *cands[2] = { 0 };
	size_t matches = 0;

	for (int i = 0; i < 5; i++) {
		char id[65], name[64];
		json_t *item;

		snprintf(id, sizeof(id), SHARED "%052d", i);
		snprintf(name, sizeof(name), "maf-sandbox-docker-%012d", i);
		item = summary(id, name, "running");
		ck_assert_ptr_nonnull(registry_update_from_summary(r, item));
		json_decref(item);
	}
	ck_assert_int_eq(registry_resolve(r, SHARED, reach_uid_1000, NULL, &sb, cands, 2, &matches), -ENOTUNIQ);
	ck_assert_uint_eq(matches, 5);
	ck_assert_ptr_nonnull(cands[0]);
	ck_assert_ptr_nonnull(cands[1]);
	registry_free(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("registry");
	TCase *tc = tcase_create("consistency");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, listing_and_events);
	tcase_add_test(tc, a_destroyed_id_never_comes_back);
	tcase_add_test(tc, a_pin_goes_with_its_init);
	tcase_add_test(tc, the_local_plane_owns_its_pins);
	tcase_add_test(tc, the_registry_may_go_before_the_pins);
	tcase_add_test(tc, events_during_a_resync_are_replayed_after_the_listing);
	tcase_add_test(tc, an_inspect_never_overrides_a_newer_event);
	tcase_add_test(tc, only_our_workloads_are_entries);
	tcase_add_test(tc, an_older_inspect_still_gives_the_image_id);
	suite_add_tcase(s, tc);
	tc = tcase_create("naming");
	tcase_add_loop_test(tc, naming_a_sandbox, 0, (int)(sizeof(resolve_rows) / sizeof(resolve_rows[0])));
	tcase_add_test(tc, an_ambiguity_lists_at_most_its_cap);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
