#!/bin/sh
# tests/fuzz/run.sh [SECONDS] [TARGET...]
# tests/fuzz/run.sh --total SECONDS [TARGET...]
#
# Builds the libFuzzer targets (tests/fuzz/fuzz_TARGET.c) with clang,
# -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all, and runs
# each, one after the other, for SECONDS (default 60; with --total, the
# SECONDS are shared out evenly) on a copy of its seed corpus
# tests/fuzz/corpus/TARGET, with tests/fuzz/TARGET.dict when there is one.
# No TARGET: all of them. Exits non-zero if any target crashed, broke an
# invariant, leaked, timed out (-timeout=10) or ran out of memory
# (-rss_limit_mb=2048): its reproducer is kept and its path printed with
# libFuzzer's report. One summary line per target either way.
#
# The code under test is built by meson, in a build dir of its own
# configured with CC=clang, b_sanitize=address,undefined and
# -fsanitize=fuzzer-no-link (so meson supplies msb-build.h, the source
# lists and the pkg-config flags, exactly as for the daemon); only its
# static libraries are built. Each target is then linked against them.
#
# Environment: FUZZ_OUT (default: a fresh /tmp/msb-fuzz-XXXXXX) holds the
# build, the binaries, each target's working corpus, log and artifacts;
# FUZZ_BUILD (default FUZZ_OUT/build) may point at a build dir to reuse;
# CLANG (default clang); FUZZ_FLAGS, extra libFuzzer flags for every run
# (e.g. -jobs=2 -workers=2). New inputs stay under FUZZ_OUT, never in the
# source tree: copy the useful ones into the corpus by hand. FUZZ_OUT/results
# gets one verdict per target, "TARGET ok" or "TARGET failed".
set -eu

ALL_TARGETS="proxy_head frame params exec_demux tarball stat_header jsonfast hijack_head"
DEFAULT_SECONDS=60
TIMEOUT_S=10
RSS_LIMIT_MB=2048
# Longest input per target (libFuzzer's -max_len).
max_len() {
	case $1 in
	tarball) echo 32768 ;;
	params) echo 16384 ;;
	frame) echo 8192 ;;
	hijack_head) echo 20000 ;;
	*) echo 4096 ;;
	esac
}

usage() {
	echo "usage: $0 [SECONDS] [TARGET...] | $0 --total SECONDS [TARGET...]" >&2
	echo "targets: $ALL_TARGETS" >&2
	exit 2
}

total=
secs=$DEFAULT_SECONDS
if [ "${1:-}" = --total ]; then
	[ $# -ge 2 ] || usage
	total=$2
	shift 2
	case $total in ''|*[!0-9]*) usage ;; esac
elif [ $# -gt 0 ]; then
	case $1 in
	''|*[!0-9]*) ;;
	*) secs=$1; shift ;;
	esac
fi
targets=${*:-$ALL_TARGETS}
for t in $targets; do
	case " $ALL_TARGETS " in *" $t "*) ;; *) echo "$0: no target '$t'" >&2; usage ;; esac
done
if [ -n "$total" ]; then
	n=$(echo $targets | wc -w)
	secs=$((total / n))
	[ "$secs" -ge 1 ] || secs=1
fi

src=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_OUT:-$(mktemp -d /tmp/msb-fuzz-XXXXXX)}
bld=${FUZZ_BUILD:-$out/build}
cc=${CLANG:-clang}
mkdir -p "$out"
out=$(cd "$out" && pwd)

