#!/bin/sh
# run.sh VENV [unittest args...]
# run.sh VENV --script FILE [args...]
#
# The maf-sandbox backend's tests (or FILE, e.g. tests/bench/pybench.py), in a virtual
# environment of their own. VENV is made by this script (once, and again when
# requirements-test.txt, a pyproject.toml or the interpreter changes; a directory this script
# did not make is never removed) with a Python >= 3.12 and < 3.15 (maf-sandbox's range:
# $MSB_PYTHON, else python3.13/python3.12/python3 on PATH, else the newest pyenv 3.12-3.14). It
# gets exactly the pinned packages of requirements-test.txt (--no-deps, wheels only), then this
# tree's maf-sandbox-client and maf-sandbox-daemon as pip installs them. The tests run from
# their own directory, so the packages they import are the installed ones.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
venv=$(realpath -m "${1:?usage: run.sh VENV [unittest args... | --script FILE args...]}")
shift
export PYTHONDONTWRITEBYTECODE=1

usable() {
	"$1" -c 'import sys; sys.exit(not ((3, 12) <= sys.version_info[:2] < (3, 15)))' \
		>/dev/null 2>&1
}

find_python() {
	if [ -n "${MSB_PYTHON:-}" ]; then
		if usable "$MSB_PYTHON"; then echo "$MSB_PYTHON"; return; fi
		echo "run.sh: MSB_PYTHON=$MSB_PYTHON is not a Python from 3.12 to 3.14" >&2
		exit 1
	fi
	# On PATH (a pyenv shim answers only when its version is selected: usable() asks it).
	for p in python3.13 python3.12 python3; do
		if command -v "$p" >/dev/null 2>&1 && usable "$p"; then command -v "$p"; return; fi
	done
	for p in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-4]*/bin/python3 2>/dev/null \
			| sort -V -r); do
		if usable "$p"; then echo "$p"; return; fi
	done
	echo "run.sh: no Python from 3.12 to 3.14 (maf-sandbox needs one): set MSB_PYTHON, or" \
		"install python3.12 (e.g. pyenv install 3.12)" >&2
	exit 1
}

py=$(find_python)
stamp=$( { cat "$here/requirements-test.txt" "$here/pyproject.toml" \
	"$repo/contrib/python/pyproject.toml"; realpath "$py"; "$py" -VV; } | sha256sum | cut -c1-16)
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.msb-stamp" 2>/dev/null)" != "$stamp" ]; then
	if [ -e "$venv" ] && [ ! -f "$venv/.msb-stamp" ]; then
		echo "run.sh: $venv exists and was not made by run.sh: not replacing it" >&2
		exit 1
	fi
	rm -rf "$venv"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
		--only-binary=:all: -r "$here/requirements-test.txt"
	echo "$stamp" > "$venv/.msb-stamp"
fi
# This tree's packages, as pip installs them (no build isolation: setuptools is pinned above),
# built from a copy: setuptools leaves build/ and *.egg-info where it builds.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$repo/contrib/python" "$src/client"
cp -r "$here" "$src/backend"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
	--force-reinstall "$src/client" "$src/backend" >/dev/null
rm -rf "$src"
trap - EXIT
# Shared while the tests run: another run.sh may use the environment too, never rebuild it
# under them.
flock -s 9
# The daemon fixture is the Python client's (contrib/python/tests).
export PYTHONPATH="$repo/contrib/python/tests"
if [ "${1:-}" = --script ]; then
	script=$(realpath "${2:?run.sh: --script needs a file}")
	shift 2
	cd "$(dirname "$script")"
	exec "$venv/bin/python" -W "ignore::UserWarning:maf_sandbox" "$script" "$@"
fi
cd "$here/tests"
exec "$venv/bin/python" -W "ignore::UserWarning:maf_sandbox" -m unittest "$@"
