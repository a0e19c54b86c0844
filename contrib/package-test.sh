#!/usr/bin/env bash
# contrib/package-test.sh — build the Debian packages, install them, use them, purge them.
#
#   sudo contrib/package-test.sh [--keep-debs DIR]
#
# As root, on a machine whose Docker engine answers: builds maf-sandbox's .debs from a clean
# copy of this tree in a temporary directory (dpkg-buildpackage -us -uc -b; DEB_BUILD_OPTIONS
# is passed on, e.g. nocheck; without it the build runs its checks, and their summary is
# shown), installs them, starts the INSTALLED maf-sandboxd through socket
# activation, asks it `describe` and `status` with the installed CLI, imports the Python client
# with the system python, finds the man pages, then stops the daemon and purges the packages.
# Ends with a PASS or FAIL line; exits non-zero on failure.
#
# Socket activation: with systemd as PID 1, maf-sandbox.socket (/run/maf-sandbox.sock; the test
# refuses to run if that path exists); otherwise systemd-socket-activate on a socket in the
# temporary directory. The daemon runs without the egress proxy (egress.proxy_binary empty), so
# it loads no image into the engine; describe and status create no container.
#
# On every exit path the machine is left as it was: the daemon stopped, the packages purged,
# the groups maf-sandbox and maf-sandbox-admin removed if this run created them, /var/lib/maf-sandbox
# and /run/maf-sandbox as they were, the temporary directory removed; under systemd, only this
# run's drop-in removed and the units' failed state reset (their journal shown on failure).
# Missing build dependencies are installed (and left installed, like contrib/dev.sh's packages).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

PACKAGES=(maf-sandbox libmaf-sandbox0 libmaf-sandbox-dev python3-maf-sandbox-client)
DBGSYM_PACKAGES=(maf-sandbox-dbgsym libmaf-sandbox0-dbgsym)
SYSTEM_SOCKET=/run/maf-sandbox.sock
ENGINE_SOCKET=/var/run/docker.sock
STATE_DIR=/var/lib/maf-sandbox
RUN_DIR=/run/maf-sandbox   # freeze.lock_file's directory (RuntimeDirectory=, kept on stop)
GROUP=maf-sandbox
GROUPS_MADE=(maf-sandbox maf-sandbox-admin)   # by the package's sysusers.d file
ENGINE_WAIT_SECONDS=30     # the installed daemon reaching the engine
DAEMON_STOP_SECONDS=30     # SIGTERM drains requests in flight (shutdown.drain_ms, 10 s)

KEEP_DEBS=
WORK=
SA_PID=
SYSTEMD_DROPIN=
SYSTEMD_USED=0
declare -A GROUP_EXISTED=()
STATE_BACKUP=
RUN_DIR_EXISTED=0
INSTALL_STARTED=0
T0=$SECONDS
T0_EPOCH=$(date +%s)   # journalctl --since

say() { printf '==> [%3ds] %s\n' "$((SECONDS - T0))" "$*"; }
fail() {
	printf 'package-test: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 2
}

while [ $# -gt 0 ]; do
	case "$1" in
	--keep-debs) [ $# -ge 2 ] || usage; KEEP_DEBS=$2; shift 2 ;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done

pkg_installed() {
	dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed
}

# Packages of ours dpkg knows in any state but "not-installed" (half-installed, config-files...).
pkgs_present() {
	local p st
	for p in "${PACKAGES[@]}" "${DBGSYM_PACKAGES[@]}"; do
		st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) || continue
		[ -n "$st" ] && [ "$st" != not-installed ] && printf '%s\n' "$p"
	done
	return 0
}

engine_answers() {
	[ -S "$ENGINE_SOCKET" ] &&
		[ "$(curl -s --max-time 3 --unix-socket "$ENGINE_SOCKET" http://docker/_ping 2>/dev/null)" = OK ]
}

systemd_is_pid1() { [ -d /run/systemd/system ]; }

