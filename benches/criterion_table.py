#!/usr/bin/env python3
"""Turns criterion's saved estimates into the markdown tables of docs/benchmarks.md.

Why: the docs quote ratios measured side by side in one run; this reads exactly what the last
`cargo bench` run saved (target/criterion/<group>/<bench>/new/{benchmark,estimates}.json), so a
table can be regenerated without copying numbers by hand.

usage: benches/criterion_table.py GROUP [GROUP...] [--ref FUNCTION_ID] [--bytes] [--split]
  GROUP   criterion group id, e.g. "get_hit/100K" (one table column per group)
  --ref   the row the ratio column divides by (default: first row)
  --bytes report GiB/s of throughput instead of ns per element
  --split function ids are DESIGN/PARAM: one row per DESIGN, one column per PARAM (one GROUP)
"""
import json
import os
import sys


# herd first, then the floor, then the peers (the order of benches::stores::all_stores).
PREFERRED_ORDER = [
    "ttl-lru",
    "floor: sharded RwLock<HashMap>",
    "quick_cache",
    "moka::sync",
    "moka::future",
    "mini-moka",
    "pingora-memory-cache",
    "lru+Mutex",
    "lruttl-like",
    "stream-cache",
    "broadcast",
    "copy-per-reader",
]


def order_key(name):
    return PREFERRED_ORDER.index(name) if name in PREFERRED_ORDER else len(PREFERRED_ORDER)


def load(root, group):
    rows = {}
    for dirpath, _dirs, files in os.walk(root):
        if not dirpath.endswith(os.path.join("new")) or "benchmark.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        if bench["group_id"] != group:
            continue
        with open(os.path.join(dirpath, "estimates.json")) as f:
            est = json.load(f)
        tp = bench.get("throughput") or {}
        elements = tp.get("Elements") or tp.get("Bytes") or 1
        rows[bench["function_id"]] = (est["median"]["point_estimate"], elements)
    return rows


def main():
    args = sys.argv[1:]
    ref = None
    as_bytes = False
    split = False
    groups = []
    while args:
        a = args.pop(0)
        if a == "--ref":
            ref = args.pop(0)
        elif a == "--bytes":
            as_bytes = True
        elif a == "--split":
            split = True
        else:
            groups.append(a)
    if not groups:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    root = os.environ.get("CRITERION_DIR", "target/criterion")
    data = [load(root, g) for g in groups]
    if split:
        print_split(data[0], groups[0], as_bytes)
        return
    names = [n for n in PREFERRED_ORDER if any(n in d for d in data)]
    for d in data:
        for n in sorted(d):
            if n not in names:
                names.append(n)
    ref = ref or names[0]
    unit = "GiB/s" if as_bytes else "ns/op"
    header = "| |" + "".join(f" {g} ({unit}) | x {ref} |" for g in groups)
    print(header)
    print("|---|" + "---:|---:|" * len(groups))
    for n in names:
        cells = []
        for d in data:
            if n not in d or ref not in d:
                cells.append(" - | - |")
                continue
            ns, el = d[n]
            rns, rel = d[ref]
            if as_bytes:
                value = el / ns * 1e9 / 2**30
                ratio = (rns / rel) / (ns / el) if ns else 0
                cells.append(f" {value:.2f} | {ratio:.2f} |")
            else:
                per = ns / el
                ratio = per / (rns / rel)
                cells.append(f" {per:,.1f} | {ratio:.2f} |")
        print(f"| {n} |" + "".join(cells))


def print_split(rows, group, as_bytes):
    designs, params = [], []
    # Ids without a "/" are not DESIGN/PARAM (e.g. left over from an older version of the bench).
    rows = {f: v for f, v in rows.items() if "/" in f}
    for fid in sorted(rows, key=lambda f: (order_key(f.rsplit("/", 1)[0]), f)):
        design, param = fid.rsplit("/", 1)
        if design not in designs:
            designs.append(design)
        if param not in params:
            params.append(param)
    params.sort(key=lambda p: (len(p), p))
    unit = "GiB/s" if as_bytes else "ns/op"
    print(f"| {group} ({unit}) |" + "".join(f" {p} |" for p in params))
    print("|---|" + "---:|" * len(params))
    for d in designs:
        cells = []
        for p in params:
            if f"{d}/{p}" not in rows:
                cells.append(" - |")
                continue
            ns, el = rows[f"{d}/{p}"]
            value = el / ns * 1e9 / 2**30 if as_bytes else ns / el
            cells.append(f" {value:,.2f} |")
        print(f"| {d} |" + "".join(cells))


if __name__ == "__main__":
    main()
