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
#   - the example configuration sets nothing, and its values are the
#     defaults: its "# KEY = VALUE  # comment" lines, uncommented, are read by
#     `maf-sandboxd --check-config` as it reads an empty file (a runtime path
#     of a user other than root is compared with the page's "Default: VALUE
#     when run by root" instead);
#   - every option `maf-sandboxd --help` lists has an entry in
#     maf-sandboxd(8): a line starting "*-x*, *--opt*" when the help gives
#     the short form -x, else "*--opt*";
#   - every command of `maf-sandbox --help` has a "## COMMAND" subsection in
#     maf-sandbox(1); every long option `maf-sandbox COMMAND --help` names
#     (its own part, before the common options) is named in that subsection,
#     and each one it lists has an entry there; every subsection names a
#     command; every global option `maf-sandbox --help` lists has an entry,
#     and every exit status it lists a line "*N*";
#   - the commands of each page's EXAMPLE(S) section are in ``` blocks
#     (scdoc runs tab-indented lines together into one paragraph);
#   - no file of the tree names a path beside the checkout ("shared" + "/",
#     where the design notes once were).
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

# has_entry FILE WANT: a line of FILE starts with WANT, followed by nothing,
# a blank or a comma (an entry "*-x*, *--opt* _ARG_").
has_entry()
{
	awk -v want="$2" '
		index($0, want) == 1 && substr($0, length(want) + 1, 1) ~ /^([ \t,]|)$/ { found = 1 }
		END { exit !found }
	' "$1"
}

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

# The example's values are the defaults: every "# KEY = VALUE  # comment" line,
# uncommented, makes a file the daemon must read as it reads an empty one. A
# default below $XDG_RUNTIME_DIR (a user other than root) is compared with the
# page's "Default: VALUE when run by root" instead.
if grep -n -v -e '^#' -e '^[[:space:]]*$' "$example"; then
	echo "FAIL: $example: the lines above are not comments (the example sets nothing)"
	fail=1
fi
sed -n 's/^# \([a-z_][a-z0-9_]*\.[a-z0-9_.]* =.*\)$/\1/p' "$example" > "$tmp/example-all.conf"
: > "$tmp/example.conf"
while IFS= read -r line; do
	key=${line%% *}
	dflt=$(sed -n "s|^$(printf '%s' "$key" | sed 's/\./\\./g') ||p" "$tmp/keys")
	case $dflt in
	"$tmp/xdg/"*)
		# The value as the daemon would read it: up to a " #" comment, trimmed.
		value=$(printf '%s\n' "${line#*=}" | sed 's/[[:space:]]#.*//; s/^[[:space:]]*//; s/[[:space:]]*$//')
		if ! grep -q -F -e "Default: $value when run by root" "$conf5"; then
			echo "FAIL: $example: $key = $value, but $conf5 does not give it as the default when run by root"
			fail=1
		fi
		;;
	*)
		printf '%s\n' "$line" >> "$tmp/example.conf"
		;;
	esac
done < "$tmp/example-all.conf"
if ! XDG_RUNTIME_DIR=$tmp/xdg "$daemon" --check-config -f "$tmp/example.conf" > "$tmp/example.out" 2> "$tmp/err"; then
	echo "FAIL: $example: the daemon does not take its settings, uncommented:"
	cat "$tmp/err"
	fail=1
else
	sed -n 's/^\([a-z_][a-z0-9_]*\.[a-z0-9_.]*\) = \(.*\)$/\1 \2/p' "$tmp/example.out" > "$tmp/example.keys"
	awk -v example="$example" '
		FILENAME == ARGV[1] { dflt[$1] = substr($0, length($1) + 2); next }
		{
			v = substr($0, length($1) + 2)
			if (($1 in dflt) && dflt[$1] != v) {
				printf "FAIL: %s: %s is \"%s\" there, but the daemon'"'"'s default is \"%s\" (a value that is not the default goes in an \"e.g.\" comment)\n", example, $1, v, dflt[$1]
				bad = 1
			}
		}
		END { exit bad }
	' "$tmp/keys" "$tmp/example.keys" || fail=1
fi

# --- maf-sandboxd(8) -----------------------------------------------------------

"$daemon" --help > "$tmp/dhelp" 2>&1
# "  -x, --opt ..." or "      --opt ...": the page's entry is "*-x*, *--opt*"
# or "*--opt*", at the start of a line.
sed -n 's/^  \(-[a-zA-Z]\)\{0,1\}\(, \)\{0,1\} *\(--[a-z][a-z-]*\).*/\1 \3/p' "$tmp/dhelp" > "$tmp/dopts"
if [ ! -s "$tmp/dopts" ]; then
	echo "FAIL: no options in the output of $daemon --help"
	fail=1
fi
while read -r short long; do
	if [ -z "$long" ]; then
		long=$short
		want="*$long*"
	else
		want="*$short*, *$long*"
	fi
	if ! has_entry "$man8" "$want"; then
		echo "FAIL: $man8: maf-sandboxd option $want has no entry (want a line \"$want ...\")"
		fail=1
	fi
done < "$tmp/dopts"

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

# --- EXAMPLES sections render as examples ------------------------------------

# scdoc fills tab-indented lines into one paragraph, so each command of an
# EXAMPLE(S) section must sit in a ``` block of its own (rendered line by
# line): a tab-indented line there outside such a block is a run-on example.
# A line of a block is never a section heading (the configuration example's
# first line is a "# " comment).
for page in "$conf5" "$man1" "$man8"; do
	awk -v page="$page" '
		/^```/ { fence = !fence; blocks += ex; next }
		fence { next }
		/^# / { ex = ($0 ~ /^# EXAMPLES?$/); seen = seen || ex; next }
		ex && /^\t/ {
			printf "FAIL: %s:%d: an example outside a ``` block renders as one run-on paragraph: %s\n", page, NR, $0
			bad = 1
		}
		END {
			if (seen && !blocks) {
				printf "FAIL: %s: its EXAMPLES section has no ``` block\n", page
				bad = 1
			}
			exit bad
		}
	' "$page" || fail=1
done

# --- no reference outside the repository ---------------------------------------

# The project's documents live in the tree (README.md, doc/, proto/): none
# points to a directory beside the checkout, which a clone does not have.
# (The pattern is built so that this file does not match it.)
root=$(cd "$(dirname "$0")/.." && pwd)
outside='shared''/'
if grep -rnI --exclude-dir=.git --exclude-dir='build*' --exclude-dir='obj-*' \
	--exclude-dir=__pycache__ --exclude-dir=.pybuild -e "$outside" "$root" > "$tmp/outside"; then
	echo "FAIL: these lines name a path outside the repository ($outside); the document belongs in doc/:"
	cat "$tmp/outside"
	fail=1
fi

if [ "$fail" -eq 0 ]; then
	echo "ok: $(wc -l < "$tmp/keys") configuration keys, $(wc -l < "$tmp/commands") commands documented"
fi
exit "$fail"