stop_daemon() {
	local i
	if [ -n "$SA_PID" ] && kill -0 "$SA_PID" 2>/dev/null; then
		kill -TERM "$SA_PID" 2>/dev/null || true
		for ((i = 0; i < DAEMON_STOP_SECONDS * 10; i++)); do
			kill -0 "$SA_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$SA_PID" 2>/dev/null; then
			echo "package-test: the daemon did not stop on SIGTERM within ${DAEMON_STOP_SECONDS}s; killing it" >&2
			kill -KILL "$SA_PID" 2>/dev/null || true
		fi
		wait "$SA_PID" 2>/dev/null || true
	fi
	SA_PID=
	if [ -n "$SYSTEMD_DROPIN" ]; then
		systemctl stop maf-sandbox.socket maf-sandbox.service >/dev/null 2>&1 || true
		# Only our file: the directory may hold an operator's drop-ins.
		rm -f "$SYSTEMD_DROPIN"
		rmdir "$(dirname "$SYSTEMD_DROPIN")" 2>/dev/null || true
		systemctl daemon-reload >/dev/null 2>&1 || true
		SYSTEMD_DROPIN=
	fi
}

purge_packages() {
	local present
	mapfile -t present < <(pkgs_present)
	[ ${#present[@]} -eq 0 ] && return 0
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${present[@]}" >"$WORK/purge.log" 2>&1 || {
		cat "$WORK/purge.log" >&2
		DEBIAN_FRONTEND=noninteractive dpkg --purge "${present[@]}" >&2 || true
	}
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM HUP
	if [ $rc -ne 0 ] && [ "$SYSTEMD_USED" = 1 ]; then
		echo "--- journalctl -u maf-sandbox.service -u maf-sandbox.socket --since @$T0_EPOCH ---" >&2
		journalctl --no-pager -u maf-sandbox.service -u maf-sandbox.socket --since "@$T0_EPOCH" >&2
	fi
	stop_daemon
	if [ "$SYSTEMD_USED" = 1 ]; then
		systemctl reset-failed maf-sandbox.service maf-sandbox.socket >/dev/null 2>&1 || true
	fi
	if [ "$INSTALL_STARTED" = 1 ]; then
		purge_packages
		for g in "${GROUPS_MADE[@]}"; do
			if [ "${GROUP_EXISTED[$g]}" = 0 ] && getent group "$g" >/dev/null; then
				groupdel "$g" || { echo "package-test: cannot remove the group $g" >&2; rc=1; }
			fi
		done
		if [ "$RUN_DIR_EXISTED" = 0 ]; then
			rm -rf "$RUN_DIR"
		fi
		if [ -n "$STATE_BACKUP" ]; then
			rm -rf "$STATE_DIR"
			mv "$STATE_BACKUP" "$STATE_DIR"
		else
			rm -rf "$STATE_DIR"
		fi
		if [ -n "$(pkgs_present)" ]; then
			echo "package-test: still installed after the purge: $(pkgs_present | tr '\n' ' ')" >&2
			rc=1
		fi
	fi
	if [ $rc -ne 0 ] && [ -n "$WORK" ] && [ -f "$WORK/daemon.log" ]; then
		echo "--- the installed daemon's log ---" >&2
		tail -n 40 "$WORK/daemon.log" >&2
	fi
	[ -n "$WORK" ] && rm -rf "$WORK"
	if [ $rc -eq 0 ]; then
		echo "PASS: package-test: built, installed, socket-activated, purged ($((SECONDS - T0))s)"
	else
		echo "FAIL: package-test (exit $rc, after $((SECONDS - T0))s)"
	fi
	exit $rc
}

# ---- preconditions --------------------------------------------------------------------------

[ "$(id -u)" -eq 0 ] || fail "run me as root (sudo $0): I install and purge packages"
for tool in dpkg-buildpackage apt-get curl python3; do
	command -v "$tool" >/dev/null || fail "$tool is missing (contrib/dev.sh installs what this needs)"
done
if [ -n "$(pkgs_present)" ]; then
	fail "already installed here: $(pkgs_present | tr '\n' ' '); this test would purge them"
fi
engine_answers || fail "no Docker engine answers on $ENGINE_SOCKET (contrib/dev.sh run starts one)"
if systemd_is_pid1; then
	[ -e "$SYSTEM_SOCKET" ] &&
		fail "$SYSTEM_SOCKET exists: something serves it; maf-sandbox.socket cannot be tested here"
else
	command -v systemd-socket-activate >/dev/null || fail "systemd-socket-activate is missing (package systemd)"
fi

WORK=$(mktemp -d /tmp/maf-sandbox-package-test.XXXXXX)
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---- build ----------------------------------------------------------------------------------

say "copying the tree to $WORK/src"
mkdir "$WORK/src"
tar -C "$ROOT" -c --exclude=./.git --exclude=./build --exclude='./build-*' --exclude='./obj-*' \
	--exclude=__pycache__ . | tar -C "$WORK/src" -x
VERSION=$(cd "$WORK/src" && dpkg-parsechangelog -S Version)

if ! (cd "$WORK/src" && dpkg-checkbuilddeps) 2>"$WORK/builddeps.txt"; then
	say "installing build dependencies: $(sed 's/.*Unmet build dependencies: //' "$WORK/builddeps.txt")"
	(cd "$WORK/src" && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q ./) >"$WORK/builddeps.log" 2>&1 ||
		{ cat "$WORK/builddeps.log" >&2; fail "cannot install the build dependencies"; }
fi

say "dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-})"
if ! (cd "$WORK/src" && dpkg-buildpackage -us -uc -b -Jauto) >"$WORK/build.log" 2>&1; then
	tail -n 80 "$WORK/build.log" >&2
	fail "the package build failed"
fi
# The checks debian/rules runs (meson test's summary in the build log), unless nocheck.
if grep -qE '^Ok: +[0-9]+' "$WORK/build.log"; then
	say "the package build's checks: $(grep -E '^(Ok|Fail|Skipped|Timeout): ' "$WORK/build.log" |
		tr -s ' ' | sed 's/ *$//' | paste -sd ' ')"
