"""`dsv4ctl collect`: a deployment's logs, from every node it ran on, in one bundle before teardown takes them.

`collect(request, out)` gathers from the sources the request names (Kubernetes through kubectl, a Ray
session, Docker containers, files and directories) into one `.tar.gz` with a manifest (`collect.model`);
every log is redacted as it streams in (`dsv4ctl.redaction`) and bounded (`--since`, `--tail`,
`--max-log-bytes`). A source that cannot be read becomes a manifest entry saying why; the bundle keeps
everything read, an interrupt included (the log it cut short is listed as read in part). The bundle is written
whole or not at all (`dsv4ctl.files`); when nothing was gathered there is none. `diagnose BUNDLE` reads it back
as one deployment (dsv4ctl.group).
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


def collect(request: CollectRequest, out: Path, step: Callable[[str], None] | None = None, *,
            hint: str | None = None) -> CollectResult:
    """Gather every source of `request` into the bundle `out` (gzip-compressed unless it is named .tar); `step(label)`
    is called before each log. The bundle is written whole or not at all (`dsv4ctl.files.open_whole`): when nothing
    at all was gathered there is none (`result.bundle` is None); an `OSError` of the bundle is an `OutputError`
    with `hint`."""
    from dsv4ctl.collect.bundle import BundleWriter
    from dsv4ctl.collect.model import CollectResult
    from dsv4ctl.files import open_whole

    say = step or (lambda label: None)
    result = CollectResult(
        bundle=str(out), created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        bounds={"since": request.since, "tail": request.tail, "max_log_bytes": request.max_log_bytes},
    )
    try:
        with open_whole(out, hint=hint) as f:
            bundle = BundleWriter(f, compressed=not Path(out).name.endswith(".tar"))
            try:
                _gather(request, bundle, result, say)
            except BaseException:
                bundle.abandon()
                raise
            if not result.logs and not result.extra:
                bundle.abandon()
                raise _NothingGathered
            try:
                bundle.close(result.manifest())
            except KeyboardInterrupt:  # held back until the archive was ended: it is whole
                result.interrupted = True
    except _NothingGathered:
        result.bundle = None
    return result


class _NothingGathered(Exception):
    """Nothing was gathered: the bundle is not written."""


def _gather(request: CollectRequest, bundle: Any, result: CollectResult, say: Callable[[str], None]) -> None:
    """Every source into the bundle; an interrupt ends the gathering (`result.interrupted`), and the log it cut
    short is listed with what was read of it."""
    from dsv4ctl.collect import kube, local

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
        listed = {id(e) for e in result.logs}
        result.logs += [e for e in bundle.logs if id(e) not in listed]
