#!/bin/sh
# verify-units.sh — meson test (suite packaging): the units meson configured
# load cleanly.
#
#   verify-units.sh SBINDIR BINDIR DAEMON CLI DOCDIR SYSUSERS UNIT...
#
# Each UNIT is copied into a temporary directory with ExecStart=SBINDIR/
# maf-sandboxd and ExecStart=BINDIR/maf-sandbox pointed at the built DAEMON
# and CLI (systemd-analyze verify wants the programs to exist), then all are
# verified together (--man=no: the pages are not installed yet). Fails when
# verify fails, when it says anything about our units (it only warns about
# unknown keys and bad values), when a @...@ was left unconfigured, or when a
# Documentation=man:PAGE(N) has no DOCDIR/PAGE.N.scd. Lines about other units
# (the host's docker.service, ...) are shown but do not count. SYSUSERS is
# parsed with systemd-sysusers --dry-run into an empty root, when there is one.
# Also fails when a unit names a group SYSUSERS does not make, or when DAEMON
# (with --check-config) or CLI (with --help) refuses its ExecStart= arguments.
set -u

if [ $# -lt 7 ]; then
	echo "usage: $0 SBINDIR BINDIR DAEMON CLI DOCDIR SYSUSERS UNIT..." >&2
	exit 2
fi
sbindir=$1 bindir=$2 daemon=$3 cli=$4 docdir=$5 sysusers=$6
shift 6
# meson passes built programs relative to the build directory.
case $daemon in /*) ;; *) daemon=$PWD/$daemon ;; esac
case $cli in /*) ;; *) cli=$PWD/$cli ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/msb-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail=0
mkdir "$tmp/units" "$tmp/root"

names=
for unit; do
	name=$(basename "$unit")
	names="$names $name"
	awk -v from1="ExecStart=$sbindir/maf-sandboxd" -v to1="ExecStart=$daemon" \
	    -v from2="ExecStart=$bindir/maf-sandbox " -v to2="ExecStart=$cli " '
		index($0, from1) == 1 { $0 = to1 substr($0, length(from1) + 1) }
		index($0, from2) == 1 { $0 = to2 substr($0, length(from2) + 1) }
		{ print }
	' "$unit" > "$tmp/units/$name"
	if grep -n '@[a-z_]*@' "$unit"; then
		echo "FAIL: $name: a @...@ was not configured"
		fail=1
	fi
	if grep -q '^ExecStart=' "$unit" &&
	   ! grep -F -q -e "ExecStart=$daemon" -e "ExecStart=$cli " "$tmp/units/$name"; then
		echo "FAIL: $name: ExecStart= runs neither $sbindir/maf-sandboxd nor $bindir/maf-sandbox"
		fail=1
	fi
	for page in $(sed -n 's/^Documentation=//p' "$unit"); do
		case $page in
		man:*\(*\))
			file=$(echo "$page" | sed 's/^man:\(.*\)(\(.*\))$/\1.\2.scd/')
			if [ ! -f "$docdir/$file" ]; then
				echo "FAIL: $name: Documentation=$page, but there is no $docdir/$file"
				fail=1
			fi
			;;
		esac
	done
done

paths=
for name in $names; do
	paths="$paths $tmp/units/$name"
done
# shellcheck disable=SC2086
systemd-analyze verify --man=no $paths > "$tmp/out" 2>&1
rc=$?
if [ -s "$tmp/out" ]; then
	echo "systemd-analyze verify says:"
	sed 's/^/  /' "$tmp/out"
fi
if [ "$rc" -ne 0 ]; then
	echo "FAIL: systemd-analyze verify exited with $rc"
	fail=1
fi
for name in $names; do
	if grep -F -e "$name" "$tmp/out" > /dev/null; then
		echo "FAIL: systemd-analyze verify complains about $name"
		fail=1
	fi
done

# The groups the units name (SocketGroup=, Group=, SupplementaryGroups=) are
# made by the sysusers.d file (root aside): a misspelt one would only fail
# when the unit starts.
sed -n 's/^g[[:space:]]\{1,\}\([^[:space:]]\{1,\}\).*/\1/p' "$sysusers" > "$tmp/groups"
echo root >> "$tmp/groups"
for name in $names; do
	for group in $(sed -n 's/^\(SocketGroup\|Group\|SupplementaryGroups\)=//p' "$tmp/units/$name"); do
		if ! grep -q -x -F -e "$group" "$tmp/groups"; then
			echo "FAIL: $name: group $group is not made by $sysusers"
			fail=1
		fi
	done
done

# The programs take the arguments the units give them: the daemon's, with
# --check-config added (an empty configuration file first, so that only the
# unit's options count, and a runtime directory of our own for a user other
# than root); the CLI's, with --help added (which it reaches only if every
# option before it parses and no operand comes first: it checks the option
# names, not their values).
: > "$tmp/empty.conf"
mkdir "$tmp/xdg"
set -f
for name in $names; do
	line=$(sed -n 's/^ExecStart=[-@+!:]*//p' "$tmp/units/$name" | sed '/^$/d' | tail -n 1)
	[ -n "$line" ] || continue
	# shellcheck disable=SC2086 # the unit's words, split as systemd does (no quotes in ours)
	set -- $line
	prog=$1
	shift
	if [ "$prog" = "$daemon" ]; then
		XDG_RUNTIME_DIR=$tmp/xdg "$daemon" -f "$tmp/empty.conf" "$@" --check-config > "$tmp/check" 2>&1
	elif [ "$prog" = "$cli" ]; then
		"$cli" "$@" --help > "$tmp/check" 2>&1
	else
		continue
	fi
	rc=$?
	if [ "$rc" -ne 0 ]; then
		sed 's/^/  /' "$tmp/check"
		echo "FAIL: $name: ExecStart=$line is refused (exit $rc)"
		fail=1
	fi
done
set +f

if command -v systemd-sysusers > /dev/null 2>&1; then
	if ! systemd-sysusers --dry-run --root="$tmp/root" "$sysusers" > "$tmp/sysusers" 2>&1 ||
	   grep -F -e "$sysusers" -e "$(basename "$sysusers")" "$tmp/sysusers"; then
		cat "$tmp/sysusers"
		echo "FAIL: systemd-sysusers does not take $sysusers"
		fail=1
	fi
fi

[ "$fail" -eq 0 ] && echo "ok:$names verified"
exit "$fail"
