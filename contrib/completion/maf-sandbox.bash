# bash completion for maf-sandbox(1), the client of maf-sandboxd.
# Installed as bash-completion/completions/maf-sandbox; works with or without
# the bash-completion package (its helpers are used when they are there).

_maf_sandbox_commands='describe status engine acquire ls dispose dispose-scope reap put get stat rm reclaim exec events'
_maf_sandbox_global_opts='-s --socket -j --json -t --timeout -h --help -V --version'
# Options that take a value (global and command options alike).
_maf_sandbox_arg_opts='-s --socket -t --timeout --scope --thread --agent --call --kind --image --spec --sandbox --older-than -w --working-directory --cwd --max-bytes --env --sh'

# The options of a command, besides the global ones.
_maf_sandbox_cmd_opts()
{
	case $1 in
	acquire) echo '--scope --thread --agent --call --kind --image --spec --scope-call' ;;
	ls) echo '--scope --thread' ;;
	dispose) echo '--scope --thread --agent --call --kind --sandbox' ;;
	dispose-scope) echo '--scope --thread' ;;
	reap) echo '--older-than --scope' ;;
	put | stat) echo '-w --working-directory --cwd' ;;
	get) echo '-w --working-directory --cwd --max-bytes' ;;
	rm) echo '-w --working-directory --cwd -r --recursive' ;;
	reclaim) echo '-w --working-directory --cwd' ;;
	exec) echo '-w --working-directory --cwd --env --sh' ;;
	events) echo '-f --follow --scope' ;;
	esac
}

_maf_sandbox_takes_arg()
{
	case " $_maf_sandbox_arg_opts " in
	*" $1 "*) return 0 ;;
	esac
	return 1
}

# Local file names.
_maf_sandbox_files()
{
	if declare -F _filedir >/dev/null 2>&1; then
		_filedir
	else
		compopt -o filenames 2>/dev/null
		local IFS=$'\n'
		COMPREPLY+=($(compgen -f -- "$1"))
	fi
}

_maf_sandbox()
{
	local cur prev cword i w cmd= cmd_at=0 nops=0 dashdash=0
	local -a words
	COMPREPLY=()
	words=("${COMP_WORDS[@]}")
	cword=$COMP_CWORD
	cur=${words[cword]}
	prev=
	[ "$cword" -gt 0 ] && prev=${words[cword - 1]}

	# --opt=VALUE in one word: complete the value.
	if [[ $cur == --*=* ]]; then
		prev=${cur%%=*}
		cur=${cur#*=}
	elif [[ $prev == = && $cword -gt 1 ]]; then
		# bash splits at '=' (COMP_WORDBREAKS): "--socket" "=" "VALUE".
		prev=${words[cword - 2]}
	elif [[ $cur == = ]]; then
		cur=
	fi

	# The command, and how many operands come before the word completed.
	for ((i = 1; i < cword; i++)); do
		w=${words[i]}
		if ((dashdash)); then
			((nops++))
			continue
		fi
		if [[ $w == -- && -n $cmd ]]; then
			dashdash=1
			continue
		fi
		# "--opt" "=" "VALUE", as bash splits --opt=VALUE.
		if [[ $w == = ]]; then
			((i++))
			continue
		fi
		[[ ${words[i + 1]} == = ]] && continue
		if [[ $w == -* ]]; then
			if [[ $w != *=* ]] && _maf_sandbox_takes_arg "$w"; then
				((i++))
			fi
			continue
		fi
		if [[ -z $cmd ]]; then
			cmd=$w
			cmd_at=$i
		else
			((nops++))
		fi
	done

	# After "exec SANDBOX --": the guest's command line, nothing to offer.
	((dashdash)) && return 0

	# The value of an option.
	case $prev in
	-s | --socket | --spec)
		[[ $prev == --spec ]] && COMPREPLY+=($(compgen -W '-' -- "$cur"))
		_maf_sandbox_files "$cur"
		return 0
		;;
	--older-than)
		COMPREPLY=($(compgen -W '1h 6h 24h 7d 30d' -- "$cur"))
		return 0
		;;
	-t | --timeout | --scope | --thread | --agent | --call | --kind | --image | --sandbox | \
	-w | --working-directory | --cwd | --max-bytes | --env | --sh)
		return 0
		;;
	esac

	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$_maf_sandbox_global_opts $(_maf_sandbox_cmd_opts "$cmd")" -- "$cur"))
		[[ $cmd == exec && $nops -ge 1 ]] && COMPREPLY+=($(compgen -W '--' -- "$cur"))
		return 0
	fi

	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$_maf_sandbox_commands" -- "$cur"))
		return 0
	fi

	# Operands: SANDBOX first (an id: nothing to offer), then per command.
	case $cmd in
	put)
		# put SANDBOX LOCAL GUEST
		if ((nops == 1)); then
			COMPREPLY+=($(compgen -W '-' -- "$cur"))
			_maf_sandbox_files "$cur"
		fi
		;;
	get)
		# get SANDBOX GUEST [LOCAL|-]
		if ((nops == 2)); then
			COMPREPLY+=($(compgen -W '-' -- "$cur"))
			_maf_sandbox_files "$cur"
		fi
		;;
	exec)
		((nops == 1)) && COMPREPLY=($(compgen -W '--' -- "$cur"))
		;;
	esac
	return 0
}

complete -F _maf_sandbox maf-sandbox
