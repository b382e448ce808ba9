#!/usr/bin/env bash
# compare/run.sh: herd-proxy beside nginx proxy_cache (+ proxy_cache_lock) and Varnish, on
# loopback, same origin, same cache size (256 MiB). Installs nginx, varnish and wrk from the
# Debian registry if missing (needs root), starts everything on 127.0.0.1:18080-18083 with the
# configs below, prints one line per measurement, and stops what it started.
#
#   bash crates/herd-proxy/compare/run.sh            # from the workspace root
#   DURATION=10s CONNECTIONS=50 bash crates/herd-proxy/compare/run.sh
#   SECTIONS=stampede ROUNDS=9 bash crates/herd-proxy/compare/run.sh   # one section, 9 rounds
#
# SECTIONS picks measurements (comma-separated: hit, stampede, death, memory; default all).
# ROUNDS repeats the stampede that many times, the proxies taking turns in each round, and
# ends with each proxy's minimum and median of the per-round p50 and p99 (default 1).
#
# Measurements (the issue's "Measured" list):
#   1. hit throughput and p99 latency, 1 KiB and 1 MiB bodies (wrk, warm cache);
#   2. cold-URL stampede: origin fetches for 500 concurrent clients, and how long after the
#      origin's answer each client has its body (p50/p99);
#   3. origin death mid-body: 20 clients over 1 s on a chunked URL whose origin dies at 40,000 of
#      100,000 bytes, HTTP/1.1 and HTTP/1.0: bodies truncated but delivered as complete;
#   4. memory per cached object: RSS growth after caching 20,000 objects of 1 KiB.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
SECTIONS=${SECTIONS:-hit,stampede,death,memory}
ROUNDS=${ROUNDS:-1}
section() { [[ ",$SECTIONS," == *",$1,"* ]]; }
WORK=$(mktemp -d /tmp/herd-compare.XXXXXX)
chmod 755 "$WORK"  # nginx workers and the varnish child drop root and must reach their dirs
ORIGIN=127.0.0.1:18080
declare -A PROXIES=([nginx]=127.0.0.1:18081 [varnish]=127.0.0.1:18082 [herd]=127.0.0.1:18083)
ORDER=(nginx varnish herd)
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -f "$WORK/varnish/_.pid" ]; then kill "$(cat "$WORK/varnish/_.pid")" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

need=()
command -v nginx >/dev/null || need+=(nginx)
command -v varnishd >/dev/null || need+=(varnish)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian starts the packaged services on install; they listen on 80/6081, not our ports.

cargo build --release -q -p herd-proxy --bin herd-proxy --example compare
TOOL=target/release/examples/compare

"$TOOL" origin "$ORIGIN" 2>/dev/null & PIDS+=($!)

mkdir -p "$WORK/nginx-cache" "$WORK/nginx-tmp"
cat > "$WORK/nginx.conf" <<NGINX
worker_processes 2;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx-tmp/body;
    proxy_temp_path $WORK/nginx-tmp/proxy;
    fastcgi_temp_path $WORK/nginx-tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx-tmp/uwsgi;
    scgi_temp_path $WORK/nginx-tmp/scgi;
    proxy_cache_path $WORK/nginx-cache levels=1:2 keys_zone=herd:64m max_size=256m inactive=1h use_temp_path=off;
    upstream origin { server $ORIGIN; keepalive 64; }
    server {
        listen ${PROXIES[nginx]};
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_cache herd;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 30s;
            proxy_cache_key \$host\$request_uri;
        }
    }
}
NGINX
nginx -c "$WORK/nginx.conf" -p "$WORK" & PIDS+=($!); NGINX_PID=$!

varnishd -F -a "${PROXIES[varnish]}" -b "$ORIGIN" -s malloc,256m -n "$WORK/varnish" \
    >"$WORK/varnish.log" 2>&1 & PIDS+=($!); VARNISH_PID=$!

target/release/herd-proxy --listen "${PROXIES[herd]}" --upstream "$ORIGIN" \
    --capacity 268435456 --max-object 67108864 --log error & PIDS+=($!); HERD_PID=$!

# Wait for every port (bounded).
for addr in "$ORIGIN" "${PROXIES[@]}"; do
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "http://$addr/size/1" && break
        sleep 0.1
    done
