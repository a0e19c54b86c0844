#!/usr/bin/env bash
# contrib/dev.sh — set up, build, run and test maf-sandbox on Debian 12.
#
#   contrib/dev.sh run [maf-sandboxd options]   install what running needs, start a Docker
#                                             engine if none answers, build, run the daemon
#                                             (allowlists served by the build's egress proxy)
#   contrib/dev.sh test                       what the tests need too, then the tests, in
#                                             two lanes side by side (doc/TESTING.md): the
#                                             engine lane runs every suite that uses the
#                                             Docker engine, one at a time: the C
#                                             integration suites on the local file plane,
#                                             the clients' suites and the bench in the
#                                             -Dwerror build (the one the package ships),
#                                             then the C integration suites on the archive
#                                             plane (and files_local) and the Python
#                                             client's suite under ASan+UBSan; the
#                                             CPU lane builds the ASan build and runs the
#                                             unit and packaging suites of both builds, the
#                                             unit suites under valgrind, every fuzz target
#                                             for 30 s (FUZZ_SECONDS), then the Debian
#                                             packages built twice, with their checks, and
#                                             each installed, socket-activated and purged
#                                             (contrib/package-test.sh). contrib/lanes.py
#                                             then checks each lane against tests/lanes.txt
#                                             (what must run, which skips are allowed) and
#                                             prints passed, failed and skipped per lane and
#                                             a last line "summary: ..."
#
# As root (no sudo needed; a user other than root runs it with sudo). Idempotent: packages
# already installed are not reinstalled, a running engine is reused, a configured build is
# not configured again. MSB_DEV_BUILD_DIR names the build directory `run` builds and runs
# (default: build).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

# What `run` needs: the build and its man pages, the engine, and what the
# README's commands use (busybox-static makes their image, python3 runs the
# Python client).
RUN_PACKAGES=(
	gcc libc6-dev pkg-config meson ninja-build scdoc
	libevent-dev libjansson-dev libarchive-dev libcurl4-openssl-dev libsystemd-dev
	docker.io busybox-static python3 curl ca-certificates
)
# What `test` needs besides: the Check suites, socket activation, the package
# build, valgrind, the fuzzers (clang, libFuzzer), debootstrap (the Python
# backend's image), iproute2 (the egress suite looks at bridges).
TEST_PACKAGES=(
	check systemd iproute2
	build-essential dpkg-dev debhelper dh-python
	valgrind clang libclang-rt-14-dev llvm debootstrap
)
# The build directory `run` builds and runs.
RUN_BUILD_DIR=${MSB_DEV_BUILD_DIR:-build}
# Times `test` builds the Debian packages (with their checks): a test that
# fails now and then in the package build shows there.
PACKAGE_BUILDS=2
# Seconds each fuzz target runs in `test`.
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
ENGINE_SOCKET=/var/run/docker.sock
ENGINE_WAIT_SECONDS=90

say() { printf '==> %s\n' "$*"; }
die() { printf 'contrib/dev.sh: %s\n' "$*" >&2; exit 1; }

need_root() {
	[ "$(id -u)" -eq 0 ] || die "run me as root (sudo $0 $*): I install packages and start dockerd"
}

# install_packages PACKAGE...: those not installed yet.
install_packages() {
	local missing=() p
	for p in "$@"; do
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

# options_differ DIR -DKEY=VALUE...: true when DIR's value of some KEY is not VALUE.
options_differ() {
	local dir=$1
	shift
	meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
have = {o["name"]: o["value"] for o in json.load(sys.stdin)}
for arg in sys.argv[1:]:
    key, _, want = arg[2:].partition("=")
    value = have.get(key)
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, list):
        value = ",".join(value)
    if str(value) != want:
        sys.exit(0)
sys.exit(1)
' "$@"
}

# build DIR [meson options...]: configured again only when an option differs
# (meson configure always makes ninja regenerate the build files).
build() {
	local dir=$1; shift
	if [ -f "$dir/build.ninja" ]; then
		if options_differ "$dir" "$@"; then
			meson configure "$dir" "$@" >/dev/null
		fi
	else
		meson setup "$dir" "$@" >/dev/null
	fi
	ninja -C "$dir" >/dev/null || { ninja -C "$dir"; die "build in $dir failed"; }
}

