"""`dsv4ctl collect`: a deployment's logs, from every node it ran on, in one bundle before teardown takes them.

`collect(request, out)` gathers from the sources the request names (Kubernetes through kubectl, a Ray
session, Docker containers, files and directories) into one `.tar.gz` with a manifest (`collect.model`);
every log is redacted as it streams in (`dsv4ctl.redaction`) and bounded (`--since`, `--tail`,
`--max-log-bytes`). A source that cannot be read becomes a manifest entry saying why; the bundle keeps
everything read, an interrupt included. `diagnose BUNDLE` reads it back as one deployment (dsv4ctl.group).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsv4ctl.collect.model import CollectRequest, CollectResult

# The request and manifest types (collect.model), the bundle's reader and writer (collect.bundle, with tarfile)
# load when used: `diagnose` asks whether its inputs are a bundle (dsv4ctl.group.detect, which reads
# collect.names) without them.
__all__ = ["CollectRequest", "CollectResult", "LogEntry", "Termination", "Unreadable", "collect"]
_MODEL = {"CollectRequest", "CollectResult", "LogEntry", "Termination", "Unreadable"}


def __getattr__(name: str) -> Any:
    if name in _MODEL:
        from dsv4ctl.collect import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def collect(request: CollectRequest, out: Path, step: Callable[[str], None] | None = None) -> CollectResult:
    """Gather every source of `request` into the bundle `out`; `step(label)` is called before each log."""
    from dsv4ctl.collect import kube, local
    from dsv4ctl.collect.bundle import BundleWriter
    from dsv4ctl.collect.model import CollectResult

    say = step or (lambda label: None)
    result = CollectResult(
        bundle=str(out), created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        bounds={"since": request.since, "tail": request.tail, "max_log_bytes": request.max_log_bytes},
    )
    bundle = BundleWriter(out)
    try:
        if request.k8s:
            kube.gather(request, bundle, result, say)
        if request.ray is not None:
            local.gather_ray(request, bundle, result, say)
        if request.docker:
            local.gather_docker(request, bundle, result, say)
        if request.paths:
            local.gather_paths(request, bundle, result, say)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        bundle.close(result.manifest())
    return result