elif [[ " ${DEB_BUILD_OPTIONS:-} ${DEB_BUILD_PROFILES:-} " != *" nocheck "* ]]; then
	tail -n 40 "$WORK/build.log" >&2
	fail "the package build ran no tests (no meson test summary in its log), and nocheck is not set"
fi
DEBS=()
for p in "${PACKAGES[@]}"; do
	f=$(ls "$WORK"/"${p}"_"${VERSION}"_*.deb 2>/dev/null) || fail "the build made no ${p}_${VERSION}_*.deb"
	DEBS+=("$f")
done
for f in "${DEBS[@]}"; do
	say "built $(basename "$f") ($(stat -c %s "$f") bytes)"
done
if [ -n "$KEEP_DEBS" ]; then
	mkdir -p "$KEEP_DEBS"
	cp "$WORK"/*.deb "$WORK"/*.changes "$WORK"/*.buildinfo "$KEEP_DEBS"/
fi
if command -v lintian >/dev/null; then
	say "lintian"
	rc=0
	lintian --fail-on error "$WORK"/*.changes >"$WORK/lintian.txt" 2>&1 || rc=$?
	grep -v '^running with root privileges' "$WORK/lintian.txt" || true
	[ $rc -eq 0 ] || fail "lintian reports errors"
fi

# ---- install --------------------------------------------------------------------------------

for g in "${GROUPS_MADE[@]}"; do
	GROUP_EXISTED[$g]=0
	getent group "$g" >/dev/null && GROUP_EXISTED[$g]=1
done
[ -e "$RUN_DIR" ] && RUN_DIR_EXISTED=1
if [ -e "$STATE_DIR" ]; then
	STATE_BACKUP="$WORK/state-backup"
	cp -a "$STATE_DIR" "$STATE_BACKUP"
fi
INSTALL_STARTED=1
say "apt-get install ${DEBS[*]##*/}"
# No recommends: the engine that answers may come from a package apt does not know about.
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${DEBS[@]}" \
	>"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; fail "apt-get install failed"; }
for p in "${PACKAGES[@]}"; do
	pkg_installed "$p" || fail "$p is not installed"
	[ "$(dpkg-query -W -f='${Version}' "$p")" = "$VERSION" ] || fail "$p is not version $VERSION"
done
for g in "${GROUPS_MADE[@]}"; do
	getent group "$g" >/dev/null || fail "the postinst did not create the group $g"
done
for f in /usr/sbin/maf-sandboxd /usr/bin/maf-sandbox /usr/libexec/maf-sandbox-egress-proxy; do
	[ -x "$f" ] || fail "$f is not installed"
