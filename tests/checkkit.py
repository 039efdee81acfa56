"""A stand-in vLLM API server on 127.0.0.1 for check's and watch's command-line tests: it answers /health,
/v1/models and /metrics with text recorded from the real engine (tests/fixtures/check/), one /metrics
file after another, and /v1/completions after a delay. The engine tier (tests/engine/test_check_engine.py)
runs the same commands against the real vLLM.

Servers that are not vLLM, for check to tell: `FileServer` is `python -m http.server` (the standard library's
own handler over a directory), `NotHttp` answers any request with the bytes of an HTTP/2 SETTINGS frame (what
an HTTP/2-only server such as a gRPC port sends)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "check"


class StandIn:
    def __init__(self, metrics: list[str], health: int = 200, completion_delay_s: float = 0.0) -> None:
        self.metrics = [(FIXTURES / name).read_text() for name in metrics]
        self.health = health
        self.completion_delay_s = completion_delay_s
        self.requests: list[str] = []
        self.authorization: list[str | None] = []
        self._served = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: str, kind: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stand_in.requests.append(f"GET {self.path}")
                stand_in.authorization.append(self.headers.get("Authorization"))
                if self.path == "/health":
                    self._send(stand_in.health, "")
                elif self.path == "/v1/models":
                    self._send(200, (FIXTURES / "models.json").read_text(), "application/json")
                elif self.path == "/metrics":
                    i = min(stand_in._served, len(stand_in.metrics) - 1)
                    stand_in._served += 1
                    self._send(200, stand_in.metrics[i])
                else:
                    self._send(404, "")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                stand_in.requests.append(f"POST {self.path} {json.dumps(body, sort_keys=True)}")
                time.sleep(stand_in.completion_delay_s)
                try:
                    self._send(200, json.dumps({"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}),
                               "application/json")
                except OSError:  # the client gave up
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused_url() -> str:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FileServer:
    """`python -m http.server` over `directory` on 127.0.0.1, recording the requests it gets."""

    def __init__(self, directory: Path) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(directory), **kwargs)

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server.requests.append(f"GET {self.path}")
                super().do_GET()

            def do_POST(self) -> None:  # SimpleHTTPRequestHandler has none: the stdlib answers 501 with its HTML page
                server.requests.append(f"POST {self.path}")
                self.send_error(501, "Unsupported method ('POST')")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class NotHttp:
    """A port that answers every connection with an HTTP/2 SETTINGS frame, then closes it."""

    FRAME = b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64\x00\x04\x00\x10\x00\x00"

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(self.FRAME)
                    time.sleep(0.1)
                except OSError:
                    pass

    def __enter__(self) -> NotHttp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:  # wakes the thread's accept(), which close() alone leaves blocked (a thread left for later tests)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(5)
