"""A Hugging Face Hub on 127.0.0.1 for tests: real safetensors files behind the hub's URL layout.

What huggingface_hub 2.4.0 asks of a hub, and what this serves:
- `HEAD`/`GET {endpoint}/{repo_id}/resolve/{revision}/{filename}` (file_download.py:211 hf_hub_url, with
  constants.HUGGINGFACE_CO_URL_TEMPLATE "/{repo_id}/resolve/{revision}/{filename}", constants.py:70);
  `revision` is a branch ("main") or the commit;
- headers `X-Repo-Commit` (the commit, file_download.py:1677), `ETag` (file_download.py:1679-1681: required,
  file_download.py:1800-1803), `Content-Length`;
- `Range: bytes=A-B` answered with 206 and `Content-Range` (the header reads of hf_api.py:6944, :6955);
- a missing file: 404 with `X-Error-Code: EntryNotFound`, a missing repo: `RepoNotFound`, a missing revision:
  `RevisionNotFound` (utils/_http.py:871-936 maps them to the errors).
Every request is recorded (method, path, headers) so a test can say what was asked, and with which token.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
from safetensors.numpy import save_file

COMMIT = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f40"

# DeepSeek-V4-like names: dense attention and shared experts, routed experts, an MTP (draft) layer past
# num_hidden_layers, embeddings. dtype x shape chosen so each kind has a distinct byte count.
SHARDS: dict[str, dict[str, np.ndarray]] = {
    "model-00001-of-00003.safetensors": {
        "model.embed_tokens.weight": np.zeros((64, 32), dtype=np.float16),  # 4096 B
        "model.layers.0.attn.wq_a.weight": np.zeros((32, 16), dtype=np.float32),  # 2048 B
        "model.layers.0.ffn.shared_experts.w1.weight": np.zeros((16, 16), dtype=np.int8),  # 256 B
        "model.layers.0.ffn.experts.0.w1.weight": np.zeros((128, 64), dtype=np.int8),  # 8192 B
        "model.layers.0.ffn.experts.1.w1.weight": np.zeros((128, 64), dtype=np.int8),  # 8192 B
    },
    "model-00002-of-00003.safetensors": {
        "model.layers.1.attn.wkv.weight": np.zeros((8, 8), dtype=np.float64),  # 512 B
        "model.layers.1.ffn.experts.0.w2.weight": np.zeros((64, 64), dtype=np.uint8),  # 4096 B
        "model.layers.1.ffn.experts.0.scale": np.zeros((), dtype=np.float32),  # 4 B, a scalar
        "model.norm.weight": np.zeros((32,), dtype=np.float32),  # 128 B
    },
    "model-00003-of-00003.safetensors": {
        "model.layers.43.attn.wq_a.weight": np.zeros((16, 16), dtype=np.float16),  # 512 B: MTP (layer 43 of 43)
        "mtp.0.ffn.experts.0.w1.weight": np.zeros((32, 32), dtype=np.int8),  # 1024 B: MTP
    },
}
MTP_BYTES = 512 + 1024
EXPERT_BYTES = 8192 * 2 + 4096 + 4
TOTAL_BYTES = 4096 + 2048 + 256 + 8192 * 2 + 512 + 4096 + 4 + 128 + MTP_BYTES


def write_repo(directory: Path, config: dict[str, Any]) -> dict[str, bytes]:
    """config.json, the shards (written by the safetensors package) and model.safetensors.index.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    weight_map = {}
    for filename, tensors in SHARDS.items():
        save_file(tensors, str(directory / filename), metadata={"format": "pt"})
        weight_map.update({name: filename for name in tensors})
    index = {"metadata": {"total_size": TOTAL_BYTES}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeHub:
    """`repos`: repo id -> {filename: bytes}, all at COMMIT, which "main" names."""

    repos: dict[str, dict[str, bytes]]
    requests: list[Request] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, body=True)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append(Request(handler.command, handler.path, {k.lower(): v for k, v in handler.headers.items()}))
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", handler.path.split("?")[0])
        if match is None:
            return self._error(handler, 404, "RepoNotFound")
        repo_id, revision, filename = unquote(match[1]), unquote(match[2]), unquote(match[3])
        files = self.repos.get(repo_id)
        if files is None:
            return self._error(handler, 404, "RepoNotFound")
        if revision not in ("main", COMMIT):
            return self._error(handler, 404, "RevisionNotFound")
        if filename not in files:
            return self._error(handler, 404, "EntryNotFound")
        data = files[filename]
        status, start, end = 200, 0, len(data) - 1
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        if ranged and data:
            status, start = 206, int(ranged[1])
            end = min(int(ranged[2]) if ranged[2] else len(data) - 1, len(data) - 1)
        chunk = data[start : end + 1]
        handler.send_response(status)
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(chunk)))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        handler.end_headers()
        if body:
            handler.wfile.write(chunk)

    @staticmethod
    def _error(handler: BaseHTTPRequestHandler, status: int, code: str) -> None:
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Repo-Commit", COMMIT) if code == "EntryNotFound" else None
        handler.send_header("Content-Length", "0")
        handler.end_headers()
