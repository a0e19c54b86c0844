#!/bin/sh
# run.sh VENV [unittest args...] — the maf-sandbox backend's tests, in a virtual environment
# of their own: VENV is made (once, and again when requirements-test.txt changes) with a
# Python >= 3.12 (maf-sandbox's floor; $MSB_PYTHON, else python3.12/3.13 on PATH, else the
# newest pyenv 3.12+), gets exactly the pinned packages of requirements-test.txt (--no-deps),
# then this tree's maf-sandbox-client and maf-sandbox-daemon as pip installs them.
# run.sh VENV --script FILE [args...]: the same venv, then FILE (with args) run by its Python
# instead of the tests (tests/bench/pybench.py: the 'pybench' test).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
venv=$1
shift
script=
if [ "${1:-}" = "--script" ]; then
	script=$(realpath "$2")
	shift 2
fi

usable() {
	"$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
}

find_python() {
	if [ -n "${MSB_PYTHON:-}" ]; then echo "$MSB_PYTHON"; return; fi
	# On PATH (a pyenv shim answers only when its version is selected: usable() asks it).
	for p in python3.13 python3.12 python3; do
		if command -v "$p" >/dev/null 2>&1 && usable "$p"; then command -v "$p"; return; fi
	done
	for p in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-4]*/bin/python3 2>/dev/null \
			| sort -V -r); do
		if usable "$p"; then echo "$p"; return; fi
	done
	echo "run.sh: no Python >= 3.12 (maf-sandbox needs one): set MSB_PYTHON, or install" \
		"python3.12 (e.g. pyenv install 3.12)" >&2
	exit 1
}

stamp=$(cat "$here/requirements-test.txt" "$here/pyproject.toml" "$repo/contrib/python/pyproject.toml" \
	| sha256sum | cut -c1-16)
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.msb-stamp" 2>/dev/null)" != "$stamp" ]; then
	py=$(find_python)
	rm -rf "$venv"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
		-r "$here/requirements-test.txt"
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
flock -u 9
if [ -n "$script" ]; then
	exec "$venv/bin/python" -W "ignore::UserWarning:maf_sandbox" "$script" "$@"
fi
# From the tests' own directory, so that the packages imported are the installed ones (never
# the source tree's); the daemon fixture is the Python client's (contrib/python/tests).
cd "$here/tests"
PYTHONPATH="$repo/contrib/python/tests" exec "$venv/bin/python" \
	-W "ignore::UserWarning:maf_sandbox" -m unittest "$@"
