#!/usr/bin/env bash
# contrib/dev.sh — set up, build, run and test maf-sandbox on Debian 12.
#
#   sudo contrib/dev.sh run [maf-sandboxd options]   install what is missing, start a Docker
#                                                  engine if none answers, build, run the daemon
#   sudo contrib/dev.sh test                       the same set-up, then the tests: a -Dwerror
#                                                  build (unit, packaging, clients), every suite
#                                                  under ASan+UBSan, the unit suites under
#                                                  valgrind, every fuzz target for 30 s
#                                                  (FUZZ_SECONDS), then the Debian packages
#                                                  built, installed, socket-activated and purged
#                                                  (contrib/package-test.sh)
#
# Idempotent: packages already installed are not reinstalled, a running engine is reused.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

PACKAGES=(
	gcc libc6-dev pkg-config meson ninja-build
	libevent-dev libjansson-dev libarchive-dev libcurl4-openssl-dev libsystemd-dev check
	docker.io busybox-static python3 systemd curl ca-certificates iproute2
	scdoc build-essential dpkg-dev debhelper dh-python
	valgrind clang libclang-rt-14-dev llvm debootstrap
)
# Seconds each fuzz target runs in `test`.
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
ENGINE_SOCKET=/var/run/docker.sock
ENGINE_WAIT_SECONDS=90

say() { printf '==> %s\n' "$*"; }
die() { printf 'contrib/dev.sh: %s\n' "$*" >&2; exit 1; }

need_root() {
	[ "$(id -u)" -eq 0 ] || die "run me as root (sudo $0 $*): I install packages and start dockerd"
}

install_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

engine_answers() {
	[ -S "$ENGINE_SOCKET" ] &&
		[ "$(curl -s --max-time 3 --unix-socket "$ENGINE_SOCKET" http://docker/_ping 2>/dev/null)" = OK ]
}

ensure_engine() {
	local i
	if engine_answers; then
		say "Docker engine answers on $ENGINE_SOCKET"
		return 0
	fi
	say "starting dockerd (log: /var/log/dockerd.log)"
	setsid nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
	for ((i = 0; i < ENGINE_WAIT_SECONDS; i++)); do
		engine_answers && { say "Docker engine is up"; return 0; }
		sleep 1
	done
	echo "--- last lines of /var/log/dockerd.log ---" >&2
	tail -n 40 /var/log/dockerd.log >&2 || true
	die "dockerd did not answer on $ENGINE_SOCKET within ${ENGINE_WAIT_SECONDS}s"
}

# build DIR [meson options...]
build() {
	local dir=$1; shift
	if [ -f "$dir/build.ninja" ]; then
		meson configure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
	ninja -C "$dir" >/dev/null || { ninja -C "$dir"; die "build in $dir failed"; }
}

# Counts meson's results in DIR's test logs (LOGBASE.json...; default
# testlog): prints "passed failed". Each failed test's name and the last
# lines of its output are appended to FAILURES_FILE, which cmd_test prints
# just before the summary (CI shows only the end of a long run).
count_results() {
	local dir=$1
	shift
	python3 - "$dir/meson-logs" "${FAILURES_FILE:-/dev/null}" "${@:-testlog}" <<'PY'
import json, os, sys
ok = bad = 0
with open(sys.argv[2], "a") as failures:
    for base in sys.argv[3:]:
        for line in open(os.path.join(sys.argv[1], base + ".json")):
            t = json.loads(line)
            r = t.get("result")
            if r in ("OK", "EXPECTEDFAIL", "SKIP"):
                ok += 1
                continue
            bad += 1
            out = ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()
            failures.write("---- %s: %s (%s, %s)\n" % (sys.argv[1], t.get("name"), base, r))
            failures.write("\n".join(out[-30:]) + "\n")
print(ok, bad)
PY
}

# Counts tests/fuzz/run.sh's verdicts in DIR/results (a line "TARGET ok" or
# "TARGET failed" per target): prints "passed failed". No file: one failure.
count_fuzz() {
	local f=$1/results
	if [ -f "$f" ]; then
		echo "$(grep -c ' ok$' "$f") $(grep -vc ' ok$' "$f")"
	else
		echo "0 1"
	fi
}