# The lanes of `test` (doc/TESTING.md; tests/lanes.txt says what each must run
# and which skips it allows). Two cores, one engine: two lanes side by side.
#
# The engine lane runs everything that uses the Docker engine, one suite at a
# time (the suites share the engine; is_parallel: false), and never two
# `meson test` runs at once: first the optimized build's (the local file
# plane, the clients' suites, the bench), then the ASan build's (the archive
# plane, and files_local), as soon as that build is made.
# The CPU lane, beside it: the ASan build, the unit and packaging suites of
# both builds, the unit suites under valgrind, the fuzzers, the packages.
# The faults suites restart dockerd under everything on the machine; the
# package test starts an installed daemon that must reach the engine: each
# holds the lock build/$ENGINE_RESTART_LOCK_NAME (flock), so the one never
# runs while the other does.
#
# Expected timeline, in minutes, on 2 vCPUs (from the suites' measured ASan
# durations; the optimized build's engine suites taken at 0.8 of theirs, as
# measured for daemon: 18 s against 22 s):
#  engine lane                                   CPU lane
#   0 -  2  build (-Dwerror): both cores
#   2 -  4  faults_local                           2 -  5  build-asan
#   4 - 16  the local plane (~9 min: density 2,    5 -  7  unit+packaging of build
#           hostile 3, files_local 1.5, ...),       7 - 11  unit+packaging of build-asan
#           clients (python_backend 1.6) and       11 - 24  valgrind (unit)
#           bench (~3.5 min)                       24 - 28  fuzz (8 targets x 30 s)
#  16 - 18  faults (build-asan)                    28 - 32  packages (2 builds; each
#  18 - 33  the archive plane and files_local               waits while faults runs)
#           (~15 min: files 3.3, hostile 3.4,
#           density 2.6, files_local 2, ...)
#  33 - 34  python_client (build-asan)
#  34       contrib/lanes.py: the checks and the summary
# ~34-37 minutes in all, where the lanes took ~33 before with the C
# integration suites in the ASan build only: the engine lane is the critical
# path (~31 min of engine time after the first build); the fuzzers and the
# package builds moved beside it.
ENGINE_RESTART_LOCK_NAME=.engine-restart.lock
# The lanes' logs (tests/lanes.txt's lane names → meson-logs bases, or files).
LANE_LOGBASE=lane

# lane_tests DIR LANE [meson test arguments...]: one `meson test` of a lane,
# one test at a time, its log build*/meson-logs/lane-LANE.json.
lane_tests() {
	local dir=$1 lane=$2
	shift 2
	meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs -v \
		--logbase "$LANE_LOGBASE-$lane" "$@"
}

# engine_lane: the engine lane (in the background; its output in
# build/meson-logs/engine-lane.out). Waits for build-asan's status file
# before its ASan part; a build that failed leaves that part out (the
# checks then report its tests as not run).
engine_lane() {
	local st=0 lock=$ROOT/build/$ENGINE_RESTART_LOCK_NAME
	say "engine lane (build): faults_local, alone (it restarts dockerd)"
	(flock 9 && lane_tests build optimized-engine-dockerd faults_local) 9>"$lock" || st=1
	say "engine lane (build): the local plane, the clients, the bench"
	lane_tests build optimized-engine --suite local --suite clients --suite bench --no-suite dockerd ||
		st=1
	while [ ! -f build/meson-logs/$LANE_LOGBASE-asan-build.status ]; do sleep 5; done
	if [ "$(cat build/meson-logs/$LANE_LOGBASE-asan-build.status)" != ok ]; then
		say "engine lane: build-asan was not made; its suites are left out"
		return 1
	fi
	say "engine lane (build-asan): faults, alone (it restarts dockerd)"
	(flock 9 && lane_tests build-asan asan-engine-dockerd faults) 9>"$lock" || st=1
	say "engine lane (build-asan): the archive plane, and files_local"
	lane_tests build-asan asan-engine --suite archive --suite files --no-suite dockerd || st=1
	# The Python client's suite drives the daemon through paths no C suite
	# takes (streamed stdin, cancel from a task, reconnects): under the
	# sanitizers too (~40 s).
	say "engine lane (build-asan): the Python client's suite"
	lane_tests build-asan asan-engine-clients python_client || st=1
	return $st
}

