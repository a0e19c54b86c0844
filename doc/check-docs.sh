#!/bin/sh
# check-docs.sh — meson test (suite packaging): the manual pages and the
# example configuration say what the built programs do, so they cannot drift
# apart silently.
#
#   check-docs.sh DAEMON CLI CONF5_SCD MAN1_SCD MAN8_SCD EXAMPLE_CONF
#
# Checks, each failure printed:
#   - every key `maf-sandboxd --check-config` prints has an entry in
#     maf-sandboxd.conf(5) (a line "*KEY* = ...") whose "Default: VALUE" is the
#     value the daemon prints (for a user other than root, a runtime path
#     must be named as $XDG_RUNTIME_DIR/NAME instead),
#     and a line "# KEY = " or "KEY = " in the example configuration;
#     every key the page documents is one the daemon knows;
#   - every option `maf-sandboxd --help` lists has an entry in
#     maf-sandboxd(8) (a line starting "*--opt*" or "*-x*, *--opt*");
#   - every command of `maf-sandbox --help` has a "## COMMAND" subsection in
#     maf-sandbox(1); every long option `maf-sandbox COMMAND --help` names
#     (its own part, before the common options) is named in that subsection,
#     and each one it lists has an entry there; every subsection names a
#     command; every global option `maf-sandbox --help` lists has an entry,
#     and every exit status it lists a line "*N*".
set -u