# run_suites DIR LABEL [meson test options...]
run_suites() {
	local dir=$1 label=$2 rc=0
	shift 2
	say "tests ($label)"
	meson test -C "$dir" --num-processes 2 --print-errorlogs -v "$@" || rc=1
	return $rc
}

# run_all DIR LABEL PLAIN_DIR: every suite of DIR, and the slow checks, on
# two lanes (two cores). Lane 1, in the background: the integration suites,
# which share the engine and run one at a time, then every fuzz target for
# FUZZ_SECONDS (tests/fuzz/run.sh; a crash, leak, timeout or OOM fails).
# Lane 2: the other suites of DIR (CPU-bound, no engine), then the unit
# suites of PLAIN_DIR under valgrind memcheck (errors and definite leaks
# fail). The meson logs end in DIR/meson-logs and PLAIN_DIR/meson-logs.
run_all() {
	local dir=$1 label=$2 plain=$3 rc=0 pid
	say "tests ($label): integration suites one at a time then the fuzzers; beside them the others, then valgrind"
	(
		st=0
		meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs -v --suite integration \
			--logbase integration || st=1
		say "fuzzing: every target for ${FUZZ_SECONDS}s (tests/fuzz/run.sh)"
		FUZZ_OUT="$ROOT/$plain/fuzz" bash tests/fuzz/run.sh "$FUZZ_SECONDS" || st=1
		exit $st
	) > "$dir/meson-logs/integration.out" 2>&1 &
	pid=$!
	meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs -v --no-suite integration \
		--logbase others || rc=1
	say "tests (valgrind memcheck): the unit suites of $plain"
	meson test -C "$plain" --no-rebuild --setup valgrind --num-processes 1 --print-errorlogs \
		--suite unit || rc=1
	wait "$pid" || rc=1
	cat "$dir/meson-logs/integration.out"
	return $rc
}

cmd_test() {
	need_root "$@"
	install_packages
	ensure_engine
	local rc=0 p1 f1 p2 f2 p3 f3 p4 f4 p5 f5
	FAILURES_FILE=$(mktemp)
	export FAILURES_FILE
	trap 'rm -f "$FAILURES_FILE"' EXIT
	build build -Dwerror=true -Dtests=enabled -Dsystemd=enabled
	# The engine is the bottleneck of the C integration suites (the density
	# suite alone makes 200 allowlisted sandboxes), so they run once, under
	# the sanitizers, where a race or a leak would show. The optimized build
	# runs the unit suites, the packaging checks, and what users run against
	# the real engine: the Python client's suite and the README's commands.
	run_suites build "werror build" --suite unit --suite packaging --suite clients || rc=1
	read -r p1 f1 < <(count_results build)
	build build-asan -Dwerror=true -Dtests=enabled -Dsystemd=enabled \
		-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
	run_all build-asan "ASan+UBSan build" build || rc=1
	read -r p2 f2 < <(count_results build-asan integration others)
	read -r p4 f4 < <(count_results build testlog-valgrind)
	read -r p5 f5 < <(count_fuzz build/fuzz)
	# The suites ran above: the package build need not run them again.
	say "Debian packages (contrib/package-test.sh)"
	if DEB_BUILD_OPTIONS=nocheck bash contrib/package-test.sh; then p3=1 f3=0; else p3=0 f3=1 rc=1; fi
	echo
	if [ -s "$FAILURES_FILE" ]; then
		echo "==== failed tests (the end of each one's output)"
		cat "$FAILURES_FILE"
	fi
	rm -f "$FAILURES_FILE"
	echo "werror build: $p1 passed, $f1 failed"
	echo "sanitizer build: $p2 passed, $f2 failed"
	echo "valgrind (unit): $p4 passed, $f4 failed"
	echo "fuzz targets: $p5 passed, $f5 failed"
	echo "packages: $p3 passed, $f3 failed"
	echo "summary: $((p1 + p2 + p3 + p4 + p5)) passed, $((f1 + f2 + f3 + f4 + f5)) failed"
	return $rc
}

cmd_run() {
	need_root "$@"
	install_packages
	ensure_engine
	build build -Dwerror=true
	say "running build/daemon/maf-sandboxd $* (Ctrl-C stops it; try: build/client/maf-sandbox status)"
	exec "$ROOT/build/daemon/maf-sandboxd" "$@"
}

case "${1:-}" in
	run) shift; cmd_run "$@" ;;
	test) shift; cmd_test "$@" ;;
	*) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
