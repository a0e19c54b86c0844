# bash completion for maf-sandbox(1), the client of maf-sandboxd.
# Installed as bash-completion/completions/maf-sandbox; works with or without
# the bash-completion package (its helpers are used when they are there).

_maf_sandbox_commands='describe status engine acquire ls dispose dispose-scope reap put get stat dir rm reclaim exec events'
_maf_sandbox_global_opts='-s --socket -j --json -t --timeout -h --help -V --version'
# Options that take a value (global and command options alike).
_maf_sandbox_arg_opts='-s --socket -t --timeout --scope --thread --agent --call --kind --image --spec --sandbox --older-than -w --working-directory --cwd --max-bytes --env --sh --mode'

# The options of a command, besides the global ones.
_maf_sandbox_cmd_opts()
{
	case $1 in
	acquire) echo '--scope --thread --agent --call --kind --image --spec --scope-call' ;;
	ls) echo '--scope --thread' ;;
	dispose) echo '--scope --thread --agent --call --kind --sandbox' ;;
	dispose-scope) echo '--scope --thread' ;;
	reap) echo '--older-than --scope --all --dry-run' ;;
	put) echo '-w --working-directory --cwd --mode' ;;
	stat | dir) echo '-w --working-directory --cwd' ;;
	get) echo '-w --working-directory --cwd --max-bytes' ;;
	rm) echo '-w --working-directory --cwd -r --recursive' ;;
	reclaim) echo '-w --working-directory --cwd' ;;
	exec) echo '-w --working-directory --cwd --env --sh -i --interactive --no-stdin' ;;
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

# The names of the sandboxes the daemon lists for this user (the first
# column of `ls`, after its header), for a SANDBOX operand or --sandbox; on
# the socket the command line names, if any. Nothing when the daemon cannot
# be asked (within 2 s).
_maf_sandbox_names()
{
	local cur=$1 sock=$2 cli=${COMP_WORDS[0]:-maf-sandbox}
	local -a args=(--timeout 2)
	[[ -n $sock ]] && args+=(--socket "$sock")
	COMPREPLY+=($(compgen -W "$("$cli" "${args[@]}" ls 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
}

# How the CLI reads its arguments (getopt_long with "+"): options, then the
# command, then the command's options (the global ones too) up to its first
# operand or "--"; every word after that is an operand. exec's second operand
# is "--", and the words after it are the guest's argv.
_maf_sandbox()
{
	local cur cword i w opt unit cmd='' nops=0 optend=0 argv=0 sh=0 valopt='' sock=''
	local -a words
	COMPREPLY=()
	words=("${COMP_WORDS[@]}")
	cword=$COMP_CWORD
	cur=${words[cword]}
	# bash splits --opt=VALUE at '=' (COMP_WORDBREAKS): "--opt" "=" "VALUE".
	[[ $cur == = ]] && cur=

	for ((i = 1; i < cword; i++)); do
		w=${words[i]}
		((argv)) && continue
		if [[ -n $cmd ]] && ((optend || nops > 0)) || [[ $w != -?* ]] || ((optend)); then
			# The command, or an operand.
			if [[ -z $cmd ]]; then
				cmd=$w
				optend=0
				unit=cmd
			else
				[[ $cmd == exec && $nops -eq 1 && $w == -- ]] && argv=1
				((nops++))
				unit=operand
			fi
		elif [[ $w == -- ]]; then
			# The end of the options (getopt takes it).
			optend=1
			continue
		else
			opt=$w
			[[ $opt == --sh || $opt == --sh=* ]] && sh=1
			[[ $opt == --socket=* ]] && sock=${opt#*=}
			[[ ($opt == -s || $opt == --socket) && ${words[i + 1]} != = ]] && sock=${words[i + 1]}
			[[ ($opt == -s || $opt == --socket) && ${words[i + 1]} == = ]] && sock=${words[i + 2]}
			if [[ ${words[i + 1]} == = ]]; then
				# "--opt" "=" "VALUE"
				((i += 2))
			elif [[ $opt != *=* ]] && _maf_sandbox_takes_arg "$opt"; then
				((i++))
			else
				continue
			fi
			if ((i >= cword)); then
				valopt=$opt
				break
			fi
			unit=value
		fi
		# A word bash split at '=' goes on: "NAME" "=" "VALUE" is one word.
		while [[ ${words[i + 1]} == = ]]; do
			((i += 2))
			if ((i >= cword)); then
				# The word completed is the rest of this one.
				case $unit in
				operand) ((nops--)) ;;
				value) valopt=$opt ;;
				esac
				break 2
			fi
		done
	done

	# After "exec SANDBOX --": the guest's command line, nothing to offer.
	((argv)) && return 0

	# Options are read here: before the command, or before its first operand.
	local opts_here=0
	((!optend && nops == 0)) && opts_here=1
	if [[ -z $valopt && $opts_here -eq 1 && $cur == --*=* ]]; then
		valopt=${cur%%=*}
		cur=${cur#*=}
	fi

	# The value of an option.
	if [[ -n $valopt ]]; then
		case $valopt in
		-s | --socket)
			_maf_sandbox_files "$cur"
			;;
		--spec)
			COMPREPLY+=($(compgen -W '-' -- "$cur"))
			_maf_sandbox_files "$cur"
			;;
		--older-than)
			COMPREPLY=($(compgen -W '1h 6h 24h 7d 30d' -- "$cur"))
			;;
		--sandbox)
			_maf_sandbox_names "$cur" "$sock"
			;;
		esac
		return 0
	fi

	if ((opts_here)) && [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$_maf_sandbox_global_opts $(_maf_sandbox_cmd_opts "$cmd")" -- "$cur"))
		return 0
	fi

	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$_maf_sandbox_commands" -- "$cur"))
		return 0
	fi

	# Operands: nops is the index of the one completed. SANDBOX comes first
	# (the names ls shows), then per command.
	case $cmd in
	put | get | stat | dir | rm | reclaim | exec)
		((nops == 0)) && _maf_sandbox_names "$cur" "$sock"
		;;
	esac
	case $cmd in
	put)
		# put SANDBOX LOCAL GUEST; LOCAL may be - (stdin).
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
		# exec SANDBOX -- ARGV...; with --sh, SANDBOX alone.
		((nops == 1 && !sh)) && COMPREPLY=($(compgen -W '--' -- "$cur"))
		;;
	esac
	return 0
}

complete -F _maf_sandbox maf-sandbox
