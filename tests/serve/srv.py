"""Helpers for the server's tests (tests/serve/): start `diffrt serve` on a
free loopback port, talk HTTP to it over raw sockets or http.client, read
its metrics. Standard library only."""

import http.client
import json
import os
import signal
import socket
import subprocess
import shutil
import tempfile
import time


class Server:
    """A `diffrt serve` process; stop() sends SIGTERM and returns its exit status."""

    def __init__(self, diffrt, model, *args, env=None, log=None):
        self.dir = tempfile.mkdtemp(prefix="drt-serve-")
        ready = os.path.join(self.dir, "ready")
        self.log_path = log or os.path.join(self.dir, "log")
        self.log = open(self.log_path, "w")
        cmd = [diffrt, "serve", "--model", model, "--port", "0", "--ready-file", ready, *args]
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        t0 = time.time()
        while not os.path.exists(ready) or not open(ready).read().endswith("\n"):
            if self.p.poll() is not None:
                msg = f"server exited {self.p.returncode}: {self.text_log()}"
                self.cleanup()
                raise RuntimeError(msg)
            if time.time() - t0 > 60:
                self.p.kill()
                self.p.wait()
                msg = "server did not start in 60 s: " + self.text_log()
                self.cleanup()
                raise RuntimeError(msg)
            time.sleep(0.02)
        self.host, port = open(ready).read().split()
        self.port = int(port)

    def text_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def cleanup(self):
        """Closes the log and removes the server's temporary folder (a log
        given by the caller is kept)."""
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, timeout=60):
        """SIGTERM, wait, clean up; a non-zero exit prints the log's tail."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            msg = "server did not exit within %d s of SIGTERM: %s" % (timeout, self.text_log())
            self.cleanup()
            raise RuntimeError(msg)
        if rc != 0:
            print(f"server exited {rc}; its log ends:\n{self.text_log()}")
        self.cleanup()
        return rc

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict with lower-case names, body bytes)"""
        c = self.conn(timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def post(self, path, body, headers=None, timeout=60):
        s, h, b = self.request("POST", path, body, headers, timeout)
        return s, h, b

    def json(self, method, path, body=None, headers=None):
        s, h, b = self.request(method, path, body, headers)
        return s, json.loads(b) if b else None

    def sock(self, timeout=30):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        return s

    def metrics(self):
        s, _, b = self.request("GET", "/metrics")
        assert s == 200, s
        out = {}
        for line in b.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out

    def wait_metric(self, name, pred, timeout=10):
        t0 = time.time()
        while True:
            m = self.metrics()
            if pred(m.get(name, 0)):
                return m
            if time.time() - t0 > timeout:
                raise AssertionError(f"{name} = {m.get(name)} after {timeout} s")
            time.sleep(0.02)

    def fds(self):
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def raw_request(method, path, body=b"", headers=None, version="HTTP/1.1"):
    h = {"Host": "localhost", "Content-Length": str(len(body))} if body or method == "POST" else {"Host": "localhost"}
    h.update(headers or {})
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + body


_LEFT = {}  # bytes read past one response, per socket (pipelining)


def read_response(s, timeout=10):
    """Reads one HTTP response from socket s: (status, headers, body); chunked,
    Content-Length or to the close; None when the server closed first."""
    s.settimeout(timeout)
    buf = _LEFT.pop(s.fileno(), b"")

    def more():
        d = s.recv(65536)
        if not d:
            raise EOFError
        return d

    try:
        while b"\r\n\r\n" not in buf:
            buf += more()
    except EOFError:
        return None
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hd = {}
    for ln in lines[1:]:
        k, v = ln.split(":", 1)
        hd[k.strip().lower()] = v.strip()
    if status == 100:
        _LEFT[s.fileno()] = rest
        return status, hd, b""
    body = b""
    try:
        if "content-length" in hd:
            n = int(hd["content-length"])
            while len(rest) < n:
                rest += more()
            _LEFT[s.fileno()] = rest[n:]
            return status, hd, rest[:n]
        if hd.get("transfer-encoding") == "chunked":
            while True:
                while b"\r\n" not in rest:
                    rest += more()
                ln, rest = rest.split(b"\r\n", 1)
                n = int(ln.split(b";")[0], 16)
                while len(rest) < n + 2:
                    rest += more()
                body += rest[:n]
                rest = rest[n + 2:]
                if n == 0:
                    _LEFT[s.fileno()] = rest
                    return status, hd, body
        body = rest
        while True:
            body += more()
    except EOFError:
        return status, hd, body  # closed early: what came


def closed_by_peer(s, timeout):
    """True when the server closes s within timeout seconds."""
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except socket.timeout:
        return False
    except OSError:
        return True


def sse_events(body):
    """The data: payloads of an SSE body, in order."""
    out = []
    for ev in body.decode().split("\n\n"):
        for line in ev.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out