done

pid_of() {  # the PIDs whose memory counts for a proxy
    case $1 in
        nginx) echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')" ;;
        varnish) echo "$VARNISH_PID $(pgrep -P "$VARNISH_PID" | tr '\n' ' ')" ;;
        herd) echo "$HERD_PID" ;;
    esac
}
rss_kib() { local total=0; for p in $(pid_of "$1"); do total=$((total + $(ps -o rss= -p "$p" 2>/dev/null || echo 0))); done; echo "$total"; }

if section hit; then
echo "## hit throughput (wrk -t2 -c$CONNECTIONS -d$DURATION, warm cache)"
for size in 1024 1048576; do
    for name in "${ORDER[@]}"; do
        url="http://${PROXIES[$name]}/size/$size"
        curl -s -o /dev/null "$url"; curl -s -o /dev/null "$url"
        out=$(wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "$url")
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
        echo "hit size=$size proxy=$name rps=$rps p99=$p99 $errs"
    done
done
fi

if section stampede; then
echo "## cold-URL stampede (500 concurrent clients, origin answers after 1 s; $ROUNDS round(s))"
declare -A P50S=() P99S=()
for round in $(seq 1 "$ROUNDS"); do
    for name in "${ORDER[@]}"; do
        before=$(curl -s "http://$ORIGIN/stats" | awk '$1 == "cold" {print $2}')
        line=$("$TOOL" stampede "${PROXIES[$name]}" "$ORIGIN" 500)
        after=$(curl -s "http://$ORIGIN/stats" | awk '$1 == "cold" {print $2}')
        echo "stampede round=$round proxy=$name origin_fetches=$(( ${after:-0} - ${before:-0} )) $line"
        P50S[$name]+="$(sed -n 's/.*after_origin_ms_p50=\([0-9.]*\).*/\1/p' <<<"$line") "
        P99S[$name]+="$(sed -n 's/.*after_origin_ms_p99=\([0-9.]*\).*/\1/p' <<<"$line") "
    done
done
stat() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {printf "min=%s median=%s", v[1], v[int((NR+1)/2)]}'; }
for name in "${ORDER[@]}"; do
    echo "stampede-summary proxy=$name rounds=$ROUNDS p50_ms: $(stat <<<"${P50S[$name]}") p99_ms: $(stat <<<"${P99S[$name]}")"
done
fi

if section death; then
echo "## origin death mid-body (20 clients over 1 s; chunked origin dies at 40,000 of 100,000 bytes)"
for version in "" "--http10"; do
    for name in "${ORDER[@]}"; do
        echo "death proxy=$name ${version:---http11} $("$TOOL" die "${PROXIES[$name]}" 20 $version)"
    done
done
for name in "${ORDER[@]}"; do
    url="http://${PROXIES[$name]}/die/curl-$name"
    # The first client starts the fetch, the second joins 0.4 s into the body, the third comes after.
    curls=()
    for who in first joined; do
        ( code=0; size=$(curl -s --http1.0 -o /dev/null -w '%{http_code} %{size_download}' "$url") || code=$?
          echo "death-curl proxy=$name client=$who curl_http1.0_exit=$code status_bytes=$size" ) & curls+=($!)
        sleep 0.4
    done
    wait "${curls[@]}"
    code=0
    size=$(curl -s --http1.0 -o /dev/null -w '%{http_code} %{size_download}' "$url") || code=$?
    echo "death-curl proxy=$name client=next curl_http1.0_exit=$code status_bytes=$size"
done
fi

if section memory; then
echo "## memory per cached object (20,000 objects of 1 KiB)"
for name in "${ORDER[@]}"; do
    before=$(rss_kib "$name")
    line=$("$TOOL" fill "${PROXIES[$name]}" 20000)
    after=$(rss_kib "$name")
    disk=""
    [ "$name" = nginx ] && disk=" nginx_cache_dir_kib=$(du -sk "$WORK/nginx-cache" | cut -f1)"
    echo "memory proxy=$name $line rss_growth_kib=$((after - before)) bytes_per_object=$(( (after - before) * 1024 / 20000 ))$disk"
done
fi
