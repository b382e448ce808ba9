#!/usr/bin/env bash
# The speed cells of issue 17's goals, side by side: ttl-lru's default (the adaptive policy since
# issue 17), its sampled LRU (`Admission::Always`, the default before) and quick_cache, each cell run by `hitprobe` (one store per process) for ROUNDS interleaved rounds,
# printed as a markdown table of minimum (median) ns per operation and each store's minimum
# over quick_cache's. This VM's timings swing 2-3x between minutes, which is why the stores take
# turns within every round and the table quotes ratios (docs/benchmarks.md, "Speed against
# quick_cache").
#
# usage: benches/goals.sh [ROUNDS=6]   (from the repository root; builds hitprobe first)
set -euo pipefail

rounds=${1:-6}
cargo build --release -q -p benches --bin hitprobe
probe=target/release/hitprobe
stores=(ttl-lru ttl-lru-lru quick_cache)
# cell name, then hitprobe's entries, ops and mode
cells=(
    "get-hit, 10K entries|10000 3000000 get"
    "get-hit, 1M entries|1000000 3000000 get"
    "insert at capacity, 10K|10000 3000000 insert"
    "insert at capacity, 1M|1000000 1000000 insert"
    "read-through fill at capacity, 100K|100000 1000000 fill"
)

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; r++)); do
    for i in "${!cells[@]}"; do
        read -r entries ops mode <<<"${cells[$i]#*|}"
        for s in "${stores[@]}"; do
            ns=$("$probe" "$s" "$entries" "$ops" "$mode" | tail -1 | sed 's/.*=//')
            echo "$i $s $ns" >>"$results"
        done
    done
    echo "round $r of $rounds done" >&2
done

echo "| | ttl-lru (default, adaptive) | ttl-lru sampled LRU | quick_cache | default / quick_cache | sampled LRU / quick_cache |"
echo "|---|---:|---:|---:|---:|---:|"
for i in "${!cells[@]}"; do
    awk -v cell="$i" -v name="${cells[$i]%%|*}" '
        $1 == cell { v[$2] = v[$2] " " $3 }
        function stat(s,    a, n, i, j, t) {
            n = split(v[s], a, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            min[s] = a[1]; med[s] = a[int((n + 1) / 2)]
        }
        END {
            stat("ttl-lru"); stat("ttl-lru-lru"); stat("quick_cache")
            printf "| %s | %s (%s) | %s (%s) | %s (%s) | %.2f | %.2f |\n", name,
                min["ttl-lru"], med["ttl-lru"], min["ttl-lru-lru"], med["ttl-lru-lru"],
                min["quick_cache"], med["quick_cache"],
                min["ttl-lru"] / min["quick_cache"], min["ttl-lru-lru"] / min["quick_cache"]
        }' "$results"
done
