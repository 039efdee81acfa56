"""`dsv4ctl collect`: a deployment's logs gathered into one bundle."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
from pathlib import Path

import typer

from dsv4ctl.errors import ExitCode

OUTPUT_HINT = "choose another -o (a .tar.gz, or .tar, in a directory you can write)"


def collect_command(
    paths: list[str] | None = typer.Argument(None, metavar="PATHS", help="Log files and directories (dsv4ctl serve's logs, per-rank files; compressed ones are read as they are)."),
    k8s: str | None = typer.Option(None, "--k8s", metavar="SELECTOR|POD|lws/NAME", help="Kubernetes pods: a label selector (app=vllm), a pod (a LeaderWorkerSet pod brings its group) or lws/NAME; through your kubectl."),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NAMESPACE", help="With --k8s: kubectl's namespace [default: the context's]."),
    context: str | None = typer.Option(None, "--context", metavar="CONTEXT", help="With --k8s: kubectl's context [default: the current one]."),
    ray: str | None = typer.Option(None, "--ray", metavar="SESSION_DIR", help="A Ray session's logs: its directory, e.g. --ray /tmp/ray/session_latest (on each node where Ray runs)."),
    docker: list[str] = typer.Option([], "--docker", metavar="NAME", help="A Docker container's logs and state (repeat for several)."),
    since: str | None = typer.Option(None, "--since", metavar="DURATION", help="kubectl/docker: only lines newer than this (30m, 2h)."),
    tail: int | None = typer.Option(None, "--tail", metavar="LINES", help="Only the last LINES lines of each log (0 or more)."),
    max_log_bytes: str = typer.Option("256MiB", "--max-log-bytes", metavar="SIZE", help="Largest log kept; a longer one keeps its first quarter and its end."),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="BUNDLE", help="The bundle to write: NAME.tar.gz (or .tgz), or NAME.tar uncompressed (faster to read back); written whole or not at all [default: dsv4ctl-collect-<UTC time>.tar.gz here]."),
    kubectl: str = typer.Option("kubectl", "--kubectl", metavar="PATH", help="The kubectl to run."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON (schema_version 1) on stdout."),
) -> None:
    """Gather a deployment's logs from every node into one bundle (.tar.gz + manifest.json), secrets redacted.

    Kubernetes: every pod of the group, every container, the previous instance where it restarted, the pods'
    status (OOMKilled, exit codes) and the namespace's events. Read it back with `dsv4ctl diagnose BUNDLE`.
    Exit 0 when every source was read, 1 when some could not be (the bundle keeps what was; the manifest says why)
    or nothing was (no bundle is written), 130 when interrupted (the bundle keeps what was read).
    """
    import time as _time

    from dsv4ctl.collect import CollectRequest, collect
    from dsv4ctl.collect.names import BUNDLE_SUFFIXES
    from dsv4ctl.errors import InputError, UsageError
    from dsv4ctl.files import check_target
    from dsv4ctl.render import emit_json, err_console, warning_line
    from dsv4ctl.units import parse_memory_flag

    if not (paths or k8s or ray or docker):
        raise UsageError("nothing to collect", hint="give log paths, --k8s SELECTOR, --ray SESSION_DIR or --docker NAME")
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: a number of lines, 0 or more", hint="dsv4ctl collect --tail 5000 …")
    if (namespace or context) and not k8s:
        raise UsageError("--namespace and --context go with --k8s")
    if ray is not None and ray.startswith("-"):
        raise UsageError(f"--ray takes the Ray session's directory, not {ray!r}",
                         hint="dsv4ctl collect --ray /tmp/ray/session_latest …")
    request = CollectRequest(
        paths=list(paths or []), k8s=k8s, namespace=namespace, context=context, ray=ray, docker=list(docker),
        since=since, tail=tail, max_log_bytes=parse_memory_flag(max_log_bytes, what="--max-log-bytes"), kubectl=kubectl,
    )
    out = output or Path(f"dsv4ctl-collect-{_time.strftime('%Y%m%dT%H%M%SZ', _time.gmtime())}.tar.gz")
    # Before anything is gathered: a bundle that cannot be written, or would be misnamed, is refused now.
    in_place = check_target(out, hint=OUTPUT_HINT)
    if not in_place and not out.name.endswith(BUNDLE_SUFFIXES):
        stem = out.name.split(".")[0] or "bundle"
        raise UsageError(f"-o {out}: a bundle is a gzip-compressed tar, named .tar.gz or .tgz (or .tar, uncompressed)",
                         hint=f"-o {out.with_name(stem + '.tar.gz')}: `dsv4ctl diagnose` knows a bundle by that name")
    done = [0]
    with err_console().status("collecting …", spinner="dots") as status:
        def step(label: str) -> None:
            done[0] += 1
            status.update(f"collecting: {done[0]} · {label}")

        result = collect(request, out, step, hint=OUTPUT_HINT)
    for problem in result.unreadable:
        warning_line(f"not collected: {problem.source}: {problem.error}")
    if result.bundle is None:
        if result.interrupted:
            raise typer.Exit(int(ExitCode.INTERRUPTED))
        first = result.unreadable[0].error if result.unreadable else "no logs"
        raise InputError(f"nothing collected, no bundle written: {first}",
                         hint="each source above says why it was not read")
    # The bundle on stdout itself (-o /dev/stdout): nothing else may go there.
    bundle_on_stdout = in_place and _is_stdout(out)
    if json_out and not bundle_on_stdout:
        emit_json(result.to_json())
    elif not json_out and not bundle_on_stdout:
        print(result.bundle)
    if not json_out:
        logs = len(result.logs)
        err_console().print(f"{logs} log{'' if logs == 1 else 's'} in {result.bundle}"
                            + (" (interrupted: what was read before is kept)" if result.interrupted else ""), markup=False)
    if result.interrupted:
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if result.unreadable:
        if not result.logs:
            raise InputError("no log collected", hint="the manifest in the bundle lists every source and why")
        raise typer.Exit(int(ExitCode.ERROR))


def _is_stdout(path: Path) -> bool:
    import os
    import sys

    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):
        return False
