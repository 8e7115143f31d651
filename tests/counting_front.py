"""A counting front: an HTTP forwarder a test puts between the engine and an endpoint.

It runs in a process of its own (so nothing the engine hooks in the test's process sees
its traffic), forwards every request to the target as it came, and appends one JSON line
per request to a log file: method, path, the SHA-256 of the body, the sample-key header
(with ``bodies``: also the query, the model and the JSON body itself, in place of its
hash). What a test counts there is what went over the wire, whatever the engine says.

Use :class:`CountingFront` (a context manager) from a test; the module is also the
front's own program (``python counting_front.py --target URL --log FILE --ready FILE``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SAMPLE_KEY_HEADER = "x-quiver-sample-key"


class CountingFront:
    """The front as a subprocess: ``url`` to give the engine (same path prefix as the
    target's), ``root`` (no path: for clients that add ``/v1`` themselves), :meth:`requests`
    to read what went through."""

    def __init__(self, target: str, *, bodies: bool = False) -> None:
        self.target = target.rstrip("/")
        self._folder = Path(tempfile.mkdtemp(prefix="counting-front-"))
        self.log = self._folder / "requests.jsonl"
        self.log.touch()
        ready = self._folder / "ready"
        self._proc = subprocess.Popen([sys.executable, __file__, "--target", self.target, "--log", str(self.log),
                                       "--ready", str(ready), *(["--bodies"] if bodies else [])],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the counting front did not start: {self._proc.stderr.read()!r}")  # type: ignore[union-attr]
            time.sleep(0.02)
        port = int(ready.read_text())
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + urllib.parse.urlsplit(self.target).path

    def requests(self) -> list[dict[str, Any]]:
        """Every request forwarded so far, in arrival order."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def count(self, path_suffix: str = "/chat/completions") -> int:
        """Requests whose path ends with ``path_suffix``."""
        return sum(r["path"].rstrip("/").endswith(path_suffix) for r in self.requests())

    def mark(self) -> int:
        """How many requests there are now (to count those after it)."""
        return len(self.requests())

    def since(self, mark: int, path_suffix: str = "/chat/completions") -> list[dict[str, Any]]:
        """The requests after ``mark`` whose path ends with ``path_suffix``."""
        return [r for r in self.requests()[mark:] if r["path"].rstrip("/").endswith(path_suffix)]

    @staticmethod
    def repeated(requests: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """(body hash, sample key) pairs sent more than once."""
        seen = Counter((r["body"], r["sample_key"] or "") for r in requests)
        return [k for k, n in seen.items() if n > 1]

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)

    def __enter__(self) -> CountingFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- the front's process


def _forward(target: str, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
    """Send the request to the target over a raw socket; the whole response."""
    parts = urllib.parse.urlsplit(target)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()
              if k.lower() not in ("host", "connection", "content-length", "transfer-encoding")]
    lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection((host, port), timeout=120) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    head, _, rest = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    out_headers = [tuple(h.split(":", 1)) for h in header_lines if ":" in h]
    if any(k.strip().lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in out_headers):
        rest = _dechunk(rest)
    return status, [(k.strip(), v.strip()) for k, v in out_headers], rest


def _dechunk(data: bytes) -> bytes:
    out, i = [], 0
    while True:
        end = data.index(b"\r\n", i)
        size = int(data[i:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2:end + 2 + size])
        i = end + 2 + size + 2


def _serve(target: str, log: Path, ready: Path, bodies: bool) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path
            entry: dict[str, Any] = {"method": self.command, "path": urllib.parse.urlsplit(path).path,
                                     "body": hashlib.sha256(body).hexdigest(),
                                     "sample_key": self.headers.get(SAMPLE_KEY_HEADER)}
            if bodies:
                try:
                    data = json.loads(body) if body else None
                except ValueError:
                    data = None
                entry.update(query=urllib.parse.urlsplit(path).query, body=data,
                             model=data.get("model") if isinstance(data, dict) else None)
            with lock, open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
            status, headers, content = _forward(target, self.command, path, dict(self.headers.items()), body)
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    os.replace(tmp, ready)
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--bodies", action="store_true")
    args = parser.parse_args()
    _serve(args.target, args.log, args.ready, args.bodies)
