#!/bin/bash
# check-completion.sh — meson test (suite packaging): the bash completion
# parses, completes what it should, and knows the built CLI's commands and
# options exactly (so it cannot drift from it silently): the commands of
# `CLI --help`; for each command, the options its help lists (with the global
# ones, and the spellings an "(also --x)" names) are what "CMD -" offers, and
# those with an ARG in the help, and only those, are in _maf_sandbox_arg_opts
# and have their next word completed as their value.
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

# A stand-in CLI on PATH for the completion's own `maf-sandbox ls` (SANDBOX
# operands complete the names it lists; -s/--socket is passed on).
stub=$(mktemp -d "${TMPDIR:-/tmp}/msb-compl-stub.XXXXXX") || exit 1
cat > "$stub/maf-sandbox" <<'STUB'
#!/bin/sh
case " $* " in
*" --socket /other.sock "*) printf 'NAME ID\nmaf-sandbox-docker-000000000000 000000000000\n' ;;
*" ls "*) printf 'NAME  ID  STATE\nmaf-sandbox-docker-aaaaaaaaaaaa  0123456789ab  running\nmaf-sandbox-docker-abcdefabcdef  ba9876543210  exited\n' ;;
esac
STUB
chmod +x "$stub/maf-sandbox"
trap 'rm -rf "$stub"' EXIT
PATH=$stub:$PATH

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
# Options end at the first operand (the CLI's getopt stops there).
expect 'maf-sandbox rm SB -' ''
expect 'maf-sandbox rm -r SB guest -' ''
expect 'maf-sandbox reclaim -t 5 SB ' ''
expect 'maf-sandbox -t 5 ac' acquire
expect 'maf-sandbox exec SB -' --
expect 'maf-sandbox exec -t 5 SB ' --
expect 'maf-sandbox exec --env A=B SB ' --
expect 'maf-sandbox exec -- SB ' --
expect 'maf-sandbox exec --sh true SB ' ''
expect 'maf-sandbox exec --sh true SB -' ''
expect 'maf-sandbox exec SB -- ls -' ''
expect 'maf-sandbox -- st' stat status
expect 'maf-sandbox exec ' maf-sandbox-docker-aaaaaaaaaaaa maf-sandbox-docker-abcdefabcdef
expect 'maf-sandbox get maf-sandbox-docker-ab' maf-sandbox-docker-abcdefabcdef
expect 'maf-sandbox rm -r maf' maf-sandbox-docker-aaaaaaaaaaaa maf-sandbox-docker-abcdefabcdef
expect 'maf-sandbox dispose --sandbox maf-sandbox-docker-a' maf-sandbox-docker-aaaaaaaaaaaa \
	maf-sandbox-docker-abcdefabcdef
expect 'maf-sandbox --socket /other.sock stat ' maf-sandbox-docker-000000000000
expect 'maf-sandbox stat -s /other.sock ' maf-sandbox-docker-000000000000
expect 'maf-sandbox ls ' ''
expect 'maf-sandbox acquire ' ''

# Local files for put's LOCAL, get's LOCAL and --socket, in a directory of our own.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/msb-compl.XXXXXX") || exit 1
trap 'rm -rf "$tmp" "$stub"' EXIT
: > "$tmp/local-file"
cd "$tmp" || exit 1
expect 'maf-sandbox put SB loc' local-file
expect 'maf-sandbox put SB ' - local-file
expect 'maf-sandbox put SB -' -
expect 'maf-sandbox --timeout 5 put SB ' - local-file
expect 'maf-sandbox get SB guest -' -
expect 'maf-sandbox get --max-bytes 5 SB guest ' - local-file
expect 'maf-sandbox get SB ' ''
expect 'maf-sandbox rm SB --socket ' ''
expect 'maf-sandbox acquire --spec ' - local-file
expect 'maf-sandbox put SB local-file gue' ''
expect 'maf-sandbox get SB guest loc' local-file
expect 'maf-sandbox -w /wd get SB guest loc' local-file
expect 'maf-sandbox get -w /wd SB guest loc' local-file
expect 'maf-sandbox --socket loc' local-file
expect 'maf-sandbox acquire --spec loc' local-file
cd - > /dev/null || exit 1

