#!/usr/bin/env bash
# compare/varnish-cpu.sh: Varnish's requests/s and CPU time per response (user + system of
# varnishd and its children, from /proc) for warm hits of one size, measured the way
# compare/hit1m.sh measures herd-proxy, so the two CPU costs can be set side by side.
#
#   bash crates/herd-proxy/compare/varnish-cpu.sh          # SIZE=1048576 RUNS=3 DURATION=5s
#
# Needs varnishd, wrk, curl and the compare example (`cargo build --release -p herd-proxy
# --example compare`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
ORIGIN_TOOL=${ORIGIN_TOOL:-target/release/examples/compare}
RUNS=${RUNS:-3} DURATION=${DURATION:-5s} CONNECTIONS=${CONNECTIONS:-50} SIZE=${SIZE:-1048576}
ORIGIN=127.0.0.1:18180 V=127.0.0.1:18182
WORK=$(mktemp -d /tmp/herd-varnish.XXXXXX); chmod 755 "$WORK"
"$ORIGIN_TOOL" origin "$ORIGIN" 2>/dev/null & ORIGIN_PID=$!
varnishd -F -a "$V" -b "$ORIGIN" -s malloc,256m -n "$WORK/v" >"$WORK/log" 2>&1 & VARNISH_PID=$!
trap 'kill $VARNISH_PID $ORIGIN_PID 2>/dev/null || true; sleep 0.5; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do curl -s -o /dev/null "http://$V/size/$SIZE" && break; sleep 0.1; done
curl -s -o /dev/null "http://$V/size/$SIZE"
cpu() {
    local t=0
    for p in $VARNISH_PID $(pgrep -P "$VARNISH_PID"); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}
for i in $(seq 1 "$RUNS"); do
    c0=$(cpu); out=$(wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "http://$V/size/$SIZE"); c1=$(cpu)
    n=$(awk '/requests in/ {print $1}' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    us=$(awk -v t=$((c1 - c0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.0f", t / hz * 1e6 / n}')
    echo "varnish run $i rps=$rps requests=$n cpu_us_per_response=$us"
done
