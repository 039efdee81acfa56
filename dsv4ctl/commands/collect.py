"""`dsv4ctl collect`: a deployment's logs gathered into one bundle."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
from pathlib import Path

import typer

from dsv4ctl.errors import ExitCode


def collect_command(
    paths: list[str] | None = typer.Argument(None, metavar="PATHS", help="Log files and directories (dsv4ctl serve's logs, per-rank files)."),
    k8s: str | None = typer.Option(None, "--k8s", metavar="SELECTOR|POD|lws/NAME", help="Kubernetes pods: a label selector (app=vllm), a pod (a LeaderWorkerSet pod brings its group) or lws/NAME; through your kubectl."),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NAMESPACE", help="With --k8s: kubectl's namespace [default: the context's]."),
    context: str | None = typer.Option(None, "--context", metavar="CONTEXT", help="With --k8s: kubectl's context [default: the current one]."),
    ray: bool = typer.Option(False, "--ray", help="A Ray session's logs: `--ray [SESSION_DIR]`, the first PATH that is a Ray session directory [default: /tmp/ray/session_latest]."),
    docker: list[str] = typer.Option([], "--docker", metavar="NAME", help="A Docker container's logs and state (repeat for several)."),
    since: str | None = typer.Option(None, "--since", metavar="DURATION", help="kubectl/docker: only lines newer than this (30m, 2h)."),
    tail: int | None = typer.Option(None, "--tail", metavar="LINES", min=0, help="Only the last LINES lines of each log."),
    max_log_bytes: str = typer.Option("256MiB", "--max-log-bytes", metavar="SIZE", help="Largest log kept; a longer one keeps its first quarter and its end."),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="BUNDLE", help="The bundle to write: .tar.gz, or .tar uncompressed (faster to read back) [default: dsv4ctl-collect-<UTC time>.tar.gz here]."),
    kubectl: str = typer.Option("kubectl", "--kubectl", metavar="PATH", help="The kubectl to run."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON (schema_version 1) on stdout."),
) -> None:
    """Gather a deployment's logs from every node into one bundle (.tar.gz + manifest.json), secrets redacted.

    Kubernetes: every pod of the group, every container, the previous instance where it restarted, the pods'
    status (OOMKilled, exit codes) and the namespace's events. Read it back with `dsv4ctl diagnose BUNDLE`.
    Exit 0 when every source was read, 1 when some could not be (the bundle keeps what was; the manifest says why).
    """
    import time as _time

    from dsv4ctl.collect import CollectRequest, collect
    from dsv4ctl.errors import InputError, UsageError
    from dsv4ctl.render import emit_json, err_console, warning_line
    from dsv4ctl.units import parse_memory_flag

    if not (paths or k8s or ray or docker):
        raise UsageError("nothing to collect", hint="give log paths, --k8s SELECTOR, --ray [SESSION_DIR] or --docker NAME")
    if (namespace or context) and not k8s:
        raise UsageError("--namespace and --context go with --k8s")
    from dsv4ctl.collect.local import RAY_DEFAULT_SESSION, is_ray_session

    paths = list(paths or [])
    session = next((p for p in paths if is_ray_session(p)), RAY_DEFAULT_SESSION) if ray else None
    if session in paths:
        paths.remove(session)
    request = CollectRequest(
        paths=paths, k8s=k8s, namespace=namespace, context=context, ray=session, docker=list(docker),
        since=since, tail=tail, max_log_bytes=parse_memory_flag(max_log_bytes, what="--max-log-bytes"), kubectl=kubectl,
    )
    out = output or Path(f"dsv4ctl-collect-{_time.strftime('%Y%m%dT%H%M%SZ', _time.gmtime())}.tar.gz")
    done = [0]
    with err_console().status("collecting …", spinner="dots") as status:
        def step(label: str) -> None:
            done[0] += 1
            status.update(f"collecting: {done[0]} · {label}")

        result = collect(request, out, step)
    if json_out:
        emit_json(result.to_json())
    else:
        print(result.bundle)
        err_console().print(f"{len(result.logs)} logs in {result.bundle}", markup=False)
    for problem in result.unreadable:
        warning_line(f"not collected: {problem.source}: {problem.error}")
    if result.interrupted:
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if result.unreadable:
        first = result.unreadable[0]
        if not result.logs:
            raise InputError(f"nothing collected: {first.error}", hint="the manifest in the bundle lists every source and why")
        raise typer.Exit(int(ExitCode.ERROR))