command -v "$cc" >/dev/null 2>&1 || { echo "$0: $cc not found (Debian: clang)" >&2; exit 2; }
rt=$("$cc" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
if [ "$(uname -m)" = x86_64 ] && [ ! -f "$rt" ]; then
	echo "$0: clang has no libFuzzer runtime (Debian: libclang-rt-14-dev)" >&2
	exit 2
fi
# Symbolized stacks: ASan looks for llvm-symbolizer in PATH.
if ! command -v llvm-symbolizer >/dev/null 2>&1; then
	for s in /usr/lib/llvm-*/bin/llvm-symbolizer; do
		[ -x "$s" ] && export ASAN_SYMBOLIZER_PATH="$s"
	done
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# ---- build ------------------------------------------------------------------
libs="egress-proxy/libproxy_rules.a daemon/libmsbdaemon.a domain/libmsbdomain.a engine/libmsbengine.a util/libmsbutil.a proto/libmsbproto.a"
echo "building the code under test with $cc in $bld" >&2
if [ ! -f "$bld/build.ninja" ]; then
	CC="$cc" meson setup "$bld" "$src" -Dbuildtype=debugoptimized -Dwerror=false \
		-Dtests=disabled -Dman=disabled -Dsystemd=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all" \
		>"$out/meson-setup.log" 2>&1 || { cat "$out/meson-setup.log" >&2; exit 2; }
fi
# shellcheck disable=SC2086
ninja -C "$bld" $libs >"$out/ninja.log" 2>&1 || { cat "$out/ninja.log" >&2; exit 2; }
deps=$(pkg-config --cflags --libs jansson libevent libarchive libcurl) ||
	{ echo "$0: pkg-config misses a library the daemon needs" >&2; exit 2; }
for t in $targets; do
	# shellcheck disable=SC2086
	"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-I"$bld" -I"$src/tests/fuzz" -I"$src/proto" -I"$src/util" -I"$src/engine" \
		-I"$src/domain" -I"$src/domain/files" -I"$src/domain/egress" -I"$src/domain/exec" \
		-I"$src/daemon" -I"$src/egress-proxy" \
		"$src/tests/fuzz/fuzz_$t.c" \
		"$bld/egress-proxy/libproxy_rules.a" "$bld/daemon/libmsbdaemon.a" \
		"$bld/domain/libmsbdomain.a" "$bld/engine/libmsbengine.a" "$bld/util/libmsbutil.a" \
		"$bld/proto/libmsbproto.a" \
		$deps -lm -lpthread -o "$out/fuzz_$t" 2>"$out/fuzz_$t.build.log" ||
		{ cat "$out/fuzz_$t.build.log" >&2; exit 2; }
done

# ---- run --------------------------------------------------------------------
# The last "#N ... cov: ... ft: ... corp: ..." line and the final stats.
summarize() {
	log=$1
	awk '
		/^#[0-9]+/ && / cov: / {
			for (i = 1; i <= NF; i++) {
				if ($i == "cov:") cov = $(i + 1)
				if ($i == "ft:") ft = $(i + 1)
				if ($i == "corp:") corp = $(i + 1)
			}
		}
		/^stat::number_of_executed_units:/ { execs = $2 }
		/^stat::peak_rss_mb:/ { rss = $2 }
		END {
			split(corp, c, "/")
			printf "%s execs, cov %s, ft %s, corpus %s inputs (%s), peak rss %s MB",
				execs == "" ? "?" : execs, cov == "" ? "?" : cov, ft == "" ? "?" : ft,
				c[1] == "" ? "?" : c[1], c[2] == "" ? "?" : c[2], rss == "" ? "?" : rss
		}' "$log"
}

# libFuzzer's report: from the first line that says what went wrong.
report() {
	awk '
		!on && (/==[0-9]+==ERROR/ || /runtime error:/ || /invariant broken/ ||
			/ALARM: working on the last Unit/ || /out-of-memory/ || /deadly signal/ ||
			/ERROR: libFuzzer/) { on = 1 }
		on { print; if (++n >= 120) exit }' "$1"
}

# One verdict per target, "TARGET ok" or "TARGET failed", for CI's count.
status=0
summary=
: >"$out/results"
for t in $targets; do
	dir=$out/$t
	rm -rf "$dir"
	mkdir -p "$dir/corpus"
	seeds=0
	if [ -d "$src/tests/fuzz/corpus/$t" ]; then
		cp "$src/tests/fuzz/corpus/$t"/* "$dir/corpus/" 2>/dev/null || true
		seeds=$(ls "$dir/corpus" | wc -l)
	fi
	dict=
	[ -f "$src/tests/fuzz/$t.dict" ] && dict="-dict=$src/tests/fuzz/$t.dict"
	echo "fuzzing $t for ${secs}s ($seeds seeds; log $dir/fuzz.log)" >&2
	rc=0
	# shellcheck disable=SC2086
	(cd "$dir" && "$out/fuzz_$t" -max_total_time="$secs" -timeout="$TIMEOUT_S" \
		-rss_limit_mb="$RSS_LIMIT_MB" -max_len="$(max_len "$t")" $dict \
		-artifact_prefix="$dir/" -print_final_stats=1 ${FUZZ_FLAGS:-} "$dir/corpus") \
		>"$dir/fuzz.log" 2>&1 || rc=$?
	line="$t: $(summarize "$dir/fuzz.log")"
	if [ "$rc" -eq 0 ]; then
		line="$line — ok"
		echo "$t ok" >>"$out/results"
	else
		status=1
		echo "$t failed" >>"$out/results"
		art=$(ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* 2>/dev/null | head -n 1 || true)
		line="$line — FAILED (exit $rc), reproducer: ${art:-none written}"
		{
			echo "==== $t failed (exit $rc); reproducer: ${art:-none}"
			[ -n "$art" ] && echo "==== replay: $out/fuzz_$t $art"
			report "$dir/fuzz.log"
			echo "==== end of $t's report (whole log: $dir/fuzz.log)"
		} >&2
	fi
	echo "$line"
	summary="$summary$line
"
done
echo "---- fuzz summary (${secs}s per target, in $out)"
printf '%s' "$summary"
exit "$status"
