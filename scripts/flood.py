#!/usr/bin/env python3
"""Flood `ha-guard serve` with maximum-size requests and report its peak memory.

Not part of CI: a measurement. It starts the release binary (`cargo build --release` first) on
free local ports with certificates from `ha-guard certs`, then for each body shape starts a fresh
server (so that /proc/PID/status VmHWM, the peak resident set, belongs to that shape alone) and
floods it from `--clients` threads, each POSTing bodies of exactly 8 MiB (the body limit) over
its own TLS connection for `--seconds`. With more 8 MiB bodies than `--max-body-memory` holds
(64 MiB: eight), the surplus is refused with 503 at once: the peak is what the admitted
requests cost.

Body shapes (each exactly 8 MiB):
  padded   a real AdmissionReview (tests/fixtures/deployment-spread-ok.json) padded with spaces:
           the cost of holding the body
  args     a valid Deployment review whose container has as many empty-string args as the
           value limit allows (65,536 JSON values in all), padded with spaces: the decoding
           worst case that is answered
  slow     `args` without `spec.selector`: such a Deployment is decoded the general way (through
           JSON trees, several copies) rather than straight into its type: the decoding worst
           case per value
  numbers  a review whose object holds an array of zeros up to the value limit (the parser's
           worst case per byte)
  dense    8 MiB of `"",` args: ~2.8 million values, over the limit, refused (400) before
           decoding (without the limit, one such request took 0.7 GiB)

Then it holds `--connections` idle TLS connections open on a fresh server and reports the
resident set with them (connection memory; `--max-connections` bounds their number).

  python3 scripts/flood.py                          # defaults: the server's own limits
  python3 scripts/flood.py --max-body-memory 1024 --clients 64 --shapes args   # limits lifted
"""

import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY_LIMIT = 8 * 1024 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def review():
    with open(os.path.join(ROOT, "tests/fixtures/deployment-spread-ok.json")) as f:
        return json.load(f)


def pad(doc):
    body = json.dumps(doc, separators=(",", ":")).encode()
    assert len(body) <= BODY_LIMIT, len(body)
    return body + b" " * (BODY_LIMIT - len(body))


MAX_JSON_VALUES = 65_536  # src/server/admission.rs


def count_values(body):
    """The server's bound on the JSON values of a body: 1 + commas + `[` + `{` outside strings."""
    count, in_string, escaped = 1, False, False
    for b in body:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:
                escaped = True
            elif b == 0x22:
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x2C, 0x5B, 0x7B):
            count += 1
    return count


def compact(doc):
    return json.dumps(doc, separators=(",", ":")).encode()


def body_of(shape):
    if shape == "padded":
        return pad(review())
    r = review()
    if shape in ("args", "slow", "dense"):
        if shape == "slow":
            del r["request"]["object"]["spec"]["selector"]
        container = r["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [""]
        if shape != "dense":
            n = MAX_JSON_VALUES - count_values(compact(r)) + 1
        else:
            n = (BODY_LIMIT - len(compact(r))) // 3  # `"",` per arg
        container["args"] = [""] * n
    elif shape == "numbers":
        r["request"]["object"]["flood"] = [0]
        r["request"]["object"]["flood"] = [0] * (MAX_JSON_VALUES - count_values(compact(r)) + 1)
    else:
        raise SystemExit(f"unknown shape {shape}")
    body = pad(r)
    if shape != "dense":
        assert count_values(body) == MAX_JSON_VALUES, count_values(body)
    return body


class Server:
    def __init__(self, args, certs):
        self.port, self.probe = free_port(), free_port()
        cmd = [
            args.binary, "serve", "--cluster", "none",
            "--listen", f"127.0.0.1:{self.port}", "--probe-listen", f"127.0.0.1:{self.probe}",
            "--tls-cert", os.path.join(certs, "tls.crt"), "--tls-key", os.path.join(certs, "tls.key"),
            "--shutdown-delay", "0", "--shutdown-timeout", "1",
        ]
        if args.max_concurrent_requests:
            cmd += ["--max-concurrent-requests", str(args.max_concurrent_requests)]
        if args.max_body_memory:
            cmd += ["--max-body-memory", str(args.max_body_memory)]
        if args.max_connections:
            cmd += ["--max-connections", str(args.max_connections)]
        env = dict(os.environ, RUST_LOG="warn")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.probe, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("the server did not become ready")

    def kib(self, field):
        return status_kib(self.proc.pid, field)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def tls_context(certs):
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def flood(args, certs, shape):
    body = body_of(shape)
    assert len(body) == BODY_LIMIT
    server = Server(args, certs)
    baseline = server.kib("VmRSS")
    ctx = tls_context(certs)
    counts, lock = {}, threading.Lock()
    stop = time.time() + args.seconds

    def client():
        while time.time() < stop:
            outcome = None
            try:
                c = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=60)
                c.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
                outcome = str(c.getresponse().status)
                c.close()
            except (ConnectionError, ssl.SSLError, OSError) as e:
                # A 503 is sent before the body is read; the server then closes, which a client
                # still writing its 8 MiB sees as a reset.
                closed = isinstance(e, (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError))
                outcome = "closed mid-upload (503)" if closed else type(e).__name__
            with lock:
                counts[outcome] = counts.get(outcome, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = server.kib("VmHWM")
    server.stop()
    return baseline, peak, counts


def idle_connections(args, certs):
    server = Server(args, certs)
    baseline = server.kib("VmRSS")
    ctx = tls_context(certs)
    held = []
    for _ in range(args.connections):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port)), server_hostname="localhost")
        held.append(s)
    time.sleep(0.5)
    rss = server.kib("VmRSS")
    for s in held:
        s.close()
    server.stop()
    return baseline, rss


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/ha-guard"))
    p.add_argument("--max-concurrent-requests", type=int, default=0, help="passed to serve (0: its default)")
    p.add_argument("--max-body-memory", type=int, default=0, help="MiB, passed to serve (0: its default)")
    p.add_argument("--max-connections", type=int, default=0, help="passed to serve (0: its default)")
    p.add_argument("--clients", type=int, default=32, help="concurrent uploading clients")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--shapes", default="padded,args,slow,numbers,dense")
    p.add_argument("--connections", type=int, default=500, help="idle TLS connections to hold (0: skip)")
    args = p.parse_args()
    if not os.access(args.binary, os.X_OK):
        raise SystemExit(f"{args.binary}: build it first (cargo build --release)")
    with tempfile.TemporaryDirectory() as certs:
        subprocess.run([args.binary, "certs", "--out", certs, "--dns", "localhost", "--ip", "127.0.0.1"], check=True, stdout=subprocess.DEVNULL)
        limits = f"max-concurrent-requests {args.max_concurrent_requests or 'default'}, max-body-memory {args.max_body_memory or 'default'}"
        print(f"{limits}: {args.clients} clients, {args.seconds:g} s per shape, 8 MiB bodies")
        for shape in args.shapes.split(","):
            baseline, peak, counts = flood(args, certs, shape)
            answered = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
            print(f"  {shape:8} peak RSS (VmHWM) {peak / 1024:7.1f} MiB  (at start {baseline / 1024:.1f} MiB)  requests: {answered}")
            sys.stdout.flush()
        if args.connections:
            baseline, rss = idle_connections(args, certs)
            per = (rss - baseline) / args.connections
            print(f"  {args.connections} idle TLS connections: RSS {rss / 1024:.1f} MiB (at start {baseline / 1024:.1f} MiB, ~{per:.0f} KiB each)")


if __name__ == "__main__":
    main()
