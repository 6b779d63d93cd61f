# bash completion for dtctl; `make install` puts it in share/bash-completion/completions/dtctl
# (or: source scripts/dtctl-completion.bash).
#
# The words come from dtctl itself, so they never drift from --help: `dtctl __complete` prints
# the commands and global options of the command table, `dtctl __complete CMD` the
# subcommands of CMD's usage lines and every option of its option table.  Job and sweep ids
# come from `dtctl ps --all --json` and `dtctl sweep list --json`: read-only commands that
# never start dtsched (docs/json.md), so without a running head they print nothing here.

# ids of kind $2 (j: jobs, s: sweeps) from dtctl $1 (the same -c as the command line)
_dtctl_ids()
{
	local exe=$1 kind=$2
	shift 2
	if [[ $kind == j ]]; then
		"$exe" "$@" ps --all --json 2>/dev/null
	else
		"$exe" "$@" sweep list --json 2>/dev/null
	fi | sed -n "s/^ *\"id\": *\"\\($kind-[0-9A-Za-z_-]*\\)\".*/\\1/p"
}

_dtctl()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local exe=${COMP_WORDS[0]} cmd= sub= words i w
	local -a cluster=()

	# the command, its first argument, and -c FILE wherever it is
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case $w in
		-c | --cluster)
			cluster=(-c "${COMP_WORDS[i + 1]}")
			((i++))
			continue
			;;
		--cluster=*)
			cluster=(-c "${w#--cluster=}")
			continue
			;;
		--) break ;;
		-*) continue ;;
		esac
		if [[ -z $cmd ]]; then
			cmd=$w
		elif [[ -z $sub ]]; then
			sub=$w
		fi
	done
	COMPREPLY=()
	case $prev in
	-c | --cluster | --password-file | -o | --output | --from | -w | --workdir)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	esac
	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$("$exe" __complete 2>/dev/null)" -- "$cur"))
		return
	fi
	if [[ $cmd == help ]]; then
		words=$("$exe" __complete 2>/dev/null | grep -v '^-')
		COMPREPLY=($(compgen -W "$words --man" -- "$cur"))
		return
	fi
	words=$("$exe" __complete "$cmd" 2>/dev/null) || return
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(grep '^-' <<<"$words")" -- "$cur"))
		return
	fi
	case $cmd in
	show | cancel | logs)
		COMPREPLY=($(compgen -W "$(_dtctl_ids "$exe" j "${cluster[@]}")" -- "$cur"))
		;;
	sweep)
		if [[ -z $sub ]]; then
			COMPREPLY=($(compgen -W "$(grep -v '^-' <<<"$words")" -- "$cur")
				$(compgen -f -X '!*.y*ml' -- "$cur"))
		elif [[ $sub != list ]]; then
			COMPREPLY=($(compgen -W "$(_dtctl_ids "$exe" s "${cluster[@]}")" -- "$cur"))
		fi
		;;
	*)
		if [[ -z $sub ]] && grep -qv '^-' <<<"$words"; then
			COMPREPLY=($(compgen -W "$(grep -v '^-' <<<"$words")" -- "$cur"))
		else
			COMPREPLY=($(compgen -f -- "$cur"))
		fi
		;;
	esac
}

complete -F _dtctl dtctl