done
[ -f /etc/maf-sandbox/maf-sandboxd.conf ] || fail "the configuration file is not installed"

# ---- run the installed daemon ---------------------------------------------------------------

unset MAF_SANDBOX_SOCKET
if systemd_is_pid1; then
	say "systemctl start maf-sandbox.socket"
	SYSTEMD_USED=1
	SYSTEMD_DROPIN=/run/systemd/system/maf-sandbox.service.d/package-test-$$.conf
	mkdir -p "$(dirname "$SYSTEMD_DROPIN")"
	printf '[Service]\nExecStart=\nExecStart=/usr/sbin/maf-sandboxd --set egress.proxy_binary=\n' \
		>"$SYSTEMD_DROPIN"
	systemctl daemon-reload
	systemctl start maf-sandbox.socket
	systemctl is-active --quiet maf-sandbox.socket || fail "maf-sandbox.socket is not active"
	SOCKET=$SYSTEM_SOCKET
	[ -S "$SOCKET" ] || fail "maf-sandbox.socket made no $SOCKET"
	[ "$(stat -c %G "$SOCKET")" = "$GROUP" ] || fail "$SOCKET is not in the group $GROUP"
else
	SOCKET=$WORK/maf-sandbox.sock
	say "systemd-socket-activate -l $SOCKET /usr/sbin/maf-sandboxd (systemd is not PID 1)"
	systemd-socket-activate -l "$SOCKET" \
		/usr/sbin/maf-sandboxd --set egress.proxy_binary= >"$WORK/daemon.log" 2>&1 &
	SA_PID=$!
	for ((i = 0; i < 50; i++)); do
		[ -S "$SOCKET" ] && break
		sleep 0.1
	done
	[ -S "$SOCKET" ] || fail "systemd-socket-activate made no $SOCKET"
fi
CLI=(/usr/bin/maf-sandbox --socket "$SOCKET")

# The first connection starts the daemon.
say "maf-sandbox describe"
"${CLI[@]}" describe >"$WORK/describe.txt" 2>&1 || { cat "$WORK/describe.txt" >&2; fail "describe failed"; }
grep -q -F "$VERSION" "$WORK/describe.txt" || { cat "$WORK/describe.txt" >&2; fail "describe does not name $VERSION"; }
"${CLI[@]}" --json describe >"$WORK/describe.json" || fail "describe --json failed"
python3 - "$WORK/describe.json" "$VERSION" <<'PY' || fail "describe --json is not as expected"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["daemon"] == {"name": "maf-sandboxd", "version": sys.argv[2]}, d["daemon"]
assert d["backend"] == "docker", d["backend"]
PY

if systemd_is_pid1; then
	systemctl is-active --quiet maf-sandbox.service || fail "the socket did not activate maf-sandbox.service"
	DAEMON_PID=$(systemctl show -P MainPID maf-sandbox.service)
else
	DAEMON_PID=$SA_PID
	grep -q 'serving the socket-activated socket' "$WORK/daemon.log" ||
		fail "the daemon did not take the activated socket"
fi

say "maf-sandbox status (until the installed daemon reaches the engine)"
for ((i = 0; ; i++)); do
	"${CLI[@]}" --json status >"$WORK/status.json" || fail "status failed"
	python3 - "$WORK/status.json" "$VERSION" "$DAEMON_PID" "$SOCKET" <<'PY' && break
import json, sys
s = json.load(open(sys.argv[1]))
d = s["daemon"]
assert d["version"] == sys.argv[2], d
assert str(d["pid"]) == sys.argv[3], ("pid", d["pid"], sys.argv[3])
assert d.get("socket") == sys.argv[4], ("socket", d.get("socket"))
e = s["egress"]
assert e["configured"] is False and e["modes"] == ["closed"] and e["proxy_binary"] is None, e
assert "egress.proxy_binary" in e["allowlist_off_reason"], e
# Root, a local engine socket: the local file plane, also inside the unit's
# capability bounding set and system call filter (its start probes them).
assert s.get("file_plane") == "local", ("file_plane", s.get("file_plane"), s.get("file_plane_reason"))
sys.exit(0 if s["engine"]["reachable"] else 3)
PY
	[ $? -eq 3 ] || { cat "$WORK/status.json" >&2; fail "status is not as expected"; }
	[ $i -lt $((ENGINE_WAIT_SECONDS * 2)) ] || { cat "$WORK/status.json" >&2; fail "the daemon never reached the engine"; }
	sleep 0.5
