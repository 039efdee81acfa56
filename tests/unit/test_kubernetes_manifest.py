"""docs/kubernetes.md's manifest, checked by the real kubectl against Kubernetes 1.32's schema (tests/k8sschema.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from k8sschema import SchemaServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: it is the check")


def manifest() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/kubernetes.md holds one manifest"
    return blocks[0]


@pytest.fixture(scope="module")
def apply(tmp_path_factory):
    assert KUBECTL is not None
    kubectl = KUBECTL
    with SchemaServer(os.path.realpath(kubectl)) as server:
        config = server.kubeconfig(tmp_path_factory.mktemp("kube") / "config")

        def run(text: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "KUBECONFIG": str(config)}
            return subprocess.run([kubectl, "apply", "--dry-run=client", "--validate=strict", "-f", "-"], input=text,
                                  capture_output=True, text=True, env=env, timeout=60)

        run.server = server  # type: ignore[attr-defined]
        yield run


def test_the_manifest_is_valid_and_its_probes_use_serves_routes(apply):
    text = manifest()
    done = apply(text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deployment.apps/deepseek-v4 created (dry run)"
    assert any(r.startswith("/openapi/v2") for r in apply.server.requests)  # validated with the schema, not skipped
    from dsv4ctl.health.routes import LIVENESS, READINESS, STARTUP

    for probe, path in (("startupProbe", STARTUP), ("livenessProbe", LIVENESS), ("readinessProbe", READINESS)):
        assert re.search(rf"{probe}:\n\s+httpGet:\n\s+path: {re.escape(path)}\n", text), probe


@pytest.mark.parametrize(("change", "words"), [
    (("          livenessProbe:\n", "          livenessProbe:\n            bogusSeconds: 3\n"),
     'unknown field "bogusSeconds" in io.k8s.api.core.v1.Probe'),
    (("            periodSeconds: 10\n            timeoutSeconds: 2\n            failureThreshold: 3\n",
      "            periodSeconds: ten\n            timeoutSeconds: 2\n            failureThreshold: 3\n"),
     "invalid type for io.k8s.api.core.v1.Probe.periodSeconds"),
])
def test_the_check_refuses_what_the_schema_refuses(apply, change, words):
    old, new = change
    text = manifest()
    assert old in text
    done = apply(text.replace(old, new, 1))
    assert done.returncode != 0 and words in done.stderr, done.stderr
