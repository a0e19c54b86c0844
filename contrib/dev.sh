#!/usr/bin/env bash
# contrib/dev.sh — set up, build, run and test maf-sandbox on Debian 12.
#
#   contrib/dev.sh run [maf-sandboxd options]   install what running needs, start a Docker
#                                             engine if none answers, build, run the daemon
#                                             (allowlists served by the build's egress proxy)
#   contrib/dev.sh test                       what the tests need too, then the tests: a -Dwerror
#                                             build (unit, packaging, clients), every suite
#                                             under ASan+UBSan, the unit suites under
#                                             valgrind, every fuzz target for 30 s
#                                             (FUZZ_SECONDS), then the Debian packages
#                                             built twice, with their checks, and each
#                                             installed, socket-activated and purged
#                                             (contrib/package-test.sh)
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
	need_root test "$@"
	install_packages "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
	ensure_engine
	local rc=0 i p1 f1 p2 f2 p3 f3 p4 f4 p5 f5
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
	# The package build runs its own checks (debian/rules: the unit and
	# packaging suites, which need no engine), PACKAGE_BUILDS times, each from
	# a clean copy of the tree: a test that fails only now and then inside
	# dpkg-buildpackage shows here, not on a packager's machine.
	p3=0 f3=0
	for ((i = 1; i <= PACKAGE_BUILDS; i++)); do
		say "Debian packages, build $i of $PACKAGE_BUILDS, with their checks (contrib/package-test.sh)"
		if DEB_BUILD_OPTIONS='' bash contrib/package-test.sh; then
			p3=$((p3 + 1))
		else
			f3=$((f3 + 1))
			rc=1
		fi
	done
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
		--set "egress.proxy_binary=$dir/daemon/egress-proxy/maf-sandbox-egress-proxy" "$@"
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
