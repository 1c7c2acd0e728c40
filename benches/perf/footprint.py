#!/usr/bin/env python3
"""The code each target of the load benchmark touches per request, from callgrind dumps.

Usage: footprint.py [--functions N] DIR NAME...   (`--help` says more)

DIR holds the dumps of `load profile --dump-instr ...`; each dump covers one target's requests, and
the code a request runs is the same from one request to the next, so the distinct 64-byte lines
executed in a dump are the code one request touches. Prints KB per target and area, then what each
`validate` and `mutate` touches beyond the `parse` of the same request type.
"""
import argparse
import re
from collections import Counter

AREAS = [
    ("k8s_openapi", "k8s-openapi"), ("ha_guard::core", "ha_guard core"), ("tracing", "tracing"),
    ("ha_guard::server", "ha_guard server"), ("rustls|ring", "tls"), ("hyper|http::|axum|tower", "http stack"),
    ("tokio|mio", "tokio"), ("kube_core", "kube-core"), ("serde_json::value", "serde_json Value"), ("serde", "serde"),
    ("mi_|_mi_", "allocator"), ("prometheus", "metrics"), ("hashbrown|HashMap|hash", "hashing"),
    ("btree|BTree", "btree"), ("fmt", "fmt"), ("mem|str", "mem/str"),
]


def lines_of(path):
    """{(object, address >> 6): function} of every instruction with a cost in the dump."""
    names = {"fn": {}, "ob": {}}
    current = {"fn": "?", "ob": "?"}
    touched = {}
    addr = 0
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = raw.rstrip("\n")
        if not line:
            continue
        if line[0].isalpha():
            key, _, value = line.partition("=")
            kind = {"fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}.get(key)
            if kind:
                m = re.match(r"\((\d+)\)(?: (.*))?", value)
                if m:
                    if m[2] is not None:
                        names[kind][m[1]] = m[2]
                    value = names[kind].get(m[1], "?")
                if key in ("fn", "ob"):
                    current[key] = value
            continue
        # A cost line: the instruction position first (absolute, relative or the same).
        pos = line.split()[0]
        if pos.startswith("0x"):
            addr = int(pos, 16)
        elif pos[0] in "+-":
            addr += int(pos)
        elif pos != "*":
            continue
        touched[(current["ob"], addr >> 6)] = current["fn"]
    return touched


def area(function):
    return next((name for pattern, name in AREAS if re.search(pattern, function)), "other")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", metavar="DIR", help="the dumps of `load profile --dump-instr`")
    parser.add_argument("names", metavar="NAME", nargs="+",
                        help="a name per dump, in order (callgrind.out.1, .2, ...); `-` skips one")
    parser.add_argument("--functions", type=int, default=0, metavar="N",
                        help="also list the N functions with the most code beyond `parse`")
    args = parser.parse_args()
    directory, names, functions = args.directory, args.names, args.functions
    dumps = {n: lines_of(f"{directory}/callgrind.out.{i}") for i, n in enumerate(names, 1) if n != "-"}
    kb = lambda n: n * 64 / 1024
    by_area = {n: Counter(area(f) for f in d.values()) for n, d in dumps.items()}
    areas = sorted(set().union(*by_area.values()), key=lambda a: -max(c[a] for c in by_area.values()))
    print("| KB of code touched | " + " | ".join(dumps) + " |")
    print("|---|" + "---:|" * len(dumps))
    print("| **all** | " + " | ".join(f"**{kb(len(d)):.0f}**" for d in dumps.values()) + " |")
    for a in areas:
        print(f"| {a} | " + " | ".join(f"{kb(c[a]):.1f}" for c in by_area.values()) + " |")
    for name, lines in dumps.items():
        kind, _, target = name.rpartition("-")
        base = dumps.get(f"{kind}-parse")
        if target not in ("validate", "mutate") or base is None:
            continue
        extra = Counter(area(f) for k, f in lines.items() if k not in base)
        print(f"\n{name} beyond {kind}-parse: {kb(sum(extra.values())):.0f} KB: "
              + ", ".join(f"{a} {kb(n):.1f}" for a, n in extra.most_common()))
        if functions:
            # Where that code is: generic code of the HTTP stack counts too, as the production
            # router's instances of it are not the ones the bench's `parse` listener runs.
            by_function = Counter(f for k, f in lines.items() if k not in base)
            print(f"\n| {name}: function | KB beyond {kind}-parse |\n|---|---:|")
            for f, n in by_function.most_common(functions):
                print(f"| `{f}` | {kb(n):.2f} |")


if __name__ == "__main__":
    main()