# --- drift: the built CLI's commands and options, exactly ------------------
commands=$("$cli" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
if [ -z "$commands" ]; then
	echo "FAIL: no commands in the output of $cli --help"
	exit 1
fi
# shellcheck disable=SC2086
expect 'maf-sandbox ' $commands

# help_opts: the options a help text (stdin) lists, one "NAME 1|0" line each
# (1: it takes a value). An option line is "  -x, --name ARG  text" (short
# form, ARG and the text may be absent); "(also --alias)" in its text names
# another spelling of it.
help_opts()
{
	awk '
		/^Exit status:/ { exit }
		/^  -/ {
			line = substr($0, 3)
			n = index(line, "  ")
			head = n ? substr(line, 1, n - 1) : line
			m = split(head, part, " ")
			val = 0
			names = ""
			for (k = 1; k <= m; k++) {
				p = part[k]
				sub(/,$/, "", p)
				if (p ~ /^-/)
					names = names " " p
				else
					val = 1
			}
			m = split(names, part, " ")
			for (k = 1; k <= m; k++)
				print part[k], val
			inopt = 1
		}
		!/^  -/ && !/^      / { inopt = 0 }
		inopt {
			t = $0
			while (match(t, /\(also --[a-z][a-z-]*/)) {
				print substr(t, RSTART + 6, RLENGTH - 6), val
				t = substr(t, RSTART + RLENGTH)
			}
		}
	' | sort -u
}

"$cli" --help | sed -n '/^Options (before or after the command):/,$p' | help_opts > "$tmp/global"
if [ ! -s "$tmp/global" ]; then
	echo "FAIL: no options in the output of $cli --help"
	exit 1
fi
# shellcheck disable=SC2046
expect 'maf-sandbox -' $(cut -d' ' -f1 "$tmp/global")
: > "$tmp/all"
for cmd in $commands; do
	"$cli" "$cmd" --help | help_opts > "$tmp/opts"
	cat "$tmp/opts" >> "$tmp/all"
	# Offered exactly: the command's options and the global ones.
	# shellcheck disable=SC2046
	expect "maf-sandbox $cmd -" $(cut -d' ' -f1 "$tmp/opts")
	while read -r opt val; do
		if _maf_sandbox_takes_arg "$opt"; then has=1; else has=0; fi
		if [ "$has" != "$val" ]; then
			echo "FAIL: \"maf-sandbox $cmd --help\": $opt $([ "$val" = 1 ] && echo takes || echo takes no) value, but _maf_sandbox_arg_opts says otherwise"
			fail=1
		fi
		# After "OPT X", options are offered only if X was OPT's value
		# (a flag leaves X the first operand, where options end).
		complete_line "maf-sandbox $cmd $opt X -"
		case " ${reply[*]} " in
		*" --help "*) has=1 ;;
		*) has=0 ;;
		esac
		if [ "$has" != "$val" ]; then
			echo "FAIL: completing \"maf-sandbox $cmd $opt X -\": $opt is completed as if it took $([ "$val" = 1 ] && echo no value || echo a value)"
			fail=1
		fi
	done < "$tmp/opts"
done
# No option of the list is stale.
# shellcheck disable=SC2154 # set by the completion script, sourced above
for opt in $_maf_sandbox_arg_opts; do
	if ! grep -q -x -F -e "$opt 1" "$tmp/all"; then
		echo "FAIL: _maf_sandbox_arg_opts names $opt, which no command takes with a value"
		fail=1
	fi
done

[ "$fail" -eq 0 ] && echo "ok: $(echo "$commands" | wc -w) commands and their options complete"
exit "$fail"