if [ $# -ne 6 ]; then
	echo "usage: $0 DAEMON CLI CONF5_SCD MAN1_SCD MAN8_SCD EXAMPLE_CONF" >&2
	exit 2
fi
daemon=$1 cli=$2 conf5=$3 man1=$4 man8=$5 example=$6
# meson passes built programs relative to the build directory.
case $daemon in /*) ;; *) daemon=$PWD/$daemon ;; esac
case $cli in /*) ;; *) cli=$PWD/$cli ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/msb-docs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail=0

# --- maf-sandboxd.conf(5) and the example configuration -----------------------

# An empty file, and an XDG_RUNTIME_DIR of our own: the defaults validate as
# any user (a user other than root gets its runtime paths below it).
: > "$tmp/empty.conf"
mkdir "$tmp/xdg"
if ! XDG_RUNTIME_DIR=$tmp/xdg "$daemon" --check-config -f "$tmp/empty.conf" > "$tmp/config" 2> "$tmp/err"; then
	echo "FAIL: $daemon --check-config failed:"
	cat "$tmp/err"
	exit 1
fi
# "key = value" lines (the value may be empty).
sed -n 's/^\([a-z_][a-z0-9_]*\.[a-z0-9_.]*\) = \(.*\)$/\1 \2/p' "$tmp/config" > "$tmp/keys"
if [ ! -s "$tmp/keys" ]; then
	echo "FAIL: no key = value lines in the output of --check-config"
	exit 1
fi

awk -v page="$conf5" -v xdg="$tmp/xdg/" '
	# The page: entries start at "*KEY* = ..." and run to the next entry or
	# section; each should hold "Default: VALUE".
	FILENAME == page {
		if ($0 ~ /^\*[a-z_][a-z0-9_]*\.[a-z0-9_.]*\* = /) {
			cur = substr($0, 2, index(substr($0, 2), "*") - 1)
			documented[cur] = 1
			text[cur] = ""
			next
		}
		if ($0 ~ /^#/)
			cur = ""
		if (cur != "")
			text[cur] = text[cur] " " $0
		next
	}
	# The daemon: "KEY VALUE".
	{
		key = $1
		value = substr($0, length(key) + 2)
		known[key] = 1
		if (!(key in documented)) {
			printf "FAIL: %s: key %s is not documented (no line \"*%s* = ...\")\n", page, key, key
			bad = 1
			next
		}
		t = text[key]
		# A runtime path of a user other than root: the page names it.
		if (index(value, xdg) == 1) {
			want = "$XDG_RUNTIME_DIR/" substr(value, length(xdg) + 1)
			if (index(t, want) == 0) {
				printf "FAIL: %s: key %s: the default of a user other than root is \"%s\", the page does not say it\n", page, key, want
				bad = 1
			}
			next
		}
		want = "Default: " (value == "" ? "empty" : value)
		i = index(t, want)
		after = substr(t, i + length(want), 1)
		if (i == 0 || after ~ /[A-Za-z0-9_\/]/) {
			printf "FAIL: %s: key %s: the daemon'"'"'s default is \"%s\", the page does not say \"%s\"\n", page, key, value, want
			bad = 1
		}
	}
	END {
		for (k in documented)
			if (!(k in known)) {
				printf "FAIL: %s: documents key %s, which the daemon does not know\n", page, k
				bad = 1
			}
		exit bad
	}
' "$conf5" "$tmp/keys" || fail=1

while read -r key value; do
	if ! grep -q "^#* *$(printf '%s' "$key" | sed 's/\./\\./g') =" "$example"; then
		echo "FAIL: $example: key $key is missing (want a line \"# $key = ...\")"
		fail=1
	fi
done < "$tmp/keys"

# --- maf-sandboxd(8) -----------------------------------------------------------

"$daemon" --help > "$tmp/dhelp" 2>&1
for opt in $(sed -n 's/^  \(-[a-zA-Z], \)\{0,1\} *\(--[a-z][a-z-]*\).*/\2/p' "$tmp/dhelp"); do
	if ! grep -e "^\*-" "$man8" | grep -q -F -e "*$opt*"; then
		echo "FAIL: $man8: maf-sandboxd option $opt has no entry (want a line \"*$opt* ...\")"
		fail=1
	fi
done

# --- maf-sandbox(1) ------------------------------------------------------------

"$cli" --help > "$tmp/chelp" 2>&1
# The commands: the lines of the "Commands:" block.
sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' "$tmp/chelp" > "$tmp/commands"
if [ ! -s "$tmp/commands" ]; then
	echo "FAIL: no commands in the output of $cli --help"
	exit 1
fi
# Each "## NAME" subsection of the page: NAME must be a command.
for sub in $(sed -n 's/^## //p' "$man1"); do
	if ! grep -qx -- "$sub" "$tmp/commands"; then
		echo "FAIL: $man1: subsection \"## $sub\" names no command of maf-sandbox --help"
		fail=1
	fi
done
while read -r cmd; do
	# The page's subsection of cmd: from "## cmd" to the next heading.
	awk -v cmd="$cmd" '
		$0 == "## " cmd { on = 1; next }
		/^#/ { on = 0 }
		on
	' "$man1" > "$tmp/section"
	if [ ! -s "$tmp/section" ]; then
		echo "FAIL: $man1: command $cmd has no subsection (want a line \"## $cmd\")"
		fail=1
		continue
	fi
	# The command's own help, before the common options: every option it
	# names is in the subsection, and each of its option list ("  --opt" or
	# "  -x, --opt") has an entry there (a line "*--opt* ..." or
	# "*-x*, *--opt* ...").
	"$cli" "$cmd" --help 2>&1 | sed '/^Options (before or after the command):/,$d' > "$tmp/cmdhelp"
	for opt in $(grep -o -- '--[a-z][a-z-]*' "$tmp/cmdhelp" | sort -u); do
		if ! grep -q -e "\*$opt\*" "$tmp/section"; then
			echo "FAIL: $man1: option $opt of \"maf-sandbox $cmd\" is not in its subsection (want \"*$opt*\")"
			fail=1
		fi
	done
	for opt in $(sed -n 's/^  \(-[a-zA-Z], \)\{0,1\}\(--[a-z][a-z-]*\).*/\2/p' "$tmp/cmdhelp"); do
		if ! grep -e "^\*-" "$tmp/section" | grep -q -F -e "*$opt*"; then
			echo "FAIL: $man1: option $opt of \"maf-sandbox $cmd\" has no entry in its subsection (want a line \"*$opt* ...\")"
			fail=1
		fi
	done
done < "$tmp/commands"
# The global options and the exit statuses.
sed -n '/^Options (before or after the command):/,$p' "$tmp/chelp" > "$tmp/global"
for opt in $(sed -n 's/^  \(-[a-zA-Z], \)\{0,1\}\(--[a-z][a-z-]*\).*/\2/p' "$tmp/global"); do
	if ! grep -e "^\*-" "$man1" | grep -q -F -e "*$opt*"; then
		echo "FAIL: $man1: global option $opt has no entry (want a line \"*$opt* ...\")"
		fail=1
	fi
done
for code in $(sed -n '/^Exit status:/,$s/^  \([0-9][0-9]*\)  .*/\1/p' "$tmp/chelp"); do
	if ! grep -qx -e "\*$code\*" "$man1"; then
		echo "FAIL: $man1: exit status $code is not documented (want a line \"*$code*\")"
		fail=1
	fi
done

if [ "$fail" -eq 0 ]; then
	echo "ok: $(wc -l < "$tmp/keys") configuration keys, $(wc -l < "$tmp/commands") commands documented"
fi
exit "$fail"
