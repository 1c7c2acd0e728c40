#!/usr/bin/env python3
"""Train a profile-guided build of the load bench on requests it does not measure.

Starts the instrumented load bench's server role (`EXE serve`, its view as in the bench), sends
every AdmissionReview of tests/fixtures (Deployments, StatefulSets, PDBs, HPAs, scale writes, a
DELETE, kinds ha-guard does not check: allowed, warned, denied and patched answers) to each of
its listeners (transport, decode, parse and ha-guard, so the baselines are trained as the
webhook is), to /validate and /mutate, over HTTP/1.1 (one keep-alive connection a listener) and
HTTP/2 (one curl process a listener, its connection reused), then closes the server's stdin so
that it exits and writes its profile. The load bench's own request bodies (benches/load/
fixtures.rs) are not sent: a profile trained on what is measured says little of a shipped one.

    benches/perf/pgo_train.py EXE [--rounds N] [--certs DIR] [--fixtures DIR]

See benches/perf/pgo.sh for the whole build.
"""

import argparse
import http.client
import pathlib
import ssl
import subprocess
import sys
import tempfile


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exe", help="the instrumented load bench binary")
    p.add_argument("--rounds", type=int, default=40, help="times each fixture is sent to each endpoint")
    p.add_argument("--certs", default="target/load-certs", help="the bench's TLS material (ca.crt, tls.*)")
    p.add_argument("--fixtures", default="tests/fixtures", help="AdmissionReview JSON files")
    p.add_argument("--namespaces", default="43", help="the server's view, as the profile role builds it")
    a = p.parse_args()

    bodies = []
    for f in sorted(pathlib.Path(a.fixtures).glob("*.json")):
        text = f.read_bytes()
        if b'"AdmissionReview"' in text:
            bodies.append((f, text))
    if not bodies:
        sys.exit(f"pgo_train: no AdmissionReview in {a.fixtures}")

    server = subprocess.Popen(
        [a.exe, "serve", "--workers", "1", "--log", "info", "--log-format", "text",
         "--namespaces", a.namespaces, "--certs", a.certs],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    ready = server.stdout.readline().decode()
    if not ready.startswith("ready "):
        server.kill()
        sys.exit(f"pgo_train: the server did not start: {ready!r}")
    addrs = {k: v for k, v in (w.split("=", 1) for w in ready.split()[1:]) if k in
             ("transport", "decode", "parse", "ha-guard")}

    ca = str(pathlib.Path(a.certs, "ca.crt"))
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False  # the bench's certificate names localhost; this is 127.0.0.1
    sent, status = 0, {}
    for addr in addrs.values():
        host, port = addr.rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=ctx)
        for _ in range(a.rounds):
            for _, body in bodies:
                for path in ("/validate", "/mutate"):
                    conn.request("POST", path, body, {"Content-Type": "application/json"})
                    r = conn.getresponse()
                    r.read()
                    status[r.status] = status.get(r.status, 0) + 1
                    sent += 1
        conn.close()
        # HTTP/2: one curl, its requests in a config file, one connection.
        with tempfile.NamedTemporaryFile("w", suffix=".curl") as cfg:
            entries = []
            for _ in range(max(1, a.rounds // 4)):
                for f, _ in bodies:
                    for path in ("/validate", "/mutate"):
                        # `next` resets every option: each request carries its own.
                        entries.append(
                            f'url = "https://localhost:{port}{path}"\nhttp2\ncacert = "{ca}"\n'
                            f'resolve = "localhost:{port}:{host}"\nsilent\n'
                            f'data-binary = "@{f}"\nheader = "Content-Type: application/json"\n'
                            f'output = "/dev/null"\n')
            cfg.write("next\n".join(entries))
            cfg.flush()
            subprocess.run(["curl", "-K", cfg.name], check=True)
            sent += len(entries)
    server.stdin.close()
    rc = server.wait(timeout=60)
    print(f"pgo_train: {len(bodies)} fixtures, {sent} requests to {', '.join(addrs)}; "
          f"HTTP/1.1 statuses {dict(sorted(status.items()))}; server exit {rc}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
