"""A stand-in vLLM API server on 127.0.0.1 for check's and watch's command-line tests: it answers /health,
/v1/models and /metrics with text recorded from the real engine (tests/fixtures/check/), one /metrics
file after another, and /v1/completions after a delay. The engine tier (tests/engine/test_check_engine.py)
runs the same commands against the real vLLM."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "check"


class StandIn:
    def __init__(self, metrics: list[str], health: int = 200, completion_delay_s: float = 0.0) -> None:
        self.metrics = [(FIXTURES / name).read_text() for name in metrics]
        self.health = health
        self.completion_delay_s = completion_delay_s
        self.requests: list[str] = []
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