done

say "/usr/bin/python3: import maf_sandbox_client; describe"
(cd / && /usr/bin/python3 -I - "$SOCKET" "$VERSION" <<'PY') || fail "the installed Python client does not work"
import sys
import maf_sandbox_client
f = maf_sandbox_client.__file__
assert f.startswith("/usr/lib/python3/dist-packages/maf_sandbox_client/"), f
with maf_sandbox_client.connect(sys.argv[1], timeout=30) as client:
    d = client.describe()
assert d["daemon"]["version"] == sys.argv[2], d["daemon"]
PY

if command -v cc >/dev/null; then
	say "a C program built with pkg-config libmaf-sandbox: describe"
	cat >"$WORK/consumer.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <msb.h>

int main(int argc, char **argv)
{
	struct msb_conn *conn = NULL;
	json_t *r = NULL;
	const char *v;
	int err;

	if (argc != 3)
		return 2;
	err = msb_connect(argv[1], &conn);
	if (err == MSB_OK)
		err = msb_describe(conn, &r);
	if (err != MSB_OK) {
		fprintf(stderr, "consumer: %s\n", msb_strerror(err));
		msb_conn_free(conn);
		return 1;
	}
	v = json_string_value(json_object_get(json_object_get(r, "daemon"), "version"));
	err = v && strcmp(v, argv[2]) == 0 ? 0 : 1;
	json_decref(r);
	msb_conn_free(conn);
	return err;
}
C
	# shellcheck disable=SC2046 # pkg-config's output is words
	cc -o "$WORK/consumer" "$WORK/consumer.c" $(pkg-config --cflags --libs libmaf-sandbox) ||
		fail "a program cannot be built against libmaf-sandbox-dev"
	"$WORK/consumer" "$SOCKET" "$VERSION" || fail "the program linked with libmaf-sandbox0 failed"
fi

for page in maf-sandboxd maf-sandbox; do
	installed=$(dpkg -L maf-sandbox | grep -E "^/usr/share/man/man[0-9]/$page\.[0-9]" | head -n 1) ||
		fail "the package has no man page $page"
	if [ ! -e "$installed" ]; then
		grep -qs '^path-exclude=*/usr/share/man' /etc/dpkg/dpkg.cfg.d/* ||
			fail "$installed is missing"
		say "man $page: excluded from installation by dpkg's path-exclude here; not checked"
	elif command -v man >/dev/null; then
		man -w "$page" >/dev/null || fail "man -w $page finds nothing"
		say "man -w $page: $(man -w "$page")"
	fi
done
if dpkg -L maf-sandbox | grep -qx /usr/share/bash-completion/completions/maf-sandbox; then
	[ -f /usr/share/bash-completion/completions/maf-sandbox ] || fail "the bash completion is missing"
fi

# ---- stop, purge, check ---------------------------------------------------------------------

say "stopping the daemon"
if [ -z "$SYSTEMD_DROPIN" ] && [ -n "$SA_PID" ]; then
	kill -TERM "$SA_PID"
	for ((i = 0; i < DAEMON_STOP_SECONDS * 10; i++)); do
		kill -0 "$SA_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$SA_PID" 2>/dev/null && fail "the daemon did not stop on SIGTERM within ${DAEMON_STOP_SECONDS}s"
	rc=0
	wait "$SA_PID" || rc=$?
	SA_PID=
	[ $rc -eq 0 ] || fail "the daemon exited $rc on SIGTERM"
fi
stop_daemon

say "apt-get purge"
purge_packages
[ -z "$(pkgs_present)" ] || fail "still installed after the purge: $(pkgs_present | tr '\n' ' ')"
for f in /usr/sbin/maf-sandboxd /usr/bin/maf-sandbox /etc/maf-sandbox \
	/usr/lib/python3/dist-packages/maf_sandbox_client; do
	[ ! -e "$f" ] || fail "$f is left after the purge"
done