# cpu_lane: the CPU lane (in the foreground).
cpu_lane() {
	local st=0 i lock=$ROOT/build/$ENGINE_RESTART_LOCK_NAME
	say "CPU lane: the ASan+UBSan build"
	if (build build-asan -Dwerror=true -Dtests=enabled -Dsystemd=enabled \
		-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug); then
		echo ok > build/meson-logs/$LANE_LOGBASE-asan-build.status
	else
		echo failed > build/meson-logs/$LANE_LOGBASE-asan-build.status
		st=1
	fi
	say "CPU lane (build): the unit and packaging suites"
	lane_tests build optimized --suite unit --suite packaging || st=1
	if [ "$(cat build/meson-logs/$LANE_LOGBASE-asan-build.status)" = ok ]; then
		say "CPU lane (build-asan): the unit and packaging suites"
		lane_tests build-asan asan --suite unit --suite packaging || st=1
	fi
	say "CPU lane (valgrind memcheck): the unit suites of build"
	# (meson adds the setup's name: the log is build/meson-logs/lane-valgrind.json)
	meson test -C build --no-rebuild --setup valgrind --num-processes 1 --print-errorlogs \
		--suite unit --logbase "$LANE_LOGBASE" || st=1
	say "CPU lane: every fuzz target for ${FUZZ_SECONDS}s (tests/fuzz/run.sh)"
	FUZZ_OUT="$ROOT/build/fuzz" bash tests/fuzz/run.sh "$FUZZ_SECONDS" || st=1
	# The package build runs its own checks (debian/rules: the unit and
	# packaging suites, which need no engine), PACKAGE_BUILDS times, each
	# from a clean copy of the tree: a test that fails only now and then
	# inside dpkg-buildpackage shows here, not on a packager's machine.
	for ((i = 1; i <= PACKAGE_BUILDS; i++)); do
		say "CPU lane: Debian packages, build $i of $PACKAGE_BUILDS, with their checks (contrib/package-test.sh)"
		if DEB_BUILD_OPTIONS='' flock "$lock" bash contrib/package-test.sh; then
			echo "build-$i ok" >> "build/meson-logs/$LANE_LOGBASE-packages.results"
		else
			echo "build-$i failed" >> "build/meson-logs/$LANE_LOGBASE-packages.results"
			st=1
		fi
	done
	return $st
}

cmd_test() {
	need_root test "$@"
	install_packages "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
	ensure_engine
	local rc=0 pid d
	build build -Dwerror=true -Dtests=enabled -Dsystemd=enabled
	# No log of an earlier run may count for this one.
	for d in build build-asan; do
		rm -f "$d/meson-logs/$LANE_LOGBASE"-*
	done
	rm -f build/fuzz/results
	say "tests: the engine lane and the CPU lane, side by side (doc/TESTING.md)"
	engine_lane > build/meson-logs/engine-lane.out 2>&1 &
	pid=$!
	cpu_lane || rc=1
	wait "$pid" || rc=1
	say "the engine lane's output"
	cat build/meson-logs/engine-lane.out
	echo
	# The counts per lane, every skip with its reason, and the checks against
	# tests/lanes.txt (a required test not run, a skip not allowed, a test
	# not listed fail), ending with the summary line.
	local j=$LANE_LOGBASE b=build/meson-logs a=build-asan/meson-logs
	python3 contrib/lanes.py check tests/lanes.txt \
		"optimized=$b/$j-optimized.json" \
		"optimized-engine=$b/$j-optimized-engine-dockerd.json,$b/$j-optimized-engine.json" \
		"asan=$a/$j-asan.json" \
		"asan-engine=$a/$j-asan-engine-dockerd.json,$a/$j-asan-engine.json,$a/$j-asan-engine-clients.json" \
		"valgrind=$b/$j-valgrind.json" \
		"fuzz=build/fuzz/results" \
		"packages=$b/$j-packages.results" || rc=1
	return $rc
}

# The daemon of RUN_BUILD_DIR, with its options: egress.proxy_binary names
# the build's egress proxy (the default is the install prefix's, which a
# build that is not installed lacks: allowlists would be refused). The
# daemon reads that file into the proxy image it runs in a container: it is
# the build's own, made by root here. The caller's options come after, so
# --set egress.proxy_binary=... (empty: no allowlist) still wins.
run_command() {
	local dir
	dir=$(cd "$RUN_BUILD_DIR" && pwd)
	printf '%s\0' "$dir/daemon/maf-sandboxd" \
		--set "egress.proxy_binary=$dir/egress-proxy/maf-sandbox-egress-proxy" "$@"
}

cmd_run() {
	local cmd
	need_root run "$@"
	install_packages "${RUN_PACKAGES[@]}"
	ensure_engine
	build "$RUN_BUILD_DIR" -Dwerror=true
	mapfile -d '' -t cmd < <(run_command "$@")
	say "running ${cmd[*]}"
	say "(Ctrl-C stops it; in another shell: $RUN_BUILD_DIR/client/maf-sandbox status)"
	exec "${cmd[@]}"
}

case "${1:-}" in
	run) shift; cmd_run "$@" ;;
	test) shift; cmd_test "$@" ;;
	*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
