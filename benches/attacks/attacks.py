#!/usr/bin/env python3
"""Hostile-client attacks against a release gateway binary on loopback, with the figures the
security page quotes.

    cargo build --release -p context-relay-gateway
    python3 benches/attacks/attacks.py target/release/context-relay-gateway [ATTACK...]

ATTACK is one of `slots`, `nested`, `bombs`, `budget` (all of them by default). Each starts
its own gateway (memory store, one provider on a loopback port that accepts and never
answers), runs the attack, prints one line of figures and stops the gateway. Only 127.0.0.1 is
used. `bombs` needs Python's `brotli` module (`pip install brotli`).
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Silent:
    """An upstream that accepts connections and reads, but never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()

    @staticmethod
    def drain(c):
        try:
            while c.recv(1 << 16):
                pass
        except OSError:
            pass


class Gateway:
    def __init__(self, binary, limits, top=""):
        self.upstream = Silent()
        self.port = free_port()
        self.dir = tempfile.mkdtemp()
        config = os.path.join(self.dir, "gateway.toml")
        with open(config, "w") as f:
            f.write(
                f"""listen = "{HOST}:{self.port}"
{top}
[store]
backend = "memory"
[limits]
{limits}
[[providers]]
name = "p"
base_url = "http://{HOST}:{self.upstream.port}/v1"
  [[providers.accounts]]
  id = "a"
  api_key = "k"
[[combos]]
name = "relay"
targets = ["p/m"]
"""
            )
        self.proc = subprocess.Popen(
            [binary, "--config", config],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "error"},
        )
        line = self.proc.stdout.readline().decode()
        if "listening" not in line:
            raise SystemExit(f"gateway did not start: {line!r}")

    def status(self, key):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def rss(self):
        return self.status("VmRSS")

    def peak(self):
        return self.status("VmHWM")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def request(port, raw, timeout=60.0):
    """Sends `raw` on a new connection and returns the status code (0 when closed without one)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return 0
            data += chunk
        return int(data.split(b" ", 2)[1])


def healthz(port, timeout=60.0):
    """Seconds until GET /healthz answers 200 (a closed connection is retried)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            code = request(port, b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                           timeout=timeout)
            if code == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.01)
    return float("inf")


def post(path, body, headers=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + headers + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def slots(binary):
    gw = Gateway(binary, "max_connections = 200\nclient_header_timeout_secs = 2")
    socks = []
    for i in range(200):
        s = socket.create_connection((HOST, gw.port))
        s.sendall(b"P" if i % 2 == 0 else b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        socks.append(s)
    time.sleep(0.2)
    waited = healthz(gw.port, timeout=60.0)
    # How long the gateway keeps a one-byte socket open.
    s = socks[0]
    s.settimeout(30)
    start = time.monotonic()
    try:
        s.recv(1)
        held = f"{time.monotonic() - start + 0.2:.1f} s"
    except socket.timeout:
        held = "more than 30 s"
    except OSError:
        held = f"{time.monotonic() - start + 0.2:.1f} s"
    print(f"slots: 200 one-byte/preface sockets, max_connections=200, header timeout 2 s: "
          f"/healthz answered after {waited:.2f} s; a one-byte socket was held {held}")
    for s in socks:
        s.close()
    gw.stop()


def nested(binary, size=4 << 20):
    gw = Gateway(binary, "", top=f"max_request_bytes = {16 << 20}")
    depth = (size - 64) // 2
    body = (b'{"model":"relay","messages":[{"role":"user","content":' + b"[" * depth
            + b"]" * depth + b"}]}")
    before = gw.rss()
    start = time.monotonic()
    try:
        code = request(gw.port, post(b"/v1/chat/completions", body), timeout=120)
    except OSError as e:
        code = f"error {e}"
    took = time.monotonic() - start
    print(f"nested: {len(body) / 1e6:.1f} MB of nested arrays, no session header: status {code} "
          f"after {took:.2f} s (the upstream never answers: a timeout means it was forwarded); "
          f"RSS {before / 1e6:.0f} MB before, peak {gw.peak() / 1e6:.0f} MB, "
          f"{gw.rss() / 1e6:.0f} MB after")
    gw.stop()


def bombs(binary, count=100):
    import brotli

    limit = 8 << 20
    bomb = brotli.compress(b'{"model":"relay","input":"' + b"a" * (limit - 40) + b'"}',
                           quality=11)
    gw = Gateway(binary, "", top=f"max_request_bytes = {limit}")
    raw = post(b"/v1/responses", bomb, b"content-encoding: br\r\n")
    done = []

    def fire():
        try:
            done.append(request(gw.port, raw, timeout=60))
        except OSError:
            done.append(0)

    latencies = []
    threads = [threading.Thread(target=fire) for _ in range(count)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        latencies.append(healthz(gw.port, timeout=30))
    for t in threads:
        t.join()
    worst = max(latencies) if latencies else 0.0
    print(f"bombs: {count} brotli bombs of {len(bomb)} bytes (each {limit >> 20} MiB decoded): "
          f"/healthz worst {worst * 1000:.0f} ms over {len(latencies)} probes; "
          f"peak RSS {gw.peak() / 1e6:.0f} MB")
    gw.stop()


def budget(binary, clients=64, size=4 << 20):
    budget_bytes = 64 << 20
    gw = Gateway(binary, f"max_buffered_bytes = {budget_bytes}",
                 top=f"max_request_bytes = {8 << 20}")
    body = b'{"model":"relay","input":"' + b"a" * (size - 40) + b'"}'
    raw = post(b"/v1/responses", body, b"session_id: s\r\n")
    codes = []

    def fire():
        try:
            codes.append(request(gw.port, raw, timeout=15))
        except OSError:
            codes.append(0)

    threads = [threading.Thread(target=fire) for _ in range(clients)]
    for t in threads:
        t.start()
    samples = []
    while any(t.is_alive() for t in threads):
        samples.append(gw.rss())
        time.sleep(0.05)
    for t in threads:
        t.join()
    busy = sum(1 for c in codes if c == 503)
    print(f"budget: max_buffered_bytes = 64 MiB, {clients} concurrent {size >> 20} MiB bodies to "
          f"an upstream that never answers: {busy} got 503; peak RSS {gw.peak() / 1e6:.0f} MB "
          f"({gw.peak() / budget_bytes:.2f}x the budget)")
    gw.stop()


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    attacks = sys.argv[2:] or ["slots", "nested", "bombs", "budget"]
    for name in attacks:
        globals()[name](binary)


if __name__ == "__main__":
    main()
