/* execkill.h — the processes of one timed-out exec, found and killed from
 * the host (issue 17, finding 5; PROTOCOL.md sandbox.exec, "What a deadline
 * kills"). Used when the engine is on this host and the daemon is root:
 * the guest can shed its environment (env -i, a new MSB_EXEC_ID), but not
 * its cgroup, its parent chain or its start time.
 *
 * The container's processes: the pids in its cgroup's cgroup.procs (the
 * cgroup named by /proc/<init>/cgroup: the v1 pids hierarchy when there is
 * one, else the v2 unified path), or, when that cannot be read, every
 * /proc/<pid> whose pid namespace is the init's. For each, /proc/<pid>/stat
 * gives its parent, its state and its start (clock ticks since boot, the
 * clock of CLOCK_BOOTTIME).
 *
 * The rule (execkill_select): a process P of the container, not a zombie,
 * is the exec's when, following parents from P,
 *   - the exec's own process (root, the engine's exec Pid) is met: its tree;
 *   - or the container's init is met (P or an ancestor was orphaned: a
 *     daemonized child) and P started at or after the exec did (since)
 *     and before the next exec of the daemon in that container started
 *     (until, when there is one: an orphan started later may be that
 *     exec's, e.g. its `server &`, and is spared — so is a fork-hopper's
 *     generation started after it);
 * and it is never the init itself. The root counts only when it started
 * within [since, root_by] (a pid the engine reported, recycled before or
 * after, is not the exec's process). A chain that ends at another process
 * whose parent is outside the container (another exec's process: the
 * engine starts each exec from outside) is another exec's tree, spared.
 *
 * Kills (execkill_run) go through pidfds: the pid is opened
 * (pidfd_open), its start time read again, and only the same process is
 * signalled (pidfd_send_signal SIGKILL), so a recycled pid is never hit.
 * The scan is repeated until a scan finds nothing it has not signalled
 * already (a guest forking meanwhile) and every pid the list named had a
 * readable stat (a listed pid gone before its stat was read may have been
 * a fork-hopper's generation, its child not in the list yet), at most
 * EXECKILL_MAX_ROUNDS times. A guest forking faster than a scan (each
 * generation forks and exits) is only caught in a consistent snapshot: the
 * daemon runs execkill_run while the container is frozen (execend.c), where
 * the first round selects and signals all (the kills take effect on the
 * thaw) and the second finds nothing new; unfrozen (the freeze refused)
 * the rounds above are the best effort, and running out of them is
 * reported (-EAGAIN).
 *
 * Synchronous (a few reads of /proc per process), no logging, no engine.
 * proc_root and cgroup_root are "/proc" and "/sys/fs/cgroup" in the daemon
 * and a fake tree in the unit tests. */
#ifndef MSB_EXECKILL_H
#define MSB_EXECKILL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Processes of one container read in a scan; past this the scan is cut
 * (the rest is found by the next round, once these are gone). */
#define EXECKILL_MAX_PROCS  16384
/* Scans (each followed by its kills) before execkill_run gives up. */
#define EXECKILL_MAX_ROUNDS 64

struct execkill_proc {
	pid_t pid;
	pid_t ppid;
	char state;                   /* /proc/<pid>/stat field 3 */
	unsigned long long start;     /* field 22: clock ticks since boot */
};

struct execkill_target {
	pid_t init;                   /* the container's init (State.Pid) */
	pid_t root;                   /* the exec's process (the exec's Pid); 0: unknown */
	unsigned long long since;     /* the exec's start, clock ticks since boot */
	unsigned long long until;     /* the next exec's start in the container; 0: none */
	unsigned long long root_by;   /* root started at or before this tick (when the engine
				       * reported it); 0: unbounded */	const char *id;               /* the container's id: the init's cgroup path must name
				       * it (NULL: not checked) */
};

/* The current CLOCK_BOOTTIME in clock ticks (sysconf(_SC_CLK_TCK)), rounded
 * down: the clock of a process's start time. */
unsigned long long execkill_now_ticks(void);

/* Parses the body of /proc/<pid>/stat (buf[0..len), the comm may hold
 * spaces and parentheses: the last ')' ends it). 0, or -EINVAL. */
int execkill_parse_stat(const char *buf, size_t len, struct execkill_proc *ret);

/* Pure: the pids of procs[0..n) the rule above selects, into ret (room for
 * n), in procs' order. Returns how many. O(n log n): the processes are
 * found by binary search over a pid order, and what each parent chain meets
 * is kept per process, so every chain is walked once. */
size_t execkill_select(const struct execkill_proc *procs, size_t n, const struct execkill_target *t,
		       pid_t *ret);

/* A cgroup path of /proc/<init>/cgroup is used only when it is absolute,
 * not "/", has no ".." component and (id given) holds the container's id;
 * when none of the init's lines holds the id, the init is not the
 * container's: -ESRCH, no scan. Processes listed by the cgroup are kept
 * only in the init's pid namespace. While execkill_run runs, the init is
 * held by a pidfd (its start read once) and checked alive after each scan
 * (-ESRCH: a recycled pid is never scanned).
 *
 * execkill_scan_id: as execkill_scan, with that check of id (NULL: none). */
int execkill_scan_id(const char *proc_root, const char *cgroup_root, pid_t init, const char *id,
		     struct execkill_proc **ret, size_t *ret_n, bool *ret_by_cgroup);

/* Lists the processes of init's container (see above): *ret (malloc'd, may
 * be NULL when *ret_n is 0). -ESRCH when init is gone, -errno when neither
 * the cgroup nor the pid namespace can be read. *ret_by_cgroup says which
 * way it went. */
int execkill_scan(const char *proc_root, const char *cgroup_root, pid_t init, struct execkill_proc **ret,
		  size_t *ret_n, bool *ret_by_cgroup);

/* Scans, selects and kills, round after round (see above). 0 when the last
 * scan found nothing new to kill; -EAGAIN when EXECKILL_MAX_ROUNDS ran out;
 * a scan's error otherwise. *ret_killed (may be NULL): processes signalled. */
int execkill_run(const char *proc_root, const char *cgroup_root, const struct execkill_target *t,
		 size_t *ret_killed);

#endif
