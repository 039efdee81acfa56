"""A stand-in Kubernetes API server that gives the real kubectl the API's schema, for `kubectl apply --dry-run=client
--validate=strict` without a cluster and without the network.

kubectl (1.32) validates on the client with the OpenAPI v2 document, which it asks of `/openapi/v2` in protobuf only
(gnostic's `openapi.v2.Document`), after asking `/openapi/v3` whether the server validates fields itself (an index
without paths says no). The protobuf classes are built from the very descriptor kubectl is compiled with: the
serialized `openapiv2/OpenAPIv2.proto` FileDescriptorProto, read out of the kubectl binary.

The schema is Kubernetes 1.32's, as the `kubernetes-validate` package (PyPI) ships it
(`kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json`: the API's OpenAPI definitions in
JSON Schema form, types made nullable). `write_fixture` keeps the definitions a Deployment reaches, put back in
OpenAPI v2 form (`#/definitions/` references, the nullable types undone, `x-kubernetes-group-version-kind` from
the `apiVersion` and `kind` each top-level kind declares), in tests/fixtures/k8s/openapi-v1.32-apps-v1.json.gz:

    python tests/k8sschema.py PATH/TO/kubernetes_validate-1.37.0-py3-none-any.whl
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "k8s" / "openapi-v1.32-apps-v1.json.gz"
DEFINITIONS_IN_WHEEL = "kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json"
ROOTS = ("io.k8s.api.apps.v1.Deployment",)
PROTO_NAME = b"openapiv2/OpenAPIv2.proto"


def _v2(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, list):
                rest = [t for t in value if t != "null"]
                value = rest[0] if len(rest) == 1 else rest
            elif key == "$ref" and isinstance(value, str):
                value = value.replace("#/$defs/", "#/definitions/")
            out[key] = _v2(value)
        return out
    if isinstance(node, list):
        return [_v2(x) for x in node]
    return node


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[1]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()


def write_fixture(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(DEFINITIONS_IN_WHEEL))["$defs"]
    keep: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        schema = _v2(defs[name])
        props = schema.get("properties", {})
        api, kind = props.get("apiVersion", {}).get("enum"), props.get("kind", {}).get("enum")
        if api and kind and len(api) == 1 and len(kind) == 1:
            group, _, version = api[0].rpartition("/")
            schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind[0], "version": version}]
        keep[name] = schema
        todo += sorted(_refs(schema) - keep.keys())
    FIXTURE.write_bytes(gzip.compress(json.dumps(keep, sort_keys=True).encode(), mtime=0))


def kubectl_descriptor(kubectl: str) -> bytes:
    """The serialized FileDescriptorProto of gnostic's OpenAPIv2.proto inside the kubectl binary."""
    data = Path(kubectl).read_bytes()
    start = data.find(b"\n" + bytes([len(PROTO_NAME)]) + PROTO_NAME)
    if start < 0:
        raise LookupError(f"{kubectl} holds no {PROTO_NAME.decode()} descriptor")

    def varint(i: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, i

    i = start
    while True:  # FileDescriptorProto's fields are 1 to 14, each a varint or length-delimited
        tag, j = varint(i)
        if not 1 <= tag >> 3 <= 14 or tag & 7 not in (0, 2):
            return data[start:i]
        size, j = varint(j)
        i = j + (size if tag & 7 == 2 else 0)


def document(kubectl: str, definitions: dict[str, Any]) -> bytes:
    """The OpenAPI v2 document of `definitions`, encoded as kubectl's own protobuf classes encode it."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf import any_pb2  # noqa: F401 - registers google/protobuf/any.proto in the default pool

    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(kubectl_descriptor(kubectl))
    pool = descriptor_pool.DescriptorPool()
    any_proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName("google/protobuf/any.proto").CopyToProto(any_proto)
    pool.Add(any_proto)
    pool.Add(proto)
    classes = message_factory.GetMessages([any_proto, proto], pool=pool)
    doc = classes["openapi.v2.Document"](swagger="2.0")
    doc.info.title, doc.info.version = "Kubernetes", "v1.32.0"
    for name, schema in sorted(definitions.items()):
        named = doc.definitions.additional_properties.add(name=name)
        _fill(named.value, schema)
    return doc.SerializeToString()


def _yaml(value: Any) -> str:
    return json.dumps(value)  # JSON is YAML: what gnostic's Any.yaml holds


def _fill(out: Any, schema: dict[str, Any]) -> None:
    for key, value in schema.items():
        if key == "$ref":
            out._ref = value
        elif key in ("description", "format", "title", "pattern"):
            setattr(out, key, value)
        elif key == "type":
            out.type.value.extend([value] if isinstance(value, str) else value)
        elif key == "required":
            out.required.extend(value)
        elif key == "enum":
            for item in value:
                out.enum.add(yaml=_yaml(item))
        elif key == "items" and isinstance(value, dict):
            _fill(out.items.schema.add(), value)
        elif key == "properties":
            for name, sub in value.items():
                _fill(out.properties.additional_properties.add(name=name).value, sub)
        elif key == "additionalProperties":
            if isinstance(value, bool):
                out.additional_properties.boolean = value
            else:
                _fill(out.additional_properties.schema, value)
        elif key == "allOf":
            for sub in value:
                _fill(out.all_of.add(), sub)
        elif key == "default":
            out.default.yaml = _yaml(value)
        elif key.startswith("x-"):
            out.vendor_extension.add(name=key).value.yaml = _yaml(value)


class SchemaServer:
    """kubectl's view of an API server: its version, discovery of apps/v1 deployments, the OpenAPI v2 document
    (protobuf), an OpenAPI v3 index without paths (no server-side field validation), and 404 for every object (so
    `apply` creates). Every request is recorded."""

    def __init__(self, kubectl: str) -> None:
        definitions = json.loads(gzip.decompress(FIXTURE.read_bytes()))
        self.openapi = document(kubectl, definitions)
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append(self.path)
                path = self.path.split("?", 1)[0]
                if path == "/openapi/v2":
                    self._send(200, server.openapi, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
                    return
                found = ANSWERS.get(path)
                if found is None:
                    found = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                             "code": 404, "message": f"{path} not found"}
                self._send(200 if "code" not in found else 404, json.dumps(found).encode(), "application/json")

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> SchemaServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "u", "namespace": "default"}}],
            "users": [{"name": "u", "user": {}}],
        }))
        return path


ANSWERS: dict[str, dict[str, Any]] = {
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
    "/openapi/v3": {"paths": {}},
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis/apps/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1", "resources": [
        {"name": "deployments", "singularName": "deployment", "namespaced": True, "kind": "Deployment",
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": ["deploy"]}]},
}


if __name__ == "__main__":
    write_fixture(Path(sys.argv[1]))
    print(FIXTURE, FIXTURE.stat().st_size)
