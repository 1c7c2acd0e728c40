#!/usr/bin/env python3
"""Instructions and CPU time per /validate and /mutate request, for two ha-guard binaries side by
side (a before/after comparison of one change). Not part of CI: a measurement.

For each binary it starts `serve --cluster VIEW` under `valgrind --tool=callgrind` (instruction
counts do not depend on what else the machine is doing) and, separately, natively (CPU seconds from
/proc), sends every AdmissionReview fixture of tests/fixtures N times over one keep-alive TLS
connection per webhook, and reports per request: instructions (callgrind, startup and the
ready-probe subtracted by a run with no requests) and CPU microseconds (native, interleaved rounds,
median).

  python3 scripts/validate-cost.py OLD_BINARY NEW_BINARY [--view FILE] [--requests N] [--rounds R]
"""

import argparse
import glob
import http.client
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fixtures():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/*.json"))):
        if "schema" in path:
            continue
        with open(path, "rb") as f:
            out.append((os.path.basename(path), f.read()))
    return out


def start(binary, certs, view, wrapper=()):
    wport, pport = free_port(), free_port()
    cmd = list(wrapper) + [
        binary, "serve", "--listen", f"127.0.0.1:{wport}", "--probe-listen", f"127.0.0.1:{pport}",
        "--tls-cert", f"{certs}/tls.crt", "--tls-key", f"{certs}/tls.key", "--cluster", view,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", pport, timeout=1)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return proc, wport
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{binary} did not become ready")


def send(wport, certs, requests, bodies):
    ctx = ssl.create_default_context(cafile=f"{certs}/ca.crt")
    total = 0
    for webhook in ("validate", "mutate"):
        conn = http.client.HTTPSConnection("localhost", wport, context=ctx)
        for _ in range(requests):
            for _, body in bodies:
                conn.request("POST", f"/{webhook}", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status not in (200, 400):
                    raise SystemExit(f"unexpected status {r.status}")
                total += 1
        conn.close()
    return total


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def instructions(binary, certs, view, requests, bodies):
    """Instructions for the requests alone: a run with the requests less a run without."""
    counts = []
    for n in (0, requests):
        with tempfile.TemporaryDirectory() as out:
            proc, wport = start(binary, certs, view, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out"])
            sent = send(wport, certs, n, bodies) if n else 0
            proc.terminate()
            proc.wait(timeout=120)
            text = subprocess.run(["callgrind_annotate", f"{out}/cg.out"], capture_output=True, text=True).stdout
            m = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", text)
            counts.append((int(m.group(1).replace(",", "")), sent))
    (base, _), (full, sent) = counts
    return (full - base) / sent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--view", default=os.path.join(ROOT, "examples"))
    ap.add_argument("--requests", type=int, default=20, help="rounds of every fixture per webhook")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bodies = fixtures()
    with tempfile.TemporaryDirectory() as certs:
        subprocess.run([args.old, "certs", "--out", certs, "--dns", "localhost"], check=True, capture_output=True)
        cpu = {args.old: [], args.new: []}
        for _ in range(args.rounds):
            for binary in (args.old, args.new):
                proc, wport = start(binary, certs, args.view)
                before = cpu_seconds(proc.pid)
                sent = send(wport, certs, args.requests, bodies)
                cpu[binary].append((cpu_seconds(proc.pid) - before) / sent * 1e6)
                proc.terminate()
                proc.wait()
        print(f"{len(bodies)} fixtures x {args.requests} x 2 webhooks per run, view {args.view}")
        for name, binary in (("old", args.old), ("new", args.new)):
            ins = instructions(binary, certs, args.view, max(1, args.requests // 4), bodies)
            runs = ", ".join(f"{c:.0f}" for c in cpu[binary])
            print(f"{name}: {ins:,.0f} instructions/request (callgrind); CPU {statistics.median(cpu[binary]):.0f} µs/request median of [{runs}]")


if __name__ == "__main__":
    sys.exit(main())
