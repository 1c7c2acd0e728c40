#!/usr/bin/env python3
"""Splits a perf profile of the load benchmark's server into CPU microseconds per request.

Usage: breakdown.py BENCH_STDERR PERF_SCRIPT_TEXT TITLE  (benches/perf.sh runs it)

BENCH_STDERR holds the bench's `window TYPE TARGET START END rps R cpu_us C` lines (the measured
interval of each saturation run, wall-clock seconds); PERF_SCRIPT_TEXT is `perf script -F
tid,time,ip,sym` of `perf record -k CLOCK_REALTIME --call-graph dwarf`. Each sample of a window goes
to the first category whose pattern matches a frame of its stack; a category's share of the
window's samples times the bench's own CPU per request (from /proc) is its µs per request.
"""
import re
import sys
from collections import Counter, defaultdict

# (row, pattern on any frame): the first that matches takes the sample. Handler parts first, then
# the baselines' handlers, then the transport.
CATEGORIES = [
    ("rules and decision (`judge`)", r"ha_guard::core::judge::judge"),
    ("subject: typed decode of the object", r"review::subject::subject_with_spec|review::subject::subject_of|review::subject::subject_and_spec"),
    ("request: parse (objects kept as text)", r"review::wire::parse_counted|review::wire::parse$"),
    ("request: kube-rs decode (decode baseline)", r"load::kube_decode|AdmissionReview<.*>.*Deserialize"),
    ("unchanged-UPDATE check", r"review::unchanged::changes_nothing_read"),
    ("answer: warnings, annotations, patch", r"review::respond::respond$|with_patch|Plan.*patch"),
    ("log line (tracing)", r"tracing_core::event::Event::dispatch"),
    ("metrics", r"prometheus_client"),
    ("answer: serialize the review", r"Serialize for kube_core::admission::AdmissionReview"),
    ("handler: the rest (value count, permit, review)", r"ha_guard::server::answer|ha_guard::server::review::respond::review|answer_within_budget|load::parse_handler|load::decode_handler|load::transport_handler"),
    ("send: TLS encrypt + TCP write", r"poll_flush|poll_write"),
    ("receive: TCP read + TLS decrypt", r"poll_read"),
]
OTHER = "other: hyper, axum, tokio, allocator, kernel scheduling"
WAKEUP = r"sock_def_readable"


def windows(path):
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"window (\S+) (\S+) ([\d.]+) ([\d.]+) rps ([\d.]+) cpu_us ([\d.]+)", line)
        if m:
            out.append((m[1], m[2], float(m[3]), float(m[4]), float(m[5]), float(m[6])))
    return out


def samples(path):
    """(time, frames leaf first) per sample."""
    text = open(path, encoding="utf-8", errors="replace").read()
    for block in text.split("\n\n"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        if not lines:
            continue
        m = re.search(r"([\d]+\.[\d]+):", lines[0])
        if not m:
            continue
        frames = []
        for l in lines[1:]:
            parts = l.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else "?")
        yield float(m[1]), frames


def main():
    bench_err, perf_txt, title = sys.argv[1], sys.argv[2], sys.argv[3]
    wins = windows(bench_err)
    if not wins:
        sys.exit(f"{bench_err}: no `window` lines (is the load bench older than benches/perf.sh?)")
    compiled = [(name, re.compile(rx)) for name, rx in CATEGORIES]
    wake = re.compile(WAKEUP)
    counts = defaultdict(Counter)
    totals = Counter()
    wakeups = Counter()
    ordered = sorted(samples(perf_txt))
    for t, frames in ordered:
        for i, (typ, target, start, end, _, _) in enumerate(wins):
            if start <= t <= end:
                key = i
                break
        else:
            continue
        totals[key] += 1
        for name, rx in compiled:
            if any(rx.search(f) for f in frames):
                counts[key][name] += 1
                if name.startswith("send") and any(wake.search(f) for f in frames):
                    wakeups[key] += 1
                break
        else:
            counts[key][OTHER] += 1

    print(f"CPU per request by where it goes: `{title}`. µs per request = the category's share of the")
    print("window's perf samples × the server's CPU per request the bench measured from /proc in that window.\n")
    by_type = defaultdict(list)
    for i, w in enumerate(wins):
        by_type[w[0]].append(i)
    for typ, idx in by_type.items():
        print(f"#### {typ}\n")
        print("| µs per request | " + " | ".join(f"`{wins[i][1]}`" for i in idx) + " |")
        print("|---|" + "---:|" * len(idx))
        print("| **server CPU (from /proc)** | " + " | ".join(f"**{wins[i][5]:.1f}**" for i in idx) + " |")
        print("| req/s | " + " | ".join(f"{wins[i][4]:.0f}" for i in idx) + " |")
        print("| perf samples | " + " | ".join(str(totals[i]) for i in idx) + " |")
        for name in [n for n, _ in CATEGORIES] + [OTHER]:
            cells = []
            for i in idx:
                n = counts[i][name]
                cells.append(f"{n / totals[i] * wins[i][5]:.1f}" if totals[i] and n else "")
            if any(cells):
                print(f"| {name} | " + " | ".join(cells) + " |")
            if name.startswith("send"):
                cells = [f"{wakeups[i] / totals[i] * wins[i][5]:.1f}" if totals[i] else "" for i in idx]
                print("| &nbsp;&nbsp;of which waking the reading thread (`sock_def_readable`) | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
