#!/bin/sh
# tests/fuzz/run.sh [SECONDS] — build the egress proxy's libFuzzer target
# (fuzz_proxy_head.c with daemon/egress-proxy/rules.c and proto/egress_rule.c)
# with clang, ASan and UBSan, and run it for SECONDS (default 60) on a copy
# of tests/fuzz/corpus. Exits non-zero if the fuzzer finds a crash; the
# input is kept as $FUZZ_OUT/crash-* (FUZZ_OUT defaults to a fresh
# directory under /tmp). New inputs go to $FUZZ_OUT/corpus, never into the
# source tree. Extra arguments after SECONDS go to libFuzzer (-jobs=4
# -workers=4 ...; each job then runs for SECONDS, logging to $FUZZ_OUT).
set -eu

secs=${1:-60}
[ $# -gt 0 ] && shift
case $secs in
''|*[!0-9]*) echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2; exit 2 ;;
esac

src=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_OUT:-$(mktemp -d /tmp/msb-fuzz-XXXXXX)}
cc=${CLANG:-clang}
mkdir -p "$out/corpus"

"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$src/proto" -I"$src/daemon/egress-proxy" \
	"$src/tests/fuzz/fuzz_proxy_head.c" \
	"$src/daemon/egress-proxy/rules.c" \
	"$src/proto/egress_rule.c" \
	-o "$out/fuzz_proxy_head"

# Tokens the parsers care about.
cat > "$out/proxy.dict" <<'DICT'
"CONNECT"
"GET"
" HTTP/1.1"
" HTTP/1.0"
"\x0d\x0a"
"\x0d\x0a\x0d\x0a"
":443"
":65535"
"*."
"["
"]:"
"::"
"::ffff:"
"64:ff9b::"
"2002:"
"fd00:ec2::254"
"127.0.0.1"
"0x"
"/8"
"/128"
"://"
DICT

echo "fuzzing for ${secs}s in $out" >&2
status=0
# From $out: with -jobs, libFuzzer writes fuzz-N.log to the current directory.
cd "$out"
"$out/fuzz_proxy_head" -max_total_time="$secs" -dict="$out/proxy.dict" \
	-artifact_prefix="$out/" -print_final_stats=1 "$@" \
	"$out/corpus" "$src/tests/fuzz/corpus" || status=$?
if [ "$status" -ne 0 ]; then
	echo "fuzzer failed (status $status); inputs: $(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null | tr '\n' ' ')" >&2
	exit "$status"
fi
echo "no crash in ${secs}s; corpus: $out/corpus ($(ls "$out/corpus" | wc -l) inputs)" >&2
