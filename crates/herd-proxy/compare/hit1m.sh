#!/usr/bin/env bash
# compare/hit1m.sh: 1 MiB hit throughput of two herd-proxy builds (or flag sets), interleaved
# A B A B A B on the same origin and port: requests/s (min and max of the runs per side), the
# proxy's CPU time per response (user + system, from /proc: less sensitive than requests/s to
# other jobs on a shared machine), and the write syscalls per response of each (strace -c over
# 200 requests, when strace is installed).
#
#   A="/tmp/before/herd-proxy" B="target/release/herd-proxy" bash crates/herd-proxy/compare/hit1m.sh
#   B_FLAGS="--max-header-bytes 2097152" ...   # extra flags for one side
#
# Needs wrk, curl, and the compare example (`cargo build --release -p herd-proxy --example compare`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
A=${A:?binary A} B=${B:?binary B}
ORIGIN_TOOL=${ORIGIN_TOOL:-target/release/examples/compare}
RUNS=${RUNS:-3} DURATION=${DURATION:-5s} CONNECTIONS=${CONNECTIONS:-50} SIZE=${SIZE:-1048576}
ORIGIN=127.0.0.1:18180 PROXY=127.0.0.1:18183
"$ORIGIN_TOOL" origin "$ORIGIN" 2>/dev/null & ORIGIN_PID=$!
PROXY_PID=
trap 'kill $ORIGIN_PID ${PROXY_PID:-} 2>/dev/null || true' EXIT
start() {  # binary, extra flags
    "$1" --listen "$PROXY" --upstream "$ORIGIN" --capacity 268435456 --max-object 67108864 \
        --log error $2 & PROXY_PID=$!
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://$PROXY/size/$SIZE" && break; sleep 0.1; done
    curl -s -o /dev/null "http://$PROXY/size/$SIZE"
}
stop() { kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true; PROXY_PID=; }
declare -A RPS=([A]="" [B]="")
for i in $(seq 1 "$RUNS"); do
    for side in A B; do
        bin=${!side}; flags_var="${side}_FLAGS"; start "$bin" "${!flags_var:-}"
        cpu0=$(awk '{print $14 + $15}' "/proc/$PROXY_PID/stat")
        out=$(wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "http://$PROXY/size/$SIZE")
        cpu1=$(awk '{print $14 + $15}' "/proc/$PROXY_PID/stat")
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        n=$(awk '/requests in/ {print $1}' <<<"$out")
        us=$(awk -v t=$((cpu1 - cpu0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.0f", t / hz * 1e6 / n}')
        echo "run $i side $side rps=$rps p99=$p99 requests=$n cpu_us_per_response=$us"
        RPS[$side]="${RPS[$side]} $rps"
        stop
    done
done
for side in A B; do
    echo "side $side: min $(tr ' ' '\n' <<<"${RPS[$side]}" | grep . | sort -g | head -1) max $(tr ' ' '\n' <<<"${RPS[$side]}" | grep . | sort -g | tail -1)"
done
if command -v strace >/dev/null; then
    for side in A B; do
        bin=${!side}; flags_var="${side}_FLAGS"; start "$bin" "${!flags_var:-}"
        strace -f -c -e trace=write,writev,sendmsg,sendto -p "$PROXY_PID" -o "/tmp/hit1m-strace-$side" &
        ST=$!; sleep 1
        for _ in $(seq 1 200); do curl -s -o /dev/null "http://$PROXY/size/$SIZE"; done
        kill -INT $ST; wait $ST 2>/dev/null || true
        echo "side $side write syscalls for 200 responses:"; grep -E "write|send|total" "/tmp/hit1m-strace-$side" || true
        stop
    done
fi
