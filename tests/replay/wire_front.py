"""A counting front that also keeps what each request asked: the model, the sample key
and the JSON body (``tests/counting_front.py`` keeps the body's hash only).

It forwards every request to its target as it came, from a process of its own (nothing
the engine hooks in the test's process sees its traffic), and appends one JSON line per
request to its log. A test reads there what went over the wire: how many requests each
model got, and whether a perturbation's change was in the body that was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
from counting_front import _forward  # noqa: E402

SAMPLE_KEY_HEADER = "x-quiver-sample-key"


class WireFront:
    """The front as a subprocess: ``url`` (the target's path prefix kept), ``root`` (no
    path: for clients that add ``/v1`` themselves), :meth:`requests` to read the log."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        folder = Path(tempfile.mkdtemp(prefix="wire-front-"))
        self.log = folder / "requests.jsonl"
        self.log.touch()
        ready = folder / "ready"
        self._proc = subprocess.Popen([sys.executable, __file__, "--target", self.target, "--log", str(self.log),
                                       "--ready", str(ready)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the wire front did not start: {self._proc.stderr.read()!r}")  # type: ignore[union-attr]
            time.sleep(0.02)
        port = int(ready.read_text())
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + urllib.parse.urlsplit(self.target).path

    def requests(self) -> list[dict[str, Any]]:
        """Every request forwarded so far, in arrival order."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def _serve(target: str, log: Path, ready: Path) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                data = json.loads(body) if body else None
            except ValueError:
                data = None
            entry = {"method": self.command, "path": urllib.parse.urlsplit(self.path).path,
                     "query": urllib.parse.urlsplit(self.path).query,
                     "model": data.get("model") if isinstance(data, dict) else None,
                     "sample_key": self.headers.get(SAMPLE_KEY_HEADER), "body": data}
            with lock, open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
            status, headers, content = _forward(target, self.command, self.path, dict(self.headers.items()), body)
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = _handle

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
    args = parser.parse_args()
    _serve(args.target, args.log, args.ready)
