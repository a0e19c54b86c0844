#!/bin/bash
# check-completion.sh — meson test (suite packaging): the bash completion
# parses, completes what it should, and knows every command and option the
# built CLI has (so it cannot drift from it silently).
#
#   check-completion.sh COMPLETION_SCRIPT CLI
set -u

if [ $# -ne 2 ]; then
	echo "usage: $0 COMPLETION_SCRIPT CLI" >&2
	exit 2
fi
script=$1 cli=$2
# meson passes built programs relative to the build directory.
case $cli in /*) ;; *) cli=$PWD/$cli ;; esac
fail=0

if ! bash -n "$script"; then
	echo "FAIL: $script does not parse"
	exit 1
fi
# shellcheck source=/dev/null
. "$script"
func=$(complete -p maf-sandbox 2>/dev/null | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
if [ -z "$func" ]; then
	echo "FAIL: $script registers no completion function for maf-sandbox"
	exit 1
fi

# Completes LINE (the cursor at its end) as bash would, split at blanks;
# the candidates go to the global array reply, one per element.
complete_line()
{
	local line=$1
	read -r -a COMP_WORDS <<< "$line"
	[[ $line == *' ' ]] && COMP_WORDS+=('')
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMP_LINE=$line
	COMP_POINT=${#line}
	COMPREPLY=()
	"$func" maf-sandbox "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	reply=("${COMPREPLY[@]}")
}

# expect LINE WORD...: the candidates are exactly the WORDs (any order).
expect()
{
	local line=$1 got want
	shift
	complete_line "$line"
	got=$(printf '%s\n' "${reply[@]}" | sed '/^$/d' | sort | tr '\n' ' ')
	want=$(printf '%s\n' "$@" | sed '/^$/d' | sort | tr '\n' ' ')
	if [ "$got" != "$want" ]; then
		echo "FAIL: completing \"$line\": got [${got% }], want [${want% }]"
		fail=1
	fi
}

# expect_has LINE WORD...: every WORD is among the candidates.
expect_has()
{
	local line=$1 w c found
	shift
	complete_line "$line"
	for w; do
		found=0
		for c in "${reply[@]}"; do
			[ "$c" = "$w" ] && found=1 && break
		done
		if [ "$found" -eq 0 ]; then
			echo "FAIL: completing \"$line\": $w is not offered (got: ${reply[*]})"
			fail=1
		fi
	done
}

# --- behaviour ---------------------------------------------------------------
expect 'maf-sandbox ac' acquire
expect 'maf-sandbox -j st' stat status
expect 'maf-sandbox --socket /run/x.sock dispose' dispose dispose-scope
expect 'maf-sandbox reap --older-than 2' 24h
expect 'maf-sandbox rm -' -s --socket -j --json -t --timeout -h --help -V --version \
	-w --working-directory --cwd -r --recursive
expect 'maf-sandbox exec --sh' --sh
expect 'maf-sandbox exec SB ' --
expect 'maf-sandbox exec SB ls ' ''
expect 'maf-sandbox exec SB -- l' ''
expect 'maf-sandbox status ' ''

# Local files for put's LOCAL, get's LOCAL and --socket, in a directory of our own.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/msb-compl.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/local-file"
cd "$tmp" || exit 1
expect 'maf-sandbox put SB loc' local-file
expect 'maf-sandbox put SB local-file gue' ''
expect 'maf-sandbox get SB guest loc' local-file
expect 'maf-sandbox -w /wd get SB guest loc' local-file
expect 'maf-sandbox get -w /wd SB guest loc' local-file
expect 'maf-sandbox --socket loc' local-file
expect 'maf-sandbox acquire --spec loc' local-file
cd - > /dev/null || exit 1

# --- drift: every command and option of the built CLI is offered ------------
commands=$("$cli" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
if [ -z "$commands" ]; then
	echo "FAIL: no commands in the output of $cli --help"
	exit 1
fi
# shellcheck disable=SC2086
expect 'maf-sandbox ' $commands
for cmd in $commands; do
	# shellcheck disable=SC2046
	expect_has "maf-sandbox $cmd --" $("$cli" "$cmd" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
done

[ "$fail" -eq 0 ] && echo "ok: $(echo "$commands" | wc -w) commands and their options complete"
exit "$fail"
