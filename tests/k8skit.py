"""A stand-in Kubernetes API server on 127.0.0.1 for the real kubectl.

It answers what `kubectl get pods|pod|events -o json` and `kubectl logs [--previous] --timestamps` ask for
(kubectl 1.32: `/version`, the discovery documents `/api`, `/apis`, `/api/v1`, then the core/v1 paths of
pods, a pod, its `log` subresource with `container`, `previous`, `timestamps`, `tailLines`, `sinceSeconds`,
and events), in the shapes of the API's own objects (PodList, Pod, EventList, Status; the recorded objects
under tests/fixtures/k8s/). Nothing else is served; every request is recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "k8s"

API_RESOURCES = {
    "kind": "APIResourceList", "groupVersion": "v1",
    "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "categories": ["all"]},
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "shortNames": ["ev"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "shortNames": ["ns"], "verbs": ["get", "list"]},
    ],
}


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class StandIn:
    """`pods`: Pod objects; `logs[(pod, container, previous)]`: the text of that instance's log (each line
    prefixed with an RFC 3339 time, as the kubelet does, when `timestamps=true`); `events`: Event objects.
    `forbidden`: every request answered 403 (no RBAC); `gone`: pods whose log requests answer 404 (deleted
    after the list)."""

    def __init__(self, pods: list[dict], logs: dict[tuple[str, str, bool], str], events: list[dict],
                 namespace: str = "serving") -> None:
        self.pods, self.logs, self.events, self.namespace = pods, logs, events, namespace
        self.forbidden = False
        self.gone: set[str] = set()
        self.requests: list[str] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- cluster: {{server: \"http://127.0.0.1:{self.port}\", insecure-skip-tls-verify: true}}\n  name: standin\n"
            f"contexts:\n- context: {{cluster: standin, user: operator, namespace: {self.namespace}}}\n  name: standin\n"
            "current-context: standin\n"
            "users:\n- name: operator\n  user: {token: standin-token}\n"
        )
        return path

    def _handler(self):
        kit = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _send(self, code: int, body: dict | str, content_type: str = "application/json") -> None:
                data = (json.dumps(body) if isinstance(body, dict) else body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                kit.requests.append(self.path)
                parts = [p for p in url.path.split("/") if p]
                if url.path == "/version":
                    return self._send(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "platform": "linux/amd64"})
                if url.path == "/api":
                    return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
                if url.path == "/apis":
                    return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
                if url.path == "/api/v1":
                    return self._send(200, API_RESOURCES)
                if kit.forbidden:
                    return self._send(403, status(403, "Forbidden", 'pods is forbidden: User "operator" cannot list resource "pods" in API group "" in the namespace "serving"'))
                if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 5:
                    return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                ns, resource, rest = parts[3], parts[4], parts[5:]
                if resource == "events" and not rest:
                    return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "7781"},
                                            "items": [e for e in kit.events if e["metadata"]["namespace"] == ns]})
                if resource != "pods":
                    return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                pods = [p for p in kit.pods if p["metadata"]["namespace"] == ns]
                if not rest:
                    wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if "=" in kv)
                    items = [p for p in pods if all(p["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7781"}, "items": items})
                name = rest[0]
                pod = next((p for p in pods if p["metadata"]["name"] == name), None)
                if pod is None or (len(rest) > 1 and name in kit.gone):
                    return self._send(404, status(404, "NotFound", f'pods "{name}" not found'))
                if len(rest) == 1:
                    return self._send(200, pod)
                if rest[1] != "log":
                    return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
                container = query.get("container") or pod["spec"]["containers"][0]["name"]
                previous = query.get("previous") == "true"
                text = kit.logs.get((name, container, previous))
                if text is None:
                    which = "previous terminated container" if previous else "container"
                    return self._send(400, status(400, "BadRequest", f'{which} "{container}" in pod "{name}" not found'))
                lines = text.splitlines(keepends=True)
                if "tailLines" in query:
                    lines = lines[-int(query["tailLines"]):] if int(query["tailLines"]) else []
                if query.get("timestamps") == "true":
                    lines = [f"2026-12-01T10:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z {ln}" for i, ln in enumerate(lines)]
                return self._send(200, "".join(lines), "text/plain")

        return Handler


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())
